// The param struct of the dense_matmul_id family (per-expert products with
// f32, f16 or bf16 weights, routed by per-token expert ids). Plain C, uint
// fields: shaders/dense_matmul_id.metal and shaders/cuda/dense_matmul_id.cu
// are compiled after this file, and ts/params.ts reads the layout from it
// (ts/ops/dense_matmul_id.ts packs it).

// Not in mlx-native; in the style of its QuantizedMatmulIdParams: buffer(4)
// of every kernel of the family. x [M, K]; ids [M, n_expert_used]; expert
// e's weight [N, K] (rows [out, in]) at element e * expert_stride of the
// weight buffer; y [M, n_expert_used, N]. activation: the gate's, for the
// gate_up kernels (0 silu, 1 gelu with the tanh approximation).
struct DenseMatmulIdParams {
    uint M;
    uint K;
    uint N;
    uint n_expert_used;
    uint num_experts;
    uint expert_stride;
    uint activation;
};
