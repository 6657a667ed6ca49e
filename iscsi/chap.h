// SPDX-License-Identifier: MIT
// iscsi/chap.h - CHAP authentication for iSCSI login (RFC 7143 12.1.3, RFC 1994).
//
// The exchange (12.1.3), in the security stage after AuthMethod=CHAP:
//	I->T  CHAP_A=<A1,A2,...>                 algorithms, in order of preference
//	T->I  CHAP_A=<A> CHAP_I=<I> CHAP_C=<C>   the chosen one, an identifier, a challenge
//	I->T  CHAP_N=<N> CHAP_R=<R> [CHAP_I=<I> CHAP_C=<C>]   name, response; the second pair
//	                                         asks the target to authenticate itself
//	T->I  [CHAP_N=<N> CHAP_R=<R>]            the target's response (mutual CHAP)
// The response is H(I || secret || C) (RFC 1994 4.1). Algorithms: 5 MD5 (the one every
// implementation must offer), and 6 SHA1, 7 SHA-256, 8 SHA3-256 (IANA "PPP Authentication
// Algorithms", as offered by open-iscsi and accepted by LIO since Linux 5.9). Hashes and
// random bytes come from OpenSSL.
//
// Rules applied:
//  - C and R are binary values at most 1024 bytes long, in hex or base64 (12.1.3); N is a
//    text value; A and I are numbers (I 0..255).
//  - Challenges are random (RAND_bytes) and as long as the algorithm's digest, at least
//    16 bytes; identifiers are random too.
//  - 9.2.1: "Originators MUST NOT reuse the CHAP challenge sent by the Responder for the
//    other direction of a bidirectional authentication. Responders MUST check for this
//    condition": a reflected challenge fails the login.
//  - 9.2.1: a response equal to the one the receiver would itself compute for that
//    challenge means the same secret is used in both directions: authentication failure.
//  - 9.2.1: an implementation SHOULD NOT send a CHAP response with a secret shorter than
//    96 bits (without IPsec): the side about to answer refuses secrets shorter than
//    kMinSecretLen unless told otherwise (ChapPolicy::min_secret_len).
//  - Responses are compared in constant time (CRYPTO_memcmp).
#pragma once

#include "iscsi/text.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ulp::iscsi
{

enum class ChapAlg : uint8_t {
	Md5 = 5,
	Sha1 = 6,
	Sha256 = 7,
	Sha3_256 = 8,
};

constexpr size_t kMaxChapDigest = 32;   // the longest digest (SHA-256, SHA3-256)
constexpr size_t kMinChallengeLen = 16; // our challenges are at least this long
constexpr size_t kMinSecretLen = 12;    // 9.2.1: 96 bits

// Digest length of alg in bytes (16, 20, 32, 32).
size_t chap_digest_len(ChapAlg alg);
// True when OpenSSL provides the hash (MD5 may be missing in a FIPS configuration).
bool chap_alg_available(ChapAlg alg);
// Parse a CHAP_A list element ("5", "7", ...).
std::optional<ChapAlg> chap_alg_from_number(uint64_t n);

// RFC 1994 4.1: H(id || secret || challenge) into out (chap_digest_len(alg) bytes). False
// if the hash is not available or out is too small.
bool chap_response(ChapAlg alg, uint8_t id, std::string_view secret,
                   std::span<const uint8_t> challenge, std::span<uint8_t> out);
// Cryptographically random bytes (OpenSSL RAND_bytes). False if the generator failed.
bool chap_random(std::span<uint8_t> out);
// Equal length and equal bytes, in time independent of the contents.
bool chap_equal(std::span<const uint8_t> a, std::span<const uint8_t> b);

// One secret and the name that goes with it.
struct ChapSecret {
	std::string user;   // CHAP_N
	std::string secret; // shared secret (bytes)
};

// What the target knows to authenticate one initiator (and to answer mutual CHAP).
struct ChapCredentials {
	ChapSecret incoming;                // the initiator must prove this one
	std::optional<ChapSecret> outgoing; // the target proves this one (mutual CHAP)
	bool require_mutual = false;        // fail unless the initiator asks for mutual CHAP
};

// SHA3-256, SHA-256, SHA1, MD5: the strongest first, as open-iscsi orders them.
std::vector<ChapAlg> default_chap_algorithms();

// Algorithm preferences and limits (both sides).
struct ChapPolicy {
	// Offered (initiator) or accepted (target), in order of preference.
	std::vector<ChapAlg> algorithms = default_chap_algorithms();
	size_t min_secret_len = kMinSecretLen; // refuse to send a response with a shorter secret
};

enum class ChapStatus : uint8_t {
	Continue, // answer sent, more to come
	Done,     // authentication complete (both ways when mutual)
	Failed,   // authentication failure (the login fails with 0x0201 / the initiator drops)
	Protocol, // the peer broke the exchange's rules (missing or malformed keys)
};

// The CHAP_* values received in one LTDS (params.h SecurityKeys carries the same).
struct ChapKeys {
	std::optional<std::string_view> a, i, c, n, r;
};

// Target side: authenticates the initiator, and itself when asked.
class ChapTarget
{
public:
	enum class State : uint8_t {
		WaitAlgorithms, // -> WaitResponse (challenge sent) | failed
		WaitResponse,   // -> Done (response verified, mutual answer sent) | failed
		Done,           // authenticated (final): more CHAP keys are a protocol error
	};

	ChapTarget(const ChapPolicy &policy, ChapCredentials cred);
	~ChapTarget();
	ChapTarget(const ChapTarget &) = delete;
	ChapTarget &operator=(const ChapTarget &) = delete;

	// One step with the CHAP keys of one request; answers go to out. why() explains a
	// Failed or Protocol result.
	ChapStatus step(const ChapKeys &in, TextWriter &out);
	State state() const { return state_; }
	bool mutual() const { return mutual_; }
	const std::string &why() const { return why_; }
	// The user name the initiator authenticated as.
	const std::string &user() const { return cred_.incoming.user; }

private:
	ChapStatus fail(ChapStatus s, std::string why);

	ChapPolicy policy_;
	ChapCredentials cred_;
	State state_ = State::WaitAlgorithms;
	ChapAlg alg_ = ChapAlg::Md5;
	uint8_t id_ = 0;                 // our CHAP_I
	std::vector<uint8_t> challenge_; // our CHAP_C
	bool mutual_ = false;
	std::string why_;
};

// Initiator side: proves the initiator's secret, and checks the target's when mutual.
class ChapInitiator
{
public:
	enum class State : uint8_t {
		Start,         // -> WaitChallenge (CHAP_A sent)
		WaitChallenge, // -> WaitTarget (response sent, mutual asked) | Done (one-way)
		WaitTarget,    // -> Done (target's response verified) | failed
		Done,          // authenticated (final): more CHAP keys are a protocol error
	};

	// own: CHAP_N and the secret the initiator proves; target: the secret the target must
	// prove (mutual CHAP) or nullopt.
	ChapInitiator(const ChapPolicy &policy, ChapSecret own, std::optional<ChapSecret> target);
	~ChapInitiator();
	ChapInitiator(const ChapInitiator &) = delete;
	ChapInitiator &operator=(const ChapInitiator &) = delete;

	// CHAP_A with our algorithms.
	void start(TextWriter &out);
	// The target's CHAP_A/I/C (WaitChallenge) or CHAP_N/R (WaitTarget).
	ChapStatus step(const ChapKeys &in, TextWriter &out);
	State state() const { return state_; }
	const std::string &why() const { return why_; }

private:
	ChapStatus fail(ChapStatus s, std::string why);

	ChapPolicy policy_;
	ChapSecret own_;
	std::optional<ChapSecret> target_;
	State state_ = State::Start;
	ChapAlg alg_ = ChapAlg::Md5;
	uint8_t id_ = 0;                      // our CHAP_I (mutual)
	std::vector<uint8_t> challenge_;      // our CHAP_C (mutual)
	std::vector<uint8_t> peer_challenge_; // the target's CHAP_C
	uint8_t peer_id_ = 0;                 // the target's CHAP_I
	std::string why_;
};

const char *chap_target_state_str(ChapTarget::State s);
const char *chap_initiator_state_str(ChapInitiator::State s);

// Helpers for tests and tools: "5,6,7,8"-style CHAP_A lists.
std::string chap_alg_list(std::span<const ChapAlg> algs);

} // namespace ulp::iscsi
