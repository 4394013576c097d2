// The grouped linear's backward on CUDA in each way of making the weight gradient
// (kernels/grouped_dw_path.hpp: loop, streams, tf32, kernel) against the CPU backend, on 64 groups
// of uneven sizes (empty ones among them, one of a single row, most no multiple of the kernel's
// 32-row chunks), in bf16, f16 and f32, with N and K inside one 128 x 128 tile, across several,
// and off a multiple of 8 (where the kernel way falls back to streams): dx, and dw accumulated
// onto a non-zero gradient (the increment checked on its own, so an overwrite fails). Streams
// against loop to the bit and the kernel against itself to the bit; the kernel against loop on
// the DeepSeek-like layer (64 experts of [512, 512]) and onto a gradient view at an odd float
// offset; streams also when the inputs are stream-ordered memory freed and reused on ctx's stream
// right after the call (ctx's stream must wait for the side streams).
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/grouped_dw_path.hpp"
#include "kernels/grouped_linear.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

constexpr int64_t kGroups = 64;

// G + 1 ascending offsets from 0 to R: a random split where about a third of the groups are
// empty, the first and the last among them, and one group has a single row.
std::vector<int64_t> uneven_offsets(int64_t rows, uint64_t seed) {
  const Tensor u = random_uniform({kGroups - 1}, seed, 0.0f, 1.0f);
  std::vector<int64_t> o(size_t(kGroups) + 1, 0);
  for (int64_t g = 1; g < kGroups; ++g) o[size_t(g)] = int64_t(float(rows) * u.at(g - 1) * u.at(g - 1));
  std::sort(o.begin() + 1, o.end() - 1);
  o[1] = 0;  // group 0 empty
  o.back() = rows;
  o[size_t(kGroups) - 1] = rows;                                 // the last group empty
  for (size_t g = 2; g + 1 < o.size(); g += 3) o[g] = o[g - 1];  // and every third
  // The first group of several rows is cut to one; the next takes the rest.
  for (size_t g = 0; g + 2 < o.size(); ++g)
    if (o[g + 1] - o[g] >= 2) {
      o[g + 1] = o[g] + 1;
      break;
    }
  return o;
}

Tensor minus(const Tensor& a, const Tensor& b) {
  Tensor d = Tensor::host(DType::f32, a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) d.at(i) = a.at(i) - b.at(i);
  return d;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// One backward problem, host f32 values already rounded to the tested type.
struct Problem {
  std::vector<int64_t> offsets;
  Tensor x, w, dy, dw0;  // [R, K], [G, N, K], [R, N], [G, N, K] f32 (the gradient so far)

  Problem(int64_t rows, int64_t n, int64_t k, DType d)
      : offsets(uneven_offsets(rows, 7)),
        x(round_through(random_normal({rows, k}, 1), d)),
        w(round_through(random_normal({kGroups, n, k}, 2, 0.2f), d)),
        dy(round_through(random_normal({rows, n}, 3), d)),
        dw0(random_normal({kGroups, n, k}, 4)) {}
};

// dx and dw (host f32) of one CUDA backward in `path`, dw accumulated onto dw0.
struct Grads {
  Tensor dx, dw;
};
Grads cuda_backward(const Problem& p, DType d, GroupedDw path) {
  const ScopedGroupedDw use(path);
  const Tensor xd = to_device(gpu(), p.x, d), wd = to_device(gpu(), p.w, d), dyd = to_device(gpu(), p.dy, d);
  const Tensor dxd = Tensor::empty(gpu(), d, p.x.shape());
  const Tensor dwd = to_device(gpu(), p.dw0, DType::f32);
  grouped_linear_backward(gpu(), dyd, xd, wd, p.offsets, dxd, dwd);
  return {to_host_f32(gpu(), dxd), to_host_f32(gpu(), dwd)};
}

struct Case {
  DType dtype;
  int64_t rows, n, k;
};

class GroupedLinearBackwardCuda : public ::testing::TestWithParam<Case> {};

TEST_P(GroupedLinearBackwardCuda, EveryWayMatchesCpu) {
  const Case c = GetParam();
  const Problem p(c.rows, c.n, c.k, c.dtype);
  Tensor dx = Tensor::host(DType::f32, p.x.shape()), dw = Tensor::host(DType::f32, p.dw0.shape());
  std::memcpy(dw.data(), p.dw0.data(), dw.nbytes());
  grouped_linear_backward(cpu(), p.dy, p.x, p.w, p.offsets, dx, dw);
  const Tensor increment = minus(dw, p.dw0);
  // The inputs are the same rounded values on both sides and every way sums the products in
  // f32: only the order of the sums differs.
  const double tol = c.dtype == DType::f32 ? 1e-5 : 1e-4;
  const double dx_tol = c.dtype == DType::f32 ? 1e-5 : c.dtype == DType::f16 ? 2e-3 : 1e-2;  // dx rounds to d
  for (GroupedDw path : {GroupedDw::loop, GroupedDw::streams, GroupedDw::tf32, GroupedDw::kernel}) {
    const Grads g = cuda_backward(p, c.dtype, path);
    EXPECT_LT(rel_error(minus(g.dw, p.dw0), increment), tol) << grouped_dw_name(path) << " dw";
    // Our kernel's index arithmetic, element by element: a wrong tile edge or row shows here even
    // where the norm above would average it away (increments are O(1) to O(30); f32 sums of up to
    // a few thousand products differ by far less than 1e-2).
    if (path == GroupedDw::kernel) {
      EXPECT_LT(max_abs_diff(minus(g.dw, p.dw0), increment), 1e-2) << "kernel dw";
    }
    EXPECT_LT(rel_error(g.dx, dx), dx_tol) << grouped_dw_name(path) << " dx";
  }
}

// Streams gives loop's bits (the same GEMMs), and the kernel its own bits on every run (each dw
// tile is one block's, summed in one order).
TEST_P(GroupedLinearBackwardCuda, RepeatableBits) {
  const Case c = GetParam();
  const Problem p(c.rows, c.n, c.k, c.dtype);
  const Grads loop = cuda_backward(p, c.dtype, GroupedDw::loop);
  const Grads streams = cuda_backward(p, c.dtype, GroupedDw::streams);
  EXPECT_TRUE(same_bits(streams.dw, loop.dw));
  EXPECT_TRUE(same_bits(streams.dx, loop.dx));
  EXPECT_TRUE(
      same_bits(cuda_backward(p, c.dtype, GroupedDw::kernel).dw, cuda_backward(p, c.dtype, GroupedDw::kernel).dw));
}

INSTANTIATE_TEST_SUITE_P(Shapes, GroupedLinearBackwardCuda,
                         ::testing::Values(Case{DType::bf16, 6000, 128, 256},  // the grouped GEMMs
                                           Case{DType::f16, 6000, 128, 256}, Case{DType::f32, 6000, 128, 256},
                                           // the kernel's tiles cut at N and K: 200 = 128 + 72 rows, 136 = 128 + 8
                                           Case{DType::bf16, 5000, 200, 72}, Case{DType::f16, 5000, 72, 136},
                                           Case{DType::bf16, 3000, 40, 33},  // K off 16 bytes: per-group GEMMs
                                           Case{DType::f32, 3000, 40, 33},
                                           Case{DType::f16, 3000, 36, 64}),  // N off 8: kernel -> streams
                         [](const auto& info) {
                           const Case& c = info.param;
                           return std::string(dtype_name(c.dtype)) + "_R" + std::to_string(c.rows) + "_N" +
                                  std::to_string(c.n) + "_K" + std::to_string(c.k);
                         });

// The kernel against cuBLAS (loop) on the DeepSeek-like layer the kernel is for: 64 experts of
// [512, 512] over 24576 rows, split unevenly, in bf16 and f16; 4 x 4 tiles per expert.
TEST(GroupedLinearBackwardCudaKernel, MatchesLoopOnManyExperts) {
  for (DType d : {DType::bf16, DType::f16}) {
    const Problem p(24576, 512, 512, d);
    const Grads loop = cuda_backward(p, d, GroupedDw::loop);
    const Grads kernel = cuda_backward(p, d, GroupedDw::kernel);
    const Tensor want = minus(loop.dw, p.dw0), got = minus(kernel.dw, p.dw0);
    EXPECT_LT(rel_error(got, want), 1e-4) << dtype_name(d);
    EXPECT_LT(max_abs_diff(got, want), 2e-2) << dtype_name(d);
    EXPECT_TRUE(same_bits(kernel.dx, loop.dx)) << dtype_name(d);  // dx: the same grouped GEMM either way
  }
}

// The kernel way with dw a view at an odd float offset of a larger buffer (as a gradient inside a
// flat buffer may be): 4-byte aligned only, the kernel still takes it.
TEST(GroupedLinearBackwardCudaKernel, GradientViewAtAnyOffset) {
  const DType d = DType::bf16;
  const Problem p(3000, 64, 96, d);
  Tensor want = Tensor::host(DType::f32, p.dw0.shape()), dx = Tensor::host(DType::f32, p.x.shape());
  std::memcpy(want.data(), p.dw0.data(), want.nbytes());
  grouped_linear_backward(cpu(), p.dy, p.x, p.w, p.offsets, dx, want);
  const ScopedGroupedDw use(GroupedDw::kernel);
  const Tensor xd = to_device(gpu(), p.x, d), wd = to_device(gpu(), p.w, d), dyd = to_device(gpu(), p.dy, d);
  const Tensor buffer = Tensor::zeros(gpu(), DType::f32, {p.dw0.numel() + 1});
  const Tensor dwd = buffer.slice(1, p.dw0.shape());
  copy(gpu(), p.dw0, dwd);
  grouped_linear_backward(gpu(), dyd, xd, wd, p.offsets, Tensor(), dwd);
  const Tensor got = minus(to_host_f32(gpu(), dwd), p.dw0), increment = minus(want, p.dw0);
  EXPECT_LT(rel_error(got, increment), 1e-4);
  EXPECT_LT(max_abs_diff(got, increment), 1e-2);
  EXPECT_EQ(to_host_f32(gpu(), buffer).at(0), 0.0f);  // the float before the view untouched
}

// Inputs in stream-ordered memory released on ctx's stream right after the backward, and the
// memory handed out again and overwritten there at once: with ctx's stream joined to the side
// streams, the weight gradient still reads the inputs as they were. Three backwards in a row
// accumulate onto one gradient.
TEST(GroupedLinearBackwardCudaOrder, StreamsWaitBeforeInputsAreFreed) {
  const DType d = DType::bf16;
  const Problem p(24576, 512, 512, d);
  const Grads loop = [&] {
    const ScopedGroupedDw use(GroupedDw::loop);
    const Tensor xd = to_device(gpu(), p.x, d), wd = to_device(gpu(), p.w, d), dyd = to_device(gpu(), p.dy, d);
    const Tensor dwd = to_device(gpu(), p.dw0, DType::f32);
    for (int i = 0; i < 3; ++i) grouped_linear_backward(gpu(), dyd, xd, wd, p.offsets, Tensor(), dwd);
    return Grads{Tensor(), to_host_f32(gpu(), dwd)};
  }();
  const ScopedGroupedDw use(GroupedDw::streams);
  const Tensor wd = to_device(gpu(), p.w, d), dwd = to_device(gpu(), p.dw0, DType::f32);
  const Tensor x_src = to_device(gpu(), p.x, d), dy_src = to_device(gpu(), p.dy, d);
  const Tensor x_garbage = to_device(gpu(), random_normal(p.x.shape(), 9, 1e3f), d);
  const Tensor dy_garbage = to_device(gpu(), random_normal(p.dy.shape(), 10, 1e3f), d);
  for (int i = 0; i < 3; ++i) {
    {
      const Tensor xd = Tensor::stream_ordered(gpu(), d, p.x.shape());
      const Tensor dyd = Tensor::stream_ordered(gpu(), d, p.dy.shape());
      copy(gpu(), x_src, xd);
      copy(gpu(), dy_src, dyd);
      grouped_linear_backward(gpu(), dyd, xd, wd, p.offsets, Tensor(), dwd);
    }  // both freed on ctx's stream here; the same sizes again most likely get the same blocks
    const Tensor x_reuse = Tensor::stream_ordered(gpu(), d, p.x.shape());
    const Tensor dy_reuse = Tensor::stream_ordered(gpu(), d, p.dy.shape());
    copy(gpu(), x_garbage, x_reuse);
    copy(gpu(), dy_garbage, dy_reuse);
  }
  EXPECT_TRUE(same_bits(to_host_f32(gpu(), dwd), loop.dw));
}

}  // namespace
}  // namespace troupe::test
