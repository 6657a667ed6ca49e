// SPDX-License-Identifier: MIT
// providers/soft/cm_id.h - the soft provider's CM id and its event worker.
//
// States (transitions under CmGlobal::lock, asserted in cm.cc):
//   Idle -> Bound (bind_addr) -> Listening (listen)
//   Idle -> AddrResolved (resolve_addr) -> RouteResolved (resolve_route)
//        -> Connecting (connect) -> Connected (peer accepted) | Idle (rejected)
//   ReqRcvd (new passive id) -> Connected (accept) | Idle (reject)
//   Connected -> Disconnected (disconnect, peer disconnect, peer death)
#pragma once

#include "core/cm.h"
#include "providers/soft/soft_internal.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace ulp::soft
{

class SoftCmId;

// What an event in the worker's queue points at. id is cleared (under lock) when the
// id is destroyed, so events queued for it are dropped instead of delivered.
struct IdRef {
	std::mutex lock; // held while the id's handler runs
	SoftCmId *id = nullptr;
};

enum class CmState : uint8_t {
	Idle,
	Bound,
	Listening,
	AddrResolved,
	RouteResolved,
	Connecting,
	ReqRcvd,
	Connected,
	Disconnected,
};

class SoftCmId final : public CmId
{
public:
	SoftCmId(CmHandler h, void *ctx);
	~SoftCmId() override;

	int bind_addr(const SockAddr &addr) override;
	int resolve_addr(const SockAddr *src, const SockAddr &dst, int timeout_ms) override;
	int resolve_route(int timeout_ms) override;
	int listen(int backlog) override;
	int connect(const ConnParam &param) override;
	int accept(const ConnParam &param) override;
	int reject(std::span<const uint8_t> private_data) override;
	int disconnect() override;
	int create_qp(Pd &pd, const QpInitAttr &attr) override;
	void destroy_qp() override;

	// Everything below is under CmGlobal::lock.
	void post(CmEvent ev);    // queue an event for this id's handler
	void lost_peer();         // the peer went away: QP to ERR, DISCONNECTED
	void disconnect_locked(); // we end the connection
	void abandon_locked();    // we drop a half-made connection
	SoftQp *sqp() const { return static_cast<SoftQp *>(qp_.get()); }
	void set_device(Device *d) { device_ = d; }
	void set_local(const SockAddr &a) { local_ = a; }
	void set_peer_addr(const SockAddr &a) { peer_ = a; }

	CmHandler handler;
	std::shared_ptr<IdRef> ref;
	CmState st = CmState::Idle;
	SoftCmId *peer = nullptr;       // in-process partner
	SoftCmId *listener = nullptr;   // ReqRcvd: the listener the request came to
	std::string listen_key;         // Listening: key in the listener table
	ConnParam req;                  // the connect request's parameters
	std::shared_ptr<SockConn> sock; // socket wire: the connection
	uint32_t remote_qpn = 0;        // socket wire, ReqRcvd: the requester QP
	Gid remote_gid{};               // socket wire, ReqRcvd: its port GID
	int sock_listen_fd = -1;        // Listening: the abstract socket
};

struct CmGlobal {
	std::mutex lock; // every SoftCmId's state and the listener table
	std::map<std::string, SoftCmId *> listeners; // "ip:port" -> id
	// Every id alive (remove_device), under ids_lock: ids are made under lock, so ids_lock
	// nests inside it, never the other way.
	std::mutex ids_lock;
	std::set<SoftCmId *> ids;
	uint16_t next_port = 40000; // ephemeral ports for active ids
};
CmGlobal &cm_global();

// Which end of the connection a QP is: the one that connected, or the one that accepted.
enum class CmRole : uint8_t { Active, Passive };

// Move a connection's QP to RTS, pointed at its peer. req is the connect request's
// parameters, rep the accept's. READ credits follow IB CM (ib_cm_init_qp_attr): the
// passive QP takes the accept's values as they are (max_dest_rd_atomic =
// rep.responder_resources, max_rd_atomic = rep.initiator_depth), and the active QP takes
// the accept's values crossed (max_rd_atomic = rep.responder_resources, max_dest_rd_atomic
// = rep.initiator_depth). Zero stays zero: a QP with no READ credit never issues a READ.
// Retry counts are each side's own. For the socket wire conn is set on qp.
int cm_connect_qp(SoftQp &qp, CmRole role, const ConnParam &req, const ConnParam &rep,
                  uint32_t dest_qpn, const Gid &dgid);

// A connection's parameters as the other end's CM event reports them: IB CM exchanges
// READ credits in the sender's terms and hands them to the receiver crossed
// (cm_format_req_event, cm_format_rep_event), so that a passive side can answer with
// min(its own limit, event value) for each field directly.
ConnParam cm_peer_view(const ConnParam &p);

} // namespace ulp::soft
