// SPDX-License-Identifier: MIT
// scsi/sbc.h - what the block command set (scsi/sbc*.cc) promises to initiators, for the
// pages that describe it: the Block Limits VPD page (B0h), the Logical Block Provisioning
// VPD page (B2h), READ CAPACITY (16) and REPORT SUPPORTED OPERATION CODES. spc.cc reports
// these values and sbc*.cc enforces them; both read them from here so that they cannot
// drift apart (libiscsi checks that what a target does matches what its pages say).
//
// The rest of the block limits come from the logical unit's configuration (LuConfig) and
// are enforced as configured:
//   MAXIMUM TRANSFER LENGTH                    cfg.max_xfer_blocks: READ/WRITE, WRITE AND
//                                              VERIFY, VERIFY with BYTCHK 01b
//   MAXIMUM UNMAP LBA COUNT                    cfg.max_unmap_blocks (total of one UNMAP)
//   MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT       cfg.max_unmap_descs
//   MAXIMUM WRITE SAME LENGTH                  cfg.max_write_same_blocks
// the physical block (cfg.physical_block_size, LogicalUnit::lbppb()) as READ CAPACITY (16)'s
// exponent and as OPTIMAL TRANSFER LENGTH GRANULARITY and the least OPTIMAL UNMAP
// GRANULARITY (hints: nothing is refused for not being aligned to it),
// and thin provisioning from LogicalUnit::thin(): LBPME (READ CAPACITY 16), LBPU, LBPWS,
// LBPWS10 and LBPRZ (VPD B2h) are all equal to it. Every backstore that can unmap
// guarantees zeros on read afterwards (backstore.h), hence LBPRZ.
#pragma once

#include <cstdint>

namespace ulp::scsi
{

// SBC-3 6.6.4 Block Limits VPD page, byte 4 bit 0 (WSNZ) 0: a WRITE SAME whose NUMBER OF
// LOGICAL BLOCKS is zero writes from its LBA to the last LBA (SBC-3 5.42/5.43), subject to
// MAXIMUM WRITE SAME LENGTH like any other count: a range longer than that is still INVALID
// FIELD IN CDB, so a zero count never turns into an unbounded write of the whole LU.
inline constexpr bool kSbcWsnz = false;

// Block Limits VPD page byte 5: MAXIMUM COMPARE AND WRITE LENGTH, blocks (SBC-3 5.2). One
// block, the unit of every atomic test-and-set initiator (VMware ATS, SCSI-based locks).
inline constexpr uint8_t kSbcMaxCompareAndWriteBlocks = 1;

// Logical Block Provisioning VPD page byte 6 bit 1 (ANC_SUP): anchored LBAs are not
// supported, so WRITE SAME and UNMAP with the ANCHOR bit set end with INVALID FIELD IN
// CDB (SBC-3 table "ANCHOR bit, UNMAP bit, and ANC_SUP bit relationships").
inline constexpr bool kSbcAncSup = false;

// READ CAPACITY (16) bytes 14..15: LOWEST ALIGNED LOGICAL BLOCK ADDRESS 0. LBA 0 starts a
// physical block: a LU's physical blocks (LuConfig::physical_block_size, reported as the
// LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT) are aligned with the start of its backstore,
// and so the Block Limits VPD page's UNMAP GRANULARITY ALIGNMENT is 0 too.
inline constexpr uint16_t kSbcLowestAlignedLba = 0;

} // namespace ulp::scsi
