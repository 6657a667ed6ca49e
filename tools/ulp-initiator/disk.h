// SPDX-License-Identifier: MIT
// tools/ulp-initiator/disk.h - what the workload drives: SCSI commands to the LUNs of one
// logged-in I_T nexus, whatever carries them. An iSCSI session (TCP or iSER) and an SRP
// initiator (its channels) are two Disks; the workload (workload.h) knows neither.
//
// The currency is the iSCSI initiator's ScsiRequest / ScsiResult (the richer of the two:
// an SRP result maps into it field for field, with response 0).
#pragma once

#include "iscsi/initiator/session.h"

#include <chrono>
#include <functional>
#include <string>

namespace ulp::srpt
{
class Initiator;
}

namespace initiator
{

using ulp::iscsi::initiator::ScsiRequest;
using ulp::iscsi::initiator::ScsiResult;
using DiskCallback = std::function<void(const ScsiResult &)>;

class Disk
{
public:
	virtual ~Disk() = default;
	// Send a command; cb runs from poll() once it has ended. 0; -EBUSY: no credit or slot
	// now (poll, then retry); another negative errno: it cannot be sent (last_error()).
	virtual int submit(const ScsiRequest &req, DiskCallback cb) = 0;
	// Run completions and callbacks, sleeping up to timeout when there is nothing to do.
	// Negative once the nexus is gone and nothing more will complete.
	virtual int poll(std::chrono::milliseconds timeout) = 0;
	// submit + poll until the command ends (bounded by the transport's command timeout).
	virtual ScsiResult run(const ScsiRequest &req) = 0;
	virtual std::string error() const = 0;      // why the nexus failed
	virtual std::string last_error() const = 0; // why the last submit was refused
	virtual bool target_requested_logout() const { return false; }
};

// An iSCSI session (logged in) as a Disk.
class IscsiDisk final : public Disk
{
public:
	explicit IscsiDisk(ulp::iscsi::initiator::Session &s) : s_(s) {}
	int submit(const ScsiRequest &req, DiskCallback cb) override;
	int poll(std::chrono::milliseconds timeout) override { return s_.poll(timeout); }
	ScsiResult run(const ScsiRequest &req) override { return s_.run(req); }
	std::string error() const override { return s_.error(); }
	std::string last_error() const override { return s_.last_error(); }
	bool target_requested_logout() const override { return s_.target_requested_logout(); }

private:
	ulp::iscsi::initiator::Session &s_;
};

// An SRP initiator (logged in, every channel) as a Disk.
class SrpDisk final : public Disk
{
public:
	explicit SrpDisk(ulp::srpt::Initiator &in) : in_(in) {}
	int submit(const ScsiRequest &req, DiskCallback cb) override;
	int poll(std::chrono::milliseconds timeout) override;
	ScsiResult run(const ScsiRequest &req) override;
	std::string error() const override;
	std::string last_error() const override { return last_error_; }

private:
	ulp::srpt::Initiator &in_;
	std::string last_error_;
};

} // namespace initiator
