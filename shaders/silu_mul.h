// The param structs of silu_mul: SiluMulParams at buffer(3) of
// silu_mul_{f32,f16,bf16}, SiluMulHalvesParams at buffer(2) of
// silu_mul_halves_{f32,f16,bf16}.
// Plain C, uint fields only: shaders/silu_mul.metal and
// shaders/cuda/silu_mul.cu are compiled after this file, and ts/params.ts
// reads the layouts from it (ts/ops/silu_mul.ts packs them).

// The bytes of mlx-native's params buffer: the element count as one u32.
struct SiluMulParams {
    uint n;
};

// Rows of [gate | up]: dim elements of output per row, 2 * dim of input.
struct SiluMulHalvesParams {
    uint dim;
    uint rows;
};
