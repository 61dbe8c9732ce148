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
// or packed bf16 pairs for the tensor cores (pairs16): for q < 128 the byte
// and the exponent byte of 128 make the bf16 128 + q in one byte_perm,
// 128 is taken off exactly and one packed fma applies a and b (each rounded
// to bf16, the product rounded once); Q8_0's bytes (0-255 with the offset)
// go through f32 instead.
//
// Engines:
//   vector (kernel_mul_mv_<t>_f32): 128 threads (4 warps) over 16 weight
//     rows. A warp takes windows of 256 values of k (one K super-block, 8
//     Q4_0 / Q8_0 blocks): warp w windows w, w + 4, ...; it copies the 16
//     rows' bytes of a window into its own shared stage by cp.async in
//     16-byte units (from the row's address rounded down to 16 bytes), the
//     next two windows' copies in flight while it computes one. Lane (g, t) =
//     (lane / 4, lane % 4) decodes 64 values (two chunks) of rows g and g + 8
//     from the stage as bf16 pairs (Q4_K / Q5_K from a 16-byte aligned
//     weight: its bytes of a row's super-block in 16-byte loads, kq_load; Q4_0
//     and Q8_0 from word-aligned rows in word loads, qs_raw; Q6_K in word loads
//     realigned by byte_perm, q6_raw); x (tokens as the mma's n = 8, up to 8 at
//     a time) is read as float4 and rounded to bf16; mma.sync m16n8k16 with
//     f32 accumulators. Any order of k works where A and B agree: lane t's
//     four k positions of each mma are values 4j .. 4j + 3 of its own 16.
//     The warps' sums meet in shared memory.
//   matrix (kernel_mul_mm_<t>_f32): the tile shapes of dense.cu
//     (denseMmCudaTile: 128 x 256 by 8 warps or 64 x 128 by 4), 32-wide k
//     stages in two shared buffers: while the warps multiply one, each
//     thread holds the next in registers (8 values of x rounded to bf16 per
//     piece, and the bytes of its weight row's chunk: thread i owns row
//     n0 + i) and parks it, decoded to bf16, after the step's mmas; ldmatrix,
//     mma.sync with f32 accumulators.
//   dequantize and embedding: a thread per chunk of 32 values, the grid
//     striding over them; values in f32, rounded once to the output type.

namespace {

// The tile shape by block size (the op's denseMmCudaTile): 256 threads 128 x 256, 128 threads 64 x 128.
template <int F>
__device__ __forceinline__ void gmm(const GgmlMatmulMmParams* p, const unsigned char* w, const float* x, float* y) {
    const u32 K = u32(p->ne00), N = u32(p->ne0), M = u32(p->ne1);
    extern __shared__ __align__(16) unsigned char smem_raw[];
    u32 b, m0, n0;
    auto rows = [&](u32 r, u32& row) {
        row = m0 + r;
        return row < M;
    };
    if (blockDim.x == 256) {
        tile_of<128, 256>(M, N, b, m0, n0);
        gmm_tile<F, 128, 256, 2, 4>(smem_raw, w, x, y, N, K, p->nb01, p->nb11 / 4u, u64(p->ne0), n0, rows, rows);
    } else {
        tile_of<64, 128>(M, N, b, m0, n0);
        gmm_tile<F, 64, 128, 2, 2>(smem_raw, w, x, y, N, K, p->nb01, p->nb11 / 4u, u64(p->ne0), n0, rows, rows);
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

}  // namespace

// ---- kernel_mul_mv_<t>_f32 ----

// buffer(0) weight (N rows of blocks), (1) x [M, K] f32, (2) y [M, N] f32, (3) GgmlMatvecParams.
// Bounds of 4 blocks an SM (128 registers): the decoders' unrolled loads
// without spills (97-128 registers by format); shared memory allows 3 (Q8_0)
// to 6 (Q4_0, Q4_K) blocks.
#define GGML_MV_ENTRY(NAME, F)                                                                                        \
    extern "C" __global__ void __launch_bounds__(128, 4) NAME(const unsigned char* src0, const float* src1, float* dst,  \
                                                           const GgmlMatvecParams* p) {                              \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                                   \
        gmv<F>(smem_raw, src0, src1, dst, u32(p->ne1), u32(p->ne01), u32(p->ne00), p->ne10, p->ne0, blockIdx.x * 16u); \
    }
GGML_MV_ENTRY(kernel_mul_mv_q4_0_f32, GGML_Q4_0)
GGML_MV_ENTRY(kernel_mul_mv_q8_0_f32, GGML_Q8_0)
GGML_MV_ENTRY(kernel_mul_mv_q4_K_f32, GGML_Q4_K)
GGML_MV_ENTRY(kernel_mul_mv_q5_K_f32, GGML_Q5_K)
GGML_MV_ENTRY(kernel_mul_mv_q6_K_f32, GGML_Q6_K)

// ---- kernel_mul_mm_<t>_f32 ----

// buffer(0) GgmlMatmulMmParams, (1) weight (rows nb01 bytes apart), (2) x [M, K] f32 (rows nb11 bytes
// apart), (3) y [M, N] f32 (rows ne0 apart).
#define GGML_MM_ENTRY(NAME, F)                                                                                           \
    extern "C" __global__ void __launch_bounds__(256) NAME(const GgmlMatmulMmParams* args, const unsigned char* src0,   \
                                                           const float* src1, float* dst) {                             \
        gmm<F>(args, src0, src1, dst);                                                                                  \
    }
GGML_MM_ENTRY(kernel_mul_mm_q4_0_f32, GGML_Q4_0)
GGML_MM_ENTRY(kernel_mul_mm_q8_0_f32, GGML_Q8_0)
GGML_MM_ENTRY(kernel_mul_mm_q4_K_f32, GGML_Q4_K)
GGML_MM_ENTRY(kernel_mul_mm_q5_K_f32, GGML_Q5_K)
GGML_MM_ENTRY(kernel_mul_mm_q6_K_f32, GGML_Q6_K)

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
