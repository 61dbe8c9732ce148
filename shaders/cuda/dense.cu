// Dense matrix products (CUDA), entry names and bindings as
// shaders/dense.metal: y[b, m, n] = sum_k x[b, m, k] * w[b / r, n, k], the
// weight stored [out, in], products summed in f32. Every grid is
// one-dimensional (blockIdx.x decoded below), so no size meets the 65535
// limit of gridDim.y and z. The launches are the op's (ts/ops/dense.ts,
// denseMvCudaLaunch, denseMmCudaLaunch).
//
// Vector form (decode: dense_mv_<t>, dense_matvec_*, hf2q_dense_gemv_*):
// memory-bound on the weight, read once. 256 threads (8 warps) a block over
// a few weight rows (the grid tells how many).
//   - f16 and bf16 with x of the same type (dense_mv_f16/bf16): tensor cores.
//     Each warp step takes 32 k of 16 weight rows: lane (g, t) = (lane / 4,
//     lane % 4) loads 16 bytes (8 elements at k + 8t) of rows g and g + 8 and
//     of x row g (token g; 8 tokens make the mma's n = 8), and two
//     m16n8k16 mmas take elements 0-3 and 4-7 as the fragments' k pairs
//     (2t, 2t + 1) and (2t + 8, 2t + 9). Any order of k gives the same dot
//     products as long as the A and B fragments agree on it, and this one
//     lets every load be 16 contiguous bytes of a row. Needs k a multiple of
//     8 and 16-byte aligned rows; otherwise the SIMT path below.
//   - the rest at one token (the crate's entries, dense_mv_f32, unaligned
//     rows): a warp a row, whole (mv_lanes): the lanes stride k, 8 vectors
//     of 16 bytes in flight a lane, one warp sum; no barrier, so no warp
//     pauses to meet the others.
//   - the rest at 2 to 8 tokens: SIMT, all 8 warps splitting k, each thread
//     R rows x up to 8 tokens of f32 sums, a block sum at the end.
// Matrix form (prefill: dense_mm_<t>, dense_gemm_f16, hf2q_dense_mm_*):
//   - 16-bit weights on Hopper (compiled for sm_90a, MLXN_WGMMA; the launch
//     names the tile: 256 threads and WG_SMEM<BN> bytes of dynamic shared
//     memory): 128 x BN tiles (BN = 256, 224, 192, 160 or 128, the
//     op's choice by the rounds of tiles they leave on the SMs), two
//     warpgroups of 64 x BN on wgmma.mma_async m64nBNk16 reading x and the
//     weight from shared memory in the 128-byte swizzled layout through
//     matrix descriptors (common.cuh), f32 accumulators in registers. k is staged
//     64 at a time through 4 or 5 stages filled by cp.async 16-byte copies
//     (or registers and st.shared for an f32 x or unaligned rows) two or
//     three tiles ahead; see wg_tile for the step. TMA would need a tensor map made by
//     the driver on the host, which the C ABI cannot carry; 1-D bulk copies
//     write contiguous bytes, which a swizzled row is not. Built without
//     sm_90a, the same launch runs mma.sync tiles of the same shape.
//     (bench/notes/dense-wgmma-2026-11-26.md: the design and its predictions.)
//   - 16-bit weights elsewhere: tensor cores (mma.sync m16n8k16, f32 accumulate),
//     ldmatrix from shared tiles of BK = 32 k padded by 16 bytes per row
//     (ldmatrix and the 16-byte stores meet no bank conflicts), 4 cp.async
//     stages. Tiles by block size: 256 threads take 128 x 256 outputs (warps
//     2 x 4 of 64 x 64: 4 mma per ldmatrix), 128 threads 64 x 128 (warps
//     2 x 2 of 32 x 64). Tiles are walked in groups of 8 tile rows so that
//     neighbouring blocks share weight columns in L2. An f32 x (the hf2q
//     kernels) is converted to the weight's type through registers, its
//     loads issued a stage ahead and stored after the step's mmas; rows that
//     are not 16-byte aligned (or k not a multiple of 8) take the same
//     register path one element at a time.
//   - f32 weights: a 64 x 64 SIMT tile, 256 threads of 4 x 4 outputs.

namespace {

constexpr u32 WARPS = 8;  // warps of a vector-form block

// One batch of a product: x [M, K], w [N, K], y [M, N], rows the given
// numbers of elements apart.
template <typename TX, typename TW, typename TY>
struct Operands {
    const TX* x;
    const TW* w;
    TY* y;
    u64 x_row, w_row, y_row;
};

// Whether 16 bytes can be read at every 8-element boundary of the rows of T
// at p, `row` elements apart.
template <typename T>
__device__ __forceinline__ bool rows16(const T* p, u64 row) {
    return aligned16(p) && (row * sizeof(T)) % 16 == 0;
}

// ---- the vector form, SIMT ----

// One token: rows row0 .. row0 + rows - 1 of w (those below N) against x
// [K]: y[row] = sum_k x[k] w[row, k]. Warp q of the block takes rows q,
// q + 8, ... of them, each whole, and ends it with a warp sum: no barrier,
// so no warp waits for the others (the crate's entries and f32 one-token
// launches give LANE_ROWS rows a block: a row a warp). Where the rows and x
// allow 16-byte loads (K a multiple of the weight's 16-byte vector, rows and
// x 16-byte aligned), lane l sums vectors l, l + 32, ... of the row, U of
// them in flight; otherwise elements l, l + 32, ..., U in flight. The two
// walks are chosen once, outside the row loop. bench/notes/gemv-dense-
// 2026-11-28.md: 0.95-0.96 of the copy rate at Qwen3.6's and Gemma 4's
// projections in 8-row blocks, 0.80-0.97 in 16-row blocks (two rows a warp
// in turn), 0.60-0.67 for a block split over k.
constexpr u32 LANE_ROWS = WARPS;
// acc plus the products of a row w's 16-byte vectors first, first + stride,
// ... (below V) with x's matching elements, U of the vectors a thread in
// flight (evict-first loads: a weight is read once), summed in that order.
template <u32 U, typename TX, typename TW>
__device__ __forceinline__ float dot_vectors(const TX* x, const TW* w, u32 V, u32 first, u32 stride, float acc) {
    constexpr u32 VEC = 16 / sizeof(TW);
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (u32 c0 = first; c0 < V; c0 += stride * U) {
        uint4 wv[U];
#pragma unroll
        for (u32 u = 0; u < U; ++u) {
            const u32 c = c0 + stride * u;
            wv[u] = c < V ? __ldcs(reinterpret_cast<const uint4*>(w + u64(c) * VEC)) : zero;
        }
#pragma unroll
        for (u32 u = 0; u < U; ++u) {
            const u32 c = c0 + stride * u;
            if (c < V) {
                float xv[VEC], wf[VEC];
                load_elems(x + u64(c) * VEC, xv);
                load_elems(reinterpret_cast<const TW*>(&wv[u]), wf);
#pragma unroll
                for (u32 e = 0; e < VEC; ++e) acc = fmaf(wf[e], xv[e], acc);
            }
        }
    }
    return acc;
}
template <typename TX, typename TW, typename TY>
__device__ __forceinline__ void mv_lanes(const TX* x, const TW* w, u64 w_row, TY* y, u32 N, u32 K, u32 row0, u32 rows) {
    constexpr u32 VEC = 16 / sizeof(TW), U = 8;
    const u32 lane = threadIdx.x & 31u, nw = blockDim.x >> 5, V = K / VEC;
    if (K % VEC == 0 && rows16(w, w_row) && aligned16(x)) {
        for (u32 r = threadIdx.x >> 5; r < rows && row0 + r < N; r += nw) {
            float acc = dot_vectors<U>(x, w + u64(row0 + r) * w_row, V, lane, 32u, 0.0f);
            acc = warp_sum(acc);
            if (lane == 0) y[row0 + r] = from_f<TY>(acc);
        }
    } else {
        for (u32 r = threadIdx.x >> 5; r < rows && row0 + r < N; r += nw) {
            const TW* wr = w + u64(row0 + r) * w_row;
            float acc = 0.0f;
            for (u32 k0 = lane; k0 < K; k0 += 32u * U) {
                float wv[U];
#pragma unroll
                for (u32 u = 0; u < U; ++u) wv[u] = k0 + 32u * u < K ? to_f(wr[k0 + 32u * u]) : 0.0f;
#pragma unroll
                for (u32 u = 0; u < U; ++u)
                    if (k0 + 32u * u < K) acc = fmaf(wv[u], to_f(x[k0 + 32u * u]), acc);
            }
            acc = warp_sum(acc);
            if (lane == 0) y[row0 + r] = from_f<TY>(acc);
        }
    }
}

// Rows row0 .. row0 + rows - 1 of w (those below N) against the m <= MT rows
// of x (2 to 8 tokens; one token takes mv_lanes): y[i * y_row + row] =
// sum_k x[i, k] w[row, k]. R rows at a time, the block's threads striding
// over k by 16-byte vectors of the weight (VEC elements) where the rows
// allow, else by elements; a warp sum, then a sum over the warps through
// shared memory.
template <typename TX, typename TW, typename TY, u32 MT, u32 R>
__device__ __forceinline__ void mv_simt(const TX* x, u64 x_row, const TW* w, u64 w_row, TY* y, u64 y_row, u32 m, u32 N, u32 K,
                                        u32 row0, u32 rows) {
    static_assert(R * MT <= 32, "one thread per sum at the end");
    __shared__ float red[WARPS][R * MT];
    constexpr u32 VEC = 16 / sizeof(TW);
    const u32 tid = threadIdx.x, nth = blockDim.x, lane = tid & 31u, warp = tid >> 5, nw = nth >> 5;
    const bool vec = K % VEC == 0 && rows16(w, w_row) && rows16(x, x_row);
    for (u32 g0 = 0; g0 < rows; g0 += R) {
        float acc[R][MT];
#pragma unroll
        for (u32 r = 0; r < R; ++r)
#pragma unroll
            for (u32 i = 0; i < MT; ++i) acc[r][i] = 0.0f;
        const TW* wr[R];
#pragma unroll
        for (u32 r = 0; r < R; ++r) wr[r] = w + u64(min(row0 + g0 + r, N - 1)) * w_row;
        if (vec) {
#pragma unroll 2
            for (u32 c = tid; c < K / VEC; c += nth) {
                float wv[R][VEC];
#pragma unroll
                for (u32 r = 0; r < R; ++r) load_elems(wr[r] + u64(c) * VEC, wv[r]);
#pragma unroll
                for (u32 i = 0; i < MT; ++i) {
                    if (i < m) {
                        float xv[VEC];
                        load_elems(x + i * x_row + u64(c) * VEC, xv);
#pragma unroll
                        for (u32 r = 0; r < R; ++r)
#pragma unroll
                            for (u32 e = 0; e < VEC; ++e) acc[r][i] = fmaf(wv[r][e], xv[e], acc[r][i]);
                    }
                }
            }
        } else {
            for (u32 k = tid; k < K; k += nth) {
#pragma unroll
                for (u32 i = 0; i < MT; ++i) {
                    if (i < m) {
                        const float xv = to_f(x[i * x_row + k]);
#pragma unroll
                        for (u32 r = 0; r < R; ++r) acc[r][i] = fmaf(to_f(wr[r][k]), xv, acc[r][i]);
                    }
                }
            }
        }
#pragma unroll
        for (u32 r = 0; r < R; ++r)
#pragma unroll
            for (u32 i = 0; i < MT; ++i) {
                const float v = warp_sum(acc[r][i]);
                if (lane == 0) red[warp][r * MT + i] = v;
            }
        __syncthreads();
        if (tid < R * MT) {
            const u32 r = tid / MT, i = tid % MT, row = row0 + g0 + r;
            float s = 0.0f;
            for (u32 q = 0; q < nw; ++q) s += red[q][tid];
            if (i < m && g0 + r < rows && row < N) y[i * y_row + row] = from_f<TY>(s);
        }
        __syncthreads();
    }
}

// ---- the vector form, tensor cores ----

// Rows row0 .. row0 + 16 RT - 1 of w (contiguous [N, K], K a multiple of 8,
// 16-byte aligned rows) against the m <= 8 rows of x ([m, K]): y[i * N +
// row]. The lane layout is the file comment's; each warp takes every 8th
// 32-wide step of k, U steps of loads in flight, then the 8 warps' sums meet
// in shared memory.
template <typename T, u32 RT>
__device__ __forceinline__ void mv_tc(const T* x, const T* w, T* y, u32 m, u32 N, u32 K, u32 row0) {
    constexpr u32 U = 4 / RT;
    __shared__ float red[WARPS][RT * 128];
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u32 g = lane >> 2, t = lane & 3u;
    const u32 steps = (K + 31) / 32;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const T* lo[RT];
    const T* hi[RT];
#pragma unroll
    for (u32 rt = 0; rt < RT; ++rt) {
        lo[rt] = w + u64(min(row0 + 16 * rt + g, N - 1)) * K + 8 * t;
        hi[rt] = w + u64(min(row0 + 16 * rt + g + 8, N - 1)) * K + 8 * t;
    }
    const T* xr = x + u64(min(g, m - 1)) * K + 8 * t;
    const bool token = g < m;
    float acc[RT][4];
#pragma unroll
    for (u32 rt = 0; rt < RT; ++rt) acc[rt][0] = acc[rt][1] = acc[rt][2] = acc[rt][3] = 0.0f;
    for (u32 s0 = warp; s0 < steps; s0 += WARPS * U) {
        uint4 wl[U][RT], wh[U][RT], xv[U];
#pragma unroll
        for (u32 u = 0; u < U; ++u) {
            const u32 s = s0 + u * WARPS;
            const u64 k = u64(s) * 32;
            const bool live = s < steps && k + 8 * t < K;
#pragma unroll
            for (u32 rt = 0; rt < RT; ++rt) {
                wl[u][rt] = live ? __ldcs(reinterpret_cast<const uint4*>(lo[rt] + k)) : zero;
                wh[u][rt] = live ? __ldcs(reinterpret_cast<const uint4*>(hi[rt] + k)) : zero;
            }
            xv[u] = live && token ? __ldg(reinterpret_cast<const uint4*>(xr + k)) : zero;
        }
#pragma unroll
        for (u32 u = 0; u < U; ++u) {
#pragma unroll
            for (u32 rt = 0; rt < RT; ++rt) {
                const u32 a0[4] = {wl[u][rt].x, wh[u][rt].x, wl[u][rt].y, wh[u][rt].y};
                mma16<T>(acc[rt], a0, xv[u].x, xv[u].y);
                const u32 a1[4] = {wl[u][rt].z, wh[u][rt].z, wl[u][rt].w, wh[u][rt].w};
                mma16<T>(acc[rt], a1, xv[u].z, xv[u].w);
            }
        }
    }
#pragma unroll
    for (u32 rt = 0; rt < RT; ++rt)
#pragma unroll
        for (u32 e = 0; e < 4; ++e) red[warp][rt * 128 + lane * 4 + e] = acc[rt][e];
    __syncthreads();
    for (u32 j = tid; j < RT * 128; j += blockDim.x) {
        float s = 0.0f;
#pragma unroll
        for (u32 q = 0; q < WARPS; ++q) s += red[q][j];
        const u32 rt = j / 128, l = (j / 4) % 32, e = j % 4;
        const u32 row = row0 + 16 * rt + (l >> 2) + 8 * (e >> 1), tok = 2 * (l & 3u) + (e & 1u);
        if (row < N && tok < m) y[u64(tok) * N + row] = from_f<T>(s);
    }
}

// Rows a block of dense_mv takes, from the grid (ts: denseMvCudaRows): f32
// LANE_ROWS at one token and below 1024 rows; else 16, and 32 from 8192
// rows on.
template <typename T>
__device__ __forceinline__ u32 mv_rows(u32 blocks, u32 n) {
    if (sizeof(T) == 4 && blocks * LANE_ROWS >= n) return LANE_ROWS;
    return blocks * 16u >= n ? 16u : 32u;
}
// Before the wait (common.cuh MLXN_PREFETCH_ENTRY): the block's weight rows
// into L2, where the grid has at most one block an SM.
template <typename T>
__device__ __forceinline__ void dense_mv_prefetch(const T* w, const DenseParams* p) {
    if (threadIdx.x != 0 || p->batch == 0u || !mlxn_grid_within_sms()) return;
    const u32 blocks = gridDim.x / p->batch, rows = mv_rows<T>(blocks, p->n);
    if (blocks == 0u) return;
    const u32 b = blockIdx.x / blocks, row0 = (blockIdx.x % blocks) * rows, wb = b / (p->batch / p->w_batch);
    if (row0 >= p->n) return;
    const u32 r1 = min(p->n, row0 + rows);
    mlxn_prefetch_l2(w + (u64(wb) * p->n + row0) * p->k, u64(r1 - row0) * p->k * sizeof(T));
}

// dense_mv_<t>: blockIdx.x = batch * blocks + row block; a block takes
// mv_rows rows (the grid tells which).
template <typename T>
__device__ __forceinline__ void dense_mv(const T* x, const T* w, T* y, const DenseParams* p) {
    const u32 blocks = gridDim.x / p->batch, rows = mv_rows<T>(blocks, p->n);
    const u32 b = blockIdx.x / blocks, row0 = (blockIdx.x % blocks) * rows;
    const u32 wb = b / (p->batch / p->w_batch);
    const T* xb = x + u64(b) * p->m * p->k;
    const T* wp = w + u64(wb) * p->n * p->k;
    T* yb = y + u64(b) * p->m * p->n;
    if constexpr (sizeof(T) == 2) {
        if (p->k % 8 == 0 && aligned16(xb) && aligned16(wp) && blockDim.x == WARPS * 32) {
            if (rows == 16) mv_tc<T, 1>(xb, wp, yb, p->m, p->n, p->k, row0);
            else mv_tc<T, 2>(xb, wp, yb, p->m, p->n, p->k, row0);
            return;
        }
    }
    if (p->m == 1u) mv_lanes(xb, wp, p->k, yb, p->n, p->k, row0, rows);
    else mv_simt<T, T, T, 8, 2>(xb, p->k, wp, p->k, yb, p->n, p->m, p->n, p->k, row0, rows);
}

// ---- the matrix form, tensor cores ----

constexpr u32 BK = 32;         // k per stage
constexpr u32 STAGES = 4;      // cp.async stages
constexpr u32 LDS = BK + 8;    // a staged row: 32 elements and 16 bytes of padding

// Elements k .. k + 7 of a row as TS pairs: one 16-byte load (two for f32)
// where vec (16-byte aligned rows, K a multiple of 8), else element by
// element, zeros past K.
template <typename TS, typename T>
__device__ __forceinline__ uint4 load8(const T* row, u32 k, u32 K, bool vec) {
    if (vec) {
        if constexpr (sizeof(T) == 2) {
            return *reinterpret_cast<const uint4*>(row + k);
        } else {
            const float4 a = *reinterpret_cast<const float4*>(row + k);
            const float4 b = *reinterpret_cast<const float4*>(row + k + 4);
            return make_uint4(pack2<TS>(a.x, a.y), pack2<TS>(a.z, a.w), pack2<TS>(b.x, b.y), pack2<TS>(b.z, b.w));
        }
    }
    float v[8];
#pragma unroll
    for (u32 e = 0; e < 8; ++e) v[e] = k + e < K ? to_f(row[k + e]) : 0.0f;
    return make_uint4(pack2<TS>(v[0], v[1]), pack2<TS>(v[2], v[3]), pack2<TS>(v[4], v[5]), pack2<TS>(v[6], v[7]));
}

// Starts N 16-byte chunks a thread of a stage's rows of one operand (R rows
// of T from p, `row` elements apart, from row r0; elements k0 .. k0 + 31):
// chunk c is elements 8 (i % 4) .. of tile row i / 4, i = tid + c NT (as
// park_chunks stores them), copied into s by cp.async (ASYNC) or loaded into
// regs[c] as TS pairs; zeros past R and K. Chunks i >= TOTAL (the tile's 4
// a row, where they are not a multiple of NT) are not the tile's: skipped.
template <u32 N, u32 NT, u32 LDS, bool ASYNC, u32 TOTAL = N * NT, typename TS, typename T, u32 C>
__device__ __forceinline__ void issue_chunks(TS* s, uint4 (&regs)[C], const T* p, u64 row, u32 r0, u32 R, u32 k0, u32 K, bool vec,
                                             u32 tid) {
#pragma unroll
    for (u32 c = 0; c < N; ++c) {
        const u32 i = tid + c * NT, r = i >> 2, k = k0 + 8 * (i & 3u);
        if (TOTAL % NT != 0 && i >= TOTAL) break;
        const bool live = r0 + r < R && k < K;
        const T* rp = p + (live ? u64(r0 + r) * row : 0);
        if constexpr (ASYNC) cp_async16(s + r * LDS + 8 * (i & 3u), rp + (live ? k : 0), live);
        else regs[c] = live ? load8<TS>(rp, k, K, vec) : make_uint4(0, 0, 0, 0);
    }
}

// The BM x BN tile at (m0, n0) of y = x W^T for operands o. X_ASYNC /
// W_ASYNC: that operand is copied by cp.async (TX the weight's type, 16-byte
// aligned rows, K a multiple of 8); otherwise through registers (converted
// to TW, any alignment). Dynamic shared memory: STAGES x (BM + BN) x LDS
// elements of TW. Not inlined: its registers are then allocated apart from
// the Hopper tiles (wg_tile) that the same entries hold, which would
// otherwise push the entry past 255 registers into spills. wg_tile itself
// is inlined: ptxas serializes wgmma whose pipeline crosses a call.
template <typename TX, typename TW, typename TY, u32 BM, u32 BN, u32 WM, u32 WN, bool X_ASYNC, bool W_ASYNC>
__device__ __noinline__ void mm_tc(const Operands<TX, TW, TY> o, u32 M, u32 N, u32 K, u32 m0, u32 n0) {
    constexpr u32 NT = WM * WN * 32;
    constexpr u32 WTM = BM / WM, WTN = BN / WN;
    constexpr u32 MI = WTM / 16, NJ = WTN / 8;
    // 16-byte chunks per thread per stage (the weight's last partial where BN
    // is not a multiple of NT / 4: the Hopper widths on this path)
    constexpr u32 XC = BM * 4 / NT, WC = (BN * 4 + NT - 1) / NT;
    static_assert(XC * NT == BM * 4 && NJ % 2 == 0 && WTM * WM == BM && WTN * WN == BN, "tile shape");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    TW* smem = reinterpret_cast<TW*>(smem_raw);
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const bool xvec = K % 8 == 0 && rows16(o.x, o.x_row);
    const bool wvec = K % 8 == 0 && rows16(o.w, o.w_row);
    const u32 KT = (K + BK - 1) / BK;

    uint4 xr[X_ASYNC ? 1 : XC], wr[W_ASYNC ? 1 : WC];
    // Starts stage `stage` of k tile kt: cp.async copies, or loads into registers.
    auto issue = [&](u32 stage, u32 kt) {
        TW* xs = smem + stage * (BM + BN) * LDS;
        TW* ws = xs + BM * LDS;
        const u32 k0 = kt * BK;
        issue_chunks<XC, NT, LDS, X_ASYNC>(xs, xr, o.x, o.x_row, m0, M, k0, K, xvec, tid);
        issue_chunks<WC, NT, LDS, W_ASYNC, BN * 4>(ws, wr, o.w, o.w_row, n0, N, k0, K, wvec, tid);
    };
    // Stores the register-staged chunks of stage `stage`.
    auto park = [&](u32 stage) {
        TW* xs = smem + stage * (BM + BN) * LDS;
        TW* ws = xs + BM * LDS;
        if constexpr (!X_ASYNC) park_chunks<NT, LDS>(xs, xr, tid);
        if constexpr (!W_ASYNC) park_chunks<NT, LDS, BN * 4>(ws, wr, tid);
    };

    float acc[MI][NJ][4];
    mma_zero(acc);
    const u32 wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;
    mma_pipeline<TW, STAGES, BM, BN, LDS, true>(acc, smem, KT, wm0, wn0, lane, issue, park);
    mma_store<TY, false>(acc, o.y, o.y_row, N, n0, wm0, wn0, lane, [&](u32 r, u32& row) {
        row = m0 + r;
        return row < M;
    });
}

// The block's tile and batch, and the copy path its operands allow
// (cp.async where the rows are 16-byte aligned and K a multiple of 8, x only
// where it is the weight's type): tile(o, m0, n0, path), path a
// CopyPath<X_ASYNC, W_ASYNC>.
template <bool X, bool W> struct CopyPath {
    static constexpr bool X_ASYNC = X, W_ASYNC = W;
};
template <typename TX, typename TW, typename TY, u32 BM, u32 BN, typename At, typename Tile>
__device__ __forceinline__ void with_copy_path(u32 M, u32 N, u32 K, At at, Tile&& tile) {
    u32 b, m0, n0;
    tile_of<BM, BN>(M, N, b, m0, n0);
    const Operands<TX, TW, TY> o = at(b);
    const bool w_async = K % 8 == 0 && rows16(o.w, o.w_row);
    if constexpr (sizeof(TX) == sizeof(TW)) {
        if (w_async && rows16(o.x, o.x_row)) {
            tile(o, m0, n0, CopyPath<true, true>());
            return;
        }
    }
    if (w_async) tile(o, m0, n0, CopyPath<false, true>());
    else tile(o, m0, n0, CopyPath<false, false>());
}

// One tile shape of mma.sync tiles.
template <typename TX, typename TW, typename TY, u32 BM, u32 BN, u32 WM, u32 WN, typename At>
__device__ __forceinline__ void mm_shape(u32 M, u32 N, u32 K, At at) {
    with_copy_path<TX, TW, TY, BM, BN>(M, N, K, at, [&](const Operands<TX, TW, TY>& o, u32 m0, u32 n0, auto path) {
        mm_tc<TX, TW, TY, BM, BN, WM, WN, decltype(path)::X_ASYNC, decltype(path)::W_ASYNC>(o, M, N, K, m0, n0);
    });
}

// ---- the matrix form on Hopper: wgmma ----

constexpr u32 WG_BM = 128;                 // rows of x a block takes (two warpgroups of 64)
constexpr u32 WG_BK = 64;                  // k per stage: one 128-byte swizzled row
// Stages of shared memory: 4 of 48 KiB at BN = 256, 5 for the narrower
// tiles (whose steps are shorter, so loads need more of them in flight); the
// wgmma read one stage while the copies fill those 2 or 3 tiles ahead.
template <u32 BN> constexpr u32 WG_STAGES = BN == 256 ? 4u : 5u;

// Dynamic shared memory of the Hopper launch of a 128 x BN tile (the op's
// denseMmHopperBytes): WG_STAGES stages of 128 + BN swizzled rows of 128
// bytes (x's rows, then the weight's), and 1024 bytes to align them; the
// widths' sizes all differ, so the size names the width.
template <u32 BN> constexpr u32 WG_SMEM = WG_STAGES<BN> * (WG_BM + BN) * 128u + 1024u;

#ifdef MLXN_WGMMA
// The 128 x BN tile at (m0, n0) of y = x W^T on wgmma (the file comment's
// Hopper path): 256 threads, warpgroup g takes rows 64 g .. 64 g + 63 of the
// tile with m64nBNk16 (BN / 2 f32 accumulators a thread). Thread t copies
// 16-byte chunk t % 8 of rows t / 8 + 32 j of each stage (8 threads a
// 128-byte row), by cp.async where X_ASYNC / W_ASYNC (TX the weight's type,
// 16-byte aligned rows, K a multiple of 8), otherwise through registers
// (converted to TW, any alignment), zeros past M, N and K; the k loop is
// common.cuh's wg_pipeline.
// One operand's part of a stage at k: this thread's R rows first, first + 32,
// ... of `rows` (rows `stride` elements apart), 16 bytes each at k, into the
// swizzled stage at dst (rows 4096 bytes apart) by cp.async where ASYNC,
// otherwise into regs as TW; zeros past rows and K.
template <bool ASYNC, u32 R, typename TW, typename T>
__device__ __forceinline__ void wg_issue_rows(unsigned char* dst, uint4* regs, const T* base, u64 stride, u32 first, u32 rows,
                                              u32 k, u32 K, bool vec) {
#pragma unroll
    for (u32 j = 0; j < R; ++j) {
        const u32 r = first + 32 * j;
        const bool live = r < rows && k < K;
        const T* row = base + (live ? u64(r) * stride : 0);
        if constexpr (ASYNC) cp_async16(dst + 4096 * j, row + (live ? k : 0), live);
        else regs[j] = live ? load8<TW>(row, k, K, vec) : make_uint4(0, 0, 0, 0);
    }
}

template <typename TX, typename TW, typename TY, u32 BN, bool X_ASYNC, bool W_ASYNC>
__device__ __forceinline__ void wg_tile(const Operands<TX, TW, TY>& o, u32 M, u32 N, u32 K, u32 m0, u32 n0) {
    constexpr u32 STAGES = WG_STAGES<BN>;
    constexpr u32 STAGE = (WG_BM + BN) * 128u;   // bytes of a stage
    constexpr u32 XR = WG_BM / 32, WR = BN / 32;  // rows a thread copies a stage, 32 apart
    constexpr u32 R = BN / 2;                     // accumulators a thread
    static_assert(BN % 32 == 0 && BN <= 256, "tile width");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    const u32 tid = threadIdx.x, c = tid & 7u, r0 = tid >> 3;
    // Rows r0 + 32 j share r0's swizzle: their chunks sit 4096 j bytes apart.
    const u32 sw = sw128_offset(r0, c);
    const bool xvec = K % 8 == 0 && rows16(o.x, o.x_row);
    const bool wvec = K % 8 == 0 && rows16(o.w, o.w_row);
    const u32 KT = (K + WG_BK - 1) / WG_BK;

    uint4 xr[X_ASYNC ? 1 : XR], wr[W_ASYNC ? 1 : WR];
    // Starts stage `stage` of k tile kt: cp.async copies, or loads into registers.
    auto issue = [&](u32 stage, u32 kt) {
        unsigned char* xs = smem + stage * STAGE;
        unsigned char* ws = xs + WG_BM * 128u;
        const u32 k = kt * WG_BK + 8 * c;
        wg_issue_rows<X_ASYNC, XR, TW>(xs + sw, xr, o.x, o.x_row, m0 + r0, M, k, K, xvec);
        wg_issue_rows<W_ASYNC, WR, TW>(ws + sw, wr, o.w, o.w_row, n0 + r0, N, k, K, wvec);
    };
    // Stores the register-staged chunks of stage `stage`.
    auto park = [&](u32 stage) {
        unsigned char* xs = smem + stage * STAGE;
        unsigned char* ws = xs + WG_BM * 128u;
        if constexpr (!X_ASYNC) {
#pragma unroll
            for (u32 j = 0; j < XR; ++j) *reinterpret_cast<uint4*>(xs + sw + 4096 * j) = xr[j];
        }
        if constexpr (!W_ASYNC) {
#pragma unroll
            for (u32 j = 0; j < WR; ++j) *reinterpret_cast<uint4*>(ws + sw + 4096 * j) = wr[j];
        }
    };

    float acc[R];
#pragma unroll
    for (u32 i = 0; i < R; ++i) acc[i] = 0.0f;
    wg_pipeline<TW, BN, STAGES, X_ASYNC && W_ASYNC>(acc, smem, KT, issue, park);

    const u32 lane = tid & 31u, g = lane >> 2, t = lane & 3u;
    const u32 row0 = m0 + (tid >> 7) * 64u + ((tid >> 5) & 3u) * 16u + g;
    const bool pair = o.y_row % 2 == 0 && (reinterpret_cast<u64>(o.y) % (2 * sizeof(TY))) == 0;
#pragma unroll
    for (u32 h = 0; h < 2; ++h) {
        const u32 row = row0 + 8 * h;
        if (row >= M) continue;
        TY* yr = o.y + u64(row) * o.y_row;
#pragma unroll
        for (u32 q = 0; q < BN / 8; ++q) {
            const u32 col = n0 + 8 * q + 2 * t;
            const float v0 = acc[4 * q + 2 * h], v1 = acc[4 * q + 2 * h + 1];
            if (pair && col + 1 < N) {
                store2(yr + col, v0, v1);
            } else {
                if (col < N) yr[col] = from_f<TY>(v0);
                if (col + 1 < N) yr[col + 1] = from_f<TY>(v1);
            }
        }
    }
}

// One Hopper tile width.
template <typename TX, typename TW, typename TY, u32 BN, typename At>
__device__ __forceinline__ void wg_shape(u32 M, u32 N, u32 K, At at) {
    with_copy_path<TX, TW, TY, WG_BM, BN>(M, N, K, at, [&](const Operands<TX, TW, TY>& o, u32 m0, u32 n0, auto path) {
        wg_tile<TX, TW, TY, BN, decltype(path)::X_ASYNC, decltype(path)::W_ASYNC>(o, M, N, K, m0, n0);
    });
}
#endif  // MLXN_WGMMA

// The 128 x BN tile of a Hopper launch: wgmma where compiled for sm_90a, else
// mma.sync tiles of the same shape, so that the grid the launch was made for
// stays right: 8 warps of 64 x BN / 4, or of 32 x BN / 2 where BN / 4 is
// not a whole number of 16-column pairs (ldmatrix's: 160 and 224).
template <typename TX, typename TW, typename TY, u32 BN, typename At>
__device__ __forceinline__ void wide_shape(u32 M, u32 N, u32 K, At at) {
#ifdef MLXN_WGMMA
    wg_shape<TX, TW, TY, BN>(M, N, K, at);
#else
    constexpr u32 WN = BN % 64 == 0 ? 4u : 2u;
    mm_shape<TX, TW, TY, WG_BM, BN, 8 / WN, WN>(M, N, K, at);
#endif
}

// The tile shape the launch names (the op's denseMmCudaLaunch): 128 threads
// 64 x 128 on mma.sync; 256 threads with the dynamic shared memory of a
// Hopper launch (WG_SMEM of 256, 224, 192, 160 or 128) 128 x that
// width, on wgmma where compiled for it; any other 256-thread launch
// 128 x 256 on mma.sync.
template <typename TX, typename TW, typename TY, typename At>
__device__ __forceinline__ void mm_tensor(u32 M, u32 N, u32 K, At at) {
    if (blockDim.x != 256) {
        mm_shape<TX, TW, TY, 64, 128, 2, 2>(M, N, K, at);
        return;
    }
    const u32 bytes = dynamic_smem_bytes();
    if (bytes == WG_SMEM<256>) wide_shape<TX, TW, TY, 256>(M, N, K, at);
    else if (bytes == WG_SMEM<224>) wide_shape<TX, TW, TY, 224>(M, N, K, at);
    else if (bytes == WG_SMEM<192>) wide_shape<TX, TW, TY, 192>(M, N, K, at);
    else if (bytes == WG_SMEM<160>) wide_shape<TX, TW, TY, 160>(M, N, K, at);
    else if (bytes == WG_SMEM<128>) wide_shape<TX, TW, TY, 128>(M, N, K, at);
    else mm_shape<TX, TW, TY, 128, 256, 2, 4>(M, N, K, at);
}

// ---- the matrix form, f32 SIMT ----

// The block's 64 x 64 tile of y = x W^T (f32): 256 threads, 4 x 4 outputs
// each; x and w staged k-major 16 k at a time, the next slice's loads in
// registers during the current one's products.
template <typename At>
__device__ __forceinline__ void mm_f32(u32 M, u32 N, u32 K, At at) {
    constexpr u32 B = 64, KS = 16, LD = B + 4;
    __shared__ __align__(16) float xs[2][KS][LD];
    __shared__ __align__(16) float ws[2][KS][LD];
    const u32 tid = threadIdx.x;
    const u32 tiles_n = (N + B - 1) / B, per = tiles_n * ((M + B - 1) / B);
    const u32 b = blockIdx.x / per, p = blockIdx.x % per;
    const u32 m0 = p / tiles_n * B, n0 = p % tiles_n * B;
    const Operands<float, float, float> o = at(b);
    const bool vec = K % 4 == 0 && rows16(o.x, o.x_row) && rows16(o.w, o.w_row);
    // Loads: thread tid takes row tid / 4 of each tile, k quad tid % 4.
    const u32 lr = tid >> 2, lq = (tid & 3u) * 4;
    const bool xlive = m0 + lr < M, wlive = n0 + lr < N;
    const float* xrow = o.x + u64(xlive ? m0 + lr : 0) * o.x_row;
    const float* wrow = o.w + u64(wlive ? n0 + lr : 0) * o.w_row;
    auto load4 = [&](const float* row, bool live, u32 k, float (&v)[4]) {
        if (live && vec && k < K) {
            load_vec(row + k, v);
        } else {
#pragma unroll
            for (u32 e = 0; e < 4; ++e) v[e] = live && k + e < K ? row[k + e] : 0.0f;
        }
    };
    float xv[4], wv[4];
    auto stash = [&](u32 s) {
#pragma unroll
        for (u32 e = 0; e < 4; ++e) {
            xs[s][lq + e][lr] = xv[e];
            ws[s][lq + e][lr] = wv[e];
        }
    };
    float acc[4][4] = {};
    const u32 ty = tid / 16, tx = tid % 16;
    load4(xrow, xlive, lq, xv);
    load4(wrow, wlive, lq, wv);
    stash(0);
    __syncthreads();
    const u32 KT = (K + KS - 1) / KS;
    for (u32 kt = 0; kt < KT; ++kt) {
        const u32 s = kt & 1u;
        if (kt + 1 < KT) {
            load4(xrow, xlive, (kt + 1) * KS + lq, xv);
            load4(wrow, wlive, (kt + 1) * KS + lq, wv);
        }
#pragma unroll
        for (u32 kk = 0; kk < KS; ++kk) {
            const float4 a = *reinterpret_cast<const float4*>(&xs[s][kk][ty * 4]);
            const float4 c = *reinterpret_cast<const float4*>(&ws[s][kk][tx * 4]);
            const float av[4] = {a.x, a.y, a.z, a.w}, cv[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
            for (u32 i = 0; i < 4; ++i)
#pragma unroll
                for (u32 j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], cv[j], acc[i][j]);
        }
        if (kt + 1 < KT) stash(s ^ 1u);
        __syncthreads();
    }
#pragma unroll
    for (u32 i = 0; i < 4; ++i) {
        const u32 row = m0 + ty * 4 + i;
        if (row >= M) continue;
#pragma unroll
        for (u32 j = 0; j < 4; ++j) {
            const u32 col = n0 + tx * 4 + j;
            if (col < N) o.y[u64(row) * o.y_row + col] = acc[i][j];
        }
    }
}

// ---- the crate's batched kernels: llama.cpp's argument blocks ----

// The operands of batch im of hf2q_dense_mm_* (byte strides of the params).
template <typename TW>
__device__ __forceinline__ Operands<float, TW, float> hf2q_operands(const DenseMmTensorParams* a, const char* src0, const char* src1,
                                                                    char* dst, u32 im) {
    const u32 i12 = im % u32(a->ne12), i13 = im / u32(a->ne12);
    const u64 M = u32(a->ne1), N = u32(a->ne0);
    Operands<float, TW, float> o;
    o.w = reinterpret_cast<const TW*>(src0 + u64(i12 / u32(a->r2)) * a->nb02 + u64(i13 / u32(a->r3)) * a->nb03);
    o.x = reinterpret_cast<const float*>(src1 + u64(i12) * a->nb12 + u64(i13) * a->nb13);
    o.y = reinterpret_cast<float*>(dst) + u64(im) * M * N;
    o.w_row = a->nb01 / sizeof(TW);
    o.x_row = a->nb11 / sizeof(float);
    o.y_row = N;
    return o;
}

template <typename TW>
__device__ __forceinline__ void hf2q_mm(const DenseMmTensorParams* a, const char* src0, const char* src1, char* dst) {
    const u32 M = u32(a->ne1), N = u32(a->ne0), K = u32(a->ne00);
    auto at = [&](u32 im) { return hf2q_operands<TW>(a, src0, src1, dst, im); };
    if constexpr (sizeof(TW) == 4) mm_f32(M, N, K, at);
    else mm_tensor<float, TW, float>(M, N, K, at);
}

// The operands of batch b of dense_mm_<t> (contiguous).
template <typename T>
__device__ __forceinline__ Operands<T, T, T> dense_operands(const T* x, const T* w, T* y, const DenseParams* p, u32 b) {
    Operands<T, T, T> o;
    o.x = x + u64(b) * p->m * p->k;
    o.w = w + u64(b / (p->batch / p->w_batch)) * p->n * p->k;
    o.y = y + u64(b) * p->m * p->n;
    o.x_row = p->k;
    o.w_row = p->k;
    o.y_row = p->n;
    return o;
}

}  // namespace

// ---- mlx-native's dense_gemm module ----

// buffer(0) A [M, K], (1) B [N, K], (2) C [M, N], (3) DenseGemmParams.
// dense_matvec_*: M = 1, blockIdx.x = block of LANE_ROWS rows, 256 threads.
// The family compiles in six parts (ts/ops/dense.ts DENSE_CUDA_PARTS): each
// tensor-tile entry of 16-bit weights, about a megabyte of machine code
// (five wgmma widths and two mma.sync shapes chosen by the launch), is a part
// of its own; the rest are part 0.
#if MLXN_CUDA_PART_IS(0)
extern "C" __global__ void __launch_bounds__(256) dense_matvec_f16(const __half* A, const __half* B, __half* C, const DenseGemmParams* p) {
    mv_lanes(A, B, p->K, C, p->N, p->K, blockIdx.x * LANE_ROWS, LANE_ROWS);
}
extern "C" __global__ void __launch_bounds__(256) dense_matvec_f16w_f32io(const float* A, const __half* B, float* C, const DenseGemmParams* p) {
    mv_lanes(A, B, p->K, C, p->N, p->K, blockIdx.x * LANE_ROWS, LANE_ROWS);
}
extern "C" __global__ void __launch_bounds__(256) dense_matvec_bf16w_f32io(const float* A, const bf16* B, float* C, const DenseGemmParams* p) {
    mv_lanes(A, B, p->K, C, p->N, p->K, blockIdx.x * LANE_ROWS, LANE_ROWS);
}
extern "C" __global__ void __launch_bounds__(256) dense_matvec_f32(const float* A, const float* B, float* C, const DenseGemmParams* p) {
    mv_lanes(A, B, p->K, C, p->N, p->K, blockIdx.x * LANE_ROWS, LANE_ROWS);
}
#endif

// dense_gemm_f16 (M > 1): the tensor-core tiles, one batch.
#if MLXN_CUDA_PART_IS(3)
extern "C" __global__ void __launch_bounds__(256) dense_gemm_f16(const __half* A, const __half* B, __half* C, const DenseGemmParams* p) {
    const u32 M = p->M, N = p->N, K = p->K;
    auto at = [&](u32) {
        Operands<__half, __half, __half> o;
        o.x = A;
        o.w = B;
        o.y = C;
        o.x_row = K;
        o.w_row = K;
        o.y_row = N;
        return o;
    };
    mm_tensor<__half, __half, __half>(M, N, K, at);
}
#endif

// ---- mlx-native's hf2q_dense_gemv_bf16_f32_4 ----

// buffer(0) DenseGemvBf16Params, (1) src0 bf16 [ne02, ne01, ne00], (2) src1
// f32, (3) dst f32 [ne12, ne1, ne0]. blockIdx.x = (im * ne11 + r1) *
// ceil(ne01 / LANE_ROWS) + row block: LANE_ROWS rows of one row r1 of src1,
// 256 threads.
struct GemvBlock {
    u32 rb, r1, im;
    const char* w;  // the batch's matrix in src0
};
// Block blockIdx.x's row group rb (of `rows` rows), row r1 of src1, batch im.
__device__ __forceinline__ GemvBlock gemv_block(const DenseGemvBf16Params* a, const char* src0, u32 rows = LANE_ROWS) {
    const u32 N = u32(a->ne01), blocks = (N + rows - 1) / rows, M = u32(a->ne11);
    const u32 rb = blockIdx.x % blocks, rest = blockIdx.x / blocks;
    const u32 r1 = rest % M, im = rest / M;
    const u32 i12 = im % u32(a->ne12), i13 = im / u32(a->ne12);
    return {rb, r1, im, src0 + u64(i12 / u32(a->r2)) * a->nb02 + u64(i13 / u32(a->r3)) * a->nb03};
}
// The block's row of src1 (x) and of dst (y).
__device__ __forceinline__ const float* gemv_x(const DenseGemvBf16Params* a, const GemvBlock& b, const char* src1) {
    const u32 i12 = b.im % u32(a->ne12), i13 = b.im / u32(a->ne12);
    return reinterpret_cast<const float*>(src1 + u64(b.r1) * a->nb11 + u64(i12) * a->nb12 + u64(i13) * a->nb13);
}
__device__ __forceinline__ float* gemv_y(const DenseGemvBf16Params* a, const GemvBlock& b, char* dst) {
    return reinterpret_cast<float*>(dst) + u64(b.im) * u32(a->ne0) * u32(a->ne1) + u64(b.r1) * u32(a->ne0);
}
// Before the wait (common.cuh MLXN_PREFETCH_ENTRY): the block's rows into
// L2, asked by the blocks of src1's first row where the grid has at most
// one block an SM.
__device__ __forceinline__ void gemv_prefetch(const DenseGemvBf16Params* a, const char* src0, u32 rows = LANE_ROWS) {
    if (threadIdx.x != 0 || !mlxn_grid_within_sms()) return;
    const GemvBlock b = gemv_block(a, src0, rows);
    const u32 r0 = b.rb * rows, r1 = min(u32(a->ne01), r0 + rows);
    if (b.r1 == 0 && r0 < r1) mlxn_prefetch_l2(b.w + u64(r0) * a->nb01, u64(r1 - r0 - 1) * a->nb01 + u64(u32(a->ne00)) * 2);
}
// 6 blocks an SM (40 registers): bench/notes/gemv-dense-2026-11-28.md
// measured 0.93-0.94 of copy at Qwen3.6's and Gemma 4's projections, against
// 0.78-0.87 at the 44 registers (5 blocks) the compiler picks alone and
// 0.81-0.93 at 32 (8 blocks, with spills).
#if MLXN_CUDA_PART_IS(0)
extern "C" __global__ void __launch_bounds__(256, 6) hf2q_dense_gemv_bf16_f32_4(const DenseGemvBf16Params* a, const char* src0,
                                                                           const char* src1, char* dst) {
    MLXN_PREFETCH_ENTRY(gemv_prefetch(a, src0));
    const u32 K = u32(a->ne00), N = u32(a->ne01);
    const GemvBlock b = gemv_block(a, src0);
    mv_lanes(gemv_x(a, b, src1), reinterpret_cast<const bf16*>(b.w), a->nb01 / sizeof(bf16), gemv_y(a, b, dst), N, K, b.rb * LANE_ROWS,
             LANE_ROWS);
}

// hf2q_dense_gemv_bf16_f32_4_rows (not in the crate): the same product, a
// block a row, for weights of few rows (a router: Gemma 4's [128, 2816],
// Qwen3.6's [257, 2048]), where blocks of LANE_ROWS rows leave most SMs idle
// and each warp walks its whole row and x in turn (several memory round
// trips). The row's 16-byte vectors are dealt over the block's threads
// (thread t: vectors t, t + blockDim, ...), all of a thread's loads issued
// before its sums, then the block's sum: one round trip. The products in
// another order than the kernel's (a row's sums over threads, not lanes).
// Unaligned rows or x, or K not a multiple of 8: elements, the same way.
__device__ __forceinline__ float gemv_row_split(const float* x, const bf16* w, u32 K) {
    constexpr u32 VEC = 8;
    const u32 t = threadIdx.x, n = blockDim.x;
    if (K % VEC == 0 && aligned16(w) && aligned16(x)) return dot_vectors<4>(x, w, K / VEC, t, n, 0.0f);
    float acc = 0.0f;
    for (u32 k = t; k < K; k += n) acc = fmaf(to_f(w[k]), x[k], acc);
    return acc;
}
extern "C" __global__ void __launch_bounds__(256) hf2q_dense_gemv_bf16_f32_4_rows(const DenseGemvBf16Params* a, const char* src0,
                                                                                const char* src1, char* dst) {
    MLXN_PREFETCH_ENTRY(gemv_prefetch(a, src0, 1u));
    extern __shared__ float partials[];
    const GemvBlock b = gemv_block(a, src0, 1u);
    const float sum = block_sum(gemv_row_split(gemv_x(a, b, src1), reinterpret_cast<const bf16*>(b.w + u64(b.rb) * a->nb01), u32(a->ne00)),
                                partials);
    if (threadIdx.x == 0) gemv_y(a, b, dst)[b.rb] = sum;
}
#endif

// ---- mlx-native's hf2q_dense_mm_{bf16,f16,f32}_f32_tensor ----

// buffer(0) DenseMmTensorParams, (1) src0 weight, (2) src1 f32, (3) dst f32.
#define HF2Q_MM_ENTRY(TAG, T)                                                                                                  \
    extern "C" __global__ void __launch_bounds__(256)                                                                          \
        hf2q_dense_mm_##TAG##_f32_tensor(const DenseMmTensorParams* a, const char* src0, const char* src1, char* dst) {        \
        hf2q_mm<T>(a, src0, src1, dst);                                                                                        \
    }
#if MLXN_CUDA_PART_IS(4)
HF2Q_MM_ENTRY(bf16, bf16)
#endif
#if MLXN_CUDA_PART_IS(5)
HF2Q_MM_ENTRY(f16, __half)
#endif
#if MLXN_CUDA_PART_IS(0)
HF2Q_MM_ENTRY(f32, float)
#endif

// ---- dense_mm_<t> and dense_mv_<t> (added) ----

// buffer(0) x [batch, m, k], (1) w [w_batch, n, k], (2) y [batch, m, n], (3) DenseParams.
template <typename T>
__device__ __forceinline__ void dense_mm(const T* x, const T* w, T* y, const DenseParams* p) {
    auto at = [&](u32 b) { return dense_operands(x, w, y, p, b); };
    if constexpr (sizeof(T) == 4) mm_f32(p->m, p->n, p->k, at);
    else mm_tensor<T, T, T>(p->m, p->n, p->k, at);
}

// The entries of one type T (name TAG).
#define DENSE_MM_ENTRY(T, TAG)                                                                                    \
    extern "C" __global__ void __launch_bounds__(256) dense_mm_##TAG(const T* x, const T* w, T* y, const DenseParams* p) { \
        dense_mm<T>(x, w, y, p);                                                                                  \
    }
#define DENSE_MV_ENTRY(T, TAG)                                                                                    \
    extern "C" __global__ void __launch_bounds__(256) dense_mv_##TAG(const T* x, const T* w, T* y, const DenseParams* p) { \
        MLXN_PREFETCH_ENTRY(dense_mv_prefetch<T>(w, p));                                                          \
        dense_mv<T>(x, w, y, p);                                                                                  \
    }
#if MLXN_CUDA_PART_IS(0)
DENSE_MM_ENTRY(float, f32)
DENSE_MV_ENTRY(float, f32)
DENSE_MV_ENTRY(__half, f16)
DENSE_MV_ENTRY(bf16, bf16)
#endif
#if MLXN_CUDA_PART_IS(2)
DENSE_MM_ENTRY(__half, f16)
#endif
#if MLXN_CUDA_PART_IS(1)
DENSE_MM_ENTRY(bf16, bf16)
#endif
