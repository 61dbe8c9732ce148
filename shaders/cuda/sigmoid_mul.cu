// The sigmoid gate (CUDA), entry names and bindings as shaders/sigmoid_mul.metal:
//   sigmoid_mul_<t>:        output[i]    = x[i] * sigmoid(gate[i])
//   sigmoid_mul_halves_<t>: output[r, c] = input[r, dim + c] * sigmoid(input[r, c])
//   sigmoid(g) = 1 / (1 + exp(-g))
// Arithmetic in f32 with the fast exp and division (__expf, __fdividef: a
// relative error of a few ulp plus |g| 2^-24 from rounding the exponent,
// under 1e-5 for |g| < 88), the product rounded once to T. exp(-g)
// overflowing to +inf (or past 2^126) gives 0, the limit, never NaN.
//
// Memory-bound: gated_rows (common.cuh) moves 16-byte vectors, one per
// thread, grid (ceil(chunks / 256), 1, 1) of 256 threads, chunks = rows *
// ceil(dim / VEC) (sigmoid_mul: one row of n). sigmoid_mul's output may be x
// or gate (in place).

namespace {

struct Sigmoid {
    __device__ __forceinline__ float operator()(float g) const { return __fdividef(1.0f, 1.0f + __expf(-g)); }
};

template <typename T>
__device__ __forceinline__ void sigmoid_mul_pair(const T* x, const T* gate, T* output, const SigmoidMulParams* p) {
    gated_rows(gate, x, output, 1u, p->n, 0, 0, Sigmoid());
}

template <typename T>
__device__ __forceinline__ void sigmoid_mul_rows(const T* input, T* output, const SigmoidMulHalvesParams* p) {
    const u64 stride = 2ull * p->dim;
    gated_rows(input, input + p->dim, output, p->rows, p->dim, stride, stride, Sigmoid());
}

}  // namespace

// buffer(0) x [n], (1) gate [n], (2) output [n], (3) SigmoidMulParams.
extern "C" __global__ void sigmoid_mul_f32(const float* x, const float* gate, float* output, const SigmoidMulParams* p) {
    sigmoid_mul_pair(x, gate, output, p);
}
extern "C" __global__ void sigmoid_mul_f16(const __half* x, const __half* gate, __half* output, const SigmoidMulParams* p) {
    sigmoid_mul_pair(x, gate, output, p);
}
extern "C" __global__ void sigmoid_mul_bf16(const bf16* x, const bf16* gate, bf16* output, const SigmoidMulParams* p) {
    sigmoid_mul_pair(x, gate, output, p);
}

// buffer(0) input [rows, 2 * dim], (1) output [rows, dim], (2) SigmoidMulHalvesParams.
extern "C" __global__ void sigmoid_mul_halves_f32(const float* input, float* output, const SigmoidMulHalvesParams* p) {
    sigmoid_mul_rows(input, output, p);
}
extern "C" __global__ void sigmoid_mul_halves_f16(const __half* input, __half* output, const SigmoidMulHalvesParams* p) {
    sigmoid_mul_rows(input, output, p);
}
extern "C" __global__ void sigmoid_mul_halves_bf16(const bf16* input, bf16* output, const SigmoidMulHalvesParams* p) {
    sigmoid_mul_rows(input, output, p);
}
