// Per-expert products with f32, f16 or bf16 weights (CUDA), entry names,
// bindings and math as shaders/dense_matmul_id.metal: for pair p (row
// i = p / U of x) routed to expert e, y[p, j] = sum_k x[i, k] w_e[j, k] (or
// act(gate) * up for the gate_up entries); zeros for e >= num_experts. Grids
// are one-dimensional; the launches are the op's (ts/ops/dense_matmul_id.ts).
//
// Engines:
//   vector (dense_mv_id_<t>, dense_gate_up_mv_id_<t>): SIMT, a block of 8
//     warps per pair and 8 rows of its expert, a warp per row (gate_up: the
//     gate and the up row of one output), lanes striding over K by 16-byte
//     vectors (streaming loads of the weight, x from L1), f32 sums, a warp
//     sum. Bandwidth-bound on the expert rows, read once per pair: 2 flops a
//     16-bit weight is far below what the SMs issue. Rows of a K that is not
//     a multiple of the vector, or unaligned, go element by element.
//   matrix (dense_mm_id_<t>, dense_gate_up_mm_id_<t>, t f16 or bf16):
//     128-thread blocks of 64 pairs of one expert (moe_tile over
//     moe_dispatch_sort's offsets) x 128 weight rows (gate_up: 64 outputs,
//     gate and up columns interleaved by 8), 32-wide k stages of x (rows
//     gathered through the order) and of the weight by cp.async, 4 stages in
//     flight, 2 x 2 warps of 32 x 64 on mma.sync with f32 accumulators, the
//     outputs stored to their pairs' rows. K a multiple of 8 and 16-byte
//     aligned rows; otherwise the tile's outputs are summed by its threads
//     one at a time. A tile of the ids past the experts writes zeros.

namespace {

constexpr u32 DID_WARPS = 8;  // warps of a vector block: one weight row each

// sum_k x[k] w_m[k] for the NW rows w_m over a warp's lanes (every lane
// gets the sums): 16-byte vectors where vec, 4 of them a lane in flight
// (each row's streaming loads and x's issued before any is used); else
// element by element.
template <typename T, int NW>
__device__ __forceinline__ void did_dots(const T* x, const T* const (&w)[NW], u32 K, bool vec, float (&out)[NW]) {
    constexpr int VEC = VecOf<T>::N;
    constexpr u32 UN = 4;
    const u32 lane = threadIdx.x & 31u;
    float acc[NW];
#pragma unroll
    for (int m = 0; m < NW; ++m) acc[m] = 0.0f;
    if (vec) {
        const u32 nv = K / VEC;
        for (u32 v0 = lane; v0 < nv; v0 += 32u * UN) {
            uint4 xr[UN], wr[NW][UN];
            // Past the row's end a lane reloads its last vector (no branch
            // between the loads) and adds nothing.
#pragma unroll
            for (u32 u = 0; u < UN; ++u) {
                const u32 v = min(v0 + 32u * u, nv - 1u);
                xr[u] = __ldg(reinterpret_cast<const uint4*>(x) + v);
#pragma unroll
                for (int m = 0; m < NW; ++m) wr[m][u] = __ldcs(reinterpret_cast<const uint4*>(w[m]) + v);
            }
#pragma unroll
            for (u32 u = 0; u < UN; ++u) {
                if (v0 + 32u * u >= nv) break;
                float xv[VEC];
                unpack16<T>(xr[u], xv);
#pragma unroll
                for (int m = 0; m < NW; ++m) {
                    float wv[VEC];
                    unpack16<T>(wr[m][u], wv);
#pragma unroll
                    for (int j = 0; j < VEC; ++j) acc[m] = fmaf(xv[j], wv[j], acc[m]);
                }
            }
        }
    } else {
        for (u32 k = lane; k < K; k += 32u) {
            const float xv = to_f(x[k]);
#pragma unroll
            for (int m = 0; m < NW; ++m) acc[m] = fmaf(xv, to_f(w[m][k]), acc[m]);
        }
    }
#pragma unroll
    for (int m = 0; m < NW; ++m) out[m] = warp_sum(acc[m]);
}

// A vector block: pair blockIdx.x / ceil(N / 8), row 8 (blockIdx.x % ...) + warp.
template <typename T, bool GATE_UP>
__device__ __forceinline__ void did_mv(const T* x, const T* gw, const T* uw, const u32* ids, T* y, const DenseMatmulIdParams* p) {
    constexpr int VEC = VecOf<T>::N;
    const u32 N = p->N, K = p->K, U = p->n_expert_used;
    const u32 blocks = (N + DID_WARPS - 1u) / DID_WARPS;
    const u32 pair = blockIdx.x / blocks, row = (blockIdx.x % blocks) * DID_WARPS + (threadIdx.x >> 5);
    const u32 lane = threadIdx.x & 31u;
    if (pair >= p->M * U || row >= N) return;
    T* yr = y + u64(pair) * N;
    const u32 e = ids[pair];
    if (e >= p->num_experts) {
        if (lane == 0u) yr[row] = from_f<T>(0.0f);
        return;
    }
    const T* xr = x + u64(pair / U) * K;
    const u64 at = u64(e) * p->expert_stride + u64(row) * K;
    const bool vec = K % VEC == 0u && aligned16(xr) && aligned16(gw + at) && (!GATE_UP || aligned16(uw + at));
    if constexpr (GATE_UP) {
        const T* const w[2] = {gw + at, uw + at};
        float s[2];
        did_dots<T, 2>(xr, w, K, vec, s);
        if (lane == 0u) yr[row] = from_f<T>(gate_activation(s[0], p->activation) * s[1]);
    } else {
        const T* const w[1] = {gw + at};
        float s[1];
        did_dots<T, 1>(xr, w, K, vec, s);
        if (lane == 0u) yr[row] = from_f<T>(s[0]);
    }
}

// ---- the matrix engine ----

constexpr u32 DSTAGES = 4;  // cp.async stages
constexpr u32 DLDS = 40;    // a staged row: 32 elements and 16 bytes of padding

// The tile of block blockIdx.x: slot blockIdx.x / tiles_n's pairs (moe_tile,
// 64 rows) x tile columns tn * 128 (gate_up: outputs tn * 64, 8 gate then 8
// up columns in turn); thread i owns tile column i (its weight row). ASYNC:
// cp.async stages (K a multiple of 8, 16-byte aligned rows); otherwise the
// threads sum the tile's outputs one at a time. Dynamic shared memory:
// DSTAGES x (64 + 128) x DLDS elements of T.
template <typename T, bool GATE_UP, bool ASYNC>
__device__ __forceinline__ void did_mm(const T* x, const T* gw, const T* uw, const u32* offsets, const u32* order, T* y,
                                       const DenseMatmulIdParams* p) {
    constexpr u32 BM = 64, BN = 128, WN = 2, NT = 128;
    constexpr u32 WTM = 32, WTN = 64;
    constexpr u32 MI = WTM / 16, NJ = WTN / 8;
    constexpr u32 XC = BM * 4 / NT, WC = BN * 4 / NT;  // 16-byte pieces per thread per stage
    __shared__ u32 x_row[BM];
    __shared__ u32 y_pair[BM];
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    const u32 M = p->M, N = p->N, K = p->K, U = p->n_expert_used, E = p->num_experts, P = M * U;
    const u32 cols = GATE_UP ? BN / 2u : BN;
    u32 group, n0, rows_m;
    if (!moe_block_rows<T, BM, NT>(offsets, order, y, N, U, E, P, cols, x_row, y_pair, group, n0, rows_m)) return;
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u64 base = u64(group) * p->expert_stride;
    // Tile column c's weight row (gate_up: gate or up by the column's block of 8).
    auto wrow_of = [&](u32 c, bool& live) -> const T* {
        const bool up = GATE_UP && ((c >> 3) & 1u) != 0u;
        const u32 r = GATE_UP ? n0 + (c >> 4) * 8u + (c & 7u) : n0 + c;
        live = r < N;
        return (up ? uw : gw) + base + u64(live ? r : 0u) * K;
    };

    if constexpr (!ASYNC) {
        for (u32 i = tid; i < rows_m * cols; i += NT) {
            const u32 r = i / cols, c = i % cols, pr = y_pair[r], col = n0 + c;
            if (pr >= P || col >= N) continue;
            const T* xr = x + u64(x_row[r]) * K;
            float s[2] = {0.0f, 0.0f};
#pragma unroll
            for (int m = 0; m < (GATE_UP ? 2 : 1); ++m) {
                const T* w = (m == 0 ? gw : uw) + base + u64(col) * K;
                for (u32 k = 0; k < K; ++k) s[m] = fmaf(to_f(xr[k]), to_f(w[k]), s[m]);
            }
            y[u64(pr) * N + col] = from_f<T>(GATE_UP ? gate_activation(s[0], p->activation) * s[1] : s[0]);
        }
        return;
    } else {
        const u32 KT = (K + 31u) / 32u;
        // Starts stage `stage` of k tile kt: x (gathered rows) and the weight by cp.async, zeros past K.
        auto issue = [&](u32 stage, u32 kt) {
            T* xs = smem + stage * (BM + BN) * DLDS;
            T* ws = xs + BM * DLDS;
            const u32 k0 = kt * 32u;
#pragma unroll
            for (u32 c = 0; c < XC; ++c) {
                const u32 i = tid + c * NT, r = i >> 2, k = k0 + 8u * (i & 3u);
                const bool live = y_pair[r] < P && k < K;
                cp_async16(xs + r * DLDS + 8u * (i & 3u), x + u64(x_row[r]) * K + (live ? k : 0u), live);
            }
#pragma unroll
            for (u32 c = 0; c < WC; ++c) {
                const u32 i = tid + c * NT, r = i >> 2, k = k0 + 8u * (i & 3u);
                bool rl;
                const T* w = wrow_of(r, rl);
                const bool live = rl && k < K;
                cp_async16(ws + r * DLDS + 8u * (i & 3u), w + (live ? k : 0u), live);
            }
        };

        float acc[MI][NJ][4];
        mma_zero(acc);
        const u32 wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;
        mma_pipeline<T, DSTAGES, BM, BN, DLDS, true>(acc, smem, KT, wm0, wn0, lane, issue, [](u32) {});
        mma_store<T, GATE_UP>(acc, y, N, N, n0, wm0, wn0, lane, [&](u32 r, u32& pr) {
            if (r >= rows_m) return false;
            pr = y_pair[r];
            return pr < P;
        }, p->activation);
    }
}

// The matrix entries: cp.async where K is a multiple of 8 and every row
// 16-byte aligned (x, both weights, the expert stride).
template <typename T, bool GATE_UP>
__device__ __forceinline__ void did_matrix_entry(const T* x, const T* gw, const T* uw, const u32* offsets, const u32* order, T* y,
                                                 const DenseMatmulIdParams* p) {
    const bool async = p->K % 8u == 0u && aligned16(x) && aligned16(gw) && aligned16(uw) && (u64(p->expert_stride) * sizeof(T)) % 16u == 0u;
    if (async) did_mm<T, GATE_UP, true>(x, gw, uw, offsets, order, y, p);
    else did_mm<T, GATE_UP, false>(x, gw, uw, offsets, order, y, p);
}

}  // namespace

// The vector form (T f32, f16 or bf16, name TAG): buffer(0) x [M, K], (1)
// weight, (2) ids [M, U], (3) y [M, U, N], (4) DenseMatmulIdParams;
// gate_up: (1) the gate weight, (5) the up weight.
#define DID_MV_ENTRIES(T, TAG)                                                                                                        \
    extern "C" __global__ void __launch_bounds__(256)                                                                                 \
        dense_mv_id_##TAG(const T* x, const T* weight, const u32* ids, T* y, const DenseMatmulIdParams* params) {                     \
        did_mv<T, false>(x, weight, weight, ids, y, params);                                                                          \
    }                                                                                                                                 \
    extern "C" __global__ void __launch_bounds__(256) dense_gate_up_mv_id_##TAG(const T* x, const T* gate_weight, const u32* ids, T* y, \
                                                                               const DenseMatmulIdParams* params, const T* up_weight) { \
        did_mv<T, true>(x, gate_weight, up_weight, ids, y, params);                                                                   \
    }
DID_MV_ENTRIES(float, f32)
DID_MV_ENTRIES(__half, f16)
DID_MV_ENTRIES(bf16, bf16)

// The matrix form (T f16 or bf16, name TAG): buffer(0) x [M, K], (1)
// weight, (2) offsets [E + 2], (3) y [M, U, N], (4) DenseMatmulIdParams, (5)
// order [M U]; gate_up: (1) the gate weight, (6) the up weight.
#define DID_MM_ENTRIES(T, TAG)                                                                                                        \
    extern "C" __global__ void __launch_bounds__(128)                                                                                 \
        dense_mm_id_##TAG(const T* x, const T* weight, const u32* offsets, T* y, const DenseMatmulIdParams* params, const u32* order) { \
        did_matrix_entry<T, false>(x, weight, weight, offsets, order, y, params);                                                     \
    }                                                                                                                                 \
    extern "C" __global__ void __launch_bounds__(128) dense_gate_up_mm_id_##TAG(const T* x, const T* gate_weight, const u32* offsets,   \
                                                                               T* y, const DenseMatmulIdParams* params,               \
                                                                               const u32* order, const T* up_weight) {                \
        did_matrix_entry<T, true>(x, gate_weight, up_weight, offsets, order, y, params);                                             \
    }
DID_MM_ENTRIES(__half, f16)
DID_MM_ENTRIES(bf16, bf16)
