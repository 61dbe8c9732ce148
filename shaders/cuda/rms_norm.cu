// RMS normalization over rows (CUDA), entry names and bindings as
// shaders/rms_norm.metal:
//   rms_inv = 1 / sqrt(mean_j x[r, j]^2 + eps)
//   rms_norm_<t>:          y = x * rms_inv * w
//   rms_norm_one_plus_<t>: y = x * rms_inv * (1 + w)
//   rms_norm_no_scale_<t>: y = x * rms_inv
//
// One block per row: grid (rows, 1, 1), any blockDim.x in [1, 1024];
// dynamic shared memory holds one float per warp. Or rows of L lanes:
// blockDim (L, R), L a power of two up to 32, R rows a block, L * R a
// multiple of 32, grid (rows / R, 1, 1) (row_index, row_sum in common.cuh).
// The op's CUDA launch (ts/ops/rms_norm.ts rmsNormCudaLaunch) sizes either
// to the row: as few threads as hold it, 32 elements a thread, so that more
// rows are resident on an SM; fewer rows than SMs (decode) take one vector a
// thread. Squares accumulate in f32; f16 and bf16 values are rounded
// (nearest even) only when stored.
//
// When dim is a multiple of the 16-byte vector width (4 f32, 8 f16/bf16) and
// the row and weight pointers are 16-byte aligned, threads move 16-byte
// vectors and keep their first 32 / VEC vectors in registers as the raw
// words loaded (16 registers for a 16-bit type, 32 for f32), issued before
// any arithmetic (eps with dim; a thread of one vector its weights too),
// between the sum and the output: a row is read once when
// dim <= 32 * (threads of the row); longer rows re-read the rest. Otherwise a
// scalar path strides over the row (sumsq_scale_row in common.cuh). Each
// thread writes only the elements it read, after the row's sum, so y may be
// x's buffer (in place).

namespace {

enum Mode { WEIGHT = 0, ONE_PLUS = 1, NO_SCALE = 2 };

template <int MODE>
__device__ __forceinline__ float weight_factor(float w) {
    return MODE == WEIGHT ? w : MODE == ONE_PLUS ? 1.0f + w : 1.0f;
}

// The factors of a row: its weights w (as MODE uses them), N of them loaded
// as the 16-byte words they fill (N f32 weights of a 16-bit row: two words).
template <typename W, int MODE>
struct RmsFactors {
    const W* w;
    template <int N> __device__ __forceinline__ void load(u64 e, FactorWords& fw) const {
        if constexpr (MODE != NO_SCALE) {
            constexpr int WORDS = N * int(sizeof(W)) / 16;
#pragma unroll
            for (int k = 0; k < WORDS; ++k) fw.w[k] = reinterpret_cast<const uint4*>(w + e)[k];
        }
    }
    template <int N> __device__ __forceinline__ void apply(const FactorWords& fw, float (&f)[N]) const {
        if constexpr (MODE == NO_SCALE) {
#pragma unroll
            for (int j = 0; j < N; ++j) f[j] = 1.0f;
        } else {
            constexpr int WORDS = N * int(sizeof(W)) / 16, PER = VecOf<W>::N;
#pragma unroll
            for (int k = 0; k < WORDS; ++k) unpack16<W>(fw.w[k], f + k * PER);
#pragma unroll
            for (int j = 0; j < N; ++j) f[j] = weight_factor<MODE>(f[j]);
        }
    }
    __device__ __forceinline__ float operator()(u64 i) const { return MODE == NO_SCALE ? 1.0f : weight_factor<MODE>(to_f(w[i])); }
};

// eps is read with dim, before the row's loads, so that no memory latency
// follows the row's sum but the stores'.
template <typename T, typename W, int MODE>
__device__ __forceinline__ void rms_norm_row(const T* x, const W* w, T* y, const RmsNormParams* p) {
    extern __shared__ float partials[];
    const u32 dim = u32(p->dim);
    const float eps = p->eps;
    const u64 base = u64(row_index()) * dim;
    sumsq_scale_row(x + base, y + base, dim, aligned16(x + base) && aligned16(y + base) && (MODE == NO_SCALE || aligned16(w)),
                    [&](float sq) { return rsqrtf(row_sum(sq, partials) / float(dim) + eps); }, RmsFactors<W, MODE>{w});
}

}  // namespace

// buffer(0) input [rows, dim], (1) weight [dim], (2) output [rows, dim] (may
// be input), (3) RmsNormParams; threadgroup(0) one float per warp.
extern "C" __global__ void rms_norm_f32(const float* input, const float* weight, float* output, const RmsNormParams* p) {
    rms_norm_row<float, float, WEIGHT>(input, weight, output, p);
}
extern "C" __global__ void rms_norm_f16(const __half* input, const float* weight, __half* output, const RmsNormParams* p) {
    rms_norm_row<__half, float, WEIGHT>(input, weight, output, p);
}
extern "C" __global__ void rms_norm_bf16(const bf16* input, const bf16* weight, bf16* output, const RmsNormParams* p) {
    rms_norm_row<bf16, bf16, WEIGHT>(input, weight, output, p);
}

extern "C" __global__ void rms_norm_one_plus_f32(const float* input, const float* weight, float* output,
                                                 const RmsNormParams* p) {
    rms_norm_row<float, float, ONE_PLUS>(input, weight, output, p);
}
extern "C" __global__ void rms_norm_one_plus_f16(const __half* input, const float* weight, __half* output,
                                                 const RmsNormParams* p) {
    rms_norm_row<__half, float, ONE_PLUS>(input, weight, output, p);
}
extern "C" __global__ void rms_norm_one_plus_bf16(const bf16* input, const bf16* weight, bf16* output,
                                                  const RmsNormParams* p) {
    rms_norm_row<bf16, bf16, ONE_PLUS>(input, weight, output, p);
}

// buffer(0) input [rows, dim], (1) output [rows, dim] (may be input), (2) RmsNormParams.
extern "C" __global__ void rms_norm_no_scale_f32(const float* input, float* output, const RmsNormParams* p) {
    rms_norm_row<float, float, NO_SCALE>(input, input, output, p);
}
extern "C" __global__ void rms_norm_no_scale_f16(const __half* input, __half* output, const RmsNormParams* p) {
    rms_norm_row<__half, __half, NO_SCALE>(input, input, output, p);
}
extern "C" __global__ void rms_norm_no_scale_bf16(const bf16* input, bf16* output, const RmsNormParams* p) {
    rms_norm_row<bf16, bf16, NO_SCALE>(input, input, output, p);
}
