// SPDX-License-Identifier: MIT
// iscsi/discovery.cc - SendTargets responses and the full-feature-phase text exchange.
#include "iscsi/discovery.h"

namespace ulp::iscsi
{

std::string format_target_address(std::string_view host, uint16_t port, uint16_t tpgt)
{
	std::string s;
	const bool v6 = host.find(':') != std::string_view::npos && !host.starts_with('[');
	if (v6)
		s += '[';
	s += host;
	if (v6)
		s += ']';
	s += ':';
	s += std::to_string(port);
	s += ',';
	s += std::to_string(tpgt);
	return s;
}

bool build_sendtargets(std::string_view value, SessionType type, std::string_view session_target,
                       std::span<const DiscoveryTarget> visible, TextWriter &out)
{
	std::string_view want; // the one target asked for, or empty for All
	if (value == "All") {
		if (type != SessionType::Discovery)
			return false; // "MUST NOT be supported on an operational session"
	} else if (value.empty()) {
		if (type == SessionType::Discovery)
			return true; // logged in to no target: nothing to report
		want = session_target;
	} else {
		want = value;
		// A normal session reports its own target only.
		if (type == SessionType::Normal && want != session_target)
			return true;
	}
	for (const DiscoveryTarget &t : visible) {
		if (!want.empty() && t.name != want)
			continue;
		out.add("TargetName", t.name);
		for (const std::string &a : t.addresses)
			out.add("TargetAddress", a);
	}
	return true;
}

TextResponder::TextResponder(const TextResponderConfig &cfg, DiscoveryHandler &handler)
    : cfg_(cfg), handler_(handler), next_ttt_(cfg.first_ttt), in_(cfg.max_text)
{
}

uint32_t TextResponder::new_ttt()
{
	if (next_ttt_ == kReservedTag)
		next_ttt_ = 0;
	return next_ttt_++;
}

TextStep TextResponder::reject(RejectReason r)
{
	reject_ = r;
	phase_ = Phase::Idle;
	in_.clear();
	return TextStep::Reject;
}

void TextResponder::answer(std::span<const KeyValue> pairs, TextWriter &out)
{
	bool sent_targets = false;
	for (const KeyValue &kv : pairs) {
		if (kv.key == "SendTargets") {
			// Appendix: one SendTargets per request; a repeat gets nothing more.
			if (sent_targets)
				continue;
			sent_targets = true;
			std::vector<DiscoveryTarget> visible;
			handler_.visible_targets(cfg_.initiator_name, &visible);
			if (!build_sendtargets(kv.value, cfg_.type, cfg_.target_name, visible, out))
				out.add("SendTargets", "Reject");
			continue;
		}
		const KeyDef *d = find_key(kv.key);
		if (!d) {
			out.add(kv.key, "NotUnderstood");
			continue;
		}
		if (d->id == KeyId::MaxRecvDataSegmentLength) {
			// 13.12: Use ALL; a declaration, so no answer unless it is malformed.
			uint64_t n;
			if (parse_number(kv.value, &n) && n >= d->min && n <= d->max)
				cfg_.max_send_dsl = static_cast<uint32_t>(n);
			else
				out.add(kv.key, "Reject");
			continue;
		}
		if (d->id == KeyId::InitiatorAlias && kv.value.size() <= kMaxSimpleValueLen)
			continue; // a declaration: noted, nothing to answer
		out.add(kv.key, "Reject");
	}
}

TextStep TextResponder::emit(const TextReq &h, const TextSeq &seq, Bhs *bhs,
                             std::span<const uint8_t> *data)
{
	std::span<const uint8_t> piece = out_.next(cfg_.max_send_dsl);
	piece_.assign(piece.begin(), piece.end());
	const bool more = out_.more();
	TextRsp r;
	r.cont = more;
	// 11.11 (F bit): F=1 only in answer to F=1, and only when the operation is over.
	r.final = !more && h.final;
	r.lun = h.lun;
	r.itt = itt_;
	// 11.11 (Target Transfer Tag): F=1 carries TTT 0xffffffff, F=0 a real one.
	if (r.final) {
		r.ttt = kReservedTag;
		phase_ = Phase::Idle;
	} else {
		if (ttt_ == kReservedTag)
			ttt_ = new_ttt();
		r.ttt = ttt_;
		phase_ = Phase::Sending;
	}
	r.statsn = seq.statsn;
	r.exp_cmdsn = seq.exp_cmdsn;
	r.max_cmdsn = seq.max_cmdsn;
	encode(r, *bhs);
	*data = piece_;
	return TextStep::Respond;
}

TextStep TextResponder::on_request(const Pdu &req, const TextSeq &seq, Bhs *bhs,
                                   std::span<const uint8_t> *data)
{
	*data = {};
	TextReq h;
	if (!decode(req.bhs, &h))
		return reject(RejectReason::ProtocolError);
	// 11.10 (C bit): C=1 requires F=0.
	if (h.cont && h.final)
		return reject(RejectReason::ProtocolError);
	if (h.ttt == kReservedTag) {
		// 11.10 (Target Transfer Tag): a new exchange; whatever was unfinished is dropped.
		phase_ = Phase::Idle;
		in_.clear();
		itt_ = h.itt;
		ttt_ = kReservedTag;
	} else if (phase_ == Phase::Idle || h.itt != itt_ || h.ttt != ttt_) {
		return reject(RejectReason::InvalidPduField); // a stale or foreign TTT
	}
	if (phase_ == Phase::Sending) {
		// The initiator asks for the next piece with an empty request.
		if (!req.data.empty() || h.cont)
			return reject(RejectReason::ProtocolError);
		return emit(h, seq, bhs, data);
	}
	if (!in_.append(req.data))
		return reject(RejectReason::ProtocolError);
	if (h.cont) {
		// Acknowledge a request piece: empty, F=0, with the exchange's TTT.
		phase_ = Phase::Receiving;
		out_.reset({});
		TextReq ack = h;
		ack.final = false;
		emit(ack, seq, bhs, data);
		phase_ = Phase::Receiving;
		return TextStep::Respond;
	}
	std::vector<KeyValue> pairs;
	std::vector<uint8_t> ltds(in_.text().begin(), in_.text().end());
	in_.clear();
	if (parse_text(ltds, &pairs) != TextError::None)
		return reject(RejectReason::ProtocolError);
	TextWriter out;
	answer(pairs, out);
	out_.reset(out.bytes());
	return emit(h, seq, bhs, data);
}

} // namespace ulp::iscsi
