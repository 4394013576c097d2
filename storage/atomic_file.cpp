#include "storage/atomic_file.hpp"

#include <fstream>
#include <iterator>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/check.hpp"

namespace troupe {

namespace {

// Unique per process and object: ranks building the same cache file at once each write their
// own temporary file and rename a complete one into place.
std::string temp_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return str_cat(path, ".tmp.", ::getpid(), ".", counter++);
}

}  // namespace

AtomicFile::AtomicFile(std::string path, size_t buffer_bytes)
    : path_(std::move(path)), temp_(temp_name(path_)), buffer_(buffer_bytes > 0 ? buffer_bytes : 1) {
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TROUPE_SYSCALL(fd_, "cannot create '", temp_, "'");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());  // best effort: the error that got us here matters more
}

void AtomicFile::flush() {
  const char* p = buffer_.data();
  size_t left = used_;
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    TROUPE_SYSCALL(n, "cannot write '", temp_, "' (", written_, " bytes written so far)");
    p += n;
    left -= size_t(n);
  }
  used_ = 0;
}

void AtomicFile::write(const void* data, size_t n) {
  TROUPE_CHECK(fd_ >= 0, "write to '", temp_, "' after close()");
  if (n == 0) return;  // an empty span's data() may be null, which memcpy must not get
  const char* src = static_cast<const char*>(data);
  written_ += n;
  if (used_ + n <= buffer_.size()) {
    std::memcpy(buffer_.data() + used_, src, n);
    used_ += n;
    return;
  }
  flush();
  if (n >= buffer_.size()) {  // large writes skip the buffer
    const char* p = src;
    size_t left = n;
    while (left > 0) {
      const ssize_t k = ::write(fd_, p, left);
      if (k < 0 && errno == EINTR) continue;
      TROUPE_SYSCALL(k, "cannot write '", temp_, "'");
      p += k;
      left -= size_t(k);
    }
    return;
  }
  std::memcpy(buffer_.data(), src, n);
  used_ = n;
}

void AtomicFile::close() {
  if (fd_ < 0) return;
  flush();
  TROUPE_SYSCALL(::fsync(fd_), "cannot fsync '", temp_, "'");
  const int fd = fd_;
  fd_ = -1;
  TROUPE_SYSCALL(::close(fd), "cannot close '", temp_, "'");
}

void AtomicFile::commit() {
  TROUPE_CHECK(!committed_, "'", path_, "' committed twice");
  close();
  TROUPE_SYSCALL(::rename(temp_.c_str(), path_.c_str()), "cannot rename '", temp_, "' to '", path_, "'");
  committed_ = true;
  fsync_parent_directory(path_);
}

void write_file_atomic(const std::string& path, const void* bytes, size_t n) {
  AtomicFile f(path);
  f.write(bytes, n);
  f.commit();
}

void copy_file_atomic(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  TROUPE_CHECK(in.good(), "cannot read '", from, "' (to copy it to '", to, "')");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TROUPE_CHECK(!in.bad(), "error reading '", from, "'");
  write_file_atomic(to, bytes.data(), bytes.size());
}

void fsync_parent_directory(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  fsync_directory(parent.empty() ? std::string(".") : parent.string());
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TROUPE_SYSCALL(fd, "cannot open directory '", dir, "' to fsync it");
  const int rc = ::fsync(fd);
  ::close(fd);
  TROUPE_SYSCALL(rc, "cannot fsync directory '", dir, "'");
}

}  // namespace troupe
