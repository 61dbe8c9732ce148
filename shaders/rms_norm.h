// The param struct of rms_norm, bound at buffer(3) by rms_norm_{f32,f16,bf16}
// and rms_norm_one_plus_{f32,f16,bf16}, at buffer(2) by
// rms_norm_no_scale_{f32,f16,bf16}.
// Plain C, float fields only: shaders/rms_norm.metal and
// shaders/cuda/rms_norm.cu are compiled after this file, and ts/params.ts
// reads the layout from it (ts/ops/rms_norm.ts packs it).

// The bytes of mlx-native's params buffer, two floats (eps, dim): dim is a
// float there, exact up to 2^24, so the op refuses longer rows. Rows come
// from the grid (one threadgroup per row).
struct RmsNormParams {
    float eps;
    float dim;
};
