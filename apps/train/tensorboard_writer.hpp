// A TensorBoard event file writer for scalars, small enough to read in one sitting: the file
// TensorBoard (and tensorboardX, torch.utils.tensorboard) reads from --tensorboard-dir.
//
// Format: a sequence of TFRecords, each
//   uint64 length (little-endian) | uint32 masked_crc32c(length bytes) | data | uint32 masked_crc32c(data)
// whose data is a serialized tensorflow.Event protobuf, encoded here by hand:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first event carries file_version "brain.Event:2"; every scalar is one event of its own.
// The file is named events.out.tfevents.<unix seconds>.<hostname>, as TensorFlow names it.
//
//   TensorBoardWriter tb("runs/gpt");                // creates the directory and the file
//   tb.add_scalar("lm loss", 3.21, 100);              // troupe::Error on a failed write
//   tb.flush();
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/output_file.hpp"

namespace troupe::apps {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses it.
uint32_t crc32c(std::string_view bytes);
// TFRecord's masking of a CRC: rotate right by 15 bits, add 0xa282ead8.
uint32_t masked_crc32c(std::string_view bytes);

// One serialized Event: a scalar summary at `step`, or (tag empty) the file_version event.
std::string tensorboard_scalar_event(double wall_time, int64_t step, const std::string& tag, float value);
std::string tensorboard_version_event(double wall_time);
// The TFRecord framing of one record.
std::string tfrecord_frame(std::string_view data);

class TensorBoardWriter {
 public:
  // Creates `dir` (with parents) and the event file in it, and writes the version event.
  // Throws troupe::Error naming the path when it cannot.
  explicit TensorBoardWriter(const std::string& dir);

  void add_scalar(const std::string& tag, double value, int64_t step);
  void flush() { file_->flush(); }
  void close() { file_->close(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<OutputFile> file_;
};

}  // namespace troupe::apps
