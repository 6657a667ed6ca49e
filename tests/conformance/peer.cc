// SPDX-License-Identifier: MIT
// tests/conformance/peer.cc - in-process and cross-process peers.
#include "tests/conformance/peer.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

namespace ulp::conf
{

// ---------------------------------------------------------------------------------------------
// In-process

namespace
{

class InProcPeer : public Peer
{
public:
	explicit InProcPeer(const FabricDesc &f) : fab_(f) {}
	~InProcPeer() override { shutdown(); }

	bool remote() const override { return false; }

	int listen(const EpConfig &cfg, bool iwarp, SockAddr *addr) override
	{
		std::string why;
		dev_ = open_device(fab_, {1, iwarp}, &why);
		if (!dev_)
			return -ENODEV;
		ep_ = std::make_unique<Endpoint>(fab_, dev_, 1);
		int err = ep_->setup(cfg);
		return err ? err : ep_->listen(addr);
	}
	int wait_cm_event(CmEventType t, int ms) override { return ep_->wait_cm_event(t, ms); }
	MrInfo reg_mr(size_t len, uint32_t access, bool other_pd) override
	{
		return ep_->reg_mr(len, access, other_pd);
	}
	int fill(int mr, uint64_t off, std::span<const uint8_t> d) override
	{
		return ep_->fill(mr, off, d);
	}
	int read(int mr, uint64_t off, uint32_t len, std::vector<uint8_t> *out) override
	{
		return ep_->read(mr, off, len, out);
	}
	int post_recv(int mr, uint64_t off, uint32_t len, int n, uint32_t wr_id) override
	{
		return ep_->post_recv(mr, off, len, n, wr_id);
	}
	int post_send(const PostSend &ps) override { return ep_->post_send(ps); }
	int poll(int n, int ms, std::vector<WcInfo> *out) override { return ep_->poll(n, ms, out); }
	int qp_state(QpState *s) override
	{
		*s = ep_->qp_state();
		return 0;
	}
	int peer_pdata(std::vector<uint8_t> *out) override
	{
		*out = ep_->peer_pdata();
		return 0;
	}
	int event_credits(ReadCredits *out) override { return ep_->event_credits(out); }
	int qp_credits(ReadCredits *out) override { return ep_->qp_credits(out); }
	int disconnect() override { return ep_->disconnect(); }
	int cut() override
	{
		if (!ep_->qp())
			return -ENOTCONN;
		return cut_connection(fab_, *ep_->qp()) ? 0 : -EOPNOTSUPP;
	}
	int kill() override { return -EOPNOTSUPP; }
	int shutdown() override
	{
		ep_.reset();
		close_device(fab_, dev_);
		dev_ = nullptr;
		return 0;
	}

private:
	const FabricDesc &fab_;
	Device *dev_ = nullptr;
	std::unique_ptr<Endpoint> ep_;
};

} // namespace

std::unique_ptr<Peer> make_inproc_peer(const FabricDesc &f)
{
	return std::make_unique<InProcPeer>(f);
}

// ---------------------------------------------------------------------------------------------
// The command protocol: a fixed header and a blob each way. Both ends are this binary, so
// PODs cross as bytes.

namespace
{

enum Op : uint32_t {
	OpListen = 1,
	OpWaitCm,
	OpRegMr,
	OpFill,
	OpRead,
	OpPostRecv,
	OpPostSend,
	OpPoll,
	OpQpState,
	OpPdata,
	OpEventCredits,
	OpQpCredits,
	OpDisconnect,
	OpCut,
	OpExit,
};

struct Hdr {
	uint32_t op = 0;
	int32_t rc = 0;
	uint64_t a[8] = {};
	uint32_t blob_len = 0;
	uint32_t pad = 0;
};

// EpConfig without its vector.
struct EpWire {
	uint32_t max_send_wr, max_recv_wr, max_sge, max_inline, srq_wr;
	int32_t cqe;
	uint8_t srq, shared_cq, responder_resources, initiator_depth, rnr_retry, retry, iwarp;
};

using Clock = std::chrono::steady_clock;

// Wait until fd is readable or the deadline passes. Without a deadline (the server side)
// block: the parent closing its end wakes us with EOF.
int wait_readable(int fd, const Clock::time_point *deadline)
{
	for (;;) {
		int ms = -1;
		if (deadline) {
			auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
			    *deadline - Clock::now());
			if (left.count() <= 0)
				return -ETIMEDOUT;
			ms = static_cast<int>(left.count());
		}
		pollfd p{fd, POLLIN, 0};
		int r = ::poll(&p, 1, ms);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

int read_all(int fd, void *buf, size_t len, const Clock::time_point *deadline)
{
	auto *p = static_cast<uint8_t *>(buf);
	while (len) {
		int err = wait_readable(fd, deadline);
		if (err)
			return err;
		ssize_t r = ::read(fd, p, len);
		if (r == 0)
			return -EPIPE;
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		p += r;
		len -= size_t(r);
	}
	return 0;
}

int write_all(int fd, const void *buf, size_t len)
{
	auto *p = static_cast<const uint8_t *>(buf);
	while (len) {
		ssize_t r = ::send(fd, p, len, MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += r;
		len -= size_t(r);
	}
	return 0;
}

int send_msg(int fd, Hdr h, const void *blob, size_t len)
{
	h.blob_len = static_cast<uint32_t>(len);
	int err = write_all(fd, &h, sizeof(h));
	if (!err && len)
		err = write_all(fd, blob, len);
	return err;
}

int recv_msg(int fd, Hdr *h, std::vector<uint8_t> *blob, const Clock::time_point *deadline)
{
	int err = read_all(fd, h, sizeof(*h), deadline);
	if (err)
		return err;
	if (h->blob_len > (64u << 20))
		return -EPROTO;
	blob->resize(h->blob_len);
	return h->blob_len ? read_all(fd, blob->data(), h->blob_len, deadline) : 0;
}

// ---------------------------------------------------------------------------------------------
// The child

[[noreturn]] void serve(const FabricDesc &f, int fd)
{
	Device *dev = nullptr;
	std::unique_ptr<Endpoint> ep;
	std::vector<uint8_t> blob;
	for (;;) {
		Hdr h;
		if (recv_msg(fd, &h, &blob, nullptr))
			break; // the parent went away
		Hdr r;
		r.op = h.op;
		std::vector<uint8_t> out;
		if (!ep && h.op != OpListen && h.op != OpExit) {
			r.rc = -ENOTCONN;
			send_msg(fd, r, nullptr, 0);
			continue;
		}
		switch (h.op) {
		case OpListen: {
			EpWire w;
			memcpy(&w, blob.data(), sizeof(w));
			EpConfig cfg;
			cfg.max_send_wr = w.max_send_wr;
			cfg.max_recv_wr = w.max_recv_wr;
			cfg.max_sge = w.max_sge;
			cfg.max_inline = w.max_inline;
			cfg.srq_wr = w.srq_wr;
			cfg.cqe = w.cqe;
			cfg.srq = w.srq;
			cfg.shared_cq = w.shared_cq;
			cfg.responder_resources = w.responder_resources;
			cfg.initiator_depth = w.initiator_depth;
			cfg.rnr_retry = w.rnr_retry;
			cfg.retry = w.retry;
			cfg.pdata.assign(blob.begin() + sizeof(w), blob.end());
			std::string why;
			dev = open_device(f, {1, w.iwarp != 0}, &why);
			if (!dev) {
				r.rc = -ENODEV;
				break;
			}
			ep = std::make_unique<Endpoint>(f, dev, 1);
			r.rc = ep->setup(cfg);
			SockAddr addr;
			if (!r.rc)
				r.rc = ep->listen(&addr);
			out.assign(reinterpret_cast<uint8_t *>(&addr),
			           reinterpret_cast<uint8_t *>(&addr) + sizeof(addr));
			break;
		}
		case OpWaitCm:
			r.rc = ep->wait_cm_event(CmEventType(h.a[0]), int(h.a[1]));
			break;
		case OpRegMr: {
			MrInfo m = ep->reg_mr(h.a[0], uint32_t(h.a[1]), h.a[2] != 0);
			r.rc = m.id < 0 ? -ENOMEM : 0;
			out.assign(reinterpret_cast<uint8_t *>(&m),
			           reinterpret_cast<uint8_t *>(&m) + sizeof(m));
			break;
		}
		case OpFill:
			r.rc = ep->fill(int(h.a[0]), h.a[1], blob);
			break;
		case OpRead:
			r.rc = ep->read(int(h.a[0]), h.a[1], uint32_t(h.a[2]), &out);
			break;
		case OpPostRecv:
			r.rc = ep->post_recv(int(int64_t(h.a[0])), h.a[1], uint32_t(h.a[2]),
			                     int(h.a[3]), uint32_t(h.a[4]));
			break;
		case OpPostSend: {
			PostSend ps;
			memcpy(&ps, blob.data(), sizeof(ps));
			r.rc = ep->post_send(ps);
			break;
		}
		case OpPoll: {
			std::vector<WcInfo> wcs;
			r.rc = ep->poll(int(h.a[0]), int(h.a[1]), &wcs);
			out.assign(reinterpret_cast<uint8_t *>(wcs.data()),
			           reinterpret_cast<uint8_t *>(wcs.data() + wcs.size()));
			break;
		}
		case OpQpState:
			r.a[0] = uint64_t(ep->qp_state());
			break;
		case OpPdata:
			out = ep->peer_pdata();
			break;
		case OpEventCredits:
		case OpQpCredits: {
			ReadCredits c;
			r.rc = h.op == OpEventCredits ? ep->event_credits(&c) : ep->qp_credits(&c);
			r.a[0] = c.responder_resources;
			r.a[1] = c.initiator_depth;
			break;
		}
		case OpDisconnect:
			r.rc = ep->disconnect();
			break;
		case OpCut:
			r.rc = !ep->qp()                      ? -ENOTCONN
			       : cut_connection(f, *ep->qp()) ? 0
			                                      : -EOPNOTSUPP;
			break;
		case OpExit:
			ep.reset();
			close_device(f, dev);
			send_msg(fd, r, nullptr, 0);
			_exit(0);
		default:
			r.rc = -EINVAL;
		}
		send_msg(fd, r, out.data(), out.size());
	}
	_exit(3);
}

class XProcPeer : public Peer
{
public:
	XProcPeer(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
	~XProcPeer() override { shutdown(); }

	bool remote() const override { return true; }

	int call(Hdr h, const void *blob, size_t len, int exec_ms, Hdr *reply,
	         std::vector<uint8_t> *out)
	{
		if (fd_ < 0)
			return -EPIPE;
		int err = send_msg(fd_, h, blob, len);
		if (err)
			return err;
		auto d = Clock::now() + std::chrono::milliseconds(exec_ms + kTimeoutMs);
		std::vector<uint8_t> tmp;
		err = recv_msg(fd_, reply, out ? out : &tmp, &d);
		if (err) {
			// A child that does not answer in time is dead to us.
			::close(fd_);
			fd_ = -1;
			return err;
		}
		return reply->rc;
	}

	int listen(const EpConfig &cfg, bool iwarp, SockAddr *addr) override
	{
		EpWire w{cfg.max_send_wr,
		         cfg.max_recv_wr,
		         cfg.max_sge,
		         cfg.max_inline,
		         cfg.srq_wr,
		         cfg.cqe,
		         cfg.srq,
		         cfg.shared_cq,
		         cfg.responder_resources,
		         cfg.initiator_depth,
		         cfg.rnr_retry,
		         cfg.retry,
		         iwarp};
		std::vector<uint8_t> blob(reinterpret_cast<uint8_t *>(&w),
		                          reinterpret_cast<uint8_t *>(&w) + sizeof(w));
		blob.insert(blob.end(), cfg.pdata.begin(), cfg.pdata.end());
		Hdr h, r;
		h.op = OpListen;
		std::vector<uint8_t> out;
		int err = call(h, blob.data(), blob.size(), kTimeoutMs, &r, &out);
		if (!err && out.size() == sizeof(SockAddr))
			memcpy(static_cast<void *>(addr), out.data(), sizeof(SockAddr));
		return err;
	}
	int wait_cm_event(CmEventType t, int ms) override
	{
		Hdr h, r;
		h.op = OpWaitCm;
		h.a[0] = uint64_t(t);
		h.a[1] = uint64_t(ms);
		return call(h, nullptr, 0, ms, &r, nullptr);
	}
	MrInfo reg_mr(size_t len, uint32_t access, bool other_pd) override
	{
		Hdr h, r;
		h.op = OpRegMr;
		h.a[0] = len;
		h.a[1] = access;
		h.a[2] = other_pd;
		std::vector<uint8_t> out;
		MrInfo m;
		if (!call(h, nullptr, 0, 0, &r, &out) && out.size() == sizeof(m))
			memcpy(&m, out.data(), sizeof(m));
		return m;
	}
	int fill(int mr, uint64_t off, std::span<const uint8_t> d) override
	{
		Hdr h, r;
		h.op = OpFill;
		h.a[0] = uint64_t(mr);
		h.a[1] = off;
		return call(h, d.data(), d.size(), 0, &r, nullptr);
	}
	int read(int mr, uint64_t off, uint32_t len, std::vector<uint8_t> *out) override
	{
		Hdr h, r;
		h.op = OpRead;
		h.a[0] = uint64_t(mr);
		h.a[1] = off;
		h.a[2] = len;
		return call(h, nullptr, 0, 0, &r, out);
	}
	int post_recv(int mr, uint64_t off, uint32_t len, int n, uint32_t wr_id) override
	{
		Hdr h, r;
		h.op = OpPostRecv;
		h.a[0] = uint64_t(int64_t(mr));
		h.a[1] = off;
		h.a[2] = len;
		h.a[3] = uint64_t(n);
		h.a[4] = wr_id;
		return call(h, nullptr, 0, 0, &r, nullptr);
	}
	int post_send(const PostSend &ps) override
	{
		Hdr h, r;
		h.op = OpPostSend;
		return call(h, &ps, sizeof(ps), 0, &r, nullptr);
	}
	int poll(int n, int ms, std::vector<WcInfo> *out) override
	{
		Hdr h, r;
		h.op = OpPoll;
		h.a[0] = uint64_t(n);
		h.a[1] = uint64_t(ms);
		std::vector<uint8_t> blob;
		int err = call(h, nullptr, 0, ms, &r, &blob);
		if (err < 0)
			return err;
		size_t cnt = blob.size() / sizeof(WcInfo);
		for (size_t i = 0; i < cnt; i++) {
			WcInfo w;
			memcpy(&w, blob.data() + i * sizeof(w), sizeof(w));
			out->push_back(w);
		}
		return err;
	}
	int qp_state(QpState *s) override
	{
		Hdr h, r;
		h.op = OpQpState;
		int err = call(h, nullptr, 0, 0, &r, nullptr);
		if (!err)
			*s = QpState(r.a[0]);
		return err;
	}
	int peer_pdata(std::vector<uint8_t> *out) override
	{
		Hdr h, r;
		h.op = OpPdata;
		return call(h, nullptr, 0, 0, &r, out);
	}
	int event_credits(ReadCredits *out) override { return credits(OpEventCredits, out); }
	int qp_credits(ReadCredits *out) override { return credits(OpQpCredits, out); }
	int credits(Op op, ReadCredits *out)
	{
		Hdr h, r;
		h.op = op;
		int err = call(h, nullptr, 0, 0, &r, nullptr);
		if (!err) {
			out->responder_resources = uint32_t(r.a[0]);
			out->initiator_depth = uint32_t(r.a[1]);
		}
		return err;
	}
	int disconnect() override
	{
		Hdr h, r;
		h.op = OpDisconnect;
		return call(h, nullptr, 0, 0, &r, nullptr);
	}
	int cut() override
	{
		Hdr h, r;
		h.op = OpCut;
		return call(h, nullptr, 0, 0, &r, nullptr);
	}
	int kill() override
	{
		if (pid_ <= 0)
			return -ESRCH;
		::kill(pid_, SIGKILL);
		reap(kTimeoutMs);
		return 0;
	}
	int shutdown() override
	{
		int rc = 0;
		if (fd_ >= 0) {
			Hdr h, r;
			h.op = OpExit;
			rc = call(h, nullptr, 0, 0, &r, nullptr);
			if (fd_ >= 0)
				::close(fd_);
			fd_ = -1;
		}
		if (pid_ > 0) {
			int st = reap(kTimeoutMs);
			if (st != 0)
				fprintf(stderr, "conformance peer: exit reply %d, status %s %d\n", rc,
				        st > 128 ? "signal" : "exit", st > 128 ? st - 128 : st);
			if (rc == 0 && st != 0)
				rc = -ECHILD;
		}
		return rc;
	}

private:
	// waitpid with a deadline; SIGKILL when it passes. Returns the exit status
	// (128+signal when killed), or -1 when there was nothing to reap.
	int reap(int ms)
	{
		if (pid_ <= 0)
			return -1;
		auto d = Clock::now() + std::chrono::milliseconds(ms);
		int st = 0;
		for (;;) {
			pid_t r = waitpid(pid_, &st, WNOHANG);
			if (r == pid_)
				break;
			if (r < 0 && errno != EINTR) {
				pid_ = -1;
				return -1;
			}
			if (Clock::now() >= d) {
				::kill(pid_, SIGKILL);
				waitpid(pid_, &st, 0);
				break;
			}
			std::this_thread::sleep_for(std::chrono::milliseconds(2));
		}
		pid_ = -1;
		if (fd_ >= 0) {
			::close(fd_);
			fd_ = -1;
		}
		return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	}

	pid_t pid_;
	int fd_;
};

int thread_count()
{
	std::ifstream in("/proc/self/status");
	std::string line;
	while (std::getline(in, line))
		if (line.rfind("Threads:", 0) == 0)
			return atoi(line.c_str() + 8);
	return -1;
}

} // namespace

std::unique_ptr<Peer> spawn_xproc_peer(const FabricDesc &f)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return nullptr;
	bool threaded = thread_count() != 1;
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0) {
		::close(sv[0]);
		::close(sv[1]);
		return nullptr;
	}
	if (pid == 0) {
		::close(sv[0]);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (!threaded)
			serve(f, sv[1]);
		// Threads of the parent do not exist here, but their state does: start over.
		std::string a1 = "--conformance-peer=" + std::to_string(sv[1]);
		std::string a2 = "--conformance-fabric=" + f.name;
		char *argv[] = {const_cast<char *>("conformance_test"), a1.data(), a2.data(),
		                nullptr};
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	::close(sv[1]);
	return std::make_unique<XProcPeer>(pid, sv[0]);
}

void run_peer_server(const std::string &fabric_name, int fd)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	serve(fabric(fabric_name), fd);
}

} // namespace ulp::conf
