// SPDX-License-Identifier: MIT
// ha/pr_cluster.cc - a LU's reservations in one RADOS object (pr_cluster.h).
#include "ha/pr_cluster.h"

#include "core/bounded_thread.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "ha/records.h"
#include "scsi/lu.h"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <set>
#include <utility>

namespace ulp::ha
{

namespace
{

constexpr std::string_view kPrPrefix = "pr."; // pr_shared.h's records
// Compare-and-set rounds for this gateway's record before giving up (until the next tick).
constexpr int kRecordTries = 16;

using namespace std::chrono_literals;

} // namespace

// A thread running jobs in the order they were posted; stop() ends it after the job it is
// running (the queued ones are dropped: the owner has none left that matter).
class PrCluster::Worker
{
public:
	explicit Worker(std::string what) : what_(std::move(what)) {}
	~Worker() { stop(); }

	void start(const char *name)
	{
		thr_.start([this, name] {
			set_thread_name(name);
			std::unique_lock g(lock_);
			for (;;) {
				cv_.wait(g, [&] { return stop_ || !jobs_.empty(); });
				if (stop_)
					return;
				std::function<void()> j = std::move(jobs_.front());
				jobs_.pop_front();
				g.unlock();
				j();
				g.lock();
			}
		});
	}
	void post(std::function<void()> j)
	{
		std::lock_guard g(lock_);
		if (stop_)
			return;
		jobs_.push_back(std::move(j));
		cv_.notify_all();
	}
	void stop()
	{
		size_t dropped = 0;
		{
			std::lock_guard g(lock_);
			stop_ = true;
			dropped = jobs_.size();
			jobs_.clear();
			cv_.notify_all();
		}
		if (dropped)
			ULP_LOG(Warn, Ha, "{}: {} jobs dropped at stop", what_, dropped);
		thr_.join(log::Sub::Ha, what_.c_str());
	}

private:
	const std::string what_; // for log lines
	BoundedThread thr_;
	std::mutex lock_;                        // guards the two below
	std::condition_variable cv_;             // a job, or stop
	std::deque<std::function<void()>> jobs_; // posted, not yet run
	bool stop_ = false;                      // no more jobs
};

// Answers to notifies go through the map while this PrCluster lives, and nowhere after (an
// answer can come from the end of an abort, on any thread, at any time).
struct PrCluster::AckBox {
	std::mutex lock;
	ClusterMap *map = nullptr; // null: gone

	void ack(const ClusterMapNotify &n)
	{
		std::lock_guard g(lock);
		if (map)
			map->ack(n);
	}
};

std::string pr_cluster_oid(const std::string &identity)
{
	// lu_derived_serial: 16 hex digits of a 64-bit FNV-1a hash, what the LU's serial number
	// is made of too. Object names stay short whatever the identity.
	return "ulp.pr." + scsi::lu_derived_serial(identity);
}

PrCluster::PrCluster(scsi::LogicalUnit &lu, std::shared_ptr<scsi::RadosClient> client,
                     PrClusterConfig cfg, std::unique_ptr<ClusterMap> map)
    : lu_(lu), client_(std::move(client)), cfg_(std::move(cfg)), map_(std::move(map)),
      gid_(rados_get_instance_id(client_->cluster)),
      addr_(scsi::rados_client_addr(client_->cluster)),
      out_(std::make_unique<Worker>("LU " + lu.name() + ": reservations thread")),
      watch_(std::make_unique<Worker>("LU " + lu.name() + ": reservation watch thread")),
      acks_(std::make_shared<AckBox>()), attached_(std::chrono::steady_clock::now())
{
	acks_->map = map_.get();
}

std::unique_ptr<PrCluster> PrCluster::attach(scsi::LogicalUnit &lu,
                                             std::shared_ptr<scsi::RadosClient> client,
                                             PrClusterConfig cfg, int *err, std::string *why)
{
	if (cfg.identity.empty())
		cfg.identity = lu.bs().identity();
	if (cfg.identity.empty() || !ha_name_valid(cfg.gateway) || cfg.notify_timeout < 1s) {
		*err = -EINVAL;
		*why = "LU " + lu.name() + ": shared reservations need " +
		       (cfg.identity.empty() ? std::string("an identity (the backstore has none)")
		        : !ha_name_valid(cfg.gateway) ? "a gateway name of [A-Za-z0-9._-]"
		                                      : "a notify timeout of 1 s or more");
		return nullptr;
	}
	const std::string oid = pr_cluster_oid(cfg.identity);
	auto map = ClusterMap::open(client, cfg.pool, cfg.nspace, oid, err, why);
	if (!map)
		return nullptr;
	std::unique_ptr<PrCluster> pc(new PrCluster(lu, client, std::move(cfg), std::move(map)));
	// This gateway's record first (it creates the object: a watch needs one), then the
	// watch, then the state read: no change after the read goes unheard. Notifies wait in
	// the watch thread's queue until the state is installed.
	if (int r = pc->write_record(false, false); r < 0) {
		*err = r;
		*why = "LU " + lu.name() + ": writing this gateway's record in " + oid + ": " +
		       scsi::rados_strerror(r);
		return nullptr;
	}
	PrCluster *self = pc.get();
	if (int r = pc->map_->watch_acked([self](const ClusterMapNotify *n) { self->on_watch(n); });
	    r < 0) {
		*err = r;
		*why = "LU " + lu.name() + ": watching " + oid + ": " + scsi::rados_strerror(r);
		pc->write_record(true, false);
		return nullptr;
	}
	if (int r = scsi::pr_attach_shared(lu, *pc, pc->cfg_.identity, why); r < 0) {
		*err = r;
		pc->map_->unwatch();
		pc->write_record(true, false);
		return nullptr;
	}
	pc->out_->start("ulp-pr-out");
	pc->watch_->start("ulp-pr-watch");
	ULP_LOG(Info, Ha, "LU {}: reservations in {}/{} as gateway {} (client.{})", lu.name(),
	        pc->cfg_.pool, oid, pc->cfg_.gateway, pc->gid_);
	return pc;
}

PrCluster::~PrCluster()
{
	if (!stop_sharing())
		return; // abandon() ran: the record stays
	if (int r = write_record(true, false); r < 0)
		ULP_LOG(Warn, Ha, "LU {}: removing this gateway's record from {}: {}", lu_.name(),
		        oid(), scsi::rados_strerror(r));
}

void PrCluster::abandon()
{
	if (stop_sharing())
		ULP_LOG(Info, Ha,
		        "LU {}: reservations in {} left as they are (this client is fenced)",
		        lu_.name(), oid());
}

bool PrCluster::stop_sharing()
{
	if (std::exchange(unshared_, true))
		return false;
	// No callback runs after this. librados frees the watch only so; the OSD refuses a
	// blocklisted client at once, and an unreachable one's wait is the client's
	// rados_osd_op_timeout (RadosConfig::timeout_s).
	map_->unwatch();
	// lu is no longer exported: a job already in a RADOS call ends within the client's
	// timeouts, and what is queued is dropped.
	out_->stop();
	watch_->stop();
	{
		std::lock_guard g(acks_->lock);
		acks_->map = nullptr;
	}
	scsi::pr_detach_shared(lu_, *this); // not ours when attach failed: left alone
	return true;
}

void PrCluster::on_watch(const ClusterMapNotify *n)
{
	// librados' watch thread: only hand it over.
	if (!n) {
		reread();
		return;
	}
	// This gateway's own announcement: it installed the change before making it, and its
	// completion waits for its own aborted tasks itself.
	if (n->notifier == gid_) {
		acks_->ack(*n);
		return;
	}
	const ClusterMapNotify copy = *n;
	std::shared_ptr<AckBox> acks = acks_;
	watch_->post([this, copy, acks] {
		scsi::pr_shared_changed(lu_, copy.version, [acks, copy](bool ok) {
			// Not installed: no answer, and the notifier fences this gateway rather
			// than believe it enforces the change.
			if (ok)
				acks->ack(copy);
		});
	});
}

void PrCluster::reread()
{
	// Changes may have been missed: read the state again. Should that fail (the client
	// cut off for now), the next check_watch() tries again.
	std::shared_ptr<std::atomic<bool>> again = reread_;
	watch_->post([this, again] {
		scsi::pr_shared_changed(lu_, 0, [again](bool ok) {
			if (!ok)
				again->store(true);
		});
	});
}

void PrCluster::post(std::function<void()> job)
{
	out_->post(std::move(job));
}

std::string PrCluster::own_record(std::vector<uint16_t> *ports) const
{
	*ports = lu_.ports();
	return pr_gateway_record_encode({cfg_.gateway, addr_, *ports});
}

int PrCluster::read(scsi::PrSharedView *out)
{
	ClusterMapView v;
	if (int r = map_->read(&v); r < 0)
		return r;
	out->version = v.version;
	out->records.clear();
	std::set<uint16_t> ports;
	for (uint16_t p : lu_.ports())
		ports.insert(p);
	for (auto &[k, val] : v.records) {
		uint64_t gid = 0;
		PrGatewayRecord g;
		if (k.starts_with(kPrPrefix))
			out->records.emplace(k, std::move(val));
		else if (pr_gateway_key_decode(k, &gid) && pr_gateway_record_decode(val, &g))
			ports.insert(g.ports.begin(), g.ports.end());
	}
	out->ports.assign(ports.begin(), ports.end());
	return 0;
}

int PrCluster::write(uint64_t expect, const scsi::PrSharedChange &c, uint64_t *now)
{
	ClusterMapChange mc;
	mc.set = c.set;
	mc.erase = c.erase;
	// This gateway's record rides along when its ports changed since it was written.
	std::vector<uint16_t> ports;
	const std::string rec = own_record(&ports);
	std::lock_guard g(reg_lock_);
	const bool stale = ports != reg_ports_;
	if (stale)
		mc.set[pr_gateway_key(gid_)] = rec;
	const int r = map_->put(expect, mc, now);
	if (r == 0 && stale)
		reg_ports_ = std::move(ports);
	return r;
}

int PrCluster::write_record(bool erase, bool prune)
{
	std::vector<uint16_t> ports;
	const std::string rec = own_record(&ports);
	const std::string key = pr_gateway_key(gid_);
	for (int i = 0; i < kRecordTries; i++) {
		ClusterMapView v;
		if (int r = map_->read(&v); r < 0)
			return r;
		ClusterMapChange c;
		if (erase) {
			if (!v.records.count(key))
				return 0;
			c.erase.push_back(key);
		} else {
			const auto it = v.records.find(key);
			if (it == v.records.end() || it->second != rec)
				c.set[key] = rec;
		}
		if (prune)
			for (const auto &[k, val] : v.records) {
				uint64_t gid = 0;
				PrGatewayRecord g;
				if (pr_gateway_key_decode(k, &gid) && gid != gid_ &&
				    pr_gateway_record_decode(val, &g) && g.gw == cfg_.gateway)
					c.erase.push_back(k);
			}
		if (c.set.empty() && c.erase.empty()) {
			std::lock_guard g(reg_lock_);
			reg_ports_ = std::move(ports);
			return 0;
		}
		uint64_t now = 0;
		const int r = map_->put(v.version, c, &now);
		if (r == -ECANCELED)
			continue;
		if (r == 0) {
			std::lock_guard g(reg_lock_);
			reg_ports_ = std::move(ports);
			if (prune && !c.erase.empty())
				ULP_LOG(Info, Ha,
				        "LU {}: {} records of earlier processes of gateway {} "
				        "removed from {}",
				        lu_.name(), c.erase.size(), cfg_.gateway, oid());
		}
		return r;
	}
	return -EBUSY;
}

int PrCluster::announce(uint64_t version)
{
	ClusterMapNotified heard;
	const auto t0 = std::chrono::steady_clock::now();
	// The OSD counts a notify's timeout in whole seconds (librados divides by 1000).
	const auto timeout = std::chrono::duration_cast<std::chrono::seconds>(cfg_.notify_timeout);
	const int r = map_->notify(
	    version, static_cast<uint64_t>(std::chrono::milliseconds(timeout).count()), &heard);
	if (r == 0)
		return 0;
	if (r != -ETIMEDOUT) {
		ULP_LOG_RATELIMITED(Error, Ha, "LU {}: announcing reservation state {}: {}",
		                    lu_.name(), version, scsi::rados_strerror(r));
		return r;
	}
	if (heard.missed.empty()) {
		// Timed out, and the OSD's answer does not say who was silent: nobody to fence,
		// nothing to rely on.
		ULP_LOG_RATELIMITED(Error, Ha,
		                    "LU {}: announcing reservation state {} timed out, the silent "
		                    "watchers unnamed",
		                    lu_.name(), version);
		return r;
	}
	// Who the silent ones are: their records (best effort; a watcher without one is not a
	// gateway of ours, or one whose record was lost, and can only be named by its id).
	ClusterMapView v;
	if (int rr = map_->read(&v); rr < 0)
		ULP_LOG_RATELIMITED(Warn, Ha, "LU {}: reading the gateways' records of {}: {}",
		                    lu_.name(), oid(), scsi::rados_strerror(rr));
	for (const ClusterMapWatcher &w : heard.missed) {
		if (w.gid == gid_)
			continue; // this gateway's own watch: it installed the change itself
		PrPeer peer{w.gid, w.cookie, {}, {}};
		PrGatewayRecord g;
		if (const auto it = v.records.find(pr_gateway_key(w.gid));
		    it != v.records.end() && pr_gateway_record_decode(it->second, &g)) {
			peer.gateway = g.gw;
			peer.addr = g.addr;
		}
		const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
		    std::chrono::steady_clock::now() - t0);
		ULP_LOG(Warn, Ha,
		        "LU {}: gateway {} (client.{}, {}) did not install reservation state {} "
		        "within {} ms{}",
		        lu_.name(), peer.gateway.empty() ? "?" : peer.gateway, peer.gid,
		        peer.addr.empty() ? "address unknown" : peer.addr, version, waited.count(),
		        cfg_.on_peer_timeout ? ": fencing it" : ", and nothing can fence it");
		if (!cfg_.on_peer_timeout)
			return -ETIMEDOUT;
		const int f = cfg_.on_peer_timeout(peer);
		if (f != 0) {
			ULP_LOG(Error, Ha, "LU {}: fencing gateway {} (client.{}) failed: {}",
			        lu_.name(), peer.gateway.empty() ? "?" : peer.gateway, peer.gid,
			        scsi::rados_strerror(f));
			return f < 0 ? f : -EIO;
		}
		ULP_LOG(Info, Ha, "LU {}: gateway {} (client.{}) fenced", lu_.name(),
		        peer.gateway.empty() ? "?" : peer.gateway, peer.gid);
	}
	return 0;
}

int PrCluster::check_watch()
{
	int r = map_->check_watch(); // a watch registered again reads again (on_watch)
	if (reread_->exchange(false))
		reread();
	bool prune = false, stale = false;
	{
		std::lock_guard g(reg_lock_);
		// A process of this gateway before this one watched until its client's watch
		// timed out at the OSD at the latest; after that its record names nobody.
		prune = !pruned_ && std::chrono::steady_clock::now() - attached_ >
		                        std::chrono::seconds(2 * ClusterMap::kWatchTimeoutS);
		stale = lu_.ports() != reg_ports_;
	}
	if (!prune && !stale)
		return r;
	if (int w = write_record(false, prune); w < 0) {
		ULP_LOG_RATELIMITED(Warn, Ha, "LU {}: updating this gateway's record in {}: {}",
		                    lu_.name(), oid(), scsi::rados_strerror(w));
		return r < 0 ? r : w;
	}
	if (prune) {
		std::lock_guard g(reg_lock_);
		pruned_ = true;
	}
	return r;
}

} // namespace ulp::ha
