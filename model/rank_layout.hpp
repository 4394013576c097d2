// Where each rank sits in the parallel grid: the one place that turns a global rank into its
// tensor / context / data / pipeline coordinates and back, and lists a rank's groups and
// pipeline neighbours. The order is Megatron-LM's `tp-cp-ep-dp-pp` (tensor fastest, pipeline
// slowest): rank = tp + T * (cp + C * (dp + D * pp)). Expert layers see the same ranks as a
// second grid `etp-ep-edp-pp` (expert tensor rank fastest), edp = (C * D * T) / (ETP * EP):
// expert parallelism is carved out of the data (and context) ranks.
//
//   const RankLayout L{.tensor = 2, .data = 2, .pipeline = 4};
//   L.rank({.pp = 1, .dp = 1, .tp = 0});   // 6
//   L.coord(6).pp;                         // 1
//   L.tensor_group(6);                     // {6, 7}
//   L.pipeline_next(6);                    // 10 (stage 2, same dp and tp)
#pragma once

#include <string>
#include <vector>

namespace troupe {

struct RankCoord {
  int pp = 0, dp = 0, cp = 0, tp = 0;
  bool operator==(const RankCoord&) const = default;
};

struct ExpertRankCoord {
  int pp = 0, edp = 0, ep = 0, etp = 0;
  bool operator==(const ExpertRankCoord&) const = default;
};

struct RankLayout {
  int tensor = 1, context = 1, data = 1, pipeline = 1;
  int expert = 1, expert_tensor = 1;  // expert grid (1, 1: every expert on every rank)

  // Throws naming the size that is not positive or an expert grid that does not divide the ranks.
  void validate() const;
  int world() const { return tensor * context * data * pipeline; }

  int rank(const RankCoord& c) const;
  RankCoord coord(int rank) const;
  ExpertRankCoord expert_coord(int rank) const;

  // The members of `rank`'s groups, in group-rank order (the group rank of a member is its index).
  std::vector<int> tensor_group(int rank) const;    // same pp, dp, cp
  std::vector<int> context_group(int rank) const;   // same pp, dp, tp
  std::vector<int> data_group(int rank) const;      // same pp, cp, tp
  std::vector<int> pipeline_group(int rank) const;  // same dp, cp, tp (by stage)
  std::vector<int> expert_group(int rank) const;    // same pp, edp, etp (by ep)
  // The fewest leading data ranks whose ranks make up whole expert groups (an expert group of
  // one of their ranks lies inside them): EP without context parallelism, lcm(EP, C) / C with
  // it (ETP = T). 1 without expert parallelism. Evaluation runs on them.
  int expert_group_data_ranks() const;
  // The ranks of `rank`'s stage that its ops' collectives link, directly or through each
  // other (tensor, context and expert groups), in rank order: they must run their ops in one
  // order, which the first of them (the leader) chooses.
  std::vector<int> order_group(int rank) const;

  // The rank of the next / previous pipeline stage (wrapping around, as an interleaved
  // schedule's last chunk feeds the first stage's next chunk).
  int pipeline_next(int rank) const;
  int pipeline_prev(int rank) const;

  // "stage S" with one tensor and data rank, else "stage S (tensor rank T, data rank D)" (and
  // ", context rank C" when there is context parallelism): how errors name a device.
  std::string stage_name(int rank) const;
};

}  // namespace troupe
