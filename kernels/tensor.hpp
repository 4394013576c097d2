// A tensor: a typed, shaped, contiguous (row-major) view of host or device memory.
// Storage is reference-counted; views (view(), slice()) share it. Every op checks the
// shapes and dtypes of its arguments at entry.
//
//   Tensor x = Tensor::empty(ctx, DType::bf16, {B, T, C});    // on ctx's device
//   Tensor rows = x.view({B * T, C});                           // same memory
//   Tensor h = to_host_f32(ctx, x);                             // host f32 copy
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/context.hpp"
#include "kernels/dtype.hpp"

namespace troupe {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

struct Storage;  // owning allocation (host or device)

class Tensor {
 public:
  Tensor() = default;

  // Uninitialized memory on ctx's device.
  static Tensor empty(const Context& ctx, DType dtype, Shape shape);
  // Uninitialized memory on ctx's device, from ctx's stream on a GPU: allocated and, once the
  // last reference goes, released in the stream's order (cudaMallocAsync / cudaFreeAsync), so
  // neither waits for the device. Every use must be ordered on ctx's stream (work on another
  // stream fenced before ctx's later work). Host memory on the CPU, as empty().
  static Tensor stream_ordered(const Context& ctx, DType dtype, Shape shape);
  // Zero-filled memory on ctx's device (enqueued on ctx's stream for CUDA).
  static Tensor zeros(const Context& ctx, DType dtype, Shape shape);
  // Host memory (64-byte aligned), uninitialized.
  static Tensor host(DType dtype, Shape shape);
  // Uninitialized page-locked host memory (device copies to and from it run asynchronously);
  // plain host memory where there is no GPU.
  static Tensor pinned_host(DType dtype, Shape shape);
  // Host f32 tensor holding `values` (size must equal the shape's numel).
  static Tensor host_f32(Shape shape, const std::vector<float>& values);
  // A non-owning view of memory someone else keeps alive.
  static Tensor wrap(void* data, DType dtype, Shape shape, DeviceKind device, int device_index = 0);

  bool defined() const { return data_ != nullptr || storage_ != nullptr; }
  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  DeviceKind device() const { return device_; }
  int device_index() const { return device_index_; }
  bool is_cuda() const { return device_ == DeviceKind::cuda; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return int(shape_.size()); }
  // Size of dimension i; negative i counts from the end.
  int64_t dim(int i) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  std::string str() const;  // "bf16[4, 64, 768]@cuda:0"

  // Same memory, new shape with the same numel.
  Tensor view(Shape shape) const;
  // A contiguous sub-range: `shape` elements starting `elem_offset` elements in.
  Tensor slice(int64_t elem_offset, Shape shape) const;

  // Host f32 element access (tests, small tensors only).
  float& at(int64_t i) const;

 private:
  // empty() and stream_ordered() on a GPU.
  static Tensor device_tensor(const Context& ctx, DType dtype, Shape shape, bool stream_ordered);
  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  DeviceKind device_ = DeviceKind::cpu;
  int device_index_ = 0;
  Shape shape_;
};

// Copies to host, converting bf16/f16 to f32 (integer tensors keep their dtype).
Tensor to_host_f32(const Context& ctx, const Tensor& t);
// Copies a host tensor to ctx's device, converting f32 to `dtype` (bf16/f16/f32).
Tensor to_device(const Context& ctx, const Tensor& host, DType dtype);
// Host tensor with each element rounded through `dtype` (for bf16 reference inputs).
Tensor round_through(const Tensor& host_f32, DType dtype);
// Same-dtype, same-numel copy (any device pair), enqueued on ctx's stream.
void copy(const Context& ctx, const Tensor& src, const Tensor& dst);
// Columns [from, from + n) of src [R, w] into columns [to, to + n) of dst [R, W] (same dtype,
// any device pair), enqueued on ctx's stream: e.g. a tensor-parallel rank's vocabulary slice
// of the logits into whole rows on the host.
void copy_columns(const Context& ctx, const Tensor& src, int64_t from, const Tensor& dst, int64_t to, int64_t n);
// Sets every byte to zero, enqueued on ctx's stream.
void fill_zero(const Context& ctx, const Tensor& t);

// Shape/dtype/device checks used at every op's entry; they name the op and argument.
void expect_shape(const char* op, const char* arg, const Tensor& t, const Shape& shape);
void expect_dtype(const char* op, const char* arg, const Tensor& t, DType dtype);
void expect_device(const char* op, const char* arg, const Context& ctx, const Tensor& t);
void expect_defined(const char* op, const char* arg, const Tensor& t);

}  // namespace troupe
