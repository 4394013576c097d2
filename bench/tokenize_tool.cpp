// Encodes each line of a JSON-lines file with the GPT-2 tokenizer and prints one line per
// input line: the ids separated by spaces, or with --pretokenize the pre-tokenizer's pieces in
// byte-level spelling ("Ġworld"; no piece contains a space). scripts/check_tokenizer_hf.py
// compares both against HF tokenizers.
//
//   tokenize_tool --encode-jsonl assets/corpora/sotu.jsonl [--key text] [--special as_text]
//                 [--pretokenize] [--check-roundtrip]
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "data/byte_unicode.hpp"
#include "data/gpt2_pretokenize.hpp"
#include "data/gpt2_tokenizer.hpp"
#include "base/check.hpp"

int main(int argc, char** argv) {
  CLI::App app{"GPT-2 tokenizer over JSON lines"};
  std::string vocab_file = "assets/gpt2/gpt2-vocab.json", merge_file = "assets/gpt2/gpt2-merges.txt";
  std::string input, key = "text", special = "recognize";
  bool pretokenize = false, check_roundtrip = false;
  app.add_option("--vocab-file", vocab_file, "vocab.json");
  app.add_option("--merge-file", merge_file, "merges.txt");
  app.add_option("--encode-jsonl", input, "JSON lines file, one document per line")->required();
  app.add_option("--key", key, "the field holding the text");
  app.add_option("--special", special, "how \"<|endoftext|>\" in text is encoded")
      ->check(CLI::IsMember({"recognize", "as_text"}));
  app.add_flag("--pretokenize", pretokenize, "print the pre-tokenizer's pieces instead of ids");
  app.add_flag("--check-roundtrip", check_roundtrip, "fail when decode(encode(text)) != text");
  CLI11_PARSE(app, argc, argv);

  try {
    const troupe::Gpt2Tokenizer tok = troupe::Gpt2Tokenizer::from_files(
        vocab_file, merge_file,
        special == "as_text" ? troupe::SpecialTokens::as_text : troupe::SpecialTokens::recognize);
    std::ifstream in(input);
    TROUPE_CHECK(bool(in), "cannot open ", input);
    std::string line, out;
    std::vector<int32_t> ids;
    int64_t line_no = 0, roundtrip_failures = 0;
    while (std::getline(in, line)) {
      ++line_no;
      const std::string text = nlohmann::json::parse(line).at(key).get<std::string>();
      out.clear();
      if (pretokenize) {
        for (std::string_view piece : troupe::gpt2_pretokenize(text)) {
          if (!out.empty()) out += ' ';
          out += troupe::bytes_to_unicode_string(piece);
        }
      } else {
        ids.clear();
        tok.encode_append(text, ids);
        for (size_t i = 0; i < ids.size(); ++i) {
          if (i > 0) out += ' ';
          out += std::to_string(ids[i]);
        }
        if (check_roundtrip && tok.decode(ids) != text) {
          ++roundtrip_failures;
          std::fprintf(stderr, "line %lld: decode(encode(text)) != text\n", static_cast<long long>(line_no));
        }
      }
      out += '\n';
      std::fwrite(out.data(), 1, out.size(), stdout);
    }
    if (roundtrip_failures > 0) {
      std::fprintf(stderr, "%lld round-trip failures\n", static_cast<long long>(roundtrip_failures));
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenize_tool: %s\n", e.what());
    return 1;
  }
  return 0;
}
