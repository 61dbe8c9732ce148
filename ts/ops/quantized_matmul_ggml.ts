// quantized_matmul_ggml: matrix products with weights in GGUF's block formats
// (llama.cpp / ggml: Q4_0, Q8_0, Q4_K, Q5_K, Q6_K), the bytes of a GGUF file's
// tensor used as they are; whole-tensor dequantization; and embedding rows
// gathered from a table of blocks (the embedding op's quantized tables,
// ts/ops/embedding.ts). Kernel names, bindings, param structs, grids and
// validation rules of mlx-native's quantized_matmul_ggml module
// (src/ops/quantized_matmul_ggml.rs: kernel_mul_mv_{q4_0,q8_0,q4_K,q6_K}_f32,
// kernel_mul_mm_{q4_0,q8_0,q6_K}_f32). Added in its style, where the crate has
// none: kernel_mul_mv_q5_K_f32, kernel_mul_mm_{q4_K,q5_K}_f32 (the crate routes
// Q4_K to the vector form at every m and has no Q5_K product),
// kernel_dequantize_<t>_<o> and embedding_gather_scale_batch_<t>_to_<o>. Not
// here: the crate's Apple tensor-API kernels (kernel_mul_mm_<t>_tensor_f32,
// M3 and later, which the emulator cannot run; the crate falls back to the
// simdgroup kernels without them) and its permuted bf16-input O-projection
// entry. Kernels: shaders/quantized_matmul_ggml.metal and
// shaders/cuda/quantized_matmul_ggml.cu.
//
// The formats (ggml-common.h; f16 little-endian, rows of K values stored as
// K / QK blocks back to back, a tensor's rows back to back):
//   Q4_0, 32 values in 18 bytes: d (f16), qs[16]. Value j < 16 is the low
//     nibble of qs[j], value j + 16 its high nibble; w = d * (q - 8).
//     (llama.cpp's quantizer: d = max / -8 with max the value of largest
//     magnitude, q = min(15, trunc(x / d + 8.5)).)
//   Q8_0, 32 values in 34 bytes: d (f16), qs[32] int8; w = d * q (d = amax / 127).
//   Q4_K, 256 values in 144 bytes: d (f16), dmin (f16), scales[12], qs[128].
//     Eight sub-blocks of 32, each with a 6-bit scale sc and min m packed in
//     the 12 bytes: sub-blocks j < 4 in the low 6 bits of scales[j] (sc) and
//     scales[j + 4] (m); j >= 4 in the nibbles of scales[j + 4] (sc low, m
//     high) with their top two bits in the high two bits of scales[j - 4]
//     (sc) and scales[j] (m). Sub-block s takes nibble s % 2 (low first) of
//     qs[32 (s / 2) + l], l < 32. w = d * sc * q - dmin * m.
//   Q5_K, 256 values in 176 bytes: d, dmin, scales[12] (as Q4_K), qh[32],
//     qs[128] (as Q4_K's); bit s of qh[l] is bit 4 of value l of sub-block s.
//     w = d * sc * q - dmin * m, q < 32.
//   Q6_K, 256 values in 210 bytes: ql[128], qh[64], scales[16] (int8), d
//     (f16) last. Value v = 128 h + 32 p + l (h < 2, p < 4, l < 32): low four
//     bits nibble p / 2 of ql[64 h + 32 (p % 2) + l], high two bits bits 2p,
//     2p + 1 of qh[32 h + l]; sub-block v / 16 has scale scales[v / 16].
//     w = d * scales[v / 16] * (q - 32).
// The K formats' quantizers search the sub-block scales and mins (llama.cpp's
// make_qkx2_quants for Q4_K / Q5_K, make_qx_quants for Q6_K) and quantize
// them against the largest (6 bits against d = max / 63, or int8 against d =
// max / -128); this module's reference section has them.

import src from '../../shaders/quantized_matmul_ggml.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/quantized_matmul_ggml.cu' with { type: 'text' };
import header from '../../shaders/quantized_matmul_ggml.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familyPlans, record, type CudaLaunch, type Launch, type OpPlan, type PlannedDispatch } from '../plan.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBufferRules, checkedProduct, checkMultiple, checkNoAliasing, checkPositive, checkU32Count, I32_MAX, invalid, ruleBindings, U32_MAX,
  type BufferRule,
} from '../validate.ts';
import { ggmlType } from '../weights/gguf.ts';
import type { EmbeddingArgs } from './embedding.ts';
import { checkMatmulForm, denseMmCudaTile, matmulForm, type MatmulForm, denseAbsRef, denseRef } from './dense.ts';
import { GC_MAX_SHARED } from './quantized_matmul.ts';
import { ceilDiv, chunksCudaLaunch, CUDA_GRID_MAX } from '../launch.ts';
import { f16BitsToF32, f32ToF16Bits } from '../dtype.ts';

export const QUANTIZED_MATMUL_GGML_FAMILY = 'quantized_matmul_ggml';
/** The GGUF block formats of the family, by ggml's names (a GGUF TensorInfo's dtype). */
export const GGML_QUANT_TYPES = ['Q4_0', 'Q8_0', 'Q4_K', 'Q5_K', 'Q6_K'] as const;
export type GgmlQuantType = (typeof GGML_QUANT_TYPES)[number];
/** The format's part of the kernel names (llama.cpp's spelling). */
export const GGML_KERNEL_TYPE: Readonly<Record<GgmlQuantType, string>> = { Q4_0: 'q4_0', Q8_0: 'q8_0', Q4_K: 'q4_K', Q5_K: 'q5_K', Q6_K: 'q6_K' };

/**
 * The CUDA program's parts 1 to 8 (FamilySources.cudaParts): the matrix
 * form of each block format (its entry and its split-k entry, 1.7-1.8 s of
 * NVRTC 13.0 on one thread each), then the int8 vector engine's harness
 * variants, which the op does not launch (3.1 s), then the int8 entries the
 * op launches for one token of Q8_0 and Q6_K (ggmlI8Takes), then the vector
 * entries with x staged a block that it launches from 2 tokens; the vector,
 * dequantize and embedding entries are part 0 (2.7 s). The whole family took
 * 15.3 s; a model's prompt compiles the formats its file uses.
 */
export const QUANTIZED_MATMUL_GGML_CUDA_PARTS: readonly (readonly string[])[] = [
  ...GGML_QUANT_TYPES.map((q) => [`kernel_mul_mm_${GGML_KERNEL_TYPE[q]}_f32`, `kernel_mul_mm_${GGML_KERNEL_TYPE[q]}_f32_splitk`]),
  [...GGML_QUANT_TYPES.flatMap((q) => ['vdq1', 'vdq2', 'vdqs4'].map((v) => `kernel_mul_mv_${GGML_KERNEL_TYPE[q]}_f32_${v}`)),
    'kernel_mul_mv_q4_K_f32_vgc2', 'kernel_mul_mv_q4_K_f32_vgc4'],
  ['kernel_mul_mv_q8_0_f32_i8', 'kernel_mul_mv_q6_K_f32_i8', 'kernel_mul_mv_q6_K_f32_i8g'],
  GGML_QUANT_TYPES.map((q) => `kernel_mul_mv_${GGML_KERNEL_TYPE[q]}_f32_xs`),
];
/** The family's kernel sources by backend, as registered by every dispatch. */
export const QUANTIZED_MATMUL_GGML_SOURCES = familySources(QUANTIZED_MATMUL_GGML_FAMILY, {
  header, metal: src, cuda: cudaSrc, cudaParts: QUANTIZED_MATMUL_GGML_CUDA_PARTS,
});
export const QUANTIZED_MATMUL_GGML_KERNELS = [
  'kernel_mul_mv_q4_0_f32', 'kernel_mul_mv_q8_0_f32', 'kernel_mul_mv_q4_K_f32', 'kernel_mul_mv_q5_K_f32', 'kernel_mul_mv_q6_K_f32',
  'kernel_mul_mm_q4_0_f32', 'kernel_mul_mm_q8_0_f32', 'kernel_mul_mm_q4_K_f32', 'kernel_mul_mm_q5_K_f32', 'kernel_mul_mm_q6_K_f32',
  'kernel_mul_mm_q4_0_f32_splitk', 'kernel_mul_mm_q8_0_f32_splitk', 'kernel_mul_mm_q4_K_f32_splitk', 'kernel_mul_mm_q5_K_f32_splitk',
  'kernel_mul_mm_q6_K_f32_splitk',
  'kernel_dequantize_q4_0_f32', 'kernel_dequantize_q4_0_f16', 'kernel_dequantize_q4_0_bf16',
  'kernel_dequantize_q8_0_f32', 'kernel_dequantize_q8_0_f16', 'kernel_dequantize_q8_0_bf16',
  'kernel_dequantize_q4_K_f32', 'kernel_dequantize_q4_K_f16', 'kernel_dequantize_q4_K_bf16',
  'kernel_dequantize_q5_K_f32', 'kernel_dequantize_q5_K_f16', 'kernel_dequantize_q5_K_bf16',
  'kernel_dequantize_q6_K_f32', 'kernel_dequantize_q6_K_f16', 'kernel_dequantize_q6_K_bf16',
  'embedding_gather_scale_batch_q4_0_to_f32', 'embedding_gather_scale_batch_q4_0_to_f16', 'embedding_gather_scale_batch_q4_0_to_bf16',
  'embedding_gather_scale_batch_q8_0_to_f32', 'embedding_gather_scale_batch_q8_0_to_f16', 'embedding_gather_scale_batch_q8_0_to_bf16',
  'embedding_gather_scale_batch_q4_K_to_f32', 'embedding_gather_scale_batch_q4_K_to_f16', 'embedding_gather_scale_batch_q4_K_to_bf16',
  'embedding_gather_scale_batch_q5_K_to_f32', 'embedding_gather_scale_batch_q5_K_to_f16', 'embedding_gather_scale_batch_q5_K_to_bf16',
  'embedding_gather_scale_batch_q6_K_to_f32', 'embedding_gather_scale_batch_q6_K_to_f16', 'embedding_gather_scale_batch_q6_K_to_bf16',
] as const;
const planOf = familyPlans({
  family: QUANTIZED_MATMUL_GGML_FAMILY, sources: QUANTIZED_MATMUL_GGML_SOURCES, kernels: QUANTIZED_MATMUL_GGML_KERNELS,
});

/** struct GgmlMatvecParams (buffer 3 of kernel_mul_mv_<t>_f32). */
export const GGML_MATVEC_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GgmlMatvecParams');
/** struct GgmlMatmulMmParams (buffer 0 of kernel_mul_mm_<t>_f32). */
export const GGML_MATMUL_MM_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GgmlMatmulMmParams');
/** struct GgmlMatmulSplitParams (buffer 6 of kernel_mul_mm_<t>_f32_splitk). */
export const GGML_MATMUL_SPLIT_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GgmlMatmulSplitParams');
/** struct GgmlDequantizeParams (buffer 2 of kernel_dequantize_<t>_<o>). */
export const GGML_DEQUANTIZE_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GgmlDequantizeParams');
/** struct GgmlEmbeddingParams (buffer 3 of embedding_gather_scale_batch_<t>_to_<o>). */
export const GGML_EMBEDDING_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GgmlEmbeddingParams');

/** mlx-native's MM_ROUTING_THRESHOLD (llama.cpp's ne11_mm_min): the vector form up to 8 rows of x, the matrix form past them. */
export const GGML_MM_ROUTING_THRESHOLD = 8;
/** threadgroup(0) of the Metal matrix kernels: a 64 x 32 half weight tile and a 32 x 32 float x tile (the crate's 8192). */
export const GGML_MM_SHARED_BYTES = 8192;
/** Output types of the dequantization and embedding kernels. */
export type GgmlOutputDType = 'f32' | 'f16' | 'bf16';
const OUTPUT_DTYPES: readonly GgmlOutputDType[] = ['f32', 'f16', 'bf16'];



/** Values per block (QK) and bytes per block of a format (ts/weights/gguf.ts's table). */
export function ggmlBlockOf(type: GgmlQuantType): { qk: number; bytes: number } {
  const t = ggmlType(type)!;
  return { qk: t.blockSize, bytes: t.typeSize };
}

/** Bytes of a row of k values (k a multiple of the block). */
export function ggmlRowBytesOf(type: GgmlQuantType, k: number): number {
  const b = ggmlBlockOf(type);
  return (k / b.qk) * b.bytes;
}

export function checkGgmlType(op: string, arg: string, type: unknown): asserts type is GgmlQuantType {
  if (!(GGML_QUANT_TYPES as readonly unknown[]).includes(type)) throw invalid(op, arg, GGML_QUANT_TYPES.join(', '), type);
}

export function packGgmlMatvecParams(p: { m: number; n: number; k: number }): Uint8Array {
  return packFields(GGML_MATVEC_PARAMS_LAYOUT, { ne00: p.k, ne01: p.n, ne02: 1, ne10: p.k, ne12: 1, ne0: p.n, ne1: p.m, r2: 1, r3: 1 });
}

/** mlx-native's GgmlMatmulMmGpuParams: contiguous rows, a batch of one. */
export function packGgmlMatmulMmParams(p: { m: number; n: number; k: number; ggmlType: GgmlQuantType }): Uint8Array {
  const nb01 = ggmlRowBytesOf(p.ggmlType, p.k);
  const nb11 = 4 * p.k;
  return packFields(GGML_MATMUL_MM_PARAMS_LAYOUT, {
    ne00: p.k, ne02: 1, nb01, nb02: nb01 * p.n, nb03: 0, ne12: 1, nb10: 4, nb11, nb12: nb11 * p.m, nb13: 0, ne0: p.n, ne1: p.m, r2: 1, r3: 1,
  });
}

export function packGgmlMatmulSplitParams(p: { splits: number; chunks: number }): Uint8Array {
  return packFields(GGML_MATMUL_SPLIT_PARAMS_LAYOUT, p);
}

export function packGgmlDequantizeParams(p: { nChunks: number }): Uint8Array {
  return packFields(GGML_DEQUANTIZE_PARAMS_LAYOUT, { n_chunks: p.nChunks });
}

export function packGgmlEmbeddingParams(p: { scale: number; hiddenSize: number; nTokens: number; vocabSize: number }): Uint8Array {
  return packFields(GGML_EMBEDDING_PARAMS_LAYOUT, { scale: p.scale, hidden_size: p.hiddenSize, n_tokens: p.nTokens, vocab_size: p.vocabSize });
}

// ---- CUDA launches (shaders/cuda/quantized_matmul_ggml.cu; one-dimensional grids) ----

/** Weight rows a block of the CUDA vector engine takes (128 threads: 4 warps splitting k). */
export const GGML_MV_CUDA_ROWS = 16;
/** Warps of a block of the CUDA vector engine (common.cuh GMV_WARPS). */
export const GGML_MV_CUDA_WARPS = 4;
/** Windows in a warp's shared stages: one computed, two being copied. */
const GGML_MV_CUDA_STAGES = 3;
/** Values of k a warp of the vector engine copies into shared memory and computes at a time. */
const GGML_MV_CUDA_WINDOW = 256;

/** Bytes of one row of a vector-engine stage: a window's bytes from 16-byte units (the kernel's GmvStage<F>::SP). */
export function ggmlMvCudaStageRow(type: GgmlQuantType): number {
  const b = ggmlBlockOf(type);
  return 16 * Math.floor(((GGML_MV_CUDA_WINDOW / b.qk) * b.bytes + 30 + 15) / 16);
}

/** Dynamic shared memory of the CUDA vector engine: 4 warps x 3 stages x 16 rows, then 4 x 128 floats of sums. */
export function ggmlMvCudaSharedBytes(type: GgmlQuantType): number {
  return GGML_MV_CUDA_WARPS * GGML_MV_CUDA_STAGES * GGML_MV_CUDA_ROWS * ggmlMvCudaStageRow(type) + GGML_MV_CUDA_WARPS * 128 * 4;
}

/** The CUDA matrix engine's tile: denseMmCudaTile's shapes, two stages of (bm + bn) rows of 40 f16. */
export function ggmlMmCudaTile(m: number, n: number): { bm: number; bn: number; threads: number; sharedBytes: number } {
  const t = denseMmCudaTile(m, n);
  return { bm: t.bm, bn: t.bn, threads: t.threads, sharedBytes: 2 * (t.bm + t.bn) * 40 * 2 };
}

/**
 * The shared memory of the group-column engines (shaders/cuda/common.cuh):
 * Q4_K (gc_q4k_shared) x as bf16 pairs, the sub-blocks' sums, 1 KiB; Q8_0
 * and Q6_K (gc_q8_0_shared, gc_q6k_shared, 4 warps a tile) each warp's
 * stages of 16 rows of the vector engine's pitch, one a round (256 values)
 * it takes up to 3, then x as f16 pairs with their sums (ggmlGcXBytes).
 */
export function ggmlGcSharedBytes(type: 'Q4_K' | 'Q8_0' | 'Q6_K', k: number): number {
  if (type === 'Q4_K') return k * 2 + (k / 32) * 4 + 1024;
  const rounds = Math.ceil(k / 256);
  const stages = Math.min(GGML_MV_CUDA_STAGES, Math.ceil(rounds / GGML_MV_CUDA_WARPS));
  return GGML_MV_CUDA_WARPS * stages * GGML_MV_CUDA_ROWS * ggmlMvCudaStageRow(type) + ggmlGcXBytes(type, k);
}
/** The Q8_0 and Q6_K engines' shared memory past their stages: x as f16 with a sum a block of 32 (Q8_0, whole rounds of 256) or a group of 16 (Q6_K), 320 bytes. */
const ggmlGcXBytes = (type: 'Q8_0' | 'Q6_K', k: number): number =>
  (type === 'Q8_0' ? Math.ceil(k / 256) * 8 * 68 : k * 2 + k / 4) + 320;
/**
 * Whether kernel_mul_mv_<q4_K|q8_0|q6_K>_f32 take a group-column engine:
 * one token, x's copy within GC_MAX_SHARED, and for Q6_K a grid of at most
 * GC_Q6_MAX_BLOCKS blocks (the kernels decide alike: gc_q4k_takes,
 * gc_q8_0_takes, gc_q6k_takes). Q4_K's kernel also keeps the
 * vector engine for a weight or x not 16-byte aligned, so its launch holds
 * the larger of both engines' shared memory; the Q8_0 and Q6_K engines read
 * any alignment their rows have and their launches hold their own. The
 * grid is the vector engine's (4 warps a 16-row tile).
 */
export function ggmlGcTakes(type: GgmlQuantType, m: number, k: number, blocks: number): type is 'Q4_K' | 'Q8_0' | 'Q6_K' {
  if (m !== 1) return false;
  if (type === 'Q4_K') return ggmlGcSharedBytes(type, k) <= GC_MAX_SHARED;
  if (type === 'Q6_K' && blocks > GC_Q6_MAX_BLOCKS) return false;
  return (type === 'Q8_0' || type === 'Q6_K') && ggmlGcXBytes(type, k) <= GC_MAX_SHARED;
}
/**
 * The grid (blocks of the vector launch) past which Q6_K keeps the vector
 * engine (common.cuh GC_Q6_MAX_BLOCKS): its group-column engine spends more
 * instructions a byte than the others, and over a 605 MB output projection
 * (16384 blocks) the vector engine ran faster on an H100 (360 against 404
 * us), while at 128 and 1024 blocks it ran 16 % and 2 % slower
 * (bench/results/ggml-gc-q8-h100-2026-11-27.md).
 */
export const GC_Q6_MAX_BLOCKS = 2048;

/** Blocks an SM of the int8 entries (their launch bounds: 256 threads, 2 blocks; quantized_matmul_id_ggml's _i8 too). */
export const GGML_I8_BLOCKS_PER_SM = 2;
/**
 * Whether one token of Q6_K runs the int8 engine's grouped entry
 * (kernel_mul_mv_q6_K_f32_i8g: a super-block a group of 8 lanes, 4 rows a
 * warp): past GC_Q6_MAX_BLOCKS tiles of 16 rows. On an H200 it runs the
 * 262144- and 248320-row output projections in 273 and 190 us against 342
 * and 235 for kernel_mul_mv_q6_K_f32_i8's item (bench/results/gguf-q6-diet-h200-2026-11-29.md);
 * at 17408 rows (2.1 units of 32 rows a block) it ran 49 against 44, and at
 * 2048 rows (64 blocks) 11.8 against 7.1, before both items' codes went
 * unsigned (bench/notes/gguf-q6-group-2026-11-28.md).
 */
const ggmlI8Grouped = (type: GgmlQuantType, n: number): boolean => type === 'Q6_K' && ceilDiv(n, GGML_MV_CUDA_ROWS) > GC_Q6_MAX_BLOCKS;
/** Rows a warp of an int8 entry: 4 for the grouped one, else 1. */
const ggmlI8Rows = (type: GgmlQuantType, n: number): number => (ggmlI8Grouped(type, n) ? 4 : 1);
/** The int8 engine's shared memory at one token: x as int8, a {scale, sum} pair a chunk of 32, the warps' 2 x 8 x rows x 8 floats. */
export const ggmlI8SharedBytes = (type: GgmlQuantType, n: number, k: number): number => ggmlI8SharedBytesOf(k, ggmlI8Rows(type, n));
/** The int8 engine's shared memory at one token for `rows` rows a warp (common.cuh i8_mv). */
export const ggmlI8SharedBytesOf = (k: number, rows: number): number => k + (k / 32) * 8 + 2 * 8 * rows * 8 * 4;
/**
 * Whether the op launches one token's product as kernel_mul_mv_<t>_f32's
 * int8 entries (kernel_mul_mv_<t>_f32_i8, and Q6_K's _i8g past
 * GC_Q6_MAX_BLOCKS tiles; shaders/cuda/quantized_matmul_ggml.cu): Q8_0 and
 * Q6_K at every size whose x's copy fits GC_MAX_SHARED. On an H200 the Q8_0
 * entry ran 9-17 % faster than the group-column engine from [1024, 2048] to
 * [262144, 2816] (bench/results/gguf-i8-break-h200-2026-11-28.md). x is
 * rounded to int8 a chunk of 32 values (a scale max |x| / 127 each), as
 * llama.cpp's vector products round it.
 */
export function ggmlI8Takes(type: GgmlQuantType, m: number, n: number, k: number): boolean {
  if (m !== 1 || ggmlI8SharedBytes(type, n, k) > GC_MAX_SHARED) return false;
  return type === 'Q8_0' || type === 'Q6_K';
}

/**
 * Whether one token of Q4_K runs kernel_mul_mv_q4_K_f32_gc8 (the
 * group-column engine with 8 warps a 16-row tile, a tile a block of 256
 * threads) instead of the 4 warps a tile of kernel_mul_mv_q4_K_f32: where
 * the engine takes the product (ggmlGcTakes), its tiles number at most
 * GC8_TILES_PER_SM a multiprocessor (the entry's blocks an SM: all resident
 * at once) and k holds at least 8 super-blocks (a round of loads for every
 * warp). At Gemma 4's attention output [2816, 4096] (176 tiles) on an H200
 * it took 4.1 us with its weights out of L2, against 8.1 for 4 warps a tile,
 * whose 176 blocks left 5 warps an SM (bench/results/q4k-gc8-h200-2026-11-29.md).
 * Unknown SMs (0: Metal, the emulator): false.
 */
export function ggmlGc8Takes(type: GgmlQuantType, m: number, n: number, k: number, limits: Pick<DeviceLimits, 'multiprocessors'>): type is 'Q4_K' {
  return m === 1 && gc8Fits(type, ceilDiv(n, GGML_MV_CUDA_ROWS), k, limits);
}
/** Blocks an SM of the 8-warp Q4_K entries (their launch bounds: 256 threads, 2 blocks). */
export const GC8_TILES_PER_SM = 2;
/**
 * What both 8-warp Q4_K entries ask of one token's product of `tiles` tiles
 * (a tile a block): see ggmlGc8Takes (quantized_matmul_id_ggml's
 * ggmlIdGc8Takes counts the pairs' tiles together).
 */
export function gc8Fits(type: GgmlQuantType, tiles: number, k: number, limits: Pick<DeviceLimits, 'multiprocessors'>): type is 'Q4_K' {
  return type === 'Q4_K' && limits.multiprocessors > 0 && tiles <= GC8_TILES_PER_SM * limits.multiprocessors && k >= 8 * 256
    && ggmlGcTakes(type, 1, k, tiles);
}

/** The CUDA shared memory of a one-token vector launch (both forms) of `blocks` blocks: a group-column engine's where it takes the product. */
export function ggmlMvCudaShared(type: GgmlQuantType, m: number, k: number, blocks: number): number {
  if (!ggmlGcTakes(type, m, k, blocks)) return ggmlMvCudaSharedBytes(type);
  return type === 'Q4_K' ? Math.max(ggmlMvCudaSharedBytes(type), ggmlGcSharedBytes(type, k)) : ggmlGcSharedBytes(type, k);
}

/** Slices of k a split matrix product takes at most. */
export const GGML_SPLIT_MAX = 16;
/** Chunks of 32 values a slice of k takes at least (a K super-block): its walk's first loads and its partial's reduction cost a slice alike. */
export const GGML_SPLIT_MIN_CHUNKS = 8;
/**
 * Values of k under which the matrix form is not split: on an H100 at 64
 * tokens, k 512 unsplit (16 steps) ran 19.7 us and in two slices 21.2; k
 * 2048 in eight ran 4x faster than unsplit. 1024, between them, is not
 * measured (bench/results/prompt-splitk-h100-2026-11-27.md).
 */
export const GGML_SPLIT_MIN_K = 1024;

/**
 * How the CUDA matrix form splits k (kernel_mul_mm_<t>_f32_splitk), or null
 * where it does not: where its tiles (ggmlMmCudaTile) number fewer than the
 * multiprocessors and k is at least GGML_SPLIT_MIN_K, S = min(floor(SMs /
 * tiles), chunks of 32 / 8, GGML_SPLIT_MAX, the slices whose partials [S,
 * m, n] f32 the scratch holds) slices when that is 2 or more, each `chunks`
 * runs of 32 values of k (the last what is left; none empty), so the tiles
 * x S blocks fill at most one block an SM. Each block walks a slice as the
 * unsplit form walks the whole k: at 64 tokens a [2048, 2048] Q4_K product
 * ran 16 blocks for 118 us unsplit and 128 in 8 slices for 28 us on an H100
 * (bench/results/prompt-splitk-h100-2026-11-27.md). Unknown SMs (0: Metal,
 * the emulator): null.
 */
export function ggmlMatmulSplit(m: number, n: number, k: number, multiprocessors: number, scratchElements: number):
  { splits: number; chunks: number } | null {
  if (!(multiprocessors > 0) || k < GGML_SPLIT_MIN_K) return null;
  const t = ggmlMmCudaTile(m, n);
  const tiles = ceilDiv(n, t.bn) * ceilDiv(m, t.bm);
  const kt = k / 32;
  const s = Math.min(Math.floor(multiprocessors / tiles), Math.floor(kt / GGML_SPLIT_MIN_CHUNKS), GGML_SPLIT_MAX, Math.floor(scratchElements / (m * n)));
  if (!(s >= 2)) return null;
  const chunks = ceilDiv(kt, s);
  return { splits: ceilDiv(kt, chunks), chunks };
}

/**
 * The f32 elements of scratch with which quantized_matmul_ggml's matrix
 * form splits k as far as it would on a device of these limits (splits x m
 * x n; 0 where it does not split): what a caller sizes its scratch by.
 */
export function quantizedMatmulGgmlScratchElements(m: number, n: number, k: number, limits: Pick<DeviceLimits, 'multiprocessors'>): number {
  const sp = ggmlMatmulSplit(m, n, k, limits.multiprocessors, Infinity);
  return sp === null ? 0 : sp.splits * m * n;
}

/** Tokens from which the vector form runs its `_xs` entry (x staged once a block of 64 rows: gmv_xs). */
export const GGML_MV_XS_MIN_TOKENS = 2;
/** Weight rows a block of the `_xs` entries takes (4 warps of 16). */
const GGML_MV_XS_ROWS = 64;
/** The `_xs` entries' shared memory: the vector engine's stages, then two windows of x for 8 tokens (144 words each). */
export function ggmlMvXsSharedBytes(type: GgmlQuantType): number {
  return GGML_MV_CUDA_WARPS * GGML_MV_CUDA_STAGES * GGML_MV_CUDA_ROWS * ggmlMvCudaStageRow(type) + 2 * 8 * 144 * 4;
}

/**
 * The CUDA launch of the vector or matrix kernel at these sizes: for one
 * token where ggmlI8Takes, the int8 entry on a grid of a block a unit of 8
 * warps' rows (one a warp, 4 for `_i8g`) up to 2 an SM (the SMs of
 * `limits`; all the units where unknown);
 * from GGML_MV_XS_MIN_TOKENS tokens the `_xs` entry, a block of 128
 * threads a 64-row tile.
 */
export function ggmlMatmulCudaLaunch(type: GgmlQuantType, form: 'vector' | 'matrix', m: number, n: number, k: number,
  limits: Pick<DeviceLimits, 'multiprocessors'> = { multiprocessors: 0 }): CudaLaunch {
  if (form === 'vector' && ggmlI8Takes(type, m, n, k)) {
    const units = ceilDiv(n, 8 * ggmlI8Rows(type, n));
    return {
      grid: [limits.multiprocessors > 0 ? Math.min(units, GGML_I8_BLOCKS_PER_SM * limits.multiprocessors) : units, 1, 1],
      threads: [256, 1, 1], threadgroupMemory: { 0: ggmlI8SharedBytes(type, n, k) },
      entry: `kernel_mul_mv_${GGML_KERNEL_TYPE[type]}_f32_${ggmlI8Grouped(type, n) ? 'i8g' : 'i8'}`,
    };
  }
  if (form === 'vector' && m >= GGML_MV_XS_MIN_TOKENS) {
    return {
      grid: [ceilDiv(n, GGML_MV_XS_ROWS), 1, 1], threads: [128, 1, 1], threadgroupMemory: { 0: ggmlMvXsSharedBytes(type) },
      entry: `kernel_mul_mv_${GGML_KERNEL_TYPE[type]}_f32_xs`,
    };
  }
  if (form === 'vector' && ggmlGc8Takes(type, m, n, k, limits)) {
    return {
      grid: [ceilDiv(n, GGML_MV_CUDA_ROWS), 1, 1], threads: [256, 1, 1], threadgroupMemory: { 0: ggmlGcSharedBytes(type, k) },
      entry: 'kernel_mul_mv_q4_K_f32_gc8',
    };
  }
  if (form === 'vector') {
    const blocks = ceilDiv(n, GGML_MV_CUDA_ROWS);
    return { grid: [blocks, 1, 1], threads: [128, 1, 1], threadgroupMemory: { 0: ggmlMvCudaShared(type, m, k, blocks) } };
  }
  const t = ggmlMmCudaTile(m, n);
  return { grid: [ceilDiv(n, t.bn) * ceilDiv(m, t.bm), 1, 1], threads: [t.threads, 1, 1], threadgroupMemory: { 0: t.sharedBytes } };
}

/**
 * The launch of a dequantization or embedding kernel over `rows` rows of
 * `len` values: Metal a chunk of 16 values a thread, (ceil(len / 16 / tg),
 * rows, 1) threadgroups of tg = min(256, len / 16); CUDA chunksCudaLaunch.
 */
function chunksLaunch(len: number, rows: number, limits: DeviceLimits): Pick<PlannedDispatch, 'grid' | 'threads' | 'cuda'> {
  const chunks = len / 16;
  const tg = Math.min(256, chunks, limits.maxThreadsPerThreadgroup);
  return { grid: [ceilDiv(chunks, tg), rows, 1], threads: [tg, 1, 1], cuda: chunksCudaLaunch((rows * len) / 32) };
}

// ---- quantized_matmul_ggml ----

export interface QuantizedMatmulGgmlArgs {
  /** [m, k] f32 */
  input: Buffer;
  /** u8: n rows of k / QK blocks of ggmlType (a GGUF tensor's bytes, e.g. a view of uploadPacked) */
  weight: Buffer;
  /** [m, n] f32, output */
  output: Buffer;
  /** Rows of the input (tokens). */
  m: number;
  /** Rows of the weight (outputs). */
  n: number;
  /** Columns of the input and of the weight (inputs): a multiple of the block (32 for Q4_0 and Q8_0, 256 for the K formats). */
  k: number;
  /** The weight's block format (a GGUF TensorInfo's dtype). */
  ggmlType: GgmlQuantType;
  /** The vector or the matrix kernel; by default mlx-native's routing: the vector form for m <= 8. */
  form?: MatmulForm;
  /**
   * f32 working memory, at least m * n elements, for the matrix form's
   * partial sums where it splits k across blocks (CUDA, where its tiles
   * leave multiprocessors idle: ggmlMatmulSplit, as many slices as the
   * scratch holds, quantizedMatmulGgmlScratchElements the most it takes);
   * absent, k is never split. Its contents before and after are not read.
   */
  scratch?: Buffer;
}

/**
 * mlx-native's rules: a supported type; m, k, n > 0; k a multiple of the
 * block; the weight at least n rows of blocks, the input at least m * k and
 * the output at least m * n floats. With the int32 fields of the matrix
 * params (m, n, k below 2^31), dtypes (f32 input and output, u8 weight), the
 * CUDA grid and no aliasing.
 */
export function validateQuantizedMatmulGgml(a: QuantizedMatmulGgmlArgs, device?: Device): void {
  const op = 'quantized_matmul_ggml';
  checkGgmlType(op, 'ggmlType', a.ggmlType);
  for (const arg of ['m', 'k', 'n'] as const) {
    checkPositive(op, arg, a[arg]);
    checkAtMost(op, arg, a[arg], I32_MAX, '2^31 - 1');
  }
  const { qk, bytes } = ggmlBlockOf(a.ggmlType);
  checkMultiple(op, 'k', a.k, qk, `${a.ggmlType}'s block`);
  checkMatmulForm(op, a.form, a.m);
  const nx = checkedProduct(op, 'm * k', a.m, a.k);
  const nw = checkedProduct(op, 'n * k / QK * block bytes', a.n, a.k / qk, bytes);
  const ny = checkedProduct(op, 'm * n', a.m, a.n);
  if (ceilDiv(a.m, 64) * ceilDiv(a.n, 128) > CUDA_GRID_MAX) {
    throw invalid(op, 'm', `at most ${Math.floor(CUDA_GRID_MAX / ceilDiv(a.n, 128)) * 64} for n = ${a.n} (the CUDA grid's 2^31 - 1 blocks)`, a.m);
  }
  const rules: BufferRule[] = [
    ['input', a.input, 'f32', nx], ['weight', a.weight, 'u8', { bytes: nw, of: `${a.n} rows of ${ggmlRowBytesOf(a.ggmlType, a.k)} bytes of ${a.ggmlType}` }],
    ['output', a.output, 'f32', ny], ['scratch', a.scratch, 'f32', ny, true],
  ];
  checkBufferRules(op, rules, device, true);
  checkNoAliasing(op, ruleBindings(rules), ['output', 'scratch'], 'every output reads a row of the input and of the weight that others read too');
}

/** The form an argument set runs: mlx-native's routing (the matrix form past 8 rows of input) unless one is asked for. */
export function quantizedMatmulGgmlForm(a: Pick<QuantizedMatmulGgmlArgs, 'm' | 'form'>): MatmulForm {
  return matmulForm(a, GGML_MM_ROUTING_THRESHOLD);
}

/** The Metal launch of the vector kernels (mlx-native's): 8 rows a threadgroup of (8, 8, 1) for Q4_0 and Q8_0, 2 of (2, 32, 1) for the K formats. */
export function ggmlMvMetalLaunch(type: GgmlQuantType, m: number, n: number): Launch {
  const small = type === 'Q4_0' || type === 'Q8_0';
  return { grid: [ceilDiv(n, small ? 8 : 2), m, 1], threads: small ? [8, 8, 1] : [2, 32, 1] };
}

/**
 * quantized_matmul_ggml (mlx-native's): output[i, j] = sum_k input[i, k] *
 * w[j, k], w dequantized from the weight's GGML blocks (the file comment),
 * f32 input and output.
 *
 * Numerics: Metal's vector kernels sum f32 products of the weight dequantized
 * in f32; its matrix kernels stage the weight as f16 (llama.cpp's tile) and
 * x as f32. CUDA's tensor cores take both in f16 (the weight w = a q + b
 * from a and b rounded to f16, the product rounded once; x rounded), summed
 * in f32; one token of Q8_0 or Q6_K where ggmlI8Takes: x rounded to int8 a
 * chunk of 32 values (scale max |x| / 127), the codes' products summed in
 * int32 (dp4a) and scaled in f32, as llama.cpp's vector products.
 *
 * Rules: mlx-native's (validateQuantizedMatmulGgml). Kernels:
 * kernel_mul_mv_<t>_f32 (the vector form) and kernel_mul_mm_<t>_f32 (the
 * matrix form), t = q4_0, q8_0, q4_K, q5_K, q6_K.
 * Bindings, vector form: 0 weight, 1 input, 2 output, 3 GgmlMatvecParams
 * (ne00 = ne10 = k, ne01 = ne0 = n, ne1 = m; batch fields 1). Matrix form:
 * 0 GgmlMatmulMmParams (ne00 k, nb01 the bytes of a weight row, nb11 of an
 * input row, ne0 n, ne1 m), 1 weight, 2 input, 3 output; threadgroup(0)
 * 8192 bytes. Split k (kernel_mul_mm_<t>_f32_splitk, given a scratch, on
 * CUDA where ggmlMatmulSplit splits): the matrix form's bindings, then 4
 * scratch (the slices' partials), 5 a word a tile of the encoder's
 * (Encoder._syncWords), 6 GgmlMatmulSplitParams; tiles x S blocks, the
 * tile's last block to arrive summing its S partials in slice order, so
 * the result does not depend on which arrives last.
 * Grid (Metal, the crate's): vector (ceil(n / 8), m, 1) threadgroups of
 * (8, 8, 1) for Q4_0 and Q8_0, (ceil(n / 2), m, 1) of (2, 32, 1) for the K
 * formats; matrix (ceil(m / 32), ceil(n / 64), 1) of 128 threads, a 32 x 64
 * tile each. CUDA: ggmlMatmulCudaLaunch (the vector engine, 16 weight rows a
 * block of 128 threads, or for one token of Q8_0 or Q6_K the int8 entries
 * kernel_mul_mv_<t>_f32_i8 / kernel_mul_mv_q6_K_f32_i8g on a persistent
 * grid of 256-thread blocks, or
 * from 2 tokens kernel_mul_mv_<t>_f32_xs, 64 rows a block with x staged
 * once a block; the matrix engine's tiles).
 */
export function quantizedMatmulGgml(enc: Encoder, args: QuantizedMatmulGgmlArgs): void {
  record(enc, planQuantizedMatmulGgml(args, enc.device.limits, enc.device));
}

/** quantizedMatmulGgml's plan: validates, then one dispatch (see quantizedMatmulGgml). */
export function planQuantizedMatmulGgml(a: QuantizedMatmulGgmlArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateQuantizedMatmulGgml(a, device);
  const t = GGML_KERNEL_TYPE[a.ggmlType];
  const form = quantizedMatmulGgmlForm(a);
  const split = form === 'matrix' && a.scratch !== undefined ? ggmlMatmulSplit(a.m, a.n, a.k, limits.multiprocessors, a.scratch.elementCount) : null;
  if (split !== null) {
    const launch = ggmlMatmulCudaLaunch(a.ggmlType, 'matrix', a.m, a.n, a.k);
    const tiles = launch.grid[0];
    return planOf({
      kernel: `kernel_mul_mm_${t}_f32_splitk`,
      buffers: [, a.weight, a.input, a.output, a.scratch],
      bytes: [packGgmlMatmulMmParams(a), , , , , , packGgmlMatmulSplitParams(split)],
      syncWords: { binding: 5, count: tiles },
      threadgroupMemory: [GGML_MM_SHARED_BYTES],
      grid: [ceilDiv(a.m, 32), ceilDiv(a.n, 64), 1],
      threads: [128, 1, 1],
      cuda: { ...launch, grid: [tiles * split.splits, 1, 1] },
    });
  }
  const dispatch: PlannedDispatch = form === 'vector'
    ? {
      kernel: `kernel_mul_mv_${t}_f32`,
      buffers: [a.weight, a.input, a.output],
      bytes: [, , , packGgmlMatvecParams(a)],
      ...ggmlMvMetalLaunch(a.ggmlType, a.m, a.n),
      cuda: ggmlMatmulCudaLaunch(a.ggmlType, 'vector', a.m, a.n, a.k, limits),
    }
    : {
      kernel: `kernel_mul_mm_${t}_f32`,
      buffers: [, a.weight, a.input, a.output],
      bytes: [packGgmlMatmulMmParams(a)],
      threadgroupMemory: [GGML_MM_SHARED_BYTES],
      grid: [ceilDiv(a.m, 32), ceilDiv(a.n, 64), 1],
      threads: [128, 1, 1],
      cuda: ggmlMatmulCudaLaunch(a.ggmlType, 'matrix', a.m, a.n, a.k),
    };
  return planOf(dispatch);
}

// ---- ggml_dequantize ----

export interface GgmlDequantizeArgs {
  /** u8: count / QK blocks of ggmlType (a whole tensor's bytes, rows back to back) */
  src: Buffer;
  /** [count] f32, f16 or bf16, output */
  output: Buffer;
  /** Values: a multiple of the block. */
  count: number;
  ggmlType: GgmlQuantType;
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateGgmlDequantize(a: GgmlDequantizeArgs, device?: Device): void {
  const op = 'ggml_dequantize';
  checkGgmlType(op, 'ggmlType', a.ggmlType);
  checkPositive(op, 'count', a.count);
  const { qk, bytes } = ggmlBlockOf(a.ggmlType);
  checkMultiple(op, 'count', a.count, qk, `${a.ggmlType}'s block`);
  checkAtMost(op, 'count', a.count, 16 * U32_MAX, '16 x (2^32 - 1), chunks of 16 counted in 32 bits');
  const nb = checkedProduct(op, 'count / QK * block bytes', a.count / qk, bytes);
  const rules: BufferRule[] = [['src', a.src, 'u8', nb], ['output', a.output, OUTPUT_DTYPES, a.count]];
  checkBufferRules(op, rules, device);
  checkNoAliasing(op, ruleBindings(rules), ['output'], 'the output is written while the blocks are read');
}

/**
 * ggml_dequantize (not in mlx-native, whose dequantization runs on the host,
 * src/gguf/mod.rs): output[i] = w_i, the count values of a tensor of GGML
 * blocks dequantized (the file comment) in f32 and rounded once to the
 * output's dtype.
 *
 * Layouts: src u8 [count / QK * block bytes]; output [count] f32, f16 or bf16.
 * Kernels: kernel_dequantize_<t>_<o>. Bindings: 0 src, 1 output, 2
 * GgmlDequantizeParams (n_chunks = count / 16).
 * Grid (Metal): (ceil(count / 16 / tg), 1, 1) threadgroups of tg = min(256,
 * count / 16), a chunk of 16 values each. CUDA: 256 threads a block, a chunk
 * of 32 values a thread, the grid striding over them.
 */
export function ggmlDequantize(enc: Encoder, args: GgmlDequantizeArgs): void {
  record(enc, planGgmlDequantize(args, enc.device.limits, enc.device));
}

/** ggmlDequantize's plan: validates, then one dispatch (see ggmlDequantize). */
export function planGgmlDequantize(a: GgmlDequantizeArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateGgmlDequantize(a, device);
  return planOf({
    kernel: `kernel_dequantize_${GGML_KERNEL_TYPE[a.ggmlType]}_${a.output.dtype}`,
    buffers: [a.src, a.output],
    bytes: [, , packGgmlDequantizeParams({ nChunks: a.count / 16 })],
    ...chunksLaunch(a.count, 1, limits),
  });
}

// ---- embedding rows from a table of blocks (the embedding op's quantized tables) ----

/** The embedding op's arguments with a table of GGML blocks (ts/ops/embedding.ts). */
export interface GgmlEmbeddingArgs extends EmbeddingArgs {
  tableType: GgmlQuantType;
  /** A multiple of the block. */
  hiddenSize: number;
}

/** The rules of the embedding op with a table of blocks; `op` names it in messages. */
export function validateGgmlEmbedding(a: GgmlEmbeddingArgs, device?: Device, op = 'embedding'): void {
  checkGgmlType(op, 'tableType', a.tableType);
  for (const [arg, v] of [['vocabSize', a.vocabSize], ['hiddenSize', a.hiddenSize], ['nTokens', a.nTokens]] as const) checkU32Count(op, arg, v);
  const { qk, bytes } = ggmlBlockOf(a.tableType);
  checkMultiple(op, 'hiddenSize', a.hiddenSize, qk, `${a.tableType}'s block`);
  if (a.scale !== undefined && (typeof a.scale !== 'number' || !Number.isFinite(a.scale))) {
    throw invalid(op, 'scale', 'a finite number or absent', a.scale);
  }
  const tableBytes = checkedProduct(op, 'vocabSize * hiddenSize / QK * block bytes', a.vocabSize, a.hiddenSize / qk, bytes);
  const outElems = checkedProduct(op, 'nTokens * hiddenSize', a.nTokens, a.hiddenSize);
  checkAtMost(op, 'nTokens * hiddenSize', outElems, 16 * U32_MAX, '16 x (2^32 - 1), chunks of 16 counted in 32 bits');
  const rules: BufferRule[] = [['table', a.table, 'u8', tableBytes], ['tokenIds', a.tokenIds, 'u32', a.nTokens], ['output', a.output, OUTPUT_DTYPES, outElems]];
  checkBufferRules(op, rules, device);
  checkNoAliasing(op, ruleBindings(rules), ['output'], 'every output row reads its id and any row of the table');
}

/**
 * The embedding op's plan for a table of blocks: output[i, j] =
 * w[min(tokenIds[i], vocabSize - 1), j] * scale, w dequantized in f32 (the
 * file comment), the product rounded once to the output's dtype.
 *
 * Kernels: embedding_gather_scale_batch_<t>_to_<o>. Bindings: 0 table, 1
 * tokenIds, 2 output, 3 GgmlEmbeddingParams (scale, hidden_size, n_tokens,
 * vocab_size). Grid (Metal): (ceil(hiddenSize / 16 / tg), nTokens, 1)
 * threadgroups of tg = min(256, hiddenSize / 16), a chunk of 16 values a
 * thread. CUDA: 256 threads a block, a chunk of 32 a thread, the grid
 * striding over them.
 */
export function planGgmlEmbedding(a: GgmlEmbeddingArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateGgmlEmbedding(a, device);
  return planOf({
    kernel: `embedding_gather_scale_batch_${GGML_KERNEL_TYPE[a.tableType]}_to_${a.output.dtype}`,
    buffers: [a.table, a.tokenIds, a.output],
    bytes: [, , , packGgmlEmbeddingParams({ scale: a.scale ?? 1, hiddenSize: a.hiddenSize, nTokens: a.nTokens, vocabSize: a.vocabSize })],
    ...chunksLaunch(a.hiddenSize, a.nTokens, limits),
  });
}

// ---- the float64 reference ----

// CPU reference of the quantized_matmul_ggml family: llama.cpp's reference
// quantizers (ggml-quants.c, quantize_row_<t>_ref) for Q4_0, Q8_0, Q4_K, Q5_K
// and Q6_K in float32 arithmetic, the float64 dequantization of each block
// layout, and dequantize-then-multiply. The layouts are written down in
// ts/ops/quantized_matmul_ggml.ts.

const f = Math.fround;
const half = (x: number): number => f16BitsToF32(f32ToF16Bits(x));

/** C's float-to-int rounding of nearest_int (round half to even), on an f32 value. */
function nearestInt(x: number): number {
  const r = Math.round(x);
  return Math.abs(x - Math.trunc(x)) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** roundf: half away from zero. */
const roundAway = (x: number): number => Math.sign(x) * Math.floor(Math.abs(x) + 0.5);

const clamp = (v: number, lo: number, hi: number): number => Math.max(lo, Math.min(hi, v));

/** Writes the f16 bits of x (rounded to nearest even) at byte i of b, little-endian. */
function putHalf(b: Uint8Array, i: number, x: number): void {
  const h = f32ToF16Bits(x);
  b[i] = h & 0xff;
  b[i + 1] = h >> 8;
}

const getHalf = (b: Uint8Array, i: number): number => f16BitsToF32(b[i]! | (b[i + 1]! << 8));

// ---- the reference quantizers (llama.cpp's quantize_row_<t>_ref) ----

/** Q4_0: d = max / -8 (max the value of largest magnitude), q = min(15, trunc(x / d + 8.5)). */
function quantizeQ4_0(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  let amax = 0;
  let max = 0;
  for (let j = 0; j < 32; j++) {
    const v = f(x[at + j]!);
    if (amax < Math.abs(v)) {
      amax = Math.abs(v);
      max = v;
    }
  }
  const d = f(max / -8);
  const id = d !== 0 ? f(1 / d) : 0;
  putHalf(out, o, d);
  for (let j = 0; j < 16; j++) {
    const x0 = f(f(x[at + j]!) * id);
    const x1 = f(f(x[at + 16 + j]!) * id);
    const q0 = Math.min(15, Math.trunc(f(x0 + 8.5)));
    const q1 = Math.min(15, Math.trunc(f(x1 + 8.5)));
    out[o + 2 + j] = q0 | (q1 << 4);
  }
}

/** Q8_0: d = amax / 127, q = roundf(x / d). */
function quantizeQ8_0(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  let amax = 0;
  for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(f(x[at + j]!)));
  const d = f(amax / 127);
  const id = d !== 0 ? f(1 / d) : 0;
  putHalf(out, o, d);
  for (let j = 0; j < 32; j++) out[o + 2 + j] = roundAway(f(f(x[at + j]!) * id)) & 0xff;
}

/**
 * make_qkx2_quants: the scale and min (returned as -min, >= 0) of n values
 * with weights w, q in [0, nmax], searching nstep + 1 scales around the
 * min-max one for the least weighted squared error. L receives the q.
 */
function makeQkx2(n: number, nmax: number, x: Float32Array, w: Float32Array, L: Uint8Array, rmin: number, rdelta: number,
  nstep: number): { scale: number; min: number } {
  let min = x[0]!;
  let max = x[0]!;
  let sumW = w[0]!;
  let sumX = f(sumW * x[0]!);
  for (let i = 1; i < n; i++) {
    if (x[i]! < min) min = x[i]!;
    if (x[i]! > max) max = x[i]!;
    sumW = f(sumW + w[i]!);
    sumX = f(sumX + f(w[i]! * x[i]!));
  }
  if (min > 0) min = 0;
  if (max === min) {
    L.fill(0, 0, n);
    return { scale: 0, min: -min };
  }
  let iscale = f(nmax / f(max - min));
  let scale = f(1 / iscale);
  let bestError = 0;
  for (let i = 0; i < n; i++) {
    L[i] = clamp(nearestInt(f(iscale * f(x[i]! - min))), 0, nmax);
    const diff = f(f(f(scale * L[i]!) + min) - x[i]!);
    bestError = f(bestError + f(w[i]! * f(diff * diff)));
  }
  const aux = new Uint8Array(n);
  for (let is = 0; is <= nstep; is++) {
    iscale = f(f(f(rmin + f(rdelta * is)) + nmax) / f(max - min));
    let sumL = 0;
    let sumL2 = 0;
    let sumXL = 0;
    for (let i = 0; i < n; i++) {
      const l = clamp(nearestInt(f(iscale * f(x[i]! - min))), 0, nmax);
      aux[i] = l;
      const wl = f(w[i]! * l);
      sumL = f(sumL + wl);
      sumL2 = f(sumL2 + f(wl * l));
      sumXL = f(sumXL + f(wl * x[i]!));
    }
    const D = f(f(sumW * sumL2) - f(sumL * sumL));
    if (D > 0) {
      let thisScale = f(f(f(sumW * sumXL) - f(sumX * sumL)) / D);
      let thisMin = f(f(f(sumL2 * sumX) - f(sumL * sumXL)) / D);
      if (thisMin > 0) {
        thisMin = 0;
        thisScale = f(sumXL / sumL2);
      }
      let curError = 0;
      for (let i = 0; i < n; i++) {
        const diff = f(f(f(thisScale * aux[i]!) + thisMin) - x[i]!);
        curError = f(curError + f(w[i]! * f(diff * diff)));
      }
      if (curError < bestError) {
        L.set(aux.subarray(0, n));
        bestError = curError;
        scale = thisScale;
        min = thisMin;
      }
    }
  }
  return { scale, min: -min };
}

/** The 6-bit scale and min of sub-block j (0-7) from the 12 packed bytes at s[o] (get_scale_min_k4). */
export function scaleMinK4(s: Uint8Array, o: number, j: number): { sc: number; m: number } {
  if (j < 4) return { sc: s[o + j]! & 63, m: s[o + j + 4]! & 63 };
  return { sc: (s[o + j + 4]! & 0xf) | ((s[o + j - 4]! >> 6) << 4), m: (s[o + j + 4]! >> 4) | ((s[o + j]! >> 6) << 4) };
}

/**
 * Q4_K (nmax 15) and Q5_K (nmax 31): per sub-block of 32, make_qkx2 with
 * weights av_x + |x|; the 8 scales and mins quantized to 6 bits against
 * their maxima (d = max_scale / 63, dmin = max_min / 63) and packed into 12
 * bytes at o + 4; then each value requantized against the stored scale and
 * min. Returns L (q per value) for the caller to pack.
 */
function quantizeK45(x: ArrayLike<number>, at: number, out: Uint8Array, o: number, nmax: number, rmin: number, rdelta: number,
  nstep: number): Uint8Array {
  const L = new Uint8Array(256);
  const scales = new Float32Array(8);
  const mins = new Float32Array(8);
  const xs = new Float32Array(32);
  const w = new Float32Array(32);
  let maxScale = 0;
  let maxMin = 0;
  for (let j = 0; j < 8; j++) {
    let sumX2 = 0;
    for (let l = 0; l < 32; l++) {
      xs[l] = f(x[at + 32 * j + l]!);
      sumX2 = f(sumX2 + f(xs[l]! * xs[l]!));
    }
    const avX = f(Math.sqrt(f(sumX2 / 32)));
    for (let l = 0; l < 32; l++) w[l] = f(avX + Math.abs(xs[l]!));
    const r = makeQkx2(32, nmax, xs, w, L.subarray(32 * j, 32 * j + 32), rmin, rdelta, nstep);
    scales[j] = r.scale;
    mins[j] = r.min;
    if (r.scale > maxScale) maxScale = r.scale;
    if (r.min > maxMin) maxMin = r.min;
  }
  const invScale = maxScale > 0 ? f(63 / maxScale) : 0;
  const invMin = maxMin > 0 ? f(63 / maxMin) : 0;
  const s = o + 4;
  for (let j = 0; j < 12; j++) out[s + j] = 0;
  for (let j = 0; j < 8; j++) {
    const ls = Math.min(63, nearestInt(f(invScale * scales[j]!)) & 0xff);
    const lm = Math.min(63, nearestInt(f(invMin * mins[j]!)) & 0xff);
    if (j < 4) {
      out[s + j] = ls;
      out[s + j + 4] = lm;
    } else {
      out[s + j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
      out[s + j - 4]! |= (ls >> 4) << 6;
      out[s + j]! |= (lm >> 4) << 6;
    }
  }
  putHalf(out, o, f(maxScale / 63));
  putHalf(out, o + 2, f(maxMin / 63));
  const d = getHalf(out, o);
  const dmin = getHalf(out, o + 2);
  for (let j = 0; j < 8; j++) {
    const { sc, m } = scaleMinK4(out, s, j);
    const dj = f(d * sc);
    if (dj === 0) continue;
    const dm = f(dmin * m);
    for (let i = 0; i < 32; i++) L[32 * j + i] = clamp(nearestInt(f(f(f(x[at + 32 * j + i]!) + dm) / dj)), 0, nmax);
  }
  return L;
}

/** Q4_K: quantizeK45 with 4-bit q; qs[32 c + l] = q(64 c + l) | q(64 c + 32 + l) << 4. */
function quantizeQ4_K(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  const L = quantizeK45(x, at, out, o, 15, -1, f(0.1), 20);
  for (let c = 0; c < 4; c++) {
    for (let l = 0; l < 32; l++) out[o + 16 + 32 * c + l] = L[64 * c + l]! | (L[64 * c + 32 + l]! << 4);
  }
}

/** Q5_K: quantizeK45 with 5-bit q; the low 4 bits as Q4_K's at o + 48, bit 4 of value 32 s + l as bit s of qh[l] at o + 16. */
function quantizeQ5_K(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  const L = quantizeK45(x, at, out, o, 31, -0.5, f(0.1), 15);
  for (let l = 0; l < 32; l++) out[o + 16 + l] = 0;
  for (let c = 0; c < 4; c++) {
    for (let l = 0; l < 32; l++) {
      const lo = L[64 * c + l]!;
      const hi = L[64 * c + 32 + l]!;
      out[o + 48 + 32 * c + l] = (lo & 0xf) | ((hi & 0xf) << 4);
      out[o + 16 + l]! |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
    }
  }
}

/**
 * make_qx_quants with rmse_type 1 and no weights: the scale of n values
 * with q in [-nmax, nmax - 1] (L holds q + nmax), the best of 19 scales
 * around -nmax / max by the error weighted by x^2.
 */
function makeQx(n: number, nmax: number, x: Float32Array, L: Int8Array): number {
  let max = 0;
  let amax = 0;
  for (let i = 0; i < n; i++) {
    const ax = Math.abs(x[i]!);
    if (ax > amax) {
      amax = ax;
      max = x[i]!;
    }
  }
  if (amax < 1e-15) {
    L.fill(0, 0, n);
    return 0;
  }
  const sums = (iscale: number): { sumlx: number; suml2: number } => {
    let sumlx = 0;
    let suml2 = 0;
    for (let i = 0; i < n; i++) {
      const l = clamp(nearestInt(f(iscale * x[i]!)), -nmax, nmax - 1);
      const w = f(x[i]! * x[i]!);
      sumlx = f(sumlx + f(f(w * x[i]!) * l));
      suml2 = f(suml2 + f(f(w * l) * l));
    }
    return { sumlx, suml2 };
  };
  const fill = (iscale: number): void => {
    for (let i = 0; i < n; i++) L[i] = nmax + clamp(nearestInt(f(iscale * x[i]!)), -nmax, nmax - 1);
  };
  let iscale = f(-nmax / max);
  fill(iscale);
  const s0 = sums(iscale);
  let scale = s0.suml2 !== 0 ? f(s0.sumlx / s0.suml2) : 0;
  let best = f(scale * s0.sumlx);
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    iscale = f(-f(nmax + f(f(0.1) * is)) / max);
    const s = sums(iscale);
    if (s.suml2 > 0 && f(s.sumlx * s.sumlx) > f(best * s.suml2)) {
      fill(iscale);
      scale = f(s.sumlx / s.suml2);
      best = f(scale * s.sumlx);
    }
  }
  return scale;
}

/**
 * Q6_K: per sub-block of 16 a scale by make_qx (nmax 32); the 16 scales as
 * int8 against the largest (d = max_scale / -128); each value requantized
 * to q in [0, 63] against d * scale; packed as ql (low nibbles), qh (high
 * two bits), scales, d.
 */
function quantizeQ6_K(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  const L = new Int8Array(256);
  const scales = new Float32Array(16);
  const xs = new Float32Array(16);
  let maxScale = 0;
  let maxAbsScale = 0;
  for (let ib = 0; ib < 16; ib++) {
    for (let i = 0; i < 16; i++) xs[i] = f(x[at + 16 * ib + i]!);
    const scale = makeQx(16, 32, xs, L.subarray(16 * ib, 16 * ib + 16));
    scales[ib] = scale;
    if (Math.abs(scale) > maxAbsScale) {
      maxAbsScale = Math.abs(scale);
      maxScale = scale;
    }
  }
  out.fill(0, o, o + 210);
  if (maxAbsScale < 1e-15) return;
  const iscale = f(-128 / maxScale);
  putHalf(out, o + 208, f(1 / iscale));
  const d = getHalf(out, o + 208);
  const sc = new Int8Array(out.buffer, out.byteOffset + o + 192, 16);
  for (let ib = 0; ib < 16; ib++) sc[ib] = Math.min(127, nearestInt(f(iscale * scales[ib]!)));
  for (let j = 0; j < 16; j++) {
    const dj = f(d * sc[j]!);
    if (dj === 0) continue;
    for (let i = 0; i < 16; i++) L[16 * j + i] = clamp(nearestInt(f(f(x[at + 16 * j + i]!) / dj)), -32, 31) + 32;
  }
  for (let h = 0; h < 2; h++) {
    const ql = o + 64 * h;
    const qh = o + 128 + 32 * h;
    const v = 128 * h;
    for (let l = 0; l < 32; l++) {
      const [q1, q2, q3, q4] = [L[v + l]!, L[v + l + 32]!, L[v + l + 64]!, L[v + l + 96]!];
      out[ql + l] = (q1 & 0xf) | ((q3 & 0xf) << 4);
      out[ql + l + 32] = (q2 & 0xf) | ((q4 & 0xf) << 4);
      out[qh + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
    }
  }
}

const QUANTIZERS: Record<GgmlQuantType, (x: ArrayLike<number>, at: number, out: Uint8Array, o: number) => void> = {
  Q4_0: quantizeQ4_0, Q8_0: quantizeQ8_0, Q4_K: quantizeQ4_K, Q5_K: quantizeQ5_K, Q6_K: quantizeQ6_K,
};

/**
 * w [rows, k] (k a multiple of the block) quantized as llama.cpp's reference
 * quantizers do (quantize_row_<t>_ref, float32 arithmetic; w taken as f32):
 * rows of k / QK blocks, back to back, as a GGUF file stores the tensor.
 */
export function ggmlQuantize(type: GgmlQuantType, w: ArrayLike<number>, rows: number, k: number): Uint8Array {
  const { qk, bytes } = ggmlBlockOf(type);
  if (k % qk !== 0) throw new RangeError(`ggmlQuantize: k = ${k} is not a multiple of ${type}'s block of ${qk}`);
  const blocks = (rows * k) / qk;
  const out = new Uint8Array(blocks * bytes);
  for (let b = 0; b < blocks; b++) QUANTIZERS[type](w, b * qk, out, b * bytes);
  return out;
}

// ---- dequantization in float64, from the layouts ----

/** The values of one block at bytes[o] into w[at ..]. */
function dequantizeBlock(type: GgmlQuantType, b: Uint8Array, o: number, w: Float64Array, at: number): void {
  switch (type) {
    case 'Q4_0': {
      const d = getHalf(b, o);
      for (let j = 0; j < 16; j++) {
        w[at + j] = d * ((b[o + 2 + j]! & 0xf) - 8);
        w[at + 16 + j] = d * ((b[o + 2 + j]! >> 4) - 8);
      }
      return;
    }
    case 'Q8_0': {
      const d = getHalf(b, o);
      for (let j = 0; j < 32; j++) w[at + j] = d * ((b[o + 2 + j]! << 24) >> 24);
      return;
    }
    case 'Q4_K':
    case 'Q5_K': {
      const d = getHalf(b, o);
      const dmin = getHalf(b, o + 2);
      const five = type === 'Q5_K';
      const qs = o + (five ? 48 : 16);
      for (let s = 0; s < 8; s++) {
        const { sc, m } = scaleMinK4(b, o + 4, s);
        for (let l = 0; l < 32; l++) {
          let q = (b[qs + 32 * (s >> 1) + l]! >> (4 * (s & 1))) & 0xf;
          if (five) q |= ((b[o + 16 + l]! >> s) & 1) << 4;
          w[at + 32 * s + l] = d * sc * q - dmin * m;
        }
      }
      return;
    }
    case 'Q6_K': {
      const d = getHalf(b, o + 208);
      for (let v = 0; v < 256; v++) {
        const hh = v >> 7;
        const p = (v >> 5) & 3;
        const l = v & 31;
        const lo = (b[o + 64 * hh + 32 * (p & 1) + l]! >> (4 * (p >> 1))) & 0xf;
        const hi = (b[o + 128 + 32 * hh + l]! >> (2 * p)) & 3;
        const sc = (b[o + 192 + (v >> 4)]! << 24) >> 24;
        w[at + v] = d * sc * ((lo | (hi << 4)) - 32);
      }
      return;
    }
  }
}

/** The first `count` values (a multiple of the block) of a tensor of blocks, in float64. */
export function ggmlDequantizeRef(type: GgmlQuantType, bytes: Uint8Array, count: number): Float64Array {
  const { qk, bytes: bb } = ggmlBlockOf(type);
  if (count % qk !== 0) throw new RangeError(`ggmlDequantizeRef: ${count} values are not whole ${type} blocks of ${qk}`);
  const w = new Float64Array(count);
  for (let i = 0; i < count / qk; i++) dequantizeBlock(type, bytes, i * bb, w, i * qk);
  return w;
}

/**
 * y [m, n] = x [m, k] W^T with W [n, k] dequantized from its blocks
 * (ggmlDequantizeRef), in float64; and sum_k |x w| per output, the scale of
 * its rounding error.
 */
export function ggmlMatmulRef(type: GgmlQuantType, x: ArrayLike<number>, weight: Uint8Array, m: number, n: number, k: number):
  { y: Float64Array; abs: Float64Array } {
  const w = ggmlDequantizeRef(type, weight, n * k);
  return { y: denseRef(x, w, m, n, k), abs: denseAbsRef(x, w, m, n, k) };
}

/** out [ids.length, hidden] = rows min(id, vocab - 1) of the dequantized table, times scale, in float64. */
export function ggmlEmbeddingRef(type: GgmlQuantType, table: Uint8Array, ids: ArrayLike<number>, vocab: number, hidden: number,
  scale = 1): Float64Array {
  const rb = ggmlRowBytesOf(type, hidden);
  const out = new Float64Array(ids.length * hidden);
  for (let i = 0; i < ids.length; i++) {
    const id = Math.min(ids[i]!, vocab - 1);
    const row = ggmlDequantizeRef(type, table.subarray(id * rb, (id + 1) * rb), hidden);
    for (let j = 0; j < hidden; j++) out[i * hidden + j] = row[j]! * scale;
  }
  return out;
}
