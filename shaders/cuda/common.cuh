// The prelude of every CUDA family: the kernel registry compiles it ahead of
// the family's header (shaders/<family>.h, its param structs, shared with
// Metal) and kernels (shaders/cuda/<family>.cu) as one program (`#line`
// marking where each file starts), so the helpers that several families use
// are written once, here.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

typedef unsigned int u32;
// Metal's name, which the param structs of shaders/<family>.h use.
typedef unsigned int uint;
typedef unsigned long long u64;
// Metal's 64-bit name, which some param structs use (llama.cpp's argument
// blocks): unsigned long is 64 bits on the Linux targets (LP64), and the same
// typedef as glibc's where a host header declares it too.
typedef unsigned long ulong;
static_assert(sizeof(ulong) == 8, "ulong must be 64 bits");
typedef __nv_bfloat16 bf16;

// ---- conversions ----

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Two floats rounded to bf16, packed low then high (the layout of __nv_bfloat162).
__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const u32*>(&h);
}

__device__ __forceinline__ bool aligned16(const void* p) {
    return (reinterpret_cast<u64>(p) & 15u) == 0;
}

// ---- 16-byte vectors ----

// Elements of T in one 16-byte vector.
template <typename T> struct VecOf { static constexpr int N = 16 / sizeof(T); };

// 16 aligned bytes at p, widened to floats.
__device__ __forceinline__ void load_vec(const float* p, float (&v)[4]) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
}
__device__ __forceinline__ void load_vec(const __nv_bfloat16* p, float (&v)[8]) {
    const uint4 t = *reinterpret_cast<const uint4*>(p);
    const u32 w[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[2 * i]     = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
// Eight halves held in 16 raw bytes, widened to floats.
__device__ __forceinline__ void unpack_f16x8(uint4 t, float (&v)[8]) {
    const u32 w[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
        v[2 * i] = f.x;
        v[2 * i + 1] = f.y;
    }
}
__device__ __forceinline__ void load_vec(const __half* p, float (&v)[8]) {
    unpack_f16x8(*reinterpret_cast<const uint4*>(p), v);
}

// Floats rounded (nearest even) to T and stored as one aligned 16-byte vector.
__device__ __forceinline__ void store_vec(float* p, const float (&v)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void store_vec(__nv_bfloat16* p, const float (&v)[8]) {
    *reinterpret_cast<uint4*>(p) = make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]),
                                              pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
}
__device__ __forceinline__ u32 pack_f16(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const u32*>(&h);
}
__device__ __forceinline__ void store_vec(__half* p, const float (&v)[8]) {
    *reinterpret_cast<uint4*>(p) = make_uint4(pack_f16(v[0], v[1]), pack_f16(v[2], v[3]),
                                              pack_f16(v[4], v[5]), pack_f16(v[6], v[7]));
}

// ---- reductions ----

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block, returned to every thread; partials holds one float per
// warp and is written once per call. A last, partial warp reduces only its
// existing lanes.
__device__ __forceinline__ float block_sum(float v, float* partials) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 lane = tid & 31u, warp = tid >> 5;
    const u32 n = min(32u, bs - (warp << 5));
    const u32 mask = n == 32u ? 0xffffffffu : ((1u << n) - 1u);
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) {
        const float other = __shfl_down_sync(mask, v, o);
        if (lane + o < n) v += other;
    }
    if (lane == 0) partials[warp] = v;
    __syncthreads();
    const u32 nw = (bs + 31u) >> 5;
    float total = 0.0f;
    for (u32 i = 0; i < nw; ++i) total += partials[i];
    return total;
}

// Maximum over the block, returned to every thread; the same contract as
// block_sum (a kernel that calls both with one partials array puts a
// __syncthreads() between them).
__device__ __forceinline__ float block_max(float v, float* partials) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    const u32 lane = tid & 31u, warp = tid >> 5;
    const u32 n = min(32u, bs - (warp << 5));
    const u32 mask = n == 32u ? 0xffffffffu : ((1u << n) - 1u);
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) {
        const float other = __shfl_down_sync(mask, v, o);
        if (lane + o < n) v = fmaxf(v, other);
    }
    if (lane == 0) partials[warp] = v;
    __syncthreads();
    const u32 nw = (bs + 31u) >> 5;
    float r = __int_as_float(0xff800000);  // -inf
    for (u32 i = 0; i < nw; ++i) r = fmaxf(r, partials[i]);
    return r;
}

// Row kernels launch either one row per block, blockDim (n, 1), or one row
// per warp, blockDim (32, R) with R rows in a block (short rows: no block
// barrier, R rows in flight). The row of a thread, and the sum and maximum
// over the threads of its row (block_sum's and block_max's contract).
__device__ __forceinline__ u32 row_index() { return blockIdx.x * blockDim.y + threadIdx.y; }
__device__ __forceinline__ float row_sum(float v, float* partials) {
    return blockDim.y > 1 ? warp_sum(v) : block_sum(v, partials);
}
__device__ __forceinline__ float row_max(float v, float* partials) {
    return blockDim.y > 1 ? warp_max(v) : block_max(v, partials);
}

// ---- tensor cores and asynchronous copies (sm_80 and later) ----

__device__ __forceinline__ u32 smem_addr(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}
// Four 8x8 b16 matrices from shared memory, as an mma operand (lane l gives the row address).
__device__ __forceinline__ void ldsm_x4(const void* p, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(const void* p, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_addr(p)));
}
// d += a (16x16 bf16, row) * b (16x8 bf16, col), f32 accumulate. Fragments
// (g = lane / 4, t = lane % 4): a[0] row g, columns 2t and 2t + 1; a[1] row
// g + 8; a[2], a[3] the same rows at columns 2t + 8, 2t + 9; b0 rows (k) 2t,
// 2t + 1 of column g, b1 rows 2t + 8, 2t + 9; d[0], d[1] row g, columns 2t,
// 2t + 1, d[2], d[3] row g + 8.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// The same with f16 operands.
__device__ __forceinline__ void mma_f16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// mma_bf16 or mma_f16 by the operands' type.
template <typename T> __device__ __forceinline__ void mma16(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1);
template <> __device__ __forceinline__ void mma16<__nv_bfloat16>(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) { mma_bf16(d, a, b0, b1); }
template <> __device__ __forceinline__ void mma16<__half>(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) { mma_f16(d, a, b0, b1); }

// mma operands from shared memory (T a 16-bit type). An A fragment (16 rows
// x 16 cols) of a row-major array at (r0, c0), rows ld elements apart.
template <typename T>
__device__ __forceinline__ void frag_a(u32 (&a)[4], const T* base, u32 ld, u32 r0, u32 c0, u32 lane) {
    ldsm_x4(base + (r0 + (lane & 15u)) * ld + c0 + 8u * (lane >> 4), a[0], a[1], a[2], a[3]);
}
// B fragments of two n-tiles (n0, n0 + 8) x 16 k from an array stored [n][k] (k contiguous):
// b[0], b[1] for n-tile n0, b[2], b[3] for n0 + 8.
template <typename T>
__device__ __forceinline__ void frag_b_nk(u32 (&b)[4], const T* base, u32 ld, u32 n0, u32 k0, u32 lane) {
    const u32 m = lane >> 3, rr = lane & 7u;
    ldsm_x4(base + (n0 + 8u * (m >> 1) + rr) * ld + k0 + 8u * (m & 1u), b[0], b[1], b[2], b[3]);
}
// The same from an array stored [k][n] (n contiguous), by ldmatrix.trans.
template <typename T>
__device__ __forceinline__ void frag_b_kn(u32 (&b)[4], const T* base, u32 ld, u32 n0, u32 k0, u32 lane) {
    const u32 m = lane >> 3, rr = lane & 7u;
    ldsm_x4_trans(base + (k0 + rr + 8u * (m & 1u)) * ld + n0 + 8u * (m >> 1), b[0], b[1], b[2], b[3]);
}

// 16-byte global -> shared copy that does not hold the thread (cp.async, L2
// only); live == false writes 16 zero bytes and reads nothing (src-size 0).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool live) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(live ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }
