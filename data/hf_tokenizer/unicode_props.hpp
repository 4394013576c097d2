// The few Unicode character properties HF tokenizers' Rust code asks of single characters
// (char::is_whitespace, char::is_numeric, char::to_lowercase, the regex crate's \w), from
// utf8proc and PCRE2's tables; and stepping through UTF-8 text.
//
//   is_white_space(U'\u3000')   // true: Unicode White_Space
//   is_numeric(U'\u00BD')       // true: general category N*
//   std::string s; append_lowercase(s, U'\u0130');   // "i\u0307", as Rust's to_lowercase
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace troupe::hf {

// Unicode's White_Space property (Rust's char::is_whitespace; Oniguruma's and Rust regex's \s).
bool is_white_space(char32_t cp);
// General category Nd, Nl or No (Rust's char::is_numeric).
bool is_numeric(char32_t cp);
// Unicode's word class as Rust's regex crate has \w: Alphabetic, marks, decimal digits,
// connector punctuation, joiners.
bool is_word_char(char32_t cp);
// Appends the lowercase of cp as Rust's char::to_lowercase does: the simple mapping, except
// U+0130 (I with dot), whose full mapping is two code points.
void append_lowercase(std::string& out, char32_t cp);

// The end of the run of White_Space that starts at s[begin].
size_t white_space_end(std::string_view s, size_t begin);
// The start of the run of White_Space that ends at s[end] (exclusive).
size_t white_space_start(std::string_view s, size_t end);

// The code point at s[i] (s is valid UTF-8) and its length in bytes.
int next_code_point(std::string_view s, size_t i, char32_t& cp);
// The code point that ends at s[i] (exclusive) and its length in bytes.
int previous_code_point(std::string_view s, size_t i, char32_t& cp);

}  // namespace troupe::hf
