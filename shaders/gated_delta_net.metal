// The gated delta rule, token by token (arXiv 2412.06464 eq. 10; the
// recurrence that FLA's fused_recurrent_gated_delta_rule computes), and its
// one-token decode step that updates the state in place; the fused decode
// step (ours) also takes the gates' inputs and q and k before their l2 norm.
//
// Per (b, head), with the state S [V, K] f32 (K innermost, the layout of
// gated_delta_net_chunk's h0 and final_state, so either kernel continues from
// the other's state) and kh = head / (H / Hg):
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
// Threading: a simdgroup owns GDN_ROWS consecutive rows v of one (b, head)
// and walks the tokens; lane l holds S[v, l + 32 j] for j < K / 32 in
// registers, so the two sums over K are one simd_sum each and no threadgroup
// memory or barrier is needed. Grid (ceil(V / GDN_BV), H, B) threadgroups of
// GDN_THREADS threads; rows past V are skipped by whole simdgroups. Each state
// row is read and written by one simdgroup only, so the initial state may be
// the final state's buffer (the decode kernel always works that way).
// K is a multiple of 32, at most 32 * GDN_MAX_KPL; V is any size.
// All arithmetic is f32; bf16 q, k, v and o are converted on load and store.

constant constexpr uint GDN_LANES   = 32;
constant constexpr uint GDN_MAX_KPL = 8;                      // K <= 256
constant constexpr uint GDN_ROWS    = 4;                      // rows v per simdgroup
constant constexpr uint GDN_SIMDGROUPS = 4;
constant constexpr uint GDN_BV      = GDN_ROWS * GDN_SIMDGROUPS;

// Runs the recurrence over t_len tokens for rows [v0, v0 + GDN_ROWS) ∩ [0, V)
// of (b, head). s_in is read only when has_s_in; s_out receives the final
// rows and may be s_in.
// FUSED (gated_delta_net_decode_fused): g and beta from the gates' inputs
// fa, fb, a_log, dt_bias (the prelude's gdn_gates; g and beta unread), and q
// and k l2-normalized (x / sqrt(sum x^2 + eps)) as they are loaded.
template <typename T, bool FUSED>
static inline void gdn_rows(
    device const T*     q,
    device const T*     k,
    device const T*     v,
    device const float* g,
    device const float* beta,
    device const float* s_in,
    bool                has_s_in,
    device float*       s_out,
    device T*           o,
    uint t_len, uint hg, uint h_count, uint kdim, uint vdim, float scale,
    uint b, uint head, uint v0, uint lane,
    device const float* fa, device const float* fb, device const float* a_log, device const float* dt_bias, float eps)
{
    const uint kpl = kdim / GDN_LANES;
    const uint kh = head / (h_count / hg);
    const uint nrows = min(GDN_ROWS, vdim - v0);
    const ulong state0 = ((ulong(b) * h_count + head) * vdim + v0) * kdim;

    float s[GDN_ROWS][GDN_MAX_KPL];
    for (uint r = 0; r < GDN_ROWS; ++r) {
        for (uint j = 0; j < GDN_MAX_KPL; ++j) {
            const bool live = has_s_in && r < nrows && j < kpl;
            s[r][j] = live ? s_in[state0 + r * kdim + lane + GDN_LANES * j] : 0.0f;
        }
    }

    for (uint t = 0; t < t_len; ++t) {
        const ulong tok = ulong(b) * t_len + t;
        const ulong gh = tok * h_count + head;
        float gt, bt;
        if (FUSED) {
            gdn_gates(fa[gh], fb[gh], a_log[head], dt_bias[head], gt, bt);
        } else {
            gt = g[gh];
            bt = beta[gh];
        }
        const float decay = exp(gt);
        const ulong qk0 = (tok * hg + kh) * kdim + lane;
        const ulong vo0 = gh * vdim + v0;

        float kx[GDN_MAX_KPL];
        float qx[GDN_MAX_KPL];
        for (uint j = 0; j < GDN_MAX_KPL; ++j) {
            kx[j] = j < kpl ? float(k[qk0 + GDN_LANES * j]) : 0.0f;
            qx[j] = j < kpl ? float(q[qk0 + GDN_LANES * j]) : 0.0f;
        }
        if (FUSED) {
            float sk = 0.0f, sq = 0.0f;
            for (uint j = 0; j < GDN_MAX_KPL; ++j) {
                sk += kx[j] * kx[j];
                sq += qx[j] * qx[j];
            }
            const float rk = 1.0f / sqrt(simd_sum(sk) + eps), rq = 1.0f / sqrt(simd_sum(sq) + eps);
            for (uint j = 0; j < GDN_MAX_KPL; ++j) {
                kx[j] *= rk;
                qx[j] *= rq;
            }
        }

        for (uint r = 0; r < GDN_ROWS; ++r) {
            if (r >= nrows) {
                break;
            }
            float kv = 0.0f;
            for (uint j = 0; j < GDN_MAX_KPL; ++j) {
                s[r][j] *= decay;
                kv += s[r][j] * kx[j];
            }
            kv = simd_sum(kv);
            const float delta = (float(v[vo0 + r]) - kv) * bt;
            float out = 0.0f;
            for (uint j = 0; j < GDN_MAX_KPL; ++j) {
                s[r][j] += delta * kx[j];
                out += s[r][j] * qx[j];
            }
            out = simd_sum(out);
            if (lane == 0) {
                o[vo0 + r] = T(out * scale);
            }
        }
    }

    for (uint r = 0; r < nrows; ++r) {
        for (uint j = 0; j < kpl; ++j) {
            s_out[state0 + r * kdim + lane + GDN_LANES * j] = s[r][j];
        }
    }
}

// buffer(0) q, (1) k, (2) v, (3) g, (4) beta, (5) initial_state (read only
// when has_initial_state), (6) o, (7) final_state, (8) params.
template <typename T>
static inline void gated_delta_net_impl(
    device const T* q, device const T* k, device const T* v,
    device const float* g, device const float* beta,
    device const float* initial_state, device T* o, device float* final_state,
    constant GatedDeltaNetParams& p, uint3 tg, uint sg, uint lane)
{
    const uint v0 = tg.x * GDN_BV + sg * GDN_ROWS;
    if (v0 >= p.dims.v || tg.y >= p.dims.h || tg.z >= p.dims.b) {
        return;
    }
    gdn_rows<T, false>(q, k, v, g, beta, initial_state, p.has_initial_state != 0u, final_state, o,
                       p.dims.t, p.dims.hg, p.dims.h, p.dims.k, p.dims.v, p.scale, tg.z, tg.y, v0, lane,
                       g, g, g, g, 0.0f);
}

// buffer(0) q [B, Hg, K], (1) k [B, Hg, K], (2) v [B, H, V], (3) g [B, H],
// (4) beta [B, H], (5) state [B, H, V, K] read and written in place, (6) o
// [B, H, V], (7) params.
template <typename T>
static inline void gated_delta_net_decode_impl(
    device const T* q, device const T* k, device const T* v,
    device const float* g, device const float* beta,
    device float* state, device T* o,
    constant GatedDeltaNetDecodeParams& p, uint3 tg, uint sg, uint lane)
{
    const uint v0 = tg.x * GDN_BV + sg * GDN_ROWS;
    if (v0 >= p.v || tg.y >= p.h || tg.z >= p.b) {
        return;
    }
    gdn_rows<T, false>(q, k, v, g, beta, state, true, state, o,
                       1u, p.hg, p.h, p.k, p.v, p.scale, tg.z, tg.y, v0, lane, g, g, g, g, 0.0f);
}

// buffer(0) q [B, Hg, K] and (1) k before their l2 norm, (2) v [B, H, V],
// (3) a and (4) b [B, H] f32, (5) A_log and (6) dt_bias [H] f32, (7) state
// [B, H, V, K] read and written in place, (8) o [B, H, V], (9) params: the
// decode step with compute_g_beta's gates and l2_norm's q and k in it.
template <typename T>
static inline void gated_delta_net_decode_fused_impl(
    device const T* q, device const T* k, device const T* v,
    device const float* a, device const float* b, device const float* a_log, device const float* dt_bias,
    device float* state, device T* o,
    constant GatedDeltaNetDecodeFusedParams& pf, uint3 tg, uint sg, uint lane)
{
    const GatedDeltaNetDecodeParams p = pf.decode;
    const uint v0 = tg.x * GDN_BV + sg * GDN_ROWS;
    if (v0 >= p.v || tg.y >= p.h || tg.z >= p.b) {
        return;
    }
    gdn_rows<T, true>(q, k, v, a, b, state, true, state, o,
                      1u, p.hg, p.h, p.k, p.v, p.scale, tg.z, tg.y, v0, lane, a, b, a_log, dt_bias, pf.l2_eps);
}

kernel void gated_delta_net_f32(
    device const float*           q             [[buffer(0)]],
    device const float*           k             [[buffer(1)]],
    device const float*           v             [[buffer(2)]],
    device const float*           g             [[buffer(3)]],
    device const float*           beta          [[buffer(4)]],
    device const float*           initial_state [[buffer(5)]],
    device float*                 o             [[buffer(6)]],
    device float*                 final_state   [[buffer(7)]],
    constant GatedDeltaNetParams& params        [[buffer(8)]],
    uint3 tg   [[threadgroup_position_in_grid]],
    uint  sg   [[simdgroup_index_in_threadgroup]],
    uint  lane [[thread_index_in_simdgroup]])
{
    gated_delta_net_impl(q, k, v, g, beta, initial_state, o, final_state, params, tg, sg, lane);
}

// As gated_delta_net_f32 with bf16 q, k, v and o (state, g, beta f32).
kernel void gated_delta_net_bf16(
    device const bfloat*          q             [[buffer(0)]],
    device const bfloat*          k             [[buffer(1)]],
    device const bfloat*          v             [[buffer(2)]],
    device const float*           g             [[buffer(3)]],
    device const float*           beta          [[buffer(4)]],
    device const float*           initial_state [[buffer(5)]],
    device bfloat*                o             [[buffer(6)]],
    device float*                 final_state   [[buffer(7)]],
    constant GatedDeltaNetParams& params        [[buffer(8)]],
    uint3 tg   [[threadgroup_position_in_grid]],
    uint  sg   [[simdgroup_index_in_threadgroup]],
    uint  lane [[thread_index_in_simdgroup]])
{
    gated_delta_net_impl(q, k, v, g, beta, initial_state, o, final_state, params, tg, sg, lane);
}

kernel void gated_delta_net_decode_f32(
    device const float*                 q      [[buffer(0)]],
    device const float*                 k      [[buffer(1)]],
    device const float*                 v      [[buffer(2)]],
    device const float*                 g      [[buffer(3)]],
    device const float*                 beta   [[buffer(4)]],
    device float*                       state  [[buffer(5)]],
    device float*                       o      [[buffer(6)]],
    constant GatedDeltaNetDecodeParams& params [[buffer(7)]],
    uint3 tg   [[threadgroup_position_in_grid]],
    uint  sg   [[simdgroup_index_in_threadgroup]],
    uint  lane [[thread_index_in_simdgroup]])
{
    gated_delta_net_decode_impl(q, k, v, g, beta, state, o, params, tg, sg, lane);
}

// As gated_delta_net_decode_f32 with bf16 q, k, v and o (state, g, beta f32).
kernel void gated_delta_net_decode_bf16(
    device const bfloat*                q      [[buffer(0)]],
    device const bfloat*                k      [[buffer(1)]],
    device const bfloat*                v      [[buffer(2)]],
    device const float*                 g      [[buffer(3)]],
    device const float*                 beta   [[buffer(4)]],
    device float*                       state  [[buffer(5)]],
    device bfloat*                      o      [[buffer(6)]],
    constant GatedDeltaNetDecodeParams& params [[buffer(7)]],
    uint3 tg   [[threadgroup_position_in_grid]],
    uint  sg   [[simdgroup_index_in_threadgroup]],
    uint  lane [[thread_index_in_simdgroup]])
{
    gated_delta_net_decode_impl(q, k, v, g, beta, state, o, params, tg, sg, lane);
}

kernel void gated_delta_net_decode_fused_f32(
    device const float*                      q       [[buffer(0)]],
    device const float*                      k       [[buffer(1)]],
    device const float*                      v       [[buffer(2)]],
    device const float*                      a       [[buffer(3)]],
    device const float*                      b       [[buffer(4)]],
    device const float*                      a_log   [[buffer(5)]],
    device const float*                      dt_bias [[buffer(6)]],
    device float*                            state   [[buffer(7)]],
    device float*                            o       [[buffer(8)]],
    constant GatedDeltaNetDecodeFusedParams& params  [[buffer(9)]],
    uint3 tg   [[threadgroup_position_in_grid]],
    uint  sg   [[simdgroup_index_in_threadgroup]],
    uint  lane [[thread_index_in_simdgroup]])
{
    gated_delta_net_decode_fused_impl(q, k, v, a, b, a_log, dt_bias, state, o, params, tg, sg, lane);
}

// As gated_delta_net_decode_fused_f32 with bf16 q, k, v and o.
kernel void gated_delta_net_decode_fused_bf16(
    device const bfloat*                     q       [[buffer(0)]],
    device const bfloat*                     k       [[buffer(1)]],
    device const bfloat*                     v       [[buffer(2)]],
    device const float*                      a       [[buffer(3)]],
    device const float*                      b       [[buffer(4)]],
    device const float*                      a_log   [[buffer(5)]],
    device const float*                      dt_bias [[buffer(6)]],
    device float*                            state   [[buffer(7)]],
    device bfloat*                           o       [[buffer(8)]],
    constant GatedDeltaNetDecodeFusedParams& params  [[buffer(9)]],
    uint3 tg   [[threadgroup_position_in_grid]],
    uint  sg   [[simdgroup_index_in_threadgroup]],
    uint  lane [[thread_index_in_simdgroup]])
{
    gated_delta_net_decode_fused_impl(q, k, v, a, b, a_log, dt_bias, state, o, params, tg, sg, lane);
}
