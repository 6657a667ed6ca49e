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
#include <string>

namespace ulp::iscsi::target
{

class Conn;

class Session
{
public:
	Session(Target &t, const SessionParams &p, const TargetNode *node)
	    : target(t), params(p), node(node)
	{
	}

	Target &target;
	SessionParams params;        // as negotiated by the leading login (TSIH set)
	const TargetNode *node;      // null for discovery sessions
	scsi::Nexus *scsi = nullptr; // the I_T nexus; null for discovery sessions
	Conn *conn = nullptr;        // its connection; null once it has gone (reaper)
	std::string initiator_port;  // TransportID text: "<InitiatorName>,i,0x<ISID>"
	bool closing = false;        // handed to the reaper (Target::lock_)
};

// SPC-4 7.6.4.6: the iSCSI initiator port name, "<iSCSI name>,i,0x<ISID in hex>".
std::string initiator_port_name(const std::string &initiator, const Isid &isid);

} // namespace ulp::iscsi::target
