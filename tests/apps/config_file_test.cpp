// `--config FILE` (TOML) and `--yaml-cfg FILE` (Megatron's YAML) expanded into flags
// (apps/common/config_file.*), against a small command line shaped like troupe's.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "apps/commands.hpp"
#include "apps/common/config_file.hpp"
#include "base/check.hpp"
#include "tests/test_util.hpp"

namespace {

using Args = std::vector<std::string>;

struct ConfigFileTest : ::testing::Test {
  CLI::App app{"test", "troupe"};
  std::string log_level;
  int num_layers = 0, hidden_size = 0;
  bool bf16 = false;
  std::vector<std::string> data_path;
  std::string host;
  troupe::test::TempDir dir{"config_file"};

  ConfigFileTest() {
    app.add_option("--log-level", log_level);
    CLI::App* train = app.add_subcommand("train");
    train->add_option("--num-layers", num_layers);
    train->add_option("--hidden-size", hidden_size);
    train->add_flag("--bf16", bf16);
    train->add_option("--data-path", data_path);
    CLI::App* serve = app.add_subcommand("serve");
    serve->add_option("--host", host);
  }

  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return dir / name;
  }

  // The error message of expanding `args`, "" when it succeeds.
  std::string error_of(const Args& args) {
    try {
      troupe::apps::expand_config_args(app, args);
    } catch (const troupe::Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(ConfigFileTest, TomlKeysInSnakeOrKebabCaseBecomeFlags) {
  const std::string cfg = write("a.toml",
                                "# model\nnum_layers = 12  # a comment\nhidden-size = 64\nbf16 = true\n"
                                "data_path = [\"0.3\", 'a#1', \"0.7\", b]\n");
  EXPECT_EQ(troupe::apps::expand_config_args(app, {"troupe", "train", "--config", cfg}),
            (Args{"troupe", "train", "--num-layers", "12", "--hidden-size", "64", "--bf16", "--data-path", "0.3", "a#1",
                  "0.7", "b"}));
}

TEST_F(ConfigFileTest, FalseFlagIsLeftOutAndTheCommandLineWins) {
  const std::string cfg = write("a.toml", "bf16 = false\nnum_layers = 12\nhidden_size = 8\n");
  EXPECT_EQ(troupe::apps::expand_config_args(app, {"troupe", "train", "--num-layers=3", "--config=" + cfg}),
            (Args{"troupe", "train", "--num-layers=3", "--hidden-size", "8"}));
}

TEST_F(ConfigFileTest, SectionsApplyToTheirCommandOnly) {
  const std::string cfg = write("a.toml", "log_level = debug\n[train]\nnum_layers = 2\n[serve]\nhost = h\n");
  EXPECT_EQ(troupe::apps::expand_config_args(app, {"troupe", "train", "--config", cfg}),
            (Args{"troupe", "train", "--log-level", "debug", "--num-layers", "2"}));
  EXPECT_EQ(troupe::apps::expand_config_args(app, {"troupe", "serve", "--config", cfg}),
            (Args{"troupe", "serve", "--log-level", "debug", "--host", "h"}));
}

TEST_F(ConfigFileTest, SectionThatNamesNoCommandIsAnErrorWithFileAndLine) {
  const std::string cfg = write("a.toml", "num_layers = 2\n\n[model]\nhidden_size = 4\n");
  const std::string err = error_of({"troupe", "train", "--config", cfg});
  EXPECT_NE(err.find(cfg + ":3:"), std::string::npos) << err;
  EXPECT_NE(err.find("[model]"), std::string::npos) << err;
}

TEST_F(ConfigFileTest, UnknownKeyIsAnErrorNamingFileLineAndKey) {
  const std::string cfg = write("a.toml", "num_layers = 2\nnum_lairs = 3\n");
  const std::string err = error_of({"troupe", "train", "--config", cfg});
  EXPECT_NE(err.find(cfg + ":2:"), std::string::npos) << err;
  EXPECT_NE(err.find("'num_lairs'"), std::string::npos) << err;
  // A key of another command is unknown to this one.
  const std::string other = write("b.toml", "host = h\n");
  EXPECT_NE(error_of({"troupe", "train", "--config", other}).find(other + ":1:"), std::string::npos);
}

TEST_F(ConfigFileTest, MalformedTomlLinesNameFileAndLine) {
  EXPECT_NE(error_of({"troupe", "train", "--config", write("a.toml", "\nnum_layers\n")}).find(":2:"),
            std::string::npos);
  EXPECT_NE(error_of({"troupe", "train", "--config", write("b.toml", "data_path = [a, b\n")}).find(":1:"),
            std::string::npos);
  EXPECT_NE(error_of({"troupe", "train", "--config", dir / "missing.toml"}).find("missing.toml"), std::string::npos);
}

TEST_F(ConfigFileTest, MegatronYamlNestedMappingsGroupArguments) {
  const std::string cfg = write("a.yaml",
                                "language_model:\n  num_layers: 24\n  hidden_size: 1024\n"
                                "bf16: True\ndata_path: [\"0.5\", a, \"0.5\", b]\nlog_level: null\n");
  EXPECT_EQ(troupe::apps::expand_config_args(app, {"troupe", "train", "--yaml-cfg", cfg}),
            (Args{"troupe", "train", "--num-layers", "24", "--hidden-size", "1024", "--bf16", "--data-path", "0.5", "a",
                  "0.5", "b"}));
}

TEST_F(ConfigFileTest, YamlUnknownKeyAndSyntaxErrorsNameFileAndLine) {
  const std::string cfg = write("a.yaml", "language_model:\n  num_layers: 24\n  ffn_hidden: 3\n");
  const std::string err = error_of({"troupe", "train", "--yaml-cfg", cfg});
  EXPECT_NE(err.find(cfg + ":3:"), std::string::npos) << err;
  EXPECT_NE(err.find("'ffn_hidden'"), std::string::npos) << err;
  // An alias back into its own mapping is refused, not followed forever.
  const std::string cycle = write("c.yaml", "a: &x\n  b: *x\n");
  EXPECT_NE(error_of({"troupe", "train", "--yaml-cfg", cycle}).find("too deep"), std::string::npos);
  const std::string bad = write("b.yaml", "num_layers: 2\nhidden_size: [1, 2\n");
  EXPECT_NE(error_of({"troupe", "train", "--yaml-cfg", bad}).find(bad + ":"), std::string::npos);
}

TEST_F(ConfigFileTest, KeySetTwiceIsAnError) {
  const std::string cfg = write("a.toml", "num_layers = 2\nnum-layers = 3\n");
  EXPECT_NE(error_of({"troupe", "train", "--config", cfg}).find(cfg + ":2:"), std::string::npos);
}

// The real `troupe train` flags, as troupe_main.cpp registers them.
TEST(ConfigFileTroupeTrain, KeysMapToTheTrainFlags) {
  CLI::App app{"troupe", "troupe"};
  troupe::apps::CommandRunner run;
  troupe::apps::add_train_command(app, run);
  troupe::test::TempDir dir{"config_file_train"};
  std::ofstream(dir / "a.yaml") << "language_model:\n  num_layers: 4\nbf16: true\nmicro_batch_size: 2\n";
  EXPECT_EQ(troupe::apps::expand_config_args(app, {"troupe", "train", "--yaml-cfg", dir / "a.yaml"}),
            (Args{"troupe", "train", "--num-layers", "4", "--bf16", "--micro-batch-size", "2"}));
  std::ofstream(dir / "b.toml") << "[train]\nnum-layers = 4\nnot_a_flag = 1\n";
  try {
    troupe::apps::expand_config_args(app, {"troupe", "train", "--config", dir / "b.toml"});
    ADD_FAILURE() << "an unknown key was accepted";
  } catch (const troupe::Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "b.toml" + ":3: unknown key 'not_a_flag'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
