#include "apps/generate/generate_stream.hpp"

#include <algorithm>

#include "data/text_stream.hpp"

namespace troupe::apps {

OrderedStream::OrderedStream(std::FILE* out, const Tokenizer& tokenizer, std::vector<std::string> prompts,
                             std::vector<std::string> stop_strings, StreamExtras extras)
    : out_(out), tokenizer_(tokenizer), extras_(extras) {
  for (std::string& p : prompts) entries_.push_back({.prompt = std::move(p)});
  for (const std::string& s : stop_strings) hold_back_ = std::max(hold_back_, s.size() - 1);
}

void OrderedStream::on_event(size_t index, const TokenEvent& e) {
  Entry& entry = entries_.at(index);
  if (e.has_token) {
    entry.tokens.push_back(e.token);
    entry.logprobs.push_back(e.logprob);
    ++generated_;
  }
  if (e.finish != FinishReason::none) {
    entry.finish = e.finish;
    if (e.finish == FinishReason::stop_string) entry.end = e.stop_text_bytes;
  }
  flush();
}

void OrderedStream::write(Entry& e) {
  if (!e.started) {
    if (entries_.size() > 1) std::fprintf(out_, "==== prompt %zu\n", size_t(&e - entries_.data()) + 1);
    std::fputs(e.prompt.c_str(), out_);
    e.started = true;
  }
  const std::string text = tokenizer_.decode_skipping_special(e.tokens);
  const bool done = e.finish != FinishReason::none;
  const size_t settled = settled_text_end(text);
  size_t upto = done ? std::min(e.end, text.size()) : (settled > hold_back_ ? settled - hold_back_ : 0);
  if (upto > e.printed) {
    std::fwrite(text.data() + e.printed, 1, upto - e.printed, out_);
    e.printed = upto;
  }
  if (done) {
    std::fputc('\n', out_);
    if (extras_.logprobs) {
      std::fputs("logprobs:", out_);
      for (float lp : e.logprobs) std::fprintf(out_, " %.4f", lp);
      std::fputc('\n', out_);
    }
    if (extras_.ids) {
      std::fputs("ids:", out_);
      for (int32_t id : e.tokens) std::fprintf(out_, " %d", id);
      std::fputc('\n', out_);
    }
    std::fflush(out_);
    std::fprintf(stderr, "[%zu tokens, finish: %s]\n", e.tokens.size(), finish_reason_name(e.finish));
  }
  std::fflush(out_);
}

void OrderedStream::flush() {
  while (next_ < entries_.size()) {
    Entry& e = entries_[next_];
    write(e);
    if (e.finish == FinishReason::none) return;
    ++next_;
  }
}

}  // namespace troupe::apps
