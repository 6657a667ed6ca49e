// SPDX-License-Identifier: MIT
// tools/ulp-initiator/srp_session.cc - ulp-initiator's SRP transport (see srp_session.h).
#include "tools/ulp-initiator/srp_session.h"

#include "core/addr.h"
#include "providers/soft/soft.h"
#include "tools/common/named_device.h"

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <map>

namespace initiator
{

using namespace ulp;

namespace
{

bool parse_hex64(std::string s, uint64_t *out)
{
	if (s.rfind("0x", 0) == 0 || s.rfind("0X", 0) == 0)
		s = s.substr(2);
	if (s.empty() || s.size() > 16)
		return false;
	uint64_t v = 0;
	for (char c : s) {
		const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
		              : (c >= 'a' && c <= 'f')                    ? c - 'a' + 10
		              : (c >= 'A' && c <= 'F')                    ? c - 'A' + 10
		                                                          : -1;
		if (d < 0)
			return false;
		v = v << 4 | uint64_t(d);
	}
	*out = v;
	return true;
}

// "k=v,k=v": Linux's add_target syntax (ib_srp's srp_parse_options).
bool parse_add_target(const std::string &line, std::map<std::string, std::string> *out,
                      std::string *why)
{
	size_t i = 0;
	while (i < line.size()) {
		size_t j = line.find(',', i);
		if (j == std::string::npos)
			j = line.size();
		const std::string kv = line.substr(i, j - i);
		const size_t eq = kv.find('=');
		if (eq == std::string::npos || eq == 0) {
			*why = "not key=value: " + kv;
			return false;
		}
		(*out)[kv.substr(0, eq)] = kv.substr(eq + 1);
		i = j + 1;
	}
	return true;
}

} // namespace

SrpSession::~SrpSession()
{
	disk_.reset();
	in_.reset(); // its channels and MRs before the device
	if (soft_dev_)
		soft::destroy_device(soft_dev_);
}

bool SrpSession::configure(const SrpArgs &a, const std::string &portal,
                           const std::string &rdma_device, const std::string &src_ip, uint32_t qd,
                           uint32_t bs, double cmd_timeout, std::span<uint8_t> *arena,
                           std::string *why)
{
	std::map<std::string, std::string> kv;
	if (!a.add_target.empty() && !parse_add_target(a.add_target, &kv, why)) {
		*why = "--srp-target: " + *why;
		return false;
	}
	std::string id_ext = a.id_ext.empty() ? kv["id_ext"] : a.id_ext;
	std::string ioc_guid = a.ioc_guid.empty() ? kv["ioc_guid"] : a.ioc_guid;
	// Only one half given: the other is missing, not guessed.
	const bool derive = id_ext.empty() && ioc_guid.empty();
	if (!derive && (id_ext.empty() || ioc_guid.empty())) {
		*why = "SRP needs both halves of the target port id: --srp-id-ext and "
		       "--srp-ioc-guid, or --srp-target with the add_target line ulp-targetd (or "
		       "ib_srpt) logs";
		return false;
	}
	if (!derive &&
	    (!parse_hex64(id_ext, &cfg_.id_ext) || !parse_hex64(ioc_guid, &cfg_.ioc_guid))) {
		*why =
		    "id_ext and ioc_guid are 64-bit hex numbers, not " + id_ext + ", " + ioc_guid;
		return false;
	}
	if (!parse_hex64(a.initiator_ext, &cfg_.initiator_ext)) {
		*why = "--srp-initiator-ext is a 64-bit hex number, not " + a.initiator_ext;
		return false;
	}
	dest_ = portal.empty() ? kv["dest"] : portal;
	if (dest_.empty()) {
		*why = "no target address: --portal HOST:PORT, or dest= in --srp-target";
		return false;
	}
	// SRP has no well-known port: Linux's tests (blktests srp) listen on 5555.
	const size_t colon = dest_.rfind(':');
	const size_t bracket = dest_.rfind(']');
	if (colon == std::string::npos || (bracket != std::string::npos && colon < bracket))
		dest_ += ":5555";
	auto dst = SockAddr::parse(dest_);
	if (!dst) {
		*why = "not an address: " + dest_;
		return false;
	}
	if (a.channels == 0 || a.channels > 64) {
		*why = "--srp-channels must be 1..64";
		return false;
	}
	const std::string host = dest_.substr(0, dest_.rfind(':'));
	Device *local = nullptr; // our device
	std::string local_ip;    // and its address
	if (!rdma_device.empty()) {
		tools::NamedDevice nd;
		if (!tools::open_named_device(rdma_device, &nd, why)) {
			*why = "--rdma-device: " + *why;
			return false;
		}
		cfg_.provider = nd.provider;
		local = nd.dev;
		local_ip = src_ip.empty() ? nd.ip : src_ip;
	} else {
		soft::DeviceConfig sc;
		sc.ip = src_ip.empty() ? host : src_ip;
		soft_dev_ = soft::create_device(sc);
		if (!soft_dev_) {
			const int err = errno;
			*why = "cannot make a soft RDMA device at " + sc.ip + " (" +
			       std::strerror(err) + "); give --src-ip an IPv4 address";
			return false;
		}
		cfg_.provider = &soft::provider();
		local = soft_dev_;
		local_ip = sc.ip;
	}
	if (derive) {
		// ulp-targetd (and ib_srpt) name their target port by the node GUID of the device
		// the portal listens on, in both halves. When that device is ours (the target
		// listens on our own address: one rxe device, or a soft device at the same
		// address, whose GUID follows from the address), we know it; otherwise only the
		// admin does.
		if (host != local_ip || !local || !local->attr().node_guid) {
			*why = "SRP needs the target port id when the target is not on this "
			       "device's address (" +
			       (local_ip.empty() ? std::string("unknown") : local_ip) +
			       "): --srp-target with the add_target line the target logs, or "
			       "--srp-id-ext and --srp-ioc-guid";
			return false;
		}
		cfg_.id_ext = cfg_.ioc_guid = local->attr().node_guid;
		guessed_id_ = true;
	}
	cfg_.src_ip = src_ip;
	cfg_.channels = a.channels;
	cfg_.allow_ext_sg = a.allow_ext_sg;
	// A few beyond the workload's own per channel (its probes); the login's credits cap it.
	cfg_.queue_size = qd + 4;
	cfg_.max_io = std::max<uint32_t>(bs, 1u << 20);
	cfg_.cmd_timeout = std::chrono::milliseconds(int64_t(cmd_timeout * 1000));
	arena_ = dma_alloc(size_t(qd) * bs);
	if (!arena_) {
		*why = std::string("cannot allocate I/O buffers: ") + std::strerror(errno);
		return false;
	}
	*arena = {static_cast<uint8_t *>(arena_->addr()), size_t(qd) * bs};
	cfg_.regions.push_back(*arena);
	return true;
}

bool SrpSession::login(std::string *why)
{
	in_ = std::make_unique<srpt::Initiator>(cfg_);
	if (int rc = in_->login(*SockAddr::parse(dest_), why); rc != 0) {
		if (why->empty())
			*why = std::strerror(-rc);
		if (guessed_id_)
			*why += " (target port id " + where() +
			        " taken from the device's node GUID, ulp-targetd's default: give "
			        "--srp-target if the target names its port otherwise)";
		return false;
	}
	disk_ = std::make_unique<SrpDisk>(*in_);
	channels_ = in_->channels();
	return true;
}

bool SrpSession::logout()
{
	if (!in_ || in_->failed())
		return false;
	in_->logout();
	return true;
}

std::string SrpSession::where() const
{
	char b[96];
	std::snprintf(b, sizeof(b), "%016" PRIx64 ":%016" PRIx64, cfg_.id_ext, cfg_.ioc_guid);
	return std::string(b) + " at " + dest_;
}

std::string SrpSession::stats_text() const
{
	if (!in_)
		return {};
	const srpt::InitiatorStats &s = in_->stats();
	char b[320];
	std::snprintf(b, sizeof(b),
	              "srp: %u channels, %" PRIu64 " commands (%" PRIu64 " immediate, %" PRIu64
	              " direct, %" PRIu64 " indirect, %" PRIu64 " external table), %" PRIu64
	              " bounced, %" PRIu64 " waits for a credit, %" PRIu64 " SRP_CRED_REQs\n",
	              channels_, s.commands, s.immediate, s.direct, s.indirect, s.external,
	              s.bounced, s.zero_req_lim, s.cred_reqs);
	return b;
}

std::string SrpSession::stats_json() const
{
	if (!in_)
		return {};
	const srpt::InitiatorStats &s = in_->stats();
	char b[320];
	std::snprintf(b, sizeof(b),
	              "  \"srp\": {\"channels\": %u, \"commands\": %" PRIu64
	              ", \"immediate\": %" PRIu64 ", \"direct\": %" PRIu64
	              ", \"indirect\": %" PRIu64 ", \"external\": %" PRIu64
	              ", \"bounced\": %" PRIu64 ", \"zero_req_lim\": %" PRIu64
	              ", \"cred_reqs\": %" PRIu64 "},\n",
	              channels_, s.commands, s.immediate, s.direct, s.indirect, s.external,
	              s.bounced, s.zero_req_lim, s.cred_reqs);
	return b;
}

} // namespace initiator
