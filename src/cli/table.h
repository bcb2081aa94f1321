// Small printing helpers shared by CLI commands (verify, optimize): table cells cut to a width
// and the warning printed when candidates run without the sandbox.
#pragma once

#include <cstdio>
#include <string>

namespace kernelllm::cli {

// `s` cut to `width` characters, the cut marked with '~'.
inline std::string cell(std::string s, size_t width) {
  if (s.size() > width) s = s.substr(0, width - 1) + "~";
  return s;
}

// Paths keep their end (the file name) when cut.
inline std::string path_cell(const std::string& s, size_t width) {
  return s.size() <= width ? s : "~" + s.substr(s.size() - (width - 1));
}

inline void print_no_sandbox_warning() {
  std::fprintf(stderr,
               "\n*** WARNING: --no-sandbox: candidate code runs UNCONFINED with your user's rights, network and files. ***\n"
               "*** Use it only to debug the verifier on code you trust.                                              ***\n\n");
}

}  // namespace kernelllm::cli
