#include "data/hf_tokenizer/bpe_json.hpp"

#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "data/hf_tokenizer/json_reader.hpp"

namespace troupe::hf {

BpeModel parse_bpe_model(const nlohmann::json& j, bool byte_level, const std::string& file) {
  JsonReader r(j, "model", file);
  const std::string& type = r.type();
  if (type != "BPE") r.fail(str_cat("the model type \"", type, "\" is not implemented (BPE)"));
  if (r.has("dropout")) {
    const nlohmann::json& d = r.get("dropout");
    // HF skips dropout when it is 0; any other value makes encoding random.
    if (!d.is_number() || d.get<double>() != 0.0) r.fail(str_cat("dropout ", d.dump(), " is not implemented"));
  }
  r.ignore("dropout");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const std::optional<std::string> v = r.optional_string(key);
    if (v && !v->empty()) r.fail(str_cat(key, " \"", *v, "\" is not implemented"));
  }
  BpeModel::Options o;
  o.byte_level = byte_level;
  o.unk_token = r.optional_string("unk_token").value_or("");
  o.fuse_unk = r.boolean("fuse_unk", false);
  o.byte_fallback = r.boolean("byte_fallback", false);
  o.ignore_merges = r.boolean("ignore_merges", false);

  const nlohmann::json& vocab = r.get("vocab");
  if (!vocab.is_object()) r.fail("\"vocab\" is not an object {token: id}");
  std::vector<std::pair<std::string, int64_t>> entries;
  entries.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer()) r.fail(str_cat("the id of token \"", token, "\" is not an integer: ", id.dump()));
    entries.emplace_back(token, id.get<int64_t>());
  }

  // Merges: ["a b", ...] (HF's legacy form, "#version" lines skipped) or [["a", "b"], ...].
  const nlohmann::json& list = r.list("merges");
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<size_t> index_of;  // merges[i] is list[index_of[i]]
  merges.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& m = list[i];
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      if (s.starts_with("#version")) continue;
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        r.fail(str_cat("merges[", i, "] is not two tokens separated by one space: \"", s, "\""));
      merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      r.fail(str_cat("merges[", i, "] is neither \"a b\" nor [\"a\", \"b\"]: ", m.dump()));
    }
    index_of.push_back(i);
  }
  r.finish();
  const std::string context = r.context();
  return BpeModel::build(entries, merges, o, str_cat(context, ": vocab"),
                         [&](size_t i) { return str_cat(context, ": merges[", index_of[i], "]"); });
}

}  // namespace troupe::hf
