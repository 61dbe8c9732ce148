// GGUF block formats (llama.cpp's ggml-common.h; ts/ops/quantized_matmul_ggml.ts
// writes each layout down): matrix products y = x W^T with the weight W
// [N, K] stored as GGUF stores it (each row K / QK blocks, rows back to
// back), whole-tensor dequantization, and embedding rows gathered from a
// table of blocks.
//
// Every kernel reads the blocks through one decoder per format,
// ggml_deq16<F> (shaders/common.metal, shared with quantized_matmul_id_ggml):
// the 16 consecutive values of chunk c of a row (values 16c .. 16c + 15), as
// floats w = a * q + b with a and b the chunk's scale and offset in f32 (16
// values always share them: a Q4_0 or Q8_0 block is 2 chunks, a K
// super-block 16).
//
// Entries:
//   mlx-native's (src/ops/quantized_matmul_ggml.rs): kernel_mul_mv_<t>_f32 for
//     t = q4_0, q8_0, q4_K, q6_K (bindings 0 weight, 1 x, 2 y, 3
//     GgmlMatvecParams) and kernel_mul_mm_<t>_f32 for q4_0, q8_0, q6_K
//     (bindings 0 GgmlMatmulMmParams, 1 weight, 2 x, 3 y, threadgroup(0)
//     8192 bytes), with the crate's grids.
//   added in the same style: kernel_mul_mv_q5_K_f32, kernel_mul_mm_q4_K_f32,
//     kernel_mul_mm_q5_K_f32; kernel_dequantize_<t>_<o> (o = f32, f16, bf16)
//     and embedding_gather_scale_batch_<t>_to_<o>, for the five formats;
//     kernel_mul_mm_<t>_f32_splitk, the matrix form with k split across
//     blocks on CUDA (its bindings: the matrix form's, 4 partials, 5 words,
//     6 GgmlMatmulSplitParams).

// ---- the vector form: kernel_mul_mv_<t>_f32 ----

// The crate's grid: (ceil(N / (2 R)), M, 1) threadgroups of 64 threads (two
// simdgroups; (8, 8, 1) for Q4_0 and Q8_0 with R = 4 rows a simdgroup, (2,
// 32, 1) for the K formats with R = 1). Threadgroup (b, i) takes row i of x
// against weight rows (2b + sg) R .. + R - 1; lanes take chunks of 16 values
// lane, lane + 32, ...; a simd_sum per row.
template <int F, short R>
static inline void ggml_mv(device const uchar* w, device const float* x, device float* y, constant GgmlMatvecParams& p,
                           uint3 tg, uint sg, uint lane) {
    const uint tok = tg.y;
    if (tok >= uint(p.ne1)) {
        return;
    }
    ggml_mv_rows<F, R>(w, x + ulong(tok) * p.ne10, y + ulong(tok) * p.ne0, uint(p.ne01), uint(p.ne00), (tg.x * 2 + sg) * uint(R), lane);
}

// buffer(0) weight (N rows of blocks), (1) x [M, K] f32, (2) y [M, N] f32, (3) GgmlMatvecParams.
template <int F, short R>
kernel void ggml_mul_mv(
    device const uchar*        src0 [[buffer(0)]],
    device const float*        src1 [[buffer(1)]],
    device float*              dst  [[buffer(2)]],
    constant GgmlMatvecParams& p    [[buffer(3)]],
    uint3 tgpig [[threadgroup_position_in_grid]],
    uint  tiisg [[thread_index_in_simdgroup]],
    uint  sgitg [[simdgroup_index_in_threadgroup]])
{
    ggml_mv<F, R>(src0, src1, dst, p, tgpig, sgitg, tiisg);
}

typedef decltype(ggml_mul_mv<GGML_Q4_0, 4>) ggml_mul_mv_q4_0_t;
typedef decltype(ggml_mul_mv<GGML_Q8_0, 4>) ggml_mul_mv_q8_0_t;
typedef decltype(ggml_mul_mv<GGML_Q4_K, 1>) ggml_mul_mv_q4_K_t;
typedef decltype(ggml_mul_mv<GGML_Q5_K, 1>) ggml_mul_mv_q5_K_t;
typedef decltype(ggml_mul_mv<GGML_Q6_K, 1>) ggml_mul_mv_q6_K_t;
template [[host_name("kernel_mul_mv_q4_0_f32")]] kernel ggml_mul_mv_q4_0_t ggml_mul_mv<GGML_Q4_0, 4>;
template [[host_name("kernel_mul_mv_q8_0_f32")]] kernel ggml_mul_mv_q8_0_t ggml_mul_mv<GGML_Q8_0, 4>;
template [[host_name("kernel_mul_mv_q4_K_f32")]] kernel ggml_mul_mv_q4_K_t ggml_mul_mv<GGML_Q4_K, 1>;
template [[host_name("kernel_mul_mv_q5_K_f32")]] kernel ggml_mul_mv_q5_K_t ggml_mul_mv<GGML_Q5_K, 1>;
template [[host_name("kernel_mul_mv_q6_K_f32")]] kernel ggml_mul_mv_q6_K_t ggml_mul_mv<GGML_Q6_K, 1>;

// ---- the matrix form: kernel_mul_mm_<t>_f32 ----

// The crate's grid: (ceil(M / 32), ceil(N / 64), 1) threadgroups of 128
// threads, threadgroup(0) 8192 bytes. Threadgroup (a, b) computes y rows
// 32a .. 32a + 31 x columns 64b .. 64b + 63. Each 32-wide step of K: thread
// t dequantizes chunk t % 2 of the step of weight row 64b + t / 2 into sa
// (half, 64 x 32) and copies 8 values of x row 32a + t / 4 into sb (float, 32
// x 32), zeros past the valid rows; then 2 x 2 simdgroups of 16 x 32 multiply
// 8 x 8 matrices (x float, w half), summing in f32. Lane l of an 8 x 8
// accumulator holds row (q & 4) + (l / 2) % 4 and columns (q & 2) * 2 +
// (l % 2) * 2 and the next (q = l / 4).
template <int F>
static inline void ggml_mm(constant GgmlMatmulMmParams& p, device const uchar* w, device const float* x, device float* y,
                           threadgroup uchar* shmem, uint3 tg, uint tid, uint sg, uint lane) {
    threadgroup half* sa = (threadgroup half*)shmem;
    threadgroup float* sb = (threadgroup float*)(shmem + 4096);
    const uint K = uint(p.ne00), N = uint(p.ne0), M = uint(p.ne1);
    const uint m0 = tg.x * 32, n0 = tg.y * 64;
    const uint rows_m = min(32u, M - m0), rows_n = min(64u, N - n0);
    const ulong x_row = p.nb11 / 4;
    const uint sm0 = (sg / 2) * 16, sn0 = (sg % 2) * 32;

    simdgroup_float8x8 acc[2][4];
    for (short i = 0; i < 2; ++i) {
        for (short j = 0; j < 4; ++j) {
            acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
    }
    const uint wr = tid / 2, wh = tid % 2;
    const uint xr = tid / 4, xq = (tid % 4) * 8;
    for (uint k0 = 0; k0 < K; k0 += 32) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (wr < rows_n) {
            float v[16];
            ggml_deq16<F>(w + ulong(n0 + wr) * p.nb01, k0 / 16 + wh, v);
            for (short j = 0; j < 16; ++j) {
                sa[wr * 32 + wh * 16 + j] = half(v[j]);
            }
        } else {
            for (short j = 0; j < 16; ++j) {
                sa[wr * 32 + wh * 16 + j] = half(0.0f);
            }
        }
        for (short j = 0; j < 8; ++j) {
            sb[xr * 32 + xq + j] = xr < rows_m ? x[ulong(m0 + xr) * x_row + k0 + xq + j] : 0.0f;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        simd_mma_step<32>(acc, sb, 32, sa, 32, sm0, sn0);
    }

    simd_mma_store(acc, y + ulong(m0) * uint(p.ne0) + n0, uint(p.ne0), rows_m, rows_n, sm0, sn0, lane);
}

// buffer(0) GgmlMatmulMmParams, (1) weight (rows nb01 bytes apart), (2) x
// [M, K] f32 (rows nb11 bytes apart), (3) y [M, N] f32; threadgroup(0) 8192 bytes.
template <int F>
kernel void ggml_mul_mm(
    constant GgmlMatmulMmParams& args  [[buffer(0)]],
    device const uchar*          src0  [[buffer(1)]],
    device const float*          src1  [[buffer(2)]],
    device float*                dst   [[buffer(3)]],
    threadgroup uchar*           shmem [[threadgroup(0)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    ggml_mm<F>(args, src0, src1, dst, shmem, tgpig, tiitg, sgitg, tiisg);
}

typedef decltype(ggml_mul_mm<GGML_Q4_0>) ggml_mul_mm_q4_0_t;
typedef decltype(ggml_mul_mm<GGML_Q8_0>) ggml_mul_mm_q8_0_t;
typedef decltype(ggml_mul_mm<GGML_Q4_K>) ggml_mul_mm_q4_K_t;
typedef decltype(ggml_mul_mm<GGML_Q5_K>) ggml_mul_mm_q5_K_t;
typedef decltype(ggml_mul_mm<GGML_Q6_K>) ggml_mul_mm_q6_K_t;
template [[host_name("kernel_mul_mm_q4_0_f32")]] kernel ggml_mul_mm_q4_0_t ggml_mul_mm<GGML_Q4_0>;
template [[host_name("kernel_mul_mm_q8_0_f32")]] kernel ggml_mul_mm_q8_0_t ggml_mul_mm<GGML_Q8_0>;
template [[host_name("kernel_mul_mm_q4_K_f32")]] kernel ggml_mul_mm_q4_K_t ggml_mul_mm<GGML_Q4_K>;
template [[host_name("kernel_mul_mm_q5_K_f32")]] kernel ggml_mul_mm_q5_K_t ggml_mul_mm<GGML_Q5_K>;
template [[host_name("kernel_mul_mm_q6_K_f32")]] kernel ggml_mul_mm_q6_K_t ggml_mul_mm<GGML_Q6_K>;

// kernel_mul_mm_<t>_f32_splitk: the matrix form the op plans on CUDA where
// its tiles leave multiprocessors idle and the caller gives a scratch
// (ts/ops/quantized_matmul_ggml.ts, ggmlMatmulSplit). The CUDA twin cuts k
// into split.splits slices, writes each slice's partial tile to partials
// and sums them in slice order in the tile's last block to arrive at its
// word. The op plans no split where the multiprocessor count is unknown
// (Metal), so here k is one slice (ggml_mm, the same tiles and grid as
// kernel_mul_mm_<t>_f32): partials, words and split are bound but neither
// read nor written. The emulator runs this twin against the reference.
// buffer(0) GgmlMatmulMmParams, (1) weight, (2) x, (3) y, (4) partials, (5)
// words, (6) GgmlMatmulSplitParams; threadgroup(0) 8192 bytes.
template <int F>
kernel void ggml_mul_mm_splitk(
    constant GgmlMatmulMmParams&    args     [[buffer(0)]],
    device const uchar*             src0     [[buffer(1)]],
    device const float*             src1     [[buffer(2)]],
    device float*                   dst      [[buffer(3)]],
    device float*                   partials [[buffer(4)]],
    device uint*                    words    [[buffer(5)]],
    constant GgmlMatmulSplitParams& split    [[buffer(6)]],
    threadgroup uchar*              shmem    [[threadgroup(0)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    ggml_mm<F>(args, src0, src1, dst, shmem, tgpig, tiitg, sgitg, tiisg);
}

typedef decltype(ggml_mul_mm_splitk<GGML_Q4_0>) ggml_mul_mm_splitk_q4_0_t;
typedef decltype(ggml_mul_mm_splitk<GGML_Q8_0>) ggml_mul_mm_splitk_q8_0_t;
typedef decltype(ggml_mul_mm_splitk<GGML_Q4_K>) ggml_mul_mm_splitk_q4_K_t;
typedef decltype(ggml_mul_mm_splitk<GGML_Q5_K>) ggml_mul_mm_splitk_q5_K_t;
typedef decltype(ggml_mul_mm_splitk<GGML_Q6_K>) ggml_mul_mm_splitk_q6_K_t;
template [[host_name("kernel_mul_mm_q4_0_f32_splitk")]] kernel ggml_mul_mm_splitk_q4_0_t ggml_mul_mm_splitk<GGML_Q4_0>;
template [[host_name("kernel_mul_mm_q8_0_f32_splitk")]] kernel ggml_mul_mm_splitk_q8_0_t ggml_mul_mm_splitk<GGML_Q8_0>;
template [[host_name("kernel_mul_mm_q4_K_f32_splitk")]] kernel ggml_mul_mm_splitk_q4_K_t ggml_mul_mm_splitk<GGML_Q4_K>;
template [[host_name("kernel_mul_mm_q5_K_f32_splitk")]] kernel ggml_mul_mm_splitk_q5_K_t ggml_mul_mm_splitk<GGML_Q5_K>;
template [[host_name("kernel_mul_mm_q6_K_f32_splitk")]] kernel ggml_mul_mm_splitk_q6_K_t ggml_mul_mm_splitk<GGML_Q6_K>;

// ---- dequantization: kernel_dequantize_<t>_<o> ----

// One thread per chunk of 16 values, the grid (n_chunks) threads in
// threadgroups of up to 256; each value computed in f32 and rounded once to O.
// buffer(0) src (blocks, rows back to back), (1) dst [16 n_chunks], (2) GgmlDequantizeParams.
template <int F, typename O>
kernel void ggml_dequantize(
    device const uchar*            src [[buffer(0)]],
    device O*                      dst [[buffer(1)]],
    constant GgmlDequantizeParams& p   [[buffer(2)]],
    uint gid [[thread_position_in_grid]])
{
    if (gid >= p.n_chunks) {
        return;
    }
    float v[16];
    ggml_deq16<F>(src, gid, v);
    device O* out = dst + ulong(gid) * 16;
    for (short j = 0; j < 16; ++j) {
        out[j] = O(v[j]);
    }
}

typedef decltype(ggml_dequantize<GGML_Q4_0, float>) ggml_dequantize_q4_0_f32_t;
typedef decltype(ggml_dequantize<GGML_Q4_0, half>) ggml_dequantize_q4_0_f16_t;
typedef decltype(ggml_dequantize<GGML_Q4_0, bfloat>) ggml_dequantize_q4_0_bf16_t;
typedef decltype(ggml_dequantize<GGML_Q8_0, float>) ggml_dequantize_q8_0_f32_t;
typedef decltype(ggml_dequantize<GGML_Q8_0, half>) ggml_dequantize_q8_0_f16_t;
typedef decltype(ggml_dequantize<GGML_Q8_0, bfloat>) ggml_dequantize_q8_0_bf16_t;
typedef decltype(ggml_dequantize<GGML_Q4_K, float>) ggml_dequantize_q4_K_f32_t;
typedef decltype(ggml_dequantize<GGML_Q4_K, half>) ggml_dequantize_q4_K_f16_t;
typedef decltype(ggml_dequantize<GGML_Q4_K, bfloat>) ggml_dequantize_q4_K_bf16_t;
typedef decltype(ggml_dequantize<GGML_Q5_K, float>) ggml_dequantize_q5_K_f32_t;
typedef decltype(ggml_dequantize<GGML_Q5_K, half>) ggml_dequantize_q5_K_f16_t;
typedef decltype(ggml_dequantize<GGML_Q5_K, bfloat>) ggml_dequantize_q5_K_bf16_t;
typedef decltype(ggml_dequantize<GGML_Q6_K, float>) ggml_dequantize_q6_K_f32_t;
typedef decltype(ggml_dequantize<GGML_Q6_K, half>) ggml_dequantize_q6_K_f16_t;
typedef decltype(ggml_dequantize<GGML_Q6_K, bfloat>) ggml_dequantize_q6_K_bf16_t;
template [[host_name("kernel_dequantize_q4_0_f32")]] kernel ggml_dequantize_q4_0_f32_t ggml_dequantize<GGML_Q4_0, float>;
template [[host_name("kernel_dequantize_q4_0_f16")]] kernel ggml_dequantize_q4_0_f16_t ggml_dequantize<GGML_Q4_0, half>;
template [[host_name("kernel_dequantize_q4_0_bf16")]] kernel ggml_dequantize_q4_0_bf16_t ggml_dequantize<GGML_Q4_0, bfloat>;
template [[host_name("kernel_dequantize_q8_0_f32")]] kernel ggml_dequantize_q8_0_f32_t ggml_dequantize<GGML_Q8_0, float>;
template [[host_name("kernel_dequantize_q8_0_f16")]] kernel ggml_dequantize_q8_0_f16_t ggml_dequantize<GGML_Q8_0, half>;
template [[host_name("kernel_dequantize_q8_0_bf16")]] kernel ggml_dequantize_q8_0_bf16_t ggml_dequantize<GGML_Q8_0, bfloat>;
template [[host_name("kernel_dequantize_q4_K_f32")]] kernel ggml_dequantize_q4_K_f32_t ggml_dequantize<GGML_Q4_K, float>;
template [[host_name("kernel_dequantize_q4_K_f16")]] kernel ggml_dequantize_q4_K_f16_t ggml_dequantize<GGML_Q4_K, half>;
template [[host_name("kernel_dequantize_q4_K_bf16")]] kernel ggml_dequantize_q4_K_bf16_t ggml_dequantize<GGML_Q4_K, bfloat>;
template [[host_name("kernel_dequantize_q5_K_f32")]] kernel ggml_dequantize_q5_K_f32_t ggml_dequantize<GGML_Q5_K, float>;
template [[host_name("kernel_dequantize_q5_K_f16")]] kernel ggml_dequantize_q5_K_f16_t ggml_dequantize<GGML_Q5_K, half>;
template [[host_name("kernel_dequantize_q5_K_bf16")]] kernel ggml_dequantize_q5_K_bf16_t ggml_dequantize<GGML_Q5_K, bfloat>;
template [[host_name("kernel_dequantize_q6_K_f32")]] kernel ggml_dequantize_q6_K_f32_t ggml_dequantize<GGML_Q6_K, float>;
template [[host_name("kernel_dequantize_q6_K_f16")]] kernel ggml_dequantize_q6_K_f16_t ggml_dequantize<GGML_Q6_K, half>;
template [[host_name("kernel_dequantize_q6_K_bf16")]] kernel ggml_dequantize_q6_K_bf16_t ggml_dequantize<GGML_Q6_K, bfloat>;

// ---- embedding rows: embedding_gather_scale_batch_<t>_to_<o> ----

// out[i, j] = table[min(ids[i], vocab_size - 1), j] * scale, one thread per
// chunk of 16 values of an output row: the grid (hidden_size / 16, n_tokens)
// threads. The id is clamped as the embedding family clamps it, so a bad id
// in device memory never reads outside the table.
// buffer(0) table [vocab_size rows of blocks], (1) token_ids [n_tokens] u32,
// (2) output [n_tokens, hidden_size], (3) GgmlEmbeddingParams.
template <int F, typename O>
kernel void ggml_embedding(
    device const uchar*           table     [[buffer(0)]],
    device const uint*            token_ids [[buffer(1)]],
    device O*                     output    [[buffer(2)]],
    constant GgmlEmbeddingParams& p         [[buffer(3)]],
    uint2 gid [[thread_position_in_grid]])
{
    if (gid.x >= p.hidden_size / 16 || gid.y >= p.n_tokens) {
        return;
    }
    const uint id = min(token_ids[gid.y], p.vocab_size - 1u);
    float v[16];
    ggml_deq16<F>(table + ulong(id) * ggml_row_bytes(F, p.hidden_size), gid.x, v);
    device O* out = output + ulong(gid.y) * p.hidden_size + gid.x * 16;
    for (short j = 0; j < 16; ++j) {
        out[j] = O(v[j] * p.scale);
    }
}

typedef decltype(ggml_embedding<GGML_Q4_0, float>) ggml_embedding_q4_0_f32_t;
typedef decltype(ggml_embedding<GGML_Q4_0, half>) ggml_embedding_q4_0_f16_t;
typedef decltype(ggml_embedding<GGML_Q4_0, bfloat>) ggml_embedding_q4_0_bf16_t;
typedef decltype(ggml_embedding<GGML_Q8_0, float>) ggml_embedding_q8_0_f32_t;
typedef decltype(ggml_embedding<GGML_Q8_0, half>) ggml_embedding_q8_0_f16_t;
typedef decltype(ggml_embedding<GGML_Q8_0, bfloat>) ggml_embedding_q8_0_bf16_t;
typedef decltype(ggml_embedding<GGML_Q4_K, float>) ggml_embedding_q4_K_f32_t;
typedef decltype(ggml_embedding<GGML_Q4_K, half>) ggml_embedding_q4_K_f16_t;
typedef decltype(ggml_embedding<GGML_Q4_K, bfloat>) ggml_embedding_q4_K_bf16_t;
typedef decltype(ggml_embedding<GGML_Q5_K, float>) ggml_embedding_q5_K_f32_t;
typedef decltype(ggml_embedding<GGML_Q5_K, half>) ggml_embedding_q5_K_f16_t;
typedef decltype(ggml_embedding<GGML_Q5_K, bfloat>) ggml_embedding_q5_K_bf16_t;
typedef decltype(ggml_embedding<GGML_Q6_K, float>) ggml_embedding_q6_K_f32_t;
typedef decltype(ggml_embedding<GGML_Q6_K, half>) ggml_embedding_q6_K_f16_t;
typedef decltype(ggml_embedding<GGML_Q6_K, bfloat>) ggml_embedding_q6_K_bf16_t;
template [[host_name("embedding_gather_scale_batch_q4_0_to_f32")]] kernel ggml_embedding_q4_0_f32_t ggml_embedding<GGML_Q4_0, float>;
template [[host_name("embedding_gather_scale_batch_q4_0_to_f16")]] kernel ggml_embedding_q4_0_f16_t ggml_embedding<GGML_Q4_0, half>;
template [[host_name("embedding_gather_scale_batch_q4_0_to_bf16")]] kernel ggml_embedding_q4_0_bf16_t ggml_embedding<GGML_Q4_0, bfloat>;
template [[host_name("embedding_gather_scale_batch_q8_0_to_f32")]] kernel ggml_embedding_q8_0_f32_t ggml_embedding<GGML_Q8_0, float>;
template [[host_name("embedding_gather_scale_batch_q8_0_to_f16")]] kernel ggml_embedding_q8_0_f16_t ggml_embedding<GGML_Q8_0, half>;
template [[host_name("embedding_gather_scale_batch_q8_0_to_bf16")]] kernel ggml_embedding_q8_0_bf16_t ggml_embedding<GGML_Q8_0, bfloat>;
template [[host_name("embedding_gather_scale_batch_q4_K_to_f32")]] kernel ggml_embedding_q4_K_f32_t ggml_embedding<GGML_Q4_K, float>;
template [[host_name("embedding_gather_scale_batch_q4_K_to_f16")]] kernel ggml_embedding_q4_K_f16_t ggml_embedding<GGML_Q4_K, half>;
template [[host_name("embedding_gather_scale_batch_q4_K_to_bf16")]] kernel ggml_embedding_q4_K_bf16_t ggml_embedding<GGML_Q4_K, bfloat>;
template [[host_name("embedding_gather_scale_batch_q5_K_to_f32")]] kernel ggml_embedding_q5_K_f32_t ggml_embedding<GGML_Q5_K, float>;
template [[host_name("embedding_gather_scale_batch_q5_K_to_f16")]] kernel ggml_embedding_q5_K_f16_t ggml_embedding<GGML_Q5_K, half>;
template [[host_name("embedding_gather_scale_batch_q5_K_to_bf16")]] kernel ggml_embedding_q5_K_bf16_t ggml_embedding<GGML_Q5_K, bfloat>;
template [[host_name("embedding_gather_scale_batch_q6_K_to_f32")]] kernel ggml_embedding_q6_K_f32_t ggml_embedding<GGML_Q6_K, float>;
template [[host_name("embedding_gather_scale_batch_q6_K_to_f16")]] kernel ggml_embedding_q6_K_f16_t ggml_embedding<GGML_Q6_K, half>;
template [[host_name("embedding_gather_scale_batch_q6_K_to_bf16")]] kernel ggml_embedding_q6_K_bf16_t ggml_embedding<GGML_Q6_K, bfloat>;
