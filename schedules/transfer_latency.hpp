// What happens between the ops of a trace: how long a tensor takes from one pipeline stage to
// the next, and how long a stage takes from one op to the next when it waits for nothing.
//
// Transfers, per link (stage s to s+1 mod P; edge k between virtual stages k and k+1 crosses
// the link transfer_link() names: k mod P, or zb_v's way down and back up; 0 between two chunks
// of one stage) and direction. Where the trace holds `recv` events of the receiving stage (GPU
// runs: the transfer as the device saw it) their mean is the latency, each counted from the later
// of its start and its producer's end (a receive posted early waits for the sender's op, which is
// not transfer time: across processes every receive is posted early). Otherwise it is read from
// the gaps: when a stage sat idle until an op whose input came from another stage, and that
// input's producer finished after the stage fell idle, the op started as soon as the input
// arrived, so (its start - the producer's end) is the transfer, plus any wait the stage's
// policy added; the lower quartile of those gaps per link keeps the policy's waits out.
//
// Dispatch, per stage: the gap between an op's end and the next op's start on the stage when
// the next op's input had arrived before (the actor's own turnaround: its messages, the next
// op's set-up, the thread being scheduled), the mean over those gaps once the longest tenth
// (most likely a wait the policy chose) is left out. The clocks must be one (one process, or
// trace_merge_processes()).
//
//   TransferLatencies l = measured_transfer_latencies(trace, {5, 6, 7});
//   l.activation_ns[k]: forward output of virtual stage k -> k+1; -1: no sample
#pragma once

#include <cstdint>
#include <vector>

#include "schedules/trace.hpp"

namespace troupe::schedules {

struct TransferLatencies {
  std::vector<int64_t> activation_ns;  // (K-1): virtual stage k -> k+1; -1 where not measurable
  std::vector<int64_t> gradient_ns;    // (K-1): virtual stage k+1 -> k; -1 where not measurable
  std::vector<int64_t> dispatch_ns;    // (P): a stage's turnaround between ops; 0 without a sample
  int samples = 0;                     // gaps or recv events used for the transfers
  int64_t smallest_gap_ns = 0;         // the least (consumer start - producer end) seen: < 0 means
                                       // the clocks of two processes disagree by at least that much
};

TransferLatencies measured_transfer_latencies(const Trace& trace, const std::vector<int64_t>& iterations = {});

}  // namespace troupe::schedules
