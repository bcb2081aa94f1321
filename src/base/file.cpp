// MappedFile and read_text_file on POSIX.
#include "kernelllm/base/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace kernelllm {

MappedFile::~MappedFile() { reset(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

void MappedFile::reset() {
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

Result<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return error(errno == ENOENT ? ErrorCode::not_found : ErrorCode::io_error,
                 path.string() + ": cannot open: " + std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return error(ErrorCode::io_error, path.string() + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return error(ErrorCode::invalid_argument, path.string() + ": expected a regular file");
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ > 0) {
    void* p = mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      file.size_ = 0;
      return error(ErrorCode::io_error, path.string() + ": mmap failed: " + std::strerror(e));
    }
    file.data_ = p;
  }
  ::close(fd);  // the mapping stays valid after close
  return file;
}

Result<std::string> read_text_file(const std::filesystem::path& path, size_t max_bytes) {
  // POSIX reads rather than a stream: a failed read (EIO, or ESRCH from /proc/<pid>/ files of a
  // process that exits meanwhile) must come back as an error, never as an exception thrown from
  // the stream buffer or as a silently short string. Files that report size 0 (/proc, /sys) are
  // read until end of file.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    return error(e == ENOENT ? ErrorCode::not_found : ErrorCode::io_error,
                 path.string() + ": cannot open for reading: " + std::strerror(e));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    int e = S_ISDIR(st.st_mode) ? EISDIR : errno;
    ::close(fd);
    return error(ErrorCode::io_error, path.string() + ": cannot read: " + std::strerror(e));
  }
  const auto too_big = [&](const std::string& found) {
    return error(ErrorCode::out_of_range,
                 path.string() + ": expected at most " + std::to_string(max_bytes) + " bytes, found " + found);
  };
  if (static_cast<size_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return too_big(std::to_string(st.st_size));
  }
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      return error(ErrorCode::io_error, path.string() + ": read failed: " + std::strerror(e));
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      return too_big("more");
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace kernelllm
