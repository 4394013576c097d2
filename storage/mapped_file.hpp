// A read-only memory map of a whole file (RAII). The bytes stay valid until the
// MappedFile is destroyed or moved from; the safetensors reader keeps one so that
// checkpoint tensors can be viewed without a copy.
//
//   MappedFile f = MappedFile::open("model.safetensors");
//   uint64_t n; std::memcpy(&n, f.data(), 8);
//
// The file must not be truncated while mapped (reading past its new end raises
// SIGBUS). Writers that replace files by rename, as write_safetensors does, are safe:
// the mapping keeps the old inode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace troupe {

class MappedFile {
 public:
  // Maps `path` read-only; throws troupe::Error naming the path and errno's message.
  static MappedFile open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // nullptr for an empty file (a zero-length mapping is not allowed).
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void unmap() noexcept;

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace troupe
