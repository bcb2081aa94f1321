// MappedFile and read_text_file on POSIX.
#include "kernelllm/base/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
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

namespace {

// A file descriptor open for reading, closed when it goes out of scope.
struct ReadFd {
  int fd = -1;
  ReadFd() = default;
  ReadFd(const ReadFd&) = delete;
  ReadFd& operator=(const ReadFd&) = delete;
  ~ReadFd() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens `path` read-only into `f`, and stats it: not_found when it is missing, else io_error with
// the reason.
Status open_for_reading(const std::filesystem::path& path, ReadFd& f, struct stat& st) {
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) {
    const int e = errno;
    return error(e == ENOENT ? ErrorCode::not_found : ErrorCode::io_error,
                 path.string() + ": cannot open for reading: " + std::strerror(e));
  }
  if (fstat(f.fd, &st) != 0) {
    return error(ErrorCode::io_error, path.string() + ": cannot stat: " + std::strerror(errno));
  }
  return Status::ok_status();
}

}  // namespace

Result<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  ReadFd f;
  struct stat st {};
  KLLM_RETURN_IF_ERROR(open_for_reading(path, f, st));
  if (!S_ISREG(st.st_mode)) {
    return error(ErrorCode::invalid_argument, path.string() + ": expected a regular file");
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ > 0) {
    void* p = mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, f.fd, 0);
    if (p == MAP_FAILED) {
      file.size_ = 0;
      return error(ErrorCode::io_error, path.string() + ": mmap failed: " + std::strerror(errno));
    }
    file.data_ = p;
  }
  return file;  // the mapping stays valid after the fd is closed
}

Result<std::string> read_text_file(const std::filesystem::path& path, size_t max_bytes) {
  // POSIX reads rather than a stream: a failed read (EIO, or ESRCH from /proc/<pid>/ files of a
  // process that exits meanwhile) must come back as an error, never as an exception thrown from
  // the stream buffer or as a silently short string. Files that report size 0 (/proc, /sys) are
  // read until end of file.
  ReadFd f;
  struct stat st {};
  KLLM_RETURN_IF_ERROR(open_for_reading(path, f, st));
  if (S_ISDIR(st.st_mode)) {
    return error(ErrorCode::io_error, path.string() + ": cannot read: " + std::strerror(EISDIR));
  }
  const auto too_big = [&](const std::string& found) {
    return error(ErrorCode::out_of_range,
                 path.string() + ": expected at most " + std::to_string(max_bytes) + " bytes, found " + found);
  };
  if (static_cast<size_t>(st.st_size) > max_bytes) return too_big(std::to_string(st.st_size));
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return error(ErrorCode::io_error, path.string() + ": read failed: " + std::strerror(errno));
    if (n == 0) return out;
    if (out.size() + static_cast<size_t>(n) > max_bytes) return too_big("more");
    out.append(buf, static_cast<size_t>(n));
  }
}

Result<std::unique_ptr<TempDir>> TempDir::create(std::string_view prefix) {
  std::error_code ec;
  const std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) return error(ErrorCode::io_error, "no temporary directory: " + ec.message());
  std::string templ = (base / (std::string(prefix) + "-XXXXXX")).string();
  if (mkdtemp(templ.data()) == nullptr) return error(ErrorCode::io_error, templ + ": cannot create a temporary directory");
  return std::unique_ptr<TempDir>(new TempDir(templ));
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace kernelllm
