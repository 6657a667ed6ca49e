// SPDX-License-Identifier: MIT
// fuzz/fuzz_iscsi_conn.cc - libFuzzer target: one target-side iSCSI connection
// (iscsi/target/conn.cc, iscsi/target/target.cc) with the real SCSI core and a RAM LU
// behind it, fed a byte stream cut into PDUs by the real PduReader: a login, then the full
// feature phase, then teardown.
//
// The harness (tests/iscsi/conn_harness.h) runs the connection on this thread: every PDU is
// handed over as TcpConn would, events are run and output "sent" in a fixed order, so an
// input replays the same way. After the input the connection is torn down as a lost
// transport would end it, and the harness checks that this ends within a bound and leaves
// nothing behind: the connection done (every command released, every PDU handed back),
// its session reaped by the target, the SCSI core's session and task set empty, no
// teardown timeout. A bound that expires aborts with a message (the reaper and the core
// are never waited for without one). LeakSanitizer checks the rest.
//
// Input layout: two configuration bytes, then records until the input ends.
//	byte 0 bit 0   HeaderDigest=CRC32C          bit 4  MaxOutstandingR2T=4 (else 1)
//	       bit 1   DataDigest=CRC32C            bit 5  small sizes: MaxRecvDataSegmentLength
//	       bit 2   InitialR2T=Yes (else No)            512 both ways, MaxBurstLength 1024,
//	       bit 3   ImmediateData=No (else Yes)         FirstBurstLength 512
//	       bit 6   a discovery session          bit 7  no login by the harness: the
//	                                                   records carry the login themselves
//	byte 1 bits 0-1 CmdSN window 1, 2, 8 or 32  bit 2  target NOP-In pings (every 5 s,
//	       bit 3   largest I/O 4 KiB (else 64 KiB)     answered within 5 s; virtual time)
//	       bit 4   output held (auto-flush off) until a control record sends it
// Records: a kind byte (kind % 8), then its fields; a record cut short ends the input.
//	0 PDU   b0 bit 0: framed (48 BHS bytes, a length byte, that many data bytes; the
//	        harness sets the lengths, padding and digests), else unframed (2 bytes length,
//	        the bytes, fed as they are); b0 bit 1: corrupt the data digest, bit 2: the
//	        header digest (framed only)
//	1 SCSI Command: b0 R, W, F=0, I, ATTR (bits 4-6), bit 7 CmdSN off by the next byte
//	        (signed); b1 ITT (bits 0-2), bit 3 LUN 1, bit 4 reserved ITT, bits 5-7
//	        immediate data (0 none, 1 all allowed, 2 half, 3 16 bytes, else b1 >> 5 * 100);
//	        b2 the CDB (table below; 20+: 16 raw bytes follow), b3 LBA, b4 blocks, b5 EDTL
//	        (0 as the CDB says, 1 zero, 2 a block less, 3 a block more, else b5 * 64)
//	2 Data-Out: b0 ITT (bits 0-2); b1 bit 0 solicited (the oldest R2T seen for the ITT,
//	        else unsolicited), bit 1 F inverted, bit 2 DataSN off by one, bit 3 offset off
//	        by 4; b2 length (0 what is due, up to MaxRecvDataSegmentLength, else b2 * 16)
//	3 Task Management: b0 function (bits 0-3), bit 4 not immediate, bit 5 LUN 1; b1
//	        referenced ITT (bits 0-2; bit 3 reserved); b2 RefCmdSN - CmdSN (signed)
//	4 NOP-Out: b0 bit 0 answer the last ping (its TTT), bit 1 ITT reserved, bit 2 not
//	        immediate; b1 ping data length
//	5 Text: b0 bit 0 continue the last response (its TTT, no text), bit 1 C, bit 2 not
//	        immediate, bit 3 F=0; b1 the text (0..6 from a list, 7: b2 length + bytes)
//	6 Logout / SNACK: b0 bits 0-1 reason (3: invalid), bit 2 wrong CID, bit 3 not
//	        immediate, bit 4 a SNACK of type bits 5-6 instead
//	7 Control: b0 % 16: 0 run events and send everything, 1 hold output, 2 release it,
//	        3 one second passes, 4 twenty seconds pass, 5 the target asks for a logout
//	        (Async Message), 6 the target drops the connection, 7 the transport fails,
//	        8 send one held PDU, 9 run events only, 10 corrupt the next templated PDU's
//	        data digest, 11 a new connection reinstates the session (same ISID) and takes
//	        over the records (twice at most)
// Output checks: every PDU the target sends parses with the negotiated digests and is a
// target opcode; in the full feature phase StatSN goes up by one with each PDU that
// carries status (3.2.2.2: R2T, NOP-In pings and Data-In without S do not advance it),
// ExpCmdSN never goes back, MaxCmdSN >= ExpCmdSN - 1 (3.2.2.1), and data segments fit the
// initiator's MaxRecvDataSegmentLength.
//
// ULP_FUZZ_TRACE=1 prints the target's log with a line per PDU (to replay an input).
// Seeds: ULP_FUZZ_SEEDS=<dir> makes the binary write well-formed conversations there and
// exit (scripts/fuzz.sh does this).
#include "core/crc32c.h"
#include "core/log.h"
#include "iscsi/target/session.h"
#include "tests/iscsi/conn_harness.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <vector>

using namespace ulp::iscsi;
using namespace ulp::iscsi::harness;

namespace
{

[[noreturn]] void die(const std::string &what)
{
	std::fprintf(stderr, "fuzz_iscsi_conn: %s\n", what.c_str());
	std::abort();
}

// Teardown bounds: the connection must be done, then the target idle, within these. The
// target's own close_session bound is shorter, so that a command that never ends shows up
// as a teardown timeout here rather than as a hang.
constexpr std::chrono::milliseconds kConnBound{4000};
constexpr std::chrono::milliseconds kIdleBound{2000};
constexpr std::chrono::milliseconds kCloseSessionBound{1000};

constexpr uint32_t kIttBase = 0x100;
constexpr Isid kIsid = {0x80, 0x12, 0x34, 0x56, 0x78, 0x9a};

struct Reader {
	const uint8_t *p;
	size_t n;
	bool take(size_t k, const uint8_t **out)
	{
		if (n < k)
			return false;
		*out = p;
		p += k;
		n -= k;
		return true;
	}
	bool byte(uint8_t *b)
	{
		const uint8_t *q;
		if (!take(1, &q))
			return false;
		*b = *q;
		return true;
	}
};

// The configuration bytes, decoded.
struct Config {
	bool hdgst, ddgst, initial_r2t, immediate_data, discovery, raw_login, pings, held;
	uint16_t max_r2t;
	uint32_t target_mrdsl, ini_mrdsl, max_burst, first_burst, window, max_io;

	Config(uint8_t b0, uint8_t b1)
	{
		hdgst = b0 & 1;
		ddgst = b0 & 2;
		initial_r2t = b0 & 4;
		immediate_data = !(b0 & 8);
		max_r2t = b0 & 16 ? 4 : 1;
		const bool small = b0 & 32;
		target_mrdsl = small ? 512 : 4096;
		ini_mrdsl = small ? 512 : 4096;
		max_burst = small ? 1024 : 16384;
		first_burst = small ? 512 : 8192;
		discovery = b0 & 64;
		raw_login = b0 & 128;
		static constexpr uint32_t windows[] = {1, 2, 8, 32};
		window = windows[b1 & 3];
		pings = b1 & 4;
		max_io = b1 & 8 ? 4096 : 65536;
		held = b1 & 16;
	}

	TargetConfig target() const
	{
		TargetConfig c = permissive_config();
		c.prefs.max_recv_dsl = target_mrdsl;
		c.prefs.max_burst_length = 65536;
		c.prefs.first_burst_length = 65536;
		c.prefs.max_outstanding_r2t = 4;
		c.cmd_window = window;
		c.max_io_bytes = max_io;
		if (pings) {
			c.nop_interval = std::chrono::seconds(5);
			c.nop_timeout = std::chrono::seconds(5);
		}
		c.teardown_timeout = kCloseSessionBound;
		if (std::getenv("ULP_FUZZ_TRACE")) {
			// Replaying an input: the target's log, one line per PDU each way.
			c.trace = true; // through core/log.h to stderr
		}
		return c;
	}

	InitiatorLoginConfig initiator() const
	{
		InitiatorLoginConfig ic = Initiator::login_config(kIsid);
		ic.type = discovery ? SessionType::Discovery : SessionType::Normal;
		ic.prefs.header_digests = {hdgst ? Digest::Crc32c : Digest::None};
		ic.prefs.data_digests = {ddgst ? Digest::Crc32c : Digest::None};
		ic.prefs.initial_r2t = initial_r2t;
		ic.prefs.immediate_data = immediate_data;
		ic.prefs.max_outstanding_r2t = max_r2t;
		ic.prefs.max_recv_dsl = ini_mrdsl;
		ic.prefs.max_burst_length = max_burst;
		ic.prefs.first_burst_length = first_burst;
		return ic;
	}
};

// What the harness knows of the conversation: the target's output read so far (R2Ts to
// answer, the last ping and text TTTs) and the initiator's unsolicited data per ITT.
struct Track {
	struct R2tSeen {
		uint32_t itt, ttt, offset, length, sent = 0, datasn = 0;
	};
	struct Task {
		uint32_t edtl = 0, unsol_off = 0, unsol_datasn = 0;
	};
	std::vector<R2tSeen> r2ts;
	std::map<uint32_t, Task> tasks;
	uint32_t ping_ttt = kReservedTag;
	uint32_t text_ttt = kReservedTag;
	size_t read = 0;            // PDUs of conn.sent checked
	bool ffp = false;           // the final login response was seen: check StatSN etc.
	uint32_t next_statsn = 0;   // StatSN of the next status-carrying PDU
	uint32_t exp_cmdsn = 0;     // the last ExpCmdSN seen
	uint32_t max_send_dsl = 0;  // the initiator's MaxRecvDataSegmentLength (0: unknown)
	bool mrdsl_changed = false; // a Text Request may have redeclared it
};

// One connection of the input: the transport, its initiator, what it has seen.
struct Link {
	std::unique_ptr<HarnessConn> conn;
	std::unique_ptr<Initiator> ini;
	Track t;
};

// Check what the target sent since the last look, and learn from it.
void check_output(Link &l)
{
	HarnessConn &c = *l.conn;
	Track &t = l.t;
	for (; t.read < c.sent.size(); t.read++) {
		const SentPdu &s = c.sent[t.read];
		Pdu p;
		if (!s.parse(&p))
			die("the target sent a PDU that does not parse");
		const uint8_t op = p.bhs[0] & 0x3f;
		if (opcode_from_initiator(op) || !opcode_defined(op))
			die("the target sent opcode " + std::to_string(op));
		const Opcode o = p.opcode();
		if (o == Opcode::LoginRsp) {
			LoginRsp r;
			decode(p.bhs, &r);
			if (r.transit && r.nsg == Stage::FullFeature &&
			    r.status == LoginStatus::Success) {
				// RFC 7143 11.13: the final response; StatSN numbering continues.
				t.ffp = true;
				t.next_statsn = r.statsn + 1;
				t.exp_cmdsn = r.exp_cmdsn;
				l.ini->cmdsn = r.exp_cmdsn;
			}
			continue;
		}
		if (!t.ffp)
			continue;
		if (t.max_send_dsl && !t.mrdsl_changed && p.data.size() > t.max_send_dsl)
			die("data segment above the initiator's MaxRecvDataSegmentLength");
		// StatSN (3.2.2.2): advanced by each PDU that carries a status;
		// R2Ts, pings (NOP-In with the reserved ITT) and Data-In without S do not.
		const uint32_t statsn = get_be32(p.bhs.data() + 24);
		bool advances = true;
		if (o == Opcode::R2t || (o == Opcode::NopIn && p.itt() == kReservedTag))
			advances = false;
		if (o == Opcode::DataIn) {
			DataIn d;
			decode(p.bhs, &d);
			advances = d.has_status;
		}
		if (advances) {
			if (statsn != t.next_statsn)
				die("StatSN " + std::to_string(statsn) + ", expected " +
				    std::to_string(t.next_statsn));
			t.next_statsn++;
		}
		// 3.2.2.1: ExpCmdSN only moves forward; MaxCmdSN >= ExpCmdSN - 1.
		const uint32_t exp = get_be32(p.bhs.data() + 28);
		const uint32_t max = get_be32(p.bhs.data() + 32);
		if (sn_lt(exp, t.exp_cmdsn))
			die("ExpCmdSN went back");
		if (sn_lt(max, exp - 1))
			die("MaxCmdSN below ExpCmdSN - 1");
		t.exp_cmdsn = exp;

		switch (o) {
		case Opcode::R2t: {
			R2t r;
			decode(p.bhs, &r);
			t.r2ts.push_back({r.itt, r.ttt, r.buffer_offset, r.desired_len});
			break;
		}
		case Opcode::ScsiRsp:
		case Opcode::DataIn: {
			const uint32_t itt = p.itt();
			if (o == Opcode::DataIn && !(p.bhs[1] & 1))
				break;
			std::erase_if(t.r2ts,
			              [&](const Track::R2tSeen &r) { return r.itt == itt; });
			break;
		}
		case Opcode::NopIn:
			if (p.itt() == kReservedTag)
				t.ping_ttt = get_be32(p.bhs.data() + 20);
			break;
		case Opcode::TextRsp:
			t.text_ttt = get_be32(p.bhs.data() + 20);
			break;
		default:
			break;
		}
	}
}

// Bytes of a data segment the harness makes up (the content does not steer the
// connection layer; the SCSI core has its own fuzzing through the CDBs).
std::vector<uint8_t> pattern(size_t n, uint32_t seed)
{
	std::vector<uint8_t> v(n);
	for (size_t i = 0; i < n; i++)
		v[i] = static_cast<uint8_t>(seed * 31 + i * 7);
	return v;
}

// Frame bhs + data with the connection's digests; corrupt one of them when asked.
std::vector<uint8_t> frame(const Link &l, Bhs &bhs, std::span<const uint8_t> data,
                           bool bad_data_digest, bool bad_header_digest)
{
	Initiator &ini = *l.ini;
	ini.digests = l.conn->digests();
	std::vector<uint8_t> w = ini.wire(bhs, data);
	if (bad_data_digest && ini.digests.data && !data.empty())
		w.back() ^= 1;
	if (bad_header_digest && ini.digests.header)
		w[kBhsLen] ^= 1;
	return w;
}

// The CDB for a SCSI Command record, and the transfer length it asks for.
uint32_t build_cdb(uint8_t which, uint8_t lba, uint8_t blocks, Reader &in,
                   std::array<uint8_t, 16> &cdb, bool *ok)
{
	cdb.fill(0);
	const uint32_t bytes = uint32_t{blocks} * 512;
	auto be16 = [&](int at, uint32_t v) { put_be16(&cdb[at], static_cast<uint16_t>(v)); };
	auto be32 = [&](int at, uint32_t v) { put_be32(&cdb[at], v); };
	switch (which % 24) {
	case 0: // TEST UNIT READY
		return 0;
	case 1: // INQUIRY, standard or VPD 0x83 / 0x00
		cdb[0] = 0x12;
		cdb[1] = lba & 1;
		cdb[2] = lba & 1 ? (lba & 2 ? 0x83 : 0x00) : 0;
		be16(3, blocks);
		return blocks;
	case 2: // READ (10)
		cdb[0] = 0x28;
		be32(2, lba);
		be16(7, blocks);
		return bytes;
	case 3: // WRITE (10)
		cdb[0] = 0x2a;
		be32(2, lba);
		be16(7, blocks);
		return bytes;
	case 4: // READ (16)
		cdb[0] = 0x88;
		be32(6, lba);
		be32(10, blocks);
		return bytes;
	case 5: // WRITE (16), FUA
		cdb[0] = 0x8a;
		cdb[1] = 0x08;
		be32(6, lba);
		be32(10, blocks);
		return bytes;
	case 6: // REPORT LUNS
		cdb[0] = 0xa0;
		be32(6, 16 + blocks);
		return 16 + blocks;
	case 7: // READ CAPACITY (10)
		cdb[0] = 0x25;
		return 8;
	case 8: // REQUEST SENSE
		cdb[0] = 0x03;
		cdb[4] = blocks;
		return blocks;
	case 9: // MODE SENSE (6), all pages
		cdb[0] = 0x1a;
		cdb[2] = 0x3f;
		cdb[4] = blocks;
		return blocks;
	case 10: // SYNCHRONIZE CACHE (10)
		cdb[0] = 0x35;
		be32(2, lba);
		be16(7, blocks);
		return 0;
	case 11: // WRITE SAME (16), UNMAP with lba bit 0
		cdb[0] = 0x93;
		cdb[1] = lba & 1 ? 0x08 : 0;
		be32(6, lba);
		be32(10, blocks);
		return 512;
	case 12: // UNMAP: a parameter list of blocks bytes
		cdb[0] = 0x42;
		be16(7, blocks);
		return blocks;
	case 13: // COMPARE AND WRITE, one block (two blocks of data)
		cdb[0] = 0x89;
		be32(6, lba);
		cdb[13] = 1;
		return 1024;
	case 14: // VERIFY (10) with BYTCHK
		cdb[0] = 0x2f;
		cdb[1] = 0x02;
		be32(2, lba);
		be16(7, blocks);
		return bytes;
	case 15: // PERSISTENT RESERVE IN, READ KEYS
		cdb[0] = 0x5e;
		be16(7, blocks);
		return blocks;
	case 16: // PERSISTENT RESERVE OUT, REGISTER
		cdb[0] = 0x5f;
		be32(5, 24);
		return 24;
	case 17: // MODE SELECT (6)
		cdb[0] = 0x15;
		cdb[1] = 0x10;
		cdb[4] = blocks;
		return blocks;
	case 18: // READ (6)
		cdb[0] = 0x08;
		cdb[3] = lba;
		cdb[4] = blocks;
		return blocks ? bytes : 256 * 512;
	case 19: // START STOP UNIT
		cdb[0] = 0x1b;
		cdb[4] = lba & 3;
		return 0;
	default: { // raw
		const uint8_t *raw;
		if (!in.take(16, &raw)) {
			*ok = false;
			return 0;
		}
		std::copy_n(raw, 16, cdb.begin());
		return bytes;
	}
	}
}

class Run
{
public:
	explicit Run(const Config &cfg) : cfg_(cfg), rig_(cfg.target()) {}

	void go(Reader &in);
	void finish();

private:
	bool open_link(bool reinstate);
	void settle(Link &l)
	{
		if (!held_)
			l.conn->pump();
		else
			l.conn->run_events();
		check_output(l);
	}
	void send(Link &l, Bhs &bhs, std::span<const uint8_t> data, bool bad_hdr = false)
	{
		const bool bad = corrupt_next_ && !data.empty();
		if (bad)
			corrupt_next_ = false;
		l.conn->feed(frame(l, bhs, data, bad, bad_hdr));
	}

	bool scsi_cmd(Link &l, Reader &in);
	bool data_out(Link &l, Reader &in);
	bool tmf(Link &l, Reader &in);
	bool nop_out(Link &l, Reader &in);
	bool text(Link &l, Reader &in);
	bool logout(Link &l, Reader &in);
	bool control(Link &l, Reader &in);
	bool pdu(Link &l, Reader &in);

	const Config &cfg_;
	Rig rig_;
	std::deque<Link> links_; // a deque: a Link stays put when another is added
	bool held_ = false;
	bool corrupt_next_ = false;
	int reinstated_ = 0;
};

bool Run::open_link(bool reinstate)
{
	Link l;
	// The reader's cap: above every MaxRecvDataSegmentLength the configurations declare
	// (a larger data segment is fatal either way), small enough not to cost a large
	// buffer per input.
	l.conn = std::make_unique<HarnessConn>(
	    *rig_.target, "192.0.2.1:" + std::to_string(40000 + links_.size()), 65536);
	l.ini = std::make_unique<Initiator>(*l.conn);
	l.conn->auto_flush = !held_;
	links_.push_back(std::move(l));
	Link &cur = links_.back();
	Track *t = &cur.t;
	cur.conn->on_input = [t](const Pdu &p, PduError) {
		// A Text Request may redeclare MaxRecvDataSegmentLength (11.10): from then on
		// the harness does not know the initiator's limit.
		if (p.opcode() == Opcode::TextReq)
			t->mrdsl_changed = true;
	};
	if (cfg_.raw_login && !reinstate)
		return true;
	// The harness logs in with everything sent at once (auto-flush on for the login).
	cur.conn->auto_flush = true;
	std::string why;
	InitiatorLoginConfig ic = cfg_.initiator();
	ic.itt = 0x7000 + reinstated_;
	if (!cur.ini->login(ic, &why))
		die("the harness' login failed: " + why);
	cur.conn->auto_flush = !held_;
	cur.t.max_send_dsl = cur.ini->conn.initiator_recv_dsl;
	check_output(cur);
	return true;
}

bool Run::scsi_cmd(Link &l, Reader &in)
{
	uint8_t f, b1, which, lba, blocks, edtl_mode, delta = 0;
	if (!in.byte(&f) || ((f & 0x80) && !in.byte(&delta)) || !in.byte(&b1) || !in.byte(&which) ||
	    !in.byte(&lba) || !in.byte(&blocks) || !in.byte(&edtl_mode))
		return false;
	ScsiCmd h;
	bool ok = true;
	const uint32_t xfer = build_cdb(which, lba, blocks, in, h.cdb, &ok);
	if (!ok)
		return false;
	h.read = f & 1;
	h.write = f & 2;
	h.final = !(f & 4);
	h.immediate = f & 8;
	h.attr = (f >> 4) & 7;
	h.itt = b1 & 0x10 ? kReservedTag : kIttBase + (b1 & 7);
	h.lun = b1 & 8 ? 0x0001000000000000ull : 0;
	switch (edtl_mode) {
	case 0:
		h.edtl = xfer;
		break;
	case 1:
		h.edtl = 0;
		break;
	case 2:
		h.edtl = xfer >= 512 ? xfer - 512 : 0;
		break;
	case 3:
		h.edtl = xfer + 512;
		break;
	default:
		h.edtl = uint32_t{edtl_mode} * 64;
		break;
	}
	Initiator &ini = *l.ini;
	h.cmdsn = ini.cmdsn + static_cast<int8_t>(delta);
	if (!h.immediate && !delta)
		ini.cmdsn++;
	h.exp_statsn = l.t.next_statsn;
	// Immediate data: as much as the rules allow, or some other amount.
	const uint32_t allowed =
	    std::min({h.edtl, l.ini->sess.first_burst_length, l.conn->max_recv_dsl()});
	uint32_t imm = 0;
	switch (b1 >> 5) {
	case 0:
		break;
	case 1:
		imm = allowed;
		break;
	case 2:
		imm = allowed / 2;
		break;
	case 3:
		imm = 16;
		break;
	default:
		imm = (b1 >> 5) * 100u;
		break;
	}
	Bhs b;
	encode(h, b);
	send(l, b, pattern(imm, h.itt));
	Track::Task &t = l.t.tasks[h.itt];
	t = {h.edtl, imm, 0};
	std::erase_if(l.t.r2ts, [&](const Track::R2tSeen &r) { return r.itt == h.itt; });
	return true;
}

bool Run::data_out(Link &l, Reader &in)
{
	uint8_t b0, b1, len;
	if (!in.byte(&b0) || !in.byte(&b1) || !in.byte(&len))
		return false;
	const uint32_t itt = kIttBase + (b0 & 7);
	const uint32_t mrdsl = l.conn->max_recv_dsl();
	DataOut d;
	d.itt = itt;
	d.exp_statsn = l.t.next_statsn;
	uint32_t n = 0;
	if (b1 & 1) {
		auto r = std::find_if(l.t.r2ts.begin(), l.t.r2ts.end(),
		                      [&](const Track::R2tSeen &x) { return x.itt == itt; });
		if (r == l.t.r2ts.end())
			return true; // nothing solicited for it
		n = len ? len * 16u : std::min(r->length - r->sent, mrdsl);
		d.ttt = r->ttt;
		d.buffer_offset = r->offset + r->sent;
		d.datasn = r->datasn++;
		r->sent += std::min(n, r->length - r->sent);
		d.final = r->sent >= r->length;
		if (d.final)
			l.t.r2ts.erase(r);
	} else {
		Track::Task &t = l.t.tasks[itt];
		const uint32_t limit = std::min(t.edtl, l.ini->sess.first_burst_length);
		const uint32_t left = limit > t.unsol_off ? limit - t.unsol_off : 0;
		n = len ? len * 16u : std::min(left, mrdsl);
		d.ttt = kReservedTag;
		d.buffer_offset = t.unsol_off;
		d.datasn = t.unsol_datasn++;
		t.unsol_off += n;
		d.final = t.unsol_off >= limit;
	}
	if (b1 & 2)
		d.final = !d.final;
	if (b1 & 4)
		d.datasn++;
	if (b1 & 8)
		d.buffer_offset += 4;
	Bhs b;
	encode(d, b);
	send(l, b, pattern(n, itt));
	return true;
}

bool Run::tmf(Link &l, Reader &in)
{
	uint8_t b0, b1, delta;
	if (!in.byte(&b0) || !in.byte(&b1) || !in.byte(&delta))
		return false;
	TmfReq h;
	h.function = 0x80 | (b0 & 15); // 11.5: bit 7 of the function byte is always 1
	h.immediate = !(b0 & 16);
	h.lun = b0 & 32 ? 0x0001000000000000ull : 0;
	h.itt = 0x900 + (b0 & 15);
	h.rtt = b1 & 8 ? kReservedTag : kIttBase + (b1 & 7);
	h.cmdsn = l.ini->cmdsn;
	if (!h.immediate)
		l.ini->cmdsn++;
	h.ref_cmdsn = h.cmdsn + static_cast<int8_t>(delta);
	h.exp_statsn = l.t.next_statsn;
	Bhs b;
	encode(h, b);
	send(l, b, {});
	return true;
}

bool Run::nop_out(Link &l, Reader &in)
{
	uint8_t b0, len;
	if (!in.byte(&b0) || !in.byte(&len))
		return false;
	NopOut h;
	h.immediate = !(b0 & 4);
	if (b0 & 1) {
		h.ttt = l.t.ping_ttt; // 11.18: the answer to a ping echoes its TTT
		h.itt = kReservedTag;
		len = 0;
	} else {
		h.itt = b0 & 2 ? kReservedTag : 0xa00 + len;
	}
	h.cmdsn = l.ini->cmdsn;
	if (!h.immediate)
		l.ini->cmdsn++;
	h.exp_statsn = l.t.next_statsn;
	Bhs b;
	encode(h, b);
	send(l, b, pattern(len, len));
	return true;
}

bool Run::text(Link &l, Reader &in)
{
	using namespace std::literals;
	static constexpr std::string_view texts[] = {
	    "SendTargets=All\0"sv,
	    "SendTargets=\0"sv,
	    "SendTargets=iqn.2024-01.com.example:conn\0"sv,
	    "MaxRecvDataSegmentLength=512\0"sv,
	    "InitiatorAlias=fuzz\0"sv,
	    "X-com.example.key=1\0"sv,
	    "HeaderDigest=None\0"sv,
	};
	uint8_t b0, which, len;
	if (!in.byte(&b0) || !in.byte(&which))
		return false;
	std::vector<uint8_t> data;
	if ((which & 7) == 7) {
		const uint8_t *raw;
		if (!in.byte(&len) || !in.take(len, &raw))
			return false;
		data.assign(raw, raw + len);
	} else if (!(b0 & 1)) {
		std::string_view s = texts[which & 7];
		data.assign(s.begin(), s.end());
	}
	TextReq h;
	h.itt = 0xb00;
	h.ttt = b0 & 1 ? l.t.text_ttt : kReservedTag;
	h.cont = b0 & 2;
	h.immediate = !(b0 & 4);
	h.final = !(b0 & 8);
	h.cmdsn = l.ini->cmdsn;
	if (!h.immediate)
		l.ini->cmdsn++;
	h.exp_statsn = l.t.next_statsn;
	Bhs b;
	encode(h, b);
	send(l, b, data);
	return true;
}

bool Run::logout(Link &l, Reader &in)
{
	uint8_t b0;
	if (!in.byte(&b0))
		return false;
	Bhs b;
	if (b0 & 16) {
		// 11.16: at ERL 0 every SNACK is rejected.
		SnackReq s;
		s.type = (b0 >> 5) & 3;
		s.itt = kIttBase + (b0 & 7);
		s.exp_statsn = l.t.next_statsn;
		encode(s, b);
		send(l, b, {});
		return true;
	}
	LogoutReq h;
	h.reason = b0 & 3;
	h.cid = b0 & 4 ? 7 : l.ini->conn.cid;
	h.immediate = !(b0 & 8);
	h.itt = 0xc00;
	h.cmdsn = l.ini->cmdsn;
	if (!h.immediate)
		l.ini->cmdsn++;
	h.exp_statsn = l.t.next_statsn;
	encode(h, b);
	send(l, b, {});
	return true;
}

bool Run::pdu(Link &l, Reader &in)
{
	uint8_t b0;
	if (!in.byte(&b0))
		return false;
	const uint8_t *raw;
	if (!(b0 & 1)) {
		uint8_t hi, lo;
		if (!in.byte(&hi) || !in.byte(&lo) || !in.take(size_t{hi} << 8 | lo, &raw))
			return false;
		l.conn->feed({raw, size_t{hi} << 8 | lo});
		return true;
	}
	uint8_t len;
	const uint8_t *data;
	if (!in.take(kBhsLen, &raw) || !in.byte(&len) || !in.take(len, &data))
		return false;
	Bhs b;
	std::copy_n(raw, kBhsLen, b.begin());
	b[4] = 0; // no AHS: build_pdu writes TotalAHSLength and DataSegmentLength
	l.conn->feed(frame(l, b, {data, len}, b0 & 2, b0 & 4));
	return true;
}

bool Run::control(Link &l, Reader &in)
{
	uint8_t b0;
	if (!in.byte(&b0))
		return false;
	HarnessConn &c = *l.conn;
	switch (b0 % 16) {
	case 0:
		c.run_events();
		c.flush();
		c.pump();
		break;
	case 1:
		held_ = true;
		c.auto_flush = false;
		break;
	case 2:
		held_ = false;
		c.auto_flush = true;
		break;
	case 3:
		c.tick(std::chrono::seconds(1));
		break;
	case 4:
		c.tick(std::chrono::seconds(20));
		break;
	case 5:
		c.post(ConnEvent::Logout, {});
		break;
	case 6:
		c.post(ConnEvent::Drop, {});
		break;
	case 7:
		c.on_transport_error("fuzz: transport failed");
		break;
	case 8:
		c.flush(1);
		break;
	case 9:
		c.run_events();
		break;
	case 10:
		corrupt_next_ = true;
		break;
	case 11:
		if (reinstated_ < 2 && !cfg_.discovery) {
			reinstated_++;
			open_link(true);
			// The old connection hears of it through a Drop event: run it.
			settle(l);
		}
		break;
	default:
		break;
	}
	return true;
}

void Run::go(Reader &in)
{
	held_ = cfg_.held;
	open_link(false);
	uint8_t kind;
	while (in.byte(&kind)) {
		Link &l = links_.back();
		bool ok = true;
		switch (kind % 8) {
		case 0:
			ok = pdu(l, in);
			break;
		case 1:
			ok = scsi_cmd(l, in);
			break;
		case 2:
			ok = data_out(l, in);
			break;
		case 3:
			ok = tmf(l, in);
			break;
		case 4:
			ok = nop_out(l, in);
			break;
		case 5:
			ok = text(l, in);
			break;
		case 6:
			ok = logout(l, in);
			break;
		default:
			ok = control(l, in);
			break;
		}
		if (!ok)
			break;
		for (Link &x : links_)
			settle(x);
	}
}

void Run::finish()
{
	std::string why;
	for (Link &l : links_) {
		if (!l.conn->teardown(kConnBound, &why))
			die("teardown: " + why);
		check_output(l);
	}
	if (!rig_.wait_idle(kIdleBound, &why))
		die("after teardown: " + why);
}

void run(const uint8_t *data, size_t size)
{
	Reader in{data, size};
	uint8_t b0, b1;
	if (!in.byte(&b0) || !in.byte(&b1))
		return;
	Config cfg(b0, b1);
	Run r(cfg);
	r.go(in);
	r.finish();
}

// ---- Seeds ----------------------------------------------------------------------------------

// Builds inputs in the layout above.
struct Seed {
	std::vector<uint8_t> b;

	Seed(uint8_t c0, uint8_t c1) : b{c0, c1} {}
	Seed &bytes(std::initializer_list<uint8_t> v)
	{
		b.insert(b.end(), v);
		return *this;
	}
	// SCSI Command: flags, ITT/immediate-data byte, CDB index, LBA, blocks, EDTL mode.
	Seed &cmd(uint8_t f, uint8_t b1, uint8_t cdb, uint8_t lba, uint8_t blocks, uint8_t edtl = 0)
	{
		return bytes({1, f, b1, cdb, lba, blocks, edtl});
	}
	// The same with its CmdSN off by delta (flag bit 7).
	Seed &cmd_off(int8_t delta, uint8_t f, uint8_t b1, uint8_t cdb)
	{
		return bytes({1, static_cast<uint8_t>(f | 0x80), static_cast<uint8_t>(delta), b1,
		              cdb, 0, 0, 0});
	}
	Seed &data_out(uint8_t itt, uint8_t mode, uint8_t len = 0)
	{
		return bytes({2, itt, mode, len});
	}
	Seed &tmf(uint8_t fn, uint8_t rtt, uint8_t delta = 0) { return bytes({3, fn, rtt, delta}); }
	Seed &nop(uint8_t b0, uint8_t len) { return bytes({4, b0, len}); }
	Seed &text(uint8_t b0, uint8_t which) { return bytes({5, b0, which}); }
	Seed &logout(uint8_t b0) { return bytes({6, b0}); }
	Seed &ctl(uint8_t op) { return bytes({7, op}); }
	Seed &raw(std::span<const uint8_t> w)
	{
		bytes({0, 0, static_cast<uint8_t>(w.size() >> 8), static_cast<uint8_t>(w.size())});
		b.insert(b.end(), w.begin(), w.end());
		return *this;
	}
};

enum : uint8_t {
	CDB_TUR = 0,
	CDB_INQUIRY = 1,
	CDB_READ10 = 2,
	CDB_WRITE10 = 3,
	CDB_READ16 = 4,
	CDB_WRITE16 = 5,
	CDB_REPORT_LUNS = 6,
	CDB_WRITE_SAME = 11,
	CDB_CAW = 13,
	F_R = 1,
	F_W = 2,
	F_NOT_FINAL = 4,
	F_IMM = 8,
	IMM_ALL = 1 << 5,
	IMM_HALF = 2 << 5,
	DO_SOLICITED = 1,
};

// A login the records carry themselves: the real initiator's requests, recorded against a
// scratch target (a one-exchange login: no security stage).
std::vector<uint8_t> raw_login_seed()
{
	Config cfg(0x80, 0x03);
	Rig rig(cfg.target());
	HarnessConn c(*rig.target);
	InitiatorLoginConfig ic = cfg.initiator();
	ic.skip_security = true;
	InitiatorLogin il(ic);
	std::vector<uint8_t> buf(il.req_buf_len());
	Seed s(0x80, 0x03);
	size_t seen = 0;
	while (il.state() == InitiatorLoginState::SendRequest) {
		const size_t n = il.next_request(buf);
		s.raw({buf.data(), n});
		c.feed({buf.data(), n});
		c.pump();
		Pdu p;
		if (seen >= c.sent.size() || !c.sent[seen].parse(&p))
			die("seed login: no response");
		il.on_response(p);
		seen++;
	}
	if (il.state() != InitiatorLoginState::Complete)
		die("seed login failed");
	std::string why;
	if (!c.teardown(kConnBound, &why))
		die(why);
	s.cmd(F_R, 0, CDB_READ10, 0, 8).cmd(F_W, 1 | IMM_ALL, CDB_WRITE10, 8, 2).logout(0);
	return s.b;
}

void write_seed(const std::string &dir, const std::string &name, const std::vector<uint8_t> &b)
{
	std::string path = dir + "/" + name;
	if (FILE *f = std::fopen(path.c_str(), "wb")) {
		std::fwrite(b.data(), 1, b.size(), f);
		std::fclose(f);
	}
}

void write_seeds(const std::string &dir)
{
	// Plain I/O: the UNIT ATTENTION, reads, a write with all its data immediate, logout.
	write_seed(dir, "io",
	           Seed(0x00, 0x03)
	               .cmd(0, 0, CDB_TUR, 0, 0)
	               .cmd(F_R, 1, CDB_INQUIRY, 0, 96)
	               .cmd(F_R, 2, CDB_READ10, 0, 16)
	               .cmd(F_W, 3 | IMM_ALL, CDB_WRITE10, 4, 4)
	               .cmd(F_R, 4, CDB_READ16, 4, 4)
	               .cmd(F_R, 5, CDB_REPORT_LUNS, 0, 64)
	               .logout(0)
	               .b);
	// Digests, InitialR2T=Yes, ImmediateData=No: every write solicited by R2T.
	write_seed(dir, "r2t-digests",
	           Seed(0x0f, 0x03)
	               .cmd(0, 0, CDB_TUR, 0, 0)
	               .cmd(F_W, 1, CDB_WRITE10, 0, 40)
	               .data_out(1, DO_SOLICITED)
	               .data_out(1, DO_SOLICITED)
	               .data_out(1, DO_SOLICITED)
	               .data_out(1, DO_SOLICITED)
	               .data_out(1, DO_SOLICITED)
	               .cmd(F_R, 2, CDB_READ10, 0, 40)
	               .logout(0)
	               .b);
	// Small sizes, MaxOutstandingR2T=4, InitialR2T=No: unsolicited data, then several R2Ts
	// at once, answered out of R2T order.
	Seed multi(0x30, 0x03);
	multi.cmd(0, 0, CDB_TUR, 0, 0).cmd(F_W | F_NOT_FINAL, 1 | IMM_HALF, CDB_WRITE10, 0, 8);
	multi.data_out(1, 0);
	for (int i = 0; i < 16; i++)
		multi.data_out(1, DO_SOLICITED);
	multi.cmd(F_R, 2, CDB_READ10, 0, 8).logout(0);
	write_seed(dir, "multi-r2t", multi.b);
	// The CmdSN window: a command ahead of ExpCmdSN, one beyond MaxCmdSN, immediate ones,
	// then ABORT TASK of the waiting one and a LUN RESET.
	write_seed(dir, "cmdsn",
	           Seed(0x00, 0x02)
	               .cmd_off(1, 0, 0, CDB_TUR)
	               .cmd_off(5, 0, 1, CDB_TUR)
	               .cmd(F_IMM | F_R, 2, CDB_INQUIRY, 0, 36)
	               .tmf(1, 0, 1)
	               .cmd(F_R, 3, CDB_READ10, 0, 1)
	               .tmf(5, 0)
	               .cmd(0, 4, CDB_TUR, 0, 0)
	               .b);
	// A write left waiting for data, then teardown with output held: R2T outstanding.
	write_seed(dir, "teardown-write",
	           Seed(0x04, 0x03)
	               .cmd(0, 0, CDB_TUR, 0, 0)
	               .ctl(1)
	               .cmd(F_W, 1, CDB_WRITE10, 0, 64)
	               .cmd(F_R, 2, CDB_READ10, 0, 64)
	               .ctl(8)
	               .b);
	// NOP-Out echo, a target ping answered, a ping left unanswered (timeout).
	write_seed(dir, "nop",
	           Seed(0x00, 0x07).nop(0, 16).nop(2, 0).ctl(3).ctl(4).nop(1, 0).ctl(4).ctl(4).b);
	// Discovery: SendTargets=All over 512-byte segments (continuation), then logout.
	write_seed(dir, "discovery",
	           Seed(0x60, 0x03).text(0, 0).text(1, 0).text(1, 0).text(0, 3).logout(0).b);
	// Logout while commands wait for data; the data comes, then the response.
	write_seed(dir, "logout-wait",
	           Seed(0x04, 0x03)
	               .cmd(0, 0, CDB_TUR, 0, 0)
	               .cmd(F_W, 1, CDB_WRITE10, 0, 4)
	               .logout(0)
	               .data_out(1, DO_SOLICITED)
	               .b);
	// Session reinstatement in the middle of a write, then I/O on the new session.
	write_seed(dir, "reinstate",
	           Seed(0x04, 0x03)
	               .cmd(0, 0, CDB_TUR, 0, 0)
	               .cmd(F_W, 1, CDB_WRITE10, 0, 4)
	               .ctl(11)
	               .cmd(0, 0, CDB_TUR, 0, 0)
	               .cmd(F_R, 1, CDB_READ10, 0, 4)
	               .b);
	// A data digest error on a Data-Out and on a command's immediate data; SNACK; an
	// unknown opcode framed with good digests.
	Seed dd(0x03, 0x03);
	dd.cmd(0, 0, CDB_TUR, 0, 0).cmd(F_W | F_NOT_FINAL, 1 | IMM_HALF, CDB_WRITE10, 0, 8);
	dd.ctl(10).data_out(1, 0).ctl(10).cmd(F_W, 2 | IMM_ALL, CDB_WRITE10, 8, 1);
	dd.cmd(F_R, 3, CDB_READ10, 0, 1).logout(0x10);
	std::vector<uint8_t> bhs(kBhsLen, 0);
	bhs[0] = 0x1c; // vendor specific
	dd.bytes({0, 1}).b.insert(dd.b.end(), bhs.begin(), bhs.end());
	dd.bytes({4, 1, 2, 3, 4});
	write_seed(dir, "digest-errors", dd.b);
	// Held output: a TMF and the target's logout request while responses wait.
	write_seed(dir, "held",
	           Seed(0x00, 0x13)
	               .cmd(0, 0, CDB_TUR, 0, 0)
	               .cmd(F_R, 1, CDB_READ10, 0, 32)
	               .tmf(2, 8)
	               .ctl(5)
	               .ctl(9)
	               .ctl(0)
	               .logout(0)
	               .ctl(2)
	               .b);
	write_seed(dir, "raw-login", raw_login_seed());
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	// Every input logs in and drops connections: only errors, unless replaying one.
	if (!std::getenv("ULP_FUZZ_TRACE"))
		ulp::log::set_level(ulp::log::Level::Error);
	if (const char *dir = std::getenv("ULP_FUZZ_SEEDS")) {
		write_seeds(dir);
		std::exit(0);
	}
	return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	run(data, size);
	return 0;
}
