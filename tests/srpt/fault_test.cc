// SPDX-License-Identifier: MIT
// tests/srpt/fault_test.cc - the SRP target (srpt/target.h) and the SRP initiator
// (srpt/initiator.h) under faults the soft provider injects, in one process, and then
// ulp-targetd and this process's initiator in two.
//
// One process, two soft devices: the target's (127.0.0.1) and the initiator's (127.0.0.2),
// so that a fault rule on one device fires on that side's QPs only. The initiator runs
// verified I/O on one or more channels: every unit of the LUN is written once before the
// fault (with its LBA and a generation in every 8 bytes), then random reads and writes,
// never two on one unit at once, each read checked against what was acknowledged last.
// The faults: the connection cut mid-I/O (from either side), a QP forced into ERR (QP
// fatal, either side), WRs flushed mid-transfer, an rkey check failing on the target's RDMA
// READ (data-out) and RDMA WRITE (data-in), a lost completion of the target's RDMA READ and
// of a response SEND (the target's data timeout ends them), a failed post_send and
// post_recv, a device going fatal; receive rings and an SRQ.
//
// After each fault: every command ends within a bound (no hang), nothing that did not
// happen is answered GOOD, no read returns data that was not written, the target frees
// every channel that died (Target::stats, Portal::conns), and everything once the
// initiator goes; then a new login reads every acknowledged write back (a write that
// failed may or may not have landed: either is accepted for it, nothing else).
//
// Two processes: ulp-targetd serves SRP on its own soft device and this process logs in
// across the socket wire with several channels, in every descriptor format; then the
// target is killed with SIGKILL under I/O (every command ends), and an ulp-initiator
// process is killed under I/O (the target frees its channels and serves a new login).
#include "core/addr.h"
#include "core/dma_mem.h"
#include "core/log.h"
#include "providers/soft/soft.h"
#include "scsi/backstore.h"
#include "scsi/lu.h"
#include "scsi/tpg.h"
#include "srpt/initiator.h"
#include "srpt/portal.h"
#include "srpt/target.h"
#include "tests/iscsi/target_process.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cinttypes>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

namespace ulp::srpt
{
namespace
{

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

constexpr uint64_t kIdExt = 0x0002c90300fa0001;
constexpr uint64_t kIocGuid = 0x0002c90300fa0002;
constexpr uint32_t kBlock = 512;
constexpr uint64_t kLunBytes = 64u << 20;
constexpr char kTargetIp[] = "127.0.0.1";
constexpr char kInitiatorIp[] = "127.0.0.2";

// ---- The target side ---------------------------------------------------------------------

struct TargetSide {
	Device *dev = nullptr;
	Device *dev2 = nullptr; // a second device with a portal of its own (start_second)
	std::unique_ptr<scsi::LogicalUnit> lu;
	std::unique_ptr<scsi::Tpg> tpg;
	std::unique_ptr<Target> target;
	std::unique_ptr<Portal> portal;
	std::unique_ptr<Portal> portal2;
	log::Capture capture;

	bool start(TargetConfig tc)
	{
		soft::DeviceConfig dc;
		dc.ip = kTargetIp;
		dev = soft::create_device(dc);
		if (!dev)
			return false;
		scsi::BackstoreConfig bc;
		bc.kind = "ram";
		bc.size = kLunBytes;
		bc.block_size = kBlock;
		int err = 0;
		std::string why;
		auto bs = scsi::make_backstore(bc, &err, &why);
		if (!bs)
			return false;
		lu = std::make_unique<scsi::LogicalUnit>("srp/0", std::move(bs), scsi::LuConfig{});
		tpg = std::make_unique<scsi::Tpg>("srp-fault", 1);
		if (tpg->add_lun(0, *lu) != 0)
			return false;
		tc.tpg = tpg.get();
		tc.id_ext = kIdExt;
		tc.ioc_guid = kIocGuid;
		tc.heap_bytes = 32u << 20;
		tc.max_io = 2u << 20;
		target = std::make_unique<Target>(tc);
		portal = std::make_unique<Portal>(*target, soft::provider());
		if (portal->listen(*SockAddr::parse(std::string(kTargetIp) + ":0"), &why) != 0) {
			ADD_FAILURE() << why;
			return false;
		}
		return portal->start() == 0;
	}

	// Another portal of the same target on a device of its own (after the first device
	// went fatal: the LUN is the same).
	bool start_second(const char *ip)
	{
		soft::DeviceConfig dc;
		dc.ip = ip;
		dev2 = soft::create_device(dc);
		if (!dev2)
			return false;
		portal2 = std::make_unique<Portal>(*target, soft::provider());
		std::string why;
		if (portal2->listen(*SockAddr::parse(std::string(ip) + ":0"), &why) != 0) {
			ADD_FAILURE() << why;
			return false;
		}
		return portal2->start() == 0;
	}

	SockAddr addr() const
	{
		return *SockAddr::parse(std::string(kTargetIp) + ":" +
		                        std::to_string(portal->port()));
	}

	size_t conns() { return portal->conns() + (portal2 ? portal2->conns() : 0); }

	std::string state()
	{
		const TargetStats s = target->stats();
		return "channels_open " + std::to_string(s.channels_open) + ", nexuses_open " +
		       std::to_string(s.nexuses_open) + ", portal connections " +
		       std::to_string(conns());
	}

	// Bounded: the target has exactly `channels` channels (and connections), and
	// `nexuses` nexuses.
	bool wait_for(uint64_t channels, uint64_t nexuses, std::chrono::milliseconds limit = 10s)
	{
		const auto end = clock::now() + limit;
		for (;;) {
			const TargetStats s = target->stats();
			if (s.channels_open == channels && s.nexuses_open == nexuses &&
			    conns() == channels)
				return true;
			if (clock::now() >= end)
				return false;
			std::this_thread::sleep_for(10ms);
		}
	}
	bool wait_clean(std::chrono::milliseconds limit = 10s) { return wait_for(0, 0, limit); }

	std::string logs() { return capture.text(); }

	void stop()
	{
		if (target) {
			EXPECT_TRUE(target->stop(10s)) << state() << "\n" << logs();
		}
		if (portal)
			portal->stop();
		if (portal2)
			portal2->stop();
		portal.reset();
		portal2.reset();
		target.reset();
		tpg.reset();
		lu.reset();
		for (Device **d : {&dev, &dev2})
			if (*d) {
				soft::destroy_device(*d);
				*d = nullptr;
			}
	}
	~TargetSide() { stop(); }
};

// ---- The initiator side ------------------------------------------------------------------

// Which data buffer descriptors the initiator uses (srpt/initiator.h DescMode).
enum class Desc : uint8_t { Direct, Indirect, External, Immediate };

const char *desc_name(Desc d)
{
	switch (d) {
	case Desc::Direct:
		return "direct";
	case Desc::Indirect:
		return "indirect";
	case Desc::External:
		return "external";
	case Desc::Immediate:
		return "immediate";
	}
	return "?";
}

// The initiator's limits that force each format for the tests' units (64 KiB; 8 KiB for
// immediate data): one MR; four of 16 KiB, all in the IU; sixteen of 4 KiB, eleven in the
// IU and the table fetched by the target; the data in the SEND.
void use_desc(Desc d, InitiatorConfig *c)
{
	switch (d) {
	case Desc::Direct:
		c->desc_mode = DescMode::Direct;
		break;
	case Desc::Indirect:
		c->desc_mode = DescMode::Indirect;
		c->max_desc_bytes = 16384;
		c->cmd_sg_entries = 64;
		break;
	case Desc::External:
		c->desc_mode = DescMode::External;
		c->max_desc_bytes = 4096;
		c->cmd_sg_entries = 12;
		c->allow_ext_sg = true;
		break;
	case Desc::Immediate:
		c->desc_mode = DescMode::Immediate;
		break;
	}
}

uint64_t InitiatorStats::*desc_counter(Desc d)
{
	switch (d) {
	case Desc::Direct:
		return &InitiatorStats::direct;
	case Desc::Indirect:
		return &InitiatorStats::indirect;
	case Desc::External:
		return &InitiatorStats::external;
	case Desc::Immediate:
		return &InitiatorStats::immediate;
	}
	return &InitiatorStats::commands;
}

// A soft device of the initiator's own, a registered arena, the initiator.
struct InitSide {
	Device *dev = nullptr;
	std::string ip;
	std::unique_ptr<DmaRegion> arena;
	std::unique_ptr<Initiator> ini;

	bool start(const char *addr = kInitiatorIp)
	{
		ip = addr;
		soft::DeviceConfig dc;
		dc.ip = ip;
		dev = soft::create_device(dc);
		arena = dma_alloc(8u << 20);
		return dev && arena;
	}

	InitiatorConfig cfg(uint32_t channels, Desc d = Desc::Direct) const
	{
		InitiatorConfig c;
		c.provider = &soft::provider();
		c.src_ip = ip;
		c.id_ext = kIdExt;
		c.ioc_guid = kIocGuid;
		c.initiator_ext = 0x5a;
		c.channels = channels;
		c.queue_size = 32;
		c.cmd_timeout = 10s;
		c.login_timeout = 5s;
		c.regions.push_back(
		    std::span<uint8_t>(static_cast<uint8_t *>(arena->addr()), arena->length()));
		use_desc(d, &c);
		return c;
	}

	std::span<uint8_t> buf(size_t off, size_t len)
	{
		return {static_cast<uint8_t *>(arena->addr()) + off, len};
	}

	// Log in, and take the unit attention a new I_T nexus reports.
	bool login(const SockAddr &dst, const InitiatorConfig &c)
	{
		ini = std::make_unique<Initiator>(c);
		std::string why;
		if (ini->login(dst, &why) != 0) {
			ADD_FAILURE() << "login: " << why;
			return false;
		}
		const uint8_t tur[6] = {};
		for (int k = 0; k < 4; k++)
			if (ini->run(Request{0, tur, DataDir::None, {}}).good())
				return true;
		ADD_FAILURE() << "TEST UNIT READY never came back GOOD: " << ini->error();
		return false;
	}

	void stop()
	{
		ini.reset();
		if (dev)
			soft::destroy_device(dev);
		dev = nullptr;
	}
	~InitSide() { stop(); }
};

// ---- Verified I/O ------------------------------------------------------------------------

std::array<uint8_t, 10> cdb_rw10(bool write, uint32_t lba, uint16_t blocks)
{
	std::array<uint8_t, 10> c{};
	c[0] = write ? 0x2a : 0x28;
	c[2] = uint8_t(lba >> 24);
	c[3] = uint8_t(lba >> 16);
	c[4] = uint8_t(lba >> 8);
	c[5] = uint8_t(lba);
	c[7] = uint8_t(blocks >> 8);
	c[8] = uint8_t(blocks);
	return c;
}

// Its LBA and a generation in every 8 bytes: misplaced, stale or shifted data shows.
void fill(std::span<uint8_t> b, uint64_t lba, uint32_t gen)
{
	for (size_t off = 0; off + 8 <= b.size(); off += 8) {
		const uint64_t v = (lba + off / kBlock) << 24 ^ uint64_t(gen) << 8 ^ (off % kBlock);
		std::memcpy(b.data() + off, &v, 8);
	}
}

struct RunOpts {
	uint32_t total = 2000;          // commands to issue at most
	uint32_t qd = 16;               // in flight at most
	int write_pct = 70;             // writes, in percent of the commands
	bool prefill = false;           // every unit written once, in order (and nothing else)
	std::chrono::seconds bound{20}; // every command must have ended by then
	uint32_t trigger_at = 0;        // once this many commands have ended: trigger()
	std::function<void()> trigger;
	std::function<bool()> until; // true: issue nothing more
	bool stop = false;           // set from trigger: issue nothing more
};

struct RunResult {
	uint32_t issued = 0, ended = 0;
	uint32_t good_writes = 0, good_reads = 0;
	uint32_t lost = 0;     // ConnectionLost
	uint32_t timeouts = 0; // Timeout: the initiator's own cmd_timeout ended it
	uint32_t bad = 0;      // ended otherwise not GOOD (a status, Aborted, Cancelled)
	uint32_t wrong = 0;    // read GOOD with data that was never written there
	uint32_t twice = 0;    // a callback for a command that had ended
	bool hung = false;     // commands still in flight at the bound
	clock::duration took{};
	std::string problems; // the first few, in words

	std::string str() const
	{
		std::ostringstream o;
		o << "issued " << issued << ", ended " << ended << ", good writes " << good_writes
		  << ", good reads " << good_reads << ", lost " << lost << ", timeouts " << timeouts
		  << ", bad " << bad << ", wrong data " << wrong << ", twice " << twice
		  << (hung ? ", HUNG" : "") << ", "
		  << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms"
		  << (problems.empty() ? "" : "\n" + problems);
		return o.str();
	}
};

// Units of unit_len bytes from LBA 0, at most one command on a unit at a time. What each
// unit may hold: the generation written last with a GOOD answer, or one written after it
// whose answer was not GOOD (it may have landed). A unit with such a write is left alone for
// the rest of the run: the write may still be executing on a channel that died.
class Io
{
public:
	Io(uint32_t units, uint32_t unit_len)
	    : unit_len_(unit_len), acked_(units), unsure_(units), busy_(units), poisoned_(units),
	      want_(unit_len)
	{
	}

	uint32_t units() const { return uint32_t(acked_.size()); }
	uint32_t lba(uint32_t u) const { return u * (unit_len_ / kBlock); }

	RunResult run(InitSide &in, RunOpts &o)
	{
		Initiator &ini = *in.ini;
		RunResult r;
		slots_.assign(o.qd, Slot{});
		std::vector<uint32_t> &free_slots = free_;
		free_slots.clear();
		for (uint32_t s = o.qd; s-- > 0;)
			free_slots.push_back(s);
		std::mt19937 rng(12345);
		const auto t0 = clock::now();
		const auto end = t0 + o.bound;
		uint32_t next_unit = 0;
		bool triggered = false;
		for (;;) {
			while (!o.stop && r.issued < o.total && !free_slots.empty() &&
			       !ini.failed()) {
				uint32_t u = 0;
				bool write = true;
				if (o.prefill) {
					if (next_unit == units())
						break;
					u = next_unit;
				} else {
					bool found = false;
					for (int tries = 0; tries < 64 && !found; tries++) {
						u = uint32_t(rng() % units());
						found = !busy_[u] && !poisoned_[u];
					}
					if (!found)
						break;
					write = int(rng() % 100) < o.write_pct;
				}
				const uint32_t s = free_slots.back();
				Slot &sl = slots_[s];
				sl.unit = u;
				sl.write = write;
				sl.gen = write ? ++gen_ : acked_[u];
				sl.buf = in.buf(size_t(s) * unit_len_, unit_len_);
				if (write)
					fill(sl.buf, lba(u), sl.gen);
				else
					std::memset(sl.buf.data(), 0xee, sl.buf.size());
				sl.cdb = cdb_rw10(write, lba(u), uint16_t(unit_len_ / kBlock));
				const int rc = ini.submit(
				    Request{0, sl.cdb, write ? DataDir::Write : DataDir::Read,
				            sl.buf},
				    [this, s, &r](const Result &res) { ended(s, res, r); });
				if (rc == -EBUSY)
					break; // no credit, slot or MR now: a completion frees one
				if (rc == -ENOTCONN) {
					// A channel failed in submit (its post_send); another may
					// live on.
					if (ini.channels() == 0)
						break;
					continue;
				}
				if (rc != 0) {
					r.problems +=
					    "submit: " + std::string(std::strerror(-rc)) + "\n";
					o.stop = true;
					break;
				}
				free_slots.pop_back();
				sl.busy = true;
				busy_[u] = true;
				r.issued++;
				if (o.prefill)
					next_unit++;
			}
			if (r.ended == r.issued && (o.stop || ini.failed() || r.issued >= o.total ||
			                            (o.prefill && next_unit == units())))
				break;
			if (clock::now() >= end) {
				r.hung = r.ended != r.issued;
				if (r.hung) // their callbacks run now, while r is still here
					ini.close(
					    "the test's bound passed with commands in flight");
				break;
			}
			const int n = ini.poll(50ms);
			if (!triggered && o.trigger && r.ended >= o.trigger_at) {
				triggered = true;
				o.trigger();
			}
			if (o.until && o.until())
				o.stop = true;
			if (n < 0 && r.ended != r.issued) {
				r.problems +=
				    "poll: the initiator is idle with commands not called back\n";
				r.hung = true;
				break;
			}
		}
		r.took = clock::now() - t0;
		return r;
	}

	// Read every unit through a new login and check it holds what it may. Mismatches.
	uint32_t verify_all(InitSide &in, std::string *problems)
	{
		uint32_t wrong = 0;
		auto b = in.buf(0, unit_len_);
		for (uint32_t u = 0; u < units(); u++) {
			std::memset(b.data(), 0xee, b.size());
			const auto cdb = cdb_rw10(false, lba(u), uint16_t(unit_len_ / kBlock));
			const Result res = in.ini->run(Request{0, cdb, DataDir::Read, b});
			if (!res.good()) {
				*problems += "unit " + std::to_string(u) + ": read " +
				             outcome_name(res.outcome) + " status " +
				             std::to_string(res.status) + "\n";
				wrong++;
				continue;
			}
			if (!may_hold(u, b)) {
				if (wrong < 5)
					*problems += "unit " + std::to_string(u) +
					             ": acknowledged generation " +
					             std::to_string(acked_[u]) +
					             " (or a later unsure one) " +
					             "not on the LUN; " + describe(u, b) + "\n";
				wrong++;
			}
		}
		return wrong;
	}

private:
	struct Slot {
		bool busy = false;
		bool write = false;
		uint32_t unit = 0;
		uint32_t gen = 0; // written, or (a read) the one expected
		std::span<uint8_t> buf;
		std::array<uint8_t, 10> cdb{};
	};

	void ended(uint32_t s, const Result &res, RunResult &r)
	{
		Slot &sl = slots_[s];
		if (!sl.busy) {
			r.twice++;
			return;
		}
		sl.busy = false;
		busy_[sl.unit] = false;
		free_.push_back(s);
		r.ended++;
		if (res.good()) {
			if (sl.write) {
				acked_[sl.unit] = sl.gen;
				r.good_writes++;
			} else if (!may_hold(sl.unit, sl.buf)) {
				if (r.wrong++ < 5)
					r.problems += "read of unit " + std::to_string(sl.unit) +
					              " answered GOOD with " +
					              describe(sl.unit, sl.buf) +
					              ", expected generation " +
					              std::to_string(sl.gen) + "\n";
			} else {
				r.good_reads++;
			}
			return;
		}
		if (sl.write) {
			unsure_[sl.unit].push_back(sl.gen);
			poisoned_[sl.unit] = true;
		}
		switch (res.outcome) {
		case Outcome::ConnectionLost:
			r.lost++;
			break;
		case Outcome::Timeout:
			r.timeouts++;
			break;
		default:
			if (r.bad++ < 5)
				r.problems += std::string(sl.write ? "write" : "read") +
				              " of unit " + std::to_string(sl.unit) + ": " +
				              outcome_name(res.outcome) + " status " +
				              std::to_string(res.status) + "\n";
			break;
		}
	}

	bool may_hold(uint32_t u, std::span<const uint8_t> data)
	{
		auto same = [&](uint32_t g) {
			fill(want_, lba(u), g);
			return std::memcmp(want_.data(), data.data(), data.size()) == 0;
		};
		if (acked_[u] && same(acked_[u]))
			return true;
		for (uint32_t g : unsure_[u])
			if (g > acked_[u] && same(g))
				return true;
		return false;
	}

	// What a unit's data looks like: the generation of its first 8 bytes.
	std::string describe(uint32_t u, std::span<const uint8_t> data) const
	{
		uint64_t v = 0;
		std::memcpy(&v, data.data(), 8);
		const uint64_t g = (v ^ uint64_t(lba(u)) << 24) >> 8;
		char b[96];
		std::snprintf(b, sizeof(b), "first word %#" PRIx64 " (generation %" PRIu64 "?)", v,
		              g);
		return b;
	}

	uint32_t unit_len_;
	uint32_t gen_ = 0;
	std::vector<uint32_t> acked_;               // generation acknowledged last (0: none)
	std::vector<std::vector<uint32_t>> unsure_; // generations whose writes did not end GOOD
	std::vector<bool> busy_;                    // a command on it in flight
	std::vector<bool> poisoned_;                // a write to it did not end GOOD
	std::vector<Slot> slots_;
	std::vector<uint32_t> free_; // slots not in use
	std::vector<uint8_t> want_;
};

// ---- The fixture: target, verified I/O, initiator --------------------------------------------

class SrpFaults : public ::testing::Test
{
protected:
	// Members in this order: the initiator goes first (its callbacks point into io), the
	// target last.
	TargetSide ts;
	std::unique_ptr<Io> io;
	std::unique_ptr<InitSide> in;

	void TearDown() override
	{
		in.reset();
		io.reset();
		ts.stop();
	}

	static uint32_t unit_len(Desc d) { return d == Desc::Immediate ? 8192 : 65536; }

	// The target, a login with n channels, and every unit written once (all GOOD).
	void start(TargetConfig tc, uint32_t n, Desc d, uint32_t units = 128)
	{
		ASSERT_TRUE(ts.start(tc));
		io = std::make_unique<Io>(units, unit_len(d));
		in = std::make_unique<InitSide>();
		ASSERT_TRUE(in->start());
		ASSERT_TRUE(in->login(ts.addr(), in->cfg(n, d)));
		ASSERT_EQ(in->ini->channels(), n) << in->ini->error();
		RunOpts o;
		o.prefill = true;
		o.qd = 16;
		const RunResult r = io->run(*in, o);
		ASSERT_EQ(r.good_writes, units) << r.str() << "\n" << ts.logs();
		ASSERT_GT(in->ini->stats().*desc_counter(d), 0u) << desc_name(d) << " never used";
	}

	// Every command ended, and as it should; the target frees what died on its own, and
	// the rest once the initiator logs out; a new login reads every acknowledged write back.
	void settle(const RunResult &r)
	{
		EXPECT_FALSE(r.hung) << "commands in flight after the bound: " << r.str() << "\n"
		                     << ts.logs();
		EXPECT_EQ(r.ended, r.issued) << r.str();
		EXPECT_EQ(r.twice, 0u) << r.str();
		EXPECT_EQ(r.wrong, 0u)
		    << "reads answered GOOD with data never written there: " << r.str();
		EXPECT_EQ(r.bad, 0u) << r.str() << "\n" << ts.logs();
		EXPECT_EQ(r.timeouts, 0u)
		    << "the initiator's own timeout ended commands: the target left them hanging\n"
		    << r.str() << "\n"
		    << ts.logs();
		const uint32_t live = in->ini->channels();
		if (live == 0) {
			EXPECT_TRUE(in->ini->failed());
			EXPECT_TRUE(ts.wait_clean())
			    << "the target kept what died: " << ts.state() << "\n"
			    << ts.logs();
		} else {
			// The channels that died are freed; the nexus goes on with the rest.
			EXPECT_TRUE(ts.wait_for(live, 1))
			    << live << " channels live at the initiator; " << ts.state() << "\n"
			    << ts.logs();
			const auto t0 = clock::now();
			in->ini->logout();
			EXPECT_LT(clock::now() - t0, 6s);
			EXPECT_TRUE(ts.wait_clean()) << ts.state() << "\n" << ts.logs();
		}
		in.reset(); // and its device
		verify();
	}

	// A new login (on a new initiator device) reads every unit back.
	void verify(const SockAddr *dst = nullptr)
	{
		const uint64_t takeovers = ts.target->stats().takeovers;
		InitSide v;
		ASSERT_TRUE(v.start());
		ASSERT_TRUE(v.login(dst ? *dst : ts.addr(), v.cfg(2)));
		std::string problems;
		EXPECT_EQ(io->verify_all(v, &problems), 0u) << problems;
		v.ini->logout();
		EXPECT_EQ(ts.target->stats().takeovers, takeovers)
		    << "the new login found the old nexus still there";
		EXPECT_TRUE(ts.wait_clean()) << ts.state() << "\n" << ts.logs();
	}
};

// ---- Faults on the wire and the QP, parameterised ---------------------------------------------

enum class Side : uint8_t { Target, Initiator };

struct FaultCase {
	const char *name;
	Side side; // whose device the rule is on
	soft::FaultPoint point;
	uint64_t nth; // fires at the nth matching event after the prefill
	uint32_t channels;
	bool srq;
	Desc desc;
	int write_pct = 70;
	bool match_opcode = false;
	WrOpcode opcode = WrOpcode::Send;
};

class SrpWireFault : public SrpFaults, public ::testing::WithParamInterface<FaultCase>
{
};

TEST_P(SrpWireFault, EveryCommandEndsAndAcknowledgedWritesStay)
{
	const FaultCase &fc = GetParam();
	TargetConfig tc;
	tc.use_srq = fc.srq;
	ASSERT_NO_FATAL_FAILURE(start(tc, fc.channels, fc.desc));
	Device &dev = fc.side == Side::Target ? *ts.dev : *in->dev;
	const TargetStats before = ts.target->stats();
	const soft::Counters cbefore = soft::device_counters(dev);
	soft::FaultRule rule;
	rule.point = fc.point;
	rule.nth = fc.nth;
	rule.match_opcode = fc.match_opcode;
	rule.opcode = fc.opcode;
	ASSERT_GE(soft::inject_fault(dev, rule), 0);
	RunOpts o;
	o.total = fc.channels > 1 ? 3000 : 5000;
	o.write_pct = fc.write_pct;
	const RunResult r = io->run(*in, o);
	soft::clear_faults(dev);
	SCOPED_TRACE(r.str());
	EXPECT_EQ(soft::faults_fired(dev), 1u) << "the fault never fired";
	EXPECT_LT(in->ini->channels(), fc.channels) << "no channel was lost";
	// A WR of the target's (or an RDMA of its that the initiator answers) belongs to a
	// command in flight; one of the initiator's may be a LOCAL_INV of a command that has
	// its answer already.
	if (fc.side == Side::Target || fc.point == soft::FaultPoint::RkeyCheck) {
		EXPECT_GT(r.lost, 0u) << "no command was in flight when the fault hit";
	}
	if (fc.channels > 1) {
		EXPECT_GT(in->ini->channels(), 0u) << "one fault took every channel";
	}
	if (fc.point == soft::FaultPoint::QpError) {
		EXPECT_GT(soft::device_counters(dev).flushes, cbefore.flushes)
		    << "the QP in ERR flushed nothing";
	}
	EXPECT_EQ(ts.target->stats().credit_overruns, before.credit_overruns);
	settle(r);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SrpWireFault,
    ::testing::Values(
        // The connection cut (peer death) before a WR of either side; one channel (the
        // initiator fails) and three (two carry on).
        FaultCase{"cut_by_target_1ch", Side::Target, soft::FaultPoint::CutConnection, 300, 1, false,
                  Desc::Direct},
        FaultCase{"cut_by_initiator_1ch", Side::Initiator, soft::FaultPoint::CutConnection, 300, 1,
                  false, Desc::Indirect},
        FaultCase{"cut_by_target_3ch", Side::Target, soft::FaultPoint::CutConnection, 400, 3, false,
                  Desc::External},
        FaultCase{"cut_by_initiator_3ch", Side::Initiator, soft::FaultPoint::CutConnection, 400, 3,
                  false, Desc::Immediate},
        FaultCase{"cut_by_target_srq", Side::Target, soft::FaultPoint::CutConnection, 300, 3, true,
                  Desc::Direct},
        FaultCase{"cut_by_initiator_srq", Side::Initiator, soft::FaultPoint::CutConnection, 300, 1,
                  true, Desc::Indirect},
        // QP fatal: the QP enters ERR (QP_FATAL) before executing a WR; the WRs behind it
        // are flushed.
        FaultCase{"qp_fatal_target_1ch", Side::Target, soft::FaultPoint::QpError, 300, 1, false,
                  Desc::Indirect},
        FaultCase{"qp_fatal_initiator_1ch", Side::Initiator, soft::FaultPoint::QpError, 300, 1,
                  false, Desc::Direct},
        FaultCase{"qp_fatal_target_3ch", Side::Target, soft::FaultPoint::QpError, 500, 3, false,
                  Desc::Direct},
        FaultCase{"qp_fatal_initiator_3ch", Side::Initiator, soft::FaultPoint::QpError, 500, 3,
                  false, Desc::External},
        FaultCase{"qp_fatal_target_srq", Side::Target, soft::FaultPoint::QpError, 300, 3, true,
                  Desc::External},
        FaultCase{"qp_fatal_initiator_srq", Side::Initiator, soft::FaultPoint::QpError, 300, 1,
                  true, Desc::Direct},
        // WRs flushed mid-transfer: the QP fails at an RDMA WRITE of read data (the WRITEs
        // and the SRP_RSP chained behind it flush), at an RDMA READ of write data.
        FaultCase{"flushed_at_rdma_write", Side::Target, soft::FaultPoint::QpError, 40, 2, false,
                  Desc::Indirect, 20, true, WrOpcode::RdmaWrite},
        FaultCase{"flushed_at_rdma_read", Side::Target, soft::FaultPoint::QpError, 40, 2, false,
                  Desc::External, 90, true, WrOpcode::RdmaRead},
        // The rkey check at the initiator (the responder) fails the target's RDMA READ of
        // write data, and its RDMA WRITE of read data: only writes, then only reads.
        FaultCase{"rkey_fails_rdma_read", Side::Initiator, soft::FaultPoint::RkeyCheck, 100, 1,
                  false, Desc::Direct, 100},
        FaultCase{"rkey_fails_rdma_read_table", Side::Initiator, soft::FaultPoint::RkeyCheck, 100,
                  2, false, Desc::External, 100},
        FaultCase{"rkey_fails_rdma_write", Side::Initiator, soft::FaultPoint::RkeyCheck, 100, 1,
                  false, Desc::Indirect, 0},
        FaultCase{"rkey_fails_rdma_write_srq", Side::Initiator, soft::FaultPoint::RkeyCheck, 100, 2,
                  true, Desc::Direct, 0},
        // The target's post_send fails (a response, an RDMA chain), its post_recv fails
        // (the ring's and the SRQ's repost).
        FaultCase{"post_send_fails_at_target", Side::Target, soft::FaultPoint::PostSend, 300, 2,
                  false, Desc::Direct},
        FaultCase{"post_recv_fails_at_target", Side::Target, soft::FaultPoint::PostRecv, 300, 2,
                  false, Desc::Indirect},
        FaultCase{"post_recv_fails_at_target_srq", Side::Target, soft::FaultPoint::PostRecv, 300, 2,
                  true, Desc::Direct},
        // The initiator's own post_send fails (submit's REG_MR + SEND chain).
        FaultCase{"post_send_fails_at_initiator", Side::Initiator, soft::FaultPoint::PostSend, 300,
                  2, false, Desc::Indirect}),
    [](const auto &info) { return std::string(info.param.name); });

// ---- Lost completions: the target's data timeout ------------------------------------------------

// The completion of the target's RDMA READ of write data never comes (the READ executed).
// Within data_timeout the target logs which command and transfer, closes the channel (which
// flushes the rest) and frees it; the initiator learns of it as a lost connection, not from
// its own command timeout.
TEST_F(SrpFaults, RdmaReadCompletionLostEndsByDataTimeout)
{
	TargetConfig tc;
	tc.data_timeout = 1s; // a loaded machine must not hit it by itself
	ASSERT_NO_FATAL_FAILURE(start(tc, 1, Desc::Direct, 32));
	soft::FaultRule rule;
	rule.point = soft::FaultPoint::DropCompletion;
	rule.match_opcode = true;
	rule.opcode = WrOpcode::RdmaRead;
	ASSERT_GE(soft::inject_fault(*ts.dev, rule), 0);
	RunOpts o;
	o.total = 200;
	o.write_pct = 100;
	const RunResult r = io->run(*in, o);
	soft::clear_faults(*ts.dev);
	SCOPED_TRACE(r.str());
	EXPECT_EQ(soft::faults_fired(*ts.dev), 1u);
	EXPECT_LT(r.took, 5s) << "the initiator's own timeout (10 s) ended it, not the target";
	EXPECT_TRUE(in->ini->failed());
	EXPECT_GT(r.lost, 0u);
	EXPECT_EQ(ts.target->stats().data_timeouts, 1u);
	EXPECT_TRUE(ts.capture.contains("the RDMA READ of its write data not complete after"))
	    << ts.logs();
	settle(r);
	EXPECT_TRUE(
	    ts.capture.contains("the completion of the RDMA READ of its write data never came"))
	    << ts.logs();
}

// The same for the RDMA READ of an external descriptor table (reads only, each with sixteen
// descriptors, the table outside the SRP_CMD): the command was never given to the core, and
// is ended without it.
TEST_F(SrpFaults, TableReadCompletionLostEndsByDataTimeout)
{
	TargetConfig tc;
	tc.data_timeout = 1s; // a loaded machine must not hit it by itself
	ASSERT_NO_FATAL_FAILURE(start(tc, 1, Desc::External, 32));
	soft::FaultRule rule;
	rule.point = soft::FaultPoint::DropCompletion;
	rule.nth = 5;
	rule.match_opcode = true;
	rule.opcode = WrOpcode::RdmaRead;
	ASSERT_GE(soft::inject_fault(*ts.dev, rule), 0);
	RunOpts o;
	o.total = 200;
	o.write_pct = 0;
	const RunResult r = io->run(*in, o);
	soft::clear_faults(*ts.dev);
	SCOPED_TRACE(r.str());
	EXPECT_EQ(soft::faults_fired(*ts.dev), 1u);
	EXPECT_LT(r.took, 5s);
	EXPECT_TRUE(in->ini->failed());
	EXPECT_GT(r.lost, 0u);
	EXPECT_EQ(ts.target->stats().data_timeouts, 1u);
	EXPECT_TRUE(ts.capture.contains("the RDMA READ of its descriptor table not complete after"))
	    << ts.logs();
	settle(r);
	EXPECT_TRUE(ts.capture.contains(
	    "the completion of the RDMA READ of its descriptor table never came"))
	    << ts.logs();
}

// The completion of a response SEND never comes (the SRP_RSP did arrive): the command's
// ioctx and a send queue slot wait for it. Within data_timeout the target closes that
// channel under I/O (the other carries on), and once it is drained ends the command without
// the completion, so that the channel and the nexus's teardown are not held for ever.
TEST_F(SrpFaults, ResponseSendCompletionLost)
{
	TargetConfig tc;
	tc.data_timeout = 1s; // a loaded machine must not hit it by itself
	ASSERT_NO_FATAL_FAILURE(start(tc, 2, Desc::Indirect, 32));
	soft::FaultRule rule;
	rule.point = soft::FaultPoint::DropCompletion;
	rule.nth = 50;
	rule.match_opcode = true;
	rule.opcode = WrOpcode::Send;
	ASSERT_GE(soft::inject_fault(*ts.dev, rule), 0);
	RunOpts o;
	o.total = 1000000;
	o.write_pct = 50;
	o.until = [&] { return ts.target->stats().data_timeouts > 0; };
	const RunResult r = io->run(*in, o);
	soft::clear_faults(*ts.dev);
	SCOPED_TRACE(r.str());
	EXPECT_EQ(soft::faults_fired(*ts.dev), 1u);
	EXPECT_LT(r.took, 5s);
	EXPECT_EQ(ts.target->stats().data_timeouts, 1u) << ts.logs();
	// The SEND alone, or the last of a chain of RDMA WRITEs of read data.
	EXPECT_TRUE(ts.capture.contains("its SRP_RSP not complete after") ||
	            ts.capture.contains("the RDMA WRITE of its read data not complete after"))
	    << ts.logs();
	// The initiator sees the close at a poll.
	const auto end = clock::now() + 5s;
	while (in->ini->channels() != 1 && clock::now() < end)
		in->ini->poll(20ms);
	EXPECT_EQ(in->ini->channels(), 1u) << "the other channel should carry on";
	settle(r);
	EXPECT_TRUE(
	    ts.capture.contains("the completion of its SRP_RSP never came") ||
	    ts.capture.contains("the completion of the RDMA WRITE of its read data never came"))
	    << ts.logs();
}

// A completion of the target's RDMA READ comes late (5 ms; later ones may overtake it, as no
// hardware CQ would let them): nothing may fail, every read must match.
TEST_F(SrpFaults, DelayedCompletionsChangeNothing)
{
	ASSERT_NO_FATAL_FAILURE(start(TargetConfig{}, 2, Desc::External, 64));
	soft::FaultRule rule;
	rule.point = soft::FaultPoint::DelayCompletion;
	rule.nth = 0;
	rule.probability = 0.05;
	rule.count = 0;
	rule.delay_us = 5000;
	rule.match_opcode = true;
	rule.opcode = WrOpcode::RdmaRead;
	ASSERT_GE(soft::inject_fault(*ts.dev, rule), 0);
	RunOpts o;
	o.total = 1500;
	const RunResult r = io->run(*in, o);
	soft::clear_faults(*ts.dev);
	SCOPED_TRACE(r.str());
	EXPECT_GT(soft::faults_fired(*ts.dev), 0u);
	EXPECT_EQ(r.good_writes + r.good_reads, r.issued);
	EXPECT_EQ(in->ini->channels(), 2u);
	settle(r);
}

// ---- Device-level faults -------------------------------------------------------------------

// The initiator's device goes fatal under I/O (every QP to ERR, DEVICE_FATAL): the target
// frees every channel; a new initiator on a new device reads the acknowledged writes back.
TEST_F(SrpFaults, InitiatorDeviceFatal)
{
	ASSERT_NO_FATAL_FAILURE(start(TargetConfig{}, 3, Desc::Direct));
	RunOpts o;
	o.total = 4000;
	o.trigger_at = 300;
	o.trigger = [&] { soft::force_device_fatal(*in->dev); };
	const RunResult r = io->run(*in, o);
	SCOPED_TRACE(r.str());
	EXPECT_EQ(in->ini->channels(), 0u);
	EXPECT_GT(r.lost, 0u);
	settle(r);
}

// The target's device goes fatal under I/O: every channel on it closes and is freed (the
// initiator's commands all end), and the target serves the same LUN on a second device.
TEST_F(SrpFaults, TargetDeviceFatal)
{
	TargetConfig tc;
	tc.use_srq = true;
	ASSERT_NO_FATAL_FAILURE(start(tc, 2, Desc::Indirect));
	RunOpts o;
	o.total = 4000;
	o.trigger_at = 300;
	o.trigger = [&] { soft::force_device_fatal(*ts.dev); };
	const RunResult r = io->run(*in, o);
	SCOPED_TRACE(r.str());
	EXPECT_FALSE(r.hung) << ts.logs();
	EXPECT_EQ(r.ended, r.issued);
	EXPECT_EQ(r.wrong, 0u);
	EXPECT_EQ(r.bad, 0u);
	EXPECT_EQ(r.timeouts, 0u) << ts.logs();
	EXPECT_EQ(in->ini->channels(), 0u);
	EXPECT_TRUE(ts.wait_clean()) << ts.state() << "\n" << ts.logs();
	in.reset();
	ASSERT_TRUE(ts.start_second("127.0.0.3"));
	const SockAddr a2 = *SockAddr::parse("127.0.0.3:" + std::to_string(ts.portal2->port()));
	verify(&a2);
}

// The target's device goes fatal while nothing is in flight. On receive rings the QPs'
// receives are flushed, which tells; on an SRQ a QP has no receives of its own, and only its
// async event (LAST_WQE_REACHED) does. Either way the target closes and frees every channel
// by itself within a bound, not when the initiator next sends; the initiator's next commands
// then end as lost, and the LUN is served on a second device.
class SrpIdleFatal : public SrpFaults, public ::testing::WithParamInterface<bool>
{
};

TEST_P(SrpIdleFatal, TargetNoticesItsDeadQpsWhileIdle)
{
	TargetConfig tc;
	tc.use_srq = GetParam();
	ASSERT_NO_FATAL_FAILURE(start(tc, 2, Desc::Direct, 16));
	soft::force_device_fatal(*ts.dev);
	EXPECT_TRUE(ts.wait_clean(3s))
	    << "the target kept channels whose QPs are dead: " << ts.state() << "\n"
	    << ts.logs();
	RunOpts o;
	o.total = 8;
	const RunResult r = io->run(*in, o);
	SCOPED_TRACE(r.str());
	EXPECT_EQ(r.good_writes + r.good_reads, 0u);
	EXPECT_EQ(r.ended, r.issued);
	EXPECT_EQ(r.timeouts, 0u);
	EXPECT_TRUE(in->ini->failed());
	EXPECT_TRUE(ts.wait_clean()) << ts.state() << "\n" << ts.logs();
	in.reset();
	ASSERT_TRUE(ts.start_second("127.0.0.3"));
	const SockAddr a2 = *SockAddr::parse("127.0.0.3:" + std::to_string(ts.portal2->port()));
	verify(&a2);
}

INSTANTIATE_TEST_SUITE_P(Receives, SrpIdleFatal, ::testing::Values(false, true),
                         [](const auto &info) { return info.param ? "srq" : "rings"; });

// ---- An initiator that never stops sending -------------------------------------------------

// The initiator keeps every slot busy against a target that grants 8 credits, while a
// connection cut ends it: it was held by req_lim all along (the target never saw a request
// without a credit), and the cut ends every command.
TEST_F(SrpFaults, CreditsHoldTheInitiatorUntilTheCut)
{
	TargetConfig tc;
	tc.rq_size = 8;
	ASSERT_NO_FATAL_FAILURE(start(tc, 2, Desc::Direct));
	soft::FaultRule rule;
	rule.point = soft::FaultPoint::CutConnection;
	rule.nth = 2000;
	ASSERT_GE(soft::inject_fault(*ts.dev, rule), 0);
	RunOpts o;
	o.total = 20000;
	o.qd = 32;
	const RunResult r = io->run(*in, o);
	soft::clear_faults(*ts.dev);
	SCOPED_TRACE(r.str());
	EXPECT_EQ(soft::faults_fired(*ts.dev), 1u);
	EXPECT_GT(in->ini->stats().zero_req_lim, 0u) << "req_lim never held the initiator";
	EXPECT_EQ(ts.target->stats().credit_overruns, 0u);
	settle(r);
}

// ---- Two processes ------------------------------------------------------------------------

std::string hex(uint64_t v)
{
	char b[24];
	std::snprintf(b, sizeof(b), "%" PRIx64, v);
	return b;
}

// ulp-targetd with an SRP portal on its own soft device (127.0.0.1), a 64 MiB RAM LUN.
bool start_targetd(test::TargetdProcess *td)
{
	std::vector<std::string> args = {"--srp-portal", "127.0.0.1:0",    "--srp-id-ext",
	                                 hex(kIdExt),    "--srp-ioc-guid", hex(kIocGuid),
	                                 "--lun",        "0:ram:size=64M"};
	std::string why;
	if (!td->start(args, &why)) {
		ADD_FAILURE() << why;
		return false;
	}
	if (td->srp_port() == 0) {
		ADD_FAILURE() << "no SRP port on --ready-fd\n" << td->log();
		return false;
	}
	return true;
}

// SIGHUP makes ulp-targetd log its SRP counters; the value of `key` in the next such line,
// or -1 when none came within a second.
long long targetd_stat(test::TargetdProcess &td, const std::string &key)
{
	auto count = [&] {
		const std::string l = td.log();
		size_t n = 0;
		for (size_t p = l.find("SRP stats:"); p != std::string::npos;
		     p = l.find("SRP stats:", p + 1))
			n++;
		return n;
	};
	const size_t before = count();
	::kill(td.pid(), SIGHUP);
	const auto end = clock::now() + 1s;
	while (count() == before && clock::now() < end)
		std::this_thread::sleep_for(10ms);
	const std::string l = td.log();
	const size_t at = l.rfind("SRP stats:");
	if (count() == before || at == std::string::npos)
		return -1;
	const std::string line = l.substr(at, l.find('\n', at) - at);
	const size_t k = line.find(" " + key + " ");
	if (k == std::string::npos)
		return -1;
	return std::atoll(line.c_str() + k + key.size() + 2);
}

// Bounded: ulp-targetd reports channels_open == n.
bool targetd_channels(test::TargetdProcess &td, long long n, std::chrono::milliseconds limit)
{
	const auto end = clock::now() + limit;
	do {
		if (targetd_stat(td, "channels_open") == n &&
		    (n > 0 || targetd_stat(td, "nexuses_open") == 0))
			return true;
		std::this_thread::sleep_for(50ms);
	} while (clock::now() < end);
	return false;
}

SockAddr targetd_addr(const test::TargetdProcess &td)
{
	return *SockAddr::parse("127.0.0.1:" + std::to_string(td.srp_port()));
}

// Four commands at once on consecutive ranges from lba, one per buffer: each goes to the
// channel with the most credits left, so on three channels every channel carries one.
// Waited for (bounded). False, with *why, unless all four came back GOOD.
bool four_at_once(Initiator &ini, bool write, uint32_t lba, std::span<std::span<uint8_t>> bufs,
                  std::string *why)
{
	std::array<std::array<uint8_t, 10>, 4> cdbs;
	std::array<Result, 4> res;
	uint32_t sent = 0, done = 0;
	const auto end = clock::now() + 10s;
	for (uint32_t k = 0; k < 4; k++) {
		const uint32_t blocks = uint32_t(bufs[k].size() / kBlock);
		cdbs[k] = cdb_rw10(write, lba + k * blocks, uint16_t(blocks));
		const Request req{0, cdbs[k], write ? DataDir::Write : DataDir::Read, bufs[k]};
		int rc;
		// -EBUSY: no MR free on the channel now (a fourth megabyte on one).
		while ((rc = ini.submit(req,
		                        [&, k](const Result &x) {
			                        res[k] = x;
			                        done++;
		                        })) == -EBUSY &&
		       clock::now() < end)
			ini.poll(10ms);
		if (rc != 0) {
			*why = "submit " + std::to_string(k) + ": " + std::strerror(-rc);
			break;
		}
		sent++;
		for (uint32_t ch = 0; k == 2 && ch < 3; ch++)
			if (ini.channel_info(ch).in_flight == 0)
				*why = "channel " + std::to_string(ch) + " carried nothing";
	}
	while (done < sent && clock::now() < end)
		ini.poll(100ms);
	if (done < sent) {
		*why = "commands still in flight after 10 s";
		ini.close(*why); // their callbacks run now, while res is still here
	}
	for (uint32_t k = 0; k < sent; k++)
		if (!res[k].good())
			*why = std::string(write ? "write " : "read ") + std::to_string(k) + ": " +
			       outcome_name(res[k].outcome) + " status " +
			       std::to_string(res[k].status);
	return why->empty() && sent == 4;
}

// Every descriptor format, several channels, across processes (the socket wire): written
// and read back byte for byte, registered and bounced, at sizes around each format's edges;
// the target's own counters show the immediate data and the fetched tables.
TEST(SrpProcess, EveryDescriptorFormatAcrossProcesses)
{
	test::TargetdProcess td;
	ASSERT_TRUE(start_targetd(&td));
	InitSide in;
	ASSERT_TRUE(in.start());
	uint32_t lba = 0, gen = 1;
	for (Desc d : {Desc::Direct, Desc::Indirect, Desc::External, Desc::Immediate}) {
		SCOPED_TRACE(desc_name(d));
		ASSERT_TRUE(in.login(targetd_addr(td), in.cfg(3, d)));
		ASSERT_EQ(in.ini->channels(), 3u) << in.ini->error();
		const std::vector<size_t> sizes =
		    d == Desc::Immediate ? std::vector<size_t>{512, 4096, 8192}
		                         : std::vector<size_t>{512, 8192 + 512, 65536, 1u << 20};
		const InitiatorStats s0 = in.ini->stats();
		uint64_t expect = 0;
		for (bool bounced : {false, true}) {
			for (size_t len : sizes) {
				SCOPED_TRACE(std::to_string(len) +
				             (bounced ? " bounced" : " registered"));
				// Four writes at once, then four reads: spread over the channels.
				std::vector<std::vector<uint8_t>> heap(8,
				                                       std::vector<uint8_t>(len));
				std::array<std::span<uint8_t>, 8> b;
				for (size_t k = 0; k < 8; k++)
					b[k] = bounced ? std::span<uint8_t>(heap[k])
					               : in.buf(k * len, len);
				for (size_t k = 0; k < 4; k++) {
					fill(b[k], lba + k * (len / kBlock), gen);
					std::memset(b[4 + k].data(), 0xee, len);
				}
				std::string why;
				ASSERT_TRUE(four_at_once(*in.ini, true, lba, {b.data(), 4}, &why))
				    << why << "\n"
				    << td.log();
				ASSERT_TRUE(
				    four_at_once(*in.ini, false, lba, {b.data() + 4, 4}, &why))
				    << why << "\n"
				    << td.log();
				for (size_t k = 0; k < 4; k++)
					ASSERT_EQ(std::memcmp(b[k].data(), b[4 + k].data(), len), 0)
					    << "read back differs, command " << k;
				expect += d == Desc::Immediate ? 4 : 8;
				lba += 4 * uint32_t(len / kBlock);
				gen++;
			}
		}
		EXPECT_EQ(in.ini->stats().*desc_counter(d) - s0.*desc_counter(d), expect);
		if (d == Desc::External) {
			EXPECT_GE(targetd_stat(td, "ext_tables"), (long long)expect);
		}
		if (d == Desc::Immediate) {
			EXPECT_GE(targetd_stat(td, "immediate"), (long long)expect);
		}
		in.ini->logout();
		EXPECT_FALSE(in.ini->failed()) << in.ini->error();
		in.ini.reset();
		EXPECT_TRUE(targetd_channels(td, 0, 5s)) << td.log();
	}
	EXPECT_EQ(targetd_stat(td, "credit_overruns"), 0);
	EXPECT_EQ(targetd_stat(td, "bad_ius"), 0);
	in.stop();
	EXPECT_EQ(td.stop(), 0) << td.log();
}

// ulp-targetd killed with SIGKILL under I/O on three channels: every command ends, within a
// bound, nothing answered GOOD that was not done.
TEST(SrpProcess, TargetKilledMidIo)
{
	test::TargetdProcess td;
	ASSERT_TRUE(start_targetd(&td));
	Io io(128, 65536);
	InitSide in;
	ASSERT_TRUE(in.start());
	ASSERT_TRUE(in.login(targetd_addr(td), in.cfg(3, Desc::Indirect)));
	RunOpts pre;
	pre.prefill = true;
	RunResult r = io.run(in, pre);
	ASSERT_EQ(r.good_writes, io.units()) << r.str();
	RunOpts o;
	o.total = 1000000;
	o.trigger_at = 500;
	o.trigger = [&] { td.kill(); };
	r = io.run(in, o);
	SCOPED_TRACE(r.str());
	EXPECT_FALSE(r.hung);
	EXPECT_LT(r.took, 15s);
	EXPECT_EQ(r.ended, r.issued);
	EXPECT_GE(r.good_writes + r.good_reads, 500u);
	EXPECT_EQ(r.wrong, 0u);
	EXPECT_EQ(r.bad, 0u);
	EXPECT_EQ(r.timeouts, 0u) << "the initiator waited for its own timeout";
	EXPECT_TRUE(in.ini->failed());
	EXPECT_EQ(in.ini->channels(), 0u);
	EXPECT_EQ(in.ini->in_flight(), 0u);
}

// An ulp-initiator process with four channels killed under I/O: ulp-targetd frees every
// channel and the nexus, and serves a new login whose data is verified.
TEST(SrpProcess, InitiatorKilledTargetCarriesOn)
{
	test::TargetdProcess td;
	ASSERT_TRUE(start_targetd(&td));
	// Everything the child needs is made before the fork: it only execs.
	const std::string portal = "127.0.0.1:" + std::to_string(td.srp_port());
	const std::string id_ext = hex(kIdExt), ioc_guid = hex(kIocGuid);
	const pid_t pid = ::fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		::execl(ULP_INITIATOR_PATH, ULP_INITIATOR_PATH, "--transport", "srp", "--portal",
		        portal.c_str(), "--srp-id-ext", id_ext.c_str(), "--srp-ioc-guid",
		        ioc_guid.c_str(), "--srp-channels", "4", "--workload", "randwrite", "--qd",
		        "32", "--runtime", "30", "--quiet", static_cast<char *>(nullptr));
		::_exit(127);
	}
	// Logged in with every channel, and busy: killed with commands in flight.
	const bool up = targetd_channels(td, 4, 10s);
	long long cmds = 0;
	for (const auto end = clock::now() + 10s; up && cmds < 2000 && clock::now() < end;) {
		std::this_thread::sleep_for(20ms);
		cmds = targetd_stat(td, "cmds");
	}
	::kill(pid, SIGKILL);
	int st = 0;
	::waitpid(pid, &st, 0);
	ASSERT_TRUE(up) << td.log();
	EXPECT_GE(cmds, 2000) << "the initiator was not sending\n" << td.log();
	// The target notices, frees the channels and the nexus, and carries on.
	EXPECT_TRUE(targetd_channels(td, 0, 10s)) << td.log();
	Io io(32, 65536);
	InitSide in;
	ASSERT_TRUE(in.start());
	ASSERT_TRUE(in.login(targetd_addr(td), in.cfg(2, Desc::Indirect)));
	RunOpts pre;
	pre.prefill = true;
	RunResult r = io.run(in, pre);
	ASSERT_EQ(r.good_writes, io.units()) << r.str();
	RunOpts o;
	o.total = 300;
	r = io.run(in, o);
	EXPECT_EQ(r.good_writes + r.good_reads, 300u) << r.str();
	std::string problems;
	EXPECT_EQ(io.verify_all(in, &problems), 0u) << problems;
	in.ini->logout();
	EXPECT_TRUE(targetd_channels(td, 0, 5s)) << td.log();
	in.stop();
	EXPECT_EQ(td.stop(), 0) << td.log();
}

} // namespace
} // namespace ulp::srpt
