// The gated delta rule token by token (CUDA), entry names and bindings as
// shaders/gated_delta_net.metal, and its one-token decode step that updates
// the state in place.
//
// Per (b, head), with the state S [V, K] f32 (K innermost, the layout of
// gated_delta_net_chunk's h0 and final_state) and kh = head / (H / Hg):
//   for t in 0 .. T-1:
//     S       = S * exp(g[t])
//     kv[v]   = sum_k S[v, k] * k[t, kh, k]
//     delta   = (v[t, v] - kv[v]) * beta[t]
//     S[v, k] = S[v, k] + delta[v] * k[t, kh, k]
//     o[t, v] = scale * sum_k S[v, k] * q[t, kh, k]
//
// Layouts: q, k [B, T, Hg, K]; v, o [B, T, H, V]; g, beta [B, T, H] f32;
// state [B, H, V, K] f32. The decode kernel is the same with T = 1.
//
// Threading (the op's grid): (ceil(V / 16), H, B) blocks of 128 threads; warp
// w of a block owns the 4 consecutive rows v0 = 16 * blockIdx.x + 4 * w .. and
// walks the tokens; warps whose v0 is past V return whole. K / 32 = KPL
// (1 ..= 8) is a template parameter: each lane keeps KPL elements of each of
// its 4 rows in registers, in groups of VE = 4, 2 or 1 consecutive elements
// (the largest dividing KPL), so state, q and k move as 16-byte (f32) or
// 8-byte (bf16) vectors when the pointers allow it (scalar loads otherwise,
// same mapping). The two sums over K per token reduce the 4 rows together:
// two exchange steps leave each quarter of the warp with one row (lanes
// 8r .. 8r+7 hold row r), three more shuffles finish it: 6 shuffles for 4
// rows instead of 20, plus 4 broadcasts for kv. The next token's q, k, v, g
// and beta are loaded before the current token's arithmetic, so their latency
// overlaps it. Each state row is read and written by one warp only, so the
// initial state may be the final state's buffer (decode always works that way).
// All arithmetic is f32; bf16 q, k, v and o are converted on load and rounded
// (nearest even) on store.

namespace {

constexpr u32 GDN_LANES = 32;
constexpr u32 GDN_ROWS = 4;        // rows v per warp
constexpr u32 GDN_WARPS = 4;
constexpr u32 GDN_BV = GDN_ROWS * GDN_WARPS;
constexpr u32 FULL = 0xffffffffu;

__device__ __forceinline__ bool aligned_to(const void* p, u32 bytes) {
    return (reinterpret_cast<u64>(p) & u64(bytes - 1u)) == 0;
}
__device__ __forceinline__ float bf_lo(u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(u32 w) { return __uint_as_float(w & 0xffff0000u); }

// VE consecutive elements at p into out[0 .. VE), as one vector when vec.
template <int VE>
__device__ __forceinline__ void load_group(const float* p, bool vec, float* out) {
    if (VE == 4 && vec) {
        const float4 t = *reinterpret_cast<const float4*>(p);
        out[0] = t.x; out[1] = t.y; out[2] = t.z; out[3] = t.w;
    } else if (VE == 2 && vec) {
        const float2 t = *reinterpret_cast<const float2*>(p);
        out[0] = t.x; out[1] = t.y;
    } else {
#pragma unroll
        for (int e = 0; e < VE; ++e) out[e] = p[e];
    }
}
template <int VE>
__device__ __forceinline__ void load_group(const __nv_bfloat16* p, bool vec, float* out) {
    if (VE == 4 && vec) {
        const uint2 t = *reinterpret_cast<const uint2*>(p);
        out[0] = bf_lo(t.x); out[1] = bf_hi(t.x); out[2] = bf_lo(t.y); out[3] = bf_hi(t.y);
    } else if (VE == 2 && vec) {
        const u32 t = *reinterpret_cast<const u32*>(p);
        out[0] = bf_lo(t); out[1] = bf_hi(t);
    } else {
#pragma unroll
        for (int e = 0; e < VE; ++e) out[e] = __bfloat162float(p[e]);
    }
}
template <int VE>
__device__ __forceinline__ void store_group(float* p, bool vec, const float* in) {
    if (VE == 4 && vec) {
        *reinterpret_cast<float4*>(p) = make_float4(in[0], in[1], in[2], in[3]);
    } else if (VE == 2 && vec) {
        *reinterpret_cast<float2*>(p) = make_float2(in[0], in[1]);
    } else {
#pragma unroll
        for (int e = 0; e < VE; ++e) p[e] = in[e];
    }
}

// a0..a3: this lane's partial sums of rows 0..3. Returns, in every lane, the
// warp-wide sum of row lane / 8. Step 1 pairs lane with lane ^ 16: the lower
// half keeps rows 0, 1 and the upper half rows 2, 3, each adding the partner's
// copy; step 2 pairs lane ^ 8 the same way within each half; the xor 4, 2, 1
// steps then sum the 8 lanes that hold the same row.
__device__ __forceinline__ float reduce_rows4(float a0, float a1, float a2, float a3, u32 lane) {
    const bool hi16 = (lane & 16u) != 0;
    float k0 = hi16 ? a2 : a0, k1 = hi16 ? a3 : a1;
    const float s0 = hi16 ? a0 : a2, s1 = hi16 ? a1 : a3;
    k0 += __shfl_xor_sync(FULL, s0, 16);
    k1 += __shfl_xor_sync(FULL, s1, 16);
    const bool hi8 = (lane & 8u) != 0;
    float k = hi8 ? k1 : k0;
    k += __shfl_xor_sync(FULL, hi8 ? k0 : k1, 8);
    k += __shfl_xor_sync(FULL, k, 4);
    k += __shfl_xor_sync(FULL, k, 2);
    k += __shfl_xor_sync(FULL, k, 1);
    return k;
}

// The fused decode step's inputs (gated_delta_net_decode_fused): g and
// beta come from the gates' inputs (the prelude's gdn_gates), and q and k
// are l2-normalized as they are loaded.
struct GdnFused {
    const float* a = nullptr;
    const float* b = nullptr;
    const float* a_log = nullptr;
    const float* dt_bias = nullptr;
    float eps = 0.0f;
};

// Runs the recurrence over t_len tokens for rows [v0, v0 + 4) ∩ [0, V) of
// (b, head) in one warp. s_in is read only when has_s_in; s_out receives the
// final rows and may be s_in.
template <typename T, int KPL, bool FUSED>
__device__ __forceinline__ void gdn_rows(const T* __restrict__ q, const T* __restrict__ k,
                                         const T* __restrict__ v, const float* __restrict__ g,
                                         const float* __restrict__ beta, const float* s_in, bool has_s_in,
                                         float* s_out, T* __restrict__ o, u32 t_len, u32 hg, u32 h_count,
                                         u32 kdim, u32 vdim, float scale, u32 b, u32 head, u32 v0, u32 lane,
                                         const GdnFused& fz) {
    constexpr int VE = KPL % 4 == 0 ? 4 : (KPL % 2 == 0 ? 2 : 1);
    constexpr int G = KPL / VE;  // groups per lane; group gi holds elements (gi * 32 + lane) * VE + e
    const u32 kh = head / (h_count / hg);
    const u32 nrows = min(GDN_ROWS, vdim - v0);
    const u64 state0 = ((u64(b) * h_count + head) * vdim + v0) * kdim;
    const bool st_vec = aligned_to(s_in, VE * 4) && aligned_to(s_out, VE * 4);
    const bool qk_vec = aligned_to(q, VE * sizeof(T)) && aligned_to(k, VE * sizeof(T));

    float s[GDN_ROWS][KPL];
#pragma unroll
    for (u32 r = 0; r < GDN_ROWS; ++r) {
#pragma unroll
        for (int gi = 0; gi < G; ++gi) {
            if (has_s_in && r < nrows) {
                load_group<VE>(s_in + state0 + u64(r) * kdim + (u64(gi) * GDN_LANES + lane) * VE, st_vec,
                               &s[r][gi * VE]);
            } else {
#pragma unroll
                for (int e = 0; e < VE; ++e) s[r][gi * VE + e] = 0.0f;
            }
        }
    }

    // Token t's inputs: k, q (this lane's elements), v (the 4 rows), g, beta.
    float nk[KPL], nq[KPL], nv[GDN_ROWS], ng = 0.0f, nb = 0.0f;
    auto load_token = [&](u32 t) {
        const u64 tok = u64(b) * t_len + t;
        const u64 gh = tok * h_count + head;
        if constexpr (FUSED) {
            gdn_gates(fz.a[gh], fz.b[gh], fz.a_log[head], fz.dt_bias[head], ng, nb);
        } else {
            ng = g[gh];
            nb = beta[gh];
        }
        const u64 qk0 = (tok * hg + kh) * kdim;
#pragma unroll
        for (int gi = 0; gi < G; ++gi) {
            const u64 off = qk0 + (u64(gi) * GDN_LANES + lane) * VE;
            load_group<VE>(k + off, qk_vec, &nk[gi * VE]);
            load_group<VE>(q + off, qk_vec, &nq[gi * VE]);
        }
        const u64 vo0 = gh * vdim + v0;
#pragma unroll
        for (u32 r = 0; r < GDN_ROWS; ++r) nv[r] = r < nrows ? to_f(v[vo0 + r]) : 0.0f;
        if constexpr (FUSED) {
            // q and k over their sums of squares, as l2_norm: x / sqrt(sum x^2 + eps), the sums over the warp.
            float sk = 0.0f, sq = 0.0f;
#pragma unroll
            for (int j = 0; j < KPL; ++j) {
                sk += nk[j] * nk[j];
                sq += nq[j] * nq[j];
            }
            const float rk = 1.0f / sqrtf(warp_sum(sk) + fz.eps), rq = 1.0f / sqrtf(warp_sum(sq) + fz.eps);
#pragma unroll
            for (int j = 0; j < KPL; ++j) {
                nk[j] *= rk;
                nq[j] *= rq;
            }
        }
    };
    if (t_len > 0) load_token(0);

    const u32 my_row = lane >> 3;
    for (u32 t = 0; t < t_len; ++t) {
        float kx[KPL], qx[KPL], vv[GDN_ROWS];
#pragma unroll
        for (int j = 0; j < KPL; ++j) { kx[j] = nk[j]; qx[j] = nq[j]; }
#pragma unroll
        for (u32 r = 0; r < GDN_ROWS; ++r) vv[r] = nv[r];
        const float decay = expf(ng);
        const float bt = nb;
        if (t + 1 < t_len) load_token(t + 1);

        float part[GDN_ROWS];
#pragma unroll
        for (u32 r = 0; r < GDN_ROWS; ++r) {
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < KPL; ++j) {
                s[r][j] *= decay;
                acc += s[r][j] * kx[j];
            }
            part[r] = acc;
        }
        const float kv_mine = reduce_rows4(part[0], part[1], part[2], part[3], lane);
#pragma unroll
        for (u32 r = 0; r < GDN_ROWS; ++r) {
            const float kv = __shfl_sync(FULL, kv_mine, r * 8);
            const float delta = (vv[r] - kv) * bt;
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < KPL; ++j) {
                s[r][j] += delta * kx[j];
                acc += s[r][j] * qx[j];
            }
            part[r] = acc;
        }
        const float out = reduce_rows4(part[0], part[1], part[2], part[3], lane);
        if ((lane & 7u) == 0 && my_row < nrows) {
            const u64 gh = (u64(b) * t_len + t) * h_count + head;
            o[gh * vdim + v0 + my_row] = from_f<T>(out * scale);
        }
    }

#pragma unroll
    for (u32 r = 0; r < GDN_ROWS; ++r) {
        if (r < nrows) {
#pragma unroll
            for (int gi = 0; gi < G; ++gi) {
                store_group<VE>(s_out + state0 + u64(r) * kdim + (u64(gi) * GDN_LANES + lane) * VE, st_vec,
                                &s[r][gi * VE]);
            }
        }
    }
}

template <typename T, bool FUSED = false>
__device__ __forceinline__ void gdn_dispatch(const T* q, const T* k, const T* v, const float* g,
                                             const float* beta, const float* s_in, bool has_s_in, float* s_out,
                                             T* o, u32 t_len, u32 bn, u32 hg, u32 h_count, u32 kdim, u32 vdim,
                                             float scale, const GdnFused& fz = GdnFused{}) {
    const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const u32 v0 = blockIdx.x * GDN_BV + warp * GDN_ROWS;
    const u32 head = blockIdx.y, b = blockIdx.z;
    if (v0 >= vdim || head >= h_count || b >= bn) return;
#define GDN_CASE(n) \
    case n: gdn_rows<T, n, FUSED>(q, k, v, g, beta, s_in, has_s_in, s_out, o, t_len, hg, h_count, kdim, vdim, scale, b, head, v0, lane, fz); break;
    switch (kdim / GDN_LANES) {
        GDN_CASE(1) GDN_CASE(2) GDN_CASE(3) GDN_CASE(4) GDN_CASE(5) GDN_CASE(6) GDN_CASE(7) GDN_CASE(8)
        default: break;  // the op accepts K = 32 * (1 ..= 8) only
    }
#undef GDN_CASE
}

}  // namespace

// buffer(0) q, (1) k, (2) v, (3) g, (4) beta, (5) initial_state (read only
// when has_initial_state; may be final_state), (6) o, (7) final_state, (8) params.
extern "C" __global__ void gated_delta_net_f32(const float* q, const float* k, const float* v, const float* g,
                                               const float* beta, const float* initial_state, float* o,
                                               float* final_state, const GatedDeltaNetParams* pp) {
    const GatedDeltaNetParams p = *pp;
    gdn_dispatch<float>(q, k, v, g, beta, initial_state, p.has_initial_state != 0u, final_state, o, p.dims.t, p.dims.b,
                        p.dims.hg, p.dims.h, p.dims.k, p.dims.v, p.scale);
}

// As gated_delta_net_f32 with bf16 q, k, v and o (state, g, beta f32).
extern "C" __global__ void gated_delta_net_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                const __nv_bfloat16* v, const float* g, const float* beta,
                                                const float* initial_state, __nv_bfloat16* o, float* final_state,
                                                const GatedDeltaNetParams* pp) {
    const GatedDeltaNetParams p = *pp;
    gdn_dispatch<__nv_bfloat16>(q, k, v, g, beta, initial_state, p.has_initial_state != 0u, final_state, o, p.dims.t,
                                p.dims.b, p.dims.hg, p.dims.h, p.dims.k, p.dims.v, p.scale);
}

// buffer(0) q [B, Hg, K], (1) k [B, Hg, K], (2) v [B, H, V], (3) g [B, H],
// (4) beta [B, H], (5) state [B, H, V, K] read and written in place, (6) o
// [B, H, V], (7) params.
extern "C" __global__ void gated_delta_net_decode_f32(const float* q, const float* k, const float* v,
                                                      const float* g, const float* beta, float* state, float* o,
                                                      const GatedDeltaNetDecodeParams* pp) {
    const GatedDeltaNetDecodeParams p = *pp;
    gdn_dispatch<float>(q, k, v, g, beta, state, true, state, o, 1u, p.b, p.hg, p.h, p.k, p.v, p.scale);
}

// As gated_delta_net_decode_f32 with bf16 q, k, v and o (state, g, beta f32).
extern "C" __global__ void gated_delta_net_decode_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k,
                                                       const __nv_bfloat16* v, const float* g, const float* beta,
                                                       float* state, __nv_bfloat16* o,
                                                       const GatedDeltaNetDecodeParams* pp) {
    const GatedDeltaNetDecodeParams p = *pp;
    gdn_dispatch<__nv_bfloat16>(q, k, v, g, beta, state, true, state, o, 1u, p.b, p.hg, p.h, p.k, p.v, p.scale);
}

// The decode step with its gates and q / k norms in it (ours): buffer(0) q
// [B, Hg, K] and (1) k before their l2 norm, (2) v [B, H, V], (3) a and (4)
// b [B, H] f32 (the gates' inputs: g = -exp(A_log) softplus(a + dt_bias),
// beta = sigmoid(b)), (5) A_log and (6) dt_bias [H] f32, (7) state [B, H,
// V, K] read and written in place, (8) o [B, H, V], (9) params. The
// arithmetic of l2_norm, compute_g_beta and gated_delta_net_decode in turn,
// the norms' sums over a warp.
#define GDN_FUSED_ENTRY(T, TAG)                                                                                      \
    extern "C" __global__ void gated_delta_net_decode_fused_##TAG(                                                   \
        const T* q, const T* k, const T* v, const float* a, const float* b, const float* a_log, const float* dt_bias, \
        float* state, T* o, const GatedDeltaNetDecodeFusedParams* pp) {                                              \
        const GatedDeltaNetDecodeFusedParams p = *pp;                                                                \
        const GdnFused fz{a, b, a_log, dt_bias, p.l2_eps};                                                           \
        gdn_dispatch<T, true>(q, k, v, nullptr, nullptr, state, true, state, o, 1u, p.decode.b, p.decode.hg,          \
                              p.decode.h, p.decode.k, p.decode.v, p.decode.scale, fz);                              \
    }
GDN_FUSED_ENTRY(float, f32)
GDN_FUSED_ENTRY(__nv_bfloat16, bf16)
#undef GDN_FUSED_ENTRY
