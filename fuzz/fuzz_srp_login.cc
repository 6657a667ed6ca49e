// SPDX-License-Identifier: MIT
// fuzz/fuzz_srp_login.cc - libFuzzer target: the SRP login codec (srp/proto.cc) against
// arbitrary CM private data: parse_login_req (what the target reads from a CM REQ, in the
// IB CM form or the RDMA/CM form), parse_login_rsp and parse_login_rej (what the initiator
// reads from a REP or REJ).
//
// Input: the private data, whole. Invariants: a parser that refuses leaves its output
// alone; parse_login_req refuses fewer than 56 bytes as Short and accepts exactly the two
// forms' opcode positions; whatever parses is built again and re-parses to the same fields
// (the login request through the 56-byte RDMA/CM form our initiator sends).
//
// Seeds: ULP_FUZZ_SEEDS=<dir> makes the binary write Linux's logins there and exit
// (scripts/fuzz.sh does this).
#include "srp/proto.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace ulp::srp;

namespace
{

[[noreturn]] void fail(const char *what)
{
	std::fprintf(stderr, "fuzz_srp_login: %s\n", what);
	__builtin_trap();
}

void check(bool ok, const char *what)
{
	if (!ok)
		fail(what);
}

bool same(const LoginReq &a, const LoginReq &b)
{
	return a.tag == b.tag && a.req_it_iu_len == b.req_it_iu_len &&
	       a.req_buf_fmt == b.req_buf_fmt && a.req_flags == b.req_flags &&
	       a.imm_data_offset == b.imm_data_offset &&
	       a.initiator_port_id == b.initiator_port_id && a.target_port_id == b.target_port_id;
}

void run_login_req(std::span<const uint8_t> pd)
{
	LoginReq sentinel;
	sentinel.tag = 0x5a5a5a5a5a5a5a5au;
	sentinel.req_it_iu_len = 0xdeadbeef;
	LoginReq r = sentinel;
	const LoginError e = parse_login_req(pd, &r);
	const bool ib = pd.size() >= kLoginReqLen && pd[0] == LOGIN_REQ;
	const bool rdma = pd.size() >= kLoginReqRdmaLen && pd[11] == LOGIN_REQ;
	if (e != LoginError::None) {
		check(!ib && !rdma, "a login request in either form refused");
		check(
		    e == (pd.size() < kLoginReqRdmaLen ? LoginError::Short : LoginError::BadOpcode),
		    "wrong refusal");
		check(same(r, sentinel), "a refused login request wrote its output");
		return;
	}
	check(ib || rdma, "accepted a login request in neither form");
	// The fields came from where the form puts them.
	uint64_t tag;
	std::memcpy(&tag, pd.data() + (ib ? 8 : 0), 8);
	check(r.tag == tag, "tag not the raw bytes");

	std::array<uint8_t, kLoginReqRdmaLen> b;
	build_login_req_rdma(r, b);
	check(b[11] == LOGIN_REQ, "built request without its opcode");
	LoginReq again;
	check(parse_login_req(b, &again) == LoginError::None, "built request refused");
	check(same(r, again), "login request round trip differs");
	if (!ib) {
		// The RDMA/CM form in, the same form out: the same bytes bar the reserved tail.
		check(std::memcmp(b.data(), pd.data(), 50) == 0,
		      "RDMA/CM form not rebuilt as sent");
	}
}

void run_login_rsp(std::span<const uint8_t> pd)
{
	LoginRsp r;
	r.tag = 0x5a5a5a5a5a5a5a5au;
	if (!parse_login_rsp(pd, &r)) {
		check(pd.size() < kLoginRspLen || pd[0] != LOGIN_RSP, "login response refused");
		check(r.tag == 0x5a5a5a5a5a5a5a5au, "a refused login response wrote its output");
		return;
	}
	std::array<uint8_t, kLoginRspLen> b;
	build_login_rsp(r, b);
	// Every field is in the first 27 bytes; the rest is reserved and built zero.
	check(std::memcmp(b.data() + 4, pd.data() + 4, 23) == 0, "login response not rebuilt");
	LoginRsp again;
	check(parse_login_rsp(b, &again), "built login response refused");
	check(again.req_lim_delta == r.req_lim_delta && again.tag == r.tag &&
	          again.max_it_iu_len == r.max_it_iu_len &&
	          again.max_ti_iu_len == r.max_ti_iu_len && again.buf_fmt == r.buf_fmt &&
	          again.rsp_flags == r.rsp_flags,
	      "login response round trip differs");
}

void run_login_rej(std::span<const uint8_t> pd)
{
	LoginRej r;
	r.tag = 0x5a5a5a5a5a5a5a5au;
	if (!parse_login_rej(pd, &r)) {
		check(pd.size() < kLoginRejLen || pd[0] != LOGIN_REJ, "login reject refused");
		check(r.tag == 0x5a5a5a5a5a5a5a5au, "a refused login reject wrote its output");
		return;
	}
	check(rej_reason_name(r.reason) != nullptr, "reason without a name");
	std::array<uint8_t, kLoginRejLen> b;
	build_login_rej(r, b);
	check(std::memcmp(b.data() + 4, pd.data() + 4, 12) == 0 &&
	          std::memcmp(b.data() + 24, pd.data() + 24, 2) == 0,
	      "login reject not rebuilt");
	LoginRej again;
	check(parse_login_rej(b, &again), "built login reject refused");
	check(again.reason == r.reason && again.tag == r.tag && again.buf_fmt == r.buf_fmt,
	      "login reject round trip differs");
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
	// ib_srp over RDMA/CM: DIRECT|INDIRECT, immediate data at 68, it_iu_len 8260.
	LoginReq r;
	r.req_it_iu_len = 8260;
	r.req_buf_fmt = BUF_FMT_DIRECT | BUF_FMT_INDIRECT;
	r.req_flags = IMMED_REQUESTED | MULTICHAN_MULTI;
	r.imm_data_offset = 68;
	r.initiator_port_id = make_port_id(1, 0x0002c90300a1b2c3u);
	r.target_port_id = make_port_id(0x0002c90300001111u, 0x0002c90300002222u);
	std::array<uint8_t, kLoginReqRdmaLen> rdma;
	build_login_req_rdma(r, rdma);
	write_seed(dir, "login-req-rdma", rdma);

	// The IB CM form in a 92-byte REQ.
	std::vector<uint8_t> ib(92, 0);
	ib[0] = LOGIN_REQ;
	ib[19] = 0x14; // it_iu_len 276
	ib[18] = 0x01;
	ib[25] = 0x06;
	ib[26] = MULTICHAN_SINGLE;
	std::memcpy(&ib[32], r.initiator_port_id.data(), 16);
	std::memcpy(&ib[48], r.target_port_id.data(), 16);
	write_seed(dir, "login-req-ib", ib);

	LoginRsp rsp;
	rsp.req_lim_delta = 127;
	rsp.max_it_iu_len = rsp.max_ti_iu_len = 8260;
	rsp.buf_fmt = BUF_FMT_DIRECT | BUF_FMT_INDIRECT;
	rsp.rsp_flags = LOGIN_RSP_IMMED_SUPP | LOGIN_RSP_MAINTAINED;
	std::array<uint8_t, kLoginRspLen> rb;
	build_login_rsp(rsp, rb);
	write_seed(dir, "login-rsp", rb);

	LoginRej rej;
	rej.reason = REJ_IT_IU_LEN_TOO_LARGE;
	rej.buf_fmt = BUF_FMT_DIRECT | BUF_FMT_INDIRECT;
	std::array<uint8_t, kLoginRejLen> jb;
	build_login_rej(rej, jb);
	write_seed(dir, "login-rej", jb);
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
	const std::span<const uint8_t> pd(data, size);
	run_login_req(pd);
	run_login_rsp(pd);
	run_login_rej(pd);
	return 0;
}
