// SPDX-License-Identifier: MIT
// scsi/loopback.cc - the in-process fabric (see loopback.h).
#include "scsi/loopback.h"

#include "core/log.h"

#include <algorithm>
#include <cstring>

namespace ulp::scsi
{

struct Loopback::Pending {
	LoopReq req;
	Loopback *lb = nullptr;
	std::vector<uint8_t> buf; // the command's buffer (data-out, or data-in space)
	bool released = false;    // under lb->lock_
	LoopResult result;        // valid once released
};

namespace
{

LoopReq *req_of(Cmd *cmd)
{
	return static_cast<LoopReq *>(cmd->fabric_priv);
}

} // namespace

Loopback::~Loopback()
{
	std::lock_guard g(lock_);
	if (!held_.empty())
		ULP_LOG(Error, Scsi, "loopback: destroyed with {} held writes", held_.size());
}

Nexus *Loopback::login(Tpg &tpg, const std::string &initiator, const std::string &port)
{
	return tpg.open_session(*this, initiator, port.empty() ? initiator : port);
}

int Loopback::logout(Nexus *s, std::chrono::milliseconds timeout)
{
	return s->tpg().close_session(s, timeout);
}

void Loopback::prep(LoopReq *req, Nexus *s, uint64_t lun, std::span<const uint8_t> cdb, DataDir dir,
                    std::span<uint8_t> buf, TaskAttr attr, uint64_t tag)
{
	Cmd *c = &req->cmd;
	cmd_init(c);
	c->sess = s;
	c->lun = lun;
	c->tag = tag;
	c->task_attr = attr;
	c->dir = buf.empty() ? DataDir::None : dir;
	c->data_length = static_cast<uint32_t>(buf.size());
	req->iov = iovec{buf.data(), buf.size()};
	c->sgl = buf.empty() ? std::span<const iovec>{} : std::span<const iovec>(&req->iov, 1);
	c->cdb_len = static_cast<uint8_t>(std::min(cdb.size(), kMaxCdb));
	std::memcpy(c->cdb, cdb.data(), c->cdb_len);
	if (cdb.size() > kMaxCdb)
		c->cdb_len = 0; // refused by the core as an invalid CDB length
	c->fabric_priv = req;
	req->queued = false;
	req->data_in = false;
	req->got_aborted_task = false;
}

void Loopback::start(LoopReq *req)
{
	submit(&req->cmd);
}

void Loopback::write_pending(Cmd *cmd)
{
	LoopReq *r = req_of(cmd);
	if (r->hold_write) {
		std::lock_guard g(lock_);
		held_.push_back(r);
		return;
	}
	write_done(cmd, true); // the data is already in the buffer
}

void Loopback::abort_write(Cmd *cmd)
{
	LoopReq *r = req_of(cmd);
	{
		std::lock_guard g(lock_);
		auto it = std::find(held_.begin(), held_.end(), r);
		if (it == held_.end())
			return; // already given back (write_done was ours to call and we did)
		held_.erase(it);
	}
	write_done(cmd, false);
}

void Loopback::queue_data_in(Cmd *cmd)
{
	req_of(cmd)->queued = true;
	req_of(cmd)->data_in = true;
	cmd_put(cmd); // the data is in the caller's buffer already: "sent"
}

void Loopback::queue_status(Cmd *cmd)
{
	req_of(cmd)->queued = true;
	cmd_put(cmd);
}

void Loopback::aborted_task(Cmd *cmd)
{
	req_of(cmd)->got_aborted_task = true;
	cmd_put(cmd);
}

void Loopback::release_cmd(Cmd *cmd)
{
	LoopReq *r = req_of(cmd);
	if (r->done)
		r->done(r);
}

// ---- Synchronous helpers -----------------------------------------------------------------

void Loopback::pending_done(LoopReq *req)
{
	auto *p = static_cast<Loopback::Pending *>(req->ctx);
	const Cmd &c = req->cmd;
	LoopResult res;
	res.finished = true;
	res.aborted = req->got_aborted_task;
	res.status = c.status;
	res.sense.assign(c.sense, c.sense + c.sense_len);
	res.resid = c.resid;
	res.resid_count = c.resid_count;
	res.xfer_len = c.xfer_len;
	if (req->data_in)
		res.data.assign(p->buf.begin(),
		                p->buf.begin() + std::min<size_t>(c.xfer_len, p->buf.size()));
	std::lock_guard g(p->lb->lock_);
	p->result = std::move(res);
	p->released = true;
	p->lb->cv_.notify_all();
}

Loopback::Pending *Loopback::start_async(Nexus *s, uint64_t lun, std::span<const uint8_t> cdb,
                                         DataDir dir, std::vector<uint8_t> data, TaskAttr attr,
                                         uint64_t tag, bool hold_write)
{
	auto *p = new Pending;
	p->lb = this;
	p->buf = std::move(data);
	prep(&p->req, s, lun, cdb, dir, p->buf, attr, tag);
	p->req.done = pending_done;
	p->req.ctx = p;
	p->req.hold_write = hold_write;
	start(&p->req);
	return p;
}

LoopResult Loopback::wait(Pending *p, std::chrono::milliseconds timeout)
{
	std::unique_lock g(lock_);
	if (!cv_.wait_for(g, timeout, [&] { return p->released; })) {
		// Still in flight: the Pending must stay allocated for the core's callbacks.
		ULP_LOG_RATELIMITED(Warn, Scsi,
		                    "loopback: command tag {:x} not finished after {} ms",
		                    (unsigned long long)p->req.cmd.tag, (long long)timeout.count());
		return LoopResult{};
	}
	LoopResult r = std::move(p->result);
	g.unlock();
	delete p;
	return r;
}

CmdState Loopback::state(Pending *p)
{
	LogicalUnit *lu = p->req.cmd.lu;
	if (!lu)
		return p->req.cmd.state;
	std::lock_guard g(task_lock(&p->req.cmd));
	return p->req.cmd.state;
}

bool Loopback::release_write(Pending *p, bool ok)
{
	{
		std::lock_guard g(lock_);
		auto it = std::find(held_.begin(), held_.end(), &p->req);
		if (it == held_.end())
			return false;
		held_.erase(it);
	}
	write_done(&p->req.cmd, ok);
	return true;
}

LoopResult Loopback::run(Nexus *s, uint64_t lun, std::span<const uint8_t> cdb, DataDir dir,
                         std::vector<uint8_t> data, TaskAttr attr, uint64_t tag,
                         std::chrono::milliseconds timeout)
{
	return wait(start_async(s, lun, cdb, dir, std::move(data), attr, tag), timeout);
}

struct Loopback::PendingTmf {
	Tmr tmr;
	bool done = false; // under lock_
};

void Loopback::queue_tm_rsp(Tmr *tmr)
{
	auto *p = static_cast<PendingTmf *>(tmr->fabric_priv);
	std::lock_guard g(lock_);
	p->done = true;
	cv_.notify_all();
}

Loopback::PendingTmf *Loopback::tmf_start(Nexus *s, TmfType fn, uint64_t lun, uint64_t ref_tag)
{
	auto *p = new PendingTmf;
	p->tmr.sess = s;
	p->tmr.function = fn;
	p->tmr.lun = lun;
	p->tmr.ref_tag = ref_tag;
	p->tmr.fabric_priv = p;
	tmr_submit(&p->tmr);
	return p;
}

bool Loopback::tmf_answered(PendingTmf *p)
{
	std::lock_guard g(lock_);
	return p->done;
}

TmfResponse Loopback::tmf_wait(PendingTmf *p, std::chrono::milliseconds timeout)
{
	std::unique_lock g(lock_);
	if (!cv_.wait_for(g, timeout, [&] { return p->done; })) {
		ULP_LOG(Warn, Scsi, "loopback: {} not answered after {} ms",
		        tmf_str(p->tmr.function), (long long)timeout.count());
		return TmfResponse::Failed; // p stays allocated: the core may still answer
	}
	TmfResponse r = p->tmr.response;
	g.unlock();
	delete p;
	return r;
}

TmfResponse Loopback::tmf(Nexus *s, TmfType fn, uint64_t lun, uint64_t ref_tag,
                          std::chrono::milliseconds timeout)
{
	return tmf_wait(tmf_start(s, fn, lun, ref_tag), timeout);
}

} // namespace ulp::scsi
