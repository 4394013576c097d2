#include "data/chat/chat_template.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/check.hpp"
#include "data/chat/jinja_ast.hpp"
#include "data/chat/jinja_error.hpp"
#include "data/chat/jinja_interpreter.hpp"
#include "data/chat/jinja_json.hpp"
#include "data/chat/jinja_parser.hpp"

namespace troupe {
namespace {

// transformers 5's PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES: what special_tokens_map
// (and so the template) gets; extra and additional special tokens are not passed.
constexpr const char* kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                          "pad_token", "cls_token", "mask_token"};

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  TROUPE_CHECK(bool(in), "cannot read ", what, " ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::pair<std::string, std::string>> special_tokens_of(const nlohmann::ordered_json& config,
                                                                   const std::string& source) {
  TROUPE_CHECK(config.is_object(), source, ": the tokenizer config must be a JSON object");
  std::vector<std::pair<std::string, std::string>> out;
  for (const char* key : kSpecialTokens) {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    if (it->is_string()) {
      out.emplace_back(key, it->get<std::string>());
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      out.emplace_back(key, (*it)["content"].get<std::string>());
    } else {
      TROUPE_FAIL(source, ": ", key, " must be a string or a {\"content\": ...} object");
    }
  }
  return out;
}

// tokenizer_config's chat_template: a string, or a list of {"name", "template"}.
std::vector<std::pair<std::string, std::string>> templates_of(const nlohmann::ordered_json& value,
                                                              const std::string& path) {
  if (value.is_string()) return {{"", value.get<std::string>()}};
  TROUPE_CHECK(value.is_array() && !value.empty(), path,
               ": chat_template must be a string or a list of {\"name\", \"template\"} objects");
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& entry : value) {
    TROUPE_CHECK(entry.is_object() && entry.contains("name") && entry["name"].is_string() &&
                     entry.contains("template") && entry["template"].is_string(),
                 path, ": each chat_template entry must be {\"name\": string, \"template\": string}");
    out.emplace_back(entry["name"].get<std::string>(), entry["template"].get<std::string>());
  }
  return out;
}

}  // namespace

ChatTemplate ChatTemplate::build(std::vector<std::pair<std::string, std::string>> sources,
                                 const nlohmann::ordered_json& tokenizer_config, std::string name) {
  ChatTemplate t;
  t.name_ = std::move(name);
  t.special_tokens_ = special_tokens_of(tokenizer_config, t.name_);
  for (auto& [template_name, source] : sources) {
    const std::string full_name = template_name.empty() ? t.name_ : t.name_ + "[" + template_name + "]";
    t.templates_.push_back(
        Named{template_name, std::make_shared<const jinja::Program>(jinja::jinja_parse(source, full_name))});
  }
  return t;
}

ChatTemplate ChatTemplate::from_tokenizer_config(const std::string& path) {
  nlohmann::ordered_json config;
  try {
    config = nlohmann::ordered_json::parse(read_file(path, "tokenizer config"));
  } catch (const nlohmann::json::exception& e) {
    TROUPE_FAIL(path, " is not valid JSON: ", e.what());
  }
  TROUPE_CHECK(config.is_object(), path, " is not a JSON object");
  const std::filesystem::path sibling = std::filesystem::path(path).parent_path() / "chat_template.jinja";
  if (std::filesystem::exists(sibling))
    return build({{"", read_file(sibling.string(), "chat template")}}, config, sibling.string());
  const auto it = config.find("chat_template");
  TROUPE_CHECK(it != config.end() && !it->is_null(), path,
               " has no chat_template (the model ships no chat template; give one with a .jinja file)");
  return build(templates_of(*it, path), config, path);
}

ChatTemplate ChatTemplate::from_file(const std::string& jinja_path, const nlohmann::ordered_json& tokenizer_config) {
  return build({{"", read_file(jinja_path, "chat template")}}, tokenizer_config, jinja_path);
}

ChatTemplate ChatTemplate::from_string(std::string source, const nlohmann::ordered_json& tokenizer_config,
                                       std::string name) {
  return build({{"", std::move(source)}}, tokenizer_config, std::move(name));
}

const jinja::Program& ChatTemplate::pick(bool tools_given) const {
  if (templates_.size() == 1 && templates_[0].name.empty()) return *templates_[0].program;
  auto find = [&](const char* wanted) -> const jinja::Program* {
    for (const Named& t : templates_)
      if (t.name == wanted) return t.program.get();
    return nullptr;
  };
  if (tools_given) {
    if (const jinja::Program* p = find("tool_use")) return *p;
  }
  if (const jinja::Program* p = find("default")) return *p;
  TROUPE_FAIL(name_, " has several chat templates and none named \"default\"");
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options) const {
  TROUPE_CHECK(messages.is_array(), "chat template '", name_, "': messages must be a list");
  for (const auto& m : messages)
    TROUPE_CHECK(m.is_object(), "chat template '", name_, "': each message must be an object");
  TROUPE_CHECK(options.tools.is_null() || options.tools.is_array(), "chat template '", name_, "'",
               ": tools must be a list or null");
  for (const auto& tool : options.tools)
    TROUPE_CHECK(tool.is_object(), "chat template '", name_, "': each tool must be a JSON schema object");
  TROUPE_CHECK(options.extra.is_object(), "chat template '", name_, "': extra template variables must be an object");

  std::vector<std::pair<std::string, jinja::Value>> variables;
  try {
    // As transformers: render(messages=, tools=, documents=, add_generation_prompt=, **{**special_tokens_map,
    // **extra}).
    for (const auto& [key, token] : special_tokens_) variables.emplace_back(key, jinja::Value::string(token));
    for (const auto& [key, value] : options.extra.items()) {
      TROUPE_CHECK(key != "messages" && key != "tools" && key != "documents" && key != "add_generation_prompt",
                   "chat template '", name_, "': '", key, "' cannot be an extra template variable");
      variables.emplace_back(key, jinja::from_json(value));
    }
    variables.emplace_back("messages", jinja::from_json(messages));
    variables.emplace_back("tools", options.tools.is_null() ? jinja::Value::none() : jinja::from_json(options.tools));
    variables.emplace_back("documents", jinja::Value::none());
    variables.emplace_back("add_generation_prompt", jinja::Value::boolean(options.add_generation_prompt));
  } catch (const jinja::JinjaError& e) {
    TROUPE_FAIL("chat template '", name_, "': ", e.what());
  }
  const jinja::Program& program = pick(!options.tools.is_null());
  return jinja::Interpreter(program).render(variables);
}

}  // namespace troupe
