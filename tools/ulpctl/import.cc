// SPDX-License-Identifier: MIT
// tools/ulpctl/import.cc - `ulpctl import`'s common part (import.h): reading the input
// within its bounds, the checks both importers make of what they emit (so that the file
// they write is one the daemon loads), the [iscsi] settings both sources set per target,
// and the run itself: the listed settings to stderr, the file written with the daemon's
// writer (config_save.cc), the exit status.
#include "tools/ulpctl/import.h"

#include "iscsi/text.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace ulpctl::import
{

Result::Result()
{
	targetd::storage_prefs(&config.prefs);
}

void Result::skip(std::string where, std::string setting, std::string why)
{
	if (skipped.size() >= kMaxSkipped) {
		skipped_dropped++;
		return;
	}
	skipped.push_back({std::move(where), std::move(setting), std::move(why)});
}

bool read_bounded(const std::string &path, std::string *out, std::string *why, size_t *budget)
{
	const size_t limit = budget ? *budget : kMaxInputBytes;
	const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		*why = path + ": " + std::strerror(errno);
		return false;
	}
	struct stat st {
	};
	if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		*why = path + ": not a regular file";
		::close(fd);
		return false;
	}
	out->clear();
	char buf[65536];
	for (;;) {
		const ssize_t n = ::read(fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			*why = path + ": " + std::strerror(errno);
			::close(fd);
			return false;
		}
		if (n == 0)
			break;
		if (out->size() + size_t(n) > limit) {
			*why = path + ": larger than " + std::to_string(kMaxInputBytes >> 20) +
			       " MiB (with what it includes): not a configuration file";
			::close(fd);
			return false;
		}
		out->append(buf, size_t(n));
	}
	::close(fd);
	if (budget)
		*budget -= out->size();
	return true;
}

ReadFile file_system_reader(size_t *budget)
{
	return [budget](const std::string &pattern, const std::string &from_dir,
	                std::vector<std::pair<std::string, std::string>> *files, std::string *why) {
		const std::string p =
		    !pattern.empty() && pattern[0] == '/' ? pattern : from_dir + "/" + pattern;
		glob_t g{};
		// A pattern that matches nothing includes nothing (Config::General's
		// -IncludeGlob does the same); a plain name that does not exist is an error.
		const int rc = ::glob(p.c_str(), 0, nullptr, &g);
		if (rc == GLOB_NOMATCH) {
			::globfree(&g);
			if (p.find_first_of("*?[") != std::string::npos)
				return true;
			*why = p + ": " + std::strerror(ENOENT);
			return false;
		}
		if (rc != 0) {
			::globfree(&g);
			*why = p + ": cannot be expanded";
			return false;
		}
		bool ok = true;
		for (size_t i = 0; i < g.gl_pathc && ok; i++) {
			struct stat st {
			};
			if (::stat(g.gl_pathv[i], &st) == 0 && S_ISDIR(st.st_mode))
				continue; // Config::General's -IncludeDirectories reads a
				          // directory's files; the glob names them instead
			std::string text;
			if (files->size() >= kMaxIncludeFiles) {
				*why = p + ": more than " + std::to_string(kMaxIncludeFiles) +
				       " included files";
				ok = false;
			} else if (!read_bounded(g.gl_pathv[i], &text, why, budget)) {
				ok = false;
			} else {
				files->emplace_back(g.gl_pathv[i], std::move(text));
			}
		}
		::globfree(&g);
		return ok;
	};
}

bool iscsi_name_ok(const std::string &n)
{
	return ulp::iscsi::valid_iscsi_name(n);
}

bool chap_ok(const std::string &user, const std::string &secret, std::string *why)
{
	if (user.empty() || secret.empty()) {
		*why = "a CHAP account needs a user and a secret";
		return false;
	}
	if (secret.size() < 12) {
		*why = "ulp-targetd takes CHAP secrets of at least 12 bytes (RFC 7143 12.1.3); "
		       "this one has " +
		       std::to_string(secret.size()) + ": set a longer one on both sides";
		return false;
	}
	return true;
}

std::string file_or_block(const std::string &path)
{
	struct stat st {
	};
	if (::stat(path.c_str(), &st) == 0)
		return S_ISBLK(st.st_mode) ? "block" : "file";
	return path.rfind("/dev/", 0) == 0 ? "block" : "file";
}

bool block_size_ok(uint64_t n)
{
	return n >= 512 && n <= 65536 && (n & (n - 1)) == 0;
}

void GlobalParams::record(const std::string &target, const std::string &key,
                          const std::string &value)
{
	if (std::find(targets_.begin(), targets_.end(), target) == targets_.end())
		targets_.push_back(target);
	auto it =
	    std::find_if(keys_.begin(), keys_.end(), [&](const auto &k) { return k.first == key; });
	if (it == keys_.end()) {
		keys_.push_back({key, {}});
		it = keys_.end() - 1;
	}
	it->second.push_back({target, value});
}

namespace
{

bool parse_u64(const std::string &s, uint64_t *v)
{
	if (s.empty() || s.size() > 12 ||
	    !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
		return false;
	*v = std::stoull(s);
	return true;
}

bool yes_no(const std::string &s, bool *v)
{
	if (s == "Yes" || s == "yes" || s == "1") {
		*v = true;
		return true;
	}
	if (s == "No" || s == "no" || s == "0") {
		*v = false;
		return true;
	}
	return false;
}

// One [iscsi] setting from the source's key: false with *why when ulp-targetd refuses the
// value (its ranges: config.cc's reader and build_config).
bool set_param(targetd::Config *c, const std::string &key, const std::string &v, std::string *why)
{
	auto &p = c->prefs;
	uint64_t n = 0;
	auto range = [&](uint64_t lo, uint64_t hi) {
		if (parse_u64(v, &n) && n >= lo && n <= hi)
			return true;
		*why = "ulp-targetd takes " + std::to_string(lo) + " to " + std::to_string(hi);
		return false;
	};
	auto boolean = [&](bool *out) {
		if (yes_no(v, out))
			return true;
		*why = "not Yes or No";
		return false;
	};
	if (key == "MaxRecvDataSegmentLength") {
		if (!range(512, 1u << 20))
			return false;
		p.max_recv_dsl = uint32_t(n);
	} else if (key == "MaxBurstLength") {
		if (!range(512, 1u << 24))
			return false;
		p.max_burst_length = uint32_t(n);
	} else if (key == "FirstBurstLength") {
		if (!range(512, 1u << 24))
			return false;
		p.first_burst_length = uint32_t(n);
	} else if (key == "MaxOutstandingR2T") {
		if (!range(1, 65535))
			return false;
		p.max_outstanding_r2t = uint16_t(n);
	} else if (key == "ImmediateData") {
		return boolean(&p.immediate_data);
	} else if (key == "InitialR2T") {
		return boolean(&p.initial_r2t);
	} else if (key == "digests") {
		// The importers' own key: HeaderDigest and DataDigest, which ulp-targetd sets
		// together, already made one word.
		return targetd::set_digests(v, &p, why);
	} else if (key == "cmd_window") {
		if (!range(1, 4096))
			return false;
		c->cmd_window = uint32_t(n);
	} else if (key == "nop_interval") {
		if (!range(0, 3600))
			return false;
		c->nop_interval = int(n);
	} else if (key == "nop_timeout") {
		if (!range(1, 3600))
			return false;
		c->nop_timeout = int(n);
	} else {
		*why = "ulp-targetd has no such setting";
		return false;
	}
	return true;
}

} // namespace

void GlobalParams::apply(Result *r) const
{
	for (const auto &[key, entries] : keys_) {
		// Every target, those that did not record the key at the source's default.
		std::vector<Entry> all;
		for (const std::string &t : targets_) {
			auto e = std::find_if(entries.begin(), entries.end(),
			                      [&](const Entry &x) { return x.target == t; });
			all.push_back({t, e == entries.end() ? std::string() : e->value});
		}
		const bool same = std::all_of(all.begin(), all.end(), [&](const Entry &e) {
			return e.value == all.front().value;
		});
		if (same && all.front().value.empty())
			continue;
		std::string why;
		if (same && set_param(&r->config, key, all.front().value, &why))
			continue;
		if (same) {
			for (const Entry &e : all)
				r->skip("target " + e.target, key + " " + e.value, why);
			continue;
		}
		for (const Entry &e : all)
			if (!e.value.empty())
				r->skip(
				    "target " + e.target, key + " " + e.value,
				    "the targets differ, and ulp-targetd's [iscsi] settings are "
				    "every target's");
	}
	auto &p = r->config.prefs;
	if (p.first_burst_length > p.max_burst_length) {
		r->skip("[iscsi]", "FirstBurstLength " + std::to_string(p.first_burst_length),
		        "more than MaxBurstLength " + std::to_string(p.max_burst_length) +
		            " (RFC 7143 13.14); ulp-targetd's default kept");
		p.first_burst_length = std::min<uint32_t>(65536, p.max_burst_length);
	}
}

std::string header(Format f, const std::string &source, const Result &r)
{
	std::string h = "# ulp-targetd configuration, written by `ulpctl import --from " +
	                std::string(f == Format::Targetcli ? "targetcli" : "tgt") + "` from " +
	                source + ".\n";
	h += "# Format: man ulp-targetd.toml. Check it with `ulp-targetd --config FILE --check`.\n";
	if (r.skipped.empty() && r.skipped_dropped == 0) {
		h += "# Every setting of the source was carried over.\n";
	} else {
		h += "# Not carried over (" + std::to_string(r.skipped.size() + r.skipped_dropped) +
		     "):\n";
		for (const Skipped &s : r.skipped) {
			// One comment line each, of what TOML allows in one: a newline in a
			// source's value would end the comment and start TOML, and a control
			// character is refused there.
			std::string l;
			for (const char c : s.line()) {
				const auto u = static_cast<unsigned char>(c);
				if ((u < 0x20 && c != '\t') || u == 0x7f) {
					char esc[8];
					std::snprintf(esc, sizeof esc, "\\x%02x", u);
					l += esc;
				} else {
					l += c;
				}
			}
			h += "#   " + l + "\n";
		}
		if (r.skipped_dropped)
			h += "#   ... and " + std::to_string(r.skipped_dropped) + " more\n";
	}
	return h;
}

std::string render(Format f, const std::string &source, const Result &r)
{
	return targetd::to_toml(r.config, header(f, source, r));
}

int run_import(Format f, const std::string &input, const std::string &output, bool force)
{
	size_t budget = kMaxInputBytes;
	std::string text, why;
	if (!read_bounded(input, &text, &why, &budget)) {
		std::fprintf(stderr, "ulpctl import: %s\n", why.c_str());
		return kExitFailed;
	}
	Result r;
	const bool ok = f == Format::Targetcli
	                    ? import_targetcli(text, input, &r, &why)
	                    : import_tgt(text, input, file_system_reader(&budget), &r, &why);
	if (!ok) {
		std::fprintf(stderr, "ulpctl import: %s\n", why.c_str());
		return kExitFailed;
	}
	for (const Skipped &s : r.skipped)
		std::fprintf(stderr, "ulpctl import: %s\n", s.line().c_str());
	if (r.skipped_dropped)
		std::fprintf(stderr, "ulpctl import: ... and %zu more settings not carried over\n",
		             r.skipped_dropped);
	if (r.config.targets.empty()) {
		std::fprintf(
		    stderr, "ulpctl import: %s: no target could be carried over; nothing written\n",
		    input.c_str());
		return kExitFailed;
	}
	const std::string out = render(f, input, r);
	if (output.empty() || output == "-") {
		std::cout << out << std::flush;
		if (!std::cout) {
			std::fprintf(stderr, "ulpctl import: cannot write to stdout\n");
			return kExitFailed;
		}
	} else if (const int rc = targetd::write_config_text(
	               out, output, force ? targetd::Existing::Replace : targetd::Existing::Refuse,
	               &why);
	           rc != 0) {
		std::fprintf(stderr, "ulpctl import: %s%s\n", why.c_str(),
		             rc == -EEXIST ? " (--force replaces it)" : "");
		return kExitFailed;
	}
	const size_t n = r.skipped.size() + r.skipped_dropped;
	if (n) {
		std::fprintf(
		    stderr, "ulpctl import: %zu setting%s not carried over (listed above)%s%s\n", n,
		    n == 1 ? "" : "s", output.empty() ? "" : "; written to ", output.c_str());
		return kExitPartial;
	}
	return kExitOk;
}

} // namespace ulpctl::import
