// The inference MoE MLP (device offsets, preallocated buffers) against the training block's
// forward with training=false on the CPU backend: the same routing and the same sums, so the
// outputs are equal; for a Mixtral-like block (softmax top-2, SwiGLU) and a DeepSeek-like one
// (sigmoid scores with an expert bias and scaling, a gated shared expert, GELU), at decode
// sizes (1 and 3 tokens), at the buffers' full size and beyond it (in chunks). A capacity config
// is refused.
#include <string>

#include "model/moe/moe_mlp_inference.hpp"
#include "tests/model/moe/moe_test_util.hpp"

namespace troupe::test {
namespace {

class MoeMlpInference : public ::testing::TestWithParam<int> {};

TEST_P(MoeMlpInference, MatchesTrainingForward) {
  const MoeMlpSpec spec = inference_test_spec(GetParam() == 1);
  spec.moe.validate(1);
  const MoeMlpParams p = random_moe_params(spec, 70, 0.2f);
  MoeRouterState state = moe_router_state(spec.moe);
  if (state.expert_bias.defined()) state.expert_bias = random_normal({spec.moe.num_experts}, 71, 0.1f);
  constexpr int64_t kMax = 24;
  const MoeInferenceBuffers b = moe_inference_buffers(cpu(), spec, kMax, DType::f32);
  for (int64_t n : {int64_t(1), int64_t(3), kMax, 2 * kMax + 3}) {  // the last in three chunks
    const Tensor x = random_normal({n, spec.hidden}, 72 + uint64_t(n));
    Tensor want = Tensor::host(DType::f32, {n, spec.hidden}), got = Tensor::host(DType::f32, {n, spec.hidden});
    MoeMlpActivations a;
    moe_mlp_forward(cpu(), spec, p, state, x, n, /*training=*/false, a, want);
    moe_mlp_inference_forward(cpu(), spec, p, state, x, b, got);
    if (n <= kMax)
      EXPECT_EQ(max_abs_diff(got, want), 0.0) << n << " tokens";
    else  // chunks: other GEMM shapes, so OpenBLAS's summation order may change
      EXPECT_LT(rel_error(got, want), 1e-6) << n << " tokens";
  }
}

INSTANTIATE_TEST_SUITE_P(Blocks, MoeMlpInference, ::testing::Values(0, 1),
                         [](const auto& info) { return std::string(info.param == 0 ? "mixtral" : "deepseek"); });

TEST(MoeMlpInferenceChecks, RefusesCapacity) {
  MoeMlpSpec spec = inference_test_spec(false);
  spec.moe.moe_expert_capacity_factor = 1.0;
  EXPECT_THROW(moe_inference_buffers(cpu(), spec, 4, DType::f32), Error);
}

}  // namespace
}  // namespace troupe::test
