// SPDX-License-Identifier: MIT
// scsi/pr_persist.cc - persist through power loss (SPC-4 5.13.5, the APTPL bit of SPC-4
// 6.17.3 and 6.17.4): the state file of a logical unit whose last valid APTPL bit was one,
// and loading it when the LU is created (the kernel keeps the same in
// /var/target/pr/aptpl_<unit serial>, as text; this is binary and checked).
//
// What persists (SPC-4 5.13.5): every registration with its reservation key, its initiator
// port (the TransportID text: iSCSI name and ISID, SRP port identifier), its relative target
// port identifier and ALL_TG_PT; the persistent reservation's type (scope is always
// LU_SCOPE) and holder. Not the PRgeneration: "regardless of the APTPL bit value" a power on
// sets it to zero (SPC-4 6.16.2). Not the SPC-2 reservation, which never outlasts a reset.
//
// The file (integers big-endian):
//   0   8  magic "ulpPRst\n"
//   8   4  format version (1)
//   12  4  body length N
//   16  N  body:
//            2 + n  the LU's name (length, bytes)
//            8      the LU's NAA identifier (VPD 0x83)
//            1      reservation type (0: none; SPC-4 table 169 otherwise)
//            3      reserved (0)
//            4      holder: index into the registrations (0xffffffff: none; always none
//                   for the all-registrants types, which every registrant holds)
//            4      number of registrations, then each:
//                     8  reservation key
//                     2  relative target port identifier
//                     1  protocol identifier (SPC-4 7.6.2: 4 SRP, 5 iSCSI)
//                     1  flags (bit 0: ALL_TG_PT)
//                     2 + n  initiator port (length, bytes)
//   16+N 4 CRC32C of bytes 0..16+N (core/crc32c.h)
// The file is written whole through PrStore (temp file, fsync, rename, fsync of the
// directory), so a crash leaves the old one or the new one; anything else found there (torn
// by a disk, edited, another LU's, a newer format) is refused, never half loaded.
#include "scsi/pr_internal.h"

#include "core/byteorder.h"
#include "core/crc32c.h"
#include "core/lock_assert.h"
#include "core/log.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>
#include <utility>

namespace ulp::scsi
{

namespace
{

constexpr uint8_t kMagic[8] = {'u', 'l', 'p', 'P', 'R', 's', 't', '\n'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeader = 16;                  // magic, version, body length
constexpr size_t kTrailer = 4;                  // CRC32C
constexpr uint32_t kNoHolder = 0xffffffffu;     // the holder index of "none"
constexpr size_t kMaxFile = 16u << 20;          // refuse to read more (Unreadable)
constexpr size_t kMaxPortLen = 256;             // longer than any iSCSI port name (RFC 7143
                                                // 6.1: 223 bytes, plus ",i,0x" and 12 digits)
constexpr size_t kRegFixed = 8 + 2 + 1 + 1 + 2; // a registration without its port text

void put16(std::vector<uint8_t> &v, uint16_t x)
{
	v.resize(v.size() + 2);
	put_be16(&v[v.size() - 2], x);
}
void put32(std::vector<uint8_t> &v, uint32_t x)
{
	v.resize(v.size() + 4);
	put_be32(&v[v.size() - 4], x);
}
void put64(std::vector<uint8_t> &v, uint64_t x)
{
	v.resize(v.size() + 8);
	put_be64(&v[v.size() - 8], x);
}
void put_str(std::vector<uint8_t> &v, const std::string &s)
{
	put16(v, static_cast<uint16_t>(s.size()));
	v.insert(v.end(), s.begin(), s.end());
}

// Reads the body, bounds-checked: every get fails (and keeps failing) past the end.
struct Reader {
	std::span<const uint8_t> b;
	size_t at = 0;
	bool ok = true;

	bool need(size_t n)
	{
		if (!ok || b.size() - at < n)
			ok = false;
		return ok;
	}
	uint8_t u8() { return need(1) ? b[at++] : 0; }
	uint16_t u16()
	{
		if (!need(2))
			return 0;
		at += 2;
		return get_be16(&b[at - 2]);
	}
	uint32_t u32()
	{
		if (!need(4))
			return 0;
		at += 4;
		return get_be32(&b[at - 4]);
	}
	uint64_t u64()
	{
		if (!need(8))
			return 0;
		at += 8;
		return get_be64(&b[at - 8]);
	}
	std::string str()
	{
		const size_t n = u16();
		if (!need(n))
			return {};
		at += n;
		return std::string(reinterpret_cast<const char *>(&b[at - n]), n);
	}
};

PrLoad fail(PrLoad r, std::string *why, std::string what)
{
	*why = std::move(what);
	return r;
}

} // namespace

const char *pr_load_name(PrLoad r)
{
	switch (r) {
	case PrLoad::Ok:
		return "ok";
	case PrLoad::NoState:
		return "no state";
	case PrLoad::Unreadable:
		return "unreadable";
	case PrLoad::Truncated:
		return "truncated";
	case PrLoad::BadMagic:
		return "not a reservation state file";
	case PrLoad::BadVersion:
		return "unknown format version";
	case PrLoad::BadChecksum:
		return "checksum mismatch";
	case PrLoad::WrongLu:
		return "another logical unit's";
	case PrLoad::Malformed:
		return "malformed";
	}
	return "?";
}

std::vector<uint8_t> pr_image(const LogicalUnit &lu, const PrState &pr)
{
	if (!pr.aptpl)
		return {};
	return pr_image_of(lu.name(), lu.naa(), pr);
}

std::vector<uint8_t> pr_image_of(const std::string &name, uint64_t naa, const PrState &pr)
{
	std::vector<uint8_t> v(kMagic, kMagic + sizeof(kMagic));
	put32(v, kVersion);
	put32(v, 0); // body length, below
	put_str(v, name);
	put64(v, naa);
	v.push_back(static_cast<uint8_t>(pr.type));
	v.insert(v.end(), 3, 0);
	uint32_t holder = kNoHolder;
	if (pr.type != PrType::None && !pr_all_registrants(pr.type))
		for (size_t i = 0; i < pr.regs.size(); i++)
			if (pr.regs[i].id == pr.holder)
				holder = static_cast<uint32_t>(i);
	put32(v, holder);
	put32(v, static_cast<uint32_t>(pr.regs.size()));
	for (const Registration &r : pr.regs) {
		put64(v, r.key);
		put16(v, r.nexus.rtpi);
		v.push_back(static_cast<uint8_t>(r.proto));
		v.push_back(r.all_tg_pt ? 0x01 : 0x00);
		put_str(v, r.nexus.initiator_port);
	}
	put_be32(&v[12], static_cast<uint32_t>(v.size() - kHeader));
	put32(v, crc32c(v));
	return v;
}

PrLoad pr_decode(std::span<const uint8_t> f, const std::string &lu_name, uint64_t naa,
                 PrLoaded *out, std::string *why)
{
	// The header first: what the file claims to be and how long. A torn file (shorter
	// than it says) is told apart from a corrupt one (checksum), and a newer format (whose
	// checksum is right) from both.
	if (f.size() < sizeof(kMagic))
		return fail(PrLoad::Truncated, why, std::to_string(f.size()) + " bytes");
	if (std::memcmp(f.data(), kMagic, sizeof(kMagic)) != 0)
		return fail(PrLoad::BadMagic, why, "no ulp reservation state magic");
	if (f.size() < kHeader + kTrailer)
		return fail(PrLoad::Truncated, why, std::to_string(f.size()) + " bytes");
	const size_t body = get_be32(&f[12]);
	if (f.size() - kHeader - kTrailer < body)
		return fail(PrLoad::Truncated, why,
		            std::to_string(f.size()) + " bytes for a body of " +
		                std::to_string(body));
	if (f.size() - kHeader - kTrailer > body)
		return fail(PrLoad::Malformed, why,
		            std::to_string(f.size() - kHeader - kTrailer - body) +
		                " bytes after the checksum");
	const uint32_t want = get_be32(&f[kHeader + body]);
	const uint32_t got = crc32c(f.first(kHeader + body));
	if (want != got)
		return fail(PrLoad::BadChecksum, why,
		            fmt::format("CRC32C {:08x}, the file says {:08x}", got, want));
	const uint32_t version = get_be32(&f[8]);
	if (version != kVersion)
		return fail(PrLoad::BadVersion, why,
		            "format version " + std::to_string(version) + ", this build reads " +
		                std::to_string(kVersion));

	Reader r{f.subspan(kHeader, body)};
	const std::string name = r.str();
	const uint64_t file_naa = r.u64();
	if (!r.ok)
		return fail(PrLoad::Malformed, why, "body too short for the LU's identity");
	if (name != lu_name || file_naa != naa)
		return fail(
		    PrLoad::WrongLu, why,
		    fmt::format("the file is of LU \"{}\" (NAA {:016x}), not of \"{}\" (NAA "
		                "{:016x})",
		                name, file_naa, lu_name, naa));
	const uint8_t type = r.u8();
	const uint8_t rsvd[3] = {r.u8(), r.u8(), r.u8()};
	const uint32_t holder = r.u32();
	const uint32_t n = r.u32();
	if (!r.ok)
		return fail(PrLoad::Malformed, why, "body too short for the reservation");
	if (rsvd[0] || rsvd[1] || rsvd[2])
		return fail(PrLoad::Malformed, why, "reserved bytes set");
	if (type != 0 && !pr_type_valid(type))
		return fail(PrLoad::Malformed, why, fmt::format("reservation type {:#x}", type));
	// Every registration takes kRegFixed bytes and a port of at least one: a count the body
	// cannot hold is refused before anything is allocated for it.
	if (n > (body - r.at) / (kRegFixed + 1))
		return fail(PrLoad::Malformed, why,
		            std::to_string(n) + " registrations in " + std::to_string(body) +
		                " bytes");
	PrLoaded l;
	l.type = PrType(type);
	l.regs.reserve(n);
	for (uint32_t i = 0; i < n; i++) {
		Registration g;
		g.id = i + 1;
		g.key = r.u64();
		g.nexus.rtpi = r.u16();
		const uint8_t proto = r.u8();
		const uint8_t flags = r.u8();
		g.nexus.initiator_port = r.str();
		if (!r.ok)
			return fail(PrLoad::Malformed, why,
			            "registration " + std::to_string(i) + " runs past the body");
		if (proto != uint8_t(ProtoId::Iscsi) && proto != uint8_t(ProtoId::Srp))
			return fail(PrLoad::Malformed, why,
			            fmt::format("registration {}: protocol {:#x}", i, proto));
		if (flags & ~0x01)
			return fail(PrLoad::Malformed, why,
			            fmt::format("registration {}: flags {:#x}", i, flags));
		if (g.nexus.initiator_port.empty() || g.nexus.initiator_port.size() > kMaxPortLen ||
		    g.nexus.initiator_port.find('\0') != std::string::npos)
			return fail(PrLoad::Malformed, why,
			            "registration " + std::to_string(i) + ": bad initiator port");
		// SPC-4 5.13.7: a zero key is no registration.
		if (g.key == 0)
			return fail(PrLoad::Malformed, why,
			            "registration " + std::to_string(i) + ": key 0");
		g.proto = ProtoId(proto);
		g.all_tg_pt = flags & 0x01;
		l.regs.push_back(std::move(g));
	}
	if (r.at != body)
		return fail(PrLoad::Malformed, why,
		            std::to_string(body - r.at) + " bytes after the registrations");
	// One registration per I_T nexus: two for one nexus (or an ALL_TG_PT one beside
	// another of its initiator port) is a state pr_out.cc never makes.
	std::set<std::string> all_ports;
	std::set<NexusId> nexuses;
	for (const Registration &g : l.regs)
		if (g.all_tg_pt && !all_ports.insert(g.nexus.initiator_port).second)
			return fail(PrLoad::Malformed, why, "two registrations of one I_T nexus");
	for (const Registration &g : l.regs)
		if ((!g.all_tg_pt && all_ports.count(g.nexus.initiator_port)) ||
		    (!g.all_tg_pt && !nexuses.insert(g.nexus).second))
			return fail(PrLoad::Malformed, why, "two registrations of one I_T nexus");
	// The reservation: none has no holder; the all-registrants types are held by every
	// registrant (and go with the last one, SPC-4 5.13.11.3); the others by one.
	if (l.type == PrType::None || pr_all_registrants(l.type)) {
		if (holder != kNoHolder)
			return fail(PrLoad::Malformed, why, "a holder without a reservation");
		if (l.type != PrType::None && l.regs.empty())
			return fail(PrLoad::Malformed, why, "a reservation without registrants");
	} else {
		if (holder >= l.regs.size())
			return fail(PrLoad::Malformed, why,
			            "holder " + std::to_string(holder) + " of " +
			                std::to_string(n) + " registrations");
		l.holder = l.regs[holder].id;
	}
	*out = std::move(l);
	return PrLoad::Ok;
}

std::string pr_state_file(const LogicalUnit &lu)
{
	std::string f;
	for (const char c : lu.name()) {
		const auto u = static_cast<unsigned char>(c);
		if (std::isalnum(u) || c == '.' || c == '_' || c == '-')
			f.push_back(c);
		else
			f += fmt::format("%{:02X}", u);
	}
	return f + ".pr";
}

PrLoad pr_attach_store(LogicalUnit &lu, PrStore &store, std::string *why)
{
	PrState &pr = pr_of(lu);
	const std::string file = pr_state_file(lu);
	const std::string path = store.path(file);
	const std::string way_out = "; to start the LU without its registrations and "
	                            "reservation, move the file aside";
	if (store.remove_stale(file))
		ULP_LOG(Info, Scsi, "LU {}: removed {}.tmp, a state write a crash interrupted",
		        lu.name(), path);
	std::vector<uint8_t> bytes;
	const int rc = store.read(file, &bytes, kMaxFile);
	PrLoaded l;
	PrLoad res = PrLoad::NoState;
	if (rc == -ENOENT) {
		res = PrLoad::NoState;
	} else if (rc != 0) {
		*why = "reservation state file " + path + ": " + std::strerror(-rc) + way_out;
		return PrLoad::Unreadable;
	} else {
		std::string what;
		res = pr_decode(bytes, lu.name(), lu.naa(), &l, &what);
		if (res != PrLoad::Ok) {
			*why = "reservation state file " + path + ": " + pr_load_name(res) + " (" +
			       what + "), refused" + way_out;
			return res;
		}
	}
	std::lock_guard g(pr.lock);
	pr.store = &store;
	pr.file = file;
	if (res == PrLoad::Ok) {
		// SPC-4 5.13.5: APTPL was active, and stays so; PRgeneration starts at zero as
		// after any power on (SPC-4 6.16.2).
		pr.aptpl = true;
		pr.durable = std::move(bytes);
		pr.next_id = l.regs.size() + 1;
		pr.regs = std::move(l.regs);
		pr.type = l.type;
		pr.holder = l.holder;
		pr.generation = 0;
		pr.sync();
		ULP_LOG(Info, Scsi, "LU {}: {} registrations{} restored from {}", lu.name(),
		        pr.regs.size(), pr.type == PrType::None ? "" : " and the reservation",
		        path);
	}
	return res;
}

PrUndo pr_undo_save(const PrState &pr)
{
	return PrUndo{pr.regs, pr.type, pr.holder, pr.next_id, pr.generation, pr.aptpl};
}

void pr_undo_restore(PrState &pr, PrUndo &&u)
{
	ULP_ASSERT_HELD(pr.lock);
	pr.regs = std::move(u.regs);
	pr.type = u.type;
	pr.holder = u.holder;
	pr.next_id = u.next_id;
	pr.generation = u.generation;
	pr.aptpl = u.aptpl;
	pr.sync();
}

} // namespace ulp::scsi
