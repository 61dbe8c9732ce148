// The param structs of l2_norm (l2_norm_{f32,f16,bf16}, buffer(2)).
// Plain C, uint and float fields only: shaders/l2_norm.metal and
// shaders/cuda/l2_norm.cu are compiled after this file, and ts/params.ts reads
// the layouts from it (ts/ops/l2_norm.ts packs them).

struct L2NormParams {
    uint  rows;
    uint  dim;
    float eps;
};
