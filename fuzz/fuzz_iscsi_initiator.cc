// SPDX-License-Identifier: MIT
// fuzz/fuzz_iscsi_initiator.cc - the initiator session (iser/initiator/initiator.h) fed an
// arbitrary byte stream as its target's side of a full feature phase connection.
//
// A fake transport (tests/iscsi/fake_target.h, shared with initiator_peer_test) logs the
// session in through the real TargetLogin engine (so every input starts in the full feature
// phase), the harness puts a 8 KiB read, an 8 KiB write and a ping in flight (ITTs
// 0x00010000, 0x00010001, 0x00010002: slot | generation << 16), and then the input is what
// "the target" sends: cut into PDUs by PduReader and handed to the session like a socket's
// bytes. The session must never read or write outside what it owns, whatever arrives;
// failing the session is the expected answer to most inputs, and every task must then end
// exactly once.
//
// Seeds: ULP_FUZZ_SEEDS=<dir> writes a few well-formed answers (Data-In with status for
// the read, an R2T and a response for the write, the ping's NOP-In) and exits.
#include "iscsi/initiator/scsi.h"
#include "iscsi/initiator/session.h"
#include "tests/iscsi/fake_target.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace ulp::iscsi;
using namespace ulp::iscsi::initiator;
using ulp::put_be32;
using ulp::iscsi::harness::FakeTarget;

namespace
{

constexpr uint32_t kReadItt = 0x00010000;
constexpr uint32_t kWriteItt = 0x00010001;
constexpr uint32_t kPingItt = 0x00010002;

[[noreturn]] void die(const char *what)
{
	std::fprintf(stderr, "fuzz_iscsi_initiator: %s\n", what);
	std::abort();
}

void append(std::vector<uint8_t> &out, Bhs b, std::span<const uint8_t> data = {})
{
	std::vector<uint8_t> p(pdu_wire_len(0, data.size(), {}));
	p.resize(build_pdu(p, b, {}, data, {}));
	out.insert(out.end(), p.begin(), p.end());
}

void write_seed(const char *dir, const char *name, const std::vector<uint8_t> &s)
{
	std::string path = std::string(dir) + "/" + name;
	FILE *f = std::fopen(path.c_str(), "wb");
	if (!f)
		die("cannot write a seed");
	std::fwrite(s.data(), 1, s.size(), f);
	std::fclose(f);
}

// StatSN 1.. after the login's responses; ExpCmdSN/MaxCmdSN around the first CmdSN (1).
void sn(Bhs &b, uint32_t statsn)
{
	put_be32(b.data() + 24, statsn);
	put_be32(b.data() + 28, 3);
	put_be32(b.data() + 32, 18);
}

int write_seeds()
{
	const char *dir = std::getenv("ULP_FUZZ_SEEDS");
	if (!dir)
		return 0;
	std::vector<uint8_t> s;
	std::vector<uint8_t> half(4096, 0xa5);
	DataIn d;
	d.itt = kReadItt;
	d.datasn = 0;
	Bhs b;
	encode(d, b);
	sn(b, 0);
	append(s, b, half);
	d.datasn = 1;
	d.buffer_offset = 4096;
	d.final = d.has_status = true;
	encode(d, b);
	sn(b, 2);
	append(s, b, half);
	R2t r;
	r.itt = kWriteItt;
	r.ttt = 9;
	r.desired_len = 8192;
	encode(r, b);
	sn(b, 3);
	append(s, b);
	ScsiRsp rsp;
	rsp.itt = kWriteItt;
	rsp.exp_datasn = 1;
	encode(rsp, b);
	sn(b, 3);
	append(s, b);
	NopIn n;
	n.itt = kPingItt;
	encode(n, b);
	sn(b, 4);
	std::vector<uint8_t> ping(16, 0x11);
	append(s, b, ping);
	write_seed(dir, "answers", s);
	// A target ping, an Async logout request and a Reject of the write.
	std::vector<uint8_t> t;
	NopIn tp;
	tp.ttt = 5;
	encode(tp, b);
	sn(b, 2);
	append(t, b);
	AsyncMsg a;
	a.event = 1;
	a.param3 = 1;
	encode(a, b);
	put_be32(b.data() + 16, kReservedTag);
	sn(b, 2);
	append(t, b);
	RejectPdu rj;
	rj.reason = RejectReason::InvalidPduField;
	encode(rj, b);
	sn(b, 3);
	std::vector<uint8_t> quoted(kBhsLen, 0);
	quoted[0] = 0x01;
	put_be32(quoted.data() + 16, kWriteItt);
	put_be32(quoted.data() + 24, 2);
	append(t, b, quoted);
	write_seed(dir, "events", t);
	std::exit(0);
}

const int seeds_done = write_seeds();

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	(void)seeds_done;
	InitiatorConfig c;
	c.initiator_name = "iqn.2026-11.org.ulp:fuzz";
	c.target_name = "iqn.2026-11.org.ulp:fake";
	c.isid = Isid{0x80, 1, 2, 3, 0, 0};
	c.nop_interval = std::chrono::milliseconds(0);
	c.prefs.initial_r2t = true;
	c.prefs.immediate_data = false;
	FakeTarget *fake = nullptr;
	Session s(c, [&fake] {
		OperationalPrefs tp;
		tp.initial_r2t = true; // the write needs an R2T from the input
		tp.immediate_data = false;
		auto f = std::make_unique<FakeTarget>(tp, 1u << 20);
		f->window = 16;
		fake = f.get();
		return f;
	});
	if (!s.login(Portal{"fuzz", 3260, 0}))
		die(("the scripted login failed: " + s.error()).c_str());
	std::vector<uint8_t> rbuf(8192), wbuf(8192, 0x5a), ping(16, 0x11);
	int ended[3] = {0, 0, 0};
	const auto rd = cdb_read16(0, 16), wr = cdb_write16(0, 16);
	if (s.submit({0, rd, DataDir::Read, rbuf}, [&](const ScsiResult &) { ended[0]++; }) !=
	        kReadItt ||
	    s.submit({0, wr, DataDir::Write, wbuf}, [&](const ScsiResult &) { ended[1]++; }) !=
	        kWriteItt ||
	    s.ping(ping, [&](const PingResult &) { ended[2]++; }) != kPingItt)
		die("unexpected ITTs");
	fake->send_bytes({data, size});
	for (int i = 0; i < 8; i++)
		if (s.poll(std::chrono::milliseconds(0)) < 0)
			break;
	s.close("end of input");
	while (s.poll(std::chrono::milliseconds(0)) > 0) {
	}
	for (int e : ended)
		if (e != 1)
			die("a task did not end exactly once");
	return 0;
}
