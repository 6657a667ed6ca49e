// SPDX-License-Identifier: MIT
// iscsi/params.h - login and text key negotiation (RFC 7143 6.2, section 13; RFC 7145 6).
//
// The key table (key_def) says for every key RFC 7143 and RFC 7145 define: its result
// function, value domain, default, who may send it, in which stages, whether it is leading
// only (LO) and session wide (SW), and when it is Irrelevant. A Negotiator applies the
// table for one side of one connection's login: it answers the peer's proposals, checks the
// peer's answers to its own, records declarations, and ends with SessionParams and
// ConnParams. The login engines (login.h, login_initiator.h) feed it whole LTDSs and
// handle AuthMethod and CHAP themselves (the Negotiator hands those keys back).
//
// Rules applied (RFC 7143 section numbers):
//  - 6.2.1 list: the acceptor answers the first value of the proposer's list it supports,
//    or Reject when it supports none (the key keeps its default); the proposer checks the
//    answer is one value it offered.
//  - 6.2.2 simple values: numerical keys answer min/max(offered, own), booleans AND/OR.
//    A response is optional only for AND + "No" and OR + "Yes"; we answer anyway (allowed).
//  - 6.2: Reject for a value outside the key's domain (syntax, range); Irrelevant for a key
//    that does not apply (a key's "Irrelevant when" in section 13, LO keys on a non-leading
//    connection);
//    NotUnderstood for a key we do not know, X- and X# extension keys included.
//  - 6.2 "Neither the initiator nor the target should attempt to declare or negotiate a
//    parameter more than once during login": a repeated key is a protocol error (target:
//    Login reject, initiator error; initiator: drop). TargetAddress may repeat.
//  - Keys sent by the wrong side, security keys outside the security stage, operational
//    keys in it, and FFP-only keys (SendTargets) during login are protocol errors, as LIO
//    treats them.
//  - 13.25 obsolete marker keys: IFMarker/OFMarker are answered "No" (MAY; RFC 3720 peers
//    expect a boolean), IFMarkInt/OFMarkInt "Reject" (MUST).
//  - 13.14: FirstBurstLength never exceeds MaxBurstLength; it is Irrelevant when
//    InitialR2T=Yes and ImmediateData=No.
//  - RFC 7145 6: RDMAExtensions (AND, default No); InitiatorRecvDataSegmentLength and
//    TargetRecvDataSegmentLength (512..2**24-1, default 8192) and
//    MaxOutstandingUnexpectedPDUs (0 = no limit, else 2..2**32-1) are Irrelevant unless
//    RDMAExtensions=Yes. The RFC's result function for the two lengths is Minimum, which is
//    what open-iscsi, libiscsi and FreeBSD's iscsid compute, though open-iscsi sends both.
//  - Declarations with an invalid value (a malformed InitiatorName, MaxRecvDataSegmentLength
//    out of range) cannot be answered with Reject (nobody answers a declaration): the login
//    fails with initiator error.
#pragma once

#include "iscsi/pdu.h"
#include "iscsi/text.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ulp::iscsi
{

enum class Role : uint8_t { Initiator, Target };
enum class Transport : uint8_t { Tcp, Iser };
enum class SessionType : uint8_t { Normal, Discovery };
enum class Digest : uint8_t { None, Crc32c };
enum class AuthMethod : uint8_t { None, Chap };
// TaskReporting values (13.23).
enum class TaskReporting : uint8_t { Rfc3720, ResponseFence, FastAbort };

enum class KeyId : uint8_t {
	AuthMethod,
	ChapA,
	ChapI,
	ChapC,
	ChapN,
	ChapR,
	HeaderDigest,
	DataDigest,
	MaxConnections,
	SendTargets,
	TargetName,
	InitiatorName,
	TargetAlias,
	InitiatorAlias,
	TargetAddress,
	TargetPortalGroupTag,
	InitialR2T,
	ImmediateData,
	MaxRecvDataSegmentLength,
	MaxBurstLength,
	FirstBurstLength,
	DefaultTime2Wait,
	DefaultTime2Retain,
	MaxOutstandingR2T,
	DataPduInOrder,
	DataSequenceInOrder,
	ErrorRecoveryLevel,
	SessionType,
	TaskReporting,
	ProtocolLevel,
	NodeArchitecture,
	IfMarker,
	OfMarker,
	IfMarkInt,
	OfMarkInt,
	RdmaExtensions,
	TargetRecvDsl,
	InitiatorRecvDsl,
	MaxOutstandingUnexpectedPdus,
	Count,
};
constexpr size_t kKeyCount = static_cast<size_t>(KeyId::Count);

enum class KeyType : uint8_t {
	Security,    // AuthMethod, CHAP_*: the login engines run them (chap.h)
	Declarative, // states a value; never answered
	BoolAnd,     // result = AND of both values
	BoolOr,      // result = OR of both values
	NumMin,      // result = the smaller value
	NumMax,      // result = the larger value
	List,        // acceptor picks the first proposed value it supports
	Marker,      // obsolete IFMarker/OFMarker: answered "No"
	MarkInt,     // obsolete IFMarkInt/OFMarkInt: answered "Reject"
	Command,     // SendTargets: a full-feature-phase Text Request command
};

// What a value must look like.
enum class ValueKind : uint8_t {
	Raw,         // checked by the key's engine (CHAP values)
	Bool,        // Yes | No
	Number,      // numerical-value within [min, max]
	DigestList,  // list of CRC32C | None
	AuthList,    // list of auth method names
	TaskList,    // list of RFC3720 | ResponseFence | FastAbort
	IscsiName,   // iSCSI name (text.h valid_iscsi_name)
	LocalName,   // UTF-8 simple value (aliases)
	TextList,    // list of text-values (X#NodeArchitecture)
	SessionType, // Discovery | Normal
	Address,     // TargetAddress: domainname[:port][,tpgt]
	Any,         // SendTargets: All | <iSCSI name> | empty
};

constexpr uint8_t kFromInitiator = 1; // KeyDef::senders
constexpr uint8_t kFromTarget = 2;
constexpr uint8_t kInSecurity = 1; // KeyDef::stages
constexpr uint8_t kInOperational = 2;
constexpr uint8_t kInFfp = 4;

struct KeyDef {
	std::string_view name; // as on the wire
	KeyId id;
	KeyType type;
	ValueKind kind;
	uint8_t senders;           // kFromInitiator | kFromTarget
	uint8_t stages;            // kInSecurity | kInOperational | kInFfp
	bool leading_only;         // LO: negotiated on the leading connection only
	bool session_wide;         // SW scope (else connection only)
	bool irrelevant_discovery; // "Irrelevant when: SessionType=Discovery"
	bool needs_rdma;           // "Irrelevant when: RDMAExtensions=No" (RFC 7145)
	uint64_t min;              // numerical range (Number keys)
	uint64_t max;
	uint64_t dflt; // default of Number / Bool keys
};

// The table entry for a key name, or nullptr for a key RFC 7143/7145 do not define (or
// that is defined but not implemented, like SRP_* and KRB_AP_*: NotUnderstood).
const KeyDef *find_key(std::string_view name);
const KeyDef &key_def(KeyId id);

// Session-wide results (SW keys and the login's identity).
struct SessionParams {
	SessionType type = SessionType::Normal;
	std::string initiator_name;          // InitiatorName
	std::string target_name;             // TargetName (empty for discovery)
	std::string initiator_alias;         // InitiatorAlias (may be empty)
	std::string target_alias;            // TargetAlias (may be empty)
	uint16_t tpgt = 0;                   // TargetPortalGroupTag
	Isid isid{};                         // initiator part of the session ID
	uint16_t tsih = 0;                   // target part, non-zero once the session exists
	uint16_t max_connections = 1;        // MaxConnections
	bool initial_r2t = true;             // InitialR2T
	bool immediate_data = true;          // ImmediateData
	uint32_t max_burst_length = 262144;  // MaxBurstLength (bytes)
	uint32_t first_burst_length = 65536; // FirstBurstLength (bytes, <= max_burst_length)
	uint16_t default_time2wait = 2;      // DefaultTime2Wait (seconds)
	uint16_t default_time2retain = 20;   // DefaultTime2Retain (seconds)
	uint16_t max_outstanding_r2t = 1;    // MaxOutstandingR2T per task
	bool data_pdu_in_order = true;       // DataPDUInOrder
	bool data_sequence_in_order = true;  // DataSequenceInOrder
	uint8_t error_recovery_level = 0;    // ErrorRecoveryLevel 0..2
	uint8_t protocol_level = 1;          // iSCSIProtocolLevel (13.24; RFC 7143 is 1)
	TaskReporting task_reporting = TaskReporting::Rfc3720;
	bool rdma_extensions = false;                 // RDMAExtensions (RFC 7145)
	uint32_t max_outstanding_unexpected_pdus = 0; // RFC 7145; 0: no limit
};

// Connection results (CO keys).
struct ConnParams {
	Transport transport = Transport::Tcp;
	uint16_t cid = 0;                    // CID
	Digest header_digest = Digest::None; // HeaderDigest (always None on iSER)
	Digest data_digest = Digest::None;   // DataDigest (always None on iSER)
	// Largest data segment the target may send to the initiator: the initiator's declared
	// MaxRecvDataSegmentLength on TCP, InitiatorRecvDataSegmentLength on iSER.
	uint32_t initiator_recv_dsl = kDefaultMrdsl;
	// Largest data segment the initiator may send to the target: the target's
	// MaxRecvDataSegmentLength on TCP, TargetRecvDataSegmentLength on iSER.
	uint32_t target_recv_dsl = kDefaultMrdsl;
	AuthMethod auth = AuthMethod::None; // how the initiator was authenticated
	bool mutual_auth = false;           // the target was authenticated too (mutual CHAP)
};

// What one side wants: its proposals (initiator) or the values it accepts (target).
struct OperationalPrefs {
	std::vector<Digest> header_digests{Digest::None}; // supported, in preference order
	std::vector<Digest> data_digests{Digest::None};
	uint32_t max_recv_dsl = kDefaultMrdsl; // our MaxRecvDataSegmentLength declaration
	uint32_t max_burst_length = 262144;
	uint32_t first_burst_length = 65536;
	bool initial_r2t = true;
	bool immediate_data = true;
	uint16_t max_outstanding_r2t = 1;
	uint16_t max_connections = 1;
	bool data_pdu_in_order = true;
	bool data_sequence_in_order = true;
	uint8_t error_recovery_level = 0;
	uint16_t default_time2wait = 2;
	uint16_t default_time2retain = 20;
	uint8_t protocol_level = 1;
	std::vector<TaskReporting> task_reporting{TaskReporting::Rfc3720};
	std::string node_architecture; // X#NodeArchitecture to declare (empty: none)
	// iSER (RFC 7145): our receive buffer for control-type PDUs, and the largest data
	// segment we are willing to send in one; and our MaxOutstandingUnexpectedPDUs.
	uint32_t iser_recv_dsl = kDefaultMrdsl;
	uint32_t iser_send_dsl = kDefaultMrdsl;
	uint32_t max_outstanding_unexpected_pdus = 0;
};

// The security keys of one LTDS, handed back to the login engine.
struct SecurityKeys {
	std::optional<std::string_view> auth_method; // AuthMethod
	std::optional<std::string_view> chap_a;      // CHAP_A
	std::optional<std::string_view> chap_i;      // CHAP_I
	std::optional<std::string_view> chap_c;      // CHAP_C
	std::optional<std::string_view> chap_n;      // CHAP_N
	std::optional<std::string_view> chap_r;      // CHAP_R
	bool any() const { return auth_method || chap_a || chap_i || chap_c || chap_n || chap_r; }
};

// A negotiation failure: the login status to report (target side) and why.
struct NegError {
	LoginStatus status = LoginStatus::Success;
	std::string why;
};

class Negotiator
{
public:
	Negotiator(Role role, Transport transport, const OperationalPrefs &prefs);

	// Set before the first operational keys are processed: a discovery session makes many
	// keys Irrelevant; a non-leading connection answers LO keys Irrelevant.
	void set_session_type(SessionType t) { session_type_ = t; }
	void set_leading(bool leading) { leading_ = leading; }
	// Non-leading connection: take the session-wide results of the existing session.
	void inherit(const SessionParams &s);

	// Process the pairs of one complete LTDS received in stage. Answers go to reply in the
	// order the keys came; security keys go to *sec (the caller answers them). False on a
	// protocol error, with error() saying which status and why.
	bool receive(std::span<const KeyValue> pairs, Stage stage, TextWriter &reply,
	             SecurityKeys *sec);

	// Initiator: the operational keys it proposes (once, in the first operational request).
	void propose_operational(TextWriter &out);
	// Our own declarations, each at most once per login (repeats are ignored).
	void declare_mrdsl(TextWriter &out); // MaxRecvDataSegmentLength
	void declare_node_architecture(TextWriter &out);
	// True while one of our proposals has not been answered.
	bool awaiting_answers() const;

	// The peer's declarations so far.
	bool received(KeyId id) const { return state(id).received; }
	const std::string &peer_string(KeyId id) const { return state(id).str; }
	uint64_t value(KeyId id) const { return state(id).num; }
	SessionType session_type() const { return session_type_; }

	// After the last exchange: consistency checks (FirstBurstLength <= MaxBurstLength is
	// enforced by clamping) and the results. False with error() set if a required answer is
	// missing.
	bool finish(SessionParams *s, ConnParams *c);

	const NegError &error() const { return err_; }

private:
	struct KeyState {
		bool received = false; // the peer sent the key (a second time is an error)
		bool sent = false;     // we sent it (proposal, answer or declaration)
		bool proposed = false; // our proposal awaits its answer
		uint64_t num = 0;      // result: number, boolean, enum
		std::string str;       // result: string (names, aliases, addresses)
	};
	// One received pair during receive().
	struct Item {
		const KeyDef *def; // nullptr: unknown key
		KeyValue kv;
		enum class Act : uint8_t { Answer, Declared, Checked, Unknown } act;
		std::string answer; // Answer: the value we reply with
	};

	KeyState &state(KeyId id) { return keys_[static_cast<size_t>(id)]; }
	const KeyState &state(KeyId id) const { return keys_[static_cast<size_t>(id)]; }
	bool fail(LoginStatus s, std::string why);
	bool classify(const KeyValue &kv, Stage stage, SecurityKeys *sec, Item *it);
	bool declared(const KeyDef &d, std::string_view v);
	bool check_answer(const KeyDef &d, std::string_view v);
	std::string answer(const KeyDef &d, std::string_view v);
	std::string irrelevant_reason(const KeyDef &d) const;
	uint64_t local_num(KeyId id) const;
	bool rdma_on() const;
	uint32_t effective_max_burst() const;
	void propose_num(TextWriter &out, KeyId id, uint64_t v);
	void propose_bool(TextWriter &out, KeyId id, bool v);
	void propose_raw(TextWriter &out, KeyId id, std::string_view v);

	Role role_;
	Transport transport_;
	OperationalPrefs prefs_;
	SessionType session_type_ = SessionType::Normal;
	bool leading_ = true;
	std::array<KeyState, kKeyCount> keys_{};
	std::vector<std::string> target_addresses_; // TargetAddress values (may repeat)
	NegError err_;
};

// Helpers shared with the login engines.
std::string_view digest_name(Digest d);
std::string_view task_reporting_name(TaskReporting t);
std::string_view session_type_name(SessionType t);

} // namespace ulp::iscsi
