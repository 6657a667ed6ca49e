// SPDX-License-Identifier: MIT
// iscsi/params.cc - the key table of RFC 7143 section 13 and RFC 7145 section 6, and the
// negotiation engine that applies it.
#include "iscsi/params.h"

#include <algorithm>

namespace ulp::iscsi
{

namespace
{

constexpr uint64_t k24 = (1u << 24) - 1;
constexpr uint8_t kBoth = kFromInitiator | kFromTarget;
constexpr uint8_t kLogin = kInSecurity | kInOperational;

// KeyDef flags, for a readable table.
constexpr uint8_t kLo = 1;           // leading only (LO)
constexpr uint8_t kSw = 2;           // session wide (SW); else connection only (CO)
constexpr uint8_t kIrrDiscovery = 4; // Irrelevant when SessionType=Discovery
constexpr uint8_t kNeedsRdma = 8;    // Irrelevant when RDMAExtensions=No

constexpr KeyDef def(std::string_view name, KeyId id, KeyType type, ValueKind kind, uint8_t senders,
                     uint8_t stages, uint8_t flags, uint64_t min = 0, uint64_t max = 0,
                     uint64_t dflt = 0)
{
	return KeyDef{name,
	              id,
	              type,
	              kind,
	              senders,
	              stages,
	              (flags & kLo) != 0,
	              (flags & kSw) != 0,
	              (flags & kIrrDiscovery) != 0,
	              (flags & kNeedsRdma) != 0,
	              min,
	              max,
	              dflt};
}

using T = KeyType;
using V = ValueKind;
using K = KeyId;

// In KeyId order. Section numbers are RFC 7143's unless marked RFC 7145.
constexpr std::array<KeyDef, kKeyCount> kKeys = {{
    // 12.1: AuthMethod, security stage only, connection scope.
    def("AuthMethod", K::AuthMethod, T::Security, V::AuthList, kBoth, kInSecurity, 0),
    // 12.1.3: the CHAP exchange.
    def("CHAP_A", K::ChapA, T::Security, V::Raw, kBoth, kInSecurity, 0),
    def("CHAP_I", K::ChapI, T::Security, V::Raw, kBoth, kInSecurity, 0),
    def("CHAP_C", K::ChapC, T::Security, V::Raw, kBoth, kInSecurity, 0),
    def("CHAP_N", K::ChapN, T::Security, V::Raw, kBoth, kInSecurity, 0),
    def("CHAP_R", K::ChapR, T::Security, V::Raw, kBoth, kInSecurity, 0),
    // 13.1: IO, CO, list, default None.
    def("HeaderDigest", K::HeaderDigest, T::List, V::DigestList, kBoth, kInOperational, 0),
    def("DataDigest", K::DataDigest, T::List, V::DigestList, kBoth, kInOperational, 0),
    // 13.2: LO, SW, 1..65535, Minimum, default 1, Irrelevant for discovery.
    def("MaxConnections", K::MaxConnections, T::NumMin, V::Number, kBoth, kInOperational,
        kLo | kSw | kIrrDiscovery, 1, 65535, 1),
    // 13.3: FFP only, a Text Request command.
    def("SendTargets", K::SendTargets, T::Command, V::Any, kFromInitiator, kInFfp, kSw),
    // 13.4: IO by the initiator, declarative (the target sends it only in SendTargets
    // responses, which are not login).
    def("TargetName", K::TargetName, T::Declarative, V::IscsiName, kFromInitiator, kLogin, kSw),
    // 13.5: IO, declarative, initiator.
    def("InitiatorName", K::InitiatorName, T::Declarative, V::IscsiName, kFromInitiator, kLogin,
        kSw),
    // 13.6, 13.7: ALL, declarative.
    def("TargetAlias", K::TargetAlias, T::Declarative, V::LocalName, kFromTarget, kLogin | kInFfp,
        kSw),
    def("InitiatorAlias", K::InitiatorAlias, T::Declarative, V::LocalName, kFromInitiator,
        kLogin | kInFfp, kSw),
    // 13.8: ALL, declarative, target (redirection and SendTargets).
    def("TargetAddress", K::TargetAddress, T::Declarative, V::Address, kFromTarget, kLogin | kInFfp,
        kSw),
    // 13.9: IO by the target, declarative, 16-bit.
    def("TargetPortalGroupTag", K::TargetPortalGroupTag, T::Declarative, V::Number, kFromTarget,
        kLogin, kSw, 0, 65535, 0),
    // 13.10: LO, OR, default Yes.
    def("InitialR2T", K::InitialR2T, T::BoolOr, V::Bool, kBoth, kInOperational,
        kLo | kSw | kIrrDiscovery, 0, 1, 1),
    // 13.11: LO, AND, default Yes.
    def("ImmediateData", K::ImmediateData, T::BoolAnd, V::Bool, kBoth, kInOperational,
        kLo | kSw | kIrrDiscovery, 0, 1, 1),
    // 13.12: ALL, declarative, CO, 512..2**24-1, default 8192.
    def("MaxRecvDataSegmentLength", K::MaxRecvDataSegmentLength, T::Declarative, V::Number, kBoth,
        kInOperational | kInFfp, 0, 512, k24, kDefaultMrdsl),
    // 13.13, 13.14: LO, Minimum.
    def("MaxBurstLength", K::MaxBurstLength, T::NumMin, V::Number, kBoth, kInOperational,
        kLo | kSw | kIrrDiscovery, 512, k24, 262144),
    def("FirstBurstLength", K::FirstBurstLength, T::NumMin, V::Number, kBoth, kInOperational,
        kLo | kSw | kIrrDiscovery, 512, k24, 65536),
    // 13.15: LO, Maximum, 0..3600, default 2. 13.16: Minimum, default 20.
    def("DefaultTime2Wait", K::DefaultTime2Wait, T::NumMax, V::Number, kBoth, kInOperational,
        kLo | kSw, 0, 3600, 2),
    def("DefaultTime2Retain", K::DefaultTime2Retain, T::NumMin, V::Number, kBoth, kInOperational,
        kLo | kSw, 0, 3600, 20),
    // 13.17: LO, Minimum, 1..65535, default 1.
    def("MaxOutstandingR2T", K::MaxOutstandingR2T, T::NumMin, V::Number, kBoth, kInOperational,
        kLo | kSw | kIrrDiscovery, 1, 65535, 1),
    // 13.18, 13.19: LO, OR, default Yes.
    def("DataPDUInOrder", K::DataPduInOrder, T::BoolOr, V::Bool, kBoth, kInOperational,
        kLo | kSw | kIrrDiscovery, 0, 1, 1),
    def("DataSequenceInOrder", K::DataSequenceInOrder, T::BoolOr, V::Bool, kBoth, kInOperational,
        kLo | kSw | kIrrDiscovery, 0, 1, 1),
    // 13.20: LO, Minimum, 0..2, default 0 (MUST be 0 for discovery: 13.21).
    def("ErrorRecoveryLevel", K::ErrorRecoveryLevel, T::NumMin, V::Number, kBoth, kInOperational,
        kLo | kSw, 0, 2, 0),
    // 13.21: LO, declarative, initiator, default Normal.
    def("SessionType", K::SessionType, T::Declarative, V::SessionType, kFromInitiator, kLogin,
        kLo | kSw),
    // 13.23: LO, list, default RFC3720, Irrelevant for discovery.
    def("TaskReporting", K::TaskReporting, T::List, V::TaskList, kBoth, kInOperational,
        kLo | kSw | kIrrDiscovery),
    // 13.24: LO, Minimum, 0..31, default 1 (this RFC), Irrelevant for discovery.
    def("iSCSIProtocolLevel", K::ProtocolLevel, T::NumMin, V::Number, kBoth, kInOperational,
        kLo | kSw | kIrrDiscovery, 0, 31, 1),
    // 13.26 (X#NodeArchitecture): LO, declarative, both.
    def("X#NodeArchitecture", K::NodeArchitecture, T::Declarative, V::TextList, kBoth, kLogin,
        kLo | kSw),
    // 13.25 (Obsoleted Keys): the marker keys of RFC 3720.
    def("IFMarker", K::IfMarker, T::Marker, V::Bool, kBoth, kInOperational, 0),
    def("OFMarker", K::OfMarker, T::Marker, V::Bool, kBoth, kInOperational, 0),
    def("IFMarkInt", K::IfMarkInt, T::MarkInt, V::Raw, kBoth, kInOperational, 0),
    def("OFMarkInt", K::OfMarkInt, T::MarkInt, V::Raw, kBoth, kInOperational, 0),
    // RFC 7145 6.3: LO, AND, default No. Irrelevant for discovery as LIO treats it.
    def("RDMAExtensions", K::RdmaExtensions, T::BoolAnd, V::Bool, kBoth, kInOperational,
        kLo | kSw | kIrrDiscovery, 0, 1, 0),
    // RFC 7145 6.4, 6.5: IO, CO, Minimum, 512..2**24-1, default 8192.
    def("TargetRecvDataSegmentLength", K::TargetRecvDsl, T::NumMin, V::Number, kBoth,
        kInOperational, kIrrDiscovery | kNeedsRdma, 512, k24, kDefaultMrdsl),
    def("InitiatorRecvDataSegmentLength", K::InitiatorRecvDsl, T::NumMin, V::Number, kBoth,
        kInOperational, kIrrDiscovery | kNeedsRdma, 512, k24, kDefaultMrdsl),
    // RFC 7145 6.7: LO, Minimum with 0 meaning no limit; 0 or 2..2**32-1, default 0.
    def("MaxOutstandingUnexpectedPDUs", K::MaxOutstandingUnexpectedPdus, T::NumMin, V::Number,
        kBoth, kInOperational, kLo | kSw | kIrrDiscovery | kNeedsRdma, 0, 0xffffffffu, 0),
}};

constexpr bool table_in_order()
{
	for (size_t i = 0; i < kKeys.size(); i++)
		if (static_cast<size_t>(kKeys[i].id) != i)
			return false;
	return true;
}
static_assert(table_in_order(), "kKeys must be in KeyId order");

bool is_constant(std::string_view v)
{
	return v == "Reject" || v == "Irrelevant" || v == "NotUnderstood";
}

std::optional<Digest> parse_digest(std::string_view v)
{
	if (v == "None")
		return Digest::None;
	if (v == "CRC32C")
		return Digest::Crc32c;
	return std::nullopt;
}

std::optional<TaskReporting> parse_task_reporting(std::string_view v)
{
	if (v == "RFC3720")
		return TaskReporting::Rfc3720;
	if (v == "ResponseFence")
		return TaskReporting::ResponseFence;
	if (v == "FastAbort")
		return TaskReporting::FastAbort;
	return std::nullopt;
}

// MaxOutstandingUnexpectedPDUs orders 0 (no limit) above every number.
uint64_t moup_rank(uint64_t v)
{
	return v == 0 ? UINT64_MAX : v;
}

bool in_domain(const KeyDef &d, uint64_t v)
{
	if (d.id == KeyId::MaxOutstandingUnexpectedPdus && v == 1)
		return false; // RFC 7145 6.7: 0 or 2..2**32-1
	return v >= d.min && v <= d.max;
}

// A list of simple values each a valid text-value of at most 255 bytes.
bool valid_list(std::string_view v, std::vector<std::string_view> *items)
{
	if (!split_list(v, items))
		return false;
	for (std::string_view it : *items)
		if (it.size() > kMaxSimpleValueLen || !valid_text_value(it))
			return false;
	return true;
}

} // namespace

const KeyDef *find_key(std::string_view name)
{
	for (const KeyDef &d : kKeys)
		if (d.name == name)
			return &d;
	return nullptr;
}

const KeyDef &key_def(KeyId id)
{
	return kKeys[static_cast<size_t>(id)];
}

std::string_view digest_name(Digest d)
{
	return d == Digest::Crc32c ? "CRC32C" : "None";
}

std::string_view task_reporting_name(TaskReporting t)
{
	switch (t) {
	case TaskReporting::ResponseFence:
		return "ResponseFence";
	case TaskReporting::FastAbort:
		return "FastAbort";
	case TaskReporting::Rfc3720:
		break;
	}
	return "RFC3720";
}

std::string_view session_type_name(SessionType t)
{
	return t == SessionType::Discovery ? "Discovery" : "Normal";
}

// ---------------------------------------------------------------------------------------------
// Negotiator

Negotiator::Negotiator(Role role, Transport transport, const OperationalPrefs &prefs)
    : role_(role), transport_(transport), prefs_(prefs)
{
	// RFC 7145: iSER connections carry no digests (the RDMA fabric's CRCs cover
	// the data); both lists are forced to None whatever the configuration says.
	if (transport_ == Transport::Iser) {
		prefs_.header_digests = {Digest::None};
		prefs_.data_digests = {Digest::None};
	}
	for (const KeyDef &d : kKeys)
		state(d.id).num = d.dflt;
	state(KeyId::HeaderDigest).num = static_cast<uint64_t>(Digest::None);
	state(KeyId::DataDigest).num = static_cast<uint64_t>(Digest::None);
	state(KeyId::TaskReporting).num = static_cast<uint64_t>(TaskReporting::Rfc3720);
	state(KeyId::SessionType).num = static_cast<uint64_t>(SessionType::Normal);
}

void Negotiator::inherit(const SessionParams &s)
{
	auto set = [&](KeyId id, uint64_t v) { state(id).num = v; };
	set(KeyId::MaxConnections, s.max_connections);
	set(KeyId::InitialR2T, s.initial_r2t);
	set(KeyId::ImmediateData, s.immediate_data);
	set(KeyId::MaxBurstLength, s.max_burst_length);
	set(KeyId::FirstBurstLength, s.first_burst_length);
	set(KeyId::DefaultTime2Wait, s.default_time2wait);
	set(KeyId::DefaultTime2Retain, s.default_time2retain);
	set(KeyId::MaxOutstandingR2T, s.max_outstanding_r2t);
	set(KeyId::DataPduInOrder, s.data_pdu_in_order);
	set(KeyId::DataSequenceInOrder, s.data_sequence_in_order);
	set(KeyId::ErrorRecoveryLevel, s.error_recovery_level);
	set(KeyId::ProtocolLevel, s.protocol_level);
	set(KeyId::TaskReporting, static_cast<uint64_t>(s.task_reporting));
	set(KeyId::RdmaExtensions, s.rdma_extensions);
	set(KeyId::MaxOutstandingUnexpectedPdus, s.max_outstanding_unexpected_pdus);
	session_type_ = s.type;
	leading_ = false;
}

bool Negotiator::fail(LoginStatus s, std::string why)
{
	if (err_.status == LoginStatus::Success) {
		err_.status = s;
		err_.why = std::move(why);
	}
	return false;
}

uint64_t Negotiator::local_num(KeyId id) const
{
	const bool target = role_ == Role::Target;
	switch (id) {
	case KeyId::MaxConnections:
		return prefs_.max_connections;
	case KeyId::InitialR2T:
		return prefs_.initial_r2t;
	case KeyId::ImmediateData:
		return prefs_.immediate_data;
	case KeyId::MaxBurstLength:
		return prefs_.max_burst_length;
	case KeyId::FirstBurstLength:
		return prefs_.first_burst_length;
	case KeyId::DefaultTime2Wait:
		return prefs_.default_time2wait;
	case KeyId::DefaultTime2Retain:
		return prefs_.default_time2retain;
	case KeyId::MaxOutstandingR2T:
		return prefs_.max_outstanding_r2t;
	case KeyId::DataPduInOrder:
		return prefs_.data_pdu_in_order;
	case KeyId::DataSequenceInOrder:
		return prefs_.data_sequence_in_order;
	case KeyId::ErrorRecoveryLevel:
		// 13.21: ErrorRecoveryLevel MUST be 0 for discovery sessions.
		return session_type_ == SessionType::Discovery ? 0 : prefs_.error_recovery_level;
	case KeyId::ProtocolLevel:
		return prefs_.protocol_level;
	case KeyId::RdmaExtensions:
		return transport_ == Transport::Iser;
	case KeyId::TargetRecvDsl:
		return target ? prefs_.iser_recv_dsl : prefs_.iser_send_dsl;
	case KeyId::InitiatorRecvDsl:
		return target ? prefs_.iser_send_dsl : prefs_.iser_recv_dsl;
	case KeyId::MaxOutstandingUnexpectedPdus:
		return prefs_.max_outstanding_unexpected_pdus;
	default:
		return key_def(id).dflt;
	}
}

bool Negotiator::rdma_on() const
{
	return state(KeyId::RdmaExtensions).num != 0;
}

uint32_t Negotiator::effective_max_burst() const
{
	return static_cast<uint32_t>(state(KeyId::MaxBurstLength).num);
}

std::string Negotiator::irrelevant_reason(const KeyDef &d) const
{
	if (d.leading_only && !leading_)
		return "leading-only key on a non-leading connection";
	if (d.irrelevant_discovery && session_type_ == SessionType::Discovery)
		return "irrelevant for a discovery session";
	if (d.needs_rdma && !rdma_on())
		return "irrelevant without RDMAExtensions=Yes";
	// 13.14: "Irrelevant when: ( InitialR2T=Yes and ImmediateData=No )".
	if (d.id == KeyId::FirstBurstLength && state(KeyId::InitialR2T).num &&
	    !state(KeyId::ImmediateData).num)
		return "no unsolicited data (InitialR2T=Yes, ImmediateData=No)";
	return {};
}

bool Negotiator::classify(const KeyValue &kv, Stage stage, SecurityKeys *sec, Item *it)
{
	it->kv = kv;
	it->def = find_key(kv.key);
	if (!it->def) {
		// 6.2: unknown keys (X- and X# ones included) are answered NotUnderstood, unless
		// the value is itself an answer (to an extension key we sent).
		it->act = is_constant(kv.value) ? Item::Act::Checked : Item::Act::Unknown;
		return true;
	}
	const KeyDef &d = *it->def;
	KeyState &st = state(d.id);
	const uint8_t from = role_ == Role::Target ? kFromInitiator : kFromTarget;
	const std::string key(kv.key);
	if (!(d.senders & from))
		return fail(LoginStatus::InitiatorError,
		            key + " may not be sent by the " +
		                (role_ == Role::Target ? "initiator" : "target"));
	const uint8_t in = stage == Stage::Security ? kInSecurity : kInOperational;
	if (!(d.stages & in))
		return fail(LoginStatus::InitiatorError,
		            key + (d.type == KeyType::Command
		                       ? " is a full feature phase command"
		                       : " is not allowed in this login stage"));
	if (st.received && d.id != KeyId::TargetAddress)
		return fail(LoginStatus::InitiatorError, key + " sent twice (RFC 7143 6.2)");
	st.received = true;

	if (d.type == KeyType::Security) {
		std::optional<std::string_view> *slot = nullptr;
		switch (d.id) {
		case KeyId::AuthMethod:
			slot = &sec->auth_method;
			break;
		case KeyId::ChapA:
			slot = &sec->chap_a;
			break;
		case KeyId::ChapI:
			slot = &sec->chap_i;
			break;
		case KeyId::ChapC:
			slot = &sec->chap_c;
			break;
		case KeyId::ChapN:
			slot = &sec->chap_n;
			break;
		default:
			slot = &sec->chap_r;
			break;
		}
		*slot = kv.value;
		it->act = Item::Act::Checked;
		return true;
	}
	if (d.type == KeyType::Declarative) {
		it->act = Item::Act::Declared;
		return declared(d, kv.value);
	}
	if (st.proposed) {
		it->act = Item::Act::Checked;
		return check_answer(d, kv.value);
	}
	// The reserved constants answer proposals; they are never proposals themselves.
	if (is_constant(kv.value))
		return fail(LoginStatus::InitiatorError,
		            key + "=" + std::string(kv.value) + " is not a proposal");
	it->act = Item::Act::Answer;
	return true;
}

bool Negotiator::declared(const KeyDef &d, std::string_view v)
{
	KeyState &st = state(d.id);
	const std::string key(d.name);
	switch (d.kind) {
	case ValueKind::IscsiName:
		if (!valid_iscsi_name(v))
			return fail(LoginStatus::InitiatorError, "malformed " + key);
		st.str = v;
		return true;
	case ValueKind::LocalName:
		if (v.size() > kMaxSimpleValueLen)
			return fail(LoginStatus::InitiatorError, key + " too long");
		st.str = v;
		return true;
	case ValueKind::Address:
		if (v.empty() || v.size() > kMaxSimpleValueLen ||
		    !valid_text_value(v.substr(0, v.find(','))))
			return fail(LoginStatus::InitiatorError, "malformed " + key);
		target_addresses_.emplace_back(v);
		st.str = v;
		return true;
	case ValueKind::SessionType:
		if (v == "Discovery")
			session_type_ = SessionType::Discovery;
		else if (v == "Normal")
			session_type_ = SessionType::Normal;
		else
			return fail(LoginStatus::SessionTypeNotSupported,
			            "SessionType=" + std::string(v));
		st.num = static_cast<uint64_t>(session_type_);
		return true;
	case ValueKind::TextList: {
		std::vector<std::string_view> items;
		if (!valid_list(v, &items))
			return fail(LoginStatus::InitiatorError, "malformed " + key);
		st.str = v;
		return true;
	}
	case ValueKind::Number: {
		uint64_t n;
		if (!parse_number(v, &n) || !in_domain(d, n))
			return fail(LoginStatus::InitiatorError,
			            key + "=" + std::string(v) + " out of range");
		st.num = n;
		return true;
	}
	default:
		break;
	}
	return fail(LoginStatus::TargetError, "no rule for declaration " + key);
}

bool Negotiator::check_answer(const KeyDef &d, std::string_view v)
{
	KeyState &st = state(d.id);
	st.proposed = false;
	const std::string key(d.name);
	// 6.2: Reject, Irrelevant and NotUnderstood leave the key at its default. (An RFC 3720
	// peer does not know iSCSIProtocolLevel or TaskReporting and says NotUnderstood.)
	if (is_constant(v))
		return true;
	const uint64_t mine = local_num(d.id);
	switch (d.type) {
	case KeyType::BoolAnd:
	case KeyType::BoolOr: {
		bool a;
		if (!parse_bool(v, &a))
			return fail(LoginStatus::InitiatorError,
			            "bad answer " + key + "=" + std::string(v));
		// 6.2.2: an AND key proposed No can only end No, an OR key proposed Yes only Yes.
		if (d.type == KeyType::BoolAnd && !mine && a)
			return fail(LoginStatus::InitiatorError,
			            key + ": Yes answered to No (AND)");
		if (d.type == KeyType::BoolOr && mine && !a)
			return fail(LoginStatus::InitiatorError, key + ": No answered to Yes (OR)");
		st.num = a;
		return true;
	}
	case KeyType::NumMin:
	case KeyType::NumMax: {
		uint64_t a;
		if (!parse_number(v, &a) || !in_domain(d, a))
			return fail(LoginStatus::InitiatorError,
			            "bad answer " + key + "=" + std::string(v));
		const bool moup = d.id == KeyId::MaxOutstandingUnexpectedPdus;
		const uint64_t ra = moup ? moup_rank(a) : a, rm = moup ? moup_rank(mine) : mine;
		// MaxOutstandingUnexpectedPDUs=0 answered to our number is accepted: tgt 1.0.85
		// answers 0 to any proposal (its own value; RFC 7145 has each side declare how
		// many unexpected PDUs it can receive, and 0 declares no limit), and refusing it
		// made every iSER login to tgtd fail. Nothing here depends on the answer: we never
		// send more unexpected PDUs than a session has slots for, and what we proposed is
		// what our receive queue holds whatever the target says.
		if (moup && a == 0) {
			st.num = a;
			return true;
		}
		if (d.type == KeyType::NumMin ? ra > rm : ra < rm)
			return fail(LoginStatus::InitiatorError,
			            key + "=" + std::string(v) + " violates the result function");
		st.num = a;
		return true;
	}
	case KeyType::List: {
		if (v.find(',') != std::string_view::npos)
			return fail(LoginStatus::InitiatorError, key + ": a list answered a list");
		if (d.kind == ValueKind::DigestList) {
			auto dg = parse_digest(v);
			const auto &mine_list = d.id == KeyId::HeaderDigest ? prefs_.header_digests
			                                                    : prefs_.data_digests;
			if (!dg ||
			    std::find(mine_list.begin(), mine_list.end(), *dg) == mine_list.end())
				return fail(LoginStatus::InitiatorError,
				            key + "=" + std::string(v) + " was not offered");
			st.num = static_cast<uint64_t>(*dg);
		} else {
			auto tr = parse_task_reporting(v);
			const auto &l = prefs_.task_reporting;
			if (!tr || std::find(l.begin(), l.end(), *tr) == l.end())
				return fail(LoginStatus::InitiatorError,
				            key + "=" + std::string(v) + " was not offered");
			st.num = static_cast<uint64_t>(*tr);
		}
		return true;
	}
	default:
		return true; // markers: nothing depends on the answer
	}
}

std::string Negotiator::answer(const KeyDef &d, std::string_view v)
{
	KeyState &st = state(d.id);
	st.sent = true;
	if (d.type == KeyType::MarkInt)
		return "Reject"; // 13.25: MUST answer Reject
	if (d.type != KeyType::Marker && !irrelevant_reason(d).empty())
		return "Irrelevant";
	switch (d.type) {
	case KeyType::Marker: {
		bool b;
		return parse_bool(v, &b) ? "No" : "Reject";
	}
	case KeyType::BoolAnd:
	case KeyType::BoolOr: {
		bool p;
		if (!parse_bool(v, &p))
			return "Reject";
		const bool mine = local_num(d.id);
		const bool r = d.type == KeyType::BoolAnd ? (p && mine) : (p || mine);
		st.num = r;
		return r ? "Yes" : "No";
	}
	case KeyType::NumMin:
	case KeyType::NumMax: {
		uint64_t p;
		if (!parse_number(v, &p) || !in_domain(d, p))
			return "Reject";
		uint64_t mine = local_num(d.id);
		uint64_t r;
		if (d.id == KeyId::MaxOutstandingUnexpectedPdus)
			r = moup_rank(p) < moup_rank(mine) ? p : mine;
		else if (d.type == KeyType::NumMin)
			r = std::min(p, mine);
		else
			r = std::max(p, mine);
		// 13.14: FirstBurstLength MUST NOT exceed MaxBurstLength (negotiated first).
		if (d.id == KeyId::FirstBurstLength)
			r = std::min<uint64_t>(r, effective_max_burst());
		st.num = r;
		return std::to_string(r);
	}
	case KeyType::List: {
		std::vector<std::string_view> items;
		if (!valid_list(v, &items))
			return "Reject";
		for (std::string_view item : items) {
			if (d.kind == ValueKind::DigestList) {
				const auto &mine = d.id == KeyId::HeaderDigest
				                       ? prefs_.header_digests
				                       : prefs_.data_digests;
				auto dg = parse_digest(item);
				if (dg && std::find(mine.begin(), mine.end(), *dg) != mine.end()) {
					st.num = static_cast<uint64_t>(*dg);
					return std::string(item);
				}
			} else {
				auto tr = parse_task_reporting(item);
				const auto &mine = prefs_.task_reporting;
				if (tr && std::find(mine.begin(), mine.end(), *tr) != mine.end()) {
					st.num = static_cast<uint64_t>(*tr);
					return std::string(item);
				}
			}
		}
		// 6.2.1: nothing acceptable; the key keeps its default.
		return "Reject";
	}
	default:
		break;
	}
	return "Reject";
}

bool Negotiator::receive(std::span<const KeyValue> pairs, Stage stage, TextWriter &reply,
                         SecurityKeys *sec)
{
	std::vector<Item> items(pairs.size());
	for (size_t i = 0; i < pairs.size(); i++)
		if (!classify(pairs[i], stage, sec, &items[i]))
			return false;
	// Answers that others depend on first: RDMAExtensions decides whether the iSER keys are
	// relevant, InitialR2T/ImmediateData whether FirstBurstLength is, MaxBurstLength bounds
	// FirstBurstLength. (open-iscsi sends RDMAExtensions after the iSER lengths.)
	auto early = [](KeyId id) {
		return id == KeyId::RdmaExtensions || id == KeyId::InitialR2T ||
		       id == KeyId::ImmediateData || id == KeyId::MaxBurstLength;
	};
	for (int pass = 0; pass < 2; pass++)
		for (Item &it : items)
			if (it.act == Item::Act::Answer && early(it.def->id) == (pass == 0))
				it.answer = answer(*it.def, it.kv.value);
	for (const Item &it : items) {
		if (it.act == Item::Act::Answer)
			reply.add(it.kv.key, it.answer);
		else if (it.act == Item::Act::Unknown)
			reply.add(it.kv.key, "NotUnderstood");
	}
	return true;
}

void Negotiator::propose_raw(TextWriter &out, KeyId id, std::string_view v)
{
	KeyState &st = state(id);
	if (st.sent)
		return;
	out.add(key_def(id).name, v);
	st.sent = true;
	st.proposed = true;
}

void Negotiator::propose_num(TextWriter &out, KeyId id, uint64_t v)
{
	propose_raw(out, id, std::to_string(v));
}

void Negotiator::propose_bool(TextWriter &out, KeyId id, bool v)
{
	propose_raw(out, id, v ? "Yes" : "No");
}

void Negotiator::propose_operational(TextWriter &out)
{
	auto list = [](const std::vector<Digest> &l) {
		std::string s;
		for (Digest d : l) {
			if (!s.empty())
				s += ',';
			s += digest_name(d);
		}
		return s;
	};
	const bool normal = session_type_ == SessionType::Normal;
	// The set open-iscsi sends (usr/login.c fill_op_params_text), minus the obsolete markers.
	if (transport_ == Transport::Tcp) {
		propose_raw(out, KeyId::HeaderDigest, list(prefs_.header_digests));
		propose_raw(out, KeyId::DataDigest, list(prefs_.data_digests));
	}
	if (leading_) {
		propose_num(out, KeyId::DefaultTime2Wait, prefs_.default_time2wait);
		propose_num(out, KeyId::DefaultTime2Retain, prefs_.default_time2retain);
		propose_num(out, KeyId::ErrorRecoveryLevel, local_num(KeyId::ErrorRecoveryLevel));
	}
	if (normal && leading_) {
		propose_bool(out, KeyId::InitialR2T, prefs_.initial_r2t);
		propose_bool(out, KeyId::ImmediateData, prefs_.immediate_data);
		propose_num(out, KeyId::MaxBurstLength, prefs_.max_burst_length);
		propose_num(out, KeyId::FirstBurstLength,
		            std::min(prefs_.first_burst_length, prefs_.max_burst_length));
		propose_num(out, KeyId::MaxOutstandingR2T, prefs_.max_outstanding_r2t);
		propose_num(out, KeyId::MaxConnections, prefs_.max_connections);
		propose_bool(out, KeyId::DataPduInOrder, prefs_.data_pdu_in_order);
		propose_bool(out, KeyId::DataSequenceInOrder, prefs_.data_sequence_in_order);
		if (prefs_.protocol_level != key_def(KeyId::ProtocolLevel).dflt)
			propose_num(out, KeyId::ProtocolLevel, prefs_.protocol_level);
		if (prefs_.task_reporting.size() != 1 ||
		    prefs_.task_reporting[0] != TaskReporting::Rfc3720) {
			std::string s;
			for (TaskReporting t : prefs_.task_reporting) {
				if (!s.empty())
					s += ',';
				s += task_reporting_name(t);
			}
			propose_raw(out, KeyId::TaskReporting, s);
		}
	}
	if (normal && transport_ == Transport::Iser) {
		// RFC 7145 6.2-6.5: the iSER keys; MaxRecvDataSegmentLength is not used.
		propose_num(out, KeyId::InitiatorRecvDsl, prefs_.iser_recv_dsl);
		propose_num(out, KeyId::TargetRecvDsl, prefs_.iser_send_dsl);
		if (leading_) {
			propose_bool(out, KeyId::RdmaExtensions, true);
			if (prefs_.max_outstanding_unexpected_pdus)
				propose_num(out, KeyId::MaxOutstandingUnexpectedPdus,
				            prefs_.max_outstanding_unexpected_pdus);
		}
	} else {
		declare_mrdsl(out);
	}
	declare_node_architecture(out);
}

void Negotiator::declare_mrdsl(TextWriter &out)
{
	KeyState &st = state(KeyId::MaxRecvDataSegmentLength);
	if (st.sent)
		return;
	out.add_num("MaxRecvDataSegmentLength", prefs_.max_recv_dsl);
	st.sent = true;
}

void Negotiator::declare_node_architecture(TextWriter &out)
{
	KeyState &st = state(KeyId::NodeArchitecture);
	if (st.sent || prefs_.node_architecture.empty() || !leading_)
		return;
	out.add("X#NodeArchitecture", prefs_.node_architecture);
	st.sent = true;
}

bool Negotiator::awaiting_answers() const
{
	return std::any_of(keys_.begin(), keys_.end(),
	                   [](const KeyState &s) { return s.proposed; });
}

bool Negotiator::finish(SessionParams *s, ConnParams *c)
{
	for (const KeyDef &d : kKeys) {
		KeyState &st = state(d.id);
		if (!st.proposed)
			continue;
		// 6.2.2: the only answers that may be left out: AND proposed No, OR proposed Yes.
		const uint64_t mine = local_num(d.id);
		if ((d.type == KeyType::BoolAnd && !mine) || (d.type == KeyType::BoolOr && mine)) {
			st.num = mine;
			st.proposed = false;
			continue;
		}
		return fail(LoginStatus::InitiatorError, "no answer for " + std::string(d.name));
	}
	auto num = [&](KeyId id) { return state(id).num; };
	// 13.14: FirstBurstLength MUST NOT exceed MaxBurstLength. Both sides clamp the same way
	// if a peer's answers contradict each other.
	if (num(KeyId::FirstBurstLength) > num(KeyId::MaxBurstLength))
		state(KeyId::FirstBurstLength).num = num(KeyId::MaxBurstLength);

	s->type = session_type_;
	s->initiator_name = state(KeyId::InitiatorName).str;
	s->target_name = state(KeyId::TargetName).str;
	s->initiator_alias = state(KeyId::InitiatorAlias).str;
	s->target_alias = state(KeyId::TargetAlias).str;
	s->tpgt = static_cast<uint16_t>(num(KeyId::TargetPortalGroupTag));
	s->max_connections = static_cast<uint16_t>(num(KeyId::MaxConnections));
	s->initial_r2t = num(KeyId::InitialR2T);
	s->immediate_data = num(KeyId::ImmediateData);
	s->max_burst_length = static_cast<uint32_t>(num(KeyId::MaxBurstLength));
	s->first_burst_length = static_cast<uint32_t>(num(KeyId::FirstBurstLength));
	s->default_time2wait = static_cast<uint16_t>(num(KeyId::DefaultTime2Wait));
	s->default_time2retain = static_cast<uint16_t>(num(KeyId::DefaultTime2Retain));
	s->max_outstanding_r2t = static_cast<uint16_t>(num(KeyId::MaxOutstandingR2T));
	s->data_pdu_in_order = num(KeyId::DataPduInOrder);
	s->data_sequence_in_order = num(KeyId::DataSequenceInOrder);
	s->error_recovery_level = static_cast<uint8_t>(num(KeyId::ErrorRecoveryLevel));
	s->protocol_level = static_cast<uint8_t>(num(KeyId::ProtocolLevel));
	s->task_reporting = static_cast<TaskReporting>(num(KeyId::TaskReporting));
	s->rdma_extensions = rdma_on();
	s->max_outstanding_unexpected_pdus =
	    static_cast<uint32_t>(num(KeyId::MaxOutstandingUnexpectedPdus));
	if (session_type_ == SessionType::Discovery) {
		// 13.21: a discovery session implies MaxConnections=1 and ErrorRecoveryLevel=0.
		s->max_connections = 1;
		s->error_recovery_level = 0;
	}

	c->transport = transport_;
	c->header_digest = static_cast<Digest>(num(KeyId::HeaderDigest));
	c->data_digest = static_cast<Digest>(num(KeyId::DataDigest));
	const KeyState &mrdsl = state(KeyId::MaxRecvDataSegmentLength);
	const uint32_t own = mrdsl.sent ? prefs_.max_recv_dsl : kDefaultMrdsl;
	const uint32_t peer = mrdsl.received ? static_cast<uint32_t>(mrdsl.num) : kDefaultMrdsl;
	if (transport_ == Transport::Iser && rdma_on()) {
		c->initiator_recv_dsl = static_cast<uint32_t>(num(KeyId::InitiatorRecvDsl));
		c->target_recv_dsl = static_cast<uint32_t>(num(KeyId::TargetRecvDsl));
	} else if (role_ == Role::Target) {
		c->initiator_recv_dsl = peer;
		c->target_recv_dsl = own;
	} else {
		c->initiator_recv_dsl = own;
		c->target_recv_dsl = peer;
	}
	return true;
}

} // namespace ulp::iscsi
