// SPDX-License-Identifier: MIT
// rdma_conn/ring.h - a connection's receive and send descriptor rings: registered buffers
// from one core/ BufPool each, every descriptor with the Cqe its completion comes back to
// (ib_srpt's ioctx rings, isert's rx/tx descriptors, the iSER initiator's).
//
// A protocol derives its descriptor from RecvDesc or SendDesc, adding its own state (the
// PDU in the buffer, a back pointer to its connection), and keeps a ring of them:
//
//   struct TxDesc : rdma::SendDesc { Conn *conn; OutPdu *pdu; };
//   rdma::SendRing<TxDesc> sends_;
//   sends_.init(pd, bytes, n, [&](TxDesc &d) { d.cqe.done = send_done; d.conn = this; });
//   ... auto *d = rdma::SendRing<TxDesc>::from(wc);   // in send_done
//
// Rings allocate nothing after init. A receive descriptor is posted over its whole buffer;
// a send descriptor is taken (get), filled and posted by the protocol, and given back (put)
// when its SEND completes. release() returns the buffers and frees the pool: only once no WR
// of the ring is outstanding (after drain).
#pragma once

#include "core/buf_pool.h"
#include "core/device.h"

#include <cerrno>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

namespace ulp::rdma
{

struct RecvDesc {
	Cqe cqe;                  // its completion leads back here (container_of)
	const Buf *buf = nullptr; // the registered buffer it receives into
};

struct SendDesc {
	Cqe cqe;                  // its completion leads back here (container_of)
	const Buf *buf = nullptr; // the registered buffer it sends from
	Sge sge{};                // the SEND's one SGE (prepare)
	SendWr wr{};              // the SEND itself (prepare)
};

// Post one receive of d's whole buffer on qp. 0 or a negative errno.
int post_recv(Qp &qp, RecvDesc &d, uint32_t len);
// The same on a shared receive queue (its completions come on the consuming QP's CQ).
int post_recv(Srq &srq, RecvDesc &d, uint32_t len);
// Fill d's SGE and WR for a signaled SEND of the first len bytes of its buffer.
void prepare_send(SendDesc &d, uint32_t len, WrOpcode op = WrOpcode::Send);

template <typename D> class RecvRing
{
	static_assert(std::is_base_of_v<RecvDesc, D>);

public:
	// n descriptors over n buffers of size bytes registered on pd (local write), each
	// set up by init_desc(D &). 0, or a negative errno (nothing kept).
	template <typename F> int init(Pd &pd, size_t size, uint32_t n, F &&init_desc)
	{
		pool_ = BufPool::create(pd, size, n, ACCESS_LOCAL_WRITE);
		if (!pool_)
			return errno ? -errno : -ENOMEM;
		descs_ = std::vector<D>(n);
		for (D &d : descs_) {
			d.buf = pool_->get();
			init_desc(d);
		}
		return 0;
	}
	// Every descriptor posted on q, a QP (a fresh connection) or an SRQ. 0 or a negative
	// errno.
	template <typename Q> int post_all(Q &q)
	{
		for (D &d : descs_)
			if (int rc = post(q, d); rc != 0)
				return rc;
		return 0;
	}
	template <typename Q> int post(Q &q, D &d)
	{
		return post_recv(q, d, uint32_t(pool_->buf_size()));
	}
	// The buffers back and the pool freed: no receive of the ring may be outstanding.
	void release()
	{
		for (D &d : descs_)
			if (d.buf) {
				pool_->put(d.buf);
				d.buf = nullptr;
			}
		pool_.reset();
	}

	static D *from(Wc *wc)
	{
		return static_cast<D *>(container_of(wc->wr_cqe, &RecvDesc::cqe));
	}

	std::span<D> descs() { return descs_; }
	size_t buf_size() const { return pool_ ? pool_->buf_size() : 0; }
	uint32_t size() const { return uint32_t(descs_.size()); }

private:
	std::unique_ptr<BufPool> pool_;
	std::vector<D> descs_;
};

template <typename D> class SendRing
{
	static_assert(std::is_base_of_v<SendDesc, D>);

public:
	// As RecvRing::init; every descriptor starts free.
	template <typename F> int init(Pd &pd, size_t size, uint32_t n, F &&init_desc)
	{
		pool_ = BufPool::create(pd, size, n, ACCESS_LOCAL_WRITE);
		if (!pool_)
			return errno ? -errno : -ENOMEM;
		descs_ = std::vector<D>(n);
		free_.clear();
		free_.reserve(n);
		for (D &d : descs_) {
			d.buf = pool_->get();
			init_desc(d);
			free_.push_back(&d);
		}
		return 0;
	}
	// A free descriptor (LIFO: the warmest buffer), or nullptr when every one is out.
	D *get()
	{
		if (free_.empty())
			return nullptr;
		D *d = free_.back();
		free_.pop_back();
		return d;
	}
	void put(D *d) { free_.push_back(d); }
	void release()
	{
		for (D &d : descs_)
			if (d.buf) {
				pool_->put(d.buf);
				d.buf = nullptr;
			}
		pool_.reset();
	}

	static D *from(Wc *wc)
	{
		return static_cast<D *>(container_of(wc->wr_cqe, &SendDesc::cqe));
	}

	std::span<D> descs() { return descs_; }
	size_t buf_size() const { return pool_ ? pool_->buf_size() : 0; }
	uint32_t size() const { return uint32_t(descs_.size()); }
	uint32_t free_count() const { return uint32_t(free_.size()); }
	bool empty() const { return free_.empty(); } // none free

private:
	std::unique_ptr<BufPool> pool_;
	std::vector<D> descs_;
	std::vector<D *> free_; // not in flight (the protocol's lock)
};

} // namespace ulp::rdma
