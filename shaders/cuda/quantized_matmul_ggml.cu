// GGUF block formats (CUDA), entry names and bindings as
// shaders/quantized_matmul_ggml.metal: y = x W^T with W [N, K] in GGML
// blocks (ts/ops/quantized_matmul_ggml.ts writes each layout down),
// whole-tensor dequantization and embedding rows. Grids are one-dimensional;
// the launches are the op's (ts/ops/quantized_matmul_ggml.ts, ggmlCudaLaunch).
//
// The decoders and the two engines live in shaders/cuda/common.cuh (the
// per-expert family quantized_matmul_id_ggml runs them too); this file holds
// the entries. One decoder per format reads the bytes of a chunk of 32 values of a row
// (raw_load: the block's scale words decoded into a and b, the quant bytes
// kept as loaded) and unpacks either half of it (unpack16): 16 values q as
// bytes, w = a * q + b with a, b the half's scale and offset in f32. From
// there every kernel finishes alike: floats (fmaf(a, q, b), one rounding),
// or packed f16 pairs for the tensor cores (pairs16): the byte q (0-255,
// Q8_0's with its offset) and the exponent byte of 1024 make the f16
// 1024 + q in one byte_perm, 1024 is taken off exactly and one packed fma
// applies a and b (each rounded to f16, the product rounded once). f16, not
// bf16: the weight keeps 11 bits as Metal's matrix stage does (ggml_t in
// common.cuh says what that bought).
//
// Engines:
//   vector (kernel_mul_mv_<t>_f32): 128 threads (4 warps) over 16 weight
//     rows. A warp takes windows of 256 values of k (one K super-block, 8
//     Q4_0 / Q8_0 blocks): warp w windows w, w + 4, ...; it copies the 16
//     rows' bytes of a window into its own shared stage by cp.async in
//     16-byte units (from the row's address rounded down to 16 bytes), the
//     next two windows' copies in flight while it computes one. Lane (g, t) =
//     (lane / 4, lane % 4) decodes 64 values (two chunks) of rows g and g + 8
//     from the stage as f16 pairs (Q4_K / Q5_K from a 16-byte aligned
//     weight: its bytes of a row's super-block in 16-byte loads, kq_load; Q4_0
//     and Q8_0 from word-aligned rows in word loads, qs_raw; Q6_K in word loads
//     realigned by byte_perm, q6_raw); x (tokens as the mma's n = 8, up to 8 at
//     a time) is read as float4 and rounded to f16; mma.sync m16n8k16 with
//     f32 accumulators. Any order of k works where A and B agree: lane t's
//     four k positions of each mma are values 4j .. 4j + 3 of its own 16.
//     The warps' sums meet in shared memory.
//   group-column (one token of Q4_K, Q8_0 and Q6_K, the vector entries;
//     gmv_gc_q4k, gmv_gc_q8_0, gmv_gc_q6k in common.cuh): the codes as
//     16-bit numbers with the format's scale groups as the mma's 8 columns,
//     on the vector engine's grid (see the entries below for when each runs).
//   int8 (one token of Q8_0 and Q6_K where the op names the _i8 entries,
//     ggmlI8Takes; common.cuh's gdq over its i8_mv): x rounded to int8 a
//     chunk of 32 values into shared memory, a warp a weight row whose codes
//     it reads straight from memory (4 items a lane in flight) and multiplies
//     by dp4a, a persistent grid of 256-thread blocks; Q6_K's _i8g (many
//     rows) a super-block a group of 8 lanes, 4 rows a warp (GdqQ6Group).
//   vector, 2 tokens and more (kernel_mul_mv_<t>_f32_xs where the op names
//     them; gmv_xs in common.cuh): the vector engine's decode and mma on 64
//     rows a block, each window's x for 8 tokens staged once a block as f16.
//   matrix (kernel_mul_mm_<t>_f32): the tile shapes of dense.cu
//     (denseMmCudaTile: 128 x 256 by 8 warps or 64 x 128 by 4), 32-wide k
//     stages in two shared buffers: while the warps multiply one, each
//     thread holds the next in registers (8 values of x rounded to f16 per
//     piece, and the bytes of its weight row's chunk: thread i owns row
//     n0 + i) and parks it, decoded to f16, after the step's mmas; ldmatrix,
//     mma.sync with f32 accumulators.
//   dequantize and embedding: a thread per chunk of 32 values, the grid
//     striding over them; values in f32, rounded once to the output type.

namespace {

// A block of the matrix form: the tile shape by block size (the op's
// denseMmCudaTile: 256 threads 128 x 256, 128 threads 64 x 128). Unsplit
// (kernel_mul_mm_<t>_f32), block i takes tile i and the whole k into y.
// Split k (kernel_mul_mm_<t>_f32_splitk), block i takes tile i / S and
// slice s = i % S of k, chunks of 32 values s C .. min(s C + C, K / 32) - 1
// (the op plans no empty slice); it writes the slice's partial tile to
// partials + s M N, then split_reduce sums the tile's S partials into y.
template <int F, bool SPLIT>
__device__ __forceinline__ void gmm(const GgmlMatmulMmParams* p, const unsigned char* w, const float* x, float* y, float* partials,
                                    u32* words, const GgmlMatmulSplitParams* sp) {
    const u32 K = u32(p->ne00), N = u32(p->ne0), M = u32(p->ne1);
    const u32 S = SPLIT ? sp->splits : 1u, C = SPLIT ? sp->chunks : K / 32u;
    const u32 tile = SPLIT ? blockIdx.x / S : blockIdx.x, s = SPLIT ? blockIdx.x % S : 0u;
    const u32 kt0 = s * C, kts = SPLIT ? min(C, K / 32u - kt0) : C;
    float* out = SPLIT ? partials + u64(s) * M * N : y;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    u32 b, m0, n0;
    auto rows = [&](u32 r, u32& row) {
        row = m0 + r;
        return row < M;
    };
    if (blockDim.x == 256) {
        tile_of<128, 256>(M, N, b, m0, n0, tile);
        gmm_tile<F, 128, 256, 2, 4>(smem_raw, w, x, out, N, kt0, kts, p->nb01, p->nb11 / 4u, u64(N), n0, rows, rows);
        if constexpr (SPLIT) split_reduce<128, 256>(partials, words + tile, y, u64(N), M, N, m0, n0, S);
    } else {
        tile_of<64, 128>(M, N, b, m0, n0, tile);
        gmm_tile<F, 64, 128, 2, 2>(smem_raw, w, x, out, N, kt0, kts, p->nb01, p->nb11 / 4u, u64(N), n0, rows, rows);
        if constexpr (SPLIT) split_reduce<64, 128>(partials, words + tile, y, u64(N), M, N, m0, n0, S);
    }
}

// ---- dequantization and embedding rows ----

// 32 floats rounded to O and stored at p (16-byte vectors where p is aligned).
template <typename O>
__device__ __forceinline__ void store32(O* p, const float (&v)[32]) {
    if (aligned16(p)) {
        store_elems<O, 32>(p, v);
    } else {
#pragma unroll
        for (int i = 0; i < 32; ++i) p[i] = from_f<O>(v[i]);
    }
}

// Chunks of 32 values, the grid striding over them: chunk i of `rows` rows
// of `per_row` chunks reads row map(r) of src (rows rb bytes apart) and
// writes dst + (r * per_row + c) * 32, times scale.
template <int F, typename O, typename Map>
__device__ __forceinline__ void deq_rows(const unsigned char* src, O* dst, u64 rb, u32 rows, u32 per_row, float scale, Map map) {
    const u64 total = u64(rows) * per_row, step = u64(gridDim.x) * blockDim.x;
    for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
        const u32 r = u32(i / per_row), c = u32(i % per_row);
        GgmlRaw raw;
        raw_load<F>(src + u64(map(r)) * rb, c, raw);
        float v[32];
#pragma unroll
        for (u32 h = 0; h < 2; ++h) {
            float w16[16];
            deq16<F>(raw, h, w16);
#pragma unroll
            for (int j = 0; j < 16; ++j) v[16 * h + j] = w16[j] * scale;
        }
        store32(dst + i * 32u, v);
    }
}

template <int F, typename O>
__device__ __forceinline__ void dequantize(const unsigned char* src, O* dst, const GgmlDequantizeParams* p) {
    // The tensor as one row of n_chunks / 2 chunks of 32 (a block holds an even number of 16-value chunks).
    deq_rows<F, O>(src, dst, 0u, 1u, p->n_chunks / 2u, 1.0f, [](u32) { return 0u; });
}

template <int F, typename O>
__device__ __forceinline__ void embedding(const unsigned char* table, const u32* ids, O* out, const GgmlEmbeddingParams* p) {
    const u32 last = p->vocab_size - 1u;
    deq_rows<F, O>(table, out, ggml_row_bytes<F>(p->hidden_size), p->n_tokens, p->hidden_size / 32u, p->scale,
                   [&](u32 r) { return min(ids[r], last); });
}

// ---- Q4_K at one token: the group-column engine ----

// kernel_mul_mv_q4_K_f32 runs the prelude's gmv_gc_q4k (shaders/cuda/common.cuh)
// for one token (gc_q4k_takes; W = 4, so its grid is the vector engine's),
// and at W = 2 and 4 the harness variants kernel_mul_mv_q4_K_f32_vgc<W>.
// The entry's choice, made alike by ts/ops/quantized_matmul_ggml.ts
// (ggmlGcTakes, ggmlMatmulCudaLaunch's shared memory).
__device__ __forceinline__ bool gc_q4k_takes(const void* w, const float* x, u32 M, u32 K) {
    return M == 1u && gc_q4k_shared(K) <= GC_MAX_SHARED && aligned16(w) && aligned16(x);
}

// kernel_mul_mv_q8_0_f32 and kernel_mul_mv_q6_K_f32 run the prelude's
// gmv_gc_q8_0 / gmv_gc_q6k for one token where x's copy fits
// (gc_q8_0_takes, gc_q6k_takes; W = 4, the vector engine's grid), the choice
// made alike by ggmlGcTakes and ggmlMatmulCudaLaunch's shared memory.

}  // namespace

#if MLXN_CUDA_PART_IS(0)
// ---- kernel_mul_mv_<t>_f32 ----

// buffer(0) weight (N rows of blocks), (1) x [M, K] f32, (2) y [M, N] f32, (3) GgmlMatvecParams.
// Bounds of 4 blocks an SM (128 registers): the decoders' unrolled loads
// without spills (97-128 registers by format); shared memory allows 3 (Q8_0)
// to 6 (Q4_0, Q4_K) blocks.
#define GGML_MV_ENTRY(NAME, F)                                                                                        \
    extern "C" __global__ void __launch_bounds__(128, 4) NAME(const unsigned char* src0, const float* src1, float* dst,  \
                                                           const GgmlMatvecParams* p) {                              \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                                   \
        if (F == GGML_Q4_K && gc_q4k_takes(src0, src1, u32(p->ne1), u32(p->ne00))) {                                \
            gmv_gc_q4k<4>(src0, src1, dst, u32(p->ne01), u32(p->ne00), blockIdx.x);                                             \
            return;                                                                                                  \
        }                                                                                                            \
        if (F == GGML_Q8_0 && p->ne1 == 1 && gc_q8_0_takes(u32(p->ne00))) {                                           \
            gmv_gc_q8_0<4>(smem_raw, src0, src1, dst, u32(p->ne01), u32(p->ne00), blockIdx.x);                                   \
            return;                                                                                                  \
        }                                                                                                            \
        if (F == GGML_Q6_K && p->ne1 == 1 && gc_q6k_takes(u32(p->ne00))) {                                            \
            gmv_gc_q6k<4>(smem_raw, src0, src1, dst, u32(p->ne01), u32(p->ne00), blockIdx.x);                                    \
            return;                                                                                                  \
        }                                                                                                            \
        gmv<F>(smem_raw, src0, src1, dst, u32(p->ne1), u32(p->ne01), u32(p->ne00), p->ne10, p->ne0, blockIdx.x * 16u); \
    }
GGML_MV_ENTRY(kernel_mul_mv_q4_0_f32, GGML_Q4_0)
GGML_MV_ENTRY(kernel_mul_mv_q8_0_f32, GGML_Q8_0)
GGML_MV_ENTRY(kernel_mul_mv_q4_K_f32, GGML_Q4_K)
GGML_MV_ENTRY(kernel_mul_mv_q5_K_f32, GGML_Q5_K)
GGML_MV_ENTRY(kernel_mul_mv_q6_K_f32, GGML_Q6_K)

// kernel_mul_mv_q4_K_f32_gc8 (not in mlx-native; kernel_mul_mv_q4_K_f32's
// bindings): one token of Q4_K on the group-column engine with 8 warps a
// 16-row tile (gmv_gc_q4k<8>), a tile a block of 256 threads: grid ceil(N /
// 16), dynamic shared memory gc_q4k_shared(K). The op launches it for
// products of few tiles (ts: ggmlGc8Takes), where 4 warps a tile leave the
// SMs short of loads in flight, and only where the engine takes the product
// (every view starts on 16 bytes; ggmlGcTakes mirrors the shared memory).
// Where it would not, the block's rows are written as NaN: a launch outside
// the op's plan shows in its output instead of reading out of bounds.
extern "C" __global__ void __launch_bounds__(256, 2) kernel_mul_mv_q4_K_f32_gc8(const unsigned char* src0, const float* src1,
                                                                              float* dst, const GgmlMatvecParams* p) {
    if (!gc_q4k_takes(src0, src1, u32(p->ne1), u32(p->ne00)) || blockDim.x != 256u) {
        const u32 r = blockIdx.x * 16u + threadIdx.x;
        if (threadIdx.x < 16u && r < u32(p->ne01)) dst[r] = __int_as_float(0x7fc00000);
        return;
    }
    gmv_gc_q4k<8>(src0, src1, dst, u32(p->ne01), u32(p->ne00), blockIdx.x);
}
#endif

// The int8 engine (gdq<F, R, S, U>) as an entry of the vector form's
// bindings. Grid: any (a block walks units of 8 / S x R rows; two blocks an
// SM cover the rows without a wave tail), 256 threads, dynamic shared memory
// M x K + M x K / 32 x 8 + 2 x 8 x R x 8 x 4 bytes.
#define GGML_MV_DQ_ENTRY(NAME, F, R, S, U)                                                                          \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME(const unsigned char* src0, const float* src1, float* dst, \
                                                           const GgmlMatvecParams* p) {                              \
        gdq<F, R, S, U>(src0, src1, dst, u32(p->ne1), u32(p->ne01), u32(p->ne00), p->ne10, p->ne0);                \
    }
// Q6_K with a super-block a group of 8 lanes (GdqQ6Group): 4 rows a warp, U super-blocks a lane in flight.
#define GGML_MV_DQ6G_ENTRY(NAME, U)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME(const unsigned char* src0, const float* src1, float* dst, \
                                                           const GgmlMatvecParams* p) {                              \
        gdq_items<GdqQ6Group, GGML_Q6_K, 4, 1, U>(src0, src1, dst, u32(p->ne1), u32(p->ne01), u32(p->ne00), p->ne10,  \
                                                 p->ne0);                                                            \
    }

#if MLXN_CUDA_PART_IS(7)
// kernel_mul_mv_q8_0_f32's and kernel_mul_mv_q6_K_f32's launch for one token
// where the op names it (ggmlI8Takes; their CUDA entries <kernel>_i8, another
// launch of the same bindings): the int8 engine, x rounded to int8 a chunk of
// 32 values as llama.cpp's vector products round it (ggmlMatmulCudaLaunch).
// A warp a row, 4 items a lane in flight (_vdq1's shape). Q6_K's _i8g: a
// super-block a group of 8 lanes, 4 rows a warp (GdqQ6Group), 4 super-blocks
// a lane in flight, where the rows are many (the output projections).
GGML_MV_DQ_ENTRY(kernel_mul_mv_q8_0_f32_i8, GGML_Q8_0, 1, 1, 4)
GGML_MV_DQ_ENTRY(kernel_mul_mv_q6_K_f32_i8, GGML_Q6_K, 1, 1, 4)
GGML_MV_DQ6G_ENTRY(kernel_mul_mv_q6_K_f32_i8g, 4)
#endif

#if MLXN_CUDA_PART_IS(8)
// kernel_mul_mv_<t>_f32's launch from 2 tokens (its CUDA entries <kernel>_xs,
// another launch of the same bindings, ggmlMatmulCudaLaunch): the vector
// engine with x staged once a block of 64 rows (gmv_xs), the same sums as
// the kernel's own entry in another order.
#define GGML_MV_XS_ENTRY(NAME, F)                                                                                     \
    extern "C" __global__ void __launch_bounds__(128, 4) NAME(const unsigned char* src0, const float* src1, float* dst,  \
                                                           const GgmlMatvecParams* p) {                              \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                                   \
        gmv_xs<F>(smem_raw, src0, src1, dst, u32(p->ne1), u32(p->ne01), u32(p->ne00), p->ne10, p->ne0, blockIdx.x);  \
    }
GGML_MV_XS_ENTRY(kernel_mul_mv_q4_0_f32_xs, GGML_Q4_0)
GGML_MV_XS_ENTRY(kernel_mul_mv_q8_0_f32_xs, GGML_Q8_0)
GGML_MV_XS_ENTRY(kernel_mul_mv_q4_K_f32_xs, GGML_Q4_K)
GGML_MV_XS_ENTRY(kernel_mul_mv_q5_K_f32_xs, GGML_Q5_K)
GGML_MV_XS_ENTRY(kernel_mul_mv_q6_K_f32_xs, GGML_Q6_K)
#undef GGML_MV_XS_ENTRY
#endif

#if MLXN_CUDA_PART_IS(6)
// The int8 engine's harness variants, which the op does not launch (bench/qmv_variants.ts):
//   _vdq1:  a warp a row, 4 items a lane in flight (Q5_K 3: 4 spill),
//           for Qwen3.6 / Gemma 4 up (the _i8 entries' shape).
//   _vdq2:  a warp two rows, 2 items a lane in flight.
//   _vdqs4: four warps a row (its items split four ways), 3 in flight: at
//           k = 17408 (the down projections) a warp's share of a row
//           (68 Q4_K items, 136 of 32 values) in one or two rounds.
#define GGML_MV_DQ_ENTRIES(T, F)                                    \
    GGML_MV_DQ_ENTRY(kernel_mul_mv_##T##_f32_vdq1, F, 1, 1, F == GGML_Q5_K ? 3 : 4) \
    GGML_MV_DQ_ENTRY(kernel_mul_mv_##T##_f32_vdq2, F, 2, 1, 2)      \
    GGML_MV_DQ_ENTRY(kernel_mul_mv_##T##_f32_vdqs4, F, 1, 4, 3)
GGML_MV_DQ_ENTRIES(q4_0, GGML_Q4_0)
GGML_MV_DQ_ENTRIES(q8_0, GGML_Q8_0)
GGML_MV_DQ_ENTRIES(q4_K, GGML_Q4_K)
GGML_MV_DQ_ENTRIES(q5_K, GGML_Q5_K)
GGML_MV_DQ_ENTRIES(q6_K, GGML_Q6_K)
#undef GGML_MV_DQ_ENTRIES

#define GGML_MV_GC_ENTRY(W)                                                                                                  \
    extern "C" __global__ void __launch_bounds__(128, 4) kernel_mul_mv_q4_K_f32_vgc##W(const unsigned char* src0, const float* src1, \
                                                                                     float* dst, const GgmlMatvecParams* p) {  \
        gmv_gc_q4k<W>(src0, src1, dst, u32(p->ne01), u32(p->ne00), blockIdx.x);                                                          \
    }
GGML_MV_GC_ENTRY(2)
GGML_MV_GC_ENTRY(4)
#undef GGML_MV_GC_ENTRY

#endif
#undef GGML_MV_DQ_ENTRY

// ---- kernel_mul_mm_<t>_f32 ----

// buffer(0) GgmlMatmulMmParams, (1) weight (rows nb01 bytes apart), (2) x [M, K] f32 (rows nb11 bytes
// apart), (3) y [M, N] f32 (rows ne0 apart).
#define GGML_MM_ENTRY(NAME, F)                                                                                           \
    extern "C" __global__ void __launch_bounds__(256) NAME(const GgmlMatmulMmParams* args, const unsigned char* src0,   \
                                                           const float* src1, float* dst) {                             \
        gmm<F, false>(args, src0, src1, dst, nullptr, nullptr, nullptr);                                                \
    }
#if MLXN_CUDA_PART_IS(1)
GGML_MM_ENTRY(kernel_mul_mm_q4_0_f32, GGML_Q4_0)
#endif
#if MLXN_CUDA_PART_IS(2)
GGML_MM_ENTRY(kernel_mul_mm_q8_0_f32, GGML_Q8_0)
#endif
#if MLXN_CUDA_PART_IS(3)
GGML_MM_ENTRY(kernel_mul_mm_q4_K_f32, GGML_Q4_K)
#endif
#if MLXN_CUDA_PART_IS(4)
GGML_MM_ENTRY(kernel_mul_mm_q5_K_f32, GGML_Q5_K)
#endif
#if MLXN_CUDA_PART_IS(5)
GGML_MM_ENTRY(kernel_mul_mm_q6_K_f32, GGML_Q6_K)
#endif

// kernel_mul_mm_<t>_f32_splitk: the matrix form's bindings, then (4)
// partials [S, M, N] f32, (5) words (a u32 a tile, zero), (6)
// GgmlMatmulSplitParams; grid tiles x S blocks of the matrix form's size.
#define GGML_MM_SPLIT_ENTRY(NAME, F)                                                                                        \
    extern "C" __global__ void __launch_bounds__(256) NAME(const GgmlMatmulMmParams* args, const unsigned char* src0,      \
                                                           const float* src1, float* dst, float* partials, u32* words,    \
                                                           const GgmlMatmulSplitParams* split) {                          \
        gmm<F, true>(args, src0, src1, dst, partials, words, split);                                                       \
    }
#if MLXN_CUDA_PART_IS(1)
GGML_MM_SPLIT_ENTRY(kernel_mul_mm_q4_0_f32_splitk, GGML_Q4_0)
#endif
#if MLXN_CUDA_PART_IS(2)
GGML_MM_SPLIT_ENTRY(kernel_mul_mm_q8_0_f32_splitk, GGML_Q8_0)
#endif
#if MLXN_CUDA_PART_IS(3)
GGML_MM_SPLIT_ENTRY(kernel_mul_mm_q4_K_f32_splitk, GGML_Q4_K)
#endif
#if MLXN_CUDA_PART_IS(4)
GGML_MM_SPLIT_ENTRY(kernel_mul_mm_q5_K_f32_splitk, GGML_Q5_K)
#endif
#if MLXN_CUDA_PART_IS(5)
GGML_MM_SPLIT_ENTRY(kernel_mul_mm_q6_K_f32_splitk, GGML_Q6_K)
#endif
#undef GGML_MM_SPLIT_ENTRY

#if MLXN_CUDA_PART_IS(0)
// ---- kernel_dequantize_<t>_<o> ----

// buffer(0) src (blocks), (1) dst [16 n_chunks], (2) GgmlDequantizeParams.
#define GGML_DEQUANTIZE_ENTRY(NAME, F, O)                                                                     \
    extern "C" __global__ void NAME(const unsigned char* src, O* dst, const GgmlDequantizeParams* p) {      \
        dequantize<F, O>(src, dst, p);                                                                      \
    }
#define GGML_DEQUANTIZE_ENTRIES(T, F)                             \
    GGML_DEQUANTIZE_ENTRY(kernel_dequantize_##T##_f32, F, float)  \
    GGML_DEQUANTIZE_ENTRY(kernel_dequantize_##T##_f16, F, __half) \
    GGML_DEQUANTIZE_ENTRY(kernel_dequantize_##T##_bf16, F, bf16)
GGML_DEQUANTIZE_ENTRIES(q4_0, GGML_Q4_0)
GGML_DEQUANTIZE_ENTRIES(q8_0, GGML_Q8_0)
GGML_DEQUANTIZE_ENTRIES(q4_K, GGML_Q4_K)
GGML_DEQUANTIZE_ENTRIES(q5_K, GGML_Q5_K)
GGML_DEQUANTIZE_ENTRIES(q6_K, GGML_Q6_K)

// ---- embedding_gather_scale_batch_<t>_to_<o> ----

// buffer(0) table [vocab_size rows of blocks], (1) token_ids [n_tokens] u32, (2) output
// [n_tokens, hidden_size], (3) GgmlEmbeddingParams.
#define GGML_EMBEDDING_ENTRY(NAME, F, O)                                                                                         \
    extern "C" __global__ void NAME(const unsigned char* table, const u32* token_ids, O* output, const GgmlEmbeddingParams* p) { \
        embedding<F, O>(table, token_ids, output, p);                                                                          \
    }
#define GGML_EMBEDDING_ENTRIES(T, F)                                                 \
    GGML_EMBEDDING_ENTRY(embedding_gather_scale_batch_##T##_to_f32, F, float)        \
    GGML_EMBEDDING_ENTRY(embedding_gather_scale_batch_##T##_to_f16, F, __half)       \
    GGML_EMBEDDING_ENTRY(embedding_gather_scale_batch_##T##_to_bf16, F, bf16)
GGML_EMBEDDING_ENTRIES(q4_0, GGML_Q4_0)
GGML_EMBEDDING_ENTRIES(q8_0, GGML_Q8_0)
GGML_EMBEDDING_ENTRIES(q4_K, GGML_Q4_K)
GGML_EMBEDDING_ENTRIES(q5_K, GGML_Q5_K)
GGML_EMBEDDING_ENTRIES(q6_K, GGML_Q6_K)
#endif
