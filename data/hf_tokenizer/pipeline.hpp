// Everything an HfTokenizer reads from tokenizer.json and tokenizer_config.json, parsed once
// and shared (immutable) by all copies: normalizer, pre-tokenizer, BPE model, added tokens,
// post-processor, decoder, and the EOD/BOS ids Megatron's HuggingFaceTokenizer takes from
// tokenizer_config.json.
//
//   Pipeline p = load_pipeline("assets/tokenizers/qwen3");         // or .../tokenizer.json
//   p.eos == 151645                                                // "<|im_end|>"
//   Pipeline q = parse_pipeline(json_text, config_text, "t.json", "c.json");
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "data/bpe_model.hpp"
#include "data/hf_tokenizer/added_tokens.hpp"
#include "data/hf_tokenizer/decoder.hpp"
#include "data/hf_tokenizer/normalizer.hpp"
#include "data/hf_tokenizer/post_processor.hpp"
#include "data/hf_tokenizer/pre_tokenizer.hpp"

namespace troupe::hf {

struct Pipeline {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  AddedVocabulary added;
  PostProcessor post_processor;
  Decoder decoder;
  int32_t eos = -1;            // tokenizer_config.json's eos_token
  std::optional<int32_t> bos;  // tokenizer_config.json's bos_token, when it names one
  int64_t vocab_size = 0;      // one past the largest id of the model and the added tokens
  // Character-level models whose vocabulary has no token holding "▁" after another character:
  // no merge crosses such a point, so pieces are cut there before BPE without changing the
  // ids, and the word cache serves whole-document pieces (SentencePiece-style tokenizers have
  // no pre-tokenizer).
  bool cut_before_metaspace = false;
};

// PATH: a folder holding tokenizer.json (and tokenizer_config.json), or tokenizer.json itself
// (tokenizer_config.json beside it is read when present). Throws troupe::Error naming the file
// and what it cannot read or does not implement; also when no eos_token can be found.
Pipeline load_pipeline(const std::string& path);
// The same from the files' contents; config_json nullopt: there is no tokenizer_config.json.
Pipeline parse_pipeline(std::string_view tokenizer_json, std::optional<std::string_view> config_json,
                        const std::string& json_name, const std::string& config_name);

}  // namespace troupe::hf
