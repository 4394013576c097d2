// Chat templates (data/chat/*): the input is the Jinja source, rendered over a fixed
// conversation with a tool call.
#include <cstdint>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "data/chat/chat_template.hpp"
#include "fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json config = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": {"x": 1}}}]},
    {"role": "tool", "content": "42", "tool_call_id": "c1"}])");
  try {
    const troupe::ChatTemplate t =
        troupe::ChatTemplate::from_string(std::string(troupe::fuzz::as_text(data, size)), config, "fuzz");
    (void)t.render(messages, troupe::ChatTemplateOptions{});
  } catch (const std::exception&) {}
  return 0;
}
