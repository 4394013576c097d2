// --trace: the runtime records every op of every stage (and the data and optimizer phases)
// in the schedules/trace.hpp format, readable back with the same ops the stages ran.
#include <filesystem>
#include <map>
#include <tuple>

#include "schedules/trace.hpp"
#include "tests/actors/train/pipeline_test_util.hpp"

namespace troupe::test {
namespace {

using schedules::EventKind;

TEST(RuntimeTrace, RecordsEveryOp) {
  const int P = 2, V = 2, M = 4, iters = 2;
  actors::TrainingConfig config = tiny_config(false, P, V, M);
  const std::string path = (std::filesystem::temp_directory_path() / "troupe_runtime_trace_test.trace").string();
  config.trace_path = path;
  {
    actors::TrainingRun run(config, loader(tiny_data(config.model), config.micro_batch_size), nullptr);
    for (int i = 0; i < iters; ++i) run.train_iteration();
  }
  const schedules::Trace trace = schedules::trace_read(path);
  EXPECT_EQ(trace.header.schedule, schedules::Schedule::interleaved_1f1b);
  EXPECT_EQ(trace.header.shape.stages, P);
  EXPECT_EQ(trace.header.shape.chunks, V);
  EXPECT_EQ(trace.header.shape.microbatches, M);
  EXPECT_EQ(trace.header.num_layers, config.model.num_layers);
  std::map<EventKind, int> count;
  // The layer spans of each op (iteration, stage, chunk, microbatch, kind of the op they are in:
  // a layer span carries the op's fields and lies inside the op's interval).
  std::map<std::tuple<int64_t, int, int, int>, int> layers;
  const int64_t hidden_bytes = config.micro_batch_size * config.model.seq_length * config.model.hidden_size * 4;
  for (const schedules::TraceEvent& e : trace.events) {
    ++count[e.kind];
    EXPECT_LT(e.start_ns, e.end_ns);
    if (e.kind == EventKind::layer) ++layers[{e.iteration, e.stage, e.chunk, e.microbatch}];
    EXPECT_GE(e.iteration, 1);
    EXPECT_LE(e.iteration, iters);
    if (e.kind != EventKind::forward && e.kind != EventKind::backward) continue;
    EXPECT_EQ(e.actor, "stage" + std::to_string(e.stage));
    EXPECT_EQ(e.device, e.stage);
    // Every op sends one hidden-state tensor, except the last virtual stage's forward and the first's backward.
    const int vs = e.chunk * P + e.stage;
    const bool sends = e.kind == EventKind::forward ? vs != P * V - 1 : vs != 0;
    EXPECT_EQ(e.bytes, sends ? hidden_bytes : 0) << schedules::event_kind_name(e.kind) << " vs " << vs;
    // The first microbatch's fused backward times its weight-gradient part (what zb's W would
    // run): some, not all, of it; the others stand on it.
    if (e.kind == EventKind::backward && e.microbatch == 0) {
      EXPECT_GT(e.weight_ns, 0) << "vs " << vs;
      EXPECT_LT(e.weight_ns, e.end_ns - e.start_ns) << "vs " << vs;
    } else {
      EXPECT_EQ(e.weight_ns, 0);
    }
  }
  EXPECT_EQ(count[EventKind::forward], iters * P * V * M);
  EXPECT_EQ(count[EventKind::backward], iters * P * V * M);
  EXPECT_EQ(count[EventKind::optimizer], iters);
  EXPECT_EQ(count[EventKind::data], iters);
  // Each chunk's first microbatch marks its layers in its forward and its backward; no other op does.
  const int chunk_layers = config.model.num_layers / (P * V);
  ASSERT_EQ(layers.size(), size_t(iters * P * V));
  for (const auto& [key, n] : layers) {
    EXPECT_EQ(std::get<3>(key), 0);
    EXPECT_EQ(n, 2 * chunk_layers);
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace troupe::test
