// Writes the binary seed inputs of the fuzz targets (formats without a small real file in the
// repository) with the project's own writers: make_seeds OUT_DIR makes OUT_DIR/<target>/*.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/indexed_dataset.hpp"
#include "schedules/trace.hpp"
#include "storage/checkpoint_format.hpp"

namespace {

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The indexed_dataset_fuzz layout: u32 size of the .idx, the .idx, the .bin.
void indexed_dataset_seed(const std::filesystem::path& out, troupe::TokenDtype dtype) {
  const std::string prefix = (out / "tmp_ds").string();
  troupe::IndexedDatasetBuilder b(prefix, dtype);
  b.add_document(std::vector<int32_t>{1, 2, 3});
  b.add_document(std::vector<int32_t>{4, 5, 6, 7}, std::vector<int32_t>{1, 3});
  b.add_document(std::vector<int32_t>{});
  b.finalize();
  const std::string idx = read_file(prefix + ".idx"), bin = read_file(prefix + ".bin");
  std::filesystem::remove(prefix + ".idx");
  std::filesystem::remove(prefix + ".bin");
  std::string seed(4, '\0');
  const uint32_t n = uint32_t(idx.size());
  std::memcpy(seed.data(), &n, 4);
  write_file(out / "indexed_dataset" / (std::string(troupe::token_dtype_name(dtype)) + ".seed"), seed + idx + bin);
}

std::string safetensors_seed() {
  const std::string header =
      R"({"__metadata__":{"step":"100"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}})";
  std::string s(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(s.data(), &n, 8);
  return s + header + std::string(22, '\x01');
}

// Matches checkpoint_metadata_fuzz's shard file: 4 KiB of zeros.
std::string checkpoint_seed() {
  const std::string zeros(128, '\0');
  const nlohmann::json j = {{"format", "troupe-checkpoint"},
                            {"version", 1},
                            {"checksum", "xxh64"},
                            {"iteration", 1},
                            {"consumed_samples", 64},
                            {"model_config", {{"num_layers", 2}}},
                            {"parallel_layout", nlohmann::json::object()},
                            {"rng_state", nlohmann::json::object()},
                            {"files", {{"shard_0000.bin", {{"bytes", 4096}}}}},
                            {"tensors",
                             {{"w",
                               {{"dtype", "f32"},
                                {"shape", {4, 8}},
                                {"shards",
                                 {{{"offset", {0, 0}},
                                   {"length", {4, 8}},
                                   {"file", "shard_0000.bin"},
                                   {"byte_offset", 0},
                                   {"byte_length", 128},
                                   {"xxh64", troupe::checksum_hex(troupe::xxh64(zeros.data(), zeros.size()))}}}}}}}}};
  return j.dump(1);
}

std::string trace_seed() {
  troupe::schedules::Trace t;
  t.header.num_layers = 4;
  for (int i = 0; i < 4; ++i) {
    troupe::schedules::TraceEvent e;
    e.actor = "stage" + std::to_string(i % 2);
    e.stage = i % 2;
    e.microbatch = i / 2;
    e.start_ns = 1000 * i;
    e.end_ns = 1000 * i + 800;
    t.events.push_back(e);
  }
  return troupe::schedules::trace_to_msgpack(t);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_seeds OUT_DIR\n";
    return 2;
  }
  const std::filesystem::path out = argv[1];
  indexed_dataset_seed(out, troupe::TokenDtype::u16);
  indexed_dataset_seed(out, troupe::TokenDtype::i32);
  write_file(out / "safetensors" / "small.safetensors", safetensors_seed());
  write_file(out / "checkpoint_metadata" / "metadata.json", checkpoint_seed());
  write_file(out / "trace" / "small.trace", trace_seed());
  return 0;
}
