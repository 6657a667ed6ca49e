// SPDX-License-Identifier: MIT
// examples/echo.cc - a request/response ULP on ulp's rdma_conn layer.
//
// The smallest protocol with the shape of iSER or SRP: a server listens on an RDMA/CM
// portal (rdma::Portal) and accepts connections (rdma::PortalConn); a client connects
// (rdma::ClientConn), sends requests in SENDs and gets one response per request. Both ends
// keep their buffers in descriptor rings of registered memory (rdma::RecvRing and
// rdma::SendRing) and find a descriptor again from its completion (container_of on the
// embedded Cqe).
//
// The protocol: a message is an 8-byte header (sequence number and text length, network
// byte order) and up to kMaxText bytes of text. The server answers each request with the
// same sequence number and the text in upper case. The connect request carries a version
// string in its private data, and the accept answers with one; a client with another
// version would be rejected.
//
// Threads, as rdma_conn runs them (docs/library.md, "Threads and locking"):
//   server  CM events on the provider's CM thread (PortalConn::on_cm_event); completions on
//           the poller thread of the connection's CQ (from the device's CQ pool, Softirq
//           context): one thread at a time per CQ; the portal's event thread drains and
//           frees closed connections.
//   client  one thread, main(): it connects, posts, and sleeps in rdma::wait_events until a
//           completion or a CM event comes, then runs the completions itself (Direct CQ).
//
// Everything runs in this process on two soft-provider devices, 127.0.0.1 (server) and
// 127.0.0.2 (client); the connection between them uses the soft provider's in-process
// wire. Exit status 0 when every response came back right, 1 otherwise.
#include "core/cm.h"
#include "core/device.h"
#include "providers/soft/soft.h"
#include "rdma_conn/client.h"
#include "rdma_conn/portal.h"
#include "rdma_conn/ring.h"

#include <arpa/inet.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace ulp;
using namespace std::chrono_literals;

namespace
{

constexpr uint32_t kMaxText = 256;              // longest text in a message, bytes
constexpr size_t kMsgBytes = 8 + kMaxText;      // a ring buffer: header + text
constexpr uint32_t kWindow = 4;                 // requests a client has in flight at most
constexpr const char kVersion[] = "ulp-echo/1"; // the connect's private data
constexpr auto kConnectBound = 5s;              // the whole connect sequence
constexpr auto kDrainBound = 2s;                // a drain, per queue

[[noreturn]] void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	std::fprintf(stderr, "echo: ");
	std::vfprintf(stderr, fmt, ap);
	std::fprintf(stderr, "\n");
	va_end(ap);
	std::exit(1);
}

// ---- The wire format -----------------------------------------------------------------------

// Write a message into buf (kMsgBytes): its length in bytes.
uint32_t put_msg(void *buf, uint32_t seq, const std::string &text)
{
	auto *b = static_cast<uint8_t *>(buf);
	const uint32_t len = static_cast<uint32_t>(std::min<size_t>(text.size(), kMaxText));
	const uint32_t hdr[2] = {htonl(seq), htonl(len)};
	std::memcpy(b, hdr, sizeof(hdr));
	std::memcpy(b + 8, text.data(), len);
	return 8 + len;
}

// Read a message of n bytes (a receive's byte_len). false when it is malformed.
bool get_msg(const void *buf, uint32_t n, uint32_t *seq, std::string *text)
{
	if (n < 8)
		return false;
	uint32_t hdr[2];
	std::memcpy(hdr, buf, sizeof(hdr));
	const uint32_t len = ntohl(hdr[1]);
	if (len > kMaxText || 8 + len != n)
		return false;
	*seq = ntohl(hdr[0]);
	text->assign(static_cast<const char *>(buf) + 8, len);
	return true;
}

// ---- The server ------------------------------------------------------------------------------

// A descriptor of each ring: rdma_conn's, plus a pointer back to the connection (the kernel's
// isert_rx_desc / srpt_recv_ioctx keep the same).
class EchoConn;
struct Rx : rdma::RecvDesc {
	EchoConn *conn = nullptr;
	uint32_t len = 0; // bytes received (while the request waits for an answer)
};
struct Tx : rdma::SendDesc {
	EchoConn *conn = nullptr;
};

// One accepted connection. Its completions all come to one CQ, processed by one poller
// thread at a time, so the rings and the wait list are touched by one thread at a time
// while the connection is up; lock_ still guards them, because after a disconnect the
// portal's event thread asks finished() and frees the rings (release_resources).
class EchoConn final : public rdma::PortalConn
{
public:
	EchoConn(rdma::Portal &p, std::unique_ptr<CmId> id) : PortalConn(p, std::move(id)) {}
	~EchoConn() override { EchoConn::release_resources(); }

	// Rings, QP, receives posted: all before the accept, so that the client's first
	// request finds a receive waiting (else it would sit in RNR retry).
	int setup(Pd &pd, std::string *why)
	{
		// Twice the client's window of send buffers: a response's buffer comes back only
		// when its SEND has been acknowledged, which may be after the client sent the next
		// request. Should they still run out, a request waits (waiting_) for one.
		const uint32_t nrecv = kWindow, nsend = 2 * kWindow;
		int rc = recvs_.init(pd, kMsgBytes, nrecv, [this](Rx &d) {
			d.cqe.done = recv_done;
			d.conn = this;
		});
		if (!rc)
			rc = sends_.init(pd, kMsgBytes, nsend, [this](Tx &d) {
				d.cqe.done = send_done;
				d.conn = this;
			});
		if (rc) {
			*why = std::string("rings: ") + std::strerror(-rc);
			return rc;
		}
		// The QP; its CQ comes from the device's CQ pool (create_qp takes it). The +1
		// send and receive WR are drain's markers (core/drain.h). No rw contexts: this
		// protocol moves its data in the SENDs themselves.
		QpInitAttr qa;
		qa.cap.max_send_wr = nsend + 1;
		qa.cap.max_recv_wr = nrecv + 1;
		qa.cap.max_send_sge = 1;
		qa.cap.max_recv_sge = 1;
		if ((rc = create_qp(pd, qa, nullptr, why)) != 0)
			return rc;
		if ((rc = recvs_.post_all(*qp())) != 0) {
			*why = std::string("post_recv: ") + std::strerror(-rc);
			return rc;
		}
		return 0;
	}

	uint64_t answered() const { return answered_.load(); }

	// CM thread. A disconnect (from the client, or a device going away) closes the
	// connection: the portal drains its QP and then frees it on its event thread.
	void on_cm_event(CmEvent &ev) override
	{
		switch (ev.event) {
		case CmEventType::Established:
			std::printf("server: %s connected\n", describe().c_str());
			break;
		case CmEventType::Disconnected:
		case CmEventType::DeviceRemoval:
			close("disconnected");
			break;
		default:
			break;
		}
	}
	void tick(std::chrono::steady_clock::time_point) override {} // no timers
	void run_kicked() override {}                                // nothing deferred
	// Event thread, after the drain: every WR came back, so nothing is left in flight.
	bool finished() override { return true; }
	void release_resources() override
	{
		// The QP and its CQ first: no completion may touch the rings once they go.
		rdma::PortalConn::release_resources();
		std::lock_guard g(lock_);
		waiting_.clear();
		recvs_.release();
		sends_.release();
	}
	std::string describe() override { return id().peer_addr().str(); }

	// Any thread: stop answering, disconnect (the QP goes to ERR and every WR posted
	// comes back flushed), and let the portal drain and free the connection. Once.
	void close(const char *why)
	{
		if (closing_.exchange(true))
			return;
		std::printf("server: %s closing (%s) after %llu requests\n", describe().c_str(),
		            why, static_cast<unsigned long long>(answered_.load()));
		id().disconnect();
		portal().schedule_close(this);
	}

private:
	// Poller thread: a request arrived (or a receive was flushed by the close).
	static void recv_done(Cq *, Wc *wc)
	{
		Rx *d = rdma::RecvRing<Rx>::from(wc);
		EchoConn *c = d->conn;
		if (wc->status != WcStatus::Success) {
			// A flush after close is expected; anything else is a broken connection.
			if (wc->status != WcStatus::WrFlushErr)
				c->close(wc_status_str(wc->status));
			return;
		}
		std::lock_guard g(c->lock_);
		d->len = wc->byte_len;
		c->waiting_.push_back(d);
		c->serve();
	}

	// Poller thread: a response's SEND completed; its buffer is free for the next one.
	static void send_done(Cq *, Wc *wc)
	{
		Tx *d = rdma::SendRing<Tx>::from(wc);
		EchoConn *c = d->conn;
		std::lock_guard g(c->lock_);
		c->sends_.put(d);
		if (wc->status != WcStatus::Success) {
			if (wc->status != WcStatus::WrFlushErr)
				c->close(wc_status_str(wc->status));
			return;
		}
		c->serve();
	}

	// Answer the waiting requests while send buffers last: build the response, give the
	// request's buffer back to the receive queue (before the response goes out, so that
	// the client, which sends its next request on seeing the response, finds a receive),
	// then post the SEND. lock_ held.
	void serve()
	{
		while (!closing_ && !waiting_.empty() && !sends_.empty()) {
			Rx *rx = waiting_.front();
			waiting_.pop_front();
			uint32_t seq;
			std::string text;
			if (!get_msg(rx->buf->addr, rx->len, &seq, &text)) {
				close("malformed request");
				return;
			}
			for (char &ch : text)
				ch =
				    static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
			Tx *tx = sends_.get();
			const uint32_t n = put_msg(tx->buf->addr, seq, text);
			if (int rc = recvs_.post(*qp(), *rx); rc != 0) {
				sends_.put(tx);
				close("post_recv failed");
				return;
			}
			rdma::prepare_send(*tx, n); // one SGE over the buffer, signaled
			const SendWr *bad = nullptr;
			if (int rc = qp()->post_send(&tx->wr, &bad); rc != 0) {
				sends_.put(tx);
				close("post_send failed");
				return;
			}
			answered_++;
		}
	}

	std::mutex lock_;          // guards the rings' free list and waiting_
	rdma::RecvRing<Rx> recvs_; // every receive buffer; all posted but those waiting
	rdma::SendRing<Tx> sends_; // response buffers; the free list
	std::deque<Rx *> waiting_; // requests received, not yet answered (no send buffer)
	std::atomic<bool> closing_{false};
	std::atomic<uint64_t> answered_{0}; // responses posted
};

// The listening side: the portal asks it what to do with each connect request.
class EchoServer final : public rdma::Portal
{
public:
	EchoServer(Provider &prov, const rdma::PortalConfig &cfg) : Portal(prov, cfg) {}
	~EchoServer() override { stop(); }

protected:
	// CM thread. res holds the device's PD (made once per device by the portal).
	std::unique_ptr<rdma::PortalConn> on_connect_request(CmEvent &ev, rdma::DeviceRes &res,
	                                                     ConnParam *accept,
	                                                     std::vector<uint8_t> *reject) override
	{
		auto pd = ev.param.pdata();
		if (pd.size() < sizeof(kVersion) ||
		    std::memcmp(pd.data(), kVersion, sizeof(kVersion)) != 0) {
			const std::string no = "unsupported version";
			reject->assign(no.begin(), no.end());
			return nullptr; // the portal rejects with *reject as private data
		}
		auto c = std::make_unique<EchoConn>(*this, std::move(ev.new_id));
		std::string why;
		if (c->setup(*res.pd, &why) != 0) {
			std::fprintf(stderr, "server: connection refused: %s\n", why.c_str());
			// The id went into c: reject it ourselves. Nothing can have arrived on a
			// connection never accepted, so it is freed here without a drain.
			c->id().reject({});
			c->release_resources();
			return nullptr;
		}
		accept->set_private_data(
		    std::span(reinterpret_cast<const uint8_t *>(kVersion), sizeof(kVersion)));
		return c;
	}

	// CM thread: the accept failed. Receives are posted, so the connection goes down the
	// usual way: disconnect, drain, free.
	void accept_failed(rdma::PortalConn *c, int rc) override
	{
		std::fprintf(stderr, "server: accept: %s\n", std::strerror(-rc));
		static_cast<EchoConn *>(c)->close("accept failed");
	}
};

// ---- The client ----------------------------------------------------------------------------

// The client's descriptors need nothing beyond rdma_conn's; its completion callbacks find
// the client through a pointer kept next to the ring.
struct EchoClient;
struct CRx : rdma::RecvDesc {
	EchoClient *client = nullptr;
};
struct CTx : rdma::SendDesc {
	EchoClient *client = nullptr;
};

// The active side. Single-threaded: main() connects, posts and runs every completion
// (rdma::DirectCq) itself, so nothing here needs a lock.
struct EchoClient {
	std::unique_ptr<Pd> pd;
	rdma::DirectCq cq;
	rdma::ClientConn conn;
	rdma::RecvRing<CRx> recvs;
	rdma::SendRing<CTx> sends;
	std::vector<std::string> sent; // the text of request i (its sequence number)
	uint32_t in_flight = 0;        // requests sent, response not yet received
	uint32_t responses = 0;        // responses received and checked
	std::string error;             // the first thing that went wrong

	// Runs on main()'s thread inside connect(), once the route names the device: the
	// PD, the CQ, the QP, the rings, and the receives the responses will land in.
	int setup(CmId &id, ConnParam *cp, std::string *why)
	{
		Device &dev = *id.device();
		pd = dev.alloc_pd();
		if (!pd) {
			*why = "alloc_pd";
			return -ENOMEM;
		}
		// One CQ for both queues: kWindow receives, kWindow sends, drain's 2.
		if (int rc = cq.create(dev, 2 * kWindow + 2, why))
			return rc;
		int rc = recvs.init(*pd, kMsgBytes, kWindow, [this](CRx &d) {
			d.cqe.done = recv_done;
			d.client = this;
		});
		if (!rc)
			rc = sends.init(*pd, kMsgBytes, kWindow, [this](CTx &d) {
				d.cqe.done = send_done;
				d.client = this;
			});
		if (rc) {
			*why = std::string("rings: ") + std::strerror(-rc);
			return rc;
		}
		QpInitAttr qa;
		qa.send_cq = qa.recv_cq = cq.cq();
		qa.cap.max_send_wr = kWindow + 1;
		qa.cap.max_recv_wr = kWindow + 1;
		qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
		if ((rc = id.create_qp(*pd, qa)) != 0) {
			*why = std::string("create_qp: ") + std::strerror(-rc);
			return rc;
		}
		if ((rc = recvs.post_all(*id.qp())) != 0) {
			*why = std::string("post_recv: ") + std::strerror(-rc);
			return rc;
		}
		cp->set_private_data(
		    std::span(reinterpret_cast<const uint8_t *>(kVersion), sizeof(kVersion)));
		cp->rnr_retry_count = 7; // infinite: a request waits for the server's receive
		return 0;
	}

	// Send request seq (its text is sent[seq]). 0 or a negative errno.
	int send(uint32_t seq)
	{
		CTx *d = sends.get();
		if (!d)
			return -EAGAIN; // main() checks for a free one first
		rdma::prepare_send(*d, put_msg(d->buf->addr, seq, sent[seq]));
		const SendWr *bad = nullptr;
		if (int rc = conn.qp()->post_send(&d->wr, &bad)) {
			sends.put(d);
			return rc;
		}
		in_flight++;
		return 0;
	}

	// main()'s thread, inside cq.process(): a response arrived.
	static void recv_done(Cq *, Wc *wc)
	{
		CRx *d = rdma::RecvRing<CRx>::from(wc);
		EchoClient *c = d->client;
		if (wc->status != WcStatus::Success) {
			if (wc->status != WcStatus::WrFlushErr && c->error.empty())
				c->error = std::string("receive: ") + wc_status_str(wc->status);
			return;
		}
		uint32_t seq;
		std::string text;
		if (!get_msg(d->buf->addr, wc->byte_len, &seq, &text) || seq >= c->sent.size()) {
			c->error = "malformed response";
			return;
		}
		std::string want = c->sent[seq];
		for (char &ch : want)
			ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
		std::printf("client: #%u \"%s\" -> \"%s\"\n", seq, c->sent[seq].c_str(),
		            text.c_str());
		if (text != want && c->error.empty())
			c->error = "response " + std::to_string(seq) + " is \"" + text +
			           "\", expected \"" + want + "\"";
		c->responses++;
		c->in_flight--;
		// The buffer is read: back to the receive queue for the next response.
		if (int rc = c->recvs.post(*c->conn.qp(), *d); rc != 0 && c->error.empty())
			c->error = std::string("post_recv: ") + std::strerror(-rc);
	}

	// main()'s thread: a request's SEND completed (acknowledged), its buffer is free.
	static void send_done(Cq *, Wc *wc)
	{
		CTx *d = rdma::SendRing<CTx>::from(wc);
		d->client->sends.put(d);
		if (wc->status != WcStatus::Success && wc->status != WcStatus::WrFlushErr &&
		    d->client->error.empty())
			d->client->error = std::string("send: ") + wc_status_str(wc->status);
	}
};

// Wait until the portal has freed every connection (it does so on its event thread once
// the client's disconnect has been drained). Bounded.
bool wait_no_conns(rdma::Portal &portal)
{
	for (auto end = std::chrono::steady_clock::now() + 5s;
	     std::chrono::steady_clock::now() < end; std::this_thread::sleep_for(5ms))
		if (portal.conns() == 0)
			return true;
	return false;
}

struct DevDeleter {
	void operator()(Device *d) const { soft::destroy_device(d); }
};

} // namespace

int main()
{
	// The two "hosts": a soft device each. Their addresses are what the CM binds and
	// resolves; the provider finds the server's listener in this process.
	soft::DeviceConfig dc;
	dc.ip = "127.0.0.1";
	std::unique_ptr<Device, DevDeleter> server_dev(soft::create_device(dc));
	dc.ip = "127.0.0.2";
	std::unique_ptr<Device, DevDeleter> client_dev(soft::create_device(dc));
	if (!server_dev || !client_dev)
		die("soft::create_device: %s", std::strerror(errno));

	// The server: a portal on 127.0.0.1, port chosen by the provider, its event thread
	// started. heap_bytes/max_io size the registered data heap the portal makes per
	// device for protocols that move data by RDMA; echo has none, so keep it small.
	rdma::PortalConfig pc;
	pc.name = "echo";
	pc.heap_bytes = 1u << 20;
	pc.max_io = 64u << 10;
	auto server = std::make_unique<EchoServer>(soft::provider(), pc);
	std::string why;
	if (server->listen(*SockAddr::parse("127.0.0.1:0"), &why) != 0)
		die("listen: %s", why.c_str());
	if (int rc = server->start())
		die("portal start: %s", std::strerror(-rc));
	std::printf("server: listening on %s\n", server->addr().c_str());

	// The client: connect from 127.0.0.2 within kConnectBound.
	EchoClient client;
	rdma::ClientParams cp;
	cp.provider = &soft::provider();
	cp.dst = *SockAddr::parse(server->addr());
	cp.src = SockAddr::parse("127.0.0.2:0");
	cp.deadline = std::chrono::steady_clock::now() + kConnectBound;
	cp.setup = [&client](CmId &id, ConnParam *p, std::string *w) {
		return client.setup(id, p, w);
	};
	rdma::CmRec reply;
	if (int rc = client.conn.connect(cp, &reply, &why); rc != 0)
		die("connect: %s (%s)", why.c_str(), std::strerror(-rc));
	std::printf(
	    "client: connected to %s, the server says \"%.*s\"\n", server->addr().c_str(),
	    static_cast<int>(strnlen(reinterpret_cast<const char *>(reply.param.pdata().data()),
	                             reply.param.pdata().size())),
	    reinterpret_cast<const char *>(reply.param.pdata().data()));

	// Requests, at most kWindow in flight: the server has kWindow receives posted and
	// re-posts each one before it answers, so a client within its window never finds the
	// server without a receive. Between sends the client sleeps in wait_events: on the
	// CQ's channel (a completion) and on the connection's CM mailbox (a disconnect).
	client.sent = {"hello",         "rdma",    "request/response", "over rdma_conn", "ring",
	               "of registered", "buffers", "and a portal",     "goodbye"};
	rdma::ClientConn *const conns[] = {&client.conn};
	auto reap = [&client] { return client.cq.process(); };
	uint32_t next = 0;
	const auto end = std::chrono::steady_clock::now() + 10s;
	while (client.responses < client.sent.size() && client.error.empty()) {
		// A request needs a credit (a response slot within the window) and a free send
		// buffer: a buffer comes back only when its SEND is acknowledged, which can be
		// after the response to it arrived.
		while (next < client.sent.size() && client.in_flight < kWindow &&
		       !client.sends.empty())
			if (int rc = client.send(next++); rc != 0)
				die("send: %s", std::strerror(-rc));
		if (std::chrono::steady_clock::now() > end)
			die("only %u of %zu responses within 10 s", client.responses,
			    client.sent.size());
		if (int rc = rdma::wait_events(&client.cq, conns, 100, reap, &why); rc < 0)
			die("wait_events: %s", why.c_str());
		if (auto gone = client.conn.take_events(reap))
			die("connection lost: %s", gone->c_str());
	}
	if (!client.error.empty())
		die("%s", client.error.c_str());

	// Close: the QP to ERR and a disconnect to the server; every WR still posted (the
	// receives that got no response) comes back flushed through its done(), run here by
	// drain. Only then may the rings' buffers go, then the QP and the id, then the CQ.
	if (int rc = client.conn.drain(kDrainBound))
		die("drain: %s", std::strerror(-rc));
	client.conn.destroy_qp();
	client.recvs.release();
	client.sends.release();
	client.conn.release();
	client.cq.destroy();
	client.pd.reset();

	// The server saw the disconnect: its connection is drained and freed by the portal.
	if (!wait_no_conns(*server))
		die("the server did not free its connection");
	server.reset(); // stop(): the event thread, the device's PD, heap and CQ pool
	std::printf("echo: OK, %zu requests answered\n", client.sent.size());
	return 0;
}
