// CUDA LayerNorm / RMSNorm against the CPU backend in bf16 and f16 (and f32, which the
// kernels also accept), their FP8 side output against the unfused cast and the CPU's, the per-head RMSNorm (q/k norms)
// likewise, and a bandwidth printout for GPT-2 shapes (informational only).
#include <cstdio>
#include <string>
#include <tuple>

#include "kernels/fp8.hpp"
#include "kernels/norm.hpp"
#include "tests/test_util.hpp"
#if TROUPE_HAVE_CUDA
#include "kernels/cuda/cuda_state.cuh"
#endif

namespace troupe::test {
namespace {

constexpr float kEps = 1e-5f;

struct Rows {
  int64_t n, c;
};

Tensor host_copy(const Tensor& t) {
  Tensor out = Tensor::host(t.dtype(), t.shape());
  copy(cpu(), t, out);
  return out;
}

Tensor minus(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::host(DType::f32, a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) out.at(i) = a.at(i) - b.at(i);
  return out;
}

// Host inputs, rounded through the 16-bit type so both backends see the same values.
// dx0, dw0, db0 pre-fill the gradients: the backward must add to them.
struct NormInputs {
  Tensor x, w, b, dy, dx0, dw0, db0;
};

NormInputs make_inputs(DType t, int64_t n, int64_t c) {
  return {round_through(random_normal({n, c}, 1, 2.0f), t),
          round_through(random_uniform({c}, 2, 0.5f, 1.5f), t),
          round_through(random_normal({c}, 3, 0.2f), t),
          round_through(random_normal({n, c}, 4), t),
          round_through(random_normal({n, c}, 5), t),
          random_normal({c}, 6),
          random_normal({c}, 7)};
}

std::string label(const char* op, DType t, Rows r) {
  return str_cat(op, " ", dtype_name(t), " [", r.n, ", ", r.c, "]");
}

class NormCuda : public ::testing::TestWithParam<std::tuple<DType, Rows>> {
 protected:
  void SetUp() override {
    const auto [t, r] = GetParam();
    if (t == DType::f32 && r.c > 8192) GTEST_SKIP() << "C = " << r.c << " is above the f32 kernel's widest row (8192)";
  }
};

void check_layernorm(DType t, Rows r, bool with_bias) {
  const NormInputs in = make_inputs(t, r.n, r.c);
  const Tensor b = with_bias ? in.b : Tensor();
  Tensor y_ref = Tensor::host(DType::f32, {r.n, r.c});
  Tensor mean_ref = Tensor::host(DType::f32, {r.n}), rstd_ref = Tensor::host(DType::f32, {r.n});
  layernorm_forward(cpu(), in.x, in.w, b, kEps, y_ref, mean_ref, rstd_ref);
  Tensor dx_ref = host_copy(in.dx0), dw_ref = host_copy(in.dw0), db_ref = with_bias ? host_copy(in.db0) : Tensor();
  layernorm_backward(cpu(), in.dy, in.x, in.w, mean_ref, rstd_ref, dx_ref, dw_ref, db_ref);

  const Context& g = gpu();
  Tensor x = to_device(g, in.x, t), w = to_device(g, in.w, t), dy = to_device(g, in.dy, t);
  Tensor bias = with_bias ? to_device(g, in.b, t) : Tensor();
  Tensor y = Tensor::empty(g, t, {r.n, r.c});
  Tensor mean = Tensor::empty(g, DType::f32, {r.n}), rstd = Tensor::empty(g, DType::f32, {r.n});
  Tensor dx = to_device(g, in.dx0, t), dw = to_device(g, in.dw0, DType::f32);
  Tensor db = with_bias ? to_device(g, in.db0, DType::f32) : Tensor();
  layernorm_forward(g, x, w, bias, kEps, y, mean, rstd);
  layernorm_backward(g, dy, x, w, mean, rstd, dx, dw, db);

  const std::string what = label(with_bias ? "layernorm" : "layernorm (no bias)", t, r);
  const double e_y = rel_error(to_host_f32(g, y), y_ref);
  const double e_dx = rel_error(minus(to_host_f32(g, dx), in.dx0), minus(dx_ref, in.dx0));
  const double e_dw = rel_error(minus(to_host_f32(g, dw), in.dw0), minus(dw_ref, in.dw0));
  EXPECT_LT(e_y, 1e-2) << what << " y";
  EXPECT_LT(rel_error(to_host_f32(g, mean), mean_ref), 1e-4) << what << " mean";
  EXPECT_LT(rel_error(to_host_f32(g, rstd), rstd_ref), 1e-4) << what << " rstd";
  EXPECT_LT(e_dx, 2e-2) << what << " dx increment";
  EXPECT_LT(e_dw, 2e-2) << what << " dw increment";
  double e_db = 0;
  if (with_bias) {
    e_db = rel_error(minus(to_host_f32(g, db), in.db0), minus(db_ref, in.db0));
    EXPECT_LT(e_db, 2e-2) << what << " db increment";
  }
  std::printf("%-40s rel err: y %.1e  dx %.1e  dw %.1e  db %.1e\n", what.c_str(), e_y, e_dx, e_dw, e_db);
}

TEST_P(NormCuda, LayerNormMatchesCpu) {
  const auto [t, r] = GetParam();
  check_layernorm(t, r, true);
}

TEST_P(NormCuda, LayerNormWithoutBiasMatchesCpu) {
  const auto [t, r] = GetParam();
  check_layernorm(t, r, false);
}

TEST_P(NormCuda, RmsNormMatchesCpu) {
  const auto [t, r] = GetParam();
  const NormInputs in = make_inputs(t, r.n, r.c);
  Tensor y_ref = Tensor::host(DType::f32, {r.n, r.c}), rstd_ref = Tensor::host(DType::f32, {r.n});
  rmsnorm_forward(cpu(), in.x, in.w, kEps, y_ref, rstd_ref);
  Tensor dx_ref = host_copy(in.dx0), dw_ref = host_copy(in.dw0);
  rmsnorm_backward(cpu(), in.dy, in.x, in.w, rstd_ref, dx_ref, dw_ref);

  const Context& g = gpu();
  Tensor x = to_device(g, in.x, t), w = to_device(g, in.w, t), dy = to_device(g, in.dy, t);
  Tensor y = Tensor::empty(g, t, {r.n, r.c}), rstd = Tensor::empty(g, DType::f32, {r.n});
  Tensor dx = to_device(g, in.dx0, t), dw = to_device(g, in.dw0, DType::f32);
  rmsnorm_forward(g, x, w, kEps, y, rstd);
  rmsnorm_backward(g, dy, x, w, rstd, dx, dw);

  const std::string what = label("rmsnorm", t, r);
  const double e_y = rel_error(to_host_f32(g, y), y_ref);
  const double e_dx = rel_error(minus(to_host_f32(g, dx), in.dx0), minus(dx_ref, in.dx0));
  const double e_dw = rel_error(minus(to_host_f32(g, dw), in.dw0), minus(dw_ref, in.dw0));
  EXPECT_LT(e_y, 1e-2) << what << " y";
  EXPECT_LT(rel_error(to_host_f32(g, rstd), rstd_ref), 1e-4) << what << " rstd";
  EXPECT_LT(e_dx, 2e-2) << what << " dx increment";
  EXPECT_LT(e_dw, 2e-2) << what << " dw increment";
  std::printf("%-40s rel err: y %.1e  dx %.1e  dw %.1e\n", what.c_str(), e_y, e_dx, e_dw);
}

// Backward into another buffer (dx = dx_in + the gradient, zero-bubble's B keeping dx_in for W):
// bit for bit the in-place result, dx_in untouched.
TEST_P(NormCuda, BackwardWithResidualInputEqualsInPlace) {
  const auto [t, r] = GetParam();
  const NormInputs in = make_inputs(t, r.n, r.c);
  const Context& g = gpu();
  Tensor x = to_device(g, in.x, t), w = to_device(g, in.w, t), b = to_device(g, in.b, t), dy = to_device(g, in.dy, t);
  Tensor y = Tensor::empty(g, t, {r.n, r.c});
  Tensor mean = Tensor::empty(g, DType::f32, {r.n}), rstd = Tensor::empty(g, DType::f32, {r.n});
  for (const bool layernorm : {true, false}) {
    const std::string what = label(layernorm ? "layernorm" : "rmsnorm", t, r);
    Tensor in_place = to_device(g, in.dx0, t), dx_in = to_device(g, in.dx0, t), out = Tensor::zeros(g, t, {r.n, r.c});
    Tensor dw0 = Tensor::zeros(g, DType::f32, {r.c}), dw1 = Tensor::zeros(g, DType::f32, {r.c});
    Tensor db0 = Tensor::zeros(g, DType::f32, {r.c}), db1 = Tensor::zeros(g, DType::f32, {r.c});
    if (layernorm) {
      layernorm_forward(g, x, w, b, kEps, y, mean, rstd);
      layernorm_backward(g, dy, x, w, mean, rstd, in_place, dw0, db0);
      layernorm_backward(g, dy, x, w, mean, rstd, out, dw1, db1, dx_in);
    } else {
      rmsnorm_forward(g, x, w, kEps, y, rstd);
      rmsnorm_backward(g, dy, x, w, rstd, in_place, dw0);
      rmsnorm_backward(g, dy, x, w, rstd, out, dw1, dx_in);
    }
    EXPECT_EQ(max_abs_diff(to_host_f32(g, out), to_host_f32(g, in_place)), 0.0) << what << " dx";
    EXPECT_EQ(max_abs_diff(to_host_f32(g, dx_in), to_host_f32(g, to_device(g, in.dx0, t))), 0.0)
        << what << " dx_in must be left as it was";
    EXPECT_EQ(max_abs_diff(to_host_f32(g, dw1), to_host_f32(g, dw0)), 0.0) << what << " dw";
  }
}

// The FP8 side output written in the norm's own pass (an FP8 linear's input cast): y as without
// it, and q and amax bit for bit those of fp8_cast after the norm, on CUDA (the unfused path)
// and on the CPU (the reference ops on the same y); and the amax alone (tensorwise scaling).
TEST_P(NormCuda, Fp8OutputIsTheCastOfTheOutput) {
  const auto [t, rows] = GetParam();
  const auto r = rows;  // a plain variable, which the lambdas below capture
  const NormInputs in = make_inputs(t, r.n, r.c);
  const Context& g = gpu();
  const Tensor x = to_device(g, in.x, t), w = to_device(g, in.w, t), b = to_device(g, in.b, t);
  const Tensor scale_host = Tensor::host_f32({1}, {37.0f}), scale = to_device(g, scale_host, DType::f32);
  for (bool rms : {false, true}) {
    auto norm = [&](const Tensor& y, const Fp8SideOutput& fp8) {
      Tensor mean = Tensor::empty(g, DType::f32, {r.n}), rstd = Tensor::empty(g, DType::f32, {r.n});
      if (rms)
        rmsnorm_forward(g, x, w, kEps, y, rstd, fp8);
      else
        layernorm_forward(g, x, w, b, kEps, y, mean, rstd, fp8);
    };
    const std::string what = label(rms ? "rmsnorm fp8" : "layernorm fp8", t, r);
    Tensor y_ref = Tensor::empty(g, t, {r.n, r.c}), q_ref = Tensor::empty(g, DType::u8, {r.n, r.c});
    Tensor amax_ref = Tensor::zeros(g, DType::f32, {1});
    norm(y_ref, {});
    fp8_cast(g, y_ref, scale, Fp8Format::e4m3, q_ref, amax_ref);
    Tensor y = Tensor::empty(g, t, {r.n, r.c}), q = Tensor::empty(g, DType::u8, {r.n, r.c});
    Tensor amax = Tensor::zeros(g, DType::f32, {1}), amax_only = Tensor::zeros(g, DType::f32, {1});
    norm(y, {q, scale, amax});
    const Tensor y_host = to_host_f32(g, y);
    EXPECT_EQ(max_abs_diff(y_host, to_host_f32(g, y_ref)), 0.0) << what << " y";
    EXPECT_EQ(byte_mismatches(q, q_ref), 0) << what << " q against the unfused cast";
    const float want = to_host_f32(g, amax_ref).at(0);
    EXPECT_GT(want, 0.0f) << what;
    EXPECT_EQ(to_host_f32(g, amax).at(0), want) << what << " amax";
    Tensor q_cpu = Tensor::host(DType::u8, {r.n, r.c}), amax_cpu = Tensor::host_f32({1}, {0.0f});
    fp8_cast(cpu(), y_host, scale_host, Fp8Format::e4m3, q_cpu, amax_cpu);
    EXPECT_EQ(byte_mismatches(q, q_cpu), 0) << what << " q against the CPU's cast of y";
    EXPECT_EQ(amax_cpu.at(0), want) << what << " amax against the CPU's";
    norm(y, {Tensor(), Tensor(), amax_only});
    EXPECT_EQ(to_host_f32(g, amax_only).at(0), want) << what << " amax alone";
  }
}

// Warp-per-row widths (64 .. 1024, 768 the GPT-2 one), block-per-row widths (1600 .. 12288),
// odd row counts, and rows many times what fits on a GPU at once (40000 x 768 in warp mode, 3000
// x 1600 in block mode), so that each group walks several rows, the next one loaded early.
INSTANTIATE_TEST_SUITE_P(Shapes, NormCuda,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::f16, DType::f32),
                                            ::testing::Values(Rows{64, 768}, Rows{37, 1024}, Rows{8, 4096},
                                                              Rows{37, 1600}, Rows{300, 64}, Rows{4096, 768},
                                                              Rows{16, 8192}, Rows{3, 12288}, Rows{40000, 768},
                                                              Rows{3000, 1600})),
                         [](const auto& info) {
                           const Rows r = std::get<1>(info.param);
                           return str_cat(dtype_name(std::get<0>(info.param)), "_", r.n, "x", r.c);
                         });

// The per-head RMSNorm (Qwen3's q/k norms) on a fused qkv [N, (H + 2G) * D], as the model runs
// it: forward from a copy of the q and k heads into qkv (and in place), backward in place on
// dqkv. The value heads must come out bit for bit as they went in.
struct Heads {
  int64_t n, h, g, d;
};

class HeadNormCuda : public ::testing::TestWithParam<std::tuple<DType, Heads>> {};

// Columns [from, from + cols) of each row of t [N, W], as a host f32 tensor [N, cols].
Tensor columns(const Tensor& t, int64_t from, int64_t cols) {
  Tensor out = Tensor::host(DType::f32, {t.dim(0), cols});
  copy_columns(cpu(), t, from, out, 0, cols);
  return out;
}

TEST_P(HeadNormCuda, MatchesCpu) {
  const auto [t, s] = GetParam();
  const int64_t W = (s.h + 2 * s.g) * s.d, QK = (s.h + s.g) * s.d;
  const Tensor qkv_in = round_through(random_normal({s.n, W}, 31, 2.0f), t);
  const Tensor qk = columns(qkv_in, 0, QK);
  const Tensor wq = round_through(random_uniform({s.d}, 32, 0.5f, 1.5f), t);
  const Tensor wk = round_through(random_uniform({s.d}, 33, 0.5f, 1.5f), t);
  const Tensor dqkv_in = round_through(random_normal({s.n, W}, 34), t);
  const Tensor dwq0 = random_normal({s.d}, 35), dwk0 = random_normal({s.d}, 36);
  const HeadSpan q{0, s.h}, k{s.h, s.g};

  // CPU reference.
  Tensor y_ref = host_copy(qkv_in), rq_ref = Tensor::host(DType::f32, {s.n, s.h});
  Tensor rk_ref = Tensor::host(DType::f32, {s.n, s.g});
  rmsnorm_heads_forward(cpu(), qk, wq, kEps, q, y_ref, rq_ref);
  rmsnorm_heads_forward(cpu(), qk, wk, kEps, k, y_ref, rk_ref);
  Tensor d_ref = host_copy(dqkv_in), dwq_ref = host_copy(dwq0), dwk_ref = host_copy(dwk0);
  rmsnorm_heads_backward(cpu(), d_ref, qk, wq, rq_ref, q, d_ref, dwq_ref);
  rmsnorm_heads_backward(cpu(), d_ref, qk, wk, rk_ref, k, d_ref, dwk_ref);

  const Context& gc = gpu();
  Tensor qk_d = to_device(gc, qk, t), y = to_device(gc, qkv_in, t), in_place = to_device(gc, qkv_in, t);
  Tensor wq_d = to_device(gc, wq, t), wk_d = to_device(gc, wk, t);
  Tensor rq = Tensor::empty(gc, DType::f32, {s.n, s.h}), rk = Tensor::empty(gc, DType::f32, {s.n, s.g});
  rmsnorm_heads_forward(gc, qk_d, wq_d, kEps, q, y, rq);
  rmsnorm_heads_forward(gc, qk_d, wk_d, kEps, k, y, rk);
  rmsnorm_heads_forward(gc, in_place, wq_d, kEps, q, in_place, rq);
  rmsnorm_heads_forward(gc, in_place, wk_d, kEps, k, in_place, rk);
  Tensor d = to_device(gc, dqkv_in, t), dwq = to_device(gc, dwq0, DType::f32), dwk = to_device(gc, dwk0, DType::f32);
  rmsnorm_heads_backward(gc, d, qk_d, wq_d, rq, q, d, dwq);
  rmsnorm_heads_backward(gc, d, qk_d, wk_d, rk, k, d, dwk);

  const std::string what = str_cat("head rmsnorm ", dtype_name(t), " N ", s.n, " H ", s.h, " G ", s.g, " D ", s.d);
  const Tensor y_host = to_host_f32(gc, y), d_host = to_host_f32(gc, d);
  const double e_y = rel_error(columns(y_host, 0, QK), columns(y_ref, 0, QK));
  const double e_dx = rel_error(columns(d_host, 0, QK), columns(d_ref, 0, QK));
  const double e_dwq = rel_error(minus(to_host_f32(gc, dwq), dwq0), minus(dwq_ref, dwq0));
  const double e_dwk = rel_error(minus(to_host_f32(gc, dwk), dwk0), minus(dwk_ref, dwk0));
  EXPECT_LT(e_y, 1e-2) << what << " y";
  EXPECT_LT(rel_error(to_host_f32(gc, rq), rq_ref), 1e-4) << what << " q rstd";
  EXPECT_LT(rel_error(to_host_f32(gc, rk), rk_ref), 1e-4) << what << " k rstd";
  EXPECT_LT(e_dx, 2e-2) << what << " dx";
  EXPECT_LT(e_dwq, 2e-2) << what << " dw (q)";
  EXPECT_LT(e_dwk, 2e-2) << what << " dw (k)";
  EXPECT_EQ(max_abs_diff(to_host_f32(gc, in_place), y_host), 0.0) << what << ": in place differs";
  EXPECT_EQ(max_abs_diff(columns(y_host, QK, W - QK), columns(qkv_in, QK, W - QK)), 0.0) << what << ": v written";
  EXPECT_EQ(max_abs_diff(columns(d_host, QK, W - QK), columns(dqkv_in, QK, W - QK)), 0.0) << what << ": dv written";
  std::printf("%-48s rel err: y %.1e  dx %.1e  dw %.1e / %.1e\n", what.c_str(), e_y, e_dx, e_dwq, e_dwk);
}

// Qwen3-0.6B's heads on one GPU and on TP2, Qwen2.5's D = 64 shape, a small D (3 packs of
// bf16), D = 256, and enough tokens (4096) that backward blocks stride over many rows.
INSTANTIATE_TEST_SUITE_P(Shapes, HeadNormCuda,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::f16, DType::f32),
                                            ::testing::Values(Heads{64, 16, 8, 128}, Heads{37, 8, 4, 128},
                                                              Heads{300, 14, 2, 64}, Heads{33, 4, 2, 24},
                                                              Heads{8, 8, 1, 256}, Heads{4096, 16, 8, 128})),
                         [](const auto& info) {
                           const Heads h = std::get<1>(info.param);
                           return str_cat(dtype_name(std::get<0>(info.param)), "_N", h.n, "_H", h.h, "_G", h.g, "_D",
                                          h.d);
                         });

TEST(NormCudaErrors, UnsupportedWidthIsAnError) {
  const Context& g = gpu();
  for (int64_t c : {100, 16392}) {  // not a multiple of 8; above the widest row group
    Tensor x = Tensor::zeros(g, DType::bf16, {2, c}), w = Tensor::zeros(g, DType::bf16, {c});
    Tensor y = Tensor::empty(g, DType::bf16, {2, c}), stat = Tensor::empty(g, DType::f32, {2});
    try {
      layernorm_forward(g, x, w, Tensor(), kEps, y, stat, stat);
      ADD_FAILURE() << "C = " << c << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("layernorm_forward"), std::string::npos) << e.what();
    }
  }
}

// dw/db come from per-block partial sums added in a fixed order: no atomics, same bits.
TEST(NormCudaDeterminism, ParameterGradientsAreBitwiseReproducible) {
  const Context& g = gpu();
  const NormInputs in = make_inputs(DType::bf16, 4096, 768);
  Tensor x = to_device(g, in.x, DType::bf16), w = to_device(g, in.w, DType::bf16);
  Tensor b = to_device(g, in.b, DType::bf16), dy = to_device(g, in.dy, DType::bf16);
  Tensor y = Tensor::empty(g, DType::bf16, {4096, 768}), dx = Tensor::zeros(g, DType::bf16, {4096, 768});
  Tensor mean = Tensor::empty(g, DType::f32, {4096}), rstd = Tensor::empty(g, DType::f32, {4096});
  layernorm_forward(g, x, w, b, kEps, y, mean, rstd);
  Tensor first[2], second[2];
  for (Tensor* out : {first, second}) {
    out[0] = Tensor::zeros(g, DType::f32, {768});
    out[1] = Tensor::zeros(g, DType::f32, {768});
    layernorm_backward(g, dy, x, w, mean, rstd, dx, out[0], out[1]);
  }
  EXPECT_EQ(max_abs_diff(to_host_f32(g, first[0]), to_host_f32(g, second[0])), 0.0);
  EXPECT_EQ(max_abs_diff(to_host_f32(g, first[1]), to_host_f32(g, second[1])), 0.0);
}

#if TROUPE_HAVE_CUDA
// Mean time of one call of f on the test context's stream, in microseconds.
template <typename F>
double time_us(F&& f, int iters) {
  cudaStream_t stream = cuda::stream_of(gpu());
  for (int i = 0; i < 3; ++i) f();  // warm-up (and the stream-ordered pool's first allocation)
  cudaEvent_t start, stop;
  TROUPE_CUDA_CHECK(cudaEventCreate(&start));
  TROUPE_CUDA_CHECK(cudaEventCreate(&stop));
  TROUPE_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) f();
  TROUPE_CUDA_CHECK(cudaEventRecord(stop, stream));
  TROUPE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  TROUPE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  TROUPE_CUDA_CHECK(cudaEventDestroy(start));
  TROUPE_CUDA_CHECK(cudaEventDestroy(stop));
  return 1e3 * ms / iters;
}

// Bandwidth counts the [N, C] tensors each pass must move: forward reads x and writes y;
// backward reads dy, x and dx and writes dx. The first shape's output is also checked.
TEST(NormCudaPerf, LayerNormBf16Bandwidth) {
  const Context& g = gpu();
  for (Rows r : {Rows{16384, 768}, Rows{16384, 1600}, Rows{16384, 4096}}) {
    const NormInputs in = make_inputs(DType::bf16, r.n, r.c);
    Tensor x = to_device(g, in.x, DType::bf16), w = to_device(g, in.w, DType::bf16);
    Tensor b = to_device(g, in.b, DType::bf16), dy = to_device(g, in.dy, DType::bf16);
    Tensor y = Tensor::empty(g, DType::bf16, {r.n, r.c}), dx = Tensor::zeros(g, DType::bf16, {r.n, r.c});
    Tensor mean = Tensor::empty(g, DType::f32, {r.n}), rstd = Tensor::empty(g, DType::f32, {r.n});
    Tensor dw = Tensor::zeros(g, DType::f32, {r.c}), db = Tensor::zeros(g, DType::f32, {r.c});
    const double fwd = time_us([&] { layernorm_forward(g, x, w, b, kEps, y, mean, rstd); }, 50);
    const double bwd = time_us([&] { layernorm_backward(g, dy, x, w, mean, rstd, dx, dw, db); }, 50);
    const double tensor_bytes = double(r.n) * double(r.c) * 2;
    std::printf("layernorm bf16 [%lld, %lld]: forward %.1f us (%.0f GB/s), backward %.1f us (%.0f GB/s)\n",
                (long long)r.n, (long long)r.c, fwd, 2 * tensor_bytes / fwd * 1e-3, bwd, 4 * tensor_bytes / bwd * 1e-3);
    if (r.c == 768) {
      Tensor y_ref = Tensor::host(DType::f32, {r.n, r.c});
      Tensor mean_ref = Tensor::host(DType::f32, {r.n}), rstd_ref = Tensor::host(DType::f32, {r.n});
      layernorm_forward(cpu(), in.x, in.w, in.b, kEps, y_ref, mean_ref, rstd_ref);
      EXPECT_LT(rel_error(to_host_f32(g, y), y_ref), 1e-2);
    }
  }
}
#endif

}  // namespace
}  // namespace troupe::test
