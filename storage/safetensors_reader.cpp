#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "kernels/half.hpp"
#include "storage/safetensors.hpp"

namespace troupe {
namespace {

using json = nlohmann::json;

// Tensor bytes are copied and viewed as they lie in the file, which is little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors reader assumes a little-endian host");

// The reference implementation refuses headers above 100 MB; so do we, so that a
// corrupt length cannot make us parse gigabytes of tensor data as JSON.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct SpecDType {
  const char* name;
  size_t size;
  std::optional<DType> dtype;
};

// Every byte-sized-or-larger dtype of the spec. Tensors of the ones without a Troupe
// DType still validate (so a checkpoint holding, say, an F64 buffer opens), but cannot
// be viewed or read. Sub-byte dtypes (F4, F6_*) are rejected as unknown.
constexpr SpecDType kSpecDTypes[] = {
    {"BOOL", 1, std::nullopt},    {"U8", 1, DType::u8},         {"I8", 1, std::nullopt},  {"F8_E5M2", 1, std::nullopt},
    {"F8_E4M3", 1, std::nullopt}, {"F8_E8M0", 1, std::nullopt}, {"I16", 2, std::nullopt}, {"U16", 2, std::nullopt},
    {"F16", 2, DType::f16},       {"BF16", 2, DType::bf16},     {"I32", 4, DType::i32},   {"U32", 4, std::nullopt},
    {"F32", 4, DType::f32},       {"F64", 8, std::nullopt},     {"C64", 8, std::nullopt}, {"I64", 8, DType::i64},
    {"U64", 8, std::nullopt},
};

const SpecDType* find_spec_dtype(const std::string& name) {
  for (const SpecDType& d : kSpecDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

std::string where(const std::string& path) { return str_cat("safetensors file '", path, "'"); }
std::string where(const std::string& path, const std::string& tensor) {
  return str_cat("safetensors file '", path, "', tensor '", tensor, "'");
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint64_t as_u64(const json& v, const std::string& path, const std::string& tensor, const char* field) {
  if (!v.is_number_unsigned())
    TROUPE_FAIL(where(path, tensor), ": \"", field, "\" must hold non-negative integers, got ", v.dump());
  return v.get<uint64_t>();
}

SafetensorsTensorInfo parse_entry(const std::string& path, const std::string& name, const json& entry) {
  TROUPE_CHECK(entry.is_object(), where(path, name), ": entry must be an object, got ", entry.dump());
  for (const char* field : {"dtype", "shape", "data_offsets"})
    TROUPE_CHECK(entry.contains(field), where(path, name), ": entry has no \"", field, "\": ", entry.dump());

  SafetensorsTensorInfo info;
  info.name = name;
  const json& dt = entry["dtype"];
  TROUPE_CHECK(dt.is_string(), where(path, name), ": \"dtype\" must be a string, got ", dt.dump());
  info.dtype_name = dt.get<std::string>();
  const SpecDType* spec = find_spec_dtype(info.dtype_name);
  if (spec == nullptr) TROUPE_FAIL(where(path, name), ": unknown dtype '", info.dtype_name, "'");
  info.dtype = spec->dtype;

  const json& shape = entry["shape"];
  TROUPE_CHECK(shape.is_array(), where(path, name), ": \"shape\" must be an array, got ", shape.dump());
  // Element count and byte size with overflow checks: a corrupt shape must not wrap
  // around to a size that happens to match its offsets.
  uint64_t bytes = spec->size;
  bool overflow = false, has_zero = false;
  for (const json& d : shape) {
    const uint64_t n = as_u64(d, path, name, "shape");
    TROUPE_CHECK(n <= uint64_t(std::numeric_limits<int64_t>::max()), where(path, name), ": dimension ", n,
                 " too large");
    info.shape.push_back(int64_t(n));
    has_zero |= n == 0;
    if (n != 0 && bytes > std::numeric_limits<uint64_t>::max() / n) overflow = true;
    bytes *= n;
  }
  if (has_zero)
    bytes = 0;
  else if (overflow)
    TROUPE_FAIL(where(path, name), ": shape ", shape_str(info.shape), " overflows 64 bits");

  const json& off = entry["data_offsets"];
  TROUPE_CHECK(off.is_array() && off.size() == 2, where(path, name), ": \"data_offsets\" must be [begin, end], got ",
               off.dump());
  info.begin = as_u64(off[0], path, name, "data_offsets");
  info.end = as_u64(off[1], path, name, "data_offsets");
  TROUPE_CHECK(info.begin <= info.end, where(path, name), ": data_offsets [", info.begin, ", ", info.end,
               "] end before they begin");
  TROUPE_CHECK(info.nbytes() == bytes, where(path, name), ": shape ", shape_str(info.shape), " of ", info.dtype_name,
               " needs ", bytes, " bytes but data_offsets [", info.begin, ", ", info.end, "] hold ", info.nbytes());
  return info;
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  for (const SpecDType& d : kSpecDTypes)
    if (d.dtype == t) return d.name;
  TROUPE_FAIL("no safetensors dtype for ", dtype_name(t));
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.map_ = MappedFile::open(path);
  const size_t file_size = f.map_.size();
  TROUPE_CHECK(file_size >= 8, where(path), ": ", file_size, " bytes is shorter than the 8-byte header length");
  const uint64_t header_len = read_u64_le(f.map_.data());
  TROUPE_CHECK(header_len <= kMaxHeaderBytes, where(path), ": header length ", header_len, " exceeds the ",
               kMaxHeaderBytes, "-byte limit (corrupt file?)");
  TROUPE_CHECK(header_len <= file_size - 8, where(path), ": header length ", header_len, " does not fit in the ",
               file_size, "-byte file (truncated?)");
  f.buffer_offset_ = 8 + size_t(header_len);
  const uint64_t buffer_size = file_size - f.buffer_offset_;

  // Duplicate keys are an error (nlohmann would silently keep the last one): the
  // callback sees each key of the top-level object (depth 1) once.
  std::unordered_set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && !seen.insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  const char* text = reinterpret_cast<const char*>(f.map_.data() + 8);
  json header;
  try {
    header = json::parse(text, text + header_len, on_event);
  } catch (const json::exception& e) {
    TROUPE_FAIL(where(path), ": header is not valid JSON: ", e.what());
  }
  TROUPE_CHECK(duplicate.empty(), where(path, duplicate), ": name appears twice in the header");
  TROUPE_CHECK(header.is_object(), where(path), ": header must be a JSON object, got a ", header.type_name());

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      TROUPE_CHECK(value.is_object(), where(path), ": \"__metadata__\" must be an object, got ", value.dump());
      for (const auto& [k, v] : value.items()) {
        TROUPE_CHECK(v.is_string(), where(path), ": \"__metadata__\" value of '", k, "' must be a string, got ",
                     v.dump());
        f.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    f.tensors_.push_back(parse_entry(path, key, value));
  }

  // The tensors must tile [0, buffer_size): sorted by offset, each starts where the last
  // ended. Empty tensors sort before a non-empty one at the same offset.
  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t next = 0;
  const SafetensorsTensorInfo* prev = nullptr;
  for (const SafetensorsTensorInfo& t : f.tensors_) {
    if (t.begin < next)
      TROUPE_FAIL(where(path, t.name), ": data_offsets [", t.begin, ", ", t.end, "] overlap tensor '", prev->name,
                  "' at [", prev->begin, ", ", prev->end, "]");
    if (t.begin > next)
      TROUPE_FAIL(where(path, t.name), ": data starts at byte ", t.begin, " of the buffer but the previous tensor",
                  prev ? str_cat(" '", prev->name, "'") : std::string(), " ends at ", next,
                  " (the spec allows no gaps)");
    if (t.end > buffer_size)
      TROUPE_FAIL(where(path, t.name), ": data_offsets [", t.begin, ", ", t.end, "] lie outside the ", buffer_size,
                  "-byte data buffer (file truncated?)");
    next = t.end;
    prev = &t;
  }
  TROUPE_CHECK(next == buffer_size, where(path), ": ", buffer_size - next, " bytes after the last tensor",
               prev ? str_cat(" '", prev->name, "'") : std::string(), " belong to no tensor");

  for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const SafetensorsTensorInfo& t : tensors_) out.push_back(t.name);
  return out;
}

const SafetensorsTensorInfo& SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    std::string some;
    for (size_t i = 0; i < tensors_.size() && i < 5; ++i) some += str_cat(i ? ", '" : "'", tensors_[i].name, "'");
    TROUPE_FAIL(where(path(), name), ": no such tensor (the file has ", tensors_.size(), " tensors",
                tensors_.empty() ? "" : ", e.g. ", some, ")");
  }
  return tensors_[it->second];
}

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const { return find(name); }

Tensor SafetensorsFile::view(const std::string& name) const {
  const SafetensorsTensorInfo& t = find(name);
  TROUPE_CHECK(t.dtype.has_value(), where(path(), name), ": dtype ", t.dtype_name, " has no Troupe DType");
  const uint8_t* p = buffer() + t.begin;
  const size_t align = dtype_size(*t.dtype);
  TROUPE_CHECK(reinterpret_cast<uintptr_t>(p) % align == 0, where(path(), name), ": data at buffer offset ", t.begin,
               " is not aligned to ", align, " bytes; use read() or read_f32() for a copy");
  return Tensor::wrap(const_cast<uint8_t*>(p), *t.dtype, t.shape, DeviceKind::cpu);
}

Tensor SafetensorsFile::read(const std::string& name) const {
  const SafetensorsTensorInfo& t = find(name);
  TROUPE_CHECK(t.dtype.has_value(), where(path(), name), ": dtype ", t.dtype_name, " has no Troupe DType");
  Tensor out = Tensor::host(*t.dtype, t.shape);
  if (t.nbytes() > 0) std::memcpy(out.data(), buffer() + t.begin, t.nbytes());
  return out;
}

Tensor SafetensorsFile::read_f32(const std::string& name) const {
  const SafetensorsTensorInfo& t = find(name);
  TROUPE_CHECK(t.dtype && is_float(*t.dtype), where(path(), name), ": read_f32 needs F32, BF16 or F16 data, got ",
               t.dtype_name);
  Tensor out = Tensor::host(DType::f32, t.shape);
  const uint8_t* src = buffer() + t.begin;
  float* dst = out.data_as<float>();
  const int64_t n = out.numel();
  if (t.dtype == DType::f32) {
    if (n > 0) std::memcpy(dst, src, size_t(n) * 4);
    return out;
  }
  // memcpy per element: the source may be unaligned (see view()).
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = t.dtype == DType::bf16 ? bf16_bits_to_f32(h) : f16_bits_to_f32(h);
  }
  return out;
}

Tensor SafetensorsFile::expect(const std::string& name, const Shape& shape) const {
  const SafetensorsTensorInfo& t = find(name);
  TROUPE_CHECK(t.shape == shape, where(path(), name), ": shape ", shape_str(t.shape), " but expected ",
               shape_str(shape));
  return read_f32(name);
}

}  // namespace troupe
