// tokenizer.json's "post_processor", for one sequence: the special tokens HF's
// encode(text, add_special_tokens=True) puts before and after the text's ids. Implemented:
// TemplateProcessing (its "single" template), ByteLevel (offsets only: adds nothing), and
// Sequence of them (at most one TemplateProcessing); any other type (BertProcessing,
// RobertaProcessing, ...) is refused by name.
//
//   PostProcessor p = PostProcessor::parse(j["post_processor"], "mistral/tokenizer.json");
//   p.prefix() == {1}   // "<s>"
//   p.suffix() == {}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace troupe::hf {

class PostProcessor {
 public:
  // `j`: the "post_processor" value (null: none).
  static PostProcessor parse(const nlohmann::json& j, const std::string& file);

  const std::vector<int32_t>& prefix() const { return prefix_; }
  const std::vector<int32_t>& suffix() const { return suffix_; }

 private:
  void add(const nlohmann::json& j, const std::string& where, const std::string& file);

  std::vector<int32_t> prefix_, suffix_;
  bool has_template_ = false;
};

}  // namespace troupe::hf
