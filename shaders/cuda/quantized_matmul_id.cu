// MLX affine quantized products of per-expert weights (CUDA), entry names,
// bindings and math as shaders/quantized_matmul_id.metal: for pair p (row
// i = p / U of x, U = n_expert_used) routed to expert e, y[p, j] = sum_k
// x[i, k] w_e[j, k] (or act(gate) * up for the gate_up entries); zeros for
// e >= num_experts. Grids are one-dimensional; the launches are the op's
// (ts/ops/quantized_matmul_id.ts).
//
// Chunks of MLX's layout are dequantized to 16-bit pairs by the prelude's
// helpers (shaders/cuda/common.cuh, "MLX affine quantization").
//
// Engines:
//   vector (quantized_mv_id_<t>, quantized_gate_up_mv_id_<t>, and
//     mlx-native's quantized_matmul_id on MLX's layouts): a block of 256
//     threads (8 warps) per pair and block of rows, the pair's expert rows
//     read once with streaming loads. The block holds RT 16-row tiles (RT =
//     1, 2 or 4, fewer k steps taking more tiles: mv_tiles), 8 / RT warps
//     splitting the k steps of each. A warp step takes 4 chunks: lane (g, t)
//     = (lane / 4, lane % 4) chunk 4s + t of A rows g and g + 8; their 16
//     pairs feed 8 mma.sync m16n8k16 with the pair's x row as B's column 0
//     (lanes g = 0 load it, the other columns are zeros). The A rows are
//     weight rows r0 + g and r0 + g + 8, or for gate_up gate row r0 + g and
//     up row r0 + g, so a tile gives 16 outputs or 8 gated ones. Two steps
//     of weight loads in flight per warp; the warps' sums meet in shared
//     memory. A decode step reads each routed expert's rows once per pair:
//     bandwidth-bound, the mma's other seven columns idle.
//   matrix (quantized_mm_id_<t>, quantized_gate_up_mm_id_<t>): 128-thread
//     blocks of 64 pairs of one expert (moe_tile over moe_dispatch_sort's
//     offsets) x 128 weight rows, after quantized_matmul's matrix engine:
//     32-wide k stages, 4 stages of x by cp.async (rows gathered through the
//     order), 2 x 2 warps of 32 x 64 on mma.sync with f32 accumulators; the
//     outputs stored to their pairs' rows. A tile of an expert often holds
//     few pairs, so the weight's bytes bound it: at 4 and 8 bits each
//     thread's packed chunk goes by cp.async 4 k steps ahead too, and is
//     dequantized into one of two weight buffers after the previous step's
//     mmas; 6-bit chunks (24 bytes, not 16-byte aligned) are loaded into
//     registers a step ahead instead (quantized_matmul's way). gate_up interleaves the tile's columns by 8 (8 gate rows,
//     then the same 8 up rows), so a thread holds gate and up of the same
//     outputs (64 a tile). A tile of the ids past the experts writes zeros.
//   group-column (4-bit codes in MLX's chunks, one token a pair; the _gc
//     entries the typed ops launch there, and mlx-native's quantized_matmul_id):
//     the prelude's qmv_gc over each pair's expert (qid_gc below).
//   any (mlx-native's layouts other than MLX's, or operands a vector load
//     cannot take): a thread per output, values decoded one at a time.

namespace {

constexpr u32 QID_WARPS = 8;
constexpr u32 QID_STEPS = 2;  // warp steps whose weight loads are in flight together

// 16-row tiles a vector block takes (ts: quantizedIdMvTiles): 8 warps over
// the k steps (4 chunks of 32 values) of each.
__device__ __forceinline__ u32 mv_tiles(u32 K) {
    const u32 steps = ((K + 31u) / 32u + 3u) / 4u;
    return steps >= 8u ? 1u : steps >= 4u ? 2u : 4u;
}

// One expert's weight (two for gate_up: A rows g and g + 8 come from a and b).
template <typename TS>
struct Rows {
    const unsigned char* w;
    const TS* s;
    const TS* b;
};

// The vector engine's tile `tile` of the block: A rows ra + g (from a) and
// rb + g (from b; rb = ra + 8 and b = a outside gate_up), this warp's share
// of the k steps (warps wi, wi + wpt, ... of wpt), x the pair's row; the
// column-0 sums of rows g and g + 8 go to red[warp][g] and red[warp][8 + g].
template <typename TX, typename TS, typename TC, int BITS>
__device__ __forceinline__ void qid_mv_warp(const TX* xr, Rows<TS> a, Rows<TS> b, u32 ra, u32 rb, u32 N, u32 K, u32 gs, u32 wi, u32 wpt,
                                            float (*red)[16]) {
    constexpr u32 U = QID_STEPS;
    const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const u32 g = lane >> 2, t = lane & 3u;
    const u32 chunks = K / 32u, steps = (chunks + 3u) / 4u;
    const u64 w_row = u64(K) * BITS / 8u, s_row = K / gs;
    const u64 r0 = min(ra + g, N - 1u), r1 = min(rb + g, N - 1u);
    const unsigned char* w0 = a.w + r0 * w_row;
    const unsigned char* w1 = b.w + r1 * w_row;
    const TS* s0 = a.s + r0 * s_row;
    const TS* s1 = b.s + r1 * s_row;
    const TS* b0 = a.b + r0 * s_row;
    const TS* b1 = b.b + r1 * s_row;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (u32 st0 = wi; st0 < steps; st0 += wpt * U) {
        u32 wq[U][2][BITS];
        float sv[U][2], bv[U][2];
        bool live[U];
#pragma unroll
        for (u32 u = 0; u < U; ++u) {
            const u32 c = 4u * (st0 + u * wpt) + t;
            live[u] = c < chunks;
            // Lanes past the last chunk give zeros to the warp's mmas.
            sv[u][0] = sv[u][1] = bv[u][0] = bv[u][1] = 0.0f;
#pragma unroll
            for (int i = 0; i < BITS; ++i) wq[u][0][i] = wq[u][1][i] = 0u;
            if (live[u]) {
                const u64 gi = u64(c) * 32u / gs;
                load_chunk<BITS, true>(w0 + u64(c) * BITS * 4u, wq[u][0]);
                load_chunk<BITS, true>(w1 + u64(c) * BITS * 4u, wq[u][1]);
                sv[u][0] = to_f(s0[gi]);
                sv[u][1] = to_f(s1[gi]);
                bv[u][0] = to_f(b0[gi]);
                bv[u][1] = to_f(b1[gi]);
            }
        }
#pragma unroll
        for (u32 u = 0; u < U; ++u) {
            u32 xv[16];
            if (live[u] && g == 0u) {
                load_x32<TC>(xr + u64(4u * (st0 + u * wpt) + t) * 32u, xv);
            } else {
#pragma unroll
                for (int p = 0; p < 16; ++p) xv[p] = 0u;
            }
            const u32 s20 = pack2<TC>(sv[u][0], sv[u][0]), b20 = pack2<TC>(bv[u][0], bv[u][0]);
            const u32 s21 = pack2<TC>(sv[u][1], sv[u][1]), b21 = pack2<TC>(bv[u][1], bv[u][1]);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                u32 x0, x1, af[4];
                x_pairs2<BITS>(xv, e, x0, x1);
                dequantize2<TC, BITS>(wq[u][0], e, sv[u][0], bv[u][0], s20, b20, af[0], af[2]);
                dequantize2<TC, BITS>(wq[u][1], e, sv[u][1], bv[u][1], s21, b21, af[1], af[3]);
                mma16<TC>(acc, af, x0, x1);
            }
        }
    }
    if (t == 0u) {
        red[warp][g] = acc[0];
        red[warp][8u + g] = acc[2];
    }
}

// A vector block: pair p = blockIdx.x / row blocks, rows rb * rows .. of its
// expert. GATE_UP: 8 outputs a tile, y = act(gate) * up.
template <typename TX, typename TS, typename TC, typename TY, bool GATE_UP, int BITS>
__device__ __forceinline__ void qid_mv_bits(const TX* xr, Rows<TS> g0, Rows<TS> u0, TY* yr, u32 N, u32 K, u32 gs, u32 row0, u32 rt,
                                            u32 activation) {
    __shared__ float red[QID_WARPS][16];
    const u32 warp = threadIdx.x >> 5, tid = threadIdx.x;
    const u32 wpt = QID_WARPS / rt, tile = warp / wpt, wi = warp % wpt;
    constexpr u32 OUT = GATE_UP ? 8u : 16u;
    const u32 ra = row0 + tile * OUT;
    qid_mv_warp<TX, TS, TC, BITS>(xr, g0, GATE_UP ? u0 : g0, ra, GATE_UP ? ra : ra + 8u, N, K, gs, wi, wpt, red);
    __syncthreads();
    if (tid < rt * OUT) {
        const u32 tl = tid / OUT, i = tid % OUT;
        float a = 0.0f, b = 0.0f;
        for (u32 q = tl * wpt; q < (tl + 1u) * wpt; ++q) {
            a += red[q][i];
            if (GATE_UP) b += red[q][8u + i];
        }
        const u32 row = row0 + tl * OUT + i;
        if (row < N) yr[row] = from_f<TY>(GATE_UP ? gate_activation(a, activation) * b : a);
    }
}

template <typename TX, typename TS, typename TC, typename TY, bool GATE_UP>
__device__ __forceinline__ void qid_mv(const TX* xr, Rows<TS> g0, Rows<TS> u0, TY* yr, u32 N, u32 K, u32 gs, u32 bits, u32 row0, u32 rt,
                                       u32 activation) {
    if (bits == 4) qid_mv_bits<TX, TS, TC, TY, GATE_UP, 4>(xr, g0, u0, yr, N, K, gs, row0, rt, activation);
    else if (bits == 6) qid_mv_bits<TX, TS, TC, TY, GATE_UP, 6>(xr, g0, u0, yr, N, K, gs, row0, rt, activation);
    else qid_mv_bits<TX, TS, TC, TY, GATE_UP, 8>(xr, g0, u0, yr, N, K, gs, row0, rt, activation);
}

// ---- any layout ----

// A thread per output, the grid striding over them: y[p, j] (both dots for
// gate_up), values decoded one at a time; ROUND_X rounds x to TS (bf16 in
// mlx-native's entry).
template <typename TX, typename TS, typename TY, bool ROUND_X, bool GATE_UP>
__device__ __forceinline__ void qid_any(const TX* x, Rows<TS> gw, Rows<TS> uw, const u32* ids, TY* y, u32 M, u32 N, u32 K, u32 gs,
                                        u32 bits, u32 U, u32 E, u32 wstride, u32 sstride, u32 activation) {
    const u64 w_row = q_row_bytes(K, bits), s_row = (K + gs - 1u) / gs;
    const u64 total = u64(M) * U * N, step = u64(gridDim.x) * blockDim.x;
    for (u64 o = u64(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += step) {
        const u64 p = o / N, j = o % N;
        const u32 e = ids[p];
        if (e >= E) {
            y[o] = from_f<TY>(0.0f);
            continue;
        }
        const TX* xr = x + (p / U) * K;
        float acc[2] = {0.0f, 0.0f};
#pragma unroll
        for (int m = 0; m < (GATE_UP ? 2 : 1); ++m) {
            const Rows<TS> r = m == 0 ? gw : uw;
            const unsigned char* row = r.w + u64(e) * wstride + j * w_row;
            const TS* sr = r.s + u64(e) * sstride + j * s_row;
            const TS* br = r.b + u64(e) * sstride + j * s_row;
            for (u32 k = 0; k < K; ++k) {
                const float wv = fmaf(to_f(sr[k / gs]), float(q_value(row, k, bits)), to_f(br[k / gs]));
                float xv = to_f(xr[k]);
                if constexpr (ROUND_X) xv = to_f(from_f<TS>(xv));
                acc[m] = fmaf(wv, xv, acc[m]);
            }
        }
        y[o] = from_f<TY>(GATE_UP ? gate_activation(acc[0], activation) * acc[1] : acc[0]);
    }
}

// Whether the vector engine's 16- (8-) byte loads can take x, the weights
// and every expert's start.
__device__ __forceinline__ bool vec_ok(const void* x, const void* gw, const void* uw, u32 wstride, u32 bits) {
    const u32 align = bits == 6u ? 8u : 16u;
    return aligned16(x) && aligned16(gw) && aligned16(uw) && wstride % align == 0u;
}

// The group-column engine per pair (the prelude's qmv_gc; its gate-up
// form for gate_up: a tile is 8 outputs, their gate and up rows), for one
// token a pair of 4-bit codes in MLX's chunks: 128 threads, W warps a tile,
// grid pairs x ceil(tiles W / 4) (tiles = ceil(N / 16), ceil(N / 8) for
// gate_up), dynamic shared memory gc_shared(K, gs). W (gc_id_warps): the
// smallest of 1, 2, 4 whose grid reaches GC_ID_BLOCKS blocks, else 4
// (measured on an H100: bench/notes/moe-gc-2026-11-26.md), and no more than
// the tile's rounds of 8 groups (to a power of two: a warp past them would
// have none). The same choice as ts/ops/quantized_matmul_id.ts
// quantizedIdGcWarps.
constexpr u32 GC_ID_BLOCKS = 512;
__device__ __forceinline__ bool gc_id_takes(u32 K, u32 gs, u32 bits) { return bits == 4u && gc_shared(K, gs) <= GC_MAX_SHARED; }
__device__ __forceinline__ u32 gc_id_tiles(u32 N, bool gate_up) { return gate_up ? (N + 7u) / 8u : (N + 15u) / 16u; }
__device__ __forceinline__ u32 gc_id_warps(u32 pairs, u32 N, bool gate_up, u32 K, u32 gs) {
    const u32 tiles = pairs * gc_id_tiles(N, gate_up);
    const u32 w = tiles >= 4u * GC_ID_BLOCKS ? 1u : tiles >= 2u * GC_ID_BLOCKS || !gate_up ? 2u : 4u;
    const u32 rounds = (K / gs + 7u) / 8u;
    return min(w, rounds >= 4u ? 4u : rounds >= 2u ? 2u : 1u);
}
template <typename TX, typename T, typename TY, bool GU, u32 W>
__device__ __forceinline__ void qid_gc_w(const TX* xr, const unsigned char* gw, const T* gs_, const T* gb, const unsigned char* uw, const T* us,
                                         const T* ub, TY* yr, u32 N, u32 K, u32 gs, u32 blk, u32 activation) {
    // Every group size in one entry: the code pairs' magic as an immediate (LOP3 false), whose register spills here.
    if (gs == 32u) qmv_gc<TX, T, TY, 32u, W, 0u, GU, false, false>(xr, gw, gs_, gb, yr, N, K, blk, uw, us, ub, activation);
    else if (gs == 64u) qmv_gc<TX, T, TY, 64u, W, 0u, GU, false, false>(xr, gw, gs_, gb, yr, N, K, blk, uw, us, ub, activation);
    else qmv_gc<TX, T, TY, 128u, W, 0u, GU, false, false>(xr, gw, gs_, gb, yr, N, K, blk, uw, us, ub, activation);
}
// The block's pair and expert at W warps a tile, then the engine at group
// size GS (0: gs, read at run time); an id past the experts writes zeros.
template <typename TX, typename T, typename TY, bool GU, u32 W, u32 GS>
__device__ __forceinline__ void qid_gc_at(const TX* x, const unsigned char* gw, const T* gsc, const T* gbi, const unsigned char* uw, const T* usc,
                                          const T* ubi, const u32* ids, TY* y, u32 M, u32 N, u32 K, u32 gs, u32 U, u32 E, u32 ws, u32 ss, u32 bs,
                                          u32 activation) {
    const u32 blocks = (gc_id_tiles(N, GU) * W + 3u) / 4u;
    const u32 pair = blockIdx.x / blocks, blk = blockIdx.x % blocks;
    if (pair >= M * U) return;
    TY* yr = y + u64(pair) * N;
    const u32 e = ids[pair];
    if (e >= E) {
        const u32 rows = (4u / W) * (GU ? 8u : 16u), r0 = blk * rows;
        for (u32 i = threadIdx.x; i < rows && r0 + i < N; i += blockDim.x) yr[r0 + i] = from_f<TY>(0.0f);
        return;
    }
    const u64 wo = u64(e) * ws, so = u64(e) * ss, bo = u64(e) * bs;
    const TX* xr = x + u64(pair / U) * K;
    if constexpr (GS == 0u) qid_gc_w<TX, T, TY, GU, W>(xr, gw + wo, gsc + so, gbi + bo, uw + wo, usc + so, ubi + bo, yr, N, K, gs, blk, activation);
    else qmv_gc<TX, T, TY, GS, W, 0u, GU>(xr, gw + wo, gsc + so, gbi + bo, yr, N, K, blk, uw + wo, usc + so, ubi + bo, activation);
}
// The engine at gc_id_warps' W.
template <typename TX, typename T, typename TY, bool GU>
__device__ __forceinline__ void qid_gc(const TX* x, const unsigned char* gw, const T* gsc, const T* gbi, const unsigned char* uw, const T* usc,
                                       const T* ubi, const u32* ids, TY* y, u32 M, u32 N, u32 K, u32 gs, u32 U, u32 E, u32 ws, u32 ss, u32 bs,
                                       u32 activation) {
    const u32 W = gc_id_warps(M * U, N, GU, K, gs);
    if (W == 1u) qid_gc_at<TX, T, TY, GU, 1u, 0u>(x, gw, gsc, gbi, uw, usc, ubi, ids, y, M, N, K, gs, U, E, ws, ss, bs, activation);
    else if (W == 2u || !GU) qid_gc_at<TX, T, TY, GU, 2u, 0u>(x, gw, gsc, gbi, uw, usc, ubi, ids, y, M, N, K, gs, U, E, ws, ss, bs, activation);
    else qid_gc_at<TX, T, TY, GU, 4u, 0u>(x, gw, gsc, gbi, uw, usc, ubi, ids, y, M, N, K, gs, U, E, ws, ss, bs, activation);
}
// The sizes of a vector entry's params (QuantizedMatmulIdParams, or the
// gate-up form's id part): what qid_vector_entry and qid_gc_compact read.
struct QidSizes {
    u32 M, N, K, gs, bits, U, E, ws, ss;
};
template <typename P>
__device__ __forceinline__ QidSizes qid_sizes(const P* p) {
    return {p->M, p->N, p->K, p->group_size, p->bits, p->n_expert_used, p->num_experts, p->expert_weight_stride, p->expert_scales_stride};
}
// The vector entries: the block's pair, its expert, then the engine (the
// any engine where the layout or alignment rules the vector one out).
// GC: the group-column path first where it takes the sizes (gc_id_takes;
// mlx-native's quantized_matmul_id, whose launch bounds give it 128
// registers anyway, and the _gc entries); the typed entries keep the vector
// engine's three blocks an SM for their 6- and 8-bit codes.
template <typename TX, typename TS, typename TC, typename TY, bool GATE_UP, bool ROUND_X, bool GC, typename P>
__device__ __forceinline__ void qid_vector_entry(const TX* x, const unsigned int* gw, const TS* gsc, const TS* gbi, const unsigned int* uw,
                                                 const TS* usc, const TS* ubi, const u32* ids, TY* y, const P* p, u32 activation) {
    const QidSizes q = qid_sizes(p);
    const u32 M = q.M, N = q.N, K = q.K, gs = q.gs, bits = q.bits, U = q.U, E = q.E, ws = q.ws, ss = q.ss;
    const unsigned char* gwb = reinterpret_cast<const unsigned char*>(gw);
    const unsigned char* uwb = reinterpret_cast<const unsigned char*>(uw);
    if (!q_chunked(K, gs) || !vec_ok(x, gwb, uwb, ws, bits)) {
        qid_any<TX, TS, TY, ROUND_X, GATE_UP>(x, {gwb, gsc, gbi}, {uwb, usc, ubi}, ids, y, M, N, K, gs, bits, U, E, ws, ss, activation);
        return;
    }
    if (GC && gc_id_takes(K, gs, bits)) {
        qid_gc<TX, TS, TY, GATE_UP>(x, gwb, gsc, gbi, uwb, usc, ubi, ids, y, M, N, K, gs, U, E, ws, ss, p->expert_biases_stride, activation);
        return;
    }
    const u32 rt = mv_tiles(K), rows = rt * (GATE_UP ? 8u : 16u);
    const u32 blocks = (N + rows - 1u) / rows;
    const u32 pair = blockIdx.x / blocks, row0 = (blockIdx.x % blocks) * rows;
    if (pair >= M * U) return;
    TY* yr = y + u64(pair) * N;
    const u32 e = ids[pair];
    if (e >= E) {
        if (threadIdx.x < rows && row0 + threadIdx.x < N) yr[row0 + threadIdx.x] = from_f<TY>(0.0f);
        return;
    }
    const u64 so = u64(e) * ss, bo = u64(e) * p->expert_biases_stride;
    const Rows<TS> g0 = {gwb + u64(e) * ws, gsc + so, gbi + bo};
    const Rows<TS> u0 = {uwb + u64(e) * ws, usc + so, ubi + bo};
    qid_mv<TX, TS, TC, TY, GATE_UP>(x + u64(pair / U) * K, g0, u0, yr, N, K, gs, bits, row0, rt, activation);
}

// ---- the matrix engine ----

constexpr u32 QSTAGES = 4;  // stages of x in flight
constexpr u32 QLDS = 40;    // a staged row: 32 elements and 16 bytes of padding

// The tile of block blockIdx.x: slot blockIdx.x / tiles_n's pairs (moe_tile,
// 64 rows) x tile columns tn * 128 (gate_up: outputs tn * 64, 8 gate and 8
// up columns in turn). 128 threads, thread i owning tile column i (its
// weight row). Dynamic shared memory: at most QSTAGES x (64 + 128) x QLDS
// elements of T (6 bits; 4 and 8 bits take less, see the two pipelines).
template <typename T, int BITS, bool GATE_UP>
__device__ __forceinline__ void qid_mm_tc(const T* x, Rows<T> gw, Rows<T> uw, const u32* offsets, const u32* order, T* y, u32 M, u32 N,
                                          u32 K, u32 gs, u32 U, u32 E, u32 wstride, u32 sstride, u32 activation) {
    constexpr u32 BM = 64, BN = 128, WN = 2, NT = 128;
    constexpr u32 WTM = 32, WTN = 64;
    constexpr u32 MI = WTM / 16, NJ = WTN / 8;
    constexpr u32 XC = BM * 4 / NT;  // 16-byte pieces of x per thread per stage
    __shared__ u32 x_row[BM];
    __shared__ u32 y_pair[BM];
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    const u32 P = M * U;
    const u32 cols = GATE_UP ? BN / 2u : BN;
    u32 group, n0, rows_m;
    if (!moe_block_rows<T, BM, NT>(offsets, order, y, N, U, E, P, cols, x_row, y_pair, group, n0, rows_m)) return;
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u32 e = group;
    const u32 KT = K / 32u;
    const u64 w_row = u64(K) * BITS / 8u, s_row = K / gs;
    const bool up = GATE_UP && ((tid >> 3) & 1u) != 0u;
    const u32 wrow = GATE_UP ? n0 + (tid >> 4) * 8u + (tid & 7u) : n0 + tid;
    const bool wlive = wrow < N;
    const u64 wr = wlive ? wrow : 0u;
    const Rows<T> src = up ? uw : gw;
    const unsigned char* wp = src.w + u64(e) * wstride + wr * w_row;
    const T* sp = src.s + u64(e) * sstride + wr * s_row;
    const T* bp = src.b + u64(e) * sstride + wr * s_row;

    float acc[MI][NJ][4];
    mma_zero(acc);
    const u32 wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;
    // This thread's weight column of k tile kt, w = s * q + b in natural order, stored at ws (row tid).
    auto dequant_to = [&](T* ws, const u32 (&wq)[BITS], float sc, float bi) { park_dequantized<T, BITS>(ws + tid * QLDS, wq, sc, bi, wlive); };
    // The gathered x rows of k tile kt into xs by cp.async.
    auto issue_x = [&](T* xs, u32 kt) {
        const u32 k0 = kt * 32u;
#pragma unroll
        for (u32 c = 0; c < XC; ++c) {
            const u32 i = tid + c * NT, r = i >> 2, q = i & 3u;
            const bool live = y_pair[r] < P;
            cp_async16(xs + r * QLDS + 8u * q, x + u64(x_row[r]) * K + k0 + 8u * q, live);
        }
    };

    if constexpr (BITS == 6) {
        // 24-byte chunks (not 16-byte aligned): each thread loads its chunk into registers a k step
        // ahead and dequantizes it into that stage after the step's mmas. Stage s: x, then the weight.
        u32 wq[BITS];
        float wsc = 0.0f, wbi = 0.0f;
        auto issue = [&](u32 stage, u32 kt) {
            issue_x(smem + stage * (BM + BN) * QLDS, kt);
            if (wlive) {
                load_chunk<BITS, false>(wp + u64(kt) * BITS * 4u, wq);
                wsc = to_f(sp[kt * 32u / gs]);
                wbi = to_f(bp[kt * 32u / gs]);
            }
        };
        auto park = [&](u32 stage) { dequant_to(smem + stage * (BM + BN) * QLDS + BM * QLDS, wq, wsc, wbi); };
        mma_pipeline<T, QSTAGES, BM, BN, QLDS, true>(acc, smem, KT, wm0, wn0, lane, issue, park);
    } else {
        // 16- and 32-byte chunks: the packed chunk of each column goes by cp.async too, QSTAGES k steps
        // ahead like x (a tile of few pairs is bound by the weight's bytes; these keep them in flight),
        // into a raw area; after step kt's mmas each thread dequantizes its own chunk of tile kt + 1
        // (its own copies, landed by its wait) into the other of two weight buffers. Shared memory:
        // QSTAGES x [x: BM x QLDS T, raw: BN x 4 BITS bytes], then 2 x BN x QLDS T.
        constexpr u32 XS = BM * QLDS * sizeof(T), RAW = BN * 4u * BITS, STAGE = XS + RAW;
        unsigned char* base = smem_raw;
        T* const ws0 = reinterpret_cast<T*>(base + QSTAGES * STAGE);
        auto ws_of = [&](u32 i) { return ws0 + (i & 1u) * BN * QLDS; };
        auto xs_of = [&](u32 stage) { return reinterpret_cast<T*>(base + stage * STAGE); };
        auto raw_of = [&](u32 stage) { return base + stage * STAGE + XS + tid * 4u * BITS; };
        auto issue = [&](u32 stage, u32 kt) {
            issue_x(xs_of(stage), kt);
            const unsigned char* src = wp + u64(kt) * BITS * 4u;
#pragma unroll
            for (int c = 0; c < BITS / 4; ++c) cp_async16(raw_of(stage) + 16 * c, src + 16 * c, wlive);
        };
        auto dequant_stage = [&](u32 stage, T* ws, float sc, float bi) {
            u32 wq[BITS];
            const uint4* r = reinterpret_cast<const uint4*>(raw_of(stage));
#pragma unroll
            for (int c = 0; c < BITS / 4; ++c) {
                const uint4 v = r[c];
                wq[4 * c] = v.x;
                wq[4 * c + 1] = v.y;
                wq[4 * c + 2] = v.z;
                wq[4 * c + 3] = v.w;
            }
            dequant_to(ws, wq, sc, bi);
        };
        for (u32 s = 0; s < QSTAGES - 1; ++s) {
            if (s < KT) issue(s, s);
            cp_async_commit();
        }
        // Tile 0's weight, and the scale and bias of tile 1 a step ahead.
        float sc = wlive ? to_f(sp[0]) : 0.0f, bi = wlive ? to_f(bp[0]) : 0.0f;
        cp_async_wait<QSTAGES - 2>();
        dequant_stage(0, ws_of(0), sc, bi);
        if (wlive && KT > 1) {
            sc = to_f(sp[32u / gs]);
            bi = to_f(bp[32u / gs]);
        }
        for (u32 kt = 0; kt < KT; ++kt) {
            // Tiles kt (x) and kt + 1 (this thread's raw chunk) have landed, at most QSTAGES - 3 later
            // groups pending; the barrier makes every thread's x and dequantized weight of tile kt
            // visible, and frees the stage and buffer of tile kt - 1 for what follows.
            cp_async_wait<QSTAGES - 3>();
            __syncthreads();
            const u32 next = kt + QSTAGES - 1;
            if (next < KT) issue(next % QSTAGES, next);
            cp_async_commit();
            mma_k32<T, QLDS>(acc, xs_of(kt % QSTAGES), ws_of(kt), wm0, wn0, lane);
            if (kt + 1 < KT) {
                dequant_stage((kt + 1) % QSTAGES, ws_of(kt + 1), sc, bi);
                if (wlive && kt + 2 < KT) {
                    sc = to_f(sp[(kt + 2) * 32u / gs]);
                    bi = to_f(bp[(kt + 2) * 32u / gs]);
                }
            }
        }
        cp_async_wait<0>();
    }
    mma_store<T, GATE_UP>(acc, y, N, N, n0, wm0, wn0, lane, [&](u32 r, u32& pr) {
        if (r >= rows_m) return false;
        pr = y_pair[r];
        return pr < P;
    }, activation);
}

template <typename T, bool GATE_UP, typename P>
__device__ __forceinline__ void qid_matrix_entry(const T* x, const unsigned int* gw, const T* gsc, const T* gbi, const unsigned int* uw,
                                                 const T* usc, const T* ubi, const u32* offsets, const u32* order, T* y, const P* p,
                                                 u32 activation) {
    const Rows<T> g0 = {reinterpret_cast<const unsigned char*>(gw), gsc, gbi};
    const Rows<T> u0 = {reinterpret_cast<const unsigned char*>(uw), usc, ubi};
    const u32 M = p->M, N = p->N, K = p->K, gs = p->group_size, U = p->n_expert_used, E = p->num_experts;
    const u32 ws = p->expert_weight_stride, ss = p->expert_scales_stride;
    if (p->bits == 4) qid_mm_tc<T, 4, GATE_UP>(x, g0, u0, offsets, order, y, M, N, K, gs, U, E, ws, ss, activation);
    else if (p->bits == 6) qid_mm_tc<T, 6, GATE_UP>(x, g0, u0, offsets, order, y, M, N, K, gs, U, E, ws, ss, activation);
    else qid_mm_tc<T, 8, GATE_UP>(x, g0, u0, offsets, order, y, M, N, K, gs, U, E, ws, ss, activation);
}

}  // namespace

// ---- mlx-native's quantized_matmul_id ----

// buffer(0) input f32 [M, K] (rounded to bf16), (1) weight, (2) scales bf16,
// (3) biases bf16, (4) ids [M, U], (5) output f32 [M, U, N], (6)
// QuantizedMatmulIdParams.
// The family compiles in five parts (ts/ops/quantized_matmul_id.ts
// QUANTIZED_MATMUL_ID_CUDA_PARTS): the group-column vector entries of bf16
// (1) and f16 (2), their compact entries of bf16 (3) and f16 (4); the rest
// are part 0.
#if MLXN_CUDA_PART_IS(0)
extern "C" __global__ void __launch_bounds__(256, 2) quantized_matmul_id(const float* input, const unsigned int* weight, const bf16* scales,
                                                                      const bf16* biases, const u32* ids, float* output,
                                                                      const QuantizedMatmulIdParams* params) {
    qid_vector_entry<float, bf16, bf16, float, false, true, true>(input, weight, scales, biases, weight, scales, biases, ids, output, params, 0u);
}

// ---- the vector and matrix forms (added) ----

// The vector form, buffer(0) x [M, K], (1) weight, (2) scales, (3) biases,
// (4) ids, (5) y [M, U, N], (6) QuantizedMatmulIdParams; gate_up: (1)-(3)
// the gate's, (6) QuantizedGateUpIdParams, (7)-(9) the up projection's. The
// matrix form, (4) offsets [E + 2], (5) y [M, U, N], (6)
// QuantizedMatmulIdParams, (7) order [M U]; gate_up: (6)
// QuantizedGateUpIdParams, (8)-(10) the up projection's. One type T (name
// TAG) throughout.
#define QID_ENTRIES(T, TAG)                                                                                                           \
    extern "C" __global__ void __launch_bounds__(256, 3)                                                                              \
        quantized_mv_id_##TAG(const T* x, const unsigned int* weight, const T* scales, const T* biases, const u32* ids, T* y,           \
                              const QuantizedMatmulIdParams* params) {                                                                \
        qid_vector_entry<T, T, T, T, false, false, false>(x, weight, scales, biases, weight, scales, biases, ids, y, params, 0u);      \
    }                                                                                                                                 \
    extern "C" __global__ void __launch_bounds__(256, 3) quantized_gate_up_mv_id_##TAG(                                              \
        const T* x, const unsigned int* gate_weight, const T* gate_scales, const T* gate_biases, const u32* ids, T* y,                \
        const QuantizedGateUpIdParams* params, const unsigned int* up_weight, const T* up_scales, const T* up_biases) {               \
        qid_vector_entry<T, T, T, T, true, false, false>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases,     \
                                                         ids, y, &params->id, params->activation);                                    \
    }                                                                                                                                 \
    extern "C" __global__ void __launch_bounds__(128)                                                                                 \
        quantized_mm_id_##TAG(const T* x, const unsigned int* weight, const T* scales, const T* biases, const u32* offsets, T* y,       \
                              const QuantizedMatmulIdParams* params, const u32* order) {                                              \
        qid_matrix_entry<T, false>(x, weight, scales, biases, weight, scales, biases, offsets, order, y, params, 0u);                  \
    }                                                                                                                                 \
    extern "C" __global__ void __launch_bounds__(128) quantized_gate_up_mm_id_##TAG(                                                 \
        const T* x, const unsigned int* gate_weight, const T* gate_scales, const T* gate_biases, const u32* offsets, T* y,            \
        const QuantizedGateUpIdParams* params, const u32* order, const unsigned int* up_weight, const T* up_scales,                   \
        const T* up_biases) {                                                                                                         \
        qid_matrix_entry<T, true>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases, offsets, order, y,       \
                                  &params->id, params->activation);                                                                   \
    }
QID_ENTRIES(__half, f16)
QID_ENTRIES(bf16, bf16)
#endif

// quantized_mv_id_gc_<t>, quantized_gate_up_mv_id_gc_<t> (ours: the typed
// ops' kernels for 4-bit codes in MLX's chunks, ts quantizedIdMvKernel):
// the vector entries' bindings, the group-column path (qid_gc, W by
// gc_id_warps) at its launch (ts quantizedIdMvCudaLaunch), 128 registers;
// the any engine where a vector load cannot read the operands.
#define QID_GC_OP_ENTRIES(T, TAG)                                                                                                      \
    extern "C" __global__ void __launch_bounds__(128, 4) quantized_mv_id_gc_##TAG(                                                   \
        const T* x, const unsigned int* weight, const T* scales, const T* biases, const u32* ids, T* y,                               \
        const QuantizedMatmulIdParams* params) {                                                                                      \
        qid_vector_entry<T, T, T, T, false, false, true>(x, weight, scales, biases, weight, scales, biases, ids, y, params, 0u);       \
    }                                                                                                                                 \
    extern "C" __global__ void __launch_bounds__(128, 4) quantized_gate_up_mv_id_gc_##TAG(                                           \
        const T* x, const unsigned int* gate_weight, const T* gate_scales, const T* gate_biases, const u32* ids, T* y,                \
        const QuantizedGateUpIdParams* params, const unsigned int* up_weight, const T* up_scales, const T* up_biases) {               \
        qid_vector_entry<T, T, T, T, true, false, true>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases,      \
                                                        ids, y, &params->id, params->activation);                                     \
    }
#if MLXN_CUDA_PART_IS(2)
QID_GC_OP_ENTRIES(__half, f16)
#endif
#if MLXN_CUDA_PART_IS(1)
QID_GC_OP_ENTRIES(bf16, bf16)
#endif
#undef QID_GC_OP_ENTRIES

// The vector entries with x f32 (name TAG_xf32: the scales', biases' and
// y's type T): each engine rounds x to T as it reads it, so y is the bits
// of the T entry's over x cast to T first (a model's f32 activations go in
// without a cast dispatch). The same bindings, engines and launches as the
// entries above: quantized_{,gate_up_}mv_id_<t>_xf32 the vector engine,
// ..._gc_<t>_xf32 the group-column path.
#define QID_XF32_ENTRIES(T, TAG)                                                                                                       \
    extern "C" __global__ void __launch_bounds__(256, 2)                                                                              \
        quantized_mv_id_##TAG##_xf32(const float* x, const unsigned int* weight, const T* scales, const T* biases, const u32* ids,     \
                                     T* y, const QuantizedMatmulIdParams* params) {                                                  \
        qid_vector_entry<float, T, T, T, false, true, false>(x, weight, scales, biases, weight, scales, biases, ids, y, params, 0u);   \
    }                                                                                                                                 \
    extern "C" __global__ void __launch_bounds__(256, 2) quantized_gate_up_mv_id_##TAG##_xf32(                                       \
        const float* x, const unsigned int* gate_weight, const T* gate_scales, const T* gate_biases, const u32* ids, T* y,            \
        const QuantizedGateUpIdParams* params, const unsigned int* up_weight, const T* up_scales, const T* up_biases) {               \
        qid_vector_entry<float, T, T, T, true, true, false>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases, \
                                                            ids, y, &params->id, params->activation);                                 \
    }
#define QID_GC_XF32_ENTRIES(T, TAG)                                                                                                    \
    extern "C" __global__ void __launch_bounds__(128, 4) quantized_mv_id_gc_##TAG##_xf32(                                            \
        const float* x, const unsigned int* weight, const T* scales, const T* biases, const u32* ids, T* y,                           \
        const QuantizedMatmulIdParams* params) {                                                                                      \
        qid_vector_entry<float, T, T, T, false, true, true>(x, weight, scales, biases, weight, scales, biases, ids, y, params, 0u);    \
    }                                                                                                                                 \
    extern "C" __global__ void __launch_bounds__(128, 4) quantized_gate_up_mv_id_gc_##TAG##_xf32(                                    \
        const float* x, const unsigned int* gate_weight, const T* gate_scales, const T* gate_biases, const u32* ids, T* y,            \
        const QuantizedGateUpIdParams* params, const unsigned int* up_weight, const T* up_scales, const T* up_biases) {               \
        qid_vector_entry<float, T, T, T, true, true, true>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases,  \
                                                           ids, y, &params->id, params->activation);                                  \
    }
#if MLXN_CUDA_PART_IS(0)
QID_XF32_ENTRIES(__half, f16)
QID_XF32_ENTRIES(bf16, bf16)
#endif
#if MLXN_CUDA_PART_IS(2)
QID_GC_XF32_ENTRIES(__half, f16)
#endif
#if MLXN_CUDA_PART_IS(1)
QID_GC_XF32_ENTRIES(bf16, bf16)
#endif
#undef QID_XF32_ENTRIES
#undef QID_GC_XF32_ENTRIES

// Compact entries (CUDA only; docs/internals.md "Compact CUDA entries") of
// the _gc kernels: <kernel>_g<GS>_w<W> runs the group-column path at group
// size GS and W warps a tile alone (with the any engine where a vector load
// cannot read the operands), for the sizes whose launch names it
// (ts/ops/quantized_matmul_id.ts quantizedIdMvCudaEntry: 4-bit codes,
// gc_id_takes, W = gc_id_warps): the _gc kernel's code for those sizes, so
// its results bit for bit, in about a sixth of its instructions. A plan made
// by hand that names one for other sizes gets the any engine's exact sums.
namespace {
template <typename TX, typename T, bool GU, bool ROUND_X, u32 GS, u32 W, typename P>
__device__ __forceinline__ void qid_gc_compact(const TX* x, const unsigned int* gw, const T* gsc, const T* gbi, const unsigned int* uw,
                                               const T* usc, const T* ubi, const u32* ids, T* y, const P* p, u32 activation) {
    const QidSizes q = qid_sizes(p);
    const u32 M = q.M, N = q.N, K = q.K, gs = q.gs, bits = q.bits, U = q.U, E = q.E, ws = q.ws, ss = q.ss;
    const unsigned char* gwb = reinterpret_cast<const unsigned char*>(gw);
    const unsigned char* uwb = reinterpret_cast<const unsigned char*>(uw);
    // Sizes of another path (a plan made by hand) and operands a vector load cannot read: the any engine, exact at any size.
    if (gs != GS || !q_chunked(K, gs) || !gc_id_takes(K, gs, bits) || gc_id_warps(M * U, N, GU, K, gs) != W || !vec_ok(x, gwb, uwb, ws, bits)) {
        qid_any<TX, T, T, ROUND_X, GU>(x, {gwb, gsc, gbi}, {uwb, usc, ubi}, ids, y, M, N, K, gs, bits, U, E, ws, ss, activation);
        return;
    }
    qid_gc_at<TX, T, T, GU, W, GS>(x, gwb, gsc, gbi, uwb, usc, ubi, ids, y, M, N, K, gs, U, E, ws, ss, p->expert_biases_stride, activation);
}
}  // namespace
#define QID_MV_GC_AT(KNAME, TX, T, ROUND_X, GS, W)                                                                                     \
    extern "C" __global__ void __launch_bounds__(128, 4) KNAME##_g##GS##_w##W(                                                      \
        const TX* x, const unsigned int* weight, const T* scales, const T* biases, const u32* ids, T* y,                              \
        const QuantizedMatmulIdParams* params) {                                                                                      \
        qid_gc_compact<TX, T, false, ROUND_X, GS, W>(x, weight, scales, biases, weight, scales, biases, ids, y, params, 0u);          \
    }
#define QID_GATE_UP_GC_AT(KNAME, TX, T, ROUND_X, GS, W)                                                                                \
    extern "C" __global__ void __launch_bounds__(128, 4) KNAME##_g##GS##_w##W(                                                      \
        const TX* x, const unsigned int* gate_weight, const T* gate_scales, const T* gate_biases, const u32* ids, T* y,               \
        const QuantizedGateUpIdParams* params, const unsigned int* up_weight, const T* up_scales, const T* up_biases) {              \
        qid_gc_compact<TX, T, true, ROUND_X, GS, W>(x, gate_weight, gate_scales, gate_biases, up_weight, up_scales, up_biases, ids, y, \
                                                    &params->id, params->activation);                                                \
    }
// gc_id_warps: 1 or 2 warps a tile for the plain form, 1, 2 or 4 for gate_up.
#define QID_GC_COMPACT_ENTRIES(GS, TAG, T)                                                                                             \
    QID_MV_GC_AT(quantized_mv_id_gc_##TAG, T, T, false, GS, 1)                                                                        \
    QID_MV_GC_AT(quantized_mv_id_gc_##TAG, T, T, false, GS, 2)                                                                        \
    QID_MV_GC_AT(quantized_mv_id_gc_##TAG##_xf32, float, T, true, GS, 1)                                                              \
    QID_MV_GC_AT(quantized_mv_id_gc_##TAG##_xf32, float, T, true, GS, 2)                                                              \
    QID_GATE_UP_GC_AT(quantized_gate_up_mv_id_gc_##TAG, T, T, false, GS, 1)                                                           \
    QID_GATE_UP_GC_AT(quantized_gate_up_mv_id_gc_##TAG, T, T, false, GS, 2)                                                           \
    QID_GATE_UP_GC_AT(quantized_gate_up_mv_id_gc_##TAG, T, T, false, GS, 4)                                                           \
    QID_GATE_UP_GC_AT(quantized_gate_up_mv_id_gc_##TAG##_xf32, float, T, true, GS, 1)                                                 \
    QID_GATE_UP_GC_AT(quantized_gate_up_mv_id_gc_##TAG##_xf32, float, T, true, GS, 2)                                                 \
    QID_GATE_UP_GC_AT(quantized_gate_up_mv_id_gc_##TAG##_xf32, float, T, true, GS, 4)
#if MLXN_CUDA_PART_IS(3)
QID_GC_COMPACT_ENTRIES(32, bf16, bf16)
QID_GC_COMPACT_ENTRIES(64, bf16, bf16)
QID_GC_COMPACT_ENTRIES(128, bf16, bf16)
#endif
#if MLXN_CUDA_PART_IS(4)
QID_GC_COMPACT_ENTRIES(32, f16, __half)
QID_GC_COMPACT_ENTRIES(64, f16, __half)
QID_GC_COMPACT_ENTRIES(128, f16, __half)
#endif
#undef QID_GC_COMPACT_ENTRIES
#undef QID_GATE_UP_GC_AT
#undef QID_MV_GC_AT

