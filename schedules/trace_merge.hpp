// One timeline from the trace files of a run's processes. Under mpirun `troupe train --trace
// PATH` writes PATH.rank0, PATH.rank1, ...: each process's stages, each on that process's own
// clock. Every header holds the offset of its process's clock to process 0's, measured at
// start-up (actors/fabric/host_exchange.hpp: host_clock_offset), so shifting each file's times
// by it puts every event on process 0's clock.
//
//   std::vector<std::string> files = trace_process_files({"run.trace"});  // run.trace.rank0, ...
//   Trace all = trace_read_processes(files);
//   PipelineStats s = pipeline_stats(trace_iteration(all, 5));
#pragma once

#include <string>
#include <vector>

#include "schedules/trace.hpp"

namespace troupe::schedules {

// The traces on process 0's timeline: each file's times + its clock_offset_ns, events in file
// order. Every process of the run must be there exactly once, the headers must agree (schedule,
// shape, layers) and be of version 2 (version 1 has no clock offset); `names` (parallel to
// `traces`) name the files in errors. A single trace comes back unchanged.
Trace trace_merge_processes(const std::vector<Trace>& traces, const std::vector<std::string>& names);

// The trace files `args` name: each existing file as it is; a path that is no file but the
// prefix of PATH.rank0, PATH.rank1, ... (what `--trace PATH` wrote under mpirun) stands for all of
// those, in process order. Throws naming an argument that is neither.
std::vector<std::string> trace_process_files(const std::vector<std::string>& args);

// trace_read() of every file, then trace_merge_processes().
Trace trace_read_processes(const std::vector<std::string>& paths);

}  // namespace troupe::schedules
