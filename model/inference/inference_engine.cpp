#include "model/inference/inference_engine.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string_view>
#include <thread>

#include <omp.h>

#include "kernels/argmax.hpp"
#include "base/check.hpp"
#include "base/log.hpp"
#include "kernels/elementwise.hpp"

namespace troupe {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::none:
      return "none";
    case FinishReason::length:
      return "length";
    case FinishReason::stop_token:
    case FinishReason::stop_string:
      return "stop";
    case FinishReason::cancelled:
      return "cancelled";
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
  size_t text_checked = 0;  // bytes of generated text already searched for stop strings
  bool cancelled = false;
  FinishReason finish = FinishReason::none;

  Request(int64_t i, GenerationRequest&& r, TokenCallback cb)
      : id(i),
        tokens(std::move(r.prompt)),
        prompt_len(tokens.size()),
        params(std::move(r.sampling)),
        sampler(params),
        on_token(std::move(cb)) {}
  std::span<const int32_t> generated() const { return std::span(tokens).subspan(prompt_len); }
};

struct InferenceEngine::Rank {
  InferenceModel& model;
  KvCache cache;
  int64_t vocab_start = 0, real = 0;              // its slice's first column; real (not padding) columns
  Tensor tokens, logprobs, maxes;                 // [max_sequences] on the device: the greedy pick in its slice
  Tensor device_f32;                              // [max_sequences, Vl] (bf16/f16 logits, on first use): f32 rows
  Tensor pinned_f32;                              // [max_sequences, Vl] (one CUDA rank, on first use): host rows
  Tensor host_tokens, host_logprobs, host_maxes;  // [max_sequences] pinned: this step's greedy pick
  Tensor host_rows;                               // one rank: this step's sampling rows on the host
  std::atomic<const char*> phase{"done"};         // where this rank's step is (a late rank's error names it)

  Rank(InferenceModel& m, const EngineOptions& o)
      : model(m),
        cache(m.context(), m.config(), m.compute_dtype(), o.num_blocks, o.block_size, m.tensor_parallel().shard.size),
        vocab_start(m.layout().vocab_start()),
        real(std::clamp(m.config().vocab_size - vocab_start, int64_t(0), m.layout().local_vocab())) {}
};

// Runs fn(r) for every rank, rank 0 on the calling thread and the others on threads of their
// own that live as long as the engine (a rank's device stays current on its thread). A watchdog
// thread ends a step that runs past the timeout: it aborts the group's collectives, which
// releases the ranks waiting in them, and the step fails naming the ranks that were late and
// where they were.
class InferenceEngine::RankThreads {
 public:
  RankThreads(std::vector<std::unique_ptr<Rank>>& ranks, double timeout_s)
      : ranks_(ranks),
        timeout_(
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s))) {
    TROUPE_CHECK(timeout_s > 0, "InferenceEngine: step_timeout_s must be positive, got ", timeout_s);
    for (size_t r = 1; r < ranks.size(); ++r) threads_.emplace_back([this, r] { loop(int(r)); });
    watchdog_ = std::thread([this] { watch(); });
  }
  ~RankThreads() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    watch_.notify_all();
    for (auto& t : threads_) t.join();
    watchdog_.join();
  }
  // Returns once every rank has run fn; a failure or the timeout aborts the group's collectives
  // (so no rank waits for one that failed) and the first error is rethrown.
  void run(const std::function<void(int)>& fn) {
    {
      std::lock_guard lock(mu_);
      TROUPE_CHECK(!aborted_, "InferenceEngine: the tensor-parallel group was aborted by an earlier failure");
      job_ = &fn;
      pending_ = int(threads_.size());
      rank0_done_ = false;
      error_ = nullptr;
      ++generation_;
      deadline_ = std::chrono::steady_clock::now() + timeout_;
      for (auto& k : ranks_) k->phase = "not started";
    }
    start_.notify_all();
    watch_.notify_all();
    try {
      fn(0);
    } catch (...) {
      fail(std::current_exception());
    }
    std::unique_lock lock(mu_);
    rank0_done_ = true;
    done_.wait(lock, [&] { return pending_ == 0; });
    watch_.notify_all();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  bool step_over() const { return rank0_done_ && pending_ == 0; }

  void loop(int r) {
    ranks_[size_t(r)]->model.context().activate();
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      {
        std::unique_lock lock(mu_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      try {
        (*job)(r);
      } catch (...) {
        fail(std::current_exception());
      }
      std::lock_guard lock(mu_);
      if (--pending_ == 0) done_.notify_all();
    }
  }

  void watch() {
    std::unique_lock lock(mu_);
    uint64_t watched = 0;
    for (;;) {
      watch_.wait(lock, [&] { return stop_ || (generation_ != watched && !step_over()); });
      if (stop_) return;
      watched = generation_;
      if (watch_.wait_until(lock, deadline_, [&] { return stop_ || step_over(); })) continue;
      std::string late;
      for (size_t r = 0; r < ranks_.size(); ++r)
        if (const char* at = ranks_[r]->phase.load(); std::string_view(at) != "done")
          late += str_cat(late.empty() ? "" : ", ", "rank ", r, " (", at, ")");
      const double s = std::chrono::duration<double>(timeout_).count();
      auto e =
          std::make_exception_ptr(Error(str_cat("InferenceEngine: a tensor-parallel step did not finish within ", s,
                                                " s; late: ", late, ". The group's collectives were aborted.")));
      lock.unlock();
      fail(e);
      lock.lock();
      // Aborted collectives return; a rank stuck elsewhere would leave the caller waiting for ever.
      if (!watch_.wait_for(lock, std::chrono::seconds(30), [&] { return stop_ || step_over(); })) {
        logger("serve").error(error_message(e), " The late ranks did not return within 30 s of the abort; exiting.");
        std::_Exit(70);
      }
    }
  }

  void fail(std::exception_ptr e) {
    {
      std::lock_guard lock(mu_);
      if (!error_) error_ = e;
      if (aborted_) return;
      aborted_ = true;
    }
    for (auto& k : ranks_) k->model.tensor_parallel().comm->abort();
  }

  static std::string error_message(std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      return x.what();
    }
  }

  std::vector<std::unique_ptr<Rank>>& ranks_;
  const std::chrono::steady_clock::duration timeout_;
  std::mutex mu_;
  std::condition_variable start_, done_, watch_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool rank0_done_ = true;
  bool stop_ = false;
  bool aborted_ = false;
  std::chrono::steady_clock::time_point deadline_;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
  std::thread watchdog_;
};

InferenceEngine::InferenceEngine(InferenceModel& model, EngineOptions options, Detokenizer detokenize)
    : InferenceEngine(std::vector<InferenceModel*>{&model}, options, std::move(detokenize)) {}

namespace {
InferenceModel& first_rank(const std::vector<InferenceModel*>& ranks) {
  TROUPE_CHECK(!ranks.empty() && ranks[0] != nullptr, "InferenceEngine: no model");
  return *ranks[0];
}
}  // namespace

InferenceEngine::InferenceEngine(std::vector<InferenceModel*> ranks, EngineOptions options, Detokenizer detokenize)
    : model_(first_rank(ranks)), options_(options), detokenize_(std::move(detokenize)) {
  const int T = int(ranks.size());
  for (int r = 0; r < T; ++r) {
    const InferenceModel* m = ranks[size_t(r)];
    TROUPE_CHECK(m != nullptr && m->tensor_parallel().shard.rank == r && m->tensor_parallel().shard.size == T,
                 "InferenceEngine: model ", r, " of ", T, " is not tensor-parallel rank ", r, " of ", T);
    TROUPE_CHECK(m->compute_dtype() == model_.compute_dtype() &&
                     m->options().max_tokens == model_.options().max_tokens &&
                     m->options().max_sequences == model_.options().max_sequences,
                 "InferenceEngine: the ranks' models differ in dtype or limits");
  }
  const InferenceModel& model = model_;
  const InferenceModelOptions& m = model.options();
  if (options_.max_tokens_per_step == 0) options_.max_tokens_per_step = m.max_tokens;
  if (options_.max_sequences == 0) options_.max_sequences = m.max_sequences;
  if (options_.max_sequence_length == 0) options_.max_sequence_length = model.max_sequence_length();
  TROUPE_CHECK(options_.max_tokens_per_step > 0 && options_.max_tokens_per_step <= m.max_tokens,
               "InferenceEngine: max_tokens_per_step ", options_.max_tokens_per_step, " must be in [1, ", m.max_tokens,
               "] (the model's max_tokens)");
  TROUPE_CHECK(options_.max_sequences > 0 && options_.max_sequences <= m.max_sequences,
               "InferenceEngine: max_sequences ", options_.max_sequences, " must be in [1, ", m.max_sequences,
               "] (the model's max_sequences)");
  TROUPE_CHECK(options_.max_sequence_length > 0 && options_.max_sequence_length <= model.max_sequence_length(),
               "InferenceEngine: max_sequence_length ", options_.max_sequence_length, " must be in [1, ",
               model.max_sequence_length(), "]");
  for (InferenceModel* r : ranks) {
    const Context& ctx = r->context();
    ctx.activate();  // each rank's cache and buffers on its own device
    auto k = std::make_unique<Rank>(*r, options_);
    const int64_t S = options_.max_sequences;
    k->tokens = Tensor::empty(ctx, DType::i32, {S});
    k->logprobs = Tensor::empty(ctx, DType::f32, {S});
    k->host_tokens = Tensor::pinned_host(DType::i32, {S});
    k->host_logprobs = Tensor::pinned_host(DType::f32, {S});
    if (T > 1) {
      k->maxes = Tensor::empty(ctx, DType::f32, {S});
      k->host_maxes = Tensor::pinned_host(DType::f32, {S});
    }
    ranks_.push_back(std::move(k));
  }
  model_.context().activate();
  if (T > 1) threads_ = std::make_unique<RankThreads>(ranks_, options_.step_timeout_s);
}

InferenceEngine::~InferenceEngine() = default;

const KvCache& InferenceEngine::cache() const { return ranks_[0]->cache; }
KvCache& InferenceEngine::allocator() { return ranks_[0]->cache; }

int64_t InferenceEngine::add_request(GenerationRequest request, TokenCallback on_token) {
  const int64_t n = int64_t(request.prompt.size());
  TROUPE_CHECK(n > 0, "generation request: the prompt is empty");
  TROUPE_CHECK(n <= options_.max_tokens_per_step, "generation request: the prompt has ", n,
               " tokens, more than a step takes (", options_.max_tokens_per_step, ")");
  TROUPE_CHECK(n <= options_.max_sequence_length, "generation request: the prompt has ", n,
               " tokens, the model takes at most ", options_.max_sequence_length);
  // Checked here, not in the forward: a bad id must fail its request, not the step of every other.
  const int64_t vocab = model_.config().vocab_size;
  for (int64_t i = 0; i < n; ++i)
    TROUPE_CHECK(request.prompt[size_t(i)] >= 0 && request.prompt[size_t(i)] < vocab,
                 "generation request: prompt token ", i, " is ", request.prompt[size_t(i)],
                 ", outside the vocabulary of ", vocab);
  TROUPE_CHECK(request.sampling.stop_strings.empty() || detokenize_,
               "generation request: stop strings need an engine with a detokenizer");
  auto r = std::make_unique<Request>(next_id_, std::move(request), std::move(on_token));
  r->reserve = std::min(n + r->params.max_tokens, options_.max_sequence_length);
  const KvCache& c = cache();
  TROUPE_CHECK(c.blocks_for(r->reserve) <= c.num_blocks(), "generation request: ", r->reserve, " tokens need ",
               c.blocks_for(r->reserve), " KV-cache blocks, the cache has ", c.num_blocks());
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
  if (!allocator().allocate(allocator().blocks_for(r.reserve), r.blocks)) return false;
  tokens_left -= n;
  return true;
}

void InferenceEngine::rank_step(Rank& k, std::span<const SequenceInput> batch, bool greedy) {
  struct Done {  // the phase says "done" however the step ends
    std::atomic<const char*>& phase;
    ~Done() { phase = "done"; }
  } done{k.phase};
  const Context& ctx = k.model.context();
  k.phase = "forward";
  const Tensor logits = k.model.forward(batch, k.cache);  // [S, Vl]
  const int64_t s = logits.dim(0), vl = logits.dim(1);
  if (greedy) {
    if (k.real == 0) return;  // a slice of padding only
    k.phase = "greedy pick";
    const Tensor tokens = k.tokens.slice(0, {s}), logprobs = k.logprobs.slice(0, {s});
    const Tensor maxes = k.maxes.defined() ? k.maxes.slice(0, {s}) : Tensor();
    argmax_logprob(ctx, logits, k.real, tokens, logprobs, maxes);
    // Into buffers reserved at the start, one wait for the three copies.
    copy(ctx, tokens, k.host_tokens.slice(0, {s}));
    copy(ctx, logprobs, k.host_logprobs.slice(0, {s}));
    if (maxes.defined()) copy(ctx, maxes, k.host_maxes.slice(0, {s}));
    k.phase = "waiting for its device";
    ctx.synchronize();
    return;
  }
  // Sampling: f32 rows on the host.
  Tensor f32 = logits;
  if (logits.dtype() != DType::f32) {
    if (!k.device_f32.defined()) k.device_f32 = Tensor::empty(ctx, DType::f32, {options_.max_sequences, vl});
    f32 = k.device_f32.slice(0, {s, vl});
    convert(ctx, logits, f32);
  }
  k.phase = "copying logits";
  if (whole_rows_.defined()) {  // a tensor-parallel rank: its columns straight into the whole rows
    if (k.real > 0) copy_columns(ctx, f32, 0, whole_rows_.slice(0, {s, whole_rows_.dim(1)}), k.vocab_start, k.real);
  } else if (ctx.is_cuda()) {
    if (!k.pinned_f32.defined()) k.pinned_f32 = Tensor::pinned_host(DType::f32, {options_.max_sequences, vl});
    k.host_rows = k.pinned_f32.slice(0, {s, vl});
    copy(ctx, f32, k.host_rows);
  } else {
    k.host_rows = logits;  // the CPU's logits are host f32 already
  }
  k.phase = "waiting for its device";
  ctx.synchronize();
}

std::vector<SampledToken> InferenceEngine::choose(std::span<const SequenceInput> batch) {
  const int64_t s = int64_t(running_.size()), vocab = model_.config().vocab_size;
  const bool greedy =
      std::all_of(running_.begin(), running_.end(), [](const auto& r) { return r->params.device_greedy(); });
  if (!greedy && ranks_.size() > 1 && !whole_rows_.defined())  // filled by the ranks, pinned for their copies
    whole_rows_ = model_.context().is_cuda() ? Tensor::pinned_host(DType::f32, {options_.max_sequences, vocab})
                                             : Tensor::host(DType::f32, {options_.max_sequences, vocab});
  if (threads_)
    threads_->run([&](int r) { rank_step(*ranks_[size_t(r)], batch, greedy); });
  else
    rank_step(*ranks_[0], batch, greedy);
  std::vector<SampledToken> out(static_cast<size_t>(s));
  if (greedy) {
    for (int64_t i = 0; i < s; ++i) {
      // The largest logit over the slices (the lowest rank on ties: the lowest id), and the
      // log-softmax from the slices' log-sum-exps (max - logprob in each).
      const Rank* best = nullptr;
      for (const auto& k : ranks_)
        if (k->real > 0 && (!best || k->host_maxes.data_as<float>()[i] > best->host_maxes.data_as<float>()[i]))
          best = k.get();
      float logprob = best->host_logprobs.data_as<float>()[i];
      if (ranks_.size() > 1) {
        const double top = best->host_maxes.data_as<float>()[i];
        double sum = 0.0;
        for (const auto& k : ranks_)
          if (k->real > 0)
            sum += std::exp(double(k->host_maxes.data_as<float>()[i]) - k->host_logprobs.data_as<float>()[i] - top);
        logprob = float(-std::log(sum));
      }
      const int32_t token = int32_t(best->vocab_start) + best->host_tokens.data_as<int32_t>()[i];
      out[size_t(i)] = {token, running_[size_t(i)]->params.logprobs ? logprob : 0.0f};
    }
    return out;
  }
  const Tensor& whole = whole_rows_.defined() ? whole_rows_ : ranks_[0]->host_rows;
  const float* rows = whole.data_as<float>();
  const int64_t stride = whole.dim(1);
  // Each request has its own sampler (and random stream): rows are independent. One row needs no
  // team; a team leaves a core to each tensor-parallel rank's thread (its workers spin a while
  // after the loop, and a rank thread that cannot run stalls the next step).
  const int team = int(std::clamp<int64_t>(s, 1, std::max(1, omp_get_max_threads() - int(ranks_.size()))));
#pragma omp parallel for schedule(dynamic) num_threads(team) if (team > 1)
  for (int64_t i = 0; i < s; ++i) {
    Request& r = *running_[size_t(i)];
    out[size_t(i)] = r.sampler.sample(std::span(rows + i * stride, size_t(vocab)), r.tokens, r.prompt_len);
  }
  return out;
}

void InferenceEngine::accept(Request& r, const SampledToken& t, std::vector<TokenEvent>& events) {
  r.tokens.push_back(t.token);
  TokenEvent e{.request = r.id, .has_token = true, .token = t.token, .logprob = t.logprob, .top_logprobs = t.top};
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
  if (e.finish == FinishReason::none && (int64_t(r.generated().size()) >= r.params.max_tokens ||
                                         int64_t(r.tokens.size()) >= options_.max_sequence_length))
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
      allocator().release(r->blocks);
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
    const std::vector<SampledToken> next = choose(batch);
    for (size_t i = 0; i < running_.size(); ++i) {
      Request& r = *running_[i];
      r.cached = int64_t(r.tokens.size());
      accept(r, next[i], events);
      deliver_to(r);
      if (r.finish != FinishReason::none) allocator().release(r.blocks);
    }
    retire(running_);
  }

  for (auto& [r, e] : out)
    if (r->on_token) r->on_token(e);
  return !running_.empty() || !waiting_.empty();
}

void InferenceEngine::run() {
  while (step()) {}
}

}  // namespace troupe
