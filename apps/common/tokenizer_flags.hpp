// Megatron's tokenizer flags, the same in preprocess, train, generate and serve, and the
// tokenizer files that travel with a model (into checkpoints, out to HF folders):
//   --tokenizer-type GPT2BPETokenizer  --vocab-file vocab.json --merge-file merges.txt
//   --tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR_OR_tokenizer.json
//   --tokenizer-type NullTokenizer --vocab-size N
//
//   TokenizerOptions t;
//   add_tokenizer_flags(cmd, t);                 // then build_tokenizer(t)
//   for (auto& [path, name] : tokenizer_source_files(t)) copy path to dir/name
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/tokenizer.hpp"

namespace troupe::apps {

// Registers --tokenizer-type --vocab-file --merge-file --tokenizer-model --vocab-size.
void add_tokenizer_flags(CLI::App* cmd, TokenizerOptions& options);

// Whether any tokenizer flag was given (a model folder's own tokenizer is used otherwise).
bool tokenizer_flags_given(const TokenizerOptions& options);

// (path, file name) of the files that describe the tokenizer `options` names: vocab.json and
// merges.txt, or tokenizer.json with tokenizer_config.json (when there is one) — what a
// checkpoint and an HF folder carry so `generate` and `serve` find the tokenizer there.
std::vector<std::pair<std::string, std::string>> tokenizer_source_files(const TokenizerOptions& options);

// The tokenizer and generation files in `dir` (tokenizer.json, tokenizer_config.json,
// generation_config.json, vocab.json, merges.txt) as (path, name), for copying along.
std::vector<std::pair<std::string, std::string>> tokenizer_files_in(const std::string& dir);

// The tokenizer a model folder carries: HuggingFaceTokenizer when it has tokenizer.json, else
// GPT2BPETokenizer when it has vocab.json and merges.txt, else nullopt.
std::optional<TokenizerOptions> tokenizer_in(const std::string& dir);

// The folder of an HF tokenizer (--tokenizer-model names the folder or its tokenizer.json).
std::string hf_tokenizer_dir(const TokenizerOptions& options);

}  // namespace troupe::apps
