// SPDX-License-Identifier: MIT
// iscsi/initiator/text.cc - the initiator's full feature phase Text exchange (RFC 7143
// 11.10, 11.11) and SendTargets discovery (appendix "SendTargets Operation"), portal
// addresses as TargetAddress writes them (13.8), and random ISIDs (11.12.5).
#include "iscsi/initiator/session.h"
#include "iscsi/initiator/task.h"

#include <cstdlib>
#include <cstring>
#include <random>

namespace ulp::iscsi::initiator
{

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

bool parse_portal(std::string_view s, Portal *out, std::string *why)
{
	// 13.8: domainname[:port][,portal-group-tag]; IPv6 literals in brackets.
	Portal p;
	std::string_view addr = s;
	if (auto comma = s.rfind(','); comma != std::string_view::npos) {
		addr = s.substr(0, comma);
		std::string tag(s.substr(comma + 1));
		char *end = nullptr;
		unsigned long v = std::strtoul(tag.c_str(), &end, 10);
		if (tag.empty() || *end || v > 65535) {
			*why = "bad portal group tag in " + std::string(s);
			return false;
		}
		p.tpgt = static_cast<uint16_t>(v);
	}
	std::string_view port;
	if (!addr.empty() && addr.front() == '[') {
		auto close = addr.find(']');
		if (close == std::string_view::npos) {
			*why = "missing ']' in " + std::string(s);
			return false;
		}
		p.host = std::string(addr.substr(1, close - 1));
		if (close + 1 < addr.size()) {
			if (addr[close + 1] != ':') {
				*why = "expected ':' after ']' in " + std::string(s);
				return false;
			}
			port = addr.substr(close + 2);
		}
	} else {
		auto colon = addr.find(':');
		if (colon != std::string_view::npos &&
		    addr.find(':', colon + 1) != std::string_view::npos) {
			*why = "IPv6 addresses go in brackets: " + std::string(s);
			return false;
		}
		p.host = std::string(addr.substr(0, colon));
		if (colon != std::string_view::npos)
			port = addr.substr(colon + 1);
	}
	if (p.host.empty()) {
		*why = "no host in " + std::string(s);
		return false;
	}
	if (!port.empty() || (addr.size() && addr.back() == ':')) {
		std::string ps(port);
		char *end = nullptr;
		unsigned long v = std::strtoul(ps.c_str(), &end, 10);
		if (ps.empty() || *end || v == 0 || v > 65535) {
			*why = "bad port in " + std::string(s);
			return false;
		}
		p.port = static_cast<uint16_t>(v);
	}
	*out = p;
	return true;
}

std::string portal_str(const Portal &p)
{
	const bool v6 = p.host.find(':') != std::string::npos;
	return (v6 ? "[" + p.host + "]" : p.host) + ":" + std::to_string(p.port);
}

Isid random_isid(uint16_t qualifier)
{
	// 11.12.5: T = 10b (random), A reserved (0), B and C random, D the qualifier.
	std::random_device rd;
	const uint32_t r = rd();
	return Isid{0x80,
	            static_cast<uint8_t>(r >> 16),
	            static_cast<uint8_t>(r >> 8),
	            static_cast<uint8_t>(r),
	            static_cast<uint8_t>(qualifier >> 8),
	            static_cast<uint8_t>(qualifier)};
}

void Session::send_text(Task *t, uint32_t ttt)
{
	// 11.10: a Text Request, non-immediate (it takes a CmdSN), F=1. The first carries
	// SendTargets=<value> with TTT 0xffffffff; the ones asking for the next piece of a long
	// response are empty and carry the target's TTT.
	TextReq h;
	h.immediate = false;
	h.final = true;
	h.itt = itt_of(t);
	h.ttt = ttt;
	h.cmdsn = cmdsn_++;
	h.exp_statsn = exp_statsn_;
	Bhs b;
	encode(h, b);
	TxPdu *p = new_pdu(t);
	if (ttt == kReservedTag) {
		TextWriter w;
		w.add("SendTargets", t->text_value);
		p->own.assign(w.bytes().begin(), w.bytes().end());
		p->data = p->own;
	}
	if (!t->sent)
		sent_live_++;
	t->sent = true;
	t->cmdsn = h.cmdsn;
	send_pdu(p, b);
}

void Session::on_text_rsp(const Pdu &pdu)
{
	TextRsp h;
	decode(pdu.bhs, &h);
	take_statsn(h.statsn);
	update_sn(h.exp_cmdsn, h.max_cmdsn);
	Task *t = find_task(h.itt);
	if (!t || t->kind != Kind::Text || !t->sent) {
		fail("Text Response for no request of ours");
		return;
	}
	if (t->finished)
		return;
	// 11.11: C=1 needs F=0; a piece other than the last names the exchange with a TTT.
	if (h.final && h.cont) {
		fail("Text Response with both F and C set");
		return;
	}
	if (!t->text_in.append(pdu.data)) {
		fail("Text Response longer than " + std::to_string(kMaxLtdsLen) + " bytes");
		return;
	}
	if (!h.final) {
		if (h.ttt == kReservedTag) {
			fail("Text Response with F=0 and the reserved TTT");
			return;
		}
		t->text_ttt = h.ttt;
		if (pending_.empty() && window_open())
			send_text(t, h.ttt);
		else
			pending_.push_back(t->slot);
		return;
	}
	t->text_ok = true;
	complete(t, TaskOutcome::Completed);
}

bool Session::send_targets(std::string_view value, std::vector<DiscoveryTarget> *out)
{
	if (state_ != SessionState::FullFeature) {
		why_ = std::string("session is ") + session_state_name(state_);
		return false;
	}
	Task *t = alloc_task(Kind::Text);
	if (!t)
		return false;
	t->text_value = std::string(value);
	if (pending_.empty() && window_open())
		send_text(t, kReservedTag);
	else
		pending_.push_back(t->slot);
	const auto deadline = clock::now() + cfg_.cmd_timeout + milliseconds(1000);
	auto delivered = [&] { return t->finished && !t->queued_done && t->tx_refs == 0; };
	while (!delivered() && clock::now() < deadline)
		if (poll(milliseconds(100)) < 0 && !delivered())
			break;
	if (!delivered()) {
		fail("no Text Response in time");
		while (poll(milliseconds(0)) > 0) {
		}
	}
	const bool ok = t->finished && t->outcome == TaskOutcome::Completed && t->text_ok;
	std::vector<uint8_t> ltds(t->text_in.text().begin(), t->text_in.text().end());
	const TaskOutcome outcome = t->outcome;
	if (!t->queued_done)
		free_task(t);
	if (!ok) {
		why_ = std::string("SendTargets: ") + task_outcome_name(outcome) +
		       (error_.empty() ? "" : ": " + error_);
		return false;
	}
	std::vector<KeyValue> pairs;
	if (TextError e = parse_text(ltds, &pairs); e != TextError::None) {
		why_ = std::string("SendTargets response: ") + text_error_name(e);
		return false;
	}
	out->clear();
	for (const KeyValue &kv : pairs) {
		if (kv.key == "SendTargets") {
			why_ = "target answered SendTargets=" + std::string(kv.value);
			return false;
		}
		if (kv.key == "TargetName") {
			if (!valid_iscsi_name(kv.value)) {
				why_ = "SendTargets: bad TargetName " + std::string(kv.value);
				return false;
			}
			out->push_back(DiscoveryTarget{std::string(kv.value), {}});
		} else if (kv.key == "TargetAddress") {
			if (out->empty()) {
				why_ = "SendTargets: TargetAddress before any TargetName";
				return false;
			}
			Portal p;
			std::string perr;
			if (!parse_portal(kv.value, &p, &perr)) {
				why_ = "SendTargets: " + perr;
				return false;
			}
			out->back().addresses.emplace_back(kv.value);
		}
		// Other keys (TargetAlias from some targets) are not part of the answer we need.
	}
	return true;
}

} // namespace ulp::iscsi::initiator
