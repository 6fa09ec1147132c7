#include "model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/errors.h"

namespace specdec::model {
namespace {

// Closes a file descriptor on scope exit.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

[[noreturn]] void throw_path_error(const std::string& path, const std::string& what) {
  throw ConfigError("path", path, what);
}

}  // namespace

MappedFile MappedFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below as not a regular
  // file); it changes nothing for regular files.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    throw_path_error(path, str_cat("cannot open model file: ", std::strerror(errno)));
  }
  FdCloser closer(fd);
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    throw_path_error(path, str_cat("cannot stat model file: ", std::strerror(errno)));
  }
  if (!S_ISREG(info.st_mode)) {
    throw_path_error(path, S_ISDIR(info.st_mode)    ? "is a directory, not a regular file"
                           : S_ISFIFO(info.st_mode) ? "is a FIFO (named pipe), not a regular file"
                           : S_ISCHR(info.st_mode)  ? "is a character device, not a regular file"
                                                    : "is not a regular file");
  }
  MappedFile file;
  file.source_ = path;
  file.size_ = static_cast<size_t>(info.st_size);
  if (file.size_ == 0) return file;  // mmap rejects zero-length maps
  void* addr = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (addr == MAP_FAILED) {
    throw_path_error(path, str_cat("cannot map model file: ", std::strerror(errno)));
  }
  file.data_ = static_cast<const uint8_t*>(addr);
  file.is_mapped_ = true;
  return file;
}

MappedFile MappedFile::from_bytes(std::vector<uint8_t> bytes) {
  MappedFile file;
  file.owned_ = std::move(bytes);
  file.data_ = file.owned_.data();
  file.size_ = file.owned_.size();
  file.source_ = "<memory>";
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept { *this = std::move(other); }

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this == &other) return *this;
  release();
  // Moving a vector keeps its buffer, so data_ stays valid for owned bytes too.
  owned_ = std::move(other.owned_);
  source_ = std::move(other.source_);
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  is_mapped_ = std::exchange(other.is_mapped_, false);
  other.owned_.clear();
  return *this;
}

MappedFile::~MappedFile() { release(); }

bool MappedFile::release_pages(const uint8_t* begin, size_t n) const noexcept {
  if (!is_mapped_ || n == 0 || begin < data_ || begin >= data_ + size_) return true;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(begin) & ~(page - 1);  // data_ is page aligned
  const uintptr_t end = reinterpret_cast<uintptr_t>(data_) + size_;
  const uintptr_t hi = std::min(reinterpret_cast<uintptr_t>(begin) + n, end);
  return ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) == 0;
}

void MappedFile::release() noexcept {
  if (is_mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
  is_mapped_ = false;
  owned_.clear();
}

}  // namespace specdec::model
