#include "data/hf_tokenizer/post_processor.hpp"

#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "data/hf_tokenizer/json_reader.hpp"

namespace troupe::hf {

PostProcessor PostProcessor::parse(const nlohmann::json& j, const std::string& file) {
  PostProcessor p;
  if (!j.is_null()) p.add(j, "post_processor", file);
  return p;
}

void PostProcessor::add(const nlohmann::json& j, const std::string& where, const std::string& file) {
  JsonReader r(j, where, file);
  const std::string& type = r.type();
  if (type == "Sequence") {
    const nlohmann::json& list = r.list("processors");
    r.finish();
    for (size_t i = 0; i < list.size(); ++i) add(list[i], json_index(where + ".processors", i), file);
    return;
  }
  if (type == "ByteLevel") {
    for (const char* key : {"add_prefix_space", "trim_offsets", "use_regex"}) r.ignore(key);  // offsets only
    r.finish();
    return;
  }
  if (type != "TemplateProcessing")
    r.fail(
        str_cat("the post-processor type \"", type, "\" is not implemented (TemplateProcessing, ByteLevel, Sequence)"));
  // A second template would see the first one's pieces as several sequences.
  if (has_template_) r.fail("a second TemplateProcessing in a Sequence is not implemented");
  has_template_ = true;
  const nlohmann::json& special = r.get("special_tokens");
  if (!special.is_object()) r.fail("\"special_tokens\" is not an object");
  const nlohmann::json& single = r.list("single");
  r.ignore("pair");  // pairs of sequences are not encoded here
  r.finish();
  bool seen_a = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const nlohmann::json& piece = single[i];
    const std::string at = json_index(where + ".single", i);
    TROUPE_CHECK(piece.is_object() && piece.size() == 1, file, ": ", at, ": expected {\"SpecialToken\": ...} or ",
                 "{\"Sequence\": ...}, got ", piece.dump());
    if (piece.contains("Sequence")) {
      const nlohmann::json& seq = piece["Sequence"];
      TROUPE_CHECK(seq.is_object() && seq.value("id", "") == "A" && !seen_a, file, ": ", at,
                   ": a single-sequence template holds sequence A once, got ", piece.dump());
      seen_a = true;
      continue;
    }
    TROUPE_CHECK(piece.contains("SpecialToken") && piece["SpecialToken"].is_object() &&
                     piece["SpecialToken"].contains("id") && piece["SpecialToken"]["id"].is_string(),
                 file, ": ", at, ": expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}, got ",
                 piece.dump());
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    TROUPE_CHECK(special.contains(name) && special[name].contains("ids") && special[name]["ids"].is_array(), file, ": ",
                 at, ": the special token \"", name, "\" is not in special_tokens with its ids");
    for (const nlohmann::json& id : special[name]["ids"]) {
      TROUPE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX, file, ": ", where,
                   ".special_tokens.", name, ": bad id ", id.dump());
      (seen_a ? suffix_ : prefix_).push_back(int32_t(id.get<int64_t>()));
    }
  }
  TROUPE_CHECK(seen_a, file, ": ", where, ".single: the template has no sequence A");
}

}  // namespace troupe::hf
