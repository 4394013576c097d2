#include "actors/train/checkpoint_writer_actor.hpp"

#include <chrono>
#include <filesystem>

#include "actors/fabric/device_services.hpp"
#include "actors/train/checkpoint_finite.hpp"
#include "actors/train/messages.hpp"
#include "kernels/nvtx.hpp"
#include "base/check.hpp"
#include "storage/atomic_file.hpp"

namespace troupe::actors {

namespace fs = std::filesystem;

SaveOutcome write_save_job(SaveJob& job) {
  const NvtxRange range("checkpoint write iteration ", job.iteration);
  const auto t0 = std::chrono::steady_clock::now();
  SaveOutcome out;
  try {
    // A diverged model is refused before anything of the save is written.
    for (size_t i = 0; i < job.chunks.size(); ++i) {
      if (i < job.ready.size()) fence_host_wait(job.ready[i]);
      check_chunk_state_finite(job.chunks[i]);
    }
    CheckpointWriter writer(job.root, job.iteration);
    for (size_t i = 0; i < job.chunks.size(); ++i) {
      if (i < job.ready.size()) fence_host_wait(job.ready[i]);
      write_chunk_state(writer, job.chunks[i]);
      for (const auto& [prefix, t] : job.chunks[i].tensors) out.bytes += uint64_t(t.nbytes());
    }
    for (const auto& [from, name] : job.files) copy_file_atomic(from, (fs::path(writer.dir()) / name).string());
    out.index = writer.finish();
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

checkpoint_writer_actor spawn_checkpoint_writer(caf::actor_system& system) {
  auto writer_fn = []() -> checkpoint_writer_actor::behavior_type {
    return {
        [](save_atom, const std::shared_ptr<SaveJob>& job) { job->outcome.set_value(write_save_job(*job)); },
    };
  };
  return system.spawn<caf::detached>(writer_fn);
}

}  // namespace troupe::actors
