#include "data/tokenizer.hpp"

#include "data/gpt2_tokenizer.hpp"
#include "data/hf_tokenizer/hf_tokenizer.hpp"
#include "data/null_tokenizer.hpp"
#include "base/check.hpp"

namespace troupe {

std::string Tokenizer::decode_skipping_special(std::span<const int32_t> ids) const {
  std::vector<int32_t> kept;
  kept.reserve(ids.size());
  for (int32_t id : ids)
    if (!is_special(id)) kept.push_back(id);
  return decode(kept);
}

std::unique_ptr<Tokenizer> build_tokenizer(const TokenizerOptions& options) {
  if (options.type == "GPT2BPETokenizer") {
    TROUPE_CHECK(!options.vocab_file.empty(), "--tokenizer-type GPT2BPETokenizer needs --vocab-file");
    TROUPE_CHECK(!options.merge_file.empty(), "--tokenizer-type GPT2BPETokenizer needs --merge-file");
    return std::make_unique<Gpt2Tokenizer>(
        Gpt2Tokenizer::from_files(options.vocab_file, options.merge_file, options.special_tokens));
  }
  if (options.type == "HuggingFaceTokenizer") {
    TROUPE_CHECK(!options.tokenizer_model.empty(),
                 "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model (a folder with tokenizer.json, or the "
                 "file)");
    return std::make_unique<HfTokenizer>(HfTokenizer::from_path(options.tokenizer_model));
  }
  if (options.type == "NullTokenizer") {
    TROUPE_CHECK(options.vocab_size > 0, "--tokenizer-type NullTokenizer needs --vocab-size > 0, got ",
                 options.vocab_size);
    return std::make_unique<NullTokenizer>(options.vocab_size);
  }
  TROUPE_FAIL("--tokenizer-type ", options.type,
              " is not supported (GPT2BPETokenizer, HuggingFaceTokenizer, NullTokenizer)");
}

}  // namespace troupe
