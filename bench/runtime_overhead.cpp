// The actor runtime's own cost. (1) The same model and data trained by the actor runtime with
// one stage (TrainingRun, P = 1: trainer, data-loader, optimizer and stage actors, completion
// through events and a waiting thread) and by the plain single-device loop
// (model/train/trainer.hpp Trainer) on the same kernels, in alternating rounds; prints ms per
// iteration of each and their ratio (target: within 1% on a GPU). The headline is the median
// of the per-round ratios: each round's pair runs back to back, so drift of the GPU's clocks
// between rounds cancels. (2) The round trip of one actor message, as a Google Benchmark case
// (message_round_trip/round_trips:N): each iteration is one measure_message_latency(N) call
// (actors/fabric/message_latency.hpp: a fresh actor system, N ping-pongs between two scheduled
// actors, then N between two detached ones); the counters scheduled_us and detached_us are
// the mean microseconds per round trip. (1) prints its own lines and stays outside Google
// Benchmark: its paired rounds are the measurement.
//
//   runtime_overhead                                   # GPU if there is one: GPT-2 124M shape, bf16
//   runtime_overhead --device cpu --num-layers 2 --hidden-size 64 --seq-length 64
//   runtime_overhead --latency-only --benchmark_out=latency.json --benchmark_out_format=json
#include <CLI/CLI.hpp>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>

#include "actors/fabric/message_latency.hpp"
#include "actors/train/training_run.hpp"
#include "data/data_loader.hpp"
#include "kernels/op_profiler.hpp"
#include "base/check.hpp"
#include "bench/common/bench_main.hpp"
#include "model/train/trainer.hpp"
#include "schedules/trace.hpp"

using namespace troupe;
using Clock = std::chrono::steady_clock;

namespace {

class RandomTokens final : public SampleSource {
 public:
  RandomTokens(int64_t samples, int64_t seq, int32_t vocab) : n_(samples), seq_(seq) {
    std::mt19937_64 rng(99);
    std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
    tokens_.resize(size_t(samples * (seq + 1)));
    for (int32_t& t : tokens_) t = pick(rng);
  }
  int64_t size() const override { return n_; }
  int64_t sequence_length() const override { return seq_; }
  void sample(int64_t index, int32_t* out) const override {
    std::copy_n(tokens_.begin() + index * (seq_ + 1), seq_ + 1, out);
  }

 private:
  int64_t n_, seq_;
  std::vector<int32_t> tokens_;
};

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void message_round_trip(benchmark::State& state) {
  double scheduled_us = 0, detached_us = 0;
  for (auto _ : state) {
    const actors::MessageLatency lat = actors::measure_message_latency(state.range(0));
    scheduled_us += lat.scheduled_us;
    detached_us += lat.detached_us;
  }
  state.counters["scheduled_us"] = benchmark::Counter(scheduled_us, benchmark::Counter::kAvgIterations);
  state.counters["detached_us"] = benchmark::Counter(detached_us, benchmark::Counter::kAvgIterations);
}

// (2): the message-latency case, run by Google Benchmark.
int run_message_latency(int64_t round_trips) {
  benchmark::RegisterBenchmark("message_round_trip", message_round_trip)
      ->Arg(round_trips)
      ->ArgName("round_trips")
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "auto", dtype = "bf16", trace_path;
  int max_outstanding = 0;
  bool latency_only = false;
  int layers = 0, hidden = 0, heads = 0, seq = 0;
  int64_t mbs = 0, microbatches = 4, rounds = 11, iters_per_round = 5, warmup = 3, round_trips = 100000;
  CLI::App app{"actor runtime overhead: TrainingRun (P=1) vs the plain Trainer loop, and message latency"};
  app.add_option("--device", device, "auto | cpu | cuda");
  app.add_option("--dtype", dtype, "GPU compute dtype: bf16 | f16");
  app.add_option("--num-layers", layers);
  app.add_option("--hidden-size", hidden);
  app.add_option("--num-attention-heads", heads);
  app.add_option("--seq-length", seq);
  app.add_option("--micro-batch-size", mbs);
  app.add_option("--microbatches", microbatches, "microbatches per iteration");
  app.add_option("--rounds", rounds, "alternating measurement rounds");
  app.add_option("--iters-per-round", iters_per_round);
  app.add_option("--warmup", warmup, "untimed iterations of each before measuring");
  app.add_option("--round-trips", round_trips, "message round trips per measurement")->check(CLI::PositiveNumber);
  app.add_flag("--latency-only", latency_only, "skip (1), the training comparison");
  app.add_option("--trace", trace_path, "trace the actor run; prints where its iteration time goes");
  app.add_option("--max-outstanding-ops", max_outstanding, "ops a GPU stage enqueues ahead (0: default)");
  app.footer(
      "Google Benchmark's flags (for the message latency) pass through: --benchmark_min_time=SECONDS "
      "--benchmark_repetitions=N --benchmark_out=FILE --benchmark_out_format=json");
  return troupe::bench::bench_main(app, argc, argv, "runtime_overhead", [&] {
    if (latency_only) return run_message_latency(round_trips);
    const bool cuda = device == "cuda" || (device == "auto" && cuda_available());
    GptConfig c = GptConfig::gpt2_124m();
    c.num_layers = layers > 0 ? layers : (cuda ? 12 : 2);
    c.hidden_size = hidden > 0 ? hidden : (cuda ? 768 : 64);
    c.num_attention_heads = heads > 0 ? heads : (cuda ? 12 : 4);
    c.seq_length = seq > 0 ? seq : (cuda ? 1024 : 64);
    c.vocab_size = cuda ? 50257 : 512;
    c.hidden_dropout = 0.0f;
    c.attention_dropout = 0.0f;
    if (mbs <= 0) mbs = cuda ? 8 : 4;
    const DType compute = cuda ? dtype_from_name(dtype) : DType::f32;

    actors::TrainingConfig config;
    config.model = c;
    config.devices.cuda = cuda;
    config.devices.compute = compute;
    config.optimizer = {.adam = {.lr = 0, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f},
                        .clip_grad = 1.0f};
    config.lr = {.lr = 3e-4, .min_lr = 3e-5, .warmup_iters = 10, .decay_iters = 1000};
    config.micro_batch_size = mbs;
    config.global_batch_size = mbs * microbatches;
    config.seed = 1234;
    config.trace_path = trace_path;
    config.max_outstanding_ops = max_outstanding;
    const int64_t total_iters = warmup + rounds * iters_per_round;
    auto data = std::make_shared<RandomTokens>(config.global_batch_size * (total_iters + 2), c.seq_length,
                                               int32_t(c.vocab_size));
    std::printf("model: %d layers, hidden %d, seq %d, micro-batch %ld x %ld microbatches, %s on %s\n", c.num_layers,
                c.hidden_size, c.seq_length, long(mbs), long(microbatches), dtype_name(compute),
                cuda ? "cuda:0" : "cpu");

    // The plain loop; its batches are cut before timing (the runtime's loader prefetches).
    const Context ctx = cuda ? Context::cuda(0) : Context::cpu();
    GptChunk model(ctx, c, ChunkSpec::whole_model(), compute);
    model.init_weights(config.seed);
    Optimizer optimizer(model, config.optimizer);
    Trainer trainer(model, optimizer, config.lr, nullptr, config.seed);
    DataLoader plain_loader(data, {.micro_batch_size = mbs});
    std::vector<std::vector<Batch>> plain_batches;
    for (int64_t i = 0; i < total_iters; ++i) {
      std::vector<Batch> b;
      for (int64_t m = 0; m < microbatches; ++m) b.push_back(actors::to_batch(*plain_loader.next()));
      plain_batches.push_back(std::move(b));
    }
    actors::TrainingRun run(config, std::make_unique<DataLoader>(data, DataLoaderOptions{.micro_batch_size = mbs}),
                            nullptr);

    // With --trace also the plain loop's model ops, through CUDA events (collected between
    // rounds, untimed): their device time against the actor stage's ops in the trace.
    OpProfiler profiler(ctx, !trace_path.empty());

    size_t next_plain = 0;
    double plain_loss = 0, actor_loss = 0;
    for (int64_t i = 0; i < warmup; ++i) {
      plain_loss = trainer.train_step(plain_batches[next_plain++]).loss;
      actor_loss = run.train_iteration().loss;
    }
    std::vector<double> plain_ms, actor_ms;
    if (profiler.enabled()) model.set_profiler(&profiler);
    const auto time_plain = [&] {
      ctx.synchronize();
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < iters_per_round; ++i) plain_loss = trainer.train_step(plain_batches[next_plain++]).loss;
      ctx.synchronize();
      plain_ms.push_back(seconds(t0) * 1e3 / double(iters_per_round));
      profiler.collect();
    };
    const auto time_actors = [&] {
      const auto t0 = Clock::now();  // train_iteration returns once its step is done
      for (int64_t i = 0; i < iters_per_round; ++i) actor_loss = run.train_iteration().loss;
      actor_ms.push_back(seconds(t0) * 1e3 / double(iters_per_round));
    };
    for (int64_t r = 0; r < rounds; ++r) {
      // Alternate which goes first, so that a drift of the GPU's clocks within a round favours neither.
      if (r % 2 == 0) {
        time_plain();
        time_actors();
      } else {
        time_actors();
        time_plain();
      }
      std::printf("round %ld: plain loop %.3f ms/iter, actor runtime %.3f ms/iter (%+.2f%%)\n", long(r + 1),
                  plain_ms.back(), actor_ms.back(), 100.0 * (actor_ms.back() / plain_ms.back() - 1.0));
    }
    const auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double p = median(plain_ms), a = median(actor_ms);
    const double tokens = double(config.global_batch_size) * c.seq_length;
    std::printf(
        "median: plain loop %.3f ms/iter (%.0f tokens/s), actor runtime %.3f ms/iter (%.0f tokens/s): "
        "runtime/plain = %.4f (%+.2f%%)\n",
        p, tokens / p * 1e3, a, tokens / a * 1e3, a / p, 100.0 * (a / p - 1.0));
    std::vector<double> ratios;
    for (size_t r = 0; r < plain_ms.size(); ++r) ratios.push_back(actor_ms[r] / plain_ms[r]);
    const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
    std::printf("paired: median of %zu per-round ratios runtime/plain = %.4f (%+.2f%%; rounds %+.2f%% .. %+.2f%%)\n",
                ratios.size(), median(ratios), 100.0 * (median(ratios) - 1.0), 100.0 * (*lo - 1.0),
                100.0 * (*hi - 1.0));
    std::printf("last loss: plain %.4f, actors %.4f (same data and weights)\n", plain_loss, actor_loss);
    if (!trace_path.empty()) {
      // Per iteration (timed ones): the device time of the ops, the span from the first op's
      // start to the last one's end (gaps inside = the GPU waiting for the stage), and the rest
      // of the wall time (data, optimizer, messages between iterations). Between two
      // iterations of one round: last op's end -> optimizer request (the stage's report),
      // the optimizer phase, its end -> the next iteration's first op. The optimizer phase is the
      // host's, request to reply: the step's kernels are enqueued, not done, at its end, so the
      // GPU still runs them for part of the next gap (AdamW alone moves ~34 bytes a parameter).
      const schedules::Trace trace = schedules::trace_read(trace_path);
      struct Iter {
        int64_t first = INT64_MAX, last = 0, busy = 0, opt_start = 0, opt_end = 0;
      };
      std::map<int64_t, Iter> iters;
      for (const schedules::TraceEvent& e : trace.events) {
        Iter& t = iters[e.iteration];
        if (e.kind == schedules::EventKind::forward || e.kind == schedules::EventKind::backward) {
          t.first = std::min(t.first, e.start_ns);
          t.last = std::max(t.last, e.end_ns);
          t.busy += e.end_ns - e.start_ns;
        } else if (e.kind == schedules::EventKind::optimizer) {
          t.opt_start = e.start_ns;
          t.opt_end = e.end_ns;
        }
      }
      double busy = 0, span = 0, optimizer = 0, to_opt = 0, to_next = 0;
      int n = 0, gaps = 0;
      for (int64_t it = warmup + 1; it <= total_iters; ++it) {
        const Iter& t = iters[it];
        if (t.last == 0) continue;
        busy += double(t.busy) / 1e6;
        span += double(t.last - t.first) / 1e6;
        optimizer += double(t.opt_end - t.opt_start) / 1e6;
        ++n;
        const auto next = iters.find(it + 1);
        if ((it - warmup) % iters_per_round == 0 || next == iters.end() || next->second.last == 0) continue;
        to_opt += double(t.opt_start - t.last) / 1e6;
        to_next += double(next->second.first - t.opt_end) / 1e6;
        ++gaps;
      }
      if (n > 0)
        std::printf(
            "trace (%d iterations): ops %.3f ms of a %.3f ms op span (gaps %.3f ms), optimizer phase (host: "
            "request to reply) %.3f ms, per iteration\n",
            n, busy / n, span / n, (span - busy) / n, optimizer / n);
      if (gaps > 0)
        std::printf(
            "between iterations (%d): last op end -> optimizer %.3f ms, optimizer (host) %.3f ms, "
            "-> next first op %.3f ms (the GPU finishes the optimizer's kernels in it)\n",
            gaps, to_opt / gaps, optimizer / n, to_next / gaps);
      double plain_ops = 0;
      for (const auto& [name, ms] : profiler.totals_ms()) plain_ops += ms;
      std::printf("plain loop: model ops %.3f ms per iteration (profiled; the actor stage's ops above)\n",
                  plain_ops / double(rounds * iters_per_round));
    }

    model.set_profiler(nullptr);
    return run_message_latency(round_trips);
  });
}
