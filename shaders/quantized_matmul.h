// The param struct of the quantized_matmul family (MLX affine quantization,
// y = x W^T with W packed as MLX checkpoints store it). Plain C:
// shaders/quantized_matmul.metal and shaders/cuda/quantized_matmul.cu are
// compiled after this file, and ts/params.ts reads the layout from it
// (ts/ops/quantized_matmul.ts packs it).

// mlx-native's QuantizedMatmulGpuParams (src/ops/quantized_matmul.rs), with
// the names of its Metal struct: buffer(5) of every kernel of the family.
// x [M, K], W [N, K] packed `bits` wide, one scale and bias per group of
// group_size values along K, y [M, N].
struct QuantizedMatmulParams {
    uint M;
    uint K;
    uint N;
    uint group_size;
    uint bits;
};
