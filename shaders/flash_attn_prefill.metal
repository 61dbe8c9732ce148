// Attention over a prompt (prefill), tiled with an online softmax:
//
//   out[b, h, i, :] = sum_j p_ij V[b, h / gqa, j, :],
//   p_ij = softmax_j(s_ij),  s_ij = scale * Q[b, h, i, :] . K[b, h / gqa, j, :]
//
// then, where set: the logit softcap s = softcapping * tanh(s / softcapping);
// an additive mask (s += mask[b, h, i, j]) or a bool one (false hides j);
// causal (the query at absolute position qL_off + i sees keys j <= it); a
// sliding window (it sees keys j > position - window). A query that sees no
// key gets 0. Scores and sums are f32; Q, K, V and the output are bf16 or
// half, P and O kept in f32 until the store.
//
// Entries (mlx-native's names and bindings; the D = 128 ones added in the
// same style):
//   flash_attn_prefill_<t>_d{64,128,256,512}[_boolmask]: tiles of BQ query
//     rows, BK keys a step: BQ 32, BK 16, 4 simdgroups for d64/d128/d256;
//     BQ 8, BK 8, 1 simdgroup for d512. Grid (ceil(qL / BQ), H, B),
//     threadgroup (32, NSG, 1).
//   flash_attn_prefill_llamacpp_<t>_d512[_boolmask]: the crate's D = 512
//     geometry after llama.cpp: 8 query rows, 4 or 8 simdgroups (the
//     threadgroup's), keys in blocks of 64 (the blk tile), taken 16 a step;
//     threadgroup(0) 28672 bytes holding the tiles. Grid (ceil(qL / 8), H, B),
//     threadgroup (32, 4 or 8, 1).
//   flash_attn_prefill_mask_fill_{bf16,f16}: the [qL, kL] causal / sliding
//     window mask as 0 or -inf (f16 added).
//   flash_attn_prefill_blk_{bf16,f16}: each (BQ, BK) tile of an additive mask
//     classified 0 (every value <= -1e30: skipped), 2 (every value 0: no mask
//     to add) or 1 (f16 added).
//
// Attention bindings: buffer(0) Q, (1) K, (2) V, (3) O, (4) AttnParams;
// with has_mask (300) (5) AttnMaskParams and (6) the mask (the I/O dtype, or
// bool for _boolmask); with has_blk (303) (7) the blk bytes ([NQ, NK] tiles
// of (BQ, BK) of the entry: (32, 16), (8, 8), llamacpp (8, 64)); with
// has_seqlens (305) (8) cu_seqlens_q and (9) cu_seqlens_k, uint [B + 1]:
// sequence z has queries cu_seqlens_q[z] .. cu_seqlens_q[z + 1] - 1 and keys
// cu_seqlens_k[z] .. of the packed rows, its queries being the last of its
// keys (qL_off = its key count minus its query count), offsets clamped to qL
// and kL. do_causal is 301, has_softcap 304; align_Q (200), align_K (201)
// and the llamacpp nsg (322) are accepted for the crate's host code and not
// needed (bounds are checked either way; the threadgroup gives the
// simdgroups). The rows of Q, K, V, O and the mask are reached through the
// strides of the params, so any layout with a contiguous head dimension
// works (head-major, token-major, a KV slot of some capacity).
//
// One threadgroup takes BQ query rows of one head. Each step stages BK keys
// of K in threadgroup memory; S = Q K^T is computed on 8x8 simdgroup
// matrices (the simdgroups split the query rows in groups of 8 and, when
// there are more simdgroups than groups, the head dimension, summing the
// parts in the softmax); the softmax goes row by row in threadgroup memory
// (L = 32 NSG / BQ lanes a row, masks applied there), V replaces K in the
// same memory, and O += P V accumulates in simdgroup matrices, each
// simdgroup holding its rows and its share of the head dimension. Keys
// outside the causal and window range of a tile are never visited, so time
// follows the keys a tile sees.

constant bool align_Q     [[function_constant(200)]];
constant bool align_K     [[function_constant(201)]];
constant bool has_mask    [[function_constant(300)]];
constant bool do_causal   [[function_constant(301)]];
constant bool has_blk     [[function_constant(303)]];
constant bool has_softcap [[function_constant(304)]];
constant bool has_seqlens [[function_constant(305)]];
constant int  fc_nsg      [[function_constant(322)]];
constant int  BQ_blk      [[function_constant(400)]];
constant int  BK_blk      [[function_constant(401)]];

constant bool fa_mask    = is_function_constant_defined(has_mask) ? has_mask : false;
constant bool fa_causal  = is_function_constant_defined(do_causal) ? do_causal : false;
constant bool fa_blk     = is_function_constant_defined(has_blk) ? has_blk : false;
constant bool fa_softcap = is_function_constant_defined(has_softcap) ? has_softcap : false;
constant bool fa_varlen  = is_function_constant_defined(has_seqlens) ? has_seqlens : false;
constant int  fa_blk_bq  = is_function_constant_defined(BQ_blk) ? BQ_blk : 32;
constant int  fa_blk_bk  = is_function_constant_defined(BK_blk) ? BK_blk : 16;

// The running maximum starts finite, so exp2(s - max) of a hidden score
// (-inf) is 0 and never NaN, even before any key is seen.
constant float FA_MAX_INIT = -FLT_MAX / 2.0f;
constant float FA_LOG2E = 1.44269504088896341f;

// Where a threadgroup's sequence lies: element offsets of its first query
// row in Q and O and first key row in K and V (head included), the query and
// key counts, and the absolute position of query row 0.
struct FaSeq {
    ulong q_base;
    ulong o_base;
    ulong k_base;
    ulong v_base;
    int   q_len;
    int   k_len;
    int   q_off;
};

static inline FaSeq fa_seq(constant AttnParams& p, uint z, uint h, device const uint* cu_q, device const uint* cu_k) {
    const uint kvh = h / uint(max(p.gqa_factor, 1));
    FaSeq s;
    ulong qr = 0, kr = 0;
    if (fa_varlen) {
        const uint qs = min(cu_q[z], uint(p.qL));
        const uint qe = clamp(cu_q[z + 1], qs, uint(p.qL));
        const uint ks = min(cu_k[z], uint(p.kL));
        const uint ke = clamp(cu_k[z + 1], ks, uint(p.kL));
        s.q_len = int(qe - qs);
        s.k_len = int(ke - ks);
        s.q_off = s.k_len - s.q_len;
        qr = qs;
        kr = ks;
    } else {
        s.q_len = p.qL;
        s.k_len = p.kL;
        s.q_off = p.qL_off;
    }
    s.q_base = ulong(z) * p.Q_stride_b + ulong(h) * p.Q_stride_h + qr * p.Q_stride_l;
    s.o_base = ulong(z) * p.O_stride_b + ulong(h) * p.O_stride_h + qr * p.O_stride_l;
    s.k_base = ulong(z) * p.K_stride_b + ulong(kvh) * p.K_stride_h + kr * p.K_stride_l;
    s.v_base = ulong(z) * p.V_stride_b + ulong(kvh) * p.V_stride_h + kr * p.V_stride_l;
    return s;
}

// The lane layout of an 8x8 simdgroup matrix (Apple's, which MLX's steel
// fragments rely on): lane l holds row (q & 4) + (l / 2) % 4 and columns
// (q & 2) * 2 + (l % 2) * 2 and the next, q = l / 4.
static inline ushort2 fa_lane_rc(uint lane) {
    const uint q = lane / 4;
    return ushort2((q & 4) + (lane / 2) % 4, (q & 2) * 2 + (lane % 2) * 2);
}

// Element (r, c) of the matrix is src[r * ld + c].
template <typename U>
static inline void fa_load(thread simdgroup_float8x8& m, threadgroup U* src, int ld, ushort2 rc) {
    thread auto& e = m.thread_elements();
    e[0] = float(src[rc.x * ld + rc.y]);
    e[1] = float(src[rc.x * ld + rc.y + 1]);
}

// Element (r, c) of the matrix is src[c * ld + r] (the transpose).
template <typename U>
static inline void fa_load_t(thread simdgroup_float8x8& m, threadgroup U* src, int ld, ushort2 rc) {
    thread auto& e = m.thread_elements();
    e[0] = float(src[rc.y * ld + rc.x]);
    e[1] = float(src[(rc.y + 1) * ld + rc.x]);
}

// A mask value: a bool one hides the key when false, an additive one is
// added to the score (in log2 units, as the scores are).
static inline void fa_apply_mask(bool m, thread float& x, thread bool& vis) {
    vis = m;
}
static inline void fa_apply_mask(half m, thread float& x, thread bool& vis) {
    x += float(m) * FA_LOG2E;
}
static inline void fa_apply_mask(bfloat m, thread float& x, thread bool& vis) {
    x += float(m) * FA_LOG2E;
}

// One threadgroup's BQ query rows (tile tg.x) of head tg.y, sequence tg.z.
// NSG simdgroups: R = BQ / 8 row groups times G = NSG / R parts of the head
// dimension. BK keys a step, within one blk tile of BLK_BK keys; rows of qs
// and kvs are LD = D + PAD elements apart. Threadgroup memory: qs [BQ][LD],
// kvs [BK][LD], ss [G][BQ][BK] floats, rowf [2 * BQ] floats.
template <typename T, typename MaskT, short BQ, short BK, short D, short NSG, short BLK_BK, short PAD>
static inline void fa_tile(device const T* Q, device const T* K, device const T* V, device T* O,
                           constant AttnParams& p, constant AttnMaskParams& mp, device const MaskT* mask,
                           device const char* blk, device const uint* cu_q, device const uint* cu_k,
                           threadgroup T* qs, threadgroup T* kvs, threadgroup float* ss, threadgroup float* rowf,
                           uint3 tg, uint sg, uint lane) {
    constexpr short R = BQ / 8;
    constexpr short G = NSG / R;
    constexpr short DG = D / 8 / G;
    constexpr short LD = D + PAD;
    constexpr short NT = NSG * 32;
    constexpr short L = NT / BQ;
    static_assert(R * G == NSG && DG * G * 8 == D && L * BQ == NT && L <= 32, "tile geometry");
    static_assert(BLK_BK % BK == 0, "a step lies within one blk tile");

    const FaSeq s = fa_seq(p, tg.z, tg.y, cu_q, cu_k);
    const int q0 = int(tg.x) * BQ;
    if (q0 >= s.q_len) {
        return;
    }
    const int rows = min(int(BQ), s.q_len - q0);
    const int qa0 = s.q_off + q0;
    const int window = p.window;
    int k_lo = 0;
    int k_hi = s.k_len;
    if (fa_causal) {
        k_hi = min(k_hi, qa0 + rows);
    }
    if (window > 0) {
        k_lo = max(k_lo, qa0 - window + 1);
    }
    k_lo = (k_lo / BK) * BK;

    const uint tid = sg * 32 + lane;
    const ushort2 rc = fa_lane_rc(lane);
    const short rg = short(sg % R);
    const short dg = short(sg / R);
    const int row = int(tid) / L;
    const int sub = int(tid) % L;
    const int qa = qa0 + row;
    const float scale = p.scale;
    const float cap = p.softcapping;

    for (uint i = tid; i < uint(BQ * D); i += NT) {
        const int r = int(i) / D;
        const int c = int(i) % D;
        qs[r * LD + c] = r < rows ? Q[s.q_base + ulong(q0 + r) * p.Q_stride_l + c] : T(0);
    }

    simdgroup_float8x8 o[DG];
    for (short j = 0; j < DG; ++j) {
        o[j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    }
    float m_run = FA_MAX_INIT;
    float l_run = 0.0f;
    const int nk_blk = (p.kL + BLK_BK - 1) / BLK_BK;

    for (int k0 = k_lo; k0 < k_hi; k0 += BK) {
        char bc = 1;
        if (fa_blk) {
            bc = blk[ulong(tg.x) * ulong(nk_blk) + ulong(k0 / BLK_BK)];
            if (bc == 0) {
                continue;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint i = tid; i < uint(BK * D); i += NT) {
            const int r = int(i) / D;
            const int c = int(i) % D;
            kvs[r * LD + c] = k0 + r < k_hi ? K[s.k_base + ulong(k0 + r) * p.K_stride_l + c] : T(0);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        // S (this simdgroup's part of the head dimension) for its 8 rows.
        for (short kj = 0; kj < BK / 8; ++kj) {
            simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            for (short d = dg * DG; d < (dg + 1) * DG; ++d) {
                simdgroup_float8x8 a, b;
                fa_load(a, qs + rg * 8 * LD + d * 8, LD, rc);
                fa_load_t(b, kvs + kj * 8 * LD + d * 8, LD, rc);
                simdgroup_multiply_accumulate(acc, a, b, acc);
            }
            thread auto& e = acc.thread_elements();
            threadgroup float* dst = ss + (dg * BQ + rg * 8 + rc.x) * BK + kj * 8 + rc.y;
            dst[0] = e[0];
            dst[1] = e[1];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        for (uint i = tid; i < uint(BK * D); i += NT) {
            const int r = int(i) / D;
            const int c = int(i) % D;
            kvs[r * LD + c] = k0 + r < k_hi ? V[s.v_base + ulong(k0 + r) * p.V_stride_l + c] : T(0);
        }

        // Softmax of row `row`, its L lanes taking every L-th key of the step.
        constexpr short CPT = (BK + L - 1) / L;
        float sv[CPT];
        float mx = FA_MAX_INIT;
        for (short t = 0; t < CPT; ++t) {
            const int c = sub + t * L;
            float x = -INFINITY;
            if (c < BK) {
                const int j = k0 + c;
                float acc = 0.0f;
                for (short g = 0; g < G; ++g) {
                    acc += ss[(g * BQ + row) * BK + c];
                }
                x = acc * scale;
                if (fa_softcap) {
                    x = cap * precise::tanh(x / cap);
                }
                x *= FA_LOG2E;
                bool vis = j < s.k_len && row < rows;
                if (fa_causal && j > qa) {
                    vis = false;
                }
                if (window > 0 && qa - j >= window) {
                    vis = false;
                }
                if (fa_mask && bc != 2 && vis) {
                    const MaskT mv = mask[ulong(tg.z) * mp.M_stride_b + ulong(tg.y) * mp.M_stride_h +
                                          ulong(q0 + row) * mp.M_stride_q + ulong(j)];
                    fa_apply_mask(mv, x, vis);
                }
                x = vis ? x : -INFINITY;
            }
            sv[t] = x;
            mx = max(mx, x);
        }
        for (short o2 = L / 2; o2 > 0; o2 /= 2) {
            mx = max(mx, simd_shuffle_xor(mx, ushort(o2)));
        }
        const float m_new = max(m_run, mx);
        float sum = 0.0f;
        for (short t = 0; t < CPT; ++t) {
            const int c = sub + t * L;
            if (c < BK) {
                const float pr = exp2(sv[t] - m_new);
                ss[row * BK + c] = pr;
                sum += pr;
            }
        }
        for (short o2 = L / 2; o2 > 0; o2 /= 2) {
            sum += simd_shuffle_xor(sum, ushort(o2));
        }
        const float factor = exp2(m_run - m_new);
        l_run = l_run * factor + sum;
        m_run = m_new;
        if (sub == 0) {
            rowf[row] = factor;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        // O = O * factor + P V for this simdgroup's rows and columns.
        const float f0 = rowf[rg * 8 + rc.x];
        for (short j = 0; j < DG; ++j) {
            thread auto& e = o[j].thread_elements();
            e[0] *= f0;
            e[1] *= f0;
        }
        for (short kj = 0; kj < BK / 8; ++kj) {
            simdgroup_float8x8 pm;
            fa_load(pm, ss + rg * 8 * BK + kj * 8, BK, rc);
            for (short j = 0; j < DG; ++j) {
                simdgroup_float8x8 vm;
                fa_load(vm, kvs + kj * 8 * LD + (dg * DG + j) * 8, LD, rc);
                simdgroup_multiply_accumulate(o[j], pm, vm, o[j]);
            }
        }
    }

    if (sub == 0) {
        rowf[BQ + row] = l_run;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int r = rg * 8 + rc.x;
    if (r < rows) {
        const float l = rowf[BQ + r];
        const float inv = l == 0.0f ? 0.0f : 1.0f / l;
        device T* dst = O + s.o_base + ulong(q0 + r) * p.O_stride_l;
        for (short j = 0; j < DG; ++j) {
            thread auto& e = o[j].thread_elements();
            const int c = (dg * DG + j) * 8 + rc.y;
            dst[c] = T(e[0] * inv);
            dst[c + 1] = T(e[1] * inv);
        }
    }
}

// The entries of mlx-native's flash_attn_prefill.metal (and D = 128):
// BQ, BK and the simdgroups by head dimension (see the top of the file).
template <typename T, typename MaskT, short BQ, short BK, short D, short NSG>
kernel void flash_attn_prefill_tiles(
    device const T*            Q            [[buffer(0)]],
    device const T*            K            [[buffer(1)]],
    device const T*            V            [[buffer(2)]],
    device T*                  O            [[buffer(3)]],
    constant AttnParams&       params       [[buffer(4)]],
    constant AttnMaskParams&   mask_params  [[buffer(5), function_constant(has_mask)]],
    device const MaskT*        mask         [[buffer(6), function_constant(has_mask)]],
    device const char*         blk          [[buffer(7), function_constant(has_blk)]],
    device const uint*         cu_seqlens_q [[buffer(8), function_constant(has_seqlens)]],
    device const uint*         cu_seqlens_k [[buffer(9), function_constant(has_seqlens)]],
    uint3 tg   [[threadgroup_position_in_grid]],
    uint  sg   [[simdgroup_index_in_threadgroup]],
    uint  lane [[thread_index_in_simdgroup]])
{
    constexpr short PAD = 16 / sizeof(T);
    threadgroup T qs[BQ * (D + PAD)];
    threadgroup T kvs[BK * (D + PAD)];
    threadgroup float ss[BQ * BK];
    threadgroup float rowf[2 * BQ];
    fa_tile<T, MaskT, BQ, BK, D, NSG, BK, PAD>(Q, K, V, O, params, mask_params, mask, blk, cu_seqlens_q,
                                               cu_seqlens_k, qs, kvs, ss, rowf, tg, sg, lane);
}

// mlx-native's flash_attn_prefill_d512.metal entries: 8 query rows, 4 or 8
// simdgroups splitting the head dimension, keys 16 a step (blk tiles of 64);
// threadgroup(0) (28672 bytes, the crate's) holds qs [8][512], kvs [16][512]
// and ss [NSG][8][16] floats.
template <short NSG, typename T, typename MaskT>
static inline void fa_llamacpp(device const T* Q, device const T* K, device const T* V, device T* O,
                               constant AttnParams& p, constant AttnMaskParams& mp, device const MaskT* mask,
                               device const char* blk, device const uint* cu_q, device const uint* cu_k,
                               threadgroup uchar* shmem, threadgroup float* rowf, uint3 tg, uint sg, uint lane) {
    threadgroup T* qs = (threadgroup T*)shmem;
    threadgroup T* kvs = qs + 8 * 512;
    threadgroup float* ss = (threadgroup float*)(kvs + 16 * 512);
    fa_tile<T, MaskT, 8, 16, 512, NSG, 64, 0>(Q, K, V, O, p, mp, mask, blk, cu_q, cu_k, qs, kvs, ss, rowf, tg, sg,
                                              lane);
}

template <typename T, typename MaskT>
kernel void flash_attn_prefill_llamacpp(
    device const T*            Q            [[buffer(0)]],
    device const T*            K            [[buffer(1)]],
    device const T*            V            [[buffer(2)]],
    device T*                  O            [[buffer(3)]],
    constant AttnParams&       params       [[buffer(4)]],
    constant AttnMaskParams&   mask_params  [[buffer(5), function_constant(has_mask)]],
    device const MaskT*        mask         [[buffer(6), function_constant(has_mask)]],
    device const char*         blk          [[buffer(7), function_constant(has_blk)]],
    device const uint*         cu_seqlens_q [[buffer(8), function_constant(has_seqlens)]],
    device const uint*         cu_seqlens_k [[buffer(9), function_constant(has_seqlens)]],
    threadgroup uchar*         shmem        [[threadgroup(0)]],
    uint3 tg   [[threadgroup_position_in_grid]],
    uint  sg   [[simdgroup_index_in_threadgroup]],
    uint  lane [[thread_index_in_simdgroup]],
    uint  nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup float rowf[16];
    if (nsg == 8) {
        fa_llamacpp<8>(Q, K, V, O, params, mask_params, mask, blk, cu_seqlens_q, cu_seqlens_k, shmem, rowf, tg, sg,
                       lane);
    } else if (nsg == 4) {
        fa_llamacpp<4>(Q, K, V, O, params, mask_params, mask, blk, cu_seqlens_q, cu_seqlens_k, shmem, rowf, tg, sg,
                       lane);
    }
}

template [[host_name("flash_attn_prefill_bf16_d64")]]           kernel decltype(flash_attn_prefill_tiles<bfloat, bfloat, 32, 16, 64, 4>)  flash_attn_prefill_tiles<bfloat, bfloat, 32, 16, 64, 4>;
template [[host_name("flash_attn_prefill_bf16_d64_boolmask")]]  kernel decltype(flash_attn_prefill_tiles<bfloat, bool, 32, 16, 64, 4>)    flash_attn_prefill_tiles<bfloat, bool, 32, 16, 64, 4>;
template [[host_name("flash_attn_prefill_f16_d64")]]            kernel decltype(flash_attn_prefill_tiles<half, half, 32, 16, 64, 4>)      flash_attn_prefill_tiles<half, half, 32, 16, 64, 4>;
template [[host_name("flash_attn_prefill_f16_d64_boolmask")]]   kernel decltype(flash_attn_prefill_tiles<half, bool, 32, 16, 64, 4>)      flash_attn_prefill_tiles<half, bool, 32, 16, 64, 4>;
template [[host_name("flash_attn_prefill_bf16_d128")]]          kernel decltype(flash_attn_prefill_tiles<bfloat, bfloat, 32, 16, 128, 4>) flash_attn_prefill_tiles<bfloat, bfloat, 32, 16, 128, 4>;
template [[host_name("flash_attn_prefill_bf16_d128_boolmask")]] kernel decltype(flash_attn_prefill_tiles<bfloat, bool, 32, 16, 128, 4>)   flash_attn_prefill_tiles<bfloat, bool, 32, 16, 128, 4>;
template [[host_name("flash_attn_prefill_f16_d128")]]           kernel decltype(flash_attn_prefill_tiles<half, half, 32, 16, 128, 4>)     flash_attn_prefill_tiles<half, half, 32, 16, 128, 4>;
template [[host_name("flash_attn_prefill_f16_d128_boolmask")]]  kernel decltype(flash_attn_prefill_tiles<half, bool, 32, 16, 128, 4>)     flash_attn_prefill_tiles<half, bool, 32, 16, 128, 4>;
template [[host_name("flash_attn_prefill_bf16_d256")]]          kernel decltype(flash_attn_prefill_tiles<bfloat, bfloat, 32, 16, 256, 4>) flash_attn_prefill_tiles<bfloat, bfloat, 32, 16, 256, 4>;
template [[host_name("flash_attn_prefill_bf16_d256_boolmask")]] kernel decltype(flash_attn_prefill_tiles<bfloat, bool, 32, 16, 256, 4>)   flash_attn_prefill_tiles<bfloat, bool, 32, 16, 256, 4>;
template [[host_name("flash_attn_prefill_f16_d256")]]           kernel decltype(flash_attn_prefill_tiles<half, half, 32, 16, 256, 4>)     flash_attn_prefill_tiles<half, half, 32, 16, 256, 4>;
template [[host_name("flash_attn_prefill_f16_d256_boolmask")]]  kernel decltype(flash_attn_prefill_tiles<half, bool, 32, 16, 256, 4>)     flash_attn_prefill_tiles<half, bool, 32, 16, 256, 4>;
template [[host_name("flash_attn_prefill_bf16_d512")]]          kernel decltype(flash_attn_prefill_tiles<bfloat, bfloat, 8, 8, 512, 1>)   flash_attn_prefill_tiles<bfloat, bfloat, 8, 8, 512, 1>;
template [[host_name("flash_attn_prefill_bf16_d512_boolmask")]] kernel decltype(flash_attn_prefill_tiles<bfloat, bool, 8, 8, 512, 1>)     flash_attn_prefill_tiles<bfloat, bool, 8, 8, 512, 1>;
template [[host_name("flash_attn_prefill_f16_d512")]]           kernel decltype(flash_attn_prefill_tiles<half, half, 8, 8, 512, 1>)       flash_attn_prefill_tiles<half, half, 8, 8, 512, 1>;
template [[host_name("flash_attn_prefill_f16_d512_boolmask")]]  kernel decltype(flash_attn_prefill_tiles<half, bool, 8, 8, 512, 1>)       flash_attn_prefill_tiles<half, bool, 8, 8, 512, 1>;

template [[host_name("flash_attn_prefill_llamacpp_bf16_d512")]]          kernel decltype(flash_attn_prefill_llamacpp<bfloat, bfloat>) flash_attn_prefill_llamacpp<bfloat, bfloat>;
template [[host_name("flash_attn_prefill_llamacpp_bf16_d512_boolmask")]] kernel decltype(flash_attn_prefill_llamacpp<bfloat, bool>)   flash_attn_prefill_llamacpp<bfloat, bool>;
template [[host_name("flash_attn_prefill_llamacpp_f16_d512")]]           kernel decltype(flash_attn_prefill_llamacpp<half, half>)     flash_attn_prefill_llamacpp<half, half>;
template [[host_name("flash_attn_prefill_llamacpp_f16_d512_boolmask")]]  kernel decltype(flash_attn_prefill_llamacpp<half, bool>)     flash_attn_prefill_llamacpp<half, bool>;

// mlx-native's flash_attn_prefill_mask_fill_bf16 (and an f16 twin): buffer(0)
// mask [qL, kL], (1) FlashAttnPrefillMaskParams. Grid (qL, 1, 1)
// threadgroups of min(256, max(32, nextPow2(kL))) threads striding over the
// row. Cell (q, k), with a = q + q_abs_offset: -inf when causal and k > a,
// or n_swa > 0 and a - k >= n_swa; else 0.
template <typename T>
kernel void flash_attn_prefill_mask_fill(
    device T*                                   mask    [[buffer(0)]],
    constant FlashAttnPrefillMaskParams&        params  [[buffer(1)]],
    uint q_row   [[threadgroup_position_in_grid]],
    uint tid     [[thread_index_in_threadgroup]],
    uint tg_size [[threads_per_threadgroup]])
{
    const long a = long(q_row) + long(params.q_abs_offset);
    const ulong base = ulong(q_row) * ulong(params.seq_len_k);
    for (uint k = tid; k < params.seq_len_k; k += tg_size) {
        bool hidden = params.causal != 0u && long(k) > a;
        if (params.n_swa > 0 && a - long(k) >= long(params.n_swa)) {
            hidden = true;
        }
        mask[base + k] = hidden ? T(-INFINITY) : T(0.0f);
    }
}

template [[host_name("flash_attn_prefill_mask_fill_bf16")]] kernel decltype(flash_attn_prefill_mask_fill<bfloat>) flash_attn_prefill_mask_fill<bfloat>;
template [[host_name("flash_attn_prefill_mask_fill_f16")]]  kernel decltype(flash_attn_prefill_mask_fill<half>)   flash_attn_prefill_mask_fill<half>;

// mlx-native's flash_attn_prefill_blk_bf16 (and an f16 twin): buffer(0) the
// additive mask [qL, kL] (rows mask_row_stride apart), (1) blk [NQ, NK]
// bytes out, (2) FlashAttnPrefillBlkParams; the tile (BQ, BK) is function
// constants 400 and 401 (32 and 16 when not given). Grid (NK, NQ, 1), one
// simdgroup each: a tile wholly past kL is 0, one crossing kL is 1; else 0
// when its largest value is <= -1e30, 2 when all are 0, else 1. Rows past
// qL are not read; the lanes stride over the tile's columns (any BK).
template <typename T>
kernel void flash_attn_prefill_blk(
    device const T*                             mask    [[buffer(0)]],
    device char*                                blk     [[buffer(1)]],
    constant FlashAttnPrefillBlkParams&         params  [[buffer(2)]],
    uint3 tg   [[threadgroup_position_in_grid]],
    uint  lane [[thread_index_in_simdgroup]])
{
    const int bq = fa_blk_bq;
    const int bk = fa_blk_bk;
    const int qt = int(tg.y);
    const int kt = int(tg.x);
    const int k_start = kt * bk;
    char res;
    if (k_start >= params.seq_len_k) {
        res = 0;
    } else if (k_start + bk > params.seq_len_k) {
        res = 1;
    } else {
        const int rows = clamp(params.seq_len_q - qt * bq, 0, bq);
        float mn = INFINITY;
        float mx = -INFINITY;
        for (int c = int(lane); c < bk; c += 32) {
            for (int j = 0; j < rows; ++j) {
                const float v = float(mask[ulong(qt * bq + j) * ulong(params.mask_row_stride) + ulong(k_start + c)]);
                mn = min(mn, v);
                mx = max(mx, v);
            }
        }
        mn = simd_min(mn);
        mx = simd_max(mx);
        res = mx <= -1.0e30f ? char(0) : (mn == 0.0f && mx == 0.0f ? char(2) : char(1));
    }
    if (lane == 0) {
        const int nk = (params.seq_len_k + bk - 1) / bk;
        blk[ulong(qt) * ulong(nk) + ulong(kt)] = res;
    }
}

template [[host_name("flash_attn_prefill_blk_bf16")]] kernel decltype(flash_attn_prefill_blk<bfloat>) flash_attn_prefill_blk<bfloat>;
template [[host_name("flash_attn_prefill_blk_f16")]]  kernel decltype(flash_attn_prefill_blk<half>)   flash_attn_prefill_blk<half>;
