// `--config FILE` and `--yaml-cfg FILE` (apps/common/config_file.*): the input is the file, read
// as TOML and as YAML against a small command line shaped like troupe's.
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/common/config_file.hpp"
#include "fuzz/fuzz_util.hpp"

namespace {

struct Options {
  std::string log_level, host;
  int num_layers = 0, hidden_size = 0, port = 0;
  bool bf16 = false;
  std::vector<std::string> data_path;
};

CLI::App& command_line(Options& o) {
  static CLI::App app{"fuzz", "troupe"};
  app.add_option("--log-level", o.log_level);
  CLI::App* train = app.add_subcommand("train");
  train->add_option("--num-layers", o.num_layers);
  train->add_option("--hidden-size", o.hidden_size);
  train->add_flag("--bf16", o.bf16);
  train->add_option("--data-path", o.data_path);
  CLI::App* serve = app.add_subcommand("serve");
  serve->add_option("--host", o.host);
  serve->add_option("--port", o.port);
  return app;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Options options;
  static const CLI::App& app = command_line(options);
  const std::string path = troupe::fuzz::write_scratch_file("config", troupe::fuzz::as_text(data, size));
  for (const char* flag : {"--config", "--yaml-cfg"}) {
    try {
      (void)troupe::apps::expand_config_args(app, {"troupe", "train", "--num-layers", "2", flag, path});
    } catch (const std::exception&) {  // a clean error is a correct answer to a bad file
    }
  }
  return 0;
}
