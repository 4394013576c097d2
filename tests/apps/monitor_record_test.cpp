// `troupe monitor --record FILE` against a live run: a two-stage CPU training run writes its
// own trace (--trace) and publishes to a recorder that attaches mid-run; the recorded file
// must be a trace `troupe replay` reads, holding for every recorded iteration (the latest few
// before attaching, which the monitor re-sends, and every one after) exactly the ops of the
// run's own trace, and the replay analysis of both must agree on the ops per stage; the other
// records go to FILE.records.jsonl, once each. Piped, the monitor shows each log line with the
// stages' busy shares.
#include <signal.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "schedules/replay.hpp"
#include "schedules/trace.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

using namespace std::chrono_literals;
using schedules::EventKind;
using schedules::Trace;

// (iteration, stage, kind) -> ops (forward, backward, transfers, optimizer steps) of the
// iterations in `only`. Host events of an evaluation after the last iteration (the trainer
// reaches the monitor only with the next iteration's events) are left out.
using Counts = std::map<std::tuple<int64_t, int, int>, int>;
Counts op_counts(const Trace& t, const std::vector<int64_t>& only) {
  Counts c;
  for (const schedules::TraceEvent& e : t.events) {
    const bool op = e.kind == EventKind::forward || e.kind == EventKind::backward || e.kind == EventKind::send ||
                    e.kind == EventKind::recv || e.kind == EventKind::optimizer;
    if (op && std::find(only.begin(), only.end(), e.iteration) != only.end()) ++c[{e.iteration, e.stage, int(e.kind)}];
  }
  return c;
}

TEST(MonitorRecord, RecordedTraceReplaysWithTheRunsOps) {
  TempDir dir("monitor_record");
  Troupe train({"train",
                "--device",
                "cpu",
                "--devices",
                "2",
                "--pipeline-model-parallel-size",
                "2",
                "--mock-data",
                "--vocab-size",
                "128",
                "--num-layers",
                "3",
                "--decoder-first-pipeline-num-layers",  // stages of 1 and 2 layers: the header says so
                "1",
                "--hidden-size",
                "32",
                "--num-attention-heads",
                "2",
                "--seq-length",
                "16",
                "--micro-batch-size",
                "1",
                "--global-batch-size",
                "4",
                "--train-iters",
                "1000000",
                "--log-interval",
                "4",
                "--eval-interval",
                "0",
                "--trace",
                dir / "run.trace",
                "--monitor-endpoint",
                "tcp://127.0.0.1:*"},
               dir / "train.log");
  const std::string endpoint = published_endpoint(train.await_output("monitor: publishing on ", 60s));
  ASSERT_FALSE(endpoint.empty()) << train.output();
  Troupe recorder({"monitor", endpoint, "--record", dir / "recorded.trace", "--timeout", "60"}, dir / "monitor.txt");
  // Record a while (a few dozen log lines), then stop the run: the recorder ends with it.
  recorder.await_output("| stages busy: ", 60s);
  std::this_thread::sleep_for(1500ms);
  train.signal(SIGTERM);
  ASSERT_EQ(train.wait(60s), std::optional<int>(130)) << train.output();
  ASSERT_EQ(recorder.wait(30s), std::optional<int>(0)) << recorder.output();
  const std::string said = recorder.output();
  EXPECT_NE(said.find("recorded "), std::string::npos) << said;

  // The other records, a JSON line each, once: the hello (fresh records may overtake the first
  // snapshot), log lines, stages, the end last.
  std::vector<nlohmann::json> records;
  std::istringstream lines(read_file(dir / "recorded.trace.records.jsonl"));
  for (std::string line; std::getline(lines, line);) records.push_back(nlohmann::json::parse(line));
  ASSERT_GE(records.size(), 3u);
  EXPECT_EQ(records.back()["type"], "end");
  EXPECT_EQ(records.back()["record"]["reason"], "stopped");
  std::set<uint64_t> seqs;
  int hellos = 0, log_lines = 0, stage_records = 0;
  for (const nlohmann::json& r : records) {
    EXPECT_TRUE(seqs.insert(r["seq"].get<uint64_t>()).second) << "seq " << r["seq"] << " written twice";
    if (r["type"] == "hello") {
      EXPECT_EQ(r["record"]["pipeline_parallel"], 2) << r;
    }
    hellos += r["type"] == "hello";
    log_lines += r["type"] == "iteration";
    stage_records += r["type"] == "stages";
  }
  EXPECT_EQ(hellos, 1);
  EXPECT_GT(log_lines, 0);
  EXPECT_GT(stage_records, 0);

  const Trace run = schedules::trace_read(dir / "run.trace");
  const Trace recorded = schedules::trace_read(dir / "recorded.trace");
  EXPECT_EQ(recorded.header.schedule, run.header.schedule);
  EXPECT_EQ(recorded.header.shape.stages, 2);
  EXPECT_EQ(recorded.header.shape.microbatches, 4);
  EXPECT_EQ(recorded.header.num_layers, run.header.num_layers);
  EXPECT_EQ(run.header.chunk_layers, (std::vector<int>{1, 2}));
  EXPECT_EQ(recorded.header.chunk_layers, run.header.chunk_layers);
  const std::vector<int64_t> iterations = schedules::trace_iterations(recorded);
  ASSERT_GE(iterations.size(), 10u);
  // No gap: the re-sent iterations join the live ones; the last is the run's last.
  EXPECT_EQ(iterations.back() - iterations.front() + 1, int64_t(iterations.size()));
  int64_t last = 0;
  for (const schedules::TraceEvent& e : run.events)
    if (e.kind == EventKind::forward) last = std::max(last, e.iteration);
  EXPECT_EQ(iterations.back(), last);
  const Counts want = op_counts(run, iterations), got = op_counts(recorded, iterations);
  EXPECT_EQ(got, want);
  int forwards = 0;
  for (const auto& [key, n] : got)
    if (std::get<2>(key) == int(EventKind::forward)) forwards += n;
  EXPECT_EQ(forwards, 4 * 2 * int(iterations.size()));  // M microbatches x P stages

  // Through the replay code, as `troupe replay FILE` does.
  const schedules::ReplayReport a = schedules::replay_trace(run, {.iteration = last, .what_ifs = {}});
  const schedules::ReplayReport b = schedules::replay_trace(recorded, {.iteration = last, .what_ifs = {}});
  ASSERT_EQ(b.stats.stages.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(b.stats.stages[s].ops, a.stats.stages[s].ops) << "stage " << s;
    EXPECT_EQ(b.stats.stages[s].busy_ns, a.stats.stages[s].busy_ns) << "stage " << s;
    EXPECT_EQ(b.stats.stages[s].ops, 2 * 4) << "stage " << s;  // a forward and a backward per microbatch
  }
  EXPECT_EQ(b.step_ns, a.step_ns);
  EXPECT_FALSE(schedules::format_replay_report(b).empty());
}

}  // namespace
}  // namespace troupe::test
