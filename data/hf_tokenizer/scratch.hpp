// The buffers one HfTokenizer copy reuses from one encode() to the next, so that a warm
// tokenizer allocates nothing per call: PCRE2's match state, the normalized text, the
// pre-tokenizer's pieces, the added-token splits. Each tokenizer copy (thread) has its own;
// the components that fill them are immutable and shared.
//
//   EncodeScratch s;
//   normalizer.normalize(text, s);                    // text normalized in place
//   pre_tokenizer.pre_tokenize(text, true, s);        // pieces: s.spans over s.pieces_text
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/hf_tokenizer/onig_regex.hpp"

namespace troupe::hf {

// A piece of text: [begin, end) in bytes. at_origin: it starts where the input text starts
// (Metaspace's prepend_scheme "first" asks).
struct TextSpan {
  uint32_t begin, end;
  bool at_origin;
};

// A stretch of the input between added tokens (id < 0) or one added token (its id).
struct Section {
  uint32_t begin, end;
  int32_t id;
};

// One entry of HF's Pattern::find_matches: a stretch of a piece and whether the pattern
// matched it.
struct Flagged {
  uint32_t begin, end;
  bool match;
};

struct EncodeScratch {
  RegexScratch regex;
  std::vector<Regex::Match> matches;
  std::vector<Flagged> flagged;
  std::vector<std::pair<uint32_t, uint32_t>> kept;

  std::string sanitized;   // the input with ill-formed UTF-8 replaced
  std::string normalized;  // one section, normalized
  std::string normalize_buffer;
  std::vector<int32_t> code_points;  // utf8proc's buffer

  std::vector<Section> sections, subsections;

  // The pre-tokenizer's output: pieces_text.substr(span) for each span.
  std::string_view pieces_text;
  std::string pieces_owned, pieces_spare;
  std::vector<TextSpan> spans, spans_next;
};

}  // namespace troupe::hf
