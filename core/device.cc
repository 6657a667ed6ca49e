// SPDX-License-Identifier: MIT
// core/device.cc - device event handlers and the provider-independent parts of Mr.
#include "core/device.h"

#include <algorithm>
#include <cerrno>
#include <mutex>

namespace ulp
{

// ---------------------------------------------------------------------------------------------
// Device async event handlers (ib_register_event_handler)
//
// Registration and unregistration may come from any thread, including from inside a
// handler. dispatch_event therefore calls the handlers without holding the list lock:
// it takes a snapshot of a copy-on-write list and walks that.
//
// Unregistration must still guarantee what the kernel's rwsem guarantees: once
// unregister_event_handler returns, the handler is not running and will not run again
// (the caller is about to free what it captured). Each entry counts the dispatches
// inside it; unregister marks the entry dead and waits for that count to reach zero.
// dispatch raises the count *before* it tests the dead flag, so one of the two always
// sees the other (both are sequentially consistent). A handler that unregisters itself
// does not wait for itself.

namespace
{

struct HandlerEntry {
	int handle;                    // returned by register_event_handler
	EventHandler fn;               // immutable after registration
	std::atomic<bool> dead{false}; // set by unregister: dispatch must skip it
	std::atomic<int> running{0};   // dispatches currently inside fn (any thread)
};

// The entries this thread is executing, innermost first: lets a handler unregister
// itself (or an outer handler of a nested dispatch) without waiting for itself.
struct RunningFrame {
	const HandlerEntry *entry;
	RunningFrame *outer;
};
thread_local RunningFrame *t_running = nullptr;

bool running_on_this_thread(const HandlerEntry *e)
{
	for (RunningFrame *f = t_running; f; f = f->outer)
		if (f->entry == e)
			return true;
	return false;
}

// Guards the lazy creation of Device::handlers_ (a device that nobody listens to never
// allocates a list). Held only for the pointer check, never across a handler.
std::mutex g_handlers_create_lock;

} // namespace

struct Device::Handlers {
	using List = std::vector<std::shared_ptr<HandlerEntry>>;

	std::mutex lock; // protects list and next_handle
	std::shared_ptr<const List> list =
	    std::make_shared<const List>(); // replaced, never mutated
	int next_handle = 1;                // handles are >= 1

	std::shared_ptr<const List> snapshot()
	{
		std::lock_guard g(lock);
		return list;
	}
};

int Device::register_event_handler(EventHandler h)
{
	if (!h)
		return -EINVAL;
	std::shared_ptr<Handlers> hs;
	{
		std::lock_guard g(g_handlers_create_lock);
		if (!handlers_)
			handlers_ = std::make_shared<Handlers>();
		hs = handlers_;
	}
	auto e = std::make_shared<HandlerEntry>();
	e->fn = std::move(h);
	std::lock_guard g(hs->lock);
	e->handle = hs->next_handle++;
	auto nl = std::make_shared<Handlers::List>(*hs->list);
	nl->push_back(e);
	hs->list = std::move(nl);
	return e->handle;
}

void Device::unregister_event_handler(int handle)
{
	std::shared_ptr<Handlers> hs;
	{
		std::lock_guard g(g_handlers_create_lock);
		hs = handlers_;
	}
	if (!hs)
		return;
	std::shared_ptr<HandlerEntry> victim;
	{
		std::lock_guard g(hs->lock);
		const auto &l = *hs->list;
		auto it = std::find_if(l.begin(), l.end(),
		                       [&](const auto &e) { return e->handle == handle; });
		if (it == l.end())
			return;
		victim = *it;
		auto nl = std::make_shared<Handlers::List>();
		nl->reserve(l.size() - 1);
		for (const auto &e : l)
			if (e != victim)
				nl->push_back(e);
		hs->list = std::move(nl);
	}
	victim->dead.store(true);
	if (running_on_this_thread(victim.get()))
		return;
	// Dispatches that took their snapshot before the list changed may still be inside fn.
	for (int n = victim->running.load(); n != 0; n = victim->running.load())
		victim->running.wait(n);
}

void Device::dispatch_event(const AsyncEvent &ev)
{
	std::shared_ptr<Handlers> hs;
	{
		std::lock_guard g(g_handlers_create_lock);
		hs = handlers_;
	}
	if (!hs)
		return;
	std::shared_ptr<const Handlers::List> l = hs->snapshot();
	for (const auto &e : *l) {
		e->running.fetch_add(1);
		if (!e->dead.load()) {
			RunningFrame f{e.get(), t_running};
			t_running = &f;
			e->fn(ev);
			t_running = f.outer;
		}
		if (e->running.fetch_sub(1) == 1)
			e->running.notify_all();
	}
}

// ---------------------------------------------------------------------------------------------
// Mr

namespace
{

// On a DEVICE_SG_GAPS_REG device (where rw/ allocates the equivalent of
// IB_MR_TYPE_SG_GAPS MRs) the page list is not a list of pages: there is no page rule to
// satisfy, so map_sg records one run per scatter entry, each run taking two slots of
// the page list: page_list()[2k] is the run's start address and page_list()[2k+1] its
// length in bytes. The MR's iova is the first run's start and the runs are laid out
// back to back from there, so REG_MR can execute them as a gather list. Runs are never
// merged or split: an entry that does not fit whole stops the mapping (the kernel's
// SG_GAPS drivers map whole entries too). Such an MR holds max_num_sg / 2 entries.
int map_sg_gaps(std::span<const SgEntry> sg, unsigned off, std::span<uint64_t> pages,
                size_t *npages, uint64_t *length)
{
	size_t n = 0;
	uint64_t len = 0;
	size_t i = 0;
	for (; i < sg.size(); i++) {
		if (n + 2 > pages.size())
			break;
		uint64_t a = sg[i].addr + (i == 0 ? off : 0);
		uint64_t l = sg[i].length - (i == 0 ? off : 0);
		pages[n++] = a;
		pages[n++] = l;
		len += l;
	}
	*npages = n;
	*length = len;
	return static_cast<int>(i);
}

} // namespace

// ib_sg_to_pages (drivers/infiniband/core/verbs.c), including its coalescing of
// virtually contiguous entries: an entry that continues the previous one exactly is
// merged with it even when the boundary is not page aligned.
//
// One deliberate difference: when the page list fills up in the middle of an entry, the
// kernel resumes at the start of the last page it mapped (so that page is mapped twice,
// and for an unaligned first entry the returned offset underflows). Here *sg_offset and
// length stop at the first byte not covered by the page list, so that successive MRs
// tile the scatter list without overlap.
int Mr::map_sg(std::span<const SgEntry> sg, unsigned *sg_offset_p, uint32_t page_size)
{
	int n = build_page_list(sg, sg_offset_p, page_size);
	if (n < 0)
		return n;
	if (int err = mapped(); err < 0) {
		npages_ = 0;
		length_ = 0;
		return err;
	}
	return n;
}

int Mr::build_page_list(std::span<const SgEntry> sg, unsigned *sg_offset_p, uint32_t page_size)
{
	if (!is_fast_reg())
		return -EINVAL;
	if (page_size < 4096 || (page_size & (page_size - 1)) != 0)
		return -EINVAL;
	uint64_t cap = pd().device().attr().page_size_cap;
	if (cap != 0 && (cap & page_size) == 0)
		return -EINVAL;
	unsigned sg_offset = sg_offset_p ? *sg_offset_p : 0;
	if (sg.empty() || sg_offset > sg[0].length)
		return -EINVAL;
	if (sg.size() > static_cast<size_t>(INT32_MAX))
		return -EINVAL;
	for (const SgEntry &e : sg)
		if (e.addr + e.length < e.addr)
			return -EINVAL; // wraps the address space

	std::span<uint64_t> pages(pages_.data(), pages_.size());
	page_size_ = page_size;
	npages_ = 0;
	iova_ = sg[0].addr + sg_offset;
	length_ = 0;

	if (pd().device().attr().device_cap_flags & DEVICE_SG_GAPS_REG) {
		int n = map_sg_gaps(sg, sg_offset, pages, &npages_, &length_);
		if (sg_offset_p)
			*sg_offset_p = 0;
		return n > 0 ? n : -ENOMEM;
	}

	const uint64_t page_mask = ~(static_cast<uint64_t>(page_size) - 1);
	const bool contig = pd().device().attr().device_cap_flags & DEVICE_REG_MR_CONTIG;
	uint64_t last_end = 0;      // end of the previous entry
	uint64_t last_page_off = 0; // offset of last_end inside its page
	size_t i = 0;
	for (; i < sg.size(); i++) {
		const uint64_t dma_addr = sg[i].addr + sg_offset;
		const uint64_t dma_len = sg[i].length - sg_offset;
		const uint64_t end = dma_addr + dma_len;
		uint64_t page_addr = dma_addr & page_mask;
		bool skip_first = false;

		// For the second and later entries: either the previous entry ended inside a
		// page or this one starts inside one. That is legal only if this entry
		// continues the previous one exactly; its first page is then already mapped.
		// A contiguous-only MR (a window) stops at any discontinuity, aligned or not.
		if (i && (last_page_off != 0 || page_addr != dma_addr)) {
			if (last_end != dma_addr)
				break; // a gap: the mapped prefix ends before this entry
			skip_first = true;
		} else if (i && contig && last_end != dma_addr) {
			break;
		}

		do {
			if (!skip_first) {
				if (npages_ == pages.size()) {
					// Page list full: covered up to the page that did not fit
					// (or nothing of this entry yet).
					uint64_t stop = std::max(page_addr, dma_addr);
					length_ += stop - dma_addr;
					if (sg_offset_p)
						*sg_offset_p =
						    static_cast<unsigned>(stop - sg[i].addr);
					return (i > 0 || stop > dma_addr) ? static_cast<int>(i)
					                                  : -ENOMEM;
				}
				pages[npages_++] = page_addr;
			}
			skip_first = false;
			page_addr += page_size;
		} while (page_addr < end);

		length_ += dma_len;
		last_end = end;
		last_page_off = end & ~page_mask;
		sg_offset = 0;
	}
	if (sg_offset_p)
		*sg_offset_p = 0;
	return static_cast<int>(i);
}

void Mr::update_key(uint8_t key)
{
	// ib_update_fast_reg_key: the low byte of both keys is the consumer-owned key part.
	if (!local_key_)
		lkey_ = (lkey_ & 0xffffff00u) | key;
	rkey_ = (rkey_ & 0xffffff00u) | key;
}

void Mr::inc_rkey()
{
	update_key(key_byte(ulp::inc_rkey(rkey_)));
}

// ---------------------------------------------------------------------------------------------
// Qp async events

Qp::~Qp()
{
	if (send_cq_)
		send_cq_->usecnt.fetch_sub(1, std::memory_order_relaxed);
	if (recv_cq_)
		recv_cq_->usecnt.fetch_sub(1, std::memory_order_relaxed);
}

void Qp::report_event(const AsyncEvent &ev)
{
	if (ev.event == EventType::QpLastWqeReached) {
		// Set before the ULP's handler runs, so a drain started from that handler (or
		// racing with it) sees it.
		std::lock_guard g(last_wqe_lock_);
		last_wqe_ = true;
		last_wqe_cv_.notify_all();
	}
	if (event_handler_)
		event_handler_(ev);
}

bool Qp::wait_last_wqe(std::chrono::milliseconds timeout)
{
	std::unique_lock g(last_wqe_lock_);
	return last_wqe_cv_.wait_for(g, timeout, [this] { return last_wqe_; });
}

} // namespace ulp
