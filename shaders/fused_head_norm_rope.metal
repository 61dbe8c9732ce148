// Per-head RMS norm then NeoX rope in one pass, mlx-native's
// fused_head_norm_rope_f32 and fused_head_norm_rope_batch_bf16 (the q and k
// norms of Qwen3 and Gemma 3/4 followed by their rotary embedding):
//
//   n[i] = x[i] / sqrt(sum_j x[j]^2 / head_dim + eps) * (w[i] if has_weight)
//   pair i = (n[i], n[i + head_dim/2]), i < half_rope_dim, turns by
//     angle = positions[token] * theta^(-2i / head_dim) / ff[i]
//   the other pairs are n unrotated.
//
// One threadgroup per (token, head) row of [seq_len, n_heads, head_dim]
// (row = token * n_heads + head), any number of threads (the op uses
// min(256, nextPow2(head_dim))); threadgroup(0) holds one float per
// simdgroup. Squares sum in f32; after the sum's barrier each thread rereads
// and writes only the pairs it owns, so output may be input (in place).
// The angle is f32 with the precise sin and cos (positions reach 2^17).
// fused_head_norm_rope_f32 can also write each output as bf16 (output_bf16)
// and as f32 (output_f32_perm), at the same index or, with bf16_permuted, at
// [head, token, i] (the layout attention takes).

template <typename T, typename W>
static inline void head_norm_rope(device const T* input, device T* output, device const W* norm_weight, bool has_weight,
                                  float eps, uint head_dim, uint n_heads, uint half_rope, float theta,
                                  device const uint* positions, bool has_ff, device const float* freq_factors,
                                  device bfloat* out_bf16, device float* out_f32_perm, uint seq_len, bool permuted,
                                  threadgroup float* partials, uint row, uint tid, uint tg_size, uint sg, uint lane,
                                  uint n_sg)
{
    const ulong base = ulong(row) * head_dim;
    const uint token = row / n_heads;
    const ulong base2 = permuted ? (ulong(row % n_heads) * seq_len + token) * head_dim : base;
    float sq = 0.0f;
    for (uint i = tid; i < head_dim; i += tg_size) {
        const float v = float(input[base + i]);
        sq += v * v;
    }
    const float inv = 1.0f / sqrt(threadgroup_sum(sq, partials, sg, lane, n_sg) / float(head_dim) + eps);
    const uint half_dim = head_dim / 2u;
    const uint pos = positions[token];
    for (uint i = tid; i < half_dim; i += tg_size) {
        float a = float(input[base + i]) * inv;
        float b = float(input[base + i + half_dim]) * inv;
        if (has_weight) {
            a *= float(norm_weight[i]);
            b *= float(norm_weight[i + half_dim]);
        }
        if (i < half_rope) {
            const float ff = has_ff ? freq_factors[i] : 1.0f;
            const float angle = float(pos) / precise::pow(theta, float(2u * i) / float(head_dim)) / ff;
            const float c = precise::cos(angle);
            const float s = precise::sin(angle);
            const float ra = a * c - b * s;
            b = a * s + b * c;
            a = ra;
        }
        output[base + i] = T(a);
        output[base + i + half_dim] = T(b);
        if (out_bf16 != nullptr) {
            out_bf16[base2 + i] = bfloat(a);
            out_bf16[base2 + i + half_dim] = bfloat(b);
        }
        if (out_f32_perm != nullptr) {
            out_f32_perm[base2 + i] = a;
            out_f32_perm[base2 + i + half_dim] = b;
        }
    }
}

// buffer(0) input [seq_len * n_heads, head_dim] f32, (1) output, (2) norm_weight [head_dim]
// (read when has_weight), (3) params, (4) positions [seq_len], (5) freq_factors
// [half_rope_dim] (read when has_freq_factors), (6) output_bf16 (written when
// has_bf16_output), (7) output_f32_perm (written when has_f32_perm_output).
kernel void fused_head_norm_rope_f32(
    device const float*                  input           [[buffer(0)]],
    device float*                        output          [[buffer(1)]],
    device const float*                  norm_weight     [[buffer(2)]],
    constant FusedHeadNormRopeF32Params& params          [[buffer(3)]],
    device const uint*                   positions       [[buffer(4)]],
    device const float*                  freq_factors    [[buffer(5)]],
    device bfloat*                       output_bf16     [[buffer(6)]],
    device float*                        output_f32_perm [[buffer(7)]],
    threadgroup float*                   partials        [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    const constant FusedHeadNormRopeF32Params& p = params;
    head_norm_rope(input, output, norm_weight, p.has_weight != 0u, p.eps, p.head_dim, p.n_heads, p.half_rope_dim,
                   p.theta, positions, p.has_freq_factors != 0u, freq_factors,
                   p.has_bf16_output != 0u ? output_bf16 : (device bfloat*)nullptr,
                   p.has_f32_perm_output != 0u ? output_f32_perm : (device float*)nullptr, p.seq_len,
                   p.bf16_permuted != 0u, partials, row, tid, tg_size, sg, lane, n_sg);
}

// buffer(0) input [seq_len * n_heads, head_dim] bf16, (1) output, (2) norm_weight [head_dim] bf16
// (read when has_weight), (3) params, (4) positions [seq_len], (5) freq_factors [half_rope_dim] f32.
kernel void fused_head_norm_rope_batch_bf16(
    device const bfloat*                       input        [[buffer(0)]],
    device bfloat*                             output       [[buffer(1)]],
    device const bfloat*                       norm_weight  [[buffer(2)]],
    constant FusedHeadNormRopeBatchBf16Params& params       [[buffer(3)]],
    device const uint*                         positions    [[buffer(4)]],
    device const float*                        freq_factors [[buffer(5)]],
    threadgroup float*                         partials     [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    const constant FusedHeadNormRopeBatchBf16Params& p = params;
    head_norm_rope(input, output, norm_weight, p.has_weight != 0u, p.eps, p.head_dim, p.n_heads, p.half_rope_dim,
                   p.theta, positions, p.has_freq_factors != 0u, freq_factors, (device bfloat*)nullptr,
                   (device float*)nullptr, 1u, false, partials, row, tid, tg_size, sg, lane, n_sg);
}

// The q, k and v rows of one attention layer in one dispatch (ours, for
// decode steps that would otherwise run three): q and k rows as
// fused_head_norm_rope_f32 with their weights (in place), and, by
// params.v_mode, v's rows normalized without weight or rope in place (1) or
// written from k's values before k's norm (2: a layer whose keys are its
// values; the block of a k row writes its v row first, then its k row).
// Threadgroups: seq_len * n_heads q rows, then seq_len * n_kv_heads k rows,
// then (v_mode 1) seq_len * n_kv_heads v rows, each token-major as
// fused_head_norm_rope_f32 indexes them.
// buffer(0) q [seq_len, n_heads, head_dim] f32, (1) k [seq_len, n_kv_heads,
// head_dim] f32, (2) v as k (written for v_mode 1 or 2), (3) params, (4)
// positions [seq_len], (5) q_weight [head_dim], (6) k_weight [head_dim], (7)
// freq_factors [half_rope_dim] (read when has_freq_factors).
kernel void fused_head_norm_rope_qkv_f32(
    device float*                           q            [[buffer(0)]],
    device float*                           k            [[buffer(1)]],
    device float*                           v            [[buffer(2)]],
    constant FusedHeadNormRopeQkvF32Params& params       [[buffer(3)]],
    device const uint*                      positions    [[buffer(4)]],
    device const float*                     q_weight     [[buffer(5)]],
    device const float*                     k_weight     [[buffer(6)]],
    device const float*                     freq_factors [[buffer(7)]],
    threadgroup float*                      partials     [[threadgroup(0)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    const constant FusedHeadNormRopeQkvF32Params& p = params;
    const uint q_rows = p.seq_len * p.n_heads;
    const uint kv_rows = p.seq_len * p.n_kv_heads;
    const bool ff = p.has_freq_factors != 0u;
    device bfloat* no_bf16 = (device bfloat*)nullptr;
    device float* no_perm = (device float*)nullptr;
    if (row < q_rows) {
        head_norm_rope<float, float>(q, q, q_weight, true, p.eps, p.head_dim, p.n_heads, p.half_rope_dim, p.theta, positions, ff,
                       freq_factors, no_bf16, no_perm, p.seq_len, false, partials, row, tid, tg_size, sg, lane, n_sg);
    } else if (row < q_rows + kv_rows) {
        const uint r = row - q_rows;
        if (p.v_mode == 2u) {
            head_norm_rope<float, float>(k, v, k_weight, false, p.eps, p.head_dim, p.n_kv_heads, 0u, p.theta, positions, false,
                           freq_factors, no_bf16, no_perm, p.seq_len, false, partials, r, tid, tg_size, sg, lane, n_sg);
        }
        head_norm_rope<float, float>(k, k, k_weight, true, p.eps, p.head_dim, p.n_kv_heads, p.half_rope_dim, p.theta, positions, ff,
                       freq_factors, no_bf16, no_perm, p.seq_len, false, partials, r, tid, tg_size, sg, lane, n_sg);
    } else if (p.v_mode == 1u && row < q_rows + 2u * kv_rows) {
        head_norm_rope<float, float>(v, v, k_weight, false, p.eps, p.head_dim, p.n_kv_heads, 0u, p.theta, positions, false,
                       freq_factors, no_bf16, no_perm, p.seq_len, false, partials, row - q_rows - kv_rows, tid, tg_size,
                       sg, lane, n_sg);
    }
}
