// The param structs that kernels of several families take, whole or held in
// a struct of their own: one layout each, which a family header names as
// mlx-native does (`typedef struct A B;`) where its name is another.
// Plain C like the family headers: every program compiles this file after
// its prelude and ahead of its family header (ts/registry.ts familySources),
// and ts/params.ts reads it ahead of every header.

// llama.cpp's ggml_metal_kargs_mul_mm, the argument block of its matrix
// kernels: ne* are element counts, nb* byte strides; src0 is the weight
// [ne02, rows, ne00] (row stride nb01, batch stride nb02), src1 the input
// (row stride nb11, batch stride nb12, ne12 batches), dst [ne12, ne1, ne0];
// src1 batch i uses weight batch i / r2. Named DenseMmTensorParams by the
// dense family and GgmlMatmulMmParams by quantized_matmul_ggml.
struct GgmlMulMmArgs {
    int   ne00;
    int   ne02;
    ulong nb01;
    ulong nb02;
    ulong nb03;
    int   ne12;
    ulong nb10;
    ulong nb11;
    ulong nb12;
    ulong nb13;
    int   ne0;
    int   ne1;
    short r2;
    short r3;
};

// mlx-native's GgmlMatvecParams (src/ops/quantized_matmul_ggml.rs), buffer(3)
// of quantized_matmul_ggml's kernel_mul_mv_<type>_f32 kernels: x [ne1, ne10]
// f32 against the weight [ne01, ne00] of GGML blocks, y [ne1, ne0] f32. The
// crate's fields are int64_t; every value is a size >= 0, so ulong gives the
// same bytes. The batch fields (ne02, ne12, r2, r3) are carried for the
// layout and not read (the crate always passes a batch of 1).
// quantized_matmul_id_ggml's GgmlMatvecIdParams holds it (as `mv`).
struct GgmlMatvecParams {
    ulong ne00;  // K: values per weight row
    ulong ne01;  // N: weight rows (outputs)
    ulong ne02;  // weight batch (1)
    ulong ne10;  // x row stride, in values (K)
    ulong ne12;  // x batch (1)
    ulong ne0;   // y row stride, in values (N)
    ulong ne1;   // M: rows of x (tokens)
    uint  r2;    // ne12 / ne02 (1)
    uint  r3;    // (1)
};

// The sizes of the gated delta rule, as mlx-native's GatedDeltaNetParams
// (gated_delta_net) and GatedDeltaNetChunkParams (chunk_gated_delta_rule)
// begin: b sequences of t tokens, hg key heads, h value heads (a multiple of
// hg), head dims k (keys) and v (values). Both hold it as `dims`.
struct GatedDeltaRuleDims {
    uint b;
    uint t;
    uint hg;
    uint h;
    uint k;
    uint v;
};
