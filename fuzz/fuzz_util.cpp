#include "fuzz/fuzz_util.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace troupe::fuzz {

const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    const std::filesystem::path p =
        std::filesystem::path(tmp != nullptr ? tmp : "/tmp") / ("troupe-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(p);
    return p.string();
  }();
  return dir;
}

std::string write_scratch_file(const std::string& name, std::string_view bytes) {
  const std::filesystem::path p = std::filesystem::path(scratch_dir()) / name;
  std::filesystem::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  return p.string();
}

std::string_view as_text(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }

}  // namespace troupe::fuzz
