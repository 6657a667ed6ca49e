// SPDX-License-Identifier: MIT
// tools/ulp-initiator/multipath.h - one LU through several paths, each an iSCSI session to
// one target port (a portal of one gateway, or of one portal group), with asymmetric access
// (SPC-4 5.15) as Linux's dm-multipath uses it with scsi_dh_alua: commands go to a path
// whose port group is Active/Optimized (else Active/Non-optimized), and move.
//
// At init() every path says which port it reaches (VPD 83h: relative target port, target
// port group) and one REPORT TARGET PORT GROUPS says each group's state. Then:
//   - a command refused for its port's state (NOT READY 04h/0Ah transitioning, 04h/0Bh
//     standby, 04h/0Ch unavailable) or told the states changed (UNIT ATTENTION 2Ah/06h)
//     was not executed: it is sent again, after the groups are read again, on the path
//     they make best; while no path is usable (every group transitioning) it waits, RTPG
//     read again every kRetryInterval;
//   - any other UNIT ATTENTION (a path's first command meets POWER ON OCCURRED) was not
//     executed either: sent again;
//   - a path whose session fails (connection lost, command timeout) is dead; what it had in
//     flight is sent again on another path - the outcome of those commands is unknown, and
//     writing the same data to the same blocks again is what a multipath device does (the
//     workload's verification then checks the result);
//   - any other result is the command's: passed to the caller as it came.
// A command is retried for at most kRetryFor in all; then its last result is its answer.
// Reservations, ordered tags and TMFs are not carried across paths: this is for I/O.
//
// A dead path whose Path has a login function is logged in again, as iscsid reconnects a
// session and multipathd reinstates its path: every kReloginInterval, on a thread of its
// own (a login to a frozen target blocks for the login timeout), which also reads the new
// session's VPD 83h; the poll that finds it done puts the new session in the old one's
// place and reads the groups again. Until then, and while every path is dead, commands
// wait (kRetryFor bounds each). Without a login function a dead path stays dead, and once
// every path is, the run ends.
//
// Failovers, for the report: one begins when the path in use fails, a command on it is
// refused for its group's state, or the groups read again make another path the best; it
// ends when a command sent since completes GOOD (on whatever path: the one it went to,
// perhaps the same path logged in again). Its stall is the I/O gap the caller saw: from
// when the first command that could not complete on the old path was sent there to that
// first completion. A command could not complete when it was refused, failed with the
// path or answered with an error; and since a frozen target answers late what it had when
// it froze, GOOD or not, the oldest command the path had when such an answer came counts
// as well, unless a command sent after the trouble showed was answered GOOD. One line on
// stderr per failover, as it ends.
//
// Single-threaded like every Disk: submit and poll from one thread (the login threads
// touch only their own new session until they hand it over).
#pragma once

#include "tools/ulp-initiator/disk.h"

#include "iscsi/initiator/scsi.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace initiator
{

class MultipathDisk final : public Disk
{
public:
	using Clock = std::chrono::steady_clock;
	static constexpr auto kRetryFor = std::chrono::seconds(60);
	static constexpr auto kRetryInterval = std::chrono::milliseconds(500);
	static constexpr auto kReloginInterval = std::chrono::seconds(1);

	// Makes a new session to the path's portal and logs it in (blocking, bounded by the
	// session's timeouts; run on a thread of its own): the session, or nullptr with *why.
	using Login =
	    std::function<std::unique_ptr<ulp::iscsi::initiator::Session>(std::string *why)>;

	// One path: a logged-in session (owned), its name for messages ("127.0.0.1:3261") and
	// how to log in again once it failed (empty: never).
	struct Path {
		std::string name;
		std::unique_ptr<ulp::iscsi::initiator::Session> session;
		Login login;
	};

	MultipathDisk(std::vector<Path> paths, uint64_t lun);
	~MultipathDisk() override; // waits for the login threads (bounded by their timeouts)
	MultipathDisk(const MultipathDisk &) = delete;
	MultipathDisk &operator=(const MultipathDisk &) = delete;
	// Which port each path reaches, and the groups' states: false with *why when no path
	// answers.
	bool init(std::string *why);

	int submit(const ScsiRequest &req, DiskCallback cb) override;
	int poll(std::chrono::milliseconds timeout) override;
	ScsiResult run(const ScsiRequest &req) override;
	std::string error() const override { return error_; }
	std::string last_error() const override { return last_error_; }

	// Log out of every path that is still up: whether all of them logged out.
	bool logout();

	// Counters, for the report.
	struct PathStats {
		std::string name;
		uint16_t rtpi = 0, tpg = 0; // what VPD 83h said (0: not said)
		uint64_t ios = 0;           // commands sent on it
		bool dead = false;
		std::string state;       // its group's state, as last read
		uint64_t reinstated = 0; // times it was logged in again after failing
	};
	std::vector<PathStats> path_stats() const;
	// One failover (see the top of this file).
	struct FailoverStats {
		double at_s = 0;     // when it began, seconds since init()
		std::string from;    // the path in use
		std::string to;      // where the first command completed ("": never)
		std::string why;     // what began it ("connection lost", "transitioning", ...)
		double stall_ms = 0; // the I/O gap; while never resumed: to the end of the run
		bool resumed = false;
	};
	// Those that ended, then one still under way (resumed false).
	std::vector<FailoverStats> failovers() const;
	uint64_t switches() const { return switches_; }     // times the chosen path changed
	uint64_t retries() const { return retries_; }       // commands sent again
	uint64_t rtpg_reads() const { return rtpg_reads_; } // REPORT TARGET PORT GROUPS sent

private:
	// A login of a dead path under way on its thread. done is set (release) when it ended;
	// until then the other fields are the thread's.
	struct Relogin {
		std::thread thread;
		std::atomic<bool> done{false};
		std::unique_ptr<ulp::iscsi::initiator::Session> session; // nullptr: failed
		ulp::iscsi::initiator::PortIds ids;                      // its VPD 83h
		bool ids_ok = false;
		std::string why; // why it failed
	};
	struct PathRt {
		Path p;
		std::unique_ptr<IscsiDisk> disk;
		ulp::iscsi::initiator::PortIds ids;
		uint8_t state = 0; // its group's ASYMMETRIC ACCESS STATE, as last read
		bool dead = false;
		uint64_t ios = 0;
		uint32_t gen = 0;                 // its session's; a late callback of an older
		                                  // session does not mark the new one dead
		std::unique_ptr<Relogin> relogin; // a login under way
		Clock::time_point next_login{};   // a dead path's next login, not before
		bool login_failed_said = false;   // its first failed login was logged
		std::multiset<Clock::time_point> sent_times; // its commands in flight, sent
		Clock::time_point oldest_at_poll{}; // the oldest of them when its poll began
		bool polling = false;               // inside its poll (poll_path)
		Clock::time_point bad_since{};      // its trouble began (a command sent; {}: none)
		Clock::time_point bad_seen{};       // the trouble was first seen
		uint64_t reinstated = 0;            // times it was logged in again
	};
	// A failover under way or ended (times: Clock).
	struct Failover {
		Clock::time_point at;           // it began
		Clock::time_point first_sent{}; // the first command that could not complete
		                                // on from was sent there ({}: none yet)
		Clock::time_point end{};        // the first completion since at
		size_t from = SIZE_MAX, to = SIZE_MAX;
		std::string why;
	};
	// A command of the caller's, while it is ours.
	struct Cmd {
		ScsiRequest req;
		std::vector<uint8_t> cdb; // a copy: req.cdb points here
		DiskCallback cb;
		Clock::time_point first;  // when the caller submitted it
		Clock::time_point sent{}; // when it was last sent to a path
		ScsiResult last;          // its last result, for when retrying ends
	};

	int send(std::shared_ptr<Cmd> c);
	void completed(size_t path, uint32_t gen, std::shared_ptr<Cmd> c, const ScsiResult &r);
	bool refresh(); // RTPG on a live path; chooses the path
	void choose();
	void resubmit_waiting();
	void mark_dead(size_t i, const std::string &why);
	int poll_path(size_t i, std::chrono::milliseconds timeout); // its disk's, noted
	void relogin();                       // start and finish logins of dead paths
	void reinstate(size_t i, Relogin &l); // its new session in the old one's place
	bool may_come_back() const;           // a dead path may be logged in again
	// Failovers: the path in use is left (why); a command sent at sent could not complete
	// on path i; a command sent at sent completed GOOD on path i.
	void failover_begin(const std::string &why);
	void failover_uncompleted(size_t i, Clock::time_point sent);
	void failover_completed(size_t i, Clock::time_point sent);

	uint64_t lun_;
	std::vector<PathRt> paths_;
	size_t current_ = SIZE_MAX;   // the chosen path; SIZE_MAX: none usable now
	size_t last_used_ = SIZE_MAX; // the path chosen last (for counting switches)
	bool need_refresh_ = false;   // a result said the states changed
	bool refreshing_ = false;     // inside refresh(): completions only queue
	Clock::time_point last_refresh_{};
	std::deque<std::shared_ptr<Cmd>> waiting_; // to be sent (again)
	uint64_t in_flight_ = 0;                   // sent and not completed
	uint64_t switches_ = 0, retries_ = 0, rtpg_reads_ = 0;
	std::string error_, last_error_;
	Clock::time_point start_;         // init()
	std::vector<Failover> failovers_; // the last one may be under way
	bool in_failover_ = false;        // failovers_.back() is under way
};

} // namespace initiator
