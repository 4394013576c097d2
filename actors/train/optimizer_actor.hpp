// The optimizer actor: turns the stages' gradients into one optimizer step. On (step_atom,
// StepRequest) it (1) sums every stage's gradient statistics (sent with the stages' reports,
// after the two holders of a tied embedding summed their copies) into the GLOBAL norm (the
// tied copy counted once, as on one device), (2) decides skip (inf/nan) or the clip
// coefficient, and (3) has every stage apply AdamW with it. Answers StepResult {skipped,
// grad_norm (unscaled)}. It only coordinates; the stage actors do the device work.
// Protocol: optimizer_actor (protocols.hpp); a failed update answers RunError::optimizer.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <vector>

#include "actors/train/protocols.hpp"

namespace troupe::actors {

struct OptimizerOptions {
  float clip_grad = 1.0f;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // per request to a stage
};

optimizer_actor spawn_optimizer(caf::actor_system& system, std::vector<stage_update_actor> stages,
                                OptimizerOptions options);

}  // namespace troupe::actors
