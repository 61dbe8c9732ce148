// Fused RMS norm + residual kernels (CUDA), entry names and bindings as
// shaders/fused_norm.metal:
//   rms_inv(x) = 1 / sqrt(mean(x^2) + eps)
//   fused_norm_add_*:            out = residual + input * rms_inv(input) * weight
//   fused_residual_norm_*:       s = residual + input; normed = s * rms_inv(s) * weight;
//                                sum_output = s when write_sum != 0
//   fused_residual_norm_scalar_f32: out = s * rms_inv(s) * weight * scalar[i or 0]
//   fused_norm_add_scalar_f32:   out = (residual + input * rms_inv(input) * weight) * scalar[i or 0]
//
// One block per row (grid (rows, 1, 1)); any blockDim.x in [1, 1024] (the op
// uses min(256, nextPow2(dim))); dynamic shared memory holds one float per
// warp (the reduction partials). All arithmetic is f32; bf16 values are
// rounded (nearest even) only when stored.
//
// When dim is a multiple of the 16-byte vector width and every pointer the
// row touches is 16-byte aligned, threads move 16-byte vectors (4 f32 or
// 8 bf16) and keep the first CACHE vectors of the normalized values in
// registers between the sum-of-squares pass and the output pass, so a row is
// read from memory once when dim <= 32 * blockDim.x; longer rows re-read the
// rest. Otherwise a scalar path strides over the row.

#include <cuda_bf16.h>

typedef unsigned int u32;
typedef unsigned long long u64;

struct FusedResidualNormParams {
    u32   dim;
    u32   rows;
    float eps;
    u32   write_sum;
};

struct FusedScalarParams {  // FusedResidualNormScalarF32Params and FusedNormAddScalarF32Params
    u32   dim;
    u32   rows;
    float eps;
    u32   scalar_is_vector;
};

namespace {

enum Mode { NORM_ADD = 0, RESIDUAL_NORM = 1, RESIDUAL_NORM_SCALAR = 2, NORM_ADD_SCALAR = 3 };

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <typename T> struct VecOf;
template <> struct VecOf<float> { static constexpr int N = 4; };
template <> struct VecOf<__nv_bfloat16> { static constexpr int N = 8; };

__device__ __forceinline__ void load_vec(const float* p, float (&v)[4]) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
}
__device__ __forceinline__ void load_vec(const __nv_bfloat16* p, float (&v)[8]) {
    const uint4 t = *reinterpret_cast<const uint4*>(p);
    const u32 w[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[2 * i]     = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ void store_vec(float* p, const float (&v)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void store_vec(__nv_bfloat16* p, const float (&v)[8]) {
    u32 w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
        w[i] = *reinterpret_cast<const u32*>(&h);
    }
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ bool aligned16(const void* p) {
    return (reinterpret_cast<u64>(p) & 15u) == 0;
}

// Sum over the block, returned to every thread; partials holds one float per
// warp and is written once per kernel. A last, partial warp reduces only its
// existing lanes.
__device__ __forceinline__ float block_sum(float v, float* partials) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 lane = tid & 31u, warp = tid >> 5;
    const u32 n = min(32u, bs - (warp << 5));
    const u32 mask = n == 32u ? 0xffffffffu : ((1u << n) - 1u);
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) {
        const float other = __shfl_down_sync(mask, v, o);
        if (lane + o < n) v += other;
    }
    if (lane == 0) partials[warp] = v;
    __syncthreads();
    const u32 nw = (bs + 31u) >> 5;
    float total = 0.0f;
    for (u32 i = 0; i < nw; ++i) total += partials[i];
    return total;
}

// Output of one element given x (the normalized value: input, or residual + input).
template <typename T, int MODE>
__device__ __forceinline__ float out_value(float x, float res, float w, float sc, float r) {
    if (MODE == NORM_ADD) return res + x * r * w;
    if (MODE == RESIDUAL_NORM) return x * r * w;
    if (MODE == RESIDUAL_NORM_SCALAR) return x * r * w * sc;
    return (res + x * r * w) * sc;
}

template <typename T, int MODE>
__device__ __forceinline__ void norm_row(const T* residual, const T* input, const T* weight, T* out,
                                         T* sum_out, bool write_sum, const float* scalar, bool per_elem,
                                         u32 dim, u32 rows, float eps) {
    extern __shared__ float partials[];
    const u32 row = blockIdx.x;
    if (row >= rows) return;
    constexpr bool SUMS = MODE == RESIDUAL_NORM || MODE == RESIDUAL_NORM_SCALAR;  // x = residual + input
    constexpr bool HAS_SCALAR = MODE == RESIDUAL_NORM_SCALAR || MODE == NORM_ADD_SCALAR;
    const u64 base = u64(row) * dim;
    const T* res = residual + base;
    const T* in = input + base;
    T* o = out + base;
    T* so = sum_out + base;
    const u32 tid = threadIdx.x, bs = blockDim.x;
    constexpr int VEC = VecOf<T>::N;
    constexpr int CACHE = 32 / VEC;

    const bool vec_ok = dim % VEC == 0 && aligned16(res) && aligned16(in) && aligned16(weight) &&
                        aligned16(o) && (!write_sum || aligned16(so)) &&
                        (!HAS_SCALAR || !per_elem || aligned16(scalar));
    float sq = 0.0f;
    if (vec_ok) {
        const u32 nv = dim / VEC;
        float xc[CACHE][VEC];
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) {
                load_vec(in + u64(vi) * VEC, xc[c]);
                if (SUMS) {
                    float rv[VEC];
                    load_vec(res + u64(vi) * VEC, rv);
#pragma unroll
                    for (int j = 0; j < VEC; ++j) xc[c][j] = rv[j] + xc[c][j];
                }
#pragma unroll
                for (int j = 0; j < VEC; ++j) sq += xc[c][j] * xc[c][j];
            }
        }
        for (u32 vi = tid + CACHE * bs; vi < nv; vi += bs) {
            float x[VEC];
            load_vec(in + u64(vi) * VEC, x);
            if (SUMS) {
                float rv[VEC];
                load_vec(res + u64(vi) * VEC, rv);
#pragma unroll
                for (int j = 0; j < VEC; ++j) x[j] = rv[j] + x[j];
            }
#pragma unroll
            for (int j = 0; j < VEC; ++j) sq += x[j] * x[j];
        }
        const float r = rsqrtf(block_sum(sq, partials) / float(dim) + eps);

        auto emit = [&](u32 vi, const float (&x)[VEC]) {
            float w[VEC], rv[VEC], sc[VEC], y[VEC];
            load_vec(weight + u64(vi) * VEC, w);
            if (!SUMS) load_vec(res + u64(vi) * VEC, rv);
            if (HAS_SCALAR) {
                if (per_elem) {
                    float t[4];
#pragma unroll
                    for (int j = 0; j < VEC; j += 4) {
                        load_vec(scalar + u64(vi) * VEC + j, t);
#pragma unroll
                        for (int q = 0; q < 4 && j + q < VEC; ++q) sc[j + q] = t[q];
                    }
                } else {
                    const float s0 = scalar[0];
#pragma unroll
                    for (int j = 0; j < VEC; ++j) sc[j] = s0;
                }
            }
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                y[j] = out_value<T, MODE>(x[j], SUMS ? 0.0f : rv[j], w[j], HAS_SCALAR ? sc[j] : 1.0f, r);
            }
            store_vec(o + u64(vi) * VEC, y);
            if (MODE == RESIDUAL_NORM && write_sum) store_vec(so + u64(vi) * VEC, x);
        };
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) emit(vi, xc[c]);
        }
        for (u32 vi = tid + CACHE * bs; vi < nv; vi += bs) {
            float x[VEC];
            load_vec(in + u64(vi) * VEC, x);
            if (SUMS) {
                float rv[VEC];
                load_vec(res + u64(vi) * VEC, rv);
#pragma unroll
                for (int j = 0; j < VEC; ++j) x[j] = rv[j] + x[j];
            }
            emit(vi, x);
        }
    } else {
        for (u32 i = tid; i < dim; i += bs) {
            const float x = SUMS ? to_f(res[i]) + to_f(in[i]) : to_f(in[i]);
            sq += x * x;
        }
        const float r = rsqrtf(block_sum(sq, partials) / float(dim) + eps);
        for (u32 i = tid; i < dim; i += bs) {
            const float x = SUMS ? to_f(res[i]) + to_f(in[i]) : to_f(in[i]);
            const float sc = HAS_SCALAR ? (per_elem ? scalar[i] : scalar[0]) : 1.0f;
            o[i] = from_f<T>(out_value<T, MODE>(x, SUMS ? 0.0f : to_f(res[i]), to_f(weight[i]), sc, r));
            if (MODE == RESIDUAL_NORM && write_sum) so[i] = from_f<T>(x);
        }
    }
}

}  // namespace

// buffer(0) residual [rows*dim], (1) input, (2) weight [dim], (3) output,
// (4) dim u32, (5) rows u32, (6) eps f32 (each bound alone).
extern "C" __global__ void fused_norm_add_f32(const float* residual, const float* input,
                                              const float* weight, float* output, const u32* dim,
                                              const u32* rows, const float* eps) {
    norm_row<float, NORM_ADD>(residual, input, weight, output, output, false, nullptr, false,
                              *dim, *rows, *eps);
}

extern "C" __global__ void fused_norm_add_bf16(const __nv_bfloat16* residual, const __nv_bfloat16* input,
                                               const __nv_bfloat16* weight, __nv_bfloat16* output,
                                               const u32* dim, const u32* rows, const float* eps) {
    norm_row<__nv_bfloat16, NORM_ADD>(residual, input, weight, output, output, false, nullptr, false,
                                      *dim, *rows, *eps);
}

// buffer(0) residual, (1) input, (2) weight, (3) normed_output, (4) sum_output
// (written only when write_sum != 0), (5) FusedResidualNormParams.
extern "C" __global__ void fused_residual_norm_f32(const float* residual, const float* input,
                                                   const float* weight, float* normed_output,
                                                   float* sum_output, const FusedResidualNormParams* p) {
    norm_row<float, RESIDUAL_NORM>(residual, input, weight, normed_output, sum_output, p->write_sum != 0u,
                                   nullptr, false, p->dim, p->rows, p->eps);
}

extern "C" __global__ void fused_residual_norm_bf16(const __nv_bfloat16* residual, const __nv_bfloat16* input,
                                                    const __nv_bfloat16* weight, __nv_bfloat16* normed_output,
                                                    __nv_bfloat16* sum_output, const FusedResidualNormParams* p) {
    norm_row<__nv_bfloat16, RESIDUAL_NORM>(residual, input, weight, normed_output, sum_output,
                                           p->write_sum != 0u, nullptr, false, p->dim, p->rows, p->eps);
}

// buffer(0) residual, (1) input, (2) weight, (3) output, (4) scalar [1] or [dim], (5) params.
extern "C" __global__ void fused_residual_norm_scalar_f32(const float* residual, const float* input,
                                                          const float* weight, float* output,
                                                          const float* scalar, const FusedScalarParams* p) {
    norm_row<float, RESIDUAL_NORM_SCALAR>(residual, input, weight, output, output, false, scalar,
                                          p->scalar_is_vector != 0u, p->dim, p->rows, p->eps);
}

extern "C" __global__ void fused_norm_add_scalar_f32(const float* residual, const float* input,
                                                     const float* weight, float* output,
                                                     const float* scalar, const FusedScalarParams* p) {
    norm_row<float, NORM_ADD_SCALAR>(residual, input, weight, output, output, false, scalar,
                                     p->scalar_is_vector != 0u, p->dim, p->rows, p->eps);
}
