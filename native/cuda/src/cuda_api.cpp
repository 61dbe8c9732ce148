// cuda_api.cpp: dlopen/dlsym of the CUDA driver and NVRTC (see cuda_api.h).
#include "cuda_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>


namespace mlxn_cuda {
namespace {

template <typename F>
bool resolve(void* lib, F*& slot, const char* name) {
  slot = reinterpret_cast<F*>(dlsym(lib, name));
  return slot != nullptr;
}

// First symbol of `names` that resolves.
template <typename F>
bool resolve_any(void* lib, F*& slot, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (resolve(lib, slot, n)) return true;
  return false;
}

Driver g_driver;
const Driver* g_driver_ok = nullptr;
std::once_flag g_driver_once;

void load_driver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return;
  Driver& d = g_driver;
  bool ok = true;
  ok &= resolve(lib, d.cuInit, "cuInit");
  ok &= resolve(lib, d.cuDriverGetVersion, "cuDriverGetVersion");
  ok &= resolve(lib, d.cuDeviceGetCount, "cuDeviceGetCount");
  ok &= resolve(lib, d.cuDeviceGet, "cuDeviceGet");
  ok &= resolve(lib, d.cuDeviceGetName, "cuDeviceGetName");
  ok &= resolve(lib, d.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  ok &= resolve(lib, d.cuDeviceTotalMem, "cuDeviceTotalMem_v2");
  ok &= resolve(lib, d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  ok &= resolve(lib, d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  ok &= resolve(lib, d.cuCtxSetCurrent, "cuCtxSetCurrent");
  ok &= resolve(lib, d.cuMemAlloc, "cuMemAlloc_v2");
  ok &= resolve(lib, d.cuMemFree, "cuMemFree_v2");
  ok &= resolve(lib, d.cuMemsetD8Async, "cuMemsetD8Async");
  ok &= resolve(lib, d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  ok &= resolve(lib, d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  ok &= resolve(lib, d.cuModuleLoadDataEx, "cuModuleLoadDataEx");
  ok &= resolve(lib, d.cuModuleUnload, "cuModuleUnload");
  ok &= resolve(lib, d.cuModuleGetFunction, "cuModuleGetFunction");
  ok &= resolve(lib, d.cuFuncGetAttribute, "cuFuncGetAttribute");
  ok &= resolve(lib, d.cuFuncSetAttribute, "cuFuncSetAttribute");
  ok &= resolve(lib, d.cuLaunchKernel, "cuLaunchKernel");
  ok &= resolve(lib, d.cuStreamCreate, "cuStreamCreate");
  ok &= resolve(lib, d.cuStreamDestroy, "cuStreamDestroy_v2");
  ok &= resolve(lib, d.cuStreamSynchronize, "cuStreamSynchronize");
  ok &= resolve(lib, d.cuEventCreate, "cuEventCreate");
  ok &= resolve(lib, d.cuEventDestroy, "cuEventDestroy_v2");
  ok &= resolve(lib, d.cuEventRecord, "cuEventRecord");
  ok &= resolve(lib, d.cuStreamWaitEvent, "cuStreamWaitEvent");
  ok &= resolve(lib, d.cuEventQuery, "cuEventQuery");
  ok &= resolve(lib, d.cuEventSynchronize, "cuEventSynchronize");
  ok &= resolve_any(lib, d.cuEventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"});
  ok &= resolve(lib, d.cuGetErrorName, "cuGetErrorName");
  ok &= resolve(lib, d.cuGetErrorString, "cuGetErrorString");
  if (!ok) return;  // too old a driver: treated as absent
  // Graphs are optional: all six or none.
  bool graphs = resolve(lib, d.cuStreamBeginCapture, "cuStreamBeginCapture_v2");
  graphs &= resolve(lib, d.cuStreamEndCapture, "cuStreamEndCapture");
  graphs &= resolve(lib, d.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
  graphs &= resolve(lib, d.cuGraphLaunch, "cuGraphLaunch");
  graphs &= resolve(lib, d.cuGraphExecDestroy, "cuGraphExecDestroy");
  graphs &= resolve(lib, d.cuGraphDestroy, "cuGraphDestroy");
  if (!graphs) d.cuGraphLaunch = nullptr;
  if (!resolve(lib, d.cuLaunchKernelEx, "cuLaunchKernelEx")) d.cuLaunchKernelEx = nullptr;
  if (!resolve(lib, d.cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled")) d.cuTensorMapEncodeTiled = nullptr;
  if (d.cuInit(0) != CUDA_SUCCESS) return;
  g_driver_ok = &g_driver;
}

Nvrtc g_nvrtc;
const Nvrtc* g_nvrtc_ok = nullptr;
std::string g_nvrtc_why;
std::once_flag g_nvrtc_once;

void load_nvrtc() {
  std::string tried;
  void* lib = nullptr;
  const char* env = std::getenv("MLX_NATIVE_NVRTC");
  std::initializer_list<const char*> names = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  if (env && *env) {
    lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    tried = env;
  } else {
    // The loader's search path first, then the toolkit's own folders, which
    // are often not on it.
    std::vector<std::string> dirs = {""};
    for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
      if (const char* v = std::getenv(var)) dirs.push_back(std::string(v) + "/lib64/");
    dirs.push_back("/usr/local/cuda/lib64/");
    for (const std::string& dir : dirs) {
      for (const char* n : names) {
        const std::string p = dir + n;
        lib = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (lib) break;
        if (!tried.empty()) tried += ", ";
        tried += p;
      }
      if (lib) break;
    }
  }
  if (!lib) {
    g_nvrtc_why = "cannot load NVRTC (tried " + tried +
                  "; set MLX_NATIVE_NVRTC to its path or add its folder to LD_LIBRARY_PATH)";
    return;
  }
  Nvrtc& n = g_nvrtc;
  bool ok = true;
  ok &= resolve(lib, n.nvrtcVersion, "nvrtcVersion");
  ok &= resolve(lib, n.nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs");
  ok &= resolve(lib, n.nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs");
  ok &= resolve(lib, n.nvrtcCreateProgram, "nvrtcCreateProgram");
  ok &= resolve(lib, n.nvrtcDestroyProgram, "nvrtcDestroyProgram");
  ok &= resolve(lib, n.nvrtcCompileProgram, "nvrtcCompileProgram");
  ok &= resolve(lib, n.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize");
  ok &= resolve(lib, n.nvrtcGetProgramLog, "nvrtcGetProgramLog");
  ok &= resolve(lib, n.nvrtcGetPTXSize, "nvrtcGetPTXSize");
  ok &= resolve(lib, n.nvrtcGetPTX, "nvrtcGetPTX");
  ok &= resolve(lib, n.nvrtcGetCUBINSize, "nvrtcGetCUBINSize");
  ok &= resolve(lib, n.nvrtcGetCUBIN, "nvrtcGetCUBIN");
  ok &= resolve(lib, n.nvrtcGetErrorString, "nvrtcGetErrorString");
  if (!ok) {
    g_nvrtc_why = "the NVRTC library found lacks functions this backend needs (NVRTC 11.2 or newer is required)";
    return;
  }
  if (n.nvrtcVersion(&n.major, &n.minor) != NVRTC_SUCCESS) {
    g_nvrtc_why = "nvrtcVersion failed";
    return;
  }
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(n.nvrtcVersion), &info) && info.dli_fname)
    n.path = info.dli_fname;
  g_nvrtc_ok = &g_nvrtc;
}

}  // namespace

const Driver* driver() {
  std::call_once(g_driver_once, load_driver);
  return g_driver_ok;
}

std::string cu_error_text(CUresult r) {
  const Driver* d = driver();
  const char* name = nullptr;
  const char* text = nullptr;
  if (d) {
    d->cuGetErrorName(r, &name);
    d->cuGetErrorString(r, &text);
  }
  std::string s = name ? name : ("CUresult " + std::to_string(r));
  if (text) s += std::string(" (") + text + ")";
  return s;
}

const Nvrtc* nvrtc(std::string* why) {
  std::call_once(g_nvrtc_once, load_nvrtc);
  if (!g_nvrtc_ok && why) *why = g_nvrtc_why;
  return g_nvrtc_ok;
}

}  // namespace mlxn_cuda
