// SPDX-License-Identifier: MIT
// scsi/lu.cc - a logical unit's identity and lifetime.
#include "scsi/lu.h"

#include "scsi/pr.h"

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

} // namespace

LogicalUnit::LogicalUnit(std::string name, std::unique_ptr<Backstore> bs, const LuConfig &cfg)
    : pr_(pr_state_create()), name_(std::move(name)), bs_(std::move(bs)), cfg_(cfg)
{
	wce_ = bs_->write_cache();
	const uint64_t h = fingerprint(name_);
	if (cfg_.serial.empty()) {
		char buf[17];
		std::snprintf(buf, sizeof(buf), "%016" PRIx64, h);
		serial_ = buf;
	} else {
		serial_ = cfg_.serial;
	}
	// SPC-4 7.8.6.6.? NAA 3h: locally assigned, 60 bits of our choosing.
	naa_ = cfg_.naa ? cfg_.naa : (uint64_t(3) << 60) | (h & 0x0fffffffffffffffull);
}

LogicalUnit::~LogicalUnit()
{
	std::lock_guard g(lock_);
	if (!task_set_.empty())
		std::fprintf(stderr,
		             "ulp scsi: LU %s destroyed with %zu commands in its task set\n",
		             name_.c_str(), task_set_.size());
	task_set_.clear();
	dormant_.clear();
}

size_t LogicalUnit::task_count()
{
	std::lock_guard g(lock_);
	return task_set_.size();
}

} // namespace ulp::scsi
