// SPDX-License-Identifier: MIT
// tests/core/test_objects.h - minimal Device/Pd/Mr carriers for core unit tests.
//
// The core classes have protected constructors; these subclasses only make them
// constructible. They implement no verbs behaviour: the code under test (event dispatch,
// the registry, Mr::map_sg, BufPool) lives in core/ and runs unchanged on top of them.
#pragma once

#include "core/device.h"

#include <atomic>
#include <cerrno>
#include <memory>
#include <string>

namespace ulp::test
{

class TestMr : public Mr
{
public:
	TestMr(Pd &pd, uint32_t lkey, uint32_t rkey, uint64_t iova, uint64_t length,
	       uint32_t max_num_sg)
	    : Mr(pd, lkey, rkey, iova, length, max_num_sg)
	{
	}
};

class TestPd : public Pd
{
public:
	explicit TestPd(Device &dev) : Pd(dev) {}

	// Distinct keys per MR, and lkey != rkey, so that a test catches one used for the other.
	std::unique_ptr<Mr> reg_mr(void *addr, size_t length, uint32_t access) override
	{
		if (fail_reg) {
			errno = EFAULT;
			return nullptr;
		}
		uint32_t idx = next_++;
		return std::make_unique<TestMr>(*this, idx << 8 | 0x11,
		                                (idx | 0x800000) << 8 | 0x22,
		                                reinterpret_cast<uintptr_t>(addr), length, 0);
	}
	std::unique_ptr<Mr> alloc_mr(uint32_t max_num_sg) override
	{
		uint32_t idx = next_++;
		return std::make_unique<TestMr>(*this, idx << 8, idx << 8, 0, 0, max_num_sg);
	}
	std::unique_ptr<Qp> create_qp(const QpInitAttr &) override { return nullptr; }
	std::unique_ptr<Srq> create_srq(const SrqInitAttr &) override { return nullptr; }

	bool fail_reg = false; // reg_mr fails with EFAULT

private:
	std::atomic<uint32_t> next_{1};
};

class TestDevice : public Device
{
public:
	explicit TestDevice(std::string name, DeviceAttr attr = {})
	    : Device(std::move(name), attr, NodeType::Ca, Gid{})
	{
	}
	int query_port(uint8_t, PortAttr *attr) override
	{
		*attr = PortAttr{};
		return 0;
	}
	std::unique_ptr<Pd> alloc_pd() override { return std::make_unique<TestPd>(*this); }
	std::unique_ptr<CompChannel> create_comp_channel() override { return nullptr; }
	std::unique_ptr<Cq> create_cq(const CqInitAttr &) override { return nullptr; }

	// dispatch_event is for providers; this is the test's provider.
	void fire(const AsyncEvent &ev) { dispatch_event(ev); }
};

} // namespace ulp::test
