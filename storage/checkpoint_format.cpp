#include "storage/checkpoint_format.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/check.hpp"

namespace troupe {

std::string checkpoint_iteration_dir_name(int64_t iteration) {
  TROUPE_CHECK(iteration >= 0, "checkpoint iteration must be >= 0, got ", iteration);
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

std::string checkpoint_shard_file_name(int writer_id) {
  TROUPE_CHECK(writer_id >= 0, "checkpoint writer id must be >= 0, got ", writer_id);
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard_%04d.bin", writer_id);
  return buf;
}

// ---- XXH64 ---------------------------------------------------------------------------------

namespace {

constexpr uint64_t P1 = 11400714785074694791ULL;
constexpr uint64_t P2 = 14029467366897019727ULL;
constexpr uint64_t P3 = 1609587929392839161ULL;
constexpr uint64_t P4 = 9650029242287828579ULL;
constexpr uint64_t P5 = 2870177450012600261ULL;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t read64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}  // little-endian host
inline uint32_t read32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t round1(uint64_t acc, uint64_t in) { return rotl(acc + in * P2, 31) * P1; }
inline uint64_t merge(uint64_t acc, uint64_t v) { return (acc ^ round1(0, v)) * P1 + P4; }

}  // namespace

uint64_t xxh64(const void* data, size_t n, uint64_t seed) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  const uint8_t* end = p + n;
  uint64_t h;
  if (n >= 32) {
    uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
    const uint8_t* limit = end - 32;
    do {
      v1 = round1(v1, read64(p));
      v2 = round1(v2, read64(p + 8));
      v3 = round1(v3, read64(p + 16));
      v4 = round1(v4, read64(p + 24));
      p += 32;
    } while (p <= limit);
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge(h, v1);
    h = merge(h, v2);
    h = merge(h, v3);
    h = merge(h, v4);
  } else {
    h = seed + P5;
  }
  h += uint64_t(n);
  for (; p + 8 <= end; p += 8) h = rotl(h ^ round1(0, read64(p)), 27) * P1 + P4;
  if (p + 4 <= end) {
    h = rotl(h ^ (uint64_t(read32(p)) * P1), 23) * P2 + P3;
    p += 4;
  }
  for (; p < end; ++p) h = rotl(h ^ (uint64_t(*p) * P5), 11) * P1;
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

std::string checksum_hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// ---- slices --------------------------------------------------------------------------------

ShardSlice ShardSlice::rows(const Shape& global_shape, int64_t begin, int64_t end) {
  TROUPE_CHECK(!global_shape.empty(), "row slice of a 0-d tensor");
  ShardSlice s{Shape(global_shape.size(), 0), global_shape};
  s.offset[0] = begin;
  s.length[0] = end - begin;
  return s;
}

ShardSlice ShardSlice::whole(const Shape& global_shape) { return {Shape(global_shape.size(), 0), global_shape}; }

std::string ShardSlice::str() const {
  std::string s = "[";
  for (size_t d = 0; d < offset.size(); ++d) {
    if (d) s += ", ";
    s += str_cat(offset[d], ":", offset[d] + length[d]);
  }
  return s + "]";
}

void validate_slice(const Shape& global_shape, const ShardSlice& slice, const std::string& what) {
  TROUPE_CHECK(slice.offset.size() == global_shape.size() && slice.length.size() == global_shape.size(), what,
               ": slice ", slice.str(), " has the wrong rank for shape ", shape_str(global_shape));
  for (size_t d = 0; d < global_shape.size(); ++d)
    TROUPE_CHECK(slice.offset[d] >= 0 && slice.length[d] >= 0 && slice.offset[d] + slice.length[d] <= global_shape[d],
                 what, ": slice ", slice.str(), " lies outside shape ", shape_str(global_shape));
}

namespace {

bool boxes_overlap(const ShardSlice& a, const ShardSlice& b) {
  for (size_t d = 0; d < a.offset.size(); ++d) {
    if (a.offset[d] + a.length[d] <= b.offset[d] || b.offset[d] + b.length[d] <= a.offset[d]) return false;
  }
  return a.numel() > 0 && b.numel() > 0;
}

}  // namespace

void validate_tensor_record(const TensorRecord& t, const std::string& where) {
  const std::string what = str_cat("tensor '", t.name, "' in ", where);
  int64_t covered = 0;
  for (size_t i = 0; i < t.shards.size(); ++i) {
    const ShardRecord& s = t.shards[i];
    validate_slice(t.shape, s.slice, what);
    TROUPE_CHECK(s.byte_length == uint64_t(s.slice.numel()) * dtype_size(t.dtype), what, ": shard ", s.slice.str(),
                 " in '", s.file, "' has ", s.byte_length, " bytes, expected ",
                 uint64_t(s.slice.numel()) * dtype_size(t.dtype));
    for (size_t j = 0; j < i; ++j)
      TROUPE_CHECK(!boxes_overlap(s.slice, t.shards[j].slice), what, ": shards ", t.shards[j].slice.str(), " ('",
                   t.shards[j].file, "') and ", s.slice.str(), " ('", s.file, "') overlap");
    covered += s.slice.numel();
  }
  TROUPE_CHECK(covered == shape_numel(t.shape), what, ": shards cover ", covered, " of ", shape_numel(t.shape),
               " elements of shape ", shape_str(t.shape), " (a shard is missing)");
}

// ---- JSON ----------------------------------------------------------------------------------

nlohmann::json tensor_record_to_json(const TensorRecord& t) {
  nlohmann::json shards = nlohmann::json::array();
  for (const ShardRecord& s : t.shards) {
    shards.push_back({{"offset", s.slice.offset},
                      {"length", s.slice.length},
                      {"file", s.file},
                      {"byte_offset", s.byte_offset},
                      {"byte_length", s.byte_length},
                      {"xxh64", checksum_hex(s.checksum)}});
  }
  return {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"shards", std::move(shards)}};
}

TensorRecord tensor_record_from_json(const std::string& name, const nlohmann::json& j, const std::string& where,
                                     bool validate) {
  TensorRecord t;
  t.name = name;
  try {
    t.dtype = dtype_from_name(j.at("dtype").get<std::string>());
    t.shape = j.at("shape").get<Shape>();
    for (const auto& js : j.at("shards")) {
      ShardRecord s;
      s.slice.offset = js.at("offset").get<Shape>();
      s.slice.length = js.at("length").get<Shape>();
      s.file = js.at("file").get<std::string>();
      s.byte_offset = js.at("byte_offset").get<uint64_t>();
      s.byte_length = js.at("byte_length").get<uint64_t>();
      const std::string hex = js.at("xxh64").get<std::string>();
      TROUPE_CHECK(hex.size() == 16 && hex.find_first_not_of("0123456789abcdef") == std::string::npos, "bad xxh64 '",
                   hex, "'");
      s.checksum = std::stoull(hex, nullptr, 16);
      TROUPE_CHECK(s.file.find('/') == std::string::npos && !s.file.empty() && s.file[0] != '.', "bad file name '",
                   s.file, "'");
      t.shards.push_back(std::move(s));
    }
  } catch (const nlohmann::json::exception& e) {
    TROUPE_FAIL("tensor '", name, "' in ", where, ": malformed index entry: ", e.what());
  } catch (const Error& e) {
    TROUPE_FAIL("tensor '", name, "' in ", where, ": malformed index entry: ", e.what());
  }
  if (validate) validate_tensor_record(t, where);
  return t;
}

}  // namespace troupe
