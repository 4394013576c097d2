// A stopgap training-data source until the Megatron-style indexed GPT dataset lands:
// a JSON-lines corpus tokenized into one stream (EOD after each document), from which
// batches of random windows of T + 1 tokens are drawn: tokens = w[0:T], targets = w[1:T+1].
//
//   std::vector<int32_t> ids = tokenize_jsonl("assets/corpora/moby-dick.jsonl", *tokenizer);
//   TokenWindows train(std::span(ids).first(n_train), /*seed=*/1234);
//   Batch b = train.next(/*batch=*/8, /*seq=*/128);     // host i32 [8, 128] each
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "data/tokenizer.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

// Tokenizes the `key` field of every line; throws naming the file and line on malformed
// JSON, a missing key or a non-string value. max_documents < 0: all.
std::vector<int32_t> tokenize_jsonl(const std::string& path, const Tokenizer& tokenizer,
                                    const std::string& key = "text", int64_t max_documents = -1);

struct Batch {
  Tensor tokens;   // host i32 [B, T]
  Tensor targets;  // host i32 [B, T]
};

class TokenWindows {
 public:
  TokenWindows(std::span<const int32_t> tokens, uint64_t seed);
  // B windows at uniformly random offsets.
  Batch next(int64_t batch, int64_t seq);
  // B consecutive, non-overlapping windows starting at window `index` (wraps around):
  // a fixed evaluation set.
  Batch window(int64_t index, int64_t batch, int64_t seq) const;
  int64_t size() const { return int64_t(tokens_.size()); }

 private:
  void fill(Batch& b, int64_t row, int64_t start, int64_t seq) const;
  std::vector<int32_t> tokens_;
  std::mt19937_64 rng_;
};

}  // namespace troupe
