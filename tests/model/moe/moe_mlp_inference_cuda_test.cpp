// The inference MoE MLP on CUDA (device offsets, the fixed-grid grouped GEMM) against the CPU
// backend on the same rounded inputs, in f32 and bf16, at decode and prefill sizes; then one
// forward captured in a CUDA graph and replayed on other tokens (so other routings, other expert
// row counts) equal to the same forward run op by op, bit for bit: the same kernels run.
#include <string>

#include "kernels/cuda_graph.hpp"
#include "model/moe/moe_mlp_inference.hpp"
#include "tests/model/moe/moe_test_util.hpp"

namespace troupe::test {
namespace {

struct Block {
  MoeMlpParams p;
  MoeRouterState state;
};

Block on_device(const MoeMlpSpec& spec, const MoeMlpParams& host, const Tensor& bias, DType d) {
  auto dev = [&](const Tensor& t, DType type) { return t.defined() ? to_device(gpu(), t, type) : Tensor(); };
  Block b{{dev(host.router, DType::f32), dev(host.fc1, d), dev(host.fc2, d), dev(host.shared_fc1, d),
           dev(host.shared_fc2, d), dev(host.shared_gate, d)},
          moe_router_state(gpu(), spec.moe)};
  if (b.state.expert_bias.defined()) copy(gpu(), bias, b.state.expert_bias);
  return b;
}

MoeMlpParams rounded(const MoeMlpParams& p, DType d) {
  auto r = [&](const Tensor& t) { return t.defined() ? round_through(t, d) : Tensor(); };
  return {p.router, r(p.fc1), r(p.fc2), r(p.shared_fc1), r(p.shared_fc2), r(p.shared_gate)};
}

class MoeMlpInferenceCuda : public ::testing::TestWithParam<int> {};

TEST_P(MoeMlpInferenceCuda, MatchesCpuAndGraphReplaysMatchOpByOp) {
  const MoeMlpSpec spec = inference_test_spec(GetParam() == 1);
  spec.moe.validate(1);
  const Tensor bias = random_normal({spec.moe.num_experts}, 91, 0.1f);
  constexpr int64_t kMax = 256;
  for (DType d : {DType::f32, DType::bf16}) {
    const MoeMlpParams host = rounded(random_moe_params(spec, 90, 0.15f), d);
    MoeRouterState cpu_state = moe_router_state(spec.moe);
    if (cpu_state.expert_bias.defined()) cpu_state.expert_bias = bias;
    const Block dev = on_device(spec, host, bias, d);
    const MoeInferenceBuffers cpu_b = moe_inference_buffers(cpu(), spec, kMax, DType::f32);
    const MoeInferenceBuffers gpu_b = moe_inference_buffers(gpu(), spec, kMax, d);
    for (int64_t n : {int64_t(1), int64_t(4), int64_t(37), kMax}) {
      const Tensor x = round_through(random_normal({n, spec.hidden}, 92 + uint64_t(n)), d);
      Tensor want = Tensor::host(DType::f32, {n, spec.hidden});
      moe_mlp_inference_forward(cpu(), spec, host, cpu_state, x, cpu_b, want);
      const Tensor xd = to_device(gpu(), x, d);
      Tensor yd = Tensor::empty(gpu(), d, {n, spec.hidden});
      moe_mlp_inference_forward(gpu(), spec, dev.p, dev.state, xd, gpu_b, yd);
      const double err = rel_error(to_host_f32(gpu(), yd), want);
      std::printf("%s %s n=%lld: CUDA vs CPU rel err %.2e\n", GetParam() == 0 ? "mixtral" : "deepseek", dtype_name(d),
                  static_cast<long long>(n), err);
      EXPECT_LT(err, d == DType::f32 ? 1e-5 : 2e-2) << dtype_name(d) << " n " << n;
    }

    // A graph of a 4-token forward, replayed on new tokens, against the op-by-op forward.
    const int64_t n = 4;
    const Tensor xd = Tensor::empty(gpu(), d, {n, spec.hidden});
    const Tensor yd = Tensor::empty(gpu(), d, {n, spec.hidden}), ref = Tensor::empty(gpu(), d, {n, spec.hidden});
    copy(gpu(), to_device(gpu(), round_through(random_normal({n, spec.hidden}, 200), d), d), xd);
    moe_mlp_inference_forward(gpu(), spec, dev.p, dev.state, xd, gpu_b, yd);
    const CudaGraph graph =
        CudaGraph::capture(gpu(), [&] { moe_mlp_inference_forward(gpu(), spec, dev.p, dev.state, xd, gpu_b, yd); });
    for (uint64_t seed = 201; seed < 206; ++seed) {
      copy(gpu(), to_device(gpu(), round_through(random_normal({n, spec.hidden}, seed), d), d), xd);
      graph.launch(gpu());
      const Tensor replayed = to_host_f32(gpu(), yd);
      moe_mlp_inference_forward(gpu(), spec, dev.p, dev.state, xd, gpu_b, ref);
      EXPECT_EQ(max_abs_diff(replayed, to_host_f32(gpu(), ref)), 0.0) << dtype_name(d) << " seed " << seed;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Blocks, MoeMlpInferenceCuda, ::testing::Values(0, 1),
                         [](const auto& info) { return std::string(info.param == 0 ? "mixtral" : "deepseek"); });

}  // namespace
}  // namespace troupe::test
