// The per-expert (MoE) families' CUDA kernels (shaders/cuda/moe_dispatch.cu,
// quantized_matmul_id.cu, dense_matmul_id.cu, moe_weighted_reduce.cu) on the
// CPU simulation (sim_runtime.h), against float64 references, at the
// launches of their ops (ts/ops/moe_dispatch.ts moeDispatchSortLaunch,
// ts/ops/quantized_matmul_id.ts quantizedIdMvCudaLaunch (the group-column
// path at 4 bits) and
// quantizedIdMmCudaLaunch, ts/ops/dense_matmul_id.ts, ts/ops/moe_weighted_reduce.ts;
// written out again below): the grouping of pairs by expert (ids past the
// experts, empty experts, one expert taking all); the vector engine at k of
// 1, 2 and 4 tiles a block, 4, 6 and 8 bits, gate/up with silu and gelu,
// mlx-native's entry on MLX's layout and on its odd one; the matrix engine
// after the grouping, with partial tiles in both directions; ids past the
// experts (zeros) everywhere; the weighted reduce at both of its launches.
// Error: |got - want| / sum |terms| (for gate/up the first-order bound of
// tests/quantized_matmul_id.test.ts), under the dtype's tolerance. run.sh
// builds and runs it (`run.sh moe`).
#include "sim_kernels.h"  // build.py's output
#include "sim_util.h"
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>

static void report(const std::string& what, double worst, double tol) {
  const bool ok = worst <= tol;
  if (!ok) failures++;
  std::printf("%s %-84s err %.3g (tol %.0e)\n", ok ? "ok  " : "FAIL", what.c_str(), worst, tol);
}

// Expert ids for `pairs` pairs: uniform over E, or one expert, some past the experts where `bad`.
static std::vector<u32> make_ids(u32 pairs, u32 E, int only, bool bad) {
  std::uniform_int_distribution<u32> d(0, E - 1);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<u32> ids(pairs);
  for (u32 p = 0; p < pairs; ++p) ids[p] = only >= 0 ? u32(only) : (bad && u(gen) < 0.1 ? E + 7 + p : d(gen));
  return ids;
}

// The gate activations: 0 silu, 1 gelu (tanh).
static double act_of(double g, u32 activation) {
  return activation == 1 ? 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))) : g / (1 + std::exp(-g));
}

// Adds to s the weighted sum over token t's K expert outputs ye [T, K, H] at d (weights w [T, K]), to a its terms' |.|.
template <class TW, class TY>
static void weighted_sum(const Arr<TW>& w, const Arr<TY>& ye, u32 t, u32 K, u32 H, u32 d, double& s, double& a) {
  for (u32 k = 0; k < K; ++k) {
    const double v = w.at(t * K + k) * ye.at((size_t(t) * K + k) * H + d);
    s += v;
    a += std::fabs(v);
  }
}

// ---- moe_dispatch_sort ----

// The launch of moeDispatchSortLaunch: one block, a multiple of 32 threads up to 1024.
static void sort_pairs(const std::vector<u32>& ids, u32 E, std::vector<u32>& offsets, std::vector<u32>& order) {
  const u32 P = u32(ids.size());
  const u32 threads = std::min(1024u, std::max(32u, cdiv(std::max(P, E + 1), 32) * 32));
  Arr<u32> idb(P), off(E + 2), ord(P);
  std::copy(ids.begin(), ids.end(), idb.p);
  MoeDispatchSortParams p{P, E};
  sim_launch({1, 1, 1}, {threads, 1, 1}, (E + 1 + threads / 32) * 4, [&] { moe_dispatch_sort(idb.p, off.p, ord.p, &p); });
  offsets.assign(off.p, off.p + E + 2);
  order.assign(ord.p, ord.p + P);
}

// The grouping of pairs by expert (sort_pairs), in arrays as the matrix kernels read it.
struct Grouping {
  Arr<u32> off, ord;
  Grouping(const std::vector<u32>& ids, u32 E) : off(E + 2), ord(u32(ids.size())) {
    std::vector<u32> o, r;
    sort_pairs(ids, E, o, r);
    std::copy(o.begin(), o.end(), off.p);
    std::copy(r.begin(), r.end(), ord.p);
  }
};

static void check_sort(const char* name, u32 P, u32 E, int only, bool bad) {
  const std::vector<u32> ids = make_ids(P, E, only, bad);
  std::vector<u32> off, ord;
  sort_pairs(ids, E, off, ord);
  std::vector<u32> want(E + 2, 0);
  for (u32 id : ids) want[std::min(id, E) + 1]++;
  for (u32 b = 1; b <= E + 1; ++b) want[b] += want[b - 1];
  bool ok = off == want;
  for (u32 b = 0; ok && b <= E; ++b) {
    std::vector<u32> got(ord.begin() + off[b], ord.begin() + off[b + 1]), exp;
    for (u32 p = 0; p < P; ++p) if (std::min(ids[p], E) == b) exp.push_back(p);
    std::sort(got.begin(), got.end());
    ok = got == exp;
  }
  report(std::string("moe_dispatch_sort ") + name, ok ? 0 : INFINITY, 0);
}

// ---- mlx-native's glue kernels (moe_dispatch) ----

static void check_glue() {
  const u32 n = 300, I = 37, K = 3, T = 2, H = 70;
  // fused_gelu_mul_bf16: one thread per element, ceil(n / 256) blocks of 256.
  Arr<__nv_bfloat16> g(n), u(n), o(n);
  g.random(-6, 6);
  u.random(-2, 2);
  o.poison();
  FusedGeluMulParams fp{n};
  sim_launch({cdiv(n, 256), 1, 1}, {256, 1, 1}, 0, [&] { fused_gelu_mul_bf16(g.p, u.p, o.p, &fp); });
  double worst = 0;
  for (u32 i = 0; i < n; ++i) {
    const double want = act_of(g.at(i), 1) * u.at(i);
    worst = std::max(worst, std::fabs(o.at(i) - want) / std::max(std::fabs(want), 1e-3));
  }
  report("fused_gelu_mul_bf16 n=300", worst, 1e-2);
  // moe_swiglu_batch: grid (ceil(I / tg), K) of tg = min(256, I), gelu(gate) * up per slot.
  Arr<float> gu(size_t(K) * 2 * I), ob(size_t(K) * I);
  gu.random(-4, 4);
  ob.poison();
  sim_launch({1, K, 1}, {I, 1, 1}, 0, [&] { moe_swiglu_batch(gu.p, ob.p, &I, &K); });
  worst = 0;
  for (u32 k = 0; k < K; ++k)
    for (u32 i = 0; i < I; ++i) {
      const double want = act_of(gu.at(k * 2 * I + i), 1) * gu.at(k * 2 * I + I + i);
      worst = std::max(worst, std::fabs(ob.at(k * I + i) - want) / std::max(std::fabs(want), 1e-3));
    }
  report("moe_swiglu_batch I=37 top_k=3", worst, 1e-5);
  // moe_swiglu_seq_bf16: grid (1, K, T).
  Arr<__nv_bfloat16> gs(size_t(T) * K * 2 * I), os(size_t(T) * K * I);
  gs.random(-4, 4);
  os.poison();
  MoeSwigluSeqParams sp{I, K, T};
  sim_launch({1, K, T}, {I, 1, 1}, 0, [&] { moe_swiglu_seq_bf16(gs.p, os.p, &sp); });
  worst = 0;
  for (u32 r = 0; r < T * K; ++r)
    for (u32 i = 0; i < I; ++i) {
      const double want = act_of(gs.at(size_t(r) * 2 * I + i), 1) * gs.at(size_t(r) * 2 * I + I + i);
      worst = std::max(worst, std::fabs(os.at(size_t(r) * I + i) - want) / std::max(std::fabs(want), 1e-3));
    }
  report("moe_swiglu_seq_bf16 T=2 top_k=3 I=37", worst, 1e-2);
  // moe_weighted_sum_seq_bf16_input and _bf16: grid (ceil(H / tg), T).
  Arr<__nv_bfloat16> ye(size_t(T) * K * H), yo(size_t(T) * H);
  Arr<float> w(size_t(T) * K), fo(size_t(T) * H);
  ye.random(-2, 2);
  w.random(0, 1);
  yo.poison();
  fo.poison();
  MoeWeightedSumSeqParams wp{H, K, T};
  sim_launch({1, T, 1}, {H, 1, 1}, 0, [&] { moe_weighted_sum_seq_bf16_input(ye.p, w.p, fo.p, &wp); });
  sim_launch({1, T, 1}, {H, 1, 1}, 0, [&] { moe_weighted_sum_seq_bf16(ye.p, w.p, yo.p, &wp); });
  double wf = 0, wb = 0;
  for (u32 t = 0; t < T; ++t)
    for (u32 d = 0; d < H; ++d) {
      double s = 0, a = 0;
      weighted_sum(w, ye, t, K, H, d, s, a);
      wf = std::max(wf, std::fabs(fo.at(size_t(t) * H + d) - s) / a);
      wb = std::max(wb, std::fabs(yo.at(size_t(t) * H + d) - s) / a);
    }
  report("moe_weighted_sum_seq_bf16_input T=2 top_k=3 h=70", wf, 1e-5);
  report("moe_weighted_sum_seq_bf16 T=2 top_k=3 h=70", wb, 1e-2);
  // moe_gather_topk_weights: one thread; an index past the experts weighs 0.
  const u32 E = 6, k = 3;
  Arr<float> probs(E), scale(E), ow(k);
  Arr<u32> sorted(E), oid(k);
  probs.random(0, 1);
  scale.random(0.5, 1.5);
  const u32 order[E] = {4, 9, 0, 1, 2, 3};
  std::copy(order, order + E, sorted.p);
  MoeGatherTopkParams tp{E, k};
  sim_launch({1, 1, 1}, {1, 1, 1}, 0, [&] { moe_gather_topk_weights(probs.p, sorted.p, scale.p, oid.p, ow.p, &tp); });
  const double sum = probs.at(4) + probs.at(0);
  const double e0 = std::fabs(ow.at(0) - probs.at(4) / sum * scale.at(4)), e2 = std::fabs(ow.at(2) - probs.at(0) / sum * scale.at(0));
  report("moe_gather_topk_weights E=6 top_k=3", oid.p[1] == 9 && ow.at(1) == 0 ? std::max(e0, e2) : INFINITY, 1e-6);
}

// ---- quantized_matmul_id ----

// E experts of N rows (expertRows apart), K values `bits` wide, groups of gs; scales and biases of TS.
template <class TS>
struct QExperts {
  u32 N, K, gs, bits, E, rows;
  u64 rb;
  u32 groups;
  Arr<unsigned char> w;
  Arr<TS> sc, bi;
  std::vector<u32> q;
  QExperts(u32 E_, u32 N_, u32 K_, u32 gs_, u32 bits_, u32 rows_)
      : N(N_), K(K_), gs(gs_), bits(bits_), E(E_), rows(rows_), rb(row_bytes(K_, bits_)), groups((K_ + gs_ - 1) / gs_),
        w(((E_ - 1) * rows_ + N_) * rb, 16), sc(size_t((E_ - 1) * rows_ + N_) * groups), bi(size_t((E_ - 1) * rows_ + N_) * groups) {
    sc.random(0.001, 0.02);
    bi.random(-0.1, 0.1);
    random_packed(q, w.p, (E - 1) * rows + N, K, bits, rb);
  }
  double wv(u32 e, u32 j, u32 k) const {
    const size_t r = size_t(e) * rows + j, g = r * groups + k / gs;
    return sc.at(g) * q[r * K + k] + bi.at(g);
  }
};

// The worst error of y [P, N] (y_of(p, j)) against the reference products of
// x [M, K] (x_of(row, k); pair p takes row p / U) and the rows of expert
// ids[p] (w_of(m, e, j, k): m = 0 the gate or the only weight, 1 the up),
// zeros for ids past the E experts: |got - want| / sum |x w| per output; for
// gate/up the first-order bound |act'(g)| sum|x g| |u| + |act(g)| sum|x u|.
template <class XOf, class WOf, class YOf>
static double id_error(const std::vector<u32>& ids, u32 U, u32 E, u32 N, u32 K, bool gate_up, u32 activation, bool f16_out, XOf x_of,
                       WOf w_of, YOf y_of) {
  const u32 P = u32(ids.size());
  double worst = 0;
  for (u32 p = 0; p < P; ++p)
    for (u32 j = 0; j < N; ++j) {
      const double got = y_of(p, j);
      double want = 0, scale = 1;
      if (ids[p] < E) {
        double s[2] = {0, 0}, a[2] = {0, 0};
        for (int m = 0; m < (gate_up ? 2 : 1); ++m)
          for (u32 k = 0; k < K; ++k) {
            const double t = x_of(p / U, k) * w_of(m, ids[p], j, k);
            s[m] += t;
            a[m] += std::fabs(t);
          }
        if (gate_up) {
          const double h = 1e-5 * std::max(1.0, std::fabs(s[0]));
          const double slope = (act_of(s[0] + h, activation) - act_of(s[0] - h, activation)) / (2 * h);
          want = act_of(s[0], activation) * s[1];
          scale = std::fabs(slope) * a[0] * std::fabs(s[1]) + std::fabs(act_of(s[0], activation)) * a[1];
        } else {
          want = s[0];
          scale = a[0];
        }
        // f16 below its smallest normal is spaced 2^-24 apart.
        if (f16_out) scale += std::ldexp(1.0, -14);
      }
      const double e = std::fabs(got - want) / std::max(scale, 1e-30);
      if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
    }
  return worst;
}

// id_error of the quantized experts g (and up for gate/up), x rounded to bf16 where round_x.
template <class TX, class TY, class TS>
static double qid_error(const Arr<TX>& x, const QExperts<TS>& g, const QExperts<TS>* up, const std::vector<u32>& ids, u32 U,
                        const Arr<TY>& y, bool round_x, u32 activation) {
  const u32 N = g.N, K = g.K;
  return id_error(
      ids, U, g.E, N, K, up != nullptr, activation, std::is_same_v<TY, __half>,
      [&](u32 row, u32 k) {
        const double xv = x.at(size_t(row) * K + k);
        return round_x ? back(cvt<__nv_bfloat16>(xv)) : xv;
      },
      [&](int m, u32 e, u32 j, u32 k) { return (m == 0 ? g : *up).wv(e, j, k); }, [&](u32 p, u32 j) { return y.at(size_t(p) * N + j); });
}

// The vector form's launch (quantizedIdMvCudaLaunch): the group-column
// path's for 4-bit codes in MLX's chunks whose x fits 96 KiB permuted
// (quantizedIdGcTakes; W by quantizedIdGcWarps), else the vector engine's.
// The typed ops launch their _gc kernels there (quantizedIdMvKernel).
struct MvLaunch {
  SimDim grid, block;
  size_t smem;
  bool gc;
};
static MvLaunch mv_launch(u32 P, u32 N, u32 K, u32 gs, u32 bits, bool gate_up, bool vector = false) {
  const u32 r = (K / gs + 7) / 8, shared = r * 8 * gs * 2 + r * 8 * 4 + 1024;
  const bool chunked = (gs == 32 || gs == 64 || gs == 128) && K % gs == 0;
  if (!vector && bits == 4 && chunked && shared <= 98304) {
    const u32 tiles = cdiv(N, gate_up ? 8 : 16), all = P * tiles;
    const u32 rounds = (K / gs + 7) / 8;
    const u32 w = std::min(all >= 2048 ? 1u : (all >= 1024 || !gate_up) ? 2u : 4u, rounds >= 4 ? 4u : rounds >= 2 ? 2u : 1u);
    return {{P * cdiv(tiles * w, 4), 1, 1}, {128, 1, 1}, shared, true};
  }
  const u32 steps = (cdiv(K, 32) + 3) / 4;
  const u32 rows = (steps >= 8 ? 1 : steps >= 4 ? 2 : 4) * (gate_up ? 8 : 16);
  return {{P * cdiv(N, rows), 1, 1}, {256, 1, 1}, 0, false};
}

template <class T>
using QmvIdFn = void (*)(const T*, const unsigned*, const T*, const T*, const u32*, T*, const QuantizedMatmulIdParams*);
template <class T>
using QguIdFn = void (*)(const T*, const unsigned*, const T*, const T*, const u32*, T*, const QuantizedGateUpIdParams*, const unsigned*,
                         const T*, const T*);

template <class T>
// vector: the crate-named entries at 4 bits too (host code may launch them; the ops take the _gc ones there).
// compact, compact_gu: a compact entry (quantizedIdMvCudaEntry) run in place of the _gc kernel.
static void check_qmv(const char* name, u32 M, u32 U, u32 E, u32 N, u32 K, u32 gs, u32 bits, bool gate_up, u32 activation, bool fused,
                      bool vector = false, QmvIdFn<T> compact = nullptr, QguIdFn<T> compact_gu = nullptr) {
  const u32 P = M * U, rows = fused ? 2 * N : N;
  QExperts<T> gw(E, fused ? 2 * N : N, K, gs, bits, rows), uwsep(E, N, K, gs, bits, rows);
  // The fused layout: the up view starts N rows into the gate's buffer.
  QExperts<T> upv = gw;
  Arr<T> x(size_t(M) * K), y(size_t(P) * N);
  x.random();
  y.poison();
  const std::vector<u32> ids = make_ids(P, E, -1, true);
  Arr<u32> idb(P);
  std::copy(ids.begin(), ids.end(), idb.p);
  const u32 ws = u32(rows * gw.rb), ss = rows * gw.groups;
  const unsigned char* upw = fused ? gw.w.p + N * gw.rb : uwsep.w.p;
  const T* ups = fused ? gw.sc.p + N * gw.groups : uwsep.sc.p;
  const T* upb = fused ? gw.bi.p + N * gw.groups : uwsep.bi.p;
  // The reference's view of the gate and up experts: N of each expert's rows.
  QExperts<T> gref = gw;
  gref.N = N;
  QExperts<T>* uref = &uwsep;
  if (fused) {
    upv.N = N;
    upv.sc.p = gw.sc.p + N * gw.groups;
    upv.bi.p = gw.bi.p + N * gw.groups;
    upv.q.erase(upv.q.begin(), upv.q.begin() + size_t(N) * K);
    uref = &upv;
  }
  const MvLaunch l = mv_launch(P, N, K, gs, bits, gate_up, vector);
  if (gate_up) {
    QuantizedGateUpIdParams p{M, K, N, gs, bits, U, E, ws, ss, ss, activation};
    sim_launch(l.grid, l.block, l.smem, [&] {
      const unsigned* gwu = reinterpret_cast<const unsigned*>(gw.w.p);
      const unsigned* uwu = reinterpret_cast<const unsigned*>(upw);
      if (compact_gu != nullptr) compact_gu(x.p, gwu, gw.sc.p, gw.bi.p, idb.p, y.p, &p, uwu, ups, upb);
      else if constexpr (std::is_same_v<T, __half>)
        (l.gc ? quantized_gate_up_mv_id_gc_f16 : quantized_gate_up_mv_id_f16)(x.p, gwu, gw.sc.p, gw.bi.p, idb.p, y.p, &p, uwu, ups, upb);
      else
        (l.gc ? quantized_gate_up_mv_id_gc_bf16 : quantized_gate_up_mv_id_bf16)(x.p, gwu, gw.sc.p, gw.bi.p, idb.p, y.p, &p, uwu, ups, upb);
    });
  } else {
    QuantizedMatmulIdParams p{M, K, N, gs, bits, U, E, ws, ss, ss};
    sim_launch(l.grid, l.block, l.smem, [&] {
      const unsigned* gwu = reinterpret_cast<const unsigned*>(gw.w.p);
      if (compact != nullptr) compact(x.p, gwu, gw.sc.p, gw.bi.p, idb.p, y.p, &p);
      else if constexpr (std::is_same_v<T, __half>)
        (l.gc ? quantized_mv_id_gc_f16 : quantized_mv_id_f16)(x.p, gwu, gw.sc.p, gw.bi.p, idb.p, y.p, &p);
      else
        (l.gc ? quantized_mv_id_gc_bf16 : quantized_mv_id_bf16)(x.p, gwu, gw.sc.p, gw.bi.p, idb.p, y.p, &p);
    });
  }
  char what[200];
  std::snprintf(what, sizeof what, "%s%s M=%u U=%u E=%u N=%u K=%u gs=%u bits=%u%s", name, l.gc ? " [gc]" : "", M, U, E, N, K, gs, bits,
                gate_up ? (activation ? " gelu" : " silu") : "");
  report(what, qid_error(x, gref, gate_up ? uref : nullptr, ids, U, y, false, activation), tol_of<T>() * std::max(1.0, std::sqrt(K / 4096.0)));
}

// misaligned: the weight one byte past a 16-byte boundary (as a u8 buffer may be), so the any engine runs.
static void check_crate(u32 M, u32 U, u32 E, u32 N, u32 K, u32 gs, u32 bits, bool misaligned = false) {
  const u32 P = M * U;
  QExperts<__nv_bfloat16> ex(E, N, K, gs, bits, N);
  if (misaligned) {
    std::memmove(ex.w.p + 1, ex.w.p, (E * N) * ex.rb);
    ex.w.p += 1;
  }
  Arr<float> x(size_t(M) * K), y(size_t(P) * N);
  x.random();
  y.poison();
  const std::vector<u32> ids = make_ids(P, E, -1, true);
  Arr<u32> idb(P);
  std::copy(ids.begin(), ids.end(), idb.p);
  QuantizedMatmulIdParams p{M, K, N, gs, bits, U, E, u32(N * ex.rb), N * ex.groups, N * ex.groups};
  const MvLaunch l = mv_launch(P, N, K, gs, bits, false);
  sim_launch(l.grid, l.block, l.smem, [&] {
    quantized_matmul_id(x.p, reinterpret_cast<const unsigned*>(ex.w.p), ex.sc.p, ex.bi.p, idb.p, y.p, &p);
  });
  char what[200];
  std::snprintf(what, sizeof what, "quantized_matmul_id M=%u U=%u E=%u N=%u K=%u gs=%u bits=%u%s", M, U, E, N, K, gs, bits,
                misaligned ? " (misaligned weight)" : "");
  report(what, qid_error(x, ex, (const QExperts<__nv_bfloat16>*)nullptr, ids, U, y, true, 0), 1e-2);
}

template <class T>
static void check_qmm(const char* name, u32 M, u32 U, u32 E, u32 N, u32 K, u32 gs, u32 bits, bool gate_up, u32 activation, int only) {
  const u32 P = M * U;
  QExperts<T> gw(E, N, K, gs, bits, N), uw(E, N, K, gs, bits, N);
  Arr<T> x(size_t(M) * K), y(size_t(P) * N);
  x.random();
  y.poison();
  const std::vector<u32> ids = make_ids(P, E, only, only < 0);
  const Grouping grp(ids, E);
  const u32 slots = P / 64 + E + 1, cols = gate_up ? 64 : 128;
  const SimDim grid{slots * cdiv(N, cols), 1, 1}, block{128, 1, 1};
  const size_t smem = 4 * (64 + 128) * 40 * 2;
  const u32 ws = u32(N * gw.rb), ss = N * gw.groups;
  if (gate_up) {
    QuantizedGateUpIdParams p{M, K, N, gs, bits, U, E, ws, ss, ss, activation};
    sim_launch(grid, block, smem, [&] {
      if constexpr (std::is_same_v<T, __half>)
        quantized_gate_up_mm_id_f16(x.p, reinterpret_cast<const unsigned*>(gw.w.p), gw.sc.p, gw.bi.p, grp.off.p, y.p, &p, grp.ord.p,
                                    reinterpret_cast<const unsigned*>(uw.w.p), uw.sc.p, uw.bi.p);
      else
        quantized_gate_up_mm_id_bf16(x.p, reinterpret_cast<const unsigned*>(gw.w.p), gw.sc.p, gw.bi.p, grp.off.p, y.p, &p, grp.ord.p,
                                     reinterpret_cast<const unsigned*>(uw.w.p), uw.sc.p, uw.bi.p);
    });
  } else {
    QuantizedMatmulIdParams p{M, K, N, gs, bits, U, E, ws, ss, ss};
    sim_launch(grid, block, smem, [&] {
      if constexpr (std::is_same_v<T, __half>)
        quantized_mm_id_f16(x.p, reinterpret_cast<const unsigned*>(gw.w.p), gw.sc.p, gw.bi.p, grp.off.p, y.p, &p, grp.ord.p);
      else
        quantized_mm_id_bf16(x.p, reinterpret_cast<const unsigned*>(gw.w.p), gw.sc.p, gw.bi.p, grp.off.p, y.p, &p, grp.ord.p);
    });
  }
  char what[200];
  std::snprintf(what, sizeof what, "%s M=%u U=%u E=%u N=%u K=%u gs=%u bits=%u%s%s", name, M, U, E, N, K, gs, bits,
                gate_up ? (activation ? " gelu" : " silu") : "", only >= 0 ? " (one expert)" : "");
  report(what, qid_error(x, gw, gate_up ? &uw : nullptr, ids, U, y, false, activation), tol_of<T>() * std::max(1.0, std::sqrt(K / 4096.0)));
}

// ---- dense_matmul_id ----

// E experts of N rows (expertRows apart) of K values of T; ids; the vector
// (a block per pair and 8 rows) or matrix launch (after the grouping).
template <class T>
static void check_dense(const char* name, u32 M, u32 U, u32 E, u32 N, u32 K, bool gate_up, u32 activation, bool matrix, int only,
                        bool misaligned = false) {
  const u32 P = M * U, all = E * N;
  Arr<T> x(size_t(M) * K + 1), gw(size_t(all) * K + 1), uw(size_t(all) * K + 1), y(size_t(P) * N);
  x.random();
  gw.random();
  uw.random();
  y.poison();
  // misaligned: x one element past its 16-byte boundary (a view cannot be, but the kernels must not depend on it).
  const T* xp = x.p + (misaligned ? 1 : 0);
  const std::vector<u32> ids = make_ids(P, E, only, only < 0);
  Arr<u32> idb(P);
  std::copy(ids.begin(), ids.end(), idb.p);
  DenseMatmulIdParams p{M, K, N, U, E, N * K, activation};
  if (!matrix) {
    sim_launch({P * cdiv(N, 8), 1, 1}, {256, 1, 1}, 0, [&] {
      if constexpr (std::is_same_v<T, float>) {
        if (gate_up) dense_gate_up_mv_id_f32(xp, gw.p, idb.p, y.p, &p, uw.p); else dense_mv_id_f32(xp, gw.p, idb.p, y.p, &p);
      } else if constexpr (std::is_same_v<T, __half>) {
        if (gate_up) dense_gate_up_mv_id_f16(xp, gw.p, idb.p, y.p, &p, uw.p); else dense_mv_id_f16(xp, gw.p, idb.p, y.p, &p);
      } else {
        if (gate_up) dense_gate_up_mv_id_bf16(xp, gw.p, idb.p, y.p, &p, uw.p); else dense_mv_id_bf16(xp, gw.p, idb.p, y.p, &p);
      }
    });
  } else {
    const Grouping grp(ids, E);
    const SimDim grid{(P / 64 + E + 1) * cdiv(N, gate_up ? 64 : 128), 1, 1};
    sim_launch(grid, {128, 1, 1}, 4 * (64 + 128) * 40 * 2, [&] {
      if constexpr (std::is_same_v<T, __half>) {
        if (gate_up) dense_gate_up_mm_id_f16(xp, gw.p, grp.off.p, y.p, &p, grp.ord.p, uw.p); else dense_mm_id_f16(xp, gw.p, grp.off.p, y.p, &p, grp.ord.p);
      } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        if (gate_up) dense_gate_up_mm_id_bf16(xp, gw.p, grp.off.p, y.p, &p, grp.ord.p, uw.p); else dense_mm_id_bf16(xp, gw.p, grp.off.p, y.p, &p, grp.ord.p);
      }
    });
  }
  const double worst = id_error(
      ids, U, E, N, K, gate_up, activation, std::is_same_v<T, __half>, [&](u32 row, u32 k) { return back(xp[size_t(row) * K + k]); },
      [&](int m, u32 e, u32 j, u32 k) { return (m == 0 ? gw : uw).at((size_t(e) * N + j) * K + k); },
      [&](u32 p, u32 j) { return y.at(size_t(p) * N + j); });
  char what[200];
  std::snprintf(what, sizeof what, "%s M=%u U=%u E=%u N=%u K=%u%s%s%s", name, M, U, E, N, K, gate_up ? (activation ? " gelu" : " silu") : "",
                only >= 0 ? " (one expert)" : "", misaligned ? " (x misaligned)" : "");
  report(what, worst, tol_of<T>() * std::max(1.0, std::sqrt(K / 4096.0)));
}

// ---- moe_weighted_reduce ----

// E: the expert outputs' type (T, or bf16 beside f32 for _bf16_input); S:
// the shared row's (T, or bf16 with E for _bf16_shared).
template <class T, class E, class Kern, class S = T>
static void check_reduce(const char* name, Kern kernel, u32 T_, u32 Kk, u32 H, bool residual, bool cuda_launch) {
  Arr<float> w(size_t(T_) * Kk);
  Arr<E> ye(size_t(T_) * Kk * H);
  Arr<S> ys(size_t(T_) * H);
  Arr<T> sl(T_), res(size_t(T_) * H), out(size_t(T_) * H);
  w.random(0, 1);
  ye.random(-2, 2);
  sl.random(-4, 4);
  ys.random(-2, 2);
  res.random(-3, 3);
  out.poison();
  MoeWeightedReduceParams p{T_, Kk, H, residual ? 1u : 0u};
  const u32 vec = 16 / sizeof(T);
  const SimDim grid = cuda_launch ? SimDim{cdiv(cdiv(H, vec), 256), T_, 1} : SimDim{cdiv(H, 256), T_, 1};
  sim_launch(grid, {256, 1, 1}, 0, [&] { kernel(&p, w.p, ye.p, sl.p, ys.p, res.p, out.p); });
  double worst = 0;
  for (u32 t = 0; t < T_; ++t) {
    const double gate = 1 / (1 + std::exp(-sl.at(t)));
    for (u32 d = 0; d < H; ++d) {
      double s = 0, a = 0;
      weighted_sum(w, ye, t, Kk, H, d, s, a);
      s += gate * ys.at(size_t(t) * H + d);
      a += std::fabs(gate * ys.at(size_t(t) * H + d));
      if (residual) {
        s += res.at(size_t(t) * H + d);
        a += std::fabs(res.at(size_t(t) * H + d));
      }
      const double e = std::fabs(out.at(size_t(t) * H + d) - s) / a;
      if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
    }
  }
  char what[200];
  std::snprintf(what, sizeof what, "%s T=%u top_k=%u h=%u%s, %s launch", name, T_, Kk, H, residual ? " +residual" : "", cuda_launch ? "CUDA" : "Metal");
  report(what, worst, tol_of<T>());
}

int main() {
  using bf = __nv_bfloat16;
  check_sort("one pair", 1, 1, -1, false);
  check_sort("8 x top-8 of 512", 64, 512, -1, false);
  check_sort("one expert takes all", 300, 16, 11, false);
  check_sort("ids past the experts", 97, 40, -1, true);
  check_sort("past one block: 5000 pairs of 300", 5000, 300, -1, true);
  check_glue();
  for (u32 bits : {4u, 6u, 8u}) {
    // k of 4, 2 and 1 tiles a block (64: one step; 512: 4 steps; 1152: 9 steps, dead lanes in the last).
    check_qmv<bf>("quantized_mv_id_bf16", 2, 3, 5, 37, 64, 32, bits, false, 0, false);
    check_qmv<__half>("quantized_mv_id_f16", 1, 4, 6, 20, 512, 64, bits, false, 0, false);
    check_qmv<bf>("quantized_mv_id_bf16", 1, 2, 3, 17, 1152, 128, bits, false, 0, false);
    check_qmv<bf>("quantized_gate_up_mv_id_bf16", 2, 2, 4, 13, 256, 64, bits, true, 0, false);
    check_qmv<__half>("quantized_gate_up_mv_id_f16 (fused [E, 2N, K])", 1, 3, 5, 24, 96, 32, bits, true, 1, true);
    check_crate(2, 2, 3, 24, 256, 64, bits);
    check_crate(3, 2, 3, 7, 10, 4, bits);
    check_crate(1, 2, 3, 9, 64, 32, bits, true);
    check_qmm<bf>("quantized_mm_id_bf16", 40, 3, 9, 130, 64, 32, bits, false, 0, -1);
    check_qmm<__half>("quantized_mm_id_f16", 30, 3, 4, 20, 96, 32, bits, false, 0, 2);
    check_qmm<bf>("quantized_gate_up_mm_id_bf16", 25, 2, 6, 70, 64, 64, bits, true, 0, -1);
    check_qmm<__half>("quantized_gate_up_mm_id_f16", 35, 2, 3, 40, 128, 128, bits, true, 1, -1);
  }
  // The crate-named vector entries at 4 bits (the ops launch the _gc ones there).
  check_qmv<bf>("quantized_mv_id_bf16 (vector engine)", 2, 3, 5, 37, 512, 64, 4, false, 0, false, true);
  check_qmv<__half>("quantized_gate_up_mv_id_f16 (vector engine)", 2, 2, 4, 13, 256, 64, 4, true, 1, false, true);
  // The group-column path at 1 and 2 warps a tile (2048 and 1024 tiles; 20 groups: 3 rounds, the last of 4), 4 bits.
  check_qmv<bf>("quantized_gate_up_mv_id_bf16 (W 1)", 32, 8, 12, 64, 640, 32, 4, true, 0, false);
  check_qmv<__half>("quantized_gate_up_mv_id_f16 (W 2)", 16, 8, 12, 61, 640, 32, 4, true, 1, false);
  check_qmv<bf>("quantized_mv_id_bf16 (W 1)", 16, 8, 12, 256, 1152, 128, 4, false, 0, false);
  // The compact entries of the _gc kernels at those launches: every warp count, group sizes 32, 64 and 128.
  check_qmv<bf>("quantized_gate_up_mv_id_gc_bf16_g32_w1", 32, 8, 12, 64, 640, 32, 4, true, 0, false, false, nullptr,
                quantized_gate_up_mv_id_gc_bf16_g32_w1);
  check_qmv<__half>("quantized_gate_up_mv_id_gc_f16_g32_w2", 16, 8, 12, 61, 640, 32, 4, true, 1, false, false, nullptr,
                    quantized_gate_up_mv_id_gc_f16_g32_w2);
  check_qmv<bf>("quantized_gate_up_mv_id_gc_bf16_g64_w4", 2, 2, 4, 13, 256, 64, 4, true, 0, false, false, nullptr,
                quantized_gate_up_mv_id_gc_bf16_g64_w4);
  check_qmv<bf>("quantized_mv_id_gc_bf16_g128_w1", 16, 8, 12, 256, 1152, 128, 4, false, 0, false, false, quantized_mv_id_gc_bf16_g128_w1);
  check_qmv<__half>("quantized_mv_id_gc_f16_g64_w2", 1, 4, 6, 20, 512, 64, 4, false, 0, false, false, quantized_mv_id_gc_f16_g64_w2);
  // A compact entry given another group size (a plan made by hand): the any engine's exact sums.
  check_qmv<bf>("quantized_mv_id_gc_bf16_g32_w2 (group 64)", 1, 4, 6, 20, 512, 64, 4, false, 0, false, false, quantized_mv_id_gc_bf16_g32_w2);
  // The matrix engine's cp.async weight pipeline past its 4 stages (k = 320: 10 steps), 4 and 8 bits.
  check_qmm<bf>("quantized_gate_up_mm_id_bf16", 20, 2, 3, 40, 320, 64, 4, true, 0, -1);
  check_qmm<__half>("quantized_mm_id_f16", 20, 2, 3, 70, 320, 32, 8, false, 0, -1);
  check_dense<float>("dense_mv_id_f32", 2, 3, 5, 19, 37, false, 0, false, -1);
  check_dense<__half>("dense_mv_id_f16", 1, 4, 6, 20, 512, false, 0, false, -1);
  check_dense<__nv_bfloat16>("dense_mv_id_bf16", 3, 2, 4, 9, 1000, false, 0, false, -1);
  check_dense<__nv_bfloat16>("dense_mv_id_bf16", 1, 2, 4, 9, 64, false, 0, false, -1, true);
  check_dense<float>("dense_gate_up_mv_id_f32", 1, 3, 4, 13, 40, true, 1, false, -1);
  check_dense<__nv_bfloat16>("dense_gate_up_mv_id_bf16", 2, 2, 4, 13, 256, true, 0, false, -1);
  check_dense<__nv_bfloat16>("dense_mm_id_bf16", 40, 3, 7, 130, 72, false, 0, true, -1);
  check_dense<__half>("dense_mm_id_f16", 35, 2, 3, 9, 96, false, 0, true, 1);
  check_dense<__half>("dense_mm_id_f16", 20, 2, 3, 9, 45, false, 0, true, -1);
  check_dense<__nv_bfloat16>("dense_mm_id_bf16", 20, 2, 3, 9, 64, false, 0, true, -1, true);
  check_dense<__nv_bfloat16>("dense_gate_up_mm_id_bf16", 25, 2, 6, 70, 64, true, 0, true, -1);
  check_dense<__half>("dense_gate_up_mm_id_f16", 30, 2, 3, 40, 104, true, 1, true, -1);
  for (bool res : {false, true})
    for (bool cl : {false, true}) {
      check_reduce<float, float>("moe_weighted_reduce_f32", moe_weighted_reduce_f32, 3, 8, 300, res, cl);
      check_reduce<bf, bf>("moe_weighted_reduce_bf16", moe_weighted_reduce_bf16, 2, 4, 264, res, cl);
      check_reduce<__half, __half>("moe_weighted_reduce_f16", moe_weighted_reduce_f16, 2, 3, 7, res, cl);
      check_reduce<float, bf>("moe_weighted_reduce_bf16_input", moe_weighted_reduce_bf16_input, 3, 8, 300, res, cl);
      check_reduce<float, bf>("moe_weighted_reduce_bf16_input", moe_weighted_reduce_bf16_input, 2, 3, 7, res, cl);
      check_reduce<float, bf, decltype(&moe_weighted_reduce_bf16_shared), bf>("moe_weighted_reduce_bf16_shared", moe_weighted_reduce_bf16_shared, 1, 9, 2048, res, cl);
      check_reduce<float, bf, decltype(&moe_weighted_reduce_bf16_shared), bf>("moe_weighted_reduce_bf16_shared", moe_weighted_reduce_bf16_shared, 2, 3, 7, res, cl);
    }
  std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
  return failures != 0;
}
