// SPDX-License-Identifier: MIT
// tools/ulpctl/import.h - `ulpctl import`: LIO's and tgt's saved configurations read into
// ulp-targetd's (tools/ulp-targetd/config.h), offline: no daemon is asked anything.
//
//   ulpctl import --from targetcli /etc/target/saveconfig.json -o /etc/ulp-targetd/ulp-targetd.toml
//   ulpctl import --from tgt /etc/tgt/targets.conf
//
// The importers fill a targetd::Config, which the daemon's own writer (config_save.cc)
// turns into the file: one TOML writer, the one `ulpctl save` uses. What a source sets
// that ulp-targetd cannot do the same way is not dropped: each such setting is a Skipped
// line (printed to stderr, one a line: where it was, the setting, why), and the exit status
// says that there were some. What each importer maps, and why, is in the header comments of
// import_targetcli.cc (LIO) and import_tgt.cc (tgt).
//
// Exit status of `ulpctl import` (run_import): 0 everything carried over; 4 the file
// written, some settings not carried over (each listed); 1 the input unreadable or
// invalid (file:line[:column] or the JSON path in the message), nothing importable, or the
// output not written (an existing file without --force); 2 a bad command line (CLI11's).
// ulpctl's 3 means "no daemon", which import never asks: 4 keeps the two apart.
//
// Bounds, against a damaged or hostile file: the input (every included file together) is
// at most kMaxInputBytes; JSON nests at most kMaxJsonDepth deep; tgt includes go at most
// kMaxIncludeDepth deep and kMaxIncludeFiles files; at most kMaxTargets targets,
// kMaxLunsPerTarget LUNs and kMaxAclsPerTarget ACL entries per target, and kMaxSkipped
// listed settings (the rest counted).
#pragma once

#include "tools/ulp-targetd/config.h"

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace ulpctl::import
{

inline constexpr size_t kMaxInputBytes = 16u << 20;
inline constexpr int kMaxJsonDepth = 32;
inline constexpr int kMaxIncludeDepth = 8;
inline constexpr size_t kMaxIncludeFiles = 256;
inline constexpr size_t kMaxTargets = 4096;
inline constexpr size_t kMaxLunsPerTarget = 16384;
inline constexpr size_t kMaxAclsPerTarget = 4096;
inline constexpr size_t kMaxSkipped = 10000;
inline constexpr size_t kMaxLineBytes = 64u << 10;

// Exit statuses (see above).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitPartial = 4;

enum class Format { Targetcli, Tgt };

// One setting not carried over: where it is (the target, LUN, storage object...), the
// setting with its value, and why ulp-targetd does not take it.
struct Skipped {
	std::string where;
	std::string setting;
	std::string why;
	std::string line() const { return where + ": " + setting + ": not carried over: " + why; }
};

struct Result {
	targetd::Config config; // starts from the daemon's defaults (targetd::storage_prefs)
	std::vector<Skipped> skipped;
	size_t skipped_dropped = 0; // past kMaxSkipped: counted, not kept

	Result();
	void skip(std::string where, std::string setting, std::string why);
};

// Reads a file of at most kMaxInputBytes (less what *budget says is left, when given, which
// is then charged): false with *why naming it when it cannot be read or is too large.
bool read_bounded(const std::string &path, std::string *out, std::string *why,
                  size_t *budget = nullptr);

// targetcli's saveconfig.json (rtslib-fb's dump), its text; source names it in messages.
// false with *why ("SOURCE:LINE:COLUMN: ..." for JSON that does not parse, "SOURCE:
// targets[0].tpgs[0].luns[1].index: ..." for a value of the wrong kind): the input is
// invalid.
bool import_targetcli(const std::string &text, const std::string &source, Result *out,
                      std::string *why);

// tgt-admin's targets.conf, its text; `include` lines read through read (their patterns
// resolved against the including file's directory). Errors name "SOURCE:LINE: ...".
using ReadFile =
    std::function<bool(const std::string &pattern, const std::string &from_dir,
                       std::vector<std::pair<std::string, std::string>> *files, std::string *why)>;
bool import_tgt(const std::string &text, const std::string &source, const ReadFile &read,
                Result *out, std::string *why);
// The ReadFile of the real file system: the pattern globbed (relative to from_dir), each
// file read within the byte budget it shares with the other files.
ReadFile file_system_reader(size_t *budget);

// Shared by the two importers (import.cc).

// The file's first lines: where it came from, and how to check it.
std::string header(Format f, const std::string &source, const Result &r);
// The whole file: header and to_toml.
std::string render(Format f, const std::string &source, const Result &r);

// An iSCSI name ulp-targetd accepts (iscsi/text.h's valid_iscsi_name).
bool iscsi_name_ok(const std::string &n);
// A CHAP account ulp-targetd accepts, or why not (its secret: at least 12 bytes, RFC 7143
// 12.1.3, as targetd::check_chap requires).
bool chap_ok(const std::string &user, const std::string &secret, std::string *why);
// "file" or "block" for a path: a block device (stat, when this machine has it), or a path
// under /dev/ (the source's machine may not be this one); else a file.
std::string file_or_block(const std::string &path);
// A logical block size ulp-targetd takes: a power of two, 512 to 65536.
bool block_size_ok(uint64_t n);

// Settings that are global in ulp-targetd ([iscsi]) but per target in LIO and tgt: each
// target's value recorded, then applied when every target has the same one, else listed
// per target. A value that is the source's default is recorded as such: a parameter all
// targets leave at the source's default stays at ulp-targetd's.
class GlobalParams
{
public:
	// value: the target's value, "" when the source's default applies.
	void record(const std::string &target, const std::string &key, const std::string &value);
	// The agreed values applied to r->config (unknown keys, values ulp-targetd refuses and
	// disagreements listed in r->skipped).
	void apply(Result *r) const;

private:
	struct Entry {
		std::string target, value;
	};
	std::vector<std::pair<std::string, std::vector<Entry>>> keys_;
	std::vector<std::string> targets_;
};

// `ulpctl import`: read input, convert, print the listed settings to stderr, write output
// (stdout when empty; an existing file only with force). The exit status (above).
int run_import(Format f, const std::string &input, const std::string &output, bool force);

} // namespace ulpctl::import
