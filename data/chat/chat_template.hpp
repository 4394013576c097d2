// A model's chat template: turns an OpenAI-style conversation into the prompt text the model
// was trained on, byte for byte as transformers 5's
//   tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=..., tokenize=False, **extra)
// renders it. The template is Jinja, run by a renderer with Python Jinja's semantics
// (data/chat/jinja_*.hpp; docs/chat.md lists what it supports). A construct it does not
// support is refused with the template line and column, never rendered differently.
//
//   ChatTemplate t = ChatTemplate::from_tokenizer_config("assets/tokenizers/qwen3/tokenizer_config.json");
//   nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
//   ChatTemplateOptions o;
//   o.extra["enable_thinking"] = false;
//   t.render(messages, o);  // "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
//
// Key order matters (a template's `tool | tojson` writes a tool schema's keys in the order they
// arrived), so messages, tools and extra are nlohmann::ordered_json; parse request bodies with
// ordered_json too. A nlohmann::json converts implicitly, with its keys sorted.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe {

namespace jinja {
struct Program;
}

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  nlohmann::ordered_json tools = nullptr;                           // a list of tool (function) schemas, or null
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // more template variables (enable_thinking, ...)
};

class ChatTemplate {
 public:
  // tokenizer_config.json: `chat_template` (a string, or a list of {"name", "template"} where
  // transformers picks "default", or "tool_use" when tools are given), `bos_token`, `eos_token`
  // and the other special tokens transformers passes (unk, sep, pad, cls, mask; strings or
  // {"content": ...} dicts) as variables. A chat_template.jinja beside the file takes the place
  // of `chat_template`, as in transformers. Throws troupe::Error naming the file when it is
  // unreadable or has no chat template, and naming the template line for a template error.
  static ChatTemplate from_tokenizer_config(const std::string& path);
  // A template given on its own (vLLM's --chat-template FILE); the special-token variables
  // come from `tokenizer_config` (may be an empty object).
  static ChatTemplate from_file(const std::string& jinja_path, const nlohmann::ordered_json& tokenizer_config);
  static ChatTemplate from_string(std::string source, const nlohmann::ordered_json& tokenizer_config, std::string name);

  // messages: [{"role", "content", optional "tool_calls", "tool_call_id", "name",
  // "reasoning_content", ...}]. Throws troupe::Error for malformed input or a template error
  // ("chat template 'NAME' line L, column C: ..."); the template's own raise_exception(msg)
  // throws jinja::TemplateRaised (a troupe::Error) whose what() is msg exactly.
  std::string render(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options) const;

  // The template's name in error messages (the file it came from).
  const std::string& name() const { return name_; }

 private:
  struct Named {
    std::string name;  // "" for a single template
    std::shared_ptr<const jinja::Program> program;
  };
  ChatTemplate() = default;
  static ChatTemplate build(std::vector<std::pair<std::string, std::string>> sources,
                            const nlohmann::ordered_json& tokenizer_config, std::string name);
  const jinja::Program& pick(bool tools_given) const;

  std::string name_;
  std::vector<Named> templates_;
  std::vector<std::pair<std::string, std::string>> special_tokens_;  // bos_token -> "<s>", ...
};

}  // namespace troupe
