// Pre-flight memory check of a problem: the verifier keeps every input set in shared memory,
// candidates write their outputs there, and the judge holds each trial's references (fp32 and
// fp64) for the history checks. A problem too large for this host is an infrastructure error
// with the numbers, instead of a judge or candidate killed by the kernel half way.
#include "verifier.h"

#include <sys/statvfs.h>

#include <fmt/format.h>

#include "kernelllm/base/system.h"

namespace kernelllm::harness {
namespace {

double gb(uint64_t bytes) { return static_cast<double>(bytes) / 1e9; }

}  // namespace

Status check_problem_memory(const MemoryNeed& need) {
  const uint64_t shm = need.input_sets * need.input_bytes + need.jobs * need.n_trials * need.output_bytes;
  // fp32 reference + fp64 reference + the candidate's outputs, per correctness trial.
  const uint64_t judge = need.n_trials * need.output_bytes * 4;
  struct statvfs st {};
  if (statvfs(need.shared_dir.c_str(), &st) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
    if (static_cast<double>(shm) > 0.9 * static_cast<double>(free_bytes)) {
      return error(ErrorCode::resource_exhausted,
                   fmt::format("the problem needs about {:.1f} GB in {} ({} input sets of {:.2f} GB, and {} worker(s) x {} "
                               "trial outputs of {:.2f} GB); {:.1f} GB are free there. Use a smaller problem size, fewer "
                               "--jobs or --trials",
                               gb(shm), need.shared_dir.parent_path().string(), need.input_sets, gb(need.input_bytes), need.jobs,
                               need.n_trials, gb(need.output_bytes), gb(free_bytes)));
    }
  }
  const uint64_t avail = mem_available_bytes();
  if (avail > 0 && static_cast<double>(shm + judge) > 0.9 * static_cast<double>(avail)) {
    return error(ErrorCode::resource_exhausted,
                 fmt::format("the problem needs about {:.1f} GB of host memory ({:.1f} GB of input and output files, {:.1f} GB "
                             "of references the judge keeps for {} trials); {:.1f} GB are available. Use a smaller problem "
                             "size, fewer --jobs or --trials",
                             gb(shm + judge), gb(shm), gb(judge), need.n_trials, gb(avail)));
  }
  return {};
}

}  // namespace kernelllm::harness
