// SPDX-License-Identifier: MIT
// scsi/spc_alua.cc - REPORT TARGET PORT GROUPS (MAINTENANCE IN, SPC-4 6.37) and SET
// TARGET PORT GROUPS (MAINTENANCE OUT, SPC-4 6.46): what an initiator's multipath layer
// (Linux scsi_dh_alua, sg3_utils' sg_rtpg and sg_stpg) reads and sets of a LU's target
// port groups (scsi/alua.h).
#include "core/byteorder.h"
#include "scsi/alua.h"
#include "scsi/core_internal.h"

#include <cerrno>
#include <vector>

namespace ulp::scsi
{

namespace
{

// RTPG byte 1 bits 7..5, PARAMETER DATA FORMAT.
enum : uint8_t {
	RTPG_FORMAT_LENGTH = 0x0,   // the RETURN DATA LENGTH header only
	RTPG_FORMAT_EXTENDED = 0x1, // with FORMAT TYPE and IMPLICIT TRANSITION TIME
};

// The supported states byte of each descriptor (SPC-4 6.37): T_SUP, O_SUP, U_SUP, S_SUP,
// AN_SUP, AO_SUP; LBD_SUP 0 (no LBA dependent state).
constexpr uint8_t kSupportedStates = 0x80 | 0x40 | 0x08 | 0x04 | 0x02 | 0x01;

void exec_rtpg(Cmd *cmd)
{
	Alua &a = cmd->lu->alua_;
	const bool ext = (cmd->cdb[1] >> 5) == RTPG_FORMAT_EXTENDED;
	std::vector<uint8_t> d(ext ? 8 : 4, 0);
	if (ext) {
		d[4] = RTPG_FORMAT_EXTENDED << 4; // FORMAT TYPE
		d[5] = a.implicit_transition_secs();
	}
	for (const AluaGroup &g : a.groups()) {
		const size_t at = d.size();
		d.resize(at + 8 + 4 * g.rtpis.size(), 0);
		uint8_t *p = &d[at];
		p[0] = uint8_t((g.pref ? 0x80 : 0) | uint8_t(g.state));
		p[1] = kSupportedStates;
		put_be16(p + 2, g.id);
		p[5] = g.status;
		p[7] = uint8_t(g.rtpis.size()); // at most Alua::kMaxPortsPerGroup
		for (size_t i = 0; i < g.rtpis.size(); i++)
			put_be16(p + 8 + 4 * i + 2, g.rtpis[i]);
	}
	// RETURN DATA LENGTH: what follows it, whatever the allocation length lets through
	// (SPC-4 4.2.5.6: the data is truncated, not the length).
	put_be32(&d[0], uint32_t(d.size() - 4));
	complete_data_in(cmd, d);
}

// STPG parameter lists beyond this are refused (a bound on what is fetched; 64 KiB is
// 16383 descriptors, far more groups than a LU has).
constexpr uint32_t kMaxStpgLen = 65536;

void exec_stpg(Cmd *cmd)
{
	std::vector<uint8_t> p(cmd->xfer_len);
	if (sgl_copy_out(cmd, 0, p.data(), p.size()) != p.size()) {
		complete_sense(cmd, Sense::ParamListLengthError);
		return;
	}
	std::vector<std::pair<uint16_t, AluaState>> changes;
	if (Sense r = stpg_decode(p, &changes); r != Sense::None) {
		complete_sense(cmd, r);
		return;
	}
	if (changes.empty()) {
		complete_good(cmd);
		return;
	}
	// Every group named must exist: otherwise nothing changes (set_states checks them
	// all first). GOOD once the new states are stored (the daemon's state directory,
	// scsi/alua.h): what the initiator was told is what a restart finds. Should the write
	// fail, the change is undone and the initiator hears INTERNAL TARGET FAILURE, as a
	// PERSISTENT RESERVE OUT with APTPL 1 does (pr_out.cc).
	const int rc = cmd->lu->alua_.set_states(changes, &cmd->sess->id(), [cmd](int err) {
		if (err)
			complete_sense(cmd, Sense::InternalTargetFailure);
		else
			complete_good(cmd);
	});
	switch (rc) {
	case 0:
		return; // completed by the callback
	case -ENOENT:
		complete_sense(cmd, Sense::InvalidParamListField);
		return;
	default: // ALUA turned off since the command was parsed
		complete_sense(cmd, Sense::UnsupportedOpcode);
		return;
	}
}

} // namespace

Sense stpg_decode(std::span<const uint8_t> p, std::vector<std::pair<uint16_t, AluaState>> *out)
{
	out->clear();
	// SPC-4 6.46: a PARAMETER LIST LENGTH of zero is not an error (nothing to change);
	// otherwise a 4-byte reserved header and whole 4-byte descriptors.
	if (p.empty())
		return Sense::None;
	if (p.size() < 4 || (p.size() - 4) % 4)
		return Sense::ParamListLengthError;
	for (size_t at = 4; at + 4 <= p.size(); at += 4) {
		// Byte 0 bits 3..0 ASYMMETRIC ACCESS STATE; bytes 2..3 TARGET PORT GROUP. Only
		// the primary states an initiator may ask for: Active/Optimized,
		// Active/Non-optimized, Standby, Unavailable. TRANSITIONING is the device
		// server's own; Offline (a target port's, by relative port identifier) and LBA
		// dependent are not offered.
		const uint8_t s = p[at] & 0x0f;
		if (s > uint8_t(AluaState::Unavailable))
			return Sense::InvalidParamListField;
		out->emplace_back(get_be16(&p[at + 2]), AluaState(s));
	}
	return Sense::None;
}

Sense rtpg_parse(Cmd *cmd)
{
	// Without ALUA the service action is one the device server does not have: as for
	// any other (spc.cc), INVALID FIELD IN CDB at SERVICE ACTION.
	if (!cmd->lu->alua_.enabled())
		return invalid_cdb_field(cmd, 1, 4);
	const uint8_t *c = cmd->cdb;
	const uint8_t fmt = c[1] >> 5;
	if (fmt != RTPG_FORMAT_LENGTH && fmt != RTPG_FORMAT_EXTENDED)
		return invalid_cdb_field(cmd, 1, 7);
	cmd->cdb_xfer = get_be32(c + 6);
	cmd->cdb_dir = DataDir::Read;
	cmd->execute = exec_rtpg;
	return Sense::None;
}

Sense stpg_parse(Cmd *cmd)
{
	// SPC-4 6.46: only with explicit asymmetric access (TPGS 10b or 11b). MAINTENANCE OUT
	// has no other service action here, so without it the opcode is not supported.
	if (!(cmd->lu->alua_.tpgs() & TPGS_EXPLICIT))
		return Sense::UnsupportedOpcode;
	const uint8_t *c = cmd->cdb;
	if ((c[1] & 0x1f) != MO_SET_TARGET_PORT_GROUPS)
		return invalid_cdb_field(cmd, 1, 4);
	const uint32_t len = get_be32(c + 6);
	if (len > kMaxStpgLen)
		return invalid_cdb_field(cmd, 6);
	cmd->cdb_xfer = len;
	cmd->cdb_dir = DataDir::Write;
	cmd->execute = exec_stpg;
	return Sense::None;
}

} // namespace ulp::scsi
