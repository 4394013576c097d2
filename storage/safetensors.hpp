// Safetensors checkpoints (the huggingface/safetensors format): read through a
// read-only mmap with every header field checked, written atomically.
//
// Layout: an 8-byte little-endian u64 N, N bytes of JSON, then the byte buffer.
//   {"__metadata__": {"step": "100"},
//    "wte": {"dtype": "BF16", "shape": [50304, 768], "data_offsets": [0, 77266944]}, ...}
// Offsets are relative to the buffer's first byte; tensors are row-major, little-endian,
// and together cover the buffer exactly (no gaps, no overlaps, no trailing bytes).
//
//   SafetensorsFile f = SafetensorsFile::open("gpt2/model.safetensors");
//   Tensor wte = f.expect("wte.weight", {V, C});   // host f32 copy of an F32/BF16/F16 tensor
//   Tensor ids = f.view("tokens");                  // no copy; valid while `f` lives
//   write_safetensors("ckpt/model.safetensors", {{"wte.weight", wte}}, {{"step", "100"}});
//
// Every error is a troupe::Error naming the file and, where there is one, the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/dtype.hpp"
#include "kernels/tensor.hpp"
#include "storage/mapped_file.hpp"

namespace troupe {

// "F32", "BF16", "F16", "I32", "I64", "U8" for Troupe's dtypes.
const char* safetensors_dtype_name(DType t);

struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype_name;      // as in the file: "F32", "BF16", "F64", ...
  std::optional<DType> dtype;  // empty for spec dtypes Troupe has none for (F64, I8, BOOL, U16, ...)
  Shape shape;                 // [] is a 0-d tensor (one element)
  uint64_t begin = 0;          // byte range [begin, end) in the buffer
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

class SafetensorsFile {
 public:
  // Maps `path` and validates the whole header: header length against the file size,
  // JSON syntax, duplicate names, dtypes, shape * dtype size == end - begin, and that the
  // tensors tile the buffer (a truncated file names the first tensor past its end).
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const { return map_.path(); }
  // Tensor names in buffer order (by data offset); for files from write_safetensors
  // that is the order the tensors were given in.
  std::vector<std::string> names() const;
  size_t size() const { return tensors_.size(); }
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // Throws naming the file and the tensor when there is no such tensor.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  // The "__metadata__" string map (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // A non-owning host Tensor over the mapped bytes, in the file's dtype. The
  // SafetensorsFile must outlive it (moving the file object is fine: the mapping
  // stays where it is), and it must not be written (the mapping is
  // read-only: a write is a SIGSEGV). Throws when the data is not aligned to its
  // element size (possible for files written in an order that mixes element sizes);
  // read() and read_f32() have no such restriction.
  Tensor view(const std::string& name) const;
  // An owning host copy in the file's dtype.
  Tensor read(const std::string& name) const;
  // An owning host f32 copy of an F32, BF16 or F16 tensor.
  Tensor read_f32(const std::string& name) const;
  // read_f32() after checking that the tensor exists and has shape `shape`; the error
  // names the tensor, the file and both shapes.
  Tensor expect(const std::string& name, const Shape& shape) const;

 private:
  const uint8_t* buffer() const { return map_.data() + buffer_offset_; }
  const SafetensorsTensorInfo& find(const std::string& name) const;

  MappedFile map_;
  size_t buffer_offset_ = 0;                       // 8 + N
  std::vector<SafetensorsTensorInfo> tensors_;     // sorted by begin
  std::unordered_map<std::string, size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// Writes host tensors to `path`: the JSON header (compact, "__metadata__" first when
// `metadata` is non-empty, then the tensors in the given order) padded with spaces to a
// multiple of 8 bytes, then each tensor's bytes back to back in the given order. Goes
// through `path + ".tmp"`, fsync, rename and a directory fsync, so `path` is either the
// old file or the complete new one. Names must be unique, non-empty and not
// "__metadata__". Put tensors with larger elements first (as the reference writer
// does) if every tensor must be view()-able; otherwise offsets may be misaligned.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace troupe
