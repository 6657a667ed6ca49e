// SPDX-License-Identifier: MIT
// fuzz/fuzz_ulpctl_import.cc - libFuzzer target: `ulpctl import`'s two readers
// (tools/ulpctl/import.h), targetcli's saveconfig.json and tgt's targets.conf, against any
// file: JSON of every shape and depth, blocks left open or closed twice, includes of
// themselves, values of every length.
//
// Input: the first byte chooses the reader (even: saveconfig.json, odd: targets.conf), the
// rest is the file. A tgt "include" of any pattern reads the input again, so that the
// include bounds (depth, file count, bytes) are reached. Invariants: no crash; an import
// that succeeds writes a file whose header lines are all comments and that the daemon's
// own reader (targetd::load_config_file) accepts: whatever the importers let through must
// load.
//
// Seeds: ULP_FUZZ_SEEDS=<dir> writes a small file of each kind there and exits
// (scripts/fuzz.sh).
#include "tools/ulp-targetd/config.h"
#include "tools/ulpctl/import.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace
{

const char kLioSeed[] = R"({"storage_objects": [{"plugin": "fileio", "name": "d",
"dev": "/srv/d.img", "size": 1048576, "write_back": true, "attributes": {"block_size": 4096}},
{"plugin": "user", "name": "r", "config": "rbd/p/i;osd_op_timeout=9"}],
"targets": [{"wwn": "iqn.2024-01.x:y", "fabric": "iscsi", "tpgs": [{"tag": 1, "enable": true,
"attributes": {"authentication": 1, "generate_node_acls": 0}, "parameters":
{"MaxBurstLength": "524288"}, "luns": [{"index": 0, "storage_object": "/backstores/fileio/d"},
{"index": 1, "storage_object": "/backstores/user/r"}], "portals": [{"ip_address": "0.0.0.0",
"port": 3260, "iser": true}], "node_acls": [{"node_wwn": "iqn.1994-05.com.redhat:c",
"chap_userid": "u", "chap_password": "0123456789ab", "mapped_luns": [{"index": 0,
"tpg_lun": 0, "write_protect": false}]}]}]}], "fabric_modules": []})";

const char kTgtSeed[] = "default-driver iscsi\n<target iqn.2024-01.x:z>\n"
                        "  <backing-store /srv/a.img>\n    lun 3\n    readonly 1\n"
                        "  </backing-store>\n  backing-store /srv/b.img # LUN 1\n"
                        "  initiator-name iqn.1994-05.com.redhat:c\n"
                        "  incominguser u 0123456789ab\n  MaxBurstLength 524288\n"
                        "</target>\ninclude self\n";

std::string scratch_file()
{
	char t[] = "/tmp/fuzz-ulpctl-import-XXXXXX";
	const int fd = ::mkstemp(t);
	if (fd < 0)
		std::abort();
	::close(fd);
	return t;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	namespace imp = ulpctl::import;
	const std::string text(reinterpret_cast<const char *>(data) + 1, size - 1);
	const imp::Format f = data[0] & 1 ? imp::Format::Tgt : imp::Format::Targetcli;
	imp::Result r;
	std::string why;
	const imp::ReadFile again = [&](const std::string &, const std::string &,
	                                std::vector<std::pair<std::string, std::string>> *files,
	                                std::string *) {
		files->emplace_back("again.conf", text);
		return true;
	};
	const bool ok = f == imp::Format::Tgt ? imp::import_tgt(text, "in.conf", again, &r, &why)
	                                      : imp::import_targetcli(text, "in.json", &r, &why);
	if (!ok) {
		if (why.empty())
			__builtin_trap(); // a refusal always says why
		return 0;
	}
	if (r.config.targets.empty())
		return 0; // run_import writes nothing then
	const std::string out = imp::render(f, "in", r);
	const std::string head = out.substr(0, out.find("\n\n"));
	for (size_t at = 0; at < head.size(); at = head.find('\n', at) + 1) {
		if (head[at] != '#')
			__builtin_trap(); // a source's value broke out of the header's comments
		if (head.find('\n', at) == std::string::npos)
			break;
	}
	static const std::string path = scratch_file();
	std::ofstream(path, std::ios::trunc) << out;
	targetd::Config c;
	if (!targetd::load_config_file(path, &c, &why)) {
		std::fprintf(stderr, "imported file refused: %s\n%s\n", why.c_str(), out.c_str());
		__builtin_trap();
	}
	return 0;
}

extern "C" int LLVMFuzzerInitialize(int *, char ***)
{
	if (const char *dir = std::getenv("ULP_FUZZ_SEEDS")) {
		std::ofstream(std::string(dir) + "/saveconfig.json") << '\0' << kLioSeed;
		std::ofstream(std::string(dir) + "/targets.conf") << '\1' << kTgtSeed;
		std::exit(0);
	}
	return 0;
}
