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

enum class CmEventType : uint8_t {
	AddrResolved,
	AddrError,
	RouteResolved,
	RouteError,
	ConnectRequest,
	ConnectError,
	Unreachable, // no listener at the address, or no answer
	Rejected,    // the peer rejected; private data holds its reason
	Established,
	Disconnected,
	DeviceRemoval,
	TimewaitExit,
};

const char *cm_event_str(CmEventType t);

// rdma_conn_param. Private data is copied in and out; its limits are those of IB CM
// (REQ 56 bytes for RDMA/CM over IB, REP 196, REJ 148) and are enforced as such.
struct ConnParam {
	static constexpr size_t kMaxPrivateData = 196;
	std::array<uint8_t, kMaxPrivateData> private_data{};
	uint8_t private_data_len = 0;
	uint8_t responder_resources = 1; // READs we accept in flight (max_dest_rd_atomic)
	uint8_t initiator_depth = 1;     // READs we initiate in flight (max_rd_atomic)
	uint8_t retry_count = 7;
	uint8_t rnr_retry_count = 7; // 7 = infinite

	void set_private_data(std::span<const uint8_t> d);
	std::span<const uint8_t> pdata() const { return {private_data.data(), private_data_len}; }
};

constexpr size_t kCmReqPrivateDataMax = 56;  // RDMA/CM REQ over IB (rdma_cm adds its header)
constexpr size_t kCmRepPrivateDataMax = 196; // REP
constexpr size_t kCmRejPrivateDataMax = 148; // REJ

class CmId;

struct CmEvent {
	CmEventType event = CmEventType::AddrError;
	int status = 0;               // 0 or a negative errno (reject: the peer's reason)
	ConnParam param;              // ConnectRequest / Established / Rejected: peer's data
	std::unique_ptr<CmId> new_id; // ConnectRequest: the new connection's id; take it
	CmId *listen_id = nullptr;    // ConnectRequest: the listener it arrived on
};

using CmHandler = std::function<void(CmId *id, CmEvent &ev)>;

class CmId
{
public:
	virtual ~CmId() = default;
	CmId(const CmId &) = delete;
	CmId &operator=(const CmId &) = delete;

	void *context = nullptr;

	virtual int bind_addr(const SockAddr &addr) = 0;
	virtual int resolve_addr(const SockAddr *src, const SockAddr &dst, int timeout_ms) = 0;
	virtual int resolve_route(int timeout_ms) = 0;
	virtual int listen(int backlog) = 0;
	virtual int connect(const ConnParam &param) = 0;
	virtual int accept(const ConnParam &param) = 0;
	virtual int reject(std::span<const uint8_t> private_data) = 0;
	virtual int disconnect() = 0;

	// rdma_create_qp: a QP on the id's device, moved through INIT/RTR/RTS by the CM as
	// the connection is established. The id owns it until destroy_qp or destruction.
	virtual int create_qp(Pd &pd, const QpInitAttr &attr) = 0;
	virtual void destroy_qp() = 0;

	Qp *qp() const { return qp_.get(); }
	Device *device() const { return device_; } // set once the address is bound/resolved
	const SockAddr &local_addr() const { return local_; }
	const SockAddr &peer_addr() const { return peer_; }

protected:
	CmId() = default;
	std::unique_ptr<Qp> qp_;
	Device *device_ = nullptr;
	SockAddr local_;
	SockAddr peer_;
};

} // namespace ulp
