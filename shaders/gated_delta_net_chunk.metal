// gated_delta_net_chunk_inter_state_bf16: the inter-chunk state recurrence of
// the chunked gated delta rule (arXiv 2412.06464 section 4; the same math as
// FLA's chunk_gated_delta_rule_fwd_kernel_h).
//
// For each (b, head), with the state h [V, K] f32 starting at h0 and chunks of
// BT = 64 tokens (g already cumsummed within each chunk):
//   for chunk c:
//     h_out[b, c, head] = bf16(h)                                  chunk-start state
//     x[t, v]     = sum_k w[t, k] * bf16(h)[v, k]                  bf16 products, f32 sums
//     vn[t, v]    = u[t, v] - x[t, v];  v_new[t, v] = bf16(vn)
//     vg[t, v]    = bf16(vn[t, v] * exp(g[last] - g[t]))
//     h           = h * exp(g[last]) + sum_t vg[t, v] * k[t, kh, k] kh = head / (H / Hg)
//   final_state[b, head] = h
//
// Layouts: k [B, T, Hg, K] bf16; w [B, T, H, K] bf16; u [B, T, H, V] bf16;
// g [B, T, H] f32; h0 [B, H, V, K] f32; h_out [B, NT, H, V, K] bf16;
// v_new [B, T, H, V] bf16; final_state [B, H, V, K] f32.
// Bindings 0..8: k, w, u, g, h0, h_out, v_new, final_state, params.
//
// Threading: grid (V / 32, H, B), 128 threads = 4 simdgroups. A threadgroup owns
// a 32-wide slice of V for one (b, head) and walks the chunks in order; the
// state slice lives in threadgroup memory (threadgroup(0), 20 KiB):
//   hs    [32][128] f32   the state slice
//   stage [32][64]  bf16  the gated values vg transposed to [v][t], the operand
//                         of the state update; before that, the same 4 KiB
//                         holds one [32 v][32 t] f32 half of x at a time.
// x^T = bf16(h) @ w^T reads bf16(h) back from h_out, which this threadgroup
// has just written, so the product uses exactly the stored snapshot.
// The kernel is specialized to K = 128, BT = 64 (the host validates both).

#include <metal_stdlib>
using namespace metal;

struct GatedDeltaNetChunkParams {
    uint b;
    uint t;
    uint hg;
    uint h;
    uint k;
    uint v;
    uint bt;
    uint nt;
};

typedef simdgroup_matrix<float, 8, 8>  mat_f32;
typedef simdgroup_matrix<bfloat, 8, 8> mat_bf16;

kernel void gated_delta_net_chunk_inter_state_bf16(
    device const bfloat                *k_in   [[buffer(0)]],
    device const bfloat                *w_in   [[buffer(1)]],
    device const bfloat                *u_in   [[buffer(2)]],
    device const float                 *g_in   [[buffer(3)]],
    device const float                 *h0     [[buffer(4)]],
    device bfloat                      *h_out  [[buffer(5)]],
    device bfloat                      *v_new  [[buffer(6)]],
    device float                       *final_state [[buffer(7)]],
    constant GatedDeltaNetChunkParams  &p      [[buffer(8)]],
    threadgroup float                  *shmem  [[threadgroup(0)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tid   [[thread_index_in_threadgroup]],
    ushort sg    [[simdgroup_index_in_threadgroup]])
{
    constexpr uint KD = 128;         // K
    constexpr uint BT = 64;          // tokens per chunk
    constexpr uint BV = 32;          // V slice per threadgroup
    constexpr uint HT = 32;          // tokens per half chunk in the x product
    constexpr uint NTH = 128;        // threads
    constexpr uint TILE = BV * KD;   // state slice elements

    threadgroup float  *hs    = shmem;
    threadgroup float  *xf    = shmem + TILE;                        // [BV][HT] f32
    threadgroup bfloat *stage = (threadgroup bfloat *)(shmem + TILE); // [BV][BT] bf16

    const uint v0   = tgpig.x * BV;
    const uint head = tgpig.y;
    const uint b    = tgpig.z;
    const uint kh   = head / (p.h / p.hg);
    const uint H = p.h, V = p.v, T = p.t;

    const ulong state0 = ((ulong(b) * H + head) * V + v0) * KD;  // [v0, 0] of h0 / final_state
    for (uint e = tid; e < TILE; e += NTH) {
        hs[e] = h0[state0 + e];
    }

    float vg[BV * BT / NTH];         // this thread's gated values of the chunk

    for (uint c = 0; c < p.nt; ++c) {
        const ulong tok0 = ulong(b) * T + ulong(c) * BT;            // first token, flat over (b, t)
        device bfloat *hsnap = h_out + ((ulong(b) * p.nt + c) * H + head) * V * KD + ulong(v0) * KD;

        // The chunk-start snapshot, then scale the f32 state by the chunk decay.
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const float g_last = g_in[(tok0 + BT - 1) * H + head];
        const float decay  = exp(g_last);
        for (uint e = tid; e < TILE; e += NTH) {
            const float x = hs[e];
            hsnap[e] = bfloat(x);
            hs[e] = x * decay;
        }
        threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);

        for (uint half_i = 0; half_i < BT / HT; ++half_i) {
            // x^T[v, t] for t in this half: simdgroup sg owns v rows [8 sg, 8 sg + 8).
            device const bfloat *wp = w_in + ((tok0 + half_i * HT) * H + head) * KD;
            const ulong w_row = ulong(H) * KD;
            mat_f32 acc[HT / 8];
            for (uint j = 0; j < HT / 8; ++j) {
                acc[j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            }
            for (uint kk = 0; kk < KD; kk += 8) {
                mat_bf16 a;
                simdgroup_load(a, hsnap + 8 * sg * KD + kk, KD);
                for (uint j = 0; j < HT / 8; ++j) {
                    mat_bf16 bm;
                    simdgroup_load(bm, wp + 8 * j * w_row + kk, w_row, ulong2(0, 0), true);
                    simdgroup_multiply_accumulate(acc[j], a, bm, acc[j]);
                }
            }
            for (uint j = 0; j < HT / 8; ++j) {
                simdgroup_store(acc[j], xf + 8 * sg * HT + 8 * j, HT);
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);

            // Element e of the half: t = e / BV, v = e % BV (v innermost, as in u and v_new).
            for (uint r = 0; r < BV * HT / NTH; ++r) {
                const uint e  = tid + r * NTH;
                const uint tl = e / BV;
                const uint vl = e % BV;
                const ulong tok = tok0 + half_i * HT + tl;
                const ulong uv  = (tok * H + head) * V + v0 + vl;
                const float vn  = float(u_in[uv]) - xf[vl * HT + tl];
                v_new[uv] = bfloat(vn);
                vg[half_i * (BV * HT / NTH) + r] = vn * exp(g_last - g_in[tok * H + head]);
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }

        // stage[v][t] = bf16(vg), overwriting the f32 halves read above.
        for (uint half_i = 0; half_i < BT / HT; ++half_i) {
            for (uint r = 0; r < BV * HT / NTH; ++r) {
                const uint e = tid + r * NTH;
                stage[(e % BV) * BT + half_i * HT + e / BV] = bfloat(vg[half_i * (BV * HT / NTH) + r]);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        // hs[v, k] += sum_t stage[v, t] * k[t, k]: simdgroup sg owns k columns [32 sg, 32 sg + 32).
        device const bfloat *kp = k_in + (tok0 * p.hg + kh) * KD;
        const ulong k_row = ulong(p.hg) * KD;
        mat_f32 st[BV / 8][4];
        for (uint i = 0; i < BV / 8; ++i) {
            for (uint j = 0; j < 4; ++j) {
                simdgroup_load(st[i][j], hs + 8 * i * KD + 32 * sg + 8 * j, KD);
            }
        }
        for (uint tt = 0; tt < BT; tt += 8) {
            mat_bf16 a[BV / 8];
            mat_bf16 bm[4];
            for (uint i = 0; i < BV / 8; ++i) {
                simdgroup_load(a[i], stage + 8 * i * BT + tt, BT);
            }
            for (uint j = 0; j < 4; ++j) {
                simdgroup_load(bm[j], kp + tt * k_row + 32 * sg + 8 * j, k_row);
            }
            for (uint i = 0; i < BV / 8; ++i) {
                for (uint j = 0; j < 4; ++j) {
                    simdgroup_multiply_accumulate(st[i][j], a[i], bm[j], st[i][j]);
                }
            }
        }
        for (uint i = 0; i < BV / 8; ++i) {
            for (uint j = 0; j < 4; ++j) {
                simdgroup_store(st[i][j], hs + 8 * i * KD + 32 * sg + 8 * j, KD);
            }
        }
    }

    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint e = tid; e < TILE; e += NTH) {
        final_state[state0 + e] = hs[e];
    }
}
