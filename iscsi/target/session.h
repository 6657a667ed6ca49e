// SPDX-License-Identifier: MIT
// iscsi/target/session.h - an iSCSI session (RFC 7143 3.4): its identity (initiator name, ISID,
// TSIH), its negotiated parameters, its SCSI I_T nexus, and its command numbering window.
//
// A session has one connection here (MaxConnections=1 is what the target offers), so the
// window is kept by that connection on its own thread; the session object outlives the
// connection only while the reaper closes it.
#pragma once

#include "iscsi/params.h"
#include "iscsi/target/target.h"
#include "scsi/tpg.h"

#include <cstdint>
#include <memory>
#include <string>

namespace ulp::iscsi::target
{

class Conn;

class Session
{
public:
	Session(Target &t, const SessionParams &p, std::shared_ptr<const TargetNode> node)
	    : target(t), params(p), node(std::move(node))
	{
	}

	Target &target;
	SessionParams params; // as negotiated by the leading login (TSIH set)
	// Its target node as it was at login (kept while the session lives, also once the node
	// is changed or removed); null for discovery sessions.
	std::shared_ptr<const TargetNode> node;
	scsi::Nexus *scsi = nullptr;   // the I_T nexus; null for discovery sessions (set under
	                               // Target::lock_)
	Conn *conn = nullptr;          // its connection; null once it has gone (reaper)
	std::string initiator_port;    // TransportID text: "<InitiatorName>,i,0x<ISID>"
	bool closing = false;          // handed to the reaper (Target::lock_)
	bool full_feature = false;     // the login completed (Target::lock_)
	ConnParams conn_params;        // its connection's values, once full_feature (Target::lock_)
	bool logout_requested = false; // the administrator asked it to log out (Target::lock_)
};

// SPC-4 7.6.4.6: the iSCSI initiator port name, "<iSCSI name>,i,0x<ISID in hex>".
std::string initiator_port_name(const std::string &initiator, const Isid &isid);

} // namespace ulp::iscsi::target
