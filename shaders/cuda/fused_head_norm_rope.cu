// Per-head RMS norm then NeoX rope (CUDA), entry names and bindings as
// shaders/fused_head_norm_rope.metal:
//   n[i] = x[i] / sqrt(sum_j x[j]^2 / head_dim + eps) * (w[i] if has_weight)
//   pair i = (n[i], n[i + head_dim/2]) turns by positions[token] * theta^(-2i / head_dim) / ff[i]
//   for i < half_rope_dim; the other pairs are n unrotated.
// One block per (token, head) row (row = blockIdx.x in mlx-native's kernels),
// grid (seq_len * n_heads), any blockDim.x
// (the op uses min(256, nextPow2(head_dim))); dynamic shared memory holds one
// float per warp. After the block's sum each thread rereads and writes only
// its own pairs, so output may be input. powf, division, sqrtf and sincosf
// are the accurate ones (no fast math).

namespace {

template <typename T, typename W>
__device__ __forceinline__ void head_norm_rope(const T* input, T* output, const W* norm_weight, bool has_weight, float eps,
                                               u32 head_dim, u32 n_heads, u32 half_rope, float theta, const u32* positions,
                                               bool has_ff, const float* freq_factors, __nv_bfloat16* out_bf16,
                                               float* out_f32_perm, u32 seq_len, bool permuted, u32 row) {
    extern __shared__ float partials[];
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u64 base = u64(row) * head_dim;
    const u32 token = row / n_heads;
    const u64 base2 = permuted ? (u64(row % n_heads) * seq_len + token) * head_dim : base;
    float sq = 0.0f;
    for (u32 i = tid; i < head_dim; i += bs) {
        const float v = to_f(input[base + i]);
        sq += v * v;
    }
    const float inv = 1.0f / sqrtf(block_sum(sq, partials) / float(head_dim) + eps);
    const u32 half_dim = head_dim / 2u;
    const u32 pos = positions[token];
    for (u32 i = tid; i < half_dim; i += bs) {
        float a = to_f(input[base + i]) * inv;
        float b = to_f(input[base + i + half_dim]) * inv;
        if (has_weight) {
            a *= to_f(norm_weight[i]);
            b *= to_f(norm_weight[i + half_dim]);
        }
        if (i < half_rope) {
            const float ff = has_ff ? freq_factors[i] : 1.0f;
            const float angle = float(pos) / powf(theta, float(2u * i) / float(head_dim)) / ff;
            float c, s;
            sincosf(angle, &s, &c);
            const float ra = a * c - b * s;
            b = a * s + b * c;
            a = ra;
        }
        output[base + i] = from_f<T>(a);
        output[base + i + half_dim] = from_f<T>(b);
        if (out_bf16 != nullptr) {
            out_bf16[base2 + i] = __float2bfloat16_rn(a);
            out_bf16[base2 + i + half_dim] = __float2bfloat16_rn(b);
        }
        if (out_f32_perm != nullptr) {
            out_f32_perm[base2 + i] = a;
            out_f32_perm[base2 + i + half_dim] = b;
        }
    }
}

}  // namespace

// buffer(0) input f32, (1) output, (2) norm_weight, (3) FusedHeadNormRopeF32Params, (4) positions,
// (5) freq_factors, (6) output_bf16, (7) output_f32_perm; threadgroup(0) one float per warp.
extern "C" __global__ void fused_head_norm_rope_f32(const float* input, float* output, const float* norm_weight,
                                                    const FusedHeadNormRopeF32Params* p, const u32* positions,
                                                    const float* freq_factors, __nv_bfloat16* output_bf16,
                                                    float* output_f32_perm) {
    head_norm_rope<float, float>(input, output, norm_weight, p->has_weight != 0u, p->eps, p->head_dim, p->n_heads,
                                 p->half_rope_dim, p->theta, positions, p->has_freq_factors != 0u, freq_factors,
                                 p->has_bf16_output != 0u ? output_bf16 : nullptr,
                                 p->has_f32_perm_output != 0u ? output_f32_perm : nullptr, p->seq_len,
                                 p->bf16_permuted != 0u, blockIdx.x);
}

// buffer(0) input bf16, (1) output, (2) norm_weight bf16, (3) FusedHeadNormRopeBatchBf16Params,
// (4) positions, (5) freq_factors; threadgroup(0) one float per warp.
extern "C" __global__ void fused_head_norm_rope_batch_bf16(const __nv_bfloat16* input, __nv_bfloat16* output,
                                                           const __nv_bfloat16* norm_weight,
                                                           const FusedHeadNormRopeBatchBf16Params* p,
                                                           const u32* positions, const float* freq_factors) {
    head_norm_rope<__nv_bfloat16, __nv_bfloat16>(input, output, norm_weight, p->has_weight != 0u, p->eps, p->head_dim,
                                                 p->n_heads, p->half_rope_dim, p->theta, positions,
                                                 p->has_freq_factors != 0u, freq_factors, nullptr, nullptr, 1u, false,
                                                 blockIdx.x);
}

// The q, k and v rows of one attention layer in one dispatch, as
// fused_head_norm_rope_qkv_f32 in shaders/fused_head_norm_rope.metal: q rows,
// then k rows, then (v_mode 1) v rows, one block each; with v_mode 2 a k
// row's block writes its v row (k's values normalized, no weight or rope)
// before its k row, a barrier between the two sums.
// buffer(0) q, (1) k, (2) v, (3) FusedHeadNormRopeQkvF32Params, (4) positions,
// (5) q_weight, (6) k_weight, (7) freq_factors; threadgroup(0) one float per warp.
extern "C" __global__ void fused_head_norm_rope_qkv_f32(float* q, float* k, float* v,
                                                        const FusedHeadNormRopeQkvF32Params* p, const u32* positions,
                                                        const float* q_weight, const float* k_weight,
                                                        const float* freq_factors) {
    const u32 row = blockIdx.x;
    const u32 q_rows = p->seq_len * p->n_heads, kv_rows = p->seq_len * p->n_kv_heads;
    const bool ff = p->has_freq_factors != 0u;
    if (row < q_rows) {
        head_norm_rope<float, float>(q, q, q_weight, true, p->eps, p->head_dim, p->n_heads, p->half_rope_dim, p->theta,
                                     positions, ff, freq_factors, nullptr, nullptr, p->seq_len, false, row);
    } else if (row < q_rows + kv_rows) {
        const u32 r = row - q_rows;
        if (p->v_mode == 2u) {
            head_norm_rope<float, float>(k, v, k_weight, false, p->eps, p->head_dim, p->n_kv_heads, 0u, p->theta,
                                         positions, false, freq_factors, nullptr, nullptr, p->seq_len, false, r);
            __syncthreads();  // partials: the first sum's, read by every warp
        }
        head_norm_rope<float, float>(k, k, k_weight, true, p->eps, p->head_dim, p->n_kv_heads, p->half_rope_dim, p->theta,
                                     positions, ff, freq_factors, nullptr, nullptr, p->seq_len, false, r);
    } else if (p->v_mode == 1u && row < q_rows + 2u * kv_rows) {
        head_norm_rope<float, float>(v, v, k_weight, false, p->eps, p->head_dim, p->n_kv_heads, 0u, p->theta, positions,
                                     false, freq_factors, nullptr, nullptr, p->seq_len, false, row - q_rows - kv_rows);
    }
}
