#include "model/rank_layout.hpp"

#include <numeric>

#include "base/check.hpp"

namespace troupe {

void RankLayout::validate() const {
  TROUPE_CHECK(tensor >= 1, "the tensor-parallel size must be >= 1, got ", tensor);
  TROUPE_CHECK(context >= 1, "the context-parallel size must be >= 1, got ", context);
  TROUPE_CHECK(data >= 1, "the data-parallel size must be >= 1, got ", data);
  TROUPE_CHECK(pipeline >= 1, "the pipeline-parallel size must be >= 1, got ", pipeline);
  TROUPE_CHECK(expert >= 1 && expert_tensor >= 1, "the expert-parallel sizes must be >= 1, got ", expert, " and ",
               expert_tensor);
  const int stage_ranks = tensor * context * data;
  TROUPE_CHECK(stage_ranks % (expert * expert_tensor) == 0, "expert parallel ", expert, " x expert tensor parallel ",
               expert_tensor, " must divide the ", stage_ranks, " ranks of a pipeline stage (tensor x context x data)");
}

int RankLayout::rank(const RankCoord& c) const {
  TROUPE_CHECK(c.tp >= 0 && c.tp < tensor && c.cp >= 0 && c.cp < context && c.dp >= 0 && c.dp < data && c.pp >= 0 &&
                   c.pp < pipeline,
               "rank layout: no coordinate (pp ", c.pp, ", dp ", c.dp, ", cp ", c.cp, ", tp ", c.tp, ") in ", pipeline,
               " x ", data, " x ", context, " x ", tensor);
  return c.tp + tensor * (c.cp + context * (c.dp + data * c.pp));
}

RankCoord RankLayout::coord(int rank) const {
  TROUPE_CHECK(rank >= 0 && rank < world(), "rank layout: rank ", rank, " outside a world of ", world());
  RankCoord c;
  c.tp = rank % tensor;
  rank /= tensor;
  c.cp = rank % context;
  rank /= context;
  c.dp = rank % data;
  c.pp = rank / data;
  return c;
}

ExpertRankCoord RankLayout::expert_coord(int rank) const {
  TROUPE_CHECK(rank >= 0 && rank < world(), "rank layout: rank ", rank, " outside a world of ", world());
  const int stage_ranks = tensor * context * data;
  int r = rank % stage_ranks;
  ExpertRankCoord c;
  c.pp = rank / stage_ranks;
  c.etp = r % expert_tensor;
  r /= expert_tensor;
  c.ep = r % expert;
  c.edp = r / expert;
  return c;
}

namespace {

// The ranks that differ from `rank` only in the coordinate `vary` (0 .. n-1), in that order.
template <typename Set>
std::vector<int> group_of(const RankLayout& L, int rank, int n, Set set) {
  std::vector<int> out;
  out.reserve(size_t(n));
  for (int i = 0; i < n; ++i) {
    RankCoord c = L.coord(rank);
    set(c, i);
    out.push_back(L.rank(c));
  }
  return out;
}

}  // namespace

std::vector<int> RankLayout::tensor_group(int rank) const {
  return group_of(*this, rank, tensor, [](RankCoord& c, int i) { c.tp = i; });
}
std::vector<int> RankLayout::context_group(int rank) const {
  return group_of(*this, rank, context, [](RankCoord& c, int i) { c.cp = i; });
}
std::vector<int> RankLayout::data_group(int rank) const {
  return group_of(*this, rank, data, [](RankCoord& c, int i) { c.dp = i; });
}
std::vector<int> RankLayout::pipeline_group(int rank) const {
  return group_of(*this, rank, pipeline, [](RankCoord& c, int i) { c.pp = i; });
}

std::vector<int> RankLayout::expert_group(int rank) const {
  const ExpertRankCoord e = expert_coord(rank);
  const int stage_ranks = tensor * context * data;
  std::vector<int> out;
  for (int i = 0; i < expert; ++i) out.push_back(e.pp * stage_ranks + e.etp + expert_tensor * (i + expert * e.edp));
  return out;
}

int RankLayout::expert_group_data_ranks() const {
  // Expert groups are runs of expert x expert_tensor stage ranks, data ranks runs of tensor x
  // context: the shortest run of both.
  const int group = expert * expert_tensor, data_rank = tensor * context;
  return std::lcm(group, data_rank) / data_rank;
}

std::vector<int> RankLayout::order_group(int rank) const {
  // Union-find over the stage's ranks, joined along every group an op's collectives span.
  const int stage_ranks = tensor * context * data, first = coord(rank).pp * stage_ranks;
  std::vector<int> parent(static_cast<size_t>(stage_ranks));
  for (int i = 0; i < stage_ranks; ++i) parent[size_t(i)] = i;
  const auto find = [&](int i) {
    while (parent[size_t(i)] != i) i = parent[size_t(i)] = parent[size_t(parent[size_t(i)])];
    return i;
  };
  for (int r = first; r < first + stage_ranks; ++r)
    for (const std::vector<int>& group : {tensor_group(r), context_group(r), expert_group(r)})
      for (int m : group) parent[size_t(find(m - first))] = find(r - first);
  std::vector<int> out;
  for (int r = first; r < first + stage_ranks; ++r)
    if (find(r - first) == find(rank - first)) out.push_back(r);
  return out;
}

int RankLayout::pipeline_next(int rank) const {
  RankCoord c = coord(rank);
  c.pp = (c.pp + 1) % pipeline;
  return this->rank(c);
}

int RankLayout::pipeline_prev(int rank) const {
  RankCoord c = coord(rank);
  c.pp = (c.pp + pipeline - 1) % pipeline;
  return this->rank(c);
}

std::string RankLayout::stage_name(int rank) const {
  const RankCoord c = coord(rank);
  if (tensor == 1 && data == 1 && context == 1) return str_cat("stage ", c.pp);
  std::string name = str_cat("stage ", c.pp, " (tensor rank ", c.tp, ", data rank ", c.dp);
  if (context > 1) name += str_cat(", context rank ", c.cp);
  return name + ")";
}

}  // namespace troupe
