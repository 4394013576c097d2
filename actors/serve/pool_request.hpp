// A request on its way through the inference pool's actors (actors/serve/protocols.hpp): what
// the caller submitted, its callbacks and its cancel flag. It travels as a Submission, a
// shared_ptr: local only, never copied. Its callbacks run on the worker's thread (or the
// router's, when no replica is in service).
//
//   auto r = std::make_shared<PoolRequest>(PoolRequest{request, on_token, on_failure, cancel});
//   caf::anon_send(router, submit_atom::value, Submission{std::move(r)});
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <functional>
#include <memory>

#include "actors/serve/serving_stats.hpp"
#include "model/inference/inference_engine.hpp"

namespace troupe::actors {

// Called once when a request cannot run, with a ServeError (serve_error.hpp) whose sentence
// says why; InferencePool renders it for its caller.
using RequestFailure = std::function<void(const caf::error& error)>;

struct PoolRequest {
  GenerationRequest request;
  TokenCallback on_token;
  RequestFailure on_error;
  std::shared_ptr<std::atomic<bool>> cancel;  // set by the ticket, read by the worker
  bool cancel_sent = false;                   // the worker told its engine (worker thread only)
  RequestTiming timing;                       // for the monitor
};

// Local only: a shared_ptr travels, the request is not copied.
struct Submission {
  std::shared_ptr<PoolRequest> r;
};

}  // namespace troupe::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::actors::Submission)
