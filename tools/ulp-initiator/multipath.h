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
// Single-threaded like every Disk: submit and poll from one thread.
#pragma once

#include "tools/ulp-initiator/disk.h"

#include "iscsi/initiator/scsi.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace initiator
{

class MultipathDisk final : public Disk
{
public:
	using Clock = std::chrono::steady_clock;
	static constexpr auto kRetryFor = std::chrono::seconds(60);
	static constexpr auto kRetryInterval = std::chrono::milliseconds(500);

	// One path: a logged-in session (owned) and its name for messages ("127.0.0.1:3261").
	struct Path {
		std::string name;
		std::unique_ptr<ulp::iscsi::initiator::Session> session;
	};

	MultipathDisk(std::vector<Path> paths, uint64_t lun);
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
		std::string state; // its group's state, as last read
	};
	std::vector<PathStats> path_stats() const;
	uint64_t switches() const { return switches_; }     // times the chosen path changed
	uint64_t retries() const { return retries_; }       // commands sent again
	uint64_t rtpg_reads() const { return rtpg_reads_; } // REPORT TARGET PORT GROUPS sent

private:
	struct PathRt {
		Path p;
		std::unique_ptr<IscsiDisk> disk;
		ulp::iscsi::initiator::PortIds ids;
		uint8_t state = 0; // its group's ASYMMETRIC ACCESS STATE, as last read
		bool dead = false;
		uint64_t ios = 0;
	};
	// A command of the caller's, while it is ours.
	struct Cmd {
		ScsiRequest req;
		std::vector<uint8_t> cdb; // a copy: req.cdb points here
		DiskCallback cb;
		Clock::time_point first; // when the caller submitted it
		ScsiResult last;         // its last result, for when retrying ends
	};

	int send(std::shared_ptr<Cmd> c);
	void completed(size_t path, std::shared_ptr<Cmd> c, const ScsiResult &r);
	bool refresh(); // RTPG on a live path; chooses the path
	void choose();
	void resubmit_waiting();
	void mark_dead(size_t i, const std::string &why);

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
};

} // namespace initiator
