#include "base/output_file.hpp"

#include <cerrno>
#include <cstring>

#include "base/check.hpp"

namespace troupe {

OutputFile::OutputFile(const std::string& path, std::string what) : what_(std::move(what)) {
  file_ = std::fopen(path.c_str(), "wb");
  TROUPE_CHECK(file_ != nullptr, "cannot create ", what_, ": ", std::strerror(errno));
}

OutputFile::~OutputFile() {
  if (file_) std::fclose(file_);  // a destructor cannot report: close() does
}

void OutputFile::write(std::string_view bytes) {
  TROUPE_CHECK(file_ != nullptr, what_, " is closed");
  TROUPE_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), file_) == bytes.size(), "writing ", what_, ": ",
               std::strerror(errno));
}

void OutputFile::flush() {
  if (file_) TROUPE_CHECK(std::fflush(file_) == 0, "writing ", what_, ": ", std::strerror(errno));
}

void OutputFile::close() {
  if (!file_) return;
  std::FILE* f = file_;
  file_ = nullptr;
  TROUPE_CHECK(std::fclose(f) == 0, "closing ", what_, ": ", std::strerror(errno));
}

}  // namespace troupe
