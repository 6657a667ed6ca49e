// SPDX-License-Identifier: MIT
// iscsi/target/target.cc - the target node set: sessions, their teardown, and the SCSI fabric
// callbacks routed to connections (see target.h).
#include "iscsi/target/target.h"

#include "core/log.h"

#include "iscsi/target/conn.h"
#include "iscsi/target/session.h"

#include <algorithm>
#include <cstdio>

namespace ulp::iscsi::target
{

std::string initiator_port_name(const std::string &initiator, const Isid &isid)
{
	char hex[16];
	std::snprintf(hex, sizeof(hex), "%02x%02x%02x%02x%02x%02x", isid[0], isid[1], isid[2],
	              isid[3], isid[4], isid[5]);
	return initiator + ",i,0x" + hex;
}

Target::Target(TargetConfig cfg) : cfg_(std::move(cfg))
{
	for (const TargetNode &n : cfg_.targets)
		nodes_.push_back(std::make_shared<const TargetNode>(n));
	// MaxConnections: one per session (target.h); the login offers no more.
	cfg_.prefs.max_connections = 1;
	reaper_ = std::make_unique<scsi::Reaper>("ulp-sess-reap", cfg_.teardown_timeout);
}

Target::~Target()
{
	reaper_.reset(); // closes every session handed to it, then joins
	std::lock_guard g(lock_);
	if (!conns_.empty())
		ULP_LOG(Error, Iscsi, "target destroyed with {} connections (stop() first)",
		        conns_.size());
	for (Session *s : sessions_)
		delete s;
}

std::shared_ptr<const TargetNode> Target::find_node(std::string_view name) const
{
	std::lock_guard g(nodes_lock_);
	for (const auto &n : nodes_)
		if (n->name == name)
			return n;
	return nullptr;
}

std::vector<std::shared_ptr<const TargetNode>> Target::nodes() const
{
	std::lock_guard g(nodes_lock_);
	return nodes_;
}

int Target::add_node(TargetNode n)
{
	if (!n.tpg || n.name.empty())
		return -EINVAL;
	std::lock_guard g(nodes_lock_);
	for (const auto &o : nodes_)
		if (o->name == n.name)
			return -EEXIST;
	nodes_.push_back(std::make_shared<const TargetNode>(std::move(n)));
	return 0;
}

int Target::replace_node(TargetNode n)
{
	std::lock_guard g(nodes_lock_);
	for (auto &o : nodes_)
		if (o->name == n.name) {
			if (!n.tpg) {
				n.tpg = o->tpg;
				n.groups = o->groups;
			}
			o = std::make_shared<const TargetNode>(std::move(n));
			return 0;
		}
	return -ENOENT;
}

int Target::remove_node(const std::string &name, std::chrono::milliseconds grace,
                        std::chrono::milliseconds timeout)
{
	std::shared_ptr<const TargetNode> n;
	{
		std::lock_guard g(nodes_lock_);
		auto it = std::find_if(nodes_.begin(), nodes_.end(),
		                       [&](const auto &o) { return o->name == name; });
		if (it == nodes_.end())
			return -ENOENT;
		n = *it;
		nodes_.erase(it);
	}
	using clk = std::chrono::steady_clock;
	const auto t0 = clk::now();
	auto live = [&] {
		size_t k = 0;
		for (Session *s : sessions_)
			if (s->node == n)
				k++;
		return k;
	};
	std::unique_lock g(lock_);
	for (Session *s : sessions_)
		if (s->node == n && s->conn)
			s->conn->post_deferred(ConnEvent::Logout, {});
	if (size_t k = live())
		ULP_LOG(Info, Iscsi, "{}",
		        "target " + name + " removed: asking " + std::to_string(k) +
		            " sessions to log out");
	cv_.wait_until(g, t0 + grace, [&] { return live() == 0; });
	if (size_t k = live()) {
		ULP_LOG(Info, Iscsi, "{}",
		        "target " + name + " removed: " + std::to_string(k) +
		            " sessions did not log out in time; dropping them");
		for (Session *s : sessions_)
			if (s->node == n && s->conn)
				s->conn->post_deferred(ConnEvent::Drop,
				                       {.why = "its target was removed"});
	}
	// Gone from sessions_ is not yet closed: the reaper closes the nexus (waiting for its
	// commands). The Tpg is free to go once it has no nexus left.
	auto closed = [&] {
		bool empty = n->tpg->sessions().empty();
		for (const NodePortalGroup &pg : n->groups)
			empty = empty && pg.tpg->sessions().empty();
		return live() == 0 && empty;
	};
	while (!closed()) {
		if (clk::now() >= t0 + timeout) {
			ULP_LOG(Error, Iscsi, "{}",
			        "target " + name + " removed: sessions still closing after " +
			            std::to_string(timeout.count()) + " ms");
			return -ETIMEDOUT;
		}
		cv_.wait_for(g, std::chrono::milliseconds(20));
	}
	return 0;
}

std::vector<SessionInfo> Target::session_info()
{
	std::lock_guard g(lock_);
	std::vector<SessionInfo> v;
	for (Session *s : sessions_) {
		SessionInfo i;
		i.tsih = s->params.tsih;
		i.params = s->params;
		i.initiator_port = s->initiator_port;
		if (s->conn) {
			i.transport = s->conn->transport();
			i.peer = s->conn->peer();
			i.local = s->conn->local();
			i.worker = s->conn->worker();
			const Conn::Gauges &g = s->conn->gauges();
			i.has_conn = true;
			i.exp_cmdsn = g.exp_cmdsn.load(std::memory_order_relaxed);
			i.max_cmdsn = g.max_cmdsn.load(std::memory_order_relaxed);
			i.conn_cmds = g.cmds.load(std::memory_order_relaxed);
			i.pdus_in = g.pdus_in.load(std::memory_order_relaxed);
			i.pdus_out = g.pdus_out.load(std::memory_order_relaxed);
		}
		i.full_feature = s->full_feature;
		i.conn = s->conn_params;
		i.cmds_in_flight = s->scsi ? s->scsi->cmd_count() : 0;
		if (s->scsi)
			i.io = s->scsi->stats_.read();
		i.logout_requested = s->logout_requested;
		v.push_back(std::move(i));
	}
	return v;
}

void Target::login_done(Session *s, const ConnParams &cp)
{
	std::lock_guard g(lock_);
	s->conn_params = cp;
	s->full_feature = true;
}

int Target::logout_session(uint16_t tsih, std::chrono::milliseconds grace)
{
	std::unique_lock g(lock_);
	auto find = [&]() -> Session * {
		for (Session *s : sessions_)
			if (s->params.tsih == tsih)
				return s;
		return nullptr;
	};
	Session *s = find();
	if (!s)
		return -ENOENT;
	const std::string who = s->initiator_port;
	s->logout_requested = true;
	if (s->conn)
		s->conn->post_deferred(ConnEvent::Logout, {});
	ULP_LOG(Info, Iscsi, "{}",
	        "session " + who + " tsih " + std::to_string(tsih) + ": logout requested");
	// The same TSIH cannot come back meanwhile: new_tsih skips live ones, and a session
	// that left sessions_ is closing.
	if (cv_.wait_for(g, grace, [&] { return find() == nullptr; }))
		return 0;
	s = find();
	if (!s)
		return 0;
	ULP_LOG(Info, Iscsi, "{}",
	        "session " + who + " tsih " + std::to_string(tsih) + ": no logout in " +
	            std::to_string(grace.count()) + " ms; dropping it");
	if (s->conn)
		s->conn->post_deferred(ConnEvent::Drop, {.why = "did not log out when asked to"});
	return 1;
}

int Target::drop_session(uint16_t tsih)
{
	std::lock_guard g(lock_);
	for (Session *s : sessions_)
		if (s->params.tsih == tsih) {
			ULP_LOG(Info, Iscsi, "{}",
			        "session " + s->initiator_port + " tsih " + std::to_string(tsih) +
			            ": dropped by the administrator");
			if (s->conn)
				s->conn->post_deferred(ConnEvent::Drop,
				                       {.why = "dropped by the administrator"});
			return 0;
		}
	return -ENOENT;
}

void Target::set_portal_addresses(std::vector<std::string> a)
{
	std::lock_guard g(lock_);
	cfg_.portal_addresses = std::move(a);
}

void Target::add_conn(Conn *c)
{
	std::lock_guard g(lock_);
	conns_.push_back(c);
	stats_.conns_open++;
}

void Target::remove_conn(Conn *c)
{
	std::lock_guard g(lock_);
	std::erase(conns_, c);
	stats_.conns_open--;
	cv_.notify_all();
}

uint16_t Target::new_tsih()
{
	// RFC 7143 11.12.6: non-zero, unique among this target's live sessions.
	for (;;) {
		uint16_t t = next_tsih_++;
		if (next_tsih_ == 0)
			next_tsih_ = 1;
		if (t == 0)
			continue;
		bool used = std::any_of(sessions_.begin(), sessions_.end(),
		                        [&](Session *s) { return s->params.tsih == t; });
		if (!used)
			return t;
	}
}

Session *Target::create_session(Conn *c, const SessionParams &p, LoginStatus *status)
{
	std::shared_ptr<const TargetNode> node;
	if (p.type == SessionType::Normal) {
		node = find_node(p.target_name);
		if (!node) {
			*status = LoginStatus::NotFound;
			return nullptr;
		}
	}
	const std::string port = initiator_port_name(p.initiator_name, p.isid);
	std::vector<uint16_t> old; // TSIHs of the sessions this login reinstates
	Session *s;
	{
		std::lock_guard g(lock_);
		// A node removed since the login looked it up: remove_node has unlisted it before
		// it walks sessions_ under lock_, so a session made after that walk would escape
		// its logout. Order: lock_, then nodes_lock_.
		if (node) {
			std::lock_guard ng(nodes_lock_);
			if (std::find(nodes_.begin(), nodes_.end(), node) == nodes_.end()) {
				*status = LoginStatus::NotFound;
				return nullptr;
			}
		}
		// RFC 7143 6.3.5 session reinstatement: a leading login (TSIH 0) whose initiator
		// name and ISID match a session to the same target replaces it; at ERL 0 the old
		// session is closed (its connection dropped, its tasks aborted).
		// The old session's connection is told under lock_: once the session leaves
		// sessions_ (close_session, under lock_) the reaper may free it.
		for (Session *o : sessions_)
			if (o->initiator_port == port && o->params.type == p.type &&
			    o->params.target_name == p.target_name) {
				old.push_back(o->params.tsih);
				if (o->conn)
					o->conn->post_deferred(ConnEvent::Drop,
					                       {.why = "session reinstated"});
			}
		s = new Session(*this, p, node);
		s->initiator_port = port;
		s->params.tsih = new_tsih();
		s->conn = c; // before it is in sessions_, where others read it under lock_
		sessions_.push_back(s);
		stats_.sessions_open++;
		stats_.logins++;
		stats_.reinstatements += old.size();
	}
	for (uint16_t tsih : old)
		ULP_LOG(Info, Iscsi, "{}",
		        "session reinstatement: " + port + " tsih " + std::to_string(tsih) +
		            " replaced by tsih " + std::to_string(s->params.tsih));
	if (node) {
		// Opened outside lock_ (the TPG takes its own locks), published under it: the
		// session is in sessions_ already, where session_info() reads s->scsi.
		// The target port of the portal group the connection came in on (find_target
		// refused a portal of none; a node replaced since then may have lost it).
		uint16_t tag = 0;
		scsi::Tpg *tpg = nullptr;
		if (!portal_group(*node, c->local(), &tag, &tpg))
			tpg = node->tpg;
		auto *scsi = tpg->open_session(*this, p.initiator_name, port);
		std::lock_guard g(lock_);
		if (!scsi) {
			std::erase(sessions_, s);
			stats_.sessions_open--;
			stats_.logins--;
			delete s;
			*status = LoginStatus::AuthzFailure;
			return nullptr;
		}
		scsi->fabric_priv = s;
		s->scsi = scsi;
	}
	*status = LoginStatus::Success;
	return s;
}

void Target::close_session(Session *s, std::function<void()> done)
{
	{
		std::lock_guard g(lock_);
		if (s->closing)
			return;
		s->closing = true;
		std::erase(sessions_, s);
	}
	// On the reaper: abort the session's commands, wait for them (bounded, logged,
	// retried: freeing the session earlier would let a late completion touch freed
	// memory), then done and free.
	reaper_->close(s->scsi, [this, s, done = std::move(done)] {
		ULP_LOG(Info, Iscsi, "{}",
		        "session closed: " + s->initiator_port + " tsih " +
		            std::to_string(s->params.tsih));
		if (done)
			done();
		delete s;
		std::lock_guard g(lock_);
		stats_.sessions_open--;
		cv_.notify_all();
	});
}

bool Target::stop(std::chrono::milliseconds grace, std::chrono::milliseconds timeout)
{
	using clk = std::chrono::steady_clock;
	const auto t0 = clk::now();
	{
		std::lock_guard g(lock_);
		for (Conn *c : conns_)
			c->post_deferred(ConnEvent::Logout, {});
	}
	std::unique_lock g(lock_);
	cv_.wait_until(g, t0 + grace, [&] { return conns_.empty(); });
	if (!conns_.empty()) {
		ULP_LOG(Info, Iscsi, "{}",
		        "stop: " + std::to_string(conns_.size()) +
		            " connections did not log out in time; dropping them");
		for (Conn *c : conns_)
			c->post_deferred(ConnEvent::Drop,
			                 {.why = "no logout before the target stopped"});
	}
	if (!cv_.wait_until(g, t0 + timeout, [&] { return conns_.empty(); }))
		return false;
	g.unlock();
	return reaper_->wait_idle(t0 + timeout);
}

void Target::drop_sessions(const TargetNode *node, const Conn *except, const char *why)
{
	// Under lock_, as stop() and reinstatement post: a session in sessions_ has a live
	// connection (it leaves the list, under lock_, before its connection can finish).
	std::lock_guard g(lock_);
	size_t n = 0;
	for (Session *s : sessions_)
		if (s->node.get() == node && s->conn && s->conn != except) {
			s->conn->post_deferred(ConnEvent::Drop, {.why = why});
			n++;
		}
	if (n)
		ULP_LOG(Info, Iscsi, "{}",
		        std::string(why) + ": dropping " + std::to_string(n) + " sessions of " +
		            node->name);
}

TargetStats Target::stats()
{
	std::lock_guard g(lock_);
	TargetStats s = stats_;
	s.teardown_timeouts = reaper_->timeouts();
	return s;
}

// ---- scsi::Fabric: route to the command's connection ------------------------------------

void Target::route(scsi::Cmd *cmd, scsi::FabricEvent ev)
{
	auto *c = static_cast<IscsiCmd *>(cmd->fabric_priv);
	c->conn->post(ConnEvent(ev), {.cmd = c});
}

void Target::route(scsi::Tmr *tmr)
{
	// The TMF's connection: the one that sent it.
	static_cast<IscsiTmr *>(tmr->fabric_priv)->conn->post(ConnEvent::TmRsp, {.tmr = tmr});
}

void Target::visible_targets(std::string_view initiator_name, std::vector<DiscoveryTarget> *out)
{
	visible_targets(initiator_name, "", out);
}

void Target::visible_targets(std::string_view initiator_name, std::string_view peer,
                             std::vector<DiscoveryTarget> *out)
{
	std::vector<std::string> portals;
	{
		std::lock_guard g(lock_);
		portals = cfg_.portal_addresses;
	}
	for (const auto &np : nodes()) {
		const TargetNode &n = *np;
		// What login would refuse is not shown: the initiator's name against the ACLs,
		// its address against the allowed addresses (conn.cc authorize). The kernel's
		// target does the first (a TPG without a node ACL for the initiator is left out
		// unless demo_mode_discovery); it has no address list, the same rule covers ours.
		// Listing a target the initiator cannot log in to would only have it retry.
		if (!n.tpg->allowed(std::string(initiator_name)) ||
		    !addr_allowed(n.allowed_addresses, peer))
			continue;
		DiscoveryTarget t;
		t.name = n.name;
		// Each portal with the tag of its group (RFC 7143 13.8: TargetAddress is
		// "domainname[:port],portal-group-tag").
		if (n.groups.empty())
			for (const std::string &a : portals)
				t.addresses.push_back(a + "," + std::to_string(cfg_.tpgt));
		for (const NodePortalGroup &g : n.groups)
			for (const std::string &a : g.portals)
				t.addresses.push_back(a + "," + std::to_string(g.tag));
		out->push_back(std::move(t));
	}
}

namespace
{

// "host:port" (host bracketed when IPv6) into its two halves; false without a port.
bool split_addr(std::string_view a, std::string_view *host, std::string_view *port)
{
	const size_t colon = a.rfind(':');
	if (colon == std::string_view::npos)
		return false;
	*host = a.substr(0, colon);
	*port = a.substr(colon + 1);
	return true;
}

// Whether a connection to local ("ip:port") came in on portal p ("host:port"; a wildcard
// host listens on every address).
bool portal_matches(std::string_view p, std::string_view local)
{
	if (p == local)
		return true;
	std::string_view ph, pp, lh, lp;
	if (!split_addr(p, &ph, &pp) || !split_addr(local, &lh, &lp) || pp != lp)
		return false;
	return ph.empty() || ph == "0.0.0.0" || ph == "[::]";
}

} // namespace

bool Target::portal_group(const TargetNode &n, std::string_view local, uint16_t *tag,
                          scsi::Tpg **tpg) const
{
	if (n.groups.empty()) {
		*tag = cfg_.tpgt;
		*tpg = n.tpg;
		return true;
	}
	for (const NodePortalGroup &g : n.groups)
		for (const std::string &p : g.portals)
			if (portal_matches(p, local)) {
				*tag = g.tag;
				*tpg = g.tpg;
				return true;
			}
	return false;
}

} // namespace ulp::iscsi::target
