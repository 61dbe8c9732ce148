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
            float c, s;
            rope_cos_sin(pos, i, float(head_dim), theta, has_ff ? freq_factors[i] : 1.0f, &c, &s);
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

// The heads form (the `_heads` entries; the op's CUDA launch where head_dim
// / 2 / ROPE_PAIRS is a power of two up to 32, fusedHeadNormRopeHeadsLaunch
// in ts/ops/fused_head_norm_rope.ts): token blockIdx.x * blockDim.z +
// threadIdx.z (the launch divides the tokens into whole blocks; tokens at or
// past seq_len load and store nothing), a thread ROPE_PAIRS pairs p0 =
// ROPE_PAIRS * threadIdx.x of ROPE_HEADS heads (common.cuh's RopeQuad),
// blockDim.x threads one head's row, its sum of squares reduced by shuffles
// inside those lanes; every lane runs the same rounds, so the shuffles see
// whole warps. Without TOKENS (the bf16 entry: blockDim.z 1) the token's
// angles are formed once a block (rope_block_angles), behind one barrier;
// with TOKENS (the f32 entries, up to ROPE_BLOCK_TOKENS a block) the
// divisors (powf) once a block for its tokens (rope_block_divisors), then
// each token's angles (rope_token_angles): measured faster for the f32
// entries and slower for the bf16 one
// (bench/results/argmax-rope-h200-2026-11-28b.md). Each angle is folded with
// the thread's weights once (w_a c, w_b s, w_a s, w_b c), so a
// pair costs (a w_a c - b w_b s) / rms and (a w_a s +
// b w_b c) / rms; 1 / rms is rsqrtf's (as rms_norm's), not the one-row form's
// 1 / sqrtf: this form's results may differ from it by an ulp of f32 before
// rounding to T. v_out (v_mode 2): the row normalized, no weight or rope,
// stored before the row's own output.
template <typename T, typename W, bool TOKENS>
__device__ __forceinline__ void head_norm_rope_heads(const T* input, T* output, const W* norm_weight, bool has_weight, float eps,
                                                     u32 head_dim, u32 n_heads, u32 half_rope, float theta,
                                                     const u32* positions, u32 seq_len, bool has_ff, const float* freq_factors,
                                                     T* v_out) {
    const u32 token = TOKENS ? blockIdx.x * blockDim.z + threadIdx.z : blockIdx.x;
    const bool live = !TOKENS || token < seq_len;
    // Read before the rows: the angles then wait on no row load (see rope_heads).
    const u32 pos = live ? positions[token] : 0u;
    const u32 half_dim = head_dim / 2u;
    const u32 p0 = ROPE_PAIRS * threadIdx.x;
    const u32 turn = half_rope > p0 ? min(ROPE_PAIRS, half_rope - p0) : 0u;
    // head_dim is 8 blockDim.x, a power of two: sq * inv_dim is sq / head_dim exactly.
    const float inv_dim = 1.0f / float(head_dim);
    const bool vec = rope_quad_vectors(input, output, half_dim) && (v_out == nullptr || rope_quad_vectors(input, v_out, half_dim));
    float wa[ROPE_PAIRS], wb[ROPE_PAIRS], wac[ROPE_PAIRS], wbs[ROPE_PAIRS], was[ROPE_PAIRS], wbc[ROPE_PAIRS];
#pragma unroll
    for (u32 k = 0; k < ROPE_PAIRS; ++k) {
        wa[k] = has_weight ? to_f(norm_weight[p0 + k]) : 1.0f;
        wb[k] = has_weight ? to_f(norm_weight[p0 + k + half_dim]) : 1.0f;
    }
    __shared__ float dv[ROPE_BLOCK_PAIRS];
    __shared__ float2 cs_all[TOKENS ? ROPE_BLOCK_TOKENS : 1u][ROPE_BLOCK_PAIRS];
    float2* cs = cs_all[TOKENS ? threadIdx.z : 0u];
    const u32 group = blockDim.y * ROPE_HEADS;
    for (u32 base = 0; base < n_heads; base += group) {
        const u32 h = base + threadIdx.y * ROPE_HEADS;
        const u32 count = live && h < n_heads ? min(ROPE_HEADS, n_heads - h) : 0u;
        const u64 at = (u64(token) * n_heads + h) * head_dim + p0;
        RopeQuad<T> q;
        rope_quad_load(input, at, head_dim, half_dim, count, ROPE_PAIRS, vec, q);
        if (base == 0u) {
            // Without factors the angles read no memory (see rope_heads).
            // One token a block: its angles whole, behind one barrier;
            // several: the divisors shared, then each token's angles.
            if constexpr (!TOKENS) {
                if (has_ff) {
                    rope_block_angles(0u, half_rope, [&](u32 i, float& ci, float& si) {
                        rope_cos_sin(pos, i, float(head_dim), theta, freq_factors[i], &ci, &si);
                    }, cs);
                } else {
                    rope_block_angles(0u, half_rope, [&](u32 i, float& ci, float& si) {
                        rope_cos_sin(pos, i, float(head_dim), theta, 1.0f, &ci, &si);
                    }, cs);
                }
            } else {
                rope_block_divisors(0u, half_rope, float(head_dim), theta, dv);
                if (has_ff) {
                    rope_token_angles(half_rope, [&](u32 i, float& ci, float& si) { rope_turn(pos, dv[i], freq_factors[i], &ci, &si); }, cs);
                } else {
                    rope_token_angles(half_rope, [&](u32 i, float& ci, float& si) { rope_turn(pos, dv[i], 1.0f, &ci, &si); }, cs);
                }
            }
#pragma unroll
            for (u32 k = 0; k < ROPE_PAIRS; ++k) {
                const float2 t = k < turn ? cs[p0 + k] : make_float2(1.0f, 0.0f);
                wac[k] = wa[k] * t.x;
                wbs[k] = wb[k] * t.y;
                was[k] = wa[k] * t.y;
                wbc[k] = wb[k] * t.x;
            }
        }
        // A head at a time, widened from its loaded bits: every lane runs
        // each head's shuffles (the heads past count add zeros), so the
        // shuffles see whole warps.
#pragma unroll
        for (u32 j = 0; j < ROPE_HEADS; ++j) {
            float a[ROPE_PAIRS], b[ROPE_PAIRS];
            rope_unpack<T>(q.a[j], a);
            rope_unpack<T>(q.b[j], b);
            float sq = 0.0f;
#pragma unroll
            for (u32 k = 0; k < ROPE_PAIRS; ++k) sq += j < count ? a[k] * a[k] + b[k] * b[k] : 0.0f;
#pragma unroll
            for (u32 o = 16u; o > 0u; o /= 2u) {
                if (o < blockDim.x) sq += __shfl_xor_sync(0xffffffffu, sq, o);
            }
            const float inv = rsqrtf(sq * inv_dim + eps);
            if (j < count) {
                if (v_out != nullptr) {
                    float va[ROPE_PAIRS], vb[ROPE_PAIRS];
#pragma unroll
                    for (u32 k = 0; k < ROPE_PAIRS; ++k) {
                        va[k] = a[k] * inv;
                        vb[k] = b[k] * inv;
                    }
                    T* yv = v_out + at + u64(j) * head_dim;
                    rope_store(yv, vec, ROPE_PAIRS, va);
                    rope_store(yv + half_dim, vec, ROPE_PAIRS, vb);
                }
                // (a w_a, b w_b) turned by (c, s), then scaled by inv.
#pragma unroll
                for (u32 k = 0; k < ROPE_PAIRS; ++k) {
                    const float x = a[k], z = b[k];
                    a[k] = (x * wac[k] - z * wbs[k]) * inv;
                    b[k] = (x * was[k] + z * wbc[k]) * inv;
                }
                T* y = output + at + u64(j) * head_dim;
                rope_store(y, vec, ROPE_PAIRS, a);
                rope_store(y + half_dim, vec, ROPE_PAIRS, b);
            }
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

// The heads forms of the three entries above (see head_norm_rope_heads):
// grid (seq_len / blockDim.z, 1, 1); qkv's grid (seq_len / blockDim.z, 1, 2 | 3): z 0 q's heads, 1 k's
// (with v_mode 2 v's from them), 2 v's in place (v_mode 1). The f32 entries'
// launch bounds hold them to 128 registers at up to 256 threads (unbounded,
// ptxas gives qkv 153 with two tokens a block); the bf16 entry takes one
// token a block and its own count (96).
extern "C" __global__ void __launch_bounds__(ROPE_HEADS_BLOCK_THREADS, 2)
fused_head_norm_rope_f32_heads(const float* input, float* output, const float* norm_weight, const FusedHeadNormRopeF32Params* p,
                               const u32* positions, const float* freq_factors, __nv_bfloat16* output_bf16,
                               float* output_f32_perm) {
    head_norm_rope_heads<float, float, true>(input, output, norm_weight, p->has_weight != 0u, p->eps, p->head_dim, p->n_heads,
                                             p->half_rope_dim, p->theta, positions, p->seq_len, p->has_freq_factors != 0u,
                                             freq_factors, nullptr);
}

extern "C" __global__ void fused_head_norm_rope_batch_bf16_heads(const __nv_bfloat16* input, __nv_bfloat16* output,
                                                                 const __nv_bfloat16* norm_weight,
                                                                 const FusedHeadNormRopeBatchBf16Params* p,
                                                                 const u32* positions, const float* freq_factors) {
    // No seq_len in these params: the launch's blocks are one token each (blockDim.z 1).
    head_norm_rope_heads<__nv_bfloat16, __nv_bfloat16, false>(input, output, norm_weight, p->has_weight != 0u, p->eps,
                                                              p->head_dim, p->n_heads, p->half_rope_dim, p->theta, positions,
                                                              0xffffffffu, p->has_freq_factors != 0u, freq_factors, nullptr);
}

extern "C" __global__ void __launch_bounds__(ROPE_HEADS_BLOCK_THREADS, 2)
fused_head_norm_rope_qkv_f32_heads(float* q, float* k, float* v, const FusedHeadNormRopeQkvF32Params* p, const u32* positions,
                                   const float* q_weight, const float* k_weight, const float* freq_factors) {
    const u32 n = p->seq_len;
    const bool ff = p->has_freq_factors != 0u;
    if (blockIdx.z == 0u) {
        head_norm_rope_heads<float, float, true>(q, q, q_weight, true, p->eps, p->head_dim, p->n_heads, p->half_rope_dim,
                                                 p->theta, positions, n, ff, freq_factors, nullptr);
    } else if (blockIdx.z == 1u) {
        head_norm_rope_heads<float, float, true>(k, k, k_weight, true, p->eps, p->head_dim, p->n_kv_heads, p->half_rope_dim,
                                                 p->theta, positions, n, ff, freq_factors, p->v_mode == 2u ? v : nullptr);
    } else if (p->v_mode == 1u) {
        head_norm_rope_heads<float, float, true>(v, v, k_weight, false, p->eps, p->head_dim, p->n_kv_heads, 0u, p->theta,
                                                 positions, n, false, freq_factors, nullptr);
    }
}
