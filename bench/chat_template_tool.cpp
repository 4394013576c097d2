// Renders every conversation of a fixture (tests/data/chat_conversations.json) with a chat
// template and prints the results as JSON, for scripts/check_chat_template_hf.py to compare
// with transformers' apply_chat_template byte for byte:
//
//   chat_template_tool --tokenizer-config assets/tokenizers/qwen3/tokenizer_config.json
//                      [--template FILE.jinja]
//                      --conversations tests/data/chat_conversations.json
//
// Output: {"template": NAME, "results": [{"name": ..., "text": ...} | {"name": ..., "raised": MSG}
// (the template's raise_exception) | {"name": ..., "error": MSG} (anything else)]}.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "data/chat/chat_template.hpp"
#include "data/chat/jinja_error.hpp"

namespace {

nlohmann::ordered_json read_json(const std::string& path) {
  std::ifstream in(path);
  TROUPE_CHECK(bool(in), "cannot open ", path);
  return nlohmann::ordered_json::parse(in);
}

nlohmann::ordered_json render_one(const troupe::ChatTemplate& tmpl, const nlohmann::ordered_json& conv) {
  nlohmann::ordered_json result;
  result["name"] = conv.at("name");
  troupe::ChatTemplateOptions options;
  options.add_generation_prompt = conv.value("add_generation_prompt", true);
  if (conv.contains("tools")) options.tools = conv["tools"];
  if (conv.contains("extra")) options.extra = conv["extra"];
  try {
    result["text"] = tmpl.render(conv.at("messages"), options);
  } catch (const troupe::jinja::TemplateRaised& e) {
    result["raised"] = e.what();
  } catch (const troupe::Error& e) {
    result["error"] = e.what();
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Render chat conversations with a chat template"};
  std::string config_path, template_path, conversations_path;
  app.add_option("--tokenizer-config", config_path, "tokenizer_config.json (template and special tokens)")->required();
  app.add_option("--template", template_path, "a .jinja template to use instead of the config's");
  app.add_option("--conversations", conversations_path, "the conversations fixture")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const troupe::ChatTemplate tmpl = template_path.empty()
                                          ? troupe::ChatTemplate::from_tokenizer_config(config_path)
                                          : troupe::ChatTemplate::from_file(template_path, read_json(config_path));
    nlohmann::ordered_json out;
    out["template"] = tmpl.name();
    out["results"] = nlohmann::ordered_json::array();
    const nlohmann::ordered_json fixture = read_json(conversations_path);
    for (const auto& conv : fixture.at("conversations")) out["results"].push_back(render_one(tmpl, conv));
    const std::string text = out.dump(1) + "\n";
    std::fwrite(text.data(), 1, text.size(), stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chat_template_tool: %s\n", e.what());
    return 1;
  }
  return 0;
}
