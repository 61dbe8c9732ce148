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

}  // namespace

// buffer(0) x [n], (1) gate [n], (2) output [n], (3) SigmoidMulParams; the
// halves form: buffer(0) input [rows, 2 * dim], (1) output [rows, dim], (2)
// SigmoidMulHalvesParams.
#define SIGMOID_MUL_ENTRIES(T, TAG)                                                                                   \
    extern "C" __global__ void sigmoid_mul_##TAG(const T* x, const T* gate, T* output, const SigmoidMulParams* p) {   \
        gated_pair(gate, x, output, p->n, Sigmoid());                                                                 \
    }                                                                                                                 \
    extern "C" __global__ void sigmoid_mul_halves_##TAG(const T* input, T* output, const SigmoidMulHalvesParams* p) { \
        gated_halves(input, output, p->rows, p->dim, Sigmoid());                                                      \
    }
SIGMOID_MUL_ENTRIES(float, f32)
SIGMOID_MUL_ENTRIES(__half, f16)
SIGMOID_MUL_ENTRIES(bf16, bf16)
