// SPDX-License-Identifier: MIT
// iscsi/discovery.h - SendTargets (RFC 7143 appendix "SendTargets Operation", 11.10, 11.11)
// and the full-feature-phase Text Request / Text Response exchange that carries it.
//
// SendTargets values and what they return:
//	All         every target the initiator may see; discovery sessions only ("MUST NOT be
//	            supported on an operational session": answered SendTargets=Reject there)
//	<name>      that target, if the initiator may see it (nothing otherwise)
//	(empty)     the target the session is logged in to (normal sessions; nothing in a
//	            discovery session, which is logged in to none)
// The response is a list of target records: TargetName=<name>, then one
// TargetAddress=<host>[:<port>],<tpgt> per portal (IPv6 literals in brackets). No other keys.
// A response with no targets is empty.
//
// Long texts (11.10, 11.11): a response longer than the initiator's MaxRecvDataSegmentLength
// goes out in pieces, each but the last with C=1 and F=0 and a Target Transfer Tag other
// than 0xffffffff; the initiator asks for the next piece with an (empty) Text Request
// carrying the same ITT and that TTT. The last piece has F=1 and TTT 0xffffffff. A request
// split with C=1 is acknowledged piece by piece with empty responses (F=0, a TTT). A request
// with TTT 0xffffffff starts a new exchange, discarding an unfinished one (11.10, Target Transfer
// Tag); a TTT that names no exchange of this connection is answered with a Reject (11.11, Target
// Transfer Tag: "The target may reject subsequent Text Requests with the Target Transfer Tag set to
// the 'stale' value").
//
// Keys other than SendTargets in a full-feature-phase Text Request: MaxRecvDataSegmentLength
// (Use: ALL, declarative) is taken as the initiator's new receive limit, InitiatorAlias is
// noted, other keys RFC 7143 defines are answered Reject (login-only, or not the
// initiator's to send), unknown keys NotUnderstood.
#pragma once

#include "iscsi/params.h"
#include "iscsi/pdu.h"
#include "iscsi/text.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ulp::iscsi
{

// One target record of a SendTargets response.
struct DiscoveryTarget {
	std::string name;                   // TargetName
	std::vector<std::string> addresses; // TargetAddress values ("host:port,tpgt")
};

// "host:port,tpgt"; host in brackets when it is an IPv6 literal (13.8).
std::string format_target_address(std::string_view host, uint16_t port, uint16_t tpgt);

// The SendTargets answer for value in a session of type (logged in to session_target for a
// normal session) given the targets the initiator may see, appended to out. False when the
// value is not allowed in that session (the caller answers SendTargets=Reject).
bool build_sendtargets(std::string_view value, SessionType type, std::string_view session_target,
                       std::span<const DiscoveryTarget> visible, TextWriter &out);

// Implemented by the session layer.
class DiscoveryHandler
{
public:
	virtual ~DiscoveryHandler() = default;
	// The targets initiator_name may see (ACLs applied), with all their portals.
	virtual void visible_targets(std::string_view initiator_name,
	                             std::vector<DiscoveryTarget> *out) = 0;
};

// StatSN / ExpCmdSN / MaxCmdSN for one response, from the session layer.
struct TextSeq {
	uint32_t statsn = 0;
	uint32_t exp_cmdsn = 0;
	uint32_t max_cmdsn = 0;
};

struct TextResponderConfig {
	SessionType type = SessionType::Discovery;
	std::string initiator_name;
	std::string target_name;               // the session's target (normal sessions)
	uint32_t max_send_dsl = kDefaultMrdsl; // the initiator's MaxRecvDataSegmentLength
	size_t max_text = kMaxLtdsLen;         // largest request LTDS accepted (bytes)
	uint32_t first_ttt = 1;                // first Target Transfer Tag handed out
};

enum class TextStep : uint8_t {
	Respond, // send the Text Response (bhs + data)
	Reject,  // send a Reject with reject_reason() quoting the request's header
};

// One per connection (RFC 7143 allows one outstanding text exchange per connection).
class TextResponder
{
public:
	TextResponder(const TextResponderConfig &cfg, DiscoveryHandler &handler);

	// A Text Request. On Respond, *bhs is the Text Response header (lengths are set by
	// build_pdu / build_header, which the connection layer calls with its digests) and
	// *data its data segment, valid until the next call.
	TextStep on_request(const Pdu &req, const TextSeq &seq, Bhs *bhs,
	                    std::span<const uint8_t> *data);

	RejectReason reject_reason() const { return reject_; }
	// The initiator's current MaxRecvDataSegmentLength (it may redeclare it in a Text Request).
	uint32_t max_send_dsl() const { return cfg_.max_send_dsl; }
	void set_max_send_dsl(uint32_t v) { cfg_.max_send_dsl = v; }
	// True while an exchange waits for the initiator's next request.
	bool in_exchange() const { return phase_ != Phase::Idle; }

private:
	enum class Phase : uint8_t {
		Idle,      // no exchange
		Receiving, // request pieces with C=1 arrive
		Sending,   // response pieces remain, or the last went out with F=0
	};

	TextStep reject(RejectReason r);
	TextStep emit(const TextReq &h, const TextSeq &seq, Bhs *bhs,
	              std::span<const uint8_t> *data);
	void answer(std::span<const KeyValue> pairs, TextWriter &out);
	uint32_t new_ttt();

	TextResponderConfig cfg_;
	DiscoveryHandler &handler_;
	Phase phase_ = Phase::Idle;
	uint32_t itt_ = 0;            // the exchange's ITT
	uint32_t ttt_ = kReservedTag; // the exchange's TTT
	uint32_t next_ttt_;           // next TTT to hand out
	TextAssembler in_;            // request text (C bit)
	TextChunker out_;             // response text
	std::vector<uint8_t> piece_;  // the data segment handed out last
	RejectReason reject_ = RejectReason::ProtocolError;
};

} // namespace ulp::iscsi
