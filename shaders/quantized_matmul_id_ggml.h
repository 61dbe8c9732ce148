// The param structs of the quantized_matmul_id_ggml family (per-expert
// products with GGUF block weights). Plain C: shaders/quantized_matmul_id_ggml.metal
// and shaders/cuda/quantized_matmul_id_ggml.cu are compiled after this file,
// and ts/params.ts reads the layouts from it (ts/ops/quantized_matmul_id_ggml.ts
// packs them).

// mlx-native's GgmlMatvecIdParams (src/ops/quantized_matmul_id_ggml.rs),
// buffer(4) of kernel_mul_mv_id_<type>_f32: the vector form's
// GgmlMatvecParams (shaders/common.h) as `mv`, then the routing. Pair p =
// token * top_k + slot of y [mv.ne1, mv.ne0] f32 takes x row p / top_k
// ([n_tokens, mv.ne10] f32) against expert ids[p]'s weight [mv.ne01,
// mv.ne00] of GGML blocks, expert_stride bytes after the previous expert's.
// mv.ne01 is the rows of an expert, mv.ne1 the pairs (n_tokens * top_k), and
// mv.ne02 the number of experts (llama.cpp's meaning of it; the crate passes
// 1 and reads nothing): an id at or past it gives a row of zeros. mv.ne12,
// mv.r2 and mv.r3 are carried for the layout (1) and not read.
struct GgmlMatvecIdParams {
    struct GgmlMatvecParams mv;
    uint  top_k;          // slots of a token
    uint  n_tokens;       // rows of x
    ulong expert_stride;  // bytes from one expert's weight to the next's
};

// mlx-native's GgmlMatmulIdMm_MmParams (llama.cpp's
// ggml_metal_kargs_mul_mm_id), buffer(0) of kernel_mul_mm_id_<type>_f32, with
// the host struct's explicit padding words: ne00 = K, ne02 = experts, nb01
// the bytes of a weight row, nb02 the bytes from one expert to the next, nb12
// the bytes of an x row (a token's; nb11 = 0, every slot of a token reads its
// row), ne20 = top_k, ne21 = n_tokens, ne0 = N. nb03, ne11, nb10, nb13, ne1,
// r2 and r3 are carried for the layout and not read.
struct GgmlMatmulIdMm_MmParams {
    int   ne00;
    int   ne02;
    ulong nb01;
    ulong nb02;
    ulong nb03;
    int   ne11;
    uint  _pad0;
    ulong nb10;
    ulong nb11;
    ulong nb12;
    ulong nb13;
    int   ne20;
    int   ne21;
    int   ne0;
    int   ne1;
    short r2;
    short r3;
    uint  _pad1;
};

// buffer(4) of kernel_mul_mv_id_<type>_f32_gate_up (not in mlx-native): the
// fused gate/up vector form. `id` is the GgmlMatvecIdParams of both weights
// (gate at buffer(0), up at buffer(5): one block type, one expert_stride,
// mv.ne01 rows an expert each), then the gate's activation (0: silu, Qwen3.6;
// 1: gelu with the tanh approximation, Gemma 4). Pair p's output row is
// act(x W_gate^T) * (x W_up^T), mv.ne01 values.
struct GgmlMatvecIdGateUpParams {
    struct GgmlMatvecIdParams id;
    uint activation;
};

// buffer(0) of kernel_mul_mm_id_<type>_f32_gate_up (not in mlx-native): the
// fused gate/up matrix form. `mm` is the GgmlMatmulIdMm_MmParams of both
// weights (gate at buffer(1), up at buffer(6): one block type, nb01 and
// nb02; ne0 the rows of an expert each, the outputs of a pair), then the
// gate's activation (0: silu; 1: gelu with the tanh approximation) and a
// padding word. Pair p's output row is act(x W_gate^T) * (x W_up^T).
struct GgmlMatmulIdMmGateUpParams {
    struct GgmlMatmulIdMm_MmParams mm;
    uint activation;
    uint _pad2;
};
