// Pre-flight memory check of a problem. Inputs are made on the device in each process that uses
// them (worker/inputs.py), so on a GPU the host holds outputs in passing: one output file per
// candidate worker in /dev/shm (two with the probe's), the worker's host copy of it and the
// judge's read of it. On the CPU the inputs, the judge's kept references and the timing sets
// are host memory too. A problem too large for this host is an infrastructure error with the
// numbers, instead of a judge or candidate killed by the kernel half way.
#include "verifier.h"

#include <sys/statvfs.h>

#include <fmt/format.h>

#include "kernelllm/base/system.h"

namespace kernelllm::harness {
namespace {

double gb(uint64_t bytes) { return static_cast<double>(bytes) / 1e9; }

}  // namespace

Status check_problem_memory(const MemoryNeed& need) {
  const uint64_t shm = need.jobs * 2 * need.output_bytes;
  uint64_t host = shm + need.jobs * 2 * need.output_bytes;
  if (need.cpu) {
    // Per worker: an input set and its outputs (x2 for the probe set); the judge: an input set, the
    // references it keeps (fp32 + fp64, at least two trials) and the timing sets it times on.
    host += need.jobs * (2 * need.input_bytes + 2 * need.output_bytes + need.timing_sets * need.input_bytes);
    host += need.input_bytes + 2 * 3 * need.output_bytes + need.timing_sets * need.input_bytes;
  }
  struct statvfs st {};
  if (statvfs(need.shared_dir.c_str(), &st) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
    if (static_cast<double>(shm) > 0.9 * static_cast<double>(free_bytes)) {
      return error(ErrorCode::resource_exhausted,
                   fmt::format("the problem needs about {:.1f} GB in {} ({} worker(s) x 2 output files of {:.2f} GB); {:.1f} GB "
                               "are free there. Use a smaller problem size or fewer --jobs",
                               gb(shm), need.shared_dir.parent_path().string(), need.jobs, gb(need.output_bytes),
                               gb(free_bytes)));
    }
  }
  const uint64_t avail = mem_available_bytes();
  if (avail > 0 && static_cast<double>(host) > 0.9 * static_cast<double>(avail)) {
    return error(ErrorCode::resource_exhausted,
                 fmt::format("the problem needs about {:.1f} GB of host memory ({} worker(s); inputs {:.2f} GB and outputs "
                             "{:.2f} GB per set{}); {:.1f} GB are available. Use a smaller problem size or fewer --jobs",
                             gb(host), need.jobs, gb(need.input_bytes), gb(need.output_bytes),
                             need.cpu ? ", held in host memory on the CPU device" : "", gb(avail)));
  }
  return {};
}

}  // namespace kernelllm::harness
