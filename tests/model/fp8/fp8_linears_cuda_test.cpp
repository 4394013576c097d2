// FP8 linear layers on CUDA (cuBLASLt FP8 GEMMs, bf16 activations) against the CPU emulation on
// the same bf16-rounded inputs: forward, dgrad, wgrad and bias gradient on GPT-2 124M's shapes,
// e4m3 and hybrid, delayed (second step, scales from the first) and tensorwise. The casts are
// bit-exact across backends, so the GEMMs differ only by accumulation order and bf16 outputs.
// Then a whole small GPT in FP8 on the GPU against the CPU's FP8 run: the per-token losses; and
// with the fused casts against the unfused ones, bit for bit.
#include "model/fp8/fp8_linears.hpp"
#include "model/gpt_chunk.hpp"
#include "tests/model/fp8/fp8_chunk_steps.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct Shape3 {
  int64_t m, k, n;
};

struct Side {
  Tensor x, w, b, dy;  // compute dtype on the backend
  Tensor y, dx, dw, db;
};

Side make_side(const Context& ctx, DType t, Shape3 s, const Tensor& x, const Tensor& w, const Tensor& b,
               const Tensor& dy) {
  auto dev = [&](const Tensor& h) { return ctx.is_cuda() ? to_device(ctx, h, t) : h; };
  Side side{dev(x), dev(w), dev(b), dev(dy), {}, {}, {}, {}};
  side.y = Tensor::empty(ctx, t, {s.m, s.n});
  side.dx = Tensor::empty(ctx, t, {s.m, s.k});
  side.dw = Tensor::zeros(ctx, DType::f32, {s.n, s.k});
  side.db = Tensor::zeros(ctx, DType::f32, {s.n});
  return side;
}

// Two steps (delayed: the second casts with the scales the first recorded); the second's outputs.
void two_steps(Fp8Linears& fp8, Side& s) {
  for (int step = 0; step < 2; ++step) {
    const Context& ctx = s.dw.is_cuda() ? gpu() : cpu();
    fill_zero(ctx, s.dw);
    fill_zero(ctx, s.db);
    fp8.forward(0, s.x, s.w, s.b, s.y);
    fp8.backward(0, s.dy, s.x, s.w, s.dx, s.dw, s.db);
    fp8.update_scales({});
  }
}

class Fp8LinearsCuda : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(Fp8LinearsCuda, MatchTheCpuEmulation) {
  const auto [format, scaling] = GetParam();
  const Fp8Recipe recipe = fp8_recipe_from_flags({.format = format, .recipe = scaling});
  for (Shape3 s : {Shape3{512, 768, 2304}, Shape3{512, 768, 768}, Shape3{512, 768, 3072}, Shape3{512, 3072, 768}}) {
    const DType t = DType::bf16;
    const Tensor x = round_through(random_normal({s.m, s.k}, 1), t);
    const Tensor w = round_through(random_normal({s.n, s.k}, 2, 0.02f), t);
    const Tensor b = round_through(random_normal({s.n}, 3, 0.1f), t);
    const Tensor dy = round_through(random_normal({s.m, s.n}, 4, 1e-3f), t);
    Side ref = make_side(cpu(), DType::f32, s, x, w, b, dy);
    Side got = make_side(gpu(), t, s, x, w, b, dy);
    Fp8Linears fp8_cpu(cpu(), recipe, 1, {}), fp8_gpu(gpu(), recipe, 1, {});
    two_steps(fp8_cpu, ref);
    two_steps(fp8_gpu, got);
    // The casts agree bit for bit, so the scales do too.
    EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), fp8_gpu.forward_meta().scale), fp8_cpu.forward_meta().scale), 0.0);
    EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), fp8_gpu.backward_meta().scale), fp8_cpu.backward_meta().scale), 0.0);
    const double y = rel_error(to_host_f32(gpu(), got.y), ref.y), dx = rel_error(to_host_f32(gpu(), got.dx), ref.dx);
    const double dw = rel_error(to_host_f32(gpu(), got.dw), ref.dw), db = rel_error(to_host_f32(gpu(), got.db), ref.db);
    std::printf("  %s/%s %lldx%lldx%lld: rel errors y %.2e dx %.2e dw %.2e db %.2e\n", format.c_str(), scaling.c_str(),
                (long long)s.m, (long long)s.k, (long long)s.n, y, dx, dw, db);
    EXPECT_LT(y, 5e-3);   // bf16 output
    EXPECT_LT(dx, 5e-3);  // bf16 output
    // f32 from the same fp8 operands; Hopper's FP8 tensor cores keep fewer bits than f32 between
    // cuBLASLt's promotions (about 1.3e-4 on an H200, as fp8_cuda_test's f32 accumulation).
    EXPECT_LT(dw, 2e-4);
    EXPECT_LT(db, 1e-4);  // column sums of the same bf16 dy
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, Fp8LinearsCuda,
                         ::testing::Combine(::testing::Values("e4m3", "hybrid"),
                                            ::testing::Values("delayed", "tensorwise")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// The zero-bubble split on CUDA: backward_input (dx) then backward_weight (dw, db) with the
// scales B kept, after another cast moved the meta, give backward's results bit for bit.
TEST_P(Fp8LinearsCuda, SplitBackwardEqualsBackward) {
  const auto [format, scaling] = GetParam();
  const Fp8Recipe recipe = fp8_recipe_from_flags({.format = format, .recipe = scaling});
  const Shape3 s{512, 768, 2304};
  const DType t = DType::bf16;
  const Tensor x = random_normal({s.m, s.k}, 1), w = random_normal({s.n, s.k}, 2, 0.02f);
  const Tensor b = random_normal({s.n}, 3, 0.1f), dy = random_normal({s.m, s.n}, 4, 1e-3f);
  Side whole = make_side(gpu(), t, s, x, w, b, dy), split = make_side(gpu(), t, s, x, w, b, dy);
  Fp8Linears fp8(gpu(), recipe, 1, {});
  fp8.forward(0, whole.x, whole.w, whole.b, whole.y);
  fp8.update_scales({});  // delayed: non-trivial scales for the backward
  fp8.forward(0, whole.x, whole.w, whole.b, whole.y);
  fp8.backward(0, whole.dy, whole.x, whole.w, whole.dx, whole.dw, whole.db);
  const Tensor scales = Tensor::empty(gpu(), DType::f32, {Fp8Linears::kWgradScales, kFp8ScaleRow});
  fp8.backward_input(0, split.dy, split.x, split.w, split.dx, scales);
  // Another microbatch's casts in between (tensorwise: they overwrite the meta's scales).
  const Tensor other = to_device(gpu(), random_normal({s.m, s.n}, 5, 3e-3f), t);
  fp8.backward_input(0, other, split.x, split.w, Tensor(),
                     Tensor::empty(gpu(), DType::f32, {Fp8Linears::kWgradScales, kFp8ScaleRow}));
  fp8.backward_weight(0, split.dy, split.x, split.w, split.dw, split.db, scales);
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), split.dx), to_host_f32(gpu(), whole.dx)), 0.0);
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), split.dw), to_host_f32(gpu(), whole.dw)), 0.0);
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), split.db), to_host_f32(gpu(), whole.db)), 0.0);
}

// The fused casts on CUDA (the amaxes folded into the casts and cast-transposes, ln1 and ln2
// writing qkv's and fc1's input casts in their own pass) give the unfused path's bits in a whole
// chunk over three steps: losses, gradients, amax histories and scales.
TEST_P(Fp8LinearsCuda, FusedCastsGiveTheUnfusedBitsInAChunk) {
  const auto [format, scaling] = GetParam();
  const Fp8Recipe fused = fp8_recipe_from_flags({.format = format, .recipe = scaling});
  Fp8Recipe unfused = fused;
  unfused.fuse_casts = false;
  expect_same_bits(fp8_chunk_steps(gpu(), DType::bf16, fused), fp8_chunk_steps(gpu(), DType::bf16, unfused));
}

// A small GPT-2 (widths multiples of 16) in FP8: CUDA bf16 against the CPU's f32 emulation on the
// same weights and tokens. bf16 activations move some casts by one fp8 step, so the bound is
// loose; it still fails if a GEMM, a transpose or a scale were wrong.
TEST(Fp8ChunkCuda, LossesMatchTheCpuFp8Run) {
  const GptConfig c = fp8_test_gpt();
  const Fp8Recipe recipe = fp8_recipe_from_flags({.format = "hybrid", .recipe = "tensorwise"});
  const Tensor tokens = random_tokens({4, c.seq_length}, 1, 512), targets = random_tokens({4, c.seq_length}, 2, 512);
  Tensor weights = Tensor::host(DType::f32, {ParamLayout(c, ChunkSpec::whole_model()).size()});
  init_params(ParamLayout(c, ChunkSpec::whole_model()), 3, weights);
  weights = round_through(weights, DType::bf16);
  auto losses = [&](const Context& ctx, DType t) {
    GptChunk model(ctx, c, ChunkSpec::whole_model(), t);
    model.load_weights(weights);
    model.enable_fp8(recipe);
    ActivationsPtr a = model.forward(tokens, targets, Tensor(), {.training = true, .loss_grad_scale = 1.0f / 256});
    model.backward(*a, Tensor(), Tensor());
    Tensor l = to_host_f32(ctx, a->losses);
    model.release(std::move(a));
    return l;
  };
  const Tensor ref = losses(cpu(), DType::f32), got = losses(gpu(), DType::bf16);
  const double err = rel_error(got, ref);
  std::printf("  per-token losses, CUDA bf16 FP8 against CPU FP8: rel error %.2e\n", err);
  EXPECT_LT(err, 2e-2);
}

}  // namespace
}  // namespace troupe::test
