// The regular expressions of tokenizer.json, on PCRE2 (JIT, UTF + UCP). HF tokenizers compiles
// them with Oniguruma, so a pattern is first translated to PCRE2's syntax where the two engines
// read the same text differently, or refused (onig_translate.hpp), and compiled with ^ and $ as
// line anchors, as Oniguruma has them.
// Matches are found as Oniguruma's find_iter finds them: an empty match right after a match
// is skipped and the search then moves on by one character.
//
// A Regex is immutable and shared by threads; each thread brings its own RegexScratch.
//
//   Regex re = Regex::oniguruma("\\p{N}{1,3}", "pre_tokenizer (Split)");
//   RegexScratch scratch;
//   std::vector<Regex::Match> m;
//   re.find_all("a12345", scratch, m);   // {1, 4}, {4, 6}
//   Regex lit = Regex::literal(" ", "normalizer (Replace)");
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::hf {

// PCRE2's per-thread state: match data and, once a match needs it, a JIT stack.
class RegexScratch {
 public:
  RegexScratch();
  ~RegexScratch();
  RegexScratch(const RegexScratch&) = delete;
  RegexScratch& operator=(const RegexScratch&) = delete;

 private:
  friend class Regex;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class Regex {
 public:
  struct Match {
    uint32_t begin, end;  // byte offsets
  };

  // An Oniguruma pattern as tokenizer.json holds it. `where` names it in errors (troupe::Error
  // with the construct that is refused or PCRE2's message and offset).
  static Regex oniguruma(std::string_view pattern, const std::string& where);
  // The text itself (HF escapes a String pattern into a regex); must not be empty.
  static Regex literal(std::string_view text, const std::string& where);
  // literal(text) or oniguruma(text).
  static Regex of(bool regex, std::string_view text, const std::string& where) {
    return regex ? oniguruma(text, where) : literal(text, where);
  }
  // A pattern already in PCRE2's syntax (for the fixed patterns of this library).
  static Regex pcre2(std::string_view pattern, const std::string& where);

  // The matches in `text` (valid UTF-8), in order, into `out` (cleared first).
  void find_all(std::string_view text, RegexScratch& scratch, std::vector<Match>& out) const;
  // Replaces every match in `text` by `with` (matches and buffer: reused storage).
  void replace_all(std::string& text, std::string_view with, RegexScratch& scratch, std::vector<Match>& matches,
                   std::string& buffer) const;
  // Whether the pattern matches at exactly `pos` (anchored there).
  bool matches_at(std::string_view text, size_t pos, RegexScratch& scratch) const;

  // The pattern PCRE2 compiled (after translation).
  const std::string& pcre2_pattern() const { return pattern_; }

 private:
  struct Code;
  static Regex compile(std::string pattern, uint32_t options, const std::string& where);
  // Leftmost match at or after `start`: true and [begin, end), or false.
  bool find(std::string_view text, size_t start, uint32_t options, RegexScratch& scratch, size_t& begin,
            size_t& end) const;

  std::shared_ptr<const Code> code_;
  std::string pattern_;
  std::string where_;
  bool literal_ = false;  // pattern_ is plain text: find_all searches it with string_view::find
};

}  // namespace troupe::hf
