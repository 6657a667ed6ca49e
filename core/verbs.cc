// SPDX-License-Identifier: MIT
// core/verbs.cc - names for the verbs enums (for logs) and the RNR timer encoding.
#include "core/verbs.h"

#include <array>

namespace ulp
{

// Names follow the kernel's ib_wc_status_msg() / ib_event_msg() wording so that logs read
// like dmesg from an in-kernel ULP.
const char *wc_status_str(WcStatus s)
{
	switch (s) {
	case WcStatus::Success:
		return "success";
	case WcStatus::LocLenErr:
		return "local length error";
	case WcStatus::LocQpOpErr:
		return "local QP operation error";
	case WcStatus::LocProtErr:
		return "local protection error";
	case WcStatus::WrFlushErr:
		return "WR flushed";
	case WcStatus::MwBindErr:
		return "memory bind operation error";
	case WcStatus::BadRespErr:
		return "bad response error";
	case WcStatus::LocAccessErr:
		return "local access error";
	case WcStatus::RemInvReqErr:
		return "remote invalid request error";
	case WcStatus::RemAccessErr:
		return "remote access error";
	case WcStatus::RemOpErr:
		return "remote operation error";
	case WcStatus::RetryExcErr:
		return "transport retry counter exceeded";
	case WcStatus::RnrRetryExcErr:
		return "RNR retry counter exceeded";
	case WcStatus::RemAbortErr:
		return "operation aborted";
	case WcStatus::FatalErr:
		return "fatal error";
	case WcStatus::GeneralErr:
		return "general error";
	}
	return "unrecognized status";
}

const char *wr_opcode_str(WrOpcode op)
{
	switch (op) {
	case WrOpcode::RdmaWrite:
		return "RDMA_WRITE";
	case WrOpcode::RdmaWriteWithImm:
		return "RDMA_WRITE_WITH_IMM";
	case WrOpcode::Send:
		return "SEND";
	case WrOpcode::SendWithImm:
		return "SEND_WITH_IMM";
	case WrOpcode::RdmaRead:
		return "RDMA_READ";
	case WrOpcode::SendWithInv:
		return "SEND_WITH_INV";
	case WrOpcode::LocalInv:
		return "LOCAL_INV";
	case WrOpcode::RegMr:
		return "REG_MR";
	}
	return "UNKNOWN";
}

const char *qp_state_str(QpState s)
{
	switch (s) {
	case QpState::Reset:
		return "RESET";
	case QpState::Init:
		return "INIT";
	case QpState::Rtr:
		return "RTR";
	case QpState::Rts:
		return "RTS";
	case QpState::Sqe:
		return "SQE";
	case QpState::Err:
		return "ERR";
	}
	return "UNKNOWN";
}

const char *event_type_str(EventType t)
{
	switch (t) {
	case EventType::CqErr:
		return "CQ error";
	case EventType::QpFatal:
		return "QP fatal error";
	case EventType::QpReqErr:
		return "QP request error";
	case EventType::QpAccessErr:
		return "QP access error";
	case EventType::CommEst:
		return "communication established";
	case EventType::QpLastWqeReached:
		return "last WQE reached";
	case EventType::SrqLimitReached:
		return "SRQ limit reached";
	case EventType::SrqErr:
		return "SRQ error";
	case EventType::PortActive:
		return "port active";
	case EventType::PortErr:
		return "port error";
	case EventType::DeviceFatal:
		return "device fatal";
	}
	return "unrecognized event";
}

const char *poll_ctx_str(PollCtx c)
{
	switch (c) {
	case PollCtx::None:
		return "none";
	case PollCtx::Direct:
		return "direct";
	case PollCtx::Softirq:
		return "softirq";
	case PollCtx::Workqueue:
		return "workqueue";
	case PollCtx::UnboundWorkqueue:
		return "unbound-workqueue";
	case PollCtx::BusyPoll:
		return "busy-poll";
	}
	return "?";
}

uint32_t rnr_timer_usec(uint8_t enc)
{
	// IB spec 1.4 vol 1, table 45 (encoding of the RNR NAK timer field), in microseconds.
	// Code 0 is the longest delay, not the shortest: the table wraps at 655.36 ms.
	static constexpr std::array<uint32_t, 32> table = {
	    655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,    320,
	    480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240,  15360,
	    20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
	};
	// The field is 5 bits wide; the upper bits are ignored as a responder would.
	return table[enc & 0x1f];
}

} // namespace ulp
