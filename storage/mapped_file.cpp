#include "storage/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

#include "base/check.hpp"

namespace troupe {

MappedFile MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TROUPE_SYSCALL(fd, "cannot open '", path, "' for reading");
  // Closes fd on every path out; the mapping does not need it once made.
  struct FdCloser {
    int fd;
    ~FdCloser() {
      if (fd >= 0) ::close(fd);
    }
  } closer{fd};

  struct stat st {};
  TROUPE_SYSCALL(::fstat(fd, &st), "cannot stat '", path, "'");
  TROUPE_CHECK(S_ISREG(st.st_mode), "'", path, "' is not a regular file");

  MappedFile f;
  f.path_ = path;
  f.size_ = size_t(st.st_size);
  if (f.size_ > 0) {
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED)
      fail_errno("mmap", __FILE__, __LINE__, str_cat("cannot map '", path, "' (", f.size_, " bytes)"));
    f.data_ = static_cast<const uint8_t*>(p);
  }
  closer.fd = -1;
  TROUPE_SYSCALL(::close(fd), "cannot close '", path, "'");
  return f;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { unmap(); }

void MappedFile::unmap() noexcept {
  // munmap of a mapping we made cannot fail short of a bug; a destructor must not throw.
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace troupe
