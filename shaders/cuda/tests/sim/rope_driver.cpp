// rope, rope_neox, rope_multi and fused_head_norm_rope's CUDA kernels
// (shaders/cuda/{rope,rope_multi,fused_head_norm_rope}.cu) on the CPU
// simulation (sim_runtime.h), against float64 references written here, at
// the launches ts/ops/rope.ts, rope_multi.ts and fused_head_norm_rope.ts plan
// (written out again below): the one-pair (one-row) entries, rope's `_rows`
// entries (4 pairs of 8 rows a thread, an angle kept while the position
// repeats) and the `_heads` entries (4 pairs of 8 heads a thread, a block's
// angles formed once, the norm reduced by shuffles), partial rotary ending inside a thread's four
// pairs, more heads than a thread holds, half rows of no whole vector, in
// place, frequency factors, q / k / v in one dispatch with v from k or in
// place. run.sh builds and runs it (`rope`).
#include "sim_kernels.h"  // build.py's output
#include "sim_util.h"
#include <algorithm>
#include <cstdio>
#include <string>

template <class T>
void check(const std::string& what, const T* got, const std::vector<double>& want, double tol) {
  double scale = 0, worst = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = back(got[i]);
    const double e = g == want[i] ? 0 : std::fabs(g - want[i]) / scale;
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  const bool ok = worst <= tol;
  if (!ok) failures++;
  std::printf("%s %-84s err %.3g (tol %.0e)\n", ok ? "ok  " : "FAIL", what.c_str(), worst, tol);
}

// Errors are scaled by the largest |want| (an angle formed in f32 errs by
// its size times f32's precision, whatever the element's size): f32's
// tolerance covers angles up to 100 radians.
template <class T> double tol_rope() { return sizeof(T) == 4 ? 1e-5 : tol_of<T>(); }

// NeoX pairs (x[i], x[i + half]) of a row turned by angle(i) for i < turn, the others as they are.
template <class A>
void neox_ref(const double* x, double* y, u32 head_dim, u32 turn, A angle) {
  const u32 half = head_dim / 2;
  for (u32 i = 0; i < half; ++i) {
    const double a = x[i], b = x[i + half];
    if (i < turn) {
      const double t = angle(i);
      y[i] = a * std::cos(t) - b * std::sin(t);
      y[i + half] = a * std::sin(t) + b * std::cos(t);
    } else {
      y[i] = a;
      y[i + half] = b;
    }
  }
}

struct Launch { SimDim grid, block; };

// ts/ops/rope.ts ropeLaunch (CUDA: rows on x) and ropeHeadsCudaLaunch.
Launch rope_launch(u32 pairs, u32 rows) {
  const u32 tx = std::min(64u, pairs), ty = rows % 4 == 0 ? 4 : rows % 2 == 0 ? 2 : 1;
  return {{rows / ty, cdiv(pairs, tx), 1}, {tx, ty, 1}};
}
Launch heads_launch(u32 half_dim, u32 seq, u32 heads) {
  const u32 units = cdiv(half_dim, 4), tx = std::min(64u, units);
  return {{seq, cdiv(units, tx), 1}, {tx, std::min(cdiv(heads, 8), 1024 / tx), 1}};
}
// ts/ops/rope_multi.ts ropeMultiLaunch (CUDA: rows on x).
Launch rope_multi_launch(u32 half_dim, u32 rows) {
  const u32 tx = std::min(half_dim, 256u), ty = std::min(rows, 256 / tx);
  return {{cdiv(rows, ty), cdiv(half_dim, tx), 1}, {tx, ty, 1}};
}
// ts/ops/fused_head_norm_rope.ts: a block a row, or fusedHeadNormRopeHeadsLaunch.
u32 next_pow2(u32 v) { u32 p = 1; while (p < v) p *= 2; return p; }
Launch fused_row_launch(u32 head_dim, u32 rows) { return {{rows, 1, 1}, {std::min(256u, next_pow2(head_dim)), 1, 1}}; }
Launch fused_heads_launch(u32 head_dim, u32 seq, u32 heads, u32 groups) {
  const u32 tx = head_dim / 8, warp = 32 / tx;
  const u32 ty = std::min(cdiv(cdiv(heads, 8), warp) * warp, 256 / tx);
  u32 tz = 2;
  while (tz > 1 && (seq % tz != 0 || tx * ty * tz > 256)) tz /= 2;
  return {{seq / tz, 1, groups}, {tx, ty, tz}};
}

std::vector<u32> positions(u32 seq) {
  std::vector<u32> p(seq);
  for (u32 t = 0; t < seq; ++t) p[t] = (t * 37u + 5u) % 97u;
  return p;
}

// ---- rope (normal pairing) ----

// ts/ops/rope.ts ropeRowsCudaLaunch (rows a multiple of 8).
Launch rows_launch(u32 head_dim, u32 rows) {
  const u32 units = cdiv(cdiv(head_dim, 4), 2), tx = std::min(64u, units), groups = rows / 8;
  u32 ty = 1;
  while (ty * 2 * tx <= 256 && groups % (ty * 2) == 0) ty *= 2;
  return {{groups / ty, cdiv(units, tx), 1}, {tx, ty, 1}};
}

// rows [rows, hd], positions repeating `repeat` rows each (a token's heads).
template <class T, class K>
void run_normal(const char* name, K kernel, bool rows_form, u32 rows, u32 hd, u32 repeat, bool in_place) {
  const u32 n = rows * hd;
  Arr<T> x(n), y(n);
  x.random(-2, 2);
  std::vector<double> want(n);
  std::vector<u32> pos(rows);
  const auto runs = positions(cdiv(rows, repeat));
  for (u32 r = 0; r < rows; ++r) pos[r] = runs[r / repeat];
  const double theta = 1e4;
  for (u32 r = 0; r < rows; ++r)
    for (u32 i = 0; i < hd / 2; ++i) {
      const double a = x.at(r * hd + 2 * i), b = x.at(r * hd + 2 * i + 1);
      const double t = double(float(pos[r])) / std::pow(theta, 2.0 * i / hd);
      want[r * hd + 2 * i] = a * std::cos(t) - b * std::sin(t);
      want[r * hd + 2 * i + 1] = a * std::sin(t) + b * std::cos(t);
    }
  T* out = in_place ? x.p : y.p;
  if (!in_place) y.poison();
  const RopeParams p{float(theta), float(hd), 0.0f, 0.0f};
  const Launch l = rows_form ? rows_launch(hd, rows) : rope_launch(hd / 2, rows);
  sim_launch(l.grid, l.block, 0, [&] { kernel(x.p, out, &p, pos.data()); });
  check(std::string(name) + " [" + std::to_string(rows) + ", " + std::to_string(hd) + "] a position every " + std::to_string(repeat) +
          " rows" + (in_place ? ", in place" : ""),
        out, want, tol_rope<T>());
}

// ---- rope_neox ----

template <class T, class K>
void run_neox(const char* name, K kernel, bool heads, u32 seq, u32 nh, u32 hd, u32 rope_dim, bool ff, bool in_place) {
  const u32 rows = seq * nh, n = rows * hd;
  Arr<T> x(n), y(n);
  x.random(-2, 2);
  std::vector<double> xd(n), want(n);
  for (u32 i = 0; i < n; ++i) xd[i] = x.at(i);
  Arr<float> f(hd / 2);
  for (u32 i = 0; i < hd / 2; ++i) f.p[i] = ff ? (i % 3 == 2 ? 1e30f : float(1 + i % 4)) : 1.0f;
  const auto pos = positions(seq);
  const double theta = 1e4;
  for (u32 r = 0; r < rows; ++r)
    neox_ref(&xd[size_t(r) * hd], &want[size_t(r) * hd], hd, rope_dim / 2, [&](u32 i) {
      return double(float(pos[r / nh])) / std::pow(theta, 2.0 * i / hd) / double(f.p[i]);
    });
  T* out = in_place ? x.p : y.p;
  if (!in_place) y.poison();
  const RopeParams p{float(theta), float(hd), float(rope_dim), 0};
  const RopeNeoxParams np{nh, ff ? 1u : 0u};
  const Launch l = heads ? heads_launch(hd / 2, seq, nh) : rope_launch(rope_dim / 2, rows);
  sim_launch(l.grid, l.block, 0, [&] { kernel(x.p, out, &p, pos.data(), &np, f.p); });
  check(std::string(name) + " [" + std::to_string(seq) + ", " + std::to_string(nh) + ", " + std::to_string(hd) + "] rot " +
          std::to_string(rope_dim) + (ff ? ", factors" : "") + (in_place ? ", in place" : ""),
        out, want, tol_rope<T>());
}

// bf16's entries take no frequency factors.
template <class K> auto no_ff(K k) {
  return [k](const __nv_bfloat16* x, __nv_bfloat16* y, const RopeParams* p, const u32* pos, const RopeNeoxParams* np, const float*) {
    k(x, y, p, pos, np);
  };
}

// ---- rope_multi (IMROPE) ----

u32 imrope_axis(u32 sector, const u32 (&s)[4]) {
  const u32 k = sector % 3;
  return sector < 3 * s[k] ? k : 3;
}

template <class T, class K>
void run_multi(const char* name, K kernel, bool heads, u32 seq, u32 nh, u32 hd, u32 rope_dim, const u32 (&s)[4]) {
  const u32 rows = seq * nh, n = rows * hd;
  Arr<T> x(n), y(n);
  x.random(-2, 2);
  y.poison();
  std::vector<double> xd(n), want(n);
  for (u32 i = 0; i < n; ++i) xd[i] = x.at(i);
  std::vector<int> pos(4 * seq);
  for (u32 a = 0; a < 4; ++a)
    for (u32 t = 0; t < seq; ++t) pos[a * seq + t] = int((t * 13u + a * 29u + 3u) % 89u);
  const double base = 1e4;
  const u32 sum = s[0] + s[1] + s[2] + s[3];
  for (u32 r = 0; r < rows; ++r)
    neox_ref(&xd[size_t(r) * hd], &want[size_t(r) * hd], hd, rope_dim / 2, [&](u32 i) {
      const u32 axis = imrope_axis(i % std::max(sum, 1u), s);
      return double(pos[axis * seq + r / nh]) / std::pow(base, 2.0 * i / rope_dim);
    });
  const RopeMultiParams p{float(base), float(hd), float(rope_dim), 0};
  const RopeMultiRopeParams rp{nh, 40u, seq, 0};
  const RopeMultiSections ss{s[0], s[1], s[2], s[3]};
  const Launch l = heads ? heads_launch(hd / 2, seq, nh) : rope_multi_launch(hd / 2, rows);
  sim_launch(l.grid, l.block, 0, [&] { kernel(x.p, y.p, &p, pos.data(), &rp, &ss); });
  check(std::string(name) + " imrope [" + std::to_string(seq) + ", " + std::to_string(nh) + ", " + std::to_string(hd) + "] rot " +
          std::to_string(rope_dim),
        y.p, want, tol_rope<T>());
}

// ---- fused_head_norm_rope ----

// Rows of x normalized (and weighted), then NeoX-turned over half_rope pairs.
void norm_rope_ref(const double* x, double* y, const double* w, u32 hd, u32 half_rope, u32 pos, double theta) {
  double ss = 0;
  for (u32 i = 0; i < hd; ++i) ss += x[i] * x[i];
  const double inv = 1 / std::sqrt(ss / hd + 1e-6);
  std::vector<double> nx(hd);
  for (u32 i = 0; i < hd; ++i) nx[i] = x[i] * inv * (w ? w[i] : 1.0);
  neox_ref(nx.data(), y, hd, half_rope, [&](u32 i) { return double(float(pos)) / std::pow(theta, 2.0 * i / hd); });
}

void run_fused_f32(bool heads, u32 seq, u32 nh, u32 hd, u32 half_rope) {
  const u32 rows = seq * nh, n = rows * hd;
  Arr<float> x(n), y(n), w(hd);
  x.random(-2, 2);
  w.random(0.5, 1.5);
  y.poison();
  std::vector<double> xd(n), wd(hd), want(n);
  for (u32 i = 0; i < n; ++i) xd[i] = x.at(i);
  for (u32 i = 0; i < hd; ++i) wd[i] = w.at(i);
  const auto pos = positions(seq);
  for (u32 r = 0; r < rows; ++r) norm_rope_ref(&xd[size_t(r) * hd], &want[size_t(r) * hd], wd.data(), hd, half_rope, pos[r / nh], 1e4);
  FusedHeadNormRopeF32Params p{};
  p.head_dim = hd; p.n_heads = nh; p.half_rope_dim = half_rope; p.eps = 1e-6f; p.has_weight = 1; p.theta = 1e4f; p.seq_len = seq;
  const Launch l = heads ? fused_heads_launch(hd, seq, nh, 1) : fused_row_launch(hd, rows);
  sim_launch(l.grid, l.block, 16 * cdiv(l.block.x, 32), [&] {
    if (heads) fused_head_norm_rope_f32_heads(x.p, y.p, w.p, &p, pos.data(), w.p, nullptr, y.p);
    else fused_head_norm_rope_f32(x.p, y.p, w.p, &p, pos.data(), w.p, nullptr, y.p);
  });
  check(std::string("fused_head_norm_rope_f32") + (heads ? "_heads" : "") + " [" + std::to_string(seq) + ", " + std::to_string(nh) +
          ", " + std::to_string(hd) + "] half rope " + std::to_string(half_rope),
        y.p, want, tol_rope<float>());
}

// q, k and v of one layer, in place; v_mode 1 (v's rows normalized alone) or 2 (v = k normalized, before k's norm).
void run_qkv(bool heads, u32 seq, u32 nh, u32 nkv, u32 hd, u32 half_rope, u32 v_mode) {
  const u32 nq = seq * nh * hd, nk = seq * nkv * hd;
  Arr<float> q(nq), k(nk), v(nk), qw(hd), kw(hd);
  q.random(-2, 2); k.random(-2, 2); v.random(-2, 2); qw.random(0.5, 1.5); kw.random(0.5, 1.5);
  std::vector<double> qd(nq), kd(nk), vd(nk), qwd(hd), kwd(hd), wq(nq), wk(nk), wv(nk);
  for (u32 i = 0; i < nq; ++i) qd[i] = q.at(i);
  for (u32 i = 0; i < nk; ++i) { kd[i] = k.at(i); vd[i] = v.at(i); }
  for (u32 i = 0; i < hd; ++i) { qwd[i] = qw.at(i); kwd[i] = kw.at(i); }
  const auto pos = positions(seq);
  for (u32 r = 0; r < seq * nh; ++r) norm_rope_ref(&qd[size_t(r) * hd], &wq[size_t(r) * hd], qwd.data(), hd, half_rope, pos[r / nh], 1e4);
  for (u32 r = 0; r < seq * nkv; ++r) {
    norm_rope_ref(&kd[size_t(r) * hd], &wk[size_t(r) * hd], kwd.data(), hd, half_rope, pos[r / nkv], 1e4);
    norm_rope_ref(v_mode == 2 ? &kd[size_t(r) * hd] : &vd[size_t(r) * hd], &wv[size_t(r) * hd], nullptr, hd, 0, 0, 1e4);
  }
  FusedHeadNormRopeQkvF32Params p{hd, nh, nkv, half_rope, 1e-6f, 1e4f, 0u, v_mode, seq};
  const u32 v_rows = v_mode == 1 ? nkv : 0;
  const Launch l = heads ? fused_heads_launch(hd, seq, std::max(nh, nkv), v_rows > 0 ? 3 : 2)
                         : fused_row_launch(hd, seq * (nh + nkv + v_rows));
  sim_launch(l.grid, l.block, 16 * cdiv(l.block.x, 32), [&] {
    if (heads) fused_head_norm_rope_qkv_f32_heads(q.p, k.p, v.p, &p, pos.data(), qw.p, kw.p, qw.p);
    else fused_head_norm_rope_qkv_f32(q.p, k.p, v.p, &p, pos.data(), qw.p, kw.p, qw.p);
  });
  const std::string tag = std::string(heads ? "_heads" : "") + " [" + std::to_string(seq) + ", " + std::to_string(nh) + " / " +
                          std::to_string(nkv) + ", " + std::to_string(hd) + "] v_mode " + std::to_string(v_mode);
  check("fused_head_norm_rope_qkv_f32" + tag + ": q", q.p, wq, tol_rope<float>());
  check("fused_head_norm_rope_qkv_f32" + tag + ": k", k.p, wk, tol_rope<float>());
  check("fused_head_norm_rope_qkv_f32" + tag + ": v", v.p, wv, tol_rope<float>());
}

int main() {
  // [seq, heads, head dim, rope dim]: Qwen3.6's quarter, 19 heads (8 + 8 + 3) with rotated pairs ending inside a
  // thread's four, half rows of 3 pairs (no vectors), Gemma 4's full rotation.
  const u32 shapes[][4] = {{17, 19, 64, 26}, {16, 9, 12, 10}, {18, 4, 6, 4}, {16, 8, 256, 256}, {3, 16, 256, 64}};
  for (bool heads : {false, true})
    for (const auto& s : shapes) {
      run_neox<float>(heads ? "rope_neox_f32_heads" : "rope_neox_f32", heads ? rope_neox_f32_heads : rope_neox_f32, heads, s[0], s[1], s[2], s[3], true, false);
      run_neox<__nv_bfloat16>(heads ? "rope_neox_bf16_heads" : "rope_neox_bf16", heads ? no_ff(rope_neox_bf16_heads) : no_ff(rope_neox_bf16),
                              heads, s[0], s[1], s[2], s[3], false, true);
      run_neox<__half>(heads ? "rope_neox_f16_heads" : "rope_neox_f16", heads ? rope_neox_f16_heads : rope_neox_f16, heads, s[0], s[1], s[2], s[3], false, false);
    }
  // [rows, head dim, rows a position]: a token's 16 heads; runs of 3 across a thread's 8 rows, rows of 3 chunks (no
  // vectors); 80 threads of chunk pairs (a second block along the rows' chunks); 25 groups of 8 rows; rows of a
  // chunk and a half (a thread's second chunk of one pair).
  const u32 normal[][3] = {{128, 128, 16}, {136, 12, 3}, {256, 640, 1}, {200, 64, 5}, {128, 6, 2}};
  for (bool rows_form : {false, true})
    for (const auto& s : normal) {
      run_normal<float>(rows_form ? "rope_f32_rows" : "rope_f32", rows_form ? rope_f32_rows : rope_f32, rows_form, s[0], s[1], s[2], false);
      run_normal<__nv_bfloat16>(rows_form ? "rope_bf16_rows" : "rope_bf16", rows_form ? rope_bf16_rows : rope_bf16, rows_form, s[0], s[1], s[2], true);
      run_normal<__half>(rows_form ? "rope_f16_rows" : "rope_f16", rows_form ? rope_f16_rows : rope_f16, rows_form, s[0], s[1], s[2], false);
    }
  const u32 qwen[4] = {11, 11, 10, 0}, small[4] = {5, 4, 4, 0};
  for (bool heads : {false, true}) {
    run_multi<__nv_bfloat16>(heads ? "rope_multi_bf16_heads" : "rope_multi_bf16", heads ? rope_multi_bf16_heads : rope_multi_bf16, heads, 16, 16, 256, 64, qwen);
    run_multi<float>(heads ? "rope_multi_f32_heads" : "rope_multi_f32", heads ? rope_multi_f32_heads : rope_multi_f32, heads, 17, 19, 64, 26, small);
  }
  for (bool heads : {false, true}) {
    run_fused_f32(heads, 17, 19, 64, 13);
    run_fused_f32(heads, 16, 9, 128, 30);
    run_fused_f32(heads, 16, 4, 256, 128);
    run_qkv(heads, 17, 19, 2, 128, 30, 2);
    run_qkv(heads, 16, 16, 8, 256, 128, 1);
    run_qkv(heads, 16, 16, 16, 256, 64, 1);  // as many k and v heads as q heads
    run_qkv(heads, 16, 9, 9, 64, 32, 1);     // a warp over 4 rows of threads
  }
  std::printf(failures == 0 ? "all passed\n" : "%d FAILED\n", failures);
  return failures == 0 ? 0 : 1;
}
