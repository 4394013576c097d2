#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <filesystem>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "base/check.hpp"
#include "storage/safetensors.hpp"

namespace troupe {
namespace {

using json = nlohmann::json;

static_assert(std::endian::native == std::endian::little, "safetensors writer assumes a little-endian host");

// A JSON string literal; throws (naming `what`) on invalid UTF-8.
std::string quoted(const std::string& s, const std::string& path, const std::string& what) {
  try {
    return json(s).dump();
  } catch (const json::exception& e) {
    TROUPE_FAIL("write_safetensors '", path, "': ", what, " is not valid UTF-8: ", e.what());
  }
}

// The header the reference serializer produces for the same tensors in the same order:
// compact JSON, "__metadata__" first, fields in the order dtype, shape, data_offsets,
// then spaces up to a multiple of 8 bytes so the buffer starts 8-aligned.
std::string make_header(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      h += str_cat(first ? "" : ",", quoted(k, path, str_cat("metadata key '", k, "'")), ":",
                   quoted(v, path, str_cat("metadata value of '", k, "'")));
      first = false;
    }
    h += "}";
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    std::string shape;
    for (int d = 0; d < t.ndim(); ++d) shape += str_cat(d ? "," : "", t.shape()[size_t(d)]);
    h += str_cat(h.size() > 1 ? "," : "", quoted(name, path, str_cat("tensor name '", name, "'")), ":{\"dtype\":\"",
                 safetensors_dtype_name(t.dtype()), "\",\"shape\":[", shape, "],\"data_offsets\":[", offset, ",",
                 offset + t.nbytes(), "]}");
    offset += t.nbytes();
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w == -1 && errno == EINTR) continue;
    TROUPE_SYSCALL(w, "cannot write '", path, "'");
    p += w;
    n -= size_t(w);
  }
}

// Closes a descriptor on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  void close(const std::string& path) {
    const int f = fd;
    fd = -1;
    TROUPE_SYSCALL(::close(f), "cannot close '", path, "'");
  }
};

}  // namespace

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::unordered_set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    const std::string w = str_cat("write_safetensors '", path, "', tensor '", name, "'");
    TROUPE_CHECK(!name.empty() && name != "__metadata__", w, ": reserved or empty name");
    TROUPE_CHECK(seen.insert(name).second, w, ": name given twice");
    TROUPE_CHECK(t.defined(), w, ": tensor is undefined");
    TROUPE_CHECK(t.device() == DeviceKind::cpu, w, ": needs a host tensor, got ", t.str());
  }
  const std::string header = make_header(path, tensors, metadata);

  // Everything goes to a temporary name first: a crash leaves at worst a stray .tmp,
  // never a partial file under `path`.
  const std::string tmp = path + ".tmp";
  try {
    Fd fd{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    TROUPE_SYSCALL(fd.fd, "cannot create '", tmp, "'");
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
    write_all(fd.fd, len, 8, tmp);
    write_all(fd.fd, header.data(), header.size(), tmp);
    for (const auto& [name, t] : tensors) write_all(fd.fd, t.data(), t.nbytes(), tmp);
    TROUPE_SYSCALL(::fsync(fd.fd), "cannot fsync '", tmp, "'");
    fd.close(tmp);
    TROUPE_SYSCALL(::rename(tmp.c_str(), path.c_str()), "cannot rename '", tmp, "' to '", path, "'");
  } catch (...) {
    ::unlink(tmp.c_str());  // best effort; the original error is the one to report
    throw;
  }

  // The rename is durable only once the directory entry is on disk.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  Fd dfd{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  TROUPE_SYSCALL(dfd.fd, "cannot open directory '", dir, "' to fsync it");
  TROUPE_SYSCALL(::fsync(dfd.fd), "cannot fsync directory '", dir, "'");
  dfd.close(dir);
}

}  // namespace troupe
