// SPDX-License-Identifier: MIT
// ha/cluster_map.cc - the versioned map in one RADOS object (cluster_map.h).
#include "ha/cluster_map.h"

#include "core/backoff.h"
#include "core/log.h"

#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <set>

namespace ulp::ha
{

namespace
{

constexpr const char *kVersionXattr = "ulp.version";
constexpr size_t kVersionDigits = 20; // UINT64_MAX has 20
// Records read in one operation at most: the map of a cluster of eight gateways holds a few
// hundred. More is a damaged or foreign object, refused rather than read in part.
constexpr uint64_t kMaxRecords = 65536;

} // namespace

std::string version_encode(uint64_t v)
{
	return std::to_string(v);
}

bool version_decode(const char *p, size_t len, uint64_t *out)
{
	if (len == 0 || len > kVersionDigits || (len > 1 && p[0] == '0'))
		return false;
	for (size_t i = 0; i < len; i++)
		if (p[i] < '0' || p[i] > '9')
			return false;
	auto [end, ec] = std::from_chars(p, p + len, *out);
	return ec == std::errc() && end == p + len;
}

// A notify in flight: what its completion frees, and whom it tells it ended.
struct ClusterMap::NotifyState {
	std::mutex lock;
	std::condition_variable cv;
	unsigned pending = 0; // notifies not completed yet
};

ClusterMap::ClusterMap(std::shared_ptr<scsi::RadosClient> client, rados_ioctx_t io, std::string oid)
    : client_(std::move(client)), io_(io), oid_(std::move(oid)),
      notify_(std::make_shared<NotifyState>())
{
}

std::unique_ptr<ClusterMap> ClusterMap::open(std::shared_ptr<scsi::RadosClient> client,
                                             const std::string &pool, const std::string &nspace,
                                             const std::string &oid, int *err, std::string *why)
{
	rados_ioctx_t io = nullptr;
	int r = rados_ioctx_create(client->cluster, pool.c_str(), &io);
	if (r < 0) {
		*err = r;
		*why = "cluster map " + oid + ": pool '" + pool + "': " +
		       (r == -ENOENT ? std::string("no such pool") : scsi::rados_strerror(r));
		return nullptr;
	}
	rados_ioctx_set_namespace(io, nspace.empty() ? nullptr : nspace.c_str());
	return std::unique_ptr<ClusterMap>(new ClusterMap(std::move(client), io, oid));
}

ClusterMap::~ClusterMap()
{
	unwatch();
	// Notifies in flight use io_: they end within their timeout.
	std::unique_lock g(notify_->lock);
	const auto limit = std::chrono::milliseconds(kNotifyTimeoutMs + 2000);
	if (!notify_->cv.wait_for(g, limit, [&] { return notify_->pending == 0; })) {
		ULP_LOG(Warn, Ha,
		        "cluster map {}: {} notifies still in flight after {} ms: left to "
		        "librados",
		        oid_, notify_->pending, limit.count());
		return; // io_ is left open for them
	}
	g.unlock();
	rados_ioctx_destroy(io_);
}

int ClusterMap::read(ClusterMapView *out)
{
	rados_read_op_t op = rados_create_read_op();
	rados_xattrs_iter_t xi = nullptr;
	rados_omap_iter_t oi = nullptr;
	int xrv = 0, orv = 0;
	unsigned char more = 0;
	rados_read_op_getxattrs(op, &xi, &xrv);
	rados_read_op_omap_get_vals2(op, "", "", kMaxRecords, &oi, &more, &orv);
	int r = rados_read_op_operate(op, io_, oid_.c_str(), 0);
	rados_release_read_op(op);
	auto done = [&](int rv) {
		if (xi)
			rados_getxattrs_end(xi);
		if (oi)
			rados_omap_get_end(oi);
		return rv;
	};
	if (r == -ENOENT) {
		out->version = 0;
		out->records.clear();
		return done(0);
	}
	if (r < 0)
		return done(r);
	if (xrv < 0)
		return done(xrv);
	if (orv < 0)
		return done(orv);
	if (more) {
		ULP_LOG_RATELIMITED(Error, Ha, "cluster map {}: more than {} records: not ours?",
		                    oid_, kMaxRecords);
		return done(-E2BIG);
	}
	uint64_t version = 0;
	bool have_version = false;
	for (;;) {
		const char *name = nullptr, *val = nullptr;
		size_t len = 0;
		if (rados_getxattrs_next(xi, &name, &val, &len) < 0 || !name)
			break;
		if (std::strcmp(name, kVersionXattr) != 0)
			continue;
		if (!version_decode(val, len, &version)) {
			ULP_LOG_RATELIMITED(Error, Ha,
			                    "cluster map {}: version xattr damaged ({} bytes)",
			                    oid_, len);
			return done(-EBADMSG);
		}
		have_version = true;
	}
	std::map<std::string, std::string> recs;
	for (;;) {
		char *key = nullptr, *val = nullptr;
		size_t len = 0;
		if (rados_omap_get_next(oi, &key, &val, &len) < 0 || !key)
			break;
		recs.emplace(key, std::string(val ? val : "", val ? len : 0));
	}
	// An object with records but no version was not written by update().
	if (!have_version && !recs.empty())
		return done(-EBADMSG);
	out->version = have_version ? version : 0;
	out->records = std::move(recs);
	return done(0);
}

int ClusterMap::update(uint64_t expect, const ClusterMapChange &c, uint64_t *now)
{
	if (int r = put(expect, c, now); r < 0)
		return r; // -ECANCELED: another writer came first
	notify_async(*now);
	return 0;
}

int ClusterMap::put(uint64_t expect, const ClusterMapChange &c, uint64_t *now)
{
	if (c.set.empty() && c.erase.empty())
		return -EINVAL;
	for (const auto &k : c.erase)
		if (c.set.count(k))
			return -EINVAL;
	if (expect == UINT64_MAX)
		return -EOVERFLOW;
	const std::string cur = version_encode(expect);
	const std::string next = version_encode(expect + 1);

	rados_write_op_t op = rados_create_write_op();
	if (expect == 0) {
		// Version 0 is the object that does not exist: the change creates it, and fails
		// -EEXIST when another writer created it first (or something else did: read()
		// says what it is).
		rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, nullptr);
	} else {
		rados_write_op_cmpxattr(op, kVersionXattr, LIBRADOS_CMPXATTR_OP_EQ, cur.data(),
		                        cur.size());
	}
	rados_write_op_setxattr(op, kVersionXattr, next.data(), next.size());
	if (!c.set.empty()) {
		std::vector<const char *> keys, vals;
		std::vector<size_t> key_lens, val_lens;
		for (const auto &[k, v] : c.set) {
			keys.push_back(k.c_str());
			key_lens.push_back(k.size());
			vals.push_back(v.data());
			val_lens.push_back(v.size());
		}
		rados_write_op_omap_set2(op, keys.data(), vals.data(), key_lens.data(),
		                         val_lens.data(), keys.size());
	}
	if (!c.erase.empty()) {
		std::vector<const char *> ek;
		std::vector<size_t> el;
		for (const auto &k : c.erase) {
			ek.push_back(k.c_str());
			el.push_back(k.size());
		}
		rados_write_op_omap_rm_keys2(op, ek.data(), el.data(), ek.size());
	}
	int r = rados_write_op_operate2(op, io_, oid_.c_str(), nullptr, 0);
	rados_release_write_op(op);
	if (r == -EEXIST || (r == -ENOENT && expect != 0))
		r = -ECANCELED; // created, or removed, by another since the read
	if (r < 0)
		return r; // -ECANCELED: another writer came first
	*now = expect + 1;
	return 0;
}

namespace
{

struct NotifyOp {
	std::shared_ptr<ClusterMap::NotifyState> st; // outlives the map if it must
	rados_completion_t c = nullptr;
	char *reply = nullptr;
	size_t reply_len = 0;
	std::string oid;      // for the log line
	uint64_t version = 0; // what it announced
};

void notify_done(rados_completion_t c, void *arg)
{
	std::unique_ptr<NotifyOp> op(static_cast<NotifyOp *>(arg));
	const int n = rados_aio_get_return_value(c);
	if (op->reply)
		rados_buffer_free(op->reply);
	rados_aio_release(c);
	if (n < 0)
		ULP_LOG_RATELIMITED(Warn, Ha,
		                    "cluster map {}: version {} written, but the notify: {} (a "
		                    "watcher that did not answer within {} ms reads it later)",
		                    op->oid, op->version, scsi::rados_strerror(n),
		                    ClusterMap::kNotifyTimeoutMs);
	std::lock_guard g(op->st->lock);
	op->st->pending--;
	op->st->cv.notify_all();
}

} // namespace

// Announce version to the watchers without waiting for their acks: a watcher that died
// without unwatching (its process killed) is waited for until the notify's timeout, and a
// gateway taking over must not spend that long before it serves.
void ClusterMap::notify_async(uint64_t version)
{
	auto op = std::make_unique<NotifyOp>();
	op->st = notify_;
	op->oid = oid_;
	op->version = version;
	const std::string payload = version_encode(version);
	if (rados_aio_create_completion2(op.get(), notify_done, &op->c) < 0)
		return;
	{
		std::lock_guard g(notify_->lock);
		notify_->pending++;
	}
	const int r = rados_aio_notify(io_, oid_.c_str(), op->c, payload.data(),
	                               static_cast<int>(payload.size()), kNotifyTimeoutMs,
	                               &op->reply, &op->reply_len);
	if (r < 0) {
		rados_aio_release(op->c);
		std::lock_guard g(notify_->lock);
		notify_->pending--;
		ULP_LOG_RATELIMITED(Warn, Ha, "cluster map {}: version {} written, notify: {}",
		                    oid_, version, scsi::rados_strerror(r));
		return;
	}
	(void)op.release(); // notify_done frees it
}

int ClusterMap::notify(uint64_t v, uint64_t timeout_ms, ClusterMapNotified *out)
{
	*out = {};
	char *reply = nullptr;
	size_t reply_len = 0;
	const std::string payload = version_encode(v);
	// Bounded by timeout_ms (the OSD's wait for the watchers) and, before the OSD has it,
	// by the client's rados_osd_op_timeout.
	const int n =
	    rados_notify2(io_, oid_.c_str(), payload.data(), static_cast<int>(payload.size()),
	                  timeout_ms, &reply, &reply_len);
	if (reply) {
		// Who answered and who did not, as the OSD reports it (librados decodes it).
		notify_ack_t *acks = nullptr;
		notify_timeout_t *tos = nullptr;
		size_t nacks = 0, ntos = 0;
		if (rados_decode_notify_response(reply, reply_len, &acks, &nacks, &tos, &ntos) ==
		    0) {
			for (size_t i = 0; i < nacks; i++)
				out->acked.push_back({acks[i].notifier_id, acks[i].cookie});
			for (size_t i = 0; i < ntos; i++)
				out->missed.push_back({tos[i].notifier_id, tos[i].cookie});
			rados_free_notify_response(acks, nacks, tos);
		}
		rados_buffer_free(reply);
	}
	return n < 0 ? n : 0;
}

int ClusterMap::modify(const std::function<bool(const ClusterMapView &, ClusterMapChange *)> &fn,
                       uint64_t *now)
{
	ContentionBackoff backoff; // 351 ms at most in all before -EBUSY
	for (int i = 0; i < kModifyTries; i++) {
		if (i > 0)
			backoff.pause();
		ClusterMapView v;
		if (int r = read(&v); r < 0)
			return r;
		ClusterMapChange c;
		if (!fn(v, &c)) {
			*now = v.version;
			return 0;
		}
		int r = update(v.version, c, now);
		if (r != -ECANCELED)
			return r;
	}
	ULP_LOG_RATELIMITED(Warn, Ha, "cluster map {}: {} changes in a row came first; giving up",
	                    oid_, kModifyTries);
	return -EBUSY;
}

void ClusterMap::on_notify(void *arg, uint64_t notify_id, uint64_t handle, uint64_t notifier,
                           void *data, size_t len)
{
	auto *m = static_cast<ClusterMap *>(arg);
	uint64_t v = 0;
	if (!version_decode(static_cast<const char *>(data), len, &v))
		v = 0; // not ours, or damaged: "re-read" is always safe
	WatchFn fn;
	AckedWatchFn afn;
	{
		std::lock_guard g(m->watch_lock_);
		if (handle == m->handle_) {
			fn = m->watch_fn_;
			afn = m->acked_fn_;
		}
	}
	if (afn) {
		const ClusterMapNotify n{v, notify_id, handle, notifier};
		afn(&n); // the watcher answers when it has acted on it
		return;
	}
	// Acknowledged first, so that the notifier does not wait on our callback.
	rados_notify_ack(m->io_, m->oid_.c_str(), notify_id, handle, nullptr, 0);
	if (fn)
		fn(v);
}

void ClusterMap::ack(const ClusterMapNotify &n)
{
	rados_notify_ack(io_, oid_.c_str(), n.id, n.handle, nullptr, 0);
}

ClusterMapWatcher ClusterMap::watcher()
{
	std::lock_guard g(watch_lock_);
	return {rados_get_instance_id(client_->cluster), handle_};
}

void ClusterMap::on_watch_error(void *arg, uint64_t handle, int err)
{
	auto *m = static_cast<ClusterMap *>(arg);
	{
		std::lock_guard g(m->watch_lock_);
		if (handle != m->handle_)
			return;
	}
	ULP_LOG_RATELIMITED(Warn, Ha,
	                    "cluster map {}: the watch broke ({}); changes may have been missed: "
	                    "re-reading, and watching again",
	                    m->oid_, scsi::rados_strerror(err));
	m->tell_broken();
}

void ClusterMap::tell_broken()
{
	WatchFn fn;
	AckedWatchFn afn;
	{
		std::lock_guard g(watch_lock_);
		fn = watch_fn_;
		afn = acked_fn_;
	}
	if (fn)
		fn(0);
	if (afn)
		afn(nullptr);
}

int ClusterMap::watch_locked()
{
	uint64_t h = 0;
	int r = rados_watch3(io_, oid_.c_str(), &h, &ClusterMap::on_notify,
	                     &ClusterMap::on_watch_error, kWatchTimeoutS, this);
	if (r < 0)
		return r;
	handle_ = h;
	return 0;
}

int ClusterMap::watch(WatchFn fn)
{
	std::lock_guard g(watch_lock_);
	if (watching_locked())
		return -EBUSY;
	watch_fn_ = std::move(fn);
	if (int r = watch_locked(); r < 0) {
		watch_fn_ = nullptr;
		return r;
	}
	return 0;
}

int ClusterMap::watch_acked(AckedWatchFn fn)
{
	std::lock_guard g(watch_lock_);
	if (watching_locked())
		return -EBUSY;
	acked_fn_ = std::move(fn);
	if (int r = watch_locked(); r < 0) {
		acked_fn_ = nullptr;
		return r;
	}
	return 0;
}

int ClusterMap::check_watch()
{
	uint64_t old = 0;
	{
		std::lock_guard g(watch_lock_);
		if (!watching_locked())
			return 0;
		if (handle_ && rados_watch_check(io_, handle_) >= 0)
			return 0;
		old = handle_;
		handle_ = 0;
	}
	// Outside the lock: unwatch2 waits for callbacks of the old handle, which take it.
	if (old)
		rados_unwatch2(io_, old);
	int r;
	{
		std::lock_guard g(watch_lock_);
		if (!watching_locked())
			return 0; // unwatched meanwhile
		r = watch_locked();
	}
	if (r < 0) {
		ULP_LOG_RATELIMITED(Warn, Ha, "cluster map {}: watching again: {}", oid_,
		                    scsi::rados_strerror(r));
		return r;
	}
	ULP_LOG(Info, Ha, "cluster map {}: watching again", oid_);
	tell_broken();
	return 0;
}

void ClusterMap::unwatch()
{
	uint64_t h = 0;
	{
		std::lock_guard g(watch_lock_);
		h = handle_;
		handle_ = 0;
		watch_fn_ = nullptr;
		acked_fn_ = nullptr;
	}
	if (h) {
		rados_unwatch2(io_, h);
		// Callbacks already queued for h find it gone (handle_ != h) and return; wait for
		// them, so that none runs on a destroyed map.
		rados_watch_flush(client_->cluster);
	}
}

} // namespace ulp::ha
