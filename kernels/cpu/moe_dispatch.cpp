#include <algorithm>
#include <vector>

#include "base/check.hpp"
#include "kernels/moe_dispatch.hpp"

namespace troupe::cpu {

void moe_expert_counts(const Tensor& experts, const Tensor& kept, const Tensor& counts) {
  const int64_t e = counts.dim(0);
  const int32_t* ex = experts.data_as<int32_t>();
  const uint8_t* keep = kept.defined() ? kept.data_as<uint8_t>() : nullptr;
  float* c = counts.data_as<float>();
  std::fill(c, c + e, 0.0f);
  for (int64_t i = 0; i < experts.numel(); ++i)
    if (!keep || keep[i]) c[ex[i]] += 1.0f;
}

void moe_capacity_drop(const Tensor& experts, const Tensor& probs, int num_experts, int64_t seq_length,
                       int64_t capacity, bool by_probs, const Tensor& kept) {
  const int64_t n = experts.dim(0), k = experts.dim(1), batch = n / seq_length;
  uint8_t* keep = kept.data_as<uint8_t>();
  std::fill(keep, keep + n * k, uint8_t(1));
  if (capacity <= 0) return;
  std::vector<std::vector<int64_t>> choices(static_cast<size_t>(num_experts));  // n * K + k per expert
  const int32_t* ex = experts.data_as<int32_t>();
  for (int64_t i = 0; i < n * k; ++i) choices[size_t(ex[i])].push_back(i);
  float* p = probs.data_as<float>();
  auto megatron_order = [&](int64_t choice) {
    const int64_t row = choice / k;
    return (row % seq_length) * batch + row / seq_length;
  };
  for (auto& list : choices) {
    if (int64_t(list.size()) <= capacity) continue;
    std::stable_sort(list.begin(), list.end(), [&](int64_t a, int64_t b) {
      if (by_probs && p[a] != p[b]) return p[a] > p[b];
      return megatron_order(a) < megatron_order(b);
    });
    for (size_t i = size_t(capacity); i < list.size(); ++i) {
      keep[list[i]] = 0;
      p[list[i]] = 0.0f;
    }
  }
}

void moe_expert_offsets(const Tensor& experts, const Tensor& offsets) {
  const int64_t e = offsets.numel() - 1;
  int32_t* o = offsets.data_as<int32_t>();
  std::fill(o, o + e + 1, 0);
  const int32_t* ex = experts.data_as<int32_t>();
  for (int64_t i = 0; i < experts.numel(); ++i) {
    TROUPE_CHECK(ex[i] >= 0 && ex[i] < e, "moe_expert_offsets: choice ", i, " names expert ", ex[i], " of ", e);
    ++o[ex[i] + 1];
  }
  for (int64_t j = 0; j < e; ++j) o[j + 1] += o[j];
}

void moe_row_map(const Tensor& experts, const Tensor& kept, const std::vector<int64_t>& expert_offsets,
                 const MoeRowMap& map) {
  const int64_t choices = experts.numel();
  int32_t* rc = map.row_choice.data_as<int32_t>();
  int32_t* cr = map.choice_row.data_as<int32_t>();
  std::vector<int64_t> next(expert_offsets.begin(), expert_offsets.end() - 1);
  const int32_t* ex = experts.data_as<int32_t>();
  const uint8_t* keep = kept.defined() ? kept.data_as<uint8_t>() : nullptr;
  std::fill(rc, rc + map.row_choice.numel(), -1);
  for (int64_t i = 0; i < choices; ++i) {
    cr[i] = -1;
    if (keep && !keep[i]) continue;
    const size_t e = size_t(ex[i]);
    TROUPE_CHECK(e + 1 < expert_offsets.size() && next[e] < expert_offsets[e + 1], "moe_row_map: expert ", e,
                 " has more kept choices than rows");
    const int64_t row = next[e]++;
    rc[row] = int32_t(i);
    cr[i] = int32_t(row);
  }
}

}  // namespace troupe::cpu
