// Prefill of one P-token prompt (default 2048) by the inference model against its roofline
// (issue 21), on GPT-2 shapes with random weights, bf16, batch 1 (--device cpu: f32, a smoke run). A prefill is one
// InferenceModel::forward of the whole prompt (host packing included: a device sync, the clock,
// the forward, a device sync), the median of --reps after --warmup runs; fresh prefills take the
// training causal attention (kernels/attention.hpp), and "paged" reruns them with every row on
// paged attention (InferenceModelOptions::causal_prefill off) for the before/after. Each path
// also times the first prefill of a length it has not seen (P - 1, P - 2): what per-shape setup
// (cuDNN builds an attention plan per sequence length) adds to a new prompt length.
//
// The roofline is the time of the FLOPs a prefill must do at rates measured in the same run:
//   t_roof = GEMM FLOPs / GEMM rate + attention FLOPs / attention rate
// GEMM FLOPs: the layers' qkv, proj, fc1 and fc2 over P rows, and the LM head of the last row
// only (the only logits a prefill returns). GEMM rate: linear_forward (cuBLASLt) on those four
// shapes at M = P, their FLOPs over their summed time. Attention FLOPs: the causal forward
// (4 H D per visible pair, T^2 / 2 pairs) per layer; its rate: attention_forward at T = P on the
// model's heads (the CUDA attention backend in use). Norms, RoPE, the cache append and the
// residual adds are not in the roofline (memory-bound, small): they are part of the gap.
//
//   prefill_bench [--models gpt2-124m,gpt2-350m] [--prompt 2048] [--reps 10] [--warmup 3] [--profile]
//   prefill_bench --prompt 1024 --profile    # + where each path's prefill time goes, op by op
//   prefill_bench --device cpu --models gpt2-tiny --prompt 64 --reps 2   # CPU smoke run
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "base/check.hpp"
#include "bench/common/attention_flop.hpp"
#include "bench/common/random_tensor.hpp"
#include "kernels/attention.hpp"
#include "kernels/linear.hpp"
#include "kernels/op_profiler.hpp"
#include "model/inference/inference_model.hpp"

#if TROUPE_HAVE_CUDA
#include "kernels/cuda/attention_cudnn.hpp"
#include "kernels/cuda/runtime.hpp"
#endif

namespace {

using namespace troupe;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string models = "gpt2-124m,gpt2-350m", device = "cuda";
  int64_t prompt = 2048;
  int reps = 10, warmup = 3;
  bool profile = false;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Milliseconds per call of fn: CUDA events around `calls` back-to-back calls (a lone call of a
// few microseconds would time its launch), the median of `reps` such runs after a warm-up; the
// clock around one call on the CPU.
double kernel_ms(const Context& ctx, const std::function<void()>& fn, int reps, int calls) {
  for (int i = 0; i < 3; ++i) fn();  // warm-up: plans, workspaces
  if (!ctx.is_cuda()) {
    std::vector<double> ms;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      fn();
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    return median(ms);
  }
#if TROUPE_HAVE_CUDA
  void* start = cuda::event_create();
  void* stop = cuda::event_create();
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    cuda::event_record(ctx, start);
    for (int i = 0; i < calls; ++i) fn();
    cuda::event_record(ctx, stop);
    ms.push_back(double(cuda::event_elapsed_ms(start, stop)) / calls);
  }
  cuda::event_destroy(start);
  cuda::event_destroy(stop);
  return median(ms);
#else
  (void)ctx, (void)fn, (void)reps, (void)calls;
  TROUPE_FAIL("this build has no CUDA backend");
#endif
}

// The linear layers of one transformer layer as [M, K] x [N, K]^T GEMMs: qkv, proj, fc1, fc2.
struct GemmShape {
  int64_t k, n;
};
std::vector<GemmShape> layer_gemms(const ParamLayout& layout) {
  const GptConfig& c = layout.config();
  const int64_t C = c.hidden_size, F = layout.local_ffn(), HD = int64_t(layout.local_heads()) * c.head_dim();
  return {{C, layout.local_qkv_size()}, {HD, C}, {C, c.swiglu ? 2 * F : F}, {F, C}};
}

struct Rate {
  double flop = 0, ms = 0;
  double tflops() const { return flop / (ms * 1e9); }
};

// linear_forward (bias and all) on the layer's GEMM shapes at M = rows: their FLOPs and summed time.
Rate gemm_rate(const Context& ctx, DType dtype, const ParamLayout& layout, int64_t rows, int reps) {
  Rate r;
  uint64_t seed = 1;
  for (const GemmShape& g : layer_gemms(layout)) {
    const Tensor x = bench::random_normal(ctx, dtype, {rows, g.k}, seed++);
    const Tensor w = bench::random_normal(ctx, dtype, {g.n, g.k}, seed++, 0.0f, 0.02f);
    const Tensor b = bench::random_normal(ctx, dtype, {g.n}, seed++);
    const Tensor y = Tensor::empty(ctx, dtype, {rows, g.n});
    r.ms += kernel_ms(
        ctx, [&] { linear_forward(ctx, x, w, b, y); }, reps, 10);
    r.flop += 2.0 * double(rows) * double(g.k) * double(g.n);
  }
  return r;
}

// attention_forward over one sequence of T rows with the model's heads: its FLOPs and time.
Rate attention_rate(const Context& ctx, DType dtype, const ParamLayout& layout, int64_t T, int reps) {
  const GptConfig& c = layout.config();
  const AttentionConfig cfg{layout.local_heads(), layout.local_query_groups(), c.head_dim(), 0.0f, c.sliding_window};
  const Tensor qkv = bench::random_normal(ctx, dtype, {1, T, layout.local_qkv_size()}, 7);
  const Tensor out = Tensor::empty(ctx, dtype, {1, T, int64_t(cfg.n_heads) * cfg.head_dim});
  const Tensor lse = Tensor::empty(ctx, DType::f32, {1, cfg.n_heads, T});
  Rate r;
  r.ms = kernel_ms(
      ctx, [&] { attention_forward(ctx, qkv, cfg, out, lse); }, reps, 10);
  r.flop = bench::causal_attention_forward_flop(1, T, cfg.n_heads, cfg.head_dim, cfg.window);
  return r;
}

// The FLOPs a prefill of P tokens must do.
struct PrefillFlop {
  double gemm = 0, attention = 0;
};
PrefillFlop prefill_flop(const ParamLayout& layout, int64_t P) {
  const GptConfig& c = layout.config();
  PrefillFlop f;
  for (const GemmShape& g : layer_gemms(layout)) f.gemm += 2.0 * double(P) * double(g.k) * double(g.n);
  f.gemm *= c.num_layers;
  f.gemm += 2.0 * double(c.hidden_size) * double(layout.local_vocab());  // the LM head, last row only
  f.attention =
      c.num_layers * bench::causal_attention_forward_flop(1, P, layout.local_heads(), c.head_dim(), c.sliding_window);
  return f;
}

// Milliseconds of one prefill forward of `batch`, the median of reps after warm-ups.
double prefill_ms(InferenceModel& model, KvCache& cache, const std::vector<SequenceInput>& batch, const Options& o) {
  const Context& ctx = model.context();
  for (int i = 0; i < o.warmup; ++i) model.forward(batch, cache);
  ctx.synchronize();
  std::vector<double> ms;
  for (int r = 0; r < o.reps; ++r) {
    const auto t0 = Clock::now();
    model.forward(batch, cache);
    ctx.synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return median(ms);
}

void profile_prefill(InferenceModel& model, KvCache& cache, const std::vector<SequenceInput>& batch, int reps) {
  OpProfiler profiler(model.context(), true);
  model.set_profiler(&profiler);
  for (int r = 0; r < reps; ++r) {
    model.forward(batch, cache);
    profiler.collect();
  }
  model.set_profiler(nullptr);
  profiler.print(stdout, reps);
}

void run_model(const Context& ctx, DType dtype, const std::string& name, const Options& o) {
  GptConfig config = GptConfig::preset(name);
  TROUPE_CHECK(config.moe.num_experts == 0, name, " is a mixture of experts; dense models only");
  const int64_t P = o.prompt;
  // GPT-2's learned position table has 1024 rows: a longer prompt (the 2048) gets a
  // table of P rows. The weights are random, so the prefill's work is the same as a trained
  // model's of that length.
  if (P > config.max_positions()) {
    std::printf("%s: position table widened from %d to %lld rows for the prompt\n", name.c_str(),
                config.max_positions(), static_cast<long long>(P));
    config.max_position_embeddings = int(P);
  }
  InferenceModel model(ctx, config, dtype, {.max_tokens = P, .max_sequences = 1});
  TROUPE_CHECK(P <= model.max_sequence_length(), "--prompt ", P, " is longer than ", name, "'s ",
               model.max_sequence_length(), " positions");
  const ParamLayout& layout = model.layout();
  model.load_weights(bench::random_normal(Context::cpu(), DType::f32, {layout.size()}, 1, 0.0f, 0.02f));
  constexpr int64_t kBlockSize = 16;
  KvCache cache(ctx, config, dtype, (P + kBlockSize - 1) / kBlockSize, kBlockSize);
  std::vector<int32_t> blocks;
  TROUPE_CHECK(cache.allocate(cache.blocks_for(P), blocks), "the cache is too small");
  std::vector<int32_t> tokens(static_cast<size_t>(P));  // any ids: the weights are random
  for (int64_t i = 0; i < P; ++i) tokens[size_t(i)] = int32_t((i * 7919 + 13) % config.vocab_size);
  const std::vector<SequenceInput> batch{{tokens, 0, blocks}};

  const Rate gemm = gemm_rate(ctx, dtype, layout, P, o.reps), attention = attention_rate(ctx, dtype, layout, P, o.reps);
  const PrefillFlop flop = prefill_flop(layout, P);
  const double roof_gemm_ms = flop.gemm / (gemm.tflops() * 1e9),
               roof_attention_ms = flop.attention / (attention.tflops() * 1e9);
  const double roof_ms = roof_gemm_ms + roof_attention_ms;
  std::printf("%s: GEMM %.1f TFLOP/s (layer shapes at M = %lld), attention forward %.1f TFLOP/s (T = %lld)\n",
              name.c_str(), gemm.tflops(), static_cast<long long>(P), attention.tflops(), static_cast<long long>(P));
  std::printf("%s: roofline %.3f ms = %.1f GFLOP GEMM (%.3f ms) + %.1f GFLOP attention (%.3f ms)\n", name.c_str(),
              roof_ms, flop.gemm * 1e-9, roof_gemm_ms, flop.attention * 1e-9, roof_attention_ms);
  for (bool causal : {true, false}) {
    model.set_causal_prefill(causal);
    const double ms = prefill_ms(model, cache, batch, o);
    // A prompt length not seen before (another for each path): its first prefill pays for the
    // per-shape setup (cuBLASLt heuristics for the new M; cuDNN's attention plan for the new T).
    const int64_t fresh_length = P - (causal ? 1 : 2);
    const auto t0 = Clock::now();
    model.forward(std::vector<SequenceInput>{{std::span(tokens).first(size_t(fresh_length)), 0, blocks}}, cache);
    model.context().synchronize();
    const double first_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const char* path = causal ? "causal" : "paged";
    std::printf(
        "%s %s prefill of %lld tokens: %.3f ms, roofline %.3f ms, roofline/measured %.2f; first prefill of a "
        "new length (%lld): %.3f ms\n",
        name.c_str(), path, static_cast<long long>(P), ms, roof_ms, roof_ms / ms, static_cast<long long>(fresh_length),
        first_ms);
    const nlohmann::json r = {{"model", name},
                              {"path", path},
                              {"prompt", P},
                              {"prefill_ms", ms},
                              {"roofline_ms", roof_ms},
                              {"roofline_over_measured", roof_ms / ms},
                              {"first_prefill_new_length_ms", first_ms},
                              {"gemm_tflops", gemm.tflops()},
                              {"attention_tflops", attention.tflops()},
                              {"gemm_gflop", flop.gemm * 1e-9},
                              {"attention_gflop", flop.attention * 1e-9}};
    std::printf("RESULT %s\n", r.dump().c_str());
    if (o.profile) profile_prefill(model, cache, batch, o.reps);
    std::fflush(stdout);
  }
}

int run(const Options& o) {
  const bool cuda = o.device == "cuda";
  TROUPE_CHECK(!cuda || cuda_available(), "--device cuda: no GPU is visible");
  const Context ctx = cuda ? Context::cuda(0) : Context::cpu();
  const DType dtype = cuda ? DType::bf16 : DType::f32;
  std::printf("prefill_bench: %s, batch 1, prompt %lld\n", dtype_name(dtype), static_cast<long long>(o.prompt));
#if TROUPE_HAVE_CUDA
  if (cuda) std::printf("CUDA attention backend: %s\n", cuda::attention_backend_name(cuda::attention_backend()));
#endif
  std::istringstream list(o.models);
  for (std::string name; std::getline(list, name, ',');) run_model(ctx, dtype, name, o);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Prefill time of one prompt against its GEMM + attention roofline (issue 21)");
  app.add_option("--models", o.models, "GPT-2 presets, comma-separated (random weights)");
  app.add_option("--device", o.device, "cuda (bf16) or cpu (f32: a smoke run)")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--prompt", o.prompt, "prompt tokens")->check(CLI::Range(int64_t(2), int64_t(1) << 20));
  app.add_option("--reps", o.reps, "timed runs (the median)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed runs first")->check(CLI::NonNegativeNumber);
  app.add_flag("--profile", o.profile, "after each path, time every op of its prefills");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prefill_bench: %s\n", e.what());
    return 1;
  }
}
