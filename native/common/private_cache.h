// The on-disk caches of compiled kernels (the emulator's shared objects, the
// cuda backend's NVRTC images), kept so that nobody else can plant or alter
// what the process loads:
//   - the directory is private: created 0700, owned by the effective user,
//     not reachable for writing by anyone else (each ancestor owned by the user
//     or root, and not writable by others unless sticky, as /tmp is); a
//     directory that fails these checks is not used, and the caller falls back
//     to a directory of the process's own (mkdtemp, removed at exit);
//   - entries are written through temporary files created exclusively
//     (O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600) and renamed into place;
//   - an entry holds its full key and the SHA-256 of its payload, checked
//     before the payload is used; a truncated or altered entry is rebuilt.
// Header-only, shared by native/emu and native/cuda. Linux and macOS.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace mlxn::cache {

// ---- SHA-256 (FIPS 180-4) ----

class Sha256 {
 public:
  Sha256() { reset(); }
  void reset() {
    static const uint32_t init[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    std::memcpy(h_, init, sizeof h_);
    len_ = 0;
    fill_ = 0;
  }
  void add(const void* data, size_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    len_ += n;
    while (n > 0) {
      const size_t take = n < 64 - fill_ ? n : 64 - fill_;
      std::memcpy(buf_ + fill_, p, take);
      fill_ += take;
      p += take;
      n -= take;
      if (fill_ == 64) {
        block(buf_);
        fill_ = 0;
      }
    }
  }
  void add(const std::string& s) { add(s.data(), s.size()); }
  // The 32-byte digest; the object is reset afterwards.
  std::string digest() {
    const uint64_t bits = len_ * 8;
    const uint8_t one = 0x80, zero = 0;
    add(&one, 1);
    while (fill_ != 56) add(&zero, 1);
    uint8_t be[8];
    for (int i = 0; i < 8; ++i) be[i] = uint8_t(bits >> (56 - 8 * i));
    add(be, 8);
    std::string out(32, '\0');
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 4; ++j) out[4 * i + j] = char(h_[i] >> (24 - 8 * j));
    reset();
    return out;
  }
  static std::string hex(const std::string& bytes) {
    static const char* d = "0123456789abcdef";
    std::string s;
    for (unsigned char c : bytes) {
      s += d[c >> 4];
      s += d[c & 15];
    }
    return s;
  }

 private:
  static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
  void block(const uint8_t* p) {
    static const uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a; h_[1] += b; h_[2] += c; h_[3] += d; h_[4] += e; h_[5] += f; h_[6] += g; h_[7] += h;
  }
  uint32_t h_[8];
  uint8_t buf_[64];
  uint64_t len_;
  size_t fill_;
};

inline std::string sha256(const std::string& s) {
  Sha256 h;
  h.add(s);
  return h.digest();
}

// ---- the directory ----

inline bool private_mode_ok(const struct stat& st) {
  return S_ISDIR(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 022) == 0;
}

// Every ancestor of `real` (an absolute, resolved path) is owned by the user
// or root and writable by nobody else, or sticky (as /tmp): nobody else can
// move the directory away and put another in its place.
inline bool ancestors_safe(const std::string& real, std::string* why) {
  size_t pos = 0;
  while ((pos = real.find('/', pos + 1)) != std::string::npos) {
    const std::string dir = real.substr(0, pos);
    struct stat st;
    if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      *why = dir + " is not a directory";
      return false;
    }
    if (st.st_uid != geteuid() && st.st_uid != 0) {
      *why = dir + " belongs to another user (uid " + std::to_string(st.st_uid) + ")";
      return false;
    }
    if ((st.st_mode & 022) != 0 && (st.st_mode & S_ISVTX) == 0) {
      *why = dir + " is writable by other users and not sticky";
      return false;
    }
  }
  return true;
}

// `path` as a private cache directory: missing components are created 0700;
// the directory itself must be a real directory (not a link) of the user with
// no access for group or others (one with read access only, as older versions
// made it, is tightened to 0700; one that others can write is refused: its
// contents cannot be trusted). Returns the resolved path, or "" and why.
inline std::string private_dir(const std::string& path, std::string* why) {
  if (path.empty() || path[0] != '/') {
    *why = "the cache directory must be an absolute path (got \"" + path + "\")";
    return std::string();
  }
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    const std::string cur = path.substr(0, pos);
    if (cur.empty()) continue;
    if (mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST) {
      *why = "cannot create " + cur + ": " + std::strerror(errno);
      return std::string();
    }
  }
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *why = path + " is not a directory (a link is not accepted)";
    return std::string();
  }
  char buf[4096];
  if (!realpath(path.c_str(), buf)) {
    *why = "cannot resolve " + path + ": " + std::strerror(errno);
    return std::string();
  }
  const std::string real = buf;
  if (st.st_uid != geteuid()) {
    *why = path + " belongs to another user (uid " + std::to_string(st.st_uid) + ")";
    return std::string();
  }
  if ((st.st_mode & 022) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", unsigned(st.st_mode & 0777));
    *why = path + " is writable by other users (mode " + mode + ")";
    return std::string();
  }
  if ((st.st_mode & 077) != 0 && chmod(path.c_str(), 0700) != 0) {
    *why = "cannot make " + path + " private: " + std::strerror(errno);
    return std::string();
  }
  if (!ancestors_safe(real, why)) return std::string();
  return real;
}

inline int remove_entry(const char* p, const struct stat*, int, struct FTW*) { return remove(p); }
inline void remove_tree(const std::string& path) {
  nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

// A fresh private directory of this process under $TMPDIR (else /tmp),
// created by mkdtemp (a random name, 0700, made exclusively), removed at exit.
inline std::string process_dir(const char* tag, std::string* why) {
  static std::mutex mu;
  static std::vector<std::string>* made = nullptr;
  const char* t = std::getenv("TMPDIR");
  std::string templ = std::string(t && *t ? t : "/tmp") + "/mlx-native-" + tag + "-XXXXXX";
  std::vector<char> b(templ.begin(), templ.end());
  b.push_back('\0');
  if (!mkdtemp(b.data())) {
    *why = "cannot create a private directory " + templ + ": " + std::strerror(errno);
    return std::string();
  }
  std::lock_guard<std::mutex> lock(mu);
  if (!made) {
    made = new std::vector<std::string>();
    std::atexit([] {
      for (const std::string& d : *made) remove_tree(d);
    });
  }
  made->push_back(b.data());
  return b.data();
}

// The user's cache base: $XDG_CACHE_HOME, else $HOME/.cache, else the home
// directory of the user database (getpwuid) + /.cache; "" when none is known.
inline std::string user_cache_base() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x == '/') return x;
  if (const char* h = std::getenv("HOME"); h && *h == '/') return std::string(h) + "/.cache";
  if (const passwd* pw = getpwuid(geteuid()); pw && pw->pw_dir && pw->pw_dir[0] == '/')
    return std::string(pw->pw_dir) + "/.cache";
  return std::string();
}

// ---- files ----

// A file created exclusively (O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600) under
// a random name in dir; returns its descriptor and path, or -1.
inline int create_temp(const std::string& dir, const std::string& prefix, std::string* path) {
  std::string templ = dir + "/" + prefix + ".XXXXXX";
  std::vector<char> b(templ.begin(), templ.end());
  b.push_back('\0');
  const int fd = mkstemp(b.data());  // O_CREAT | O_EXCL, mode 0600
  if (fd >= 0) *path = b.data();
  return fd;
}

inline bool write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

// Reads a regular file of the user that nobody else can write, without
// following a link; false when it is absent or fails a check.
inline bool read_private_file(const std::string& path, std::string* out) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 022) == 0;
  if (ok) {
    out->clear();
    char buf[1 << 16];
    for (;;) {
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) ok = false;
      if (n <= 0) break;
      out->append(buf, size_t(n));
    }
  }
  close(fd);
  return ok;
}

// ---- entries ----
// An entry file: "mlx-native cache 2\n", u64 key length, the key, u64 payload
// length, the SHA-256 of the payload (32 bytes), the payload.

inline const char* entry_magic() { return "mlx-native cache 2\n"; }

// The payload of entry `file` in dir when the file is whole, its key is `key`
// and its payload hashes to the stored digest.
inline bool load_entry(const std::string& dir, const std::string& file, const std::string& key,
                       std::string* payload) {
  std::string data;
  if (dir.empty() || !read_private_file(dir + "/" + file, &data)) return false;
  const size_t m = std::strlen(entry_magic());
  uint64_t klen = 0, plen = 0;
  if (data.size() < m + 8 || data.compare(0, m, entry_magic()) != 0) return false;
  std::memcpy(&klen, data.data() + m, 8);
  if (klen != key.size() || data.size() - m - 8 < klen + 8 + 32) return false;
  if (data.compare(m + 8, klen, key) != 0) return false;
  std::memcpy(&plen, data.data() + m + 8 + klen, 8);
  const size_t at = m + 8 + klen + 8 + 32;
  if (data.size() - at != plen) return false;
  payload->assign(data, at, plen);
  return sha256(*payload) == data.substr(m + 8 + klen + 8, 32);
}

// Writes entry `file` in dir through an exclusive temporary file and a rename;
// false on any failure (the cache only saves time).
inline bool store_entry(const std::string& dir, const std::string& file, const std::string& key,
                        const std::string& payload) {
  if (dir.empty()) return false;
  std::string tmp;
  const int fd = create_temp(dir, file + ".tmp", &tmp);
  if (fd < 0) return false;
  std::string data = entry_magic();
  const uint64_t klen = key.size(), plen = payload.size();
  data.append(reinterpret_cast<const char*>(&klen), 8);
  data += key;
  data.append(reinterpret_cast<const char*>(&plen), 8);
  data += sha256(payload);
  data += payload;
  bool ok = write_all(fd, data);
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp.c_str(), (dir + "/" + file).c_str()) != 0) {
    unlink(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace mlxn::cache
