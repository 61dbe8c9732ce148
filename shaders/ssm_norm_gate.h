// The param structs of ssm_norm_gate (ssm_norm_gate_f32, buffer(4)).
// Plain C, uint and float fields only: shaders/ssm_norm_gate.metal and
// shaders/cuda/ssm_norm_gate.cu are compiled after this file, and ts/params.ts reads
// the layouts from it (ts/ops/ssm_norm_gate.ts packs them).

// Bound at buffer(4): four floats, d_v stored as a float (exact below 2^24).
struct SsmNormGateParams {
    float eps;
    float d_v;
    float unused0;
    float unused1;
};
