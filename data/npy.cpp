#include "data/npy.hpp"

#include <cstring>
#include <cctype>
#include <optional>

#include "storage/atomic_file.hpp"
#include "base/check.hpp"

namespace troupe {
namespace {

constexpr char kMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
constexpr size_t kAlign = 64;  // numpy pads the header so that the data starts 64-byte aligned

}  // namespace

const char* npy_descr(NpyDtype t) {
  switch (t) {
    case NpyDtype::i16:
      return "<i2";
    case NpyDtype::i32:
      return "<i4";
    case NpyDtype::u32:
      return "<u4";
    case NpyDtype::i64:
      return "<i8";
  }
  return "?";
}

size_t npy_dtype_size(NpyDtype t) {
  switch (t) {
    case NpyDtype::i16:
      return 2;
    case NpyDtype::i32:
    case NpyDtype::u32:
      return 4;
    case NpyDtype::i64:
      return 8;
  }
  return 0;
}

void write_npy(const std::string& path, NpyDtype dtype, const std::vector<int64_t>& shape, const void* data) {
  std::string dims;
  int64_t numel = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    dims += str_cat(d ? ", " : "", shape[d]);
    numel *= shape[d];
  }
  if (shape.size() == 1) dims += ",";
  std::string header = str_cat("{'descr': '", npy_descr(dtype), "', 'fortran_order': False, 'shape': (", dims, "), }");
  const size_t unpadded = sizeof(kMagic) + 2 + 2 + header.size() + 1;
  header.append((kAlign - unpadded % kAlign) % kAlign, ' ');
  header += '\n';
  TROUPE_CHECK(header.size() <= 65535, "write_npy '", path, "': header too long");

  AtomicFile f(path);
  f.write(kMagic, sizeof(kMagic));
  const uint8_t version[2] = {1, 0};
  f.write(version, 2);
  const uint8_t len[2] = {uint8_t(header.size() & 0xff), uint8_t(header.size() >> 8)};
  f.write(len, 2);
  f.write(header.data(), header.size());
  f.write(data, size_t(numel) * npy_dtype_size(dtype));
  f.commit();
}

NpyArray NpyArray::open(const std::string& path) {
  NpyArray a;
  a.file_ = MappedFile::open(path);
  const uint8_t* p = a.file_.data();
  const size_t size = a.file_.size();
  TROUPE_CHECK(size >= 10 && std::memcmp(p, kMagic, 6) == 0, "'", path, "' is not a .npy file");
  TROUPE_CHECK(p[6] == 1 && p[7] == 0, "'", path, "': .npy version ", int(p[6]), ".", int(p[7]),
               " is not supported (1.0 only)");
  const size_t hlen = size_t(p[8]) | size_t(p[9]) << 8;
  TROUPE_CHECK(10 + hlen <= size, "'", path, "' is truncated inside its header");
  const std::string header(reinterpret_cast<const char*>(p + 10), hlen);

  // The value after `'key':` in the header dict, up to (not including) `stop`.
  const auto field = [&](const char* key, char open, char stop) -> std::optional<std::string> {
    const size_t k = header.find(str_cat("'", key, "'"));
    if (k == std::string::npos) return std::nullopt;
    const size_t b = header.find(open, header.find(':', k));
    if (b == std::string::npos) return std::nullopt;
    const size_t e = header.find(stop, b + 1);
    if (e == std::string::npos) return std::nullopt;
    return header.substr(b + 1, e - b - 1);
  };
  const auto descr = field("descr", '\'', '\'');
  TROUPE_CHECK(descr.has_value(), "'", path, "': no 'descr' in the header");
  if (*descr == "<i2")
    a.dtype_ = NpyDtype::i16;
  else if (*descr == "<i4")
    a.dtype_ = NpyDtype::i32;
  else if (*descr == "<u4")
    a.dtype_ = NpyDtype::u32;
  else if (*descr == "<i8")
    a.dtype_ = NpyDtype::i64;
  else
    TROUPE_FAIL("'", path, "': dtype '", *descr, "' is not supported (<i2, <i4, <u4, <i8)");
  const size_t fo = header.find("'fortran_order'");
  TROUPE_CHECK(fo != std::string::npos && header.compare(header.find(':', fo) + 1, 6, " False") == 0, "'", path,
               "': only C-order arrays are supported");
  const auto dims = field("shape", '(', ')');
  TROUPE_CHECK(dims.has_value(), "'", path, "': no 'shape' in the header");
  a.numel_ = 1;
  for (size_t i = 0; i < dims->size();) {
    if (!std::isdigit(static_cast<unsigned char>((*dims)[i]))) {
      ++i;
      continue;
    }
    int64_t v = 0;
    while (i < dims->size() && std::isdigit(static_cast<unsigned char>((*dims)[i]))) v = v * 10 + ((*dims)[i++] - '0');
    a.shape_.push_back(v);
    a.numel_ *= v;
  }
  const size_t expected = 10 + hlen + size_t(a.numel_) * npy_dtype_size(a.dtype_);
  TROUPE_CHECK(size == expected, "'", path, "' has ", size, " bytes, but its header (", *descr, ", shape (", *dims,
               ")) needs ", expected, size < expected ? ": truncated" : "");
  TROUPE_CHECK((10 + hlen) % npy_dtype_size(a.dtype_) == 0, "'", path, "': data is not aligned");
  a.data_ = p + 10 + hlen;
  return a;
}

}  // namespace troupe
