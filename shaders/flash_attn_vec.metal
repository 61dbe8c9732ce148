// flash_attn_vec: split-KV decode attention, one query token per (sequence, head).
//
// Math, per row r = (b, h) with kv head kh = h / (n_heads / n_kv_heads), for
// a sequence of len positions written (the query sits at position len - 1):
//   s_j = scale * dot(Q[b, h, :], K[b, kh, slot(j), :])
//   s_j = softcap * tanh(s_j / softcap)                        when softcap > 0
//   O[b, h, :] = sum_j softmax(s)_j * V[b, kh, slot(j), :]     over the visible j
// Visible positions j in [lo, hi):
//   a global cache (slot(j) = j): hi = min(len, kv_capacity), lo = 0;
//   a ring (varlen ring == 1, slot(j) = j % kv_capacity): hi = len,
//     lo = len - kv_capacity once the ring has wrapped;
//   a sliding window (mask_type 2, sliding_window > 0) raises lo to
//     len - sliding_window. Causal sees every j < len, as none does.
// len is kv_seq_len for the main kernels (every sequence alike) and
// seq_lens[b] for the varlen ones; a sequence of length 0 gives zeros.
//
// Layouts (D = head dim, 128, 256 or 512; K and V share it):
//   Q   [B, n_heads, D] f32
//   K,V [B, n_kv_heads, kv_capacity, D] f32, f16 or bf16
//   The main kernel's dst, with rows = B * n_heads and row = b * n_heads + h:
//     NWG == 1: the normalized output [rows, D]
//     NWG  > 1: partials [rows, D/4, NWG] float4 (unnormalized), then
//               [rows, NWG, 2] floats holding (S, M) of each workgroup, where
//               S is the softmax denominator relative to the running max M.
//   The reduce kernel combines the partials into [rows, D].
//
// Main kernels: grid (1, n_heads, B * NWG), 32 threads (one simdgroup).
//   z = b * NWG + iwg; workgroup iwg takes the blocks of 32 visible
//   positions lo + 32 i for i = iwg, iwg + NWG, ...; each lane owns D/128
//   float4 of Q and of the output. Per block, each position's dot product is
//   a simd_sum of the lanes' partials (lane c keeps position c's), the
//   online softmax runs one position per lane, and the weights reach the V
//   accumulation by simd_shuffle.
//   threadgroup(0) is declared as mlx-native's kernels declare it (its host
//   binds (3 D + 128) * 2 bytes there); these kernels use none of it.
// Reduce kernel: grid (rows, 1, 1), 32 * NWG threads; lane w of each
//   simdgroup reads workgroup w's partial, simdgroup s handles float4 columns
//   s, s + NWG, ...
//
// Only the rows of visible positions are read.

// The visible positions [lo, hi) of a sequence of len positions and where they live.
struct KvSpan {
    uint lo;
    uint hi;
    uint cap;
    bool ring;
};

inline KvSpan kv_span(uint len, uint cap, bool ring, uint window) {
    KvSpan s;
    s.cap  = cap;
    s.ring = ring;
    s.hi   = ring ? len : min(len, cap);
    s.lo   = (ring && len > cap) ? len - cap : 0;
    if (window > 0 && len > window) {
        s.lo = max(s.lo, len - window);
    }
    return s;
}

// One workgroup's share of one row: the online softmax over its blocks, then
// the normalized output (nwg == 1) or its partial and (S, M) (nwg > 1).
template <uint D, typename KV>
inline void attend_row(
    KvSpan sp, float scale, float softcap, uint nwg, uint iwg, ulong row, ulong nrows,
    device const float *q, device const KV *k, device const KV *v, device float *dst, ushort lane)
{
    constexpr uint W   = 32;        // lanes, and KV positions per block
    constexpr uint D4  = D / 4;
    constexpr uint NPL = D4 / W;    // float4 per lane

    device const float4     *q4 = (device const float4 *)(q + row * D);
    device const vec<KV, 4> *k4 = (device const vec<KV, 4> *)k;
    device const vec<KV, 4> *v4 = (device const vec<KV, 4> *)v;

    float4 qr[NPL];
    float4 o[NPL];
    for (uint i = 0; i < NPL; ++i) {
        qr[i] = q4[lane + W * i];
        o[i]  = float4(0.0f);
    }

    float M = -FLT_MAX / 2;   // running max of the visible scores
    float S = 0.0f;           // running sum of exp(s - M)

    const uint nblk = sp.hi > sp.lo ? (sp.hi - sp.lo + W - 1) / W : 0;
    for (uint blk = iwg; blk < nblk; blk += nwg) {
        const uint base  = sp.lo + blk * W;          // first position of the block
        const uint count = min(W, sp.hi - base);     // visible slots [0, count)
        // Slot of the block's first position; slot c is s0 + c, wrapped once on a ring.
        const uint s0 = sp.ring ? base % sp.cap : base;

        // Slot c's dot product, summed over the lanes' slices of D; lane c keeps it.
        float s = 0.0f;
        for (uint c = 0; c < count; ++c) {
            uint slot = s0 + c;
            if (sp.ring && slot >= sp.cap) {
                slot -= sp.cap;
            }
            device const vec<KV, 4> *kr = k4 + ulong(slot) * D4 + lane;
            float acc = 0.0f;
            for (uint i = 0; i < NPL; ++i) {
                acc += dot(float4(kr[W * i]), qr[i]);
            }
            acc = simd_sum(acc);
            if (lane == c) {
                s = acc;
            }
        }

        // Lane c owns slot c: scale, cap, softmax update.
        s *= scale;
        if (softcap > 0.0f) {
            s = softcap * tanh(s / softcap);
        }
        const bool visible = lane < count;
        const float m_new = max(M, simd_max(visible ? s : -FLT_MAX));
        const float alpha = exp(M - m_new);
        const float e     = visible ? exp(s - m_new) : 0.0f;
        S = S * alpha + simd_sum(e);
        M = m_new;

        for (uint i = 0; i < NPL; ++i) {
            o[i] *= alpha;
        }
        for (uint c = 0; c < count; ++c) {
            const float e_c = simd_shuffle(e, ushort(c));
            uint slot = s0 + c;
            if (sp.ring && slot >= sp.cap) {
                slot -= sp.cap;
            }
            device const vec<KV, 4> *vr = v4 + ulong(slot) * D4 + lane;
            for (uint i = 0; i < NPL; ++i) {
                o[i] += e_c * float4(vr[W * i]);
            }
        }
    }

    if (nwg == 1) {
        const float inv = (S == 0.0f) ? 0.0f : 1.0f / S;
        device float4 *out4 = (device float4 *)(dst + row * D);
        for (uint i = 0; i < NPL; ++i) {
            out4[lane + W * i] = o[i] * inv;
        }
    } else {
        device float4 *t4 = (device float4 *)dst + row * D4 * nwg;
        for (uint i = 0; i < NPL; ++i) {
            t4[ulong(lane + W * i) * nwg + iwg] = o[i];
        }
        if (lane == 0) {
            device float *sm = dst + nrows * D * nwg + row * 2 * nwg + 2 * iwg;
            sm[0] = S;
            sm[1] = M;
        }
    }
}

// mlx-native's entries: every sequence kv_seq_len long, a global cache.
template <uint D, typename KV>
kernel void flash_attn_vec_main(
    constant FlashAttnVecParams &p       [[buffer(0)]],
    device const float          *q       [[buffer(1)]],
    device const KV             *k       [[buffer(2)]],
    device const KV             *v       [[buffer(3)]],
    device float                *dst     [[buffer(4)]],
    threadgroup float           *unused  [[threadgroup(0)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    uint3  tgpg  [[threadgroups_per_grid]],
    ushort lane  [[thread_index_in_simdgroup]])
{
    const uint nwg  = p.nwg;
    const uint head = tgpig.y;
    const uint b    = tgpig.z / nwg;
    const uint kvh  = head / (p.n_heads / p.n_kv_heads);
    const ulong kv0 = (ulong(b) * p.n_kv_heads + kvh) * p.kv_capacity * D;
    const KvSpan sp = kv_span(p.kv_seq_len, p.kv_capacity, false, p.mask_type == 2 ? p.sliding_window : 0);
    attend_row<D, KV>(sp, p.scale, p.softcap, nwg, tgpig.z % nwg, ulong(b) * p.n_heads + head,
                      ulong(tgpg.z / nwg) * p.n_heads, q, k + kv0, v + kv0, dst, lane);
}

// Sequences of their own lengths (seq_lens[b]), a global cache or a ring.
template <uint D, typename KV>
kernel void flash_attn_vec_varlen_main(
    constant FlashAttnVecVarlenParams &p        [[buffer(0)]],
    device const float                *q        [[buffer(1)]],
    device const KV                   *k        [[buffer(2)]],
    device const KV                   *v        [[buffer(3)]],
    device float                      *dst      [[buffer(4)]],
    device const uint                 *seq_lens [[buffer(5)]],
    threadgroup float                 *unused   [[threadgroup(0)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    uint3  tgpg  [[threadgroups_per_grid]],
    ushort lane  [[thread_index_in_simdgroup]])
{
    const uint nwg  = p.nwg;
    const uint head = tgpig.y;
    const uint b    = tgpig.z / nwg;
    const uint kvh  = head / (p.n_heads / p.n_kv_heads);
    const ulong kv0 = (ulong(b) * p.n_kv_heads + kvh) * p.kv_capacity * D;
    const KvSpan sp = kv_span(seq_lens[b], p.kv_capacity, p.ring != 0, p.mask_type == 2 ? p.sliding_window : 0);
    attend_row<D, KV>(sp, p.scale, p.softcap, nwg, tgpig.z % nwg, ulong(b) * p.n_heads + head,
                      ulong(tgpg.z / nwg) * p.n_heads, q, k + kv0, v + kv0, dst, lane);
}

template <uint D>
kernel void flash_attn_vec_combine(
    constant FlashAttnVecReduceParams &p    [[buffer(0)]],
    device const float                *tmp  [[buffer(1)]],
    device float                      *dst  [[buffer(2)]],
    constant uint                     &nwgp [[buffer(3)]],
    uint   row  [[threadgroup_position_in_grid]],
    ushort lane [[thread_index_in_simdgroup]],
    ushort sg   [[simdgroup_index_in_threadgroup]])
{
    constexpr uint D4 = D / 4;
    const uint nwg  = nwgp;
    const bool mine = lane < nwg;   // lane w stands for workgroup w

    device const float *sm = tmp + ulong(p.nrows) * D * nwg + ulong(row) * 2 * nwg;
    const float s_w = mine ? sm[2 * lane]     : 0.0f;
    const float m_w = mine ? sm[2 * lane + 1] : -FLT_MAX;
    const float m   = simd_max(m_w);
    const float f   = mine ? exp(m_w - m) : 0.0f;
    const float s   = simd_sum(s_w * f);
    const float inv = (s == 0.0f) ? 0.0f : 1.0f / s;

    device const float4 *t4 = (device const float4 *)tmp + ulong(row) * D4 * nwg;
    device float4 *o4 = (device float4 *)dst + ulong(row) * D4;
    for (uint i = sg; i < D4; i += nwg) {
        const float4 x = mine ? t4[i * nwg + lane] * f : float4(0.0f);
        const float4 r = float4(simd_sum(x.x), simd_sum(x.y), simd_sum(x.z), simd_sum(x.w));
        if (lane == 0) {
            o4[i] = r * inv;
        }
    }
}

typedef decltype(flash_attn_vec_main<256, float>) fav_f32_t;
typedef decltype(flash_attn_vec_main<256, half>) fav_f16_t;
typedef decltype(flash_attn_vec_main<256, bfloat>) fav_bf16_t;
typedef decltype(flash_attn_vec_varlen_main<256, float>) fav_varlen_f32_t;
typedef decltype(flash_attn_vec_varlen_main<256, half>) fav_varlen_f16_t;
typedef decltype(flash_attn_vec_varlen_main<256, bfloat>) fav_varlen_bf16_t;
typedef decltype(flash_attn_vec_combine<256>) fav_reduce_t;

template [[host_name("flash_attn_vec_dk128")]] kernel fav_f32_t flash_attn_vec_main<128, float>;
template [[host_name("flash_attn_vec_dk256")]] kernel fav_f32_t flash_attn_vec_main<256, float>;
template [[host_name("flash_attn_vec_dk512")]] kernel fav_f32_t flash_attn_vec_main<512, float>;
template [[host_name("flash_attn_vec_f16kv_dk128")]] kernel fav_f16_t flash_attn_vec_main<128, half>;
template [[host_name("flash_attn_vec_f16kv_dk256")]] kernel fav_f16_t flash_attn_vec_main<256, half>;
template [[host_name("flash_attn_vec_f16kv_dk512")]] kernel fav_f16_t flash_attn_vec_main<512, half>;
template [[host_name("flash_attn_vec_bf16kv_dk128")]] kernel fav_bf16_t flash_attn_vec_main<128, bfloat>;
template [[host_name("flash_attn_vec_bf16kv_dk256")]] kernel fav_bf16_t flash_attn_vec_main<256, bfloat>;
template [[host_name("flash_attn_vec_bf16kv_dk512")]] kernel fav_bf16_t flash_attn_vec_main<512, bfloat>;
template [[host_name("flash_attn_vec_varlen_dk128")]] kernel fav_varlen_f32_t flash_attn_vec_varlen_main<128, float>;
template [[host_name("flash_attn_vec_varlen_dk256")]] kernel fav_varlen_f32_t flash_attn_vec_varlen_main<256, float>;
template [[host_name("flash_attn_vec_varlen_dk512")]] kernel fav_varlen_f32_t flash_attn_vec_varlen_main<512, float>;
template [[host_name("flash_attn_vec_varlen_f16kv_dk128")]] kernel fav_varlen_f16_t flash_attn_vec_varlen_main<128, half>;
template [[host_name("flash_attn_vec_varlen_f16kv_dk256")]] kernel fav_varlen_f16_t flash_attn_vec_varlen_main<256, half>;
template [[host_name("flash_attn_vec_varlen_f16kv_dk512")]] kernel fav_varlen_f16_t flash_attn_vec_varlen_main<512, half>;
template [[host_name("flash_attn_vec_varlen_bf16kv_dk128")]] kernel fav_varlen_bf16_t flash_attn_vec_varlen_main<128, bfloat>;
template [[host_name("flash_attn_vec_varlen_bf16kv_dk256")]] kernel fav_varlen_bf16_t flash_attn_vec_varlen_main<256, bfloat>;
template [[host_name("flash_attn_vec_varlen_bf16kv_dk512")]] kernel fav_varlen_bf16_t flash_attn_vec_varlen_main<512, bfloat>;
template [[host_name("flash_attn_vec_reduce_dk128")]] kernel fav_reduce_t flash_attn_vec_combine<128>;
template [[host_name("flash_attn_vec_reduce_dk256")]] kernel fav_reduce_t flash_attn_vec_combine<256>;
template [[host_name("flash_attn_vec_reduce_dk512")]] kernel fav_reduce_t flash_attn_vec_combine<512>;
