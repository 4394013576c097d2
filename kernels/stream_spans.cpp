#include "kernels/stream_spans.hpp"

namespace troupe {

const char* span_kind_name(SpanKind kind) {
  switch (kind) {
    case SpanKind::moe_dispatch:
      return "moe_dispatch";
    case SpanKind::moe_combine:
      return "moe_combine";
    case SpanKind::moe_overlap:
      return "moe_overlap";
    case SpanKind::weight_gradient:
      return "weight_gradient";
    case SpanKind::layer:
      return "layer";
  }
  return "?";
}

}  // namespace troupe
