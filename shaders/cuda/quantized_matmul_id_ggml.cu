// Per-expert (MoE) products with GGUF block weights (CUDA), entry names and
// bindings as shaders/quantized_matmul_id_ggml.metal; the launches are the
// op's (ts/ops/quantized_matmul_id_ggml.ts). The forms run
// quantized_matmul_ggml's engines (shaders/cuda/common.cuh, GGUF block
// formats) on one expert at a time:
//   vector (kernel_mul_mv_id_<t>_f32): block b takes pair b / tiles and the
//     16 rows (b % tiles) * 16 .. of its expert (tiles = ceil(N / 16)): the
//     vector engine (gmv) with one x row, its pair's token. A block reads
//     only its expert's rows, the windows of k copied into shared memory by
//     cp.async in 16-byte units (decoded from 16-byte loads where the
//     expert's rows allow), f16 tensor cores with f32 sums.
//   matrix (kernel_mul_mm_id_<t>_f32): block b takes tile slot b / tiles_n
//     (moe_tile over moe_dispatch_sort's grouping, up to 64 pairs of one
//     expert) and weight rows (b % tiles_n) * 128 ..: the matrix engine
//     (gmm_tile, 64 x 128 by 4 warps) with x rows gathered by the pairs'
//     tokens and the outputs scattered to the pairs' rows (moe_block_rows).
//   matrix, few pairs an expert (kernel_mul_mm_id_<t>_f32_few, not in the
//     crate; the matrix form's bindings): block b takes slot b / tiles
//     (moe_tile over up to 8 pairs of one expert) and the 64 rows (b %
//     tiles) * 64 .. of its expert, a warp's 16 over all of k: the vector
//     engine with the slot's pairs as the mma's 8 columns, x rows gathered
//     and outputs scattered as the matrix form's. Each slot reads its
//     expert's rows once.
//   gate/up (kernel_mul_mv_id_<t>_f32_gate_up, not in the crate): the vector
//     form with 8 output rows a block, the engine's 16 rows being their gate
//     and up rows; act(gate) * up written from the sums.
//   Q4_K, both vector forms: the prelude's group-column engine
//     (gmv_gc_q4k, its gate-up form for gate/up) per pair on the vector
//     form's grid, W warps a tile (4; 2 below 4 super-blocks of k but for
//     gate/up), a block 4 / W tiles (the pair's blocks between those idle),
//     x of the pair's token copied into shared memory by each working block;
//     gate/up of few tiles with 8 warps a tile (_gate_up_gc8, 256 threads).
//   Q8_0 and Q6_K, both vector forms: gmv_gc_q8_0 / gmv_gc_q6k (their
//     gate-up forms for gate/up) per pair on the vector form's grid, 4 warps
//     a tile, where x's copy fits (gc_q8_0_takes, gc_q6k_takes), whatever
//     the experts' alignment.
//   int8, the plain vector form of Q6_K and Q8_0 where the op names it
//     (kernel_mul_mv_id_<t>_f32_i8, not in the crate; ggmlIdI8Launch):
//     quantized_matmul_ggml's int8 engine (i8_mv over GdqUnit) per pair, a
//     (G, pairs) grid (mv_id_i8 below).
//   swiglu (kernel_mul_mv_id_q4_0_f32_swiglu, the crate's): the vector form
//     over x = silu(gate) * up of each pair's own row, made as x is loaded.
// An id at or past the experts gives a row of zeros and reads no weight.

namespace {

constexpr u32 GGML_MM_ID_FEW = 8;  // pairs a slot of kernel_mul_mm_id_<t>_f32_few (the op's GGML_MM_ID_CUDA_FEW)

// Whether a pair's Q4_K product takes the group-column engine: x's copy in
// shared memory within GC_MAX_SHARED (ts/ops/quantized_matmul_id_ggml.ts
// ggmlIdGcTakes gives the launch that much) and 16-byte aligned operands.
__device__ __forceinline__ bool gc_q4k_id_takes(const unsigned char* w, const unsigned char* up, const float* x, u32 K) {
    return gc_q4k_shared(K) <= GC_MAX_SHARED && aligned16(w) && aligned16(up) && aligned16(x);
}

// The vector forms: block b takes pair b / tiles and the ROWS rows (b % tiles) * ROWS .. of its
// expert (tiles = ceil(N / ROWS)); gmv_rows with one x row, its pair's token. ROWS: 16 (plain), 8
// (gate/up: 8 gate and 8 up rows as the engine's 16). `up` is the gate/up form's second weight.
// SW (the swiglu form): each pair p's own x row, silu(x[p]) * xu[p].
template <int F, bool GU, bool SW = false, bool W8 = false>
__device__ __forceinline__ void mv_id(unsigned char* smem, const unsigned char* w, const unsigned char* up, const float* x, const float* xu,
                                      float* y, const u32* ids, const GgmlMatvecIdParams* p, u32 activation) {
    constexpr u32 ROWS = GU ? 8u : 16u;
    const u32 N = u32(p->mv.ne01), K = u32(p->mv.ne00);
    const u32 tiles = (N + ROWS - 1u) / ROWS;
    const u32 pair = blockIdx.x / tiles, row0 = (blockIdx.x % tiles) * ROWS;
    if (pair >= u32(p->mv.ne1)) return;
    const u32 e = __ldg(ids + pair);
    float* yr = y + u64(pair) * p->mv.ne0;
    if (u64(e) >= p->mv.ne02) {
        if (threadIdx.x < ROWS && row0 + threadIdx.x < N) yr[row0 + threadIdx.x] = 0.0f;
        return;
    }
    const u64 off = u64(e) * p->expert_stride, xo = u64(SW ? pair : pair / p->top_k) * p->mv.ne10;
    if constexpr (F == GGML_Q4_K && !SW) {
        // Q4_K: the group-column engine (gmv_gc_q4k) where it takes the sizes and operands (gc_q4k_id_takes),
        // else the vector engine below, on the vector form's grid either way (the host need not know which):
        // W = 4 warps a tile from 4 rounds (super-blocks) of k and for gate/up (at fewer rounds, warps without
        // one: correct, and the gate/up form keeps one instance of the engine), else 2, so a block takes 4 / W
        // tiles and the pair's odd blocks at W = 2 have none.
        // W8 (the _gc8 entry: 8 warps a tile, a tile a block of 256 threads) runs only the engine, and where
        // the engine cannot take the pair writes its rows as NaN.
        if (gc_q4k_id_takes(w + off, up + off, x + xo, K) && (!W8 || blockDim.x == 256u)) {
            const u32 local = row0 / ROWS;
            if constexpr (W8) {
                gmv_gc_q4k<8u, GU>(w + off, x + xo, yr, N, K, local, up + off, activation);
            } else if (GU || K >= 4u * 256u) {
                gmv_gc_q4k<4u, GU>(w + off, x + xo, yr, N, K, local, up + off, activation);
            } else if (local % 2u == 0u) {
                gmv_gc_q4k<2u, GU>(w + off, x + xo, yr, N, K, local / 2u, up + off, activation);
            }
            return;
        }
        if constexpr (W8) {
            if (threadIdx.x < ROWS && row0 + threadIdx.x < N) yr[row0 + threadIdx.x] = __int_as_float(0x7fc00000);
            return;
        }
    }
    if constexpr (F == GGML_Q8_0 && !SW) {
        // Q8_0: the group-column engine (gmv_gc_q8_0, 4 warps a tile: the vector form's grid) where x's copy fits.
        if (gc_q8_0_takes(K)) {
            gmv_gc_q8_0<4u, GU>(smem, w + off, x + xo, yr, N, K, row0 / ROWS, up + off, activation);
            return;
        }
    }
    if constexpr (F == GGML_Q6_K && !SW) {
        // Q6_K: its group-column engine (gmv_gc_q6k, as Q8_0's) where x's copy fits.
        if (gc_q6k_takes(K)) {
            gmv_gc_q6k<4u, GU>(smem, w + off, x + xo, yr, N, K, row0 / ROWS, up + off, activation);
            return;
        }
    }
    gmv_rows<F, GU, SW>(smem, w + off, up + off, x + xo, xu + xo, yr, 1u, N, K, p->mv.ne10, p->mv.ne0, row0, activation);
}

// The matrix forms' frame: the block's slot of BM pairs (moe_block_rows, NT
// threads, COLS weight rows a tile), then tile(the expert's weight, n0, the
// slot's pairs, x_of, y_of): x_of(r, row) gives tile row r's token (false
// past the slot's pairs), y_of(r, row) its pair's output row.
template <u32 BM, u32 NT, u32 COLS, class Tile>
__device__ __forceinline__ void mm_id_frame(const GgmlMatmulIdMm_MmParams* p, const unsigned char* w, const unsigned char* wu,
                                            const u32* offsets, const u32* order, float* y, Tile&& tile) {
    __shared__ u32 x_row[BM];
    __shared__ u32 y_pair[BM];
    const u32 N = u32(p->ne0), E = u32(p->ne02), U = u32(p->ne20), P = u32(p->ne21) * U;
    u32 group, n0, rows_m;
    if (!moe_block_rows<float, BM, NT>(offsets, order, y, N, U, E, P, COLS, x_row, y_pair, group, n0, rows_m)) return;
    tile(w + u64(group) * p->nb02, wu + u64(group) * p->nb02, n0, rows_m,
         [&](u32 r, u32& row) {
             row = x_row[r];
             return y_pair[r] < P;
         },
         [&](u32 r, u32& row) {
             row = y_pair[r];
             return row < P;
         });
}

// GU (the gate/up entries): a tile's 128 weight rows are 64 outputs' gate
// (from w) and up (from wu) rows by eights, y = act(gate) * up.
template <int F, bool GU = false>
__device__ __forceinline__ void mm_id(unsigned char* smem, const GgmlMatmulIdMm_MmParams* p, const unsigned char* w, const float* x,
                                      const u32* offsets, const u32* order, float* y, const unsigned char* wu = nullptr, u32 activation = 0u) {
    const u32 K = u32(p->ne00), N = u32(p->ne0);
    mm_id_frame<64, 128, GU ? 64 : 128>(p, w, GU ? wu : w, offsets, order, y,
                                        [&](const unsigned char* we, const unsigned char* wue, u32 n0, u32, auto&& x_of, auto&& y_of) {
        gmm_tile<F, 64, 128, 2, 2, false, GU>(smem, we, x, y, N, 0u, K / 32u, p->nb01, p->nb12 / 4u, u64(N), n0, x_of, y_of, wue, activation);
    });
}

// The matrix form for experts of few pairs (kernel_mul_mm_id_<t>_f32_few):
// block b takes slot b / tiles (moe_tile, GGML_MM_ID_FEW pairs of one
// expert) and rows (b % tiles) * 64 .. of its expert (tiles = ceil(N /
// 64)): the vector engine (gmv_rows) with warp rows, a warp's 16 rows
// against the slot's pairs as the mma's columns over all of k, x rows
// gathered by their tokens, outputs scattered to their rows. A slot's
// expert rows are read once and decoded once for all its pairs.
// GU: a warp's 16 rows are 8 outputs' gate and up rows, a block 32 outputs.
template <int F, bool GU = false>
__device__ __forceinline__ void mm_id_few(unsigned char* smem, const GgmlMatmulIdMm_MmParams* p, const unsigned char* w, const float* x,
                                          const u32* offsets, const u32* order, float* y, const unsigned char* wu = nullptr,
                                          u32 activation = 0u) {
    const u32 K = u32(p->ne00), N = u32(p->ne0);
    mm_id_frame<GGML_MM_ID_FEW, 128, (GU ? 8 : 16) * GMV_WARPS>(p, w, GU ? wu : w, offsets, order, y,
                                                     [&](const unsigned char* we, const unsigned char* wue, u32 n0, u32 rows_m, auto&& x_of, auto&& y_of) {
        gmv_rows<F, GU, false, true>(
            smem, we, wue, x, x, y, rows_m, N, K, p->nb12 / 4u, u64(N), n0, activation,
            [&](u32 i) {
                u32 row;
                x_of(i, row);
                return row;
            },
            y_of);
    });
}

// The matrix form for experts of many pairs (kernel_mul_mm_id_<t>_f32_wg,
// not in the crate): block b takes slot b / tiles (moe_tile, 128 pairs of
// one expert) and rows (b % tiles) * 128 .. of its expert (tiles = ceil(N /
// 128)): gwg_tile, two warpgroups of 64 pairs on wgmma, x rows gathered by
// their tokens, outputs scattered to their rows.
// GU: a tile's 128 weight rows are 64 outputs' gate and up rows by eights.
template <int F, bool GU = false>
__device__ __forceinline__ void mm_id_wg(unsigned char* smem, const GgmlMatmulIdMm_MmParams* p, const unsigned char* w, const float* x,
                                         const u32* offsets, const u32* order, float* y, const unsigned char* wu = nullptr,
                                         u32 activation = 0u) {
    const u32 K = u32(p->ne00), N = u32(p->ne0);
    mm_id_frame<128, 256, GU ? 64 : 128>(p, w, GU ? wu : w, offsets, order, y,
                                         [&](const unsigned char* we, const unsigned char* wue, u32 n0, u32, auto&& x_of, auto&& y_of) {
        gwg_tile<F, GU>(smem, we, x, y, N, K, p->nb01, p->nb12 / 4u, u64(N), n0, x_of, y_of, wue, activation);
    });
}

// The int8 vector form (kernel_mul_mv_id_<t>_f32_i8 and _i8r4: one token a
// pair, not in the crate): block (g, pair) of a (G, pairs) grid runs
// common.cuh's int8 engine (i8_mv over GdqUnit, R rows a warp, 4 items a
// lane in flight, Q5_K 3 as its dense _vdq1: quantized_matmul_ggml's _i8
// entries' item) on expert ids[pair]'s rows against x row pair / top_k,
// units g, g + G, ... of 8 R rows; an id at or past n_experts gives the
// pair's row of zeros. smem: x as int8 and its chunks' {d, sum}, then the
// engine's 2 x 8 x R x 8 floats (ts/ops/quantized_matmul_id_ggml.ts,
// ggmlIdI8Launch). R = 4 (_i8r4) for short rows, whose items would leave
// lanes idle one row a warp (the 16 chunks of k 512 take 32 lanes as 4 rows
// of 8 lanes, 2 chunks each), else 1 (_i8).
template <int F, u32 R>
__device__ __forceinline__ void mv_id_i8(unsigned char* smem, const unsigned char* w, const float* x, float* y, const u32* ids,
                                         const GgmlMatvecIdParams* p) {
    const u32 pair = blockIdx.y;
    if (pair >= u32(p->mv.ne1)) return;
    const u32 N = u32(p->mv.ne01), K = u32(p->mv.ne00);
    const u32 e = __ldg(ids + pair);
    float* yr = y + u64(pair) * p->mv.ne0;
    if (u64(e) >= p->mv.ne02) {
        for (u32 r = blockIdx.x * blockDim.x + threadIdx.x; r < N; r += gridDim.x * blockDim.x) yr[r] = 0.0f;
        return;
    }
    const unsigned char* we = w + u64(e) * p->expert_stride;
    const u64 rb = ggml_row_bytes<F>(K);
    const GdqSrc src{we, rb, aligned16(we) && rb % 16u == 0};
    i8_mv<GdqUnit<F>, R, 1, F == GGML_Q5_K ? 3 : 4>(src, x + u64(pair / p->top_k) * p->mv.ne10, yr, 1u, N, K, 0u, 0u, smem);
}

}  // namespace

// ---- kernel_mul_mv_id_<t>_f32 ----

// buffer(0) weight (experts of N rows of blocks), (1) x [n_tokens, K] f32, (2) y [pairs, N] f32, (3) ids
// u32 [pairs], (4) GgmlMatvecIdParams. Bounds as kernel_mul_mv_<t>_f32's (the same engine).
#define GGML_MV_ID_ENTRY(NAME, F)                                                                                             \
    extern "C" __global__ void __launch_bounds__(128, F == GGML_Q8_0 ? 5 : 4) NAME(const unsigned char* src0, const float* src1, float* dst,        \
                                                           const u32* ids, const GgmlMatvecIdParams* p) {                  \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                                         \
        mv_id<F, false>(smem_raw, src0, src0, src1, src1, dst, ids, p, 0u);                                               \
    }
#if MLXN_CUDA_PART_IS(6)
GGML_MV_ID_ENTRY(kernel_mul_mv_id_q4_0_f32, GGML_Q4_0)
#endif
#if MLXN_CUDA_PART_IS(7)
GGML_MV_ID_ENTRY(kernel_mul_mv_id_q8_0_f32, GGML_Q8_0)
#endif
#if MLXN_CUDA_PART_IS(8)
GGML_MV_ID_ENTRY(kernel_mul_mv_id_q4_K_f32, GGML_Q4_K)
#endif
#if MLXN_CUDA_PART_IS(9)
GGML_MV_ID_ENTRY(kernel_mul_mv_id_q5_K_f32, GGML_Q5_K)
#endif
#if MLXN_CUDA_PART_IS(10)
GGML_MV_ID_ENTRY(kernel_mul_mv_id_q6_K_f32, GGML_Q6_K)
#endif

// kernel_mul_mv_id_<t>_f32_i8 and _i8r4 (not in mlx-native; the op's CUDA
// launch for one token a pair of Q8_0 and Q6_K where ggmlIdI8Launch gives one):
// kernel_mul_mv_id_<t>_f32's bindings, mv_id_i8 on a (G, pairs) grid of 256 threads, bounds as
// quantized_matmul_ggml's _i8 entries (the same engine).
#define GGML_MV_ID_I8_ENTRY(NAME, F, R)                                                                               \
    extern "C" __global__ void __launch_bounds__(256, 2) NAME(const unsigned char* src0, const float* src1, float* dst, \
                                                           const u32* ids, const GgmlMatvecIdParams* p) {            \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                                   \
        mv_id_i8<F, R>(smem_raw, src0, src1, dst, ids, p);                                                          \
    }
// The same with 4 rows a warp for Q4_0, Q4_K and Q5_K: harness variants (bench/qmv_variants.ts), which the op does
// not launch (ggmlIdI8Launch says why), in a part of their own so that no model compiles them.
#if MLXN_CUDA_PART_IS(11)
GGML_MV_ID_I8_ENTRY(kernel_mul_mv_id_q4_0_f32_i8r4, GGML_Q4_0, 4)
GGML_MV_ID_I8_ENTRY(kernel_mul_mv_id_q4_K_f32_i8r4, GGML_Q4_K, 4)
GGML_MV_ID_I8_ENTRY(kernel_mul_mv_id_q5_K_f32_i8r4, GGML_Q5_K, 4)
#endif
#if MLXN_CUDA_PART_IS(7)
GGML_MV_ID_I8_ENTRY(kernel_mul_mv_id_q8_0_f32_i8, GGML_Q8_0, 1)
GGML_MV_ID_I8_ENTRY(kernel_mul_mv_id_q8_0_f32_i8r4, GGML_Q8_0, 4)
#endif
#if MLXN_CUDA_PART_IS(10)
GGML_MV_ID_I8_ENTRY(kernel_mul_mv_id_q6_K_f32_i8, GGML_Q6_K, 1)
GGML_MV_ID_I8_ENTRY(kernel_mul_mv_id_q6_K_f32_i8r4, GGML_Q6_K, 4)
#endif

// ---- kernel_mul_mv_id_<t>_f32_gate_up (not in mlx-native) ----

// buffer(0) gate weight, (1) x [n_tokens, K] f32, (2) y [pairs, N] f32, (3) ids u32 [pairs], (4)
// GgmlMatvecIdGateUpParams, (5) up weight (the gate's blocks, rows and expert stride). The vector
// form's engine with 8 output rows a block: their gate rows and up rows as its 16.
#define GGML_MV_ID_GATE_UP_ENTRY(NAME, F)                                                                                     \
    extern "C" __global__ void __launch_bounds__(128, F == GGML_Q8_0 ? 5 : 4) NAME(const unsigned char* gate, const float* src1, float* dst,        \
                                                           const u32* ids, const GgmlMatvecIdGateUpParams* p,              \
                                                           const unsigned char* up) {                                      \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                                         \
        mv_id<F, true>(smem_raw, gate, up, src1, src1, dst, ids, &p->id, p->activation);                                  \
    }
#if MLXN_CUDA_PART_IS(6)
GGML_MV_ID_GATE_UP_ENTRY(kernel_mul_mv_id_q4_0_f32_gate_up, GGML_Q4_0)
#endif
#if MLXN_CUDA_PART_IS(7)
GGML_MV_ID_GATE_UP_ENTRY(kernel_mul_mv_id_q8_0_f32_gate_up, GGML_Q8_0)
#endif
#if MLXN_CUDA_PART_IS(8)
GGML_MV_ID_GATE_UP_ENTRY(kernel_mul_mv_id_q4_K_f32_gate_up, GGML_Q4_K)
// kernel_mul_mv_id_q4_K_f32_gate_up_gc8 (not in mlx-native; the gate/up form's bindings): Q4_K's
// group-column engine with 8 warps a tile of 8 outputs (their gate and up rows), a tile a block of 256
// threads on the same grid, which the op launches where the pairs' tiles number at most 2 an SM
// (ts: ggmlIdGc8Takes); rows of NaN where the engine cannot take a pair (quantized_matmul_ggml's _gc8).
extern "C" __global__ void __launch_bounds__(256, 2) kernel_mul_mv_id_q4_K_f32_gate_up_gc8(
    const unsigned char* gate, const float* src1, float* dst, const u32* ids, const GgmlMatvecIdGateUpParams* p, const unsigned char* up) {
    mv_id<GGML_Q4_K, true, false, true>(nullptr, gate, up, src1, src1, dst, ids, &p->id, p->activation);
}
#endif
#if MLXN_CUDA_PART_IS(9)
GGML_MV_ID_GATE_UP_ENTRY(kernel_mul_mv_id_q5_K_f32_gate_up, GGML_Q5_K)
#endif
#if MLXN_CUDA_PART_IS(10)
GGML_MV_ID_GATE_UP_ENTRY(kernel_mul_mv_id_q6_K_f32_gate_up, GGML_Q6_K)
#endif

#if MLXN_CUDA_PART_IS(0)
// ---- mlx-native's kernel_mul_mv_id_q4_0_f32_swiglu ----

// buffer(0) weight (Q4_0 experts of N rows), (1) gate f32 [pairs, K], (2) up f32 [pairs, K], (3) y
// [pairs, N] f32, (4) ids u32 [pairs], (5) GgmlMatvecIdParams. The vector form's engine, 16 rows a
// block, x = silu(gate) * up of the pair's own row made as the engine loads it.
extern "C" __global__ void __launch_bounds__(128, 4) kernel_mul_mv_id_q4_0_f32_swiglu(const unsigned char* src0, const float* gate,
                                                                                   const float* up, float* dst, const u32* ids,
                                                                                   const GgmlMatvecIdParams* p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    mv_id<GGML_Q4_0, false, true>(smem_raw, src0, src0, gate, up, dst, ids, p, 0u);
}
#endif

// ---- kernel_mul_mm_id_<t>_f32, and kernel_mul_mm_id_<t>_f32_few (not in mlx-native) ----

// buffer(0) GgmlMatmulIdMm_MmParams, (1) weight (experts nb02 bytes apart, rows nb01), (2) x [ne21, K]
// f32 (rows nb12 bytes apart), (3) offsets u32 [ne02 + 2] and (4) order u32 [pairs] (moe_dispatch_sort's),
// (5) y [pairs, N] f32. FORM: mm_id (the tiles) or mm_id_few, which the op plans where the pairs average few an
// expert (ts/ops/quantized_matmul_id_ggml.ts ggmlIdMmFew) on ggmlIdMmFewCudaLaunch, with the vector form's bounds
// (the same engine). BOUNDS: __launch_bounds__'s arguments, in parentheses.
#define GGML_MM_ID_ENTRY(NAME, F, FORM, BOUNDS)                                                                             \
    extern "C" __global__ void __launch_bounds__ BOUNDS NAME(const GgmlMatmulIdMm_MmParams* args, const unsigned char* src0, \
                                                             const float* src1, const u32* offsets, const u32* order,      \
                                                             float* dst) {                                                 \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                                         \
        FORM<F>(smem_raw, args, src0, src1, offsets, order, dst);                                                         \
    }

// kernel_mul_mm_id_<t>_f32_gate_up and its _few and _wg forms (not in mlx-native): buffer(0)
// GgmlMatmulIdMmGateUpParams, (1) gate weight, (2) x, (3) offsets, (4) order, (5) y [pairs, N] f32 (N the
// outputs), (6) up weight (the gate's blocks, rows and expert stride). The matrix forms' GU instances, as
// the op plans them (ggmlIdMmWg, ggmlIdMmFew with the gate/up form's grids).
#define GGML_MM_ID_GATE_UP_ENTRY(NAME, F, FORM, BOUNDS)                                                                       \
    extern "C" __global__ void __launch_bounds__ BOUNDS NAME(const GgmlMatmulIdMmGateUpParams* args, const unsigned char* gate, \
                                                             const float* src1, const u32* offsets, const u32* order,        \
                                                             float* dst, const unsigned char* up) {                          \
        extern __shared__ __align__(16) unsigned char smem_raw[];                                                           \
        FORM<F, true>(smem_raw, &args->mm, gate, src1, offsets, order, dst, up, args->activation);                          \
    }

// In the CUDA program's parts (quantized_matmul_id_ggml.ts's
// QUANTIZED_MATMUL_ID_GGML_CUDA_PARTS): the matrix forms of one block
// format a part (1-5), as its vector forms above (6-10); the SwiGLU
// vector entry is part 0.
#if MLXN_CUDA_PART_IS(1)
GGML_MM_ID_ENTRY(kernel_mul_mm_id_q4_0_f32, GGML_Q4_0, mm_id, (128))
GGML_MM_ID_ENTRY(kernel_mul_mm_id_q4_0_f32_few, GGML_Q4_0, mm_id_few, (128, 4))
GGML_MM_ID_ENTRY(kernel_mul_mm_id_q4_0_f32_wg, GGML_Q4_0, mm_id_wg, (256, 2))
GGML_MM_ID_GATE_UP_ENTRY(kernel_mul_mm_id_q4_0_f32_gate_up, GGML_Q4_0, mm_id, (128))
GGML_MM_ID_GATE_UP_ENTRY(kernel_mul_mm_id_q4_0_f32_gate_up_few, GGML_Q4_0, mm_id_few, (128, 4))
GGML_MM_ID_GATE_UP_ENTRY(kernel_mul_mm_id_q4_0_f32_gate_up_wg, GGML_Q4_0, mm_id_wg, (256, 2))
#endif
#if MLXN_CUDA_PART_IS(2)
GGML_MM_ID_ENTRY(kernel_mul_mm_id_q8_0_f32, GGML_Q8_0, mm_id, (128))
GGML_MM_ID_ENTRY(kernel_mul_mm_id_q8_0_f32_few, GGML_Q8_0, mm_id_few, (128, 5))
GGML_MM_ID_ENTRY(kernel_mul_mm_id_q8_0_f32_wg, GGML_Q8_0, mm_id_wg, (256, 2))
GGML_MM_ID_GATE_UP_ENTRY(kernel_mul_mm_id_q8_0_f32_gate_up, GGML_Q8_0, mm_id, (128))
GGML_MM_ID_GATE_UP_ENTRY(kernel_mul_mm_id_q8_0_f32_gate_up_few, GGML_Q8_0, mm_id_few, (128, 5))
GGML_MM_ID_GATE_UP_ENTRY(kernel_mul_mm_id_q8_0_f32_gate_up_wg, GGML_Q8_0, mm_id_wg, (256, 2))
#endif
#if MLXN_CUDA_PART_IS(3)
GGML_MM_ID_ENTRY(kernel_mul_mm_id_q4_K_f32, GGML_Q4_K, mm_id, (128))
GGML_MM_ID_ENTRY(kernel_mul_mm_id_q4_K_f32_few, GGML_Q4_K, mm_id_few, (128, 4))
GGML_MM_ID_ENTRY(kernel_mul_mm_id_q4_K_f32_wg, GGML_Q4_K, mm_id_wg, (256, 2))
GGML_MM_ID_GATE_UP_ENTRY(kernel_mul_mm_id_q4_K_f32_gate_up, GGML_Q4_K, mm_id, (128))
GGML_MM_ID_GATE_UP_ENTRY(kernel_mul_mm_id_q4_K_f32_gate_up_few, GGML_Q4_K, mm_id_few, (128, 4))
GGML_MM_ID_GATE_UP_ENTRY(kernel_mul_mm_id_q4_K_f32_gate_up_wg, GGML_Q4_K, mm_id_wg, (256, 2))
#endif
#if MLXN_CUDA_PART_IS(4)
GGML_MM_ID_ENTRY(kernel_mul_mm_id_q5_K_f32, GGML_Q5_K, mm_id, (128))
GGML_MM_ID_ENTRY(kernel_mul_mm_id_q5_K_f32_few, GGML_Q5_K, mm_id_few, (128, 4))
GGML_MM_ID_ENTRY(kernel_mul_mm_id_q5_K_f32_wg, GGML_Q5_K, mm_id_wg, (256, 1))
GGML_MM_ID_GATE_UP_ENTRY(kernel_mul_mm_id_q5_K_f32_gate_up, GGML_Q5_K, mm_id, (128))
GGML_MM_ID_GATE_UP_ENTRY(kernel_mul_mm_id_q5_K_f32_gate_up_few, GGML_Q5_K, mm_id_few, (128, 4))
GGML_MM_ID_GATE_UP_ENTRY(kernel_mul_mm_id_q5_K_f32_gate_up_wg, GGML_Q5_K, mm_id_wg, (256, 1))
#endif
#if MLXN_CUDA_PART_IS(5)
GGML_MM_ID_ENTRY(kernel_mul_mm_id_q6_K_f32, GGML_Q6_K, mm_id, (128))
GGML_MM_ID_ENTRY(kernel_mul_mm_id_q6_K_f32_few, GGML_Q6_K, mm_id_few, (128, 4))
GGML_MM_ID_ENTRY(kernel_mul_mm_id_q6_K_f32_wg, GGML_Q6_K, mm_id_wg, (256, 2))
GGML_MM_ID_GATE_UP_ENTRY(kernel_mul_mm_id_q6_K_f32_gate_up, GGML_Q6_K, mm_id, (128))
GGML_MM_ID_GATE_UP_ENTRY(kernel_mul_mm_id_q6_K_f32_gate_up_few, GGML_Q6_K, mm_id_few, (128, 4))
GGML_MM_ID_GATE_UP_ENTRY(kernel_mul_mm_id_q6_K_f32_gate_up_wg, GGML_Q6_K, mm_id_wg, (256, 2))
#endif
