// Marked intervals of device work inside one op, for the trace: an expert-parallel
// all-to-all, the compute launched to run beside it, the weight-gradient work of a fused
// backward (summed into the op's weight_ns rather than traced one by one), each transformer
// layer (what of an op's time its layers take, and what is left around them). Each mark is a point on a context's
// stream (a CUDA event on a GPU; the clock on a CPU device, whose work has run when its call returns). The runtime
// implements the interface (actors/fabric/device_services.hpp, CompletionQueue::spans) and turns an op's marks into
// times on the trace clock once the op has finished. Model code holds a pointer that is null unless the run is traced:
// nothing is marked then.
//
//   { StreamSpanScope s(spans, comm_ctx, SpanKind::moe_dispatch);
//     group.all_to_all_v(comm_ctx, ...); }                       // marked on comm_ctx's stream
#pragma once

#include <cstdint>

#include "kernels/context.hpp"

namespace troupe {

enum class SpanKind : uint8_t {
  moe_dispatch,     // tokens to their experts' ranks (the counts, the all-to-all, the reorder)
  moe_combine,      // the experts' outputs back to their tokens' ranks
  moe_overlap,      // compute enqueued to run beside a dispatch or combine (the shared expert)
  weight_gradient,  // a fused backward's weight-gradient GEMMs (what a split backward's W runs)
  layer,            // one transformer layer's work inside a forward, backward, B or W op
};
const char* span_kind_name(SpanKind kind);

class StreamSpans {
 public:
  virtual ~StreamSpans() = default;
  // Opens a span of `kind` at this point of ctx's stream; end() closes it, on the same stream.
  // Spans of one kind do not nest.
  virtual void begin(const Context& ctx, SpanKind kind) = 0;
  virtual void end(const Context& ctx, SpanKind kind) = 0;
};

// begin() now, end() at the end of the scope; nothing when `spans` is null.
class StreamSpanScope {
 public:
  StreamSpanScope(StreamSpans* spans, const Context& ctx, SpanKind kind) : spans_(spans), ctx_(ctx), kind_(kind) {
    if (spans_ != nullptr) spans_->begin(ctx_, kind_);
  }
  ~StreamSpanScope() {
    try {
      if (spans_ != nullptr) spans_->end(ctx_, kind_);
    } catch (...) {  // a failed event record: the stream's next checked call reports the error
    }
  }
  StreamSpanScope(const StreamSpanScope&) = delete;
  StreamSpanScope& operator=(const StreamSpanScope&) = delete;

 private:
  StreamSpans* spans_;
  const Context& ctx_;
  SpanKind kind_;
};

}  // namespace troupe
