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

#include <cuda_fp16.h>

typedef unsigned int u32;
typedef unsigned long long u64;

struct FlashAttnVecParams {
    u32   n_heads;
    u32   n_kv_heads;
    u32   head_dim;
    u32   kv_seq_len;
    u32   kv_capacity;
    float scale;
    u32   mask_type;       // 0 none, 1 causal, 2 sliding window
    u32   sliding_window;  // visible keys when mask_type == 2; 0 leaves all visible
    float softcap;         // 0 disables
    u32   nwg;             // workgroups per row, 1..32
};

struct FlashAttnVecReduceParams {
    u32 nrows;             // B * n_heads
};

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
__device__ __forceinline__ void unpack(uint4 t, float (&v)[8], const __half*) {
    const u32 w[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
        v[2 * i] = f.x;
        v[2 * i + 1] = f.y;
    }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
    return v;
}

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

template <int D, typename KV>
__device__ __forceinline__ void attn_main(const FlashAttnVecParams* __restrict__ pp, const float* __restrict__ q,
                                          const KV* __restrict__ k, const KV* __restrict__ v, float* dst) {
    constexpr int W = 32;
    constexpr int VEC = 16 / int(sizeof(KV));   // elements per 16-byte load
    constexpr int CH = D / (W * VEC);           // 16-byte slices per lane per row
    constexpr int G = 16 / CH;                  // positions per load group
    constexpr int D4 = D / 4;
    static_assert(CH >= 1 && W % G == 0, "shape");

    const FlashAttnVecParams p = *pp;
    const u32 lane = threadIdx.x & 31u;
    const u32 nwg = p.nwg;
    const u32 head = blockIdx.y;
    const u32 b = blockIdx.z / nwg;
    const u32 iwg = blockIdx.z % nwg;
    const u32 batch = gridDim.z / nwg;
    const u32 kvh = head / (p.n_heads / p.n_kv_heads);
    const u64 row = u64(b) * p.n_heads + head;
    const u64 kv0 = (u64(b) * p.n_kv_heads + kvh) * p.kv_capacity * D;
    const KV* kb = k + kv0;
    const KV* vb = v + kv0;

    float qr[CH][VEC], o[CH][VEC];
#pragma unroll
    for (int c = 0; c < CH; ++c) {
        const float* qp = q + row * D + (c * W + lane) * VEC;
#pragma unroll
        for (int j = 0; j < VEC; j += 4) {
            const float4 t = __ldg(reinterpret_cast<const float4*>(qp + j));
            qr[c][j] = t.x; qr[c][j + 1] = t.y; qr[c][j + 2] = t.z; qr[c][j + 3] = t.w;
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) o[c][j] = 0.0f;
    }

    const u32 n = p.kv_seq_len;
    u32 lo = 0;
    if (p.mask_type == 2u && p.sliding_window > 0u && n > p.sliding_window) lo = n - p.sliding_window;
    const bool capped = p.softcap > 0.0f;

    float M = -FLT_MAX_F / 2;   // running max of the visible scores
    float S = 0.0f;             // running sum of exp(s - M)
    const u32 nblk = (n + W - 1) / W;
    for (u32 blk = iwg; blk < nblk; blk += nwg) {
        const u32 base = blk * W;
        if (base + W <= lo) continue;          // the whole block lies before the window
        const u32 beg = max(base, lo) - base;  // visible slots [beg, end)
        const u32 end = min(base + W, n) - base;

        float part[32];
#pragma unroll
        for (int g0 = 0; g0 < W; g0 += G) {
            uint4 kr[G][CH];
#pragma unroll
            for (int gi = 0; gi < G; ++gi) {
                const u32 c_pos = g0 + gi;
                const bool vis = c_pos >= beg && c_pos < end;
#pragma unroll
                for (int c = 0; c < CH; ++c) {
                    kr[gi][c] = vis ? load16(kb + u64(base + c_pos) * D + (c * W + lane) * VEC)
                                     : make_uint4(0u, 0u, 0u, 0u);
                }
            }
#pragma unroll
            for (int gi = 0; gi < G; ++gi) {
                float acc = 0.0f;
#pragma unroll
                for (int c = 0; c < CH; ++c) {
                    float kf[VEC];
                    unpack(kr[gi][c], kf, k);
#pragma unroll
                    for (int j = 0; j < VEC; ++j) acc = fmaf(kf[j], qr[c][j], acc);
                }
                part[g0 + gi] = acc;
            }
        }
        tr_step<16>(part, lane);
        tr_step<8>(part, lane);
        tr_step<4>(part, lane);
        tr_step<2>(part, lane);
        tr_step<1>(part, lane);
        float s = part[0] * p.scale;           // lane c: score of slot c
        if (capped) s = p.softcap * tanhf(s / p.softcap);
        const bool visible = lane >= beg && lane < end;
        const float m_new = fmaxf(M, warp_max(visible ? s : -FLT_MAX_F));
        const float alpha = expf(M - m_new);
        const float e = visible ? expf(s - m_new) : 0.0f;
        S = S * alpha + warp_sum(e);
        M = m_new;
#pragma unroll
        for (int c = 0; c < CH; ++c) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) o[c][j] *= alpha;
        }
#pragma unroll
        for (int g0 = 0; g0 < W; g0 += G) {
            uint4 vr[G][CH];
#pragma unroll
            for (int gi = 0; gi < G; ++gi) {
                const u32 c_pos = g0 + gi;
                const bool vis = c_pos >= beg && c_pos < end;
#pragma unroll
                for (int c = 0; c < CH; ++c) {
                    vr[gi][c] = vis ? load16(vb + u64(base + c_pos) * D + (c * W + lane) * VEC)
                                     : make_uint4(0u, 0u, 0u, 0u);
                }
            }
#pragma unroll
            for (int gi = 0; gi < G; ++gi) {
                const float ec = __shfl_sync(FULL, e, g0 + gi);
#pragma unroll
                for (int c = 0; c < CH; ++c) {
                    float vf[VEC];
                    unpack(vr[gi][c], vf, v);
#pragma unroll
                    for (int j = 0; j < VEC; ++j) o[c][j] = fmaf(ec, vf[j], o[c][j]);
                }
            }
        }
    }

    if (nwg == 1) {
        const float inv = (S == 0.0f) ? 0.0f : 1.0f / S;
#pragma unroll
        for (int c = 0; c < CH; ++c) {
            float* op = dst + row * D + (c * W + lane) * VEC;
#pragma unroll
            for (int j = 0; j < VEC; j += 4) {
                *reinterpret_cast<float4*>(op + j) =
                    make_float4(o[c][j] * inv, o[c][j + 1] * inv, o[c][j + 2] * inv, o[c][j + 3] * inv);
            }
        }
    } else {
        float4* t4 = reinterpret_cast<float4*>(dst) + row * D4 * nwg;
#pragma unroll
        for (int c = 0; c < CH; ++c) {
#pragma unroll
            for (int j = 0; j < VEC; j += 4) {
                const u64 f = ((c * W + lane) * VEC + j) / 4;
                t4[f * nwg + iwg] = make_float4(o[c][j], o[c][j + 1], o[c][j + 2], o[c][j + 3]);
            }
        }
        if (lane == 0) {
            const u64 nrows = u64(batch) * p.n_heads;
            float* sm = dst + nrows * D * nwg + row * 2 * nwg + 2 * iwg;
            sm[0] = S;
            sm[1] = M;
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
extern "C" __global__ void __launch_bounds__(32) flash_attn_vec_dk256(const FlashAttnVecParams* p, const float* q,
                                                                      const float* k, const float* v, float* dst) {
    attn_main<256, float>(p, q, k, v, dst);
}
extern "C" __global__ void __launch_bounds__(32) flash_attn_vec_dk512(const FlashAttnVecParams* p, const float* q,
                                                                      const float* k, const float* v, float* dst) {
    attn_main<512, float>(p, q, k, v, dst);
}
extern "C" __global__ void __launch_bounds__(32) flash_attn_vec_f16kv_dk256(const FlashAttnVecParams* p,
                                                                            const float* q, const __half* k,
                                                                            const __half* v, float* dst) {
    attn_main<256, __half>(p, q, k, v, dst);
}
extern "C" __global__ void __launch_bounds__(32) flash_attn_vec_f16kv_dk512(const FlashAttnVecParams* p,
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
