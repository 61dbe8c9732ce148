// Softmax over rows and softcap (CUDA), entry names and bindings as
// shaders/softmax.metal:
//   softmax_<t>:            y = exp(x - max) / sum exp(x - max) per row
//   scale_mask_softmax_<t>: the same over v = c(x * scale) + mask[r % seq_q],
//                           c(s) = cap * tanh(s / cap) when softcap = cap > 0;
//                           no mask when seq_q = 0; a fully masked row gives zeros
//   softcap_<t>:            y = cap * tanh(x / cap)
//
// Softmax: one block per row, grid (rows, 1, 1), any blockDim.x in [1, 1024]
// (the op uses enough threads, up to 1024, that a thread holds at most 32
// floats of the row; __launch_bounds__(1024) keeps every size launchable, at
// a few bytes of spill in the scale_mask entries); dynamic shared memory
// holds one float per warp. Or,
// for rows of at most 1024 elements, one warp per row: blockDim (32, R),
// grid (rows / R, 1, 1) (the op's CUDA launch where R in 2..8 divides rows).
// When cols is a multiple of the 16-byte vector width (4 f32, 8 f16/bf16) and
// the row pointers are 16-byte aligned, threads move 16-byte vectors and keep
// the first 32 / VEC of them (as v, then exp(v - max)) in registers: one read
// and one exp per element. Elements past those (rows longer than 32 floats a
// thread) and the scalar path (other rows) fold into a running maximum and a
// sum rescaled to it (online softmax), then are read once more for the output. Each thread writes only the elements it read, after
// the block's reductions, so y may be x's buffer (in place).
//
// softcap: each thread takes one 16-byte vector (VEC elements) of the array,
// grid (ceil(n / (256 * VEC)), 1, 1) of 256 threads; the tail and unaligned
// arrays go element by element.

namespace {

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

struct RowArgs {
    u32 cols;
    u32 seq_q;
    float scale;
    float cap;
};

__device__ __forceinline__ float transform(float x, const bf16* mr, u64 i, const RowArgs& a) {
    float v = x * a.scale;
    if (a.cap > 0.0f) v = a.cap * tanhf(v / a.cap);
    if (mr != nullptr) v += __bfloat162float(mr[i]);
    return v;
}

// The running (max, sum of exp(v - max)) of a thread, with v folded in.
__device__ __forceinline__ void online(float v, float& m, float& s) {
    if (v > m) {
        s = s * expf(m - v) + 1.0f;
        m = v;
    } else if (v != neg_inf()) {
        s += expf(v - m);
    }
}

template <typename T>
__device__ __forceinline__ void softmax_row(const T* x, T* y, const bf16* mask, const RowArgs a) {
    extern __shared__ float partials[];
    const u32 cols = a.cols;
    const u32 row = row_index();
    const u64 base = u64(row) * cols;
    const T* xr = x + base;
    T* yr = y + base;
    const bf16* mr = a.seq_q == 0u ? nullptr : mask + u64(row % a.seq_q) * cols;
    const u32 tid = threadIdx.x, bs = blockDim.x;
    constexpr int VEC = VecOf<T>::N;
    constexpr int CACHE = 32 / VEC;

    // mc: the maximum of the v held in registers; (mu, su): the running
    // maximum and rescaled sum of the others.
    float mc = neg_inf(), mu = neg_inf(), su = 0.0f;
    const bool vec = cols % VEC == 0 && aligned16(xr) && aligned16(yr);
    const u32 nv = vec ? cols / VEC : 0u;
    float vc[CACHE][VEC];
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
        const u32 vi = tid + u32(c) * bs;
        if (vi < nv) {
            load_vec(xr + u64(vi) * VEC, vc[c]);
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                vc[c][j] = transform(vc[c][j], mr, u64(vi) * VEC + j, a);
                mc = fmaxf(mc, vc[c][j]);
            }
        }
    }
    if (vec) {
        for (u32 vi = tid + CACHE * bs; vi < nv; vi += bs) {
            float v[VEC];
            load_vec(xr + u64(vi) * VEC, v);
#pragma unroll
            for (int j = 0; j < VEC; ++j) online(transform(v[j], mr, u64(vi) * VEC + j, a), mu, su);
        }
    } else {
        for (u32 i = tid; i < cols; i += bs) online(transform(to_f(xr[i]), mr, i, a), mu, su);
    }
    const float mx = row_max(fmaxf(mc, mu), partials);
    __syncthreads();
    const bool empty = mx == neg_inf();
    // exp(v - mx) of the held v, kept for the output: one exp per element.
    float s = mu == neg_inf() ? 0.0f : su * expf(mu - mx);
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
        const u32 vi = tid + u32(c) * bs;
        if (vi < nv) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                vc[c][j] = empty ? 0.0f : expf(vc[c][j] - mx);
                s += vc[c][j];
            }
        }
    }
    const float total = row_sum(s, partials);
    const float inv = empty ? 0.0f : 1.0f / total;
    auto prob = [&](float v) { return empty ? 0.0f : expf(v - mx) * inv; };
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
        const u32 vi = tid + u32(c) * bs;
        if (vi < nv) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) vc[c][j] *= inv;
            store_vec(yr + u64(vi) * VEC, vc[c]);
        }
    }
    if (vec) {
        for (u32 vi = tid + CACHE * bs; vi < nv; vi += bs) {
            float v[VEC];
            load_vec(xr + u64(vi) * VEC, v);
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[j] = prob(transform(v[j], mr, u64(vi) * VEC + j, a));
            store_vec(yr + u64(vi) * VEC, v);
        }
    } else {
        for (u32 i = tid; i < cols; i += bs) yr[i] = from_f<T>(prob(transform(to_f(xr[i]), mr, i, a)));
    }
}

template <typename T>
__device__ __forceinline__ void softcap_vec(const T* x, T* y, const SoftcapParams* p) {
    constexpr int VEC = VecOf<T>::N;
    const u64 n = p->n_elements;
    const float cap = p->cap;
    const u64 first = (u64(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
    if (first >= n) return;
    if (first + VEC <= n && aligned16(x + first) && aligned16(y + first)) {
        float v[VEC];
        load_vec(x + first, v);
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = cap * tanhf(v[j] / cap);
        store_vec(y + first, v);
    } else {
        for (u64 i = first; i < n && i < first + VEC; ++i) y[i] = from_f<T>(cap * tanhf(to_f(x[i]) / cap));
    }
}

}  // namespace

// buffer(0) input [rows, cols], (1) output [rows, cols] (may be input),
// (2) SoftmaxParams; threadgroup(0) one float per warp.
extern "C" __global__ void __launch_bounds__(1024) softmax_f32(const float* input, float* output, const SoftmaxParams* p) {
    softmax_row<float>(input, output, nullptr, RowArgs{u32(p->cols), 0u, 1.0f, 0.0f});
}
extern "C" __global__ void __launch_bounds__(1024) softmax_f16(const __half* input, __half* output, const SoftmaxParams* p) {
    softmax_row<__half>(input, output, nullptr, RowArgs{u32(p->cols), 0u, 1.0f, 0.0f});
}
extern "C" __global__ void __launch_bounds__(1024) softmax_bf16(const bf16* input, bf16* output, const SoftmaxParams* p) {
    softmax_row<bf16>(input, output, nullptr, RowArgs{u32(p->cols), 0u, 1.0f, 0.0f});
}

// buffer(0) input, (1) output (may be input), (2) mask [seq_q, cols] bf16
// (unread when seq_q = 0), (3) ScaleMaskSoftmaxParams.
extern "C" __global__ void __launch_bounds__(1024) scale_mask_softmax_f32(const float* input, float* output, const bf16* mask,
                                                  const ScaleMaskSoftmaxParams* p) {
    softmax_row<float>(input, output, mask, RowArgs{p->cols, p->seq_q, p->scale, p->softcap});
}
extern "C" __global__ void __launch_bounds__(1024) scale_mask_softmax_f16(const __half* input, __half* output, const bf16* mask,
                                                  const ScaleMaskSoftmaxParams* p) {
    softmax_row<__half>(input, output, mask, RowArgs{p->cols, p->seq_q, p->scale, p->softcap});
}
extern "C" __global__ void __launch_bounds__(1024) scale_mask_softmax_bf16(const bf16* input, bf16* output, const bf16* mask,
                                                   const ScaleMaskSoftmaxParams* p) {
    softmax_row<bf16>(input, output, mask, RowArgs{p->cols, p->seq_q, p->scale, p->softcap});
}

// buffer(0) input [n], (1) output [n] (may be input), (2) SoftcapParams.
extern "C" __global__ void softcap_f32(const float* input, float* output, const SoftcapParams* p) {
    softcap_vec<float>(input, output, p);
}
extern "C" __global__ void softcap_f16(const __half* input, __half* output, const SoftcapParams* p) {
    softcap_vec<__half>(input, output, p);
}
extern "C" __global__ void softcap_bf16(const bf16* input, bf16* output, const SoftcapParams* p) {
    softcap_vec<bf16>(input, output, p);
}
