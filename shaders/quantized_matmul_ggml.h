// The param structs of the quantized_matmul_ggml family (GGUF block formats:
// Q4_0, Q8_0, Q4_K, Q5_K, Q6_K). Plain C: shaders/quantized_matmul_ggml.metal
// and shaders/cuda/quantized_matmul_ggml.cu are compiled after this file, and
// ts/params.ts reads the layouts from it (ts/ops/quantized_matmul_ggml.ts
// packs them).

// mlx-native's GgmlMatvecParams, buffer(3) of the kernel_mul_mv_<type>_f32
// kernels, is defined in shaders/common.h: quantized_matmul_id_ggml's
// GgmlMatvecIdParams holds it.

// mlx-native's GgmlMatmulMmParams (llama.cpp's ggml_metal_kargs_mul_mm,
// shaders/common.h), buffer(0) of the kernel_mul_mm_<type>_f32 kernels:
// ne00 = K, ne0 = N (the y row stride), ne1 = M; nb01 the bytes of a weight
// row, nb11 the bytes of an x row. ne02, nb02, nb03, ne12, nb10, nb12, nb13,
// r2 and r3 are carried for the layout and not read (a batch of 1).
typedef struct GgmlMulMmArgs GgmlMatmulMmParams;

// kernel_mul_mm_<type>_f32_splitk (not in mlx-native), buffer(6): the
// matrix form with k cut into `splits` slices of `chunks` runs of 32 values
// (the last slice takes what is left), each slice's block writing its
// partial tile, the tile's last block to arrive summing them in slice
// order.
struct GgmlMatmulSplitParams {
    uint splits;
    uint chunks;
};

// kernel_dequantize_<type>_<out> (not in mlx-native): n_chunks runs of 16
// consecutive values of a tensor of GGML blocks (its rows back to back),
// written as f32, f16 or bf16.
struct GgmlDequantizeParams {
    uint n_chunks;
};

// embedding_gather_scale_batch_<type>_to_<out> (not in mlx-native): rows of
// a table [vocab_size, hidden_size] of GGML blocks gathered by u32 ids and
// scaled, the words of the embedding family's EmbedGatherScaleBatchParams
// (an id >= vocab_size reads row vocab_size - 1).
struct GgmlEmbeddingParams {
    float scale;
    uint  hidden_size;
    uint  n_tokens;
    uint  vocab_size;
};
