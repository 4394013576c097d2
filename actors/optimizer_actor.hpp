// The optimizer actor: turns the stages' gradients into one optimizer step. On (step_atom,
// StepRequest) it (1) has the two holders of a tied embedding sum their gradient copies,
// (2) gathers every stage's gradient statistics into the GLOBAL norm (the tied copy counted
// once, as on one device), (3) decides skip (inf/nan) or the clip coefficient, and (4) has
// every stage apply AdamW with it. Answers StepResult {skipped, grad_norm (unscaled)}.
// It only coordinates; the stage actors do the device work.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <vector>

namespace troupe::actors {

struct OptimizerOptions {
  float clip_grad = 1.0f;
  std::vector<int> tied_stages;  // the two stages holding a tied embedding; empty: none
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // per request to a stage
};

caf::actor spawn_optimizer(caf::actor_system& system, std::vector<caf::actor> stages, OptimizerOptions options);

}  // namespace troupe::actors
