// chunk_gated_delta_rule (CUDA): the steps of the chunked gated delta rule
// forward; entry points, bindings, threads and semantics as
// shaders/chunk_gated_delta_rule.metal (read its header for the math, the
// chunk tables and the layouts), grids as well but for kkt_solve_wu and
// chunk_o (their comments say how). Chunks of BT = 64 tokens; the chunk tables
// are u32 pairs: chunks [nt] (first token, length 1..64), seqs [n_seq + 1]
// (first token, first chunk; then n_tok, nt). Token-indexed operands are
// staged in shared memory with the rows past the chunk's length zeroed, so a
// short chunk never reads past its sequence and every product runs on full
// tiles. Every kernel uses static shared memory (at most 48 KiB) but three that
// take the threadgroup memory their host binds as dynamic shared memory: the
// seed's gated_delta_net_chunk_inter_state_bf16 (20 KiB), the walk at K 128
// (its ring of two chunks' operands, 80384 bytes) and chunk_o (its operands
// whole, up to 149 KiB). The seed's two
// entries (that one and chunk_local_cumsum_g_f32) call the bodies of the
// varlen kernels.
//
// Tensor cores: mma.sync m16n8k16 bf16 x bf16 -> f32, fragments by ldmatrix
// from shared rows padded by 16 bytes (8 row addresses of one ldmatrix fall in
// distinct banks). Fragment names: lane = 4 gq + tq; an m16n8 accumulator
// holds (row gq, cols 2tq, 2tq+1) in [0], [1] and row gq + 8 in [2], [3].
//   kkt        k k^T, bf16 operands as the Metal kernel
//   recompute_wu  Ai (beta exp(g) k) and Ai (beta v) have f32 operands in the
//              Metal kernel; here each operand is split into bf16 hi + lo and
//              the product is hi hi + hi lo + lo hi (relative error ~1e-5,
//              far under the bf16 rounding of w and u)
//   kkt_solve_wu  kkt, the solve and w/u of a chunk in one block (the op's
//              dispatch): A and T in shared memory, w and u as T diag(c) split
//              into bf16 hi + lo times the raw bf16 k or v rows
//   inter_state  w bf16(h)^T and vg k, the state in registers, operands
//              loaded one chunk ahead (at K 128 into a ring of shared memory)
//   chunk_o    q k^T, q h^T and P v_new, every operand staged at once; P stays
//              in registers (the C layout of two m16n8 tiles is the A layout
//              of one m16k16 tile)
// The tri-solve is f32 forward substitution, one column per thread; the fused
// kernel's is blocked by 16 (diagonal blocks by substitution, the rest by
// f32 block products).

typedef ChunkGatedDeltaRuleParams Params;

namespace {

constexpr u32 BT = 64;   // tokens per chunk

// The chunk and sequence tables come from the caller's buffers: an entry that
// does not lie inside the tokens (or the chunks) is skipped, so a table written
// wrong reads and writes nothing out of bounds. The whole block reads the same
// entry, so it returns as one, before any barrier.
__device__ __forceinline__ bool chunk_ok(uint2 ch, u32 n_tok) {
    return ch.y >= 1 && ch.y <= BT && ch.x < n_tok && ch.y <= n_tok - ch.x;
}
__device__ __forceinline__ bool seq_ok(uint2 first, uint2 next, u32 n_tok, u32 nt) {
    return first.x <= next.x && next.x <= n_tok && first.y <= next.y && next.y <= nt &&
           next.y - first.y == (next.x - first.x + BT - 1) / BT;
}

// dst[r * ld + c] = src[r * stride + c] for r < len, 0 for r in [len, 64); c < ncols
// (a multiple of 8, 16-byte aligned rows), 16-byte cp.async copies: every copy of
// the thread is in flight at once. The caller commits and waits (cp_async_wait)
// before the barrier that publishes dst.
__device__ __forceinline__ void stage_rows(bf16* dst, u32 ld, const bf16* src, u64 stride, u32 ncols, u32 len,
                                           u32 tid, u32 nth) {
    const u32 q8 = ncols / 8u;
    for (u32 e = tid; e < BT * q8; e += nth) {
        const u32 r = e / q8, q = e % q8;
        const bool live = r < len;
        cp_async16(dst + r * ld + q * 8u, src + (live ? u64(r) * stride + q * 8u : 0u), live);
    }
}

__device__ __forceinline__ float load_beta(const float* b, u64 i) { return b[i]; }
__device__ __forceinline__ float load_beta(const bf16* b, u64 i) { return __bfloat162float(b[i]); }

}  // namespace

// ---------------------------------------------------------------------------
// The chunk-local cumsum of the log decay, g_cum[t, h] = sum of g_in[s, h]
// for s from the first token of t's chunk through t: one thread per token of
// the chunk, the scan below.

// Inclusive prefix sum of x over the lanes of mask (the warp's first lanes),
// in lane order, by shuffles.
__device__ __forceinline__ float warp_prefix_sum(float x, u32 lane, u32 mask) {
#pragma unroll
    for (u32 d = 1; d < 32; d <<= 1) {
        const float y = __shfl_up_sync(mask, x, d);
        if (lane >= d) x += y;
    }
    return x;
}

// Inclusive prefix sum of x over the threads of the block, in thread order: a
// warp scan (warp_prefix_sum), then each thread adds the totals of the warps
// before its own (warp_total: one float per warp). The block may end in a
// partial warp. Every thread calls it.
__device__ __forceinline__ float block_prefix_sum(float x, float* warp_total) {
    const u32 i = threadIdx.x, lane = i & 31u, warp = i >> 5;
    const u32 n = min(32u, blockDim.x - (warp << 5));
    const u32 mask = n == 32u ? 0xffffffffu : ((1u << n) - 1u);
    x = warp_prefix_sum(x, lane, mask);
    if (lane == n - 1) warp_total[warp] = x;
    __syncthreads();
    float offset = 0.0f;
    for (u32 s = 0; s < warp; ++s) offset += warp_total[s];
    return x + offset;
}

// chunk_local_cumsum_varlen_g_f32: chunks from the table. Grid here
// (nt, ceil(H / 32)) of 256 threads (the Metal kernel's is (nt, H) of 64): a
// block takes a chunk and 32 heads. The chunk's g rows come through shared
// memory (a warp reads a token's 32 heads as one 128-byte row); each warp
// scans 4 heads, a head as block_prefix_sum scans it at 64 threads (tokens
// 0..31 and 32..63 by warp_prefix_sum, the second half plus the first's
// total), so the sums are the seed entry's bit for bit.
// Bindings: 0 g_in, 1 g_cum, 2 chunks, 3 params.
extern "C" __global__ void __launch_bounds__(256)
chunk_local_cumsum_varlen_g_f32(const float* __restrict__ g_in, float* __restrict__ g_cum,
                                const uint2* __restrict__ chunks, const Params* __restrict__ pp) {
    __shared__ float tile[BT][33];   // [token][head of the block]
    const uint2 ch = chunks[blockIdx.x];
    if (!chunk_ok(ch, pp->n_tok)) return;
    const u32 H = pp->h, lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, head = blockIdx.y * 32u + lane;
#pragma unroll
    for (u32 r = warp; r < BT; r += 8u) tile[r][lane] = head < H && r < ch.y ? g_in[u64(ch.x + r) * H + head] : 0.0f;
    __syncthreads();
#pragma unroll
    for (u32 c = 4u * warp; c < 4u * warp + 4u; ++c) {
        const float lo = warp_prefix_sum(tile[lane][c], lane, 0xffffffffu);
        const float hi = warp_prefix_sum(tile[32u + lane][c], lane, 0xffffffffu) + (0.0f + __shfl_sync(0xffffffffu, lo, 31));
        tile[lane][c] = lo + 0.0f;
        tile[32u + lane][c] = hi;
    }
    __syncthreads();
#pragma unroll
    for (u32 r = warp; r < BT; r += 8u)
        if (head < H && r < ch.y) g_cum[u64(ch.x + r) * H + head] = tile[r][lane];
}

// chunk_local_cumsum_g_f32: B sequences of T tokens [B, T, H], chunks of
// params.bt tokens (at most 1024; the last one may be partial). Grid
// (1, H, B * NT), block (BT, 1, 1); threads past T add 0 and write nothing.
// Bindings: 0 g_in, 1 g_cumsum, 2 params.
extern "C" __global__ void chunk_local_cumsum_g_f32(const float* g_in, float* g_cumsum,
                                                    const ChunkLocalCumsumParams* p) {
    __shared__ float warp_total[32];
    const u32 H = p->h, T = p->t;
    const u32 i_h = blockIdx.y;
    const u32 b = blockIdx.z / p->nt;
    const u32 i_t = blockIdx.z % p->nt;
    if (b >= p->b || i_h >= H) return;
    const u32 i = threadIdx.x;
    const u32 t = i_t * p->bt + i;
    const bool live = i < p->bt && t < T;
    const u64 at = (u64(b) * T + t) * H + i_h;
    const float x = block_prefix_sum(live ? g_in[at] : 0.0f, warp_total);
    if (live) g_cumsum[at] = x;
}

// ---------------------------------------------------------------------------
// gated_delta_net_kkt_bf16: A[i, j] = beta_i exp(g_i - g_j) k_i . k_j for
// j < i < len, 0 for the other columns of the chunk's rows (rows past len are
// not written). Grid (nt, H), 256 threads = 8 warps: warp w owns rows
// [16 (w / 2), +16) and columns [32 (w % 2), +32) of k k^T; a warp whose
// columns all lie right of its rows only writes zeros. The chunk's k rows
// [64][K] are staged whole (K <= 256: 33 KiB).
// Bindings: 0 k, 1 g (cumsummed), 2 beta, 3 a, 4 chunks, 5 params.
template <typename BetaT>
__device__ __forceinline__ void kkt_body(const bf16* __restrict__ k_in, const float* __restrict__ g,
                                         const BetaT* __restrict__ beta, float* __restrict__ a_out,
                                         const uint2* __restrict__ chunks, const Params* __restrict__ pp) {
    constexpr u32 LDK = 256 + 8;
    __shared__ __align__(16) bf16 ks[BT * LDK];
    __shared__ float gs[BT], bs[BT];
    const Params p = *pp;
    const uint2 ch = chunks[blockIdx.x];
    if (!chunk_ok(ch, pp->n_tok)) return;
    const u32 t0 = ch.x, len = ch.y, head = blockIdx.y, K = p.k;
    const u32 kh = head / (p.h / p.hg);
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5, gq = lane >> 2, tq = lane & 3u;

    stage_rows(ks, LDK, k_in + (u64(t0) * p.hg + kh) * K, u64(p.hg) * K, K, len, tid, 256u);
    cp_async_commit();
    if (tid < BT) {
        const bool live = tid < len;
        const u64 at = u64(t0 + tid) * p.h + head;
        gs[tid] = live ? g[at] : 0.0f;
        bs[tid] = live ? load_beta(beta, at) : 0.0f;
    }
    cp_async_wait<0>();
    __syncthreads();

    const u32 mt = warp >> 1, c0 = 32u * (warp & 1u), r0 = 16u * mt;
    float acc[4][4];
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[ni][e] = 0.0f;
    if (c0 < r0 + 16u) {
        for (u32 k0 = 0; k0 < K; k0 += 16) {
            u32 a[4];
            frag_a(a, ks, LDK, r0, k0, lane);
#pragma unroll
            for (int ni = 0; ni < 4; ni += 2) {
                mma_b16<true>(acc[ni], acc[ni + 1], a, ks, LDK, c0 + 8u * ni, k0, lane);
            }
        }
    }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const u32 i = r0 + gq + 8u * hr;
        if (i >= len) continue;
        const float gi = gs[i], bi = bs[i];
        float* row = a_out + (u64(t0 + i) * p.h + head) * BT;
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const u32 j = c0 + 8u * ni + 2u * tq;
            const float x0 = j < i ? bi * expf(gi - gs[j]) * acc[ni][2 * hr] : 0.0f;
            const float x1 = j + 1u < i ? bi * expf(gi - gs[j + 1]) * acc[ni][2 * hr + 1] : 0.0f;
            *reinterpret_cast<float2*>(row + j) = make_float2(x0, x1);
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
gated_delta_net_kkt_bf16(const bf16* __restrict__ k_in, const float* __restrict__ g, const float* __restrict__ beta,
                         float* __restrict__ a_out, const uint2* __restrict__ chunks, const Params* __restrict__ pp) {
    kkt_body<float>(k_in, g, beta, a_out, chunks, pp);
}
extern "C" __global__ void __launch_bounds__(256)
gated_delta_net_kkt_bf16_beta_bf16(const bf16* __restrict__ k_in, const float* __restrict__ g,
                                   const bf16* __restrict__ beta, float* __restrict__ a_out,
                                   const uint2* __restrict__ chunks, const Params* __restrict__ pp) {
    kkt_body<bf16>(k_in, g, beta, a_out, chunks, pp);
}

// ---------------------------------------------------------------------------
// chunk_tri_solve_invert_f32: Ai = (I + A)^-1 per chunk, A strictly lower
// triangular (only j < i < len is read; the rest counts as 0). Grid (nt, H),
// 64 threads: thread c computes column c of X = Ai in registers, row by row,
//   X[r, c] = [r == c] - sum_{j < r} A[r, j] X[j, c],
// which gives X[r, c] = 0 for r < c and 1 at r = c exactly, so every thread
// runs the same unrolled code. Rows go in blocks of 16: the part of the sum
// over earlier blocks accumulates 16 rows at once (A read as float4
// broadcasts), then the block's own triangle. Warp 1's columns (c >= 32) are
// zero in rows < 32, so it skips those terms. The sums run in ascending j,
// the order of the Metal kernel. The chunk of A is read whole before any row
// of Ai is written, so a and ai may be one buffer.
// Bindings: 0 a, 1 ai, 2 chunks, 3 params.
extern "C" __global__ void __launch_bounds__(64)
chunk_tri_solve_invert_f32(const float* a, float* ai, const uint2* __restrict__ chunks,
                           const Params* __restrict__ pp) {
    __shared__ __align__(16) float s[BT * BT];
    const uint2 ch = chunks[blockIdx.x];
    if (!chunk_ok(ch, pp->n_tok)) return;
    const u32 t0 = ch.x, len = ch.y, head = blockIdx.y, H = pp->h;
    const u32 c = threadIdx.x, warp = c >> 5;

    for (u32 e = c; e < BT * BT / 4; e += BT) {
        const u32 i = e / 16u, j = 4u * (e % 16u);
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < len && j < i) {
            x = *reinterpret_cast<const float4*>(a + (u64(t0 + i) * H + head) * BT + j);
            if (j + 1u >= i) x.y = 0.0f;
            if (j + 2u >= i) x.z = 0.0f;
            if (j + 3u >= i) x.w = 0.0f;
        }
        *reinterpret_cast<float4*>(s + e * 4u) = x;
    }
    __syncthreads();

    float x[BT];
#pragma unroll
    for (int I = 0; I < 4; ++I) {
        if (16u * I + 16u <= 32u * warp) {
#pragma unroll
            for (int r = 0; r < 16; ++r) x[16 * I + r] = 0.0f;
            continue;
        }
        float acc[16];
#pragma unroll
        for (int r = 0; r < 16; ++r) acc[r] = 0.0f;
#pragma unroll
        for (int j = 0; j < 16 * I; j += 4) {
            if (u32(j) + 4u > 32u * warp) {
#pragma unroll
                for (int r = 0; r < 16; ++r) {
                    const float4 av = *reinterpret_cast<const float4*>(s + (16 * I + r) * BT + j);
                    acc[r] = fmaf(av.x, x[j], acc[r]);
                    acc[r] = fmaf(av.y, x[j + 1], acc[r]);
                    acc[r] = fmaf(av.z, x[j + 2], acc[r]);
                    acc[r] = fmaf(av.w, x[j + 3], acc[r]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            const int row = 16 * I + r;
            float sum = acc[r];
#pragma unroll
            for (int jj = 0; jj < r; ++jj) sum = fmaf(s[row * BT + 16 * I + jj], x[16 * I + jj], sum);
            x[row] = (u32(row) == c ? 1.0f : 0.0f) - sum;
        }
    }
#pragma unroll
    for (int i = 0; i < int(BT); ++i) {
        if (u32(i) < len) ai[(u64(t0 + i) * H + head) * BT + c] = x[i];
    }
}

// ---------------------------------------------------------------------------
// gated_delta_net_recompute_wu_bf16: per chunk,
//   w[i] = bf16(sum_j Ai[i, j] beta_j exp(g_j) k_j),  u[i] = bf16(sum_j Ai[i, j] beta_j v_j).
// Ai is read where j / 8 <= i / 8 (the 8x8 tiles the Metal kernel sums), the
// scaled rows are formed in f32; both are split into bf16 hi + lo for three
// tensor-core products. Grid (nt, H), 256 threads = 8 warps: per 64-column
// slice (K / 64 slices of w, then V / 64 of u) warp w owns rows
// [16 (w / 2), +16) and columns [32 (w % 2), +32), summing j tiles 0..w / 2.
// Bindings: 0 k, 1 v, 2 beta, 3 g (cumsummed), 4 ai, 5 w, 6 u, 7 chunks, 8 params.
template <typename BetaT>
__device__ __forceinline__ void wu_body(const bf16* __restrict__ k_in, const bf16* __restrict__ v_in,
                                        const BetaT* __restrict__ beta, const float* __restrict__ g,
                                        const float* __restrict__ ai, bf16* __restrict__ w_out,
                                        bf16* __restrict__ u_out, const uint2* __restrict__ chunks,
                                        const Params* __restrict__ pp) {
    constexpr u32 LD = BT + 8;   // 72 bf16 per row
    __shared__ __align__(16) bf16 ah[BT * LD], al[BT * LD], xh[BT * LD], xl[BT * LD];
    __shared__ float coef[2 * BT];   // beta exp(g), beta per row
    const Params p = *pp;
    const uint2 ch = chunks[blockIdx.x];
    if (!chunk_ok(ch, pp->n_tok)) return;
    const u32 t0 = ch.x, len = ch.y, head = blockIdx.y;
    const u32 H = p.h, K = p.k, V = p.v, kh = head / (H / p.hg);
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;

    for (u32 e = tid; e < BT * BT / 4; e += 256u) {
        const u32 i = e / 16u, j = 4u * (e % 16u);
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < len && j / 8u <= i / 8u) x = *reinterpret_cast<const float4*>(ai + (u64(t0 + i) * H + head) * BT + j);
        const float f[4] = {x.x, x.y, x.z, x.w};
        u32 hp[2], lp[2];
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            const __nv_bfloat162 hi = __floats2bfloat162_rn(f[2 * q], f[2 * q + 1]);
            const float2 hf = __bfloat1622float2(hi);
            hp[q] = *reinterpret_cast<const u32*>(&hi);
            lp[q] = pack_bf16(f[2 * q] - hf.x, f[2 * q + 1] - hf.y);
        }
        *reinterpret_cast<uint2*>(ah + i * LD + j) = make_uint2(hp[0], hp[1]);
        *reinterpret_cast<uint2*>(al + i * LD + j) = make_uint2(lp[0], lp[1]);
    }
    if (tid < BT) {
        const bool live = tid < len;
        const u64 at = u64(t0 + tid) * H + head;
        const float b = live ? load_beta(beta, at) : 0.0f;
        coef[tid] = live ? b * expf(g[at]) : 0.0f;
        coef[BT + tid] = b;
    }

    const u32 mt = warp >> 1, r0 = 16u * mt, c0 = 32u * (warp & 1u);
    const u32 nk = K / 64u;
    for (u32 sl = 0; sl < nk + V / 64u; ++sl) {
        const bool is_w = sl < nk;
        const u32 col0 = (is_w ? sl : sl - nk) * 64u;
        const bf16* src = is_w ? k_in + (u64(t0) * p.hg + kh) * K + col0 : v_in + (u64(t0) * H + head) * V + col0;
        const u64 src_row = is_w ? u64(p.hg) * K : u64(H) * V;
        const float* cf = is_w ? coef : coef + BT;

        __syncthreads();   // coef and Ai staged; the previous slice's products are done with xh, xl
        for (u32 e = tid; e < BT * 8u; e += 256u) {
            const u32 r = e / 8u, q = e % 8u;
            uint4 raw = make_uint4(0u, 0u, 0u, 0u);
            if (r < len) raw = __ldg(reinterpret_cast<const uint4*>(src + u64(r) * src_row + 8u * q));
            const float c = cf[r];
            const u32 wd[4] = {raw.x, raw.y, raw.z, raw.w};
            u32 hp[4], lp[4];
#pragma unroll
            for (int m = 0; m < 4; ++m) {
                const float2 xf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&wd[m]));
                const float x0 = c * xf.x, x1 = c * xf.y;
                const __nv_bfloat162 hi = __floats2bfloat162_rn(x0, x1);
                const float2 hf = __bfloat1622float2(hi);
                hp[m] = *reinterpret_cast<const u32*>(&hi);
                lp[m] = pack_bf16(x0 - hf.x, x1 - hf.y);
            }
            *reinterpret_cast<uint4*>(xh + r * LD + 8u * q) = make_uint4(hp[0], hp[1], hp[2], hp[3]);
            *reinterpret_cast<uint4*>(xl + r * LD + 8u * q) = make_uint4(lp[0], lp[1], lp[2], lp[3]);
        }
        __syncthreads();

        float acc[4][4];
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[ni][e] = 0.0f;
        for (u32 jt = 0; jt <= mt; ++jt) {
            u32 a_h[4], a_l[4];
            frag_a(a_h, ah, LD, r0, 16u * jt, lane);
            frag_a(a_l, al, LD, r0, 16u * jt, lane);
#pragma unroll
            for (int ni = 0; ni < 4; ni += 2) {
                u32 b_h[4], b_l[4];
                frag_b_kn(b_h, xh, LD, c0 + 8u * ni, 16u * jt, lane);
                frag_b_kn(b_l, xl, LD, c0 + 8u * ni, 16u * jt, lane);
                mma_bf16(acc[ni], a_l, b_h[0], b_h[1]);
                mma_bf16(acc[ni + 1], a_l, b_h[2], b_h[3]);
                mma_bf16(acc[ni], a_h, b_l[0], b_l[1]);
                mma_bf16(acc[ni + 1], a_h, b_l[2], b_l[3]);
                mma_bf16(acc[ni], a_h, b_h[0], b_h[1]);
                mma_bf16(acc[ni + 1], a_h, b_h[2], b_h[3]);
            }
        }

        bf16* dst = is_w ? w_out + (u64(t0) * H + head) * K + col0 : u_out + (u64(t0) * H + head) * V + col0;
        const u64 dst_row = is_w ? u64(H) * K : u64(H) * V;
        store_acc_rows(dst, dst_row, acc, r0, c0, len, lane);
    }
}

extern "C" __global__ void __launch_bounds__(256)
gated_delta_net_recompute_wu_bf16(const bf16* __restrict__ k_in, const bf16* __restrict__ v_in,
                                  const float* __restrict__ beta, const float* __restrict__ g,
                                  const float* __restrict__ ai, bf16* __restrict__ w_out, bf16* __restrict__ u_out,
                                  const uint2* __restrict__ chunks, const Params* __restrict__ pp) {
    wu_body<float>(k_in, v_in, beta, g, ai, w_out, u_out, chunks, pp);
}
extern "C" __global__ void __launch_bounds__(256)
gated_delta_net_recompute_wu_bf16_beta_bf16(const bf16* __restrict__ k_in, const bf16* __restrict__ v_in,
                                            const bf16* __restrict__ beta, const float* __restrict__ g,
                                            const float* __restrict__ ai, bf16* __restrict__ w_out,
                                            bf16* __restrict__ u_out, const uint2* __restrict__ chunks,
                                            const Params* __restrict__ pp) {
    wu_body<bf16>(k_in, v_in, beta, g, ai, w_out, u_out, chunks, pp);
}

// ---------------------------------------------------------------------------
// gated_delta_net_kkt_solve_wu_bf16: kkt, the triangular solve and w/u of one
// (chunk, head) in one block; A and T = (I + A)^-1 stay in shared memory:
//   A[i, j] = beta_i exp(g_i - g_j) k_i . k_j for j < i < len, else 0   (f32)
//   w = bf16(T diag(beta exp(g)) k),  u = bf16(T diag(beta) v)
// the same values as gated_delta_net_kkt_bf16, chunk_tri_solve_invert_f32 and
// gated_delta_net_recompute_wu_bf16 in turn, up to f32 rounding.
// Grid (H, nt) here (the Metal kernel's is (nt, H)): the heads of a chunk run
// side by side, so the second head of a GQA group finds k in L2 and the w, u
// rows of a token are written together. 256 threads = 8 warps.
// Bindings: 0 k, 1 v, 2 beta, 3 g (cumsummed), 4 w, 5 u, 6 chunks, 7 params.
//
// The k and v rows pass through a ring of two [64][72] bf16 slices of 64
// columns (cp.async, slice s + 1 in flight while s is used): K / 64 slices of
// k for k k^T, the same K / 64 again for w, then V / 64 of v for u, so the
// first w slice loads during the solve.
//   kkt  warp w owns rows [16 (w / 2), +16) and columns [32 (w % 2), +32) of
//        k k^T on tensor cores (bf16 operands, f32 sums); A goes to shared
//        memory scaled and masked, 0 at rows past len.
//   T    blocked by 16: the four diagonal blocks T_dd = (I + A_dd)^-1 by
//        forward substitution (one thread per column), then the blocks below
//        them by diagonals, T_ij = -T_ii (sum_{j <= m < i} A_im T_mj), one
//        thread per element of each 16 x 16 block, in f32. The diagonal
//        blocks overwrite A's (never read again); the six others go to toff,
//        since A's below-diagonal blocks are read until the last one.
//   w, u the A operand is T with its columns scaled by beta exp(g) (or beta),
//        f32, split into bf16 hi + lo and kept as fragments in registers (the
//        warp's row block, column blocks 0..w / 2); the B operand is the raw
//        bf16 k or v slice, so each product is hi x + lo x (relative error
//        ~1e-5, under the bf16 rounding of w and u).
// Shared memory: ring 18 KiB, A / T 64 x 72 f32 18 KiB, toff 9 KiB, 768 B of
// row coefficients: 45.75 KiB; with 64 registers (no spills, nvcc 13 at
// sm_90a) four blocks fit an SM.
namespace {
constexpr u32 FLD = BT + 8;   // bf16 slice rows (144 bytes) and f32 A / T rows
constexpr u32 TLD = 16 + 8;   // f32 rows of the below-diagonal T blocks

// toff slot of T block (i, j), i > j: by diagonals (1,0) (2,1) (3,2) (2,0) (3,1) (3,0).
__device__ __forceinline__ u32 toff_slot(u32 i, u32 j) { return i - j == 1u ? j : i - j == 2u ? 3u + j : 5u; }

// T block (i, j), j <= i: the diagonal ones in at (the A / T array), the others in toff.
__device__ __forceinline__ const float* t_block(const float* at, const float* toff, u32 i, u32 j, u32& ld) {
    if (i == j) {
        ld = FLD;
        return at + 16u * i * FLD + 16u * i;
    }
    ld = TLD;
    return toff + toff_slot(i, j) * 16u * TLD;
}

// The blocks of one diagonal of T below the main one (dist = i - j), one
// thread per element (r, c) = (tid / 16, tid % 16) of each: y = sum over
// j <= m < i of A_im T_mj into the block's toff slot, then T_ij = -T_ii y.
template <u32 DIST>
__device__ __forceinline__ void solve_diagonal(float* at, float* toff, u32 tid) {
    constexpr u32 NB = 4u - DIST;
    const u32 r = tid >> 4, c = tid & 15u;
    float y[NB];
#pragma unroll
    for (u32 b = 0; b < NB; ++b) {
        const u32 i = b + DIST, j = b;
        const float* arow = at + (16u * i + r) * FLD;
        float s = 0.0f;
#pragma unroll
        for (u32 m = j; m < i; ++m) {
            u32 ld;
            const float* tm = t_block(at, toff, m, j, ld);
#pragma unroll
            for (u32 e = 0; e < 16; ++e) s = fmaf(arow[16u * m + e], tm[e * ld + c], s);
        }
        y[b] = s;
    }
#pragma unroll
    for (u32 b = 0; b < NB; ++b) toff[toff_slot(b + DIST, b) * 16u * TLD + r * TLD + c] = y[b];
    __syncthreads();
#pragma unroll
    for (u32 b = 0; b < NB; ++b) {
        const u32 i = b + DIST;
        const float* tii = at + (16u * i + r) * FLD + 16u * i;
        const float* yb = toff + toff_slot(i, b) * 16u * TLD;
        float s = 0.0f;
#pragma unroll
        for (u32 e = 0; e < 16; ++e) s = fmaf(tii[e], yb[e * TLD + c], s);
        y[b] = -s;
    }
    __syncthreads();
#pragma unroll
    for (u32 b = 0; b < NB; ++b) toff[toff_slot(b + DIST, b) * 16u * TLD + r * TLD + c] = y[b];
    __syncthreads();
}

// acc += a[0 .. 16) times the 16 rows of t (rows ld floats apart) at
// columns c .. c + 3, by float4 reads of a and of each row of t.
__device__ __forceinline__ void row16_fma4(float4& acc, const float* a, const float* t, u32 ld, u32 c) {
#pragma unroll
    for (u32 e4 = 0; e4 < 16; e4 += 4) {
        const float4 a4 = *reinterpret_cast<const float4*>(a + e4);
        const float av[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
        for (u32 ee = 0; ee < 4; ++ee) {
            const float4 t4 = *reinterpret_cast<const float4*>(t + (e4 + ee) * ld + c);
            acc.x = fmaf(av[ee], t4.x, acc.x);
            acc.y = fmaf(av[ee], t4.y, acc.y);
            acc.z = fmaf(av[ee], t4.z, acc.z);
            acc.w = fmaf(av[ee], t4.w, acc.w);
        }
    }
}

// The same diagonal, four columns per thread: thread tid < 64 NB takes block
// b = tid / 64, row r = (tid / 4) % 16 and columns [4 (tid % 4), +4), reading
// A and T_ii rows and T rows as float4 (a quarter of the shared-memory
// requests per product of solve_diagonal). Each element's sums run in the
// same order as there, so T is the same bit for bit.
template <u32 DIST>
__device__ __forceinline__ void solve_diagonal4(float* at, float* toff, u32 tid) {
    constexpr u32 NB = 4u - DIST;
    const u32 b = tid >> 6, r = (tid >> 2) & 15u, c = 4u * (tid & 3u);
    const bool act = b < NB;
    const u32 i = b + DIST, j = b;
    float4 y = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (act) {
        const float* arow = at + (16u * i + r) * FLD;
#pragma unroll
        for (u32 mm = 0; mm < DIST; ++mm) {
            const u32 m = j + mm;
            u32 ld;
            const float* tm = t_block(at, toff, m, j, ld);
            row16_fma4(y, arow + 16u * m, tm, ld, c);
        }
    }
    float* yb = toff + toff_slot(act ? i : 1u, act ? j : 0u) * 16u * TLD;
    if (act) *reinterpret_cast<float4*>(yb + r * TLD + c) = y;
    __syncthreads();
    float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (act) {
        const float* tii = at + (16u * i + r) * FLD + 16u * i;
        row16_fma4(s, tii, yb, TLD, c);
    }
    __syncthreads();
    if (act) *reinterpret_cast<float4*>(yb + r * TLD + c) = make_float4(-s.x, -s.y, -s.z, -s.w);
    __syncthreads();
}

// The WY step's parts (kkt_solve_wu_body's phases); warp w owns row block
// mt = w / 2, rows [r0, +16) = [16 mt, +16), and columns [c0, +32) =
// [32 (w % 2), +32).

// The warp's k k^T sums over one 64-column slice of k rows (ld elements
// apart); a warp whose columns lie right of its rows has none.
__device__ __forceinline__ void wy_kkt_slice(float (&acc)[4][4], const bf16* sl, u32 ld, u32 r0, u32 c0, u32 lane) {
    if (c0 >= r0 + 16u) return;
#pragma unroll
    for (u32 kk = 0; kk < 64u; kk += 16u) {
        u32 a[4];
        frag_a(a, sl, ld, r0, kk, lane);
#pragma unroll
        for (int ni = 0; ni < 4; ni += 2) mma_b16<true>(acc[ni], acc[ni + 1], a, sl, ld, c0 + 8u * ni, kk, lane);
    }
}

// A from the warp's sums, scaled and masked: A[i, j] = beta_i exp(g_i - g_j) acc
// for j < i < len, else 0 (gs the g, cu the beta of each token). exp by
// __expf (ex2.approx of x log2 e: a few ulp at the g_i - g_j <= 0 it keeps,
// far under the bf16 rounding of w and u), every element computed and the
// masked ones selected away, without branches.
__device__ __forceinline__ void wy_store_a(float* at, const float (&acc)[4][4], const float* gs, const float* cu, u32 len,
                                           u32 r0, u32 c0, u32 lane) {
    const u32 gq = lane >> 2, tq = lane & 3u;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const u32 i = r0 + gq + 8u * hr;
        const bool live = i < len;
        const float gi = gs[i], bi = cu[i];
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const u32 j = c0 + 8u * ni + 2u * tq;
            const float e0 = bi * __expf(gi - gs[j]) * acc[ni][2 * hr];
            const float e1 = bi * __expf(gi - gs[j + 1]) * acc[ni][2 * hr + 1];
            *reinterpret_cast<float2*>(at + i * FLD + j) = make_float2(live && j < i ? e0 : 0.0f, live && j + 1u < i ? e1 : 0.0f);
        }
    }
}

// T = (I + A)^-1 from A in at (published by a barrier before the call): the
// diagonal blocks in place of A's, the others in toff. Every thread calls it;
// it ends with a barrier.
template <bool S4>
__device__ __forceinline__ void wy_solve(float* at, float* toff, u32 tid) {
    {
        float x[16];
        const u32 d = tid >> 4, c = tid & 15u;
        if (tid < 64u) {
            const float* ad = at + 16u * d * FLD + 16u * d;
#pragma unroll
            for (u32 r = 0; r < 16; ++r) {
                float sum = 0.0f;
                if constexpr (S4) {   // A's row by float4 (the block's columns start 16-byte aligned)
#pragma unroll
                    for (u32 j4 = 0; j4 < r; j4 += 4) {
                        const float4 a4 = *reinterpret_cast<const float4*>(ad + r * FLD + j4);
                        const float av[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
                        for (u32 jj = 0; jj < 4; ++jj)
                            if (j4 + jj < r) sum = fmaf(av[jj], x[j4 + jj], sum);
                    }
                } else {
#pragma unroll
                    for (u32 j = 0; j < r; ++j) sum = fmaf(ad[r * FLD + j], x[j], sum);
                }
                x[r] = (r == c ? 1.0f : 0.0f) - sum;
            }
        }
        __syncthreads();
        if (tid < 64u) {
#pragma unroll
            for (u32 r = 0; r < 16; ++r) at[(16u * d + r) * FLD + 16u * d + c] = x[r];
        }
        __syncthreads();
    }
    if constexpr (S4) {
        solve_diagonal4<1>(at, toff, tid);
        solve_diagonal4<2>(at, toff, tid);
        solve_diagonal4<3>(at, toff, tid);
    } else {
        solve_diagonal<1>(at, toff, tid);
        solve_diagonal<2>(at, toff, tid);
        solve_diagonal<3>(at, toff, tid);
    }
}

// Fragments of T diag(cf) for row block mt, column blocks 0..mt: hi + lo =
// the f32 product, each a bf16 A fragment.
__device__ __forceinline__ void wy_load_t(u32 (&th)[4][4], u32 (&tl)[4][4], const float* at, const float* toff,
                                          const float* cf, u32 mt, u32 lane) {
    const u32 gq = lane >> 2, tq = lane & 3u;
#pragma unroll
    for (u32 jt = 0; jt < 4; ++jt) {
        if (jt > mt) break;
        u32 ld;
        const float* blk = t_block(at, toff, mt, jt, ld);
#pragma unroll
        for (u32 q = 0; q < 4; ++q) {
            const u32 row = gq + 8u * (q & 1u), col = 2u * tq + 8u * (q >> 1);
            const float2 t = *reinterpret_cast<const float2*>(blk + row * ld + col);
            const float x0 = t.x * cf[16u * jt + col], x1 = t.y * cf[16u * jt + col + 1u];
            const __nv_bfloat162 hi = __floats2bfloat162_rn(x0, x1);
            const float2 hf = __bfloat1622float2(hi);
            th[jt][q] = *reinterpret_cast<const u32*>(&hi);
            tl[jt][q] = pack_bf16(x0 - hf.x, x1 - hf.y);
        }
    }
}

// acc = the warp's 16 x 32 of (T diag(c)) x, x a 64-column slice of k or v
// rows (ld elements apart): lo, then hi, times the raw bf16 rows.
__device__ __forceinline__ void wy_slice_product(float (&acc)[4][4], const u32 (&th)[4][4], const u32 (&tl)[4][4],
                                                 const bf16* sl, u32 ld, u32 mt, u32 c0, u32 lane) {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[ni][e] = 0.0f;
#pragma unroll
    for (u32 jt = 0; jt < 4; ++jt) {
        if (jt > mt) break;
#pragma unroll
        for (int ni = 0; ni < 4; ni += 2) {
            u32 b[4];
            frag_b_kn(b, sl, ld, c0 + 8u * ni, 16u * jt, lane);
            mma_bf16(acc[ni], tl[jt], b[0], b[1]);
            mma_bf16(acc[ni + 1], tl[jt], b[2], b[3]);
            mma_bf16(acc[ni], th[jt], b[0], b[1]);
            mma_bf16(acc[ni + 1], th[jt], b[2], b[3]);
        }
    }
}

// The warp's accumulator as bf16 pairs into the 64 x 64 tile ob (rows ld apart).
__device__ __forceinline__ void wy_stage(bf16* ob, u32 ld, const float (&acc)[4][4], u32 r0, u32 c0, u32 lane) {
    const u32 gq = lane >> 2, tq = lane & 3u;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const u32 i = r0 + gq + 8u * hr;
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const u32 j = c0 + 8u * ni + 2u * tq;
            *reinterpret_cast<u32*>(ob + i * ld + j) = pack_bf16(acc[ni][2 * hr], acc[ni][2 * hr + 1]);
        }
    }
}

}  // namespace

// The ring form's shared memory (declared by its entries, so that the body's
// instances for K = V = 128 and for any K, V share it).
struct WyRingSmem {
    bf16 ring[2][BT * FLD];
    float at[BT * FLD];
    float toff[6 * 16 * TLD];
    float gs[BT], cw[BT], cu[BT];   // g, beta exp(g), beta; 0 past len
};

template <typename BetaT, bool S4, bool ST, u32 KD = 0, u32 VD = 0>
__device__ __forceinline__ void kkt_solve_wu_body(const bf16* __restrict__ k_in, const bf16* __restrict__ v_in,
                                                  const BetaT* __restrict__ beta, const float* __restrict__ g,
                                                  bf16* __restrict__ w_out, bf16* __restrict__ u_out,
                                                  const uint2* __restrict__ chunks, const Params* __restrict__ pp,
                                                  WyRingSmem& sm) {
    auto& ring = sm.ring;
    float* at = sm.at;
    float* toff = sm.toff;
    float* gs = sm.gs;
    float* cw = sm.cw;
    float* cu = sm.cu;
    const Params p = *pp;
    const uint2 ch = chunks[blockIdx.y];
    if (!chunk_ok(ch, pp->n_tok)) return;
    const u32 t0 = ch.x, len = ch.y, head = blockIdx.x;
    const u32 H = p.h, K = KD ? KD : p.k, V = VD ? VD : p.v, kh = head / (H / p.hg);
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u32 mt = warp >> 1, r0 = 16u * mt, c0 = 32u * (warp & 1u);

    const u32 nk = K / 64u, ns = 2u * nk + V / 64u;
    const bf16* krow = k_in + (u64(t0) * p.hg + kh) * K;
    const bf16* vrow = v_in + (u64(t0) * H + head) * V;
    // A slice is 64 rows of 8 16-byte pieces: this thread copies piece sq / 8
    // of rows sr and sr + 32 (stage_rows' mapping without its loop and
    // divisions; rows past len zero-filled), and stores the same pieces of
    // the w and u tiles.
    const u32 sr = tid >> 3, sq = 8u * (tid & 7u);
    const bool live0 = sr < len, live1 = sr + 32u < len;
    auto issue = [&](u32 s) {
        const bool is_v = s >= 2u * nk;
        const u32 col0 = 64u * (is_v ? s - 2u * nk : s % nk);
        const u64 str = is_v ? u64(H) * V : u64(p.hg) * K;
        const bf16* src = (is_v ? vrow : krow) + col0 + u64(sr) * str + sq;
        bf16* dst = ring[s & 1u] + sr * FLD + sq;
        cp_async16(dst, live0 ? src : krow, live0);
        cp_async16(dst + 32u * FLD, live1 ? src + 32u * str : krow, live1);
        cp_async_commit();
    };
    issue(0u);
    if (tid < BT) {
        const bool live = tid < len;
        const u64 at_i = u64(t0 + tid) * H + head;
        const float gv = live ? g[at_i] : 0.0f;
        const float b = live ? load_beta(beta, at_i) : 0.0f;
        gs[tid] = gv;
        cw[tid] = live ? b * expf(gv) : 0.0f;
        cu[tid] = b;
    }

    float acc[4][4];
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[ni][e] = 0.0f;
    u32 th[4][4], tl[4][4];   // T fragments (hi, lo) of column blocks 0..mt

    // Slice s in the ring, visible to every thread (at s = 0 with the row
    // coefficients); the barrier also says every thread is done with slice
    // s - 1, whose buffer then takes slice s + 1 (in flight while s is used).
    auto begin = [&](u32 s) -> const bf16* {
        cp_async_wait<0>();
        __syncthreads();
        if (s + 1u < ns) issue(s + 1u);
        return ring[s & 1u];
    };

    for (u32 s = 0; s < nk; ++s) wy_kkt_slice(acc, begin(s), FLD, r0, c0, lane);
    wy_store_a(at, acc, gs, cu, len, r0, c0, lane);
    __syncthreads();
    wy_solve<S4>(at, toff, tid);

    // w from slices nk..2 nk - 1 (k), u from the rest (v): 64 columns each.
    for (u32 s = nk; s < ns; ++s) {
        const bool is_w = s < 2u * nk;
        if (s == nk || s == 2u * nk) wy_load_t(th, tl, at, toff, is_w ? cw : cu, mt, lane);
        const bf16* sl = begin(s);
        const u32 col0 = 64u * (is_w ? s - nk : s - 2u * nk);
        wy_slice_product(acc, th, tl, sl, FLD, mt, c0, lane);
        bf16* dst = is_w ? w_out + (u64(t0) * H + head) * K + col0 : u_out + (u64(t0) * H + head) * V + col0;
        const u64 dst_row = is_w ? u64(H) * K : u64(H) * V;
        if constexpr (ST) {
            // The 64 x 64 tile through the slice's ring buffer: 16-byte
            // stores of whole 128-byte row pieces instead of 4-byte ones
            // spread over 8 rows.
            bf16* ob = ring[s & 1u];
            __syncthreads();   // every warp is done reading the slice
            wy_stage(ob, FLD, acc, r0, c0, lane);
            __syncthreads();
            const uint4* src = reinterpret_cast<const uint4*>(ob + sr * FLD + sq);
            if (live0) *reinterpret_cast<uint4*>(dst + u64(sr) * dst_row + sq) = src[0];
            if (live1) *reinterpret_cast<uint4*>(dst + u64(sr + 32u) * dst_row + sq) = src[32u * FLD / 8u];
        } else {
            store_acc_rows(dst, dst_row, acc, r0, c0, len, lane);
        }
    }
}

// Entries by beta's type. The op's entries read the solve's shared memory
// by float4 rows (solve_diagonal4, and the diagonal blocks' substitution
// reading A's rows by float4) and store the w and u tiles through shared
// memory as 16-byte row pieces: on an H100, 602 us against 677 us for the
// scalar reads and stores at B 1, T 32768 (bench/results/gdn-fused-*). The
// variants, the same T bit for bit, stay for the harness to time beside
// them: _s4 (float4 reads, scalar stores) and _scalar (both scalar). Every
// entry runs the body's K = V = 128 instance where the params say so (the
// slices' loops and offsets constants: 9 % fewer instructions, 5 % less time
// on an H200 at B 1, T 32768), else the instance for any K and V.
#define GDR_KKT_SOLVE_WU(NAME, BETA_T, S4, ST)                                                                    \
    extern "C" __global__ void __launch_bounds__(256, 4) gated_delta_net_kkt_solve_wu_##NAME(                  \
        const bf16* __restrict__ k_in, const bf16* __restrict__ v_in, const BETA_T* __restrict__ beta,           \
        const float* __restrict__ g, bf16* __restrict__ w_out, bf16* __restrict__ u_out,                         \
        const uint2* __restrict__ chunks, const Params* __restrict__ pp) {                                       \
        MLXN_HELD_ENTRY();                                                                                       \
        __shared__ __align__(16) WyRingSmem sm;                                                                  \
        if (pp->k == 128u && pp->v == 128u)                                                                      \
            kkt_solve_wu_body<BETA_T, S4, ST, 128, 128>(k_in, v_in, beta, g, w_out, u_out, chunks, pp, sm);      \
        else                                                                                                     \
            kkt_solve_wu_body<BETA_T, S4, ST>(k_in, v_in, beta, g, w_out, u_out, chunks, pp, sm);                \
    }
GDR_KKT_SOLVE_WU(bf16, float, true, true)
GDR_KKT_SOLVE_WU(bf16_beta_bf16, bf16, true, true)
GDR_KKT_SOLVE_WU(s4_bf16, float, true, false)
GDR_KKT_SOLVE_WU(s4_bf16_beta_bf16, bf16, true, false)
GDR_KKT_SOLVE_WU(scalar_bf16, float, false, false)
GDR_KKT_SOLVE_WU(scalar_bf16_beta_bf16, bf16, false, false)
#undef GDR_KKT_SOLVE_WU

// ---------------------------------------------------------------------------
// The inter-state step: for each (sequence, head) the state h [V, K] f32
// starts at h0 and walks the sequence's chunks; per chunk of len tokens,
// last = its last token:
//   h_out[c, head] = bf16(h)
//   vn[t, v] = u[t, v] - sum_k w[t, k] bf16(h)[v, k];       v_new[t, v] = bf16(vn)
//   h = h exp(g[last]) + sum_{t < len} bf16(vn[t, v] exp(g[last] - g[t])) k[t, kh, k]
// and final_state[seq, head] = h. One body, inter_state_seq, for both
// entries: gated_delta_net_chunk_inter_state_k{64,128,256}_bf16 (the seqs
// table) and the seed's gated_delta_net_chunk_inter_state_bf16 (B sequences
// of T tokens, K = 128).
// 128 threads = 4 warps; a block owns BV rows of V (32 for KD <= 128, 16 at
// 256) of one (sequence, head). The f32 state slice [BV][KD] lives in
// registers as mma accumulators: warp w holds k columns [w KD / 4, +KD / 4)
// for all BV rows. Per chunk:
//   1. hb = bf16(h) into shared memory (then to h_out, 16-byte stores); the
//      chunk's k rows and g into shared memory; the accumulators scaled by
//      exp(g[last]).
//   2. x[t, v] = w hb^T: warp w takes t rows [16 w, +16), w as A fragments
//      in registers, hb by ldmatrix (a warp wholly past len skips it).
//   3. vn = u - x to v_new (t < len); vg transposed into stage [BV v][64 t],
//      0 past len.
//   4. h += stage k_rows on tensor cores, t in 16-row steps up to len.
// Every global operand of a chunk (0 past len) is loaded into registers
// during the chunk before, each set as soon as its registers are free: u
// and g at the chunk's start (after the copy out), the k rows once they are
// stored to shared memory, the w fragments once step 2 has used them (with
// WS, w's rows go to shared memory by cp.async once every warp is past step
// 2, and the barrier of step 1 publishes them). So the serial walk waits on
// no global load inside a chunk, and no operand needs a second set of
// registers (no spills at KD = 256).
// Shared memory: k rows 64 x (KD + 8), hb BV x (KD + 8), stage BV x 72 bf16,
// g 64 f32: 44 KiB at KD = 256, 31 KiB at 128, 17 KiB at 64; WS adds w's rows,
// 64 x (KD + 8) bf16 (47 KiB in all at KD = 128, BV = 32). The varlen
// entries declare it; the seed's takes hb, stage and g from the 20 KiB of
// dynamic shared memory its host binds and declares the k rows.

// The state a thread of the walk holds, as mma accumulator fragments: calls
// f(mi, ni, hr, vr, kc) for each pair of its elements, rows vr of V and
// columns kc, kc + 1 of K (warp w holds columns [KW w, KW (w + 1))).
template <u32 MI, u32 NI, u32 KW, class F>
__device__ __forceinline__ void each_state_pair(u32 warp, u32 gq, u32 tq, F&& f) {
#pragma unroll
    for (u32 mi = 0; mi < MI; ++mi)
#pragma unroll
        for (u32 ni = 0; ni < NI; ++ni)
#pragma unroll
            for (u32 hr = 0; hr < 2; ++hr) f(mi, ni, hr, 16u * mi + gq + 8u * hr, KW * warp + 8u * ni + 2u * tq);
}

// The steps both walks (inter_state_seq, inter_state_ring_seq) share, on the
// state slice [BV][KD] a block holds as mma accumulators (warp w: columns
// [KW w, +KW), KW = KD / NW) and on its shared tiles: hb [BV][KD + 8] bf16,
// stage [BV][72] bf16.
template <u32 KD, u32 BV, u32 NW>
struct WalkState {
    static constexpr u32 MI = BV / 16, KW = KD / NW, NI = KW / 8, LDH = KD + 8, LDS = BT + 8;
    float st[MI][NI][4];
    u32 warp, lane, gq, tq;

    __device__ __forceinline__ WalkState(u32 tid) : warp(tid >> 5), lane(tid & 31u), gq((tid & 31u) >> 2), tq(tid & 3u) {}
    template <class F>
    __device__ __forceinline__ void each(F&& f) {
        each_state_pair<MI, NI, KW>(warp, gq, tq, f);
    }
    // From / to a state [BV][KD] f32 in memory.
    __device__ __forceinline__ void load(const float* __restrict__ src) {
        each([&](u32 mi, u32 ni, u32 hr, u32 vr, u32 kc) {
            const float2 x = *reinterpret_cast<const float2*>(src + u64(vr) * KD + kc);
            st[mi][ni][2 * hr] = x.x;
            st[mi][ni][2 * hr + 1] = x.y;
        });
    }
    __device__ __forceinline__ void store(float* __restrict__ dst) {
        each([&](u32 mi, u32 ni, u32 hr, u32 vr, u32 kc) {
            *reinterpret_cast<float2*>(dst + u64(vr) * KD + kc) = make_float2(st[mi][ni][2 * hr], st[mi][ni][2 * hr + 1]);
        });
    }
    // 1. hb = bf16(h); h *= decay.
    __device__ __forceinline__ void to_hb(bf16* hb) {
        each([&](u32 mi, u32 ni, u32 hr, u32 vr, u32 kc) {
            *reinterpret_cast<u32*>(hb + vr * LDH + kc) = pack_bf16(st[mi][ni][2 * hr], st[mi][ni][2 * hr + 1]);
        });
    }
    __device__ __forceinline__ void scale(float decay) {
        each([&](u32 mi, u32 ni, u32 hr, u32, u32) {
            st[mi][ni][2 * hr] *= decay;
            st[mi][ni][2 * hr + 1] *= decay;
        });
    }
    // 4. h += stage k_rows on tensor cores, t in 16-row steps up to len
    //    (k_rows [64][ldk] bf16, the chunk's k, 0 past len).
    __device__ __forceinline__ void add_vg_k(const bf16* stage, const bf16* k_rows, u32 ldk, u32 len) {
#pragma unroll
        for (u32 tt = 0; tt < BT; tt += 16) {
            if (tt >= len) break;
            u32 a[MI][4];
#pragma unroll
            for (u32 mi = 0; mi < MI; ++mi) frag_a(a[mi], stage, LDS, 16u * mi, tt, lane);
#pragma unroll
            for (u32 ni = 0; ni < NI; ni += 2) {
                u32 b[4];
                frag_b_kn(b, k_rows, ldk, KW * warp + 8u * ni, tt, lane);
#pragma unroll
                for (u32 mi = 0; mi < MI; ++mi) {
                    mma_bf16(st[mi][ni], a[mi], b[0], b[1]);
                    mma_bf16(st[mi][ni + 1], a[mi], b[2], b[3]);
                }
            }
        }
    }
};

// hb to the chunk's snapshot [BV][KD] in h_out, 16-byte stores by NTH threads.
template <u32 KD, u32 BV, u32 NTH>
__device__ __forceinline__ void walk_snapshot(bf16* __restrict__ hsnap, const bf16* hb, u32 tid) {
#pragma unroll
    for (u32 r = 0; r < BV * KD / 8 / NTH; ++r) {
        const u32 e = tid + r * NTH;
        const u32 vr = e / (KD / 8), q = e % (KD / 8);
        *reinterpret_cast<uint4*>(hsnap + vr * KD + q * 8) = *reinterpret_cast<const uint4*>(hb + vr * (KD + 8) + q * 8);
    }
}

// 2. x[t, v] = w hb^T for the warp's t rows [trow, +16) and V rows [vw0,
//    +VW); a_of(kk) gives w's A fragment of K columns [16 kk, +16). 0 where
//    trow >= len.
template <u32 KD, u32 VW, class A>
__device__ __forceinline__ void walk_wh(float (&xa)[VW / 8][4], A&& a_of, const bf16* hb, u32 trow, u32 vw0, u32 len,
                                        u32 lane) {
#pragma unroll
    for (u32 nj = 0; nj < VW / 8; ++nj)
#pragma unroll
        for (int e = 0; e < 4; ++e) xa[nj][e] = 0.0f;
    if (trow < len) {
#pragma unroll
        for (u32 kk = 0; kk < KD / 16; ++kk) {
            const u32(&a)[4] = a_of(kk);
#pragma unroll
            for (u32 nj = 0; nj < VW / 8; nj += 2) {
                mma_b16<true>(xa[nj], xa[nj + 1], a, hb, KD + 8, vw0 + 8u * nj, 16u * kk, lane);
            }
        }
    }
}

// The gates of step 3 at the thread's rows t_lo and t_lo + 8: exp(g_last - g_t), 0 past len.
__device__ __forceinline__ void walk_gates(float (&gate)[2], const float* gs, float g_last, u32 t_lo, u32 len) {
#pragma unroll
    for (u32 hr = 0; hr < 2; ++hr) {
        const u32 tl = t_lo + 8u * hr;
        gate[hr] = tl < len ? expf(g_last - gs[tl]) : 0.0f;
    }
}

// stage's place of (v, t): rows of 72 (padded), or with SW the 128-byte
// swizzled rows of 64 t a wgmma reads K-major (the tile 1024-byte aligned).
template <bool SW>
__device__ __forceinline__ u32 stage_at(u32 v, u32 t) {
    if constexpr (SW) return v * BT + ((((t >> 3) ^ (v & 7u))) << 3) + (t & 7u);
    else return v * (BT + 8) + t;
}

// 3. vn = u - x at the warp's (t, v) pairs: to v_new (t < len) and
//    bf16(vn gate) transposed into stage (0 past len; stage_at<SW>'s
//    places). u_of(nj, hr, tl, vl) gives u's bf16 pair, put(tl, vl, pair)
//    stores v_new's bf16 pair (v rows vl, vl + 1 at t row tl), gate walk_gates'.
//    With VT, bf16(vn) also into vt at stage's places (0 past len).
template <u32 VW, bool SW = false, bool VT = false, class U, class VN>
__device__ __forceinline__ void walk_vnew(const float (&xa)[VW / 8][4], U&& u_of, VN&& put, const float (&gate)[2],
                                          u32 t_lo, u32 vw0, u32 tq, u32 len, bf16* stage, bf16* vt = nullptr) {
#pragma unroll
    for (u32 nj = 0; nj < VW / 8; ++nj)
#pragma unroll
        for (u32 hr = 0; hr < 2; ++hr) {
            const u32 tl = t_lo + 8u * hr;
            const u32 vl = vw0 + 8u * nj + 2u * tq;
            bf16 g0 = __float2bfloat16_rn(0.0f), g1 = g0, r0 = g0, r1 = g0;
            if (tl < len) {
                const u32 up = u_of(nj, hr, tl, vl);
                const float2 uf = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&up));
                const float vn0 = uf.x - xa[nj][2 * hr];
                const float vn1 = uf.y - xa[nj][2 * hr + 1];
                put(tl, vl, pack_bf16(vn0, vn1));
                g0 = __float2bfloat16_rn(vn0 * gate[hr]);
                g1 = __float2bfloat16_rn(vn1 * gate[hr]);
                if constexpr (VT) {
                    r0 = __float2bfloat16_rn(vn0);
                    r1 = __float2bfloat16_rn(vn1);
                }
            }
            stage[stage_at<SW>(vl, tl)] = g0;
            stage[stage_at<SW>(vl + 1, tl)] = g1;
            if constexpr (VT) {
                vt[stage_at<SW>(vl, tl)] = r0;
                vt[stage_at<SW>(vl + 1, tl)] = r1;
            }
        }
}

#ifdef MLXN_WGMMA
// The K = 128, 32 V rows walk's state on warpgroup products (8 warps, two
// warpgroups): the update's accumulator D[k, v] of m64n32k16, warpgroup g
// holding K rows 64 g .. 64 g + 63. Element i of a thread (warp w % 4 = w4,
// lane quad gq, tq): k = 64 g + 16 w4 + gq + 8 ((i / 2) % 2), v = 8 (i / 4)
// + 2 tq + i % 2. hb is bf16(h) as [2 column blocks of 64 K][32 V][64 K]
// in 128-byte swizzled rows (K-major: x's B operand), 1024-byte aligned.
struct WalkStateWg {
    static constexpr u32 KD = 128, BV = 32;
    float d[16];
    u32 g, w4, gq, tq, k0;

    __device__ __forceinline__ WalkStateWg(u32 tid)
        : g(tid >> 7), w4((tid >> 5) & 3u), gq((tid & 31u) >> 2), tq(tid & 3u), k0(64u * (tid >> 7) + 16u * ((tid >> 5) & 3u)) {}
    __device__ __forceinline__ u32 k_of(u32 i) const { return k0 + gq + 8u * ((i >> 1) & 1u); }
    __device__ __forceinline__ u32 v_of(u32 i) const { return 8u * (i >> 2) + 2u * tq + (i & 1u); }
    __device__ __forceinline__ void load(const float* __restrict__ src) {
#pragma unroll
        for (u32 i = 0; i < 16; ++i) d[i] = src[u64(v_of(i)) * KD + k_of(i)];
    }
    __device__ __forceinline__ void store(float* __restrict__ dst) const {
#pragma unroll
        for (u32 i = 0; i < 16; ++i) dst[u64(v_of(i)) * KD + k_of(i)] = d[i];
    }
    __device__ __forceinline__ static u32 hb_at(u32 v, u32 k) {
        const u32 kk = k & 63u;
        return (k >> 6) * (BV * 64u) + v * 64u + (((kk >> 3) ^ (v & 7u)) << 3) + (kk & 7u);
    }
    __device__ __forceinline__ void to_hb(bf16* hb) const {
#pragma unroll
        for (u32 i = 0; i < 16; ++i) hb[hb_at(v_of(i), k_of(i))] = __float2bfloat16_rn(d[i]);
    }
    __device__ __forceinline__ void scale(float decay) {
#pragma unroll
        for (u32 i = 0; i < 16; ++i) d[i] *= decay;
    }
    // The place of k row r, column col in the ring: rows of ldk, or with KSW
    // InterRingWgO's swizzled blocks (w's: [2 column blocks][64 rows][64]).
    template <bool KSW>
    __device__ __forceinline__ static u32 k_at(u32 r, u32 col, u32 ldk) {
        if constexpr (KSW) return (col >> 6) * (BT * 64u) + r * 64u + ((((col & 63u) >> 3) ^ (r & 7u)) << 3) + (col & 7u);
        else return r * ldk + col;
    }
    // h += stage k_rows, issued (wgmma_fence first, no commit): A = k^T from
    // the k rows (ldmatrix.trans, this warp's 16 K rows), B = stage (K-major
    // swizzled [32 V][64 t]).
    template <bool KSW>
    __device__ __forceinline__ void issue_update(const bf16* stage, const bf16* k_rows, u32 ldk, u32 lane) {
        u32 ka[4][4];
#pragma unroll
        for (u32 tt = 0; tt < 4; ++tt)
            ldsm_x4_trans(k_rows + k_at<KSW>(16u * tt + (lane & 7u) + 8u * (lane >> 4), k0 + 8u * ((lane >> 3) & 1u), ldk),
                          ka[tt][0], ka[tt][1], ka[tt][2], ka[tt][3]);
        acc_fence(d);
        wgmma_fence();
#pragma unroll
        for (u32 tt = 0; tt < 4; ++tt) wgmma_rsk_bf16(d, ka[tt], wgmma_desc_sw128(stage + 16u * tt));
    }
    // P = bf16(sc exp(g_t - g_j)) for j <= t < len, else 0, as the A
    // operand of o's products (pa[tt]: key columns 16 tt .. 16 tt + 15); gs
    // the chunk's g.
    __device__ __forceinline__ void scores_to_p(u32 (&pa)[4][4], const float (&sc)[32], const float* gs, u32 len) const {
        const u32 ta = 16u * w4 + gq, tb = ta + 8u;
        const float ga = gs[ta], gb = gs[tb];
#pragma unroll
        for (u32 nj = 0; nj < 8; ++nj) {
            const u32 j = 8u * nj + 2u * tq;
            const float2 gj = *reinterpret_cast<const float2*>(gs + j);
            const float a0 = j <= ta && ta < len ? sc[4 * nj] * expf(ga - gj.x) : 0.0f;
            const float a1 = j + 1 <= ta && ta < len ? sc[4 * nj + 1] * expf(ga - gj.y) : 0.0f;
            const float b0 = j <= tb && tb < len ? sc[4 * nj + 2] * expf(gb - gj.x) : 0.0f;
            const float b1 = j + 1 <= tb && tb < len ? sc[4 * nj + 3] * expf(gb - gj.y) : 0.0f;
            pa[nj >> 1][2 * (nj & 1u)] = pack_bf16(a0, a1);
            pa[nj >> 1][2 * (nj & 1u) + 1] = pack_bf16(b0, b1);
        }
    }
    // x[t, v] = w hb^T for the 64 t rows and the warpgroup's 16 V rows (16
    // g ..): m64n16k16, A = ws (InterRingWg's swizzled w rows), B = hb; x
    // belongs to the wgmma until a wgmma_wait.
    __device__ __forceinline__ void issue_x(float (&x)[8], const bf16* ws, const bf16* hb) const {
#pragma unroll
        for (u32 e = 0; e < 8; ++e) x[e] = 0.0f;
        acc_fence(x);
        wgmma_fence();
#pragma unroll
        for (u32 kk = 0; kk < 8; ++kk)
            wgmma_bf16(x, wgmma_desc_sw128(ws + (kk >> 2) * (BT * 64u) + 16u * (kk & 3u)),
                       wgmma_desc_sw128(hb + (kk >> 2) * (BV * 64u) + 16u * g * 64u + 16u * (kk & 3u)));
        wgmma_commit();
    }
    // hb (swizzled) to the chunk's snapshot [32][128] in h_out, 16-byte stores by 256 threads.
    __device__ __forceinline__ static void snapshot(bf16* __restrict__ hsnap, const bf16* hb, u32 tid) {
#pragma unroll
        for (u32 r = 0; r < 2; ++r) {
            const u32 e = tid + 256u * r, v = e >> 4, q = e & 15u;
            *reinterpret_cast<uint4*>(hsnap + v * KD + 8u * q) = *reinterpret_cast<const uint4*>(hb + hb_at(v, 8u * q));
        }
    }
};
#endif

// Tokens [bos, eos) of one sequence, its chunks c_first..c_end (chunk c
// starts at bos + (c - c_first) * 64), its state at index state of h0 and
// final_state, V rows [v0, v0 + BV) of V head head. Every thread calls it.
template <u32 KD, u32 BV, bool WS, u32 NW = 4>
__device__ __forceinline__ void inter_state_seq(const bf16* __restrict__ k_in, const bf16* __restrict__ w_in,
                                                const bf16* __restrict__ u_in, const float* __restrict__ g_in,
                                                const float* __restrict__ h0, bf16* __restrict__ h_out,
                                                bf16* __restrict__ v_new, float* __restrict__ final_state,
                                                u32 H, u32 Hg, u32 V, u32 bos, u32 eos, u32 c_first, u32 c_end,
                                                u32 state, u32 v0, u32 head,
                                                bf16* kt, bf16* hb, bf16* stage, float* gs, bf16* ws) {
    static_assert(NW == 4 || (NW == 8 && WS && BV == 32), "8 warps share w in shared memory and split 32 V rows");
    constexpr u32 NTH = 32 * NW;
    constexpr u32 LDK = KD + 8, LDW = KD + 8;
    constexpr u32 KQ = BT * KD / 8 / NTH;     // 16-byte pieces of the k rows per thread
    constexpr u32 VW = BV * 4 / NW;           // V rows of a warp in steps 2 and 3
    const u32 tid = threadIdx.x;
    WalkState<KD, BV, NW> h(tid);
    const u32 lane = h.lane, warp = h.warp, gq = h.gq, tq = h.tq;
    const u32 kh = head / (H / Hg);
    const u32 trow = 16u * (warp % 4u), vw0 = VW * (warp / 4u);   // steps 2, 3: t rows [trow, +16), V rows [vw0, +VW)

    const u64 state0 = ((u64(state) * H + head) * V + v0) * KD;
    h.load(h0 + state0);

    // The next chunk's operands: kr the k rows, wr this warp's w A fragments
    // (t rows [trow, +16), all of K; with WS the chunk's w rows go to ws
    // instead), ur the u pairs step 3 reads, gr g[tid] and glr g[last].
    uint4 kr[KQ];
    u32 wr[WS ? 1 : KD / 16][4];
    u32 ur[VW / 8][2];
    float gr = 0.0f, glr = 0.0f;
    const u32 t_lo = trow + gq, t_hi = t_lo + 8u;
    auto chunk_of = [&](u32 c, u32& t0, u32& len) {
        t0 = bos + (c - c_first) * BT;
        len = min(BT, eos - t0);
    };
    auto prefetch_k = [&](u32 c) {
        u32 t0, len;
        chunk_of(c, t0, len);
        const bf16* kp = k_in + (u64(t0) * Hg + kh) * KD;
#pragma unroll
        for (u32 r = 0; r < KQ; ++r) {
            const u32 e = tid + r * NTH;
            const u32 t = e / (KD / 8), q = e % (KD / 8);
            kr[r] = t < len ? __ldg(reinterpret_cast<const uint4*>(kp + u64(t) * Hg * KD + q * 8)) : make_uint4(0, 0, 0, 0);
        }
    };
    auto prefetch_ug = [&](u32 c) {
        u32 t0, len;
        chunk_of(c, t0, len);
        glr = __ldg(g_in + u64(t0 + len - 1) * H + head);
        gr = tid < len ? __ldg(g_in + u64(t0 + tid) * H + head) : 0.0f;
#pragma unroll
        for (u32 nj = 0; nj < VW / 8; ++nj)
#pragma unroll
            for (u32 hr = 0; hr < 2; ++hr) {
                const u32 tl = t_lo + 8u * hr;
                const u64 uv = (u64(t0 + tl) * H + head) * V + v0 + vw0 + 8u * nj + 2u * tq;
                ur[nj][hr] = tl < len ? __ldg(reinterpret_cast<const unsigned int*>(u_in + uv)) : 0u;
            }
    };
    auto prefetch_w = [&](u32 c) {
        u32 t0, len;
        chunk_of(c, t0, len);
        if constexpr (WS) {
            // The chunk's w rows into ws by the whole block, 16-byte copies, 0 past len.
            const bf16* wp = w_in + (u64(t0) * H + head) * KD;
#pragma unroll
            for (u32 r = 0; r < BT * KD / 8u / NTH; ++r) {
                const u32 e = tid + NTH * r;
                const u32 t = e / (KD / 8), q = e % (KD / 8);
                const bool live = t < len;
                cp_async16(ws + t * LDW + q * 8u, wp + (live ? u64(t) * H * KD + q * 8u : 0u), live);
            }
            cp_async_commit();
        } else {
            const bf16* w_lo = w_in + (u64(t0 + t_lo) * H + head) * KD;
            const bf16* w_hi = w_in + (u64(t0 + t_hi) * H + head) * KD;
            const bool lo_live = t_lo < len, hi_live = t_hi < len;
#pragma unroll
            for (u32 kk = 0; kk < KD / 16; ++kk) {
                wr[kk][0] = lo_live ? __ldg(reinterpret_cast<const unsigned int*>(w_lo + 16 * kk + 2 * tq)) : 0u;
                wr[kk][1] = hi_live ? __ldg(reinterpret_cast<const unsigned int*>(w_hi + 16 * kk + 2 * tq)) : 0u;
                wr[kk][2] = lo_live ? __ldg(reinterpret_cast<const unsigned int*>(w_lo + 16 * kk + 8 + 2 * tq)) : 0u;
                wr[kk][3] = hi_live ? __ldg(reinterpret_cast<const unsigned int*>(w_hi + 16 * kk + 8 + 2 * tq)) : 0u;
            }
        }
    };
    if (c_first < c_end) {
        prefetch_k(c_first);
        prefetch_ug(c_first);
        prefetch_w(c_first);
    }

    for (u32 c = c_first; c < c_end; ++c) {
        u32 t0, len;
        chunk_of(c, t0, len);
        // This chunk's u and g out of the prefetch registers, then the next
        // chunk's; its k rows go to shared memory after the barrier, then
        // the next chunk's are loaded.
        u32 uc[VW / 8][2];
#pragma unroll
        for (u32 nj = 0; nj < VW / 8; ++nj)
#pragma unroll
            for (u32 hr = 0; hr < 2; ++hr) uc[nj][hr] = ur[nj][hr];
        const float g_last = glr, g_tid = gr;
        if (c + 1 < c_end) prefetch_ug(c + 1);
        __syncthreads();   // the previous chunk is done with kt, hb, stage, gs
#pragma unroll
        for (u32 r = 0; r < KQ; ++r) {
            const u32 e = tid + r * NTH;
            const u32 t = e / (KD / 8), q = e % (KD / 8);
            *reinterpret_cast<uint4*>(kt + t * LDK + q * 8) = kr[r];
        }
        if (c + 1 < c_end) prefetch_k(c + 1);

        // 1.
        h.to_hb(hb);
        h.scale(expf(g_last));
        if (tid < BT) gs[tid] = g_tid;
        if constexpr (WS) cp_async_wait<0>();   // this chunk's ws rows, published by the barrier
        __syncthreads();
        walk_snapshot<KD, BV, NTH>(h_out + ((u64(c) * H + head) * V + v0) * KD, hb, tid);

        // 2.
        float xa[VW / 8][4];
        walk_wh<KD, VW>(xa, [&](u32 kk) -> const u32(&)[4] {
            if constexpr (WS) {
                frag_a(wr[0], ws, LDW, trow, 16u * kk, lane);
                return wr[0];
            } else {
                return wr[kk];
            }
        }, hb, trow, vw0, len, lane);

        if (!WS && c + 1 < c_end) prefetch_w(c + 1);

        // 3.
        float gate[2];
        walk_gates(gate, gs, g_last, t_lo, len);
        walk_vnew<VW>(xa, [&](u32 nj, u32 hr, u32, u32) { return uc[nj][hr]; },
                      [&](u32 tl, u32 vl, u32 pair) { *reinterpret_cast<u32*>(v_new + (u64(t0 + tl) * H + head) * V + v0 + vl) = pair; }, gate, t_lo,
                      vw0, tq, len, stage);
        __syncthreads();
        if (WS && c + 1 < c_end) prefetch_w(c + 1);   // every warp is past step 2

        // 4.
        h.add_vg_k(stage, kt, LDK, len);
    }

    h.store(final_state + state0);
}

// gated_delta_net_chunk_inter_state_k{KD}_bf16: the sequences of the seqs
// table. Grid (V / BV, H, n_seq), 32 NW threads.
// Bindings: 0 k, 1 w, 2 u, 3 g (cumsummed), 4 h0, 5 h_out, 6 v_new,
// 7 final_state, 8 seqs, 9 params.
template <u32 KD, u32 BV, bool WS, u32 NW>
__device__ __forceinline__ void inter_state_varlen(const bf16* __restrict__ k_in, const bf16* __restrict__ w_in,
                                                   const bf16* __restrict__ u_in, const float* __restrict__ g_in,
                                                   const float* __restrict__ h0, bf16* __restrict__ h_out,
                                                   bf16* __restrict__ v_new, float* __restrict__ final_state,
                                                   const uint2* __restrict__ seqs, const Params* __restrict__ pp) {
    __shared__ __align__(16) bf16 kt[BT * (KD + 8)];
    __shared__ __align__(16) bf16 hb[BV * (KD + 8)];
    __shared__ __align__(16) bf16 stage[BV * (BT + 8)];
    __shared__ float gs[BT];
    __shared__ __align__(16) bf16 ws[WS ? BT * (KD + 8) : 8];
    const u32 seq = blockIdx.z;
    const uint2 first = seqs[seq], next = seqs[seq + 1];
    if (!seq_ok(first, next, pp->n_tok, pp->nt)) return;
    inter_state_seq<KD, BV, WS, NW>(k_in, w_in, u_in, g_in, h0, h_out, v_new, final_state, pp->h, pp->hg, pp->v,
                                first.x, next.x, first.y, next.y, seq, blockIdx.x * BV, blockIdx.y, kt, hb, stage, gs,
                                ws);
}

// Entries by K, BV, where w waits and the warps: w in registers, loaded 4
// bytes at a time, or, with WS, in 16 KiB of shared memory by cp.async, read
// by ldmatrix (fewer load instructions, L1 requests and registers); 4 warps,
// or 8 (256 threads: warp w holds state columns [16 w, +16) and takes t rows
// [16 (w % 4), +16) and V rows [16 (w / 4), +16) in steps 2 and 3). The op's entry at K = 128 is the ring
// form below; _ws8 (WS and 8 warps, 256 threads) is its fallback where the
// ring's 32-bit offsets would not hold (ts/ops/chunk_gated_delta_rule.ts).
#define GDR_INTER_STATE(NAME, KD, BV, WS, NW)                                                                     \
    extern "C" __global__ void __launch_bounds__(32 * NW) gated_delta_net_chunk_inter_state_##NAME##_bf16(       \
        const bf16* __restrict__ k_in, const bf16* __restrict__ w_in, const bf16* __restrict__ u_in,             \
        const float* __restrict__ g_in, const float* __restrict__ h0, bf16* __restrict__ h_out,                  \
        bf16* __restrict__ v_new, float* __restrict__ final_state, const uint2* __restrict__ seqs,               \
        const Params* __restrict__ pp) {                                                                         \
        inter_state_varlen<KD, BV, WS, NW>(k_in, w_in, u_in, g_in, h0, h_out, v_new, final_state, seqs, pp);     \
    }
GDR_INTER_STATE(k64, 64, 32, false, 4)
GDR_INTER_STATE(k128_ws8, 128, 32, true, 8)
GDR_INTER_STATE(k256, 256, 16, false, 4)
#undef GDR_INTER_STATE

// The walk with its operands in a ring (the op's entry at K = 128,
// gated_delta_net_chunk_inter_state_k128_bf16 on CUDA): the values and
// bits of inter_state_seq, with every operand of a chunk (its k, w and u rows
// and g) copied by cp.async into one of S = 2 slots of dynamic shared memory,
// issued a chunk ahead (chunk c + 1 into the slot chunk c - 1 used, once
// every warp is past chunk c - 1), and two barriers a chunk instead of
// three. Each thread's copies keep their places from chunk to chunk, so their
// offsets are computed once (32-bit) and a chunk adds one base a operand.
// Per chunk:
//   1. hb = bf16(h) into shared memory; wait for the chunk's group; barrier
//      (hb and the slot published); chunk c + 1's w, u and g copies.
//   2. x = w hb^T issued; then the gates, chunk c + 1's k copies, hb to
//      h_out and h *= exp(g[last]) while the products run.
//   3. vn = u - x into vs and vg into stage; barrier; vs to v_new by
//      16-byte row pieces;
//   4. h += stage k_rows, as inter_state_seq.
// Offsets inside a chunk (64 rows of k, w, u, v_new) are 32-bit: the op takes
// this form where 64 H max(K, V) < 2^31. Shared memory: hb BV x (KD + 8),
// stage BV x 72 and vs 64 x (BV + 8) bf16 static, the ring (InterRing<KD, BV, S>::BYTES) dynamic:
// 80384 bytes at KD 128, BV 32, S 2, so two blocks fit an SM. Two slots
// (copies one chunk ahead) against three (two ahead): the walk alone 11 %
// faster on an H200 (bench/notes/gdn-walk-ring-2026-11-29.md).
template <u32 KD, u32 BV, u32 S>
struct InterRing {
    static constexpr bool W_SWIZZLED = false, K_SWIZZLED = false;
    static constexpr u32 Q_OFF = 0;   // no q rows
    static constexpr u32 LDK = KD + 8, LDU = BV + 8;
    static constexpr u32 K_OFF = 0;                       // bytes from the slot's start: k rows first
    static constexpr u32 W_OFF = BT * LDK * 2;
    static constexpr u32 U_OFF = 2 * W_OFF;
    static constexpr u32 G_OFF = U_OFF + BT * LDU * 2;
    static constexpr u32 SLOT = G_OFF + BT * 4;
    static constexpr u32 BYTES = S * SLOT;
    static_assert(SLOT % 16 == 0, "slots stay 16-byte aligned");
    static_assert(S >= 2, "a slot being read and one being filled");
};

// The warpgroup walk's ring (K 128, 32 V rows, 2 slots): a slot's w rows
// first, [2 column blocks of 64 K][64 t][64 K] in 128-byte swizzled rows
// (x's A operand), then the k rows, u and g as InterRing's; slots of whole
// KB, so that each slot's w stays 1024-byte aligned on an aligned ring.
struct InterRingWg {
    static constexpr bool W_SWIZZLED = true, K_SWIZZLED = false;
    static constexpr u32 Q_OFF = 0;   // no q rows
    static constexpr u32 KD = 128, BV = 32, S = 2;
    static constexpr u32 LDK = KD + 8, LDU = BV + 8;
    static constexpr u32 W_OFF = 0;
    static constexpr u32 K_OFF = BT * KD * 2;
    static constexpr u32 U_OFF = K_OFF + BT * LDK * 2;
    static constexpr u32 G_OFF = U_OFF + BT * LDU * 2;
    static constexpr u32 SLOT = (G_OFF + BT * 4 + 1023) / 1024 * 1024;
    static constexpr u32 BYTES = S * SLOT;
};
// The walk with o's ring (K 128, 32 V rows, 3 slots: the walk's chunk, the
// next one's copies, and the chunk before, which the output warpgroup
// reads): InterRingWg's with the chunk's q rows, and the k rows in w's
// swizzled places (q k^T reads both from shared memory): w, k, q
// [2][64][64], u [64][40] bf16, g [64] f32, 54 KB a slot.
struct InterRingWgO {
    static constexpr bool W_SWIZZLED = true, K_SWIZZLED = true;
    static constexpr u32 KD = 128, BV = 32, S = 3;
    static constexpr u32 LDK = KD, LDU = BV + 8;
    static constexpr u32 W_OFF = 0;
    static constexpr u32 K_OFF = BT * KD * 2;
    static constexpr u32 Q_OFF = 2 * BT * KD * 2;
    static constexpr u32 U_OFF = 3 * BT * KD * 2;
    static constexpr u32 G_OFF = U_OFF + BT * LDU * 2;
    static constexpr u32 SLOT = (G_OFF + BT * 4 + 1023) / 1024 * 1024;
    static constexpr u32 BYTES = S * SLOT;
};
template <bool O, class R>
struct RingOf { using type = R; };
template <class R>
struct RingOf<true, R> { using type = InterRingWgO; };

// The ring walk's state and ring: WalkState's and InterRing's, or with WG
// (K 128, 32 V rows, 8 warps) WalkStateWg's and InterRingWg's.
template <bool WG, u32 KD, u32 BV, u32 NW, u32 S>
struct WalkStateOf {
    using type = WalkState<KD, BV, NW>;
    using ring = InterRing<KD, BV, S>;
};
#ifdef MLXN_WGMMA
template <u32 KD, u32 BV, u32 NW, u32 S>
struct WalkStateOf<true, KD, BV, NW, S> {
    static_assert(KD == 128 && BV == 32 && NW == 8 && (S == 2 || S == 3), "the warpgroup walk is K 128, 32 V rows, 8 warps");
    using type = WalkStateWg;
    using ring = InterRingWg;
};

// The output warpgroup of the walk with o (thread ot of 128, after the
// walk's two warpgroups): for each chunk i, once the walk has left its hb,
// v_new (vt) and q, k, g (ring slot i % 3) and arrived at barrier 2 + i % 2,
//   o[t, v] = bf16(scale (exp(g_t) q_t . hb[v] + sum_{j <= t} P[t, j] vt[v, j]))
// with P = bf16((q k^T)[t, j] exp(g_t - g_j)) for j <= t < len (chunk_o's
// values): q hb^T as two m64n16k16 and q k^T as m64n64k16 from shared memory,
// then P vt^T as m64n32k16 with P from registers; then it arrives at barrier
// 4 + i % 2 (done with chunk i's buffers) and stores the chunk's rows of o.
__device__ __forceinline__ void walk_o_chunks(bf16* __restrict__ o_out, u32 H, u32 V, u32 bos, u32 eos, u32 c_first,
                                              u32 c_end, u32 v0, u32 head, const unsigned char* ring, const bf16* hb,
                                              const bf16* vt, float scale, u32 ot) {
    using R = InterRingWgO;
    const WalkStateWg me(ot);   // the fragment geometry of warpgroup 0: w4, gq, tq
    const u32 ta = 16u * me.w4 + me.gq, tb = ta + 8u;
    for (u32 c = c_first; c < c_end; ++c) {
        const u32 i = c - c_first, t0 = bos + i * BT, len = min(BT, eos - t0);
        bar_sync(2 + (i & 1u), 384);
        const unsigned char* s = ring + (i % R::S) * R::SLOT;
        const bf16* qs = reinterpret_cast<const bf16*>(s + R::Q_OFF);
        const bf16* ks = reinterpret_cast<const bf16*>(s + R::K_OFF);
        const float* gsl = reinterpret_cast<const float*>(s + R::G_OFF);
        const bf16* hbc = hb + (i & 1u) * (32u * 128u);
        const bf16* vtc = vt + (i & 1u) * (32u * BT);
        float qh[2][8], sc[32], o[16];
        u32 pa[4][4];
#pragma unroll
        for (u32 e = 0; e < 8; ++e) qh[0][e] = qh[1][e] = 0.0f;
#pragma unroll
        for (u32 e = 0; e < 32; ++e) sc[e] = 0.0f;
        acc_fence(qh[0]);
        acc_fence(qh[1]);
        acc_fence(sc);
        wgmma_fence();
#pragma unroll
        for (u32 kk = 0; kk < 8; ++kk) {
            const u32 off = (kk >> 2) * (BT * 64u) + 16u * (kk & 3u);
            const u64 dq = wgmma_desc_sw128(qs + off);
#pragma unroll
            for (u32 half = 0; half < 2; ++half)
                wgmma_bf16(qh[half], dq, wgmma_desc_sw128(hbc + (kk >> 2) * (32u * 64u) + 16u * half * 64u + 16u * (kk & 3u)));
            wgmma_bf16(sc, dq, wgmma_desc_sw128(ks + off));
        }
        wgmma_commit();
        wgmma_wait<0>();
        acc_fence(qh[0]);
        acc_fence(qh[1]);
        acc_fence(sc);
        me.scores_to_p(pa, sc, gsl, len);
        const float ea = expf(gsl[ta]), eb = expf(gsl[tb]);
#pragma unroll
        for (u32 e = 0; e < 16; ++e) o[e] = qh[e >> 3][e & 7u] * (e & 2u ? eb : ea);
        acc_fence(o);
        reg_fence(pa);
        wgmma_fence();
#pragma unroll
        for (u32 tt = 0; tt < 4; ++tt) wgmma_rsk_bf16(o, pa[tt], wgmma_desc_sw128(vtc + 16u * tt));
        wgmma_commit();
        wgmma_wait<0>();
        acc_fence(o);
        bar_arrive(4 + (i & 1u), 384);
#pragma unroll
        for (u32 nj = 0; nj < 4; ++nj)
#pragma unroll
            for (u32 hr = 0; hr < 2; ++hr) {
                const u32 tl = hr ? tb : ta;
                if (tl < len)
                    *reinterpret_cast<u32*>(o_out + (u64(t0 + tl) * H + head) * V + v0 + 8u * nj + 2u * me.tq) =
                        pack_bf16(scale * o[4 * nj + 2 * hr], scale * o[4 * nj + 2 * hr + 1]);
            }
    }
}
#endif

// The ring walk over one sequence's chunks (inter_state_seq's arguments;
// its ring, hb, stage and vs in shared memory).
// With O (and WG: the walk with o), the chunks' output instead of h_out and
// v_new, by a third warpgroup (threads 256 .. 383, walk_o_chunks) one chunk
// behind the walk: the walk's two warpgroups sync among themselves on named
// barrier 1, leave each chunk's hb and v_new (bf16, in vt, K-major swizzled as
// stage) in one of two buffers and its q, k and g in the ring (InterRingWgO,
// three slots), then arrive at barrier 2 + i % 2 (chunk i is there); before
// overwriting chunk i's buffers (at chunk i + 2) they wait on barrier 4 + i % 2
// (the output warpgroup is done with chunk i).
template <u32 KD, u32 BV, u32 NW, u32 S, bool WG = false, bool O = false>
__device__ __forceinline__ void inter_state_ring_seq(const bf16* __restrict__ k_in, const bf16* __restrict__ w_in,
                                                     const bf16* __restrict__ u_in, const float* __restrict__ g_in,
                                                     const float* __restrict__ h0, bf16* __restrict__ h_out,
                                                     bf16* __restrict__ v_new, float* __restrict__ final_state,
                                                     u32 H, u32 Hg, u32 V, u32 bos, u32 eos, u32 c_first, u32 c_end,
                                                     u32 state, u32 v0, u32 head, unsigned char* ring, bf16* hb,
                                                     bf16* stage, bf16* vs, const bf16* __restrict__ q_in = nullptr,
                                                     bf16* __restrict__ o_out = nullptr, float scale = 0.0f,
                                                     bf16* vt = nullptr) {
    static_assert(!O || (WG && S == 3), "the walk with o runs on warpgroup products, three slots");
    using R = typename RingOf<O, typename WalkStateOf<WG, KD, BV, NW, S>::ring>::type;
    static_assert(NW == 4 || NW == 8, "4 or 8 warps");
    constexpr u32 NTH = 32 * NW;
    constexpr u32 LDK = R::LDK, LDU = R::LDU;
    constexpr u32 VW = BV * 4 / NW;           // V rows of a warp in steps 2 and 3
    constexpr u32 KC = BT * KD / 8 / NTH;     // 16-byte copies of k (and of w) a thread
    constexpr u32 UQ = BV / 8;                // 16-byte pieces of a u row
    constexpr u32 LDVS = BV + 8;              // vs rows: v_new [64][BV] bf16 of the chunk
    static_assert(BT * UQ <= NTH, "one u copy a thread at most");
    const u32 tid = threadIdx.x;
#ifdef MLXN_WGMMA
    if constexpr (O) {
        if (tid >= NTH) {
            walk_o_chunks(o_out, H, V, bos, eos, c_first, c_end, v0, head, ring, hb, vt, scale, tid - NTH);
            return;
        }
    }
#endif
    typename WalkStateOf<WG, KD, BV, NW, S>::type h(tid);
    const u32 lane = tid & 31u, warp = tid >> 5, gq = lane >> 2, tq = lane & 3u;
    const u32 kh = head / (H / Hg);
    const u32 trow = 16u * (warp % 4u), vw0 = VW * (warp / 4u);   // steps 2, 3: t rows [trow, +16), V rows [vw0, +VW)
    const u32 t_lo = trow + gq;

    const u64 state0 = ((u64(state) * H + head) * V + v0) * KD;
    h.load(h0 + state0);

    // The thread's copies: k and w rows tc + (NTH / (KD / 8)) r at column qc;
    // u row tu, piece qu (when tid < BT UQ); g row tid (when tid < BT).
    const u32 tc = tid / (KD / 8), qc = (tid % (KD / 8)) * 8u;
    constexpr u32 TSTEP = NTH / (KD / 8);
    const u32 tu = tid / UQ, qu = (tid % UQ) * 8u;
    const u32 ksrc = tc * Hg * KD + qc, wsrc = tc * H * KD + qc, usrc = tu * H * V + qu, dst = tc * LDK + qc;
    // w's place: as k's, or in InterRingWg's swizzled blocks (row tc + 16 r
    // keeps tc's swizzle: the rows of a thread are 16 apart).
    static_assert(!R::W_SWIZZLED || TSTEP % 8 == 0, "a thread's w rows share their swizzle");
    const u32 wdst = R::W_SWIZZLED ? (qc >> 6) * (BT * 64u) + tc * 64u + ((((qc >> 3) & 7u) ^ (tc & 7u)) << 3) : dst;
    constexpr u32 WSTEP = R::W_SWIZZLED ? TSTEP * 64u : TSTEP * LDK;
    // k's (and q's) place: padded rows, or w's swizzled places.
    const u32 kdst = R::K_SWIZZLED ? wdst : dst;
    constexpr u32 KSTEP = R::K_SWIZZLED ? WSTEP : TSTEP * LDK;
    const u64 kstep = u64(BT) * Hg * KD, wstep = u64(BT) * H * KD, ustep = u64(BT) * H * V;
    const bf16* kbase = k_in + (u64(bos) * Hg + kh) * KD;   // chunk c_first's rows
    const bf16* qbase = O ? q_in + (u64(bos) * Hg + kh) * KD : nullptr;
    const bf16* wbase = w_in + (u64(bos) * H + head) * KD;
    const bf16* ubase = u_in + (u64(bos) * H + head) * V + v0;
    const float* gbase = g_in + u64(bos) * H + head;
    // Chunk c's operands into its slot, 0 past len, in two parts a chunk
    // ahead: copy_wug (w, u and g rows) after the chunk's first barrier,
    // copy_k (the k rows, then the commit: one group a chunk, empty past the
    // last, so that the wait counts the same groups at every chunk) while step
    // 2's products run, with the snapshot's stores and the decay. The block's
    // copies take about a third of a chunk's 3300 cycles of load-store issue
    // wherever they stand; spread out, less of it stands in line before step
    // 2 (bench/notes/gdn-walk-phases-2026-11-29.md).
    // Copies AHEAD chunks ahead: one with two slots (and with O, whose third
    // slot the output warpgroup reads), two with three slots otherwise.
    static_assert(S == 2 || S == 3, "two or three slots");
    constexpr u32 AHEAD = S == 3 && !O ? 2u : 1u;
    auto slot_of = [&](u32 c, u32& i, u32& len) -> unsigned char* {
        i = c - c_first;
        len = min(BT, eos - bos - i * BT);
        return ring + (i % S) * R::SLOT;
    };
    // The thread's KC 16-byte copies of a chunk's rows tc + TSTEP r (0 past
    // len, where the copy names the chunk's first row and reads nothing).
    auto copy_rows = [&](bf16* dst, u32 dstep, const bf16* src, u32 off, u32 rstep, u32 len) {
#pragma unroll
        for (u32 r = 0; r < KC; ++r) {
            const bool live = tc + TSTEP * r < len;
            cp_async16(dst + dstep * r, src + (live ? off + rstep * r : 0u), live);
        }
    };
    auto copy_wug = [&](u32 c) {
        if (c >= c_end) return;
        u32 i, len;
        unsigned char* s = slot_of(c, i, len);
        copy_rows(reinterpret_cast<bf16*>(s + R::W_OFF) + wdst, WSTEP, wbase + i * wstep, wsrc, TSTEP * H * KD, len);
        if (tid < BT * UQ) {
            const bool live = tu < len;
            cp_async16(reinterpret_cast<bf16*>(s + R::U_OFF) + tu * LDU + qu, ubase + i * ustep + (live ? usrc : 0u), live);
        }
        if (tid < BT) {
            const bool live = tid < len;
            cp_async4(reinterpret_cast<float*>(s + R::G_OFF) + tid, gbase + (u64(i) * BT + (live ? tid : 0u)) * H, live);
        }
    };
    auto copy_k = [&](u32 c) {
        if (c < c_end) {
            u32 i, len;
            unsigned char* sl = slot_of(c, i, len);
            copy_rows(reinterpret_cast<bf16*>(sl + R::K_OFF) + kdst, KSTEP, kbase + i * kstep, ksrc, TSTEP * Hg * KD, len);
            if constexpr (O)
                copy_rows(reinterpret_cast<bf16*>(sl + R::Q_OFF) + kdst, KSTEP, qbase + i * kstep, ksrc, TSTEP * Hg * KD, len);
        }
        cp_async_commit();
    };
    copy_wug(c_first);
    copy_k(c_first);
    if constexpr (AHEAD == 2) {
        copy_wug(c_first + 1);
        copy_k(c_first + 1);
    }

    // The walk's barrier: with O its two warpgroups alone (named barrier 1).
    auto walk_sync = [] {
        if constexpr (O) bar_sync(1, NTH);
        else __syncthreads();
    };
    for (u32 c = c_first; c < c_end; ++c) {
        const u32 i = c - c_first, t0 = bos + i * BT, len = min(BT, eos - t0);
        const unsigned char* s = ring + (i % S) * R::SLOT;
        const bf16* ks = reinterpret_cast<const bf16*>(s + R::K_OFF);
        const bf16* ws = reinterpret_cast<const bf16*>(s + R::W_OFF);
        const bf16* us = reinterpret_cast<const bf16*>(s + R::U_OFF);
        const float* gsl = reinterpret_cast<const float*>(s + R::G_OFF);
        // With O, chunk i's hb and vt of two buffers, free once the output
        // warpgroup is done with chunk i - 2 (which also frees the slot the
        // next chunk's copies go to).
        bf16* hbc = O ? hb + (i & 1u) * (BV * KD) : hb;
        bf16* vtc = O ? vt + (i & 1u) * (BV * BT) : vt;
        if constexpr (O) {
            if (i >= 2) bar_sync(4 + (i & 1u), NTH + 128);
        }

        // 1.
        h.to_hb(hbc);
        cp_async_wait<AHEAD - 1>();   // this chunk's group
#ifdef MLXN_WGMMA
        if constexpr (WG) fence_proxy_async_smem();   // hb and the slot's w (cp.async) for the warpgroups' products
#endif
        walk_sync();
        copy_wug(c + AHEAD);
        const float g_last = gsl[len - 1];

        // 2., with the gates, the k rows' copies, the snapshot (not with O)
        // and the decay while its products run.
        float xa[VW / 8][4];
        float gate[2];
        if constexpr (WG) {
#ifdef MLXN_WGMMA
            float(&x8)[8] = reinterpret_cast<float(&)[8]>(xa);
            h.issue_x(x8, ws, hbc);
            walk_gates(gate, gsl, g_last, t_lo, len);
            copy_k(c + AHEAD);
            if constexpr (!O) WalkStateWg::snapshot(h_out + ((u64(c) * H + head) * V + v0) * KD, hbc, tid);
            // The decay after the wait: ptxas would wait there anyway before
            // writing the state's registers while a product is in flight.
            wgmma_wait<0>();
            acc_fence(x8);
            h.scale(expf(g_last));
#endif
        } else {
            u32 wa[4];
            walk_wh<KD, VW>(xa, [&](u32 kk) -> const u32(&)[4] {
                frag_a(wa, ws, LDK, trow, 16u * kk, lane);
                return wa;
            }, hb, trow, vw0, len, lane);
            walk_gates(gate, gsl, g_last, t_lo, len);
            copy_k(c + AHEAD);
            walk_snapshot<KD, BV, NTH>(h_out + ((u64(c) * H + head) * V + v0) * KD, hb, tid);
            h.scale(expf(g_last));
        }

        // 3. (v_new's rows into vs, then to memory by 16-byte pieces after
        // the barrier: a thread's 4-byte stores would each touch 8 rows. With
        // O into vt, for the output warpgroup, whom the walk then tells.)
        walk_vnew<VW, WG, O>(xa, [&](u32, u32, u32 tl, u32 vl) { return *reinterpret_cast<const u32*>(us + tl * LDU + vl); },
                             [&](u32 tl, u32 vl, u32 pair) {
                                 if constexpr (!O) *reinterpret_cast<u32*>(vs + tl * LDVS + vl) = pair;
                             },
                             gate, t_lo, vw0, tq, len, stage, vtc);
#ifdef MLXN_WGMMA
        if constexpr (WG) fence_proxy_async_smem();   // stage (and vt) for the products
#endif
        walk_sync();
        if constexpr (O) {
            bar_arrive(2 + (i & 1u), NTH + 128);
        } else {
#pragma unroll
            for (u32 e = tid; e < BT * (BV / 8); e += NTH) {
                const u32 r = e / (BV / 8), q = (e % (BV / 8)) * 8u;
                if (r < len) *reinterpret_cast<uint4*>(v_new + (u64(t0 + r) * H + head) * V + v0 + q) = *reinterpret_cast<const uint4*>(vs + r * LDVS + q);
            }
        }

        // 4.
        if constexpr (WG) {
#ifdef MLXN_WGMMA
            h.template issue_update<R::K_SWIZZLED>(stage, ks, LDK, lane);
            wgmma_commit();
            wgmma_wait<0>();
            acc_fence(h.d);
#endif
        } else {
            h.add_vg_k(stage, ks, LDK, len);
        }
    }
    cp_async_wait<0>();   // the empty groups past the last chunk
    // With O, the output warpgroup's last two chunks (so that every arrival
    // at barriers 4 and 5 is waited for).
    if constexpr (O) {
        const u32 n = c_end - c_first;
        for (u32 i = n >= 2 ? n - 2 : 0; i < n; ++i) bar_sync(4 + (i & 1u), NTH + 128);
    }

    h.store(final_state + state0);
}

// The ring form over the seqs table. Grid (V / BV, H, n_seq), 32 NW threads,
// InterRing<KD, BV, S>::BYTES of dynamic shared memory. Bindings as the other
// k{KD} entries.
#define GDR_INTER_RING(NAME, KD, BV, NW, S)                                                                       \
    extern "C" __global__ void __launch_bounds__(32 * NW) gated_delta_net_chunk_inter_state_##NAME##_bf16(       \
        const bf16* __restrict__ k_in, const bf16* __restrict__ w_in, const bf16* __restrict__ u_in,             \
        const float* __restrict__ g_in, const float* __restrict__ h0, bf16* __restrict__ h_out,                  \
        bf16* __restrict__ v_new, float* __restrict__ final_state, const uint2* __restrict__ seqs,               \
        const Params* __restrict__ pp) {                                                                         \
        __shared__ __align__(16) bf16 hb[BV * (KD + 8)];                                                         \
        __shared__ __align__(16) bf16 stage[BV * (BT + 8)];                                                      \
        __shared__ __align__(16) bf16 vs[BT * (BV + 8)];                                                         \
        extern __shared__ __align__(16) unsigned char dyn[];                                                     \
        const u32 seq = blockIdx.z;                                                                              \
        const uint2 first = seqs[seq], next = seqs[seq + 1];                                                     \
        if (!seq_ok(first, next, pp->n_tok, pp->nt)) return;                                                     \
        inter_state_ring_seq<KD, BV, NW, S>(k_in, w_in, u_in, g_in, h0, h_out, v_new, final_state, pp->h,        \
                                            pp->hg, pp->v, first.x, next.x, first.y, next.y, seq,                \
                                            blockIdx.x * BV, blockIdx.y, dyn, hb, stage, vs);                    \
    }
GDR_INTER_RING(k128, 128, 32, 8, 2)
#undef GDR_INTER_RING

// The ring walk at K = 128 on warpgroup products where compiled for sm_90a
// (MLXN_WGMMA; the op's walk and the seed's on compute capability 9.0):
// x = w hb^T as m64n16k16 with both operands in shared memory (the ring's w
// rows and hb, 128-byte swizzled), h += k^T vg as m64n32k16 (k^T by
// ldmatrix.trans into registers, vg swizzled), the state the update's
// accumulator (WalkStateWg). 256 threads a block of 32 V rows; dynamic shared
// memory GDR_INTER_WG_BYTES: from its first 1024-byte boundary hb (8 KB),
// stage (4 KB), then the ring of two slots; or GDR_INTER_WG3_BYTES, three
// slots, the copies two chunks ahead (the op's launch where the grid has at
// most a block an SM: 758 against 827 us at B 1, T 32768 on an H200; at B 8
// the two-slot walk, two blocks an SM). Not the mma.sync walk's bits (the
// tensor cores sum in their own order). Compiled for another target, the
// same launch runs the mma.sync ring walk (InterRing<128, 32, S> at the start
// of the dynamic shared memory), so the entries exist and compute the walk
// everywhere.
constexpr u32 GDR_INTER_WG_BYTES = 1024 + 32 * 128 * 2 + 32 * BT * 2 + InterRingWg::BYTES;
static_assert(InterRing<128, 32, 2>::BYTES <= GDR_INTER_WG_BYTES, "the mma.sync ring fits the warpgroup walk's launch");
// With three slots, the copies two chunks ahead (a launch of at most one
// block an SM, which then loses no occupancy to the third slot):
constexpr u32 GDR_INTER_WG3_BYTES = 1024 + 32 * 128 * 2 + 32 * BT * 2 + 3 * InterRingWg::SLOT;
static_assert(InterRing<128, 32, 3>::BYTES <= GDR_INTER_WG3_BYTES, "the mma.sync ring fits the three-slot launch");
// vs: v_new's tile [64][40]; hbs, stages: the mma.sync walk's hb [32][136]
// and stage [32][72] (where not compiled for sm_90a; static, declared once by
// the caller for both instances).
template <u32 S>
__device__ __forceinline__ void inter_state_wg_seq(const bf16* __restrict__ k_in, const bf16* __restrict__ w_in,
                                                   const bf16* __restrict__ u_in, const float* __restrict__ g_in,
                                                   const float* __restrict__ h0, bf16* __restrict__ h_out,
                                                   bf16* __restrict__ v_new, float* __restrict__ final_state, u32 H,
                                                   u32 Hg, u32 V, uint2 first, uint2 next, u32 seq,
                                                   unsigned char* dyn, bf16* vs, bf16* hbs, bf16* stages) {
#ifdef MLXN_WGMMA
    unsigned char* base = dyn + ((1024u - (smem_addr(dyn) & 1023u)) & 1023u);
    bf16* hb = reinterpret_cast<bf16*>(base);
    bf16* stage = hb + 32 * 128;
    unsigned char* ring = base + 32 * 128 * 2 + 32 * BT * 2;
    inter_state_ring_seq<128, 32, 8, S, true>(k_in, w_in, u_in, g_in, h0, h_out, v_new, final_state, H, Hg, V, first.x,
                                              next.x, first.y, next.y, seq, blockIdx.x * 32u, blockIdx.y, ring, hb,
                                              stage, vs);
#else
    inter_state_ring_seq<128, 32, 8, S>(k_in, w_in, u_in, g_in, h0, h_out, v_new, final_state, H, Hg, V, first.x,
                                        next.x, first.y, next.y, seq, blockIdx.x * 32u, blockIdx.y, dyn, hbs, stages, vs);
#endif
}
// The entries' walk: three slots where the launch gave GDR_INTER_WG3_BYTES
// of dynamic shared memory, else two.
__device__ __forceinline__ void inter_state_wg_slots(const bf16* __restrict__ k_in, const bf16* __restrict__ w_in,
                                                     const bf16* __restrict__ u_in, const float* __restrict__ g_in,
                                                     const float* __restrict__ h0, bf16* __restrict__ h_out,
                                                     bf16* __restrict__ v_new, float* __restrict__ final_state, u32 H,
                                                     u32 Hg, u32 V, uint2 first, uint2 next, u32 seq,
                                                     unsigned char* dyn) {
    __shared__ __align__(16) bf16 vs[BT * (32 + 8)];
#ifdef MLXN_WGMMA
    bf16* hbs = nullptr;
    bf16* stages = nullptr;
#else
    __shared__ __align__(16) bf16 hbs[32 * (128 + 8)];
    __shared__ __align__(16) bf16 stages[32 * (BT + 8)];
#endif
    if (dynamic_smem_bytes() >= GDR_INTER_WG3_BYTES)
        inter_state_wg_seq<3>(k_in, w_in, u_in, g_in, h0, h_out, v_new, final_state, H, Hg, V, first, next, seq, dyn, vs,
                              hbs, stages);
    else
        inter_state_wg_seq<2>(k_in, w_in, u_in, g_in, h0, h_out, v_new, final_state, H, Hg, V, first, next, seq, dyn, vs,
                              hbs, stages);
}
// The varlen walk's entry at K = 128 (bindings and grid as the k128 entry's).
extern "C" __global__ void __launch_bounds__(256) gated_delta_net_chunk_inter_state_k128_wg_bf16(
    const bf16* __restrict__ k_in, const bf16* __restrict__ w_in, const bf16* __restrict__ u_in,
    const float* __restrict__ g_in, const float* __restrict__ h0, bf16* __restrict__ h_out,
    bf16* __restrict__ v_new, float* __restrict__ final_state, const uint2* __restrict__ seqs,
    const Params* __restrict__ pp) {
    extern __shared__ __align__(16) unsigned char dyn[];
    const u32 seq = blockIdx.z;
    const uint2 first = seqs[seq], next = seqs[seq + 1];
    if (!seq_ok(first, next, pp->n_tok, pp->nt)) return;
    inter_state_wg_slots(k_in, w_in, u_in, g_in, h0, h_out, v_new, final_state, pp->h, pp->hg, pp->v, first, next, seq,
                         dyn);
}
#ifdef MLXN_WGMMA
// The walk with o at K = 128 (sm_90a; the harness's variant, not yet the
// op's): the warpgroup walk and, in a third warpgroup, each chunk's output
// (chunk_o's values; inter_state_ring_seq's O) in place of the snapshots and
// v_new. Bindings: 0 q, 1 k, 2 w, 3 u, 4 g, 5 h0, 6 o, 7 final_state,
// 8 seqs, 9 params; grid as the _wg entry's, 384 threads; dynamic shared
// memory GDR_INTER_O_WG_BYTES: from its first 1024-byte boundary two hb
// (16 KB), stage (4 KB), two vt (8 KB), then InterRingWgO (162 KB).
constexpr u32 GDR_INTER_O_WG_BYTES = 1024 + 2 * 32 * 128 * 2 + 32 * BT * 2 + 2 * 32 * BT * 2 + InterRingWgO::BYTES;
static_assert(GDR_INTER_O_WG_BYTES <= 227 * 1024, "the walk with o fits an SM's shared memory");
extern "C" __global__ void __launch_bounds__(384, 1) gated_delta_net_chunk_inter_state_o_k128_wg_bf16(
    const bf16* __restrict__ q_in, const bf16* __restrict__ k_in, const bf16* __restrict__ w_in,
    const bf16* __restrict__ u_in, const float* __restrict__ g_in, const float* __restrict__ h0,
    bf16* __restrict__ o_out, float* __restrict__ final_state, const uint2* __restrict__ seqs,
    const Params* __restrict__ pp) {
    extern __shared__ __align__(16) unsigned char dyn[];
    const u32 seq = blockIdx.z;
    const uint2 first = seqs[seq], next = seqs[seq + 1];
    if (!seq_ok(first, next, pp->n_tok, pp->nt)) return;
    unsigned char* base = dyn + ((1024u - (smem_addr(dyn) & 1023u)) & 1023u);
    bf16* hb = reinterpret_cast<bf16*>(base);
    bf16* stage = hb + 2 * 32 * 128;
    bf16* vt = stage + 32 * BT;
    unsigned char* ring = base + 2 * 32 * 128 * 2 + 32 * BT * 2 + 2 * 32 * BT * 2;
    inter_state_ring_seq<128, 32, 8, 3, true, true>(k_in, w_in, u_in, g_in, h0, nullptr, nullptr, final_state, pp->h,
                                                    pp->hg, pp->v, first.x, next.x, first.y, next.y, seq,
                                                    blockIdx.x * 32u, blockIdx.y, ring, hb, stage, nullptr, q_in, o_out,
                                                    pp->scale, vt);
}
#endif
// The seed's walk (gated_delta_net_chunk_inter_state_bf16's bindings,
// params and grid: sequence b is tokens [b T, b T + T), chunks
// [b NT, b NT + NT)) with 256 threads and GDR_INTER_WG_BYTES.
extern "C" __global__ void __launch_bounds__(256) gated_delta_net_chunk_inter_state_wg_bf16(
    const bf16* __restrict__ k_in, const bf16* __restrict__ w_in, const bf16* __restrict__ u_in,
    const float* __restrict__ g_in, const float* __restrict__ h0, bf16* __restrict__ h_out,
    bf16* __restrict__ v_new, float* __restrict__ final_state, const GatedDeltaNetChunkParams* __restrict__ pp) {
    extern __shared__ __align__(16) unsigned char dyn[];
    const GatedDeltaNetChunkParams p = *pp;
    const u32 b = blockIdx.z;
    const uint2 first = make_uint2(b * p.dims.t, b * p.nt);
    const uint2 next = make_uint2(first.x + p.dims.t, first.y + p.nt);
    if (p.dims.k != 128 || b >= p.dims.b || !seq_ok(first, next, p.dims.b * p.dims.t, p.dims.b * p.nt)) return;
    inter_state_wg_slots(k_in, w_in, u_in, g_in, h0, h_out, v_new, final_state, p.dims.h, p.dims.hg, p.dims.v, first,
                         next, b, dyn);
}


// gated_delta_net_chunk_inter_state_bf16 (the seed's entry, driven by host
// code written against mlx-native): sequence b is tokens [b T, b T + T),
// chunks [b NT, b NT + NT), K = 128, T a multiple of 64 (the host validates
// both). Layouts: k [B, T, Hg, K]; w [B, T, H, K]; u, v_new [B, T, H, V];
// g [B, T, H]; h0, final_state [B, H, V, K]; h_out [B, NT, H, V, K].
// Grid (V / 32, H, B), 128 threads; the 20480 bytes of dynamic shared memory
// the host binds hold hb, stage and g (13568 bytes of it), the k rows are static.
// Bindings 0..8: k, w, u, g, h0, h_out, v_new, final_state, params.
extern "C" __global__ void __launch_bounds__(128)
gated_delta_net_chunk_inter_state_bf16(const bf16* __restrict__ k_in, const bf16* __restrict__ w_in,
                                       const bf16* __restrict__ u_in, const float* __restrict__ g_in,
                                       const float* __restrict__ h0, bf16* __restrict__ h_out,
                                       bf16* __restrict__ v_new, float* __restrict__ final_state,
                                       const GatedDeltaNetChunkParams* __restrict__ pp) {
    constexpr u32 KD = 128, BV = 32;
    extern __shared__ __align__(16) unsigned char dyn[];
    bf16* hb = reinterpret_cast<bf16*>(dyn);                            // [BV][KD + 8]
    bf16* stage = hb + BV * (KD + 8);                                   // [BV][BT + 8]
    float* gs = reinterpret_cast<float*>(stage + BV * (BT + 8));        // [BT]
    __shared__ __align__(16) bf16 kt[BT * (KD + 8)];
    const GatedDeltaNetChunkParams p = *pp;
    const u32 b = blockIdx.z;
    // The sequence as a seqs entry would give it; params inconsistent with
    // themselves (nt != T / 64, K != 128) do nothing.
    const uint2 first = make_uint2(b * p.dims.t, b * p.nt);
    const uint2 next = make_uint2(first.x + p.dims.t, first.y + p.nt);
    if (p.dims.k != KD || b >= p.dims.b || !seq_ok(first, next, p.dims.b * p.dims.t, p.dims.b * p.nt)) return;
    inter_state_seq<KD, BV, false>(k_in, w_in, u_in, g_in, h0, h_out, v_new, final_state, p.dims.h, p.dims.hg, p.dims.v,
                                   first.x, next.x, first.y, next.y, b, blockIdx.x * BV, blockIdx.y, kt, hb, stage, gs,
                                   nullptr);
}

// ---------------------------------------------------------------------------
// gated_delta_net_chunk_o_bf16: per chunk and V head, V columns [v0, v0 + VB),
//   S[i, j] = q_i . k_j                                      (bf16 operands, f32 sums)
//   P[i, j] = bf16(S[i, j] exp(g_i - g_j)) for j <= i < len, 0 elsewhere
//   o[i, v] = bf16(scale (exp(g_i) sum_k q_i[k] h[v, k] + sum_j P[i, j] v_new[j, v]))
// with h the chunk-start state (bf16 [V, K]) and q, k of K head kh.
// VB = 128 where V is a multiple of 128, else 64. Grid (V / VB, H, nt) here
// (the Metal kernel's is (V / 64, nt, H)): the heads of a chunk run side by
// side, so the heads of a GQA group read q and k once from memory, and h and
// o go to memory in runs across heads. 256 threads = 8 warps: warp w owns
// rows [16 (w / 2), +16) and o columns [VB / 2 (w % 2), +VB / 2); it computes
// S for its rows and the key tiles on or left of them (the two warps of a row
// block both do), turns S into P in registers and multiplies by the staged
// v_new. Every operand comes in one wave of cp.async copies, so a block waits
// on memory once (v_new, in a second group, only before P v_new), and q and
// k are read once per VB columns. Dynamic shared memory, bound by the host
// (chunkOCudaSharedBytes): q and k [64][K + 8], h [VB][K + 8], v_new
// [64][VB + 8] bf16, 85 KiB at K = V = 128 (two blocks per SM), 149 KiB at
// K = 256, V = 128. At K = 128 the entry runs the body's instance with K a
// constant (the staging's divisions and the K loop unrolled: 10 % less time
// on an H200 at B 1, T 32768), else the one for any K.
// Bindings: 0 q, 1 k, 2 v_new, 3 h, 4 g (cumsummed), 5 o, 6 chunks, 7 params.
template <u32 VB, u32 KD = 0>
__device__ __forceinline__ void chunk_o_body(const bf16* __restrict__ q_in, const bf16* __restrict__ k_in,
                                             const bf16* __restrict__ vn_in, const bf16* __restrict__ h_in,
                                             const float* __restrict__ g_in, bf16* __restrict__ o_out,
                                             const uint2* __restrict__ chunks, const Params* __restrict__ pp,
                                             bf16* smem, float* gs) {
    constexpr u32 NI = VB / 16;   // 8-column o tiles per warp
    constexpr u32 LDV = VB + 8;
    const Params p = *pp;
    const u32 v0 = blockIdx.x * VB, head = blockIdx.y, cidx = blockIdx.z;
    const uint2 ch = chunks[cidx];
    if (!chunk_ok(ch, pp->n_tok)) return;
    const u32 t0 = ch.x, len = ch.y;
    const u32 H = p.h, K = KD ? KD : p.k, V = p.v, kh = head / (H / p.hg), LDK = K + 8;
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5, gq = lane >> 2, tq = lane & 3u;
    const u32 mt = warp >> 1, r0 = 16u * mt, c0 = (VB / 2) * (warp & 1u);
    bf16* qs = smem;
    bf16* ks = qs + BT * LDK;
    bf16* hs = ks + BT * LDK;
    bf16* vs = hs + VB * LDK;

    stage_rows(qs, LDK, q_in + (u64(t0) * p.hg + kh) * K, u64(p.hg) * K, K, len, tid, 256u);
    stage_rows(ks, LDK, k_in + (u64(t0) * p.hg + kh) * K, u64(p.hg) * K, K, len, tid, 256u);
    {
        const bf16* hp = h_in + ((u64(cidx) * H + head) * V + v0) * K;
        const u32 q8 = K / 8u;
        for (u32 e = tid; e < VB * q8; e += 256u) {
            const u32 r = e / q8, q = e % q8;
            cp_async16(hs + r * LDK + q * 8u, hp + u64(r) * K + q * 8u, true);
        }
    }
    cp_async_commit();
    stage_rows(vs, LDV, vn_in + (u64(t0) * H + head) * V + v0, u64(H) * V, VB, len, tid, 256u);
    cp_async_commit();
    if (tid < BT) gs[tid] = tid < len ? g_in[u64(t0 + tid) * H + head] : 0.0f;

    float accs[8][4], acco[NI][4];
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) accs[n][e] = 0.0f;
#pragma unroll
    for (u32 n = 0; n < NI; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acco[n][e] = 0.0f;

    cp_async_wait<1>();
    __syncthreads();   // q, k, h and g landed for every thread
    for (u32 kk = 0; kk < K; kk += 16) {
        u32 a[4];
        frag_a(a, qs, LDK, r0, kk, lane);
#pragma unroll
        for (u32 nj = 0; nj < 8; nj += 2) {
            if (nj < 2u * (mt + 1u)) {
                mma_b16<true>(accs[nj], accs[nj + 1], a, ks, LDK, 8u * nj, kk, lane);
            }
        }
#pragma unroll
        for (u32 ni = 0; ni < NI; ni += 2) {
            mma_b16<true>(acco[ni], acco[ni + 1], a, hs, LDK, c0 + 8u * ni, kk, lane);
        }
    }
    cp_async_wait<0>();
    __syncthreads();   // v_new landed for every thread

    // acco *= exp(g_i) (0 past len); P = bf16(S exp(g_i - g_j)) masked, as A fragments
    // (P's exp by __expf, the masked elements selected away: as wy_store_a).
    float gi[2], di[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const u32 i = r0 + gq + 8u * hr;
        gi[hr] = gs[i];
        di[hr] = i < len ? expf(gi[hr]) : 0.0f;
    }
#pragma unroll
    for (u32 n = 0; n < NI; ++n) {
        acco[n][0] *= di[0];
        acco[n][1] *= di[0];
        acco[n][2] *= di[1];
        acco[n][3] *= di[1];
    }
#pragma unroll
    for (u32 jt = 0; jt < 4; ++jt) {
        if (jt > mt) break;
        u32 a[4];
#pragma unroll
        for (u32 half = 0; half < 2; ++half) {
            const u32 nj = 2u * jt + half;
            const u32 j = 8u * nj + 2u * tq;
            const float gj0 = gs[j], gj1 = gs[j + 1];
#pragma unroll
            for (u32 hr = 0; hr < 2; ++hr) {
                const u32 i = r0 + gq + 8u * hr;
                const bool live = i < len;
                const float e0 = accs[nj][2 * hr] * __expf(gi[hr] - gj0), e1 = accs[nj][2 * hr + 1] * __expf(gi[hr] - gj1);
                a[2 * half + hr] = pack_bf16((live && j <= i) ? e0 : 0.0f, (live && j + 1u <= i) ? e1 : 0.0f);
            }
        }
#pragma unroll
        for (u32 ni = 0; ni < NI; ni += 2) {
            mma_b16<false>(acco[ni], acco[ni + 1], a, vs, LDV, c0 + 8u * ni, 16u * jt, lane);
        }
    }

    const float scale = p.scale;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const u32 i = r0 + gq + 8u * hr;
        if (i >= len) continue;
        bf16* orow = o_out + (u64(t0 + i) * H + head) * V + v0;
#pragma unroll
        for (u32 ni = 0; ni < NI; ++ni) {
            const u32 j = c0 + 8u * ni + 2u * tq;
            *reinterpret_cast<u32*>(orow + j) = pack_bf16(scale * acco[ni][2 * hr], scale * acco[ni][2 * hr + 1]);
        }
    }
}

extern "C" __global__ void __launch_bounds__(256, 2)
gated_delta_net_chunk_o_bf16(const bf16* __restrict__ q_in, const bf16* __restrict__ k_in,
                             const bf16* __restrict__ vn_in, const bf16* __restrict__ h_in,
                             const float* __restrict__ g_in, bf16* __restrict__ o_out,
                             const uint2* __restrict__ chunks, const Params* __restrict__ pp) {
    extern __shared__ __align__(16) unsigned char dyn[];
    __shared__ float gs[BT];
    bf16* smem = reinterpret_cast<bf16*>(dyn);
    if (pp->v % 128u == 0u) {
        if (pp->k == 128u)
            chunk_o_body<128, 128>(q_in, k_in, vn_in, h_in, g_in, o_out, chunks, pp, smem, gs);
        else
            chunk_o_body<128>(q_in, k_in, vn_in, h_in, g_in, o_out, chunks, pp, smem, gs);
    } else {
        chunk_o_body<64>(q_in, k_in, vn_in, h_in, g_in, o_out, chunks, pp, smem, gs);
    }
}
