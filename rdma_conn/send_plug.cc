// SPDX-License-Identifier: MIT
// rdma_conn/send_plug.cc - a connection's send plug (see send_plug.h).
#include "rdma_conn/send_plug.h"

#include "core/device.h"

#include <utility>

namespace ulp::rdma
{

namespace
{

// A SEND of some kind: a response, whose completion only gives its buffers back.
bool is_send(WrOpcode op)
{
	return op == WrOpcode::Send || op == WrOpcode::SendWithImm || op == WrOpcode::SendWithInv;
}

} // namespace

void SendPlug::add(PlugPiece *p, SendWr *first)
{
	SendWr *last = first;
	while (last->next)
		last = last->next;
	p->first = first;
	p->last = last;
	held_.push_back(*p);
}

int SendPlug::post(Qp &qp, PlugList *unsent)
{
	if (held_.empty())
		return 0;
	// Every piece off the plug's list before post_send, so that nothing of a posted piece
	// is written here afterwards: its completion may run on the CQ's thread before
	// post_send returns, and reads its hook (an unsignaled piece that failed is still in
	// unsignaled_) under lock_.
	posting_.clear();
	while (!held_.empty()) {
		PlugPiece &p = held_.front();
		held_.pop_front();
		posting_.push_back(&p);
	}
	const size_t n = posting_.size();
	for (size_t i = 0; i + 1 < n; i++)
		posting_[i]->last->next = posting_[i + 1]->first;
	// One signaled completion for the chain (send_plug.h): every piece's last WR completes
	// through the plug, and those that end in a SEND (a response: its completion only gives
	// buffers back) but the chain's last are unsignaled, listed before the post (a
	// completion may come before post_send returns). A piece that ends in an RDMA READ stays
	// signaled: its completion is the command's progress (the write data is here), which
	// must not wait for the transfers posted after it. Only pieces that end signaled, as
	// they all do.
	bool coalesce = n > 1;
	size_t nunsig = 0;
	bool any_send = false; // a piece before the last ends in a SEND: something to save
	for (size_t i = 0; coalesce && i < n; i++) {
		const SendWr *last = posting_[i]->last;
		coalesce = last->wr_cqe && (last->send_flags & SEND_SIGNALED);
		any_send = any_send || (i + 1 < n && is_send(last->opcode));
	}
	coalesce = coalesce && any_send;
	if (coalesce) {
		std::lock_guard g(lock_);
		for (size_t i = 0; i < n; i++) {
			PlugPiece &p = *posting_[i];
			p.seq = ++next_seq_;
			p.plug = this;
			p.orig = p.last->wr_cqe;
			p.cqe.done = piece_done;
			p.last->wr_cqe = &p.cqe;
			if (i + 1 < n && is_send(p.last->opcode)) {
				p.last->send_flags &= ~uint32_t{SEND_SIGNALED};
				unsignaled_.push_back(p);
				nunsig++;
			}
		}
	}
	const SendWr *bad = nullptr;
	const int rc = qp.post_send(posting_[0]->first, &bad);
	// Each piece's WRs are its own again. Safe after post_send although a completion may
	// already have handed a piece back: its protocol builds WRs in a context again only
	// holding the connection, which the caller of post() holds until it returns.
	for (PlugPiece *p : posting_)
		p->last->next = nullptr;
	stats_.posts++;
	if (rc == 0) {
		stats_.pieces += n;
		stats_.unsignaled += nunsig;
		return 0;
	}
	// The pieces before the one bad falls in went out; from it on nothing did (a piece is
	// posted whole or not at all, as when it was posted alone). A bad in no piece, or none:
	// nothing went out.
	size_t went = 0;
	bool found = false;
	for (; went < n && !found; went++)
		for (const SendWr *w = posting_[went]->first; w && !found; w = w->next)
			found = w == bad;
	went = found ? went - 1 : 0;
	stats_.pieces += went;
	{
		// What did not go out is the protocol's again, as it made it (signaled, its own
		// cqe). Unsignaled pieces that went out wait for drained(): the connection closes
		// (plug_failed) and nothing signaled follows them.
		std::unique_lock g(lock_, std::defer_lock);
		if (coalesce)
			g.lock();
		for (size_t i = went; i < n; i++) {
			PlugPiece &p = *posting_[i];
			if (coalesce) {
				p.last->wr_cqe = std::exchange(p.orig, nullptr);
				p.last->send_flags |= SEND_SIGNALED;
				if (p.node.is_linked())
					unsignaled_.erase(unsignaled_.iterator_to(p));
			}
		}
	}
	for (size_t i = went; i < n; i++)
		unsent->push_back(*posting_[i]);
	return rc;
}

void SendPlug::piece_done(Cq *cq, Wc *wc)
{
	PlugPiece *p = container_of(wc->wr_cqe, &PlugPiece::cqe);
	SendPlug &plug = *p->plug;
	PlugList before; // unsignaled pieces posted before p: done, since p is
	Cqe *own = nullptr;
	{
		std::lock_guard g(plug.lock_);
		own = std::exchange(p->orig, nullptr);
		if (!own)
			return; // delivered already (drained(): its completion came after the
			        // drain)
		if (p->node.is_linked())
			plug.unsignaled_.erase(plug.unsignaled_.iterator_to(*p)); // its own failure
		while (!plug.unsignaled_.empty() && plug.unsignaled_.front().seq < p->seq) {
			PlugPiece &q = plug.unsignaled_.front();
			plug.unsignaled_.pop_front();
			before.push_back(q);
		}
	}
	// In order, each taken off the list before its done() (which may post the context
	// again). They completed before p, and had one failed it would have said so itself: a
	// success each, unless p was flushed - the QP was in error before p ran, and a provider
	// that does not report flushed unsignaled WRs would leave a flushed one unsaid.
	// Each a SEND's own completion: p's status aside, nothing of p's (a READ's opcode and
	// length) is theirs.
	Wc w = *wc;
	w.status = wc->status == WcStatus::WrFlushErr ? WcStatus::WrFlushErr : WcStatus::Success;
	w.opcode = WcOpcode::Send;
	w.byte_len = 0;
	w.wc_flags = 0;
	while (!before.empty()) {
		PlugPiece &q = before.front();
		before.pop_front();
		Cqe *o;
		{
			std::lock_guard g(plug.lock_);
			o = std::exchange(q.orig, nullptr);
		}
		w.wr_cqe = o;
		o->done(cq, &w);
	}
	Wc mine = *wc;
	mine.wr_cqe = own;
	own->done(cq, &mine);
}

void SendPlug::drained(Cq *cq, Qp *qp)
{
	PlugList left;
	{
		std::lock_guard g(lock_);
		left.splice(left.end(), unsignaled_);
	}
	Wc w;
	w.status = WcStatus::WrFlushErr;
	w.qp = qp;
	while (!left.empty()) {
		PlugPiece &q = left.front();
		left.pop_front();
		Cqe *o;
		{
			std::lock_guard g(lock_);
			o = std::exchange(q.orig, nullptr);
		}
		if (!o)
			continue;
		w.wr_cqe = o;
		o->done(cq, &w);
	}
}

} // namespace ulp::rdma
