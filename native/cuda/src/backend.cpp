// backend.cpp: the mlx_native.h C ABI over the CUDA driver API and NVRTC.
//
// Binding convention (kernels in shaders/cuda/*.cu are written against it):
//   - a kernel is an `extern "C" __global__` function named like its Metal
//     counterpart;
//   - its parameters are, in order, one pointer per bound buffer/bytes index,
//     in ascending index order (buffer and bytes bindings share one index
//     space, as in Metal's buffer argument table):
//       BUFFER  -> the buffer's device address + the binding's byte offset;
//       BYTES   -> a device pointer to this dispatch's copy of the bytes (all
//                  inline bytes of a commit live in one device staging buffer,
//                  each copy 16-byte aligned, uploaded before the first launch);
//   - THREADGROUP_MEMORY bindings (their own index space) add no parameter:
//     their lengths, summed, are the launch's dynamic shared memory, laid out
//     in ascending threadgroup index order, each at the sum of the lengths
//     before it; the kernel reads it through `extern __shared__`;
//   - grid = threadgroups per grid, block = threads per threadgroup.
// Dispatches of one encoder go to its CUDA stream in order, but for those
// between two barriers (a stretch, which touch no memory another of them
// writes), which may run side by side on streams beside it (the device
// option "concurrent"); a barrier is where they join.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "../../common/compile_job.h"
#include "../../common/messages.h"
#include "../../common/patch_bytes.h"
#include "../../include/mlx_native.h"
#include "../../include/mlx_native_block.h"
#include "cuda_api.h"
#include "util.h"

#define MLXN_EXPORT extern "C" __attribute__((visibility("default")))

using namespace mlxn_cuda;
using mlxn::common::ok_msg;
using mlxn::common::set_msg;
using mlxn::common::write_string;

namespace {

// The first line of a program whose every entry begins with mlxn_entry()
// (shaders/cuda/common.cuh), as ts/registry.ts cudaProgram writes it: its
// kernels may be launched with programmatic stream serialization.
constexpr char kPdlMark[] = "#define MLXN_PDL 1\n";

// ---- messages ----

// ---- objects ----
// Objects are reference counted so that a handle the caller releases stays
// alive while something still needs it: buffers and pipelines while recorded
// or in-flight dispatches use them, a library's module while its pipelines
// live, a device's context while any object made from it lives.

struct Device {
  std::atomic<int> refs{1};
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUstream xfer = nullptr;  // write/read/zero-fill, each synchronised before returning
  std::string name;
  int cc_major = 0, cc_minor = 0;
  // Whether kernels of marked programs (kPdlMark) launch with programmatic
  // stream serialization: compute capability 9.0 on, a driver with
  // cuLaunchKernelEx, and the "pdl" option not "off".
  std::atomic<bool> pdl{false};
  // Whether the dispatches of a stretch run side by side (launch_all): the
  // "concurrent" option not "off".
  std::atomic<bool> concurrent{true};
  uint64_t max_threads = 0, smem_optin = 0, smem_default = 0, warp = 32, total_mem = 0, sms = 0;
  uint64_t max_block[3] = {0, 0, 0}, max_grid[3] = {0, 0, 0};
};

struct Buffer {
  std::atomic<int> refs{1};
  Device* dev;
  CUdeviceptr ptr = 0;
  uint64_t len = 0;
};

struct Library {
  std::atomic<int> refs{1};
  Device* dev;
  CUmodule module = nullptr;
  std::string name;
  std::vector<std::string> kernels;
  // Parameter sizes of each kernel whose image says them (a CUBIN's
  // .nv.info.<kernel> section); a PTX image says nothing, so has no entries.
  std::map<std::string, std::vector<uint32_t>> param_sizes;
  // The source began with kPdlMark: every entry waits for the grid ahead of
  // it before touching memory (shaders/cuda/common.cuh mlxn_entry).
  bool pdl = false;
};

struct Pipeline {
  std::atomic<int> refs{1};
  Library* lib;
  CUfunction fn = nullptr;
  std::string name;
  uint32_t max_threads = 0;
  uint64_t static_smem = 0;
  uint64_t max_dynamic_smem = 0;           // the function's current limit (raised on demand)
  long param_count = -1;                   // -1: the image does not say
  std::vector<uint32_t> param_sizes;
};

// One recorded kernel launch. Pointer arguments are final except those of
// BYTES bindings, which hold an offset into the commit's staging buffer until
// commit knows its address.
struct Arg {
  CUdeviceptr value;
  bool staged;
  uint32_t index;  // the binding's [[buffer(i)]] index
  uint64_t len;    // BYTES: the inline data's length (what a patch must keep)
  bool tensor_map = false;  // staged: an encoded CUtensorMap (no patch touches it)
};
struct Launch {
  Pipeline* pipe;
  unsigned grid[3], block[3];
  unsigned smem;
  bool after_barrier = false;  // a barrier was recorded between it and the dispatch before
  std::vector<Arg> args;
  std::vector<Buffer*> buffers;  // one reference each
};

// Streams beside an encoder's own on which a stretch's dispatches run (its
// first on the encoder's stream, the others dealt over these in turn).
constexpr size_t kSideStreams = 3;

struct Encoder {
  Device* dev;
  CUstream stream = nullptr;
  CUevent start = nullptr, stop = nullptr;
  // Made at the first stretch of more than one dispatch: the side streams, the
  // event each stretch's side launches wait for (recorded on `stream` before
  // the stretch) and the events `stream` waits for after it (one a side stream).
  CUstream side[kSideStreams] = {};
  CUevent fork = nullptr;
  CUevent join[kSideStreams] = {};
  bool side_failed = false;     // making them failed: stretches run in order on `stream`
  bool barrier_pending = false;  // a barrier since the last recorded dispatch
  int32_t state = MLXN_ENCODER_RECORDING;
  std::vector<Launch> recorded;
  std::vector<uint8_t> staging;           // inline bytes of the recorded dispatches
  std::vector<Launch> inflight;           // the committed launches, until completion
  std::vector<uint8_t> inflight_staging;  // kept until completion
  CUdeviceptr staging_dev = 0;
  uint64_t staging_cap = 0;
  // mlxn_encoder_flush: part of the recording is launched (since `start`),
  // `staging_uploaded` bytes of `staging` are on the device, and `retired`
  // holds staging buffers replaced meanwhile, which launched kernels may still
  // read: freed once the commit's work has ended.
  bool flushed = false;
  uint64_t staging_uploaded = 0;
  std::vector<CUdeviceptr> retired;
  uint64_t gpu_ns = 0;
  std::string error;                      // MLXN_ENCODER_ERROR's text
  // Record once, replay many: a replayable encoder's first commit freezes
  // `recorded` and `staging`, which it keeps (with their references) until
  // it is released; the first replay captures the launches into `exec`.
  bool replayable = false;
  bool frozen = false;
  bool staging_dirty = false;  // patched since the last upload
  bool graph_failed = false;   // capture or instantiation failed: plain launches
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
};

std::mutex g_handles_mu;
std::unordered_set<const void*> g_buffers, g_pipelines;

bool live_buffer(const void* h) {
  std::lock_guard<std::mutex> lock(g_handles_mu);
  return g_buffers.count(h) != 0;
}
bool live_pipeline(const void* h) {
  std::lock_guard<std::mutex> lock(g_handles_mu);
  return g_pipelines.count(h) != 0;
}

void device_unref(Device* d) {
  if (d->refs.fetch_sub(1) != 1) return;
  const Driver* cu = driver();
  cu->cuCtxSetCurrent(d->ctx);
  if (d->xfer) cu->cuStreamDestroy(d->xfer);
  cu->cuCtxSetCurrent(nullptr);
  cu->cuDevicePrimaryCtxRelease(d->dev);
  delete d;
}

void buffer_unref(Buffer* b) {
  if (b->refs.fetch_sub(1) != 1) return;
  Device* d = b->dev;
  if (b->ptr) {
    driver()->cuCtxSetCurrent(d->ctx);
    driver()->cuMemFree(b->ptr);
  }
  delete b;
  device_unref(d);
}

void library_unref(Library* l) {
  if (l->refs.fetch_sub(1) != 1) return;
  Device* d = l->dev;
  driver()->cuCtxSetCurrent(d->ctx);
  if (l->module) driver()->cuModuleUnload(l->module);
  delete l;
  device_unref(d);
}

void pipeline_unref(Pipeline* p) {
  if (p->refs.fetch_sub(1) != 1) return;
  Library* l = p->lib;
  delete p;
  library_unref(l);
}

void drop_launches(std::vector<Launch>& launches) {
  for (Launch& l : launches) {
    for (Buffer* b : l.buffers) buffer_unref(b);
    pipeline_unref(l.pipe);
  }
  launches.clear();
}

// Makes the device's context current on the calling thread (handles may be
// used from any one thread at a time, not always the same one).
const Driver* use(Device* d) {
  const Driver* cu = driver();
  cu->cuCtxSetCurrent(d->ctx);
  return cu;
}

std::string cu_call_error(const char* what, CUresult r) {
  return std::string(what) + " failed: " + cu_error_text(r);
}

// ---- compile ----

std::vector<std::string> find_include_dirs(const Nvrtc* rt) {
  std::vector<std::string> dirs, seen;
  auto add = [&](const std::string& dir, bool need_fp16) {
    if (dir.empty()) return;
    char real[4096];
    if (!realpath(dir.c_str(), real)) return;
    if (need_fp16) {
      struct stat st;
      if (stat((std::string(real) + "/cuda_fp16.h").c_str(), &st) != 0) return;
    }
    if (std::find(seen.begin(), seen.end(), real) != seen.end()) return;
    seen.push_back(real);
    dirs.push_back(real);
  };
  if (const char* env = std::getenv("MLX_NATIVE_CUDA_INCLUDE")) {
    std::string s = env;
    size_t pos = 0;
    while (pos <= s.size()) {
      size_t end = s.find(':', pos);
      if (end == std::string::npos) end = s.size();
      add(s.substr(pos, end - pos), false);
      pos = end + 1;
    }
  }
  // The CUDA headers (cuda_fp16.h, cuda_bf16.h, ...): the first folder that
  // holds cuda_fp16.h, looked for beside NVRTC first (headers of its own
  // version), then under $CUDA_HOME, $CUDA_PATH and /usr/local/cuda.
  std::vector<std::string> candidates;
  if (!rt->path.empty()) {
    char real[4096];
    if (realpath(rt->path.c_str(), real)) {
      std::string dir = real;
      dir = dir.substr(0, dir.rfind('/'));
      candidates.push_back(dir + "/../include");
      candidates.push_back(dir + "/../../include");
    }
  }
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var)) candidates.push_back(std::string(v) + "/include");
  candidates.push_back("/usr/local/cuda/include");
  const size_t before = dirs.size();
  for (const std::string& c : candidates) {
    add(c, true);
    if (dirs.size() > before) break;
  }
  return dirs;
}

struct CompileResult {
  mlxn_status status = MLXN_OK;
  std::string text;   // error text
  std::string image;  // CUBIN or PTX
  bool is_ptx = false;
};

// Compiles with NVRTC for the device, or loads the image from the disk cache.
CompileResult compile_image(Device* d, const std::string& source, const std::string& name,
                            const std::vector<std::string>& defines) {
  CompileResult res;
  std::string why;
  const Nvrtc* rt = nvrtc(&why);
  if (!rt) {
    res.status = MLXN_ERR_SHADER_COMPILATION;
    res.text = name + ": " + why;
    return res;
  }
  static std::once_flag inc_once;
  static std::vector<std::string> inc_dirs;
  std::call_once(inc_once, [&] { inc_dirs = find_include_dirs(rt); });

  // Targets: the device's own architecture as machine code (the
  // architecture-specific `a` variant first from sm_90 on, so that kernels can
  // use wgmma and the like), else PTX for the newest architecture NVRTC knows,
  // which the driver compiles for a device newer than NVRTC.
  int narch = 0;
  std::vector<int> archs;
  if (rt->nvrtcGetNumSupportedArchs(&narch) == NVRTC_SUCCESS && narch > 0) {
    archs.resize(narch);
    if (rt->nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) archs.clear();
  }
  const int cc = d->cc_major * 10 + d->cc_minor;
  std::vector<std::pair<std::string, bool>> targets;  // (option, is_ptx)
  if (archs.empty() || std::find(archs.begin(), archs.end(), cc) != archs.end()) {
    if (cc >= 90) targets.push_back({"--gpu-architecture=sm_" + std::to_string(cc) + "a", false});
    targets.push_back({"--gpu-architecture=sm_" + std::to_string(cc), false});
  } else {
    int best = 0;
    for (int a : archs)
      if (a <= cc) best = std::max(best, a);
    if (best == 0) {
      res.status = MLXN_ERR_SHADER_COMPILATION;
      res.text = name + ": NVRTC " + std::to_string(rt->major) + "." + std::to_string(rt->minor) +
                 " cannot compile for compute capability " + std::to_string(d->cc_major) + "." +
                 std::to_string(d->cc_minor);
      return res;
    }
    targets.push_back({"--gpu-architecture=compute_" + std::to_string(best), true});
  }

  const std::string cache = cache_dir();
  for (size_t t = 0; t < targets.size(); ++t) {
    std::vector<std::string> opts = {targets[t].first, "-std=c++17", "-default-device",
                                     "-lineinfo"};
    for (const std::string& def : defines) opts.push_back(def);
    for (const std::string& dir : inc_dirs) opts.push_back("-I" + dir);

    std::string key = "nvrtc " + std::to_string(rt->major) + "." + std::to_string(rt->minor) +
                      "\narch " + std::to_string(d->cc_major) + "." + std::to_string(d->cc_minor) +
                      "\n";
    for (const std::string& o : opts) key += o + "\n";
    key += "name " + name + "\n";
    key.push_back('\0');
    key += source;
    res.is_ptx = targets[t].second;
    if (cache_load(cache, key, &res.image)) return res;

    nvrtcProgram prog = nullptr;
    nvrtcResult r = rt->nvrtcCreateProgram(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr);
    if (r != NVRTC_SUCCESS) {
      res.status = MLXN_ERR_SHADER_COMPILATION;
      res.text = name + ": nvrtcCreateProgram failed: " + rt->nvrtcGetErrorString(r);
      return res;
    }
    std::vector<const char*> argv;
    for (const std::string& o : opts) argv.push_back(o.c_str());
    r = rt->nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
    if (r == NVRTC_ERROR_INVALID_OPTION && t + 1 < targets.size()) {
      rt->nvrtcDestroyProgram(&prog);
      continue;  // this NVRTC does not know the `a` target
    }
    if (r != NVRTC_SUCCESS) {
      size_t log_size = 0;
      std::string log;
      if (rt->nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
        log.resize(log_size);
        rt->nvrtcGetProgramLog(prog, &log[0]);
        log.resize(strnlen(log.data(), log.size()));
      }
      rt->nvrtcDestroyProgram(&prog);
      res.status = MLXN_ERR_SHADER_COMPILATION;
      res.text = name + ": CUDA compilation failed (" + rt->nvrtcGetErrorString(r) + ")";
      if (!log.empty()) res.text += ":\n" + log;
      return res;
    }
    size_t size = 0;
    if (res.is_ptx) {
      r = rt->nvrtcGetPTXSize(prog, &size);
      if (r == NVRTC_SUCCESS) {
        res.image.resize(size);
        r = rt->nvrtcGetPTX(prog, &res.image[0]);
      }
    } else {
      r = rt->nvrtcGetCUBINSize(prog, &size);
      if (r == NVRTC_SUCCESS) {
        res.image.resize(size);
        r = rt->nvrtcGetCUBIN(prog, &res.image[0]);
      }
    }
    rt->nvrtcDestroyProgram(&prog);
    if (r != NVRTC_SUCCESS) {
      res.status = MLXN_ERR_SHADER_COMPILATION;
      res.text = name + ": reading the compiled image failed: " + rt->nvrtcGetErrorString(r);
      return res;
    }
    cache_store(cache, key, res.image);
    return res;
  }
  res.status = MLXN_ERR_SHADER_COMPILATION;
  res.text = name + ": no target architecture accepted by NVRTC";
  return res;
}

// ---- encoders ----

std::string kernel_list(const std::vector<Launch>& launches) {
  std::vector<std::string> names;
  for (const Launch& l : launches)
    if (std::find(names.begin(), names.end(), l.pipe->name) == names.end())
      names.push_back(l.pipe->name);
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? std::string("no kernels") : s;
}

// Frees the staging buffers that flushed launches read; their work has ended.
void free_retired(const Driver* cu, Encoder* e) {
  for (CUdeviceptr p : e->retired) cu->cuMemFree(p);
  e->retired.clear();
}

void finish_commit(Encoder* e) {
  free_retired(use(e->dev), e);
  float ms = 0.0f;
  if (driver()->cuEventElapsedTime(&ms, e->start, e->stop) == CUDA_SUCCESS && ms > 0.0f)
    e->gpu_ns = static_cast<uint64_t>(static_cast<double>(ms) * 1e6 + 0.5);
  else
    e->gpu_ns = 0;
  drop_launches(e->inflight);
  e->inflight_staging.clear();
  e->state = MLXN_ENCODER_COMPLETED;
}

void fail_commit(Encoder* e, CUresult r) {
  const std::vector<Launch>& ran = e->frozen ? e->recorded : e->inflight;
  e->error = "CUDA error while executing a commit of " + std::to_string(ran.size()) +
             " dispatch(es) (kernels: " + kernel_list(ran) + "): " + cu_error_text(r);
  drop_launches(e->inflight);
  e->inflight_staging.clear();
  free_retired(use(e->dev), e);
  e->state = MLXN_ENCODER_ERROR;
}

// Observes completion without blocking; returns the state.
int32_t poll(Encoder* e) {
  if (e->state != MLXN_ENCODER_PENDING) return e->state;
  const Driver* cu = use(e->dev);
  const CUresult r = cu->cuEventQuery(e->stop);
  if (r == CUDA_SUCCESS) finish_commit(e);
  else if (r != CUDA_ERROR_NOT_READY) fail_commit(e, r);
  return e->state;
}

// Waits for the work queued on the encoder's streams.
void sync_streams(const Driver* cu, Encoder* e) {
  cu->cuStreamSynchronize(e->stream);
  for (CUstream s : e->side)
    if (s) cu->cuStreamSynchronize(s);
}

void destroy_side(const Driver* cu, Encoder* e) {
  for (size_t i = 0; i < kSideStreams; ++i) {
    if (e->join[i]) cu->cuEventDestroy(e->join[i]);
    if (e->side[i]) cu->cuStreamDestroy(e->side[i]);
    e->join[i] = nullptr;
    e->side[i] = nullptr;
  }
  if (e->fork) cu->cuEventDestroy(e->fork);
  e->fork = nullptr;
}

// The side streams and their events, made once; false where the driver
// refused one (then none is kept, and stretches run in order).
bool side_ready(const Driver* cu, Encoder* e) {
  if (e->fork) return true;
  if (e->side_failed) return false;
  CUresult r = CUDA_SUCCESS;
  for (size_t i = 0; i < kSideStreams && r == CUDA_SUCCESS; ++i) {
    r = cu->cuStreamCreate(&e->side[i], CU_STREAM_NON_BLOCKING);
    if (r == CUDA_SUCCESS) r = cu->cuEventCreate(&e->join[i], CU_EVENT_DISABLE_TIMING);
  }
  if (r == CUDA_SUCCESS) r = cu->cuEventCreate(&e->fork, CU_EVENT_DISABLE_TIMING);
  if (r == CUDA_SUCCESS) return true;
  destroy_side(cu, e);
  e->side_failed = true;
  return false;
}

// Before recording: a finished commit leaves the encoder recording afresh.
mlxn_status begin_recording(Encoder* e, const char* what, char* msg, uint64_t cap) {
  if (poll(e) == MLXN_ENCODER_PENDING)
    return set_msg(msg, cap, MLXN_ERR_INVALID_ARGUMENT,
                   std::string(what) + ": the encoder's last commit is still running; wait for it first");
  if (e->state != MLXN_ENCODER_RECORDING) {
    e->state = MLXN_ENCODER_RECORDING;
    e->error.clear();
  }
  return MLXN_OK;
}


}  // namespace

// ======================= the C ABI =======================

MLXN_EXPORT uint32_t mlxn_abi_version(void) { return MLXN_ABI_VERSION; }

MLXN_EXPORT const char* mlxn_backend_name(void) { return "cuda"; }

MLXN_EXPORT uint32_t mlxn_device_count(void) {
  const Driver* cu = driver();
  if (!cu) return 0;
  int n = 0;
  if (cu->cuDeviceGetCount(&n) != CUDA_SUCCESS || n < 0) return 0;
  return static_cast<uint32_t>(n);
}

MLXN_EXPORT mlxn_status mlxn_device_open(uint32_t ordinal, mlxn_device** out, char* msg,
                                         uint64_t msg_cap) {
  if (!out) return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "mlxn_device_open: out is NULL");
  *out = nullptr;
  const Driver* cu = driver();
  if (!cu)
    return set_msg(msg, msg_cap, MLXN_ERR_DEVICE_NOT_FOUND,
                   "cuda: no CUDA driver (libcuda.so.1 could not be loaded or initialised)");
  const uint32_t count = mlxn_device_count();
  if (ordinal >= count)
    return set_msg(msg, msg_cap, MLXN_ERR_DEVICE_NOT_FOUND,
                   "cuda: device ordinal " + std::to_string(ordinal) + " is out of range (" +
                       std::to_string(count) + " CUDA device(s) present)");
  std::unique_ptr<Device> d(new Device);
  CUresult r = cu->cuDeviceGet(&d->dev, static_cast<int>(ordinal));
  if (r != CUDA_SUCCESS)
    return set_msg(msg, msg_cap, MLXN_ERR_DEVICE_NOT_FOUND, cu_call_error("cuDeviceGet", r));
  r = cu->cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
  if (r != CUDA_SUCCESS)
    return set_msg(msg, msg_cap, MLXN_ERR_DEVICE_NOT_FOUND,
                   cu_call_error("cuDevicePrimaryCtxRetain", r));
  cu->cuCtxSetCurrent(d->ctx);
  char name[256] = {0};
  if (cu->cuDeviceGetName(name, sizeof name - 1, d->dev) == CUDA_SUCCESS) d->name = name;
  auto attr = [&](int a) -> uint64_t {
    int v = 0;
    return cu->cuDeviceGetAttribute(&v, a, d->dev) == CUDA_SUCCESS && v > 0 ? v : 0;
  };
  d->max_threads = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  d->max_block[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  d->max_block[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  d->max_block[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  d->max_grid[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  d->max_grid[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  d->max_grid[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  d->smem_default = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  d->smem_optin = std::max(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
                           d->smem_default);
  d->warp = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  d->cc_major = static_cast<int>(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR));
  d->cc_minor = static_cast<int>(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
  d->sms = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  // MLX_NATIVE_CUDA_PDL=off: the device option's default turned off (a process run without it, e.g. a test suite).
  const char* pdl_env = std::getenv("MLX_NATIVE_CUDA_PDL");
  d->pdl = d->cc_major >= 9 && cu->cuLaunchKernelEx != nullptr && !(pdl_env && std::string(pdl_env) == "off");
  // MLX_NATIVE_CUDA_CONCURRENT=off: the "concurrent" option's default turned off.
  const char* concurrent_env = std::getenv("MLX_NATIVE_CUDA_CONCURRENT");
  d->concurrent = !(concurrent_env && std::string(concurrent_env) == "off");
  size_t total = 0;
  if (cu->cuDeviceTotalMem(&total, d->dev) == CUDA_SUCCESS) d->total_mem = total;
  r = cu->cuStreamCreate(&d->xfer, CU_STREAM_NON_BLOCKING);
  if (r != CUDA_SUCCESS) {
    cu->cuDevicePrimaryCtxRelease(d->dev);
    return set_msg(msg, msg_cap, MLXN_ERR_DEVICE_NOT_FOUND, cu_call_error("cuStreamCreate", r));
  }
  *out = reinterpret_cast<mlxn_device*>(d.release());
  return ok_msg(msg, msg_cap);
}

MLXN_EXPORT void mlxn_device_close(mlxn_device* device) {
  if (device) device_unref(reinterpret_cast<Device*>(device));
}

MLXN_EXPORT uint64_t mlxn_device_name(mlxn_device* device, char* out, uint64_t cap) {
  if (!device) return write_string("", out, cap);
  return write_string(reinterpret_cast<Device*>(device)->name, out, cap);
}

MLXN_EXPORT uint64_t mlxn_device_limit(mlxn_device* device, uint32_t key) {
  if (!device) return 0;
  const Device* d = reinterpret_cast<Device*>(device);
  switch (key) {
    case MLXN_LIMIT_MAX_THREADS_PER_THREADGROUP: return d->max_threads;
    case MLXN_LIMIT_MAX_THREADGROUP_MEMORY: return d->smem_optin;
    case MLXN_LIMIT_SIMD_WIDTH: return d->warp;
    case MLXN_LIMIT_MAX_BUFFER_LENGTH: return d->total_mem;
    case MLXN_LIMIT_SHARED_MEMORY: return 0;
    case MLXN_LIMIT_COMPUTE_CAPABILITY: return uint64_t(d->cc_major) * 10 + uint64_t(d->cc_minor);
    case MLXN_LIMIT_MULTIPROCESSORS: return d->sms;
    default: return 0;
  }
}

MLXN_EXPORT mlxn_status mlxn_device_set_option(mlxn_device* device, const char* key,
                                               const char* value, char* msg, uint64_t msg_cap) {
  if (!device || !key || !value)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "mlxn_device_set_option: device, key and value must be non-NULL");
  Device* d = reinterpret_cast<Device*>(device);
  const std::string k = key, v = value;
  if (k != "pdl" && k != "concurrent")
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "cuda: unknown option '" + k + "' (the cuda backend knows pdl, concurrent)");
  if (v != "on" && v != "off")
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "cuda: option " + k + " must be on or off (got '" + v + "')");
  // Later launches (and captures) follow them; a replay's graph keeps the launches it captured.
  if (k == "pdl")
    d->pdl = v == "on" && d->cc_major >= 9 && use(d)->cuLaunchKernelEx != nullptr;
  else
    d->concurrent = v == "on";
  return ok_msg(msg, msg_cap);
}

// ---- buffers ----

MLXN_EXPORT mlxn_status mlxn_buffer_alloc(mlxn_device* device, uint64_t length, mlxn_buffer** out,
                                          char* msg, uint64_t msg_cap) {
  if (!device || !out)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "mlxn_buffer_alloc: device and out must be non-NULL");
  *out = nullptr;
  Device* d = reinterpret_cast<Device*>(device);
  const Driver* cu = use(d);
  std::unique_ptr<Buffer> b(new Buffer);
  b->dev = d;
  b->len = length;
  if (length > 0) {  // a zero-length buffer owns no device memory
    CUresult r = cu->cuMemAlloc(&b->ptr, length);
    if (r != CUDA_SUCCESS)
      return set_msg(msg, msg_cap, MLXN_ERR_BUFFER_ALLOCATION,
                     "cuda: cannot allocate " + std::to_string(length) + " bytes: " + cu_error_text(r));
    r = cu->cuMemsetD8Async(b->ptr, 0, length, d->xfer);
    if (r == CUDA_SUCCESS) r = cu->cuStreamSynchronize(d->xfer);
    if (r != CUDA_SUCCESS) {
      cu->cuMemFree(b->ptr);
      return set_msg(msg, msg_cap, MLXN_ERR_BUFFER_ALLOCATION,
                     cu_call_error("zero-filling a new buffer (cuMemsetD8Async)", r));
    }
  }
  d->refs.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(g_handles_mu);
    g_buffers.insert(b.get());
  }
  *out = reinterpret_cast<mlxn_buffer*>(b.release());
  return ok_msg(msg, msg_cap);
}

MLXN_EXPORT void mlxn_buffer_release(mlxn_buffer* buffer) {
  if (!buffer) return;
  {
    std::lock_guard<std::mutex> lock(g_handles_mu);
    if (!g_buffers.erase(buffer)) return;  // not a live buffer handle
  }
  buffer_unref(reinterpret_cast<Buffer*>(buffer));
}

MLXN_EXPORT uint64_t mlxn_buffer_length(mlxn_buffer* buffer) {
  return buffer ? reinterpret_cast<Buffer*>(buffer)->len : 0;
}

MLXN_EXPORT void* mlxn_buffer_host_ptr(mlxn_buffer* buffer) {
  (void)buffer;
  return nullptr;  // device memory is not host-visible
}

static mlxn_status buffer_copy(mlxn_buffer* buffer, uint64_t offset, void* host, uint64_t length,
                               bool to_device, char* msg, uint64_t msg_cap) {
  const char* fn = to_device ? "mlxn_buffer_write" : "mlxn_buffer_read";
  if (!buffer || (!host && length > 0))
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   std::string(fn) + ": buffer and data pointer must be non-NULL");
  Buffer* b = reinterpret_cast<Buffer*>(buffer);
  if (offset > b->len || length > b->len - offset)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   std::string(fn) + ": range [" + std::to_string(offset) + ", " +
                       std::to_string(offset) + "+" + std::to_string(length) +
                       ") is past the buffer's " + std::to_string(b->len) + " bytes");
  if (length == 0) return ok_msg(msg, msg_cap);
  const Driver* cu = use(b->dev);
  // Through the device's own stream, synchronised: the copy has fully landed
  // when this returns, so any later dispatch on any stream sees it.
  CUresult r = to_device ? cu->cuMemcpyHtoDAsync(b->ptr + offset, host, length, b->dev->xfer)
                         : cu->cuMemcpyDtoHAsync(host, b->ptr + offset, length, b->dev->xfer);
  if (r == CUDA_SUCCESS) r = cu->cuStreamSynchronize(b->dev->xfer);
  if (r != CUDA_SUCCESS)
    return set_msg(msg, msg_cap, MLXN_ERR_COMMAND_BUFFER, cu_call_error(fn, r));
  return ok_msg(msg, msg_cap);
}

MLXN_EXPORT mlxn_status mlxn_buffer_write(mlxn_buffer* buffer, uint64_t offset, const void* src,
                                          uint64_t length, char* msg, uint64_t msg_cap) {
  return buffer_copy(buffer, offset, const_cast<void*>(src), length, true, msg, msg_cap);
}

MLXN_EXPORT mlxn_status mlxn_buffer_read(mlxn_buffer* buffer, uint64_t offset, void* dst,
                                         uint64_t length, char* msg, uint64_t msg_cap) {
  return buffer_copy(buffer, offset, dst, length, false, msg, msg_cap);
}

// ---- libraries ----

MLXN_EXPORT mlxn_status mlxn_library_compile(mlxn_device* device, const char* source,
                                             uint64_t source_len, const char* name,
                                             const void* constants, uint32_t constants_count,
                                             mlxn_library** out, char* msg, uint64_t msg_cap) {
  if (!device || !out || (!source && source_len > 0) || (!constants && constants_count > 0))
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "mlxn_library_compile: device, out, source and constants must be non-NULL");
  *out = nullptr;
  Device* d = reinterpret_cast<Device*>(device);
  const std::string src = source ? std::string(source, source_len) : std::string();
  if (src.find('\0') != std::string::npos)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "mlxn_library_compile: source contains a NUL byte");
  const std::string file = name && *name ? name : "source.cu";
  const std::string bad_name = mlxn::common::library_name_refusal(file);
  if (!bad_name.empty()) return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, bad_name);

  std::vector<std::string> defines;
  std::vector<uint32_t> seen;
  for (uint32_t i = 0; i < constants_count; ++i) {
    const mlxn::common::ConstantRecord rec = mlxn::common::constant_record(constants, i);
    const uint32_t index = rec.index, type = rec.type, bits = rec.bits;
    if (std::find(seen.begin(), seen.end(), index) != seen.end())
      return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                     file + ": function constant " + std::to_string(index) + " is given twice");
    seen.push_back(index);
    std::string def, err;
    if (!constant_define(index, type, bits, &def, &err))
      return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, file + ": " + err);
    defines.push_back(def);
  }

  const Driver* cu = use(d);
  CompileResult c = compile_image(d, src, file, defines);
  if (c.status != MLXN_OK) return set_msg(msg, msg_cap, c.status, c.text);

  char log[8192] = {0};
  int opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* vals[] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof log - 1))};
  CUmodule module = nullptr;
  const CUresult r = cu->cuModuleLoadDataEx(&module, c.image.data(), 2, opts, vals);
  if (r != CUDA_SUCCESS)
    return set_msg(msg, msg_cap, MLXN_ERR_SHADER_COMPILATION,
                   file + ": loading the compiled module failed: " + cu_error_text(r) +
                       (log[0] ? std::string(":\n") + log : std::string()));
  Library* l = new Library;
  l->dev = d;
  l->module = module;
  l->name = file;
  l->pdl = src.compare(0, sizeof kPdlMark - 1, kPdlMark) == 0;
  l->kernels = kernel_names_of_image(c.image, c.is_ptx);
  for (const std::string& k : l->kernels) {
    std::vector<uint32_t> sizes;
    if (kernel_param_sizes_of_image(c.image, c.is_ptx, k, &sizes)) l->param_sizes[k] = sizes;
  }
  d->refs.fetch_add(1);
  *out = reinterpret_cast<mlxn_library*>(l);
  return ok_msg(msg, msg_cap);
}

MLXN_EXPORT mlxn_status mlxn_library_compile_start(mlxn_device* device, const char* source,
                                                   uint64_t source_len, const char* name,
                                                   const void* constants, uint32_t constants_count,
                                                   mlxn_compile_job** out, char* msg, uint64_t msg_cap) {
  Device* d = reinterpret_cast<Device*>(device);
  return mlxn::common::library_compile_start(
      device, source, source_len, name, constants, constants_count, [d] { d->refs.fetch_add(1); },
      [d] { device_unref(d); }, out, msg, msg_cap);
}

MLXN_EXPORT int32_t mlxn_compile_job_done(mlxn_compile_job* job) {
  return mlxn::common::compile_job_done(job);
}

MLXN_EXPORT mlxn_status mlxn_compile_job_finish(mlxn_compile_job* job, mlxn_library** out,
                                                char* msg, uint64_t msg_cap) {
  return mlxn::common::library_compile_finish(job, out, msg, msg_cap);
}

MLXN_EXPORT void mlxn_library_release(mlxn_library* library) {
  if (library) library_unref(reinterpret_cast<Library*>(library));
}

MLXN_EXPORT uint64_t mlxn_library_kernel_names(mlxn_library* library, char* out, uint64_t cap) {
  std::string s;
  if (library)
    for (const std::string& n : reinterpret_cast<Library*>(library)->kernels)
      s += (s.empty() ? "" : "\n") + n;
  return write_string(s, out, cap);
}

// ---- pipelines ----

MLXN_EXPORT mlxn_status mlxn_pipeline_create(mlxn_library* library, const char* kernel_name,
                                             mlxn_pipeline** out, char* msg, uint64_t msg_cap) {
  if (!library || !kernel_name || !out)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "mlxn_pipeline_create: library, kernel_name and out must be non-NULL");
  *out = nullptr;
  Library* l = reinterpret_cast<Library*>(library);
  const Driver* cu = use(l->dev);
  CUfunction fn = nullptr;
  // A name the image does not list is refused without asking the driver, whose
  // failing lookup compute-sanitizer reports as an API error.
  const bool listed = l->kernels.empty() ||
                      std::find(l->kernels.begin(), l->kernels.end(), kernel_name) != l->kernels.end();
  CUresult r = listed ? cu->cuModuleGetFunction(&fn, l->module, kernel_name) : CUDA_ERROR_NOT_FOUND;
  if (r != CUDA_SUCCESS) {
    std::string names;
    for (const std::string& n : l->kernels) names += (names.empty() ? "" : ", ") + n;
    return set_msg(msg, msg_cap, MLXN_ERR_KERNEL_NOT_FOUND,
                   std::string("kernel '") + kernel_name + "' not found in " + l->name +
                       " (kernels: " + (names.empty() ? "none" : names) +
                       "; entry points must be extern \"C\" __global__)");
  }
  std::unique_ptr<Pipeline> p(new Pipeline);
  p->lib = l;
  p->fn = fn;
  p->name = kernel_name;
  int v = 0;
  r = cu->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn);
  if (r != CUDA_SUCCESS)
    return set_msg(msg, msg_cap, MLXN_ERR_INTERNAL, cu_call_error("cuFuncGetAttribute", r));
  p->max_threads = static_cast<uint32_t>(v);
  v = 0;
  cu->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn);
  p->static_smem = static_cast<uint64_t>(v);
  v = 0;
  cu->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fn);
  p->max_dynamic_smem = static_cast<uint64_t>(v);
  // The parameter list comes from the image, not the driver: the driver API
  // has no call that counts parameters without failing (cuFuncGetParamInfo
  // errs past the last one, which compute-sanitizer reports). PTX images, which
  // the driver compiles, leave the count unknown and dispatches unchecked.
  const auto known = l->param_sizes.find(p->name);
  if (known != l->param_sizes.end()) {
    p->param_sizes = known->second;
    p->param_count = static_cast<long>(known->second.size());
  }
  l->refs.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(g_handles_mu);
    g_pipelines.insert(p.get());
  }
  *out = reinterpret_cast<mlxn_pipeline*>(p.release());
  return ok_msg(msg, msg_cap);
}

MLXN_EXPORT void mlxn_pipeline_release(mlxn_pipeline* pipeline) {
  if (!pipeline) return;
  {
    std::lock_guard<std::mutex> lock(g_handles_mu);
    if (!g_pipelines.erase(pipeline)) return;
  }
  pipeline_unref(reinterpret_cast<Pipeline*>(pipeline));
}

MLXN_EXPORT uint32_t mlxn_pipeline_max_threads(mlxn_pipeline* pipeline) {
  return pipeline ? reinterpret_cast<Pipeline*>(pipeline)->max_threads : 0;
}

MLXN_EXPORT uint64_t mlxn_pipeline_static_threadgroup_memory(mlxn_pipeline* pipeline) {
  return pipeline ? reinterpret_cast<Pipeline*>(pipeline)->static_smem : 0;
}

// ---- encoders ----

MLXN_EXPORT mlxn_status mlxn_encoder_create(mlxn_device* device, mlxn_encoder** out, char* msg,
                                            uint64_t msg_cap) {
  if (!device || !out)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "mlxn_encoder_create: device and out must be non-NULL");
  *out = nullptr;
  Device* d = reinterpret_cast<Device*>(device);
  const Driver* cu = use(d);
  std::unique_ptr<Encoder> e(new Encoder);
  e->dev = d;
  CUresult r = cu->cuStreamCreate(&e->stream, CU_STREAM_NON_BLOCKING);
  if (r == CUDA_SUCCESS) r = cu->cuEventCreate(&e->start, CU_EVENT_DEFAULT);
  if (r == CUDA_SUCCESS) r = cu->cuEventCreate(&e->stop, CU_EVENT_DEFAULT);
  if (r != CUDA_SUCCESS) {
    if (e->start) cu->cuEventDestroy(e->start);
    if (e->stream) cu->cuStreamDestroy(e->stream);
    return set_msg(msg, msg_cap, MLXN_ERR_COMMAND_BUFFER, cu_call_error("creating an encoder", r));
  }
  d->refs.fetch_add(1);
  *out = reinterpret_cast<mlxn_encoder*>(e.release());
  return ok_msg(msg, msg_cap);
}

MLXN_EXPORT void mlxn_encoder_release(mlxn_encoder* encoder) {
  if (!encoder) return;
  Encoder* e = reinterpret_cast<Encoder*>(encoder);
  const Driver* cu = use(e->dev);
  if (e->state == MLXN_ENCODER_PENDING || e->flushed) {
    sync_streams(cu, e);  // the in-flight (or flushed) work still uses its buffers
    drop_launches(e->inflight);
  }
  drop_launches(e->recorded);
  free_retired(cu, e);
  if (e->exec) cu->cuGraphExecDestroy(e->exec);
  if (e->graph) cu->cuGraphDestroy(e->graph);
  if (e->staging_dev) cu->cuMemFree(e->staging_dev);
  cu->cuEventDestroy(e->start);
  cu->cuEventDestroy(e->stop);
  destroy_side(cu, e);
  cu->cuStreamDestroy(e->stream);
  Device* d = e->dev;
  delete e;
  device_unref(d);
}

namespace {

// The CUtensorMap of a checked descriptor (mlxn_tmap_check) over the buffer
// at device address `base`: no interleave, element strides 1, zeros past the
// dims.
CUresult encode_tensor_map(const Driver* cu, const mlxn_tmap& t, CUdeviceptr base, CUtensorMap* out) {
  int dtype = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  switch (t.dtype) {
    case MLXN_TMAP_DTYPE_U16: dtype = CU_TENSOR_MAP_DATA_TYPE_UINT16; break;
    case MLXN_TMAP_DTYPE_U32: dtype = CU_TENSOR_MAP_DATA_TYPE_UINT32; break;
    case MLXN_TMAP_DTYPE_F16: dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT16; break;
    case MLXN_TMAP_DTYPE_BF16: dtype = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16; break;
    case MLXN_TMAP_DTYPE_F32: dtype = CU_TENSOR_MAP_DATA_TYPE_FLOAT32; break;
    default: break;
  }
  const int swizzle = t.swizzle == 32    ? CU_TENSOR_MAP_SWIZZLE_32B
                      : t.swizzle == 64  ? CU_TENSOR_MAP_SWIZZLE_64B
                      : t.swizzle == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                         : CU_TENSOR_MAP_SWIZZLE_NONE;
  const int l2 = t.l2 == 64    ? CU_TENSOR_MAP_L2_PROMOTION_L2_64B
                 : t.l2 == 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                 : t.l2 == 256 ? CU_TENSOR_MAP_L2_PROMOTION_L2_256B
                               : CU_TENSOR_MAP_L2_PROMOTION_NONE;
  unsigned long long dims[MLXN_TMAP_MAX_RANK], strides[MLXN_TMAP_MAX_RANK - 1];
  unsigned box[MLXN_TMAP_MAX_RANK], ones[MLXN_TMAP_MAX_RANK];
  for (uint32_t k = 0; k < MLXN_TMAP_MAX_RANK; ++k) {
    dims[k] = t.dims[k];
    box[k] = t.box[k];
    ones[k] = 1;
    if (k + 1 < MLXN_TMAP_MAX_RANK) strides[k] = t.strides[k];
  }
  return cu->cuTensorMapEncodeTiled(out, dtype, t.rank, reinterpret_cast<void*>(static_cast<uintptr_t>(base + t.offset)),
                                    dims, strides, box, ones, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, l2,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

}  // namespace

MLXN_EXPORT mlxn_status mlxn_encoder_dispatch(mlxn_encoder* encoder, const void* block,
                                              uint64_t block_len, char* msg, uint64_t msg_cap) {
  auto bad = [&](const std::string& text) {
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "dispatch: " + text);
  };
  if (!encoder) return bad("encoder must be non-NULL");
  Encoder* e = reinterpret_cast<Encoder*>(encoder);
  if (e->frozen)
    return bad("the encoder must be recording (got a replayable encoder whose recording was committed: replay it)");
  Device* d = e->dev;
  mlxn_block blk;  // written by the decoder only as far as the block goes
  // The words of a refusal name the kernel wherever the handle is a live
  // pipeline of this device.
  auto refuse = [&](int32_t) {
    char text[MLXN_BLOCK_MESSAGE_CAP];
    Pipeline* p = reinterpret_cast<Pipeline*>(static_cast<uintptr_t>(blk.pipeline));
    const char* kernel = live_pipeline(p) && p->lib->dev == d ? p->name.c_str() : nullptr;
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, mlxn_block_message(&blk, kernel, text, sizeof text));
  };
  if (mlxn_block_decode(block, block_len, &blk) != MLXN_BLOCK_OK) return refuse(blk.error);
  Pipeline* pipe = reinterpret_cast<Pipeline*>(static_cast<uintptr_t>(blk.pipeline));
  if (!live_pipeline(pipe) || pipe->lib->dev != d)
    return refuse(mlxn_block_fail(&blk, MLXN_BLOCK_E_PIPELINE, 0, blk.pipeline, 0, 0));
  const std::string& k = pipe->name;
  for (uint32_t i = 0; i < 3; ++i) {
    if (blk.grid[i] > d->max_grid[i])
      return refuse(mlxn_block_fail(&blk, MLXN_BLOCK_E_GRID_LIMIT, i, blk.grid[i], d->max_grid[i], 0));
    if (blk.threads[i] > d->max_block[i])
      return refuse(mlxn_block_fail(&blk, MLXN_BLOCK_E_THREADS_LIMIT, i, blk.threads[i], d->max_block[i], 0));
  }
  const uint64_t total_threads = uint64_t(blk.threads[0]) * blk.threads[1] * blk.threads[2];
  if (total_threads > pipe->max_threads)
    return refuse(mlxn_block_fail(&blk, MLXN_BLOCK_E_THREADGROUP_SIZE, 0, total_threads, pipe->max_threads, 0));

  // BUFFER, BYTES and TENSOR_MAP bindings become the kernel's pointer
  // parameters, in index order (blk.buffer_mask's bits); THREADGROUP_MEMORY
  // lengths sum to the dynamic shared memory. A tensor map is checked
  // (mlxn_tmap_check: every byte it reaches inside its buffer) and encoded
  // here, before anything is recorded.
  const mlxn_block_binding* by_index[MLXN_MAX_BINDINGS];
  CUtensorMap maps[MLXN_MAX_BINDINGS];
  uint64_t dyn_smem = 0;
  for (uint32_t i = 0; i < blk.binding_count; ++i) {
    const mlxn_block_binding& bd = blk.bindings[i];
    if (bd.kind == MLXN_BIND_THREADGROUP_MEMORY) {
      dyn_smem = bd.length > UINT64_MAX - dyn_smem ? UINT64_MAX : dyn_smem + bd.length;
      continue;
    }
    if (bd.kind == MLXN_BIND_BUFFER || bd.kind == MLXN_BIND_TENSOR_MAP) {
      Buffer* b = reinterpret_cast<Buffer*>(static_cast<uintptr_t>(bd.handle));
      if (!live_buffer(b) || b->dev != d)
        return refuse(mlxn_block_fail(&blk, MLXN_BLOCK_E_BUFFER, i, bd.handle, 0, 0));
      if (bd.kind == MLXN_BIND_BUFFER && bd.offset > b->len)
        return refuse(mlxn_block_fail(&blk, MLXN_BLOCK_E_BUFFER_OFFSET, i, bd.offset, b->len, 0));
      if (bd.kind == MLXN_BIND_TENSOR_MAP) {
        const Driver* cu = driver();
        if (d->cc_major < 9 || !cu->cuTensorMapEncodeTiled)
          return refuse(mlxn_block_fail(&blk, MLXN_BLOCK_E_TENSOR_MAP_BACKEND, i, 0, 0, 0));
        mlxn_tmap t;
        if (mlxn_tmap_check(&blk, i, b->len, b->ptr, &t) != MLXN_BLOCK_OK) return refuse(blk.error);
        const CUresult r = encode_tensor_map(cu, t, b->ptr, &maps[bd.index]);
        if (r != CUDA_SUCCESS)
          return bad("kernel '" + k + "': binding " + std::to_string(i) + " (tensor map [[buffer(" + std::to_string(bd.index) +
                     ")]]): cuTensorMapEncodeTiled refused the descriptor: " + cu_error_text(r));
      }
    }
    by_index[bd.index] = &bd;  // the decoder refuses an index bound twice
  }
  if (dyn_smem > d->smem_optin || pipe->static_smem > d->smem_optin - dyn_smem)
    return refuse(mlxn_block_fail(&blk, MLXN_BLOCK_E_THREADGROUP_MEMORY, 0, dyn_smem, d->smem_optin,
                                  pipe->static_smem));
  const int nparams = __builtin_popcount(blk.buffer_mask);
  if (pipe->param_count >= 0) {
    if (pipe->param_count != nparams)
      return bad("kernel '" + k + "': the kernel takes " + std::to_string(pipe->param_count) +
                 " parameter(s) but the dispatch binds " + std::to_string(nparams) +
                 " buffer/bytes index(es) (one pointer parameter per bound index)");
    for (size_t i = 0; i < pipe->param_sizes.size(); ++i)
      if (pipe->param_sizes[i] != sizeof(CUdeviceptr))
        return bad("kernel '" + k + "': parameter " + std::to_string(i) + " is " +
                   std::to_string(pipe->param_sizes[i]) +
                   " bytes; the binding convention passes only 8-byte pointers");
  }
  const Driver* cu = use(d);
  if (dyn_smem > pipe->max_dynamic_smem) {
    const CUresult r = cu->cuFuncSetAttribute(pipe->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                              static_cast<int>(dyn_smem));
    if (r != CUDA_SUCCESS)
      return bad("kernel '" + k + "': raising the dynamic shared memory limit to " + std::to_string(dyn_smem) +
                 " bytes failed: " + cu_error_text(r));
    pipe->max_dynamic_smem = dyn_smem;
  }
  const mlxn_status st = begin_recording(e, "dispatch", msg, msg_cap);
  if (st != MLXN_OK) return st;

  // Everything checked: record.
  Launch l;
  l.pipe = pipe;
  for (int i = 0; i < 3; ++i) {
    l.grid[i] = blk.grid[i];
    l.block[i] = blk.threads[i];
  }
  l.smem = static_cast<unsigned>(dyn_smem);
  l.after_barrier = e->barrier_pending;
  e->barrier_pending = false;
  for (uint32_t m = blk.buffer_mask; m != 0; m &= m - 1) {
    const mlxn_block_binding& bd = *by_index[__builtin_ctz(m)];
    if (bd.kind == MLXN_BIND_BUFFER) {
      Buffer* b = reinterpret_cast<Buffer*>(static_cast<uintptr_t>(bd.handle));
      b->refs.fetch_add(1);
      l.buffers.push_back(b);
      l.args.push_back({b->ptr + bd.offset, false, bd.index, 0});
    } else if (bd.kind == MLXN_BIND_TENSOR_MAP) {
      // The map's buffer is held as a BUFFER binding's is; the map itself
      // goes with the staged bytes, 64-byte aligned (the staging buffer's
      // device copy starts on a 256-byte boundary).
      Buffer* b = reinterpret_cast<Buffer*>(static_cast<uintptr_t>(bd.handle));
      b->refs.fetch_add(1);
      l.buffers.push_back(b);
      const size_t off = (e->staging.size() + 63) & ~static_cast<size_t>(63);
      e->staging.resize(off + sizeof(CUtensorMap), 0);
      std::memcpy(e->staging.data() + off, &maps[bd.index], sizeof(CUtensorMap));
      l.args.push_back({static_cast<CUdeviceptr>(off), true, bd.index, sizeof(CUtensorMap), true});
    } else {
      const size_t off = (e->staging.size() + 15) & ~static_cast<size_t>(15);
      e->staging.resize(off + std::max<uint64_t>(bd.length, 1), 0);
      if (bd.length) std::memcpy(e->staging.data() + off, bd.data, bd.length);
      l.args.push_back({static_cast<CUdeviceptr>(off), true, bd.index, bd.length});
    }
  }
  pipe->refs.fetch_add(1);
  e->recorded.push_back(std::move(l));
  return ok_msg(msg, msg_cap);
}

MLXN_EXPORT mlxn_status mlxn_encoder_barrier(mlxn_encoder* encoder, char* msg, uint64_t msg_cap) {
  if (!encoder)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "mlxn_encoder_barrier: encoder is NULL");
  if (reinterpret_cast<Encoder*>(encoder)->frozen)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "barrier: the encoder must be recording (got a replayable encoder whose recording was committed: "
                   "replay it)");
  // Where the stretch before it joins (launch_all): the dispatches after it
  // see the writes of every earlier one.
  Encoder* e = reinterpret_cast<Encoder*>(encoder);
  const mlxn_status st = begin_recording(e, "barrier", msg, msg_cap);
  if (st != MLXN_OK) return st;
  e->barrier_pending = true;
  return ok_msg(msg, msg_cap);
}

namespace {

// One launch on stream `s`: with programmatic stream serialization where
// `pdl` allows it, its program is marked and the device allows it, so its
// blocks may be scheduled (and wait in mlxn_entry) while the kernel ahead on
// the stream finishes; a stream capture turns that into a programmatic edge
// of the graph.
CUresult launch_one(const Driver* cu, Encoder* e, const Launch& l, void** params, CUstream s, bool pdl) {
  if (pdl && l.pipe->lib->pdl && e->dev->pdl) {
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg{};
    cfg.gridDimX = l.grid[0];
    cfg.gridDimY = l.grid[1];
    cfg.gridDimZ = l.grid[2];
    cfg.blockDimX = l.block[0];
    cfg.blockDimY = l.block[1];
    cfg.blockDimZ = l.block[2];
    cfg.sharedMemBytes = l.smem;
    cfg.hStream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    return cu->cuLaunchKernelEx(&cfg, l.pipe->fn, params, nullptr);
  }
  return cu->cuLaunchKernel(l.pipe->fn, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2],
                            l.smem, s, params, nullptr);
}

// Queues the launches of `launches`, their BYTES arguments pointing into the
// staging buffer, stretch by stretch (the dispatches from one barrier to the
// next). A stretch of one dispatch, or every stretch where the device's
// "concurrent" option is off, goes on the encoder's stream in order. A longer
// one forks: its first dispatch on the encoder's stream (programmatic after
// the kernel ahead, as in order), the others dealt over the side streams in
// turn, each side stream waiting first for the work queued before the stretch
// (the fork event); then the encoder's stream waits for every side stream
// used (their join events), so whatever follows the stretch's barrier starts
// after all of it. The encoder's barriers place dispatches in one stretch only
// where none writes an allocation another reads or writes (docs/internals.md,
// Barriers), as Metal's concurrent encoder runs them. A capture records the
// same forks and joins as edges of the graph.
CUresult launch_all(const Driver* cu, Encoder* e, std::vector<Launch>& launches, std::string* what) {
  std::vector<CUdeviceptr> values;
  std::vector<void*> ptrs;
  auto go = [&](const Launch& l, CUstream s, bool pdl) {
    values.clear();
    for (const Arg& a : l.args) values.push_back(a.staged ? e->staging_dev + a.value : a.value);
    ptrs.clear();
    for (CUdeviceptr& v : values) ptrs.push_back(&v);
    const CUresult r = launch_one(cu, e, l, ptrs.empty() ? nullptr : ptrs.data(), s, pdl);
    if (r != CUDA_SUCCESS) *what = "launching kernel " + l.pipe->name;
    return r;
  };
  const bool concurrent = e->dev->concurrent;
  const size_t n = launches.size();
  size_t i = 0;
  while (i < n) {
    size_t j = i + 1;  // the stretch: [i, j)
    while (j < n && !launches[j].after_barrier) ++j;
    size_t sides = concurrent ? std::min(j - i - 1, kSideStreams) : 0;
    if (sides > 0 && !side_ready(cu, e)) sides = 0;
    if (sides == 0) {
      for (size_t k = i; k < j; ++k)
        if (const CUresult r = go(launches[k], e->stream, true); r != CUDA_SUCCESS) return r;
      i = j;
      continue;
    }
    CUresult r = cu->cuEventRecord(e->fork, e->stream);
    for (size_t a = 0; a < sides && r == CUDA_SUCCESS; ++a) r = cu->cuStreamWaitEvent(e->side[a], e->fork, 0);
    if (r != CUDA_SUCCESS) {
      *what = "forking a stretch of " + std::to_string(j - i) + " dispatches onto side streams";
      return r;
    }
    for (size_t k = i; k < j && r == CUDA_SUCCESS; ++k)
      r = k == i ? go(launches[k], e->stream, true) : go(launches[k], e->side[(k - i - 1) % sides], false);
    // Joined after a failed launch too, so that a capture ends with every stream back.
    for (size_t a = 0; a < sides; ++a) {
      CUresult q = cu->cuEventRecord(e->join[a], e->side[a]);
      if (q == CUDA_SUCCESS) q = cu->cuStreamWaitEvent(e->stream, e->join[a], 0);
      if (q != CUDA_SUCCESS && r == CUDA_SUCCESS) {
        r = q;
        *what = "joining a stretch's side streams";
      }
    }
    if (r != CUDA_SUCCESS) return r;
    i = j;
  }
  return CUDA_SUCCESS;
}

// The first replay's capture of the recording into a CUDA graph. Any failure
// (a driver without graphs, a launch the capture refuses, instantiation)
// leaves no graph and marks the encoder, whose replays then launch kernel by
// kernel as a commit does: slower on the host, the same work.
void capture_graph(const Driver* cu, Encoder* e) {
  if (!cu->cuGraphLaunch) {
    e->graph_failed = true;
    return;
  }
  if (cu->cuStreamBeginCapture(e->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) != CUDA_SUCCESS) {
    e->graph_failed = true;
    return;
  }
  std::string what;
  const CUresult launched = launch_all(cu, e, e->recorded, &what);
  CUgraph graph = nullptr;
  const CUresult ended = cu->cuStreamEndCapture(e->stream, &graph);  // always: the stream leaves capture mode
  CUgraphExec exec = nullptr;
  if (launched == CUDA_SUCCESS && ended == CUDA_SUCCESS && graph != nullptr &&
      cu->cuGraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS) {
    e->graph = graph;
    e->exec = exec;
    return;
  }
  if (graph) cu->cuGraphDestroy(graph);
  e->graph_failed = true;
}

// A commit, replay or flush that failed while queueing: waits for what it
// queued (those launches still use their buffers), drops it and leaves the
// encoder in the error state with the failure's text.
mlxn_status abort_work(const Driver* cu, Encoder* e, const std::string& what, CUresult r, char* msg,
                       uint64_t msg_cap) {
  sync_streams(cu, e);
  e->error = what + ": " + cu_error_text(r);
  drop_launches(e->inflight);  // a replayable recording keeps its own until release
  e->inflight_staging.clear();
  free_retired(cu, e);
  e->flushed = false;
  e->staging_uploaded = 0;
  e->state = MLXN_ENCODER_ERROR;
  return set_msg(msg, msg_cap, MLXN_ERR_COMMAND_BUFFER, e->error);
}

// The bytes of `staging` past `staging_uploaded` onto the device, for the
// launches a flush (or the commit after one) queues next: through the
// device's transfer stream, synchronised, so the copy waits for nothing the
// encoder's streams have queued and the host may append to `staging` after
// it returns. A buffer too small is replaced by one filled from the start and
// retired (launched kernels may still read it).
CUresult stage_more(const Driver* cu, Encoder* e, std::string* what) {
  const uint64_t staged = e->staging.size();
  if (staged > e->staging_cap) {
    if (e->staging_dev) e->retired.push_back(e->staging_dev);
    e->staging_dev = 0;
    e->staging_cap = 0;
    e->staging_uploaded = 0;
    uint64_t cap = 4096;
    while (cap < staged) cap *= 2;
    if (const CUresult r = cu->cuMemAlloc(&e->staging_dev, cap); r != CUDA_SUCCESS) {
      *what = "allocating the inline-bytes staging buffer";
      return r;
    }
    e->staging_cap = cap;
  }
  if (staged > e->staging_uploaded) {
    const uint64_t at = e->staging_uploaded;
    CUresult r = cu->cuMemcpyHtoDAsync(e->staging_dev + at, e->staging.data() + at, staged - at, e->dev->xfer);
    if (r == CUDA_SUCCESS) r = cu->cuStreamSynchronize(e->dev->xfer);
    if (r != CUDA_SUCCESS) {
      *what = "uploading inline bytes";
      return r;
    }
    e->staging_uploaded = staged;
  }
  return CUDA_SUCCESS;
}

// Queues the dispatches recorded since the last flush (the bytes they read
// first), and moves them to the commit's in-flight launches.
mlxn_status launch_recorded(const Driver* cu, Encoder* e, char* msg, uint64_t msg_cap) {
  std::string what;
  CUresult r = stage_more(cu, e, &what);
  std::vector<Launch> batch = std::move(e->recorded);
  e->recorded.clear();
  if (r == CUDA_SUCCESS) r = launch_all(cu, e, batch, &what);
  for (Launch& l : batch) e->inflight.push_back(std::move(l));
  if (r != CUDA_SUCCESS) return abort_work(cu, e, what, r, msg, msg_cap);
  return MLXN_OK;
}

// Uploads the inline bytes (when asked) and queues the recording between the
// timing events: commit's launches, or a replay's (the graph where there is one).
mlxn_status submit(Encoder* e, std::vector<Launch>& launches, const std::vector<uint8_t>& staging, bool upload,
                   bool replay, char* msg, uint64_t msg_cap) {
  const Driver* cu = use(e->dev);
  e->gpu_ns = 0;
  e->state = MLXN_ENCODER_PENDING;

  auto abort_commit = [&](const std::string& what, CUresult r) { return abort_work(cu, e, what, r, msg, msg_cap); };

  const uint64_t staged = staging.size();
  if (staged > 0 && upload) {
    if (staged > e->staging_cap) {
      // The previous commit has completed, so its staging buffer is free. (A
      // replayable recording's size is fixed at its commit: a replay never
      // moves the buffer its graph points into.)
      if (e->staging_dev) cu->cuMemFree(e->staging_dev);
      e->staging_dev = 0;
      e->staging_cap = 0;
      uint64_t cap = 4096;
      while (cap < staged) cap *= 2;
      const CUresult r = cu->cuMemAlloc(&e->staging_dev, cap);
      if (r != CUDA_SUCCESS) return abort_commit("allocating the inline-bytes staging buffer", r);
      e->staging_cap = cap;
    }
    const CUresult r = cu->cuMemcpyHtoDAsync(e->staging_dev, staging.data(), staged, e->stream);
    if (r != CUDA_SUCCESS) return abort_commit("uploading inline bytes", r);
  }
  if (replay && e->exec == nullptr && !e->graph_failed) capture_graph(cu, e);
  CUresult r = cu->cuEventRecord(e->start, e->stream);
  if (r != CUDA_SUCCESS) return abort_commit("cuEventRecord", r);
  if (replay && e->exec != nullptr) {
    r = cu->cuGraphLaunch(e->exec, e->stream);
    if (r != CUDA_SUCCESS) return abort_commit("launching the replay's CUDA graph", r);
  } else {
    std::string what;
    r = launch_all(cu, e, launches, &what);
    if (r != CUDA_SUCCESS) return abort_commit(what, r);
  }
  r = cu->cuEventRecord(e->stop, e->stream);
  if (r != CUDA_SUCCESS) return abort_commit("cuEventRecord", r);
  return ok_msg(msg, msg_cap);
}

// What replay and patch share: a replayable encoder with no work running.
mlxn_status check_replayable(const std::string& fn, Encoder* e, char* msg, uint64_t msg_cap) {
  if (!e) return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, fn + ": encoder must be non-NULL (got NULL)");
  if (!e->replayable)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   fn + ": encoder must be replayable (made by mlxn_encoder_create_replayable) "
                        "(got an encoder made by mlxn_encoder_create)");
  if (poll(e) == MLXN_ENCODER_PENDING)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   fn + ": encoder must have no work running (got a commit or replay still running; wait first)");
  return MLXN_OK;
}

}  // namespace

MLXN_EXPORT mlxn_status mlxn_encoder_commit(mlxn_encoder* encoder, char* msg, uint64_t msg_cap) {
  if (!encoder)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "mlxn_encoder_commit: encoder is NULL");
  Encoder* e = reinterpret_cast<Encoder*>(encoder);
  if (e->frozen)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "commit: the encoder must be recording (got a replayable encoder whose recording was committed: "
                   "replay it)");
  mlxn_status st = begin_recording(e, "commit", msg, msg_cap);
  if (st != MLXN_OK) return st;
  if (e->replayable) {
    e->frozen = true;
    e->staging_dirty = false;
    return submit(e, e->recorded, e->staging, true, false, msg, msg_cap);
  }
  e->barrier_pending = false;  // the commit's end joins every stream
  if (e->flushed) {
    // The rest of a recording that flushes began: after the flushed launches
    // on the same streams, the timing event `start` recorded by the first.
    const Driver* cu = use(e->dev);
    e->gpu_ns = 0;
    e->state = MLXN_ENCODER_PENDING;
    if (mlxn_status st = launch_recorded(cu, e, msg, msg_cap); st != MLXN_OK) return st;
    e->inflight_staging = std::move(e->staging);
    e->staging.clear();
    e->flushed = false;
    e->staging_uploaded = 0;
    if (const CUresult r = cu->cuEventRecord(e->stop, e->stream); r != CUDA_SUCCESS)
      return abort_work(cu, e, "cuEventRecord", r, msg, msg_cap);
    return ok_msg(msg, msg_cap);
  }
  e->inflight = std::move(e->recorded);
  e->recorded.clear();
  e->inflight_staging = std::move(e->staging);
  e->staging.clear();
  return submit(e, e->inflight, e->inflight_staging, true, false, msg, msg_cap);
}

MLXN_EXPORT mlxn_status mlxn_encoder_flush(mlxn_encoder* encoder, char* msg, uint64_t msg_cap) {
  if (!encoder)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "mlxn_encoder_flush: encoder must be non-NULL (got NULL)");
  Encoder* e = reinterpret_cast<Encoder*>(encoder);
  if (e->replayable)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "flush: encoder must not be replayable (its recording is captured whole at its first commit) "
                   "(got a replayable encoder)");
  if (const mlxn_status st = begin_recording(e, "flush", msg, msg_cap); st != MLXN_OK) return st;
  if (e->recorded.empty()) return ok_msg(msg, msg_cap);
  const Driver* cu = use(e->dev);
  if (!e->flushed) {
    // The recording's first launches: the commit's device time starts here.
    e->gpu_ns = 0;
    if (const CUresult r = cu->cuEventRecord(e->start, e->stream); r != CUDA_SUCCESS)
      return abort_work(cu, e, "cuEventRecord", r, msg, msg_cap);
    e->flushed = true;
  }
  if (mlxn_status st = launch_recorded(cu, e, msg, msg_cap); st != MLXN_OK) return st;
  return ok_msg(msg, msg_cap);
}

MLXN_EXPORT mlxn_status mlxn_encoder_create_replayable(mlxn_device* device, mlxn_encoder** out, char* msg,
                                                       uint64_t msg_cap) {
  if (!device || !out)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "mlxn_encoder_create_replayable: device and out must be non-NULL");
  const mlxn_status st = mlxn_encoder_create(device, out, msg, msg_cap);
  if (st == MLXN_OK) reinterpret_cast<Encoder*>(*out)->replayable = true;
  return st;
}

MLXN_EXPORT mlxn_status mlxn_encoder_replay(mlxn_encoder* encoder, char* msg, uint64_t msg_cap) {
  Encoder* e = reinterpret_cast<Encoder*>(encoder);
  if (mlxn_status st = check_replayable("mlxn_encoder_replay", e, msg, msg_cap)) return st;
  if (!e->frozen)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT,
                   "mlxn_encoder_replay: encoder must have committed its recording once (got a recording never "
                   "committed)");
  e->error.clear();
  const bool upload = e->staging_dirty;
  e->staging_dirty = false;
  return submit(e, e->recorded, e->staging, upload, true, msg, msg_cap);
}

MLXN_EXPORT mlxn_status mlxn_encoder_patch_bytes(mlxn_encoder* encoder, uint64_t dispatch_index,
                                                 uint32_t binding_index, const void* data, uint64_t len,
                                                 char* msg, uint64_t msg_cap) {
  const std::string fn = "mlxn_encoder_patch_bytes";
  Encoder* e = reinterpret_cast<Encoder*>(encoder);
  if (mlxn_status st = check_replayable(fn, e, msg, msg_cap)) return st;
  if (std::string why = mlxn::common::patch_dispatch_refusal(fn, e->recorded.size(), dispatch_index); !why.empty())
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, why);
  const Launch& l = e->recorded[dispatch_index];
  std::vector<mlxn::common::BytesBinding> bytes;
  std::vector<uint64_t> at;  // each one's offset into the staging
  for (const Arg& a : l.args) {
    if (!a.staged || a.tensor_map) continue;
    bytes.push_back({a.index, a.len});
    at.push_back(a.value);
  }
  size_t which = 0;
  if (std::string why = mlxn::common::patch_binding_refusal(fn, dispatch_index, l.pipe->name, bytes, binding_index, len, data, &which);
      !why.empty())
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, why);
  if (len) {
    std::memcpy(e->staging.data() + at[which], data, len);
    e->staging_dirty = e->frozen;  // before the first commit, its upload takes them
  }
  return ok_msg(msg, msg_cap);
}

MLXN_EXPORT mlxn_status mlxn_encoder_wait(mlxn_encoder* encoder, char* msg, uint64_t msg_cap) {
  if (!encoder)
    return set_msg(msg, msg_cap, MLXN_ERR_INVALID_ARGUMENT, "mlxn_encoder_wait: encoder is NULL");
  Encoder* e = reinterpret_cast<Encoder*>(encoder);
  if (e->state == MLXN_ENCODER_PENDING) {
    const Driver* cu = use(e->dev);
    const CUresult r = cu->cuEventSynchronize(e->stop);
    if (r == CUDA_SUCCESS) finish_commit(e);
    else fail_commit(e, r);
  }
  if (e->state == MLXN_ENCODER_ERROR) return set_msg(msg, msg_cap, MLXN_ERR_COMMAND_BUFFER, e->error);
  return ok_msg(msg, msg_cap);
}

MLXN_EXPORT int32_t mlxn_encoder_status(mlxn_encoder* encoder) {
  if (!encoder) return MLXN_ENCODER_ERROR;
  return poll(reinterpret_cast<Encoder*>(encoder));
}

MLXN_EXPORT uint64_t mlxn_encoder_gpu_time_ns(mlxn_encoder* encoder) {
  return encoder ? reinterpret_cast<Encoder*>(encoder)->gpu_ns : 0;
}
