// Checkpoint metadata (storage/checkpoint_format.*, read by storage/checkpoint_reader.cpp): the
// input is iter_0000001/metadata.json of a checkpoint whose one shard file holds 4 KiB of zeros.
#include <cstdint>
#include <exception>
#include <string>

#include "fuzz/fuzz_util.hpp"
#include "storage/checkpoint_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool shard_written = [] {
    troupe::fuzz::write_scratch_file("ckpt/iter_0000001/shard_0000.bin", std::string(4096, '\0'));
    troupe::fuzz::write_scratch_file("ckpt/latest_checkpointed_iteration.txt", "1\n");
    return true;
  }();
  (void)shard_written;
  troupe::fuzz::write_scratch_file("ckpt/iter_0000001/metadata.json", troupe::fuzz::as_text(data, size));
  try {
    const troupe::CheckpointReader r =
        troupe::CheckpointReader::open_iteration(troupe::fuzz::scratch_dir() + "/ckpt", 1);
    for (const std::string& name : r.names()) (void)r.read(name);
  } catch (const std::exception&) {}
  return 0;
}
