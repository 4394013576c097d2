// Hugging Face config.json (model/hf/hf_config.*: read_hf_config).
#include <cstdint>
#include <exception>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.hpp"
#include "model/hf/hf_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(troupe::fuzz::as_text(data, size), nullptr, false);
  if (j.is_discarded()) return 0;
  try {
    (void)troupe::read_hf_config(j, "config.json");
  } catch (const std::exception&) {}
  return 0;
}
