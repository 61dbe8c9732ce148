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
// 8 bf16). A thread's first 4 vectors of input, residual and weight are all
// loaded (as raw words in registers) before any arithmetic, and the outputs
// are computed from those registers after the block sum, so a row is read
// once when dim <= 4 * VEC * blockDim.x (4096 f32 / 8192 bf16 at 256
// threads); longer rows re-read the rest. Plain loads and stores
// (STREAM_BYTES = ~0 keeps the evict-first variant off: on the H200 it ran
// 16384 x 4096 f32 norm_add in 204 us against 187 us). __launch_bounds__(1024)
// keeps every kernel at <= 64 registers, so every block size launches.
// Otherwise a scalar path strides over the row.

namespace {

constexpr u64 STREAM_BYTES = ~0ull;

enum Mode { NORM_ADD = 0, RESIDUAL_NORM = 1, RESIDUAL_NORM_SCALAR = 2, NORM_ADD_SCALAR = 3 };


// 16 bytes as raw words: load_stream for data read once (evict-first),
// load_raw for data other rows read again (the weight).
__device__ __forceinline__ uint4 load_stream(const void* p, bool stream) {
    return stream ? __ldcs(reinterpret_cast<const uint4*>(p)) : *reinterpret_cast<const uint4*>(p);
}
__device__ __forceinline__ uint4 load_raw(const void* p) { return *reinterpret_cast<const uint4*>(p); }
template <typename T> __device__ __forceinline__ void unpack(const uint4& t, float (&v)[VecOf<T>::N]);
template <> __device__ __forceinline__ void unpack<float>(const uint4& t, float (&v)[4]) {
    v[0] = __uint_as_float(t.x); v[1] = __uint_as_float(t.y); v[2] = __uint_as_float(t.z); v[3] = __uint_as_float(t.w);
}
template <> __device__ __forceinline__ void unpack<__nv_bfloat16>(const uint4& t, float (&v)[8]) {
    const u32 w[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[2 * i]     = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
// stream: an evict-first store (__stcs), for outputs nothing reads back.
__device__ __forceinline__ void store_words(void* p, const uint4& w, bool stream) {
    if (stream) __stcs(reinterpret_cast<uint4*>(p), w);
    else *reinterpret_cast<uint4*>(p) = w;
}
__device__ __forceinline__ void store_vec(float* p, const float (&v)[4], bool stream) {
    store_words(p, make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3])),
                stream);
}
__device__ __forceinline__ void store_vec(__nv_bfloat16* p, const float (&v)[8], bool stream) {
    u32 w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
        w[i] = *reinterpret_cast<const u32*>(&h);
    }
    store_words(p, make_uint4(w[0], w[1], w[2], w[3]), stream);
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
    constexpr int CACHE = 4;
    // The weight's loads go out with the row's (f32 norm_add) or, where
    // registers are short, after the sum of squares (it is not needed there).
    constexpr bool W_EARLY = sizeof(T) == 4 && (MODE == NORM_ADD || MODE == NORM_ADD_SCALAR);

    const bool vec_ok = dim % VEC == 0 && aligned16(res) && aligned16(in) && aligned16(weight) &&
                        aligned16(o) && (!write_sum || aligned16(so)) &&
                        (!HAS_SCALAR || !per_elem || aligned16(scalar));
    float sq = 0.0f;
    if (vec_ok) {
        const u32 nv = dim / VEC;
        // Evict-first loads and stores of the cached vectors for tensors of
        // STREAM_BYTES and more (never, as set).
        const bool stream = u64(rows) * dim * sizeof(T) >= STREAM_BYTES;
        // The first CACHE vectors of each thread: input, residual and weight
        // loaded together (raw 16-byte words), before any arithmetic.
        uint4 ci[CACHE], cr[CACHE], cw[CACHE];
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) {
                ci[c] = load_stream(in + u64(vi) * VEC, stream);
                cr[c] = load_stream(res + u64(vi) * VEC, stream);
                if (W_EARLY) cw[c] = load_raw(weight + u64(vi) * VEC);
            }
        }
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) {
                float x[VEC];
                unpack<T>(ci[c], x);
                if (SUMS) {
                    float rv[VEC];
                    unpack<T>(cr[c], rv);
#pragma unroll
                    for (int j = 0; j < VEC; ++j) x[j] = rv[j] + x[j];
                }
#pragma unroll
                for (int j = 0; j < VEC; ++j) sq += x[j] * x[j];
                if (SUMS && VEC == 4) ci[c] = make_uint4(__float_as_uint(x[0]), __float_as_uint(x[1]),
                                                         __float_as_uint(x[2]), __float_as_uint(x[3]));
                if (!W_EARLY) cw[c] = load_raw(weight + u64(vi) * VEC);
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

        // One output vector from its input, residual and weight words.
        // summed: wi already holds residual + input (f32 sums, cached vectors).
        auto emit = [&](u32 vi, const uint4& wi, const uint4& wr, const uint4& ww, bool stream, bool summed) {
            float x[VEC], rv[VEC], w[VEC], sc[VEC], y[VEC];
            unpack<T>(wi, x);
            unpack<T>(wr, rv);
            unpack<T>(ww, w);
            if (SUMS && !summed) {
#pragma unroll
                for (int j = 0; j < VEC; ++j) x[j] = rv[j] + x[j];
            }
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
            store_vec(o + u64(vi) * VEC, y, stream);
            if (MODE == RESIDUAL_NORM && write_sum) store_vec(so + u64(vi) * VEC, x, stream);
        };
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) emit(vi, ci[c], cr[c], cw[c], stream, SUMS && VEC == 4);
        }
        for (u32 vi = tid + CACHE * bs; vi < nv; vi += bs) {
            const uint4 wi = load_raw(in + u64(vi) * VEC), wr = load_raw(res + u64(vi) * VEC),
                        ww = load_raw(weight + u64(vi) * VEC);
            emit(vi, wi, wr, ww, false, false);
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
extern "C" __global__ void __launch_bounds__(1024) fused_norm_add_f32(const float* residual, const float* input,
                                              const float* weight, float* output, const u32* dim,
                                              const u32* rows, const float* eps) {
    norm_row<float, NORM_ADD>(residual, input, weight, output, output, false, nullptr, false,
                              *dim, *rows, *eps);
}

extern "C" __global__ void __launch_bounds__(1024) fused_norm_add_bf16(const __nv_bfloat16* residual, const __nv_bfloat16* input,
                                               const __nv_bfloat16* weight, __nv_bfloat16* output,
                                               const u32* dim, const u32* rows, const float* eps) {
    norm_row<__nv_bfloat16, NORM_ADD>(residual, input, weight, output, output, false, nullptr, false,
                                      *dim, *rows, *eps);
}

// buffer(0) residual, (1) input, (2) weight, (3) normed_output, (4) sum_output
// (written only when write_sum != 0), (5) FusedResidualNormParams.
extern "C" __global__ void __launch_bounds__(1024) fused_residual_norm_f32(const float* residual, const float* input,
                                                   const float* weight, float* normed_output,
                                                   float* sum_output, const FusedResidualNormParams* p) {
    norm_row<float, RESIDUAL_NORM>(residual, input, weight, normed_output, sum_output, p->write_sum != 0u,
                                   nullptr, false, p->dim, p->rows, p->eps);
}

extern "C" __global__ void __launch_bounds__(1024) fused_residual_norm_bf16(const __nv_bfloat16* residual, const __nv_bfloat16* input,
                                                    const __nv_bfloat16* weight, __nv_bfloat16* normed_output,
                                                    __nv_bfloat16* sum_output, const FusedResidualNormParams* p) {
    norm_row<__nv_bfloat16, RESIDUAL_NORM>(residual, input, weight, normed_output, sum_output,
                                           p->write_sum != 0u, nullptr, false, p->dim, p->rows, p->eps);
}

// buffer(0) residual, (1) input, (2) weight, (3) output, (4) scalar [1] or [dim], (5) params.
extern "C" __global__ void __launch_bounds__(1024) fused_residual_norm_scalar_f32(const float* residual, const float* input,
                                                          const float* weight, float* output,
                                                          const float* scalar, const FusedResidualNormScalarF32Params* p) {
    norm_row<float, RESIDUAL_NORM_SCALAR>(residual, input, weight, output, output, false, scalar,
                                          p->scalar_is_vector != 0u, p->dim, p->rows, p->eps);
}

extern "C" __global__ void __launch_bounds__(1024) fused_norm_add_scalar_f32(const float* residual, const float* input,
                                                     const float* weight, float* output,
                                                     const float* scalar, const FusedNormAddScalarF32Params* p) {
    norm_row<float, NORM_ADD_SCALAR>(residual, input, weight, output, output, false, scalar,
                                     p->scalar_is_vector != 0u, p->dim, p->rows, p->eps);
}
