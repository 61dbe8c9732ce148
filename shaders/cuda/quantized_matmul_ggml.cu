// GGUF block formats (CUDA), entry names and bindings as
// shaders/quantized_matmul_ggml.metal: y = x W^T with W [N, K] in GGML
// blocks (ts/ops/quantized_matmul_ggml.ts writes each layout down),
// whole-tensor dequantization and embedding rows. Grids are one-dimensional;
// the launches are the op's (ts/ops/quantized_matmul_ggml.ts, ggmlCudaLaunch).
//
// The decoders and the two engines live in shaders/cuda/common.cuh (the
// per-expert family quantized_matmul_id_ggml runs them too); this file holds
// the entries. One decoder per format reads the bytes of a chunk of 32 values of a row
// (raw_load: the block's scale words decoded into a and b, the quant bytes
// kept as loaded) and unpacks either half of it (unpack16): 16 values q as
// bytes, w = a * q + b with a, b the half's scale and offset in f32. From
// there every kernel finishes alike: floats (fmaf(a, q, b), one rounding),
// or packed f16 pairs for the tensor cores (pairs16): the byte q (0-255,
// Q8_0's with its offset) and the exponent byte of 1024 make the f16
// 1024 + q in one byte_perm, 1024 is taken off exactly and one packed fma
// applies a and b (each rounded to f16, the product rounded once). f16, not
// bf16: the weight keeps 11 bits as Metal's matrix stage does (ggml_t in
// common.cuh says what that bought).
//
// Engines:
//   vector (kernel_mul_mv_<t>_f32): 128 threads (4 warps) over 16 weight
//     rows. A warp takes windows of 256 values of k (one K super-block, 8
//     Q4_0 / Q8_0 blocks): warp w windows w, w + 4, ...; it copies the 16
//     rows' bytes of a window into its own shared stage by cp.async in
//     16-byte units (from the row's address rounded down to 16 bytes), the
//     next two windows' copies in flight while it computes one. Lane (g, t) =
//     (lane / 4, lane % 4) decodes 64 values (two chunks) of rows g and g + 8
//     from the stage as f16 pairs (Q4_K / Q5_K from a 16-byte aligned
//     weight: its bytes of a row's super-block in 16-byte loads, kq_load; Q4_0
//     and Q8_0 from word-aligned rows in word loads, qs_raw; Q6_K in word loads
//     realigned by byte_perm, q6_raw); x (tokens as the mma's n = 8, up to 8 at
//     a time) is read as float4 and rounded to f16; mma.sync m16n8k16 with
//     f32 accumulators. Any order of k works where A and B agree: lane t's
//     four k positions of each mma are values 4j .. 4j + 3 of its own 16.
//     The warps' sums meet in shared memory.
//   group-column (one token of Q4_K, Q8_0 and Q6_K, the vector entries;
//     gmv_gc_q4k, gmv_gc_q8_0, gmv_gc_q6k in common.cuh): the codes as
//     16-bit numbers with the format's scale groups as the mma's 8 columns,
//     on the vector engine's grid (see the entries below for when each runs).
//   int8 (one token of Q8_0 and Q6_K where the op names the _i8 entries,
//     ggmlI8Takes; gdq below over common.cuh's i8_mv): x rounded to int8 a
//     chunk of 32 values into shared memory, a warp a weight row whose codes
//     it reads straight from memory (4 items a lane in flight) and multiplies
//     by dp4a, a persistent grid of 256-thread blocks; Q6_K's _i8g (many
//     rows) a super-block a group of 8 lanes, 4 rows a warp (GdqQ6Group).
//   vector, 2 tokens and more (kernel_mul_mv_<t>_f32_xs where the op names
//     them; gmv_xs in common.cuh): the vector engine's decode and mma on 64
//     rows a block, each window's x for 8 tokens staged once a block as f16.
//   matrix (kernel_mul_mm_<t>_f32): the tile shapes of dense.cu
//     (denseMmCudaTile: 128 x 256 by 8 warps or 64 x 128 by 4), 32-wide k
//     stages in two shared buffers: while the warps multiply one, each
//     thread holds the next in registers (8 values of x rounded to f16 per
//     piece, and the bytes of its weight row's chunk: thread i owns row
//     n0 + i) and parks it, decoded to f16, after the step's mmas; ldmatrix,
//     mma.sync with f32 accumulators.
//   dequantize and embedding: a thread per chunk of 32 values, the grid
//     striding over them; values in f32, rounded once to the output type.

namespace {

// A block of the matrix form: the tile shape by block size (the op's
// denseMmCudaTile: 256 threads 128 x 256, 128 threads 64 x 128). Unsplit
// (kernel_mul_mm_<t>_f32), block i takes tile i and the whole k into y.
// Split k (kernel_mul_mm_<t>_f32_splitk), block i takes tile i / S and
// slice s = i % S of k, chunks of 32 values s C .. min(s C + C, K / 32) - 1
// (the op plans no empty slice); it writes the slice's partial tile to
// partials + s M N, then split_reduce sums the tile's S partials into y.
template <int F, bool SPLIT>
__device__ __forceinline__ void gmm(const GgmlMatmulMmParams* p, const unsigned char* w, const float* x, float* y, float* partials,
                                    u32* words, const GgmlMatmulSplitParams* sp) {
    const u32 K = u32(p->ne00), N = u32(p->ne0), M = u32(p->ne1);
    const u32 S = SPLIT ? sp->splits : 1u, C = SPLIT ? sp->chunks : K / 32u;
    const u32 tile = SPLIT ? blockIdx.x / S : blockIdx.x, s = SPLIT ? blockIdx.x % S : 0u;
    const u32 kt0 = s * C, kts = SPLIT ? min(C, K / 32u - kt0) : C;
    float* out = SPLIT ? partials + u64(s) * M * N : y;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    u32 b, m0, n0;
    auto rows = [&](u32 r, u32& row) {
        row = m0 + r;
        return row < M;
    };
    if (blockDim.x == 256) {
        tile_of<128, 256>(M, N, b, m0, n0, tile);
        gmm_tile<F, 128, 256, 2, 4>(smem_raw, w, x, out, N, kt0, kts, p->nb01, p->nb11 / 4u, u64(N), n0, rows, rows);
        if constexpr (SPLIT) split_reduce<128, 256>(partials, words + tile, y, u64(N), M, N, m0, n0, S);
    } else {
        tile_of<64, 128>(M, N, b, m0, n0, tile);
        gmm_tile<F, 64, 128, 2, 2>(smem_raw, w, x, out, N, kt0, kts, p->nb01, p->nb11 / 4u, u64(N), n0, rows, rows);
        if constexpr (SPLIT) split_reduce<64, 128>(partials, words + tile, y, u64(N), M, N, m0, n0, S);
    }
}

// ---- dequantization and embedding rows ----

// 32 floats rounded to O and stored at p (16-byte vectors where p is aligned).
template <typename O>
__device__ __forceinline__ void store32(O* p, const float (&v)[32]) {
    if (aligned16(p)) {
        store_elems<O, 32>(p, v);
    } else {
#pragma unroll
        for (int i = 0; i < 32; ++i) p[i] = from_f<O>(v[i]);
    }
}

// Chunks of 32 values, the grid striding over them: chunk i of `rows` rows
// of `per_row` chunks reads row map(r) of src (rows rb bytes apart) and
// writes dst + (r * per_row + c) * 32, times scale.
template <int F, typename O, typename Map>
__device__ __forceinline__ void deq_rows(const unsigned char* src, O* dst, u64 rb, u32 rows, u32 per_row, float scale, Map map) {
    const u64 total = u64(rows) * per_row, step = u64(gridDim.x) * blockDim.x;
    for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
        const u32 r = u32(i / per_row), c = u32(i % per_row);
        GgmlRaw raw;
        raw_load<F>(src + u64(map(r)) * rb, c, raw);
        float v[32];
#pragma unroll
        for (u32 h = 0; h < 2; ++h) {
            float w16[16];
            deq16<F>(raw, h, w16);
#pragma unroll
            for (int j = 0; j < 16; ++j) v[16 * h + j] = w16[j] * scale;
        }
        store32(dst + i * 32u, v);
    }
}

template <int F, typename O>
__device__ __forceinline__ void dequantize(const unsigned char* src, O* dst, const GgmlDequantizeParams* p) {
    // The tensor as one row of n_chunks / 2 chunks of 32 (a block holds an even number of 16-value chunks).
    deq_rows<F, O>(src, dst, 0u, 1u, p->n_chunks / 2u, 1.0f, [](u32) { return 0u; });
}

template <int F, typename O>
__device__ __forceinline__ void embedding(const unsigned char* table, const u32* ids, O* out, const GgmlEmbeddingParams* p) {
    const u32 last = p->vocab_size - 1u;
    deq_rows<F, O>(table, out, ggml_row_bytes<F>(p->hidden_size), p->n_tokens, p->hidden_size / 32u, p->scale,
                   [&](u32 r) { return min(ids[r], last); });
}

// ---- the int8 vector engine (kernel_mul_mv_<t>_f32_vdq*: variants for the harness) ----
//
// The vector engine (common.cuh's gmv) spends about 560 warp instructions a window of
// 16 rows x 256 values (Q4_K: 2304 bytes, ~4 bytes a warp instruction): the
// cp.async copy loop, the stage reads, 3 instructions an f16 pair (byte_perm,
// two packed fmas) and x read as float4 and rounded by every lane group (8
// times over at one token). At 0.85 of an H100's copy rate an SM must take
// ~10 bytes a clock, i.e. ~2.5 of its 4 warp instructions a clock: issue-bound.
// This engine, llama.cpp's mmvq in shape (common.cuh's i8_mv: x quantized
// once a block to int8 per chunk of 32, dp4a, a persistent grid of units of
// rows), takes an estimated ~12 bytes a warp instruction (Q4_K, ~95 a lane
// and item): a lane takes whole items of a row (Q4_K / Q5_K: a pair of
// sub-blocks, 64 values; Q4_0 / Q8_0 / Q6_K: 32 values), loads their bytes
// straight from global memory (16-byte loads where the format allows, else
// words realigned by byte_perm) and extracts the codes with and / shift,
// no conversion to floats; each sub-block's dot product is scaled once in
// f32 (the K-quants' mins against the chunk's f32 sum of x). Floors and
// predictions at the bench shapes: bench/notes/qmv-variants-2026-11-26.md.
// The products differ from the f16 engine's by x's int8 rounding (up to
// max|x| / 254 a value where the entry rounds x to f16).

// 16 bytes at p: one load where 16-byte aligned (vec), else four words.
__device__ __forceinline__ uint4 gdq_ld16(const unsigned char* p, bool vec) {
    if (vec) return __ldg(reinterpret_cast<const uint4*>(p));
    const u32* w = reinterpret_cast<const u32*>(p);
    return make_uint4(__ldg(w), __ldg(w + 1), __ldg(w + 2), __ldg(w + 3));
}
// N words from p (2-byte aligned), realigned from the N + 1 words at or below
// it (Q6_K's ql and qh: the extra word lies inside the super-block).
template <int N>
__device__ __forceinline__ void gdq_words(const unsigned char* p, u32 (&out)[N]) {
    const u32* v = reinterpret_cast<const u32*>(reinterpret_cast<u64>(p) & ~u64(3));
    const u32 sel = (reinterpret_cast<u64>(p) & 2u) ? 0x5432u : 0x3210u;
    u32 wd[N + 1];
#pragma unroll
    for (int i = 0; i <= N; ++i) wd[i] = __ldg(v + i);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = __byte_perm(wd[i], wd[i + 1], sel);
}

// One item's bytes as loaded (before any decoding).
template <int F> struct GdqItem;
// Q4_K: pair j of super-block sb: the header and qs[32 j .. + 32] (sub-blocks 2j low nibbles, 2j + 1 high).
template <> struct GdqItem<GGML_Q4_K> {
    static constexpr u32 VALUES = 64;
    uint4 hd, q[2];
    __device__ __forceinline__ void load(const unsigned char* row, u32 it, bool vec) {
        const unsigned char* b = row + (it / 4u) * 144u;
        hd = gdq_ld16(b, vec);
        q[0] = gdq_ld16(b + 16u + 32u * (it % 4u), vec);
        q[1] = gdq_ld16(b + 32u + 32u * (it % 4u), vec);
    }
};
// Q5_K: the same with qs at 48 and qh[32] at 16 (bit s of qh[l]: value l of sub-block s's fifth bit).
template <> struct GdqItem<GGML_Q5_K> {
    static constexpr u32 VALUES = 64;
    uint4 hd, q[2], h[2];
    __device__ __forceinline__ void load(const unsigned char* row, u32 it, bool vec) {
        const unsigned char* b = row + (it / 4u) * 176u;
        hd = gdq_ld16(b, vec);
        h[0] = gdq_ld16(b + 16u, vec);
        h[1] = gdq_ld16(b + 32u, vec);
        q[0] = gdq_ld16(b + 48u + 32u * (it % 4u), vec);
        q[1] = gdq_ld16(b + 64u + 32u * (it % 4u), vec);
    }
};
// Q4_0 / Q8_0: block it (d, then 16 / 32 quant bytes).
// The words overlapping the block (5 / 9 either way: 18 / 34 bytes from a
// 2-byte aligned start), and whether it starts 2 bytes into the first.
template <u32 BYTES> struct GdqBlock32 {
    static constexpr u32 VALUES = 32, NW = (BYTES + 2u + 3u) / 4u;
    u32 w[NW], odd;
    __device__ __forceinline__ void load(const unsigned char* row, u32 it, bool) {
        const unsigned char* p = row + BYTES * it;
        const u32* v = reinterpret_cast<const u32*>(reinterpret_cast<u64>(p) & ~u64(3));
        odd = u32(reinterpret_cast<u64>(p) & 2u);
#pragma unroll
        for (u32 i = 0; i < NW; ++i) w[i] = __ldg(v + i);
    }
    // d's bits and quant word j (the block's bytes 2 + 4j .. 5 + 4j).
    __device__ __forceinline__ u32 d_bits() const { return odd ? w[0] >> 16 : w[0] & 0xFFFFu; }
    __device__ __forceinline__ u32 quant(u32 j) const { return __byte_perm(w[j], w[j + 1], odd ? 0x7654u : 0x5432u); }
};
template <> struct GdqItem<GGML_Q4_0> : GdqBlock32<18u> {};
template <> struct GdqItem<GGML_Q8_0> : GdqBlock32<34u> {};
// Q6_K: chunk cc = it % 8 (= 4 hh + p) of super-block it / 8: its ql and qh words, its two scales, d.
template <> struct GdqItem<GGML_Q6_K> {
    static constexpr u32 VALUES = 32;
    u32 ql[8], qh[8], sc, d;
    __device__ __forceinline__ void load(const unsigned char* row, u32 it, bool) {
        const unsigned char* b = row + (it / 8u) * 210u;
        const u32 cc = it % 8u, hh = cc / 4u, p = cc % 4u;
        gdq_words<8>(b + 64u * hh + 32u * (p % 2u), ql);
        gdq_words<8>(b + 128u + 32u * hh, qh);
        sc = __ldg(reinterpret_cast<const unsigned short*>(b + 192u + 2u * cc));
        d = __ldg(reinterpret_cast<const unsigned short*>(b + 208u));
    }
};

__device__ __forceinline__ float gdq_h2f(u32 bits) { return __half2float(__ushort_as_half(static_cast<unsigned short>(bits))); }

// c - 32 x the sum of x word xw's four signed bytes: with it as the
// addend, dp4a(q, xw, .) of Q6_K codes q in 0 .. 63 (positive as signed
// bytes) adds the dot product of q - 32.
__device__ __forceinline__ int q6_bias(int xw, int c) { return __dp4a(int(0xE0E0E0E0u), xw, c); }

// Scale and min of sub-blocks s and s + 1 (s even) of a K-quant header (kq_raw's decoding).
__device__ __forceinline__ void gdq_k4_scales(const uint4& hd, u32 s, float (&a)[2], float (&b)[2]) {
    const float d = gdq_h2f(hd.x & 0xFFFFu), dmin = gdq_h2f(hd.x >> 16);
#pragma unroll
    for (u32 e = 0; e < 2; ++e) {
        const u32 ss = s + e, sh = 8u * (ss & 3u);
        const u32 lo = (hd.y >> sh) & 0xFFu, mid = (hd.z >> sh) & 0xFFu, hi = (hd.w >> sh) & 0xFFu;
        const u32 sc = ss < 4 ? lo & 63u : (hi & 0xFu) | ((lo >> 6) << 4);
        const u32 m = ss < 4 ? mid & 63u : (hi >> 4) | ((mid >> 6) << 4);
        a[e] = d * float(sc);
        b[e] = dmin * float(m);
    }
}

// Item it's dot products with the M tokens' x, added to acc[0 .. M - 1].
// xq: token 0's words (K / 4 a token), xds: its chunks' {d, sum} (K / 32 a token).
template <int F>
__device__ __forceinline__ void gdq_dot(const GdqItem<F>& r, u32 it, const u32* xq, const float2* xds, u32 M, u32 K, float (&acc)[8]) {
    constexpr u32 V = GdqItem<F>::VALUES;
    const u32 k0 = it * V;  // the item's first value
    if constexpr (F == GGML_Q4_K || F == GGML_Q5_K) {
        float a[2], b[2];
        gdq_k4_scales(r.hd, 2u * (it % 4u), a, b);
        u32 ql[8], qhi[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint4& v = r.q[i / 4];
            const u32 w = (i % 4 == 0) ? v.x : (i % 4 == 1) ? v.y : (i % 4 == 2) ? v.z : v.w;
            ql[i] = w & 0x0F0F0F0Fu;
            qhi[i] = (w >> 4) & 0x0F0F0F0Fu;
            if constexpr (F == GGML_Q5_K) {
                const uint4& hv = r.h[i / 4];
                const u32 h = (i % 4 == 0) ? hv.x : (i % 4 == 1) ? hv.y : (i % 4 == 2) ? hv.z : hv.w;
                const u32 s = 2u * (it % 4u);
                ql[i] |= ((h >> s) & 0x01010101u) << 4;
                qhi[i] |= ((h >> (s + 1u)) & 0x01010101u) << 4;
            }
        }
        i8_tokens(M, [&](u32 i) {
            const uint4* xv = reinterpret_cast<const uint4*>(xq + u64(i) * (K / 4u) + k0 / 4u);
            const uint4 x0 = xv[0], x1 = xv[1], x2 = xv[2], x3 = xv[3];
            const u32 xl[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
            const u32 xh[8] = {x2.x, x2.y, x2.z, x2.w, x3.x, x3.y, x3.z, x3.w};
            int sl = 0, sh = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                sl = __dp4a(int(ql[j]), int(xl[j]), sl);
                sh = __dp4a(int(qhi[j]), int(xh[j]), sh);
            }
            const float2 dl = xds[u64(i) * (K / 32u) + k0 / 32u], dh = xds[u64(i) * (K / 32u) + k0 / 32u + 1u];
            acc[i] += (a[0] * dl.x * float(sl) - b[0] * dl.y) + (a[1] * dh.x * float(sh) - b[1] * dh.y);
        });
    } else if constexpr (F == GGML_Q4_0 || F == GGML_Q8_0) {
        const float d = gdq_h2f(r.d_bits());
        constexpr int NQ = F == GGML_Q8_0 ? 8 : 4;
        u32 q[8];
#pragma unroll
        for (int j = 0; j < NQ; ++j) {
            const u32 w = r.quant(j);  // quant bytes 4j .. 4j + 3
            if constexpr (F == GGML_Q8_0) {
                q[j] = w;
            } else {
                q[j] = w & 0x0F0F0F0Fu;
                q[j + 4] = (w >> 4) & 0x0F0F0F0Fu;
            }
        }
        i8_tokens(M, [&](u32 i) {
            const uint4* xv = reinterpret_cast<const uint4*>(xq + u64(i) * (K / 4u) + k0 / 4u);
            const uint4 x0 = xv[0], x1 = xv[1];
            const u32 xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
            int s = 0;
#pragma unroll
            for (int j = 0; j < 8; ++j) s = __dp4a(int(q[j]), int(xw[j]), s);
            const float2 dx = xds[u64(i) * (K / 32u) + k0 / 32u];
            if constexpr (F == GGML_Q8_0) acc[i] += d * dx.x * float(s);
            else acc[i] += d * (dx.x * float(s) - 8.0f * dx.y);
        });
    } else {
        // Q6_K: the codes q in 0 .. 63 (positive as signed bytes), the -32 in
        // the dp4a's addend (q6_bias).
        const u32 cc = it % 8u, p = cc % 4u;
        const float d = gdq_h2f(r.d);
        const float s0 = d * float(static_cast<signed char>(r.sc & 0xFFu)), s1 = d * float(static_cast<signed char>(r.sc >> 8));
        u32 q[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) q[j] = ((r.ql[j] >> (4u * (p / 2u))) & 0x0F0F0F0Fu) | (((r.qh[j] >> (2u * p)) & 0x03030303u) << 4);
        i8_tokens(M, [&](u32 i) {
            const uint4* xv = reinterpret_cast<const uint4*>(xq + u64(i) * (K / 4u) + k0 / 4u);
            const uint4 x0 = xv[0], x1 = xv[1];
            const int xw[8] = {int(x0.x), int(x0.y), int(x0.z), int(x0.w), int(x1.x), int(x1.y), int(x1.z), int(x1.w)};
            int a = 0, b = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                a = __dp4a(int(q[j]), xw[j], q6_bias(xw[j], a));
                b = __dp4a(int(q[j + 4]), xw[j + 4], q6_bias(xw[j + 4], b));
            }
            const float2 dx = xds[u64(i) * (K / 32u) + k0 / 32u];
            acc[i] += dx.x * (s0 * float(a) + s1 * float(b));
        });
    }
}

// The engine's item (common.cuh, i8_mv): a row of blocks rb bytes apart
// from w, 16-byte loads where w and rb allow (vec).
struct GdqSrc {
    const unsigned char* w;
    u64 rb;
    bool vec;
};
template <int F> struct GdqUnit : GdqItem<F> {
    static constexpr bool PAIRED = false;
    static constexpr u32 GROUP = 1;
    __device__ __forceinline__ void load(const GdqSrc& s, u32 row, u32 it) { GdqItem<F>::load(s.w + u64(row) * s.rb, it, s.vec); }
    __device__ __forceinline__ void dot(u32 it, const u32* xq, const float2* xds, u32 M, u32 K, float (&acc)[8]) const {
        gdq_dot<F>(*this, it, xq, xds, M, K, acc);
    }
};

// Q6_K's super-block to a group of 8 lanes (i8_mv's GROUP, 4 rows a warp):
// item 8 sb + j is lane j's share of super-block sb. It loads the block's
// 4-byte aligned words 8 i + j (i < 6, and i = 6 for the scales: lanes j <
// 4, or < 5 where the block starts 2 bytes into a word; never past its d),
// so each warp instruction reads 32 contiguous bytes of each of its 4 rows,
// and d. dot realigns word 8 i + j with word 8 i + j + 1 (lane j + 1's word
// i, or lane 0's word i + 1 for j = 7: one shuffle a word), then lane j
// holds ql bytes 4j .. 4j + 3 and 32 + 4j .. of each half (the words i = 0,
// 1 and 2, 3) and qh bytes 4j .. of each half (i = 4, 5): the codes of
// values 128 hh + 32 m + 4 j + e (e < 4, m < 4), each 4 of them one scale
// group (sc[8 hh + j / 4 + 2 m], from the group's lanes 0-3) and one chunk of
// x (4 hh + m), so one dp4a and one scale each. A lane's loads and their
// lines: bench/notes/gguf-q6-group-2026-11-28.md.
struct GdqQ6Group {
    static constexpr u32 VALUES = 32;
    static constexpr bool PAIRED = false;
    static constexpr u32 GROUP = 8;
    u32 w[7], d, odd;
    __device__ __forceinline__ void load(const GdqSrc& s, u32 row, u32 it) {
        const unsigned char* b = s.w + u64(row) * s.rb + u64(it / 8u) * 210u;
        const u32 j = it % 8u;
        odd = u32(reinterpret_cast<u64>(b) & 2u);
        const u32* v = reinterpret_cast<const u32*>(reinterpret_cast<u64>(b) & ~u64(3));
#pragma unroll
        for (u32 i = 0; i < 6; ++i) w[i] = __ldg(v + 8u * i + j);
        w[6] = j < (odd ? 5u : 4u) ? __ldg(v + 48u + j) : 0u;
        d = __ldg(reinterpret_cast<const unsigned short*>(b + 208u));
    }
    // Every lane of the warp calls it (i8_mv's GROUP contract): the shuffles take the whole warp.
    __device__ __forceinline__ void dot(u32 it, const u32* xq, const float2* xds, u32 M, u32 K, float (&acc)[8]) const {
        const u32 lane = threadIdx.x & 31u, j = lane & 7u, g0 = lane & ~7u;
        const u32 sel = odd ? 0x5432u : 0x3210u;
        u32 c[7];
#pragma unroll
        for (u32 i = 0; i < 7; ++i) {
            const u32 send = (j == 0u && i < 6u) ? w[i + 1] : w[i];
            c[i] = __byte_perm(w[i], __shfl_sync(0xffffffffu, send, g0 | ((j + 1u) & 7u)), sel);
        }
        u32 sw[4];
#pragma unroll
        for (u32 q = 0; q < 4; ++q) sw[q] = __shfl_sync(0xffffffffu, c[6], g0 | q);
        // The 8 words of codes (q in 0 .. 63, so positive as signed bytes) and
        // their int8 scales, word 4 hh + m (values 128 hh + 32 m + 4 j ..:
        // chunk 8 sb + 4 hh + m of x). A word's dot product is dp4a(q, x)
        // less 32 x the sum of its four x, the dp4a's addend
        // (q6_bias); times the scale in integers (|.| < 2^23, exact as a
        // float), then by the chunk's d_x; d once a super-block.
        u32 q[8];
        int sc[8];
        const u32 sel_sc[2] = {sext_sel(j / 4u), sext_sel(j / 4u + 2u)};  // word m's scale: byte j / 4 + 2 (m % 2)
#pragma unroll
        for (u32 hh = 0; hh < 2; ++hh) {
            const u32 A = c[2 * hh], B = c[2 * hh + 1], H = c[4 + hh];
            q[4 * hh] = (A & 0x0F0F0F0Fu) | ((H << 4) & 0x30303030u);
            q[4 * hh + 1] = (B & 0x0F0F0F0Fu) | ((H << 2) & 0x30303030u);
            q[4 * hh + 2] = ((A >> 4) & 0x0F0F0F0Fu) | (H & 0x30303030u);
            q[4 * hh + 3] = ((B >> 4) & 0x0F0F0F0Fu) | ((H >> 2) & 0x30303030u);
#pragma unroll
            for (u32 m = 0; m < 4; ++m) sc[4 * hh + m] = sext_byte(sw[2 * hh + m / 2], sel_sc[m % 2u]);
        }
        const float dd = gdq_h2f(d);
        const u32 c0 = 8u * (it / 8u);  // the super-block's first chunk of x
        i8_tokens(M, [&](u32 i) {
            const u32* xi = xq + u64(i) * (K / 4u) + 8u * c0 + j;
            // The super-block's 8 chunks' {d, sum}: 64 contiguous bytes (c0 is a multiple of 8).
            const float4* d4 = reinterpret_cast<const float4*>(xds + u64(i) * (K / 32u) + c0);
            const float4 e0 = d4[0], e1 = d4[1], e2 = d4[2], e3 = d4[3];
            const float dx[8] = {e0.x, e0.z, e1.x, e1.z, e2.x, e2.z, e3.x, e3.z};
            float s = 0.0f;
#pragma unroll
            for (u32 w = 0; w < 8; ++w) {
                const int xw = int(xi[8u * w]);
                s += dx[w] * float(__dp4a(int(q[w]), xw, q6_bias(xw, 0)) * sc[w]);
            }
            acc[i] += dd * s;
        });
    }
};

// y = x W^T for M <= 8 tokens over Item's loads: R rows a group of S warps, U items a lane in flight.
template <typename Item, int F, u32 R, u32 S, u32 U>
__device__ __forceinline__ void gdq_items(const unsigned char* w, const float* x, float* y, u32 M, u32 N, u32 K, u64 x_row, u64 y_row) {
    const u64 rb = ggml_row_bytes<F>(K);
    const GdqSrc src{w, rb, aligned16(w) && rb % 16u == 0};
    extern __shared__ __align__(16) unsigned char smem_raw[];
    i8_mv<Item, R, S, U>(src, x, y, M, N, K, x_row, y_row, smem_raw);
}
// A lane an item of a row (GdqUnit).
template <int F, u32 R, u32 S, u32 U>
__device__ __forceinline__ void gdq(const unsigned char* w, const float* x, float* y, u32 M, u32 N, u32 K, u64 x_row, u64 y_row) {
    gdq_items<GdqUnit<F>, F, R, S, U>(w, x, y, M, N, K, x_row, y_row);
}

// ---- Q4_K at one token: the group-column engine ----

// kernel_mul_mv_q4_K_f32 runs the prelude's gmv_gc_q4k (shaders/cuda/common.cuh)
// for one token (gc_q4k_takes; W = 4, so its grid is the vector engine's),
// and at W = 2 and 4 the harness variants kernel_mul_mv_q4_K_f32_vgc<W>.
// The entry's choice, made alike by ts/ops/quantized_matmul_ggml.ts
// (ggmlGcTakes, ggmlMatmulCudaLaunch's shared memory).
__device__ __forceinline__ bool gc_q4k_takes(const void* w, const float* x, u32 M, u32 K) {
    return M == 1u && gc_q4k_shared(K) <= GC_MAX_SHARED && aligned16(w) && aligned16(x);
}

// kernel_mul_mv_q8_0_f32 and kernel_mul_mv_q6_K_f32 run the prelude's
// gmv_gc_q8_0 / gmv_gc_q6k for one token where x's copy fits
// (gc_q8_0_takes, gc_q6k_takes; W = 4, the vector engine's grid), the choice
// made alike by ggmlGcTakes and ggmlMatmulCudaLaunch's shared memory.

}  // namespace

#if MLXN_CUDA_PART_IS(0)
// ---- kernel_mul_mv_<t>_f32 ----

// buffer(0) weight (N rows of blocks), (1) x [M, K] f32, (2) y [M, N] f32, (3) GgmlMatvecParams.
// Bounds of 4 blocks an SM (128 registers): the decoders' unrolled loads
// without spills (97-128 registers by format); shared memory allows 3 (Q8_0)
// to 6 (Q4_0, Q4_K) blocks.
#define GGML_MV_ENTRY(NAME, F)                                                                                        \
    extern "C" __global__ void __launch_bounds__(128, 4) NAME(const unsigned char* src0, const float* src1, float* dst,  \
                                                           const GgmlMatvecParams* p) {                              \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                                   \
        if (F == GGML_Q4_K && gc_q4k_takes(src0, src1, u32(p->ne1), u32(p->ne00))) {                                \
            gmv_gc_q4k<4>(src0, src1, dst, u32(p->ne01), u32(p->ne00), blockIdx.x);                                             \
            return;                                                                                                  \
        }                                                                                                            \
        if (F == GGML_Q8_0 && p->ne1 == 1 && gc_q8_0_takes(u32(p->ne00))) {                                           \
            gmv_gc_q8_0<4>(smem_raw, src0, src1, dst, u32(p->ne01), u32(p->ne00), blockIdx.x);                                   \
            return;                                                                                                  \
        }                                                                                                            \
        if (F == GGML_Q6_K && p->ne1 == 1 && gc_q6k_takes(u32(p->ne00))) {                                            \
            gmv_gc_q6k<4>(smem_raw, src0, src1, dst, u32(p->ne01), u32(p->ne00), blockIdx.x);                                    \
            return;                                                                                                  \
        }                                                                                                            \
        gmv<F>(smem_raw, src0, src1, dst, u32(p->ne1), u32(p->ne01), u32(p->ne00), p->ne10, p->ne0, blockIdx.x * 16u); \
    }
GGML_MV_ENTRY(kernel_mul_mv_q4_0_f32, GGML_Q4_0)
GGML_MV_ENTRY(kernel_mul_mv_q8_0_f32, GGML_Q8_0)
GGML_MV_ENTRY(kernel_mul_mv_q4_K_f32, GGML_Q4_K)
GGML_MV_ENTRY(kernel_mul_mv_q5_K_f32, GGML_Q5_K)
GGML_MV_ENTRY(kernel_mul_mv_q6_K_f32, GGML_Q6_K)
#endif

// The int8 engine (gdq<F, R, S, U>) as an entry of the vector form's
// bindings. Grid: any (a block walks units of 8 / S x R rows; two blocks an
// SM cover the rows without a wave tail), 256 threads, dynamic shared memory
// M x K + M x K / 32 x 8 + 2 x 8 x R x 8 x 4 bytes.
#define GGML_MV_DQ_ENTRY(NAME, F, R, S, U)                                                                          \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME(const unsigned char* src0, const float* src1, float* dst, \
                                                           const GgmlMatvecParams* p) {                              \
        gdq<F, R, S, U>(src0, src1, dst, u32(p->ne1), u32(p->ne01), u32(p->ne00), p->ne10, p->ne0);                \
    }
// Q6_K with a super-block a group of 8 lanes (GdqQ6Group): 4 rows a warp, U super-blocks a lane in flight.
#define GGML_MV_DQ6G_ENTRY(NAME, U)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME(const unsigned char* src0, const float* src1, float* dst, \
                                                           const GgmlMatvecParams* p) {                              \
        gdq_items<GdqQ6Group, GGML_Q6_K, 4, 1, U>(src0, src1, dst, u32(p->ne1), u32(p->ne01), u32(p->ne00), p->ne10,  \
                                                 p->ne0);                                                            \
    }

#if MLXN_CUDA_PART_IS(7)
// kernel_mul_mv_q8_0_f32's and kernel_mul_mv_q6_K_f32's launch for one token
// where the op names it (ggmlI8Takes; their CUDA entries <kernel>_i8, another
// launch of the same bindings): the int8 engine, x rounded to int8 a chunk of
// 32 values as llama.cpp's vector products round it (ggmlMatmulCudaLaunch).
// A warp a row, 4 items a lane in flight (_vdq1's shape). Q6_K's _i8g: a
// super-block a group of 8 lanes, 4 rows a warp (GdqQ6Group), 4 super-blocks
// a lane in flight, where the rows are many (the output projections).
GGML_MV_DQ_ENTRY(kernel_mul_mv_q8_0_f32_i8, GGML_Q8_0, 1, 1, 4)
GGML_MV_DQ_ENTRY(kernel_mul_mv_q6_K_f32_i8, GGML_Q6_K, 1, 1, 4)
GGML_MV_DQ6G_ENTRY(kernel_mul_mv_q6_K_f32_i8g, 4)
#endif

#if MLXN_CUDA_PART_IS(8)
// kernel_mul_mv_<t>_f32's launch from 2 tokens (its CUDA entries <kernel>_xs,
// another launch of the same bindings, ggmlMatmulCudaLaunch): the vector
// engine with x staged once a block of 64 rows (gmv_xs), the same sums as
// the kernel's own entry in another order.
#define GGML_MV_XS_ENTRY(NAME, F)                                                                                     \
    extern "C" __global__ void __launch_bounds__(128, 4) NAME(const unsigned char* src0, const float* src1, float* dst,  \
                                                           const GgmlMatvecParams* p) {                              \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                                   \
        gmv_xs<F>(smem_raw, src0, src1, dst, u32(p->ne1), u32(p->ne01), u32(p->ne00), p->ne10, p->ne0, blockIdx.x);  \
    }
GGML_MV_XS_ENTRY(kernel_mul_mv_q4_0_f32_xs, GGML_Q4_0)
GGML_MV_XS_ENTRY(kernel_mul_mv_q8_0_f32_xs, GGML_Q8_0)
GGML_MV_XS_ENTRY(kernel_mul_mv_q4_K_f32_xs, GGML_Q4_K)
GGML_MV_XS_ENTRY(kernel_mul_mv_q5_K_f32_xs, GGML_Q5_K)
GGML_MV_XS_ENTRY(kernel_mul_mv_q6_K_f32_xs, GGML_Q6_K)
#undef GGML_MV_XS_ENTRY
#endif

#if MLXN_CUDA_PART_IS(6)
// The int8 engine's harness variants, which the op does not launch (bench/qmv_variants.ts):
//   _vdq1:  a warp a row, 4 items a lane in flight (Q5_K 3: 4 spill),
//           for Qwen3.6 / Gemma 4 up (the _i8 entries' shape).
//   _vdq2:  a warp two rows, 2 items a lane in flight.
//   _vdqs4: four warps a row (its items split four ways), 3 in flight: at
//           k = 17408 (the down projections) a warp's share of a row
//           (68 Q4_K items, 136 of 32 values) in one or two rounds.
#define GGML_MV_DQ_ENTRIES(T, F)                                    \
    GGML_MV_DQ_ENTRY(kernel_mul_mv_##T##_f32_vdq1, F, 1, 1, F == GGML_Q5_K ? 3 : 4) \
    GGML_MV_DQ_ENTRY(kernel_mul_mv_##T##_f32_vdq2, F, 2, 1, 2)      \
    GGML_MV_DQ_ENTRY(kernel_mul_mv_##T##_f32_vdqs4, F, 1, 4, 3)
GGML_MV_DQ_ENTRIES(q4_0, GGML_Q4_0)
GGML_MV_DQ_ENTRIES(q8_0, GGML_Q8_0)
GGML_MV_DQ_ENTRIES(q4_K, GGML_Q4_K)
GGML_MV_DQ_ENTRIES(q5_K, GGML_Q5_K)
GGML_MV_DQ_ENTRIES(q6_K, GGML_Q6_K)
#undef GGML_MV_DQ_ENTRIES

#define GGML_MV_GC_ENTRY(W)                                                                                                  \
    extern "C" __global__ void __launch_bounds__(128, 4) kernel_mul_mv_q4_K_f32_vgc##W(const unsigned char* src0, const float* src1, \
                                                                                     float* dst, const GgmlMatvecParams* p) {  \
        gmv_gc_q4k<W>(src0, src1, dst, u32(p->ne01), u32(p->ne00), blockIdx.x);                                                          \
    }
GGML_MV_GC_ENTRY(2)
GGML_MV_GC_ENTRY(4)
#undef GGML_MV_GC_ENTRY

#endif
#undef GGML_MV_DQ_ENTRY

// ---- kernel_mul_mm_<t>_f32 ----

// buffer(0) GgmlMatmulMmParams, (1) weight (rows nb01 bytes apart), (2) x [M, K] f32 (rows nb11 bytes
// apart), (3) y [M, N] f32 (rows ne0 apart).
#define GGML_MM_ENTRY(NAME, F)                                                                                           \
    extern "C" __global__ void __launch_bounds__(256) NAME(const GgmlMatmulMmParams* args, const unsigned char* src0,   \
                                                           const float* src1, float* dst) {                             \
        gmm<F, false>(args, src0, src1, dst, nullptr, nullptr, nullptr);                                                \
    }
#if MLXN_CUDA_PART_IS(1)
GGML_MM_ENTRY(kernel_mul_mm_q4_0_f32, GGML_Q4_0)
#endif
#if MLXN_CUDA_PART_IS(2)
GGML_MM_ENTRY(kernel_mul_mm_q8_0_f32, GGML_Q8_0)
#endif
#if MLXN_CUDA_PART_IS(3)
GGML_MM_ENTRY(kernel_mul_mm_q4_K_f32, GGML_Q4_K)
#endif
#if MLXN_CUDA_PART_IS(4)
GGML_MM_ENTRY(kernel_mul_mm_q5_K_f32, GGML_Q5_K)
#endif
#if MLXN_CUDA_PART_IS(5)
GGML_MM_ENTRY(kernel_mul_mm_q6_K_f32, GGML_Q6_K)
#endif

// kernel_mul_mm_<t>_f32_splitk: the matrix form's bindings, then (4)
// partials [S, M, N] f32, (5) words (a u32 a tile, zero), (6)
// GgmlMatmulSplitParams; grid tiles x S blocks of the matrix form's size.
#define GGML_MM_SPLIT_ENTRY(NAME, F)                                                                                        \
    extern "C" __global__ void __launch_bounds__(256) NAME(const GgmlMatmulMmParams* args, const unsigned char* src0,      \
                                                           const float* src1, float* dst, float* partials, u32* words,    \
                                                           const GgmlMatmulSplitParams* split) {                          \
        gmm<F, true>(args, src0, src1, dst, partials, words, split);                                                       \
    }
#if MLXN_CUDA_PART_IS(1)
GGML_MM_SPLIT_ENTRY(kernel_mul_mm_q4_0_f32_splitk, GGML_Q4_0)
#endif
#if MLXN_CUDA_PART_IS(2)
GGML_MM_SPLIT_ENTRY(kernel_mul_mm_q8_0_f32_splitk, GGML_Q8_0)
#endif
#if MLXN_CUDA_PART_IS(3)
GGML_MM_SPLIT_ENTRY(kernel_mul_mm_q4_K_f32_splitk, GGML_Q4_K)
#endif
#if MLXN_CUDA_PART_IS(4)
GGML_MM_SPLIT_ENTRY(kernel_mul_mm_q5_K_f32_splitk, GGML_Q5_K)
#endif
#if MLXN_CUDA_PART_IS(5)
GGML_MM_SPLIT_ENTRY(kernel_mul_mm_q6_K_f32_splitk, GGML_Q6_K)
#endif
#undef GGML_MM_SPLIT_ENTRY

#if MLXN_CUDA_PART_IS(0)
// ---- kernel_dequantize_<t>_<o> ----

// buffer(0) src (blocks), (1) dst [16 n_chunks], (2) GgmlDequantizeParams.
#define GGML_DEQUANTIZE_ENTRY(NAME, F, O)                                                                     \
    extern "C" __global__ void NAME(const unsigned char* src, O* dst, const GgmlDequantizeParams* p) {      \
        dequantize<F, O>(src, dst, p);                                                                      \
    }
#define GGML_DEQUANTIZE_ENTRIES(T, F)                             \
    GGML_DEQUANTIZE_ENTRY(kernel_dequantize_##T##_f32, F, float)  \
    GGML_DEQUANTIZE_ENTRY(kernel_dequantize_##T##_f16, F, __half) \
    GGML_DEQUANTIZE_ENTRY(kernel_dequantize_##T##_bf16, F, bf16)
GGML_DEQUANTIZE_ENTRIES(q4_0, GGML_Q4_0)
GGML_DEQUANTIZE_ENTRIES(q8_0, GGML_Q8_0)
GGML_DEQUANTIZE_ENTRIES(q4_K, GGML_Q4_K)
GGML_DEQUANTIZE_ENTRIES(q5_K, GGML_Q5_K)
GGML_DEQUANTIZE_ENTRIES(q6_K, GGML_Q6_K)

// ---- embedding_gather_scale_batch_<t>_to_<o> ----

// buffer(0) table [vocab_size rows of blocks], (1) token_ids [n_tokens] u32, (2) output
// [n_tokens, hidden_size], (3) GgmlEmbeddingParams.
#define GGML_EMBEDDING_ENTRY(NAME, F, O)                                                                                         \
    extern "C" __global__ void NAME(const unsigned char* table, const u32* token_ids, O* output, const GgmlEmbeddingParams* p) { \
        embedding<F, O>(table, token_ids, output, p);                                                                          \
    }
#define GGML_EMBEDDING_ENTRIES(T, F)                                                 \
    GGML_EMBEDDING_ENTRY(embedding_gather_scale_batch_##T##_to_f32, F, float)        \
    GGML_EMBEDDING_ENTRY(embedding_gather_scale_batch_##T##_to_f16, F, __half)       \
    GGML_EMBEDDING_ENTRY(embedding_gather_scale_batch_##T##_to_bf16, F, bf16)
GGML_EMBEDDING_ENTRIES(q4_0, GGML_Q4_0)
GGML_EMBEDDING_ENTRIES(q8_0, GGML_Q8_0)
GGML_EMBEDDING_ENTRIES(q4_K, GGML_Q4_K)
GGML_EMBEDDING_ENTRIES(q5_K, GGML_Q5_K)
GGML_EMBEDDING_ENTRIES(q6_K, GGML_Q6_K)
#endif
