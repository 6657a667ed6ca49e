# shellcheck shell=bash
# scripts/steps.sh - timed steps for the scripts that build and test (sourced, not run).
#
#   step NAME     end the step that runs (if any), start NAME, print a banner
#   step_end      end the step that runs (if any)
#
# Each finished step appends "NAME SECONDS" to $ULP_STEP_LOG when it is set: .ci/run sets
# it, and scripts/test.sh, which it calls, adds its own steps to the same file, so that CI
# prints one table of every step against its budget (.ci/budget.md) at the end.
# Without ULP_STEP_LOG the banners are all there is.

_step_name='' _step_t0=0
# The run's start, shared with the scripts a run calls (their banners count from it).
export _steps_t0=${_steps_t0:-$(date +%s)}

step_end() {
	[[ -n $_step_name ]] || return 0
	local secs=$(($(date +%s) - _step_t0))
	if [[ -n ${ULP_STEP_LOG:-} ]]; then
		printf '%s %d\n' "$_step_name" "$secs" >>"$ULP_STEP_LOG"
	fi
	printf '%s: %s took %d s\n' "${0##*/}" "$_step_name" "$secs"
	_step_name=''
}

step() {
	step_end
	_step_name=$1
	_step_t0=$(date +%s)
	printf '\n========== %s  [+%ds] ==========\n\n' "$_step_name" $((_step_t0 - _steps_t0))
}
