// The HF config tests' helpers: a config.json fixture of tests/model/hf/configs/, and the error
// the config reader gives for a config.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/hf/hf_config.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {

inline nlohmann::json hf_config_fixture(const std::string& name) {
  std::ifstream in(std::filesystem::path(TROUPE_SOURCE_DIR) / "tests/model/hf/configs" / name);
  EXPECT_TRUE(in.good()) << name;
  return nlohmann::json::parse(in);
}

// The error read_hf_config throws, or "" when it accepts the config.
inline std::string hf_config_refusal(const nlohmann::json& j) {
  try {
    read_hf_config(j, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace troupe::test
