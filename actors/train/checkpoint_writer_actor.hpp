// The checkpoint writer actor: one per process, it writes the snapshots a save took (host
// copies of every local rank's parameters and optimizer state) into the checkpoint's shard
// files while training goes on, then hands back this process's part of the index. Committing
// (metadata.json, then the tracker) happens once every process's part is durable; see
// TrainingRun::save_checkpoint. Protocol: checkpoint_writer_actor (protocols.hpp).
//
//   auto job = std::make_shared<SaveJob>(...);            // snapshot taken, copies in flight
//   std::future<SaveOutcome> done = job->outcome.get_future();
//   caf::anon_send(writer, save_atom::value, job);
//   ...training continues...
//   SaveOutcome o = done.get();                          // index, or the error
#pragma once

#include <caf/all.hpp>

#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/train/checkpoint_shards.hpp"
#include "actors/train/protocols.hpp"

namespace troupe::actors {

struct SaveOutcome {
  std::string index;  // CheckpointWriter::finish()
  std::string error;  // non-empty: the write failed (names the file)
  uint64_t bytes = 0;
  double seconds = 0;  // writing, from the job's arrival
};

struct SaveJob {
  std::string root;
  int64_t iteration = 0;
  std::vector<ChunkState> chunks;
  // Per chunk: a fence after its device-to-host copies (null: the copies are done).
  std::vector<std::shared_ptr<void>> ready;
  // Files copied into the iteration directory: (source path, name there).
  std::vector<std::pair<std::string, std::string>> files;
  std::promise<SaveOutcome> outcome;
};

// Writes one job (the actor's work; also callable directly). Never throws: errors go into the outcome.
SaveOutcome write_save_job(SaveJob& job);

// Detached: file writes and fsyncs block its thread, not the scheduler's.
checkpoint_writer_actor spawn_checkpoint_writer(caf::actor_system& system);

}  // namespace troupe::actors
