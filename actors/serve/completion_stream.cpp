#include "actors/serve/completion_stream.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "actors/serve/api_request.hpp"
#include "data/text_stream.hpp"

namespace troupe::actors {

namespace {

using json = nlohmann::json;

// Events of every request of one call, from the workers' threads to the HTTP thread.
struct StreamQueue {
  struct Item {
    size_t choice = 0;
    TokenEvent event;
    std::optional<std::string> error;  // the request failed (no event)
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> items;
  std::vector<bool> heard;  // per choice: an event or an error arrived
  size_t heard_count = 0;

  void push(Item item) {
    {
      std::lock_guard lock(mu);
      if (!heard[item.choice]) {
        heard[item.choice] = true;
        ++heard_count;
      }
      items.push_back(std::move(item));
    }
    cv.notify_all();
  }
};

// Cancels every request of the call when the reply is gone (finished, or the client left).
struct Tickets {
  std::vector<RequestTicket> all;
  ~Tickets() {
    for (const RequestTicket& t : all) t.cancel();
  }
};

// One choice's text as it streams: what was sent, and what may still turn into a stop string.
struct ChoiceText {
  std::vector<int32_t> tokens;
  size_t sent = 0;  // bytes of the decoded text already sent

  // The text to send after `e` (its token appended).
  std::string next(const Tokenizer& tok, const TokenEvent& e, size_t hold_back) {
    // A stop token's text is not part of the answer (as vLLM's stop_token_ids).
    if (e.has_token && e.finish != FinishReason::stop_token) tokens.push_back(e.token);
    std::string text = tok.decode_skipping_special(tokens);
    size_t end = text.size();
    if (e.finish == FinishReason::stop_string) end = std::min(end, e.stop_text_bytes);
    if (e.finish == FinishReason::none) {
      end = settled_text_end(text);
      end = end > hold_back ? end - hold_back : 0;  // a stop string may be starting there
    }
    if (end <= sent) return "";
    std::string out = text.substr(sent, end - sent);
    sent = end;
    return out;
  }
};

const char* finish_name(FinishReason r) { return r == FinishReason::length ? "length" : "stop"; }

// The chunks of one call, in its shape.
struct ChunkMaker {
  const StreamCall& call;

  json wrap(json choices) const {
    return json{{"id", call.id},
                {"object", call.shape == StreamShape::chat ? "chat.completion.chunk" : "text_completion"},
                {"created", call.created},
                {"model", call.model},
                {"choices", std::move(choices)}};
  }
  // Choice `index`'s piece of text (with its log-probability object and finish reason).
  json piece(size_t index, const std::string& text, json logprobs, json finish) const {
    if (call.shape == StreamShape::completion)
      return wrap(json::array({{{"index", index},
                                {"text", text},
                                {"logprobs", std::move(logprobs)},
                                {"finish_reason", std::move(finish)}}}));
    return wrap(json::array({{{"index", index},
                              {"delta", text.empty() ? json::object() : json{{"content", text}}},
                              {"logprobs", nullptr},
                              {"finish_reason", std::move(finish)}}}));
  }
  // A chat stream opens each choice with the assistant's role.
  json role(size_t index) const {
    return wrap(json::array({{{"index", index},
                              {"delta", {{"role", "assistant"}, {"content", ""}}},
                              {"logprobs", nullptr},
                              {"finish_reason", nullptr}}}));
  }
};

// The chunks for one event of choice `index`: its text, and (chat) the finish on its own chunk.
std::vector<json> event_chunks(const ChunkMaker& make, size_t index, const std::string& text, json logprobs,
                               const TokenEvent& e) {
  const json finish = e.finish == FinishReason::none ? json(nullptr) : json(finish_name(e.finish));
  if (make.call.shape == StreamShape::completion) return {make.piece(index, text, std::move(logprobs), finish)};
  std::vector<json> out;
  if (!text.empty()) out.push_back(make.piece(index, text, nullptr, nullptr));
  if (!finish.is_null()) out.push_back(make.piece(index, "", nullptr, finish));
  return out;
}

// The stream's body, on the HTTP server's thread: every event of every choice as a chunk as it
// comes, until each choice has finished (or failed); the client leaving cancels the rest.
void write_events(StreamQueue& queue, const Tickets& tickets, size_t hold_back, const StreamCall& call,
                  const Tokenizer& tok, const ChunkWriter& write) {
  std::vector<ChoiceText> texts(call.choices.size());
  size_t open = call.choices.size();
  int64_t completion_tokens = 0;
  const ChunkMaker make{call};
  auto send = [&](const json& j) { return write("data: " + dump_json(j) + "\n\n"); };
  bool ok = true;
  if (call.shape == StreamShape::chat)
    for (size_t i = 0; i < call.choices.size() && ok; ++i) ok = send(make.role(i));
  while (open > 0 && ok) {
    std::deque<StreamQueue::Item> items;
    {
      std::unique_lock lock(queue.mu);
      queue.cv.wait(lock, [&] { return !queue.items.empty(); });
      items.swap(queue.items);
    }
    for (const StreamQueue::Item& item : items) {
      if (item.error) {  // a worker failed mid-stream
        --open;
        ok = send({{"error", {{"message", *item.error}, {"type", "server_error"}, {"param", nullptr}}}});
      } else {
        const TokenEvent& e = item.event;
        completion_tokens += e.has_token ? 1 : 0;
        json logprobs = nullptr;
        if (call.choices[item.choice].sampling.logprobs && e.has_token) {
          json top = nullptr;
          if (call.choices[item.choice].sampling.top_logprobs > 0) {
            json alternatives = json::object();
            for (const auto& [id, lp] : e.top_logprobs) alternatives[tok.decode(std::vector<int32_t>{id})] = lp;
            top = json::array({alternatives});
          }
          logprobs = {{"tokens", {tok.decode(std::vector<int32_t>{e.token})}},
                      {"token_logprobs", {e.logprob}},
                      {"top_logprobs", top}};
        }
        open -= e.finish != FinishReason::none ? 1 : 0;
        const std::string text = texts[item.choice].next(tok, e, hold_back);
        for (const json& chunk : event_chunks(make, item.choice, text, std::move(logprobs), e)) ok = ok && send(chunk);
      }
      if (!ok) break;
    }
  }
  if (!ok) {  // the client left
    for (const RequestTicket& t : tickets.all) t.cancel();
    return;
  }
  if (call.include_usage) {
    int64_t prompt_tokens = 0;
    for (const GenerationRequest& c : call.choices) prompt_tokens += int64_t(c.prompt.size());
    json last = make.wrap(json::array());
    last["usage"] = {{"prompt_tokens", prompt_tokens},
                     {"completion_tokens", completion_tokens},
                     {"total_tokens", prompt_tokens + completion_tokens}};
    if (!send(last)) return;
  }
  write("data: [DONE]\n\n");
}

}  // namespace

HttpReply stream_completions(InferencePool& pool, std::unique_ptr<Tokenizer> tok, StreamCall call) {
  const size_t n = call.choices.size();
  auto queue = std::make_shared<StreamQueue>();
  queue->heard.assign(n, false);
  auto tickets = std::make_shared<Tickets>();
  for (size_t i = 0; i < n; ++i)  // PoolFull leaves here; `tickets` cancels those submitted
    tickets->all.push_back(pool.submit(
        call.choices[i],
        [queue, i](const TokenEvent& e) {
          queue->push({i, e, std::nullopt});
        },
        [queue, i](const std::string& why) {
          queue->push({i, TokenEvent{}, why});
        }));
  {
    std::unique_lock lock(queue->mu);
    queue->cv.wait(lock, [&] { return queue->heard_count == n; });
    for (const StreamQueue::Item& item : queue->items)
      if (item.error)
        throw ApiError(
            400, call.shape == StreamShape::chat ? "messages" : "prompt",
            str_cat(call.shape == StreamShape::chat ? "choice " : "prompt ", item.choice, ": ", *item.error));
  }
  size_t hold_back = 0;
  for (const GenerationRequest& c : call.choices)
    for (const std::string& s : c.sampling.stop_strings) hold_back = std::max(hold_back, s.size() - 1);

  HttpReply reply(200, "", "text/event-stream");
  reply.stream = [queue, tickets, hold_back, call = std::move(call), tok = std::shared_ptr<Tokenizer>(std::move(tok))](
                     const ChunkWriter& write) { write_events(*queue, *tickets, hold_back, call, *tok, write); };
  return reply;
}

}  // namespace troupe::actors
