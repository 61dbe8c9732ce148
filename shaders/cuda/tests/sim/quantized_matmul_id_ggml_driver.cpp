// The quantized_matmul_id_ggml family's CUDA kernels
// (shaders/cuda/quantized_matmul_id_ggml.cu) on the CPU simulation
// (sim_runtime.h), against a float64 dequantization written from the layouts
// (ggml_blocks.h), at the launches of ts/ops/quantized_matmul_id_ggml.ts
// (ggmlIdMvCudaLaunch, ggmlIdMmCudaLaunch, ggmlIdMmFewCudaLaunch,
// ggmlIdMmWgCudaLaunch, written out again below): the
// vector form (one token, several, a down projection over pairs; rows past
// N; experts whose rows are 16-byte aligned and experts that are not, so each
// format's aligned and unaligned stage reads) and the matrix form over a
// grouping of the pairs by expert written here as moe_dispatch_sort's
// (partial tiles, experts without pairs, several tiles of one expert), and
// the few-pairs form (kernel_mul_mm_id_<t>_f32_few, ggmlIdMmFewCudaLaunch)
// over the same grouping (slots of 8 pairs, a short prompt's spread), and
// the many-pairs form (kernel_mul_mm_id_<t>_f32_wg: wgmma on the
// simulation's model, or with SIM_DEFINES=-DMLXN_SIM_NO_WGMMA the path a
// build without sm_90a runs; slots of 128 pairs, a long prompt's spread). Ids
// past the experts must give rows of exact zeros. The fused gate/up vector
// form (kernel_mul_mv_id_<t>_f32_gate_up, silu and gelu_tanh) at the same
// vector shapes, its up weight a second allocation 16-byte aligned or 4
// bytes off (each engine path with both weights aligned, and the unaligned
// one), and its matrix forms (kernel_mul_mm_id_<t>_f32_gate_up, _few, _wg)
// at the matrix forms' shapes. Products: |got - want| / sum |x w| under f16's 1e-3 (the tensor
// cores take the weight and x in f16); gate/up: |got - want| over the bound
// |act'(g)| sum |x g| |u| + |act(g)| sum |x u| + 1e-3 sum |x g| sum |x u| (the
// first order, and the product of the two sums' errors, which is what is
// left where g and u are both near 0). The crate's
// kernel_mul_mv_id_q4_0_f32_swiglu: Q4_0 experts against silu(gate) * up of
// each pair's rows, |got - want| / sum |h w| under 1e-3. The int8 vector
// form (kernel_mul_mv_id_<t>_f32_i8, ggmlIdI8Launch) of Q8_0 and Q6_K at
// decode's shapes, under 1e-2 (x rounded to int8). run.sh builds and runs it.
#include "sim_kernels.h"  // build.py's output
#include "sim_util.h"
#include "ggml_blocks.h"
#include <string>
#include <type_traits>

// moe_dispatch_sort's outputs: offsets [E + 2] (the pairs of the groups
// before each; group E the ids past the experts) and the pairs in group order.
void group_pairs(const std::vector<u32>& ids, u32 E, std::vector<u32>& offsets, std::vector<u32>& order) {
  offsets.assign(E + 2, 0);
  for (u32 e : ids) offsets[std::min(e, E) + 1]++;
  for (u32 g = 0; g <= E; ++g) offsets[g + 1] += offsets[g];
  std::vector<u32> at(offsets.begin(), offsets.end() - 1);
  order.assign(ids.size(), 0);
  for (u32 p = 0; p < ids.size(); ++p) order[at[std::min(ids[p], E)]++] = p;
}

// The gate activations as the kernels' gate_activation (0 silu, 1 gelu_tanh), in double.
double act_of(int a, double g) {
  if (a == 0) return g / (1.0 + std::exp(-g));
  return g / (1.0 + std::exp(-1.5957691216057308 * g * (1.0 + 0.044715 * g * g)));
}

// E experts of N rows of K values, expert e at e * stride bytes of a weight `skew` bytes past a 16-byte boundary.
struct Experts {
  std::vector<unsigned char> raw;
  unsigned char* w;
  Experts(int f, u32 N, u32 K, u32 E, u64 stride, u32 skew) : raw((E - 1) * stride + u64(K) / qk_of(f) * bytes_of(f) * N + 48) {
    w = raw.data() + ((16 - (reinterpret_cast<uintptr_t>(raw.data()) & 15)) & 15) + skew;
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& b : raw) b = (unsigned char)byte(gen);
    for (u32 e = 0; e < E; ++e) random_blocks(f, w + e * stride, size_t(N) * K / qk_of(f));
  }
};

// T tokens x U slots of E experts of N rows of K values, expert e at e * (expert bytes + pad) bytes of a
// 16-byte aligned weight; ids below `used`, every fifth pair past the experts where `bad`. gu >= 0: the
// gate/up form (mv the gate/up entry, gu its activation) with an up weight `up_skew` bytes past 16.
template <class MV, class MM>
void run_id(int f, MV mv, MM mm, int form, u32 T, u32 U, u32 N, u32 K, u32 E, u32 used, bool bad, u32 pad, int gu = -1,
            u32 up_skew = 0, u32 gu_threads = 128) {
  // form 4, 5, 6: the int8 vector form (kernel_mul_mv_id_<t>_f32_i8, ggmlIdI8Launch; 6: _i8r4, 4 rows a warp): grid
  // (G, P) of 256 threads, G = 3 blocks a pair (4, 6: a persistent walk over units of 8 R rows) or every unit (5).
  const bool i8 = form == 4 || form == 5 || form == 6;
  const u32 i8_rows = form == 6 ? 4 : 1;
  const bool matrix = form != 0 && !i8;
  const u64 rb = u64(K) / qk_of(f) * bytes_of(f), eb = rb * N, stride = eb + pad;
  const u32 P = T * U;
  Experts gate(f, N, K, E, stride, 0), up(f, N, K, E, stride, up_skew);
  unsigned char* w = gate.w;
  std::vector<u32> ids(P);
  std::uniform_int_distribution<u32> pick(0, used - 1);
  for (u32 p = 0; p < P; ++p) ids[p] = bad && p % 5 == 3 ? E + 1000 * p : pick(gen);
  Arr<u32> idv(P);
  for (u32 p = 0; p < P; ++p) idv.p[p] = ids[p];
  Arr<float> x(size_t(T) * K), y(size_t(P) * N);
  x.random();
  y.poison();
  const std::string what = std::string(matrix && gu >= 0 ? "gate_up " : "") + std::string(gu_threads == 256 ? "gc8 " : "") + std::string(i8 ? (form == 4 ? "mv_id_i8 G=3 " : form == 6 ? "mv_id_i8r4 G=3 " : "mv_id_i8 G=units ") : form == 3 ? "mm_id_wg " : form == 2 ? "mm_id_few " : matrix ? "mm_id " : gu >= 0 ? (gu ? "gate_up gelu_tanh " : "gate_up silu ") : "mv_id ") + fmt_name(f) + " T=" + std::to_string(T) + " U=" + std::to_string(U) +
                           " N=" + std::to_string(N) + " K=" + std::to_string(K) + " E=" + std::to_string(E) +
                           (pad ? " stride +" + std::to_string(pad) : "") + (bad ? " bad ids" : "") +
                           (up_skew ? " up +" + std::to_string(up_skew) : "");
  // ggmlIdMvCudaLaunch's shared memory: the vector engine's, or a group-column engine's where it takes more.
  const u32 sp = 16 * ((256 / qk_of(f) * bytes_of(f) + 30 + 15) / 16);
  u32 smem = 4 * 3 * 16 * sp + 4 * 128 * 4;
  if (f == Q4_K) smem = std::max(smem, K * 2 + K / 32 * 4 + 1024);
  if (f == Q8_0) smem = 4 * std::min(3u, cdiv(cdiv(K, 256), 4)) * 16 * sp + cdiv(K, 256) * 8 * 68 + 320;
  if (f == Q6_K) smem = 4 * std::min(3u, cdiv(K / 256, 4)) * 16 * sp + K * 2 + K / 4 + 320;
  constexpr bool GU = std::is_invocable_v<MV, const unsigned char*, const float*, float*, const u32*, const GgmlMatvecIdGateUpParams*,
                                           const unsigned char*>;
  if constexpr (GU) {
    GgmlMatvecIdGateUpParams p{{{K, N, E, K, 1, N, P, 1, 1}, U, T, stride}, u32(gu)};
    sim_launch({P * cdiv(N, 8), 1, 1}, {gu_threads, 1, 1}, smem, [&] { mv(w, x.p, y.p, idv.p, &p, up.w); });
  } else if (i8) {
    // x as int8 (K bytes), a {scale, sum} pair a chunk of 32, the engine's 2 x 8 x R x 8 floats.
    GgmlMatvecIdParams p{{K, N, E, K, 1, N, P, 1, 1}, U, T, stride};
    sim_launch({form == 5 ? cdiv(N, 8) : 3u, P, 1}, {256, 1, 1}, K + K / 32 * 8 + 512 * i8_rows, [&] { mv(w, x.p, y.p, idv.p, &p); });
  } else if (!matrix) {
    GgmlMatvecIdParams p{{K, N, E, K, 1, N, P, 1, 1}, U, T, stride};
    sim_launch({P * cdiv(N, 16), 1, 1}, {128, 1, 1}, smem, [&] { mv(w, x.p, y.p, idv.p, &p); });
  }
  if (matrix) {
    std::vector<u32> offsets, order;
    group_pairs(ids, E, offsets, order);
    Arr<u32> off(E + 2), ord(P);
    for (u32 i = 0; i < E + 2; ++i) off.p[i] = offsets[i];
    for (u32 i = 0; i < P; ++i) ord.p[i] = order[i];
    GgmlMatmulIdMm_MmParams p{};
    p.ne00 = int(K); p.ne02 = int(E); p.nb01 = rb; p.nb02 = stride; p.ne11 = int(U); p.nb10 = 4; p.nb11 = 0; p.nb12 = 4ull * K;
    p.ne20 = int(U); p.ne21 = int(T); p.ne0 = int(N); p.ne1 = int(U); p.r2 = 1; p.r3 = 1;
    // The gate/up matrix entries (kernel_mul_mm_id_<t>_f32_gate_up[_few|_wg]): their params, the up weight last, and
    // half the outputs a block (their gate and up rows the engine's).
    constexpr bool MGU = std::is_invocable_v<MM, const GgmlMatmulIdMmGateUpParams*, const unsigned char*, const float*, const u32*,
                                             const u32*, float*, const unsigned char*>;
    const GgmlMatmulIdMmGateUpParams pg{p, u32(gu), 0};
    const auto call = [&] {
      if constexpr (MGU) mm(&pg, w, x.p, off.p, ord.p, y.p, up.w);
      else mm(&p, w, x.p, off.p, ord.p, y.p);
    };
    const u32 half = MGU ? 2 : 1;
    if (form == 3) {
      // ggmlIdMmWgCudaLaunch: slots of 128 pairs x 128 rows, 256 threads, ggmlIdMmWgSharedBytes.
      const u32 units = f == Q4_K ? 3 : f == Q5_K ? 5 : 0;
      sim_launch({(P / 128 + E + 1) * cdiv(N, 128 / half), 1, 1}, {256, 1, 1}, 3 * 256 * 128 + 2 * 128 * units * 16 + 1024, call);
    } else if (form == 2) {
      // ggmlIdMmFewCudaLaunch: slots of 8 pairs x 64 rows (a warp's 16), the vector engine's shared memory.
      sim_launch({(P / 8 + E + 1) * cdiv(N, 64 / half), 1, 1}, {128, 1, 1}, 4 * 3 * 16 * sp + 4 * 128 * 4, call);
    } else {
      const u32 slots = P / 64 + E + 1;
      sim_launch({slots * cdiv(N, 128 / half), 1, 1}, {128, 1, 1}, 2 * (64 + 128) * 40 * 2, call);
    }
  }
  double worst = 0;
  for (u32 q = 0; q < P; ++q)
    for (u32 j = 0; j < N; ++j) {
      double e;
      if (ids[q] >= E) {
        e = y.at(size_t(q) * N + j) == 0.0 ? 0.0 : INFINITY;
      } else {
        double s = 0, a = 0, su = 0, au = 0;
        for (u32 k = 0; k < K; ++k) {
          const double xv = x.at(size_t(q / U) * K + k);
          const double pr = xv * wat(f, w + ids[q] * stride, rb, j, k);
          s += pr;
          a += std::fabs(pr);
          if (gu >= 0) {
            const double pu = xv * wat(f, up.w + ids[q] * stride, rb, j, k);
            su += pu;
            au += std::fabs(pu);
          }
        }
        if (gu >= 0) {
          const double h = 1e-5 * std::max(1.0, std::fabs(s));
          const double slope = (act_of(gu, s + h) - act_of(gu, s - h)) / (2 * h);
          // First order, and the second-order term of errors 1e-3 a and 1e-3 au in the sums (their product over 1e-3).
          const double bound = std::fabs(slope) * a * std::fabs(su) + std::fabs(act_of(gu, s)) * au + 1e-3 * a * au;
          const double d = std::fabs(y.at(size_t(q) * N + j) - act_of(gu, s) * su);
          e = d <= 0x1p-126 ? 0.0 : d / bound;  // below f32's smallest normal: flushed
        } else {
          e = std::fabs(y.at(size_t(q) * N + j) - s) / a;
        }
      }
      if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
    }
  // The int8 form rounds x to int8 a chunk of 32 values (about 2^-8 relative a value): 1e-2, as the dense driver's.
  const double tol = i8 ? 1e-2 : 1e-3;
  report(worst <= tol, what, worst, tol);
}

// The swiglu down projection: P pairs of gate and up rows of K floats (gate in [-3, 3]), Q4_0 experts as run_id's.
void run_swiglu(u32 P, u32 N, u32 K, u32 E, u32 used, bool bad, u32 pad) {
  const int f = Q4_0;
  const u64 rb = u64(K) / 32 * 18, stride = rb * N + pad;
  Experts ex(f, N, K, E, stride, 0);
  std::vector<u32> ids(P);
  std::uniform_int_distribution<u32> pick(0, used - 1);
  for (u32 p = 0; p < P; ++p) ids[p] = bad && p % 5 == 3 ? E + 7 * p : pick(gen);
  Arr<u32> idv(P);
  for (u32 p = 0; p < P; ++p) idv.p[p] = ids[p];
  Arr<float> g(size_t(P) * K), u(size_t(P) * K), y(size_t(P) * N);
  g.random(-3, 3);
  u.random();
  y.poison();
  GgmlMatvecIdParams p{{K, N, E, K, 1, N, P, 1, 1}, 1, P, stride};
  const u32 sp = 16 * ((256 / 32 * 18 + 30 + 15) / 16);
  sim_launch({P * cdiv(N, 16), 1, 1}, {128, 1, 1}, 4 * 3 * 16 * sp + 4 * 128 * 4,
             [&] { kernel_mul_mv_id_q4_0_f32_swiglu(ex.w, g.p, u.p, y.p, idv.p, &p); });
  double worst = 0;
  for (u32 q = 0; q < P; ++q)
    for (u32 j = 0; j < N; ++j) {
      double e;
      if (ids[q] >= E) {
        e = y.at(size_t(q) * N + j) == 0.0 ? 0.0 : INFINITY;
      } else {
        double s = 0, a = 0;
        for (u32 k = 0; k < K; ++k) {
          const double gv = g.at(size_t(q) * K + k), h = gv / (1.0 + std::exp(-gv)) * u.at(size_t(q) * K + k);
          const double pr = h * wat(f, ex.w + ids[q] * stride, rb, j, k);
          s += pr;
          a += std::fabs(pr);
        }
        e = std::fabs(y.at(size_t(q) * N + j) - s) / a;
      }
      if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
    }
  report(worst <= 1e-3, "swiglu Q4_0 P=" + std::to_string(P) + " N=" + std::to_string(N) + " K=" + std::to_string(K) + " E=" +
                            std::to_string(E) + (pad ? " stride +" + std::to_string(pad) : "") + (bad ? " bad ids" : ""),
         worst, 1e-3);
}

#define ALL_FORMATS(X) X(Q4_0, q4_0) X(Q8_0, q8_0) X(Q4_K, q4_K) X(Q5_K, q5_K) X(Q6_K, q6_K)

// kernel_mul_mv_id_q4_K_f32_gate_up_gc8 where its engine cannot take a pair (the up weight 4 bytes off 16):
// the valid pairs' rows NaN, a pair whose id is past the experts zeros.
void run_gc8_refused() {
  const u32 N = 20, K = 2048, E = 4, P = 4;
  const u64 stride = u64(K) / 256 * 144 * N;
  Experts gate(Q4_K, N, K, E, stride, 0), up(Q4_K, N, K, E, stride, 4);
  Arr<u32> idv(P);
  for (u32 p = 0; p < P; ++p) idv.p[p] = p == 2 ? E + 7 : p;
  Arr<float> x(K), y(size_t(P) * N);
  x.random();
  y.poison();
  GgmlMatvecIdGateUpParams p{{{K, N, E, K, 1, N, P, 1, 1}, P, 1, stride}, 0u};
  sim_launch({P * cdiv(N, 8), 1, 1}, {256, 1, 1}, K * 2 + K / 32 * 4 + 1024,
             [&] { kernel_mul_mv_id_q4_K_f32_gate_up_gc8(gate.w, x.p, y.p, idv.p, &p, up.w); });
  u32 wrong = 0;
  for (u32 q = 0; q < P; ++q)
    for (u32 r = 0; r < N; ++r) wrong += q == 2 ? y.at(q * N + r) != 0.0f : !std::isnan(y.at(q * N + r));
  report(wrong == 0, "gc8 gate_up Q4_K up weight off 16 bytes: NaN rows, zeros past the experts", double(wrong), 0);
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "gc8") {
    // Q4_K's gate/up form with 8 warps a tile: decode's 8 pairs at Gemma 4's k (11 super-blocks: warps with 2 and 1
    // rounds) and a partial tile; pairs with bad ids at k 2048; the engine refused.
    run_id(Q4_K, kernel_mul_mv_id_q4_K_f32_gate_up_gc8, kernel_mul_mm_id_q4_K_f32, 0, 1, 8, 37, 2816, 8, 8, false, 0, 1, 0, 256);
    run_id(Q4_K, kernel_mul_mv_id_q4_K_f32_gate_up_gc8, kernel_mul_mm_id_q4_K_f32, 0, 2, 4, 20, 2048, 6, 6, true, 0, 0, 0, 256);
    run_gc8_refused();
    std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
    return failures != 0;
  }
#define ID(F, T)                                                                                                       \
  {                                                                                                                    \
    const u32 kb = qk_of(F) == 32 ? 32 : 256;                                                                          \
    const u32 pad = F == Q4_K || F == Q5_K ? 20 : 18; /* experts off 16-byte alignment, as the op allows */           \
    /* The vector form: one token of top-8 over 16 experts; 3 tokens, bad ids, unaligned experts, a partial window; */ \
    /* a down projection over pairs. */                                                                                \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32, 0, 1, 8, 20, 2 * 256, 16, 16, false, 0);       \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32, 0, 3, 2, 37, 256 + 3 * kb % 256, 6, 4, true, pad); \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32, 0, 6, 1, 16, 256, 4, 4, true, 0);              \
    /* The matrix form: partial tiles, experts without pairs, bad ids; an expert with more than a tile of pairs. */    \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32, 1, 40, 2, 130, 256, 5, 3, true, 0);             \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32, 1, 70, 1, 37, 2 * kb, 3, 1, false, pad);       \
    /* The few-pairs form: several slots of one expert (a last slot short of 8), bad ids; one expert of 70 pairs; */  \
    /* a short prompt's spread (about 3 pairs an expert, experts without pairs), N past a block's 16 rows, a */         \
    /* partial window, unaligned experts. */                                                                         \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32_few, 2, 40, 2, 130, 256, 5, 3, true, 0);          \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32_few, 2, 70, 1, 37, 2 * kb, 3, 1, false, pad);     \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32_few, 2, 16, 4, 37, 256 + 3 * kb % 256, 24, 20, true, pad); \
    /* The many-pairs form: about 40 pairs an expert (one without), bad ids, N past a tile's 128 rows, unaligned */   \
    /* experts (Q4_K and Q5_K: their units' copies need 16-byte rows, so raw_fetch's path); one expert of 160 */      \
    /* pairs (two slots, the second short), k of 3 blocks, aligned (Q4_K and Q5_K: the units' copies). */             \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32_wg, 3, 100, 2, 130, 256, 5, 4, true, pad);         \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32_wg, 3, 160, 1, 37, 3 * kb, 1, 1, false, 0);        \
    /* The gate/up form, each activation: decode (top-8 of 16 experts from 5: repeats and empty experts), N past a */  \
    /* block's 8 rows; 3 tokens with bad ids, unaligned experts and the up weight 4 bytes off 16; a one-row N. */       \
    for (int a = 0; a < 2; ++a) {                                                                                      \
      run_id(F, kernel_mul_mv_id_##T##_f32_gate_up, kernel_mul_mm_id_##T##_f32, 0, 1, 8, 20, 2 * 256, 16, 5, false, 0, a); \
      run_id(F, kernel_mul_mv_id_##T##_f32_gate_up, kernel_mul_mm_id_##T##_f32, 0, 3, 2, 37, 256 + 3 * kb % 256, 6, 4, true, \
             pad, a, 4);                                                                                               \
      run_id(F, kernel_mul_mv_id_##T##_f32_gate_up, kernel_mul_mm_id_##T##_f32, 0, 2, 3, 1, 256, 4, 4, true, 0, a);    \
    }                                                                                                                  \
    /* The gate/up matrix forms: the tiles (partial tiles, bad ids), the few-pairs form (a short prompt's spread, */  \
    /* unaligned experts, the up weight 4 bytes off 16), the many-pairs form (unaligned experts; one expert of 160 */ \
    /* pairs aligned: Q4_K's and Q5_K's units' copies), each activation. */                                          \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32_gate_up, 1, 40, 2, 130, 256, 5, 3, true, 0, 0);   \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32_gate_up_few, 2, 16, 4, 37, 256 + 3 * kb % 256, 24, 20, \
           true, pad, 1, 4);                                                                                            \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32_gate_up_wg, 3, 100, 2, 130, 256, 5, 4, true, pad, 0); \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32_gate_up_wg, 3, 160, 1, 37, 3 * kb, 1, 1, false, 0, 1); \
  }
  ALL_FORMATS(ID)
  // Q4_K's group-column engine (aligned experts and x; the cases above with experts or the up weight off 16 bytes
  // take the vector engine): decode's gate/up at Gemma 4's k (11 super-blocks, so warps with 3 and 2 rounds) and a
  // partial tile; a down projection over pairs with bad ids and k of 3 super-blocks (a warp with none).
  run_id(Q4_K, kernel_mul_mv_id_q4_K_f32_gate_up, kernel_mul_mm_id_q4_K_f32, 0, 1, 8, 37, 2816, 8, 8, false, 0, 1);
  run_id(Q4_K, kernel_mul_mv_id_q4_K_f32_gate_up, kernel_mul_mm_id_q4_K_f32, 0, 2, 4, 20, 2048, 6, 6, true, 0, 0);
  run_id(Q4_K, kernel_mul_mv_id_q4_K_f32_gate_up_gc8, kernel_mul_mm_id_q4_K_f32, 0, 1, 8, 37, 2816, 8, 8, false, 0, 1, 0, 256);
  run_id(Q4_K, kernel_mul_mv_id_q4_K_f32_gate_up_gc8, kernel_mul_mm_id_q4_K_f32, 0, 2, 4, 20, 2048, 6, 6, true, 0, 0, 0, 256);
  run_gc8_refused();
  run_id(Q4_K, kernel_mul_mv_id_q4_K_f32, kernel_mul_mm_id_q4_K_f32, 0, 1, 8, 37, 2048, 16, 16, false, 0);
  run_id(Q4_K, kernel_mul_mv_id_q4_K_f32, kernel_mul_mm_id_q4_K_f32, 0, 8, 1, 100, 768, 6, 4, true, 0);
  // Q8_0's group-column engine (every vector case of Q8_0 above too, rows on 2 bytes at k 352 and with experts
  // 18 bytes apart): Gemma 4's expert down (k 704: 2 rounds and 6 blocks, a warp with none) over decode's 8 pairs,
  // N past a tile; 8 tokens with bad ids, experts 4 bytes off 16 and k 2112; the gate/up form at both k, its up
  // weight 4 bytes off 16.
  run_id(Q8_0, kernel_mul_mv_id_q8_0_f32, kernel_mul_mm_id_q8_0_f32, 0, 1, 8, 37, 704, 16, 16, false, 0);
  run_id(Q8_0, kernel_mul_mv_id_q8_0_f32, kernel_mul_mm_id_q8_0_f32, 0, 8, 1, 100, 2112, 6, 4, true, 4);
  run_id(Q8_0, kernel_mul_mv_id_q8_0_f32_gate_up, kernel_mul_mm_id_q8_0_f32, 0, 1, 8, 20, 704, 8, 8, false, 0, 0);
  run_id(Q8_0, kernel_mul_mv_id_q8_0_f32_gate_up, kernel_mul_mm_id_q8_0_f32, 0, 2, 4, 37, 2112, 6, 6, true, 4, 1, 4);
  // Q6_K's group-column engine (every vector case of Q6_K above too): Qwen3.6's expert down (k 512) over decode's
  // 8 pairs, N past a tile; 8 tokens with bad ids, experts 2 bytes off 4 (an odd number of super-blocks apart)
  // and k 2304; the gate/up form, its up weight 4 bytes off 16.
  run_id(Q6_K, kernel_mul_mv_id_q6_K_f32, kernel_mul_mm_id_q6_K_f32, 0, 1, 8, 37, 512, 16, 16, false, 0);
  run_id(Q6_K, kernel_mul_mv_id_q6_K_f32, kernel_mul_mm_id_q6_K_f32, 0, 8, 1, 100, 2304, 6, 4, true, 18);
  run_id(Q6_K, kernel_mul_mv_id_q6_K_f32_gate_up, kernel_mul_mm_id_q6_K_f32, 0, 1, 8, 20, 1280, 8, 8, false, 0, 0);
  run_id(Q6_K, kernel_mul_mv_id_q6_K_f32_gate_up, kernel_mul_mm_id_q6_K_f32, 0, 2, 4, 37, 512, 6, 6, true, 2, 1, 4);
  // The int8 vector form (ggmlIdI8Launch) of Q8_0 and Q6_K: Gemma 4's Q8_0 expert down (k 704) and Qwen3.6's Q6_K
  // one (k 512) over decode's 8 pairs, N past a unit of 8 rows, 3 blocks a pair walking its units; 8 tokens with
  // bad ids (rows of zeros), experts 4 (Q8_0) and 18 (Q6_K: 2 bytes off 4) bytes past their bytes, every unit a
  // block; rows on 2 bytes (Q8_0 at k 352).
  run_id(Q8_0, kernel_mul_mv_id_q8_0_f32_i8, kernel_mul_mm_id_q8_0_f32, 4, 1, 8, 37, 704, 16, 16, false, 0);
  run_id(Q8_0, kernel_mul_mv_id_q8_0_f32_i8, kernel_mul_mm_id_q8_0_f32, 5, 8, 1, 100, 2112, 6, 4, true, 4);
  run_id(Q8_0, kernel_mul_mv_id_q8_0_f32_i8, kernel_mul_mm_id_q8_0_f32, 4, 2, 3, 20, 352, 5, 5, true, 2);
  run_id(Q6_K, kernel_mul_mv_id_q6_K_f32_i8, kernel_mul_mm_id_q6_K_f32, 4, 1, 8, 37, 512, 16, 16, false, 0);
  run_id(Q6_K, kernel_mul_mv_id_q6_K_f32_i8, kernel_mul_mm_id_q6_K_f32, 5, 8, 1, 100, 2304, 6, 4, true, 18);
  // _i8r4 (4 rows a warp, the plan's up to 32 chunks a row): the decode shapes again, N not a multiple of a warp's 4
  // rows, bad ids; 9 rows (fewer than a unit) on 2 bytes at k 352 (11 chunks: lanes of a row idle); k 1024 (32 chunks,
  // the largest the plan gives it).
  run_id(Q8_0, kernel_mul_mv_id_q8_0_f32_i8r4, kernel_mul_mm_id_q8_0_f32, 6, 1, 8, 37, 704, 16, 16, true, 2);
  run_id(Q6_K, kernel_mul_mv_id_q6_K_f32_i8r4, kernel_mul_mm_id_q6_K_f32, 6, 1, 8, 70, 512, 9, 9, true, 18);
  run_id(Q8_0, kernel_mul_mv_id_q8_0_f32_i8r4, kernel_mul_mm_id_q8_0_f32, 6, 8, 1, 9, 352, 5, 5, true, 2);
  run_id(Q6_K, kernel_mul_mv_id_q6_K_f32_i8r4, kernel_mul_mm_id_q6_K_f32, 6, 2, 4, 33, 1024, 6, 6, false, 0);
  // The other formats' _i8r4 (harness variants): Qwen3.6's expert down shape (k 512) over 8 pairs with bad ids, and
  // rows on 2 bytes (Q4_0 at k 352; Q5_K's 176-byte blocks at k 768 with experts 18 bytes past theirs).
  run_id(Q4_K, kernel_mul_mv_id_q4_K_f32_i8r4, kernel_mul_mm_id_q4_K_f32, 6, 1, 8, 37, 512, 16, 16, true, 0);
  run_id(Q5_K, kernel_mul_mv_id_q5_K_f32_i8r4, kernel_mul_mm_id_q5_K_f32, 6, 1, 8, 37, 768, 9, 9, true, 18);
  run_id(Q4_0, kernel_mul_mv_id_q4_0_f32_i8r4, kernel_mul_mm_id_q4_0_f32, 6, 2, 4, 70, 352, 6, 6, false, 2);
  // The crate's swiglu: decode's 8 pairs (repeated experts, N past a block's 16 rows), bad ids with experts off
  // 16-byte alignment and a partial window, one row.
  run_swiglu(8, 37, 512, 12, 5, false, 0);
  run_swiglu(10, 20, 288, 6, 4, true, 18);
  run_swiglu(3, 1, 64, 3, 3, true, 0);
  std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
  return failures != 0;
}
