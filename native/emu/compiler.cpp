#include "compiler.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ftw.h>
#include <spawn.h>
#include <sys/mman.h>
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

#include "../common/private_cache.h"
#include "translate.h"
#include "util.h"

extern char** environ;

namespace mlxn::emu {

namespace {

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

using cache::create_temp;
using cache::remove_tree;
using cache::write_all;

// Writes a file that does not exist yet (O_CREAT | O_EXCL | O_NOFOLLOW).
bool write_new_file(const std::string& path, const char* data, size_t size) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = write_all(fd, std::string(data, size));
  ok = close(fd) == 0 && ok;
  return ok;
}

// mkdir -p below an existing private directory, 0700.
bool make_subdirs(const std::string& base, const std::string& rel) {
  size_t pos = 0;
  while ((pos = rel.find('/', pos)) != std::string::npos) {
    const std::string cur = base + "/" + rel.substr(0, pos);
    if (mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) return false;
    ++pos;
  }
  return true;
}

// A private scratch directory (mkdtemp: random name, 0700, made exclusively)
// inside the cache directory, for the files of one compile.
std::string scratch_dir(const std::string& dir) {
  std::string templ = dir + "/work.XXXXXX";
  std::vector<char> b(templ.begin(), templ.end());
  b.push_back('\0');
  return mkdtemp(b.data()) ? std::string(b.data()) : std::string();
}

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
  if (lstat((dir + "/.complete").c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    s.dir = dir;
    return s;
  }
  // Written into a scratch directory of this process, then renamed into place.
  const std::string tmp = scratch_dir(base);
  if (tmp.empty()) {
    s.error = "cannot create a directory in " + base + ": " + std::strerror(errno);
    return s;
  }
  for (unsigned long i = 0; i < kShimFileCount; ++i) {
    const std::string rel = kShimFiles[i].path;
    if (!make_subdirs(tmp, rel) || !write_new_file(tmp + "/" + rel, kShimFiles[i].data, kShimFiles[i].size)) {
      s.error = "cannot write the shim headers into " + tmp + ": " + std::strerror(errno);
      remove_tree(tmp);
      return s;
    }
  }
  write_new_file(tmp + "/.complete", "", 0);
  if (rename(tmp.c_str(), dir.c_str()) != 0) {
    // Another process got there first: its copy is identical.
    remove_tree(tmp);
    if (lstat((dir + "/.complete").c_str(), &st) != 0) {
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

// Runs argv with stdout and stderr into log_path (an existing file, made by
// create_temp; a link there is not followed); returns the exit status, or -1
// when the process could not be started.
int run_process(const std::vector<std::string>& argv, const std::string& log_path) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_TRUNC | O_NOFOLLOW, 0600);
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
  std::string log;
  if (const int fd = create_temp(dir, "rtlib", &log); fd >= 0) {
    close(fd);
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
  std::string log;
  if (const int fd = create_temp(dir, "version", &log); fd >= 0) {
    close(fd);
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

// Loads a shared object from the bytes that were verified, never from a path
// that could change after the check: on Linux through an anonymous memory file
// (kept open as long as the library, so that no two loaded libraries share a
// /proc/self/fd name, which dlopen would take for the same library);
// elsewhere through an exclusive scratch file in the private cache directory.
bool load_verified(const std::string& bytes, const std::string& dir, Code* code, std::string* err) {
#ifdef __linux__
  (void)dir;
  const int fd = memfd_create("mlx-native-kernels", MFD_CLOEXEC);
  if (fd < 0) {
    *err = std::string("memfd_create: ") + std::strerror(errno);
    return false;
  }
  if (!write_all(fd, bytes)) {
    *err = std::string("writing the memory file: ") + std::strerror(errno);
    close(fd);
    return false;
  }
  code->handle = dlopen(("/proc/self/fd/" + std::to_string(fd)).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!code->handle) {
    const char* e = dlerror();
    *err = e ? e : "dlopen failed";
    close(fd);
    return false;
  }
  code->memfd = fd;
  return true;
#else
  std::string path;
  const int fd = create_temp(dir, "load", &path);
  if (fd < 0) {
    *err = "cannot create a file in " + dir + ": " + std::strerror(errno);
    return false;
  }
  const bool ok = write_all(fd, bytes);
  close(fd);
  if (ok) code->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  const char* e = ok && !code->handle ? dlerror() : nullptr;
  unlink(path.c_str());
  if (!code->handle) *err = e ? e : "cannot write the library";
  return code->handle != nullptr;
#endif
}

// Serializes compiles within the process: the machine's cores go to one
// clang at a time, and concurrent compiles of one key do not race.
std::mutex g_compile_mu;

}  // namespace

// The kernel cache: MLX_NATIVE_EMU_CACHE, else <user cache>/mlx-native/emu,
// when it is (or can be made) private (native/common/private_cache.h); else a
// directory of this process's own, removed at exit (nothing is reused then).
// Chosen once per process.
std::string cache_dir() {
  static std::once_flag once;
  static std::string dir;
  std::call_once(once, [] {
    std::string want;
    if (const char* e = std::getenv("MLX_NATIVE_EMU_CACHE"); e && *e) want = e;
    else if (std::string base = cache::user_cache_base(); !base.empty()) want = base + "/mlx-native/emu";
    std::string why;
    if (!want.empty()) dir = cache::private_dir(want, &why);
    if (dir.empty() && !want.empty())
      std::fprintf(stderr, "mlx-native emu: not using the kernel cache %s: %s; compiling into a private folder of this process\n",
                   want.c_str(), why.c_str());
    if (dir.empty()) dir = cache::process_dir("emu", &why);
  });
  return dir;
}

Code::~Code() {
  kernels.clear();
  if (handle) dlclose(handle);
  if (memfd >= 0) close(memfd);
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

  // The entry holds the key and the SHA-256 of the shared object, both checked
  // before the bytes are used; an entry that fails (truncated, altered,
  // another key) is compiled again and replaced.
  const std::string dir = cache_dir();
  const std::string entry = key + ".kernels";
  std::string so_bytes;
  {
    std::lock_guard<std::mutex> lock(g_compile_mu);
    if (dir.empty() || !cache::load_entry(dir, entry, key, &so_bytes)) {
      const std::string work = dir.empty() ? std::string() : scratch_dir(dir);
      if (work.empty()) {
        *error = "emu: cannot create a private directory for compiling in " + dir + ": " + std::strerror(errno);
        return MLXN_ERR_INTERNAL;
      }
      const std::string cpp = work + "/kernels.cpp", so = work + "/kernels.so";
      std::string log;
      const int lfd = create_temp(work, "compile", &log);
      if (lfd < 0 || !write_new_file(cpp, tr.cpp.data(), tr.cpp.size())) {
        *error = "emu: cannot write " + cpp + ": " + std::strerror(errno);
        if (lfd >= 0) close(lfd);
        remove_tree(work);
        return MLXN_ERR_INTERNAL;
      }
      close(lfd);
      std::vector<std::string> argv = {cxx};
      argv.insert(argv.end(), flags.begin(), flags.end());
      argv.insert(argv.end(), {"-o", so, cpp});
      int rc = run_process(argv, log);
      std::string text;
      read_file(log, &text);
      const bool read_ok = rc == 0 && cache::read_private_file(so, &so_bytes);
      remove_tree(work);
      if (rc != 0) {
        if (rc < 0) {
          *error = "emu: cannot run " + cxx + ": " + std::strerror(errno);
        } else {
          while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
          *error = name + " failed to compile (" + cxx + ", exit " + std::to_string(rc) + "):\n" + text;
        }
        return MLXN_ERR_SHADER_COMPILATION;
      }
      if (!read_ok) {
        *error = "emu: cannot read the compiled kernels back from " + so;
        return MLXN_ERR_INTERNAL;
      }
      cache::store_entry(dir, entry, key, so_bytes);  // a failure only costs a compile next time
    }
  }

  auto code = std::make_shared<Code>();
  std::string load_err;
  if (!load_verified(so_bytes, dir, code.get(), &load_err)) {
    *error = "emu: cannot load the compiled kernels of " + name + ": " + load_err;
    return MLXN_ERR_INTERNAL;
  }
  auto abi_fn = reinterpret_cast<uint32_t (*)()>(dlsym(code->handle, "mlxn_emu_kernel_abi"));
  if (!abi_fn || abi_fn() != MLXN_EMU_KERNEL_ABI) {
    *error = "emu: the kernels of " + name + " do not export mlxn_emu_kernel_abi() == " + std::to_string(MLXN_EMU_KERNEL_ABI);
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
