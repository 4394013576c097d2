// tokenizer.json's "model" as a BpeModel (data/bpe_model.hpp). Only type BPE is implemented
// (WordPiece, Unigram, WordLevel are refused by name), without dropout (null or 0) and without
// a continuing_subword_prefix or end_of_word_suffix (null or ""); merges may be "a b" strings or
// [a, b] pairs. byte_level says whether the pre-tokenizer ends with ByteLevel, i.e. whether
// pieces reach the model as raw bytes.
//
//   BpeModel m = parse_bpe_model(j["model"], /*byte_level=*/true, "qwen3/tokenizer.json");
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "data/bpe_model.hpp"

namespace troupe::hf {

BpeModel parse_bpe_model(const nlohmann::json& j, bool byte_level, const std::string& file);

}  // namespace troupe::hf
