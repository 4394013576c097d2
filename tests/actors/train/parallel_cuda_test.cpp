// Tensor, sequence, data and context parallelism on GPUs (NCCL groups, one rank per GPU): every layout
// that fits the visible GPUs trains the same losses as one GPU, within bf16 noise (tensor
// parallelism sums the GEMMs' partial products in another order); a Qwen3-shaped model on one GPU
// trains the CPU's losses, and on TP2 the one GPU's; so does a mixture-of-experts model (the
// experts split over the tensor group, the router's probs gradient all-reduced over it).
#include <cstdio>

#if TROUPE_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif
#include "tests/actors/train/moe_test_model.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

struct Layout {
  int T, P, D;
  bool sp, dist, overlap;
  int C = 1;  // context parallelism: the ring's block attention kernels, all_to_all_v over NCCL
};

TEST(ParallelCuda, LayoutsMatchOneGpu) {
  const int gpus = visible_gpus();
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs (NCCL groups put one rank on each)";
  const int iters = 6;
  const std::vector<IterationStats> ref = train_iterations(gpu_config(1, 1), iters);
  const Layout layouts[] = {
      {2, 1, 1, false, false, false},    {2, 1, 1, true, false, false},    {1, 1, 2, false, false, true},
      {1, 1, 2, false, true, true},      {2, 1, 2, true, true, true},      {4, 1, 1, true, false, false},
      {1, 1, 4, false, false, true},     {2, 2, 1, true, false, false},    {1, 2, 2, false, true, true},
      {1, 1, 1, false, false, false, 2}, {2, 1, 1, true, false, false, 2}, {1, 1, 2, false, true, true, 2}};
  int ran = 0;
  for (const Layout& l : layouts) {
    if (l.T * l.P * l.D * l.C > gpus) continue;
    actors::TrainingConfig config = gpu_config(l.P, 1);
    config.parallel.tensor_size = l.T;
    config.parallel.context_size = l.C;
    config.parallel.data_size = l.D;
    config.parallel.sequence_parallel = l.sp;
    config.parallel.distributed_optimizer = l.dist;
    config.parallel.overlap_grad_reduce = l.overlap;
    config.parallel.bucket_elements = 100000;  // several buckets
    const std::vector<IterationStats> got = train_iterations(config, iters);
    double worst = 0;
    for (int it = 0; it < iters; ++it) {
      worst = std::max(worst, rel(got[size_t(it)].loss, ref[size_t(it)].loss));
      EXPECT_LT(rel(got[size_t(it)].loss, ref[size_t(it)].loss), 1e-2)
          << "TP" << l.T << " PP" << l.P << " DP" << l.D << " CP" << l.C << " iteration " << it + 1;
    }
    std::printf("TP%d PP%d DP%d CP%d%s%s%s: last loss %.6f (one GPU %.6f), max relative loss difference %.2e\n", l.T,
                l.P, l.D, l.C, l.sp ? " SP" : "", l.dist ? " dist-opt" : "", l.overlap ? " overlap" : "",
                got.back().loss, ref.back().loss, worst);
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

// Qwen3-shaped: q/k norms (the per-head RMSNorm kernels in bf16, backward in place on dqkv), a
// head dimension of 64 apart from hidden / heads = 32, grouped-query attention, tied embeddings.
actors::TrainingConfig qwen3_gpu_config() {
  actors::TrainingConfig config = gpu_config(1, 1);
  const GptConfig base = config.model;
  GptConfig& m = config.model;
  m = GptConfig::llama_style(base.num_layers, 128, 4, 2, 256);
  m.kv_channels = 64;
  m.qk_layernorm = true;
  m.untie_embeddings_and_output_weights = false;
  m.seq_length = base.seq_length;
  m.vocab_size = base.vocab_size;
  m.make_vocab_size_divisible_by = base.make_vocab_size_divisible_by;
  m.hidden_dropout = 0.0f;  // the CPU's run below need not draw the same masks
  return config;
}

// One GPU (bf16) trains `gpu`'s losses on the CPU (f32) within bf16 noise; with two GPUs, TP2
// with and without sequence parallelism the one GPU's.
void expect_cpu_one_gpu_tp2(const char* label, const actors::TrainingConfig& gpu) {
  const int gpus = visible_gpus();
  if (gpus < 1) GTEST_SKIP() << "needs a GPU";
  const int iters = 6;
  actors::TrainingConfig on_cpu = gpu;
  on_cpu.devices.cuda = false;
  on_cpu.devices.compute = DType::f32;
  const std::vector<IterationStats> cpu_ref = train_iterations(on_cpu, iters);
  const std::vector<IterationStats> ref = train_iterations(gpu, iters);
  for (int it = 0; it < iters; ++it)
    EXPECT_LT(rel(ref[size_t(it)].loss, cpu_ref[size_t(it)].loss), 2e-2) << label << " one GPU, iteration " << it + 1;
  std::printf("%s one GPU: last loss %.6f (CPU %.6f)\n", label, ref.back().loss, cpu_ref.back().loss);
  if (gpus < 2) return;
  for (bool sp : {false, true}) {
    actors::TrainingConfig config = gpu;
    config.parallel.tensor_size = 2;
    config.parallel.sequence_parallel = sp;
    const std::vector<IterationStats> got = train_iterations(config, iters);
    for (int it = 0; it < iters; ++it)
      EXPECT_LT(rel(got[size_t(it)].loss, ref[size_t(it)].loss), 1e-2)
          << label << " TP2" << (sp ? " SP" : "") << " iteration " << it + 1;
    std::printf("%s TP2%s: last loss %.6f (one GPU %.6f)\n", label, sp ? " SP" : "", got.back().loss, ref.back().loss);
  }
}

// The q/k norm weights' gradients summed over the TP ranks' heads.
TEST(ParallelCuda, Qwen3MatchesTheCpuAndOneGpu) { expect_cpu_one_gpu_tp2("Qwen3", qwen3_gpu_config()); }

// A Llama-shaped MoE model (4 experts top-2, dropless, a shared expert): the experts split over
// the tensor group, the router's probs gradient all-reduced over it.
TEST(ParallelCuda, MoeTensorParallelMatchesTheCpuAndOneGpu) {
  actors::TrainingConfig moe = qwen3_gpu_config();
  moe.model.qk_layernorm = false;
  set_test_moe(moe.model.moe, 0.0, true);
  expect_cpu_one_gpu_tp2("MoE", moe);
}

}  // namespace
}  // namespace troupe::test
