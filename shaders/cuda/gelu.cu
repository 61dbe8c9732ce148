// GELU, tanh approximation (CUDA), entry names and bindings as shaders/gelu.metal:
//   gelu_<t>:                 output[i]    = gelu(input[i])
//   gelu_tanh_mul_<t>:        output[i]    = gelu(gate[i]) * up[i]
//   gelu_tanh_mul_halves_<t>: output[r, c] = gelu(input[r, c]) * input[r, dim + c]
//   gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3),
//   computed as x / (1 + exp(-2u)) (the same function; see gelu.metal)
// Arithmetic in f32 with the prelude's GeluTanh (the fast exp and division;
// shaders/cuda/common.cuh says how close), rounded once to T; never NaN for
// finite inputs.
//
// gelu_<t> has no element count (mlx-native's bindings): the launch says how
// many elements it covers. With one-dimensional blocks (the Metal launch)
// it holds exactly n threads, one element each. With two-dimensional blocks
// (blockDim.y > 1: the op's CUDA launch, ts/ops/gelu.ts geluCudaLaunch) each
// thread takes one 16-byte vector (VEC elements): thread t of the grid,
// counted x first, then y, then blocks, takes elements [t * VEC, t * VEC +
// VEC), and the launch covers gridDim.x * blockDim.x * blockDim.y * VEC of
// them (16-byte aligned pointers; others go element by element).
// gelu_tanh_mul and its halves form are memory-bound: gated_rows (common.cuh)
// moves 16-byte vectors, one per thread, grid (ceil(chunks / 256), 1, 1) of
// 256 threads, chunks = rows * ceil(dim / VEC) (gelu_tanh_mul: one row of n).
// Outputs may be gelu's input, gelu_tanh_mul's gate or up (in place).

namespace {

template <typename T>
__device__ __forceinline__ void gelu_each(const T* input, T* output) {
    if (blockDim.y == 1) {
        const u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x;
        output[i] = from_f<T>(GeluTanh()(to_f(input[i])));
        return;
    }
    constexpr int VEC = VecOf<T>::N;
    const u64 first = ((u64(blockIdx.x) * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x) * VEC;
    if (aligned16(input) && aligned16(output)) {
        float v[VEC];
        load_vec(input + first, v);
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = GeluTanh()(v[j]);
        store_vec(output + first, v);
    } else {
        for (u64 i = first; i < first + VEC; ++i) output[i] = from_f<T>(GeluTanh()(to_f(input[i])));
    }
}

}  // namespace

// buffer(0) input [n], (1) output [n].
extern "C" __global__ void gelu_f32(const float* input, float* output) { gelu_each(input, output); }
extern "C" __global__ void gelu_f16(const __half* input, __half* output) { gelu_each(input, output); }
extern "C" __global__ void gelu_bf16(const bf16* input, bf16* output) { gelu_each(input, output); }

// buffer(0) gate [n], (1) up [n], (2) output [n], (3) GeluTanhMulParams; the
// halves form: buffer(0) input [rows, 2 * dim], (1) output [rows, dim], (2)
// GeluTanhMulHalvesParams.
#define GELU_TANH_MUL_ENTRIES(T, TAG)                                                                                    \
    extern "C" __global__ void gelu_tanh_mul_##TAG(const T* gate, const T* up, T* output, const GeluTanhMulParams* p) {  \
        gated_pair(gate, up, output, p->n, GeluTanh());                                                                  \
    }                                                                                                                    \
    extern "C" __global__ void gelu_tanh_mul_halves_##TAG(const T* input, T* output, const GeluTanhMulHalvesParams* p) { \
        gated_halves(input, output, p->rows, p->dim, GeluTanh());                                                        \
    }
GELU_TANH_MUL_ENTRIES(float, f32)
GELU_TANH_MUL_ENTRIES(__half, f16)
GELU_TANH_MUL_ENTRIES(bf16, bf16)
