#include "data/byte_unicode.hpp"

#include <array>
#include <cstring>

namespace troupe {
namespace {

// OpenAI's bytes_to_unicode(): printable Latin-1 bytes keep their code point, the other 68
// bytes take U+0100, U+0101, ... in byte order.
struct ByteTables {
  std::array<char32_t, 256> to_unicode{};
  std::array<int16_t, 512> to_byte{};  // every image code point is < U+0144

  ByteTables() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_unicode[b] = printable ? char32_t(b) : next++;
      to_byte[to_unicode[b]] = int16_t(b);
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

// The length of the well-formed sequence at s[i], or minus the length of its maximal
// ill-formed subpart: the lead byte and the continuation bytes that are valid where they stand
// (Unicode 15, table 3-7).
int utf8_sequence(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const size_t left = s.size() - i;
  const unsigned c0 = p[0];
  if (c0 < 0x80) return 1;
  int need;                       // continuation bytes after the lead
  unsigned lo = 0x80, hi = 0xBF;  // the range the first of them must fall in
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    need = 1;
  } else if (c0 >= 0xE0 && c0 <= 0xEF) {
    need = 2;
    if (c0 == 0xE0) lo = 0xA0;  // overlong
    if (c0 == 0xED) hi = 0x9F;  // surrogates
  } else if (c0 >= 0xF0 && c0 <= 0xF4) {
    need = 3;
    if (c0 == 0xF0) lo = 0x90;  // overlong
    if (c0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return -1;  // a stray continuation byte, 0xC0, 0xC1, 0xF5..0xFF
  }
  for (int k = 1; k <= need; ++k) {
    if (size_t(k) >= left || p[k] < lo || p[k] > hi) return -k;
    lo = 0x80;
    hi = 0xBF;
  }
  return need + 1;
}

}  // namespace

char32_t byte_to_unicode(uint8_t b) { return tables().to_unicode[b]; }

int unicode_to_byte(char32_t cp) { return cp < 512 ? tables().to_byte[cp] : -1; }

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

int decode_utf8(std::string_view s, size_t i, char32_t& cp) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const size_t left = s.size() - i;
  const unsigned c0 = p[0];
  cp = c0;
  if (c0 < 0x80) return 1;
  auto cont = [&](size_t k) { return k < left && (p[k] & 0xC0) == 0x80; };
  if (c0 >= 0xC2 && c0 <= 0xDF) {
    if (!cont(1)) return 0;
    cp = ((c0 & 0x1F) << 6) | (p[1] & 0x3F);
    return 2;
  }
  if (c0 >= 0xE0 && c0 <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    const char32_t v = ((c0 & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    if (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF)) return 0;  // overlong or surrogate
    cp = v;
    return 3;
  }
  if (c0 >= 0xF0 && c0 <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    const char32_t v = ((c0 & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    if (v < 0x10000 || v > 0x10FFFF) return 0;
    cp = v;
    return 4;
  }
  return 0;  // stray continuation byte, 0xC0/0xC1, 0xF5..0xFF
}

size_t utf8_valid_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII dominates: eight bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const int len = utf8_sequence(s, i);
    if (len < 0) return i;
    i += size_t(len);
  }
  return s.size();
}

void append_utf8_lossy(std::string& out, std::string_view bytes) {
  while (!bytes.empty()) {
    const size_t valid = utf8_valid_prefix(bytes);
    out.append(bytes.substr(0, valid));
    if (valid == bytes.size()) return;
    out.append("\xEF\xBF\xBD");  // U+FFFD
    bytes.remove_prefix(valid + size_t(-utf8_sequence(bytes, valid)));
  }
}

std::string bytes_to_unicode_string(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, byte_to_unicode(b));
  return out;
}

std::string unicode_string_to_bytes(std::string_view spelled) {
  std::string out;
  out.reserve(spelled.size());
  for (size_t i = 0; i < spelled.size();) {
    char32_t cp;
    const int len = decode_utf8(spelled, i, cp);
    if (len == 0) {
      out += spelled[i++];
      continue;
    }
    const int b = unicode_to_byte(cp);
    if (b >= 0)
      out += char(b);
    else
      out.append(spelled.substr(i, size_t(len)));
    i += size_t(len);
  }
  return out;
}

void append_byte_level_token_bytes(std::string& out, std::string_view spelled) {
  const size_t start = out.size();
  for (size_t i = 0; i < spelled.size();) {
    char32_t cp;
    const int len = decode_utf8(spelled, i, cp);
    const int b = len > 0 ? unicode_to_byte(cp) : -1;
    if (b < 0) {
      out.resize(start);
      out.append(spelled);
      return;
    }
    out += char(b);
    i += size_t(len);
  }
}

}  // namespace troupe
