// SPDX-License-Identifier: MIT
// mr_pool/mr_pool.h - a pool of fast-registration MRs (drivers/infiniband/core/mr_pool.c).
//
// The kernel: ib_mr_pool_init(qp, list, nr, type, max_num_sg, 0) allocates nr MRs with
// ib_alloc_mr(qp->pd, ...) and list_add_tail()s them onto a list kept on the QP
// (qp->rdma_mrs, qp->sig_mrs); ib_mr_pool_get() takes list_first_entry_or_null() and bumps
// qp->mrs_used, ib_mr_pool_put() list_add()s the MR back at the front (LIFO: the MR put
// last, still warm in the HCA's caches, is the next one handed out) and drops mrs_used;
// ib_mr_pool_destroy() ib_dereg_mr()s whatever is on the list. All of it under qp->mr_lock
// (a spinlock). An empty list makes get() return NULL and rdma_rw_init_mr_wrs() -EAGAIN.
//
// Here one MrPool object is one list, owned next to the QP (rw/ creates it with the QP).
// Same semantics; departures on purpose:
//   - `used` is per pool, not per QP (the kernel shares qp->mrs_used between rdma_mrs and
//     sig_mrs and only checks it with a WARN_ON_ONCE in ib_destroy_qp).
//   - destroy() with MRs still out refuses (-EBUSY, logged to stderr) instead of
//     deregistering only the free ones and leaving the holders' MRs to be leaked.
//   - put() of an MR that is not from this pool, or that is already in it, aborts: the
//     kernel would silently corrupt its list and mrs_used (a ULP bug either way).
//   - init() on a pool that already holds MRs is refused (-EBUSY); the kernel appends.
//   - Each MR is wrapped in a node preallocated at init (the kernel links struct ib_mr's
//     own qp_entry): get() and put() never allocate.
//   - Only IB_MR_TYPE_MEM_REG; the integrity (signature) variant comes with rw/'s PI path.
#pragma once

#include "core/device.h"

#include <boost/intrusive/list.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace ulp
{

// One pool of fast-registration MRs of one PD (see the top of this file). Thread-safe.
class MrPool
{
public:
	MrPool() = default;
	// Destroying a pool with MRs still out is a ULP bug: logged, then abort().
	~MrPool();
	MrPool(const MrPool &) = delete;
	MrPool &operator=(const MrPool &) = delete;

	// ib_mr_pool_init: allocate nr fast-registration MRs of max_num_sg pages on pd.
	// 0, or a negative errno (from alloc_mr: -EINVAL for max_num_sg above the device's
	// max_fast_reg_page_list_len, -EOPNOTSUPP without DEVICE_MEM_MGT_EXTENSIONS, -ENOMEM);
	// on failure every MR made so far is freed and the pool is left empty. nr == 0 makes
	// an empty pool, as in the kernel. -EINVAL for nr < 0, -EBUSY if already initialised.
	int init(Pd &pd, int nr, uint32_t max_num_sg);
	// ib_mr_pool_get: the MR put back last, or nullptr when all are out (used() is then
	// unchanged; rw/ turns it into -EAGAIN).
	Mr *get();
	// ib_mr_pool_put: give back an MR from get(). Aborts if mr is not out of this pool.
	void put(Mr *mr);
	// ib_mr_pool_destroy: deregister every MR. 0, or -EBUSY (logged) if MRs are still out,
	// in which case nothing is freed. The pool can be init()ed again afterwards.
	int destroy();

	int used() const;      // MRs handed out by get() and not yet put back
	int size() const;      // MRs owned by the pool (free + used)
	int available() const; // MRs on the free list

private:
	struct Node {
		std::unique_ptr<Mr> mr; // owned MR; set at init, freed at destroy
		boost::intrusive::list_member_hook<
		    boost::intrusive::link_mode<boost::intrusive::safe_link>>
		    entry; // on free_ while the MR is in the pool (the kernel's mr->qp_entry)
	};
	using NodeList = boost::intrusive::list<
	    Node, boost::intrusive::member_hook<Node, decltype(Node::entry), &Node::entry>,
	    boost::intrusive::constant_time_size<true>>;

	Node *lookup(const Mr *mr) const; // lock held or pool quiescent; nullptr if not ours

	mutable std::mutex lock_;       // the kernel's qp->mr_lock: guards everything below
	NodeList free_;                 // free MRs, most recently put first (lock_)
	int used_ = 0;                  // the kernel's qp->mrs_used, for this list (lock_)
	std::unique_ptr<Node[]> nodes_; // one node per MR; set by init, freed by destroy (lock_)
	int nr_ = 0;                    // entries of nodes_ (lock_; written by init/destroy)
	std::vector<std::pair<const Mr *, Node *>> index_; // sorted by Mr*: put()'s
	                                                   // ownership check (lock_)
};

} // namespace ulp
