// Softmax over rows and softcap (CUDA), entry names and bindings as
// shaders/softmax.metal:
//   softmax_<t>:            y = exp(x - max) / sum exp(x - max) per row
//   scale_mask_softmax_<t>: the same over v = c(x * scale) + mask[r % seq_q],
//                           c(s) = cap * tanh(s / cap) when softcap = cap > 0;
//                           no mask when seq_q = 0; a fully masked row gives zeros
//   softmax_blocks_<t>,     the two-pass form of either: per slice of a row
//   softmax_finish_<t>:     its max and sum of exp(v - max), then each slice
//                           normalized by the row's (max, sum) merged from those
//   softcap_<t>:            y = cap * tanh(x / cap)
//
// One pass: one block per row, grid (rows, 1, 1), any blockDim.x in [1, 1024];
// dynamic shared memory holds one float per warp. Or rows of L lanes:
// blockDim (L, R), grid (rows / R, 1, 1) (common.cuh row_index); rows of
// several heads over one mask go query-major (mask_major_row). The op's
// launch is sized to the row (ts/launch.ts rowLaunch): as few threads as
// hold it at SOFTMAX_HELD elements a thread (32 softmax, 16
// scale_mask_softmax), or one vector a thread for fewer rows than SMs. When
// cols is a multiple of the 16-byte vector width (4 f32, 8 f16/bf16) and the
// row pointers are 16-byte aligned, threads issue their first SOFTMAX_HELD /
// VEC vector loads (and scale_mask_softmax their mask words) before any
// arithmetic and hold them, then v (x, or scale_mask_softmax's scaled,
// capped and masked value; the tanh skipped for a vector masked throughout),
// then exp(v - max) as floats: one exp an element (ex2.approx, two
// instructions), the special unit's share of the arithmetic halved against
// holding the raw words and taking the exp again for the output. The mask
// moves as 8- or 16-byte vectors beside x. Rows of vectors longer than the
// block holds hold nothing: they are streamed twice, 4 to 8 vectors of a thread in
// flight (LONG_ROW_LOADS), once for the row's max and sum (online softmax:
// a running maximum and a sum rescaled to it), once for the output. The
// scalar path (other rows) streams element by element, online too. Each
// thread writes only the elements it read, after the row's reductions, so
// y may be x's buffer (in place).
//
// Two passes: grid (n_blocks, rows, 1) of any blockDim.x (the op uses 256),
// dynamic shared memory of one float per warp. softmax_blocks_<t> writes
// partials[row, slice] = (m, s), the slice's max and sum of exp(v - m);
// softmax_finish_<t> issues its slice's first loads, then every warp
// merges the row's n_blocks pairs itself (shuffles, no barrier), and writes
// the slice, visiting the slices in the reverse order of the first pass,
// so the ones read last there (the likeliest still in L2) are read first.
// Both stream their slice with ROW_LOADS vector loads of a thread (and of
// the mask) in flight at once; a vector masked throughout skips the scale
// and the tanh.
//
// exp is __expf (ex2.approx of x * log2 e: a relative error of about 2 ulp
// plus |x| 2^-24, a few 1e-7 for the probabilities above 1e-3 of the
// largest), the cap's division a multiply by its reciprocal; tanhf is
// CUDA's accurate one, but softcap_bf16's tanh.approx (under half a bf16
// ulp).
//
// softcap: each thread takes one 16-byte vector (VEC elements) of the array,
// grid (ceil(n / (256 * VEC)), 1, 1) of 256 threads; the tail and unaligned
// arrays go element by element. x / cap is x times 1 / cap.

namespace {

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// v of an element from x and its mask value: x * scale, capped
// (cap * tanh(x * scale / cap), the division a multiply by 1 / cap), masked.
struct Transform {
    float scale;
    float cap;
    float inv_cap;
    __device__ __forceinline__ float operator()(float x, float m) const {
        float v = x * scale;
        if (cap > 0.0f) v = cap * tanhf(v * inv_cap);
        return v + m;
    }
};

__device__ __forceinline__ Transform transform_of(float scale, float cap) {
    return Transform{scale, cap, cap > 0.0f ? 1.0f / cap : 0.0f};
}

// The VEC bf16 mask values of one vector of x, as loaded: 16 bytes for a
// 16-bit x (8 elements), 8 for f32 (4); aligned to their size.
template <int VEC> struct MaskWords { uint4 w; };
template <> struct MaskWords<4> { uint2 w; };

template <int VEC>
__device__ __forceinline__ MaskWords<VEC> load_mask(const bf16* mr, u64 at) {
    MaskWords<VEC> r;
    if constexpr (VEC == 8) {
        r.w = mr == nullptr ? make_uint4(0u, 0u, 0u, 0u) : *reinterpret_cast<const uint4*>(mr + at);
    } else {
        static_assert(VEC == 4, "f32 vectors");
        r.w = mr == nullptr ? make_uint2(0u, 0u) : *reinterpret_cast<const uint2*>(mr + at);
    }
    return r;
}

// Those words as floats (a bf16 is the high half of its f32).
__device__ __forceinline__ void mask_values(MaskWords<8> t, float (&m)[8]) { unpack16<bf16>(t.w, m); }
__device__ __forceinline__ void mask_values(MaskWords<4> t, float (&m)[4]) {
    m[0] = __uint_as_float(t.w.x << 16);
    m[1] = __uint_as_float(t.w.x & 0xffff0000u);
    m[2] = __uint_as_float(t.w.y << 16);
    m[3] = __uint_as_float(t.w.y & 0xffff0000u);
}

// v of one vector's elements from x and the mask values. A vector masked
// throughout (-inf: the masked half of a causal row) is -inf without the
// scale and the tanh: a masked element's x is never used.
template <int VEC, bool SKIP = true>
__device__ __forceinline__ void transform_vec(const Transform& f, const float (&x)[VEC], const float (&m)[VEC], float (&v)[VEC]) {
    if constexpr (!SKIP) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = f(x[j], m[j]);
        return;
    }
    bool masked = true;
#pragma unroll
    for (int j = 0; j < VEC; ++j) masked = masked && m[j] == neg_inf();
    if (masked) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = neg_inf();
    } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = f(x[j], m[j]);
    }
}

// The running (max, sum of exp(v - max)) of a thread, with v folded in.
__device__ __forceinline__ void online(float v, float& m, float& s) {
    if (v > m) {
        s = s * __expf(m - v) + 1.0f;
        m = v;
    } else if (v != neg_inf()) {
        s += __expf(v - m);
    }
}

// Elements a thread of the one-pass kernels holds in registers at most
// (ts/ops/softmax.ts SOFTMAX_HELD and SOFTMAX_EXT_HELD; the launch gives a
// row cols / that threads): 32 for softmax, which holds the raw words; 16
// for scale_mask_softmax, which holds the mask words beside them and then
// v, within the 64 registers of its 1024-thread blocks.
template <typename T, bool EXT> constexpr int SOFTMAX_HELD = EXT ? 16 : 32;

// Vector loads a thread of the two-pass kernels issues before it uses them,
// and of the one-pass kernels on rows longer than they hold.
constexpr int ROW_LOADS = 8;
// LONG_ROW_LOADS: 128 bytes a thread of f32 softmax, 64 of a 16-bit type
// (more would take softmax_bf16 from 44 to 63 registers, fewer held rows an
// SM); scale_mask_softmax, which also loads the mask within the 64
// registers of its 1024-thread blocks, 4 vectors of f32, 1 of a 16-bit type
// (the counts at which ptxas spills least).
template <typename T, bool EXT> constexpr int LONG_ROW_LOADS = sizeof(T) == 4 ? (EXT ? 4 : 8) : (EXT ? 1 : 4);

// Whether a slice moves as vectors: whole vectors, x (and y) 16-byte
// aligned, the mask aligned to its vector (2 * VEC bytes).
template <typename T>
__device__ __forceinline__ bool slice_vec(const T* xs, const T* ys, const bf16* ms, u32 len) {
    constexpr int VEC = VecOf<T>::N;
    return len % VEC == 0 && aligned16(xs) && aligned16(ys) && (reinterpret_cast<u64>(ms) & (2u * VEC - 1u)) == 0;
}

// L vectors of a slice a thread holds: those at v0, v0 + bs, ... below nv
// (x as raw words, and their mask words), loaded together.
template <typename T, int L = ROW_LOADS, bool SKIP = true>
struct SliceChunk {
    static constexpr int VEC = VecOf<T>::N;
    uint4 raw[L];
    MaskWords<VEC> mw[L];
    __device__ __forceinline__ void load(const T* xs, const bf16* ms, u32 nv, u32 v0, u32 bs) {
        const uint4* xv = reinterpret_cast<const uint4*>(xs);
#pragma unroll
        for (int k = 0; k < L; ++k) {
            const u32 vi = v0 + u32(k) * bs;
            if (vi < nv) {
                raw[k] = xv[vi];
                mw[k] = load_mask<VEC>(ms, u64(vi) * VEC);
            }
        }
    }
    // fn(i, v) for each held vector: v the float[VEC] of elements i .. i + VEC - 1.
    template <typename F>
    __device__ __forceinline__ void use(u32 nv, u32 v0, u32 bs, const Transform& f, F fn) const {
#pragma unroll
        for (int k = 0; k < L; ++k) {
            const u32 vi = v0 + u32(k) * bs;
            if (vi < nv) {
                float x[VEC], m[VEC], v[VEC];
                unpack16<T>(raw[k], x);
                mask_values(mw[k], m);
                transform_vec<VEC, SKIP>(f, x, m, v);
                fn(vi * VEC, v);
            }
        }
    }
};

// The vectors of a slice xs (its mask ms, or none; nv vectors, the
// pointers aligned) a thread takes from v_first on (v_first, v_first + bs,
// ...), L in flight at once, each as v: fn(i, v) with v the
// float[VEC] of elements i .. i + VEC - 1. for_slice_scalar: the elements
// of a slice of len that does not move as vectors, one at a time (v a
// float[1]). A thread's fn writes only the elements it was handed.
template <typename T, int L = ROW_LOADS, bool SKIP = true, typename F>
__device__ __forceinline__ void for_slice_vec(const T* xs, const bf16* ms, u32 nv, u32 v_first, const Transform& f, F fn) {
    const u32 bs = blockDim.x;
    for (u32 v0 = v_first; v0 < nv; v0 += L * bs) {
        SliceChunk<T, L, SKIP> c;
        c.load(xs, ms, nv, v0, bs);
        c.use(nv, v0, bs, f, fn);
    }
}
template <typename T, typename F>
__device__ __forceinline__ void for_slice_scalar(const T* xs, const bf16* ms, u32 len, const Transform& f, F fn) {
    for (u32 i = threadIdx.x; i < len; i += blockDim.x) {
        const float mv = ms == nullptr ? 0.0f : to_f(ms[i]);
        float v[1] = {mv == neg_inf() ? neg_inf() : f(to_f(xs[i]), mv)};
        fn(i, v);
    }
}

// (m, s) <- the merge of two (max, sum of exp(v - max)) pairs.
__device__ __forceinline__ void merge_pair(float& m, float& s, float mo, float so) {
    const float mx = fmaxf(m, mo);
    if (mx == neg_inf()) return;
    s = (m == neg_inf() ? 0.0f : s * __expf(m - mx)) + (mo == neg_inf() ? 0.0f : so * __expf(mo - mx));
    m = mx;
}

// A vector's elements folded into a running (max, sum): the sum rescaled
// once a vector, not once an element.
template <int N>
__device__ __forceinline__ void online_vec(const float (&v)[N], float& m, float& s) {
    float vm = v[0];
#pragma unroll
    for (int j = 1; j < N; ++j) vm = fmaxf(vm, v[j]);
    if (vm == neg_inf()) return;
    if (vm > m) {
        s = m == neg_inf() ? 0.0f : s * __expf(m - vm);
        m = vm;
    }
#pragma unroll
    for (int j = 0; j < N; ++j) s += __expf(v[j] - m);
}

// One pass over a row longer than the threads hold (vectors only): the row
// streamed twice, LONG_ROW_LOADS vectors of a thread in flight: once for the
// row's max and sum (online, rescaled once a vector), once for the output.
template <typename T, bool EXT>
__device__ __forceinline__ void softmax_long_row(const T* xr, T* yr, const bf16* mr, u32 nv, const Transform& f, float* partials) {
    constexpr int VEC = VecOf<T>::N;
    float m = neg_inf(), s = 0.0f;
    for_slice_vec<T, LONG_ROW_LOADS<T, EXT>, false>(xr, mr, nv, threadIdx.x, f, [&](u32, auto& v) { online_vec(v, m, s); });
    const float mx = row_max(m, partials);
    __syncthreads();
    const float total = row_sum(m == neg_inf() ? 0.0f : s * __expf(m - mx), partials);
    const bool empty = mx == neg_inf();
    const float inv = empty ? 0.0f : 1.0f / total;
    for_slice_vec<T, LONG_ROW_LOADS<T, EXT>, false>(xr, mr, nv, threadIdx.x, f, [&](u32 i, auto& v) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = empty ? 0.0f : __expf(v[j] - mx) * inv;
        store_vec(yr + i, v);
    });
}

// The row a block (or a block's row of lanes) takes: row_index() itself,
// except for rows of several heads' scores over one mask ([heads * seq_q]
// rows, row r adding mask[r % seq_q]), which go query-major: the heads of
// one query on consecutive blocks, so each mask row comes from DRAM once
// and from L2 for the other heads, where row order sweeps the whole mask
// once a head (at [32 x 2048, 2048], 8 MB of mask 32 times: a fifth of the
// kernel's DRAM traffic, which ncu measured at 1.31 GB for 1.08 GB of
// scores and mask). The launch covers the rows exactly (gridDim.x *
// blockDim.y of them: ts/launch.ts rowLaunch).
__device__ __forceinline__ u32 mask_major_row(u32 seq_q) {
    const u32 r = row_index();
    const u32 rows = gridDim.x * blockDim.y;
    if (seq_q <= 1u || rows % seq_q != 0u) return r;
    const u32 heads = rows / seq_q;
    return (r % heads) * seq_q + r / heads;
}

// One pass over a row. EXT: scale_mask_softmax (holds v), else softmax
// (holds the raw words; v = x).
template <typename T, bool EXT>
__device__ __forceinline__ void softmax_row(const T* x, T* y, const bf16* mask, u32 cols, u32 seq_q, Transform f) {
    extern __shared__ float partials[];
    const u32 row = mask_major_row(seq_q);
    const u64 base = u64(row) * cols;
    const T* xr = x + base;
    T* yr = y + base;
    const bf16* mr = seq_q == 0u ? nullptr : mask + u64(row % seq_q) * cols;
    const u32 tid = threadIdx.x, bs = blockDim.x;
    constexpr int VEC = VecOf<T>::N;
    constexpr int CACHE = SOFTMAX_HELD<T, EXT> / VEC;

    const bool vec = cols % VEC == 0 && aligned16(xr) && aligned16(yr) && (mr == nullptr || aligned16(mask));
    const u32 nv = vec ? cols / VEC : 0u;
    if (nv > u32(CACHE) * bs) {
        softmax_long_row<T, EXT>(xr, yr, mr, nv, f, partials);
        return;
    }
    const uint4* xv = reinterpret_cast<const uint4*>(xr);
    // The held vectors: raw words (and their mask words), then v (x itself
    // without EXT) and exp(v - mx) in vc as floats: one exp an element. The
    // mask loads go out with x's: issued where a vector is used, each would
    // wait on the arithmetic of the ones before.
    uint4 raw[CACHE];
    MaskWords<VEC> mw[EXT ? CACHE : 1];
    float vc[CACHE][VEC];
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
        const u32 vi = tid + u32(c) * bs;
        if (vi < nv) {
            raw[c] = xv[vi];
            if constexpr (EXT) mw[c] = load_mask<VEC>(mr, u64(vi) * VEC);
        }
    }
    // mc: the maximum of the held v; (mu, su): the running maximum and
    // rescaled sum of the others.
    float mc = neg_inf(), mu = neg_inf(), su = 0.0f;
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
        const u32 vi = tid + u32(c) * bs;
        if (vi < nv) {
            if constexpr (EXT) {
                float v[VEC], m[VEC];
                unpack16<T>(raw[c], v);
                mask_values(mw[c], m);
                transform_vec<VEC>(f, v, m, vc[c]);
            } else {
                unpack16<T>(raw[c], vc[c]);
            }
#pragma unroll
            for (int j = 0; j < VEC; ++j) mc = fmaxf(mc, vc[c][j]);
        }
    }
    if (!vec) {
        for (u32 i = tid; i < cols; i += bs) online(f(to_f(xr[i]), mr == nullptr ? 0.0f : to_f(mr[i])), mu, su);
    }
    const float mx = row_max(fmaxf(mc, mu), partials);
    __syncthreads();
    const bool empty = mx == neg_inf();
    float s = mu == neg_inf() ? 0.0f : su * __expf(mu - mx);
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
        if (tid + u32(c) * bs < nv) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                vc[c][j] = empty ? 0.0f : __expf(vc[c][j] - mx);
                s += vc[c][j];
            }
        }
    }
    const float total = row_sum(s, partials);
    const float inv = empty ? 0.0f : 1.0f / total;
    auto prob = [&](float v) { return empty ? 0.0f : __expf(v - mx) * inv; };
#pragma unroll
    for (int c = 0; c < CACHE; ++c) {
        const u32 vi = tid + u32(c) * bs;
        if (vi < nv) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) vc[c][j] *= inv;
            store_vec(yr + u64(vi) * VEC, vc[c]);
        }
    }
    if (!vec) {
        for (u32 i = tid; i < cols; i += bs) yr[i] = from_f<T>(prob(f(to_f(xr[i]), mr == nullptr ? 0.0f : to_f(mr[i]))));
    }
}

// A row's (max, sum) merged from its n pairs [max, sum of exp(v - max)]
// by every warp itself (no barrier; each warp gets the same bits): lanes fold
// pairs lane, lane + 32, ..., then the lanes' results by shuffles. The loads
// go to L2: other blocks of the same dispatch may have written the pairs.
__device__ __forceinline__ void merge_row_pairs(const float* pr, u32 n, float& mx, float& total) {
    mx = neg_inf();
    total = 0.0f;
    for (u32 i = threadIdx.x & 31u; i < n; i += 32u) merge_pair(mx, total, __ldcg(pr + 2u * i), __ldcg(pr + 2u * i + 1u));
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) {
        const float mo = __shfl_xor_sync(0xffffffffu, mx, o), so = __shfl_xor_sync(0xffffffffu, total, o);
        merge_pair(mx, total, mo, so);
    }
}

// fn(i, v) for for_slice_vec / for_slice_scalar that writes exp(v - mx) /
// total at ys + i (zeros for a row whose every v is -inf).
template <typename T>
__device__ __forceinline__ auto normalized_store(T* ys, float mx, float total) {
    const bool empty = mx == neg_inf();
    const float inv = empty ? 0.0f : 1.0f / total;
    return [=](u32 i, auto& v) {
        constexpr int N = sizeof(v) / sizeof(float);
#pragma unroll
        for (int j = 0; j < N; ++j) v[j] = empty ? 0.0f : __expf(v[j] - mx) * inv;
        if constexpr (N == VecOf<T>::N) {
            store_vec(ys + i, v);
        } else {
            ys[i] = from_f<T>(v[0]);
        }
    };
}

template <typename T>
__device__ __forceinline__ void softmax_blocks(const T* x, const bf16* mask, float* partials, const SoftmaxBlocksParams* p) {
    extern __shared__ float red[];
    constexpr int VEC = VecOf<T>::N;
    const u32 b = blockIdx.x, row = blockIdx.y, cols = p->cols;
    const u32 lo = b * p->slice;
    const u32 len = min(p->slice, cols - lo);
    const T* xs = x + u64(row) * cols + lo;
    const bf16* ms = p->seq_q == 0u ? nullptr : mask + u64(row % p->seq_q) * cols + lo;
    const Transform f = transform_of(p->scale, p->softcap);
    float m = neg_inf(), s = 0.0f;
    auto fold = [&](u32, auto& v) { online_vec(v, m, s); };
    if (slice_vec(xs, xs, ms, len)) {
        for_slice_vec<T>(xs, ms, len / VEC, threadIdx.x, f, fold);
    } else {
        for_slice_scalar<T>(xs, ms, len, f, fold);
    }
    const float mx = block_max(m, red);
    __syncthreads();
    const float total = block_sum(m == neg_inf() ? 0.0f : s * __expf(m - mx), red);
    if (threadIdx.x == 0) {
        float* out = partials + (u64(row) * p->n_blocks + b) * 2u;
        out[0] = mx;
        out[1] = total;
    }
}

template <typename T>
__device__ __forceinline__ void softmax_finish(const T* x, const bf16* mask, const float* partials, T* y,
                                               const SoftmaxBlocksParams* p) {
    constexpr int VEC = VecOf<T>::N;
    // The reverse of softmax_blocks' order (see the header).
    const u32 b = p->n_blocks - 1u - blockIdx.x, row = gridDim.y - 1u - blockIdx.y, cols = p->cols;
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 lo = b * p->slice;
    const u32 len = min(p->slice, cols - lo);
    const T* xs = x + u64(row) * cols + lo;
    T* ys = y + u64(row) * cols + lo;
    const bf16* ms = p->seq_q == 0u ? nullptr : mask + u64(row % p->seq_q) * cols + lo;
    const Transform f = transform_of(p->scale, p->softcap);
    const bool vec = slice_vec(xs, ys, ms, len);
    const u32 nv = vec ? len / VEC : 0u;
    // The slice's first loads go out before the row's pairs are read and merged.
    SliceChunk<T> first;
    first.load(xs, ms, nv, tid, bs);
    float mx, total;
    merge_row_pairs(partials + u64(row) * p->n_blocks * 2u, p->n_blocks, mx, total);
    const auto write = normalized_store(ys, mx, total);
    if (vec) {
        first.use(nv, tid, bs, f, write);
        for_slice_vec<T>(xs, ms, nv, tid + ROW_LOADS * bs, f, write);
    } else {
        for_slice_scalar<T>(xs, ms, len, f, write);
    }
}

// ---- the streamed form ----

// Vectors of its unit a thread holds (the op's slice: 256 threads x
// STREAM_HELD vectors, 32 KB of registers a block).
constexpr int STREAM_HELD = 8;
// Polls of a row's word before a block stops waiting for the row's other
// slices and takes the row's statistics from the whole row itself.
constexpr u32 STREAM_POLLS = 1u << 20;

// Whether a word's low bits, as an arrival found them, can be those of this
// form's count for a row of n slices: before slice 0 has arrived, up to n -
// 1 others (n - 1 when slice 0 arrives last); after, slice 0's 2^31 - (n -
// 1) plus up to n - 2 others.
__device__ __forceinline__ bool stream_word_valid(u32 old, u32 n) {
    const u32 low = old & 0x7fffffffu;
    return low < n || low >= 0x80000000u - (n - 1u);
}

// A row's max and sum of exp(v - max) from the whole row, by the block
// (every thread gets the same bits): where the row's pairs cannot be waited for.
template <typename T>
__device__ __forceinline__ void stream_row_stats(const T* xr, u32 cols, const Transform& f, float* red, float& mx, float& total) {
    constexpr int VEC = VecOf<T>::N;
    float m = neg_inf(), s = 0.0f;
    auto fold = [&](u32, auto& v) { online_vec(v, m, s); };
    if (slice_vec(xr, xr, static_cast<const bf16*>(nullptr), cols)) {
        for_slice_vec<T, 1, false>(xr, nullptr, cols / VEC, threadIdx.x, f, fold);
    } else {
        for_slice_scalar<T>(xr, nullptr, cols, f, fold);
    }
    __syncthreads();
    mx = block_max(m, red);
    __syncthreads();
    total = block_sum(m == neg_inf() ? 0.0f : s * __expf(m - mx), red);
}

// A slice's output read again from x (L2, where the slice was just read):
// exp(v - mx) / total, zeros for a row whose every v is -inf.
template <typename T>
__device__ __forceinline__ void stream_write_again(const T* xs, T* ys, u32 len, const Transform& f, float mx, float total) {
    constexpr int VEC = VecOf<T>::N;
    const auto write = normalized_store(ys, mx, total);
    if (slice_vec(xs, ys, static_cast<const bf16*>(nullptr), len)) {
        for_slice_vec<T, 1, false>(xs, nullptr, len / VEC, threadIdx.x, f, write);
    } else {
        for_slice_scalar<T>(xs, nullptr, len, f, write);
    }
}

// A held unit's loads (nv 16-byte vectors of xs into raw, STREAM_HELD a
// thread; FULL: nv is STREAM_HELD x the block) folded into the thread's
// (m, s). f32 holds exp(v - m) in place of x, over the thread's max m, so its
// output is one multiply an element; 16-bit types keep x and fold online.
template <typename T, bool FULL>
__device__ __forceinline__ void stream_load(const T* xs, u32 nv, const Transform& f, uint4 (&raw)[STREAM_HELD], float& m, float& s) {
    constexpr int VEC = VecOf<T>::N;
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const uint4* xv = reinterpret_cast<const uint4*>(xs);
#pragma unroll
    for (int k = 0; k < STREAM_HELD; ++k) {
        const u32 vi = tid + u32(k) * bs;
        if (FULL || vi < nv) raw[k] = __ldcs(xv + vi);
    }
    // fn(k, v) over the thread's held vectors, each unpacked to floats.
    auto each = [&](auto&& fn) {
#pragma unroll
        for (int k = 0; k < STREAM_HELD; ++k) {
            if (FULL || tid + u32(k) * bs < nv) {
                float v[VEC];
                unpack16<T>(raw[k], v);
                fn(k, v);
            }
        }
    };
    if constexpr (VEC == 4) {
        each([&](int, float (&v)[VEC]) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) m = fmaxf(m, v[j] * f.scale);
        });
        // x * scale - m in one rounding; a thread whose every value is -inf
        // subtracts 0 instead, so each exp is 0, not NaN.
        const float mm = m == neg_inf() ? 0.0f : m;
        each([&](int k, float (&v)[VEC]) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                v[j] = __expf(fmaf(v[j], f.scale, -mm));
                s += v[j];
            }
            raw[k] = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
        });
    } else {
        each([&](int, float (&v)[VEC]) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[j] *= f.scale;
            online_vec(v, m, s);
        });
    }
}

// A held unit's stores: f32, the held exp(v - m) times exp(m - mx) / total,
// stored streaming (nothing reads y back here); 16-bit, exp(v - mx) / total.
// Zeros for a row whose every v is -inf.
template <typename T, bool FULL>
__device__ __forceinline__ void stream_store(T* ys, u32 nv, const Transform& f, const uint4 (&raw)[STREAM_HELD], float m, float mx,
                                             float total) {
    constexpr int VEC = VecOf<T>::N;
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const bool empty = mx == neg_inf();
    const float inv = empty ? 0.0f : 1.0f / total;
    const float g = empty || m == neg_inf() ? 0.0f : __expf(m - mx) * inv;
#pragma unroll
    for (int k = 0; k < STREAM_HELD; ++k) {
        const u32 vi = tid + u32(k) * bs;
        if (FULL || vi < nv) {
            float v[VEC];
            unpack16<T>(raw[k], v);
            if constexpr (VEC == 4) {
                __stcs(reinterpret_cast<float4*>(ys) + vi, make_float4(v[0] * g, v[1] * g, v[2] * g, v[3] * g));
            } else {
#pragma unroll
                for (int j = 0; j < VEC; ++j) v[j] = empty ? 0.0f : __expf(v[j] * f.scale - mx) * inv;
                store_vec(ys + u64(vi) * VEC, v);
            }
        }
    }
}

// softmax_stream_<t>: each unit's slice is loaded once, held in registers
// (STREAM_HELD vectors a thread; a slice that does not move as vectors is
// read again from L2 for the output), its (max, sum) written to partials,
// then one thread arrives at the row's word: slice 0 adds 2^31 - (n - 1),
// the others 1, so the word's top bit flips when all n slices have arrived
// and its low bits come back to what they were (zero: the words are the
// encoder's, zero when first bound, Encoder._syncWords). It polls for the
// flip, every warp merges the row's pairs, and the block writes its slice.
// A block takes its units in increasing order and row r's come before any
// of a later row, so with every block resident and at least n blocks, the
// blocks holding r's slices have finished every earlier unit: the wait
// ends. Where it does not within STREAM_POLLS polls (blocks not all
// resident: another stream's kernels on the SMs, MPS limits) or the word
// is not this form's, the block takes the row's statistics from the whole
// row itself: slower, the same result within rounding, never a hang. It
// has arrived all the same, so the word ends the dispatch as it began.
// The output never overlaps the input (the op plans two passes in place):
// that fallback reads slices other blocks write.
template <typename T>
__device__ __forceinline__ void softmax_stream(const T* x, float* partials, T* y, u32* words, const SoftmaxStreamParams* p) {
    extern __shared__ float red[];  // one float a warp, then the block's wait outcome
    constexpr int VEC = VecOf<T>::N;
    const u32 cols = p->cols, slice = p->slice, nb = p->n_blocks;
    const u64 units = u64(p->rows) * nb;
    const Transform f = transform_of(p->scale, 0.0f);
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 flag = (bs + 31u) / 32u;
    for (u64 u = blockIdx.x; u < units; u += gridDim.x) {
        const u64 row = u / nb;
        const u32 b = u32(u - row * nb);
        const u32 lo = b * slice, len = min(slice, cols - lo);
        const T* xs = x + row * cols + lo;
        T* ys = y + row * cols + lo;
        const u32 nv = len / VEC;
        const bool held = slice_vec(xs, ys, static_cast<const bf16*>(nullptr), len) && nv <= STREAM_HELD * bs;
        // A full slice (every unit but a row's last where cols is not a
        // multiple of the slice) loads and stores without a check a vector:
        // the checked form kept fewer bytes in flight (10% slower at [64,
        // 262144], bench/notes/softmax-stream-2026-11-27.md).
        const bool full = nv == STREAM_HELD * bs;
        uint4 raw[STREAM_HELD];
        float m = neg_inf(), s = 0.0f;
        if (held && full) {
            stream_load<T, true>(xs, nv, f, raw, m, s);
        } else if (held) {
            stream_load<T, false>(xs, nv, f, raw, m, s);
        } else {
            for_slice_scalar<T>(xs, nullptr, len, f, [&](u32, auto& v) { online_vec(v, m, s); });
        }
        // The op launches whole warps (128 or 256 threads).
        const float bmx = block_max<true>(m, red);
        __syncthreads();
        const float btotal = block_sum<true>(m == neg_inf() ? 0.0f : s * __expf(m - bmx), red);
        float* pr = partials + row * nb * 2u;
        if (tid == 0) {
            pr[2u * b] = bmx;
            pr[2u * b + 1u] = btotal;
            __threadfence();
            const u32 old = atomicAdd(words + row, b == 0u ? 0x80000000u - (nb - 1u) : 1u);
            bool ok = stream_word_valid(old, nb);
            for (u32 polls = 0; ok && (ld_acquire_gpu(words + row) >> 31) == (old >> 31); ++polls) {
                if (polls == STREAM_POLLS) ok = false;
                else __nanosleep(32);
            }
            red[flag] = ok ? 1.0f : 0.0f;
        }
        __syncthreads();
        float mx, total;
        if (red[flag] != 0.0f) {
            merge_row_pairs(pr, nb, mx, total);
        } else {
            stream_row_stats<T>(x + row * cols, cols, f, red, mx, total);
        }
        if (held && full) {
            stream_store<T, true>(ys, nv, f, raw, m, mx, total);
        } else if (held) {
            stream_store<T, false>(ys, nv, f, raw, m, mx, total);
        } else {
            stream_write_again<T>(xs, ys, len, f, mx, total);
        }
        // No barrier here: red's flag is read before the next unit's first
        // barrier, and thread 0 writes it again only after two more.
    }
}

// cap * tanh(x / cap) as the softcap kernels compute it: the division a
// multiply by 1 / cap; tanh on the special unit for bf16 (its error under
// half a bf16 ulp), CUDA's accurate tanhf for f16 and f32.
template <typename T> __device__ __forceinline__ float cap_tanh(float x) { return tanhf(x); }
template <> __device__ __forceinline__ float cap_tanh<bf16>(float x) { return tanh_approx(x); }

template <typename T>
__device__ __forceinline__ void softcap_vec(const T* x, T* y, const SoftcapParams* p) {
    constexpr int VEC = VecOf<T>::N;
    const u64 n = p->n_elements;
    const float cap = p->cap, inv = 1.0f / cap;
    const u64 first = (u64(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
    if (first >= n) return;
    if (first + VEC <= n && aligned16(x + first) && aligned16(y + first)) {
        float v[VEC];
        load_vec(x + first, v);
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = cap * cap_tanh<T>(v[j] * inv);
        store_vec(y + first, v);
    } else {
        for (u64 i = first; i < n && i < first + VEC; ++i) y[i] = from_f<T>(cap * cap_tanh<T>(to_f(x[i]) * inv));
    }
}

}  // namespace

// The entries of one type T (name TAG).
// softmax: buffer(0) input [rows, cols], (1) output [rows, cols] (may be
// input), (2) SoftmaxParams; threadgroup(0) one float per warp. The 16-bit
// entries at most 56 registers (SOFTMAX_BOUNDS_<t>; 62 unbounded): 4 blocks
// of 256 an SM (a row of 8192), 32 held floats a thread, no spills.
// scale_mask_softmax: buffer(0) input, (1) output (may be input), (2) mask
// [seq_q, cols] bf16 (unread when seq_q = 0), (3) ScaleMaskSoftmaxParams.
// softmax_blocks: buffer(0) input [rows, cols], (1) mask [seq_q, cols] bf16
// (unread when seq_q = 0), (2) partials [rows, n_blocks, 2] f32 (written),
// (3) SoftmaxBlocksParams; grid (n_blocks, rows, 1); threadgroup(0) one
// float per warp.
// softmax_finish: buffer(0) input, (1) mask, (2) partials (softmax_blocks'
// output), (3) output [rows, cols] (may be input), (4) SoftmaxBlocksParams;
// the grid and threadgroup memory of softmax_blocks.
// softmax_stream: buffer(0) input [rows, cols], (1) partials [rows,
// n_blocks, 2] f32 (written), (2) output [rows, cols] (not over input), (3)
// words: a u32 a row (Encoder._syncWords: zero low bits when the dispatch
// starts, and so again when it ends), (4) SoftmaxStreamParams; grid (G, 1,
// 1) of 256 threads (128 where the op plans a few rows), every block resident
// (at most 4 of 256 an SM: 64 registers; the held vectors fit either size)
// and G >= n_blocks; threadgroup(0) one float a warp and one more.
// softcap: buffer(0) input [n], (1) output [n] (may be input), (2) SoftcapParams.
#define SOFTMAX_BOUNDS_f32 __launch_bounds__(1024)
#define SOFTMAX_BOUNDS_f16 MLXN_MAX_REGS(56)
#define SOFTMAX_BOUNDS_bf16 MLXN_MAX_REGS(56)
#define SOFTMAX_ENTRIES(T, TAG)                                                                                         \
    extern "C" __global__ void SOFTMAX_BOUNDS_##TAG softmax_##TAG(const T* input, T* output, const SoftmaxParams* p) {  \
        softmax_row<T, false>(input, output, nullptr, u32(p->cols), 0u, transform_of(1.0f, 0.0f));                      \
    }                                                                                                                   \
    extern "C" __global__ void __launch_bounds__(1024) scale_mask_softmax_##TAG(const T* input, T* output,              \
                                                                                const bf16* mask,                       \
                                                                                const ScaleMaskSoftmaxParams* p) {      \
        softmax_row<T, true>(input, output, mask, p->cols, p->seq_q, transform_of(p->scale, p->softcap));               \
    }                                                                                                                   \
    extern "C" __global__ void softmax_blocks_##TAG(const T* input, const bf16* mask, float* partials,                  \
                                                    const SoftmaxBlocksParams* p) {                                     \
        softmax_blocks<T>(input, mask, partials, p);                                                                    \
    }                                                                                                                   \
    extern "C" __global__ void softmax_finish_##TAG(const T* input, const bf16* mask, const float* partials, T* output, \
                                                    const SoftmaxBlocksParams* p) {                                     \
        softmax_finish<T>(input, mask, partials, output, p);                                                            \
    }                                                                                                                   \
    extern "C" __global__ void __launch_bounds__(256, 4) softmax_stream_##TAG(const T* input, float* partials, T* output, \
                                                                              u32* words, const SoftmaxStreamParams* p) { \
        softmax_stream<T>(input, partials, output, words, p);                                                           \
    }                                                                                                                   \
    extern "C" __global__ void softcap_##TAG(const T* input, T* output, const SoftcapParams* p) {                       \
        softcap_vec<T>(input, output, p);                                                                               \
    }
SOFTMAX_ENTRIES(float, f32)
SOFTMAX_ENTRIES(__half, f16)
SOFTMAX_ENTRIES(bf16, bf16)
