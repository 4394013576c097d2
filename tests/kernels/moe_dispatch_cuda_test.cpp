// CUDA MoE dispatch bookkeeping (counts, capacity drop, row maps) against the CPU backend on
// DeepSeek-sized routings (64 experts, top-6, thousands of tokens), where the radix-sort path
// works on many items per expert, and on a routing full of exactly equal probs, where only the
// tie rule (the earlier token in Megatron's [T, B] order) decides what is kept. Then the dropless
// form with the offsets on the device (moe_expert_offsets, the sort-free row map) against the CPU.
#include <algorithm>
#include <cmath>

#include "kernels/moe_dispatch.hpp"
#include "kernels/moe_routing.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

struct Routing {
  Tensor probs, experts;  // host f32 [N, K], i32 [N, K]
};

// Top-k of random logits; `coarse` rounds the logits to integers, so many probs are equal.
Routing random_routing(int64_t n, int64_t e, int k, uint64_t seed, bool coarse) {
  Tensor logits = random_normal({n, e}, seed, 2.0f);
  if (coarse)
    for (int64_t i = 0; i < logits.numel(); ++i) logits.at(i) = std::round(logits.at(i));
  Routing r{Tensor::host(DType::f32, {n, k}), Tensor::host(DType::i32, {n, k})};
  moe_topk_forward(cpu(), logits, Tensor(), MoeTopk{.topk = k}, r.probs, r.experts);
  return r;
}

struct DropCase {
  int64_t n, seq;
  int e, k;
  bool by_probs, coarse;
};

class MoeCapacityDropCuda : public ::testing::TestWithParam<DropCase> {};

TEST_P(MoeCapacityDropCuda, MatchesCpu) {
  const DropCase c = GetParam();
  const Routing r = random_routing(c.n, c.e, c.k, 7, c.coarse);
  const int64_t capacity = (c.n * c.k + c.e - 1) / c.e;  // capacity factor 1
  Tensor probs = Tensor::host(DType::f32, {c.n, c.k}), kept = Tensor::host(DType::u8, {c.n, c.k});
  std::copy(r.probs.data_as<float>(), r.probs.data_as<float>() + r.probs.numel(), probs.data_as<float>());
  moe_capacity_drop(cpu(), r.experts, probs, c.e, c.seq, capacity, c.by_probs, kept);
  Tensor counts = Tensor::host(DType::f32, {c.e});
  moe_expert_counts(cpu(), r.experts, kept, counts);

  const Tensor experts_d = to_device(gpu(), r.experts, DType::i32);
  Tensor probs_d = to_device(gpu(), r.probs, DType::f32), kept_d = Tensor::empty(gpu(), DType::u8, {c.n, c.k});
  Tensor counts_d = Tensor::empty(gpu(), DType::f32, {c.e});
  moe_capacity_drop(gpu(), experts_d, probs_d, c.e, c.seq, capacity, c.by_probs, kept_d);
  moe_expert_counts(gpu(), experts_d, kept_d, counts_d);
  const Tensor kept_h = to_host_f32(gpu(), kept_d);
  int64_t dropped = 0;
  for (int64_t i = 0; i < kept.numel(); ++i) {
    ASSERT_EQ(kept_h.data_as<uint8_t>()[i], kept.data_as<uint8_t>()[i]) << "choice " << i;
    dropped += kept.data_as<uint8_t>()[i] == 0;
  }
  EXPECT_GT(dropped, 0);
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), probs_d), probs), 0.0);
  EXPECT_EQ(max_abs_diff(to_host_f32(gpu(), counts_d), counts), 0.0);

  // The row map, padded: every expert gets 3 rows beyond its kept count.
  std::vector<int64_t> offsets(size_t(c.e) + 1, 0);
  for (int j = 0; j < c.e; ++j) offsets[size_t(j) + 1] = offsets[size_t(j)] + int64_t(counts.at(j)) + 3;
  MoeRowMap map{Tensor::host(DType::i32, {offsets.back()}), Tensor::host(DType::i32, {c.n, c.k})};
  moe_row_map(cpu(), r.experts, kept, offsets, map);
  MoeRowMap map_d{Tensor::empty(gpu(), DType::i32, {offsets.back()}), Tensor::empty(gpu(), DType::i32, {c.n, c.k})};
  moe_row_map(gpu(), experts_d, kept_d, offsets, map_d);
  const Tensor rc = to_host_f32(gpu(), map_d.row_choice), cr = to_host_f32(gpu(), map_d.choice_row);
  for (int64_t i = 0; i < rc.numel(); ++i)
    ASSERT_EQ(rc.data_as<int32_t>()[i], map.row_choice.data_as<int32_t>()[i]) << "row " << i;
  for (int64_t i = 0; i < cr.numel(); ++i)
    ASSERT_EQ(cr.data_as<int32_t>()[i], map.choice_row.data_as<int32_t>()[i]) << "choice " << i;
}

INSTANTIATE_TEST_SUITE_P(Routings, MoeCapacityDropCuda,
                         ::testing::Values(DropCase{4096, 1024, 64, 6, true, false},
                                           DropCase{4096, 512, 64, 6, false, false},
                                           DropCase{2048, 256, 8, 2, true, true},
                                           DropCase{2048, 2048, 16, 1, true, true}));

struct DevicePlanCase {
  int64_t n;
  int e, k;
  bool with_kept;  // a capacity's kept mask (with padding offsets) instead of dropless
};

class MoeDevicePlanCuda : public ::testing::TestWithParam<DevicePlanCase> {};

TEST_P(MoeDevicePlanCuda, MatchesCpu) {
  const DevicePlanCase c = GetParam();
  const Routing r = random_routing(c.n, c.e, c.k, 13, false);
  const Tensor experts_d = to_device(gpu(), r.experts, DType::i32);
  Tensor offsets = Tensor::host(DType::i32, {c.e + 1});
  Tensor kept;  // undefined: every choice kept
  if (c.with_kept) {
    Tensor probs = Tensor::host(DType::f32, {c.n, c.k});
    std::copy(r.probs.data_as<float>(), r.probs.data_as<float>() + r.probs.numel(), probs.data_as<float>());
    kept = Tensor::host(DType::u8, {c.n, c.k});
    moe_capacity_drop(cpu(), r.experts, probs, c.e, c.n, (c.n * c.k + c.e - 1) / c.e, true, kept);
  }
  moe_expert_offsets(cpu(), r.experts, offsets);  // every choice: with a kept mask, room to spare
  Tensor offsets_d = Tensor::empty(gpu(), DType::i32, {c.e + 1});
  moe_expert_offsets(gpu(), experts_d, offsets_d);
  const Tensor offsets_h = to_host_f32(gpu(), offsets_d);  // integer types stay integers
  for (int j = 0; j <= c.e; ++j)
    ASSERT_EQ(offsets_h.data_as<int32_t>()[j], offsets.data_as<int32_t>()[j]) << "offset " << j;

  const int64_t rows = c.n * c.k;
  MoeRowMap map{Tensor::host(DType::i32, {rows}), Tensor::host(DType::i32, {c.n, c.k})};
  moe_row_map(cpu(), r.experts, kept, offsets, map);
  MoeRowMap map_d{Tensor::empty(gpu(), DType::i32, {rows}), Tensor::empty(gpu(), DType::i32, {c.n, c.k})};
  const Tensor kept_d = kept.defined() ? to_device(gpu(), kept, DType::u8) : Tensor();
  moe_row_map(gpu(), experts_d, kept_d, offsets_d, map_d);
  const Tensor rc = to_host_f32(gpu(), map_d.row_choice), cr = to_host_f32(gpu(), map_d.choice_row);
  for (int64_t i = 0; i < rows; ++i)
    ASSERT_EQ(rc.data_as<int32_t>()[i], map.row_choice.data_as<int32_t>()[i]) << "row " << i;
  for (int64_t i = 0; i < rows; ++i)
    ASSERT_EQ(cr.data_as<int32_t>()[i], map.choice_row.data_as<int32_t>()[i]) << "choice " << i;
}

INSTANTIATE_TEST_SUITE_P(Routings, MoeDevicePlanCuda,
                         ::testing::Values(DevicePlanCase{1, 8, 2, false}, DevicePlanCase{3, 16, 4, false},
                                           DevicePlanCase{64, 8, 2, false}, DevicePlanCase{4096, 64, 6, false},
                                           DevicePlanCase{2048, 64, 6, true}, DevicePlanCase{300, 256, 8, false}));

}  // namespace
}  // namespace troupe::test
