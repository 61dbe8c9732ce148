// The param structs of compute_g_beta (compute_g_beta_{f32,bf16}, buffer(6)).
// Plain C, uint and float fields only: shaders/compute_g_beta.metal and
// shaders/cuda/compute_g_beta.cu are compiled after this file, and ts/params.ts reads
// the layouts from it (ts/ops/compute_g_beta.ts packs them).

struct ComputeGBetaParams {
    uint n;   // B * T * H
    uint h;
};
