// SPDX-License-Identifier: MIT
// iscsi/text.h - iSCSI text data: key=value pairs and their value encodings (RFC 7143 6.1).
//
// Login and Text PDUs carry key=value pairs, each followed by one NUL. The pairs of one
// request or response may span several PDUs: every PDU but the last has the C bit set, and
// the data segments together form one "logical text data segment" (LTDS), which is parsed
// only when complete (TextAssembler collects it; TextChunker cuts an outgoing one).
//
// The grammar enforced here (6.1):
//	key-name     standard-label (a capital letter, then letters, digits, . - + @ _), or an
//	             extension key "X-..." (vendor) or "X#..." (IANA-registered); at most 63
//	             characters
//	value        UTF-8, everything after the first '=' up to the NUL; "key=" has an empty
//	             value
//	simple-value at most 255 bytes unless the key says otherwise (kMaxSimpleValueLen)
//	numerical    decimal, or hex "0x"/"0X"; below 2**64
//	binary       hex "0x" (two digits a byte; an odd count has an implicit leading 0) or
//	             base64 "0b"/"0B" (RFC 4648); CHAP challenges and responses at most 1024
//	             bytes (12.1.3)
//	list         simple values separated by commas
//	range        two numerical values separated by '~', right >= left
// Per-key rules (which encoding, which range) live in params.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ulp::iscsi
{

constexpr size_t kMaxKeyLen = 63;          // 6.1: a key name is at most 63 characters
constexpr size_t kMaxSimpleValueLen = 255; // 6.1: a simple value is at most 255 bytes
constexpr size_t kMaxBinaryLen = 1024;     // 12.1.3: CHAP_C / CHAP_R binary length bound
// The longest raw value accepted at all: a 1024-byte binary in hex ("0x" + 2048 digits).
// Longer values are malformed whatever the key.
constexpr size_t kMaxRawValueLen = 2 + 2 * kMaxBinaryLen;
// 6.1: "Any iSCSI target or initiator MUST support receiving at least 8192 bytes of
// key=value data in a negotiation sequence", 64 KiB when authentication needs long items.
// The login and text engines accept an LTDS up to this size.
constexpr size_t kMaxLtdsLen = 64 * 1024;

enum class TextError : uint8_t {
	None,
	NoTerminator, // the LTDS does not end with NUL (6.1: every pair is followed by one)
	NoEquals,     // a pair without '='
	EmptyKey,     // "=value"
	KeyTooLong,   // more than 63 characters
	BadKey,       // a character or first character the key grammar does not allow
	ValueTooLong, // more than kMaxRawValueLen bytes
	BadUtf8,      // the value is not well-formed UTF-8
};
const char *text_error_name(TextError e);

// One pair, viewing the LTDS it was parsed from.
struct KeyValue {
	std::string_view key;
	std::string_view value;
};

// Parse one complete LTDS into pairs (appended to *out). Empty entries (two NULs in a row)
// are skipped: open-iscsi's parser tolerates them and some initiators pad with NULs. On
// error *out holds the pairs before the bad one.
TextError parse_text(std::span<const uint8_t> ltds, std::vector<KeyValue> *out);

// Key-name grammar (standard-label or X-/X# extension), length included.
bool valid_key_name(std::string_view k);
// Well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
bool valid_utf8(std::string_view v);
// 6.1 text-value: letters, digits, . - + @ _ / [ ] : (and nothing else).
bool valid_text_value(std::string_view v);
// An iSCSI name (RFC 7143 4.2.7.1 - 4.2.7.4): "iqn." date "." naming authority [":" ...],
// "eui." 16 hex digits, or "naa." 16 or 32 hex digits; at most 223 bytes; no control
// characters, spaces or separators. Upper case is accepted although stringprep would fold
// it: initiators configured with mixed-case names exist and LIO accepts them.
bool valid_iscsi_name(std::string_view v);

// numerical-value: decimal or 0x hex, no sign, below 2**64.
bool parse_number(std::string_view v, uint64_t *out);
// boolean-value: exactly "Yes" or "No".
bool parse_bool(std::string_view v, bool *out);
// numeric-range "a~b" with b >= a.
bool parse_range(std::string_view v, uint64_t *lo, uint64_t *hi);
// binary-value in hex (0x) or base64 (0b), decoded into *out; false if malformed or longer
// than max_len bytes. Decimal is refused: 6.1 allows it only for binaries of a length the
// key fixes, and no key here has one.
bool parse_binary(std::string_view v, size_t max_len, std::vector<uint8_t> *out);
// "0x" + lower-case hex digits, as open-iscsi and LIO send CHAP values.
std::string encode_hex(std::span<const uint8_t> bin);

// Split a list-of-values on commas. False if any element is empty ("a,,b", "a,").
bool split_list(std::string_view v, std::vector<std::string_view> *out);

// Accumulates the data segments of a C-bit sequence into one LTDS.
class TextAssembler
{
public:
	explicit TextAssembler(size_t cap = kMaxLtdsLen) : cap_(cap) {}
	// Append one PDU's data. False (nothing appended) if the LTDS would exceed the cap.
	bool append(std::span<const uint8_t> data);
	std::span<const uint8_t> text() const { return {buf_.data(), buf_.size()}; }
	size_t size() const { return buf_.size(); }
	void clear() { buf_.clear(); }

private:
	size_t cap_;               // largest LTDS accepted (bytes)
	std::vector<uint8_t> buf_; // the segments so far
};

// Builds an outgoing LTDS.
class TextWriter
{
public:
	void add(std::string_view key, std::string_view value);
	void add_num(std::string_view key, uint64_t v);
	void add_bool(std::string_view key, bool v) { add(key, v ? "Yes" : "No"); }
	void append(const TextWriter &o) { buf_ += o.buf_; }
	std::span<const uint8_t> bytes() const
	{
		return {reinterpret_cast<const uint8_t *>(buf_.data()), buf_.size()};
	}
	size_t size() const { return buf_.size(); }
	bool empty() const { return buf_.empty(); }
	void clear() { buf_.clear(); }

private:
	std::string buf_; // key=value\0 ...
};

// Cuts an outgoing LTDS into data segments of at most max bytes; every piece but the last
// goes in a PDU with the C bit set. Pieces may split a pair anywhere (6.1 allows it).
class TextChunker
{
public:
	void reset(std::span<const uint8_t> ltds)
	{
		text_.assign(ltds.begin(), ltds.end());
		off_ = 0;
	}
	// The next piece (empty once everything went out, or for an empty LTDS).
	std::span<const uint8_t> next(size_t max);
	// True when bytes remain after the pieces taken so far (the C bit of the last piece).
	bool more() const { return off_ < text_.size(); }
	bool started() const { return off_ > 0; }

private:
	std::vector<uint8_t> text_; // the whole LTDS
	size_t off_ = 0;            // bytes already handed out
};

} // namespace ulp::iscsi
