// SPDX-License-Identifier: MIT
// core/check.h - checks that stay on in every build: NDEBUG (which every build type but
// Debug defines, the sanitizer builds included) does not compile them out.
//
//   ULP_CHECK(cond, fmt, args...)  an invariant (the kernel's BUG_ON, Seastar's
//                                  SEASTAR_ASSERT): when it fails, a critical log line with
//                                  the file, line, condition and message, then abort().
//                                  Going on would risk a use-after-free or data written to
//                                  the wrong place; a storage target must stop instead.
//   ULP_WARN_ON(cond)              something that should not happen but can be survived (the
//                                  kernel's WARN_ON): logs once per 5 s per site, and yields
//                                  cond so the caller handles it.
//
// State machines change state through change_state() with their table of legal
// transitions: an illegal one fails a check naming the machine and both states, and every
// legal one fires the trace point ulp:state_change (core/trace.h) with the object whose
// state it is - this, or the command - so that a tracer follows one object.
//
//   constexpr StateTable<ConnState, 5> kConnStates = {"iSCSI connection", conn_state_str, {
//       /* Login */ to(ConnState::FullFeature, ConnState::Closing), ...}};
//   change_state(&state_, ConnState::Closing, kConnStates, this);
#pragma once

#include "core/log.h"
#include "core/trace.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ulp
{

// Logs (critical) and aborts. Not inline: the failure path stays out of the caller.
[[noreturn]] void check_failed(const char *file, int line, const char *cond, std::string_view msg);

namespace detail
{
template <typename... Args>
[[noreturn]] void check_failed_fmt(const char *file, int line, const char *cond,
                                   fmt::format_string<Args...> f, Args &&...args)
{
	fmt::basic_memory_buffer<char, 256> buf;
	fmt::format_to(std::back_inserter(buf), f, std::forward<Args>(args)...);
	check_failed(file, line, cond, std::string_view(buf.data(), buf.size()));
}
[[noreturn]] inline void check_failed_fmt(const char *file, int line, const char *cond)
{
	check_failed(file, line, cond, {});
}
void warn_on(const char *file, int line, const char *cond, log::RateLimit &rl);
} // namespace detail

// A state machine's legal transitions: next[from] has bit `to` set when from -> to is legal.
template <typename S, size_t N> struct StateTable {
	const char *machine;          // "iSCSI connection", for the failure line
	const char *(*name)(S);       // the states' names
	std::array<uint32_t, N> next; // legal successors of each state, as bits
	constexpr bool legal(S from, S to) const
	{
		return size_t(from) < N && (next[size_t(from)] >> unsigned(to) & 1u);
	}
};

// The bit set of states ss (for a StateTable row).
template <typename... S> constexpr uint32_t to(S... ss)
{
	return ((uint32_t{1} << unsigned(ss)) | ... | 0u);
}

} // namespace ulp

#define ULP_CHECK(cond, ...)                                                                       \
	do {                                                                                       \
		if (__builtin_expect(!(cond), 0))                                                  \
			::ulp::detail::check_failed_fmt(__FILE__, __LINE__,                        \
			                                #cond __VA_OPT__(, ) __VA_ARGS__);         \
	} while (0)

#define ULP_WARN_ON(cond)                                                                          \
	({                                                                                         \
		const bool ulp_warn_ = static_cast<bool>(cond);                                    \
		if (__builtin_expect(ulp_warn_, 0)) {                                              \
			static ::ulp::log::RateLimit ulp_warn_rl_(1, 5000);                        \
			::ulp::detail::warn_on(__FILE__, __LINE__, #cond, ulp_warn_rl_);           \
		}                                                                                  \
		ulp_warn_;                                                                         \
	})

namespace ulp
{

// The one way a state machine changes state: *state becomes next if the table allows it,
// and otherwise the check fails, naming the machine and both states. obj is what the trace
// point reports as the object (null: state itself); the states' names are looked up only
// while a tracer is attached.
template <typename S, size_t N>
inline void change_state(S *state, S next, const StateTable<S, N> &t, const void *obj = nullptr)
{
	ULP_CHECK(t.legal(*state, next), "{}: illegal state change {} -> {}", t.machine,
	          t.name(*state), t.name(next));
	if (ULP_TRACE_ENABLED(state_change))
		ULP_TRACE(state_change, t.machine, obj ? obj : static_cast<const void *>(state),
		          t.name(*state), t.name(next));
	*state = next;
}

} // namespace ulp
