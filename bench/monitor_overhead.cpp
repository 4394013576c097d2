// The monitor's cost to training, measured inside one process so that machine noise cancels:
// a TrainingRun with its monitor started (--monitor-endpoint and --metrics-port) and a
// subscriber reading everything (an attached `troupe monitor`) trains in alternating blocks,
// publishing a record after every iteration in one block (the worst case, --log-interval 1)
// and nothing in the other. The headline is the median over rounds of the on/off ratio of the
// blocks' ms/iteration: each round's pair runs back to back, the order alternating, so load
// from elsewhere on the machine (which drifts over seconds) hits both alike; blocks of one
// iteration and many rounds resolve a fraction of a percent on a busy machine. Then the
// two costs behind it, timed directly: a publish on the training thread (building the record,
// the device-memory query, handing it to the actor) and encode + send on the monitor's thread;
// and what the trace costs the monitor's thread per iteration of a large pipeline (the
// per-stage times, encoding and sending the `trace` and `stages` messages). Both blocks run
// with the trace forwarded (it is on whenever the monitor is): its cost to the training
// thread, collecting the events and one message per iteration, is in both.
// bench/monitor_overhead.sh measures whole runs with and without the flags.
//
//   monitor_overhead                          # GPU if there is one (GPT-2 124M shape, bf16)
//   monitor_overhead --device cpu --rounds 20
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "actors/monitor/monitor_publisher.hpp"
#include "schedules/stage_time.hpp"
#include "actors/monitor/monitor_subscriber.hpp"
#include "actors/train/training_run.hpp"
#include "data/data_loader.hpp"
#include "data/mock_dataset.hpp"
#include "base/check.hpp"

using namespace troupe;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? NAN : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// What train_command publishes per log line (apps/train/train_monitor.cpp), from one iteration.
actors::MonitorIteration record_of(const IterationStats& s, actors::TrainingRun& run, double ms, int64_t tokens) {
  actors::MonitorIteration it;
  it.iteration = s.iteration, it.consumed_samples = run.consumed_samples(), it.window_iterations = 1;
  it.lm_loss = s.loss, it.learning_rate = s.lr, it.grad_norm = s.grad_norm, it.loss_scale = s.loss_scale;
  it.elapsed_ms_per_iteration = ms, it.tokens_per_second = double(tokens) / (ms / 1e3), it.mfu = NAN;
  it.memory_bytes = run.device_memory_in_use();
  return it;
}

// An attached `troupe monitor`: reads and decodes everything until told to stop.
class Reader {
 public:
  explicit Reader(const std::string& endpoint)
      : thread_([this, endpoint] {
          actors::MonitorSubscriber sub(endpoint);
          while (!stop_)
            if (sub.receive(std::chrono::milliseconds(50))) ++received_;
        }) {}
  ~Reader() {
    stop_ = true;
    thread_.join();
  }
  uint64_t received() const { return received_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> received_{0};
  std::thread thread_;
};

// One iteration's events of a P-stage pipeline with M microbatches: per stage a forward, a
// backward and an input transfer per microbatch, plus the data loader and the optimizer.
std::vector<schedules::TraceEvent> synthetic_iteration(int P, int M) {
  std::vector<schedules::TraceEvent> events;
  auto add = [&](std::string actor, int stage, schedules::EventKind kind, int microbatch, int64_t start, int64_t end) {
    schedules::TraceEvent e;
    e.actor = std::move(actor), e.device = stage, e.stage = stage, e.kind = kind, e.microbatch = microbatch;
    e.iteration = 1, e.start_ns = start, e.end_ns = end;
    events.push_back(std::move(e));
  };
  int64_t t = 0;
  add("data_loader", -1, schedules::EventKind::data, -1, 0, 1000);
  for (int m = 0; m < M; ++m)
    for (int s = 0; s < P; ++s)
      for (auto kind : {schedules::EventKind::recv, schedules::EventKind::forward, schedules::EventKind::backward}) {
        add("stage" + std::to_string(s), s, kind, m, t, t + 5000);
        t += 1000;
      }
  add("optimizer", -1, schedules::EventKind::optimizer, -1, t, t + 9000);
  return events;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "auto";
  int layers = 0, hidden = 0, heads = 0, seq = 0;
  int64_t mbs = 0, rounds = 301, block = 1, warmup = 3, publishes = 20000;
  CLI::App app{"the monitor's cost: training with a record published every iteration vs none, in one process"};
  app.add_option("--device", device, "auto | cpu | cuda");
  app.add_option("--num-layers", layers);
  app.add_option("--hidden-size", hidden);
  app.add_option("--num-attention-heads", heads);
  app.add_option("--seq-length", seq);
  app.add_option("--micro-batch-size", mbs);
  app.add_option("--rounds", rounds, "alternating rounds (one block publishing, one not)");
  app.add_option("--block", block, "iterations per block");
  app.add_option("--warmup", warmup, "untimed iterations first");
  app.add_option("--publishes", publishes, "publishes to time back to back");
  CLI11_PARSE(app, argc, argv);

  try {
    const bool cuda = device == "cuda" || (device == "auto" && cuda_available());
    GptConfig c = GptConfig::preset(cuda ? "gpt2-124m" : "gpt2-tiny");
    if (layers > 0) c.num_layers = layers;
    if (hidden > 0) c.hidden_size = hidden;
    if (heads > 0) c.num_attention_heads = heads;
    if (seq > 0) c.seq_length = seq;
    c.max_position_embeddings = std::max(c.max_position_embeddings, c.seq_length);
    c.vocab_size = cuda ? 50257 : 4096;
    if (mbs <= 0) mbs = cuda ? 8 : 2;

    actors::TrainingConfig config;
    config.model = c;
    config.devices.cuda = cuda;
    config.devices.compute = cuda ? DType::bf16 : DType::f32;
    config.optimizer = {.adam = {.lr = 0, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f},
                        .clip_grad = 1.0f};
    config.lr = {.lr = 1e-4, .min_lr = 1e-5, .warmup_iters = 0, .decay_iters = 100000};
    config.micro_batch_size = mbs;
    config.global_batch_size = mbs;
    const int64_t iterations = warmup + 2 * rounds * block;
    config.train_iters = iterations;
    auto data = std::make_shared<MockDataset>(mbs * (iterations + 2), c.seq_length, c.vocab_size, 1);
    std::printf("model: %d layers, hidden %d, seq %d, micro batch %ld, %s on %s\n", c.num_layers, c.hidden_size,
                c.seq_length, long(mbs), dtype_name(config.devices.compute), cuda ? "cuda:0" : "cpu");
    actors::TrainingRun run(config, std::make_unique<DataLoader>(data, DataLoaderOptions{.micro_batch_size = mbs}),
                            nullptr);
    actors::MonitorHello hello;
    hello.run_id = "monitor_overhead";
    hello.train_iters = iterations;
    const actors::MonitorAddresses at = run.start_monitor({.endpoint = "tcp://127.0.0.1:*", .metrics_port = 0}, hello);
    std::printf("monitor: publishing on %s, metrics on %s; a subscriber reads everything\n", at.endpoint.c_str(),
                at.metrics_url.c_str());
    Reader reader(at.endpoint);
    const int64_t tokens = mbs * c.seq_length;

    for (int64_t i = 0; i < warmup; ++i) run.train_iteration();
    const auto time_block = [&](bool publish) {
      double total = 0;
      for (int64_t i = 0; i < block; ++i) {
        const auto t0 = Clock::now();
        const IterationStats s = run.train_iteration();
        if (publish) run.publish(record_of(s, run, seconds_since(t0) * 1e3, tokens));
        total += seconds_since(t0);
      }
      return total / double(block) * 1e3;
    };
    std::vector<double> ratios, on_ms, off_ms;
    for (int64_t r = 0; r < rounds; ++r) {
      double on = 0, off = 0;
      if (r % 2 == 0)
        on = time_block(true), off = time_block(false);
      else
        off = time_block(false), on = time_block(true);
      on_ms.push_back(on), off_ms.push_back(off), ratios.push_back(on / off);
    }
    std::vector<double> sorted = ratios;
    std::sort(sorted.begin(), sorted.end());
    const double ratio = median(ratios);
    std::printf("%ld rounds of %ld iterations each way: median ms/iteration off %.3f, on %.3f\n", long(rounds),
                long(block), median(off_ms), median(on_ms));
    std::printf("on/off: median %.4f (%+.2f%%), quartiles %.4f .. %.4f\n", ratio, (ratio - 1) * 100,
                sorted[sorted.size() / 4], sorted[sorted.size() * 3 / 4]);

    // The two costs behind it, directly. On the training thread: what publish_log_line does.
    const IterationStats s = run.train_iteration();
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < publishes; ++i) run.publish(record_of(s, run, 1.0, tokens));
    const double publish_us = seconds_since(t0) / double(publishes) * 1e6;
    // On the monitor's thread: encode and send (a publisher of its own, with a reader attached).
    actors::MonitorPublisher pub("tcp://127.0.0.1:*", 256);
    Reader second(pub.endpoint());
    while (pub.take_new_subscriptions() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const actors::MonitorIteration rec = record_of(s, run, 1.0, tokens);
    const auto t1 = Clock::now();
    for (int64_t i = 0; i < publishes; ++i)
      pub.send(actors::monitor_encode({.seq = uint64_t(i + 1), .unix_ms = 0, .body = rec}));
    const double send_us = seconds_since(t1) / double(publishes) * 1e6;
    const double iteration_us = median(off_ms) * 1e3;
    std::printf(
        "per record: %.2f us on the training thread (%.4f%% of an iteration), %.2f us encode + send on the "
        "monitor's thread (%.4f%%)\n",
        publish_us, publish_us / iteration_us * 100, send_us, send_us / iteration_us * 100);
    // The trace on the monitor's thread, per iteration of a P=8, M=32 pipeline.
    const int P = 8, M = 32, traced = 2000;
    const std::vector<schedules::TraceEvent> events = synthetic_iteration(P, M);
    const auto t2 = Clock::now();
    for (int i = 0; i < traced; ++i) {
      const schedules::StageTimes st = schedules::stage_times(events, P, 0, events.back().end_ns);
      actors::MonitorStages stages;
      stages.iteration = i, stages.start_ns = st.start_ns, stages.end_ns = st.end_ns;
      for (const schedules::StageTime& x : st.stages) stages.busy_ns.push_back(x.busy_ns);
      actors::MonitorTrace trace;
      trace.iteration = i, trace.schedule = "1f1b", trace.stages = P, trace.microbatches = M, trace.events = events;
      pub.send(actors::monitor_encode({.seq = uint64_t(2 * i + 1), .unix_ms = 0, .body = std::move(trace)}));
      pub.send(actors::monitor_encode({.seq = uint64_t(2 * i + 2), .unix_ms = 0, .body = std::move(stages)}));
    }
    const double trace_us = seconds_since(t2) / traced * 1e6;
    std::printf(
        "per traced iteration of P=%d, M=%d (%zu events): %.1f us on the monitor's thread (stage times, encode, "
        "send)\n",
        P, M, events.size(), trace_us);
    std::printf("the attached subscriber received %lu messages\n", static_cast<unsigned long>(reader.received()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "monitor_overhead: %s\n", e.what());
    return 1;
  }
  return 0;
}
