#!/usr/bin/env bash
# Builds libiscsi 1.20.0 (iscsi-test-cu with iSER) from Debian trixie's source package,
# into BUILD_DIR/_deps/libiscsi-1.20.0, once. Called by scripts/install-deps.sh.
#
#   scripts/libiscsi-1.20.sh BUILD_DIR
#
# Why: bookworm's libiscsi 1.19 has a broken iser:// client (immediate data it does not
# send, crashes after reconnects, a poll loop that fails every command after the first
# WRITE); 1.20.0 carries about twenty-five iSER fixes. Only its upstream tarball is used,
# built here with bookworm's own toolchain, libcunit1-dev and librdmacm-dev; trixie's
# binary packages need a newer glibc and are never installed.
#
# Trust: apt fetches trixie's InRelease with a private configuration (nothing of the
# system's apt state changes) and checks its signature against Debian's archive keyring;
# the tarball's SHA-256 must then match the one that signed index gives. A cached build is
# reused when its stamp names the same checksum.
set -euo pipefail

build_dir=${1:?usage: libiscsi-1.20.sh BUILD_DIR}
ver=1.20.0
tarball=libiscsi_$ver.orig.tar.gz
# What trixie's Sources index said for libiscsi 1.20.0-4 (checked below against the index
# itself, which apt verified: a change there fails the build rather than pass unnoticed).
want_sha=6321d802103f2a363d3afd9a5ae772de0b4052c84fe6a301ecb576b34e853caa

mkdir -p "$build_dir/_deps"
dest=$(cd "$build_dir/_deps" && pwd)/libiscsi-$ver
stamp=$dest/.built-$want_sha
if [[ -f $stamp && -x $dest/prefix/bin/iscsi-test-cu ]]; then
	echo "libiscsi-1.20: cached in $dest"
	exit 0
fi
[[ -L $dest ]] && rm -f "$dest" # a link to a sibling tree's build that is gone
# A sibling build tree of the same checkout (build/ beside build-asan/, as CI has) that
# built the same tarball already: link to it rather than build again (a minute or two on
# two cores). The tool is a peer, not code under test: no tree needs its own flags in it.
# Its libtool rpath names the sibling's path, which the link keeps valid.
for other in "$(dirname "$(cd "$build_dir" && pwd)")"/*/_deps/"libiscsi-$ver"; do
	if [[ $other != "$dest" && -f $other/.built-$want_sha && -x $other/prefix/bin/iscsi-test-cu ]]; then
		ln -s "$other" "$dest"
		echo "libiscsi-1.20: using the build in $other"
		exit 0
	fi
done

for tool in autoreconf libtoolize make cc; do
	command -v $tool >/dev/null || {
		echo "libiscsi-1.20: $tool missing (scripts/install-deps.sh installs it)" >&2
		exit 1
	}
done

work=$(mktemp -d "$(dirname "$dest")/libiscsi-work.XXXXXX") # absolute: apt resolves Dir paths from /
trap 'rm -rf "$work"' EXIT
apt_dir=$work/apt
mkdir -p "$apt_dir"/{etc/apt.conf.d,etc/preferences.d,etc/sources.list.d,lists/partial,cache/archives/partial}
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
	"http://deb.debian.org/debian trixie main" >"$apt_dir/etc/sources.list"
apt_opts=(-o "Dir::Etc=$apt_dir/etc" -o "Dir::Etc::sourcelist=$apt_dir/etc/sources.list"
	-o "Dir::Etc::sourceparts=$apt_dir/etc/sources.list.d"
	-o "Dir::Etc::preferencesparts=$apt_dir/etc/preferences.d"
	-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
	-o "APT::Sandbox::User=root" -o "Debug::NoLocking=1")

echo "libiscsi-1.20: fetching trixie's source index (private apt configuration)"
apt-get -q "${apt_opts[@]}" update >"$work/apt-update.log" 2>&1 || {
	cat "$work/apt-update.log" >&2
	echo "libiscsi-1.20: apt-get update of trixie's sources failed" >&2
	exit 1
}
index=$(find "$apt_dir/lists" -name '*trixie_main_source_Sources*' | head -n 1)
[[ -n $index ]] || { echo "libiscsi-1.20: no Sources index fetched" >&2; exit 1; }
# The checksum the signed index gives for the tarball (awk reads to the end: an early
# exit would fail the pipeline on SIGPIPE).
idx_sha=$(/usr/lib/apt/apt-helper cat-file "$index" |
	awk -v t="$tarball" '
		/^Package: libiscsi$/ { p = 1; next }
		/^Package: / { p = 0 }
		p && /^Checksums-Sha256:/ { c = 1; next }
		p && c && /^ / { if ($3 == t && !s) s = $1; next }
		{ c = 0 }
		END { print s }')
if [[ $idx_sha != "$want_sha" ]]; then
	echo "libiscsi-1.20: trixie's index gives SHA-256 '${idx_sha:-none}' for $tarball," \
		"this script expects $want_sha: refusing to build" >&2
	exit 1
fi

echo "libiscsi-1.20: downloading $tarball"
# The .dsc and the Debian diff may not be served; the upstream tarball is all we build.
(cd "$work" && apt-get -q "${apt_opts[@]}" source --download-only libiscsi/trixie \
	>"$work/apt-source.log" 2>&1) || true
[[ -f $work/$tarball ]] || {
	cat "$work/apt-source.log" >&2
	echo "libiscsi-1.20: $tarball was not downloaded" >&2
	exit 1
}
got_sha=$(sha256sum "$work/$tarball" | cut -d' ' -f1)
if [[ $got_sha != "$want_sha" ]]; then
	echo "libiscsi-1.20: $tarball has SHA-256 $got_sha, the signed index says" \
		"$want_sha: refusing to build" >&2
	exit 1
fi

echo "libiscsi-1.20: building (autotools, iSER on)"
tar -C "$work" -xzf "$work/$tarball"
src=$work/libiscsi-$ver
(
	cd "$src"
	./autogen.sh
	# --disable-werror: bookworm's gcc 12 warns where the release's CI compiler did not.
	./configure --prefix="$dest/prefix" --disable-werror --disable-static \
		--enable-test-tool
	# Only what the tests run: the library and iscsi-test-cu (test-tool/). The utils and
	# the docs of a full `make` were a fifth of the build's CPU (24 s of 123, most of it
	# libtool's forks), and nothing here uses them.
	make -j "$(nproc)" -C lib
	make -j "$(nproc)" -C test-tool
	make -C lib install
	make -C test-tool install
) >"$work/build.log" 2>&1 || {
	tail -n 40 "$work/build.log" >&2
	echo "libiscsi-1.20: the build failed" >&2
	exit 1
}
# Without librdmacm the library has no iser:// transport (grep -c: -q would cut ldd off
# and fail the pipeline).
if ! ldd "$dest/prefix/bin/iscsi-test-cu" | grep -c librdmacm >/dev/null; then
	echo "libiscsi-1.20: built without iSER (no librdmacm linked)" >&2
	exit 1
fi
rm -f "$dest"/.built-*
touch "$stamp"
echo "libiscsi-1.20: built in $dest ($dest/prefix/bin/iscsi-test-cu)"
