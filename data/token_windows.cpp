#include "data/token_windows.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/check.hpp"

namespace troupe {

std::vector<int32_t> tokenize_jsonl(const std::string& path, const Tokenizer& tokenizer, const std::string& key,
                                    int64_t max_documents) {
  std::ifstream in(path);
  TROUPE_CHECK(in.good(), "cannot open corpus ", path);
  std::vector<int32_t> ids;
  std::string line;
  int64_t line_no = 0, docs = 0;
  while ((max_documents < 0 || docs < max_documents) && std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      TROUPE_FAIL(path, ":", line_no, ": malformed JSON: ", e.what());
    }
    TROUPE_CHECK(j.is_object() && j.contains(key), path, ":", line_no, ": no \"", key, "\" key");
    TROUPE_CHECK(j.at(key).is_string(), path, ":", line_no, ": \"", key, "\" is not a string");
    tokenizer.encode_append(j.at(key).get_ref<const std::string&>(), ids);
    ids.push_back(tokenizer.eod());
    ++docs;
  }
  TROUPE_CHECK(!ids.empty(), "corpus ", path, " has no documents");
  return ids;
}

TokenWindows::TokenWindows(std::span<const int32_t> tokens, uint64_t seed)
    : tokens_(tokens.begin(), tokens.end()), rng_(seed) {}

void TokenWindows::fill(Batch& b, int64_t row, int64_t start, int64_t seq) const {
  int32_t* t = b.tokens.data_as<int32_t>() + row * seq;
  int32_t* y = b.targets.data_as<int32_t>() + row * seq;
  for (int64_t i = 0; i < seq; ++i) {
    t[i] = tokens_[size_t(start + i)];
    y[i] = tokens_[size_t(start + i + 1)];
  }
}

Batch TokenWindows::next(int64_t batch, int64_t seq) {
  TROUPE_CHECK(size() > seq + 1, "the token stream (", size(), " tokens) is shorter than one window of ", seq + 1);
  Batch b{Tensor::host(DType::i32, {batch, seq}), Tensor::host(DType::i32, {batch, seq})};
  std::uniform_int_distribution<int64_t> start(0, size() - seq - 1);
  for (int64_t r = 0; r < batch; ++r) fill(b, r, start(rng_), seq);
  return b;
}

Batch TokenWindows::window(int64_t index, int64_t batch, int64_t seq) const {
  TROUPE_CHECK(size() > seq + 1, "the token stream (", size(), " tokens) is shorter than one window of ", seq + 1);
  const int64_t windows = (size() - 1) / seq;
  Batch b{Tensor::host(DType::i32, {batch, seq}), Tensor::host(DType::i32, {batch, seq})};
  for (int64_t r = 0; r < batch; ++r) fill(b, r, ((index + r) % windows) * seq, seq);
  return b;
}

}  // namespace troupe
