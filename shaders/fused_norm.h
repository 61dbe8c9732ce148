// The param structs of fused_norm: bound at buffer(5) by
// fused_residual_norm_{f32,bf16}, fused_residual_norm_scalar_f32,
// fused_norm_add_scalar_f32 and fused_norm_add_norms_f32, in that order; at
// buffer(6) by fused_norm_moe_sum_{f32,bf16_input}.
// Plain C, uint and float fields only: shaders/fused_norm.metal and
// shaders/cuda/fused_norm.cu are compiled after this file, and ts/params.ts reads
// the layouts from it (ts/ops/fused_norm.ts packs them).

struct FusedResidualNormParams {
    uint  dim;
    uint  rows;
    float eps;
    uint  write_sum;         // nonzero: also store residual + input to sum_output
};
struct FusedResidualNormScalarF32Params {
    uint  dim;
    uint  rows;
    float eps;
    uint  scalar_is_vector;  // nonzero: scalar has dim elements; zero: scalar[0] for all
};
struct FusedNormAddScalarF32Params {
    uint  dim;
    uint  rows;
    float eps;
    uint  scalar_is_vector;  // nonzero: scalar has dim elements; zero: scalar[0] for all
};
struct FusedNormAddNormsF32Params {
    uint  dim;
    uint  rows;
    float eps;
    uint  scalar_mode;       // 0: no scalar; 1: scalar[0] for all; 2: scalar has dim elements
    uint  norms;             // normed outputs written, 0 to 3: normed_0 .. normed_{norms - 1}
    uint  weighted;          // bit j set: normed_j = h * rms_inv(h) * norm_weight_j; clear: h * rms_inv(h)
};
struct FusedNormMoeSumParams {
    uint  dim;
    uint  rows;
    uint  top_k;
    float eps;
};
