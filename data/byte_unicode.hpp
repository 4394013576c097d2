// GPT-2's reversible map between the 256 byte values and printable Unicode code points, and
// the small UTF-8 helpers the tokenizers need.
//
// vocab.json and merges.txt spell every token as text; bytes that would be invisible or
// whitespace (0x00-0x20, 0x7F-0xA0, 0xAD) are shifted to U+0100 and up so that each byte has
// a printable, non-space spelling:
//
//   byte_to_unicode(' ') == U'\u0120'           // 'Ġ', so " world" is spelled "Ġworld"
//   byte_to_unicode('A') == U'A'
//   unicode_to_byte(U'\u0120') == ' '
//   bytes_to_unicode_string(" hi") == "\u0120hi"  // as UTF-8
//   utf8_lossy("a\xE2\x82") == "a\uFFFD"        // a truncated euro sign
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace troupe {

// The code point that spells byte b in GPT-2's vocabulary.
char32_t byte_to_unicode(uint8_t b);
// The byte that code point cp spells, or -1 when cp spells no byte.
int unicode_to_byte(char32_t cp);

// Appends the UTF-8 encoding of cp (which must be a Unicode scalar value).
void append_utf8(std::string& out, char32_t cp);

// Decodes the code point starting at s[i] (i < s.size()). Returns its length in bytes, or 0
// when the bytes there are not well-formed UTF-8 (overlong, surrogate, truncated, > U+10FFFF);
// then cp is set to the byte value at s[i].
int decode_utf8(std::string_view s, size_t i, char32_t& cp);

// Length of the longest prefix of `s` that is well-formed UTF-8 (s.size() when all of it is).
size_t utf8_valid_prefix(std::string_view s);
// Appends `bytes` with each ill-formed UTF-8 sequence replaced by one U+FFFD per maximal
// subpart (Unicode's recommended practice, as Rust's String::from_utf8_lossy, Python's
// decode("utf-8", "replace") and WHATWG's TextDecoder do): "\xE2\x82" (a truncated euro sign)
// is one U+FFFD, "\xED\xA0\x80" (a surrogate) and "\xC0\xAF" (overlong) one per byte.
void append_utf8_lossy(std::string& out, std::string_view bytes);
inline std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  append_utf8_lossy(out, bytes);
  return out;
}

// Raw bytes -> their byte-level spelling (the form vocab.json and merges.txt use).
std::string bytes_to_unicode_string(std::string_view bytes);
// The inverse. A code point that spells no byte is copied through as its UTF-8 (as HF's
// ByteLevel decoder does); ill-formed UTF-8 in `spelled` is copied through byte by byte.
std::string unicode_string_to_bytes(std::string_view spelled);
// Appends the bytes one byte-level token spells, as HF's ByteLevel decoder does per token: the
// byte of each code point when every code point spells a byte, else the token's own UTF-8
// (an added token such as "<|im_start|>" or "\u4E00").
void append_byte_level_token_bytes(std::string& out, std::string_view spelled);

}  // namespace troupe
