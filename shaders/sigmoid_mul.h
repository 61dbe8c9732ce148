// The param structs of sigmoid_mul: SigmoidMulParams at buffer(3) of
// sigmoid_mul_{f32,f16,bf16}, SigmoidMulHalvesParams at buffer(2) of
// sigmoid_mul_halves_{f32,f16,bf16}.
// Plain C, uint fields only: shaders/sigmoid_mul.metal and
// shaders/cuda/sigmoid_mul.cu are compiled after this file, and ts/params.ts
// reads the layouts from it (ts/ops/sigmoid_mul.ts packs them).

// The bytes of mlx-native's params buffer: the element count as one u32.
struct SigmoidMulParams {
    uint n;
};

// Rows of [gate | x]: dim elements of output per row, 2 * dim of input.
struct SigmoidMulHalvesParams {
    uint dim;
    uint rows;
};
