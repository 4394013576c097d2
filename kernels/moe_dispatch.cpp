#include "kernels/moe_dispatch.hpp"

#include "kernels/dispatch.hpp"

namespace troupe {

namespace {

// experts i32 [N, K] on ctx's device; returns {N, K}.
std::pair<int64_t, int64_t> expect_experts(const Context& ctx, const char* op, const Tensor& experts) {
  expect_device(op, "experts", ctx, experts);
  expect_dtype(op, "experts", experts, DType::i32);
  TROUPE_CHECK(experts.ndim() == 2, op, ": experts must be [N, K], got ", experts.str());
  return {experts.dim(0), experts.dim(1)};
}

void expect_kept(const Context& ctx, const char* op, const Tensor& kept, const Tensor& experts) {
  expect_device(op, "kept", ctx, kept);
  expect_dtype(op, "kept", kept, DType::u8);
  expect_shape(op, "kept", kept, experts.shape());
}

}  // namespace

void moe_expert_counts(const Context& ctx, const Tensor& experts, const Tensor& kept, const Tensor& counts) {
  constexpr const char* op = "moe_expert_counts";
  expect_experts(ctx, op, experts);
  if (kept.defined()) expect_kept(ctx, op, kept, experts);
  expect_device(op, "counts", ctx, counts);
  expect_dtype(op, "counts", counts, DType::f32);
  TROUPE_CHECK(counts.ndim() == 1 && counts.dim(0) > 0, op, ": counts must be [E], got ", counts.str());
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_expert_counts(ctx, experts, kept, counts));
  else
    cpu::moe_expert_counts(experts, kept, counts);
}

void moe_capacity_drop(const Context& ctx, const Tensor& experts, const Tensor& probs, int num_experts,
                       int64_t seq_length, int64_t capacity, bool by_probs, const Tensor& kept) {
  constexpr const char* op = "moe_capacity_drop";
  const auto [n, k] = expect_experts(ctx, op, experts);
  expect_device(op, "probs", ctx, probs);
  expect_dtype(op, "probs", probs, DType::f32);
  expect_shape(op, "probs", probs, {n, k});
  expect_kept(ctx, op, kept, experts);
  TROUPE_CHECK(num_experts > 0, op, ": num_experts must be positive, got ", num_experts);
  TROUPE_CHECK(seq_length > 0 && n % seq_length == 0, op, ": ", n, " token rows are not whole sequences of ",
               seq_length);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_capacity_drop(ctx, experts, probs, num_experts, seq_length, capacity, by_probs, kept));
  else
    cpu::moe_capacity_drop(experts, probs, num_experts, seq_length, capacity, by_probs, kept);
}

namespace {

// The row map's tensors for experts [N, K] and R rows.
void expect_row_map(const Context& ctx, const char* op, const Tensor& experts, int64_t rows, const MoeRowMap& map) {
  expect_device(op, "row_choice", ctx, map.row_choice);
  expect_dtype(op, "row_choice", map.row_choice, DType::i32);
  expect_shape(op, "row_choice", map.row_choice, {rows});
  expect_device(op, "choice_row", ctx, map.choice_row);
  expect_dtype(op, "choice_row", map.choice_row, DType::i32);
  expect_shape(op, "choice_row", map.choice_row, experts.shape());
}

}  // namespace

void moe_expert_offsets(const Context& ctx, const Tensor& experts, const Tensor& offsets) {
  constexpr const char* op = "moe_expert_offsets";
  expect_experts(ctx, op, experts);
  expect_device(op, "offsets", ctx, offsets);
  expect_dtype(op, "offsets", offsets, DType::i32);
  TROUPE_CHECK(offsets.ndim() == 1 && offsets.dim(0) >= 2, op, ": offsets must be [E + 1], got ", offsets.str());
  TROUPE_CHECK(experts.numel() <= INT32_MAX, op, ": ", experts.numel(), " choices overflow i32 offsets");
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_expert_offsets(ctx, experts, offsets));
  else
    cpu::moe_expert_offsets(experts, offsets);
}

void moe_row_map(const Context& ctx, const Tensor& experts, const Tensor& kept,
                 const std::vector<int64_t>& expert_offsets, const MoeRowMap& map) {
  constexpr const char* op = "moe_row_map";
  expect_experts(ctx, op, experts);
  if (kept.defined()) expect_kept(ctx, op, kept, experts);
  TROUPE_CHECK(expert_offsets.size() >= 2 && expert_offsets.front() == 0, op,
               ": expert_offsets must be E + 1 offsets from 0, got ", expert_offsets.size());
  for (size_t e = 0; e + 1 < expert_offsets.size(); ++e)
    TROUPE_CHECK(expert_offsets[e] <= expert_offsets[e + 1], op, ": expert_offsets must ascend, expert ", e,
                 " goes from ", expert_offsets[e], " to ", expert_offsets[e + 1]);
  expect_row_map(ctx, op, experts, expert_offsets.back(), map);
  if (ctx.is_cuda())
    TROUPE_ON_CUDA(cuda::moe_row_map(ctx, experts, kept, expert_offsets, map));
  else
    cpu::moe_row_map(experts, kept, expert_offsets, map);
}

void moe_row_map(const Context& ctx, const Tensor& experts, const Tensor& kept, const Tensor& expert_offsets,
                 const MoeRowMap& map) {
  constexpr const char* op = "moe_row_map";
  expect_device(op, "expert_offsets", ctx, expert_offsets);
  expect_dtype(op, "expert_offsets", expert_offsets, DType::i32);
  TROUPE_CHECK(expert_offsets.ndim() == 1 && expert_offsets.dim(0) >= 2, op, ": expert_offsets must be [E + 1], got ",
               expert_offsets.str());
  if (!ctx.is_cuda()) {  // the host offsets, checked there
    const int32_t* o = expert_offsets.data_as<int32_t>();
    moe_row_map(ctx, experts, kept, std::vector<int64_t>(o, o + expert_offsets.numel()), map);
    return;
  }
  expect_experts(ctx, op, experts);
  if (kept.defined()) expect_kept(ctx, op, kept, experts);
  expect_row_map(ctx, op, experts, map.row_choice.numel(), map);
  TROUPE_ON_CUDA(cuda::moe_row_map(ctx, experts, kept, expert_offsets, map));
}

}  // namespace troupe
