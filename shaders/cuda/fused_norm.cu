// Fused RMS norm + residual kernels (CUDA), entry names and bindings as
// shaders/fused_norm.metal:
//   rms_inv(x) = 1 / sqrt(mean(x^2) + eps)
//   fused_norm_add_*:            out = residual + input * rms_inv(input) * weight
//   fused_residual_norm_*:       s = residual + input; normed = s * rms_inv(s) * weight;
//                                sum_output = s when write_sum != 0
//   fused_residual_norm_scalar_f32: out = s * rms_inv(s) * weight * scalar[i or 0]
//   fused_norm_add_scalar_f32:   out = (residual + input * rms_inv(input) * weight) * scalar[i or 0]
//   fused_norm_add_norms_f32:    h = (residual + input * rms_inv(input) * weight) [* scalar[i or 0]];
//                                out = h; normed_j = h * rms_inv(h) [* norm_weight_j], j < norms
//   fused_norm_moe_sum_*:        e = sum_k expert_w[k] y_expert[k];
//                                out = input * rms_inv(input) * weight + e * rms_inv(e) * moe_weight
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

// ---- the norms after a residual update; the two feed-forward branches joined ----

// Both kernels keep a thread's first NC 4-float vectors of each row they
// read in registers (every row of up to 4 * NC * blockDim.x elements: 3072
// at the op's 256 threads, Gemma 4's 2816 among them), all loads issued
// before the first reduction, and go back to memory for the rest (normed
// outputs from the thread's own stores of output). A per-column scalar is
// read where it is used. __launch_bounds__(256): the op launches at most 256
// threads (ts/ops/fused_norm.ts), and the held rows take more than 64
// registers. Rows of a dim not a multiple of 4, or not 16-byte aligned, take
// a scalar path of the same arithmetic.
constexpr int NC = 3;

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void st4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ float dot4(float4 a) { return a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w; }
__device__ __forceinline__ float4 mul4(float4 a, float s) { return make_float4(a.x * s, a.y * s, a.z * s, a.w * s); }
__device__ __forceinline__ float4 mul4(float4 a, float4 b) { return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w); }
// res + x * r * w, elementwise (Metal's order: (x * r) * w, then the add).
__device__ __forceinline__ float4 norm_add4(float4 res, float4 x, float r, float4 w) {
    return make_float4(res.x + x.x * r * w.x, res.y + x.y * r * w.y, res.z + x.z * r * w.z, res.w + x.w * r * w.w);
}

__device__ __forceinline__ void norm_add_norms_row(const float* residual, const float* input, const float* weight,
                                                   float* output, const float* scalar,
                                                   const FusedNormAddNormsF32Params* p, const float* const (&nw)[3],
                                                   float* const (&no)[3]) {
    extern __shared__ float partials[];
    const u32 row = blockIdx.x;
    if (row >= p->rows) return;
    const u32 dim = p->dim, mode = p->scalar_mode, norms = p->norms, wt = p->weighted;
    const float eps = p->eps;
    const u64 base = u64(row) * dim;
    const float* res = residual + base;
    const float* in = input + base;
    float* o = output + base;
    float* out_j[3] = {no[0] + base, no[1] + base, no[2] + base};
    const u32 tid = threadIdx.x, bs = blockDim.x;
    bool vec = dim % 4 == 0 && aligned16(res) && aligned16(in) && aligned16(weight) && aligned16(o) &&
               (mode != 2u || aligned16(scalar));
    for (u32 j = 0; j < norms; ++j) vec = vec && aligned16(out_j[j]) && ((wt >> j & 1u) == 0u || aligned16(nw[j]));
    float sq = 0.0f;
    if (vec) {
        const u32 nv = dim / 4;
        const float s0 = mode == 1u ? scalar[0] : 1.0f;
        float4 ci[NC], cr[NC], cw[NC], cn[3][NC] = {};
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) {
                ci[c] = ld4(in + 4 * u64(vi));
                cr[c] = ld4(res + 4 * u64(vi));
                cw[c] = ld4(weight + 4 * u64(vi));
#pragma unroll
                for (int j = 0; j < 3; ++j)
                    if (u32(j) < norms && (wt >> j & 1u) != 0u) cn[j][c] = ld4(nw[j] + 4 * u64(vi));
            }
        }
#pragma unroll
        for (int c = 0; c < NC; ++c)
            if (tid + u32(c) * bs < nv) sq += dot4(ci[c]);
        for (u32 vi = tid + NC * bs; vi < nv; vi += bs) sq += dot4(ld4(in + 4 * u64(vi)));
        const float r = rsqrtf(block_sum(sq, partials) / float(dim) + eps);
        // h into ci (held vectors) and output.
        auto h_of = [&](float4 res4, float4 x4, float4 w4, float4 s4) {
            float4 h = norm_add4(res4, x4, r, w4);
            if (mode == 2u) h = mul4(h, s4);
            else if (mode == 1u) h = mul4(h, s0);
            return h;
        };
        float sq2 = 0.0f;
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) {
                const float4 s4 = mode == 2u ? ld4(scalar + 4 * u64(vi)) : make_float4(0.f, 0.f, 0.f, 0.f);
                ci[c] = h_of(cr[c], ci[c], cw[c], s4);
                st4(o + 4 * u64(vi), ci[c]);
                sq2 += dot4(ci[c]);
            }
        }
        for (u32 vi = tid + NC * bs; vi < nv; vi += bs) {
            const float4 s4 = mode == 2u ? ld4(scalar + 4 * u64(vi)) : make_float4(0.f, 0.f, 0.f, 0.f);
            const float4 h = h_of(ld4(res + 4 * u64(vi)), ld4(in + 4 * u64(vi)), ld4(weight + 4 * u64(vi)), s4);
            st4(o + 4 * u64(vi), h);
            sq2 += dot4(h);
        }
        if (norms == 0u) return;
        __syncthreads();  // partials: the first sum's, read by every warp
        const float r2 = rsqrtf(block_sum(sq2, partials) / float(dim) + eps);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) {
                const float4 v = mul4(ci[c], r2);
#pragma unroll
                for (int j = 0; j < 3; ++j)
                    if (u32(j) < norms) st4(out_j[j] + 4 * u64(vi), (wt >> j & 1u) != 0u ? mul4(v, cn[j][c]) : v);
            }
        }
        for (u32 vi = tid + NC * bs; vi < nv; vi += bs) {
            const float4 v = mul4(ld4(o + 4 * u64(vi)), r2);
            for (u32 j = 0; j < norms; ++j)
                st4(out_j[j] + 4 * u64(vi), (wt >> j & 1u) != 0u ? mul4(v, ld4(nw[j] + 4 * u64(vi))) : v);
        }
    } else {
        for (u32 i = tid; i < dim; i += bs) sq += in[i] * in[i];
        const float r = rsqrtf(block_sum(sq, partials) / float(dim) + eps);
        float sq2 = 0.0f;
        for (u32 i = tid; i < dim; i += bs) {
            float h = res[i] + in[i] * r * weight[i];
            if (mode != 0u) h *= mode == 2u ? scalar[i] : scalar[0];
            o[i] = h;
            sq2 += h * h;
        }
        if (norms == 0u) return;
        __syncthreads();
        const float r2 = rsqrtf(block_sum(sq2, partials) / float(dim) + eps);
        for (u32 i = tid; i < dim; i += bs) {
            const float v = o[i] * r2;
            for (u32 j = 0; j < norms; ++j) out_j[j][i] = (wt >> j & 1u) != 0u ? v * nw[j][i] : v;
        }
    }
}

// e = sum_k expert_w[k] y_expert[k] at 4 elements from vi (slots in order, fmaf as Metal's fma).
template <typename E>
__device__ __forceinline__ float4 moe_sum4(const float* w, const E* ye, u32 top_k, u32 dim, u32 vi) {
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    weighted_rows(w, ye + 4 * u64(vi), dim, top_k, acc);
    return make_float4(acc[0], acc[1], acc[2], acc[3]);
}

template <typename E>
__device__ __forceinline__ void norm_moe_sum_row(const float* input, const float* weight, const float* expert_w,
                                                 const E* y_expert, const float* moe_weight, float* output,
                                                 const FusedNormMoeSumParams* p) {
    extern __shared__ float partials[];
    const u32 row = blockIdx.x;
    if (row >= p->rows) return;
    const u32 dim = p->dim, K = p->top_k;
    const float eps = p->eps;
    const u64 base = u64(row) * dim;
    const float* in = input + base;
    const float* w = expert_w + u64(row) * K;
    const E* ye = y_expert + base * K;
    float* o = output + base;
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const bool vec = dim % 4 == 0 && aligned16(in) && aligned16(weight) && aligned16(y_expert) &&
                     aligned16(moe_weight) && aligned16(o);
    float sx = 0.0f, se = 0.0f;
    if (vec) {
        const u32 nv = dim / 4;
        float4 cx[NC], ce[NC], cw[NC], cm[NC];
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) {
                cx[c] = ld4(in + 4 * u64(vi));
                cw[c] = ld4(weight + 4 * u64(vi));
                cm[c] = ld4(moe_weight + 4 * u64(vi));
                ce[c] = moe_sum4(w, ye, K, dim, vi);
                sx += dot4(cx[c]);
                se += dot4(ce[c]);
            }
        }
        for (u32 vi = tid + NC * bs; vi < nv; vi += bs) {
            sx += dot4(ld4(in + 4 * u64(vi)));
            se += dot4(moe_sum4(w, ye, K, dim, vi));
        }
        const float rx = rsqrtf(block_sum(sx, partials) / float(dim) + eps);
        __syncthreads();
        const float re = rsqrtf(block_sum(se, partials) / float(dim) + eps);
        auto out4 = [&](float4 x, float4 wv, float4 e, float4 m) {
            return make_float4(x.x * rx * wv.x + e.x * re * m.x, x.y * rx * wv.y + e.y * re * m.y,
                               x.z * rx * wv.z + e.z * re * m.z, x.w * rx * wv.w + e.w * re * m.w);
        };
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) st4(o + 4 * u64(vi), out4(cx[c], cw[c], ce[c], cm[c]));
        }
        for (u32 vi = tid + NC * bs; vi < nv; vi += bs) {
            const float4 x = ld4(in + 4 * u64(vi)), e = moe_sum4(w, ye, K, dim, vi);
            st4(o + 4 * u64(vi), out4(x, ld4(weight + 4 * u64(vi)), e, ld4(moe_weight + 4 * u64(vi))));
        }
    } else {
        auto e_at = [&](u32 i) {
            float e = 0.0f;
            for (u32 k = 0; k < K; ++k) e = fmaf(w[k], to_f(ye[u64(k) * dim + i]), e);
            return e;
        };
        for (u32 i = tid; i < dim; i += bs) {
            const float e = e_at(i);
            sx += in[i] * in[i];
            se += e * e;
        }
        const float rx = rsqrtf(block_sum(sx, partials) / float(dim) + eps);
        __syncthreads();
        const float re = rsqrtf(block_sum(se, partials) / float(dim) + eps);
        for (u32 i = tid; i < dim; i += bs) o[i] = in[i] * rx * weight[i] + e_at(i) * re * moe_weight[i];
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

// buffer(0) residual, (1) input, (2) weight [dim], (3) output, (4) scalar [1] or [dim],
// (5) params, (6, 8, 10) norm_weight_j [dim], (7, 9, 11) normed_j.
extern "C" __global__ void __launch_bounds__(256) fused_norm_add_norms_f32(
    const float* residual, const float* input, const float* weight, float* output, const float* scalar,
    const FusedNormAddNormsF32Params* p, const float* norm_weight_0, float* normed_0, const float* norm_weight_1,
    float* normed_1, const float* norm_weight_2, float* normed_2) {
    const float* const nw[3] = {norm_weight_0, norm_weight_1, norm_weight_2};
    float* const no[3] = {normed_0, normed_1, normed_2};
    norm_add_norms_row(residual, input, weight, output, scalar, p, nw, no);
}

// buffer(0) input, (1) weight [dim], (2) expert_w [rows*top_k], (3) y_expert
// [rows*top_k*dim] (f32 or bf16), (4) moe_weight [dim], (5) output, (6) params.
extern "C" __global__ void __launch_bounds__(256) fused_norm_moe_sum_f32(
    const float* input, const float* weight, const float* expert_w, const float* y_expert, const float* moe_weight,
    float* output, const FusedNormMoeSumParams* p) {
    norm_moe_sum_row(input, weight, expert_w, y_expert, moe_weight, output, p);
}

extern "C" __global__ void __launch_bounds__(256) fused_norm_moe_sum_bf16_input(
    const float* input, const float* weight, const float* expert_w, const __nv_bfloat16* y_expert,
    const float* moe_weight, float* output, const FusedNormMoeSumParams* p) {
    norm_moe_sum_row(input, weight, expert_w, y_expert, moe_weight, output, p);
}
