// Decode speed of the inference engine, measured as ../shared/baselines/infer_hf.py measures
// HF transformers: B requests of P random prompt tokens generate N tokens each (greedy, no
// stop; or sampled from the top K with --top-k K, serve's other path); ms per decode step =
// (t(generate N) - t(generate 1)) / (N - 1), the prefill removed; tokens/s = B * N /
// t(generate N). A step is a whole engine step: the forward (a replayed CUDA graph on a GPU)
// and choosing the tokens (greedy: argmax on the device, two numbers per request to the host).
// Random weights (GPT-2 shapes, or a small mixture-of-experts model: mixtral-small, 8 experts
// top-2, and deepseek-small, 64 experts top-6 with a shared expert). With
// --tensor-model-parallel-size T the model is one tensor-parallel replica over GPUs 0 .. T-1
// (as `troupe serve` builds it).
//
//   decode_bench --model gpt2-124m --batches 1,16,64            # GPU, bf16, CUDA graphs
//   decode_bench --model mixtral-small --batches 1,16,64 [--no-cuda-graphs]   # MoE decode
//   decode_bench --model gpt2-tiny --device cpu --batches 1,4 --prompt 16 --new 16
//   decode_bench --model gpt2-124m --batches 1,64 --profile   # + where a decode step's time goes
//   decode_bench --model gpt2-350m --tensor-model-parallel-size 2   # a TP2 replica on GPUs 0-1
//   decode_bench --model gpt2-124m --top-k 20   # sampled: f32 rows to the host, drawn there
//   TROUPE_DECODE_GEMV=0 decode_bench ...        # every linear on cuBLASLt, no small-batch GEMV
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "apps/common/inference_flags.hpp"
#include "kernels/cuda/gemv.hpp"
#include "model/inference/inference_engine.hpp"
#include "tests/test_util.hpp"

namespace {

using namespace troupe;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "gpt2-124m", device = "cuda", batches = "1,16,64";
  int64_t prompt = 128, new_tokens = 128;
  int reps = 3, tensor_parallel = 1, top_k = 0;
  bool no_cuda_graphs = false, profile = false;
};

// Queues B requests of `prompt` random tokens generating `n` tokens each: greedy, or sampled
// from the top_k most likely (seeded) when top_k > 1.
void add_requests(const InferenceModel& model, InferenceEngine& engine, int64_t b, int64_t prompt, int64_t n,
                  int top_k) {
  for (int64_t i = 0; i < b; ++i) {
    const Tensor t = test::random_tokens({prompt}, uint64_t(i), int32_t(model.config().vocab_size));
    SamplingParams p;
    p.temperature = top_k > 1 ? 1.0f : 0.0f;
    p.top_k = top_k > 1 ? top_k : 0;
    p.seed = uint64_t(i);
    p.max_tokens = n;
    engine.add_request({{t.data_as<int32_t>(), t.data_as<int32_t>() + prompt}, p}, nullptr);
  }
}

// Seconds for B requests of `prompt` tokens to generate `n` tokens each. One engine serves
// every run of a batch size: its KV cache stays put, so the decode graphs captured in the
// warm-up are replayed (a new cache would be captured again).
double generate_s(const InferenceModel& model, InferenceEngine& engine, int64_t b, int64_t prompt, int64_t n,
                  int top_k) {
  add_requests(model, engine, b, prompt, n, top_k);
  const auto t0 = Clock::now();
  engine.run();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Decode steps op by op with every op timed (CUDA events): the table of where a step goes,
// and the wall time of a whole engine step beside the ops' sum (the rest: host work, syncs,
// launch gaps, choosing the tokens).
void profile_decode(InferenceModel& model, InferenceEngine& engine, int64_t b, int64_t prompt, int64_t n, int top_k) {
  add_requests(model, engine, b, prompt, n, top_k);
  engine.step();  // the prefill
  OpProfiler profiler(model.context(), true);
  model.set_profiler(&profiler);
  int64_t steps = 0;
  const auto t0 = Clock::now();
  for (bool more = true; more; ++steps) {
    more = engine.step();
    profiler.collect();
  }
  const double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / double(steps);
  model.set_profiler(nullptr);
  double ops_ms = 0.0;
  for (const auto& [name, ms] : profiler.totals_ms()) ops_ms += ms;
  ops_ms /= double(steps);
  std::printf("profile: batch %lld, %lld op-by-op decode steps: %.3f ms/step wall, %.3f ms in timed ops\n",
              static_cast<long long>(b), static_cast<long long>(steps), wall_ms, ops_ms);
  profiler.print(stdout, steps);
}

// A GptConfig preset, or one of the bench's MoE models: Llama-style attention (RMSNorm, RoPE,
// GQA, SwiGLU) at hidden 1024 over 8 layers, every MLP a dropless MoE.
GptConfig bench_config(const std::string& name) {
  if (name != "mixtral-small" && name != "deepseek-small") return GptConfig::preset(name);
  GptConfig c = GptConfig::llama_style(8, 1024, 16, 8, 3584);
  c.seq_length = 2048;
  c.vocab_size = 32000;
  MoeConfig& m = c.moe;
  if (name == "mixtral-small") {  // Mixtral's shape: 8 experts, top-2, expert FFN 3.5 C
    m.num_experts = 8;
    m.moe_router_topk = 2;
    m.moe_ffn_hidden_size = 3584;
  } else {  // DeepSeek's: many narrow experts and a shared one
    m.num_experts = 64;
    m.moe_router_topk = 6;
    m.moe_ffn_hidden_size = 512;
    m.moe_shared_expert_intermediate_size = 1024;
  }
  c.validate();
  return c;
}

double median_s(int reps, const std::function<double()>& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(f());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int run(const Options& o) {
  const bool cuda = o.device == "cuda";
  TROUPE_CHECK(!cuda || cuda_available(), "--device cuda: no GPU is visible");
  // Linears of at most kGemvMaxRows rows: the small-batch GEMV, or cuBLASLt with TROUPE_DECODE_GEMV=0.
  bool decode_gemv = false;
#if TROUPE_HAVE_CUDA
  if (cuda) decode_gemv = cuda::decode_gemv_enabled();
#endif
  if (cuda)
    std::printf("decode GEMV for linears of <= %lld rows: %s\n", static_cast<long long>(cuda::kGemvMaxRows),
                decode_gemv ? "on" : "off (TROUPE_DECODE_GEMV=0: cuBLASLt)");
  std::vector<int64_t> batches;
  std::istringstream list(o.batches);
  for (std::string b; std::getline(list, b, ',');) batches.push_back(std::stoll(b));
  const int64_t most = *std::max_element(batches.begin(), batches.end());
  // The replica as `troupe serve` builds it: T ranks, each with its shard of the weights.
  apps::InferenceFlags flags;
  flags.device = o.device;
  flags.tensor_parallel = o.tensor_parallel;
  flags.no_cuda_graphs = o.no_cuda_graphs;
  apps::InferenceSetup setup;
  setup.cuda = cuda;
  setup.compute = cuda ? DType::bf16 : DType::f32;
  setup.model.config = bench_config(o.model);
  setup.model.weights =
      test::random_normal({ParamLayout(setup.model.config, ChunkSpec::whole_model()).size()}, 1, 0.02f);
  setup.max_seq_length = setup.model.config.max_positions();
  const auto replica = apps::make_replica_models(flags, setup, 0,
                                                 {.max_tokens = std::max<int64_t>(2048, most * o.prompt),
                                                  .max_sequences = most,
                                                  .cuda_graphs = !o.no_cuda_graphs});
  const InferenceModel& model = *replica->models[0];
  constexpr int kBlockSize = 16;
  for (int64_t b : batches) {
    InferenceEngine engine(
        replica->ranks(),
        {.num_blocks = b * ((o.prompt + o.new_tokens + kBlockSize - 1) / kBlockSize), .block_size = kBlockSize});
    generate_s(model, engine, b, o.prompt, o.new_tokens, o.top_k);  // warm-up: allocations, graph capture
    const double tn = median_s(o.reps, [&] { return generate_s(model, engine, b, o.prompt, o.new_tokens, o.top_k); });
    const double t1 = median_s(o.reps, [&] { return generate_s(model, engine, b, o.prompt, 1, o.top_k); });
    const nlohmann::json r = {{"model", o.model},
                              {"batch", b},
                              {"tensor_parallel", o.tensor_parallel},
                              {"top_k", o.top_k},
                              {"prompt", o.prompt},
                              {"new", o.new_tokens},
                              {"cuda_graphs", cuda && !o.no_cuda_graphs},
                              {"decode_gemv", decode_gemv},
                              {"t_generate_N_s", tn},
                              {"t_prefill_plus_1_s", t1},
                              {"gen_tokens_per_s", double(b * o.new_tokens) / tn},
                              {"ms_per_decode_step", (tn - t1) / double(o.new_tokens - 1) * 1e3},
                              {"decode_tokens_per_s", double(b * (o.new_tokens - 1)) / (tn - t1)}};
    std::printf("RESULT %s\n", r.dump().c_str());
    if (o.profile) profile_decode(*replica->models[0], engine, b, o.prompt, o.new_tokens, o.top_k);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

// The whole command, also exported by the decode_bench_module library so that a profiler
// living in another program (bench/decode_kernel_profile.py: PyTorch's, over CUPTI) can run it
// in its own process.
extern "C" int troupe_decode_bench(int argc, char** argv) {
  Options o;
  CLI::App app("Decode ms/step of the inference engine (infer_hf.py's method)");
  app.add_option("--model", o.model,
                 "gpt2-124m, gpt2-350m, gpt2-tiny, llama-tiny, mixtral-small, deepseek-small (random weights)");
  app.add_option("--device", o.device, "cuda (bf16) or cpu (f32)")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--batches", o.batches, "batch sizes, comma-separated");
  app.add_option("--prompt", o.prompt, "prompt tokens per request");
  app.add_option("--new", o.new_tokens, "generated tokens per request (at least 2)")->check(CLI::Range(2, 1 << 20));
  app.add_option("--reps", o.reps, "timed runs per point (the median)");
  app.add_option("--tensor-model-parallel-size", o.tensor_parallel, "GPUs (or CPU devices) of the one replica")
      ->check(CLI::PositiveNumber);
  app.add_option("--top-k", o.top_k, "sample from the K most likely tokens (temperature 1; 0 or 1: greedy)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-cuda-graphs", o.no_cuda_graphs, "plain launches for decode steps");
  app.add_flag("--profile", o.profile, "after each batch size, time every op of op-by-op decode steps");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "decode_bench: %s\n", e.what());
    return 1;
  }
}

#ifndef TROUPE_DECODE_BENCH_MODULE
int main(int argc, char** argv) { return troupe_decode_bench(argc, argv); }
#endif
