// The op trace of a training run: every op of every actor (forward, backward, send, ...) with
// its start and end, as recorded by `troupe train --trace FILE` and as produced by the
// simulator. On disk it is msgpack; it exports to Chrome-trace JSON (Perfetto,
// chrome://tracing) and to an SVG per-stage timeline.
//
//   TraceWriter out("run.trace", header);                // streams; a crash keeps what was written
//   out.append({.actor = "stage0", .device = 0, .stage = 0, .kind = EventKind::forward,
//               .microbatch = 3, .start_ns = t0, .end_ns = t1});
//   Trace trace = trace_read("run.trace");                // troupe::Error on a bad/truncated file
//   write_text_file("run.json", trace_to_chrome_json(trace));
//
// File layout (version 6): a concatenation of msgpack objects, no framing.
//   1. the header, a map with string keys:
//        "format": "troupe-trace", "version": 6,
//        "schedule": "gpipe" | "1f1b" | "interleaved" | "zb-h1", "stages": P, "chunks": V,
//        "microbatches": M, "group_size": G (0: P), "num_layers": L (0: unknown),
//        "iteration": first iteration recorded,
//        "process": R, "processes": N (which process of the run wrote the file),
//        "clock_offset_ns": process 0's clock minus this file's (signed; added to every time
//        to put the file on process 0's timeline), "clock_rtt_ns": the round trip of the
//        exchange that measured it (its uncertainty is half that; 0 for process 0),
//        "chunk_layers": [layers of virtual stage 0, 1, ...] (optional; absent: an even split)
//      (readers ignore keys they do not know). Version 1 files (no process or clock keys)
//      read as process 0 of 1; version 2 to 5 files read as version 6 (only the kinds 9 and 10
//      and the schedule "zb-h1" are new in 3, the kinds 11 to 13 in 4, 14 in 5, 15 and the
//      event's sm_clock_mhz in 6); other versions are refused;
//   2. then one array per event, in any order, of at least 10 elements (readers ignore extra):
//        [actor: str, device: int, stage: int, kind: int, microbatch: int, chunk: int,
//         iteration: int, start_ns: int, end_ns: int, bytes: int, weight_ns: int (optional),
//         sm_clock_mhz: int (optional)]
//      kind: 0 forward, 1 backward (fused: input and weight gradients), 2 send, 3 recv,
//      4 optimizer, 5 grad_reduce, 6 data, 7 checkpoint, 8 other, 9 backward_input (B, the
//      input gradient of a split backward), 10 backward_weight (W, its weight gradient);
//      spans inside an op, with the op's stage, microbatch and chunk (kernels/stream_spans.hpp):
//      11 moe_dispatch and 12 moe_combine (an expert-parallel all-to-all, on its own stream),
//      13 moe_overlap (compute run beside one), 14 layer (one transformer layer; traced runs
//      mark them in each chunk's first microbatch's ops of an iteration); 15 clock (a sample of
//      the SM clock of the stage's device, sm_clock_mhz, at start_ns = end_ns; traced runs on
//      GPUs sample every 20 ms).
//      In version 1 and 2 files, values other than 0-8 read as other (as those readers did);
//      in version 3 to 6 files a value the version did not have is refused, naming the event
//      and the value. device/stage/microbatch are -1
//      where they do not apply (e.g. the optimizer actor's microbatch). weight_ns (absent: 0): of
//      a fused backward, the time its weight-gradient work took (what a split backward's W does),
//      0 where not measured (traced runs measure each chunk's first microbatch of an iteration);
//      at most end_ns - start_ns. Times are
//      nanoseconds on one clock per process (steady clock since the run started); the files
//      of one run's processes go onto one timeline with trace_merge_processes().
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "base/output_file.hpp"
#include "schedules/schedule.hpp"

namespace troupe::schedules {

// The trace format version this troupe writes (and reads live, e.g. the monitor's messages).
inline constexpr int kTraceFormatVersion = 6;

enum class EventKind : uint8_t {
  forward,
  backward,
  send,
  recv,
  optimizer,
  grad_reduce,
  data,
  checkpoint,
  other,
  backward_input,
  backward_weight,
  moe_dispatch,
  moe_combine,
  moe_overlap,
  layer,
  clock
};

const char* event_kind_name(EventKind kind);
// The pipeline compute ops (forward, backward, backward_input, backward_weight), and the
// mapping between them and the schedule's op kinds (is_op_kind() first).
bool is_op_kind(EventKind kind);
// The spans marked inside an op (moe_dispatch .. layer).
bool is_span_kind(EventKind kind);
OpKind op_kind(EventKind kind);
EventKind event_kind(OpKind kind);

struct TraceEvent {
  std::string actor;    // "stage1", "optimizer", ...
  int32_t device = -1;  // GPU or CPU device index; -1: host
  int32_t stage = -1;   // pipeline stage; -1: not a stage op
  EventKind kind = EventKind::other;
  int32_t microbatch = -1;
  int32_t chunk = 0;  // local model chunk
  int64_t iteration = 0;
  int64_t start_ns = 0, end_ns = 0;
  int64_t bytes = 0;  // bytes moved (send/recv), 0 otherwise
  // A fused backward: the time of its weight-gradient work within [start_ns, end_ns) (the GEMMs'
  // weight gradients and the embedding's, what a split backward's W runs); 0: not measured.
  int64_t weight_ns = 0;
  // A clock sample (EventKind::clock, at start_ns = end_ns): the SM clock of the stage's device.
  int32_t sm_clock_mhz = 0;
  bool operator==(const TraceEvent&) const = default;
};

struct TraceHeader {
  Schedule schedule = Schedule::one_f_one_b;
  PipelineShape shape;
  int num_layers = 0;              // transformer layers of the whole model; 0: unknown
  int64_t iteration = 0;           // first iteration recorded
  int process = 0, processes = 1;  // the process of the run that recorded the file, of how many
  // Process 0's trace clock minus this process's, measured at start-up (a round-trip exchange,
  // the one of least round-trip time): times + clock_offset_ns are on process 0's clock.
  int64_t clock_offset_ns = 0;
  int64_t clock_rtt_ns = 0;           // that exchange's round trip (the offset is good to half of it)
  std::vector<int> chunk_layers;      // layers per virtual stage (P*V entries); empty: L / (P*V) each
  int version = kTraceFormatVersion;  // the file's format version (what trace_read found)
  bool operator==(const TraceHeader&) const = default;
};

struct Trace {
  TraceHeader header;
  std::vector<TraceEvent> events;
};

// msgpack bytes <-> Trace. `what` names the source in error messages.
std::string trace_to_msgpack(const Trace& trace);
Trace trace_from_msgpack(std::string_view bytes, const std::string& what = "trace");
void trace_write(const std::string& path, const Trace& trace);
Trace trace_read(const std::string& path);

// Appends events to a trace file as they happen (the file is valid after every append()).
class TraceWriter {
 public:
  TraceWriter(const std::string& path, const TraceHeader& header);
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;
  void append(const TraceEvent& event);
  void flush() { file_.flush(); }
  void close() { file_.close(); }

 private:
  OutputFile file_;
};

// The events of one iteration, and the iterations a trace holds (sorted).
Trace trace_iteration(const Trace& trace, int64_t iteration);
std::vector<int64_t> trace_iterations(const Trace& trace);

// Chrome trace JSON (the "traceEvents" array format): one process per device (pid = device,
// pid = -1 for host actors, named by "process_name" metadata), one thread per actor, a
// complete event ("ph": "X", ts/dur in microseconds) per op, args with microbatch, chunk,
// iteration and bytes.
std::string trace_to_chrome_json(const Trace& trace);

// A self-contained SVG timeline: one row per stage, forward boxes blue and backward green
// (lighter for later chunks), the microbatch number in each box; other stage events gray.
std::string trace_to_svg(const Trace& trace, const std::string& title = "");

void write_text_file(const std::string& path, const std::string& text);

}  // namespace troupe::schedules
