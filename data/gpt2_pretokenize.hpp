// GPT-2's pre-tokenizer: splits text into the pieces that BPE then runs on, one at a time,
// exactly as the regex of OpenAI's encoder.py and HF's ByteLevel pre-tokenizer does:
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// written by hand over UTF-8 code points (no regex engine, no allocation):
//   \p{L}  general category L* (Lu Ll Lt Lm Lo), from utf8proc (2.8: Unicode 15.0), plus the
//          letters new in Unicode 16.0, which HF tokenizers 0.23 (Oniguruma) already has
//   \p{N}  general category N* (Nd Nl No), likewise
//   \s     Unicode White_Space as Oniguruma (HF tokenizers) sees it: U+0009..U+000D, U+0085 and
//          the Zs/Zl/Zp separators (U+0020, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
//          U+202F, U+205F, U+3000). Not U+001C..U+001F, not U+200B, not U+FEFF.
// The contractions are lower-case ASCII only ("'S" is "'" + "S"). Only U+0020 attaches to a
// following word. A whitespace run followed by a non-space leaves its last character to the
// next piece ("a   b" -> "a", "  ", " b"; "a\n\n b" -> "a", "\n\n", " b").
// Bytes that are not well-formed UTF-8 count as one "other" character each.
//
//   Gpt2Pretokenizer it("Hello  world's");
//   std::string_view piece;
//   while (it.next(piece)) { ... }   // "Hello", " ", " world", "'s"
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace troupe {

class Gpt2Pretokenizer {
 public:
  explicit Gpt2Pretokenizer(std::string_view text) : text_(text) {}

  // Sets `piece` to the next piece (a view into the text) and returns true, or returns false
  // at the end of the text.
  bool next(std::string_view& piece);

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

// All pieces of `text` (for tests and tools; the tokenizer uses the iterator).
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace troupe
