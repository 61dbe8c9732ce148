// flash_attn_vec: split-KV decode attention, one query token per (batch, head).
//
// Math, per row r = (b, h) with kv head kh = h / (n_heads / n_kv_heads):
//   s_j = scale * dot(Q[b, h, :], K[b, kh, j, :])             j in [0, kv_seq_len)
//   s_j = softcap * tanh(s_j / softcap)                        when softcap > 0
//   visible j: the query sits at position kv_seq_len - 1, so causal sees every
//   j < kv_seq_len; sliding window (mask_type 2, sliding_window > 0) sees
//   j >= kv_seq_len - sliding_window
//   O[b, h, :] = sum_j softmax(s)_j * V[b, kh, j, :]
//
// Layouts (D = head dim, 256 or 512; K and V share it):
//   Q   [B, n_heads, D] f32
//   K,V [B, n_kv_heads, kv_capacity, D] f32 or f16
//   The main kernel's dst, with rows = B * n_heads and row = b * n_heads + h:
//     NWG == 1: the normalized output [rows, D]
//     NWG  > 1: partials [rows, D/4, NWG] float4 (unnormalized), then
//               [rows, NWG, 2] floats holding (S, M) of each workgroup, where
//               S is the softmax denominator relative to the running max M.
//   The reduce kernel combines the partials into [rows, D].
//
// Main kernel: grid (1, n_heads, B * NWG), 32 threads (one simdgroup).
//   z = b * NWG + iwg; workgroup iwg takes KV blocks of 32 positions
//   iwg, iwg + NWG, ...; each lane owns D/128 float4 of Q and of the output.
//   Threadgroup memory (threadgroup(0)): 32 x 33 floats to transpose the
//   per-lane partial dot products, then 32 floats of softmax weights.
// Reduce kernel: grid (rows, 1, 1), 32 * NWG threads; lane w of each
//   simdgroup reads workgroup w's partial, simdgroup s handles float4 columns
//   s, s + NWG, ...
//
// KV rows are read only for visible positions below kv_seq_len.

template <uint D, typename KV>
kernel void flash_attn_vec_main(
    constant FlashAttnVecParams &p       [[buffer(0)]],
    device const float          *q       [[buffer(1)]],
    device const KV             *k       [[buffer(2)]],
    device const KV             *v       [[buffer(3)]],
    device float                *dst     [[buffer(4)]],
    threadgroup float           *scratch [[threadgroup(0)]],
    uint3  tgpig [[threadgroup_position_in_grid]],
    uint3  tgpg  [[threadgroups_per_grid]],
    ushort lane  [[thread_index_in_simdgroup]])
{
    constexpr uint W   = 32;        // lanes, and KV positions per block
    constexpr uint D4  = D / 4;
    constexpr uint NPL = D4 / W;    // float4 per lane
    constexpr uint RS  = W + 1;     // row stride of the transpose scratch

    const uint nwg   = p.nwg;
    const uint head  = tgpig.y;
    const uint b     = tgpig.z / nwg;
    const uint iwg   = tgpig.z % nwg;
    const uint batch = tgpg.z / nwg;
    const uint kvh   = head / (p.n_heads / p.n_kv_heads);
    const ulong row  = ulong(b) * p.n_heads + head;
    const ulong kv0  = (ulong(b) * p.n_kv_heads + kvh) * p.kv_capacity * D;

    device const float4   *q4 = (device const float4 *)(q + row * D);
    device const vec<KV, 4> *k4 = (device const vec<KV, 4> *)(k + kv0);
    device const vec<KV, 4> *v4 = (device const vec<KV, 4> *)(v + kv0);

    threadgroup float *part = scratch;          // [W][RS]: part[lane][c]
    threadgroup float *wts  = scratch + W * RS; // [W]

    float4 qr[NPL];
    float4 o[NPL];
    for (uint i = 0; i < NPL; ++i) {
        qr[i] = q4[lane + W * i];
        o[i]  = float4(0.0f);
    }

    const uint n = p.kv_seq_len;
    uint lo = 0;
    if (p.mask_type == 2 && p.sliding_window > 0 && n > p.sliding_window) {
        lo = n - p.sliding_window;
    }

    float M = -FLT_MAX / 2;   // running max of the visible scores
    float S = 0.0f;           // running sum of exp(s - M)

    const uint nblk = (n + W - 1) / W;
    for (uint blk = iwg; blk < nblk; blk += nwg) {
        const uint base = blk * W;
        if (base + W <= lo) {
            continue;         // the whole block lies before the window
        }
        const uint beg = max(base, lo) - base;   // visible block slots [beg, end)
        const uint end = min(base + W, n) - base;

        // Lane-partial dot products over this lane's slice of D, one per slot.
        for (uint c = 0; c < W; ++c) {
            float acc = 0.0f;
            if (c >= beg && c < end) {
                device const vec<KV, 4> *kr = k4 + ulong(base + c) * D4 + lane;
                for (uint i = 0; i < NPL; ++i) {
                    acc += dot(float4(kr[W * i]), qr[i]);
                }
            }
            part[lane * RS + c] = acc;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        // Lane c owns slot c: sum the column, scale, cap, softmax update.
        float s = 0.0f;
        for (uint l = 0; l < W; ++l) {
            s += part[l * RS + lane];
        }
        s *= p.scale;
        if (p.softcap > 0.0f) {
            s = p.softcap * tanh(s / p.softcap);
        }
        const bool visible = lane >= beg && lane < end;
        const float m_new = max(M, simd_max(visible ? s : -FLT_MAX));
        const float alpha = exp(M - m_new);
        const float e     = visible ? exp(s - m_new) : 0.0f;
        S = S * alpha + simd_sum(e);
        M = m_new;
        wts[lane] = e;
        threadgroup_barrier(mem_flags::mem_threadgroup);

        for (uint i = 0; i < NPL; ++i) {
            o[i] *= alpha;
        }
        for (uint c = beg; c < end; ++c) {
            const float e_c = wts[c];
            device const vec<KV, 4> *vr = v4 + ulong(base + c) * D4 + lane;
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
            const ulong nrows = ulong(batch) * p.n_heads;
            device float *sm = dst + nrows * D * nwg + row * 2 * nwg + 2 * iwg;
            sm[0] = S;
            sm[1] = M;
        }
    }
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

typedef decltype(flash_attn_vec_main<256, float>)  flash_attn_vec_f32_t;
typedef decltype(flash_attn_vec_main<256, half>)   flash_attn_vec_f16_t;
typedef decltype(flash_attn_vec_combine<256>)      flash_attn_vec_reduce_t;

template [[host_name("flash_attn_vec_dk256")]]       kernel flash_attn_vec_f32_t flash_attn_vec_main<256, float>;
template [[host_name("flash_attn_vec_dk512")]]       kernel flash_attn_vec_f32_t flash_attn_vec_main<512, float>;
template [[host_name("flash_attn_vec_f16kv_dk256")]] kernel flash_attn_vec_f16_t flash_attn_vec_main<256, half>;
template [[host_name("flash_attn_vec_f16kv_dk512")]] kernel flash_attn_vec_f16_t flash_attn_vec_main<512, half>;
template [[host_name("flash_attn_vec_reduce_dk256")]] kernel flash_attn_vec_reduce_t flash_attn_vec_combine<256>;
template [[host_name("flash_attn_vec_reduce_dk512")]] kernel flash_attn_vec_reduce_t flash_attn_vec_combine<512>;
