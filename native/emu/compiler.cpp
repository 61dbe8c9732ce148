#include "compiler.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ftw.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "translate.h"
#include "util.h"

extern char** environ;

namespace mlxn::emu {

namespace {

bool make_dirs(const std::string& path) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool read_file(const std::string& path, std::string* out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  out->clear();
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, n);
  std::fclose(f);
  return true;
}

std::atomic<uint64_t> g_tmp_counter{0};

std::string tmp_suffix() {
  return ".tmp." + std::to_string(getpid()) + "." + std::to_string(g_tmp_counter.fetch_add(1));
}

bool write_file(const std::string& path, const char* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return false;
  bool ok = std::fwrite(data, 1, size, f) == size;
  ok = (std::fclose(f) == 0) && ok;
  return ok;
}

// Writes through a temporary file and a rename, so that a concurrent reader
// (another process sharing the cache) never sees a partial file.
bool write_file_atomic(const std::string& path, const std::string& data) {
  std::string tmp = path + tmp_suffix();
  if (!write_file(tmp, data.data(), data.size())) {
    unlink(tmp.c_str());
    return false;
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

int remove_entry(const char* p, const struct stat*, int, struct FTW*) { return remove(p); }

void remove_tree(const std::string& path) { nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

// Regular files under dir, as paths relative to it, sorted.
void list_files(const std::string& dir, const std::string& rel, std::vector<std::string>* out) {
  DIR* d = opendir((rel.empty() ? dir : dir + "/" + rel).c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    std::string r = rel.empty() ? n : rel + "/" + n;
    struct stat st;
    if (stat((dir + "/" + r).c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode))
      list_files(dir, r, out);
    else if (S_ISREG(st.st_mode))
      out->push_back(r);
  }
  closedir(d);
  std::sort(out->begin(), out->end());
}

bool is_executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

std::string find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return is_executable(name) ? name : std::string();
  std::string path = env_or("PATH", "/usr/local/bin:/usr/bin:/bin");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    if (!dir.empty() && is_executable(dir + "/" + name)) return dir + "/" + name;
    start = end + 1;
  }
  return std::string();
}

// The C++ compiler for kernels: MLX_NATIVE_EMU_CXX, else clang++-19, else clang++.
std::string kernel_compiler() {
  const char* e = std::getenv("MLX_NATIVE_EMU_CXX");
  if (e && *e) return find_on_path(e);
  std::string c = find_on_path("clang++-19");
  if (c.empty()) c = find_on_path("clang++");
  return c;
}

struct Shim {
  std::string dir;   // -I directory
  std::string hash;  // of every file's path and contents
  std::string error;
};

Shim load_shim() {
  Shim s;
  Hasher h;
  if (const char* over = std::getenv("MLX_NATIVE_EMU_SHIM"); over && *over) {
    std::vector<std::string> files;
    list_files(over, "", &files);
    if (files.empty()) {
      s.error = std::string("MLX_NATIVE_EMU_SHIM=") + over + " holds no shim headers";
      return s;
    }
    for (const std::string& f : files) {
      std::string data;
      if (!read_file(std::string(over) + "/" + f, &data)) {
        s.error = "cannot read shim file " + std::string(over) + "/" + f;
        return s;
      }
      h.add(f);
      h.add(data);
    }
    s.dir = over;
    s.hash = h.hex();
    return s;
  }

  for (unsigned long i = 0; i < kShimFileCount; ++i) {
    h.add(std::string(kShimFiles[i].path));
    h.add(std::string(kShimFiles[i].data, kShimFiles[i].size));
  }
  s.hash = h.hex();
  const std::string base = cache_dir();
  const std::string dir = base + "/shim-" + s.hash;
  struct stat st;
  if (stat((dir + "/.complete").c_str(), &st) == 0) {
    s.dir = dir;
    return s;
  }
  // Write into a private directory, then rename it into place.
  const std::string tmp = dir + tmp_suffix();
  for (unsigned long i = 0; i < kShimFileCount; ++i) {
    std::string path = tmp + "/" + kShimFiles[i].path;
    if (!make_dirs(path.substr(0, path.rfind('/'))) ||
        !write_file(path, kShimFiles[i].data, kShimFiles[i].size)) {
      s.error = "cannot write the shim headers into " + tmp + ": " + std::strerror(errno);
      remove_tree(tmp);
      return s;
    }
  }
  write_file(tmp + "/.complete", "", 0);
  if (rename(tmp.c_str(), dir.c_str()) != 0) {
    // Another process got there first: its copy is identical.
    remove_tree(tmp);
    if (stat((dir + "/.complete").c_str(), &st) != 0) {
      s.error = "cannot install the shim headers into " + dir;
      return s;
    }
  }
  s.dir = dir;
  return s;
}

const Shim& shim() {
  static std::once_flag once;
  static Shim s;
  std::call_once(once, [] { s = load_shim(); });
  return s;
}

// Runs argv with stdout and stderr into log_path; returns the exit status,
// or -1 when the process could not be started.
int run_process(const std::vector<std::string>& argv, const std::string& log_path) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addclose(&fa, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Link flags for the kernel library. Clang lowers some conversions (float to
// bfloat on x86-64) to compiler-rt builtins such as __truncsfbf2 that older
// libgcc lacks; the kernel library is loaded RTLD_LOCAL and must not depend on
// the host process for them, so link clang's builtins statically when that
// compiler has them.
std::vector<std::string> link_flags(const std::string& cxx, const std::string& dir) {
  static std::mutex mu;
  static std::string probed_for;
  static std::vector<std::string> flags;
  std::lock_guard<std::mutex> lock(mu);
  if (probed_for == cxx) return flags;
  flags.clear();
  if (make_dirs(dir)) {
    const std::string log = dir + "/rtlib" + tmp_suffix() + ".log";
    if (run_process({cxx, "--rtlib=compiler-rt", "-print-libgcc-file-name"}, log) == 0) {
      std::string path;
      read_file(log, &path);
      while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
      struct stat st;
      if (!path.empty() && stat(path.c_str(), &st) == 0) flags.push_back("--rtlib=compiler-rt");
    }
    unlink(log.c_str());
  }
  probed_for = cxx;
  return flags;
}

// The compiler's identity: its own --version text (the same path may hold
// another compiler after an upgrade). Probed once per compiler path.
std::string compiler_identity(const std::string& cxx, const std::string& dir) {
  static std::mutex mu;
  static std::string probed_for;
  static std::string identity;
  std::lock_guard<std::mutex> lock(mu);
  if (probed_for == cxx) return identity;
  identity = "unknown";
  if (make_dirs(dir)) {
    const std::string log = dir + "/version" + tmp_suffix() + ".log";
    if (run_process({cxx, "--version"}, log) == 0) read_file(log, &identity);
    unlink(log.c_str());
  }
  probed_for = cxx;
  return identity;
}

// The emulator build: a hash of the file this code was loaded from (the
// runtime library), so that kernels compiled by one build are never loaded
// by another (the kernel ABI number need not change with every change of
// the runtime, nor of the translator that is part of it).
const std::string& emulator_build_id() {
  static std::once_flag once;
  static std::string id;
  std::call_once(once, [] {
    Dl_info info;
    std::string data;
    if (dladdr(reinterpret_cast<void*>(&emulator_build_id), &info) && info.dli_fname &&
        read_file(info.dli_fname, &data)) {
      Hasher h;
      h.add(data);
      id = h.hex();
    } else {
      // Not readable: a key that no other process shares, so nothing cached is reused.
      id = "unreadable-" + std::to_string(getpid()) + "-" + std::to_string(time(nullptr));
    }
  });
  return id;
}

// Serializes compiles within the process: the machine's cores go to one
// clang at a time, and concurrent compiles of one key do not race.
std::mutex g_compile_mu;

}  // namespace

std::string cache_dir() {
  if (const char* e = std::getenv("MLX_NATIVE_EMU_CACHE"); e && *e) return e;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/mlx-native/emu";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/mlx-native/emu";
  return "/tmp/mlx-native-emu-" + std::to_string(getuid());
}

Code::~Code() {
  kernels.clear();
  if (handle) dlclose(handle);
}

Kernel* Code::find(const std::string& name) const {
  for (const auto& k : kernels)
    if (k->name == name) return k.get();
  return nullptr;
}

mlxn_status compile_metal(const std::string& source, const std::string& name,
                          const std::vector<ConstantValue>& constants, std::shared_ptr<Code>* out,
                          std::string* error) {
  std::vector<FunctionConstant> fcs;
  fcs.reserve(constants.size());
  for (const ConstantValue& c : constants) fcs.push_back({c.index, c.type, c.bits});

  Translation tr;
  std::string terr;
  if (!translate(source, name, fcs, &tr, &terr)) {
    *error = terr.empty() ? name + ": translation failed" : terr;
    return MLXN_ERR_SHADER_COMPILATION;
  }

  const Shim& sh = shim();
  if (!sh.error.empty()) {
    *error = "emu: " + sh.error;
    return MLXN_ERR_INTERNAL;
  }
  const std::string cxx = kernel_compiler();
  if (cxx.empty()) {
    *error = "emu: no C++ compiler for kernels (looked for " +
             env_or("MLX_NATIVE_EMU_CXX", "clang++-19, clang++") +
             " on PATH; set MLX_NATIVE_EMU_CXX to a clang++)";
    return MLXN_ERR_SHADER_COMPILATION;
  }

  std::vector<std::string> flags = {"-std=c++20", "-O1", "-fPIC", "-shared"};
  for (const char* const* f = kCompileFlags; *f; ++f) flags.push_back(*f);
  flags.push_back("-I" + sh.dir);
  for (const std::string& f : link_flags(cxx, cache_dir())) flags.push_back(f);

  // The cache key covers everything the .so depends on: the translated
  // source, the shim headers' names and contents, the compiler (path and
  // --version), the flags, the kernel ABI and the emulator build.
  Hasher h;
  h.add(tr.cpp);
  h.add(sh.hash);
  h.add(cxx);
  h.add(compiler_identity(cxx, cache_dir()));
  for (const std::string& f : flags) h.add(f);
  const uint32_t abi = MLXN_EMU_KERNEL_ABI;
  h.add(&abi, sizeof abi);
  h.add(emulator_build_id());
  const std::string key = h.hex();

  const std::string dir = cache_dir();
  const std::string so = dir + "/" + key + ".so";
  {
    std::lock_guard<std::mutex> lock(g_compile_mu);
    struct stat st;
    if (stat(so.c_str(), &st) != 0) {
      if (!make_dirs(dir)) {
        *error = "emu: cannot create the kernel cache directory " + dir + ": " + std::strerror(errno);
        return MLXN_ERR_INTERNAL;
      }
      const std::string cpp = dir + "/" + key + ".cpp";
      if (!write_file_atomic(cpp, tr.cpp)) {
        *error = "emu: cannot write " + cpp + ": " + std::strerror(errno);
        return MLXN_ERR_INTERNAL;
      }
      const std::string tmp_so = so + tmp_suffix();
      const std::string log = dir + "/" + key + tmp_suffix() + ".log";
      std::vector<std::string> argv = {cxx};
      argv.insert(argv.end(), flags.begin(), flags.end());
      argv.insert(argv.end(), {"-o", tmp_so, cpp});
      int rc = run_process(argv, log);
      std::string text;
      read_file(log, &text);
      unlink(log.c_str());
      if (rc != 0) {
        unlink(tmp_so.c_str());
        if (rc < 0) {
          *error = "emu: cannot run " + cxx + ": " + std::strerror(errno);
        } else {
          while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
          *error = name + " failed to compile (" + cxx + ", exit " + std::to_string(rc) + "):\n" + text;
        }
        return MLXN_ERR_SHADER_COMPILATION;
      }
      if (rename(tmp_so.c_str(), so.c_str()) != 0) {
        unlink(tmp_so.c_str());
        *error = "emu: cannot move the compiled kernels into " + so + ": " + std::strerror(errno);
        return MLXN_ERR_INTERNAL;
      }
    }
  }

  auto code = std::make_shared<Code>();
  code->handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!code->handle) {
    const char* e = dlerror();
    *error = "emu: cannot load compiled kernels " + so + ": " + (e ? e : "dlopen failed") +
             " (delete the file to rebuild it)";
    return MLXN_ERR_INTERNAL;
  }
  auto abi_fn = reinterpret_cast<uint32_t (*)()>(dlsym(code->handle, "mlxn_emu_kernel_abi"));
  if (!abi_fn || abi_fn() != MLXN_EMU_KERNEL_ABI) {
    *error = "emu: " + so + " does not export mlxn_emu_kernel_abi() == " + std::to_string(MLXN_EMU_KERNEL_ABI);
    return MLXN_ERR_INTERNAL;
  }
  for (const KernelInfo& ki : tr.kernels) {
    auto k = std::make_unique<Kernel>();
    k->name = ki.host_name;
    k->fn = reinterpret_cast<KernelFn>(dlsym(code->handle, ki.symbol.c_str()));
    if (!k->fn) {
      *error = "emu: compiled kernels lack the entry " + ki.symbol + " of kernel '" + ki.host_name + "'";
      return MLXN_ERR_INTERNAL;
    }
    // The static threadgroup memory, known before the first run; a library
    // without the function (the runtime tests' hand-written kernels) has the
    // size learned from runs.
    auto static_fn = reinterpret_cast<uint64_t (*)()>(
        dlsym(code->handle, ("mlxn_emu_kernel_static_threadgroup_" + ki.host_name).c_str()));
    if (static_fn) k->static_threadgroup_bytes.store(static_fn());
    k->buffer_indices = ki.buffer_indices;
    k->threadgroup_indices = ki.threadgroup_indices;
    k->max_threads = kMaxThreadsPerThreadgroup;
    if (ki.max_total_threads_per_threadgroup != 0)
      k->max_threads = std::min(k->max_threads, ki.max_total_threads_per_threadgroup);
    code->kernels.push_back(std::move(k));
  }
  *out = std::move(code);
  return MLXN_OK;
}

}  // namespace mlxn::emu
