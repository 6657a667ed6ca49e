// SPDX-License-Identifier: MIT
// tools/ulp-targetd/daemon.cc - ulp-targetd's running state: start-up, the operations an
// administrator changes it with, and shutdown (see daemon.h).
#include "tools/ulp-targetd/daemon.h"

#include "providers/soft/soft.h"
#include "tools/common/named_device.h"
#include "tools/ulp-targetd/sd_notify.h"

#include <grp.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace targetd
{

using namespace ulp;
using admin::MethodError;

namespace
{

void log_line(const std::string &s)
{
	ULP_LOG(Info, Tool, "{}", s);
}

// SIGINT, SIGTERM, SIGHUP and SIGUSR1 are blocked in every thread (block_signals, before the
// first thread starts) and taken synchronously by run() with sigwaitinfo: no handler runs in
// an arbitrary thread, and no system call of a worker is interrupted by a SIGHUP.
sigset_t daemon_signals()
{
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGINT);
	sigaddset(&s, SIGTERM);
	sigaddset(&s, SIGHUP);
	sigaddset(&s, SIGUSR1);
	return s;
}

// A flush of every LU's backstore before exit (SYNCHRONIZE CACHE for everyone).
void flush_lu(scsi::LogicalUnit &lu)
{
	if (!lu.bs().write_cache())
		return;
	struct Wait {
		std::mutex m;
		std::condition_variable cv;
		bool done = false;
		int err = 0;
	} w;
	scsi::BsIo io;
	io.op = scsi::BsOp::Flush;
	io.priv = &w;
	io.done = [](scsi::BsIo *io, int err) {
		auto *w = static_cast<Wait *>(io->priv);
		std::lock_guard g(w->m);
		w->done = true;
		w->err = err;
		w->cv.notify_all();
	};
	lu.bs().submit(&io);
	std::unique_lock g(w.m);
	if (!w.cv.wait_for(g, std::chrono::seconds(30), [&] { return w.done; }))
		log_line("flush of " + lu.name() + " did not finish in 30 s");
	else if (w.err)
		log_line("flush of " + lu.name() + ": " + std::strerror(-w.err));
}

// The SRP target's counters in one line (SIGHUP and shutdown): what an operator or a test
// checks that a path was taken (immediate data, external descriptor tables, takeovers).
std::string srp_stats_line(srpt::Target &t)
{
	const srpt::TargetStats s = t.stats();
	std::string l = "SRP stats:";
	auto add = [&](const char *k, uint64_t v) {
		l += std::string(" ") + k + " " + std::to_string(v);
	};
	add("logins", s.logins);
	add("login_rejects", s.login_rejects);
	add("takeovers", s.takeovers);
	add("channels_open", s.channels_open);
	add("nexuses_open", s.nexuses_open);
	add("cmds", s.cmds);
	add("tsk_mgmts", s.tsk_mgmts);
	add("i_logouts", s.i_logouts);
	add("immediate", s.immediate);
	add("ext_tables", s.ext_tables);
	add("rdma_reads", s.rdma_reads);
	add("rdma_writes", s.rdma_writes);
	add("cred_reqs", s.cred_reqs);
	add("wait_list", s.wait_list);
	add("sq_waits", s.sq_waits);
	add("credit_overruns", s.credit_overruns);
	add("bad_ius", s.bad_ius);
	add("task_set_full", s.task_set_full);
	add("data_timeouts", s.data_timeouts);
	add("no_read_credit", s.no_read_credit);
	add("teardown_timeouts", s.teardown_timeouts);
	return l;
}

} // namespace

void fail(int err, const std::string &msg)
{
	throw MethodError{err, msg};
}

void block_signals()
{
	const sigset_t set = daemon_signals();
	pthread_sigmask(SIG_BLOCK, &set, nullptr);
	std::signal(SIGPIPE, SIG_IGN);
}

Daemon::Daemon(const Flags &flags, Config cfg) : flags_(flags), cfg_(std::move(cfg))
{
	add_methods(*this, methods_);
}

Daemon::~Daemon()
{
	// In dependency order (run() has stopped everything when it ran): the admin thread,
	// the portals (their connections point into the targets), the SRP target, the TCP
	// transport, the iSCSI target, the gateway, then the port groups and logical units.
	if (admin_)
		admin_->stop(); // joined before admin_ changes (its methods read admin_)
	admin_.reset();
	for (PortalRt &p : portals_)
		if (p.rdma)
			p.rdma->stop();
	for (auto &p : retired_)
		p->stop();
	portals_.clear();
	retired_.clear();
	srp_.reset();
	if (tcp_)
		tcp_->stop();
	tcp_.reset();
	iscsi_.reset();
	srp_tpg_.reset();
	gateway_.reset(); // it points at the LUs (their reservations' sharing)
	targets_.clear();
	// What was left allocated stays so (see daemon.h): the process is ending.
	for (auto &lu : zombie_lus_)
		(void)lu.release();
	for (auto &t : zombie_tpgs_)
		(void)t.release();
	for (Device *d : soft_devices_)
		soft::destroy_device(d);
}

// ---- Building blocks (under lock_) ----------------------------------------------------------

TargetRt *Daemon::find_target(const std::string &name)
{
	for (auto &t : targets_)
		if (t->cfg.name == name)
			return t.get();
	return nullptr;
}

TargetRt &Daemon::need_target(const std::string &name)
{
	TargetRt *t = find_target(name);
	if (!t)
		fail(-ENOENT, "no target " + name);
	return *t;
}

std::unique_ptr<scsi::LogicalUnit> Daemon::make_lu(const TargetCfg &t, const LunCfg &l)
{
	int err = 0;
	std::string w;
	scsi::BackstoreConfig bc = l.bs;
	if (gateway_) {
		// The gateways share the image: only rbd, and its exclusive lock moves only when
		// this gateway's group owner takes or gives it (docs/ha.md).
		if (bc.kind != "rbd")
			fail(-EINVAL, "target " + t.name + " LUN " + std::to_string(l.lun) +
			                  ": backstore " + bc.kind +
			                  " on a gateway: every LUN of a gateway is an rbd image");
		bc.rbd.managed_lock = true;
	}
	auto bs = scsi::make_backstore(bc, &err, &w);
	if (!bs)
		fail(err ? err : -EINVAL,
		     "target " + t.name + " LUN " + std::to_string(l.lun) + ": " + w);
	scsi::LuConfig lc;
	lc.block_size = l.bs.block_size;
	lc.physical_block_size = l.physical_block_size;
	lc.removable = l.removable;
	lc.tp_soft_threshold_pct = uint8_t(l.tp_soft_threshold); // 0..100 (load_lun)
	lc.read_only = l.read_only;
	// Its identity: what the configuration sets, the defaults for the rest (LuIdentity).
	lc.product = "ulp " + l.bs.kind;
	if (!l.id.vendor.empty())
		lc.vendor = l.id.vendor;
	if (!l.id.product.empty())
		lc.product = l.id.product;
	if (!l.id.revision.empty())
		lc.revision = l.id.revision;
	lc.serial = l.id.serial; // "": derived from the name
	lc.naa = l.id.naa;       // 0: derived from the name
	auto lu = std::make_unique<scsi::LogicalUnit>(lu_name(t.name, l.lun), std::move(bs), lc);
	// A gateway's LU: its groups and states from the cluster map (gateway.h), standby here
	// until this gateway owns its group; no state of its own to keep.
	if (gateway_) {
		scsi::RadosConfig rc;
		rc.conf = bc.rbd.conf;
		rc.client = bc.rbd.client;
		rc.keyring = bc.rbd.keyring;
		rc.group = bc.rbd.group;
		rc.timeout_s = bc.rbd.timeout_s;
		rc.managed_lock = true;
		if (int r = gateway_->add_lu(t.name, lu.get(), rc, &w); r < 0)
			fail(r, "target " + t.name + " LUN " + std::to_string(l.lun) +
			            ": gateway: " + w);
		return lu;
	}
	// The target's asymmetric access (SPC-4 5.15), before any initiator sees the LU.
	// The states an administrator set last (alua_set) replace the configured ones.
	if (t.alua.tpgs != scsi::TPGS_NONE) {
		scsi::AluaConfig ac = alua_config(t, cfg_.srp);
		alua_load_states(*lu, &ac);
		if (lu->alua_.configure(ac, &w) != 0)
			fail(-EINVAL,
			     "target " + t.name + " LUN " + std::to_string(l.lun) + ": alua: " + w);
	}
	// Every later change of its states (SET TARGET PORT GROUPS, alua_set, a reload) is
	// stored before it is answered (scsi/alua.h).
	lu->alua_.set_persist(alua_persist_hook(*lu));
	// Its reservations as the last run left them (APTPL 1), before anyone can log in; a
	// damaged state file refuses the LUN (the message says which file, and that moving it
	// aside starts the LUN without them).
	if (pr_store_) {
		const scsi::PrLoad pl = scsi::pr_attach_store(*lu, *pr_store_, &w);
		if (pl != scsi::PrLoad::Ok && pl != scsi::PrLoad::NoState)
			fail(-EINVAL,
			     "target " + t.name + " LUN " + std::to_string(l.lun) + ": " + w);
	}
	return lu;
}

std::unique_ptr<TargetRt> Daemon::make_target(const TargetCfg &t)
{
	auto rt = std::make_unique<TargetRt>();
	rt->cfg = t;
	rt->alua_file = t.alua;
	// Every backstore opened before anything is published.
	try {
		for (const LunCfg &l : t.luns)
			rt->lus[l.lun] = make_lu(t, l);
	} catch (...) {
		for (auto &[n, lu] : rt->lus)
			forget_lu(lu.get());
		throw;
	}
	// One target port per portal group, each with the rtpi its configuration gives it
	// (config.h, srp_rtpi): stable whatever order targets are made in.
	const auto &pgs = t.portal_groups;
	rt->tpg = std::make_unique<scsi::Tpg>(t.name, pgs.empty() ? 1 : pgs[0].port_id());
	for (size_t i = 1; i < pgs.size(); i++)
		rt->group_tpgs.push_back(std::make_unique<scsi::Tpg>(t.name, pgs[i].port_id()));
	for (scsi::Tpg *tpg : rt->iscsi_tpgs()) {
		for (auto &[n, lu] : rt->lus)
			tpg->add_lun(n, *lu);
		for (const std::string &a : t.acls) {
			auto it = t.acl_cfg.find(a);
			tpg->add_acl(node_acl(a, it == t.acl_cfg.end() ? nullptr : &it->second));
		}
	}
	return rt;
}

std::vector<scsi::Tpg *> TargetRt::iscsi_tpgs() const
{
	std::vector<scsi::Tpg *> v{tpg.get()};
	for (const auto &g : group_tpgs)
		v.push_back(g.get());
	return v;
}

iscsi::target::TargetNode Daemon::node_of(const TargetRt &t)
{
	iscsi::target::TargetNode node;
	node.name = t.cfg.name;
	node.alias = t.cfg.alias;
	node.tpg = t.tpg.get();
	node.allow_target_reset = t.cfg.allow_target_reset;
	node.redirect = t.cfg.redirect;
	node.redirect_permanent = t.cfg.redirect_permanent;
	// Its portal groups with the portals' bound addresses (an ephemeral port is known
	// once listening: refresh_portal_addresses renews the node then).
	const std::vector<scsi::Tpg *> tpgs = t.iscsi_tpgs();
	for (size_t i = 0; i < t.cfg.portal_groups.size(); i++) {
		const PortalGroupCfg &pg = t.cfg.portal_groups[i];
		iscsi::target::NodePortalGroup g;
		g.tag = pg.tag;
		g.tpg = tpgs[i];
		for (const Portal &want : pg.portals)
			for (const PortalRt &p : portals_) {
				if (p.transport == "srp" || portal_str(p.cfg) != portal_str(want))
					continue;
				Portal b = p.cfg;
				b.port = p.port;
				g.portals.push_back(portal_str(b));
			}
		node.groups.push_back(std::move(g));
	}
	// RFC 7143 12.1.3: the target picks the secret by the initiator's name; "" is the
	// target-wide one, for initiators without their own.
	if (t.cfg.chap) {
		iscsi::ChapCredentials cr;
		cr.incoming = *t.cfg.chap;
		if (t.cfg.mutual_chap)
			cr.outgoing = *t.cfg.mutual_chap;
		node.chap[""] = cr;
	}
	for (auto &[initiator, a] : t.cfg.acl_cfg) {
		if (!a.chap)
			continue;
		iscsi::ChapCredentials cr;
		cr.incoming = *a.chap;
		if (a.mutual_chap)
			cr.outgoing = *a.mutual_chap;
		node.chap[initiator] = cr;
	}
	// An initiator with a secret of its own must always use it (conn.cc); the others may
	// skip CHAP only where the target allows it.
	node.require_chap = !node.chap.empty() && !t.cfg.allow_no_chap;
	for (const std::string &a : t.cfg.allowed_addresses) // checked by check_target
		if (iscsi::target::AddrPrefix p; iscsi::target::parse_addr_prefix(a, &p))
			node.allowed_addresses.push_back(p);
	return node;
}

bool Daemon::exported_by_srp(const TargetRt &t) const
{
	if (!srp_tpg_)
		return false;
	const std::string &of =
	    cfg_.srp.target.empty()
	        ? (targets_.empty() ? std::string() : targets_.front()->cfg.name)
	        : cfg_.srp.target;
	return t.cfg.name == of;
}

std::vector<scsi::Tpg *> Daemon::tpgs_of(const TargetRt &t)
{
	std::vector<scsi::Tpg *> v = t.iscsi_tpgs();
	if (exported_by_srp(t))
		v.push_back(srp_tpg_.get());
	return v;
}

void Daemon::ensure_srp()
{
	if (srp_)
		return;
	if (targets_.empty())
		fail(-EINVAL, "SRP exports a target's LUNs: create a target first");
	const std::string &of =
	    cfg_.srp.target.empty() ? targets_.front()->cfg.name : cfg_.srp.target;
	TargetRt *t = find_target(of);
	if (!t)
		fail(-ENOENT, "srp.target " + of + " is not a target");
	srp_tpg_ = std::make_unique<scsi::Tpg>("srp:" + of, srp_rtpi(cfg_.srp, t->cfg));
	for (auto &[n, lu] : t->lus)
		srp_tpg_->add_lun(n, *lu);
	for (const std::string &a : cfg_.srp.acls) {
		auto it = cfg_.srp.acl_cfg.find(a);
		srp_tpg_->add_acl(
		    node_acl(a, it == cfg_.srp.acl_cfg.end() ? nullptr : &it->second));
	}
	srpt::TargetConfig sc;
	sc.tpg = srp_tpg_.get();
	sc.id_ext = cfg_.srp.id_ext;
	sc.ioc_guid = cfg_.srp.ioc_guid;
	sc.use_srq = cfg_.srp.srq;
	sc.rq_size = cfg_.srp.rq_size;
	sc.srq_size = cfg_.srp.srq_size;
	sc.sq_size = cfg_.srp.sq_size;
	sc.max_it_iu_len = cfg_.srp.max_it_iu_len;
	sc.immediate = cfg_.srp.immediate_data;
	sc.max_channels = cfg_.srp.max_channels;
	sc.heap_bytes = cfg_.srp.heap_bytes;
	srp_ = std::make_unique<srpt::Target>(sc);
}

std::string Daemon::srp_exports_line()
{
	std::string luns;
	for (uint64_t l : srp_tpg_->lun_list(nullptr))
		luns += " " + std::to_string(l);
	return "SRP target port exports " + srp_tpg_->name().substr(4) + " luns" + luns +
	       (cfg_.srp.acls.empty() ? " (open)"
	                              : " acls " + std::to_string(cfg_.srp.acls.size())) +
	       (cfg_.srp.srq ? " srq" : "");
}

PortalRt Daemon::open_portal(const std::string &transport, Portal p)
{
	PortalRt pr;
	pr.transport = transport;
	pr.cfg = p;
	std::string why;
	if (transport == "tcp") {
		if (int rc = tcp_->listen(p.host, p.port, &why); rc != 0)
			fail(rc, why);
		pr.tcp_index = tcp_->portals() - 1;
		pr.port = tcp_->port(pr.tcp_index);
		return pr;
	}
	if (transport != "iser" && transport != "srp")
		fail(-EINVAL, "transport must be tcp, iser or srp, not " + transport);
	// The provider: the named device's, or a soft device per address (a soft device owns
	// one IPv4 address; "any" means loopback). An iSER and an SRP portal on one address
	// share the device.
	if (!provider_) {
		if (!cfg_.rdma_device.empty()) {
			tools::NamedDevice nd;
			if (!tools::open_named_device(cfg_.rdma_device, &nd, &why))
				fail(-ENODEV, "--rdma-device " + why);
			provider_ = nd.provider;
			rdma_host_ = nd.ip.empty() ? "0.0.0.0" : nd.ip;
		} else {
			provider_ = &soft::provider();
		}
	}
	Portal bind = p;
	if (!cfg_.rdma_device.empty()) {
		if (bind.host.empty())
			bind.host = rdma_host_;
	} else {
		if (bind.host.empty() || bind.host == "0.0.0.0")
			bind.host = "127.0.0.1";
		if (std::find(soft_ips_.begin(), soft_ips_.end(), bind.host) == soft_ips_.end()) {
			soft::DeviceConfig dc;
			dc.ip = bind.host;
			Device *d = soft::create_device(dc);
			if (!d)
				fail(-errno,
				     "soft device for " + bind.host + ": " + std::strerror(errno));
			soft_devices_.push_back(d);
			soft_ips_.push_back(bind.host);
		}
	}
	pr.cfg.host = bind.host;
	std::optional<SockAddr> a = SockAddr::parse(portal_str(bind));
	if (!a)
		fail(-EINVAL, transport + " portal " + portal_str(bind) + ": not an address");
	if (transport == "iser") {
		iser::PortalConfig ic = cfg_.iser;
		ic.max_io = std::bit_ceil(size_t(iscsi_->cfg().max_io_bytes));
		auto ip = std::make_unique<iser::Portal>(*iscsi_, *provider_, ic);
		if (ip->listen(*a, &why) != 0)
			fail(-EADDRNOTAVAIL, "iSER portal " + why);
		if (started_)
			if (int rc = ip->start(); rc != 0)
				fail(rc, std::string("iSER portal start: ") + std::strerror(-rc));
		pr.port = ip->port();
		pr.rdma = std::move(ip);
		return pr;
	}
	ensure_srp();
	auto sp = std::make_unique<srpt::Portal>(*srp_, *provider_);
	if (sp->listen(*a, &why) != 0)
		fail(-EADDRNOTAVAIL, "SRP portal " + portal_str(bind) + ": " + why);
	if (started_)
		if (int rc = sp->start(); rc != 0)
			fail(rc, std::string("SRP portal start: ") + std::strerror(-rc));
	pr.port = sp->port();
	pr.rdma = std::move(sp);
	return pr;
}

void Daemon::refresh_portal_addresses()
{
	// SendTargets reports the TCP portals and the iSER ones (RFC 7143 / 7145: the same
	// TargetAddress key), each once.
	std::vector<std::string> addrs;
	for (const PortalRt &p : portals_) {
		if (p.transport == "srp")
			continue;
		Portal b = p.cfg;
		b.port = p.port;
		const std::string a = portal_str(b);
		if (std::find(addrs.begin(), addrs.end(), a) == addrs.end())
			addrs.push_back(a);
	}
	iscsi_->set_portal_addresses(addrs);
	// Portal groups hold bound addresses too.
	for (const auto &t : targets_)
		if (!t->cfg.portal_groups.empty())
			iscsi_->replace_node(node_of(*t));
}

void Daemon::forget_lu(const scsi::LogicalUnit *lu)
{
	if (gateway_)
		gateway_->remove_lu(lu);
}

Gateway::Ports Daemon::gateway_ports() const
{
	Gateway::Ports ports;
	for (const TargetCfg &t : cfg_.targets) {
		std::vector<uint16_t> &v = ports[t.name];
		if (t.portal_groups.empty())
			v.push_back(1);
		for (const PortalGroupCfg &g : t.portal_groups)
			v.push_back(g.port_id());
		const bool srp = !cfg_.srp_portals.empty() &&
		                 (cfg_.srp.target.empty() ? &t == &cfg_.targets.front()
		                                          : t.name == cfg_.srp.target);
		if (srp)
			v.push_back(srp_rtpi(cfg_.srp, t));
	}
	return ports;
}

void Daemon::drop_lu(std::unique_ptr<scsi::LogicalUnit> lu, const std::vector<scsi::Tpg *> &tpgs,
                     std::chrono::milliseconds grace, std::chrono::milliseconds timeout, json *out)
{
	const int rc = scsi::lu_quiesce(*lu, tpgs, grace, timeout);
	// The gateway forgets it once no command runs on it (its reservations unshared then);
	// one left allocated keeps them allocated too.
	if (gateway_)
		gateway_->remove_lu(lu.get(), rc != 0);
	if (rc == 0) {
		flush_lu(*lu);
		if (out)
			(*out)["drained"] = true;
		return;
	}
	if (out)
		(*out)["drained"] = false;
	zombie_lus_.push_back(std::move(lu)); // left allocated (logged by lu_quiesce)
}

// ---- Start, run, stop -----------------------------------------------------------------------

int Daemon::start(std::string *why)
{
	std::lock_guard g(lock_);
	// The state directory: without it the LUs run, but refuse APTPL 1 (PTPL_C 0).
	std::string sw;
	pr_store_ = scsi::PrStore::open(cfg_.state_dir, &sw);
	if (!pr_store_)
		ULP_LOG(Warn, Tool,
		        "state directory {} cannot be used ({}): persistent reservations will not "
		        "survive a restart, APTPL 1 is refused",
		        cfg_.state_dir, sw);
	// A gateway joins the cluster map before its LUs are made: they take their ALUA
	// states from it. A cluster that does not answer may come back: exit status 1.
	if (cfg_.gateway.enabled()) {
		gateway_ = Gateway::open(cfg_.gateway, gateway_ports(), why);
		if (!gateway_)
			return 1;
	}
	try {
		for (const TargetCfg &t : cfg_.targets)
			targets_.push_back(make_target(t));
	} catch (const MethodError &e) {
		*why = e.message;
		// Storage the configuration names that is not there (no such file, pool or
		// image), or that does not match it, is not mended by starting again: exit
		// status 2, which the unit does not restart. Anything else (a cluster that does
		// not answer yet, an I/O error) may pass: 1, restarted.
		return e.code == -ENOENT || e.code == -EINVAL ? 2 : 1;
	}
	try {
		iscsi::target::TargetConfig tc;
		tc.prefs = cfg_.prefs;
		tc.cmd_window = cfg_.cmd_window;
		tc.allow_discovery = cfg_.discovery;
		if (cfg_.discovery_chap) { // every discovery session must prove it
			iscsi::ChapCredentials cr;
			cr.incoming = *cfg_.discovery_chap;
			cr.outgoing = cfg_.discovery_mutual_chap;
			tc.discovery_chap[""] = cr;
			tc.discovery_require_chap = true;
		}
		tc.nop_interval = std::chrono::seconds(cfg_.nop_interval);
		tc.nop_timeout = std::chrono::seconds(cfg_.nop_timeout);
		tc.max_io_bytes = std::max<uint32_t>(16u << 20, cfg_.prefs.max_burst_length);
		tc.trace = flags_.trace;
		for (auto &t : targets_)
			tc.targets.push_back(node_of(*t));
		iscsi_ = std::make_unique<iscsi::target::Target>(tc);
		iscsi::target::TcpConfig tcpc;
		tcpc.workers = cfg_.workers;
		tcpc.cpus = cfg_.cpus;
		tcp_ = std::make_unique<iscsi::target::TcpServer>(*iscsi_, tcpc);
		for (const Portal &p : cfg_.portals)
			portals_.push_back(open_portal("tcp", p));
		for (const Portal &p : cfg_.iser_portals)
			portals_.push_back(open_portal("iser", p));
		if (!cfg_.srp_portals.empty())
			ensure_srp();
		for (const Portal &p : cfg_.srp_portals)
			portals_.push_back(open_portal("srp", p));
	} catch (const MethodError &e) {
		*why = e.message;
		return 1;
	}
	// The configured hosts as the RDMA set-up settled them (soft devices: loopback).
	cfg_.iser_portals.clear();
	cfg_.srp_portals.clear();
	for (const PortalRt &p : portals_)
		if (p.transport == "iser")
			cfg_.iser_portals.push_back(p.cfg);
		else if (p.transport == "srp")
			cfg_.srp_portals.push_back(p.cfg);

	std::signal(SIGPIPE, SIG_IGN);
	if (int rc = tcp_->start(); rc != 0) {
		*why = std::string("start: ") + std::strerror(-rc);
		return 1;
	}
	for (PortalRt &p : portals_)
		if (p.rdma)
			if (int rc = p.rdma->start(); rc != 0) {
				*why = p.transport + " start: " + std::strerror(-rc);
				return 1;
			}
	started_ = true;
	// The gateway's owners tick from now on. A fenced group ends the daemon as a signal
	// would (run() then returns kFencedExit): a new client is what a fenced one needs.
	if (gateway_)
		gateway_->start([this] {
			fenced_ = true;
			::kill(::getpid(), SIGTERM);
		});
	refresh_portal_addresses();
	for (const PortalRt &p : portals_) {
		Portal b = p.cfg;
		b.port = p.port;
		if (p.transport == "tcp")
			log_line("listening on " + portal_str(b));
		else
			log_line("listening on " +
			         (p.transport == "srp" ? p.rdma->addr() : portal_str(b)) +
			         (p.transport == "srp" ? " (SRP, " : " (iSER, ") +
			         (cfg_.rdma_device.empty() ? std::string("soft provider")
			                                   : cfg_.rdma_device) +
			         ")");
	}
	if (srp_tpg_)
		log_line(srp_exports_line());
	for (const auto &t : cfg_.targets) {
		std::string luns;
		for (const auto &l : t.luns)
			luns += " " + std::to_string(l.lun) + ":" + l.bs.kind;
		log_line("target " + t.name + " luns" + luns +
		         (t.acls.empty() ? " (open)" : " acls " + std::to_string(t.acls.size())) +
		         (t.chap ? " chap" : ""));
	}
	if (!cfg_.admin_socket.empty() || !cfg_.admin_tcp.empty() || !cfg_.metrics_http.empty()) {
		admin::ServerConfig sc;
		sc.path = cfg_.admin_socket;
		sc.tcp = cfg_.admin_tcp;
		sc.http = cfg_.metrics_http;
		if (!cfg_.admin_group.empty()) {
			char *end = nullptr;
			const unsigned long n = std::strtoul(cfg_.admin_group.c_str(), &end, 10);
			if (!*end && end != cfg_.admin_group.c_str()) {
				sc.allowed_gid = gid_t(n);
			} else if (const group *gr = ::getgrnam(cfg_.admin_group.c_str())) {
				sc.allowed_gid = gr->gr_gid;
			} else {
				*why = "admin_group " + cfg_.admin_group + ": no such group";
				return 1;
			}
		}
		admin_ = std::make_unique<admin::Server>(methods_, sc);
		if (int rc = admin_->start(why); rc != 0)
			return 1;
	}
	if (flags_.ready_fd >= 0) {
		// For scripts and tests, once we accept connections: the first TCP portal's port
		// (or the first iSER portal's when there is no TCP one), then "iser PORT" for the
		// first iSER portal if there are both, then "srp PORT".
		std::string line;
		auto first = [&](const char *tr) -> const PortalRt * {
			for (const PortalRt &p : portals_)
				if (p.transport == tr)
					return &p;
			return nullptr;
		};
		const PortalRt *tp = first("tcp"), *ip = first("iser"), *sp = first("srp");
		if (tp)
			line = std::to_string(tp->port) + "\n";
		if (ip)
			line += (tp ? "iser " : "") + std::to_string(ip->port) + "\n";
		if (sp)
			line += (line.empty() ? "" : "srp ") + std::to_string(sp->port) + "\n";
		(void)!::write(flags_.ready_fd, line.data(), line.size());
		::close(flags_.ready_fd);
	}
	sd_notify("READY=1\nSTATUS=serving " + std::to_string(targets_.size()) + " targets on " +
	          std::to_string(portals_.size()) + " portals");
	return 0;
}

void Daemon::rescan_all()
{
	// Every LU's storage size re-read and applied (LogicalUnit::rescan_capacity, which
	// raises CAPACITY DATA HAS CHANGED on a change); one log line per LU.
	log_line("signal Hangup: re-reading the LUNs' sizes");
	for (auto &t : targets_)
		for (auto &[n, lu] : t->lus) {
			const std::string who =
			    "LUN " + lu->name() + " (" + lu->bs().kind() + "): ";
			uint64_t was = 0, now = 0;
			std::string why;
			if (lu->rescan_capacity(&was, &now, &why) < 0)
				log_line(who + "capacity left at " + std::to_string(was) +
				         " blocks: " + why);
			else if (was != now)
				log_line(who + "capacity " + std::to_string(was) + " -> " +
				         std::to_string(now) + " blocks of " +
				         std::to_string(lu->block_size()) +
				         " bytes (unit attention CAPACITY DATA HAS CHANGED)");
			else
				log_line(who + "no capacity change (" + std::to_string(now) +
				         " blocks)");
		}
}

int Daemon::run()
{
	const sigset_t set = daemon_signals();
	int sig = 0;
	for (;;) {
		siginfo_t info{};
		sig = ::sigwaitinfo(&set, &info);
		if (sig < 0) {
			if (errno == EINTR)
				continue;
			log_line(std::string("sigwaitinfo: ") + std::strerror(errno));
			sig = SIGTERM;
			break;
		}
		if (sig == SIGUSR1) {
			// logrotate moved --log-file (tools/ulp-targetd/ulp-targetd.logrotate).
			if (int rc = log::reopen(); rc < 0)
				ULP_LOG(Error, Tool, "SIGUSR1: reopening the log file: {}",
				        std::strerror(-rc));
			else
				log_line(rc == 0 ? "SIGUSR1: log file reopened"
				                 : "SIGUSR1: no --log-file to reopen");
			continue;
		}
		if (sig != SIGHUP)
			break;
		sd_notify("RELOADING=1");
		{
			std::lock_guard g(lock_);
			if (!cfg_.source.empty()) {
				try {
					reload_locked("SIGHUP");
				} catch (const MethodError &) {
					// logged by reload_locked, which changed nothing
				}
			}
			rescan_all();
			if (srp_)
				log_line(srp_stats_line(*srp_));
		}
		sd_notify("READY=1");
	}
	log_line(std::string("signal ") + strsignal(sig) + ": shutting down" +
	         (fenced_ ? " (the gateway was fenced)" : ""));
	sd_notify("STOPPING=1");
	// No more administration while we go; then stop accepting; ask sessions to log out,
	// drop the rest; bounded. The admin thread is joined before admin_ changes: a method
	// running on it (stats) reads admin_.
	if (admin_)
		admin_->stop();
	admin_.reset();
	std::lock_guard g(lock_);
	tcp_->stop_accepting();
	for (PortalRt &p : portals_)
		if (p.rdma)
			p.rdma->stop_accepting();
	const auto grace = std::chrono::milliseconds(cfg_.shutdown_grace_ms);
	const auto limit = std::chrono::milliseconds(cfg_.shutdown_timeout_ms);
	const auto deadline = std::chrono::steady_clock::now() + limit;
	if (!iscsi_->stop(grace, limit))
		log_line("some sessions did not end in time; exiting anyway");
	// SRP has no logout of the target's own at shutdown: its channels are disconnected
	// (Linux's ib_srp then reconnects on its own schedule, to nobody) and drained, within
	// what is left of the same bound.
	if (srp_) {
		const auto left = std::max(std::chrono::milliseconds(1000),
		                           std::chrono::duration_cast<std::chrono::milliseconds>(
		                               deadline - std::chrono::steady_clock::now()));
		if (!srp_->stop(left))
			log_line("some SRP channels did not end in time; exiting anyway");
	}
	tcp_->stop();
	for (PortalRt &p : portals_)
		if (p.rdma)
			p.rdma->stop();
	for (auto &p : retired_)
		p->stop();
	portals_.clear();
	retired_.clear();
	if (srp_)
		log_line(srp_stats_line(*srp_));
	for (auto &t : targets_)
		for (auto &[n, lu] : t->lus)
			flush_lu(*lu);
	// No session is left: a planned stop hands the groups owned here to another gateway
	// (their image locks released, the owner record marked released: the successor fences
	// nobody and need not wait for the lease to run out).
	if (gateway_)
		gateway_->stop(!fenced_);
	log_line("stopped");
	return fenced_ ? kFencedExit : 0;
}

} // namespace targetd
