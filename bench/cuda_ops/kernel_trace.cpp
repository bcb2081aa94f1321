// Kernel timeline of any CUDA program, CUDA graphs and programmatic dependent launch included:
// a CUPTI injection library. Every kernel's start and end (GPU clock, ns), its graph launch's
// correlation id, grid, block and demangled name go to a CSV file, one row per kernel:
//
//   KERNELLLM_TRACE_OUT=/tmp/trace.csv CUDA_INJECTION64_PATH=build/libkernelllm_kernel_trace.so
//     build/kernelllm bench ... -n 20      (one command line)
//   python3 bench/cuda_ops/trace_summary.py /tmp/trace.csv
//
// CUPTI's concurrent-kernel records do not serialize kernels, so overlaps under PDL stay as they
// ran. A measurement tool (docs/cuda-engine.md quotes its timelines), not part of the engine.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {

constexpr size_t kBufferBytes = size_t{16} << 20;

std::mutex out_mu;
FILE* out = nullptr;

void report(const char* what, CUptiResult r) {
  if (r == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  std::fprintf(stderr, "kernel_trace: %s failed: %s\n", what, text ? text : "unknown CUPTI error");
}

std::string demangled(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  for (char& c : s) {
    if (c == ',' || c == '\n') c = ';';  // one CSV field
  }
  return s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  const std::lock_guard<std::mutex> lock(out_mu);
  while (out && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    std::fprintf(out, "%llu,%llu,%u,%u,%llu,%d,%d,%d,%d,%u,%s\n", static_cast<unsigned long long>(k->start),
                 static_cast<unsigned long long>(k->end), k->correlationId, k->graphId,
                 static_cast<unsigned long long>(k->graphNodeId), k->gridX, k->gridY, k->gridZ, k->blockX,
                 k->registersPerThread, demangled(k->name).c_str());
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS && dropped > 0) {
    std::fprintf(stderr, "kernel_trace: %zu records dropped\n", dropped);
  }
  std::free(buffer);
}

void finish() {
  report("cuptiActivityFlushAll", cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  const std::lock_guard<std::mutex> lock(out_mu);
  if (out) std::fclose(out);
  out = nullptr;
}

}  // namespace

// Called by the CUDA driver at its initialization when CUDA_INJECTION64_PATH names this library.
extern "C" int InitializeInjection() {
  const char* env = std::getenv("KERNELLLM_TRACE_OUT");
  const char* path = env && *env ? env : "kernel_trace.csv";
  out = std::fopen(path, "w");
  if (!out) {
    std::fprintf(stderr, "kernel_trace: cannot open %s for writing\n", path);
    return 0;
  }
  std::fprintf(out, "start_ns,end_ns,correlation,graph,graph_node,grid_x,grid_y,grid_z,block_x,registers,name\n");
  report("cuptiActivityRegisterCallbacks", cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
  report("cuptiActivityEnable", cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  std::atexit(finish);
  return 1;
}
