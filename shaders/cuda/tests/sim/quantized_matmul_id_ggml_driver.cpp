// The quantized_matmul_id_ggml family's CUDA kernels
// (shaders/cuda/quantized_matmul_id_ggml.cu) on the CPU simulation
// (sim_runtime.h), against a float64 dequantization written from the layouts
// (ggml_blocks.h), at the launches of ts/ops/quantized_matmul_id_ggml.ts
// (ggmlIdMvCudaLaunch, ggmlIdMmCudaLaunch, written out again below): the
// vector form (one token, several, a down projection over pairs; rows past
// N; experts whose rows are 16-byte aligned and experts that are not, so each
// format's aligned and unaligned stage reads) and the matrix form over a
// grouping of the pairs by expert written here as moe_dispatch_sort's
// (partial tiles, experts without pairs, several tiles of one expert). Ids
// past the experts must give rows of exact zeros. Products: |got - want| /
// sum |x w| under f16's 1e-3 (the tensor cores take the weight and x in
// f16). run.sh builds and runs it.
#include "sim_kernels.h"  // build.py's output
#include "sim_util.h"
#include "ggml_blocks.h"
#include <string>

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

// T tokens x U slots of E experts of N rows of K values, expert e at e * (expert bytes + pad) bytes of a
// 16-byte aligned weight; ids below `used`, every fifth pair past the experts where `bad`.
template <class MV, class MM>
void run_id(int f, MV mv, MM mm, bool matrix, u32 T, u32 U, u32 N, u32 K, u32 E, u32 used, bool bad, u32 pad) {
  const u64 rb = u64(K) / qk_of(f) * bytes_of(f), eb = rb * N, stride = eb + pad;
  const u32 P = T * U;
  std::vector<unsigned char> wraw((E - 1) * stride + eb + 32);
  unsigned char* w = wraw.data() + ((16 - (reinterpret_cast<uintptr_t>(wraw.data()) & 15)) & 15);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : wraw) b = (unsigned char)byte(gen);
  for (u32 e = 0; e < E; ++e) random_blocks(f, w + e * stride, size_t(N) * K / qk_of(f));
  std::vector<u32> ids(P);
  std::uniform_int_distribution<u32> pick(0, used - 1);
  for (u32 p = 0; p < P; ++p) ids[p] = bad && p % 5 == 3 ? E + 1000 * p : pick(gen);
  Arr<u32> idv(P);
  for (u32 p = 0; p < P; ++p) idv.p[p] = ids[p];
  Arr<float> x(size_t(T) * K), y(size_t(P) * N);
  x.random();
  y.poison();
  const std::string what = std::string(matrix ? "mm_id " : "mv_id ") + fmt_name(f) + " T=" + std::to_string(T) + " U=" + std::to_string(U) +
                           " N=" + std::to_string(N) + " K=" + std::to_string(K) + " E=" + std::to_string(E) +
                           (pad ? " stride +" + std::to_string(pad) : "") + (bad ? " bad ids" : "");
  if (!matrix) {
    GgmlMatvecIdParams p{{K, N, E, K, 1, N, P, 1, 1}, U, T, stride};
    const u32 sp = 16 * ((256 / qk_of(f) * bytes_of(f) + 30 + 15) / 16);
    sim_launch({P * cdiv(N, 16), 1, 1}, {128, 1, 1}, 4 * 3 * 16 * sp + 4 * 128 * 4, [&] { mv(w, x.p, y.p, idv.p, &p); });
  } else {
    std::vector<u32> offsets, order;
    group_pairs(ids, E, offsets, order);
    Arr<u32> off(E + 2), ord(P);
    for (u32 i = 0; i < E + 2; ++i) off.p[i] = offsets[i];
    for (u32 i = 0; i < P; ++i) ord.p[i] = order[i];
    GgmlMatmulIdMm_MmParams p{};
    p.ne00 = int(K); p.ne02 = int(E); p.nb01 = rb; p.nb02 = stride; p.ne11 = int(U); p.nb10 = 4; p.nb11 = 0; p.nb12 = 4ull * K;
    p.ne20 = int(U); p.ne21 = int(T); p.ne0 = int(N); p.ne1 = int(U); p.r2 = 1; p.r3 = 1;
    const u32 slots = P / 64 + E + 1;
    sim_launch({slots * cdiv(N, 128), 1, 1}, {128, 1, 1}, 2 * (64 + 128) * 40 * 2, [&] { mm(&p, w, x.p, off.p, ord.p, y.p); });
  }
  double worst = 0;
  for (u32 q = 0; q < P; ++q)
    for (u32 j = 0; j < N; ++j) {
      double e;
      if (ids[q] >= E) {
        e = y.at(size_t(q) * N + j) == 0.0 ? 0.0 : INFINITY;
      } else {
        double s = 0, a = 0;
        for (u32 k = 0; k < K; ++k) {
          const double pr = x.at(size_t(q / U) * K + k) * wat(f, w + ids[q] * stride, rb, j, k);
          s += pr;
          a += std::fabs(pr);
        }
        e = std::fabs(y.at(size_t(q) * N + j) - s) / a;
      }
      if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
    }
  report(worst <= 1e-3, what, worst, 1e-3);
}

#define ALL_FORMATS(X) X(Q4_0, q4_0) X(Q8_0, q8_0) X(Q4_K, q4_K) X(Q5_K, q5_K) X(Q6_K, q6_K)

int main() {
#define ID(F, T)                                                                                                       \
  {                                                                                                                    \
    const u32 kb = qk_of(F) == 32 ? 32 : 256;                                                                          \
    const u32 pad = F == Q4_K || F == Q5_K ? 20 : 18; /* experts off 16-byte alignment, as the op allows */           \
    /* The vector form: one token of top-8 over 16 experts; 3 tokens, bad ids, unaligned experts, a partial window; */ \
    /* a down projection over pairs. */                                                                                \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32, false, 1, 8, 20, 2 * 256, 16, 16, false, 0);       \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32, false, 3, 2, 37, 256 + 3 * kb % 256, 6, 4, true, pad); \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32, false, 6, 1, 16, 256, 4, 4, true, 0);              \
    /* The matrix form: partial tiles, experts without pairs, bad ids; an expert with more than a tile of pairs. */    \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32, true, 40, 2, 130, 256, 5, 3, true, 0);             \
    run_id(F, kernel_mul_mv_id_##T##_f32, kernel_mul_mm_id_##T##_f32, true, 70, 1, 37, 2 * kb, 3, 1, false, pad);       \
  }
  ALL_FORMATS(ID)
  std::printf("%s\n", failures == 0 ? "all passed" : "FAILURES");
  return failures != 0;
}
