// SwiGLU (CUDA), entry names and bindings as shaders/silu_mul.metal:
//   silu_mul_<t>:        output[i]    = silu(gate[i]) * up[i]
//   silu_mul_halves_<t>: output[r, c] = silu(input[r, c]) * input[r, dim + c]
//   silu(g) = g / (1 + exp(-g))
// Arithmetic in f32 with the prelude's Silu (the fast exp and division;
// shaders/cuda/common.cuh says how close), the product rounded once to T;
// never NaN for finite inputs.
//
// Memory-bound: gated_rows (common.cuh) moves 16-byte vectors, one per
// thread, grid (ceil(chunks / 256), 1, 1) of 256 threads, chunks = rows *
// ceil(dim / VEC) (silu_mul: one row of n). silu_mul's output may be gate or
// up (in place).

namespace {

template <typename T>
__device__ __forceinline__ void silu_mul_pair(const T* gate, const T* up, T* output, const SiluMulParams* p) {
    gated_rows(gate, up, output, 1u, p->n, 0, 0, Silu());
}

template <typename T>
__device__ __forceinline__ void silu_mul_rows(const T* input, T* output, const SiluMulHalvesParams* p) {
    const u64 stride = 2ull * p->dim;
    gated_rows(input, input + p->dim, output, p->rows, p->dim, stride, stride, Silu());
}

}  // namespace

// buffer(0) gate [n], (1) up [n], (2) output [n], (3) SiluMulParams.
extern "C" __global__ void silu_mul_f32(const float* gate, const float* up, float* output, const SiluMulParams* p) {
    silu_mul_pair(gate, up, output, p);
}
extern "C" __global__ void silu_mul_f16(const __half* gate, const __half* up, __half* output, const SiluMulParams* p) {
    silu_mul_pair(gate, up, output, p);
}
extern "C" __global__ void silu_mul_bf16(const bf16* gate, const bf16* up, bf16* output, const SiluMulParams* p) {
    silu_mul_pair(gate, up, output, p);
}

// buffer(0) input [rows, 2 * dim], (1) output [rows, dim], (2) SiluMulHalvesParams.
extern "C" __global__ void silu_mul_halves_f32(const float* input, float* output, const SiluMulHalvesParams* p) {
    silu_mul_rows(input, output, p);
}
extern "C" __global__ void silu_mul_halves_f16(const __half* input, __half* output, const SiluMulHalvesParams* p) {
    silu_mul_rows(input, output, p);
}
extern "C" __global__ void silu_mul_halves_bf16(const bf16* input, bf16* output, const SiluMulHalvesParams* p) {
    silu_mul_rows(input, output, p);
}
