// SPDX-License-Identifier: MIT
// core/cm.h - connection management shaped like rdma_cm (include/rdma/rdma_cm.h).
//
// An active side: create_id, resolve_addr, resolve_route, create_qp, connect; events
// AddrResolved, RouteResolved, Established (or Rejected / Unreachable), Disconnected.
// A passive side: create_id, bind_addr, listen; each ConnectRequest event carries a new id
// (CmEvent::new_id) that the handler takes ownership of, creates a QP on, and accepts or
// rejects. An id the handler leaves in the event is rejected and destroyed by the CM.
//
// Events for one id are delivered one at a time on a CM thread of the provider. A handler
// must not destroy the id it is called for (the destructor waits for the handler, as
// rdma_destroy_id does); it may call any other method, including disconnect.
#pragma once

#include "core/addr.h"
#include "core/device.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

namespace ulp
{

// A CM event's type (rdma_cm_event_type).
enum class CmEventType : uint8_t {
	AddrResolved,   // resolve_addr succeeded: the id has its device
	AddrError,      // resolve_addr failed
	RouteResolved,  // resolve_route succeeded: create_qp and connect may follow
	RouteError,     // resolve_route failed
	ConnectRequest, // passive side: a peer connects (CmEvent::new_id)
	ConnectError,   // the connection failed while being set up
	Unreachable,    // no listener at the address, or no answer
	Rejected,       // the peer rejected; private data holds its reason
	Established,    // both sides are connected; the QP is in RTS
	Disconnected,   // either side disconnected; the QP is in ERR
	DeviceRemoval,  // the id's device is going away: release everything on it
	TimewaitExit,   // the connection's QP number may be reused
};

// The event's name for log lines ("address resolved").
const char *cm_event_str(CmEventType t);

// rdma_conn_param. Private data is copied in and out; its limits are those of IB CM
// (REQ 56 bytes for RDMA/CM over IB, REP 196, REJ 148) and are enforced as such.
struct ConnParam {
	static constexpr size_t kMaxPrivateData = 196; // the largest (REP) private data, bytes
	std::array<uint8_t, kMaxPrivateData> private_data{}; // the first private_data_len count
	uint8_t private_data_len = 0;                        // bytes of private_data in use
	uint8_t responder_resources = 1; // READs we accept in flight (max_dest_rd_atomic)
	uint8_t initiator_depth = 1;     // READs we initiate in flight (max_rd_atomic)
	uint8_t retry_count = 7;         // transport retries (QpAttr::retry_cnt)
	uint8_t rnr_retry_count = 7;     // 7 = infinite

	// Copy d in (at most kMaxPrivateData bytes; the rest is zeroed).
	void set_private_data(std::span<const uint8_t> d);
	// The private data in use.
	std::span<const uint8_t> pdata() const { return {private_data.data(), private_data_len}; }
};

constexpr size_t kCmReqPrivateDataMax = 56;  // RDMA/CM REQ over IB (rdma_cm adds its header)
constexpr size_t kCmRepPrivateDataMax = 196; // REP
constexpr size_t kCmRejPrivateDataMax = 148; // REJ

class CmId;

// A CM event as a CmHandler receives it (rdma_cm_event).
struct CmEvent {
	CmEventType event = CmEventType::AddrError; // what happened
	int status = 0;               // 0 or a negative errno (reject: the peer's reason)
	ConnParam param;              // ConnectRequest / Established / Rejected: peer's data
	std::unique_ptr<CmId> new_id; // ConnectRequest: the new connection's id; take it
	CmId *listen_id = nullptr;    // ConnectRequest: the listener it arrived on
};

// A CM id's event callback: one event at a time per id, on a CM thread of the provider.
using CmHandler = std::function<void(CmId *id, CmEvent &ev)>;

// A connection manager id (rdma_cm_id): one listener, or one connection and its QP. Made by
// Provider::create_id. Every call returns 0 or a negative errno; the outcome of those that
// start something (resolve_addr, resolve_route, connect, accept) comes as a later event.
class CmId
{
public:
	virtual ~CmId() = default;
	CmId(const CmId &) = delete;
	CmId &operator=(const CmId &) = delete;

	void *context = nullptr; // the owner's

	// rdma_bind_addr: take addr (port 0: the provider picks) and its device.
	virtual int bind_addr(const SockAddr &addr) = 0;
	// rdma_resolve_addr: the device to reach dst from (from src when given): AddrResolved,
	// or AddrError, within timeout_ms.
	virtual int resolve_addr(const SockAddr *src, const SockAddr &dst, int timeout_ms) = 0;
	// rdma_resolve_route: RouteResolved or RouteError within timeout_ms.
	virtual int resolve_route(int timeout_ms) = 0;
	// rdma_listen: ConnectRequest events for connections to the bound address, at most
	// backlog of them not yet accepted or rejected.
	virtual int listen(int backlog) = 0;
	// rdma_connect: with the QP made by create_qp; Established, Rejected, Unreachable or
	// ConnectError follows.
	virtual int connect(const ConnParam &param) = 0;
	// rdma_accept: on a ConnectRequest's new id with its QP; Established follows.
	virtual int accept(const ConnParam &param) = 0;
	// rdma_reject: refuse a ConnectRequest with private_data as the reason.
	virtual int reject(std::span<const uint8_t> private_data) = 0;
	// rdma_disconnect: the QP to ERR and a Disconnected event at both ends. 0 when already
	// disconnected; -EINVAL when not connected.
	virtual int disconnect() = 0;

	// rdma_create_qp: a QP on the id's device, moved through INIT/RTR/RTS by the CM as
	// the connection is established. The id owns it until destroy_qp or destruction.
	virtual int create_qp(Pd &pd, const QpInitAttr &attr) = 0;
	// rdma_destroy_qp: the QP goes (drain it first).
	virtual void destroy_qp() = 0;

	Qp *qp() const { return qp_.get(); }       // the QP made by create_qp, or null
	Device *device() const { return device_; } // set once the address is bound/resolved
	const SockAddr &local_addr() const { return local_; } // bound or resolved, with port
	const SockAddr &peer_addr() const { return peer_; }   // the other end, once known

protected:
	CmId() = default;
	std::unique_ptr<Qp> qp_;   // made by create_qp
	Device *device_ = nullptr; // set by bind_addr or resolve_addr
	SockAddr local_;           // this end's address
	SockAddr peer_;            // the other end's address
};

} // namespace ulp
