// SPDX-License-Identifier: MIT
// scsi/bs_null.cc - the null backstore: no storage at all. Reads return zeros, writes are
// discarded, and every request completes inside submit(). It measures the target's own
// overhead (the kernel's target_core_rd with rd_nullio=1).
#include "scsi/bs_internal.h"

#include <cstring>

namespace ulp::scsi
{

namespace
{

class NullBackstore final : public Backstore
{
public:
	explicit NullBackstore(const BackstoreConfig &cfg)
	    : Backstore("null", cfg.size, cfg.queue_depth)
	{
	}

	// Nothing is ever allocated, so there is nothing to deallocate; Unmap still succeeds
	// because its promise (the range reads as zeros) holds by construction.
	bool can_unmap() const override { return false; }
	bool write_cache() const override { return false; }
	// Writes are discarded whole: every one is all or nothing (nothing).
	uint32_t atomic_write_max() const override { return UINT32_MAX; }

	void submit(BsIo *io) override
	{
		int err = bs_check_io(size(), io);
		if (!err && io->op == BsOp::Read) {
			for (const iovec &v : io->iov)
				std::memset(v.iov_base, 0, v.iov_len);
		}
		io->done(io, err);
	}

	int extent(uint64_t offset, BsExtent *out) override
	{
		if (offset >= size())
			return -EINVAL;
		out->mapped = true;
		out->length = size() - offset;
		return 0;
	}
};

} // namespace

std::unique_ptr<Backstore> make_null_backstore(const BackstoreConfig &cfg)
{
	return std::make_unique<NullBackstore>(cfg);
}

} // namespace ulp::scsi
