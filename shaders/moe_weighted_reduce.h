// The param structs of the moe_weighted_reduce family. Plain C, uint and float fields:
// shaders/moe_weighted_reduce.metal and shaders/cuda/moe_weighted_reduce.cu
// are compiled after this file, and ts/params.ts reads the layout from it
// (ts/ops/moe_weighted_reduce.ts packs it).

// mlx-native's MoeWeightedReduceGpuParams (src/ops/moe_weighted_reduce.rs),
// with the names of its Metal struct: buffer(0) of every kernel of the
// family. h is the hidden size; add_residual 0 or 1.
struct MoeWeightedReduceParams {
    uint n_tokens;
    uint top_k;
    uint h;
    uint add_residual;
};

// The param struct of moe_weighted_reduce_norm_* (ours; buffer(0)): the
// fields of MoeWeightedReduceParams, then the norm's epsilon.
struct MoeWeightedReduceNormParams {
    uint  n_tokens;
    uint  top_k;
    uint  h;
    uint  add_residual;
    float eps;
};
