// SPDX-License-Identifier: MIT
// tests/scsi/pr_shared_test.cc - reservations shared by gateways (scsi/pr_shared.h) over a
// store in memory: what the RADOS store's test (tests/ceph/pr_cluster_test.cc) cannot make
// happen at will - a change a gateway was never told of (its watch broke), a gateway more
// changes behind than the events kept, writes that fail or never win, an announcement that
// fails, a state that is not the LU's - and the events' and SPEC_I_PT's parsers.
#include "pr_env.h"
#include "spc_env.h"

#include <condition_variable>
#include <deque>
#include <future>
#include <thread>

namespace ulp::scsi::pr_test
{
namespace
{

using namespace std::chrono_literals;

// Versioned records every gateway of a test reaches, as RADOS would keep them.
struct FakeCluster {
	std::mutex lock;
	uint64_t version = 0;                       // lock
	std::map<std::string, std::string> records; // lock
	int write_error = 0;                        // writes fail so (lock)
	bool always_cancel = false;                 // writes lose every race (lock)
	int announce_error = 0;                     // announcements fail so (lock)
	std::vector<class FakeStore *> members;     // lock
};

// A thread running jobs in order.
class Jobs
{
public:
	Jobs()
	{
		thr_ = std::thread([this] {
			std::unique_lock g(lock_);
			for (;;) {
				cv_.wait(g, [&] { return stop_ || !q_.empty(); });
				if (q_.empty())
					return;
				auto j = std::move(q_.front());
				q_.pop_front();
				g.unlock();
				j();
				g.lock();
			}
		});
	}
	~Jobs()
	{
		{
			std::lock_guard g(lock_);
			stop_ = true;
			cv_.notify_all();
		}
		thr_.join();
	}
	void post(std::function<void()> j)
	{
		std::lock_guard g(lock_);
		q_.push_back(std::move(j));
		cv_.notify_all();
	}

private:
	std::mutex lock_;
	std::condition_variable cv_;
	std::deque<std::function<void()>> q_;
	bool stop_ = false;
	std::thread thr_;
};

// One gateway's store: the cluster's records; announcing hands the version to every other
// gateway (on its own watch thread) and waits for their answers, bounded.
class FakeStore final : public PrShared
{
public:
	FakeStore(FakeCluster &c, LogicalUnit &lu, uint16_t port) : c_(c), lu_(lu), port_(port)
	{
		std::lock_guard g(c_.lock);
		c_.members.push_back(this);
	}
	~FakeStore() override
	{
		std::lock_guard g(c_.lock);
		std::erase(c_.members, this);
	}
	void post(std::function<void()> job) override { out_.post(std::move(job)); }
	int read(PrSharedView *out) override
	{
		std::lock_guard g(c_.lock);
		out->version = c_.version;
		out->records = c_.records;
		out->ports.clear();
		for (FakeStore *m : c_.members)
			out->ports.push_back(m->port_);
		return 0;
	}
	int write(uint64_t expect, const PrSharedChange &ch, uint64_t *now) override
	{
		std::lock_guard g(c_.lock);
		if (c_.write_error)
			return c_.write_error;
		if (c_.always_cancel || c_.version != expect)
			return -ECANCELED;
		for (const auto &[k, v] : ch.set)
			c_.records[k] = v;
		for (const auto &k : ch.erase)
			c_.records.erase(k);
		*now = ++c_.version;
		return 0;
	}
	int announce(uint64_t version) override
	{
		announced++;
		std::vector<FakeStore *> others;
		{
			std::lock_guard g(c_.lock);
			if (c_.announce_error)
				return c_.announce_error;
			for (FakeStore *m : c_.members)
				if (m != this)
					others.push_back(m);
		}
		std::vector<std::future<bool>> answers;
		for (FakeStore *m : others)
			answers.push_back(m->tell(version));
		int r = 0;
		for (auto &a : answers)
			if (a.wait_for(2s) != std::future_status::ready || !a.get())
				r = -ETIMEDOUT;
		return r;
	}
	// A notify of version (0: the watch broke) on this gateway's watch thread.
	std::future<bool> tell(uint64_t version)
	{
		auto p = std::make_shared<std::promise<bool>>();
		auto f = p->get_future();
		watch_.post([this, version, p] {
			pr_shared_changed(lu_, version, [p](bool ok) { p->set_value(ok); });
		});
		return f;
	}
	std::atomic<int> announced{0};

private:
	FakeCluster &c_;
	LogicalUnit &lu_;
	const uint16_t port_;
	Jobs out_, watch_;
};

// A gateway: its target port, a LU of the test's identity (RAM behind a gate), its store.
struct Gw {
	Gw(FakeCluster &c, uint16_t rtpi, const std::string &identity = "test:lu")
	    : tpg("iqn.2026-11.org.ulp:gw" + std::to_string(rtpi), rtpi)
	{
		auto gb = std::make_unique<GatedBackstore>(ram(1 << 20));
		gate = gb.get();
		lu = std::make_unique<LogicalUnit>("lu0", std::move(gb), LuConfig{});
		store = std::make_unique<FakeStore>(c, *lu, rtpi);
		std::string why;
		EXPECT_EQ(pr_attach_shared(*lu, *store, identity, &why), 0) << why;
		EXPECT_EQ(tpg.add_lun(0, *lu), 0);
	}
	~Gw()
	{
		for (Nexus *s : tpg.sessions())
			EXPECT_EQ(lb.logout(s), 0);
		pr_detach_shared(*lu, *store);
		store.reset(); // its threads: they call into the LU
	}
	Nexus *join(const std::string &port)
	{
		Nexus *s = lb.login(tpg, port.substr(0, port.find(',')), port);
		EXPECT_TRUE(s);
		if (s) {
			EXPECT_EQ(lb.run(s, 0, cdb_tur(), DataDir::None).asc(), UA_POWER_ON);
		}
		return s;
	}
	LoopResult out(Nexus *s, uint8_t sa, uint64_t key, uint64_t sa_key, uint8_t type = 0)
	{
		return lb.run(s, 0, cdb_prout(sa, type), DataDir::Write, prout_data(key, sa_key));
	}
	Status write(Nexus *s)
	{
		return lb.run(s, 0, cdb_rw10(true, 1, 1), DataDir::Write, std::vector<uint8_t>(512))
		    .status;
	}
	uint16_t ua(Nexus *s)
	{
		auto r = lb.run(s, 0, cdb_tur(), DataDir::None);
		return r.status == Status::CheckCondition && r.key() == SenseKey::UnitAttention
		           ? r.asc()
		           : 0;
	}
	uint64_t version()
	{
		PrState &pr = pr_of(*lu);
		std::lock_guard g(pr.lock);
		return pr.shared_version;
	}

	Loopback lb;
	Tpg tpg;
	std::unique_ptr<LogicalUnit> lu;
	GatedBackstore *gate = nullptr;
	std::unique_ptr<FakeStore> store;
};

} // namespace

TEST(PrEvents, RoundTripAndRefusal)
{
	std::vector<PrEvent> ev = {{PrEvent::Ua, UA_REGISTRATIONS_PREEMPTED, {kPortA, 1}, false},
	                           {PrEvent::Abort, 0, {kPortB, 2}, true},
	                           {PrEvent::Ua,
	                            UA_RESERVATIONS_RELEASED,
	                            {"0x0002c90300a1b2c30002c90300a1b2c4", 7},
	                            true}};
	const std::string s = pr_events_encode(ev);
	std::vector<PrEvent> back;
	ASSERT_TRUE(pr_events_decode(s, &back));
	EXPECT_EQ(back, ev);
	EXPECT_TRUE(pr_events_decode(pr_events_encode({}), &back));
	EXPECT_TRUE(back.empty());
	// Anything else is refused whole, the output untouched.
	back = ev;
	for (size_t n = 0; n < s.size(); n++)
		EXPECT_FALSE(pr_events_decode(s.substr(0, n), &back)) << "cut at " << n;
	EXPECT_FALSE(pr_events_decode(s + "x", &back)) << "a byte after";
	auto bad = [&](size_t at, char c) {
		std::string t = s;
		t[at] = c;
		return pr_events_decode(t, &back);
	};
	EXPECT_FALSE(bad(0, 2)) << "format";
	EXPECT_FALSE(bad(5, 3)) << "kind";
	EXPECT_FALSE(bad(7, 0x06)) << "a unit attention not of reservations (2A/06)";
	EXPECT_FALSE(bad(10, 0x02)) << "flags";
	EXPECT_FALSE(bad(13, 0)) << "a NUL in the port";
	std::string many = s;
	many[1] = char(0xff); // 4 billion events in a few bytes
	EXPECT_FALSE(pr_events_decode(many, &back));
	EXPECT_EQ(back, ev);
}

TEST(PrSpecIPt, ParsesTransportIdsStrictly)
{
	auto tid = [](const std::string &port, uint8_t fmt = 0x40) {
		std::vector<uint8_t> t(4 + ((port.size() + 4) & ~size_t(3)), 0);
		t[0] = fmt | 0x05;
		put_be16(&t[2], uint16_t(t.size() - 4));
		std::memcpy(&t[4], port.data(), port.size());
		return t;
	};
	auto list = [](std::vector<std::vector<uint8_t>> tids) {
		std::vector<uint8_t> d(28, 0);
		for (auto &t : tids)
			d.insert(d.end(), t.begin(), t.end());
		put_be32(&d[24], uint32_t(d.size() - 28));
		return d;
	};
	std::vector<PrPort> out;
	ASSERT_EQ(pr_spec_i_pt_parse(list({tid(kPortA), tid(kPortB)}), &out), Sense::None);
	ASSERT_EQ(out.size(), 2u);
	EXPECT_EQ(out[0].port, kPortA);
	EXPECT_EQ(out[1].port, kPortB);
	// The ISID's digits as the core writes them.
	ASSERT_EQ(pr_spec_i_pt_parse(list({tid("iqn.x:y,i,0x23D0000000AB")}), &out), Sense::None);
	EXPECT_EQ(out[0].port, "iqn.x:y,i,0x23d0000000ab");
	EXPECT_EQ(pr_spec_i_pt_parse(list({tid("iqn.x:y,i,0x23d00000000g")}), &out),
	          Sense::InvalidParamListField);
	EXPECT_EQ(pr_spec_i_pt_parse(list({tid(kPortA), tid(kPortA)}), &out),
	          Sense::InvalidParamListField)
	    << "one port twice";
	EXPECT_EQ(pr_spec_i_pt_parse(list({tid("iqn.x:y", 0x00)}), &out),
	          Sense::InvalidParamListField)
	    << "format 00b names a device";
	auto d = list({tid(kPortA)});
	d.pop_back();
	EXPECT_EQ(pr_spec_i_pt_parse(d, &out), Sense::ParamListLengthError) << "cut short";
	d = list({tid(kPortA)});
	put_be32(&d[24], 8);
	EXPECT_EQ(pr_spec_i_pt_parse(d, &out), Sense::ParamListLengthError) << "length cuts it";
	d = list({tid(kPortA)});
	d[28] = 0x06; // SAS
	EXPECT_EQ(pr_spec_i_pt_parse(d, &out), Sense::InvalidParamListField);
	EXPECT_EQ(pr_spec_i_pt_parse(std::vector<uint8_t>(27, 0), &out),
	          Sense::ParamListLengthError);
	EXPECT_EQ(pr_spec_i_pt_parse(list({}), &out), Sense::None);
	EXPECT_TRUE(out.empty());
}

// A gateway whose watch broke is told 0: it reads the state, installs a change nobody
// announced to it, and queues the unit attentions of that change for its I_T nexuses.
TEST(PrShared, BrokenWatchReadsAgain)
{
	FakeCluster c;
	Gw g1(c, 1), g2(c, 2);
	Nexus *a1 = g1.join(kPortA), *b2 = g2.join(kPortB), *b1 = g1.join(kPortB);
	ASSERT_EQ(g2.out(b2, SA_REGISTER, 0, K2).status, Status::Good);
	ASSERT_EQ(g2.out(b2, SA_RESERVE, K2, 0, EA).status, Status::Good);
	ASSERT_EQ(g1.out(a1, SA_REGISTER, 0, K1).status, Status::Good);
	// g2 leaves the cluster for a while: g1's announcements do not reach it.
	std::unique_ptr<FakeStore> away = std::move(g2.store);
	{
		std::lock_guard g(c.lock);
		std::erase(c.members, away.get());
	}
	const uint64_t before = g2.version();
	ASSERT_EQ(g1.out(a1, SA_PREEMPT, K1, K2, EA).status, Status::Good);
	EXPECT_EQ(g2.version(), before) << "not told";
	EXPECT_EQ(g2.write(b2), Status::Good) << "the cache as it was";
	{
		std::lock_guard g(c.lock);
		c.members.push_back(away.get());
	}
	auto f = away->tell(0);
	ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
	EXPECT_TRUE(f.get());
	g2.store = std::move(away);
	EXPECT_GT(g2.version(), before);
	EXPECT_EQ(g2.ua(b2), UA_REGISTRATIONS_PREEMPTED);
	EXPECT_EQ(g2.write(b2), Status::ReservationConflict);
	EXPECT_EQ(g1.write(b1), Status::ReservationConflict);
}

// More changes behind than the events kept: the unit attentions come from the states.
TEST(PrShared, FarBehindGetsUnitAttentionsFromTheStates)
{
	FakeCluster c;
	Gw g1(c, 1), g2(c, 2);
	Nexus *a1 = g1.join(kPortA), *b2 = g2.join(kPortB), *c2 = g2.join(kPortC);
	ASSERT_EQ(g2.out(b2, SA_REGISTER, 0, K2).status, Status::Good);
	ASSERT_EQ(g2.out(c2, SA_REGISTER, 0, K3).status, Status::Good);
	ASSERT_EQ(g2.out(c2, SA_RESERVE, K3, 0, WE).status, Status::Good);
	std::unique_ptr<FakeStore> away = std::move(g2.store);
	{
		std::lock_guard g(c.lock);
		std::erase(c.members, away.get());
	}
	ASSERT_EQ(g1.out(a1, SA_REGISTER, 0, K1).status, Status::Good);
	ASSERT_EQ(g1.out(a1, SA_PREEMPT, K1, K2, 0x1).status, Status::Good); // b's key
	for (int i = 0; i < 70; i++)
		ASSERT_EQ(g1.out(a1, SA_REGISTER, K1 + i, K1 + i + 1).status, Status::Good);
	{
		std::lock_guard g(c.lock);
		c.members.push_back(away.get());
		EXPECT_FALSE(c.records.count(fmt::format("pr.ev.{:020}", 5)))
		    << "the old events are gone";
	}
	auto f = away->tell(0);
	ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
	EXPECT_TRUE(f.get());
	g2.store = std::move(away);
	EXPECT_EQ(g2.ua(b2), UA_REGISTRATIONS_PREEMPTED) << "its registration is gone";
	EXPECT_EQ(g2.ua(c2), 0) << "c's registration and reservation are as they were";
}

// The store refuses a write, or it never wins, or the announcement fails: the command says
// so, and a state the LU cannot read is refused at attach.
TEST(PrShared, FailuresAreNeverGood)
{
	FakeCluster c;
	Gw g1(c, 1), g2(c, 2);
	Nexus *a1 = g1.join(kPortA);
	// A REGISTER of nothing on a state never written writes nothing either.
	EXPECT_EQ(g1.out(a1, SA_REGISTER, 0, 0).status, Status::Good);
	{
		std::lock_guard g(c.lock);
		EXPECT_EQ(c.version, 0u);
		c.write_error = -ETIMEDOUT;
	}
	EXPECT_TRUE(
	    spc_test::IsSense(g1.out(a1, SA_REGISTER, 0, K1), SenseKey::HardwareError, 0x4400));
	{
		std::lock_guard g(c.lock);
		c.write_error = 0;
		c.always_cancel = true;
	}
	EXPECT_EQ(g1.out(a1, SA_REGISTER, 0, K1).status, Status::Busy);
	{
		std::lock_guard g(c.lock);
		c.always_cancel = false;
		c.announce_error = -ETIMEDOUT;
	}
	EXPECT_TRUE(
	    spc_test::IsSense(g1.out(a1, SA_REGISTER, 0, K1), SenseKey::HardwareError, 0x4400));
	{
		std::lock_guard g(c.lock);
		c.announce_error = 0;
	}
	// Nothing to change: no write, no announcement.
	const int n = g1.store->announced.load();
	Nexus *b1 = g1.join(kPortB);
	EXPECT_EQ(g1.out(b1, SA_REGISTER, 0, 0).status, Status::Good) << "a REGISTER of nothing";
	EXPECT_EQ(g1.out(a1, SA_RELEASE, K1, 0, EA).status, Status::Good) << "nothing reserved";
	EXPECT_EQ(g1.store->announced.load(), n);

	// Another LU's state, or a damaged one, is not attached.
	auto other = std::make_unique<LogicalUnit>("lu0", ram(1 << 20), LuConfig{});
	FakeStore fs(c, *other, 9);
	std::string why;
	EXPECT_EQ(pr_attach_shared(*other, fs, "test:another", &why), -EBADMSG);
	EXPECT_NE(why.find("another logical unit"), std::string::npos) << why;
	{
		std::lock_guard g(c.lock);
		c.records["pr.image"][20] ^= 1;
	}
	EXPECT_EQ(pr_attach_shared(*other, fs, "test:lu", &why), -EBADMSG);
	EXPECT_NE(why.find("checksum"), std::string::npos) << why;
	EXPECT_EQ(pr_attach_shared(*other, fs, "", &why), -EINVAL);
	// A second store for a shared LU is refused, and detaching it leaves the first.
	EXPECT_EQ(pr_attach_shared(*g1.lu, fs, "test:lu", &why), -EBUSY);
	pr_detach_shared(*g1.lu, fs);
	EXPECT_EQ(pr_of(*g1.lu).shared, g1.store.get());
}

// A PERSISTENT RESERVE OUT queued behind an announcement that waits is aborted by another
// gateway's PREEMPT AND ABORT: it ends at once (it would do nothing), and the answer to that
// PREEMPT AND ABORT does not wait for the announcement in front of it.
TEST(PrShared, QueuedCommandOfAPreemptedNexusEndsAtOnce)
{
	FakeCluster c;
	Gw g1(c, 1), g2(c, 2);
	Nexus *a1 = g1.join(kPortA), *b2 = g2.join(kPortB), *c1 = g1.join(kPortC);
	ASSERT_EQ(g1.out(a1, SA_REGISTER, 0, K1).status, Status::Good);
	ASSERT_EQ(g2.out(b2, SA_REGISTER, 0, K2).status, Status::Good);
	ASSERT_EQ(g2.out(b2, SA_RESERVE, K2, 0, EA).status, Status::Good);
	// g1's store thread busy with a job that waits.
	std::promise<void> release;
	auto held = release.get_future().share();
	g1.store->post([held] { held.wait(); });
	auto *q = g1.lb.start_async(a1, 0, cdb_prout(SA_REGISTER, 0), DataDir::Write,
	                            prout_data(K1, K3), TaskAttr::Simple, 0x20);
	std::this_thread::sleep_for(50ms);
	const auto t0 = std::chrono::steady_clock::now();
	EXPECT_EQ(g2.out(b2, SA_PREEMPT_ABORT, K2, K1, EA).status, Status::Good);
	EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms) << "answered without waiting";
	auto r = g1.lb.wait(q, 2s);
	EXPECT_TRUE(r.finished);
	EXPECT_EQ(r.status, Status::TaskAborted);
	release.set_value();
	EXPECT_EQ(g1.ua(a1), UA_REGISTRATIONS_PREEMPTED);
	EXPECT_EQ(g1.write(c1), Status::ReservationConflict);
	// The queued job found its command gone and did nothing.
	EXPECT_EQ(g1.out(c1, SA_REGISTER, 0, K3).status, Status::Good);
	uint32_t gen = 0;
	auto k = g1.lb.run(c1, 0, cdb_prin(SA_READ_KEYS, 4096), DataDir::Read,
	                   std::vector<uint8_t>(4096));
	ASSERT_EQ(k.status, Status::Good);
	gen = get_be32(&k.data[0]);
	EXPECT_EQ(get_be32(&k.data[4]), 16u) << "K2 and K3";
	EXPECT_EQ(gen, 4u);
}

} // namespace ulp::scsi::pr_test
