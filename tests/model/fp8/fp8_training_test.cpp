// FP8 training on CPU devices (the CPU emulation of the FP8 GEMMs): a small GPT-2 on the bundled
// Moby Dick follows its f32 loss curve within a stated bound under each recipe (hybrid and e4m3,
// delayed and tensorwise), and FP8 is really on (the curves are not identical); delayed scaling's
// scales come from the recorded amaxes; the fused casts give the unfused bits; the recipe's flags
// refuse what is not implemented.
#include <cfloat>
#include <cmath>
#include <cstdio>

#include "data/token_windows.hpp"
#include "kernels/fp8.hpp"
#include "model/fp8/fp8_linears.hpp"
#include "model/train/trainer.hpp"
#include "tests/model/fp8/fp8_chunk_steps.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

constexpr int64_t kIters = 40;
// GPT-2 token ids folded into this vocabulary (the output layer dominates a CPU step otherwise).
constexpr int64_t kVocab = 2048;
// The mean over the run of |FP8 loss - f32 loss|, and that at the last iteration, nats. (The
// largest single gap is printed: where one run has a loss spike the other has not, it reaches a
// few tenths for an iteration or two.)
constexpr double kMeanBound = 0.05, kFinalBound = 0.05;

GptConfig small_gpt(int64_t vocab) {
  GptConfig c = GptConfig::gpt2_124m();
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.seq_length = 32;
  c.vocab_size = vocab;
  return c;
}

struct Corpus {
  std::vector<int32_t> ids;  // folded into kVocab
};

const Corpus& moby_dick() {
  static const Corpus corpus = [] {
    TokenizerOptions topt;
    topt.vocab_file = source_path("assets/gpt2/gpt2-vocab.json");
    topt.merge_file = source_path("assets/gpt2/gpt2-merges.txt");
    const auto tokenizer = build_tokenizer(topt);
    Corpus c;
    c.ids = tokenize_jsonl(source_path("assets/corpora/moby-dick.jsonl"), *tokenizer);
    for (int32_t& id : c.ids) id %= int32_t(kVocab);
    return c;
  }();
  return corpus;
}

// The per-iteration losses of kIters steps (two microbatches each) with `recipe` (off: f32).
std::vector<double> train_losses(const Fp8Recipe& recipe) {
  const Corpus& corpus = moby_dick();
  TokenWindows train{std::span<const int32_t>(corpus.ids), 1};
  const GptConfig c = small_gpt(kVocab);
  GptChunk model(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  model.init_weights(1234);
  if (recipe.enabled) model.enable_fp8(recipe);
  Optimizer optimizer(
      model, {.adam = {.lr = 0, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f}, .clip_grad = 1.0f});
  LrSchedule schedule{
      .lr = 5e-3, .min_lr = 5e-4, .warmup_iters = 5, .decay_iters = kIters, .style = LrDecayStyle::cosine};
  Trainer trainer(model, optimizer, schedule);
  std::vector<double> losses;
  for (int64_t it = 0; it < kIters; ++it)
    losses.push_back(trainer.train_step({train.next(4, c.seq_length), train.next(4, c.seq_length)}).loss);
  return losses;
}

Fp8Recipe recipe(const std::string& format, const std::string& scaling, int history = 1,
                 const std::string& algo = "most_recent") {
  return fp8_recipe_from_flags(
      {.format = format, .recipe = scaling, .amax_history_len = history, .amax_compute_algo = algo});
}

TEST(Fp8Training, LossFollowsTheF32Run) {
  const std::vector<double> ref = train_losses({});
  struct Case {
    const char* name;
    Fp8Recipe recipe;
  };
  const Case cases[] = {
      {"hybrid/delayed", recipe("hybrid", "delayed")},
      {"hybrid/delayed history 8 max", recipe("hybrid", "delayed", 8, "max")},
      {"e4m3/delayed", recipe("e4m3", "delayed")},
      {"hybrid/tensorwise", recipe("hybrid", "tensorwise")},
      {"e4m3/tensorwise", recipe("e4m3", "tensorwise")},
  };
  for (const Case& k : cases) {
    const std::vector<double> got = train_losses(k.recipe);
    double mean = 0, worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      mean += std::fabs(got[i] - ref[i]) / double(got.size());
      worst = std::max(worst, std::fabs(got[i] - ref[i]));
    }
    const double final_diff = std::fabs(got.back() - ref.back());
    std::printf("  %-30s loss %.4f -> %.4f (f32 %.4f -> %.4f), |fp8 - f32| mean %.4f, max %.4f, last %.4f\n", k.name,
                got.front(), got.back(), ref.front(), ref.back(), mean, worst, final_diff);
    EXPECT_LT(mean, kMeanBound) << k.name;
    EXPECT_LT(final_diff, kFinalBound) << k.name;
    EXPECT_GT(worst, 1e-6) << k.name << ": identical to f32, FP8 is not on";
    EXPECT_GT(got.front() - got.back(), 1.0) << k.name << ": the loss must fall";
  }
}

// After one step of delayed scaling (history 1), each weight's scale is fp8_max / its amax as
// the step saw it, and tensors of the backward format use e5m2's max under hybrid.
TEST(Fp8Training, DelayedScalesComeFromTheRecordedAmax) {
  GptConfig c = small_gpt(64);
  c.seq_length = 16;
  GptChunk model(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  model.init_weights(7);
  model.enable_fp8(recipe("hybrid", "delayed"));
  const Tensor tokens = random_tokens({2, c.seq_length}, 1, 64), targets = random_tokens({2, c.seq_length}, 2, 64);
  ActivationsPtr a = model.forward(tokens, targets, Tensor(), {.training = true, .loss_grad_scale = 1.0f / 32});
  model.backward(*a, Tensor(), Tensor());
  const Fp8Linears& fp8 = *model.fp8();
  // Before the update every scale is 1; the newest history row holds the step's amaxes.
  EXPECT_EQ(fp8.forward_meta().scale.at(1), 1.0f);
  const LayerTensors w = model.layout().layer(model.params(), 0);
  Tensor amax = Tensor::host_f32({1}, {0.0f});
  fp8_amax(cpu(), w.qkv_w, amax);
  EXPECT_EQ(fp8.forward_meta().history.at(1), amax.at(0));  // column 1: linear 0's weight
  const float dy_amax = fp8.backward_meta().history.at(0);
  EXPECT_GT(dy_amax, 0.0f);
  model.fp8_update_scales();
  EXPECT_EQ(fp8.forward_meta().scale.at(1), 448.0f / amax.at(0));
  EXPECT_EQ(fp8.forward_meta().scale_inv.at(1 * kFp8ScaleRow), 1.0f / (448.0f / amax.at(0)));
  EXPECT_EQ(fp8.backward_meta().scale.at(0), 57344.0f / dy_amax);
  EXPECT_EQ(fp8.forward_meta().history.at(1), 0.0f);  // rolled: a fresh row for the next step
  model.release(std::move(a));
}

// The fused casts (amaxes folded into the casts, the norms writing the linears' input casts) give
// the unfused path's bits: losses, gradients and scaling state over three steps.
TEST(Fp8Training, FusedCastsGiveTheUnfusedBits) {
  for (const char* scaling : {"delayed", "tensorwise"}) {
    const Fp8Recipe fused = recipe("hybrid", scaling);
    Fp8Recipe unfused = fused;
    unfused.fuse_casts = false;
    SCOPED_TRACE(scaling);
    expect_same_bits(fp8_chunk_steps(cpu(), DType::f32, fused), fp8_chunk_steps(cpu(), DType::f32, unfused));
  }
}

TEST(Fp8Training, RecipeFlagsRefuseWhatIsNotImplemented) {
  EXPECT_FALSE(fp8_recipe_from_flags({}).enabled);
  const Fp8Recipe h = recipe("hybrid", "delayed", 16, "max");
  EXPECT_TRUE(h.enabled);
  EXPECT_EQ(h.forward, Fp8Format::e4m3);
  EXPECT_EQ(h.backward, Fp8Format::e5m2);
  EXPECT_EQ(h.amax_history_len, 16);
  EXPECT_TRUE(h.amax_max);
  EXPECT_EQ(recipe("e4m3", "tensorwise").backward, Fp8Format::e4m3);
  auto refused = [](const Fp8Flags& f, const std::string& flag) {
    try {
      fp8_recipe_from_flags(f);
      ADD_FAILURE() << "accepted; expected an error naming " << flag;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  refused({.format = "e5m2"}, "--fp8-format");
  refused({.format = "hybrid", .recipe = "mxfp8"}, "--fp8-recipe");
  refused({.format = "hybrid", .recipe = "blockwise"}, "--fp8-recipe");
  refused({.format = "hybrid", .amax_history_len = 0}, "--fp8-amax-history-len");
  refused({.format = "hybrid", .amax_compute_algo = "mean"}, "--fp8-amax-compute-algo");
  refused({.format = "hybrid", .recipe = "tensorwise", .margin = 1}, "--fp8-margin");
}

TEST(Fp8Training, MoeLayersAreRefused) {
  GptConfig c = small_gpt(64);
  c.moe.num_experts = 4;
  c.disable_bias_linear = true;
  GptChunk model(cpu(), c, ChunkSpec::whole_model(), DType::f32);
  EXPECT_THROW(model.enable_fp8(recipe("hybrid", "delayed")), Error);
}

}  // namespace
}  // namespace troupe::test
