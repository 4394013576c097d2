// GPT-2 tokenizer throughput over the texts of a JSON-lines corpus: load time, then MB/s and
// tokens/s for a cold pass (empty word cache), warm passes, and the pre-tokenizer alone; with
// --threads N each thread encodes a share of the documents with its own clone().
//
//   tokenizer_bench [--corpus assets/corpora/sotu.jsonl] [--repeats 3] [--threads 1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "data/gpt2_pretokenize.hpp"
#include "data/gpt2_tokenizer.hpp"
#include "base/check.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<std::string> read_texts(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  TROUPE_CHECK(bool(in), "cannot open corpus ", path);
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) texts.push_back(nlohmann::json::parse(line).at(key).get<std::string>());
  return texts;
}

// Encodes all texts with `threads` clones of `tok` (fresh caches); returns the token count.
int64_t encode_all(const troupe::Tokenizer& tok, const std::vector<std::string>& texts, int threads,
                   std::vector<std::unique_ptr<troupe::Tokenizer>>& workers) {
  std::vector<int64_t> counts(size_t(threads), 0);
  auto work = [&](int t) {
    std::vector<int32_t> ids;
    for (size_t d = size_t(t); d < texts.size(); d += size_t(threads)) {
      ids.clear();
      workers[size_t(t)]->encode_append(texts[d], ids);
      counts[size_t(t)] += int64_t(ids.size());
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPT-2 tokenizer throughput"};
  std::string vocab_file = "assets/gpt2/gpt2-vocab.json", merge_file = "assets/gpt2/gpt2-merges.txt";
  std::string corpus = "assets/corpora/sotu.jsonl", key = "text";
  int repeats = 3, threads = 1;
  app.add_option("--vocab-file", vocab_file, "vocab.json");
  app.add_option("--merge-file", merge_file, "merges.txt");
  app.add_option("--corpus", corpus, "JSON lines file");
  app.add_option("--key", key, "the field holding the text");
  app.add_option("--repeats", repeats, "warm passes")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "encoding threads, one tokenizer clone each")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    auto t0 = Clock::now();
    const troupe::Gpt2Tokenizer tok = troupe::Gpt2Tokenizer::from_files(vocab_file, merge_file);
    const double load_s = seconds_since(t0);
    const std::vector<std::string> texts = read_texts(corpus, key);
    size_t bytes = 0;
    for (const auto& t : texts) bytes += t.size();
    const double mb = double(bytes) / 1e6;
    std::printf("corpus %s: %zu documents, %.2f MB; vocab %lld, merges %lld, load %.1f ms; %d thread(s)\n",
                corpus.c_str(), texts.size(), mb, static_cast<long long>(tok.vocab_size()),
                static_cast<long long>(tok.model().num_merges()), load_s * 1e3, threads);

    t0 = Clock::now();
    int64_t pieces = 0;
    for (const auto& t : texts) {
      troupe::Gpt2Pretokenizer it(t);
      std::string_view piece;
      while (it.next(piece)) ++pieces;
    }
    double s = seconds_since(t0);
    std::printf("%-22s %8.1f MB/s %12.0f pieces/s\n", "pre-tokenizer only", mb / s, double(pieces) / s);

    std::vector<std::unique_ptr<troupe::Tokenizer>> workers;
    for (int t = 0; t < threads; ++t) workers.push_back(tok.clone());
    t0 = Clock::now();
    int64_t tokens = encode_all(tok, texts, threads, workers);
    s = seconds_since(t0);
    std::printf("%-22s %8.1f MB/s %12.0f tokens/s  (%lld tokens, %.2f bytes/token)\n", "encode, cold cache",
                mb / s, double(tokens) / s, static_cast<long long>(tokens), double(bytes) / double(tokens));

    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      t0 = Clock::now();
      tokens = encode_all(tok, texts, threads, workers);
      best = std::min(best, seconds_since(t0));
    }
    std::printf("%-22s %8.1f MB/s %12.0f tokens/s  (best of %d)\n", "encode, warm cache", mb / best,
                double(tokens) / best, repeats);

    std::vector<int32_t> all;
    for (const auto& t : texts) tok.encode_append(t, all);
    t0 = Clock::now();
    const std::string decoded = tok.decode(all);
    s = seconds_since(t0);
    std::printf("%-22s %8.1f MB/s %12.0f tokens/s\n", "decode", double(decoded.size()) / 1e6 / s,
                double(all.size()) / s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
