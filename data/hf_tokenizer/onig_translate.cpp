#include "data/hf_tokenizer/onig_translate.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <vector>

#include "base/check.hpp"
#include "data/byte_unicode.hpp"

namespace troupe::hf {
namespace {

// Oniguruma's \w (Unicode: Alphabetic, marks, decimal digits, connector punctuation, and the
// Latin-1 digits Oniguruma's word table adds), as members of a class.
constexpr std::string_view kOnigWord = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";
// Oniguruma's \s is Unicode's White_Space. PCRE2's \s (UCP) also takes U+180E, which left
// White_Space in Unicode 6.3.
constexpr std::string_view kOnigSpace = "\\p{White_Space}";

// --- Unicode versions
//
// PCRE2 10.42 knows Unicode 14; utf8proc, HF's Oniguruma and the JavaScript reference newer
// versions. For a general category in \p{..}, the code points that PCRE2 calls unassigned and
// utf8proc assigns to that category are added to the class, so that \p{L} means the same
// letters as utf8proc's tables (Unicode 15 with utf8proc 2.8).

// utf8proc's category of each code point PCRE2 leaves unassigned, as class ranges by category.
const std::array<std::string, 32>& newer_assignments() {
  static const std::array<std::string, 32> ranges = [] {
    std::array<std::string, 32> out;
    std::string assigned;  // every code point utf8proc assigns, as UTF-8
    for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      if (utf8proc_category(utf8proc_int32_t(cp)) == UTF8PROC_CATEGORY_CN) continue;
      append_utf8(assigned, cp);
    }
    // Which of them PCRE2 calls unassigned: one JIT scan.
    int error;
    PCRE2_SIZE offset;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>("\\p{Cn}"), PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    TROUPE_CHECK(code != nullptr, "pcre2 cannot compile \\p{Cn} (error ", error, ")");
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    std::array<std::vector<std::pair<char32_t, char32_t>>, 32> by_category;
    size_t start = 0;
    while (pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(assigned.data()), assigned.size(), start, PCRE2_NO_UTF_CHECK,
                       md, nullptr) >= 0) {
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      char32_t cp;
      decode_utf8(assigned, ov[0], cp);
      start = ov[1];
      auto& r = by_category[size_t(utf8proc_category(utf8proc_int32_t(cp)))];
      if (!r.empty() && r.back().second + 1 == cp)
        r.back().second = cp;
      else
        r.emplace_back(cp, cp);
    }
    for (size_t c = 0; c < out.size(); ++c)
      for (const auto& [first, last] : by_category[c])
        out[c] += first == last ? str_cat("\\x{", std::hex, uint32_t(first), "}")
                                : str_cat("\\x{", std::hex, uint32_t(first), "}-\\x{", uint32_t(last), "}");
    pcre2_match_data_free(md);
    pcre2_code_free(code);
    return out;
  }();
  return ranges;
}

// The utf8proc categories a \p{NAME} general category covers, or {} when NAME is not one.
std::vector<int> categories_of(std::string_view name) {
  using C = std::vector<int>;
  if (name == "L")
    return C{UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LL, UTF8PROC_CATEGORY_LT, UTF8PROC_CATEGORY_LM,
             UTF8PROC_CATEGORY_LO};
  if (name == "N") return C{UTF8PROC_CATEGORY_ND, UTF8PROC_CATEGORY_NL, UTF8PROC_CATEGORY_NO};
  if (name == "M") return C{UTF8PROC_CATEGORY_MN, UTF8PROC_CATEGORY_MC, UTF8PROC_CATEGORY_ME};
  if (name == "P")
    return C{UTF8PROC_CATEGORY_PC, UTF8PROC_CATEGORY_PD, UTF8PROC_CATEGORY_PS, UTF8PROC_CATEGORY_PE,
             UTF8PROC_CATEGORY_PI, UTF8PROC_CATEGORY_PF, UTF8PROC_CATEGORY_PO};
  if (name == "S") return C{UTF8PROC_CATEGORY_SM, UTF8PROC_CATEGORY_SC, UTF8PROC_CATEGORY_SK, UTF8PROC_CATEGORY_SO};
  static constexpr std::pair<std::string_view, int> two[] = {
      {"Lu", UTF8PROC_CATEGORY_LU}, {"Ll", UTF8PROC_CATEGORY_LL}, {"Lt", UTF8PROC_CATEGORY_LT},
      {"Lm", UTF8PROC_CATEGORY_LM}, {"Lo", UTF8PROC_CATEGORY_LO}, {"Mn", UTF8PROC_CATEGORY_MN},
      {"Mc", UTF8PROC_CATEGORY_MC}, {"Me", UTF8PROC_CATEGORY_ME}, {"Nd", UTF8PROC_CATEGORY_ND},
      {"Nl", UTF8PROC_CATEGORY_NL}, {"No", UTF8PROC_CATEGORY_NO}, {"Pc", UTF8PROC_CATEGORY_PC},
      {"Pd", UTF8PROC_CATEGORY_PD}, {"Ps", UTF8PROC_CATEGORY_PS}, {"Pe", UTF8PROC_CATEGORY_PE},
      {"Pi", UTF8PROC_CATEGORY_PI}, {"Pf", UTF8PROC_CATEGORY_PF}, {"Po", UTF8PROC_CATEGORY_PO},
      {"Sm", UTF8PROC_CATEGORY_SM}, {"Sc", UTF8PROC_CATEGORY_SC}, {"Sk", UTF8PROC_CATEGORY_SK},
      {"So", UTF8PROC_CATEGORY_SO}, {"Cf", UTF8PROC_CATEGORY_CF}};
  for (const auto& [n, c] : two)
    if (n == name) return C{c};
  return {};
}

// The class members \p{NAME} stands for: PCRE2's and the newer assignments.
std::string property_members(std::string_view name) {
  std::string out = str_cat("\\p{", name, "}");
  for (int c : categories_of(name)) out += newer_assignments()[size_t(c)];
  return out;
}

// --- Oniguruma -> PCRE2

class Translator {
 public:
  Translator(std::string_view pattern, const std::string& where) : p_(pattern), where_(where) {}

  std::string run() {
    while (i_ < p_.size()) {
      const char c = p_[i_];
      if (c == '\\') {
        escape(false);
      } else if (c == '[') {
        char_class();
      } else if (c == '(') {
        group();
      } else if (c == '{') {
        brace();
      } else {
        out_ += c;
        ++i_;
      }
    }
    return out_;
  }

 private:
  [[noreturn]] void refuse(const std::string& what) const {
    TROUPE_FAIL(where_, ": the regex \"", p_, "\" uses ", what, " at offset ", i_,
                ", which is not translated from Oniguruma's syntax to PCRE2's");
  }

  // \p{NAME}, \P{NAME}, \p{^NAME} at i_ (after the backslash); the name and whether negated.
  std::pair<std::string, bool> property() {
    bool negated = p_[i_] == 'P';
    if (i_ + 1 >= p_.size() || p_[i_ + 1] != '{') refuse("a \\p without braces");
    const size_t close = p_.find('}', i_ + 2);
    if (close == std::string_view::npos) refuse("an unterminated \\p{");
    std::string name(p_.substr(i_ + 2, close - i_ - 2));
    if (!name.empty() && name[0] == '^') {
      negated = !negated;
      name.erase(0, 1);
    }
    i_ = close + 1;
    return {name, negated};
  }

  // The escape at i_ (a backslash), outside or inside a class.
  void escape(bool in_class) {
    if (i_ + 1 >= p_.size()) refuse("a trailing backslash");
    ++i_;
    const char c = p_[i_];
    auto emit = [&](std::string_view outside, std::string_view inside) {
      out_ += in_class ? inside : outside;
      ++i_;
    };
    switch (c) {
      case 's':
        return emit(kOnigSpace, kOnigSpace);
      case 'S':
        return emit("\\P{White_Space}", "\\P{White_Space}");
      case 'd':
        return emit("\\p{Nd}", "\\p{Nd}");
      case 'D':
        return emit("\\P{Nd}", "\\P{Nd}");
      case 'w':
        return emit(str_cat("[", kOnigWord, "]"), kOnigWord);
      case 'W':
        if (in_class) refuse("\\W inside a character class");
        return emit(str_cat("[^", kOnigWord, "]"), "");
      case 'h':
        return emit("[0-9A-Fa-f]", "0-9A-Fa-f");
      case 'H':
        if (in_class) refuse("\\H inside a character class");
        return emit("[^0-9A-Fa-f]", "");
      case 'v':
        return emit("\\x{0B}", "\\x{0B}");  // PCRE2's \v is a class of vertical spaces
      case 'p':
      case 'P': {
        const auto [name, negated] = property();
        const std::string members = property_members(name);
        if (!negated) {
          out_ += in_class ? members : str_cat("[", members, "]");
        } else if (!in_class) {
          out_ += str_cat("[^", members, "]");
        } else if (members == str_cat("\\p{", name, "}")) {
          out_ += str_cat("\\P{", name, "}");
        } else {
          refuse(str_cat("\\P{", name, "} inside a character class (PCRE2's Unicode tables are older)"));
        }
        return;
      }
      case 'u': {  // \uHHHH
        bool ok = i_ + 4 < p_.size();
        for (size_t k = 1; ok && k <= 4; ++k) ok = std::isxdigit(static_cast<unsigned char>(p_[i_ + k])) != 0;
        if (!ok) refuse("a malformed \\u escape");
        out_ += str_cat("\\x{", p_.substr(i_ + 1, 4), "}");
        i_ += 5;
        return;
      }
      case 'x': {  // \xHH or \x{H...}
        out_ += "\\x";
        ++i_;
        return;
      }
      case 'A':
      case 'z':
      case 'Z':
        if (in_class) refuse(str_cat("\\", c, " inside a character class"));
        [[fallthrough]];
      case 't':
      case 'n':
      case 'r':
      case 'f':
      case 'a':
      case 'e':
        out_ += '\\';
        out_ += c;
        ++i_;
        return;
      default:
        if (std::isalnum(static_cast<unsigned char>(c))) refuse(str_cat("the escape \\", c));
        out_ += '\\';  // an escaped punctuation character or space: itself
        out_ += c;
        ++i_;
        return;
    }
  }

  void char_class() {
    out_ += '[';
    ++i_;
    if (i_ < p_.size() && p_[i_] == '^') {
      out_ += '^';
      ++i_;
    }
    if (i_ < p_.size() && p_[i_] == ']') {  // a leading ']' is literal in both
      out_ += "\\]";
      ++i_;
    }
    while (true) {
      if (i_ >= p_.size()) refuse("an unterminated character class");
      const char c = p_[i_];
      if (c == ']') {
        out_ += ']';
        ++i_;
        return;
      }
      if (c == '\\') {
        escape(true);
      } else if (c == '[') {
        refuse("a nested class or POSIX bracket");
      } else if (c == '&' && i_ + 1 < p_.size() && p_[i_ + 1] == '&') {
        refuse("a class intersection (&&)");
      } else {
        out_ += c;
        ++i_;
      }
    }
  }

  void group() {
    if (i_ + 1 < p_.size() && p_[i_ + 1] == '?') {
      const std::string_view rest = p_.substr(i_ + 2);
      for (std::string_view ok : {":", "=", "!", "<=", "<!", ">", "#"}) {
        if (rest.starts_with(ok)) {
          out_ += str_cat("(?", ok);
          i_ += 2 + ok.size();
          return;
        }
      }
      if (rest.starts_with("<") || rest.starts_with("P<")) {  // a named group
        out_ += "(?";
        i_ += 2;
        return;
      }
      // Inline options: i (case), x (extended) and '-' read the same in both; Oniguruma's m
      // is PCRE2's s, and others differ.
      size_t k = 0;
      while (k < rest.size() && (rest[k] == 'i' || rest[k] == 'x' || rest[k] == '-')) ++k;
      if (k == 0 || k >= rest.size() || (rest[k] != ':' && rest[k] != ')'))
        refuse(str_cat("the group \"(?", rest.substr(0, std::min<size_t>(rest.size(), 3)), "\""));
      out_ += str_cat("(?", rest.substr(0, k + 1));
      i_ += 2 + k + 1;
      return;
    }
    out_ += '(';
    ++i_;
  }

  // A brace: "{,n}" is {0,n} in Oniguruma (literal in PCRE2 10.42); "{n,m}+" is a repeated
  // quantifier in Oniguruma but possessive in PCRE2.
  void brace() {
    const size_t close = p_.find('}', i_);
    std::string_view body = close == std::string_view::npos ? "" : p_.substr(i_ + 1, close - i_ - 1);
    const bool quantifier = !body.empty() && body.find_first_not_of("0123456789,") == std::string_view::npos &&
                            body != "," && std::count(body.begin(), body.end(), ',') <= 1;
    if (!quantifier) {
      out_ += "\\{";
      ++i_;
      return;
    }
    if (close + 1 < p_.size() && p_[close + 1] == '+') refuse("a quantifier {n,m} followed by +");
    out_ += body[0] == ',' ? str_cat("{0", body, "}") : str_cat("{", body, "}");
    i_ = close + 1;
  }

  std::string_view p_;
  const std::string& where_;
  size_t i_ = 0;
  std::string out_;
};

}  // namespace

std::string translate_oniguruma(std::string_view pattern, const std::string& where) {
  return Translator(pattern, where).run();
}

}  // namespace troupe::hf
