// SPDX-License-Identifier: MIT
// scsi/pr_out.cc - PERSISTENT RESERVE OUT (SPC-4 6.17, 5.13.7 to 5.13.11): registering,
// reserving, releasing, clearing, preempting (and aborting), and moving a reservation (the
// kernel's core_scsi3_emulate_pr_out).
//
// Parsing checks the CDB; the execute function reads the parameter list, applies the
// service action to the LU's reservation state under its lock (queueing the unit attentions
// SPC-4 5.13.11 requires as it goes), and completes. PREEMPT AND ABORT then aborts the
// preempted I_T nexuses' tasks through the task management machinery (abort_nexus_tasks)
// and completes only when they have all ended, from the completion of the last one: no
// thread waits.
//
// What we offer (REPORT CAPABILITIES, pr_in.cc): ALL_TG_PT (one registration standing for
// the initiator port through every target port), every reservation type, REGISTER AND MOVE
// to a target port we can name (the one the command came through; with a shared state, any
// gateway's), APTPL 1 on a LU with a state store or a shared state (PTPL_C 1), SPEC_I_PT on
// a LU with a shared state (SIP_C 1). Refused as SPC-4 allows: SPEC_I_PT (SIP_C 0) and
// APTPL 1 (PTPL_C 0) on a LU with neither, with INVALID FIELD IN PARAMETER LIST; REPLACE
// LOST RESERVATION (RLR_C 0) with INVALID FIELD IN CDB.
//
// A LU whose state is shared by gateways (pr_shared.cc) applies the same service actions,
// by this same code, to a copy of the shared state on the store's thread; what they do to
// I_T nexuses besides (unit attentions, aborts) is recorded as events there (PrState::record)
// and done by every gateway for its own nexuses.
//
// Persist through power loss (SPC-4 5.13.5): while the last valid APTPL bit (of a REGISTER,
// REGISTER AND IGNORE EXISTING KEY or REGISTER AND MOVE that did something) is one, every
// change a service action makes is written to the LU's state file (pr_persist.cc) before
// the command's GOOD status goes out, so that whatever an initiator was told is there
// after a restart; an APTPL bit of zero removes the file, just as durably. The write runs on
// the store's thread (scsi/pr_store.h), not on the fabric's: the command waits without a
// thread waiting, and the other PERSISTENT RESERVE OUT commands of the LU wait behind it in
// pr.deferred (the file follows the state in the order of the changes). Meanwhile the
// change is in effect (pr_check and PERSISTENT RESERVE IN see it), as any command's effect
// is while the command is in flight. Should the write fail, the change is undone (the unit
// attentions it queued stay: spurious ones are harmless, lost ones are not) and the command
// ends in INTERNAL TARGET FAILURE.
#include "scsi/pr_internal.h"

#include "core/log.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <optional>

namespace ulp::scsi
{

namespace
{

// SPC-4 6.17.3 table 170: the basic parameter list is 24 bytes. Only SPEC_I_PT (which we
// refuse) and REGISTER AND MOVE make it longer; a REGISTER AND MOVE list is at most 24 bytes
// and one TransportID (pr_transport_id.cc: 248 bytes at most). Longer lists are refused at
// once, without fetching them.
constexpr uint32_t kBasicLen = 24;
constexpr uint32_t kMaxParamLen = 4096;

using BasicParams = PrBasicParams;
using MoveParams = PrMoveParams;
using Outcome = PrOutcome;

// The state PREEMPT AND ABORT keeps while the preempted tasks end (Cmd::scratch).
struct PreemptAbort {
	Tmr tmr;
	std::vector<NexusId> which;
};

// A command whose change is being written to the state file (the store's done callback).
struct Persisting {
	Cmd *cmd = nullptr;
	Outcome out;                      // what is left to do once it is durable
	std::unique_ptr<PreemptAbort> pa; // PREEMPT AND ABORT's state
	PrUndo undo;                      // the state before the change, should the write fail
	std::vector<uint8_t> image;       // what is written (empty: the file is removed)
};

PrOutSa sa_of(const Cmd *cmd)
{
	return PrOutSa(cmd->cdb[1] & 0x1f);
}
PrType type_of(const Cmd *cmd)
{
	return PrType(cmd->cdb[2] & 0x0f);
}

// ---- Registering (SPC-4 5.13.7, table 62 and 63) --------------------------------------

// Whether a new registration of I_T nexus n (with all_tg_pt: of its initiator port through
// every target port) would stand for an I_T nexus that one in pr does already. SPC-4 leaves
// an ALL_TG_PT registration over an initiator port's existing ones undefined; we refuse it.
bool overlaps(const PrState &pr, const NexusId &n, bool all_tg_pt)
{
	for (const Registration &o : pr.regs)
		if (o.covers(n) || (all_tg_pt && o.nexus.initiator_port == n.initiator_port))
			return true;
	return false;
}

void add_registration(PrState &pr, const NexusId &n, ProtoId proto, uint64_t key, bool all_tg_pt)
{
	Registration nr;
	nr.id = pr.next_id++;
	nr.nexus = n;
	nr.key = key;
	nr.all_tg_pt = all_tg_pt;
	nr.proto = proto;
	pr.regs.push_back(std::move(nr));
}

Outcome do_register(LogicalUnit &lu, PrState &pr, const Cmd *cmd, const BasicParams &p,
                    bool ignore_key)
{
	const NexusId &n = cmd->sess->id();
	Registration *r = pr.find(n);
	if (!r) {
		// An unregistered I_T nexus: REGISTER needs a zero RESERVATION KEY.
		if (!ignore_key && p.key != 0)
			return {Sense::ReservationConflict, {}};
		if (p.sa_key != 0) {
			if (overlaps(pr, n, p.all_tg_pt))
				return {Sense::ReservationConflict, {}};
			// SPC-4 5.13.7, 6.17.3: SPEC_I_PT registers the I_T nexuses of the
			// initiator ports its TransportIDs name (through this target port, or with
			// ALL_TG_PT through every one) along with this one, all or none. One
			// already registered, or the issuer's own port named again, makes the list
			// invalid.
			for (const PrPort &sp : p.spec)
				if (sp.proto != pr_proto_of(*cmd->sess) ||
				    sp.port == n.initiator_port ||
				    overlaps(pr, NexusId{sp.port, n.rtpi}, p.all_tg_pt))
					return {Sense::InvalidParamListField, {}};
			add_registration(pr, n, pr_proto_of(*cmd->sess), p.sa_key, p.all_tg_pt);
			for (const PrPort &sp : p.spec)
				add_registration(pr, NexusId{sp.port, n.rtpi}, sp.proto, p.sa_key,
				                 p.all_tg_pt);
		}
		// A zero SERVICE ACTION RESERVATION KEY from an unregistered I_T nexus: "do
		// nothing except return GOOD" (table 62), PRgeneration and APTPL included.
		if (p.sa_key == 0)
			return {Sense::None, {}, true};
		pr.generation++;
		return {};
	}
	// A registered I_T nexus: REGISTER must name its key (REGISTER AND IGNORE EXISTING KEY
	// need not); a zero new key unregisters it, any other replaces the old one (a
	// reservation it holds stays held, now under the new key).
	if (!ignore_key && p.key != r->key)
		return {Sense::ReservationConflict, {}};
	// SPC-4 5.13.7 table 62: SPEC_I_PT from a registered I_T nexus is an invalid field.
	if (p.spec_i_pt)
		return {Sense::InvalidParamListField, {}};
	if (p.sa_key == 0)
		pr_unregister(lu, pr, r);
	else
		r->key = p.sa_key;
	pr.generation++;
	return {};
}

// ---- Reserving (SPC-4 5.13.9) -----------------------------------------------------------

Outcome do_reserve(PrState &pr, const Registration *r, PrType type)
{
	if (pr.type == PrType::None) {
		pr.type = type;
		pr.holder = r->id; // for the AR types unused: every registrant holds it
		pr.sync();
		return {};
	}
	// Only the holder may reserve again, and only the same type (which changes nothing);
	// anything else conflicts with the existing reservation.
	if (pr.holds(r) && pr.type == type)
		return {};
	return {Sense::ReservationConflict, {}};
}

// ---- Releasing (SPC-4 5.13.11.2.2) -------------------------------------------------------

Outcome do_release(LogicalUnit &lu, PrState &pr, const Registration *r, PrType type)
{
	// Not reserved, or reserved by someone else: nothing to release, and not an error.
	if (!pr.holds(r))
		return {};
	if (type != pr.type)
		return {Sense::InvalidReleaseOfPr, {}};
	const PrType old = pr.type;
	pr.release();
	// The registrants' access changes with an RO or AR reservation gone (with WE and EA
	// only the holder's did): they hear RESERVATIONS RELEASED.
	if (pr_registrants_share(old))
		for (const Registration &o : pr.regs)
			if (o.id != r->id)
				pr_ua(lu, pr, o, UA_RESERVATIONS_RELEASED);
	return {};
}

// ---- Clearing (SPC-4 5.13.11.2.6) -------------------------------------------------------

Outcome do_clear(LogicalUnit &lu, PrState &pr, const Registration *r)
{
	// Every other registrant loses its registration and any reservation: RESERVATIONS
	// PREEMPTED.
	for (const Registration &o : pr.regs)
		if (o.id != r->id)
			pr_ua(lu, pr, o, UA_RESERVATIONS_PREEMPTED);
	pr.regs.clear();
	pr.release();
	pr.generation++;
	return {};
}

// ---- Preempting (SPC-4 5.13.11.2.4, 5.13.11.2.5) ----------------------------------------

// Remove the registrations pred selects, tell each removed one but the issuer's REGISTRATIONS
// PREEMPTED, and note their I_T nexuses in out->abort (the issuer's not: see exec_pr_out).
template <typename Pred>
void remove_registrations(LogicalUnit &lu, PrState &pr, const Registration *issuer, Pred pred,
                          Outcome *out)
{
	const uint64_t issuer_id = issuer->id;
	for (auto it = pr.regs.begin(); it != pr.regs.end();) {
		if (!pred(*it)) {
			++it;
			continue;
		}
		if (it->id != issuer_id) {
			pr_ua(lu, pr, *it, UA_REGISTRATIONS_PREEMPTED);
			if (pr.record)
				pr.record->push_back({PrEvent::Abort, 0, it->nexus, it->all_tg_pt});
			else
				for (const NexusId &n : pr_nexuses(lu, *it))
					out->abort.push_back(n);
		}
		it = pr.regs.erase(it);
	}
}

Outcome do_preempt(LogicalUnit &lu, PrState &pr, const Registration *r, PrType type,
                   uint64_t sa_key)
{
	Outcome out;
	const uint64_t issuer_id = r->id;
	const auto with_key = [&](const Registration &o) { return o.key == sa_key; };
	const bool preempts_holder =
	    pr.type != PrType::None &&
	    (pr_all_registrants(pr.type) ? sa_key == 0
	                                 : pr.holder_reg() && pr.holder_reg()->key == sa_key);

	if (!preempts_holder) {
		// SPC-4 5.13.11.2.4.2 (no reservation, or one SARK does not hold; for the AR
		// types, SARK not zero): remove the registrations with SARK, the issuer's
		// included; the reservation, if any, stays (unless its holders are all gone).
		// A zero SARK names nobody.
		if (sa_key == 0)
			return {Sense::InvalidParamListField, {}};
		if (std::none_of(pr.regs.begin(), pr.regs.end(), with_key))
			return {Sense::ReservationConflict, {}};
		remove_registrations(lu, pr, r, with_key, &out);
		if (pr_all_registrants(pr.type) && pr.regs.empty())
			pr.release();
		pr.generation++;
		return out;
	}

	// SPC-4 5.13.11.2.4.3: SARK names the holder (for the AR types: zero, every
	// registrant). Release the reservation, remove every registration SARK names (for the
	// AR types: every registration) but the issuer's, and reserve for the issuer with the
	// CDB's type.
	const PrType old = pr.type;
	const auto preempted = [&](const Registration &o) {
		return o.id != issuer_id && (pr_all_registrants(old) || o.key == sa_key);
	};
	remove_registrations(lu, pr, r, preempted, &out); // r may dangle from here on
	pr.type = type;
	pr.holder = issuer_id;
	pr.sync();
	// A changed reservation changes every remaining registrant's access: RESERVATIONS
	// RELEASED to those that kept their registration.
	if (type != old)
		for (const Registration &o : pr.regs)
			if (o.id != issuer_id)
				pr_ua(lu, pr, o, UA_RESERVATIONS_RELEASED);
	pr.generation++;
	return out;
}

// ---- Moving (SPC-4 5.13.8) ----------------------------------------------------------------

Outcome do_register_and_move(LogicalUnit &lu, PrState &pr, const Cmd *cmd, Registration *r,
                             const MoveParams &p)
{
	// Only the holder of a reservation that one I_T nexus holds can move it.
	if (!pr.holds(r) || pr_all_registrants(pr.type))
		return {Sense::ReservationConflict, {}};
	if (p.sa_key == 0)
		return {Sense::InvalidParamListField, {}};
	// The destination must be another I_T nexus, through a target port we know, named in
	// that port's protocol. A LU alone knows the port the command came through (it does
	// not know its other ports); with its state shared, the other gateways' ports too
	// (pr_shared.cc).
	const bool known_port = p.dest.rtpi == cmd->sess->id().rtpi ||
	                        std::find(pr.other_ports.begin(), pr.other_ports.end(),
	                                  p.dest.rtpi) != pr.other_ports.end();
	if (!known_port || r->covers(p.dest) || p.dest_proto != pr_proto_of(*cmd->sess))
		return {Sense::InvalidParamListField, {}};
	Registration *d = pr.find(p.dest);
	uint64_t dest_id;
	if (d) {
		dest_id = d->id; // already registered: its key stays
	} else {
		Registration nr;
		nr.id = dest_id = pr.next_id++;
		nr.nexus = p.dest;
		nr.key = p.sa_key;
		nr.proto = p.dest_proto;
		pr.regs.push_back(std::move(nr));
		r = pr.find(cmd->sess->id()); // push_back may have moved it
	}
	pr.holder = dest_id; // same type and scope
	if (p.unreg)
		pr_unregister(lu, pr, r); // no longer the holder: releases nothing
	pr.generation++;
	return {};
}

// ---- Execution ----------------------------------------------------------------------------

// PREEMPT AND ABORT's aborted tasks have all ended: the command completes.
void preempt_abort_done(Tmr *tmr)
{
	complete_good(static_cast<Cmd *>(tmr->fabric_priv));
}

void free_preempt_abort(void *p)
{
	delete static_cast<PreemptAbort *>(p);
}

Sense read_basic(Cmd *cmd, BasicParams *p)
{
	uint8_t b[kBasicLen];
	if (sgl_copy_out(cmd, 0, b, sizeof(b)) != sizeof(b))
		return Sense::ParamListLengthError;
	p->key = get_be64(b);
	p->sa_key = get_be64(b + 8);
	p->spec_i_pt = b[20] & 0x08;
	p->all_tg_pt = b[20] & 0x04;
	p->aptpl = b[20] & 0x01;
	const PrOutSa sa = sa_of(cmd);
	const PrState &pr = pr_of(*cmd->lu);
	if (p->spec_i_pt) {
		// SPC-4 6.17.3: SPEC_I_PT is for REGISTER alone (an invalid field for every other
		// service action), and only where SIP_C is one: a state shared by gateways
		// (pr_shared.cc). A LU alone reports SIP_C 0 and refuses it the same way.
		if (sa != PrOutSa::Register || !pr.shared)
			return Sense::InvalidParamListField;
		std::vector<uint8_t> all(cmd->xfer_len);
		if (sgl_copy_out(cmd, 0, all.data(), all.size()) != all.size())
			return Sense::ParamListLengthError;
		if (Sense s = pr_spec_i_pt_parse(all, &p->spec); s != Sense::None)
			return s;
	} else if (cmd->xfer_len != kBasicLen) {
		return Sense::ParamListLengthError; // without it the list is exactly 24 bytes
	}
	// APTPL and ALL_TG_PT count for the registering service actions only (ignored for the
	// others). Without a state store or a shared state (PTPL_C 0) APTPL 1 is refused (SPC-4
	// 6.17.3).
	const bool registering = sa == PrOutSa::Register || sa == PrOutSa::RegisterAndIgnore;
	if (!registering) {
		p->all_tg_pt = false;
		p->aptpl = false;
	}
	if (p->aptpl && !pr.store && !pr.shared)
		return Sense::InvalidParamListField;
	return Sense::None;
}

Sense read_move(Cmd *cmd, MoveParams *p)
{
	std::vector<uint8_t> b(cmd->xfer_len);
	if (sgl_copy_out(cmd, 0, b.data(), b.size()) != b.size())
		return Sense::ParamListLengthError;
	p->key = get_be64(&b[0]);
	p->sa_key = get_be64(&b[8]);
	p->unreg = b[17] & 0x02;
	p->aptpl = b[17] & 0x01;
	p->dest.rtpi = get_be16(&b[18]);
	const uint32_t tid_len = get_be32(&b[20]);
	// SPC-4 6.17.4: the TransportID must fit the parameter list, and be one TransportID.
	if (tid_len > b.size() - kBasicLen)
		return Sense::ParamListLengthError;
	if (p->aptpl && !pr_of(*cmd->lu).store && !pr_of(*cmd->lu).shared)
		return Sense::InvalidParamListField; // PTPL_C 0
	std::span<const uint8_t> tid(&b[kBasicLen], tid_len);
	const size_t used = transport_id_parse(tid, &p->dest_proto, &p->dest.initiator_port);
	if (used == 0 || used > tid_len)
		return Sense::InvalidParamListField;
	return Sense::None;
}

// Apply service action sa to the reservation state, for cmd's I_T nexus. Under pr.lock.
Outcome apply(LogicalUnit &lu, PrState &pr, const Cmd *cmd, const BasicParams &p,
              const MoveParams &mp)
{
	const PrOutSa sa = sa_of(cmd);
	if (sa == PrOutSa::Register || sa == PrOutSa::RegisterAndIgnore)
		return do_register(lu, pr, cmd, p, sa == PrOutSa::RegisterAndIgnore);
	// SPC-4 5.13.7 table 67, 5.13.8 to 5.13.11: every other service action is for
	// registered I_T nexuses, with their key (RESERVATION CONFLICT otherwise).
	Registration *r = pr.find(cmd->sess->id());
	const uint64_t key = sa == PrOutSa::RegisterAndMove ? mp.key : p.key;
	if (!r || r->key != key)
		return {Sense::ReservationConflict, {}};
	switch (sa) {
	case PrOutSa::Reserve:
		return do_reserve(pr, r, type_of(cmd));
	case PrOutSa::Release:
		return do_release(lu, pr, r, type_of(cmd));
	case PrOutSa::Clear:
		return do_clear(lu, pr, r);
	case PrOutSa::Preempt:
	case PrOutSa::PreemptAndAbort:
		return do_preempt(lu, pr, r, type_of(cmd), p.sa_key);
	case PrOutSa::RegisterAndMove:
		return do_register_and_move(lu, pr, cmd, r, mp);
	default:
		return {Sense::InvalidCdbField, {}}; // parsing lets nothing else through
	}
}

bool aborted(const Cmd *cmd)
{
	std::lock_guard g(task_lock(cmd));
	return cmd->aborted;
}

void exec_pr_out(Cmd *cmd);

// A PREEMPT AND ABORT has marked the tasks it aborts: run the PERSISTENT RESERVE OUT
// commands that arrived meanwhile (see exec_pr_out), unless another one is marking still.
void scan_done(LogicalUnit &lu)
{
	PrState &pr = pr_of(lu);
	std::vector<Cmd *> run;
	{
		std::lock_guard g(pr.lock);
		if (--pr.scanning > 0)
			return;
		run.swap(pr.deferred);
	}
	for (Cmd *c : run)
		exec_pr_out(c);
}

// The change cmd made is in effect (and durable where it has to be): complete it, or, for a
// PREEMPT AND ABORT that preempted someone (pr.scanning counted already), abort the
// preempted tasks first.
void finish(Cmd *cmd, Outcome &out, std::unique_ptr<PreemptAbort> pa)
{
	LogicalUnit &lu = *cmd->lu;
	if (!pa || out.abort.empty()) {
		complete_good(cmd);
		return;
	}
	// SPC-4 5.13.11.2.5: the preempted I_T nexuses' tasks are aborted (TASK ABORTED for
	// them where TAS is set, as for CLEAR TASK SET from another nexus), this command
	// excepted, and it completes once they have all ended. The issuer's own other tasks are
	// left alone even when SARK named it (as the kernel does): nothing would answer them.
	std::sort(out.abort.begin(), out.abort.end());
	out.abort.erase(std::unique(out.abort.begin(), out.abort.end()), out.abort.end());
	PreemptAbort *x = pa.release();
	x->which = std::move(out.abort);
	x->tmr.sess = cmd->sess;
	x->tmr.lun = cmd->lun;
	x->tmr.tag = cmd->tag;
	x->tmr.fabric_priv = cmd;
	x->tmr.core_done = preempt_abort_done;
	cmd->scratch = x;
	cmd->scratch_free = free_preempt_abort;
	// From here cmd may complete (and x go) at any moment, on any thread; the marking is
	// done when abort_nexus_tasks returns.
	abort_nexus_tasks(lu, &x->tmr, x->which, cmd);
	scan_done(lu);
}

// The state file write of w has ended (on the store's thread): the command completes, or
// on failure its change is undone; then the PERSISTENT RESERVE OUT commands that waited run.
void persisted(LogicalUnit &lu, Persisting &w, int err)
{
	PrState &pr = pr_of(lu);
	std::vector<Cmd *> run;
	bool scanning = false;
	{
		std::lock_guard g(pr.lock);
		pr.persisting = false;
		if (err != 0) {
			pr_undo_restore(pr, std::move(w.undo));
			// The file may hold the old state or, if only the directory's fsync
			// failed, the new one: the next change rewrites it whatever it is.
			pr.durable_unknown = true;
		} else {
			pr.durable = std::move(w.image);
			pr.durable_unknown = false;
			scanning = w.pa && !w.out.abort.empty();
			if (scanning)
				pr.scanning++; // scan_done runs the deferred commands
		}
		if (!scanning)
			run.swap(pr.deferred);
	}
	if (err != 0) {
		ULP_LOG(Error, Scsi,
		        "LU {}: PERSISTENT RESERVE OUT undone: its state could not be written to "
		        "{}: {}",
		        lu.name(), pr.store->path(pr.file), std::strerror(-err));
		complete_sense(w.cmd, Sense::InternalTargetFailure);
	} else {
		finish(w.cmd, w.out, std::move(w.pa));
	}
	for (Cmd *c : run)
		exec_pr_out(c);
}

void exec_pr_out(Cmd *cmd)
{
	LogicalUnit &lu = *cmd->lu;
	PrState &pr = pr_of(lu);
	const PrOutSa sa = sa_of(cmd);
	BasicParams p;
	MoveParams mp;
	Sense s = sa == PrOutSa::RegisterAndMove ? read_move(cmd, &mp) : read_basic(cmd, &p);
	if (s != Sense::None) {
		complete_sense(cmd, s);
		return;
	}
	// A state shared with other gateways changes where all of them see it (pr_shared.cc).
	if (pr.shared) {
		pr_shared_out(cmd, std::move(p), std::move(mp));
		return;
	}
	// PREEMPT AND ABORT's state, allocated before anything changes.
	std::unique_ptr<PreemptAbort> pa;
	if (sa == PrOutSa::PreemptAndAbort) {
		pa.reset(new (std::nothrow) PreemptAbort);
		if (!pa) {
			complete_sense(cmd, Sense::InsufficientResources);
			return;
		}
	}
	const bool sets_aptpl = pr_out_sets_aptpl(cmd);
	const bool aptpl = sa == PrOutSa::RegisterAndMove ? mp.aptpl : p.aptpl;

	Outcome out;
	std::unique_ptr<Persisting> w;
	{
		std::lock_guard g(pr.lock);
		// Between a PREEMPT AND ABORT's change and the end of its marking the preempted
		// tasks (abort_nexus_tasks, outside this lock), no other PERSISTENT RESERVE OUT
		// changes anything: it waits in pr.deferred and runs when the marking is done.
		// Together with the check below this makes a preempted nexus's PERSISTENT RESERVE
		// OUT in flight never take effect after the preemption (it is one of the aborted
		// tasks), and so no PREEMPT AND ABORT can end up waiting for one that waits for
		// it in turn. The same while a change is being written to the state file: the
		// changes reach the file in the order they were made, and an undone one (its
		// write failed) was the last.
		if (pr.scanning > 0 || pr.persisting) {
			pr.deferred.push_back(cmd);
			return;
		}
		// An aborted command (a task management function, a PREEMPT AND ABORT) changes
		// nothing; its status goes nowhere (or is TASK ABORTED).
		if (aborted(cmd)) {
			out.sense = Sense::ReservationConflict;
		} else if (!pr.store) {
			out = apply(lu, pr, cmd, p, mp);
		} else {
			PrUndo undo = pr_undo_save(pr);
			out = apply(lu, pr, cmd, p, mp);
			// SPC-4 5.13.5: the last valid APTPL bit decides what a power loss keeps;
			// with it set, the state file must hold this change before GOOD.
			if (out.sense == Sense::None && sets_aptpl && !out.noop)
				pr.aptpl = aptpl;
			std::vector<uint8_t> image;
			if (out.sense == Sense::None)
				image = pr_image(lu, pr);
			if (out.sense == Sense::None &&
			    (pr.durable_unknown || image != pr.durable)) {
				w.reset(
				    new Persisting{cmd, {}, {}, std::move(undo), std::move(image)});
				pr.persisting = true;
			}
		}
		if (out.sense == Sense::None && !w && pa && !out.abort.empty())
			pr.scanning++;
	}
	if (out.sense != Sense::None) {
		complete_sense(cmd, out.sense);
		return;
	}
	if (w) {
		w->out = std::move(out);
		w->pa = std::move(pa);
		std::optional<std::vector<uint8_t>> data;
		if (!w->image.empty())
			data = w->image;
		std::shared_ptr<Persisting> sp(w.release());
		pr.store->put(pr.file, std::move(data),
		              [&lu, sp](int err) { persisted(lu, *sp, err); });
		return;
	}
	finish(cmd, out, std::move(pa));
}

} // namespace

PrOutcome pr_out_apply(LogicalUnit &lu, PrState &pr, const Cmd *cmd, const PrBasicParams &p,
                       const PrMoveParams &mp)
{
	return apply(lu, pr, cmd, p, mp);
}

bool pr_out_sets_aptpl(const Cmd *cmd)
{
	// SPC-4 6.17.3, 6.17.4: the APTPL bit of these is valid; the others' is ignored.
	const PrOutSa sa = sa_of(cmd);
	return sa == PrOutSa::Register || sa == PrOutSa::RegisterAndIgnore ||
	       sa == PrOutSa::RegisterAndMove;
}

bool pr_cmd_aborted(const Cmd *cmd)
{
	return aborted(cmd);
}

Sense pr_out_parse(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	const PrOutSa sa = sa_of(cmd);
	// SPC-4 6.17.2: 08h (REPLACE LOST RESERVATION, SPC-5) is not offered, 09h..1Fh are
	// reserved.
	if (uint8_t(sa) > uint8_t(PrOutSa::RegisterAndMove))
		return Sense::InvalidCdbField;
	// SPC-4 6.17.2: SCOPE and TYPE count for RESERVE, RELEASE, PREEMPT and PREEMPT AND
	// ABORT (and are ignored otherwise): LU_SCOPE is the only scope, and the type must be
	// one of table 169.
	switch (sa) {
	case PrOutSa::Reserve:
	case PrOutSa::Release:
	case PrOutSa::Preempt:
	case PrOutSa::PreemptAndAbort:
		if ((c[2] >> 4) != kPrScopeLu || !pr_type_valid(c[2] & 0x0f))
			return Sense::InvalidCdbField;
		break;
	default:
		break;
	}
	// SPC-4 6.17.1: the parameter list is at least the 24 bytes of table 170 (the core
	// fetches what the CDB announces; exec checks the exact length against the flags).
	const uint32_t len = get_be32(c + 5);
	if (len < kBasicLen || len > kMaxParamLen)
		return Sense::ParamListLengthError;
	cmd->cdb_xfer = len;
	cmd->cdb_dir = DataDir::Write;
	cmd->execute = exec_pr_out;
	return Sense::None;
}

} // namespace ulp::scsi
