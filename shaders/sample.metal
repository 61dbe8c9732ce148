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
//   top_k_blocks_f32      pass 1 of 2: each slice's own top k, unordered
//   top_k_merge_f32       pass 2: the top k of the slices' candidates, sorted
//   softmax_sample_f32    mlx-native's: softmax(x / T), then the first token
//                         whose CDF reaches random_val; one threadgroup
//   sample_blocks_f32     sampler pass 1: penalized, tempered logits z, each
//                         slice's max, index of the max, sum of exp(z - max)
//                         and (n_cand > 0) top n_cand
//   sample_mass_f32       sampler passes over the whole row (top-k 0 with
//                         top-p or min-p): the top-p cut's mass histograms
//                         and each slice's kept mass
//   sample_finish_f32     sampler's last pass: one threadgroup per row
//   philox4x32_10_u32     Philox4x32-10 of consecutive counters
//
// Top-k in one threadgroup is a radix select on the 64-bit keys: 8-bit
// digits from the top, a 256-bin histogram per digit, until the group of the
// k-th key holds exactly what is still needed (2 or 3 digits for random
// floats; the index digits only for ties). Each thread holds SAMPLE_ITEMS
// keys, loaded once when the items fit (every slice of the block passes),
// else reloaded per digit. The items past the cut are gathered, then ranked
// by counting (each against all the others), which writes them sorted.
// Every result is independent of the threads' timing.

enum SampleLimits : uint {
    SAMPLE_MAX_K = 256,        // top-k, and the sampler's candidates
    SAMPLE_MAX_THREADS = 1024, // threads of a threadgroup
    SAMPLE_MAX_SLICE = 4096,   // elements of one sample_blocks_f32 threadgroup
    RADIX_BINS = 256,          // one 8-bit digit
    SAMPLE_ITEMS = 16,         // items a thread holds at once
    SAMPLE_HIST_BINS = 2048,   // bins of the whole-row rounds 0 and 1 (11-bit digits)
    SAMPLE_LAST_BINS = 1024,   // bins of round 2 (the last 10 bits)
    SAMPLE_HIST_WORDS = 9216,  // per row: rounds 0 and 1 (2048 64-bit masses each), round 2 (1024 counts)
    SAMPLE_STATE_WORDS = 24,   // per row: what rounds 0 and 1 decided, 8 words each; 8 for CUDA's list counts
    SAMPLE_REC_CAP = 32,       // distinct keys a slice's record lists
    SAMPLE_REC_WORDS = 36,     // per slice: kept mass, key count, SAMPLE_REC_CAP keys, padding
    SAMPLE_SUM_WORDS = 32,     // per slice: the summary of its candidates that CUDA's passes write (these leave it)
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

// The first index of this thread's elements of x[0, n) (tid, tid + tg_size,
// ...) holding the largest key, 0xffffffff if it has none; then the value
// there (-inf if none) and the threadgroup's best (threadgroup_argmax), to
// every thread. Indices ascend, so the first of equal values stays.
static inline void scan_argmax(device const float* x, uint n, thread float& v, thread uint& ix, threadgroup float* vals,
                               threadgroup uint* idxs, uint tid, uint tg_size) {
    uint best_key = 0u;  // below every element's key
    ix = 0xffffffffu;
    for (uint i = tid; i < n; i += tg_size) {
        const uint k = order_key(x[i]);
        if (k > best_key) {
            best_key = k;
            ix = i;
        }
    }
    v = ix == 0xffffffffu ? -INFINITY : x[ix];
    threadgroup_argmax(v, ix, vals, idxs, tid, tg_size);
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


// One element of an arg-max reduction: (key, index) replaces the best when
// it ranks before it.
static inline void keep_best(thread uint& key, thread uint& ix, uint k, uint i) {
    if (k > key || (k == key && i < ix)) {
        key = k;
        ix = i;
    }
}

// The best (key, index) of the threadgroup, returned to every thread:
// simdgroup shuffles, then each thread merges the simdgroups' bests in one
// order. pk, pi: one word per simdgroup; a barrier ends the call, so they can
// be reused at once.
static inline void threadgroup_best(thread uint& key, thread uint& ix, threadgroup uint* pk, threadgroup uint* pi,
                                    uint tg_size, uint sg, uint lane, uint n_sg) {
    const uint lanes = min(32u, tg_size - 32u * sg);
    for (uint o = 16u; o > 0u; o >>= 1u) {
        const uint k = simd_shuffle_down(key, ushort(o));
        const uint i = simd_shuffle_down(ix, ushort(o));
        if (lane + o < lanes) {
            keep_best(key, ix, k, i);
        }
    }
    if (lane == 0u) {
        pk[sg] = key;
        pi[sg] = ix;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    key = pk[0];
    ix = pi[0];
    for (uint s = 1u; s < n_sg; ++s) {
        keep_best(key, ix, pk[s], pi[s]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
}

// ---- items a threadgroup selects among ----
//
// A threadgroup takes its n items in chunks of SAMPLE_ITEMS per thread: slot
// j of thread tid in chunk c is item c * SAMPLE_ITEMS * tg_size + ((j / g) *
// tg_size + tid) * g + j % g, g items in a row per thread and step (16-byte
// loads on CUDA). A source's load(c) fills key[] (and what index() needs) for
// chunk c; slots past n hold anything.

static inline uint item_pos(uint c, uint j, uint g, uint tid, uint tg_size) {
    return c * SAMPLE_ITEMS * tg_size + ((j / g) * tg_size + tid) * g + j % g;
}

static inline uint item_chunks(uint n, uint tg_size) {
    return (n + SAMPLE_ITEMS * tg_size - 1u) / (SAMPLE_ITEMS * tg_size);
}

// Values in device memory, indices base + item.
struct FloatSrc {
    device const float* v;
    uint n;
    uint base;
    uint key[SAMPLE_ITEMS];
    uint pos(uint c, uint j, uint tid, uint tg_size) const { return item_pos(c, j, 4u, tid, tg_size); }
    uint index(uint c, uint j, uint tid, uint tg_size) const { return base + pos(c, j, tid, tg_size); }
    void load(uint c, uint tid, uint tg_size) {
        for (uint j = 0; j < SAMPLE_ITEMS; ++j) {
            const uint e = pos(c, j, tid, tg_size);
            key[j] = e < n ? order_key(v[e]) : 0u;
        }
    }
};

// (value bits, index) pairs, as the block passes write their candidates.
struct PairSrc {
    device const uint* p;
    uint n;
    uint key[SAMPLE_ITEMS];
    uint idx[SAMPLE_ITEMS];
    uint pos(uint c, uint j, uint tid, uint tg_size) const { return item_pos(c, j, 2u, tid, tg_size); }
    uint index(uint c, uint j, uint tid, uint tg_size) const { return idx[j]; }
    void load(uint c, uint tid, uint tg_size) {
        for (uint j = 0; j < SAMPLE_ITEMS; ++j) {
            const uint e = pos(c, j, tid, tg_size);
            key[j] = e < n ? order_key(as_type<float>(p[2u * e])) : 0u;
            idx[j] = e < n ? p[2u * e + 1u] : 0xffffffffu;
        }
    }
};

// Where gathered or ranked items go: put(slot, key, index).
struct GroupSink {         // keys and indices in threadgroup memory
    threadgroup uint* k;
    threadgroup uint* i;
    void put(uint s, uint key, uint ix) {
        k[s] = key;
        i[s] = ix;
    }
};

struct PairSink {          // (value bits, index) pairs in device memory
    device uint* out;
    void put(uint s, uint key, uint ix) {
        out[2u * s] = as_type<uint>(key_value(key));
        out[2u * s + 1u] = ix;
    }
};

struct OutSink {           // top-k's outputs at row offset o
    device float* values;
    device uint* indices;
    ulong o;
    void put(uint r, uint key, uint ix) {
        values[o + r] = key_value(key);
        indices[o + r] = ix;
    }
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

// The cut that keeps exactly the `want` best of src's n items (everything
// when want >= n). The caller has loaded chunk 0 when the items fit in one
// chunk; with more, each digit reloads them. hist: 256 counters; found: 3
// words. lanes: threads of simdgroup 0.
template <typename Src>
static inline Cut select_cut(thread Src& src, uint want, threadgroup atomic_uint* hist, threadgroup uint* found,
                             uint tid, uint tg_size, uint sg, uint lane, uint lanes) {
    Cut cut = {0u, 0u, 0u, 0u};
    const uint n = src.n;
    if (want >= n) {
        return cut;
    }
    const uint chunks = item_chunks(n, tg_size);
    uint need = want;
    for (uint d = 0; d < 8u; ++d) {
        for (uint b = tid; b < RADIX_BINS; b += tg_size) {
            atomic_store_explicit(&hist[b], 0u, memory_order_relaxed);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const uint shift = 24u - 8u * (d & 3u);
        for (uint c = 0; c < chunks; ++c) {
            if (chunks > 1u) {
                src.load(c, tid, tg_size);
            }
            for (uint j = 0; j < SAMPLE_ITEMS; ++j) {
                if (src.pos(c, j, tid, tg_size) < n) {
                    const uint key = src.key[j];
                    const uint inv = ~src.index(c, j, tid, tg_size);
                    if ((key & cut.mask_hi) == cut.hi && (inv & cut.mask_lo) == cut.lo) {
                        atomic_fetch_add_explicit(&hist[((d < 4u ? key : inv) >> shift) & 255u], 1u, memory_order_relaxed);
                    }
                }
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

// The items the cut keeps (exactly m of them), each put at a slot counted
// on `counter`, which holds 0, visibly to every thread, when called. The
// slots' order depends on the threads' timing; what fills them does not.
template <typename Src, typename Sink>
static inline void gather_cut(thread Src& src, Cut cut, uint m, thread Sink& sink, threadgroup atomic_uint* counter,
                              uint tid, uint tg_size) {
    const uint n = src.n;
    const uint chunks = item_chunks(n, tg_size);
    for (uint c = 0; c < chunks; ++c) {
        if (chunks > 1u) {
            src.load(c, tid, tg_size);
        }
        for (uint j = 0; j < SAMPLE_ITEMS; ++j) {
            if (src.pos(c, j, tid, tg_size) < n) {
                const uint key = src.key[j];
                const uint ix = src.index(c, j, tid, tg_size);
                if (cut_keeps(cut, key, ix)) {
                    const uint slot = atomic_fetch_add_explicit(counter, 1u, memory_order_relaxed);
                    if (slot < m) {
                        sink.put(slot, key, ix);
                    }
                }
            }
        }
    }
}

// Puts each of the m items (ks[i], is[i]) (distinct 64-bit keys) at its rank,
// the number of items ranking before it: p lanes of a simdgroup count for
// one item and add by shuffles. Reads ks and is only.
template <typename Sink>
static inline void rank_sort(threadgroup const uint* ks, threadgroup const uint* is, uint m, thread Sink& sink,
                             uint tid, uint tg_size) {
    uint p = 1u;
    while (p < 32u && 2u * p * m <= tg_size && tg_size % (2u * p) == 0u) {
        p <<= 1u;
    }
    const uint per = tg_size / p;
    const uint part = tid % p;
    for (uint base = 0; base < m; base += per) {
        const uint i = base + tid / p;
        uint cnt = 0u;
        uint ki = 0u;
        uint ii = 0u;
        if (i < m) {
            ki = ks[i];
            ii = is[i];
            for (uint j = part; j < m; j += p) {
                cnt += ranks_before(ks[j], is[j], ki, ii) ? 1u : 0u;
            }
        }
        for (uint o = 1u; o < p; o <<= 1u) {
            cnt += simd_shuffle_xor(cnt, ushort(o));
        }
        if (i < m && part == 0u) {
            sink.put(cnt, ki, ii);
        }
    }
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
    float v;
    uint ix;
    scan_argmax(input + ulong(row) * n, n, v, ix, vals, idxs, tid, tg_size);
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
    float v;
    uint ix;
    scan_argmax(input + ulong(row) * p.n_elements + lo, len, v, ix, vals, idxs, tid, tg_size);
    ix = ix == 0xffffffffu ? ix : lo + ix;
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
        float v;
        uint ix;
        scan_argmax(x, n, v, ix, vals, idxs, tid, tg_size);
        for (uint r = tid; r < k; r += tg_size) {
            out_values[o + r] = r == 0u ? v : -INFINITY;
            out_indices[o + r] = r == 0u ? ix : 0xffffffffu;
        }
        return;
    }
    // The histogram in vals, found and the counter past idxs[span): done
    // with before the kept items are gathered into vals and idxs.
    const uint span = pow2_at_least(m);
    threadgroup atomic_uint* hist = (threadgroup atomic_uint*)vals;
    threadgroup uint* found = idxs + span;
    threadgroup atomic_uint* counter = (threadgroup atomic_uint*)(idxs + span + 3u);
    if (tid == 0u) {
        atomic_store_explicit(counter, 0u, memory_order_relaxed);
    }
    FloatSrc src = {x, n, 0u};
    src.load(0u, tid, tg_size);
    const Cut cut = select_cut(src, m, hist, found, tid, tg_size, sg, lane, min(tg_size, sg_width));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    GroupSink kept = {(threadgroup uint*)vals, idxs};
    gather_cut(src, cut, m, kept, counter, tid, tg_size);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    OutSink out = {out_values, out_indices, o};
    rank_sort((threadgroup const uint*)vals, idxs, m, out, tid, tg_size);
    for (uint r = m + tid; r < k; r += tg_size) {
        out_values[o + r] = -INFINITY;
        out_indices[o + r] = 0xffffffffu;
    }
}

// buffer(0) input [rows, n_elements], (1) scratch: per row, candidates
// [n_blocks, k, 2] u32 (value bits, index; each slice's best min(k, slice)
// in no particular order, then (-inf, 0xffffffff) up to k), then
// [n_blocks, SAMPLE_SUM_WORDS] that shaders/cuda/sample.cu's twin fills
// with summaries and this one leaves; (2) params. grid (rows, n_blocks, 1),
// any threadgroup size up to 1024.
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
    threadgroup atomic_uint hist[RADIX_BINS];
    threadgroup uint found[4];
    threadgroup atomic_uint counter;
    const uint row = pos.x;
    const uint b = pos.y;
    const uint lo = b * p.slice;
    const uint len = min(p.slice, p.n_elements - lo);
    const uint m = min(p.k, len);
    if (tid == 0u) {
        atomic_store_explicit(&counter, 0u, memory_order_relaxed);
    }
    FloatSrc src = {input + ulong(row) * p.n_elements + lo, len, lo};
    src.load(0u, tid, tg_size);
    const Cut cut = select_cut(src, m, hist, found, tid, tg_size, sg, lane, min(tg_size, sg_width));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    device uint* out = candidates + ulong(row) * p.n_blocks * (2u * p.k + uint(SAMPLE_SUM_WORDS)) + ulong(b) * p.k * 2u;
    PairSink sink = {out};
    gather_cut(src, cut, m, sink, &counter, tid, tg_size);
    for (uint r = m + tid; r < p.k; r += tg_size) {
        out[2u * r] = as_type<uint>(-INFINITY);
        out[2u * r + 1u] = 0xffffffffu;
    }
}

// buffer(0) scratch (top_k_blocks_f32's), (1) out_indices [rows, k],
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
    threadgroup uint ks[SAMPLE_MAX_K];
    threadgroup uint is[SAMPLE_MAX_K];
    threadgroup atomic_uint hist[RADIX_BINS];
    threadgroup uint found[4];
    threadgroup atomic_uint counter;
    const uint m = min(p.k, p.n_elements);
    if (tid == 0u) {
        atomic_store_explicit(&counter, 0u, memory_order_relaxed);
    }
    // The slices hold at least m items in all, so the padding ranks below the cut.
    PairSrc src = {candidates + ulong(row) * p.n_blocks * (2u * p.k + uint(SAMPLE_SUM_WORDS)), p.n_blocks * p.k};
    src.load(0u, tid, tg_size);
    const Cut cut = select_cut(src, m, hist, found, tid, tg_size, sg, lane, min(tg_size, sg_width));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    GroupSink kept = {ks, is};
    gather_cut(src, cut, m, kept, &counter, tid, tg_size);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const ulong o = ulong(row) * p.k;
    OutSink out = {out_values, out_indices, o};
    rank_sort(ks, is, m, out, tid, tg_size);
    for (uint r = m + tid; r < p.k; r += tg_size) {
        out_values[o + r] = -INFINITY;
        out_indices[o + r] = 0xffffffffu;
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
// Passes (ts/ops/sample.ts plans them):
//   sample_blocks_f32   grid (rows, n_blocks): each slice's z (stored only
//                       where a later pass reads it: top_k = 0), its max,
//                       index of the max and sum of exp(z - max), and its top
//                       n_cand (value, index), unordered
//   sample_mass_f32     grid (rows, n_blocks), only for top_k = 0 with top-p
//                       or min-p over more than 256 tokens: passes 0, 1, 2
//                       (top-p), pass 2 alone (min-p); see below
//   sample_finish_f32   grid (rows): the row's max and mass from the slices;
//                       greedy; no filter: a slice by its mass, then a token in
//                       it; candidates: the top min(n_cand, n) of all slices'
//                       (radix select, ranked by counting), the filters and
//                       the draw in rank order in one simdgroup; where top_p or
//                       min_p keep all 256 (top_k = 0), the whole row in index
//                       order from sample_mass_f32's records.
//
// The whole-row top-p cut: the token T where the mass of the rank order,
// from the top, first reaches top_p times the row's mass; T and what ranks
// before it are kept. Masses are 64-bit fixed point, W(z) = floor(exp(z -
// z_max) * 2^s) with s = 63 - ceil(log2 n_vocab) (no sum overflows; weights
// below 2^-s of the top one count as 0), so every histogram and sum is exact
// whatever order the atomics land in. Pass 0 adds W into 2048 bins by the top
// 11 bits of the key; pass 1 finds the bin where the mass reaches the target
// and bins the keys inside it by their next 11 bits; pass 2 finds that bin
// and counts the keys inside it by their last 10 bits (one key per bin, so
// a bin's mass is its count times W of its key), and writes each slice's
// record: the mass of its tokens above that range (min-p applied) and its
// distinct keys inside it with their counts. The finish finds the last digit,
// so the key t of T and the tokens of key t to keep (lowest indices first),
// and draws from the records.
//
// scratch (u32 words), each region for all rows, 16-byte aligned (layout()):
//   z       [rows, zs]              zs = n_vocab rounded up to 4; float bits
//   stats   [rows, nb2, 4]          per slice (max, sum, index of max, 0);
//                                   nb2 = slices of 2048
//   cand    [rows, nb4 * 512]       n_blocks * n_cand (value bits, index);
//                                   shaders/cuda/sample.cu's whole-row
//                                   passes keep a row list of up to 256
//                                   pairs there instead
//   hist    [rows, HIST_WORDS]      rounds 0 and 1: 2048 (lo, hi) masses;
//                                   round 2: 1024 counts
//   state   [rows, STATE_WORDS]     rounds 0 and 1: (prefix, above lo, hi,
//                                   target lo, hi, keep all, 0, 0); then
//                                   8 words of shaders/cuda/sample.cu's
//                                   (its lists' counts)
//   records [rows, nb4, REC_WORDS]  per slice of 4096: kept mass, key
//                                   count (0xffffffff: more than REC_CAP),
//                                   keys (last digit | count << 10)
//   sums    [rows, nb2, SUM_WORDS]  per slice: shaders/cuda/sample.cu's
//                                   candidate summaries
// ts/ops/sample.ts (sampleScratchElements) sizes it the same way.

struct SampleLayout {
    ulong z;
    ulong stats;
    ulong cand;
    ulong hist;
    ulong state;
    ulong rec;
    uint zs;
    uint nb2;
    uint nb4;
};

static inline SampleLayout sample_layout(constant SampleParams& p) {
    SampleLayout l;
    const ulong rows = p.rows;
    l.zs = (p.n_vocab + 3u) & ~3u;
    l.nb2 = (p.n_vocab + 2047u) / 2048u;
    l.nb4 = (p.n_vocab + 4095u) / 4096u;
    l.z = 0u;
    l.stats = l.z + rows * l.zs;
    l.cand = l.stats + rows * l.nb2 * 4u;
    l.hist = l.cand + rows * l.nb4 * 512u;
    l.state = l.hist + rows * uint(SAMPLE_HIST_WORDS);
    l.rec = l.state + rows * uint(SAMPLE_STATE_WORDS);
    return l;
}

// The whole row may be needed: top_k = 0 with top-p or min-p, and more
// tokens than candidates. With top_p < 1, the three mass passes run.
static inline bool sample_whole_row(constant SampleParams& p) {
    return p.temperature > 0.0f && p.top_k == 0u && p.n_cand > 0u && p.n_cand < p.n_vocab;
}

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

// 2^s of the fixed-point masses, s = 63 - ceil(log2 n_vocab).
static inline float mass_scale(uint n_vocab) {
    const uint lg = n_vocab > 1u ? 32u - clz(n_vocab - 1u) : 0u;
    return as_type<float>((127u + 63u - lg) << 23);
}

// W(z): exp(z - zmax) in fixed point (z <= zmax).
static inline ulong fixed_mass(float z, float zmax, float scale) {
    return z == -INFINITY ? 0ul : ulong(exp(z - zmax) * scale);
}

// A 64-bit add as two 32-bit atomics (lo, then hi with the carry): the
// final value does not depend on the order of the adds.
static inline void add64(threadgroup atomic_uint* lo, threadgroup atomic_uint* hi, ulong v) {
    const uint vl = uint(v);
    const uint old = atomic_fetch_add_explicit(lo, vl, memory_order_relaxed);
    const uint vh = uint(v >> 32) + (old + vl < old ? 1u : 0u);
    if (vh != 0u) {
        atomic_fetch_add_explicit(hi, vh, memory_order_relaxed);
    }
}

static inline void add64(device atomic_uint* lo, device atomic_uint* hi, ulong v) {
    const uint vl = uint(v);
    const uint old = atomic_fetch_add_explicit(lo, vl, memory_order_relaxed);
    const uint vh = uint(v >> 32) + (old + vl < old ? 1u : 0u);
    if (vh != 0u) {
        atomic_fetch_add_explicit(hi, vh, memory_order_relaxed);
    }
}

// The logits of one slice, penalized and tempered: key of z per item.
struct LogitSrc {
    device const float* x;
    threadgroup const uchar* flags;
    uint n;
    uint base;
    bool penalize;
    float penalty;
    float inv_t;
    uint key[SAMPLE_ITEMS];
    uint pos(uint c, uint j, uint tid, uint tg_size) const { return item_pos(c, j, 4u, tid, tg_size); }
    uint index(uint c, uint j, uint tid, uint tg_size) const { return base + pos(c, j, tid, tg_size); }
    void load(uint c, uint tid, uint tg_size) {
        for (uint j = 0; j < SAMPLE_ITEMS; ++j) {
            const uint e = pos(c, j, tid, tg_size);
            key[j] = e < n ? order_key(sample_value(x[e], penalize && flags[e] != 0, penalty, inv_t)) : 0u;
        }
    }
};

// Weights the draws walk, w(i) >= 0, in index order within each thread's
// chunk; reset() starts a chunk again.
struct SliceWeights {      // exp(z_i - m) of a row's stored z
    device const uint* z;
    float m;
    void reset() {}
    float weight(uint i) { return exp(as_type<float>(z[i]) - m); }
};

struct BlockWeights {      // the mass of each block: sum_b * exp(max_b - m)
    device const uint* stats;
    float m;
    void reset() {}
    float weight(uint b) { return as_type<float>(stats[4u * b + 1u]) * exp(as_type<float>(stats[4u * b]) - m); }
};

struct RecordWeights {     // each slice's kept mass, as the finish leaves it in the records
    device const uint* rec;
    void reset() {}
    float weight(uint b) { return as_type<float>(rec[uint(SAMPLE_REC_WORDS) * b]); }
};

struct KeptWeights {       // exp(z_i - m) over the whole-row kept set of one slice, 0 elsewhere
    device const uint* z;
    float m;
    uint t;                // keys above t are kept; of those equal to t, the first `ties`
    uint ties;
    float min_p;
    uint rank0;            // ties at t in the chunks of the threads before
    uint rank;
    void reset() { rank = rank0; }
    float weight(uint i) {
        const float zi = as_type<float>(z[i]);
        const uint k = order_key(zi);
        if (k < t) {
            return 0.0f;
        }
        if (k == t && rank++ >= ties) {
            return 0.0f;
        }
        const float w = exp(zi - m);
        return w >= min_p ? w : 0.0f;
    }
};

// The first i of [0, n) at which the running sum of w exceeds u times its
// total (the last i with w > 0 if rounding leaves none); `before` gets the
// running sum ahead of it, `total` the total. Contiguous chunks per thread.
template <typename W>
static inline uint draw_in_order(thread W& w, uint n, float u, thread float& before, thread float& total,
                                 threadgroup float* partials, threadgroup atomic_uint* pick, threadgroup atomic_uint* last,
                                 threadgroup float* pick_before, uint tid, uint tg_size, uint sg, uint lane, uint n_sg) {
    const uint chunk = (n + tg_size - 1u) / tg_size;
    const uint b0 = min(n, tid * chunk);
    const uint b1 = min(n, b0 + chunk);
    w.reset();
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
    float c_last = 0.0f;      // the running sum ahead of it
    w.reset();
    for (uint i = b0; i < b1; ++i) {
        const float wi = w.weight(i);
        if (wi > 0.0f) {
            last_positive = i + 1u;
            c_last = c;
            if (c + wi > target) {
                mine = i;
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
    const uint latest = atomic_load_explicit(last, memory_order_relaxed);
    const uint chosen = picked != 0xffffffffu ? picked : latest - 1u;
    if (last_positive != 0u && last_positive - 1u == chosen) {
        pick_before[0] = c_last;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    total = all;
    if (picked == 0xffffffffu && latest == 0u) {  // no weight above 0 (the callers' sets always hold one)
        before = 0.0f;
        return 0u;
    }
    before = pick_before[0];
    return chosen;
}

// The candidates' cut and draw, in simdgroup 0 (lane: its lane): w_r =
// exp(key_value(sk[r]) - zmax) for r < mc, in rank order; each lane takes a
// run of up to 8. The kept prefix ends at the first r whose predecessors hold
// top_p * ref or more (ref: the candidates' mass with top-k, else `mass`), or
// whose w_r is below min_p; the draw is the first kept r whose running weight
// exceeds u times the kept mass. res: the drawn rank, the kept mass's bits,
// and 1 where top_k = 0 and every candidate is kept, so the kept set may reach
// past them (then nothing is drawn).
static inline void draw_ranked(threadgroup const uint* sk, uint mc, float zmax, float mass, constant SampleParams& p,
                               float u, threadgroup uint* res, uint lane) {
    const uint per = (mc + 31u) / 32u;
    const uint r0 = min(mc, lane * per);
    const uint r1 = min(mc, r0 + per);
    float w[8];
    float own = 0.0f;
    for (uint q = 0; q < 8u; ++q) {
        w[q] = r0 + q < r1 ? exp(key_value(sk[r0 + q]) - zmax) : 0.0f;
        own += w[q];
    }
    const float start = simd_prefix_exclusive_sum(own);
    const float cand_mass = simd_sum(own);
    const float ref = p.top_k > 0u ? cand_mass : mass;
    uint cut = mc;
    float c = start;
    for (uint q = 0; q < 8u && r0 + q < r1; ++q) {
        if ((p.top_p < 1.0f && !(c < p.top_p * ref)) || !(w[q] >= p.min_p)) {
            cut = r0 + q;
            break;
        }
        c += w[q];
    }
    const uint len = simd_min(cut);
    float kept_own = 0.0f;
    for (uint q = 0; q < 8u; ++q) {
        kept_own += r0 + q < len ? w[q] : 0.0f;
    }
    c = simd_prefix_exclusive_sum(kept_own);
    const float kept = simd_sum(kept_own);
    const float target = u * kept;
    uint mine = 0xffffffffu;
    uint last_positive = 0u;
    for (uint q = 0; q < 8u && r0 + q < min(r1, len); ++q) {
        if (w[q] > 0.0f) {
            last_positive = r0 + q + 1u;
            if (c + w[q] > target) {
                mine = r0 + q;
                break;
            }
            c += w[q];
        }
    }
    const uint picked = simd_min(mine);
    const uint latest = simd_max(last_positive);
    if (lane == 0u) {
        res[0] = picked != 0xffffffffu ? picked : latest - 1u;
        res[1] = as_type<uint>(kept);
        res[2] = p.top_k == 0u && len == mc && mc < p.n_vocab ? 1u : 0u;
    }
}

// ---- the whole-row top-p cut ----

struct Derived {
    uint digit;            // the bin where the mass reaches the target (none: keep all)
    ulong above;           // the mass of the bins above it, plus the mass above the range
    ulong target;
    bool keep_all;         // the row's mass stays below the target: every token is kept
};

struct HistMass {          // 64-bit masses as (lo, hi) words
    device const uint* h;
    ulong mass(uint d) const { return ulong(h[2u * d]) | (ulong(h[2u * d + 1u]) << 32); }
};

struct CountMass {         // counts of one key per bin: count * W(key)
    device const uint* h;
    uint prefix;
    float zmax;
    float scale;
    ulong mass(uint d) const { return h[d] == 0u ? 0ul : ulong(h[d]) * fixed_mass(key_value(prefix | d), zmax, scale); }
};

// The bin of the histogram h (nbins, highest bins ranking first) where the
// running mass, from `above`, first reaches target. With `first`, above is 0
// and the target is top_p times the histogram's total (f32 product). Each
// thread sums a run of bins; integer sums, so every thread agrees. sums: one
// ulong per thread; res: 5 words.
template <typename H>
static inline Derived derive_digit(H h, uint nbins, ulong above, ulong target, bool first, float top_p,
                                   threadgroup ulong* sums, threadgroup uint* res, uint tid, uint tg_size) {
    const uint per = (nbins + tg_size - 1u) / tg_size;
    const uint top = nbins - min(nbins, tid * per);
    const uint bottom = nbins - min(nbins, (tid + 1u) * per);
    ulong s = 0ul;
    for (uint d = bottom; d < top; ++d) {
        s += h.mass(d);
    }
    sums[tid] = s;
    if (tid == 0u) {
        res[0] = 0xffffffffu;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    ulong ahead = 0ul;
    ulong all = 0ul;
    for (uint t = 0; t < tg_size; ++t) {
        const ulong v = sums[t];
        ahead += t < tid ? v : 0ul;
        all += v;
    }
    Derived r;
    r.target = first ? ulong(float(all) * top_p) : target;
    ulong acc = above + ahead;
    if (acc < r.target && r.target <= acc + s) {
        for (uint d = top; d > bottom; --d) {
            const ulong md = h.mass(d - 1u);
            if (acc + md >= r.target) {
                res[0] = d - 1u;
                res[1] = uint(acc);
                res[2] = uint(acc >> 32);
                break;
            }
            acc += md;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    r.digit = res[0];
    r.keep_all = r.digit == 0xffffffffu;
    r.above = r.keep_all ? 0ul : (ulong(res[1]) | (ulong(res[2]) << 32));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return r;
}

// What round r (0 or 1) decided, as pass r + 1 writes it and the next reads it.
static inline void put_state(device uint* st, uint prefix, Derived d) {
    st[0] = prefix;
    st[1] = uint(d.above);
    st[2] = uint(d.above >> 32);
    st[3] = uint(d.target);
    st[4] = uint(d.target >> 32);
    st[5] = d.keep_all ? 1u : 0u;
}

// The row's largest z, from the slices' stats (every threadgroup of a pass
// reduces them in one order).
static inline float row_max(device const uint* stats, uint nb, threadgroup float* partials,
                            uint tid, uint tg_size, uint sg, uint lane, uint n_sg) {
    float m = -INFINITY;
    for (uint b = tid; b < nb; b += tg_size) {
        m = max(m, as_type<float>(stats[4u * b]));
    }
    return threadgroup_max(m, partials, sg, lane, n_sg);
}

// buffer(0) logits [rows, n_vocab], (1) prev_tokens [rows, n_prev] u32 (any
// buffer when n_prev = 0), (2) scratch, (3) params. grid (rows, n_blocks, 1),
// any threadgroup size up to 1024 with slice <= SAMPLE_ITEMS per thread
// (larger slices reload their items per digit).
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
    threadgroup uint pk[SAMPLE_MAX_THREADS / 32];
    threadgroup uint pi[SAMPLE_MAX_THREADS / 32];
    threadgroup float partials[SAMPLE_MAX_THREADS / 32];
    threadgroup atomic_uint hist[RADIX_BINS];
    threadgroup uint found[4];
    threadgroup atomic_uint counter;
    const uint row = pos.x;
    const uint b = pos.y;
    const uint n = p.n_vocab;
    const uint lo = b * p.slice;
    const uint len = min(p.slice, n - lo);
    const SampleLayout L = sample_layout(p);
    if (tid == 0u) {
        atomic_store_explicit(&counter, 0u, memory_order_relaxed);
    }
    // The mass passes add into this row's histograms: each slice zeroes its share.
    if (sample_whole_row(p) && p.top_p < 1.0f) {
        const uint share = (uint(SAMPLE_HIST_WORDS) + p.n_blocks - 1u) / p.n_blocks;
        device uint* h = scratch + L.hist + ulong(row) * uint(SAMPLE_HIST_WORDS);
        for (uint i = b * share + tid; i < min(uint(SAMPLE_HIST_WORDS), (b + 1u) * share); i += tg_size) {
            h[i] = 0u;
        }
    }
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
    LogitSrc src = {logits + ulong(row) * n + lo, flags, len, lo, penalize, p.repetition_penalty,
                    p.temperature > 0.0f ? 1.0f / p.temperature : 1.0f};
    // z by chunks: stored where a later pass reads it, the thread's best and
    // running (max, sum of exp(z - max)).
    const bool store_z = p.temperature > 0.0f && p.top_k == 0u;
    device uint* z = scratch + L.z + ulong(row) * L.zs + lo;
    const uint chunks = item_chunks(len, tg_size);
    uint best = 0u;
    uint at = 0xffffffffu;
    float m = -INFINITY;
    float s = 0.0f;
    for (uint c = 0; c < chunks; ++c) {
        src.load(c, tid, tg_size);
        for (uint j = 0; j < SAMPLE_ITEMS; ++j) {
            const uint e = src.pos(c, j, tid, tg_size);
            if (e < len) {
                const uint k = src.key[j];
                const float v = key_value(k);
                if (store_z) {
                    z[e] = as_type<uint>(v);
                }
                if (k > best) {  // a thread's items ascend: the first of equal values stays
                    best = k;
                    at = lo + e;
                }
                if (v > m) {
                    s = s * exp(m - v) + 1.0f;
                    m = v;
                } else if (v != -INFINITY) {
                    s += exp(v - m);
                }
            }
        }
    }
    threadgroup_best(best, at, pk, pi, tg_size, sg, lane, n_sg);
    const float bm = key_value(best);
    const float bsum = threadgroup_sum(bm == -INFINITY || m == -INFINITY ? 0.0f : s * exp(m - bm), partials, sg, lane, n_sg);
    if (tid == 0u) {
        device uint* stats = scratch + L.stats + (ulong(row) * L.nb2 + b) * 4u;
        stats[0] = as_type<uint>(bm);
        stats[1] = as_type<uint>(bsum);
        stats[2] = at;
        stats[3] = 0u;
    }
    if (p.n_cand == 0u || p.temperature == 0.0f) {
        return;
    }
    const uint mc = min(p.n_cand, len);
    const Cut cut = select_cut(src, mc, hist, found, tid, tg_size, sg, lane, min(tg_size, sg_width));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    device uint* out = scratch + L.cand + ulong(row) * L.nb4 * 512u + ulong(b) * p.n_cand * 2u;
    PairSink sink = {out};
    gather_cut(src, cut, mc, sink, &counter, tid, tg_size);
    for (uint r = mc + tid; r < p.n_cand; r += tg_size) {
        out[2u * r] = as_type<uint>(-INFINITY);
        out[2u * r + 1u] = 0xffffffffu;
    }
}

// buffer(0) scratch (z and stats as sample_blocks_f32 left them), (1) params
// (pass 0, 1 or 2). grid (rows, n_blocks, 1), any threadgroup size up to 1024.
// Pass 0: round 0's histogram. Pass 1: round 0's bin (the state, from
// threadgroup (row, 0)), round 1's histogram. Pass 2: round 1's bin, round 2's
// counts and the slices' records; with top_p = 1 (min-p alone) the records
// alone, every token above the range.
kernel void sample_mass_f32(
    device uint*           scratch [[buffer(0)]],
    constant SampleParams& p       [[buffer(1)]],
    uint2 pos      [[threadgroup_position_in_grid]],
    uint tid       [[thread_index_in_threadgroup]],
    uint tg_size   [[threads_per_threadgroup]],
    uint sg        [[simdgroup_index_in_threadgroup]],
    uint lane      [[thread_index_in_simdgroup]],
    uint n_sg      [[simdgroups_per_threadgroup]])
{
    threadgroup atomic_uint hlo[SAMPLE_HIST_BINS];
    threadgroup atomic_uint hhi[SAMPLE_HIST_BINS];
    threadgroup ulong sums[SAMPLE_MAX_THREADS];
    threadgroup uint res[8];
    threadgroup float partials[SAMPLE_MAX_THREADS / 32];
    const uint row = pos.x;
    const uint b = pos.y;
    const uint n = p.n_vocab;
    const uint lo = b * p.slice;
    const uint len = min(p.slice, n - lo);
    const SampleLayout L = sample_layout(p);
    device const uint* stats = scratch + L.stats + ulong(row) * L.nb2 * 4u;
    const float zmax = row_max(stats, p.n_blocks, partials, tid, tg_size, sg, lane, n_sg);
    if (zmax == -INFINITY) {
        return;  // the finish answers a row of -inf alone
    }
    const float scale = mass_scale(n);
    device const uint* z = scratch + L.z + ulong(row) * L.zs + lo;
    device uint* hist = scratch + L.hist + ulong(row) * uint(SAMPLE_HIST_WORDS);
    device uint* state = scratch + L.state + ulong(row) * uint(SAMPLE_STATE_WORDS);
    const uint pass = p.pass;
    // The range of keys still open: those whose top `width` bits are prefix's.
    uint prefix = 0u;
    uint width = 0u;
    bool keep_all = p.top_p >= 1.0f;
    if (!keep_all && pass == 1u) {
        const HistMass h = {hist};
        const Derived d = derive_digit(h, uint(SAMPLE_HIST_BINS), 0ul, 0ul, true, p.top_p, sums, res, tid, tg_size);
        keep_all = d.keep_all;
        prefix = keep_all ? 0u : d.digit << 21;
        width = 11u;
        if (b == 0u && tid == 0u) {
            put_state(state, prefix, d);
        }
    } else if (!keep_all && pass == 2u) {
        keep_all = state[5] != 0u;
        if (!keep_all) {
            const ulong above = ulong(state[1]) | (ulong(state[2]) << 32);
            const ulong target = ulong(state[3]) | (ulong(state[4]) << 32);
            const HistMass h = {hist + 2u * uint(SAMPLE_HIST_BINS)};
            const Derived d = derive_digit(h, uint(SAMPLE_HIST_BINS), above, target, false, p.top_p, sums, res, tid, tg_size);
            keep_all = d.keep_all;
            prefix = state[0] | (d.digit << 10);
            width = 22u;
            if (b == 0u && tid == 0u) {
                put_state(state + 8u, prefix, d);
            }
        } else if (b == 0u && tid == 0u) {
            state[13] = 1u;
        }
    }
    if (pass < 2u) {
        if (keep_all) {
            return;
        }
        for (uint i = tid; i < uint(SAMPLE_HIST_BINS); i += tg_size) {
            atomic_store_explicit(&hlo[i], 0u, memory_order_relaxed);
            atomic_store_explicit(&hhi[i], 0u, memory_order_relaxed);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const uint shift = pass == 0u ? 21u : 10u;
        for (uint i = tid; i < len; i += tg_size) {
            const float zi = as_type<float>(z[i]);
            const uint k = order_key(zi);
            if (width == 0u || (k >> (32u - width)) == (prefix >> (32u - width))) {
                const ulong w = fixed_mass(zi, zmax, scale);
                if (w != 0ul) {
                    const uint bin = (k >> shift) & (uint(SAMPLE_HIST_BINS) - 1u);
                    add64(&hlo[bin], &hhi[bin], w);
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        device atomic_uint* g = (device atomic_uint*)(hist + pass * 2u * uint(SAMPLE_HIST_BINS));
        for (uint i = tid; i < uint(SAMPLE_HIST_BINS); i += tg_size) {
            const ulong v = ulong(atomic_load_explicit(&hlo[i], memory_order_relaxed))
                          | (ulong(atomic_load_explicit(&hhi[i], memory_order_relaxed)) << 32);
            if (v != 0ul) {
                add64(&g[2u * i], &g[2u * i + 1u], v);
            }
        }
        return;
    }
    // Pass 2: round 2's counts (one key per bin) and this slice's record.
    for (uint i = tid; i < uint(SAMPLE_LAST_BINS); i += tg_size) {
        atomic_store_explicit(&hlo[i], 0u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float kept = 0.0f;
    for (uint i = tid; i < len; i += tg_size) {
        const float zi = as_type<float>(z[i]);
        const uint k = order_key(zi);
        if (keep_all || (k >> 10) > (prefix >> 10)) {
            const float w = exp(zi - zmax);
            kept += w >= p.min_p ? w : 0.0f;
        } else if ((k >> 10) == (prefix >> 10)) {
            atomic_fetch_add_explicit(&hlo[k & 1023u], 1u, memory_order_relaxed);
        }
    }
    kept = threadgroup_sum(kept, partials, sg, lane, n_sg);
    device uint* rec = scratch + L.rec + (ulong(row) * L.nb4 + b) * uint(SAMPLE_REC_WORDS);
    if (keep_all) {
        if (tid == 0u) {
            rec[0] = as_type<uint>(kept);
            rec[1] = 0u;
        }
        return;
    }
    device atomic_uint* g = (device atomic_uint*)(hist + 4u * uint(SAMPLE_HIST_BINS));
    // The distinct keys of the range in this slice, in bin order: each thread
    // a run of bins, its place from a prefix sum.
    const uint per = (uint(SAMPLE_LAST_BINS) + tg_size - 1u) / tg_size;
    const uint d0 = min(uint(SAMPLE_LAST_BINS), tid * per);
    const uint d1 = min(uint(SAMPLE_LAST_BINS), d0 + per);
    float own = 0.0f;
    for (uint d = d0; d < d1; ++d) {
        own += atomic_load_explicit(&hlo[d], memory_order_relaxed) != 0u ? 1.0f : 0.0f;
    }
    float distinct;
    uint at = uint(threadgroup_prefix_sum(own, distinct, partials, sg, lane, n_sg));
    for (uint d = d0; d < d1; ++d) {
        const uint c = atomic_load_explicit(&hlo[d], memory_order_relaxed);
        if (c != 0u) {
            atomic_fetch_add_explicit(&g[d], c, memory_order_relaxed);
            if (at < uint(SAMPLE_REC_CAP)) {
                rec[2u + at] = d | (c << 10);
            }
            ++at;
        }
    }
    if (tid == 0u) {
        rec[0] = as_type<uint>(kept);
        rec[1] = uint(distinct) <= uint(SAMPLE_REC_CAP) ? uint(distinct) : 0xffffffffu;
    }
}

// The whole-row draw of the finish (top_k = 0, the candidates all kept):
// the cut from round 2's counts, each slice's kept mass, a slice by it and a
// token in the slice, in index order. Writes the row's outputs.
static inline void finish_whole_row(device uint* scratch, device uint* out_token, device float* out_logprob,
                                    constant SampleParams& p, SampleLayout L, uint row, float zmax, float u,
                                    threadgroup ulong* sums, threadgroup uint* res, threadgroup float* partials,
                                    threadgroup atomic_uint* pick, threadgroup atomic_uint* last, threadgroup float* pick_before,
                                    uint tid, uint tg_size, uint sg, uint lane, uint n_sg) {
    const uint n = p.n_vocab;
    const uint nb = p.n_blocks;
    const float scale = mass_scale(n);
    device const uint* z = scratch + L.z + ulong(row) * L.zs;
    device const uint* hist = scratch + L.hist + ulong(row) * uint(SAMPLE_HIST_WORDS);
    device const uint* state = scratch + L.state + ulong(row) * uint(SAMPLE_STATE_WORDS) + 8u;
    device uint* rec = scratch + L.rec + ulong(row) * L.nb4 * uint(SAMPLE_REC_WORDS);
    // t: keys above it are kept, and the first `need` (index order) equal to it.
    uint t = 0u;
    uint need = 0u;
    const uint prefix = state[0];
    if (p.top_p < 1.0f && state[5] == 0u) {
        const ulong above = ulong(state[1]) | (ulong(state[2]) << 32);
        const ulong target = ulong(state[3]) | (ulong(state[4]) << 32);
        const CountMass h = {hist + 4u * uint(SAMPLE_HIST_BINS), prefix, zmax, scale};
        const Derived d = derive_digit(h, uint(SAMPLE_LAST_BINS), above, target, false, p.top_p, sums, res, tid, tg_size);
        if (!d.keep_all) {
            t = prefix | d.digit;
            const ulong wt = fixed_mass(key_value(t), zmax, scale);
            const uint ties = hist[4u * uint(SAMPLE_HIST_BINS) + d.digit];
            need = uint(min(ulong(ties), max(1ul, (d.target - d.above + wt - 1ul) / wt)));
        }
    }
    const float q = exp(key_value(t) - zmax);
    // Each slice's kept mass above t and its tokens at t, one simdgroup a
    // slice: from the listed keys, or the slice's z where the list ran over.
    for (uint b = sg; b < nb; b += n_sg) {
        device uint* r = rec + b * uint(SAMPLE_REC_WORDS);
        const uint ne = r[1];
        float mass = 0.0f;
        uint ties = 0u;
        if (t != 0u && ne <= uint(SAMPLE_REC_CAP)) {
            if (lane < ne) {
                const uint e = r[2u + lane];
                const uint k = (prefix & ~1023u) | (e & 1023u);
                const float w = exp(key_value(k) - zmax);
                mass = k > t && w >= p.min_p ? float(e >> 10) * w : 0.0f;
                ties = k == t ? e >> 10 : 0u;
            }
        } else if (t != 0u) {
            const uint lo = b * p.slice;
            const uint len = min(p.slice, n - lo);
            for (uint i = lane; i < len; i += 32u) {
                const float zi = as_type<float>(z[lo + i]);
                const uint k = order_key(zi);
                if ((k >> 10) == (prefix >> 10)) {
                    const float w = exp(zi - zmax);
                    mass += k > t && w >= p.min_p ? w : 0.0f;
                    ties += k == t ? 1u : 0u;
                }
            }
        }
        mass = simd_sum(mass);
        ties = simd_sum(ties);
        if (lane == 0u) {
            r[0] = as_type<uint>(as_type<float>(r[0]) + mass);
            r[1] = ties;
        }
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    // The ties each slice keeps (lowest indices first), into its weight.
    {
        const uint chunk = (nb + tg_size - 1u) / tg_size;
        const uint b0 = min(nb, tid * chunk);
        const uint b1 = min(nb, b0 + chunk);
        float own = 0.0f;
        for (uint b = b0; b < b1; ++b) {
            own += float(rec[b * uint(SAMPLE_REC_WORDS) + 1u]);
        }
        float all;
        uint before = uint(threadgroup_prefix_sum(own, all, partials, sg, lane, n_sg));
        for (uint b = b0; b < b1; ++b) {
            device uint* r = rec + b * uint(SAMPLE_REC_WORDS);
            const uint ties = r[1];
            const uint kept = need > before ? min(ties, need - before) : 0u;
            r[0] = as_type<uint>(as_type<float>(r[0]) + (q >= p.min_p ? float(kept) * q : 0.0f));
            r[1] = kept;
            before += ties;
        }
    }
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    RecordWeights blocks = {rec};
    float before;
    float total;
    const uint b = draw_in_order(blocks, nb, u, before, total, partials, pick, last, pick_before, tid, tg_size, sg, lane, n_sg);
    const float wb = blocks.weight(b);
    const float ub = clamp((u * total - before) / wb, 0.0f, 0.99999994f);
    const uint kept_ties = rec[b * uint(SAMPLE_REC_WORDS) + 1u];
    const uint lo = b * p.slice;
    const uint len = min(p.slice, n - lo);
    // The ties at t in the chunks before each thread's (draw_in_order's chunks).
    const uint chunk = (len + tg_size - 1u) / tg_size;
    const uint i0 = min(len, tid * chunk);
    const uint i1 = min(len, i0 + chunk);
    float own = 0.0f;
    for (uint i = i0; i < i1; ++i) {
        own += t != 0u && order_key(as_type<float>(z[lo + i])) == t ? 1.0f : 0.0f;
    }
    float all_ties;
    const uint rank0 = uint(threadgroup_prefix_sum(own, all_ties, partials, sg, lane, n_sg));
    KeptWeights w = {z + lo, zmax, t, kept_ties, p.min_p, rank0, rank0};
    float sb;
    float st;
    const uint i = draw_in_order(w, len, ub, sb, st, partials, pick, last, pick_before, tid, tg_size, sg, lane, n_sg);
    if (tid == 0u) {
        out_token[row] = lo + i;
        out_logprob[row] = (as_type<float>(z[lo + i]) - zmax) - log(total);
    }
}

// buffer(0) scratch (as the passes before left it; the finish writes the
// records' first two words), (1) out_token [rows] u32, (2) out_logprob [rows],
// (3) params. grid (rows, 1, 1), any threadgroup size up to 1024 (of at
// least 32 threads).
kernel void sample_finish_f32(
    device uint*           scratch     [[buffer(0)]],
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
    threadgroup uint pk[SAMPLE_MAX_THREADS / 32];
    threadgroup uint pi[SAMPLE_MAX_THREADS / 32];
    threadgroup float partials[SAMPLE_MAX_THREADS / 32];
    threadgroup atomic_uint hist[RADIX_BINS];
    threadgroup uint found[4];
    threadgroup atomic_uint counter;
    threadgroup uint gk[SAMPLE_MAX_K];
    threadgroup uint gi[SAMPLE_MAX_K];
    threadgroup uint sk[SAMPLE_MAX_K];
    threadgroup uint si[SAMPLE_MAX_K];
    threadgroup atomic_uint pick;
    threadgroup atomic_uint last;
    threadgroup float pick_before[1];
    threadgroup ulong sums[SAMPLE_MAX_THREADS];
    threadgroup uint res[8];
    const uint n = p.n_vocab;
    const uint nb = p.n_blocks;
    const SampleLayout L = sample_layout(p);
    device const uint* z = scratch + L.z + ulong(row) * L.zs;
    device const uint* stats = scratch + L.stats + ulong(row) * L.nb2 * 4u;
    if (tid == 0u) {
        atomic_store_explicit(&counter, 0u, memory_order_relaxed);
    }

    // The row's max (and greedy token) from the blocks'.
    uint best = 0u;
    uint at = 0xffffffffu;
    for (uint b = tid; b < nb; b += tg_size) {
        keep_best(best, at, order_key(as_type<float>(stats[4u * b])), stats[4u * b + 2u]);
    }
    threadgroup_best(best, at, pk, pi, tg_size, sg, lane, n_sg);
    const float zmax = key_value(best);
    if (zmax == -INFINITY || p.temperature == 0.0f) {
        if (tid == 0u) {
            out_token[row] = zmax == -INFINITY ? 0xffffffffu : at;
            out_logprob[row] = zmax == -INFINITY ? -INFINITY : 0.0f;
        }
        return;
    }
    BlockWeights blocks = {stats, zmax};
    float zs = 0.0f;
    for (uint b = tid; b < nb; b += tg_size) {
        zs += blocks.weight(b);
    }
    const float mass = threadgroup_sum(zs, partials, sg, lane, n_sg);
    const float u = sample_uniform(p, row);

    float before;
    float total;
    if (p.n_cand == 0u) {
        // Every token: the block by its mass, then the token inside it.
        const uint b = draw_in_order(blocks, nb, u, before, total, partials, &pick, &last, pick_before,
                                     tid, tg_size, sg, lane, n_sg);
        const float wb = blocks.weight(b);
        const float ub = clamp((u * total - before) / wb, 0.0f, 0.99999994f);
        const uint lo = b * p.slice;
        SliceWeights slice = {z + lo, zmax};
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

    // The top mc of the slices' candidates, ranked, then the filters and the draw.
    const uint mc = min(p.n_cand, n);
    PairSrc src = {scratch + L.cand + ulong(row) * L.nb4 * 512u, nb * p.n_cand};
    src.load(0u, tid, tg_size);
    const Cut cut = select_cut(src, mc, hist, found, tid, tg_size, sg, lane, min(tg_size, sg_width));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    GroupSink kept = {gk, gi};
    gather_cut(src, cut, mc, kept, &counter, tid, tg_size);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    GroupSink ranked = {sk, si};
    rank_sort(gk, gi, mc, ranked, tid, tg_size);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0u) {
        draw_ranked(sk, mc, zmax, mass, p, u, res, lane);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (res[2] == 0u) {
        if (tid == 0u) {
            const uint r = res[0];
            out_token[row] = si[r];
            out_logprob[row] = (key_value(sk[r]) - zmax) - log(as_type<float>(res[1]));
        }
        return;
    }
    finish_whole_row(scratch, out_token, out_logprob, p, L, row, zmax, u, sums, res, partials, &pick, &last, pick_before,
                     tid, tg_size, sg, lane, n_sg);
}
