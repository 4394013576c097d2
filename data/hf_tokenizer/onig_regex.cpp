#include "data/hf_tokenizer/onig_regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/check.hpp"
#include "data/hf_tokenizer/onig_translate.hpp"

namespace troupe::hf {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

// --- compiled patterns

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

struct RegexScratch::Impl {
  pcre2_match_data* match = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  size_t stack_bytes = 0;
  ~Impl() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(match);
  }
  // A larger JIT stack, after a match ran out of the default 32 KiB one.
  bool grow_stack() {
    constexpr size_t kMaxStack = size_t(256) << 20;
    if (stack_bytes >= kMaxStack) return false;
    stack_bytes = stack_bytes == 0 ? size_t(1) << 20 : stack_bytes * 4;
    pcre2_jit_stack_free(stack);
    stack = pcre2_jit_stack_create(32 << 10, stack_bytes, nullptr);
    if (!context) context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
    return stack != nullptr;
  }
};

RegexScratch::RegexScratch() : impl_(std::make_unique<Impl>()) {}
RegexScratch::~RegexScratch() = default;

Regex Regex::compile(std::string pattern, uint32_t options, const std::string& where) {
  int error;
  PCRE2_SIZE offset;
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    options | PCRE2_UTF | ((options & PCRE2_LITERAL) ? 0 : PCRE2_UCP), &error, &offset, cc);
  pcre2_compile_context_free(cc);
  if (!code)
    TROUPE_FAIL(where, ": PCRE2 cannot compile \"", pattern, "\": ", pcre2_message(error), " at offset ", offset);
  Regex re;
  auto c = std::make_shared<Code>();
  c->code = code;
  const int jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  TROUPE_CHECK(jit == 0, where, ": PCRE2's JIT cannot compile \"", pattern, "\": ", pcre2_message(jit));
  re.code_ = std::move(c);
  re.pattern_ = std::move(pattern);
  re.where_ = where;
  return re;
}

Regex Regex::oniguruma(std::string_view pattern, const std::string& where) {
  // Oniguruma's ^ and $ match at line starts and ends.
  return compile(translate_oniguruma(pattern, where), PCRE2_MULTILINE, where);
}

Regex Regex::literal(std::string_view text, const std::string& where) {
  TROUPE_CHECK(!text.empty(), where, ": an empty String pattern");
  Regex re = compile(std::string(text), PCRE2_LITERAL, where);
  re.literal_ = true;
  return re;
}

Regex Regex::pcre2(std::string_view pattern, const std::string& where) {
  return compile(std::string(pattern), 0, where);
}

bool Regex::find(std::string_view text, size_t start, uint32_t options, RegexScratch& scratch, size_t& begin,
                 size_t& end) const {
  RegexScratch::Impl& s = *scratch.impl_;
  while (true) {
    // The text is valid UTF-8 (checked once by the caller): no UTF check per call, which would
    // cost O(text) each time.
    const int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                               options | PCRE2_NO_UTF_CHECK, s.match, s.context);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && s.grow_stack()) continue;
    TROUPE_CHECK(rc > 0, where_, ": PCRE2 failed on a text of ", text.size(), " bytes: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.match);
    begin = ov[0];
    end = ov[1];
    return true;
  }
}

void Regex::find_all(std::string_view text, RegexScratch& scratch, std::vector<Match>& out) const {
  out.clear();
  if (literal_) {  // leftmost, non-overlapping occurrences, as the regex finds them
    for (size_t at = text.find(pattern_); at != std::string_view::npos; at = text.find(pattern_, at + pattern_.size()))
      out.push_back({uint32_t(at), uint32_t(at + pattern_.size())});
    return;
  }
  size_t start = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (start <= text.size()) {
    size_t b, e;
    if (!find(text, start, 0, scratch, b, e)) break;
    if (b == e) {
      // Oniguruma's iteration: move on one character past an empty match, and drop an empty
      // match that ends where the previous match ended.
      size_t next = e + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      start = next;
      if (have_last && last_end == e) continue;
    } else {
      start = e;
    }
    have_last = true;
    last_end = e;
    out.push_back({uint32_t(b), uint32_t(e)});
  }
}

void Regex::replace_all(std::string& text, std::string_view with, RegexScratch& scratch, std::vector<Match>& matches,
                        std::string& buffer) const {
  find_all(text, scratch, matches);
  if (matches.empty()) return;
  buffer.clear();
  size_t done = 0;
  for (const Match& m : matches) {
    buffer.append(text, done, m.begin - done);
    buffer += with;
    done = m.end;
  }
  buffer.append(text, done, std::string::npos);
  text.swap(buffer);
}

bool Regex::matches_at(std::string_view text, size_t pos, RegexScratch& scratch) const {
  size_t b, e;
  return find(text, pos, PCRE2_ANCHORED, scratch, b, e);
}

}  // namespace troupe::hf
