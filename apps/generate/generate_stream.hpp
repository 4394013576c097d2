// Prints the completions of several requests to a FILE in request order while they are
// generated together: the first unfinished request streams as its tokens arrive, the others
// are held until it is done. Text that could still turn out to be the start of a stop string
// is held back until the next token decides. Each completion's token count and finish reason
// go to stderr, so stdout holds only the text (and the log-probs when asked for).
//
//   OrderedStream out(stdout, tokenizer, prompts, stop_strings, {.logprobs = true});
//   engine.add_request(req, [&](const TokenEvent& e) { out.on_event(i, e); });
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "data/tokenizer.hpp"
#include "model/inference/inference_engine.hpp"

namespace troupe::apps {

// What each completion prints after its text, one line each.
struct StreamExtras {
  bool logprobs = false;  // "logprobs: -0.1234 ..."
  bool ids = false;       // "ids: 464 3290 ..." (the generated token ids)
};

class OrderedStream {
 public:
  OrderedStream(std::FILE* out, const Tokenizer& tokenizer, std::vector<std::string> prompts,
                std::vector<std::string> stop_strings, StreamExtras extras);
  // The engine's event for request number `index` (the order of `prompts`).
  void on_event(size_t index, const TokenEvent& e);
  bool all_done() const { return next_ == entries_.size(); }
  int64_t generated_tokens() const { return generated_; }

 private:
  struct Entry {
    std::string prompt;
    std::vector<int32_t> tokens{};
    std::vector<float> logprobs{};
    size_t printed = 0;              // bytes of generated text written
    size_t end = std::string::npos;  // where the text ends (stop string), once finished
    FinishReason finish = FinishReason::none;
    bool started = false;  // its prompt is written
  };
  void flush();  // writes what can be written, in order
  void write(Entry& e);

  std::FILE* out_;
  const Tokenizer& tokenizer_;
  std::vector<Entry> entries_;
  size_t hold_back_ = 0;  // longest stop string - 1
  StreamExtras extras_;
  size_t next_ = 0;  // the first request not completely written
  int64_t generated_ = 0;
};

}  // namespace troupe::apps
