// Token selection over rows of logits (CUDA), entry names and bindings as
// shaders/sample.metal, whose header comment states the order, the
// algorithms, the sampler's filters and passes and the scratch layout; each
// function here mirrors the Metal one of the same name (block_* here for
// threadgroup_* there). Threadgroup arrays are static shared memory (the
// launches bind no dynamic shared memory). Block reductions run in a fixed
// order, and the 64-bit masses are integers, so every result is independent
// of the warps' timing. Items are loaded as 16-byte vectors where aligned and
// held in registers (SAMPLE_ITEMS per thread, indexed only by unrolled
// loops); the radix histograms, the gathers and the mass histograms take one
// atomic per warp and bin.

namespace {

enum SampleLimits : u32 {
    SAMPLE_MAX_K = 256,
    SAMPLE_MAX_THREADS = 1024,
    SAMPLE_MAX_SLICE = 4096,
    RADIX_BINS = 256,
    SAMPLE_ITEMS = 16,
    SAMPLE_HIST_BINS = 2048,
    SAMPLE_LAST_BINS = 1024,
    SAMPLE_HIST_WORDS = 9216,
    SAMPLE_STATE_WORDS = 16,
    SAMPLE_REC_CAP = 32,
    SAMPLE_REC_WORDS = 36,
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

__device__ __forceinline__ void keep_best(u32& key, u32& ix, u32 k, u32 i) {
    if (k > key || (k == key && i < ix)) {
        key = k;
        ix = i;
    }
}

// The best (key, index) of the block, to every thread; pk, pi: one word per
// warp. Ends with a barrier.
__device__ void block_best(u32& key, u32& ix, u32* pk, u32* pi) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 lane = tid & 31u, warp = tid >> 5;
    const u32 n = min(32u, bs - (warp << 5));
    const u32 mask = warp_lanes();
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) {
        const u32 k = __shfl_down_sync(mask, key, o);
        const u32 i = __shfl_down_sync(mask, ix, o);
        if (lane + o < n) keep_best(key, ix, k, i);
    }
    if (lane == 0u) {
        pk[warp] = key;
        pi[warp] = ix;
    }
    __syncthreads();
    const u32 nw = (bs + 31u) >> 5;
    key = pk[0];
    ix = pi[0];
    for (u32 w = 1; w < nw; ++w) keep_best(key, ix, pk[w], pi[w]);
    __syncthreads();
}

// ---- items a block selects among (sample.metal: item_pos) ----

__device__ __forceinline__ u32 item_pos(u32 c, u32 j, u32 g) {
    return c * SAMPLE_ITEMS * blockDim.x + ((j / g) * blockDim.x + threadIdx.x) * g + j % g;
}

__device__ __forceinline__ u32 item_chunks(u32 n) {
    const u32 per = SAMPLE_ITEMS * blockDim.x;
    return (n + per - 1u) / per;
}

struct FloatSrc {
    const float* v;
    u32 n;
    u32 base;
    u32 key[SAMPLE_ITEMS];
    __device__ u32 pos(u32 c, u32 j) const { return item_pos(c, j, 4u); }
    __device__ u32 index(u32 c, u32 j) const { return base + pos(c, j); }
    __device__ void load(u32 c) {
        const bool vec = aligned16(v);
#pragma unroll
        for (u32 q = 0; q < SAMPLE_ITEMS / 4u; ++q) {
            const u32 e = pos(c, 4u * q);
            if (vec && e + 4u <= n) {
                const float4 t = *reinterpret_cast<const float4*>(v + e);
                key[4u * q] = order_key(t.x);
                key[4u * q + 1u] = order_key(t.y);
                key[4u * q + 2u] = order_key(t.z);
                key[4u * q + 3u] = order_key(t.w);
            } else {
#pragma unroll
                for (u32 r = 0; r < 4u; ++r) key[4u * q + r] = e + r < n ? order_key(v[e + r]) : 0u;
            }
        }
    }
};

struct PairSrc {
    const u32* p;
    u32 n;
    u32 key[SAMPLE_ITEMS];
    u32 idx[SAMPLE_ITEMS];
    __device__ u32 pos(u32 c, u32 j) const { return item_pos(c, j, 2u); }
    __device__ u32 index(u32, u32 j) const { return idx[j]; }
    __device__ void load(u32 c) {
        const bool vec = aligned16(p);
#pragma unroll
        for (u32 q = 0; q < SAMPLE_ITEMS / 2u; ++q) {
            const u32 e = pos(c, 2u * q);
            if (vec && e + 2u <= n) {
                const uint4 t = *reinterpret_cast<const uint4*>(p + 2u * e);
                key[2u * q] = order_key(__uint_as_float(t.x));
                idx[2u * q] = t.y;
                key[2u * q + 1u] = order_key(__uint_as_float(t.z));
                idx[2u * q + 1u] = t.w;
            } else {
#pragma unroll
                for (u32 r = 0; r < 2u; ++r) {
                    key[2u * q + r] = e + r < n ? order_key(__uint_as_float(p[2u * (e + r)])) : 0u;
                    idx[2u * q + r] = e + r < n ? p[2u * (e + r) + 1u] : 0xffffffffu;
                }
            }
        }
    }
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

// ---- top-k in one block ----

struct Cut {
    u32 hi, mask_hi, lo, mask_lo;
};

__device__ __forceinline__ bool cut_keeps(Cut c, u32 key, u32 index) {
    const u32 k = key & c.mask_hi;
    return k != c.hi ? k > c.hi : ((~index) & c.mask_lo) >= c.lo;
}

template <typename Src>
__device__ Cut select_cut(Src& src, u32 want, u32* hist, u32* found) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    Cut cut = {0u, 0u, 0u, 0u};
    const u32 n = src.n;
    if (want >= n) return cut;
    const u32 chunks = item_chunks(n);
    const u32 lanes = min(bs, 32u);
    const u32 mask = warp_lanes();
    u32 need = want;
    for (u32 d = 0; d < 8u; ++d) {
        for (u32 b = tid; b < RADIX_BINS; b += bs) hist[b] = 0u;
        __syncthreads();
        const u32 shift = 24u - 8u * (d & 3u);
        for (u32 c = 0; c < chunks; ++c) {
            if (chunks > 1u) src.load(c);
#pragma unroll
            for (u32 j = 0; j < SAMPLE_ITEMS; ++j) {
                u32 bin = RADIX_BINS;
                if (src.pos(c, j) < n) {
                    const u32 key = src.key[j];
                    const u32 inv = ~src.index(c, j);
                    if ((key & cut.mask_hi) == cut.hi && (inv & cut.mask_lo) == cut.lo) bin = ((d < 4u ? key : inv) >> shift) & 255u;
                }
                if (__any_sync(mask, bin < RADIX_BINS)) hist_add(hist, bin, mask);
            }
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

// *counter holds 0, visibly to every thread, when called.
template <typename Src, typename Sink>
__device__ void gather_cut(Src& src, Cut cut, u32 m, Sink& sink, u32* counter) {
    const u32 n = src.n;
    const u32 chunks = item_chunks(n);
    const u32 mask = warp_lanes();
    for (u32 c = 0; c < chunks; ++c) {
        if (chunks > 1u) src.load(c);
#pragma unroll
        for (u32 j = 0; j < SAMPLE_ITEMS; ++j) {
            const bool valid = src.pos(c, j) < n;
            const u32 key = src.key[j];
            const u32 ix = src.index(c, j);
            const bool take = valid && cut_keeps(cut, key, ix);
            if (__any_sync(mask, take)) {
                const u32 slot = warp_take(counter, take, mask);
                if (slot < m) sink.put(slot, key, ix);
            }
        }
    }
}

template <typename Sink>
__device__ void rank_sort(const u32* ks, const u32* is, u32 m, Sink& sink) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    u32 p = 1u;
    while (p < 32u && 2u * p * m <= bs && bs % (2u * p) == 0u) p <<= 1u;
    const u32 per = bs / p;
    const u32 part = tid % p;
    const u32 mask = warp_lanes();
    for (u32 base = 0; base < m; base += per) {
        const u32 i = base + tid / p;
        u32 cnt = 0u, ki = 0u, ii = 0u;
        if (i < m) {
            ki = ks[i];
            ii = is[i];
            for (u32 j = part; j < m; j += p) cnt += ranks_before(ks[j], is[j], ki, ii) ? 1u : 0u;
        }
        for (u32 o = 1u; o < p; o <<= 1u) cnt += __shfl_xor_sync(mask, cnt, o);
        if (i < m && part == 0u) sink.put(cnt, ki, ii);
    }
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

struct SampleLayout {
    u64 z, stats, cand, hist, state, rec;
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
    return l;
}

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

// 64-bit adds into h[bin] from the lanes of `mask` (every one calls it): one
// atomic per distinct bin, carrying the lanes' sum, taken as three 21-bit
// parts so each 32-bit reduction is exact. A lane with bin >= nbins adds
// nothing.
__device__ __forceinline__ void hist_add64(unsigned long long* h, u32 bin, u32 nbins, u64 w, u32 mask) {
    const u32 peers = __match_any_sync(mask, bin);
    const u64 a = __reduce_add_sync(peers, u32(w >> 42));
    const u64 b = __reduce_add_sync(peers, u32(w >> 21) & 0x1fffffu);
    const u64 c = __reduce_add_sync(peers, u32(w) & 0x1fffffu);
    if (bin < nbins && u32(__ffs(peers) - 1) == (threadIdx.x & 31u)) atomicAdd(&h[bin], (a << 42) + (b << 21) + c);
}

struct LogitSrc {
    const float* x;
    const unsigned char* flags;
    u32 n;
    u32 base;
    bool penalize;
    float penalty;
    float inv_t;
    u32 key[SAMPLE_ITEMS];
    __device__ u32 pos(u32 c, u32 j) const { return item_pos(c, j, 4u); }
    __device__ u32 index(u32 c, u32 j) const { return base + pos(c, j); }
    __device__ u32 one(u32 e, float v) const {
        return order_key(sample_value(v, penalize && flags[e] != 0, penalty, inv_t));
    }
    __device__ void load(u32 c) {
        const bool vec = aligned16(x);
#pragma unroll
        for (u32 q = 0; q < SAMPLE_ITEMS / 4u; ++q) {
            const u32 e = pos(c, 4u * q);
            if (vec && e + 4u <= n) {
                const float4 t = *reinterpret_cast<const float4*>(x + e);
                key[4u * q] = one(e, t.x);
                key[4u * q + 1u] = one(e + 1u, t.y);
                key[4u * q + 2u] = one(e + 2u, t.z);
                key[4u * q + 3u] = one(e + 3u, t.w);
            } else {
#pragma unroll
                for (u32 r = 0; r < 4u; ++r) key[4u * q + r] = e + r < n ? one(e + r, x[e + r]) : 0u;
            }
        }
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

template <typename W>
__device__ u32 draw_in_order(W& w, u32 n, float u, float& before, float& total, float* partials, DrawShared* sh) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 chunk = (n + bs - 1u) / bs;
    const u32 b0 = min(n, tid * chunk);
    const u32 b1 = min(n, b0 + chunk);
    w.reset();
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
    atomicMax(&sh->last, last_positive);
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

// Warp 0 only: exclusive prefix of v over the lanes, and the total.
__device__ __forceinline__ float warp_exclusive(float v, float& total) {
    const u32 lane = threadIdx.x & 31u;
    float incl = v;
#pragma unroll
    for (u32 o = 1; o < 32u; o <<= 1) {
        const float t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += t;
    }
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

// Warp 0 (a full warp): the candidates' cut and draw (sample.metal: draw_ranked).
__device__ void draw_ranked(const u32* sk, u32 mc, float zmax, float mass, const SampleParams* p, float u, u32* res) {
    const u32 lane = threadIdx.x & 31u;
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
    const float ref = p->top_k > 0u ? cand_mass : mass;
    u32 cut = mc;
    float c = start;
#pragma unroll
    for (u32 q = 0; q < 8u; ++q) {
        if (r0 + q < r1 && cut == mc) {
            if ((p->top_p < 1.0f && !(c < p->top_p * ref)) || !(w[q] >= p->min_p)) {
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
        res[2] = p->top_k == 0u && len == mc && mc < p->n_vocab ? 1u : 0u;
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

// Exclusive prefix over the block of a 64-bit v (integers: any order), and the total.
__device__ u64 block_exclusive_u64(u64 v, u64& total, u64* warp_sums) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 lane = tid & 31u, warp = tid >> 5;
    const u32 mask = warp_lanes();
    u64 incl = v;
#pragma unroll
    for (u32 o = 1; o < 32u; o <<= 1) {
        const u64 t = __shfl_up_sync(mask, incl, o);
        if (lane >= o) incl += t;
    }
    const u32 n = min(32u, bs - (warp << 5));
    if (lane == n - 1u) warp_sums[warp] = incl;
    __syncthreads();
    const u32 nw = (bs + 31u) >> 5;
    u64 ahead = 0ull, all = 0ull;
    for (u32 w = 0; w < nw; ++w) {
        ahead += w < warp ? warp_sums[w] : 0ull;
        all += warp_sums[w];
    }
    __syncthreads();
    total = all;
    return ahead + incl - v;
}

// sample.metal: derive_digit. res: 5 words.
template <typename H>
__device__ Derived derive_digit(const H& h, u32 nbins, u64 above, u64 target, bool first, float top_p, u64* warp_sums,
                                u32* res) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 per = (nbins + bs - 1u) / bs;
    const u32 top = nbins - min(nbins, tid * per);
    const u32 bottom = nbins - min(nbins, (tid + 1u) * per);
    u64 s = 0ull;
    for (u32 d = bottom; d < top; ++d) s += h.mass(d);
    if (tid == 0u) res[0] = 0xffffffffu;
    u64 all;
    const u64 ahead = block_exclusive_u64(s, all, warp_sums);
    Derived r;
    r.target = first ? u64(float(all) * top_p) : target;
    u64 acc = above + ahead;
    if (acc < r.target && r.target <= acc + s) {
        for (u32 d = top; d > bottom; --d) {
            const u64 md = h.mass(d - 1u);
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

// The finish's whole-row draw (sample.metal: finish_whole_row).
__device__ void finish_whole_row(u32* scratch, u32* out_token, float* out_logprob, const SampleParams* p, const SampleLayout& L,
                                 u32 row, float zmax, float u, u64* warp_sums, u32* res, float* partials, DrawShared* draw) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 lane = tid & 31u, warp = tid >> 5, nw = bs >> 5;
    const u32 n = p->n_vocab, nb = p->n_blocks;
    const float scale = mass_scale(n);
    const u32* z = scratch + L.z + u64(row) * L.zs;
    const u32* hist = scratch + L.hist + u64(row) * u32(SAMPLE_HIST_WORDS);
    const u32* state = scratch + L.state + u64(row) * u32(SAMPLE_STATE_WORDS) + 8u;
    u32* rec = scratch + L.rec + u64(row) * L.nb4 * u32(SAMPLE_REC_WORDS);
    u32 t = 0u, need = 0u;
    const u32 prefix = state[0];
    if (p->top_p < 1.0f && state[5] == 0u) {
        const u64 above = u64(state[1]) | (u64(state[2]) << 32);
        const u64 target = u64(state[3]) | (u64(state[4]) << 32);
        const CountMass h = {hist + 4u * u32(SAMPLE_HIST_BINS), prefix, zmax, scale};
        const Derived d = derive_digit(h, u32(SAMPLE_LAST_BINS), above, target, false, p->top_p, warp_sums, res);
        if (!d.keep_all) {
            t = prefix | d.digit;
            const u64 wt = fixed_mass(key_value(t), zmax, scale);
            const u32 ties = hist[4u * u32(SAMPLE_HIST_BINS) + d.digit];
            need = u32(min(u64(ties), max(1ull, (d.target - d.above + wt - 1ull) / wt)));
        }
    }
    const float q = expf(key_value(t) - zmax);
    for (u32 b = warp; b < nb; b += nw) {
        u32* r = rec + b * u32(SAMPLE_REC_WORDS);
        const u32 ne = r[1];
        float mass = 0.0f;
        u32 ties = 0u;
        if (t != 0u && ne <= u32(SAMPLE_REC_CAP)) {
            if (lane < ne) {
                const u32 e = r[2u + lane];
                const u32 k = (prefix & ~1023u) | (e & 1023u);
                const float w = expf(key_value(k) - zmax);
                mass = k > t && w >= p->min_p ? float(e >> 10) * w : 0.0f;
                ties = k == t ? e >> 10 : 0u;
            }
        } else if (t != 0u) {
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
            r[0] = __float_as_uint(__uint_as_float(r[0]) + mass);
            r[1] = ties;
        }
    }
    __syncthreads();
    {
        const u32 chunk = (nb + bs - 1u) / bs;
        const u32 b0 = min(nb, tid * chunk);
        const u32 b1 = min(nb, b0 + chunk);
        float own = 0.0f;
        for (u32 b = b0; b < b1; ++b) own += float(rec[b * u32(SAMPLE_REC_WORDS) + 1u]);
        float all;
        u32 before = u32(block_prefix_sum(own, all, partials));
        for (u32 b = b0; b < b1; ++b) {
            u32* r = rec + b * u32(SAMPLE_REC_WORDS);
            const u32 ties = r[1];
            const u32 kept = need > before ? min(ties, need - before) : 0u;
            r[0] = __float_as_uint(__uint_as_float(r[0]) + (q >= p->min_p ? float(kept) * q : 0.0f));
            r[1] = kept;
            before += ties;
        }
    }
    __syncthreads();
    RecordWeights blocks = {rec};
    float before, total;
    const u32 b = draw_in_order(blocks, nb, u, before, total, partials, draw);
    const float wb = blocks.weight(b);
    const float ub = fminf(fmaxf((u * total - before) / wb, 0.0f), 0.99999994f);
    const u32 kept_ties = rec[b * u32(SAMPLE_REC_WORDS) + 1u];
    const u32 lo = b * p->slice;
    const u32 len = min(p->slice, n - lo);
    const u32 chunk = (len + bs - 1u) / bs;
    const u32 i0 = min(len, tid * chunk);
    const u32 i1 = min(len, i0 + chunk);
    float own = 0.0f;
    for (u32 i = i0; i < i1; ++i) own += t != 0u && order_key(__uint_as_float(z[lo + i])) == t ? 1.0f : 0.0f;
    float all_ties;
    const u32 rank0 = u32(block_prefix_sum(own, all_ties, partials));
    KeptWeights w = {z + lo, zmax, t, kept_ties, p->min_p, rank0, rank0};
    float sb, st;
    const u32 i = draw_in_order(w, len, ub, sb, st, partials, draw);
    if (tid == 0u) {
        out_token[row] = lo + i;
        out_logprob[row] = (__uint_as_float(z[lo + i]) - zmax) - logf(total);
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
    __shared__ float vals[SAMPLE_MAX_THREADS];
    __shared__ u32 idxs[SAMPLE_MAX_THREADS];
    __shared__ u32 ks[SAMPLE_MAX_K];
    __shared__ u32 is[SAMPLE_MAX_K];
    __shared__ u32 hist[RADIX_BINS];
    __shared__ u32 found[4];
    __shared__ u32 counter;
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
    if (tid == 0u) counter = 0u;
    FloatSrc src = {x, n, 0u};
    src.load(0u);
    const Cut cut = select_cut(src, m, hist, found);
    __syncthreads();
    GroupSink kept = {ks, is};
    gather_cut(src, cut, m, kept, &counter);
    __syncthreads();
    OutSink out = {out_values, out_indices, o};
    rank_sort(ks, is, m, out);
    for (u32 r = m + tid; r < k; r += bs) {
        out_values[o + r] = neg_inf();
        out_indices[o + r] = 0xffffffffu;
    }
}

// buffer(0) input, (1) candidates [rows, n_blocks, k, 2], (2) TopKBlocksParams; grid (rows, n_blocks).
extern "C" __global__ void __launch_bounds__(1024) top_k_blocks_f32(const float* input, u32* candidates,
                                                                    const TopKBlocksParams* p) {
    __shared__ u32 hist[RADIX_BINS];
    __shared__ u32 found[4];
    __shared__ u32 counter;
    const u32 row = blockIdx.x, b = blockIdx.y;
    const u32 lo = b * p->slice;
    const u32 len = min(p->slice, p->n_elements - lo);
    const u32 m = min(p->k, len);
    if (threadIdx.x == 0u) counter = 0u;
    FloatSrc src = {input + u64(row) * p->n_elements + lo, len, lo};
    src.load(0u);
    const Cut cut = select_cut(src, m, hist, found);
    __syncthreads();
    u32* out = candidates + (u64(row) * p->n_blocks + b) * p->k * 2u;
    PairSink sink = {out};
    gather_cut(src, cut, m, sink, &counter);
    for (u32 r = m + threadIdx.x; r < p->k; r += blockDim.x) {
        out[2u * r] = __float_as_uint(neg_inf());
        out[2u * r + 1u] = 0xffffffffu;
    }
}

// buffer(0) candidates, (1) out_indices, (2) out_values, (3) TopKBlocksParams; grid (rows).
extern "C" __global__ void __launch_bounds__(1024) top_k_merge_f32(const u32* candidates, u32* out_indices, float* out_values,
                                                                   const TopKBlocksParams* p) {
    __shared__ u32 ks[SAMPLE_MAX_K];
    __shared__ u32 is[SAMPLE_MAX_K];
    __shared__ u32 hist[RADIX_BINS];
    __shared__ u32 found[4];
    __shared__ u32 counter;
    const u32 row = blockIdx.x;
    const u32 m = min(p->k, p->n_elements);
    if (threadIdx.x == 0u) counter = 0u;
    PairSrc src = {candidates + u64(row) * p->n_blocks * p->k * 2u, p->n_blocks * p->k};
    src.load(0u);
    const Cut cut = select_cut(src, m, hist, found);
    __syncthreads();
    GroupSink kept = {ks, is};
    gather_cut(src, cut, m, kept, &counter);
    __syncthreads();
    const u64 o = u64(row) * p->k;
    OutSink out = {out_values, out_indices, o};
    rank_sort(ks, is, m, out);
    for (u32 r = m + threadIdx.x; r < p->k; r += blockDim.x) {
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

// buffer(0) logits, (1) prev_tokens, (2) scratch, (3) SampleParams; grid (rows, n_blocks).
extern "C" __global__ void __launch_bounds__(512) sample_blocks_f32(const float* logits, const u32* prev_tokens, u32* scratch,
                                                                    const SampleParams* p) {
    __shared__ unsigned char flags[SAMPLE_MAX_SLICE];
    __shared__ u32 pk[32];
    __shared__ u32 pi[32];
    __shared__ float partials[32];
    __shared__ u32 hist[RADIX_BINS];
    __shared__ u32 found[4];
    __shared__ u32 counter;
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 row = blockIdx.x, b = blockIdx.y;
    const u32 n = p->n_vocab;
    const u32 lo = b * p->slice;
    const u32 len = min(p->slice, n - lo);
    const SampleLayout L = sample_layout(p);
    if (tid == 0u) counter = 0u;
    if (sample_whole_row(p) && p->top_p < 1.0f) {
        const u32 share = (u32(SAMPLE_HIST_WORDS) + p->n_blocks - 1u) / p->n_blocks;
        u32* h = scratch + L.hist + u64(row) * u32(SAMPLE_HIST_WORDS);
        for (u32 i = b * share + tid; i < min(u32(SAMPLE_HIST_WORDS), (b + 1u) * share); i += bs) h[i] = 0u;
    }
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
    LogitSrc src = {logits + u64(row) * n + lo, flags, len, lo, penalize, p->repetition_penalty,
                    p->temperature > 0.0f ? 1.0f / p->temperature : 1.0f};
    const bool store_z = p->temperature > 0.0f && p->top_k == 0u;
    u32* z = scratch + L.z + u64(row) * L.zs + lo;
    const bool zvec = aligned16(z);
    const u32 chunks = item_chunks(len);
    u32 best = 0u, at = 0xffffffffu;
    float m = neg_inf(), s = 0.0f;
    for (u32 c = 0; c < chunks; ++c) {
        src.load(c);
#pragma unroll
        for (u32 q = 0; q < SAMPLE_ITEMS / 4u; ++q) {
            const u32 e0 = src.pos(c, 4u * q);
            float v[4];
#pragma unroll
            for (u32 r = 0; r < 4u; ++r) {
                const u32 e = e0 + r;
                const u32 k = src.key[4u * q + r];
                v[r] = key_value(k);
                if (e < len) {
                    if (k > best) {
                        best = k;
                        at = lo + e;
                    }
                    if (v[r] > m) {
                        s = s * expf(m - v[r]) + 1.0f;
                        m = v[r];
                    } else if (v[r] != neg_inf()) {
                        s += expf(v[r] - m);
                    }
                }
            }
            if (store_z) {
                if (zvec && e0 + 4u <= len) {
                    *reinterpret_cast<uint4*>(z + e0) =
                        make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
                } else {
                    for (u32 r = 0; r < 4u; ++r)
                        if (e0 + r < len) z[e0 + r] = __float_as_uint(v[r]);
                }
            }
        }
    }
    block_best(best, at, pk, pi);
    const float bm = key_value(best);
    const float bsum = block_sum_synced(bm == neg_inf() || m == neg_inf() ? 0.0f : s * expf(m - bm), partials);
    if (tid == 0u) {
        u32* stats = scratch + L.stats + (u64(row) * L.nb2 + b) * 4u;
        *reinterpret_cast<uint4*>(stats) = make_uint4(__float_as_uint(bm), __float_as_uint(bsum), at, 0u);
    }
    if (p->n_cand == 0u || p->temperature == 0.0f) return;
    const u32 mc = min(p->n_cand, len);
    const Cut cut = select_cut(src, mc, hist, found);
    __syncthreads();
    u32* out = scratch + L.cand + u64(row) * L.nb4 * 512u + u64(b) * p->n_cand * 2u;
    PairSink sink = {out};
    gather_cut(src, cut, mc, sink, &counter);
    for (u32 r = mc + tid; r < p->n_cand; r += bs) {
        out[2u * r] = __float_as_uint(neg_inf());
        out[2u * r + 1u] = 0xffffffffu;
    }
}

// buffer(0) scratch, (1) SampleParams (pass 0, 1, 2); grid (rows, n_blocks).
extern "C" __global__ void __launch_bounds__(512) sample_mass_f32(u32* scratch, const SampleParams* p) {
    __shared__ unsigned long long hmass[SAMPLE_HIST_BINS];
    __shared__ u64 warp_sums[32];
    __shared__ u32 res[8];
    __shared__ float partials[32];
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 row = blockIdx.x, b = blockIdx.y;
    const u32 n = p->n_vocab;
    const u32 lo = b * p->slice;
    const u32 len = min(p->slice, n - lo);
    const SampleLayout L = sample_layout(p);
    const u32* stats = scratch + L.stats + u64(row) * L.nb2 * 4u;
    const float zmax = row_max(stats, p->n_blocks, partials);
    if (zmax == neg_inf()) return;
    const float scale = mass_scale(n);
    const u32* z = scratch + L.z + u64(row) * L.zs + lo;
    u32* hist = scratch + L.hist + u64(row) * u32(SAMPLE_HIST_WORDS);
    u32* state = scratch + L.state + u64(row) * u32(SAMPLE_STATE_WORDS);
    const u32 pass = p->pass;
    u32 prefix = 0u, width = 0u;
    bool keep_all = p->top_p >= 1.0f;
    if (!keep_all && pass == 1u) {
        const HistMass h = {hist};
        const Derived d = derive_digit(h, u32(SAMPLE_HIST_BINS), 0ull, 0ull, true, p->top_p, warp_sums, res);
        keep_all = d.keep_all;
        prefix = keep_all ? 0u : d.digit << 21;
        width = 11u;
        if (b == 0u && tid == 0u) put_state(state, prefix, d);
    } else if (!keep_all && pass == 2u) {
        keep_all = state[5] != 0u;
        if (!keep_all) {
            const u64 above = u64(state[1]) | (u64(state[2]) << 32);
            const u64 target = u64(state[3]) | (u64(state[4]) << 32);
            const HistMass h = {hist + 2u * u32(SAMPLE_HIST_BINS)};
            const Derived d = derive_digit(h, u32(SAMPLE_HIST_BINS), above, target, false, p->top_p, warp_sums, res);
            keep_all = d.keep_all;
            prefix = state[0] | (d.digit << 10);
            width = 22u;
            if (b == 0u && tid == 0u) put_state(state + 8u, prefix, d);
        } else if (b == 0u && tid == 0u) {
            state[13] = 1u;
        }
    }
    const u32 mask = warp_lanes();
    const bool zvec = aligned16(z);
    if (pass < 2u) {
        if (keep_all) return;
        for (u32 i = tid; i < u32(SAMPLE_HIST_BINS); i += bs) hmass[i] = 0ull;
        __syncthreads();
        const u32 shift = pass == 0u ? 21u : 10u;
        // Warp-uniform steps of 4 z per lane, so that whole warps meet in hist_add64.
        for (u32 i0 = (tid & ~31u) * 4u; i0 < len; i0 += 4u * bs) {
            const u32 e = i0 + 4u * (tid & 31u);
            u32 zz[4] = {0u, 0u, 0u, 0u};
            if (zvec && e + 4u <= len) {
                const uint4 t4 = *reinterpret_cast<const uint4*>(z + e);
                zz[0] = t4.x;
                zz[1] = t4.y;
                zz[2] = t4.z;
                zz[3] = t4.w;
            } else {
                for (u32 r = 0; r < 4u; ++r)
                    if (e + r < len) zz[r] = z[e + r];
            }
#pragma unroll
            for (u32 r = 0; r < 4u; ++r) {
                u32 bin = u32(SAMPLE_HIST_BINS);
                u64 w = 0ull;
                if (e + r < len) {
                    const float zi = __uint_as_float(zz[r]);
                    const u32 k = order_key(zi);
                    if (width == 0u || (k >> (32u - width)) == (prefix >> (32u - width))) {
                        w = fixed_mass(zi, zmax, scale);
                        if (w != 0ull) bin = (k >> shift) & (u32(SAMPLE_HIST_BINS) - 1u);
                    }
                }
                if (__any_sync(mask, bin < u32(SAMPLE_HIST_BINS))) hist_add64(hmass, bin, u32(SAMPLE_HIST_BINS), w, mask);
            }
        }
        __syncthreads();
        unsigned long long* g = reinterpret_cast<unsigned long long*>(hist + pass * 2u * u32(SAMPLE_HIST_BINS));
        for (u32 i = tid; i < u32(SAMPLE_HIST_BINS); i += bs) {
            const u64 v = hmass[i];
            if (v != 0ull) atomicAdd(&g[i], v);
        }
        return;
    }
    u32* counts = reinterpret_cast<u32*>(hmass);
    for (u32 i = tid; i < u32(SAMPLE_LAST_BINS); i += bs) counts[i] = 0u;
    __syncthreads();
    float kept = 0.0f;
    for (u32 i = tid; i < len; i += bs) {
        const float zi = __uint_as_float(z[i]);
        const u32 k = order_key(zi);
        if (keep_all || (k >> 10) > (prefix >> 10)) {
            const float w = expf(zi - zmax);
            kept += w >= p->min_p ? w : 0.0f;
        } else if ((k >> 10) == (prefix >> 10)) {
            atomicAdd(&counts[k & 1023u], 1u);
        }
    }
    kept = block_sum_synced(kept, partials);
    u32* rec = scratch + L.rec + (u64(row) * L.nb4 + b) * u32(SAMPLE_REC_WORDS);
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
}

// buffer(0) scratch, (1) out_token [rows], (2) out_logprob [rows], (3) SampleParams; grid (rows).
extern "C" __global__ void __launch_bounds__(1024) sample_finish_f32(u32* scratch, u32* out_token, float* out_logprob,
                                                                     const SampleParams* p) {
    __shared__ u32 pk[32];
    __shared__ u32 pi[32];
    __shared__ float partials[32];
    __shared__ u32 hist[RADIX_BINS];
    __shared__ u32 found[4];
    __shared__ u32 counter;
    __shared__ u32 gk[SAMPLE_MAX_K];
    __shared__ u32 gi[SAMPLE_MAX_K];
    __shared__ u32 sk[SAMPLE_MAX_K];
    __shared__ u32 si[SAMPLE_MAX_K];
    __shared__ DrawShared draw;
    __shared__ u64 warp_sums[32];
    __shared__ u32 res[8];
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 row = blockIdx.x;
    const u32 n = p->n_vocab, nb = p->n_blocks;
    const SampleLayout L = sample_layout(p);
    const u32* z = scratch + L.z + u64(row) * L.zs;
    const u32* stats = scratch + L.stats + u64(row) * L.nb2 * 4u;
    if (tid == 0u) counter = 0u;
    // The candidates' loads first: their latency overlaps the stats' reductions.
    const u32 mc = min(p->n_cand, n);
    PairSrc src = {scratch + L.cand + u64(row) * L.nb4 * 512u, nb * p->n_cand};
    if (p->n_cand > 0u && p->temperature > 0.0f) src.load(0u);

    u32 best = 0u, at = 0xffffffffu;
    for (u32 b = tid; b < nb; b += bs) keep_best(best, at, order_key(__uint_as_float(stats[4u * b])), stats[4u * b + 2u]);
    block_best(best, at, pk, pi);
    const float zmax = key_value(best);
    if (zmax == neg_inf() || p->temperature == 0.0f) {
        if (tid == 0u) {
            out_token[row] = zmax == neg_inf() ? 0xffffffffu : at;
            out_logprob[row] = zmax == neg_inf() ? neg_inf() : 0.0f;
        }
        return;
    }
    BlockWeights blocks = {stats, zmax};
    float zs = 0.0f;
    for (u32 b = tid; b < nb; b += bs) zs += blocks.weight(b);
    const float mass = block_sum_synced(zs, partials);
    const float u = sample_uniform(p, row);

    if (p->n_cand == 0u) {
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

    const Cut cut = select_cut(src, mc, hist, found);
    __syncthreads();
    GroupSink kept = {gk, gi};
    gather_cut(src, cut, mc, kept, &counter);
    __syncthreads();
    GroupSink ranked = {sk, si};
    rank_sort(gk, gi, mc, ranked);
    __syncthreads();
    if (tid < 32u) draw_ranked(sk, mc, zmax, mass, p, u, res);
    __syncthreads();
    if (res[2] == 0u) {
        if (tid == 0u) {
            const u32 r = res[0];
            out_token[row] = si[r];
            out_logprob[row] = (key_value(sk[r]) - zmax) - logf(__uint_as_float(res[1]));
        }
        return;
    }
    finish_whole_row(scratch, out_token, out_logprob, p, L, row, zmax, u, warp_sums, res, partials, &draw);
}
