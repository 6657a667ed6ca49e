// SPDX-License-Identifier: MIT
// tests/iscsi/conn_harness.h - a real target-side iSCSI connection (iscsi/target/conn.h)
// driven in one process, shared by tests/iscsi/conn_test.cc and fuzz/fuzz_iscsi_conn.cc.
//
//   Rig          a RAM logical unit (scsi::make_backstore "ram") as LUN 0 of a scsi::Tpg,
//                behind a real Target (sessions, reaper thread)
//   HarnessConn  a Conn standing in for iscsi/target/tcp.cc's TcpConn, on the caller's thread
//   Initiator    builds PDUs with the iscsi/pdu.h encoders, logs in with InitiatorLogin,
//                and reads back what the target sent
//
// HarnessConn does what TcpConn does, without a socket: bytes go through a real PduReader
// into on_pdu, and after every PDU the reader takes the connection's receive limit and
// digests (the login switches them). queue_pdu() puts a PDU on an output queue; flush()
// "sends" it: copies its bytes as the socket would read them at that moment into sent,
// then calls pdu_done(p, true). close_transport() hands the queue back with
// pdu_done(p, false), and a PDU queued after the close is handed back at once (TcpConn's
// behaviour). kick() only raises a flag: the caller runs the events itself (pump), so the
// connection's work happens on one thread in a fixed order. The other threads are the
// target's reaper (it aborts a closing session's commands and waits for them) and, with
// the RAM backstore, nothing else: the SCSI core completes inside submit(). Whatever waits
// for them waits with a bound.
#pragma once

#include "iscsi/initiator/login.h"
#include "iscsi/pdu.h"
#include "iscsi/target/conn.h"
#include "iscsi/target/target.h"
#include "scsi/backstore.h"
#include "scsi/lu.h"
#include "scsi/tpg.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ulp::iscsi::harness
{

using namespace ulp::iscsi::target;
using ulp::iscsi::initiator::InitiatorLogin;
using ulp::iscsi::initiator::InitiatorLoginConfig;
using ulp::iscsi::initiator::InitiatorLoginState;

inline const std::string kTargetName = "iqn.2024-01.com.example:conn";
inline const std::string kInitiatorName = "iqn.2024-01.com.example:ini";

// A target configuration that lets the initiator's proposals decide (RFC 7143 13: the
// target lists both digests, InitialR2T is OR-ed and ImmediateData AND-ed, the numeric
// keys take the smaller value), with teardown bounds short enough for tests.
inline TargetConfig permissive_config()
{
	TargetConfig c;
	c.prefs.header_digests = {Digest::Crc32c, Digest::None};
	c.prefs.data_digests = {Digest::Crc32c, Digest::None};
	c.prefs.max_recv_dsl = 65536;
	c.prefs.max_burst_length = 262144;
	c.prefs.first_burst_length = 65536;
	c.prefs.initial_r2t = false;
	c.prefs.immediate_data = true;
	c.prefs.max_outstanding_r2t = 8;
	c.cmd_window = 32;
	c.max_io_bytes = 1u << 20;
	c.teardown_timeout = std::chrono::milliseconds(2000);
	return c;
}

// The target: one RAM LU of lu_bytes as LUN 0 of kTargetName.
class Rig
{
public:
	explicit Rig(TargetConfig cfg, uint64_t lu_bytes = 1u << 20)
	{
		scsi::BackstoreConfig bc;
		bc.kind = "ram";
		bc.size = lu_bytes;
		bc.block_size = 512;
		int err = 0;
		std::string why;
		auto bs = scsi::make_backstore(bc, &err, &why);
		if (!bs)
			fatal("ram backstore: " + why);
		lu = std::make_unique<scsi::LogicalUnit>("conn-lu0", std::move(bs),
		                                         scsi::LuConfig{});
		tpg = std::make_unique<scsi::Tpg>(kTargetName, 1);
		if (tpg->add_lun(0, *lu) != 0)
			fatal("add_lun");
		TargetNode n;
		n.name = kTargetName;
		n.alias = "conn";
		n.tpg = tpg.get();
		cfg.targets.push_back(std::move(n));
		target = std::make_unique<Target>(std::move(cfg));
		// Enough portals that a SendTargets answer spans several 512-byte segments.
		std::vector<std::string> portals;
		for (int i = 1; i <= 24; i++)
			portals.push_back("192.0.2." + std::to_string(i) + ":3260");
		portals.push_back("[2001:db8::1]:3260");
		target->set_portal_addresses(std::move(portals));
	}
	~Rig() { target.reset(); } // joins the reaper before the Tpg and LU go

	// Every connection detached and every session closed by the reaper (it counts a
	// session as gone only after it has freed it, a moment after the connection is done).
	bool wait_idle(std::chrono::milliseconds bound, std::string *why)
	{
		const auto deadline = std::chrono::steady_clock::now() + bound;
		for (;;) {
			TargetStats s = target->stats();
			if (s.sessions_open == 0 && s.conns_open == 0) {
				if (s.teardown_timeouts) {
					*why = "a session outlived its teardown bound";
					return false;
				}
				if (!tpg->sessions().empty() || lu->task_count() != 0) {
					*why = "the SCSI core still holds a session or a task";
					return false;
				}
				return true;
			}
			const auto now = std::chrono::steady_clock::now();
			if (now >= deadline) {
				*why = "reaper: " + std::to_string(s.sessions_open) +
				       " sessions, " + std::to_string(s.conns_open) +
				       " connections left";
				return false;
			}
			// The reaper is usually a few instructions from done: yield at first (a
			// sleep costs tens of microseconds of timer slack), then sleep.
			if (now < deadline - bound + std::chrono::milliseconds(1))
				std::this_thread::yield();
			else
				std::this_thread::sleep_for(std::chrono::microseconds(50));
		}
	}

	[[noreturn]] static void fatal(const std::string &what)
	{
		std::fprintf(stderr, "conn_harness: %s\n", what.c_str());
		std::abort();
	}

	std::unique_ptr<scsi::LogicalUnit> lu;
	std::unique_ptr<scsi::Tpg> tpg;
	std::unique_ptr<Target> target;
};

// A PDU the connection sent, as its bytes went out, with the digests it was built with.
struct SentPdu {
	std::vector<uint8_t> wire;
	Digests digests;

	// The PDU's view of wire (valid while this SentPdu lives); false if it does not parse.
	bool parse(Pdu *out) const
	{
		return parse_pdu(wire, ParseOpts{kMaxDsl, digests, true}, out) == PduError::None;
	}
	Opcode opcode() const { return bhs_opcode(wire.data()); }
	std::span<const uint8_t> bhs() const { return {wire.data(), kBhsLen}; }
};

class HarnessConn final : public Conn
{
public:
	// hard_cap: the reader's largest data segment (TcpConn's is 1 MiB).
	explicit HarnessConn(Target &t, std::string peer = "192.0.2.1:50000",
	                     uint32_t hard_cap = 1u << 18)
	    : Conn(t, Transport::Tcp, std::move(peer), "192.0.2.100:3260", Mode::Owner),
	      reader_(hard_cap)
	{
	}
	// Conn's destructor checks that teardown() (detach) ran.
	~HarnessConn() override = default;

	// Bytes from the initiator, cut into PDUs as TcpConn::on_readable does. Events are
	// not run: call pump() (a socket read of several PDUs runs them once, at the end).
	void feed(std::span<const uint8_t> in)
	{
		if (closed_)
			return; // TcpConn reads nothing more once closed
		PduError e = feed_pdus(reader_, in, [this](const Pdu &pdu, PduError err) {
			if (on_input)
				on_input(pdu, err);
			on_pdu(pdu, err);
			reader_.set_max_recv_dsl(max_recv_dsl());
			reader_.set_digests(digests());
			return !closed_;
		});
		if (e != PduError::None)
			on_transport_error(std::string("bad PDU: ") + pdu_error_name(e));
	}

	// Run the posted events and, with auto_flush, send what is queued, until neither
	// leaves anything to do.
	void pump()
	{
		for (;;) {
			{
				std::lock_guard g(m_);
				woken_ = false;
			}
			run_events();
			if (auto_flush && !closed_ && !outq_.empty()) {
				flush();
				continue;
			}
			std::lock_guard g(m_);
			if (!woken_)
				return;
		}
	}

	// Send up to max queued PDUs (in order). Returns how many went out.
	size_t flush(size_t max = SIZE_MAX)
	{
		size_t n = 0;
		while (!closed_ && !outq_.empty() && n < max) {
			auto [p, d] = outq_.front();
			outq_.pop_front();
			SentPdu s;
			s.digests = d;
			s.wire.reserve(p->total());
			s.wire.insert(s.wire.end(), p->hdr, p->hdr + p->hdr_len);
			s.wire.insert(s.wire.end(), p->data.begin(), p->data.end());
			s.wire.insert(s.wire.end(), p->trailer, p->trailer + p->trailer_len);
			sent.push_back(std::move(s));
			n++;
			pdu_done(p, true); // may close the transport (a logout response)
		}
		return n;
	}

	// Time passes: on_tick at now + the time advanced so far (the login timeout and the
	// NOP-In pings read it; a virtual offset keeps tests fast and deterministic).
	void tick(std::chrono::milliseconds advance)
	{
		vclock_ += advance;
		on_tick(std::chrono::steady_clock::now() + vclock_);
	}

	bool closed() const { return closed_; }
	size_t queued() const { return outq_.size(); }

	// Pump until at least n PDUs have been sent in all, waiting for events that another
	// thread posts (the reaper's ReapDone, which a logout's response waits for). false
	// when bound passes first.
	bool wait_sent(size_t n, std::chrono::milliseconds bound)
	{
		const auto deadline = std::chrono::steady_clock::now() + bound;
		for (;;) {
			pump();
			if (sent.size() >= n)
				return true;
			std::unique_lock g(m_);
			if (!cv_.wait_until(g, deadline, [&] { return woken_; }))
				return false;
		}
	}

	// End the connection as a lost transport would (unless it is closing already), run
	// events until it is done, then detach it (once: later calls return true). false with
	// *why when bound passes first: the connection is then left attached and must not be
	// freed.
	bool teardown(std::chrono::milliseconds bound, std::string *why)
	{
		if (torn_down_)
			return true;
		const auto deadline = std::chrono::steady_clock::now() + bound;
		if (state() != ConnState::Closing && state() != ConnState::Done)
			on_transport_error("harness: end of the conversation");
		for (;;) {
			pump();
			if (done())
				break;
			// The reaper answers within microseconds as a rule: yield for a moment
			// before sleeping on the condition variable (the fuzzer tears a
			// connection down per input).
			for (int i = 0; i < 200 && !woken(); i++)
				std::this_thread::yield();
			std::unique_lock g(m_);
			if (!cv_.wait_until(g, deadline, [&] { return woken_; })) {
				*why = std::string("connection still ") + conn_state_str(state()) +
				       " after the teardown bound";
				return false;
			}
		}
		detach();
		torn_down_ = true;
		return true;
	}

	bool auto_flush = true;   // pump() sends what is queued
	std::deque<SentPdu> sent; // every PDU sent, in order (a deque: views stay valid)
	// Sees each PDU the reader produces before the connection does (the fuzzer tracks
	// what it fed through it).
	std::function<void(const Pdu &, PduError)> on_input;

protected:
	void queue_pdu(OutPdu *p) override
	{
		if (closed_) {
			pdu_done(p, false);
			return;
		}
		// The digests in force now: the last login response is queued before the login
		// switches them on.
		outq_.emplace_back(p, digests());
	}
	void kick() override
	{
		{
			std::lock_guard g(m_);
			woken_ = true;
		}
		cv_.notify_one();
	}
	void close_transport() override
	{
		if (closed_)
			return;
		closed_ = true;
		while (!outq_.empty()) {
			OutPdu *p = outq_.front().first;
			outq_.pop_front();
			pdu_done(p, false);
		}
	}

private:
	bool woken()
	{
		std::lock_guard g(m_);
		return woken_;
	}

	PduReader reader_;
	std::deque<std::pair<OutPdu *, Digests>> outq_;
	bool closed_ = false;
	bool torn_down_ = false; // teardown() has detached it
	std::chrono::milliseconds vclock_{0};
	std::mutex m_;
	std::condition_variable cv_;
	bool woken_ = false; // under m_
};

// The initiator's side of one connection: what it numbers (ITT, CmdSN), what it has
// seen (StatSN), the negotiated parameters, and the cursor into what the target sent.
class Initiator
{
public:
	explicit Initiator(HarnessConn &c) : c_(c) {}

	// The configuration a test starts from: TCP, a normal session to kTargetName, no
	// digests, the RFC 7143 defaults for everything else.
	static InitiatorLoginConfig login_config(Isid isid = {0x80, 0x12, 0x34, 0x56, 0, 1})
	{
		InitiatorLoginConfig ic;
		ic.initiator_name = kInitiatorName;
		ic.target_name = kTargetName;
		ic.isid = isid;
		ic.itt = 0x7000;
		ic.cmdsn = 100;
		return ic;
	}

	// Log in through the connection (each request fed, each response read back).
	bool login(const InitiatorLoginConfig &cfg, std::string *why)
	{
		InitiatorLogin il(cfg);
		std::vector<uint8_t> buf(il.req_buf_len());
		while (il.state() == InitiatorLoginState::SendRequest) {
			const size_t n = il.next_request(buf);
			if (!n) {
				*why = "no login request";
				return false;
			}
			c_.feed({buf.data(), n});
			c_.pump();
			const SentPdu *r = next();
			Pdu p;
			if (!r || !r->parse(&p)) {
				*why = "no login response";
				return false;
			}
			il.on_response(p);
		}
		if (il.state() != InitiatorLoginState::Complete) {
			*why = std::string("login: ") + initiator_login_error_name(il.error()) +
			       ": " + il.why();
			return false;
		}
		sess = il.session();
		conn = il.conn();
		digests.header = conn.header_digest == Digest::Crc32c;
		digests.data = conn.data_digest == Digest::Crc32c;
		cmdsn = cfg.cmdsn;
		exp_statsn = il.exp_statsn();
		max_cmdsn = il.max_cmdsn();
		return true;
	}

	// One PDU as it goes on the wire with this connection's digests.
	std::vector<uint8_t> wire(const Bhs &bhs, std::span<const uint8_t> data = {},
	                          std::span<const uint8_t> ahs = {}) const
	{
		std::vector<uint8_t> w(pdu_wire_len(ahs.size(), data.size(), digests));
		if (build_pdu(w, bhs, ahs, data, digests) != w.size())
			Rig::fatal("build_pdu");
		return w;
	}
	// Send it: fed to the connection, then its events run.
	void send(const Bhs &bhs, std::span<const uint8_t> data = {},
	          std::span<const uint8_t> ahs = {})
	{
		c_.feed(wire(bhs, data, ahs));
		c_.pump();
	}

	// The next PDU the target sent that this side has not read yet, or nullptr.
	const SentPdu *next()
	{
		if (seen_ >= c_.sent.size())
			return nullptr;
		return &c_.sent[seen_++];
	}
	size_t unread() const { return c_.sent.size() - seen_; }
	// Wait (bounded) for a PDU this side has not read yet: one that the target sends
	// after another thread's event.
	bool await(std::chrono::milliseconds bound) { return c_.wait_sent(seen_ + 1, bound); }

	uint32_t new_itt() { return itt_++; }

	SessionParams sess;
	ConnParams conn;
	Digests digests;
	uint32_t cmdsn = 0; // the next non-immediate command's CmdSN
	uint32_t exp_statsn = 0;
	uint32_t max_cmdsn = 0;

private:
	HarnessConn &c_;
	size_t seen_ = 0;
	uint32_t itt_ = 1;
};

} // namespace ulp::iscsi::harness
