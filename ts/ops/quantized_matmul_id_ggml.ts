// quantized_matmul_id_ggml: per-expert (MoE) products with weights in GGUF's
// block formats (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K; the layouts are written down in
// ts/ops/quantized_matmul_ggml.ts), routed by per-token expert ids. Kernel
// names, bindings, param structs and validation rules of mlx-native's
// quantized_matmul_id_ggml module (src/ops/quantized_matmul_id_ggml.rs): the
// vector form kernel_mul_mv_id_<t>_f32 (GgmlMatvecIdParams) and the matrix
// form kernel_mul_mm_id_<t>_f32 (GgmlMatmulIdMm_MmParams); added in its
// style, the fused gate/up vector form kernel_mul_mv_id_<t>_f32_gate_up
// (GgmlMatvecIdGateUpParams: every type, silu or gelu_tanh; the crate has
// none such) and its matrix form kernel_mul_mm_id_<t>_f32_gate_up
// (GgmlMatmulIdMmGateUpParams); and the crate's SwiGLU down projection
// kernel_mul_mv_id_q4_0_f32_swiglu (quantized_matmul_id_swiglu_q4_0: Q4_0
// experts against silu(gate) * up of each pair's own rows). Kernels:
// shaders/quantized_matmul_id_ggml.metal and shaders/cuda/quantized_matmul_id_ggml.cu,
// reading the blocks through the decoders quantized_matmul_ggml reads
// (the preludes, shaders/common.metal and shaders/cuda/common.cuh).
//
// Pairs: x has nTokens rows, ids [nTokens, topK]; pair p is row p / topK,
// slot p % topK, and has one output row: y [nTokens * topK, n]. A down
// projection takes one x row per pair (nTokens = pairs, topK = 1, the same
// ids). Experts: nExperts of n rows of k / QK blocks, expert e's first byte
// e * expertStride bytes in (default: the bytes of one expert, a stacked [E,
// n, k] GGUF tensor; a fused [E, 2 I, H] gate_up tensor is two views of one
// buffer, the up view I rows in, both with expertStride the bytes of 2 I rows).
//
// Where this differs from the crate:
// - The matrix form reads the pairs grouped by expert on the device by
//   moe_dispatch_sort (offsets [nExperts + 2], order [pairs]) at the
//   bindings 3 and 4 where the crate's reads its map0 kernel's per-expert
//   counts and token lists, so any topK works (the crate's map0 exists for
//   topK 1 and 8), and Q5_K has a matrix form too. On CUDA, where the
//   pairs average few an expert (ggmlIdMmFew: a short prompt), it runs as
//   kernel_mul_mm_id_<t>_f32_few (not in the crate; the same bindings): up
//   to 8 of an expert's pairs a block on the vector engine; but on compute
//   capability 9.0 where they average 8 or more (ggmlIdMmWg: from a
//   256-token prompt of 256 experts), as kernel_mul_mm_id_<t>_f32_wg: 128 of
//   an expert's pairs a block on Hopper's warpgroup MMA. The crate's
//   routing of its public function (the matrix form past 32 tokens) is the
//   caller's choice here: the two forms are two ops, as quantized_matmul_id's.
// - An id at or past nExperts cannot be refused without reading the ids on
//   the host: its output row is zeros and no weight is read for it (the
//   crate's kernel reads past the experts). The vector params carry the
//   count in ne02 (llama.cpp's meaning of the field; the crate passes 1).
// - The weight must hold (nExperts - 1) * expertStride + the bytes of an
//   expert (the crate checks nExperts times the bytes of an expert, short of
//   the last expert's end when expertStride is larger).

import src from '../../shaders/quantized_matmul_id_ggml.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/quantized_matmul_id_ggml.cu' with { type: 'text' };
import header from '../../shaders/quantized_matmul_id_ggml.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familyPlans, record, type CudaLaunch, type Launch, type OpPlan } from '../plan.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBufferRules, checkedProduct, checkMultiple, checkNoAliasing, checkPositive, I32_MAX, invalid, ruleBindings, U32_MAX,
  type BufferRule,
} from '../validate.ts';
import { checkPairs, GATE_ACTIVATIONS, moeTileSlots, type GateActivation } from '../expert-products.ts';
import {
  checkGgmlType, GGML_KERNEL_TYPE, GGML_QUANT_TYPES, GGML_MM_SHARED_BYTES, ggmlBlockOf, ggmlMmCudaTile, ggmlMvCudaShared, ggmlMvCudaSharedBytes,
  ggmlMvMetalLaunch, ggmlRowBytesOf, GGML_MV_CUDA_ROWS, GGML_MV_CUDA_WARPS, type GgmlQuantType, ggmlDequantizeRef,
  GGML_I8_BLOCKS_PER_SM, ggmlI8SharedBytesOf, gc8Fits, ggmlGcSharedBytes,
} from './quantized_matmul_ggml.ts';
import { GC_MAX_SHARED } from './quantized_matmul.ts';
import { ceilDiv, CUDA_GRID_MAX, CUDA_GRID_YZ_MAX } from '../launch.ts';
import { denseGateUpIdRef, denseMatmulIdRef, type IdRef } from './dense_matmul_id.ts';
import { siluRef } from './silu_mul.ts';

export const QUANTIZED_MATMUL_ID_GGML_FAMILY = 'quantized_matmul_id_ggml';
/** The block formats of the CUDA int8 vector form (ggmlIdI8Launch). */
const GGML_ID_I8_TYPES: readonly GgmlQuantType[] = ['Q8_0', 'Q6_K'];
/**
 * Chunks of 32 values a row up to which ggmlIdI8Launch takes 4 rows a warp
 * (kernel_mul_mv_id_<t>_f32_i8r4; above it 1, _i8). With one row a warp a
 * chunk a lane, a row of k 512 keeps 16 of 32 lanes busy with one chunk in
 * flight; with 4 rows, 8 lanes a row take 2 chunks each. On an H200
 * (2026-11-29, 8 pairs, bench/results/gguf-r4-h200-2026-11-29.md) 4 rows ran
 * Gemma 4's Q8_0 expert down [2816, 704] in 7.1 us against 12.9 with one,
 * Qwen3.6's Q6_K [2048, 512] in 5.8 against 8.6 and its Q8_0 in 4.9 against
 * 9.0, where the group-column engine (kernel_mul_mv_id_q8_0_f32) took 8.4.
 * The other formats' `_i8r4` entries are harness variants: at Qwen3.6's
 * shape Q4_K ran 4.8 us against its plain entry's 5.7, Q5_K 5.0 against 9.1
 * and Q4_0 5.2 against 8.6, but x rounded to int8 moved the cuda model and
 * composition tests of those formats (tests/models-gguf.test.ts) past the
 * f16-operand tolerances they are written to, so the plan keeps their own
 * entries (bench/notes/gguf-q6-diet-2026-11-29.md).
 */
const GGML_ID_I8_R4_MAX_CHUNKS = 32;
/** Rows a warp of the int8 per-expert form at k (GGML_ID_I8_R4_MAX_CHUNKS). */
export const ggmlIdI8Rows = (k: number): number => (k / 32 <= GGML_ID_I8_R4_MAX_CHUNKS ? 4 : 1);
/**
 * The CUDA program's parts (FamilySources.cudaParts): 1 to 5 the matrix
 * forms of one block format (tiles, few, wgmma; plain and gate/up), 6 to 10 its vector forms
 * (plain and gate/up), 0.7-1.1 s of NVRTC 13.0 on one thread each (the whole
 * family took 7.8 s), 11 the harness variants that the op does not launch;
 * the SwiGLU vector entry is part 0. A model compiles the formats its file
 * uses, the vector forms alone for decode.
 */
export const QUANTIZED_MATMUL_ID_GGML_CUDA_PARTS: readonly (readonly string[])[] = [
  ...GGML_QUANT_TYPES.map((q) => GGML_KERNEL_TYPE[q]).map((t) =>
    ['', '_gate_up'].flatMap((g) => [`kernel_mul_mm_id_${t}_f32${g}`, `kernel_mul_mm_id_${t}_f32${g}_few`, `kernel_mul_mm_id_${t}_f32${g}_wg`])),
  ...GGML_QUANT_TYPES.map((q) => [
    `kernel_mul_mv_id_${GGML_KERNEL_TYPE[q]}_f32`, `kernel_mul_mv_id_${GGML_KERNEL_TYPE[q]}_f32_gate_up`,
    // The int8 form with 1 and 4 rows a warp (ggmlIdI8Launch).
    ...(GGML_ID_I8_TYPES.includes(q) ? ['i8', 'i8r4'].map((v) => `kernel_mul_mv_id_${GGML_KERNEL_TYPE[q]}_f32_${v}`) : []),
    // Q4_K's gate/up form with 8 warps a tile (ggmlIdGc8Takes).
    ...(q === 'Q4_K' ? ['kernel_mul_mv_id_q4_K_f32_gate_up_gc8'] : []),
  ]),
  // The other formats' int8 form with 4 rows a warp (harness variants, bench/qmv_variants.ts).
  GGML_QUANT_TYPES.filter((q) => !GGML_ID_I8_TYPES.includes(q)).map((q) => `kernel_mul_mv_id_${GGML_KERNEL_TYPE[q]}_f32_i8r4`),
];
/** The family's kernel sources by backend, as registered by every dispatch. */
export const QUANTIZED_MATMUL_ID_GGML_SOURCES = familySources(QUANTIZED_MATMUL_ID_GGML_FAMILY, {
  header, metal: src, cuda: cudaSrc, cudaParts: QUANTIZED_MATMUL_ID_GGML_CUDA_PARTS,
});
export const QUANTIZED_MATMUL_ID_GGML_KERNELS = [
  'kernel_mul_mv_id_q4_0_f32', 'kernel_mul_mv_id_q8_0_f32', 'kernel_mul_mv_id_q4_K_f32', 'kernel_mul_mv_id_q5_K_f32', 'kernel_mul_mv_id_q6_K_f32',
  'kernel_mul_mm_id_q4_0_f32', 'kernel_mul_mm_id_q8_0_f32', 'kernel_mul_mm_id_q4_K_f32', 'kernel_mul_mm_id_q5_K_f32', 'kernel_mul_mm_id_q6_K_f32',
  'kernel_mul_mv_id_q4_0_f32_gate_up', 'kernel_mul_mv_id_q8_0_f32_gate_up', 'kernel_mul_mv_id_q4_K_f32_gate_up', 'kernel_mul_mv_id_q5_K_f32_gate_up',
  'kernel_mul_mv_id_q6_K_f32_gate_up', 'kernel_mul_mv_id_q4_0_f32_swiglu',
  'kernel_mul_mm_id_q4_0_f32_few', 'kernel_mul_mm_id_q8_0_f32_few', 'kernel_mul_mm_id_q4_K_f32_few', 'kernel_mul_mm_id_q5_K_f32_few',
  'kernel_mul_mm_id_q6_K_f32_few',
  'kernel_mul_mm_id_q4_0_f32_wg', 'kernel_mul_mm_id_q8_0_f32_wg', 'kernel_mul_mm_id_q4_K_f32_wg', 'kernel_mul_mm_id_q5_K_f32_wg',
  'kernel_mul_mm_id_q6_K_f32_wg',
  'kernel_mul_mm_id_q4_0_f32_gate_up', 'kernel_mul_mm_id_q8_0_f32_gate_up', 'kernel_mul_mm_id_q4_K_f32_gate_up', 'kernel_mul_mm_id_q5_K_f32_gate_up',
  'kernel_mul_mm_id_q6_K_f32_gate_up',
  'kernel_mul_mm_id_q4_0_f32_gate_up_few', 'kernel_mul_mm_id_q8_0_f32_gate_up_few', 'kernel_mul_mm_id_q4_K_f32_gate_up_few',
  'kernel_mul_mm_id_q5_K_f32_gate_up_few', 'kernel_mul_mm_id_q6_K_f32_gate_up_few',
  'kernel_mul_mm_id_q4_0_f32_gate_up_wg', 'kernel_mul_mm_id_q8_0_f32_gate_up_wg', 'kernel_mul_mm_id_q4_K_f32_gate_up_wg',
  'kernel_mul_mm_id_q5_K_f32_gate_up_wg', 'kernel_mul_mm_id_q6_K_f32_gate_up_wg',
] as const;
const planOf = familyPlans({
  family: QUANTIZED_MATMUL_ID_GGML_FAMILY, sources: QUANTIZED_MATMUL_ID_GGML_SOURCES, kernels: QUANTIZED_MATMUL_ID_GGML_KERNELS,
});

/** struct GgmlMatvecIdParams (buffer 4 of kernel_mul_mv_id_<t>_f32). */
export const GGML_MATVEC_ID_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GgmlMatvecIdParams');
/** struct GgmlMatvecIdGateUpParams (buffer 4 of kernel_mul_mv_id_<t>_f32_gate_up). */
export const GGML_MATVEC_ID_GATE_UP_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GgmlMatvecIdGateUpParams');
/** struct GgmlMatmulIdMm_MmParams (buffer 0 of kernel_mul_mm_id_<t>_f32). */
export const GGML_MATMUL_ID_MM_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GgmlMatmulIdMm_MmParams');
/** struct GgmlMatmulIdMmGateUpParams (buffer 0 of kernel_mul_mm_id_<t>_f32_gate_up). */
export const GGML_MATMUL_ID_MM_GATE_UP_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GgmlMatmulIdMmGateUpParams');

/** The sizes of a product (the crate's GgmlQuantizedMatmulIdParams). */
export interface GgmlIdSizes {
  /** Rows of x. */
  nTokens: number;
  /** Slots of a row (1 for a down projection over pairs). */
  topK: number;
  /** Output rows of an expert's weight. */
  n: number;
  /** Columns of x and of the weight: a multiple of the block (32 for Q4_0 and Q8_0, 256 for the K formats). */
  k: number;
  nExperts: number;
  /** Bytes from one expert's weight to the next's (a multiple of 4 for Q4_K and Q5_K, 2 for the others); the bytes of one expert (n rows) when absent. */
  expertStride?: number;
  ggmlType: GgmlQuantType;
}

const strideOf = (s: GgmlIdSizes): number => s.expertStride ?? s.n * ggmlRowBytesOf(s.ggmlType, s.k);

function matvecIdFields(s: GgmlIdSizes): Record<string, number> {
  return {
    ne00: s.k, ne01: s.n, ne02: s.nExperts, ne10: s.k, ne12: 1, ne0: s.n, ne1: s.nTokens * s.topK, r2: 1, r3: 1, top_k: s.topK,
    n_tokens: s.nTokens, expert_stride: strideOf(s),
  };
}

/** mlx-native's GgmlMatvecIdGpuParams, ne02 the number of experts. */
export function packGgmlMatvecIdParams(s: GgmlIdSizes): Uint8Array {
  return packFields(GGML_MATVEC_ID_PARAMS_LAYOUT, matvecIdFields(s));
}

/** GgmlMatvecIdGateUpParams: the vector form's params of both weights, then the activation (0 silu, 1 gelu_tanh). */
export function packGgmlMatvecIdGateUpParams(s: GgmlIdSizes & { activation?: GateActivation }): Uint8Array {
  return packFields(GGML_MATVEC_ID_GATE_UP_PARAMS_LAYOUT, { ...matvecIdFields(s), activation: s.activation === 'gelu_tanh' ? 1 : 0 });
}

function matmulIdMmFields(s: GgmlIdSizes): Record<string, number> {
  return {
    ne00: s.k, ne02: s.nExperts, nb01: ggmlRowBytesOf(s.ggmlType, s.k), nb02: strideOf(s), nb03: 0, ne11: s.topK, _pad0: 0, nb10: 4, nb11: 0,
    nb12: 4 * s.k, nb13: 0, ne20: s.topK, ne21: s.nTokens, ne0: s.n, ne1: s.topK, r2: 1, r3: 1, _pad1: 0,
  };
}

/** mlx-native's GgmlIdMmMmGpuParams: x rows a token apart (nb11 = 0, nb12 = 4 k). */
export function packGgmlMatmulIdMmParams(s: GgmlIdSizes): Uint8Array {
  return packFields(GGML_MATMUL_ID_MM_PARAMS_LAYOUT, matmulIdMmFields(s));
}

/** GgmlMatmulIdMmGateUpParams: the matrix form's params of both weights, then the activation (0 silu, 1 gelu_tanh). */
export function packGgmlMatmulIdMmGateUpParams(s: GgmlIdSizes & { activation?: GateActivation }): Uint8Array {
  return packFields(GGML_MATMUL_ID_MM_GATE_UP_PARAMS_LAYOUT, { ...matmulIdMmFields(s), activation: s.activation === 'gelu_tanh' ? 1 : 0, _pad2: 0 });
}

// ---- CUDA launches (shaders/cuda/quantized_matmul_id_ggml.cu; one-dimensional grids) ----

/**
 * The CUDA vector forms: quantized_matmul_ggml's vector engine, a 128-thread
 * block per (pair, 16 rows of its expert); the gate/up form's blocks take 8
 * output rows, their gate and up rows the engine's 16. Q4_K, Q8_0 and Q6_K
 * where ggmlGcTakes says so at one token (the kernels decide alike:
 * gc_q4k_id_takes, which also asks for 16-byte aligned operands and else
 * runs the vector engine, gc_q8_0_takes, gc_q6k_takes): a group-column
 * engine on the same grid, 4 warps over a block's tile, with the shared
 * memory of ggmlMvCudaShared.
 */
export function ggmlIdMvCudaLaunch(type: GgmlQuantType, pairs: number, n: number, k: number, gateUp = false,
  limits: Pick<DeviceLimits, 'multiprocessors'> = { multiprocessors: 0 }, expertStride = 0): CudaLaunch {
  const rows = gateUp ? GGML_MV_CUDA_ROWS / 2 : GGML_MV_CUDA_ROWS;
  const blocks = pairs * ceilDiv(n, rows);
  if (gateUp && ggmlIdGc8Takes(type, pairs, n, k, limits, expertStride)) {
    return { grid: [blocks, 1, 1], threads: [256, 1, 1], threadgroupMemory: { 0: ggmlGcSharedBytes(type, k) }, entry: 'kernel_mul_mv_id_q4_K_f32_gate_up_gc8' };
  }
  return { grid: [blocks, 1, 1], threads: [128, 1, 1], threadgroupMemory: { 0: ggmlMvCudaShared(type, 1, k, blocks) } };
}

/**
 * Whether Q4_K's gate/up vector form runs kernel_mul_mv_id_q4_K_f32_gate_up_gc8
 * (8 warps a tile of 8 outputs, a tile a block of 256 threads): as
 * quantized_matmul_ggml's ggmlGc8Takes, over the pairs' tiles together
 * (Gemma 4's MLP through gatedLinear: one pair, 264 tiles), and with every
 * expert's rows on 16 bytes (expertStride, the op's stride between experts'
 * weights in bytes, a multiple of 16; the weights are views, which start on
 * 16 bytes), as the engine needs (gc_q4k_id_takes).
 */
export function ggmlIdGc8Takes(type: GgmlQuantType, pairs: number, n: number, k: number, limits: Pick<DeviceLimits, 'multiprocessors'>,
  expertStride: number): type is 'Q4_K' {
  return expertStride % 16 === 0 && gc8Fits(type, pairs * ceilDiv(n, GGML_MV_CUDA_ROWS / 2), k, limits);
}

/**
 * The CUDA int8 vector form of the plain product (kernel_mul_mv_id_<t>_f32_i8
 * and _i8r4, not in the crate), or null where it does not take it (then
 * ggmlIdMvCudaLaunch's): Q6_K and Q8_0 with x's int8 copy within
 * GC_MAX_SHARED and the pairs within the grid's y. quantized_matmul_ggml's int8
 * engine (x rounded to int8 a chunk of 32 values) per pair, ggmlIdI8Rows(k)
 * weight rows a warp: grid (G, pairs) of 256 threads, G blocks a pair so
 * that the pairs together take GGML_I8_BLOCKS_PER_SM an SM (one a pair at
 * least, its units of 8 x rows rows at most; every unit where the SMs are
 * unknown). Numerics: the int8 path of quantized_matmul_ggml's vector form.
 */
export function ggmlIdI8Launch(type: GgmlQuantType, pairs: number, n: number, k: number,
  limits: Pick<DeviceLimits, 'multiprocessors'> = { multiprocessors: 0 }): CudaLaunch | null {
  const rows = ggmlIdI8Rows(k), shared = ggmlI8SharedBytesOf(k, rows);
  if (!GGML_ID_I8_TYPES.includes(type) || pairs > CUDA_GRID_YZ_MAX || shared > GC_MAX_SHARED) return null;
  return {
    grid: [ggmlIdI8Blocks(pairs, n, rows, limits), pairs, 1], threads: [256, 1, 1], threadgroupMemory: { 0: shared },
    entry: `kernel_mul_mv_id_${GGML_KERNEL_TYPE[type]}_f32_${rows === 4 ? 'i8r4' : 'i8'}`,
  };
}

/**
 * Blocks a pair of the int8 per-expert form with `rows` rows a warp (units
 * of 8 rows x rows): the pair's units at most, so that the pairs together
 * take GGML_I8_BLOCKS_PER_SM an SM, one at least; every unit where the SMs
 * are unknown.
 */
export function ggmlIdI8Blocks(pairs: number, n: number, rows: number, limits: Pick<DeviceLimits, 'multiprocessors'>): number {
  const units = ceilDiv(n, 8 * rows);
  if (limits.multiprocessors <= 0) return units;
  return Math.min(units, Math.max(1, Math.floor((GGML_I8_BLOCKS_PER_SM * limits.multiprocessors) / pairs)));
}

/** Pair rows of a tile of the CUDA matrix form (quantized_matmul_ggml's 64 x 128 tile of 4 warps). */
export const GGML_MM_ID_CUDA_BM = 64;
const GGML_MM_ID_CUDA_BN = 128;
/** Pairs of a slot of the CUDA few-pairs form (kernel_mul_mm_id_<t>_f32_few: the vector engine's 8 mma columns). */
export const GGML_MM_ID_CUDA_FEW = 8;
/**
 * Pairs an expert on average (pairs / nExperts) up to which the CUDA matrix
 * form takes the few-pairs form, by k: where the 64-row tile is mostly
 * padding (on compute capability 9.0 the many-pairs form comes first, from
 * 8: ggmlIdMmWg). Measured on an H100 (bench/results/moe-few-h100-2026-11-27.md,
 * Qwen3.6-35B-A3B's experts): at 8 pairs an expert the few-pairs form took
 * 0.42x the tiles' time at k 2048 and 0.87x at k 512; at 16, 0.71x at k 2048
 * and 1.43x at k 512; at 32, 1.25x at k 2048.
 */
export function ggmlIdMmFewAverage(k: number): number {
  return k >= 2048 ? 16 : 8;
}

/**
 * The CUDA matrix form: a 128-thread block per (tile slot of 64 pairs, 128
 * weight rows); the gate/up form's 128 rows are 64 outputs' gate and up rows.
 */
export function ggmlIdMmCudaLaunch(pairs: number, n: number, nExperts: number, gateUp = false): Launch {
  const t = ggmlMmCudaTile(1, 1);
  return {
    grid: [moeTileSlots(pairs, nExperts, GGML_MM_ID_CUDA_BM) * ceilDiv(n, GGML_MM_ID_CUDA_BN / (gateUp ? 2 : 1)), 1, 1], threads: [t.threads, 1, 1],
    threadgroupMemory: { 0: t.sharedBytes },
  };
}

/**
 * The CUDA few-pairs form (kernel_mul_mm_id_<t>_f32_few): a 128-thread block
 * per (slot of up to 8 pairs of one expert, 64 of its rows: a warp's 16
 * over all of k; the gate/up form's 16 are 8 outputs' gate and up rows),
 * the vector engine's shared memory.
 */
export function ggmlIdMmFewCudaLaunch(type: GgmlQuantType, pairs: number, n: number, nExperts: number, gateUp = false): Launch {
  const rows = GGML_MV_CUDA_WARPS * GGML_MV_CUDA_ROWS / (gateUp ? 2 : 1);
  return {
    grid: [moeTileSlots(pairs, nExperts, GGML_MM_ID_CUDA_FEW) * ceilDiv(n, rows), 1, 1], threads: [128, 1, 1],
    threadgroupMemory: { 0: ggmlMvCudaSharedBytes(type) },
  };
}

/**
 * Whether the matrix form runs as kernel_mul_mm_id_<t>_f32_few: on CUDA
 * (computeCapability > 0; elsewhere the form is one kernel) where the pairs
 * average at most ggmlIdMmFewAverage(k) an expert and its grid fits.
 */
export function ggmlIdMmFew(type: GgmlQuantType, pairs: number, n: number, k: number, nExperts: number,
  limits: Pick<DeviceLimits, 'computeCapability'>, gateUp = false): boolean {
  return limits.computeCapability > 0 && pairs <= ggmlIdMmFewAverage(k) * nExperts &&
    ggmlIdMmFewCudaLaunch(type, pairs, n, nExperts, gateUp).grid[0] <= CUDA_GRID_MAX;
}

/** Pair rows of a tile of the CUDA many-pairs form (kernel_mul_mm_id_<t>_f32_wg: two warpgroups of 64 on wgmma). */
export const GGML_MM_ID_CUDA_WG_BM = 128;
/**
 * Dynamic shared memory of the many-pairs form (shaders/cuda/common.cuh
 * GWG_SMEM): 3 stages of 128 x rows and 128 weight rows, 128 swizzled bytes
 * each (64 values of k as f16); for Q4_K and Q5_K two steps of a row's
 * 16-byte units (the super-block's header, Q5_K's high bits, a sub-block
 * pair's quant bytes: 3 and 5) for 128 rows; and 1024 bytes to align the
 * stages. Q4_K's leaves room for two blocks an SM on an H100 (its 228 KiB).
 */
export function ggmlIdMmWgSharedBytes(type: GgmlQuantType): number {
  const units = type === 'Q4_K' ? 3 : type === 'Q5_K' ? 5 : 0;
  return 3 * 256 * 128 + 2 * 128 * units * 16 + 1024;
}
/**
 * Pairs an expert on average (pairs / nExperts) from which the matrix form
 * runs as the many-pairs form on Hopper, before the few-pairs form is
 * considered. Measured on an H100 (bench/results/moe-wg-h100-2026-11-28.md,
 * Qwen3.6-35B-A3B's experts, k 2048 and 512): at 8 pairs an expert 0.83x
 * and 0.88x the few-pairs form's time (0.35x and 0.76x the 64-row tiles'),
 * at 16 0.51x and 0.54x.
 */
export const GGML_MM_ID_WG_AVERAGE = 8;

/**
 * The CUDA many-pairs form (kernel_mul_mm_id_<t>_f32_wg): a 256-thread
 * block per (tile slot of 128 pairs, 128 weight rows; the gate/up form's
 * are 64 outputs' gate and up rows), ggmlIdMmWgSharedBytes of shared memory.
 */
export function ggmlIdMmWgCudaLaunch(type: GgmlQuantType, pairs: number, n: number, nExperts: number, gateUp = false): Launch {
  return {
    grid: [moeTileSlots(pairs, nExperts, GGML_MM_ID_CUDA_WG_BM) * ceilDiv(n, gateUp ? 64 : 128), 1, 1], threads: [256, 1, 1],
    threadgroupMemory: { 0: ggmlIdMmWgSharedBytes(type) },
  };
}

/**
 * Whether the matrix form runs as kernel_mul_mm_id_<t>_f32_wg: on compute
 * capability 9.0 (sm_90a's wgmma) with room for its stages, where the pairs
 * average at least GGML_MM_ID_WG_AVERAGE an expert and its grid fits (the
 * op asks before ggmlIdMmFew).
 */
export function ggmlIdMmWg(type: GgmlQuantType, pairs: number, n: number, nExperts: number,
  limits: Pick<DeviceLimits, 'computeCapability' | 'maxThreadgroupMemory'>, gateUp = false): boolean {
  return limits.computeCapability === 90 && limits.maxThreadgroupMemory >= ggmlIdMmWgSharedBytes(type) &&
    pairs >= GGML_MM_ID_WG_AVERAGE * nExperts && ggmlIdMmWgCudaLaunch(type, pairs, n, nExperts, gateUp).grid[0] <= CUDA_GRID_MAX;
}

/** Pair rows of a tile of the Metal matrix kernels. */
export const GGML_MM_ID_METAL_BM = 32;

// ---- validation ----

interface GgmlIdIo extends GgmlIdSizes {
  /** f32 [nTokens, k] at least */
  input: Buffer;
  /** f32 [nTokens * topK, n] at least; output */
  output: Buffer;
}

interface GgmlIdBase extends GgmlIdIo {
  /** u8: nExperts experts of n rows of k / QK blocks, expertStride bytes apart, at least */
  weight: Buffer;
}

export interface QuantizedMatmulIdGgmlArgs extends GgmlIdBase {
  /** u32 [nTokens, topK] at least: fused_moe_routing's expertIds */
  ids: Buffer;
}

export interface QuantizedMatmulIdGgmlMmArgs extends GgmlIdBase {
  /** u32 [nExperts + 2] at least: moe_dispatch_sort's offsets of the ids */
  offsets: Buffer;
  /** u32 [nTokens * topK] at least: moe_dispatch_sort's order */
  order: Buffer;
}

/** mlx-native's quantized_matmul_id_swiglu_q4_0 arguments (its GgmlQuantizedMatmulIdParams' sizes), ggmlType Q4_0. */
export interface QuantizedMatmulIdSwigluQ4_0Args extends GgmlIdSizes {
  /** f32 [nTokens * topK, k] at least: each pair's gate row */
  gate: Buffer;
  /** f32 [nTokens * topK, k] at least: each pair's up row */
  up: Buffer;
  /** u8: nExperts experts of n rows of k / 32 Q4_0 blocks, expertStride bytes apart, at least */
  weight: Buffer;
  /** u32 [nTokens * topK] at least */
  ids: Buffer;
  /** f32 [nTokens * topK, n] at least; output */
  output: Buffer;
}

export interface QuantizedMatmulIdGgmlMmGateUpArgs extends GgmlIdIo {
  /** u8: the gate projection's experts, laid out as the matrix form's weight */
  gateWeight: Buffer;
  /** u8: the up projection's experts, the gate's block type, rows and expertStride */
  upWeight: Buffer;
  /** u32 [nExperts + 2] at least: moe_dispatch_sort's offsets of the ids */
  offsets: Buffer;
  /** u32 [nTokens * topK] at least: moe_dispatch_sort's order */
  order: Buffer;
  /** The gate's activation; silu when absent. */
  activation?: GateActivation;
}

export interface QuantizedMatmulIdGgmlGateUpArgs extends GgmlIdIo {
  /** u8: the gate projection's experts, laid out as the vector form's weight */
  gateWeight: Buffer;
  /** u8: the up projection's experts, the gate's block type, rows and expertStride */
  upWeight: Buffer;
  /** u32 [nTokens, topK] at least: fused_moe_routing's expertIds */
  ids: Buffer;
  /** The gate's activation; silu when absent. */
  activation?: GateActivation;
}

/** The weights of a form by argument name: the plain forms' weight, the gate/up form's gateWeight and upWeight. */
type Weights = readonly (readonly [name: string, buffer: Buffer])[];

/**
 * The family's rules for a form. inputs: x (input), or the swiglu form's
 * gate and up rows, which hold a row per pair (else per token).
 */
function validateBase(op: string, a: GgmlIdSizes & { output: Buffer }, form: 'vector' | 'matrix' | 'gateUp' | 'matrixGateUp' | 'swiglu',
  inputs: Weights, weights: Weights, routing: BufferRule[], device?: Device): void {
  const matrix = form === 'matrix' || form === 'matrixGateUp';
  checkGgmlType(op, 'ggmlType', a.ggmlType);
  for (const arg of ['nTokens', 'k', 'n', 'topK', 'nExperts'] as const) {
    checkPositive(op, arg, a[arg]);
    checkAtMost(op, arg, a[arg], I32_MAX, '2^31 - 1');
  }
  const { qk, bytes } = ggmlBlockOf(a.ggmlType);
  checkMultiple(op, 'k', a.k, qk, `${a.ggmlType}'s block`);
  const pairs = checkPairs(op, a.nTokens, a.topK);
  if (matrix) checkAtMost(op, 'nTokens * topK', pairs, I32_MAX, '2^31 - 1');
  const expertBytes = checkedProduct(op, 'n * k / QK * block bytes', a.n, a.k / qk, bytes);
  const stride = a.expertStride ?? expertBytes;
  if (a.expertStride !== undefined) {
    if (!Number.isSafeInteger(a.expertStride) || a.expertStride < 0) throw invalid(op, 'expertStride', 'a safe integer >= 0 or absent', a.expertStride);
    if (a.expertStride < expertBytes) throw invalid(op, 'expertStride', `at least the bytes of an expert (${expertBytes})`, a.expertStride);
    const align = a.ggmlType === 'Q4_K' || a.ggmlType === 'Q5_K' ? 4 : 2;
    checkMultiple(op, 'expertStride', a.expertStride, align, `${a.ggmlType}'s row alignment`);
  }
  const nw = checkedProduct(op, '(nExperts - 1) * expertStride', a.nExperts - 1, stride) + expertBytes;
  if (!Number.isSafeInteger(nw)) throw invalid(op, 'weight bytes', 'a safe integer', nw);
  const launch = matrix ? ggmlIdMmCudaLaunch(pairs, a.n, a.nExperts, form === 'matrixGateUp') : ggmlIdMvCudaLaunch(a.ggmlType, pairs, a.n, a.k, form === 'gateUp');
  if (launch.grid[0] > CUDA_GRID_MAX) {
    throw invalid(op, 'nTokens * topK', `small enough for ${CUDA_GRID_MAX} CUDA blocks (${matrix ? 'tile slots' : 'pairs'} x blocks of rows)`, pairs);
  }
  const nx = form === 'swiglu' ? checkedProduct(op, 'nTokens * topK * k', pairs, a.k) : checkedProduct(op, 'nTokens * k', a.nTokens, a.k);
  const ny = checkedProduct(op, 'nTokens * topK * n', pairs, a.n);
  const of = `${a.nExperts} experts of ${a.n} rows of ${ggmlRowBytesOf(a.ggmlType, a.k)} bytes of ${a.ggmlType}, ${stride} bytes apart`;
  const rules: BufferRule[] = [
    ...inputs.map(([name, x]): BufferRule => [name, x, 'f32', nx]),
    ...weights.map(([name, w]): BufferRule => [name, w, 'u8', { bytes: nw, of }]),
    ...routing,
    ['output', a.output, 'f32', ny],
  ];
  checkBufferRules(op, rules, device, true);
  checkNoAliasing(op, ruleBindings(rules), ['output'], 'every output row reads x and weights that other rows read too');
}

/**
 * mlx-native's rules: a supported type; nTokens, k, n, topK, nExperts > 0; k
 * a multiple of the block; expertStride at least the bytes of an expert
 * (and, not in the crate, a multiple of 4 for Q4_K and Q5_K, 2 for the
 * others: the decoders read words of the rows of every expert);
 * each buffer at least its size (the weight (nExperts - 1) * expertStride +
 * an expert's bytes). With the int32 fields of the params, dtypes (f32 input
 * and output, u8 weight, u32 ids), the CUDA grid and no aliasing.
 */
export function validateQuantizedMatmulIdGgml(a: QuantizedMatmulIdGgmlArgs, device?: Device): void {
  const pairs = a.nTokens * a.topK;
  validateBase('quantized_matmul_id_ggml', a, 'vector', [['input', a.input]], [['weight', a.weight]], [['ids', a.ids, 'u32', Number.isSafeInteger(pairs) ? pairs : 0]], device);
}

/** quantizedMatmulIdGgml's rules, with offsets (nExperts + 2) and order (nTokens * topK) u32 in place of ids. */
export function validateQuantizedMatmulIdGgmlMm(a: QuantizedMatmulIdGgmlMmArgs, device?: Device): void {
  const pairs = a.nTokens * a.topK;
  validateBase('quantized_matmul_id_ggml_mm', a, 'matrix', [['input', a.input]], [['weight', a.weight]], [
    ['offsets', a.offsets, 'u32', a.nExperts + 2], ['order', a.order, 'u32', Number.isSafeInteger(pairs) ? pairs : 0],
  ], device);
}

/** quantizedMatmulIdGgmlMm's rules with quantizedMatmulIdGgmlGateUp's two weights and activation. */
export function validateQuantizedMatmulIdGgmlMmGateUp(a: QuantizedMatmulIdGgmlMmGateUpArgs, device?: Device): void {
  const op = 'quantized_matmul_id_ggml_mm_gate_up';
  checkActivation(op, a.activation);
  const pairs = a.nTokens * a.topK;
  validateBase(op, a, 'matrixGateUp', [['input', a.input]], [['gateWeight', a.gateWeight], ['upWeight', a.upWeight]], [
    ['offsets', a.offsets, 'u32', a.nExperts + 2], ['order', a.order, 'u32', Number.isSafeInteger(pairs) ? pairs : 0],
  ], device);
}

function checkActivation(op: string, activation: unknown): void {
  if (activation !== undefined && !(GATE_ACTIVATIONS as readonly unknown[]).includes(activation)) {
    throw invalid(op, 'activation', "'silu', 'gelu_tanh' or absent", activation);
  }
}

/**
 * quantizedMatmulIdGgml's rules with two weights, gateWeight and upWeight,
 * each held to the weight's rule (one ggmlType and expertStride for both),
 * and the activation 'silu', 'gelu_tanh' or absent.
 */
export function validateQuantizedMatmulIdGgmlGateUp(a: QuantizedMatmulIdGgmlGateUpArgs, device?: Device): void {
  const op = 'quantized_matmul_id_ggml_gate_up';
  checkActivation(op, a.activation);
  const pairs = a.nTokens * a.topK;
  validateBase(op, a, 'gateUp', [['input', a.input]], [['gateWeight', a.gateWeight], ['upWeight', a.upWeight]],
    [['ids', a.ids, 'u32', Number.isSafeInteger(pairs) ? pairs : 0]], device);
}

/**
 * mlx-native's rules for quantized_matmul_id_swiglu_q4_0: ggmlType Q4_0;
 * nTokens, k, n, topK > 0; k a multiple of 32; gate and up at least nTokens
 * * topK * k floats, the output nTokens * topK * n. With the family's rules
 * on nExperts, expertStride and the weight (the crate checks no weight
 * size), dtypes (u32 ids of every pair), the CUDA grid and no aliasing.
 */
export function validateQuantizedMatmulIdSwigluQ4_0(a: QuantizedMatmulIdSwigluQ4_0Args, device?: Device): void {
  const op = 'quantized_matmul_id_swiglu_q4_0';
  if (a.ggmlType !== 'Q4_0') throw invalid(op, 'ggmlType', 'Q4_0', a.ggmlType);
  const pairs = a.nTokens * a.topK;
  validateBase(op, a, 'swiglu', [['gate', a.gate], ['up', a.up]], [['weight', a.weight]],
    [['ids', a.ids, 'u32', Number.isSafeInteger(pairs) ? pairs : 0]], device);
}

/**
 * quantized_matmul_id_ggml (mlx-native's): output[p, j] = sum_k input[p /
 * topK, k] * w_e[j, k], e = ids[p], w_e expert e's weight dequantized from
 * its GGML blocks; f32 input and output; zeros for an id >= nExperts. The
 * vector form: each pair reads its expert's rows (decode).
 *
 * Numerics: Metal sums f32 products of the weight dequantized in f32 (as
 * kernel_mul_mv_<t>_f32); CUDA's tensor cores take the weight and x in f16
 * (quantized_matmul_ggml's vector engine), summed in f32; CUDA's Q8_0 and
 * Q6_K take x rounded to int8 a chunk of 32 values (scale max |x| / 127),
 * the codes' products summed in int32 (dp4a) and scaled in f32.
 *
 * Rules: validateQuantizedMatmulIdGgml. Kernels: kernel_mul_mv_id_<t>_f32.
 * Bindings: 0 weight, 1 input, 2 output, 3 ids, 4 GgmlMatvecIdParams (ne00 =
 * ne10 = k, ne01 = ne0 = n, ne02 = nExperts, ne1 = pairs, top_k, n_tokens,
 * expert_stride).
 * Grid (Metal, the crate's): (ceil(n / 8), pairs, 1) threadgroups of (8, 8,
 * 1) for Q4_0 and Q8_0, (ceil(n / 2), pairs, 1) of (2, 32, 1) for the K
 * formats. CUDA: ggmlIdI8Launch for Q6_K and Q8_0 (the int8 engine, a warp
 * a weight row, x rounded to int8 a chunk of 32 values), else
 * ggmlIdMvCudaLaunch (a block of 128 threads per pair and 16 rows of its
 * expert, the k windows copied by cp.async in 16-byte units).
 */
export function quantizedMatmulIdGgml(enc: Encoder, args: QuantizedMatmulIdGgmlArgs): void {
  record(enc, planQuantizedMatmulIdGgml(args, enc.device.limits, enc.device));
}

/** quantizedMatmulIdGgml's plan: validates, then one dispatch (see quantizedMatmulIdGgml). */
export function planQuantizedMatmulIdGgml(a: QuantizedMatmulIdGgmlArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateQuantizedMatmulIdGgml(a, device);
  const pairs = a.nTokens * a.topK;
  return planOf({
    kernel: `kernel_mul_mv_id_${GGML_KERNEL_TYPE[a.ggmlType]}_f32`,
    buffers: [a.weight, a.input, a.output, a.ids],
    bytes: [, , , , packGgmlMatvecIdParams(a)],
    ...ggmlMvMetalLaunch(a.ggmlType, pairs, a.n),
    cuda: ggmlIdI8Launch(a.ggmlType, pairs, a.n, a.k, limits) ?? ggmlIdMvCudaLaunch(a.ggmlType, pairs, a.n, a.k),
  });
}

/**
 * quantized_matmul_id_ggml_gate_up: the fused gate/up projection of the
 * experts in the vector form, output[p, j] = act(sum_k x[p / topK, k]
 * g_e[j, k]) * sum_k x[p / topK, k] u_e[j, k], g and u expert e = ids[p]'s
 * gate and up weights dequantized from their GGML blocks (one type, one
 * expertStride), act silu (default; SwiGLU, Qwen3.6) or gelu_tanh (GeGLU,
 * Gemma 4); zeros for an id >= nExperts. One dispatch where the plain form
 * takes two products and silu_mul / gelu_tanh_mul: each pair's gate and up
 * rows are read by one threadgroup (block) in one pass over its x row, and
 * the two [pairs, n] products are never written.
 *
 * Numerics: quantizedMatmulIdGgml's for each sum (Metal f32, CUDA's tensor
 * cores f16 operands with f32 sums), then the activation in f32.
 *
 * Rules: validateQuantizedMatmulIdGgmlGateUp. Kernels:
 * kernel_mul_mv_id_<t>_f32_gate_up (not in the crate). Bindings: 0
 * gateWeight, 1 input, 2 output, 3 ids, 4 GgmlMatvecIdGateUpParams (the
 * vector form's GgmlMatvecIdParams, then activation), 5 upWeight.
 * Grid (Metal): the vector form's, each simdgroup taking R gate and R up
 * rows. CUDA: ggmlIdMvCudaLaunch(.., true): a 128-thread block per pair and 8
 * output rows, whose 8 gate and 8 up rows are the vector engine's 16; for
 * Q4_K of few tiles (ggmlIdGc8Takes) kernel_mul_mv_id_q4_K_f32_gate_up_gc8,
 * 256 threads a tile.
 */
export function quantizedMatmulIdGgmlGateUp(enc: Encoder, args: QuantizedMatmulIdGgmlGateUpArgs): void {
  record(enc, planQuantizedMatmulIdGgmlGateUp(args, enc.device.limits, enc.device));
}

/** quantizedMatmulIdGgmlGateUp's plan: validates, then one dispatch (see quantizedMatmulIdGgmlGateUp). */
export function planQuantizedMatmulIdGgmlGateUp(a: QuantizedMatmulIdGgmlGateUpArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateQuantizedMatmulIdGgmlGateUp(a, device);
  const pairs = a.nTokens * a.topK;
  return planOf({
    kernel: `kernel_mul_mv_id_${GGML_KERNEL_TYPE[a.ggmlType]}_f32_gate_up`,
    buffers: [a.gateWeight, a.input, a.output, a.ids, , a.upWeight],
    bytes: [, , , , packGgmlMatvecIdGateUpParams(a)],
    ...ggmlMvMetalLaunch(a.ggmlType, pairs, a.n),
    cuda: ggmlIdMvCudaLaunch(a.ggmlType, pairs, a.n, a.k, true, limits, a.expertStride ?? a.n * ggmlRowBytesOf(a.ggmlType, a.k)),
  });
}

/**
 * quantized_matmul_id_swiglu_q4_0 (mlx-native's): the down projection of
 * the experts fused with the SwiGLU before it, output[p, j] = sum_k
 * w_e[j, k] * silu(gate[p, k]) * up[p, k], e = ids[p], w_e expert e's Q4_0
 * rows: gate and up hold a row per pair (the unfused gate and up products'
 * outputs), so one dispatch replaces silu_mul and the down product. Zeros
 * for an id >= nExperts (the crate passes 1 for the params' experts and
 * reads past them).
 *
 * Numerics: silu(gate) * up in f32 (the prelude's silu), then as
 * quantizedMatmulIdGgml's vector form (Metal f32; CUDA's tensor cores take
 * it and the weight in f16, summed in f32).
 *
 * Rules: validateQuantizedMatmulIdSwigluQ4_0. Kernel:
 * kernel_mul_mv_id_q4_0_f32_swiglu. Bindings (the crate's): 0 weight, 1
 * gate, 2 up, 3 output, 4 ids, 5 GgmlMatvecIdParams (the vector form's
 * fields, ne1 the pairs, ne02 nExperts).
 * Grid (Metal, the crate's): (ceil(n / 8), pairs, 1) threadgroups of (8, 8,
 * 1). CUDA: ggmlIdMvCudaLaunch (the vector form's, 16 rows a block).
 */
export function quantizedMatmulIdSwigluQ4_0(enc: Encoder, args: QuantizedMatmulIdSwigluQ4_0Args): void {
  record(enc, planQuantizedMatmulIdSwigluQ4_0(args, enc.device.limits, enc.device));
}

/** quantizedMatmulIdSwigluQ4_0's plan: validates, then one dispatch (see quantizedMatmulIdSwigluQ4_0). */
export function planQuantizedMatmulIdSwigluQ4_0(a: QuantizedMatmulIdSwigluQ4_0Args, _limits: DeviceLimits, device?: Device): OpPlan {
  validateQuantizedMatmulIdSwigluQ4_0(a, device);
  const pairs = a.nTokens * a.topK;
  return planOf({
    kernel: 'kernel_mul_mv_id_q4_0_f32_swiglu',
    buffers: [a.weight, a.gate, a.up, a.output, a.ids],
    bytes: [, , , , , packGgmlMatvecIdParams(a)],
    ...ggmlMvMetalLaunch('Q4_0', pairs, a.n),
    cuda: ggmlIdMvCudaLaunch('Q4_0', pairs, a.n, a.k),
  });
}

/**
 * quantized_matmul_id_ggml_mm: quantizedMatmulIdGgml's product in the matrix
 * form, over the pairs grouped by expert (moeDispatchSort of the same ids:
 * offsets and order): tiles of an expert's pairs (x rows gathered through
 * the order) against its dequantized weight, the outputs scattered back to
 * pair order; an expert without pairs costs an empty tile slot (prefill).
 *
 * Numerics: Metal stages the weight as f16 and x as f32 (as
 * kernel_mul_mm_<t>_f32); CUDA's tensor cores take both in f16, summed in f32.
 *
 * Rules: validateQuantizedMatmulIdGgmlMm. Kernels: kernel_mul_mm_id_<t>_f32.
 * Bindings: 0 GgmlMatmulIdMm_MmParams (ne00 k, ne02 nExperts, nb01 the bytes
 * of a weight row, nb02 expertStride, nb12 the bytes of an x row, ne20 topK,
 * ne21 nTokens, ne0 n), 1 weight, 2 input, 3 offsets, 4 order, 5 output;
 * threadgroup(0) 8192 bytes.
 * Grid (Metal): (ceil(n / 64), floor(pairs / 32) + nExperts + 1, 1)
 * threadgroups of 128, a tile of 32 pairs x 64 weight rows (moe_tile).
 * CUDA: ggmlIdMmCudaLaunch (64 pairs x 128 weight rows, mma.sync); where the
 * pairs average few an expert (ggmlIdMmFew: a short prompt),
 * kernel_mul_mm_id_<t>_f32_few (not in the crate; the same bindings) on
 * ggmlIdMmFewCudaLaunch: the vector engine over slots of up to 8 pairs of
 * one expert, which reads the expert's rows once a slot where the 64-row
 * tile computes mostly padding; but on compute capability 9.0 where they
 * average 8 or more (ggmlIdMmWg, taken first), kernel_mul_mm_id_<t>_f32_wg
 * (not in the crate; the same bindings) on ggmlIdMmWgCudaLaunch: 128 pairs
 * x 128 weight rows on wgmma, an expert's rows decoded once a slot.
 */
export function quantizedMatmulIdGgmlMm(enc: Encoder, args: QuantizedMatmulIdGgmlMmArgs): void {
  record(enc, planQuantizedMatmulIdGgmlMm(args, enc.device.limits, enc.device));
}

/** quantizedMatmulIdGgmlMm's plan: validates, then one dispatch (see quantizedMatmulIdGgmlMm). */
export function planQuantizedMatmulIdGgmlMm(a: QuantizedMatmulIdGgmlMmArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateQuantizedMatmulIdGgmlMm(a, device);
  const pairs = a.nTokens * a.topK;
  const wg = ggmlIdMmWg(a.ggmlType, pairs, a.n, a.nExperts, limits);
  const few = !wg && ggmlIdMmFew(a.ggmlType, pairs, a.n, a.k, a.nExperts, limits);
  return planOf({
    kernel: `kernel_mul_mm_id_${GGML_KERNEL_TYPE[a.ggmlType]}_f32${few ? '_few' : wg ? '_wg' : ''}`,
    buffers: [, a.weight, a.input, a.offsets, a.order, a.output],
    bytes: [packGgmlMatmulIdMmParams(a)],
    threadgroupMemory: [GGML_MM_SHARED_BYTES],
    grid: [ceilDiv(a.n, 64), moeTileSlots(pairs, a.nExperts, GGML_MM_ID_METAL_BM), 1],
    threads: [128, 1, 1],
    cuda: few ? ggmlIdMmFewCudaLaunch(a.ggmlType, pairs, a.n, a.nExperts)
      : wg ? ggmlIdMmWgCudaLaunch(a.ggmlType, pairs, a.n, a.nExperts) : ggmlIdMmCudaLaunch(pairs, a.n, a.nExperts),
  });
}

/**
 * quantized_matmul_id_ggml_mm_gate_up: quantizedMatmulIdGgmlGateUp's product
 * in the matrix form over the pairs grouped by expert (moeDispatchSort's
 * offsets and order, as quantizedMatmulIdGgmlMm): each tile reads its
 * expert's gate and up rows once for its pairs, and the two [pairs, n]
 * products are never written (prefill; where the unfused path takes two
 * matrix products, silu_mul or gelu_tanh_mul, and their f32 rows).
 *
 * Numerics: quantizedMatmulIdGgmlMm's for each sum (Metal: the weight staged
 * as f16, x as f32; CUDA's tensor cores: both in f16, summed in f32), then the
 * activation in f32.
 *
 * Rules: validateQuantizedMatmulIdGgmlMmGateUp. Kernels:
 * kernel_mul_mm_id_<t>_f32_gate_up (not in the crate). Bindings: 0
 * GgmlMatmulIdMmGateUpParams (the matrix form's GgmlMatmulIdMm_MmParams, then
 * activation), 1 gateWeight, 2 input, 3 offsets, 4 order, 5 output, 6
 * upWeight; threadgroup(0) 8192 bytes.
 * Grid (Metal): (ceil(n / 32), floor(pairs / 32) + nExperts + 1, 1)
 * threadgroups of 128, a tile's 64 weight rows 32 outputs' gate and up rows.
 * CUDA: the matrix form's choice of forms and grids with half the outputs a
 * block (their gate and up rows the engine's): ggmlIdMmCudaLaunch(.., true)
 * (kernel_mul_mm_id_<t>_f32_gate_up), where the pairs average few an expert
 * ggmlIdMmFewCudaLaunch(.., true) (_gate_up_few), on compute capability 9.0
 * where they average many ggmlIdMmWgCudaLaunch(.., true) (_gate_up_wg).
 */
export function quantizedMatmulIdGgmlMmGateUp(enc: Encoder, args: QuantizedMatmulIdGgmlMmGateUpArgs): void {
  record(enc, planQuantizedMatmulIdGgmlMmGateUp(args, enc.device.limits, enc.device));
}

/** quantizedMatmulIdGgmlMmGateUp's plan: validates, then one dispatch (see quantizedMatmulIdGgmlMmGateUp). */
export function planQuantizedMatmulIdGgmlMmGateUp(a: QuantizedMatmulIdGgmlMmGateUpArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateQuantizedMatmulIdGgmlMmGateUp(a, device);
  const pairs = a.nTokens * a.topK;
  const wg = ggmlIdMmWg(a.ggmlType, pairs, a.n, a.nExperts, limits, true);
  const few = !wg && ggmlIdMmFew(a.ggmlType, pairs, a.n, a.k, a.nExperts, limits, true);
  return planOf({
    kernel: `kernel_mul_mm_id_${GGML_KERNEL_TYPE[a.ggmlType]}_f32_gate_up${few ? '_few' : wg ? '_wg' : ''}`,
    buffers: [, a.gateWeight, a.input, a.offsets, a.order, a.output, a.upWeight],
    bytes: [packGgmlMatmulIdMmGateUpParams(a)],
    threadgroupMemory: [GGML_MM_SHARED_BYTES],
    grid: [ceilDiv(a.n, 32), moeTileSlots(pairs, a.nExperts, GGML_MM_ID_METAL_BM), 1],
    threads: [128, 1, 1],
    cuda: few ? ggmlIdMmFewCudaLaunch(a.ggmlType, pairs, a.n, a.nExperts, true)
      : wg ? ggmlIdMmWgCudaLaunch(a.ggmlType, pairs, a.n, a.nExperts, true) : ggmlIdMmCudaLaunch(pairs, a.n, a.nExperts, true),
  });
}

// ---- the float64 reference ----

// CPU reference of the quantized_matmul_id_ggml family: each expert's GGML
// blocks dequantized in float64 from the documented formats
// (ggmlDequantizeRef, ts/ops/quantized_matmul_ggml.ts), then the per-pair
// products of ts/ops/dense_matmul_id.ts.

/** The sizes of a product: nTokens rows of x, topK slots each, nExperts experts of n rows, expertStride bytes apart (the op's). */
export type GgmlIdSizesRef = GgmlIdSizes;

/**
 * y [nTokens * topK, n]: y[p, j] = sum_k x[p / topK, k] w_e[j, k], e =
 * ids[p], w_e expert e's rows dequantized from the bytes at e * expertStride
 * of weight; zeros for e >= nExperts (abs 1 there), with sum_k |x w| per output.
 */
export function ggmlMatmulIdRef(x: ArrayLike<number>, weight: Uint8Array, ids: ArrayLike<number>, s: GgmlIdSizesRef): IdRef {
  return denseMatmulIdRef(x, dequantizeExperts(weight, s), ids, idSizesOf(s));
}

/**
 * The fused gate/up product: y[p, j] = act(g) * u, g and u pair p's sums
 * against expert e's gate and up rows (each dequantized as ggmlMatmulIdRef's
 * weight); denseGateUpIdRef's error bound in abs.
 */
export function ggmlGateUpIdRef(x: ArrayLike<number>, gate: Uint8Array, up: Uint8Array, ids: ArrayLike<number>, s: GgmlIdSizesRef,
  activation: GateActivation): IdRef {
  return denseGateUpIdRef(x, dequantizeExperts(gate, s), dequantizeExperts(up, s), ids, idSizesOf(s), activation);
}

/**
 * The SwiGLU down projection: y[p, j] = sum_k w_e[j, k] h[p, k], h[p, k] =
 * silu(gate[p, k]) * up[p, k] in float64, e = ids[p] (gate and up a row per
 * pair); zeros for e >= nExperts (abs 1 there), with sum_k |h w| per output.
 */
export function ggmlSwigluIdRef(gate: ArrayLike<number>, up: ArrayLike<number>, weight: Uint8Array, ids: ArrayLike<number>,
  s: GgmlIdSizesRef): IdRef {
  const h = Float64Array.from(gate, (g, i) => siluRef(g) * up[i]!);
  const pairs = s.nTokens * s.topK;
  return denseMatmulIdRef(h, dequantizeExperts(weight, s), ids, { m: pairs, n: s.n, k: s.k, nExpertUsed: 1, numExperts: s.nExperts });
}

/** Every expert's n rows dequantized in float64, [nExperts, n, k]. */
function dequantizeExperts(weight: Uint8Array, s: GgmlIdSizesRef): Float64Array {
  const expertBytes = s.n * ggmlRowBytesOf(s.ggmlType, s.k);
  const stride = s.expertStride ?? expertBytes;
  const w = new Float64Array(s.nExperts * s.n * s.k);
  for (let e = 0; e < s.nExperts; e++) {
    w.set(ggmlDequantizeRef(s.ggmlType, weight.subarray(e * stride, e * stride + expertBytes), s.n * s.k), e * s.n * s.k);
  }
  return w;
}

const idSizesOf = (s: GgmlIdSizesRef) => ({ m: s.nTokens, n: s.n, k: s.k, nExpertUsed: s.topK, numExperts: s.nExperts });
