// The param structs of the quantized_matmul_id family (MLX affine quantized
// products of per-expert weights, routed by per-token expert ids). Plain C,
// uint fields: shaders/quantized_matmul_id.metal and
// shaders/cuda/quantized_matmul_id.cu are compiled after this file, and
// ts/params.ts reads the layouts from it (ts/ops/quantized_matmul_id.ts
// packs them).
//
// x [M, K]; ids [M, n_expert_used]; expert e's weight at byte
// e * expert_weight_stride of the weight buffer (rows of K values packed
// `bits` wide), its scales and biases at element e * expert_*_stride; one
// output row per (row of x, slot): y [M, n_expert_used, N].

// mlx-native's QuantizedMatmulIdGpuParams (src/ops/quantized_matmul_id.rs),
// with the names of its Metal struct: buffer(6) of quantized_matmul_id,
// quantized_mv_id_<t> and quantized_mm_id_<t>.
struct QuantizedMatmulIdParams {
    uint M;
    uint K;
    uint N;
    uint group_size;
    uint bits;
    uint n_expert_used;
    uint num_experts;
    uint expert_weight_stride;
    uint expert_scales_stride;
    uint expert_biases_stride;
};

// quantized_gate_up_mv_id_<t> and quantized_gate_up_mm_id_<t> (not in
// mlx-native), buffer(6): a QuantizedMatmulIdParams (the strides those of the
// gate and of the up weights alike), then the gate's activation (0: silu,
// Qwen3.6; 1: gelu with the tanh approximation, Gemma 4). The kernels pass
// `id` to the code of the plain products.
struct QuantizedGateUpIdParams {
    struct QuantizedMatmulIdParams id;
    uint activation;
};
