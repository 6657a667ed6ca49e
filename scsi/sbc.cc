// SPDX-License-Identifier: MIT
// scsi/sbc.cc - block commands (SBC-3; the kernel's target_core_sbc.c): the entry point that
// sorts CDBs out (sbc_parse), READ and WRITE (6, 10, 12, 16), READ CAPACITY (10, 16),
// SYNCHRONIZE CACHE (10, 16) and PRE-FETCH (10, 16). The commands that take several
// backstore requests live in their own files: sbc_verify.cc (VERIFY, WRITE AND VERIFY),
// sbc_write_same.cc, sbc_unmap.cc, sbc_caw.cc (COMPARE AND WRITE), sbc_orwrite.cc (ORWRITE,
// which shares COMPARE AND WRITE's read-modify-write turn, sbc_rmw.cc), sbc_atomic.cc (WRITE
// ATOMIC), and GET LBA STATUS in
// sbc_lba_status.cc; sbc_step.cc runs them. READ DEFECT DATA is in sbc_defect.cc.
//
// Parsing checks every field SBC-3 defines for the opcode and the LBA range against the
// capacity (LBA OUT OF RANGE, SBC-3 4.5), in the order libiscsi's conformance suite
// expects: invalid fields first, then the range, then the block limits. Execution of
// READ and WRITE is one backstore request, completed from the backstore's thread.
#include "scsi/sbc_internal.h"

#include <algorithm>
#include <cerrno>

namespace ulp::scsi
{

Sense sbc_check_range(const LogicalUnit &lu, uint64_t lba, uint64_t blocks)
{
	const uint64_t nr = lu.nr_blocks();
	if (lba > nr || blocks > nr - lba)
		return Sense::LbaOutOfRange;
	return Sense::None;
}

namespace
{

// ---- Execution ---------------------------------------------------------------------------

void rw_done(BsIo *io, int err)
{
	auto *cmd = static_cast<Cmd *>(io->priv);
	if (err < 0) {
		complete_sense(cmd, errno_sense(err, io->op == BsOp::Write));
		return;
	}
	// A write may have allocated storage: the soft threshold (lbp.cc), rate limited.
	if (io->op == BsOp::Write)
		cmd->lu->lbp_poll();
	complete_good(cmd);
}

// READ/WRITE: xfer_len bytes from lba (the core's size check made it at most the CDB's
// length; a READ with a shorter expected length moves only what the initiator asked for).
void exec_rw(Cmd *cmd)
{
	const bool write = cmd->cdb_dir == DataDir::Write;
	if (cmd->xfer_len == 0) {
		complete_good(cmd); // SBC-3 5.11: a transfer length of 0 is not an error
		return;
	}
	auto iov = sgl_prefix(cmd, cmd->xfer_len);
	if (iov.empty()) {
		complete_sense(cmd, Sense::InternalTargetFailure);
		return;
	}
	const uint64_t off = cmd->lba * cmd->lu->block_size();
	// Without a write cache (WCE 0) every write is durable before GOOD (SBC-3 6.4.5,
	// the caching mode page), as if FUA were set.
	const bool fua = write && ((cmd->flags & CMD_FUA) || !cmd->lu->wce());
	bs_submit(cmd, write ? BsOp::Write : BsOp::Read, off, cmd->xfer_len, iov, fua, rw_done);
}

void exec_sync_cache(Cmd *cmd)
{
	if (!cmd->lu->wce()) {
		complete_good(cmd); // nothing volatile to flush
		return;
	}
	bs_submit(cmd, BsOp::Flush, 0, 0, {}, false, flush_done);
}

void exec_read_capacity_10(Cmd *cmd)
{
	// SBC-3 5.15: the last LBA, or FFFFFFFFh when it does not fit (READ CAPACITY 16 then).
	uint8_t d[8];
	const uint64_t last = cmd->lu->nr_blocks() - 1;
	put_be32(d, last > 0xfffffffeu ? 0xffffffffu : static_cast<uint32_t>(last));
	put_be32(d + 4, cmd->lu->block_size());
	complete_data_in(cmd, d);
}

void exec_read_capacity_16(Cmd *cmd)
{
	// SBC-3 5.16, table "READ CAPACITY (16) parameter data": RETURNED LOGICAL BLOCK
	// ADDRESS, LOGICAL BLOCK LENGTH IN BYTES; byte 12 P_TYPE/PROT_EN 0 (no protection
	// information); byte 13 P_I_EXPONENT 0 and the logical blocks per physical block
	// exponent; bytes 14..15 LBPME (bit 7), LBPRZ (bit 6) and the lowest aligned LBA.
	// Thin provisioning: unmapped blocks read as zeros on every backstore that can unmap.
	uint8_t d[32] = {};
	put_be64(d, cmd->lu->nr_blocks() - 1);
	put_be32(d + 8, cmd->lu->block_size());
	d[13] = cmd->lu->lbppb_exponent() & 0x0f;
	put_be16(d + 14, kSbcLowestAlignedLba & 0x3fff);
	if (cmd->lu->thin())
		d[14] |= 0x80 | 0x40;
	complete_data_in(cmd, d); // at most the allocation length; 0..31 are not errors
}

// ---- Parsing -----------------------------------------------------------------------------

// The data fields of a block transfer of [lba, lba + blocks): range, MAXIMUM TRANSFER
// LENGTH (SBC-3 6.6.4: larger is INVALID FIELD IN CDB), and the bytes it moves.
Sense set_data_cdb(Cmd *cmd, uint64_t lba, uint32_t blocks, DataDir dir)
{
	LogicalUnit &lu = *cmd->lu;
	if (Sense r = sbc_check_range(lu, lba, blocks); r != Sense::None)
		return r;
	const uint64_t bytes = uint64_t(blocks) * lu.block_size();
	if (blocks > lu.cfg().max_xfer_blocks || bytes > UINT32_MAX)
		return Sense::InvalidCdbField;
	cmd->flags |= CMD_DATA_CDB | CMD_BLOCK_XFER;
	cmd->lba = lba;
	cmd->nr_blocks = blocks;
	cmd->cdb_xfer = static_cast<uint32_t>(bytes);
	cmd->cdb_dir = dir;
	cmd->execute = exec_rw;
	if (dir == DataDir::Write)
		cmd->flags |= CMD_WRITES_MEDIUM;
	return Sense::None;
}

// Byte 1 of READ/WRITE (10, 12, 16): RDPROTECT/WRPROTECT (bits 7..5) must be 0 (no
// protection information: SBC-3 table "RDPROTECT field", INVALID FIELD IN CDB otherwise),
// DPO (bit 4) is a cache hint we take as given, FUA (bit 3); RARC (bit 2) and FUA_NV
// (bit 1) are hints, bit 0 is obsolete. The GROUP NUMBER byte is accepted as any value
// (no grouping function is offered: SBC-3 4.21).
Sense rw_flags(Cmd *cmd)
{
	const uint8_t b1 = cmd->cdb[1];
	if (b1 & 0xe0)
		return Sense::InvalidCdbField;
	if (b1 & 0x08)
		cmd->flags |= CMD_FUA;
	return Sense::None;
}

Sense parse_rw(Cmd *cmd, DataDir dir)
{
	const uint8_t *c = cmd->cdb;
	uint64_t lba;
	uint32_t blocks;
	switch (c[0]) {
	case OP_READ_6:
	case OP_WRITE_6:
		// SBC-3 5.12/5.35: a 21-bit LBA; a TRANSFER LENGTH of 0 means 256 blocks; no
		// flags.
		lba = get_be24(c + 1) & 0x1fffff;
		blocks = c[4] ? c[4] : 256;
		return set_data_cdb(cmd, lba, blocks, dir);
	case OP_READ_10:
	case OP_WRITE_10:
		lba = get_be32(c + 2);
		blocks = get_be16(c + 7);
		break;
	case OP_READ_12:
	case OP_WRITE_12:
		lba = get_be32(c + 2);
		blocks = get_be32(c + 6);
		break;
	default: // 16
		lba = get_be64(c + 2);
		blocks = get_be32(c + 10);
		break;
	}
	if (Sense r = rw_flags(cmd); r != Sense::None)
		return r;
	return set_data_cdb(cmd, lba, blocks, dir);
}

// SYNCHRONIZE CACHE (10)/(16) and PRE-FETCH (10)/(16) share their layout: IMMED in byte 1
// bit 1, the LBA, a block count (0: to the last LBA) and the GROUP NUMBER.
void range_fields(const Cmd *cmd, uint64_t *lba, uint32_t *blocks)
{
	const uint8_t *c = cmd->cdb;
	if (c[0] == OP_SYNCHRONIZE_CACHE_10 || c[0] == OP_PRE_FETCH_10) {
		*lba = get_be32(c + 2);
		*blocks = get_be16(c + 7);
	} else {
		*lba = get_be64(c + 2);
		*blocks = get_be32(c + 10);
	}
}

Sense parse_sync_cache(Cmd *cmd)
{
	// SBC-3 5.22/5.23: IMMED is allowed (we answer after the flush anyway, which SBC-3
	// permits); the range, when given, must lie inside the LU. The whole cache is
	// flushed: the backstores cannot flush a range.
	uint64_t lba;
	uint32_t blocks;
	range_fields(cmd, &lba, &blocks);
	if (Sense r = sbc_check_range(*cmd->lu, lba, blocks); r != Sense::None)
		return r;
	cmd->execute = exec_sync_cache;
	return Sense::None;
}

Sense parse_prefetch(Cmd *cmd)
{
	// SBC-3 5.9/5.10: with IMMED or without, PRE-FETCH asks to load the range into the
	// cache. There is no cache of ours to load (the backstore's page cache or device
	// does its own read-ahead), which SBC-3 answers with GOOD ("not all of the logical
	// blocks fit"), never CONDITION MET. The range is still checked.
	uint64_t lba;
	uint32_t blocks;
	range_fields(cmd, &lba, &blocks);
	if (Sense r = sbc_check_range(*cmd->lu, lba, blocks); r != Sense::None)
		return r;
	cmd->execute = exec_good;
	return Sense::None;
}

} // namespace

Sense sbc_parse(Cmd *cmd)
{
	if (!cmd->lu)
		return spc_parse(cmd);
	const uint8_t *c = cmd->cdb;
	switch (c[0]) {
	case OP_READ_6:
	case OP_READ_10:
	case OP_READ_12:
	case OP_READ_16:
		return parse_rw(cmd, DataDir::Read);
	case OP_WRITE_6:
	case OP_WRITE_10:
	case OP_WRITE_12:
	case OP_WRITE_16:
		return parse_rw(cmd, DataDir::Write);
	case OP_VERIFY_10:
	case OP_VERIFY_12:
	case OP_VERIFY_16:
		return sbc_parse_verify(cmd);
	case OP_WRITE_VERIFY_10:
	case OP_WRITE_VERIFY_12:
	case OP_WRITE_VERIFY_16:
		return sbc_parse_write_verify(cmd);
	case OP_WRITE_SAME_10:
	case OP_WRITE_SAME_16:
		return sbc_parse_write_same(cmd);
	case OP_UNMAP:
		return sbc_parse_unmap(cmd);
	case OP_COMPARE_AND_WRITE:
		return sbc_parse_caw(cmd);
	case OP_ORWRITE_16:
		return sbc_parse_orwrite(cmd);
	case OP_WRITE_ATOMIC_16:
		return sbc_parse_write_atomic(cmd);
	case OP_SYNCHRONIZE_CACHE_10:
	case OP_SYNCHRONIZE_CACHE_16:
		return parse_sync_cache(cmd);
	case OP_PRE_FETCH_10:
	case OP_PRE_FETCH_16:
		return parse_prefetch(cmd);
	case OP_READ_DEFECT_DATA_10:
	case OP_READ_DEFECT_DATA_12:
		return sbc_parse_read_defect_data(cmd);
	case OP_READ_CAPACITY_10:
		// SBC-3 5.15: the LBA and PMI fields are obsolete and must be zero.
		if (get_be32(c + 2) || (c[8] & 1))
			return Sense::InvalidCdbField;
		cmd->cdb_xfer = 8;
		cmd->cdb_dir = DataDir::Read;
		cmd->execute = exec_read_capacity_10;
		return Sense::None;
	case OP_SERVICE_ACTION_IN_16:
		switch (c[1] & 0x1f) {
		case SAI_READ_CAPACITY_16:
			// SBC-3 5.16: any ALLOCATION LENGTH, 0 included, is fine (libiscsi
			// ReadCapacity16.Alloclen); the obsolete LBA/PMI fields are ignored.
			cmd->cdb_xfer = get_be32(c + 10);
			cmd->cdb_dir = DataDir::Read;
			cmd->execute = exec_read_capacity_16;
			return Sense::None;
		case SAI_GET_LBA_STATUS:
			return sbc_parse_get_lba_status(cmd);
		default:
			break;
		}
		break;
	default:
		break;
	}
	return spc_parse(cmd);
}

} // namespace ulp::scsi
