// CUDA gradient statistics against the CPU backend, with inf and nan injected.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "kernels/grad_norm.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct GradList {
  std::vector<Tensor> host, device;
};

// Tensors of sizes 0, 1, odd, several chunks and one large; views of one buffer included.
GradList make_grads(const std::vector<int64_t>& sizes, uint64_t seed) {
  GradList g;
  for (size_t i = 0; i < sizes.size(); ++i) {
    g.host.push_back(random_normal({sizes[i]}, seed + i, 0.01f * float(i + 1)));
    g.device.push_back(to_device(gpu(), g.host.back(), DType::f32));
  }
  return g;
}

TEST(GradStatsCuda, MatchesCpu) {
  GradList g = make_grads({0, 1, 4097, 12345, 1 << 20, 3 * 4096, 5 * (1 << 20) + 3}, 81);
  // A view at an odd offset of a device buffer.
  g.host.push_back(g.host[4].slice(7, {1000}));
  g.device.push_back(g.device[4].slice(7, {1000}));
  const GradStats ref = grad_stats(cpu(), g.host), got = grad_stats(gpu(), g.device);
  EXPECT_TRUE(got.finite);
  EXPECT_NEAR(got.sum_sq, ref.sum_sq, 1e-6 * ref.sum_sq);
  EXPECT_EQ(clip_coefficient(got, 1.0f), clip_coefficient(ref, 1.0f));

  const GradStats none = grad_stats(gpu(), {});
  EXPECT_TRUE(none.finite);
  EXPECT_EQ(none.sum_sq, 0.0);
}

TEST(GradStatsCuda, ManyTensorsTakeSeveralLaunches) {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 3500; ++i) sizes.push_back(1 + (i * 37) % 5000);
  const GradList g = make_grads(sizes, 1000);
  const GradStats ref = grad_stats(cpu(), g.host), got = grad_stats(gpu(), g.device);
  EXPECT_TRUE(got.finite);
  EXPECT_NEAR(got.sum_sq, ref.sum_sq, 1e-6 * ref.sum_sq);
}

TEST(GradStatsCuda, FindsInfAndNan) {
  const float bad_values[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN()};
  for (float bad : bad_values) {
    for (int64_t where : {int64_t(0), int64_t(4096 * 3 + 17), int64_t((1 << 20) - 1)}) {
      SCOPED_TRACE(testing::Message() << bad << " at " << where);
      GradList g = make_grads({100, 1 << 20, 33}, 91);
      g.host[1].at(where) = bad;
      copy(gpu(), g.host[1], g.device[1]);
      EXPECT_FALSE(grad_stats(cpu(), g.host).finite);
      EXPECT_FALSE(grad_stats(gpu(), g.device).finite);
      EXPECT_TRUE(grad_stats(gpu(), {g.device[0], g.device[2]}).finite);
    }
  }
}

}  // namespace
}  // namespace troupe::test

namespace troupe::test {
namespace {

// Informational: the statistics of 124M f32 gradients in one tensor, and the same in 150 views.
TEST(GradStatsCudaPerf, Gpt2SmallGradients) {
  const int64_t n = 124'475'904;
  Tensor grads = Tensor::zeros(gpu(), DType::f32, {n});
  std::vector<Tensor> views;
  for (int64_t k = 0; k < 150; ++k) views.push_back(grads.slice(k * (n / 150), {n / 150}));
  for (const auto& [name, list] : {std::pair{"1 tensor", std::vector<Tensor>{grads}}, std::pair{"150 views", views}}) {
    grad_stats(gpu(), list);  // warm-up
    const int iters = 10;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) EXPECT_EQ(grad_stats(gpu(), list).sum_sq, 0.0);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / iters;
    std::printf("grad_stats (%s, %lld floats, with the read-back): %.3f ms (%.0f GB/s)\n", name, (long long)n, ms,
                double(n) * 4 / ms * 1e-6);
  }
}

}  // namespace
}  // namespace troupe::test
