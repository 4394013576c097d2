// The traces of a run's processes on one clock (schedules/trace_merge.hpp): each file shifted by
// its header's clock offset, every process required once, files of another run or of version 1
// (no offset) refused by name; the PATH prefix of PATH.rank0, PATH.rank1, ...
#include <gtest/gtest.h>

#include <filesystem>

#include "base/check.hpp"
#include "schedules/analysis.hpp"
#include "schedules/simulator.hpp"
#include "schedules/trace_merge.hpp"

namespace troupe::schedules {
namespace {

// A 1F1B P=2 iteration as two processes would record it: stage s in process s, each on its own
// clock that reads `process 0's clock - offset[s]`.
std::vector<Trace> split_by_process(const Trace& one, const std::vector<int64_t>& offset) {
  std::vector<Trace> out(offset.size());
  for (size_t p = 0; p < offset.size(); ++p) {
    out[p].header = one.header;
    out[p].header.process = int(p);
    out[p].header.processes = int(offset.size());
    out[p].header.clock_offset_ns = offset[p];
  }
  for (TraceEvent e : one.events) {
    const size_t p = size_t(e.stage);
    e.start_ns -= offset[p], e.end_ns -= offset[p];
    out[p].events.push_back(e);
  }
  return out;
}

std::string merge_error(const std::vector<Trace>& traces, const std::vector<std::string>& names) {
  try {
    trace_merge_processes(traces, names);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TraceMerge, OffsetsPutEveryProcessOnProcessZerosClock) {
  const PipelineShape shape{.stages = 2, .chunks = 1, .microbatches = 4};
  const Simulation sim = simulate(Schedule::one_f_one_b, shape, OpDurations::uniform(shape, 1000, 2000, 300));
  // Process 1 started its clock 7 s after process 0: its times read 7 s less.
  const std::vector<Trace> files = split_by_process(sim.trace, {0, 7'000'000'000});
  // Given in any order.
  const Trace merged = trace_merge_processes({files[1], files[0]}, {"t.rank1", "t.rank0"});
  EXPECT_EQ(merged.header.processes, 1);
  EXPECT_EQ(merged.header.clock_offset_ns, 0);
  EXPECT_EQ(pipeline_stats(merged).step_ns, sim.stats.step_ns);
  EXPECT_DOUBLE_EQ(pipeline_stats(merged).bubble_fraction, sim.stats.bubble_fraction);
  ASSERT_EQ(merged.events.size(), sim.trace.events.size());
  // Without the offsets the step would span the 7 s.
  Trace naive = files[0];
  for (const TraceEvent& e : files[1].events) naive.events.push_back(e);
  EXPECT_GT(pipeline_stats(naive).step_ns, 6'000'000'000);
  // One file is the trace as it is.
  EXPECT_EQ(trace_merge_processes({files[0]}, {"t.rank0"}).events, files[0].events);
}

TEST(TraceMerge, RefusesWhatCannotBeOneRun) {
  const PipelineShape shape{.stages = 2, .chunks = 1, .microbatches = 4};
  const Simulation sim = simulate(Schedule::one_f_one_b, shape, OpDurations::uniform(shape, 1000, 2000));
  const std::vector<Trace> files = split_by_process(sim.trace, {0, 5});
  EXPECT_NE(merge_error({files[0], files[0]}, {"a", "b"}).find("traces 'a' and 'b' are both process 0"),
            std::string::npos);
  EXPECT_NE(merge_error({files[0], files[1], files[1]}, {"a", "b", "c"}).find("'a' is process 0 of 2, but 3 files"),
            std::string::npos);
  Trace other = files[1];
  other.header.shape.microbatches = 8;
  EXPECT_NE(merge_error({files[0], other}, {"a", "b"}).find("trace 'b' records another pipeline"), std::string::npos);
  Trace old = files[1];
  old.header.version = 1;  // as trace_read() finds a version 1 file: no clock offset
  EXPECT_NE(merge_error({files[0], old}, {"a", "b"}).find("trace 'b' is of format version 1"), std::string::npos);
}

TEST(TraceMerge, FilesByPrefixAndClockKeysRoundTrip) {
  const PipelineShape shape{.stages = 2, .chunks = 1, .microbatches = 2};
  const Simulation sim = simulate(Schedule::one_f_one_b, shape, OpDurations::uniform(shape, 1000, 2000));
  const std::vector<Trace> files = split_by_process(sim.trace, {0, -123'456});
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "troupe_trace_merge_test";
  std::filesystem::create_directories(dir);
  const std::string prefix = (dir / "run.trace").string();
  trace_write(prefix + ".rank0", files[0]);
  trace_write(prefix + ".rank1", files[1]);
  EXPECT_EQ(trace_process_files({prefix}), (std::vector<std::string>{prefix + ".rank0", prefix + ".rank1"}));
  EXPECT_EQ(trace_process_files({prefix + ".rank1"}), (std::vector<std::string>{prefix + ".rank1"}));
  EXPECT_THROW(trace_process_files({(dir / "nothing").string()}), Error);
  const Trace back = trace_read(prefix + ".rank1");
  EXPECT_EQ(back.header.clock_offset_ns, -123'456);
  EXPECT_EQ(back.header.process, 1);
  EXPECT_EQ(pipeline_stats(trace_read_processes(trace_process_files({prefix}))).step_ns, sim.stats.step_ns);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace troupe::schedules
