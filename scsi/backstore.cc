// SPDX-License-Identifier: MIT
// scsi/backstore.cc - make_backstore(): the config checks every kind shares, then the
// kind's own constructor; and the request checks the kinds apply on submit().
#include "scsi/backstore.h"
#include "scsi/bs_internal.h"

#include <atomic>
#include <cerrno>

namespace ulp::scsi
{

const char *bs_op_str(BsOp op)
{
	switch (op) {
	case BsOp::Read:
		return "read";
	case BsOp::Write:
		return "write";
	case BsOp::Flush:
		return "flush";
	case BsOp::Unmap:
		return "unmap";
	case BsOp::WriteZeroes:
		return "write-zeroes";
	case BsOp::CompareAndWrite:
		return "compare-and-write";
	case BsOp::WriteSame:
		return "write-same";
	}
	return "?";
}

int bs_check_io(uint64_t size, const BsIo *io)
{
	switch (io->op) {
	case BsOp::Flush:
		return 0;
	case BsOp::Read:
	case BsOp::Write: {
		uint64_t sum = 0;
		for (const iovec &v : io->iov)
			sum += v.iov_len;
		if (sum != io->length)
			return -EINVAL;
		break;
	}
	case BsOp::Unmap:
	case BsOp::WriteZeroes:
		break;
	case BsOp::CompareAndWrite: // only where compare_and_write_max() says (bs_check_caw)
	case BsOp::WriteSame:       // only where write_same_max() says (bs_check_write_same)
		return -EOPNOTSUPP;
	default:
		return -EINVAL; // a value outside the enum: never trust the caller's bytes
	}
	// Written so that offset + length cannot wrap.
	if (io->offset > size || io->length > size - io->offset)
		return -ERANGE;
	return 0;
}

int bs_check_caw(uint64_t size, const BsIo *io)
{
	uint64_t sum = 0;
	for (const iovec &v : io->iov)
		sum += v.iov_len;
	if (io->op != BsOp::CompareAndWrite || io->length == 0 || sum != 2 * io->length)
		return -EINVAL;
	if (io->offset > size || io->length > size - io->offset)
		return -ERANGE;
	return 0;
}

int bs_check_write_same(uint64_t size, const BsIo *io, uint64_t max)
{
	uint64_t block = 0;
	for (const iovec &v : io->iov)
		block += v.iov_len;
	if (io->op != BsOp::WriteSame || block == 0 || io->length % block != 0)
		return -EINVAL;
	if (io->length > max)
		return -EOPNOTSUPP;
	if (io->offset > size || io->length > size - io->offset)
		return -ERANGE;
	return 0;
}

namespace
{

std::atomic<BackstoreMaker> rbd_maker{nullptr}; // set_rbd_backstore_maker()

bool is_pow2(uint32_t v)
{
	return v && !(v & (v - 1));
}

std::unique_ptr<Backstore> refuse(int *err, std::string *why, int e, std::string msg)
{
	if (err)
		*err = e;
	if (why)
		*why = std::move(msg);
	return nullptr;
}

} // namespace

std::unique_ptr<Backstore> make_backstore(const BackstoreConfig &cfg, int *err, std::string *why)
{
	int dummy_err;
	std::string dummy_why;
	if (!err)
		err = &dummy_err;
	if (!why)
		why = &dummy_why;
	*err = 0;
	why->clear();

	const bool mem = cfg.kind == "null" || cfg.kind == "ram";
	const bool disk = cfg.kind == "file" || cfg.kind == "block";
	const bool rbd = cfg.kind == "rbd";
	if (!mem && !disk && !rbd)
		return refuse(err, why, -EINVAL,
		              "unknown backstore kind '" + cfg.kind +
		                  "' (expected null, ram, file, block or rbd)");
	const std::string who = cfg.kind + " backstore: ";
	if (!is_pow2(cfg.block_size) || cfg.block_size < 512 || cfg.block_size > 65536)
		return refuse(err, why, -EINVAL,
		              who + "block_size " + std::to_string(cfg.block_size) +
		                  " is not a power of two between 512 and 65536");
	if (cfg.queue_depth == 0 || cfg.queue_depth > kBsMaxQueueDepth)
		return refuse(err, why, -EINVAL,
		              who + "queue_depth " + std::to_string(cfg.queue_depth) +
		                  " is outside 1.." + std::to_string(kBsMaxQueueDepth));
	if (mem && cfg.size == 0)
		return refuse(err, why, -EINVAL, who + "size must be set (bytes, non-zero)");
	if (cfg.size % cfg.block_size)
		return refuse(err, why, -EINVAL,
		              who + "size " + std::to_string(cfg.size) +
		                  " is not a multiple of block_size " +
		                  std::to_string(cfg.block_size));
	if (disk && cfg.path.empty())
		return refuse(err, why, -EINVAL, who + "path must be set");

	if (cfg.kind == "null")
		return make_null_backstore(cfg);
	if (cfg.kind == "ram")
		return make_ram_backstore(cfg, err, why);
	if (rbd) {
		if (BackstoreMaker make = rbd_maker.load(std::memory_order_acquire))
			return make(cfg, err, why);
		return refuse(err, why, -EPROTONOSUPPORT,
		              who + "this program was built without the rbd backstore "
		                    "(ulp_scsi_rbd, rbd_backstore_enable())");
	}
	return make_file_backstore(cfg, err, why);
}

void set_rbd_backstore_maker(BackstoreMaker make)
{
	rbd_maker.store(make, std::memory_order_release);
}

} // namespace ulp::scsi
