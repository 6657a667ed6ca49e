// SPDX-License-Identifier: MIT
// tools/ulp-stress/gateways.cc - gateways killed and frozen at random under verified
// multipath I/O (see gateways.h).
#include "tools/ulp-stress/gateways.h"

#include "tools/ulp-stress/proc.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

namespace stress
{

using clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

bool gateways_profile(const std::string &name, GatewaysOptions *o)
{
	if (name == "short") {
		o->failovers = 2;
		o->lease_s = 3;
		o->cmd_timeout_s = 5;
		o->gap_min = 1500ms;
		o->gap_max = 4000ms;
		return true;
	}
	if (name == "long") {
		// The figures: ulp-targetd's hand-tested lease (6 s) and the initiator's
		// --cmd-timeout 10 of the same test.
		o->failovers = 50;
		o->lease_s = 6;
		o->cmd_timeout_s = 10;
		o->gap_min = 2000ms;
		o->gap_max = 8000ms;
		return true;
	}
	return false;
}

namespace
{

constexpr char kIqn[] = "iqn.2026-11.org.ulp:gw-stress";
constexpr int kFencedExit = 3; // ulp-targetd's exit status once fenced (gateway.h)

// A line on stderr, whole.
void say_line(const std::string &m)
{
	static std::mutex mu;
	std::lock_guard g(mu);
	std::fprintf(stderr, "ulp-stress: %s\n", m.c_str());
}

double secs(clock::duration d)
{
	return std::chrono::duration<double>(d).count();
}

std::string fixed(double v, int prec)
{
	char b[64];
	std::snprintf(b, sizeof(b), "%.*f", prec, v);
	return b;
}

std::string join(const std::vector<std::string> &v)
{
	std::string s;
	for (const auto &a : v)
		s += (s.empty() ? "" : " ") + a;
	return s;
}

// The last lines of a file, indented.
std::string tail_of(const std::string &file, size_t n)
{
	std::ifstream f(file);
	std::vector<std::string> last;
	for (std::string l; std::getline(f, l);) {
		last.push_back(l);
		if (last.size() > n)
			last.erase(last.begin());
	}
	std::string out;
	for (const auto &l : last)
		out += "  | " + l + "\n";
	return out;
}

// The Ceph cluster: a running one of scripts/ceph-dev.sh, or ours.
class Cluster
{
public:
	~Cluster() { close(); }

	bool open(const GatewaysOptions &o, std::string *why)
	{
		dev_ = o.ceph_dev;
		if (!o.ceph_dir.empty()) {
			dir_ = o.ceph_dir;
			std::string out;
			if (run_command({"bash", dev_, "status", "--dir", dir_}, 60s, &out) != 0) {
				*why = "--ceph-dir " + dir_ + ": its cluster does not run (" +
				       dev_ + " status):\n" + out;
				return false;
			}
			return true;
		}
		char tmpl[] = "/tmp/ulp-stress-ceph-XXXXXX";
		if (!::mkdtemp(tmpl)) {
			*why = std::string("mkdtemp: ") + std::strerror(errno);
			return false;
		}
		dir_ = tmpl;
		ours_ = true;
		const uint16_t port = free_port();
		say_line("starting a Ceph cluster in " + dir_ + " (" + dev_ + ", monitor port " +
		         std::to_string(port) + ")");
		const auto t0 = clock::now();
		std::string out;
		const int rc = run_command({"bash", dev_, "start", "--dir", dir_, "--port",
		                            std::to_string(port), "--timeout", "60"},
		                           180s, &out);
		if (rc != 0) {
			*why = dev_ + " start: status " + std::to_string(rc) + ":\n" + out;
			return false;
		}
		say_line("cluster up in " + fixed(secs(clock::now() - t0), 1) + " s");
		return true;
	}

	// Stop ours, and remove its directory.
	void close()
	{
		if (!ours_)
			return;
		ours_ = false;
		std::string out;
		run_command({"bash", dev_, "stop", "--dir", dir_, "--timeout", "20"}, 90s, &out);
		std::error_code ec;
		fs::remove_all(dir_, ec);
	}

	const std::string &dir() const { return dir_; }
	bool ours() const { return ours_; }
	std::string conf() const { return dir_ + "/ceph.conf"; }
	std::string gw_keyring() const { return dir_ + "/client.ulp-gw.keyring"; }
	// A Ceph client (rbd, rados) as client.admin, bounded: its status and output.
	int cli(const std::string &tool, std::vector<std::string> args, std::string *out) const
	{
		args.insert(args.begin(), {tool, "-c", conf(), "--keyring", dir_ + "/keyring",
		                           "--client-mount-timeout", "10"});
		return run_command(args, 60s, out);
	}

private:
	std::string dev_, dir_;
	bool ours_ = false;
};

// One gateway: its ulp-targetd (restarted in place) and its ports.
struct Gw {
	std::string name;  // gw1, gw2, ...
	uint16_t tcp = 0;  // its iSCSI/TCP portal
	uint16_t iser = 0; // its iSER portal (iser runs)
	TargetOptions opts;
	Target proc;
	uint32_t starts = 0;
	bool frozen = false; // SIGSTOPped: ask it nothing
	std::string portal(Transport t) const
	{
		return "127.0.0.1:" + std::to_string(t == Transport::Iser ? iser : tcp);
	}
	std::string log() const { return opts.dir + "/ulp-targetd.log"; }
};

// An owner failed on purpose.
struct Injection {
	std::string kind; // kill, freeze
	std::string gw;
	clock::time_point t0;
	double owner_s = -1;  // until another gateway (or the restarted one) owned the group
	bool matched = false; // a failover of the initiator answered it
	double stall_ms = 0;  // the initiator's I/O stall
	double resume_s = -1; // from t0 to the I/O resumed
	std::string failover; // "A -> B"
};

// One failover line of the initiator ("failover at T s from path A to path B: I/O stalled
// N ms (why)"), parsed.
struct FailoverLine {
	clock::time_point end; // when we read it: the I/O resumed just before
	std::string from, to, why;
	double stall_ms = 0;
};

bool parse_failover(const Program::Line &l, FailoverLine *f)
{
	const std::string &s = l.text;
	const size_t a = s.find("failover at ");
	const size_t b = s.find(" from path ", a == std::string::npos ? 0 : a);
	const size_t c = s.find(" to path ", b == std::string::npos ? 0 : b);
	const size_t d = s.find(": I/O stalled ", c == std::string::npos ? 0 : c);
	const size_t e = s.find(" ms (", d == std::string::npos ? 0 : d);
	if (a == std::string::npos || b == std::string::npos || c == std::string::npos ||
	    d == std::string::npos || e == std::string::npos)
		return false;
	f->end = l.at;
	f->from = s.substr(b + 11, c - b - 11);
	f->to = s.substr(c + 9, d - c - 9);
	f->stall_ms = std::atof(s.c_str() + d + 14);
	f->why = s.substr(e + 5);
	if (!f->why.empty() && f->why.back() == ')')
		f->why.pop_back();
	return true;
}

class Scenario
{
public:
	Scenario(const GatewaysOptions &o, Cluster &c, Transport t, Report &rep)
	    : o_(o), c_(c), t_(t), rng_(o.seed ^ (uint64_t(t) << 32))
	{
		const std::string tn = transport_name(t);
		auto mk = [&](const std::string &sc) {
			auto r = std::make_unique<Row>();
			r->scenario = sc;
			r->transport = tn;
			r->figure = "stall";
			Row *p = r.get();
			rep.rows.push_back(std::move(r));
			return p;
		};
		all_ = mk("gateways");
		kill_ = mk("gateways/kill");
		freeze_ = mk("gateways/freeze");
		tag_ = "gateways/" + tn;
		const std::string id = std::to_string(::getpid()) + "-" + tn;
		image_ = "ulp-stress-gw-" + id;
		nspace_ = "ulp-stress-" + id;
	}
	~Scenario() { cleanup(); }

	void run();

private:
	void say(const std::string &m) { say_line(tag_ + ": " + m); }
	bool setup();
	std::string config(const Gw &g, size_t i) const;
	bool start_gw(Gw &g);
	int owner(uint64_t *epoch); // the gateway reporting itself active, -1: none
	void pump();                // the initiator's new lines
	void check_exits();         // gateways that ended unasked
	bool sleep_for(clock::duration d);
	bool settle(size_t k); // everything back after injection k-1
	bool inject(const std::string &kind);
	void finish();
	void cleanup();

	const GatewaysOptions &o_;
	Cluster &c_;
	const Transport t_;
	std::mt19937_64 rng_;
	Row *all_, *kill_, *freeze_; // gateways, gateways/kill, gateways/freeze
	std::string tag_, image_, nspace_, work_;
	bool image_made_ = false;
	std::vector<std::unique_ptr<Gw>> gws_;
	Program ini_;
	std::string ini_out_, ini_err_;
	size_t cursor_ = 0;
	std::vector<Injection> inj_;
	std::vector<FailoverLine> failovers_;
	uint32_t other_failovers_ = 0;
	bool cleaned_ = false;
};

std::string Scenario::config(const Gw &g, size_t i) const
{
	// One target, its LUN the image, one portal group: this gateway's portals with a
	// relative port id unique in the cluster (10, 20, ...).
	std::ostringstream s;
	const std::string tcp = "\"127.0.0.1:" + std::to_string(g.tcp) + "\"";
	const std::string iser = "\"127.0.0.1:" + std::to_string(g.iser) + "\"";
	const bool rdma = t_ == Transport::Iser;
	s << "state_dir = \"" << g.opts.dir << "/state\"\n"
	  << "portals = [" << tcp << "]\n";
	if (rdma)
		s << "iser_portals = [" << iser << "]\n";
	s << "[gateway]\nname = \"" << g.name << "\"\npool = \"" << o_.pool << "\"\n"
	  << "namespace = \"" << nspace_ << "\"\nconf = \"" << c_.conf() << "\"\n"
	  << "client = \"ulp-gw\"\nkeyring = \"" << c_.gw_keyring() << "\"\n"
	  << "lease = " << o_.lease_s << "\nhold_off = " << o_.lease_s * 2 << "\n"
	  << "[[target]]\nname = \"" << kIqn << "\"\n"
	  << "  [[target.portal_group]]\n  tag = 1\n  rtpi = " << (i + 1) * 10 << "\n"
	  << "  portals = [" << tcp << (rdma ? ", " + iser : "") << "]\n"
	  << "  [[target.lun]]\n  lun = 0\n  backstore = \"rbd\"\n  pool = \"" << o_.pool
	  << "\"\n  image = \"" << image_ << "\"\n  conf = \"" << c_.conf() << "\"\n"
	  << "  client = \"ulp-gw\"\n  keyring = \"" << c_.gw_keyring() << "\"\n"
	  << "  group = \"g1\"\n";
	return s.str();
}

bool Scenario::start_gw(Gw &g)
{
	Endpoint ep;
	std::string why;
	g.frozen = false;
	if (!g.proc.start(g.opts, &ep, &why)) {
		all_->fail(g.name + ": start " + std::to_string(g.starts + 1) + ": " + why);
		return false;
	}
	g.starts++;
	return true;
}

bool Scenario::setup()
{
	char tmpl[] = "/tmp/ulp-stress-gw-XXXXXX";
	if (!::mkdtemp(tmpl)) {
		all_->fail(std::string("mkdtemp: ") + std::strerror(errno));
		return false;
	}
	work_ = tmpl;
	std::string out;
	if (c_.cli("rbd", {"create", "--size", "256M", o_.pool + "/" + image_}, &out) != 0) {
		all_->fail("rbd create " + o_.pool + "/" + image_ + ": " + out);
		return false;
	}
	image_made_ = true;
	for (uint32_t i = 0; i < o_.gateways; i++) {
		auto g = std::make_unique<Gw>();
		g->name = "gw" + std::to_string(i + 1);
		g->tcp = free_port();
		g->iser = t_ == Transport::Iser ? free_port() : 0;
		g->opts.targetd = o_.targetd;
		g->opts.config_only = true;
		g->opts.dir = work_ + "/" + g->name;
		fs::create_directories(g->opts.dir);
		g->opts.config = config(*g, i);
		gws_.push_back(std::move(g));
	}
	for (auto &g : gws_)
		if (!start_gw(*g))
			return false;
	// One of them owns the group before the I/O starts (a first owner fences nobody).
	const auto deadline = clock::now() + std::chrono::seconds(o_.lease_s * 3 + 30);
	uint64_t epoch = 0;
	int own = -1;
	while ((own = owner(&epoch)) < 0 && clock::now() < deadline)
		std::this_thread::sleep_for(200ms);
	if (own < 0) {
		all_->fail("no gateway owned the group " + std::to_string(o_.lease_s * 3 + 30) +
		           " s after the start");
		return false;
	}
	std::string ports;
	for (auto &g : gws_)
		ports += " " + g->name + "=" + g->portal(t_);
	say(std::to_string(gws_.size()) + " gateways up (" + ports.substr(1) + "), lease " +
	    std::to_string(o_.lease_s) + " s; " + gws_[size_t(own)]->name + " owns the image " +
	    o_.pool + "/" + image_);

	std::vector<std::string> args{o_.initiator, "-p", gws_[0]->portal(t_)};
	for (size_t i = 1; i < gws_.size(); i++)
		args.insert(args.end(), {"--path", gws_[i]->portal(t_)});
	args.insert(args.end(),
	            {"-t", kIqn, "-w", "randwrite", "-r", "86400", "-q", "8", "--bs", "4k",
	             "--range", "16m", "--verify-only", "--cmd-timeout", fixed(o_.cmd_timeout_s, 1),
	             "--seed", std::to_string(rng_() & 0xffffffff), "--json", "--quiet"});
	if (t_ == Transport::Iser)
		args.insert(args.end(), {"--transport", "iser"});
	all_->note("initiator: " + join(args) + " (SIGINT at the end)");
	ini_out_ = work_ + "/initiator.json";
	ini_err_ = work_ + "/initiator.err";
	std::string why;
	if (!ini_.start(args, ini_out_, ini_err_, &why)) {
		all_->fail("ulp-initiator: " + why);
		return false;
	}
	return true;
}

int Scenario::owner(uint64_t *epoch)
{
	int own = -1;
	for (size_t i = 0; i < gws_.size(); i++) {
		Gw &g = *gws_[i];
		if (g.frozen || g.proc.pid() <= 0)
			continue;
		json r;
		std::string why;
		if (!g.proc.call("gateway_show", json::object(), &r, &why, 3s))
			continue;
		const json &gr = r.value("groups", json::array());
		if (gr.empty() || gr[0].value("state", "") != "active")
			continue;
		if (own >= 0)
			return -1; // two say they own it: not settled (a split would show here)
		own = int(i);
		*epoch = gr[0].value("epoch", uint64_t(0));
	}
	return own;
}

void Scenario::pump()
{
	for (const auto &l : ini_.lines(&cursor_)) {
		if (o_.verbose)
			say("initiator: " + l.text);
		FailoverLine f;
		if (!parse_failover(l, &f))
			continue;
		failovers_.push_back(f);
		// The failure it answers: the last one before the stall began (its first
		// uncompleted command was sent before the owner failed, by a few ms at most).
		const auto began = f.end - std::chrono::microseconds(int64_t(f.stall_ms * 1000));
		Injection *in = nullptr;
		for (auto &i : inj_)
			if (i.t0 <= began + 1s)
				in = &i;
		std::string line = "failover " + f.from + " -> " + f.to + ", I/O stalled " +
		                   fixed(f.stall_ms / 1000, 2) + " s (" + f.why + ")";
		if (in && !in->matched) {
			in->matched = true;
			in->stall_ms = f.stall_ms;
			in->failover = f.from + " -> " + f.to;
			in->resume_s = secs(f.end - in->t0);
			Row *r = in->kind == "kill" ? kill_ : freeze_;
			const auto ns = std::chrono::nanoseconds(int64_t(f.stall_ms * 1e6));
			r->add_teardown(ns);
			all_->add_teardown(ns);
			// The time to resume: from our failure of the owner to the I/O resumed,
			// whatever the initiator saw of it (a frozen owner may answer late GOOD
			// first).
			r->add_more("resume", f.end - in->t0);
			all_->add_more("resume", f.end - in->t0);
			say(line + ": after the " + in->kind + " of " + in->gw + ", " +
			    fixed(in->resume_s, 2) + " s after it");
		} else {
			other_failovers_++;
			say(line + ": not after a failure of ours");
			all_->note("a failover not after a failure of ours: " + line);
		}
	}
}

void Scenario::check_exits()
{
	for (auto &g : gws_) {
		if (g->frozen || g->proc.pid() <= 0)
			continue;
		const int st = g->proc.wait_exit(0ms);
		if (st < 0)
			continue;
		all_->fail(g->name + " ended unasked with status " + std::to_string(st) +
		           "; its log:\n" + tail_of(g->log(), 15));
		std::this_thread::sleep_for(100ms);
		start_gw(*g); // as its unit would
	}
}

bool Scenario::sleep_for(clock::duration d)
{
	const auto until = clock::now() + d;
	while (clock::now() < until) {
		std::this_thread::sleep_for(100ms);
		if (o_.stop && o_.stop->load()) {
			all_->fail("interrupted (SIGINT or SIGTERM)");
			return false;
		}
		pump();
		check_exits();
		if (ini_.wait(0ms) != -1) {
			all_->fail("ulp-initiator ended before the end; its last lines:\n" +
			           tail_of(ini_err_, 20));
			return false;
		}
	}
	return true;
}

bool Scenario::settle(size_t k)
{
	// Every gateway up, one owner, and the last failure answered by a failover that
	// resumed the I/O.
	const auto t0 = clock::now();
	const auto deadline = t0 + o_.resume_bound;
	for (;;) {
		uint64_t epoch;
		const bool up = std::all_of(gws_.begin(), gws_.end(), [](const auto &g) {
			return !g->frozen && g->proc.pid() > 0;
		});
		if (up && (k == 0 || inj_[k - 1].matched) && owner(&epoch) >= 0)
			return true;
		if (clock::now() >= deadline)
			break;
		if (!sleep_for(200ms))
			return false;
	}
	std::string why = "after the " + inj_[k - 1].kind + " of " + inj_[k - 1].gw + ": ";
	why += inj_[k - 1].matched ? "no gateway owns the group"
	                           : "the initiator did not resume its I/O";
	all_->fail(why + " within " +
	           std::to_string(
	               std::chrono::duration_cast<std::chrono::seconds>(o_.resume_bound).count()) +
	           " s; the initiator's last lines:\n" + tail_of(ini_err_, 10));
	return false;
}

bool Scenario::inject(const std::string &kind)
{
	uint64_t epoch = 0;
	const int own = owner(&epoch);
	if (own < 0) {
		all_->fail("no owner to fail");
		return false;
	}
	Gw &g = *gws_[size_t(own)];
	const size_t k = inj_.size();
	Injection in;
	in.kind = kind;
	in.gw = g.name;
	in.t0 = clock::now();
	inj_.push_back(in);
	const pid_t pid = g.proc.pid();
	// Until another gateway (or the one started again) owns the group, with a newer epoch.
	auto wait_owner = [&](bool others_only) {
		const auto deadline = clock::now() + std::chrono::seconds(o_.lease_s * 4 + 30);
		while (clock::now() < deadline) {
			uint64_t e = 0;
			const int o = owner(&e);
			if (o >= 0 && e > epoch && (!others_only || o != own)) {
				inj_[k].owner_s = secs(clock::now() - inj_[k].t0);
				const auto d = clock::now() - inj_[k].t0;
				(kind == "kill" ? kill_ : freeze_)->add_more("owner", d);
				all_->add_more("owner", d);
				return true;
			}
			std::this_thread::sleep_for(100ms);
			pump();
		}
		return false;
	};
	(kind == "kill" ? kill_ : freeze_)->cycles++;
	all_->cycles++;
	if (kind == "kill") {
		say("SIGKILL to " + g.name + " (pid " + std::to_string(pid) + "), the owner");
		::kill(pid, SIGKILL);
		const int st = g.proc.wait_exit(10s);
		if (st != 128 + SIGKILL)
			all_->fail(g.name + ": status " + std::to_string(st) + " after SIGKILL");
		std::this_thread::sleep_for(100ms); // systemd's RestartSec default
		if (!start_gw(g))
			return false;
		if (!wait_owner(false)) {
			all_->fail("after the kill of " + g.name + ": no gateway owned the group");
			return false;
		}
		return true;
	}
	say("SIGSTOP to " + g.name + " (pid " + std::to_string(pid) + "), the owner");
	g.frozen = true;
	::kill(pid, SIGSTOP);
	bool moved = wait_owner(true);
	// Optionally until the initiator gave up the commands it had sent there, too.
	const auto thaw =
	    inj_[k].t0 + std::chrono::milliseconds(int64_t(o_.cmd_timeout_s * 1000) + 1000);
	while (moved && o_.thaw_after_timeout && clock::now() < thaw) {
		std::this_thread::sleep_for(100ms);
		pump();
	}
	::kill(pid, SIGCONT);
	g.frozen = false;
	if (!moved) {
		all_->fail("after the freeze of " + g.name + ": no other gateway owned the group");
		return false;
	}
	say(g.name + " frozen until another gateway owned the group (" + fixed(inj_[k].owner_s, 1) +
	    " s)" + (o_.thaw_after_timeout ? " and the initiator's command timeout passed" : "") +
	    ": SIGCONT");
	// It must find itself fenced and end with kFencedExit, serving nothing more.
	const int st = g.proc.wait_exit(30s);
	if (st != kFencedExit) {
		all_->fail(g.name + " after SIGCONT: " +
		           (st == -1 ? std::string("still running 30 s later")
		                     : "status " + std::to_string(st)) +
		           ", not " + std::to_string(kFencedExit) + " (fenced); its log:\n" +
		           tail_of(g.log(), 15));
		if (st == -1)
			g.proc.kill_now();
	}
	std::this_thread::sleep_for(100ms);
	return start_gw(g);
}

void Scenario::run()
{
	const auto t0 = clock::now();
	if (!setup()) {
		cleanup();
		return;
	}
	// Half kills, half freezes (a kill more when odd), in a random order.
	std::vector<std::string> kinds;
	for (uint32_t i = 0; i < o_.failovers; i++)
		kinds.push_back(i % 2 ? "freeze" : "kill");
	std::shuffle(kinds.begin(), kinds.end(), rng_);
	std::uniform_int_distribution<int64_t> gap(o_.gap_min.count(), o_.gap_max.count());
	bool ok = true;
	for (size_t k = 0; k < kinds.size() && ok; k++) {
		ok = settle(k) && sleep_for(std::chrono::milliseconds(gap(rng_))) &&
		     inject(kinds[k]);
		say(std::to_string(k + 1) + "/" + std::to_string(kinds.size()) +
		    " failures injected, " + std::to_string(all_->teardown.count()) +
		    " answered by a failover [" + fixed(secs(clock::now() - t0), 0) + " s]");
	}
	if (ok)
		ok = settle(kinds.size()) && sleep_for(2s);
	finish();
	cleanup();
	all_->seconds = secs(clock::now() - t0);
}

void Scenario::finish()
{
	// The initiator: its workload ended (SIGINT), its verify pass, its report.
	ini_.signal(SIGINT);
	int st = ini_.wait(std::chrono::seconds(120 + int(o_.cmd_timeout_s) * 2));
	pump();
	if (st == -1) {
		all_->fail("ulp-initiator still running 120 s after SIGINT; its last lines:\n" +
		           tail_of(ini_err_, 20));
		ini_.signal(SIGKILL);
		st = ini_.wait(10s);
	}
	std::ifstream f(ini_out_);
	std::stringstream ss;
	ss << f.rdbuf();
	const json j = json::parse(ss.str(), nullptr, false);
	if (j.is_discarded() || !j.is_object()) {
		all_->fail("ulp-initiator (status " + std::to_string(st) +
		           ") gave no report; its last lines:\n" + tail_of(ini_err_, 20));
	} else {
		all_->ios = j.value("ios", uint64_t(0));
		const uint64_t errors = j.value("errors", uint64_t(0));
		const uint64_t verr = j.value("verify_errors", uint64_t(0));
		const uint64_t vblocks = j.value("verified_blocks", uint64_t(0));
		if (st != 0 || !j.value("ok", false) || errors || verr)
			all_->fail("ulp-initiator: status " + std::to_string(st) + ", " +
			           std::to_string(errors) + " failed commands, " +
			           std::to_string(verr) + " blocks read back wrong, fatal \"" +
			           j.value("fatal", std::string()) + "\"; its last lines:\n" +
			           tail_of(ini_err_, 20));
		if (!vblocks)
			all_->fail("ulp-initiator verified no block");
		const json fo = j.contains("multipath")
		                    ? j["multipath"].value("failovers", json::array())
		                    : json::array();
		if (fo.size() != failovers_.size())
			all_->fail("ulp-initiator reports " + std::to_string(fo.size()) +
			           " failovers, its stderr had " +
			           std::to_string(failovers_.size()));
		for (const auto &x : fo)
			if (!x.value("resumed", false))
				all_->fail("a failover that never resumed: " + x.dump());
		all_->note("initiator: " + std::to_string(all_->ios.load()) + " writes, " +
		           std::to_string(vblocks) + " blocks verified, " + std::to_string(errors) +
		           " errors, " + std::to_string(verr) + " verify errors, p99 latency " +
		           fixed(j.value("p99_us", 0.0) / 1000, 1) + " ms, max " +
		           fixed(j.value("max_us", 0.0) / 1000, 0) + " ms");
	}
	for (const auto &in : inj_) {
		if (!in.matched)
			all_->fail("the " + in.kind + " of " + in.gw +
			           " was answered by no failover of the initiator");
		(in.kind == "kill" ? kill_ : freeze_)
		    ->note(in.kind + " " + in.gw + ": another owner after " + fixed(in.owner_s, 1) +
		           " s; I/O " + (in.matched ? in.failover : "?") + ", stalled " +
		           fixed(in.stall_ms / 1000, 2) + " s, resumed " + fixed(in.resume_s, 2) +
		           " s after the " + in.kind);
	}
	if (other_failovers_)
		all_->note(std::to_string(other_failovers_) +
		           " failovers that followed no failure of ours (a gateway's own move)");
	all_->note(o_.thaw_after_timeout
	               ? "frozen owners thawed once another gateway owned the group and the "
	                 "initiator's command timeout had passed"
	               : "frozen owners thawed as soon as another gateway owned the group");
	// The gateways: SIGTERM, status 0 (the owner drains: its lock released, nobody fenced).
	for (auto &g : gws_) {
		if (g->proc.pid() <= 0)
			continue;
		const int s = g->proc.stop(30s);
		if (s != 0)
			all_->fail(g->name + ": status " + std::to_string(s) +
			           " on SIGTERM; its log:\n" + tail_of(g->log(), 15));
	}
	std::string gl;
	for (auto &g : gws_)
		gl += " " + g->name + " " + std::to_string(g->starts) + "x";
	all_->note("gateways started:" + gl + "; lease " + std::to_string(o_.lease_s) +
	           " s, initiator --cmd-timeout " + fixed(o_.cmd_timeout_s, 1) + " s");
}

void Scenario::cleanup()
{
	if (cleaned_)
		return;
	cleaned_ = true;
	gws_.clear(); // SIGKILL whatever still runs (Target's destructor)
	std::string out;
	if (image_made_ &&
	    c_.cli("rbd", {"rm", "--no-progress", o_.pool + "/" + image_}, &out) != 0)
		all_->note("rbd rm " + o_.pool + "/" + image_ + ": " + out);
	// The map and the lease of this run (its own RADOS namespace), in a cluster that stays.
	if (!c_.ours() && c_.cli("rados", {"-p", o_.pool, "-N", nspace_, "ls"}, &out) == 0) {
		std::istringstream ls(out);
		std::string o2;
		for (std::string obj; std::getline(ls, obj);)
			if (!obj.empty())
				c_.cli("rados", {"-p", o_.pool, "-N", nspace_, "rm", obj}, &o2);
	}
	if (!work_.empty() && all_->failures == 0) {
		std::error_code ec;
		fs::remove_all(work_, ec);
	} else if (!work_.empty()) {
		all_->note("logs kept in " + work_);
	}
}

} // namespace

void gateways_run(const GatewaysOptions &o, const std::vector<Transport> &ts, Report &rep)
{
	// The cluster is named by its conf and keyring alone: a caller's CEPH_ARGS (another
	// id, another conf) would reach our rbd and rados calls and the gateways.
	::unsetenv("CEPH_ARGS");
	Cluster c;
	std::string why;
	if (!c.open(o, &why)) {
		auto r = std::make_unique<Row>();
		r->scenario = "gateways";
		r->transport = "-";
		r->figure = "stall";
		r->fail("the Ceph cluster: " + why);
		rep.rows.push_back(std::move(r));
		return;
	}
	for (Transport t : ts) {
		if (o.stop && o.stop->load())
			break;
		Scenario s(o, c, t, rep);
		s.run();
	}
	c.close();
}

} // namespace stress
