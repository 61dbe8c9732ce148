// GGUF block formats (CUDA), entry names and bindings as
// shaders/quantized_matmul_ggml.metal: y = x W^T with W [N, K] in GGML
// blocks (ts/ops/quantized_matmul_ggml.ts writes each layout down),
// whole-tensor dequantization and embedding rows. Grids are one-dimensional;
// the launches are the op's (ts/ops/quantized_matmul_ggml.ts, ggmlCudaLaunch).
//
// One decoder per format reads the bytes of a chunk of 32 values of a row
// (raw_load: the block's scale words decoded into a and b, the quant bytes
// kept as loaded) and unpacks either half of it (unpack16): 16 values q as
// bytes, w = a * q + b with a, b the half's scale and offset in f32. From
// there every kernel finishes alike: floats (fmaf(a, q, b), one rounding),
// or packed bf16 pairs for the tensor cores (pairs16): for q < 128 the byte
// and the exponent byte of 128 make the bf16 128 + q in one byte_perm,
// 128 is taken off exactly and one packed fma applies a and b (each rounded
// to bf16, the product rounded once); Q8_0's bytes (0-255 with the offset)
// go through f32 instead.
//
// Engines:
//   vector (kernel_mul_mv_<t>_f32): 128 threads (4 warps) over 16 weight
//     rows. A warp takes windows of 256 values of k (one K super-block, 8
//     Q4_0 / Q8_0 blocks): warp w windows w, w + 4, ...; it copies the 16
//     rows' bytes of a window into its own shared stage by cp.async in
//     16-byte units (from the row's address rounded down to 16 bytes), the
//     next two windows' copies in flight while it computes one. Lane (g, t) =
//     (lane / 4, lane % 4) decodes 64 values (two chunks) of rows g and g + 8
//     from the stage as bf16 pairs (Q4_K / Q5_K from a 16-byte aligned
//     weight: its bytes of a row's super-block in 16-byte loads, kq_load; Q4_0
//     and Q8_0 from word-aligned rows in word loads, qs_raw; Q6_K in word loads
//     realigned by byte_perm, q6_raw); x (tokens as the mma's n = 8, up to 8 at
//     a time) is read as float4 and rounded to bf16; mma.sync m16n8k16 with
//     f32 accumulators. Any order of k works where A and B agree: lane t's
//     four k positions of each mma are values 4j .. 4j + 3 of its own 16.
//     The warps' sums meet in shared memory.
//   matrix (kernel_mul_mm_<t>_f32): the tile shapes of dense.cu
//     (denseMmCudaTile: 128 x 256 by 8 warps or 64 x 128 by 4), 32-wide k
//     stages in two shared buffers: while the warps multiply one, each
//     thread holds the next in registers (8 values of x rounded to bf16 per
//     piece, and the bytes of its weight row's chunk: thread i owns row
//     n0 + i) and parks it, decoded to bf16, after the step's mmas; ldmatrix,
//     mma.sync with f32 accumulators.
//   dequantize and embedding: a thread per chunk of 32 values, the grid
//     striding over them; values in f32, rounded once to the output type.

namespace {

enum : int { GGML_Q4_0 = 2, GGML_Q8_0 = 8, GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14 };

// Values per block and bytes per block.
template <int F> struct GgmlFmt;
template <> struct GgmlFmt<GGML_Q4_0> { static constexpr u32 QK = 32, BYTES = 18; };
template <> struct GgmlFmt<GGML_Q8_0> { static constexpr u32 QK = 32, BYTES = 34; };
template <> struct GgmlFmt<GGML_Q4_K> { static constexpr u32 QK = 256, BYTES = 144; };
template <> struct GgmlFmt<GGML_Q5_K> { static constexpr u32 QK = 256, BYTES = 176; };
template <> struct GgmlFmt<GGML_Q6_K> { static constexpr u32 QK = 256, BYTES = 210; };

template <int F>
__device__ __forceinline__ u64 ggml_row_bytes(u64 K) {
    return K / GgmlFmt<F>::QK * GgmlFmt<F>::BYTES;
}

// ---- the decoders ----

__device__ __forceinline__ u32 ld16(const unsigned char* p) { return *reinterpret_cast<const unsigned short*>(p); }
// 4 bytes at a 2-byte aligned p, little-endian.
__device__ __forceinline__ u32 ld32_2(const unsigned char* p) { return ld16(p) | (ld16(p + 2) << 16); }
// 4 bytes at a 4-byte aligned p.
__device__ __forceinline__ u32 ld32_4(const unsigned char* p) { return *reinterpret_cast<const u32*>(p); }
__device__ __forceinline__ float f16_at(const unsigned char* p) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(ld16(p))));
}

// The bytes of one chunk of 32 values: quant bytes q (and high bits h), the
// shifts that pick each value's bits out of them, and per half of 16 the
// scale a and offset b (w = a * q + b).
struct GgmlRaw {
    u32 q[8];
    u32 h[8];
    u32 sh_lo, sh_hi;
    float a[2], b[2];
};

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block, from
// its 12 packed bytes s (get_scale_min_k4).
__device__ __forceinline__ void scale_min_k4(const unsigned char* s, u32 j, float& sc, float& m) {
    if (j < 4) {
        sc = float(s[j] & 63u);
        m = float(s[j + 4] & 63u);
    } else {
        sc = float((s[j + 4] & 0xFu) | ((s[j - 4] >> 6) << 4));
        m = float((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

// Chunk c (values 32c .. 32c + 31) of the row of blocks at `row` (global or
// shared memory; Q4_K and Q5_K rows 4-byte aligned, the others 2).
template <int F> __device__ __forceinline__ void raw_load(const unsigned char* row, u64 c, GgmlRaw& r);

// Q4_0: d, qs[16]; value j < 16 the low nibble of qs[j], j + 16 its high nibble; w = d (q - 8).
template <> __device__ __forceinline__ void raw_load<GGML_Q4_0>(const unsigned char* row, u64 c, GgmlRaw& r) {
    const unsigned char* b = row + c * 18u;
    const float d = f16_at(b);
#pragma unroll
    for (int i = 0; i < 4; ++i) r.q[i] = ld32_2(b + 2 + 4 * i);
    r.a[0] = r.a[1] = d;
    r.b[0] = r.b[1] = -8.0f * d;
}
// Q8_0: d, qs[32] int8; q taken as the byte + 128 (w = d q - 128 d).
template <> __device__ __forceinline__ void raw_load<GGML_Q8_0>(const unsigned char* row, u64 c, GgmlRaw& r) {
    const unsigned char* b = row + c * 34u;
    const float d = f16_at(b);
#pragma unroll
    for (int i = 0; i < 8; ++i) r.q[i] = ld32_2(b + 2 + 4 * i) ^ 0x80808080u;
    r.a[0] = r.a[1] = d;
    r.b[0] = r.b[1] = -128.0f * d;
}
// Q4_K and Q5_K: d, dmin, scales[12] at the start of a super-block of BYTES,
// qs[128] at QS; sub-block s = c % 8 is nibble s % 2 of qs[32 (s / 2) .. + 32].
// Returns the super-block.
template <u32 BYTES, u32 QS>
__device__ __forceinline__ const unsigned char* k4_load(const unsigned char* row, u64 c, GgmlRaw& r, u32& s) {
    const unsigned char* b = row + (c / 8) * BYTES;
    s = u32(c % 8);
    float sc, m;
    scale_min_k4(b + 4, s, sc, m);
    r.a[0] = r.a[1] = f16_at(b) * sc;
    r.b[0] = r.b[1] = -f16_at(b + 2) * m;
#pragma unroll
    for (int i = 0; i < 8; ++i) r.q[i] = ld32_4(b + QS + 32 * (s / 2) + 4 * i);
    r.sh_lo = 4 * (s % 2);
    return b;
}
// Q4_K: qs at +16.
template <> __device__ __forceinline__ void raw_load<GGML_Q4_K>(const unsigned char* row, u64 c, GgmlRaw& r) {
    u32 s;
    k4_load<144u, 16u>(row, c, r, s);
}
// Q5_K: qs at +48 and qh[32] at +16, bit s of qh[l] the fifth bit of value l.
template <> __device__ __forceinline__ void raw_load<GGML_Q5_K>(const unsigned char* row, u64 c, GgmlRaw& r) {
    u32 s;
    const unsigned char* b = k4_load<176u, 48u>(row, c, r, s);
#pragma unroll
    for (int i = 0; i < 8; ++i) r.h[i] = ld32_4(b + 16 + 4 * i);
    r.sh_hi = s;
}
// Q6_K: ql[128], qh[64], scales[16] int8, d. Values 32 cc + l of a
// super-block (cc = c % 8 = 4 hh + p): nibble p / 2 of ql[64 hh + 32 (p % 2)
// + l], bits 2p, 2p + 1 of qh[32 hh + l]; sub-block (16 values) 2 cc + half
// scaled by scales[2 cc + half]; w = d sc (q - 32).
template <> __device__ __forceinline__ void raw_load<GGML_Q6_K>(const unsigned char* row, u64 c, GgmlRaw& r) {
    const unsigned char* b = row + (c / 8) * 210u;
    const u32 cc = u32(c % 8), hh = cc / 4, p = cc % 4;
    const float d = f16_at(b + 208);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        r.a[i] = d * float(static_cast<signed char>(b[192 + 2 * cc + i]));
        r.b[i] = -32.0f * r.a[i];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        r.q[i] = ld32_2(b + 64 * hh + 32 * (p % 2) + 4 * i);
        r.h[i] = ld32_2(b + 128 + 32 * hh + 4 * i);
    }
    r.sh_lo = 4 * (p / 2);
    r.sh_hi = 2 * p;
}

// Q4_K and Q5_K super-blocks (144 and 176 bytes) are whole 16-byte units:
// where the weight is 16-byte aligned, so is every super-block in a stage,
// and a lane reads its share of one with 16-byte shared loads (kq_load)
// instead of raw_load's scalar ones, and decodes it from registers (kq_raw):
// the header (d, dmin, scales[12]) and the 32 quant bytes of its two
// sub-blocks, held for both; Q5_K's 32 bytes of high bits (qh at 16, its
// quant bytes at 48) are loaded per chunk (kq_high), beside the others they
// spill.
struct KqRegs {
    uint4 hd, qs[2];
};

// Lane t's bytes of the super-block at p (16-byte aligned shared memory):
// sub-blocks 2t and 2t + 1 share quant bytes 32t .. 32t + 31.
template <int F>
__device__ __forceinline__ void kq_load(const unsigned char* p, u32 t, KqRegs& k) {
    constexpr u32 QS = F == GGML_Q5_K ? 3u : 1u;  // 16-byte unit where the quant bytes start
    const uint4* v = reinterpret_cast<const uint4*>(p);
    k.hd = v[0];
    k.qs[0] = v[QS + 2u * t];
    k.qs[1] = v[QS + 1u + 2u * t];
}

// Q5_K's qh[32] of the super-block at p into r.h.
__device__ __forceinline__ void kq_high(const unsigned char* p, GgmlRaw& r) {
    const uint4* v = reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const uint4 h = v[1 + i];
        r.h[4 * i] = h.x;
        r.h[4 * i + 1] = h.y;
        r.h[4 * i + 2] = h.z;
        r.h[4 * i + 3] = h.w;
    }
}

// raw_load<F>'s chunk s (sub-block s of the super-block) from kq_load's
// registers, Q5_K's high bits aside (kq_high).
__device__ __forceinline__ void kq_raw(const KqRegs& k, u32 s, GgmlRaw& r) {
    const u32 sh = 8u * (s & 3u);
    const u32 lo = (k.hd.y >> sh) & 0xFFu, mid = (k.hd.z >> sh) & 0xFFu, hi = (k.hd.w >> sh) & 0xFFu;
    float sc, m;
    if (s < 4) {
        sc = float(lo & 63u);
        m = float(mid & 63u);
    } else {
        sc = float((hi & 0xFu) | ((lo >> 6) << 4));
        m = float((hi >> 4) | ((mid >> 6) << 4));
    }
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(k.hd.x & 0xFFFFu)));
    const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(k.hd.x >> 16)));
    r.a[0] = r.a[1] = d * sc;
    r.b[0] = r.b[1] = -dmin * m;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        r.q[4 * i] = k.qs[i].x;
        r.q[4 * i + 1] = k.qs[i].y;
        r.q[4 * i + 2] = k.qs[i].z;
        r.q[4 * i + 3] = k.qs[i].w;
    }
    r.sh_lo = 4u * (s % 2u);
    r.sh_hi = s;
}

// A lane's two Q4_0 / Q8_0 chunks (blocks 2t and 2t + 1 of a window, 36 /
// 68 bytes) sit at a 4-byte aligned offset of the stage row where the row's
// bytes do (the weight 4-byte aligned and K / 32 even): qs_raw reads one
// chunk with 5 / 9 word loads (and a byte_perm for the even block's quant
// bytes, which start 2 bytes into a word) instead of raw_load's 9 / 17
// two-byte ones. p: the lane's bytes; cc: which of its two blocks.
template <int F>
__device__ __forceinline__ void qs_raw(const unsigned char* p, u32 cc, GgmlRaw& r) {
    constexpr int NQ = F == GGML_Q8_0 ? 8 : 4;  // quant words a block
    const u32* v = reinterpret_cast<const u32*>(p) + NQ * cc;
    u32 wd[NQ + 1];
#pragma unroll
    for (int i = 0; i <= NQ; ++i) wd[i] = v[i];
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(cc ? wd[0] >> 16 : wd[0] & 0xFFFFu)));
#pragma unroll
    for (int i = 0; i < NQ; ++i) {
        const u32 q = cc ? wd[i + 1] : __byte_perm(wd[i], wd[i + 1], 0x5432u);
        r.q[i] = F == GGML_Q8_0 ? q ^ 0x80808080u : q;
    }
    r.a[0] = r.a[1] = d;
    r.b[0] = r.b[1] = (F == GGML_Q8_0 ? -128.0f : -8.0f) * d;
}

// Q6_K's 210-byte super-blocks leave a stage row 2-byte aligned. q6_raw
// reads chunk c's 32 ql and 32 qh bytes as nine words each from the word
// below them and realigns them with one byte_perm a word (a runtime
// selector: the identity where they are word-aligned), instead of
// raw_load's two two-byte loads a word; the scales and d as raw_load.
__device__ __forceinline__ void q6_words(const unsigned char* p, u32 sel, u32 (&out)[8]) {
    const u32* v = reinterpret_cast<const u32*>(reinterpret_cast<u64>(p) & ~u64(3));
    u32 wd[9];
#pragma unroll
    for (int i = 0; i < 9; ++i) wd[i] = v[i];
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = __byte_perm(wd[i], wd[i + 1], sel);
}
__device__ __forceinline__ void q6_raw(const unsigned char* b, u32 c, GgmlRaw& r) {
    const u32 hh = c / 4, p = c % 4;
    const u32 sel = (reinterpret_cast<u64>(b) & 2u) ? 0x5432u : 0x3210u;
    const float d = f16_at(b + 208);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        r.a[i] = d * float(static_cast<signed char>(b[192 + 2 * c + i]));
        r.b[i] = -32.0f * r.a[i];
    }
    q6_words(b + 64 * hh + 32 * (p % 2), sel, r.q);
    q6_words(b + 128 + 32 * hh, sel, r.h);
    r.sh_lo = 4 * (p / 2);
    r.sh_hi = 2 * p;
}

// Half `half` of a chunk: its 16 q, four to a word (value 4i + k in byte k of qb[i]).
template <int F> __device__ __forceinline__ void unpack16(const GgmlRaw& r, u32 half, u32 (&qb)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        if constexpr (F == GGML_Q4_0) {
            qb[i] = (r.q[i] >> (4 * half)) & 0x0F0F0F0Fu;
        } else if constexpr (F == GGML_Q8_0) {
            qb[i] = r.q[4 * half + i];
        } else if constexpr (F == GGML_Q4_K) {
            qb[i] = (r.q[4 * half + i] >> r.sh_lo) & 0x0F0F0F0Fu;
        } else if constexpr (F == GGML_Q5_K) {
            qb[i] = ((r.q[4 * half + i] >> r.sh_lo) & 0x0F0F0F0Fu) | (((r.h[4 * half + i] >> r.sh_hi) & 0x01010101u) << 4);
        } else {
            qb[i] = ((r.q[4 * half + i] >> r.sh_lo) & 0x0F0F0F0Fu) | (((r.h[4 * half + i] >> r.sh_hi) & 0x03030303u) << 4);
        }
    }
}

// The 16 values of half `half` as floats, each fmaf(a, q, b).
template <int F> __device__ __forceinline__ void deq16(const GgmlRaw& r, u32 half, float (&w)[16]) {
    u32 qb[4];
    unpack16<F>(r, half, qb);
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = fmaf(r.a[half], float((qb[i / 4] >> (8 * (i % 4))) & 0xFFu), r.b[half]);
}

// The 16 values of half `half` as 8 packed bf16 pairs (pair p = values 2p, 2p + 1).
template <int F> __device__ __forceinline__ void pairs16(const GgmlRaw& r, u32 half, u32 (&p)[8]) {
    if constexpr (F == GGML_Q8_0) {
        float w[16];
        deq16<F>(r, half, w);
#pragma unroll
        for (int i = 0; i < 8; ++i) p[i] = pack2<bf16>(w[2 * i], w[2 * i + 1]);
    } else {
        u32 qb[4];
        unpack16<F>(r, half, qb);
        const u32 a2 = pack2<bf16>(r.a[half], r.a[half]), b2 = pack2<bf16>(r.b[half], r.b[half]);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            // bytes q0, 0x43, q1, 0x43: the bf16 pair 128 + q (q < 128), less 128 exactly.
            const u32 m = __byte_perm(qb[i / 2], 0x43u, (i % 2) ? 0x4342u : 0x4140u);
            p[i] = fma2<bf16>(fma2<bf16>(m, 0x3F803F80u, 0xC300C300u), a2, b2);
        }
    }
}

// ---- the vector engine ----

constexpr u32 GMV_WARPS = 4;
constexpr u32 GMV_WINDOW = 256;  // values of k a warp copies and computes at a time
constexpr u32 GMV_STAGES = 3;    // a warp's windows in shared memory: one computed, two in flight

// Bytes of a stage row: a window's bytes from the row's address rounded
// down to 16, in whole 16-byte units (ggmlMvCudaStageRow in the op).
template <int F> struct GmvStage {
    static constexpr u32 SP = 16u * ((GMV_WINDOW / GgmlFmt<F>::QK * GgmlFmt<F>::BYTES + 30u + 15u) / 16u);
};

// Copies rows row0 .. row0 + 15 (those below N) of window `win` into `stage`
// (16 rows of GmvStage<F>::SP bytes): the bytes of row r start at stage + r
// * SP + (their address & 15). Lanes 2r and 2r + 1 take row r's 16-byte
// units in turn. The weight ends at `end`: a unit past it is copied byte by
// byte up to it.
template <int F>
__device__ __forceinline__ void gmv_copy(const unsigned char* w, const unsigned char* end, u64 rb, u32 N, u32 K, u32 row0, u32 win,
                                         unsigned char* stage, u32 lane) {
    constexpr u32 SP = GmvStage<F>::SP;
    const u32 r = lane >> 1;
    if (row0 + r >= N) return;
    const u32 v0 = win * GMV_WINDOW;
    const u32 bytes = min(GMV_WINDOW, K - v0) / GgmlFmt<F>::QK * GgmlFmt<F>::BYTES;
    const unsigned char* src = w + u64(row0 + r) * rb + u64(v0) / GgmlFmt<F>::QK * GgmlFmt<F>::BYTES;
    const unsigned char* stop = src + bytes;
    const unsigned char* from = reinterpret_cast<const unsigned char*>(reinterpret_cast<u64>(src) & ~u64(15)) + 16u * (lane & 1u);
    unsigned char* dst = stage + r * SP + 16u * (lane & 1u);
    for (; from < stop; from += 32, dst += 32) {
        if (from + 16 <= end) {
            cp_async16(dst, from, true);
        } else {
            for (u32 k = 0; k < 16u; ++k) dst[k] = from + k < end ? from[k] : 0;
        }
    }
}

// x rows (tokens) m0 .. m0 + 7, values k .. k + 15 of token g (clamped to
// the last row): 8 bf16 pairs.
__device__ __forceinline__ void gmv_x16(const float* x, u64 x_row, u32 tok, u32 k, bool vec, u32 (&p)[8]) {
    const float* xr = x + u64(tok) * x_row + k;
    if (vec) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float4 v = __ldg(reinterpret_cast<const float4*>(xr) + i);
            p[2 * i] = pack2<bf16>(v.x, v.y);
            p[2 * i + 1] = pack2<bf16>(v.z, v.w);
        }
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) p[i] = pack2<bf16>(xr[2 * i], xr[2 * i + 1]);
    }
}

// Rows row0 .. row0 + 15 of the weight against every row of x ([M, K], rows
// x_row floats apart), 8 at a time: y[i * y_row + row]. Dynamic shared
// memory: GMV_WARPS x GMV_STAGES x 16 rows x GmvStage<F>::SP, then 4 x 128
// floats for the warps' sums.
template <int F>
__device__ __forceinline__ void gmv(const unsigned char* w, const float* x, float* y, u32 M, u32 N, u32 K, u64 x_row, u64 y_row) {
    constexpr u32 SP = GmvStage<F>::SP;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u32 g = lane >> 2, t = lane & 3u;
    const u32 row0 = blockIdx.x * 16u;
    const u64 rb = ggml_row_bytes<F>(K);
    const unsigned char* end = w + u64(N) * rb;
    unsigned char* stages = smem_raw + warp * GMV_STAGES * 16u * SP;
    float (*red)[128] = reinterpret_cast<float (*)[128]>(smem_raw + GMV_WARPS * GMV_STAGES * 16u * SP);
    const u32 wins = (K + GMV_WINDOW - 1) / GMV_WINDOW;
    const bool xvec = aligned16(x) && x_row % 4u == 0;
    // The row of each lane's two rows inside a window: its address's offset from 16.
    const u64 wbase = reinterpret_cast<u64>(w);
    const bool wvec = (wbase & 15u) == 0;
    const bool w4 = (wbase & 3u) == 0 && rb % 4u == 0;
    for (u32 m0 = 0; m0 < M; m0 += 8u) {
        const u32 tok = min(m0 + g, M - 1u);
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (u32 s = 0; s < GMV_STAGES - 1; ++s) {
            const u32 win = warp + s * GMV_WARPS;
            if (win < wins) gmv_copy<F>(w, end, rb, N, K, row0, win, stages + s * 16u * SP, lane);
            cp_async_commit();
        }
        for (u32 win = warp, i = 0; win < wins; win += GMV_WARPS, ++i) {
            const u32 next = win + (GMV_STAGES - 1) * GMV_WARPS;
            if (next < wins) gmv_copy<F>(w, end, rb, N, K, row0, next, stages + ((i + GMV_STAGES - 1) % GMV_STAGES) * 16u * SP, lane);
            cp_async_commit();
            cp_async_wait<GMV_STAGES - 1>();
            __syncwarp();
            const unsigned char* st = stages + (i % GMV_STAGES) * 16u * SP;
            const u32 v0 = win * GMV_WINDOW;
            const u64 off = u64(v0) / GgmlFmt<F>::QK * GgmlFmt<F>::BYTES;
            // Rows g and g + 8 (clamped: rows past N compute what nobody stores).
            const u32 ra = min(row0 + g, N - 1u) - row0, rbw = min(row0 + g + 8u, N - 1u) - row0;
            const unsigned char* pa = st + ra * SP + ((wbase + u64(row0 + ra) * rb + off) & 15u);
            const unsigned char* pb = st + rbw * SP + ((wbase + u64(row0 + rbw) * rb + off) & 15u);
            // Q4_K / Q5_K in whole 16-byte units: the lane's bytes of both rows' super-block in 16-byte loads.
            constexpr bool KQ = F == GGML_Q4_K || F == GGML_Q5_K;
            KqRegs ka, kb;
            if constexpr (KQ) {
                if (wvec) {
                    kq_load<F>(pa, t, ka);
                    kq_load<F>(pb, t, kb);
                }
            }
#pragma unroll
            for (u32 cc = 0; cc < 2; ++cc) {
                const u32 c = 2u * t + cc;  // chunk of 32 within the window
                const bool live = v0 + 32u * c < K;
                GgmlRaw wa, wb;
                if (KQ && wvec) {
                    kq_raw(ka, c, wa);
                    kq_raw(kb, c, wb);
                    if constexpr (F == GGML_Q5_K) {
                        kq_high(pa, wa);
                        kq_high(pb, wb);
                    }
                } else if ((F == GGML_Q4_0 || F == GGML_Q8_0) && w4 && live) {
                    constexpr u32 PAIR = 2u * GgmlFmt<F>::BYTES;
                    qs_raw<F>(pa + PAIR * t, cc, wa);
                    qs_raw<F>(pb + PAIR * t, cc, wb);
                } else if (F == GGML_Q6_K) {
                    q6_raw(pa, c, wa);
                    q6_raw(pb, c, wb);
                } else if (live) {
                    raw_load<F>(pa, c, wa);
                    raw_load<F>(pb, c, wb);
                }
#pragma unroll
                for (u32 h = 0; h < 2; ++h) {
                    u32 a0[8], a1[8], xp[8];
                    if (live) {
                        pairs16<F>(wa, h, a0);
                        pairs16<F>(wb, h, a1);
                        gmv_x16(x, x_row, tok, v0 + 32u * c + 16u * h, xvec, xp);
                    } else {
#pragma unroll
                        for (int j = 0; j < 8; ++j) a0[j] = a1[j] = xp[j] = 0u;
                    }
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const u32 a[4] = {a0[2 * j], a1[2 * j], a0[2 * j + 1], a1[2 * j + 1]};
                        mma16<bf16>(acc, a, xp[2 * j], xp[2 * j + 1]);
                    }
                }
            }
            // Every lane is done with this stage before a later copy refills it.
            __syncwarp();
        }
        cp_async_wait<0>();
#pragma unroll
        for (u32 e = 0; e < 4; ++e) red[warp][lane * 4 + e] = acc[e];
        __syncthreads();
        {
            float s = 0.0f;
#pragma unroll
            for (u32 q = 0; q < GMV_WARPS; ++q) s += red[q][tid];
            const u32 l = tid / 4, e = tid % 4;
            const u32 row = row0 + (l >> 2) + 8 * (e >> 1), i = m0 + 2 * (l & 3u) + (e & 1u);
            if (row < N && i < M) y[u64(i) * y_row + row] = s;
        }
        __syncthreads();
    }
}

// ---- the int8 vector engine (kernel_mul_mv_<t>_f32_vdq*: variants for the harness) ----
//
// The vector engine above spends about 560 warp instructions a window of
// 16 rows x 256 values (Q4_K: 2304 bytes, ~4 bytes a warp instruction): the
// cp.async copy loop, the stage reads, 3 instructions a bf16 pair (byte_perm,
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
// The products differ from the bf16 engine's by x's int8 rounding (up to
// max|x| / 254 a value where the entry rounds x to bf16).

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
#pragma unroll
        for (u32 i = 0; i < 8; ++i) {
            if (i < M) {
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
            }
        }
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
#pragma unroll
        for (u32 i = 0; i < 8; ++i) {
            if (i < M) {
                const uint4* xv = reinterpret_cast<const uint4*>(xq + u64(i) * (K / 4u) + k0 / 4u);
                const uint4 x0 = xv[0], x1 = xv[1];
                const u32 xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
                int s = 0;
#pragma unroll
                for (int j = 0; j < 8; ++j) s = __dp4a(int(q[j]), int(xw[j]), s);
                const float2 dx = xds[u64(i) * (K / 32u) + k0 / 32u];
                if constexpr (F == GGML_Q8_0) acc[i] += d * dx.x * float(s);
                else acc[i] += d * (dx.x * float(s) - 8.0f * dx.y);
            }
        }
    } else {
        // Q6_K: q - 32 as a signed byte: ((q | 0x80) - 0x20) ^ 0x80, no borrow between bytes (q < 64).
        const u32 cc = it % 8u, p = cc % 4u;
        const float d = gdq_h2f(r.d);
        const float s0 = d * float(static_cast<signed char>(r.sc & 0xFFu)), s1 = d * float(static_cast<signed char>(r.sc >> 8));
        u32 q[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const u32 v = ((r.ql[j] >> (4u * (p / 2u))) & 0x0F0F0F0Fu) | (((r.qh[j] >> (2u * p)) & 0x03030303u) << 4);
            q[j] = ((v | 0x80808080u) - 0x20202020u) ^ 0x80808080u;
        }
#pragma unroll
        for (u32 i = 0; i < 8; ++i) {
            if (i < M) {
                const uint4* xv = reinterpret_cast<const uint4*>(xq + u64(i) * (K / 4u) + k0 / 4u);
                const uint4 x0 = xv[0], x1 = xv[1];
                int a = 0, b = 0;
                a = __dp4a(int(q[0]), int(x0.x), a);
                a = __dp4a(int(q[1]), int(x0.y), a);
                a = __dp4a(int(q[2]), int(x0.z), a);
                a = __dp4a(int(q[3]), int(x0.w), a);
                b = __dp4a(int(q[4]), int(x1.x), b);
                b = __dp4a(int(q[5]), int(x1.y), b);
                b = __dp4a(int(q[6]), int(x1.z), b);
                b = __dp4a(int(q[7]), int(x1.w), b);
                const float2 dx = xds[u64(i) * (K / 32u) + k0 / 32u];
                acc[i] += dx.x * (s0 * float(a) + s1 * float(b));
            }
        }
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
    __device__ __forceinline__ void load(const GdqSrc& s, u32 row, u32 it) { GdqItem<F>::load(s.w + u64(row) * s.rb, it, s.vec); }
    __device__ __forceinline__ void dot(u32 it, const u32* xq, const float2* xds, u32 M, u32 K, float (&acc)[8]) const {
        gdq_dot<F>(*this, it, xq, xds, M, K, acc);
    }
};

// y = x W^T for M <= 8 tokens: R rows a group of S warps, U items a lane in flight.
template <int F, u32 R, u32 S, u32 U>
__device__ __forceinline__ void gdq(const unsigned char* w, const float* x, float* y, u32 M, u32 N, u32 K, u64 x_row, u64 y_row) {
    const u64 rb = ggml_row_bytes<F>(K);
    const GdqSrc src{w, rb, aligned16(w) && rb % 16u == 0};
    extern __shared__ __align__(16) unsigned char smem_raw[];
    i8_mv<GdqUnit<F>, R, S, U>(src, x, y, M, N, K, x_row, y_row, smem_raw);
}

// ---- the matrix engine ----

constexpr u32 GSTAGES = 2;  // stages: one computed while the next is parked
constexpr u32 GLDS = 40;    // a staged row: 32 elements and 16 bytes of padding

// The BM x BN tile at (m0, n0) of y = x W^T (the file comment): x rows x_row
// floats apart, weight rows rb bytes apart, y rows y_row floats apart.
// Dynamic shared memory: GSTAGES x (BM + BN) x GLDS bf16.
template <int F, u32 BM, u32 BN, u32 WM, u32 WN>
__device__ __forceinline__ void gmm_tile(const unsigned char* w, const float* x, float* y, u32 M, u32 N, u32 K, u64 rb, u64 x_row,
                                         u64 y_row, u32 m0, u32 n0) {
    constexpr u32 NT = WM * WN * 32;
    constexpr u32 WTM = BM / WM, WTN = BN / WN;
    constexpr u32 MI = WTM / 16, NJ = WTN / 8;
    constexpr u32 XC = BM * 4 / NT;  // 8-float pieces of x per thread per stage
    static_assert(BN == NT && XC * NT == BM * 4 && NJ % 2 == 0, "tile shape");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bf16* smem = reinterpret_cast<bf16*>(smem_raw);
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u32 KT = K / 32u;
    const bool wlive = n0 + tid < N;
    const unsigned char* wrow = w + u64(wlive ? n0 + tid : 0u) * rb;
    const bool xvec = aligned16(x) && x_row % 4u == 0;

    GgmlRaw raw;
    uint4 xr[XC];
    // Loads k tile kt into registers (whatever its stage): x (rounded to bf16) and the weight chunk's bytes.
    auto issue = [&](u32, u32 kt) {
        const u32 k0 = kt * 32u;
#pragma unroll
        for (u32 c = 0; c < XC; ++c) {
            const u32 i = tid + c * NT, r = i >> 2, q = i & 3u;
            if (m0 + r < M) {
                const float* p = x + u64(m0 + r) * x_row + k0 + 8u * q;
                float v[8];
                if (xvec) {
                    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
                    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
                    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
                } else {
#pragma unroll
                    for (int j = 0; j < 8; ++j) v[j] = p[j];
                }
                xr[c] = make_uint4(pack2<bf16>(v[0], v[1]), pack2<bf16>(v[2], v[3]), pack2<bf16>(v[4], v[5]), pack2<bf16>(v[6], v[7]));
            } else {
                xr[c] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
        if (wlive) raw_load<F>(wrow, kt, raw);
    };
    // Stores what issue() holds into stage `stage`: x, and the weight chunk as bf16 in natural order.
    auto park = [&](u32 stage) {
        bf16* xs = smem + stage * (BM + BN) * GLDS;
        bf16* ws = xs + BM * GLDS;
        park_chunks<NT, GLDS>(xs, xr, tid);
        uint4* dst = reinterpret_cast<uint4*>(ws + tid * GLDS);
#pragma unroll
        for (u32 h = 0; h < 2; ++h) {
            u32 p[8];
            if (wlive) {
                pairs16<F>(raw, h, p);
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) p[j] = 0u;
            }
            dst[2 * h] = make_uint4(p[0], p[1], p[2], p[3]);
            dst[2 * h + 1] = make_uint4(p[4], p[5], p[6], p[7]);
        }
    };

    float acc[MI][NJ][4];
    mma_zero(acc);
    const u32 wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;
    mma_pipeline<bf16, GSTAGES, BM, BN, GLDS, false>(acc, smem, KT, wm0, wn0, lane, issue, park);
    mma_store<float, false>(acc, y, y_row, N, n0, wm0, wn0, lane, [&](u32 r, u32& row) {
        row = m0 + r;
        return row < M;
    });
}

// The tile shape by block size (the op's denseMmCudaTile): 256 threads 128 x 256, 128 threads 64 x 128.
template <int F>
__device__ __forceinline__ void gmm(const GgmlMatmulMmParams* p, const unsigned char* w, const float* x, float* y) {
    const u32 K = u32(p->ne00), N = u32(p->ne0), M = u32(p->ne1);
    u32 b, m0, n0;
    if (blockDim.x == 256) {
        tile_of<128, 256>(M, N, b, m0, n0);
        gmm_tile<F, 128, 256, 2, 4>(w, x, y, M, N, K, p->nb01, p->nb11 / 4u, u64(p->ne0), m0, n0);
    } else {
        tile_of<64, 128>(M, N, b, m0, n0);
        gmm_tile<F, 64, 128, 2, 2>(w, x, y, M, N, K, p->nb01, p->nb11 / 4u, u64(p->ne0), m0, n0);
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

}  // namespace

// ---- kernel_mul_mv_<t>_f32 ----

// buffer(0) weight (N rows of blocks), (1) x [M, K] f32, (2) y [M, N] f32, (3) GgmlMatvecParams.
// Bounds of 4 blocks an SM (128 registers): the decoders' unrolled loads
// without spills (97-128 registers by format); shared memory allows 3 (Q8_0)
// to 6 (Q4_0, Q4_K) blocks.
#define GGML_MV_ENTRY(NAME, F)                                                                                        \
    extern "C" __global__ void __launch_bounds__(128, 4) NAME(const unsigned char* src0, const float* src1, float* dst,  \
                                                           const GgmlMatvecParams* p) {                              \
        gmv<F>(src0, src1, dst, u32(p->ne1), u32(p->ne01), u32(p->ne00), p->ne10, p->ne0);                         \
    }
GGML_MV_ENTRY(kernel_mul_mv_q4_0_f32, GGML_Q4_0)
GGML_MV_ENTRY(kernel_mul_mv_q8_0_f32, GGML_Q8_0)
GGML_MV_ENTRY(kernel_mul_mv_q4_K_f32, GGML_Q4_K)
GGML_MV_ENTRY(kernel_mul_mv_q5_K_f32, GGML_Q5_K)
GGML_MV_ENTRY(kernel_mul_mv_q6_K_f32, GGML_Q6_K)

// The int8 engine's variants (gdq<F, R, S, U>), same bindings; the op does
// not launch them. Grid: any (a block walks units of 8 / S x R rows; two
// blocks an SM cover the rows without a wave tail), 256 threads, dynamic
// shared memory M x K + M x K / 32 x 8 + 2 x 8 x R x 8 x 4 bytes.
//   _vdq1:  a warp a row, 4 items a lane in flight (Q5_K 3: 4 spill),
//           for Qwen3.6 / Gemma 4 up.
//   _vdq2:  a warp two rows, 2 items a lane in flight.
//   _vdqs4: four warps a row (its items split four ways), 3 in flight: at
//           k = 17408 (the down projections) a warp's share of a row
//           (68 Q4_K items, 136 of 32 values) in one or two rounds.
#define GGML_MV_DQ_ENTRY(NAME, F, R, S, U)                                                                          \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME(const unsigned char* src0, const float* src1, float* dst, \
                                                           const GgmlMatvecParams* p) {                              \
        gdq<F, R, S, U>(src0, src1, dst, u32(p->ne1), u32(p->ne01), u32(p->ne00), p->ne10, p->ne0);                \
    }
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
#undef GGML_MV_DQ_ENTRY

// ---- kernel_mul_mm_<t>_f32 ----

// buffer(0) GgmlMatmulMmParams, (1) weight (rows nb01 bytes apart), (2) x [M, K] f32 (rows nb11 bytes
// apart), (3) y [M, N] f32 (rows ne0 apart).
#define GGML_MM_ENTRY(NAME, F)                                                                                           \
    extern "C" __global__ void __launch_bounds__(256) NAME(const GgmlMatmulMmParams* args, const unsigned char* src0,   \
                                                           const float* src1, float* dst) {                             \
        gmm<F>(args, src0, src1, dst);                                                                                  \
    }
GGML_MM_ENTRY(kernel_mul_mm_q4_0_f32, GGML_Q4_0)
GGML_MM_ENTRY(kernel_mul_mm_q8_0_f32, GGML_Q8_0)
GGML_MM_ENTRY(kernel_mul_mm_q4_K_f32, GGML_Q4_K)
GGML_MM_ENTRY(kernel_mul_mm_q5_K_f32, GGML_Q5_K)
GGML_MM_ENTRY(kernel_mul_mm_q6_K_f32, GGML_Q6_K)

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
