// Per-expert products with f32, f16 or bf16 weights stored [out, in] as
// checkpoints store them, routed by per-token expert ids (MoE): the dense
// twin of quantized_matmul_id. For pair p = (row i = p / U of x, slot
// p % U), U = n_expert_used, e = ids[p]:
//
//   y[p, j] = sum_k x[i, k] * w_e[j, k]                                (_id)
//   y[p, j] = act(sum_k x[i, k] g_e[j, k]) * sum_k x[i, k] u_e[j, k]   (_gate_up_id)
//
// w_e at element e * expert_stride of the weight buffer; act silu or gelu
// (tanh). An id past the experts (e >= num_experts) gives its output row
// zeros, and nothing is read for it. Products summed in f32, y rounded once.
//
// Entries (x, weights and y of one dtype):
//   dense_mv_id_<t>, dense_gate_up_mv_id_<t> (t f32, f16, bf16): the vector
//     form, a simdgroup per 4 weight rows of one pair, lanes splitting K.
//   dense_mm_id_<t>, dense_gate_up_mm_id_<t> (t f16, bf16): the matrix form
//     over the pairs grouped by expert (moe_dispatch_sort's offsets and
//     order): tiles of 32 pairs of one expert x 64 weight rows (32 gate and
//     32 up rows for gate_up), x rows gathered through the order, zeros past
//     K, simdgroup matrices, outputs scattered back to pair order; a tile of
//     the ids past the experts writes zeros.

// ---- the vector form ----

// Grid (ceil(N / 8), P, 1) threadgroups of (32, 2, 1): simdgroup sg of
// threadgroup (b, p) takes rows 8b + 4sg .. 8b + 4sg + 3 of pair p's expert
// (of the gate and the up weights for gate_up), lanes striding over K, then
// a simd_sum.
template <typename T, bool GATE_UP>
static inline void d_mv_id(device const T* x, device const T* gw, device const T* uw, device const uint* ids, device T* y,
                           constant DenseMatmulIdParams& p, uint3 tg, uint sg, uint lane) {
    const uint pair = tg.y, n0 = tg.x * 8 + sg * 4, N = p.N, K = p.K;
    if (pair >= p.M * p.n_expert_used || n0 >= N) {
        return;
    }
    device T* yr = y + ulong(pair) * N;
    const uint e = ids[pair];
    if (e >= p.num_experts) {
        if (lane < 4 && n0 + lane < N) {
            yr[n0 + lane] = T(0);
        }
        return;
    }
    device const T* xr = x + ulong(pair / p.n_expert_used) * K;
    const ulong base = ulong(e) * p.expert_stride;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float up[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (uint k = lane; k < K; k += 32) {
        const float xv = float(xr[k]);
        for (short r = 0; r < 4; ++r) {
            const ulong row = base + ulong(min(n0 + uint(r), N - 1)) * K;
            acc[r] += xv * float(gw[row + k]);
            if (GATE_UP) {
                up[r] += xv * float(uw[row + k]);
            }
        }
    }
    for (short r = 0; r < 4; ++r) {
        const float g = simd_sum(acc[r]);
        const float u = GATE_UP ? simd_sum(up[r]) : 0.0f;
        if (lane == 0 && n0 + uint(r) < N) {
            yr[n0 + r] = T(GATE_UP ? gate_activation(g, p.activation) * u : g);
        }
    }
}

// buffer(0) x [M, K], (1) weight (every expert's), (2) ids u32 [M, U], (3) y
// [M, U, N], (4) DenseMatmulIdParams; gate_up: (1) the gate weight, (5) the
// up weight.
kernel void dense_mv_id_f32(
    device const float* x [[buffer(0)]],
    device const float* weight [[buffer(1)]],
    device const uint* ids [[buffer(2)]],
    device float* y [[buffer(3)]],
    constant DenseMatmulIdParams& params [[buffer(4)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    d_mv_id<float, false>(x, weight, weight, ids, y, params, tgpig, sgitg, tiisg);
}

kernel void dense_gate_up_mv_id_f32(
    device const float* x [[buffer(0)]],
    device const float* gate_weight [[buffer(1)]],
    device const uint* ids [[buffer(2)]],
    device float* y [[buffer(3)]],
    constant DenseMatmulIdParams& params [[buffer(4)]],
    device const float* up_weight [[buffer(5)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    d_mv_id<float, true>(x, gate_weight, up_weight, ids, y, params, tgpig, sgitg, tiisg);
}

kernel void dense_mv_id_f16(
    device const half* x [[buffer(0)]],
    device const half* weight [[buffer(1)]],
    device const uint* ids [[buffer(2)]],
    device half* y [[buffer(3)]],
    constant DenseMatmulIdParams& params [[buffer(4)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    d_mv_id<half, false>(x, weight, weight, ids, y, params, tgpig, sgitg, tiisg);
}

kernel void dense_gate_up_mv_id_f16(
    device const half* x [[buffer(0)]],
    device const half* gate_weight [[buffer(1)]],
    device const uint* ids [[buffer(2)]],
    device half* y [[buffer(3)]],
    constant DenseMatmulIdParams& params [[buffer(4)]],
    device const half* up_weight [[buffer(5)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    d_mv_id<half, true>(x, gate_weight, up_weight, ids, y, params, tgpig, sgitg, tiisg);
}

kernel void dense_mv_id_bf16(
    device const bfloat* x [[buffer(0)]],
    device const bfloat* weight [[buffer(1)]],
    device const uint* ids [[buffer(2)]],
    device bfloat* y [[buffer(3)]],
    constant DenseMatmulIdParams& params [[buffer(4)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    d_mv_id<bfloat, false>(x, weight, weight, ids, y, params, tgpig, sgitg, tiisg);
}

kernel void dense_gate_up_mv_id_bf16(
    device const bfloat* x [[buffer(0)]],
    device const bfloat* gate_weight [[buffer(1)]],
    device const uint* ids [[buffer(2)]],
    device bfloat* y [[buffer(3)]],
    constant DenseMatmulIdParams& params [[buffer(4)]],
    device const bfloat* up_weight [[buffer(5)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort sgitg [[simdgroup_index_in_threadgroup]],
    ushort tiisg [[thread_index_in_simdgroup]])
{
    d_mv_id<bfloat, true>(x, gate_weight, up_weight, ids, y, params, tgpig, sgitg, tiisg);
}

// ---- the matrix form ----

// One tile: slot tg.y's pairs (moe_tile, 32 rows) x weight rows n0 = 64 tg.x
// .. n0 + 63 (gate_up: 32 gate rows n0 = 32 tg.x .. n0 + 31, then the same up
// rows), 128 threads. Each 32-wide step of K: threads 0-63 copy 32 values of
// their weight row into ws, threads 64-127 the 32 x 32 slice of the gathered
// x rows into xs (zeros past K and past the valid rows); 2 x 2 simdgroups of
// 16 x 32 multiply 8 x 8 matrices in f32; the accumulators go through out
// (32 x 64 floats) to the output rows of their pairs.
template <typename T, bool GATE_UP>
static inline void d_mm_id(device const T* x, device const T* gw, device const T* uw, device const uint* offsets,
                           device const uint* order, device T* y, constant DenseMatmulIdParams& p, threadgroup T* xs,
                           threadgroup T* ws, threadgroup float* out, threadgroup uint* rows, uint3 tg, uint tid, uint sg) {
    constexpr short BM = 32, BN = 64, LD = 32 + 8;
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
    // Thread tid < 64 stages weight row wr of matrix wm (gate or up).
    const uint wm = GATE_UP ? tid / 32 : 0, wr = n0 + (GATE_UP ? tid % 32 : tid);
    const bool wlive = GATE_UP ? (tid % 32) < rows_n : tid < rows_n;
    device const T* wrow = (wm == 0 ? gw : uw) + ulong(group) * p.expert_stride + ulong(min(wr, N - 1)) * K;
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
            for (short j = 0; j < 32; ++j) {
                ws[tid * LD + j] = wlive && k0 + j < K ? wrow[k0 + j] : T(0);
            }
        } else {
            const uint t = tid - BN, r = t / 2, h = (t % 2) * 16;
            const uint pr = rows[r];
            device const T* xr = x + ulong(pr < P_ ? pr / U : 0) * K;
            for (short j = 0; j < 16; ++j) {
                const uint k = k0 + h + j;
                xs[r * LD + h + j] = pr < P_ && k < K ? xr[k] : T(0);
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
            const float v = GATE_UP ? gate_activation(out[r * BN + c], p.activation) * out[r * BN + 32 + c] : out[r * BN + c];
            y[ulong(pr) * N + n0 + c] = T(v);
        }
    }
}

// buffer(0) x [M, K], (1) weight, (2) offsets u32 [num_experts + 2] and (5)
// order u32 [M U] (moe_dispatch_sort's), (3) y [M, U, N], (4)
// DenseMatmulIdParams; gate_up: (1) the gate weight, (6) the up weight. Grid
// (ceil(N / 64), floor(P / 32) + num_experts + 1, 1) threadgroups of 128
// (gate_up: ceil(N / 32) columns of tiles).
kernel void dense_mm_id_f16(
    device const half* x [[buffer(0)]],
    device const half* weight [[buffer(1)]],
    device const uint* offsets [[buffer(2)]],
    device half* y [[buffer(3)]],
    constant DenseMatmulIdParams& params [[buffer(4)]],
    device const uint* order [[buffer(5)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]])
{
    threadgroup half xs[32 * (32 + 8)];
    threadgroup half ws[64 * (32 + 8)];
    threadgroup float out[32 * 64];
    threadgroup uint rows[32];
    d_mm_id<half, false>(x, weight, weight, offsets, order, y, params, xs, ws, out, rows, tgpig, tiitg, sgitg);
}

kernel void dense_gate_up_mm_id_f16(
    device const half* x [[buffer(0)]],
    device const half* gate_weight [[buffer(1)]],
    device const uint* offsets [[buffer(2)]],
    device half* y [[buffer(3)]],
    constant DenseMatmulIdParams& params [[buffer(4)]],
    device const uint* order [[buffer(5)]],
    device const half* up_weight [[buffer(6)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]])
{
    threadgroup half xs[32 * (32 + 8)];
    threadgroup half ws[64 * (32 + 8)];
    threadgroup float out[32 * 64];
    threadgroup uint rows[32];
    d_mm_id<half, true>(x, gate_weight, up_weight, offsets, order, y, params, xs, ws, out, rows, tgpig, tiitg, sgitg);
}

kernel void dense_mm_id_bf16(
    device const bfloat* x [[buffer(0)]],
    device const bfloat* weight [[buffer(1)]],
    device const uint* offsets [[buffer(2)]],
    device bfloat* y [[buffer(3)]],
    constant DenseMatmulIdParams& params [[buffer(4)]],
    device const uint* order [[buffer(5)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]])
{
    threadgroup bfloat xs[32 * (32 + 8)];
    threadgroup bfloat ws[64 * (32 + 8)];
    threadgroup float out[32 * 64];
    threadgroup uint rows[32];
    d_mm_id<bfloat, false>(x, weight, weight, offsets, order, y, params, xs, ws, out, rows, tgpig, tiitg, sgitg);
}

kernel void dense_gate_up_mm_id_bf16(
    device const bfloat* x [[buffer(0)]],
    device const bfloat* gate_weight [[buffer(1)]],
    device const uint* offsets [[buffer(2)]],
    device bfloat* y [[buffer(3)]],
    constant DenseMatmulIdParams& params [[buffer(4)]],
    device const uint* order [[buffer(5)]],
    device const bfloat* up_weight [[buffer(6)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tiitg [[thread_index_in_threadgroup]],
    ushort sgitg [[simdgroup_index_in_threadgroup]])
{
    threadgroup bfloat xs[32 * (32 + 8)];
    threadgroup bfloat ws[64 * (32 + 8)];
    threadgroup float out[32 * 64];
    threadgroup uint rows[32];
    d_mm_id<bfloat, true>(x, gate_weight, up_weight, offsets, order, y, params, xs, ws, out, rows, tgpig, tiitg, sgitg);
}
