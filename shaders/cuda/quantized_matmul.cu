// MLX affine quantized matrix products (CUDA), entry names and bindings as
// shaders/quantized_matmul.metal: y[i, j] = sum_k x[i, k] * w[j, k], w[j, k]
// = scale[j, k / gs] * q[j, k] + bias[j, k / gs] from MLX's packed rows
// (ts/ops/quantized_matmul.ts writes the format down). Grids are
// one-dimensional; the launches are the op's (quantizedCudaLaunch), each
// engine below told apart by the entry and, for mlx-native's entries, by the
// sizes (quantizedCudaEngine decides alike). Every engine uses the launch's
// dynamic shared memory.
//
// Chunks (MLX's layout, dequantized to 16-bit pairs) and mlx-native's other
// layouts are decoded by the prelude's helpers (shaders/cuda/common.cuh,
// "MLX affine quantization"), shared with quantized_matmul_id.
//
// Engines:
//   vector (m <= 8: quantized_mv_<t>, and mlx-native's entries): 256 threads
//     (8 warps splitting K) over 16 weight rows, 2 blocks an SM (at most 128
//     registers: the launch bounds). A warp step takes 4 chunks, lane (g, t)
//     = (lane / 4, lane % 4) chunk 4s + t of rows g and g + 8 (per 16-row
//     tile) and of x row g; the 16 pairs feed 8 mma.sync m16n8k16, the rows
//     as A and the m <= 8 tokens as B's n = 8. Any order of k works where A
//     and B agree: each lane's pairs sit at the same logical k in both. The
//     weight is read with 16- (8-) byte streaming loads kept a ring of 3 to
//     6 steps ahead of the mmas (QmvDepth: 192 bytes a lane in flight); then
//     the warps' sums meet in shared memory.
//   matrix (quantized_mm_<t>, and mlx-native's past 8 rows): the tiles of
//     dense.cu (denseMmCudaTile: 128 x 256 by 8 warps or 64 x 128 by 4),
//     32-wide k stages, 4 stages of x by cp.async (an f32 x converted through
//     registers), the weight chunk of each tile row loaded into registers a
//     stage ahead and dequantized into the stage after the step's mmas
//     (natural order, for ldmatrix); mma.sync with f32 accumulators.
//   simt (quantized_mv_f32, quantized_mm_f32): 256 threads over 4 rows,
//     chunks dequantized exactly in f32, tokens 4 at a time, the weight
//     re-read (from L2) for each 4 tokens; 2 blocks an SM (128 registers:
//     with 8 tokens at a time the accumulators took 174, one block an SM).
//   any (mlx-native's layouts other than MLX's, or unaligned operands): a
//     thread per output, values decoded one at a time.

namespace {

// ---- the vector engine ----

constexpr u32 QMV_WARPS = 8;

// Warp steps whose weight loads a lane keeps in flight: 192 bytes a lane (6
// KiB a warp, 48 KiB a block, 96 KiB an SM at 2 blocks), over the 40-64 KiB
// an SM needs in flight to cover DRAM latency at an H200's bandwidth, and a
// whole block's weight at k = 5120 (5 or 6 steps a warp) in one round trip.
// mlx-native's entries (SHALLOW) keep one step fewer: their registers also
// hold the matrix engine's, under the same 128.
template <int BITS, bool SHALLOW> struct QmvDepth {
    static constexpr u32 U = (BITS == 4 ? 6u : BITS == 6 ? 4u : 3u) - (SHALLOW ? 1u : 0u);
};

// A lane's share of a warp step: x's chunk at xc (zeros unless live) against
// its two rows' chunks w[0], w[1] (scales s, biases b): 8 mmas into acc.
template <typename TC, int BITS, typename TX, typename TS>
__device__ __forceinline__ void qmv_step(float (&acc)[4], const TX* xc, bool live, const u32 (&w)[2][BITS], const TS (&sv)[2],
                                         const TS (&bv)[2]) {
    u32 xv[16];
    if (live) {
        load_x32<TC>(xc, xv);
    } else {
#pragma unroll
        for (int p = 0; p < 16; ++p) xv[p] = 0u;
    }
    const float s0 = to_f(sv[0]), b0 = to_f(bv[0]), s1 = to_f(sv[1]), b1 = to_f(bv[1]);
    const u32 s20 = pack2<TC>(s0, s0), b20 = pack2<TC>(b0, b0);
    const u32 s21 = pack2<TC>(s1, s1), b21 = pack2<TC>(b1, b1);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        u32 x0, x1, a[4];
        x_pairs2<BITS>(xv, e, x0, x1);
        dequantize2<TC, BITS>(w[0], e, s0, b0, s20, b20, a[0], a[2]);
        dequantize2<TC, BITS>(w[1], e, s1, b1, s21, b21, a[1], a[3]);
        mma16<TC>(acc, a, x0, x1);
    }
}

// A lane's two weight rows r0 and r1: their packed words, scales and biases.
template <typename TS> struct QmvRows {
    const unsigned char* w[2];
    const TS* sc[2];
    const TS* bi[2];
    __device__ __forceinline__ QmvRows(const unsigned char* w_, const TS* sc_, const TS* bi_, u64 r0, u64 r1, u64 w_row, u64 s_row)
        : w{w_ + r0 * w_row, w_ + r1 * w_row}, sc{sc_ + r0 * s_row, sc_ + r1 * s_row}, bi{bi_ + r0 * s_row, bi_ + r1 * s_row} {}
};

// Rows row0 .. row0 + 15 of w (rows w_row bytes apart, chunked) against the
// m <= 8 rows of x ([m, K]): y[i * N + row] (the file comment). Warp w takes
// steps w, w + 8, w + 16, ... (a step: 16 rows x 4 chunks, 1 KiB of 4-bit
// weight a warp). A lane keeps the weight loads of U steps in flight as a
// ring: it computes the step of slot u and then issues, into slot u, the
// step U further on, so the warp's loads stay U steps ahead for its whole
// pass over k rather than stalling once per U steps. x, read by every block
// and held in L1, is loaded as each step is computed. Dynamic shared memory:
// 8 warps x 128 floats.
template <typename TX, typename TS, typename TC, typename TY, int BITS, bool SHALLOW>
__device__ __forceinline__ void qmv_tc(const TX* x, const unsigned char* w, const TS* sc, const TS* bi, TY* y, u32 m, u32 N, u32 K,
                                       u32 gs, u32 row0) {
    constexpr u32 U = QmvDepth<BITS, SHALLOW>::U;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float (*red)[128] = reinterpret_cast<float (*)[128]>(smem_raw);
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u32 g = lane >> 2, t = lane & 3u;
    const u32 chunks = K / 32u, steps = (chunks + 3u) / 4u;
    // This warp's steps: warp + QMV_WARPS * i for i < mine.
    const u32 mine = warp < steps ? (steps - warp + QMV_WARPS - 1u) / QMV_WARPS : 0u;
    const u64 w_row = u64(K) * BITS / 8u, s_row = K / gs;
    const QmvRows<TS> rows(w, sc, bi, min(row0 + g, N - 1u), min(row0 + g + 8u, N - 1u), w_row, s_row);
    const TX* xr = x + u64(min(g, m - 1u)) * K;

    u32 wq[U][2][BITS];
    TS sv[U][2], bv[U][2];
    // Slot u's loads for the warp's step i: zeros for a lane past the last
    // chunk or a step past the warp's last (they feed the mmas as zeros).
    auto issue = [&](u32 u, u32 i) {
        const u32 c = 4u * (warp + QMV_WARPS * i) + t;
        if (i < mine && c < chunks) {
            const u64 gi = u64(c) * 32u / gs;
            load_chunk<BITS, true>(rows.w[0] + u64(c) * BITS * 4u, wq[u][0]);
            load_chunk<BITS, true>(rows.w[1] + u64(c) * BITS * 4u, wq[u][1]);
            sv[u][0] = rows.sc[0][gi];
            sv[u][1] = rows.sc[1][gi];
            bv[u][0] = rows.bi[0][gi];
            bv[u][1] = rows.bi[1][gi];
        } else {
#pragma unroll
            for (int j = 0; j < BITS; ++j) wq[u][0][j] = wq[u][1][j] = 0u;
            sv[u][0] = sv[u][1] = bv[u][0] = bv[u][1] = from_f<TS>(0.0f);
        }
    };
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    qmv_ring<U>(mine, issue, [&](u32 u, u32 i) {
        const u32 c = 4u * (warp + QMV_WARPS * i) + t;
        qmv_step<TC, BITS>(acc, xr + u64(c) * 32u, c < chunks, wq[u], sv[u], bv[u]);
    });
#pragma unroll
    for (u32 e = 0; e < 4; ++e) red[warp][lane * 4 + e] = acc[e];
    __syncthreads();
    if (tid < 128) {
        float s = 0.0f;
#pragma unroll
        for (u32 q = 0; q < QMV_WARPS; ++q) s += red[q][tid];
        const u32 l = tid / 4, e = tid % 4;
        const u32 row = row0 + (l >> 2) + 8 * (e >> 1), tok = 2 * (l & 3u) + (e & 1u);
        if (row < N && tok < m) y[u64(tok) * N + row] = from_f<TY>(s);
    }
}

// The vector engine with k split into parts (quantized_mv_<t>_vks<RT>, for
// the harness; one token). qmv_tc's tiles are 16 rows: at n = 5120 (the down
// projections) that is 320 blocks, 1.2 waves of 264 (two blocks an SM), the
// second wave 56 blocks at half an SM's loads in flight; at n = 17408, 1088
// blocks are 4.1 waves. Here a block takes RT rows (8 or 4) and the mma's 16
// rows are RT rows x KP = 16 / RT parts of k: A-row v is row v % RT over the
// k range of part v / RT; B's column n is x over part n (m = 1 leaves the 8
// columns free), so C[v][v / RT] is row v % RT's partial sum over its part
// and the other columns are discarded. Lane (g, t) loads rows g % RT and
// (g + 8) % RT at their parts' chunks and x at part g % KP's; the rest (the
// ring of U steps, the decoding, the warps' sums in shared memory) is
// qmv_tc's. Grids: ceil(n / RT) blocks, 4.9 (RT 4) waves at n = 5120 and 8.2
// (RT 8) or 16.5 (RT 4) at 17408: a tail of 3-12 % of a block's time.
template <typename TX, typename TS, typename TC, typename TY, int BITS, u32 RT>
__device__ __forceinline__ void qmv_ks(const TX* x, const unsigned char* w, const TS* sc, const TS* bi, TY* y, u32 N, u32 K, u32 gs) {
    constexpr u32 U = QmvDepth<BITS, false>::U, KP = 16u / RT;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float (*red)[128] = reinterpret_cast<float (*)[128]>(smem_raw);
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u32 g = lane >> 2, t = lane & 3u;
    const u32 row0 = blockIdx.x * RT;
    const u32 chunks = K / 32u, pc = (chunks + KP - 1u) / KP, steps = (pc + 3u) / 4u;
    const u32 mine = warp < steps ? (steps - warp + QMV_WARPS - 1u) / QMV_WARPS : 0u;
    const u64 w_row = u64(K) * BITS / 8u, s_row = K / gs;
    const u32 qa = g / RT, qb = (g + 8u) / RT, qx = g % KP;  // parts of A-rows g, g + 8 and of B's column g
    const QmvRows<TS> rows(w, sc, bi, min(row0 + g % RT, N - 1u), min(row0 + (g + 8u) % RT, N - 1u), w_row, s_row);

    u32 wq[U][2][BITS];
    TS sv[U][2], bv[U][2];
    auto issue = [&](u32 u, u32 i) {
        const u32 cr = 4u * (warp + QMV_WARPS * i) + t;  // the chunk within a part
        const u32 ca = qa * pc + cr, cb = qb * pc + cr;
        const bool live = i < mine && cr < pc;
#pragma unroll
        for (u32 h = 0; h < 2; ++h) {
            const u32 c = h ? cb : ca;
            if (live && c < chunks) {
                const u64 gi = u64(c) * 32u / gs;
                load_chunk<BITS, true>(rows.w[h] + u64(c) * BITS * 4u, wq[u][h]);
                sv[u][h] = rows.sc[h][gi];
                bv[u][h] = rows.bi[h][gi];
            } else {
#pragma unroll
                for (int j = 0; j < BITS; ++j) wq[u][h][j] = 0u;
                sv[u][h] = bv[u][h] = from_f<TS>(0.0f);
            }
        }
    };
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    qmv_ring<U>(mine, issue, [&](u32 u, u32 i) {
        const u32 cr = 4u * (warp + QMV_WARPS * i) + t, c = qx * pc + cr;
        qmv_step<TC, BITS>(acc, x + u64(c) * 32u, cr < pc && c < chunks, wq[u], sv[u], bv[u]);
    });
#pragma unroll
    for (u32 e = 0; e < 4; ++e) red[warp][lane * 4 + e] = acc[e];
    __syncthreads();
    if (tid < RT) {
        // Row r: sum over parts q of C[q RT + r][q]; C[v][n] sits at lane (v % 8) * 4 + n / 2, element (v / 8) * 2 + n % 2.
        float s = 0.0f;
#pragma unroll
        for (u32 q = 0; q < KP; ++q) {
            const u32 v = q * RT + tid, idx = ((v % 8u) * 4u + q / 2u) * 4u + (v / 8u) * 2u + q % 2u;
#pragma unroll
            for (u32 ww = 0; ww < QMV_WARPS; ++ww) s += red[ww][idx];
        }
        if (row0 + tid < N) y[row0 + tid] = from_f<TY>(s);
    }
}

// The vector engine's block: 16 rows.
template <typename TX, typename TS, typename TC, typename TY, bool SHALLOW>
__device__ __forceinline__ void qmv(const TX* x, const unsigned char* w, const TS* sc, const TS* bi, TY* y, u32 m, u32 N, u32 K, u32 gs,
                                    u32 bits) {
    const u32 row0 = blockIdx.x * 16u;
    if (bits == 4) qmv_tc<TX, TS, TC, TY, 4, SHALLOW>(x, w, sc, bi, y, m, N, K, gs, row0);
    else if (bits == 6) qmv_tc<TX, TS, TC, TY, 6, SHALLOW>(x, w, sc, bi, y, m, N, K, gs, row0);
    else qmv_tc<TX, TS, TC, TY, 8, SHALLOW>(x, w, sc, bi, y, m, N, K, gs, row0);
}

// ---- the matrix engine ----

constexpr u32 QSTAGES = 4;  // stages of x in flight
constexpr u32 QLDS = 40;    // a staged row: 32 elements and 16 bytes of padding

// The BM x BN tile at (m0, n0) of y = x W^T (the file comment). X_ASYNC: x
// is TC with 16-byte aligned rows, copied by cp.async; otherwise loaded into
// registers and converted. Thread i owns weight row n0 + i (BN threads).
// Dynamic shared memory: QSTAGES x (BM + BN) x QLDS elements of TC.
template <typename TX, typename TS, typename TC, typename TY, int BITS, u32 BM, u32 BN, u32 WM, u32 WN, bool X_ASYNC>
__device__ __forceinline__ void qmm_tc(const TX* x, const unsigned char* w, const TS* sc, const TS* bi, TY* y, u32 M, u32 N, u32 K, u32 gs,
                                       u32 m0, u32 n0) {
    constexpr u32 NT = WM * WN * 32;
    constexpr u32 WTM = BM / WM, WTN = BN / WN;
    constexpr u32 MI = WTM / 16, NJ = WTN / 8;
    constexpr u32 XC = BM * 4 / NT;  // 16-byte pieces of x per thread per stage
    static_assert(BN == NT && XC * NT == BM * 4 && NJ % 2 == 0, "tile shape");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    TC* smem = reinterpret_cast<TC*>(smem_raw);
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u32 KT = K / 32u;
    const u64 w_row = u64(K) * BITS / 8u, s_row = K / gs;
    const bool wlive = n0 + tid < N;
    const u64 wrow = wlive ? n0 + tid : 0u;
    const unsigned char* wp = w + wrow * w_row;
    const TS* sp = sc + wrow * s_row;
    const TS* bp = bi + wrow * s_row;

    u32 wq[BITS];
    float wsc = 0.0f, wbi = 0.0f;
    uint4 xr[X_ASYNC ? 1 : XC];
    // Starts stage `stage` of k tile kt: x by cp.async or into registers, the weight chunk into registers.
    auto issue = [&](u32 stage, u32 kt) {
        TC* xs = smem + stage * (BM + BN) * QLDS;
        const u32 k0 = kt * 32u;
#pragma unroll
        for (u32 c = 0; c < XC; ++c) {
            const u32 i = tid + c * NT, r = i >> 2, q = i & 3u;
            const bool live = m0 + r < M;
            const TX* row = x + (live ? u64(m0 + r) * K + k0 + 8u * q : 0u);
            if constexpr (X_ASYNC) {
                cp_async16(xs + r * QLDS + 8u * q, row, live);
            } else if (live) {
                if constexpr (sizeof(TX) == 2) {
                    xr[c] = __ldg(reinterpret_cast<const uint4*>(row));
                } else {
                    const float4 a = __ldg(reinterpret_cast<const float4*>(row));
                    const float4 b = __ldg(reinterpret_cast<const float4*>(row) + 1);
                    xr[c] = make_uint4(pack2<TC>(a.x, a.y), pack2<TC>(a.z, a.w), pack2<TC>(b.x, b.y), pack2<TC>(b.z, b.w));
                }
            } else {
                xr[c] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
        if (wlive) {
            load_chunk<BITS, false>(wp + u64(kt) * BITS * 4u, wq);
            wsc = to_f(sp[k0 / gs]);
            wbi = to_f(bp[k0 / gs]);
        }
    };
    // Stores what issue() held in registers into stage `stage`: x, and the weight chunk dequantized in natural order.
    auto park = [&](u32 stage) {
        TC* xs = smem + stage * (BM + BN) * QLDS;
        TC* ws = xs + BM * QLDS;
        if constexpr (!X_ASYNC) park_chunks<NT, QLDS>(xs, xr, tid);
        park_dequantized<TC, BITS>(ws + tid * QLDS, wq, wsc, wbi, wlive);
    };

    float acc[MI][NJ][4];
    mma_zero(acc);
    const u32 wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;
    mma_pipeline<TC, QSTAGES, BM, BN, QLDS, true>(acc, smem, KT, wm0, wn0, lane, issue, park);
    mma_store<TY, false>(acc, y, N, N, n0, wm0, wn0, lane, [&](u32 r, u32& row) {
        row = m0 + r;
        return row < M;
    });
}

// One tile shape: the block's tile, then the bit width.
template <typename TX, typename TS, typename TC, typename TY, u32 BM, u32 BN, u32 WM, u32 WN, bool X_ASYNC>
__device__ __forceinline__ void qmm_shape(const TX* x, const unsigned char* w, const TS* sc, const TS* bi, TY* y, u32 M, u32 N, u32 K,
                                          u32 gs, u32 bits) {
    u32 b, m0, n0;
    tile_of<BM, BN>(M, N, b, m0, n0);
    if (bits == 4) qmm_tc<TX, TS, TC, TY, 4, BM, BN, WM, WN, X_ASYNC>(x, w, sc, bi, y, M, N, K, gs, m0, n0);
    else if (bits == 6) qmm_tc<TX, TS, TC, TY, 6, BM, BN, WM, WN, X_ASYNC>(x, w, sc, bi, y, M, N, K, gs, m0, n0);
    else qmm_tc<TX, TS, TC, TY, 8, BM, BN, WM, WN, X_ASYNC>(x, w, sc, bi, y, M, N, K, gs, m0, n0);
}

// The tile shape by block size (the op's denseMmCudaTile): 256 threads
// 128 x 256, 128 threads 64 x 128.
template <typename TX, typename TS, typename TC, typename TY>
__device__ __forceinline__ void qmm(const TX* x, const unsigned char* w, const TS* sc, const TS* bi, TY* y, u32 M, u32 N, u32 K, u32 gs,
                                    u32 bits) {
    constexpr bool X_ASYNC = sizeof(TX) == sizeof(TC);
    if (blockDim.x == 256) qmm_shape<TX, TS, TC, TY, 128, 256, 2, 4, X_ASYNC>(x, w, sc, bi, y, M, N, K, gs, bits);
    else qmm_shape<TX, TS, TC, TY, 64, 128, 2, 2, X_ASYNC>(x, w, sc, bi, y, M, N, K, gs, bits);
}

// ---- the f32 engine ----

constexpr u32 QS_ROWS = 4;  // weight rows per block (ts: QUANTIZED_SIMT_CUDA_ROWS)
constexpr u32 QS_TOKENS = 4;

// Rows row0 .. row0 + 3 of w against every row of x, 4 at a time: thread i
// takes chunks i, i + 256, ...; each chunk's q exact in f32 (2^23 + q minus
// 2^23), sums scale * sum(q x) + bias * sum(x); a warp sum, then the warps'
// through shared memory (8 warps x 16 floats).
template <int BITS>
__device__ __forceinline__ void qmv_f32(const float* x, const unsigned char* w, const float* sc, const float* bi, float* y, u32 M, u32 N,
                                        u32 K, u32 gs, u32 row0) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float (*red)[QS_ROWS * QS_TOKENS] = reinterpret_cast<float (*)[QS_ROWS * QS_TOKENS]>(smem_raw);
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5, nw = blockDim.x >> 5;
    const u32 chunks = K / 32u;
    const u64 w_row = u64(K) * BITS / 8u, s_row = K / gs;
    for (u32 i0 = 0; i0 < M; i0 += QS_TOKENS) {
        const u32 mt = min(QS_TOKENS, M - i0);
        float acc[QS_ROWS][QS_TOKENS];
#pragma unroll
        for (u32 r = 0; r < QS_ROWS; ++r)
#pragma unroll
            for (u32 i = 0; i < QS_TOKENS; ++i) acc[r][i] = 0.0f;
        for (u32 c = tid; c < chunks; c += blockDim.x) {
            const u64 k0 = u64(c) * 32u;
            float xs[QS_TOKENS];
#pragma unroll
            for (u32 i = 0; i < QS_TOKENS; ++i) {
                xs[i] = 0.0f;
                if (i < mt) {
                    const float4* p = reinterpret_cast<const float4*>(x + u64(i0 + i) * K + k0);
#pragma unroll
                    for (int v = 0; v < 8; ++v) {
                        const float4 f = __ldg(p + v);
                        xs[i] += (f.x + f.y) + (f.z + f.w);
                    }
                }
            }
#pragma unroll
            for (u32 r = 0; r < QS_ROWS; ++r) {
                const u64 row = min(row0 + r, N - 1u);
                u32 wq[BITS];
                load_chunk<BITS, false>(w + row * w_row + u64(c) * BITS * 4u, wq);
                float q[32];
#pragma unroll
                for (int j = 0; j < 32; ++j) {
                    const int bit = j * BITS, wi = bit / 32, s = bit % 32;
                    u32 v = wq[wi] >> s;
                    if (s + BITS > 32) v |= wq[wi + 1] << (32 - s);
                    q[j] = __uint_as_float(0x4B000000u | (v & ((1u << BITS) - 1u))) - 8388608.0f;
                }
                const float s = sc[row * s_row + k0 / gs], b = bi[row * s_row + k0 / gs];
#pragma unroll
                for (u32 i = 0; i < QS_TOKENS; ++i) {
                    if (i < mt) {
                        const float4* p = reinterpret_cast<const float4*>(x + u64(i0 + i) * K + k0);
                        float d = 0.0f;
#pragma unroll
                        for (int v = 0; v < 8; ++v) {
                            const float4 f = __ldg(p + v);
                            d = fmaf(q[4 * v], f.x, d);
                            d = fmaf(q[4 * v + 1], f.y, d);
                            d = fmaf(q[4 * v + 2], f.z, d);
                            d = fmaf(q[4 * v + 3], f.w, d);
                        }
                        acc[r][i] += s * d + b * xs[i];
                    }
                }
            }
        }
#pragma unroll
        for (u32 r = 0; r < QS_ROWS; ++r)
#pragma unroll
            for (u32 i = 0; i < QS_TOKENS; ++i) {
                const float v = warp_sum(acc[r][i]);
                if (lane == 0) red[warp][r * QS_TOKENS + i] = v;
            }
        __syncthreads();
        if (tid < QS_ROWS * QS_TOKENS) {
            const u32 r = tid / QS_TOKENS, i = tid % QS_TOKENS;
            float s = 0.0f;
            for (u32 q = 0; q < nw; ++q) s += red[q][tid];
            if (i < mt && row0 + r < N) y[u64(i0 + i) * N + row0 + r] = s;
        }
        __syncthreads();
    }
}

__device__ __forceinline__ void qf32(const float* x, const unsigned char* w, const float* sc, const float* bi, float* y, u32 M, u32 N, u32 K,
                                     u32 gs, u32 bits) {
    const u32 row0 = blockIdx.x * QS_ROWS;
    if (bits == 4) qmv_f32<4>(x, w, sc, bi, y, M, N, K, gs, row0);
    else if (bits == 6) qmv_f32<6>(x, w, sc, bi, y, M, N, K, gs, row0);
    else qmv_f32<8>(x, w, sc, bi, y, M, N, K, gs, row0);
}

// ---- the group-column engine (4 bits, one token) ----

// The engine's choice, made alike by ts/ops/quantized_matmul.ts
// (quantizedCudaEngine, gcWarps, gcSharedBytes): one token of 4-bit codes
// in MLX's chunks, N >= GC_MIN_N (below it the vector engine's 8 warps a
// tile are faster: N 4096 at K 4096, 7.1 against 9.4 us), x permuted in at most
// GC_MAX_SHARED bytes; W = 2 warps a tile past GC_W2_TILES tiles, else 4
// (measured on an H100: bench/results/qmv-gc-h100-2026-11-26.md).
constexpr u32 GC_MIN_N = 5120, GC_W2_TILES = 1024;
__device__ __forceinline__ bool gc_takes(u32 M, u32 N, u32 K, u32 gs, u32 bits) {
    return M == 1u && bits == 4u && N >= GC_MIN_N && gc_shared(K, gs) <= GC_MAX_SHARED;
}
__device__ __forceinline__ u32 gc_warps(u32 N) { return (N + 15u) / 16u > GC_W2_TILES ? 2u : 4u; }
template <typename TX, typename T, typename TY>
__device__ __noinline__ void qmv_gc_entry(const TX* x, const unsigned char* w, const T* sc, const T* bi, TY* y, u32 N, u32 K, u32 gs) {
    const bool two = gc_warps(N) == 2u;
    if (gs == 32u) two ? qmv_gc<TX, T, TY, 32u, 2u, 0u>(x, w, sc, bi, y, N, K, blockIdx.x) : qmv_gc<TX, T, TY, 32u, 4u, 0u>(x, w, sc, bi, y, N, K, blockIdx.x);
    else if (gs == 64u) two ? qmv_gc<TX, T, TY, 64u, 2u, 0u>(x, w, sc, bi, y, N, K, blockIdx.x) : qmv_gc<TX, T, TY, 64u, 4u, 0u>(x, w, sc, bi, y, N, K, blockIdx.x);
    else two ? qmv_gc<TX, T, TY, 128u, 2u, 0u>(x, w, sc, bi, y, N, K, blockIdx.x) : qmv_gc<TX, T, TY, 128u, 4u, 0u>(x, w, sc, bi, y, N, K, blockIdx.x);
}

// ---- any layout ----

// A thread per output, the grid striding over them: y[i, j] = sum_k
// (s * q + b) x, values decoded one at a time; ROUND_X rounds x to bf16.
template <typename TX, typename TS, typename TY, bool ROUND_X>
__device__ __forceinline__ void q_any(const TX* x, const unsigned char* w, const TS* sc, const TS* bi, TY* y, u32 M, u32 N, u32 K, u32 gs,
                                      u32 bits) {
    const u64 w_row = q_row_bytes(K, bits), s_row = (K + gs - 1u) / gs;
    const u64 total = u64(M) * N, step = u64(gridDim.x) * blockDim.x;
    for (u64 o = u64(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += step) {
        const u64 i = o / N, j = o % N;
        const unsigned char* row = w + j * w_row;
        float acc = 0.0f;
        for (u32 k = 0; k < K; ++k) {
            const u64 gi = j * s_row + k / gs;
            const float wv = fmaf(to_f(sc[gi]), float(q_value(row, k, bits)), to_f(bi[gi]));
            float xv = to_f(x[i * K + k]);
            if constexpr (ROUND_X) xv = __bfloat162float(__float2bfloat16_rn(xv));
            acc = fmaf(wv, xv, acc);
        }
        y[i * N + j] = from_f<TY>(acc);
    }
}

// Whether the tensor-core engines may read x and w with their vector loads.
__device__ __forceinline__ bool q_vec_ok(const void* x, const void* w) {
    return aligned16(x) && aligned16(w);
}

// mlx-native's entries: the engine by the layout and m (quantizedCudaEngine).
// The matrix engine in its 64 x 128 tiles only: a kernel's registers are
// those of its largest path, and the entries' launch bounds hold them to 128
// (2 blocks an SM for the vector engine), which the 128 x 256 tiles exceed.
template <typename TX, typename TY>
__device__ __forceinline__ void crate_entry(const TX* x, const unsigned char* w, const bf16* sc, const bf16* bi, TY* y,
                                            const QuantizedMatmulParams* p) {
    const u32 M = p->M, N = p->N, K = p->K, gs = p->group_size, bits = p->bits;
    constexpr bool ROUND_X = sizeof(TX) == 4;
    if (!q_chunked(K, gs) || !q_vec_ok(x, w)) q_any<TX, bf16, TY, ROUND_X>(x, w, sc, bi, y, M, N, K, gs, bits);
    else if (gc_takes(M, N, K, gs, bits)) qmv_gc_entry<TX, bf16, TY>(x, w, sc, bi, y, N, K, gs);
    else if (M <= 8u) qmv<TX, bf16, bf16, TY, true>(x, w, sc, bi, y, M, N, K, gs, bits);
    else qmm_shape<TX, bf16, bf16, TY, 64, 128, 2, 2, sizeof(TX) == 2>(x, w, sc, bi, y, M, N, K, gs, bits);
}

// The entries' statement before the wait (common.cuh MLXN_PREFETCH_ENTRY):
// a block of a vector form (M <= 8, a one-dimensional grid over the rows)
// asks L2 for its part of the codes, scales and biases, where the grid has
// at most one block an SM. The matrix forms read each weight tile from
// several blocks, and are bound by their arithmetic.
template <typename TS>
__device__ __forceinline__ void mv_prefetch(const unsigned int* w, const TS* sc, const TS* bi, const QuantizedMatmulParams* p) {
    const u32 N = p->N, K = p->K, gs = p->group_size;
    if (p->M > 8u || gs == 0u || !mlxn_grid_within_sms()) return;
    const u64 groups = u64(N) * ((K + gs - 1u) / gs) * sizeof(TS);
    mlxn_prefetch_part(w, u64(N) * q_row_bytes(K, p->bits), blockIdx.x, gridDim.x);
    mlxn_prefetch_part(sc, groups, blockIdx.x, gridDim.x);
    mlxn_prefetch_part(bi, groups, blockIdx.x, gridDim.x);
}

}  // namespace

// ---- mlx-native's quantized_matmul module ----

// buffer(0) input [M, K] (f32, rounded to bf16; bf16 for _simd_bf16),
// (1) weight, (2) scales bf16, (3) biases bf16, (4) output [M, N],
// (5) QuantizedMatmulParams.
// The family compiles in five parts (ts/ops/quantized_matmul.ts
// QUANTIZED_MATMUL_CUDA_PARTS): the typed ops' entries (1), the compact
// entries of the crate's kernels (2) and of the typed ones (3), the harness
// variants (4); the crate's three entries are part 0.
#if MLXN_CUDA_PART_IS(0)
extern "C" __global__ void __launch_bounds__(256, 2) quantized_matmul(const float* input, const unsigned int* weight, const bf16* scales,
                                                                   const bf16* biases, float* output, const QuantizedMatmulParams* params) {
    MLXN_PREFETCH_ENTRY(mv_prefetch(weight, scales, biases, params));
    crate_entry(input, reinterpret_cast<const unsigned char*>(weight), scales, biases, output, params);
}
extern "C" __global__ void __launch_bounds__(256, 2) quantized_matmul_simd(const float* input, const unsigned int* weight, const bf16* scales,
                                                                        const bf16* biases, float* output,
                                                                        const QuantizedMatmulParams* params) {
    MLXN_PREFETCH_ENTRY(mv_prefetch(weight, scales, biases, params));
    crate_entry(input, reinterpret_cast<const unsigned char*>(weight), scales, biases, output, params);
}
extern "C" __global__ void __launch_bounds__(256, 2) quantized_matmul_simd_bf16(const bf16* input, const unsigned int* weight, const bf16* scales,
                                                                             const bf16* biases, bf16* output,
                                                                             const QuantizedMatmulParams* params) {
    MLXN_PREFETCH_ENTRY(mv_prefetch(weight, scales, biases, params));
    crate_entry(input, reinterpret_cast<const unsigned char*>(weight), scales, biases, output, params);
}
#endif

// ---- compact entries (CUDA only) ----

// Each runs one engine of an entry at one bit width (vector) or group size
// and warp count (group-column), with the entry's prefetch: for the sizes
// the host gives it (ts/ops/quantized_matmul.ts quantizedCudaEntry) the same
// code as the kernel's entry, so the same results bit for bit. Sizes of
// another engine (a plan made by hand) and operands a vector load cannot
// read take the any-layout engine, exact at any size and grid.
// quantized_matmul_simd is about 19,200 instructions with every engine
// inlined, quantized_mv_bf16 14,300; one of these 1,950-3,150. In a decode
// step a product runs once a layer with its code out of the caches, and the
// large entry then takes 3.9-6.6 us more a dispatch than the compact one
// (H100, bench/code_cold.cu: bench/notes/code-cold-2026-11-27.md).
// CRATE: mlx-native's entries (bf16 scales, x rounded to them, the vector
// engine one ring step shallower: crate_entry); else quantized_mv_<t>'s
// (x, scales and y of one type: affine_entry).
namespace {
template <typename TX, typename TS, typename TY, int BITS, bool CRATE>
__device__ __forceinline__ void compact_vec(const TX* x, const unsigned int* weight, const TS* sc, const TS* bi, TY* y,
                                            const QuantizedMatmulParams* p) {
    const unsigned char* w = reinterpret_cast<const unsigned char*>(weight);
    const u32 M = p->M, N = p->N, K = p->K, gs = p->group_size;
    if (M > 8u || p->bits != u32(BITS) || !q_chunked(K, gs) || !q_vec_ok(x, w)) {
        q_any<TX, TS, TY, CRATE && sizeof(TX) == 4>(x, w, sc, bi, y, M, N, K, gs, p->bits);
    } else {
        qmv_tc<TX, TS, TS, TY, BITS, CRATE>(x, w, sc, bi, y, M, N, K, gs, blockIdx.x * 16u);
    }
}
template <typename TX, typename TS, typename TY, u32 GS, u32 W, bool CRATE>
__device__ __forceinline__ void compact_gc(const TX* x, const unsigned int* weight, const TS* sc, const TS* bi, TY* y,
                                           const QuantizedMatmulParams* p) {
    const unsigned char* w = reinterpret_cast<const unsigned char*>(weight);
    const u32 M = p->M, N = p->N, K = p->K, gs = p->group_size;
    if (gs != GS || !gc_takes(M, N, K, gs, p->bits) || gc_warps(N) != W || !q_chunked(K, gs) || !q_vec_ok(x, w)) {
        q_any<TX, TS, TY, CRATE && sizeof(TX) == 4>(x, w, sc, bi, y, M, N, K, gs, p->bits);
    } else {
        qmv_gc<TX, TS, TY, GS, W, 0u>(x, w, sc, bi, y, N, K, blockIdx.x);
    }
}
}  // namespace

// NAME_vec<BITS>: the vector engine (m <= 8, MLX's chunks); NAME_gc<GS>_w<W>:
// the group-column engine (gc_takes). quantized_matmul_* stand in for
// quantized_matmul and quantized_matmul_simd (f32 input and output),
// quantized_matmul_simd_bf16_* for quantized_matmul_simd_bf16,
// quantized_mv_<t>_* for quantized_mv_<t> (f16, bf16).
#define COMPACT_VEC_ENTRY(NAME, TX, TS, TY, BITS, CRATE)                                                                       \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME##_vec##BITS(const TX* input, const unsigned int* weight,         \
                                                                         const TS* scales, const TS* biases, TY* output,   \
                                                                         const QuantizedMatmulParams* params) {              \
        MLXN_PREFETCH_ENTRY(mv_prefetch(weight, scales, biases, params));                                                     \
        compact_vec<TX, TS, TY, BITS, CRATE>(input, weight, scales, biases, output, params);                                  \
    }
#define COMPACT_GC_ENTRY(NAME, TX, TS, TY, GS, W, CRATE)                                                                       \
    extern "C" __global__ void __launch_bounds__(128, 4) NAME##_gc##GS##_w##W(const TX* input, const unsigned int* weight,     \
                                                                             const TS* scales, const TS* biases,            \
                                                                             TY* output, const QuantizedMatmulParams* params) { \
        MLXN_PREFETCH_ENTRY(mv_prefetch(weight, scales, biases, params));                                                     \
        compact_gc<TX, TS, TY, GS, W, CRATE>(input, weight, scales, biases, output, params);                                  \
    }
#define COMPACT_ENTRIES(NAME, TX, TS, TY, CRATE)                                                                               \
    COMPACT_VEC_ENTRY(NAME, TX, TS, TY, 4, CRATE)                                                                             \
    COMPACT_VEC_ENTRY(NAME, TX, TS, TY, 6, CRATE)                                                                             \
    COMPACT_VEC_ENTRY(NAME, TX, TS, TY, 8, CRATE)                                                                             \
    COMPACT_GC_ENTRY(NAME, TX, TS, TY, 32, 2, CRATE)                                                                          \
    COMPACT_GC_ENTRY(NAME, TX, TS, TY, 32, 4, CRATE)                                                                          \
    COMPACT_GC_ENTRY(NAME, TX, TS, TY, 64, 2, CRATE)                                                                          \
    COMPACT_GC_ENTRY(NAME, TX, TS, TY, 64, 4, CRATE)                                                                          \
    COMPACT_GC_ENTRY(NAME, TX, TS, TY, 128, 2, CRATE)                                                                         \
    COMPACT_GC_ENTRY(NAME, TX, TS, TY, 128, 4, CRATE)
#if MLXN_CUDA_PART_IS(2)
COMPACT_ENTRIES(quantized_matmul, float, bf16, float, true)
COMPACT_ENTRIES(quantized_matmul_simd_bf16, bf16, bf16, bf16, true)
#endif
#if MLXN_CUDA_PART_IS(3)
COMPACT_ENTRIES(quantized_mv_f16, __half, __half, __half, false)
COMPACT_ENTRIES(quantized_mv_bf16, bf16, bf16, bf16, false)
#endif
#undef COMPACT_ENTRIES
#undef COMPACT_GC_ENTRY
#undef COMPACT_VEC_ENTRY

// ---- quantized_mv_<t> and quantized_mm_<t> (added) ----

// buffer(0) x [M, K], (1) weight u32 [N, K * bits / 32], (2) scales, (3)
// biases [N, K / group_size], (4) y [M, N], (5) QuantizedMatmulParams; x,
// scales, biases and y of one type.
template <typename T>
__device__ __forceinline__ void affine_entry(const T* x, const unsigned int* weight, const T* sc, const T* bi, T* y,
                                             const QuantizedMatmulParams* p, bool matrix) {
    const unsigned char* w = reinterpret_cast<const unsigned char*>(weight);
    const u32 M = p->M, N = p->N, K = p->K, gs = p->group_size, bits = p->bits;
    if (!q_chunked(K, gs) || !q_vec_ok(x, w)) {
        q_any<T, T, T, false>(x, w, sc, bi, y, M, N, K, gs, bits);
    } else if constexpr (sizeof(T) == 4) {
        qf32(x, w, sc, bi, y, M, N, K, gs, bits);
    } else if (matrix) {
        qmm<T, T, T, T>(x, w, sc, bi, y, M, N, K, gs, bits);
    } else if (gc_takes(M, N, K, gs, bits)) {
        qmv_gc_entry<T, T, T>(x, w, sc, bi, y, N, K, gs);
    } else {
        qmv<T, T, T, T, false>(x, w, sc, bi, y, M, N, K, gs, bits);
    }
}

// The entries of one type T (name TAG); MM_BOUNDS: quantized_mm's launch bounds.
#define AFFINE_ENTRIES(T, TAG, MM_BOUNDS)                                                                                     \
    extern "C" __global__ void __launch_bounds__(256, 2) quantized_mv_##TAG(const T* x, const unsigned int* weight, const T* scales, \
                                                                          const T* biases, T* y,                               \
                                                                          const QuantizedMatmulParams* params) {               \
        MLXN_PREFETCH_ENTRY(mv_prefetch(weight, scales, biases, params));                                                     \
        affine_entry(x, weight, scales, biases, y, params, false);                                                            \
    }                                                                                                                         \
    extern "C" __global__ void __launch_bounds__ MM_BOUNDS quantized_mm_##TAG(const T* x, const unsigned int* weight, const T* scales, \
                                                                            const T* biases, T* y,                             \
                                                                            const QuantizedMatmulParams* params) {             \
        affine_entry(x, weight, scales, biases, y, params, true);                                                             \
    }
#if MLXN_CUDA_PART_IS(1)
AFFINE_ENTRIES(float, f32, (256, 2))
AFFINE_ENTRIES(__half, f16, (256))
AFFINE_ENTRIES(bf16, bf16, (256))
#endif

// quantized_mv_<t>'s harness variants (qmv_ks, RT rows a block): same
// bindings, one token, MLX's chunked layout with 16-byte aligned x and
// weight (what the bench gives); grid ceil(N / RT) blocks of 256 threads,
// 8 x 128 floats of shared memory. The op does not launch them.
template <typename T, u32 RT>
__device__ __forceinline__ void affine_ks(const T* x, const unsigned int* weight, const T* sc, const T* bi, T* y, const QuantizedMatmulParams* p) {
    const unsigned char* w = reinterpret_cast<const unsigned char*>(weight);
    const u32 N = p->N, K = p->K, gs = p->group_size, bits = p->bits;
    if (bits == 4) qmv_ks<T, T, T, T, 4, RT>(x, w, sc, bi, y, N, K, gs);
    else if (bits == 6) qmv_ks<T, T, T, T, 6, RT>(x, w, sc, bi, y, N, K, gs);
    else qmv_ks<T, T, T, T, 8, RT>(x, w, sc, bi, y, N, K, gs);
}
#define AFFINE_KS_ENTRY(T, TAG, RT)                                                                                         \
    extern "C" __global__ void __launch_bounds__(256, 2) quantized_mv_##TAG##_vks##RT(const T* x, const unsigned int* weight,    \
                                                                                    const T* scales, const T* biases, T* y,    \
                                                                                    const QuantizedMatmulParams* params) {     \
        affine_ks<T, RT>(x, weight, scales, biases, y, params);                                                              \
    }
#if MLXN_CUDA_PART_IS(4)
AFFINE_KS_ENTRY(__half, f16, 8)
AFFINE_KS_ENTRY(__half, f16, 4)
AFFINE_KS_ENTRY(bf16, bf16, 8)
AFFINE_KS_ENTRY(bf16, bf16, 4)
#endif
#undef AFFINE_KS_ENTRY

// quantized_mv_<t>'s int8 variants (common.cuh's i8_mv; 4 and 8 bits, MLX's
// chunked layout, for the harness). An item is a chunk of 32 values: its
// 16 (32) bytes of codes in one (two) 16-byte loads and its group's scale
// s and bias b; x's int8 words meet the codes as they lie: 4 bits, a word's
// low nibbles (values 8a, + 2, + 4, + 6) against x's even words and its high
// nibbles against the odd ones (PAIRED); 8 bits, q - 128 as signed bytes
// (q ^ 0x80). The chunk's sum is s (d_x dot) + b sum_x, with 128 s sum_x
// more for 8 bits. Estimated ~40 warp instructions a 4-bit item (16 bytes
// of codes and 2 x 2 of scale and bias a lane): ~16 bytes a warp
// instruction where qmv_tc takes ~6.
template <typename TS> struct AffI8Src {
    const unsigned char* w;
    const TS* sc;
    const TS* bi;
    u64 w_row, s_row;
    u32 gs;
};
template <typename TS, int BITS> struct AffI8Item {
    static constexpr u32 VALUES = 32;
    static constexpr bool PAIRED = BITS == 4;
    static constexpr u32 GROUP = 1;
    uint4 q[BITS / 4];
    float s, b;
    __device__ __forceinline__ void load(const AffI8Src<TS>& src, u32 row, u32 it) {
        const uint4* p = reinterpret_cast<const uint4*>(src.w + u64(row) * src.w_row + u64(it) * (4u * BITS));
#pragma unroll
        for (int i = 0; i < BITS / 4; ++i) q[i] = __ldcs(p + i);
        const u64 g = u64(row) * src.s_row + u64(it) * 32u / src.gs;
        s = to_f(src.sc[g]);
        b = to_f(src.bi[g]);
    }
    __device__ __forceinline__ void dot(u32 it, const u32* xq, const float2* xds, u32 M, u32 K, float (&acc)[8]) const {
        u32 c[8];
#pragma unroll
        for (int i = 0; i < BITS / 4; ++i) {
            const u32 w[4] = {q[i].x, q[i].y, q[i].z, q[i].w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                if constexpr (BITS == 4) {
                    c[2 * j] = w[j] & 0x0F0F0F0Fu;
                    c[2 * j + 1] = (w[j] >> 4) & 0x0F0F0F0Fu;
                } else {
                    c[4 * i + j] = w[j] ^ 0x80808080u;
                }
            }
        }
        i8_tokens(M, [&](u32 i) {
            const uint4* xv = reinterpret_cast<const uint4*>(xq + u64(i) * (K / 4u) + it * 8u);
            const uint4 x0 = xv[0], x1 = xv[1];
            const u32 xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
            int d = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) d = __dp4a(int(c[j]), int(xw[j]), d);
            const float2 dx = xds[u64(i) * (K / 32u) + it];
            acc[i] += s * dx.x * float(d) + (BITS == 8 ? fmaf(128.0f, s, b) : b) * dx.y;
        });
    }
};
// R rows a group of S warps; U4 / U8 items a lane in flight at 4 / 8 bits.
template <typename T, u32 R, u32 S, u32 U4, u32 U8>
__device__ __forceinline__ void affine_i8(const T* x, const unsigned int* weight, const T* sc, const T* bi, T* y, const QuantizedMatmulParams* p) {
    const u32 M = p->M, N = p->N, K = p->K, gs = p->group_size, bits = p->bits;
    const AffI8Src<T> src{reinterpret_cast<const unsigned char*>(weight), sc, bi, u64(K) * bits / 8u, K / gs, gs};
    extern __shared__ __align__(16) unsigned char smem_raw[];
    if (bits == 4) i8_mv<AffI8Item<T, 4>, R, S, U4>(src, x, y, M, N, K, K, N, smem_raw);
    else if (bits == 8) i8_mv<AffI8Item<T, 8>, R, S, U8>(src, x, y, M, N, K, K, N, smem_raw);
}
// Grid: any (persistent; two blocks an SM), 256 threads, shared memory M x K
// + M x K / 32 x 8 + 2 x 8 x R x 8 x 4 bytes. _vdq1: a warp a row (Qwen3.6 /
// Gemma 4 up: a 5120-value row's 160 chunks in one round of 6 a lane);
// _vdqs4: four warps a row (down: 136 chunks a warp, one round of 5).
#define AFFINE_I8_ENTRY(T, TAG, NAME, R, S, U4, U8)                                                                         \
    extern "C" __global__ void __launch_bounds__(256, 2) quantized_mv_##TAG##_##NAME(const T* x, const unsigned int* weight,     \
                                                                                    const T* scales, const T* biases, T* y,    \
                                                                                    const QuantizedMatmulParams* params) {     \
        affine_i8<T, R, S, U4, U8>(x, weight, scales, biases, y, params);                                                    \
    }
#if MLXN_CUDA_PART_IS(4)
AFFINE_I8_ENTRY(__half, f16, vdq1, 1, 1, 6, 4)
AFFINE_I8_ENTRY(__half, f16, vdqs4, 1, 4, 5, 3)
AFFINE_I8_ENTRY(bf16, bf16, vdq1, 1, 1, 6, 4)
AFFINE_I8_ENTRY(bf16, bf16, vdqs4, 1, 4, 5, 3)
#endif
#undef AFFINE_I8_ENTRY

// quantized_mv_<t>'s group-column harness variants (_vgc<W>: the engine at
// a fixed W; _vgd<W>: a round more in flight at 3 blocks an SM, 168
// registers), one token of 4-bit codes, 16-byte aligned x and weight, the
// engine's launch at that W. The op does not launch them.
template <typename T, u32 W, u32 DEEP>
__device__ __forceinline__ void affine_gc(const T* x, const unsigned int* weight, const T* sc, const T* bi, T* y, const QuantizedMatmulParams* p) {
    const unsigned char* w = reinterpret_cast<const unsigned char*>(weight);
    const u32 N = p->N, K = p->K, gs = p->group_size;
    if (gs == 32u) qmv_gc<T, T, T, 32u, W, DEEP>(x, w, sc, bi, y, N, K, blockIdx.x);
    else if (gs == 64u) qmv_gc<T, T, T, 64u, W, DEEP>(x, w, sc, bi, y, N, K, blockIdx.x);
    else qmv_gc<T, T, T, 128u, W, DEEP>(x, w, sc, bi, y, N, K, blockIdx.x);
}
#define AFFINE_GC_ENTRY(T, TAG, NAME, W, DEEP, BLOCKS)                                                                       \
    extern "C" __global__ void __launch_bounds__(128, BLOCKS) quantized_mv_##TAG##_##NAME##W(const T* x, const unsigned int* weight, \
                                                                                   const T* scales, const T* biases, T* y,     \
                                                                                   const QuantizedMatmulParams* params) {      \
        affine_gc<T, W, DEEP>(x, weight, scales, biases, y, params);                                                         \
    }
#if MLXN_CUDA_PART_IS(4)
AFFINE_GC_ENTRY(__half, f16, vgc, 1, 0, 4)
AFFINE_GC_ENTRY(__half, f16, vgc, 2, 0, 4)
AFFINE_GC_ENTRY(__half, f16, vgc, 4, 0, 4)
AFFINE_GC_ENTRY(bf16, bf16, vgc, 1, 0, 4)
AFFINE_GC_ENTRY(bf16, bf16, vgc, 2, 0, 4)
AFFINE_GC_ENTRY(bf16, bf16, vgc, 4, 0, 4)
AFFINE_GC_ENTRY(__half, f16, vgd, 1, 1, 3)
AFFINE_GC_ENTRY(__half, f16, vgd, 2, 1, 3)
AFFINE_GC_ENTRY(__half, f16, vgd, 4, 1, 3)
AFFINE_GC_ENTRY(bf16, bf16, vgd, 1, 1, 3)
AFFINE_GC_ENTRY(bf16, bf16, vgd, 2, 1, 3)
AFFINE_GC_ENTRY(bf16, bf16, vgd, 4, 1, 3)
#endif
#undef AFFINE_GC_ENTRY

// ---- quantized_dequantize_<t>_<o> (not in mlx-native) ----

// buffer(0) weight (MLX's chunked rows), (1) scales and (2) biases of type
// T, (3) output [N, K] of type O, (4) QuantizedMatmulParams (N, K,
// group_size, bits). out = scale * q + bias in f32 (one fma), rounded once
// to O. Thread t takes chunks t, t + threads, ... of 32 values (row c / (K
// / 32)): its BITS words decoded as Metal's q_chunk, the 32 outputs stored
// in 16-byte pieces where the chunk's output is 16-byte aligned.
#if MLXN_CUDA_PART_IS(5)
namespace {
template <int BITS>
__device__ __forceinline__ void dq_chunk(const u32* w, float (&q)[32]) {
    u32 u[BITS];
#pragma unroll
    for (int i = 0; i < BITS; ++i) u[i] = __ldg(w + i);
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        const int bit = j * BITS, wi = bit / 32, sh = bit % 32;
        u32 v = u[wi] >> sh;
        if (sh + BITS > 32) v |= u[wi + 1] << (32 - sh);
        q[j] = float(v & ((1u << BITS) - 1u));
    }
}
template <typename T, typename O>
__device__ __forceinline__ void q_dequantize(const unsigned char* weight, const T* scales, const T* biases, O* out, const QuantizedMatmulParams* p) {
    const u32 K = p->K, bits = p->bits, chunks = K / 32u, gs = p->group_size;
    const u64 total = u64(p->N) * chunks;
    for (u64 t = u64(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += u64(gridDim.x) * blockDim.x) {
        const u64 row = t / chunks;
        const u32 c = u32(t % chunks);
        const u32* w = reinterpret_cast<const u32*>(weight + row * (u64(K) * bits / 8u)) + u64(c) * bits;
        float q[32];
        if (bits == 4) dq_chunk<4>(w, q);
        else if (bits == 6) dq_chunk<6>(w, q);
        else dq_chunk<8>(w, q);
        const u64 g = row * (K / gs) + u64(c) * 32u / gs;
        const float sc = to_f(scales[g]), bi = to_f(biases[g]);
        O* o = out + row * K + u64(c) * 32u;
        if constexpr (sizeof(O) == 2) {
            u32 pk[16];
#pragma unroll
            for (int j = 0; j < 16; ++j) pk[j] = pack2<O>(fmaf(sc, q[2 * j], bi), fmaf(sc, q[2 * j + 1], bi));
            if (aligned16(o)) {
#pragma unroll
                for (int j = 0; j < 4; ++j) reinterpret_cast<uint4*>(o)[j] = make_uint4(pk[4 * j], pk[4 * j + 1], pk[4 * j + 2], pk[4 * j + 3]);
            } else {
#pragma unroll
                for (int j = 0; j < 16; ++j) reinterpret_cast<u32*>(o)[j] = pk[j];
            }
        } else {
#pragma unroll
            for (int j = 0; j < 32; ++j) o[j] = fmaf(sc, q[j], bi);
        }
    }
}
}  // namespace
#define Q_DEQUANTIZE_ENTRY(TN, T, ON, O)                                                                                  \
    extern "C" __global__ void __launch_bounds__(256) quantized_dequantize_##TN##_##ON(                                     \
        const unsigned char* weight, const T* scales, const T* biases, O* out, const QuantizedMatmulParams* p) { \
        q_dequantize<T, O>(weight, scales, biases, out, p);                                                                \
    }
Q_DEQUANTIZE_ENTRY(f32, float, f32, float)
Q_DEQUANTIZE_ENTRY(f32, float, f16, __half)
Q_DEQUANTIZE_ENTRY(f32, float, bf16, bf16)
Q_DEQUANTIZE_ENTRY(f16, __half, f32, float)
Q_DEQUANTIZE_ENTRY(f16, __half, f16, __half)
Q_DEQUANTIZE_ENTRY(f16, __half, bf16, bf16)
Q_DEQUANTIZE_ENTRY(bf16, bf16, f32, float)
Q_DEQUANTIZE_ENTRY(bf16, bf16, f16, __half)
Q_DEQUANTIZE_ENTRY(bf16, bf16, bf16, bf16)
#endif
