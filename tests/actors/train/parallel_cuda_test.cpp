// Tensor, sequence and data parallelism on GPUs (NCCL groups, one rank per GPU): every layout
// that fits the visible GPUs trains the same losses as one GPU, within bf16 noise (tensor
// parallelism sums the GEMMs' partial products in another order).
#include <cstdio>

#if TROUPE_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

struct Layout {
  int T, P, D;
  bool sp, dist, overlap;
};

TEST(ParallelCuda, LayoutsMatchOneGpu) {
#if TROUPE_HAVE_CUDA
  const int gpus = cuda::device_count();
#else
  const int gpus = 0;
#endif
  if (gpus < 2) GTEST_SKIP() << "needs 2 GPUs (NCCL groups put one rank on each)";
  const int iters = 6;
  const std::vector<IterationStats> ref = train_iterations(gpu_config(1, 1), iters);
  const Layout layouts[] = {
      {2, 1, 1, false, false, false}, {2, 1, 1, true, false, false}, {1, 1, 2, false, false, true},
      {1, 1, 2, false, true, true},   {2, 1, 2, true, true, true},   {4, 1, 1, true, false, false},
      {1, 1, 4, false, false, true},  {2, 2, 1, true, false, false}, {1, 2, 2, false, true, true}};
  int ran = 0;
  for (const Layout& l : layouts) {
    if (l.T * l.P * l.D > gpus) continue;
    actors::TrainingConfig config = gpu_config(l.P, 1);
    config.parallel.tensor_size = l.T;
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
          << "TP" << l.T << " PP" << l.P << " DP" << l.D << " iteration " << it + 1;
    }
    std::printf("TP%d PP%d DP%d%s%s%s: last loss %.6f (one GPU %.6f), max relative loss difference %.2e\n", l.T, l.P,
                l.D, l.sp ? " SP" : "", l.dist ? " dist-opt" : "", l.overlap ? " overlap" : "", got.back().loss,
                ref.back().loss, worst);
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

}  // namespace
}  // namespace troupe::test
