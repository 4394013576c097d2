// Encodes each line of a JSON-lines file with the GPT-2 tokenizer, or with an HF tokenizer.json
// (--tokenizer-model), and prints one line per input line: the ids separated by spaces; with
// --pretokenize (GPT-2) the pre-tokenizer's pieces in byte-level spelling ("Ġworld"; no piece
// contains a space); with --decode the decoded ids as a JSON string. scripts/check_tokenizer_hf.py
// compares them against HF tokenizers.
//
//   tokenize_tool --encode-jsonl assets/corpora/sotu.jsonl [--key text] [--special as_text]
//                 [--pretokenize] [--check-roundtrip]
//   tokenize_tool --tokenizer-model assets/tokenizers/llama3 --encode-jsonl FILE
//                 [--add-special-tokens] [--decode]
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "data/byte_unicode.hpp"
#include "data/gpt2_pretokenize.hpp"
#include "data/gpt2_tokenizer.hpp"
#include "data/hf_tokenizer/hf_tokenizer.hpp"
#include "base/check.hpp"

int main(int argc, char** argv) {
  CLI::App app{"GPT-2 or HF tokenizer.json tokenizer over JSON lines"};
  std::string vocab_file = "assets/gpt2/gpt2-vocab.json", merge_file = "assets/gpt2/gpt2-merges.txt";
  std::string input, key = "text", special = "recognize", tokenizer_model;
  bool pretokenize = false, check_roundtrip = false, add_special_tokens = false, decode = false;
  app.add_option("--vocab-file", vocab_file, "vocab.json");
  app.add_option("--merge-file", merge_file, "merges.txt");
  app.add_option("--encode-jsonl", input, "JSON lines file, one document per line")->required();
  app.add_option("--key", key, "the field holding the text");
  app.add_option("--special", special, "how \"<|endoftext|>\" in text is encoded")
      ->check(CLI::IsMember({"recognize", "as_text"}));
  app.add_flag("--pretokenize", pretokenize, "print the pre-tokenizer's pieces instead of ids");
  app.add_flag("--check-roundtrip", check_roundtrip, "fail when decode(encode(text)) != text");
  app.add_option("--tokenizer-model", tokenizer_model,
                 "an HF tokenizer: a folder with tokenizer.json (and tokenizer_config.json), or the file");
  app.add_flag("--add-special-tokens", add_special_tokens,
               "HF: encode with the post-processor's tokens (add_special_tokens=True)");
  app.add_flag("--decode", decode, "print decode(ids) as a JSON string instead of the ids");
  CLI11_PARSE(app, argc, argv);

  try {
    const bool hf = !tokenizer_model.empty();
    TROUPE_CHECK(!(hf && pretokenize), "--pretokenize is for the GPT-2 tokenizer");
    TROUPE_CHECK(hf || !add_special_tokens, "--add-special-tokens is for --tokenizer-model");
    std::unique_ptr<troupe::Tokenizer> owned;
    if (hf)
      owned = std::make_unique<troupe::HfTokenizer>(troupe::HfTokenizer::from_path(tokenizer_model));
    else
      owned = std::make_unique<troupe::Gpt2Tokenizer>(troupe::Gpt2Tokenizer::from_files(
          vocab_file, merge_file,
          special == "as_text" ? troupe::SpecialTokens::as_text : troupe::SpecialTokens::recognize));
    const troupe::Tokenizer& tok = *owned;
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
        if (add_special_tokens)
          tok.encode_with_special_tokens_append(text, ids);
        else
          tok.encode_append(text, ids);
        if (decode) {
          out += nlohmann::json(tok.decode(ids)).dump(-1, ' ', true);
        } else {
          for (size_t i = 0; i < ids.size(); ++i) {
            if (i > 0) out += ' ';
            out += std::to_string(ids[i]);
          }
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
