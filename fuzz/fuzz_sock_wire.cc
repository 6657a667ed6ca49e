// SPDX-License-Identifier: MIT
// fuzz/fuzz_sock_wire.cc - libFuzzer target: the socket wire's parsers against arbitrary
// peer bytes (providers/soft/sock_wire.cc: recv_cm, sock_service, on_request, on_reply,
// on_region).
//
// One soft device with a listening CM id (tests/soft_wire/wire_peer.h) lives for the whole
// run; every input gets a fresh connection from a raw peer socket, which sends the input
// and then closes its write side. The input ends when the target has dropped the
// connection (DISCONNECTED, or its QP in ERR) or refused it (EOF); that must happen
// within kEndMs, else the input is reported as a hang (abort). Then the connection's id
// and QP are destroyed, which must not hang either (libFuzzer's -timeout catches that).
//
// Input layout: byte 0 selects the mode, the rest is the stream.
//   bit 0 kRaw     the stream starts at connect (the CM REQ is fuzzed too); otherwise a
//                  valid REQ goes first and the REP is awaited
//   bit 1 kRegion  after the handshake, a valid Region (id 1, 64 KiB memfd) is announced
//   bit 2 kFd      a 64 KiB memfd rides on the stream's first byte (for a fuzzed Region)
//   bit 3 kTargetRequests  the target posts a SEND (psn 0) and a READ (psn 1) when
//                  established, so that replies (ACK/NAK/READ response) have something
//                  in flight
// Requests whose rkey is kMagicRkey get the target MR's real rkey, and their va becomes
// an offset (modulo the MR size) into it, so that WRITE and READ reach real memory.
#include "tests/soft_wire/wire_peer.h"

#include <dirent.h>

#include <cstdio>
#include <cstdlib>

using namespace wire;

namespace
{

enum : uint8_t { kRaw = 1, kRegion = 2, kFd = 4, kTargetRequests = 8 };
constexpr uint32_t kMagicRkey = 0xf0221e55;
constexpr int kEndMs = kCmTimeoutMs + 4000; // the target's verdict on one input
constexpr int kReplyMs = 3000;

Target *g_target;
int g_fd_base;

int open_fds()
{
	int n = 0;
	if (DIR *d = opendir("/proc/self/fd")) {
		while (readdir(d))
			n++;
		closedir(d);
	}
	return n;
}

[[noreturn]] void die(const char *what)
{
	std::fprintf(stderr, "fuzz_sock_wire: %s\n", what);
	std::abort();
}

// Give magic-rkey requests the real key and an address inside the MR. Follows the
// framing as the target does and stops where the stream stops making sense.
void patch_keys(std::vector<uint8_t> &s, const Target &t)
{
	size_t pos = 0;
	while (pos + sizeof(PktHdr) <= s.size()) { // pos may pass the end: a payload cut short
		PktHdr h;
		std::memcpy(&h, s.data() + pos, sizeof(h));
		uint32_t pl = payload_len(h);
		if (pl == ~0u)
			return;
		if (h.rkey == kMagicRkey) {
			h.rkey = t.mr->rkey();
			h.va = t.va(h.va % Target::kBufSize);
			std::memcpy(s.data() + pos, &h, sizeof(h));
		}
		pos += sizeof(h) + pl;
	}
}

void setup()
{
	TargetConfig c;
	c.ip = "127.0.0.1";
	c.recvs = 8;
	g_target = new Target(c); // lives until exit: inputs reuse it
	std::string err;
	if (!g_target->start(&err)) {
		std::fprintf(stderr, "fuzz_sock_wire: target: %s\n", err.c_str());
		std::abort();
	}
	g_fd_base = open_fds();
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	setup();
	return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	Target &t = *g_target;
	const uint8_t mode = data[0];
	std::vector<uint8_t> stream(data + 1, data + size);
	t.cfg.post_on_established = mode & kTargetRequests; // read by the CM worker later
	const uint32_t accepted0 = t.accepted();

	RawPeer p;
	if (!p.connect(t.sock_name))
		die("connect to the target's listener failed");
	if (!(mode & kRaw)) {
		if (!p.send_cm_req(cm_req()))
			die("REQ not taken");
		auto rep = p.recv_pkt(kReplyMs);
		if (!rep || rep->h.op != uint8_t(PktOp::CmRep))
			die("no REP for a valid REQ");
		if (mode & kRegion) {
			int f = make_memfd(65536);
			PktHdr h = hdr(PktOp::Region);
			h.va = 65536;
			h.shm_id = 1;
			(void)p.send_pkt(h, nullptr, 0, f);
			close(f);
		}
		patch_keys(stream, t);
	}
	int f = (mode & kFd) ? make_memfd(65536) : -1;
	// The target may stop reading (it dropped us): a short send is its verdict.
	if (!stream.empty())
		(void)p.send_raw(stream.data(), stream.size(), f, 1000);
	if (f >= 0)
		close(f);
	p.shutdown_write();

	// Wait for the verdict: dropped (DISCONNECTED or ERR) once established, or refused.
	auto until = Clock::now() + ms(kEndMs);
	bool ended = false;
	while (Clock::now() < until) {
		if (t.accepted() != accepted0) {
			ulp::Qp *q = t.qp();
			if (t.events.count([](const CmEv &e) {
				    return e.type == ulp::CmEventType::Disconnected;
			    }) ||
			    (q && q->state() == ulp::QpState::Err)) {
				ended = true;
				break;
			}
		} else if (p.eof()) {
			ended = true;
			break;
		}
		p.pump(2);
	}
	if (!ended)
		die("the target neither dropped nor refused the connection (hang)");
	t.drop_conn();
	p.close();
	// Every fd a connection brought (socket, the peer's memfds) is gone with it.
	if (open_fds() > g_fd_base + 16)
		die("file descriptors leak per input");
	return 0;
}
