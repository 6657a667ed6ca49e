// SPDX-License-Identifier: MIT
// tools/ulp-stress/stress.h - what every scenario shares: the profile (how many, how
// long), the run (target, endpoint, ledger, generations, watchdog) and one result row per
// scenario and transport.
//
// The LUN's first blocks are cut into slots, one per worker, killed child or verified
// session, so that no two writers ever share a block: each worker's blocks have one
// writer at a time, and a block is written again only after the nexus that last wrote it
// is gone from the target.
#pragma once

#include "tools/ulp-initiator/histogram.h"
#include "tools/ulp-stress/io.h"
#include "tools/ulp-stress/ledger.h"
#include "tools/ulp-stress/nexus.h"
#include "tools/ulp-stress/snapshot.h"
#include "tools/ulp-stress/target.h"
#include "tools/ulp-stress/watchdog.h"

#include "core/device.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <sys/types.h>

namespace stress
{

using std::chrono::milliseconds;

struct Profile {
	std::string name = "short";
	uint32_t sessions = 4;         // login-storm, target-disconnect: nexuses at once
	uint32_t cycles = 24;          // login-storm: login/logout cycles per transport
	uint32_t kills = 6;            // kill: children killed per transport
	uint32_t kill_parallel = 2;    // kill: children alive at once
	uint32_t drops = 6;            // target-disconnect: sessions dropped per transport
	uint32_t faults = 8;           // faults: fault cycles per transport (kinds in turn)
	uint32_t exhaust = 2;          // exhaustion: rounds per transport (credits, large I/O)
	uint32_t starve = 1;           // starvation: rounds per transport (16 nexuses at once)
	uint32_t cq_cycles = 8;        // cq-race: teardowns of half the nexuses per transport
	milliseconds io{150};          // verified I/O per cycle
	milliseconds kill_window{600}; // kill: the kill lands this long after the start at most
	milliseconds scenario{60000};  // one scenario on one transport, at most
	milliseconds step{30000};      // one step (login, I/O, logout, a wait), at most
	milliseconds baseline{10000};  // resources back at the baseline within this
	bool memory_check = false;     // a warm-up pass first, then VmRSS must stay flat
};
bool profile_from_name(const std::string &s, Profile *out);

// Slots of the LUN's first blocks (stress.h's comment).
constexpr uint32_t kSlots = 32;
constexpr uint32_t kWorkerSlots = 16;  // 0..15: login-storm and target-disconnect workers
constexpr uint32_t kTakeoverSlot = 16; // SRP takeover
constexpr uint32_t kMultiSlot = 17;    // SRP multichannel
constexpr uint32_t kLeakSlot = 18;     // --test-leak-session
constexpr uint32_t kFaultSlot = 19;    // faults
constexpr uint32_t kKillSlot = 20;     // 20..27: killed children
constexpr uint32_t kKillSlots = 8;
constexpr uint32_t kVerifySlot = 31; // the verified session

// One scenario on one transport.
struct Row {
	std::string scenario;
	std::string transport;
	std::atomic<uint64_t> cycles{0};   // logins/logouts, kills, drops
	std::atomic<uint64_t> ios{0};      // commands completed GOOD
	std::atomic<uint64_t> failures{0}; // checks that failed
	std::mutex lock;
	initiator::Histogram teardown;   // ns: logout, close after kill, close after drop; the
	                                 // gateways scenario's I/O stalls
	std::string figure = "teardown"; // what teardown holds: "teardown" or "stall"
	std::map<std::string, initiator::Histogram> more; // ns: other figures by name (the
	                                                  // gateways': resume, owner); lock
	std::vector<std::string> msgs;                    // the first failures
	std::vector<std::string> notes; // what else it saw (kill phases, takeovers)
	double seconds = 0;

	void fail(const std::string &m);
	void note(const std::string &m);
	void add_teardown(std::chrono::nanoseconds d);
	void add_more(const std::string &name, std::chrono::nanoseconds d);
	// BUSY and TASK SET FULL answers are failures unless busy_ok.
	void add_io(const IoStats &st, bool lost_is_failure, bool busy_ok = false);
};

struct Run {
	Target &target;
	Endpoint ep;
	Profile prof;
	Ledger *ledger = nullptr;
	GenSource gens;
	Watchdog *wd = nullptr;
	uint64_t lun = 0;
	uint32_t io_blocks = 8;            // blocks per command (4 KiB of 512-byte blocks)
	uint32_t slot_blocks = 512;        // blocks per slot
	std::string self_exe;              // for the kill scenario's children
	std::string targetd;               // the ulp-targetd we start (starvation's second one)
	std::vector<Transport> transports; // those the run covers (cq-race mixes iSER and SRP)
	ulp::Device *soft_dev = nullptr;   // our soft device (faults), nullptr with --rdma-device
	std::string soft_ip;               // its address
	std::vector<std::string> fault_kinds; // faults: the kinds to inject (empty: every one)
	const ResourceSnapshot *baseline = nullptr; // the daemon's resources at rest (faults)
	bool test_freeze = false; // --test-freeze-target: once, then cleared (faults)
	bool verbose = false;
	std::atomic<Row *> current{nullptr}; // the row under way (progress)
	std::mutex say_lock;

	explicit Run(Target &t) : target(t) {}
	Region slot(uint32_t i) const { return {uint64_t(i) * slot_blocks, slot_blocks}; }
	Region all() const { return {0, uint64_t(kSlots) * slot_blocks}; }
	void say(const std::string &m); // a line on stderr
	// Wait until the target lists no nexus of who (an iSCSI name or SRP port prefix), up to
	// bound: the time it took, or -1 (still there: *why).
	int64_t wait_gone(const std::string &who, milliseconds bound, std::string *why);
	// Device removal and return: destroy soft_dev (nothing may use it) and make it again
	// under the same name and address. false + *why when it cannot be made.
	bool reset_soft_device(std::string *why);
};

// An initiator in a child process (this executable's hidden --child-kill mode, kill.cc): it
// logs in as id, does verified I/O on reg in bursts of io and logs out, in a loop; it tells
// us of every write before it goes and of every acknowledgement before it counts (its
// journal), which pump() applies to the run's ledger. Killed and reaped when destroyed.
class Child
{
public:
	Child() = default;
	~Child();
	Child(const Child &) = delete;
	Child &operator=(const Child &) = delete;

	// Start it; generations from gen_base up. false + *why.
	bool spawn(Run &r, Transport t, const Identity &id, Region reg, uint64_t gen_base,
	           uint32_t seed, milliseconds io, std::string *why);
	// Read its journal for up to timeout_ms. false at EOF (it is gone).
	bool pump(int timeout_ms);
	// Its last phase: start, login, io, logout, idle.
	const std::string &phase() const { return phase_; }
	// SIGKILL, reap, read the journal to its end: its status (exit code, or 128 + signal);
	// *exited when it had ended by itself.
	int kill_and_reap(bool *exited);
	uint64_t acked() const { return acked_; } // writes it had acknowledged

private:
	pid_t pid_ = -1;
	int fd_ = -1;              // the journal's read end
	Ledger *ledger_ = nullptr; // where the journal goes
	std::string buf_;          // a partial line
	std::string phase_ = "start";
	uint64_t acked_ = 0;
};

// A worker's identity: iSCSI name and SRP initiator_ext from its scenario and slot.
Identity identity(const std::string &scenario, uint32_t slot);
// What Run::wait_gone and Target::sessions_of take for it on transport t.
std::string who(Transport t, const Identity &id);

// The scenarios (each fills its row; checks after it are check.h's).
void login_storm(Run &r, Transport t, Row &row);
void kill_scenario(Run &r, Transport t, Row &row);
void target_disconnect(Run &r, Transport t, Row &row);
void faults_scenario(Run &r, Transport t, Row &row);
// The fault kinds faults_scenario knows, in the order it takes them.
std::vector<std::string> fault_kind_names();
void exhaustion(Run &r, Transport t, Row &row);
void starvation(Run &r, Transport t, Row &row);
void cq_race(Run &r, Transport t, Row &row);
// A killed child's main (the hidden --child-kill mode).
int kill_child_main(int argc, char **argv);

// After every scenario and at the end: a verified session succeeds and reads back every
// acknowledged block; the daemon's resources return to base. Failures go to row.
void post_check(Run &r, Transport t, const ResourceSnapshot &base, Row &row);

} // namespace stress
