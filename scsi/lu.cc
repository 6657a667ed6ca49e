// SPDX-License-Identifier: MIT
// scsi/lu.cc - a logical unit's identity and lifetime.
#include "scsi/lu.h"

#include "core/log.h"
#include "scsi/pr.h"
#include "scsi/xcopy.h"

#include <cerrno>
#include <cinttypes>
#include <cstdio>

namespace ulp::scsi
{

namespace
{

// FNV-1a: a stable 64-bit fingerprint of the LU's name, so that its serial number and NAA
// identifier survive restarts without configuration (Linux keys /dev/disk/by-id on them).
uint64_t fingerprint(const std::string &s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (unsigned char c : s) {
		h ^= c;
		h *= 0x100000001b3ull;
	}
	return h;
}

// SBC-3 5.16: the exponent field is 4 bits.
constexpr uint8_t kMaxLbppbExponent = 15;

// log2(pbs / bs) when pbs is a power-of-two multiple of bs within the field; -1 otherwise.
int lbppb_exponent_of(uint32_t bs, uint32_t pbs)
{
	if (pbs == 0 || pbs == bs)
		return 0;
	if (bs == 0 || pbs < bs || pbs % bs)
		return -1;
	const uint32_t ratio = pbs / bs;
	if (ratio & (ratio - 1))
		return -1;
	int e = 0;
	while ((1u << e) < ratio)
		e++;
	return e <= kMaxLbppbExponent ? e : -1;
}

} // namespace

std::string lu_derived_serial(const std::string &name)
{
	char buf[17];
	std::snprintf(buf, sizeof(buf), "%016" PRIx64, fingerprint(name));
	return buf;
}

uint64_t lu_derived_naa(const std::string &name)
{
	// SPC-4 device identification VPD page, NAA Locally Assigned designator (NAA 3h): 60
	// bits of our choosing.
	return (uint64_t(3) << 60) | (fingerprint(name) & 0x0fffffffffffffffull);
}

const char *lu_config_check(const LuConfig &cfg)
{
	if (lbppb_exponent_of(cfg.block_size, cfg.physical_block_size) < 0)
		return "the physical block size must be a power-of-two multiple of the logical "
		       "block size, at most 32768 logical blocks";
	if (cfg.tp_soft_threshold_pct > 100)
		return "the thin provisioning soft threshold is a percentage, 0 (off) to 100";
	return nullptr;
}

LogicalUnit::LogicalUnit(std::string name, std::unique_ptr<Backstore> bs, const LuConfig &cfg)
    : pr_(pr_state_create()), name_(std::move(name)), bs_(std::move(bs)), cfg_(cfg)
{
	wce_ = bs_->write_cache();
	// Storage resized outside (an RBD image by `rbd resize`): rescan, which raises
	// CAPACITY DATA HAS CHANGED when the block count moved. Runs on a backstore thread.
	bs_->on_storage_change([this] {
		uint64_t was = 0, now = 0;
		std::string why;
		if (rescan_capacity(&was, &now, &why) < 0)
			ULP_LOG(Warn, Scsi,
			        "LU {}: the storage changed, capacity left at {} blocks: {}", name_,
			        was, why);
		else if (was != now)
			ULP_LOG(Info, Scsi, "LU {}: the storage changed size: {} -> {} blocks",
			        name_, was, now);
	});
	const int e = lbppb_exponent_of(cfg_.block_size, cfg_.physical_block_size);
	lbppb_exp_ = static_cast<uint8_t>(e > 0 ? e : 0);
	// The storage's own identity where it has one (an RBD image seen from several gateways,
	// or moved to another target or LUN), else the LU's name.
	const std::string id = bs_->identity();
	const std::string &basis = id.empty() ? name_ : id;
	serial_ = cfg_.serial.empty() ? lu_derived_serial(basis) : cfg_.serial;
	naa_ = cfg_.naa ? cfg_.naa : lu_derived_naa(basis);
	xcopy_lu_register(this); // a copy target of EXTENDED COPY, by naa_
}

LogicalUnit::~LogicalUnit()
{
	bs_->on_storage_change(nullptr); // no rescan of a half-destroyed LU
	xcopy_lu_unregister(this);       // waits for copies still using it as a copy target
	ShardLockAll g(lock_);
	size_t n = 0;
	for (TaskShard &t : task_shards_) {
		n += t.tasks.size();
		t.tasks.clear();
	}
	if (n)
		ULP_LOG(Error, Scsi, "LU {} destroyed with {} commands in its task set", name_, n);
	dormant_.clear();
}

void LogicalUnit::port_add(uint16_t rtpi)
{
	std::lock_guard g(ports_lock_);
	ports_[rtpi]++;
}

void LogicalUnit::port_del(uint16_t rtpi)
{
	std::lock_guard g(ports_lock_);
	auto it = ports_.find(rtpi);
	if (it != ports_.end() && --it->second == 0)
		ports_.erase(it);
}

std::vector<uint16_t> LogicalUnit::ports() const
{
	std::lock_guard g(ports_lock_);
	std::vector<uint16_t> v;
	for (const auto &[rtpi, n] : ports_)
		v.push_back(rtpi);
	return v;
}

int LogicalUnit::set_capacity(uint64_t bytes, std::string *why)
{
	std::string dummy;
	if (!why)
		why = &dummy;
	if (bytes == 0 || bytes % cfg_.block_size) {
		*why = "LU " + name_ + ": capacity " + std::to_string(bytes) +
		       " bytes is not a non-zero multiple of the block size " +
		       std::to_string(cfg_.block_size);
		return -EINVAL;
	}
	std::lock_guard g(capacity_lock_);
	if (bytes == bs_->size())
		return 0;
	if (int r = bs_->resize(bytes, why); r < 0)
		return r;
	// The rule we follow (SPC-4 5.14 unit attention conditions, ASC/ASCQ 2Ah/09h; SBC-3 on
	// capacity data, READ CAPACITY; paraphrased, the standards' text is not ours to copy):
	// "if the capacity of the logical unit changes by a method other than a command
	// received on an I_T nexus, the device server shall establish a unit attention
	// condition for the SCSI initiator port associated with every I_T nexus, with the
	// additional sense code set to CAPACITY DATA HAS CHANGED". No nexus is excepted (none
	// asked for the change, unlike MODE SELECT in spc_mode.cc); nexuses yet to log in
	// learn it from their POWER ON (see ua_add_all). Raised after the new size is
	// published (resize's release store): a nexus that takes the condition under lock_
	// reads the new size in its READ CAPACITY.
	ua_add_all(UA_CAPACITY_CHANGED);
	return 0;
}

int LogicalUnit::rescan_capacity(uint64_t *old_blocks, uint64_t *new_blocks, std::string *why)
{
	std::string dummy;
	if (!why)
		why = &dummy;
	uint64_t now = 0;
	const uint64_t before = nr_blocks();
	if (old_blocks)
		*old_blocks = before;
	if (new_blocks)
		*new_blocks = before;
	if (int r = bs_->storage_size(&now, why); r < 0)
		return r;
	const uint64_t blocks = now / cfg_.block_size;
	if (blocks == 0) {
		*why = "LU " + name_ + ": the storage holds " + std::to_string(now) +
		       " bytes, less than one block; capacity left at " + std::to_string(before) +
		       " blocks";
		return -EINVAL;
	}
	if (int r = set_capacity(blocks * cfg_.block_size, why); r < 0)
		return r;
	if (new_blocks)
		*new_blocks = blocks;
	return 0;
}

size_t LogicalUnit::task_count()
{
	ShardLockAll g(lock_);
	size_t n = 0;
	for (const TaskShard &t : task_shards_)
		n += t.tasks.size();
	return n;
}

} // namespace ulp::scsi
