// Errors as values: Status (ok or code + message) and Result<T> (a T or a Status).
// Used at every boundary that can fail on bad input (files, parsing, user requests,
// worker I/O). Messages say what was expected and what was found. No exceptions.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kernelllm {

enum class ErrorCode {
  ok = 0,
  invalid_argument,  // the caller asked for something malformed
  not_found,         // a file, tensor, token or model that should exist does not
  io_error,          // the OS refused (open, read, mmap, write)
  parse_error,       // bytes or text that do not follow their format
  unsupported,       // well-formed but outside what we implement
  out_of_range,      // an index, offset or size past its bound
  resource_exhausted,// memory, KV capacity, limits
  internal,          // a bug in kernelllm
};

std::string_view error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }

  bool ok() const { return code_ == ErrorCode::ok; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "parse_error: config.json: expected integer for hidden_size, found string"
  std::string to_string() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status with_context(std::string_view context) const;

 private:
  ErrorCode code_ = ErrorCode::ok;
  std::string message_;
};

inline Status error(ErrorCode code, std::string message) { return Status(code, std::move(message)); }

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(implicit)
    assert(!std::get<Status>(v_).ok() && "Result built from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kernelllm

#define KLLM_CONCAT_INNER(a, b) a##b
#define KLLM_CONCAT(a, b) KLLM_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` (a Status) is not ok.
#define KLLM_RETURN_IF_ERROR(expr)                  \
  do {                                              \
    ::kernelllm::Status kllm_status_ = (expr);      \
    if (!kllm_status_.ok()) return kllm_status_;    \
  } while (0)

// `KLLM_ASSIGN_OR_RETURN(auto x, make_x());` binds the value or returns the error.
#define KLLM_ASSIGN_OR_RETURN(lhs, expr) \
  KLLM_ASSIGN_OR_RETURN_IMPL(KLLM_CONCAT(kllm_result_, __LINE__), lhs, expr)
#define KLLM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
