// SPDX-License-Identifier: MIT
// tests/scsi/pr_env.h - what the reservation suites share (pr_test.cc, pr_in_test.cc,
// pr_preempt_test.cc, pr_conflict_test.cc): the service actions, types and flags spelled out
// from SPC-4, the reservation keys and initiator ports, the CDB and parameter list builders,
// and Pr, an LU behind the loopback fabric with PERSISTENT RESERVE IN/OUT as calls.
#pragma once

#include "scsi/core.h"
#include "scsi/core_internal.h"
#include "scsi/pr.h"
#include "scsi/pr_internal.h"
#include "scsi_test_util.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ulp::scsi::pr_test
{

using namespace test;

// SPC-4 6.17.2 table 167, 6.16.1 table 160, 6.17.2 table 169.
enum : uint8_t {
	SA_REGISTER = 0x00,
	SA_RESERVE = 0x01,
	SA_RELEASE = 0x02,
	SA_CLEAR = 0x03,
	SA_PREEMPT = 0x04,
	SA_PREEMPT_ABORT = 0x05,
	SA_REGISTER_IGNORE = 0x06,
	SA_REGISTER_MOVE = 0x07,
};
enum : uint8_t {
	SA_READ_KEYS = 0x00,
	SA_READ_RESERVATION = 0x01,
	SA_REPORT_CAPABILITIES = 0x02,
	SA_READ_FULL_STATUS = 0x03,
};
enum : uint8_t {
	WE = 0x1,
	EA = 0x3,
	WE_RO = 0x5,
	EA_RO = 0x6,
	WE_AR = 0x7,
	EA_AR = 0x8,
};
inline constexpr uint8_t kAllTypes[] = {WE, EA, WE_RO, EA_RO, WE_AR, EA_AR};
constexpr bool all_reg(uint8_t t)
{
	return t == WE_AR || t == EA_AR;
}

// Parameter list byte 20 (SPC-4 6.17.3 table 170).
enum : uint8_t {
	F_APTPL = 0x01,
	F_ALL_TG_PT = 0x04,
	F_SPEC_I_PT = 0x08,
};

inline constexpr uint64_t K1 = 0x1111222233334444ull;
inline constexpr uint64_t K2 = 0x5555666677778888ull;
inline constexpr uint64_t K3 = 0x99990000aaaabbbbull;

// Initiator ports as iSCSI names them (name,i,0xISID), as the core's NexusId carries them.
inline const std::string kPortA = "iqn.1994-05.com.example:a,i,0x23d000000001";
inline const std::string kPortB = "iqn.1994-05.com.example:b,i,0x23d000000002";
inline const std::string kPortC = "iqn.1994-05.com.example:c,i,0x23d000000003";

inline std::vector<uint8_t> cdb_prout(uint8_t sa, uint8_t type, uint32_t len = 24,
                                      uint8_t scope = 0)
{
	std::vector<uint8_t> c(10, 0);
	c[0] = 0x5f;
	c[1] = sa;
	c[2] = static_cast<uint8_t>(scope << 4 | type);
	put_be32(&c[5], len);
	return c;
}

inline std::vector<uint8_t> prout_data(uint64_t key, uint64_t sa_key, uint8_t flags = 0)
{
	std::vector<uint8_t> d(24, 0);
	put_be64(&d[0], key);
	put_be64(&d[8], sa_key);
	d[20] = flags;
	return d;
}

inline std::vector<uint8_t> cdb_prin(uint8_t sa, uint16_t alloc)
{
	std::vector<uint8_t> c(10, 0);
	c[0] = 0x5e;
	c[1] = sa;
	put_be16(&c[7], alloc);
	return c;
}

inline std::vector<uint8_t> cdb6(uint8_t op, uint8_t b1 = 0, uint8_t b4 = 0)
{
	std::vector<uint8_t> c(6, 0);
	c[0] = op;
	c[1] = b1;
	c[4] = b4;
	return c;
}

inline std::vector<uint8_t> cdb10(uint8_t op, uint8_t b1 = 0)
{
	std::vector<uint8_t> c(10, 0);
	c[0] = op;
	c[1] = b1;
	return c;
}

struct Keys {
	uint32_t gen = 0;
	uint32_t additional = 0;
	std::vector<uint64_t> keys;
};

struct Resv {
	uint32_t gen = 0;
	bool reserved = false;
	uint64_t key = 0;
	uint8_t scope = 0;
	uint8_t type = 0;
};

class Pr : public ::testing::Test
{
protected:
	explicit Pr(LuConfig cfg = {}, bool gated = false) { lu = &t.add(0, 1 << 20, cfg, gated); }

	// A session for an initiator port, its POWER ON unit attention consumed.
	Nexus *join(const std::string &port, Tpg *tpg = nullptr)
	{
		Nexus *s = t.lb.login(tpg ? *tpg : t.tpg, port.substr(0, port.find(',')), port);
		EXPECT_TRUE(s);
		if (s) {
			EXPECT_EQ(t.lb.run(s, 0, cdb_tur(), DataDir::None).asc(), UA_POWER_ON);
		}
		return s;
	}

	LoopResult out(Nexus *s, uint8_t sa, uint64_t key, uint64_t sa_key, uint8_t type = 0,
	               uint8_t flags = 0)
	{
		return t.lb.run(s, 0, cdb_prout(sa, type), DataDir::Write,
		                prout_data(key, sa_key, flags));
	}
	Status out_st(Nexus *s, uint8_t sa, uint64_t key, uint64_t sa_key, uint8_t type = 0,
	              uint8_t flags = 0)
	{
		return out(s, sa, key, sa_key, type, flags).status;
	}
	LoopResult in(Nexus *s, uint8_t sa, uint16_t alloc = 4096)
	{
		return t.lb.run(s, 0, cdb_prin(sa, alloc), DataDir::Read,
		                std::vector<uint8_t>(alloc));
	}

	Keys keys(Nexus *s)
	{
		Keys k;
		auto r = in(s, SA_READ_KEYS);
		EXPECT_EQ(r.status, Status::Good);
		if (r.data.size() < 8)
			return k;
		k.gen = get_be32(&r.data[0]);
		k.additional = get_be32(&r.data[4]);
		EXPECT_EQ(k.additional, r.data.size() - 8) << "ADDITIONAL LENGTH matches the data";
		for (size_t i = 8; i + 8 <= r.data.size(); i += 8)
			k.keys.push_back(get_be64(&r.data[i]));
		return k;
	}
	Resv resv(Nexus *s)
	{
		Resv v;
		auto r = in(s, SA_READ_RESERVATION);
		EXPECT_EQ(r.status, Status::Good);
		if (r.data.size() < 8)
			return v;
		v.gen = get_be32(&r.data[0]);
		const uint32_t al = get_be32(&r.data[4]);
		if (al == 16 && r.data.size() >= 24) {
			v.reserved = true;
			v.key = get_be64(&r.data[8]);
			v.scope = r.data[21] >> 4;
			v.type = r.data[21] & 0xf;
		} else {
			EXPECT_EQ(al, 0u);
		}
		return v;
	}

	// libiscsi's verify_read_works / verify_write_works: one block at LBA 1 (threads use
	// blocks of their own: the RAM backstore does not order overlapping I/O).
	Status read(Nexus *s, uint32_t lba = 1)
	{
		return t.lb
		    .run(s, 0, cdb_rw10(false, lba, 1), DataDir::Read, std::vector<uint8_t>(512))
		    .status;
	}
	Status write(Nexus *s, uint32_t lba = 1)
	{
		return t.lb
		    .run(s, 0, cdb_rw10(true, lba, 1), DataDir::Write, std::vector<uint8_t>(512))
		    .status;
	}
	// The pending unit attention a TEST UNIT READY reports, or 0.
	uint16_t ua(Nexus *s)
	{
		auto r = t.lb.run(s, 0, cdb_tur(), DataDir::None);
		if (r.status == Status::CheckCondition && r.key() == SenseKey::UnitAttention)
			return r.asc();
		EXPECT_EQ(r.status, Status::Good);
		return 0;
	}

	Target t;
	LogicalUnit *lu;
};

} // namespace ulp::scsi::pr_test
