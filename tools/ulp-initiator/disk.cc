// SPDX-License-Identifier: MIT
// tools/ulp-initiator/disk.cc - the two Disks (see disk.h).
#include "tools/ulp-initiator/disk.h"

#include "srp/initiator/initiator.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace initiator
{

using namespace ulp;
using ulp::iscsi::initiator::TaskOutcome;

int IscsiDisk::submit(const ScsiRequest &req, DiskCallback cb)
{
	return s_.submit(req, std::move(cb)) == ulp::iscsi::kReservedTag ? -EINVAL : 0;
}

namespace
{

srpt::Request srp_request(const ScsiRequest &r)
{
	srpt::Request q;
	q.lun = r.lun;
	q.cdb = r.cdb;
	q.data = r.data;
	q.dir = r.dir == ulp::iscsi::initiator::DataDir::Write  ? srpt::DataDir::Write
	        : r.dir == ulp::iscsi::initiator::DataDir::Read ? srpt::DataDir::Read
	                                                        : srpt::DataDir::None;
	return q;
}

ScsiResult scsi_result(const srpt::Result &r)
{
	ScsiResult s;
	switch (r.outcome) {
	case srpt::Outcome::Completed:
		s.outcome = TaskOutcome::Completed;
		break;
	case srpt::Outcome::Aborted:
		s.outcome = TaskOutcome::Aborted;
		break;
	case srpt::Outcome::ConnectionLost:
		s.outcome = TaskOutcome::ConnectionLost;
		break;
	case srpt::Outcome::Timeout:
		s.outcome = TaskOutcome::Timeout;
		break;
	case srpt::Outcome::Cancelled:
		s.outcome = TaskOutcome::Cancelled;
		break;
	}
	s.status = r.status;
	s.underflow = r.underflow;
	s.overflow = r.overflow;
	s.residual = r.residual;
	s.sense_len = std::min<uint16_t>(r.sense_len, uint16_t(r.sense.size()));
	std::memcpy(s.sense.data(), r.sense.data(), s.sense_len);
	return s;
}

} // namespace

int SrpDisk::submit(const ScsiRequest &req, DiskCallback cb)
{
	const int rc = in_.submit(
	    srp_request(req), [cb = std::move(cb)](const srpt::Result &r) { cb(scsi_result(r)); });
	if (rc != 0 && rc != -EBUSY)
		last_error_ =
		    std::strerror(-rc) + (in_.failed() ? ": " + in_.error() : std::string());
	return rc;
}

int SrpDisk::poll(std::chrono::milliseconds timeout)
{
	return in_.poll(timeout);
}

ScsiResult SrpDisk::run(const ScsiRequest &req)
{
	return scsi_result(in_.run(srp_request(req)));
}

std::string SrpDisk::error() const
{
	return in_.error();
}

} // namespace initiator
