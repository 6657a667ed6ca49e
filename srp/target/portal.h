// SPDX-License-Identifier: MIT
// srp/target/portal.h - an SRP target portal: an RDMA/CM listener (rdma::Portal) whose connect
// requests are SRP logins (the kernel's srpt_cm_req_recv, over RDMA/CM only: SRP has no
// well-known port; Linux's tests use 5555).
//
// A login (srp_login_req_rdma, 56 bytes of private data; the IB CM's 64-byte
// SRP_LOGIN_REQ is taken too) is checked in this order, each failure answered with
// SRP_LOGIN_REJ in the reject's private data and a log line:
//   private data too short or not a login             UNABLE_ESTABLISH_CHANNEL
//   target_port_id not id_ext ‖ ioc_guid              UNABLE_ASSOCIATE_CHANNEL
//   req_it_iu_len below 64 or above max_it_iu_len     IT_IU_LEN_TOO_LARGE
//   neither direct nor indirect descriptors offered   UNSUPPORTED_DESC_FMT
//   the initiator refused by the ACLs                 UNABLE_ESTABLISH_CHANNEL
//   MULTI beyond max_channels on the nexus            CHANNEL_LIMIT_REACHED
//   no resources for the channel (QP, rings)          INSUFFICIENT_RESOURCES
// and otherwise accepted with SRP_LOGIN_RSP in the accept's private data: req_lim_delta the
// receives granted, max_it_iu_len the initiator's own (what the receive buffers are sized
// for), max_ti_iu_len the largest IU we send (an SRP_RSP with full sense), both descriptor
// formats, the multichannel outcome, and immediate data when asked for with an offset of
// at least 48 (SRP-2), on SRQ channels too.
//
// With TargetConfig::use_srq, each device the portal serves gets one SRQ of srq_size
// receives of max_it_iu_len bytes, shared by its channels.
#pragma once

#include "rdma_conn/portal.h"
#include "srp/target/channel.h"
#include "srp/target/target.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ulp::srpt
{

class Portal final : public rdma::Portal
{
public:
	Portal(Target &target, Provider &provider);
	// Stops (stop()) first. Call Target::stop before: its channels are gone then.
	~Portal() override;

	// rdma::Portal::listen, then: the target's identifiers default to this device's node
	// GUID if still unset, and the add_target line a Linux initiator needs is logged.
	int listen(const SockAddr &addr, std::string *why);

	Target &target() { return target_; }

	// The device's SRQ (use_srq), made on first use, and how its channels share it. Null
	// and *why when it cannot be.
	Srq *srq(rdma::DeviceRes &res, SrqShare **share, std::string *why);

protected:
	std::unique_ptr<rdma::PortalConn> on_connect_request(CmEvent &ev, rdma::DeviceRes &res,
	                                                     ConnParam *accept,
	                                                     std::vector<uint8_t> *reject) override;
	void accept_failed(rdma::PortalConn *c, int rc) override;
	void release_device(rdma::DeviceRes &res) override;

private:
	struct SrqRes {
		std::unique_ptr<Srq> srq;
		rdma::RecvRing<RecvIoctx> ring; // its receive buffers
		SrqShare share;                 // its receives and the channels on it
	};

	Target &target_;
	std::mutex lock_; // guards srqs_
	std::map<Device *, std::unique_ptr<SrqRes>> srqs_;
};

} // namespace ulp::srpt
