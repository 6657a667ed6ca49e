// SPDX-License-Identifier: MIT
// ha/cluster_map.h - a versioned map in one RADOS object: what several gateways on one Ceph
// cluster share (../docs/ha.md: the gateways, their port groups, the owners of LU groups).
//
// The records are the object's omap (key -> value; opaque to this file); the version is its
// xattr "ulp.version", a decimal number that every change increments (none: version 0, the
// map empty). A change is one RADOS write operation that first compares the version with
// the one its writer read (cmpxattr) and then writes the records and the next version. The
// OSD applies the whole operation or - when another gateway changed the object in between -
// none of it, and the writer gets -ECANCELED: compare-and-set, serialized at the object's
// primary OSD, with no service of our own to keep up. A reader takes records and version in
// one read operation, so it never sees a mix of two versions.
//
// After a change the writer notifies the object's watchers (rados_notify2) with the new
// version as payload, and every gateway watches the object. A notify may be missed - the
// watch broke (the OSD restarted, or this client's session was gone for longer than
// osd_client_watch_timeout) - and librados then calls the watch's error callback: the
// watcher is told version 0 ("re-read, something may have changed"), and its next
// check_watch() - the gateway's timer calls it - registers the watch again. A reader that must not
// act on old state compares versions, it does not count notifies.
#pragma once

#include "scsi/rados_client.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ulp::ha
{

// One consistent read of the map.
struct ClusterMapView {
	uint64_t version = 0;                       // 0: the object has never been written
	std::map<std::string, std::string> records; // key -> value, as the last change left them
};

// What one change does on top of the version it was made from.
struct ClusterMapChange {
	std::map<std::string, std::string> set; // records written (created or replaced)
	std::vector<std::string> erase;         // records removed (absent ones are no error)
};

// A watcher of the object, as a notify names it: its client's instance id (client.<gid>,
// rados_get_instance_id) and its watch's cookie.
struct ClusterMapWatcher {
	uint64_t gid = 0;
	uint64_t cookie = 0;
	auto operator<=>(const ClusterMapWatcher &) const = default;
};

// Who answered a notify in time, and who did not.
struct ClusterMapNotified {
	std::vector<ClusterMapWatcher> acked;
	std::vector<ClusterMapWatcher> missed;
};

// A notify as a watcher that answers it itself (watch_acked) receives it.
struct ClusterMapNotify {
	uint64_t version = 0;  // the version it announces; 0: unreadable (re-read)
	uint64_t id = 0;       // the notify's id, for ack()
	uint64_t handle = 0;   // the watch it came through
	uint64_t notifier = 0; // the notifier's instance id
};

class ClusterMap
{
public:
	// Called with the version a notify announced, or 0 when the watch broke and notifies may
	// have been missed. Runs on librados' watch thread: it must only hand the news over
	// (a reader re-reads on its own thread); it may not call this object.
	using WatchFn = std::function<void(uint64_t version)>;

	// The map in object oid of pool (namespace nspace, "" the default) through client. The
	// object is created by the first change. nullptr with *err and *why when the pool cannot
	// be opened.
	static std::unique_ptr<ClusterMap> open(std::shared_ptr<scsi::RadosClient> client,
	                                        const std::string &pool, const std::string &nspace,
	                                        const std::string &oid, int *err, std::string *why);
	~ClusterMap(); // unwatches and waits for callbacks in flight (rados_watch_flush)
	ClusterMap(const ClusterMap &) = delete;
	ClusterMap &operator=(const ClusterMap &) = delete;

	// The records and their version, in one read. 0 or a negative errno.
	int read(ClusterMapView *out);

	// Compare-and-set: applies c if the map is still at version expect; then notifies the
	// watchers without waiting for them (a watcher that does not answer within the notify
	// timeout is logged; the change stands). 0 with *now the new version; -ECANCELED when the
	// map is no longer at expect (nothing written: read again); -EINVAL for a change that
	// writes nothing or names a record both to set and to erase; another negative errno from
	// RADOS.
	int update(uint64_t expect, const ClusterMapChange &c, uint64_t *now);

	// update() without its notify: the writer announces the change itself (notify()), and
	// learns who heard it. The same results.
	int put(uint64_t expect, const ClusterMapChange &c, uint64_t *now);
	// Notify the watchers that version v is written and wait up to timeout_ms for each to
	// answer (whole seconds: librados hands the OSD timeout_ms / 1000, and 0 means its
	// default, osd_default_notify_timeout): 0 all did; -ETIMEDOUT some did not (out->missed
	// names them); another negative errno from RADOS (out empty). out->acked names those that
	// answered either way.
	int notify(uint64_t v, uint64_t timeout_ms, ClusterMapNotified *out);

	// Read, let fn make a change from what it sees, update; again from a fresh read when
	// another writer came first, after a random pause (core/backoff.h), up to kModifyTries
	// times (then -EBUSY). fn returns false to change nothing (0, *now the version read).
	// 0 or a negative errno.
	int modify(const std::function<bool(const ClusterMapView &, ClusterMapChange *)> &fn,
	           uint64_t *now);

	// Watch the object: fn on every change (see WatchFn). One watch per map. 0 or a
	// negative errno (-EBLOCKLISTED for a fenced client).
	int watch(WatchFn fn);
	// Called with a notify that the watcher answers itself, with ack() from any thread
	// once it has acted on it (a notifier waits for that, up to its timeout, and then
	// counts the watcher as missed), or with nullptr when the watch broke (re-read).
	// Runs on librados' watch thread: it must only hand the news over.
	using AckedWatchFn = std::function<void(const ClusterMapNotify *n)>;
	// Watch the object, answering notifies in fn's own time. As watch() otherwise.
	int watch_acked(AckedWatchFn fn);
	// Answer notify n (of this map's watch; once).
	void ack(const ClusterMapNotify &n);
	// This watch as notifies name it; cookie 0 while not watching.
	ClusterMapWatcher watcher();
	void unwatch();
	// The watch still registered with the OSD? If it broke, register it again and tell the
	// callback 0 (re-read). 0 (watching, or not asked to), or a negative errno when the
	// watch could not be registered again (the next call tries again).
	int check_watch();

	const std::string &oid() const { return oid_; }

	static constexpr int kModifyTries = 16;            // read-change-update rounds at most
	static constexpr uint64_t kNotifyTimeoutMs = 5000; // how long a notify waits for acks
	static constexpr uint32_t kWatchTimeoutS = 30;     // the OSD drops a silent watcher after

private:
	ClusterMap(std::shared_ptr<scsi::RadosClient> client, rados_ioctx_t io, std::string oid);
	static void on_notify(void *arg, uint64_t notify_id, uint64_t handle, uint64_t notifier,
	                      void *data, size_t len);
	static void on_watch_error(void *arg, uint64_t handle, int err);
	int watch_locked();
	bool watching_locked() const { return watch_fn_ || acked_fn_; }
	void tell_broken(); // the watcher's callback for "re-read" (0, nullptr)
	// update()'s notify: to the watchers, not waiting for them (cluster_map.cc).
	void notify_async(uint64_t version);

public:
	struct NotifyState; // notifies in flight (cluster_map.cc)

private:
	std::shared_ptr<scsi::RadosClient> client_; // keeps the connection while the map lives
	rados_ioctx_t io_ = nullptr;                // the pool (and namespace); owned
	const std::string oid_;                     // the object
	std::mutex watch_lock_;                     // guards the callbacks and handle_
	WatchFn watch_fn_;                          // the watcher's callback (watch())
	AckedWatchFn acked_fn_; // the watcher's callback (watch_acked()); neither: not watching
	uint64_t handle_ = 0;   // rados_watch3's cookie; 0: none
	std::shared_ptr<NotifyState> notify_; // update()'s notifies in flight (their completions)
};

// The version as the xattr holds it, and back: decimal digits only, no sign, no leading
// zero, at most 20 digits and no overflow; false for anything else (a damaged object).
std::string version_encode(uint64_t v);
bool version_decode(const char *p, size_t len, uint64_t *out);

} // namespace ulp::ha
