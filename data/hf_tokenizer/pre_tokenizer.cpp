#include "data/hf_tokenizer/pre_tokenizer.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "data/byte_unicode.hpp"
#include "data/gpt2_pretokenize.hpp"
#include "data/hf_tokenizer/json_reader.hpp"
#include "data/hf_tokenizer/unicode_props.hpp"

namespace troupe::hf {
namespace {

// HF's Whitespace pre-tokenizer: the Rust regex \w+|[^\w\s]+ with the regex crate's Unicode
// classes (\w: Alphabetic, marks, decimal digits, connector punctuation, joiners; \s:
// White_Space), written for PCRE2.
constexpr std::string_view kWhitespacePattern =
    "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]+|"
    "[^\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}\\p{White_Space}]+";

// HF's Pattern::find_matches for a regex: the matches and the stretches between them.
void flag_matches(const std::vector<Regex::Match>& matches, uint32_t size, bool invert, std::vector<Flagged>& out) {
  out.clear();
  uint32_t prev = 0;
  for (const Regex::Match& m : matches) {
    if (prev != m.begin) out.push_back({prev, m.begin, invert});
    out.push_back({m.begin, m.end, !invert});
    prev = m.end;
  }
  if (prev != size) out.push_back({prev, size, invert});
}

// HF's Pattern::find_matches for a character predicate: each such character is a match.
template <typename Pred>
void flag_chars(std::string_view piece, Pred pred, std::vector<Flagged>& out) {
  out.clear();
  uint32_t last = 0;
  for (size_t i = 0; i < piece.size();) {
    char32_t cp;
    const auto len = uint32_t(next_code_point(piece, i, cp));
    if (pred(cp)) {
      if (last < i) out.push_back({last, uint32_t(i), false});
      out.push_back({uint32_t(i), uint32_t(i) + len, true});
      last = uint32_t(i) + len;
    }
    i += len;
  }
  if (piece.size() > last) out.push_back({last, uint32_t(piece.size()), false});
}

SplitBehavior parse_behavior(JsonReader& r) {
  const std::string b = r.string("behavior");
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  r.fail(str_cat("the Split behavior \"", b,
                 "\" is not implemented (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)"));
}

}  // namespace

void split_flagged(const std::vector<Flagged>& flagged, SplitBehavior behavior,
                   std::vector<std::pair<uint32_t, uint32_t>>& kept) {
  kept.clear();
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::isolated:
      for (const Flagged& f : flagged) kept.emplace_back(f.begin, f.end);
      return;
    case SplitBehavior::removed:
      for (const Flagged& f : flagged)
        if (!f.match) kept.emplace_back(f.begin, f.end);
      return;
    case SplitBehavior::contiguous:
      for (const Flagged& f : flagged) {
        if (f.match == previous_match && !kept.empty())
          kept.back().second = f.end;
        else
          kept.emplace_back(f.begin, f.end);
        previous_match = f.match;
      }
      return;
    case SplitBehavior::merged_with_previous:
      for (const Flagged& f : flagged) {
        if (f.match && !previous_match && !kept.empty())
          kept.back().second = f.end;
        else
          kept.emplace_back(f.begin, f.end);
        previous_match = f.match;
      }
      return;
    case SplitBehavior::merged_with_next:
      for (auto it = flagged.rbegin(); it != flagged.rend(); ++it) {
        if (it->match && !previous_match && !kept.empty())
          kept.back().first = it->begin;
        else
          kept.emplace_back(it->begin, it->end);
        previous_match = it->match;
      }
      std::reverse(kept.begin(), kept.end());
      return;
  }
}

PreTokenizer PreTokenizer::parse(const nlohmann::json& j, const std::string& file) {
  PreTokenizer p;
  if (!j.is_null()) p.add(j, "pre_tokenizer", file);
  for (size_t i = 0; i + 1 < p.steps_.size(); ++i)
    TROUPE_CHECK(p.steps_[i].kind != Kind::byte_level, file,
                 ": pre_tokenizer: a step after ByteLevel is not implemented (it would see the byte alphabet)");
  return p;
}

void PreTokenizer::add(const nlohmann::json& j, const std::string& where, const std::string& file) {
  JsonReader r(j, where, file);
  const std::string& type = r.type();
  Step step{};
  if (type == "Sequence") {
    const nlohmann::json& list = r.list("pretokenizers");
    r.finish();
    for (size_t i = 0; i < list.size(); ++i) add(list[i], json_index(where + ".pretokenizers", i), file);
    return;
  }
  if (type == "Split") {
    step.kind = Kind::split;
    const JsonReader::Pattern pattern = r.pattern("pattern");
    step.regex = Regex::of(pattern.regex, pattern.text, r.context());
    step.behavior = parse_behavior(r);
    step.invert = r.boolean("invert");
  } else if (type == "ByteLevel") {
    step.kind = Kind::byte_level;
    step.add_prefix_space = r.boolean("add_prefix_space", true);
    step.use_regex = r.boolean("use_regex", true);
    r.ignore("trim_offsets");  // offsets only
  } else if (type == "Metaspace") {
    step.kind = Kind::metaspace;
    step.replacement = r.string("replacement");
    if (next_code_point(step.replacement, 0, step.replacement_cp) != int(step.replacement.size()))
      r.fail(str_cat("\"replacement\" must be one character, got \"", step.replacement, "\""));
    const std::string scheme = r.prepend_scheme();
    step.prepend = scheme == "always" ? Prepend::always : scheme == "first" ? Prepend::first : Prepend::never;
    step.split = r.boolean("split", true);
    r.ignore("str_rep");  // HF ignores it too
  } else if (type == "Digits") {
    step.kind = Kind::digits;
    step.individual_digits = r.boolean("individual_digits");
  } else if (type == "Whitespace") {
    step.kind = Kind::whitespace;
    step.regex = Regex::pcre2(kWhitespacePattern, r.context());
    step.behavior = SplitBehavior::removed;
    step.invert = true;
  } else if (type == "WhitespaceSplit") {
    step.kind = Kind::whitespace_split;
  } else {
    r.fail(str_cat("the pre-tokenizer type \"", type,
                   "\" is not implemented (Split, ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit, "
                   "Sequence)"));
  }
  r.finish();
  steps_.push_back(std::move(step));
}

void PreTokenizer::pre_tokenize(std::string_view text, bool at_origin, EncodeScratch& s) const {
  s.pieces_text = text;
  s.spans.clear();
  if (!text.empty()) s.spans.push_back({0, uint32_t(text.size()), at_origin});
  for (const Step& step : steps_) run(step, s);
}

void PreTokenizer::run(const Step& step, EncodeScratch& s) const {
  std::vector<TextSpan>& out = s.spans_next;
  out.clear();
  // Keeps the non-empty parts of `kept` (relative to `span`) as pieces.
  auto keep = [&](const TextSpan& span) {
    for (const auto& [b, e] : s.kept)
      if (e > b) out.push_back({span.begin + b, span.begin + e, span.at_origin && b == 0});
  };
  // Steps that rewrite the text build it in pieces_spare, then swap it in.
  std::string& rewritten = s.pieces_spare;
  const bool rewrites = (step.kind == Kind::byte_level && step.add_prefix_space) || step.kind == Kind::metaspace;
  if (rewrites) rewritten.clear();

  for (const TextSpan& span : s.spans) {
    std::string_view piece = s.pieces_text.substr(span.begin, span.end - span.begin);
    TextSpan at = span;
    switch (step.kind) {
      case Kind::split:
      case Kind::whitespace:
        step.regex->find_all(piece, s.regex, s.matches);
        flag_matches(s.matches, uint32_t(piece.size()), step.invert, s.flagged);
        split_flagged(s.flagged, step.behavior, s.kept);
        keep(span);
        break;
      case Kind::digits:
        flag_chars(piece, is_numeric, s.flagged);
        split_flagged(s.flagged, step.individual_digits ? SplitBehavior::isolated : SplitBehavior::contiguous, s.kept);
        keep(span);
        break;
      case Kind::whitespace_split:
        flag_chars(piece, is_white_space, s.flagged);
        split_flagged(s.flagged, SplitBehavior::removed, s.kept);
        keep(span);
        break;
      case Kind::byte_level: {
        if (step.add_prefix_space) {
          at.begin = uint32_t(rewritten.size());
          if (piece.empty() || piece[0] != ' ') rewritten += ' ';
          rewritten += piece;
          at.end = uint32_t(rewritten.size());
        }
        if (!step.use_regex) {
          out.push_back(at);
          break;
        }
        // GPT-2's regex, as HF's ByteLevel has it: data/gpt2_pretokenize's matcher.
        std::string_view whole = step.add_prefix_space ? std::string_view(rewritten) : s.pieces_text;
        std::string_view sub = whole.substr(at.begin, at.end - at.begin);
        Gpt2Pretokenizer it(sub);
        std::string_view p;
        while (it.next(p)) {
          const auto b = uint32_t(p.data() - sub.data());
          out.push_back({at.begin + b, at.begin + b + uint32_t(p.size()), at.at_origin && b == 0});
        }
        break;
      }
      case Kind::metaspace: {
        at.begin = uint32_t(rewritten.size());
        const bool prepend = step.prepend == Prepend::always || (step.prepend == Prepend::first && span.at_origin);
        // HF replaces the spaces first, then prepends unless the piece starts with the replacement.
        if (prepend && !piece.starts_with(step.replacement) && !piece.starts_with(' ')) rewritten += step.replacement;
        for (char c : piece) {
          if (c == ' ')
            rewritten += step.replacement;
          else
            rewritten += c;
        }
        at.end = uint32_t(rewritten.size());
        if (!step.split) {
          out.push_back(at);
          break;
        }
        const std::string_view sub = std::string_view(rewritten).substr(at.begin, at.end - at.begin);
        flag_chars(
            sub, [&](char32_t cp) { return cp == step.replacement_cp; }, s.flagged);
        split_flagged(s.flagged, SplitBehavior::merged_with_next, s.kept);
        keep(at);
        break;
      }
    }
  }
  if (rewrites) {
    s.pieces_owned.swap(rewritten);
    s.pieces_text = s.pieces_owned;
  }
  s.spans.swap(out);
}

}  // namespace troupe::hf
