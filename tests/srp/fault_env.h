// SPDX-License-Identifier: MIT
// tests/srp/fault_env.h - what the SRP fault suites share (fault_test.cc, in one process;
// fault_xproc_test.cc, across processes): the initiator side (a soft device of its own, a
// registered arena, the initiator, in any descriptor format) and verified I/O (Io): every
// unit written once, then random reads and writes, never two on one unit at once, each read
// checked against what was acknowledged last, and every unit read back through a new login.
#pragma once

#include "core/addr.h"
#include "core/dma_mem.h"
#include "providers/soft/soft.h"
#include "srp/initiator/initiator.h"
#include "tests/srp/srp_env.h"

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace ulp::srpt::fault_test
{

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;
using test_env::cdb_rw10;
using test_env::fill;
using test_env::kBlock;

inline constexpr uint64_t kIdExt = 0x0002c90300fa0001;
inline constexpr uint64_t kIocGuid = 0x0002c90300fa0002;
inline constexpr uint64_t kLunBytes = 64u << 20;
inline constexpr char kTargetIp[] = "127.0.0.1";
inline constexpr char kInitiatorIp[] = "127.0.0.2";

// ---- The initiator side ------------------------------------------------------------------

// Which data buffer descriptors the initiator uses (srp/initiator/initiator.h DescMode).
enum class Desc : uint8_t { Direct, Indirect, External, Immediate };

inline const char *desc_name(Desc d)
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
inline void use_desc(Desc d, InitiatorConfig *c)
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

inline uint64_t InitiatorStats::*desc_counter(Desc d)
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

} // namespace ulp::srpt::fault_test
