// Attention over a prompt (CUDA), entry names and bindings as
// shaders/flash_attn_prefill.metal (the math, the masks and the params are
// stated there): out = softmax(scale Q K^T [capped, masked]) V per query
// head, GQA heads reading KV head h / gqa_factor. Function constants arrive
// as MLXN_FC_<index> macros.
//
// FlashAttention-2's structure on tensor cores: one block per (query tile,
// head, sequence), blockIdx.x taken from the last tile down so that causal
// grids start their longest tiles first. The Q tile and one K and one V tile
// of BK keys live in shared memory, rows padded by 16 bytes (ldmatrix and
// the staging stores meet no bank conflicts), filled by cp.async (16 bytes a
// copy; element by element where a row or stride is not 16-byte aligned).
// The copies overlap the math as in FlashAttention-2: V of a step loads
// while its scores and softmax run, K of the next step while P V runs.
// Each warp owns MT x 16 query rows: S = Q K^T by mma.sync m16n8k16 (bf16
// or f16 in, f32 out), ldmatrix fragments of Q and K; the online softmax in
// registers in log2 units (scale * log2(e) folded into one multiply, 2^x on
// the special function unit, the running maximum starting finite so that
// hidden keys give exact zeros and never NaN), each thread keeping partial
// row sums reduced once at the end; P is rounded to the input type as the A
// operand of O += P V, with O in f32 registers. Keys outside the causal and
// window range of a tile are not visited (time follows the keys a tile
// sees); masks are applied element by element only on the tiles that need
// them. blk (has_blk), whose tiles are the Metal entries' (32 x 16, 8 x 8 or
// 8 x 64), skips a key tile whose covered classes are all 0 and the mask on
// one whose classes are all 2. The output is staged through the Q tile's
// memory and stored in 16-byte rows.
//
// Tiles (flashAttnPrefillCudaTile in ts/ops/flash_attn_prefill.ts): D 64 and
// 128: 4 warps of 32 rows (128-row tiles), 64 keys a step; D 256: 4 warps of
// 16 rows, 64 keys; D 512: 8 warps, each pair of warps sharing 16 rows and
// splitting the output columns in halves (both compute the rows' scores:
// 256 f32 accumulators a thread would not fit), 32 keys a step.
//
// Hopper (compiled for sm_90a, MLXN_WGMMA; the op launches D 128 and 256
// with WgTile<D>::THREADS threads and WG_SMEM bytes on compute capability
// 9.0, and the entry tells the launches apart by blockDim.x):
// FlashAttention-3's structure (bench/notes/fa3-2026-11-26.md). Two
// warpgroups of 64 query rows (128-row tiles), 128 keys a step at D 128 and
// 64 at D 256. Q and the K and V tiles lie in shared memory as D / 64 column
// blocks of 128-byte swizzled rows (common.cuh's sw128_offset), K and V in
// two stages each. S = Q K^T by wgmma m64nBKk16 from shared memory (both
// K-major along D); the online softmax on S's accumulator fragment in
// registers, as above; O += P V by wgmma's RS form, P the S fragment rounded
// to the input type (its pairs are the A fragment), V the MN-major B operand
// (imm-trans-b, wgmma_desc_sw128_mn). Each step issues S of its tile and
// P V of the previous one, then runs the softmax while P V is on the tensor
// cores. At D 128 (attention_wg, 256 threads) every thread copies its share
// of the next tiles by cp.async (element by element where rows are not
// 16-byte aligned) and a block barrier separates the steps. At D 256
// (attention_ws, 384 threads) a third warpgroup produces: one thread copies
// each whole K and V tile by TMA through the tensor maps the op binds
// (10, 11), the warpgroup a tile cut by the keys' end by cp.async, on
// mbarriers, while the two warpgroups of rows only compute. Every feature
// of the entries is on both paths: causal, window, GQA, softcap, additive
// and bool masks, blk, queries at an offset, varlen. D 64 and 512 keep the
// mma.sync launches; the Hopper launch in a build without sm_90a runs the
// mma.sync tile over the same 128 rows (8 warps of 16).

#ifndef MLXN_FC_300
#define MLXN_FC_300 0
#endif
#ifndef MLXN_FC_301
#define MLXN_FC_301 0
#endif
#ifndef MLXN_FC_303
#define MLXN_FC_303 0
#endif
#ifndef MLXN_FC_304
#define MLXN_FC_304 0
#endif
#ifndef MLXN_FC_305
#define MLXN_FC_305 0
#endif
#ifndef MLXN_FC_400
#define MLXN_FC_400 32
#endif
#ifndef MLXN_FC_401
#define MLXN_FC_401 16
#endif

namespace {

constexpr bool kMask = MLXN_FC_300 != 0;
constexpr bool kCausal = MLXN_FC_301 != 0;
constexpr bool kBlk = MLXN_FC_303 != 0;
constexpr bool kSoftcap = MLXN_FC_304 != 0;
constexpr bool kVarlen = MLXN_FC_305 != 0;
constexpr int kBlkBq = MLXN_FC_400;
constexpr int kBlkBk = MLXN_FC_401;

// The running maximum's start (-FLT_MAX / 2): finite, so 2^(s - max) of a
// hidden score (-inf) is exactly 0.
constexpr float kMaxInit = -1.70141173e38f;
constexpr float kLog2e = 1.44269504088896341f;

// The tile of each head dimension: MT m-tiles of 16 rows a warp, RW warps
// along the rows, DS warps splitting the output columns, BK keys a step.
template <int D> struct Tile;
template <> struct Tile<64> { static constexpr int MT = 2, RW = 4, DS = 1, BK = 64; };
template <> struct Tile<128> { static constexpr int MT = 2, RW = 4, DS = 1, BK = 64; };
template <> struct Tile<256> { static constexpr int MT = 1, RW = 4, DS = 1, BK = 64; };
template <> struct Tile<512> { static constexpr int MT = 1, RW = 4, DS = 2, BK = 32; };
// The mma.sync tile of a 256-thread launch (the Hopper launch's 128 rows, in
// a build without sm_90a): 8 warps of 16 rows.
#ifndef MLXN_WGMMA
struct Wide { static constexpr int MT = 1, RW = 8, DS = 1, BK = 64; };
#endif

// A block's sequence: element offsets of its first query row (head
// included) in Q and O and first key row in K and V, the counts, and the
// absolute position of query row 0 among the keys.
struct Seq {
    u64 q_base, o_base, k_base, v_base;
    int q_len, k_len, q_off;
};

__device__ __forceinline__ Seq seq_of(const AttnParams& p, u32 z, u32 h, const uint* cu_q, const uint* cu_k) {
    const u32 kvh = h / u32(max(p.gqa_factor, 1));
    Seq s;
    u64 qr = 0, kr = 0;
    if (kVarlen) {
        const u32 qs = min(cu_q[z], u32(p.qL));
        const u32 qe = min(max(cu_q[z + 1], qs), u32(p.qL));
        const u32 ks = min(cu_k[z], u32(p.kL));
        const u32 ke = min(max(cu_k[z + 1], ks), u32(p.kL));
        s.q_len = int(qe - qs);
        s.k_len = int(ke - ks);
        s.q_off = s.k_len - s.q_len;
        qr = qs;
        kr = ks;
    } else {
        s.q_len = p.qL;
        s.k_len = p.kL;
        s.q_off = p.qL_off;
    }
    s.q_base = u64(z) * p.Q_stride_b + u64(h) * p.Q_stride_h + qr * p.Q_stride_l;
    s.o_base = u64(z) * p.O_stride_b + u64(h) * p.O_stride_h + qr * p.O_stride_l;
    s.k_base = u64(z) * p.K_stride_b + u64(kvh) * p.K_stride_h + kr * p.K_stride_l;
    s.v_base = u64(z) * p.V_stride_b + u64(kvh) * p.V_stride_h + kr * p.V_stride_l;
    return s;
}

// n rows of D elements from src (rows `stride` apart) into dst (rows LD
// apart); rows at or past `valid` are zeros. By cp.async when vec, else
// element by element.
template <typename T, int D, int LD, int NT>
__device__ __forceinline__ void load_rows(T* dst, const T* src, u64 stride, int n, int valid, bool vec, u32 tid) {
    constexpr int C = D / 8;
    if (vec) {
        for (int i = int(tid); i < n * C; i += NT) {
            const int r = i / C, c = (i % C) * 8;
            const bool live = r < valid;
            cp_async16(dst + r * LD + c, live ? src + u64(r) * stride + c : src, live);
        }
    } else {
        for (int i = int(tid); i < n * D; i += NT) {
            const int r = i / D, c = i % D;
            dst[r * LD + c] = r < valid ? src[u64(r) * stride + c] : from_f<T>(0.0f);
        }
    }
}

// A block's query tile: rows q0 .. q0 + rows of sequence s (blockIdx.x
// taken from the last tile down, so causal grids start their longest tiles
// first; q0 >= s.q_len: the block has no rows), the keys [k_lo, k_hi) the
// causal and window ranges let it see, in key tiles t_lo .. t_hi of BK, its
// rows' global pointers, and whether they and every stride allow 16-byte
// copies.
template <typename T, int BQ, int BK>
struct QTile {
    Seq s;
    int q0, rows, qa0, k_lo, k_hi, t_lo, t_hi;
    const T* qg;
    const T* kg;
    const T* vg;
    T* og;
    bool vec;

    // The keys of key tile kt this tile copies (fewer than BK at k_hi).
    __device__ __forceinline__ int keys(int kt) const { return min(BK, k_hi - kt * BK); }
};

template <typename T, int BQ, int BK>
__device__ __forceinline__ QTile<T, BQ, BK> q_tile(const AttnParams& p, const T* Q, const T* K, const T* V, T* O, const uint* cu_q,
                                                   const uint* cu_k) {
    QTile<T, BQ, BK> r;
    r.s = seq_of(p, blockIdx.z, blockIdx.y, cu_q, cu_k);
    r.q0 = int(gridDim.x - 1 - blockIdx.x) * BQ;
    r.rows = min(BQ, r.s.q_len - r.q0);
    r.qa0 = r.s.q_off + r.q0;
    r.k_lo = 0;
    r.k_hi = r.s.k_len;
    if (kCausal) r.k_hi = min(r.k_hi, r.qa0 + r.rows);
    if (p.window > 0) r.k_lo = max(r.k_lo, r.qa0 - p.window + 1);
    r.t_lo = r.k_lo / BK;
    r.t_hi = r.k_hi > r.k_lo ? (r.k_hi + BK - 1) / BK : r.t_lo;
    const u64 qst = p.Q_stride_l, kst = p.K_stride_l, vst = p.V_stride_l, ost = p.O_stride_l;
    r.qg = Q + r.s.q_base + u64(r.q0) * qst;
    r.kg = K + r.s.k_base;
    r.vg = V + r.s.v_base;
    r.og = O + r.s.o_base + u64(r.q0) * ost;
    r.vec = aligned16(r.qg) && aligned16(r.kg) && aligned16(r.vg) && aligned16(r.og) && (qst | kst | vst | ost) % 8 == 0;
    return r;
}

// The classes of the blk tiles (BQB x BKB) under the query tile at q0 (BQ
// rows) and key tile kt (BK keys): 0 when all are 0, 2 when all are 2, else
// 1 (1 without blk).
template <int BQ, int BK, int BQB, int BKB>
__device__ __forceinline__ int blk_class_of(const AttnParams& p, const char* blk, int q0, int kt) {
    if (!kBlk) return 1;
    const int nqb = (p.qL + BQB - 1) / BQB, nkb = (p.kL + BKB - 1) / BKB;
    const int qb1 = min((q0 + BQ - 1) / BQB, nqb - 1);
    const int kb1 = min((kt * BK + BK - 1) / BKB, nkb - 1);
    bool all0 = true, all2 = true;
    for (int qb = q0 / BQB; qb <= qb1; ++qb) {
        for (int kb = (kt * BK) / BKB; kb <= kb1; ++kb) {
            const char c = blk[u64(qb) * u64(nkb) + u64(kb)];
            all0 = all0 && c == 0;
            all2 = all2 && c == 2;
        }
    }
    return all0 ? 0 : all2 ? 2 : 1;
}

// The first key tile at or after kt, below t_hi, that blk does not hide
// whole (t_hi when none).
template <int BQ, int BK, int BQB, int BKB>
__device__ __forceinline__ int next_live(const AttnParams& p, const char* blk, int q0, int kt, int t_hi) {
    while (kt < t_hi && blk_class_of<BQ, BK, BQB, BKB>(p, blk, q0, kt) == 0) ++kt;
    return kt;
}

// 1 / l of a row whose running sum l is spread over the four threads of a
// quad (0 for a row that saw no key).
__device__ __forceinline__ float quad_inv_sum(float l) {
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    return l == 0.0f ? 0.0f : 1.0f / l;
}

// A mask value: a bool one hides the key when false, an additive one is
// added to the score (log2 units).
__device__ __forceinline__ void apply_mask(bool m, float& x, bool& vis) { vis = m; }
__device__ __forceinline__ void apply_mask(__half m, float& x, bool& vis) { x += __half2float(m) * kLog2e; }
__device__ __forceinline__ void apply_mask(bf16 m, float& x, bool& vis) { x += __bfloat162float(m) * kLog2e; }

// One query row's scores of the key tile at k0 (tile row r; at(n, e) the
// score of key k0 + 8 n + 2 t + e, n < NS): scaled (softcapped) into log2
// units and, where edge, hidden keys (past k_len, rows at or past `rows`,
// causal, outside the window, masked) set to -inf; then each replaced by
// 2^(x - m), m the row's running maximum, and the running sum l updated.
// Returns the factor that rescales the row's earlier outputs.
template <int NS, typename MaskT, typename At>
__device__ __forceinline__ float softmax_row(At&& at, float& m_run, float& l_run, int r, int t, int k0, int cls, bool edge, int k_len,
                                             int rows, int q0, int qa0, int W, float scale, float cap, float sl2, const MaskT* mask,
                                             const AttnMaskParams* mp) {
    const int qa = qa0 + r;
    float mx = kMaxInit;
#pragma unroll
    for (int n = 0; n < NS; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            float x = at(n, e);
            x = kSoftcap ? cap * tanhf(x * scale / cap) * kLog2e : x * sl2;
            if (edge) {
                const int j = k0 + n * 8 + 2 * t + e;
                bool vis = j < k_len && r < rows;
                if (kCausal) vis = vis && j <= qa;
                if (W > 0) vis = vis && qa - j < W;
                if (kMask && cls != 2 && vis) {
                    const MaskT mv = mask[u64(blockIdx.z) * mp->M_stride_b + u64(blockIdx.y) * mp->M_stride_h + u64(q0 + r) * mp->M_stride_q +
                                          u64(j)];
                    apply_mask(mv, x, vis);
                }
                x = vis ? x : __int_as_float(0xff800000);
            }
            at(n, e) = x;
            mx = fmaxf(mx, x);
        }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m_run, mx);
    const float f = ex2_approx(m_run - m_new);
    m_run = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < NS; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float pr = ex2_approx(at(n, e) - m_new);
            at(n, e) = pr;
            sum += pr;
        }
    }
    l_run = l_run * f + sum;
    return f;
}

// BQB x BKB: the tile of the blk classes (the Metal entry's); C the tile.
template <typename T, typename MaskT, int D, int BQB, int BKB, typename C>
__device__ __forceinline__ void attention(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                                          T* __restrict__ O, const AttnParams* pp, const AttnMaskParams* mp,
                                          const MaskT* mask, const char* blk, const uint* cu_q, const uint* cu_k) {
    constexpr int MT = C::MT, RW = C::RW, DS = C::DS, BK = C::BK;
    constexpr int BQ = RW * MT * 16;
    constexpr int NT = 32 * RW * DS;
    constexpr int LD = D + 8;
    constexpr int NS = BK / 8;
    constexpr int DO = D / DS;
    constexpr int NO = DO / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* qs = reinterpret_cast<T*>(smem_raw);
    T* ks = qs + BQ * LD;
    T* vs = ks + BK * LD;

    const AttnParams& p = *pp;
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const int rg = int(warp) % RW, cs = int(warp) / RW;
    const int g = int(lane >> 2), t = int(lane & 3u);

    const QTile<T, BQ, BK> qt = q_tile<T, BQ, BK>(p, Q, K, V, O, cu_q, cu_k);
    if (qt.q0 >= qt.s.q_len) return;
    const int W = p.window;
    const u64 kst = p.K_stride_l, vst = p.V_stride_l, ost = p.O_stride_l;

    load_rows<T, D, LD, NT>(qs, qt.qg, p.Q_stride_l, BQ, qt.rows, qt.vec, tid);
    int kt = next_live<BQ, BK, BQB, BKB>(p, blk, qt.q0, qt.t_lo, qt.t_hi);
    if (kt < qt.t_hi) load_rows<T, D, LD, NT>(ks, qt.kg + u64(kt * BK) * kst, kst, BK, qt.keys(kt), qt.vec, tid);
    cp_async_commit();

    float o[MT][NO][4];
    float m_run[MT][2], l_run[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int n = 0; n < NO; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
        m_run[mt][0] = m_run[mt][1] = kMaxInit;
        l_run[mt][0] = l_run[mt][1] = 0.0f;
    }
    const float scale = p.scale, cap = p.softcapping, sl2 = scale * kLog2e;

    while (kt < qt.t_hi) {
        const int k0 = kt * BK;
        const int cls = blk_class_of<BQ, BK, BQB, BKB>(p, blk, qt.q0, kt);
        cp_async_wait<0>();
        __syncthreads();
        load_rows<T, D, LD, NT>(vs, qt.vg + u64(k0) * vst, vst, BK, qt.keys(kt), qt.vec, tid);
        cp_async_commit();

        float sc[MT][NS][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int n = 0; n < NS; ++n) sc[mt][n][0] = sc[mt][n][1] = sc[mt][n][2] = sc[mt][n][3] = 0.0f;
        }
#pragma unroll
        for (int dk = 0; dk < D / 16; ++dk) {
            u32 a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) frag_a(a[mt], qs, LD, u32(rg * MT * 16 + mt * 16), u32(dk * 16), lane);
#pragma unroll
            for (int np = 0; np < NS / 2; ++np) {
                u32 b[4];
                frag_b_nk(b, ks, LD, u32(np * 16), u32(dk * 16), lane);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma16<T>(sc[mt][2 * np], a[mt], b[0], b[1]);
                    mma16<T>(sc[mt][2 * np + 1], a[mt], b[2], b[3]);
                }
            }
        }

        // Scale, cap and mask; the online softmax, row by row.
        const bool edge = k0 + BK > qt.s.k_len || (kCausal && k0 + BK - 1 > qt.qa0) || (W > 0 && qt.qa0 + BQ - 1 - k0 >= W) ||
                          (kMask && cls != 2);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int r = rg * MT * 16 + mt * 16 + g + 8 * hh;
                const float f = softmax_row<NS>([&](int n, int e) -> float& { return sc[mt][n][2 * hh + e]; }, m_run[mt][hh], l_run[mt][hh], r,
                                                t, k0, cls, edge, qt.s.k_len, qt.rows, qt.q0, qt.qa0, W, scale, cap, sl2, mask, mp);
#pragma unroll
                for (int n = 0; n < NO; ++n) {
                    o[mt][n][2 * hh] *= f;
                    o[mt][n][2 * hh + 1] *= f;
                }
            }
        }
        // P as A fragments: the accumulators of n-tiles 2kk and 2kk + 1 are
        // the 16 x 16 operand of keys 16kk .. 16kk + 15.
        u32 pa[MT][BK / 16][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
                pa[mt][kk][0] = pack2<T>(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
                pa[mt][kk][1] = pack2<T>(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
                pa[mt][kk][2] = pack2<T>(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
                pa[mt][kk][3] = pack2<T>(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
            }
        }

        cp_async_wait<0>();
        __syncthreads();
        const int kn = next_live<BQ, BK, BQB, BKB>(p, blk, qt.q0, kt + 1, qt.t_hi);
        if (kn < qt.t_hi) load_rows<T, D, LD, NT>(ks, qt.kg + u64(kn * BK) * kst, kst, BK, qt.keys(kn), qt.vec, tid);
        cp_async_commit();

#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
            for (int np = 0; np < NO / 2; ++np) {
                u32 b[4];
                frag_b_kn(b, vs, LD, u32(cs * DO + np * 16), u32(kk * 16), lane);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma16<T>(o[mt][2 * np], pa[mt][kk], b[0], b[1]);
                    mma16<T>(o[mt][2 * np + 1], pa[mt][kk], b[2], b[3]);
                }
            }
        }
        kt = kn;
    }

    // Normalize, stage the tile in the Q rows, store rows below `rows`.
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const float inv = quad_inv_sum(l_run[mt][hh]);
            const int r = rg * MT * 16 + mt * 16 + g + 8 * hh;
#pragma unroll
            for (int n = 0; n < NO; ++n) {
                *reinterpret_cast<u32*>(qs + r * LD + cs * DO + n * 8 + 2 * t) =
                    pack2<T>(o[mt][n][2 * hh] * inv, o[mt][n][2 * hh + 1] * inv);
            }
        }
    }
    __syncthreads();
    if (qt.vec) {
        for (int i = int(tid); i < qt.rows * (D / 8); i += NT) {
            const int r = i / (D / 8), c = (i % (D / 8)) * 8;
            *reinterpret_cast<uint4*>(qt.og + u64(r) * ost + c) = *reinterpret_cast<const uint4*>(qs + r * LD + c);
        }
    } else {
        for (int i = int(tid); i < qt.rows * D; i += NT) {
            const int r = i / D, c = i % D;
            qt.og[u64(r) * ost + c] = qs[r * LD + c];
        }
    }
}

// ---- the Hopper path: wgmma (the file comment's second part) ----

// Keys a step of the Hopper tile: 128 at D 128 (S is m64n128), 64 at D 256
// (m64n64, so that S, P and the 128 O registers fit beside each other);
// its threads: 256 (attention_wg, the two warpgroups in lockstep) at D 128,
// 384 (attention_ws, a producer warpgroup copying by TMA) at D 256, each
// the faster of the two at its D (bench/notes/fa-producer-2026-11-29.md).
template <int D> struct WgTile;
template <> struct WgTile<128> { static constexpr int BK = 128, THREADS = 256; };
template <> struct WgTile<256> { static constexpr int BK = 64, THREADS = 384; };

// Dynamic shared memory of the Hopper launch (the op's
// flashAttnPrefillCudaTile on compute capability 9.0): Q's 128 rows, two K
// and two V stages of BK rows, all D / 64 column blocks of swizzled
// 128-byte rows, and 1024 bytes to align them.
template <int D> constexpr u32 WG_SMEM = u32(128 + 4 * WgTile<D>::BK) * u32(D) * 2u + 1024u;

// NR rows of D elements from src (rows `stride` apart) into the swizzled
// column blocks at dst (block b, values 64 b .. 64 b + 63 of every row, at
// dst + b NR 128 bytes; chunk c of row r at sw128_offset(r, c)); rows at or
// past `valid` are zeros. By cp.async when vec: thread t copies chunk t % C
// of rows t / C + RI m (C = D / 8 chunks a row, RI = 256 / C rows an
// iteration, a multiple of 8, so that every row of a thread has the same
// swizzle; C consecutive threads read a whole row). Else element by element.
template <typename T, int D, int NR>
__device__ __forceinline__ void load_sw(unsigned char* dst, const T* src, u64 stride, int valid, bool vec, u32 tid) {
    constexpr int C = D / 8, RI = 256 / C;
    static_assert(RI % 8 == 0 && NR % RI == 0, "rows of an iteration");
    if (vec) {
        const int c = int(tid) % C, r0 = int(tid) / C;
        unsigned char* d = dst + u32(c >> 3) * u32(NR * 128) + sw128_offset(u32(r0), u32(c & 7));
        const T* g = src + u64(r0) * stride + u64(c * 8);
#pragma unroll
        for (int m = 0; m < NR / RI; ++m) {
            const bool live = r0 + RI * m < valid;
            cp_async16(d + u32(RI * 128 * m), live ? g + u64(RI * m) * stride : src, live);
        }
    } else {
        for (int i = int(tid); i < NR * D; i += 256) {
            const int r = i / D, col = i % D;
            T* e = reinterpret_cast<T*>(dst + u32(col >> 6) * u32(NR * 128) + sw128_offset(u32(r), u32((col & 63) >> 3))) + (col & 7);
            *e = r < valid ? src[u64(r) * stride + u64(col)] : from_f<T>(0.0f);
        }
    }
}

// This thread's copies of a whole tile of NR rows (every row live, rows and
// strides 16-byte aligned), as load_sw's vector path lays them out: from g
// (its first chunk's bytes in global memory), RI rows apart (`step` bytes),
// into d (its first chunk in shared memory). Pointers step by additions
// only: no row predicates, selects or products a copy.
template <int D, int NR>
__device__ __forceinline__ void load_sw_whole(unsigned char* d, const char* g, u64 step) {
    constexpr int RI = 256 / (D / 8);
#pragma unroll
    for (int m = 0; m < NR / RI; ++m) {
        cp_async16(d + u32(RI * 128 * m), g, true);
        g += step;
    }
}

#ifdef MLXN_WGMMA
// ---- what both Hopper tiles do a step (inlined: ptxas serializes wgmma
// whose pipeline crosses a call) ----

// S = Q K^T of the warpgroup's 64 rows into sc, issued and committed as one
// group (dq: its rows of Q, dks: the K stage), after the fences that keep
// o, pa and sc where the wgmma of this and earlier steps expect them.
template <typename T, int D, int BK>
__device__ __forceinline__ void wg_issue_s(float (&sc)[BK / 2], float (&o)[D / 2], u32 (&pa)[BK / 16][4], u64 dq, u64 dks) {
    constexpr u32 QCB = 128u * 128u, KCB = u32(BK) * 128u;
#pragma unroll
    for (int i = 0; i < BK / 2; ++i) sc[i] = 0.0f;
    acc_fence(sc);
    acc_fence(o);
    reg_fence(pa);
    wgmma_fence();
#pragma unroll
    for (int dj = 0; dj < D / 16; ++dj) {
        wgmma_ss<T>(sc, dq + (u64(u32(dj >> 2) * QCB + 32u * u32(dj & 3)) >> 4),
                    dks + (u64(u32(dj >> 2) * KCB + 32u * u32(dj & 3)) >> 4));
    }
    wgmma_commit();
}

// O += P V (dvs: the V stage), issued and committed as one group.
template <typename T, int D, int BK>
__device__ __forceinline__ void wg_issue_pv(float (&o)[D / 2], u32 (&pa)[BK / 16][4], u64 dvs) {
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) wgmma_rs<T>(o, pa[kk], dvs + u64(kk * 2048 / 16));
    wgmma_commit();
}

// The last step's P V, waited for.
template <typename T, int D, int BK>
__device__ __forceinline__ void wg_last_pv(float (&o)[D / 2], u32 (&pa)[BK / 16][4], u64 dvs) {
    acc_fence(o);
    reg_fence(pa);
    wgmma_fence();
    wg_issue_pv<T, D, BK>(o, pa, dvs);
    wgmma_wait<0>();
    acc_fence(o);
}

// With S of key tile kt in sc (awaited) and P V of the previous step
// pending: scale, cap and mask; the online softmax of the thread's two rows
// (warpgroup wg, warp w, lane group g and t); then, P V waited for and
// `released()` run (the V stage it read is free), O rescaled and P rounded
// to the input type as the next step's A operand (the pairs of S's
// fragment are the RS wgmma's A fragment).
template <typename T, typename MaskT, int D, int BK, typename QT, typename R>
__device__ __forceinline__ void wg_softmax(float (&sc)[BK / 2], float (&o)[D / 2], u32 (&pa)[BK / 16][4], float (&m_run)[2],
                                           float (&l_run)[2], const QT& qt, int kt, int cls, const AttnParams& p, u32 wg, u32 w,
                                           int g, int t, float sl2, const MaskT* mask, const AttnMaskParams* mp, R&& released) {
    constexpr int BQ = 128;
    const int k0 = kt * BK, W = p.window;
    const bool edge = k0 + BK > qt.s.k_len || (kCausal && k0 + BK - 1 > qt.qa0) || (W > 0 && qt.qa0 + BQ - 1 - k0 >= W) ||
                      (kMask && cls != 2);
    float f[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int r = int(wg) * 64 + int(w) * 16 + g + 8 * hh;
        f[hh] = softmax_row<BK / 8>([&](int n, int e) -> float& { return sc[4 * n + 2 * hh + e]; }, m_run[hh], l_run[hh], r, t, k0, cls,
                                    edge, qt.s.k_len, qt.rows, qt.q0, qt.qa0, W, p.scale, p.softcapping, sl2, mask, mp);
    }
    wgmma_wait<0>();
    acc_fence(o);
    reg_fence(pa);
    released();
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] *= f[(i >> 1) & 1];
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
        for (int q = 0; q < 4; ++q) pa[kk][q] = pack2<T>(sc[8 * kk + 2 * q], sc[8 * kk + 2 * q + 1]);
    }
}

// The thread's two rows of O, normalized, into their rows of Q's swizzled
// tile at qs (no wgmma reads those rows any more).
template <typename T, int D>
__device__ __forceinline__ void wg_stage_o(const float (&o)[D / 2], const float (&l_run)[2], unsigned char* qs, u32 wg, u32 w,
                                           int g, int t) {
    constexpr u32 QCB = 128u * 128u;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const float inv = quad_inv_sum(l_run[hh]);
        const u32 r = wg * 64u + w * 16u + u32(g + 8 * hh);
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            *reinterpret_cast<u32*>(qs + u32(n >> 3) * QCB + sw128_offset(r, u32(n & 7)) + 4u * u32(t)) =
                pack2<T>(o[4 * n + 2 * hh] * inv, o[4 * n + 2 * hh + 1] * inv);
        }
    }
}

// Rows [r_lo, r_hi) of the staged tile at qs to O (rows `ost` apart), by
// nt threads (ti one of them): 16-byte pieces where vec, else elements.
template <typename T, int D>
__device__ __forceinline__ void wg_store_rows(const unsigned char* qs, T* og, u64 ost, bool vec, int r_lo, int r_hi, int ti, int nt) {
    constexpr u32 QCB = 128u * 128u;
    if (vec) {
        for (int i = r_lo * (D / 8) + ti; i < r_hi * (D / 8); i += nt) {
            const int r = i / (D / 8), c = i % (D / 8);
            *reinterpret_cast<uint4*>(og + u64(r) * ost + u64(c * 8)) =
                *reinterpret_cast<const uint4*>(qs + u32(c >> 3) * QCB + sw128_offset(u32(r), u32(c & 7)));
        }
    } else {
        for (int i = r_lo * D + ti; i < r_hi * D; i += nt) {
            const int r = i / D, col = i % D;
            og[u64(r) * ost + u64(col)] =
                reinterpret_cast<const T*>(qs + u32(col >> 6) * QCB + sw128_offset(u32(r), u32((col & 63) >> 3)))[col & 7];
        }
    }
}

// The 128-row tile on wgmma: 256 threads, warpgroup wg owns query rows
// 64 wg .. 64 wg + 63. Step j (key tile kt, the j-th tile the block visits):
// wait for this thread's copies, proxy fence, barrier (K of kt and V of the
// previous tile landed everywhere; both warpgroups are past the wgmma of
// step j - 1); issue S = Q K^T (D / 16 wgmma from shared memory); while it
// runs, start K of the next tile (into the stage K of step j - 1 held) and
// V of kt (into the stage of step j - 2's V); issue O += P V of step j - 1
// (BK / 16 wgmma, P from registers); wait for S alone; scale, cap, mask and
// the online softmax on the S fragment while P V runs; wait for P V;
// rescale O, round P to the input type as the next step's A operand. After
// the last step, its P V. (The copies' issue costs a fifth of a step at D
// 128; before S it left the tensor cores idle for that long.)
template <typename T, typename MaskT, int D, int BQB, int BKB>
__device__ __forceinline__ void attention_wg(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                                             T* __restrict__ O, const AttnParams* pp, const AttnMaskParams* mp,
                                             const MaskT* mask, const char* blk, const uint* cu_q, const uint* cu_k) {
    constexpr int BK = WgTile<D>::BK;
    constexpr int BQ = 128, NT = 256;
    constexpr u32 QCB = u32(BQ) * 128u, KCB = u32(BK) * 128u;  // bytes of a column block of Q, of a K or V tile
    constexpr u32 KVT = u32(D / 64) * KCB;                     // bytes of a K or V tile
    constexpr int RS = BK / 2, RO = D / 2;                     // S and O accumulators a thread
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* qs = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    unsigned char* ks = qs + u32(D / 64) * QCB;
    unsigned char* vs = ks + 2u * KVT;

    const AttnParams& p = *pp;
    const u32 tid = threadIdx.x, lane = tid & 31u, wg = tid >> 7, w = (tid >> 5) & 3u;
    const int g = int(lane >> 2), t = int(lane & 3u);

    const QTile<T, BQ, BK> qt = q_tile<T, BQ, BK>(p, Q, K, V, O, cu_q, cu_k);
    if (qt.q0 >= qt.s.q_len) return;
    const int W = p.window;
    const u64 kst = p.K_stride_l, vst = p.V_stride_l, ost = p.O_stride_l;

    load_sw<T, D, BQ>(qs, qt.qg, p.Q_stride_l, qt.rows, qt.vec, tid);
    int kt = next_live<BQ, BK, BQB, BKB>(p, blk, qt.q0, qt.t_lo, qt.t_hi);
    if (kt < qt.t_hi) load_sw<T, D, BK>(ks, qt.kg + u64(kt * BK) * kst, kst, qt.keys(kt), qt.vec, tid);
    cp_async_commit();

    float o[RO], sc[RS];
    u32 pa[BK / 16][4];
    float m_run[2] = {kMaxInit, kMaxInit}, l_run[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < RO; ++i) o[i] = 0.0f;
    const float scale = p.scale, cap = p.softcapping, sl2 = scale * kLog2e;
    // This warpgroup's 64 rows of Q; stage 0 of K (K-major) and of V (MN-major).
    const u64 dq = wgmma_desc_sw128(qs + wg * 64u * 128u);
    const u64 dk = wgmma_desc_sw128(ks);
    const u64 dv = wgmma_desc_sw128_mn(vs, KCB);

    // A whole tile's copies of this thread (load_sw_whole): its chunk's
    // offset in a stage, its first bytes in K and V, the bytes between its
    // rows and between key tiles.
    constexpr int CH = D / 8, RI = 256 / CH;
    const u32 dofs = u32((int(tid) % CH) >> 3) * KCB + sw128_offset(tid / u32(CH), tid % u32(CH) & 7u);
    const u64 gofs = u64(tid / u32(CH)), cofs = u64(tid % u32(CH)) * 16u;
    const char* kth = reinterpret_cast<const char*>(qt.kg) + gofs * kst * sizeof(T) + cofs;
    const char* vth = reinterpret_cast<const char*>(qt.vg) + gofs * vst * sizeof(T) + cofs;
    const u64 kstep = u64(RI) * kst * sizeof(T), vstep = u64(RI) * vst * sizeof(T);
    const u64 ktile = u64(BK) * kst * sizeof(T), vtile = u64(BK) * vst * sizeof(T);

    int j = 0;
    while (kt < qt.t_hi) {
        const int k0 = kt * BK;
        const int cls = blk_class_of<BQ, BK, BQB, BKB>(p, blk, qt.q0, kt);
        const int kn = next_live<BQ, BK, BQB, BKB>(p, blk, qt.q0, kt + 1, qt.t_hi);
        cp_async_wait<0>();
        fence_proxy_async_smem();
        __syncthreads();

        wg_issue_s<T, D, BK>(sc, o, pa, dq, dk + (u64(u32(j & 1) * KVT) >> 4));
        // The copies while S runs on the tensor cores: K of the next tile
        // into the stage K of step j - 1 held, V of this one into the stage
        // of step j - 2's V (neither read by S or the P V below).
        unsigned char* kd = ks + u32((j + 1) & 1) * KVT;
        unsigned char* vd = vs + u32(j & 1) * KVT;
        if (kn < qt.t_hi) {
            if (qt.vec && qt.keys(kn) == BK) load_sw_whole<D, BK>(kd + dofs, kth + u64(kn) * ktile, kstep);
            else load_sw<T, D, BK>(kd, qt.kg + u64(kn * BK) * kst, kst, qt.keys(kn), qt.vec, tid);
        }
        if (qt.vec && qt.keys(kt) == BK) load_sw_whole<D, BK>(vd + dofs, vth + u64(kt) * vtile, vstep);
        else load_sw<T, D, BK>(vd, qt.vg + u64(k0) * vst, vst, qt.keys(kt), qt.vec, tid);
        cp_async_commit();
        // P V of the previous step in its own group, S's awaited alone; step
        // 0 has no P V and commits no empty group: ptxas realizes an empty
        // group as one more (dummy) wgmma in every step, and the wait for
        // all but one group then waited for P V as well.
        if (j > 0) {
            wg_issue_pv<T, D, BK>(o, pa, dv + (u64(u32((j - 1) & 1) * KVT) >> 4));
            wgmma_wait<1>();
        } else {
            wgmma_wait<0>();
        }
        acc_fence(sc);

        wg_softmax<T, MaskT, D, BK>(sc, o, pa, m_run, l_run, qt, kt, cls, p, wg, w, g, t, sl2, mask, mp, [] {});
        ++j;
        kt = kn;
    }

    // The last step's P V (its V landed with the last group of copies).
    cp_async_wait<0>();
    fence_proxy_async_smem();
    __syncthreads();
    if (j > 0) wg_last_pv<T, D, BK>(o, pa, dv + (u64(u32((j - 1) & 1) * KVT) >> 4));

    // Normalize, stage the tile in Q's swizzled rows (every wgmma reading Q
    // finished before the barrier above), store rows below `rows`.
    wg_stage_o<T, D>(o, l_run, qs, wg, w, g, t);
    __syncthreads();
    wg_store_rows<T, D>(qs, qt.og, ost, qt.vec, 0, qt.rows, int(tid), NT);
}

// NR rows of D elements from src (rows `stride` apart) into the swizzled
// column blocks at dst (block b, values 64 b .. 64 b + 63 of every row, at
// dst + b NR 128 bytes; chunk c of row r at sw128_offset(r, c)), by the 128
// threads of a producer warpgroup (wt its thread, 0-127); rows at or past
// `valid` are zeros. By cp.async when vec: thread wt copies chunk wt % 8 of
// each column block of rows wt / 8 + 16 m, so every row of a thread has the
// same swizzle (its chunks step by 16 rows, 2048 bytes) and 8 neighbouring
// threads read 128 contiguous bytes of a row. Else element by element.
template <typename T, int D, int NR>
__device__ __forceinline__ void load_sw_wg(unsigned char* dst, const T* src, u64 stride, int valid, bool vec, u32 wt) {
    static_assert(NR % 16 == 0, "rows of an iteration");
    if (vec) {
        const u32 c = wt & 7u, r0 = wt >> 3;
        unsigned char* d = dst + sw128_offset(r0, c);
        const char* g = reinterpret_cast<const char*>(src + u64(r0) * stride) + c * 16u;
        const u64 step = 16u * stride * sizeof(T);
#pragma unroll
        for (int m = 0; m < NR / 16; ++m) {
            const bool live = int(r0) + 16 * m < valid;
#pragma unroll
            for (int b = 0; b < D / 64; ++b)
                cp_async16(d + u32(b * NR * 128 + m * 2048), live ? g + b * 128 : reinterpret_cast<const char*>(src), live);
            g += step;
        }
    } else {
        for (int i = int(wt); i < NR * D; i += 128) {
            const int r = i / D, col = i % D;
            T* e = reinterpret_cast<T*>(dst + u32(col >> 6) * u32(NR * 128) + sw128_offset(u32(r), u32((col & 63) >> 3))) + (col & 7);
            *e = r < valid ? src[u64(r) * stride + u64(col)] : from_f<T>(0.0f);
        }
    }
}

// The producer's arrival on a stage's `full` barrier once its part of the
// stage is there (a barrier of 128 arrivals, one a producer thread): by
// cp.async (vec) when the copies land, or after its element stores and a
// proxy fence (wgmma reads through the async proxy).
__device__ __forceinline__ void stage_filled(u64* full, bool vec) {
    if (vec) {
        cp_async_mbar_arrive(full);
    } else {
        fence_proxy_async_smem();
        mbar_arrive(full);
    }
}
// The same for a barrier of one arrival (a stage TMA fills where its tile is
// whole): every producer thread commits and waits for its copies and
// fences, the warpgroup meets (named barrier 3), then thread 0 arrives.
__device__ __forceinline__ void stage_filled_wg(u64* full, u32 wt) {
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async_smem();
    bar_sync(3u, 128u);
    if (wt == 0u) mbar_arrive(full);
}

// Registers a thread after the producer gives its share to the consumers
// (setmaxnreg): 232 x 256 + 40 x 128 = 64512 of the 65536 the launch holds.
constexpr int kWgConsumerRegs = 232, kWgProducerRegs = 40;

// The 128-row tile on wgmma, warp-specialized (FlashAttention-3's
// structure): 384 threads, D 256's Hopper tile. Warpgroup 2, the producer, copies Q
// and then, in the order the consumers visit them, each key tile's K and V
// into two stages each, by cp.async completing on mbarriers (full_q, full_k,
// full_v: 128 arrivals, one a producer thread); it refills a stage once
// every consumer warp saw the wgmma that read it finish (empty_k, empty_v:
// 8 arrivals, lane 0 of each consumer warp). Warpgroups 0 and 1, the
// consumers, own query rows 64 wg .. 64 wg + 63. Consumer step j (key tile
// kt, the j-th tile the block visits, stage j % 2): wait for K of kt and V
// of the previous tile, proxy fence; issue S = Q K^T (D / 16 wgmma from
// shared memory), then O += P V of step j - 1 (BK / 16 wgmma, P from
// registers); wait for S alone and release K's stage; scale, cap, mask and
// the online softmax on the S fragment while P V runs; wait for P V and
// release V's stage; rescale O, round P to the input type as the next
// step's A operand. After the last step, its P V. So the consumers issue
// no copies: their instructions are the products and the softmax.
template <typename T, typename MaskT, int D, int BQB, int BKB>
__device__ __forceinline__ void attention_ws(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                                             T* __restrict__ O, const AttnParams* pp, const AttnMaskParams* mp,
                                             const MaskT* mask, const char* blk, const uint* cu_q, const uint* cu_k,
                                             const void* kmap, const void* vmap) {
    constexpr int BK = WgTile<D>::BK;
    constexpr int BQ = 128;
    constexpr u32 QCB = u32(BQ) * 128u, KCB = u32(BK) * 128u;  // bytes of a column block of Q, of a K or V tile
    constexpr u32 KVT = u32(D / 64) * KCB;                     // bytes of a K or V tile
    constexpr int RS = BK / 2, RO = D / 2;                     // S and O accumulators a thread
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* qs = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    unsigned char* ks = qs + u32(D / 64) * QCB;
    unsigned char* vs = ks + 2u * KVT;
    // full_q, then full_k[2], full_v[2], empty_k[2], empty_v[2].
    __shared__ __align__(8) u64 bars[9];
    u64* const full_q = bars;
    u64* const full_k = bars + 1;
    u64* const full_v = bars + 3;
    u64* const empty_k = bars + 5;
    u64* const empty_v = bars + 7;

    const AttnParams& p = *pp;
    const u32 tid = threadIdx.x, lane = tid & 31u, wg = tid >> 7, w = (tid >> 5) & 3u;
    const int g = int(lane >> 2), t = int(lane & 3u);

    const QTile<T, BQ, BK> qt = q_tile<T, BQ, BK>(p, Q, K, V, O, cu_q, cu_k);
    if (qt.q0 >= qt.s.q_len) return;
    const int W = p.window;
    const u64 kst = p.K_stride_l, vst = p.V_stride_l, ost = p.O_stride_l;
    if (tid == 0) {
        mbar_init(full_q, 128u);
#pragma unroll
        for (int s = 0; s < 2; ++s) {
            mbar_init(full_k + s, 1u);
            mbar_init(full_v + s, 1u);
            mbar_init(empty_k + s, 8u);
            mbar_init(empty_v + s, 8u);
        }
    }
    __syncthreads();

    if (wg == 2u) {
        // The producer. Fill f of a stage (tile j = 2 f + stage) waits for
        // the consumers' release of fill f - 1 (phase f - 1 of its empty
        // barrier, parity (f - 1) & 1).
        setmaxnreg_dec<kWgProducerRegs>();
        const u32 wt = tid & 127u;
        load_sw_wg<T, D, BQ>(qs, qt.qg, p.Q_stride_l, qt.rows, qt.vec, wt);
        stage_filled(full_q, qt.vec);
        // The sequence's K and V rows in the maps' coordinates: a map's rows
        // are the buffer's rows of K_stride_l (V_stride_l) elements, its
        // columns the elements of a row (the head's D at its column).
        const u64 ko = u64(qt.kg - K), vo = u64(qt.vg - V);
        const int kc = int(ko % kst), kr = int(ko / kst), vc = int(vo % vst), vr = int(vo / vst);
        if (wt == 0u) {
            tmap_acquire(kmap);
            tmap_acquire(vmap);
        }
        int kt = next_live<BQ, BK, BQB, BKB>(p, blk, qt.q0, qt.t_lo, qt.t_hi);
        for (u32 j = 0; kt < qt.t_hi; ++j) {
            const u32 st = j & 1u, pe = ((j >> 1) & 1u) ^ 1u;
            const int nk = qt.keys(kt);
            if (j >= 2u) mbar_wait(empty_k + st, pe);
            if (nk == BK) {
                // A whole tile: one thread, D / 64 copies of 64 columns x BK rows.
                if (wt == 0u) {
                    mbar_arrive_expect_tx(full_k + st, KVT);
#pragma unroll
                    for (int cb = 0; cb < D / 64; ++cb) tma_load_2d(ks + st * KVT + u32(cb) * KCB, kmap, kc + 64 * cb, kr + kt * BK, full_k + st);
                }
            } else {
                load_sw_wg<T, D, BK>(ks + st * KVT, qt.kg + u64(kt * BK) * kst, kst, nk, qt.vec, wt);
                stage_filled_wg(full_k + st, wt);
            }
            if (j >= 2u) mbar_wait(empty_v + st, pe);
            if (nk == BK) {
                if (wt == 0u) {
                    mbar_arrive_expect_tx(full_v + st, KVT);
#pragma unroll
                    for (int cb = 0; cb < D / 64; ++cb) tma_load_2d(vs + st * KVT + u32(cb) * KCB, vmap, vc + 64 * cb, vr + kt * BK, full_v + st);
                }
            } else {
                load_sw_wg<T, D, BK>(vs + st * KVT, qt.vg + u64(kt * BK) * vst, vst, nk, qt.vec, wt);
                stage_filled_wg(full_v + st, wt);
            }
            kt = next_live<BQ, BK, BQB, BKB>(p, blk, qt.q0, kt + 1, qt.t_hi);
        }
        cp_async_commit();
        cp_async_wait<0>();
        return;
    }
    setmaxnreg_inc<kWgConsumerRegs>();

    float o[RO], sc[RS];
    u32 pa[BK / 16][4];
    float m_run[2] = {kMaxInit, kMaxInit}, l_run[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < RO; ++i) o[i] = 0.0f;
    const float scale = p.scale, cap = p.softcapping, sl2 = scale * kLog2e;
    // This warpgroup's 64 rows of Q; stage 0 of K (K-major) and of V (MN-major).
    const u64 dq = wgmma_desc_sw128(qs + wg * 64u * 128u);
    const u64 dk = wgmma_desc_sw128(ks);
    const u64 dv = wgmma_desc_sw128_mn(vs, KCB);

    mbar_wait(full_q, 0u);
    int kt = next_live<BQ, BK, BQB, BKB>(p, blk, qt.q0, qt.t_lo, qt.t_hi);
    u32 j = 0;
    while (kt < qt.t_hi) {
        const int k0 = kt * BK;
        const int cls = blk_class_of<BQ, BK, BQB, BKB>(p, blk, qt.q0, kt);
        const int kn = next_live<BQ, BK, BQB, BKB>(p, blk, qt.q0, kt + 1, qt.t_hi);
        const u32 st = j & 1u, pv = st ^ 1u;
        mbar_wait(full_k + st, (j >> 1) & 1u);
        if (j > 0u) mbar_wait(full_v + pv, ((j - 1u) >> 1) & 1u);
        fence_proxy_async_smem();

        wg_issue_s<T, D, BK>(sc, o, pa, dq, dk + (u64(st * KVT) >> 4));
        // P V of the previous step in its own group, S's awaited alone; step
        // 0 has no P V and commits no empty group: ptxas realizes an empty
        // group as one more (dummy) wgmma in every step, and the wait for
        // all but one group then waited for P V as well.
        if (j > 0u) {
            wg_issue_pv<T, D, BK>(o, pa, dv + (u64(pv * KVT) >> 4));
            wgmma_wait<1>();
        } else {
            wgmma_wait<0>();
        }
        acc_fence(sc);
        if (lane == 0u) mbar_arrive(empty_k + st);

        wg_softmax<T, MaskT, D, BK>(sc, o, pa, m_run, l_run, qt, kt, cls, p, wg, w, g, t, sl2, mask, mp, [&] {
            if (j > 0u && lane == 0u) mbar_arrive(empty_v + pv);
        });
        ++j;
        kt = kn;
    }

    // The last step's P V.
    if (j > 0u) {
        const u32 pv = (j - 1u) & 1u;
        mbar_wait(full_v + pv, ((j - 1u) >> 1) & 1u);
        fence_proxy_async_smem();
        wg_last_pv<T, D, BK>(o, pa, dv + (u64(pv * KVT) >> 4));
    }

    // Normalize, stage the warpgroup's 64 rows in its own rows of Q's
    // swizzled tile (only its own S read them, all finished), store those
    // below `rows` (named barrier 1 + wg: the warpgroup's 128 threads).
    wg_stage_o<T, D>(o, l_run, qs, wg, w, g, t);
    bar_sync(1u + wg, 128u);
    wg_store_rows<T, D>(qs, qt.og, ost, qt.vec, int(wg) * 64, min(qt.rows, int(wg) * 64 + 64), int(tid & 127u), 128);
}
#endif  // MLXN_WGMMA

// The op's Hopper launch of D 128 or 256 (WgTile<D>::THREADS threads):
// where compiled for sm_90a, the lockstep wgmma tile at D 128 and the
// warp-specialized one at D 256 (inlined: ptxas serializes wgmma whose
// pipeline crosses a call); else the mma.sync tile of the same 128 rows on
// the first 256 threads (8 warps of 16, out of line) while a third
// warpgroup exits (a block barrier waits only for threads that have not
// exited), so that the grid the launch was made for stays right.
#ifndef MLXN_WGMMA
template <typename T, typename MaskT, int D, int BQB, int BKB>
__device__ __noinline__ void attention_wide_mma(const T* Q, const T* K, const T* V, T* O, const AttnParams* pp,
                                                const AttnMaskParams* mp, const MaskT* mask, const char* blk,
                                                const uint* cu_q, const uint* cu_k) {
    attention<T, MaskT, D, BQB, BKB, Wide>(Q, K, V, O, pp, mp, mask, blk, cu_q, cu_k);
}
#endif
template <typename T, typename MaskT, int D, int BQB, int BKB>
__device__ __forceinline__ void attention_wide(const T* Q, const T* K, const T* V, T* O, const AttnParams* pp,
                                               const AttnMaskParams* mp, const MaskT* mask, const char* blk,
                                               const uint* cu_q, const uint* cu_k, const void* kmap, const void* vmap) {
#ifdef MLXN_WGMMA
    if constexpr (WgTile<D>::THREADS == 384) {
        attention_ws<T, MaskT, D, BQB, BKB>(Q, K, V, O, pp, mp, mask, blk, cu_q, cu_k, kmap, vmap);
    } else {
        attention_wg<T, MaskT, D, BQB, BKB>(Q, K, V, O, pp, mp, mask, blk, cu_q, cu_k);
    }
#else
    if (threadIdx.x >= 256) return;
    attention_wide_mma<T, MaskT, D, BQB, BKB>(Q, K, V, O, pp, mp, mask, blk, cu_q, cu_k);
#endif
}

// The mask builder: row blockIdx.x, threads striding over the keys, 8 keys
// (one 16-byte store) a step where the rows are 16-byte aligned.
template <typename T>
__device__ __forceinline__ void mask_fill(T* mask, const FlashAttnPrefillMaskParams* pp) {
    const FlashAttnPrefillMaskParams& p = *pp;
    const u32 q = blockIdx.x, n = p.seq_len_k;
    const long long a = (long long)q + (long long)p.q_abs_offset;
    const T zero = from_f<T>(0.0f), hide = from_f<T>(__int_as_float(0xff800000));
    auto hidden = [&](u32 k) {
        return (p.causal != 0u && (long long)k > a) || (p.n_swa > 0 && a - (long long)k >= (long long)p.n_swa);
    };
    T* row = mask + u64(q) * n;
    if (n % 8 == 0 && aligned16(mask)) {
        for (u32 k = threadIdx.x * 8; k < n; k += blockDim.x * 8) {
            alignas(16) T v[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] = hidden(k + e) ? hide : zero;
            *reinterpret_cast<uint4*>(row + k) = *reinterpret_cast<const uint4*>(v);
        }
    } else {
        for (u32 k = threadIdx.x; k < n; k += blockDim.x) row[k] = hidden(k) ? hide : zero;
    }
}

// The tile classifier: tile blockIdx.x = qt * NK + kt, one warp.
template <typename T>
__device__ __forceinline__ void blk_classify(const T* mask, char* blk, const FlashAttnPrefillBlkParams* pp) {
    const FlashAttnPrefillBlkParams& p = *pp;
    const int bq = kBlkBq, bk = kBlkBk;
    const int nk = (p.seq_len_k + bk - 1) / bk;
    const int kt = int(blockIdx.x) % nk, qt = int(blockIdx.x) / nk;
    const int k_start = kt * bk;
    char res;
    if (k_start >= p.seq_len_k) {
        res = 0;
    } else if (k_start + bk > p.seq_len_k) {
        res = 1;
    } else {
        const int rows = min(max(p.seq_len_q - qt * bq, 0), bq);
        float mn = __int_as_float(0x7f800000), mx = __int_as_float(0xff800000);
        for (int c = int(threadIdx.x); c < bk; c += 32) {
            for (int j = 0; j < rows; ++j) {
                const float v = to_f(mask[u64(qt * bq + j) * u64(p.mask_row_stride) + u64(k_start + c)]);
                mn = fminf(mn, v);
                mx = fmaxf(mx, v);
            }
        }
#pragma unroll
        for (u32 o = 16; o > 0; o >>= 1) {
            mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        }
        res = mx <= -1.0e30f ? char(0) : (mn == 0.0f && mx == 0.0f ? char(2) : char(1));
    }
    if (threadIdx.x == 0) blk[u64(qt) * u64(nk) + u64(kt)] = res;
}

}  // namespace

// buffer(0) Q, (1) K, (2) V, (3) O, (4) AttnParams, (5) AttnMaskParams, (6)
// mask, (7) blk, (8) cu_seqlens_q, (9) cu_seqlens_k (the op binds every
// index; the function constants say which are read), and the CUDA twin's
// own (10) K's and (11) V's tensor maps, read by D 256's Hopper launch (the
// op binds q in their place elsewhere).
#define FA_ENTRY(NAME, T, MASK, D, BQB, BKB, THREADS, MINB)                                                       \
    extern "C" __global__ void __launch_bounds__(THREADS, MINB)                                                   \
        NAME(const T* Q, const T* K, const T* V, T* O, const AttnParams* params, const AttnMaskParams* mask_params, \
             const MASK* mask, const char* blk, const uint* cu_seqlens_q, const uint* cu_seqlens_k, const void*,   \
             const void*) {                                                                                       \
        attention<T, MASK, D, BQB, BKB, Tile<D>>(Q, K, V, O, params, mask_params, mask, blk, cu_seqlens_q,        \
                                                 cu_seqlens_k);                                                   \
    }
// The mma.sync tile of Tile<D>: out of line beside the Hopper path (two
// tiles inlined in one entry share its 255 registers, and ptxas spills
// where either alone does not), inlined in builds without sm_90a, where the
// 256-thread fallback goes out of line instead (attention_wide).
#ifdef MLXN_WGMMA
#define FA_NARROW __noinline__
#else
#define FA_NARROW __forceinline__
#endif
template <typename T, typename MaskT, int D>
__device__ FA_NARROW void attention_narrow(const T* Q, const T* K, const T* V, T* O, const AttnParams* pp,
                                              const AttnMaskParams* mp, const MaskT* mask, const char* blk,
                                              const uint* cu_q, const uint* cu_k) {
    attention<T, MaskT, D, 32, 16, Tile<D>>(Q, K, V, O, pp, mp, mask, blk, cu_q, cu_k);
}

// D 128 and 256: 128 threads run the mma.sync tile of Tile<D>, more the
// Hopper launch (attention_wide). D 256's entries, compiled for compute
// capability 9.0, allow the 384 threads of its Hopper launch, which bounds
// their mma.sync tile by 168 registers (it spills there, and runs only where
// the op cannot take the Hopper launch: maps of 2^31 rows or more); the
// others allow 256 (the mma.sync tiles' registers stay bounded by 255).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FA_WIDE_THREADS(D) WgTile<D>::THREADS
#else
#define FA_WIDE_THREADS(D) 256
#endif
#define FA_ENTRY_WIDE(NAME, T, MASK, D)                                                                           \
    extern "C" __global__ void __launch_bounds__(FA_WIDE_THREADS(D), 1)                                           \
        NAME(const T* Q, const T* K, const T* V, T* O, const AttnParams* params, const AttnMaskParams* mask_params, \
             const MASK* mask, const char* blk, const uint* cu_seqlens_q, const uint* cu_seqlens_k,                \
             const void* k_map, const void* v_map) {                                                              \
        if (blockDim.x != 128) {                                                                                  \
            attention_wide<T, MASK, D, 32, 16>(Q, K, V, O, params, mask_params, mask, blk, cu_seqlens_q,          \
                                                cu_seqlens_k, k_map, v_map);                                      \
            return;                                                                                               \
        }                                                                                                         \
        attention_narrow<T, MASK, D>(Q, K, V, O, params, mask_params, mask, blk, cu_seqlens_q, cu_seqlens_k);     \
    }

// The entries in the CUDA program's parts (flash_attn_prefill.ts's
// FLASH_ATTN_PREFILL_CUDA_PARTS): one a head dim and input type from D 128
// up (a model's layers use one or two head dims and one type), D 64 and
// the mask builders in part 0.
#if MLXN_CUDA_PART_IS(0)
FA_ENTRY(flash_attn_prefill_bf16_d64, bf16, bf16, 64, 32, 16, 128, 2)
FA_ENTRY(flash_attn_prefill_bf16_d64_boolmask, bf16, bool, 64, 32, 16, 128, 2)
FA_ENTRY(flash_attn_prefill_f16_d64, __half, __half, 64, 32, 16, 128, 2)
FA_ENTRY(flash_attn_prefill_f16_d64_boolmask, __half, bool, 64, 32, 16, 128, 2)
#endif
#if MLXN_CUDA_PART_IS(1)
FA_ENTRY_WIDE(flash_attn_prefill_bf16_d128, bf16, bf16, 128)
FA_ENTRY_WIDE(flash_attn_prefill_bf16_d128_boolmask, bf16, bool, 128)
#endif
#if MLXN_CUDA_PART_IS(2)
FA_ENTRY_WIDE(flash_attn_prefill_f16_d128, __half, __half, 128)
FA_ENTRY_WIDE(flash_attn_prefill_f16_d128_boolmask, __half, bool, 128)
#endif
#if MLXN_CUDA_PART_IS(3)
FA_ENTRY_WIDE(flash_attn_prefill_bf16_d256, bf16, bf16, 256)
FA_ENTRY_WIDE(flash_attn_prefill_bf16_d256_boolmask, bf16, bool, 256)
#endif
#if MLXN_CUDA_PART_IS(4)
FA_ENTRY_WIDE(flash_attn_prefill_f16_d256, __half, __half, 256)
FA_ENTRY_WIDE(flash_attn_prefill_f16_d256_boolmask, __half, bool, 256)
#endif
#if MLXN_CUDA_PART_IS(5)
FA_ENTRY(flash_attn_prefill_bf16_d512, bf16, bf16, 512, 8, 8, 256, 1)
FA_ENTRY(flash_attn_prefill_bf16_d512_boolmask, bf16, bool, 512, 8, 8, 256, 1)
FA_ENTRY(flash_attn_prefill_llamacpp_bf16_d512, bf16, bf16, 512, 8, 64, 256, 1)
FA_ENTRY(flash_attn_prefill_llamacpp_bf16_d512_boolmask, bf16, bool, 512, 8, 64, 256, 1)
#endif
#if MLXN_CUDA_PART_IS(6)
FA_ENTRY(flash_attn_prefill_f16_d512, __half, __half, 512, 8, 8, 256, 1)
FA_ENTRY(flash_attn_prefill_f16_d512_boolmask, __half, bool, 512, 8, 8, 256, 1)
FA_ENTRY(flash_attn_prefill_llamacpp_f16_d512, __half, __half, 512, 8, 64, 256, 1)
FA_ENTRY(flash_attn_prefill_llamacpp_f16_d512_boolmask, __half, bool, 512, 8, 64, 256, 1)
#endif

#if MLXN_CUDA_PART_IS(0)
// buffer(0) mask [qL, kL], (1) FlashAttnPrefillMaskParams. Grid (qL, 1, 1).
extern "C" __global__ void flash_attn_prefill_mask_fill_bf16(bf16* mask, const FlashAttnPrefillMaskParams* params) {
    mask_fill<bf16>(mask, params);
}
extern "C" __global__ void flash_attn_prefill_mask_fill_f16(__half* mask, const FlashAttnPrefillMaskParams* params) {
    mask_fill<__half>(mask, params);
}

// buffer(0) mask, (1) blk, (2) FlashAttnPrefillBlkParams. Grid (NQ * NK, 1, 1) of 32 threads.
extern "C" __global__ void flash_attn_prefill_blk_bf16(const bf16* mask, char* blk, const FlashAttnPrefillBlkParams* params) {
    blk_classify<bf16>(mask, blk, params);
}
extern "C" __global__ void flash_attn_prefill_blk_f16(const __half* mask, char* blk, const FlashAttnPrefillBlkParams* params) {
    blk_classify<__half>(mask, blk, params);
}
#endif
