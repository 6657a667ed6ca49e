// SPDX-License-Identifier: MIT
// tools/ulp-initiator/srp_session.h - ulp-initiator's SRP transport: the arguments that
// name an SRP target port (as Linux's add_target takes them), the device, the registered
// I/O arena, the srpt::Initiator logged in over every channel, and its Disk.
#pragma once

#include "core/dma_mem.h"
#include "srp/initiator/initiator.h"
#include "tools/ulp-initiator/disk.h"

#include <memory>
#include <span>
#include <string>

namespace ulp
{
class Device;
}

namespace initiator
{

struct SrpArgs {
	std::string add_target;          // an add_target line: id_ext=..,ioc_guid=..,dest=..
	std::string id_ext, ioc_guid;    // hex; override the line's
	std::string initiator_ext = "1"; // hex: the initiator port id's high half
	uint32_t channels = 1;           // RDMA channels of the nexus (Linux's ch_count)
	bool allow_ext_sg = true;        // descriptor tables beyond the IU (Linux's option)
};

class SrpSession
{
public:
	SrpSession() = default;
	~SrpSession();
	SrpSession(const SrpSession &) = delete;
	SrpSession &operator=(const SrpSession &) = delete;

	// Check the arguments and make the device and the I/O arena (qd buffers of bs bytes:
	// *arena). portal: HOST[:PORT] (port 5555, Linux's tests' choice, when not given), or
	// empty when the add_target line names dest. false + *why: a bad command line.
	bool configure(const SrpArgs &a, const std::string &portal, const std::string &rdma_device,
	               const std::string &src_ip, uint32_t qd, uint32_t bs, double cmd_timeout,
	               std::span<uint8_t> *arena, std::string *why);
	// Log every channel in. false + *why: refused or unreachable.
	bool login(std::string *why);
	Disk &disk() { return *disk_; }
	bool logout();             // I_LOGOUT on every channel; true when all went out
	std::string where() const; // "id_ext:ioc_guid at HOST:PORT"
	std::string stats_text() const;
	std::string stats_json() const; // "\"srp\": {...}"

private:
	ulp::srpt::InitiatorConfig cfg_;
	uint32_t channels_ = 0;   // channels logged in (the stats are printed after logout)
	bool guessed_id_ = false; // the target port id is our device's node GUID (none given)
	std::string dest_;
	ulp::Device *soft_dev_ = nullptr;
	std::unique_ptr<ulp::DmaRegion> arena_;
	std::unique_ptr<ulp::srpt::Initiator> in_;
	std::unique_ptr<SrpDisk> disk_;
};

} // namespace initiator
