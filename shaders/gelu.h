// The param structs of gelu: GeluTanhMulParams at buffer(3) of
// gelu_tanh_mul_{f32,f16,bf16}, GeluTanhMulHalvesParams at buffer(2) of
// gelu_tanh_mul_halves_{f32,f16,bf16}; gelu_{f32,f16,bf16} take none
// (mlx-native's: the grid holds exactly one thread per element).
// Plain C, uint fields only: shaders/gelu.metal and shaders/cuda/gelu.cu are
// compiled after this file, and ts/params.ts reads the layouts from it
// (ts/ops/gelu.ts packs them).

// The element count as one u32 (the bytes of mlx-native's FusedGeluMulParams,
// which its fused_gelu_mul kernels bind at the same index).
struct GeluTanhMulParams {
    uint n;
};

// Rows of [gate | up]: dim elements of output per row, 2 * dim of input.
struct GeluTanhMulHalvesParams {
    uint dim;
    uint rows;
};
