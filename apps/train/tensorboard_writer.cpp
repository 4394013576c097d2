#include "apps/train/tensorboard_writer.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "base/check.hpp"

namespace troupe::apps {

namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Protobuf wire format: varints, tags (field number << 3 | wire type), little-endian fixed.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out += char(uint8_t(v));
}
void put_tag(std::string& out, int field, int wire_type) { put_varint(out, uint64_t(field << 3 | wire_type)); }
template <class T>
void put_fixed(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // x86-64 and arm64 are little-endian, as the format
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

constexpr int kVarint = 0, kFixed64 = 1, kFixed32 = 5;

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_tag(e, 1, kFixed64), put_fixed(e, wall_time);       // wall_time
  put_tag(e, 2, kVarint), put_varint(e, uint64_t(step));  // step
  return e;
}

double unix_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(std::string_view bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) c = kCrc32cTable[(c ^ b) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tensorboard_scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string v;
  put_bytes(v, 1, tag);                          // Value.tag
  put_tag(v, 2, kFixed32), put_fixed(v, value);  // Value.simple_value
  std::string summary;
  put_bytes(summary, 1, v);  // Summary.value
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);  // Event.summary
  return e;
}

std::string tensorboard_version_event(double wall_time) {
  std::string e = event_header(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");  // Event.file_version
  return e;
}

std::string tfrecord_frame(std::string_view data) {
  std::string out;
  std::string length;
  put_fixed(length, uint64_t(data.size()));
  out += length;
  put_fixed(out, masked_crc32c(length));
  out.append(data);
  put_fixed(out, masked_crc32c(data));
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  TROUPE_CHECK(!dir.empty(), "--tensorboard-dir: no directory given");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TROUPE_CHECK(!ec, "--tensorboard-dir: cannot create ", dir, ": ", ec.message());
  char host[256] = {};
  TROUPE_SYSCALL(gethostname(host, sizeof(host) - 1), "the host name for the TensorBoard event file's name");
  const double now = unix_seconds_now();
  path_ = (std::filesystem::path(dir) / str_cat("events.out.tfevents.", int64_t(now), ".", host)).string();
  file_ = std::make_unique<OutputFile>(path_, "the TensorBoard event file " + path_);
  file_->write(tfrecord_frame(tensorboard_version_event(now)));
  flush();
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  file_->write(tfrecord_frame(tensorboard_scalar_event(unix_seconds_now(), step, tag, float(value))));
}

}  // namespace troupe::apps
