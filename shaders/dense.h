// The param structs of the dense family (y = x W^T with weights stored
// [out, in]). Plain C: shaders/dense.metal and shaders/cuda/dense.cu are
// compiled after this file, and ts/params.ts reads the layouts from it
// (ts/ops/dense.ts packs them). Fields are uint and float, and for the
// structs of mlx-native's batched kernels, which take llama.cpp's argument
// blocks, int (int32_t), short (int16_t) and ulong (uint64_t), naturally
// aligned, so the bytes are the crate's.

// mlx-native's DenseGemmParams (src/ops/dense_gemm.rs), buffer(3) of
// dense_gemm_f16 and the dense_matvec_* kernels: A [M, K], B [N, K], C [M, N].
struct DenseGemmParams {
    uint M;
    uint N;
    uint K;
};

// mlx-native's DenseGemvBf16Params (src/ops/dense_gemv_bf16.rs), buffer(0)
// of hf2q_dense_gemv_bf16_f32_4: bytes 0-111 of llama.cpp's
// ggml_metal_kargs_mul_mv. ne* are element counts, nb* byte strides;
// src0 is the weight [ne02, ne01, ne00], src1 the input [ne12, ne11, ne10],
// dst [ne12, ne1, ne0]; src1 batch i uses weight batch i / r2. nb00, nb10,
// ne10 and nr0 are carried for the layout and not read.
struct DenseGemvBf16Params {
    int   ne00;
    int   ne01;
    int   ne02;
    ulong nb00;
    ulong nb01;
    ulong nb02;
    ulong nb03;
    int   ne10;
    int   ne11;
    int   ne12;
    ulong nb10;
    ulong nb11;
    ulong nb12;
    ulong nb13;
    int   ne0;
    int   ne1;
    int   nr0;
    short r2;
    short r3;
};

// mlx-native's DenseMm{Bf16,F16,F32}F32TensorParams (src/ops/dense_mm_*.rs,
// three structs with one layout: llama.cpp's mul_mm block, shaders/common.h),
// buffer(0) of the hf2q_dense_mm_{bf16,f16,f32}_f32_tensor kernels: ne00 = K,
// ne0 = N, ne1 = M; src0 (weight) batch stride nb02, row stride nb01; src1
// (input) strides nb11 (row), nb12 (batch); src1 batch i uses weight batch
// i / r2. dst is [batch, M, N], contiguous. nb10 is carried for the layout.
typedef struct GgmlMulMmArgs DenseMmTensorParams;

// The param struct of dense_mm_{f32,f16,bf16} and dense_mv_{f32,f16,bf16}
// (not in mlx-native): x [batch, m, k], w [w_batch, n, k], y [batch, m, n],
// contiguous, one dtype; x batch b uses weight batch b / (batch / w_batch).
struct DenseParams {
    uint m;
    uint n;
    uint k;
    uint batch;
    uint w_batch;
};
