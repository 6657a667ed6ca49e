// SPDX-License-Identifier: MIT
// scsi/lu.h - a logical unit: a backstore with the attributes, task set, unit attention
// conditions and reservations of one SCSI device (the kernel's struct se_device).
//
// A LogicalUnit is exported through LUN entries of one or more target port groups
// (scsi/tpg.h). Its state that depends on who asks (unit attentions, reservations) is
// kept per I_T nexus, named by the initiator port and the target port (NexusId).
//
// Locking: lock_ guards the task set, the dormant list, the ordering counts, the unit
// attention table and the task-management waits; the reservations (persistent and SPC-2)
// have their own lock inside PrState, taken before lock_ when both are held. Never held
// across a fabric callback or a backstore submit.
#pragma once

#include "core/lock_assert.h"
#include "core/shard_lock.h"
#include "scsi/alua.h"
#include "scsi/backstore.h"
#include "scsi/cmd.h"
#include "scsi/sense.h"
#include "scsi/stats.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace ulp::scsi
{

struct PrState; // scsi/pr.h
struct PrStateFree {
	void operator()(PrState *s) const; // pr.cc, where PrState is complete
};
using PrStatePtr = std::unique_ptr<PrState, PrStateFree>;

// The default OPTIMAL TRANSFER LENGTH, bytes (LuConfig::opt_xfer_blocks 0): 512 KiB, what
// LIO reports for the common block devices (their max_hw_sectors). At 128 KiB Linux sent
// four commands for each 512 KiB I/O where it sent LIO one; a command costs the transports
// the same whatever its size, so fewer and larger is cheaper.
inline constexpr uint32_t kOptXferBytes = 512 * 1024;

// What the initiator sees of a logical unit besides its backstore.
struct LuConfig {
	uint32_t block_size = 512; // logical block, bytes (512..65536, power of two)
	// Physical block, bytes: the unit the medium writes in, which an initiator should
	// align to (SBC-3 4.6: a 512-byte logical block on 4096-byte physical blocks, "512e",
	// as on a file system of 4 KiB blocks). A power-of-two multiple of block_size, at most
	// 2^15 logical blocks (lu_config_check); 0 or block_size: the same as the logical one.
	uint32_t physical_block_size = 0;
	std::string vendor = "ULP";       // INQUIRY T10 vendor (8 chars, space padded)
	std::string product = "ulp";      // INQUIRY product (16 chars)
	std::string revision = "0001";    // INQUIRY revision (4 chars)
	std::string serial;               // unit serial number (VPD 0x80); empty: derived
	                                  // from the name
	uint64_t naa = 0;                 // NAA IEEE registered identifier (VPD 0x83); 0:
	                                  // derived from the name
	bool read_only = false;           // software write protect (SWP)
	bool tas = true;                  // TASK ABORTED status to other nexuses (TAS)
	bool thin = true;                 // thin provisioning when the backstore can unmap
	bool removable = false;           // a removable medium (RMB, medium.cc): START STOP
	                                  // UNIT ejects and loads it
	uint32_t max_xfer_blocks = 16384; // MAXIMUM TRANSFER LENGTH (VPD 0xB0), blocks
	// OPTIMAL TRANSFER LENGTH (VPD 0xB0), blocks; 0: kOptXferBytes in blocks. Linux's sd
	// takes it as the largest request it sends (max_sectors) as well as io_opt, so it
	// sets the command size for every I/O larger than it.
	uint32_t opt_xfer_blocks = 0;
	uint32_t max_unmap_blocks = 1u << 20; // MAXIMUM UNMAP LBA COUNT (libiscsi's block limits
	                                      // test takes more than 1Mi blocks for insane)
	uint32_t max_unmap_descs = 256;       // MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT
	// MAXIMUM WRITE SAME LENGTH. 65535 as LIO reports: libiscsi's WriteSame16.Unmap writes
	// as many blocks with one WRITE (16) as this allows (65536 would need a 32 MiB write,
	// beyond MAXIMUM TRANSFER LENGTH) before it unmaps them.
	uint64_t max_write_same_blocks = 65535;
	// Thin provisioning soft threshold (SBC-3 4.7.3.7), percent of the LU's capacity
	// allocated in the backstore (Backstore::usage): crossing it upward raises THIN
	// PROVISIONING SOFT THRESHOLD REACHED once for every I_T nexus, again only after usage
	// has dropped below it (scsi/lbp.cc). 0: off; 1..100.
	uint8_t tp_soft_threshold_pct = 0;
};

// The serial number (VPD 80h) and NAA designator (VPD 83h) of a LU named name whose
// configuration leaves them unset: 16 hex digits of a 64-bit FNV-1a hash of the name, and
// NAA 3h (locally assigned, SPC-4 7.8.6.6.4) with the hash's low 60 bits. Stable for as long
// as the name is (ulp-targetd names a LU "TARGET/LUN": another target or LUN number is
// another identity).
std::string lu_derived_serial(const std::string &name);
uint64_t lu_derived_naa(const std::string &name);

// Whether cfg describes a logical unit that can exist (the fields the backstore does not
// check itself: physical_block_size against block_size); nullptr, or why not.
const char *lu_config_check(const LuConfig &cfg);

// An I_T nexus as persistent state names it: the initiator port (its TransportID text,
// e.g. "iqn.1994-05.com.redhat:x,i,0x23d000000001") and the target port (relative target
// port identifier of the target port group).
struct NexusId {
	std::string initiator_port;
	uint16_t rtpi = 0;
	auto operator<=>(const NexusId &) const = default;
};

// One nexus' pending unit attention conditions (scsi/ua.cc), oldest first. SPC-4 5.14: a
// condition already queued is not queued twice; a queue that would grow without bound keeps
// its newest conditions (a nexus that never reads them). Fixed size: an LU keeps one per
// nexus it has seen, lost ones included (bounded: kMaxLostUa).
struct UaQueue {
	static constexpr size_t kMax = 16;
	std::array<uint16_t, kMax> c{}; // ASC/ASCQ, c[0] the oldest
	uint8_t n = 0;                  // conditions queued
	uint64_t lost = 0;              // 0: its I_T nexus is live; else its loss' order

	bool empty() const { return n == 0; }
	bool has(uint16_t a) const
	{
		return std::find(c.begin(), c.begin() + n, a) != c.begin() + n;
	}
	void push(uint16_t a)
	{
		if (has(a))
			return;
		if (n == kMax)
			take();
		c[n++] = a;
	}
	uint16_t take() // the oldest; 0 when none
	{
		if (!n)
			return 0;
		const uint16_t a = c[0];
		std::copy(c.begin() + 1, c.begin() + n, c.begin());
		n--;
		return a;
	}
	void erase(uint16_t a)
	{
		n = uint8_t(std::remove(c.begin(), c.begin() + n, a) - c.begin());
	}
};

class LogicalUnit
{
public:
	// name: unique, used to derive serial and NAA when the config leaves them empty.
	LogicalUnit(std::string name, std::unique_ptr<Backstore> bs, const LuConfig &cfg);
	~LogicalUnit();
	LogicalUnit(const LogicalUnit &) = delete;
	LogicalUnit &operator=(const LogicalUnit &) = delete;

	const std::string &name() const { return name_; }
	const LuConfig &cfg() const { return cfg_; }
	Backstore &bs() const { return *bs_; }
	uint32_t block_size() const { return cfg_.block_size; }
	// The caching mode page's WCE (SBC-3, Caching mode page): writes may stay in a volatile
	// cache until SYNCHRONIZE CACHE. Starts as the backstore reports; MODE SELECT may clear it,
	// and then every write is made durable before GOOD (as with FUA).
	bool wce() const { return wce_.load(std::memory_order_relaxed); }
	void set_wce(bool on) { wce_.store(on && bs_->write_cache(), std::memory_order_relaxed); }
	// The control mode page's SWP (SPC-4 7.5.8): software write protect, set and cleared
	// by MODE SELECT (spc_mode.cc). With it, or with the configuration's read_only, every
	// command that writes the medium fails with DATA PROTECT, WRITE PROTECTED (core.cc).
	bool swp() const { return swp_.load(std::memory_order_relaxed); }
	void set_swp(bool on) { swp_.store(on, std::memory_order_relaxed); }
	bool write_protected() const { return cfg_.read_only || swp(); }
	uint64_t nr_blocks() const { return bs_->size() / cfg_.block_size; }
	// SBC-3 5.16 LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT (READ CAPACITY (16)): log2 of
	// physical_block_size / block_size; 0 when they are the same (or the configuration
	// is one lu_config_check refuses).
	uint8_t lbppb_exponent() const { return lbppb_exp_; }
	uint32_t lbppb() const { return 1u << lbppb_exp_; }
	// SBC-4 6.6.4 MAXIMUM ATOMIC TRANSFER LENGTH, blocks: what the backstore writes
	// indivisibly (Backstore::atomic_write_max), within MAXIMUM TRANSFER LENGTH and the
	// 16-bit TRANSFER LENGTH of WRITE ATOMIC (16); 0 when it cannot (sbc_atomic.cc).
	uint32_t atomic_max_blocks() const
	{
		uint64_t n = std::min<uint64_t>({bs_->atomic_write_max() / cfg_.block_size,
		                                 cfg_.max_xfer_blocks, 0xffff,
		                                 UINT32_MAX / cfg_.block_size});
		if (const uint32_t a = atomic_align_blocks())
			n = std::min<uint64_t>(n, a);
		return static_cast<uint32_t>(n);
	}
	// SBC-4 6.6.4 ATOMIC ALIGNMENT, blocks: where a WRITE ATOMIC may start
	// (Backstore::atomic_write_align); 0 anywhere. With atomic_max_blocks() at most this,
	// no atomic write crosses a multiple of it.
	uint32_t atomic_align_blocks() const { return bs_->atomic_write_align() / cfg_.block_size; }
	bool thin() const { return cfg_.thin && bs_->can_unmap(); }

	// Capacity at run time (LIO: a backstore resized through configfs). Makes the
	// LU bytes long (Backstore::resize) and, when that changed the capacity, raises
	// CAPACITY DATA HAS CHANGED for every I_T nexus; READ CAPACITY reports the new size
	// from then on, and commands checked against the old one meet the backstore's own
	// check (a shrink: LBA OUT OF RANGE). bytes must be a non-zero multiple of
	// block_size. 0 (also when bytes is the current size: nothing changes, nothing is
	// raised), or a negative errno and a message in *why (may be null).
	int set_capacity(uint64_t bytes, std::string *why);
	// Re-reads what the storage holds now (Backstore::storage_size: the file's length,
	// the device's size), in whole blocks, and applies it through set_capacity:
	// ulp-targetd's SIGHUP, after an administrator grew or shrank the file or device.
	// *old_blocks and *new_blocks (may be null) say what it was and is (equal: no change).
	int rescan_capacity(uint64_t *old_blocks, uint64_t *new_blocks, std::string *why);
	const std::string &serial() const { return serial_; }
	uint64_t naa() const { return naa_; }

	// Logical block provisioning thresholds (scsi/lbp.cc). SBC-3 6.5.4 THRESHOLD EXPONENT
	// of a thin LU: a threshold set is 2^e blocks, at least the unmap granularity, and the
	// capacity is fewer than 2^32 sets; 0 for a LU that is not thin.
	uint8_t lbp_threshold_exponent() const;
	// Compare the backstore's usage with the soft threshold now: raise the unit attention
	// on an upward crossing, re-arm it below. *pct (may be null): the percent allocated,
	// -1 when the backstore cannot tell. LOG SENSE and tests call it directly.
	void lbp_check(int *pct = nullptr);
	// lbp_check at most once per kLbpPollNs, after a write or a deallocation completed
	// (sbc.cc); nothing when no soft threshold is configured.
	void lbp_poll();
	static constexpr int64_t kLbpPollNs = 1'000'000'000;

	// Unit attention (scsi/ua.cc). Queue a condition for one nexus, or for every nexus
	// that has used this LU (and, with all, for nexuses yet to come: POWER ON for new
	// ones is implicit), except `except` when given.
	void ua_add(const NexusId &n, uint16_t asc_ascq);
	void ua_add_all(uint16_t asc_ascq, const NexusId *except = nullptr);
	// Pop the oldest condition for n (REQUEST SENSE and the UA check); 0 when none.
	uint16_t ua_take(const NexusId &n);
	bool ua_pending(const NexusId &n);
	// Drop the REPORTED LUNS DATA HAS CHANGED condition for n (REPORT LUNS clears it).
	void ua_clear(const NexusId &n, uint16_t asc_ascq);
	// The same two for a nexus this LU has seen only (one it has not will hear POWER ON
	// first): a change of the LUN inventory (Tpg::add_lun, remove_lun) and REPORT LUNS.
	void ua_add_if_seen(const NexusId &n, uint16_t asc_ascq);
	void ua_clear_if_seen(const NexusId &n, uint16_t asc_ascq);
	// Forget every nexus' conditions, as a power on does: each nexus starts again with
	// POWER ON, RESET, OR BUS DEVICE RESET OCCURRED (TARGET COLD RESET).
	void ua_reset();
	// SAM-5 6.3.4: n's I_T nexus is lost; if it comes back it hears I_T NEXUS LOSS
	// OCCURRED. The queues of at most kMaxLostUa lost nexuses are kept, the oldest loss
	// forgotten first: one that returns after that hears POWER ON instead (the same 29h
	// family). Without the bound an initiator logging in with a new ISID each time (or an
	// SRP initiator with a new port identifier) grows the LU by a queue per login.
	void ua_nexus_lost(const NexusId &n);
	// n logged in again (Tpg::open_session): its queue is a live nexus' once more.
	void ua_nexus_back(const NexusId &n);
	static constexpr size_t kMaxLostUa = 1024;
	size_t ua_nexuses(); // queues kept (live and lost), for tests

	// A removable medium (medium.cc; SBC-3's removable medium model, 5.13, 5.25). Always
	// present on a LU that is not removable. Prevention of its removal is held per I_T nexus
	// (SPC-4 6.13): removal is prevented while any nexus prevents it.
	bool removable() const { return cfg_.removable; }
	bool medium_present() const { return !medium_out_.load(std::memory_order_acquire); }
	// START STOP UNIT with LOEJ: load or eject, unless removal is prevented (then
	// MEDIUM REMOVAL PREVENTED; the medium does not move either way).
	Sense medium_load_eject(bool load);
	// PREVENT ALLOW MEDIUM REMOVAL for nexus n.
	void medium_prevent(const NexusId &n, bool prevent);
	// What ends prevention: the nexus' loss, or a reset of the LU (LOGICAL UNIT RESET,
	// target resets, power on) for every nexus.
	void medium_nexus_loss(const NexusId &n);
	void medium_reset();
	bool medium_prevented();

	// Commands in the task set (tests, teardown diagnostics).
	size_t task_count();

	// The core's state; see scsi/core.cc, scsi/tmr.cc, scsi/ua.cc, scsi/pr.cc.
	struct TmrWait;
	// The task set, split by shard (core/shard_lock.h): a command is kept and
	// counted in the part of the thread that submitted it (Cmd::shard), under that
	// shard's mutex, so that workers submitting and finishing commands write no line in
	// common. What orders commands against each other - ORDERED ones executing, those
	// waiting behind them, task management functions waiting for commands - is written
	// under all shards (lock_.lock_all) and read under any one. A command's state and
	// aborted flag are its shard's (task_lock; lock_all covers it too).
	struct alignas(64) TaskShard {
		CmdTaskList tasks;          // commands of this shard until Complete / Aborted
		uint32_t simple_active = 0; // SIMPLE ones of them executing
	};
	ShardLock lock_;
	std::array<TaskShard, kShards> task_shards_; // task_shards_[i] under lock_.shard(i)
	CmdDormantList dormant_;           // commands waiting behind ORDERED ones, in order
	uint32_t ordered_active_ = 0;      // ORDERED commands executing (0 or 1)
	std::vector<TmrWait *> tmr_waits_; // task management functions waiting for commands
	// The number of SIMPLE commands executing, all shards (under lock_all).
	uint32_t simple_active() const
	{
		uint32_t n = 0;
		for (const TaskShard &t : task_shards_)
			n += t.simple_active;
		return n;
	}
	// Every command in the task set, part by part (under lock_all); f(Cmd &) returns
	// false to stop.
	template <class F> void for_each_task(F &&f)
	{
		ULP_ASSERT_HELD_ALL(lock_);
		for (TaskShard &t : task_shards_)
			for (Cmd &c : t.tasks)
				if (!f(c))
					return;
	}
	// Pending UAs per nexus that has seen POWER ON (ua.cc): looked up by every command
	// under its thread's shard of ua_lock_, changed under all of them.
	ShardLock ua_lock_;
	std::map<NexusId, UaQueue> ua_;
	uint64_t ua_lost_seq_ = 0;     // losses so far: UaQueue::lost's clock (all of ua_lock_)
	size_t ua_lost_n_ = 0;         // queues in ua_ whose nexus is lost (all of ua_lock_)
	PrStatePtr pr_;                // persistent reservations and SPC-2 RESERVE (pr.cc)
	std::mutex rmw_lock_;          // serialises COMPARE AND WRITE and ORWRITE (sbc_rmw.cc)
	bool rmw_busy_ = false;        // one of them is between its first read and last write
	CmdDormantList rmw_wait_;      // those waiting for their turn (rmw_lock_)
	std::atomic<bool> wce_{true};  // see wce()
	std::atomic<bool> swp_{false}; // see swp()
	std::atomic<bool> medium_out_{false};       // the removable medium is ejected
	std::mutex medium_lock_;                    // guards prevent_ and loading or ejecting
	std::set<NexusId> prevent_;                 // nexuses preventing its removal (medium_lock_)
	std::mutex capacity_lock_;                  // serialises set_capacity (Backstore::resize)
	std::atomic<bool> lbp_soft_reached_{false}; // the soft threshold's UA was raised and
	                                            // usage has not dropped below it since
	std::atomic<int64_t> lbp_next_poll_{0};     // CLOCK_MONOTONIC ns of lbp_poll's next check
	IoStats stats_; // its commands, from every nexus and fabric (core.cc; sharded, any thread)
	XcopyStats xcopy_stats_; // the EXTENDED COPY commands it managed (xcopy.cc; any thread)
	// Its target port groups and their access states (scsi/alua.h: its own lock; the
	// daemon configures and changes them from any thread).
	Alua alua_{*this};
	// The target ports it is exported through (SPC-4 7.8.16, VPD 88h lists them all): a
	// Tpg adds its relative target port identifier when it maps the LU (Tpg::add_lun) and
	// drops it when it unmaps it (remove_lun). Counted: one port may map it at two LUNs.
	void port_add(uint16_t rtpi);
	void port_del(uint16_t rtpi);
	std::vector<uint16_t> ports() const; // ascending

private:
	mutable std::mutex ports_lock_;      // guards ports_; taken under a Tpg's lock_ (a leaf)
	std::map<uint16_t, unsigned> ports_; // rtpi -> LUN entries mapping the LU (ports_lock_)
	std::string name_;
	std::unique_ptr<Backstore> bs_;
	LuConfig cfg_;
	std::string serial_;
	uint64_t naa_;
	uint8_t lbppb_exp_ = 0;
};

// The mutex of cmd's part of its LU's task set, which guards the command's state and aborted
// flag (as does lock_all). cmd->lu is set.
inline std::mutex &task_lock(const Cmd *cmd)
{
	return cmd->lu->lock_.shard(cmd->shard);
}

} // namespace ulp::scsi
