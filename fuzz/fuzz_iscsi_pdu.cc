// SPDX-License-Identifier: MIT
// fuzz/fuzz_iscsi_pdu.cc - libFuzzer target: the iSCSI PDU codec against arbitrary peer
// bytes (iscsi/pdu.cc: PduReader, parse_pdu, parse_ahs, the typed decoders).
//
// Input layout: byte 0 selects the mode, the rest is the stream.
//	bit 0      header digests on
//	bit 1      data digests on
//	bit 2      MaxRecvDataSegmentLength 512 (else 8192); the reader's hard cap is 65536
//	bit 3      structured: the rest is PDU records (below) that the harness frames with
//	           correct lengths, padding and digests, so that the fuzzer reaches past the
//	           digest checks; otherwise the rest is the raw stream
//	bit 4      zero-copy reading (want/commit) instead of feed
//	bits 5-7   chunking: the stream reaches the reader in pieces of 1 + (k * 37) % 211 bytes
// A structured record: 48 BHS bytes, one byte AHS words (0..64), two bytes data length
// (big-endian, 0..4096), then the AHS and data bytes (short records end the input); a
// record whose first BHS byte has bit 7 set keeps its lengths as given (digests are still
// right for the bytes given).
// Every PDU the reader produces is decoded into its typed header, re-encoded, and decoded
// again: the two must agree. The same stream is then parsed as iSER receive buffers
// (parse_pdu, unpadded, no digests).
//
// Seeds: ULP_FUZZ_SEEDS=<dir> makes the binary write a few well-formed streams there and
// exit (scripts/fuzz.sh does this).
#include "core/crc32c.h"
#include "iscsi/pdu.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace ulp;
using namespace ulp::iscsi;

namespace
{

[[noreturn]] void die(const char *what)
{
	std::fprintf(stderr, "fuzz_iscsi_pdu: %s\n", what);
	std::abort();
}

template <class H> void check_one(const Pdu &p)
{
	H h{}, again{};
	if (!decode(p.bhs, &h))
		die("decode refused its own opcode");
	Bhs b;
	encode(h, b);
	if (!decode(b, &again) || !(again == h))
		die("decode(encode(h)) != h");
}

void check_pdu(const Pdu &p)
{
	if (p.bhs.size() != kBhsLen)
		die("BHS view not 48 bytes");
	switch (p.opcode()) {
	case Opcode::NopOut:
		return check_one<NopOut>(p);
	case Opcode::ScsiCmd: {
		check_one<ScsiCmd>(p);
		AhsInfo info;
		if (parse_ahs(p.ahs, &info) == PduError::None) {
			uint8_t cdb[16 + 260];
			if (scsi_cdb(p, info, cdb) != 16 + info.ext_cdb.size())
				die("scsi_cdb length");
		}
		return;
	}
	case Opcode::TmfReq:
		return check_one<TmfReq>(p);
	case Opcode::LoginReq:
		return check_one<LoginReq>(p);
	case Opcode::TextReq:
		return check_one<TextReq>(p);
	case Opcode::DataOut:
		return check_one<DataOut>(p);
	case Opcode::LogoutReq:
		return check_one<LogoutReq>(p);
	case Opcode::SnackReq:
		return check_one<SnackReq>(p);
	case Opcode::NopIn:
		return check_one<NopIn>(p);
	case Opcode::ScsiRsp:
		return check_one<ScsiRsp>(p);
	case Opcode::TmfRsp:
		return check_one<TmfRsp>(p);
	case Opcode::LoginRsp:
		return check_one<LoginRsp>(p);
	case Opcode::TextRsp:
		return check_one<TextRsp>(p);
	case Opcode::DataIn:
		return check_one<DataIn>(p);
	case Opcode::LogoutRsp:
		return check_one<LogoutRsp>(p);
	case Opcode::R2t:
		return check_one<R2t>(p);
	case Opcode::AsyncMsg:
		return check_one<AsyncMsg>(p);
	case Opcode::Reject:
		return check_one<RejectPdu>(p);
	}
	if (opcode_defined(static_cast<uint8_t>(p.opcode())))
		die("defined opcode without a decoder");
}

// Frames structured records into a stream with correct lengths and digests.
std::vector<uint8_t> frame(const uint8_t *p, size_t n, Digests d)
{
	std::vector<uint8_t> out;
	while (n >= kBhsLen + 3) {
		Bhs bhs;
		std::copy_n(p, kBhsLen, bhs.begin());
		const size_t ahs = std::min<size_t>(p[kBhsLen], 64) * 4;
		const size_t dl = std::min<size_t>(get_be16(p + kBhsLen + 1), 4096);
		p += kBhsLen + 3;
		n -= kBhsLen + 3;
		if (n < ahs + dl)
			break;
		std::vector<uint8_t> w(pdu_wire_len(ahs, dl, d));
		const size_t len = build_pdu(w, bhs, {p, ahs}, {p + ahs, dl}, d);
		if (len != w.size())
			die("build_pdu failed on a valid record");
		if (bhs[0] & 0x80) {
			// Keep the record's own length fields; fix the header digest up again.
			w[4] = bhs[4];
			std::copy_n(&bhs[5], 3, &w[5]);
			if (d.header)
				put_digest(&w[kBhsLen + ahs], crc32c({w.data(), kBhsLen + ahs}));
		}
		out.insert(out.end(), w.begin(), w.end());
		p += ahs + dl;
		n -= ahs + dl;
	}
	return out;
}

void run_reader(std::span<const uint8_t> stream, uint8_t mode)
{
	PduReader r(65536);
	r.set_digests({(mode & 1) != 0, (mode & 2) != 0});
	r.set_max_recv_dsl(mode & 4 ? 512 : kDefaultMrdsl);
	const size_t chunk = 1 + (static_cast<size_t>(mode >> 5) * 37) % 211;
	const bool zero_copy = mode & 16;
	size_t off = 0;
	while (off < stream.size()) {
		std::span<const uint8_t> piece =
		    stream.subspan(off, std::min(chunk, stream.size() - off));
		off += piece.size();
		while (!piece.empty()) {
			Pdu p;
			ReadResult res;
			size_t used;
			if (zero_copy) {
				std::span<uint8_t> w = r.want();
				if (w.empty())
					return;
				used = std::min(w.size(), piece.size());
				std::copy_n(piece.data(), used, w.data());
				res = r.commit(used, &p);
			} else {
				res = r.feed(piece, &used, &p);
			}
			if (used > piece.size())
				die("reader consumed more than it was given");
			piece = piece.subspan(used);
			if (res.status == ReadStatus::Error) {
				if (!pdu_error_fatal(res.error) || r.error() != res.error)
					die("error status with a non-fatal error");
				if (!r.want().empty())
					die("reader accepts bytes after a fatal error");
				return;
			}
			if (res.status == ReadStatus::Pdu) {
				if (pdu_error_fatal(res.error))
					die("a PDU with a fatal error");
				if (p.data.size() > r.max_recv_dsl())
					die("data segment above MaxRecvDataSegmentLength");
				if (p.ahs.size() > kMaxAhsLen)
					die("AHS above the cap");
				check_pdu(p);
			}
		}
	}
}

void run_spans(std::span<const uint8_t> stream)
{
	ParseOpts o;
	o.padded = false;
	o.max_recv_dsl = 65536;
	while (!stream.empty()) {
		Pdu p;
		PduError e = parse_pdu(stream, o, &p);
		if (pdu_error_fatal(e))
			return;
		if (p.wire_len == 0 || p.wire_len > stream.size())
			die("parse_pdu consumed a bad length");
		check_pdu(p);
		stream = stream.subspan(p.wire_len);
	}
}

void write_seed(const std::string &dir, const char *name, const std::vector<uint8_t> &b)
{
	std::string path = dir + "/" + name;
	if (FILE *f = std::fopen(path.c_str(), "wb")) {
		std::fwrite(b.data(), 1, b.size(), f);
		std::fclose(f);
	}
}

// A few PDUs of every kind, as structured records.
std::vector<uint8_t> records()
{
	std::vector<uint8_t> r;
	auto add = [&](const Bhs &b, size_t ahs_words, std::vector<uint8_t> body) {
		r.insert(r.end(), b.begin(), b.end());
		r.push_back(static_cast<uint8_t>(ahs_words));
		const size_t dl = body.size() - ahs_words * 4;
		r.push_back(static_cast<uint8_t>(dl >> 8));
		r.push_back(static_cast<uint8_t>(dl));
		r.insert(r.end(), body.begin(), body.end());
	};
	Bhs b;
	ScsiCmd c;
	c.cdb[0] = 0x7f;
	encode(c, b);
	std::vector<uint8_t> ahs(28);
	std::vector<uint8_t> cdb(32, 0x11);
	size_t n = build_ext_cdb_ahs(ahs, cdb);
	build_bidi_ahs(std::span<uint8_t>(ahs).subspan(n), 4096);
	add(b, 7, ahs);
	encode(LoginReq{}, b);
	std::string t("InitiatorName=iqn.2024-01.com.example:i\0AuthMethod=None\0", 56);
	add(b, 0, std::vector<uint8_t>(t.begin(), t.end()));
	encode(DataOut{}, b);
	add(b, 0, std::vector<uint8_t>(1000, 0xab));
	encode(NopOut{}, b);
	add(b, 0, {});
	encode(TextReq{}, b);
	add(b, 0, {'S', 'e', 'n', 'd', 'T', 'a', 'r', 'g', 'e', 't', 's', '=', 'A', 'l', 'l', 0});
	return r;
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	const char *dir = std::getenv("ULP_FUZZ_SEEDS");
	if (!dir)
		return 0;
	std::vector<uint8_t> rec = records();
	for (uint8_t mode : {0x08, 0x0b, 0x1b, 0x2f, 0xe8}) {
		std::vector<uint8_t> s{mode};
		s.insert(s.end(), rec.begin(), rec.end());
		write_seed(dir, ("structured-" + std::to_string(mode)).c_str(), s);
	}
	std::vector<uint8_t> raw{0x00};
	std::vector<uint8_t> framed = frame(rec.data(), rec.size(), {});
	raw.insert(raw.end(), framed.begin(), framed.end());
	write_seed(dir, "raw", raw);
	std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const uint8_t mode = data[0];
	std::span<const uint8_t> rest(data + 1, size - 1);
	std::vector<uint8_t> stream;
	if (mode & 8) {
		stream = frame(rest.data(), rest.size(), {(mode & 1) != 0, (mode & 2) != 0});
		rest = stream;
	}
	run_reader(rest, mode);
	run_spans(rest);
	return 0;
}
