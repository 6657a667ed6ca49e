// SPDX-License-Identifier: MIT
// scsi/pr_internal.h - the reservation state of a logical unit, and what the reservation
// files share: pr.cc (state, resets, unit attentions), pr_check.cc (the conflict tables),
// pr_in.cc, pr_out.cc (PERSISTENT RESERVE IN/OUT), pr_spc2.cc (RESERVE/RELEASE),
// pr_transport_id.cc, pr_persist.cc (the APTPL state file) and pr_shared.cc (a state shared
// by gateways). The rest of the core uses scsi/pr.h (and the shared state's store,
// scsi/pr_shared.h).
//
// Model (SPC-4 5.13): a registration is an I_T nexus (or, with ALL_TG_PT, an initiator port
// through every target port) with its reservation key. At most one persistent reservation
// exists per LU; for the all-registrants types every registration holds it, for the others
// one registration does (`holder`). The SPC-2 reservation (RESERVE(6)/(10)) is a separate,
// older mechanism: one I_T nexus holds the whole LU.
//
// Locking: PrState::lock guards everything here. Lock order: PrState::shared_install (a
// shared state's installs, pr_shared.cc), then PrState::lock, then LogicalUnit::lock_ (unit
// attentions are queued with the reservation lock held, so that no command of a preempted
// nexus runs between the change and its unit attention). PrState::lock is never held across
// a fabric callback, a completion or abort_nexus_tasks.
#pragma once

#include "scsi/core_internal.h"
#include "scsi/lu.h"
#include "scsi/pr.h"
#include "scsi/pr_shared.h"
#include "scsi/pr_store.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ulp::scsi
{

// SPC-4 6.17.2 table 169: persistent reservation types (the TYPE field of PERSISTENT RESERVE
// OUT, and of READ RESERVATION / READ FULL STATUS data).
enum class PrType : uint8_t {
	None = 0x0, // no persistent reservation (not a wire value: 0h is obsolete)
	WriteExclusive = 0x1,
	ExclusiveAccess = 0x3,
	WriteExclusiveRegOnly = 0x5,
	ExclusiveAccessRegOnly = 0x6,
	WriteExclusiveAllReg = 0x7,
	ExclusiveAccessAllReg = 0x8,
};

constexpr bool pr_type_valid(uint8_t t)
{
	return t == 0x1 || t == 0x3 || (t >= 0x5 && t <= 0x8);
}
// Every registrant holds the reservation (SPC-4 5.13.10).
constexpr bool pr_all_registrants(PrType t)
{
	return t == PrType::WriteExclusiveAllReg || t == PrType::ExclusiveAccessAllReg;
}
// Registrants share the access of the holder (SPC-4 5.13.1 table 66: RO and AR columns).
constexpr bool pr_registrants_share(PrType t)
{
	return t == PrType::WriteExclusiveRegOnly || t == PrType::ExclusiveAccessRegOnly ||
	       pr_all_registrants(t);
}
// Only writes are exclusive: reads are open to every I_T nexus.
constexpr bool pr_write_exclusive(PrType t)
{
	return t == PrType::WriteExclusive || t == PrType::WriteExclusiveRegOnly ||
	       t == PrType::WriteExclusiveAllReg;
}

// SPC-4 6.17.2 table 168: the only scope left (LU_SCOPE); element scope is obsolete.
inline constexpr uint8_t kPrScopeLu = 0x0;

// SPC-4 6.17.2 table 167: PERSISTENT RESERVE OUT service actions.
enum class PrOutSa : uint8_t {
	Register = 0x00,
	Reserve = 0x01,
	Release = 0x02,
	Clear = 0x03,
	Preempt = 0x04,
	PreemptAndAbort = 0x05,
	RegisterAndIgnore = 0x06,
	RegisterAndMove = 0x07,
	ReplaceLostReservation = 0x08, // SPC-5; not offered (RLR_C 0)
};

// SPC-4 6.16.1 table 160: PERSISTENT RESERVE IN service actions.
enum class PrInSa : uint8_t {
	ReadKeys = 0x00,
	ReadReservation = 0x01,
	ReportCapabilities = 0x02,
	ReadFullStatus = 0x03,
};

// SPC-4 7.6.2 table 444: protocol identifiers, as TransportIDs carry them.
enum class ProtoId : uint8_t {
	Fcp = 0x0,
	Srp = 0x4,
	Iscsi = 0x5,
	Sas = 0x6,
};

struct Registration {
	uint64_t id = 0; // unique within the LU: names the holder
	NexusId nexus;   // the registering I_T nexus
	uint64_t key = 0;
	bool all_tg_pt = false;         // SPC-4 6.17.3: registered through every target port
	ProtoId proto = ProtoId::Iscsi; // for its TransportID (READ FULL STATUS)

	// Whether this registration is the one of I_T nexus n.
	bool covers(const NexusId &n) const
	{
		return n.initiator_port == nexus.initiator_port &&
		       (all_tg_pt || n.rtpi == nexus.rtpi);
	}
};

// What a change of the reservation state does to I_T nexuses besides the state itself: a unit
// attention for, or the abort of the tasks of, the I_T nexuses of a registration (one, or with
// ALL_TG_PT the initiator port through every target port). A LU alone acts on them as they
// happen (pr_ua, pr_nexuses); a change of state shared by several gateways records them
// (PrState::record), and every gateway acts on them for the I_T nexuses it has
// (pr_shared.cc).
struct PrEvent {
	enum Kind : uint8_t {
		Ua = 1,    // queue unit attention asc_ascq
		Abort = 2, // abort the tasks (PREEMPT AND ABORT, SPC-4 5.13.11.2.5)
	};
	Kind kind = Ua;
	uint16_t asc_ascq = 0;  // Ua: the condition (UA_RESERVATIONS_*, UA_REGISTRATIONS_*)
	NexusId nexus;          // the registration's I_T nexus
	bool all_tg_pt = false; // ... standing for its initiator port through every target port
	auto operator<=>(const PrEvent &) const = default;
};

struct PrState {
	std::mutex lock;
	// A persistent or an SPC-2 reservation exists: pr_check's lock-free fast path for the
	// (common) unreserved LU. Written under lock; a command racing a change is ordered
	// either side of it, as if it had arrived a moment earlier or later.
	std::atomic<bool> reserved{false};

	uint32_t generation = 0;        // PRgeneration (SPC-4 6.16.2): a wrapping counter
	uint64_t next_id = 1;           // for Registration::id
	std::vector<Registration> regs; // in registration order (READ KEYS lists them so)
	PrType type = PrType::None;     // the persistent reservation, None when there is none
	uint64_t holder = 0;            // its holder's Registration::id (not for AR types)
	std::optional<NexusId> spc2;    // the SPC-2 reservation's holder (RESERVE(6)/(10))
	// PREEMPT AND ABORTs between their change and the end of their marking the preempted
	// tasks, and the PERSISTENT RESERVE OUT commands waiting for them (pr_out.cc).
	unsigned scanning = 0;
	std::vector<Cmd *> deferred;

	// Persist through power loss (SPC-4 5.13.5, pr_persist.cc). store and file are set
	// before the LU is exported (pr_attach_store) and never change: read without lock.
	PrStore *store = nullptr;     // where the state file lives; null: PTPL_C 0, APTPL 1 refused
	std::string file;             // the state file's name in store
	bool aptpl = false;           // PTPL_A: the last valid APTPL bit received was one
	bool persisting = false;      // a PERSISTENT RESERVE OUT's change is being written; the
	                              // others wait in deferred meanwhile
	std::vector<uint8_t> durable; // what the state file holds now; empty: there is none
	bool durable_unknown = false; // a write failed: the file may hold anything, rewrite it

	// Shared with other gateways (SPC-4 5.13 across processes, pr_shared.cc): set before the
	// LU is exported (pr_attach_shared) and cleared after it no longer is
	// (pr_detach_shared): read without lock by the commands in between.
	PrShared *shared = nullptr;
	std::string shared_name; // the LU's identity in the shared state image
	// Serializes reading the shared state and installing it (with the marking of the tasks
	// it aborts), and a change's write with its install here: what one thread installs,
	// another does not see half done. Taken before lock; held across the store's read and
	// write, never across an announcement.
	std::mutex shared_install;
	uint64_t shared_version = 0; // the version of the shared state installed here (lock)
	// The versions installs came from whose aborted tasks have not all ended here (lock):
	// a notify of version v is answered once none from below v is left (pr_shared.cc).
	std::set<uint64_t> shared_aborting;
	std::vector<std::pair<uint64_t, std::function<void()>>> shared_waiting; // (v, answer)
	// PERSISTENT RESERVE OUT and IN commands posted to the store's thread, not yet started
	// (lock): one that an install aborts ends there and then, not when the thread gets to
	// it (the thread may be waiting for an announcement whose answers wait for that end).
	std::vector<std::pair<Cmd *, uint64_t>> shared_queued; // with their jobs' numbers
	uint64_t shared_queue_seq = 0;                         // the last job's number (lock)
	// Scratch states only (pr_shared.cc applies a service action to a copy of the shared
	// state, never to a LU's): where the change's events go instead of being acted on, and
	// the other gateways' relative target port identifiers (REGISTER AND MOVE may name them).
	std::vector<PrEvent> *record = nullptr;
	std::vector<uint16_t> other_ports;

	Registration *find(const NexusId &n)
	{
		for (Registration &r : regs)
			if (r.covers(n))
				return &r;
		return nullptr;
	}
	// SPC-4 5.13.10: whether registration r (may be null) holds the persistent reservation.
	bool holds(const Registration *r) const
	{
		if (!r || type == PrType::None)
			return false;
		return pr_all_registrants(type) || r->id == holder;
	}
	const Registration *holder_reg() const
	{
		for (const Registration &r : regs)
			if (r.id == holder)
				return &r;
		return nullptr;
	}
	void release()
	{
		type = PrType::None;
		holder = 0;
		sync();
	}
	void sync() { reserved.store(type != PrType::None || spc2, std::memory_order_release); }
};

inline PrState &pr_of(LogicalUnit &lu)
{
	return *lu.pr_;
}

// What a PERSISTENT RESERVE OUT may change: kept before it changes anything, and put back
// when the change could not be made durable (pr_out.cc).
struct PrUndo {
	std::vector<Registration> regs;
	PrType type = PrType::None;
	uint64_t holder = 0;
	uint64_t next_id = 1;
	uint32_t generation = 0;
	bool aptpl = false;
};
PrUndo pr_undo_save(const PrState &pr);
void pr_undo_restore(PrState &pr, PrUndo &&u); // under pr.lock

// ---- pr_out.cc ---------------------------------------------------------------------------

// An initiator port a TransportID names (pr_transport_id.cc).
struct PrPort {
	ProtoId proto = ProtoId::Iscsi;
	std::string port; // the core's TransportID text (NexusId::initiator_port)
	auto operator<=>(const PrPort &) const = default;
};

// The basic parameter list (SPC-4 6.17.3 table 170).
struct PrBasicParams {
	uint64_t key = 0;    // RESERVATION KEY
	uint64_t sa_key = 0; // SERVICE ACTION RESERVATION KEY
	bool spec_i_pt = false;
	bool all_tg_pt = false;
	bool aptpl = false;
	std::vector<PrPort> spec; // SPEC_I_PT: the initiator ports its TransportIDs name
};

// The REGISTER AND MOVE parameter list (SPC-4 6.17.4 table 172).
struct PrMoveParams {
	uint64_t key = 0;
	uint64_t sa_key = 0;
	bool unreg = false;
	bool aptpl = false;
	NexusId dest; // TransportID + RELATIVE TARGET PORT IDENTIFIER
	ProtoId dest_proto = ProtoId::Iscsi;
};

// What applying a service action leaves to do once the reservation lock is dropped.
struct PrOutcome {
	Sense sense = Sense::None;
	std::vector<NexusId> abort; // PREEMPT AND ABORT: the preempted I_T nexuses (a LU's own)
	bool noop = false; // a REGISTER that did nothing (table 62): its APTPL bit is not valid
};

// Apply cmd's service action to reservation state pr, for cmd's I_T nexus: lu's own state
// under pr.lock, or a scratch copy of a shared one (its record set).
PrOutcome pr_out_apply(LogicalUnit &lu, PrState &pr, const Cmd *cmd, const PrBasicParams &p,
                       const PrMoveParams &mp);
// SPC-4 6.17.3, 6.17.4: whether cmd's service action carries a valid APTPL bit.
bool pr_out_sets_aptpl(const Cmd *cmd);
// Whether cmd has been aborted (a task management function, a PREEMPT AND ABORT).
bool pr_cmd_aborted(const Cmd *cmd);

// ---- pr_shared.cc (a state shared by gateways; scsi/pr_shared.h) --------------------------

// cmd's PERSISTENT RESERVE OUT on a LU whose state is shared, its parameter list read: the
// service action is applied to the shared state on the backend's thread, and cmd completes
// from there.
void pr_shared_out(Cmd *cmd, PrBasicParams p, PrMoveParams mp);
// PERSISTENT RESERVE IN on such a LU: answered from the shared state, refreshed first.
void pr_shared_in(Cmd *cmd);

// The events of one change as the shared state keeps them, and back. Decoding checks every
// bound and refuses (false, *out untouched) anything pr_events_encode does not make: more
// than kPrMaxEvents events, an unknown kind, a unit attention other than the three
// reservation ones, a port that is empty, too long or holds a NUL.
inline constexpr size_t kPrMaxEvents = 4096;
std::string pr_events_encode(const std::vector<PrEvent> &ev);
bool pr_events_decode(std::string_view s, std::vector<PrEvent> *out);

// ---- pr_in.cc ----------------------------------------------------------------------------

// The parameter data of cmd's PERSISTENT RESERVE IN service action from lu's state (takes
// pr.lock).
std::vector<uint8_t> pr_in_data(Cmd *cmd);

// ---- pr_persist.cc -----------------------------------------------------------------------

// The state file's contents for lu's current state (SPC-4 5.13.5: the registrations with
// their initiator ports and relative target port identifiers, the reservation's holder and
// type), or an empty vector when APTPL is not active (there is to be no file). Under pr.lock.
std::vector<uint8_t> pr_image(const LogicalUnit &lu, const PrState &pr);
// The same image for LU identity name and NAA naa whatever APTPL says: what a shared state
// holds (pr_shared.cc).
std::vector<uint8_t> pr_image_of(const std::string &name, uint64_t naa, const PrState &pr);

// A state file read back: its registrations (ids 1..n, in order) and reservation.
struct PrLoaded {
	std::vector<Registration> regs;
	PrType type = PrType::None;
	uint64_t holder = 0; // the holder's id (not for the all-registrants types)
};
// Check and decode state file bytes for the LU named lu_name with NAA naa. PrLoad::Ok, or
// what is wrong (*why says where).
PrLoad pr_decode(std::span<const uint8_t> file, const std::string &lu_name, uint64_t naa,
                 PrLoaded *out, std::string *why);

// ---- pr.cc -------------------------------------------------------------------------------

// Queue unit attention asc_ascq for every I_T nexus registration r stands for (one, or with
// ALL_TG_PT each I_T nexus of its initiator port this LU has seen); with pr.record set (a
// scratch state), record it there instead. Under pr.lock.
void pr_ua(LogicalUnit &lu, PrState &pr, const Registration &r, uint16_t asc_ascq);
// The I_T nexuses registration r stands for, as far as this LU has seen them (abort lists).
std::vector<NexusId> pr_nexuses(LogicalUnit &lu, const Registration &r);
// Remove registration r (an element of pr.regs) and release what it held, as
// SPC-4 5.13.11.3 says for unregistering: the reservation goes with its holder (for the AR
// types, with the last registrant); a released RO reservation tells the remaining
// registrants RESERVATIONS RELEASED. Under pr.lock.
void pr_unregister(LogicalUnit &lu, PrState &pr, const Registration *r);

// The protocol identifier of a session's transport (for TransportIDs).
ProtoId pr_proto_of(const Nexus &s);

// ---- pr_transport_id.cc ------------------------------------------------------------------

// Append the TransportID (SPC-4 7.6.4) of initiator port `port` (the core's TransportID
// text, e.g. "iqn.1994-05.com.example:x,i,0x23d000000001") for protocol proto to out:
// iSCSI format 01b when the text names a session (",i,0x"), else format 00b; SRP's 24-byte
// form when the text is the port's 128-bit identifier in hex.
void transport_id_build(ProtoId proto, const std::string &port, std::vector<uint8_t> &out);
// Parse one TransportID at the start of p into its protocol and initiator port text (the
// inverse of transport_id_build); returns its length in bytes, or 0 when it is malformed or
// of a protocol we cannot name ports of.
size_t transport_id_parse(std::span<const uint8_t> p, ProtoId *proto, std::string *port);
// SPC-4 6.17.3: the TransportIDs of a REGISTER with SPEC_I_PT, from its whole parameter
// list (byte 24 on: TRANSPORTID PARAMETER DATA LENGTH, then the TransportIDs). Each must
// name an initiator port: iSCSI format 01b (name,i,0xISID), or SRP. Sense::None with *out;
// PARAMETER LIST LENGTH ERROR when the list does not hold what the length says or the
// length cuts a TransportID; INVALID FIELD IN PARAMETER LIST for a TransportID we cannot
// take, or one port named twice.
Sense pr_spec_i_pt_parse(std::span<const uint8_t> list, std::vector<PrPort> *out);

} // namespace ulp::scsi
