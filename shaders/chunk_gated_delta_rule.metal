// chunk_gated_delta_rule: the steps of the chunked gated delta rule forward
// (arXiv 2412.06464 section 4; the same math as FLA's chunk_gated_delta_rule),
// chunks of BT = 64 tokens, several sequences of any lengths in one call.
//
// Tokens are flat over all sequences: n_tok = B * T, or the total of the
// variable lengths. A chunk never straddles two sequences; the last chunk of a
// sequence may be short. Two u32 tables, built by the host, describe them:
//   chunks [nt]        uint2 (first token, length 1..64) of each chunk
//   seqs   [n_seq + 1] uint2 (first token, first chunk) of each sequence,
//                      then (n_tok, nt)
// Per chunk, with tokens i, j in 0..len and g the log decay cumsummed within
// the chunk (kh = head / (H / Hg) is the K head of a V head):
//   chunk_local_cumsum_varlen_g_f32  g = cumsum of the raw log decay
//   (chunk_local_cumsum_g_f32: the same scan over B sequences of T tokens, any chunk size)
//   gated_delta_net_kkt_bf16         A[i, j] = beta_i exp(g_i - g_j) k_i . k_j, j < i; 0 elsewhere
//   chunk_tri_solve_invert_f32       Ai = (I + A)^-1
//   gated_delta_net_recompute_wu_bf16  w = Ai (beta exp(g) k),  u = Ai (beta v)
//   gated_delta_net_kkt_solve_wu_bf16  the three above in one kernel, A and Ai kept on chip:
//                                    w and u from k, v, beta, g (the op's dispatch)
//   gated_delta_net_chunk_inter_state_k{64,128,256}_bf16
//                                    the state recurrence over the chunks of a sequence
//   (gated_delta_net_chunk_inter_state_bf16: the same recurrence for B sequences of
//    T tokens, T a multiple of 64, K = 128, with the seed's bindings and params)
//   gated_delta_net_chunk_o_bf16     o_i = scale (exp(g_i) q_i . h^T + sum_{j <= i} exp(g_i - g_j) (q_i . k_j) v_new_j)
//
// Operands that are indexed by token (q, k, v, w, u, v_new) are staged in
// threadgroup memory with the rows past the chunk's length zeroed, so a short
// chunk never reads past its sequence (nor past the end of a buffer) and the
// matrix products run on full 8x8 tiles.
//
// Layouts: q, k [n_tok, Hg, K] bf16; v, u, v_new, o [n_tok, H, V] bf16;
// w [n_tok, H, K] bf16; g, beta [n_tok, H] f32 (beta also bf16);
// A, Ai [n_tok, H, 64] f32 (row i of a chunk holds its 64 columns j);
// h0, final_state [n_seq, H, V, K] f32; h [nt, H, V, K] bf16 chunk-start states.
// The two entries of the seed's host code (mlx-native) take the same layouts
// for B sequences of T tokens (n_tok = B * T, n_seq = B, B * NT chunks), and
// their own param structs.

typedef simdgroup_matrix<float, 8, 8>  mat_f32;
typedef simdgroup_matrix<bfloat, 8, 8> mat_bf16;

constant constexpr uint BT = 64;   // tokens per chunk

// The chunk and sequence tables come from the caller's buffers: an entry that
// does not lie inside the tokens (or the chunks) is skipped, so a table written
// wrong reads and writes nothing out of bounds. The whole threadgroup reads
// the same entry, so it returns as one, before any barrier.
inline bool chunk_ok(uint2 ch, uint n_tok) {
    return ch.y >= 1 && ch.y <= BT && ch.x < n_tok && ch.y <= n_tok - ch.x;
}
inline bool seq_ok(uint2 first, uint2 next, uint n_tok, uint nt) {
    return first.x <= next.x && next.x <= n_tok && first.y <= next.y && next.y <= nt &&
           next.y - first.y == (next.x - first.x + BT - 1) / BT;
}
constant constexpr uint KS = 64;   // K (or V) columns staged at a time

// rows[r][c] = src[(t0 + r) * row_stride + c] for r < len, 0 for r >= len;
// a BT x KS bf16 tile, every thread of the threadgroup taking part.
static inline void stage_rows_bf16(threadgroup bfloat *rows, device const bfloat *src, ulong row_stride,
                                   uint len, uint tid, uint nthreads) {
    for (uint e = tid; e < BT * KS; e += nthreads) {
        const uint r = e / KS;
        const uint c = e % KS;
        rows[e] = r < len ? src[ulong(r) * row_stride + c] : bfloat(0.0f);
    }
}

// ---------------------------------------------------------------------------
// The chunk-local cumsum of the log decay, g_cum[t, h] = sum of g_in[s, h]
// for s from the first token of t's chunk through t: one thread per token of
// the chunk, the scan below.

// Inclusive prefix sum of x over the threads of the threadgroup, in thread
// order: a simdgroup scan, then each thread adds the totals of the simdgroups
// before its own (sg_total: one float per simdgroup). Every thread calls it.
static inline float threadgroup_prefix_sum(float x, threadgroup float *sg_total, uint sg, uint lane) {
    const float inclusive = simd_prefix_inclusive_sum(x);
    const float total = simd_sum(x);
    if (lane == 0) {
        sg_total[sg] = total;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float offset = 0.0f;
    for (uint s = 0; s < sg; ++s) {
        offset += sg_total[s];
    }
    return inclusive + offset;
}

// chunk_local_cumsum_varlen_g_f32: chunks from the table. Grid (nt, H), 64
// threads. Bindings: 0 g_in, 1 g_cum, 2 chunks, 3 params.
kernel void chunk_local_cumsum_varlen_g_f32(
    device const float               *g_in   [[buffer(0)]],
    device float                     *g_cum  [[buffer(1)]],
    device const uint2               *chunks [[buffer(2)]],
    constant ChunkGatedDeltaRuleParams &p    [[buffer(3)]],
    uint3 tgpig [[threadgroup_position_in_grid]],
    uint  i     [[thread_index_in_threadgroup]],
    uint  sg    [[simdgroup_index_in_threadgroup]],
    uint  lane  [[thread_index_in_simdgroup]])
{
    threadgroup float sg_total[BT / 32];
    const uint2 ch = chunks[tgpig.x];
    if (!chunk_ok(ch, p.n_tok)) return;
    const uint head = tgpig.y;
    const bool live = i < ch.y;
    const ulong at = ulong(ch.x + i) * p.h + head;
    const float x = threadgroup_prefix_sum(live ? g_in[at] : 0.0f, sg_total, sg, lane);
    if (live) {
        g_cum[at] = x;
    }
}

// chunk_local_cumsum_g_f32: B sequences of T tokens [B, T, H], chunks of
// params.bt tokens (at most 1024; the last one may be partial). Grid
// (1, H, B * NT), threadgroup (BT, 1, 1); threads past T read 0 and write
// nothing. Bindings: 0 g_in, 1 g_cumsum, 2 params.
kernel void chunk_local_cumsum_g_f32(
    device const float*              g_in     [[buffer(0)]],
    device float*                    g_cumsum [[buffer(1)]],
    constant ChunkLocalCumsumParams& params   [[buffer(2)]],
    uint3 tg_pos [[threadgroup_position_in_grid]],
    uint  i      [[thread_index_in_threadgroup]],
    uint  sg     [[simdgroup_index_in_threadgroup]],
    uint  lane   [[thread_index_in_simdgroup]])
{
    threadgroup float sg_total[1024 / 32];
    const uint H = params.h;
    const uint T = params.t;
    const uint i_h = tg_pos.y;
    const uint b = tg_pos.z / params.nt;
    const uint i_t = tg_pos.z % params.nt;
    if (b >= params.b || i_h >= H) {
        return;
    }
    const uint t = i_t * params.bt + i;
    const bool live = i < params.bt && t < T;
    const uint at = (b * T + t) * H + i_h;
    const float x = threadgroup_prefix_sum(live ? g_in[at] : 0.0f, sg_total, sg, lane);
    if (live) {
        g_cumsum[at] = x;
    }
}

// ---------------------------------------------------------------------------
// gated_delta_net_kkt_bf16: A[i, j] = beta_i exp(g_i - g_j) k_i . k_j for
// j < i < len, 0 for the other columns of the chunk's rows (rows past len are
// another chunk's and are not written). Grid (nt, H), 256 threads: simdgroup
// sg computes rows [8 sg, 8 sg + 8) of k k^T, only its tiles on or left of
// the diagonal. Bindings: 0 k, 1 g (cumsummed), 2 beta, 3 a, 4 chunks, 5 params.
template <typename BetaT>
kernel void gated_delta_net_kkt(
    device const bfloat              *k_in   [[buffer(0)]],
    device const float               *g      [[buffer(1)]],
    device const BetaT               *beta   [[buffer(2)]],
    device float                     *a_out  [[buffer(3)]],
    device const uint2               *chunks [[buffer(4)]],
    constant ChunkGatedDeltaRuleParams &p    [[buffer(5)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tid   [[thread_index_in_threadgroup]],
    ushort sg    [[simdgroup_index_in_threadgroup]])
{
    constexpr uint NTH = 256;
    threadgroup bfloat ks[BT * KS];
    threadgroup float  kk_t[BT * BT];

    const uint2 ch = chunks[tgpig.x];
    if (!chunk_ok(ch, p.n_tok)) return;
    const uint t0 = ch.x, len = ch.y;
    const uint head = tgpig.y;
    const uint kh = head / (p.h / p.hg);
    const uint K = p.k;

    mat_f32 acc[BT / 8];
    for (uint j = 0; j <= sg; ++j) {
        acc[j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
    device const bfloat *krow = k_in + (ulong(t0) * p.hg + kh) * K;
    for (uint k0 = 0; k0 < K; k0 += KS) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        stage_rows_bf16(ks, krow + k0, ulong(p.hg) * K, len, tid, NTH);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint c = 0; c < KS; c += 8) {
            mat_bf16 x;
            simdgroup_load(x, ks + 8 * sg * KS + c, KS);
            for (uint j = 0; j <= sg; ++j) {
                mat_bf16 y;
                simdgroup_load(y, ks + 8 * j * KS + c, KS, ulong2(0, 0), true);
                simdgroup_multiply_accumulate(acc[j], x, y, acc[j]);
            }
        }
    }
    for (uint j = 0; j <= sg; ++j) {
        simdgroup_store(acc[j], kk_t + 8 * sg * BT + 8 * j, BT);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    for (uint e = tid; e < BT * BT; e += NTH) {
        const uint i = e / BT;
        const uint j = e % BT;
        if (i >= len) {
            continue;
        }
        float x = 0.0f;
        if (j < i) {
            const float gi = g[ulong(t0 + i) * p.h + head];
            const float gj = g[ulong(t0 + j) * p.h + head];
            x = float(beta[ulong(t0 + i) * p.h + head]) * exp(gi - gj) * kk_t[e];
        }
        a_out[(ulong(t0 + i) * p.h + head) * BT + j] = x;
    }
}

typedef decltype(gated_delta_net_kkt<float>)  gated_delta_net_kkt_f32beta_t;
typedef decltype(gated_delta_net_kkt<bfloat>) gated_delta_net_kkt_bf16beta_t;
template [[host_name("gated_delta_net_kkt_bf16")]]           kernel gated_delta_net_kkt_f32beta_t  gated_delta_net_kkt<float>;
template [[host_name("gated_delta_net_kkt_bf16_beta_bf16")]] kernel gated_delta_net_kkt_bf16beta_t gated_delta_net_kkt<bfloat>;

// ---------------------------------------------------------------------------
// chunk_tri_solve_invert_f32: Ai = (I + A)^-1 per chunk, A strictly lower
// triangular, so Ai is unit lower triangular. Grid (nt, H), 64 threads:
// thread c solves column c by forward substitution,
//   X[i, c] = -A[i, c] - sum_{c < j < i} A[i, j] X[j, c]   (i > c; X[c, c] = 1),
// One threadgroup array of 64 rows of 65 floats holds both: A in the strict
// lower triangle, X transposed in the strict upper one (X[i, c] at row c,
// column i). Thread c writes only row c above the diagonal and reads A and
// its own row, so the solve needs no barrier; the row stride of 65 keeps the
// 64 threads' accesses to their own rows in distinct banks. Rows past len are
// neither read nor written; their columns are 0 in Ai. The whole chunk of A
// is read before any row of Ai is written, so a and ai may be one buffer.
// Bindings: 0 a, 1 ai, 2 chunks, 3 params.
kernel void chunk_tri_solve_invert_f32(
    device const float               *a      [[buffer(0)]],
    device float                     *ai     [[buffer(1)]],
    device const uint2               *chunks [[buffer(2)]],
    constant ChunkGatedDeltaRuleParams &p    [[buffer(3)]],
    uint3 tgpig [[threadgroup_position_in_grid]],
    uint  c     [[thread_index_in_threadgroup]])
{
    constexpr uint LD = BT + 1;
    threadgroup float s[BT * LD];
    const uint2 ch = chunks[tgpig.x];
    if (!chunk_ok(ch, p.n_tok)) return;
    const uint t0 = ch.x, len = ch.y;
    const uint head = tgpig.y;

    for (uint i = c + 1; i < len; ++i) {
        s[i * LD + c] = a[(ulong(t0 + i) * p.h + head) * BT + c];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    for (uint i = c + 1; i < len; ++i) {
        float x = -s[i * LD + c];
        for (uint j = c + 1; j < i; ++j) {
            x -= s[i * LD + j] * s[c * LD + j];
        }
        s[c * LD + i] = x;
    }
    for (uint i = 0; i < len; ++i) {
        ai[(ulong(t0 + i) * p.h + head) * BT + c] = i == c ? 1.0f : (i > c ? s[c * LD + i] : 0.0f);
    }
}

// ---------------------------------------------------------------------------
// gated_delta_net_recompute_wu_bf16: per chunk,
//   w[i] = sum_j Ai[i, j] beta_j exp(g_j) k_j,   u[i] = sum_j Ai[i, j] beta_j v_j,
// f32 operands and sums, bf16 stores. Grid (nt, H), 256 threads: simdgroup sg
// owns rows [8 sg, 8 sg + 8), and since Ai is lower triangular it sums only
// j tiles 0..sg. The columns go in slices of 32: the slice of beta k (or
// beta v), scaled in f32, is staged, multiplied, then overwritten by the
// product for the masked bf16 store.
// Bindings: 0 k, 1 v, 2 beta, 3 g (cumsummed), 4 ai, 5 w, 6 u, 7 chunks, 8 params.
template <typename BetaT>
kernel void gated_delta_net_recompute_wu(
    device const bfloat              *k_in   [[buffer(0)]],
    device const bfloat              *v_in   [[buffer(1)]],
    device const BetaT               *beta   [[buffer(2)]],
    device const float               *g      [[buffer(3)]],
    device const float               *ai     [[buffer(4)]],
    device bfloat                    *w_out  [[buffer(5)]],
    device bfloat                    *u_out  [[buffer(6)]],
    device const uint2               *chunks [[buffer(7)]],
    constant ChunkGatedDeltaRuleParams &p    [[buffer(8)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tid   [[thread_index_in_threadgroup]],
    ushort sg    [[simdgroup_index_in_threadgroup]])
{
    constexpr uint NTH = 256;
    constexpr uint CS = 32;            // columns per slice
    threadgroup float as[BT * BT];
    threadgroup float xs[BT * CS];
    threadgroup float coef[2 * BT];    // beta exp(g), beta per row

    const uint2 ch = chunks[tgpig.x];
    if (!chunk_ok(ch, p.n_tok)) return;
    const uint t0 = ch.x, len = ch.y;
    const uint head = tgpig.y;
    const uint kh = head / (p.h / p.hg);
    const uint H = p.h, K = p.k, V = p.v;

    for (uint e = tid; e < BT * BT; e += NTH) {
        const uint i = e / BT;
        as[e] = i < len ? ai[(ulong(t0 + i) * H + head) * BT + e % BT] : 0.0f;
    }
    if (tid < BT) {
        const bool live = tid < len;
        const ulong at = ulong(t0 + tid) * H + head;
        const float b = live ? float(beta[at]) : 0.0f;
        coef[tid] = live ? b * exp(g[at]) : 0.0f;
        coef[BT + tid] = b;
    }

    // Slice s < K / CS is of w (k rows), the others of u (v rows).
    const uint nk = K / CS;
    for (uint s = 0; s < nk + V / CS; ++s) {
        const bool is_w = s < nk;
        const uint c0 = (is_w ? s : s - nk) * CS;
        device const bfloat *src = is_w ? k_in + (ulong(t0) * p.hg + kh) * K + c0 : v_in + (ulong(t0) * H + head) * V + c0;
        const ulong src_row = is_w ? ulong(p.hg) * K : ulong(H) * V;
        threadgroup const float *cf = is_w ? coef : coef + BT;

        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint e = tid; e < BT * CS; e += NTH) {
            const uint r = e / CS;
            xs[e] = r < len ? cf[r] * float(src[ulong(r) * src_row + e % CS]) : 0.0f;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        mat_f32 acc[CS / 8];
        for (uint n = 0; n < CS / 8; ++n) {
            acc[n] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
        for (uint j = 0; j <= sg; ++j) {
            mat_f32 x;
            simdgroup_load(x, as + 8 * sg * BT + 8 * j, BT);
            for (uint n = 0; n < CS / 8; ++n) {
                mat_f32 y;
                simdgroup_load(y, xs + 8 * j * CS + 8 * n, CS);
                simdgroup_multiply_accumulate(acc[n], x, y, acc[n]);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint n = 0; n < CS / 8; ++n) {
            simdgroup_store(acc[n], xs + 8 * sg * CS + 8 * n, CS);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        device bfloat *dst = is_w ? w_out + (ulong(t0) * H + head) * K + c0 : u_out + (ulong(t0) * H + head) * V + c0;
        const ulong dst_row = is_w ? ulong(H) * K : ulong(H) * V;
        for (uint e = tid; e < BT * CS; e += NTH) {
            const uint r = e / CS;
            if (r < len) {
                dst[ulong(r) * dst_row + e % CS] = bfloat(xs[e]);
            }
        }
    }
}

typedef decltype(gated_delta_net_recompute_wu<float>)  gated_delta_net_recompute_wu_f32beta_t;
typedef decltype(gated_delta_net_recompute_wu<bfloat>) gated_delta_net_recompute_wu_bf16beta_t;
template [[host_name("gated_delta_net_recompute_wu_bf16")]]           kernel gated_delta_net_recompute_wu_f32beta_t  gated_delta_net_recompute_wu<float>;
template [[host_name("gated_delta_net_recompute_wu_bf16_beta_bf16")]] kernel gated_delta_net_recompute_wu_bf16beta_t gated_delta_net_recompute_wu<bfloat>;

// ---------------------------------------------------------------------------
// gated_delta_net_kkt_solve_wu_bf16: kkt, the triangular solve and w/u of one
// (chunk, head) in one threadgroup, A and Ai never leaving it: the code and
// summation orders of gated_delta_net_kkt_bf16, chunk_tri_solve_invert_f32
// and gated_delta_net_recompute_wu_bf16 in turn, so the same w and u.
// Grid (nt, H), 256 threads. Bindings: 0 k, 1 v, 2 beta, 3 g (cumsummed),
// 4 w, 5 u, 6 chunks, 7 params.
//   kkt    simdgroup sg sums rows [8 sg, +8) of k k^T (tiles on or left of the
//          diagonal) over 64-column k tiles, into s; then A = the scaled,
//          masked lower triangle, 0 elsewhere and at rows past len.
//   solve  thread c < 64 solves column c by forward substitution, X
//          transposed into s's strict upper triangle (as the tri-solve
//          kernel); then each pair (i, j), i > j, moves X[i, j] to the lower
//          triangle and zeroes the upper one, the diagonal set to 1: s = Ai.
//   w, u   32-column slices of beta exp(g) k (then beta v) staged in f32 and
//          multiplied by Ai's tiles 0..sg, as the w/u kernel.
// Threadgroup memory: s 64 x 65 f32 (stride 65: the solve's threads read
// their own rows in distinct banks), one 8 KiB region (the bf16 64 x 64 k
// tile for kkt, then the f32 64 x 32 slices), 768 bytes of row coefficients:
// 25 KiB.
template <typename BetaT>
kernel void gated_delta_net_kkt_solve_wu(
    device const bfloat              *k_in   [[buffer(0)]],
    device const bfloat              *v_in   [[buffer(1)]],
    device const BetaT               *beta   [[buffer(2)]],
    device const float               *g      [[buffer(3)]],
    device bfloat                    *w_out  [[buffer(4)]],
    device bfloat                    *u_out  [[buffer(5)]],
    device const uint2               *chunks [[buffer(6)]],
    constant ChunkGatedDeltaRuleParams &p    [[buffer(7)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tid   [[thread_index_in_threadgroup]],
    ushort sg    [[simdgroup_index_in_threadgroup]])
{
    constexpr uint NTH = 256;
    constexpr uint LD = BT + 1;
    constexpr uint CS = 32;            // columns per w / u slice
    threadgroup float s[BT * LD];
    threadgroup float xs[BT * CS];     // the k tile (bf16 [64][64]) during kkt
    threadgroup float coef[3 * BT];    // g, beta exp(g), beta per row; 0 past len
    threadgroup bfloat *ks = (threadgroup bfloat *)xs;

    const uint2 ch = chunks[tgpig.x];
    if (!chunk_ok(ch, p.n_tok)) return;
    const uint t0 = ch.x, len = ch.y;
    const uint head = tgpig.y;
    const uint kh = head / (p.h / p.hg);
    const uint H = p.h, K = p.k, V = p.v;

    if (tid < BT) {
        const bool live = tid < len;
        const ulong at = ulong(t0 + tid) * H + head;
        const float gv = live ? g[at] : 0.0f;
        const float b = live ? float(beta[at]) : 0.0f;
        coef[tid] = gv;
        coef[BT + tid] = live ? b * exp(gv) : 0.0f;
        coef[2 * BT + tid] = b;
    }

    mat_f32 acc[BT / 8];
    for (uint j = 0; j <= sg; ++j) {
        acc[j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
    device const bfloat *krow = k_in + (ulong(t0) * p.hg + kh) * K;
    for (uint k0 = 0; k0 < K; k0 += KS) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        stage_rows_bf16(ks, krow + k0, ulong(p.hg) * K, len, tid, NTH);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint c = 0; c < KS; c += 8) {
            mat_bf16 x;
            simdgroup_load(x, ks + 8 * sg * KS + c, KS);
            for (uint j = 0; j <= sg; ++j) {
                mat_bf16 y;
                simdgroup_load(y, ks + 8 * j * KS + c, KS, ulong2(0, 0), true);
                simdgroup_multiply_accumulate(acc[j], x, y, acc[j]);
            }
        }
    }
    for (uint j = 0; j <= sg; ++j) {
        simdgroup_store(acc[j], s + 8 * sg * LD + 8 * j, LD);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint e = tid; e < BT * BT; e += NTH) {
        const uint i = e / BT;
        const uint j = e % BT;
        s[i * LD + j] = i < len && j < i ? coef[2 * BT + i] * exp(coef[i] - coef[j]) * s[i * LD + j] : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    if (tid < BT) {
        const uint c = tid;
        for (uint i = c + 1; i < len; ++i) {
            float x = -s[i * LD + c];
            for (uint j = c + 1; j < i; ++j) {
                x -= s[i * LD + j] * s[c * LD + j];
            }
            s[c * LD + i] = x;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint e = tid; e < BT * BT; e += NTH) {
        const uint i = e / BT;
        const uint j = e % BT;
        if (i > j) {
            const float x = s[j * LD + i];
            s[i * LD + j] = i < len ? x : 0.0f;
            s[j * LD + i] = 0.0f;
        } else if (i == j) {
            s[i * LD + i] = i < len ? 1.0f : 0.0f;
        }
    }

    // Slice q < K / CS is of w (k rows), the others of u (v rows).
    const uint nk = K / CS;
    for (uint q = 0; q < nk + V / CS; ++q) {
        const bool is_w = q < nk;
        const uint c0 = (is_w ? q : q - nk) * CS;
        device const bfloat *src = is_w ? k_in + (ulong(t0) * p.hg + kh) * K + c0 : v_in + (ulong(t0) * H + head) * V + c0;
        const ulong src_row = is_w ? ulong(p.hg) * K : ulong(H) * V;
        threadgroup const float *cf = is_w ? coef + BT : coef + 2 * BT;

        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint e = tid; e < BT * CS; e += NTH) {
            const uint r = e / CS;
            xs[e] = r < len ? cf[r] * float(src[ulong(r) * src_row + e % CS]) : 0.0f;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        mat_f32 acc[CS / 8];
        for (uint n = 0; n < CS / 8; ++n) {
            acc[n] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
        for (uint j = 0; j <= sg; ++j) {
            mat_f32 x;
            simdgroup_load(x, s + 8 * sg * LD + 8 * j, LD);
            for (uint n = 0; n < CS / 8; ++n) {
                mat_f32 y;
                simdgroup_load(y, xs + 8 * j * CS + 8 * n, CS);
                simdgroup_multiply_accumulate(acc[n], x, y, acc[n]);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint n = 0; n < CS / 8; ++n) {
            simdgroup_store(acc[n], xs + 8 * sg * CS + 8 * n, CS);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        device bfloat *dst = is_w ? w_out + (ulong(t0) * H + head) * K + c0 : u_out + (ulong(t0) * H + head) * V + c0;
        const ulong dst_row = is_w ? ulong(H) * K : ulong(H) * V;
        for (uint e = tid; e < BT * CS; e += NTH) {
            const uint r = e / CS;
            if (r < len) {
                dst[ulong(r) * dst_row + e % CS] = bfloat(xs[e]);
            }
        }
    }
}

typedef decltype(gated_delta_net_kkt_solve_wu<float>)  gated_delta_net_kkt_solve_wu_f32beta_t;
typedef decltype(gated_delta_net_kkt_solve_wu<bfloat>) gated_delta_net_kkt_solve_wu_bf16beta_t;
template [[host_name("gated_delta_net_kkt_solve_wu_bf16")]]           kernel gated_delta_net_kkt_solve_wu_f32beta_t  gated_delta_net_kkt_solve_wu<float>;
template [[host_name("gated_delta_net_kkt_solve_wu_bf16_beta_bf16")]] kernel gated_delta_net_kkt_solve_wu_bf16beta_t gated_delta_net_kkt_solve_wu<bfloat>;

// ---------------------------------------------------------------------------
// The inter-state step: for each (sequence, head), the state h [V, K] f32
// starts at h0 and walks the sequence's chunks; per chunk of len tokens,
// last = its last token:
//   h_out[c, head] = bf16(h)
//   vn[t, v] = u[t, v] - sum_k w[t, k] bf16(h)[v, k];       v_new[t, v] = bf16(vn)
//   h = h exp(g[last]) + sum_{t < len} bf16(vn[t, v] exp(g[last] - g[t])) k[t, kh, k]
// and final_state[seq, head] = h. One body, inter_state_seq, for both
// entries: gated_delta_net_chunk_inter_state_k{64,128,256}_bf16 (sequences
// from the seqs table, chunks of any length, K in {64, 128, 256}) and the
// seed's gated_delta_net_chunk_inter_state_bf16 (B sequences of T tokens).
//
// 128 threads = 4 simdgroups; a threadgroup owns BV rows of V of one
// (sequence, head). The f32 state slice [BV][KD] stays in threadgroup memory
// for the whole sequence. BV is 32 for KD <= 128 and 16 for KD = 256: a
// 32 x 256 f32 slice alone is 32 KiB, all of Apple's threadgroup memory, so at
// KD = 256 each threadgroup keeps 16 rows (16 KiB) and the grid has twice the
// V slices. Threadgroup memory: hs BV * KD * 4 + one 8 KiB region (the staged
// bf16 [64 t][64 k] tile of w or k, or the f32 [BV][64] product x^T) + vgs
// BV * 64 * 2 (the gated values, [v][t]): 28 KiB at KD = 128, 26 KiB at 256,
// 20 KiB at 64. The seed entry takes hs and vgs from threadgroup(0) (the
// 20 KiB its host binds at KD = 128) and declares the region.
// x^T = bf16(h) w^T reads bf16(h) back from h_out, which this threadgroup
// has just written, so the product uses exactly the stored snapshot.

// Tokens [bos, eos) of one sequence, its chunks c_first.. (chunk c starts at
// bos + (c - c_first) * 64), its state at index state of h0 and final_state,
// V rows [v0, v0 + BV) of V head head. Every thread of the threadgroup calls it.
template <uint KD, uint BV>
static inline void inter_state_seq(
    device const bfloat *k_in, device const bfloat *w_in, device const bfloat *u_in, device const float *g_in,
    device const float *h0, device bfloat *h_out, device bfloat *v_new, device float *final_state,
    uint H, uint Hg, uint V, uint bos, uint eos, uint c_first, uint c_end, uint state, uint v0, uint head,
    threadgroup float *hs, threadgroup float *region, threadgroup bfloat *vgs, ushort tid, ushort sg)
{
    constexpr uint NTH = 128;
    constexpr uint TILE = BV * KD;
    constexpr uint RB = BV / 8;          // 8-row tiles of the slice
    threadgroup bfloat *stage = (threadgroup bfloat *)region;  // [BT][KS] bf16
    threadgroup float  *xf = region;                           // [BV][BT] f32
    const uint kh = head / (H / Hg);

    const ulong state0 = ((ulong(state) * H + head) * V + v0) * KD;
    for (uint e = tid; e < TILE; e += NTH) {
        hs[e] = h0[state0 + e];
    }

    for (uint c = c_first; c < c_end; ++c) {
        const uint t0 = bos + (c - c_first) * BT;
        const uint len = min(BT, eos - t0);
        const float g_last = g_in[ulong(t0 + len - 1) * H + head];
        device bfloat *hsnap = h_out + ((ulong(c) * H + head) * V + v0) * KD;

        threadgroup_barrier(mem_flags::mem_threadgroup);
        const float decay = exp(g_last);
        for (uint e = tid; e < TILE; e += NTH) {
            const float x = hs[e];
            hsnap[e] = bfloat(x);
            hs[e] = x * decay;
        }
        threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);

        // x^T[v, t] = sum_k bf16(h)[v, k] w[t, k]: simdgroup sg owns t columns [16 sg, 16 sg + 16).
        mat_f32 acc[RB][2];
        for (uint i = 0; i < RB; ++i) {
            acc[i][0] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            acc[i][1] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
        device const bfloat *wrow = w_in + (ulong(t0) * H + head) * KD;
        for (uint k0 = 0; k0 < KD; k0 += KS) {
            stage_rows_bf16(stage, wrow + k0, ulong(H) * KD, len, tid, NTH);
            threadgroup_barrier(mem_flags::mem_threadgroup);
            for (uint kk = 0; kk < KS; kk += 8) {
                mat_bf16 y[2];
                simdgroup_load(y[0], stage + (16 * sg) * KS + kk, KS, ulong2(0, 0), true);
                simdgroup_load(y[1], stage + (16 * sg + 8) * KS + kk, KS, ulong2(0, 0), true);
                for (uint i = 0; i < RB; ++i) {
                    mat_bf16 x;
                    simdgroup_load(x, hsnap + 8 * i * KD + k0 + kk, KD);
                    simdgroup_multiply_accumulate(acc[i][0], x, y[0], acc[i][0]);
                    simdgroup_multiply_accumulate(acc[i][1], x, y[1], acc[i][1]);
                }
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        for (uint i = 0; i < RB; ++i) {
            simdgroup_store(acc[i][0], xf + 8 * i * BT + 16 * sg, BT);
            simdgroup_store(acc[i][1], xf + 8 * i * BT + 16 * sg + 8, BT);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        // Element e: t = e / BV, v = e % BV (v innermost, as in u and v_new).
        for (uint e = tid; e < BV * BT; e += NTH) {
            const uint t = e / BV;
            const uint vl = e % BV;
            bfloat gated = bfloat(0.0f);
            if (t < len) {
                const ulong uv = (ulong(t0 + t) * H + head) * V + v0 + vl;
                const float vn = float(u_in[uv]) - xf[vl * BT + t];
                v_new[uv] = bfloat(vn);
                gated = bfloat(vn * exp(g_last - g_in[ulong(t0 + t) * H + head]));
            }
            vgs[vl * BT + t] = gated;
        }

        // hs[v, k] += sum_t vgs[v, t] k[t, k]: simdgroup sg owns k columns [16 sg, 16 sg + 16) of each slice.
        device const bfloat *krow = k_in + (ulong(t0) * Hg + kh) * KD;
        for (uint k0 = 0; k0 < KD; k0 += KS) {
            threadgroup_barrier(mem_flags::mem_threadgroup);
            stage_rows_bf16(stage, krow + k0, ulong(Hg) * KD, len, tid, NTH);
            threadgroup_barrier(mem_flags::mem_threadgroup);
            mat_f32 st[RB][2];
            for (uint i = 0; i < RB; ++i) {
                simdgroup_load(st[i][0], hs + 8 * i * KD + k0 + 16 * sg, KD);
                simdgroup_load(st[i][1], hs + 8 * i * KD + k0 + 16 * sg + 8, KD);
            }
            for (uint tt = 0; tt < len; tt += 8) {
                mat_bf16 y[2];
                simdgroup_load(y[0], stage + tt * KS + 16 * sg, KS);
                simdgroup_load(y[1], stage + tt * KS + 16 * sg + 8, KS);
                for (uint i = 0; i < RB; ++i) {
                    mat_bf16 x;
                    simdgroup_load(x, vgs + 8 * i * BT + tt, BT);
                    simdgroup_multiply_accumulate(st[i][0], x, y[0], st[i][0]);
                    simdgroup_multiply_accumulate(st[i][1], x, y[1], st[i][1]);
                }
            }
            for (uint i = 0; i < RB; ++i) {
                simdgroup_store(st[i][0], hs + 8 * i * KD + k0 + 16 * sg, KD);
                simdgroup_store(st[i][1], hs + 8 * i * KD + k0 + 16 * sg + 8, KD);
            }
        }
    }

    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint e = tid; e < TILE; e += NTH) {
        final_state[state0 + e] = hs[e];
    }
}

// gated_delta_net_chunk_inter_state_k{KD}_bf16: the sequences of the seqs
// table. Grid (V / BV, H, n_seq), 128 threads.
// Bindings: 0 k, 1 w, 2 u, 3 g (cumsummed), 4 h0, 5 h_out, 6 v_new,
// 7 final_state, 8 seqs, 9 params.
template <uint KD, uint BV>
kernel void gated_delta_net_chunk_inter_state(
    device const bfloat              *k_in   [[buffer(0)]],
    device const bfloat              *w_in   [[buffer(1)]],
    device const bfloat              *u_in   [[buffer(2)]],
    device const float               *g_in   [[buffer(3)]],
    device const float               *h0     [[buffer(4)]],
    device bfloat                    *h_out  [[buffer(5)]],
    device bfloat                    *v_new  [[buffer(6)]],
    device float                     *final_state [[buffer(7)]],
    device const uint2               *seqs   [[buffer(8)]],
    constant ChunkGatedDeltaRuleParams &p    [[buffer(9)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tid   [[thread_index_in_threadgroup]],
    ushort sg    [[simdgroup_index_in_threadgroup]])
{
    threadgroup float  hs[BV * KD];
    threadgroup float  region[BT * KS / 2];               // 8 KiB
    threadgroup bfloat vgs[BV * BT];
    const uint seq = tgpig.z;
    const uint2 first = seqs[seq];
    const uint2 next = seqs[seq + 1];
    if (!seq_ok(first, next, p.n_tok, p.nt)) return;
    inter_state_seq<KD, BV>(k_in, w_in, u_in, g_in, h0, h_out, v_new, final_state, p.h, p.hg, p.v,
                            first.x, next.x, first.y, next.y, seq, tgpig.x * BV, tgpig.y, hs, region, vgs, tid, sg);
}

typedef decltype(gated_delta_net_chunk_inter_state<128, 32>) gated_delta_net_chunk_inter_state_t;
template [[host_name("gated_delta_net_chunk_inter_state_k64_bf16")]]  kernel gated_delta_net_chunk_inter_state_t gated_delta_net_chunk_inter_state<64, 32>;
template [[host_name("gated_delta_net_chunk_inter_state_k128_bf16")]] kernel gated_delta_net_chunk_inter_state_t gated_delta_net_chunk_inter_state<128, 32>;
template [[host_name("gated_delta_net_chunk_inter_state_k256_bf16")]] kernel gated_delta_net_chunk_inter_state_t gated_delta_net_chunk_inter_state<256, 16>;

// gated_delta_net_chunk_inter_state_bf16 (the seed's entry, driven by host
// code written against mlx-native): sequence b is tokens [b T, b T + T),
// chunks [b NT, b NT + NT), K = 128, T a multiple of 64 (the host validates
// both). Layouts: k [B, T, Hg, K]; w [B, T, H, K]; u, v_new [B, T, H, V];
// g [B, T, H]; h0, final_state [B, H, V, K]; h_out [B, NT, H, V, K].
// Grid (V / 32, H, B), 128 threads; threadgroup(0) 20 KiB (hs, then vgs).
// Bindings 0..8: k, w, u, g, h0, h_out, v_new, final_state, params.
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
    constexpr uint KD = 128;
    constexpr uint BV = 32;
    threadgroup float region[BT * KS / 2];                // 8 KiB
    const uint b = tgpig.z;
    // The sequence as a seqs entry would give it; params inconsistent with
    // themselves (nt != T / 64, K != 128) do nothing.
    const uint2 first = uint2(b * p.dims.t, b * p.nt);
    const uint2 next = uint2(first.x + p.dims.t, first.y + p.nt);
    if (p.dims.k != KD || b >= p.dims.b || !seq_ok(first, next, p.dims.b * p.dims.t, p.dims.b * p.nt)) return;
    inter_state_seq<KD, BV>(k_in, w_in, u_in, g_in, h0, h_out, v_new, final_state, p.dims.h, p.dims.hg, p.dims.v,
                            first.x, next.x, first.y, next.y, b, tgpig.x * BV, tgpig.y,
                            shmem, region, (threadgroup bfloat *)(shmem + BV * KD), tid, sg);
}

// ---------------------------------------------------------------------------
// gated_delta_net_chunk_o_bf16: per chunk, V columns [v0, v0 + 64),
//   S[i, j] = q_i . k_j                                      (bf16 operands, f32 sums)
//   P[i, j] = bf16(S[i, j] exp(g_i - g_j)) for j <= i < len, 0 elsewhere
//   o[i, v] = bf16(scale (exp(g_i) sum_k q_i[k] h[v, k] + sum_j P[i, j] v_new[j, v]))
// with h the chunk-start state (bf16 [V, K]) and q, k of K head kh.
// Grid (V / 64, nt, H), 256 threads: simdgroup sg owns rows [8 sg, 8 sg + 8)
// of S (its tiles on or left of the diagonal) and of o. The exp(g_i) row
// scale is a product with a diagonal 8x8 matrix. Threadgroup memory 24 KiB:
// r1 (16 KiB: staged q and k slices, then S, then the staged v_new tile and
// the diagonals, then o) and pb (8 KiB: P in bf16).
// Bindings: 0 q, 1 k, 2 v_new, 3 h, 4 g (cumsummed), 5 o, 6 chunks, 7 params.
kernel void gated_delta_net_chunk_o_bf16(
    device const bfloat              *q_in   [[buffer(0)]],
    device const bfloat              *k_in   [[buffer(1)]],
    device const bfloat              *vn_in  [[buffer(2)]],
    device const bfloat              *h_in   [[buffer(3)]],
    device const float               *g_in   [[buffer(4)]],
    device bfloat                    *o_out  [[buffer(5)]],
    device const uint2               *chunks [[buffer(6)]],
    constant ChunkGatedDeltaRuleParams &p    [[buffer(7)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    ushort tid   [[thread_index_in_threadgroup]],
    ushort sg    [[simdgroup_index_in_threadgroup]],
    ushort lane  [[thread_index_in_simdgroup]])
{
    constexpr uint NTH = 256;
    constexpr uint BVO = 64;
    threadgroup float  r1[BT * BT];
    threadgroup bfloat pb[BT * BT];
    threadgroup bfloat *qs = (threadgroup bfloat *)r1;      // [BT][KS]
    threadgroup bfloat *kst = qs + BT * KS;                  // [BT][KS]
    threadgroup bfloat *vs = (threadgroup bfloat *)r1;       // [BT][BVO]
    threadgroup float  *dg = r1 + BT * BVO / 2;              // [8 sg][8][8]

    const uint v0 = tgpig.x * BVO;
    const uint2 ch = chunks[tgpig.y];
    if (!chunk_ok(ch, p.n_tok)) return;
    const uint t0 = ch.x, len = ch.y;
    const uint head = tgpig.z;
    const uint H = p.h, K = p.k, V = p.v;
    const uint kh = head / (H / p.hg);

    mat_f32 accs[BT / 8];
    mat_f32 acco[BVO / 8];
    for (uint j = 0; j <= sg; ++j) {
        accs[j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
    for (uint n = 0; n < BVO / 8; ++n) {
        acco[n] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
    device const bfloat *qrow = q_in + (ulong(t0) * p.hg + kh) * K;
    device const bfloat *krow = k_in + (ulong(t0) * p.hg + kh) * K;
    device const bfloat *hp = h_in + ((ulong(tgpig.y) * H + head) * V + v0) * K;
    for (uint k0 = 0; k0 < K; k0 += KS) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
        stage_rows_bf16(qs, qrow + k0, ulong(p.hg) * K, len, tid, NTH);
        stage_rows_bf16(kst, krow + k0, ulong(p.hg) * K, len, tid, NTH);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint kk = 0; kk < KS; kk += 8) {
            mat_bf16 x;
            simdgroup_load(x, qs + 8 * sg * KS + kk, KS);
            for (uint j = 0; j <= sg; ++j) {
                mat_bf16 y;
                simdgroup_load(y, kst + 8 * j * KS + kk, KS, ulong2(0, 0), true);
                simdgroup_multiply_accumulate(accs[j], x, y, accs[j]);
            }
            for (uint n = 0; n < BVO / 8; ++n) {
                mat_bf16 y;
                simdgroup_load(y, hp + 8 * n * K + k0 + kk, K, ulong2(0, 0), true);
                simdgroup_multiply_accumulate(acco[n], x, y, acco[n]);
            }
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint j = 0; j <= sg; ++j) {
        simdgroup_store(accs[j], r1 + 8 * sg * BT + 8 * j, BT);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint e = tid; e < BT * BT; e += NTH) {
        const uint i = e / BT;
        const uint j = e % BT;
        float x = 0.0f;
        if (j <= i && i < len) {
            x = r1[e] * exp(g_in[ulong(t0 + i) * H + head] - g_in[ulong(t0 + j) * H + head]);
        }
        pb[e] = bfloat(x);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    // vs = the chunk's v_new columns [v0, v0 + 64), rows past len zeroed; dg = diag(exp(g_i)) per simdgroup.
    stage_rows_bf16(vs, vn_in + (ulong(t0) * H + head) * V + v0, ulong(H) * V, len, tid, NTH);
    for (uint e = lane; e < 64; e += 32) {
        const uint r = e / 8;
        const uint i = 8 * sg + r;
        dg[sg * 64 + e] = (r == e % 8 && i < len) ? exp(g_in[ulong(t0 + i) * H + head]) : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    mat_f32 d;
    simdgroup_load(d, dg + sg * 64, 8);
    for (uint n = 0; n < BVO / 8; ++n) {
        simdgroup_multiply(acco[n], d, acco[n]);
    }
    for (uint j = 0; j <= sg; ++j) {
        mat_bf16 x;
        simdgroup_load(x, pb + 8 * sg * BT + 8 * j, BT);
        for (uint n = 0; n < BVO / 8; ++n) {
            mat_bf16 y;
            simdgroup_load(y, vs + 8 * j * BVO + 8 * n, BVO);
            simdgroup_multiply_accumulate(acco[n], x, y, acco[n]);
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint n = 0; n < BVO / 8; ++n) {
        simdgroup_store(acco[n], r1 + 8 * sg * BVO + 8 * n, BVO);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint e = tid; e < BT * BVO; e += NTH) {
        const uint i = e / BVO;
        if (i < len) {
            o_out[(ulong(t0 + i) * H + head) * V + v0 + e % BVO] = bfloat(p.scale * r1[e]);
        }
    }
}
