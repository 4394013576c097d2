// GPT-2's reversible map between the 256 byte values and printable Unicode code points, and
// the small UTF-8 helpers the tokenizer needs.
//
// vocab.json and merges.txt spell every token as text; bytes that would be invisible or
// whitespace (0x00-0x20, 0x7F-0xA0, 0xAD) are shifted to U+0100 and up so that each byte has
// a printable, non-space spelling:
//
//   byte_to_unicode(' ') == U'\u0120'           // 'Ġ', so " world" is spelled "Ġworld"
//   byte_to_unicode('A') == U'A'
//   unicode_to_byte(U'\u0120') == ' '
//   bytes_to_unicode_string(" hi") == "\u0120hi"  // as UTF-8
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

// Raw bytes -> their byte-level spelling (the form vocab.json and merges.txt use).
std::string bytes_to_unicode_string(std::string_view bytes);
// The inverse. A code point that spells no byte is copied through as its UTF-8 (as HF's
// ByteLevel decoder does); ill-formed UTF-8 in `spelled` is copied through byte by byte.
std::string unicode_string_to_bytes(std::string_view spelled);

}  // namespace troupe
