// SPDX-License-Identifier: MIT
// rdma_conn/send_plug.cc - a connection's send plug (see send_plug.h).
#include "rdma_conn/send_plug.h"

namespace ulp::rdma
{

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
	PlugList chain;
	chain.swap(held_);
	for (auto it = chain.begin(), nx = std::next(it); nx != chain.end(); it = nx++)
		it->last->next = nx->first;
	const SendWr *bad = nullptr;
	const int rc = qp.post_send(chain.front().first, &bad);
	for (PlugPiece &p : chain)
		p.last->next = nullptr; // each piece's WRs are its own again
	stats_.posts++;
	if (rc == 0) {
		stats_.pieces += chain.size();
		chain.clear();
		return 0;
	}
	// The pieces before the one bad falls in went out; from it on nothing did (a piece is
	// posted whole or not at all, as when it was posted alone). A bad in no piece, or none:
	// nothing went out.
	size_t went = 0;
	bool found = false;
	for (PlugPiece &p : chain) {
		for (const SendWr *w = p.first; w && !found; w = w->next)
			found = w == bad;
		if (found)
			break;
		went++;
	}
	if (!found)
		went = 0;
	stats_.pieces += went;
	for (; went > 0; went--)
		chain.pop_front();
	unsent->splice(unsent->end(), chain);
	return rc;
}

} // namespace ulp::rdma
