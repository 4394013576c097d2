// A checkpoint's model config against the run's (check_model_config): any difference is an
// error naming the field, except that a field added later may be absent from a checkpoint
// written before it existed (it was written with the default), so older checkpoints still load.
#include <nlohmann/json.hpp>

#include "actors/train/checkpoint_shards.hpp"
#include "model/config.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

std::string why(const nlohmann::json& run, const nlohmann::json& ckpt) {
  try {
    actors::check_model_config(run, ckpt, "ckpt");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfigCheck, OlderCheckpointsWithoutANewOffFeatureLoad) {
  GptConfig c = GptConfig::llama_style(2, 64, 4, 2, 128);
  const nlohmann::json run = to_json(c);
  nlohmann::json older = run;
  older.erase("rope_scaling");  // written before RoPE scaling, the QKV bias and the q/k norms existed
  older.erase("add_qkv_bias");
  older.erase("qk_layernorm");
  EXPECT_EQ(why(run, older), "");

  c.rope_scaling.llama3 = true;  // the run uses it: the older checkpoint is another model
  const std::string e = why(to_json(c), older);
  EXPECT_NE(e.find("has no 'rope_scaling'"), std::string::npos) << e;
  GptConfig qwen = GptConfig::llama_style(2, 64, 4, 2, 128);
  qwen.add_qkv_bias = true;
  EXPECT_NE(why(to_json(qwen), older).find("has no 'add_qkv_bias'"), std::string::npos);
  GptConfig qwen3 = GptConfig::llama_style(2, 64, 4, 2, 128);
  qwen3.qk_layernorm = true;
  EXPECT_NE(why(to_json(qwen3), older).find("has no 'qk_layernorm'"), std::string::npos);

  nlohmann::json other = run;
  other["rotary_base"] = 500000.0f;
  EXPECT_NE(why(run, other).find("model_config.rotary_base"), std::string::npos) << why(run, other);
}

}  // namespace
}  // namespace troupe::test
