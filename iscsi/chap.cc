// SPDX-License-Identifier: MIT
// iscsi/chap.cc - CHAP (RFC 7143 12.1.3) on OpenSSL's digests and random generator.
#include "iscsi/chap.h"

#include "core/check.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <memory>

namespace ulp::iscsi
{

namespace
{

const char *openssl_name(ChapAlg alg)
{
	switch (alg) {
	case ChapAlg::Md5:
		return "MD5";
	case ChapAlg::Sha1:
		return "SHA1";
	case ChapAlg::Sha256:
		return "SHA256";
	case ChapAlg::Sha3_256:
		return "SHA3-256";
	}
	return "";
}

struct MdDeleter {
	void operator()(EVP_MD *md) const { EVP_MD_free(md); }
};
struct CtxDeleter {
	void operator()(EVP_MD_CTX *c) const { EVP_MD_CTX_free(c); }
};

std::unique_ptr<EVP_MD, MdDeleter> fetch(ChapAlg alg)
{
	return std::unique_ptr<EVP_MD, MdDeleter>(
	    EVP_MD_fetch(nullptr, openssl_name(alg), nullptr));
}

void wipe(std::vector<uint8_t> &v)
{
	if (!v.empty())
		OPENSSL_cleanse(v.data(), v.size());
	v.clear();
}

// CHAP_I: a numerical value 0..255.
bool parse_id(std::string_view v, uint8_t *id)
{
	uint64_t n;
	if (!parse_number(v, &n) || n > 255)
		return false;
	*id = static_cast<uint8_t>(n);
	return true;
}

// A fresh identifier and challenge: random, and as long as the digest (at least 16 bytes).
bool new_challenge(ChapAlg alg, uint8_t *id, std::vector<uint8_t> *c)
{
	c->assign(std::max(kMinChallengeLen, chap_digest_len(alg)), 0);
	return chap_random({id, 1}) && chap_random(*c);
}

} // namespace

std::vector<ChapAlg> default_chap_algorithms()
{
	return {ChapAlg::Sha3_256, ChapAlg::Sha256, ChapAlg::Sha1, ChapAlg::Md5};
}

size_t chap_digest_len(ChapAlg alg)
{
	switch (alg) {
	case ChapAlg::Md5:
		return 16;
	case ChapAlg::Sha1:
		return 20;
	case ChapAlg::Sha256:
	case ChapAlg::Sha3_256:
		return 32;
	}
	return 0;
}

bool chap_alg_available(ChapAlg alg)
{
	return fetch(alg) != nullptr;
}

std::optional<ChapAlg> chap_alg_from_number(uint64_t n)
{
	switch (n) {
	case 5:
	case 6:
	case 7:
	case 8:
		return static_cast<ChapAlg>(n);
	default:
		return std::nullopt;
	}
}

bool chap_response(ChapAlg alg, uint8_t id, std::string_view secret,
                   std::span<const uint8_t> challenge, std::span<uint8_t> out)
{
	const size_t len = chap_digest_len(alg);
	if (out.size() < len)
		return false;
	auto md = fetch(alg);
	std::unique_ptr<EVP_MD_CTX, CtxDeleter> ctx(EVP_MD_CTX_new());
	if (!md || !ctx)
		return false;
	unsigned int n = 0;
	return EVP_DigestInit_ex(ctx.get(), md.get(), nullptr) == 1 &&
	       EVP_DigestUpdate(ctx.get(), &id, 1) == 1 &&
	       EVP_DigestUpdate(ctx.get(), secret.data(), secret.size()) == 1 &&
	       EVP_DigestUpdate(ctx.get(), challenge.data(), challenge.size()) == 1 &&
	       EVP_DigestFinal_ex(ctx.get(), out.data(), &n) == 1 && n == len;
}

bool chap_random(std::span<uint8_t> out)
{
	return out.empty() || RAND_bytes(out.data(), static_cast<int>(out.size())) == 1;
}

bool chap_equal(std::span<const uint8_t> a, std::span<const uint8_t> b)
{
	return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string chap_alg_list(std::span<const ChapAlg> algs)
{
	std::string s;
	for (ChapAlg a : algs) {
		if (!s.empty())
			s += ',';
		s += std::to_string(static_cast<int>(a));
	}
	return s;
}

// ---------------------------------------------------------------------------------------------
// Target

const char *chap_target_state_str(ChapTarget::State s)
{
	switch (s) {
	case ChapTarget::State::WaitAlgorithms:
		return "WaitAlgorithms";
	case ChapTarget::State::WaitResponse:
		return "WaitResponse";
	case ChapTarget::State::Done:
		return "Done";
	}
	return "?";
}

const char *chap_initiator_state_str(ChapInitiator::State s)
{
	switch (s) {
	case ChapInitiator::State::Start:
		return "Start";
	case ChapInitiator::State::WaitChallenge:
		return "WaitChallenge";
	case ChapInitiator::State::WaitTarget:
		return "WaitTarget";
	case ChapInitiator::State::Done:
		return "Done";
	}
	return "?";
}

namespace
{

// The exchanges drawn in chap.h; a failure leaves the state where it is (the login ends).
// change_state checks every step against them.
constexpr StateTable<ChapTarget::State, 3> kTargetStates = {
    "CHAP target",
    chap_target_state_str,
    {
        /* WaitAlgorithms */ to(ChapTarget::State::WaitResponse),
        /* WaitResponse */ to(ChapTarget::State::Done),
        /* Done */ 0,
    }};

constexpr StateTable<ChapInitiator::State, 4> kInitiatorStates = {
    "CHAP initiator",
    chap_initiator_state_str,
    {
        /* Start */ to(ChapInitiator::State::WaitChallenge),
        /* WaitChallenge */ to(ChapInitiator::State::WaitTarget, ChapInitiator::State::Done),
        /* WaitTarget */ to(ChapInitiator::State::Done),
        /* Done */ 0,
    }};

} // namespace

ChapTarget::ChapTarget(const ChapPolicy &policy, ChapCredentials cred)
    : policy_(policy), cred_(std::move(cred))
{
}

ChapTarget::~ChapTarget()
{
	wipe(challenge_);
	OPENSSL_cleanse(cred_.incoming.secret.data(), cred_.incoming.secret.size());
	if (cred_.outgoing)
		OPENSSL_cleanse(cred_.outgoing->secret.data(), cred_.outgoing->secret.size());
}

ChapStatus ChapTarget::fail(ChapStatus s, std::string why)
{
	why_ = std::move(why);
	return s;
}

ChapStatus ChapTarget::step(const ChapKeys &in, TextWriter &out)
{
	switch (state_) {
	case State::WaitAlgorithms: {
		if (!in.a)
			return fail(ChapStatus::Protocol, "CHAP_A expected");
		if (in.i || in.c || in.n || in.r)
			return fail(ChapStatus::Protocol, "CHAP keys out of order");
		std::vector<std::string_view> items;
		if (!split_list(*in.a, &items))
			return fail(ChapStatus::Protocol, "malformed CHAP_A");
		// The first of the initiator's algorithms (its order of preference) that we accept.
		for (std::string_view item : items) {
			uint64_t n;
			if (!parse_number(item, &n))
				continue;
			auto alg = chap_alg_from_number(n);
			if (!alg ||
			    std::find(policy_.algorithms.begin(), policy_.algorithms.end(), *alg) ==
			        policy_.algorithms.end() ||
			    !chap_alg_available(*alg))
				continue;
			alg_ = *alg;
			if (!new_challenge(alg_, &id_, &challenge_))
				return fail(ChapStatus::Failed, "no random bytes");
			out.add_num("CHAP_A", static_cast<uint64_t>(alg_));
			out.add_num("CHAP_I", id_);
			out.add("CHAP_C", encode_hex(challenge_));
			change_state(&state_, State::WaitResponse, kTargetStates, this);
			return ChapStatus::Continue;
		}
		// 12.1.3: the target cannot accept any of the proposed algorithms.
		return fail(ChapStatus::Failed, "no acceptable CHAP_A in " + std::string(*in.a));
	}
	case State::WaitResponse: {
		if (in.a)
			return fail(ChapStatus::Protocol, "CHAP_A repeated");
		if (!in.n || !in.r)
			return fail(ChapStatus::Failed, "CHAP_N and CHAP_R expected");
		if (in.n->size() > kMaxSimpleValueLen)
			return fail(ChapStatus::Failed, "CHAP_N too long");
		std::vector<uint8_t> r;
		if (!parse_binary(*in.r, kMaxBinaryLen, &r))
			return fail(ChapStatus::Failed, "malformed CHAP_R");
		// The name is not secret; the response is compared in constant time.
		bool ok = *in.n == cred_.incoming.user;
		uint8_t want[kMaxChapDigest];
		const size_t len = chap_digest_len(alg_);
		if (!chap_response(alg_, id_, cred_.incoming.secret, challenge_, {want, len}))
			return fail(ChapStatus::Failed, "digest unavailable");
		ok = chap_equal(r, {want, len}) && ok;
		OPENSSL_cleanse(want, sizeof(want));
		if (!ok)
			return fail(ChapStatus::Failed, "wrong CHAP_N or CHAP_R");

		if (!in.i && !in.c) {
			if (cred_.require_mutual)
				return fail(ChapStatus::Failed, "mutual CHAP required");
			wipe(challenge_);
			change_state(&state_, State::Done, kTargetStates, this);
			return ChapStatus::Done;
		}
		// The initiator asks the target to authenticate itself.
		if (!in.i || !in.c)
			return fail(ChapStatus::Failed, "CHAP_I and CHAP_C go together");
		if (!cred_.outgoing)
			return fail(ChapStatus::Failed, "mutual CHAP asked but not configured");
		if (cred_.outgoing->secret.size() < policy_.min_secret_len)
			return fail(ChapStatus::Failed, "mutual CHAP secret shorter than 96 bits");
		uint8_t peer_id;
		std::vector<uint8_t> peer_c;
		if (!parse_id(*in.i, &peer_id) || !parse_binary(*in.c, kMaxBinaryLen, &peer_c) ||
		    peer_c.empty())
			return fail(ChapStatus::Failed, "malformed CHAP_I or CHAP_C");
		// 9.2.1: a challenge reflected back at us must fail.
		if (chap_equal(peer_c, challenge_))
			return fail(ChapStatus::Failed,
			            "initiator reflected the target's challenge");
		// 9.2.1: the initiator's response equals what our own (mutual) secret gives for our
		// challenge: the same secret in both directions.
		uint8_t own[kMaxChapDigest];
		if (!chap_response(alg_, id_, cred_.outgoing->secret, challenge_, {own, len}))
			return fail(ChapStatus::Failed, "digest unavailable");
		const bool same = chap_equal(r, {own, len});
		OPENSSL_cleanse(own, sizeof(own));
		if (same)
			return fail(ChapStatus::Failed, "same CHAP secret in both directions");
		uint8_t rsp[kMaxChapDigest];
		if (!chap_response(alg_, peer_id, cred_.outgoing->secret, peer_c, {rsp, len}))
			return fail(ChapStatus::Failed, "digest unavailable");
		out.add("CHAP_N", cred_.outgoing->user);
		out.add("CHAP_R", encode_hex({rsp, len}));
		OPENSSL_cleanse(rsp, sizeof(rsp));
		wipe(challenge_);
		mutual_ = true;
		change_state(&state_, State::Done, kTargetStates, this);
		return ChapStatus::Done;
	}
	case State::Done:
		break;
	}
	return fail(ChapStatus::Protocol, "CHAP keys after authentication");
}

// ---------------------------------------------------------------------------------------------
// Initiator

ChapInitiator::ChapInitiator(const ChapPolicy &policy, ChapSecret own,
                             std::optional<ChapSecret> target)
    : policy_(policy), own_(std::move(own)), target_(std::move(target))
{
}

ChapInitiator::~ChapInitiator()
{
	wipe(challenge_);
	wipe(peer_challenge_);
	OPENSSL_cleanse(own_.secret.data(), own_.secret.size());
	if (target_)
		OPENSSL_cleanse(target_->secret.data(), target_->secret.size());
}

ChapStatus ChapInitiator::fail(ChapStatus s, std::string why)
{
	why_ = std::move(why);
	return s;
}

void ChapInitiator::start(TextWriter &out)
{
	std::vector<ChapAlg> algs;
	for (ChapAlg a : policy_.algorithms)
		if (chap_alg_available(a))
			algs.push_back(a);
	out.add("CHAP_A", chap_alg_list(algs));
	change_state(&state_, State::WaitChallenge, kInitiatorStates, this);
}

ChapStatus ChapInitiator::step(const ChapKeys &in, TextWriter &out)
{
	switch (state_) {
	case State::Start:
		break;
	case State::WaitChallenge: {
		if (!in.a || !in.i || !in.c)
			return fail(ChapStatus::Protocol, "CHAP_A, CHAP_I and CHAP_C expected");
		uint64_t a;
		std::optional<ChapAlg> alg;
		if (!parse_number(*in.a, &a) || !(alg = chap_alg_from_number(a)) ||
		    std::find(policy_.algorithms.begin(), policy_.algorithms.end(), *alg) ==
		        policy_.algorithms.end())
			return fail(ChapStatus::Failed,
			            "target chose CHAP_A=" + std::string(*in.a) +
			                ", which was not offered");
		alg_ = *alg;
		if (!parse_id(*in.i, &peer_id_) ||
		    !parse_binary(*in.c, kMaxBinaryLen, &peer_challenge_) ||
		    peer_challenge_.empty())
			return fail(ChapStatus::Protocol, "malformed CHAP_I or CHAP_C");
		if (own_.secret.size() < policy_.min_secret_len)
			return fail(ChapStatus::Failed, "CHAP secret shorter than 96 bits");
		const size_t len = chap_digest_len(alg_);
		uint8_t rsp[kMaxChapDigest];
		if (!chap_response(alg_, peer_id_, own_.secret, peer_challenge_, {rsp, len}))
			return fail(ChapStatus::Failed, "digest unavailable");
		out.add("CHAP_N", own_.user);
		out.add("CHAP_R", encode_hex({rsp, len}));
		OPENSSL_cleanse(rsp, sizeof(rsp));
		if (!target_) {
			change_state(&state_, State::Done, kInitiatorStates, this);
			return ChapStatus::Done;
		}
		// Mutual: our own challenge, never the target's (9.2.1).
		do {
			if (!new_challenge(alg_, &id_, &challenge_))
				return fail(ChapStatus::Failed, "no random bytes");
		} while (chap_equal(challenge_, peer_challenge_));
		out.add_num("CHAP_I", id_);
		out.add("CHAP_C", encode_hex(challenge_));
		change_state(&state_, State::WaitTarget, kInitiatorStates, this);
		return ChapStatus::Continue;
	}
	case State::WaitTarget: {
		if (!in.n || !in.r)
			return fail(ChapStatus::Failed,
			            "target sent no CHAP_N/CHAP_R for mutual CHAP");
		std::vector<uint8_t> r;
		if (!parse_binary(*in.r, kMaxBinaryLen, &r))
			return fail(ChapStatus::Failed, "malformed CHAP_R from target");
		const size_t len = chap_digest_len(alg_);
		uint8_t want[kMaxChapDigest], own[kMaxChapDigest];
		if (!chap_response(alg_, id_, target_->secret, challenge_, {want, len}) ||
		    !chap_response(alg_, id_, own_.secret, challenge_, {own, len}))
			return fail(ChapStatus::Failed, "digest unavailable");
		bool ok = *in.n == target_->user;
		ok = chap_equal(r, {want, len}) && ok;
		// 9.2.1: a target answering with our own secret fails too.
		const bool same = chap_equal(r, {own, len});
		OPENSSL_cleanse(want, sizeof(want));
		OPENSSL_cleanse(own, sizeof(own));
		if (same)
			return fail(ChapStatus::Failed, "same CHAP secret in both directions");
		if (!ok)
			return fail(ChapStatus::Failed, "target failed mutual CHAP");
		wipe(challenge_);
		change_state(&state_, State::Done, kInitiatorStates, this);
		return ChapStatus::Done;
	}
	case State::Done:
		break;
	}
	return fail(ChapStatus::Protocol, "unexpected CHAP keys");
}

} // namespace ulp::iscsi
