// SPDX-License-Identifier: MIT
// fuzz/fuzz_srp_rsp.cc - libFuzzer target: what the SRP initiator parses from a target's
// SEND (srp/proto.cc): parse_rsp, parse_cred_req, parse_aer_req, parse_t_logout and
// parse_tag_iu.
//
// Input: the IU, whole (libFuzzer's buffer ends where it ends: ASan sees any read past
// it). Invariants: a refused IU is short, of another opcode or (SRP_RSP, SRP_AER_REQ) has
// lengths past its end; a parsed SRP_RSP's response data starts at 36 and its sense right
// after, both inside the IU, each as long as its field says when its VALID bit is set and
// empty when not; the AER sense likewise. Whatever parses is built again and re-parses to
// the same fields (SRP_RSP's VALID bits then follow the spans: a VALID bit on an empty
// span is not rebuilt).
//
// Seeds: ULP_FUZZ_SEEDS=<dir> makes the binary write ib_srpt's IUs there and exit
// (scripts/fuzz.sh does this).
#include "core/byteorder.h"
#include "srp/proto.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace ulp::srp;
using ulp::get_be32;

namespace
{

[[noreturn]] void fail(const char *what)
{
	std::fprintf(stderr, "fuzz_srp_rsp: %s\n", what);
	__builtin_trap();
}

void check(bool ok, const char *what)
{
	if (!ok)
		fail(what);
}

bool same_bytes(std::span<const uint8_t> a, std::span<const uint8_t> b)
{
	return a.size() == b.size() &&
	       (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}

void run_rsp(std::span<const uint8_t> iu)
{
	Rsp r;
	if (!parse_rsp(iu, &r)) {
		if (iu.size() >= kRspLen && iu[0] == RSP) {
			// Refused only for lengths past the IU (64-bit sum).
			const uint8_t f = iu[18];
			const uint64_t need = kRspLen +
			                      uint64_t{f & RSP_RSPVALID ? get_be32(&iu[32]) : 0u} +
			                      uint64_t{f & RSP_SNSVALID ? get_be32(&iu[28]) : 0u};
			check(need > iu.size(), "SRP_RSP refused with lengths inside the IU");
		}
		return;
	}
	check(iu.size() >= kRspLen && iu[0] == RSP, "parsed an SRP_RSP that is not one");
	check(r.flags == iu[18] && r.status == iu[19], "flags or status");
	const size_t resp_len = r.flags & RSP_RSPVALID ? get_be32(&iu[32]) : 0;
	const size_t sense_len = r.flags & RSP_SNSVALID ? get_be32(&iu[28]) : 0;
	check(r.resp_data.size() == resp_len && r.sense.size() == sense_len,
	      "span lengths not the fields");
	check(r.resp_data.data() == iu.data() + kRspLen &&
	          r.sense.data() == iu.data() + kRspLen + resp_len,
	      "response data or sense misplaced");
	check(kRspLen + resp_len + sense_len <= iu.size(), "spans past the IU");

	std::vector<uint8_t> b(kRspLen + resp_len + sense_len);
	check(build_rsp(r, b) == b.size(), "a parsed SRP_RSP does not build");
	std::vector<uint8_t> less(b.size() - 1);
	check(build_rsp(r, less) == 0, "SRP_RSP built into a buffer too small");
	Rsp again;
	check(parse_rsp(b, &again), "a built SRP_RSP is refused");
	uint8_t flags = r.flags & ~(RSP_RSPVALID | RSP_SNSVALID);
	flags |= r.resp_data.empty() ? 0 : RSP_RSPVALID;
	flags |= r.sense.empty() ? 0 : RSP_SNSVALID;
	check(again.tag == r.tag && again.req_lim_delta == r.req_lim_delta &&
	          again.sol_not == r.sol_not && again.flags == flags && again.status == r.status &&
	          again.data_out_res_cnt == r.data_out_res_cnt &&
	          again.data_in_res_cnt == r.data_in_res_cnt &&
	          same_bytes(again.resp_data, r.resp_data) && same_bytes(again.sense, r.sense),
	      "SRP_RSP round trip differs");
}

void run_cred_req(std::span<const uint8_t> iu)
{
	CredReq c;
	if (!parse_cred_req(iu, &c)) {
		check(iu.size() < kCredReqLen || iu[0] != CRED_REQ, "SRP_CRED_REQ refused");
		return;
	}
	uint8_t b[kCredReqLen];
	check(build_cred_req(c, b) == kCredReqLen, "SRP_CRED_REQ does not build");
	check(build_cred_req(c, std::span<uint8_t>(b, kCredReqLen - 1)) == 0,
	      "SRP_CRED_REQ built short");
	check(b[1] == iu[1] && std::memcmp(b + 4, iu.data() + 4, 12) == 0,
	      "SRP_CRED_REQ not rebuilt as sent");
	CredReq again;
	check(parse_cred_req(b, &again) && again.tag == c.tag &&
	          again.req_lim_delta == c.req_lim_delta && again.sol_not == c.sol_not,
	      "SRP_CRED_REQ round trip differs");
}

void run_aer_req(std::span<const uint8_t> iu)
{
	AerReq a;
	if (!parse_aer_req(iu, &a)) {
		if (iu.size() >= kAerReqLen && iu[0] == AER_REQ)
			check(uint64_t{kAerReqLen} + get_be32(&iu[28]) > iu.size(),
			      "SRP_AER_REQ refused with its sense inside");
		return;
	}
	check(a.sense.size() == get_be32(&iu[28]) && a.sense.data() == iu.data() + kAerReqLen &&
	          kAerReqLen + a.sense.size() <= iu.size(),
	      "AER sense misplaced");
	check(std::memcmp(a.lun, iu.data() + 20, 8) == 0 && a.req_lim_delta == get_be32(&iu[4]),
	      "AER fields");
}

void run_t_logout(std::span<const uint8_t> iu)
{
	TLogout t;
	if (!parse_t_logout(iu, &t)) {
		check(iu.size() < kLogoutLen || iu[0] != T_LOGOUT, "SRP_T_LOGOUT refused");
		return;
	}
	uint8_t b[kLogoutLen];
	check(build_t_logout(t, b) == kLogoutLen, "SRP_T_LOGOUT does not build");
	check(std::memcmp(b + 4, iu.data() + 4, 12) == 0, "SRP_T_LOGOUT not rebuilt as sent");
	TLogout again;
	check(parse_t_logout(b, &again) && again.tag == t.tag && again.reason == t.reason,
	      "SRP_T_LOGOUT round trip differs");
}

void run_tag_iu(std::span<const uint8_t> iu)
{
	for (uint8_t op : {uint8_t(CRED_RSP), uint8_t(AER_RSP), uint8_t(I_LOGOUT)}) {
		uint64_t tag = 0x5a5a5a5a5a5a5a5au;
		if (!parse_tag_iu(iu, op, &tag)) {
			check(iu.size() < kLogoutLen || iu[0] != op, "tag IU refused");
			check(tag == 0x5a5a5a5a5a5a5a5au, "a refused tag IU wrote its output");
			continue;
		}
		uint8_t b[kLogoutLen];
		check(build_tag_iu(op, tag, b) == kLogoutLen, "tag IU does not build");
		check(b[0] == op && std::memcmp(b + 8, iu.data() + 8, 8) == 0, "tag not as sent");
		uint64_t again = 0;
		check(parse_tag_iu(b, op, &again) && again == tag, "tag IU round trip differs");
	}
	check(iu_opcode(iu) == (iu.empty() ? -1 : iu[0]), "iu_opcode");
}

void write_seed(const std::string &dir, const char *name, std::span<const uint8_t> b)
{
	std::string path = dir + "/" + name;
	if (FILE *f = std::fopen(path.c_str(), "wb")) {
		std::fwrite(b.data(), 1, b.size(), f);
		std::fclose(f);
	}
}

void write_seeds(const std::string &dir)
{
	std::vector<uint8_t> out(256);
	// ib_srpt's CHECK CONDITION: ILLEGAL REQUEST, INVALID COMMAND OPERATION CODE.
	const uint8_t sense[18] = {0x70, 0, 0x05, 0, 0, 0, 0, 0x0a, 0, 0, 0, 0, 0x20};
	Rsp r;
	r.tag = 42;
	r.req_lim_delta = 1;
	r.status = 0x02;
	r.flags = RSP_DIUNDER;
	r.data_in_res_cnt = 4096;
	r.sense = sense;
	write_seed(dir, "rsp-check-condition", std::span(out).first(build_rsp(r, out)));
	// A task management answer: 4 bytes of response data.
	const uint8_t rd[4] = {0, 0, 0, TM_SUCCEEDED};
	r = Rsp{};
	r.tag = 43;
	r.resp_data = rd;
	write_seed(dir, "rsp-tm", std::span(out).first(build_rsp(r, out)));

	CredReq c;
	c.req_lim_delta = 16;
	write_seed(dir, "cred-req", std::span(out).first(build_cred_req(c, out)));
	TLogout t;
	t.reason = 1;
	write_seed(dir, "t-logout", std::span(out).first(build_t_logout(t, out)));
	write_seed(dir, "aer-rsp", std::span(out).first(build_tag_iu(AER_RSP, 7, out)));

	// SRP_AER_REQ (no builder: the target never sends one): LUN 1, 18 bytes of sense.
	std::vector<uint8_t> aer(kAerReqLen, 0);
	aer[0] = AER_REQ;
	aer[7] = 1;
	aer[21] = 1;
	aer[31] = sizeof(sense);
	aer.insert(aer.end(), sense, sense + sizeof(sense));
	write_seed(dir, "aer-req", aer);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	if (const char *dir = std::getenv("ULP_FUZZ_SEEDS")) {
		write_seeds(dir);
		std::exit(0);
	}
	return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const std::span<const uint8_t> iu(data, size);
	run_rsp(iu);
	run_cred_req(iu);
	run_aer_req(iu);
	run_t_logout(iu);
	run_tag_iu(iu);
	return 0;
}
