// `troupe preprocess`: JSON lines in, Megatron indexed datasets out, the job of Megatron's
// tools/preprocess_data.py (without sentence splitting). Each input line is one document; each
// --json-keys key gives its own dataset `{output_prefix}_{key}_document.{bin,idx}`.
//
// A key's value is a string (one sequence), or, as in Megatron, a list of strings (pre-split
// sentences: one sequence each, empty ones dropped). With append_eod the tokenizer's EOD id
// ends every non-empty document. Token dtype: uint16 when the vocabulary is under 65500 ids,
// else int32.
//
// Workers tokenize chunks of lines in parallel (each with its own tokenizer clone) while the
// calling thread writes them in input order, so the output is byte-identical for any worker
// count. Blank lines are ignored. A line that is not a JSON object, lacks a key, holds another
// type, or is not valid UTF-8 stops the run with "file:line: what" (or, with skip_bad_lines, is
// skipped in every output and counted). Outputs appear only when complete (temporary names,
// renamed at the end); an error leaves none behind.
//
//   PreprocessOptions opt;
//   opt.input = "corpus.jsonl";  opt.output_prefix = "out/corpus";
//   opt.tokenizer = {.vocab_file = "gpt2-vocab.json", .merge_file = "gpt2-merges.txt"};
//   opt.append_eod = true;  opt.workers = 8;
//   PreprocessResult r = preprocess_jsonl(opt);    // out/corpus_text_document.{bin,idx}
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/indexed_dataset.hpp"
#include "data/tokenizer.hpp"

namespace troupe {

struct PreprocessOptions {
  std::string input;                           // --input (JSON lines)
  std::vector<std::string> json_keys{"text"};  // --json-keys
  std::string output_prefix;                   // --output-prefix
  // --tokenizer-type, --vocab-file, --merge-file, --vocab-size. "<|endoftext|>" inside the
  // text is the EOD id by default, as in Megatron-LM since its tokenizers moved to HF's
  // GPT2TokenizerFast (Feb 2026); SpecialTokens::as_text gives older Megatron's behaviour.
  TokenizerOptions tokenizer;
  bool append_eod = false;      // --append-eod
  int workers = 1;              // --workers (<= 0: all hardware threads)
  bool skip_bad_lines = false;  // --skip-bad-lines
  // Lines go to workers in chunks of about this size (smaller on small inputs, so that every
  // worker gets some); the output does not depend on it.
  size_t chunk_bytes = size_t(1) << 20;
};

struct PreprocessProgress {
  int64_t documents = 0;
  int64_t bytes_done = 0;   // input bytes written out so far
  int64_t bytes_total = 0;  // input file size
  double seconds = 0;
};

struct PreprocessOutput {
  std::string key;
  std::string path_prefix;  // `{output_prefix}_{key}_document`
  TokenDtype dtype = TokenDtype::u16;
  int64_t documents = 0, sequences = 0, tokens = 0;
};

struct PreprocessResult {
  int64_t documents = 0;  // lines written (to every output)
  int64_t blank_lines = 0;
  int64_t skipped_lines = 0;                  // with skip_bad_lines
  std::vector<std::string> skipped_examples;  // the first few skipped lines' errors
  int64_t input_bytes = 0;
  double seconds = 0;
  std::vector<PreprocessOutput> outputs;
};

std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key);

// `on_progress` is called from the calling thread after each chunk is written.
PreprocessResult preprocess_jsonl(const PreprocessOptions& options,
                                  const std::function<void(const PreprocessProgress&)>& on_progress = {});

}  // namespace troupe
