// A file written under a temporary name (`path`.tmp.<pid>.<n>) and renamed into place only when
// complete, so a crash or an error never leaves a partial file under the final name. Writes
// are buffered; commit() flushes, fsyncs, renames and fsyncs the directory.
//
//   AtomicFile f("out/data.idx");
//   f.write(header, 34);
//   f.commit();                 // out/data.idx appears, complete
//   // destroyed without commit(): the temporary file is removed, out/data.idx untouched
//
// For a set of files that must appear together (the .bin and .idx of a dataset): close()
// each, then commit() them in the order that keeps the set consistent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

class AtomicFile {
 public:
  // Creates the temporary file; throws troupe::Error naming it.
  explicit AtomicFile(std::string path, size_t buffer_bytes = size_t(1) << 20);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();  // removes the temporary file unless committed

  void write(const void* data, size_t n);
  // Flushes, fsyncs and closes the temporary file (idempotent).
  void close();
  // close(), then renames the temporary file to `path` and fsyncs its directory.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }
  uint64_t bytes_written() const { return written_; }

 private:
  void flush();

  std::string path_;
  std::string temp_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t written_ = 0;
  std::vector<char> buffer_;
  size_t used_ = 0;
};

// Writes `bytes` to `path` atomically (one AtomicFile, committed).
void write_file_atomic(const std::string& path, const void* bytes, size_t n);
// Copies the file `from` to `to` atomically and durably (write_file_atomic of its bytes).
void copy_file_atomic(const std::string& from, const std::string& to);

// fsyncs the directory holding `path`, so that a rename into it is durable.
void fsync_parent_directory(const std::string& path);
// fsyncs a directory so that entries created or renamed in it are durable.
void fsync_directory(const std::string& dir);

}  // namespace troupe
