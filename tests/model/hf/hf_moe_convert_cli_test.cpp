// `troupe convert` on mixtures of experts: a tiny MoE model trained for one iteration exports to
// Hugging Face as Mixtral (experts on every layer) or Qwen3-MoE (q/k norms, a dense first layer),
// and the folder converts back to a checkpoint with the same MoE config and the same weights, bit
// for bit. A model no HF family holds is refused, naming the flag, with nothing written.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "actors/train/checkpoint_shards.hpp"
#include "model/config.hpp"
#include "storage/checkpoint_reader.hpp"
#include "tests/test_util.hpp"
#include "tests/troupe_process.hpp"

namespace troupe::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// One iteration of llama-tiny (4 layers) with `moe` flags, saved to `ckpt`.
TroupeExit train_moe(const std::string& ckpt, const std::vector<std::string>& moe, const std::string& tag) {
  std::vector<std::string> args = tiny_train_args(1, {"--save", ckpt});
  *std::find(args.begin(), args.end(), "gpt2-tiny") = "llama-tiny";
  args.insert(args.end(), moe.begin(), moe.end());
  return run_to_exit(args, tag, 120s);
}

TEST(HfMoeConvertCli, MixtralAndQwen3MoeRoundTripThroughHuggingFace) {
  const struct {
    const char* family;
    std::vector<std::string> flags;
    const char* model_type;
  } cases[] = {{"mixtral", {"--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "32"}, "mixtral"},
               {"qwen3-moe",
                {"--num-experts", "4", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "32", "--qk-layernorm",
                 "--moe-router-pre-softmax", "--moe-layer-freq", "[0,1,1,1]"},
                "qwen3_moe"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.family);
    const TempDir dir("hf-moe-cli");
    const std::string ckpt = dir / "ckpt", hf = dir / "hf", back = dir / "back";
    const TroupeExit trained = train_moe(ckpt, c.flags, std::string("train-") + c.family);
    ASSERT_EQ(trained.code, std::optional<int>(0)) << trained.output;
    const TroupeExit to =
        run_to_exit({"convert", "--to", "hf", "--load", ckpt, "--output", hf}, std::string("to-") + c.family);
    ASSERT_EQ(to.code, std::optional<int>(0)) << to.output;
    const nlohmann::json config = nlohmann::json::parse(std::ifstream(fs::path(hf) / "config.json"));
    EXPECT_EQ(config.at("model_type"), c.model_type) << config.dump();
    const TroupeExit from =
        run_to_exit({"convert", "--from", "hf", "--input", hf, "--save", back}, std::string("from-") + c.family);
    ASSERT_EQ(from.code, std::optional<int>(0)) << from.output;

    const GptConfig a = gpt_config_from_json(CheckpointReader::open(ckpt).metadata().model_config);
    const GptConfig b = gpt_config_from_json(CheckpointReader::open(back).metadata().model_config);
    EXPECT_EQ(b.moe.num_experts, 4);
    EXPECT_EQ(b.moe.moe_router_topk, 2);
    EXPECT_EQ(b.moe.moe_router_pre_softmax, a.moe.moe_router_pre_softmax);
    EXPECT_EQ(b.moe.expert_ffn(b.ffn()), 32);
    EXPECT_EQ(b.qk_layernorm, a.qk_layernorm);
    for (int l = 0; l < a.num_layers; ++l) EXPECT_EQ(b.is_moe_layer(l), a.is_moe_layer(l)) << l;
    // Mixtral has one intermediate_size, the experts': the dense --ffn-hidden-size no layer uses
    // comes back as it, so each checkpoint is read with its own config (the same parameters).
    const ParamLayout layout(a, ChunkSpec::whole_model()), back_layout(b, ChunkSpec::whole_model());
    ASSERT_EQ(back_layout.size(), layout.size());
    EXPECT_EQ(
        max_abs_diff(actors::read_checkpoint_params(ckpt, layout), actors::read_checkpoint_params(back, back_layout)),
        0.0);
  }
}

TEST(HfMoeConvertCli, AModelNoFamilyHoldsIsRefusedNamingTheFlag) {
  const TempDir dir("hf-moe-cli");
  const std::string ckpt = dir / "ckpt", hf = dir / "hf";
  const TroupeExit trained =
      train_moe(ckpt, {"--num-experts", "4", "--moe-router-topk", "2", "--moe-router-score-function", "sigmoid"},
                "train-sigmoid");
  ASSERT_EQ(trained.code, std::optional<int>(0)) << trained.output;
  const TroupeExit to = run_to_exit({"convert", "--to", "hf", "--load", ckpt, "--output", hf}, "to-sigmoid");
  EXPECT_NE(to.code, std::optional<int>(0)) << to.output;
  EXPECT_NE(to.output.find("--moe-router-score-function sigmoid"), std::string::npos) << to.output;
  EXPECT_FALSE(fs::exists(fs::path(hf) / "config.json"));
  EXPECT_FALSE(fs::exists(fs::path(hf) / "model.safetensors"));
}

}  // namespace
}  // namespace troupe::test
