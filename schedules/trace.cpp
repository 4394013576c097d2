// Trace file I/O (msgpack), Chrome-trace JSON export and the SVG timeline.
#include "schedules/trace.hpp"

#include <msgpack.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "base/check.hpp"
#include "schedules/msgpack_types.hpp"
#include "schedules/trace_msgpack.hpp"

namespace troupe::schedules {

namespace {

constexpr const char* kFormat = "troupe-trace";
// 2: process, clock offset and chunk layers in the header; 3: split backward kinds, zb-h1;
// 4: the span kinds; 5: the layer span kind; 6: the clock kind and sm_clock_mhz.
constexpr size_t kEventFields = 10;  // required; an 11th, weight_ns, and a 12th, sm_clock_mhz, are written and read
                                     // when there
constexpr int kKinds = int(EventKind::clock) + 1;
constexpr int kVersion2Kinds = int(EventKind::other) + 1;            // what version 1 and 2 readers knew
constexpr int kVersion3Kinds = int(EventKind::backward_weight) + 1;  // what version 3 readers knew
constexpr int kVersion4Kinds = int(EventKind::moe_overlap) + 1;      // what version 4 readers knew
constexpr int kVersion5Kinds = int(EventKind::layer) + 1;            // what version 5 readers knew

void pack_header(msgpack::packer<msgpack::sbuffer>& pk, const TraceHeader& h) {
  pk.pack_map(h.chunk_layers.empty() ? 13 : 14);
  pk.pack(std::string("format")), pk.pack(std::string(kFormat));
  pk.pack(std::string("version")), pk.pack(kTraceFormatVersion);
  pk.pack(std::string("schedule")), pk.pack(std::string(schedule_name(h.schedule)));
  pk.pack(std::string("stages")), pk.pack(h.shape.stages);
  pk.pack(std::string("chunks")), pk.pack(h.shape.chunks);
  pk.pack(std::string("microbatches")), pk.pack(h.shape.microbatches);
  pk.pack(std::string("group_size")), pk.pack(h.shape.group_size);
  pk.pack(std::string("num_layers")), pk.pack(h.num_layers);
  pk.pack(std::string("iteration")), pk.pack(h.iteration);
  pk.pack(std::string("process")), pk.pack(h.process);
  pk.pack(std::string("processes")), pk.pack(h.processes);
  pk.pack(std::string("clock_offset_ns")), pk.pack(h.clock_offset_ns);
  pk.pack(std::string("clock_rtt_ns")), pk.pack(h.clock_rtt_ns);
  if (!h.chunk_layers.empty()) pk.pack(std::string("chunk_layers")), pk.pack(h.chunk_layers);
}

// Reads one msgpack object at `offset`, with limits so a corrupt length cannot allocate
// gigabytes; every failure names the source, the record and the byte offset.
msgpack::object_handle unpack_one(std::string_view bytes, size_t& offset, const std::string& what,
                                  const std::string& record) {
  const size_t at = offset;
  try {
    const msgpack::unpack_limit limit(/*array=*/1 << 16, /*map=*/1 << 10, /*str=*/1 << 20, /*bin=*/1 << 20,
                                      /*ext=*/1 << 20, /*depth=*/8);
    return msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, limit);
  } catch (const msgpack::insufficient_bytes&) {
    TROUPE_FAIL(what, ": truncated in ", record, " at byte ", at, " of ", bytes.size(),
                " (the file ends inside a record; was the writer killed?)");
  } catch (const std::exception& e) {
    TROUPE_FAIL(what, ": malformed msgpack in ", record, " at byte ", at, ": ", e.what());
  }
}

TraceHeader parse_header(const msgpack::object& o, const std::string& what) {
  TROUPE_CHECK(o.type == msgpack::type::MAP, what, ": not a troupe trace (the first record is ", msgpack_type_name(o),
               ", expected the header map)");
  std::map<std::string, msgpack::object> fields;
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const auto& kv = o.via.map.ptr[i];
    if (kv.key.type == msgpack::type::STR) fields[kv.key.as<std::string>()] = kv.val;
  }
  auto it = fields.find("format");
  TROUPE_CHECK(it != fields.end() && it->second.type == msgpack::type::STR && it->second.as<std::string>() == kFormat,
               what, ": not a troupe trace (header has no \"format\": \"", kFormat, "\")");
  // Counts fit an int; the iteration any int64.
  auto get_int = [&](const char* key, bool required, int64_t fallback, int64_t hi = INT32_MAX,
                     int64_t lo = 0) -> int64_t {
    auto f = fields.find(key);
    if (f == fields.end()) {
      TROUPE_CHECK(!required, what, ": header lacks \"", key, "\"");
      return fallback;
    }
    const std::optional<int64_t> v = msgpack_int_in(f->second, lo, hi);
    TROUPE_CHECK(v.has_value(), what, ": header \"", key, "\" is ",
                 msgpack_is_int(f->second) ? "out of range" : msgpack_type_name(f->second),
                 ", expected an integer in [", lo, ", ", hi, "]");
    return *v;
  };
  // Version 1 lacks the process and clock keys (it reads as one process); a newer version may
  // mean something else by the same keys, so it is refused rather than guessed at.
  const int64_t version = get_int("version", true, 0);
  TROUPE_CHECK(version >= 1 && version <= kTraceFormatVersion, what, ": trace format version ", version,
               " is not supported (this troupe reads versions 1 to ", kTraceFormatVersion,
               "; replay it with the troupe that wrote it)");
  TraceHeader h;
  h.version = int(version);
  it = fields.find("schedule");
  TROUPE_CHECK(it != fields.end() && it->second.type == msgpack::type::STR, what,
               ": header lacks the \"schedule\" string");
  h.schedule = schedule_from_name(it->second.as<std::string>());
  h.shape.stages = int(get_int("stages", true, 1));
  h.shape.chunks = int(get_int("chunks", true, 1));
  h.shape.microbatches = int(get_int("microbatches", true, 1));
  h.shape.group_size = int(get_int("group_size", false, 0));
  h.num_layers = int(get_int("num_layers", false, 0));
  h.iteration = get_int("iteration", false, 0, INT64_MAX);
  if (version >= 2) {
    h.processes = int(get_int("processes", true, 1));
    h.process = int(get_int("process", true, 0));
    TROUPE_CHECK(h.processes >= 1 && h.process < h.processes, what, ": header \"process\" ", h.process,
                 " is not below \"processes\" ", h.processes);
    h.clock_offset_ns = get_int("clock_offset_ns", true, 0, INT64_MAX, INT64_MIN);
    h.clock_rtt_ns = get_int("clock_rtt_ns", false, 0, INT64_MAX);
    it = fields.find("chunk_layers");
    if (it != fields.end()) {
      const msgpack::object& a = it->second;
      const int K = h.shape.stages * h.shape.chunks;
      TROUPE_CHECK(a.type == msgpack::type::ARRAY && a.via.array.size == uint32_t(K), what,
                   ": header \"chunk_layers\" is ", msgpack_type_name(a),
                   a.type == msgpack::type::ARRAY ? str_cat(" of ", a.via.array.size) : std::string(),
                   ", expected an array of P*V = ", K, " layer counts");
      for (uint32_t i = 0; i < a.via.array.size; ++i) {
        const std::optional<int64_t> n = msgpack_int_in(a.via.array.ptr[i], 0, INT32_MAX);
        TROUPE_CHECK(n.has_value(), what, ": header \"chunk_layers\" entry ", i, " is ",
                     msgpack_type_name(a.via.array.ptr[i]), ", expected a layer count >= 0");
        h.chunk_layers.push_back(int(*n));
      }
    }
  }
  return h;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TROUPE_CHECK(in.good(), "cannot open trace '", path, "': ", std::strerror(errno));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace

void trace_event_pack(msgpack::packer<msgpack::sbuffer>& pk, const TraceEvent& e) {
  pk.pack_array(uint32_t(kEventFields + 2));
  pk.pack(e.actor);
  pk.pack(e.device), pk.pack(e.stage), pk.pack(int(e.kind)), pk.pack(e.microbatch), pk.pack(e.chunk);
  pk.pack(e.iteration), pk.pack(e.start_ns), pk.pack(e.end_ns), pk.pack(e.bytes), pk.pack(e.weight_ns);
  pk.pack(e.sm_clock_mhz);
}

TraceEvent trace_event_parse(const msgpack::object& o, const std::string& what, size_t index, int version) {
  TROUPE_CHECK(o.type == msgpack::type::ARRAY && o.via.array.size >= kEventFields, what, ": event ", index, " is ",
               msgpack_type_name(o), o.type == msgpack::type::ARRAY ? str_cat(" of ", o.via.array.size) : std::string(),
               ", expected an array of ", kEventFields, " fields");
  const msgpack::object* f = o.via.array.ptr;
  TROUPE_CHECK(f[0].type == msgpack::type::STR, what, ": event ", index, ": actor is ", msgpack_type_name(f[0]),
               ", expected a string");
  static const char* names[] = {"actor", "device",    "stage",    "kind",   "microbatch",
                                "chunk", "iteration", "start_ns", "end_ns", "bytes"};
  int64_t v[kEventFields] = {};
  for (size_t i = 1; i < kEventFields; ++i) {
    const int64_t lo = i <= 5 ? INT32_MIN : INT64_MIN, hi = i <= 5 ? INT32_MAX : INT64_MAX;  // int32 fields first
    const std::optional<int64_t> x = msgpack_int_in(f[i], lo, hi);
    TROUPE_CHECK(x.has_value(), what, ": event ", index, ": ", names[i], " is ",
                 msgpack_is_int(f[i]) ? "out of range" : msgpack_type_name(f[i]), ", expected an integer in [", lo,
                 ", ", hi, "]");
    v[i] = *x;
  }
  TraceEvent e;
  e.actor = f[0].as<std::string>();
  e.device = int32_t(v[1]);
  e.stage = int32_t(v[2]);
  if (version < 3) {
    e.kind = v[3] >= 0 && v[3] < kVersion2Kinds ? EventKind(v[3]) : EventKind::other;
  } else {
    const int kinds = version == 3   ? kVersion3Kinds
                      : version == 4 ? kVersion4Kinds
                      : version == 5 ? kVersion5Kinds
                                     : kKinds;
    TROUPE_CHECK(v[3] >= 0 && v[3] < kinds, what, ": event ", index, " (", e.actor, ") has kind ", v[3],
                 ", unknown to version ", version, " traces (0 to ", kinds - 1,
                 "); replay it with the troupe that wrote it");
    e.kind = EventKind(v[3]);
  }
  e.microbatch = int32_t(v[4]);
  e.chunk = int32_t(v[5]);
  e.iteration = v[6];
  e.start_ns = v[7];
  e.end_ns = v[8];
  e.bytes = v[9];
  TROUPE_CHECK(e.end_ns >= e.start_ns, what, ": event ", index, " (", e.actor, ") ends before it starts: ", e.start_ns,
               " > ", e.end_ns, " ns");
  if (o.via.array.size > kEventFields) {
    const std::optional<int64_t> w = msgpack_int_in(f[kEventFields], 0, e.end_ns - e.start_ns);
    TROUPE_CHECK(w.has_value(), what, ": event ", index, " (", e.actor, "): weight_ns is ",
                 msgpack_is_int(f[kEventFields]) ? "out of range" : msgpack_type_name(f[kEventFields]),
                 ", expected an integer in [0, the event's duration ", e.end_ns - e.start_ns, "]");
    e.weight_ns = *w;
  }
  if (o.via.array.size > kEventFields + 1) {
    const std::optional<int64_t> mhz = msgpack_int_in(f[kEventFields + 1], 0, INT32_MAX);
    TROUPE_CHECK(mhz.has_value(), what, ": event ", index, " (", e.actor, "): sm_clock_mhz is ",
                 msgpack_is_int(f[kEventFields + 1]) ? "out of range" : msgpack_type_name(f[kEventFields + 1]),
                 ", expected an integer in [0, ", INT32_MAX, "]");
    e.sm_clock_mhz = int32_t(*mhz);
  }
  return e;
}

const char* event_kind_name(EventKind kind) {
  static const char* names[] = {
      "forward",     "backward",    "send",  "recv",           "optimizer",       "grad_reduce",
      "data",        "checkpoint",  "other", "backward_input", "backward_weight", "moe_dispatch",
      "moe_combine", "moe_overlap", "layer", "clock"};
  return names[int(kind) < kKinds ? int(kind) : int(EventKind::other)];
}

bool is_span_kind(EventKind kind) { return kind >= EventKind::moe_dispatch && kind <= EventKind::layer; }

bool is_op_kind(EventKind kind) {
  return kind == EventKind::forward || kind == EventKind::backward || kind == EventKind::backward_input ||
         kind == EventKind::backward_weight;
}

OpKind op_kind(EventKind kind) {
  switch (kind) {
    case EventKind::backward:
      return OpKind::backward;
    case EventKind::backward_input:
      return OpKind::backward_input;
    case EventKind::backward_weight:
      return OpKind::backward_weight;
    default:
      return OpKind::forward;
  }
}

EventKind event_kind(OpKind kind) {
  switch (kind) {
    case OpKind::forward:
      return EventKind::forward;
    case OpKind::backward:
      return EventKind::backward;
    case OpKind::backward_input:
      return EventKind::backward_input;
    case OpKind::backward_weight:
      return EventKind::backward_weight;
  }
  return EventKind::other;
}

std::string trace_to_msgpack(const Trace& trace) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(&buf);
  pack_header(pk, trace.header);
  for (const TraceEvent& e : trace.events) trace_event_pack(pk, e);
  return std::string(buf.data(), buf.size());
}

Trace trace_from_msgpack(std::string_view bytes, const std::string& what) {
  TROUPE_CHECK(!bytes.empty(), what, ": empty file, not a troupe trace");
  Trace trace;
  size_t offset = 0;
  {
    msgpack::object_handle oh = unpack_one(bytes, offset, what, "the header");
    trace.header = parse_header(oh.get(), what);
  }
  while (offset < bytes.size()) {
    const size_t index = trace.events.size();
    msgpack::object_handle oh = unpack_one(bytes, offset, what, str_cat("event ", index));
    trace.events.push_back(trace_event_parse(oh.get(), what, index, trace.header.version));
  }
  return trace;
}

void trace_write(const std::string& path, const Trace& trace) {
  TraceWriter out(path, trace.header);
  for (const TraceEvent& e : trace.events) out.append(e);
  out.close();
}

Trace trace_read(const std::string& path) { return trace_from_msgpack(read_file(path), "trace '" + path + "'"); }

TraceWriter::TraceWriter(const std::string& path, const TraceHeader& header) : file_(path, "trace '" + path + "'") {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(&buf);
  pack_header(pk, header);
  file_.write({buf.data(), buf.size()});
}

void TraceWriter::append(const TraceEvent& event) {
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(&buf);
  trace_event_pack(pk, event);
  file_.write({buf.data(), buf.size()});
}

Trace trace_iteration(const Trace& trace, int64_t iteration) {
  Trace out;
  out.header = trace.header;
  out.header.iteration = iteration;
  for (const TraceEvent& e : trace.events)
    if (e.iteration == iteration) out.events.push_back(e);
  return out;
}

std::vector<int64_t> trace_iterations(const Trace& trace) {
  std::set<int64_t> its;
  for (const TraceEvent& e : trace.events) its.insert(e.iteration);
  return {its.begin(), its.end()};
}

std::string trace_to_chrome_json(const Trace& trace) {
  using nlohmann::json;
  json events = json::array();
  std::map<int, std::vector<std::string>> actors;  // device -> actors in first-seen order
  std::map<std::string, int> tids;
  for (const TraceEvent& e : trace.events) {
    if (tids.count(e.actor)) continue;
    tids[e.actor] = int(tids.size()) + 1;
    actors[e.device].push_back(e.actor);
  }
  const auto& s = trace.header.shape;
  for (const auto& [device, names] : actors) {
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", device},
                      {"tid", 0},
                      {"args", {{"name", device < 0 ? std::string("host") : str_cat("device ", device)}}}});
    events.push_back(
        {{"ph", "M"}, {"name", "process_sort_index"}, {"pid", device}, {"tid", 0}, {"args", {{"sort_index", device}}}});
    for (const std::string& actor : names)
      events.push_back(
          {{"ph", "M"}, {"name", "thread_name"}, {"pid", device}, {"tid", tids[actor]}, {"args", {{"name", actor}}}});
  }
  for (const TraceEvent& e : trace.events) {
    if (e.kind == EventKind::clock) {  // a counter track per device
      events.push_back({{"ph", "C"},
                        {"name", "SM clock (MHz)"},
                        {"pid", e.device},
                        {"ts", double(e.start_ns) / 1e3},
                        {"args", {{"MHz", e.sm_clock_mhz}}}});
      continue;
    }
    std::string name = event_kind_name(e.kind);
    if (is_op_kind(e.kind))
      name = op_str({op_kind(e.kind), e.microbatch, e.chunk});
    else if (e.microbatch >= 0)
      name += str_cat(" ", e.microbatch, ".c", e.chunk);
    events.push_back({{"ph", "X"},
                      {"name", name},
                      {"cat", event_kind_name(e.kind)},
                      {"pid", e.device},
                      {"tid", tids[e.actor]},
                      {"ts", double(e.start_ns) / 1e3},
                      {"dur", double(e.end_ns - e.start_ns) / 1e3},
                      {"args",
                       {{"stage", e.stage},
                        {"microbatch", e.microbatch},
                        {"chunk", e.chunk},
                        {"iteration", e.iteration},
                        {"bytes", e.bytes},
                        {"weight_ns", e.weight_ns}}}});
  }
  json doc = {{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"schedule", schedule_name(trace.header.schedule)},
                {"stages", s.stages},
                {"chunks", s.chunks},
                {"microbatches", s.microbatches},
                {"group_size", s.group_size},
                {"num_layers", trace.header.num_layers}}}};
  return doc.dump();
}

namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Forward blues, backward (and input-gradient) greens, weight-gradient oranges; later chunks lighter.
const char* box_color(EventKind kind, int chunk) {
  static const char* forward[] = {"#3b6fb6", "#6b9bd8", "#9cbfe8", "#c5daf3"};
  static const char* backward[] = {"#3f8f3a", "#6cba5f", "#9ad48f", "#c5e8bd"};
  static const char* weight[] = {"#c07a1c", "#dd9b45", "#ecbc7c", "#f5dab3"};
  const int c = std::clamp(chunk, 0, 3);
  if (kind == EventKind::forward) return forward[c];
  if (kind == EventKind::backward || kind == EventKind::backward_input) return backward[c];
  if (kind == EventKind::backward_weight) return weight[c];
  return "#b0b0b0";
}

std::string format_time(double ns) {
  char buf[32];
  if (ns >= 1e9)
    std::snprintf(buf, sizeof(buf), "%.3g s", ns / 1e9);
  else if (ns >= 1e6)
    std::snprintf(buf, sizeof(buf), "%.3g ms", ns / 1e6);
  else if (ns >= 1e3)
    std::snprintf(buf, sizeof(buf), "%.3g us", ns / 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.3g ns", ns);
  return buf;
}

}  // namespace

std::string trace_to_svg(const Trace& trace, const std::string& title) {
  std::vector<const TraceEvent*> boxes;
  int64_t t0 = INT64_MAX, t1 = INT64_MIN;
  int rows = trace.header.shape.stages;
  for (const TraceEvent& e : trace.events) {
    if (e.stage < 0 || e.kind == EventKind::send || e.kind == EventKind::recv || e.kind == EventKind::clock ||
        is_span_kind(e.kind))
      continue;
    boxes.push_back(&e);
    t0 = std::min(t0, e.start_ns), t1 = std::max(t1, e.end_ns);
    rows = std::max(rows, e.stage + 1);
  }
  if (boxes.empty()) t0 = 0, t1 = 1;
  const double span = double(std::max<int64_t>(t1 - t0, 1));
  constexpr double kLeft = 70, kWidth = 1200, kTop = 40, kRow = 30, kBox = 24;
  const double height = kTop + rows * kRow + 30;
  auto x_of = [&](int64_t t) { return kLeft + kWidth * double(t - t0) / span; };
  std::ostringstream svg;
  svg.setf(std::ios::fixed);
  svg.precision(2);
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kLeft + kWidth + 20 << "\" height=\"" << height
      << "\" font-family=\"sans-serif\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  const auto& s = trace.header.shape;
  const std::string heading = title.empty()
                                  ? str_cat(schedule_name(trace.header.schedule), "  P=", s.stages, " V=", s.chunks,
                                            " M=", s.microbatches, "  span ", format_time(span))
                                  : title;
  svg << "<text x=\"" << kLeft << "\" y=\"22\" font-size=\"14\">" << xml_escape(heading) << "</text>\n";
  for (int r = 0; r < rows; ++r) {
    const double y = kTop + r * kRow;
    svg << "<text x=\"8\" y=\"" << y + kBox * 0.7 << "\" font-size=\"12\">stage " << r << "</text>\n";
    svg << "<line x1=\"" << kLeft << "\" y1=\"" << y + kBox + 3 << "\" x2=\"" << kLeft + kWidth << "\" y2=\""
        << y + kBox + 3 << "\" stroke=\"#e0e0e0\"/>\n";
  }
  for (const TraceEvent* e : boxes) {
    const double x = x_of(e->start_ns), w = std::max(x_of(e->end_ns) - x, 0.5), y = kTop + e->stage * kRow;
    svg << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << kBox << "\" fill=\""
        << box_color(e->kind, e->chunk) << "\" stroke=\"white\" stroke-width=\"0.5\"><title>" << e->actor << " "
        << event_kind_name(e->kind) << " mb " << e->microbatch << " chunk " << e->chunk << " "
        << format_time(double(e->end_ns - e->start_ns)) << "</title></rect>\n";
    const std::string label =
        e->microbatch >= 0 ? std::to_string(e->microbatch) : std::string(1, event_kind_name(e->kind)[0]);
    const double font = std::min(12.0, w / (0.62 * double(label.size()) + 0.2));
    if (font >= 5)
      svg << "<text x=\"" << x + w / 2 << "\" y=\"" << y + kBox / 2 + font * 0.35 << "\" font-size=\"" << font
          << "\" text-anchor=\"middle\" fill=\"" << (e->chunk >= 2 ? "black" : "white") << "\">" << label
          << "</text>\n";
  }
  // Time axis: five ticks.
  const double axis_y = kTop + rows * kRow + 4;
  for (int i = 0; i <= 4; ++i) {
    const double x = kLeft + kWidth * i / 4;
    svg << "<line x1=\"" << x << "\" y1=\"" << axis_y << "\" x2=\"" << x << "\" y2=\"" << axis_y + 5
        << "\" stroke=\"black\"/><text x=\"" << x << "\" y=\"" << axis_y + 18 << "\" font-size=\"11\" "
        << "text-anchor=\"middle\">" << format_time(span * i / 4) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  TROUPE_CHECK(out.good(), "cannot create '", path, "': ", std::strerror(errno));
  out << text;
  out.close();
  TROUPE_CHECK(out.good(), "writing '", path, "' failed: ", std::strerror(errno));
}

}  // namespace troupe::schedules
