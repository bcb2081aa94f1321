// GPU facts and the device copy bandwidth for `kernelllm bench`, through the CUDA driver API
// loaded at run time (libcuda.so.1 ships with the driver). Every build can therefore measure
// the same way, with or without the CUDA backend compiled in; no GPU → unsupported.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernelllm/engine/bench.h"

namespace kernelllm {

namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUdeviceptr = unsigned long long;

// The handful of driver entry points used here; their C signatures are stable across CUDA
// versions (the _v2 names are the 64-bit ones every current header maps to).
struct Driver {
  void* lib = nullptr;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuMemGetInfo)(size_t*, size_t*) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t) = nullptr;

  ~Driver() {
    if (lib != nullptr) dlclose(lib);
  }
};

template <class F>
bool bind(void* lib, const char* name, F& fn) {
  void* sym = dlsym(lib, name);
  if (sym == nullptr) return false;
  fn = reinterpret_cast<F>(sym);
  return true;
}

Result<std::unique_ptr<Driver>> load_driver() {
  auto d = std::make_unique<Driver>();
  d->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (d->lib == nullptr) {
    return error(ErrorCode::unsupported, "no CUDA driver: cannot load libcuda.so.1 (" + std::string(dlerror()) + ")");
  }
  const bool ok = bind(d->lib, "cuInit", d->cuInit) && bind(d->lib, "cuDriverGetVersion", d->cuDriverGetVersion) &&
                  bind(d->lib, "cuDeviceGet", d->cuDeviceGet) && bind(d->lib, "cuDeviceGetName", d->cuDeviceGetName) &&
                  bind(d->lib, "cuDeviceGetAttribute", d->cuDeviceGetAttribute) &&
                  bind(d->lib, "cuDevicePrimaryCtxRetain", d->cuDevicePrimaryCtxRetain) &&
                  bind(d->lib, "cuDevicePrimaryCtxRelease", d->cuDevicePrimaryCtxRelease) &&
                  bind(d->lib, "cuCtxSetCurrent", d->cuCtxSetCurrent) &&
                  bind(d->lib, "cuCtxSynchronize", d->cuCtxSynchronize) &&
                  bind(d->lib, "cuMemGetInfo_v2", d->cuMemGetInfo) && bind(d->lib, "cuMemAlloc_v2", d->cuMemAlloc) &&
                  bind(d->lib, "cuMemFree_v2", d->cuMemFree) && bind(d->lib, "cuMemcpyDtoD_v2", d->cuMemcpyDtoD);
  if (!ok) return error(ErrorCode::unsupported, "libcuda.so.1 lacks a driver entry point kernelllm bench needs");
  if (CUresult r = d->cuInit(0); r != 0) {
    return error(ErrorCode::unsupported, "cuInit failed with CUresult " + std::to_string(r) + " (no usable GPU?)");
  }
  return d;
}

Status check(CUresult r, const char* what) {
  if (r == 0) return {};
  return error(ErrorCode::internal, std::string(what) + " failed with CUresult " + std::to_string(r));
}

// The device's primary context, current on this thread while it lives.
class PrimaryContext {
 public:
  static Result<std::unique_ptr<PrimaryContext>> open(const Driver& d, int device) {
    CUdevice dev = 0;
    if (d.cuDeviceGet(&dev, device) != 0) {
      return error(ErrorCode::not_found, "cuda:" + std::to_string(device) + ": no such device");
    }
    CUcontext ctx = nullptr;
    KLLM_RETURN_IF_ERROR(check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain"));
    auto p = std::unique_ptr<PrimaryContext>(new PrimaryContext(d, dev));
    KLLM_RETURN_IF_ERROR(check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent"));
    return p;
  }
  ~PrimaryContext() {
    d_.cuCtxSetCurrent(nullptr);  // leave no dangling current context for the CUDA runtime
    d_.cuDevicePrimaryCtxRelease(dev_);
  }
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  CUdevice device() const { return dev_; }

 private:
  PrimaryContext(const Driver& d, CUdevice dev) : d_(d), dev_(dev) {}
  const Driver& d_;
  CUdevice dev_;
};

class DeviceBuffer {
 public:
  DeviceBuffer(const Driver& d, CUdeviceptr p) : d_(d), p_(p) {}
  ~DeviceBuffer() { d_.cuMemFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  CUdeviceptr get() const { return p_; }

 private:
  const Driver& d_;
  CUdeviceptr p_;
};

}  // namespace

Result<GpuFacts> query_gpu(int device) {
  KLLM_ASSIGN_OR_RETURN(auto d, load_driver());
  KLLM_ASSIGN_OR_RETURN(auto ctx, PrimaryContext::open(*d, device));
  GpuFacts f;
  char name[256] = {};
  KLLM_RETURN_IF_ERROR(check(d->cuDeviceGetName(name, sizeof(name) - 1, ctx->device()), "cuDeviceGetName"));
  f.name = name;
  KLLM_RETURN_IF_ERROR(check(d->cuDriverGetVersion(&f.driver_cuda_version), "cuDriverGetVersion"));
  size_t free_b = 0, total_b = 0;
  KLLM_RETURN_IF_ERROR(check(d->cuMemGetInfo(&free_b, &total_b), "cuMemGetInfo"));
  f.free_bytes = free_b;
  f.total_bytes = total_b;
  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR, _MULTIPROCESSOR_COUNT,
  // _MAX_SHARED_MEMORY_PER_BLOCK_OPTIN (cuda.h).
  const std::pair<int, int*> attrs[] = {{75, &f.major}, {76, &f.minor}, {16, &f.sm_count}, {97, &f.smem_per_block}};
  for (const auto& [attr, out] : attrs) {
    KLLM_RETURN_IF_ERROR(check(d->cuDeviceGetAttribute(out, attr, ctx->device()), "cuDeviceGetAttribute"));
  }
  return f;
}

namespace {
// The driver, the retained primary context and the ballast, released in reverse order.
struct Ballast {
  std::unique_ptr<Driver> driver;
  std::unique_ptr<PrimaryContext> context;
  std::unique_ptr<DeviceBuffer> buffer;
  ~Ballast() {
    buffer.reset();
    context.reset();
  }
};
}  // namespace

Result<std::shared_ptr<void>> cap_device_memory(int device, uint64_t cap_bytes) {
  auto b = std::make_shared<Ballast>();
  KLLM_ASSIGN_OR_RETURN(b->driver, load_driver());
  KLLM_ASSIGN_OR_RETURN(b->context, PrimaryContext::open(*b->driver, device));
  size_t free_b = 0, total_b = 0;
  KLLM_RETURN_IF_ERROR(check(b->driver->cuMemGetInfo(&free_b, &total_b), "cuMemGetInfo"));
  if (cap_bytes >= total_b) return std::shared_ptr<void>(b);
  const uint64_t ballast = total_b - cap_bytes;
  if (ballast > free_b) {
    return error(ErrorCode::resource_exhausted,
                 "memory cap: cuda:" + std::to_string(device) + " has " + std::to_string(free_b >> 20) +
                     " MiB free, less than the " + std::to_string(ballast >> 20) + " MiB to set aside for a " +
                     std::to_string(cap_bytes >> 20) + " MiB cap");
  }
  CUdeviceptr p = 0;
  KLLM_RETURN_IF_ERROR(check(b->driver->cuMemAlloc(&p, ballast), "cuMemAlloc (memory cap ballast)"));
  b->buffer = std::make_unique<DeviceBuffer>(*b->driver, p);
  return std::shared_ptr<void>(b);
}

Result<double> measure_copy_bandwidth_gbps(int device) {
  KLLM_ASSIGN_OR_RETURN(auto d, load_driver());
  KLLM_ASSIGN_OR_RETURN(auto ctx, PrimaryContext::open(*d, device));
  // 1 GiB each way: far past L2 (50 MB on H100), so every byte goes to HBM and back.
  constexpr size_t kBytes = size_t{1} << 30;
  CUdeviceptr src = 0, dst = 0;
  KLLM_RETURN_IF_ERROR(check(d->cuMemAlloc(&src, kBytes), "cuMemAlloc (1 GiB copy source)"));
  DeviceBuffer src_buf(*d, src);
  KLLM_RETURN_IF_ERROR(check(d->cuMemAlloc(&dst, kBytes), "cuMemAlloc (1 GiB copy target)"));
  DeviceBuffer dst_buf(*d, dst);
  std::vector<double> seconds;
  for (int i = 0; i < 25; ++i) {
    KLLM_RETURN_IF_ERROR(check(d->cuCtxSynchronize(), "cuCtxSynchronize"));
    const auto t0 = std::chrono::steady_clock::now();
    KLLM_RETURN_IF_ERROR(check(d->cuMemcpyDtoD(dst, src, kBytes), "cuMemcpyDtoD"));
    KLLM_RETURN_IF_ERROR(check(d->cuCtxSynchronize(), "cuCtxSynchronize"));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= 5) seconds.push_back(s);  // the first copies pay for page mapping and clocks
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  return 2.0 * static_cast<double>(kBytes) / median / 1e9;  // read + write
}

}  // namespace kernelllm
