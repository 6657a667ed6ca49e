// SPDX-License-Identifier: MIT
// tests/srp/srp_peer.h - a raw SRP initiator for the target's tests: an RDMA/CM
// connection whose IUs the test writes and reads byte by byte, so that it can send what no
// well-behaved initiator sends (IUs beyond its credits, malformed commands, bad descriptor
// tables, unknown opcodes) and see exactly what the target answers.
//
// One PD, two CQs polled by the test's thread, one registered buffer: receive slots, send
// slots and a data area the target's RDMA READs and WRITEs reach (REMOTE_READ and
// REMOTE_WRITE on the one MR: its rkey goes into the descriptors). CM events are queued by
// the provider's CM thread and waited for here.
#pragma once

#include "core/cm.h"
#include "core/registry.h"
#include "providers/soft/soft.h"
#include "srp/proto.h"
#include "tests/common/event_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <vector>

namespace ulp::srpt::test
{

using namespace std::chrono_literals;

struct PeerConfig {
	uint32_t recvs = 64;             // receive slots posted before the login
	uint32_t recv_bytes = 512;       // each: larger than any target-to-initiator IU
	uint32_t sends = 16;             // send slots
	uint32_t send_bytes = 8448;      // each: the largest IU the test sends
	size_t data_bytes = 4u << 20;    // the data area, bytes
	uint8_t responder_resources = 4; // RDMA READs of ours the target may have in flight
};

class SrpPeer
{
public:
	struct CmRec {
		CmEventType type;
		int status;
		ConnParam param;
	};

	explicit SrpPeer(Device &dev, PeerConfig cfg = {}) : cfg_(cfg)
	{
		pd_ = dev.alloc_pd();
		CqInitAttr ca;
		ca.cqe = int(cfg_.recvs + cfg_.sends + 16);
		scq_ = dev.create_cq(ca);
		rcq_ = dev.create_cq(ca);
		recv_off_ = 0;
		send_off_ = size_t(cfg_.recvs) * cfg_.recv_bytes;
		data_off_ = send_off_ + size_t(cfg_.sends) * cfg_.send_bytes;
		buf_.assign(data_off_ + cfg_.data_bytes, 0);
		if (pd_)
			mr_ = pd_->reg_mr(buf_.data(), buf_.size(),
			                  ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ |
			                      ACCESS_REMOTE_WRITE);
		rcqe_.resize(cfg_.recvs);
		scqe_.resize(cfg_.sends);
	}

	~SrpPeer()
	{
		id_.reset(); // its QP first
		mr_.reset();
		scq_.reset();
		rcq_.reset();
		pd_.reset();
	}

	// Connect to dst with req as the login's private data (srp_login_req_rdma). 0: accepted,
	// *rsp filled; -ECONNREFUSED: rejected, *rej filled when its private data parsed (else
	// reason 0); another negative errno when no answer came.
	int login(const SockAddr &dst, const srp::LoginReq &req, srp::LoginRsp *rsp,
	          srp::LoginRej *rej = nullptr, std::span<const uint8_t> raw_pdata = {})
	{
		if (!pd_ || !scq_ || !rcq_ || !mr_)
			return -ENOMEM;
		id_ = soft::provider().create_id(
		    [this](CmId *, CmEvent &ev) {
			    cm_.push(CmRec{ev.event, ev.status, ev.param});
		    },
		    this);
		auto src = SockAddr::parse("127.0.0.1:0");
		if (int rc = id_->resolve_addr(&*src, dst, 2000); rc)
			return rc;
		if (!wait_cm(CmEventType::AddrResolved))
			return -ETIMEDOUT;
		if (int rc = id_->resolve_route(2000); rc)
			return rc;
		if (!wait_cm(CmEventType::RouteResolved))
			return -ETIMEDOUT;
		QpInitAttr qa;
		qa.send_cq = scq_.get();
		qa.recv_cq = rcq_.get();
		qa.cap.max_send_wr = cfg_.sends;
		qa.cap.max_recv_wr = cfg_.recvs;
		qa.cap.max_send_sge = 1;
		qa.cap.max_recv_sge = 1;
		if (int rc = id_->create_qp(*pd_, qa); rc)
			return rc;
		for (uint32_t i = 0; i < cfg_.recvs; i++)
			if (int rc = post_recv(i); rc)
				return rc;
		ConnParam cp;
		uint8_t pd[srp::kLoginReqRdmaLen];
		srp::build_login_req_rdma(
		    req, std::span<uint8_t, srp::kLoginReqRdmaLen>(pd, sizeof(pd)));
		cp.set_private_data(raw_pdata.empty() ? std::span<const uint8_t>(pd) : raw_pdata);
		cp.responder_resources = cfg_.responder_resources;
		cp.initiator_depth = 0;
		if (int rc = id_->connect(cp); rc)
			return rc;
		auto e = cm_.wait_for(
		    [](const CmRec &r) {
			    return r.type == CmEventType::Established ||
			           r.type == CmEventType::Rejected ||
			           r.type == CmEventType::Unreachable ||
			           r.type == CmEventType::ConnectError;
		    },
		    5s);
		if (!e)
			return -ETIMEDOUT;
		if (e->type == CmEventType::Established) {
			if (!rsp || !srp::parse_login_rsp(e->param.pdata(), rsp))
				return -EPROTO;
			connected_ = true;
			return 0;
		}
		if (e->type != CmEventType::Rejected)
			return -EHOSTUNREACH;
		if (rej) {
			*rej = srp::LoginRej{};
			if (!srp::parse_login_rej(e->param.pdata(), rej))
				rej->reason = 0;
		}
		return -ECONNREFUSED;
	}

	// Post iu as one SEND and wait for its completion. 0, or -EIO (a completion error).
	int send(std::span<const uint8_t> iu)
	{
		if (iu.size() > cfg_.send_bytes)
			return -E2BIG;
		const uint32_t slot = next_send_++ % cfg_.sends;
		std::memcpy(buf_.data() + send_off_ + size_t(slot) * cfg_.send_bytes, iu.data(),
		            iu.size());
		Sge s{addr(send_off_ + size_t(slot) * cfg_.send_bytes), uint32_t(iu.size()),
		      mr_->lkey()};
		SendWr wr;
		wr.wr_cqe = &scqe_[slot];
		wr.sg_list = &s;
		wr.num_sge = 1;
		wr.opcode = WrOpcode::Send;
		wr.send_flags = SEND_SIGNALED;
		const SendWr *bad = nullptr;
		if (int rc = id_->qp()->post_send(&wr, &bad); rc)
			return rc;
		const auto end = std::chrono::steady_clock::now() + 5s;
		while (std::chrono::steady_clock::now() < end) {
			Wc wc;
			if (scq_->poll(std::span<Wc>(&wc, 1)) == 1)
				return wc.status == WcStatus::Success ? 0 : -EIO;
			reap_recvs();
			std::this_thread::sleep_for(50us);
		}
		return -ETIMEDOUT;
	}

	// Post the IUs as one chain of SENDs (one post_send: they reach the target back to back)
	// and wait for their completions. 0, -E2BIG (more than the send slots, or one too
	// large), -EIO (a completion error), or post_send's error.
	int send_many(const std::vector<std::vector<uint8_t>> &ius)
	{
		if (ius.empty() || ius.size() > cfg_.sends)
			return -E2BIG;
		std::vector<Sge> sges(ius.size());
		std::vector<SendWr> wrs(ius.size());
		for (size_t i = 0; i < ius.size(); i++) {
			if (ius[i].size() > cfg_.send_bytes)
				return -E2BIG;
			const uint32_t slot = next_send_++ % cfg_.sends;
			const size_t off = send_off_ + size_t(slot) * cfg_.send_bytes;
			std::memcpy(buf_.data() + off, ius[i].data(), ius[i].size());
			sges[i] = Sge{addr(off), uint32_t(ius[i].size()), mr_->lkey()};
			wrs[i].wr_cqe = &scqe_[slot];
			wrs[i].sg_list = &sges[i];
			wrs[i].num_sge = 1;
			wrs[i].opcode = WrOpcode::Send;
			wrs[i].send_flags = SEND_SIGNALED;
			wrs[i].next = i + 1 < ius.size() ? &wrs[i + 1] : nullptr;
		}
		const SendWr *bad = nullptr;
		if (int rc = id_->qp()->post_send(wrs.data(), &bad); rc)
			return rc;
		size_t done = 0;
		int rc = 0;
		const auto end = std::chrono::steady_clock::now() + 5s;
		while (done < ius.size()) {
			if (std::chrono::steady_clock::now() >= end)
				return -ETIMEDOUT;
			Wc wc;
			if (scq_->poll(std::span<Wc>(&wc, 1)) == 1) {
				done++;
				if (wc.status != WcStatus::Success)
					rc = -EIO;
				continue;
			}
			reap_recvs();
			std::this_thread::sleep_for(50us);
		}
		return rc;
	}

	// The next IU the target sent, within timeout; nullopt when none came (or the
	// connection flushed: flushed() tells).
	std::optional<std::vector<uint8_t>> recv(std::chrono::milliseconds timeout = 5s)
	{
		const auto end = std::chrono::steady_clock::now() + timeout;
		for (;;) {
			reap_recvs();
			if (!rx_.empty()) {
				auto v = std::move(rx_.front());
				rx_.pop_front();
				return v;
			}
			if (flushed_ || std::chrono::steady_clock::now() >= end)
				return std::nullopt;
			std::this_thread::sleep_for(50us);
		}
	}

	// IUs received and not yet taken, without waiting.
	size_t pending()
	{
		reap_recvs();
		return rx_.size();
	}

	// Wait for the target's disconnect (or the flush of our receives).
	bool wait_disconnected(std::chrono::milliseconds timeout = 5s)
	{
		return wait_cm(CmEventType::Disconnected, timeout);
	}

	void disconnect()
	{
		if (id_ && connected_)
			id_->disconnect();
		connected_ = false;
	}

	bool flushed() const { return flushed_; }
	uint64_t addr(size_t off) const { return reinterpret_cast<uint64_t>(buf_.data() + off); }
	uint32_t rkey() const { return mr_->rkey(); }
	Qp *qp() { return id_ ? id_->qp() : nullptr; }
	// The data area: what descriptors point into.
	std::span<uint8_t> data() { return {buf_.data() + data_off_, cfg_.data_bytes}; }
	uint64_t data_va(size_t off = 0) const { return addr(data_off_ + off); }
	srp::DirectDesc desc(size_t off, uint32_t len) const { return {data_va(off), rkey(), len}; }

	bool wait_cm(CmEventType t, std::chrono::milliseconds timeout = 5s)
	{
		return cm_.wait_for([t](const CmRec &r) { return r.type == t; }, timeout)
		    .has_value();
	}

private:
	int post_recv(uint32_t i)
	{
		Sge s{addr(recv_off_ + size_t(i) * cfg_.recv_bytes), cfg_.recv_bytes, mr_->lkey()};
		RecvWr wr;
		wr.wr_cqe = &rcqe_[i];
		wr.sg_list = &s;
		wr.num_sge = 1;
		const RecvWr *bad = nullptr;
		return id_->qp()->post_recv(&wr, &bad);
	}

	void reap_recvs()
	{
		Wc wc[8];
		int n;
		while ((n = rcq_->poll(std::span<Wc>(wc))) > 0) {
			for (int k = 0; k < n; k++) {
				const uint32_t i = uint32_t(wc[k].wr_cqe - rcqe_.data());
				if (wc[k].status != WcStatus::Success) {
					flushed_ = true;
					continue;
				}
				const uint8_t *p =
				    buf_.data() + recv_off_ + size_t(i) * cfg_.recv_bytes;
				rx_.emplace_back(p, p + wc[k].byte_len);
				post_recv(i);
			}
		}
	}

	PeerConfig cfg_;
	std::unique_ptr<Pd> pd_;
	std::unique_ptr<Cq> scq_, rcq_;
	std::vector<uint8_t> buf_;
	std::unique_ptr<Mr> mr_;
	std::vector<Cqe> rcqe_, scqe_; // one per slot: the WC's cqe names the slot
	size_t recv_off_ = 0, send_off_ = 0, data_off_ = 0;
	uint32_t next_send_ = 0;
	std::unique_ptr<CmId> id_;
	ulp::test::EventQueue<CmRec> cm_;
	std::deque<std::vector<uint8_t>> rx_;
	bool connected_ = false;
	bool flushed_ = false;
};

} // namespace ulp::srpt::test
