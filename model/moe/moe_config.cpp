#include "model/moe/moe_config.hpp"

#include <cctype>
#include <cmath>

#include "base/check.hpp"

namespace troupe {

namespace {

// A recursive-descent reader of Megatron's --moe-layer-freq list expressions:
//   sum     := product ('+' product)*
//   product := atom ('*' integer)* | integer '*' atom
//   atom    := '[' integer (',' integer)* ']' | '(' sum ')'
class LayerPatternReader {
 public:
  explicit LayerPatternReader(const std::string& text) : text_(text) {}

  std::vector<int> read() {
    std::vector<int> out = sum();
    skip_space();
    if (pos_ != text_.size()) fail("unexpected '", text_[pos_], "'");
    return out;
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    TROUPE_FAIL("--moe-layer-freq '", text_,
                "' is not an integer or a list pattern such as \"([1]*3+[0])*2\": ", args..., " at character ",
                pos_ + 1);
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool take(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool at_digit() {
    skip_space();
    return pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]));
  }
  int integer() {
    if (!at_digit()) fail("expected an integer");
    int64_t v = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      v = v * 10 + (text_[pos_++] - '0');
      if (v > 1000000) fail("integer too large");
    }
    return int(v);
  }
  static std::vector<int> repeat(const std::vector<int>& v, int times) {
    std::vector<int> out;
    for (int i = 0; i < times; ++i) out.insert(out.end(), v.begin(), v.end());
    return out;
  }
  std::vector<int> sum() {
    std::vector<int> out = product();
    while (take('+')) {
      const std::vector<int> more = product();
      out.insert(out.end(), more.begin(), more.end());
    }
    return out;
  }
  std::vector<int> product() {
    if (at_digit()) {
      const int times = integer();
      if (!take('*')) fail("expected '*' after ", times);
      return repeat(atom(), times);
    }
    std::vector<int> out = atom();
    while (take('*')) out = repeat(out, integer());
    return out;
  }
  std::vector<int> atom() {
    if (take('(')) {
      std::vector<int> out = sum();
      if (!take(')')) fail("expected ')'");
      return out;
    }
    if (!take('[')) fail("expected '[' or '('");
    std::vector<int> out{integer()};
    while (take(',')) out.push_back(integer());
    if (!take(']')) fail("expected ']'");
    return out;
  }

  const std::string& text_;
  size_t pos_ = 0;
};

}  // namespace

MoeLayerFreq parse_moe_layer_freq(const std::string& text) {
  MoeLayerFreq f;
  if (text.find('[') == std::string::npos) {
    size_t used = 0;
    int every = 0;
    try {
      every = std::stoi(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TROUPE_CHECK(used == text.size() && used > 0 && every >= 1, "--moe-layer-freq must be a positive integer or a ",
                 "list pattern such as \"([1]*3+[0])*2\", got '", text, "'");
    f.every = every;
    return f;
  }
  f.pattern = LayerPatternReader(text).read();
  for (int v : f.pattern)
    TROUPE_CHECK(v == 0 || v == 1, "--moe-layer-freq '", text, "': every entry must be 0 (dense) or 1 (MoE), got ", v);
  return f;
}

std::string moe_layer_freq_str(const MoeLayerFreq& f) {
  if (f.pattern.empty()) return std::to_string(f.every);
  std::string s = "[";
  for (size_t i = 0; i < f.pattern.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(f.pattern[i]);
  }
  return s + "]";
}

void MoeConfig::validate(int num_layers) const {
  TROUPE_CHECK(num_experts >= 0, "--num-experts must be positive, got ", num_experts);
  if (!enabled()) return;
  if (moe_layer_freq.pattern.empty())
    TROUPE_CHECK(moe_layer_freq.every >= 1, "--moe-layer-freq must be at least 1, got ", moe_layer_freq.every);
  else
    TROUPE_CHECK(int(moe_layer_freq.pattern.size()) == num_layers, "--moe-layer-freq lists ",
                 moe_layer_freq.pattern.size(), " layers but the model has --num-layers ", num_layers,
                 ": give one 0/1 per layer");
  TROUPE_CHECK(moe_ffn_hidden_size >= 0, "--moe-ffn-hidden-size must be positive, got ", moe_ffn_hidden_size);
  TROUPE_CHECK(moe_shared_expert_intermediate_size >= 0, "--moe-shared-expert-intermediate-size must be positive, got ",
               moe_shared_expert_intermediate_size);
  TROUPE_CHECK(!moe_shared_expert_gate || has_shared_expert(),
               "--moe-shared-expert-gate needs a shared expert: set --moe-shared-expert-intermediate-size");
  TROUPE_CHECK(moe_router_topk >= 1, "--moe-router-topk must be at least 1, got ", moe_router_topk);
  TROUPE_CHECK(moe_router_topk <= num_experts, "--moe-router-topk ", moe_router_topk, " is larger than --num-experts ",
               num_experts, ": a token cannot go to more experts than there are");
  // Megatron-Core: softmax over a single picked logit is 1 and has no gradient.
  TROUPE_CHECK(
      !(moe_router_topk == 1 && moe_router_score_function == MoeScoreFunction::softmax && !moe_router_pre_softmax),
      "--moe-router-topk 1 with the softmax score function needs --moe-router-pre-softmax (softmax over one "
      "picked expert is constant 1 and the router would get no gradient)");
  TROUPE_CHECK(moe_router_topk_scaling_factor >= 0, "--moe-router-topk-scaling-factor must be positive, got ",
               moe_router_topk_scaling_factor);
  TROUPE_CHECK(moe_aux_loss_coeff >= 0, "--moe-aux-loss-coeff must not be negative, got ", moe_aux_loss_coeff);
  TROUPE_CHECK(moe_router_load_balancing_type != MoeLoadBalancing::none || moe_aux_loss_coeff == 0,
               "--moe-aux-loss-coeff ", moe_aux_loss_coeff,
               " does nothing with --moe-router-load-balancing-type none: pick aux_loss or seq_aux_loss, or drop the "
               "coefficient");
  TROUPE_CHECK(moe_z_loss_coeff >= 0, "--moe-z-loss-coeff must not be negative, got ", moe_z_loss_coeff);
  TROUPE_CHECK(!moe_router_enable_expert_bias || moe_router_score_function == MoeScoreFunction::sigmoid,
               "--moe-router-enable-expert-bias works with --moe-router-score-function sigmoid only (as in "
               "Megatron-Core)");
  TROUPE_CHECK(moe_router_bias_update_rate >= 0, "--moe-router-bias-update-rate must not be negative, got ",
               moe_router_bias_update_rate);
  TROUPE_CHECK(!moe_pad_expert_input_to_capacity || drops_tokens(),
               "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor (a capacity to pad to)");
}

void MoeConfig::validate_context_parallel(int context_size) const {
  TROUPE_CHECK(context_size <= 1 || !drops_tokens(), "--moe-expert-capacity-factor (", moe_expert_capacity_factor,
               ") with --context-parallel-size ", context_size,
               " is not implemented: the capacity ranks a microbatch's tokens across the context ranks; train "
               "dropless (leave out --moe-expert-capacity-factor) or without context parallelism");
}

bool MoeConfig::is_moe_layer(int layer, int num_layers) const {
  TROUPE_CHECK(layer >= 0 && layer < num_layers, "is_moe_layer: layer ", layer, " is outside [0, ", num_layers, ")");
  if (!enabled()) return false;
  if (!moe_layer_freq.pattern.empty()) return moe_layer_freq.pattern[size_t(layer)] == 1;
  return layer % moe_layer_freq.every == 0;
}

const char* moe_score_function_name(MoeScoreFunction f) {
  return f == MoeScoreFunction::sigmoid ? "sigmoid" : "softmax";
}

MoeScoreFunction moe_score_function_from_name(const std::string& name) {
  if (name == "softmax") return MoeScoreFunction::softmax;
  if (name == "sigmoid") return MoeScoreFunction::sigmoid;
  TROUPE_FAIL("--moe-router-score-function must be softmax or sigmoid, got '", name, "'");
}

const char* moe_load_balancing_name(MoeLoadBalancing t) {
  switch (t) {
    case MoeLoadBalancing::aux_loss:
      return "aux_loss";
    case MoeLoadBalancing::seq_aux_loss:
      return "seq_aux_loss";
    case MoeLoadBalancing::none:
      return "none";
  }
  return "?";
}

MoeLoadBalancing moe_load_balancing_from_name(const std::string& name) {
  if (name == "aux_loss") return MoeLoadBalancing::aux_loss;
  if (name == "seq_aux_loss") return MoeLoadBalancing::seq_aux_loss;
  if (name == "none") return MoeLoadBalancing::none;
  TROUPE_FAIL("--moe-router-load-balancing-type must be aux_loss, seq_aux_loss or none, got '", name,
              "' (sinkhorn, global_aux_loss and quantile_balancing are not implemented)");
}

const char* moe_token_drop_policy_name(MoeTokenDropPolicy p) {
  return p == MoeTokenDropPolicy::position ? "position" : "probs";
}

MoeTokenDropPolicy moe_token_drop_policy_from_name(const std::string& name) {
  if (name == "probs") return MoeTokenDropPolicy::probs;
  if (name == "position") return MoeTokenDropPolicy::position;
  TROUPE_FAIL("--moe-token-drop-policy must be probs or position, got '", name, "'");
}

int64_t moe_expert_capacity(int64_t num_tokens, int num_experts, double capacity_factor) {
  return int64_t(std::ceil(double(num_tokens) / double(num_experts) * capacity_factor));
}

}  // namespace troupe
