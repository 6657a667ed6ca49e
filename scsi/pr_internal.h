// SPDX-License-Identifier: MIT
// scsi/pr_internal.h - the reservation state of a logical unit, and what the reservation
// files share: pr.cc (state, resets, unit attentions), pr_check.cc (the conflict tables),
// pr_in.cc, pr_out.cc (PERSISTENT RESERVE IN/OUT), pr_spc2.cc (RESERVE/RELEASE) and
// pr_transport_id.cc. The rest of the core uses scsi/pr.h.
//
// Model (SPC-4 5.13): a registration is an I_T nexus (or, with ALL_TG_PT, an initiator port
// through every target port) with its reservation key. At most one persistent reservation
// exists per LU; for the all-registrants types every registration holds it, for the others
// one registration does (`holder`). The SPC-2 reservation (RESERVE(6)/(10)) is a separate,
// older mechanism: one I_T nexus holds the whole LU.
//
// Locking: PrState::lock guards everything here. Lock order: PrState::lock, then
// LogicalUnit::lock_ (unit attentions are queued with the reservation lock held, so that no
// command of a preempted nexus runs between the change and its unit attention). Never held
// across a fabric callback, a completion or abort_nexus_tasks.
#pragma once

#include "scsi/core_internal.h"
#include "scsi/lu.h"
#include "scsi/pr.h"
#include "scsi/pr_store.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
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

// ---- pr_persist.cc -----------------------------------------------------------------------

// The state file's contents for lu's current state (SPC-4 5.13.5: the registrations with
// their initiator ports and relative target port identifiers, the reservation's holder and
// type), or an empty vector when APTPL is not active (there is to be no file). Under pr.lock.
std::vector<uint8_t> pr_image(const LogicalUnit &lu, const PrState &pr);

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
// ALL_TG_PT each I_T nexus of its initiator port this LU has seen). Under pr.lock.
void pr_ua(LogicalUnit &lu, const Registration &r, uint16_t asc_ascq);
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

} // namespace ulp::scsi
