// MLX affine quantized products of per-expert weights, routed by per-token
// expert ids (MoE). For pair p = (row i = p / U, slot s = p % U) of M rows of
// x and U = n_expert_used slots, e = ids[p]:
//
//   y[p, j] = sum_k x[i, k] * w_e[j, k]                          (_id)
//   y[p, j] = act(sum_k x[i, k] g_e[j, k]) * sum_k x[i, k] u_e[j, k]   (_gate_up_id)
//
// w_e[j, k] = scale_e[j, k / gs] * q_e[j, k] + bias_e[j, k / gs] (the
// prelude's MLX affine decoding), expert e's weight at byte e *
// expert_weight_stride, its scales and biases at element e *
// expert_*_stride; act silu or gelu (tanh). A down projection, whose input
// is one row per pair, is the same product with M = pairs, U = 1. An id
// past the experts (e >= num_experts) gives its output row zeros: no read
// outside the weights, whatever the ids hold (mlx-native's kernel leaves
// such a row unwritten).
//
// Entries (grids in each one's comment):
//   quantized_matmul_id (mlx-native's): f32 x (rounded to bf16 before the
//     products, as the crate does) and y, bf16 scales and biases, any K and
//     group size (the prelude's "any" layout); one thread per output.
//   quantized_mv_id_<t> and quantized_gate_up_mv_id_<t> (added, t f16 or
//     bf16: x, scales, biases and y of one dtype): the vector form, a
//     simdgroup per 4 weight rows of one pair, lanes splitting K.
//   quantized_mm_id_<t> and quantized_gate_up_mm_id_<t> (added): the matrix
//     form over the pairs grouped by expert (moe_dispatch_sort's offsets and
//     order): tiles of 32 pairs of one expert x 64 weight rows (32 gate and
//     32 up rows for gate_up), the rows of x gathered through the order,
//     the weight dequantized into threadgroup memory, simdgroup matrices,
//     the output rows scattered back to pair order. A tile of the ids past
//     the experts writes zeros.
// The typed kernels take MLX's chunked rows (group size 32, 64 or 128
// dividing K). Products are summed in f32; y rounded once.

// Expert e's packed weight (stride in bytes).
static inline device const uchar* expert_weight(device const uint* weight, uint stride, uint e) {
    return (device const uchar*)weight + ulong(e) * stride;
}

// ---- the vector form ----

// mlx-native's quantized_matmul_id: thread (col, p) of a grid of
// (ceil(N / 16), ceil(P / 16)) threadgroups of (min(16, N), min(16, P)).
kernel void quantized_matmul_id(
    device const float*               input   [[buffer(0)]],
    device const uint*                weight  [[buffer(1)]],
    device const bfloat*              scales  [[buffer(2)]],
    device const bfloat*              biases  [[buffer(3)]],
    device const uint*                ids     [[buffer(4)]],
    device float*                     output  [[buffer(5)]],
    constant QuantizedMatmulIdParams& params  [[buffer(6)]],
    uint2 tid [[thread_position_in_grid]])
{
    const uint col = tid.x, p = tid.y, U = params.n_expert_used;
    if (col >= params.N || p >= params.M * U) {
        return;
    }
    const uint e = ids[p];
    if (e >= params.num_experts) {
        output[ulong(p) * params.N + col] = 0.0f;
        return;
    }
    float acc[1][1];
    q_dots<float, bfloat, 1, 1, true>(acc, input + ulong(p / U) * params.K, 0, expert_weight(weight, params.expert_weight_stride, e),
                                      scales + ulong(e) * params.expert_scales_stride, biases + ulong(e) * params.expert_biases_stride, 1,
                                      params.N, params.K, params.group_size, params.bits, col, 0, 1);
    output[ulong(p) * params.N + col] = acc[0][0];
}

// quantized_mv_id_<t> / quantized_gate_up_mv_id_<t>: grid (ceil(N / 8), P, 1)
// threadgroups of (32, 2, 1); simdgroup sg of threadgroup (b, p) takes rows
// 8b + 4sg .. 8b + 4sg + 3 of pair p's expert (of the gate and of the up
// weights for gate_up), lanes splitting K by 32-value chunks, then a simd_sum.
template <typename TX, typename T, bool GATE_UP, typename P>
static inline void q_mv_id(device const TX* x, device const uint* gw, device const T* gs, device const T* gb, device const uint* uw,
                           device const T* us, device const T* ub, device const uint* ids, device T* y, constant P& p, uint activation,
                           uint3 tg, uint sg, uint lane) {
    const uint pair = tg.y, n0 = tg.x * 8 + sg * 4, N = p.N;
    if (pair >= p.M * p.n_expert_used || n0 >= N) {
        return;
    }
    device T* yr = y + ulong(pair) * N;
    const uint e = ids[pair];
    if (e >= p.num_experts) {
        for (uint r = lane; r < 4; r += 32) {
            if (n0 + r < N) {
                yr[n0 + r] = T(0);
            }
        }
        return;
    }
    device const TX* xr = x + ulong(pair / p.n_expert_used) * p.K;
    const ulong so = ulong(e) * p.expert_scales_stride, bo = ulong(e) * p.expert_biases_stride;
    // f32 x is rounded to T as it is read (the _xf32 entries): the 16-bit entry's result over x cast first.
    constexpr bool ROUND_X = sizeof(TX) != sizeof(T);
    float acc[4][1];
    q_dots<TX, T, 4, 1, ROUND_X>(acc, xr, 0, expert_weight(gw, p.expert_weight_stride, e), gs + so, gb + bo, 1, N, p.K, p.group_size,
                                 p.bits, n0, lane, 32);
    float up[4][1];
    if (GATE_UP) {
        q_dots<TX, T, 4, 1, ROUND_X>(up, xr, 0, expert_weight(uw, p.expert_weight_stride, e), us + so, ub + bo, 1, N, p.K, p.group_size,
                                     p.bits, n0, lane, 32);
    }
    for (short r = 0; r < 4; ++r) {
        const float g = simd_sum(acc[r][0]);
        const float u = GATE_UP ? simd_sum(up[r][0]) : 0.0f;
        if (lane == 0 && n0 + uint(r) < N) {
            yr[n0 + r] = T(GATE_UP ? gate_activation(g, activation) * u : g);
        }
    }
}

// buffer(0) x [M, K], (1) weight, (2) scales, (3) biases (every expert's),
// (4) ids u32 [M, U], (5) y [M, U, N], (6) QuantizedMatmulIdParams. The
// gate_up entries: (1)-(3) the gate's, (6) QuantizedGateUpIdParams, (7)-(9)
// the up projection's weight, scales and biases.
kernel void quantized_mv_id_f16(
    device const half* x [[buffer(0)]],
    device const uint* weight [[buffer(1)]],
    device const half* scales [[buffer(2)]],
    device const half* biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device half* y [[buffer(5)]],
    constant QuantizedMatmulIdParams& params [[buffer(6)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<half, half, false>(x, weight, scales, biases, weight, scales, biases, ids, y, params, 0, tgpig, sgitg, tiisg);
}

kernel void quantized_mv_id_bf16(
    device const bfloat* x [[buffer(0)]],
    device const uint* weight [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device bfloat* y [[buffer(5)]],
    constant QuantizedMatmulIdParams& params [[buffer(6)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<bfloat, bfloat, false>(x, weight, scales, biases, weight, scales, biases, ids, y, params, 0, tgpig, sgitg, tiisg);
}

kernel void quantized_gate_up_mv_id_f16(
    device const half* x [[buffer(0)]],
    device const uint* gate_weight [[buffer(1)]],
    device const half* gate_scales [[buffer(2)]],
    device const half* gate_biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device half* y [[buffer(5)]],
    constant QuantizedGateUpIdParams& params [[buffer(6)]],
    device const uint* up_weight [[buffer(7)]],
    device const half* up_scales [[buffer(8)]],
    device const half* up_biases [[buffer(9)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<half, half, true>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases, ids, y, params.id, params.activation,
                        tgpig, sgitg, tiisg);
}

kernel void quantized_gate_up_mv_id_bf16(
    device const bfloat* x [[buffer(0)]],
    device const uint* gate_weight [[buffer(1)]],
    device const bfloat* gate_scales [[buffer(2)]],
    device const bfloat* gate_biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device bfloat* y [[buffer(5)]],
    constant QuantizedGateUpIdParams& params [[buffer(6)]],
    device const uint* up_weight [[buffer(7)]],
    device const bfloat* up_scales [[buffer(8)]],
    device const bfloat* up_biases [[buffer(9)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<bfloat, bfloat, true>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases, ids, y, params.id, params.activation,
                          tgpig, sgitg, tiisg);
}

// quantized_mv_id_gc_<t>, quantized_gate_up_mv_id_gc_<t> (ours): the names
// the typed ops give their vector form for 4-bit codes in MLX's chunks
// (ts/ops/quantized_matmul_id.ts quantizedIdMvKernel), where the CUDA twins
// run another engine at another occupancy; here the kernels above, under
// those names, with the same bindings and launch.
kernel void quantized_mv_id_gc_f16(
    device const half* x [[buffer(0)]],
    device const uint* weight [[buffer(1)]],
    device const half* scales [[buffer(2)]],
    device const half* biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device half* y [[buffer(5)]],
    constant QuantizedMatmulIdParams& params [[buffer(6)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<half, half, false>(x, weight, scales, biases, weight, scales, biases, ids, y, params, 0, tgpig, sgitg, tiisg);
}

kernel void quantized_mv_id_gc_bf16(
    device const bfloat* x [[buffer(0)]],
    device const uint* weight [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device bfloat* y [[buffer(5)]],
    constant QuantizedMatmulIdParams& params [[buffer(6)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<bfloat, bfloat, false>(x, weight, scales, biases, weight, scales, biases, ids, y, params, 0, tgpig, sgitg, tiisg);
}

kernel void quantized_gate_up_mv_id_gc_f16(
    device const half* x [[buffer(0)]],
    device const uint* gate_weight [[buffer(1)]],
    device const half* gate_scales [[buffer(2)]],
    device const half* gate_biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device half* y [[buffer(5)]],
    constant QuantizedGateUpIdParams& params [[buffer(6)]],
    device const uint* up_weight [[buffer(7)]],
    device const half* up_scales [[buffer(8)]],
    device const half* up_biases [[buffer(9)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<half, half, true>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases, ids, y, params.id, params.activation,
                        tgpig, sgitg, tiisg);
}

kernel void quantized_gate_up_mv_id_gc_bf16(
    device const bfloat* x [[buffer(0)]],
    device const uint* gate_weight [[buffer(1)]],
    device const bfloat* gate_scales [[buffer(2)]],
    device const bfloat* gate_biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device bfloat* y [[buffer(5)]],
    constant QuantizedGateUpIdParams& params [[buffer(6)]],
    device const uint* up_weight [[buffer(7)]],
    device const bfloat* up_scales [[buffer(8)]],
    device const bfloat* up_biases [[buffer(9)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<bfloat, bfloat, true>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases, ids, y, params.id, params.activation,
                          tgpig, sgitg, tiisg);
}

// quantized_{,gate_up_}mv_id_<t>_xf32 and quantized_{,gate_up_}mv_id_gc_<t>_xf32
// (ours): the vector entries above with x f32, rounded to t as the kernels
// read it (the t entries' result over x cast to t first); the bindings of
// those entries, x f32. The _gc names are these kernels too, as above.
kernel void quantized_mv_id_f16_xf32(
    device const float* x [[buffer(0)]],
    device const uint* weight [[buffer(1)]],
    device const half* scales [[buffer(2)]],
    device const half* biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device half* y [[buffer(5)]],
    constant QuantizedMatmulIdParams& params [[buffer(6)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<float, half, false>(x, weight, scales, biases, weight, scales, biases, ids, y, params, 0, tgpig, sgitg, tiisg);
}

kernel void quantized_gate_up_mv_id_f16_xf32(
    device const float* x [[buffer(0)]],
    device const uint* gate_weight [[buffer(1)]],
    device const half* gate_scales [[buffer(2)]],
    device const half* gate_biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device half* y [[buffer(5)]],
    constant QuantizedGateUpIdParams& params [[buffer(6)]],
    device const uint* up_weight [[buffer(7)]],
    device const half* up_scales [[buffer(8)]],
    device const half* up_biases [[buffer(9)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<float, half, true>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases, ids, y, params.id, params.activation,
                               tgpig, sgitg, tiisg);
}

kernel void quantized_mv_id_bf16_xf32(
    device const float* x [[buffer(0)]],
    device const uint* weight [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device bfloat* y [[buffer(5)]],
    constant QuantizedMatmulIdParams& params [[buffer(6)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<float, bfloat, false>(x, weight, scales, biases, weight, scales, biases, ids, y, params, 0, tgpig, sgitg, tiisg);
}

kernel void quantized_gate_up_mv_id_bf16_xf32(
    device const float* x [[buffer(0)]],
    device const uint* gate_weight [[buffer(1)]],
    device const bfloat* gate_scales [[buffer(2)]],
    device const bfloat* gate_biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device bfloat* y [[buffer(5)]],
    constant QuantizedGateUpIdParams& params [[buffer(6)]],
    device const uint* up_weight [[buffer(7)]],
    device const bfloat* up_scales [[buffer(8)]],
    device const bfloat* up_biases [[buffer(9)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<float, bfloat, true>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases, ids, y, params.id, params.activation,
                                 tgpig, sgitg, tiisg);
}

kernel void quantized_mv_id_gc_f16_xf32(
    device const float* x [[buffer(0)]],
    device const uint* weight [[buffer(1)]],
    device const half* scales [[buffer(2)]],
    device const half* biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device half* y [[buffer(5)]],
    constant QuantizedMatmulIdParams& params [[buffer(6)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<float, half, false>(x, weight, scales, biases, weight, scales, biases, ids, y, params, 0, tgpig, sgitg, tiisg);
}

kernel void quantized_gate_up_mv_id_gc_f16_xf32(
    device const float* x [[buffer(0)]],
    device const uint* gate_weight [[buffer(1)]],
    device const half* gate_scales [[buffer(2)]],
    device const half* gate_biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device half* y [[buffer(5)]],
    constant QuantizedGateUpIdParams& params [[buffer(6)]],
    device const uint* up_weight [[buffer(7)]],
    device const half* up_scales [[buffer(8)]],
    device const half* up_biases [[buffer(9)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<float, half, true>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases, ids, y, params.id, params.activation,
                               tgpig, sgitg, tiisg);
}

kernel void quantized_mv_id_gc_bf16_xf32(
    device const float* x [[buffer(0)]],
    device const uint* weight [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device bfloat* y [[buffer(5)]],
    constant QuantizedMatmulIdParams& params [[buffer(6)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<float, bfloat, false>(x, weight, scales, biases, weight, scales, biases, ids, y, params, 0, tgpig, sgitg, tiisg);
}

kernel void quantized_gate_up_mv_id_gc_bf16_xf32(
    device const float* x [[buffer(0)]],
    device const uint* gate_weight [[buffer(1)]],
    device const bfloat* gate_scales [[buffer(2)]],
    device const bfloat* gate_biases [[buffer(3)]],
    device const uint* ids [[buffer(4)]],
    device bfloat* y [[buffer(5)]],
    constant QuantizedGateUpIdParams& params [[buffer(6)]],
    device const uint* up_weight [[buffer(7)]],
    device const bfloat* up_scales [[buffer(8)]],
    device const bfloat* up_biases [[buffer(9)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    q_mv_id<float, bfloat, true>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases, ids, y, params.id, params.activation,
                                 tgpig, sgitg, tiisg);
}

// ---- the matrix form ----

// One tile: slot tg.y's pairs (moe_tile, 32 rows) x weight rows n0 = 64 tg.x
// .. n0 + 63 (gate_up: 32 gate rows n0 = 32 tg.x .. n0 + 31, then the same
// 32 up rows), 128 threads. Each 32-wide step of K (one chunk, inside one
// group): threads 0-63 dequantize chunk k0 / 32 of their weight row into ws,
// threads 64-127 copy the 32 x 32 slice of the gathered x rows into xs, both
// as T (zeros past the valid rows); then 2 x 2 simdgroups of 16 x 32 multiply
// 8 x 8 matrices, summing in f32. The accumulators go through threadgroup
// memory (out, 32 x 64 floats) to the output rows of their pairs.
template <typename T, int BITS, bool GATE_UP, typename P>
static inline void q_mm_id_tile(device const T* x, device const uint* gw, device const T* gsc, device const T* gbi, device const uint* uw,
                                device const T* usc, device const T* ubi, device const uint* offsets, device const uint* order, device T* y,
                                constant P& p, uint activation, threadgroup T* xs, threadgroup T* ws, threadgroup float* out,
                                threadgroup uint* rows, uint3 tg, uint tid, uint sg) {
    constexpr short BM = 32, BN = 64, LD = 32 + 16 / sizeof(T);
    const uint K = p.K, N = p.N, U = p.n_expert_used, P_ = p.M * U;
    uint group, start, end;
    if (!moe_tile(offsets, p.num_experts, P_, BM, tg.y, group, start, end)) {
        return;
    }
    const uint rows_m = end - start;
    const uint cols = GATE_UP ? BN / 2 : BN;
    const uint n0 = tg.x * cols;
    if (n0 >= N) {
        return;
    }
    const uint rows_n = min(cols, N - n0);
    if (tid < uint(BM)) {
        rows[tid] = tid < rows_m ? min(order[start + tid], P_) : P_;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (group >= p.num_experts) {
        for (uint i = tid; i < uint(BM) * rows_n; i += 128) {
            const uint pr = rows[i / rows_n];
            if (pr < P_) {
                y[ulong(pr) * N + n0 + i % rows_n] = T(0);
            }
        }
        return;
    }
    const uint e = group;
    const ulong w_row = ulong(K) * BITS / 8, s_row = K / p.group_size;
    // Thread tid < 64 stages weight row wr of matrix (gate or up) wm.
    const uint wm = GATE_UP ? tid / 32 : 0, wr = n0 + (GATE_UP ? tid % 32 : tid);
    device const uchar* wbase = (device const uchar*)(wm == 0 ? gw : uw) + ulong(e) * p.expert_weight_stride + ulong(min(wr, N - 1)) * w_row;
    device const T* sbase = (wm == 0 ? gsc : usc) + ulong(e) * p.expert_scales_stride + ulong(min(wr, N - 1)) * s_row;
    device const T* bbase = (wm == 0 ? gbi : ubi) + ulong(e) * p.expert_biases_stride + ulong(min(wr, N - 1)) * s_row;
    const bool wlive = GATE_UP ? (tid % 32) < rows_n : tid < rows_n;
    const short sm0 = short(sg / 2) * 16, sn0 = short(sg % 2) * 32;

    simdgroup_matrix<float, 8, 8> acc[2][4];
    for (short i = 0; i < 2; ++i) {
        for (short j = 0; j < 4; ++j) {
            acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
    }
    for (uint k0 = 0; k0 < K; k0 += 32) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (tid < uint(BN)) {
            if (wlive) {
                float q[32];
                q_chunk<BITS>((device const uint*)wbase + (k0 / 32) * BITS, q);
                const float s = float(sbase[k0 / p.group_size]);
                const float b = float(bbase[k0 / p.group_size]);
                for (short j = 0; j < 32; ++j) {
                    ws[tid * LD + j] = T(s * q[j] + b);
                }
            } else {
                for (short j = 0; j < 32; ++j) {
                    ws[tid * LD + j] = T(0);
                }
            }
        } else {
            const uint t = tid - BN, r = t / 2, h = (t % 2) * 16;
            const uint pr = rows[r];
            device const T* xr = x + ulong(pr < P_ ? pr / U : 0) * K + k0 + h;
            for (short j = 0; j < 16; ++j) {
                xs[r * LD + h + j] = pr < P_ ? xr[j] : T(0);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        simd_mma_step<32>(acc, xs, LD, ws, LD, sm0, sn0);
    }
    for (short i = 0; i < 2; ++i) {
        for (short j = 0; j < 4; ++j) {
            simdgroup_store(acc[i][j], out + (sm0 + 8 * i) * BN + sn0 + 8 * j, BN);
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = tid; i < uint(BM) * rows_n; i += 128) {
        const uint r = i / rows_n, c = i % rows_n, pr = rows[r];
        if (pr < P_) {
            const float v = GATE_UP ? gate_activation(out[r * BN + c], activation) * out[r * BN + 32 + c] : out[r * BN + c];
            y[ulong(pr) * N + n0 + c] = T(v);
        }
    }
}

// Grid (ceil(N / 64), floor(P / 32) + num_experts + 1, 1) threadgroups of 128
// threads (gate_up: ceil(N / 32) columns of tiles).
template <typename T, bool GATE_UP, typename P>
static inline void q_mm_id(device const T* x, device const uint* gw, device const T* gsc, device const T* gbi, device const uint* uw,
                           device const T* usc, device const T* ubi, device const uint* offsets, device const uint* order, device T* y,
                           constant P& p, uint activation, threadgroup T* xs, threadgroup T* ws, threadgroup float* out,
                           threadgroup uint* rows, uint3 tg, uint tid, uint sg) {
    if (p.bits == 4) {
        q_mm_id_tile<T, 4, GATE_UP>(x, gw, gsc, gbi, uw, usc, ubi, offsets, order, y, p, activation, xs, ws, out, rows, tg, tid, sg);
    } else if (p.bits == 6) {
        q_mm_id_tile<T, 6, GATE_UP>(x, gw, gsc, gbi, uw, usc, ubi, offsets, order, y, p, activation, xs, ws, out, rows, tg, tid, sg);
    } else {
        q_mm_id_tile<T, 8, GATE_UP>(x, gw, gsc, gbi, uw, usc, ubi, offsets, order, y, p, activation, xs, ws, out, rows, tg, tid, sg);
    }
}

// buffer(0) x [M, K], (1) weight, (2) scales, (3) biases, (4) offsets u32
// [num_experts + 2] and (7) order u32 [M U] (moe_dispatch_sort's), (5) y
// [M, U, N], (6) QuantizedMatmulIdParams. The gate_up entries: (1)-(3) the
// gate's, (6) QuantizedGateUpIdParams, (8)-(10) the up projection's.
kernel void quantized_mm_id_f16(
    device const half* x [[buffer(0)]],
    device const uint* weight [[buffer(1)]],
    device const half* scales [[buffer(2)]],
    device const half* biases [[buffer(3)]],
    device const uint* offsets [[buffer(4)]],
    device half* y [[buffer(5)]],
    constant QuantizedMatmulIdParams& params [[buffer(6)]],
    device const uint* order [[buffer(7)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]])
{
    threadgroup half xs[32 * (32 + 8)];
    threadgroup half ws[64 * (32 + 8)];
    threadgroup float out[32 * 64];
    threadgroup uint rows[32];
    q_mm_id<half, false>(x, weight, scales, biases, weight, scales, biases, offsets, order, y, params, 0, xs, ws, out, rows, tgpig, tiitg,
                      sgitg);
}

kernel void quantized_mm_id_bf16(
    device const bfloat* x [[buffer(0)]],
    device const uint* weight [[buffer(1)]],
    device const bfloat* scales [[buffer(2)]],
    device const bfloat* biases [[buffer(3)]],
    device const uint* offsets [[buffer(4)]],
    device bfloat* y [[buffer(5)]],
    constant QuantizedMatmulIdParams& params [[buffer(6)]],
    device const uint* order [[buffer(7)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]])
{
    threadgroup bfloat xs[32 * (32 + 8)];
    threadgroup bfloat ws[64 * (32 + 8)];
    threadgroup float out[32 * 64];
    threadgroup uint rows[32];
    q_mm_id<bfloat, false>(x, weight, scales, biases, weight, scales, biases, offsets, order, y, params, 0, xs, ws, out, rows, tgpig, tiitg,
                      sgitg);
}

kernel void quantized_gate_up_mm_id_f16(
    device const half* x [[buffer(0)]],
    device const uint* gate_weight [[buffer(1)]],
    device const half* gate_scales [[buffer(2)]],
    device const half* gate_biases [[buffer(3)]],
    device const uint* offsets [[buffer(4)]],
    device half* y [[buffer(5)]],
    constant QuantizedGateUpIdParams& params [[buffer(6)]],
    device const uint* order [[buffer(7)]],
    device const uint* up_weight [[buffer(8)]],
    device const half* up_scales [[buffer(9)]],
    device const half* up_biases [[buffer(10)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]])
{
    threadgroup half xs[32 * (32 + 8)];
    threadgroup half ws[64 * (32 + 8)];
    threadgroup float out[32 * 64];
    threadgroup uint rows[32];
    q_mm_id<half, true>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases, offsets, order, y, params.id,
                     params.activation, xs, ws, out, rows, tgpig, tiitg, sgitg);
}

kernel void quantized_gate_up_mm_id_bf16(
    device const bfloat* x [[buffer(0)]],
    device const uint* gate_weight [[buffer(1)]],
    device const bfloat* gate_scales [[buffer(2)]],
    device const bfloat* gate_biases [[buffer(3)]],
    device const uint* offsets [[buffer(4)]],
    device bfloat* y [[buffer(5)]],
    constant QuantizedGateUpIdParams& params [[buffer(6)]],
    device const uint* order [[buffer(7)]],
    device const uint* up_weight [[buffer(8)]],
    device const bfloat* up_scales [[buffer(9)]],
    device const bfloat* up_biases [[buffer(10)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]])
{
    threadgroup bfloat xs[32 * (32 + 8)];
    threadgroup bfloat ws[64 * (32 + 8)];
    threadgroup float out[32 * 64];
    threadgroup uint rows[32];
    q_mm_id<bfloat, true>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases, offsets, order, y, params.id,
                     params.activation, xs, ws, out, rows, tgpig, tiitg, sgitg);
}
