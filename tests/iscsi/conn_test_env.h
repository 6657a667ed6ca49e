// SPDX-License-Identifier: MIT
// tests/iscsi/conn_test_env.h - what the connection suites share (conn_test.cc,
// conn_control_test.cc): CDBs, sense, and IscsiConn, a logged-in connection on the harness
// (conn_harness.h) with helpers to send PDUs and expect the target's answers.
#pragma once

#include "scsi/sense.h"
#include "tests/iscsi/conn_harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ulp::iscsi::conn_test
{

using namespace ulp::iscsi::target;
using namespace ulp::iscsi::harness;
using namespace std::chrono_literals;

using Cdb = std::array<uint8_t, 16>;

inline constexpr auto kBound = 5000ms; // teardown, and the reaper after it

inline Cdb rw10(uint8_t op, uint32_t lba, uint16_t blocks)
{
	Cdb c{};
	c[0] = op;
	put_be32(&c[2], lba);
	put_be16(&c[7], blocks);
	return c;
}
inline Cdb read10(uint32_t lba, uint16_t blocks)
{
	return rw10(0x28, lba, blocks);
}
inline Cdb write10(uint32_t lba, uint16_t blocks)
{
	return rw10(0x2a, lba, blocks);
}
inline constexpr Cdb kTur{};

inline std::vector<uint8_t> pattern(size_t n, uint8_t seed)
{
	std::vector<uint8_t> v(n);
	for (size_t i = 0; i < n; i++)
		v[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 9));
	return v;
}

// Sense key and ASC/ASCQ of a SCSI Response's data segment (RFC 7143 11.4.7: SenseLength,
// then fixed-format sense data).
struct SenseInfo {
	uint8_t key = 0;
	uint16_t asc = 0;
};
inline SenseInfo sense_of(std::span<const uint8_t> data)
{
	SenseInfo s;
	if (data.size() < 2 + 14 || get_be16(data.data()) < 14)
		return s;
	const uint8_t *d = data.data() + 2;
	s.key = d[2] & 0x0f;
	s.asc = static_cast<uint16_t>(d[12] << 8 | d[13]);
	return s;
}

class IscsiConn : public ::testing::Test
{
protected:
	using TargetTweak = std::function<void(TargetConfig &)>;
	using LoginTweak = std::function<void(InitiatorLoginConfig &)>;

	// A target, one connection, logged in.
	void start(const TargetTweak &tt = {}, const LoginTweak &lt = {})
	{
		TargetConfig tc = permissive_config();
		if (tt)
			tt(tc);
		rig_ = std::make_unique<Rig>(std::move(tc));
		c_ = open_conn();
		ini_ = std::make_unique<Initiator>(*c_);
		InitiatorLoginConfig ic = Initiator::login_config();
		if (lt)
			lt(ic);
		std::string why;
		ASSERT_TRUE(ini_->login(ic, &why)) << why;
	}

	HarnessConn *open_conn()
	{
		conns_.push_back(std::make_unique<HarnessConn>(
		    *rig_->target, "192.0.2.1:" + std::to_string(50000 + conns_.size())));
		return conns_.back().get();
	}

	// Every test ends here: the connections torn down within the bound, then the target
	// idle (sessions reaped, the core's session and task set empty).
	void TearDown() override
	{
		std::string why;
		bool stuck = false;
		for (auto &c : conns_) {
			if (!c->teardown(kBound, &why)) {
				ADD_FAILURE() << "teardown: " << why;
				// Still attached and maybe called back: it must not be freed.
				(void)c.release();
				stuck = true;
			}
		}
		if (stuck) {
			(void)rig_.release();
			return;
		}
		if (rig_) {
			EXPECT_TRUE(rig_->wait_idle(kBound, &why)) << why;
		}
	}

	// The next PDU the target sent, decoded as H; a failure when there is none or it is
	// of another type. *pdu views it (valid for the test).
	template <class H> H expect(Pdu *pdu = nullptr)
	{
		H h{};
		const SentPdu *s = ini_->next();
		if (!s) {
			ADD_FAILURE() << "the target sent nothing more";
			return h;
		}
		Pdu p;
		if (!s->parse(&p)) {
			ADD_FAILURE() << "the target's PDU does not parse (digests?)";
			return h;
		}
		if (!decode(p.bhs, &h))
			ADD_FAILURE()
			    << "unexpected PDU, opcode 0x" << std::hex << int(p.bhs[0] & 0x3f);
		if (pdu)
			*pdu = p;
		return h;
	}
	// Nothing more from the target.
	void expect_nothing()
	{
		EXPECT_EQ(ini_->unread(), 0u) << "the target sent more than expected";
	}

	// A SCSI Command header with a new ITT and the next CmdSN (immediate: the CmdSN is
	// not advanced, 3.2.2.1).
	ScsiCmd cmd(const Cdb &cdb, bool read, bool write, uint32_t edtl, bool immediate = false)
	{
		ScsiCmd h;
		h.cdb = cdb;
		h.read = read;
		h.write = write;
		h.edtl = edtl;
		h.immediate = immediate;
		h.itt = ini_->new_itt();
		h.cmdsn = immediate ? ini_->cmdsn : ini_->cmdsn++;
		h.exp_statsn = ini_->exp_statsn;
		return h;
	}
	template <class H> void send(const H &h, std::span<const uint8_t> data = {})
	{
		Bhs b;
		encode(h, b);
		ini_->send(b, data);
	}
	void data_out(uint32_t itt, uint32_t ttt, uint32_t offset, uint32_t datasn,
	              std::span<const uint8_t> data, bool final)
	{
		DataOut d;
		d.itt = itt;
		d.ttt = ttt;
		d.buffer_offset = offset;
		d.datasn = datasn;
		d.final = final;
		d.exp_statsn = ini_->exp_statsn;
		send(d, data);
	}
	// A NOP-Out ping (immediate) and its NOP-In: the target's ExpCmdSN / MaxCmdSN now.
	NopIn ping()
	{
		NopOut n;
		n.itt = ini_->new_itt();
		n.cmdsn = ini_->cmdsn;
		send(n);
		NopIn r = expect<NopIn>();
		EXPECT_EQ(r.itt, n.itt);
		return r;
	}
	// The first command of a session gets POWER ON (SPC-4 5.14): take it.
	void clear_ua()
	{
		send(cmd(kTur, false, false, 0));
		Pdu p;
		ScsiRsp r = expect<ScsiRsp>(&p);
		EXPECT_EQ(r.status, 0x02);
		EXPECT_EQ(sense_of(p.data).key, 0x6);
	}
	// READ (10) of blocks at lba; the data, with the Data-In checks of 11.7.
	std::vector<uint8_t> read_back(uint32_t lba, uint16_t blocks)
	{
		ScsiCmd h = cmd(read10(lba, blocks), true, false, blocks * 512u);
		send(h);
		std::vector<uint8_t> out;
		for (;;) {
			Pdu p;
			DataIn d = expect<DataIn>(&p);
			if (d.itt != h.itt || d.buffer_offset != out.size()) {
				ADD_FAILURE() << "Data-In out of order";
				return out;
			}
			out.insert(out.end(), p.data.begin(), p.data.end());
			if (d.has_status || testing::Test::HasFailure()) {
				EXPECT_EQ(d.status, 0);
				break;
			}
		}
		return out;
	}

	std::unique_ptr<Rig> rig_;
	std::vector<std::unique_ptr<HarnessConn>> conns_;
	HarnessConn *c_ = nullptr;
	std::unique_ptr<Initiator> ini_;
};

} // namespace ulp::iscsi::conn_test
