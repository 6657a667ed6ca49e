#!/usr/bin/env bash
# The package route (README): install the build dependencies, build the Debian packages
# (debian/: dpkg-buildpackage -b, the CMake + Ninja build in build/), and with --install
# install them and run a verified job from their installed paths.
#
#   scripts/package.sh [--no-build] [--no-tests] [--install] [--check]
#
# The packages land in build/packages/: ulp-targetd, ulp-tools, libulp-dev and their
# -dbgsym packages, with the .changes and .buildinfo files. build/ is also an ordinary
# build tree with the tests built (scripts/test.sh --only tests runs them): .ci/run builds
# it this way, so that the release tree it tests is the one it packages.
#   --no-build the packages built before, in build/packages/ (.ci/run builds them first
#              and checks and installs them after the release tree's tests)
#   --no-tests build with the nocheck profile: the packages are the same, build/ has no
#              tests (BUILD_TESTING=OFF). .ci/run then turns them on in build/ and builds
#              only the test programs the release tree runs (.ci/test-programs)
#   --install  apt-get install the three packages, then scripts/main-job.sh --installed
#              --quick: ulp-targetd, ulpctl and ulp-initiator from /usr, verified I/O over
#              iSER, SRP and TCP; then examples/run-installed.sh: the library's examples
#              built against the installed libulp-dev and run
#   --check    lintian on the packages (debian/*.lintian-overrides say why for each tag
#              they hide); fails on any error or warning
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/steps.sh

install=0 check=0 build=1 profiles=()
for a in "$@"; do
	case $a in
	--no-build) build=0 ;;
	--no-tests) profiles=(-Pnocheck) ;;
	--install) install=1 ;;
	--check) check=1 ;;
	-h | --help)
		sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "package.sh: unknown option '$a' (--no-build, --no-tests, --install, --check)" >&2
		exit 2
		;;
	esac
done
out=build/packages
version=$(dpkg-parsechangelog -S Version)
arch=$(dpkg-architecture -q DEB_HOST_ARCH)
debs=("ulp-targetd_${version}_$arch.deb" "ulp-tools_${version}_$arch.deb"
	"libulp-dev_${version}_$arch.deb")

if ((build)); then
	step "build: install"
	scripts/install-deps.sh
	# libiscsi 1.20's iscsi-test-cu for the tests (scripts/libiscsi-1.20.sh: 36 s of two
	# cores alone), built at idle priority beside the package build, into build-deps/: the
	# package build's clean removes build/ but not its siblings, and its single-threaded
	# tail (dh_strip, the -dbgsym packages, dh_builddeb) leaves a core to it. build/ then
	# links to it, as the ASan tree's install step does.
	mkdir -p build-deps
	(chrt --idle -p 0 $BASHPID >/dev/null || true; scripts/libiscsi-1.20.sh build-deps) \
		>build-deps/libiscsi.log 2>&1 &
	libiscsi_pid=$!
	step "build: compile"
	# nocheck: the tests are built but not run here (scripts/test.sh --only tests, CI's next
	# step, runs them). dpkg-buildpackage cleans first (build/ goes) and writes to ../.
	DEB_BUILD_OPTIONS="nocheck parallel=$(nproc) ${DEB_BUILD_OPTIONS:-}" \
		dpkg-buildpackage -b -us -uc "${profiles[@]}"
	mkdir -p "$out"
	for f in ../ulp-targetd_"$version"_* ../ulp-tools_"$version"_* ../libulp-dev_"$version"_* \
		../ulp-targetd-dbgsym_"$version"_* ../ulp-tools-dbgsym_"$version"_* \
		../ulp_"${version}"_"$arch".changes ../ulp_"${version}"_"$arch".buildinfo; do
		if [[ -e $f ]]; then mv -f "$f" "$out/"; fi
	done
	step "build: libiscsi 1.20"
	libiscsi_rc=0
	wait "$libiscsi_pid" || libiscsi_rc=$?
	cat build-deps/libiscsi.log
	((libiscsi_rc == 0)) || { echo "package.sh: libiscsi 1.20 failed to build" >&2; exit 1; }
	scripts/libiscsi-1.20.sh build
	step_end
	printf '\npackage.sh: built in %s:\n' "$out"
	ls -l "$out"
fi
for d in "${debs[@]}"; do
	[[ -f $out/$d ]] || { echo "package.sh: $out/$d was not built" >&2; exit 1; }
done

if ((check)); then
	step "packages: lintian"
	# --fail-on warning: an error or a warning fails; informational tags are printed.
	lintian --fail-on error,warning --info --display-info "$out/ulp_${version}_$arch.changes"
	step_end
fi
if ((install)); then
	step "packages: install"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -q --no-install-recommends --reinstall "${debs[@]/#/./$out/}"
	dpkg -L ulp-targetd ulp-tools libulp-dev | grep -v '/$' | sort >"$out/contents.txt" || true
	step "packages: verified job from /usr"
	scripts/main-job.sh --installed --quick
	step "packages: examples"
	# The library's examples built against the installed libulp-dev (CMake and pkg-config)
	# and run on the soft provider.
	examples/run-installed.sh /usr
	step_end
fi
