#include "data/preprocess.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "storage/mapped_file.hpp"

namespace troupe {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxSkippedExamples = 5;

// Position of the first byte that is not part of well-formed UTF-8 (RFC 3629), or npos.
size_t invalid_utf8_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
    if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c == 0xE0)
      len = 3, lo = 0xA0;
    else if (c >= 0xE1 && c <= 0xEC)
      len = 3;
    else if (c == 0xED)
      len = 3, hi = 0x9F;  // no surrogates
    else if (c >= 0xEE && c <= 0xEF)
      len = 3;
    else if (c == 0xF0)
      len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3)
      len = 4;
    else if (c == 0xF4)
      len = 4, hi = 0x8F;
    else
      return i;
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string_view::npos;
}

bool is_blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

// The tokens of one key over a chunk's documents.
struct KeyTokens {
  std::vector<int32_t> tokens;
  std::vector<int32_t> sequence_lengths;
  std::vector<int32_t> sequences_per_document;
};

struct LineError {
  int64_t line = 0;  // 0-based within the chunk
  std::string message;
};

struct ChunkResult {
  std::vector<KeyTokens> keys;
  int64_t documents = 0, lines = 0, blank = 0;
  std::vector<LineError> errors;  // skipped lines, or the one that stops the run
  bool fatal = false;
  int64_t end_offset = 0;
};

// Turns lines into tokens for one worker (owns its tokenizer clone).
class LineEncoder {
 public:
  LineEncoder(const PreprocessOptions& options, std::unique_ptr<Tokenizer> tokenizer)
      : options_(options), tokenizer_(std::move(tokenizer)) {}

  // Appends the line's document to `out`, or returns what is wrong with it (appending nothing).
  std::optional<std::string> encode(std::string_view line, std::vector<KeyTokens>& out) {
    json doc;
    try {
      doc = json::parse(line.begin(), line.end());
    } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e99999
      const size_t bad = invalid_utf8_at(line);
      if (bad != std::string_view::npos)
        return str_cat("invalid UTF-8 (byte 0x", hex(uint8_t(line[bad])), " at column ", bad + 1, ")");
      std::string what = e.what();
      if (const size_t k = what.find("] "); k != std::string::npos) what = what.substr(k + 2);
      return str_cat("invalid JSON: ", what);
    }
    if (!doc.is_object()) return str_cat("not a JSON object (a ", doc.type_name(), ")");
    // Check every key before tokenizing any, so a bad line adds nothing anywhere.
    std::vector<std::vector<const std::string*>> texts(options_.json_keys.size());
    for (size_t k = 0; k < options_.json_keys.size(); ++k) {
      const std::string& key = options_.json_keys[k];
      const auto it = doc.find(key);
      if (it == doc.end()) return str_cat("no key \"", key, "\"");
      if (it->is_string()) {
        texts[k].push_back(it->get_ptr<const std::string*>());
      } else if (it->is_array()) {
        for (size_t i = 0; i < it->size(); ++i) {
          const json& s = (*it)[i];
          if (!s.is_string())
            return str_cat("key \"", key, "\": element ", i, " is a ", s.type_name(), ", not a string");
          texts[k].push_back(s.get_ptr<const std::string*>());
        }
      } else {
        return str_cat("key \"", key, "\" is a ", it->type_name(), ", not a string (or a list of strings)");
      }
    }
    std::vector<std::array<size_t, 3>> marks;  // to roll back if a tokenizer throws
    for (const auto& kt : out)
      marks.push_back({kt.tokens.size(), kt.sequence_lengths.size(), kt.sequences_per_document.size()});
    try {
      for (size_t k = 0; k < texts.size(); ++k) {
        KeyTokens& kt = out[k];
        const size_t doc_begin = kt.tokens.size();
        int32_t sequences = 0;
        for (const std::string* text : texts[k]) {
          const size_t before = kt.tokens.size();
          // With the post-processor's tokens (an HF tokenizer's BOS), as Megatron's
          // HuggingFaceTokenizer encodes by default (include_special_tokens).
          tokenizer_->encode_with_special_tokens_append(*text, kt.tokens);
          const size_t n = kt.tokens.size() - before;
          if (n == 0) continue;  // Megatron drops empty sentences
          TROUPE_CHECK(n <= size_t(INT32_MAX), "a sequence of ", n, " tokens does not fit the index");
          kt.sequence_lengths.push_back(int32_t(n));
          ++sequences;
        }
        if (options_.append_eod && kt.tokens.size() > doc_begin) {
          kt.tokens.push_back(tokenizer_->eod());
          ++kt.sequence_lengths.back();
        }
        kt.sequences_per_document.push_back(sequences);
      }
    } catch (const std::exception& e) {
      for (size_t k = 0; k < out.size(); ++k) {
        out[k].tokens.resize(marks[k][0]);
        out[k].sequence_lengths.resize(marks[k][1]);
        out[k].sequences_per_document.resize(marks[k][2]);
      }
      return str_cat("cannot tokenize: ", e.what());
    }
    return std::nullopt;
  }

 private:
  static std::string hex(uint8_t b) {
    const char* digits = "0123456789ABCDEF";
    return {digits[b >> 4], digits[b & 15]};
  }

  const PreprocessOptions& options_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

// Chunks of whole lines handed out in order; results collected for the writer in order.
class ChunkQueue {
 public:
  ChunkQueue(const uint8_t* data, int64_t size, size_t chunk_bytes, int64_t window)
      : data_(data), size_(size), chunk_bytes_(std::max<size_t>(chunk_bytes, 1)), window_(window) {}

  struct Chunk {
    int64_t id;
    int64_t begin, end;
  };

  // The next chunk to encode, or nullopt when none is left or the run stops.
  std::optional<Chunk> take() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return stop_ || next_begin_ >= size_ || next_id_ < written_ + window_; });
    if (stop_ || next_begin_ >= size_) return std::nullopt;
    int64_t end = std::min<int64_t>(next_begin_ + int64_t(chunk_bytes_), size_);
    if (end < size_) {
      const void* nl = std::memchr(data_ + end - 1, '\n', size_t(size_ - (end - 1)));
      end = nl ? int64_t(static_cast<const uint8_t*>(nl) - data_) + 1 : size_;
    }
    Chunk c{next_id_++, next_begin_, end};
    next_begin_ = end;
    if (next_begin_ >= size_) total_ = next_id_;
    return c;
  }

  void put(int64_t id, ChunkResult r) {
    std::lock_guard lock(mu_);
    done_.emplace(id, std::move(r));
    cv_.notify_all();
  }

  void fail(std::exception_ptr e) {
    std::lock_guard lock(mu_);
    if (!error_) error_ = e;
    stop_ = true;
    cv_.notify_all();
  }

  void stop() {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  bool stopped() {
    std::lock_guard lock(mu_);
    return stop_;
  }

  // The next result in input order; nullopt after the last one.
  std::optional<ChunkResult> next_result() {
    std::unique_lock lock(mu_);
    cv_.wait(lock,
             [&] { return error_ || done_.count(written_) || (total_ >= 0 && written_ >= total_) || size_ == 0; });
    if (error_) std::rethrow_exception(error_);
    const auto it = done_.find(written_);
    if (it == done_.end()) return std::nullopt;
    ChunkResult r = std::move(it->second);
    done_.erase(it);
    ++written_;
    cv_.notify_all();
    return r;
  }

 private:
  const uint8_t* data_;
  int64_t size_;
  size_t chunk_bytes_;
  int64_t window_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t next_begin_ = 0, next_id_ = 0, written_ = 0, total_ = -1;
  bool stop_ = false;
  std::exception_ptr error_;
  std::map<int64_t, ChunkResult> done_;
};

ChunkResult encode_chunk(LineEncoder& encoder, const uint8_t* data, const ChunkQueue::Chunk& c, size_t num_keys,
                         bool skip_bad_lines) {
  ChunkResult r;
  r.keys.resize(num_keys);
  r.end_offset = c.end;
  const char* text = reinterpret_cast<const char*>(data);
  int64_t pos = c.begin;
  while (pos < c.end) {
    const void* nl = std::memchr(text + pos, '\n', size_t(c.end - pos));
    const int64_t line_end = nl ? int64_t(static_cast<const char*>(nl) - text) : c.end;
    std::string_view line(text + pos, size_t(line_end - pos));
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (is_blank(line)) {
      ++r.blank;
    } else if (auto error = encoder.encode(line, r.keys)) {
      r.errors.push_back({r.lines, std::move(*error)});
      if (!skip_bad_lines) {
        r.fatal = true;
        return r;
      }
    } else {
      ++r.documents;
    }
    ++r.lines;
    pos = line_end + 1;
  }
  return r;
}

}  // namespace

std::string preprocess_output_prefix(const std::string& output_prefix, const std::string& key) {
  return str_cat(output_prefix, "_", key, "_document");
}

PreprocessResult preprocess_jsonl(const PreprocessOptions& options,
                                  const std::function<void(const PreprocessProgress&)>& on_progress) {
  const auto t0 = Clock::now();
  TROUPE_CHECK(!options.input.empty(), "preprocess: no --input");
  TROUPE_CHECK(!options.output_prefix.empty(), "preprocess: no --output-prefix");
  TROUPE_CHECK(!options.json_keys.empty(), "preprocess: no --json-keys");
  std::set<std::string> unique_keys(options.json_keys.begin(), options.json_keys.end());
  TROUPE_CHECK(unique_keys.size() == options.json_keys.size(), "preprocess: a key is given twice in --json-keys");

  const std::unique_ptr<Tokenizer> tokenizer = build_tokenizer(options.tokenizer);
  const MappedFile input = MappedFile::open(options.input);
  const TokenDtype dtype = optimal_token_dtype(tokenizer->vocab_size());

  std::vector<std::unique_ptr<IndexedDatasetBuilder>> builders;
  for (const std::string& key : options.json_keys)
    builders.push_back(
        std::make_unique<IndexedDatasetBuilder>(preprocess_output_prefix(options.output_prefix, key), dtype));

  int workers = options.workers;
  if (workers <= 0) workers = int(std::max(1u, std::thread::hardware_concurrency()));
  // Enough chunks to keep every worker busy on a small input; never above chunk_bytes.
  const size_t chunk_bytes =
      std::min(options.chunk_bytes, std::max<size_t>(input.size() / (size_t(workers) * 16), size_t(64) << 10));
  ChunkQueue queue(input.data(), int64_t(input.size()), chunk_bytes, 4 * int64_t(workers));

  std::vector<std::thread> threads;
  // Stops and joins the workers on every way out, errors included.
  struct Joiner {
    ChunkQueue& queue;
    std::vector<std::thread>& threads;
    ~Joiner() {
      queue.stop();
      for (auto& t : threads) t.join();
    }
  } joiner{queue, threads};
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, clone = tokenizer->clone()]() mutable {
      try {
        LineEncoder encoder(options, std::move(clone));
        while (auto chunk = queue.take()) {
          ChunkResult r = encode_chunk(encoder, input.data(), *chunk, options.json_keys.size(), options.skip_bad_lines);
          const bool fatal = r.fatal;
          queue.put(chunk->id, std::move(r));
          if (fatal) queue.stop();  // chunks before this one are already taken and will finish
        }
      } catch (...) {
        queue.fail(std::current_exception());
      }
    });
  }

  PreprocessResult result;
  result.input_bytes = int64_t(input.size());
  int64_t lines_before = 0;
  while (auto chunk = queue.next_result()) {
    for (const LineError& e : chunk->errors) {
      const std::string where = str_cat(options.input, ":", lines_before + e.line + 1, ": ", e.message);
      if (chunk->fatal) TROUPE_FAIL(where, " (--skip-bad-lines skips such lines)");
      ++result.skipped_lines;
      if (result.skipped_examples.size() < kMaxSkippedExamples) result.skipped_examples.push_back(where);
    }
    for (size_t k = 0; k < builders.size(); ++k) {
      const KeyTokens& kt = chunk->keys[k];
      size_t token_at = 0, length_at = 0;
      for (int32_t sequences : kt.sequences_per_document) {
        size_t n = 0;
        for (int32_t s = 0; s < sequences; ++s) n += size_t(kt.sequence_lengths[length_at + size_t(s)]);
        builders[k]->add_document(std::span(kt.tokens).subspan(token_at, n),
                                  std::span(kt.sequence_lengths).subspan(length_at, size_t(sequences)));
        token_at += n;
        length_at += size_t(sequences);
      }
    }
    result.documents += chunk->documents;
    result.blank_lines += chunk->blank;
    lines_before += chunk->lines;
    if (on_progress) {
      PreprocessProgress p;
      p.documents = result.documents;
      p.bytes_done = chunk->end_offset;
      p.bytes_total = result.input_bytes;
      p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      on_progress(p);
    }
  }

  for (size_t k = 0; k < builders.size(); ++k) {
    builders[k]->finalize();
    PreprocessOutput out;
    out.key = options.json_keys[k];
    out.path_prefix = builders[k]->path_prefix();
    out.dtype = dtype;
    out.documents = builders[k]->num_documents();
    out.sequences = builders[k]->num_sequences();
    out.tokens = builders[k]->num_tokens();
    result.outputs.push_back(out);
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return result;
}

}  // namespace troupe
