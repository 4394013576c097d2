// The grouped linear with device offsets (one fixed-grid kernel, kernels/cuda/grouped_linear_offsets.cu)
// against the CPU backend's host loop on the same rounded inputs: several group counts, decode
// and prefill row counts, empty groups, every row in one group, widths and depths that are not
// multiples of the 32 x 64 x 64 tiles (and depths off the 16-byte loads), in bf16, f16 and f32.
// Then the kernel captured in a CUDA graph and replayed with other offsets: the grid does not
// depend on them.
#include <algorithm>
#include <vector>

#include "kernels/cuda_graph.hpp"
#include "kernels/grouped_linear.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct Case {
  int64_t groups, rows, n, k;
  int layout;  // 0: random split with empty groups; 1: every row in the last group; 2: one row per group
};

// G + 1 ascending offsets from 0 to R.
std::vector<int64_t> make_offsets(const Case& c, uint64_t seed) {
  std::vector<int64_t> o(size_t(c.groups) + 1, 0);
  if (c.layout == 1) {
    std::fill(o.begin() + 1, o.end() - 1, 0);
  } else if (c.layout == 2) {
    for (int64_t g = 1; g < c.groups; ++g) o[size_t(g)] = std::min(g, c.rows);
  } else {
    const Tensor u = random_uniform({c.groups - 1}, seed, 0.0f, 1.0f);
    for (int64_t g = 1; g < c.groups; ++g) {
      const float v = u.at(g - 1);
      o[size_t(g)] = v < 0.3f ? 0 : int64_t(float(c.rows) * v);  // many cuts at 0: empty groups
    }
    std::sort(o.begin() + 1, o.end() - 1);
  }
  o.back() = c.rows;
  return o;
}

Tensor offsets_tensor(const std::vector<int64_t>& o) {
  Tensor t = Tensor::host(DType::i32, {int64_t(o.size())});
  for (size_t i = 0; i < o.size(); ++i) t.data_as<int32_t>()[i] = int32_t(o[i]);
  return t;
}

double tolerance(DType d) { return d == DType::f32 ? 1e-5 : d == DType::f16 ? 2e-3 : 1e-2; }

class GroupedLinearOffsetsCuda : public ::testing::TestWithParam<Case> {};

TEST_P(GroupedLinearOffsetsCuda, MatchesCpu) {
  const Case c = GetParam();
  const std::vector<int64_t> offsets = make_offsets(c, 5);
  for (DType d : {DType::bf16, DType::f16, DType::f32}) {
    const Tensor x = round_through(random_normal({c.rows, c.k}, 1), d);
    const Tensor w = round_through(random_normal({c.groups, c.n, c.k}, 2, 0.2f), d);
    Tensor y = Tensor::host(DType::f32, {c.rows, c.n});
    grouped_linear_forward(cpu(), x, w, offsets, y);
    const Tensor xd = to_device(gpu(), x, d), wd = to_device(gpu(), w, d);
    const Tensor od = to_device(gpu(), offsets_tensor(offsets), DType::i32);
    Tensor yd = Tensor::empty(gpu(), d, {c.rows, c.n});
    grouped_linear_forward(gpu(), xd, wd, od, yd);
    const double err = rel_error(to_host_f32(gpu(), yd), y);
    EXPECT_LT(err, tolerance(d)) << dtype_name(d);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GroupedLinearOffsetsCuda,
                         ::testing::Values(Case{1, 2, 64, 64, 0},       // one group, decode
                                           Case{8, 4, 128, 128, 0},     // decode, top-2 of 2 tokens
                                           Case{8, 16, 100, 72, 0},     // N and K off the tiles
                                           Case{8, 37, 130, 33, 0},     // K off the 16-byte loads
                                           Case{64, 300, 96, 200, 0},   // many groups, some empty
                                           Case{64, 64, 64, 64, 2},     // one row per group
                                           Case{16, 200, 40, 64, 1},    // every row in the last group
                                           Case{8, 1000, 192, 256, 0},  // prefill-sized
                                           Case{3, 512, 1000, 40, 0}),  // wide N, shallow K
                         [](const auto& info) {
                           const Case& c = info.param;
                           return "G" + std::to_string(c.groups) + "_R" + std::to_string(c.rows) + "_N" +
                                  std::to_string(c.n) + "_K" + std::to_string(c.k) + "_L" + std::to_string(c.layout);
                         });

TEST(GroupedLinearOffsetsCuda, GraphReplaysWithNewOffsets) {
  const Case c{8, 48, 96, 80, 0};
  for (DType d : {DType::bf16, DType::f32}) {
    const Tensor x = round_through(random_normal({c.rows, c.k}, 11), d);
    const Tensor w = round_through(random_normal({c.groups, c.n, c.k}, 12, 0.2f), d);
    const Tensor xd = to_device(gpu(), x, d), wd = to_device(gpu(), w, d);
    Tensor od = Tensor::empty(gpu(), DType::i32, {c.groups + 1});
    Tensor yd = Tensor::empty(gpu(), d, {c.rows, c.n});
    copy(gpu(), offsets_tensor(make_offsets(c, 1)), od);
    grouped_linear_forward(gpu(), xd, wd, od, yd);  // op by op first, as InferenceModel does
    const CudaGraph graph = CudaGraph::capture(gpu(), [&] { grouped_linear_forward(gpu(), xd, wd, od, yd); });
    for (uint64_t seed : {2, 3, 4}) {
      Case layout = c;
      layout.layout = seed == 4 ? 1 : 0;
      const std::vector<int64_t> offsets = make_offsets(layout, seed);
      copy(gpu(), offsets_tensor(offsets), od);
      gpu().synchronize();  // the host source goes away
      graph.launch(gpu());
      Tensor y = Tensor::host(DType::f32, {c.rows, c.n});
      grouped_linear_forward(cpu(), x, w, offsets, y);
      EXPECT_LT(rel_error(to_host_f32(gpu(), yd), y), tolerance(d)) << dtype_name(d) << " seed " << seed;
    }
  }
}

}  // namespace
}  // namespace troupe::test
