// A file written front to back whose every write, flush and close is checked: a failure is a
// troupe::Error naming the file (`what`: "trace 'run.trace'") and the system's reason. For
// the writers that stream records as they happen (traces, TensorBoard event files).
//
//   OutputFile out("run.trace", "trace 'run.trace'");   // creates or truncates it
//   out.write(bytes);
//   out.flush();                                         // readable up to here
//   out.close();                                         // or the destructor, unchecked
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace troupe {

class OutputFile {
 public:
  OutputFile(const std::string& path, std::string what);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(std::string_view bytes);
  void flush();
  void close();  // once closed, write() is an error; flush() and close() do nothing
  bool is_open() const { return file_ != nullptr; }

 private:
  std::string what_;
  std::FILE* file_ = nullptr;
};

}  // namespace troupe
