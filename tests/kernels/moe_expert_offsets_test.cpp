// The dropless dispatch plan with tensor offsets on the CPU backend (the reference the CUDA form
// is tested against): moe_expert_offsets is the exclusive scan of the experts' counts, the row map
// from those offsets is the host-offset one, and each expert's rows hold its choices in order.
#include <vector>

#include "kernels/moe_dispatch.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

TEST(MoeExpertOffsets, ScanOfCountsAndRowMapAsHostOffsets) {
  const int64_t n = 37, k = 3;
  const int e = 8;
  const Tensor experts = random_tokens({n, k}, 3, e - 2);  // experts 6 and 7 get nothing
  Tensor offsets = Tensor::host(DType::i32, {e + 1}), counts = Tensor::host(DType::f32, {e});
  moe_expert_offsets(cpu(), experts, offsets);
  moe_expert_counts(cpu(), experts, Tensor(), counts);
  const int32_t* o = offsets.data_as<int32_t>();
  EXPECT_EQ(o[0], 0);
  for (int j = 0; j < e; ++j) EXPECT_EQ(o[j + 1] - o[j], int32_t(counts.at(j))) << "expert " << j;
  EXPECT_EQ(o[e], n * k);
  EXPECT_EQ(o[e - 1], o[e - 2]);

  MoeRowMap from_tensor{Tensor::host(DType::i32, {n * k}), Tensor::host(DType::i32, {n, k})};
  MoeRowMap from_host{Tensor::host(DType::i32, {n * k}), Tensor::host(DType::i32, {n, k})};
  moe_row_map(cpu(), experts, Tensor(), offsets, from_tensor);
  moe_row_map(cpu(), experts, Tensor(), std::vector<int64_t>(o, o + e + 1), from_host);
  const int32_t* rc = from_tensor.row_choice.data_as<int32_t>();
  for (int64_t r = 0; r < n * k; ++r) {
    EXPECT_EQ(rc[r], from_host.row_choice.data_as<int32_t>()[r]) << "row " << r;
    EXPECT_EQ(from_tensor.choice_row.data_as<int32_t>()[rc[r]], r) << "row " << r;
  }
  for (int j = 0; j < e; ++j)
    for (int32_t r = o[j]; r < o[j + 1]; ++r) {
      EXPECT_EQ(experts.data_as<int32_t>()[rc[r]], j) << "row " << r;
      if (r > o[j]) EXPECT_LT(rc[r - 1], rc[r]) << "row " << r;  // in choice order
    }
}

TEST(MoeExpertOffsets, RefusesExpertsOutOfRange) {
  Tensor experts = Tensor::host(DType::i32, {2, 1}), offsets = Tensor::host(DType::i32, {3});
  experts.data_as<int32_t>()[0] = 0;
  experts.data_as<int32_t>()[1] = 2;  // of 2 experts
  EXPECT_THROW(moe_expert_offsets(cpu(), experts, offsets), Error);
}

}  // namespace
}  // namespace troupe::test
