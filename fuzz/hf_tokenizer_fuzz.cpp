// Hugging Face tokenizer.json (data/hf_tokenizer/*): a tokenizer that loads then encodes and
// decodes a fixed text with special tokens.
#include <cstdint>
#include <exception>
#include <optional>
#include <vector>

#include "data/hf_tokenizer/hf_tokenizer.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const troupe::HfTokenizer tok = troupe::HfTokenizer::from_strings(troupe::fuzz::as_text(data, size), std::nullopt);
    std::vector<int32_t> ids;
    tok.encode_with_special_tokens_append("Hello, world! <|endoftext|> Ünïcödé  12345\n\tend", ids);
    (void)tok.decode(ids);
  } catch (const std::exception&) {}
  return 0;
}
