// SPDX-License-Identifier: MIT
// iscsi/text.cc - key=value text: parsing, value encodings, assembling and cutting LTDSs.
#include "iscsi/text.h"

#include <algorithm>
#include <charconv>

namespace ulp::iscsi
{

const char *text_error_name(TextError e)
{
	switch (e) {
	case TextError::None:
		return "none";
	case TextError::NoTerminator:
		return "text not NUL-terminated";
	case TextError::NoEquals:
		return "key=value pair without '='";
	case TextError::EmptyKey:
		return "empty key";
	case TextError::KeyTooLong:
		return "key longer than 63 characters";
	case TextError::BadKey:
		return "invalid key name";
	case TextError::ValueTooLong:
		return "value too long";
	case TextError::BadUtf8:
		return "value not valid UTF-8";
	}
	return "unknown";
}

namespace
{

bool is_upper(char c)
{
	return c >= 'A' && c <= 'Z';
}
bool is_lower(char c)
{
	return c >= 'a' && c <= 'z';
}
bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}
bool is_alpha(char c)
{
	return is_upper(c) || is_lower(c);
}
bool is_hex(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// 6.1 standard-label characters after the first.
bool is_label_char(char c)
{
	return is_alpha(c) || is_digit(c) || c == '.' || c == '-' || c == '+' || c == '@' ||
	       c == '_';
}

int hex_val(char c)
{
	if (is_digit(c))
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return c - 'A' + 10;
}

int b64_val(char c)
{
	if (is_upper(c))
		return c - 'A';
	if (is_lower(c))
		return c - 'a' + 26;
	if (is_digit(c))
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

// RFC 4648 base64 with mandatory padding to a multiple of 4 characters.
bool decode_base64(std::string_view s, size_t max_len, std::vector<uint8_t> *out)
{
	if (s.empty() || s.size() % 4)
		return false;
	size_t pad = 0;
	if (s.back() == '=')
		pad = s[s.size() - 2] == '=' ? 2 : 1;
	const size_t len = s.size() / 4 * 3 - pad;
	if (len > max_len)
		return false;
	out->clear();
	out->reserve(len);
	for (size_t i = 0; i < s.size(); i += 4) {
		int v[4];
		for (size_t j = 0; j < 4; j++) {
			const bool tail = i + 4 == s.size() && j >= 4 - pad;
			if (tail) {
				if (s[i + j] != '=')
					return false;
				v[j] = 0;
			} else if ((v[j] = b64_val(s[i + j])) < 0) {
				return false;
			}
		}
		const uint32_t w = uint32_t(v[0]) << 18 | uint32_t(v[1]) << 12 |
		                   uint32_t(v[2]) << 6 | uint32_t(v[3]);
		out->push_back(static_cast<uint8_t>(w >> 16));
		if (i + 4 < s.size() || pad < 2)
			out->push_back(static_cast<uint8_t>(w >> 8));
		if (i + 4 < s.size() || pad < 1)
			out->push_back(static_cast<uint8_t>(w));
	}
	return true;
}

bool all_hex(std::string_view s, size_t n)
{
	return s.size() == n && std::all_of(s.begin(), s.end(), is_hex);
}

} // namespace

bool valid_key_name(std::string_view k)
{
	// 13.24 defines "iSCSIProtocolLevel", the one key that breaks 6.1's capital-letter rule.
	if (k == "iSCSIProtocolLevel")
		return true;
	if (k.empty() || k.size() > kMaxKeyLen || !is_upper(k[0]))
		return false;
	for (size_t i = 1; i < k.size(); i++) {
		// "X#..." (IANA-registered public extension keys, RFC 4850 in 7143's 6.1):
		// '#' only as the second
		// character.
		if (k[i] == '#' && i == 1 && k[0] == 'X')
			continue;
		if (!is_label_char(k[i]))
			return false;
	}
	// "X-" and "X#" need something after the prefix.
	if ((k.starts_with("X-") || k.starts_with("X#")) && k.size() == 2)
		return false;
	return true;
}

bool valid_utf8(std::string_view v)
{
	const auto *p = reinterpret_cast<const uint8_t *>(v.data());
	const size_t n = v.size();
	for (size_t i = 0; i < n;) {
		const uint8_t c = p[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t len;
		uint32_t cp;
		if ((c & 0xe0) == 0xc0) {
			len = 2;
			cp = c & 0x1f;
		} else if ((c & 0xf0) == 0xe0) {
			len = 3;
			cp = c & 0x0f;
		} else if ((c & 0xf8) == 0xf0) {
			len = 4;
			cp = c & 0x07;
		} else {
			return false;
		}
		if (n - i < len)
			return false;
		for (size_t j = 1; j < len; j++) {
			if ((p[i + j] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (p[i + j] & 0x3f);
		}
		static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
		if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += len;
	}
	return true;
}

bool valid_text_value(std::string_view v)
{
	return std::all_of(v.begin(), v.end(), [](char c) {
		return is_label_char(c) || c == '/' || c == '[' || c == ']' || c == ':';
	});
}

bool valid_iscsi_name(std::string_view v)
{
	// 4.2.7: at most 223 bytes.
	if (v.size() < 5 || v.size() > 223 || !valid_utf8(v))
		return false;
	for (char c : v) {
		const auto u = static_cast<unsigned char>(c);
		// No controls, space, or the separators of the text format and TargetAddress.
		if (u < 0x21 || u == 0x7f || c == ',' || c == '=' || c == '~' || c == '/')
			return false;
	}
	std::string_view prefix = v.substr(0, 4);
	std::string_view rest = v.substr(4);
	if (prefix == "eui." || prefix == "EUI.")
		return all_hex(rest, 16); // 4.2.7.3: EUI-64 in 16 hex digits
	if (prefix == "naa." || prefix == "NAA.")
		return all_hex(rest, 16) || all_hex(rest, 32); // 4.2.7.4 (RFC 3980)
	if (prefix != "iqn." && prefix != "IQN.")
		return false;
	// 4.2.7.2: "iqn." yyyy-mm "." reversed domain name, then optionally ":" and anything.
	if (rest.size() < 9 || !all_hex(rest.substr(0, 4), 4) || rest[4] != '-' ||
	    !is_digit(rest[5]) || !is_digit(rest[6]) || rest[7] != '.')
		return false;
	for (size_t i = 0; i < 4; i++)
		if (!is_digit(rest[i]))
			return false;
	return rest.size() > 8 && rest[8] != ':';
}

bool parse_number(std::string_view v, uint64_t *out)
{
	if (v.empty())
		return false;
	int base = 10;
	if (v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X')) {
		base = 16;
		v.remove_prefix(2);
	}
	if (v.empty() || !std::all_of(v.begin(), v.end(), base == 16 ? is_hex : is_digit))
		return false;
	uint64_t n = 0;
	auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n, base);
	if (ec != std::errc() || p != v.data() + v.size())
		return false; // overflow (2**64 or more)
	*out = n;
	return true;
}

bool parse_bool(std::string_view v, bool *out)
{
	if (v == "Yes") {
		*out = true;
		return true;
	}
	if (v == "No") {
		*out = false;
		return true;
	}
	return false;
}

bool parse_range(std::string_view v, uint64_t *lo, uint64_t *hi)
{
	const size_t t = v.find('~');
	if (t == std::string_view::npos)
		return false;
	if (!parse_number(v.substr(0, t), lo) || !parse_number(v.substr(t + 1), hi))
		return false;
	return *hi >= *lo;
}

bool parse_binary(std::string_view v, size_t max_len, std::vector<uint8_t> *out)
{
	if (v.size() < 3 || v[0] != '0')
		return false;
	const char kind = v[1];
	std::string_view s = v.substr(2);
	if (kind == 'b' || kind == 'B')
		return decode_base64(s, max_len, out);
	if (kind != 'x' && kind != 'X')
		return false;
	if (!std::all_of(s.begin(), s.end(), is_hex))
		return false;
	// 6.1: n hex digits have an implicit byte length of (n + 1) / 2.
	const size_t len = (s.size() + 1) / 2;
	if (len > max_len)
		return false;
	out->assign(len, 0);
	size_t i = 0, o = 0;
	if (s.size() % 2)
		(*out)[o++] = static_cast<uint8_t>(hex_val(s[i++]));
	for (; i < s.size(); i += 2)
		(*out)[o++] = static_cast<uint8_t>(hex_val(s[i]) << 4 | hex_val(s[i + 1]));
	return true;
}

std::string encode_hex(std::span<const uint8_t> bin)
{
	static constexpr char kDigits[] = "0123456789abcdef";
	std::string s = "0x";
	s.reserve(2 + 2 * bin.size());
	for (uint8_t b : bin) {
		s.push_back(kDigits[b >> 4]);
		s.push_back(kDigits[b & 15]);
	}
	return s;
}

bool split_list(std::string_view v, std::vector<std::string_view> *out)
{
	out->clear();
	size_t start = 0;
	while (true) {
		const size_t comma = v.find(',', start);
		std::string_view item =
		    v.substr(start, comma == std::string_view::npos ? v.npos : comma - start);
		if (item.empty())
			return false;
		out->push_back(item);
		if (comma == std::string_view::npos)
			return true;
		start = comma + 1;
	}
}

TextError parse_text(std::span<const uint8_t> ltds, std::vector<KeyValue> *out)
{
	if (ltds.empty())
		return TextError::None;
	if (ltds.back() != 0)
		return TextError::NoTerminator;
	std::string_view all(reinterpret_cast<const char *>(ltds.data()), ltds.size());
	size_t pos = 0;
	while (pos < all.size()) {
		const size_t nul = all.find('\0', pos); // exists: the last byte is NUL
		std::string_view pair = all.substr(pos, nul - pos);
		pos = nul + 1;
		if (pair.empty())
			continue;
		const size_t eq = pair.find('=');
		if (eq == std::string_view::npos)
			return TextError::NoEquals;
		KeyValue kv{pair.substr(0, eq), pair.substr(eq + 1)};
		if (kv.key.empty())
			return TextError::EmptyKey;
		if (kv.key.size() > kMaxKeyLen)
			return TextError::KeyTooLong;
		if (!valid_key_name(kv.key))
			return TextError::BadKey;
		if (kv.value.size() > kMaxRawValueLen)
			return TextError::ValueTooLong;
		if (!valid_utf8(kv.value))
			return TextError::BadUtf8;
		out->push_back(kv);
	}
	return TextError::None;
}

bool TextAssembler::append(std::span<const uint8_t> data)
{
	if (data.size() > cap_ - buf_.size())
		return false;
	buf_.insert(buf_.end(), data.begin(), data.end());
	return true;
}

void TextWriter::add(std::string_view key, std::string_view value)
{
	buf_.append(key);
	buf_.push_back('=');
	buf_.append(value);
	buf_.push_back('\0');
}

void TextWriter::add_num(std::string_view key, uint64_t v)
{
	char tmp[24];
	auto [p, ec] = std::to_chars(tmp, tmp + sizeof(tmp), v);
	(void)ec;
	add(key, std::string_view(tmp, static_cast<size_t>(p - tmp)));
}

std::span<const uint8_t> TextChunker::next(size_t max)
{
	const size_t n = std::min(max, text_.size() - off_);
	std::span<const uint8_t> piece(text_.data() + off_, n);
	off_ += n;
	return piece;
}

} // namespace ulp::iscsi
