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

// buffer(0) gate [n], (1) up [n], (2) output [n], (3) SiluMulParams; the
// halves form: buffer(0) input [rows, 2 * dim], (1) output [rows, dim], (2)
// SiluMulHalvesParams.
#define SILU_MUL_ENTRIES(T, TAG)                                                                                \
    extern "C" __global__ void silu_mul_##TAG(const T* gate, const T* up, T* output, const SiluMulParams* p) {  \
        gated_pair(gate, up, output, p->n, Silu());                                                             \
    }                                                                                                           \
    extern "C" __global__ void silu_mul_halves_##TAG(const T* input, T* output, const SiluMulHalvesParams* p) { \
        gated_halves(input, output, p->rows, p->dim, Silu());                                                   \
    }
SILU_MUL_ENTRIES(float, f32)
SILU_MUL_ENTRIES(__half, f16)
SILU_MUL_ENTRIES(bf16, bf16)
