// gated_delta_net_chunk_inter_state_bf16 (CUDA): the inter-chunk state
// recurrence of the chunked gated delta rule; entry, bindings and grid as
// shaders/gated_delta_net_chunk.metal.
//
// For each (b, head), state h [V, K] f32 starting at h0, chunks of BT = 64
// tokens (g cumsummed within each chunk), kh = head / (H / Hg):
//   h_out[b, c, head] = bf16(h)                               chunk-start state
//   vn[t, v]  = u[t, v] - sum_k w[t, k] * bf16(h)[v, k]        bf16 products, f32 sums
//   v_new[t, v] = bf16(vn)
//   vg[t, v]  = bf16(vn[t, v] * exp(g[last] - g[t]))
//   h         = h * exp(g[last]) + sum_t vg[t, v] * k[t, kh, :]
//   final_state[b, head] = h
// Layouts: k [B, T, Hg, K] bf16; w [B, T, H, K] bf16; u, v_new [B, T, H, V]
// bf16; g [B, T, H] f32; h0, final_state [B, H, V, K] f32; h_out
// [B, NT, H, V, K] bf16. Bindings 0..8: k, w, u, g, h0, h_out, v_new,
// final_state, params. K = 128 and BT = 64 (the op validates both).
//
// Grid (V / 32, H, B), 128 threads = 4 warps; a block owns a 32-wide slice of
// V and walks the chunks in order. The f32 state slice [32 v][128 k] lives in
// registers as mma.sync m16n8k16 accumulators: warp w holds k columns
// [32w, 32w + 32) for all 32 v (2 m-tiles x 4 n-tiles x 4 floats per lane).
// Per chunk:
//   1. hb = bf16(h) into shared memory (and from there to h_out with 16-byte
//      stores); the chunk's k rows [64 t][128 k] and g values into shared
//      memory; the accumulators scaled by exp(g[last]).
//   2. x[t, v] = w @ hb^T on tensor cores: warp w takes t rows [16w, 16w+16);
//      A (w) fragments in registers, B (hb) by ldmatrix.
// The chunk's k rows, w fragments, u pairs and g values are loaded from
// global memory into registers one chunk ahead (issued right after the
// previous chunk's copies are taken), so the serial walk waits on no global
// load inside a chunk; ~255 registers, no spills, one block per SM anyway.
//   3. vn = u - x, stored to v_new; vg = bf16(vn * exp(g[last] - g[t]))
//      transposed into stage [32 v][64 t] in shared memory.
//   4. h += stage @ k_chunk on tensor cores, A by ldmatrix from stage, B by
//      ldmatrix.trans from the k rows, accumulating into the state registers.
// Shared rows are padded by 16 bytes so ldmatrix's 8 row addresses fall in
// distinct banks. The dynamic region the op binds (20480 bytes) holds hb,
// stage and g; the k rows are a static array (17408 bytes).

struct GatedDeltaNetChunkParams {
    u32 b;
    u32 t;
    u32 hg;
    u32 h;
    u32 k;
    u32 v;
    u32 bt;
    u32 nt;
};

namespace {

constexpr u32 KD = 128;          // K
constexpr u32 BT = 64;           // tokens per chunk
constexpr u32 BV = 32;           // V slice per block
constexpr u32 NTH = 128;         // threads
constexpr u32 LDH = KD + 8;      // hb row stride (bf16)
constexpr u32 LDS = BT + 8;      // stage row stride (bf16)
constexpr u32 LDK = KD + 8;      // k-rows stride (bf16)

}  // namespace

extern "C" __global__ void __launch_bounds__(128)
gated_delta_net_chunk_inter_state_bf16(const __nv_bfloat16* __restrict__ k_in, const __nv_bfloat16* __restrict__ w_in,
                                       const __nv_bfloat16* __restrict__ u_in, const float* __restrict__ g_in,
                                       const float* __restrict__ h0, __nv_bfloat16* __restrict__ h_out,
                                       __nv_bfloat16* __restrict__ v_new, float* __restrict__ final_state,
                                       const GatedDeltaNetChunkParams* __restrict__ pp) {
    extern __shared__ __align__(16) unsigned char dyn[];
    __nv_bfloat16* hb = reinterpret_cast<__nv_bfloat16*>(dyn);                    // [BV][LDH]
    __nv_bfloat16* stage = hb + BV * LDH;                                          // [BV][LDS]
    float* gs = reinterpret_cast<float*>(stage + BV * LDS);                        // [BT]
    __shared__ __align__(16) __nv_bfloat16 kt[BT * LDK];                           // [BT][LDK]

    const GatedDeltaNetChunkParams p = *pp;
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u32 gq = lane >> 2, tq = lane & 3u;      // mma fragment row group and column pair
    const u32 v0 = blockIdx.x * BV, head = blockIdx.y, b = blockIdx.z;
    const u32 H = p.h, V = p.v, T = p.t, Hg = p.hg, NT = p.nt;
    const u32 kh = head / (H / Hg);

    // State accumulators: st[mi][ni] covers v rows [16mi, 16mi+16), k cols
    // [32warp + 8ni, +8): [0],[1] at (v = 16mi + gq, k = .. + 2tq, +1), [2],[3] at v + 8.
    float st[2][4][4];
    const u64 state0 = ((u64(b) * H + head) * V + v0) * KD;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const u32 kc = 32u * warp + 8u * ni + 2u * tq;
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const u32 vr = 16u * mi + gq + 8u * hr;
                const float2 x = *reinterpret_cast<const float2*>(h0 + state0 + u64(vr) * KD + kc);
                st[mi][ni][2 * hr] = x.x;
                st[mi][ni][2 * hr + 1] = x.y;
            }
        }
    }

    // Next chunk's operands, loaded into registers one chunk ahead so their
    // global latency overlaps the current chunk's products: kr the k rows
    // (8 x 16 bytes per thread), wr this warp's w A fragments (t rows
    // [16 warp, +16), all of K), ur the u pairs step 3 reads, gr g[tid] and
    // glr g[last].
    uint4 kr[BT * KD / 8 / NTH];
    u32 wr[KD / 16][4];
    u32 ur[4][2];
    float gr = 0.0f, glr;
    const u32 t_lo = 16u * warp + gq;
    const u32 kh_off = kh * KD;
    auto prefetch = [&](u32 c) {
        const u64 tok0 = u64(b) * T + u64(c) * BT;
        glr = __ldg(g_in + (tok0 + BT - 1) * H + head);
        if (tid < BT) gr = __ldg(g_in + (tok0 + tid) * H + head);
        const __nv_bfloat16* kp = k_in + tok0 * Hg * KD + kh_off;
#pragma unroll
        for (u32 r = 0; r < BT * KD / 8 / NTH; ++r) {
            const u32 e = tid + r * NTH;
            const u32 t = e / (KD / 8), q = e % (KD / 8);
            kr[r] = __ldg(reinterpret_cast<const uint4*>(kp + u64(t) * Hg * KD + q * 8));
        }
        const __nv_bfloat16* w_lo = w_in + ((tok0 + t_lo) * H + head) * KD;
        const __nv_bfloat16* w_hi = w_in + ((tok0 + t_lo + 8) * H + head) * KD;
#pragma unroll
        for (u32 kk = 0; kk < KD / 16; ++kk) {
            wr[kk][0] = __ldg(reinterpret_cast<const unsigned int*>(w_lo + 16 * kk + 2 * tq));
            wr[kk][1] = __ldg(reinterpret_cast<const unsigned int*>(w_hi + 16 * kk + 2 * tq));
            wr[kk][2] = __ldg(reinterpret_cast<const unsigned int*>(w_lo + 16 * kk + 8 + 2 * tq));
            wr[kk][3] = __ldg(reinterpret_cast<const unsigned int*>(w_hi + 16 * kk + 8 + 2 * tq));
        }
#pragma unroll
        for (int nj = 0; nj < 4; ++nj)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const u64 uv = ((tok0 + t_lo + 8u * hr) * H + head) * V + v0 + 8u * nj + 2u * tq;
                ur[nj][hr] = __ldg(reinterpret_cast<const unsigned int*>(u_in + uv));
            }
    };
    prefetch(0);

    for (u32 c = 0; c < NT; ++c) {
        const u64 tok0 = u64(b) * T + u64(c) * BT;   // first token, flat over (b, t)
        // This chunk's operands out of the prefetch registers, then the next chunk's loads.
        uint4 kc_[BT * KD / 8 / NTH];
        u32 wc[KD / 16][4];
        u32 uc[4][2];
#pragma unroll
        for (u32 r = 0; r < BT * KD / 8 / NTH; ++r) kc_[r] = kr[r];
#pragma unroll
        for (u32 kk = 0; kk < KD / 16; ++kk)
#pragma unroll
            for (int i = 0; i < 4; ++i) wc[kk][i] = wr[kk][i];
#pragma unroll
        for (int nj = 0; nj < 4; ++nj)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) uc[nj][hr] = ur[nj][hr];
        const float g_last = glr, g_tid = gr;
        if (c + 1 < NT) prefetch(c + 1);
        __syncthreads();                             // the previous chunk is done with hb, stage, kt, gs

        // 1. bf16 snapshot, chunk k rows and g, decay of the state.
        const float decay = expf(g_last);
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                const u32 kc = 32u * warp + 8u * ni + 2u * tq;
#pragma unroll
                for (int hr = 0; hr < 2; ++hr) {
                    const u32 vr = 16u * mi + gq + 8u * hr;
                    *reinterpret_cast<u32*>(hb + vr * LDH + kc) = pack_bf16(st[mi][ni][2 * hr], st[mi][ni][2 * hr + 1]);
                    st[mi][ni][2 * hr] *= decay;
                    st[mi][ni][2 * hr + 1] *= decay;
                }
            }
        }
        if (tid < BT) gs[tid] = g_tid;
#pragma unroll
        for (u32 r = 0; r < BT * KD / 8 / NTH; ++r) {
            const u32 e = tid + r * NTH;
            const u32 t = e / (KD / 8), q = e % (KD / 8);
            *reinterpret_cast<uint4*>(kt + t * LDK + q * 8) = kc_[r];
        }
        __syncthreads();
        {
            __nv_bfloat16* hsnap = h_out + ((u64(b) * NT + c) * H + head) * V * KD + u64(v0) * KD;
#pragma unroll
            for (u32 r = 0; r < BV * KD / 8 / NTH; ++r) {   // 4 uint4 per thread
                const u32 e = tid + r * NTH;
                const u32 vr = e / (KD / 8), q = e % (KD / 8);
                *reinterpret_cast<uint4*>(hsnap + u64(vr) * KD + q * 8) =
                    *reinterpret_cast<const uint4*>(hb + vr * LDH + q * 8);
            }
        }

        // 2. x[t, v] for t in [16 warp, 16 warp + 16), v in [0, 32): 4 n-tiles of 8 v.
        float xa[4][4];
#pragma unroll
        for (int nj = 0; nj < 4; ++nj) {
#pragma unroll
            for (int i = 0; i < 4; ++i) xa[nj][i] = 0.0f;
        }
#pragma unroll
        for (u32 kk = 0; kk < KD / 16; ++kk) {
            const u32 k0 = 16u * kk;
#pragma unroll
            for (int nj = 0; nj < 4; nj += 2) {
                // matrices: (n-tile nj, k0), (nj, k0+8), (nj+1, k0), (nj+1, k0+8)
                const u32 m = lane >> 3, rr = lane & 7u;
                const u32 vrow = 8u * (nj + (m >> 1)) + rr;
                u32 b0, b1, b2, b3;
                ldsm_x4(hb + vrow * LDH + k0 + 8u * (m & 1u), b0, b1, b2, b3);
                mma_bf16(xa[nj], wc[kk], b0, b1);
                mma_bf16(xa[nj + 1], wc[kk], b2, b3);
            }
        }

        // 3. vn = u - x -> v_new; vg = bf16(vn * exp(g_last - g[t])) -> stage[v][t].
#pragma unroll
        for (int nj = 0; nj < 4; ++nj) {
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const u32 tl = t_lo + 8u * hr;
                const u32 vl = 8u * nj + 2u * tq;
                const u64 uv = ((tok0 + tl) * H + head) * V + v0 + vl;
                const float2 uf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&uc[nj][hr]));
                const float vn0 = uf.x - xa[nj][2 * hr];
                const float vn1 = uf.y - xa[nj][2 * hr + 1];
                *reinterpret_cast<u32*>(v_new + uv) = pack_bf16(vn0, vn1);
                const float gate = expf(g_last - gs[tl]);
                stage[vl * LDS + tl] = __float2bfloat16_rn(vn0 * gate);
                stage[(vl + 1) * LDS + tl] = __float2bfloat16_rn(vn1 * gate);
            }
        }
        __syncthreads();

        // 4. h[v, k] += sum_t stage[v, t] * kt[t, k]; warp w: k cols [32w, 32w + 32).
#pragma unroll
        for (u32 t0 = 0; t0 < BT; t0 += 16) {
            u32 a[2][4];
            {
                const u32 m = lane >> 3, rr = lane & 7u;
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) {
                    // matrices: (rows 0-7, t0), (rows 8-15, t0), (rows 0-7, t0+8), (rows 8-15, t0+8)
                    const u32 vrow = 16u * mi + rr + 8u * (m & 1u);
                    ldsm_x4(stage + vrow * LDS + t0 + 8u * (m >> 1), a[mi][0], a[mi][1], a[mi][2], a[mi][3]);
                }
            }
#pragma unroll
            for (int ni = 0; ni < 4; ni += 2) {
                const u32 m = lane >> 3, rr = lane & 7u;
                // matrices: (t0.., n-tile ni), (t0+8.., ni), (t0.., ni+1), (t0+8.., ni+1)
                const u32 trow = t0 + rr + 8u * (m & 1u);
                const u32 kcol = 32u * warp + 8u * (ni + (m >> 1));
                u32 b0, b1, b2, b3;
                ldsm_x4_trans(kt + trow * LDK + kcol, b0, b1, b2, b3);
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) {
                    mma_bf16(st[mi][ni], a[mi], b0, b1);
                    mma_bf16(st[mi][ni + 1], a[mi], b2, b3);
                }
            }
        }
    }

#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const u32 kc = 32u * warp + 8u * ni + 2u * tq;
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
                const u32 vr = 16u * mi + gq + 8u * hr;
                *reinterpret_cast<float2*>(final_state + state0 + u64(vr) * KD + kc) =
                    make_float2(st[mi][ni][2 * hr], st[mi][ni][2 * hr + 1]);
            }
        }
    }
}
