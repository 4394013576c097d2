// Putting the traces of a run's processes on one clock.
#include "schedules/trace_merge.hpp"

#include <filesystem>

#include "base/check.hpp"

namespace troupe::schedules {

Trace trace_merge_processes(const std::vector<Trace>& traces, const std::vector<std::string>& names) {
  TROUPE_CHECK(!traces.empty() && names.size() == traces.size(), "trace_merge_processes: ", traces.size(),
               " traces and ", names.size(), " names");
  if (traces.size() == 1) return traces[0];
  const int N = int(traces.size());
  std::vector<int> file_of(size_t(N), -1);  // process -> index in traces
  const TraceHeader& first = traces[0].header;
  for (int i = 0; i < N; ++i) {
    const TraceHeader& h = traces[size_t(i)].header;
    const std::string& name = names[size_t(i)];
    TROUPE_CHECK(h.version >= 2, "trace '", name, "' is of format version ", h.version,
                 ", which records no clock offset: the traces of several processes can only be merged when "
                 "recorded by a troupe that writes version 2");
    TROUPE_CHECK(h.processes == N, "trace '", name, "' is process ", h.process, " of ", h.processes, ", but ", N,
                 " files were given: give the trace of every process of the run once");
    TROUPE_CHECK(file_of[size_t(h.process)] < 0, "traces '", names[size_t(std::max(file_of[size_t(h.process)], 0))],
                 "' and '", name, "' are both process ", h.process, ": give each process's trace once");
    file_of[size_t(h.process)] = i;
    TROUPE_CHECK(h.schedule == first.schedule && h.shape == first.shape && h.num_layers == first.num_layers &&
                     h.chunk_layers == first.chunk_layers,
                 "trace '", name, "' records another pipeline (", schedule_name(h.schedule), " P=", h.shape.stages,
                 " V=", h.shape.chunks, " M=", h.shape.microbatches, ") than '", names[0], "' (",
                 schedule_name(first.schedule), " P=", first.shape.stages, " V=", first.shape.chunks,
                 " M=", first.shape.microbatches, "): are they of the same run?");
  }
  Trace out;
  out.header = traces[size_t(file_of[0])].header;
  out.header.process = 0;
  out.header.processes = 1;  // one timeline now, process 0's
  out.header.clock_offset_ns = 0;
  out.header.clock_rtt_ns = 0;
  for (int p = 0; p < N; ++p) {
    const Trace& t = traces[size_t(file_of[size_t(p)])];
    out.header.iteration = std::min(out.header.iteration, t.header.iteration);
    out.header.clock_rtt_ns = std::max(out.header.clock_rtt_ns, t.header.clock_rtt_ns);
    for (TraceEvent e : t.events) {
      e.start_ns += t.header.clock_offset_ns;
      e.end_ns += t.header.clock_offset_ns;
      out.events.push_back(std::move(e));
    }
  }
  return out;
}

std::vector<std::string> trace_process_files(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const std::string& a : args) {
    if (fs::is_regular_file(a)) {
      out.push_back(a);
      continue;
    }
    const size_t before = out.size();
    for (int r = 0; fs::is_regular_file(str_cat(a, ".rank", r)); ++r) out.push_back(str_cat(a, ".rank", r));
    TROUPE_CHECK(out.size() > before, "trace '", a, "' is neither a file nor the prefix of ", a, ".rank0, ", a,
                 ".rank1, ... (what --trace ", a, " writes under mpirun)");
  }
  return out;
}

Trace trace_read_processes(const std::vector<std::string>& paths) {
  std::vector<Trace> traces;
  for (const std::string& p : paths) traces.push_back(trace_read(p));
  return trace_merge_processes(traces, paths);
}

}  // namespace troupe::schedules
