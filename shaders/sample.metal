// Token selection over rows of logits: arg-max, exact top-k, mlx-native's
// softmax_sample, a filtered sampler (repetition penalty, temperature,
// top-k, top-p, min-p) and Philox4x32-10 random bits.
//
// One order ranks values everywhere: by value, descending, NaN above +inf,
// -0 equal to +0, and equal values by index, ascending (ties go to the lowest
// index). order_key maps a float to a uint whose unsigned order is that value
// order; (key, ~index) is then a 64-bit key that no two elements share.
//
// Kernels (bindings in each declaration):
//   argmax_f32            mlx-native's: one threadgroup per row, any size
//   argmax_blocks_f32     pass 1 of 2: grid (rows, n_blocks), one slice each,
//                         its best (value, index) to a partials buffer
//   argmax_merge_f32      pass 2: one threadgroup per row over the partials
//   top_k_f32             mlx-native's (k up to 256): one threadgroup per row
//   top_k_blocks_f32      pass 1 of 2: each slice's own top k, sorted
//   top_k_merge_f32       pass 2: the top k of the slices' candidates
//   softmax_sample_f32    mlx-native's: softmax(x / T), then the first token
//                         whose CDF reaches random_val; one threadgroup
//   sample_blocks_f32     sampler pass 1: penalized, tempered logits z to
//                         scratch, each slice's max, index of the max, sum
//                         of exp(z - max) and (n_cand > 0) top n_cand
//   sample_finish_f32     sampler pass 2: one threadgroup per row
//   philox4x32_10_u32     Philox4x32-10 of consecutive counters
//
// Top-k in one threadgroup is a radix select on the 64-bit keys: 8-bit
// digits from the top, a 256-bin histogram per digit, until the group of the
// k-th key holds exactly what is still needed (2 or 3 digits for random
// floats; the index digits only for ties). The items above that cut are then
// gathered and sorted (bitonic) in threadgroup memory. Every result is
// independent of the threads' timing.

enum SampleLimits : uint {
    SAMPLE_MAX_K = 256,        // top-k, and the sampler's candidates
    SAMPLE_MAX_THREADS = 1024, // threads of a threadgroup
    SAMPLE_MAX_SLICE = 4096,   // elements of one sample_blocks_f32 threadgroup
    RADIX_BINS = 256,          // one 8-bit digit
};

// ---- the order ----

static inline uint order_key(float v) {
    const uint b = as_type<uint>(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return 0xffffffffu;  // NaN
    }
    if ((b & 0x7fffffffu) == 0u) {
        return 0x80000000u;  // -0 and +0
    }
    return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}

// The float of a key (NaN and zero come back canonical).
static inline float key_value(uint k) {
    return as_type<float>((k & 0x80000000u) != 0u ? (k & 0x7fffffffu) : ~k);
}

// (ka, ia) ranks before (kb, ib).
static inline bool ranks_before(uint ka, uint ia, uint kb, uint ib) {
    return ka > kb || (ka == kb && ia < ib);
}

static inline uint pow2_at_least(uint n) {
    uint p = 1u;
    while (p < n) {
        p <<= 1u;
    }
    return p;
}

// The best (value, index) of the threadgroup, returned to every thread; vals
// and idxs hold tg_size entries. A tree over any tg_size.
static inline void threadgroup_argmax(thread float& v, thread uint& ix, threadgroup float* vals, threadgroup uint* idxs,
                                      uint tid, uint tg_size) {
    vals[tid] = v;
    idxs[tid] = ix;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = pow2_at_least(tg_size) >> 1u; s > 0u; s >>= 1u) {
        if (tid < s && tid + s < tg_size) {
            const float ov = vals[tid + s];
            const uint oi = idxs[tid + s];
            if (ranks_before(order_key(ov), oi, order_key(vals[tid]), idxs[tid])) {
                vals[tid] = ov;
                idxs[tid] = oi;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    v = vals[0];
    ix = idxs[0];
    threadgroup_barrier(mem_flags::mem_threadgroup);
}

// The sum of v over the threads before this one (thread index order), and
// over all of them in `total`; every thread must call it. partials: one float
// per simdgroup. Every thread adds the partials in one order, so all get the
// same total.
static inline float threadgroup_prefix_sum(float v, thread float& total, threadgroup float* partials,
                                           uint sg, uint lane, uint n_sg) {
    const float within = simd_prefix_exclusive_sum(v);
    const float s = simd_sum(v);
    if (lane == 0u) {
        partials[sg] = s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float before = 0.0f;
    float all = 0.0f;
    for (uint i = 0; i < n_sg; ++i) {
        if (i < sg) {
            before += partials[i];
        }
        all += partials[i];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    total = all;
    return before + within;
}

// ---- items a threadgroup selects among: item i has a value and an index ----

// Values in device memory, indices base + i.
struct FloatItems {
    device const float* v;
    uint base;
    float value(uint i) const { return v[i]; }
    uint index(uint i) const { return base + i; }
};

// Values stored as their bits (the sampler's scratch), indices base + i.
struct BitsItems {
    device const uint* v;
    uint base;
    float value(uint i) const { return as_type<float>(v[i]); }
    uint index(uint i) const { return base + i; }
};

// (value bits, index) pairs, as the block passes write their candidates.
struct PairItems {
    device const uint* p;
    float value(uint i) const { return as_type<float>(p[2u * i]); }
    uint index(uint i) const { return p[2u * i + 1u]; }
};

// ---- top-k in one threadgroup ----

// Items whose 64-bit key, cut to the mask, is at least (hi, lo) lexicographically.
struct Cut {
    uint hi;
    uint mask_hi;
    uint lo;
    uint mask_lo;
};

static inline bool cut_keeps(Cut c, uint key, uint index) {
    const uint k = key & c.mask_hi;
    return k != c.hi ? k > c.hi : ((~index) & c.mask_lo) >= c.lo;
}

// The cut that keeps exactly the `want` best of n items (want <= n). hist: 256
// counters; found: 3 words. lanes: threads of simdgroup 0.
template <typename Items>
static inline Cut select_cut(Items items, uint n, uint want, threadgroup atomic_uint* hist, threadgroup uint* found,
                             uint tid, uint tg_size, uint sg, uint lane, uint lanes) {
    Cut cut = {0u, 0u, 0u, 0u};
    if (want >= n) {
        return cut;
    }
    uint need = want;
    for (uint d = 0; d < 8u; ++d) {
        for (uint b = tid; b < RADIX_BINS; b += tg_size) {
            atomic_store_explicit(&hist[b], 0u, memory_order_relaxed);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const uint shift = 24u - 8u * (d & 3u);
        for (uint i = tid; i < n; i += tg_size) {
            const uint key = order_key(items.value(i));
            const uint inv = ~items.index(i);
            if ((key & cut.mask_hi) == cut.hi && (inv & cut.mask_lo) == cut.lo) {
                atomic_fetch_add_explicit(&hist[((d < 4u ? key : inv) >> shift) & 255u], 1u, memory_order_relaxed);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // Simdgroup 0 finds the digit whose bin holds the need-th item: each
        // lane sums a run of bins, highest bins at lane 0.
        if (sg == 0u) {
            const uint per = (uint(RADIX_BINS) + lanes - 1u) / lanes;
            const uint top = uint(RADIX_BINS) - min(uint(RADIX_BINS), lane * per);
            const uint bottom = uint(RADIX_BINS) - min(uint(RADIX_BINS), (lane + 1u) * per);
            uint sum = 0u;
            for (uint b = bottom; b < top; ++b) {
                sum += atomic_load_explicit(&hist[b], memory_order_relaxed);
            }
            const uint before = simd_prefix_exclusive_sum(sum);
            if (before < need && need <= before + sum) {
                uint acc = before;
                for (uint b = top; b > bottom; --b) {
                    const uint h = atomic_load_explicit(&hist[b - 1u], memory_order_relaxed);
                    if (need <= acc + h) {
                        found[0] = b - 1u;
                        found[1] = acc;
                        found[2] = h;
                        break;
                    }
                    acc += h;
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const uint digit = found[0];
        const uint above = found[1];
        const uint count = found[2];
        need -= above;
        if (d < 4u) {
            cut.hi |= digit << shift;
            cut.mask_hi |= 255u << shift;
        } else {
            cut.lo |= digit << shift;
            cut.mask_lo |= 255u << shift;
        }
        if (count == need) {
            break;
        }
    }
    return cut;
}

// Sorts span entries (a power of two) of (vals, idxs) into rank order (bitonic).
static inline void sort_ranked(threadgroup float* vals, threadgroup uint* idxs, uint span, uint tid, uint tg_size) {
    for (uint k = 2u; k <= span; k <<= 1u) {
        for (uint j = k >> 1u; j > 0u; j >>= 1u) {
            for (uint i = tid; i < span; i += tg_size) {
                const uint l = i ^ j;
                if (l > i) {
                    const bool l_first = ranks_before(order_key(vals[l]), idxs[l], order_key(vals[i]), idxs[i]);
                    if (((i & k) == 0u) == l_first) {
                        const float tv = vals[i];
                        const uint ti = idxs[i];
                        vals[i] = vals[l];
                        idxs[i] = idxs[l];
                        vals[l] = tv;
                        idxs[l] = ti;
                    }
                }
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
    }
}

// The m best of n items (m <= n), in rank order in vals[0, m) and idxs[0, m);
// entries [m, span) hold (-inf, 0xffffffff), which ranks below every item.
// span: a power of two >= m. hist and found as select_cut; counter: one word.
// hist and found may lie in vals and idxs, and counter past idxs[span): they
// are done with before the items are gathered.
template <typename Items>
static inline void threadgroup_top(Items items, uint n, uint m, uint span, threadgroup float* vals, threadgroup uint* idxs,
                                   threadgroup atomic_uint* hist, threadgroup uint* found, threadgroup atomic_uint* counter,
                                   uint tid, uint tg_size, uint sg, uint lane, uint lanes) {
    const Cut cut = select_cut(items, n, m, hist, found, tid, tg_size, sg, lane, lanes);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0u) {
        atomic_store_explicit(counter, 0u, memory_order_relaxed);
    }
    for (uint i = m + tid; i < span; i += tg_size) {
        vals[i] = -INFINITY;
        idxs[i] = 0xffffffffu;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = tid; i < n; i += tg_size) {
        const float v = items.value(i);
        const uint ix = items.index(i);
        if (cut_keeps(cut, order_key(v), ix)) {
            const uint slot = atomic_fetch_add_explicit(counter, 1u, memory_order_relaxed);
            if (slot < m) {
                vals[slot] = v;
                idxs[slot] = ix;
            }
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    sort_ranked(vals, idxs, span, tid, tg_size);
}

// ---- arg-max ----

// buffer(0) input [rows, n_elements], (1) out_index [rows] u32, (2) out_value
// [rows], (3) params; threadgroup(0) tg_size floats, (1) tg_size uints.
// grid (rows, 1, 1), any threadgroup size (mlx-native: min(1024, nextPow2(n))).
kernel void argmax_f32(
    device const float*    input     [[buffer(0)]],
    device uint*           out_index [[buffer(1)]],
    device float*          out_value [[buffer(2)]],
    constant ArgmaxParams& params    [[buffer(3)]],
    threadgroup float*     vals      [[threadgroup(0)]],
    threadgroup uint*      idxs      [[threadgroup(1)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]])
{
    const uint n = params.n_elements;
    device const float* x = input + ulong(row) * n;
    uint best_key = 0u;  // below every element's key
    uint ix = 0xffffffffu;
    for (uint i = tid; i < n; i += tg_size) {
        const uint k = order_key(x[i]);
        if (k > best_key) {  // indices ascend: the first of equal values stays
            best_key = k;
            ix = i;
        }
    }
    float v = ix == 0xffffffffu ? -INFINITY : x[ix];
    threadgroup_argmax(v, ix, vals, idxs, tid, tg_size);
    if (tid == 0u) {
        out_index[row] = ix;
        out_value[row] = v;
    }
}

// buffer(0) input [rows, n_elements], (1) partials [rows, n_blocks, 2] u32
// (value bits, index), (2) params. grid (rows, n_blocks, 1), any threadgroup
// size up to 1024.
kernel void argmax_blocks_f32(
    device const float*          input    [[buffer(0)]],
    device uint*                 partials [[buffer(1)]],
    constant ArgmaxBlocksParams& p        [[buffer(2)]],
    uint2 pos    [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]])
{
    threadgroup float vals[SAMPLE_MAX_THREADS];
    threadgroup uint idxs[SAMPLE_MAX_THREADS];
    const uint row = pos.x;
    const uint b = pos.y;
    const uint lo = b * p.slice;
    const uint len = min(p.slice, p.n_elements - lo);
    device const float* x = input + ulong(row) * p.n_elements + lo;
    uint best_key = 0u;
    uint at = 0xffffffffu;
    for (uint i = tid; i < len; i += tg_size) {
        const uint k = order_key(x[i]);
        if (k > best_key) {
            best_key = k;
            at = i;
        }
    }
    float v = at == 0xffffffffu ? -INFINITY : x[at];
    uint ix = at == 0xffffffffu ? at : lo + at;
    threadgroup_argmax(v, ix, vals, idxs, tid, tg_size);
    if (tid == 0u) {
        const ulong o = (ulong(row) * p.n_blocks + b) * 2u;
        partials[o] = as_type<uint>(v);
        partials[o + 1u] = ix;
    }
}

// buffer(0) partials [rows, n_blocks, 2], (1) out_index [rows], (2) out_value
// [rows], (3) params. grid (rows, 1, 1), any threadgroup size up to 1024.
kernel void argmax_merge_f32(
    device const uint*           partials  [[buffer(0)]],
    device uint*                 out_index [[buffer(1)]],
    device float*                out_value [[buffer(2)]],
    constant ArgmaxBlocksParams& p         [[buffer(3)]],
    uint row     [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]])
{
    threadgroup float vals[SAMPLE_MAX_THREADS];
    threadgroup uint idxs[SAMPLE_MAX_THREADS];
    device const uint* q = partials + ulong(row) * p.n_blocks * 2u;
    float v = -INFINITY;
    uint ix = 0xffffffffu;
    for (uint b = tid; b < p.n_blocks; b += tg_size) {
        const float bv = as_type<float>(q[2u * b]);
        const uint bi = q[2u * b + 1u];
        if (ranks_before(order_key(bv), bi, order_key(v), ix)) {
            v = bv;
            ix = bi;
        }
    }
    threadgroup_argmax(v, ix, vals, idxs, tid, tg_size);
    if (tid == 0u) {
        out_index[row] = ix;
        out_value[row] = v;
    }
}

// ---- top-k ----

// buffer(0) input [rows, n_elements], (1) out_indices [rows, k] u32, (2)
// out_values [rows, k], (3) params (n_elements, k); threadgroup(0) at least
// max(256, nextPow2(min(k, n)), tg_size) floats, (1) at least
// max(nextPow2(min(k, n)) + 4, tg_size) uints: the kernel keeps all of its
// threadgroup memory there, so mlx-native's launch (tg_size * k of each,
// 32 KiB in all at k = 128) fits Apple's 32 KiB. grid (rows, 1, 1), any
// threadgroup size up to 1024 (k = 1 is an arg-max). Entries past n_elements
// (k > n_elements) are (-inf, 0xffffffff).
kernel void top_k_f32(
    device const float*  input       [[buffer(0)]],
    device uint*         out_indices [[buffer(1)]],
    device float*        out_values  [[buffer(2)]],
    constant TopKParams& params      [[buffer(3)]],
    threadgroup float*   vals        [[threadgroup(0)]],
    threadgroup uint*    idxs        [[threadgroup(1)]],
    uint row       [[threadgroup_position_in_grid]],
    uint tid       [[thread_index_in_threadgroup]],
    uint tg_size   [[threads_per_threadgroup]],
    uint sg        [[simdgroup_index_in_threadgroup]],
    uint lane      [[thread_index_in_simdgroup]],
    uint sg_width  [[threads_per_simdgroup]])
{
    const uint n = params.n_elements;
    const uint k = params.k;
    const uint m = min(k, n);
    device const float* x = input + ulong(row) * n;
    const ulong o = ulong(row) * k;
    if (m == 1u) {
        uint best_key = 0u;
        uint ix = 0xffffffffu;
        for (uint i = tid; i < n; i += tg_size) {
            const uint key = order_key(x[i]);
            if (key > best_key) {
                best_key = key;
                ix = i;
            }
        }
        float v = ix == 0xffffffffu ? -INFINITY : x[ix];
        threadgroup_argmax(v, ix, vals, idxs, tid, tg_size);
        for (uint r = tid; r < k; r += tg_size) {
            out_values[o + r] = r == 0u ? v : -INFINITY;
            out_indices[o + r] = r == 0u ? ix : 0xffffffffu;
        }
        return;
    }
    const uint span = pow2_at_least(m);
    const FloatItems items = {x, 0u};
    threadgroup_top(items, n, m, span, vals, idxs, (threadgroup atomic_uint*)vals, idxs,
                    (threadgroup atomic_uint*)(idxs + span), tid, tg_size, sg, lane, min(tg_size, sg_width));
    for (uint r = tid; r < k; r += tg_size) {
        out_values[o + r] = r < m ? vals[r] : -INFINITY;
        out_indices[o + r] = r < m ? idxs[r] : 0xffffffffu;
    }
}

// buffer(0) input [rows, n_elements], (1) candidates [rows, n_blocks, k, 2]
// u32 (value bits, index; each slice's best in rank order, padded with
// (-inf, 0xffffffff)), (2) params. grid (rows, n_blocks, 1), any threadgroup
// size up to 1024.
kernel void top_k_blocks_f32(
    device const float*        input      [[buffer(0)]],
    device uint*               candidates [[buffer(1)]],
    constant TopKBlocksParams& p          [[buffer(2)]],
    uint2 pos      [[threadgroup_position_in_grid]],
    uint tid       [[thread_index_in_threadgroup]],
    uint tg_size   [[threads_per_threadgroup]],
    uint sg        [[simdgroup_index_in_threadgroup]],
    uint lane      [[thread_index_in_simdgroup]],
    uint sg_width  [[threads_per_simdgroup]])
{
    threadgroup float vals[SAMPLE_MAX_K];
    threadgroup uint idxs[SAMPLE_MAX_K];
    threadgroup atomic_uint hist[RADIX_BINS];
    threadgroup uint found[4];
    threadgroup atomic_uint counter;
    const uint row = pos.x;
    const uint b = pos.y;
    const uint lo = b * p.slice;
    const uint len = min(p.slice, p.n_elements - lo);
    const uint m = min(p.k, len);
    const FloatItems items = {input + ulong(row) * p.n_elements + lo, lo};
    threadgroup_top(items, len, m, pow2_at_least(m), vals, idxs, hist, found, &counter, tid, tg_size, sg, lane, min(tg_size, sg_width));
    device uint* out = candidates + (ulong(row) * p.n_blocks + b) * p.k * 2u;
    for (uint r = tid; r < p.k; r += tg_size) {
        out[2u * r] = as_type<uint>(r < m ? vals[r] : -INFINITY);
        out[2u * r + 1u] = r < m ? idxs[r] : 0xffffffffu;
    }
}

// buffer(0) candidates [rows, n_blocks, k, 2], (1) out_indices [rows, k],
// (2) out_values [rows, k], (3) params. grid (rows, 1, 1), any threadgroup
// size up to 1024.
kernel void top_k_merge_f32(
    device const uint*         candidates  [[buffer(0)]],
    device uint*               out_indices [[buffer(1)]],
    device float*              out_values  [[buffer(2)]],
    constant TopKBlocksParams& p           [[buffer(3)]],
    uint row       [[threadgroup_position_in_grid]],
    uint tid       [[thread_index_in_threadgroup]],
    uint tg_size   [[threads_per_threadgroup]],
    uint sg        [[simdgroup_index_in_threadgroup]],
    uint lane      [[thread_index_in_simdgroup]],
    uint sg_width  [[threads_per_simdgroup]])
{
    threadgroup float vals[SAMPLE_MAX_K];
    threadgroup uint idxs[SAMPLE_MAX_K];
    threadgroup atomic_uint hist[RADIX_BINS];
    threadgroup uint found[4];
    threadgroup atomic_uint counter;
    const uint m = min(p.k, p.n_elements);
    // The slices hold at least m items in all, so the padding ranks below the cut.
    const PairItems items = {candidates + ulong(row) * p.n_blocks * p.k * 2u};
    threadgroup_top(items, p.n_blocks * p.k, m, pow2_at_least(m), vals, idxs, hist, found, &counter,
                    tid, tg_size, sg, lane, min(tg_size, sg_width));
    const ulong o = ulong(row) * p.k;
    for (uint r = tid; r < p.k; r += tg_size) {
        out_values[o + r] = r < m ? vals[r] : -INFINITY;
        out_indices[o + r] = r < m ? idxs[r] : 0xffffffffu;
    }
}

// ---- mlx-native's softmax_sample ----

// buffer(0) logits [n], (1) scratch [n] (the probabilities, written), (2)
// out_token [1] u32, (3) out_logprob [1], (4) params; threadgroup(0) at least
// one float per simdgroup (mlx-native binds tg_size). grid (1, 1, 1), any
// threadgroup size up to 1024. The token is the first i whose CDF
// p_0 + ... + p_i reaches random_val (n - 1 if none does, by rounding); its
// log-probability is ln p_i.
kernel void softmax_sample_f32(
    device const float*           logits      [[buffer(0)]],
    device float*                 scratch     [[buffer(1)]],
    device uint*                  out_token   [[buffer(2)]],
    device float*                 out_logprob [[buffer(3)]],
    constant SoftmaxSampleParams& params      [[buffer(4)]],
    threadgroup float*            partials    [[threadgroup(0)]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]],
    uint sg      [[simdgroup_index_in_threadgroup]],
    uint lane    [[thread_index_in_simdgroup]],
    uint n_sg    [[simdgroups_per_threadgroup]])
{
    threadgroup atomic_uint pick;
    const uint n = uint(params.n_elements);
    const float inv_t = 1.0f / params.temperature;
    float m = -INFINITY;
    for (uint i = tid; i < n; i += tg_size) {
        m = max(m, logits[i] * inv_t);
    }
    m = threadgroup_max(m, partials, sg, lane, n_sg);
    float s = 0.0f;
    for (uint i = tid; i < n; i += tg_size) {
        const float e = exp(logits[i] * inv_t - m);
        scratch[i] = e;
        s += e;
    }
    const float inv = 1.0f / threadgroup_sum(s, partials, sg, lane, n_sg);
    for (uint i = tid; i < n; i += tg_size) {
        scratch[i] *= inv;
    }
    if (tid == 0u) {
        atomic_store_explicit(&pick, n - 1u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    // The CDF by contiguous chunks: each thread starts from the sum of the
    // chunks before its own; the first index to reach random_val wins.
    const uint chunk = (n + tg_size - 1u) / tg_size;
    const uint b0 = min(n, tid * chunk);
    const uint b1 = min(n, b0 + chunk);
    float own = 0.0f;
    for (uint i = b0; i < b1; ++i) {
        own += scratch[i];
    }
    float total;
    float c = threadgroup_prefix_sum(own, total, partials, sg, lane, n_sg);
    for (uint i = b0; i < b1; ++i) {
        c += scratch[i];
        if (c >= params.random_val) {
            atomic_fetch_min_explicit(&pick, i, memory_order_relaxed);
            break;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0u) {
        const uint tok = atomic_load_explicit(&pick, memory_order_relaxed);
        out_token[0] = tok;
        out_logprob[0] = log(scratch[tok]);
    }
}

// ---- Philox4x32-10 (Salmon et al., SC11; Random123's philox4x32 with 10 rounds) ----

static inline uint4 philox4x32_10(uint4 c, uint2 k) {
    for (uint r = 0; r < 10u; ++r) {
        const uint hi0 = mulhi(0xD2511F53u, c.x);
        const uint lo0 = 0xD2511F53u * c.x;
        const uint hi1 = mulhi(0xCD9E8D57u, c.z);
        const uint lo1 = 0xCD9E8D57u * c.z;
        c = uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k += uint2(0x9E3779B9u, 0xBB67AE85u);
    }
    return c;
}

// buffer(0) output [n_blocks, 4] u32, (1) params. Block j is Philox4x32-10 of
// the counter + j (128-bit addition) under the key. grid (ceil(n_blocks /
// tg), 1, 1) threadgroups of tg threads.
kernel void philox4x32_10_u32(
    device uint*           output [[buffer(0)]],
    constant PhiloxParams& p      [[buffer(1)]],
    uint j [[thread_position_in_grid]])
{
    if (j >= p.n_blocks) {
        return;
    }
    uint4 c = uint4(p.counter0 + j, p.counter1, p.counter2, p.counter3);
    if (c.x < j) {  // carry
        c.y += 1u;
        if (c.y == 0u) {
            c.z += 1u;
            if (c.z == 0u) {
                c.w += 1u;
            }
        }
    }
    const uint4 r = philox4x32_10(c, uint2(p.key0, p.key1));
    output[4u * ulong(j)] = r.x;
    output[4u * ulong(j) + 1u] = r.y;
    output[4u * ulong(j) + 2u] = r.z;
    output[4u * ulong(j) + 3u] = r.w;
}

// ---- the sampler ----
//
// Per row r of logits x [rows, n_vocab]:
//   penalty:     x'_i = x_i / rp if x_i > 0, x_i * rp otherwise, for every i
//                among the row's previous token ids (each once, however often
//                it appears; ids >= n_vocab are ignored)
//   temperature: z_i = x'_i / T, with NaN as -inf and +inf as the largest
//                float (several +inf share the mass); T = 0: greedy
//   kept set:    a prefix of the rank order of z: the top_k first (top_k >
//                0); then those whose rank predecessors hold less than top_p
//                of the mass (of the top-k set when top_k > 0, else of all);
//                then those with exp(z_i - z_max) >= min_p
//   draw:        u = Philox4x32-10(counter (counter_lo, counter_hi, r, 0),
//                key (seed_lo, seed_hi)) word 0, top 24 bits / 2^24; the
//                token is the first of the kept set, in its order, whose
//                cumulative weight exp(z - z_max) exceeds u times the kept
//                total. The order is rank order when the set comes from the
//                candidates, index order otherwise (no candidates, or top-p /
//                min-p reaching past the 256 candidates with top_k = 0).
// out_logprob: ln of the token's probability in the kept set (0 when greedy).
// A row whose every z is -inf gives token 0xffffffff and logprob -inf.
//
// scratch (u32 words): z [rows, n_vocab] (float bits), then per block (max,
// sum of exp(z - max), index of max) [rows, n_blocks, 3], then candidates
// [rows, n_blocks, n_cand, 2] (value bits, index); ts/ops/sample.ts sizes
// it for every slice and candidate count it plans.

static inline float sample_value(float x, bool penalized, float penalty, float inv_t) {
    const uint b = as_type<uint>(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return -INFINITY;
    }
    if (penalized) {
        x = x > 0.0f ? x / penalty : x * penalty;
    }
    return min(x * inv_t, FLT_MAX);
}

static inline float sample_uniform(constant SampleParams& p, uint row) {
    const uint4 r = philox4x32_10(uint4(p.counter_lo, p.counter_hi, row, 0u), uint2(p.seed_lo, p.seed_hi));
    return float(r.x >> 8u) * 5.9604644775390625e-8f;  // 2^-24
}

// Weights the draws walk: w(i) >= 0.
struct SliceWeights {      // exp(z_i - m) of a row's stored z
    device const uint* z;
    float m;
    float weight(uint i) const { return exp(as_type<float>(z[i]) - m); }
};

struct BlockWeights {      // the mass of each block: sum_b * exp(max_b - m)
    device const uint* stats;
    float m;
    float weight(uint b) const { return as_type<float>(stats[3u * b + 1u]) * exp(as_type<float>(stats[3u * b]) - m); }
};

struct KeptWeights {       // exp(z_i - m) over the kept set, 0 elsewhere
    device const uint* z;
    float m;
    bool cut_on;           // top-p: keys above cut_key, and ties at it up to cut_index
    uint cut_key;
    uint cut_index;
    float min_p;
    float weight(uint i) const {
        const float zi = as_type<float>(z[i]);
        const float w = exp(zi - m);
        const uint k = order_key(zi);
        const bool top = !cut_on || k > cut_key || (k == cut_key && i <= cut_index);
        return top && w >= min_p ? w : 0.0f;
    }
};

// The first i of [0, n) at which the running sum of w exceeds u times its
// total (the last i with w > 0 if rounding leaves none); `before` gets the
// running sum ahead of it, `total` the total. Contiguous chunks per thread.
template <typename W>
static inline uint draw_in_order(W w, uint n, float u, thread float& before, thread float& total,
                                 threadgroup float* partials, threadgroup atomic_uint* pick, threadgroup atomic_uint* last,
                                 threadgroup float* pick_before, uint tid, uint tg_size, uint sg, uint lane, uint n_sg) {
    const uint chunk = (n + tg_size - 1u) / tg_size;
    const uint b0 = min(n, tid * chunk);
    const uint b1 = min(n, b0 + chunk);
    float own = 0.0f;
    for (uint i = b0; i < b1; ++i) {
        own += w.weight(i);
    }
    float all;
    const float start = threadgroup_prefix_sum(own, all, partials, sg, lane, n_sg);
    if (tid == 0u) {
        atomic_store_explicit(pick, 0xffffffffu, memory_order_relaxed);
        atomic_store_explicit(last, 0u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float target = u * all;
    float c = start;
    uint mine = 0xffffffffu;
    uint last_positive = 0u;  // index + 1
    float c_mine = 0.0f;
    for (uint i = b0; i < b1; ++i) {
        const float wi = w.weight(i);
        if (wi > 0.0f) {
            last_positive = i + 1u;
            if (c + wi > target) {
                mine = i;
                c_mine = c;
                break;
            }
            c += wi;
        }
    }
    if (mine != 0xffffffffu) {
        atomic_fetch_min_explicit(pick, mine, memory_order_relaxed);
    }
    atomic_fetch_max_explicit(last, last_positive, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint picked = atomic_load_explicit(pick, memory_order_relaxed);
    const uint fallback = atomic_load_explicit(last, memory_order_relaxed) - 1u;
    if (mine != 0xffffffffu && mine == picked) {
        pick_before[0] = c_mine;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    total = all;
    if (picked != 0xffffffffu) {
        before = pick_before[0];
        return picked;
    }
    if (fallback == 0xffffffffu) {  // no weight above 0 (the callers' sets always hold one)
        before = 0.0f;
        return 0u;
    }
    before = all - w.weight(fallback);
    return fallback;
}

// The candidates' cut and draw: w_r = exp(vals[r] - zmax) for r < mc, in
// rank order. The kept prefix ends at the first r whose predecessors hold
// top_p * ref or more (ref: the candidates' mass with top-k, else `mass`),
// or whose w_r is below min_p; the draw is the first kept r whose running
// weight exceeds u times the kept mass (`kept`). `over`: top_k = 0 and every
// candidate kept, so the kept set may reach past them (nothing drawn then).
// Contiguous chunks per thread, scanned in parallel.
static inline uint draw_candidates(threadgroup const float* vals, uint mc, float zmax, float mass, constant SampleParams& p,
                                   float u, thread float& kept, thread bool& over, threadgroup float* partials,
                                   threadgroup atomic_uint* cut, threadgroup atomic_uint* pick, threadgroup atomic_uint* last,
                                   uint tid, uint tg_size, uint sg, uint lane, uint n_sg) {
    const uint chunk = (mc + tg_size - 1u) / tg_size;
    const uint c0 = min(mc, tid * chunk);
    const uint c1 = min(mc, c0 + chunk);
    float own = 0.0f;
    for (uint r = c0; r < c1; ++r) {
        own += exp(vals[r] - zmax);
    }
    float cand_mass;
    const float start = threadgroup_prefix_sum(own, cand_mass, partials, sg, lane, n_sg);
    const float ref = p.top_k > 0u ? cand_mass : mass;
    if (tid == 0u) {
        atomic_store_explicit(cut, mc, memory_order_relaxed);
        atomic_store_explicit(pick, 0xffffffffu, memory_order_relaxed);
        atomic_store_explicit(last, 0u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float c = start;
    for (uint r = c0; r < c1; ++r) {
        const float w = exp(vals[r] - zmax);
        if ((p.top_p < 1.0f && !(c < p.top_p * ref)) || !(w >= p.min_p)) {
            atomic_fetch_min_explicit(cut, r, memory_order_relaxed);
            break;
        }
        c += w;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint len = atomic_load_explicit(cut, memory_order_relaxed);
    over = p.top_k == 0u && len == mc && mc < p.n_vocab;
    const uint k1 = min(c1, len);
    float kept_own = 0.0f;
    for (uint r = c0; r < k1; ++r) {
        kept_own += exp(vals[r] - zmax);
    }
    c = threadgroup_prefix_sum(kept_own, kept, partials, sg, lane, n_sg);
    const float target = u * kept;
    uint mine = 0xffffffffu;
    uint last_positive = 0u;
    for (uint r = c0; r < k1; ++r) {
        const float w = exp(vals[r] - zmax);
        if (w > 0.0f) {
            last_positive = r + 1u;
            if (c + w > target) {
                mine = r;
                break;
            }
            c += w;
        }
    }
    if (mine != 0xffffffffu) {
        atomic_fetch_min_explicit(pick, mine, memory_order_relaxed);
    }
    atomic_fetch_max_explicit(last, last_positive, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint picked = atomic_load_explicit(pick, memory_order_relaxed);
    return picked != 0xffffffffu ? picked : atomic_load_explicit(last, memory_order_relaxed) - 1u;
}

// The top-p cut over a whole row: the key t of the token at which the mass
// of the rank order (from the top) reaches target, and in `above` the mass of
// keys above t. Eight passes of 4-bit digits, 16 masses each, every sum in a
// fixed order.
static inline uint top_p_key(device const uint* z, uint n, float m, float target, thread float& above,
                             threadgroup float* partials, uint tid, uint tg_size, uint sg, uint lane, uint n_sg) {
    uint prefix = 0u;
    float mass_above = 0.0f;
    for (uint pass = 0; pass < 8u; ++pass) {
        const uint shift = 28u - 4u * pass;
        float bins[16];
        for (uint d = 0; d < 16u; ++d) {
            bins[d] = 0.0f;
        }
        for (uint i = tid; i < n; i += tg_size) {
            const float zi = as_type<float>(z[i]);
            const uint k = order_key(zi);
            if (pass == 0u || (k >> (shift + 4u)) == (prefix >> (shift + 4u))) {
                bins[(k >> shift) & 15u] += exp(zi - m);
            }
        }
        uint digit = 16u;
        uint lowest = 0u;
        float lowest_mass = 0.0f;
        float acc = mass_above;
        for (uint e = 0; e < 16u; ++e) {
            const uint d = 15u - e;
            const float bd = threadgroup_sum(bins[d], partials, sg, lane, n_sg);
            if (digit == 16u) {
                if (bd > 0.0f) {
                    lowest = d;
                    lowest_mass = bd;
                }
                if (acc + bd >= target) {
                    digit = d;
                } else {
                    acc += bd;
                }
            }
        }
        if (digit == 16u) {  // rounding left the target out of reach: the last digit with mass
            digit = lowest;
            acc -= lowest_mass;
        }
        mass_above = acc;
        prefix |= digit << shift;
    }
    above = mass_above;
    return prefix;
}

// buffer(0) logits [rows, n_vocab], (1) prev_tokens [rows, n_prev] u32 (any
// buffer when n_prev = 0), (2) scratch, (3) params. grid (rows, n_blocks, 1),
// any threadgroup size up to 1024.
kernel void sample_blocks_f32(
    device const float*    logits      [[buffer(0)]],
    device const uint*     prev_tokens [[buffer(1)]],
    device uint*           scratch     [[buffer(2)]],
    constant SampleParams& p           [[buffer(3)]],
    uint2 pos      [[threadgroup_position_in_grid]],
    uint tid       [[thread_index_in_threadgroup]],
    uint tg_size   [[threads_per_threadgroup]],
    uint sg        [[simdgroup_index_in_threadgroup]],
    uint lane      [[thread_index_in_simdgroup]],
    uint n_sg      [[simdgroups_per_threadgroup]],
    uint sg_width  [[threads_per_simdgroup]])
{
    threadgroup uchar flags[SAMPLE_MAX_SLICE];
    threadgroup float red_v[SAMPLE_MAX_THREADS];
    threadgroup uint red_i[SAMPLE_MAX_THREADS];
    threadgroup float partials[SAMPLE_MAX_THREADS / 32];
    threadgroup float vals[SAMPLE_MAX_K];
    threadgroup uint idxs[SAMPLE_MAX_K];
    threadgroup atomic_uint hist[RADIX_BINS];
    threadgroup uint found[4];
    threadgroup atomic_uint counter;
    const uint row = pos.x;
    const uint b = pos.y;
    const uint n = p.n_vocab;
    const uint lo = b * p.slice;
    const uint len = min(p.slice, n - lo);
    const bool penalize = p.n_prev > 0u && p.repetition_penalty != 1.0f;
    if (penalize) {
        for (uint i = tid; i < len; i += tg_size) {
            flags[i] = 0;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        device const uint* prev = prev_tokens + ulong(row) * p.n_prev;
        for (uint j = tid; j < p.n_prev; j += tg_size) {
            const uint t = prev[j];
            if (t >= lo && t - lo < len) {
                flags[t - lo] = 1;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    const float inv_t = p.temperature > 0.0f ? 1.0f / p.temperature : 1.0f;
    device const float* x = logits + ulong(row) * n + lo;
    device uint* z = scratch + ulong(row) * n + lo;
    uint best_key = 0u;
    uint at = 0xffffffffu;
    float m = -INFINITY;
    float s = 0.0f;
    for (uint i = tid; i < len; i += tg_size) {
        const float v = sample_value(x[i], penalize && flags[i] != 0, p.repetition_penalty, inv_t);
        z[i] = as_type<uint>(v);
        const uint k = order_key(v);
        if (k > best_key) {
            best_key = k;
            at = i;
        }
        if (v > m) {  // running (max, sum of exp(v - max))
            s = s * exp(m - v) + 1.0f;
            m = v;
        } else if (v != -INFINITY) {
            s += exp(v - m);
        }
    }
    float bm = at == 0xffffffffu ? -INFINITY : as_type<float>(z[at]);
    uint bi = at == 0xffffffffu ? at : lo + at;
    threadgroup_argmax(bm, bi, red_v, red_i, tid, tg_size);
    const float bs = threadgroup_sum(bm == -INFINITY ? 0.0f : s * exp(m - bm), partials, sg, lane, n_sg);
    if (tid == 0u) {
        device uint* stats = scratch + ulong(p.rows) * n + (ulong(row) * p.n_blocks + b) * 3u;
        stats[0] = as_type<uint>(bm);
        stats[1] = as_type<uint>(bs);
        stats[2] = bi;
    }
    if (p.n_cand == 0u || p.temperature == 0.0f) {
        return;
    }
    // This threadgroup's z, written above, read back by other threads.
    threadgroup_barrier(mem_flags::mem_device);
    const uint mc = min(p.n_cand, len);
    const BitsItems items = {z, lo};
    threadgroup_top(items, len, mc, pow2_at_least(mc), vals, idxs, hist, found, &counter, tid, tg_size, sg, lane, min(tg_size, sg_width));
    device uint* out = scratch + ulong(p.rows) * (n + 3u * p.n_blocks)
                     + (ulong(row) * p.n_blocks + b) * p.n_cand * 2u;
    for (uint r = tid; r < p.n_cand; r += tg_size) {
        out[2u * r] = as_type<uint>(r < mc ? vals[r] : -INFINITY);
        out[2u * r + 1u] = r < mc ? idxs[r] : 0xffffffffu;
    }
}

// buffer(0) scratch (as sample_blocks_f32 left it), (1) out_token [rows] u32,
// (2) out_logprob [rows], (3) params. grid (rows, 1, 1), any threadgroup size
// up to 1024.
kernel void sample_finish_f32(
    device const uint*     scratch     [[buffer(0)]],
    device uint*           out_token   [[buffer(1)]],
    device float*          out_logprob [[buffer(2)]],
    constant SampleParams& p           [[buffer(3)]],
    uint row       [[threadgroup_position_in_grid]],
    uint tid       [[thread_index_in_threadgroup]],
    uint tg_size   [[threads_per_threadgroup]],
    uint sg        [[simdgroup_index_in_threadgroup]],
    uint lane      [[thread_index_in_simdgroup]],
    uint n_sg      [[simdgroups_per_threadgroup]],
    uint sg_width  [[threads_per_simdgroup]])
{
    threadgroup float red_v[SAMPLE_MAX_THREADS];
    threadgroup uint red_i[SAMPLE_MAX_THREADS];
    threadgroup float partials[SAMPLE_MAX_THREADS / 32];
    threadgroup float vals[SAMPLE_MAX_K];
    threadgroup uint idxs[SAMPLE_MAX_K];
    threadgroup atomic_uint hist[RADIX_BINS];
    threadgroup uint found[4];
    threadgroup atomic_uint counter;
    threadgroup atomic_uint pick;
    threadgroup atomic_uint last;
    threadgroup float pick_before[1];
    const uint n = p.n_vocab;
    const uint nb = p.n_blocks;
    device const uint* z = scratch + ulong(row) * n;
    device const uint* stats = scratch + ulong(p.rows) * n + ulong(row) * nb * 3u;

    // The row's max (and greedy token) from the blocks'.
    float zmax = -INFINITY;
    uint best = 0xffffffffu;
    for (uint b = tid; b < nb; b += tg_size) {
        const float v = as_type<float>(stats[3u * b]);
        const uint ix = stats[3u * b + 2u];
        if (ranks_before(order_key(v), ix, order_key(zmax), best)) {
            zmax = v;
            best = ix;
        }
    }
    threadgroup_argmax(zmax, best, red_v, red_i, tid, tg_size);
    if (zmax == -INFINITY || p.temperature == 0.0f) {
        if (tid == 0u) {
            out_token[row] = zmax == -INFINITY ? 0xffffffffu : best;
            out_logprob[row] = zmax == -INFINITY ? -INFINITY : 0.0f;
        }
        return;
    }
    float zs = 0.0f;
    const BlockWeights blocks = {stats, zmax};
    for (uint b = tid; b < nb; b += tg_size) {
        zs += blocks.weight(b);
    }
    const float mass = threadgroup_sum(zs, partials, sg, lane, n_sg);
    const float u = sample_uniform(p, row);

    if (p.n_cand > 0u) {
        const uint mc = min(p.n_cand, n);
        const PairItems items = {scratch + ulong(p.rows) * (n + 3u * nb) + ulong(row) * nb * p.n_cand * 2u};
        threadgroup_top(items, nb * p.n_cand, mc, pow2_at_least(mc), vals, idxs, hist, found, &counter,
                        tid, tg_size, sg, lane, min(tg_size, sg_width));
        float kept;
        bool over;
        const uint r = draw_candidates(vals, mc, zmax, mass, p, u, kept, over, partials, &counter, &pick, &last,
                                       tid, tg_size, sg, lane, n_sg);
        if (!over) {
            if (tid == 0u) {
                out_token[row] = idxs[r];
                out_logprob[row] = (vals[r] - zmax) - log(kept);
            }
            return;
        }
    }

    float before;
    float total;
    if (p.n_cand == 0u) {
        // Every token: the block by its mass, then the token inside it.
        float wb;
        const uint b = draw_in_order(blocks, nb, u, before, total, partials, &pick, &last, pick_before,
                                     tid, tg_size, sg, lane, n_sg);
        wb = blocks.weight(b);
        const float ub = clamp((u * total - before) / wb, 0.0f, 0.99999994f);
        const uint lo = b * p.slice;
        const SliceWeights slice = {z + lo, zmax};
        float sb;
        float st;
        const uint i = draw_in_order(slice, min(p.slice, n - lo), ub, sb, st, partials, &pick, &last, pick_before,
                                     tid, tg_size, sg, lane, n_sg);
        if (tid == 0u) {
            out_token[row] = lo + i;
            out_logprob[row] = (as_type<float>(z[lo + i]) - zmax) - log(total);
        }
        return;
    }

    // top_k = 0 and the candidates did not hold the kept set: the whole row,
    // in index order.
    KeptWeights w = {z, zmax, p.top_p < 1.0f, 0u, 0xffffffffu, p.min_p};
    if (w.cut_on) {
        const float target = p.top_p * mass;
        float above;
        const uint t = top_p_key(z, n, zmax, target, above, partials, tid, tg_size, sg, lane, n_sg);
        // Ties at t: as many as the target still needs, lowest indices first.
        const uint chunk = (n + tg_size - 1u) / tg_size;
        const uint b0 = min(n, tid * chunk);
        const uint b1 = min(n, b0 + chunk);
        float own = 0.0f;
        for (uint i = b0; i < b1; ++i) {
            own += order_key(as_type<float>(z[i])) == t ? 1.0f : 0.0f;
        }
        if (tid == 0u) {
            found[0] = 0xffffffffu;  // every tie, should rounding leave the count unreached
        }
        float ties;
        const float start = threadgroup_prefix_sum(own, ties, partials, sg, lane, n_sg);
        const float q = exp(key_value(t) - zmax);
        const float need = q > 0.0f ? clamp(ceil((target - above) / q), 1.0f, ties) : ties;
        if (start < need && need <= start + own) {
            float c = start;
            for (uint i = b0; i < b1; ++i) {
                if (order_key(as_type<float>(z[i])) == t) {
                    c += 1.0f;
                    if (c == need) {
                        found[0] = i;
                        break;
                    }
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        w.cut_key = t;
        w.cut_index = found[0];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    const uint i = draw_in_order(w, n, u, before, total, partials, &pick, &last, pick_before,
                                 tid, tg_size, sg, lane, n_sg);
    if (tid == 0u) {
        out_token[row] = i;
        out_logprob[row] = (as_type<float>(z[i]) - zmax) - log(total);
    }
}
