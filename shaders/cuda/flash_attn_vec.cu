// flash_attn_vec (CUDA): split-KV decode attention, one query token per
// (batch, head); entry names, bindings, grid and the partials layout as
// shaders/flash_attn_vec.metal.
//
// Per row r = (b, h), kv head kh = h / (n_heads / n_kv_heads):
//   s_j = scale * dot(Q[b, h, :], K[b, kh, j, :]); s_j = softcap * tanh(s_j / softcap) when softcap > 0
//   visible j < kv_seq_len; with mask_type 2 and sliding_window > 0 also j >= kv_seq_len - sliding_window
//   O[b, h, :] = sum_j softmax(s)_j * V[b, kh, j, :]
// Q [B, n_heads, D] f32; K, V [B, n_kv_heads, kv_capacity, D] f32 or f16.
// Main kernel dst: NWG == 1 the normalized output [rows, D]; NWG > 1 the
// unnormalized partials [rows, D/4, NWG] float4, then [rows, NWG, 2] floats
// (S, M): the softmax denominator relative to the running max M.
//
// Main kernel: grid (1, n_heads, B * NWG), one warp (32 threads); workgroup
// iwg takes KV blocks of 32 positions iwg, iwg + NWG, ... Each lane owns
// D / (32 * VEC) 16-byte slices of a row (VEC = 8 f16 or 4 f32 elements), so
// one warp-wide load covers 512 contiguous bytes of a K or V row. Per block,
// K rows are loaded in groups of G positions (16 loads of 16 bytes per lane
// in flight), each lane's partial dot products for the 32 positions are
// reduced across lanes by a shuffle transpose-reduce (31 shuffles; lane c
// ends with position c's score), the online softmax runs one position per
// lane, and V rows are accumulated in the same groups with each weight
// broadcast by a shuffle. Only visible rows below kv_seq_len are read.
// The threadgroup memory the op binds (4352 bytes) is not used.
// Reduce kernel: grid (rows, 1, 1), 32 * NWG threads; lane w of each warp
// stands for workgroup w; warp s combines float4 columns s, s + NWG, ...

namespace {

constexpr float FLT_MAX_F = 3.402823466e+38f;
constexpr u32 FULL = 0xffffffffu;

// 16 bytes of a K or V row, kept raw until used (4 registers whatever the dtype).
template <typename KV>
__device__ __forceinline__ uint4 load16(const KV* p) {
    return __ldg(reinterpret_cast<const uint4*>(p));
}
__device__ __forceinline__ void unpack(uint4 t, float (&v)[4], const float*) {
    v[0] = __uint_as_float(t.x); v[1] = __uint_as_float(t.y);
    v[2] = __uint_as_float(t.z); v[3] = __uint_as_float(t.w);
}
__device__ __forceinline__ void unpack(uint4 t, float (&v)[8], const __half*) { unpack_f16x8(t, v); }

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

constexpr int NW = 4;                 // warps per block
constexpr int RING_LANE_BYTES = 768;  // cp.async ring per lane: NW * 32 * 768 = 98304 bytes per block
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

// Transpose-reduce of part[0 .. 2*OFF) down to part[0]: afterwards lane l
// holds index l & (2*OFF - 1), summed over the lanes that agree with l in
// bits below 2*OFF.
template <int OFF>
__device__ __forceinline__ void tr_all(float (&part)[32], u32 lane) {
    tr_step<OFF>(part, lane);
    if constexpr (OFF > 1) tr_all<OFF / 2>(part, lane);
}

// One block: KV head blockIdx.y of batch b, HG query heads of its GQA group
// (the hpb heads from blockIdx.x * hpb), KV split iwg. The split's tiles of TK
// positions go to the NW warps in turn; each warp streams its K and V rows
// through a per-lane cp.async ring (a lane reads back only the 16-byte slices
// it copied, so no warp barrier is needed), computes the HG * TK partial dots
// from each K row once, transpose-reduces them (lane l: head (l % P) / TK,
// position l % TK), runs the online softmax in the log2 domain for all HG
// heads at once, and accumulates V with each weight broadcast by a shuffle.
// The warps' (M, S, O) merge through shared memory at the end.
template <int D, typename KV, int HG>
__device__ __forceinline__ void attn_group(const FlashAttnVecParams* __restrict__ pp, const float* __restrict__ q,
                                           const KV* __restrict__ k, const KV* __restrict__ v, float* dst,
                                           uint4* smem) {
    constexpr int W = 32;
    constexpr int VEC = 16 / int(sizeof(KV));   // elements per 16-byte slice
    constexpr int CH = D / (W * VEC);           // slices per lane per row
    constexpr int TK = (32 / HG) < (8 / CH) ? (32 / HG) : (8 / CH);   // positions per tile
    constexpr int P = HG * TK;                  // partial dots per lane per tile
    constexpr int TB = TK * CH * 2;             // 16-byte ring slots per lane per tile (K rows, then V rows)
    constexpr int STAGES = RING_LANE_BYTES / (TB * 16);
    constexpr int D4 = D / 4;
    static_assert(CH >= 1 && P <= 32 && (32 % P) == 0 && STAGES >= 2, "shape");

    const FlashAttnVecParams p = *pp;
    const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const u32 nwg = p.nwg;
    const u32 kvh = blockIdx.y;
    const u32 b = blockIdx.z / nwg, iwg = blockIdx.z % nwg;
    const u32 batch = gridDim.z / nwg;
    const u32 group = p.n_heads / p.n_kv_heads;
    const u32 hpb = (group + gridDim.x - 1) / gridDim.x;
    const u32 h0 = blockIdx.x * hpb;
    if (h0 >= group) return;
    const u32 hcount = min(hpb, group - h0);
    const u32 head0 = kvh * group + h0;
    const u64 row0 = u64(b) * p.n_heads + head0;
    const u64 kv0 = (u64(b) * p.n_kv_heads + kvh) * p.kv_capacity * D;
    const KV* kb = k + kv0;
    const KV* vb = v + kv0;

    float qr[HG][CH][VEC], o[HG][CH][VEC];
#pragma unroll
    for (int h = 0; h < HG; ++h) {
#pragma unroll
        for (int c = 0; c < CH; ++c) {
            const float* qp = q + (row0 + h) * D + (c * W + lane) * VEC;
#pragma unroll
            for (int j = 0; j < VEC; j += 4) {
                const float4 t = u32(h) < hcount ? __ldg(reinterpret_cast<const float4*>(qp + j))
                                                 : make_float4(0.f, 0.f, 0.f, 0.f);
                qr[h][c][j] = t.x; qr[h][c][j + 1] = t.y; qr[h][c][j + 2] = t.z; qr[h][c][j + 3] = t.w;
            }
#pragma unroll
            for (int j = 0; j < VEC; ++j) o[h][c][j] = 0.0f;
        }
    }

    const u32 n = p.kv_seq_len;
    u32 lo = 0;
    if (p.mask_type == 2u && p.sliding_window > 0u && n > p.sliding_window) lo = n - p.sliding_window;
    const bool capped = p.softcap > 0.0f;
    const float scale2 = capped ? p.scale : p.scale * LOG2E;

    // Tiles [t_beg, t_end) hold the visible positions; split iwg takes a contiguous share.
    const u32 t_beg = lo / TK, t_end = (n + TK - 1) / TK;
    const u32 ntiles = t_end - t_beg;
    const u32 per = (ntiles + nwg - 1) / nwg;
    const u32 s_beg = t_beg + min(ntiles, iwg * per);
    const u32 s_end = t_beg + min(ntiles, (iwg + 1) * per);
    const u32 my_n = s_beg + warp < s_end ? (s_end - s_beg - warp + NW - 1) / NW : 0u;

    uint4* ring = smem + u32(warp) * STAGES * TB * 32 + lane;
    auto issue = [&](u32 i) {
        if (i < my_n) {
            uint4* sp = ring + (i % STAGES) * TB * 32;
            const u32 t = s_beg + warp + i * NW;
#pragma unroll
            for (int j = 0; j < TK; ++j) {
                const u32 key = t * TK + j;
                const bool vis = key >= lo && key < n;
                const u64 roff = u64(vis ? key : lo) * D;
#pragma unroll
                for (int c = 0; c < CH; ++c) {
                    const u64 off = roff + (c * W + lane) * VEC;
                    cp_async16(sp + (j * CH + c) * 32, kb + off, vis);
                    cp_async16(sp + (TK * CH + j * CH + c) * 32, vb + off, vis);
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
        const u32 t = s_beg + warp + i * NW;

        float part[32];
#pragma unroll
        for (int x = 0; x < P; ++x) part[x] = 0.0f;
#pragma unroll
        for (int j = 0; j < TK; ++j) {
#pragma unroll
            for (int c = 0; c < CH; ++c) {
                float kf[VEC];
                unpack(tp[(j * CH + c) * 32], kf, k);
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
        for (int off = P; off < 32; off <<= 1) sc += __shfl_xor_sync(FULL, sc, off);
        const u32 key = t * TK + jj;
        const bool vis = key >= lo && key < n;
        float s2 = sc * scale2;
        if (capped) s2 = p.softcap * tanhf(s2 / p.softcap) * LOG2E;
        s2 = vis ? s2 : -FLT_MAX_F;
        float mt = s2;
#pragma unroll
        for (int off = 1; off < TK; off <<= 1) mt = fmaxf(mt, __shfl_xor_sync(FULL, mt, off));
        const float m_new = fmaxf(M, mt);
        const float alpha = exp2f(M - m_new);
        const float e = vis ? exp2f(s2 - m_new) : 0.0f;
        float es = e;
#pragma unroll
        for (int off = 1; off < TK; off <<= 1) es += __shfl_xor_sync(FULL, es, off);
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
                float vf[VEC];
                unpack(tp[(TK * CH + j * CH + c) * 32], vf, v);
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
#pragma unroll
            for (int x = 0; x < VEC; x += 4)
                *reinterpret_cast<float4*>(op + x) = make_float4(o[h][c][x], o[h][c][x + 1], o[h][c][x + 2], o[h][c][x + 3]);
        }
    }
    __syncthreads();

    const u64 nrows = u64(batch) * p.n_heads;
    for (u32 x = threadIdx.x; x < hcount * D4; x += NW * 32) {
        const u32 h = x / D4, f = x % D4;
        float m = -FLT_MAX_F;
#pragma unroll
        for (int w = 0; w < NW; ++w) m = fmaxf(m, ms[(w * HG + h) * 2]);
        float st = 0.0f;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int w = 0; w < NW; ++w) {
            const float g = exp2f(ms[(w * HG + h) * 2] - m);
            st += ms[(w * HG + h) * 2 + 1] * g;
            const float4 y = *reinterpret_cast<const float4*>(ov + (w * HG + h) * D + f * 4);
            acc.x += y.x * g; acc.y += y.y * g; acc.z += y.z * g; acc.w += y.w * g;
        }
        const u64 row = row0 + h;
        if (nwg == 1) {
            const float inv = (st == 0.0f) ? 0.0f : 1.0f / st;
            reinterpret_cast<float4*>(dst)[row * D4 + f] = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
        } else {
            reinterpret_cast<float4*>(dst)[(row * D4 + f) * nwg + iwg] = acc;
            if (f == 0) {
                float* sm = dst + nrows * D * nwg + row * 2 * nwg + 2 * iwg;
                sm[0] = st;
                sm[1] = m * LN2;
            }
        }
    }
}

template <int D, typename KV>
__device__ __forceinline__ void attn_main(const FlashAttnVecParams* p, const float* q, const KV* k, const KV* v,
                                          float* dst) {
    extern __shared__ uint4 smem[];
    constexpr int CH = D * int(sizeof(KV)) / (32 * 16);
    constexpr int HMAX = 8 / CH;
    const u32 group = p->n_heads / p->n_kv_heads;
    const u32 hpb = (group + gridDim.x - 1) / gridDim.x;
    if (hpb <= 1u) attn_group<D, KV, 1>(p, q, k, v, dst, smem);
    else if (hpb <= 2u) attn_group<D, KV, 2>(p, q, k, v, dst, smem);
    else if constexpr (HMAX >= 4) {
        if (hpb <= 4u) attn_group<D, KV, 4>(p, q, k, v, dst, smem);
        else if constexpr (HMAX >= 8) {
            if (hpb <= 8u) attn_group<D, KV, 8>(p, q, k, v, dst, smem);
        }
    }
}

template <int D>
__device__ __forceinline__ void attn_combine(const FlashAttnVecReduceParams* p, const float* tmp, float* dst,
                                             const u32* nwgp) {
    constexpr u32 D4 = D / 4;
    const u32 nwg = *nwgp;
    const u32 lane = threadIdx.x & 31u, sg = threadIdx.x >> 5;
    const u32 row = blockIdx.x;
    const bool mine = lane < nwg;   // lane w stands for workgroup w

    const float* sm = tmp + u64(p->nrows) * D * nwg + u64(row) * 2 * nwg;
    const float s_w = mine ? sm[2 * lane] : 0.0f;
    const float m_w = mine ? sm[2 * lane + 1] : -FLT_MAX_F;
    const float m = warp_max(m_w);
    const float f = mine ? expf(m_w - m) : 0.0f;
    const float s = warp_sum(s_w * f);
    const float inv = (s == 0.0f) ? 0.0f : 1.0f / s;

    const float4* t4 = reinterpret_cast<const float4*>(tmp) + u64(row) * D4 * nwg;
    float4* o4 = reinterpret_cast<float4*>(dst) + u64(row) * D4;
    for (u32 i = sg; i < D4; i += nwg) {
        float4 x = mine ? t4[u64(i) * nwg + lane] : make_float4(0.f, 0.f, 0.f, 0.f);
        x.x = warp_sum(x.x * f);
        x.y = warp_sum(x.y * f);
        x.z = warp_sum(x.z * f);
        x.w = warp_sum(x.w * f);
        if (lane == 0) o4[i] = make_float4(x.x * inv, x.y * inv, x.z * inv, x.w * inv);
    }
}

}  // namespace

// buffer(0) params, (1) q, (2) k, (3) v, (4) dst; threadgroup(0) 4352 bytes (unused).
extern "C" __global__ void __launch_bounds__(128, 2) flash_attn_vec_dk256(const FlashAttnVecParams* p, const float* q,
                                                                      const float* k, const float* v, float* dst) {
    attn_main<256, float>(p, q, k, v, dst);
}
extern "C" __global__ void __launch_bounds__(128, 2) flash_attn_vec_dk512(const FlashAttnVecParams* p, const float* q,
                                                                      const float* k, const float* v, float* dst) {
    attn_main<512, float>(p, q, k, v, dst);
}
extern "C" __global__ void __launch_bounds__(128, 2) flash_attn_vec_f16kv_dk256(const FlashAttnVecParams* p,
                                                                            const float* q, const __half* k,
                                                                            const __half* v, float* dst) {
    attn_main<256, __half>(p, q, k, v, dst);
}
extern "C" __global__ void __launch_bounds__(128, 2) flash_attn_vec_f16kv_dk512(const FlashAttnVecParams* p,
                                                                            const float* q, const __half* k,
                                                                            const __half* v, float* dst) {
    attn_main<512, __half>(p, q, k, v, dst);
}
// buffer(0) FlashAttnVecReduceParams, (1) tmp, (2) dst [rows, D], (3) nwg u32.
extern "C" __global__ void flash_attn_vec_reduce_dk256(const FlashAttnVecReduceParams* p, const float* tmp,
                                                       float* dst, const u32* nwg) {
    attn_combine<256>(p, tmp, dst, nwg);
}
extern "C" __global__ void flash_attn_vec_reduce_dk512(const FlashAttnVecReduceParams* p, const float* tmp,
                                                       float* dst, const u32* nwg) {
    attn_combine<512>(p, tmp, dst, nwg);
}
