// Token selection over rows of logits (CUDA), entry names and bindings as
// shaders/sample.metal, whose header comment states the order, the
// algorithms and the sampler's filters; each function here mirrors the Metal
// one of the same name (block_* here for threadgroup_* there). Threadgroup
// arrays are static shared memory (the launches bind no dynamic shared
// memory). Block reductions run in a fixed order, so every result is
// independent of the warps' timing. The first passes of argmax and the
// sampler read 16-byte vectors where the row slice is aligned; the radix
// histograms and the gathers take one atomic per warp and bin.

namespace {

enum SampleLimits : u32 {
    SAMPLE_MAX_K = 256,
    SAMPLE_MAX_THREADS = 1024,
    SAMPLE_MAX_SLICE = 4096,
    RADIX_BINS = 256,
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

// The sum of v over the threads before this one, and over all in `total`.
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
    const float s = __shfl_sync(mask, incl, n - 1u);
    if (lane == 0u) partials[warp] = s;
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

// The exclusive prefix of a uint over the first n lanes of a warp (n <= 32).
__device__ __forceinline__ u32 warp_prefix_u32(u32 v, u32 lane, u32 n) {
    const u32 mask = n == 32u ? 0xffffffffu : ((1u << n) - 1u);
    u32 incl = v;
#pragma unroll
    for (u32 o = 1; o < 32u; o <<= 1) {
        const u32 t = __shfl_up_sync(mask, incl, o);
        if (lane >= o) incl += t;
    }
    return incl - v;
}

// The lanes of this thread's warp that exist (a last warp may be partial).
__device__ __forceinline__ u32 warp_lanes() {
    const u32 n = min(32u, blockDim.x - (threadIdx.x & ~31u));
    return n == 32u ? 0xffffffffu : ((1u << n) - 1u);
}

// One atomic per distinct bin among the lanes of `mask` (every one of them
// calls it): the radix digits of floats crowd a few bins, where plain atomics
// would serialize up to 32 ways. A lane with bin >= RADIX_BINS adds nothing.
__device__ __forceinline__ void hist_add(u32* hist, u32 bin, u32 mask) {
    const u32 peers = __match_any_sync(mask, bin);
    if (bin < RADIX_BINS && u32(__ffs(peers) - 1) == (threadIdx.x & 31u)) atomicAdd(&hist[bin], __popc(peers));
}

// The slot of each lane of `mask` that takes one (take): one atomic on
// *counter per warp; lanes that take nothing get 0xffffffff.
__device__ __forceinline__ u32 warp_take(u32* counter, bool take, u32 mask) {
    const u32 ballot = __ballot_sync(mask, take);
    if (ballot == 0u) return 0xffffffffu;
    const u32 lane = threadIdx.x & 31u;
    const u32 leader = u32(__ffs(ballot) - 1);
    u32 base = 0u;
    if (lane == leader) base = atomicAdd(counter, __popc(ballot));
    base = __shfl_sync(mask, base, leader);
    return take ? base + __popc(ballot & ((1u << lane) - 1u)) : 0xffffffffu;
}

// ---- items ----

struct FloatItems {
    const float* v;
    u32 base;
    __device__ float value(u32 i) const { return v[i]; }
    __device__ u32 index(u32 i) const { return base + i; }
};

struct BitsItems {
    const u32* v;
    u32 base;
    __device__ float value(u32 i) const { return __uint_as_float(v[i]); }
    __device__ u32 index(u32 i) const { return base + i; }
};

struct PairItems {
    const u32* p;
    __device__ float value(u32 i) const { return __uint_as_float(p[2u * i]); }
    __device__ u32 index(u32 i) const { return p[2u * i + 1u]; }
};

// ---- top-k in one block ----

struct Cut {
    u32 hi, mask_hi, lo, mask_lo;
};

__device__ __forceinline__ bool cut_keeps(Cut c, u32 key, u32 index) {
    const u32 k = key & c.mask_hi;
    return k != c.hi ? k > c.hi : ((~index) & c.mask_lo) >= c.lo;
}

template <typename Items>
__device__ Cut select_cut(const Items& items, u32 n, u32 want, u32* hist, u32* found) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    Cut cut = {0u, 0u, 0u, 0u};
    if (want >= n) return cut;
    const u32 lanes = min(bs, 32u);
    const u32 lanes_mask = warp_lanes();
    u32 need = want;
    for (u32 d = 0; d < 8u; ++d) {
        for (u32 b = tid; b < RADIX_BINS; b += bs) hist[b] = 0u;
        __syncthreads();
        const u32 shift = 24u - 8u * (d & 3u);
        // Warp-uniform rounds (the warp's lanes take i0 + lane), so that whole
        // warps meet in hist_add; the same items per thread as i = tid + j * bs.
        for (u32 i0 = tid & ~31u; i0 < n; i0 += bs) {
            const u32 i = i0 + (tid & 31u);
            u32 bin = RADIX_BINS;
            if (i < n) {
                const u32 key = order_key(items.value(i));
                const u32 inv = ~items.index(i);
                if ((key & cut.mask_hi) == cut.hi && (inv & cut.mask_lo) == cut.lo) bin = ((d < 4u ? key : inv) >> shift) & 255u;
            }
            hist_add(hist, bin, lanes_mask);
        }
        __syncthreads();
        if (tid < lanes) {
            const u32 per = (u32(RADIX_BINS) + lanes - 1u) / lanes;
            const u32 top = u32(RADIX_BINS) - min(u32(RADIX_BINS), tid * per);
            const u32 bottom = u32(RADIX_BINS) - min(u32(RADIX_BINS), (tid + 1u) * per);
            u32 sum = 0u;
            for (u32 b = bottom; b < top; ++b) sum += hist[b];
            const u32 before = warp_prefix_u32(sum, tid, lanes);
            if (before < need && need <= before + sum) {
                u32 acc = before;
                for (u32 b = top; b > bottom; --b) {
                    const u32 h = hist[b - 1u];
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
        __syncthreads();
        const u32 digit = found[0], above = found[1], count = found[2];
        need -= above;
        if (d < 4u) {
            cut.hi |= digit << shift;
            cut.mask_hi |= 255u << shift;
        } else {
            cut.lo |= digit << shift;
            cut.mask_lo |= 255u << shift;
        }
        if (count == need) break;
    }
    return cut;
}

__device__ void sort_ranked(float* vals, u32* idxs, u32 span) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    for (u32 k = 2u; k <= span; k <<= 1u) {
        for (u32 j = k >> 1u; j > 0u; j >>= 1u) {
            for (u32 i = tid; i < span; i += bs) {
                const u32 l = i ^ j;
                if (l > i) {
                    const bool l_first = ranks_before(order_key(vals[l]), idxs[l], order_key(vals[i]), idxs[i]);
                    if (((i & k) == 0u) == l_first) {
                        const float tv = vals[i];
                        const u32 ti = idxs[i];
                        vals[i] = vals[l];
                        idxs[i] = idxs[l];
                        vals[l] = tv;
                        idxs[l] = ti;
                    }
                }
            }
            __syncthreads();
        }
    }
}

template <typename Items>
__device__ void block_top(const Items& items, u32 n, u32 m, u32 span, float* vals, u32* idxs, u32* hist, u32* found,
                          u32* counter) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const Cut cut = select_cut(items, n, m, hist, found);
    __syncthreads();
    if (tid == 0u) *counter = 0u;
    for (u32 i = m + tid; i < span; i += bs) {
        vals[i] = neg_inf();
        idxs[i] = 0xffffffffu;
    }
    __syncthreads();
    const u32 mask = warp_lanes();
    for (u32 i0 = tid & ~31u; i0 < n; i0 += bs) {
        const u32 i = i0 + (tid & 31u);
        float v = 0.0f;
        u32 ix = 0u;
        bool take = false;
        if (i < n) {
            v = items.value(i);
            ix = items.index(i);
            take = cut_keeps(cut, order_key(v), ix);
        }
        const u32 slot = warp_take(counter, take, mask);
        if (slot < m) {
            vals[slot] = v;
            idxs[slot] = ix;
        }
    }
    __syncthreads();
    sort_ranked(vals, idxs, span);
}

// The first index of x[0, len) holding the largest key (0 if none; best_key
// 0 then), scanned by the block's threads in ascending order each.
__device__ __forceinline__ void scan_best(const float* x, u32 len, u32& best_key, u32& at) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    best_key = 0u;
    at = 0xffffffffu;
    if ((len & 3u) == 0u && aligned16(x)) {
        for (u32 vi = tid; vi < len / 4u; vi += bs) {
            const float4 t = reinterpret_cast<const float4*>(x)[vi];
            const float e[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
            for (u32 j = 0; j < 4u; ++j) {
                const u32 k = order_key(e[j]);
                if (k > best_key) {
                    best_key = k;
                    at = 4u * vi + j;
                }
            }
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

__device__ __forceinline__ uint4 philox4x32_10(uint4 c, u32 k0, u32 k1) {
#pragma unroll
    for (u32 r = 0; r < 10u; ++r) {
        const u32 hi0 = __umulhi(0xD2511F53u, c.x);
        const u32 lo0 = 0xD2511F53u * c.x;
        const u32 hi1 = __umulhi(0xCD9E8D57u, c.z);
        const u32 lo1 = 0xCD9E8D57u * c.z;
        c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c;
}

// ---- the sampler ----

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

struct SliceWeights {
    const u32* z;
    float m;
    __device__ float weight(u32 i) const { return expf(__uint_as_float(z[i]) - m); }
};

struct BlockWeights {
    const u32* stats;
    float m;
    __device__ float weight(u32 b) const {
        return __uint_as_float(stats[3u * b + 1u]) * expf(__uint_as_float(stats[3u * b]) - m);
    }
};

struct KeptWeights {
    const u32* z;
    float m;
    bool cut_on;
    u32 cut_key;
    u32 cut_index;
    float min_p;
    __device__ float weight(u32 i) const {
        const float zi = __uint_as_float(z[i]);
        const float w = expf(zi - m);
        const u32 k = order_key(zi);
        const bool top = !cut_on || k > cut_key || (k == cut_key && i <= cut_index);
        return top && w >= min_p ? w : 0.0f;
    }
};

// Shared words of draw_in_order: the picked index, the last positive index + 1, the sum before the pick.
struct DrawShared {
    u32 pick;
    u32 last;
    float before;
};

template <typename W>
__device__ u32 draw_in_order(const W& w, u32 n, float u, float& before, float& total, float* partials, DrawShared* sh) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 chunk = (n + bs - 1u) / bs;
    const u32 b0 = min(n, tid * chunk);
    const u32 b1 = min(n, b0 + chunk);
    float own = 0.0f;
    for (u32 i = b0; i < b1; ++i) own += w.weight(i);
    float all;
    const float start = block_prefix_sum(own, all, partials);
    if (tid == 0u) {
        sh->pick = 0xffffffffu;
        sh->last = 0u;
    }
    __syncthreads();
    const float target = u * all;
    float c = start;
    u32 mine = 0xffffffffu;
    u32 last_positive = 0u;
    float c_mine = 0.0f;
    for (u32 i = b0; i < b1; ++i) {
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
    if (mine != 0xffffffffu) atomicMin(&sh->pick, mine);
    atomicMax(&sh->last, last_positive);
    __syncthreads();
    const u32 picked = sh->pick;
    const u32 fallback = sh->last - 1u;
    if (mine != 0xffffffffu && mine == picked) sh->before = c_mine;
    __syncthreads();
    total = all;
    if (picked != 0xffffffffu) {
        before = sh->before;
        return picked;
    }
    if (fallback == 0xffffffffu) {
        before = 0.0f;
        return 0u;
    }
    before = all - w.weight(fallback);
    return fallback;
}

struct CandShared {
    u32 cut;
    u32 pick;
    u32 last;
};

__device__ u32 draw_candidates(const float* vals, u32 mc, float zmax, float mass, const SampleParams* p, float u, float& kept,
                               bool& over, float* partials, CandShared* sh) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 chunk = (mc + bs - 1u) / bs;
    const u32 c0 = min(mc, tid * chunk);
    const u32 c1 = min(mc, c0 + chunk);
    float own = 0.0f;
    for (u32 r = c0; r < c1; ++r) own += expf(vals[r] - zmax);
    float cand_mass;
    const float start = block_prefix_sum(own, cand_mass, partials);
    const float ref = p->top_k > 0u ? cand_mass : mass;
    if (tid == 0u) {
        sh->cut = mc;
        sh->pick = 0xffffffffu;
        sh->last = 0u;
    }
    __syncthreads();
    float c = start;
    for (u32 r = c0; r < c1; ++r) {
        const float w = expf(vals[r] - zmax);
        if ((p->top_p < 1.0f && !(c < p->top_p * ref)) || !(w >= p->min_p)) {
            atomicMin(&sh->cut, r);
            break;
        }
        c += w;
    }
    __syncthreads();
    const u32 len = sh->cut;
    over = p->top_k == 0u && len == mc && mc < p->n_vocab;
    const u32 k1 = min(c1, len);
    float kept_own = 0.0f;
    for (u32 r = c0; r < k1; ++r) kept_own += expf(vals[r] - zmax);
    c = block_prefix_sum(kept_own, kept, partials);
    const float target = u * kept;
    u32 mine = 0xffffffffu, last_positive = 0u;
    for (u32 r = c0; r < k1; ++r) {
        const float w = expf(vals[r] - zmax);
        if (w > 0.0f) {
            last_positive = r + 1u;
            if (c + w > target) {
                mine = r;
                break;
            }
            c += w;
        }
    }
    if (mine != 0xffffffffu) atomicMin(&sh->pick, mine);
    atomicMax(&sh->last, last_positive);
    __syncthreads();
    const u32 picked = sh->pick;
    return picked != 0xffffffffu ? picked : sh->last - 1u;
}

__device__ u32 top_p_key(const u32* z, u32 n, float m, float target, float& above, float* partials) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    u32 prefix = 0u;
    float mass_above = 0.0f;
    for (u32 pass = 0; pass < 8u; ++pass) {
        const u32 shift = 28u - 4u * pass;
        float bins[16];
#pragma unroll
        for (u32 d = 0; d < 16u; ++d) bins[d] = 0.0f;
        for (u32 i = tid; i < n; i += bs) {
            const float zi = __uint_as_float(z[i]);
            const u32 k = order_key(zi);
            if (pass == 0u || (k >> (shift + 4u)) == (prefix >> (shift + 4u))) bins[(k >> shift) & 15u] += expf(zi - m);
        }
        u32 digit = 16u, lowest = 0u;
        float lowest_mass = 0.0f, acc = mass_above;
        for (u32 e = 0; e < 16u; ++e) {
            const u32 d = 15u - e;
            const float bd = block_sum_synced(bins[d], partials);
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
        if (digit == 16u) {
            digit = lowest;
            acc -= lowest_mass;
        }
        mass_above = acc;
        prefix |= digit << shift;
    }
    above = mass_above;
    return prefix;
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
    scan_best(x, len, best_key, at);
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
    __shared__ float vals[SAMPLE_MAX_K];
    __shared__ u32 idxs[SAMPLE_MAX_K];
    __shared__ u32 hist[RADIX_BINS];
    __shared__ u32 found[4];
    __shared__ u32 counter;
    const u32 row = blockIdx.x;
    const u32 n = params->n_elements, k = params->k;
    const u32 m = min(k, n);
    const FloatItems items = {input + u64(row) * n, 0u};
    block_top(items, n, m, pow2_at_least(m), vals, idxs, hist, found, &counter);
    const u64 o = u64(row) * k;
    for (u32 r = threadIdx.x; r < k; r += blockDim.x) {
        out_values[o + r] = r < m ? vals[r] : neg_inf();
        out_indices[o + r] = r < m ? idxs[r] : 0xffffffffu;
    }
}

// buffer(0) input, (1) candidates [rows, n_blocks, k, 2], (2) TopKBlocksParams; grid (rows, n_blocks).
extern "C" __global__ void __launch_bounds__(1024) top_k_blocks_f32(const float* input, u32* candidates,
                                                                    const TopKBlocksParams* p) {
    __shared__ float vals[SAMPLE_MAX_K];
    __shared__ u32 idxs[SAMPLE_MAX_K];
    __shared__ u32 hist[RADIX_BINS];
    __shared__ u32 found[4];
    __shared__ u32 counter;
    const u32 row = blockIdx.x, b = blockIdx.y;
    const u32 lo = b * p->slice;
    const u32 len = min(p->slice, p->n_elements - lo);
    const u32 m = min(p->k, len);
    const FloatItems items = {input + u64(row) * p->n_elements + lo, lo};
    block_top(items, len, m, pow2_at_least(m), vals, idxs, hist, found, &counter);
    u32* out = candidates + (u64(row) * p->n_blocks + b) * p->k * 2u;
    for (u32 r = threadIdx.x; r < p->k; r += blockDim.x) {
        out[2u * r] = __float_as_uint(r < m ? vals[r] : neg_inf());
        out[2u * r + 1u] = r < m ? idxs[r] : 0xffffffffu;
    }
}

// buffer(0) candidates, (1) out_indices, (2) out_values, (3) TopKBlocksParams; grid (rows).
extern "C" __global__ void __launch_bounds__(1024) top_k_merge_f32(const u32* candidates, u32* out_indices, float* out_values,
                                                                   const TopKBlocksParams* p) {
    __shared__ float vals[SAMPLE_MAX_K];
    __shared__ u32 idxs[SAMPLE_MAX_K];
    __shared__ u32 hist[RADIX_BINS];
    __shared__ u32 found[4];
    __shared__ u32 counter;
    const u32 row = blockIdx.x;
    const u32 m = min(p->k, p->n_elements);
    const PairItems items = {candidates + u64(row) * p->n_blocks * p->k * 2u};
    block_top(items, p->n_blocks * p->k, m, pow2_at_least(m), vals, idxs, hist, found, &counter);
    const u64 o = u64(row) * p->k;
    for (u32 r = threadIdx.x; r < p->k; r += blockDim.x) {
        out_values[o + r] = r < m ? vals[r] : neg_inf();
        out_indices[o + r] = r < m ? idxs[r] : 0xffffffffu;
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

// buffer(0) logits, (1) prev_tokens, (2) scratch, (3) SampleParams; grid (rows, n_blocks).
extern "C" __global__ void __launch_bounds__(1024) sample_blocks_f32(const float* logits, const u32* prev_tokens, u32* scratch,
                                                                     const SampleParams* p) {
    __shared__ unsigned char flags[SAMPLE_MAX_SLICE];
    __shared__ float red_v[SAMPLE_MAX_THREADS];
    __shared__ u32 red_i[SAMPLE_MAX_THREADS];
    __shared__ float partials[32];
    __shared__ float vals[SAMPLE_MAX_K];
    __shared__ u32 idxs[SAMPLE_MAX_K];
    __shared__ u32 hist[RADIX_BINS];
    __shared__ u32 found[4];
    __shared__ u32 counter;
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 row = blockIdx.x, b = blockIdx.y;
    const u32 n = p->n_vocab;
    const u32 lo = b * p->slice;
    const u32 len = min(p->slice, n - lo);
    const bool penalize = p->n_prev > 0u && p->repetition_penalty != 1.0f;
    if (penalize) {
        for (u32 i = tid; i < len; i += bs) flags[i] = 0;
        __syncthreads();
        const u32* prev = prev_tokens + u64(row) * p->n_prev;
        for (u32 j = tid; j < p->n_prev; j += bs) {
            const u32 t = prev[j];
            if (t >= lo && t - lo < len) flags[t - lo] = 1;
        }
        __syncthreads();
    }
    const float inv_t = p->temperature > 0.0f ? 1.0f / p->temperature : 1.0f;
    const float pen = p->repetition_penalty;
    const float* x = logits + u64(row) * n + lo;
    u32* z = scratch + u64(row) * n + lo;
    u32 best_key = 0u, at = 0xffffffffu;
    float m = neg_inf(), s = 0.0f;
    auto visit = [&](u32 i, float xi) {
        const float v = sample_value(xi, penalize && flags[i] != 0, pen, inv_t);
        const u32 k = order_key(v);
        if (k > best_key) {
            best_key = k;
            at = i;
        }
        if (v > m) {
            s = s * expf(m - v) + 1.0f;
            m = v;
        } else if (v != neg_inf()) {
            s += expf(v - m);
        }
        return v;
    };
    if ((len & 3u) == 0u && aligned16(x) && aligned16(z)) {
        for (u32 vi = tid; vi < len / 4u; vi += bs) {
            const float4 t = reinterpret_cast<const float4*>(x)[vi];
            const u32 i = 4u * vi;
            const float a0 = visit(i, t.x), a1 = visit(i + 1u, t.y), a2 = visit(i + 2u, t.z), a3 = visit(i + 3u, t.w);
            reinterpret_cast<uint4*>(z)[vi] = make_uint4(__float_as_uint(a0), __float_as_uint(a1), __float_as_uint(a2),
                                                         __float_as_uint(a3));
        }
    } else {
        for (u32 i = tid; i < len; i += bs) z[i] = __float_as_uint(visit(i, x[i]));
    }
    // The block's z, written above, is visible to all its threads after this barrier.
    __syncthreads();
    float bm = at == 0xffffffffu ? neg_inf() : __uint_as_float(z[at]);
    u32 bi = at == 0xffffffffu ? at : lo + at;
    block_argmax(bm, bi, red_v, red_i);
    const float bsum = block_sum_synced(bm == neg_inf() ? 0.0f : s * expf(m - bm), partials);
    if (tid == 0u) {
        u32* stats = scratch + u64(p->rows) * n + (u64(row) * p->n_blocks + b) * 3u;
        stats[0] = __float_as_uint(bm);
        stats[1] = __float_as_uint(bsum);
        stats[2] = bi;
    }
    if (p->n_cand == 0u || p->temperature == 0.0f) return;
    const u32 mc = min(p->n_cand, len);
    const BitsItems items = {z, lo};
    block_top(items, len, mc, pow2_at_least(mc), vals, idxs, hist, found, &counter);
    u32* out = scratch + u64(p->rows) * (n + 3u * p->n_blocks) + (u64(row) * p->n_blocks + b) * p->n_cand * 2u;
    for (u32 r = tid; r < p->n_cand; r += bs) {
        out[2u * r] = __float_as_uint(r < mc ? vals[r] : neg_inf());
        out[2u * r + 1u] = r < mc ? idxs[r] : 0xffffffffu;
    }
}

// buffer(0) scratch, (1) out_token [rows], (2) out_logprob [rows], (3) SampleParams; grid (rows).
extern "C" __global__ void __launch_bounds__(1024) sample_finish_f32(const u32* scratch, u32* out_token, float* out_logprob,
                                                                     const SampleParams* p) {
    __shared__ float red_v[SAMPLE_MAX_THREADS];
    __shared__ u32 red_i[SAMPLE_MAX_THREADS];
    __shared__ float partials[32];
    __shared__ float vals[SAMPLE_MAX_K];
    __shared__ u32 idxs[SAMPLE_MAX_K];
    __shared__ u32 hist[RADIX_BINS];
    __shared__ u32 found[4];
    __shared__ u32 counter;
    __shared__ DrawShared draw;
    __shared__ CandShared cand;
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 row = blockIdx.x;
    const u32 n = p->n_vocab, nb = p->n_blocks;
    const u32* z = scratch + u64(row) * n;
    const u32* stats = scratch + u64(p->rows) * n + u64(row) * nb * 3u;

    float zmax = neg_inf();
    u32 best = 0xffffffffu;
    for (u32 b = tid; b < nb; b += bs) {
        const float v = __uint_as_float(stats[3u * b]);
        const u32 ix = stats[3u * b + 2u];
        if (ranks_before(order_key(v), ix, order_key(zmax), best)) {
            zmax = v;
            best = ix;
        }
    }
    block_argmax(zmax, best, red_v, red_i);
    if (zmax == neg_inf() || p->temperature == 0.0f) {
        if (tid == 0u) {
            out_token[row] = zmax == neg_inf() ? 0xffffffffu : best;
            out_logprob[row] = zmax == neg_inf() ? neg_inf() : 0.0f;
        }
        return;
    }
    const BlockWeights blocks = {stats, zmax};
    float zs = 0.0f;
    for (u32 b = tid; b < nb; b += bs) zs += blocks.weight(b);
    const float mass = block_sum_synced(zs, partials);
    const float u = sample_uniform(p, row);

    if (p->n_cand > 0u) {
        const u32 mc = min(p->n_cand, n);
        const PairItems items = {scratch + u64(p->rows) * (n + 3u * nb) + u64(row) * nb * p->n_cand * 2u};
        block_top(items, nb * p->n_cand, mc, pow2_at_least(mc), vals, idxs, hist, found, &counter);
        float kept;
        bool over;
        const u32 r = draw_candidates(vals, mc, zmax, mass, p, u, kept, over, partials, &cand);
        if (!over) {
            if (tid == 0u) {
                out_token[row] = idxs[r];
                out_logprob[row] = (vals[r] - zmax) - logf(kept);
            }
            return;
        }
    }

    float before, total;
    if (p->n_cand == 0u) {
        const u32 b = draw_in_order(blocks, nb, u, before, total, partials, &draw);
        const float wb = blocks.weight(b);
        const float ub = fminf(fmaxf((u * total - before) / wb, 0.0f), 0.99999994f);
        const u32 lo = b * p->slice;
        const SliceWeights slice = {z + lo, zmax};
        float sb, st;
        const u32 i = draw_in_order(slice, min(p->slice, n - lo), ub, sb, st, partials, &draw);
        if (tid == 0u) {
            out_token[row] = lo + i;
            out_logprob[row] = (__uint_as_float(z[lo + i]) - zmax) - logf(total);
        }
        return;
    }

    KeptWeights w = {z, zmax, p->top_p < 1.0f, 0u, 0xffffffffu, p->min_p};
    if (w.cut_on) {
        const float target = p->top_p * mass;
        float above;
        const u32 t = top_p_key(z, n, zmax, target, above, partials);
        const u32 chunk = (n + bs - 1u) / bs;
        const u32 b0 = min(n, tid * chunk);
        const u32 b1 = min(n, b0 + chunk);
        float own = 0.0f;
        for (u32 i = b0; i < b1; ++i) own += order_key(__uint_as_float(z[i])) == t ? 1.0f : 0.0f;
        if (tid == 0u) found[0] = 0xffffffffu;
        float ties;
        const float start = block_prefix_sum(own, ties, partials);
        const float q = expf(key_value(t) - zmax);
        const float need = q > 0.0f ? fminf(fmaxf(ceilf((target - above) / q), 1.0f), ties) : ties;
        if (start < need && need <= start + own) {
            float c = start;
            for (u32 i = b0; i < b1; ++i) {
                if (order_key(__uint_as_float(z[i])) == t) {
                    c += 1.0f;
                    if (c == need) {
                        found[0] = i;
                        break;
                    }
                }
            }
        }
        __syncthreads();
        w.cut_key = t;
        w.cut_index = found[0];
        __syncthreads();
    }
    const u32 i = draw_in_order(w, n, u, before, total, partials, &draw);
    if (tid == 0u) {
        out_token[row] = i;
        out_logprob[row] = (__uint_as_float(z[i]) - zmax) - logf(total);
    }
}
