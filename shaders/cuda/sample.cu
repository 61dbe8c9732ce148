// Token selection over rows of logits (CUDA), entry names and bindings as
// shaders/sample.metal, whose header comment states the order, the sampler's
// filters and passes and the scratch layout. The results are the Metal
// kernels'; the selections are organized for an SM, where a one-block phase
// that walks thousands of items or scans with match.any is the whole cost:
//
// - A block selects its top m among items held in registers (8 a thread in
//   the slice passes, two 16-byte loads; 16 in the merging ones) by radix
//   levels on the 64-bit key (order_key, ~index): 11, 11 and 10 bits of the
//   key, then of ~index only while ties remain, stopping at the first level
//   whose bin is wanted whole (two levels for most rows). A level is one
//   plain shared atomic per item still in the running, then a scan of the
//   bins from the top (a thread's run of bins, warp shuffles, one word per
//   warp): three barriers.
// - The slice passes (top_k_blocks_f32, sample_blocks_f32) write, beside
//   their candidates, a summary: the level-0 bins that hold them, with
//   counts (SAMPLE_SUM_WORDS per slice). Where the bin of a slice's cut holds
//   few items, they are ranked by counting instead of a second radix level
//   (select_slice).
// - The merging block (top_k_merge_f32, sample_finish_f32) adds the
//   summaries into its level-0 histogram instead of binning every
//   candidate. Where the candidates from the cut's bin up are few (at most
//   SAMPLE_FAST_CAP), it packs them and ranks each among them by counting:
//   the top m in rank order in two barriers (gather_top's fast path);
//   otherwise its levels only see the candidates of one bin. A slice whose
//   candidates span more bins than a summary lists makes the merging block
//   bin them all.
// - The sampler's whole-row configurations (top_k = 0 with top-p or min-p)
//   select no candidates in the slice pass. Their kept set is a prefix of
//   the rank order, so the mass passes list the tokens of prefixes that
//   hold it, each (value bits, index) onto one row list in the candidates'
//   region, counted on a state word that the slice pass zeroes: the min-p
//   set, exp(z - z_max) >= min_p (min-p alone: the record pass; with top-p:
//   pass 0, where the exp is computed anyway); the tokens at or above the
//   top-p cut's level-0 bin (pass 1); at or above its level-1 range (pass
//   2). A list is complete where its count is below SAMPLE_MAX_K; a pass
//   after a complete one returns at once, and a later list overwrites an
//   incomplete one. The finish ranks a complete list by counting and draws
//   in rank order (the reference's path for a kept set of fewer than 256
//   tokens); otherwise the fixed-point cut and the records, in index order,
//   but for a top-p kept set of fewer than 256 tokens whose lists overflowed
//   (ties or values within 1024 keys of the cut crowd its bins): the finish
//   gathers it from z (scan_kept).
//
// Block reductions run in a fixed order and the 64-bit masses are integers,
// so every result is independent of the warps' timing (the order in which
// candidates land in the scratch is not, and nothing reads it as an order).
// Threadgroup arrays are static shared memory. The selecting kernels and the
// sampler's run in whole warps (their plans launch multiples of 32 threads);
// argmax_f32 and softmax_sample_f32 take any block size, as mlx-native's
// launches give them.

namespace {

enum SampleLimits : u32 {
    SAMPLE_MAX_K = 256,
    SAMPLE_MAX_THREADS = 1024,
    SAMPLE_MAX_SLICE = 4096,
    SAMPLE_ITEMS = 16,
    SAMPLE_SLICE_ITEMS = 8,
    SAMPLE_HIST_BINS = 2048,
    SAMPLE_LAST_BINS = 1024,
    SAMPLE_HIST_WORDS = 9216,
    SAMPLE_STATE_WORDS = 24,
    SAMPLE_REC_CAP = 32,
    SAMPLE_REC_WORDS = 36,
    SAMPLE_SUM_WORDS = 32,
    // Words of a row's state counting the tokens of the whole-row passes'
    // lists (sample_mass_f32): the min-p set, the tokens at or above the
    // top-p cut's level-0 bin, and at or above its level-1 range.
    SAMPLE_LIST_MINP = 20,
    SAMPLE_LIST_BIN = 21,
    SAMPLE_LIST_RANGE = 22,
    // The row's max z (its bits) as the first mass pass found it (block 0
    // writes it), which the later passes and the finish read instead of
    // reducing the slices' stats again.
    SAMPLE_ROW_MAX = 6,
};

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float max_float() { return __int_as_float(0x7f7fffff); }

// ---- the order ----

__device__ __forceinline__ u32 order_key(float v) {
    const u32 b = __float_as_uint(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) return 0xffffffffu;
    if ((b & 0x7fffffffu) == 0u) return 0x80000000u;
    return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float key_value(u32 k) {
    return __uint_as_float((k & 0x80000000u) != 0u ? (k & 0x7fffffffu) : ~k);
}

__device__ __forceinline__ bool ranks_before(u32 ka, u32 ia, u32 kb, u32 ib) {
    return ka > kb || (ka == kb && ia < ib);
}

__device__ __forceinline__ u32 pow2_at_least(u32 n) {
    u32 p = 1u;
    while (p < n) p <<= 1u;
    return p;
}

// The best (value, index) of the block, returned to every thread; vals and
// idxs hold blockDim.x entries.
__device__ void block_argmax(float& v, u32& ix, float* vals, u32* idxs) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    vals[tid] = v;
    idxs[tid] = ix;
    __syncthreads();
    for (u32 s = pow2_at_least(bs) >> 1u; s > 0u; s >>= 1u) {
        if (tid < s && tid + s < bs) {
            const float ov = vals[tid + s];
            const u32 oi = idxs[tid + s];
            if (ranks_before(order_key(ov), oi, order_key(vals[tid]), idxs[tid])) {
                vals[tid] = ov;
                idxs[tid] = oi;
            }
        }
        __syncthreads();
    }
    v = vals[0];
    ix = idxs[0];
    __syncthreads();
}

// block_sum / block_max of the prelude, then a barrier, so the partials may be
// reused at once.
__device__ __forceinline__ float block_sum_synced(float v, float* partials) {
    const float t = block_sum(v, partials);
    __syncthreads();
    return t;
}
__device__ __forceinline__ float block_max_synced(float v, float* partials) {
    const float t = block_max(v, partials);
    __syncthreads();
    return t;
}

// Inclusive prefix over the lanes of a full warp.
template <typename T>
__device__ __forceinline__ T warp_inclusive(T v) {
    const u32 lane = threadIdx.x & 31u;
#pragma unroll
    for (u32 o = 1; o < 32u; o <<= 1) {
        const T t = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += t;
    }
    return v;
}

// The sum of v over the threads before this one, and over all in `total`
// (f32, added in one order: the warps' scans, then the warps' sums in order).
// partials: one float per warp. A last, partial warp scans its own lanes.
__device__ float block_prefix_sum(float v, float& total, float* partials) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 lane = tid & 31u, warp = tid >> 5;
    const u32 n = min(32u, bs - (warp << 5));
    const u32 mask = n == 32u ? 0xffffffffu : ((1u << n) - 1u);
    float incl = v;
#pragma unroll
    for (u32 o = 1; o < 32u; o <<= 1) {
        const float t = __shfl_up_sync(mask, incl, o);
        if (lane >= o) incl += t;
    }
    float within = __shfl_up_sync(mask, incl, 1);
    if (lane == 0u) within = 0.0f;
    if (lane == n - 1u) partials[warp] = incl;
    __syncthreads();
    const u32 nw = (bs + 31u) >> 5;
    float before = 0.0f, all = 0.0f;
    for (u32 i = 0; i < nw; ++i) {
        if (i < warp) before += partials[i];
        all += partials[i];
    }
    __syncthreads();
    total = all;
    return before + within;
}

// The slot of each lane that takes one (take): one atomic on *counter per
// warp; lanes that take nothing get 0xffffffff. Every lane of the warp calls it.
__device__ __forceinline__ u32 warp_take(u32* counter, bool take) {
    const u32 ballot = __ballot_sync(0xffffffffu, take);
    if (ballot == 0u) return 0xffffffffu;
    const u32 lane = threadIdx.x & 31u;
    const u32 leader = u32(__ffs(ballot) - 1);
    u32 base = 0u;
    if (lane == leader) base = atomicAdd(counter, __popc(ballot));
    base = __shfl_sync(0xffffffffu, base, leader);
    return take ? base + __popc(ballot & ((1u << lane) - 1u)) : 0xffffffffu;
}

__device__ __forceinline__ void keep_best(u32& key, u32& ix, u32 k, u32 i) {
    if (k > key || (k == key && i < ix)) {
        key = k;
        ix = i;
    }
}

// The best (key, index) of a full warp, to lane 0.
__device__ __forceinline__ void warp_best(u32& key, u32& ix) {
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) {
        const u32 k = __shfl_down_sync(0xffffffffu, key, o);
        const u32 i = __shfl_down_sync(0xffffffffu, ix, o);
        keep_best(key, ix, k, i);
    }
}

// The best (key, index) of the block, to every thread; pk, pi: one word per
// warp. Ends with a barrier. keep_best is a total order, so any grouping
// gives the same pair: a block of whole warps folds the warps' pairs in
// each warp by shuffles (32 serial shared loads a thread cost about 1 us of
// the finish); another block walks them.
__device__ void block_best(u32& key, u32& ix, u32* pk, u32* pi) {
    const WarpLanes w = warp_lanes();
    warp_fold_down(w, [&](u32 o, bool live) {
        const u32 k = __shfl_down_sync(w.mask, key, o);
        const u32 i = __shfl_down_sync(w.mask, ix, o);
        if (live) keep_best(key, ix, k, i);
    });
    if (w.lane == 0u) {
        pk[w.warp] = key;
        pi[w.warp] = ix;
    }
    __syncthreads();
    const u32 nw = (blockDim.x + 31u) >> 5;
    if ((blockDim.x & 31u) == 0u) {
        key = w.lane < nw ? pk[w.lane] : 0u;
        ix = w.lane < nw ? pi[w.lane] : 0xffffffffu;
#pragma unroll
        for (u32 o = 16; o > 0; o >>= 1) {
            const u32 k = __shfl_xor_sync(0xffffffffu, key, o);
            const u32 i = __shfl_xor_sync(0xffffffffu, ix, o);
            keep_best(key, ix, k, i);
        }
    } else {
        key = pk[0];
        ix = pi[0];
        for (u32 v = 1; v < nw; ++v) keep_best(key, ix, pk[v], pi[v]);
    }
    __syncthreads();
}

// ---- items a block selects among ----
//
// A thread holds N items of a chunk: slot j of chunk c is item c * N * bs +
// ((j / G) * bs + tid) * G + j % G, G items in a row per 16-byte load. Key 0
// (below -inf's key) marks a slot without an item: past n, or padding.

template <u32 N, u32 G>
__device__ __forceinline__ u32 item_pos(u32 c, u32 j) {
    return c * N * blockDim.x + ((j / G) * blockDim.x + threadIdx.x) * G + j % G;
}

// The bits of a thread's N items of chunk c (item_pos<N, 4>) of the n floats
// at v, 0 past n: 16-byte loads where v is aligned.
template <u32 N>
__device__ __forceinline__ void fetch_bits(const float* v, u32 n, u32 c, u32 (&key)[N]) {
    const bool vec = aligned16(v);
#pragma unroll
    for (u32 q = 0; q < N / 4u; ++q) {
        const u32 e = item_pos<N, 4u>(c, 4u * q);
        if (vec && e + 4u <= n) {
            const uint4 t = *reinterpret_cast<const uint4*>(v + e);
            key[4u * q] = t.x;
            key[4u * q + 1u] = t.y;
            key[4u * q + 2u] = t.z;
            key[4u * q + 3u] = t.w;
        } else {
#pragma unroll
            for (u32 r = 0; r < 4u; ++r) key[4u * q + r] = e + r < n ? __float_as_uint(v[e + r]) : 0u;
        }
    }
}

// Values in global memory, indices base + item.
template <u32 N>
struct FloatSrc {
    static constexpr u32 ITEMS = N;
    const float* v;
    u32 n;
    u32 base;
    u32 key[N];
    __device__ u32 pos(u32 c, u32 j) const { return item_pos<N, 4u>(c, j); }
    __device__ u32 index(u32 c, u32 j) const { return base + pos(c, j); }
    __device__ u32 chunks() const { return (n + N * blockDim.x - 1u) / (N * blockDim.x); }
    __device__ void load(u32 c) {
        fetch_bits(v, n, c, key);
#pragma unroll
        for (u32 j = 0; j < N; ++j) key[j] = pos(c, j) < n ? order_key(__uint_as_float(key[j])) : 0u;
    }
};

// (value bits, index) pairs as the slice passes write them; padding (index
// 0xffffffff) holds no item.
template <u32 N>
struct PairSrc {
    static constexpr u32 ITEMS = N;
    const u32* p;
    u32 n;
    u32 key[N];
    u32 idx[N];
    __device__ u32 pos(u32 c, u32 j) const { return item_pos<N, 2u>(c, j); }
    __device__ u32 index(u32, u32 j) const { return idx[j]; }
    __device__ u32 chunks() const { return (n + N * blockDim.x - 1u) / (N * blockDim.x); }
    __device__ void load(u32 c) {
        const bool vec = aligned16(p);
#pragma unroll
        for (u32 q = 0; q < N / 2u; ++q) {
            const u32 e = pos(c, 2u * q);
            uint4 t = make_uint4(0u, 0xffffffffu, 0u, 0xffffffffu);
            if (vec && e + 2u <= n) {
                t = *reinterpret_cast<const uint4*>(p + 2u * e);
            } else {
                if (e < n) t.x = p[2u * e], t.y = p[2u * e + 1u];
                if (e + 1u < n) t.z = p[2u * e + 2u], t.w = p[2u * e + 3u];
            }
            idx[2u * q] = t.y;
            key[2u * q] = t.y == 0xffffffffu ? 0u : order_key(__uint_as_float(t.x));
            idx[2u * q + 1u] = t.w;
            key[2u * q + 1u] = t.w == 0xffffffffu ? 0u : order_key(__uint_as_float(t.z));
        }
    }
};

// Gathered items as one 64-bit key each, (key, ~index): distinct, and
// ranking before another is being larger.
struct PackSink {
    u64* g;
    __device__ void put(u32 s, u32 key, u32 ix) { g[s] = (u64(key) << 32) | ~ix; }
};

struct GroupSink {
    u32* k;
    u32* i;
    __device__ void put(u32 s, u32 key, u32 ix) {
        k[s] = key;
        i[s] = ix;
    }
};

struct PairSink {
    u32* out;
    __device__ void put(u32 s, u32 key, u32 ix) {
        out[2u * s] = __float_as_uint(key_value(key));
        out[2u * s + 1u] = ix;
    }
};

struct OutSink {
    float* values;
    u32* indices;
    u64 o;
    __device__ void put(u32 r, u32 key, u32 ix) {
        values[o + r] = key_value(key);
        indices[o + r] = ix;
    }
};

// ---- the radix select ----

// What a selecting block keeps in shared memory: the histograms of two
// levels (one filled while the other is cleared), a word per warp, the
// level's result, the gather counter and a flag.
struct __align__(16) SelectShared {
    u32 hist[2][SAMPLE_HIST_BINS];
    u32 wsum[32];
    u32 found[4];
    u32 counter;
    u32 flag;
    u32 packed;
};

// Zeroes one histogram of a SelectShared (16-byte aligned) by 16-byte stores.
__device__ __forceinline__ void clear_hist(u32* h) {
    for (u32 i = threadIdx.x; i < u32(SAMPLE_HIST_BINS) / 4u; i += blockDim.x) reinterpret_cast<uint4*>(h)[i] = make_uint4(0u, 0u, 0u, 0u);
}

// Items whose 64-bit key, cut to the masks, is at least (hi, lo) lexicographically.
struct Cut {
    u32 hi, mask_hi, lo, mask_lo;
};

__device__ __forceinline__ bool cut_keeps(Cut c, u32 key, u32 inv) {
    const u32 k = key & c.mask_hi;
    return k != c.hi ? k > c.hi : (inv & c.mask_lo) >= c.lo;
}

struct Found {
    u32 digit, above, count;
};

// The bin of h[0, nbins) (counts; the highest bin ranks first) holding the
// need-th item from the top, the items of the bins above it and its own
// (need >= 1, at most the total). A thread sums a run of per = nbins / bs
// bins, the warps scan, each warp reads the warps' sums: three barriers,
// the last two here. Runs of 4 or 8 bins (a slice pass's 2048 bins at 256 or
// 512 threads, a merge's at 512) are read as 16-byte vectors (a warp's
// loads meet few bank conflicts) and stay in registers, so the walk to the
// found bin and the summary's walk read no shared memory. With SUMMARY (a
// slice pass's level 0), the non-empty bins from the top down to the one
// found go to summary[1..] as bin | count << 11 (the found bin's count: the
// candidates it gives), and summary[0] becomes 1 where they are more than
// SAMPLE_SUM_WORDS - 1.
template <bool SUMMARY>
__device__ Found find_digit(const u32* h, u32 nbins, u32 need, SelectShared& sh, u32* summary) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 lane = tid & 31u, warp = tid >> 5, nw = bs >> 5;
    const u32 per = (nbins + bs - 1u) / bs;
    const u32 top = nbins - min(nbins, tid * per);
    const u32 bottom = nbins - min(nbins, (tid + 1u) * per);
    // held: the run's counts c[0, per) = h[bottom, top) (runs are whole or empty: per divides nbins).
    const bool held = per == 4u || per == 8u;
    u32 c[8];
    u32 s = 0u, nz = 0u;
    if (held) {
#pragma unroll
        for (u32 q = 0; q < 2u; ++q) {
            uint4 t = make_uint4(0u, 0u, 0u, 0u);
            if (bottom + 4u * q < top) t = *reinterpret_cast<const uint4*>(h + bottom + 4u * q);
            c[4u * q] = t.x;
            c[4u * q + 1u] = t.y;
            c[4u * q + 2u] = t.z;
            c[4u * q + 3u] = t.w;
        }
#pragma unroll
        for (u32 j = 0; j < 8u; ++j) {
            s += c[j];
            nz += c[j] != 0u ? 1u : 0u;
        }
    } else {
        for (u32 b = bottom; b < top; ++b) {
            const u32 v = h[b];
            s += v;
            nz += v != 0u ? 1u : 0u;
        }
    }
    // With SUMMARY the counts are a slice's (at most 4096): sums and non-empty bins in one word.
    const u32 v = SUMMARY ? (s << 16) | nz : s;
    const u32 incl = warp_inclusive(v);
    if (lane == 31u) sh.wsum[warp] = incl;
    __syncthreads();
    const u32 w = lane < nw ? sh.wsum[lane] : 0u;
    const u32 winc = warp_inclusive(w);
    const u32 before = __shfl_sync(0xffffffffu, winc - w, warp) + incl - v;
    const u32 items_before = SUMMARY ? before >> 16 : before;
    if (items_before < need && need <= items_before + s) {
        u32 acc = items_before;
        if (held) {
            bool done = false;
#pragma unroll
            for (u32 j = 8u; j > 0u; --j) {
                if (j <= per && !done) {
                    if (need <= acc + c[j - 1u]) {
                        sh.found[0] = bottom + j - 1u;
                        sh.found[1] = acc;
                        sh.found[2] = c[j - 1u];
                        done = true;
                    } else {
                        acc += c[j - 1u];
                    }
                }
            }
        } else {
            for (u32 b = top; b > bottom; --b) {
                const u32 cb = h[b - 1u];
                if (need <= acc + cb) {
                    sh.found[0] = b - 1u;
                    sh.found[1] = acc;
                    sh.found[2] = cb;
                    break;
                }
                acc += cb;
            }
        }
    }
    __syncthreads();
    const Found f = {sh.found[0], sh.found[1], sh.found[2]};
    if (SUMMARY) {
        u32 at = before & 0xffffu;
        auto entry = [&](u32 b, u32 cb) {
            if (cb != 0u) {
                if (at < u32(SAMPLE_SUM_WORDS) - 1u) summary[1u + at] = b | ((b == f.digit ? need - f.above : cb) << 11);
                ++at;
            }
        };
        if (held) {
#pragma unroll
            for (u32 j = 8u; j > 0u; --j)
                if (j <= per && bottom + j - 1u >= f.digit && bottom + j - 1u < top) entry(bottom + j - 1u, c[j - 1u]);
        } else {
            for (u32 b = top; b > bottom && b - 1u >= f.digit; --b) entry(b - 1u, h[b - 1u]);
        }
        if (f.digit >= bottom && f.digit < top && at > u32(SAMPLE_SUM_WORDS) - 1u) summary[0] = 1u;
    }
    return f;
}

// The cut that keeps exactly the `want` best of src's items (want at most
// their number). sh.hist[0] is clear, visibly to every thread, when called;
// with `given` it holds level 0's histogram instead. Items are reloaded per
// level when they span several chunks. With SUMMARY, level 0 writes the
// slice's summary (find_digit).
template <bool SUMMARY, typename Src>
__device__ Cut select_cut(Src& src, u32 want, SelectShared& sh, bool given, u32* summary) {
    Cut cut = {0u, 0u, 0u, 0u};
    u32 need = want;
    const u32 chunks = src.chunks();
    for (u32 l = 0; l < 6u; ++l) {
        u32* h = sh.hist[l & 1u];
        const u32 shift = l % 3u == 0u ? 21u : l % 3u == 1u ? 10u : 0u;
        const u32 nbins = l % 3u == 2u ? u32(SAMPLE_LAST_BINS) : u32(SAMPLE_HIST_BINS);
        if (l > 0u || !given) {
            for (u32 c = 0; c < chunks; ++c) {
                if (chunks > 1u) src.load(c);
#pragma unroll
                for (u32 j = 0; j < Src::ITEMS; ++j) {
                    const u32 key = src.key[j];
                    const u32 inv = ~src.index(c, j);
                    if (key != 0u && (key & cut.mask_hi) == cut.hi && (inv & cut.mask_lo) == cut.lo)
                        atomicAdd(&h[((l < 3u ? key : inv) >> shift) & (nbins - 1u)], 1u);
                }
            }
            __syncthreads();
        }
        // The next level's histogram: its last reader passed this level's first barrier.
        u32* next = sh.hist[(l + 1u) & 1u];
        clear_hist(next);
        const Found f = SUMMARY && l == 0u ? find_digit<true>(h, nbins, need, sh, summary)
                                           : find_digit<false>(h, nbins, need, sh, summary);
        need -= f.above;
        if (l < 3u) {
            cut.hi |= f.digit << shift;
            cut.mask_hi |= (nbins - 1u) << shift;
        } else {
            cut.lo |= f.digit << shift;
            cut.mask_lo |= (nbins - 1u) << shift;
        }
        if (f.count == need) break;
    }
    return cut;
}

// The items the cut keeps, each put at a slot counted on *counter (0,
// visibly to every thread, when called); slots past m are dropped.
template <typename Src, typename Sink>
__device__ void gather_cut(Src& src, Cut cut, u32 m, Sink& sink, u32* counter) {
    const u32 chunks = src.chunks();
    for (u32 c = 0; c < chunks; ++c) {
        if (chunks > 1u) src.load(c);
#pragma unroll
        for (u32 j = 0; j < Src::ITEMS; ++j) {
            const u32 key = src.key[j];
            const u32 ix = src.index(c, j);
            const u32 slot = warp_take(counter, key != 0u && cut_keeps(cut, key, ~ix));
            if (slot < m) sink.put(slot, key, ix);
        }
    }
}

// 8 words of a slice's summary, as 16-byte loads issued together where
// aligned. A summary's entries fill its words from 1 on, zeros after them,
// so its words past 8 matter only where the 8 before them are all entries.
struct SumWords {
    u32 w[8];
};

__device__ __forceinline__ void load_sum_words(const u32* q, SumWords& s) {
    if (aligned16(q)) {
#pragma unroll
        for (u32 r = 0; r < 2u; ++r) {
            const uint4 t = reinterpret_cast<const uint4*>(q)[r];
            s.w[4u * r] = t.x;
            s.w[4u * r + 1u] = t.y;
            s.w[4u * r + 2u] = t.z;
            s.w[4u * r + 3u] = t.w;
        }
    } else {
#pragma unroll
        for (u32 r = 0; r < 8u; ++r) s.w[r] = q[r];
    }
}

// The first 8 words of the summary of slice threadIdx.x, loaded before the
// merging block's first barrier (the words of slices past blockDim.x and
// past the first 8 are loaded where they are added).
__device__ __forceinline__ SumWords prefetch_sums(const u32* sums, u32 nb) {
    SumWords s;
    if (threadIdx.x < nb) load_sum_words(sums + threadIdx.x * u32(SAMPLE_SUM_WORDS), s);
    return s;
}

// The merging block's fast path: where the summaries say that the
// candidates in level-0 bins at or above the one holding the m-th are few
// (at most SAMPLE_FAST_CAP; m + ~50 for Gemma 4's top-k 64 over N(0, 36)
// logits), every one of them is packed into g (one shared atomic per warp:
// the lanes' counts scanned) and each is ranked among them by counting (the
// items ranking before it): the ranks below m are the top m in order, with
// no radix level over the candidates, no gather per slot and no separate
// sort. Slices whose summaries overflowed, or a cut bin holding more, take
// the radix levels instead.
enum SampleFast : u32 { SAMPLE_FAST_CAP = 256 };

// Packs the items of src (chunk 0 loaded, all of them) whose level-0 bin is
// at least `digit` into g[*counter ...]; *counter is 0, visibly to every
// thread, when called.
template <typename Src>
__device__ void pack_from_bin(const Src& src, u32 digit, u64* g, u32* counter) {
    const u32 lane = threadIdx.x & 31u;
    u32 own = 0u;
#pragma unroll
    for (u32 j = 0; j < Src::ITEMS; ++j) own += src.key[j] != 0u && (src.key[j] >> 21) >= digit ? 1u : 0u;
    const u32 incl = warp_inclusive(own);
    u32 base = 0u;
    if (lane == 31u && incl != 0u) base = atomicAdd(counter, incl);
    u32 slot = __shfl_sync(0xffffffffu, base, 31) + incl - own;
#pragma unroll
    for (u32 j = 0; j < Src::ITEMS; ++j) {
        if (src.key[j] != 0u && (src.key[j] >> 21) >= digit) {
            if (slot < u32(SAMPLE_FAST_CAP)) g[slot] = (u64(src.key[j]) << 32) | ~src.index(0u, j);
            ++slot;
        }
    }
}

// Each of g[0, n) (PackSink's keys, distinct) ranked among them by counting
// the items that rank before it, p lanes of a warp per item (the most, up to
// 32, with p * n <= bs, adding by shuffles); those ranked below m go to the
// sink at their rank (m = n: all of them, sorted).
template <typename Sink>
__device__ void rank_top(const u64* g, u32 n, u32 m, Sink& sink) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    u32 p = 1u;
    while (p < 32u && 2u * p * n <= bs) p <<= 1u;
    const u32 per = bs / p;
    const u32 part = tid % p;
    for (u32 base = 0; base < n; base += per) {
        const u32 i = base + tid / p;
        u32 cnt = 0u;
        const u64 mine = i < n ? g[i] : ~0ull;
        if (i < n) {
#pragma unroll 4
            for (u32 j = part; j < n; j += p) cnt += g[j] > mine ? 1u : 0u;
        }
        for (u32 o = 1u; o < p; o <<= 1u) cnt += __shfl_xor_sync(0xffffffffu, cnt, o);
        if (i < n && part == 0u && cnt < m) sink.put(cnt, u32(mine >> 32), ~u32(mine));
    }
}

template <typename Sink>
struct OffsetSink {
    Sink& sink;
    u32 offset;
    __device__ void put(u32 s, u32 key, u32 ix) { sink.put(offset + s, key, ix); }
};

// A slice pass's selection of its top `want` into the sink, unordered, with
// the summary from level 0 (src loaded: chunk 0, keys 0 where no item; more
// chunks take select_cut). sh.hist[0] is clear and sh.counter and sh.packed
// are 0, visibly to every thread, when called. Level 0 bins every item;
// where the bin of the cut holds more than wanted but few items, C with
// C^2 <= 32 bs (~C^2 / bs comparisons a thread, cheaper than a radix
// level's three barriers), the items above the bin go to the sink at once
// and the bin's are packed (one shared atomic per warp) and each ranked
// among them by counting; those ranked below what is still needed follow
// the ones above: one barrier instead of a level's three and a gather.
// Otherwise the radix levels (select_cut on level 0's histogram) and
// gather_cut. Ends before a barrier: the caller's makes the summary visible.
template <typename Src, typename Sink>
__device__ void select_slice(Src& src, u32 want, SelectShared& sh, u32* summary, Sink& sink) {
    const u32 lane = threadIdx.x & 31u, bs = blockDim.x;
    // The bin's packed items live in level 1's histogram, which this path leaves unused.
    u64* g = reinterpret_cast<u64*>(sh.hist[1]);
    if (src.chunks() != 1u) {
        const Cut cut = select_cut<true>(src, want, sh, false, summary);
        gather_cut(src, cut, want, sink, &sh.counter);
        return;
    }
#pragma unroll
    for (u32 j = 0; j < Src::ITEMS; ++j)
        if (src.key[j] != 0u) atomicAdd(&sh.hist[0][src.key[j] >> 21], 1u);
    __syncthreads();
    const Found f = find_digit<true>(sh.hist[0], u32(SAMPLE_HIST_BINS), want, sh, summary);
    const u32 need = want - f.above;
    const bool whole = f.count == need;
    if (!whole && (f.count > u32(SAMPLE_FAST_CAP) || f.count * f.count > 32u * bs)) {
        const Cut cut = select_cut<false>(src, want, sh, true, nullptr);
        gather_cut(src, cut, want, sink, &sh.counter);
        return;
    }
    // Per thread: items above the cut's bin (to the sink) and in it (kept
    // whole, or packed to be ranked), as two counts in one word.
    u32 own = 0u;
#pragma unroll
    for (u32 j = 0; j < Src::ITEMS; ++j) {
        const u32 d = src.key[j] >> 21;
        own += src.key[j] != 0u && (d > f.digit || (whole && d == f.digit)) ? 1u : (src.key[j] != 0u && d == f.digit ? 1u << 16 : 0u);
    }
    const u32 incl = warp_inclusive(own);
    u32 base_above = 0u, base_bin = 0u;
    if (lane == 31u) {
        if ((incl & 0xffffu) != 0u) base_above = atomicAdd(&sh.counter, incl & 0xffffu);
        if ((incl >> 16) != 0u) base_bin = atomicAdd(&sh.packed, incl >> 16);
    }
    u32 above = __shfl_sync(0xffffffffu, base_above, 31) + ((incl - own) & 0xffffu);
    u32 bin = __shfl_sync(0xffffffffu, base_bin, 31) + ((incl - own) >> 16);
#pragma unroll
    for (u32 j = 0; j < Src::ITEMS; ++j) {
        const u32 key = src.key[j];
        const u32 d = key >> 21;
        if (key != 0u && (d > f.digit || (whole && d == f.digit))) {
            sink.put(above, key, src.index(0u, j));
            ++above;
        } else if (key != 0u && d == f.digit) {
            g[bin] = (u64(key) << 32) | ~src.index(0u, j);
            ++bin;
        }
    }
    if (whole) return;
    __syncthreads();
    OffsetSink<Sink> rest = {sink, f.above};
    rank_top(g, f.count, need, rest);
}

// select_slice's `want` best items of a slice into out as (value bits,
// index) pairs, the pairs past them up to k set to (-inf, none): a slice
// with fewer items than k leaves no pair unwritten. Ends before a barrier,
// as select_slice does.
template <typename Src>
__device__ __forceinline__ void select_pairs(Src& src, u32 want, u32 k, SelectShared& sh, u32* summary, u32* out) {
    PairSink sink = {out};
    select_slice(src, want, sh, summary, sink);
    for (u32 r = want + threadIdx.x; r < k; r += blockDim.x) {
        out[2u * r] = __float_as_uint(neg_inf());
        out[2u * r + 1u] = 0xffffffffu;
    }
}

// The top m of nb slices' candidates (src, loaded: chunk 0 when they fit),
// using the slices' summaries for level 0 (or binning every candidate where
// a summary overflowed); pre: prefetch_sums. Either in rank order straight
// into `ranked` (with FAST, the fast path, where the candidates fit one
// chunk: returns true), or unordered into g (PackSink; returns false). Ends
// with a barrier.
template <bool FAST, typename Src, typename Sink>
__device__ bool gather_top(Src& src, const u32* sums, SumWords& pre, u32 nb, u32 m, SelectShared& sh, u64* g, Sink& ranked) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    // A slice's summary into level 0's histogram: its overflow flag, or its entries (bin | count << 11).
    auto add = [&](const u32* q, SumWords& s) {
        if (s.w[0] != 0u) {
            sh.flag = 1u;
            return;
        }
#pragma unroll
        for (u32 e = 1; e < 8u; ++e)
            if ((s.w[e] >> 11) != 0u) atomicAdd(&sh.hist[0][s.w[e] & (u32(SAMPLE_HIST_BINS) - 1u)], s.w[e] >> 11);
        for (u32 at = 8u; at < u32(SAMPLE_SUM_WORDS) && s.w[7] != 0u; at += 8u) {
            load_sum_words(q + at, s);
#pragma unroll
            for (u32 e = 0; e < 8u; ++e)
                if ((s.w[e] >> 11) != 0u) atomicAdd(&sh.hist[0][s.w[e] & (u32(SAMPLE_HIST_BINS) - 1u)], s.w[e] >> 11);
        }
    };
    clear_hist(sh.hist[0]);
    if (tid == 0u) {
        sh.counter = 0u;
        sh.flag = 0u;
    }
    __syncthreads();
    if (tid < nb) add(sums + tid * u32(SAMPLE_SUM_WORDS), pre);
    for (u32 b = tid + bs; b < nb; b += bs) {
        SumWords more;
        load_sum_words(sums + b * u32(SAMPLE_SUM_WORDS), more);
        add(sums + b * u32(SAMPLE_SUM_WORDS), more);
    }
    __syncthreads();
    const bool given = sh.flag == 0u;
    if (FAST && given && src.chunks() == 1u) {
        const Found f = find_digit<false>(sh.hist[0], u32(SAMPLE_HIST_BINS), m, sh, nullptr);
        const u32 many = f.above + f.count;
        if (many <= u32(SAMPLE_FAST_CAP)) {
            pack_from_bin(src, f.digit, g, &sh.counter);
            __syncthreads();
            rank_top(g, many, m, ranked);
            __syncthreads();
            return true;
        }
    }
    if (!given) {
        clear_hist(sh.hist[0]);
        __syncthreads();
    }
    const Cut cut = select_cut<false>(src, m, sh, given, nullptr);
    PackSink sink = {g};
    gather_cut(src, cut, m, sink, &sh.counter);
    __syncthreads();
    return false;
}

// The first index of x[0, len) holding the largest key (0 if none; best_key
// 0 then), scanned by the block's threads in ascending order each. A
// thread's 16-byte vectors are compared whole: the largest of a vector's
// four by max.NaN (NaN if any is), which replaces the thread's best only
// where it is larger or a NaN over a number, so the first vector holding
// the thread's best stays, and its first element equal to the best (or its
// first NaN) is the index; about 3 instructions an element where ranking
// each element's key took 11, which bound many-row argmax on the issue rate
// (bench/notes/glue-close-2026-11-28.md). -0 and +0 compare equal, as their
// keys do; a thread whose elements are all -inf keeps its first.
template <bool EVICT_FIRST = false>
__device__ __forceinline__ void scan_best(const float* x, u32 len, u32& best_key, u32& at) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    best_key = 0u;
    at = 0xffffffffu;
    if ((len & 3u) == 0u && aligned16(x)) {
        // SCAN_LOADS vectors a thread in flight before any compare;
        // EVICT_FIRST (the many-block form) loads them evict-first: the scan
        // reads each once (the winner's element again).
        constexpr u32 SCAN_LOADS = 4u;
        const float4* v4 = reinterpret_cast<const float4*>(x);
        const u32 nv = len / 4u;
        float best = neg_inf();
        float4 bv = make_float4(neg_inf(), neg_inf(), neg_inf(), neg_inf());
        u32 at_v = 0xffffffffu;
        for (u32 base = 0u; base < nv; base += SCAN_LOADS * bs) {
            float4 t[SCAN_LOADS];
#pragma unroll
            for (u32 s = 0; s < SCAN_LOADS; ++s) {
                const u32 vi = base + s * bs + tid;
                t[s] = vi < nv ? (EVICT_FIRST ? __ldcs(v4 + vi) : v4[vi]) : make_float4(neg_inf(), neg_inf(), neg_inf(), neg_inf());
            }
#pragma unroll
            for (u32 s = 0; s < SCAN_LOADS; ++s) {
                const float m = fmax_nan(fmax_nan(t[s].x, t[s].y), fmax_nan(t[s].z, t[s].w));
                // Larger, or NaN over a number; a padding vector (-inf) never replaces.
                if (!(m <= best) && best == best) {
                    best = m;
                    bv = t[s];
                    at_v = base + s * bs + tid;
                }
            }
        }
        if (at_v != 0xffffffffu) {
            const float e[4] = {bv.x, bv.y, bv.z, bv.w};
            const bool nan = best != best;
            u32 j = 3u;
#pragma unroll
            for (int q = 2; q >= 0; --q) {
                if (nan ? e[q] != e[q] : e[q] == best) j = u32(q);
            }
            at = 4u * at_v + j;
            best_key = order_key(e[j]);
        } else if (tid < nv) {
            at = 4u * tid;
            best_key = order_key(neg_inf());
        }
    } else {
        for (u32 i = tid; i < len; i += bs) {
            const u32 k = order_key(x[i]);
            if (k > best_key) {
                best_key = k;
                at = i;
            }
        }
    }
}

// ---- Philox4x32-10 ----

// Each round's two products as one 32 x 32 -> 64-bit multiply each
// (mul.wide.u32: high and low halves from one instruction).
__device__ __forceinline__ uint4 philox4x32_10(uint4 c, u32 k0, u32 k1) {
#pragma unroll
    for (u32 r = 0; r < 10u; ++r) {
        const u64 p0 = u64(0xD2511F53u) * c.x, p1 = u64(0xCD9E8D57u) * c.z;
        const u32 hi0 = u32(p0 >> 32), lo0 = u32(p0);
        const u32 hi1 = u32(p1 >> 32), lo1 = u32(p1);
        c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c;
}

// ---- the sampler ----

struct SampleLayout {
    u64 z, stats, cand, hist, state, rec, sums;
    u32 zs, nb2, nb4;
};

__device__ __forceinline__ SampleLayout sample_layout(const SampleParams* p) {
    SampleLayout l;
    const u64 rows = p->rows;
    l.zs = (p->n_vocab + 3u) & ~3u;
    l.nb2 = (p->n_vocab + 2047u) / 2048u;
    l.nb4 = (p->n_vocab + 4095u) / 4096u;
    l.z = 0u;
    l.stats = l.z + rows * l.zs;
    l.cand = l.stats + rows * l.nb2 * 4u;
    l.hist = l.cand + rows * l.nb4 * 512u;
    l.state = l.hist + rows * u32(SAMPLE_HIST_WORDS);
    l.rec = l.state + rows * u32(SAMPLE_STATE_WORDS);
    l.sums = l.rec + rows * l.nb4 * u32(SAMPLE_REC_WORDS);
    return l;
}

// Phase stamps, for bench/sample_trace.ts alone: that script compiles this
// file as a family of its own with MLXN_SAMPLE_TRACE defined, and there
// thread 0 of block (0, 0) of each pass writes clock64() and %globaltimer at
// stamp i into words 4 i .. 4 i + 3 past the scratch's layout (the script
// allocates them). SAMPLE_STAMP (where scratch, L and p are in scope) also
// keeps that address for SAMPLE_MARK, which a helper without them calls
// after it (only that thread writes or reads it). The library's program
// has no MLXN_SAMPLE_TRACE, so a stamp is no instruction there.
#ifdef MLXN_SAMPLE_TRACE
__device__ u32* sample_trace_words;
__device__ __forceinline__ void sample_mark(u32 i) {
    if (threadIdx.x == 0u && blockIdx.x == 0u && blockIdx.y == 0u && sample_trace_words != nullptr) {
        u64 g;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
        const u64 c = u64(clock64());
        u32* t = sample_trace_words + 4u * i;
        t[0] = u32(c);
        t[1] = u32(c >> 32);
        t[2] = u32(g);
        t[3] = u32(g >> 32);
    }
}
__device__ __forceinline__ void sample_stamp(u32* scratch, const SampleLayout& L, const SampleParams* p, u32 i) {
    if (threadIdx.x == 0u && blockIdx.x == 0u && blockIdx.y == 0u)
        sample_trace_words = scratch + L.sums + u64(p->rows) * L.nb2 * u32(SAMPLE_SUM_WORDS);
    sample_mark(i);
}
#define SAMPLE_STAMP(i) sample_stamp(scratch, L, p, (i))
#define SAMPLE_MARK(i) sample_mark(i)
#else
#define SAMPLE_STAMP(i) ((void)0)
#define SAMPLE_MARK(i) ((void)0)
#endif

__device__ __forceinline__ bool sample_whole_row(const SampleParams* p) {
    return p->temperature > 0.0f && p->top_k == 0u && p->n_cand > 0u && p->n_cand < p->n_vocab;
}

__device__ __forceinline__ float sample_value(float x, bool penalized, float penalty, float inv_t) {
    const u32 b = __float_as_uint(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) return neg_inf();
    if (penalized) x = x > 0.0f ? x / penalty : x * penalty;
    return fminf(x * inv_t, max_float());
}

__device__ __forceinline__ float sample_uniform(const SampleParams* p, u32 row) {
    const uint4 r = philox4x32_10(make_uint4(p->counter_lo, p->counter_hi, row, 0u), p->seed_lo, p->seed_hi);
    return float(r.x >> 8u) * 5.9604644775390625e-8f;
}

__device__ __forceinline__ float mass_scale(u32 n_vocab) {
    const u32 lg = n_vocab > 1u ? 32u - u32(__clz(n_vocab - 1u)) : 0u;
    return __uint_as_float((127u + 63u - lg) << 23);
}

__device__ __forceinline__ u64 fixed_mass(float z, float zmax, float scale) {
    return z == neg_inf() ? 0ull : u64(expf(z - zmax) * scale);
}

// A 64-bit add into a shared (lo, hi) word pair as 32-bit atomics, the carry
// into hi: native shared atomics, and the sum independent of their order.
__device__ __forceinline__ void add64_shared(u32* pair, u64 v) {
    const u32 vl = u32(v);
    const u32 old = atomicAdd(&pair[0], vl);
    const u32 vh = u32(v >> 32) + (old + vl < old ? 1u : 0u);
    if (vh != 0u) atomicAdd(&pair[1], vh);
}

// The logits of one slice, penalized and tempered: the key of z per item.
template <u32 N>
struct LogitSrc {
    static constexpr u32 ITEMS = N;
    const float* x;
    const unsigned char* flags;
    u32 n;
    u32 base;
    bool penalize;
    float penalty;
    float inv_t;
    u32 key[N];
    __device__ u32 pos(u32 c, u32 j) const { return item_pos<N, 4u>(c, j); }
    __device__ u32 index(u32 c, u32 j) const { return base + pos(c, j); }
    __device__ u32 chunks() const { return (n + N * blockDim.x - 1u) / (N * blockDim.x); }
    // The logits' bits into key[] (issued before the penalty's flags are set), then their keys.
    __device__ void fetch(u32 c) { fetch_bits(x, n, c, key); }
    // The flags of 4 items in a row are one aligned word (flags is 16-byte aligned, SAMPLE_MAX_SLICE bytes).
    __device__ void convert(u32 c) {
#pragma unroll
        for (u32 q = 0; q < N / 4u; ++q) {
            const u32 e0 = pos(c, 4u * q);
            const u32 f4 = penalize && e0 < n ? *reinterpret_cast<const u32*>(flags + e0) : 0u;
#pragma unroll
            for (u32 r = 0; r < 4u; ++r) {
                const u32 j = 4u * q + r;
                key[j] = e0 + r < n ? order_key(sample_value(__uint_as_float(key[j]), ((f4 >> (8u * r)) & 0xffu) != 0u, penalty, inv_t)) : 0u;
            }
        }
    }
    __device__ void load(u32 c) {
        fetch(c);
        convert(c);
    }
};

struct SliceWeights {
    const u32* z;
    float m;
    __device__ void reset() {}
    __device__ float weight(u32 i) { return expf(__uint_as_float(z[i]) - m); }
};

struct BlockWeights {
    const u32* stats;
    float m;
    __device__ void reset() {}
    __device__ float weight(u32 b) { return __uint_as_float(stats[4u * b + 1u]) * expf(__uint_as_float(stats[4u * b]) - m); }
};

struct RecordWeights {
    const u32* rec;
    __device__ void reset() {}
    __device__ float weight(u32 b) { return __uint_as_float(rec[u32(SAMPLE_REC_WORDS) * b]); }
};

struct KeptWeights {
    const u32* z;
    float m;
    u32 t;
    u32 ties;
    float min_p;
    u32 rank0;
    u32 rank;
    __device__ void reset() { rank = rank0; }
    __device__ float weight(u32 i) {
        const float zi = __uint_as_float(z[i]);
        const u32 k = order_key(zi);
        if (k < t) return 0.0f;
        if (k == t && rank++ >= ties) return 0.0f;
        const float w = expf(zi - m);
        return w >= min_p ? w : 0.0f;
    }
};

// Shared words of draw_in_order: the picked index, the last positive index + 1, the sum before the pick.
struct DrawShared {
    u32 pick;
    u32 last;
    float before;
};

// The chunk of n items that draw_in_order gives this thread: [b0, b1).
__device__ __forceinline__ void draw_chunk(u32 n, u32& b0, u32& b1) {
    const u32 chunk = (n + blockDim.x - 1u) / blockDim.x;
    b0 = min(n, threadIdx.x * chunk);
    b1 = min(n, b0 + chunk);
}

// draw_in_order after its first walk: `own` is the sum of this thread's
// weights over its chunk (draw_chunk), added in index order.
template <typename W>
__device__ u32 draw_in_order_from(W& w, u32 n, float own, float u, float& before, float& total, float* partials, DrawShared* sh) {
    const u32 tid = threadIdx.x;
    u32 b0, b1;
    draw_chunk(n, b0, b1);
    if (tid == 0u) {
        sh->pick = 0xffffffffu;
        sh->last = 0u;
    }
    float all;
    const float start = block_prefix_sum(own, all, partials);
    const float target = u * all;
    float c = start;
    u32 mine = 0xffffffffu, last_positive = 0u;
    float c_last = 0.0f;
    w.reset();
    for (u32 i = b0; i < b1; ++i) {
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
    if (mine != 0xffffffffu) atomicMin(&sh->pick, mine);
    if (last_positive != 0u) atomicMax(&sh->last, last_positive);
    __syncthreads();
    const u32 picked = sh->pick, latest = sh->last;
    const u32 chosen = picked != 0xffffffffu ? picked : latest - 1u;
    if (last_positive != 0u && last_positive - 1u == chosen) sh->before = c_last;
    __syncthreads();
    total = all;
    if (picked == 0xffffffffu && latest == 0u) {
        before = 0.0f;
        return 0u;
    }
    before = sh->before;
    return chosen;
}

// sample.metal: draw_in_order (contiguous chunks per thread, two walks).
template <typename W>
__device__ u32 draw_in_order(W& w, u32 n, float u, float& before, float& total, float* partials, DrawShared* sh) {
    u32 b0, b1;
    draw_chunk(n, b0, b1);
    w.reset();
    float own = 0.0f;
    for (u32 i = b0; i < b1; ++i) own += w.weight(i);
    return draw_in_order_from(w, n, own, u, before, total, partials, sh);
}

// Warp 0 only: exclusive prefix of v over the lanes, and the total.
__device__ __forceinline__ float warp_exclusive(float v, float& total) {
    const u32 lane = threadIdx.x & 31u;
    const float incl = warp_inclusive(v);
    total = __shfl_sync(0xffffffffu, incl, 31);
    const float ex = __shfl_up_sync(0xffffffffu, incl, 1);
    return lane == 0u ? 0.0f : ex;
}

__device__ __forceinline__ u32 warp_min_u32(u32 v) {
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ u32 warp_max_u32(u32 v) {
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Warp 0: the candidates' cut and draw (sample.metal: draw_ranked). `mass`
// is the row's where top_k = 0 and the candidates are not the whole row; it
// is not read otherwise (top-k's reference is the candidates' own mass, and
// candidates that are the whole row hold all of it).
__device__ void draw_ranked(const u32* sk, u32 mc, float zmax, float mass, const SampleParams* p, float u, u32* res) {
    const u32 lane = threadIdx.x & 31u;
    // The params once, ahead of the ranks' weights: read in the cut's loop,
    // each was a load in a chain of 8 dependent steps (2 us of the finish).
    const u32 top_k = p->top_k, n_vocab = p->n_vocab;
    const float top_p = p->top_p, min_p = p->min_p;
    const u32 per = (mc + 31u) / 32u;
    const u32 r0 = min(mc, lane * per);
    const u32 r1 = min(mc, r0 + per);
    float w[8];
    float own = 0.0f;
#pragma unroll
    for (u32 q = 0; q < 8u; ++q) {
        w[q] = r0 + q < r1 ? expf(key_value(sk[r0 + q]) - zmax) : 0.0f;
        own += w[q];
    }
    float cand_mass;
    const float start = warp_exclusive(own, cand_mass);
    const float ref = top_k > 0u || mc >= n_vocab ? cand_mass : mass;
    u32 cut = mc;
    float c = start;
#pragma unroll
    for (u32 q = 0; q < 8u; ++q) {
        if (r0 + q < r1 && cut == mc) {
            if ((top_p < 1.0f && !(c < top_p * ref)) || !(w[q] >= min_p)) {
                cut = r0 + q;
            } else {
                c += w[q];
            }
        }
    }
    const u32 len = warp_min_u32(cut);
    float kept_own = 0.0f;
#pragma unroll
    for (u32 q = 0; q < 8u; ++q) kept_own += r0 + q < len ? w[q] : 0.0f;
    float kept;
    c = warp_exclusive(kept_own, kept);
    const float target = u * kept;
    u32 mine = 0xffffffffu, last_positive = 0u;
#pragma unroll
    for (u32 q = 0; q < 8u; ++q) {
        if (r0 + q < min(r1, len) && mine == 0xffffffffu && w[q] > 0.0f) {
            last_positive = r0 + q + 1u;
            if (c + w[q] > target) {
                mine = r0 + q;
            } else {
                c += w[q];
            }
        }
    }
    const u32 picked = warp_min_u32(mine);
    const u32 latest = warp_max_u32(last_positive);
    if (lane == 0u) {
        res[0] = picked != 0xffffffffu ? picked : latest - 1u;
        res[1] = __float_as_uint(kept);
        res[2] = top_k == 0u && len == mc && mc < n_vocab ? 1u : 0u;
    }
}

// ---- the whole-row top-p cut ----

struct Derived {
    u32 digit;
    u64 above;
    u64 target;
    bool keep_all;
};

struct HistMass {
    const u32* h;
    __device__ u64 mass(u32 d) const { return u64(h[2u * d]) | (u64(h[2u * d + 1u]) << 32); }
};

struct CountMass {
    const u32* h;
    u32 prefix;
    float zmax;
    float scale;
    __device__ u64 mass(u32 d) const { return h[d] == 0u ? 0ull : u64(h[d]) * fixed_mass(key_value(prefix | d), zmax, scale); }
};

// Exclusive prefix over the block (whole warps) of a 64-bit v (integers: any
// order), and the total: each warp scans the warps' sums by shuffles.
__device__ u64 block_exclusive_u64(u64 v, u64& total, u64* warp_sums) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 lane = tid & 31u, warp = tid >> 5;
    const u64 incl = warp_inclusive(v);
    if (lane == 31u) warp_sums[warp] = incl;
    __syncthreads();
    const u32 nw = bs >> 5;
    const u64 ws = lane < nw ? warp_sums[lane] : 0ull;
    const u64 wincl = warp_inclusive(ws);
    const u64 ahead = __shfl_sync(0xffffffffu, wincl - ws, warp);
    total = __shfl_sync(0xffffffffu, wincl, 31);
    __syncthreads();
    return ahead + incl - v;
}

// sample.metal: derive_digit. res: 5 words.
// mark: the first of its two phase stamps (SAMPLE_MARK; none in the library).
template <typename H>
__device__ Derived derive_digit(const H& h, u32 nbins, u64 above, u64 target, bool first, float top_p, u64* warp_sums,
                                u32* res, u32 mark) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 per = (nbins + bs - 1u) / bs;
    const u32 top = nbins - min(nbins, tid * per);
    const u32 bottom = nbins - min(nbins, (tid + 1u) * per);
    // The thread's top 4 bins held from their load to the cut's search (one
    // dependent round trip to the histogram, not two); more are read again.
    u64 held[4];
    u64 s = 0ull;
#pragma unroll
    for (u32 j = 0; j < 4u; ++j) {
        held[j] = top > bottom + j ? h.mass(top - 1u - j) : 0ull;
        s += held[j];
    }
    for (u32 d = bottom; d + 4u < top; ++d) s += h.mass(d);
    if (tid == 0u) res[0] = 0xffffffffu;
    SAMPLE_MARK(mark);
    u64 all;
    const u64 ahead = block_exclusive_u64(s, all, warp_sums);
    SAMPLE_MARK(mark + 1u);
    Derived r;
    r.target = first ? u64(float(all) * top_p) : target;
    u64 acc = above + ahead;
    if (acc < r.target && r.target <= acc + s) {
        for (u32 d = top; d > bottom; --d) {
            const u32 j = top - d;
            const u64 md = j == 0u ? held[0] : j == 1u ? held[1] : j == 2u ? held[2] : j == 3u ? held[3] : h.mass(d - 1u);
            if (acc + md >= r.target) {
                res[0] = d - 1u;
                res[1] = u32(acc);
                res[2] = u32(acc >> 32);
                break;
            }
            acc += md;
        }
    }
    __syncthreads();
    r.digit = res[0];
    r.keep_all = r.digit == 0xffffffffu;
    r.above = r.keep_all ? 0ull : (u64(res[1]) | (u64(res[2]) << 32));
    __syncthreads();
    return r;
}

__device__ __forceinline__ void put_state(u32* st, u32 prefix, const Derived& d) {
    st[0] = prefix;
    st[1] = u32(d.above);
    st[2] = u32(d.above >> 32);
    st[3] = u32(d.target);
    st[4] = u32(d.target >> 32);
    st[5] = d.keep_all ? 1u : 0u;
}

__device__ float row_max(const u32* stats, u32 nb, float* partials) {
    float m = neg_inf();
    for (u32 b = threadIdx.x; b < nb; b += blockDim.x) m = fmaxf(m, __uint_as_float(stats[4u * b]));
    return block_max_synced(m, partials);
}

// The finish's draw from m < SAMPLE_MAX_K tokens that hold the kept set as
// a prefix of their rank order, packed in g as (key, ~index): ranked by
// counting, then draw_ranked over SAMPLE_MAX_K ranks, as the candidates'
// draw runs, the ranks past m holding key 0, whose NaN weight ends the kept
// prefix there. Writes the row's outputs.
__device__ void rank_draw(const u64* g, u32 m, float zmax, float mass, const SampleParams* p, float u, u32 row,
                          u32* out_token, float* out_logprob, u32* sk, u32* si, u32* res) {
    for (u32 r = m + threadIdx.x; r < u32(SAMPLE_MAX_K); r += blockDim.x) sk[r] = 0u;
    GroupSink ranked = {sk, si};
    rank_top(g, m, m, ranked);
    __syncthreads();
    SAMPLE_MARK(48u);
    if (threadIdx.x < 32u) {
        draw_ranked(sk, u32(SAMPLE_MAX_K), zmax, mass, p, u, res);
        SAMPLE_MARK(49u);
        if (threadIdx.x == 0u) {
            const u32 r = res[0];
            out_token[row] = si[r];
            out_logprob[row] = (key_value(sk[r]) - zmax) - logf(__uint_as_float(res[1]));
        }
    }
}

// Pairs i = from, from + blockDim.x, ... below m of a row's list (value bits, index) into g as (key, ~index); ends
// with a barrier.
__device__ void load_list(const u32* list, u32 m, u32 from, u64* g) {
    for (u32 i = from; i < m; i += blockDim.x)
        g[i] = (u64(order_key(__uint_as_float(list[2u * i]))) << 32) | ~list[2u * i + 1u];
    __syncthreads();
}

// The top-p kept set where no list holds it but it has fewer than
// SAMPLE_MAX_K tokens (ties or values within 1024 keys of the cut crowd its
// bins): the tokens of z [0, n) with keys above t and the first `need`
// (lowest indices) equal to t, into g as (key, ~index), scanned by
// contiguous chunks. *counter is 0, visibly to every thread, when called;
// ends with a barrier.
__device__ void scan_kept(const u32* z, u32 n, u32 t, u32 need, u64* g, u32* counter, float* partials) {
    const u32 chunk = (n + blockDim.x - 1u) / blockDim.x;
    const u32 i0 = min(n, threadIdx.x * chunk);
    const u32 i1 = min(n, i0 + chunk);
    float own = 0.0f;
    for (u32 i = i0; i < i1; ++i) own += order_key(__uint_as_float(z[i])) == t ? 1.0f : 0.0f;
    float all;
    u32 rank = u32(block_prefix_sum(own, all, partials));
    for (u32 i = i0; i < i1; ++i) {
        const u32 k = order_key(__uint_as_float(z[i]));
        if (k > t || (k == t && rank++ < need)) {
            const u32 slot = atomicAdd(counter, 1u);
            if (slot < u32(SAMPLE_MAX_K)) g[slot] = (u64(k) << 32) | ~i;
        }
    }
    __syncthreads();
}

// Up to 4 weights a thread holds in registers for draw_in_order_from, items
// i0 to i0 + 3 (selected, not indexed, so they stay in registers).
struct HeldWeights {
    float w[4];
    u32 i0;
    __device__ void reset() {}
    __device__ float weight(u32 i) const {
        const u32 r = i - i0;
        return r == 0u ? w[0] : r == 1u ? w[1] : r == 2u ? w[2] : w[3];
    }
};

// The draw inside the picked slice of z [0, len): draw_in_order over
// KeptWeights (t: the cut key, 0 for none; the first kept_ties ties at t by
// index are kept) with the same chunks and float additions, but where a
// chunk is at most 4 z (a 4096 slice at 1024 threads) they are loaded once,
// together, and held in registers through the tie count and both walks.
__device__ u32 draw_kept(const u32* z, u32 len, float zmax, u32 t, u32 kept_ties, float min_p, float u, float* partials,
                         DrawShared* sh) {
    u32 i0, i1;
    draw_chunk(len, i0, i1);
    if (len > 4u * blockDim.x) {
        float own = 0.0f;
        for (u32 i = i0; i < i1; ++i) own += t != 0u && order_key(__uint_as_float(z[i])) == t ? 1.0f : 0.0f;
        float all_ties;
        const u32 rank0 = u32(block_prefix_sum(own, all_ties, partials));
        KeptWeights w = {z, zmax, t, kept_ties, min_p, rank0, rank0};
        float sb, st;
        return draw_in_order(w, len, u, sb, st, partials, sh);
    }
    u32 bits[4];
    if (i0 + 4u == i1 && aligned16(z + i0)) {
        const uint4 v = *reinterpret_cast<const uint4*>(z + i0);
        bits[0] = v.x, bits[1] = v.y, bits[2] = v.z, bits[3] = v.w;
    } else {
#pragma unroll
        for (u32 r = 0; r < 4u; ++r) bits[r] = i0 + r < i1 ? z[i0 + r] : 0u;
    }
    u32 rank = 0u;
    if (t != 0u) {
        float own = 0.0f;
#pragma unroll
        for (u32 r = 0; r < 4u; ++r) own += i0 + r < i1 && order_key(__uint_as_float(bits[r])) == t ? 1.0f : 0.0f;
        float all_ties;
        rank = u32(block_prefix_sum(own, all_ties, partials));
    }
    HeldWeights held = {{0.0f, 0.0f, 0.0f, 0.0f}, i0};
    float own = 0.0f;
#pragma unroll
    for (u32 r = 0; r < 4u; ++r) {
        const float zi = __uint_as_float(bits[r]);
        const u32 k = order_key(zi);
        if (i0 + r < i1 && k >= t && !(k == t && rank++ >= kept_ties)) {
            const float wr = expf(zi - zmax);
            held.w[r] = wr >= min_p ? wr : 0.0f;
        }
        own += held.w[r];
    }
    float sb, st;
    return draw_in_order_from(held, len, own, u, sb, st, partials, sh);
}

// The words of a row's state that the whole-row finish reads (the level-0
// cut's keep-all flag, the level-1 cut's prefix, above, target and
// keep-all, the lists' counts), loaded together at the finish's start, so
// their loads leave the chain of reductions before they are used.
struct RowState {
    u32 keep_all0, prefix, above_lo, above_hi, target_lo, target_hi, keep_all1, minp, bin, range;
};

__device__ __forceinline__ RowState load_row_state(const u32* st) {
    return {st[5], st[8], st[9], st[10], st[11], st[12], st[13], st[SAMPLE_LIST_MINP], st[SAMPLE_LIST_BIN], st[SAMPLE_LIST_RANGE]};
}

// The finish's whole-row draw (sample.metal: finish_whole_row), where no
// list holds the kept set; a top-p kept set of fewer than SAMPLE_MAX_K
// tokens is gathered from z (scan_kept) and drawn in rank order. mass: the
// row's (the candidates' draw's top-p reference).
__device__ void finish_whole_row(u32* scratch, u32* out_token, float* out_logprob, const SampleParams* p, const SampleLayout& L,
                                 u32 row, const RowState& state, float zmax, float mass, float u, u64* warp_sums, u32* res,
                                 float* partials, DrawShared* draw, u64* g, u32* sk, u32* si, u32* counter) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 lane = tid & 31u, warp = tid >> 5, nw = bs >> 5;
    const u32 n = p->n_vocab, nb = p->n_blocks;
    const float scale = mass_scale(n);
    const u32* z = scratch + L.z + u64(row) * L.zs;
    const u32* hist = scratch + L.hist + u64(row) * u32(SAMPLE_HIST_WORDS);
    u32* rec = scratch + L.rec + u64(row) * L.nb4 * u32(SAMPLE_REC_WORDS);
    u32 t = 0u, need = 0u;
    const u32 prefix = state.prefix;
    if (p->top_p < 1.0f && state.keep_all1 == 0u) {
        const u64 above = u64(state.above_lo) | (u64(state.above_hi) << 32);
        const u64 target = u64(state.target_lo) | (u64(state.target_hi) << 32);
        const CountMass h = {hist + 4u * u32(SAMPLE_HIST_BINS), prefix, zmax, scale};
        const Derived d = derive_digit(h, u32(SAMPLE_LAST_BINS), above, target, false, p->top_p, warp_sums, res, 46u);
        SAMPLE_STAMP(37u);
        if (!d.keep_all) {
            t = prefix | d.digit;
            const u64 wt = fixed_mass(key_value(t), zmax, scale);
            const u32 ties = hist[4u * u32(SAMPLE_HIST_BINS) + d.digit];
            need = u32(min(u64(ties), max(1ull, (d.target - d.above + wt - 1ull) / wt)));
            // The tokens with keys above t: those at or above the range (the
            // range list's count) less the range's up to t.
            float own = 0.0f;
            for (u32 e = tid; e <= d.digit; e += bs) own += float(hist[4u * u32(SAMPLE_HIST_BINS) + e]);
            const u32 upto = u32(block_sum_synced(own, partials));
            if (state.range - upto + need < u32(SAMPLE_MAX_K)) {
                if (tid == 0u) *counter = 0u;
                __syncthreads();
                scan_kept(z, n, t, need, g, counter, partials);
                rank_draw(g, min(*counter, u32(SAMPLE_MAX_K) - 1u), zmax, mass, p, u, row, out_token, out_logprob, sk, si, res);
                SAMPLE_STAMP(38u);
                return;
            }
        }
    }
    const float q = expf(key_value(t) - zmax);
    // With a cut key t (top-p), each slice's record gets the kept mass of
    // its keys in the cut's range above t and, in word 1, its ties at t;
    // without one (min-p alone, every token kept) the records hold each
    // slice's kept mass already and no tie is kept. A record's words are
    // loaded together (entries past ne go unused).
    if (t != 0u) {
        for (u32 b = warp; b < nb; b += nw) {
            u32* r = rec + b * u32(SAMPLE_REC_WORDS);
            const u32 r0 = r[0], ne = r[1], e = r[2u + lane];
            float mass = 0.0f;
            u32 ties = 0u;
            if (ne <= u32(SAMPLE_REC_CAP)) {
                if (lane < ne) {
                    const u32 k = (prefix & ~1023u) | (e & 1023u);
                    const float w = expf(key_value(k) - zmax);
                    mass = k > t && w >= p->min_p ? float(e >> 10) * w : 0.0f;
                    ties = k == t ? e >> 10 : 0u;
                }
            } else {
                const u32 lo = b * p->slice;
                const u32 len = min(p->slice, n - lo);
                for (u32 i = lane; i < len; i += 32u) {
                    const float zi = __uint_as_float(z[lo + i]);
                    const u32 k = order_key(zi);
                    if ((k >> 10) == (prefix >> 10)) {
                        const float w = expf(zi - zmax);
                        mass += k > t && w >= p->min_p ? w : 0.0f;
                        ties += k == t ? 1u : 0u;
                    }
                }
            }
            mass = warp_sum(mass);
            ties = __reduce_add_sync(0xffffffffu, ties);
            if (lane == 0u) {
                r[0] = __float_as_uint(__uint_as_float(r0) + mass);
                r[1] = ties;
            }
        }
        __syncthreads();
    }
    SAMPLE_STAMP(39u);
    // The slices' weights: with t, the first `need` ties by index are kept
    // (each slice's share by the ties before it), the record's final weight
    // and kept ties written back; this thread's sum is draw_in_order's first
    // walk, so the draw over the records reads them once more.
    float own = 0.0f;
    {
        u32 b0, b1;
        draw_chunk(nb, b0, b1);
        u32 before = 0u;
        if (t != 0u) {
            float ties = 0.0f;
            for (u32 b = b0; b < b1; ++b) ties += float(rec[b * u32(SAMPLE_REC_WORDS) + 1u]);
            float all;
            before = u32(block_prefix_sum(ties, all, partials));
        }
        for (u32 b = b0; b < b1; ++b) {
            u32* r = rec + b * u32(SAMPLE_REC_WORDS);
            float wb = __uint_as_float(r[0]);
            if (t != 0u) {
                const u32 ties = r[1];
                const u32 kept = need > before ? min(ties, need - before) : 0u;
                wb = wb + (q >= p->min_p ? float(kept) * q : 0.0f);
                r[0] = __float_as_uint(wb);
                r[1] = kept;
                before += ties;
            }
            own += wb;
        }
    }
    SAMPLE_STAMP(40u);
    RecordWeights blocks = {rec};
    float before, total;
    const u32 b = draw_in_order_from(blocks, nb, own, u, before, total, partials, draw);
    SAMPLE_STAMP(41u);
    const float wb = blocks.weight(b);
    const float ub = fminf(fmaxf((u * total - before) / wb, 0.0f), 0.99999994f);
    const u32 lo = b * p->slice;
    const u32 len = min(p->slice, n - lo);
    const u32 kept_ties = t != 0u ? rec[b * u32(SAMPLE_REC_WORDS) + 1u] : 0u;
    const u32 i = draw_kept(z + lo, len, zmax, t, kept_ties, p->min_p, ub, partials, draw);
    if (tid == 0u) {
        out_token[row] = lo + i;
        out_logprob[row] = (__uint_as_float(z[lo + i]) - zmax) - logf(total);
    }
    SAMPLE_STAMP(42u);
}

// A row's candidates as the merging block holds them, and their summaries.
template <u32 N>
__device__ __forceinline__ PairSrc<N> row_candidates(const u32* scratch, const SampleParams* p, const SampleLayout& L, u32 row) {
    PairSrc<N> src = {scratch + L.cand + u64(row) * L.nb4 * 512u, p->n_blocks * p->n_cand};
    return src;
}
__device__ __forceinline__ const u32* row_sums(const u32* scratch, const SampleLayout& L, u32 row) {
    return scratch + L.sums + u64(row) * L.nb2 * u32(SAMPLE_SUM_WORDS);
}

// The top min(n_cand, n_vocab) of a row's candidates (src, chunk 0 loaded;
// pre: prefetch_sums of row_sums), ranked into sk / si (ends with a barrier).
template <bool FAST, typename Src>
__device__ void rank_candidates(Src& src, SumWords& pre, const u32* scratch, const SampleParams* p, const SampleLayout& L,
                                u32 row, SelectShared& sh, u64* g, u32* sk, u32* si) {
    const u32 mc = min(p->n_cand, p->n_vocab);
    GroupSink ranked = {sk, si};
    if (gather_top<FAST>(src, row_sums(scratch, L, row), pre, p->n_blocks, mc, sh, g, ranked)) return;
    rank_top(g, mc, mc, ranked);
    __syncthreads();
}

// The finish where the candidates hold the kept set (top-k, or every
// token): rank them, draw in rank order. N candidates a thread: the plan
// gives one thread per 8 up to 1024 (half the slots of a thread's chain of
// 16), with the merge's fast path; rows of more (over 8192 candidates: a
// top-k over 64 at long vocabularies, whose cut's bin rarely holds few)
// take 16 and the radix levels only. Not inlined: each instance gets its
// own registers (inlined together, the kernel spilled ~100 bytes).
template <u32 N>
__device__ __noinline__ void finish_candidates(u32* scratch, u32* out_token, float* out_logprob, const SampleParams* p, u32 row, float u,
                                               SelectShared& sh, u64* g, u32* sk, u32* si, u32* res) {
    const SampleLayout L = sample_layout(p);
    PairSrc<N> src = row_candidates<N>(scratch, p, L, row);
    src.load(0u);
    SumWords pre = prefetch_sums(row_sums(scratch, L, row), p->n_blocks);
    rank_candidates<N == u32(SAMPLE_SLICE_ITEMS)>(src, pre, scratch, p, L, row, sh, g, sk, si);
    const u32 mc = min(p->n_cand, p->n_vocab);
    const float zmax = key_value(sk[0]);
    if (zmax == neg_inf()) {
        if (threadIdx.x == 0u) {
            out_token[row] = 0xffffffffu;
            out_logprob[row] = neg_inf();
        }
        return;
    }
    // Warp 0 draws and lane 0 writes what it drew: no barrier after the draw.
    if (threadIdx.x < 32u) {
        draw_ranked(sk, mc, zmax, 0.0f, p, u, res);
        if (threadIdx.x == 0u) {
            const u32 r = res[0];
            out_token[row] = si[r];
            out_logprob[row] = (key_value(sk[r]) - zmax) - logf(__uint_as_float(res[1]));
        }
    }
}

}  // namespace

// ---- arg-max ----

// buffer(0) input [rows, n_elements], (1) out_index [rows], (2) out_value [rows], (3) ArgmaxParams.
extern "C" __global__ void __launch_bounds__(1024) argmax_f32(const float* input, u32* out_index, float* out_value,
                                                              const ArgmaxParams* params) {
    __shared__ float vals[SAMPLE_MAX_THREADS];
    __shared__ u32 idxs[SAMPLE_MAX_THREADS];
    const u32 row = blockIdx.x;
    const u32 n = params->n_elements;
    const float* x = input + u64(row) * n;
    u32 best_key, ix;
    scan_best(x, n, best_key, ix);
    float v = ix == 0xffffffffu ? neg_inf() : x[ix];
    block_argmax(v, ix, vals, idxs);
    if (threadIdx.x == 0u) {
        out_index[row] = ix;
        out_value[row] = v;
    }
}

// buffer(0) input, (1) partials [rows, n_blocks, 2], (2) ArgmaxBlocksParams; grid (rows, n_blocks).
extern "C" __global__ void __launch_bounds__(1024) argmax_blocks_f32(const float* input, u32* partials,
                                                                     const ArgmaxBlocksParams* p) {
    __shared__ float vals[SAMPLE_MAX_THREADS];
    __shared__ u32 idxs[SAMPLE_MAX_THREADS];
    const u32 row = blockIdx.x, b = blockIdx.y;
    const u32 lo = b * p->slice;
    const u32 len = min(p->slice, p->n_elements - lo);
    const float* x = input + u64(row) * p->n_elements + lo;
    u32 best_key, at;
    scan_best<true>(x, len, best_key, at);
    float v = at == 0xffffffffu ? neg_inf() : x[at];
    u32 ix = at == 0xffffffffu ? at : lo + at;
    block_argmax(v, ix, vals, idxs);
    if (threadIdx.x == 0u) {
        const u64 o = (u64(row) * p->n_blocks + b) * 2u;
        partials[o] = __float_as_uint(v);
        partials[o + 1u] = ix;
    }
}

// buffer(0) partials, (1) out_index, (2) out_value, (3) ArgmaxBlocksParams; grid (rows).
extern "C" __global__ void __launch_bounds__(1024) argmax_merge_f32(const u32* partials, u32* out_index, float* out_value,
                                                                    const ArgmaxBlocksParams* p) {
    __shared__ float vals[SAMPLE_MAX_THREADS];
    __shared__ u32 idxs[SAMPLE_MAX_THREADS];
    const u32 row = blockIdx.x;
    const u32* q = partials + u64(row) * p->n_blocks * 2u;
    float v = neg_inf();
    u32 ix = 0xffffffffu;
    for (u32 b = threadIdx.x; b < p->n_blocks; b += blockDim.x) {
        const float bv = __uint_as_float(q[2u * b]);
        const u32 bi = q[2u * b + 1u];
        if (ranks_before(order_key(bv), bi, order_key(v), ix)) {
            v = bv;
            ix = bi;
        }
    }
    block_argmax(v, ix, vals, idxs);
    if (threadIdx.x == 0u) {
        out_index[row] = ix;
        out_value[row] = v;
    }
}



// ---- top-k ----

// buffer(0) input, (1) out_indices [rows, k], (2) out_values [rows, k], (3) TopKParams; grid (rows).
extern "C" __global__ void __launch_bounds__(1024) top_k_f32(const float* input, u32* out_indices, float* out_values,
                                                             const TopKParams* params) {
    __shared__ SelectShared sh;
    __shared__ float vals[SAMPLE_MAX_THREADS];
    __shared__ u32 idxs[SAMPLE_MAX_THREADS];
    __shared__ u64 g[SAMPLE_MAX_K];
    const u32 row = blockIdx.x, tid = threadIdx.x, bs = blockDim.x;
    const u32 n = params->n_elements, k = params->k;
    const u32 m = min(k, n);
    const float* x = input + u64(row) * n;
    const u64 o = u64(row) * k;
    if (m == 1u) {
        u32 best_key, ix;
        scan_best(x, n, best_key, ix);
        float v = ix == 0xffffffffu ? neg_inf() : x[ix];
        block_argmax(v, ix, vals, idxs);
        for (u32 r = tid; r < k; r += bs) {
            out_values[o + r] = r == 0u ? v : neg_inf();
            out_indices[o + r] = r == 0u ? ix : 0xffffffffu;
        }
        return;
    }
    clear_hist(sh.hist[0]);
    if (tid == 0u) sh.counter = 0u;
    FloatSrc<SAMPLE_ITEMS> src = {x, n, 0u};
    src.load(0u);
    __syncthreads();
    const Cut cut = select_cut<false>(src, m, sh, false, nullptr);
    PackSink kept = {g};
    gather_cut(src, cut, m, kept, &sh.counter);
    __syncthreads();
    OutSink out = {out_values, out_indices, o};
    rank_top(g, m, m, out);
    for (u32 r = m + tid; r < k; r += bs) {
        out_values[o + r] = neg_inf();
        out_indices[o + r] = 0xffffffffu;
    }
}

// buffer(0) input, (1) scratch (per row: candidates [n_blocks, k, 2], then
// summaries [n_blocks, SAMPLE_SUM_WORDS]), (2) TopKBlocksParams; grid (rows,
// n_blocks) of at most slice / SAMPLE_SLICE_ITEMS threads (one chunk).
extern "C" __global__ void __launch_bounds__(512) top_k_blocks_f32(const float* input, u32* candidates,
                                                                   const TopKBlocksParams* p) {
    __shared__ SelectShared sh;
    __shared__ u32 summary[SAMPLE_SUM_WORDS];
    const u32 tid = threadIdx.x;
    const u32 row = blockIdx.x, b = blockIdx.y;
    const u32 lo = b * p->slice;
    const u32 len = min(p->slice, p->n_elements - lo);
    const u32 m = min(p->k, len);
    clear_hist(sh.hist[0]);
    if (tid < u32(SAMPLE_SUM_WORDS)) summary[tid] = 0u;
    if (tid == 0u) sh.counter = sh.packed = 0u;
    FloatSrc<SAMPLE_SLICE_ITEMS> src = {input + u64(row) * p->n_elements + lo, len, lo};
    src.load(0u);
    __syncthreads();
    u32* base = candidates + u64(row) * p->n_blocks * (2u * p->k + u32(SAMPLE_SUM_WORDS));
    u32* out = base + u64(b) * p->k * 2u;
    select_pairs(src, m, p->k, sh, summary, out);
    __syncthreads();
    if (tid < u32(SAMPLE_SUM_WORDS)) base[u64(p->n_blocks) * p->k * 2u + b * u32(SAMPLE_SUM_WORDS) + tid] = summary[tid];
}

// buffer(0) scratch (as top_k_blocks_f32 left it), (1) out_indices, (2) out_values, (3) TopKBlocksParams; grid (rows).
extern "C" __global__ void __launch_bounds__(1024) top_k_merge_f32(const u32* candidates, u32* out_indices, float* out_values,
                                                                   const TopKBlocksParams* p) {
    __shared__ SelectShared sh;
    __shared__ u64 g[SAMPLE_MAX_K];
    const u32 row = blockIdx.x, nb = p->n_blocks, k = p->k;
    const u32 m = min(k, p->n_elements);
    const u32* base = candidates + u64(row) * nb * (2u * k + u32(SAMPLE_SUM_WORDS));
    PairSrc<SAMPLE_ITEMS> src = {base, nb * k};
    src.load(0u);
    const u32* sums = base + u64(nb) * k * 2u;
    SumWords pre = prefetch_sums(sums, nb);
    const u64 o = u64(row) * k;
    OutSink out = {out_values, out_indices, o};
    if (!gather_top<true>(src, sums, pre, nb, m, sh, g, out)) rank_top(g, m, m, out);
    for (u32 r = m + threadIdx.x; r < k; r += blockDim.x) {
        out_values[o + r] = neg_inf();
        out_indices[o + r] = 0xffffffffu;
    }
}

// ---- mlx-native's softmax_sample ----

// buffer(0) logits [n], (1) scratch [n], (2) out_token [1], (3) out_logprob [1], (4) SoftmaxSampleParams; grid (1).
extern "C" __global__ void __launch_bounds__(1024) softmax_sample_f32(const float* logits, float* scratch, u32* out_token,
                                                                      float* out_logprob, const SoftmaxSampleParams* params) {
    __shared__ float partials[32];
    __shared__ u32 pick;
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 n = u32(params->n_elements);
    const float inv_t = 1.0f / params->temperature;
    float m = neg_inf();
    for (u32 i = tid; i < n; i += bs) m = fmaxf(m, logits[i] * inv_t);
    m = block_max_synced(m, partials);
    float s = 0.0f;
    for (u32 i = tid; i < n; i += bs) {
        const float e = expf(logits[i] * inv_t - m);
        scratch[i] = e;
        s += e;
    }
    const float inv = 1.0f / block_sum_synced(s, partials);
    for (u32 i = tid; i < n; i += bs) scratch[i] *= inv;
    if (tid == 0u) pick = n - 1u;
    __syncthreads();
    const u32 chunk = (n + bs - 1u) / bs;
    const u32 b0 = min(n, tid * chunk);
    const u32 b1 = min(n, b0 + chunk);
    float own = 0.0f;
    for (u32 i = b0; i < b1; ++i) own += scratch[i];
    float total;
    float c = block_prefix_sum(own, total, partials);
    for (u32 i = b0; i < b1; ++i) {
        c += scratch[i];
        if (c >= params->random_val) {
            atomicMin(&pick, i);
            break;
        }
    }
    __syncthreads();
    if (tid == 0u) {
        const u32 tok = pick;
        out_token[0] = tok;
        out_logprob[0] = logf(scratch[tok]);
    }
}

// ---- Philox4x32-10 ----

// buffer(0) output [n_blocks, 4], (1) PhiloxParams; grid (ceil(n_blocks / bs)).
extern "C" __global__ void philox4x32_10_u32(u32* output, const PhiloxParams* p) {
    const u32 j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= p->n_blocks) return;
    uint4 c = make_uint4(p->counter0 + j, p->counter1, p->counter2, p->counter3);
    if (c.x < j) {
        c.y += 1u;
        if (c.y == 0u) {
            c.z += 1u;
            if (c.z == 0u) c.w += 1u;
        }
    }
    reinterpret_cast<uint4*>(output)[j] = philox4x32_10(c, p->key0, p->key1);
}



// ---- the sampler ----

// buffer(0) logits, (1) prev_tokens, (2) scratch, (3) SampleParams; grid (rows, n_blocks) of at most
// slice / SAMPLE_SLICE_ITEMS threads (one chunk).
extern "C" __global__ void __launch_bounds__(512) sample_blocks_f32(const float* logits, const u32* prev_tokens, u32* scratch,
                                                                    const SampleParams* p) {
    __shared__ SelectShared sh;
    __shared__ u32 summary[SAMPLE_SUM_WORDS];
    __shared__ __align__(16) unsigned char flags[SAMPLE_MAX_SLICE];
    __shared__ u32 wk[32];
    __shared__ u32 wi[32];
    __shared__ float wm[32];
    __shared__ float ws[32];
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 lane = tid & 31u, warp = tid >> 5;
    const u32 row = blockIdx.x, b = blockIdx.y;
    const u32 n = p->n_vocab;
    const u32 lo = b * p->slice;
    const u32 len = min(p->slice, n - lo);
    const SampleLayout L = sample_layout(p);
    SAMPLE_STAMP(24u);
    // The whole-row configurations take no candidates: their mass passes
    // list the tokens that may be kept, on counters zeroed here.
    const bool whole = sample_whole_row(p);
    const bool select = p->n_cand > 0u && p->temperature > 0.0f && !whole;
    if (whole && b == 0u && tid < 3u) scratch[L.state + u64(row) * u32(SAMPLE_STATE_WORDS) + u32(SAMPLE_LIST_MINP) + tid] = 0u;
    if (select) {
        clear_hist(sh.hist[0]);
        if (tid < u32(SAMPLE_SUM_WORDS)) summary[tid] = 0u;
        if (tid == 0u) sh.counter = sh.packed = 0u;
    }
    // The mass passes add into this row's histograms: each slice clears its share.
    if (whole && p->top_p < 1.0f) {
        const u32 share = (u32(SAMPLE_HIST_WORDS) + p->n_blocks - 1u) / p->n_blocks;
        u32* h = scratch + L.hist + u64(row) * u32(SAMPLE_HIST_WORDS);
        for (u32 i = b * share + tid; i < min(u32(SAMPLE_HIST_WORDS), (b + 1u) * share); i += bs) h[i] = 0u;
    }
    const bool penalize = p->n_prev > 0u && p->repetition_penalty != 1.0f;
    LogitSrc<SAMPLE_SLICE_ITEMS> src = {logits + u64(row) * n + lo, flags, len, lo, penalize, p->repetition_penalty,
                                        p->temperature > 0.0f ? 1.0f / p->temperature : 1.0f};
    const u32 chunks = src.chunks();
    if (chunks == 1u) src.fetch(0u);
    if (penalize)
        for (u32 i = tid; i < (len + 15u) / 16u; i += bs) reinterpret_cast<uint4*>(flags)[i] = make_uint4(0u, 0u, 0u, 0u);
    __syncthreads();
    if (penalize) {
        const u32* prev = prev_tokens + u64(row) * p->n_prev;
        for (u32 j = tid; j < p->n_prev; j += bs) {
            const u32 t = prev[j];
            if (t >= lo && t - lo < len) flags[t - lo] = 1;
        }
        __syncthreads();
    }
    const bool store_z = p->temperature > 0.0f && p->top_k == 0u;
    u32* z = scratch + L.z + u64(row) * L.zs + lo;
    const bool zvec = aligned16(z);
    // z stored where a later pass reads it; this thread's best, max and sum of exp(z - max).
    u32 best = 0u, at = 0xffffffffu;
    float m = neg_inf(), s = 0.0f;
    for (u32 c = 0; c < chunks; ++c) {
        if (chunks > 1u) src.fetch(c);
        src.convert(c);
        float v[SAMPLE_SLICE_ITEMS];
        float cm = neg_inf();
#pragma unroll
        for (u32 j = 0; j < u32(SAMPLE_SLICE_ITEMS); ++j) {
            const u32 k = src.key[j];
            v[j] = k != 0u ? key_value(k) : neg_inf();
            if (k != 0u) keep_best(best, at, k, src.index(c, j));
            cm = fmaxf(cm, v[j]);
        }
        if (cm > m) {
            if (m != neg_inf()) s *= expf(m - cm);
            m = cm;
        }
        if (m != neg_inf()) {
#pragma unroll
            for (u32 j = 0; j < u32(SAMPLE_SLICE_ITEMS); ++j) s += v[j] != neg_inf() ? expf(v[j] - m) : 0.0f;
        }
        if (store_z) {
#pragma unroll
            for (u32 q = 0; q < u32(SAMPLE_SLICE_ITEMS) / 4u; ++q) {
                const u32 e0 = src.pos(c, 4u * q);
                if (zvec && e0 + 4u <= len) {
                    *reinterpret_cast<uint4*>(z + e0) = make_uint4(__float_as_uint(v[4u * q]), __float_as_uint(v[4u * q + 1u]),
                                                                   __float_as_uint(v[4u * q + 2u]), __float_as_uint(v[4u * q + 3u]));
                } else {
                    for (u32 r = 0; r < 4u; ++r)
                        if (e0 + r < len) z[e0 + r] = __float_as_uint(v[4u * q + r]);
                }
            }
        }
    }
    // The warps' bests and (max, sum), combined in warp order after a later barrier.
    warp_best(best, at);
    const float mw = warp_max(m);
    const float sw = warp_sum(m == neg_inf() ? 0.0f : s * expf(m - mw));
    if (lane == 0u) {
        wk[warp] = best;
        wi[warp] = at;
        wm[warp] = mw;
        ws[warp] = sw;
    }
    u32* sums = scratch + L.sums + (u64(row) * L.nb2 + b) * u32(SAMPLE_SUM_WORDS);
    if (select) {
        const u32 mc = min(p->n_cand, len);
        u32* out = scratch + L.cand + u64(row) * L.nb4 * 512u + u64(b) * p->n_cand * 2u;
        select_pairs(src, mc, p->n_cand, sh, summary, out);
    }
    __syncthreads();
    if (select && tid < u32(SAMPLE_SUM_WORDS)) sums[tid] = summary[tid];
    // Warp 0 combines the warps' (best, max, sum) across its lanes (a fixed
    // shuffle tree) instead of one thread walking them.
    if (warp == 0u) {
        const u32 nw = bs >> 5;
        u32 bk = lane < nw ? wk[lane] : 0u, bi = lane < nw ? wi[lane] : 0xffffffffu;
        const float wml = lane < nw ? wm[lane] : neg_inf();
        warp_best(bk, bi);
        const float bm = warp_max(wml);
        const float bsum = warp_sum(wml == neg_inf() ? 0.0f : ws[lane] * expf(wml - bm));
        if (lane == 0u) {
            u32* stats = scratch + L.stats + (u64(row) * L.nb2 + b) * 4u;
            *reinterpret_cast<uint4*>(stats) = make_uint4(__float_as_uint(key_value(bk)), __float_as_uint(bsum), bi, 0u);
        }
    }
}

// buffer(0) scratch, (1) SampleParams (pass 0, 1, 2); grid (rows, n_blocks).
extern "C" __global__ void __launch_bounds__(1024) sample_mass_f32(u32* scratch, const SampleParams* p) {
    __shared__ unsigned long long hmass[SAMPLE_HIST_BINS];
    __shared__ u64 warp_sums[32];
    __shared__ u32 res[8];
    __shared__ float partials[32];
    // A step's listed tokens per warp, then each warp's first slot in the row's list.
    __shared__ u32 list_count[32];
    __shared__ u32 list_first[32];
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 row = blockIdx.x, b = blockIdx.y;
    const u32 n = p->n_vocab;
    const u32 lo = b * p->slice;
    const u32 len = min(p->slice, n - lo);
    const SampleLayout L = sample_layout(p);
    SAMPLE_STAMP(8u * p->pass);
    const u32* z = scratch + L.z + u64(row) * L.zs + lo;
    const bool zvec = aligned16(z);
    // This thread's z (4 a step, one 16-byte load), before the row's max arrives.
    const u32 steps = (len + 4u * bs - 1u) / (4u * bs);
    uint4 zz = make_uint4(0u, 0u, 0u, 0u);
    const u32 e0 = 4u * tid;
    auto load4 = [&](u32 e) {
        uint4 t = make_uint4(__float_as_uint(neg_inf()), __float_as_uint(neg_inf()), __float_as_uint(neg_inf()),
                             __float_as_uint(neg_inf()));
        if (zvec && e + 4u <= len) {
            t = *reinterpret_cast<const uint4*>(z + e);
        } else {
            if (e < len) t.x = z[e];
            if (e + 1u < len) t.y = z[e + 1u];
            if (e + 2u < len) t.z = z[e + 2u];
            if (e + 3u < len) t.w = z[e + 3u];
        }
        return t;
    };
    if (steps == 1u) zz = load4(e0);
    // f(zv, e) for each step of this thread's z: the bits of 4 z and the
    // slice index of the first (past len: -inf).
    auto each_step = [&](auto&& f) {
        for (u32 st = 0; st < steps; ++st) {
            if (steps > 1u) zz = load4(e0 + 4u * bs * st);
            const u32 zv[4] = {zz.x, zz.y, zz.z, zz.w};
            f(zv, e0 + 4u * bs * st);
        }
    };
    // Appends the z of zv that `keep` marks to the row's list, counted on
    // state word `word`: the first SAMPLE_MAX_K stored, every one counted.
    // The block counts its own first (warp scans, then warp 0 over the
    // warps), so the row's count takes one atomic per block and step, not
    // one per warp (a list past the cut's bin holds most of a slice, and
    // every block's warps would queue on the one word). Every thread of the
    // block calls it at each step.
    u32* list = scratch + L.cand + u64(row) * L.nb4 * 512u;
    u32* state = scratch + L.state + u64(row) * u32(SAMPLE_STATE_WORDS);
    auto append = [&](u32 word, const u32 (&zv)[4], u32 e, u32 keep) {
        const u32 lane = tid & 31u, warp = tid >> 5;
        const u32 own = u32(__popc(keep));
        const u32 incl = warp_inclusive(own);
        if (lane == 31u) list_count[warp] = incl;
        __syncthreads();
        if (warp == 0u) {
            const u32 c = lane < (bs >> 5) ? list_count[lane] : 0u;
            const u32 ci = warp_inclusive(c);
            u32 base = 0u;
            if (lane == 31u && ci != 0u) base = atomicAdd(state + word, ci);
            base = __shfl_sync(0xffffffffu, base, 31);
            if (lane < (bs >> 5)) list_first[lane] = base + ci - c;
        }
        __syncthreads();
        u32 slot = list_first[warp] + incl - own;
#pragma unroll
        for (u32 r = 0; r < 4u; ++r) {
            if ((keep >> r) & 1u) {
                if (slot < u32(SAMPLE_MAX_K)) {
                    list[2u * slot] = zv[r];
                    list[2u * slot + 1u] = lo + e + r;
                }
                ++slot;
            }
        }
    };
    // f(zi, k) for each of this thread's z below len (its value and key),
    // returning whether to list it; with `word` (a list's count word; 0:
    // none) the listed ones are appended at each step. Every thread calls it.
    auto each_z = [&](u32 word, auto&& f) {
        each_step([&](const u32 (&zv)[4], u32 e) {
            u32 keep = 0u;
#pragma unroll
            for (u32 r = 0; r < 4u; ++r) {
                const float zi = __uint_as_float(zv[r]);
                if (e + r < len && f(zi, order_key(zi))) keep |= 1u << r;
            }
            if (word != 0u) append(word, zv, e, keep);
        });
    };
    const u32 pass = p->pass;
    if (pass < 2u)
        for (u32 i = tid; i < u32(SAMPLE_HIST_BINS); i += bs) hmass[i] = 0ull;
    else
        for (u32 i = tid; i < u32(SAMPLE_LAST_BINS); i += bs) reinterpret_cast<u32*>(hmass)[i] = 0u;
    // Top-p: a list of fewer than SAMPLE_MAX_K tokens that holds the kept
    // set ends the work (the finish draws from it); the lists' counts are
    // known before the row's max, which the pass then need not wait for.
    const bool first = pass == 0u || p->top_p >= 1.0f;
    const u32 zmax_bits = first ? 0u : state[SAMPLE_ROW_MAX];  // loaded with the words below
    if (!first) {
        const bool minp_listed = p->min_p > 0.0f && state[SAMPLE_LIST_MINP] < u32(SAMPLE_MAX_K);
        if (minp_listed || (pass == 2u && state[5] == 0u && state[SAMPLE_LIST_BIN] < u32(SAMPLE_MAX_K))) return;
    }
    // The row's max: reduced from the slices' stats by the first pass (pass
    // 0, or pass 2 for min-p alone), which keeps it in the state; read there
    // by the others.
    float zmax;
    if (first) {
        zmax = row_max(scratch + L.stats + u64(row) * L.nb2 * 4u, p->n_blocks, partials);
        if (b == 0u && tid == 0u) state[SAMPLE_ROW_MAX] = __float_as_uint(zmax);
    } else {
        zmax = __uint_as_float(zmax_bits);
    }
    SAMPLE_STAMP(8u * pass + 1u);
    if (zmax == neg_inf()) return;
    const float scale = mass_scale(n);
    u32* hist = scratch + L.hist + u64(row) * u32(SAMPLE_HIST_WORDS);
    u32* rec = scratch + L.rec + (u64(row) * L.nb4 + b) * u32(SAMPLE_REC_WORDS);
    if (p->top_p >= 1.0f) {
        // Min-p alone (pass 2): this slice's kept mass into its record, its
        // kept tokens onto the min-p list.
        float kept = 0.0f;
        each_z(u32(SAMPLE_LIST_MINP), [&](float zi, u32) {
            const float w = expf(zi - zmax);
            if (!(w >= p->min_p)) return false;
            kept += w;
            return true;
        });
        kept = block_sum_synced(kept, partials);
        if (tid == 0u) {
            rec[0] = __float_as_uint(kept);
            rec[1] = 0u;
        }
        return;
    }
    u32 prefix = 0u, width = 0u;
    bool keep_all = false;
    if (pass == 1u) {
        const HistMass h = {hist};
        const Derived d = derive_digit(h, u32(SAMPLE_HIST_BINS), 0ull, 0ull, true, p->top_p, warp_sums, res, 13u);
        keep_all = d.keep_all;
        prefix = keep_all ? 0u : d.digit << 21;
        width = 11u;
        if (b == 0u && tid == 0u) put_state(state, prefix, d);
    } else if (pass == 2u) {
        keep_all = state[5] != 0u;
        if (!keep_all) {
            const u64 above = u64(state[1]) | (u64(state[2]) << 32);
            const u64 target = u64(state[3]) | (u64(state[4]) << 32);
            const HistMass h = {hist + 2u * u32(SAMPLE_HIST_BINS)};
            const Derived d = derive_digit(h, u32(SAMPLE_HIST_BINS), above, target, false, p->top_p, warp_sums, res, 21u);
            keep_all = d.keep_all;
            prefix = state[0] | (d.digit << 10);
            width = 22u;
            if (b == 0u && tid == 0u) put_state(state + 8u, prefix, d);
        } else if (b == 0u && tid == 0u) {
            state[13] = 1u;
        }
    }
    SAMPLE_STAMP(8u * pass + 2u);
    if (pass < 2u) {
        if (keep_all) return;
        // 64-bit fixed-point masses by the key's bits [21, 32) (pass 0) or
        // [10, 21) of the open range (pass 1). Pass 0 lists the min-p set
        // (min_p > 0), pass 1 the tokens at or above the cut's level-0 bin.
        const u32 shift = pass == 0u ? 21u : 10u;
        const u32 word = pass == 1u ? u32(SAMPLE_LIST_BIN) : p->min_p > 0.0f ? u32(SAMPLE_LIST_MINP) : 0u;
        each_z(word, [&](float zi, u32 k) {
            const float wf = expf(zi - zmax);
            if (width == 0u || (k >> (32u - width)) == (prefix >> (32u - width))) {
                const u64 w = zi == neg_inf() ? 0ull : u64(wf * scale);
                if (w != 0ull) add64_shared(reinterpret_cast<u32*>(&hmass[(k >> shift) & (u32(SAMPLE_HIST_BINS) - 1u)]), w);
            }
            return pass == 0u ? wf >= p->min_p : (k >> 21) >= (prefix >> 21);
        });
        __syncthreads();
        SAMPLE_STAMP(8u * pass + 3u);
        unsigned long long* g = reinterpret_cast<unsigned long long*>(hist + pass * 2u * u32(SAMPLE_HIST_BINS));
        for (u32 i = tid; i < u32(SAMPLE_HIST_BINS); i += bs) {
            const u64 v = hmass[i];
            if (v != 0ull) atomicAdd(&g[i], v);
        }
        SAMPLE_STAMP(8u * pass + 4u);
        return;
    }
    // Pass 2: the last 10 bits' counts (one key per bin), this slice's
    // record, and the tokens at or above the range listed.
    u32* counts = reinterpret_cast<u32*>(hmass);
    float kept = 0.0f;
    each_z(keep_all ? 0u : u32(SAMPLE_LIST_RANGE), [&](float zi, u32 k) {
        if (keep_all || (k >> 10) > (prefix >> 10)) {
            const float w = expf(zi - zmax);
            kept += w >= p->min_p ? w : 0.0f;
        } else if ((k >> 10) == (prefix >> 10)) {
            atomicAdd(&counts[k & 1023u], 1u);
        }
        return (k >> 10) >= (prefix >> 10);
    });
    kept = block_sum_synced(kept, partials);
    SAMPLE_STAMP(8u * pass + 3u);
    if (keep_all) {
        if (tid == 0u) {
            rec[0] = __float_as_uint(kept);
            rec[1] = 0u;
        }
        return;
    }
    u32* g = hist + 4u * u32(SAMPLE_HIST_BINS);
    const u32 per = (u32(SAMPLE_LAST_BINS) + bs - 1u) / bs;
    const u32 d0 = min(u32(SAMPLE_LAST_BINS), tid * per);
    const u32 d1 = min(u32(SAMPLE_LAST_BINS), d0 + per);
    float own = 0.0f;
    for (u32 d = d0; d < d1; ++d) own += counts[d] != 0u ? 1.0f : 0.0f;
    float distinct;
    u32 at = u32(block_prefix_sum(own, distinct, partials));
    for (u32 d = d0; d < d1; ++d) {
        const u32 c = counts[d];
        if (c != 0u) {
            atomicAdd(&g[d], c);
            if (at < u32(SAMPLE_REC_CAP)) rec[2u + at] = d | (c << 10);
            ++at;
        }
    }
    if (tid == 0u) {
        rec[0] = __float_as_uint(kept);
        rec[1] = u32(distinct) <= u32(SAMPLE_REC_CAP) ? u32(distinct) : 0xffffffffu;
    }
    SAMPLE_STAMP(8u * pass + 4u);
}

// buffer(0) scratch, (1) out_token [rows], (2) out_logprob [rows], (3) SampleParams; grid (rows).
extern "C" __global__ void __launch_bounds__(1024) sample_finish_f32(u32* scratch, u32* out_token, float* out_logprob,
                                                                     const SampleParams* p) {
    __shared__ SelectShared sh;
    __shared__ u64 g[SAMPLE_MAX_K];
    __shared__ u32 sk[SAMPLE_MAX_K];
    __shared__ u32 si[SAMPLE_MAX_K];
    __shared__ u32 pk[32];
    __shared__ u32 pi[32];
    __shared__ float partials[32];
    __shared__ DrawShared draw;
    __shared__ u64 warp_sums[32];
    __shared__ u32 res[8];
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 row = blockIdx.x;
    const u32 n = p->n_vocab, nb = p->n_blocks;
    const SampleLayout L = sample_layout(p);
    SAMPLE_STAMP(32u);
    const float u = sample_uniform(p, row);
    SAMPLE_STAMP(43u);
    if (p->temperature > 0.0f && p->n_cand > 0u && !sample_whole_row(p)) {
        // The candidates hold the kept set (top-k, or every token): rank them, draw in rank order.
        if (nb * p->n_cand <= u32(SAMPLE_SLICE_ITEMS) * bs)
            finish_candidates<SAMPLE_SLICE_ITEMS>(scratch, out_token, out_logprob, p, row, u, sh, g, sk, si, res);
        else
            finish_candidates<SAMPLE_ITEMS>(scratch, out_token, out_logprob, p, row, u, sh, g, sk, si, res);
        return;
    }
    const u32* z = scratch + L.z + u64(row) * L.zs;
    const u32* stats = scratch + L.stats + u64(row) * L.nb2 * 4u;
    // The whole row's passes ran (the candidates' configurations returned
    // above): the row's max is in the state, as the mass passes used it;
    // otherwise the slices' best (with its index, for greedy).
    // The whole row's first slice stats and list pair of this thread are
    // read with the state (they do not depend on it), so that the row's mass
    // and the list's draw wait for one round trip after it, not two more.
    RowState st = {};
    u32 at = 0xffffffffu;
    float zmax;
    const u32* list = scratch + L.cand + u64(row) * L.nb4 * 512u;
    u32 held_max = 0u, held_sum = 0u, held_v = 0u, held_i = 0u;
    if (p->temperature > 0.0f && p->n_cand > 0u) {
        const u32* state = scratch + L.state + u64(row) * u32(SAMPLE_STATE_WORDS);
        if (tid < nb) {
            held_max = stats[4u * tid];
            held_sum = stats[4u * tid + 1u];
        }
        if (tid < u32(SAMPLE_MAX_K)) {
            held_v = list[2u * tid];
            held_i = list[2u * tid + 1u];
        }
        st = load_row_state(state);
        zmax = __uint_as_float(state[SAMPLE_ROW_MAX]);
        SAMPLE_STAMP(44u);
    } else {
        u32 best = 0u;
        for (u32 b = tid; b < nb; b += bs) keep_best(best, at, order_key(__uint_as_float(stats[4u * b])), stats[4u * b + 2u]);
        SAMPLE_STAMP(45u);
        block_best(best, at, pk, pi);
        zmax = key_value(best);
    }
    SAMPLE_STAMP(33u);
    if (zmax == neg_inf() || p->temperature == 0.0f) {
        if (tid == 0u) {
            out_token[row] = zmax == neg_inf() ? 0xffffffffu : at;
            out_logprob[row] = zmax == neg_inf() ? neg_inf() : 0.0f;
        }
        return;
    }
    if (p->n_cand == 0u) {
        // Every token: the block by its mass, then the token inside it.
        BlockWeights blocks = {stats, zmax};
        float before, total;
        const u32 b = draw_in_order(blocks, nb, u, before, total, partials, &draw);
        const float wb = blocks.weight(b);
        const float ub = fminf(fmaxf((u * total - before) / wb, 0.0f), 0.99999994f);
        const u32 lo = b * p->slice;
        SliceWeights slice = {z + lo, zmax};
        float sb, st;
        const u32 i = draw_in_order(slice, min(p->slice, n - lo), ub, sb, st, partials, &draw);
        if (tid == 0u) {
            out_token[row] = lo + i;
            out_logprob[row] = (__uint_as_float(z[lo + i]) - zmax) - logf(total);
        }
        return;
    }
    // The whole row (top_k = 0, top-p or min-p): the first list of the
    // mass passes that holds the kept set with fewer than SAMPLE_MAX_K tokens
    // (each later one is written only where the ones before overflowed), in
    // rank order; otherwise the records, in index order.
    u32 m = 0xffffffffu;
    if (p->min_p > 0.0f && st.minp < u32(SAMPLE_MAX_K)) {
        m = st.minp;
    } else if (p->top_p < 1.0f && st.keep_all0 == 0u) {
        if (st.bin < u32(SAMPLE_MAX_K))
            m = st.bin;
        else if (st.keep_all1 == 0u && st.range < u32(SAMPLE_MAX_K))
            m = st.range;
    }
    float mass = 0.0f;
    if (p->top_p < 1.0f) {
        BlockWeights blocks = {stats, zmax};
        // BlockWeights::weight of slice tid, from the words held.
        float zs = tid < nb ? __uint_as_float(held_sum) * expf(__uint_as_float(held_max) - zmax) : 0.0f;
        for (u32 b = tid + bs; b < nb; b += bs) zs += blocks.weight(b);
        mass = block_sum_synced(zs, partials);
    }
    SAMPLE_STAMP(34u);
    if (m != 0xffffffffu) {
        if (tid < m) g[tid] = (u64(order_key(__uint_as_float(held_v))) << 32) | ~held_i;
        load_list(list, m, tid + bs, g);
        SAMPLE_STAMP(35u);
        rank_draw(g, m, zmax, mass, p, u, row, out_token, out_logprob, sk, si, res);
        SAMPLE_STAMP(36u);
        return;
    }
    finish_whole_row(scratch, out_token, out_logprob, p, L, row, st, zmax, mass, u, warp_sums, res, partials, &draw, g, sk, si,
                     &sh.counter);
}
