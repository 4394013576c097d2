// The data-loader actor: owns the training and validation DataLoaders (spawned detached:
// reading samples is file I/O) and answers (batch_atom, train, count) with `count`
// microbatches as host Batches (targets = labels, -1 where the loss mask is 0). After each
// training batch it prefetches the next one, so the next iteration's data is ready when the
// trainer asks. Protocol: loader_actor (protocols.hpp); failures answer RunError::data.
#pragma once

#include <caf/all.hpp>

#include <memory>

#include "actors/train/protocols.hpp"
#include "data/data_loader.hpp"

namespace troupe::actors {

loader_actor spawn_loader(caf::actor_system& system, std::unique_ptr<DataLoader> train,
                          std::unique_ptr<DataLoader> valid, SpawnMode mode = SpawnMode::detached);

}  // namespace troupe::actors
