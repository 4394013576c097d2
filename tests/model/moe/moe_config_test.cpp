// MoE settings: Megatron's --moe-layer-freq forms, and the checks that name the wrong flag.
#include <string>

#include "model/moe/moe_config.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

std::string error_of(const MoeConfig& c, int layers = 4) {
  try {
    c.validate(layers);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

MoeConfig eight_experts() {
  MoeConfig c;
  c.num_experts = 8;
  return c;
}

TEST(MoeLayerFreq, IntegerEveryNthLayer) {
  MoeConfig c = eight_experts();
  c.moe_layer_freq = parse_moe_layer_freq("2");
  c.validate(4);
  EXPECT_TRUE(c.is_moe_layer(0, 4));
  EXPECT_FALSE(c.is_moe_layer(1, 4));
  EXPECT_TRUE(c.is_moe_layer(2, 4));
  EXPECT_FALSE(c.is_moe_layer(3, 4));
}

TEST(MoeLayerFreq, MegatronListPatterns) {
  EXPECT_EQ(parse_moe_layer_freq("([1]*3+[0]*1)*3").pattern, (std::vector<int>{1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(parse_moe_layer_freq("[0]+[1]*3").pattern, (std::vector<int>{0, 1, 1, 1}));
  EXPECT_EQ(parse_moe_layer_freq("2*[1,0]").pattern, (std::vector<int>{1, 0, 1, 0}));
  MoeConfig c = eight_experts();
  c.moe_layer_freq = parse_moe_layer_freq("[0]+[1]*3");
  c.validate(4);
  EXPECT_FALSE(c.is_moe_layer(0, 4));
  EXPECT_TRUE(c.is_moe_layer(3, 4));
  EXPECT_NE(error_of(c, 5).find("--moe-layer-freq lists 4 layers"), std::string::npos);
}

TEST(MoeLayerFreq, RefusesWhatItCannotRead) {
  for (const char* bad : {"0", "x", "[1,2]", "([1]*2", "[1]+", "[1]*x"}) {
    try {
      parse_moe_layer_freq(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--moe-layer-freq"), std::string::npos) << e.what();
    }
  }
}

TEST(MoeConfigValidate, NamesTheWrongFlag) {
  MoeConfig c = eight_experts();
  EXPECT_EQ(error_of(c), "");
  c.moe_router_topk = 9;
  EXPECT_NE(error_of(c).find("--moe-router-topk 9 is larger than --num-experts 8"), std::string::npos);
  c = eight_experts();
  c.moe_router_topk = 1;
  EXPECT_NE(error_of(c).find("--moe-router-pre-softmax"), std::string::npos);
  c.moe_router_pre_softmax = true;
  EXPECT_EQ(error_of(c), "");
  c = eight_experts();
  c.moe_router_enable_expert_bias = true;
  EXPECT_NE(error_of(c).find("--moe-router-score-function sigmoid"), std::string::npos);
  c.moe_router_score_function = MoeScoreFunction::sigmoid;
  EXPECT_EQ(error_of(c), "");
  c = eight_experts();
  c.moe_pad_expert_input_to_capacity = true;
  EXPECT_NE(error_of(c).find("--moe-expert-capacity-factor"), std::string::npos);
  c = eight_experts();
  c.moe_shared_expert_gate = true;
  EXPECT_NE(error_of(c).find("--moe-shared-expert-intermediate-size"), std::string::npos);
  c = eight_experts();
  c.moe_router_load_balancing_type = MoeLoadBalancing::none;
  c.moe_aux_loss_coeff = 0.01f;
  EXPECT_NE(error_of(c).find("does nothing with --moe-router-load-balancing-type none"), std::string::npos);
  c = eight_experts();
  c.moe_z_loss_coeff = -1;
  EXPECT_NE(error_of(c).find("--moe-z-loss-coeff"), std::string::npos);
}

TEST(MoeConfigNames, RefuseUnknownValues) {
  EXPECT_EQ(moe_score_function_from_name("sigmoid"), MoeScoreFunction::sigmoid);
  EXPECT_EQ(moe_load_balancing_from_name("seq_aux_loss"), MoeLoadBalancing::seq_aux_loss);
  EXPECT_EQ(moe_token_drop_policy_from_name("position"), MoeTokenDropPolicy::position);
  EXPECT_THROW(moe_score_function_from_name("sqrtsoftplus"), Error);
  EXPECT_THROW(moe_load_balancing_from_name("sinkhorn"), Error);
  EXPECT_THROW(moe_token_drop_policy_from_name("random"), Error);
}

TEST(MoeCapacity, MatchesMegatronsCeil) {
  EXPECT_EQ(moe_expert_capacity(8, 4, 1.0), 2);
  EXPECT_EQ(moe_expert_capacity(200, 4, 1.1), 56);  // 50 * 1.1 = 55.00000000000001 in Python: ceil 56
  EXPECT_EQ(moe_expert_capacity(12, 8, 1.0), 2);
}

}  // namespace
}  // namespace troupe::test
