// SPDX-License-Identifier: MIT
// fuzz/fuzz_shm_ring.cc - libFuzzer target: the ring wire's readers of shared memory
// (providers/soft/shm_wire.cc: serve_requests, take_answers, the RNR and ERR handshakes)
// against arbitrary writes of a peer into its own link region.
//
// One soft device with a listening CM id (tests/soft_wire/wire_peer.h) lives for the whole
// run; every input gets a fresh ring-wire connection from a raw peer (shm_peer.h), which
// plays the input as a script of writes into its link region, then closes its socket. The
// input ends when the target has dropped the connection (DISCONNECTED, or its QP in ERR);
// that must happen within kEndMs, else the input is reported as a hang (abort). Then the
// connection's id and QP are destroyed.
//
// Input: byte 0 selects the mode, the rest is a script of records, each an opcode byte
// and its operand bytes:
//   mode bit 0  the target posts a SEND and a READ when established (answers have
//               something in flight to match)
//   mode bit 1  a 64 KiB region (id 1) of the peer's is passed first
//   0 REQ    48 bytes: the next request slot's descriptor (seq set to the slot's index
//            unless the opcode's bit 7 is set; rkey kMagicRkey becomes the target MR's
//            rkey and va an offset into it); 80 more bytes of inline data follow
//   1 PUB    publish the requests written (req_prod), ring the doorbell
//   2 RSP    16 bytes: an answer in the next answer slot (seq as for REQ)
//   3 DONE   publish the answers written (done), ring
//   4 FIELD  1 byte field index (req_prod, done, rnr_naks, rnr_retries, sleep, err,
//            err_ack) and 4 bytes: store it raw, ring
//   5 WAIT   let the target work: until it answered everything published, or 20 ms
// Seeds: ULP_FUZZ_SEEDS=<dir> writes a few well-formed scripts there and exits.
#include "tests/soft_wire/shm_peer.h"

#include <dirent.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

using namespace wire;

namespace
{

enum : uint8_t { kTargetRequests = 1, kRegion = 2 };
enum : uint8_t { kReq = 0, kPub, kRsp, kDone, kField, kWait, kOps };
constexpr uint32_t kMagicRkey = 0xf0221e55;
constexpr int kEndMs = kCmTimeoutMs + 4000;
constexpr int kReplyMs = 3000;
constexpr size_t kReqHdr = offsetof(RingReq, data);

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
	std::fprintf(stderr, "fuzz_shm_ring: %s\n", what);
	std::abort();
}

uint32_t RingHdr::*const kFields[] = {&RingHdr::req_prod,    &RingHdr::done,  &RingHdr::rnr_naks,
                                      &RingHdr::rnr_retries, &RingHdr::sleep, &RingHdr::err,
                                      &RingHdr::err_ack};

// Play the script; stops where the input ends.
void play(ShmPeer &p, Target &t, const uint8_t *s, size_t n)
{
	uint32_t rsp_next = 0;
	size_t i = 0;
	auto take = [&](void *dst, size_t len) {
		if (n - i < len)
			return false;
		std::memcpy(dst, s + i, len);
		i += len;
		return true;
	};
	while (i < n) {
		const uint8_t op = s[i++];
		switch ((op & 0x7f) % kOps) {
		case kReq: {
			RingReq d{};
			if (!take(&d, kReqHdr))
				return;
			take(d.data, std::min<size_t>(kRingInline, n - i));
			if (!(op & 0x80))
				d.seq = p.tx;
			if (d.rkey == kMagicRkey) {
				d.rkey = t.mr->rkey();
				d.va = t.va(d.va % Target::kBufSize);
			}
			std::memcpy(&p.req(p.tx), &d, sizeof(d));
			p.tx++;
			break;
		}
		case kPub:
			p.publish();
			break;
		case kRsp: {
			RingRsp a{};
			if (!take(&a, sizeof(a)))
				return;
			if (!(op & 0x80))
				a.seq = rsp_next;
			std::memcpy(&p.rsp(rsp_next++), &a, sizeof(a));
			break;
		}
		case kDone:
			p.set(&RingHdr::done, rsp_next);
			break;
		case kField: {
			uint8_t f;
			uint32_t v;
			if (!take(&f, 1) || !take(&v, 4))
				return;
			p.set(kFields[f % std::size(kFields)], v);
			break;
		}
		case kWait: {
			const uint32_t want = ring_load(p.hdr().req_prod);
			p.wait([&] { return p.t_done() == want || p.sock.eof(); }, 20);
			break;
		}
		}
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
		std::fprintf(stderr, "fuzz_shm_ring: target: %s\n", err.c_str());
		std::abort();
	}
	g_fd_base = open_fds();
}

// Seeds: well-formed scripts that reach the executing paths.
void write_seeds(const char *dir)
{
	auto put = [&](const char *name, std::vector<uint8_t> v) {
		std::ofstream(std::string(dir) + "/" + name, std::ios::binary)
		    .write(reinterpret_cast<const char *>(v.data()), std::streamsize(v.size()));
	};
	auto req = [](std::vector<uint8_t> &v, RingOp op, uint8_t flags, uint32_t len, bool magic,
	              uint64_t region = 0, uint64_t off = 0) {
		RingReq d{};
		d.op = uint8_t(op);
		d.flags = flags;
		d.len = len;
		if (magic) {
			d.rkey = kMagicRkey;
			d.va = 4096;
		}
		d.region = region;
		d.off = off;
		v.push_back(kReq);
		auto *b = reinterpret_cast<const uint8_t *>(&d);
		v.insert(v.end(), b, b + sizeof(d));
	};
	std::vector<uint8_t> v{0};
	req(v, RingOp::Send, kRingInlineData, 40, false);
	req(v, RingOp::SendImm, kRingInlineData | kRingSolicited, 8, false);
	req(v, RingOp::Write, kRingInlineData, 64, true);
	v.insert(v.end(), {kPub, kWait});
	put("sends", v);
	v = {kRegion};
	req(v, RingOp::Write, kRingRegion, 20000, true, 1, 100);
	req(v, RingOp::Read, kRingRegion, 20000, true, 1, 30000);
	v.insert(v.end(), {kPub, kWait});
	put("region", v);
	v = {0};
	for (int k = 0; k < 10; k++)
		req(v, RingOp::Send, kRingInlineData, 8, false);
	v.insert(v.end(), {kPub, kWait, kField, 3, 1, 0, 0, 0, kWait});
	put("rnr", v);
	v = {kTargetRequests};
	RingRsp a{};
	a.status = uint8_t(RingStatus::Ack);
	auto *b = reinterpret_cast<const uint8_t *>(&a);
	v.push_back(kRsp);
	v.insert(v.end(), b, b + sizeof(a));
	a.len = Target::kTargetReadLen;
	v.push_back(kRsp);
	v.insert(v.end(), b, b + sizeof(a));
	v.push_back(kDone);
	put("answers", v);
	v = {kTargetRequests, kField, 5, 1, 0, 0, 0, kWait};
	put("err", v);
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	if (const char *dir = std::getenv("ULP_FUZZ_SEEDS")) {
		write_seeds(dir);
		std::exit(0);
	}
	setup();
	return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	Target &t = *g_target;
	const uint8_t mode = data[0];
	t.cfg.post_on_established = mode & kTargetRequests; // read by the CM worker later
	const uint32_t accepted0 = t.accepted();

	ShmPeer p;
	if (!p.request(t.sock_name) || !p.granted(kReplyMs))
		die("no ring-wire connection to the target");
	if ((mode & kRegion) && !p.pass_region(1, 65536))
		die("cannot pass a region");
	play(p, t, data + 1, size - 1);
	p.sock.close(); // EOF: the verdict comes now at the latest

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
		}
		usleep(500);
	}
	if (!ended)
		die("the target did not drop the connection (hang)");
	t.drop_conn();
	p.close();
	if (open_fds() > g_fd_base + 16)
		die("file descriptors leak per input");
	return 0;
}
