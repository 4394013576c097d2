// The monitor's wire format: every message type survives encode -> decode field for field
// (NaN included); a hello from before `troupe serve` reads as a training run's; another schema version, an unknown
// type, a missing or mistyped field and garbage bytes are rejected with errors that say what is wrong.
#include <cctype>
#include <cmath>

#include "actors/monitor/monitor_schema.hpp"
#include "tests/test_util.hpp"

namespace troupe::actors {
namespace {

MonitorHello sample_hello() {
  MonitorHello h;
  h.run_id = "node7-4242-1700000000000";
  h.host = "node7";
  h.pid = 4242;
  h.start_unix_ms = 1700000000000;
  h.model = "gpt2-124m";
  h.num_layers = 12, h.hidden_size = 768, h.num_attention_heads = 12, h.seq_length = 1024, h.vocab_size = 50257;
  h.parameters = 124439808;
  h.tensor_parallel = 2, h.pipeline_parallel = 2, h.data_parallel = 2, h.virtual_chunks = 3;
  h.schedule = "interleaved";
  h.micro_batch_size = 4, h.global_batch_size = 512, h.train_iters = 100000, h.log_interval = 10;
  h.eval_interval = 1000, h.start_iteration = 2000;
  h.device_kind = "cuda", h.device_count = 8, h.dtype = "bf16", h.peak_tflops = 989.4;
  return h;
}

MonitorIteration sample_iteration() {
  MonitorIteration it;
  it.iteration = 2010, it.train_iters = 100000, it.consumed_samples = 1029120, it.window_iterations = 10;
  it.lm_loss = 3.2109876543210, it.learning_rate = 5.999e-4, it.grad_norm = 0.4321, it.loss_scale = 65536;
  it.skipped_iterations = 1, it.nan_iterations = 0;
  it.elapsed_ms_per_iteration = 812.25, it.tokens_per_second = 645432.1, it.tflops_per_device = 412.5;
  it.mfu = 412.5 / 989.4;
  it.memory_bytes = {71234567890, 70000000000, 0, -1};
  it.elapsed_seconds = 83.5, it.eta_seconds = 605.25;
  it.stragglers = "straggler: device 3 (stage 1, data rank 1) 2.4x the median busy time of its 3 peers";
  it.straggler_devices = {3};
  it.load_balancing_loss = 1.0123, it.z_loss = NAN;  // a run with the aux loss and no z-loss
  it.moe_layers = {1, 3}, it.expert_load_max = {412, 388}, it.expert_load_mean = {256.0, 255.875};
  return it;
}

template <class T>
void expect_same_fields(const T& a, const T& b) {
  // Walk both field lists in step (same keys, same order); doubles are equal or both NaN.
  std::vector<std::string> keys_b;
  std::vector<const void*> values_b;
  monitor_fields(b, [&](const char* key, const auto& vb) {
    keys_b.push_back(key);
    values_b.push_back(&vb);
  });
  size_t i = 0;
  monitor_fields(a, [&](const char* key, const auto& va) {
    ASSERT_LT(i, keys_b.size());
    ASSERT_EQ(keys_b[i], key);
    using V = std::decay_t<decltype(va)>;
    const V& vb = *static_cast<const V*>(values_b[i++]);
    if constexpr (std::is_same_v<V, double>) {
      if (std::isnan(va))
        EXPECT_TRUE(std::isnan(vb)) << key;
      else
        EXPECT_EQ(va, vb) << key;
    } else {
      EXPECT_EQ(va, vb) << key;
    }
  });
  EXPECT_EQ(i, keys_b.size());
}

template <class T>
void expect_round_trip(const T& body, uint64_t seq, bool repeat) {
  const MonitorMessage sent{.seq = seq, .repeat = repeat, .unix_ms = 1700000001234, .body = body};
  const MonitorMessage got = monitor_decode(monitor_encode(sent));
  EXPECT_EQ(got.seq, seq);
  EXPECT_EQ(got.repeat, repeat);
  EXPECT_EQ(got.unix_ms, 1700000001234);
  ASSERT_TRUE(std::holds_alternative<T>(got.body)) << "decoded as " << monitor_type_name(got.body);
  expect_same_fields(body, std::get<T>(got.body));
}

MonitorTrace sample_trace() {
  MonitorTrace t{.iteration = 2011,
                 .schedule = "interleaved",
                 .stages = 4,
                 .chunks = 2,
                 .microbatches = 8,
                 .group_size = 4,
                 .num_layers = 16,
                 .chunk_layers = {1, 2, 2, 2, 2, 2, 2, 3},
                 .dropped_events = 12,
                 .events = {}};
  schedules::TraceEvent f{.actor = "stage3",
                          .device = 3,
                          .stage = 3,
                          .kind = schedules::EventKind::backward,
                          .microbatch = 7,
                          .chunk = 1,
                          .iteration = 2011,
                          .start_ns = 123456789012,
                          .end_ns = 123456799012,
                          .bytes = 0};
  schedules::TraceEvent data{
      .actor = "data_loader", .kind = schedules::EventKind::data, .iteration = 2011, .start_ns = 5, .end_ns = 6};
  schedules::TraceEvent recv = f;
  recv.actor = "stage3.recv", recv.kind = schedules::EventKind::recv, recv.bytes = 1 << 20;
  t.events = {f, data, recv};
  return t;
}

MonitorStages sample_stages() {
  return {.iteration = 2011,
          .start_ns = 1000,
          .end_ns = 1100,
          .busy_ns = {60, 50},
          .communication_ns = {5, 10},
          .data_ns = {3, 3},
          .checkpoint_ns = {0, 0},
          .optimizer_ns = {2, 2},
          .idle_ns = {30, 35}};
}

MonitorServing sample_serving() {
  MonitorServing s;
  s.interval_s = 0.5, s.replicas = 2, s.queue_length = 3, s.batch_size = 17, s.kv_blocks_used = 301;
  s.kv_blocks_total = 4096, s.requests = 1234, s.failed_requests = 5, s.prompt_tokens = 45678;
  s.generated_tokens = 98765, s.engine_steps = 55555, s.rate_window_s = 10.25, s.requests_per_second = 12.5;
  s.tokens_per_second = 987.25, s.latency_window_s = 60, s.latency_samples = 700, s.ttft_p50_s = 0.0123;
  s.ttft_p99_s = 0.25, s.tpot_p50_s = NAN, s.tpot_p99_s = NAN, s.ttft_sum_s = 15.5, s.ttft_count = 1229;
  s.tpot_sum_s = 9.75, s.tpot_count = 1100;
  return s;
}

TEST(MonitorSchema, EveryTypeRoundTrips) {
  expect_round_trip(sample_hello(), 1, false);
  expect_round_trip(sample_iteration(), 2, true);
  expect_round_trip(MonitorValidation{.iteration = 2000, .lm_loss = 3.25, .ppl = std::exp(3.25)}, 3, false);
  expect_round_trip(MonitorEnd{.iteration = 2013, .reason = "stopped", .detail = "stopped by signal 15"}, 4, false);
  expect_round_trip(sample_trace(), 5, false);
  expect_round_trip(MonitorTrace{}, 6, true);  // no events
  expect_round_trip(sample_stages(), 7, false);
  expect_round_trip(sample_serving(), 8, false);
  MonitorHello serve = sample_hello();
  serve.kind = "serve", serve.replicas = 4;
  expect_round_trip(serve, 9, true);
}

TEST(MonitorSchema, ATraceEventIsTheTraceFilesArray) {
  // The events travel as the trace file's 10-field arrays: a bad one is named like the file's.
  const std::string bytes = monitor_encode({.seq = 1, .body = sample_trace()});
  // The second event: actor "data_loader" (fixstr of 11: 0xab), device -1, stage -1, then its
  // kind 6 (0x06) made nil (0xc0).
  const std::string good = std::string(
      "\xab"
      "data_loader\xff\xff\x06",
      15);
  const std::string bad = std::string(
      "\xab"
      "data_loader\xff\xff\xc0",
      15);
  std::string patched_bytes = bytes;
  const size_t at = patched_bytes.find(good);
  ASSERT_NE(at, std::string::npos);
  patched_bytes.replace(at, good.size(), bad);
  std::string err;
  try {
    monitor_decode(patched_bytes);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("monitor message \"trace\": event 1: kind is nil, expected an integer"), std::string::npos) << err;
}

TEST(MonitorSchema, NaNAndEmptyValuesRoundTrip) {
  MonitorIteration it = sample_iteration();
  it.lm_loss = NAN;  // every iteration of the window was skipped
  it.grad_norm = NAN;
  it.mfu = NAN;             // no peak known
  it.memory_bytes.clear();  // CPU devices
  expect_round_trip(it, 18446744073709551615ull, false);
  MonitorHello h;  // all defaults, empty strings
  expect_round_trip(h, 0, false);
}

TEST(MonitorSchema, TypeNames) {
  EXPECT_STREQ(monitor_type_name(MonitorHello{}), "hello");
  EXPECT_STREQ(monitor_type_name(MonitorIteration{}), "iteration");
  EXPECT_STREQ(monitor_type_name(MonitorValidation{}), "validation");
  EXPECT_STREQ(monitor_type_name(MonitorEnd{}), "end");
  EXPECT_STREQ(monitor_type_name(MonitorTrace{}), "trace");
  EXPECT_STREQ(monitor_type_name(MonitorStages{}), "stages");
  EXPECT_STREQ(monitor_type_name(MonitorServing{}), "serving");
}

// Replaces the first occurrence of `from` in `bytes` (which must be there) by `to`.
std::string patched(std::string bytes, const std::string& from, const std::string& to) {
  const size_t at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << "pattern not in the encoding";
  if (at != std::string::npos) bytes.replace(at, from.size(), to);
  return bytes;
}

std::string decode_error(const std::string& bytes) {
  try {
    monitor_decode(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MonitorSchema, AnotherVersionIsRejectedNamingBoth) {
  const std::string bytes = monitor_encode({.seq = 1, .body = MonitorEnd{}});
  // msgpack: "version" is a fixstr of 7 bytes (0xa7), its value 1 a positive fixint.
  const std::string v2 = patched(bytes, std::string("\xa7version\x01", 9), std::string("\xa7version\x02", 9));
  const std::string err = decode_error(v2);
  EXPECT_NE(err.find("schema version 2 is not supported"), std::string::npos) << err;
  EXPECT_NE(err.find("reads version 1"), std::string::npos) << err;
}

TEST(MonitorSchema, UnknownTypeMissingAndMistypedFieldsAreNamed) {
  const std::string end =
      monitor_encode({.seq = 1, .body = MonitorEnd{.iteration = 5, .reason = "completed", .detail = ""}});
  // "end" -> "eNd": same length, a type version 1 does not have.
  EXPECT_THROW(monitor_decode(patched(end,
                                      std::string("\xa3"
                                                  "end",
                                                  4),
                                      std::string("\xa3"
                                                  "eNd",
                                                  4))),
               UnknownMonitorType);
  std::string err = decode_error(patched(end,
                                         std::string("\xa3"
                                                     "end",
                                                     4),
                                         std::string("\xa3"
                                                     "eNd",
                                                     4)));
  EXPECT_NE(err.find("unknown monitor message type \"eNd\""), std::string::npos) << err;
  // "reason" -> "reasoN": the field is missing (and the unknown key is ignored).
  err = decode_error(patched(end, std::string("\xa6reason", 7), std::string("\xa6reasoN", 7)));
  EXPECT_NE(err.find("\"end\" lacks the field \"reason\""), std::string::npos) << err;
  // iteration 7 (positive fixint 0x07) -> true (0xc3): a boolean where an integer belongs.
  const std::string it =
      monitor_encode({.seq = 1, .body = MonitorValidation{.iteration = 7, .lm_loss = 1, .ppl = 2.7}});
  err = decode_error(patched(it, std::string("\xa9iteration\x07", 11), std::string("\xa9iteration\xc3", 11)));
  EXPECT_NE(err.find("\"validation\": \"iteration\" is a boolean, expected an integer"), std::string::npos) << err;
}

TEST(MonitorSchema, AHelloFromBeforeServeReadsAsTraining) {
  // A writer from before `troupe serve` sends neither "kind" nor "replicas" (renamed here, so
  // the reader sees only keys it does not know): the run is a training run.
  MonitorHello h = sample_hello();
  h.kind = "serve", h.replicas = 3;
  std::string bytes = monitor_encode({.seq = 1, .body = h});
  bytes = patched(bytes, std::string("\xa4kind", 5), std::string("\xa4kinD", 5));
  bytes = patched(bytes, std::string("\xa8replicas", 9), std::string("\xa8replicaS", 9));
  const MonitorMessage m = monitor_decode(bytes);
  ASSERT_TRUE(std::holds_alternative<MonitorHello>(m.body));
  EXPECT_EQ(std::get<MonitorHello>(m.body).kind, "train");
  EXPECT_EQ(std::get<MonitorHello>(m.body).replicas, 0);
  EXPECT_EQ(std::get<MonitorHello>(m.body).run_id, h.run_id);
  // A serving record without one of its fields is still an error naming it.
  const std::string serving = monitor_encode({.seq = 2, .body = sample_serving()});
  const std::string err =
      decode_error(patched(serving, std::string("\xacqueue_length", 13), std::string("\xacqueue_lengtH", 13)));
  EXPECT_NE(err.find("\"serving\" lacks the field \"queue_length\""), std::string::npos) << err;
}

TEST(MonitorSchema, AnIterationFromBeforeTheStragglerReportHasNone) {
  // A writer from before the straggler report sends none of its four fields (renamed here).
  const auto key = [](const std::string& k) { return std::string(1, char(0xa0 | k.size())) + k; };  // a fixstr
  std::string bytes = monitor_encode({.seq = 1, .body = sample_iteration()});
  for (const std::string k : {"elapsed_seconds", "eta_seconds", "stragglers", "straggler_devices"})
    bytes = patched(bytes, key(k), key(k.substr(0, k.size() - 1) + char(std::toupper(k.back()))));
  const MonitorMessage m = monitor_decode(bytes);
  ASSERT_TRUE(std::holds_alternative<MonitorIteration>(m.body));
  const MonitorIteration& it = std::get<MonitorIteration>(m.body);
  EXPECT_TRUE(std::isnan(it.elapsed_seconds));
  EXPECT_TRUE(std::isnan(it.eta_seconds));
  EXPECT_EQ(it.stragglers, "");
  EXPECT_TRUE(it.straggler_devices.empty());
  EXPECT_EQ(it.iteration, 2010);
  EXPECT_EQ(it.memory_bytes, sample_iteration().memory_bytes);
}

TEST(MonitorSchema, AnIterationFromBeforeMixtureOfExpertsHasNoRouter) {
  // A writer from before MoE models sends none of the five router fields (renamed here).
  const auto key = [](const std::string& k) { return std::string(1, char(0xa0 | k.size())) + k; };  // a fixstr
  std::string bytes = monitor_encode({.seq = 1, .body = sample_iteration()});
  for (const std::string k : {"load_balancing_loss", "z_loss", "moe_layers", "expert_load_max", "expert_load_mean"})
    bytes = patched(bytes, key(k), key(k.substr(0, k.size() - 1) + char(std::toupper(k.back()))));
  const MonitorIteration it = std::get<MonitorIteration>(monitor_decode(bytes).body);
  EXPECT_TRUE(std::isnan(it.load_balancing_loss));
  EXPECT_TRUE(std::isnan(it.z_loss));
  EXPECT_TRUE(it.moe_layers.empty() && it.expert_load_max.empty() && it.expert_load_mean.empty());
  EXPECT_EQ(it.stragglers, sample_iteration().stragglers);
}

TEST(MonitorSchema, AMistypedExpertLoadIsNamed) {
  const std::string bytes = monitor_encode({.seq = 1, .body = sample_iteration()});
  // expert_load_mean's second value, 255.875 (float64: 0xcb 406FFC0000000000), made a string of
  // the same 9 bytes (fixstr of 8: 0xa8).
  const std::string value("\xcb\x40\x6f\xfc\x00\x00\x00\x00\x00", 9);
  const std::string err = decode_error(patched(bytes, value,
                                               "\xa8"
                                               "abcdefgh"));
  EXPECT_NE(err.find("\"expert_load_mean\"[1] is"), std::string::npos) << err;
}

TEST(MonitorSchema, ATraceFromBeforeUnevenSplitsIsEven) {
  // A writer from before uneven pipeline splits sends no "chunk_layers" (renamed here).
  std::string bytes = monitor_encode({.seq = 1, .body = sample_trace()});
  bytes = patched(bytes,
                  std::string("\xac"
                              "chunk_layers",
                              13),
                  std::string("\xac"
                              "chunk_layerS",
                              13));
  const MonitorMessage m = monitor_decode(bytes);
  ASSERT_TRUE(std::holds_alternative<MonitorTrace>(m.body));
  const MonitorTrace& t = std::get<MonitorTrace>(m.body);
  EXPECT_TRUE(t.chunk_layers.empty());
  EXPECT_EQ(t.num_layers, 16);
  EXPECT_EQ(t.dropped_events, 12);
}

TEST(MonitorSchema, GarbageIsMalformed) {
  EXPECT_NE(decode_error("").find("malformed monitor message"), std::string::npos);
  EXPECT_NE(decode_error("\x93\x01\x02\x03").find("expected a map"), std::string::npos);
  const std::string bytes = monitor_encode({.seq = 1, .body = MonitorEnd{}});
  EXPECT_NE(decode_error(bytes.substr(0, bytes.size() - 3)).find("malformed monitor message"), std::string::npos);
  EXPECT_NE(decode_error(bytes + "x").find("1 bytes after the msgpack map"), std::string::npos);
}

}  // namespace
}  // namespace troupe::actors
