// Mixture-of-experts models in the inference model on CUDA against the CPU (f32) on the same
// weights, with a sigmoid router and a learned expert bias loaded onto the device:
// bf16 (the router in f32 from the bf16 weight, as in training) within bf16's tolerance,
// f32 to summation order; a prefill of several sequences, then decode steps. Decode steps
// replayed from CUDA graphs against the same steps run op by op: bit-equal logits where the
// batch fills its bucket (the same kernels on the same shapes), within bf16's tolerance where it
// is padded (3 sequences in the bucket of 4), and the same greedy tokens.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "model/inference/inference_model.hpp"
#include "tests/inference_test_util.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

// Qwen-MoE-like: RMSNorm, RoPE, SwiGLU, 8 experts top-2 (sigmoid scores with an expert bias)
// with a shared expert and its gate; layer 1 of 2 dense.
GptConfig tiny_moe() {
  GptConfig c = tiny_inference_config(true, 128, 128, 1000);
  c.disable_bias_linear = true;
  c.moe.num_experts = 8;
  c.moe.moe_router_topk = 2;
  c.moe.moe_ffn_hidden_size = 64;
  c.moe.moe_layer_freq = parse_moe_layer_freq("[1,0]");
  c.moe.moe_shared_expert_intermediate_size = 96;
  c.moe.moe_shared_expert_gate = true;
  c.moe.moe_router_score_function = MoeScoreFunction::sigmoid;
  c.moe.moe_router_enable_expert_bias = true;
  c.moe.moe_router_load_balancing_type = MoeLoadBalancing::none;
  c.validate();
  return c;
}

// A prefill of S prompts of different lengths, then `steps` decode steps of all S; every step's
// logits on the host.
std::vector<Tensor> run_steps(InferenceModel& model, int S, int steps) {
  const GptConfig& c = model.config();
  KvCache cache(model.context(), c, model.compute_dtype(), 64, 16);
  std::vector<std::vector<int32_t>> blocks(static_cast<size_t>(S));
  std::vector<std::vector<int32_t>> tokens;
  for (int s = 0; s < S; ++s) {
    EXPECT_TRUE(cache.allocate(4, blocks[size_t(s)]));
    tokens.push_back(random_token_list(5 + 17 * s, uint64_t(10 + s), int32_t(c.vocab_size)));
  }
  std::vector<Tensor> out;
  std::vector<int64_t> cached(size_t(S), 0);
  for (int step = 0; step <= steps; ++step) {
    if (step > 0) {
      const std::vector<int32_t> feed = random_token_list(S, 100 + uint64_t(step), int32_t(c.vocab_size));
      for (int s = 0; s < S; ++s) tokens[size_t(s)].push_back(feed[size_t(s)]);
    }
    std::vector<SequenceInput> batch;
    for (size_t s = 0; s < size_t(S); ++s)
      batch.push_back({std::span(tokens[s]).subspan(size_t(cached[s])), cached[s], blocks[s]});
    out.push_back(to_host_f32(model.context(), model.forward(batch, cache)));
    for (size_t s = 0; s < size_t(S); ++s) cached[s] = int64_t(tokens[s].size());
  }
  return out;
}

// The greedy token of each sequence (row) of host logits [S, V].
std::vector<int64_t> argmax_rows(const Tensor& logits) {
  std::vector<int64_t> out;
  const int64_t v = logits.dim(1);
  for (int64_t s = 0; s < logits.dim(0); ++s) {
    const float* row = logits.data_as<float>() + s * v;
    out.push_back(std::max_element(row, row + v) - row);
  }
  return out;
}

TEST(InferenceMoeCuda, MatchesCpuAndGraphsMatchEagerDecode) {
  const GptConfig c = tiny_moe();
  const Tensor w = random_normal({ParamLayout(c, ChunkSpec::whole_model()).size()}, 3, 0.05f);
  InferenceModel on_cpu(cpu(), c, DType::f32, {.max_tokens = 256, .max_sequences = 8});
  InferenceModel eager(gpu(), c, DType::bf16, {.max_tokens = 256, .max_sequences = 8, .cuda_graphs = false});
  InferenceModel graphs(gpu(), c, DType::bf16, {.max_tokens = 256, .max_sequences = 8});
  InferenceModel exact(gpu(), c, DType::f32, {.max_tokens = 256, .max_sequences = 8});  // f32, graphs
  const Tensor bias = random_normal({c.moe.num_experts}, 9, 0.5f);                      // layer 0, the MoE one
  for (InferenceModel* m : {&on_cpu, &eager, &graphs, &exact}) {
    m->load_weights(w);
    m->load_expert_bias(0, bias);
  }
  EXPECT_TRUE(graphs.options().cuda_graphs);

  for (int S : {1, 2, 3, 4}) {
    const std::vector<Tensor> ref = run_steps(on_cpu, S, 6);
    const std::vector<Tensor> e = run_steps(eager, S, 6);
    const std::vector<Tensor> g = run_steps(graphs, S, 6);
    const std::vector<Tensor> f = run_steps(exact, S, 6);
    double worst_half = 0, worst_graph = 0, worst_f32 = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      worst_half = std::max(worst_half, rel_error(e[i], ref[i]));
      worst_graph = std::max(worst_graph, rel_error(g[i], e[i]));
      worst_f32 = std::max(worst_f32, rel_error(f[i], ref[i]));
      EXPECT_EQ(argmax_rows(g[i]), argmax_rows(e[i])) << "S " << S << " step " << i;
    }
    std::printf(
        "MoE S=%d: CUDA bf16 vs CPU f32 max rel err %.2e, graph vs op by op %.2e, CUDA f32 (graphs) vs CPU "
        "f32 %.2e\n",
        S, worst_half, worst_graph, worst_f32);
    EXPECT_LT(worst_half, 3e-2);
    if (S == 3)
      EXPECT_LT(worst_graph, 1e-2);  // padded to 4: other shapes, other GEMM algorithms
    else
      EXPECT_EQ(worst_graph, 0.0);  // the same kernels on the same shapes
    EXPECT_LT(worst_f32, 1e-5);     // the same arithmetic in another order (f32 GEMMs without TF32)
  }
  EXPECT_GE(graphs.cuda_graphs_captured(), 1u);
  EXPECT_GE(exact.cuda_graphs_captured(), 1u);
  EXPECT_EQ(eager.cuda_graphs_captured(), 0u);
}

}  // namespace
}  // namespace troupe::test
