// The tokenizer interface the data pipeline and the apps use, and Megatron's
// `--tokenizer-type` factory. Three implementations: Gpt2Tokenizer (GPT2BPETokenizer: byte-level
// BPE from --vocab-file/--merge-file), HfTokenizer (HuggingFaceTokenizer: a tokenizer.json from
// --tokenizer-model) and NullTokenizer (ids written as text, for mock data).
//
//   TokenizerOptions opt;
//   opt.type = "GPT2BPETokenizer";
//   opt.vocab_file = "assets/gpt2/gpt2-vocab.json";
//   opt.merge_file = "assets/gpt2/gpt2-merges.txt";
//   std::unique_ptr<Tokenizer> tok = build_tokenizer(opt);
//   std::vector<int32_t> ids = tok->encode("Hello world");   // {15496, 995}
//   std::string text = tok->decode(ids);                     // "Hello world"
//   ids.push_back(tok->eod());                               // 50256, ends a document
//
// Thread safety: encode() may update a per-object cache, so one object serves one thread at a
// time; clone() gives another thread its own (cheap: the vocabulary is shared).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of `text` to `ids` (lets a caller reuse one buffer across documents).
  virtual void encode_append(std::string_view text, std::vector<int32_t>& ids) const = 0;
  std::vector<int32_t> encode(std::string_view text) const {
    std::vector<int32_t> ids;
    encode_append(text, ids);
    return ids;
  }
  // Throws troupe::Error on an id the tokenizer does not know.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  // HF's encode(text, add_special_tokens=True): the ids of `text` with the tokens the
  // tokenizer's post-processor puts around one sequence (Mistral's "<s>" before it). What
  // preprocess, generate and serve encode a document or prompt with (as Megatron's
  // HuggingFaceTokenizer and vLLM do); chat templates write their special tokens themselves
  // and are encoded with encode_append.
  virtual void encode_with_special_tokens_append(std::string_view text, std::vector<int32_t>& ids) const {
    encode_append(text, ids);
  }
  // The id of a token by its spelling in the vocabulary or the added tokens ("<|eot_id|>",
  // "<s>"), or nullopt.
  virtual std::optional<int32_t> token_id(std::string_view token) const = 0;
  // Whether `id` is a special token (decode_skipping_special() leaves it out).
  virtual bool is_special(int32_t id) const = 0;
  // HF's decode(ids, skip_special_tokens=True): the text a user sees.
  std::string decode_skipping_special(std::span<const int32_t> ids) const;

  // Number of ids (before the model pads it to make_vocab_size_divisible_by).
  virtual int64_t vocab_size() const = 0;
  // The end-of-document id appended after each document.
  virtual int32_t eod() const = 0;
  // An independent copy for another thread.
  virtual std::unique_ptr<Tokenizer> clone() const = 0;
};

// How the text "<|endoftext|>" inside a document is encoded by GPT-2.
enum class SpecialTokens {
  // As the EOD id 50256. HF's default: GPT2TokenizerFast.encode(text) and
  // tokenizers.Tokenizer with "<|endoftext|>" as an added special token; also Megatron-LM's
  // megatron/core/tokenizers, which wrap HF's tokenizer.
  recognize,
  // As the ordinary text it is: "<", "|", "end", "of", "text", "|", ">". Megatron-LM's legacy
  // _GPT2BPETokenizer (megatron/training/tokenizer, special_tokens=[]) and tiktoken's
  // encode_ordinary.
  as_text,
};

// Megatron's tokenizer flags.
struct TokenizerOptions {
  std::string type = "GPT2BPETokenizer";  // --tokenizer-type: GPT2BPETokenizer | HuggingFaceTokenizer | NullTokenizer
  std::string vocab_file;                 // --vocab-file (GPT2BPETokenizer)
  std::string merge_file;                 // --merge-file (GPT2BPETokenizer)
  std::string tokenizer_model;            // --tokenizer-model: folder or tokenizer.json (HuggingFaceTokenizer)
  int64_t vocab_size = 0;                 // --vocab-size (NullTokenizer: ids 0..vocab_size, eod = vocab_size)
  SpecialTokens special_tokens = SpecialTokens::recognize;
};

// Throws troupe::Error naming the flag or file at fault.
std::unique_ptr<Tokenizer> build_tokenizer(const TokenizerOptions& options);

}  // namespace troupe
