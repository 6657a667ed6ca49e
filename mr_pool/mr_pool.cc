// SPDX-License-Identifier: MIT
// mr_pool/mr_pool.cc - the MR pool (drivers/infiniband/core/mr_pool.c).
#include "mr_pool/mr_pool.h"

#include "core/check.h"
#include "core/log.h"

#include <algorithm>
#include <cerrno>

namespace ulp
{

MrPool::~MrPool()
{
	const int rc = destroy();
	ULP_CHECK(rc == 0, "pool destroyed with {} MRs in use", used());
}

int MrPool::init(Pd &pd, int nr, uint32_t max_num_sg)
{
	if (nr < 0)
		return -EINVAL;
	if (nr_)
		return -EBUSY;
	if (!nr)
		return 0;

	auto nodes = std::make_unique<Node[]>(nr);
	std::vector<std::pair<const Mr *, Node *>> index;
	index.reserve(nr);
	for (int i = 0; i < nr; i++) {
		errno = 0;
		nodes[i].mr = pd.alloc_mr(max_num_sg);
		if (!nodes[i].mr) {
			// The kernel's goto out: ib_mr_pool_destroy() of what was made. Here the
			// nodes are not on free_ yet: dropping them frees the MRs.
			return errno ? -errno : -ENOMEM;
		}
		index.emplace_back(nodes[i].mr.get(), &nodes[i]);
	}
	std::sort(index.begin(), index.end());

	std::lock_guard g(lock_);
	for (int i = 0; i < nr; i++)
		free_.push_back(nodes[i]); // list_add_tail
	nodes_ = std::move(nodes);
	index_ = std::move(index);
	nr_ = nr;
	used_ = 0;
	return 0;
}

Mr *MrPool::get()
{
	std::lock_guard g(lock_);
	if (free_.empty())
		return nullptr;
	Node &n = free_.front(); // list_first_entry_or_null
	free_.pop_front();
	used_++;
	return n.mr.get();
}

MrPool::Node *MrPool::lookup(const Mr *mr) const
{
	auto it = std::lower_bound(index_.begin(), index_.end(), mr,
	                           [](const auto &e, const Mr *m) { return e.first < m; });
	if (it == index_.end() || it->first != mr)
		return nullptr;
	return it->second;
}

void MrPool::put(Mr *mr)
{
	std::lock_guard g(lock_);
	Node *n = lookup(mr);
	ULP_CHECK(n, "put of MR {} that is not from this pool", fmt::ptr(mr));
	ULP_CHECK(!n->entry.is_linked(), "MR {} (lkey {:#x}) put twice", fmt::ptr(mr), mr->lkey());
	free_.push_front(*n); // list_add: LIFO
	used_--;
}

int MrPool::destroy()
{
	std::unique_ptr<Node[]> nodes;
	{
		std::lock_guard g(lock_);
		if (used_) {
			ULP_LOG(Error, MrPool, "destroy refused: {} of {} MRs still in use", used_,
			        nr_);
			return -EBUSY;
		}
		free_.clear();
		nodes = std::move(nodes_);
		index_.clear();
		index_.shrink_to_fit();
		nr_ = 0;
	}
	// ib_dereg_mr outside the lock, as the kernel drops mr_lock around it.
	nodes.reset();
	return 0;
}

int MrPool::used() const
{
	std::lock_guard g(lock_);
	return used_;
}

int MrPool::size() const
{
	std::lock_guard g(lock_);
	return nr_;
}

int MrPool::available() const
{
	std::lock_guard g(lock_);
	return static_cast<int>(free_.size());
}

} // namespace ulp
