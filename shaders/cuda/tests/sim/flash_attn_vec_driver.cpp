// The flash_attn_vec family's CUDA kernels (shaders/cuda/flash_attn_vec.cu)
// on the CPU simulation (sim_runtime.h), against a float64 reference, at the
// launches of ts/ops/flash_attn_vec.ts (cudaMainLaunch and the reduce's,
// written out again below): every head dim and K/V dtype, mlx-native's
// entries (every sequence alike) and the varlen ones (sequences of their own
// lengths, global caches and rings wrapped many times, windows at their
// edges), GQA groups below, at and above the 8 heads of an mma, one key,
// keys not a multiple of the tile or of the split, nwg 1 to 32. Positions
// the kernels must not read hold NaN. Error: max |got - want| / max |want|
// (outputs are convex combinations of v's rows), under the f32 tolerance
// for every K/V dtype: the tensor-core kernels split the query and the
// weights in two 16-bit terms (tests/flash_attn_vec.test.ts says why).
// `big` adds a long sequence per head dim.
#include "sim_kernels.h"  // build.py's output
#include "sim_util.h"
#include <algorithm>
#include <cstdio>
#include <string>

template <class KV> using Main = void (*)(const FlashAttnVecParams*, const float*, const KV*, const KV*, float*);
template <class KV> using Varlen = void (*)(const FlashAttnVecVarlenParams*, const float*, const KV*, const KV*, float*, const u32*);
using Reduce = void (*)(const FlashAttnVecReduceParams*, const float*, float*, const u32*);

#define PICK(prefix, D) (D == 128 ? prefix##dk128 : D == 256 ? prefix##dk256 : prefix##dk512)
template <class KV> Main<KV> main_of(int D);
template <> Main<float> main_of(int D) { return PICK(flash_attn_vec_, D); }
template <> Main<__half> main_of(int D) { return PICK(flash_attn_vec_f16kv_, D); }
template <> Main<__nv_bfloat16> main_of(int D) { return PICK(flash_attn_vec_bf16kv_, D); }
template <class KV> Varlen<KV> varlen_of(int D);
template <> Varlen<float> varlen_of(int D) { return PICK(flash_attn_vec_varlen_, D); }
template <> Varlen<__half> varlen_of(int D) { return PICK(flash_attn_vec_varlen_f16kv_, D); }
template <> Varlen<__nv_bfloat16> varlen_of(int D) { return PICK(flash_attn_vec_varlen_bf16kv_, D); }
Reduce reduce_of(int D) { return PICK(flash_attn_vec_reduce_, D); }

// cudaMainLaunch of ts/ops/flash_attn_vec.ts: grid x and shared memory.
u32 head_blocks_f32(u32 batch, u32 nh, u32 nkv, u32 D, u32 nwg) {
  const u32 group = nh / nkv, slices = D * 4 / 512;
  u32 hpb = std::min(group, std::max(1u, 8 / slices));
  while (hpb > 1 && (group + hpb - 1) / hpb * nkv * batch * nwg < 128) hpb = (hpb + 1) / 2;
  return (group + hpb - 1) / hpb;
}
template <class KV> SimDim grid_of(u32 batch, u32 nh, u32 nkv, u32 D, u32 nwg) {
  const u32 x = sizeof(KV) == 4 ? head_blocks_f32(batch, nh, nkv, D, nwg) : cdiv(nh / nkv, 8);
  return {x, nkv, batch * nwg};
}
template <class KV> size_t smem_of(u32 D) { return sizeof(KV) == 4 ? 4 * 32 * 768 : 192 * 1024 + (D == 512 ? 16 * 512 * 2 : 0); }

struct Case {
  std::string what;
  u32 B, H, Hkv, cap;
  std::vector<u32> lens;   // one per sequence; the main entries take lens[0] for all
  bool varlen, ring;
  u32 window;              // 0: no sliding window
  float softcap;
  u32 nwg;
};

// Visible positions of a sequence and the slot of each (shaders/flash_attn_vec.metal).
void span(const Case& c, u32 len, u32& lo, u32& hi) {
  hi = c.ring ? len : std::min(len, c.cap);
  lo = c.ring && len > c.cap ? len - c.cap : 0;
  if (c.window > 0 && len > c.window) lo = std::max(lo, len - c.window);
}

template <class KV>
void run(const Case& c, u32 D) {
  const u32 B = c.B, H = c.H, Hkv = c.Hkv, group = H / Hkv;
  const size_t qn = size_t(B) * H * D, kn = size_t(B) * Hkv * c.cap * D;
  Arr<float> q(qn), o(qn);
  Arr<KV> k(kn), v(kn);
  q.random(); k.random(); v.random(); o.poison();
  // Slots the kernels must not read: NaN.
  for (u32 b = 0; b < B; ++b) {
    u32 lo, hi;
    span(c, c.lens[b], lo, hi);
    std::vector<char> used(c.cap, 0);
    for (u32 j = lo; j < hi; ++j) used[c.ring ? j % c.cap : j] = 1;
    for (u32 kh = 0; kh < Hkv; ++kh)
      for (u32 s = 0; s < c.cap; ++s)
        if (!used[s])
          for (u32 d = 0; d < D; ++d) {
            const size_t i = ((size_t(b) * Hkv + kh) * c.cap + s) * D + d;
            k.p[i] = cvt<KV>(NAN);
            v.p[i] = cvt<KV>(NAN);
          }
  }
  const float scale = float(1.0 / std::sqrt(double(D)));
  const u32 mask = c.window > 0 ? 2 : 1;
  Arr<float> tmp(c.nwg > 1 ? size_t(B) * H * c.nwg * (D + 2) : 1);
  tmp.poison();
  float* dst = c.nwg > 1 ? tmp.p : o.p;
  std::vector<u32> lens = c.lens;
  const SimDim grid = grid_of<KV>(B, H, Hkv, D, c.nwg);
  if (c.varlen) {
    FlashAttnVecVarlenParams p{H, Hkv, D, c.cap, scale, mask, c.window, c.softcap, c.nwg, c.ring ? 1u : 0u};
    sim_launch(grid, {128, 1, 1}, smem_of<KV>(D), [&] { varlen_of<KV>(int(D))(&p, q.p, k.p, v.p, dst, lens.data()); });
  } else {
    FlashAttnVecParams p{H, Hkv, D, c.lens[0], c.cap, scale, mask, c.window, c.softcap, c.nwg};
    sim_launch(grid, {128, 1, 1}, smem_of<KV>(D), [&] { main_of<KV>(int(D))(&p, q.p, k.p, v.p, dst); });
  }
  if (c.nwg > 1) {
    FlashAttnVecReduceParams rp{B * H};
    u32 nwg = c.nwg;
    sim_launch({B * H, 1, 1}, {32 * c.nwg, 1, 1}, 0, [&] { reduce_of(int(D))(&rp, tmp.p, o.p, &nwg); });
  }

  std::vector<double> want(qn, 0.0);
  for (u32 b = 0; b < B; ++b) {
    u32 lo, hi;
    span(c, c.lens[b], lo, hi);
    for (u32 h = 0; h < H; ++h) {
      const size_t qo = (size_t(b) * H + h) * D, ko = (size_t(b) * Hkv + h / group) * c.cap * D;
      std::vector<double> s;
      double mx = -INFINITY;
      for (u32 j = lo; j < hi; ++j) {
        const size_t r = ko + size_t(c.ring ? j % c.cap : j) * D;
        double dot = 0;
        for (u32 d = 0; d < D; ++d) dot += double(q.p[qo + d]) * back(k.p[r + d]);
        double x = scale * dot;
        if (c.softcap > 0) x = c.softcap * std::tanh(x / c.softcap);
        s.push_back(x);
        mx = std::max(mx, x);
      }
      double sum = 0;
      for (double& x : s) { x = std::exp(x - mx); sum += x; }
      for (u32 j = lo; j < hi; ++j) {
        const size_t r = ko + size_t(c.ring ? j % c.cap : j) * D;
        for (u32 d = 0; d < D; ++d) want[qo + d] += s[j - lo] / sum * back(v.p[r + d]);
      }
    }
  }
  double wmax = 0, worst = 0;
  for (double w : want) wmax = std::max(wmax, std::fabs(w));
  for (size_t i = 0; i < qn; ++i) {
    const double e = std::fabs(double(o.p[i]) - want[i]) / (wmax > 0 ? wmax : 1);
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  const double tol = 1e-5;
  const bool ok = worst <= tol;
  if (!ok) failures++;
  const char* kv = sizeof(KV) == 4 ? "f32" : std::is_same_v<KV, __half> ? "f16" : "bf16";
  std::printf("%s %-4s D=%-3u %-72s err %.3g\n", ok ? "ok  " : "FAIL", kv, D, c.what.c_str(), worst);
}

int main(int argc, char** argv) {
  const bool big = argc > 1 && std::string(argv[1]) == "big";
  std::vector<Case> cases = {
    {"main: GQA 8, one key, nwg 1", 1, 8, 1, 1, {1}, false, false, 0, 0, 1},
    {"main: GQA 2, 37 keys of 40, nwg 3", 1, 4, 2, 40, {37}, false, false, 0, 0, 3},
    {"main: batch 2, GQA 16 (two blocks of 8 heads), 70 keys, window 20, softcap 5, nwg 2", 2, 16, 1, 80, {70, 70}, false, false, 20, 5, 2},
    {"main: GQA 3 (a partial block of heads), 100 keys, nwg 32", 1, 6, 2, 100, {100}, false, false, 0, 0, 32},
    {"main: GQA 4, 90 keys, nwg 6 (the reduce past four workgroups a thread at D 512)", 1, 4, 1, 96, {90}, false, false, 0, 0, 6},
    {"varlen: 4 sequences 1, 17, 64, 0 of 64, GQA 8, nwg 4", 4, 8, 1, 64, {1, 17, 64, 0}, true, false, 0, 0, 4},
    {"varlen: global, lengths past the capacity read as the capacity, window 16", 2, 4, 2, 48, {60, 33}, true, false, 16, 0, 1},
    {"varlen ring 32: positions 5 (unwrapped), 32, 33, 1000 (wrapped 31 times)", 4, 8, 2, 32, {5, 32, 33, 1000}, true, true, 0, 0, 2},
    {"varlen ring 40, window 24 (< capacity), softcap 8, nwg 3", 3, 16, 2, 40, {23, 24, 4097}, true, true, 24, 8, 3},
    {"varlen ring 16, window 16, one sequence at position 1", 2, 2, 2, 16, {1, 16}, true, true, 16, 0, 32},
  };
  if (big) {
    cases.push_back({"main: GQA 8, 2000 keys, nwg 5", 1, 8, 1, 2048, {2000}, false, false, 0, 0, 5});
    cases.push_back({"varlen ring 1024 at position 32768 + 7, window 1024, nwg 4", 1, 8, 1, 1024, {32775}, true, true, 1024, 0, 4});
  }
  for (u32 D : {128u, 256u, 512u})
    for (const Case& c : cases) {
      run<float>(c, D);
      run<__half>(c, D);
      run<__nv_bfloat16>(c, D);
    }
  std::printf("%s: %d failed\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}
