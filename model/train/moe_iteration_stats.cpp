#include "model/train/moe_iteration_stats.hpp"

#include <algorithm>
#include <map>

namespace troupe {

MoeIterationStats summarize_moe_stats(const std::vector<MoeLayerStats>& per_layer) {
  std::map<int, MoeLayerStats> layers;  // summed over data-parallel replicas
  for (const MoeLayerStats& s : per_layer) {
    MoeLayerStats& t = layers.try_emplace(s.layer, MoeLayerStats{.layer = s.layer}).first->second;
    t.microbatches += s.microbatches;
    t.load_balancing_loss += s.load_balancing_loss;
    t.z_loss += s.z_loss;
    t.tokens_per_expert_max = std::max(t.tokens_per_expert_max, s.tokens_per_expert_max);
    t.tokens_per_expert_mean += s.tokens_per_expert_mean;
    t.dropped += s.dropped;
  }
  MoeIterationStats out;
  int counted = 0;
  for (const auto& [layer, s] : layers) {
    if (s.microbatches == 0) continue;
    const double m = double(s.microbatches);
    out.load_balancing_loss += s.load_balancing_loss / m;
    out.z_loss += s.z_loss / m;
    out.expert_load.push_back({layer, s.tokens_per_expert_max, s.tokens_per_expert_mean / m});
    ++counted;
  }
  if (counted > 0) {
    out.load_balancing_loss /= counted;
    out.z_loss /= counted;
  }
  return out;
}

}  // namespace troupe
