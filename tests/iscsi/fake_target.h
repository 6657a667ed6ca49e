// SPDX-License-Identifier: MIT
// tests/iscsi/fake_target.h - an initiator transport with its target in memory, shared by
// tests/iscsi/initiator_peer_test.cc and fuzz/fuzz_iscsi_initiator.cc.
//
//   FakeLoginHandler  serves any target name, asks for no authentication and makes a new
//                     session (TSIH 1) with the CmdSN window FakeTarget says
//   FakeTarget        the InitiatorTransport the session talks to, and the caller's handle
//                     on "the target"
//
// The session logs in through the real TargetLogin engine, so it reaches the full feature
// phase as it would against a real target. From then on every PDU the session sends is
// parsed, kept in sent and handed to script; what the target sends (send(), send_bytes())
// goes through a real PduReader, with the limit and digests the session set (set_recv), and
// on into the session as a socket's bytes would. A stream the reader refuses closes the
// transport with the reader's error as why(). Everything happens inside poll(), on the
// caller's thread.
#pragma once

#include "iscsi/initiator/transport.h"
#include "iscsi/pdu.h"
#include "iscsi/target/login.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ulp::iscsi::harness
{

class FakeLoginHandler final : public target::LoginHandler
{
public:
	uint32_t window = 8;
	uint32_t login_exp_skew = 0; // final Login Response's ExpCmdSN above the login's CmdSN
	LoginStatus find_target(std::string_view, target::TargetInfo *info) override
	{
		info->tpgt = 1;
		return LoginStatus::Success;
	}
	bool authorize(const target::LoginIdentity &) override { return true; }
	target::AuthPolicy auth_policy(const target::LoginIdentity &) override
	{
		return {true, false};
	}
	bool chap_credentials(const target::LoginIdentity &, ChapCredentials *) override
	{
		return false;
	}
	LoginStatus find_session(const target::LoginIdentity &, SessionParams *) override
	{
		return LoginStatus::SessionDoesNotExist;
	}
	target::SessionResult complete_login(const target::LoginIdentity &id, const SessionParams &,
	                                     const ConnParams &) override
	{
		return {LoginStatus::Success, 1, id.cmdsn + login_exp_skew,
		        id.cmdsn + login_exp_skew + window - 1};
	}
};

class FakeTarget final : public initiator::InitiatorTransport
{
public:
	// prefs: the values the target's login accepts. hard_cap: the reader's largest data
	// segment (its buffer is allocated at once: a fuzzer making one per input keeps it
	// small).
	explicit FakeTarget(OperationalPrefs prefs, uint32_t hard_cap = kMaxDsl) : reader_(hard_cap)
	{
		lc_.prefs = prefs;
	}

	// The script: called with each full feature phase PDU the session sends.
	std::function<void(FakeTarget &, const Pdu &)> script;
	std::vector<std::vector<uint8_t>> sent; // every FFP PDU, as sent
	uint32_t statsn = 100;                  // next StatSN
	uint32_t exp_cmdsn = 0;                 // reported ExpCmdSN
	uint32_t window = 8;                    // MaxCmdSN = ExpCmdSN + window - 1
	uint32_t login_exp_skew = 0;            // see FakeLoginHandler::login_exp_skew
	uint32_t login_cmdsn = 0;               // CmdSN of the last Login Request

	// Queue a PDU for the session: bhs (StatSN/ExpCmdSN/MaxCmdSN filled in when sn),
	// data.
	void send(Bhs b, std::span<const uint8_t> data = {}, bool sn = true, bool advance = true)
	{
		if (sn) {
			put_be32(b.data() + 24, advance ? statsn++ : statsn);
			put_be32(b.data() + 28, exp_cmdsn);
			put_be32(b.data() + 32, exp_cmdsn + window - 1);
		}
		std::vector<uint8_t> out(pdu_wire_len(0, data.size(), {}));
		size_t n = build_pdu(out, b, {}, data, {});
		rx_.insert(rx_.end(), out.begin(), out.begin() + static_cast<ptrdiff_t>(n));
	}
	// Queue bytes for the session as they are, whatever they hold (the fuzzer's input).
	void send_bytes(std::span<const uint8_t> bytes)
	{
		rx_.insert(rx_.end(), bytes.begin(), bytes.end());
	}
	void drop() { closed_ = true; }

	Transport kind() const override { return Transport::Tcp; }
	void attach(initiator::TransportSink *s) override { sink_ = s; }
	bool connect(const std::string &, uint16_t, std::chrono::milliseconds) override
	{
		login_ = std::make_unique<target::TargetLogin>(lc_, handler_);
		return true;
	}
	void queue(initiator::TxPdu *p) override { txq_.push_back(p); }
	bool poll(std::chrono::milliseconds) override
	{
		while (!txq_.empty() && !closed_) {
			initiator::TxPdu *p = txq_.front();
			txq_.pop_front();
			std::vector<uint8_t> bytes(p->hdr.begin(), p->hdr.begin() + p->hdr_len);
			bytes.insert(bytes.end(), p->data.begin(), p->data.end());
			bytes.insert(bytes.end(), p->trailer.begin(),
			             p->trailer.begin() + p->trailer_len);
			sink_->on_sent(p, true);
			handle(bytes);
		}
		if (!closed_) {
			// The session never reaches rx_ from on_pdu: it can be read in place.
			size_t used = 0;
			PduError e = feed_pdus(
			    reader_, rx_,
			    [this](const Pdu &pdu, PduError err) {
				    sink_->on_pdu(pdu, err);
				    return !closed_;
			    },
			    &used);
			rx_.erase(rx_.begin(), rx_.begin() + static_cast<ptrdiff_t>(used));
			if (e != PduError::None) {
				why_ = pdu_error_name(e);
				closed_ = true;
			}
		}
		if (closed_)
			close();
		return !closed_;
	}
	void set_recv(uint32_t dsl, Digests d) override
	{
		reader_.set_max_recv_dsl(dsl);
		reader_.set_digests(d);
	}
	void close() override
	{
		closed_ = true;
		while (!txq_.empty()) {
			initiator::TxPdu *p = txq_.front();
			txq_.pop_front();
			sink_->on_sent(p, false);
		}
	}
	bool connected() const override { return !closed_; }
	const std::string &why() const override { return why_; }
	std::string local_address() const override { return "local"; }
	std::string peer_address() const override { return "fake"; }

private:
	// The session's PDUs are built by our own encoders: one that does not parse is a bug
	// in the session, not an input to answer, so it stops the test or the fuzzer here.
	[[noreturn]] static void bug(const char *what)
	{
		std::fprintf(stderr, "FakeTarget: %s\n", what);
		std::abort();
	}

	void handle(const std::vector<uint8_t> &bytes)
	{
		Pdu pdu;
		ParseOpts o;
		o.max_recv_dsl = kMaxDsl;
		if (parse_pdu(bytes, o, &pdu) != PduError::None)
			bug("the session sent a PDU that does not parse");
		if (login_ && login_->state() != target::TargetLoginState::FullFeature) {
			std::vector<uint8_t> rsp(login_->rsp_buf_len());
			size_t len = 0;
			handler_.window = window;
			handler_.login_exp_skew = login_exp_skew;
			login_cmdsn = get_be32(pdu.bhs.data() + 24);
			LoginStep st = login_->on_request(pdu, rsp, &len);
			rx_.insert(rx_.end(), rsp.begin(),
			           rsp.begin() + static_cast<ptrdiff_t>(len));
			if (st == LoginStep::Complete) {
				statsn = login_->next_statsn();
				exp_cmdsn = get_be32(pdu.bhs.data() + 24);
			}
			return;
		}
		sent.push_back(bytes);
		// Non-immediate commands advance ExpCmdSN as a target would.
		if (!pdu.immediate() && pdu.opcode() != Opcode::DataOut)
			exp_cmdsn = get_be32(pdu.bhs.data() + 24) + 1;
		if (script)
			script(*this, pdu);
	}

	target::TargetLoginConfig lc_;
	FakeLoginHandler handler_;
	std::unique_ptr<target::TargetLogin> login_;
	initiator::TransportSink *sink_ = nullptr;
	std::deque<initiator::TxPdu *> txq_;
	std::vector<uint8_t> rx_;
	PduReader reader_;
	bool closed_ = false;
	std::string why_ = "closed";
};

} // namespace ulp::iscsi::harness
