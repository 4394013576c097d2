#include "model/inference_engine.hpp"

#include <algorithm>

#include "kernels/argmax.hpp"
#include "kernels/check.hpp"
#include "kernels/elementwise.hpp"

namespace troupe {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::length: return "length";
    case FinishReason::stop_token:
    case FinishReason::stop_string: return "stop";
    case FinishReason::cancelled: return "cancelled";
  }
  return "?";
}

struct InferenceEngine::Request {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // prompt, then the generated tokens
  size_t prompt_len = 0;
  int64_t cached = 0;           // tokens whose keys and values are in the cache
  int64_t reserve = 0;          // tokens the request may reach (prompt + max_tokens, capped)
  std::vector<int32_t> blocks;  // its block table
  SamplingParams params;
  TokenSampler sampler;
  TokenCallback on_token;
  size_t text_checked = 0;      // bytes of generated text already searched for stop strings
  bool cancelled = false;
  FinishReason finish = FinishReason::none;

  Request(int64_t i, GenerationRequest&& r, TokenCallback cb)
      : id(i), tokens(std::move(r.prompt)), prompt_len(tokens.size()), params(std::move(r.sampling)),
        sampler(params), on_token(std::move(cb)) {}
  std::span<const int32_t> generated() const { return std::span(tokens).subspan(prompt_len); }
};

InferenceEngine::InferenceEngine(InferenceModel& model, EngineOptions options, Detokenizer detokenize)
    : model_(model),
      options_(options),
      detokenize_(std::move(detokenize)),
      cache_(model.context(), model.config(), model.compute_dtype(), options.num_blocks, options.block_size) {
  const InferenceModelOptions& m = model.options();
  if (options_.max_tokens_per_step == 0) options_.max_tokens_per_step = m.max_tokens;
  if (options_.max_sequences == 0) options_.max_sequences = m.max_sequences;
  if (options_.max_sequence_length == 0) options_.max_sequence_length = model.max_sequence_length();
  TROUPE_CHECK(options_.max_tokens_per_step > 0 && options_.max_tokens_per_step <= m.max_tokens,
               "InferenceEngine: max_tokens_per_step ", options_.max_tokens_per_step, " must be in [1, ", m.max_tokens,
               "] (the model's max_tokens)");
  TROUPE_CHECK(options_.max_sequences > 0 && options_.max_sequences <= m.max_sequences, "InferenceEngine: max_sequences ",
               options_.max_sequences, " must be in [1, ", m.max_sequences, "] (the model's max_sequences)");
  TROUPE_CHECK(options_.max_sequence_length > 0 && options_.max_sequence_length <= model.max_sequence_length(),
               "InferenceEngine: max_sequence_length ", options_.max_sequence_length, " must be in [1, ",
               model.max_sequence_length(), "]");
  greedy_tokens_ = Tensor::empty(model.context(), DType::i32, {options_.max_sequences});
  greedy_logprobs_ = Tensor::empty(model.context(), DType::f32, {options_.max_sequences});
}

InferenceEngine::~InferenceEngine() = default;

int64_t InferenceEngine::add_request(GenerationRequest request, TokenCallback on_token) {
  const int64_t n = int64_t(request.prompt.size());
  TROUPE_CHECK(n > 0, "generation request: the prompt is empty");
  TROUPE_CHECK(n <= options_.max_tokens_per_step, "generation request: the prompt has ", n,
               " tokens, more than a step takes (", options_.max_tokens_per_step, ")");
  TROUPE_CHECK(n <= options_.max_sequence_length, "generation request: the prompt has ", n,
               " tokens, the model takes at most ", options_.max_sequence_length);
  TROUPE_CHECK(request.sampling.stop_strings.empty() || detokenize_,
               "generation request: stop strings need an engine with a detokenizer");
  auto r = std::make_unique<Request>(next_id_, std::move(request), std::move(on_token));
  r->reserve = std::min(n + r->params.max_tokens, options_.max_sequence_length);
  TROUPE_CHECK(cache_.blocks_for(r->reserve) <= cache_.num_blocks(), "generation request: ", r->reserve,
               " tokens need ", cache_.blocks_for(r->reserve), " KV-cache blocks, the cache has ", cache_.num_blocks());
  waiting_.push_back(std::move(r));
  return next_id_++;
}

bool InferenceEngine::cancel(int64_t request) {
  auto match = [&](const std::unique_ptr<Request>& r) {
    return r->id == request && r->finish == FinishReason::none && !r->cancelled;
  };
  auto w = std::find_if(waiting_.begin(), waiting_.end(), match);
  if (w != waiting_.end()) return (*w)->cancelled = true;
  auto r = std::find_if(running_.begin(), running_.end(), match);
  if (r != running_.end()) return (*r)->cancelled = true;
  return false;
}

void InferenceEngine::finish(Request& r, FinishReason reason, std::vector<TokenEvent>& events) {
  r.finish = reason;
  events.push_back({.request = r.id, .finish = reason});
}

bool InferenceEngine::admit(Request& r, int64_t& tokens_left) {
  const int64_t n = int64_t(r.tokens.size());
  if (n > tokens_left || int64_t(running_.size()) >= options_.max_sequences) return false;
  if (!cache_.allocate(cache_.blocks_for(r.reserve), r.blocks)) return false;
  tokens_left -= n;
  return true;
}

std::vector<SampledToken> InferenceEngine::choose(const Tensor& logits) {
  const Context& ctx = model_.context();
  const int64_t s = int64_t(running_.size()), vocab = model_.config().vocab_size;
  std::vector<SampledToken> out(static_cast<size_t>(s));
  if (std::all_of(running_.begin(), running_.end(), [](const auto& r) { return r->params.greedy(); })) {
    const Tensor tokens = greedy_tokens_.slice(0, {s}), logprobs = greedy_logprobs_.slice(0, {s});
    argmax_logprob(ctx, logits, vocab, tokens, logprobs);
    const Tensor t = to_host_f32(ctx, tokens), lp = to_host_f32(ctx, logprobs);
    for (int64_t i = 0; i < s; ++i)
      out[size_t(i)] = {t.data_as<int32_t>()[i], running_[size_t(i)]->params.logprobs ? lp.data_as<float>()[i] : 0.0f};
    return out;
  }
  Tensor host = logits;  // the CPU's logits are host f32 already
  if (ctx.is_cuda()) {
    const int64_t vp = logits.dim(1);
    if (!pinned_f32_.defined()) {
      device_f32_ = Tensor::empty(ctx, DType::f32, {options_.max_sequences, vp});
      pinned_f32_ = Tensor::pinned_host(DType::f32, {options_.max_sequences, vp});
    }
    Tensor f32 = logits;
    if (logits.dtype() != DType::f32) {
      f32 = device_f32_.slice(0, {s, vp});
      convert(ctx, logits, f32);
    }
    host = pinned_f32_.slice(0, {s, vp});
    copy(ctx, f32, host);
    ctx.synchronize();
  }
  // Each request has its own sampler (and random stream): rows are independent.
#pragma omp parallel for schedule(dynamic)
  for (int64_t i = 0; i < s; ++i)
    out[size_t(i)] = running_[size_t(i)]->sampler.sample(
        std::span(host.data_as<float>() + i * host.dim(1), size_t(vocab)));
  return out;
}

void InferenceEngine::accept(Request& r, const SampledToken& t, std::vector<TokenEvent>& events) {
  r.tokens.push_back(t.token);
  TokenEvent e{.request = r.id, .has_token = true, .token = t.token, .logprob = t.logprob};
  const std::vector<int32_t>& stops = r.params.stop_tokens;
  if (std::find(stops.begin(), stops.end(), t.token) != stops.end()) {
    e.finish = FinishReason::stop_token;
  } else if (!r.params.stop_strings.empty()) {
    const std::string text = detokenize_(r.generated());
    const size_t at = find_stop_string(text, r.params.stop_strings, r.text_checked);
    r.text_checked = text.size();
    if (at != std::string::npos) {
      e.finish = FinishReason::stop_string;
      e.stop_text_bytes = at;
    }
  }
  if (e.finish == FinishReason::none &&
      (int64_t(r.generated().size()) >= r.params.max_tokens || int64_t(r.tokens.size()) >= options_.max_sequence_length))
    e.finish = FinishReason::length;
  r.finish = e.finish;
  events.push_back(e);
}

bool InferenceEngine::step() {
  std::vector<std::pair<Request*, TokenEvent>> out;  // delivered after the engine's state is updated
  std::vector<TokenEvent> events;
  auto deliver_to = [&](Request& r) {
    for (const TokenEvent& e : events) out.push_back({&r, e});
    events.clear();
  };
  std::vector<std::unique_ptr<Request>> done;  // finished this step: alive until their events are out

  // Cancelled requests leave first.
  for (auto& r : running_)
    if (r->cancelled) {
      finish(*r, FinishReason::cancelled, events);
      deliver_to(*r);
      cache_.release(r->blocks);
    }
  for (auto& r : waiting_)
    if (r->cancelled) {
      finish(*r, FinishReason::cancelled, events);
      deliver_to(*r);
    }
  auto is_done = [](const std::unique_ptr<Request>& r) { return r->finish != FinishReason::none; };
  auto retire = [&](auto& queue) {
    for (auto& r : queue)
      if (is_done(r)) done.push_back(std::move(r));
    queue.erase(std::remove_if(queue.begin(), queue.end(), [](const auto& r) { return !r; }), queue.end());
  };
  retire(running_);
  retire(waiting_);

  // Admission in arrival order: decodes of the running requests take one token each.
  int64_t tokens_left = options_.max_tokens_per_step - int64_t(running_.size());
  while (!waiting_.empty()) {
    Request& r = *waiting_.front();
    if (r.params.max_tokens == 0) {  // nothing to generate
      finish(r, FinishReason::length, events);
      deliver_to(r);
      done.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      continue;
    }
    if (!admit(r, tokens_left)) break;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }

  if (!running_.empty()) {
    std::vector<SequenceInput> batch;
    for (const auto& r : running_)
      batch.push_back({std::span(r->tokens).subspan(size_t(r->cached)), r->cached, r->blocks});
    const std::vector<SampledToken> next = choose(model_.forward(batch, cache_));
    for (size_t i = 0; i < running_.size(); ++i) {
      Request& r = *running_[i];
      r.cached = int64_t(r.tokens.size());
      accept(r, next[i], events);
      deliver_to(r);
      if (r.finish != FinishReason::none) cache_.release(r.blocks);
    }
    retire(running_);
  }

  for (auto& [r, e] : out)
    if (r->on_token) r->on_token(e);
  return !running_.empty() || !waiting_.empty();
}

void InferenceEngine::run() {
  while (step()) {
  }
}

}  // namespace troupe
