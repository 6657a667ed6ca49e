// SPDX-License-Identifier: MIT
// REPORT SUPPORTED OPERATION CODES through the loopback fabric: all commands and one, the
// timeouts descriptors, field pointers, and the opcode table against what the parsers
// accept (shared fixtures: spc_env.h).
#include "tests/scsi/spc_env.h"

#include <algorithm>
#include <set>

namespace ulp::scsi
{
namespace
{

using namespace spc_test;

// ---- REPORT SUPPORTED OPERATION CODES ---------------------------------------------------

struct RsocDesc {
	uint8_t opcode;
	uint16_t sa;
	bool ctdp, servactv;
	uint16_t cdb_len;
	uint16_t to_len = 0;
};

std::vector<RsocDesc> rsoc_all(Target &t, Nexus *s, bool rctd, uint64_t lun = 0)
{
	auto r = read_cmd(t, s, lun, cdb_rsoc(0, 0, 0, 65535, rctd), 65535);
	EXPECT_EQ(r.status, Status::Good);
	std::vector<RsocDesc> v;
	if (r.data.size() < 4)
		return v;
	EXPECT_EQ(get_be32(&r.data[0]) + 4, r.data.size()) << "COMMAND DATA LENGTH";
	size_t off = 4;
	while (off + 8 <= r.data.size()) {
		const uint8_t *d = &r.data[off];
		RsocDesc x{d[0], get_be16(d + 2), bool(d[5] & 2), bool(d[5] & 1), get_be16(d + 6)};
		off += 8;
		if (x.ctdp) {
			x.to_len = get_be16(&r.data[off]);
			off += 2 + x.to_len;
		}
		v.push_back(x);
	}
	EXPECT_EQ(off, r.data.size());
	return v;
}

// The rows lu offers (opcode_supported): all of them on a thin LU but REPORT and SET
// TARGET PORT GROUPS, which need ALUA (alua_test.cc checks those).
std::vector<OpcodeInfo> offered(const LogicalUnit &lu)
{
	std::vector<OpcodeInfo> v;
	for (const OpcodeInfo &e : opcode_table())
		if (opcode_supported(e, lu))
			v.push_back(e);
	return v;
}

TEST(SpcRsoc, AllCommandsMatchTheTable)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto v = rsoc_all(t, s, false);
	auto table = offered(*t.lus[0]);
	ASSERT_EQ(v.size(), table.size()) << "a thin LU offers every command but ALUA's";
	for (size_t i = 0; i < v.size(); i++) {
		EXPECT_EQ(v[i].opcode, table[i].opcode);
		EXPECT_EQ(v[i].sa, table[i].sa);
		EXPECT_EQ(v[i].servactv, table[i].has_sa);
		EXPECT_EQ(v[i].cdb_len, table[i].cdb_len);
		// libiscsi ReportSupportedOpcodes.RCTD and .SERVACTV.
		EXPECT_FALSE(v[i].ctdp);
		if (!v[i].servactv) {
			EXPECT_EQ(v[i].sa, 0);
		}
	}
	// What sits where in the table is tested command by command elsewhere; a few here.
	auto has = [&](uint8_t op, uint16_t sa) {
		return std::any_of(v.begin(), v.end(),
		                   [&](const RsocDesc &d) { return d.opcode == op && d.sa == sa; });
	};
	EXPECT_TRUE(has(0x12, 0));
	EXPECT_TRUE(has(0x9e, 0x10));
	EXPECT_TRUE(has(0xa3, 0x0c));
	EXPECT_TRUE(has(0xa3, 0x0d));
	EXPECT_TRUE(has(0x5f, 0x07));
	EXPECT_TRUE(has(0x42, 0));
	// A fully provisioned LU does not offer UNMAP.
	LuConfig c;
	c.thin = false;
	t.add(1, 1 << 20, c);
	ASSERT_EQ(none_cmd(t, s, 1, cdb_tur()).status, Status::CheckCondition);
	auto f = rsoc_all(t, s, false, 1);
	EXPECT_EQ(f.size(), table.size() - 1);
	EXPECT_TRUE(std::none_of(f.begin(), f.end(), [](auto &d) { return d.opcode == 0x42; }));
	auto one = read_cmd(t, s, 1, cdb_rsoc(1, 0x42), 65535);
	ASSERT_EQ(one.status, Status::Good);
	EXPECT_EQ(one.data[1] & 7, 1) << "UNMAP not supported";
}

TEST(SpcRsoc, TimeoutsDescriptors)
{
	// libiscsi ReportSupportedOpcodes.RCTD: with RCTD every descriptor has CTDP and a
	// 0Ah-long timeouts descriptor (iscsi-test-cu asks that way at start-up).
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto v = rsoc_all(t, s, true);
	ASSERT_EQ(v.size(), offered(*t.lus[0]).size());
	for (auto &d : v) {
		EXPECT_TRUE(d.ctdp) << int(d.opcode);
		EXPECT_EQ(d.to_len, 0x0a) << int(d.opcode);
	}
}

TEST(SpcRsoc, OneCommand)
{
	// libiscsi ReportSupportedOpcodes.OneCommand: for every command listed, option 001b
	// works without service actions and fails with them, 010b the other way round, and
	// the CDB usage data starts with the opcode.
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	for (const RsocDesc &d : rsoc_all(t, s, false)) {
		SCOPED_TRACE(::testing::Message()
		             << std::hex << "opcode " << int(d.opcode) << " sa " << d.sa);
		auto o1 = read_cmd(t, s, 0, cdb_rsoc(1, d.opcode, d.sa), 65535);
		auto o2 = read_cmd(t, s, 0, cdb_rsoc(2, d.opcode, d.sa), 65535);
		if (d.servactv) {
			EXPECT_TRUE(IsInvalidCdb(o1));
			EXPECT_EQ(o2.status, Status::Good);
		} else {
			EXPECT_EQ(o1.status, Status::Good);
			EXPECT_TRUE(IsInvalidCdb(o2));
		}
		for (uint8_t opt : {uint8_t(d.servactv ? 2 : 1), uint8_t(3)}) {
			auto r =
			    read_cmd(t, s, 0, cdb_rsoc(opt, d.opcode, d.sa, 65535, true), 65535);
			ASSERT_EQ(r.status, Status::Good);
			const OpcodeInfo *e = opcode_find(d.opcode, d.sa);
			ASSERT_TRUE(e);
			ASSERT_EQ(r.data.size(), 4u + e->cdb_len + 12);
			EXPECT_EQ(r.data[1], 0x80 | 0x03) << "CTDP, SUPPORT 011b";
			EXPECT_EQ(get_be16(&r.data[2]), d.cdb_len);
			EXPECT_EQ(r.data[4], d.opcode);
			EXPECT_TRUE(
			    std::equal(e->usage, e->usage + e->cdb_len, r.data.begin() + 4));
			if (d.servactv) {
				EXPECT_EQ(r.data[5] & 0x1f, d.sa);
			}
			EXPECT_EQ(get_be16(&r.data[4 + e->cdb_len]), 0x0a);
			// Without RCTD: no timeouts.
			auto n = read_cmd(t, s, 0, cdb_rsoc(opt, d.opcode, d.sa), 65535);
			EXPECT_EQ(n.data.size(), 4u + e->cdb_len);
			EXPECT_EQ(n.data[1], 0x03);
		}
	}
}

TEST(SpcRsoc, UnsupportedCommandsAndBadCdbs)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	// Not supported: SUPPORT 001b, no CDB.
	for (auto c : {cdb_rsoc(1, 0xc0), cdb_rsoc(3, 0x04), cdb_rsoc(2, 0x9e, 0x11),
	               cdb_rsoc(3, 0xa3, 0x05)}) {
		auto r = read_cmd(t, s, 0, c, 64);
		ASSERT_EQ(r.status, Status::Good);
		ASSERT_EQ(r.data.size(), 4u);
		EXPECT_EQ(r.data[1], 0x01);
		EXPECT_EQ(get_be16(&r.data[2]), 0);
	}
	// 010b on an opcode without service actions (known or not).
	EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, cdb_rsoc(2, 0xc0), 64)));
	// Reserved reporting options and bits.
	for (uint8_t opt = 4; opt < 8; opt++)
		EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, cdb_rsoc(opt), 64))) << int(opt);
	auto c = cdb_rsoc(0);
	c[2] |= 0x08;
	EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, c, 64)));
	// A short allocation length cuts the list but not its length field.
	auto r = read_cmd(t, s, 0, cdb_rsoc(0, 0, 0, 12), 12);
	ASSERT_EQ(r.status, Status::Good);
	ASSERT_EQ(r.data.size(), 12u);
	EXPECT_EQ(get_be32(&r.data[0]), 8u * offered(*t.lus[0]).size());
	// MAINTENANCE IN with a service action that is not there.
	std::vector<uint8_t> mi(12, 0);
	mi[0] = 0xa3;
	mi[1] = 0x05;
	put_be32(&mi[6], 64);
	EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, mi, 64)));
}

// SPC-4 4.5.2.4.2: INVALID FIELD IN CDB of REPORT SUPPORTED OPERATION CODES points at the
// field that is wrong (SKSV, C/D 1), never at the service action: libiscsi's
// ReportSupportedOpcodes.OneCommand reads a field pointer of 1 (or none) on a MAINTENANCE IN
// command as "service action not implemented" and skips. An unknown service action does
// point at byte 1, bits 4..0.
TEST(SpcRsoc, FieldPointers)
{
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	auto field = [](const LoopResult &r) {
		EXPECT_GE(r.sense.size(), 18u);
		return r.sense.size() < 18
		           ? 0u
		           : uint32_t(r.sense[15]) << 16 | r.sense[16] << 8 | r.sense[17];
	};
	// 010b on an opcode without service actions: the REQUESTED OPERATION CODE (byte 3).
	auto r = read_cmd(t, s, 0, cdb_rsoc(2, 0x00), 64);
	ASSERT_TRUE(IsInvalidCdb(r));
	EXPECT_EQ(field(r), 0xc00003u);
	// 001b on one with service actions: byte 3 too.
	r = read_cmd(t, s, 0, cdb_rsoc(1, 0x9e), 64);
	ASSERT_TRUE(IsInvalidCdb(r));
	EXPECT_EQ(field(r), 0xc00003u);
	// A reserved REPORTING OPTIONS value: byte 2, bit 2 (BPV set).
	r = read_cmd(t, s, 0, cdb_rsoc(5), 64);
	ASSERT_TRUE(IsInvalidCdb(r));
	EXPECT_EQ(field(r), 0xca0002u);
	// MAINTENANCE IN with a service action that is not there: byte 1, bit 4.
	std::vector<uint8_t> mi(12, 0);
	mi[0] = 0xa3;
	mi[1] = 0x05;
	put_be32(&mi[6], 64);
	r = read_cmd(t, s, 0, mi, 64);
	ASSERT_TRUE(IsInvalidCdb(r));
	EXPECT_EQ(field(r), 0xcc0001u);
	// Other reasons carry no sense key specific data.
	r = read_cmd(t, s, 0, cdb_rw10(false, 0xfffffff0u, 1), 512);
	ASSERT_EQ(r.status, Status::CheckCondition);
	EXPECT_EQ(field(r), 0u);
}

// The table against the parsers: every opcode (and service action) the core answers with
// anything but INVALID COMMAND OPERATION CODE is in the table, and every row is answered
// with something else. A zeroed CDB is enough for that: a known command refuses it for a
// field, an unknown one for its opcode.
LoopResult zero_cdb(Target &t, Nexus *s, uint8_t op, uint8_t sa)
{
	std::vector<uint8_t> c(16, 0);
	c[0] = op;
	c[1] = sa;
	return none_cmd(t, s, 0, c);
}

bool invalid_opcode(const LoopResult &r)
{
	return r.status == Status::CheckCondition && r.key() == SenseKey::IllegalRequest &&
	       r.asc() == 0x2000;
}

TEST(SpcRsoc, TableMatchesTheParsers)
{
	Target t;
	t.add(0, 4 << 20);
	Nexus *s = t.login("iqn.init:a");
	std::set<uint8_t> sa_opcodes;
	for (const OpcodeInfo &e : opcode_table())
		if (e.has_sa)
			sa_opcodes.insert(e.opcode);
	for (int op = 0; op < 256; op++) {
		if (sa_opcodes.count(uint8_t(op))) {
			for (uint8_t sa = 0; sa < 32; sa++) {
				auto r = zero_cdb(t, s, uint8_t(op), sa);
				ASSERT_TRUE(r.finished);
				const OpcodeInfo *e = opcode_find(uint8_t(op), sa);
				const bool known = e && opcode_supported(*e, *t.lus[0]);
				if (known) {
					EXPECT_TRUE(!invalid_opcode(r))
					    << std::hex << op << "/" << int(sa)
					    << " is in the table";
				} else {
					// An unknown service action of a known opcode: either
					// answer.
					EXPECT_TRUE(invalid_opcode(r) || IsInvalidCdb(r))
					    << std::hex << op << "/" << int(sa)
					    << " is not in the table";
				}
			}
			continue;
		}
		auto r = zero_cdb(t, s, uint8_t(op), 0);
		ASSERT_TRUE(r.finished);
		if (opcode_find(uint8_t(op), 0)) {
			EXPECT_TRUE(!invalid_opcode(r)) << std::hex << op << " is in the table";
		} else {
			EXPECT_TRUE(invalid_opcode(r)) << std::hex << op << " is not in the table";
		}
	}
	EXPECT_EQ(t.lus[0]->task_count(), 0u);
}

TEST(SpcRsoc, UsageDataOfThePrimaryCommands)
{
	// Bits the usage data marks 0 in the commands of this family are refused or ignored;
	// a few marked 1 are taken. Byte by byte against SPC-4 for the ones built here.
	auto usage = [](uint8_t op, uint16_t sa = 0) {
		const OpcodeInfo *e = opcode_find(op, sa);
		EXPECT_TRUE(e);
		return std::vector<uint8_t>(e->usage, e->usage + e->cdb_len);
	};
	EXPECT_EQ(usage(0x12), (std::vector<uint8_t>{0x12, 0x01, 0xff, 0xff, 0xff, 0x00}));
	EXPECT_EQ(usage(0x1a), (std::vector<uint8_t>{0x1a, 0x08, 0xff, 0xff, 0xff, 0x00}));
	EXPECT_EQ(usage(0x5a),
	          (std::vector<uint8_t>{0x5a, 0x18, 0xff, 0xff, 0, 0, 0, 0xff, 0xff, 0x00}));
	EXPECT_EQ(usage(0x15), (std::vector<uint8_t>{0x15, 0x11, 0, 0, 0xff, 0x00}));
	EXPECT_EQ(usage(0x1b), (std::vector<uint8_t>{0x1b, 0x01, 0, 0x0f, 0xf7, 0x00}));
	EXPECT_EQ(usage(0xa0),
	          (std::vector<uint8_t>{0xa0, 0, 0xff, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0}));
	EXPECT_EQ(usage(0xa3, 0x0c), (std::vector<uint8_t>{0xa3, 0x0c, 0x87, 0xff, 0xff, 0xff, 0xff,
	                                                   0xff, 0xff, 0xff, 0, 0}));
	Target t;
	t.add(0);
	Nexus *s = t.login("iqn.init:a");
	// Reserved (usage 0) bits of byte 1 are refused by the commands that check them: each
	// CDB below is GOOD without the bit.
	struct Case {
		std::vector<uint8_t> cdb;
		uint8_t bit;
		size_t alloc;
	} cases[] = {
	    {cdb_inquiry(8), 0x02, 8},                                  // CMDDT
	    {cdb_mode_sense6(0, 0x3f, 0, 8), 0x10, 8},                  // not LLBAA
	    {cdb_mode_select6(0), 0x02, 0},                             //
	    {cdb_start_stop(false, 0, 0, false, false, true), 0x02, 0}, //
	    {std::vector<uint8_t>{0x1d, 0x04, 0, 0, 0, 0}, 0x08, 0},    //
	    {std::vector<uint8_t>{0x1e, 0x00, 0, 0, 0, 0}, 0x01, 0},    //
	};
	for (Case &c : cases) {
		EXPECT_EQ(read_cmd(t, s, 0, c.cdb, c.alloc).status, Status::Good)
		    << std::hex << int(c.cdb[0]);
		c.cdb[1] |= c.bit;
		EXPECT_TRUE(IsInvalidCdb(read_cmd(t, s, 0, c.cdb, c.alloc)))
		    << std::hex << int(c.cdb[0]);
	}
}

} // namespace
} // namespace ulp::scsi
