// A small owner of cuDNN backend (graph API) descriptors: tensors, the pointwise / matmul /
// reduction / reshape operations the fused attention graphs are made of, the operation graph,
// its execution plan, and execution with a variant pack. The cuDNN frontend (C++ headers) is
// not available, so this is the part of it the attention graphs need, written on the C API.
//
//   CudnnGraph g;
//   g.tensor(kQ, CUDNN_DATA_BFLOAT16, {B, H, T, D}, {T * C, D, C, 1});
//   const int64_t s = g.virtual_tensor(CUDNN_DATA_FLOAT, {B, H, T, T}, {H * T * T, T * T, T, 1});
//   g.matmul(kQ, kKt, s);
//   ...
//   g.build(handle);                       // operation graph, heuristics, first plan that finalizes
//   g.execute(handle, uids, pointers, workspace);
//
// Included by .cu files only.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/check.hpp"

namespace troupe::cuda {

[[noreturn]] void fail_cudnn(cudnnStatus_t st, const char* expr, const char* file, int line);
// The backend descriptor type's name ("CUDNN_BACKEND_TENSOR_DESCRIPTOR"), for errors.
const char* cudnn_descriptor_name(cudnnBackendDescriptorType_t type);

// One backend descriptor, destroyed with its owner.
class CudnnDescriptor {
 public:
  CudnnDescriptor() = default;
  explicit CudnnDescriptor(cudnnBackendDescriptorType_t type);
  ~CudnnDescriptor();
  CudnnDescriptor(CudnnDescriptor&& other) noexcept;
  CudnnDescriptor& operator=(CudnnDescriptor&& other) noexcept;
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }
  // cudnnBackendSetAttribute with `count` elements of `type` at `values`.
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values);
  void set(cudnnBackendAttributeName_t name, const CudnnDescriptor& value);
  void finalize();

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
  cudnnBackendDescriptorType_t type_ = CUDNN_BACKEND_POINTWISE_DESCRIPTOR;  // for errors
};

using CudnnDims = std::array<int64_t, 4>;

// An operation graph under construction, then its execution plan. Tensors are named by unique
// id: non-virtual ones by the caller (they are the variant pack's ids), virtual ones numbered
// from kFirstVirtualUid.
class CudnnGraph {
 public:
  static constexpr int64_t kFirstVirtualUid = 1000;

  void tensor(int64_t uid, cudnnDataType_t type, const CudnnDims& dims, const CudnnDims& strides);
  // A host scalar passed with the variant pack (a 1x1x1x1 f32 tensor).
  void scalar(int64_t uid);
  int64_t virtual_tensor(cudnnDataType_t type, const CudnnDims& dims, const CudnnDims& strides);

  // y = mode(x [, b [, t]]) with `compute` precision; `axis` for GEN_INDEX (else -1).
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b = -1, int64_t t = -1,
                 cudnnDataType_t compute = CUDNN_DATA_FLOAT, int64_t axis = -1);
  // c = a b over the last two dims, batch dims broadcast (GQA: a's heads a multiple of b's).
  void matmul(int64_t a, int64_t b, int64_t c);
  // y = op over the dims where y is 1 (or, for heads, grouped: H -> G).
  void reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y);
  // y = x seen with other dims/strides (a transpose of the last two dims here).
  void reshape(int64_t x, int64_t y);

  // Finalizes the operation graph on `handle`, asks heuristics mode A for engine configs and
  // keeps the first whose plan finalizes. `what` names the graph in errors.
  void build(cudnnHandle_t handle, const std::string& what);
  int64_t workspace_bytes() const { return workspace_bytes_; }

  // Runs the plan: uids[i] is bound to pointers[i] (device memory, or a host scalar).
  void execute(cudnnHandle_t handle, const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
               void* workspace) const;

 private:
  const CudnnDescriptor& tensor_desc(int64_t uid) const;
  void add_tensor(int64_t uid, cudnnDataType_t type, const CudnnDims& dims, const CudnnDims& strides, bool is_virtual,
                  bool by_value);

  std::map<int64_t, CudnnDescriptor> tensors_;
  std::vector<CudnnDescriptor> op_parts_;  // pointwise / matmul / reduction descriptors the ops point to
  std::vector<CudnnDescriptor> ops_;
  int64_t next_virtual_uid_ = kFirstVirtualUid;
  CudnnDescriptor op_graph_, engine_config_, plan_;
  int64_t workspace_bytes_ = 0;
  bool built_ = false;
};

}  // namespace troupe::cuda

// Checks a cudnnStatus_t: the error names the call, cuDNN's status and its last error message.
#define TROUPE_CUDNN_CHECK(call)                                               \
  do {                                                                         \
    cudnnStatus_t troupe_cudnn_st_ = (call);                                   \
    if (troupe_cudnn_st_ != CUDNN_STATUS_SUCCESS)                              \
      ::troupe::cuda::fail_cudnn(troupe_cudnn_st_, #call, __FILE__, __LINE__); \
  } while (0)
