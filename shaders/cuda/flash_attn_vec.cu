// flash_attn_vec (CUDA): split-KV decode attention, one query token per
// (sequence, head); entry names, bindings and the partials layout as
// shaders/flash_attn_vec.metal, which states the math and the visible
// positions [lo, hi) of a sequence (kv_span below computes the same).
//
// Q [B, n_heads, D] f32; K, V [B, n_kv_heads, kv_capacity, D] f32, f16 or bf16.
// Main kernel dst: NWG == 1 the normalized output [rows, D]; NWG > 1 the
// unnormalized partials [rows, D/4, NWG] float4, then [rows, NWG, 2] floats
// (S, M): the softmax denominator relative to the running max M (natural log
// units). A split's share of a sequence: its visible keys in tiles counted
// from lo, split iwg taking a contiguous run of ceil(tiles / NWG) of them.
//
// f16 / bf16 K/V (tensor cores): grid (ceil(group / 8), n_kv_heads, B * NWG),
// 128 threads (4 warps), dynamic shared memory 192 KB (+ 16 KB at D 512).
// A block takes one KV head, up to 8 query heads of its GQA group (from
// blockIdx.x * 8) and one split. The split's tiles of 16 keys go to the
// warps in turn; each warp streams its tiles' K and V (one slot each) through
// a cp.async ring of its own, rows stored with 16-byte chunks XOR-swizzled
// by row (ldmatrix without bank conflicts). Per tile, on mma.sync m16n8k16:
//   S = Q K^T: A = the query, rows 0-7 the 8 heads rounded to the K/V type
//     and rows 8-15 their remainders (q - hi, rounded), so a score is the sum
//     of rows g and g + 8 of C (the f32 query to ~2^-17); B = the K tile (two
//     n-tiles of 8 keys, one ldmatrix.x4 per 16 dimensions).
//   C's lane 4g + t holds head g's scores of keys 2t, 2t + 1, 8 + 2t, 9 + 2t:
//     the online softmax (log2 domain) runs there, the tile max over the 4
//     lanes of a head by two shuffles, the running sum kept per lane.
//   O^T += V^T P^T: A = V^T (ldmatrix.trans of the V tile, 16 dimensions per
//     m-tile), B = P^T, whose fragment is that lane's four weights as they
//     lie (keys 2t, 2t + 1 and 8 + 2t, 9 + 2t of head g), split hi + lo like
//     the query: two mma per m-tile.
// The 4 warps merge (M, S, O) in shared memory at the end.
//
// f32 K/V (FFMA): grid (hb, n_kv_heads, B * NWG) with hb from the op
// (flashAttnVecCudaHeadBlocks), 128 threads, 98304 bytes of shared memory.
// Each lane owns D / 128 16-byte slices of a row, so one warp-wide load
// covers 512 contiguous bytes of a K or V row. A block takes hpb = ceil(group
// / hb) query heads of one KV head and one split; the split's tiles of TK
// positions go to the 4 warps in turn; each warp streams its K and V rows
// through a per-lane cp.async ring (a lane reads back only the 16-byte slices
// it copied, so no warp barrier is needed), computes the HG * TK partial dots
// from each K row once, transpose-reduces them (lane l: head (l % P) / TK,
// position l % TK), runs the online softmax in the log2 domain for all HG
// heads at once, and accumulates V with each weight broadcast by a shuffle.
// The warps' (M, S, O) merge through shared memory at the end.
//
// Reduce kernel: grid (rows, 1, 1), 32 * NWG threads (mlx-native's launch).
// Lane w of every warp folds workgroup w's (sum, max) pair into the row's
// max and sum by warp reductions; thread t takes float4 column t % (D / 4)
// of the workgroups t / (D / 4), t / (D / 4) + G, ... (G = threads / (D /
// 4) groups), their partials loaded together before the pairs fold, so that
// every load of the row is in flight in one round (D / 128 a thread); the
// groups' sums meet in shared memory, added in group order.

namespace {

constexpr float FLT_MAX_F = 3.402823466e+38f;
constexpr u32 FULL = 0xffffffffu;
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
constexpr int NW = 4;   // warps per block, both paths

// The visible positions [lo, hi) of a sequence of len positions and where
// they live (shaders/flash_attn_vec.metal): slot(j) = j on a global cache,
// j % cap on a ring.
struct KvSpan {
    u32 lo, hi, cap;
    bool ring;
    __device__ __forceinline__ u32 keys() const { return hi > lo ? hi - lo : 0u; }
    // Slot of position pos0 + r, given s0 = slot(pos0) and r < cap.
    __device__ __forceinline__ u32 slot(u32 s0, u32 r) const {
        const u32 s = s0 + r;
        return ring && s >= cap ? s - cap : s;
    }
    __device__ __forceinline__ u32 first(u32 pos0) const { return ring ? pos0 % cap : pos0; }
};

__device__ __forceinline__ KvSpan kv_span(u32 len, u32 cap, bool ring, u32 window) {
    KvSpan s;
    s.cap = cap;
    s.ring = ring;
    s.hi = ring ? len : min(len, cap);
    s.lo = ring && len > cap ? len - cap : 0u;
    if (window > 0u && len > window) s.lo = max(s.lo, len - window);
    return s;
}

// What a block needs of the params, whichever struct carried them.
struct Job {
    u32 n_heads, n_kv_heads, cap, nwg;
    float scale, softcap;
    KvSpan sp;
};

// The (sequence, split) of blockIdx.z and the job of that sequence.
__device__ __forceinline__ Job job_of(const FlashAttnVecParams& p) {
    return Job{p.n_heads, p.n_kv_heads, p.kv_capacity, p.nwg, p.scale, p.softcap,
               kv_span(p.kv_seq_len, p.kv_capacity, false, p.mask_type == 2u ? p.sliding_window : 0u)};
}
__device__ __forceinline__ Job job_of(const FlashAttnVecVarlenParams& p, const u32* seq_lens) {
    const u32 b = blockIdx.z / p.nwg;
    return Job{p.n_heads, p.n_kv_heads, p.kv_capacity, p.nwg, p.scale, p.softcap,
               kv_span(seq_lens[b], p.kv_capacity, p.ring != 0u, p.mask_type == 2u ? p.sliding_window : 0u)};
}

// This split's run of tiles [beg, end) among the sequence's ceil(keys / tile).
__device__ __forceinline__ void split_tiles(u32 keys, u32 tile, u32 nwg, u32 iwg, u32& beg, u32& end) {
    const u32 ntiles = (keys + tile - 1) / tile;
    const u32 per = (ntiles + nwg - 1) / nwg;
    beg = min(ntiles, iwg * per);
    end = min(ntiles, beg + per);
}

// Writes a merged row: normalized (nwg == 1) or the split's partial and (S, M).
__device__ __forceinline__ void store_row(float* dst, u64 row, u32 f, float4 acc, float st, float m2, u32 nwg, u32 iwg,
                                          u64 nrows, u32 D) {
    const u32 D4 = D / 4;
    if (nwg == 1u) {
        const float inv = (st == 0.0f) ? 0.0f : 1.0f / st;
        reinterpret_cast<float4*>(dst)[row * D4 + f] = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    } else {
        reinterpret_cast<float4*>(dst)[(row * D4 + f) * nwg + iwg] = acc;
        if (f == 0u) {
            float* sm = dst + nrows * D * nwg + row * 2 * nwg + 2 * iwg;
            sm[0] = st;
            sm[1] = m2 * LN2;
        }
    }
}

// The block's merge of its NW warps: warp w left, for each of its H heads h,
// its running maximum and sum at ms[2 (w H + h)] and its D outputs at
// ov[(w H + h) D]; for each of the block's hcount heads (rows row0 + h), 4
// outputs a thread, rescaled to the largest maximum and summed (store_row).
template <int H, int D>
__device__ __forceinline__ void merge_warps(const float* ms, const float* ov, u32 hcount, float* dst, u64 row0, u32 nwg, u32 iwg,
                                            u64 nrows) {
    for (u32 x = threadIdx.x; x < hcount * (D / 4); x += NW * 32) {
        const u32 h = x / (D / 4), f = x % (D / 4);
        float m = -FLT_MAX_F;
#pragma unroll
        for (int w = 0; w < NW; ++w) m = fmaxf(m, ms[(w * H + h) * 2]);
        float st = 0.0f;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int w = 0; w < NW; ++w) {
            const float gw = exp2f(ms[(w * H + h) * 2] - m);
            st += ms[(w * H + h) * 2 + 1] * gw;
            const float4 y = *reinterpret_cast<const float4*>(ov + (w * H + h) * D + f * 4);
            acc.x += y.x * gw; acc.y += y.y * gw; acc.z += y.z * gw; acc.w += y.w * gw;
        }
        store_row(dst, row0 + h, f, acc, st, m, nwg, iwg, nrows, D);
    }
}

// ---------------------------------------------------------------- f16 / bf16 K/V: tensor cores

constexpr int MMA_HEADS = 8;
constexpr int RING_BYTES = 192 * 1024;   // the 4 warps' rings

// x0, x1 as the 16-bit T (hi) and what that rounding left (lo), each packed low element first.
template <typename T>
__device__ __forceinline__ void split2(float x0, float x1, u32& hi, u32& lo) {
    const T h0 = from_f<T>(x0), h1 = from_f<T>(x1);
    hi = pack2<T>(to_f(h0), to_f(h1));
    lo = pack2<T>(x0 - to_f(h0), x1 - to_f(h1));
}

template <int D, typename KV>
__device__ __forceinline__ void attn_mma(const Job& jb, const float* __restrict__ q, const KV* __restrict__ k,
                                         const KV* __restrict__ v, float* dst) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    constexpr int CPR = D / 8;                 // 16-byte chunks per row
    constexpr int TILE = 16 * D * 2;           // bytes of 16 rows (one K or V slot)
    constexpr int NS = RING_BYTES / (NW * TILE);   // slots per warp: 12, 6, 3
    constexpr int KS = D / 16;                 // k-steps of S, m-tiles of O^T
    constexpr bool QREG = D <= 256;            // the query's fragments in registers (else shared memory)
    static_assert(NS >= 2, "ring");

    const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const u32 g = lane >> 2, t = lane & 3u;
    const u32 nwg = jb.nwg, kvh = blockIdx.y;
    const u32 b = blockIdx.z / nwg, iwg = blockIdx.z % nwg;
    const u32 group = jb.n_heads / jb.n_kv_heads;
    const u32 h0 = blockIdx.x * MMA_HEADS;
    if (h0 >= group) return;
    const u32 hcount = min(u32(MMA_HEADS), group - h0);
    const u64 row0 = u64(b) * jb.n_heads + kvh * group + h0;
    const u64 kv0 = (u64(b) * jb.n_kv_heads + kvh) * jb.cap * D;
    const KV* kb = k + kv0;
    const KV* vb = v + kv0;
    const KvSpan sp = jb.sp;
    const u32 nkeys = sp.keys();

    // The query, split: rows 0-7 hi, rows 8-15 lo (heads past hcount are 0).
    u32 qa[QREG ? KS : 1][4];
    unsigned char* qs = smem_raw + RING_BYTES;   // D 512: [16 rows][CPR chunks], swizzled
    if constexpr (QREG) {
        const bool live = g < hcount;
        const float* qr = q + (row0 + (live ? g : 0u)) * D;
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            const u32 d0 = 16 * ks + 2 * t;
            const float2 x = live ? *reinterpret_cast<const float2*>(qr + d0) : make_float2(0.f, 0.f);
            const float2 y = live ? *reinterpret_cast<const float2*>(qr + d0 + 8) : make_float2(0.f, 0.f);
            split2<KV>(x.x, x.y, qa[ks][0], qa[ks][1]);
            split2<KV>(y.x, y.y, qa[ks][2], qa[ks][3]);
        }
    } else {
        for (u32 i = threadIdx.x; i < MMA_HEADS * D / 2; i += NW * 32) {
            const u32 h = i / (D / 2), d = 2 * (i % (D / 2));
            const float2 x = h < hcount ? *reinterpret_cast<const float2*>(q + (row0 + h) * D + d) : make_float2(0.f, 0.f);
            u32 hi, lo;
            split2<KV>(x.x, x.y, hi, lo);
            const u32 c = d / 8, byte = (d % 8) * 2;
            *reinterpret_cast<u32*>(qs + (h * CPR + (c ^ (h & 7u))) * 16 + byte) = hi;
            *reinterpret_cast<u32*>(qs + ((h + 8) * CPR + (c ^ (h & 7u))) * 16 + byte) = lo;
        }
        __syncthreads();
    }

    u32 s_beg, s_end;
    split_tiles(nkeys, 16, nwg, iwg, s_beg, s_end);
    const u32 my_n = s_beg + warp < s_end ? (s_end - s_beg - warp + NW - 1) / NW : 0u;

    unsigned char* ring = smem_raw + warp * NS * TILE;
    // Slot j of the warp's sequence: K of its tile j / 2 when j is even, V when odd.
    auto issue = [&](u32 j) {
        const u32 i = j >> 1;
        if (i < my_n) {
            const u32 off = (s_beg + warp + i * NW) * 16;   // the tile's first key, from lo
            const u32 nvis = min(16u, nkeys - off);
            const u32 s0 = sp.first(sp.lo + off);
            const KV* src = (j & 1u) ? vb : kb;
            unsigned char* to = ring + (j % NS) * TILE;
#pragma unroll
            for (int x = 0; x < CPR / 2; ++x) {
                const u32 c = lane + 32 * x, r = c / CPR, col = c % CPR;
                const bool live = r < nvis;
                cp_async16(to + (r * CPR + (col ^ (r & 7u))) * 16, live ? src + u64(sp.slot(s0, r)) * D + col * 8 : src, live);
            }
        }
        cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < NS - 1; ++s) issue(u32(s));

    // ldmatrix rows: lanes 8m..8m+7 address matrix m, key (lane & 7) + 8 (m >> 1), chunk + (m & 1).
    const u32 lm = lane >> 3, lkey = (lane & 7u) + 8u * (lm >> 1), lhalf = lm & 1u;
    const bool capped = jb.softcap > 0.0f;
    const float sc = capped ? jb.scale : jb.scale * LOG2E;

    float o[KS][4];
#pragma unroll
    for (int m = 0; m < KS; ++m) o[m][0] = o[m][1] = o[m][2] = o[m][3] = 0.0f;
    float M = -FLT_MAX_F / 2;   // running max of head g (log2 domain)
    float L = 0.0f;             // this lane's share of the running sum of exp2(s - M)

    for (u32 i = 0; i < my_n; ++i) {
        const u32 jk = 2 * i;
        cp_async_wait<NS - 2>();
        __syncwarp();
        issue(jk + NS - 1);
        const unsigned char* kt = ring + (jk % NS) * TILE;

        // Two accumulator pairs (even and odd k-steps) halve the mma dependency chains.
        float s0[4] = {0.f, 0.f, 0.f, 0.f}, s1[4] = {0.f, 0.f, 0.f, 0.f};
        float s2[4] = {0.f, 0.f, 0.f, 0.f}, s3[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            u32 a[4], bk[4];
            if constexpr (QREG) {
                a[0] = qa[ks][0]; a[1] = qa[ks][1]; a[2] = qa[ks][2]; a[3] = qa[ks][3];
            } else {
                const u32 r = lane & 15u, c = 2 * ks + (lane >> 4);
                ldsm_x4(qs + (r * CPR + (c ^ (r & 7u))) * 16, a[0], a[1], a[2], a[3]);
            }
            ldsm_x4(kt + (lkey * CPR + ((2 * ks + lhalf) ^ (lkey & 7u))) * 16, bk[0], bk[1], bk[2], bk[3]);
            if (ks & 1) {
                mma16<KV>(s2, a, bk[0], bk[1]);
                mma16<KV>(s3, a, bk[2], bk[3]);
            } else {
                mma16<KV>(s0, a, bk[0], bk[1]);
                mma16<KV>(s1, a, bk[2], bk[3]);
            }
        }
        // Head g's scores of keys 2t, 2t + 1, 8 + 2t, 9 + 2t: rows g (hi) plus g + 8 (lo).
        float s[4] = {s0[0] + s0[2] + s2[0] + s2[2], s0[1] + s0[3] + s2[1] + s2[3],
                      s1[0] + s1[2] + s3[0] + s3[2], s1[1] + s1[3] + s3[1] + s3[3]};
        const u32 nvis = min(16u, nkeys - (s_beg + warp + i * NW) * 16);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const u32 key = 2 * t + (e & 1) + 8 * (e >> 1);
            float x = s[e] * sc;
            if (capped) x = jb.softcap * tanhf(x / jb.softcap) * LOG2E;
            s[e] = key < nvis ? x : __uint_as_float(0xff800000u);   // -inf: exp2 gives 0
        }
        float mt = fmaxf(fmaxf(s[0], s[1]), fmaxf(s[2], s[3]));
        mt = fmaxf(mt, __shfl_xor_sync(FULL, mt, 1));
        mt = fmaxf(mt, __shfl_xor_sync(FULL, mt, 2));
        const float m_new = fmaxf(M, mt);   // finite: a tile's first key is visible
        const float alpha = exp2f(M - m_new);
        float pe[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) pe[e] = exp2f(s[e] - m_new);
        L = L * alpha + ((pe[0] + pe[1]) + (pe[2] + pe[3]));
        M = m_new;
        u32 ph0, pl0, ph1, pl1;
        split2<KV>(pe[0], pe[1], ph0, pl0);
        split2<KV>(pe[2], pe[3], ph1, pl1);
        // O^T's columns are heads 2t and 2t + 1, whose alphas lanes 8t and 8t + 4 hold.
        const float a_even = __shfl_sync(FULL, alpha, 8 * t), a_odd = __shfl_sync(FULL, alpha, 8 * t + 4);
#pragma unroll
        for (int m = 0; m < KS; ++m) {
            o[m][0] *= a_even; o[m][1] *= a_odd; o[m][2] *= a_even; o[m][3] *= a_odd;
        }

        const u32 jv = jk + 1;
        cp_async_wait<NS - 2>();
        __syncwarp();
        issue(jv + NS - 1);
        const unsigned char* vt = ring + (jv % NS) * TILE;
#pragma unroll
        for (int m = 0; m < KS; ++m) {
            u32 a[4];
            ldsm_x4_trans(vt + (lkey * CPR + ((2 * m + lhalf) ^ (lkey & 7u))) * 16, a[0], a[1], a[2], a[3]);
            mma16<KV>(o[m], a, ph0, ph1);
            mma16<KV>(o[m], a, pl0, pl1);
        }
    }
    cp_async_wait<0>();
    __syncthreads();   // every warp is done with its ring: it becomes the merge area

    L += __shfl_xor_sync(FULL, L, 1);
    L += __shfl_xor_sync(FULL, L, 2);
    float* ms = reinterpret_cast<float*>(smem_raw);   // [NW][8] (M, S)
    float* ov = ms + NW * MMA_HEADS * 2;               // [NW][8][D]
    if (t == 0u) {
        ms[(warp * MMA_HEADS + g) * 2] = M;
        ms[(warp * MMA_HEADS + g) * 2 + 1] = L;
    }
    float* ow = ov + warp * MMA_HEADS * D;
#pragma unroll
    for (int m = 0; m < KS; ++m) {
        const u32 d = 16 * m + g;
        ow[(2 * t) * D + d] = o[m][0];
        ow[(2 * t + 1) * D + d] = o[m][1];
        ow[(2 * t) * D + d + 8] = o[m][2];
        ow[(2 * t + 1) * D + d + 8] = o[m][3];
    }
    __syncthreads();

    const u64 nrows = u64(gridDim.z / nwg) * jb.n_heads;
    merge_warps<MMA_HEADS, D>(ms, ov, hcount, dst, row0, nwg, iwg, nrows);
}

// ---------------------------------------------------------------- f32 K/V: FFMA

constexpr int RING_LANE_BYTES = 768;  // cp.async ring per lane: NW * 32 * 768 = 98304 bytes per block

// One step of the transpose-reduce: lanes with bit OFF set keep the upper
// half of part[0 .. 2*OFF), the others the lower half; each adds its partner's
// copy of the half it keeps.
template <int OFF>
__device__ __forceinline__ void tr_step(float (&part)[32], u32 lane) {
    const bool upper = (lane & OFF) != 0;
#pragma unroll
    for (int j = 0; j < OFF; ++j) {
        const float send = upper ? part[j] : part[j + OFF];
        const float keep = upper ? part[j + OFF] : part[j];
        part[j] = keep + __shfl_xor_sync(FULL, send, OFF);
    }
}

// Transpose-reduce of part[0 .. 2*OFF) down to part[0]: afterwards lane l
// holds index l & (2*OFF - 1), summed over the lanes that agree with l in
// bits below 2*OFF.
template <int OFF>
__device__ __forceinline__ void tr_all(float (&part)[32], u32 lane) {
    tr_step<OFF>(part, lane);
    if constexpr (OFF > 1) tr_all<OFF / 2>(part, lane);
}

// One block of the f32 path (see the top): HG query heads at most.
template <int D, int HG>
__device__ __forceinline__ void attn_group(const Job& jb, const float* __restrict__ q, const float* __restrict__ k,
                                           const float* __restrict__ v, float* dst, uint4* smem) {
    constexpr int W = 32;
    constexpr int VEC = 4;                      // floats per 16-byte slice
    constexpr int CH = D / (W * VEC);           // slices per lane per row
    constexpr int TK = (32 / HG) < (8 / CH) ? (32 / HG) : (8 / CH);   // positions per tile
    constexpr int P = HG * TK;                  // partial dots per lane per tile
    constexpr int TB = TK * CH * 2;             // 16-byte ring slots per lane per tile (K rows, then V rows)
    constexpr int STAGES = RING_LANE_BYTES / (TB * 16);
    static_assert(CH >= 1 && P <= 32 && (32 % P) == 0 && STAGES >= 2, "shape");

    const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const u32 nwg = jb.nwg;
    const u32 kvh = blockIdx.y;
    const u32 b = blockIdx.z / nwg, iwg = blockIdx.z % nwg;
    const u32 group = jb.n_heads / jb.n_kv_heads;
    const u32 hpb = (group + gridDim.x - 1) / gridDim.x;
    const u32 h0 = blockIdx.x * hpb;
    if (h0 >= group) return;
    const u32 hcount = min(hpb, group - h0);
    const u32 head0 = kvh * group + h0;
    const u64 row0 = u64(b) * jb.n_heads + head0;
    const u64 kv0 = (u64(b) * jb.n_kv_heads + kvh) * jb.cap * D;
    const float* kb = k + kv0;
    const float* vb = v + kv0;
    const KvSpan sp = jb.sp;
    const u32 nkeys = sp.keys();

    float qr[HG][CH][VEC], o[HG][CH][VEC];
#pragma unroll
    for (int h = 0; h < HG; ++h) {
#pragma unroll
        for (int c = 0; c < CH; ++c) {
            const float4 t = u32(h) < hcount ? __ldg(reinterpret_cast<const float4*>(q + (row0 + h) * D + (c * W + lane) * VEC))
                                             : make_float4(0.f, 0.f, 0.f, 0.f);
            qr[h][c][0] = t.x; qr[h][c][1] = t.y; qr[h][c][2] = t.z; qr[h][c][3] = t.w;
#pragma unroll
            for (int j = 0; j < VEC; ++j) o[h][c][j] = 0.0f;
        }
    }

    const bool capped = jb.softcap > 0.0f;
    const float scale2 = capped ? jb.scale : jb.scale * LOG2E;

    u32 s_beg, s_end;
    split_tiles(nkeys, TK, nwg, iwg, s_beg, s_end);
    const u32 my_n = s_beg + warp < s_end ? (s_end - s_beg - warp + NW - 1) / NW : 0u;

    uint4* ring = smem + u32(warp) * STAGES * TB * 32 + lane;
    auto issue = [&](u32 i) {
        if (i < my_n) {
            uint4* spt = ring + (i % STAGES) * TB * 32;
            const u32 off = (s_beg + warp + i * NW) * TK;
            const u32 s0 = sp.first(sp.lo + off);
#pragma unroll
            for (int j = 0; j < TK; ++j) {
                const bool vis = off + j < nkeys;
                const u64 roff = u64(vis ? sp.slot(s0, j) : 0u) * D;
#pragma unroll
                for (int c = 0; c < CH; ++c) {
                    const u64 at = roff + (c * W + lane) * VEC;
                    cp_async16(spt + (j * CH + c) * 32, kb + at, vis);
                    cp_async16(spt + (TK * CH + j * CH + c) * 32, vb + at, vis);
                }
            }
        }
        cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) issue(u32(s));

    const u32 idx = lane % P;       // this lane's (head, position) after the transpose-reduce
    const u32 jj = idx % TK;
    float M = -FLT_MAX_F / 2;       // running max (log2 domain) of this lane's head
    float S = 0.0f;                 // running sum of exp2(s - M)
    for (u32 i = 0; i < my_n; ++i) {
        cp_async_wait<STAGES - 2>();   // this lane's copies of tile i have landed
        issue(i + STAGES - 1);         // into the slot of tile i - 1, already consumed
        const uint4* tp = ring + (i % STAGES) * TB * 32;
        const u32 off = (s_beg + warp + i * NW) * TK;

        float part[32];
#pragma unroll
        for (int x = 0; x < P; ++x) part[x] = 0.0f;
#pragma unroll
        for (int j = 0; j < TK; ++j) {
#pragma unroll
            for (int c = 0; c < CH; ++c) {
                const uint4 kr = tp[(j * CH + c) * 32];
                const float kf[4] = {__uint_as_float(kr.x), __uint_as_float(kr.y), __uint_as_float(kr.z), __uint_as_float(kr.w)};
#pragma unroll
                for (int h = 0; h < HG; ++h) {
#pragma unroll
                    for (int e = 0; e < VEC; ++e) part[h * TK + j] = fmaf(kf[e], qr[h][c][e], part[h * TK + j]);
                }
            }
        }
        if constexpr (P > 1) tr_all<P / 2>(part, lane);
        float sc = part[0];
#pragma unroll
        for (int x = P; x < 32; x <<= 1) sc += __shfl_xor_sync(FULL, sc, x);
        const bool vis = off + jj < nkeys;
        float s2 = sc * scale2;
        if (capped) s2 = jb.softcap * tanhf(s2 / jb.softcap) * LOG2E;
        s2 = vis ? s2 : -FLT_MAX_F;
        float mt = s2;
#pragma unroll
        for (int x = 1; x < TK; x <<= 1) mt = fmaxf(mt, __shfl_xor_sync(FULL, mt, x));
        const float m_new = fmaxf(M, mt);
        const float alpha = exp2f(M - m_new);
        const float e = vis ? exp2f(s2 - m_new) : 0.0f;
        float es = e;
#pragma unroll
        for (int x = 1; x < TK; x <<= 1) es += __shfl_xor_sync(FULL, es, x);
        S = S * alpha + es;
        M = m_new;
#pragma unroll
        for (int h = 0; h < HG; ++h) {
            const float a = __shfl_sync(FULL, alpha, h * TK);
            if (a != 1.0f) {   // the same for every lane
#pragma unroll
                for (int c = 0; c < CH; ++c) {
#pragma unroll
                    for (int x = 0; x < VEC; ++x) o[h][c][x] *= a;
                }
            }
        }
#pragma unroll
        for (int j = 0; j < TK; ++j) {
            float w[HG];
#pragma unroll
            for (int h = 0; h < HG; ++h) w[h] = __shfl_sync(FULL, e, h * TK + j);
#pragma unroll
            for (int c = 0; c < CH; ++c) {
                const uint4 vr = tp[(TK * CH + j * CH + c) * 32];
                const float vf[4] = {__uint_as_float(vr.x), __uint_as_float(vr.y), __uint_as_float(vr.z), __uint_as_float(vr.w)};
#pragma unroll
                for (int h = 0; h < HG; ++h) {
#pragma unroll
                    for (int x = 0; x < VEC; ++x) o[h][c][x] = fmaf(w[h], vf[x], o[h][c][x]);
                }
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();   // every warp is done with its ring: the shared memory becomes the merge area

    float* ms = reinterpret_cast<float*>(smem);   // [NW][HG] (M, S)
    float* ov = ms + NW * HG * 2;                 // [NW][HG][D]
    if (lane < u32(P) && jj == 0) {
        const u32 h = idx / TK;
        ms[(warp * HG + h) * 2] = M;
        ms[(warp * HG + h) * 2 + 1] = S;
    }
#pragma unroll
    for (int h = 0; h < HG; ++h) {
#pragma unroll
        for (int c = 0; c < CH; ++c) {
            float* op = ov + (warp * HG + h) * D + (c * W + lane) * VEC;
            *reinterpret_cast<float4*>(op) = make_float4(o[h][c][0], o[h][c][1], o[h][c][2], o[h][c][3]);
        }
    }
    __syncthreads();

    const u64 nrows = u64(gridDim.z / nwg) * jb.n_heads;
    merge_warps<HG, D>(ms, ov, hcount, dst, row0, nwg, iwg, nrows);
}

template <int D>
__device__ __forceinline__ void attn_f32(const Job& jb, const float* q, const float* k, const float* v, float* dst) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    uint4* smem = reinterpret_cast<uint4*>(smem_raw);
    constexpr int CH = D * 4 / (32 * 16);
    constexpr int HMAX = 8 / CH;
    const u32 group = jb.n_heads / jb.n_kv_heads;
    const u32 hpb = (group + gridDim.x - 1) / gridDim.x;
    if (hpb <= 1u) attn_group<D, 1>(jb, q, k, v, dst, smem);
    else if (hpb <= 2u) attn_group<D, 2>(jb, q, k, v, dst, smem);
    else if constexpr (HMAX >= 4) {
        if (hpb <= 4u) attn_group<D, 4>(jb, q, k, v, dst, smem);
        else if constexpr (HMAX >= 8) {
            if (hpb <= 8u) attn_group<D, 8>(jb, q, k, v, dst, smem);
        }
    }
}

template <int D, typename KV>
__device__ __forceinline__ void attn(const Job& jb, const float* q, const KV* k, const KV* v, float* dst) {
    if constexpr (sizeof(KV) == 4) attn_f32<D>(jb, q, k, v, dst);
    else attn_mma<D, KV>(jb, q, k, v, dst);
}

template <int D>
__device__ __forceinline__ void attn_combine(const FlashAttnVecReduceParams* p, const float* tmp, float* dst,
                                             const u32* nwgp) {
    constexpr u32 D4 = D / 4;
    __shared__ float fac[32];        // workgroup w's factor exp(M_w - M) / S (nwg <= 32)
    __shared__ float4 red[1024];     // the groups' column sums (G * D4 <= blockDim.x <= 1024)
    const u32 nwg = *nwgp;
    const u32 row = blockIdx.x, tid = threadIdx.x, lane = tid & 31u;
    const float* sm = tmp + u64(p->nrows) * D * nwg + u64(row) * 2 * nwg;
    // Column i's partials are t4[i * nwg .. i * nwg + nwg - 1] (workgroup order).
    const float4* t4 = reinterpret_cast<const float4*>(tmp) + u64(row) * D4 * nwg;
    float4* o4 = reinterpret_cast<float4*>(dst) + u64(row) * D4;

    // Thread t: column i = t % D4 of group gi = t / D4 (G groups, the threads
    // past G * D4 idle), workgroups gi, gi + G, ...; its partials' loads are
    // issued first, four a round, and wait while the pairs fold.
    const u32 G = blockDim.x / D4;
    const u32 i = tid % D4, gi = tid / D4;
    const float4* c = t4 + u64(i) * nwg;
    float4 x[4];
#pragma unroll
    for (u32 k = 0; k < 4u; ++k) {
        const u32 w = gi + k * G;
        x[k] = (gi < G && w < nwg) ? c[w] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    // The row's pairs (sum, max), lane w holding workgroup w's: the max, the
    // sum of the sums rescaled to it, each workgroup's factor.
    const bool mine = lane < nwg;
    const float s_w = mine ? sm[2 * lane] : 0.0f;
    const float m_w = mine ? sm[2 * lane + 1] : -FLT_MAX_F;
    const float m = warp_max(m_w);
    const float f = mine ? expf(m_w - m) : 0.0f;
    const float s = warp_sum(s_w * f);
    if (tid < 32u) fac[lane] = s == 0.0f ? 0.0f : f / s;
    __syncthreads();

    if (G == 0u) {
        // Fewer threads than columns (nwg < D / 128): a thread a column at a
        // time, every workgroup.
        for (u32 j = tid; j < D4; j += blockDim.x) {
            float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
            for (u32 w = 0; w < nwg; ++w) {
                const float4 y = t4[u64(j) * nwg + w];
                const float g = fac[w];
                a = make_float4(fmaf(g, y.x, a.x), fmaf(g, y.y, a.y), fmaf(g, y.z, a.z), fmaf(g, y.w, a.w));
            }
            o4[j] = a;
        }
        return;
    }
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
    if (gi < G) {
#pragma unroll
        for (u32 k = 0; k < 4u; ++k) {
            const float g = gi + k * G < nwg ? fac[min(gi + k * G, 31u)] : 0.0f;
            a = make_float4(fmaf(g, x[k].x, a.x), fmaf(g, x[k].y, a.y), fmaf(g, x[k].z, a.z), fmaf(g, x[k].w, a.w));
        }
        // More than four workgroups a thread (G < nwg / 4: D 512 with few workgroups).
        for (u32 w = gi + 4u * G; w < nwg; w += G) {
            const float4 y = c[w];
            const float g = fac[w];
            a = make_float4(fmaf(g, y.x, a.x), fmaf(g, y.y, a.y), fmaf(g, y.z, a.z), fmaf(g, y.w, a.w));
        }
        red[tid] = a;
    }
    __syncthreads();
    if (tid < D4) {
        // The groups' sums of column tid, in group order.
        for (u32 g = 1; g < G; ++g) {
            const float4 y = red[g * D4 + tid];
            a = make_float4(a.x + y.x, a.y + y.y, a.z + y.z, a.w + y.w);
        }
        o4[tid] = a;
    }
}

}  // namespace

// Main kernels, mlx-native's bindings: buffer(0) FlashAttnVecParams, (1) q, (2) k, (3) v, (4) dst.
// Varlen: buffer(0) FlashAttnVecVarlenParams, (1) q, (2) k, (3) v, (4) dst, (5) seq_lens.
#define FAV_ENTRIES(D, KV, TAG, BOUNDS)                                                                                 \
    extern "C" __global__ void __launch_bounds__(128, BOUNDS) flash_attn_vec_##TAG##dk##D(                           \
        const FlashAttnVecParams* p, const float* q, const KV* k, const KV* v, float* dst) {                         \
        attn<D, KV>(job_of(*p), q, k, v, dst);                                                                        \
    }                                                                                                                 \
    extern "C" __global__ void __launch_bounds__(128, BOUNDS) flash_attn_vec_varlen_##TAG##dk##D(                    \
        const FlashAttnVecVarlenParams* p, const float* q, const KV* k, const KV* v, float* dst, const u32* seq_lens) { \
        attn<D, KV>(job_of(*p, seq_lens), q, k, v, dst);                                                              \
    }

// In the CUDA program's parts (flash_attn_vec.ts's FLASH_ATTN_VEC_CUDA_PARTS):
// one a K/V dtype and head dim (a model's cache has one dtype and its
// layers one or two head dims), the reductions in part 0.
#if MLXN_CUDA_PART_IS(1)
FAV_ENTRIES(128, float, , 2)
#endif
#if MLXN_CUDA_PART_IS(2)
FAV_ENTRIES(256, float, , 2)
#endif
#if MLXN_CUDA_PART_IS(3)
FAV_ENTRIES(512, float, , 2)
#endif
#if MLXN_CUDA_PART_IS(4)
FAV_ENTRIES(128, __half, f16kv_, 1)
#endif
#if MLXN_CUDA_PART_IS(5)
FAV_ENTRIES(256, __half, f16kv_, 1)
#endif
#if MLXN_CUDA_PART_IS(6)
FAV_ENTRIES(512, __half, f16kv_, 1)
#endif
#if MLXN_CUDA_PART_IS(7)
FAV_ENTRIES(128, __nv_bfloat16, bf16kv_, 1)
#endif
#if MLXN_CUDA_PART_IS(8)
FAV_ENTRIES(256, __nv_bfloat16, bf16kv_, 1)
#endif
#if MLXN_CUDA_PART_IS(9)
FAV_ENTRIES(512, __nv_bfloat16, bf16kv_, 1)
#endif

#if MLXN_CUDA_PART_IS(0)

// buffer(0) FlashAttnVecReduceParams, (1) tmp, (2) dst [rows, D], (3) nwg u32.
extern "C" __global__ void flash_attn_vec_reduce_dk128(const FlashAttnVecReduceParams* p, const float* tmp,
                                                       float* dst, const u32* nwg) {
    attn_combine<128>(p, tmp, dst, nwg);
}
extern "C" __global__ void flash_attn_vec_reduce_dk256(const FlashAttnVecReduceParams* p, const float* tmp,
                                                       float* dst, const u32* nwg) {
    attn_combine<256>(p, tmp, dst, nwg);
}
extern "C" __global__ void flash_attn_vec_reduce_dk512(const FlashAttnVecReduceParams* p, const float* tmp,
                                                       float* dst, const u32* nwg) {
    attn_combine<512>(p, tmp, dst, nwg);
}
#endif
