# core/version.cmake - writes ulp/version.h (version.h.in) with the commit the tree is at
# when it is built: run by the ulp_version target at every build (cmake -P), so --version
# names the commit a binary was built from, not the one CMake was first configured at.
# configure_file rewrites the header only when its text changes: a build of the same commit
# recompiles nothing.
#   -DSRC=version.h.in -DDST=.../ulp/version.h -DREPO=<source dir> -DGIT=<git or empty>
#   -DPROJECT_VERSION=... -DPROJECT_VERSION_MAJOR=... -DPROJECT_VERSION_MINOR=...
set(ULP_GIT_COMMIT "")
if(GIT AND EXISTS ${REPO}/.git)
  execute_process(COMMAND ${GIT} -C ${REPO} rev-parse --short HEAD
    OUTPUT_VARIABLE ULP_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
configure_file(${SRC} ${DST} @ONLY)
