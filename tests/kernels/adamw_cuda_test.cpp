// CUDA AdamW against the CPU backend over several steps: f32 master weights and moments, the
// 16-bit (or f32) parameter copy, gaps between segments, and more segments than one launch takes.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "kernels/adamw.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

// Segments with odd offsets and sizes, both decay flags, and gaps that must stay untouched.
std::vector<ParamSegment> mixed_segments() {
  return {{0, 1, false},        {3, 768, true},     {771, 768, false},
          {1600, 300001, true}, {301602, 5, false}, {301700, 2048, true}};
}

// Many small segments: more than one launch's table (1536 entries).
std::vector<ParamSegment> many_segments() {
  std::vector<ParamSegment> s;
  for (int64_t k = 0; k < 4000; ++k) s.push_back({k * 9 + 1, 7, k % 3 != 0});
  return s;
}

void run_and_compare(const std::vector<ParamSegment>& segments, int64_t n, DType params_dtype) {
  Tensor master = random_normal({n}, 51, 0.5f), m = random_normal({n}, 52, 0.01f);
  Tensor v = random_uniform({n}, 53, 0.0f, 1e-4f);
  Tensor params_ref = Tensor::host(DType::f32, {n});
  for (int64_t i = 0; i < n; ++i) params_ref.at(i) = -3.0f;  // sentinel outside the segments
  const Tensor master0 = round_through(master, DType::f32), m0 = round_through(m, DType::f32),
               v0 = round_through(v, DType::f32);

  Tensor master_d = to_device(gpu(), master, DType::f32), m_d = to_device(gpu(), m, DType::f32),
         v_d = to_device(gpu(), v, DType::f32), params_d = to_device(gpu(), params_ref, params_dtype);
  const AdamWConfig cfg{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  for (int64_t step = 1; step <= 4; ++step) {
    const Tensor grad = random_normal({n}, 60 + uint64_t(step), 2.0f);
    const float grad_scale = 0.25f * float(step);
    adamw_step(cpu(), master, m, v, grad, params_ref, segments, cfg, step, grad_scale);
    adamw_step(gpu(), master_d, m_d, v_d, to_device(gpu(), grad, DType::f32), params_d, segments, cfg, step,
               grad_scale);
  }
  const Tensor master_h = to_host_f32(gpu(), master_d), m_h = to_host_f32(gpu(), m_d), v_h = to_host_f32(gpu(), v_d);
  EXPECT_LT(rel_error(master_h, master), 1e-5);
  EXPECT_LT(rel_error(m_h, m), 1e-5);
  EXPECT_LT(rel_error(v_h, v), 1e-5);
  EXPECT_GT(rel_error(master_h, master0), 1e-4) << "the weights must have moved";

  std::vector<bool> inside(size_t(n), false);
  for (const ParamSegment& s : segments)
    for (int64_t i = s.offset; i < s.offset + s.numel; ++i) inside[size_t(i)] = true;
  const Tensor params_h = to_host_f32(gpu(), params_d);
  const Tensor master_rounded = round_through(master_h, params_dtype);
  int64_t outside_changed = 0, copy_mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (inside[size_t(i)]) {
      copy_mismatches += params_h.at(i) != master_rounded.at(i);
    } else {
      outside_changed +=
          master_h.at(i) != master0.at(i) || m_h.at(i) != m0.at(i) || v_h.at(i) != v0.at(i) || params_h.at(i) != -3.0f;
    }
  }
  EXPECT_EQ(outside_changed, 0);
  EXPECT_EQ(copy_mismatches, 0) << "params must be master rounded to " << dtype_name(params_dtype);
}

class AdamWCuda : public ::testing::TestWithParam<DType> {};

TEST_P(AdamWCuda, MatchesCpuOverSteps) { run_and_compare(mixed_segments(), 304000, GetParam()); }

TEST_P(AdamWCuda, ManySegmentsTakeSeveralLaunches) { run_and_compare(many_segments(), 4000 * 9 + 5, GetParam()); }

INSTANTIATE_TEST_SUITE_P(Types, AdamWCuda, ::testing::Values(DType::bf16, DType::f16, DType::f32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(AdamWCudaNoCopy, UndefinedParamsAreSkipped) {
  const int64_t n = 5000;
  Tensor master = random_normal({n}, 71), m = Tensor::host(DType::f32, {n}), v = Tensor::host(DType::f32, {n});
  for (int64_t i = 0; i < n; ++i) m.at(i) = v.at(i) = 0.0f;
  const Tensor grad = random_normal({n}, 72);
  Tensor master_d = to_device(gpu(), master, DType::f32), m_d = to_device(gpu(), m, DType::f32),
         v_d = to_device(gpu(), v, DType::f32);
  const std::vector<ParamSegment> segs = {{10, 4000, true}};
  adamw_step(cpu(), master, m, v, grad, Tensor(), segs, AdamWConfig{}, 1, 1.0f);
  adamw_step(gpu(), master_d, m_d, v_d, to_device(gpu(), grad, DType::f32), Tensor(), segs, AdamWConfig{}, 1, 1.0f);
  EXPECT_LT(rel_error(to_host_f32(gpu(), master_d), master), 1e-6);
}

}  // namespace
}  // namespace troupe::test

namespace troupe::test {
namespace {

// Informational: one step over GPT-2 124M's parameters (f32 master/m/v/grad + bf16 copy).
TEST(AdamWCudaPerf, Gpt2SmallStep) {
  const int64_t c = 768, vp = 50304;
  std::vector<ParamSegment> segs;
  int64_t n = 0;
  auto add = [&](int64_t numel, bool decay) {
    segs.push_back({n, numel, decay});
    n += numel;
  };
  add(vp * c, true);    // wte
  add(1024 * c, true);  // wpe
  for (int l = 0; l < 12; ++l) {
    for (int64_t w : {3 * c * c, c * c, 4 * c * c, 4 * c * c}) add(w, true);
    for (int64_t b : {c, c, 3 * c, c, c, c, 4 * c, c}) add(b, false);  // norm weights and biases
  }
  add(c, false);
  add(c, false);
  Tensor master = Tensor::zeros(gpu(), DType::f32, {n}), m = Tensor::zeros(gpu(), DType::f32, {n}),
         v = Tensor::zeros(gpu(), DType::f32, {n}), grad = Tensor::zeros(gpu(), DType::f32, {n}),
         params = Tensor::zeros(gpu(), DType::bf16, {n});
  adamw_step(gpu(), master, m, v, grad, params, segs, AdamWConfig{}, 1, 1.0f);  // warm-up
  gpu().synchronize();
  const int iters = 10;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) adamw_step(gpu(), master, m, v, grad, params, segs, AdamWConfig{}, 2 + i, 1.0f);
  gpu().synchronize();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / iters;
  const double bytes = double(n) * (4 * 4 + 3 * 4 + 2);  // read master m v grad; write master m v params
  std::printf("adamw_step: %lld params in %zu segments: %.3f ms (%.0f GB/s)\n", (long long)n, segs.size(), ms,
              bytes / ms * 1e-6);
  EXPECT_EQ(to_host_f32(gpu(), master.slice(0, {4})).at(0), 0.0f);  // zero grads, zero weights: still zero
}

}  // namespace
}  // namespace troupe::test
