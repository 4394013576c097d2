// Single-device training benchmark and quick-start run: trains a GPT on the bundled
// corpus (or random tokens) on the GPU if there is one, else the CPU, printing the loss
// curve, throughput (tokens/s), MFU against the measured bf16 matmul peak, and peak device
// memory; then prints a text sample. Flags use Megatron-LM's names.
//
//   train_bench --model gpt2-tiny --train-iters 300                     # CPU-sized quick start
//   train_bench --model gpt2-124m --micro-batch-size 16 --mock-data --train-iters 30 --measure-peak
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include "apps/train/fp8_flags.hpp"
#include "data/token_windows.hpp"
#include "data/tokenizer.hpp"
#include "base/check.hpp"
#include "kernels/linear.hpp"
#include "kernels/op_profiler.hpp"
#include "model/gpt_chunk.hpp"
#include "model/train/loss_scaler.hpp"
#include "model/train/optimizer.hpp"
#include "model/inference/sampler.hpp"
#include "model/train/trainer.hpp"

using namespace troupe;

namespace {

struct Options {
  std::string model = "auto", device = "auto", dtype = "bf16";
  int num_layers = 0, hidden_size = 0, num_attention_heads = 0, seq_length = 0;
  int64_t micro_batch_size = 0, global_batch_size = 0, train_iters = 0;
  double lr = 0, min_lr = 0, weight_decay = 0.1, clip_grad = 1.0, adam_beta1 = 0.9, adam_beta2 = 0.95;
  int64_t lr_warmup_iters = -1;
  std::string lr_decay_style = "cosine";
  std::string data_path, vocab_file, merge_file;
  bool mock_data = false, measure_peak = false, profile = false;
  double peak_tflops = 0;
  int64_t log_interval = 10, eval_iters = 4, timing_warmup = 3;
  uint64_t seed = 1234;
  int64_t sample_tokens = 64;
  std::string prompt = "Call me Ishmael.";
  Fp8Flags fp8;  // `troupe train`'s --fp8-* flags
};

// bf16 matmul peak of this GPU measured through our own linear op (8192^3).
double measure_matmul_peak(const Context& ctx) {
  const int64_t n = 8192;
  Tensor a = Tensor::zeros(ctx, DType::bf16, {n, n}), b = Tensor::zeros(ctx, DType::bf16, {n, n});
  Tensor c = Tensor::empty(ctx, DType::bf16, {n, n});
  for (int i = 0; i < 3; ++i) linear_forward(ctx, a, b, Tensor(), c);
  ctx.synchronize();
  const int iters = 20;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) linear_forward(ctx, a, b, Tensor(), c);
  ctx.synchronize();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * double(n) * n * n * iters / s / 1e12;
}

int run(const Options& o) {
  const bool use_cuda = o.device == "cuda" || (o.device == "auto" && cuda_available());
  const Context ctx = use_cuda ? Context::cuda(0) : Context::cpu();
  const std::string model = o.model != "auto" ? o.model : (use_cuda ? "gpt2-124m" : "gpt2-tiny");
  GptConfig cfg = GptConfig::preset(model);
  if (o.num_layers) cfg.num_layers = o.num_layers;
  if (o.hidden_size) cfg.hidden_size = o.hidden_size;
  if (o.num_attention_heads) cfg.num_attention_heads = o.num_attention_heads;
  if (o.seq_length) cfg.seq_length = o.seq_length;
  const DType compute = use_cuda ? dtype_from_name(o.dtype) : DType::f32;
  const int64_t mbs = o.micro_batch_size ? o.micro_batch_size : (use_cuda ? 16 : 8);
  const int64_t gbs = o.global_batch_size ? o.global_batch_size : mbs;
  TROUPE_CHECK(gbs % mbs == 0, "--global-batch-size ", gbs, " is not a multiple of --micro-batch-size ", mbs);
  const int64_t iters = o.train_iters ? o.train_iters : (use_cuda ? 50 : 200);
  const int64_t T = cfg.seq_length;

  // Data: the bundled corpus tokenized with GPT-2 BPE, or random tokens.
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TokenWindows> train_data, valid_data;
  if (!o.mock_data) {
    TokenizerOptions topt;
    topt.vocab_file = o.vocab_file;
    topt.merge_file = o.merge_file;
    tokenizer = build_tokenizer(topt);
    cfg.vocab_size = tokenizer->vocab_size();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tokenize_jsonl(o.data_path, *tokenizer);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const size_t n_valid = std::max<size_t>(ids.size() / 50, size_t(T + 2) * 4);  // last 2% held out
    TROUPE_CHECK(ids.size() > n_valid + size_t(T) + 2, "corpus ", o.data_path, " is too small for seq length ", T);
    std::printf("data: %s, %zu tokens (tokenized in %.2f s), %zu held out for validation\n", o.data_path.c_str(),
                ids.size(), secs, n_valid);
    train_data = std::make_unique<TokenWindows>(std::span(ids).first(ids.size() - n_valid), o.seed);
    valid_data = std::make_unique<TokenWindows>(std::span(ids).last(n_valid), o.seed + 1);
  } else {
    std::printf("data: random tokens (--mock-data)\n");
  }
  cfg.validate();

  const size_t mem0 = device_memory_in_use(ctx);
  GptChunk chunk(ctx, cfg, ChunkSpec::whole_model(), compute);
  chunk.init_weights(o.seed);
  const Fp8Recipe fp8 = fp8_recipe_from_flags(o.fp8);
  if (fp8.enabled) {
    chunk.enable_fp8(fp8);
    std::printf("fp8: %s\n", fp8_recipe_str(fp8).c_str());
  }
  OptimizerConfig ocfg;
  ocfg.adam = {.lr = 0,
               .beta1 = float(o.adam_beta1),
               .beta2 = float(o.adam_beta2),
               .eps = 1e-8f,
               .weight_decay = float(o.weight_decay)};
  ocfg.clip_grad = float(o.clip_grad);
  Optimizer optimizer(chunk, ocfg);
  LrSchedule sched;
  sched.lr = o.lr > 0 ? o.lr : (use_cuda ? 6e-4 : 1e-3);
  sched.min_lr = o.min_lr > 0 ? o.min_lr : sched.lr / 10;
  sched.warmup_iters = o.lr_warmup_iters >= 0 ? o.lr_warmup_iters : std::max<int64_t>(1, iters / 10);
  sched.decay_iters = iters;
  sched.style = lr_decay_style_from_name(o.lr_decay_style);
  std::unique_ptr<LossScaler> scaler;
  if (compute == DType::f16) scaler = std::make_unique<DynamicLossScaler>();
  Trainer trainer(chunk, optimizer, sched, scaler.get(), o.seed);

  const int64_t n_params = cfg.num_parameters();
  const int64_t n_nonemb = cfg.position_embedding_type == PositionEmbedding::learned_absolute
                               ? n_params - int64_t(cfg.max_positions()) * cfg.hidden_size
                               : n_params;
  const double flops_per_token = 6.0 * double(n_nonemb) + 12.0 * cfg.num_layers * cfg.hidden_size * double(T);
  std::printf("model: %s, %d layers, hidden %d, %d heads, seq %ld, vocab %ld (padded %ld), %.1fM parameters\n",
              model.c_str(), cfg.num_layers, cfg.hidden_size, cfg.num_attention_heads, long(T), long(cfg.vocab_size),
              long(cfg.padded_vocab_size()), double(n_params) / 1e6);
  std::printf("device: %s, compute %s, micro batch %ld, global batch %ld, %ld iterations\n",
              use_cuda ? "cuda:0" : "cpu", dtype_name(compute), long(mbs), long(gbs), long(iters));

  // Mock data: a few distinct global batches made before the loop and taken in turn (the
  // PyTorch reference keeps four resident), so the timed loop runs what training runs.
  std::mt19937_64 mock_rng(o.seed);
  std::vector<std::vector<Batch>> mock_batches;
  for (int64_t k = 0; !train_data && k < 4; ++k) {
    std::vector<Batch> batch;
    for (int64_t m = 0; m < gbs / mbs; ++m) {
      Batch b{Tensor::host(DType::i32, {mbs, T}), Tensor::host(DType::i32, {mbs, T})};
      for (int64_t i = 0; i < mbs * T; ++i) {
        b.tokens.data_as<int32_t>()[i] = int32_t(mock_rng() % uint64_t(cfg.vocab_size));
        b.targets.data_as<int32_t>()[i] = int32_t(mock_rng() % uint64_t(cfg.vocab_size));
      }
      batch.push_back(std::move(b));
    }
    mock_batches.push_back(std::move(batch));
  }
  auto global_batch = [&](int64_t it) {
    if (!train_data) return mock_batches[size_t(it) % mock_batches.size()];
    std::vector<Batch> batch;
    for (int64_t m = 0; m < gbs / mbs; ++m) batch.push_back(train_data->next(mbs, T));
    return batch;
  };
  auto eval_batches = [&]() {
    std::vector<Batch> v;
    for (int64_t i = 0; i < o.eval_iters; ++i) v.push_back(valid_data->window(i * mbs, mbs, T));
    return v;
  };

  if (valid_data) std::printf("validation loss before training: %.4f\n", trainer.evaluate(eval_batches()));
  double timed_seconds = 0, first_loss = 0, last_loss = 0;
  int64_t timed_tokens = 0;
  size_t mem_peak = 0;
  OpProfiler profiler(ctx, o.profile);
  // An iteration's time runs from the previous one's end to its own: train_step returns with its
  // optimizer step enqueued, not done, and the next iteration's wait for it counts there.
  auto last_end = std::chrono::steady_clock::now();
  for (int64_t it = 1; it <= iters; ++it) {
    if (o.profile && it == o.timing_warmup + 1) chunk.set_profiler(&profiler);
    const IterationStats s = trainer.train_step(global_batch(it));  // synchronizes (reads loss and grad norm)
    const auto end = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(end - last_end).count();
    last_end = end;
    if (it == 1) first_loss = s.loss;
    last_loss = s.loss;
    if (it > o.timing_warmup) {
      timed_seconds += dt;
      timed_tokens += gbs * T;
    }
    if (o.profile && it > o.timing_warmup) profiler.collect();
    if (it <= 2 || it % o.log_interval == 0) mem_peak = std::max(mem_peak, device_memory_in_use(ctx));
    if (it % o.log_interval == 0 || it == 1 || it == iters)
      std::printf("iteration %6ld/%ld | loss %.4f | grad norm %.3f | lr %.3e | %s%.1f ms | %.0f tokens/s\n", long(it),
                  long(iters), s.loss, s.grad_norm, s.lr, s.skipped ? "SKIPPED | " : "", dt * 1e3,
                  double(gbs * T) / dt);
  }
  std::printf("loss: %.4f -> %.4f (%.2f nats lower)\n", first_loss, last_loss, first_loss - last_loss);
  if (valid_data) std::printf("validation loss after training: %.4f\n", trainer.evaluate(eval_batches()));

  if (timed_seconds > 0) {
    const double tps = double(timed_tokens) / timed_seconds;
    std::printf("throughput: %.0f tokens/s over %ld timed iterations (%.1f ms/iteration), %.1f model TFLOP/s\n", tps,
                long(iters - o.timing_warmup), timed_seconds / double(iters - o.timing_warmup) * 1e3,
                tps * flops_per_token / 1e12);
    double peak = o.peak_tflops;
    if (use_cuda && o.measure_peak && peak <= 0) peak = measure_matmul_peak(ctx);
    if (peak > 0)
      std::printf("MFU: %.1f%% of %.0f TFLOP/s measured bf16 matmul peak (6N + 12LdT = %.3g FLOPs/token)\n",
                  100.0 * tps * flops_per_token / (peak * 1e12), peak, flops_per_token);
    if (use_cuda)
      std::printf("peak device memory: %.2f GiB in use by the run\n", double(mem_peak - mem0) / double(1ull << 30));
    std::printf(
        "RESULT {\"model\": \"%s\", \"device\": \"%s\", \"batch\": %ld, \"seq\": %ld, \"tokens_per_s\": %.0f, "
        "\"mfu\": %.4f, \"peak_mem_GiB\": %.2f, \"final_loss\": %.4f}\n",
        model.c_str(), use_cuda ? "cuda" : "cpu", long(gbs), long(T), tps,
        peak > 0 ? tps * flops_per_token / (peak * 1e12) : 0.0, double(mem_peak - mem0) / double(1ull << 30),
        last_loss);
  }

  if (o.profile) {
    std::printf("per-op device time (model ops only; the optimizer step and host work are outside):\n");
    profiler.print(stdout, iters - o.timing_warmup);
  }
  chunk.set_profiler(nullptr);

  if (tokenizer && o.sample_tokens > 0) {
    const SamplingParams so = training_sample_params(o.sample_tokens, o.seed);
    const std::vector<int32_t> out = generate(chunk, tokenizer->encode(o.prompt), so);
    std::printf("sample (temperature %.1f, top-k %d):\n%s%s\n", so.temperature, so.top_k, o.prompt.c_str(),
                tokenizer->decode(out).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Troupe single-device training benchmark"};
  Options o;
  const std::string src = TROUPE_SOURCE_DIR;
  o.data_path = src + "/assets/corpora/moby-dick.jsonl";
  o.vocab_file = src + "/assets/gpt2/gpt2-vocab.json";
  o.merge_file = src + "/assets/gpt2/gpt2-merges.txt";
  app.add_option("--model", o.model,
                 "preset: gpt2-124m, gpt2-350m, gpt2-tiny, llama-tiny (auto: 124m on GPU, tiny on CPU)");
  app.add_option("--device", o.device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--dtype", o.dtype, "CUDA compute dtype: bf16 or f16 (f16 uses dynamic loss scaling)")
      ->check(CLI::IsMember({"bf16", "f16"}));
  app.add_option("--num-layers", o.num_layers, "override the preset");
  app.add_option("--hidden-size", o.hidden_size, "override the preset");
  app.add_option("--num-attention-heads", o.num_attention_heads, "override the preset");
  app.add_option("--seq-length", o.seq_length, "override the preset");
  app.add_option("--micro-batch-size", o.micro_batch_size, "sequences per microbatch (default 16 GPU, 8 CPU)");
  app.add_option("--global-batch-size", o.global_batch_size, "sequences per iteration (gradient accumulation)");
  app.add_option("--train-iters", o.train_iters, "iterations (default 50 GPU, 200 CPU)");
  app.add_option("--lr", o.lr, "peak learning rate (default 6e-4 GPU, 1e-3 CPU)");
  app.add_option("--min-lr", o.min_lr, "final learning rate (default lr/10)");
  app.add_option("--lr-warmup-iters", o.lr_warmup_iters, "linear warmup iterations (default 10%)");
  app.add_option("--lr-decay-style", o.lr_decay_style, "constant, linear or cosine");
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay (not on biases and norms)");
  app.add_option("--clip-grad", o.clip_grad, "max global gradient norm (0: off)");
  app.add_option("--adam-beta1", o.adam_beta1);
  app.add_option("--adam-beta2", o.adam_beta2);
  app.add_option("--seed", o.seed);
  app.add_option("--data-path", o.data_path, "JSON-lines corpus with a \"text\" field");
  app.add_option("--vocab-file", o.vocab_file);
  app.add_option("--merge-file", o.merge_file);
  app.add_flag("--mock-data", o.mock_data, "random tokens instead of the corpus");
  app.add_option("--log-interval", o.log_interval);
  app.add_option("--eval-iters", o.eval_iters, "validation microbatches before and after training");
  app.add_option("--timing-warmup", o.timing_warmup, "iterations left out of the throughput");
  app.add_flag("--measure-peak", o.measure_peak, "measure the bf16 matmul peak for MFU");
  app.add_option("--peak-tflops", o.peak_tflops, "bf16 matmul peak to compute MFU against");
  app.add_flag("--profile", o.profile, "time every op with CUDA events and print where the step goes");
  app.add_option("--sample-tokens", o.sample_tokens, "tokens of text to generate after training (0: none)");
  app.add_option("--prompt", o.prompt, "prompt for the sample");
  apps::add_fp8_flags(&app, o.fp8);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_bench: %s\n", e.what());
    return 1;
  }
}
