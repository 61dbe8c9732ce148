// The param structs of fused_head_norm_rope, bound at buffer(3):
// FusedHeadNormRopeF32Params by fused_head_norm_rope_f32 and
// FusedHeadNormRopeBatchBf16Params by fused_head_norm_rope_batch_bf16,
// mlx-native's, field for field; FusedHeadNormRopeQkvF32Params by
// fused_head_norm_rope_qkv_f32 (ours).
// Plain C, uint and float fields only: shaders/fused_head_norm_rope.metal and
// shaders/cuda/fused_head_norm_rope.cu are compiled after this file, and
// ts/params.ts reads the layouts from it (ts/ops/fused_head_norm_rope.ts packs them).

struct FusedHeadNormRopeF32Params {
    uint  head_dim;
    uint  n_heads;
    uint  half_rope_dim;        // rotated pairs, <= head_dim / 2 (partial rotary)
    float eps;
    uint  has_weight;           // nonzero: scale by norm_weight (zero: the V-norm form)
    float theta;
    uint  has_freq_factors;     // nonzero: divide pair i's frequency by freq_factors[i]
    uint  has_bf16_output;      // nonzero: also write every output to output_bf16
    uint  bf16_permuted;        // nonzero: output_bf16 and output_f32_perm at [head, token, i]
    uint  seq_len;              // tokens (the permuted index needs it)
    uint  has_f32_perm_output;  // nonzero: also write every output to output_f32_perm
};
struct FusedHeadNormRopeBatchBf16Params {
    uint  head_dim;
    uint  n_heads;
    uint  half_rope_dim;
    float eps;
    uint  has_weight;
    float theta;
    uint  has_freq_factors;
    uint  reserved;             // 0
};
struct FusedHeadNormRopeQkvF32Params {
    uint  head_dim;
    uint  n_heads;              // q's heads
    uint  n_kv_heads;           // k's heads, and v's
    uint  half_rope_dim;        // rotated pairs of q and k, <= head_dim / 2
    float eps;
    float theta;
    uint  has_freq_factors;     // nonzero: divide pair i's frequency by freq_factors[i]
    uint  v_mode;               // 0: v not touched; 1: v = v * rms_inv(v) in place; 2: v = k * rms_inv(k) from k before its norm
    uint  seq_len;              // tokens
};
