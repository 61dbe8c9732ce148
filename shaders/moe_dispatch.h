// The param structs of the moe_dispatch family. Plain C, uint and float
// fields: shaders/moe_dispatch.metal and shaders/cuda/moe_dispatch.cu are
// compiled after this file, and ts/params.ts reads the layouts from it
// (ts/ops/moe_dispatch.ts packs them).

// moe_dispatch_sort (not in mlx-native), buffer(3): the (token, slot) pairs
// of a routing table of n_pairs expert ids, grouped by expert.
struct MoeDispatchSortParams {
    uint n_pairs;
    uint num_experts;
};

// mlx-native's FusedGeluMulParams (src/ops/moe_dispatch.rs): buffer(3) of
// fused_gelu_mul and fused_gelu_mul_bf16, buffer(2) of moe_swiglu_fused.
struct FusedGeluMulParams {
    uint n_elements;
};

// mlx-native's MoeAccumParams, buffer(2) of moe_accumulate.
struct MoeAccumParams {
    uint n_elements;
    float routing_weight;
};

// mlx-native's ZeroParams, buffer(1) of zero_buffer.
struct ZeroParams {
    uint n_elements;
};

// mlx-native's MoeWeightedSumParams, buffer(3) of moe_weighted_sum.
struct MoeWeightedSumParams {
    uint hidden_size;
    uint top_k;
};

// mlx-native's MoeSwigluSeqParams, buffer(2) of moe_swiglu_seq and
// moe_swiglu_seq_bf16.
struct MoeSwigluSeqParams {
    uint intermediate;
    uint top_k;
    uint n_tokens;
};

// mlx-native's MoeWeightedSumSeqParams, buffer(3) of moe_weighted_sum_seq,
// moe_weighted_sum_seq_bf16_input and (added) moe_weighted_sum_seq_f16 /
// moe_weighted_sum_seq_bf16.
struct MoeWeightedSumSeqParams {
    uint hidden_size;
    uint top_k;
    uint n_tokens;
};

// mlx-native's MoeGatherTopkParams, buffer(5) of moe_gather_topk_weights.
struct MoeGatherTopkParams {
    uint n_experts;
    uint top_k;
};
