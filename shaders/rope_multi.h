// The param structs of rope_multi (rope_multi_{f32,f16,bf16}): RopeMultiParams
// at buffer(2), RopeMultiRopeParams at buffer(4), RopeMultiSections at buffer(5).
// Plain C, uint and float fields only: shaders/rope_multi.metal and
// shaders/cuda/rope_multi.cu are compiled after this file, and ts/params.ts
// reads the layouts from it (ts/ops/rope_multi.ts packs them).
// The three are mlx-native's float4 and two uint4, field for field.

struct RopeMultiParams {
    float freq_base;
    float head_dim;   // exact as a float: the op refuses more than 2^24
    float rope_dim;
    float reserved;   // 0
};
struct RopeMultiRopeParams {
    uint n_heads;
    uint mode;        // 8 MROPE, 40 IMROPE, 24 VISION (ggml's GGML_ROPE_TYPE_* codes)
    uint seq_len;
    uint reserved;    // 0
};
struct RopeMultiSections {
    uint s0;
    uint s1;
    uint s2;
    uint s3;
};
