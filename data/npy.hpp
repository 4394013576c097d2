// NumPy .npy files (format version 1.0), the format Megatron caches its dataset indices in:
// a magic "\x93NUMPY", version 1.0, a u16 header length, a Python-dict header
// ({'descr': '<i4', 'fortran_order': False, 'shape': (12,), }) padded with spaces to a
// multiple of 64 bytes, then the C-order data. Only little-endian integer arrays.
//
//   write_npy("doc_index.npy", NpyDtype::i32, {n}, v.data());      // atomic
//   NpyArray a = NpyArray::open("doc_index.npy");                  // mmapped, validated
//   int64_t x = a.at(3);
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "storage/mapped_file.hpp"

namespace troupe {

enum class NpyDtype { i16, i32, u32, i64 };

const char* npy_descr(NpyDtype t);  // "<i2", "<i4", "<u4", "<i8"
size_t npy_dtype_size(NpyDtype t);

// Writes under a temporary name and renames (storage/atomic_file.hpp).
void write_npy(const std::string& path, NpyDtype dtype, const std::vector<int64_t>& shape, const void* data);

class NpyArray {
 public:
  // Throws troupe::Error naming the file: not .npy, unsupported version/dtype/order, or a
  // size that does not match the header's shape.
  static NpyArray open(const std::string& path);

  NpyDtype dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  const void* data() const { return data_; }
  // Element i of the flattened array, widened to int64.
  int64_t at(int64_t i) const {
    switch (dtype_) {
      case NpyDtype::i16:
        return static_cast<const int16_t*>(data_)[i];
      case NpyDtype::i32:
        return static_cast<const int32_t*>(data_)[i];
      case NpyDtype::u32:
        return static_cast<const uint32_t*>(data_)[i];
      case NpyDtype::i64:
        return static_cast<const int64_t*>(data_)[i];
    }
    return 0;
  }

 private:
  MappedFile file_;
  NpyDtype dtype_ = NpyDtype::i64;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  const void* data_ = nullptr;
};

}  // namespace troupe

namespace troupe {

// A read-only integer array for dataset indices: built in memory, or mapped from a .npy cache.
class IndexArray {
 public:
  IndexArray() = default;
  explicit IndexArray(std::vector<int64_t> values) : owned_(std::move(values)), size_(int64_t(owned_.size())) {}
  explicit IndexArray(NpyArray mapped) : mapped_(std::move(mapped)), is_mapped_(true), size_(mapped_.numel()) {}

  int64_t size() const { return size_; }
  int64_t operator[](int64_t i) const { return is_mapped_ ? mapped_.at(i) : owned_[size_t(i)]; }

 private:
  std::vector<int64_t> owned_;
  NpyArray mapped_;
  bool is_mapped_ = false;
  int64_t size_ = 0;
};

}  // namespace troupe
