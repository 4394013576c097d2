#include "kernels/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "base/check.hpp"
#include "kernels/half.hpp"
#if TROUPE_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#include "kernels/cuda/stream_alloc.hpp"
#endif

namespace troupe {

struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceKind device = DeviceKind::cpu;
  int device_index = 0;
  bool pinned = false;     // host memory from cudaMallocHost
  void* stream = nullptr;  // device memory from this stream's pool (Tensor::stream_ordered)
  ~Storage() {
    if (stream != nullptr) {
#if TROUPE_HAVE_CUDA
      cuda::stream_free(stream, ptr);
#endif
    } else if (pinned) {
#if TROUPE_HAVE_CUDA
      cuda::pinned_free(ptr);
#endif
    } else if (device == DeviceKind::cpu) {
      std::free(ptr);
    } else {
#if TROUPE_HAVE_CUDA
      cuda::device_free(device_index, ptr);
#endif
    }
  }
};

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

static void check_shape(const Shape& shape) {
  for (int64_t d : shape) TROUPE_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
}

Tensor Tensor::host(DType dtype, Shape shape) {
  check_shape(shape);
  Tensor t;
  auto st = std::make_shared<Storage>();
  st->bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  const size_t rounded = (st->bytes + 63) / 64 * 64;
  st->ptr = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  TROUPE_CHECK(st->ptr != nullptr, "host allocation of ", st->bytes, " bytes failed");
  t.storage_ = st;
  t.data_ = st->ptr;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::pinned_host(DType dtype, Shape shape) {
#if TROUPE_HAVE_CUDA
  if (cuda::device_count() > 0) {
    check_shape(shape);
    Tensor t;
    auto st = std::make_shared<Storage>();
    st->bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
    st->ptr = cuda::pinned_alloc(st->bytes == 0 ? 64 : st->bytes);
    st->pinned = true;
    t.storage_ = st;
    t.data_ = st->ptr;
    t.dtype_ = dtype;
    t.shape_ = std::move(shape);
    return t;
  }
#endif
  return host(dtype, std::move(shape));
}

Tensor Tensor::empty(const Context& ctx, DType dtype, Shape shape) {
  return ctx.is_cuda() ? device_tensor(ctx, dtype, std::move(shape), false) : host(dtype, std::move(shape));
}

Tensor Tensor::stream_ordered(const Context& ctx, DType dtype, Shape shape) {
  return ctx.is_cuda() ? device_tensor(ctx, dtype, std::move(shape), true) : host(dtype, std::move(shape));
}

Tensor Tensor::device_tensor(const Context& ctx, DType dtype, Shape shape, bool stream_ordered) {
#if TROUPE_HAVE_CUDA
  check_shape(shape);
  Tensor t;
  auto st = std::make_shared<Storage>();
  st->bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  st->device = DeviceKind::cuda;
  st->device_index = ctx.device_index();
  if (stream_ordered) {
    st->ptr = cuda::stream_alloc(ctx, st->bytes);
    st->stream = cuda::stream_handle(ctx);
  } else {
    st->ptr = cuda::device_alloc(ctx.device_index(), st->bytes);
  }
  t.storage_ = st;
  t.data_ = st->ptr;
  t.dtype_ = dtype;
  t.device_ = DeviceKind::cuda;
  t.device_index_ = ctx.device_index();
  t.shape_ = std::move(shape);
  return t;
#else
  (void)ctx, (void)dtype, (void)shape, (void)stream_ordered;
  TROUPE_FAIL("CUDA tensor requested in a build without CUDA");
#endif
}

Tensor Tensor::zeros(const Context& ctx, DType dtype, Shape shape) {
  Tensor t = empty(ctx, dtype, std::move(shape));
  fill_zero(ctx, t);
  return t;
}

Tensor Tensor::host_f32(Shape shape, const std::vector<float>& values) {
  Tensor t = host(DType::f32, std::move(shape));
  TROUPE_CHECK(int64_t(values.size()) == t.numel(), "host_f32: ", values.size(), " values for shape ",
               shape_str(t.shape()));
  if (!values.empty()) std::memcpy(t.data(), values.data(), values.size() * 4);
  return t;
}

Tensor Tensor::wrap(void* data, DType dtype, Shape shape, DeviceKind device, int device_index) {
  check_shape(shape);
  Tensor t;
  t.data_ = data;
  t.dtype_ = dtype;
  t.device_ = device;
  t.device_index_ = device_index;
  t.shape_ = std::move(shape);
  return t;
}

int64_t Tensor::dim(int i) const {
  const int n = ndim();
  const int j = i < 0 ? i + n : i;
  TROUPE_CHECK(j >= 0 && j < n, "dimension ", i, " out of range for tensor ", str());
  return shape_[size_t(j)];
}

std::string Tensor::str() const {
  return str_cat(dtype_name(dtype_), shape_str(shape_), "@", device_ == DeviceKind::cpu ? "cpu" : "cuda:",
                 device_ == DeviceKind::cpu ? std::string() : std::to_string(device_index_));
}

Tensor Tensor::view(Shape shape) const {
  TROUPE_CHECK(shape_numel(shape) == numel(), "view: cannot view ", str(), " as ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice(int64_t elem_offset, Shape shape) const {
  TROUPE_CHECK(elem_offset >= 0 && elem_offset + shape_numel(shape) <= numel(), "slice: [", elem_offset, ", +",
               shape_numel(shape), ") is outside ", str());
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + size_t(elem_offset) * dtype_size(dtype_);
  t.shape_ = std::move(shape);
  return t;
}

float& Tensor::at(int64_t i) const {
  TROUPE_CHECK(device_ == DeviceKind::cpu && dtype_ == DType::f32, "at(): needs a host f32 tensor, got ", str());
  TROUPE_CHECK(i >= 0 && i < numel(), "at(", i, ") out of range for ", str());
  return static_cast<float*>(data_)[i];
}

static void host_convert(const void* src, DType st, void* dst, DType dt, int64_t n) {
  if (st == dt) {
    std::memcpy(dst, src, size_t(n) * dtype_size(st));
    return;
  }
  if (st == DType::f32 && dt == DType::bf16) {
    auto* s = static_cast<const float*>(src);
    auto* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16_bits(s[i]);
  } else if (st == DType::f32 && dt == DType::f16) {
    auto* s = static_cast<const float*>(src);
    auto* d = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16_bits(s[i]);
  } else if (st == DType::bf16 && dt == DType::f32) {
    auto* s = static_cast<const uint16_t*>(src);
    auto* d = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_bits_to_f32(s[i]);
  } else if (st == DType::f16 && dt == DType::f32) {
    auto* s = static_cast<const uint16_t*>(src);
    auto* d = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = f16_bits_to_f32(s[i]);
  } else {
    TROUPE_FAIL("no host conversion from ", dtype_name(st), " to ", dtype_name(dt));
  }
}

Tensor to_host_f32(const Context& ctx, const Tensor& t) {
  const DType out_type = is_float(t.dtype()) ? DType::f32 : t.dtype();
  Tensor raw = Tensor::host(t.dtype(), t.shape());
  copy(ctx, t, raw);
  if (t.is_cuda()) ctx.synchronize();
  if (out_type == t.dtype()) return raw;
  Tensor out = Tensor::host(out_type, t.shape());
  host_convert(raw.data(), raw.dtype(), out.data(), out_type, t.numel());
  return out;
}

Tensor to_device(const Context& ctx, const Tensor& host, DType dtype) {
  TROUPE_CHECK(host.device() == DeviceKind::cpu, "to_device: source must be on the host, got ", host.str());
  Tensor converted = host;
  if (host.dtype() != dtype) {
    converted = Tensor::host(dtype, host.shape());
    host_convert(host.data(), host.dtype(), converted.data(), dtype, host.numel());
  }
  if (!ctx.is_cuda()) return host.dtype() == dtype ? round_through(host, dtype) : converted;
  Tensor out = Tensor::empty(ctx, dtype, host.shape());
  copy(ctx, converted, out);
  ctx.synchronize();  // `converted` may be freed when we return
  return out;
}

Tensor round_through(const Tensor& host, DType dtype) {
  TROUPE_CHECK(host.device() == DeviceKind::cpu, "round_through: needs a host tensor, got ", host.str());
  Tensor out = Tensor::host(host.dtype(), host.shape());
  if (host.dtype() != DType::f32 || dtype == DType::f32) {
    std::memcpy(out.data(), host.data(), host.nbytes());
    return out;
  }
  Tensor tmp = Tensor::host(dtype, host.shape());
  host_convert(host.data(), DType::f32, tmp.data(), dtype, host.numel());
  host_convert(tmp.data(), dtype, out.data(), DType::f32, host.numel());
  return out;
}

void copy(const Context& ctx, const Tensor& src, const Tensor& dst) {
  TROUPE_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel(), "copy: ", src.str(), " -> ", dst.str(),
               " (dtype and numel must match)");
  if (src.nbytes() == 0) return;
  if (!src.is_cuda() && !dst.is_cuda()) {
    std::memcpy(dst.data(), src.data(), src.nbytes());
    return;
  }
#if TROUPE_HAVE_CUDA
  TROUPE_CHECK(ctx.is_cuda(), "copy: a CUDA tensor needs a CUDA context");
  cuda::memcpy_async(ctx, dst.data(), src.data(), src.nbytes(), false);
#else
  TROUPE_FAIL("copy: CUDA tensor in a build without CUDA");
#endif
}

void copy_columns(const Context& ctx, const Tensor& src, int64_t from, const Tensor& dst, int64_t to, int64_t n) {
  TROUPE_CHECK(src.dtype() == dst.dtype() && src.ndim() == 2 && dst.ndim() == 2 && src.dim(0) == dst.dim(0) && n >= 0 &&
                   from >= 0 && from + n <= src.dim(1) && to >= 0 && to + n <= dst.dim(1),
               "copy_columns: ", n, " columns of ", src.str(), " from column ", from, " into ", dst.str(),
               " at column ", to, " (2-D, the same dtype and rows, the columns inside both)");
  const size_t item = dtype_size(src.dtype()), width = size_t(n) * item, rows = size_t(src.dim(0));
  const size_t src_pitch = size_t(src.dim(1)) * item, dst_pitch = size_t(dst.dim(1)) * item;
  const char* in = static_cast<const char*>(src.data()) + size_t(from) * item;
  char* out = static_cast<char*>(dst.data()) + size_t(to) * item;
  if (width == 0 || rows == 0) return;
  if (!src.is_cuda() && !dst.is_cuda()) {
    for (size_t r = 0; r < rows; ++r) std::memcpy(out + r * dst_pitch, in + r * src_pitch, width);
    return;
  }
#if TROUPE_HAVE_CUDA
  TROUPE_CHECK(ctx.is_cuda(), "copy_columns: a CUDA tensor needs a CUDA context");
  cuda::memcpy_2d_async(ctx, out, dst_pitch, in, src_pitch, width, rows);
#else
  TROUPE_FAIL("copy_columns: CUDA tensor in a build without CUDA");
#endif
}

void fill_zero(const Context& ctx, const Tensor& t) {
  if (t.nbytes() == 0) return;
  if (!t.is_cuda()) {
    std::memset(t.data(), 0, t.nbytes());
    return;
  }
#if TROUPE_HAVE_CUDA
  cuda::memset_async(ctx, t.data(), 0, t.nbytes());
#endif
}

void expect_defined(const char* op, const char* arg, const Tensor& t) {
  TROUPE_CHECK(t.defined(), op, ": argument '", arg, "' is not defined");
}

void expect_shape(const char* op, const char* arg, const Tensor& t, const Shape& shape) {
  expect_defined(op, arg, t);
  TROUPE_CHECK(t.shape() == shape, op, ": argument '", arg, "' has shape ", shape_str(t.shape()), ", expected ",
               shape_str(shape));
}

void expect_dtype(const char* op, const char* arg, const Tensor& t, DType dtype) {
  expect_defined(op, arg, t);
  TROUPE_CHECK(t.dtype() == dtype, op, ": argument '", arg, "' has dtype ", dtype_name(t.dtype()), ", expected ",
               dtype_name(dtype));
}

void expect_device(const char* op, const char* arg, const Context& ctx, const Tensor& t) {
  expect_defined(op, arg, t);
  TROUPE_CHECK(t.device() == ctx.kind() && (!t.is_cuda() || t.device_index() == ctx.device_index()), op, ": argument '",
               arg, "' lives on ", t.str(), " but the context is ",
               ctx.is_cuda() ? "cuda:" + std::to_string(ctx.device_index()) : std::string("cpu"));
}

}  // namespace troupe
