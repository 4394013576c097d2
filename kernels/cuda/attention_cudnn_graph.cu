// cuDNN backend descriptors, operation graph, heuristics, plan and execution (see the header).
#include <string>
#include <utility>

#include "base/log.hpp"
#include "kernels/cuda/attention_cudnn_graph.cuh"

namespace troupe::cuda {

void fail_cudnn(cudnnStatus_t st, const char* expr, const char* file, int line) {
  // cuDNN keeps a per-thread message of its last failure, often the only place that says why
  // (which attribute, which engine constraint).
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  ::troupe::fail("cuDNN call", expr, file, line,
                 str_cat("cuDNN call ", expr, " failed: ", cudnnGetErrorString(st), last[0] ? ": " : "", last));
}

const char* cudnn_descriptor_name(cudnnBackendDescriptorType_t type) {
  switch (type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
      return "CUDNN_BACKEND_TENSOR_DESCRIPTOR";
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
      return "CUDNN_BACKEND_POINTWISE_DESCRIPTOR";
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
      return "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR";
    case CUDNN_BACKEND_MATMUL_DESCRIPTOR:
      return "CUDNN_BACKEND_MATMUL_DESCRIPTOR";
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
      return "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR";
    case CUDNN_BACKEND_REDUCTION_DESCRIPTOR:
      return "CUDNN_BACKEND_REDUCTION_DESCRIPTOR";
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
      return "CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR";
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR:
      return "CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR";
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
      return "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR";
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
      return "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR";
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
      return "CUDNN_BACKEND_ENGINECFG_DESCRIPTOR";
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
      return "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR";
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
      return "CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR";
    default:
      return "a cuDNN backend descriptor";
  }
}

CudnnDescriptor::CudnnDescriptor(cudnnBackendDescriptorType_t type) : type_(type) {
  const cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &desc_);
  if (st != CUDNN_STATUS_SUCCESS) {
    const std::string call = str_cat("cudnnBackendCreateDescriptor(", cudnn_descriptor_name(type), ")");
    fail_cudnn(st, call.c_str(), __FILE__, __LINE__);
  }
}

CudnnDescriptor::~CudnnDescriptor() {
  if (desc_) cudnnBackendDestroyDescriptor(desc_);
}

CudnnDescriptor::CudnnDescriptor(CudnnDescriptor&& other) noexcept
    : desc_(std::exchange(other.desc_, nullptr)), type_(other.type_) {}

CudnnDescriptor& CudnnDescriptor::operator=(CudnnDescriptor&& other) noexcept {
  if (this != &other) {
    if (desc_) cudnnBackendDestroyDescriptor(desc_);
    desc_ = std::exchange(other.desc_, nullptr);
    type_ = other.type_;
  }
  return *this;
}

// The errors name the descriptor type and the attribute (its number in cudnn_graph.h).
void CudnnDescriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                          const void* values) {
  const cudnnStatus_t st = cudnnBackendSetAttribute(desc_, name, type, count, values);
  if (st != CUDNN_STATUS_SUCCESS) {
    const std::string call =
        str_cat("cudnnBackendSetAttribute(", cudnn_descriptor_name(type_), ", attribute ", int(name), ")");
    fail_cudnn(st, call.c_str(), __FILE__, __LINE__);
  }
}

void CudnnDescriptor::set(cudnnBackendAttributeName_t name, const CudnnDescriptor& value) {
  cudnnBackendDescriptor_t d = value.get();
  set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
}

void CudnnDescriptor::finalize() {
  const cudnnStatus_t st = cudnnBackendFinalize(desc_);
  if (st != CUDNN_STATUS_SUCCESS) {
    const std::string call = str_cat("cudnnBackendFinalize(", cudnn_descriptor_name(type_), ")");
    fail_cudnn(st, call.c_str(), __FILE__, __LINE__);
  }
}

void CudnnGraph::add_tensor(int64_t uid, cudnnDataType_t type, const CudnnDims& dims, const CudnnDims& strides,
                            bool is_virtual, bool by_value) {
  TROUPE_CHECK(!tensors_.count(uid), "cuDNN graph: tensor id ", uid, " used twice");
  CudnnDescriptor t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t alignment = 16;  // callers check that every bound pointer is 16-byte aligned
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, int64_t(dims.size()), dims.data());
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, int64_t(strides.size()), strides.data());
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  if (is_virtual) {
    const bool yes = true;
    t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
  }
  if (by_value) {
    const bool yes = true;
    t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
  }
  t.finalize();
  tensors_.emplace(uid, std::move(t));
}

void CudnnGraph::tensor(int64_t uid, cudnnDataType_t type, const CudnnDims& dims, const CudnnDims& strides) {
  TROUPE_CHECK(uid < kFirstVirtualUid, "cuDNN graph: tensor id ", uid, " is in the virtual range");
  add_tensor(uid, type, dims, strides, false, false);
}

void CudnnGraph::scalar(int64_t uid) {
  TROUPE_CHECK(uid < kFirstVirtualUid, "cuDNN graph: scalar id ", uid, " is in the virtual range");
  add_tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
}

int64_t CudnnGraph::virtual_tensor(cudnnDataType_t type, const CudnnDims& dims, const CudnnDims& strides) {
  const int64_t uid = next_virtual_uid_++;
  add_tensor(uid, type, dims, strides, true, false);
  return uid;
}

const CudnnDescriptor& CudnnGraph::tensor_desc(int64_t uid) const {
  auto it = tensors_.find(uid);
  TROUPE_CHECK(it != tensors_.end(), "cuDNN graph: no tensor with id ", uid);
  return it->second;
}

void CudnnGraph::pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b, int64_t t,
                           cudnnDataType_t compute, int64_t axis) {
  CudnnDescriptor pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  if (mode == CUDNN_POINTWISE_GEN_INDEX) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  pw.finalize();

  CudnnDescriptor op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, tensor_desc(x));
  if (b >= 0) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, tensor_desc(b));
  if (t >= 0) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, tensor_desc(t));
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, tensor_desc(y));
  const float one = 1.0f;
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  op.finalize();
  op_parts_.push_back(std::move(pw));
  ops_.push_back(std::move(op));
}

void CudnnGraph::matmul(int64_t a, int64_t b, int64_t c) {
  CudnnDescriptor mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  mm.finalize();

  CudnnDescriptor op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, tensor_desc(a));
  op.set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, tensor_desc(b));
  op.set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, tensor_desc(c));
  op.set(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
  op.finalize();
  op_parts_.push_back(std::move(mm));
  ops_.push_back(std::move(op));
}

void CudnnGraph::reduction(cudnnReduceTensorOp_t reduce, int64_t x, int64_t y) {
  CudnnDescriptor red(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  red.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  red.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce);
  red.finalize();

  CudnnDescriptor op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, red);
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, tensor_desc(x));
  op.set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, tensor_desc(y));
  op.finalize();
  op_parts_.push_back(std::move(red));
  ops_.push_back(std::move(op));
}

void CudnnGraph::reshape(int64_t x, int64_t y) {
  CudnnDescriptor op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, tensor_desc(x));
  op.set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, tensor_desc(y));
  op.finalize();
  ops_.push_back(std::move(op));
}

void CudnnGraph::build(cudnnHandle_t handle, const std::string& what) {
  TROUPE_CHECK(!built_, "cuDNN graph ", what, " is built twice");
  std::vector<cudnnBackendDescriptor_t> ops;
  ops.reserve(ops_.size());
  for (const CudnnDescriptor& op : ops_) ops.push_back(op.get());
  op_graph_ = CudnnDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  op_graph_.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  op_graph_.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data());
  op_graph_.finalize();

  CudnnDescriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, op_graph_);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  heur.finalize();
  int64_t available = 0;
  TROUPE_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                              0, &available, nullptr));
  TROUPE_CHECK(available > 0, "cuDNN offers no engine for ", what);
  std::vector<CudnnDescriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < available; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  int64_t returned = 0;
  TROUPE_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                              available, &returned, raw.data()));

  // Heuristics rank the configs; some may still refuse this graph at plan time (shape or
  // alignment limits of one engine), so the first plan that finalizes wins.
  std::string refusals;
  for (int64_t i = 0; i < returned && i < available; ++i) {
    CudnnDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[size_t(i)]);
    const cudnnStatus_t st = cudnnBackendFinalize(plan.get());
    if (st != CUDNN_STATUS_SUCCESS) {
      char last[512] = {0};
      cudnnGetLastErrorString(last, sizeof(last));
      refusals += str_cat(" [config ", i, ": ", cudnnGetErrorString(st), last[0] ? " " : "", last, "]");
      continue;
    }
    int64_t count = 0;
    TROUPE_CUDNN_CHECK(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                                1, &count, &workspace_bytes_));
    engine_config_ = std::move(configs[size_t(i)]);
    plan_ = std::move(plan);
    built_ = true;
    logger("kernels").debug("cuDNN plan for ", what, ": engine config ", i, " of ", returned, ", workspace ",
                            workspace_bytes_, " bytes");
    return;
  }
  TROUPE_FAIL("cuDNN has no engine that runs ", what, ":", refusals);
}

void CudnnGraph::execute(cudnnHandle_t handle, const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
                         void* workspace) const {
  TROUPE_CHECK(built_, "cuDNN graph executed before build()");
  TROUPE_CHECK(uids.size() == pointers.size(), "cuDNN graph: ", uids.size(), " ids for ", pointers.size(), " pointers");
  // cuDNN answers a stray id with a NULL_POINTER status that does not name it.
  for (size_t i = 0; i < uids.size(); ++i) {
    TROUPE_CHECK(tensors_.count(uids[i]) && uids[i] < kFirstVirtualUid, "cuDNN graph: the variant pack binds id ",
                 uids[i], ", which is not a tensor of the graph");
    TROUPE_CHECK(pointers[i] != nullptr, "cuDNN graph: the variant pack binds id ", uids[i], " to a null pointer");
  }
  CudnnDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(pointers.size()), pointers.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  TROUPE_CUDNN_CHECK(cudnnBackendExecute(handle, plan_.get(), pack.get()));
}

}  // namespace troupe::cuda
