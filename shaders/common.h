// The param structs that kernels of several families take: one layout each,
// which a family header names as mlx-native does (`typedef struct A B;`).
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
