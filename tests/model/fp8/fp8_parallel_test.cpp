// FP8 under parallel layouts, at the chunk level on CPU devices: after a step of delayed scaling,
// tensor-parallel ranks (each holding a shard of every weight) and data-parallel replicas (each a
// microbatch) hold the scales one device computes from the whole tensors and all microbatches:
// exactly where the amaxes are the same numbers (weights; replicas), within f32 rounding where
// the shards sum partial products. The next step's losses then match within a bound.
#include <mutex>

#include "actors/fabric/collective_groups.hpp"
#include "model/fp8/fp8_linears.hpp"
#include "model/gpt_chunk.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

GptConfig tiny() {
  GptConfig c = GptConfig::gpt2_124m();
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.seq_length = 8;
  c.vocab_size = 64;
  c.make_vocab_size_divisible_by = 8;
  c.hidden_dropout = 0.0f;
  c.attention_dropout = 0.0f;
  return c;
}

Fp8Recipe hybrid(const std::string& scaling) {
  return fp8_recipe_from_flags(
      {.format = "hybrid", .recipe = scaling, .amax_history_len = 2, .amax_compute_algo = "max"});
}

struct Outcome {
  Tensor fwd_scale, bwd_scale;  // host f32, after the first step's update
  Tensor losses;                // host f32, the second step's
};

Tensor host_copy(const Tensor& t) {
  Tensor h = Tensor::host(DType::f32, t.shape());
  copy(cpu(), t, h);
  return h;
}

// Two forward/backward passes of `batches` (one microbatch each) with the scales updated after
// the first, on one chunk: tokens of every microbatch go through it.
Outcome run(GptChunk& model, const std::vector<Tensor>& tokens, const std::vector<Tensor>& targets,
            const std::vector<Collectives*>& groups) {
  Outcome o;
  for (int step = 0; step < 2; ++step) {
    Tensor losses;
    for (size_t m = 0; m < tokens.size(); ++m) {
      ActivationsPtr a = model.forward(tokens[m], targets[m], Tensor(), {.training = true, .loss_grad_scale = 0.01f});
      model.backward(*a, Tensor(), Tensor());
      if (m == 0) losses = host_copy(a->losses);
      model.release(std::move(a));
    }
    if (step == 1) {
      o.losses = losses;
      break;
    }
    model.fp8_update_scales(groups);
    o.fwd_scale = host_copy(model.fp8()->forward_meta().scale);
    o.bwd_scale = host_copy(model.fp8()->backward_meta().scale);
  }
  return o;
}

class Fp8Parallel : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8Parallel, TensorParallelRanksScaleAsOneDevice) {
  const GptConfig c = tiny();
  const std::vector<Tensor> tokens = {random_tokens({2, c.seq_length}, 3, 64)};
  const std::vector<Tensor> targets = {random_tokens({2, c.seq_length}, 4, 64)};
  GptChunk whole(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  whole.init_weights(5);
  whole.enable_fp8(hybrid(GetParam()));
  const Outcome ref = run(whole, tokens, targets, {});

  const int T = 2;
  // With sequence parallelism the linears cast the gathered norm outputs; without, the norms
  // write the casts (or amaxes) of qkv's and fc1's inputs.
  for (bool sequence_parallel : {true, false}) {
    auto group = actors::make_cpu_group(T, {"tp", std::chrono::seconds(60)});
    std::vector<Outcome> got(T);
    run_threads(T, [&](int t) {
      try {
        const Context ctx = Context::cpu();
        GptChunk model(ctx, c, ChunkSpec::whole_model(), DType::f32,
                       {{t, T}, sequence_parallel, group[size_t(t)].get()});
        model.init_weights(5);
        model.enable_fp8(hybrid(GetParam()));
        got[size_t(t)] = run(model, tokens, targets, {});
      } catch (...) {
        for (auto& g : group) g->abort();
        throw;
      }
    });
    for (int t = 0; t < T; ++t) {
      const Outcome& o = got[size_t(t)];
      if (GetParam() == "delayed") {
        for (int64_t col = 0; col < o.fwd_scale.numel(); ++col) {
          if (col % 2 == 1)  // a weight: the shards' amaxes reduce to the whole weight's, bit for bit
            EXPECT_EQ(o.fwd_scale.at(col), ref.fwd_scale.at(col)) << "rank " << t << " weight of linear " << col / 2;
          else
            EXPECT_NEAR(o.fwd_scale.at(col) / ref.fwd_scale.at(col), 1.0, 1e-5) << "rank " << t << " input " << col / 2;
        }
        for (int64_t col = 0; col < o.bwd_scale.numel(); ++col)
          EXPECT_NEAR(o.bwd_scale.at(col) / ref.bwd_scale.at(col), 1.0, 1e-5) << "rank " << t << " dy " << col;
      }
      const double err = rel_error(o.losses, ref.losses);
      std::printf("  %s%s rank %d: second-step losses against one device: rel error %.2e\n", GetParam().c_str(),
                  sequence_parallel ? " SP" : "", t, err);
      EXPECT_LT(err, 1e-3) << "sequence parallel " << sequence_parallel;
    }
  }
}

TEST_P(Fp8Parallel, DataParallelReplicasScaleAsOneDevice) {
  const GptConfig c = tiny();
  const std::vector<Tensor> tokens = {random_tokens({2, c.seq_length}, 3, 64), random_tokens({2, c.seq_length}, 5, 64)};
  const std::vector<Tensor> targets = {random_tokens({2, c.seq_length}, 4, 64),
                                       random_tokens({2, c.seq_length}, 6, 64)};
  GptChunk whole(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  whole.init_weights(5);
  whole.enable_fp8(hybrid(GetParam()));
  const Outcome ref = run(whole, tokens, targets, {});

  const int D = 2;
  auto group = actors::make_cpu_group(D, {"dp", std::chrono::seconds(60)});
  std::vector<Outcome> got(D);
  run_threads(D, [&](int d) {
    try {
      const Context ctx = Context::cpu();
      GptChunk model(ctx, c, ChunkSpec::whole_model(), DType::f32);
      model.init_weights(5);
      model.enable_fp8(hybrid(GetParam()));
      got[size_t(d)] = run(model, {tokens[size_t(d)]}, {targets[size_t(d)]}, {group[size_t(d)].get()});
    } catch (...) {
      for (auto& g : group) g->abort();
      throw;
    }
  });
  // Delayed: each replica's amaxes are one device's for its microbatch; reduced, the same scales.
  // (Tensorwise scales belong to the last cast and carry nothing across steps.)
  for (int d = 0; d < D && GetParam() == "delayed"; ++d) {
    EXPECT_EQ(max_abs_diff(got[size_t(d)].fwd_scale, ref.fwd_scale), 0.0) << "replica " << d;
    EXPECT_EQ(max_abs_diff(got[size_t(d)].bwd_scale, ref.bwd_scale), 0.0) << "replica " << d;
  }
  // Replica 0's second step is one device's first microbatch of its second step, bit for bit.
  EXPECT_EQ(max_abs_diff(got[0].losses, ref.losses), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Recipes, Fp8Parallel, ::testing::Values("delayed", "tensorwise"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace troupe::test
