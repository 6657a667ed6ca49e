// SPDX-License-Identifier: MIT
// fuzz/gen_corpus.cc - writes the seed corpus of fuzz_sock_wire (fuzz/corpus/sock_wire/):
// one small, well-formed conversation per file, so that the fuzzer starts from inputs
// that reach every packet handler instead of dying at the first header.
//
//   gen_corpus DIR
//
// The layouts and the mode byte are fuzz_sock_wire.cc's (wire_peer.h copies them from
// providers/soft/sock_wire.cc).
#include "tests/soft_wire/wire_peer.h"

#include <cstdio>

using namespace wire;

namespace
{

enum : uint8_t { kRaw = 1, kRegion = 2, kFd = 4, kTargetRequests = 8 };
constexpr uint32_t kMagicRkey = 0xf0221e55;

struct Seed {
	std::vector<uint8_t> b;

	explicit Seed(uint8_t mode) { b.push_back(mode); }
	Seed &pkt(PktHdr h, size_t payload = ~size_t{0})
	{
		size_t n = payload != ~size_t{0} ? payload : payload_len(h);
		if (n == ~0u)
			n = 0;
		const auto *p = reinterpret_cast<const uint8_t *>(&h);
		b.insert(b.end(), p, p + sizeof(h));
		for (size_t i = 0; i < n; i++)
			b.push_back(static_cast<uint8_t>('a' + i % 26));
		return *this;
	}
	Seed &cm(const CmMsg &m)
	{
		pkt(hdr(PktOp::CmReq, 0, sizeof(m)), 0);
		const auto *p = reinterpret_cast<const uint8_t *>(&m);
		b.insert(b.end(), p, p + sizeof(m));
		return *this;
	}
};

PktHdr rdma(PktOp op, uint32_t psn, uint32_t len, uint64_t off)
{
	PktHdr h = hdr(op, psn, len);
	h.rkey = kMagicRkey;
	h.va = off;
	return h;
}

PktHdr shm(PktOp op, uint32_t psn, uint32_t len, uint64_t id, uint64_t off)
{
	PktHdr h = hdr(op, psn, len);
	h.flags = kPktShm;
	h.shm_id = id;
	h.shm_off = off;
	return h;
}

} // namespace

int main(int argc, char **argv)
{
	if (argc != 2) {
		std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	std::vector<std::pair<const char *, Seed>> seeds;

	seeds.emplace_back("sends", Seed(0)
	                                .pkt(hdr(PktOp::Send, 0, 40))
	                                .pkt(hdr(PktOp::SendImm, 1, 8))
	                                .pkt(hdr(PktOp::Send, 2, 0)));
	seeds.emplace_back("rdma", Seed(0)
	                               .pkt(rdma(PktOp::Write, 0, 64, 4096))
	                               .pkt(rdma(PktOp::WriteImm, 1, 16, 8192))
	                               .pkt(rdma(PktOp::ReadReq, 2, 32, 4096)));
	seeds.emplace_back("shm", Seed(kRegion)
	                              .pkt(shm(PktOp::Send, 0, 16, 1, 0))
	                              .pkt(shm(PktOp::Write, 1, 128, 1, 4096))
	                              .pkt([] {
		                              PktHdr h = shm(PktOp::ReadReq, 2, 64, 1, 100);
		                              h.rkey = kMagicRkey;
		                              return h;
	                              }()));
	seeds.emplace_back("region_fd", Seed(kFd)
	                                    .pkt([] {
		                                    PktHdr h = hdr(PktOp::Region);
		                                    h.va = 65536;
		                                    h.shm_id = 2;
		                                    return h;
	                                    }())
	                                    .pkt(shm(PktOp::SendImm, 0, 32, 2, 65000)));
	seeds.emplace_back("replies", Seed(kTargetRequests)
	                                  .pkt(hdr(PktOp::Ack, 0))
	                                  .pkt(hdr(PktOp::ReadResp, 1, 64))
	                                  .pkt(hdr(PktOp::Send, 0, 4)));
	seeds.emplace_back("rnr_nak", Seed(kTargetRequests).pkt([] {
		PktHdr h = hdr(PktOp::Nak, 0);
		h.nak = uint8_t(NakCode::Rnr);
		h.rnr_timer = 1;
		return h;
	}()));
	seeds.emplace_back("nak_access", Seed(kTargetRequests).pkt([] {
		PktHdr h = hdr(PktOp::Nak, 0);
		h.nak = uint8_t(NakCode::Access);
		return h;
	}()));
	seeds.emplace_back("raw_handshake",
	                   Seed(kRaw).cm(cm_req(7, 16)).pkt(hdr(PktOp::Send, 0, 8)));
	// The peer's QP in ERR (its later requests go unserved), and an ErrAck nobody asked for.
	seeds.emplace_back("peer_err", Seed(0)
	                                   .pkt(hdr(PktOp::Send, 0, 8))
	                                   .pkt(hdr(PktOp::Err))
	                                   .pkt(rdma(PktOp::Write, 1, 64, 4096)));
	seeds.emplace_back("stray_err_ack", Seed(0).pkt(hdr(PktOp::ErrAck)));
	seeds.emplace_back("disconnect",
	                   Seed(0).pkt(hdr(PktOp::Send, 0, 8)).pkt(hdr(PktOp::Disconnect)));

	for (auto &[name, s] : seeds) {
		std::string path = std::string(argv[1]) + "/" + name;
		FILE *f = std::fopen(path.c_str(), "wb");
		if (!f || std::fwrite(s.b.data(), 1, s.b.size(), f) != s.b.size()) {
			std::perror(path.c_str());
			return 1;
		}
		std::fclose(f);
	}
	std::printf("%zu seeds in %s\n", seeds.size(), argv[1]);
	return 0;
}
