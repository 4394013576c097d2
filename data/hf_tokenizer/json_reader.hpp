// Reads one component object of tokenizer.json field by field, so that nothing in it is
// silently ignored (STYLE.md 15): a missing required field, a field of the wrong type, and
// (at finish()) a field nobody read are errors naming the file, the component and the field.
// Fields that cannot change the ids or the decoded text (offsets-only options) are read with
// ignore(), which says so where it is called.
//
//   JsonReader r(j, "pre_tokenizer.pretokenizers[0]", "llama3/tokenizer.json");
//   const std::string type = r.type();               // "Split"
//   const bool invert = r.boolean("invert");
//   r.ignore("trim_offsets");                        // offsets only
//   r.finish();                                      // refuses any other field
//   r.fail("behavior \"X\" is not supported");       // throws troupe::Error naming all three
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace troupe::hf {

class JsonReader {
 public:
  // `where` names the object in tokenizer.json ("normalizer.normalizers[1]"); `file` the file.
  JsonReader(const nlohmann::json& object, std::string where, std::string file);

  const std::string& where() const { return where_; }
  const std::string& file() const { return file_; }
  // "<file>: <where> (<type>)", the prefix of every error about this object.
  std::string context() const;

  // The "type" field (required; also names the object in errors from then on).
  const std::string& type();
  // Whether the field is present and not null.
  bool has(std::string_view key) const;
  // A required field of any type.
  const nlohmann::json& get(std::string_view key);
  std::string string(std::string_view key);
  // A string field that may be absent or null.
  std::optional<std::string> optional_string(std::string_view key);
  // A boolean field; absent or null gives `fallback` when there is one, else an error.
  bool boolean(std::string_view key, std::optional<bool> fallback = std::nullopt);
  int64_t integer(std::string_view key, std::optional<int64_t> fallback = std::nullopt);
  // A required list.
  const nlohmann::json& list(std::string_view key);
  // A pattern field as HF writes it: {"String": text} or {"Regex": oniguruma pattern}.
  struct Pattern {
    bool regex;
    std::string text;
  };
  Pattern pattern(std::string_view key);
  // Metaspace's "prepend_scheme" (default "always"), checked against the legacy
  // "add_prefix_space" as HF does (false must come with "never").
  std::string prepend_scheme();
  // A field whose value cannot change the result (offsets-only options, names).
  void ignore(std::string_view key);
  // Throws on a field that was neither read nor ignored.
  void finish() const;
  [[noreturn]] void fail(const std::string& message) const;

 private:
  const nlohmann::json& object_;
  std::string where_, file_, type_;
  std::set<std::string, std::less<>> read_;
};

// "<where>[i]", for the elements of a list.
std::string json_index(const std::string& where, size_t i);

}  // namespace troupe::hf
