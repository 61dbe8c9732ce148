// The flash_attn_prefill family's CUDA kernels (shaders/cuda/flash_attn_prefill.cu)
// on the CPU simulation (sim_runtime.h), against a float64 reference, at the
// launches of ts/ops/flash_attn_prefill.ts (flashAttnPrefillCudaTile,
// written out again below). The function constants are macros, so each
// variant is a build of its own (flash_attn_prefill.sh runs them):
//   plain:   every head dim and dtype, GQA, head- and token-major layouts, a
//            KV slot larger than the keys, queries at an offset, windows,
//            one key, rows not 16-byte aligned (the element-by-element
//            copies), several key steps; the mask builder; the tile
//            classifier at (32, 16);
// D 128 and 256 run at the mma.sync launch and at the Hopper launch
// ("[hopper launch]": wgmma on the model, or its fallback with
// -DMLXN_SIM_NO_WGMMA).
//   causal (301) and softcap (304): causal tiles at and off the diagonal,
//            causal windows, offsets;
//   masks (300, 303; classifier at 400 = 8, 401 = 64): additive masks shared
//            and per head, bool masks, blk at every entry's tile;
//   varlen (305, causal): several sequences of different lengths, a
//            sequence that continues earlier turns, an empty one.
// Error: max |got - want| / max |v| (outputs are convex combinations of v's
// rows), under the dtype's tolerance (tests/flash_attn_prefill.test.ts says
// why). `big` adds tiles of real sizes (minutes); any other argument runs
// only the attention cases whose name holds it.
#include "sim_kernels.h"  // build.py's output
#include "sim_util.h"
#include <algorithm>
#include <cstdio>
#include <string>


// flashAttnPrefillCudaTile: the mma.sync launches, and on compute
// capability 9.0 (hopper) the launch of D 128 (256 threads, the lockstep
// wgmma tile) and 256 (384 threads, the warp-specialized one with its
// tensor maps) on the simulation's model, or with -DMLXN_SIM_NO_WGMMA the
// mma.sync tile of 128 rows on 256 of the threads, as a build without
// sm_90a runs it.
struct CudaTile { u32 bq, bk, threads, smem; };
CudaTile cuda_tile(int d, bool hopper) {
  if (hopper && (d == 128 || d == 256)) {
    const u32 bk = d == 128 ? 128 : 64;
    return {128, bk, d == 128 ? 256u : 384u, (128 + 4 * bk) * u32(d) * 2 + 1024};
  }
  const u32 bq = d <= 128 ? 128 : 64, bk = d <= 256 ? 64 : 32, threads = d == 512 ? 256 : 128;
  return {bq, bk, threads, (bq + 2 * bk) * u32(d + 8) * 2};
}

template <class T, class M>
using Entry = void (*)(const T*, const T*, const T*, T*, const AttnParams*, const AttnMaskParams*, const M*, const char*,
                       const uint*, const uint*, const void*, const void*);

#define ENTRIES(T, t)                                                                                                 \
  Entry<T, T> additive_##t(int d, bool llama) {                                                                        \
    switch (d) {                                                                                                      \
      case 64: return flash_attn_prefill_##t##_d64;                                                                   \
      case 128: return flash_attn_prefill_##t##_d128;                                                                 \
      case 256: return flash_attn_prefill_##t##_d256;                                                                 \
      default: return llama ? flash_attn_prefill_llamacpp_##t##_d512 : flash_attn_prefill_##t##_d512;                 \
    }                                                                                                                 \
  }                                                                                                                   \
  Entry<T, bool> boolmask_##t(int d, bool llama) {                                                                     \
    switch (d) {                                                                                                      \
      case 64: return flash_attn_prefill_##t##_d64_boolmask;                                                          \
      case 128: return flash_attn_prefill_##t##_d128_boolmask;                                                        \
      case 256: return flash_attn_prefill_##t##_d256_boolmask;                                                        \
      default: return llama ? flash_attn_prefill_llamacpp_##t##_d512_boolmask : flash_attn_prefill_##t##_d512_boolmask; \
    }                                                                                                                 \
  }
ENTRIES(__nv_bfloat16, bf16)
ENTRIES(__half, f16)
template <class T> Entry<T, T> additive(int d, bool llama);
template <> Entry<__nv_bfloat16, __nv_bfloat16> additive(int d, bool llama) { return additive_bf16(d, llama); }
template <> Entry<__half, __half> additive(int d, bool llama) { return additive_f16(d, llama); }
template <class T> Entry<T, bool> boolmask(int d, bool llama);
template <> Entry<__nv_bfloat16, bool> boolmask(int d, bool llama) { return boolmask_bf16(d, llama); }
template <> Entry<__half, bool> boolmask(int d, bool llama) { return boolmask_f16(d, llama); }

enum MaskKind { NONE, SHARED, PER_HEAD, BOOL };

struct Case {
  std::string what;
  int B, H, Hkv, D, qL, kL;
  int cap = 0;  // 0: kL
  int q_off = 0, window = 0;
  bool seq_major = false;
  float softcap = 0;
  MaskKind mask = NONE;
  bool blk = false;
  bool llama = true;
  bool misalign = false;
  std::vector<u32> cuq, cuk;
  // Key row r scaled by 1 + ramp r (head-major layouts): scores grow along
  // the keys, so a row's running maximum rises by many units from one key
  // tile to the next and O is rescaled past the first tile by factors far
  // below 1.
  double ramp = 0;
};

// The Metal entry's blk tile (flashAttnPrefillTile).
void blk_tile(const Case& c, int& bq, int& bk) {
  if (c.D == 512) { bq = 8; bk = c.llama ? 64 : 8; } else { bq = 32; bk = 16; }
}

template <class T>
void run_on(const Case& c, bool hopper);
// Each case at the mma.sync launch, and D 128 and 256 at the Hopper launch too.
// A name fragment as the driver's argument (other than `big`) runs only the cases holding it.
inline std::string only;
template <class T>
void run(const Case& c) {
  if (!only.empty() && c.what.find(only) == std::string::npos) return;
  run_on<T>(c, false);
  if (c.D == 128 || c.D == 256) run_on<T>(c, true);
}

template <class T>
void run_on(const Case& c, bool hopper) {
  const bool varlen = !c.cuq.empty();
  const int B = varlen ? int(c.cuq.size()) - 1 : c.B, H = c.H, Hkv = c.Hkv, D = c.D, qL = c.qL, kL = c.kL;
  const int cap = c.cap ? c.cap : kL;
  const size_t qn = size_t(varlen ? 1 : B) * H * qL * D, kn = size_t(varlen ? 1 : B) * Hkv * cap * D;
  // Rows not 16-byte aligned: q, k, v and o one element off; D 256's Hopper
  // launch (whose K and V maps need 16-byte aligned starts, as the op's
  // buffers have) with q and o off alone.
  const bool maps = hopper && D == 256;
  const int mis = c.misalign ? 1 : 0, kmis = maps ? 0 : mis;
  Arr<T> q(qn + mis), k(kn + kmis), v(kn + kmis), o(qn + mis);
  q.random(); k.random(); v.random(); o.poison();
  if (c.ramp > 0) {
    for (size_t i = 0; i < kn; ++i) k.p[kmis + i] = cvt<T>(back(k.p[kmis + i]) * (1 + c.ramp * double((i / D) % cap)));
  }
  T *qp = q.p + mis, *kp = k.p + kmis, *vp = v.p + kmis, *op = o.p + mis;
  // Strides (batch, head, row) in elements.
  auto strides = [&](int heads, int rows, u64 s[3]) {
    if (varlen) { s[0] = 0; s[1] = D; s[2] = u64(heads) * D; }
    else if (c.seq_major) { s[0] = u64(rows) * heads * D; s[1] = D; s[2] = u64(heads) * D; }
    else { s[0] = u64(heads) * rows * D; s[1] = u64(rows) * D; s[2] = D; }
  };
  u64 qs[3], ks[3];
  strides(H, qL, qs);
  strides(Hkv, cap, ks);
  AttnParams p{};
  p.B = B; p.H = H; p.D = D; p.qL = qL; p.kL = kL; p.gqa_factor = H / Hkv;
  p.scale = float(1.0 / std::sqrt(double(D)));
  p.softcapping = c.softcap > 0 ? c.softcap : 1.0f;
  p.qL_off = c.q_off; p.window = c.window;
  p.Q_stride_b = qs[0]; p.Q_stride_h = qs[1]; p.Q_stride_l = qs[2];
  p.O_stride_b = qs[0]; p.O_stride_h = qs[1]; p.O_stride_l = qs[2];
  p.K_stride_b = ks[0]; p.K_stride_h = ks[1]; p.K_stride_l = ks[2];
  p.V_stride_b = ks[0]; p.V_stride_h = ks[1]; p.V_stride_l = ks[2];

  // Masks: a causal window pattern of 0 and -inf (so that blk meets tiles of
  // every class), random finite values in every other band of 32 rows; a
  // bool mask of 1 in 3 hidden.
  std::uniform_real_distribution<double> ud(0, 1);
  const size_t mn = c.mask == PER_HEAD ? size_t(B) * H * qL * kL : size_t(qL) * kL;
  std::vector<double> mval(c.mask == NONE ? 0 : mn);
  for (size_t i = 0; i < mval.size(); ++i) {
    const int row = int((i / kL) % qL), col = int(i % kL);
    if (c.mask == BOOL) { mval[i] = ud(gen) < 1.0 / 3 ? 0 : 1; continue; }
    const bool hidden = col > row + c.q_off + 3 || row + c.q_off - col >= 80;
    mval[i] = hidden ? -INFINITY : (row / 32) % 2 == 1 ? std::floor(ud(gen) * 8) / 4 - 1 : 0.0;
  }
  Arr<T> madd(c.mask == SHARED || c.mask == PER_HEAD ? mn : 1);
  Arr<bool> mbool(c.mask == BOOL ? mn : 1);
  for (size_t i = 0; i < mval.size(); ++i) {
    if (c.mask == BOOL) mbool.p[i] = mval[i] != 0; else madd.p[i] = cvt<T>(mval[i]);
    mval[i] = c.mask == BOOL ? mval[i] : back(madd.p[i]);
  }
  AttnMaskParams mp{};
  if (c.mask == PER_HEAD) { mp.M_stride_b = u64(H) * qL * kL; mp.M_stride_h = u64(qL) * kL; mp.M_stride_q = kL; }
  else { mp.M_stride_b = 0; mp.M_stride_h = 0; mp.M_stride_q = kL; }
  int bqb, bkb;
  blk_tile(c, bqb, bkb);
  const int nqb = int(cdiv(qL, bqb)), nkb = int(cdiv(kL, bkb));
  std::vector<char> blk(size_t(nqb) * nkb, 1);
  int classes[3] = {0, 0, 0};
  if (c.blk) {
    for (int qt = 0; qt < nqb; ++qt)
      for (int kt = 0; kt < nkb; ++kt) {
        char res = 1;
        if ((kt + 1) * bkb <= kL) {
          double lo = INFINITY, hi = -INFINITY;
          for (int r = qt * bqb; r < std::min(qL, (qt + 1) * bqb); ++r)
            for (int col = kt * bkb; col < (kt + 1) * bkb; ++col) { lo = std::min(lo, mval[size_t(r) * kL + col]); hi = std::max(hi, mval[size_t(r) * kL + col]); }
          res = hi <= -1e30 ? 0 : lo == 0 && hi == 0 ? 2 : 1;
        }
        blk[size_t(qt) * nkb + kt] = res;
        classes[int(res)]++;
      }
  }

  const int rows_grid = varlen ? qL : qL;
  const CudaTile tl = cuda_tile(D, hopper);
  // D 256's Hopper launch's K and V maps (the op's kvMap): rows of
  // K_stride_l elements, boxes of 64 columns x bk rows, 128-byte swizzle; q
  // elsewhere.
  const SimTensorMap kmap{reinterpret_cast<const unsigned char*>(kp), 2, {ks[2], kn / ks[2]}, ks[2] * 2, {64, tl.bk}, 128};
  const SimTensorMap vmap{reinterpret_cast<const unsigned char*>(vp), 2, {ks[2], kn / ks[2]}, ks[2] * 2, {64, tl.bk}, 128};
  const void* km = maps ? static_cast<const void*>(&kmap) : qp;
  const void* vm = maps ? static_cast<const void*>(&vmap) : qp;
  sim_launch({cdiv(rows_grid, tl.bq), u32(H), u32(B)}, {tl.threads, 1, 1}, tl.smem, [&] {
    if (c.mask == BOOL) boolmask<T>(D, c.llama)(qp, kp, vp, op, &p, &mp, mbool.p, blk.data(), c.cuq.data(), c.cuk.data(), km, vm);
    else additive<T>(D, c.llama)(qp, kp, vp, op, &p, &mp, madd.p, blk.data(), c.cuq.data(), c.cuk.data(), km, vm);
  });

  // Reference.
  double vmax = 0, worst = 0;
  for (size_t i = 0; i < kn; ++i) vmax = std::max(vmax, std::fabs(back(vp[i])));
  auto at = [&](int b, int h, int r, int heads, int rows) -> size_t {
    if (varlen) return (size_t(r) * heads + h) * D;
    return c.seq_major ? ((size_t(b) * rows + r) * heads + h) * D : ((size_t(b) * heads + h) * rows + r) * D;
  };
  std::vector<double> sc(kL);
  size_t checked = 0;
  for (int b = 0; b < B; ++b) {
    const int q0 = varlen ? int(c.cuq[b]) : 0, qn_ = varlen ? int(c.cuq[b + 1]) - q0 : qL;
    const int k0 = varlen ? int(c.cuk[b]) : 0, kn_ = varlen ? int(c.cuk[b + 1]) - k0 : kL;
    const int off = varlen ? kn_ - qn_ : c.q_off;
    for (int h = 0; h < H; ++h) {
      const int kh = h / (H / Hkv);
      for (int i = 0; i < qn_; ++i) {
        const int pos = off + i;
        double mx = -INFINITY;
        for (int j = 0; j < kn_; ++j) {
          sc[j] = -INFINITY;
          if (MLXN_FC_301 && j > pos) continue;
          if (c.window > 0 && pos - j >= c.window) continue;
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += back(qp[at(b, h, q0 + i, H, qL) + d]) * back(kp[at(b, kh, k0 + j, Hkv, cap) + d]);
          double x = dot * double(p.scale);
          if (c.softcap > 0) x = c.softcap * std::tanh(x / c.softcap);
          if (c.mask != NONE) {
            const double m = mval[c.mask == PER_HEAD ? ((size_t(b) * H + h) * qL + i) * kL + j : size_t(i) * kL + j];
            if (c.mask == BOOL) { if (m == 0) continue; } else x += m;
          }
          sc[j] = x;
          mx = std::max(mx, x);
        }
        double sum = 0;
        for (int j = 0; j < kn_; ++j) { sc[j] = std::isinf(sc[j]) ? 0 : std::exp(sc[j] - mx); sum += sc[j]; }
        for (int d = 0; d < D; ++d) {
          double want = 0;
          for (int j = 0; j < kn_; ++j) if (sc[j] != 0) want += sc[j] / sum * back(vp[at(b, kh, k0 + j, Hkv, cap) + d]);
          const double got = back(op[at(b, h, q0 + i, H, qL) + d]);
          const double e = std::fabs(got - want) / vmax;
          if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
          checked++;
        }
      }
    }
  }
  const double tol = tol_of<T>();
  const bool ok = worst <= tol && checked > 0;
  if (!ok) failures++;
  std::string extra = c.blk ? " blk classes " + std::to_string(classes[0]) + "/" + std::to_string(classes[1]) + "/" + std::to_string(classes[2]) : "";
  std::printf("%s %-4s %-70s err %.3g (tol %.0e)%s\n", ok ? "ok  " : "FAIL", sizeof(T) == 2 && std::is_same_v<T, __half> ? "f16" : "bf16",
              (c.what + (hopper ? " [hopper launch]" : "")).c_str(), worst, tol, extra.c_str());
}

template <class T>
void run_mask_fill(int qL, int kL, int q_off, int window, bool causal, bool misalign) {
  const int mis = misalign ? 1 : 0;
  Arr<T> m(size_t(qL) * kL + mis);
  m.poison();
  FlashAttnPrefillMaskParams p{u32(kL), u32(q_off), window > 0 ? window : -1, causal ? 1u : 0u};
  const u32 threads = std::min(256u, std::max(32u, u32(1) << u32(std::ceil(std::log2(std::max(kL, 1))))));
  sim_launch({u32(qL), 1, 1}, {threads, 1, 1}, 0, [&] {
    if constexpr (std::is_same_v<T, __half>) flash_attn_prefill_mask_fill_f16(m.p + mis, &p);
    else flash_attn_prefill_mask_fill_bf16(m.p + mis, &p);
  });
  int bad = 0;
  for (int r = 0; r < qL; ++r)
    for (int k = 0; k < kL; ++k) {
      const long a = long(r) + q_off;
      const bool hidden = (causal && k > a) || (window > 0 && a - k >= window);
      const double got = back(m.p[mis + size_t(r) * kL + k]);
      if (hidden ? !(std::isinf(got) && got < 0) : got != 0) bad++;
    }
  if (bad) failures++;
  std::printf("%s mask_fill qL=%d kL=%d off=%d window=%d causal=%d%s: %d wrong\n", bad ? "FAIL" : "ok  ", qL, kL, q_off, window,
              int(causal), misalign ? " (unaligned)" : "", bad);
}

// The classifier at the build's (MLXN_FC_400, MLXN_FC_401) tile, on a causal window mask with finite bands.
template <class T>
void run_blk(int qL, int kL) {
  const int bq = MLXN_FC_400, bk = MLXN_FC_401;
  Arr<T> m(size_t(qL) * kL);
  std::uniform_real_distribution<double> ud(0, 1);
  for (int r = 0; r < qL; ++r)
    for (int k = 0; k < kL; ++k) {
      const bool hidden = k > r + 5 || r - k >= 70;
      m.p[size_t(r) * kL + k] = cvt<T>(hidden ? -INFINITY : (r / 16) % 3 == 1 && k % 37 == 3 ? -0.5 : 0.0);
    }
  const int nq = int(cdiv(qL, bq)), nk = int(cdiv(kL, bk));
  std::vector<char> blk(size_t(nq) * nk, 99);
  FlashAttnPrefillBlkParams p{qL, kL, kL, 0};
  sim_launch({u32(nq * nk), 1, 1}, {32, 1, 1}, 0, [&] {
    if constexpr (std::is_same_v<T, __half>) flash_attn_prefill_blk_f16(m.p, blk.data(), &p);
    else flash_attn_prefill_blk_bf16(m.p, blk.data(), &p);
  });
  int bad = 0, classes[3] = {0, 0, 0};
  for (int qt = 0; qt < nq; ++qt)
    for (int kt = 0; kt < nk; ++kt) {
      char want = 1;
      if ((kt + 1) * bk <= kL) {
        double lo = INFINITY, hi = -INFINITY;
        for (int r = qt * bq; r < std::min(qL, (qt + 1) * bq); ++r)
          for (int k = kt * bk; k < (kt + 1) * bk; ++k) { lo = std::min(lo, back(m.p[size_t(r) * kL + k])); hi = std::max(hi, back(m.p[size_t(r) * kL + k])); }
        want = hi <= -1e30 ? 0 : lo == 0 && hi == 0 ? 2 : 1;
      }
      if (blk[size_t(qt) * nk + kt] != want) bad++;
      classes[int(want)]++;
    }
  if (bad) failures++;
  std::printf("%s blk (%d, %d) qL=%d kL=%d: %d wrong (classes %d/%d/%d)\n", bad ? "FAIL" : "ok  ", bq, bk, qL, kL, bad, classes[0],
              classes[1], classes[2]);
}

template <class T> void both(const Case& c) { run<T>(c); }

int main(int argc, char** argv) {
  const bool big = argc > 1 && std::string(argv[1]) == "big";
  if (argc > 1 && !big) only = argv[1];
  using bf = __nv_bfloat16;
  if (!MLXN_FC_300 && !MLXN_FC_301 && !MLXN_FC_304 && !MLXN_FC_305) {
    for (int d : {64, 128, 256, 512}) {
      run<bf>({"d" + std::to_string(d) + " B=2 H=4/2 qL=37 kL=45", 2, 4, 2, d, 37, 45});
      run<__half>({"d" + std::to_string(d) + " H=2/1 qL=70 kL=130 token-major", 1, 2, 1, d, 70, 130, 0, 0, 0, true});
    }
    run<bf>({"d512 tiles entry qL=20 kL=41", 1, 2, 2, 512, 20, 41, 0, 0, 0, false, 0, NONE, false, false});
    run<bf>({"d128 one key", 1, 1, 1, 128, 1, 1});
    run<bf>({"d64 one query, 70 keys, offset 69", 1, 2, 1, 64, 1, 70, 0, 69});
    run<bf>({"d128 KV slot of 200, 130 keys, offset 60, window 50", 2, 8, 1, 128, 70, 130, 200, 60, 50});
    run<__half>({"d256 window 1 (itself)", 1, 2, 2, 256, 65, 65, 0, 0, 1});
    run<bf>({"d64 rows not 16-byte aligned", 1, 2, 1, 64, 40, 70, 0, 0, 0, false, 0, NONE, false, true, true});
    run<__half>({"d128 rows not 16-byte aligned", 1, 2, 1, 128, 40, 140, 0, 0, 0, false, 0, NONE, false, true, true});
    run<bf>({"d256 rows not 16-byte aligned", 1, 2, 1, 256, 70, 100, 0, 0, 0, true, 0, NONE, false, true, true});
    run<bf>({"d256 GQA 8, window 64 past the tile", 1, 8, 1, 256, 66, 200, 0, 134, 64});
    run<bf>({"d128 qL=150 kL=400 (four key tiles of the Hopper launch)", 1, 2, 1, 128, 150, 400});
    {
      Case c{"d128 keys growing along the sequence, qL=150 kL=400", 1, 2, 1, 128, 150, 400};
      c.ramp = 0.05;
      run<bf>(c);
      Case d{"d256 keys growing along the sequence, qL=70 kL=300 (f16)", 1, 2, 1, 256, 70, 300};
      d.ramp = 0.05;
      run<__half>(d);
    }
    if (big) run<bf>({"d128 qL=kL=512", 1, 2, 1, 128, 512, 512});
    run_mask_fill<bf>(37, 45, 0, 0, true, false);
    run_mask_fill<__half>(20, 64, 30, 17, true, false);
    run_mask_fill<bf>(9, 300, 5, 100, false, true);
    run_blk<bf>(100, 200);
    run_blk<__half>(64, 48);
  }
  if (MLXN_FC_301 && !MLXN_FC_300 && !MLXN_FC_305) {
    const float cap = MLXN_FC_304 ? 20.0f : 0.0f;
    for (int d : {64, 128, 256, 512}) {
      run<bf>({"causal d" + std::to_string(d) + " qL=kL=70", 1, 2, 1, d, 70, 70, 0, 0, 0, false, cap});
      run<__half>({"causal d" + std::to_string(d) + " qL=33 kL=97 offset 64", 2, 4, 2, d, 33, 97, 0, 64, 0, true, cap});
    }
    run<bf>({"causal d128 window 40, qL=kL=200", 1, 2, 1, 128, 200, 200, 0, 0, 40, false, cap});
    run<bf>({"causal d256 window 17, qL=70 kL=150 offset 80", 1, 4, 4, 256, 70, 150, 160, 80, 17, false, cap});
    run<bf>({"causal d512 tiles entry, window 9", 1, 2, 1, 512, 30, 30, 0, 0, 9, false, cap, NONE, false, false});
    run<bf>({"causal d64 one key", 1, 1, 1, 64, 1, 1, 0, 0, 0, false, cap});
    run<__half>({"causal d128 qL=kL=300", 1, 2, 1, 128, 300, 300, 0, 0, 0, false, cap});
    if (big) run<bf>({"causal d256 qL=kL=300", 1, 2, 1, 256, 300, 300, 0, 0, 0, false, cap});
  }
  if (MLXN_FC_300) {
    for (int d : {64, 128, 256, 512}) {
      run<bf>({"additive shared d" + std::to_string(d) + " qL=45 kL=80", 2, 2, 1, d, 45, 80, 0, 0, 0, false, 0, SHARED});
      run<__half>({"per head d" + std::to_string(d) + " qL=40 kL=70", 2, 2, 2, d, 40, 70, 0, 0, 0, true, 0, PER_HEAD});
      run<bf>({"bool d" + std::to_string(d) + " qL=33 kL=65", 1, 2, 1, d, 33, 65, 0, 0, 0, false, 0, BOOL});
      run<bf>({"blk d" + std::to_string(d) + " qL=100 kL=200", 1, 2, 1, d, 100, 200, 0, 0, 0, false, 0, SHARED, true});
    }
    run<__half>({"blk d512 tiles entry qL=30 kL=120", 1, 2, 1, 512, 30, 120, 0, 0, 0, false, 0, SHARED, true, false});
    run_blk<bf>(40, 200);
  }
  if (MLXN_FC_305) {
    for (int d : {64, 128, 256, 512}) {
      // Sequences: 5 queries over 5 keys, 1 query continuing 60 earlier keys, 70 over 70, none.
      Case c{"varlen d" + std::to_string(d) + " 4 sequences", 0, 4, 2, d, 76, 196};
      c.cuq = {0, 5, 6, 76, 76};
      c.cuk = {0, 5, 66, 136, 196};
      if (d == 128) c.window = 30;
      run<bf>(c);
      Case e = c;
      e.what += " (f16)";
      run<__half>(e);
    }
  }
  std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
  return failures != 0;
}
