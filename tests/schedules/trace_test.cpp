// Trace files: msgpack round trips, streaming writes, clear errors on damaged files, and the
// Chrome-trace JSON and SVG exports.
#include <gtest/gtest.h>
#include <msgpack.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "base/check.hpp"
#include "schedules/simulator.hpp"
#include "schedules/trace.hpp"

namespace troupe::schedules {
namespace {

Trace sample_trace() {
  Trace t;
  t.header.schedule = Schedule::interleaved_1f1b;
  t.header.shape = {.stages = 2, .chunks = 2, .microbatches = 4, .group_size = 2};
  t.header.num_layers = 8;
  t.header.iteration = 41;
  t.header.process = 1;
  t.header.processes = 2;
  t.header.clock_offset_ns = -1'234'567'890'123;  // process 0 started its clock 20 minutes earlier
  t.header.clock_rtt_ns = 40'000;
  t.header.chunk_layers = {1, 3, 3, 1};
  t.events.push_back({.actor = "stage0",
                      .device = 0,
                      .stage = 0,
                      .kind = EventKind::forward,
                      .microbatch = 3,
                      .chunk = 1,
                      .iteration = 41,
                      .start_ns = 1'000'000'000'123,
                      .end_ns = 1'000'000'900'000});
  t.events.push_back({.actor = "stage1",
                      .device = 1,
                      .stage = 1,
                      .kind = EventKind::send,
                      .microbatch = 0,
                      .chunk = 0,
                      .iteration = 42,
                      .start_ns = 5,
                      .end_ns = 7,
                      .bytes = int64_t(3) << 33});
  t.events.push_back({.actor = "optimizer \"main\" <é>",
                      .device = -1,
                      .stage = -1,
                      .kind = EventKind::optimizer,
                      .microbatch = -1,
                      .chunk = 0,
                      .iteration = 42,
                      .start_ns = 10,
                      .end_ns = 20});
  return t;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("troupe_trace_test_" + name)).string();
}

std::string error_of(std::string_view bytes) {
  try {
    trace_from_msgpack(bytes, "t");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Trace, MsgpackRoundTrip) {
  const Trace t = sample_trace();
  const Trace back = trace_from_msgpack(trace_to_msgpack(t));
  EXPECT_EQ(back.header, t.header);
  EXPECT_EQ(back.events, t.events);
}

TEST(Trace, FileRoundTripAndStreamingWriter) {
  const Trace t = sample_trace();
  const std::string a = temp_path("a.trace"), b = temp_path("b.trace");
  trace_write(a, t);
  {
    TraceWriter w(b, t.header);
    w.append(t.events[0]);
    w.flush();
    EXPECT_EQ(trace_read(b).events.size(), 1u);  // valid after every append
    w.append(t.events[1]);
    w.append(t.events[2]);
  }  // the destructor closes
  const Trace ra = trace_read(a), rb = trace_read(b);
  EXPECT_EQ(ra.events, t.events);
  EXPECT_EQ(rb.events, t.events);
  EXPECT_EQ(rb.header, t.header);
  std::filesystem::remove(a);
  std::filesystem::remove(b);
  EXPECT_THROW(trace_read(temp_path("missing.trace")), Error);
}

TEST(Trace, LayoutIsTheDocumentedOne) {
  // Header map, then one 12-element array per event (the 11th, weight_ns, and the 12th,
  // sm_clock_mhz, optional to readers).
  const std::string bytes = trace_to_msgpack(sample_trace());
  size_t offset = 0;
  msgpack::object_handle header = msgpack::unpack(bytes.data(), bytes.size(), offset);
  std::map<std::string, msgpack::object> h;
  header.get().convert(h);
  EXPECT_EQ(h.at("format").as<std::string>(), "troupe-trace");
  EXPECT_EQ(h.at("version").as<int>(), 6);
  EXPECT_EQ(h.at("schedule").as<std::string>(), "interleaved");
  EXPECT_EQ(h.at("stages").as<int>(), 2);
  EXPECT_EQ(h.at("chunks").as<int>(), 2);
  EXPECT_EQ(h.at("microbatches").as<int>(), 4);
  EXPECT_EQ(h.at("group_size").as<int>(), 2);
  EXPECT_EQ(h.at("num_layers").as<int>(), 8);
  EXPECT_EQ(h.at("iteration").as<int>(), 41);
  EXPECT_EQ(h.at("process").as<int>(), 1);
  EXPECT_EQ(h.at("processes").as<int>(), 2);
  EXPECT_EQ(h.at("clock_offset_ns").as<int64_t>(), -1'234'567'890'123);
  EXPECT_EQ(h.at("clock_rtt_ns").as<int64_t>(), 40'000);
  EXPECT_EQ(h.at("chunk_layers").as<std::vector<int>>(), (std::vector<int>{1, 3, 3, 1}));
  msgpack::object_handle ev = msgpack::unpack(bytes.data(), bytes.size(), offset);
  std::tuple<std::string, int, int, int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int> f;
  ev.get().convert(f);
  EXPECT_EQ(f, std::make_tuple(std::string("stage0"), 0, 0, 0, 3, 1, int64_t(41), int64_t(1'000'000'000'123),
                               int64_t(1'000'000'900'000), int64_t(0), int64_t(0), 0));
}

// A fused backward's weight-gradient time (weight_ns) is the 11th field, and survives a round trip.
TEST(Trace, WeightGradientTimeRoundTrips) {
  Trace t = sample_trace();
  t.events.push_back({.actor = "stage0",
                      .device = 0,
                      .stage = 0,
                      .kind = EventKind::backward,
                      .microbatch = 3,
                      .chunk = 1,
                      .iteration = 41,
                      .start_ns = 2'000'000,
                      .end_ns = 4'000'000,
                      .weight_ns = 700'000});
  const std::string bytes = trace_to_msgpack(t);
  EXPECT_EQ(trace_from_msgpack(bytes).events, t.events);
  size_t offset = 0;
  for (size_t i = 0; i < t.events.size(); ++i) msgpack::unpack(bytes.data(), bytes.size(), offset);  // header, 3 events
  msgpack::object_handle ev = msgpack::unpack(bytes.data(), bytes.size(), offset);
  std::tuple<std::string, int, int, int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t> f;
  ev.get().convert(f);
  EXPECT_EQ(std::get<3>(f), int(EventKind::backward));
  EXPECT_EQ(std::get<10>(f), 700'000);
}

TEST(Trace, TruncatedFileGivesAClearError) {
  const std::string bytes = trace_to_msgpack(sample_trace());
  // Every cut that is not on a record boundary reports truncation.
  const size_t header_end = [&] {
    size_t off = 0;
    msgpack::unpack(bytes.data(), bytes.size(), off);
    return off;
  }();
  for (size_t n = 1; n < bytes.size(); ++n) {
    const std::string e = error_of(std::string_view(bytes).substr(0, n));
    if (n == header_end) continue;  // a header alone is a valid, empty trace
    if (e.empty()) {                // a cut on an event boundary is a valid shorter trace
      EXPECT_LT(trace_from_msgpack(std::string_view(bytes).substr(0, n)).events.size(), 3u);
      continue;
    }
    EXPECT_NE(e.find("truncated"), std::string::npos) << n << ": " << e;
  }
  EXPECT_NE(error_of(bytes.substr(0, bytes.size() - 3)).find("truncated in event 2"), std::string::npos);
  EXPECT_NE(error_of("").find("empty file"), std::string::npos);
}

TEST(Trace, MalformedFilesGiveClearErrors) {
  EXPECT_NE(error_of("hello, world").find("not a troupe trace"), std::string::npos);
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(&buf);
  std::map<std::string, std::string> not_ours{{"format", "chrome"}};
  pk.pack(not_ours);
  EXPECT_NE(error_of({buf.data(), buf.size()}).find("not a troupe trace"), std::string::npos);

  auto header = [](int version, bool with_stages) {
    msgpack::sbuffer b;
    msgpack::packer<msgpack::sbuffer> p(&b);
    p.pack_map(with_stages ? 6 : 5);
    p.pack(std::string("format")), p.pack(std::string("troupe-trace"));
    p.pack(std::string("version")), p.pack(version);
    p.pack(std::string("schedule")), p.pack(std::string("1f1b"));
    if (with_stages) p.pack(std::string("stages")), p.pack(2);
    p.pack(std::string("chunks")), p.pack(1);
    p.pack(std::string("microbatches")), p.pack(4);
    return std::string(b.data(), b.size());
  };
  // Version 1 (no process or clock keys) still reads, as one process; a version after 6 is refused.
  EXPECT_EQ(error_of(header(1, true)), "");
  const Trace v1 = trace_from_msgpack(header(1, true));
  EXPECT_EQ(v1.header.version, 1);
  EXPECT_EQ(v1.header.processes, 1);
  EXPECT_EQ(v1.header.clock_offset_ns, 0);
  EXPECT_NE(error_of(header(kTraceFormatVersion + 1, true))
                .find(str_cat("version ", kTraceFormatVersion + 1, " is not supported")),
            std::string::npos);
  EXPECT_NE(error_of(header(2, true)).find("lacks \"processes\""), std::string::npos);
  EXPECT_NE(error_of(header(1, false)).find("lacks \"stages\""), std::string::npos);
  // Integers msgpack cannot convert (it throws a bare std::bad_cast) are named.
  {
    msgpack::sbuffer b;
    msgpack::packer<msgpack::sbuffer> p(&b);
    p.pack_map(2);
    p.pack(std::string("format")), p.pack(std::string("troupe-trace"));
    p.pack(std::string("version")), p.pack(uint64_t(1) << 63);
    const std::string what = error_of({b.data(), b.size()});
    EXPECT_NE(what.find("header \"version\" is out of range"), std::string::npos) << what;
  }
  {
    msgpack::sbuffer big;
    msgpack::packer<msgpack::sbuffer> pb(&big);
    pb.pack(std::make_tuple(std::string("stage0"), 0, int64_t(1) << 40, 0, 0, 0, 0, 0, 10, 0));
    const std::string what = error_of(header(1, true) + std::string(big.data(), big.size()));
    EXPECT_NE(what.find("event 0: stage is out of range"), std::string::npos) << what;
  }

  // An event with a string where an integer belongs, and one with too few fields.
  msgpack::sbuffer ev;
  msgpack::packer<msgpack::sbuffer> pe(&ev);
  pe.pack(std::make_tuple(std::string("stage0"), 0, 0, 0, std::string("three"), 0, 0, 0, 10, 0));
  EXPECT_NE(error_of(header(1, true) + std::string(ev.data(), ev.size())).find("event 0: microbatch is a string"),
            std::string::npos);
  msgpack::sbuffer shortev;
  msgpack::packer<msgpack::sbuffer> ps(&shortev);
  ps.pack(std::make_tuple(std::string("stage0"), 0, 0));
  EXPECT_NE(error_of(header(1, true) + std::string(shortev.data(), shortev.size())).find("array of 10 fields"),
            std::string::npos);
  // weight_ns: absent (a 10-field event, as earlier troupes wrote) reads as 0 (not measured); more
  // than the event's duration is refused.
  msgpack::sbuffer ten;
  msgpack::packer<msgpack::sbuffer> pt(&ten);
  pt.pack(std::make_tuple(std::string("stage0"), 0, 0, 1, 0, 0, 0, 0, 10, 0));
  EXPECT_EQ(trace_from_msgpack(header(1, true) + std::string(ten.data(), ten.size())).events.at(0).weight_ns, 0);
  msgpack::sbuffer over;
  msgpack::packer<msgpack::sbuffer> po(&over);
  po.pack(std::make_tuple(std::string("stage0"), 0, 0, 1, 0, 0, 0, 0, 10, 0, 11));
  EXPECT_NE(error_of(header(1, true) + std::string(over.data(), over.size())).find("weight_ns is out of range"),
            std::string::npos)
      << error_of(header(1, true) + std::string(over.data(), over.size()));
  // A corrupt length must not allocate gigabytes: array32 header claiming 4e9 elements.
  const std::string huge = header(1, true) + std::string("\xdd\xff\xff\xff\xff", 5);
  EXPECT_NE(error_of(huge).find("event 0"), std::string::npos) << error_of(huge);
}

TEST(Trace, Iterations) {
  const Trace t = sample_trace();
  EXPECT_EQ(trace_iterations(t), (std::vector<int64_t>{41, 42}));
  EXPECT_EQ(trace_iteration(t, 42).events.size(), 2u);
  EXPECT_EQ(trace_iteration(t, 42).header.iteration, 42);
}

TEST(Trace, ChromeJson) {
  const Trace t = sample_trace();
  const nlohmann::json doc = nlohmann::json::parse(trace_to_chrome_json(t));
  std::map<int, std::string> processes;
  std::map<std::pair<int, int>, std::string> threads;
  std::vector<nlohmann::json> complete;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "process_name") processes[e.at("pid")] = e.at("args").at("name");
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      threads[{e.at("pid"), e.at("tid")}] = e.at("args").at("name");
    if (e.at("ph") == "X") complete.push_back(e);
  }
  EXPECT_EQ(processes, (std::map<int, std::string>{{-1, "host"}, {0, "device 0"}, {1, "device 1"}}));
  EXPECT_EQ(threads.size(), 3u);
  ASSERT_EQ(complete.size(), 3u);
  EXPECT_EQ(complete[0].at("name"), "F3.c1");
  EXPECT_EQ(complete[0].at("pid"), 0);
  EXPECT_EQ(threads.at({0, complete[0].at("tid")}), "stage0");
  EXPECT_DOUBLE_EQ(complete[0].at("ts").get<double>(), 1'000'000'000.123);  // microseconds
  EXPECT_DOUBLE_EQ(complete[0].at("dur").get<double>(), 899.877);
  EXPECT_EQ(complete[1].at("args").at("bytes"), int64_t(3) << 33);
  EXPECT_EQ(threads.at({-1, complete[2].at("tid")}), "optimizer \"main\" <é>");
  EXPECT_EQ(doc.at("otherData").at("schedule"), "interleaved");
}

TEST(Trace, SvgTimeline) {
  const PipelineShape shape{.stages = 3, .chunks = 2, .microbatches = 3};
  const Simulation sim = simulate(Schedule::interleaved_1f1b, shape, OpDurations::uniform(shape, 100, 200));
  const std::string svg = trace_to_svg(sim.trace, "a <title> & more");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("a &lt;title&gt; &amp; more"), std::string::npos);
  size_t rects = 0, labels = 0;
  for (size_t p = svg.find("<rect x="); p != std::string::npos; p = svg.find("<rect x=", p + 1)) ++rects;
  for (size_t p = svg.find("text-anchor=\"middle\" fill="); p != std::string::npos;
       p = svg.find("text-anchor=\"middle\" fill=", p + 1))
    ++labels;
  EXPECT_EQ(rects, sim.trace.events.size());
  EXPECT_EQ(labels, sim.trace.events.size());         // 18 boxes of >= 30 px: every microbatch number fits
  EXPECT_NE(svg.find("#3b6fb6"), std::string::npos);  // forward, chunk 0
  EXPECT_NE(svg.find("#6cba5f"), std::string::npos);  // backward, chunk 1
  EXPECT_NE(svg.find(">stage 2<"), std::string::npos);
}

}  // namespace
}  // namespace troupe::schedules
