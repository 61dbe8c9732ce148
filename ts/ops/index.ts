// The ops, one module per kernel family (shaders/<family>.metal, shaders/cuda/<family>.cu),
// each ending with the family's float64 reference. Import as 'mlx-native/ops'
// ('mlx-native/reference', ts/reference/index.ts, is this index again).

export * from './chunk_gated_delta_rule.ts';
export * from './compute_g_beta.ts';
export * from './elementwise.ts';
export * from './embedding.ts';
export * from './dense.ts';
export * from './dense_matmul_id.ts';
export * from './flash_attn_prefill.ts';
export * from './flash_attn_vec.ts';
export * from './fused_head_norm_rope.ts';
export * from './fused_norm.ts';
export * from './gated_delta_net.ts';
export * from './gelu.ts';
export * from './kv_cache_copy.ts';
export * from './l2_norm.ts';
export * from './moe_dispatch.ts';
export * from './moe_routing.ts';
export * from './moe_weighted_reduce.ts';
export * from './quantized_matmul.ts';
export * from './quantized_matmul_ggml.ts';
export * from './quantized_matmul_id.ts';
export * from './quantized_matmul_id_ggml.ts';
export * from './rope.ts';
export * from './rope_multi.ts';
export * from './rms_norm.ts';
export * from './sigmoid_mul.ts';
export * from './silu_mul.ts';
export * from './sample.ts';
export * from './softmax.ts';
export * from './ssm_conv.ts';
export * from './ssm_norm_gate.ts';
