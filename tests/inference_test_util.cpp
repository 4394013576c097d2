#include "tests/inference_test_util.hpp"

#include <algorithm>

#include "kernels/check.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {

GptConfig tiny_inference_config(bool llama, int hidden, int seq_length, int64_t vocab) {
  GptConfig c = llama ? GptConfig::llama_style(2, hidden, 4, 2, 3 * hidden / 2) : GptConfig::gpt2_124m();
  if (!llama) {
    c.num_layers = 2;
    c.hidden_size = hidden;
    c.num_attention_heads = 4;
  }
  c.seq_length = seq_length;
  c.vocab_size = vocab;
  c.make_vocab_size_divisible_by = 8;
  return c;
}

std::vector<int32_t> random_token_list(int64_t n, uint64_t seed, int32_t vocab) {
  const Tensor t = random_tokens({n}, seed, vocab);
  return {t.data_as<int32_t>(), t.data_as<int32_t>() + n};
}

Tensor host_i32(const std::vector<int32_t>& values, Shape shape) {
  Tensor t = Tensor::host(DType::i32, std::move(shape));
  TROUPE_CHECK(t.numel() == int64_t(values.size()), "host_i32: ", values.size(), " values for ", t.str());
  std::copy(values.begin(), values.end(), t.data_as<int32_t>());
  return t;
}

}  // namespace troupe::test
