// JSON lines into `troupe preprocess` (data/preprocess.*): the input is the .jsonl file. The
// null tokenizer keeps each run cheap; the line reading and JSON field checks are what is fuzzed.
#include <cstdint>
#include <exception>

#include "data/preprocess.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  troupe::PreprocessOptions opt;
  opt.input = troupe::fuzz::write_scratch_file("input.jsonl", troupe::fuzz::as_text(data, size));
  opt.output_prefix = troupe::fuzz::scratch_dir() + "/out";
  opt.json_keys = {"text"};
  opt.tokenizer.type = "NullTokenizer";
  opt.tokenizer.vocab_size = 1000;
  opt.append_eod = true;
  opt.skip_bad_lines = (size % 2) == 1;  // both the stopping and the skipping paths
  try {
    troupe::preprocess_jsonl(opt);
  } catch (const std::exception&) {  // a clean error is a correct answer to bad input
  }
  return 0;
}
