// The prelude of every Metal family: the kernel registry compiles it ahead of
// the family's header (shaders/<family>.h) and kernels (shaders/<family>.metal)
// as one program (`#line` marking where each file starts), so what several
// families use is written once, here.

#include <metal_stdlib>
using namespace metal;

// The sum of v over the threadgroup, returned to every thread; every thread of
// the threadgroup must call it. partials holds one float per simdgroup
// (ceil(threads / 32)). Each thread adds the partials itself, in one order, so
// every thread gets the same bits (a last, partial simdgroup may have fewer
// lanes than there are partials). The barrier after the read lets a kernel
// call it again with the same partials.
static inline float threadgroup_sum(float v, threadgroup float* partials, uint sg, uint lane, uint n_sg) {
    const float s = simd_sum(v);
    if (lane == 0) {
        partials[sg] = s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float total = 0.0f;
    for (uint i = 0; i < n_sg; ++i) {
        total += partials[i];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return total;
}

// The maximum of v over the threadgroup, returned to every thread; the same
// contract as threadgroup_sum.
static inline float threadgroup_max(float v, threadgroup float* partials, uint sg, uint lane, uint n_sg) {
    const float m = simd_max(v);
    if (lane == 0) {
        partials[sg] = m;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float r = -INFINITY;
    for (uint i = 0; i < n_sg; ++i) {
        r = max(r, partials[i]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return r;
}

// ---- the linear-attention gates (compute_g_beta, gated_delta_net's fused decode step) ----

// log(1 + e), keeping full relative precision where e is far below 1 (MSL
// has no log1p): with u = 1 + e, log1p(e) = log(u) * e / (u - 1), exact to
// f32 rounding (u == 1 means log1p(e) = e to f32 precision).
static inline float log1p_f32(float e) {
    const float u = 1.0f + e;
    return u == 1.0f ? e : log(u) * (e / (u - 1.0f));
}

// softplus(x) = x for x > 20 (PyTorch's threshold), else log(1 + exp(x)).
static inline float softplus_f32(float x) {
    return x > 20.0f ? x : log1p_f32(exp(x));
}

// g = -exp(A_log) softplus(a + dt_bias) (the log decay), beta = sigmoid(b).
static inline void gdn_gates(float a, float b, float a_log, float dt_bias, thread float& g, thread float& beta) {
    g = -exp(a_log) * softplus_f32(a + dt_bias);
    beta = 1.0f / (1.0f + exp(-b));
}

// ---- gated activations (silu_mul, gelu, and the per-expert gate/up products) ----

// silu(g) = g * sigmoid(g) = g / (1 + exp(-g)). For g < -88.7 exp(-g)
// overflows to +inf and g / inf is -0, the limit: finite inputs give no NaN.
static inline float silu(float g) {
    return g / (1.0f + precise::exp(-g));
}

// GELU with the tanh approximation (PyTorch's approximate='tanh'):
// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3),
// computed as x / (1 + exp(-2u)), the same function (0.5 (1 + tanh(u)) =
// 1 / (1 + exp(-2u))): one exp and one division, no cancellation near
// 1 + tanh(u) = 0, and no NaN for finite x (exp(-2u) overflows to +inf for
// x below about -10, and x / inf is -0, the limit; x^2 overflowing makes 2u
// infinite with x's sign, which gives x or -0).
constant float GELU_TWO_SQRT_2_OVER_PI = 1.5957691216057308f;  // 2 sqrt(2 / pi)
constant float GELU_CUBIC = 0.044715f;

static inline float gelu_tanh(float x) {
    const float two_u = GELU_TWO_SQRT_2_OVER_PI * x * (1.0f + GELU_CUBIC * x * x);
    return x / (1.0f + precise::exp(-two_u));
}

// ---- MLX affine quantization (quantized_matmul, quantized_matmul_id) ----
//
// w[n, k] = scale[n, k / gs] * q[n, k] + bias[n, k / gs], q the bits-wide
// value k of row n, rows packed from the low bits up (ts/ops/quantized_matmul.ts
// writes the format down). Two layouts of the rows:
//   chunked, MLX's (group size 32, 64 or 128 dividing K): a row is K / 32
//     chunks of 32 values in `bits` whole words, each chunk inside one group,
//     so a chunk is decoded at once and its sum taken as
//     scale * sum(q x) + bias * sum(x);
//   any other (mlx-native's kernels take any K and group size): rows of
//     q_row_bytes(K, bits) bytes, value k at bit k * bits of its row, one
//     scale and bias per group of ceil(K / gs), decoded a value at a time.

// Bytes of one packed row of K values: whole words for 4 and 8 bits, 3 bytes
// per 4 values for 6 (MLX's K * bits / 8 when K is a multiple of 32).
static inline ulong q_row_bytes(uint K, uint bits) {
    return bits == 6 ? 3ul * ((K + 3) / 4) : 4ul * ((ulong(K) * bits + 31) / 32);
}

// Whether the rows follow MLX's chunked layout.
static inline bool q_chunked(uint K, uint gs) {
    return (gs == 32 || gs == 64 || gs == 128) && K % gs == 0;
}

// q of value k of a packed row in any layout: the bits at bit k * bits, bit b
// of the row being bit b % 8 of byte b / 8.
static inline uint q_value(device const uchar* row, uint k, uint bits) {
    const ulong bit = ulong(k) * bits;
    const uint s = uint(bit % 8);
    device const uchar* p = row + bit / 8;
    uint v = uint(p[0]) >> s;
    if (s + bits > 8) {
        v |= uint(p[1]) << (8 - s);
    }
    return v & ((1u << bits) - 1);
}

// The 32 values of a chunk, held in BITS words at w: value j is the BITS bits
// at bit j * BITS of the words (a 6-bit value may straddle two words).
template <int BITS>
static inline void q_chunk(device const uint* w, thread float (&q)[32]) {
    uint u[BITS];
    for (int i = 0; i < BITS; ++i) {
        u[i] = w[i];
    }
    for (int j = 0; j < 32; ++j) {
        const int bit = j * BITS, wi = bit / 32, s = bit % 32;
        uint v = u[wi] >> s;
        if (s + BITS > 32) {
            v |= u[wi + 1] << (32 - s);
        }
        q[j] = float(v & ((1u << BITS) - 1));
    }
}

// x[k] as a float; rounded to TS (the scales' type) first where ROUND_X.
template <typename TX, typename TS, bool ROUND_X>
static inline float q_x(device const TX* x, ulong k) {
    const float v = float(x[k]);
    return ROUND_X ? float(TS(v)) : v;
}

// acc[r][i] += sum over this thread's share of K of w[row, k] * x[i, k], for
// rows n0 + r (r < R, clamped to N - 1) and rows i < m (MT at most) of x,
// x_row elements apart. Chunked rows: thread `lane` of `lanes` takes chunks
// lane, lane + lanes, ...
template <typename TX, typename TS, short R, short MT, bool ROUND_X, int BITS>
static inline void q_dots_chunked(thread float (&acc)[R][MT], device const TX* x, ulong x_row, device const uchar* w,
                                  device const TS* scales, device const TS* biases, uint m, uint N, uint K, uint gs, uint n0,
                                  uint lane, uint lanes) {
    const ulong w_row = ulong(K) * BITS / 8;
    const ulong s_row = K / gs;
    const uint chunks = K / 32;
    for (uint c = lane; c < chunks; c += lanes) {
        const ulong k0 = ulong(c) * 32;
        float xsum[MT];
        for (short i = 0; i < MT; ++i) {
            xsum[i] = 0.0f;
            if (uint(i) < m) {
                for (short j = 0; j < 32; ++j) {
                    xsum[i] += q_x<TX, TS, ROUND_X>(x, ulong(i) * x_row + k0 + j);
                }
            }
        }
        const ulong g = k0 / gs;
        for (short r = 0; r < R; ++r) {
            const ulong row = min(n0 + uint(r), N - 1);
            float q[32];
            q_chunk<BITS>((device const uint*)(w + row * w_row) + ulong(c) * BITS, q);
            const float s = float(scales[row * s_row + g]);
            const float b = float(biases[row * s_row + g]);
            for (short i = 0; i < MT; ++i) {
                if (uint(i) < m) {
                    float d = 0.0f;
                    for (short j = 0; j < 32; ++j) {
                        d += q[j] * q_x<TX, TS, ROUND_X>(x, ulong(i) * x_row + k0 + j);
                    }
                    acc[r][i] += s * d + b * xsum[i];
                }
            }
        }
    }
}

// The same for any layout: thread `lane` of `lanes` takes values lane,
// lane + lanes, ... of each row.
template <typename TX, typename TS, short R, short MT, bool ROUND_X>
static inline void q_dots_any(thread float (&acc)[R][MT], device const TX* x, ulong x_row, device const uchar* w,
                              device const TS* scales, device const TS* biases, uint m, uint N, uint K, uint gs, uint bits, uint n0,
                              uint lane, uint lanes) {
    const ulong w_row = q_row_bytes(K, bits);
    const ulong s_row = (K + gs - 1) / gs;
    for (uint k = lane; k < K; k += lanes) {
        const ulong g = k / gs;
        for (short r = 0; r < R; ++r) {
            const ulong row = min(n0 + uint(r), N - 1);
            const float wv = float(scales[row * s_row + g]) * float(q_value(w + row * w_row, k, bits)) + float(biases[row * s_row + g]);
            for (short i = 0; i < MT; ++i) {
                if (uint(i) < m) {
                    acc[r][i] += wv * q_x<TX, TS, ROUND_X>(x, ulong(i) * x_row + k);
                }
            }
        }
    }
}

// Zeroes acc, then sums this thread's share (q_dots_chunked or q_dots_any by
// the layout).
template <typename TX, typename TS, short R, short MT, bool ROUND_X>
static inline void q_dots(thread float (&acc)[R][MT], device const TX* x, ulong x_row, device const uchar* w, device const TS* scales,
                          device const TS* biases, uint m, uint N, uint K, uint gs, uint bits, uint n0, uint lane, uint lanes) {
    for (short r = 0; r < R; ++r) {
        for (short i = 0; i < MT; ++i) {
            acc[r][i] = 0.0f;
        }
    }
    if (!q_chunked(K, gs)) {
        q_dots_any<TX, TS, R, MT, ROUND_X>(acc, x, x_row, w, scales, biases, m, N, K, gs, bits, n0, lane, lanes);
    } else if (bits == 4) {
        q_dots_chunked<TX, TS, R, MT, ROUND_X, 4>(acc, x, x_row, w, scales, biases, m, N, K, gs, n0, lane, lanes);
    } else if (bits == 6) {
        q_dots_chunked<TX, TS, R, MT, ROUND_X, 6>(acc, x, x_row, w, scales, biases, m, N, K, gs, n0, lane, lanes);
    } else {
        q_dots_chunked<TX, TS, R, MT, ROUND_X, 8>(acc, x, x_row, w, scales, biases, m, N, K, gs, n0, lane, lanes);
    }
}

// ---- per-expert products (quantized_matmul_id, dense_matmul_id) ----

// The gate's activation of a fused gate/up product: 0 silu (Qwen3.6), 1 gelu
// with the tanh approximation (Gemma 4).
static inline float gate_activation(float g, uint activation) {
    return activation == 1 ? gelu_tanh(g) : silu(g);
}

// The tile of slot `slot` among tiles of bm rows over the pairs that
// moe_dispatch_sort grouped (offsets [E + 2], the positions of each group in
// its order): group b (expert b; E for the ids past the experts) owns slots
// floor(offsets[b] / bm) + b .. floor(offsets[b + 1] / bm) + b, enough for its
// ceil(count / bm) tiles, so floor(P / bm) + E + 1 slots hold every group
// and a group without pairs costs an empty slot. Finds b by bisection;
// returns false for an empty slot, else the group and the tile's positions
// [start, end) (at most bm of them). Offsets are clamped to P: any contents
// of the table give positions inside order.
static inline bool moe_tile(device const uint* offsets, uint E, uint P, uint bm, uint slot, thread uint& group, thread uint& start,
                            thread uint& end) {
    uint lo = 0, hi = E;
    while (lo < hi) {
        const uint mid = (lo + hi + 1) / 2;
        if (min(offsets[mid], P) / bm + mid <= slot) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    const uint o0 = min(offsets[lo], P), o1 = min(offsets[lo + 1], P);
    const uint first = o0 / bm + lo;
    if (slot < first) {
        return false;
    }
    const ulong s = ulong(o0) + ulong(slot - first) * bm;
    if (s >= o1) {
        return false;
    }
    group = lo;
    start = uint(s);
    end = min(uint(s) + bm, o1);
    return true;
}

// ---- matrix tiles on simdgroup matrices (dense, quantized_matmul, quantized_matmul_ggml, dense_matmul_id, quantized_matmul_id) ----

// One BK-deep step of a simdgroup's TM x TN tiles of 8 x 8 f32 accumulators
// (acc += x W^T): x rows sm0 + 8 i from xs, weight rows (output columns)
// sn0 + 8 j from ws, loaded transposed; rows lda and ldb elements apart, A
// and B the staged element types.
template <short BK, typename A, typename B, short TM, short TN>
static inline void simd_mma_step(thread simdgroup_matrix<float, 8, 8> (&acc)[TM][TN], threadgroup A* xs, short lda,
                                 threadgroup B* ws, short ldb, short sm0, short sn0) {
    for (short kk = 0; kk < BK; kk += 8) {
        simdgroup_matrix<A, 8, 8> a[TM];
        simdgroup_matrix<B, 8, 8> b[TN];
        for (short i = 0; i < TM; ++i) {
            simdgroup_load(a[i], xs + (sm0 + 8 * i) * lda + kk, lda);
        }
        for (short j = 0; j < TN; ++j) {
            simdgroup_load(b[j], ws + (sn0 + 8 * j) * ldb + kk, ldb, ulong2(0, 0), true);
        }
        for (short i = 0; i < TM; ++i) {
            for (short j = 0; j < TN; ++j) {
                simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
            }
        }
    }
}

// Stores a simdgroup's TM x TN accumulator tiles (tile rows sm0 + 8 i,
// columns sn0 + 8 j) as TY into y (rows y_row elements apart), rows below
// rows_m and columns below rows_n: a lane holds row (q & 4) + (l / 2) % 4,
// columns (q & 2) * 2 + (l % 2) * 2 and the next of each 8 x 8 tile (l the
// lane, q = l / 4).
template <typename TY, short TM, short TN>
static inline void simd_mma_store(thread simdgroup_matrix<float, 8, 8> (&acc)[TM][TN], device TY* y, ulong y_row, uint rows_m,
                                  uint rows_n, short sm0, short sn0, uint lane) {
    const short q = short(lane / 4);
    const uint lr = uint((q & 4) + (lane / 2) % 4);
    const uint lc = uint((q & 2) * 2 + (lane % 2) * 2);
    for (short i = 0; i < TM; ++i) {
        const uint row = uint(sm0 + 8 * i) + lr;
        if (row >= rows_m) {
            continue;
        }
        for (short j = 0; j < TN; ++j) {
            const uint col = uint(sn0 + 8 * j) + lc;
            thread const auto& e = acc[i][j].thread_elements();
            if (col < rows_n) {
                y[ulong(row) * y_row + col] = TY(e[0]);
            }
            if (col + 1 < rows_n) {
                y[ulong(row) * y_row + col + 1] = TY(e[1]);
            }
        }
    }
}

// ---- GGUF block formats (quantized_matmul_ggml, quantized_matmul_id_ggml; ts/ops/quantized_matmul_ggml.ts writes each layout down) ----

enum GgmlFormat { GGML_Q4_0 = 2, GGML_Q8_0 = 8, GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14 };

// Values per block and bytes per block.
constexpr uint ggml_qk(int f) { return f == GGML_Q4_0 || f == GGML_Q8_0 ? 32u : 256u; }
constexpr uint ggml_block_bytes(int f) {
    return f == GGML_Q4_0 ? 18u : f == GGML_Q8_0 ? 34u : f == GGML_Q4_K ? 144u : f == GGML_Q5_K ? 176u : 210u;
}
// Bytes of a row of K values (K a multiple of the block).
static inline ulong ggml_row_bytes(int f, ulong K) {
    return K / ggml_qk(f) * ggml_block_bytes(f);
}

// The f16 at p (2 bytes, little-endian), as a float.
static inline float ggml_f16(device const uchar* p) {
    return float(as_type<half>(ushort(ushort(p[0]) | (ushort(p[1]) << 8))));
}

// The 6-bit scale and min of sub-block j (0-7) of a Q4_K / Q5_K super-block
// from its 12 packed bytes s: sub-blocks 0-3 in the low 6 bits of s[j] (scale)
// and s[j + 4] (min); sub-blocks 4-7 in the nibbles of s[j + 4] (scale low,
// min high) with their top 2 bits in the high 2 bits of s[j - 4] (scale) and
// s[j] (min).
static inline void ggml_scale_min_k4(device const uchar* s, uint j, thread float& sc, thread float& m) {
    if (j < 4) {
        sc = float(s[j] & 63u);
        m = float(s[j + 4] & 63u);
    } else {
        sc = float((s[j + 4] & 0xFu) | ((s[j - 4] >> 6) << 4));
        m = float((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

// Values 16c .. 16c + 15 of a row of blocks at `row`, as floats.
template <int F> static inline void ggml_deq16(device const uchar* row, ulong c, thread float (&w)[16]);

// Q4_0, 18 bytes per 32 values: d (f16), qs[16]; value j < 16 is the low
// nibble of qs[j], value j + 16 its high nibble; w = d * (q - 8).
template <> inline void ggml_deq16<GGML_Q4_0>(device const uchar* row, ulong c, thread float (&w)[16]) {
    device const uchar* b = row + (c / 2) * 18;
    const float d = ggml_f16(b);
    const uint shift = uint(c % 2) * 4;
    for (short j = 0; j < 16; ++j) {
        w[j] = d * (float((b[2 + j] >> shift) & 0xFu) - 8.0f);
    }
}

// Q8_0, 34 bytes per 32 values: d (f16), qs[32] int8; w = d * q.
template <> inline void ggml_deq16<GGML_Q8_0>(device const uchar* row, ulong c, thread float (&w)[16]) {
    device const uchar* b = row + (c / 2) * 34;
    const float d = ggml_f16(b);
    device const char* q = (device const char*)(b + 2 + (c % 2) * 16);
    for (short j = 0; j < 16; ++j) {
        w[j] = d * float(q[j]);
    }
}

// Q4_K, 144 bytes per 256 values: d, dmin (f16), scales[12], qs[128].
// Sub-block s (values 32s .. 32s + 31) takes nibble s % 2 of qs[32 (s / 2) ..
// + 32]; w = d * sc_s * q - dmin * m_s.
template <> inline void ggml_deq16<GGML_Q4_K>(device const uchar* row, ulong c, thread float (&w)[16]) {
    device const uchar* b = row + (c / 16) * 144;
    const uint s = uint(c % 16) / 2, h = uint(c % 2);
    float sc, m;
    ggml_scale_min_k4(b + 4, s, sc, m);
    const float a = ggml_f16(b) * sc, o = ggml_f16(b + 2) * m;
    device const uchar* q = b + 16 + 32 * (s / 2) + 16 * h;
    const uint shift = (s % 2) * 4;
    for (short j = 0; j < 16; ++j) {
        w[j] = a * float((q[j] >> shift) & 0xFu) - o;
    }
}

// Q5_K, 176 bytes per 256 values: d, dmin (f16), scales[12], qh[32],
// qs[128]: Q4_K's nibbles with a fifth bit, bit s of qh[l] for value l of
// sub-block s (l < 32).
template <> inline void ggml_deq16<GGML_Q5_K>(device const uchar* row, ulong c, thread float (&w)[16]) {
    device const uchar* b = row + (c / 16) * 176;
    const uint s = uint(c % 16) / 2, h = uint(c % 2);
    float sc, m;
    ggml_scale_min_k4(b + 4, s, sc, m);
    const float a = ggml_f16(b) * sc, o = ggml_f16(b + 2) * m;
    device const uchar* qh = b + 16 + 16 * h;
    device const uchar* q = b + 48 + 32 * (s / 2) + 16 * h;
    const uint shift = (s % 2) * 4;
    for (short j = 0; j < 16; ++j) {
        const uint v = ((q[j] >> shift) & 0xFu) | (((qh[j] >> s) & 1u) << 4);
        w[j] = a * float(v) - o;
    }
}

// Q6_K, 210 bytes per 256 values: ql[128], qh[64], scales[16] int8, d (f16).
// Value v = 128 hh + 32 p + l (l < 32) takes nibble p / 2 of ql[64 hh + 32
// (p % 2) + l] and bits 2p, 2p + 1 of qh[32 hh + l] as its high two bits;
// chunk (16 values) i has scale scales[i]; w = d * scales[i] * (q - 32).
template <> inline void ggml_deq16<GGML_Q6_K>(device const uchar* row, ulong c, thread float (&w)[16]) {
    device const uchar* b = row + (c / 16) * 210;
    const uint i = uint(c % 16), hh = i / 8, p = (i % 8) / 2, l0 = 16 * (i % 2);
    const float a = ggml_f16(b + 208) * float(((device const char*)(b + 192))[i]);
    device const uchar* ql = b + 64 * hh + 32 * (p % 2) + l0;
    device const uchar* qh = b + 128 + 32 * hh + l0;
    const uint lo = (p / 2) * 4, hi = 2 * p;
    for (short j = 0; j < 16; ++j) {
        const int v = int(((ql[j] >> lo) & 0xFu) | (((qh[j] >> hi) & 3u) << 4)) - 32;
        w[j] = a * float(v);
    }
}


// The dot products of weight rows row0 .. row0 + R - 1 (row0 < N, rows past
// N clamped to N - 1; w N rows of K values in blocks of F) with the K floats
// at xr, by one simdgroup: lane takes chunks lane, lane + 32, ... of every
// row, f32 products of the f32 dequantized weight; sw[r] is row r's
// simd_sum, in every lane. With GU the same rows of a second weight u (the
// up projection of a fused gate/up product) meet the same x values in the
// same pass, into su. With SW the x values are silu(xr[i]) * xu[i] (a
// SwiGLU's gate and up rows, the down projection's input made on the way).
template <int F, short R, bool GU, bool SW>
static inline void ggml_mv_sums(device const uchar* w, device const uchar* u, device const float* xr, device const float* xu, uint N, uint K,
                                uint row0, uint lane, thread float (&sw)[R], thread float (&su)[R]) {
    const ulong rb = ggml_row_bytes(F, K);
    for (short r = 0; r < R; ++r) {
        sw[r] = 0.0f;
        su[r] = 0.0f;
    }
    for (uint c = lane; c < K / 16; c += 32) {
        float xv[16];
        for (short j = 0; j < 16; ++j) {
            xv[j] = SW ? silu(xr[c * 16 + j]) * xu[c * 16 + j] : xr[c * 16 + j];
        }
        for (short r = 0; r < R; ++r) {
            const ulong ro = ulong(min(row0 + uint(r), N - 1)) * rb;
            float wv[16];
            ggml_deq16<F>(w + ro, c, wv);
            float d = 0.0f;
            for (short j = 0; j < 16; ++j) {
                d += wv[j] * xv[j];
            }
            sw[r] += d;
            if (GU) {
                ggml_deq16<F>(u + ro, c, wv);
                float e = 0.0f;
                for (short j = 0; j < 16; ++j) {
                    e += wv[j] * xv[j];
                }
                su[r] += e;
            }
        }
    }
    for (short r = 0; r < R; ++r) {
        sw[r] = simd_sum(sw[r]);
        if (GU) {
            su[r] = simd_sum(su[r]);
        }
    }
}

// The vector product of weight rows row0 .. row0 + R - 1 (those below N)
// with the K floats at xr (ggml_mv_sums); lane 0 writes yr[row0 + r].
template <int F, short R>
static inline void ggml_mv_rows(device const uchar* w, device const float* xr, device float* yr, uint N, uint K, uint row0, uint lane) {
    if (row0 >= N) {
        return;
    }
    float s[R], unused[R];
    ggml_mv_sums<F, R, false, false>(w, w, xr, xr, N, K, row0, lane, s, unused);
    for (short r = 0; r < R; ++r) {
        if (lane == 0 && row0 + uint(r) < N) {
            yr[row0 + r] = s[r];
        }
    }
}

// The fused gate/up form of ggml_mv_rows: yr[row0 + r] = act(x . g[row0 +
// r]) * (x . u[row0 + r]), g and u of the same shape and blocks,
// activation as gate_activation's.
template <int F, short R>
static inline void ggml_mv_rows_gate_up(device const uchar* g, device const uchar* u, device const float* xr, device float* yr, uint N,
                                        uint K, uint row0, uint lane, uint activation) {
    if (row0 >= N) {
        return;
    }
    float sg[R], su[R];
    ggml_mv_sums<F, R, true, false>(g, u, xr, xr, N, K, row0, lane, sg, su);
    for (short r = 0; r < R; ++r) {
        if (lane == 0 && row0 + uint(r) < N) {
            yr[row0 + r] = gate_activation(sg[r], activation) * su[r];
        }
    }
}

// ggml_mv_rows of x = silu(g) * u (g and u K floats each): the down
// projection of a SwiGLU over its gate and up rows.
template <int F, short R>
static inline void ggml_mv_rows_swiglu(device const uchar* w, device const float* g, device const float* u, device float* yr, uint N, uint K,
                                       uint row0, uint lane) {
    if (row0 >= N) {
        return;
    }
    float s[R], unused[R];
    ggml_mv_sums<F, R, false, true>(w, w, g, u, N, K, row0, lane, s, unused);
    for (short r = 0; r < R; ++r) {
        if (lane == 0 && row0 + uint(r) < N) {
            yr[row0 + r] = s[r];
        }
    }
}
