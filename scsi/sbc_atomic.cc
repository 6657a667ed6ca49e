// SPDX-License-Identifier: MIT
// scsi/sbc_atomic.cc - WRITE ATOMIC (16) (SBC-4 5.48, 4.29): a write that is all or nothing.
// Whatever runs beside it, and whatever happens to the device while it runs, a read of its
// range afterwards returns either all of its data or none of it.
//
// The promise is the backstore's: the command is one Write request marked atomic
// (BsIo::atomic), which a backstore performs indivisibly up to its atomic_write_max() -
// the RAM backstore under its table lock held exclusively, allocating before it copies;
// the null backstore trivially; the rbd backstore as one operation on one RADOS object,
// which the alignment below keeps it within. A backstore that cannot promise it (file,
// block: a torn write after a power loss is theirs to suffer) reports 0, and then the LU
// does not offer the command (INVALID COMMAND OPERATION CODE, not in REPORT SUPPORTED
// OPERATION CODES) and its Block Limits VPD page reports MAXIMUM ATOMIC TRANSFER LENGTH 0.
//
// Why an alignment and not a boundary check: SBC-4 lets the device server state where an
// atomic write may start (ATOMIC ALIGNMENT) and how long it may be, not that it must not
// cross some LBA. With both at the atomic unit, every write the page allows stays within
// one unit, and a unit within one object. Linux's sd uses atomic writes only when the
// alignment divides the physical block (its smallest atomic unit): an rbd LU whose
// atomic_unit equals its physical block size (pbs=) is one it uses.
//
// Limits (SBC-4 6.6.4 Block Limits VPD page, bytes 44..63), for LogicalUnit::
// atomic_max_blocks() > 0:
//   MAXIMUM ATOMIC TRANSFER LENGTH     atomic_max_blocks(): the backstore's limit, at most
//                                      MAXIMUM TRANSFER LENGTH
//   ATOMIC ALIGNMENT                   atomic_align_blocks(): 0, any LBA, or where an
//                                      atomic write must start (rbd: the atomic unit,
//                                      which MAXIMUM ATOMIC TRANSFER LENGTH does not exceed,
//                                      so that none crosses an object); a misaligned
//                                      LOGICAL BLOCK ADDRESS is INVALID FIELD IN CDB
//   ATOMIC TRANSFER LENGTH GRANULARITY 0: any length
//   ... WITH ATOMIC BOUNDARY, MAXIMUM ATOMIC BOUNDARY SIZE  0: no atomic boundaries, so
//                                      the CDB's ATOMIC BOUNDARY must be 0
// A longer transfer is INVALID FIELD IN CDB. The data-out must be the whole TRANSFER
// LENGTH exactly: unlike WRITE, an atomic write never writes the part of itself that a
// shorter expected length would let through.
//
// CDB: byte 1 WRPROTECT (7..5: 0, no protection information), DPO (4, a hint), FUA (3),
// reserved (2..0); bytes 2..9 LBA; 10..11 ATOMIC BOUNDARY; 12..13 TRANSFER LENGTH; byte 14
// reserved (7..6) and GROUP NUMBER (ignored). A TRANSFER LENGTH of 0 writes nothing and is
// no error.
#include "scsi/sbc_internal.h"

namespace ulp::scsi
{

namespace
{

void atomic_done(BsIo *io, int err)
{
	auto *cmd = static_cast<Cmd *>(io->priv);
	if (err < 0)
		complete_sense(cmd, errno_sense(err, true));
	else
		complete_good(cmd);
}

void exec_write_atomic(Cmd *cmd)
{
	if (cmd->nr_blocks == 0) {
		complete_good(cmd);
		return;
	}
	// The size check made xfer_len the whole range (no partial atomic writes).
	auto iov = sgl_prefix(cmd, cmd->xfer_len);
	if (iov.empty()) {
		complete_sense(cmd, Sense::InternalTargetFailure);
		return;
	}
	const bool fua = (cmd->flags & CMD_FUA) || !cmd->lu->wce();
	bs_submit(cmd, BsOp::Write, cmd->lba * cmd->lu->block_size(), cmd->xfer_len, iov, fua,
	          atomic_done, /*atomic=*/true);
}

} // namespace

Sense sbc_parse_write_atomic(Cmd *cmd)
{
	const uint8_t *c = cmd->cdb;
	LogicalUnit &lu = *cmd->lu;
	const uint32_t max = lu.atomic_max_blocks();
	if (max == 0)
		return Sense::UnsupportedOpcode; // the backstore cannot write atomically
	if (c[1] & 0xe0)
		return invalid_cdb_field(cmd, 1, 7); // WRPROTECT
	if (c[1] & 0x07)
		return invalid_cdb_field(cmd, 1, 2);
	if (c[14] & 0xc0)
		return invalid_cdb_field(cmd, 14, 7);
	// No atomic boundaries (MAXIMUM ATOMIC BOUNDARY SIZE 0): SBC-4 5.48.
	if (get_be16(c + 10))
		return invalid_cdb_field(cmd, 10);
	const uint64_t lba = get_be64(c + 2);
	const uint32_t blocks = get_be16(c + 12);
	if (Sense r = sbc_check_range(lu, lba, blocks); r != Sense::None)
		return r;
	if (blocks > max)
		return invalid_cdb_field(cmd, 12); // MAXIMUM ATOMIC TRANSFER LENGTH
	if (const uint32_t align = lu.atomic_align_blocks(); align && lba % align)
		return invalid_cdb_field(cmd, 2); // ATOMIC ALIGNMENT
	if (c[1] & 0x08)
		cmd->flags |= CMD_FUA;
	// CMD_DATA_CDB without CMD_BLOCK_XFER: the expected length must be exactly the range
	// (core.cc size_check), so that no part of it is written alone.
	cmd->flags |= CMD_DATA_CDB | CMD_WRITES_MEDIUM;
	cmd->lba = lba;
	cmd->nr_blocks = blocks;
	cmd->cdb_xfer = static_cast<uint32_t>(uint64_t(blocks) * lu.block_size());
	cmd->cdb_dir = DataDir::Write;
	cmd->execute = exec_write_atomic;
	return Sense::None;
}

} // namespace ulp::scsi
