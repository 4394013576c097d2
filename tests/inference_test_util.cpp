#include "tests/inference_test_util.hpp"

#include <algorithm>
#include <cmath>

#include "base/check.hpp"
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

GptConfig tiny_qwen3_inference_config(int hidden, int seq_length, int64_t vocab) {
  GptConfig c = tiny_inference_config(true, hidden, seq_length, vocab);
  c.kv_channels = hidden / 2;
  c.qk_layernorm = true;
  c.untie_embeddings_and_output_weights = false;
  return c;
}

std::vector<int32_t> random_token_list(int64_t n, uint64_t seed, int32_t vocab) {
  const Tensor t = random_tokens({n}, seed, vocab);
  return {t.data_as<int32_t>(), t.data_as<int32_t>() + n};
}

std::vector<Tensor> run_mixed_batch(InferenceModel& model, const std::vector<MixedSequence>& seqs, int decode_steps,
                                    uint64_t seed) {
  const Context& ctx = model.context();
  constexpr int64_t kBlockSize = 16;
  std::vector<std::vector<int32_t>> tokens, blocks(seqs.size());
  int64_t total_blocks = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t len = seqs[s].cached + seqs[s].fresh + decode_steps;
    tokens.push_back(random_token_list(len, seed + s, 1000));
    total_blocks += (len + kBlockSize - 1) / kBlockSize;
  }
  KvCache cache(ctx, model.config(), model.compute_dtype(), total_blocks, kBlockSize);
  for (size_t s = 0; s < seqs.size(); ++s)
    TROUPE_CHECK(cache.allocate(cache.blocks_for(int64_t(tokens[s].size())), blocks[s]), "run_mixed_batch: cache full");
  std::vector<Tensor> out;
  auto forward = [&](const std::vector<SequenceInput>& batch) {
    if (!batch.empty()) out.push_back(to_host_f32(ctx, model.forward(batch, cache)));
  };
  std::vector<SequenceInput> batch;
  for (size_t s = 0; s < seqs.size(); ++s)
    if (seqs[s].cached > 0) batch.push_back({std::span(tokens[s]).first(size_t(seqs[s].cached)), 0, blocks[s]});
  forward(batch);
  batch.clear();
  for (size_t s = 0; s < seqs.size(); ++s)
    batch.push_back(
        {std::span(tokens[s]).subspan(size_t(seqs[s].cached), size_t(seqs[s].fresh)), seqs[s].cached, blocks[s]});
  forward(batch);
  for (int step = 0; step < decode_steps; ++step) {
    batch.clear();
    for (size_t s = 0; s < seqs.size(); ++s) {
      const int64_t pos = seqs[s].cached + seqs[s].fresh + step;
      batch.push_back({std::span(tokens[s]).subspan(size_t(pos), 1), pos, blocks[s]});
    }
    forward(batch);
  }
  for (auto& b : blocks) cache.release(b);
  return out;
}

Tensor host_i32(const std::vector<int32_t>& values, Shape shape) {
  Tensor t = Tensor::host(DType::i32, std::move(shape));
  TROUPE_CHECK(t.numel() == int64_t(values.size()), "host_i32: ", values.size(), " values for ", t.str());
  std::copy(values.begin(), values.end(), t.data_as<int32_t>());
  return t;
}

std::vector<EngineOutcome> run_engine(std::vector<InferenceModel*> ranks,
                                      const std::vector<GenerationRequest>& requests) {
  InferenceEngine engine(std::move(ranks), {.num_blocks = 32, .block_size = 4});
  std::vector<EngineOutcome> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i)
    engine.add_request(requests[i], [&out, i](const TokenEvent& e) {
      if (!e.has_token) return;
      out[i].tokens.push_back(e.token);
      out[i].logprobs.push_back(e.logprob);
    });
  engine.run();
  EXPECT_EQ(engine.cache().free_blocks(), engine.cache().num_blocks()) << "blocks leaked";
  return out;
}

std::vector<GenerationRequest> engine_requests(bool greedy) {
  const int64_t lens[] = {3, 11, 1, 7, 5};
  std::vector<GenerationRequest> out;
  for (int i = 0; i < 5; ++i) {
    SamplingParams p;
    p.max_tokens = 4 + i;
    p.logprobs = true;
    p.seed = 200 + uint64_t(i);
    if (greedy)
      p.temperature = 0.0f;
    else if (i == 1)
      p.top_k = 5;
    else if (i == 3)
      p.top_p = 0.9f;
    out.push_back({random_token_list(lens[i], 10 + uint64_t(i), 50), p});
  }
  return out;
}

double expect_same_tokens(const std::vector<EngineOutcome>& got, const std::vector<EngineOutcome>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    EXPECT_EQ(got[i].tokens, ref[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].logprobs.size(), ref[i].logprobs.size()) << "request " << i;
    for (size_t j = 0; j < std::min(got[i].logprobs.size(), ref[i].logprobs.size()); ++j)
      worst = std::max(worst, double(std::abs(got[i].logprobs[j] - ref[i].logprobs[j])));
  }
  return worst;
}

}  // namespace troupe::test
