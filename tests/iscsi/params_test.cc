// SPDX-License-Identifier: MIT
// tests/iscsi/params_test.cc - key negotiation (RFC 7143 6.2 and section 13, RFC 7145 6):
// every result function, list order, declarations, Irrelevant, NotUnderstood, Reject,
// duplicates, sender and stage rules, and the proposer's checks of answers.
#include "iscsi/params.h"

#include <gtest/gtest.h>

#include <string>

using namespace ulp::iscsi;

namespace
{

std::string nul(std::string s)
{
	for (char &c : s)
		if (c == '\n')
			c = '\0';
	return s;
}

// Feeds "K=V\n..." to a negotiator; returns the reply as "K=V\n..." or "ERROR <status>".
struct Feed {
	explicit Feed(Negotiator &n) : neg(n) {}

	Negotiator &neg;
	Stage stage = Stage::Operational;
	SecurityKeys sec;
	std::string text; // keeps the views in sec alive

	std::string operator()(const std::string &in)
	{
		text = nul(in);
		std::vector<KeyValue> kv;
		EXPECT_EQ(
		    parse_text({reinterpret_cast<const uint8_t *>(text.data()), text.size()}, &kv),
		    TextError::None);
		TextWriter reply;
		sec = SecurityKeys{};
		if (!neg.receive(kv, stage, reply, &sec))
			return "ERROR " + std::to_string(static_cast<int>(neg.error().status));
		std::string out(reinterpret_cast<const char *>(reply.bytes().data()), reply.size());
		for (char &c : out)
			if (c == '\0')
				c = '\n';
		return out;
	}
};

OperationalPrefs target_prefs()
{
	OperationalPrefs p;
	p.header_digests = {Digest::Crc32c, Digest::None};
	p.data_digests = {Digest::Crc32c, Digest::None};
	p.max_recv_dsl = 65536;
	p.max_burst_length = 131072;
	p.first_burst_length = 65536;
	p.immediate_data = false;
	p.initial_r2t = false;
	p.max_outstanding_r2t = 4;
	p.max_connections = 8;
	p.default_time2wait = 5;
	p.default_time2retain = 10;
	p.error_recovery_level = 1;
	return p;
}

const std::string kInitiatorError = "ERROR " + std::to_string(0x0200);

} // namespace

TEST(Params, KeyTable)
{
	const KeyDef *d = find_key("MaxBurstLength");
	ASSERT_NE(d, nullptr);
	EXPECT_EQ(d->type, KeyType::NumMin);
	EXPECT_EQ(d->dflt, 262144u);
	EXPECT_EQ(d->min, 512u);
	EXPECT_EQ(d->max, (1u << 24) - 1);
	EXPECT_TRUE(d->leading_only);
	EXPECT_TRUE(d->irrelevant_discovery);
	EXPECT_EQ(find_key("DefaultTime2Wait")->type, KeyType::NumMax);
	EXPECT_EQ(find_key("InitialR2T")->type, KeyType::BoolOr);
	EXPECT_EQ(find_key("ImmediateData")->type, KeyType::BoolAnd);
	EXPECT_EQ(find_key("HeaderDigest")->type, KeyType::List);
	EXPECT_EQ(find_key("MaxRecvDataSegmentLength")->type, KeyType::Declarative);
	EXPECT_FALSE(find_key("MaxRecvDataSegmentLength")->session_wide);
	EXPECT_EQ(find_key("RDMAExtensions")->dflt, 0u);
	EXPECT_TRUE(find_key("TargetRecvDataSegmentLength")->needs_rdma);
	EXPECT_EQ(find_key("SRP_U"), nullptr);
	EXPECT_EQ(find_key("maxburstlength"), nullptr); // keys are case sensitive (6.1)
	EXPECT_EQ(key_def(KeyId::ErrorRecoveryLevel).name, "ErrorRecoveryLevel");
}

TEST(Params, ResultFunctions)
{
	Negotiator n(Role::Target, Transport::Tcp, target_prefs());
	Feed f(n);
	// Minimum, Maximum, AND, OR (the keys' result functions in section 13), each against the
	// target's own value.
	EXPECT_EQ(f("MaxBurstLength=262144\nFirstBurstLength=262144\nMaxOutstandingR2T=1\n"
	            "DefaultTime2Wait=2\nDefaultTime2Retain=20\nImmediateData=Yes\nInitialR2T=No\n"
	            "DataPDUInOrder=No\nDataSequenceInOrder=Yes\nErrorRecoveryLevel=2\n"
	            "MaxConnections=1\n"),
	          "MaxBurstLength=131072\nFirstBurstLength=65536\nMaxOutstandingR2T=1\n"
	          "DefaultTime2Wait=5\nDefaultTime2Retain=10\nImmediateData=No\nInitialR2T=No\n"
	          "DataPDUInOrder=Yes\nDataSequenceInOrder=Yes\nErrorRecoveryLevel=1\n"
	          "MaxConnections=1\n");
	SessionParams s;
	ConnParams c;
	ASSERT_TRUE(n.finish(&s, &c));
	EXPECT_EQ(s.max_burst_length, 131072u);
	EXPECT_EQ(s.first_burst_length, 65536u);
	EXPECT_EQ(s.max_outstanding_r2t, 1);
	EXPECT_EQ(s.default_time2wait, 5);
	EXPECT_EQ(s.default_time2retain, 10);
	EXPECT_FALSE(s.immediate_data);
	EXPECT_FALSE(s.initial_r2t);
	EXPECT_TRUE(s.data_pdu_in_order);
	EXPECT_EQ(s.error_recovery_level, 1);
	EXPECT_EQ(s.max_connections, 1);
}

TEST(Params, ListTakesProposerOrder)
{
	Negotiator n(Role::Target, Transport::Tcp, target_prefs());
	Feed f(n);
	// 6.2.1: the first value in the proposer's list the acceptor supports.
	EXPECT_EQ(f("HeaderDigest=None,CRC32C\nDataDigest=FOO,CRC32C,None\n"),
	          "HeaderDigest=None\nDataDigest=CRC32C\n");
	SessionParams s;
	ConnParams c;
	ASSERT_TRUE(n.finish(&s, &c));
	EXPECT_EQ(c.header_digest, Digest::None);
	EXPECT_EQ(c.data_digest, Digest::Crc32c);

	OperationalPrefs none_only;
	Negotiator m(Role::Target, Transport::Tcp, none_only);
	Feed g(m);
	// Nothing acceptable: Reject, and the default (None) stays.
	EXPECT_EQ(g("HeaderDigest=CRC32C\nDataDigest=CRC32C,\n"),
	          "HeaderDigest=Reject\nDataDigest=Reject\n");
}

TEST(Params, DeclarationsAreNotAnswered)
{
	Negotiator n(Role::Target, Transport::Tcp, target_prefs());
	Feed f(n);
	EXPECT_EQ(f("MaxRecvDataSegmentLength=262144\nInitiatorAlias=host a\n"
	            "X#NodeArchitecture=ExampleOS/v1,Ex_SW/1.05a\n"),
	          "");
	EXPECT_EQ(n.value(KeyId::MaxRecvDataSegmentLength), 262144u);
	EXPECT_EQ(n.peer_string(KeyId::InitiatorAlias), "host a");
	TextWriter w;
	n.declare_mrdsl(w);
	n.declare_mrdsl(w); // once only
	EXPECT_EQ(std::string(reinterpret_cast<const char *>(w.bytes().data()), w.size()),
	          std::string("MaxRecvDataSegmentLength=65536\0", 31));
	SessionParams s;
	ConnParams c;
	ASSERT_TRUE(n.finish(&s, &c));
	EXPECT_EQ(c.initiator_recv_dsl, 262144u); // what the target may send
	EXPECT_EQ(c.target_recv_dsl, 65536u);     // what the initiator may send

	// A declaration out of its domain cannot be Rejected: the login fails.
	Negotiator m(Role::Target, Transport::Tcp, target_prefs());
	Feed g(m);
	EXPECT_EQ(g("MaxRecvDataSegmentLength=511\n"), kInitiatorError);
	Negotiator k(Role::Target, Transport::Tcp, target_prefs());
	Feed h(k);
	h.stage = Stage::Security;
	EXPECT_EQ(h("InitiatorName=not-a-name\n"), kInitiatorError);
	Negotiator q(Role::Target, Transport::Tcp, target_prefs());
	Feed i(q);
	i.stage = Stage::Security;
	EXPECT_EQ(i("SessionType=Other\n"), "ERROR " + std::to_string(0x0209));
}

TEST(Params, Irrelevant)
{
	// Discovery sessions (section 13's "Irrelevant when: SessionType=Discovery").
	Negotiator d(Role::Target, Transport::Tcp, target_prefs());
	Feed f(d);
	EXPECT_EQ(f("SessionType=Discovery\nMaxConnections=1\nInitialR2T=Yes\nImmediateData=No\n"
	            "MaxBurstLength=512\nFirstBurstLength=512\nMaxOutstandingR2T=1\n"
	            "DataPDUInOrder=Yes\nDataSequenceInOrder=Yes\nErrorRecoveryLevel=2\n"
	            "DefaultTime2Wait=2\n"),
	          "MaxConnections=Irrelevant\nInitialR2T=Irrelevant\nImmediateData=Irrelevant\n"
	          "MaxBurstLength=Irrelevant\nFirstBurstLength=Irrelevant\n"
	          "MaxOutstandingR2T=Irrelevant\nDataPDUInOrder=Irrelevant\n"
	          "DataSequenceInOrder=Irrelevant\nErrorRecoveryLevel=0\nDefaultTime2Wait=5\n");

	// Leading-only keys on a non-leading connection.
	Negotiator nl(Role::Target, Transport::Tcp, target_prefs());
	nl.set_leading(false);
	Feed g(nl);
	EXPECT_EQ(g("MaxBurstLength=512\nHeaderDigest=None\n"),
	          "MaxBurstLength=Irrelevant\nHeaderDigest=None\n");

	// iSER keys without RDMAExtensions=Yes (RFC 7145 6).
	Negotiator t(Role::Target, Transport::Tcp, target_prefs());
	Feed h(t);
	EXPECT_EQ(h("TargetRecvDataSegmentLength=8192\nRDMAExtensions=Yes\n"),
	          "TargetRecvDataSegmentLength=Irrelevant\nRDMAExtensions=No\n");

	// 13.14: FirstBurstLength with InitialR2T=Yes and ImmediateData=No, whatever the order.
	OperationalPrefs p = target_prefs();
	p.initial_r2t = true;
	Negotiator b(Role::Target, Transport::Tcp, p);
	Feed i(b);
	EXPECT_EQ(i("FirstBurstLength=4096\nInitialR2T=Yes\nImmediateData=No\n"),
	          "FirstBurstLength=Irrelevant\nInitialR2T=Yes\nImmediateData=No\n");
}

TEST(Params, NotUnderstoodAndReject)
{
	Negotiator n(Role::Target, Transport::Tcp, target_prefs());
	Feed f(n);
	EXPECT_EQ(f("X-com.example.Feature=1\nX#Unregistered=2\nFooBar=3\nSRP_U=x\n"),
	          "X-com.example.Feature=NotUnderstood\nX#Unregistered=NotUnderstood\n"
	          "FooBar=NotUnderstood\nSRP_U=NotUnderstood\n");
	// Values outside the key's domain (6.2): Reject, the default stays.
	EXPECT_EQ(f("MaxBurstLength=511\nImmediateData=Maybe\nMaxOutstandingR2T=0\n"
	            "DefaultTime2Wait=3601\nErrorRecoveryLevel=3\nMaxConnections=0x10000\n"
	            "FirstBurstLength=abc\nInitialR2T=\n"),
	          "MaxBurstLength=Reject\nImmediateData=Reject\nMaxOutstandingR2T=Reject\n"
	          "DefaultTime2Wait=Reject\nErrorRecoveryLevel=Reject\nMaxConnections=Reject\n"
	          "FirstBurstLength=Reject\nInitialR2T=Reject\n");
	SessionParams s;
	ConnParams c;
	ASSERT_TRUE(n.finish(&s, &c));
	EXPECT_EQ(s.max_burst_length, 262144u);
	EXPECT_TRUE(s.immediate_data);
	// Obsolete marker keys (13.26): markers answered No, intervals Reject.
	Negotiator m(Role::Target, Transport::Tcp, target_prefs());
	Feed g(m);
	EXPECT_EQ(g("IFMarker=No\nOFMarker=Yes\nOFMarkInt=2048~8192\nIFMarkInt=1~65535\n"),
	          "IFMarker=No\nOFMarker=No\nOFMarkInt=Reject\nIFMarkInt=Reject\n");
}

TEST(Params, ProtocolErrors)
{
	auto run = [](Stage stage, const std::string &text) {
		Negotiator n(Role::Target, Transport::Tcp, target_prefs());
		Feed f(n);
		f.stage = stage;
		return f(text);
	};
	// 6.2: a key sent twice in one login.
	EXPECT_EQ(run(Stage::Operational, "MaxBurstLength=512\nMaxBurstLength=1024\n"),
	          kInitiatorError);
	// Keys only the target sends.
	EXPECT_EQ(run(Stage::Operational, "TargetPortalGroupTag=1\n"), kInitiatorError);
	EXPECT_EQ(run(Stage::Security, "TargetAlias=x\n"), kInitiatorError);
	// Stage rules: operational keys in the security stage, security keys after it, FFP
	// commands during login.
	EXPECT_EQ(run(Stage::Security, "HeaderDigest=None\n"), kInitiatorError);
	EXPECT_EQ(run(Stage::Operational, "AuthMethod=None\n"), kInitiatorError);
	EXPECT_EQ(run(Stage::Operational, "CHAP_A=5\n"), kInitiatorError);
	EXPECT_EQ(run(Stage::Operational, "SendTargets=All\n"), kInitiatorError);
	// The reserved constants only answer.
	EXPECT_EQ(run(Stage::Operational, "MaxBurstLength=Reject\n"), kInitiatorError);
	EXPECT_EQ(run(Stage::Operational, "HeaderDigest=NotUnderstood\n"), kInitiatorError);
	// Declaratives are fine in both stages; security keys are handed back.
	Negotiator n(Role::Target, Transport::Tcp, target_prefs());
	Feed f(n);
	f.stage = Stage::Security;
	EXPECT_EQ(f("InitiatorName=iqn.2024-01.com.example:i\nAuthMethod=CHAP,None\nCHAP_A=5\n"),
	          "");
	ASSERT_TRUE(f.sec.auth_method);
	EXPECT_EQ(*f.sec.auth_method, "CHAP,None");
	EXPECT_EQ(*f.sec.chap_a, "5");
	// ... and may not repeat either.
	EXPECT_EQ(f("AuthMethod=None\n"), kInitiatorError);
}

TEST(Params, FirstBurstNeverAboveMaxBurst)
{
	OperationalPrefs p = target_prefs();
	p.max_burst_length = 1 << 20;
	p.first_burst_length = 1 << 20;
	Negotiator n(Role::Target, Transport::Tcp, p);
	Feed f(n);
	// FirstBurstLength comes first but is bounded by the MaxBurstLength of the same LTDS.
	EXPECT_EQ(f("FirstBurstLength=262144\nMaxBurstLength=16384\n"),
	          "FirstBurstLength=16384\nMaxBurstLength=16384\n");
}

TEST(Params, IserKeys)
{
	OperationalPrefs p = target_prefs();
	p.iser_recv_dsl = 65536; // the target's receive buffers
	p.iser_send_dsl = 131072;
	p.max_outstanding_unexpected_pdus = 0;
	Negotiator n(Role::Target, Transport::Iser, p);
	Feed f(n);
	// open-iscsi's order: the lengths before RDMAExtensions. Digests forced to None on iSER.
	EXPECT_EQ(f("HeaderDigest=CRC32C,None\nDataDigest=CRC32C\n"
	            "InitiatorRecvDataSegmentLength=262144\nTargetRecvDataSegmentLength=262144\n"
	            "MaxOutstandingUnexpectedPDUs=16\nRDMAExtensions=Yes\n"),
	          "HeaderDigest=None\nDataDigest=Reject\nInitiatorRecvDataSegmentLength=131072\n"
	          "TargetRecvDataSegmentLength=65536\nMaxOutstandingUnexpectedPDUs=16\n"
	          "RDMAExtensions=Yes\n");
	SessionParams s;
	ConnParams c;
	ASSERT_TRUE(n.finish(&s, &c));
	EXPECT_TRUE(s.rdma_extensions);
	EXPECT_EQ(s.max_outstanding_unexpected_pdus, 16u);
	EXPECT_EQ(c.initiator_recv_dsl, 131072u);
	EXPECT_EQ(c.target_recv_dsl, 65536u);
	EXPECT_EQ(c.header_digest, Digest::None);
	EXPECT_EQ(c.data_digest, Digest::None);

	// MaxOutstandingUnexpectedPDUs: 0 means no limit, 1 is out of range.
	p.max_outstanding_unexpected_pdus = 8;
	Negotiator m(Role::Target, Transport::Iser, p);
	Feed g(m);
	EXPECT_EQ(g("RDMAExtensions=Yes\nMaxOutstandingUnexpectedPDUs=0\n"),
	          "RDMAExtensions=Yes\nMaxOutstandingUnexpectedPDUs=8\n");
	Negotiator k(Role::Target, Transport::Iser, p);
	Feed h(k);
	EXPECT_EQ(h("RDMAExtensions=Yes\nMaxOutstandingUnexpectedPDUs=1\n"),
	          "RDMAExtensions=Yes\nMaxOutstandingUnexpectedPDUs=Reject\n");
	// RDMAExtensions=No from the initiator on an iSER target: AND gives No.
	Negotiator q(Role::Target, Transport::Iser, p);
	Feed i(q);
	EXPECT_EQ(i("RDMAExtensions=No\nTargetRecvDataSegmentLength=8192\n"),
	          "RDMAExtensions=No\nTargetRecvDataSegmentLength=Irrelevant\n");
}

// The proposer's side: what the initiator accepts as answers.
TEST(Params, ProposerChecksAnswers)
{
	OperationalPrefs p;
	p.header_digests = {Digest::Crc32c, Digest::None};
	p.data_digests = {Digest::None};
	p.immediate_data = false;
	p.max_burst_length = 65536;
	auto fresh = [&](std::string answer) {
		auto n = std::make_unique<Negotiator>(Role::Initiator, Transport::Tcp, p);
		TextWriter w;
		n->propose_operational(w);
		Feed f(*n);
		std::string r = f(answer);
		return std::make_pair(std::move(n), r);
	};
	// Good answers.
	{
		auto [n, r] =
		    fresh("HeaderDigest=CRC32C\nDataDigest=None\nMaxBurstLength=8192\n"
		          "ImmediateData=No\nDefaultTime2Wait=4\nMaxRecvDataSegmentLength=4096\n");
		EXPECT_EQ(r, "");
		SessionParams s;
		ConnParams c;
		// Unanswered keys: only AND-proposed-No / OR-proposed-Yes may be left out.
		EXPECT_FALSE(n->finish(&s, &c));
	}
	// A minimum answered above the proposal, a list value never offered, a Yes to an AND
	// proposed No, a list for a list, a Maximum answered below the proposal.
	EXPECT_EQ(fresh("MaxBurstLength=131072\n").second, kInitiatorError);
	EXPECT_EQ(fresh("DataDigest=CRC32C\n").second, kInitiatorError);
	EXPECT_EQ(fresh("ImmediateData=Yes\n").second, kInitiatorError);
	EXPECT_EQ(fresh("HeaderDigest=CRC32C,None\n").second, kInitiatorError);
	EXPECT_EQ(fresh("DefaultTime2Wait=1\n").second, kInitiatorError);
	// Reject / Irrelevant / NotUnderstood: the default stays.
	{
		auto [n, r] =
		    fresh("MaxBurstLength=Reject\nHeaderDigest=Irrelevant\n"
		          "DataDigest=None\nImmediateData=No\nInitialR2T=Yes\n"
		          "MaxOutstandingR2T=1\nMaxConnections=1\nDataPDUInOrder=Yes\n"
		          "DataSequenceInOrder=Yes\nFirstBurstLength=65536\n"
		          "DefaultTime2Wait=2\nDefaultTime2Retain=20\nErrorRecoveryLevel=0\n");
		EXPECT_EQ(r, "");
		EXPECT_FALSE(n->awaiting_answers());
		SessionParams s;
		ConnParams c;
		ASSERT_TRUE(n->finish(&s, &c));
		EXPECT_EQ(s.max_burst_length, 262144u);
		EXPECT_EQ(c.header_digest, Digest::None);
		// FirstBurstLength 65536 <= MaxBurstLength default: kept.
		EXPECT_EQ(s.first_burst_length, 65536u);
		// We declared 8192 (default prefs); the target declared nothing.
		EXPECT_EQ(c.initiator_recv_dsl, 8192u);
		EXPECT_EQ(c.target_recv_dsl, 8192u);
	}
}

// tgt 1.0.85 answers MaxOutstandingUnexpectedPDUs=0 to whatever the initiator proposes;
// 0 (no limit) is accepted, a number above the proposal is still a violation, and 1 is
// still out of range (found by tests/vm/iser_lio.sh: every iSER login to tgtd failed).
TEST(Params, IserUnexpectedPdusAnsweredZero)
{
	OperationalPrefs p;
	p.max_outstanding_unexpected_pdus = 32;
	auto fresh = [&](const std::string &answer) {
		auto n = std::make_unique<Negotiator>(Role::Initiator, Transport::Iser, p);
		TextWriter w;
		n->propose_operational(w);
		Feed f(*n);
		std::string r = f(answer);
		return std::make_pair(std::move(n), r);
	};
	{
		auto [n, r] = fresh("RDMAExtensions=Yes\nMaxOutstandingUnexpectedPDUs=0\n");
		EXPECT_EQ(r, "");
		EXPECT_EQ(n->value(KeyId::MaxOutstandingUnexpectedPdus), 0u);
	}
	EXPECT_EQ(fresh("RDMAExtensions=Yes\nMaxOutstandingUnexpectedPDUs=16\n").second, "");
	EXPECT_EQ(fresh("RDMAExtensions=Yes\nMaxOutstandingUnexpectedPDUs=64\n").second,
	          kInitiatorError);
	EXPECT_EQ(fresh("RDMAExtensions=Yes\nMaxOutstandingUnexpectedPDUs=1\n").second,
	          kInitiatorError);
}

// The acceptor side in the initiator's role: a target that proposes keys gets answers.
TEST(Params, InitiatorAnswersTargetProposals)
{
	OperationalPrefs p;
	p.max_burst_length = 65536;
	Negotiator n(Role::Initiator, Transport::Tcp, p);
	Feed f(n);
	EXPECT_EQ(f("MaxBurstLength=262144\nTargetAlias=disk\nTargetPortalGroupTag=7\n"),
	          "MaxBurstLength=65536\n");
	EXPECT_EQ(n.peer_string(KeyId::TargetAlias), "disk");
	EXPECT_EQ(n.value(KeyId::TargetPortalGroupTag), 7u);
	// The initiator is not the target: InitiatorName from the target is an error.
	EXPECT_EQ(f("InitiatorName=iqn.2024-01.com.example:x\n"), kInitiatorError);
}
