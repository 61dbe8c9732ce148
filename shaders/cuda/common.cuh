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

// ---- programmatic dependent launch ----

// The first statement of every entry of the registry's programs
// (ts/registry.ts cudaProgram inserts it and marks the program with
// `#define MLXN_PDL 1`, which lets the backend launch its kernels with
// programmatic stream serialization): the block waits until the grids this
// launch depends on have completed and their writes are visible, then lets
// the next launch in the stream start scheduling its blocks, which wait here
// in turn. So no kernel reads or writes memory before the kernel ahead of it
// has finished, as in plain stream order, while the launch of each overlaps
// the end of the one before. Where a launch has no programmatic dependency
// (the harness, an unmarked program), both instructions return at once.
__device__ __forceinline__ void mlxn_entry() {
#if defined(MLXN_PDL) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The first statement of an entry whose body starts `{ MLXN_HELD_ENTRY();`
// (cudaProgram inserts no mlxn_entry() into it): the block waits for the
// grids ahead as mlxn_entry() does but never lets the next launch start
// early, so that launch's blocks are scheduled once this grid has exited
// (a grid that never triggers triggers at its exit). For a kernel of many
// waves followed by a long one of about one block an SM: blocks of the
// latter scheduled early land two to an SM wherever the last wave left room,
// and the long kernel then runs as slow as its doubled SMs
// (chunk_gated_delta_rule's kkt_solve_wu before the state walk:
// bench/notes/gdn-walk-ring-2026-11-29.md).
__device__ __forceinline__ void mlxn_held_entry() {
#if defined(MLXN_PDL) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
#define MLXN_HELD_ENTRY() mlxn_held_entry()

// ---- a family compiled in parts ----

// A family whose entries take long to compile declares groups of them, its
// parts (FamilySources.cudaParts, ts/registry.ts), and puts each group's
// entries inside `#if MLXN_CUDA_PART_IS(k)` (k from 1). The registry compiles
// part k's program with `#define MLXN_CUDA_PART k` (each part is its own
// NVRTC program and module, so the parts compile side by side); entries
// outside every group are part 0's. A program without the define (the
// harness, the CPU simulation, nvcc) holds every entry.
#ifdef MLXN_CUDA_PART
#define MLXN_CUDA_PART_IS(k) (MLXN_CUDA_PART == (k))
#else
#define MLXN_CUDA_PART_IS(k) 1
#endif

// ---- bytes into L2 before the wait ----

// An entry whose body starts `{ MLXN_PREFETCH_ENTRY(stmt);` runs stmt and
// then mlxn_entry() (cudaProgram inserts no mlxn_entry() into such an
// entry): its blocks, scheduled while the kernel ahead still runs, ask L2 for
// bytes they will read (a decode product's weights) so that the memory
// latency and part of the transfer pass under the kernel ahead. stmt reads
// only the dispatch's bytes bindings (its params, which the host uploads
// before the commit's first launch and no kernel writes), writes nothing
// and issues mlxn_prefetch_l2. A prefetch is a hint to L2, the point of
// coherence of global memory: it cannot make any later load return stale
// bytes, whoever writes them and whenever, so the kernel's results are those
// it computes after mlxn_entry() as for any other entry.
#define MLXN_PREFETCH_ENTRY(...) \
    do {                         \
        __VA_ARGS__;             \
        mlxn_entry();            \
    } while (0)

// Asks L2 for the whole 16-byte units of [p, p + bytes) (bulk prefetches of
// up to 1 MiB each, from the calling thread; no unit outside the range).
// Nothing before sm_90.
__device__ __forceinline__ void mlxn_prefetch_l2(const void* p, u64 bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const u64 a = u64(__cvta_generic_to_global(p));
    u64 lo = (a + 15u) & ~u64(15), hi = (a + bytes) & ~u64(15);
    while (lo < hi) {
        const u32 n = u32(hi - lo < (u64(1) << 20) ? hi - lo : (u64(1) << 20));
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(lo), "r"(n) : "memory");
        lo += n;
    }
#endif
}

// Part `part` of `parts` equal parts of [p, p + bytes), from the block's
// first thread: where a grid's blocks split a range, each asks for its own.
__device__ __forceinline__ void mlxn_prefetch_part(const void* p, u64 bytes, u32 part, u32 parts) {
    if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0 || parts == 0u || part >= parts) return;
    const u64 lo = bytes * part / parts, hi = bytes * (part + 1u) / parts;
    mlxn_prefetch_l2(static_cast<const unsigned char*>(p) + lo, hi - lo);
}

// Whether the grid has at most one block an SM. Such a grid is bound by the
// bytes each SM keeps in flight, and one bulk prefetch of a block's whole
// part asks for all of them at once: decode products of 17 to 128 blocks
// with their weights out of L2 ran 3-22 % faster for it on an H100, while
// grids of 512 and 772 blocks ran up to 11 % slower, their prefetches
// queued ahead of the loads of the kernels running
// (bench/notes/prefetch-2026-11-27.md).
__device__ __forceinline__ bool mlxn_grid_within_sms() {
#if defined(__CUDA_ARCH__)
    u32 sms;
    asm("mov.u32 %0, %%nsmid;" : "=r"(sms));
    return u64(gridDim.x) * gridDim.y * gridDim.z <= sms;
#else
    return false;
#endif
}

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
// Four bf16 at p (8 aligned bytes), widened to floats: a bf16 row read beside f32 ones.
__device__ __forceinline__ void load_vec(const __nv_bfloat16* p, float (&v)[4]) {
    const uint2 t = *reinterpret_cast<const uint2*>(p);
    v[0] = __uint_as_float(t.x << 16);
    v[1] = __uint_as_float(t.x & 0xffff0000u);
    v[2] = __uint_as_float(t.y << 16);
    v[3] = __uint_as_float(t.y & 0xffff0000u);
}
// Four halves at p (8 aligned bytes), widened to floats.
__device__ __forceinline__ void load_vec(const __half* p, float (&v)[4]) {
    const uint2 t = *reinterpret_cast<const uint2*>(p);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&t.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&t.y));
    v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
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
// Two floats rounded to the 16-bit T (bf16 or f16), packed low then high.
template <typename T> __device__ __forceinline__ u32 pack2(float lo, float hi);
template <> __device__ __forceinline__ u32 pack2<__nv_bfloat16>(float lo, float hi) { return pack_bf16(lo, hi); }
template <> __device__ __forceinline__ u32 pack2<__half>(float lo, float hi) { return pack_f16(lo, hi); }

__device__ __forceinline__ void store_vec(__half* p, const float (&v)[8]) {
    *reinterpret_cast<uint4*>(p) = make_uint4(pack_f16(v[0], v[1]), pack_f16(v[2], v[3]),
                                              pack_f16(v[4], v[5]), pack_f16(v[6], v[7]));
}

// Four floats rounded to the 16-bit type and stored as 8 aligned bytes.
__device__ __forceinline__ void store_vec(__nv_bfloat16* p, const float (&v)[4]) {
    *reinterpret_cast<uint2*>(p) = make_uint2(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]));
}
__device__ __forceinline__ void store_vec(__half* p, const float (&v)[4]) {
    *reinterpret_cast<uint2*>(p) = make_uint2(pack_f16(v[0], v[1]), pack_f16(v[2], v[3]));
}

// Two adjacent outputs, rounded to the pointer's type (p aligned to the pair).
__device__ __forceinline__ void store2(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }
__device__ __forceinline__ void store2(__nv_bfloat16* p, float a, float b) { *reinterpret_cast<u32*>(p) = pack_bf16(a, b); }
__device__ __forceinline__ void store2(__half* p, float a, float b) { *reinterpret_cast<u32*>(p) = pack_f16(a, b); }

// ---- gated elementwise: y = f(a) * b (silu_mul, sigmoid_mul, gelu) ----

// y[r, c] = f(a[r, c]) * b[r, c] for r < rows, c < dim, in f32, rounded to T
// once, when stored. y's rows are dim elements apart, a's a_stride and b's
// b_stride: two inputs of n elements are one row of n; rows that each hold
// [a | b] are a = x, b = x + dim, both strides 2 dim. Threads take chunks of
// VEC (one 16-byte vector of T) consecutive elements of a row, the chunks of
// a row in order, rows one after another; thread i of the grid takes chunks
// i, i + G, i + 2G, ... (G threads in the grid; the ops launch one chunk per
// thread). A chunk of VEC elements whose three pointers are 16-byte aligned
// moves as 16-byte vectors; a row's last, partial chunk and unaligned ones
// (rows of a dim that is not a multiple of VEC) go element by element. A
// thread reads a chunk's a and b before it writes its y, so y may be a or b
// exactly (in place). rows * dim stays below 2^32 (the ops' bound).
template <typename T, typename F>
__device__ __forceinline__ void gated_rows(const T* a, const T* b, T* y, u32 rows, u32 dim,
                                           u64 a_stride, u64 b_stride, F f) {
    constexpr int VEC = VecOf<T>::N;
    const u32 per_row = (dim + VEC - 1) / VEC;
    const u64 chunks = u64(rows) * per_row;
    const u64 step = u64(gridDim.x) * blockDim.x;
    for (u64 k = u64(blockIdx.x) * blockDim.x + threadIdx.x; k < chunks; k += step) {
        const u32 r = rows == 1u ? 0u : u32(k) / per_row;
        const u32 c = (u32(k) - r * per_row) * VEC;
        const T* pa = a + r * a_stride + c;
        const T* pb = b + r * b_stride + c;
        T* py = y + u64(r) * dim + c;
        if (c + VEC <= dim && aligned16(pa) && aligned16(pb) && aligned16(py)) {
            float va[VEC], vb[VEC];
            load_vec(pa, va);
            load_vec(pb, vb);
#pragma unroll
            for (int j = 0; j < VEC; ++j) va[j] = f(va[j]) * vb[j];
            store_vec(py, va);
        } else {
            const u32 end = min(dim - c, u32(VEC));
            for (u32 j = 0; j < end; ++j) py[j] = from_f<T>(f(to_f(pa[j])) * to_f(pb[j]));
        }
    }
}

// The gated families' two forms: y[i] = f(gate[i]) * up[i] over n elements,
// and the halves form, y[r, c] = f(x[r, c]) * x[r, dim + c] over rows of
// [gate | up] (x [rows, 2 dim], y [rows, dim]).
template <typename T, typename F>
__device__ __forceinline__ void gated_pair(const T* gate, const T* up, T* y, u32 n, F f) {
    gated_rows(gate, up, y, 1u, n, 0, 0, f);
}
template <typename T, typename F>
__device__ __forceinline__ void gated_halves(const T* x, T* y, u32 rows, u32 dim, F f) {
    const u64 stride = 2ull * dim;
    gated_rows(x, x + dim, y, rows, dim, stride, stride, f);
}

// ---- reductions ----

// op over a full warp's t by xor shuffles, a lane's own value first: op
// commutes, so every lane ends with the same bits.
template <typename Op>
__device__ __forceinline__ float warp_xor_fold(float t, Op op) {
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) t = op(t, __shfl_xor_sync(0xffffffffu, t, o));
    return t;
}

__device__ __forceinline__ float warp_sum(float v) {
    return warp_xor_fold(v, [](float a, float b) { return a + b; });
}
__device__ __forceinline__ float warp_max(float v) {
    return warp_xor_fold(v, [](float a, float b) { return fmaxf(a, b); });
}

// The lanes of this thread's warp that the block has (a last warp may be
// partial): the thread's lane and warp, how many lanes, and their mask.
struct WarpLanes {
    u32 lane, warp, n, mask;
};
__device__ __forceinline__ WarpLanes warp_lanes() {
    const u32 lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const u32 n = min(32u, blockDim.x - (warp << 5));
    return WarpLanes{lane, warp, n, n == 32u ? 0xffffffffu : ((1u << n) - 1u)};
}

// Folds a warp's values down to lane 0 over the lanes the block has:
// fold(o, live) shuffles its values down by o within w.mask and takes lane
// + o's where live (that lane exists).
template <typename F>
__device__ __forceinline__ void warp_fold_down(const WarpLanes& w, F fold) {
#pragma unroll
    for (u32 o = 16; o > 0; o >>= 1) fold(o, w.lane + o < w.n);
}

// The fold of the block's per-warp values partials[0, nw) with op (id its
// identity), the same bits in every thread, after the barrier that published
// them. In a block of whole warps each warp folds partials[lane] by xor
// shuffles, a lane's own value first: op commutes, so every lane of every
// warp ends with the same bits (the tree that pairs i with i + 16, then
// i + 8, ...): one shared load and ten instructions a warp, where folding
// the nw values in each thread took nw loads and adds. A block whose last
// warp is partial (it cannot shuffle with lanes it lacks) has warp 0 fold
// the same tree and publish it in partials[0] behind a second barrier
// (warp 0's lanes have all loaded by then: lane 0's value waits on every
// lane's through the shuffles).
template <typename Op>
__device__ __forceinline__ float fold_partials(const WarpLanes& w, float* partials, float id, Op op) {
    const u32 nw = (blockDim.x + 31u) >> 5;
    if (nw == 1u) return partials[0];
    const bool whole = (blockDim.x & 31u) == 0u;
    if (whole || w.warp == 0u) {
        const float t = warp_xor_fold(w.lane < nw ? partials[w.lane] : id, op);
        if (whole) return t;
        if (w.lane == 0u) partials[0] = t;
    }
    __syncthreads();
    return partials[0];
}

// block_sum / block_max over whole warps: v is the warp's value (the same
// in every lane), published by lane 0, folded by each warp as fold_partials
// does in a block of whole warps.
template <typename Op>
__device__ __forceinline__ float whole_block_fold(float v, float* partials, float id, Op op) {
    const u32 lane = threadIdx.x & 31u;
    if (lane == 0u) partials[threadIdx.x >> 5] = v;
    __syncthreads();
    return warp_xor_fold(lane < (blockDim.x >> 5) ? partials[lane] : id, op);
}

// Sum over the block, returned to every thread (the same bits in each);
// partials holds one float per warp, the call's until the caller's next
// barrier. A last, partial warp reduces only its existing lanes. WHOLE:
// the caller's blocks are whole warps (blockDim.x a multiple of 32): each
// warp folds by xor shuffles over its full mask, with none of the lane and
// warp count checks, which a kernel that reduces between its loads and its
// stores waits on (softmax_stream: 1-2 us of 59 at [64, 262144]).
template <bool WHOLE = false>
__device__ __forceinline__ float block_sum(float v, float* partials) {
    if constexpr (WHOLE) return whole_block_fold(warp_sum(v), partials, 0.0f, [](float a, float b) { return a + b; });
    const WarpLanes w = warp_lanes();
    warp_fold_down(w, [&](u32 o, bool live) {
        const float other = __shfl_down_sync(w.mask, v, o);
        if (live) v += other;
    });
    if (w.lane == 0) partials[w.warp] = v;
    __syncthreads();
    return fold_partials(w, partials, 0.0f, [](float a, float b) { return a + b; });
}

// Maximum over the block, returned to every thread; the same contract as
// block_sum (a kernel that calls both with one partials array puts a
// __syncthreads() between them).
template <bool WHOLE = false>
__device__ __forceinline__ float block_max(float v, float* partials) {
    if constexpr (WHOLE) return whole_block_fold(warp_max(v), partials, __int_as_float(0xff800000), [](float a, float b) { return fmaxf(a, b); });
    const WarpLanes w = warp_lanes();
    warp_fold_down(w, [&](u32 o, bool live) {
        const float other = __shfl_down_sync(w.mask, v, o);
        if (live) v = fmaxf(v, other);
    });
    if (w.lane == 0) partials[w.warp] = v;
    __syncthreads();
    return fold_partials(w, partials, __int_as_float(0xff800000), [](float a, float b) { return fmaxf(a, b); });
}

// ---- launch attributes ----

// A register cap for a kernel whose launches reach 1024 threads but whose
// usual blocks are smaller, so that one more block fits an SM:
// __maxnreg__(n) (n <= 64) where the compiler has it (CUDA 12.4 and later),
// else __launch_bounds__(1024) (at most 64).
#if defined(__CUDACC_VER_MAJOR__) && (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 4))
#define MLXN_MAX_REGS(n) __maxnreg__(n)
#else
#define MLXN_MAX_REGS(n) __launch_bounds__(1024)
#endif

// Row kernels launch either one row per block, blockDim (n, 1), or rows of
// L lanes, blockDim (L, R) with L a power of two up to 32 and R rows in a
// block (short rows: no block barrier, R rows in flight; L * R a multiple of
// 32, so every warp is whole and a row's L lanes are consecutive lanes of one
// warp). The row of a thread, and the sum and maximum over the threads of its
// row (block_sum's and block_max's contract).
__device__ __forceinline__ u32 row_index() { return blockIdx.x * blockDim.y + threadIdx.y; }
// Sum and maximum over aligned groups of `width` lanes (a power of two up to
// 32), returned to every lane of the group; the whole warp calls them.
__device__ __forceinline__ float lanes_sum(float v, u32 width) {
    for (u32 o = width >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float lanes_max(float v, u32 width) {
    for (u32 o = width >> 1; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float row_sum(float v, float* partials) {
    return blockDim.y > 1 ? lanes_sum(v, blockDim.x) : block_sum(v, partials);
}
__device__ __forceinline__ float row_max(float v, float* partials) {
    return blockDim.y > 1 ? lanes_max(v, blockDim.x) : block_max(v, partials);
}

// ---- tensor cores and asynchronous copies (sm_80 and later) ----

// 2^x on the special function unit (ex2.approx.ftz: about 2 ulp, subnormal
// results flushed to 0, 2^-inf = 0), as an online softmax in log2 units takes it.
__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// tanh on the special function unit (tanh.approx.f32, sm_75 and later): a
// relative error of at most about 2^-11, under half an ulp of bf16, one
// instruction where tanhf takes about fifteen and two of the special units.
__device__ __forceinline__ float tanh_approx(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// The larger of a and b, NaN where either is NaN (max.NaN.f32, sm_80 and
// later; fmaxf returns the number instead). max.NaN of +0 and -0 may be
// either: callers that tell them apart compare with ==.
__device__ __forceinline__ float fmax_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    float y;
    asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(a), "f"(b));
    return y;
#else
    return a != a || b != b ? __int_as_float(0x7fffffff) : fmaxf(a, b);
#endif
}

// v, which the compiler may no longer take for a constant (held in a
// register: an empty asm).
__device__ __forceinline__ u32 opaque_u32(u32 v) {
    asm("" : "+r"(v));
    return v;
}
// (v & MASK) | c in one LOP3 where c is a register (two immediates become
// an AND and an OR).
template <u32 MASK>
__device__ __forceinline__ u32 and_or(u32 v, u32 c) {
    u32 d;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(v), "n"(MASK), "r"(c));
    return d;
}

// The selector of sext_byte for byte b (0 .. 3) of a word.
__device__ __forceinline__ u32 sext_sel(u32 b) { return b | ((8u | b) * 0x1110u); }
// The byte that sel (sext_sel) names, sign-extended: one PRMT, whose
// selector nibbles with the high bit set replicate the byte's sign
// (__byte_perm takes only the low three bits of each).
__device__ __forceinline__ int sext_byte(u32 w, u32 sel) {
    int d;
    asm("prmt.b32 %0, %1, 0, %2;" : "=r"(d) : "r"(w), "r"(sel));
    return d;
}

// A load with acquire semantics at GPU scope: what other blocks wrote before
// their release (a fence, then the atomic this load observes) is visible to
// the loads after it, and to the block's loads after a barrier.
__device__ __forceinline__ u32 ld_acquire_gpu(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

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

// d0, d1 += a times the two 8-column B tiles at columns n0 .. n0 + 15, rows
// k0 .. k0 + 15 (frag_b_nk's layout when NK, else frag_b_kn's): the step
// every m16n8k16 loop over column pairs takes.
template <bool NK, typename T>
__device__ __forceinline__ void mma_b16(float (&d0)[4], float (&d1)[4], const u32 (&a)[4], const T* base, u32 ld, u32 n0, u32 k0, u32 lane) {
    u32 b[4];
    if constexpr (NK) frag_b_nk(b, base, ld, n0, k0, lane);
    else frag_b_kn(b, base, ld, n0, k0, lane);
    mma16<T>(d0, a, b[0], b[1]);
    mma16<T>(d1, a, b[2], b[3]);
}

// A warp's 16 x 32 mma accumulator (rows r0 .., columns c0 ..; lane's
// rows gq and gq + 8, column pairs 2 tq of each 8) into dst as bf16 pairs,
// rows ld elements apart; rows at or past len are left alone.
__device__ __forceinline__ void store_acc_rows(__nv_bfloat16* dst, u64 ld, const float (&acc)[4][4], u32 r0, u32 c0, u32 len, u32 lane) {
    const u32 gq = lane >> 2, tq = lane & 3u;
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
        const u32 i = r0 + gq + 8u * hr;
        if (i >= len) continue;
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const u32 j = c0 + 8u * ni + 2u * tq;
            *reinterpret_cast<u32*>(dst + u64(i) * ld + j) = pack_bf16(acc[ni][2 * hr], acc[ni][2 * hr + 1]);
        }
    }
}

// The tile of block blockIdx.x among BM x BN output tiles of a matrix
// product: batch outermost; within a batch, groups of 8 tile rows, each group
// walked down its rows first, so that neighbouring blocks share weight
// columns in L2.
// blk: the tile's index (blockIdx.x, or a split-k entry's tile of its block).
template <u32 BM, u32 BN>
__device__ __forceinline__ void tile_of(u32 M, u32 N, u32& b, u32& m0, u32& n0, u32 blk) {
    const u32 tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const u32 per = tiles_m * tiles_n;
    b = blk / per;
    const u32 p = blk % per;
    const u32 first = p / (8 * tiles_n) * 8, gsize = min(8u, tiles_m - first), pin = p % (8 * tiles_n);
    m0 = (first + pin % gsize) * BM;
    n0 = pin / gsize * BN;
}
template <u32 BM, u32 BN>
__device__ __forceinline__ void tile_of(u32 M, u32 N, u32& b, u32& m0, u32& n0) {
    tile_of<BM, BN>(M, N, b, m0, n0, blockIdx.x);
}

// Packed pairs of 16-bit floats (T bf16 or f16) in a u32, low element first:
// d = a * b + c per element, rounded once (fma.rn .bf16x2 / .f16x2).
__device__ __forceinline__ u32 fma2_bf16(u32 a, u32 b, u32 c) {
    u32 d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ u32 fma2_f16(u32 a, u32 b, u32 c) {
    u32 d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
template <typename T> __device__ __forceinline__ u32 fma2(u32 a, u32 b, u32 c);
template <> __device__ __forceinline__ u32 fma2<__nv_bfloat16>(u32 a, u32 b, u32 c) { return fma2_bf16(a, b, c); }
template <> __device__ __forceinline__ u32 fma2<__half>(u32 a, u32 b, u32 c) { return fma2_f16(a, b, c); }

// 16-byte global -> shared copy that does not hold the thread (cp.async, L2
// only); live == false writes 16 zero bytes and reads nothing (src-size 0).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool live) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(live ? 16 : 0) : "memory");
}
// The same for 4 bytes (cp.async.ca: the 4- and 8-byte forms go through L1).
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool live) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(live ? 4 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Named barriers (1 .. 15; __syncthreads has 0) over n threads of the block,
// n a multiple of 32: bar_sync waits until n threads have arrived (itself
// among them), bar_arrive counts the thread in without waiting (a producer
// telling consumers that its earlier writes are there). Warp-specialized
// kernels sync their groups of warps with them in place of __syncthreads.
__device__ __forceinline__ void bar_sync(u32 id, u32 n) { asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void bar_arrive(u32 id, u32 n) { asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(n) : "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }

// mbarriers (sm_80 and later): a u64 in shared memory that completes a
// phase when `count` arrivals came, then starts the next with the same
// count. A wait names the parity of the phase it waits for (a barrier that
// completes once a use: use k waits for parity k & 1). mbar_init by one
// thread before any other touches it, then a block barrier.
__device__ __forceinline__ void mbar_init(u64* bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_addr(bar)), "r"(count) : "memory");
}
// One arrival (release: what this thread wrote before is visible to the
// threads whose wait sees the phase complete).
__device__ __forceinline__ void mbar_arrive(u64* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(smem_addr(bar)) : "memory");
}
// Until the phase of parity `parity` has completed (acquire).
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity) {
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "MBAR_WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra MBAR_WAIT_%=;\n"
                 "}\n" :: "r"(smem_addr(bar)), "r"(parity) : "memory");
}
// One arrival on bar once every cp.async this thread issued before has
// landed; the thread goes on at once. The arrival is one of the `count`
// (.noinc), so a producer's threads each arrive once a fill.
__device__ __forceinline__ void cp_async_mbar_arrive(u64* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(smem_addr(bar)) : "memory");
}

// ---- row copies (embedding, kv_cache_copy) ----

template <typename A, typename B> struct SameType { static constexpr bool value = false; };
template <typename A> struct SameType<A, A> { static constexpr bool value = true; };

// Elements a row copy moves per step: 16 bytes of the narrower of the source
// and destination types (4 f32, 8 of a 16-bit type; 8 when one side is f32
// and the other 16-bit, i.e. 32 bytes of the f32 side).
template <typename S, typename D> struct RowCopyUnit {
    static constexpr int N = 16 / (sizeof(S) < sizeof(D) ? sizeof(S) : sizeof(D));
};
// Steps a thread issues before it stores any of them (loads in flight).
constexpr int ROW_COPY_STEPS = 4;

// The VecOf<T>::N elements of T held in 16 raw bytes, widened to floats.
template <typename T> __device__ __forceinline__ void unpack16(uint4 t, float* v);
template <> __device__ __forceinline__ void unpack16<float>(uint4 t, float* v) {
    v[0] = __uint_as_float(t.x); v[1] = __uint_as_float(t.y); v[2] = __uint_as_float(t.z); v[3] = __uint_as_float(t.w);
}
template <> __device__ __forceinline__ void unpack16<__nv_bfloat16>(uint4 t, float* v) {
    const u32 w[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[2 * i]     = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
template <> __device__ __forceinline__ void unpack16<__half>(uint4 t, float* v) {
    unpack_f16x8(t, *reinterpret_cast<float(*)[8]>(v));
}

// N elements of T at p (16-byte aligned, N a multiple of T's vector) as
// floats, read as 16-byte vectors.
template <typename T, int N>
__device__ __forceinline__ void load_elems(const T* p, float (&v)[N]) {
    constexpr int V = VecOf<T>::N;
    static_assert(N % V == 0, "whole vectors");
#pragma unroll
    for (int c = 0; c < N / V; ++c) {
        float t[V];
        load_vec(p + c * V, t);
#pragma unroll
        for (int j = 0; j < V; ++j) v[c * V + j] = t[j];
    }
}

// Floats rounded to T and stored as aligned 16-byte vectors (N a multiple of
// T's vector).
template <typename T, int N>
__device__ __forceinline__ void store_elems(T* p, const float (&v)[N]) {
    constexpr int V = VecOf<T>::N;
#pragma unroll
    for (int c = 0; c < N / V; ++c) {
        float t[V];
#pragma unroll
        for (int j = 0; j < V; ++j) t[j] = v[c * V + j];
        store_vec(p + c * V, t);
    }
}

// Copies n_rows rows of len elements: map(r, s, d) sets row r's source
// and destination pointers (const S*&, D*&). SCALED multiplies by scale in
// f32; otherwise elements of one type move as raw bytes, and others are
// converted (round to nearest even). Blocks take rows, blockDim (X, Y):
// thread (x, y) of block b takes rows b * Y + y, then + gridDim.x * Y, ...
// (any grid covers the rows), maps each once (no division by the row
// length), and moves the row's steps of N elements x, x + X, ...,
// ROW_COPY_STEPS of them at once: their loads (held as raw 16-byte words)
// issued before any is converted and stored. Steps move 16-byte vectors when
// len is a multiple of N and the row's two pointers are 16-byte aligned,
// else scalar elements.
template <typename S, typename D, bool SCALED, typename Map>
__device__ __forceinline__ void copy_rows(u32 n_rows, u32 len, float scale, Map map) {
    constexpr int N = RowCopyUnit<S, D>::N;
    constexpr int K = ROW_COPY_STEPS;
    constexpr bool RAW = !SCALED && SameType<S, D>::value;
    constexpr int W = int(N * sizeof(S) / 16);  // 16-byte words of source per step
    const u32 per_row = (len + N - 1) / N;
    const u32 lanes = blockDim.x;
    for (u64 r = u64(blockIdx.x) * blockDim.y + threadIdx.y; r < n_rows; r += u64(gridDim.x) * blockDim.y) {
        const S* src;
        D* dst;
        map(u32(r), src, dst);
        if (len % N == 0 && aligned16(src) && aligned16(dst)) {
            for (u32 first = threadIdx.x; first < per_row; first += K * lanes) {
                uint4 w[K][W];
#pragma unroll
                for (int k = 0; k < K; ++k) {
                    const u32 step = first + u32(k) * lanes;
                    if (step >= per_row) continue;
#pragma unroll
                    for (int c = 0; c < W; ++c) w[k][c] = reinterpret_cast<const uint4*>(src + u64(step) * N)[c];
                }
#pragma unroll
                for (int k = 0; k < K; ++k) {
                    const u32 step = first + u32(k) * lanes;
                    if (step >= per_row) continue;
                    D* out = dst + u64(step) * N;
                    if constexpr (RAW) {
#pragma unroll
                        for (int c = 0; c < W; ++c) reinterpret_cast<uint4*>(out)[c] = w[k][c];
                    } else {
                        float v[N];
#pragma unroll
                        for (int c = 0; c < W; ++c) unpack16<S>(w[k][c], v + c * VecOf<S>::N);
                        if constexpr (SCALED) {
#pragma unroll
                            for (int j = 0; j < N; ++j) v[j] *= scale;
                        }
                        store_elems<D, N>(out, v);
                    }
                }
            }
        } else {
            for (u32 i = threadIdx.x; i < len; i += lanes) {
                if constexpr (RAW) {
                    dst[i] = src[i];
                } else {
                    const float x = to_f(src[i]);
                    dst[i] = from_f<D>(SCALED ? x * scale : x);
                }
            }
        }
    }
}

// ---- rotary pairs (rope, rope_neox, rope_multi, fused_head_norm_rope) ----

// Pair `pair`'s (cos, sin) at position pos: angle = pos * theta^(-2 pair /
// head_dim) / ff, formed in f32 as Metal's; powf, division and sincosf are
// the accurate ones (no fast math), so large positions keep their accuracy.
// rope_divisor (theta^(2 pair / head_dim)) depends on the pair alone, so a
// thread that turns one pair at many positions forms it once and calls
// rope_turn for each: the same expression, the same bits.
__device__ __forceinline__ float rope_divisor(u32 pair, float head_dim, float theta) {
    return powf(theta, float(2u * pair) / head_dim);
}
__device__ __forceinline__ void rope_turn(u32 pos, float divisor, float ff, float* c, float* s) {
    sincosf(float(pos) / divisor / ff, s, c);
}
__device__ __forceinline__ void rope_cos_sin(u32 pos, u32 pair, float head_dim, float theta, float ff, float* c, float* s) {
    rope_turn(pos, rope_divisor(pair, head_dim, theta), ff, c, s);
}


// A thread of rope_neox and rope_multi holds ROPE_PAIRS consecutive pairs
// (x[p], x[p + half_dim]) of ROPE_HEADS heads of one token: the accurate powf
// and sincosf of a pair's angle cost more than its bytes, so each angle
// serves ROPE_HEADS rows, and a half-row's ROPE_PAIRS elements move as one
// vector (8 bytes of bf16 or f16, 16 of f32) where the rows allow it.
constexpr u32 ROPE_HEADS = 8u;
constexpr u32 ROPE_PAIRS = 4u;

// ROPE_PAIRS elements of T as loaded, their bits unconverted (uint2 for the
// 16-bit types, uint4 for f32): a thread holds its rows from their loads to
// their use (across the block's angles) in as many registers as their bytes,
// and widens each to floats where it is used.
template <int BYTES> struct RopeRawOf;
template <> struct RopeRawOf<2> { using type = uint2; };
template <> struct RopeRawOf<4> { using type = uint4; };
template <typename T> using RopeRaw = typename RopeRawOf<int(sizeof(T))>::type;

__device__ __forceinline__ u32 rope_bits(float x) { return __float_as_uint(x); }
__device__ __forceinline__ u32 rope_bits(__half x) { return __half_as_ushort(x); }
__device__ __forceinline__ u32 rope_bits(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }

// Elements k < width of x into r (all ROPE_PAIRS as one vector where vec; the
// others 0).
template <typename T>
__device__ __forceinline__ void rope_raw_load(const T* x, bool vec, u32 width, RopeRaw<T>& r) {
    if (vec) {
        r = *reinterpret_cast<const RopeRaw<T>*>(x);
        return;
    }
    u32 w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (u32 k = 0; k < ROPE_PAIRS; ++k) {
        if (k < width) {
            if (sizeof(T) == 4) w[k] = rope_bits(x[k]);
            else w[k / 2u] |= rope_bits(x[k]) << (16u * (k % 2u));
        }
    }
    if constexpr (sizeof(T) == 4) r = make_uint4(w[0], w[1], w[2], w[3]);
    else r = make_uint2(w[0], w[1]);
}

// The ROPE_PAIRS elements of r widened to floats, exactly.
__device__ __forceinline__ void rope_raw_floats(const uint4& r, float (&v)[ROPE_PAIRS], float) {
    v[0] = __uint_as_float(r.x); v[1] = __uint_as_float(r.y); v[2] = __uint_as_float(r.z); v[3] = __uint_as_float(r.w);
}
__device__ __forceinline__ void rope_raw_floats(const uint2& r, float (&v)[ROPE_PAIRS], __nv_bfloat16) {
    v[0] = __uint_as_float(r.x << 16); v[1] = __uint_as_float(r.x & 0xffff0000u);
    v[2] = __uint_as_float(r.y << 16); v[3] = __uint_as_float(r.y & 0xffff0000u);
}
__device__ __forceinline__ void rope_raw_floats(const uint2& r, float (&v)[ROPE_PAIRS], __half) {
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&r.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&r.y));
    v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
}
template <typename T>
__device__ __forceinline__ void rope_unpack(const RopeRaw<T>& r, float (&v)[ROPE_PAIRS]) {
    rope_raw_floats(r, v, T());
}

// Elements k < width of v, rounded to T, at y (one vector where vec).
template <typename T>
__device__ __forceinline__ void rope_store(T* y, bool vec, u32 width, const float (&v)[ROPE_PAIRS]) {
    if (vec) {
        store_vec(y, v);
    } else {
#pragma unroll
        for (u32 k = 0; k < ROPE_PAIRS; ++k) {
            if (k < width) y[k] = from_f<T>(v[k]);
        }
    }
}

template <typename T>
struct RopeQuad {
    RopeRaw<T> a[ROPE_HEADS], b[ROPE_HEADS];
};

// Whether the rows' pairs move as vectors: half_dim a multiple of ROPE_PAIRS
// (so is every quad's start) and both pointers aligned to a vector.
template <typename T>
__device__ __forceinline__ bool rope_quad_vectors(const T* input, const T* output, u32 half_dim) {
    constexpr u64 bytes = ROPE_PAIRS * sizeof(T);
    return half_dim % ROPE_PAIRS == 0u && (reinterpret_cast<u64>(input) % bytes) == 0u &&
           (reinterpret_cast<u64>(output) % bytes) == 0u;
}

// Loads the pairs k < width of rows at + j * head_dim, j < count (at: the
// first pair's element in the first row).
template <typename T>
__device__ __forceinline__ void rope_quad_load(const T* input, u64 at, u32 head_dim, u32 half_dim, u32 count, u32 width,
                                               bool vec, RopeQuad<T>& q) {
#pragma unroll
    for (u32 j = 0; j < ROPE_HEADS; ++j) {
        if (j < count) {
            const T* x = input + at + u64(j) * head_dim;
            rope_raw_load(x, vec, width, q.a[j]);
            rope_raw_load(x + half_dim, vec, width, q.b[j]);
        }
    }
}

// Pairs k < turn of a half-row pair (a, b) turned by (c[k], s[k]): (a, b) ->
// (a c - b s, a s + b c); the pairs from turn on as they are (past rope_dim).
__device__ __forceinline__ void rope_quad_turn(float (&a)[ROPE_PAIRS], float (&b)[ROPE_PAIRS], u32 turn,
                                               const float (&c)[ROPE_PAIRS], const float (&s)[ROPE_PAIRS]) {
#pragma unroll
    for (u32 k = 0; k < ROPE_PAIRS; ++k) {
        if (k < turn) {
            const float x = a[k], y = b[k];
            a[k] = x * c[k] - y * s[k];
            b[k] = x * s[k] + y * c[k];
        }
    }
}

// Stores the rows of q (pairs k < width of rows j < count) with pairs k <
// turn turned by (c[k], s[k]) (rope_quad_turn). Output may be input: each
// element is its thread's alone, loaded before.
template <typename T>
__device__ __forceinline__ void rope_quad_store(T* output, u64 at, u32 head_dim, u32 half_dim, u32 count, u32 width, u32 turn,
                                                bool vec, const float (&c)[ROPE_PAIRS], const float (&s)[ROPE_PAIRS],
                                                const RopeQuad<T>& q) {
#pragma unroll
    for (u32 j = 0; j < ROPE_HEADS; ++j) {
        if (j < count) {
            float a[ROPE_PAIRS], b[ROPE_PAIRS];
            rope_unpack<T>(q.a[j], a);
            rope_unpack<T>(q.b[j], b);
            rope_quad_turn(a, b, turn, c, s);
            T* y = output + at + u64(j) * head_dim;
            rope_store(y, vec, width, a);
            rope_store(y + half_dim, vec, width, b);
        }
    }
}

// Rotated pairs one block of a heads form covers at most (64 threads of ROPE_PAIRS).
constexpr u32 ROPE_BLOCK_PAIRS = 64u * ROPE_PAIRS;

// The (cos, sin) of the block's rotated pairs first + i, i < count (at most
// ROPE_BLOCK_PAIRS), formed once a block, spread over all its threads, into
// cs; the block waits for them. Every thread of the block calls it.
template <typename Angle>
__device__ __forceinline__ void rope_block_angles(u32 first, u32 count, Angle angle, float2* cs) {
    const u32 n = blockDim.x * blockDim.y;
    for (u32 i = threadIdx.y * blockDim.x + threadIdx.x; i < count; i += n) {
        float c, s;
        angle(first + i, c, s);
        cs[i] = make_float2(c, s);
    }
    __syncthreads();
}

// Tokens a block of a heads form may take on threadIdx.z (blockDim.z): its
// divisors are formed once for all of them (rope_block_divisors), each
// token's angles over that token's threads (rope_token_angles).
constexpr u32 ROPE_BLOCK_TOKENS = 2u;
// Threads of a heads-form block at most (fusedHeadNormRopeHeadsLaunch).
constexpr u32 ROPE_HEADS_BLOCK_THREADS = 256u;

// rope_divisor of pairs first + i, i < count, once a block, spread over
// all its threads, into dv[i]; the block waits for them. Every thread calls
// it (rope's rows form, fused_head_norm_rope's heads form with tokens).
__device__ __forceinline__ void rope_block_divisors(u32 first, u32 count, float head_dim, float theta, float* dv) {
    const u32 n = blockDim.x * blockDim.y * blockDim.z;
    for (u32 i = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x; i < count; i += n)
        dv[i] = rope_divisor(first + i, head_dim, theta);
    __syncthreads();
}

// The (cos, sin) of pairs i < count of token threadIdx.z, angle(i, c, s)
// spread over that token's threads (x, y), into cs; the block waits for
// them. Every thread of the block calls it.
template <typename Angle>
__device__ __forceinline__ void rope_token_angles(u32 count, Angle angle, float2* cs) {
    const u32 n = blockDim.x * blockDim.y;
    for (u32 i = threadIdx.y * blockDim.x + threadIdx.x; i < count; i += n) {
        float c, s;
        angle(i, c, s);
        cs[i] = make_float2(c, s);
    }
    __syncthreads();
}

// One thread's work in rope_neox and rope_multi: pairs p0 = ROPE_PAIRS *
// (blockIdx.y * blockDim.x + threadIdx.x) onwards of heads threadIdx.y *
// ROPE_HEADS + j (then blockDim.y * ROPE_HEADS further; every thread runs the
// same rounds) of token blockIdx.x; angle(p, c, s) forms pair p's (cos, sin),
// once a block (rope_block_angles), while the first heads' loads are in
// flight. angle should read no memory: a load issued behind a thread's 16
// row loads waits on their scoreboards (ncu: the angles then start only when
// the rows have come), so its inputs are read before (rope_multi) or its
// form without them is chosen by a uniform branch (frequency factors).
template <typename T, typename Angle>
__device__ __forceinline__ void rope_heads(const T* input, T* output, u32 n_heads, u32 head_dim, u32 half_rope, Angle angle) {
    __shared__ float2 cs[ROPE_BLOCK_PAIRS];
    const u32 half_dim = head_dim / 2u;
    const u32 first = ROPE_PAIRS * blockIdx.y * blockDim.x;
    const u32 p0 = first + ROPE_PAIRS * threadIdx.x;
    const u32 width = p0 < half_dim ? min(ROPE_PAIRS, half_dim - p0) : 0u;
    const u32 turn = half_rope > p0 ? min(width, half_rope - p0) : 0u;
    const bool vec = rope_quad_vectors(input, output, half_dim);
    float c[ROPE_PAIRS], s[ROPE_PAIRS];
    for (u32 base = 0; base < n_heads; base += blockDim.y * ROPE_HEADS) {
        const u32 h = base + threadIdx.y * ROPE_HEADS;
        const u32 count = h < n_heads && width > 0u ? min(ROPE_HEADS, n_heads - h) : 0u;
        const u64 at = (u64(blockIdx.x) * n_heads + h) * head_dim + p0;
        RopeQuad<T> q;
        rope_quad_load(input, at, head_dim, half_dim, count, width, vec, q);
        if (base == 0u) {
            rope_block_angles(first, half_rope > first ? min(ROPE_BLOCK_PAIRS, half_rope - first) : 0u, angle, cs);
#pragma unroll
            for (u32 k = 0; k < ROPE_PAIRS; ++k) {
                const float2 t = k < turn ? cs[p0 - first + k] : make_float2(1.0f, 0.0f);
                c[k] = t.x;
                s[k] = t.y;
            }
        }
        rope_quad_store(output, at, head_dim, half_dim, count, width, turn, vec, c, s, q);
    }
}

// ---- rows normalized by their sum of squares (rms_norm, l2_norm) ----

// A vector's factors as loaded (up to two 16-byte words: N f32 factors of a
// 16-bit row take two), held from their load to their use.
struct FactorWords {
    uint4 w[2];
};

// The factors of a row without weights.
struct UnitFactors {
    template <int N> __device__ __forceinline__ void load(u64, FactorWords&) const {}
    template <int N> __device__ __forceinline__ void apply(const FactorWords&, float (&f)[N]) const {
#pragma unroll
        for (int j = 0; j < N; ++j) f[j] = 1.0f;
    }
    __device__ __forceinline__ float operator()(u64) const { return 1.0f; }
};

// The row of dim elements at xr into yr, the threads of the row (threadIdx.x,
// blockDim.x of them) striding over it: y = x * inv * f, inv = inv_of(sq)
// (sq this thread's sum of the row's squares in f32; inv_of reduces it over
// the row, all threads of the row call it), f the element's factor:
// factors.load<N>(e, words) issues the loads of the N factors of elements
// e .. e + N - 1 and factors.apply<N>(words, f) gives them as floats;
// factors(i) returns element i's. 16-byte vectors when dim is a multiple of
// the vector width (VEC: 4 f32, 8 f16/bf16) and vec_ok (the caller's check
// that xr, yr and what factors reads are 16-byte aligned): a thread keeps its
// first 32 / VEC vectors in registers as the raw words loaded, all issued
// before any arithmetic, between the sum and the output, and re-reads the
// rest; the factors load after the sum, each before its vector's store.
// Where the row has at most one vector a thread (the launch of few rows),
// that vector's factors load with it instead: loaded after the sum, a
// factor waits a memory latency there (and each later one waits for the
// store ahead of it, which the compiler cannot tell from the factors'
// memory), with nothing else to hide it. Else a scalar path. Each thread
// writes only the elements it read, after the sum, so yr may be xr (in place).
template <typename T, typename InvOf, typename Factors>
__device__ __forceinline__ void sumsq_scale_row(const T* xr, T* yr, u32 dim, bool vec_ok, InvOf&& inv_of, const Factors& factors) {
    const u32 tid = threadIdx.x, bs = blockDim.x;
    constexpr int VEC = VecOf<T>::N;
    constexpr int CACHE = 32 / VEC;

    float sq = 0.0f;
    if (dim % VEC == 0 && vec_ok) {
        const u32 nv = dim / VEC;
        const uint4* xv = reinterpret_cast<const uint4*>(xr);
        // At most one vector a thread (rowLaunch's launch of few rows): that
        // vector's factors load with it, into the held words the thread
        // does not need (xc[1], xc[2]), so no registers are added.
        const bool one = nv <= bs;
        uint4 xc[CACHE];
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) xc[c] = xv[vi];
        }
        if (one && tid < nv) {
            FactorWords fw{};
            factors.template load<VEC>(u64(tid) * VEC, fw);
            xc[1] = fw.w[0];
            xc[2] = fw.w[1];
        }
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
            if (tid + u32(c) * bs < nv) {
                float v[VEC];
                unpack16<T>(xc[c], v);
#pragma unroll
                for (int j = 0; j < VEC; ++j) sq += v[j] * v[j];
            }
        }
        for (u32 vi = tid + CACHE * bs; vi < nv; vi += bs) {
            float v[VEC];
            unpack16<T>(xv[vi], v);
#pragma unroll
            for (int j = 0; j < VEC; ++j) sq += v[j] * v[j];
        }
        const float inv = inv_of(sq);
        auto emit = [&](u32 vi, uint4 raw, const FactorWords& fw) {
            float v[VEC];
            unpack16<T>(raw, v);
            float f[VEC];
            factors.template apply<VEC>(fw, f);
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[j] *= inv * f[j];
            store_vec(yr + u64(vi) * VEC, v);
        };
        auto emit_loaded = [&](u32 vi, uint4 raw) {
            FactorWords fw;
            factors.template load<VEC>(u64(vi) * VEC, fw);
            emit(vi, raw, fw);
        };
        if (one) {
            if (tid < nv) emit(tid, xc[0], FactorWords{{xc[1], xc[2]}});
            return;
        }
#pragma unroll
        for (int c = 0; c < CACHE; ++c) {
            const u32 vi = tid + u32(c) * bs;
            if (vi < nv) emit_loaded(vi, xc[c]);
        }
        for (u32 vi = tid + CACHE * bs; vi < nv; vi += bs) emit_loaded(vi, xv[vi]);
    } else {
        for (u32 i = tid; i < dim; i += bs) {
            const float v = to_f(xr[i]);
            sq += v * v;
        }
        const float inv = inv_of(sq);
        for (u32 i = tid; i < dim; i += bs) yr[i] = from_f<T>(to_f(xr[i]) * inv * factors(u64(i)));
    }
}

// ---- Hopper's warpgroup MMA (wgmma, sm_90a) ----
//
// MLXN_WGMMA is defined where the program is compiled with sm_90a's
// architecture-specific features (the backend's --gpu-architecture=sm_90a,
// tried first on compute capability 9.x), the only target that has wgmma, and
// in the CPU simulation (shaders/cuda/tests/sim/sim_runtime.h defines
// MLXN_SIM_WGMMA and models the instructions). The helpers that need sm_90a
// exist only under it; a kernel keeps another path for every other target.
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)) || defined(MLXN_SIM_WGMMA)
#define MLXN_WGMMA 1
#endif

// Bytes of dynamic shared memory the launch gave the block (%dynamic_smem_size),
// so that a kernel can tell which of its launch shapes it runs under.
__device__ __forceinline__ u32 dynamic_smem_bytes() {
    u32 r;
    asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(r));
    return r;
}

// The 128-byte swizzled layout of a K-major operand (the PTX ISA's canonical
// layout of wgmma operands with 128B swizzle, also what TMA's SWIZZLE_128B
// writes): rows of 128 bytes (64 16-bit elements along k), 8-row groups of
// 1024 bytes, the 16-byte chunk c of row r stored at chunk c ^ (r % 8) of
// its row. The hardware takes the swizzle from the shared address itself
// (bits 4-6 xor bits 7-9), so a tile starts at a multiple of 1024 bytes.
// The byte offset of chunk `chunk` (0-7) of row `row` in such a tile:
__device__ __forceinline__ u32 sw128_offset(u32 row, u32 chunk) {
    return row * 128u + ((chunk ^ (row & 7u)) << 4);
}

// The wgmma matrix descriptor of such a tile at p (shared memory; the PTX
// ISA's "matrix descriptor"): bits 0-13 the start address >> 4, bits 16-29
// the leading byte offset >> 4 (unused by swizzled K-major layouts: 1),
// bits 32-45 the stride byte offset >> 4 (1024: one 8-row group to the
// next), bits 49-51 the base offset (0: p's swizzle pattern starts at row 0,
// its address bits 7-9 being 0), bits 62-63 the layout (1: 128B swizzle). The
// operand is the 64 (A) or N (B) rows from p, 16 elements of k: p = tile +
// 32 j bytes takes the k16 slice j of the tile's 64 k (the hardware swizzles
// the sum), and adding b >> 4 to a descriptor moves its start by b bytes
// (a multiple of 16, the address staying below 256 KiB).
__device__ __forceinline__ u64 wgmma_desc_sw128(const void* p) {
    return u64((smem_addr(p) >> 4) & 0x3fffu) | (u64(1) << 16) | (u64(1024 >> 4) << 32) | (u64(1) << 62);
}

// The descriptor of an MN-major operand in the same 128-byte swizzled rows
// (the B operand with imm-trans-b = 1: N contiguous in memory), e.g. V
// stored [keys, D] as D / 64 column blocks of 64-value rows: each 128-byte
// row holds 64 consecutive n at one k, 8 rows (8 k, 1024 bytes: the stride
// byte offset) make a swizzle atom, and the next 64 n lie `lbo` bytes further
// (the leading byte offset: one column block). The PTX ISA's canonical
// MN-major 128B layout ((8, 8, m), (8, k)) : ((1, 8, LBO), (64, SBO)) in
// 16-bit elements. p = tile + 2048 j bytes takes keys 16 j .. 16 j + 15.
__device__ __forceinline__ u64 wgmma_desc_sw128_mn(const void* p, u32 lbo) {
    return u64((smem_addr(p) >> 4) & 0x3fffu) | (u64((lbo >> 4) & 0x3fffu) << 16) | (u64(1024 >> 4) << 32) | (u64(1) << 62);
}

#ifdef MLXN_WGMMA
// Orders the warpgroup's register accesses before the wgmma that follow
// (wgmma.fence: before the first wgmma of a sequence and after any access to
// their accumulators), commits the wgmma issued since the last commit as one
// group, and waits until at most N groups are pending.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }
// wgmma reads shared memory through the async proxy: a thread's generic
// writes (st.shared, and cp.async once waited for) become visible to it after
// this fence (then a barrier, for other threads' wgmma).
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Register reallocation between warpgroups (setmaxnreg, sm_90a): a
// warp-specialized block launched with R registers a thread gives some back
// in its producer warpgroup (dec) and takes them in its consumers (inc);
// every warp of a warpgroup executes it, N a multiple of 8 in [24, 256], and
// the consumers' N times their threads plus the producers' must fit the
// register file the launch holds.
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(N)); }

// TMA (cp.async.bulk.tensor) through a tensor map the backend encoded at
// dispatch (a TENSOR_MAP binding: `map` points at the CUtensorMap in global
// memory). tmap_acquire once before a thread's first copy through a map: the
// map was written by a host copy, through the generic proxy. A copy moves the
// box at element coordinates (c0, c1) into shared memory at dst (1024-byte
// aligned for a 128-byte swizzle: the swizzle follows the address), elements
// past the map's dims as zeros, and completes `bytes` of the transaction
// count that mbar_expect_tx announced on bar.
__device__ __forceinline__ void tmap_acquire(const void* map) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" :: "l"(map) : "memory");
}
// One arrival on bar that also expects `bytes` more of the phase's transaction
// count (the phase completes when both its arrivals and its bytes are in).
__device__ __forceinline__ void mbar_arrive_expect_tx(u64* bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tma_load_2d(void* dst, const void* map, int c0, int c1, u64* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(smem_addr(bar)) : "memory");
}
// Keeps the compiler from moving accumulator reads and writes across the
// asynchronous wgmma that own them (between issue and wait_group).
template <int N>
__device__ __forceinline__ void acc_fence(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

// The accumulator operands of m64nNk16: N / 2 floats a thread.
#define MLXN_WG_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define MLXN_WG_R1 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define MLXN_WG_R2 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define MLXN_WG_R3 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MLXN_WG_R4 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define MLXN_WG_R5 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define MLXN_WG_R6 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define MLXN_WG_R7 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define MLXN_WG_D32 "{" MLXN_WG_R0 ", " MLXN_WG_R1 "}"
#define MLXN_WG_D64 "{" MLXN_WG_R0 ", " MLXN_WG_R1 ", " MLXN_WG_R2 ", " MLXN_WG_R3 "}"
#define MLXN_WG_D80 "{" MLXN_WG_R0 ", " MLXN_WG_R1 ", " MLXN_WG_R2 ", " MLXN_WG_R3 ", " MLXN_WG_R4 "}"
#define MLXN_WG_D96 "{" MLXN_WG_R0 ", " MLXN_WG_R1 ", " MLXN_WG_R2 ", " MLXN_WG_R3 ", " MLXN_WG_R4 ", " MLXN_WG_R5 "}"
#define MLXN_WG_D112 "{" MLXN_WG_R0 ", " MLXN_WG_R1 ", " MLXN_WG_R2 ", " MLXN_WG_R3 ", " MLXN_WG_R4 ", " MLXN_WG_R5 ", " \
                     MLXN_WG_R6 "}"
#define MLXN_WG_D128 "{" MLXN_WG_R0 ", " MLXN_WG_R1 ", " MLXN_WG_R2 ", " MLXN_WG_R3 ", " MLXN_WG_R4 ", " MLXN_WG_R5 ", " \
                     MLXN_WG_R6 ", " MLXN_WG_R7 "}"
#define MLXN_WG_F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define MLXN_WG_F16(i) MLXN_WG_F4(i), MLXN_WG_F4(i + 4), MLXN_WG_F4(i + 8), MLXN_WG_F4(i + 12)
#define MLXN_WG_F32(i) MLXN_WG_F16(i), MLXN_WG_F16(i + 16)
// d += A B^T on the warpgroup's tensor cores (wgmma.mma_async m64nNk16,
// N = 2 R: 256, 224, 192, 160, 128, 64 or 16): A the 64 x 16 operand of
// descriptor a, B the N x 16 operand of descriptor b, both K-major (no
// transpose), 16-bit floats (bf16 or f16), f32 accumulators. d is the
// thread's share of the 64 x N tile: d[i] at row 16 (warp % 4) + lane / 4 + 8 ((i / 2) % 2), column
// 8 (i / 4) + 2 (lane % 4) + i % 2 (the PTX ISA's accumulator fragment of
// m64nNk16). Issued asynchronously: d belongs to the wgmma until a
// wgmma_wait covers its group.
// Both 16-bit types' overloads for R accumulators (N = 2 R); IA, IB, IP the
// asm operand numbers of a, b and the scale-d flag (R, R + 1, R + 2), D the
// accumulator list, then the accumulator operands.
#define MLXN_WGMMA_SS_T(TY, R, N, IA, IB, IP, D, ...)                                                            \
    __device__ __forceinline__ void wgmma_##TY(float (&d)[R], u64 a, u64 b) {                                    \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IP ", 0;\n"                                           \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TY "." #TY " " D ", %" #IA ", %" #IB     \
                     ", p, 1, 1, 0, 0;\n}\n"                                                                     \
                     : __VA_ARGS__                                                                               \
                     : "l"(a), "l"(b), "r"(1));                                                                  \
    }
#define MLXN_WGMMA_SS(R, N, IA, IB, IP, D, ...)                   \
    MLXN_WGMMA_SS_T(bf16, R, N, IA, IB, IP, D, __VA_ARGS__)      \
    MLXN_WGMMA_SS_T(f16, R, N, IA, IB, IP, D, __VA_ARGS__)
MLXN_WGMMA_SS(128, 256, 128, 129, 130, MLXN_WG_D128, MLXN_WG_F32(0), MLXN_WG_F32(32), MLXN_WG_F32(64), MLXN_WG_F32(96))
MLXN_WGMMA_SS(112, 224, 112, 113, 114, MLXN_WG_D112, MLXN_WG_F32(0), MLXN_WG_F32(32), MLXN_WG_F32(64), MLXN_WG_F16(96))
MLXN_WGMMA_SS(96, 192, 96, 97, 98, MLXN_WG_D96, MLXN_WG_F32(0), MLXN_WG_F32(32), MLXN_WG_F32(64))
MLXN_WGMMA_SS(80, 160, 80, 81, 82, MLXN_WG_D80, MLXN_WG_F32(0), MLXN_WG_F32(32), MLXN_WG_F16(64))
MLXN_WGMMA_SS(64, 128, 64, 65, 66, MLXN_WG_D64, MLXN_WG_F32(0), MLXN_WG_F32(32))
MLXN_WGMMA_SS(32, 64, 32, 33, 34, MLXN_WG_D32, MLXN_WG_F32(0))
MLXN_WGMMA_SS(8, 16, 8, 9, 10, "{%0, %1, %2, %3, %4, %5, %6, %7}", MLXN_WG_F4(0), MLXN_WG_F4(4))
template <typename T, int R>
__device__ __forceinline__ void wgmma_ss(float (&d)[R], u64 a, u64 b) {
    if constexpr (SameType<T, __nv_bfloat16>::value) wgmma_bf16(d, a, b);
    else wgmma_f16(d, a, b);
}
// d += A B with A from registers (the RS form of m64nNk16, N = 2 R: 256 or
// 128) and B MN-major in shared memory (imm-trans-b = 1; descriptor b from
// wgmma_desc_sw128_mn). a is the thread's share of the 64 x 16 A operand,
// pairs of 16-bit values: warp w % 4 holds rows 16 w .. 16 w + 15, lane l
// a[0] = (row g, k 2 t, 2 t + 1), a[1] = (row g + 8, same k), a[2] = (row
// g, k 2 t + 8, 2 t + 9), a[3] = (row g + 8, those k), g = l / 4, t = l % 4
// (the PTX ISA's A fragment of m64nNk16, mma.sync m16n8k16's per warp). So
// the accumulator fragment of an m64nNk16 product is, pairs rounded to
// 16 bits, the A operand of the next: keys 16 j .. 16 j + 15 are d[8 j ..
// 8 j + 7] as a[i] = (d[8 j + 2 i], d[8 j + 2 i + 1]). The registers of a
// belong to the wgmma until a wgmma_wait covers its group.
// As MLXN_WGMMA_SS: IA the first of a's four operand numbers (R), IB b's
// (R + 4), IP the flag's (R + 5); NAME rs with TB 1 (B MN-major), rsk with
// TB 0 (B K-major, below).
#define MLXN_WGMMA_RS_T(NAME, TB, TY, R, N, IA0, IA1, IA2, IA3, IB, IP, D, ...)                                \
    __device__ __forceinline__ void wgmma_##NAME##_##TY(float (&d)[R], const u32 (&a)[4], u64 b) {               \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #IP ", 0;\n"                                           \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." #TY "." #TY " " D ", {%" #IA0 ", %" #IA1  \
                     ", %" #IA2 ", %" #IA3 "}, %" #IB ", p, 1, 1, " #TB ";\n}\n"                                  \
                     : __VA_ARGS__                                                                               \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));                              \
    }
#define MLXN_WGMMA_RS(NAME, TB, R, N, IA0, IA1, IA2, IA3, IB, IP, D, ...)                       \
    MLXN_WGMMA_RS_T(NAME, TB, bf16, R, N, IA0, IA1, IA2, IA3, IB, IP, D, __VA_ARGS__)          \
    MLXN_WGMMA_RS_T(NAME, TB, f16, R, N, IA0, IA1, IA2, IA3, IB, IP, D, __VA_ARGS__)
MLXN_WGMMA_RS(rs, 1, 128, 256, 128, 129, 130, 131, 132, 133, MLXN_WG_D128, MLXN_WG_F32(0), MLXN_WG_F32(32), MLXN_WG_F32(64), MLXN_WG_F32(96))
MLXN_WGMMA_RS(rs, 1, 64, 128, 64, 65, 66, 67, 68, 69, MLXN_WG_D64, MLXN_WG_F32(0), MLXN_WG_F32(32))
template <typename T, int R>
__device__ __forceinline__ void wgmma_rs(float (&d)[R], const u32 (&a)[4], u64 b) {
    if constexpr (SameType<T, __nv_bfloat16>::value) wgmma_rs_bf16(d, a, b);
    else wgmma_rs_f16(d, a, b);
}
// The RS form with B K-major (imm-trans-b = 0; descriptor b from
// wgmma_desc_sw128: B's N rows of 128-byte swizzled K), at N = 16 and 32 (the
// gated delta net's walk: its V slice of 32 rows): wgmma_rsk_bf16 /
// wgmma_rsk_f16 on 8 or 16 accumulators, a as wgmma_rs's.
MLXN_WGMMA_RS(rsk, 0, 16, 32, 16, 17, 18, 19, 20, 21, "{" MLXN_WG_R0 "}", MLXN_WG_F16(0))
MLXN_WGMMA_RS(rsk, 0, 8, 16, 8, 9, 10, 11, 12, 13, "{%0, %1, %2, %3, %4, %5, %6, %7}", MLXN_WG_F4(0), MLXN_WG_F4(4))

// As acc_fence, for the 16-bit A operand registers of the RS form.
template <int N>
__device__ __forceinline__ void reg_fence(u32 (&a)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(a[i][0]), "+r"(a[i][1]), "+r"(a[i][2]), "+r"(a[i][3]) :: "memory");
}

// The four k16 wgmma of a stage (64 values of k) at byte offset `offset`
// from the descriptors' tiles (da: this warpgroup's 64 rows of x, db: the
// weight's BN rows), committed as one group.
template <typename TW, int R>
__device__ __forceinline__ void wg_stage(float (&acc)[R], u64 da, u64 db, u32 offset) {
    const u64 at = u64(offset) >> 4;
    acc_fence(acc);
    wgmma_fence();
#pragma unroll
    for (u32 j = 0; j < 4; ++j) wgmma_ss<TW>(acc, da + at + 2 * j, db + at + 2 * j);
    wgmma_commit();
}

// The k loop of a 128 x BN tile on wgmma (dense's wg_tile, the GGUF tiles'
// gwg_tile): 256 threads, warpgroup g takes tile rows 64 g .. 64 g + 63 with
// m64nBNk16 (acc: the thread's BN / 2 accumulators). smem (1024-byte
// aligned) holds STAGES stages of 128 + BN rows of 128 swizzled bytes (x's
// rows, then the weight's), 64 values of k a stage. issue(stage, kt) starts
// k tile kt's copies into `stage` (cp.async, committed here) or its loads
// into registers; park(stage) stores what issue held in registers. Copies
// run AHEAD = STAGES - 2 tiles ahead. A step: wait for this thread's copies
// of tile kt, make them visible to the async proxy, barrier (every copy of
// tile kt landed; both warpgroups are past tile kt - 2's wgmma), start tile
// kt + AHEAD into the stage tile kt - 2 held and issue tile kt's four k16
// wgmma (in that order where every copy is a cp.async, COPIES_FIRST, the
// other way round with a register path), wait for tile kt - 1's: one group
// always runs while the next is issued. Then park tile kt + AHEAD.
template <typename TW, u32 BN, u32 STAGES, bool COPIES_FIRST, typename Issue, typename Park>
__device__ __forceinline__ void wg_pipeline(float (&acc)[BN / 2], unsigned char* smem, u32 KT, Issue&& issue, Park&& park) {
    constexpr u32 AHEAD = STAGES - 2;
    constexpr u32 STAGE = (128u + BN) * 128u;  // bytes of a stage
    static_assert(STAGES >= 3, "a stage computed, one still read by the wgmma before it, one filled");
    // Stage 0's descriptors: this warpgroup's 64 rows of x, and the weight's BN rows.
    const u64 da = wgmma_desc_sw128(smem + (threadIdx.x >> 7) * 64u * 128u);
    const u64 db = wgmma_desc_sw128(smem + 128u * 128u);
    for (u32 s = 0; s < AHEAD; ++s) {
        if (s < KT) {
            issue(s, s);
            park(s);
        }
        cp_async_commit();
    }
    for (u32 kt = 0; kt < KT; ++kt) {
        cp_async_wait<AHEAD - 1>();
        fence_proxy_async_smem();
        __syncthreads();
        const u32 next = kt + AHEAD;
        auto start_next = [&] {
            if (next < KT) issue(next % STAGES, next);
            cp_async_commit();
        };
        // Both operands by cp.async: the copies go out before the wgmma.
        // With a register path they go after it, so that the loads into
        // registers wait behind the tensor work instead of ahead of it
        // (measured: hf2q_dense_mm_bf16_f32_tensor 4096^3 -9 %, while the
        // cp.async path lost up to 9 % at 512 tokens in that order:
        // bench/notes/dense-widths-2026-11-27.md).
        if constexpr (COPIES_FIRST) start_next();
        wg_stage<TW>(acc, da, db, (kt % STAGES) * STAGE);
        if constexpr (!COPIES_FIRST) start_next();
        wgmma_wait<1>();
        acc_fence(acc);
        // Tile kt + AHEAD's stage held tile kt - 2, whose wgmma every thread
        // waited for before this step's barrier.
        if (next < KT) park(next % STAGES);
    }
    wgmma_wait<0>();
    acc_fence(acc);
    cp_async_wait<0>();
}
#endif  // MLXN_WGMMA
// ---- the linear-attention gates (compute_g_beta, gated_delta_net's fused decode step) ----

// softplus(x) = x for x > 20 (PyTorch's threshold), else log1p(exp(x)).
__device__ __forceinline__ float softplus_f32(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}
// g = -exp(A_log) softplus(a + dt_bias) (the log decay), beta = sigmoid(b), f32 with the accurate expf / log1pf.
__device__ __forceinline__ void gdn_gates(float a, float b, float a_log, float dt_bias, float& g, float& beta) {
    g = -expf(a_log) * softplus_f32(a + dt_bias);
    beta = 1.0f / (1.0f + expf(-b));
}

// ---- gated activations (silu_mul, gelu, and the per-expert gate/up products) ----

// silu(g) = g / (1 + exp(-g)) with the fast exp and division (__expf,
// __fdividef: a relative error of a few ulp plus |g| 2^-24 from rounding the
// exponent, under 1e-5 for |g| < 88); exp(-g) overflowing to +inf (or past
// 2^126) gives -0, the limit, never NaN.
struct Silu {
    __device__ __forceinline__ float operator()(float g) const { return __fdividef(g, 1.0f + __expf(-g)); }
};

// GELU, tanh approximation: 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x +
// 0.044715 x^3), computed as x / (1 + exp(-2u)) (the same function; see
// shaders/common.metal) with the fast exp and division (a relative error of
// a few ulp plus |2u| 2^-24, the order of the error 2u already carries from
// f32); exp(-2u) overflowing gives -0, the limit, never NaN.
struct GeluTanh {
    __device__ __forceinline__ float operator()(float x) const {
        const float two_u = 1.5957691216057308f * x * (1.0f + 0.044715f * x * x);  // 2 sqrt(2/pi) (x + 0.044715 x^3)
        return __fdividef(x, 1.0f + __expf(-two_u));
    }
};

// ---- MLX affine quantization (quantized_matmul, quantized_matmul_id) ----
//
// w[j, k] = scale[j, k / gs] * q[j, k] + bias[j, k / gs] from MLX's packed
// rows (ts/ops/quantized_matmul.ts writes the format down). mlx-native's
// kernels take any K and group size: rows of q_row_bytes(K, bits) bytes,
// value k at bit k * bits (q_value decodes one).
//
// In MLX's layout (group size 32, 64 or 128 dividing K) a row is K / 32
// chunks of 32 values in BITS words (16 bytes for 4 bits, 24 for 6, 32
// for 8), each inside one group. A chunk is dequantized to 16 pairs of
// 16-bit values (TC, the tensor cores' type) with w = s * q + b rounded once:
// q is made exact in TC by or-ing its bits into the mantissa of a power of
// two (1024 for f16, 128 for bf16: 4- and 6-bit q) and subtracting it, then
// one packed fma applies s and b; 8-bit q under bf16 go through f32 instead
// (q does not fit bf16's mantissa below 256). The pairs come in the order
// the bits fall (the pair order below), which permutes the 32 values; a dot
// product only needs x permuted alike (x_pairs2), and tiles staged for
// ldmatrix get the natural order back (from_pairs).

// Bytes of a packed row of K values (any K: whole words for 4 and 8 bits,
// 3 bytes per 4 values for 6).
__device__ __forceinline__ u64 q_row_bytes(u32 K, u32 bits) {
    return bits == 6 ? 3ull * ((K + 3u) / 4u) : 4ull * ((u64(K) * bits + 31u) / 32u);
}
// Whether the rows follow MLX's chunked layout.
__device__ __forceinline__ bool q_chunked(u32 K, u32 gs) {
    return (gs == 32u || gs == 64u || gs == 128u) && K % gs == 0u;
}
// q of value k of a row in any layout: the bits at bit k * bits.
__device__ __forceinline__ u32 q_value(const unsigned char* row, u32 k, u32 bits) {
    const u64 bit = u64(k) * bits;
    const u32 s = u32(bit & 7u);
    const unsigned char* p = row + (bit >> 3);
    u32 v = u32(p[0]) >> s;
    if (s + bits > 8u) v |= u32(p[1]) << (8u - s);
    return v & ((1u << bits) - 1u);
}

// The BITS words of a chunk at p (16-byte aligned for 4 and 8 bits, 8-byte
// for 6). STREAM: evict-first loads (a weight read once).
template <int BITS, bool STREAM>
__device__ __forceinline__ void load_chunk(const unsigned char* p, u32 (&w)[BITS]) {
    if constexpr (BITS == 6) {
        const uint2* v = reinterpret_cast<const uint2*>(p);
#pragma unroll
        for (int i = 0; i < 3; ++i) {
            const uint2 t = STREAM ? __ldcs(v + i) : __ldg(v + i);
            w[2 * i] = t.x;
            w[2 * i + 1] = t.y;
        }
    } else {
        const uint4* v = reinterpret_cast<const uint4*>(p);
#pragma unroll
        for (int i = 0; i < BITS / 4; ++i) {
            const uint4 t = STREAM ? __ldcs(v + i) : __ldg(v + i);
            w[4 * i] = t.x;
            w[4 * i + 1] = t.y;
            w[4 * i + 2] = t.z;
            w[4 * i + 3] = t.w;
        }
    }
}

// Bits 24a .. 24a + 23 of a 6-bit chunk's 192 bits: values 4a .. 4a + 3.
__device__ __forceinline__ u32 triple(const u32 (&w)[6], int a) {
    const int bit = 24 * a, i = bit / 32, s = bit % 32;
    u32 v = w[i] >> s;
    if (s > 8) v |= w[i + 1] << (32 - s);
    return v & 0xffffffu;
}

// The constants of the exact q of dequantize(): a power of two P whose
// mantissa unit is 1, P with the sign flipped, and 1, as packed pairs.
// The group-column engines' bound on x's copy in shared memory (one token:
// quantized_matmul.cu's qmv_gc, quantized_matmul_ggml.cu's Q4_K form; ts:
// GC_MAX_SHARED): past it the vector engines take the product.
constexpr u32 GC_MAX_SHARED = 98304;
// The engine's dynamic shared memory: x permuted (K padded to whole rounds
// of 8 groups, 2 bytes a value), its group sums, and 1 KiB (the zero area
// and the warps' sums).
__device__ __forceinline__ u32 gc_shared(u32 K, u32 gs) {
    const u32 r = (K / gs + 7u) / 8u;
    return r * 8u * gs * 2u + r * 8u * 4u + 1024u;
}

__device__ __forceinline__ float gate_activation(float g, u32 activation);  // below, with the gated products

// The group-column engines' end (qmv_gc, and for Q4_K
// gmv_gc_q4k): lane (g, t)'s sums of rows g (a) and g + 8 (b) over its
// groups, added over the warp's 4 lanes t, then over the W warps of the
// tile (warp part 0's lanes add red's rows, one barrier that every warp of
// the block reaches), and stored below N: y[row0 + r] for the tile's 16 rows,
// or with GU (rows a a gate's, b the up projection's of the same 8 outputs)
// y[row0 + g] = act(a) * b (gate_activation). red: 4 warps x 16 floats of
// shared memory.
template <u32 W, bool GU, typename TY>
__device__ __forceinline__ void gc_store(float a, float b, float* red, u32 warp, u32 lane, u32 part, u32 row0, u32 N, TY* y,
                                         u32 activation = 0u) {
    const u32 g = lane >> 2, t = lane & 3u;
    a += __shfl_xor_sync(0xffffffffu, a, 1);
    a += __shfl_xor_sync(0xffffffffu, a, 2);
    b += __shfl_xor_sync(0xffffffffu, b, 1);
    b += __shfl_xor_sync(0xffffffffu, b, 2);
    if constexpr (W > 1u) {
        if (t == 0u) {
            red[warp * 16u + g] = a;
            red[warp * 16u + g + 8u] = b;
        }
        __syncthreads();
        if (part == 0u && lane < (GU ? 8u : 16u)) {
            float sa = 0.0f, sb = 0.0f;
#pragma unroll
            for (u32 q = 0; q < W; ++q) {
                sa += red[(warp + q) * 16u + lane];
                if constexpr (GU) sb += red[(warp + q) * 16u + lane + 8u];
            }
            if (row0 + lane < N) y[row0 + lane] = from_f<TY>(GU ? gate_activation(sa, activation) * sb : sa);
        }
    } else if (t == 0u) {
        if constexpr (GU) {
            if (row0 + g < N) y[row0 + g] = from_f<TY>(gate_activation(a, activation) * b);
        } else {
            if (row0 + g < N) y[row0 + g] = from_f<TY>(a);
            if (row0 + g + 8u < N) y[row0 + g + 8u] = from_f<TY>(b);
        }
    }
}

// A warp's ring of loads over its `mine` steps (quantized_matmul.cu's vector
// and group-column engines, quantized_matmul_ggml.cu's group-column variant):
// issue(u, i) loads step i into slot u, step(u, i) computes slot u's step i,
// which is then refilled with step i + U, so the loads stay U steps ahead.
template <u32 U, typename Issue, typename Step>
__device__ __forceinline__ void qmv_ring(u32 mine, Issue& issue, Step step) {
#pragma unroll
    for (u32 u = 0; u < U; ++u) issue(u, u);
    for (u32 i0 = 0; i0 < mine; i0 += U) {
#pragma unroll
        for (u32 u = 0; u < U; ++u) {
            const u32 i = i0 + u;
            if (i < mine) {
                step(u, i);
                issue(u, i + U);
            }
        }
    }
}

template <typename T> struct QMagic;
template <> struct QMagic<__half> {
    static constexpr u32 P2 = 0x64006400u;    // 1024
    static constexpr u32 NEG2 = 0xE400E400u;  // -1024
    static constexpr u32 ONE2 = 0x3C003C00u;
};
template <> struct QMagic<__nv_bfloat16> {
    static constexpr u32 P2 = 0x43004300u;    // 128
    static constexpr u32 NEG2 = 0xC300C300u;  // -128
    static constexpr u32 ONE2 = 0x3F803F80u;
};

// x of a group-column engine (qmv_gc, gmv_gc_q4k, gmv_gc_q8_0) on its way
// into shared memory: units of NV 16-byte vectors of x (NV x 16 / sizeof(TX)
// values), unit wd for wd = threadIdx.x, + blockDim.x, ... below `units`,
// zeros for units at or past K values. A thread issues the loads of XB units
// before it hands any to put(wd, r), so a pass waits for L2 once, not once a
// unit (a put that shuffles keeps the compiler from moving later loads above
// it). units is a multiple of 32, so the lanes of a warp take each pass
// together and put may shuffle among them. x 16-byte aligned where vec, else
// read value by value.
template <typename TX, u32 NV, u32 XB, typename Put>
__device__ __forceinline__ void gc_stage_x(const TX* x, u32 K, u32 units, bool vec, Put put) {
    constexpr u32 VPU = NV * 16u / sizeof(TX);
    for (u32 w0 = threadIdx.x; w0 < units; w0 += XB * blockDim.x) {
        uint4 r[XB][NV];
#pragma unroll
        for (u32 j = 0; j < XB; ++j) {
            const u32 wd = w0 + j * blockDim.x;
#pragma unroll
            for (u32 v = 0; v < NV; ++v) r[j][v] = make_uint4(0u, 0u, 0u, 0u);
            if (wd < units && wd * VPU < K) {
                const TX* p = x + u64(wd) * VPU;
                if (vec) {
#pragma unroll
                    for (u32 v = 0; v < NV; ++v) r[j][v] = reinterpret_cast<const uint4*>(p)[v];
                } else {
                    const unsigned char* b = reinterpret_cast<const unsigned char*>(p);
#pragma unroll
                    for (u32 v = 0; v < NV; ++v) {
                        u32 wv[4];
#pragma unroll
                        for (u32 i = 0; i < 4u; ++i) {
                            const unsigned char* q = b + 16u * v + 4u * i;
                            const u32 lo = *reinterpret_cast<const unsigned short*>(q), hi = *reinterpret_cast<const unsigned short*>(q + 2);
                            wv[i] = sizeof(TX) == 4 ? *reinterpret_cast<const u32*>(q) : lo | (hi << 16);
                        }
                        r[j][v] = make_uint4(wv[0], wv[1], wv[2], wv[3]);
                    }
                }
            }
        }
#pragma unroll
        for (u32 j = 0; j < XB; ++j) {
            const u32 wd = w0 + j * blockDim.x;
            if (wd >= units) break;
            put(wd, r[j]);
        }
    }
}

// ---- the group-column engine (4 bits, one token; quantized_matmul.cu and
// quantized_matmul_id.cu) ----

// The engine's shared memory (gc_shared(K, GS) bytes of dynamic shared
// memory): x permuted, its group sums, the zero area, the warps' sums.
struct GcShared {
    uint4* xp;
    float* xsum;
    uint4* zb;
    float* red;
};

// x staged by the block into the engine's shared memory (see qmv_gc: x
// rounded to T, permuted as the nibble shifts pair its values, zeros past K;
// the group sums of the rounded values), the zero area cleared, then a
// barrier. Every thread of the block calls it.
template <typename TX, typename T, u32 GS>
__device__ __forceinline__ GcShared gc_stage(const TX* x, u32 K) {
    constexpr u32 V = GS / 16u;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const u32 G = K / GS, R = (G + 7u) / 8u, Kp = R * 8u * GS;
    GcShared sh;
    sh.xp = reinterpret_cast<uint4*>(smem_raw);
    sh.xsum = reinterpret_cast<float*>(smem_raw + u64(Kp) * 2u);
    sh.zb = reinterpret_cast<uint4*>(sh.xsum + R * 8u);  // 4 V x 16 zero bytes: B's pairs of a lane not in its column
    sh.red = reinterpret_cast<float*>(sh.zb + 4u * V);
    uint4* xp = sh.xp;
    float* xsum = sh.xsum;
    // Kp / 8 units of 8 values, a multiple of 32: whole warps take each pass; a group's
    // GS / 8 units are consecutive lanes.
    constexpr u32 NV = sizeof(TX) == 4 ? 2u : 1u;
    gc_stage_x<TX, NV, 4u>(x, K, Kp / 8u, true, [&](u32 wd, const uint4 (&raw)[NV]) {
        uint4 r = raw[0];
        if constexpr (sizeof(TX) == 4) {
            // f32 x rounded to T, as the vector engine rounds it.
            const float4 lo = *reinterpret_cast<const float4*>(&raw[0]), hi = *reinterpret_cast<const float4*>(&raw[NV - 1u]);
            r = make_uint4(pack2<T>(lo.x, lo.y), pack2<T>(lo.z, lo.w), pack2<T>(hi.x, hi.y), pack2<T>(hi.z, hi.w));
        }
        xp[wd] = make_uint4(__byte_perm(r.x, r.z, 0x5410), __byte_perm(r.x, r.z, 0x7632), __byte_perm(r.y, r.w, 0x5410),
                            __byte_perm(r.y, r.w, 0x7632));
        float v[8];
        unpack16<T>(r, v);
        float s = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
#pragma unroll
        for (u32 o = 1; o < GS / 8u; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (wd % (GS / 8u) == 0u) xsum[wd / (GS / 8u)] = s;
    });
    for (u32 i = threadIdx.x; i < 4u * V; i += blockDim.x) sh.zb[i] = make_uint4(0u, 0u, 0u, 0u);
    __syncthreads();
    return sh;
}

// One round of a warp's tile into lane (g, t)'s sums: qa / qb the codes of
// rows a and b it loaded (V vectors each, groups g0 = 8 round + 2 t and g0
// + 1), sp / bp their scale and bias pairs (row a's, then row b's; group g0
// low), added to acc_a and acc_b as s C + (b - M s) X.
// LOP3: a code pair as M + q by one lop3 with the magic held in a register
// (given two immediates ptxas emits an AND and an OR, about a fifth of the
// loop's instructions; bench/notes/qmv-lanes-2026-11-28.md); false where
// that register spills (an entry holding every group size).
template <typename T, u32 GS, bool LOP3 = true>
__device__ __forceinline__ void gc_round(const GcShared& sh, const uint4 (&qa)[GS / 16u], const uint4 (&qb)[GS / 16u], const u32 (&sp)[2],
                                         const u32 (&bp)[2], u32 g0, float& acc_a, float& acc_b) {
    constexpr u32 V = GS / 16u, HALF = V / 2u;
    constexpr float M = SameType<T, __half>::value ? 1024.0f : 128.0f;
    const u32 lane = threadIdx.x & 31u, g = lane >> 2, t = lane & 3u;
    auto lo_f = [](u32 v) { return to_f(*reinterpret_cast<const T*>(&v)); };
    auto hi_f = [](u32 v) { const u32 h = v >> 16; return to_f(*reinterpret_cast<const T*>(&h)); };
    const u32 magic = LOP3 ? opaque_u32(QMagic<T>::P2) : QMagic<T>::P2;
    auto ext = [magic](u32 word, u32 s) { return LOP3 ? and_or<0x000F000Fu>(word >> s, magic) : ((word >> s) & 0x000F000Fu) | QMagic<T>::P2; };
    const uint4* xr = sh.xp + g0 * (GS / 8u);
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (u32 v = 0; v < V; ++v) {
        const uint4* xs = g == 2u * t + v / HALF ? xr : sh.zb;
        const u32 wa4[4] = {qa[v].x, qa[v].y, qa[v].z, qa[v].w};
        const u32 wb4[4] = {qb[v].x, qb[v].y, qb[v].z, qb[v].w};
#pragma unroll
        for (u32 e = 0; e < 4; ++e) {
            const uint4 xv = xs[v * 4u + e];
            u32 a[4] = {ext(wa4[e], 0), ext(wb4[e], 0), ext(wa4[e], 4), ext(wb4[e], 4)};
            mma16<T>(c, a, xv.x, xv.y);
            a[0] = ext(wa4[e], 8);
            a[1] = ext(wb4[e], 8);
            a[2] = ext(wa4[e], 12);
            a[3] = ext(wb4[e], 12);
            mma16<T>(c, a, xv.z, xv.w);
        }
    }
    const float x0 = sh.xsum[g0], x1 = sh.xsum[g0 + 1u];
    const float sa0 = lo_f(sp[0]), sa1 = hi_f(sp[0]), sb0 = lo_f(sp[1]), sb1 = hi_f(sp[1]);
    const float ba0 = lo_f(bp[0]), ba1 = hi_f(bp[0]), bb0 = lo_f(bp[1]), bb1 = hi_f(bp[1]);
    acc_a += fmaf(sa0, c[0], (ba0 - M * sa0) * x0) + fmaf(sa1, c[1], (ba1 - M * sa1) * x1);
    acc_b += fmaf(sb0, c[2], (bb0 - M * sb0) * x0) + fmaf(sb1, c[3], (bb1 - M * sb1) * x1);
}


// What holds the vector engine at 0.3-0.6 of copy at one token (ncu, H100,
// Qwen3.6 up q4: issue slots 34 % busy, DRAM 29 %, 16 warps an SM, 10.5
// cycles a warp between issues) is its instructions a weight byte at its
// occupancy: each pair takes a shift, a mask, two packed fmas (the magic
// off, then s q + b) and x's pairs two byte_perms an mma, for one token of
// the mma's eight. Here an mma's A is the codes as 16-bit numbers M + q (M
// = 128 for bf16, 1024 for f16: the code OR'd into the mantissa of M,
// exact; one shift and one lop3 a pair), and its eight columns are the
// eight groups of a round instead of tokens: lane (g, t) takes groups 2t
// and 2t + 1 of rows g and g + 8 (16 rows x 8 groups a warp round), so B's
// column n holds x on group n's k and zeros elsewhere (a lane reads zeros,
// zb, unless g is the group of its current half), and C[row][n] is sum_k x
// (M + q) over group n. The scale and bias come in once a group and row in
// f32: y += s C + (b - M s) X_n, X_n = sum of x over the group (the
// products x (M + q) are exact in f32; the M X term cancels at the cost of
// about 4 bits of the f32 sum for bf16, 7 for f16). x (f32 rounded to T as
// the vector engine rounds it) is permuted once a block into shared memory
// as pairs (0, 4), (1, 5), (2, 6), (3, 7) of each 8 values (the nibbles a
// shift of 0, 4, 8, 12 and one mask pair), zeros past K, with its group
// sums of the rounded values. A warp streams whole rounds of its tile (W
// warps a tile split the rounds, their sums meeting in shared memory), D
// rounds of loads in flight; 128 threads, grid ceil(ceil(N / 16) W / 4)
// (gc_warps); dynamic shared memory gc_shared. About 8 instructions an mma
// (128 bytes of codes) against the vector engine's ~20.
//
// PACKED: w is the weight repacked by (tile, round) units, sc and bi
// unread. Unit (tile, rd) is (2 V + 1) x 32 16-byte vectors; vector 32 v +
// lane (lane = 4 g + t, g0 = 8 rd + 2 t) holds, for v < V, bytes g0 GS / 2 +
// 16 v of row 16 tile + g's codes, for V <= v < 2 V those of row 16 tile + g
// + 8, and at v = 2 V the scale pairs of those two rows, then their bias
// pairs (group g0 low, g0 + 1 high); zeros past N and G. So every load
// instruction of a warp reads 512 contiguous bytes and none is scattered.
// No op repacks weights yet: bench/qmv_packed.cu packs on the host and
// measures this form (bench/notes/qmv-pattern-2026-11-28.md).
//
// GU (the gate-up form of the per-expert products): a tile is 8 outputs,
// its rows a the gate's rows and rows b the up projection's (uw, usc, ubi)
// of the same outputs, stored as act(gate) * up (gc_store). blk:
// the block's index among the product's blocks (blockIdx.x for one
// matrix; a pair's own for the per-expert forms).
template <typename TX, typename T, typename TY, u32 GS, u32 W, u32 DEEP, bool GU = false, bool PACKED = false, bool LOP3 = true>
__device__ __forceinline__ void qmv_gc(const TX* x, const unsigned char* w, const T* sc, const T* bi, TY* y, u32 N, u32 K,
                                       u32 blk, const unsigned char* uw = nullptr, const T* usc = nullptr, const T* ubi = nullptr,
                                       u32 activation = 0u) {
    constexpr u32 V = GS / 16u;        // 16-byte loads of a row a lane a round (its two groups)
    constexpr u32 HALF = V / 2u;       // those of its first group
    constexpr u32 D = (GS == 128u ? 1u : 2u) + DEEP;
    constexpr u32 TPB = 4u / W;
    const u32 G = K / GS, R = (G + 7u) / 8u;
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u32 g = lane >> 2, t = lane & 3u;
    const GcShared sh = gc_stage<TX, T, GS>(x, K);
    const u32 tile = blk * TPB + warp / W, part = warp % W, row0 = tile * (GU ? 8u : 16u);
    const u32 mine = row0 < N && part < R ? (R - part + W - 1u) / W : 0u;
    const u32 ra = min(row0 + g, N - 1u), rb = GU ? ra : min(row0 + g + 8u, N - 1u);
    const unsigned char* wa = w + u64(ra) * (K / 2u);
    const T* sa = sc + u64(ra) * G;
    const T* ba = bi + u64(ra) * G;
    // Row b: the up projection's row ra (GU), else row rb (ra + 8 but at the last tile).
    const unsigned char* wb = GU ? uw + u64(rb) * (K / 2u) : w + u64(rb) * (K / 2u);
    const T* sb = GU ? usc + u64(rb) * G : sc + u64(rb) * G;
    const T* bb = GU ? ubi + u64(rb) * G : bi + u64(rb) * G;
    uint4 qa[D][V], qb[D][V];
    // Scales and biases as 16-bit pairs (first group low): rows a and b.
    u32 sp[D][2], bp[D][2];
    auto pair = [](const T* p, u32 i, bool first, bool second) {
        const u32 lo = first ? u32(*reinterpret_cast<const unsigned short*>(p + i)) : 0u;
        const u32 hi = second ? u32(*reinterpret_cast<const unsigned short*>(p + i + 1u)) : 0u;
        return lo | (hi << 16);
    };
    auto issue = [&](u32 u, u32 j) {
        const u32 g0 = (part + j * W) * 8u + 2u * t;
        if constexpr (PACKED) {
            static_assert(!GU, "qmv_gc: PACKED takes one matrix");
            const uint4* r = reinterpret_cast<const uint4*>(w) + (u64(tile) * R + part + j * W) * ((2u * V + 1u) * 32u) + lane;
            const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
            for (u32 v = 0; v < V; ++v) {
                qa[u][v] = j < mine ? __ldcs(r + v * 32u) : zero;
                qb[u][v] = j < mine ? __ldcs(r + (V + v) * 32u) : zero;
            }
            const uint4 p = j < mine ? __ldcs(r + 2u * V * 32u) : zero;
            sp[u][0] = p.x;
            sp[u][1] = p.y;
            bp[u][0] = p.z;
            bp[u][1] = p.w;
        } else {
#pragma unroll
            for (u32 v = 0; v < V; ++v) {
                if (j < mine && g0 + v / HALF < G) {
                    const u64 off = u64(g0) * (GS / 2u) + v * 16u;
                    qa[u][v] = __ldcs(reinterpret_cast<const uint4*>(wa + off));
                    qb[u][v] = __ldcs(reinterpret_cast<const uint4*>(wb + off));
                } else {
                    qa[u][v] = qb[u][v] = make_uint4(0u, 0u, 0u, 0u);
                }
            }
            const bool f = j < mine && g0 < G, sc2 = j < mine && g0 + 1u < G;
            sp[u][0] = pair(sa, g0, f, sc2);
            sp[u][1] = pair(sb, g0, f, sc2);
            bp[u][0] = pair(ba, g0, f, sc2);
            bp[u][1] = pair(bb, g0, f, sc2);
        }
    };
    float acc_a = 0.0f, acc_b = 0.0f;
    qmv_ring<D>(mine, issue, [&](u32 u, u32 j) { gc_round<T, GS, LOP3>(sh, qa[u], qb[u], sp[u], bp[u], (part + j * W) * 8u + 2u * t, acc_a, acc_b); });
    gc_store<W, GU>(acc_a, acc_b, sh.red, warp, lane, part, row0, N, y, activation);
}

// The pair order of a chunk's 16 pairs (which two of its 32 values pair p
// holds, low then high), as the bits fall:
//   4 bits: pair 4a + j = values (8a + j, 8a + j + 4)   (a the word, j < 4);
//   6, 8 bits: pair 2a + h = values (4a + h, 4a + h + 2) (h < 2).
// Pairs 2e and 2e + 1 (mma step e of a chunk) come from half a word (4
// bits), one 24-bit triple (6) or one word (8).

// Pairs 2e and 2e + 1 of a chunk dequantized: w = s * q + b in TC (s2, b2:
// s and b as TC pairs).
template <typename TC, int BITS>
__device__ __forceinline__ void dequantize2(const u32 (&w)[BITS], int e, float s, float b, u32 s2, u32 b2, u32& p0, u32& p1) {
    if constexpr (BITS == 8 && SameType<TC, __nv_bfloat16>::value) {
        // bf16: q through f32 (2^23 + q, exact, minus 2^23).
        float f[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) f[i] = __uint_as_float(0x4B000000u | ((w[e] >> (8 * i)) & 0xffu)) - 8388608.0f;
        p0 = pack2<TC>(fmaf(s, f[0], b), fmaf(s, f[2], b));
        p1 = pack2<TC>(fmaf(s, f[1], b), fmaf(s, f[3], b));
    } else {
        auto fin = [&](u32 q2) { return fma2<TC>(fma2<TC>(q2 | QMagic<TC>::P2, QMagic<TC>::ONE2, QMagic<TC>::NEG2), s2, b2); };
        if constexpr (BITS == 4) {
            const u32 v = w[e >> 1] >> (8 * (e & 1));
            p0 = fin(v & 0x000f000fu);
            p1 = fin((v >> 4) & 0x000f000fu);
        } else if constexpr (BITS == 6) {
            const u32 tr = triple(w, e);
            p0 = fin((tr & 0x3fu) | ((tr << 4) & 0x3f0000u));
            p1 = fin(((tr >> 6) & 0x3fu) | ((tr >> 2) & 0x3f0000u));
        } else {
            p0 = fin(w[e] & 0x00ff00ffu);
            p1 = fin((w[e] >> 8) & 0x00ff00ffu);
        }
    }
}

// The whole chunk dequantized, in BITS's pair order.
template <typename TC, int BITS>
__device__ __forceinline__ void dequantize(const u32 (&w)[BITS], float s, float b, u32 (&out)[16]) {
    const u32 s2 = pack2<TC>(s, s), b2 = pack2<TC>(b, b);
#pragma unroll
    for (int e = 0; e < 8; ++e) dequantize2<TC, BITS>(w, e, s, b, s2, b2, out[2 * e], out[2 * e + 1]);
}

// Pairs 2e and 2e + 1 of BITS's order from natural pairs (nat[i] = values
// 2i, 2i + 1).
template <int BITS>
__device__ __forceinline__ void x_pairs2(const u32 (&nat)[16], int e, u32& p0, u32& p1) {
    const int lo = BITS == 4 ? 4 * (e >> 1) + (e & 1) : 2 * e;
    const int hi = BITS == 4 ? lo + 2 : lo + 1;
    p0 = __byte_perm(nat[lo], nat[hi], 0x5410);
    p1 = __byte_perm(nat[lo], nat[hi], 0x7632);
}

// BITS's pair order back to natural pairs.
template <int BITS>
__device__ __forceinline__ void from_pairs(const u32 (&pr)[16], u32 (&nat)[16]) {
    if constexpr (BITS == 4) {
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            nat[4 * a] = __byte_perm(pr[4 * a], pr[4 * a + 1], 0x5410);
            nat[4 * a + 1] = __byte_perm(pr[4 * a + 2], pr[4 * a + 3], 0x5410);
            nat[4 * a + 2] = __byte_perm(pr[4 * a], pr[4 * a + 1], 0x7632);
            nat[4 * a + 3] = __byte_perm(pr[4 * a + 2], pr[4 * a + 3], 0x7632);
        }
    } else {
#pragma unroll
        for (int a = 0; a < 8; ++a) {
            nat[2 * a] = __byte_perm(pr[2 * a], pr[2 * a + 1], 0x5410);
            nat[2 * a + 1] = __byte_perm(pr[2 * a], pr[2 * a + 1], 0x7632);
        }
    }
}

// 32 values of x at p as natural TC pairs (16-byte aligned; an f32 x rounded).
template <typename TC, typename TX>
__device__ __forceinline__ void load_x32(const TX* p, u32 (&nat)[16]) {
    if constexpr (sizeof(TX) == 2) {
        const uint4* v = reinterpret_cast<const uint4*>(p);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint4 t = __ldg(v + i);
            nat[4 * i] = t.x;
            nat[4 * i + 1] = t.y;
            nat[4 * i + 2] = t.z;
            nat[4 * i + 3] = t.w;
        }
    } else {
        const float4* v = reinterpret_cast<const float4*>(p);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float4 t = __ldg(v + i);
            nat[2 * i] = pack2<TC>(t.x, t.y);
            nat[2 * i + 1] = pack2<TC>(t.z, t.w);
        }
    }
}

// ---- per-expert products (quantized_matmul_id, dense_matmul_id) ----

// The gate's activation of a fused gate/up product: 0 silu (Qwen3.6), 1 gelu
// with the tanh approximation (Gemma 4).
__device__ __forceinline__ float gate_activation(float g, u32 activation) {
    return activation == 1u ? GeluTanh()(g) : Silu()(g);
}

// acc[j] += sum_k w[k] rows[k * stride + j] for j < N, the slots in order
// (fmaf): an MoE layer's weighted sum of its experts' rows
// (moe_weighted_reduce, fused_norm_moe_sum), N elements of E (8 or 16 aligned
// bytes) read at once a slot.
template <int N, typename E>
__device__ __forceinline__ void weighted_rows(const float* w, const E* rows, u64 stride, u32 K, float (&acc)[N]) {
    for (u32 k = 0; k < K; ++k) {
        float v[N];
        load_vec(rows + u64(k) * stride, v);
        const float wk = __ldg(w + k);
#pragma unroll
        for (int j = 0; j < N; ++j) acc[j] = fmaf(wk, v[j], acc[j]);
    }
}

// The tile of slot `slot` among tiles of bm rows over the pairs that
// moe_dispatch_sort grouped (shaders/common.metal's moe_tile, the same
// arithmetic): group b owns slots floor(offsets[b] / bm) + b ..
// floor(offsets[b + 1] / bm) + b; false for an empty slot, else the group
// (E: the ids past the experts) and the positions [start, end) in order.
// Offsets are clamped to P.
__device__ __forceinline__ bool moe_tile(const u32* offsets, u32 E, u32 P, u32 bm, u32 slot, u32& group, u32& start, u32& end) {
    u32 lo = 0, hi = E;
    while (lo < hi) {
        const u32 mid = (lo + hi + 1u) / 2u;
        if (min(__ldg(offsets + mid), P) / bm + mid <= slot) lo = mid;
        else hi = mid - 1u;
    }
    const u32 o0 = min(__ldg(offsets + lo), P), o1 = min(__ldg(offsets + lo + 1u), P);
    const u32 first = o0 / bm + lo;
    if (slot < first) return false;
    const u64 s = u64(o0) + u64(slot - first) * bm;
    if (s >= o1) return false;
    group = lo;
    start = u32(s);
    end = min(u32(s) + bm, o1);
    return true;
}

// The rows of a per-expert matrix block (the _id products' matrix engines):
// block blockIdx.x takes slot blockIdx.x / tiles_n (moe_tile, BM pairs) and
// output columns from n0 (cols a tile: BN, or BN / 2 outputs of a fused
// gate/up); y_pair[r] is the pair of tile row r (P past the tile's rows_m
// rows) and x_row[r] its token. False when the block has nothing to compute:
// an empty slot, or the ids past the experts, whose rows of y ([P, N]) it
// has written as zeros. A barrier follows the shared writes (every thread of
// a block takes the same branch).
template <typename T, u32 BM, u32 NT>
__device__ __forceinline__ bool moe_block_rows(const u32* offsets, const u32* order, T* y, u32 N, u32 U, u32 E, u32 P, u32 cols,
                                               u32* x_row, u32* y_pair, u32& group, u32& n0, u32& rows_m) {
    const u32 tiles_n = (N + cols - 1u) / cols;
    const u32 slot = blockIdx.x / tiles_n;
    n0 = (blockIdx.x % tiles_n) * cols;
    u32 start, end;
    if (!moe_tile(offsets, E, P, BM, slot, group, start, end)) return false;
    const u32 tid = threadIdx.x;
    rows_m = end - start;
    if (tid < BM) {
        const u32 pr = tid < rows_m ? min(__ldg(order + start + tid), P) : P;
        y_pair[tid] = pr;
        x_row[tid] = pr < P ? pr / U : 0u;
    }
    __syncthreads();
    if (group >= E) {
        for (u32 i = tid; i < BM * cols; i += NT) {
            const u32 r = i / cols, c = n0 + i % cols, pr = y_pair[r];
            if (pr < P && c < N) y[u64(pr) * N + c] = from_f<T>(0.0f);
        }
        return false;
    }
    return true;
}

// ---- mma.sync tiles (dense, quantized_matmul, quantized_matmul_ggml, dense_matmul_id, quantized_matmul_id) ----
//
// A block's BM x BN output tile, computed by warps each owning WTM x WTN of
// it (MI x NJ mma tiles of 16 x 8, float accumulators). A stage holds BM rows
// of x then BN rows of the weight, 32 elements of k each, rows LDS elements
// apart (T a 16-bit type). The families differ only in how a stage is filled:
// issue(stage, kt) starts tile kt's loads, park(stage) stores what issue held
// in registers (nothing where every copy is a cp.async).

template <u32 MI, u32 NJ>
__device__ __forceinline__ void mma_zero(float (&acc)[MI][NJ][4]) {
#pragma unroll
    for (u32 i = 0; i < MI; ++i)
#pragma unroll
        for (u32 j = 0; j < NJ; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;
}

// One stage's mmas: the warp's x rows from xs (from row wm0), its weight rows
// (output columns, from wn0) from ws, k 0 .. 31.
template <typename T, u32 LDS, u32 MI, u32 NJ>
__device__ __forceinline__ void mma_k32(float (&acc)[MI][NJ][4], const T* xs, const T* ws, u32 wm0, u32 wn0, u32 lane) {
#pragma unroll
    for (u32 kk = 0; kk < 32u; kk += 16u) {
        u32 a[MI][4];
#pragma unroll
        for (u32 i = 0; i < MI; ++i) frag_a(a[i], xs, LDS, wm0 + 16 * i, kk, lane);
        u32 bq[NJ][2];
#pragma unroll
        for (u32 j = 0; j < NJ; j += 2) {
            u32 t4[4];
            frag_b_nk(t4, ws, LDS, wn0 + 8 * j, kk, lane);
            bq[j][0] = t4[0];
            bq[j][1] = t4[1];
            bq[j + 1][0] = t4[2];
            bq[j + 1][1] = t4[3];
        }
#pragma unroll
        for (u32 i = 0; i < MI; ++i)
#pragma unroll
            for (u32 j = 0; j < NJ; ++j) mma16<T>(acc[i][j], a[i], bq[j][0], bq[j][1]);
    }
}

// The k loop over KT tiles of 32, STAGES stages at smem (each (BM + BN) x
// LDS). CP_ASYNC: issue's copies are cp.async, a commit group a tile; else
// issue only loads registers that park stores.
template <typename T, u32 STAGES, u32 BM, u32 BN, u32 LDS, bool CP_ASYNC, u32 MI, u32 NJ, typename Issue, typename Park>
__device__ __forceinline__ void mma_pipeline(float (&acc)[MI][NJ][4], T* smem, u32 KT, u32 wm0, u32 wn0, u32 lane, Issue&& issue,
                                             Park&& park) {
    for (u32 s = 0; s < STAGES - 1; ++s) {
        if (s < KT) {
            issue(s, s);
            park(s);
        }
        if constexpr (CP_ASYNC) cp_async_commit();
    }
    for (u32 kt = 0; kt < KT; ++kt) {
        // Tile kt has landed (at most STAGES - 2 later groups pending) or is
        // parked, and every warp is done with the stage the next issue or park overwrites.
        if constexpr (CP_ASYNC) cp_async_wait<STAGES - 2>();
        __syncthreads();
        const u32 next = kt + STAGES - 1;
        if (next < KT) issue(next % STAGES, next);
        if constexpr (CP_ASYNC) cp_async_commit();
        const T* xs = smem + (kt % STAGES) * (BM + BN) * LDS;
        mma_k32<T, LDS>(acc, xs, xs + BM * LDS, wm0, wn0, lane);
        // What issue held in registers for stage `next` is stored after the
        // mmas, so its loads had the step to arrive; nobody reads that stage
        // before the next barrier.
        if (next < KT) park(next % STAGES);
    }
    if constexpr (CP_ASYNC) cp_async_wait<0>();
}

// Writes the warp's accumulators: tile row r (wm0 + ..) goes to y's row
// `row` where row_of(r, row) is true (rows y_row elements apart), tile column
// c to column n0 + c, N columns. GATE_UP: columns come as 8 gate then 8 up
// (the per-expert fused products), one output per pair, n0 + c / 2.
template <typename TY, bool GATE_UP, u32 MI, u32 NJ, typename RowOf>
__device__ __forceinline__ void mma_store(const float (&acc)[MI][NJ][4], TY* y, u64 y_row, u32 N, u32 n0, u32 wm0, u32 wn0, u32 lane,
                                          RowOf&& row_of, u32 activation = 0u) {
    const u32 g = lane >> 2, t = lane & 3u;
    const bool pair = y_row % 2 == 0 && (reinterpret_cast<u64>(y) % (2 * sizeof(TY))) == 0;
#pragma unroll
    for (u32 i = 0; i < MI; ++i)
#pragma unroll
        for (u32 h = 0; h < 2; ++h) {
            u32 row;
            if (!row_of(wm0 + 16 * i + g + 8 * h, row)) continue;
            TY* yr = y + u64(row) * y_row;
#pragma unroll
            for (u32 j = 0; j < NJ; j += (GATE_UP ? 2u : 1u)) {
                float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                u32 col = n0 + wn0 + 8 * j + 2 * t;
                if constexpr (GATE_UP) {
                    col = n0 + (wn0 + 8 * j) / 2u + 2 * t;
                    v0 = gate_activation(v0, activation) * acc[i][j + 1][2 * h];
                    v1 = gate_activation(v1, activation) * acc[i][j + 1][2 * h + 1];
                }
                if (pair && col + 1 < N) {
                    store2(yr + col, v0, v1);
                } else {
                    if (col < N) yr[col] = from_f<TY>(v0);
                    if (col + 1 < N) yr[col + 1] = from_f<TY>(v1);
                }
            }
        }
}

// Stores the 16-byte chunks a thread held in registers (issue's loads of x
// or a weight) into a stage's rows: chunk c of thread tid is elements
// 8 (i % 4) .. + 7 of row i / 4, i = tid + c NT, for i < TOTAL where it is
// given (the operand's chunks, where they are not a multiple of NT).
template <u32 NT, u32 LDS, u32 TOTAL = 0u, typename T, u32 C>
__device__ __forceinline__ void park_chunks(T* rows, const uint4 (&r)[C], u32 tid) {
#pragma unroll
    for (u32 c = 0; c < C; ++c) {
        const u32 i = tid + c * NT;
        if (TOTAL != 0u && TOTAL % NT != 0 && i >= TOTAL) break;
        *reinterpret_cast<uint4*>(rows + (i >> 2) * LDS + 8 * (i & 3u)) = r[c];
    }
}

// A thread's weight row of a stage (32 elements at ws, T): its packed chunk
// wq dequantized (w = sc q + bi) in natural order, zeros where !live.
template <typename T, int BITS>
__device__ __forceinline__ void park_dequantized(T* ws, const u32 (&wq)[BITS], float sc, float bi, bool live) {
    u32 nat[16];
    if (live) {
        u32 pr[16];
        dequantize<T, BITS>(wq, sc, bi, pr);
        from_pairs<BITS>(pr, nat);
    } else {
#pragma unroll
        for (int q = 0; q < 16; ++q) nat[q] = 0u;
    }
    uint4* dst = reinterpret_cast<uint4*>(ws);
#pragma unroll
    for (int v = 0; v < 4; ++v) dst[v] = make_uint4(nat[4 * v], nat[4 * v + 1], nat[4 * v + 2], nat[4 * v + 3]);
}
// ---- end of mma.sync tiles ----

// ---- int8 vector products (decode: quantized_matmul_ggml's and quantized_matmul's _vdq harness variants) ----
//
// y = x W^T for M <= 8 tokens with the weight's integer codes against x
// quantized once a block to int8 per chunk of 32 values (d = max|x| / 127,
// and the chunk's f32 sum for offsets and mins), dot products by dp4a in
// int32, scaled once a group in f32. A format is an item type (whole items
// of a row: what a lane loads and decodes at a time):
//   static constexpr u32 VALUES;  values of k an item covers
//   static constexpr bool PAIRED; x's words as PAIRED wants them (below)
//   void load(const Src&, u32 row, u32 it);  the item's bytes, as loaded
//   void dot(u32 it, const u32* xq, const float2* xds, u32 M, u32 K, float (&acc)[8]) const;
//   static constexpr u32 GROUP;   1, or the lanes that share one item's loads (below)
// 8 warps a block; the grid is persistent (any size: a block walks units
// of 8 / S x R rows, unit blockIdx.x, + gridDim.x, ...); a group of S warps
// takes R rows, whose R x items items its warps split into S ranges; a lane
// issues U items' loads before decoding any. With GROUP = G > 1 (S = 1, G x
// R = 32, items a multiple of G), lanes G r .. G r + G - 1 take items G t ..
// G t + G - 1 of row r together at each step t, so a warp instruction reads
// the same stretch of its R rows; every lane calls load and dot at every
// step (rows past N read row N - 1, their sums dropped), so an item may
// exchange words among its G lanes by shuffles. The lanes' sums meet by
// shuffles, a group's warps' in shared memory. Dynamic shared memory: M x K
// bytes of x, M x K / 32 float2, then 2 x 8 x R x 8 floats.

constexpr u32 I8MV_WARPS = 8;

// f(i) for the tokens i < M (M <= 8), unrolled so that i is a constant
// (the sums' registers); the loop leaves at M by a uniform branch, so the
// tokens past M cost no issue (bodies under `if (i < M)` were issued
// predicated off: the Q8_0 output projection ran 250 us that way, 206
// without; bench/notes/gguf-q6-group-2026-11-28.md).
template <typename F>
__device__ __forceinline__ void i8_tokens(u32 M, F&& f) {
#pragma unroll
    for (u32 i = 0; i < 8; ++i) {
        if (i >= M) break;
        f(i);
    }
}

// x's int8 words: word 8c + j of a token's K / 4 holds values 32c + 4j .. +
// 3 of chunk c, or with PAIRED, per 8 values 8a .. 8a + 7, the even ones
// (8a, + 2, + 4, + 6) then the odd ones (what a word of 4-bit codes, low
// and high nibbles, meets).
template <bool PAIRED, typename TX>
__device__ __forceinline__ void i8_quantize_x(const TX* x, u64 x_row, u32 M, u32 K, u32* xq, float2* xds) {
    const u32 C = K / 32u, total = M * C * 8u;  // 8 lanes a chunk, 4 values a lane
    const bool vec = (reinterpret_cast<u64>(x) % (4u * sizeof(TX))) == 0 && x_row % 4u == 0;
    for (u32 base = 0; base < total; base += blockDim.x) {
        const u32 idx = base + threadIdx.x;
        const bool live = idx < total;
        const u32 ci = idx / 8u, j = idx % 8u, tok = live ? ci / C : 0u, c = ci % C;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (live) {
            const TX* p = x + u64(tok) * x_row + 32u * c + 4u * j;
            if constexpr (sizeof(TX) == 4) {
                if (vec) {
                    const float4 f = __ldg(reinterpret_cast<const float4*>(p));
                    v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
                } else {
#pragma unroll
                    for (int k = 0; k < 4; ++k) v[k] = to_f(p[k]);
                }
            } else {
#pragma unroll
                for (int k = 0; k < 4; ++k) v[k] = to_f(p[k]);
            }
        }
        float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
        float sum = (v[0] + v[1]) + (v[2] + v[3]);
#pragma unroll
        for (u32 o = 4; o > 0; o >>= 1) {
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
        }
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        u32 q = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) q |= (u32(__float2int_rn(v[k] * inv)) & 0xFFu) << (8 * k);
        if constexpr (PAIRED) {
            // Lanes 2a and 2a + 1 hold values 8a .. + 3 and 8a + 4 .. + 7: the even ones to 2a, the odd to 2a + 1.
            const u32 other = __shfl_xor_sync(0xffffffffu, q, 1);
            q = (j & 1u) ? __byte_perm(other, q, 0x7531u) : __byte_perm(q, other, 0x6420u);
        }
        if (live) {
            xq[idx] = q;
            if (j == 0) xds[ci] = make_float2(amax / 127.0f, sum);
        }
    }
}

// Which of a group's R rows flat item f falls in (f / items without a division).
template <u32 R>
__device__ __forceinline__ u32 i8_row(u32 f, u32 items) {
    u32 r = 0;
#pragma unroll
    for (u32 q = 1; q < R; ++q) r += f >= q * items ? 1u : 0u;
    return r;
}

// The engine (the section comment): Src the item's row source, items = K / Item::VALUES.
// smem_raw: the launch's dynamic shared memory (16-byte aligned).
template <typename Item, u32 R, u32 S, u32 U, typename Src, typename TX, typename TY>
__device__ __forceinline__ void i8_mv(const Src& src, const TX* x, TY* y, u32 M, u32 N, u32 K, u64 x_row, u64 y_row,
                                      unsigned char* smem_raw) {
    static_assert(I8MV_WARPS % S == 0 && R >= 1, "group shape");
    constexpr u32 G = Item::GROUP;
    static_assert(G == 1 || (S == 1 && G * R == 32), "an item's lanes: R groups of G fill a warp");
    constexpr u32 GROUPS = I8MV_WARPS / S;
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    u32* xq = reinterpret_cast<u32*>(smem_raw);
    float2* xds = reinterpret_cast<float2*>(smem_raw + u64(M) * K);
    float* red = reinterpret_cast<float*>(xds + u64(M) * (K / 32u));  // [2][I8MV_WARPS][R][8]
    i8_quantize_x<Item::PAIRED>(x, x_row, M, K, xq, xds);
    __syncthreads();
    const u32 items = K / Item::VALUES, total = R * items;
    const u32 per = (total + S - 1u) / S;
    const u32 grp = warp / S, seg = warp % S;
    const u32 f0 = seg * per, f1 = min(total, f0 + per);
    const u32 units = (N + GROUPS * R - 1u) / (GROUPS * R);
    u32 parity = 0;
    for (u32 unit = blockIdx.x; unit < units; unit += gridDim.x, parity ^= 1u) {
        const u32 row0 = (unit * GROUPS + grp) * R;  // the group's first row
        float acc[R][8];
#pragma unroll
        for (u32 r = 0; r < R; ++r)
#pragma unroll
            for (u32 i = 0; i < 8; ++i) acc[r][i] = 0.0f;
        // Flat item ff's row of the group and its item in that row (GROUP: see the section comment).
        auto row_of = [&](u32 ff) { return G == 1 ? i8_row<R>(ff, items) : (ff / G) % R; };
        auto item_of = [&](u32 ff, u32 r) { return G == 1 ? ff - r * items : (ff / 32u) * G + ff % G; };
        for (u32 f = f0 + lane; f < f1; f += 32u * U) {
            Item it[U];
#pragma unroll
            for (u32 u = 0; u < U; ++u) {
                const u32 ff = f + 32u * u, r = row_of(ff);
                if (ff < f1 && (G > 1 || row0 + r < N)) it[u].load(src, G > 1 ? min(row0 + r, N - 1u) : row0 + r, item_of(ff, r));
            }
#pragma unroll
            for (u32 u = 0; u < U; ++u) {
                const u32 ff = f + 32u * u, r = row_of(ff);
                if (ff < f1 && (G > 1 || row0 + r < N)) {
                    float part[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
                    it[u].dot(item_of(ff, r), xq, xds, M, K, part);
                    if (G == 1 || row0 + r < N) {
#pragma unroll
                        for (u32 rr = 0; rr < R; ++rr)
                            if (rr == r)
#pragma unroll
                                for (u32 i = 0; i < 8; ++i) acc[rr][i] += part[i];
                    }
                }
            }
        }
        i8_tokens(M, [&](u32 i) {
#pragma unroll
            for (u32 r = 0; r < R; ++r) acc[r][i] = warp_sum(acc[r][i]);
        });
        if constexpr (S == 1) {
#pragma unroll
            for (u32 r = 0; r < R; ++r)
#pragma unroll
                for (u32 i = 0; i < 8; ++i)
                    if (i < M && lane == i && row0 + r < N) y[u64(i) * y_row + row0 + r] = from_f<TY>(acc[r][i]);
        } else {
            float* rd = red + parity * I8MV_WARPS * R * 8u;
            if (lane == 0) {
#pragma unroll
                for (u32 r = 0; r < R; ++r)
#pragma unroll
                    for (u32 i = 0; i < 8; ++i) rd[(warp * R + r) * 8u + i] = acc[r][i];
            }
            // One barrier a unit: the next unit writes the other half of red.
            __syncthreads();
            if (seg == 0 && lane < R * 8u) {
                const u32 r = lane / 8u, i = lane % 8u;
                float s = 0.0f;
#pragma unroll
                for (u32 q = 0; q < S; ++q) s += rd[((warp + q) * R + r) * 8u + i];
                if (i < M && row0 + r < N) y[u64(i) * y_row + row0 + r] = from_f<TY>(s);
            }
        }
    }
}
// ---- end of int8 vector products ----

// ---- GGUF block formats (quantized_matmul_ggml, quantized_matmul_id_ggml) ----
//
// The decoders and the vector and matrix engines of shaders/cuda/quantized_matmul_ggml.cu
// (whose file comment describes them), written once for both families.

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
// scale a and offset b (w = a * q + b); hd and sub: raw_fetch's words and
// sub-block, which raw_finish computes a and b from.
struct GgmlRaw {
    u32 q[8];
    u32 h[8];
    u32 sh_lo, sh_hi;
    float a[2], b[2];
    u32 hd[4];
    u32 sub;
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

// The same chunk in two parts for the matrix engine's late form (gmm_tile
// LATE): raw_fetch<F> only loads (the quant bytes as raw_load does, and in
// hd the words a and b come from), raw_finish<F> computes a, b and Q8_0's
// offset bytes from them, so a step's mmas run while the loads arrive. The
// same values as raw_load's; raw_load stays as it is for its other callers
// (the per-expert matrix forms ran 4-20 % slower with the two parts, the
// early form included: bench/results/prompt-splitk-h100-2026-11-27.md).
template <int F> __device__ __forceinline__ void raw_fetch(const unsigned char* row, u64 c, GgmlRaw& r);
template <int F> __device__ __forceinline__ void raw_finish(GgmlRaw& r);
__device__ __forceinline__ float f16_bits(u32 bits) { return __half2float(__ushort_as_half(static_cast<unsigned short>(bits))); }

// Q4_0 and Q8_0 (raw_load's layouts): blocks of BYTES, d then WORDS words of
// qs; w = d q - OFFSET d (Q8_0's q the byte + 128).
template <u32 BYTES, u32 WORDS>
__device__ __forceinline__ void d_block_fetch(const unsigned char* row, u64 c, GgmlRaw& r) {
    const unsigned char* b = row + c * BYTES;
    r.hd[0] = ld16(b);
#pragma unroll
    for (u32 i = 0; i < WORDS; ++i) r.q[i] = ld32_2(b + 2 + 4 * i);
}
template <u32 OFFSET>
__device__ __forceinline__ void d_block_finish(GgmlRaw& r) {
    const float d = f16_bits(r.hd[0]);
    r.a[0] = r.a[1] = d;
    r.b[0] = r.b[1] = -float(OFFSET) * d;
}
template <> __device__ __forceinline__ void raw_fetch<GGML_Q4_0>(const unsigned char* row, u64 c, GgmlRaw& r) { d_block_fetch<18u, 4u>(row, c, r); }
template <> __device__ __forceinline__ void raw_finish<GGML_Q4_0>(GgmlRaw& r) { d_block_finish<8u>(r); }
template <> __device__ __forceinline__ void raw_fetch<GGML_Q8_0>(const unsigned char* row, u64 c, GgmlRaw& r) { d_block_fetch<34u, 8u>(row, c, r); }
template <> __device__ __forceinline__ void raw_finish<GGML_Q8_0>(GgmlRaw& r) {
#pragma unroll
    for (int i = 0; i < 8; ++i) r.q[i] ^= 0x80808080u;
    d_block_finish<128u>(r);
}
// Q4_K and Q5_K: d, dmin, scales[12] at the start of a super-block of BYTES
// (hd: its 16 bytes as words), qs[128] at QS; sub-block s = c % 8 is nibble
// s % 2 of qs[32 (s / 2) .. + 32]. Returns the super-block.
template <u32 BYTES, u32 QS>
__device__ __forceinline__ const unsigned char* k4_fetch(const unsigned char* row, u64 c, GgmlRaw& r) {
    const unsigned char* b = row + (c / 8) * BYTES;
    const u32 s = u32(c % 8);
#pragma unroll
    for (int i = 0; i < 4; ++i) r.hd[i] = ld32_4(b + 4 * i);
#pragma unroll
    for (int i = 0; i < 8; ++i) r.q[i] = ld32_4(b + QS + 32 * (s / 2) + 4 * i);
    r.sub = s;
    r.sh_lo = 4 * (s % 2);
    return b;
}
// a and b of sub-block j = r.sub from the header words: its 6-bit scale and
// min from the 12 packed scale bytes (llama.cpp's get_scale_min_k4; byte i
// of them is byte i % 4 of word 1 + i / 4), times d and dmin.
__device__ __forceinline__ void k4_finish(GgmlRaw& r) {
    const u32 j = r.sub;
    // The word picked by selects, not an index (which a caller's code may keep in local memory).
    auto byte = [&](u32 i) { return ((i < 4u ? r.hd[1] : i < 8u ? r.hd[2] : r.hd[3]) >> (8 * (i % 4))) & 0xFFu; };
    float sc, m;
    if (j < 4) {
        sc = float(byte(j) & 63u);
        m = float(byte(j + 4) & 63u);
    } else {
        sc = float((byte(j + 4) & 0xFu) | ((byte(j - 4) >> 6) << 4));
        m = float((byte(j + 4) >> 4) | ((byte(j) >> 6) << 4));
    }
    r.a[0] = r.a[1] = f16_bits(r.hd[0] & 0xFFFFu) * sc;
    r.b[0] = r.b[1] = -f16_bits(r.hd[0] >> 16) * m;
}
// Q4_K: qs at +16.
template <> __device__ __forceinline__ void raw_fetch<GGML_Q4_K>(const unsigned char* row, u64 c, GgmlRaw& r) {
    k4_fetch<144u, 16u>(row, c, r);
}
template <> __device__ __forceinline__ void raw_finish<GGML_Q4_K>(GgmlRaw& r) { k4_finish(r); }
// Q5_K: qs at +48 and qh[32] at +16, bit s of qh[l] the fifth bit of value l.
template <> __device__ __forceinline__ void raw_fetch<GGML_Q5_K>(const unsigned char* row, u64 c, GgmlRaw& r) {
    const unsigned char* b = k4_fetch<176u, 48u>(row, c, r);
#pragma unroll
    for (int i = 0; i < 8; ++i) r.h[i] = ld32_4(b + 16 + 4 * i);
    r.sh_hi = r.sub;
}
template <> __device__ __forceinline__ void raw_finish<GGML_Q5_K>(GgmlRaw& r) { k4_finish(r); }
// Q6_K: ql[128], qh[64], scales[16] int8, d. Values 32 cc + l of a
// super-block (cc = c % 8 = 4 hh + p): nibble p / 2 of ql[64 hh + 32 (p % 2)
// + l], bits 2p, 2p + 1 of qh[32 hh + l]; sub-block (16 values) 2 cc + half
// scaled by scales[2 cc + half]; w = d sc (q - 32). hd: d, then the two scales.
template <> __device__ __forceinline__ void raw_fetch<GGML_Q6_K>(const unsigned char* row, u64 c, GgmlRaw& r) {
    const unsigned char* b = row + (c / 8) * 210u;
    const u32 cc = u32(c % 8), hh = cc / 4, p = cc % 4;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        r.q[i] = ld32_2(b + 64 * hh + 32 * (p % 2) + 4 * i);
        r.h[i] = ld32_2(b + 128 + 32 * hh + 4 * i);
    }
    r.hd[0] = ld16(b + 208);
    r.hd[1] = ld16(b + 192 + 2 * cc);
    r.sh_lo = 4 * (p / 2);
    r.sh_hi = 2 * p;
}
template <> __device__ __forceinline__ void raw_finish<GGML_Q6_K>(GgmlRaw& r) {
    const float d = f16_bits(r.hd[0]);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        r.a[i] = d * float(static_cast<signed char>((r.hd[1] >> (8 * i)) & 0xFFu));
        r.b[i] = -32.0f * r.a[i];
    }
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

// The operand type of both engines' tensor-core products: f16, as
// llama.cpp's Metal kernels stage a dequantized weight (2^-11 relative; bf16's
// 2^-9 doubled the error of a tiny Qwen3.6 against its float64 reference,
// tests/models-gguf.test.ts). x is rounded to f16 too (mma.sync takes one
// type): a value past 65504 becomes infinite, as in llama.cpp's f16 paths.
typedef __half ggml_t;

// The 16 values of half `half` as 8 packed f16 pairs (pair p = values 2p, 2p + 1):
// bytes q0, 0x64, q1, 0x64 are the f16 pair 1024 + q (every byte: f16's ulp at
// 1024 is 1), less 1024 exactly, then one fma per pair with a and b rounded
// to f16 (the product and the sum rounded once).
template <int F> __device__ __forceinline__ void pairs16(const GgmlRaw& r, u32 half, u32 (&p)[8]) {
    u32 qb[4];
    unpack16<F>(r, half, qb);
    const u32 a2 = pack2<ggml_t>(r.a[half], r.a[half]), b2 = pack2<ggml_t>(r.b[half], r.b[half]);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const u32 m = __byte_perm(qb[i / 2], 0x64u, (i % 2) ? 0x4342u : 0x4140u);
        p[i] = fma2<ggml_t>(fma2<ggml_t>(m, 0x3C003C00u, 0xE400E400u), a2, b2);
    }
}

// pairs16, or zeros where the chunk is not live (rows past N, k past K).
template <int F>
__device__ __forceinline__ void pairs16_live(const GgmlRaw& r, u32 half, bool live, u32 (&p)[8]) {
    if (live) {
        pairs16<F>(r, half, p);
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) p[i] = 0u;
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

// Copies the 16 rows of a block (gmv_rows' tile rows: r < 8 row row0 + r of
// w, r >= 8 row row0 + r - 8 + hb of wb; those below N) of window `win`
// into `stage` (16 rows of GmvStage<F>::SP bytes): the bytes of tile row r
// start at stage + r * SP + (their address & 15). Lanes 2r and 2r + 1 take
// tile row r's 16-byte units in turn. A weight's N rows end at N * rb bytes:
// a unit past it is copied byte by byte up to it.
template <int F>
__device__ __forceinline__ void gmv_copy(const unsigned char* w, const unsigned char* wb, u32 hb, u64 rb, u32 N, u32 K, u32 row0, u32 win,
                                         unsigned char* stage, u32 lane) {
    constexpr u32 SP = GmvStage<F>::SP;
    const u32 r = lane >> 1;
    const unsigned char* base = r < 8u ? w : wb;
    const u32 row = r < 8u ? row0 + r : row0 + r - 8u + hb;
    if (row >= N) return;
    const unsigned char* end = base + u64(N) * rb;
    const u32 v0 = win * GMV_WINDOW;
    const u32 bytes = min(GMV_WINDOW, K - v0) / GgmlFmt<F>::QK * GgmlFmt<F>::BYTES;
    const unsigned char* src = base + u64(row) * rb + u64(v0) / GgmlFmt<F>::QK * GgmlFmt<F>::BYTES;
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
// the last row): 8 f16 pairs. SW: the values are silu(x) * xu (xu laid out
// as x), a SwiGLU's activation made on the way.
template <bool SW>
__device__ __forceinline__ void gmv_x16(const float* x, const float* xu, u64 x_row, u32 tok, u32 k, bool vec, u32 (&p)[8]) {
    const float* xr = x + u64(tok) * x_row + k;
    const float* ur = xu + u64(tok) * x_row + k;
    auto at = [&](float v, float u) { return SW ? Silu()(v) * u : v; };
    if (vec) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float4 v = __ldg(reinterpret_cast<const float4*>(xr) + i);
            float4 u = v;
            if constexpr (SW) u = __ldg(reinterpret_cast<const float4*>(ur) + i);
            p[2 * i] = pack2<ggml_t>(at(v.x, u.x), at(v.y, u.y));
            p[2 * i + 1] = pack2<ggml_t>(at(v.z, u.z), at(v.w, u.w));
        }
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) p[i] = pack2<ggml_t>(at(xr[2 * i], SW ? ur[2 * i] : 0.0f), at(xr[2 * i + 1], SW ? ur[2 * i + 1] : 0.0f));
    }
}

// gmv_rows' x for gmv_window: token tok's 16 values of chunk c's half h of
// the window at v0, read from memory and rounded (gmv_x16).
template <bool SW>
struct GmvXRows {
    const float *x, *xu;
    u64 x_row;
    u32 tok, v0;
    bool vec;
    __device__ __forceinline__ void operator()(u32 c, u32 h, u32 (&xp)[8]) const { gmv_x16<SW>(x, xu, x_row, tok, v0 + 32u * c + 16u * h, vec, xp); }
};

// One window of 256 values of a 16-row tile (gmv_rows, gmv_xs): lane (g,
// t) decodes chunks 2t and 2t + 1 of tile rows g (bytes at pa) and 8 + g
// (pb) from the stage as f16 pairs and multiplies them with x, whose 16
// values of chunk c's half h for the lane's token x_of(c, h, xp) gives as 8
// f16 pairs, into acc (mma16). v0: the window's first value; chunks past K
// count zero. wvec / w4: the weight's rows 16- / 4-byte aligned.
template <int F, typename XOf>
__device__ __forceinline__ void gmv_window(const unsigned char* pa, const unsigned char* pb, u32 t, u32 v0, u32 K, bool wvec, bool w4,
                                           float (&acc)[4], XOf&& x_of) {
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
                x_of(c, h, xp);
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) a0[j] = a1[j] = xp[j] = 0u;
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const u32 a[4] = {a0[2 * j], a1[2 * j], a0[2 * j + 1], a1[2 * j + 1]};
                mma16<ggml_t>(acc, a, xp[2 * j], xp[2 * j + 1]);
            }
        }
    }
}

// The vector engine: the mma's 16 A rows (tile rows) against every row of
// x ([M, K], rows x_row floats apart), 8 tokens at a time. Plain (GU
// false): tile row r is weight row row0 + r of w, y[i * y_row + row] = x_i .
// w[row]. Fused gate/up (GU): tile rows r < 8 are rows row0 + r of w (the
// gate), rows r >= 8 rows row0 + r - 8 of wb (the up projection, same
// blocks and rows), y[i * y_row + row0 + r] = act(x_i . w[row0 + r]) * (x_i .
// wb[row0 + r]) for r < 8 (gate_activation's activation). SW: x's values
// are silu(x) * xu (gmv_x16), the product otherwise plain. smem_raw: the
// block's dynamic shared memory, GMV_WARPS x GMV_STAGES x 16 rows x
// GmvStage<F>::SP, then 4 x 128 floats for the warps' sums. WR (warp rows):
// warp w takes the 16 tile rows from row0 + 16 w (GU: the 8 outputs from
// row0 + 8 w) and every window of k, and stores its sums itself (a block
// covers 64 rows, GU 32 outputs; no barrier).
// Row i of the product (i < M) reads x row x_of(i) and writes y row
// y_of(i, row) where that returns true (the identity where they are not
// given; the per-expert form over moe_dispatch_sort's grouping gathers and
// scatters through them).
struct RowSame {
    __device__ __forceinline__ u32 operator()(u32 i) const { return i; }
    __device__ __forceinline__ bool operator()(u32 i, u32& row) const {
        row = i;
        return true;
    }
};
template <int F, bool GU, bool SW = false, bool WR = false, typename XOf = RowSame, typename YOf = RowSame>
__device__ __forceinline__ void gmv_rows(unsigned char* smem_raw, const unsigned char* w, const unsigned char* wb, const float* x,
                                         const float* xu, float* y, u32 M, u32 N, u32 K, u64 x_row, u64 y_row, u32 row0_block,
                                         u32 activation, XOf x_of = {}, YOf y_of = {}) {
    constexpr u32 SP = GmvStage<F>::SP;
    constexpr u32 HB = GU ? 0u : 8u;  // the weight row of tile row 8 + g, less row0 + g
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u32 g = lane >> 2, t = lane & 3u;
    // The warp's tile rows from row0; its first window and the step between its windows.
    const u32 row0 = WR ? row0_block + (GU ? 8u : 16u) * warp : row0_block;
    const u32 win0 = WR ? 0u : warp, wstep = WR ? 1u : GMV_WARPS;
    if (WR && row0 >= N) return;
    const u64 rb = ggml_row_bytes<F>(K);
    unsigned char* stages = smem_raw + warp * GMV_STAGES * 16u * SP;
    float (*red)[128] = reinterpret_cast<float (*)[128]>(smem_raw + GMV_WARPS * GMV_STAGES * 16u * SP);
    const u32 wins = (K + GMV_WINDOW - 1) / GMV_WINDOW;
    const bool xvec = aligned16(x) && aligned16(xu) && x_row % 4u == 0;
    // The row of each lane's two rows inside a window: its address's offset from 16.
    const u64 wbase = reinterpret_cast<u64>(w), bbase = reinterpret_cast<u64>(wb);
    const bool wvec = ((wbase | bbase) & 15u) == 0;
    const bool w4 = ((wbase | bbase) & 3u) == 0 && rb % 4u == 0;
    for (u32 m0 = 0; m0 < M; m0 += 8u) {
        const u32 tok = x_of(min(m0 + g, M - 1u));
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (u32 s = 0; s < GMV_STAGES - 1; ++s) {
            const u32 win = win0 + s * wstep;
            if (win < wins) gmv_copy<F>(w, wb, HB, rb, N, K, row0, win, stages + s * 16u * SP, lane);
            cp_async_commit();
        }
        for (u32 win = win0, i = 0; win < wins; win += wstep, ++i) {
            const u32 next = win + (GMV_STAGES - 1) * wstep;
            if (next < wins) gmv_copy<F>(w, wb, HB, rb, N, K, row0, next, stages + ((i + GMV_STAGES - 1) % GMV_STAGES) * 16u * SP, lane);
            cp_async_commit();
            cp_async_wait<GMV_STAGES - 1>();
            __syncwarp();
            const unsigned char* st = stages + (i % GMV_STAGES) * 16u * SP;
            const u32 v0 = win * GMV_WINDOW;
            const u64 off = u64(v0) / GgmlFmt<F>::QK * GgmlFmt<F>::BYTES;
            // Tile rows g and 8 + g (weight rows clamped below N: rows past N compute what nobody stores).
            const u32 rowa = min(row0 + g, N - 1u), rowb = min(row0 + HB + g, N - 1u);
            const u32 ta = rowa - row0, tb = GU ? 8u + rowb - row0 : rowb - row0;
            const unsigned char* pa = st + ta * SP + ((wbase + u64(rowa) * rb + off) & 15u);
            const unsigned char* pb = st + tb * SP + ((bbase + u64(rowb) * rb + off) & 15u);
            gmv_window<F>(pa, pb, t, v0, K, wvec, w4, acc, GmvXRows<SW>{x, xu, x_row, tok, v0, xvec});
            // Every lane is done with this stage before a later copy refills it.
            __syncwarp();
        }
        cp_async_wait<0>();
        if constexpr (WR) {
            // Element e of lane (g, t): tile row g + 8 (e >> 1), token m0 + 2 t + (e & 1). Gate/up: elements e and
            // e + 2 are output row0 + g's gate and up.
#pragma unroll
            for (u32 e = 0; e < (GU ? 2u : 4u); ++e) {
                const u32 row = row0 + g + (GU ? 0u : 8u * (e >> 1)), i = m0 + 2u * t + (e & 1u);
                u32 yr;
                if (row < N && i < M && y_of(i, yr)) y[u64(yr) * y_row + row] = GU ? gate_activation(acc[e], activation) * acc[e + 2] : acc[e];
            }
            // Every lane is done with the stages before the next rows' copies refill them.
            __syncwarp();
        } else {
#pragma unroll
            for (u32 e = 0; e < 4; ++e) red[warp][lane * 4 + e] = acc[e];
            __syncthreads();
            // Thread tid sums element tid % 4 of lane tid / 4 over the warps: tile row (l >> 2) + 8 (e >> 1),
            // token m0 + 2 (l & 3) + (e & 1). Gate/up: elements e and e + 2 are one output's gate and up.
            float s = 0.0f;
#pragma unroll
            for (u32 q = 0; q < GMV_WARPS; ++q) s += red[q][tid];
            const u32 l = tid / 4, e = tid % 4;
            const u32 i = m0 + 2 * (l & 3u) + (e & 1u);
            if constexpr (GU) {
                if (e < 2u) {
                    float su = 0.0f;
#pragma unroll
                    for (u32 q = 0; q < GMV_WARPS; ++q) su += red[q][tid + 2u];
                    const u32 row = row0 + (l >> 2);
                    u32 yr;
                    if (row < N && i < M && y_of(i, yr)) y[u64(yr) * y_row + row] = gate_activation(s, activation) * su;
                }
            } else {
                const u32 row = row0 + (l >> 2) + 8 * (e >> 1);
                u32 yr;
                if (row < N && i < M && y_of(i, yr)) y[u64(yr) * y_row + row] = s;
            }
            __syncthreads();
        }
    }
}

// Rows row0 .. row0 + 15 of the weight against every row of x: gmv_rows' plain form.
template <int F>
__device__ __forceinline__ void gmv(unsigned char* smem_raw, const unsigned char* w, const float* x, float* y, u32 M, u32 N, u32 K, u64 x_row,
                                    u64 y_row, u32 row0) {
    gmv_rows<F, false>(smem_raw, w, w, x, x, y, M, N, K, x_row, y_row, row0, 0u);
}

// The vector engine for several tokens with x staged once a block
// (kernel_mul_mv_<t>_f32_xs, the op's launch from 2 tokens:
// ggmlMatmulCudaLaunch): a block of 4 warps takes 64 weight rows, warp w
// the 16 rows blk x 64 + 16 w and every window of k through its ring of
// stages (as gmv_rows' warp rows), the 4 warps on one window at a time. Each
// window's x for 8 tokens is staged once a block as f16 pairs by its 128
// threads (a thread 16 values of one token, loaded from memory while the
// window before is computed), where gmv_rows has every lane load and round
// its own x for each 16 rows (at 8 tokens, 3.5x a Q4_K tile's bytes). A
// token's window is GMV_XS_TOKEN words: lane t's chunks 2t and 2t + 1 at
// 36 t, so that the 16-byte reads of a quarter warp (tokens g, g + 1; t 0 to
// 3) fall in distinct banks. Grid ceil(N / 64) of 128 threads, dynamic
// shared memory gmv_xs_shared<F>() (ts: ggmlMvXsSharedBytes).
constexpr u32 GMV_XS_TOKEN = 144;
template <int F>
__device__ __forceinline__ constexpr u32 gmv_xs_shared() { return GMV_WARPS * GMV_STAGES * 16u * GmvStage<F>::SP + 2u * 8u * GMV_XS_TOKEN * 4u; }
template <int F>
__device__ __forceinline__ void gmv_xs(unsigned char* smem_raw, const unsigned char* w, const float* x, float* y, u32 M, u32 N, u32 K,
                                       u64 x_row, u64 y_row, u32 blk) {
    constexpr u32 SP = GmvStage<F>::SP;
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u32 g = lane >> 2, t = lane & 3u;
    const u32 row0 = blk * 64u + 16u * warp;
    const bool rows = row0 < N;  // a warp past N copies and computes nothing, but stages x and meets the barriers
    const u64 rb = ggml_row_bytes<F>(K);
    unsigned char* stages = smem_raw + warp * GMV_STAGES * 16u * SP;
    u32* xs = reinterpret_cast<u32*>(smem_raw + GMV_WARPS * GMV_STAGES * 16u * SP);  // [2 windows][8 tokens][GMV_XS_TOKEN]
    const u32 wins = (K + GMV_WINDOW - 1) / GMV_WINDOW;
    const bool xvec = aligned16(x) && x_row % 4u == 0;
    const u64 wbase = reinterpret_cast<u64>(w);
    const bool wvec = (wbase & 15u) == 0, w4 = (wbase & 3u) == 0 && rb % 4u == 0;
    // This thread's part of a window's x: token tid / 16, values 16 (tid % 16) .. + 15 (chunk c = tid % 16 / 2, half tid % 2).
    const u32 sx_tok = tid >> 4, sx_ch = tid & 15u;
    const u32 sx_at = sx_tok * GMV_XS_TOKEN + (sx_ch >> 2) * 36u + ((sx_ch >> 1) & 1u) * 16u + (sx_ch & 1u) * 8u;
    for (u32 m0 = 0; m0 < M; m0 += 8u) {
        // Tokens past M take the last one's values (their sums are not stored); values past K are zeros.
        const u32 stok = min(m0 + sx_tok, M - 1u);
        u32 xr[8];
        auto x_load = [&](u32 win) {
            const u32 k = win * GMV_WINDOW + 16u * sx_ch;
            if (k < K) {
                gmv_x16<false>(x, x, x_row, stok, k, xvec, xr);
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) xr[j] = 0u;
            }
        };
        auto x_store = [&](u32 buf) {
            uint4* q = reinterpret_cast<uint4*>(xs + buf * 8u * GMV_XS_TOKEN + sx_at);
            q[0] = make_uint4(xr[0], xr[1], xr[2], xr[3]);
            q[1] = make_uint4(xr[4], xr[5], xr[6], xr[7]);
        };
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (u32 s = 0; s < GMV_STAGES - 1; ++s) {
            if (rows && s < wins) gmv_copy<F>(w, w, 8u, rb, N, K, row0, s, stages + s * 16u * SP, lane);
            cp_async_commit();
        }
        x_load(0);
        x_store(0);
        __syncthreads();
        for (u32 win = 0; win < wins; ++win) {
            const u32 next = win + GMV_STAGES - 1;
            if (rows && next < wins) gmv_copy<F>(w, w, 8u, rb, N, K, row0, next, stages + (next % GMV_STAGES) * 16u * SP, lane);
            cp_async_commit();
            // The next window's x on its way while this one is computed.
            if (win + 1u < wins) x_load(win + 1u);
            cp_async_wait<GMV_STAGES - 1>();
            __syncwarp();
            if (rows) {
                const unsigned char* st = stages + (win % GMV_STAGES) * 16u * SP;
                const u32 v0 = win * GMV_WINDOW;
                const u64 off = u64(v0) / GgmlFmt<F>::QK * GgmlFmt<F>::BYTES;
                // Tile rows g and 8 + g (weight rows clamped below N: rows past N compute what nobody stores).
                const u32 rowa = min(row0 + g, N - 1u), rowb = min(row0 + 8u + g, N - 1u);
                const unsigned char* pa = st + (rowa - row0) * SP + ((wbase + u64(rowa) * rb + off) & 15u);
                const unsigned char* pb = st + (rowb - row0) * SP + ((wbase + u64(rowb) * rb + off) & 15u);
                const u32* xw = xs + (win & 1u) * 8u * GMV_XS_TOKEN + g * GMV_XS_TOKEN + t * 36u;
                gmv_window<F>(pa, pb, t, v0, K, wvec, w4, acc, [&](u32 c, u32 h, u32 (&xp)[8]) {
                    const uint4* q = reinterpret_cast<const uint4*>(xw + 16u * (c & 1u) + 8u * h);
                    const uint4 a = q[0], b = q[1];
                    xp[0] = a.x; xp[1] = a.y; xp[2] = a.z; xp[3] = a.w;
                    xp[4] = b.x; xp[5] = b.y; xp[6] = b.z; xp[7] = b.w;
                });
            }
            // Every lane is done with this stage before a later copy refills it.
            __syncwarp();
            if (win + 1u < wins) x_store((win + 1u) & 1u);
            // The next window's x staged, and every warp done with this window's before the one after refills it.
            __syncthreads();
        }
        cp_async_wait<0>();
        // Element e of lane (g, t): tile row g + 8 (e >> 1), token m0 + 2 t + (e & 1).
#pragma unroll
        for (u32 e = 0; e < 4; ++e) {
            const u32 row = row0 + g + 8u * (e >> 1), i = m0 + 2u * t + (e & 1u);
            if (row < N && i < M) y[u64(i) * y_row + row] = acc[e];
        }
    }
}

// ---- the matrix engine ----

constexpr u32 GSTAGES = 2;  // stages: one computed while the next is parked
constexpr u32 GLDS = 40;    // a staged row: 32 elements and 16 bytes of padding

// A BM x BN tile of y = x W^T at weight rows (output columns) n0 ..: tile
// row r reads x row x_of(r, row) (rows x_row floats apart; zeros where it
// returns false) and is stored to y row y_of(r, row) (rows y_row floats
// apart; mma_store's row_of); weight rows rb bytes apart; k over the KT
// chunks of 32 values from chunk kt0 (the whole row: 0, K / 32; a split-k
// slice: its own). smem_raw: the block's dynamic shared memory, GSTAGES x
// (BM + BN) x GLDS f16. LATE: a step's loads are computed from (x rounded,
// the chunk decoded: raw_finish) after its mmas, not before them, so the
// mmas run while they arrive (the GGUF matrix form on an H100: 5-19 % less
// time). The per-expert forms (four blocks an SM, whose other warps hide
// the loads) keep the early form: late, a 64-token prompt of Qwen3.6 took
// 5 % more device time, most of it theirs.
//
// GU (the per-expert fused gate/up form): n0 counts outputs, BN / 2 a tile;
// tile column c is output n0 + 8 (c / 16) + c % 8's row of w (the gate)
// where (c / 8) is even, of wu (the up projection, w's blocks and rows)
// where it is odd, and y gets act(gate) * up (mma_store's GATE_UP, the
// activation gate_activation's).
template <int F, u32 BM, u32 BN, u32 WM, u32 WN, bool LATE = true, bool GU = false, typename XOf, typename YOf>
__device__ __forceinline__ void gmm_tile(unsigned char* smem_raw, const unsigned char* w, const float* x, float* y, u32 N, u32 kt0, u32 KT,
                                         u64 rb, u64 x_row, u64 y_row, u32 n0, XOf&& x_of, YOf&& y_of,
                                         const unsigned char* wu = nullptr, u32 activation = 0u) {
    constexpr u32 NT = WM * WN * 32;
    constexpr u32 WTM = BM / WM, WTN = BN / WN;
    constexpr u32 MI = WTM / 16, NJ = WTN / 8;
    constexpr u32 XC = BM * 4 / NT;  // 8-float pieces of x per thread per stage
    static_assert(BN == NT && XC * NT == BM * 4 && NJ % 2 == 0, "tile shape");
    ggml_t* smem = reinterpret_cast<ggml_t*>(smem_raw);
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    // This thread's weight row: tile column tid (GU: output wo's gate or up row).
    const u32 wo = GU ? 8u * (tid >> 4) + (tid & 7u) : tid;
    const bool wlive = n0 + wo < N;
    const unsigned char* wrow = (GU && ((tid >> 3) & 1u) != 0u ? wu : w) + u64(wlive ? n0 + wo : 0u) * rb;
    const bool xvec = aligned16(x) && x_row % 4u == 0;

    GgmlRaw raw;
    float xv[XC][8] = {};
    uint4 xr[XC];
    // Piece c of x rounded to f16 pairs: after the step's mmas (LATE, with the chunk's raw_finish) or at once.
    auto round_x = [&](u32 c) {
        xr[c] = make_uint4(pack2<ggml_t>(xv[c][0], xv[c][1]), pack2<ggml_t>(xv[c][2], xv[c][3]), pack2<ggml_t>(xv[c][4], xv[c][5]),
                           pack2<ggml_t>(xv[c][6], xv[c][7]));
    };
    // Loads k tile kt into registers (whatever its stage): x, and the weight
    // chunk (LATE: raw_fetch's words, nothing computed from them yet; else
    // x rounded at once and raw_load).
    auto issue = [&](u32, u32 step) {
        const u32 kt = kt0 + step, k0 = kt * 32u;
#pragma unroll
        for (u32 c = 0; c < XC; ++c) {
            const u32 i = tid + c * NT, r = i >> 2, q = i & 3u;
            u32 xr_row;
            if (x_of(r, xr_row)) {
                const float* p = x + u64(xr_row) * x_row + k0 + 8u * q;
                if (xvec) {
                    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
                    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
                    xv[c][0] = a.x; xv[c][1] = a.y; xv[c][2] = a.z; xv[c][3] = a.w;
                    xv[c][4] = b.x; xv[c][5] = b.y; xv[c][6] = b.z; xv[c][7] = b.w;
                } else {
#pragma unroll
                    for (int j = 0; j < 8; ++j) xv[c][j] = p[j];
                }
                if constexpr (!LATE) round_x(c);
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) xv[c][j] = 0.0f;
                if constexpr (!LATE) xr[c] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
        if constexpr (LATE) {
            if (wlive) raw_fetch<F>(wrow, kt, raw);
        } else {
            if (wlive) raw_load<F>(wrow, kt, raw);
        }
    };
    // Stores what issue() holds into stage `stage`: x as f16, and the weight
    // chunk as f16 in natural order.
    auto park = [&](u32 stage) {
        ggml_t* xs = smem + stage * (BM + BN) * GLDS;
        ggml_t* ws = xs + BM * GLDS;
        if constexpr (LATE) {
#pragma unroll
            for (u32 c = 0; c < XC; ++c) round_x(c);
            if (wlive) raw_finish<F>(raw);
        }
        park_chunks<NT, GLDS>(xs, xr, tid);
        uint4* dst = reinterpret_cast<uint4*>(ws + tid * GLDS);
#pragma unroll
        for (u32 h = 0; h < 2; ++h) {
            u32 p[8];
            pairs16_live<F>(raw, h, wlive, p);
            dst[2 * h] = make_uint4(p[0], p[1], p[2], p[3]);
            dst[2 * h + 1] = make_uint4(p[4], p[5], p[6], p[7]);
        }
    };

    float acc[MI][NJ][4];
    mma_zero(acc);
    const u32 wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;
    mma_pipeline<ggml_t, GSTAGES, BM, BN, GLDS, false>(acc, smem, KT, wm0, wn0, lane, issue, park);
    mma_store<float, GU>(acc, y, y_row, N, n0, wm0, wn0, lane, y_of, activation);
}

// A 128 x 128 tile of y = x W^T at weight rows (output columns) n0 .. on
// Hopper's warpgroup MMA, the per-expert GGUF form of many pairs an expert
// (kernel_mul_mm_id_<t>_f32_wg): tile row r reads x row x_of(r, row) (rows
// x_row floats apart; zeros where it returns false) and is stored to y row
// y_of(r, row) (rows y_row floats apart); weight rows rb bytes apart, K a
// multiple of 32. 256 threads, two warpgroups of 64 tile rows on m64n128k16
// (f16, f32 sums) from 3 stages of 128 + 128 rows of 128 swizzled bytes (64
// values of k; dynamic shared memory: GWG_SMEM<F>). A step's x: thread t
// loads 8 values (f32, rounded to f16 as the matrix engine rounds them) at
// k + 8 (t % 8) of tile rows t / 8 + 32 j into registers after the wgmma of
// the step before, stored once the wgmma before that is done. A step's
// weight: thread t decodes chunk 2 kt + t % 2 (32 values) of row n0 + t / 2
// into the swizzled rows at the same point, from
// - Q4_K and Q5_K with 16-byte aligned rows: the chunk's 16-byte units of
//   its super-block (the header, Q5_K's high bits, the quant bytes of its
//   sub-block pair: GWG_UNITS) copied into shared memory by the whole block
//   by cp.async GWG_FAR steps ahead, many rows' units a warp's copy (a
//   thread's own row's scalar loads were the L1's bottleneck);
// - otherwise raw_fetch's words, loaded with x.
// A tile's 128 weight rows are read and decoded once for a slot of up to
// 128 pairs, where the mma.sync tiles (gmm_tile) take 64. Built without
// sm_90a (the op plans the form on compute capability 9.0 only) each thread
// sums its outputs one at a time from the same decoded values.
constexpr u32 GWG_STAGES = 3;  // one stage computed, one read by the wgmma before it, one stored
constexpr u32 GWG_FAR = 2;     // steps the cp.async copies of the weight's units run ahead
template <int F> constexpr u32 GWG_UNITS = F == GGML_Q5_K ? 5u : F == GGML_Q4_K ? 3u : 0u;  // 16-byte units a row a step
// The op's ggmlIdMmWgSharedBytes: the stages, GWG_FAR steps of units, 1024 bytes to align the stages.
template <int F> constexpr u32 GWG_SMEM = GWG_STAGES * (128u + 128u) * 128u + GWG_FAR * 128u * GWG_UNITS<F> * 16u + 1024u;
//
// GU (the per-expert fused gate/up form): n0 counts outputs, 64 a tile; tile
// column c is output n0 + 8 (c / 16) + c % 8's row of w (the gate) where (c
// / 8) is even, of wu (the up projection) where it is odd; y gets act(gate)
// * up (gate_activation's activation).
template <bool GU> struct GwgRow {
    // Output of tile column c, and its weight.
    __device__ __forceinline__ static u32 out(u32 c) { return GU ? 8u * (c >> 4) + (c & 7u) : c; }
    __device__ __forceinline__ static const unsigned char* of(u32 c, const unsigned char* w, const unsigned char* wu) {
        return GU && ((c >> 3) & 1u) != 0u ? wu : w;
    }
};
template <int F, bool GU = false, typename XOf, typename YOf>
__device__ __forceinline__ void gwg_tile(unsigned char* smem_raw, const unsigned char* w, const float* x, float* y, u32 N, u32 K, u64 rb,
                                         u64 x_row, u64 y_row, u32 n0, XOf&& x_of, YOf&& y_of, const unsigned char* wu = nullptr,
                                         u32 activation = 0u) {
    using Row = GwgRow<GU>;
    const u32 tid = threadIdx.x;
    const u32 wr = tid >> 1, wh = tid & 1u;  // this thread's weight row of the tile and its chunk of a step
    const bool wlive = n0 + Row::out(wr) < N;
    const unsigned char* wrow = Row::of(wr, w, wu) + u64(wlive ? n0 + Row::out(wr) : 0u) * rb;
#ifdef MLXN_WGMMA
    constexpr u32 STAGE = (128u + 128u) * 128u;
    unsigned char* smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
    const u32 c = tid & 7u, r0 = tid >> 3;
    // Rows r0 + 32 j share r0's swizzle: their chunks sit 4096 j bytes apart.
    const u32 sw = sw128_offset(r0, c);
    const bool xvec = aligned16(x) && x_row % 4u == 0;
    const u32 KT = (K + 63u) / 64u;

    uint4 xr[4];
    auto issue_x = [&](u32 kt) {
        const u32 k = kt * 64u + 8u * c;
#pragma unroll
        for (u32 j = 0; j < 4; ++j) {
            u32 row;
            if (k < K && x_of(r0 + 32u * j, row)) {
                const float* p = x + u64(row) * x_row + k;
                float v[8];
                if (xvec) {
                    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
                    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
                    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
                    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
                } else {
#pragma unroll
                    for (int e = 0; e < 8; ++e) v[e] = p[e];
                }
                xr[j] = make_uint4(pack2<ggml_t>(v[0], v[1]), pack2<ggml_t>(v[2], v[3]), pack2<ggml_t>(v[4], v[5]),
                                   pack2<ggml_t>(v[6], v[7]));
            } else {
                xr[j] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
    };
    // Stores x's registers and the decoded chunk r (zeros where !live) into stage `stage`.
    auto park = [&](u32 stage, GgmlRaw& r, bool live) {
        unsigned char* xs = smem + stage * STAGE;
        unsigned char* ws = xs + 128u * 128u;
#pragma unroll
        for (u32 j = 0; j < 4; ++j) *reinterpret_cast<uint4*>(xs + sw + 4096u * j) = xr[j];
#pragma unroll
        for (u32 h = 0; h < 2; ++h) {
            u32 p[8];
            pairs16_live<F>(r, h, live, p);
            // Values 16 h .. 16 h + 15 of the chunk: 16-byte pieces 4 wh + 2 h and + 1 of the row.
            *reinterpret_cast<uint4*>(ws + sw128_offset(wr, 4u * wh + 2u * h)) = make_uint4(p[0], p[1], p[2], p[3]);
            *reinterpret_cast<uint4*>(ws + sw128_offset(wr, 4u * wh + 2u * h + 1u)) = make_uint4(p[4], p[5], p[6], p[7]);
        }
    };

    float acc[64];
#pragma unroll
    for (u32 i = 0; i < 64; ++i) acc[i] = 0.0f;
    bool units = false;
    if constexpr (GWG_UNITS<F> != 0) units = aligned16(w) && (!GU || aligned16(wu)) && rb % 16u == 0;
    if (units) {
        if constexpr (GWG_UNITS<F> != 0) {
            constexpr u32 U = GWG_UNITS<F>, SLOT = 128u * U * 16u;
            unsigned char* const units0 = smem + GWG_STAGES * STAGE;
            // Step kt's units into slot kt % GWG_FAR, row-major (row i / U, unit i % U): the header, Q5_K's
            // high bits, then the two 16-byte units of sub-block pair kt % 4's quant bytes.
            auto fetch = [&](u32 kt) {
                unsigned char* dst = units0 + (kt % GWG_FAR) * SLOT;
                const u64 sb = u64(kt / 4u) * GgmlFmt<F>::BYTES;
                const u32 q0 = (U - 2u) + 2u * (kt % 4u);  // the pair's first quant unit in the super-block
#pragma unroll
                for (u32 j = 0; j < (128u * U + 255u) / 256u; ++j) {
                    const u32 i = tid + 256u * j;
                    if (i < 128u * U) {
                        const u32 row = i / U, u = i % U;
                        const bool live = n0 + Row::out(row) < N;
                        const u32 unit = u < U - 2u ? u : q0 + (u - (U - 2u));
                        cp_async16(dst + 16u * i, Row::of(row, w, wu) + (live ? u64(n0 + Row::out(row)) * rb + sb + 16u * unit : 0u), live);
                    }
                }
            };
            // Decodes this thread's chunk of step kt from its row's units (published by a barrier).
            auto decode = [&](u32 kt, GgmlRaw& r) {
                const unsigned char* ur = units0 + (kt % GWG_FAR) * SLOT + wr * U * 16u;
                KqRegs kq;
                kq_load<F>(ur, 0u, kq);
                kq_raw(kq, (2u * kt + wh) % 8u, r);
                if constexpr (F == GGML_Q5_K) kq_high(ur, r);
            };
            for (u32 s = 0; s < GWG_FAR; ++s) {
                if (s < KT) fetch(s);
                cp_async_commit();
            }
            issue_x(0);
            cp_async_wait<GWG_FAR - 1>();
            __syncthreads();
            {
                GgmlRaw r;
                decode(0, r);
                park(0, r, wlive);
            }
            const u64 da = wgmma_desc_sw128(smem + (tid >> 7) * 64u * 128u);
            const u64 db = wgmma_desc_sw128(smem + 128u * 128u);
            for (u32 kt = 0; kt < KT; ++kt) {
                // This thread's copies of step kt + 1 landed (a group a step, GWG_FAR - 2 later ones in flight); the
                // barrier publishes stage kt and every copy of step kt + 1, and frees the units of step kt (decoded
                // at the step before) and stage kt - 2 (every warpgroup waited for its wgmma at the step before).
                cp_async_wait<GWG_FAR - 2>();
                fence_proxy_async_smem();
                __syncthreads();
                if (kt + GWG_FAR < KT) fetch(kt + GWG_FAR);
                cp_async_commit();
                wg_stage<ggml_t>(acc, da, db, (kt % GWG_STAGES) * STAGE);
                if (kt + 1u < KT) issue_x(kt + 1u);
                wgmma_wait<1>();
                acc_fence(acc);
                if (kt + 1u < KT) {
                    GgmlRaw r;
                    decode(kt + 1u, r);
                    park((kt + 1u) % GWG_STAGES, r, wlive);
                }
            }
            wgmma_wait<0>();
            acc_fence(acc);
            cp_async_wait<0>();
        }
    } else {
        GgmlRaw raw;
        bool clive = false;
        auto issue = [&](u32, u32 kt) {
            issue_x(kt);
            const u32 chunk = 2u * kt + wh;
            clive = wlive && chunk * 32u < K;
            if (clive) raw_fetch<F>(wrow, chunk, raw);
        };
        auto park_raw = [&](u32 stage) {
            if (clive) raw_finish<F>(raw);
            park(stage, raw, clive);
        };
        wg_pipeline<ggml_t, 128, GWG_STAGES, false>(acc, smem, KT, issue, park_raw);
    }

    // acc[4 q + 2 h + e]: tile row 64 (warpgroup) + 16 (warp % 4) + lane / 4 + 8 h, column 8 q + 2 (lane % 4) + e.
    const u32 lane = tid & 31u;
    const u32 rt = (tid >> 7) * 64u + ((tid >> 5) & 3u) * 16u + (lane >> 2);
#pragma unroll
    for (u32 h = 0; h < 2; ++h) {
        u32 yr;
        if (!y_of(rt + 8u * h, yr)) continue;
        float* yp = y + u64(yr) * y_row;
#pragma unroll
        for (u32 q = 0; q < 16; q += (GU ? 2u : 1u)) {
            float v0 = acc[4 * q + 2 * h], v1 = acc[4 * q + 2 * h + 1];
            u32 col = n0 + 8u * q + 2u * (lane & 3u);
            if constexpr (GU) {
                // Columns 8 q .. are the gate of outputs 4 q .., columns 8 (q + 1) .. their up rows.
                col = n0 + 4u * q + 2u * (lane & 3u);
                v0 = gate_activation(v0, activation) * acc[4 * (q + 1) + 2 * h];
                v1 = gate_activation(v1, activation) * acc[4 * (q + 1) + 2 * h + 1];
            }
            if (col < N) yp[col] = v0;
            if (col + 1u < N) yp[col + 1u] = v1;
        }
    }
#else
    (void)smem_raw;
    (void)wrow;
    // Thread t: outputs (tile row i / C, output n0 + i % C) for i = t, t + 256, ... (C = 128, GU 64).
    constexpr u32 C = GU ? 64u : 128u;
    for (u32 i = tid; i < 128u * C; i += blockDim.x) {
        const u32 r = i / C, n = n0 + i % C;
        u32 xrw, yr;
        if (n >= N || !y_of(r, yr)) continue;
        const bool xl = x_of(r, xrw);
        auto dot = [&](const unsigned char* row) {
            float s = 0.0f;
            for (u32 ch = 0; xl && ch < K / 32u; ++ch) {
                GgmlRaw cr;
                raw_load<F>(row, ch, cr);
#pragma unroll
                for (u32 h = 0; h < 2; ++h) {
                    u32 p[8];
                    pairs16<F>(cr, h, p);
#pragma unroll
                    for (u32 e = 0; e < 8; ++e) {
                        const float* xp = x + u64(xrw) * x_row + 32u * ch + 16u * h + 2u * e;
                        const u32 xq = pack2<ggml_t>(xp[0], xp[1]);
                        const float2 wv = __half22float2(*reinterpret_cast<const __half2*>(&p[e]));
                        const float2 xv = __half22float2(*reinterpret_cast<const __half2*>(&xq));
                        s = fmaf(xv.x, wv.x, s);
                        s = fmaf(xv.y, wv.y, s);
                    }
                }
            }
            return s;
        };
        const float s = dot(w + u64(n) * rb);
        y[u64(yr) * y_row + n] = GU ? gate_activation(s, activation) * dot(wu + u64(n) * rb) : s;
    }
#endif
}

// Split k: the S blocks of a BM x BN output tile (y rows m0 .., columns n0
// ..) have each stored their slice's partial tile at partials + s M N (rows
// N floats apart). Each arrives at the tile's word; the block whose arrival
// makes it S sums the S partials in slice order 0 .. S - 1 into y (rows
// y_row apart) and sets the word back to zero. So y is the same whichever
// block arrives last, no block waits for another, and the word ends the
// dispatch as it began (zero: the encoder's, Encoder._syncWords). The sum
// reads a thread's S partials of 4 outputs (one of 16 bytes where the rows
// and buffers allow) before adding any: one L2 round trip a group, not S.
constexpr u32 SPLIT_MAX = 16;  // slices at most (the op's GGML_SPLIT_MAX)
template <u32 V>
__device__ __forceinline__ void split_sum(const float* at, u64 plane, u32 S, float* dst) {
    float v[SPLIT_MAX][V];
#pragma unroll
    for (u32 q = 0; q < SPLIT_MAX; ++q) {
        if (q < S) {
            if constexpr (V == 4) {
                const float4 a = __ldcg(reinterpret_cast<const float4*>(at + q * plane));
                v[q][0] = a.x; v[q][1] = a.y; v[q][2] = a.z; v[q][3] = a.w;
            } else {
                v[q][0] = __ldcg(at + q * plane);
            }
        }
    }
#pragma unroll
    for (u32 e = 0; e < V; ++e) {
        float t = v[0][e];
#pragma unroll
        for (u32 q = 1; q < SPLIT_MAX; ++q)
            if (q < S) t += v[q][e];
        dst[e] = t;
    }
}
template <u32 BM, u32 BN>
__device__ __forceinline__ void split_reduce(const float* partials, u32* word, float* y, u64 y_row, u32 M, u32 N, u32 m0, u32 n0,
                                             u32 S) {
    __shared__ u32 arrived;
    // Each thread's partial stores are visible device-wide before the block arrives.
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) arrived = atomicAdd(word, 1u);
    __syncthreads();
    if (arrived + 1u != S) return;
    __threadfence();
    const u32 rows = min(BM, M - m0), cols = min(BN, N - n0);
    const u64 plane = u64(M) * N;
    // From L2 (__ldcg): other blocks wrote them.
    if (N % 4u == 0 && y_row % 4u == 0 && aligned16(partials) && aligned16(y)) {
        const u32 c4 = cols / 4u;
        for (u32 i = threadIdx.x; i < rows * c4; i += blockDim.x) {
            const u32 r = i / c4, c = 4u * (i - r * c4);
            float t[4];
            split_sum<4>(partials + u64(m0 + r) * N + n0 + c, plane, S, t);
            *reinterpret_cast<float4*>(y + u64(m0 + r) * y_row + n0 + c) = make_float4(t[0], t[1], t[2], t[3]);
        }
    } else {
        for (u32 i = threadIdx.x; i < rows * cols; i += blockDim.x) {
            const u32 r = i / cols, c = i - r * cols;
            split_sum<1>(partials + u64(m0 + r) * N + n0 + c, plane, S, y + u64(m0 + r) * y_row + n0 + c);
        }
    }
    if (threadIdx.x == 0) *word = 0u;
}

// ---- Q4_K at one token: the group-column engine (quantized_matmul_ggml,
// quantized_matmul_id_ggml) ----

// The group-column engine (qmv_gc) for Q4_K: what kernel_mul_mv_q4_K_f32
// runs for one token and kernel_mul_mv_id_q4_K_f32 (_gate_up) for each
// pair. A round is a super-block (8 sub-blocks of
// 32 values, 144 bytes a row): lane (g, t) takes sub-blocks 2t and 2t + 1 of rows g and g + 8, whose
// quant bytes are the same 32 (32t ..: low nibbles sub-block 2t, high
// nibbles 2t + 1), and its 16-byte header (d, dmin, scales). A word of them
// gives 4 values of each sub-block; the nibble shifts 0 and 4 (8 and 12)
// give both sub-blocks' values l, l + 2 (l + 1, l + 3) as 128 + q in bf16,
// so an mma's a0 / a1 hold sub-block 2t and a2 / a3 sub-block 2t + 1, and
// B's b0 is x on sub-block 2t for lane g = 2t, b1 x on sub-block 2t + 1 for
// g = 2t + 1, zeros otherwise: C[row][n] is sub-block n's sum of x (128 +
// q). Then y += a C + (b - 128 a) X_n, a = d sc, b = -dmin m (kq_raw), X_n
// the sub-block's sum of x rounded to bf16 (x is rounded as the entry
// rounds it). x in shared memory: per word of 4 values (x0, x2) and (x1,
// x3) as bf16 pairs, 8 words a sub-block. W warps a 16-row tile split the
// super-blocks; 2 rounds of loads in flight; 128 threads; grid
// ceil(ceil(N / 16) W / 4); dynamic shared memory gc_q4k_shared(K). Needs a
// 16-byte aligned weight and x (K is a multiple of 256). blk: the block's
// index among the product's blocks (blockIdx.x for one matrix, a pair's own
// for the per-expert forms). GU (the per-expert gate-up form): a tile is 8
// outputs, rows a the gate's (w) and rows b the up projection's (uw) of the
// same outputs, stored as act(gate) * up (gc_store).
template <u32 W, bool GU = false>
__device__ __forceinline__ void gmv_gc_q4k(const unsigned char* w, const float* x, float* y, u32 N, u32 K, u32 blk,
                                           const unsigned char* uw = nullptr, u32 activation = 0u) {
    constexpr u32 D = 2, TPB = W < 4u ? 4u / W : 1u;  // tiles a block of max(W, 4) warps
    constexpr float M = 128.0f;
    constexpr u32 P2 = 0x43004300u;  // bf16 128 in both halves
    // The launch's dynamic shared memory, under a name of its own: the
    // extern "C" entries that call this declare theirs as smem_raw.
    extern __shared__ __align__(16) unsigned char gc_q4k_smem[];
    const u32 R = K / 256u, SUBS = K / 32u;
    uint2* xs = reinterpret_cast<uint2*>(gc_q4k_smem);  // SUBS x 8 words
    uint2* zb = xs + SUBS * 8u;                      // 8 zero words
    float* xsum = reinterpret_cast<float*>(zb + 8);  // SUBS
    float* red = xsum + SUBS;                        // 4 warps x 16
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u32 g = lane >> 2, t = lane & 3u;
    // K / 4 words, a multiple of 64: whole warps a pass; a sub-block's 8 words are 8 consecutive lanes.
    gc_stage_x<float, 1u, 4u>(x, K, K / 4u, true, [&](u32 wd, const uint4 (&raw)[1]) {
        const float4 v = *reinterpret_cast<const float4*>(&raw[0]);
        const u32 p0 = pack_bf16(v.x, v.z), p1 = pack_bf16(v.y, v.w);
        xs[wd] = make_uint2(p0, p1);
        const __nv_bfloat162 h0 = *reinterpret_cast<const __nv_bfloat162*>(&p0), h1 = *reinterpret_cast<const __nv_bfloat162*>(&p1);
        float s = (__low2float(h0) + __high2float(h0)) + (__low2float(h1) + __high2float(h1));
#pragma unroll
        for (u32 o = 1; o < 8u; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (wd % 8u == 0u) xsum[wd / 8u] = s;
    });
    if (tid < 8u) zb[tid] = make_uint2(0u, 0u);
    __syncthreads();
    const u32 tile = blk * TPB + warp / W, part = warp % W, row0 = tile * (GU ? 8u : 16u);
    const u32 mine = row0 < N && part < R ? (R - part + W - 1u) / W : 0u;
    const u64 row_bytes = u64(R) * 144u;
    const u32 ra = min(row0 + g, N - 1u);
    const unsigned char* wa = w + u64(ra) * row_bytes;
    const unsigned char* wb = GU ? uw + u64(ra) * row_bytes : w + u64(min(row0 + g + 8u, N - 1u)) * row_bytes;
    KqRegs ka[D], kb[D];
    auto issue = [&](u32 u, u32 j) {
        if (j < mine) {
            const u64 off = u64(part + j * W) * 144u;
            kq_load<GGML_Q4_K>(wa + off, t, ka[u]);
            kq_load<GGML_Q4_K>(wb + off, t, kb[u]);
        } else {
            ka[u].hd = kb[u].hd = ka[u].qs[0] = kb[u].qs[0] = ka[u].qs[1] = kb[u].qs[1] = make_uint4(0u, 0u, 0u, 0u);
        }
    };
    const u32 magic = opaque_u32(P2);  // one LOP3 a pair (gc_round's LOP3)
    auto ext = [magic](u32 word, u32 sh) { return and_or<0x000F000Fu>(word >> sh, magic); };
    float acc_a = 0.0f, acc_b = 0.0f;
    qmv_ring<D>(mine, issue, [&](u32 u, u32 j) {
        const u32 s0 = (part + j * W) * 8u + 2u * t;  // this lane's first sub-block, over the row
        const uint2* x0 = g == 2u * t ? xs + u64(s0) * 8u : zb;
        const uint2* x1 = g == 2u * t + 1u ? xs + u64(s0 + 1u) * 8u : zb;
        const u32 qa[8] = {ka[u].qs[0].x, ka[u].qs[0].y, ka[u].qs[0].z, ka[u].qs[0].w, ka[u].qs[1].x, ka[u].qs[1].y, ka[u].qs[1].z, ka[u].qs[1].w};
        const u32 qb[8] = {kb[u].qs[0].x, kb[u].qs[0].y, kb[u].qs[0].z, kb[u].qs[0].w, kb[u].qs[1].x, kb[u].qs[1].y, kb[u].qs[1].z, kb[u].qs[1].w};
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (u32 q = 0; q < 8; ++q) {
            const uint2 u0 = x0[q], u1 = x1[q];
            u32 a[4] = {ext(qa[q], 0), ext(qb[q], 0), ext(qa[q], 4), ext(qb[q], 4)};
            mma_bf16(c, a, u0.x, u1.x);
            a[0] = ext(qa[q], 8);
            a[1] = ext(qb[q], 8);
            a[2] = ext(qa[q], 12);
            a[3] = ext(qb[q], 12);
            mma_bf16(c, a, u0.y, u1.y);
        }
        GgmlRaw r;
        kq_raw(ka[u], 2u * t, r);
        const float aa0 = r.a[0], ba0 = r.b[0];
        kq_raw(ka[u], 2u * t + 1u, r);
        const float aa1 = r.a[0], ba1 = r.b[0];
        kq_raw(kb[u], 2u * t, r);
        const float ab0 = r.a[0], bb0 = r.b[0];
        kq_raw(kb[u], 2u * t + 1u, r);
        const float ab1 = r.a[0], bb1 = r.b[0];
        const float x0s = xsum[s0], x1s = xsum[s0 + 1u];
        acc_a += fmaf(aa0, c[0], (ba0 - M * aa0) * x0s) + fmaf(aa1, c[1], (ba1 - M * aa1) * x1s);
        acc_b += fmaf(ab0, c[2], (bb0 - M * ab0) * x0s) + fmaf(ab1, c[3], (bb1 - M * ab1) * x1s);
    });
    gc_store<W, GU>(acc_a, acc_b, red, warp, lane, part, row0, N, y, activation);
}
__device__ __forceinline__ u32 gc_q4k_shared(u32 K) { return K * 2u + K / 32u * 4u + 1024u; }

// ---- the Q8_0 and Q6_K group-column engines' shared parts ----

// NW words at p in shared memory: 4-byte loads where p is on 4, else 2-byte
// ones (Q8_0's and Q6_K's rows start on 2 bytes).
template <u32 NW>
__device__ __forceinline__ void gc_stage_words(const unsigned char* p, u32 (&q)[NW]) {
    if ((reinterpret_cast<u64>(p) & 3u) == 0u) {
#pragma unroll
        for (u32 j = 0; j < NW; ++j) q[j] = reinterpret_cast<const u32*>(p)[j];
    } else {
#pragma unroll
        for (u32 j = 0; j < NW; ++j) q[j] = ld32_2(p + 4u * j);
    }
}

// x of one token as f16 pairs in order into xs (units of 4 values, `units`
// of them, zeros past K) with the sum of each group of GU4 units (the
// rounded values: a Q8_0 block's 32 values, GU4 8; a Q6_K group's 16, 4)
// into xsum, through gc_stage_x.
template <u32 GU4>
__device__ __forceinline__ void gc_stage_x_f16(const float* x, u32 K, u32 units, uint4* xs, float* xsum) {
    gc_stage_x<float, 1u, 4u>(x, K, units, aligned16(x), [&](u32 wd, const uint4 (&raw)[1]) {
        const float4 v = *reinterpret_cast<const float4*>(&raw[0]);
        const u32 p0 = pack2<__half>(v.x, v.y), p1 = pack2<__half>(v.z, v.w);
        reinterpret_cast<uint2*>(xs)[wd] = make_uint2(p0, p1);
        const __half2 h0 = *reinterpret_cast<const __half2*>(&p0), h1 = *reinterpret_cast<const __half2*>(&p1);
        float sm = (__low2float(h0) + __high2float(h0)) + (__low2float(h1) + __high2float(h1));
#pragma unroll
        for (u32 o = 1; o < GU4; o <<= 1) sm += __shfl_xor_sync(0xffffffffu, sm, o);
        if (wd % GU4 == 0u) xsum[wd / GU4] = sm;
    });
}

// Waits until at most S - 1 of the thread's copy groups are in flight (S, a
// warp's stages, 1 to GMV_STAGES: a run-time value).
__device__ __forceinline__ void gc_stage_wait(u32 S) {
    if (S >= 3u) {
        cp_async_wait<2>();
    } else if (S == 2u) {
        cp_async_wait<1>();
    } else {
        cp_async_wait<0>();
    }
}

// The mma steps of the Q8_0 and Q6_K engines over two units of staged x
// (xs as f16 pairs, UNITS uint4 a unit: a Q8_0 block of 32 values, a Q6_K
// group of 16): lane (g, t)'s B operand is unit `first` for g == 2t,
// `first + 1` for g == 2t + 1, zeros (zb) for the other lanes;
// step s = 4 u + e takes word e of unit u and the A that a_of(s, a) writes,
// adding the even steps into c, the odd into c1 (two chains of half the
// dependent latency, which the caller adds up).
template <u32 UNITS, typename AOf>
__device__ __forceinline__ void gc_mma_chains(float (&c)[4], float (&c1)[4], const uint4* xs, const uint4* zb, u32 g, u32 t, u32 first,
                                              AOf&& a_of) {
    const uint4* x0 = g == 2u * t ? xs + u64(first) * UNITS : zb;
    const uint4* x1 = g == 2u * t + 1u ? xs + u64(first + 1u) * UNITS : zb;
#pragma unroll
    for (u32 u = 0; u < UNITS; ++u) {
        const uint4 v0 = x0[u], v1 = x1[u];
        const u32 xv0[4] = {v0.x, v0.y, v0.z, v0.w}, xv1[4] = {v1.x, v1.y, v1.z, v1.w};
#pragma unroll
        for (u32 e = 0; e < 4u; ++e) {
            const u32 s = 4u * u + e;
            u32 a[4];
            a_of(s, a);
            if ((s & 1u) == 0u) {
                mma16<__half>(c, a, xv0[e], xv1[e]);
            } else {
                mma16<__half>(c1, a, xv0[e], xv1[e]);
            }
        }
    }
}

// ---- Q8_0 at one token: the group-column engine (quantized_matmul_ggml,
// quantized_matmul_id_ggml) ----

// The group-column engine for Q8_0 (34-byte blocks: an f16 scale d, then 32
// int8 codes q; w = d q): what kernel_mul_mv_q8_0_f32 runs for one token and
// kernel_mul_mv_id_q8_0_f32 (_gate_up) for each pair. A round is 8 blocks
// (256 values, 272 bytes a row): lane (g, t) takes blocks 2t and 2t + 1 of
// rows g and g + 8, 68 consecutive bytes of each row. Mma step s (16 a round)
// takes codes 2s and 2s + 1 of both blocks: a code pair as f16 is one
// byte_perm of its word (sign bit flipped) with the byte 0x64, 1024 + (q +
// 128), exact; a0 / a1 hold block 2t's pair of rows g / g + 8, a2 / a3 block
// 2t + 1's, and B's column n is x on block n's values 2s, 2s + 1 (b0 for lane
// g = 2t, b1 for g = 2t + 1, zeros otherwise), so C[row][n] is block n's sum
// of x (1152 + q). Then y += d (C - 1152 X_n), X_n the block's sum of x
// rounded to f16 (as the vector engine rounds x; the products x (1152 + q)
// are exact in f32, and the offset costs about 4 bits of the f32 sums). Rows
// are not 16-byte aligned (34-byte blocks), so the rounds come through
// shared memory: each warp copies its rounds' 16 rows (gmv_copy, 16-byte
// units from each row's bytes rounded down to 16, into stages of the vector
// engine's row pitch) and reads a lane's 68 bytes of a row from there, as 17
// words where the row's bytes start on 4 (every row where k is a multiple of
// 64 and the weight 4-byte aligned), else as 34 halves. A warp holds
// gc_q8_0_stages(K, W) stages: one a round it takes, up to 3 (two in flight
// while one is read), so short rows leave the block less shared memory and
// the SM more blocks. W warps a 16-row tile split the rounds (a partial last
// round: blocks past the row's end have x zero and d taken as 0); x in
// shared memory as f16 pairs, 16 a block, with the blocks' sums. 128
// threads, grid ceil(ceil(N / 16) W / 4), dynamic shared memory
// gc_q8_0_shared(K, W) from `smem`. Any k (a multiple of 32) and alignment
// that Q8_0 rows have; the engine's choice is made from the sizes alone, so
// the host that sizes the launch makes it alike (ts/ops/quantized_matmul_ggml.ts
// ggmlGcTakes, ggmlGcSharedBytes). blk: the block's index among the
// product's blocks. GU (the per-expert gate-up form): a tile is 8 outputs,
// rows a the gate's (w) and rows b the up projection's (uw) of the same
// outputs, stored as act(gate) * up (gc_store).
constexpr u32 GC_Q8_SP = GmvStage<GGML_Q8_0>::SP;  // 304 bytes a stage row: rows 12 banks apart
__device__ __forceinline__ u32 gc_q8_0_stages(u32 K, u32 W) {
    const u32 R = (K / 32u + 7u) / 8u;
    return min(GMV_STAGES, (R + W - 1u) / W);
}
// The stages, x (68 bytes a block of 32, to whole rounds), 64 bytes of zeros and the warps' 256 bytes of sums.
__device__ __forceinline__ u32 gc_q8_0_shared(u32 K, u32 W) {
    return GMV_WARPS * gc_q8_0_stages(K, W) * 16u * GC_Q8_SP + (K / 32u + 7u) / 8u * 8u * 68u + 320u;
}
// Whether one token's Q8_0 product of rows of K values takes the engine: x's copy within GC_MAX_SHARED.
__device__ __forceinline__ bool gc_q8_0_takes(u32 K) { return (K / 32u + 7u) / 8u * 8u * 68u + 320u <= GC_MAX_SHARED; }
template <u32 W, bool GU = false>
__device__ __forceinline__ void gmv_gc_q8_0(unsigned char* smem, const unsigned char* w, const float* x, float* y, u32 N, u32 K, u32 blk,
                                            const unsigned char* uw = nullptr, u32 activation = 0u) {
    constexpr u32 TPB = 4u / W, SP = GC_Q8_SP;
    constexpr float M = 1152.0f;
    const u32 G = K / 32u, R = (G + 7u) / 8u, S = gc_q8_0_stages(K, W);
    const u64 rb = u64(G) * 34u;
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u32 g = lane >> 2, t = lane & 3u;
    unsigned char* stages = smem + warp * S * 16u * SP;
    uint4* xs = reinterpret_cast<uint4*>(smem + GMV_WARPS * S * 16u * SP);  // R x 8 blocks x 4 units (16 f16 pairs)
    float* xsum = reinterpret_cast<float*>(xs + R * 32u);                   // R x 8
    uint4* zb = reinterpret_cast<uint4*>(xsum + R * 8u);                     // a block's 4 units of zeros
    float* red = reinterpret_cast<float*>(zb + 4);                           // 4 warps x 16
    const u32 tile = blk * TPB + warp / W, part = warp % W, row0 = tile * (GU ? 8u : 16u);
    const u32 mine = row0 < N && part < R ? (R - part + W - 1u) / W : 0u;
    // Tile rows r < 8: rows row0 + r of w; r >= 8: the gate/up form's up rows row0 + r - 8, else rows row0 + r.
    const unsigned char* wb = GU ? uw : w;
    constexpr u32 HB = GU ? 0u : 8u;
    // The weight's first rounds are on their way while x is staged.
    for (u32 s = 0; s + 1u < S; ++s) {
        if (s < mine) gmv_copy<GGML_Q8_0>(w, wb, HB, rb, N, K, row0, part + s * W, stages + s * 16u * SP, lane);
        cp_async_commit();
    }
    // x as f16 pairs, zeros past K to whole rounds (R x 64 units of 4 values), a sum a block of 32.
    gc_stage_x_f16<8u>(x, K, R * 64u, xs, xsum);
    if (tid < 4u) zb[tid] = make_uint4(0u, 0u, 0u, 0u);
    __syncthreads();
    // Tile rows of this lane (weight rows clamped below N: rows past N compute what nobody stores).
    const u32 rowa = min(row0 + g, N - 1u), rowb = min(row0 + HB + g, N - 1u);
    const u32 ta = rowa - row0, tb = GU ? 8u + rowb - row0 : rowb - row0;
    const u64 abase = reinterpret_cast<u64>(w) + u64(rowa) * rb, bbase = reinterpret_cast<u64>(wb) + u64(rowb) * rb;
    auto cvt = [](u32 word, u32 sel) { return __byte_perm(word, 0x64646464u, sel); };
    float acc_a = 0.0f, acc_b = 0.0f;
    for (u32 i = 0; i < mine; ++i) {
        const u32 next = i + S - 1u;
        if (next < mine) gmv_copy<GGML_Q8_0>(w, wb, HB, rb, N, K, row0, part + next * W, stages + (next % S) * 16u * SP, lane);
        cp_async_commit();
        gc_stage_wait(S);
        __syncwarp();
        const u32 rr = part + i * W;  // the round
        const u64 off = u64(rr) * 272u;
        const unsigned char* st = stages + (i % S) * 16u * SP;
        // A lane's 68 bytes of each row as 17 words.
        u32 qa[17], qb[17];
        gc_stage_words(st + ta * SP + ((abase + off) & 15u) + 68u * t, qa);
        gc_stage_words(st + tb * SP + ((bbase + off) & 15u) + 68u * t, qb);
        const u32 b0 = rr * 8u + 2u * t;  // this lane's first block of the row
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        gc_mma_chains<4>(c, c1, xs, zb, g, t, b0, [&](u32 s, u32 (&a)[4]) {
            // Codes 2s, 2s + 1: block 2t's at bytes 2 + 2s (word (s + 1) / 2), block 2t + 1's at 36 + 2s.
            const u32 wa0 = qa[(s + 1u) / 2u] ^ 0x80808080u, wb0 = qb[(s + 1u) / 2u] ^ 0x80808080u;
            const u32 wa1 = qa[9u + s / 2u] ^ 0x80808080u, wb1 = qb[9u + s / 2u] ^ 0x80808080u;
            const u32 sel0 = (s & 1u) == 0u ? 0x4342u : 0x4140u, sel1 = (s & 1u) == 0u ? 0x4140u : 0x4342u;
            a[0] = cvt(wa0, sel0);
            a[1] = cvt(wb0, sel0);
            a[2] = cvt(wa1, sel1);
            a[3] = cvt(wb1, sel1);
        });
#pragma unroll
        for (u32 q = 0; q < 4u; ++q) c[q] += c1[q];
        // d of both blocks (bytes 0 and 34 of the lane's 68), 0 past the row's blocks.
        const bool live0 = b0 < G, live1 = b0 + 1u < G;
        const float da0 = live0 ? __half2float(__ushort_as_half(static_cast<unsigned short>(qa[0] & 0xffffu))) : 0.0f;
        const float da1 = live1 ? __half2float(__ushort_as_half(static_cast<unsigned short>(qa[8] >> 16))) : 0.0f;
        const float db0 = live0 ? __half2float(__ushort_as_half(static_cast<unsigned short>(qb[0] & 0xffffu))) : 0.0f;
        const float db1 = live1 ? __half2float(__ushort_as_half(static_cast<unsigned short>(qb[8] >> 16))) : 0.0f;
        const float x0s = xsum[b0], x1s = xsum[b0 + 1u];
        acc_a += da0 * fmaf(-M, x0s, c[0]) + da1 * fmaf(-M, x1s, c[1]);
        acc_b += db0 * fmaf(-M, x0s, c[2]) + db1 * fmaf(-M, x1s, c[3]);
        // Every lane is done with this stage before a later copy refills it.
        __syncwarp();
    }
    cp_async_wait<0>();
    gc_store<W, GU>(acc_a, acc_b, red, warp, lane, part, row0, N, y, activation);
}

// ---- Q6_K at one token: the group-column engine (quantized_matmul_ggml,
// quantized_matmul_id_ggml) ----

// The group-column engine for Q6_K (210-byte super-blocks of 256 values:
// ql[128] low nibbles, qh[64] high bit pairs, 16 int8 scales, f16 d; w = d
// sc (q - 32)): what kernel_mul_mv_q6_K_f32 runs for one token and
// kernel_mul_mv_id_q6_K_f32 (_gate_up) for each pair. A round is a
// super-block, two mma halves of 128 values (ql 64 bytes, qh 32); a half's
// 8 groups of 16 values (one scale each) are the mma's 8 columns. Lane (g,
// t) takes groups 2t and 2t + 1 of rows g and g + 8: values 32t .. 32t + 31
// of the half, whose low nibbles are ql[32 (t % 2) + l] >> 4 (t / 2) and
// high bits qh[l] >> 2t (l = 0 .. 31), as llama.cpp lays them out. Mma step
// s (8 a half) takes values l = 2s, 2s + 1 of group 2t (a0, a1: rows g, g +
// 8) and l = 16 + 2s, 17 + 2s of group 2t + 1 (a2, a3), each as f16 1024 +
// q, exact (a byte pair spread to 16-bit lanes by one byte_perm, the
// nibbles and bits masked in); B's column n is x on group n's values 2s, 2s
// + 1. Then y += d sc_n (C_n - 1056 X_n), X_n the group's sum of x rounded
// to f16. The rounds come through shared memory as gmv_gc_q8_0's (rows on 2
// bytes; gmv_copy into the vector engine's stages, gc_q6k_stages a warp).
// 128 threads, grid ceil(ceil(N / 16) W / 4), dynamic shared memory
// gc_q6k_shared(K, W) from `smem`; chosen from the sizes and the grid alone
// (gc_q6k_takes; ts: ggmlGcTakes, ggmlGcSharedBytes). GU as gmv_gc_q8_0's.
constexpr u32 GC_Q6_SP = GmvStage<GGML_Q6_K>::SP;  // 240 bytes a stage row
__device__ __forceinline__ u32 gc_q6k_stages(u32 K, u32 W) { return min(GMV_STAGES, (K / 256u + W - 1u) / W); }
// The stages, x (K f16 values and a sum a group of 16), 64 bytes of zeros and the warps' 256 bytes of sums.
__device__ __forceinline__ u32 gc_q6k_shared(u32 K, u32 W) { return GMV_WARPS * gc_q6k_stages(K, W) * 16u * GC_Q6_SP + K * 2u + K / 4u + 320u; }
// Whether one token's Q6_K product of rows of K values takes the engine: x's copy within GC_MAX_SHARED and a
// grid of at most GC_Q6_MAX_BLOCKS blocks. Past it the vector engine, whose instructions a byte are fewer, ran
// faster (a 605 MB output projection, 16384 blocks, on an H100: 360 against 404 us; ts: GC_Q6_MAX_BLOCKS).
constexpr u32 GC_Q6_MAX_BLOCKS = 2048;
__device__ __forceinline__ bool gc_q6k_takes(u32 K) {
    return K * 2u + K / 4u + 320u <= GC_MAX_SHARED && gridDim.x <= GC_Q6_MAX_BLOCKS;
}
template <u32 W, bool GU = false>
__device__ __forceinline__ void gmv_gc_q6k(unsigned char* smem, const unsigned char* w, const float* x, float* y, u32 N, u32 K, u32 blk,
                                           const unsigned char* uw = nullptr, u32 activation = 0u) {
    constexpr u32 TPB = 4u / W, SP = GC_Q6_SP;
    constexpr float M = 1056.0f;  // 1024 + 32: the f16 offset and Q6_K's own
    const u32 R = K / 256u, S = gc_q6k_stages(K, W);
    const u64 rb = u64(R) * 210u;
    const u32 tid = threadIdx.x, lane = tid & 31u, warp = tid >> 5;
    const u32 g = lane >> 2, t = lane & 3u;
    unsigned char* stages = smem + warp * S * 16u * SP;
    uint4* xs = reinterpret_cast<uint4*>(smem + GMV_WARPS * S * 16u * SP);  // K / 16 groups x 2 units (8 f16 pairs)
    float* xsum = reinterpret_cast<float*>(xs + K / 8u);                    // K / 16
    uint4* zb = reinterpret_cast<uint4*>(xsum + K / 16u);                    // a group's 2 units of zeros (4 held)
    float* red = reinterpret_cast<float*>(zb + 4);                           // 4 warps x 16
    const u32 tile = blk * TPB + warp / W, part = warp % W, row0 = tile * (GU ? 8u : 16u);
    const u32 mine = row0 < N && part < R ? (R - part + W - 1u) / W : 0u;
    const unsigned char* wb = GU ? uw : w;
    constexpr u32 HB = GU ? 0u : 8u;
    for (u32 s = 0; s + 1u < S; ++s) {
        if (s < mine) gmv_copy<GGML_Q6_K>(w, wb, HB, rb, N, K, row0, part + s * W, stages + s * 16u * SP, lane);
        cp_async_commit();
    }
    // x as f16 pairs in order (K / 4 units of 4 values), a sum a group of 16.
    gc_stage_x_f16<4u>(x, K, K / 4u, xs, xsum);
    if (tid < 4u) zb[tid] = make_uint4(0u, 0u, 0u, 0u);
    __syncthreads();
    const u32 rowa = min(row0 + g, N - 1u), rowb = min(row0 + HB + g, N - 1u);
    const u32 ta = rowa - row0, tb = GU ? 8u + rowb - row0 : rowb - row0;
    const u64 abase = reinterpret_cast<u64>(w) + u64(rowa) * rb, bbase = reinterpret_cast<u64>(wb) + u64(rowb) * rb;
    const u32 sh_lo = 4u * (t >> 1), sh_hi = 2u * t;
    // Values l, l + 1 (halfword hw of a word) as f16 1024 + q: low nibbles of ql's word, high bits of qh's.
    // The high bits shifted to 4-5 before the mask (bits of the upper halfword land at 10 and up, masked off), and
    // each mask with its OR one LOP3 (the magic in a register, as gc_round's LOP3).
    const u32 magic = opaque_u32(0x64006400u);
    auto cvt = [&](u32 lw, u32 hw2, u32 hw) {
        const u32 sel = hw ? 0x4342u : 0x4140u;
        const u32 lo = __byte_perm(lw, 0u, sel) >> sh_lo;
        const u32 hi = (__byte_perm(hw2, 0u, sel) << 4) >> sh_hi;
        return and_or<0x00300030u>(hi, and_or<0x000F000Fu>(lo, magic));
    };
    float acc_a = 0.0f, acc_b = 0.0f;
    for (u32 i = 0; i < mine; ++i) {
        const u32 next = i + S - 1u;
        if (next < mine) gmv_copy<GGML_Q6_K>(w, wb, HB, rb, N, K, row0, part + next * W, stages + (next % S) * 16u * SP, lane);
        cp_async_commit();
        gc_stage_wait(S);
        __syncwarp();
        const u32 rr = part + i * W;  // the round: super-block rr of each row
        const u64 off = u64(rr) * 210u;
        const unsigned char* st = stages + (i % S) * 16u * SP;
        const unsigned char* pa = st + ta * SP + ((abase + off) & 15u);
        const unsigned char* pb = st + tb * SP + ((bbase + off) & 15u);
        const float da = f16_at(pa + 208), db = f16_at(pb + 208);
#pragma unroll
        for (u32 n = 0; n < 2u; ++n) {
            u32 la[8], lb[8], ha[8], hb[8];
            gc_stage_words(pa + 64u * n + 32u * (t & 1u), la);
            gc_stage_words(pb + 64u * n + 32u * (t & 1u), lb);
            gc_stage_words(pa + 128u + 32u * n, ha);
            gc_stage_words(pb + 128u + 32u * n, hb);
            const u32 g0 = rr * 16u + 8u * n + 2u * t;  // this lane's first group over the row
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            gc_mma_chains<2>(c, c1, xs, zb, g, t, g0, [&](u32 s, u32 (&a)[4]) {
                // Values 2s, 2s + 1 of each group: word s / 2 (group 2t), 4 + s / 2 (2t + 1).
                const u32 hw = s & 1u, j0 = s / 2u, j1 = 4u + s / 2u;
                a[0] = cvt(la[j0], ha[j0], hw);
                a[1] = cvt(lb[j0], hb[j0], hw);
                a[2] = cvt(la[j1], ha[j1], hw);
                a[3] = cvt(lb[j1], hb[j1], hw);
            });
            // Scales of groups 2t, 2t + 1 of the half (int8 at 192 + 8n + 2t), times d.
            const u32 sca = ld16(pa + 192u + 8u * n + 2u * t), scb = ld16(pb + 192u + 8u * n + 2u * t);
            const float x0s = xsum[g0], x1s = xsum[g0 + 1u];
            acc_a += da * (float(static_cast<signed char>(sca & 0xffu)) * fmaf(-M, x0s, c[0] + c1[0]) +
                           float(static_cast<signed char>(sca >> 8)) * fmaf(-M, x1s, c[1] + c1[1]));
            acc_b += db * (float(static_cast<signed char>(scb & 0xffu)) * fmaf(-M, x0s, c[2] + c1[2]) +
                           float(static_cast<signed char>(scb >> 8)) * fmaf(-M, x1s, c[3] + c1[3]));
        }
        __syncwarp();
    }
    cp_async_wait<0>();
    gc_store<W, GU>(acc_a, acc_b, red, warp, lane, part, row0, N, y, activation);
}

// ---- the int8 engine's GGUF items (quantized_matmul_ggml's _i8 / _i8g / _vdq* entries,
// quantized_matmul_id_ggml's _i8 entries; the engine: i8_mv above) ----
//
// The vector engine (gmv, above) spends about 560 warp instructions a window of
// 16 rows x 256 values (Q4_K: 2304 bytes, ~4 bytes a warp instruction): the
// cp.async copy loop, the stage reads, 3 instructions an f16 pair (byte_perm,
// two packed fmas) and x read as float4 and rounded by every lane group (8
// times over at one token). At 0.85 of an H100's copy rate an SM must take
// ~10 bytes a clock, i.e. ~2.5 of its 4 warp instructions a clock: issue-bound.
// This engine, llama.cpp's mmvq in shape (i8_mv: x quantized
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

// ---- end of GGUF block formats ----
