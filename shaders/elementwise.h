// The param structs of elementwise: ElementwiseParams at buffer(3) of
// elementwise_{add,mul}_{f32,f16,bf16} and at buffer(2) of cast_<from>_to_<to>;
// ScalarMulParams at buffer(2) of scalar_mul_{f32,f16,bf16} and at buffer(3)
// of elementwise_add_scaled_{f32,f16,bf16}.
// Plain C, uint and float fields only: shaders/elementwise.metal and
// shaders/cuda/elementwise.cu are compiled after this file, and ts/params.ts
// reads the layouts from it (ts/ops/elementwise.ts packs them).
// Each holds the bytes of mlx-native's params for the kernels of that name.

// The element count; the kernels touch elements [0, n_elements) only.
struct ElementwiseParams {
    uint n_elements;
};

// (scalar, count): scalar_mul multiplies by scalar; elementwise_add_scaled
// adds scalar times its second input.
struct ScalarMulParams {
    float scalar;
    uint  count;
};
