// SPDX-License-Identifier: MIT
// scsi/xcopy.h - EXTENDED COPY (LID1) and RECEIVE COPY RESULTS (SPC-4 6.4, 6.18): the copy
// manager that lets an initiator (VMware's "Clone", XCOPY offload) have the target copy
// blocks from one logical unit to another of this process without the data crossing the
// fabric.
//
// Three parts:
//   xcopy_parse.cc    the parameter list (SPC-4 6.4.3): header, identification CSCD
//                     descriptors (E4h, 7.3.x) and block-to-block segment descriptors (02h,
//                     6.4.5.x), bounds checked against the limits below. Pure: the fuzz
//                     target fuzz/fuzz_xcopy.cc runs it.
//   xcopy_registry.cc every LogicalUnit of the process by its NAA designator (what VPD 83h
//                     reports, so what an initiator puts in a CSCD), with a pin that keeps
//                     a removed LU's memory alive until a copy using it lets go; and the
//                     results of held copies per I_T nexus for RECEIVE COPY RESULTS.
//   xcopy.cc          the two commands: CDB parsing, the copy in bounded chunks through
//                     the backstores (abortable between chunks), and the reports.
//
// The copy is confined to what the issuing nexus may see: a CSCD that names an LU the nexus
// has no LUN for is unreachable (COPY ABORTED), so EXTENDED COPY cannot read or write an LU
// an ACL hides; a LUN mapped read-only is not a destination.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace ulp::scsi
{

class LogicalUnit;
struct Cmd;
struct NexusId;

// ---- Limits (RECEIVE COPY RESULTS, OPERATING PARAMETERS reports these; the parser
// enforces them) ---------------------------------------------------------------------------
inline constexpr uint16_t kXcopyMaxCscd = 8;                   // MAXIMUM CSCD DESCRIPTOR COUNT
inline constexpr uint16_t kXcopyMaxSegments = 16;              // MAXIMUM SEGMENT DESCRIPTOR COUNT
inline constexpr uint32_t kXcopyMaxDescListLen = 1024;         // MAXIMUM DESCRIPTOR LIST LENGTH,
                                                               // bytes (CSCD + segment lists)
inline constexpr uint32_t kXcopyMaxSegmentBytes = 0xffff0000u; // MAXIMUM SEGMENT LENGTH: a
                                                               // 16-bit block count of 64 KiB
                                                               // blocks at most
inline constexpr uint32_t kXcopyMaxInlineData = 0;             // MAXIMUM INLINE DATA LENGTH
inline constexpr uint16_t kXcopyMaxConcurrent = 64;            // TOTAL / MAXIMUM CONCURRENT COPIES
inline constexpr uint8_t kXcopyDataSegmentGranularityLog2 = 9; // DATA SEGMENT GRANULARITY: 2^9,
                                                               // the smallest block length
inline constexpr size_t kXcopyHeaderLen = 16;                  // the parameter list header
inline constexpr size_t kXcopyCscdLen = 32;                    // an identification CSCD descriptor
inline constexpr size_t kXcopyB2bLen = 28; // a block-to-block segment descriptor
// The longest parameter list accepted at all (PARAMETER LIST LENGTH ERROR beyond).
inline constexpr uint32_t kXcopyMaxParamLen = kXcopyHeaderLen + kXcopyMaxDescListLen;
// The copy's unit of backstore I/O: one read then one write of at most this many bytes.
inline constexpr uint32_t kXcopyChunkBytes = 1u << 20;
// The in-kernel copy's unit (copy_file_range(2) between file backstores, xcopy_fast.cc): one
// call of at most this many bytes, an abort or a copy target's removal noticed between two.
inline constexpr uint32_t kXcopyKernelChunkBytes = 4u << 20;
// Results of held copies (LIST ID USAGE 00b) kept, all nexuses together: the oldest is
// forgotten first (RECEIVE COPY RESULTS then answers INVALID FIELD IN CDB for it).
inline constexpr size_t kXcopyMaxResults = 256;

// Descriptor type codes (SPC-4 6.4.5, 6.4.4).
enum : uint8_t {
	XCOPY_SEG_B2B = 0x02, // block device to block device
	XCOPY_CSCD_ID = 0xe4, // identification descriptor
};

// LIST ID USAGE (SPC-4 6.4.3 table): hold the results, do not, or no list identifier.
enum : uint8_t {
	XCOPY_LIST_HOLD = 0,
	XCOPY_LIST_DISCARD = 2,
	XCOPY_LIST_NONE = 3,
};

// One identification CSCD descriptor (SPC-4 7.3.6.x, E4h), as far as the copy needs it.
struct XcopyCscd {
	bool nul = false;    // NUL: names no logical unit (no I/O may address it)
	bool by_naa = false; // its designator is an 8-byte binary NAA of a logical unit (the
	                     // only form this copy manager resolves)
	uint64_t naa = 0;    // by_naa: the designator
};

// One block-to-block segment descriptor (SPC-4 6.4.5.x, 02h).
struct XcopySeg {
	uint16_t src = 0;     // SOURCE CSCD DESCRIPTOR INDEX
	uint16_t dst = 0;     // DESTINATION CSCD DESCRIPTOR INDEX
	bool dc = false;      // DC: blocks counts destination blocks (else source blocks)
	uint16_t blocks = 0;  // BLOCK DEVICE NUMBER OF BLOCKS
	uint64_t src_lba = 0; // SOURCE BLOCK DEVICE LOGICAL BLOCK ADDRESS
	uint64_t dst_lba = 0; // DESTINATION BLOCK DEVICE LOGICAL BLOCK ADDRESS
};

// A parsed parameter list.
struct XcopyList {
	uint8_t list_id = 0; // LIST IDENTIFIER
	uint8_t usage = 0;   // LIST ID USAGE (XCOPY_LIST_*)
	uint8_t ncscd = 0;   // CSCD descriptors in cscd
	uint8_t nseg = 0;    // segment descriptors in seg
	std::array<XcopyCscd, kXcopyMaxCscd> cscd{};
	std::array<XcopySeg, kXcopyMaxSegments> seg{};
};

// Why a command of the copy manager failed: sense key, ASC/ASCQ, and the sense key specific
// bytes (SKSV bit 23 set when a field pointer is given, sense_field_pointer). key 0: no
// error.
struct XcopyError {
	uint8_t key = 0;
	uint16_t asc = 0; // ASC << 8 | ASCQ
	uint32_t sks = 0;
	explicit operator bool() const { return key != 0; }
};

// Sense codes of the copy manager (SPC-4 annex D).
enum : uint16_t {
	XASC_NONE = 0x0000,                  // NO ADDITIONAL SENSE INFORMATION
	XASC_OPERATION_IN_PROGRESS = 0x0016, // OPERATION IN PROGRESS (a held list id reused)
	XASC_TARGET_NOT_REACHABLE = 0x0d02,  // COPY TARGET DEVICE NOT REACHABLE
	XASC_PARAM_LIST_LENGTH = 0x1a00,     // PARAMETER LIST LENGTH ERROR
	XASC_INVALID_CDB_FIELD = 0x2400,     // INVALID FIELD IN CDB
	XASC_INVALID_PARAM_FIELD = 0x2600,   // INVALID FIELD IN PARAMETER LIST
	XASC_TOO_MANY_CSCD = 0x2606,         // TOO MANY TARGET DESCRIPTORS
	XASC_UNSUPPORTED_CSCD = 0x2607,      // UNSUPPORTED TARGET DESCRIPTOR TYPE CODE
	XASC_TOO_MANY_SEGMENTS = 0x2608,     // TOO MANY SEGMENT DESCRIPTORS
	XASC_UNSUPPORTED_SEGMENT = 0x2609,   // UNSUPPORTED SEGMENT DESCRIPTOR TYPE CODE
	XASC_INLINE_DATA_EXCEEDED = 0x260b,  // INLINE DATA LENGTH EXCEEDED
	XASC_WRITE_PROTECTED = 0x2700,       // WRITE PROTECTED
	XASC_INSUFFICIENT_RESOURCES = 0x5503,
};
enum : uint8_t {
	XKEY_ILLEGAL_REQUEST = 0x5,
	XKEY_DATA_PROTECT = 0x7,
	XKEY_ABORTED_COMMAND = 0xb,
	XKEY_COPY_ABORTED = 0xa,
};

// Parse an EXTENDED COPY (LID1) parameter list of len bytes (len > 0) into *out. Every
// check that needs no logical unit: lengths against the limits above and len, descriptor
// types, field values, CSCD indexes of the segments. Returns the error, or none.
XcopyError xcopy_parse_list(const uint8_t *p, size_t len, XcopyList *out);

// ---- The registry (xcopy_registry.cc) ------------------------------------------------------

// Called by LogicalUnit's constructor and destructor. Unregistering makes the LU unfindable
// and waits until no copy pins it (a copy stops pinning at its next chunk: bounded by one
// backstore request), with a log line every few seconds.
void xcopy_lu_register(LogicalUnit *lu);
void xcopy_lu_unregister(LogicalUnit *lu);

// A pin on a registered LU: while held, the LU is not freed. gone() turns true once the
// LU's destruction has begun (the copy must stop and drop the pin).
class XcopyLuRef
{
public:
	XcopyLuRef() = default;
	~XcopyLuRef() { reset(); }
	XcopyLuRef(const XcopyLuRef &) = delete;
	XcopyLuRef &operator=(const XcopyLuRef &) = delete;
	XcopyLuRef(XcopyLuRef &&o) noexcept : lu_(o.lu_) { o.lu_ = nullptr; }
	XcopyLuRef &operator=(XcopyLuRef &&o) noexcept;
	LogicalUnit *get() const { return lu_; }
	bool gone() const;
	void reset();

private:
	friend XcopyLuRef xcopy_lu_get(uint64_t naa);
	LogicalUnit *lu_ = nullptr;
};

// Pin the LU whose NAA designator is naa; empty when none is registered (or it is going).
XcopyLuRef xcopy_lu_get(uint64_t naa);

// ---- Results of held copies per I_T nexus (SPC-4 6.18) -------------------------------------

enum : uint8_t {
	XCOPY_IN_PROGRESS = 0x00, // COPY MANAGER STATUS: operation in progress
	XCOPY_DONE_GOOD = 0x01,   // completed without errors
	XCOPY_DONE_ERROR = 0x02,  // completed with errors
};

struct XcopyResult {
	uint8_t status = XCOPY_IN_PROGRESS; // COPY MANAGER STATUS
	uint16_t segments = 0;              // SEGMENTS PROCESSED
	uint64_t bytes = 0;                 // bytes written to destinations so far
	uint8_t cmd_status = 0;             // the EXTENDED COPY's SCSI status (when done)
	uint8_t sense_len = 0;              // its sense data (CHECK CONDITION)
	uint8_t sense[18] = {};
};

// Start tracking a held copy (list id) of nexus n on copy manager lu: false when one with
// that list id is still in progress there (OPERATION IN PROGRESS).
bool xcopy_result_begin(const LogicalUnit *lu, const NexusId &n, uint8_t list_id);
// Update or end it (no-op when forgotten meanwhile).
void xcopy_result_update(const LogicalUnit *lu, const NexusId &n, uint8_t list_id,
                         const XcopyResult &r);
// The newest result for (lu, n, list id); false when none is kept. take: forget it once read
// (FAILED SEGMENT DETAILS of a finished copy, SPC-4 6.18.5).
bool xcopy_result_get(const LogicalUnit *lu, const NexusId &n, uint8_t list_id, XcopyResult *out,
                      bool take);

// ---- The in-kernel copy (xcopy_fast.cc) -----------------------------------------------------

// Run fn(cmd), one chunk of cmd's copy that blocks (copy_file_range(2)), on the copy threads,
// as the command's next step (sbc_internal.h's protocol: true, answered already, go on;
// false, its resume function runs with the answer, in st->err, later).
bool xcopy_kernel_submit(Cmd *cmd, int (*fn)(Cmd *));

// Whether copies between file backstores may use copy_file_range(2) (default yes). Off, every
// copy reads and writes through the backstores: for tests that want that path, and for a
// file system whose in-kernel copy is not wanted.
void xcopy_set_kernel_copy(bool on);

// ---- The commands (xcopy.cc), for spc_parse -------------------------------------------------

enum : uint8_t {
	OP_XCOPY_LID1 = 0x83,
	OP_RECV_COPY_RESULTS = 0x84,
	RCR_COPY_STATUS = 0x00,
	RCR_OPERATING_PARAMETERS = 0x03,
	RCR_FAILED_SEGMENT_DETAILS = 0x04,
};

// Parse functions in the families' contract (core_internal.h); they return Sense.
enum class Sense : uint8_t;
Sense xcopy_parse(Cmd *cmd); // EXTENDED COPY (LID1)
Sense rcr_parse(Cmd *cmd);   // RECEIVE COPY RESULTS

} // namespace ulp::scsi
