// SPDX-License-Identifier: MIT
// tests/conformance/fixture.h - gtest fixtures of the conformance suite.
//
// Conformance: a test with a connection. SetUp forks the peer first on cross-process fabrics
// (before this process creates a device, i.e. before any provider thread exists); the
// test then calls CONNECT(local_cfg, peer_cfg) and drives local() directly through core/
// and peer() by commands.
//
// ConformanceLocal: device-local tests (state machine, CQs, attributes) that have no peer; they
// run on the fabrics without a child process.
#pragma once

#include "tests/conformance/env.h"
#include "tests/conformance/peer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace ulp::conf
{

class Conformance : public ::testing::TestWithParam<std::string>
{
protected:
	void SetUp() override
	{
		fab_ = &fabric(GetParam());
		if (fab_->xproc) {
			peer_ = spawn_xproc_peer(*fab_);
			ASSERT_TRUE(peer_) << "fork failed";
		}
	}

	void TearDown() override
	{
		// The local endpoint first: its CM id and QP go before the device.
		local_.reset();
		if (peer_) {
			int rc = peer_->shutdown();
			if (peer_->remote() && !peer_killed_) {
				EXPECT_EQ(rc, 0) << "peer process did not exit cleanly";
			}
			peer_.reset();
		}
		close_device(*fab_, dev_);
		dev_ = nullptr;
	}

	// Open this side's device (side 0). Skips the test when the fabric has none.
	void open_local(bool iwarp = false)
	{
		std::string why;
		dev_ = open_device(*fab_, {0, iwarp}, &why);
		if (!dev_)
			GTEST_SKIP() << why;
	}

	// The peer listens with peer_cfg, the local endpoint connects with local_cfg.
	void connect(const EpConfig &local_cfg = {}, const EpConfig &peer_cfg = {},
	             bool iwarp = false)
	{
		if (!dev_) {
			open_local(iwarp);
			if (IsSkipped())
				return;
		}
		if (!peer_)
			peer_ = make_inproc_peer(*fab_);
		SockAddr addr;
		int err = peer_->listen(peer_cfg, iwarp, &addr);
		if (err == -ENODEV)
			GTEST_SKIP() << "no peer device on " << fab_->name;
		ASSERT_EQ(err, 0) << "peer listen";
		local_ = std::make_unique<Endpoint>(*fab_, dev_, 0);
		ASSERT_EQ(local_->setup(local_cfg), 0);
		ASSERT_EQ(local_->connect(addr), 0) << "connect to " << addr.str();
		ASSERT_EQ(peer_->wait_cm_event(CmEventType::Established, kTimeoutMs), 0);
		ASSERT_NE(local_->qp(), nullptr);
		ASSERT_EQ(local_->qp()->state(), QpState::Rts);
		// Each soft fabric tests the wire it names (the ring wire across processes by
		// default, not a silent fallback to packets).
		std::string wire;
		if (qp_wire(*fab_, *local_->qp(), &wire)) {
			ASSERT_EQ(wire, fab_->soft_wire) << "the connection runs on another wire";
		}
	}

	Endpoint &local() { return *local_; }
	Peer &peer() { return *peer_; }
	Qp &qp() { return *local_->qp(); }
	Device &dev() { return *dev_; }
	const FabricDesc &fab() const { return *fab_; }
	// The device is Soft-RoCE (rxe): a few error statuses differ from the IB spec there,
	// each one written up where a test accepts it. The soft provider must give the spec's.
	bool rxe() const { return fab_->provider == "verbs" && dev_->name().rfind("rxe", 0) == 0; }

	std::vector<WcInfo> local_wcs(int n, int ms = kTimeoutMs)
	{
		std::vector<WcInfo> v;
		local_->poll(n, ms, &v);
		return v;
	}
	std::vector<WcInfo> peer_wcs(int n, int ms = kTimeoutMs)
	{
		std::vector<WcInfo> v;
		int r = peer_->poll(n, ms, &v);
		EXPECT_GE(r, 0) << "peer poll";
		return v;
	}

	// Poll the peer's QP state until it is s (responder-side errors reach the QP
	// asynchronously) or the timeout passes; returns the last state seen.
	QpState peer_state_becomes(QpState s, int ms = kTimeoutMs)
	{
		auto d = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
		QpState st = QpState::Reset;
		for (;;) {
			if (peer_->qp_state(&st))
				return st;
			if (st == s || std::chrono::steady_clock::now() >= d)
				return st;
			progress_all();
			std::this_thread::sleep_for(std::chrono::milliseconds(1));
		}
	}
	QpState local_state_becomes(QpState s, int ms = kTimeoutMs)
	{
		auto d = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
		for (;;) {
			QpState st = local_->qp_state();
			if (st == s || std::chrono::steady_clock::now() >= d)
				return st;
			progress_all();
			std::this_thread::sleep_for(std::chrono::milliseconds(1));
		}
	}

	const FabricDesc *fab_ = nullptr;
	Device *dev_ = nullptr;
	std::unique_ptr<Endpoint> local_;
	std::unique_ptr<Peer> peer_;
	bool peer_killed_ = false;
};

class ConformanceLocal : public Conformance
{
};

// Every access a peer needs to WRITE into and READ from a region.
inline constexpr uint32_t kRemoteAll =
    ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;

// gtest parameter names: "soft-inproc" -> "soft_inproc".
inline std::string fabric_param_name(const ::testing::TestParamInfo<std::string> &i)
{
	std::string s = i.param;
	for (auto &c : s)
		if (c == '-')
			c = '_';
	return s;
}

// Stop the test when a helper failed or skipped.
#define CONNECT(...)                                                                               \
	do {                                                                                       \
		connect(__VA_ARGS__);                                                              \
		if (HasFatalFailure() || IsSkipped())                                              \
			return;                                                                    \
	} while (0)

#define OPEN_LOCAL(...)                                                                            \
	do {                                                                                       \
		open_local(__VA_ARGS__);                                                           \
		if (HasFatalFailure() || IsSkipped())                                              \
			return;                                                                    \
	} while (0)

inline PostSend send_op(WrOpcode op, uint32_t wr_id, int mr, uint64_t off, uint32_t len)
{
	PostSend ps;
	ps.opcode = op;
	ps.wr_id = wr_id;
	ps.mr = mr;
	ps.offset = off;
	ps.length = len;
	return ps;
}

inline PostSend rdma_op(WrOpcode op, uint32_t wr_id, int mr, uint64_t off, uint32_t len,
                        uint64_t raddr, uint32_t rkey)
{
	PostSend ps = send_op(op, wr_id, mr, off, len);
	ps.remote_addr = raddr;
	ps.rkey = rkey;
	return ps;
}

} // namespace ulp::conf
