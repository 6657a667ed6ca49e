// SPDX-License-Identifier: MIT
// tools/ulp-stress/nexus.h - one logged-in I_T nexus over any of the three transports, as
// ulp-initiator's Disk (tools/ulp-initiator/disk.h): an iSCSI session over TCP or iSER, or
// an SRP initiator (tools/ulp-initiator/srp_session.h) with its channels. Each worker
// thread of ulp-stress owns its own; the RDMA ones share the process's device.
#pragma once

#include "iscsi/initiator/session.h"
#include "iser/initiator/initiator.h"
#include "tools/ulp-initiator/disk.h"
#include "tools/ulp-initiator/srp_session.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace stress
{

enum class Transport : uint8_t { Tcp, Iser, Srp };
const char *transport_name(Transport t);
bool transport_from_name(const std::string &s, Transport *out);

// Where the target is, for every transport.
struct Endpoint {
	std::string host = "127.0.0.1";
	uint16_t tcp_port = 0;   // iSCSI/TCP portal
	uint16_t iser_port = 0;  // iSER portal
	uint16_t srp_port = 0;   // SRP portal
	std::string target;      // the iSCSI target name (iSCSI transports)
	std::string srp_target;  // an add_target line; empty: the device's node GUID (default)
	std::string rdma_device; // the device name the RDMA transports use (the shared soft one)
	std::string src_ip;      // our address on it ("" = the device's)
};

// Who logs in: each worker has its own identity so the target's listings tell them apart.
struct Identity {
	std::string initiator_name;     // iSCSI InitiatorName
	uint64_t srp_initiator_ext = 1; // SRP: the initiator port id's high half
	uint32_t srp_channels = 1;      // SRP: channels of the nexus
	uint32_t qd = 8;                // commands in flight at most
	uint32_t max_io = 64 * 1024;    // bytes per command at most
	std::chrono::milliseconds cmd_timeout{10000};
};

// The initiator port id prefix ulp-targetd's session_list shows for an SRP identity
// ("0x" + the 16 hex digits of initiator_ext): its "initiator_port" starts with it.
std::string srp_port_prefix(uint64_t initiator_ext);

class Nexus
{
public:
	~Nexus();
	Nexus(const Nexus &) = delete;
	Nexus &operator=(const Nexus &) = delete;

	// Log in. nullptr + *why when refused or unreachable.
	static std::unique_ptr<Nexus> login(Transport t, const Endpoint &ep, const Identity &id,
	                                    std::string *why);
	initiator::Disk &disk() { return *disk_; }
	// Log out (bounded by the initiators' own drain bounds). True when the target took it.
	bool logout();
	// Failed (connection lost, taken over): error() says why.
	bool failed() const;
	std::string error() const;
	Transport transport() const { return t_; }
	// Commands the target's limit held back so far: iSCSI's that waited for the CmdSN
	// window, SRP's submits refused for want of a credit (zero_req_lim).
	uint64_t held_back() const;

private:
	Nexus() = default;
	Transport t_ = Transport::Tcp;
	ulp::iser::InitiatorConfig xc_;                     // iSER: the transport's settings
	std::unique_ptr<ulp::iscsi::initiator::Session> s_; // iSCSI (TCP, iSER)
	std::unique_ptr<initiator::SrpSession> srp_;        // SRP
	std::unique_ptr<initiator::IscsiDisk> idisk_;       // s_ as a Disk
	initiator::Disk *disk_ = nullptr;                   // the one in use
};

} // namespace stress
