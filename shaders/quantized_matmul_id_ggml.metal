// Per-expert (MoE) products with GGUF block weights (ts/ops/quantized_matmul_id_ggml.ts):
// pair p = (token p / top_k, slot p % top_k) has the output row y[p] = x[p /
// top_k] W_e^T, e its expert and W_e expert e's [N, K] weight of GGML blocks,
// expert_stride bytes after expert e - 1's. The blocks are read through the
// prelude's decoders (ggml_deq16, shaders/common.metal), the ones
// quantized_matmul_ggml reads.
//
// Entries (mlx-native's names, src/ops/quantized_matmul_id_ggml.rs):
//   kernel_mul_mv_id_<t>_f32, t = q4_0, q8_0, q4_K, q5_K, q6_K: the vector
//     form, routed by ids (bindings 0 weight, 1 x, 2 y, 3 ids, 4
//     GgmlMatvecIdParams), the crate's grid.
//   kernel_mul_mv_id_<t>_f32_gate_up (not in the crate): the fused gate/up
//     vector form, act(x W_gate^T) * (x W_up^T) in one pass (bindings 0 gate
//     weight, 1 x, 2 y, 3 ids, 4 GgmlMatvecIdGateUpParams, 5 up weight), the
//     vector form's grid.
//   kernel_mul_mv_id_q4_0_f32_swiglu: the crate's SwiGLU down projection,
//     Q4_0 experts against silu(gate) * up of each pair's own rows
//     (bindings 0 weight, 1 gate, 2 up, 3 y, 4 ids, 5 GgmlMatvecIdParams),
//     the Q4_0 vector form's grid.
//   kernel_mul_mm_id_<t>_f32: the matrix form over the pairs grouped by
//     expert (bindings 0 GgmlMatmulIdMm_MmParams, 1 weight, 2 x, 3 offsets,
//     4 order, 5 y; threadgroup(0) 8192 bytes). Where the crate's 3 and 4 are
//     its map0 kernel's per-expert counts and token lists, these are
//     moe_dispatch_sort's offsets and order, walked in tile slots by the
//     prelude's moe_tile; q5_K is added (the crate has no Q5_K matrix form).
//   kernel_mul_mm_id_<t>_f32_few and kernel_mul_mm_id_<t>_f32_wg (not in
//     the crate): the matrix form's bindings and, here, its code; CUDA's for
//     experts of few pairs and, on Hopper, of many.
// An id at or past the experts (mv.ne02 of the vector form, ne02 of the matrix
// form) gives a row of zeros and reads no weight.

// ---- the vector form: kernel_mul_mv_id_<t>_f32 ----

// The crate's grid: (ceil(N / (2 R)), pairs, 1) threadgroups of 64 threads
// (two simdgroups; (8, 8, 1) for Q4_0 and Q8_0 with R = 4 rows a simdgroup,
// (2, 32, 1) for the K formats with R = 1). Threadgroup (b, p) takes pair p's
// x row against its expert's rows (2b + sg) R .. + R - 1 (ggml_mv_rows).
//
// ggml_mv_id_pair: the expert e and first row row0 of simdgroup sg of
// threadgroup tg (pair tg.y); false where there is nothing to compute (past
// the pairs, or an id past the experts, whose R rows of y it zeroes).
template <short R>
static inline bool ggml_mv_id_pair(constant GgmlMatvecIdParams& p, device const uint* ids, device float* dst, uint3 tg, uint sg, uint lane,
                                   thread uint& e, thread uint& row0) {
    const uint pair = tg.y;
    if (pair >= uint(p.mv.ne1)) {
        return false;
    }
    const uint N = uint(p.mv.ne01);
    row0 = (tg.x * 2 + sg) * uint(R);
    e = ids[pair];
    if (ulong(e) >= p.mv.ne02) {
        if (lane < uint(R) && row0 + lane < N) {
            dst[ulong(pair) * p.mv.ne0 + row0 + lane] = 0.0f;
        }
        return false;
    }
    return true;
}

// buffer(0) weight (experts of N rows of blocks), (1) x [n_tokens, K] f32,
// (2) y [pairs, N] f32, (3) ids u32 [pairs], (4) GgmlMatvecIdParams.
template <int F, short R>
kernel void ggml_mul_mv_id(
    device const uchar*          src0 [[buffer(0)]],
    device const float*          src1 [[buffer(1)]],
    device float*                dst  [[buffer(2)]],
    device const uint*           ids  [[buffer(3)]],
    constant GgmlMatvecIdParams& p    [[buffer(4)]],
    uint3 tgpig [[threadgroup_position_in_grid]],
    uint  tiisg [[thread_index_in_simdgroup]],
    uint  sgitg [[simdgroup_index_in_threadgroup]])
{
    uint e, row0;
    if (!ggml_mv_id_pair<R>(p, ids, dst, tgpig, sgitg, tiisg, e, row0)) {
        return;
    }
    ggml_mv_rows<F, R>(src0 + ulong(e) * p.expert_stride, src1 + ulong(tgpig.y / p.top_k) * p.mv.ne10, dst + ulong(tgpig.y) * p.mv.ne0, uint(p.mv.ne01),
                       uint(p.mv.ne00), row0, tiisg);
}

typedef decltype(ggml_mul_mv_id<GGML_Q4_0, 4>) ggml_mul_mv_id_q4_0_t;
typedef decltype(ggml_mul_mv_id<GGML_Q8_0, 4>) ggml_mul_mv_id_q8_0_t;
typedef decltype(ggml_mul_mv_id<GGML_Q4_K, 1>) ggml_mul_mv_id_q4_K_t;
typedef decltype(ggml_mul_mv_id<GGML_Q5_K, 1>) ggml_mul_mv_id_q5_K_t;
typedef decltype(ggml_mul_mv_id<GGML_Q6_K, 1>) ggml_mul_mv_id_q6_K_t;
template [[host_name("kernel_mul_mv_id_q4_0_f32")]] kernel ggml_mul_mv_id_q4_0_t ggml_mul_mv_id<GGML_Q4_0, 4>;
template [[host_name("kernel_mul_mv_id_q8_0_f32")]] kernel ggml_mul_mv_id_q8_0_t ggml_mul_mv_id<GGML_Q8_0, 4>;
template [[host_name("kernel_mul_mv_id_q4_K_f32")]] kernel ggml_mul_mv_id_q4_K_t ggml_mul_mv_id<GGML_Q4_K, 1>;
template [[host_name("kernel_mul_mv_id_q5_K_f32")]] kernel ggml_mul_mv_id_q5_K_t ggml_mul_mv_id<GGML_Q5_K, 1>;
template [[host_name("kernel_mul_mv_id_q6_K_f32")]] kernel ggml_mul_mv_id_q6_K_t ggml_mul_mv_id<GGML_Q6_K, 1>;

// ---- the fused gate/up vector form: kernel_mul_mv_id_<t>_f32_gate_up ----

// Not in mlx-native (its one fused kernel, kernel_mul_mv_id_q4_0_f32_swiglu,
// is Q4_0 and silu only, with other bindings): y[p, i] = act(x . gate_e[i]) *
// (x . up_e[i]) for pair p, e = ids[p], over the vector form's grid, each
// simdgroup reading its R rows of gate and of up in one pass over x
// (ggml_mv_rows_gate_up). buffer(0) gate weight, (1) x [n_tokens, K] f32,
// (2) y [pairs, N] f32, (3) ids u32 [pairs], (4) GgmlMatvecIdGateUpParams,
// (5) up weight (the gate's block type, rows and expert_stride).
template <int F, short R>
kernel void ggml_mul_mv_id_gate_up(
    device const uchar*                gate [[buffer(0)]],
    device const float*                src1 [[buffer(1)]],
    device float*                      dst  [[buffer(2)]],
    device const uint*                 ids  [[buffer(3)]],
    constant GgmlMatvecIdGateUpParams& p    [[buffer(4)]],
    device const uchar*                up   [[buffer(5)]],
    uint3 tgpig [[threadgroup_position_in_grid]],
    uint  tiisg [[thread_index_in_simdgroup]],
    uint  sgitg [[simdgroup_index_in_threadgroup]])
{
    uint e, row0;
    if (!ggml_mv_id_pair<R>(p.id, ids, dst, tgpig, sgitg, tiisg, e, row0)) {
        return;
    }
    const ulong off = ulong(e) * p.id.expert_stride;
    ggml_mv_rows_gate_up<F, R>(gate + off, up + off, src1 + ulong(tgpig.y / p.id.top_k) * p.id.mv.ne10, dst + ulong(tgpig.y) * p.id.mv.ne0,
                               uint(p.id.mv.ne01),
                               uint(p.id.mv.ne00), row0, tiisg, p.activation);
}

typedef decltype(ggml_mul_mv_id_gate_up<GGML_Q4_0, 4>) ggml_mul_mv_id_gate_up_q4_0_t;
typedef decltype(ggml_mul_mv_id_gate_up<GGML_Q8_0, 4>) ggml_mul_mv_id_gate_up_q8_0_t;
typedef decltype(ggml_mul_mv_id_gate_up<GGML_Q4_K, 1>) ggml_mul_mv_id_gate_up_q4_K_t;
typedef decltype(ggml_mul_mv_id_gate_up<GGML_Q5_K, 1>) ggml_mul_mv_id_gate_up_q5_K_t;
typedef decltype(ggml_mul_mv_id_gate_up<GGML_Q6_K, 1>) ggml_mul_mv_id_gate_up_q6_K_t;
template [[host_name("kernel_mul_mv_id_q4_0_f32_gate_up")]] kernel ggml_mul_mv_id_gate_up_q4_0_t ggml_mul_mv_id_gate_up<GGML_Q4_0, 4>;
template [[host_name("kernel_mul_mv_id_q8_0_f32_gate_up")]] kernel ggml_mul_mv_id_gate_up_q8_0_t ggml_mul_mv_id_gate_up<GGML_Q8_0, 4>;
template [[host_name("kernel_mul_mv_id_q4_K_f32_gate_up")]] kernel ggml_mul_mv_id_gate_up_q4_K_t ggml_mul_mv_id_gate_up<GGML_Q4_K, 1>;
template [[host_name("kernel_mul_mv_id_q5_K_f32_gate_up")]] kernel ggml_mul_mv_id_gate_up_q5_K_t ggml_mul_mv_id_gate_up<GGML_Q5_K, 1>;
template [[host_name("kernel_mul_mv_id_q6_K_f32_gate_up")]] kernel ggml_mul_mv_id_gate_up_q6_K_t ggml_mul_mv_id_gate_up<GGML_Q6_K, 1>;

// ---- mlx-native's kernel_mul_mv_id_q4_0_f32_swiglu ----

// The down projection of a SwiGLU fused with its activation: y[p, n] =
// W_e[n] . (silu(gate[p]) * up[p]) for pair p, e = ids[p], gate and up one
// row per pair (mv.ne10 floats apart), Q4_0 experts. The crate's bindings
// and grid: buffer(0) weight, (1) gate f32 [pairs, K], (2) up f32 [pairs,
// K], (3) y f32 [pairs, N], (4) ids u32 [pairs], (5) GgmlMatvecIdParams;
// (ceil(N / 8), pairs, 1) threadgroups of (8, 8, 1), 4 rows a simdgroup.
kernel void kernel_mul_mv_id_q4_0_f32_swiglu(
    device const uchar*          src0 [[buffer(0)]],
    device const float*          gate [[buffer(1)]],
    device const float*          up   [[buffer(2)]],
    device float*                dst  [[buffer(3)]],
    device const uint*           ids  [[buffer(4)]],
    constant GgmlMatvecIdParams& p    [[buffer(5)]],
    uint3 tgpig [[threadgroup_position_in_grid]],
    uint  tiisg [[thread_index_in_simdgroup]],
    uint  sgitg [[simdgroup_index_in_threadgroup]])
{
    uint e, row0;
    if (!ggml_mv_id_pair<4>(p, ids, dst, tgpig, sgitg, tiisg, e, row0)) {
        return;
    }
    const ulong xo = ulong(tgpig.y) * p.mv.ne10;
    ggml_mv_rows_swiglu<GGML_Q4_0, 4>(src0 + ulong(e) * p.expert_stride, gate + xo, up + xo, dst + ulong(tgpig.y) * p.mv.ne0,
                                      uint(p.mv.ne01), uint(p.mv.ne00), row0, tiisg);
}

// ---- the matrix form: kernel_mul_mm_id_<t>_f32 ----

// Grid (ceil(N / 64), floor(P / 32) + ne02 + 1, 1) threadgroups of 128 (P =
// ne21 * ne20 pairs). Threadgroup (b, s) takes tile slot s (moe_tile: up to
// 32 pairs of one expert) x weight rows 64b .. 64b + 63. Each 32-wide step of
// K: thread t dequantizes chunk t % 2 of the step of weight row 64b + t / 2
// into sa (half, 64 x 32) and copies 8 values of the x row of tile row t / 4
// (its pair's token) into sb (float, 32 x 32), zeros past the valid rows;
// 2 x 2 simdgroups of 16 x 32 multiply 8 x 8 matrices, summing in f32 (as
// kernel_mul_mm_<t>_f32). The sums go through threadgroup(0) (32 x 64 floats)
// to the output rows of their pairs.
//
// GU (kernel_mul_mm_id_<t>_f32_gate_up): a threadgroup takes 32 outputs n0 =
// 32b .., its 64 tile rows their gate and up rows by eights (tile row r:
// output n0 + 8 (r / 16) + r % 8, of the up weight wu where (r / 8) is
// odd), and writes act(gate) * up (gate_activation's activation).
template <int F, bool GU>
static inline void ggml_mm_id(constant GgmlMatmulIdMm_MmParams& p, device const uchar* w, device const uchar* wu, device const float* x,
                              device const uint* offsets, device const uint* order, device float* y, threadgroup uchar* shmem,
                              threadgroup uint* rows, uint3 tg, uint tid, uint sg, uint activation) {
    const uint K = uint(p.ne00), N = uint(p.ne0), E = uint(p.ne02), U = uint(p.ne20), P = uint(p.ne21) * U;
    uint group, start, end;
    if (!moe_tile(offsets, E, P, 32, tg.y, group, start, end)) {
        return;
    }
    const uint n0 = tg.x * (GU ? 32 : 64);
    if (n0 >= N) {
        return;
    }
    const uint rows_m = end - start, rows_n = min(GU ? 32u : 64u, N - n0);
    if (tid < 32) {
        rows[tid] = tid < rows_m ? min(order[start + tid], P) : P;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (group >= E) {
        for (uint i = tid; i < 32 * rows_n; i += 128) {
            const uint pr = rows[i / rows_n];
            if (pr < P) {
                y[ulong(pr) * N + n0 + i % rows_n] = 0.0f;
            }
        }
        return;
    }
    threadgroup half* sa = (threadgroup half*)shmem;
    threadgroup float* sb = (threadgroup float*)(shmem + 4096);
    device const uchar* we = (GU && ((tid / 16) & 1) != 0 ? wu : w) + ulong(group) * p.nb02;
    const short sm0 = short(sg / 2) * 16, sn0 = short(sg % 2) * 32;
    simdgroup_float8x8 acc[2][4];
    for (short i = 0; i < 2; ++i) {
        for (short j = 0; j < 4; ++j) {
            acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
    }
    const uint wr = tid / 2, wh = tid % 2;
    const uint xr = tid / 4, xq = (tid % 4) * 8;
    const uint xp = rows[xr];
    device const float* xrow = x + ulong(xp < P ? xp / U : 0) * (p.nb12 / 4);
    for (uint k0 = 0; k0 < K; k0 += 32) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // Tile row wr's weight row (GU: output wo of the gate or the up weight, by we).
        const uint wo = GU ? 8 * (wr / 16) + wr % 8 : wr;
        if (wo < rows_n) {
            float v[16];
            ggml_deq16<F>(we + ulong(n0 + wo) * p.nb01, k0 / 16 + wh, v);
            for (short j = 0; j < 16; ++j) {
                sa[wr * 32 + wh * 16 + j] = half(v[j]);
            }
        } else {
            for (short j = 0; j < 16; ++j) {
                sa[wr * 32 + wh * 16 + j] = half(0.0f);
            }
        }
        for (short j = 0; j < 8; ++j) {
            sb[xr * 32 + xq + j] = xp < P ? xrow[k0 + xq + j] : 0.0f;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        simd_mma_step<32>(acc, sb, 32, sa, 32, sm0, sn0);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    threadgroup float* out = (threadgroup float*)shmem;
    for (short i = 0; i < 2; ++i) {
        for (short j = 0; j < 4; ++j) {
            simdgroup_store(acc[i][j], out + (sm0 + 8 * i) * 64 + sn0 + 8 * j, 64);
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = tid; i < 32 * rows_n; i += 128) {
        const uint r = i / rows_n, c = i % rows_n, pr = rows[r];
        if (pr < P) {
            if (GU) {
                const uint t = r * 64 + 16 * (c / 8) + c % 8;
                y[ulong(pr) * N + n0 + c] = gate_activation(out[t], activation) * out[t + 8];
            } else {
                y[ulong(pr) * N + n0 + c] = out[r * 64 + c];
            }
        }
    }
}

// buffer(0) GgmlMatmulIdMm_MmParams, (1) weight (experts nb02 bytes apart,
// rows nb01), (2) x [ne21, K] f32 (rows nb12 bytes apart), (3) offsets u32
// [ne02 + 2] and (4) order u32 [P] (moe_dispatch_sort's), (5) y [P, N] f32;
// threadgroup(0) 8192 bytes.
template <int F>
kernel void ggml_mul_mm_id(
    constant GgmlMatmulIdMm_MmParams& args  [[buffer(0)]],
    device const uchar*               src0  [[buffer(1)]],
    device const float*               src1  [[buffer(2)]],
    device const uint*                offsets [[buffer(3)]],
    device const uint*                order   [[buffer(4)]],
    device float*                     dst   [[buffer(5)]],
    threadgroup uchar*                shmem [[threadgroup(0)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]])
{
    threadgroup uint rows[32];
    ggml_mm_id<F, false>(args, src0, src0, src1, offsets, order, dst, shmem, rows, tgpig, tiitg, sgitg, 0);
}

typedef decltype(ggml_mul_mm_id<GGML_Q4_0>) ggml_mul_mm_id_q4_0_t;
typedef decltype(ggml_mul_mm_id<GGML_Q8_0>) ggml_mul_mm_id_q8_0_t;
typedef decltype(ggml_mul_mm_id<GGML_Q4_K>) ggml_mul_mm_id_q4_K_t;
typedef decltype(ggml_mul_mm_id<GGML_Q5_K>) ggml_mul_mm_id_q5_K_t;
typedef decltype(ggml_mul_mm_id<GGML_Q6_K>) ggml_mul_mm_id_q6_K_t;
template [[host_name("kernel_mul_mm_id_q4_0_f32")]] kernel ggml_mul_mm_id_q4_0_t ggml_mul_mm_id<GGML_Q4_0>;
template [[host_name("kernel_mul_mm_id_q8_0_f32")]] kernel ggml_mul_mm_id_q8_0_t ggml_mul_mm_id<GGML_Q8_0>;
template [[host_name("kernel_mul_mm_id_q4_K_f32")]] kernel ggml_mul_mm_id_q4_K_t ggml_mul_mm_id<GGML_Q4_K>;
template [[host_name("kernel_mul_mm_id_q5_K_f32")]] kernel ggml_mul_mm_id_q5_K_t ggml_mul_mm_id<GGML_Q5_K>;
template [[host_name("kernel_mul_mm_id_q6_K_f32")]] kernel ggml_mul_mm_id_q6_K_t ggml_mul_mm_id<GGML_Q6_K>;

// kernel_mul_mm_id_<t>_f32_few (not in the crate): the matrix form the op
// plans on CUDA where the pairs average few an expert (ggmlIdMmFew);
// there the vector engine takes up to 8 of an expert's pairs a block. The op
// plans it on CUDA only, so here it is the matrix form itself (the same
// bindings, threadgroup memory and grid); the emulator runs this twin
// against the reference.
template [[host_name("kernel_mul_mm_id_q4_0_f32_few")]] kernel ggml_mul_mm_id_q4_0_t ggml_mul_mm_id<GGML_Q4_0>;
template [[host_name("kernel_mul_mm_id_q8_0_f32_few")]] kernel ggml_mul_mm_id_q8_0_t ggml_mul_mm_id<GGML_Q8_0>;
template [[host_name("kernel_mul_mm_id_q4_K_f32_few")]] kernel ggml_mul_mm_id_q4_K_t ggml_mul_mm_id<GGML_Q4_K>;
template [[host_name("kernel_mul_mm_id_q5_K_f32_few")]] kernel ggml_mul_mm_id_q5_K_t ggml_mul_mm_id<GGML_Q5_K>;
template [[host_name("kernel_mul_mm_id_q6_K_f32_few")]] kernel ggml_mul_mm_id_q6_K_t ggml_mul_mm_id<GGML_Q6_K>;

// kernel_mul_mm_id_<t>_f32_wg (not in the crate): the matrix form the op
// plans on CUDA's compute capability 9.0 where the pairs average many an
// expert (ggmlIdMmWg); there 128 of an expert's pairs a block on Hopper's
// warpgroup MMA. Here, as _few, the matrix form itself, which the emulator
// runs against the reference.
template [[host_name("kernel_mul_mm_id_q4_0_f32_wg")]] kernel ggml_mul_mm_id_q4_0_t ggml_mul_mm_id<GGML_Q4_0>;
template [[host_name("kernel_mul_mm_id_q8_0_f32_wg")]] kernel ggml_mul_mm_id_q8_0_t ggml_mul_mm_id<GGML_Q8_0>;
template [[host_name("kernel_mul_mm_id_q4_K_f32_wg")]] kernel ggml_mul_mm_id_q4_K_t ggml_mul_mm_id<GGML_Q4_K>;
template [[host_name("kernel_mul_mm_id_q5_K_f32_wg")]] kernel ggml_mul_mm_id_q5_K_t ggml_mul_mm_id<GGML_Q5_K>;
template [[host_name("kernel_mul_mm_id_q6_K_f32_wg")]] kernel ggml_mul_mm_id_q6_K_t ggml_mul_mm_id<GGML_Q6_K>;

// ---- the fused gate/up matrix form: kernel_mul_mm_id_<t>_f32_gate_up ----

// Not in mlx-native: y[p, i] = act(x . gate_e[i]) * (x . up_e[i]) for pair
// p, e its expert, over the pairs grouped by expert as the matrix form
// (ggml_mm_id's GU form: a threadgroup's 64 tile rows are 32 outputs' gate
// and up rows). buffer(0) GgmlMatmulIdMmGateUpParams, (1) gate weight, (2)
// x, (3) offsets, (4) order, (5) y [P, N] f32, (6) up weight (the gate's
// block type, rows and expert stride); threadgroup(0) 8192 bytes. Grid
// (ceil(N / 32), floor(P / 32) + ne02 + 1, 1) threadgroups of 128. The
// _few and _wg entries (CUDA's forms, as the plain matrix form's) are this
// kernel here.
template <int F>
kernel void ggml_mul_mm_id_gate_up(
    constant GgmlMatmulIdMmGateUpParams& args  [[buffer(0)]],
    device const uchar*                  gate  [[buffer(1)]],
    device const float*                  src1  [[buffer(2)]],
    device const uint*                   offsets [[buffer(3)]],
    device const uint*                   order   [[buffer(4)]],
    device float*                        dst   [[buffer(5)]],
    device const uchar*                  up    [[buffer(6)]],
    threadgroup uchar*                   shmem [[threadgroup(0)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]])
{
    threadgroup uint rows[32];
    ggml_mm_id<F, true>(args.mm, gate, up, src1, offsets, order, dst, shmem, rows, tgpig, tiitg, sgitg, args.activation);
}

typedef decltype(ggml_mul_mm_id_gate_up<GGML_Q4_0>) ggml_mul_mm_id_gate_up_q4_0_t;
typedef decltype(ggml_mul_mm_id_gate_up<GGML_Q8_0>) ggml_mul_mm_id_gate_up_q8_0_t;
typedef decltype(ggml_mul_mm_id_gate_up<GGML_Q4_K>) ggml_mul_mm_id_gate_up_q4_K_t;
typedef decltype(ggml_mul_mm_id_gate_up<GGML_Q5_K>) ggml_mul_mm_id_gate_up_q5_K_t;
typedef decltype(ggml_mul_mm_id_gate_up<GGML_Q6_K>) ggml_mul_mm_id_gate_up_q6_K_t;
template [[host_name("kernel_mul_mm_id_q4_0_f32_gate_up")]] kernel ggml_mul_mm_id_gate_up_q4_0_t ggml_mul_mm_id_gate_up<GGML_Q4_0>;
template [[host_name("kernel_mul_mm_id_q8_0_f32_gate_up")]] kernel ggml_mul_mm_id_gate_up_q8_0_t ggml_mul_mm_id_gate_up<GGML_Q8_0>;
template [[host_name("kernel_mul_mm_id_q4_K_f32_gate_up")]] kernel ggml_mul_mm_id_gate_up_q4_K_t ggml_mul_mm_id_gate_up<GGML_Q4_K>;
template [[host_name("kernel_mul_mm_id_q5_K_f32_gate_up")]] kernel ggml_mul_mm_id_gate_up_q5_K_t ggml_mul_mm_id_gate_up<GGML_Q5_K>;
template [[host_name("kernel_mul_mm_id_q6_K_f32_gate_up")]] kernel ggml_mul_mm_id_gate_up_q6_K_t ggml_mul_mm_id_gate_up<GGML_Q6_K>;
template [[host_name("kernel_mul_mm_id_q4_0_f32_gate_up_few")]] kernel ggml_mul_mm_id_gate_up_q4_0_t ggml_mul_mm_id_gate_up<GGML_Q4_0>;
template [[host_name("kernel_mul_mm_id_q8_0_f32_gate_up_few")]] kernel ggml_mul_mm_id_gate_up_q8_0_t ggml_mul_mm_id_gate_up<GGML_Q8_0>;
template [[host_name("kernel_mul_mm_id_q4_K_f32_gate_up_few")]] kernel ggml_mul_mm_id_gate_up_q4_K_t ggml_mul_mm_id_gate_up<GGML_Q4_K>;
template [[host_name("kernel_mul_mm_id_q5_K_f32_gate_up_few")]] kernel ggml_mul_mm_id_gate_up_q5_K_t ggml_mul_mm_id_gate_up<GGML_Q5_K>;
template [[host_name("kernel_mul_mm_id_q6_K_f32_gate_up_few")]] kernel ggml_mul_mm_id_gate_up_q6_K_t ggml_mul_mm_id_gate_up<GGML_Q6_K>;
template [[host_name("kernel_mul_mm_id_q4_0_f32_gate_up_wg")]] kernel ggml_mul_mm_id_gate_up_q4_0_t ggml_mul_mm_id_gate_up<GGML_Q4_0>;
template [[host_name("kernel_mul_mm_id_q8_0_f32_gate_up_wg")]] kernel ggml_mul_mm_id_gate_up_q8_0_t ggml_mul_mm_id_gate_up<GGML_Q8_0>;
template [[host_name("kernel_mul_mm_id_q4_K_f32_gate_up_wg")]] kernel ggml_mul_mm_id_gate_up_q4_K_t ggml_mul_mm_id_gate_up<GGML_Q4_K>;
template [[host_name("kernel_mul_mm_id_q5_K_f32_gate_up_wg")]] kernel ggml_mul_mm_id_gate_up_q5_K_t ggml_mul_mm_id_gate_up<GGML_Q5_K>;
template [[host_name("kernel_mul_mm_id_q6_K_f32_gate_up_wg")]] kernel ggml_mul_mm_id_gate_up_q6_K_t ggml_mul_mm_id_gate_up<GGML_Q6_K>;
