// Oniguruma's regex syntax (what HF tokenizers compiles tokenizer.json's patterns with) rewritten
// in PCRE2's, where the two read the same text differently:
//   \s -> \p{White_Space} (PCRE2's \s also takes U+180E), \S -> \P{White_Space}
//   \w -> Unicode's word class as Oniguruma has it, \h -> a hex digit, \v -> U+000B
//   {,n} -> {0,n}, \uHHHH -> \x{HHHH}, \p{^L} -> \P{L}
//   \p{L}, \p{N}, ... (general categories) -> also the code points PCRE2's Unicode tables (14.0 in
//     10.42) leave unassigned and utf8proc's newer ones assign to that category
// and refused (troupe::Error naming the pattern, the construct and `where`) where a construct
// is not translated: \b \B \G \K \R \X, back-references, nested classes and POSIX brackets,
// && in classes, \W \H or a patched \P{..} inside a class, (?m) and other inline options but i
// and x, {n,m}+.
//
//   translate_oniguruma("\\s+(?!\\S)", "pre_tokenizer")   // "\\p{White_Space}+(?!\\P{White_Space})"
//   translate_oniguruma("a{,3}", "t")                      // "a{0,3}"
#pragma once

#include <string>
#include <string_view>

namespace troupe::hf {

std::string translate_oniguruma(std::string_view pattern, const std::string& where);

}  // namespace troupe::hf
