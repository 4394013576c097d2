// The TensorBoard event files of --tensorboard-dir: CRC-32C against published check values,
// and files written by the writer decoded back here with a decoder of their own (TFRecord
// framing with both masked CRCs, then the Event / Summary / Value protobuf fields by number and
// wire type), so a slip in the framing, a CRC, a field number or a wire type fails. Then
// `troupe train --tensorboard-dir` end to end: Megatron's tags, the loss the log printed.
#include "apps/train/tensorboard_writer.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <regex>

#include "apps/train/train_tensorboard.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::apps {
namespace {

TEST(Crc32c, KnownVectors) {
  // The CRC catalogue's check value, and RFC 3720 (iSCSI) appendix B.4.
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) up += char(i), down += char(31 - i);
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
  // Masking: rotate right 15, add 0xa282ead8 (TensorFlow's crc32c::Mask).
  EXPECT_EQ(masked_crc32c("123456789"), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u);
}

// A protobuf message's fields: number -> (wire type, raw value bytes or varint).
struct Field {
  int number = 0, wire_type = 0;
  uint64_t varint = 0;
  std::string bytes;  // length-delimited content, or the fixed32/fixed64 bytes
};

std::vector<Field> decode_message(std::string_view data) {
  std::vector<Field> fields;
  size_t at = 0;
  auto varint = [&] {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (at >= data.size() || shift > 63) throw Error("truncated varint");
      const uint8_t b = uint8_t(data[at++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  auto take = [&](size_t n) {
    if (at + n > data.size()) throw Error("truncated field");
    std::string s(data.substr(at, n));
    at += n;
    return s;
  };
  while (at < data.size()) {
    const uint64_t key = varint();
    Field f{int(key >> 3), int(key & 7), 0, ""};
    if (f.wire_type == 0)
      f.varint = varint();
    else if (f.wire_type == 1)
      f.bytes = take(8);
    else if (f.wire_type == 5)
      f.bytes = take(4);
    else if (f.wire_type == 2)
      f.bytes = take(size_t(varint()));
    else
      throw Error(str_cat("wire type ", f.wire_type));
    fields.push_back(f);
  }
  return fields;
}

template <class T>
T fixed(const std::string& bytes) {
  T v;
  EXPECT_EQ(bytes.size(), sizeof(T));
  std::memcpy(&v, bytes.data(), sizeof(T));
  return v;
}

struct Event {
  double wall_time = 0;
  int64_t step = -1;
  std::string file_version, tag;
  float value = NAN;
};

// Reads every TFRecord of the file, checking both masked CRCs, and decodes its Event.
std::vector<Event> read_events(const std::string& path) {
  const std::string file = test::read_file(path);
  std::vector<Event> events;
  size_t at = 0;
  while (at < file.size()) {
    if (at + 12 > file.size()) throw Error("truncated record header");
    const std::string length_bytes = file.substr(at, 8);
    const uint64_t length = fixed<uint64_t>(length_bytes);
    EXPECT_EQ(fixed<uint32_t>(file.substr(at + 8, 4)), masked_crc32c(length_bytes)) << "length CRC at " << at;
    if (at + 12 + length + 4 > file.size()) throw Error("truncated record");
    const std::string data = file.substr(at + 12, length);
    EXPECT_EQ(fixed<uint32_t>(file.substr(at + 12 + length, 4)), masked_crc32c(data)) << "data CRC at " << at;
    at += 12 + length + 4;
    Event e;
    for (const Field& f : decode_message(data)) {
      if (f.number == 1 && f.wire_type == 1)
        e.wall_time = fixed<double>(f.bytes);
      else if (f.number == 2 && f.wire_type == 0)
        e.step = int64_t(f.varint);
      else if (f.number == 3 && f.wire_type == 2)
        e.file_version = f.bytes;
      else if (f.number == 5 && f.wire_type == 2) {
        const std::vector<Field> summary = decode_message(f.bytes);
        EXPECT_EQ(summary.size(), 1u);
        EXPECT_EQ(summary.at(0).number, 1);  // Summary.value
        EXPECT_EQ(summary.at(0).wire_type, 2);
        for (const Field& v : decode_message(summary.at(0).bytes)) {
          if (v.number == 1 && v.wire_type == 2)
            e.tag = v.bytes;
          else if (v.number == 2 && v.wire_type == 5)
            e.value = fixed<float>(v.bytes);
          else
            ADD_FAILURE() << "unexpected Value field " << v.number << " wire type " << v.wire_type;
        }
      } else {
        ADD_FAILURE() << "unexpected Event field " << f.number << " wire type " << f.wire_type;
      }
    }
    events.push_back(e);
  }
  return events;
}

double unix_now() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

TEST(TensorBoardWriter, FileDecodesBackToTheScalars) {
  test::TempDir dir("tensorboard");
  std::string path;
  {
    TensorBoardWriter tb(dir / "run1");
    path = tb.path();
    tb.add_scalar("lm loss", 3.25, 10);
    tb.add_scalar("learning-rate", 6e-4, 10);
    tb.add_scalar("lm loss", 3.0, 1234567890123);  // a step that needs a long varint
    tb.close();
  }
  char host[256] = {};
  TROUPE_SYSCALL(gethostname(host, sizeof(host) - 1), "gethostname");
  const std::string name = std::filesystem::path(path).filename().string();
  EXPECT_TRUE(std::regex_match(name, std::regex("events\\.out\\.tfevents\\.[0-9]{10}\\." + std::string(host)))) << name;
  const std::vector<Event> events = read_events(path);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_TRUE(events[0].tag.empty());
  EXPECT_EQ(events[1].tag, "lm loss");
  EXPECT_EQ(events[1].value, 3.25f);
  EXPECT_EQ(events[1].step, 10);
  EXPECT_EQ(events[2].tag, "learning-rate");
  EXPECT_EQ(events[2].value, 6e-4f);
  EXPECT_EQ(events[3].step, 1234567890123);
  for (const Event& e : events) EXPECT_NEAR(e.wall_time, unix_now(), 60);
}

TEST(TensorBoardWriter, AFlippedByteFailsTheCrc) {
  // The reader above must notice corruption, or it would pass a broken writer.
  const std::string frame = tfrecord_frame(tensorboard_scalar_event(1.5, 7, "grad-norm", 0.5f));
  std::string broken = frame;
  broken[14] ^= 0x01;  // inside the data
  EXPECT_NE(fixed<uint32_t>(broken.substr(broken.size() - 4)), masked_crc32c(broken.substr(12, broken.size() - 16)));
  EXPECT_EQ(fixed<uint32_t>(frame.substr(frame.size() - 4)), masked_crc32c(frame.substr(12, frame.size() - 16)));
}

TEST(TrainTensorBoard, MegatronsTagNames) {
  test::TempDir dir("tensorboard_train");
  {
    TrainTensorBoard tb(dir / "tb");
    IterationStats s{.iteration = 3, .loss = 7.5, .grad_norm = 1.25, .lr = 1e-4, .loss_scale = 1.0f};
    tb.iteration(s, 96, 32);
    s.skipped = true;  // no loss or grad norm for a skipped iteration
    s.iteration = 4;
    tb.iteration(s, 128, 32);
    tb.validation(4, 2.0, 128);
  }
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "tb")) found.push_back(entry.path().string());
  ASSERT_EQ(found.size(), 1u);
  std::vector<std::string> tags;
  std::vector<Event> events = read_events(found[0]);
  for (const Event& e : events) tags.push_back(e.tag);
  const std::vector<std::string> want = {"",
                                         "learning-rate",
                                         "learning-rate vs samples",
                                         "batch-size",
                                         "batch-size vs samples",
                                         "lm loss",
                                         "lm loss vs samples",
                                         "loss-scale",
                                         "loss-scale vs samples",
                                         "grad-norm",
                                         "grad-norm vs samples",
                                         "learning-rate",
                                         "learning-rate vs samples",
                                         "batch-size",
                                         "batch-size vs samples",
                                         "loss-scale",
                                         "loss-scale vs samples",
                                         "lm loss validation",
                                         "lm loss validation vs samples",
                                         "lm loss validation ppl",
                                         "lm loss validation ppl vs samples"};
  EXPECT_EQ(tags, want);
  EXPECT_EQ(events[5].value, 7.5f);  // lm loss at step 3
  EXPECT_EQ(events[5].step, 3);
  EXPECT_EQ(events[6].step, 96);                       // ... vs samples
  EXPECT_EQ(events[4].value, 32.0f);                   // batch size
  EXPECT_NEAR(events[19].value, std::exp(2.0), 1e-5);  // validation perplexity
}

TEST(TrainTensorBoard, MixtureOfExpertsTags) {
  test::TempDir dir("tensorboard_moe");
  {
    TrainTensorBoard tb(dir / "tb", /*moe_load_balancing=*/true, /*moe_z_loss=*/false);
    IterationStats s{.iteration = 5, .loss = 7.5, .grad_norm = 1.25, .lr = 1e-4, .loss_scale = 1.0f};
    s.moe.load_balancing_loss = 1.125;
    s.moe.expert_load = {{.layer = 1, .tokens_max = 40, .tokens_mean = 32.0},
                         {.layer = 3, .tokens_max = 36, .tokens_mean = 32.0}};
    tb.iteration(s, 160, 32);
  }
  std::map<std::string, Event> by_tag;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "tb"))
    for (const Event& e : read_events(entry.path().string())) by_tag[e.tag] = e;
  EXPECT_EQ(by_tag.count("z_loss"), 0u);  // the run has no z-loss
  ASSERT_EQ(by_tag.count("load_balancing_loss"), 1u);
  EXPECT_EQ(by_tag["load_balancing_loss"].value, 1.125f);
  EXPECT_EQ(by_tag["load_balancing_loss"].step, 5);
  EXPECT_EQ(by_tag["moe/expert_load_max_layer_1"].value, 40.0f);
  EXPECT_EQ(by_tag["moe/expert_load_max_layer_3"].value, 36.0f);
  EXPECT_EQ(by_tag["moe/expert_load_mean_layer_3"].value, 32.0f);
  EXPECT_EQ(by_tag.count("moe/expert_load_max_layer_0"), 0u);
}

// `troupe train` of a tiny GPT on mock data for `iters` iterations, a log line each, with
// --tensorboard-dir DIR/tb; `extra` flags after. Returns the log; scalars gets tag -> step -> value.
std::string train_with_tensorboard(const test::TempDir& dir, int iters, const std::vector<std::string>& extra,
                                   std::map<std::string, std::map<int64_t, float>>& scalars) {
  using namespace std::chrono_literals;
  std::vector<std::string> args = {"train",
                                   "--device",
                                   "cpu",
                                   "--mock-data",
                                   "--vocab-size",
                                   "128",
                                   "--hidden-size",
                                   "32",
                                   "--num-attention-heads",
                                   "2",
                                   "--seq-length",
                                   "16",
                                   "--micro-batch-size",
                                   "2",
                                   "--global-batch-size",
                                   "4",
                                   "--train-iters",
                                   std::to_string(iters),
                                   "--log-interval",
                                   "1",
                                   "--tensorboard-dir",
                                   dir / "tb"};
  args.insert(args.end(), extra.begin(), extra.end());
  test::Troupe train(args, dir / "train.log");
  EXPECT_EQ(train.wait(120s), std::optional<int>(0)) << train.output();
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "tb")) files.push_back(entry.path().string());
  EXPECT_EQ(files.size(), 1u);
  const std::string log = train.output();
  EXPECT_NE(log.find("tensorboard: writing " + files.at(0)), std::string::npos) << log;
  for (const Event& e : read_events(files.at(0)))
    if (!e.tag.empty()) scalars[e.tag][e.step] = e.value;
  return log;
}

// The text after `label` in iteration i's log line, up to the next space ("" when absent).
std::string logged(const std::string& log, int64_t i, const std::string& label) {
  char key[64];
  std::snprintf(key, sizeof(key), "iteration %8ld/", long(i));
  const size_t line = log.find(key);
  const size_t at = line == std::string::npos ? line : log.find(label, line);
  if (at == std::string::npos || at > log.find('\n', line)) return "";
  const size_t start = at + label.size();
  return log.substr(start, log.find(' ', start) - start);
}

TEST(TrainTensorBoard, TroupeTrainWritesTheLogsNumbers) {
  test::TempDir dir("tensorboard_e2e");
  std::map<std::string, std::map<int64_t, float>> scalars;
  const std::string log =
      train_with_tensorboard(dir, 6, {"--num-layers", "1", "--eval-interval", "3", "--eval-iters", "1"}, scalars);
  for (const char* tag : {"lm loss", "learning-rate", "grad-norm", "loss-scale", "batch-size", "iteration-time",
                          "throughput", "lm loss vs samples", "lm loss validation", "lm loss validation ppl"})
    EXPECT_TRUE(scalars.count(tag)) << tag;
  EXPECT_EQ(scalars["lm loss"].size(), 6u);
  EXPECT_EQ(scalars["iteration-time"].size(), 6u);      // every log line
  EXPECT_EQ(scalars["lm loss validation"].size(), 2u);  // iterations 3 and 6
  EXPECT_EQ(scalars["batch-size"][1], 4.0f);
  EXPECT_EQ(scalars["lm loss vs samples"].count(24), 1u);  // iteration 6 at 6 x 4 samples
  // With a log line every iteration, the line's loss is that iteration's: the same number.
  for (int64_t i = 1; i <= 6; ++i) {
    const std::string loss = logged(log, i, "lm loss: ");
    ASSERT_FALSE(loss.empty()) << "iteration " << i << "\n" << log;
    EXPECT_NEAR(scalars["lm loss"][i], std::stod(loss), 1e-5 * std::stod(loss)) << "iteration " << i;
  }
}

TEST(TrainTensorBoard, AnMoeRunWritesTheLogLinesRouterNumbers) {
  test::TempDir dir("tensorboard_moe_e2e");
  std::map<std::string, std::map<int64_t, float>> scalars;
  const std::string log =
      train_with_tensorboard(dir, 3,
                             {"--num-layers", "2", "--eval-iters", "0", "--num-experts", "4", "--moe-router-topk", "2",
                              "--moe-aux-loss-coeff", "1e-2", "--disable-bias-linear"},
                             scalars);
  EXPECT_EQ(scalars.count("z_loss"), 0u);  // no --moe-z-loss-coeff
  ASSERT_EQ(scalars["load_balancing_loss"].size(), 3u);
  // A log line every iteration: its router numbers are that iteration's, as TensorBoard's.
  for (int64_t i = 1; i <= 3; ++i) {
    const std::string aux = logged(log, i, "load_balancing_loss: ");
    const std::string load = logged(log, i, " 1: ");  // layer 1's "max/mean" in "expert load max/mean: 0: ... 1: ..."
    ASSERT_FALSE(aux.empty() || load.empty()) << "iteration " << i << "\n" << log;
    EXPECT_NEAR(scalars["load_balancing_loss"][i], std::stod(aux), 1e-5 * std::stod(aux)) << "iteration " << i;
    EXPECT_EQ(scalars["moe/expert_load_max_layer_1"][i], std::stof(load.substr(0, load.find('/'))));
    EXPECT_EQ(scalars["moe/expert_load_mean_layer_1"][i], std::stof(load.substr(load.find('/') + 1)));
  }
}

}  // namespace
}  // namespace troupe::apps
