// A few FP8 training steps of a small GPT-2 (forward, backward, scale update), and what they
// leave on the host: for tests that run the steps two ways (fused and unfused casts) and expect
// the same bits.
#pragma once

#include "kernels/fp8_gemm.hpp"
#include "model/fp8/fp8_linears.hpp"
#include "model/gpt_chunk.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {

struct Fp8ChunkSteps {
  std::vector<Tensor> losses;  // per step, host f32 [B * T]
  Tensor grads;                // after the last step, host f32
  Tensor fwd_history, fwd_scale, bwd_history, bwd_scale;
};

// A small GPT-2 with widths multiples of 16 (cuBLASLt's FP8 GEMMs), vocabulary 512, no dropout.
inline GptConfig fp8_test_gpt() {
  GptConfig c = GptConfig::gpt2_124m();
  c.num_layers = 2;
  c.hidden_size = 128;
  c.num_attention_heads = 4;
  c.seq_length = 64;
  c.vocab_size = 512;
  c.hidden_dropout = 0.0f;
  c.attention_dropout = 0.0f;
  return c;
}

// fp8_test_gpt for `steps` steps, the gradients zeroed before each.
inline Fp8ChunkSteps fp8_chunk_steps(const Context& ctx, DType t, const Fp8Recipe& recipe, int steps = 3) {
  const GptConfig c = fp8_test_gpt();
  const ChunkSpec whole = ChunkSpec::whole_model();
  Tensor weights = Tensor::host(DType::f32, {ParamLayout(c, whole).size()});
  init_params(ParamLayout(c, whole), 3, weights);
  GptChunk model(ctx, c, whole, t);
  model.load_weights(round_through(weights, DType::bf16));
  model.enable_fp8(recipe);
  Fp8ChunkSteps out;
  for (int step = 0; step < steps; ++step) {
    const Tensor tokens = random_tokens({4, c.seq_length}, 10 + uint64_t(step), 512);
    const Tensor targets = random_tokens({4, c.seq_length}, 20 + uint64_t(step), 512);
    model.zero_grads();
    ActivationsPtr a = model.forward(tokens, targets, Tensor(), {.training = true, .loss_grad_scale = 1.0f / 256});
    model.backward(*a, Tensor(), Tensor());
    out.losses.push_back(to_host_f32(ctx, a->losses));
    model.release(std::move(a));
    model.fp8_update_scales();
  }
  out.grads = to_host_f32(ctx, model.grads());
  const Fp8Linears& fp8 = *model.fp8();
  out.fwd_history = to_host_f32(ctx, fp8.forward_meta().history);
  out.fwd_scale = to_host_f32(ctx, fp8.forward_meta().scale);
  out.bwd_history = to_host_f32(ctx, fp8.backward_meta().history);
  out.bwd_scale = to_host_f32(ctx, fp8.backward_meta().scale);
  return out;
}

inline void expect_same_bits(const Fp8ChunkSteps& got, const Fp8ChunkSteps& ref) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t s = 0; s < got.losses.size(); ++s) EXPECT_EQ(max_abs_diff(got.losses[s], ref.losses[s]), 0.0) << s;
  EXPECT_EQ(max_abs_diff(got.grads, ref.grads), 0.0);
  EXPECT_EQ(max_abs_diff(got.fwd_history, ref.fwd_history), 0.0);
  EXPECT_EQ(max_abs_diff(got.fwd_scale, ref.fwd_scale), 0.0);
  EXPECT_EQ(max_abs_diff(got.bwd_history, ref.bwd_history), 0.0);
  EXPECT_EQ(max_abs_diff(got.bwd_scale, ref.bwd_scale), 0.0);
}

}  // namespace troupe::test
