// quantized_matmul: matrix products with weights in MLX's affine
// quantization, y = x W^T with W [n, k] packed as the mlx-community
// checkpoints (mlx.core.quantize) store it. Kernel names, bindings, the param
// struct and the validation rules of mlx-native's quantized_matmul module
// (quantized_matmul, quantized_matmul_simd, quantized_matmul_simd_bf16);
// quantized_mv_<t> and quantized_mm_<t>, the vector and matrix forms with x,
// scales, biases and y of one dtype (f32, f16 or bf16, as MLX's own
// quantized_matmul takes them), are added: the crate has bf16 scales only, no
// 6-bit fast path and no matrix form. Kernels: shaders/quantized_matmul.metal
// and shaders/cuda/quantized_matmul.cu.
//
// The format (MLX affine quantization, `bits` 4, 6 or 8, group size gs 32,
// 64 or 128, k a multiple of gs):
//   weight  uint32 [n, k * bits / 32]. Row j holds the k values q[j, 0..k)
//           (each 0 .. 2^bits - 1) packed from the low bits up: value i
//           occupies bits [i * bits, (i + 1) * bits) of the row, bit b of the
//           row being bit b % 32 of word b / 32 (little-endian words).
//             4 bits: 8 values a word, value i of a word at bits 4i .. 4i + 3;
//             8 bits: 4 values a word, one a byte;
//             6 bits: 16 values in 3 words, i.e. 4 values in 3 bytes (byte 0
//               = q0 | q1 << 6, byte 1 = q1 >> 2 | q2 << 4, byte 2 = q2 >> 4 |
//               q3 << 2); values 5 and 10 of each 3 words straddle two words
//               (bits 30-35 and 60-65).
//   scales, biases  [n, k / gs], the dtype of the unquantized weight (f16 or
//           bf16 in the checkpoints; f32 too): one pair per group of gs
//           consecutive values of a row.
//   w[j, i] = scales[j, i / gs] * q[j, i] + biases[j, i / gs].
// Quantizing (affineQuantize, this module's reference section, as
// mlx.core.quantize): per group, from its min and max, a step
// (max - min) / (2^bits - 1) signed and adjusted so that the edge of larger
// magnitude is exactly representable, q = round((w - bias) / scale) clamped.
// mlx-native's kernels take the same rows for any k and group size: a row is
// then quantizedRowBytes(k, bits) bytes (4 * ceil(k / 8) for 4 bits,
// 3 * ceil(k / 4) for 6, 4 * ceil(k / 4) for 8), value i still at bit i * bits,
// with ceil(k / gs) groups; for MLX's sizes the two layouts are one.

import src from '../../shaders/quantized_matmul.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/quantized_matmul.cu' with { type: 'text' };
import header from '../../shaders/quantized_matmul.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familyPlans, record, type CudaLaunch, type OpPlan, type PlannedDispatch } from '../plan.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBufferRules, checkedProduct, checkMultiple, checkNoAliasing, checkPositive, checkU32Count, invalid, like, ruleBindings, U32_MAX,
  type BufferRule,
} from '../validate.ts';
import { checkMatmulForm, denseMmCudaTile, matmulForm, matmulMetalLaunch, type MatmulForm, denseAbsRef, denseRef } from './dense.ts';
import { ceilDiv, chunksCudaLaunch, CUDA_GRID_MAX } from '../launch.ts';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../dtype.ts';

export const QUANTIZED_MATMUL_FAMILY = 'quantized_matmul';
/** The family's kernel sources by backend, as registered by every dispatch. */
/** The compact entries of a kernel (CUDA): the vector engine at 4, 6, 8 bits; the group-column engine at group sizes 32, 64, 128 and 2 or 4 warps. */
const compactEntries = (kernel: string): string[] =>
  [...[4, 6, 8].map((b) => `${kernel}_vec${b}`), ...[32, 64, 128].flatMap((gs) => [2, 4].map((w) => `${kernel}_gc${gs}_w${w}`))];
/**
 * The CUDA program's parts 1 to 4 (FamilySources.cudaParts): the typed ops'
 * kernels, the compact entries of the crate's kernels and of the typed ones,
 * the harness variants of quantized_mv_<t>, the dequantization kernels
 * (part 5); the crate's three kernels are part 0 (4.9 to 15.2 s of NVRTC 13.0
 * on one thread a part, where the whole family took 46.8 s).
 */
export const QUANTIZED_MATMUL_CUDA_PARTS: readonly (readonly string[])[] = [
  ['f32', 'f16', 'bf16'].flatMap((t) => [`quantized_mv_${t}`, `quantized_mm_${t}`]),
  ['quantized_matmul', 'quantized_matmul_simd_bf16'].flatMap(compactEntries),
  ['quantized_mv_f16', 'quantized_mv_bf16'].flatMap(compactEntries),
  ['f16', 'bf16'].flatMap((t) => [
    ...[8, 4].map((rt) => `quantized_mv_${t}_vks${rt}`), `quantized_mv_${t}_vdq1`, `quantized_mv_${t}_vdqs4`,
    ...['vgc', 'vgd'].flatMap((v) => [1, 2, 4].map((w) => `quantized_mv_${t}_${v}${w}`)),
  ]),
  ['f32', 'f16', 'bf16'].flatMap((t) => ['f32', 'f16', 'bf16'].map((o) => `quantized_dequantize_${t}_${o}`)),
];
export const QUANTIZED_MATMUL_SOURCES = familySources(QUANTIZED_MATMUL_FAMILY, {
  header, metal: src, cuda: cudaSrc, cudaParts: QUANTIZED_MATMUL_CUDA_PARTS,
});
export const QUANTIZED_MATMUL_KERNELS = [
  'quantized_matmul', 'quantized_matmul_simd', 'quantized_matmul_simd_bf16',
  'quantized_mv_f32', 'quantized_mv_f16', 'quantized_mv_bf16', 'quantized_mm_f32', 'quantized_mm_f16', 'quantized_mm_bf16',
  'quantized_dequantize_f32_f32', 'quantized_dequantize_f32_f16', 'quantized_dequantize_f32_bf16', 'quantized_dequantize_f16_f32',
  'quantized_dequantize_f16_f16', 'quantized_dequantize_f16_bf16', 'quantized_dequantize_bf16_f32', 'quantized_dequantize_bf16_f16',
  'quantized_dequantize_bf16_bf16',
] as const;
const planOf = familyPlans({ family: QUANTIZED_MATMUL_FAMILY, sources: QUANTIZED_MATMUL_SOURCES, kernels: QUANTIZED_MATMUL_KERNELS });

/** struct QuantizedMatmulParams (buffer 5 of every kernel of the family). */
export const QUANTIZED_MATMUL_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'QuantizedMatmulParams');

/** The bit widths of MLX's affine quantization that the family takes. */
export const AFFINE_BITS = [4, 6, 8] as const;
export type AffineBits = (typeof AFFINE_BITS)[number];
/** MLX's group sizes. */
export const AFFINE_GROUP_SIZES = [32, 64, 128] as const;
/** Rows of x the vector form (quantized_mv_<t>) takes at most: every weight row is read once for all of them. */
export const QUANTIZED_MV_MAX_ROWS = 8;

/** The sizes of struct QuantizedMatmulParams, mlx-native's (its quantized_matmul_id adds the experts'). */
export interface QuantizedMatmulSizes {
  m: number;
  k: number;
  n: number;
  /** Any positive group size (MLX's checkpoints: 32, 64 or 128). */
  groupSize: number;
  /** 4, 6 or 8 */
  bits: number;
}

export function packQuantizedMatmulParams(p: QuantizedMatmulSizes): Uint8Array {
  return packFields(QUANTIZED_MATMUL_PARAMS_LAYOUT, { M: p.m, K: p.k, N: p.n, group_size: p.groupSize, bits: p.bits });
}

/**
 * Bytes of one packed row of k values (mlx-native's rule, any k): whole
 * words for 4 and 8 bits, 3 bytes per 4 values for 6; k * bits / 8 (MLX's
 * row) when k is a multiple of 32.
 */
export function quantizedRowBytes(k: number, bits: number): number {
  return bits === 6 ? 3 * ceilDiv(k, 4) : 4 * ceilDiv(k * bits, 32);
}

/** Whether the rows follow MLX's chunked layout, which the fast paths take: group size 32, 64 or 128 dividing k. */
export function quantizedChunked(k: number, groupSize: number): boolean {
  return (AFFINE_GROUP_SIZES as readonly number[]).includes(groupSize) && k % groupSize === 0;
}

// ---- CUDA launches (shaders/cuda/quantized_matmul.cu; one-dimensional grids) ----

/**
 * The CUDA kernels' ways of computing, by what the launch gives them:
 *   'vector': tensor cores, the weight dequantized to 16-bit in registers,
 *     m <= 8 tokens as the mma's n = 8 (256 threads over 16 weight rows);
 *   'groups': one token of 4-bit codes (gcTakes): tensor cores with the
 *     codes as 16-bit numbers and eight groups of k as the mma's n, scales
 *     and biases applied in f32 once a group (128 threads, W = gcWarps
 *     warps over 16 weight rows, x permuted in shared memory);
 *   'matrix': tensor cores over tiles (denseMmCudaTile's shapes; mlx-native's
 *     kernels the 64 x 128 one), the weight dequantized into shared memory a
 *     stage at a time;
 *   'simt': f32 (quantized_mv_f32, quantized_mm_f32), 256 threads over 4 rows,
 *     tokens 4 at a time;
 *   'any': mlx-native's layouts other than MLX's, a thread per output.
 */
export type QuantizedCudaEngine = 'vector' | 'groups' | 'matrix' | 'simt' | 'any';

/**
 * The 'groups' engine's rule (shaders/cuda/quantized_matmul.cu gc_takes,
 * gc_warps, gc_shared decide alike): one token of 4-bit codes, n at least
 * GC_MIN_N (below it the vector engine's 8 warps a tile are faster: n 4096
 * at k 4096, 7.1 against 9.4 us on an H100), x
 * permuted in at most GC_MAX_SHARED bytes; 2 warps a 16-row tile past
 * GC_W2_TILES tiles, else 4 (bench/results/qmv-gc-h100-2026-11-26.md).
 */
export const GC_MIN_N = 5120;
const GC_W2_TILES = 1024;
/** The group-column engines' bound on x's copy in shared memory (shaders/cuda/common.cuh GC_MAX_SHARED). */
export const GC_MAX_SHARED = 98304;
/** The 'groups' engine's dynamic shared memory: x as 16-bit pairs over whole rounds of 8 groups, the groups' sums, 1 KiB more. */
export function gcSharedBytes(k: number, groupSize: number): number {
  const rounds = Math.ceil(Math.floor(k / groupSize) / 8);
  return rounds * 8 * groupSize * 2 + rounds * 8 * 4 + 1024;
}
/** Whether the 'groups' engine takes these sizes (chunked k assumed). */
export function gcTakes(m: number, n: number, k: number, groupSize: number, bits: number): boolean {
  return m === 1 && bits === 4 && n >= GC_MIN_N && gcSharedBytes(k, groupSize) <= GC_MAX_SHARED;
}
/** Warps of the 'groups' engine over each 16-row tile. */
export function gcWarps(n: number): number {
  return ceilDiv(n, 16) > GC_W2_TILES ? 2 : 4;
}

/** The engine of a kernel at these sizes (the CUDA entries decide alike). */
export function quantizedCudaEngine(kernel: string, m: number, n: number, k: number, groupSize: number, bits: number): QuantizedCudaEngine {
  if (kernel === 'quantized_mv_f32' || kernel === 'quantized_mm_f32') return 'simt';
  if (kernel.startsWith('quantized_mm_')) return 'matrix';
  const chunked = quantizedChunked(k, groupSize);
  if (kernel.startsWith('quantized_mv_')) return chunked && gcTakes(m, n, k, groupSize, bits) ? 'groups' : 'vector';
  if (!chunked) return 'any';
  if (gcTakes(m, n, k, groupSize, bits)) return 'groups';
  return m <= QUANTIZED_MV_MAX_ROWS ? 'vector' : 'matrix';
}

/** Weight rows a block of the CUDA vector engine takes. */
export const QUANTIZED_MV_CUDA_ROWS = 16;
/** Dynamic shared memory of the CUDA vector engine: 8 warps' sums of 16 rows x 8 tokens. */
export const QUANTIZED_MV_CUDA_SHARED_BYTES = 8 * 128 * 4;
/** Weight rows a block of the CUDA f32 engine takes, and its shared memory (8 warps' sums of 4 rows x 4 tokens). */
export const QUANTIZED_SIMT_CUDA_ROWS = 4;
const SIMT_SHARED_BYTES = 8 * QUANTIZED_SIMT_CUDA_ROWS * 4 * 4;
/** Blocks of the 'any' engine at most: it strides over the outputs. */
const ANY_CUDA_BLOCKS = 65536;

/**
 * The compact CUDA entry (shaders/cuda/quantized_matmul.cu, "compact entries")
 * that runs a kernel at these sizes: its engine alone, at one bit width
 * (vector: `<name>_vec<bits>`) or one group size and warp count (groups:
 * `<name>_gc<groupSize>_w<gcWarps>`), where `<name>` is quantized_matmul for
 * mlx-native's quantized_matmul and quantized_matmul_simd (f32 input and
 * output), and the kernel's own name for quantized_matmul_simd_bf16,
 * quantized_mv_f16 and quantized_mv_bf16. Undefined for the other engines,
 * layouts and kernels: the kernel's own entry runs.
 */
export function quantizedCudaEntry(kernel: string, m: number, n: number, k: number, groupSize: number, bits: number): string | undefined {
  const f32Io = kernel === 'quantized_matmul' || kernel === 'quantized_matmul_simd';
  if (!f32Io && !['quantized_matmul_simd_bf16', 'quantized_mv_f16', 'quantized_mv_bf16'].includes(kernel)) return undefined;
  if (!quantizedChunked(k, groupSize) || m > QUANTIZED_MV_MAX_ROWS) return undefined;
  const name = f32Io ? 'quantized_matmul' : kernel;
  switch (quantizedCudaEngine(kernel, m, n, k, groupSize, bits)) {
    case 'vector':
      return `${name}_vec${bits}`;
    case 'groups':
      return `${name}_gc${groupSize}_w${gcWarps(n)}`;
    default:
      return undefined;
  }
}

/** The CUDA launch of a kernel of the family at these sizes (its engine's: quantizedCudaEngine; the entry: quantizedCudaEntry). */
export function quantizedCudaLaunch(kernel: string, m: number, n: number, k: number, groupSize: number, bits: number): CudaLaunch {
  const entry = quantizedCudaEntry(kernel, m, n, k, groupSize, bits);
  const at = entry === undefined ? {} : { entry };
  switch (quantizedCudaEngine(kernel, m, n, k, groupSize, bits)) {
    case 'vector':
      return { grid: [ceilDiv(n, QUANTIZED_MV_CUDA_ROWS), 1, 1], threads: [256, 1, 1], threadgroupMemory: { 0: QUANTIZED_MV_CUDA_SHARED_BYTES }, ...at };
    case 'groups':
      return { grid: [ceilDiv(ceilDiv(n, 16) * gcWarps(n), 4), 1, 1], threads: [128, 1, 1], threadgroupMemory: { 0: gcSharedBytes(k, groupSize) }, ...at };
    case 'matrix': {
      // mlx-native's kernels take the 64 x 128 tile (denseMmCudaTile below 1024 rows) at every size.
      const t = kernel.startsWith('quantized_mm_') ? denseMmCudaTile(m, n) : denseMmCudaTile(1, 1);
      return { grid: [ceilDiv(n, t.bn) * ceilDiv(m, t.bm), 1, 1], threads: [t.threads, 1, 1], threadgroupMemory: { 0: t.sharedBytes } };
    }
    case 'simt':
      return { grid: [ceilDiv(n, QUANTIZED_SIMT_CUDA_ROWS), 1, 1], threads: [256, 1, 1], threadgroupMemory: { 0: SIMT_SHARED_BYTES } };
    case 'any':
      return { grid: [Math.min(ceilDiv(m * n, 256), ANY_CUDA_BLOCKS), 1, 1], threads: [256, 1, 1] };
  }
}

/** Refuses sizes whose matrix-engine grid (64 x 128 tiles, the most blocks) would pass the CUDA grid's 2^31 - 1 blocks. */
function checkCudaGrid(op: string, m: number, n: number): void {
  if (ceilDiv(m, 64) * ceilDiv(n, 128) > CUDA_GRID_MAX) {
    throw invalid(op, 'm', `at most ${Math.floor(CUDA_GRID_MAX / ceilDiv(n, 128)) * 64} for n = ${n} (the CUDA grid's 2^31 - 1 blocks)`, m);
  }
}

/** bits is one of MLX's affine widths, 4, 6 or 8. */
export function checkAffineBits(op: string, bits: number): void {
  if (!(AFFINE_BITS as readonly number[]).includes(bits)) throw invalid(op, 'bits', '4, 6 or 8', bits);
}

// ---- affine_quantized_matmul (x, scales, biases and y of one dtype) ----

export type AffineDType = 'f32' | 'f16' | 'bf16';
const AFFINE_DTYPES: readonly AffineDType[] = ['f32', 'f16', 'bf16'];

export interface AffineQuantizedMatmulArgs {
  /** [m, k]: f32, f16 or bf16 */
  x: Buffer;
  /** u32 [n, k * bits / 32]: MLX's packed rows (see the file comment) */
  weight: Buffer;
  /** [n, k / groupSize], x's dtype */
  scales: Buffer;
  /** [n, k / groupSize], x's dtype */
  biases: Buffer;
  /** [m, n], x's dtype, output */
  output: Buffer;
  /** Rows of x (tokens). */
  m: number;
  /** Rows of the weight (outputs). */
  n: number;
  /** Columns of x and of the unpacked weight (inputs): a multiple of groupSize. */
  k: number;
  /** 32, 64 or 128 */
  groupSize: number;
  /** 4, 6 or 8 */
  bits: number;
  /** The vector form (m <= 8) or the matrix form; by default the vector form for m <= 8. */
  form?: MatmulForm;
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateAffineQuantizedMatmul(a: AffineQuantizedMatmulArgs, device?: Device): void {
  const op = 'affine_quantized_matmul';
  checkPositive(op, 'm', a.m);
  checkPositive(op, 'n', a.n);
  checkPositive(op, 'k', a.k);
  checkAffineBits(op, a.bits);
  if (!(AFFINE_GROUP_SIZES as readonly number[]).includes(a.groupSize)) throw invalid(op, 'groupSize', '32, 64 or 128', a.groupSize);
  for (const [arg, v] of [['m', a.m], ['n', a.n], ['k', a.k]] as const) checkAtMost(op, arg, v, U32_MAX, '2^32 - 1');
  checkMultiple(op, 'k', a.k, a.groupSize, 'groupSize');
  checkMatmulForm(op, a.form, a.m, QUANTIZED_MV_MAX_ROWS);
  const nx = checkedProduct(op, 'm * k', a.m, a.k);
  const nw = checkedProduct(op, 'n * k * bits / 32', a.n, a.k / 32, a.bits);
  const ng = checkedProduct(op, 'n * k / groupSize', a.n, a.k / a.groupSize);
  const ny = checkedProduct(op, 'm * n', a.m, a.n);
  checkCudaGrid(op, a.m, a.n);
  const rules: BufferRule[] = [
    ['x', a.x, AFFINE_DTYPES, nx], ['weight', a.weight, 'u32', nw], ['scales', a.scales, like('x'), ng], ['biases', a.biases, like('x'), ng],
    ['output', a.output, like('x'), ny],
  ];
  checkBufferRules(op, rules, device);
  checkNoAliasing(op, ruleBindings(rules), ['output'], 'every output reads a row of x and of the weight that others read too');
}

/** The form an argument set runs: the vector form for m <= QUANTIZED_MV_MAX_ROWS unless the matrix form is asked for. */
export function affineQuantizedMatmulForm(a: Pick<AffineQuantizedMatmulArgs, 'm' | 'form'>): MatmulForm {
  return matmulForm(a, QUANTIZED_MV_MAX_ROWS);
}

/**
 * affine_quantized_matmul: y[i, j] = sum_k x[i, k] * w[j, k], w dequantized
 * from MLX's affine format (the file comment): w[j, k] = scales[j, k / gs] *
 * q[j, k] + biases[j, k / gs]; products summed in f32, y rounded once to its
 * dtype. The weight is dequantized in f32 and, on CUDA's tensor cores (f16
 * and bf16) and in the matrix form's threadgroup tiles, rounded to x's dtype
 * before the products, as MLX's own kernels do. Not in mlx-native, which has
 * bf16 scales with f32 or bf16 activations only (quantizedMatmulSimd,
 * quantizedMatmulSimdBf16).
 *
 * Layouts: x [m, k]; weight u32 [n, k * bits / 32]; scales, biases
 * [n, k / groupSize]; output [m, n]; x, scales, biases and output of one
 * dtype (f32, f16 or bf16); exact element counts (views inside a larger
 * buffer, as uploadPacked makes them, are buffers like any other); the output
 * overlaps no input. bits 4, 6 or 8; groupSize 32, 64 or 128 dividing k.
 * Kernels: quantized_mv_<dtype> (the vector form, m <= 8: each weight row
 * read once for every row of x) and quantized_mm_<dtype> (the matrix form).
 * Bindings: 0 x, 1 weight, 2 scales, 3 biases, 4 output, 5
 * QuantizedMatmulParams (M, K, N, group_size, bits).
 * Grid (Metal): quantized_mv (ceil(n / 8), 1, 1) threadgroups of (32, 2, 1),
 * 4 weight rows per simdgroup, lanes splitting k by 32-value chunks;
 * quantized_mm (ceil(n / 64), ceil(m / 32), 1) of 128 threads, a 32 x 64
 * tile each. CUDA: quantizedCudaLaunch of quantizedCudaEngine's engine
 * (tensor cores for f16 and bf16, SIMT for f32).
 */
export function affineQuantizedMatmul(enc: Encoder, args: AffineQuantizedMatmulArgs): void {
  record(enc, planAffineQuantizedMatmul(args, enc.device.limits, enc.device));
}

/** affineQuantizedMatmul's plan: validates, then one dispatch (see affineQuantizedMatmul). */
export function planAffineQuantizedMatmul(a: AffineQuantizedMatmulArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateAffineQuantizedMatmul(a, device);
  const dt = a.x.dtype as AffineDType;
  const form = affineQuantizedMatmulForm(a);
  const kernel = form === 'vector' ? `quantized_mv_${dt}` : `quantized_mm_${dt}`;
  return planOf({
    kernel,
    buffers: [a.x, a.weight, a.scales, a.biases, a.output],
    bytes: [, , , , , packQuantizedMatmulParams(a)],
    ...matmulMetalLaunch(form, a.m, a.n),
    cuda: quantizedCudaLaunch(kernel, a.m, a.n, a.k, a.groupSize, a.bits),
  });
}

// ---- quantized_dequantize (the weight itself, dequantized) ----

export interface QuantizedDequantizeArgs {
  /** u32 or u8: n packed rows of k * bits / 8 bytes (MLX's rows, the file comment) */
  weight: Buffer;
  /** [n, k / groupSize]: f32, f16 or bf16 */
  scales: Buffer;
  /** [n, k / groupSize], scales' dtype */
  biases: Buffer;
  /** [n, k]: f32, f16 or bf16, output */
  output: Buffer;
  /** Rows of the weight. */
  n: number;
  /** Values a row: a multiple of groupSize. */
  k: number;
  /** 32, 64 or 128 */
  groupSize: number;
  /** 4, 6 or 8 */
  bits: number;
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateQuantizedDequantize(a: QuantizedDequantizeArgs, device?: Device): void {
  const op = 'quantized_dequantize';
  checkPositive(op, 'n', a.n);
  checkPositive(op, 'k', a.k);
  checkAffineBits(op, a.bits);
  if (!(AFFINE_GROUP_SIZES as readonly number[]).includes(a.groupSize)) throw invalid(op, 'groupSize', '32, 64 or 128', a.groupSize);
  checkMultiple(op, 'k', a.k, a.groupSize, 'groupSize');
  checkU32Count(op, 'n * k / 32 (the chunks)', checkedProduct(op, 'n * k / 32', a.n, a.k / 32));
  const nb = checkedProduct(op, 'n * k * bits / 8', a.n, a.k / 8, a.bits);
  const ng = checkedProduct(op, 'n * k / groupSize', a.n, a.k / a.groupSize);
  const rules: BufferRule[] = [
    ['weight', a.weight, ['u32', 'u8'], { bytes: nb, of: `${a.n} rows of ${(a.k * a.bits) / 8} bytes` }],
    ['scales', a.scales, AFFINE_DTYPES, ng], ['biases', a.biases, like('scales'), ng], ['output', a.output, AFFINE_DTYPES, checkedProduct(op, 'n * k', a.n, a.k)],
  ];
  checkBufferRules(op, rules, device);
  checkNoAliasing(op, ruleBindings(rules), ['output'], 'the output is written while the weight is read');
}

/**
 * quantized_dequantize (not in mlx-native): output[j, i] = scales[j, i / gs]
 * * q[j, i] + biases[j, i / gs], the weight of MLX's affine format (the file
 * comment) dequantized in f32 (one fused multiply-add) and rounded once to
 * the output's dtype: for prompts, whose products run faster on the dense
 * family's tensor tiles over the dequantized weight than on the quantized
 * matrix form (ts/models/blocks.ts linear).
 *
 * Layouts: weight u32 or u8 [n, k * bits / 8 bytes]; scales, biases [n, k /
 * groupSize] (f32, f16 or bf16, one dtype); output [n, k] f32, f16 or bf16.
 * bits 4, 6 or 8; groupSize 32, 64 or 128 dividing k.
 * Kernels: quantized_dequantize_<scales>_<output>. Bindings: 0 weight, 1
 * scales, 2 biases, 3 output, 4 QuantizedMatmulParams (M 1, K, N,
 * group_size, bits).
 * Grid (Metal): (ceil(n k / 32 / 256), 1, 1) threadgroups of 256, a chunk of
 * 32 values a thread. CUDA: chunksCudaLaunch (256 threads a block, the grid
 * striding over the chunks).
 */
export function quantizedDequantize(enc: Encoder, args: QuantizedDequantizeArgs): void {
  record(enc, planQuantizedDequantize(args, enc.device.limits, enc.device));
}

/** quantizedDequantize's plan: validates, then one dispatch (see quantizedDequantize). */
export function planQuantizedDequantize(a: QuantizedDequantizeArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateQuantizedDequantize(a, device);
  const chunks = (a.n * a.k) / 32;
  const tg = Math.min(256, limits.maxThreadsPerThreadgroup);
  return planOf({
    kernel: `quantized_dequantize_${a.scales.dtype}_${a.output.dtype}`,
    buffers: [a.weight, a.scales, a.biases, a.output],
    bytes: [, , , , packQuantizedMatmulParams({ m: 1, ...a })],
    grid: [ceilDiv(chunks, tg), 1, 1],
    threads: [tg, 1, 1],
    cuda: chunksCudaLaunch(chunks),
  });
}

// ---- mlx-native's quantized_matmul module ----

/**
 * mlx-native's arguments (input, weight, scales, biases and the sizes of its
 * QuantizedMatmulParams), with the output it would allocate given here.
 */
export interface QuantizedMatmulArgs extends QuantizedMatmulSizes {
  /** [m, k]: f32 (quantizedMatmul, quantizedMatmulSimd) or bf16 (quantizedMatmulSimdBf16) */
  input: Buffer;
  /** u32 or u8: n packed rows of quantizedRowBytes(k, bits) bytes */
  weight: Buffer;
  /** bf16 [n, ceil(k / groupSize)] */
  scales: Buffer;
  /** bf16 [n, ceil(k / groupSize)] */
  biases: Buffer;
  /** [m, n], input's dtype, output */
  output: Buffer;
}

/**
 * mlx-native's rules: bits 4, 6 or 8; m, k, n and groupSize > 0; each buffer
 * at least its size (the weight n * quantizedRowBytes(k, bits) bytes, scales
 * and biases n * ceil(k / groupSize) bf16). With the u32 fields' bounds,
 * dtypes and no aliasing.
 */
function validateCrate(op: string, a: QuantizedMatmulArgs, io: 'f32' | 'bf16', device?: Device): void {
  checkAffineBits(op, a.bits);
  for (const arg of ['m', 'k', 'n', 'groupSize'] as const) checkU32Count(op, arg, a[arg]);
  const nx = checkedProduct(op, 'm * k', a.m, a.k);
  const nw = checkedProduct(op, 'n * row bytes', a.n, quantizedRowBytes(a.k, a.bits));
  const ng = checkedProduct(op, 'n * ceil(k / groupSize)', a.n, ceilDiv(a.k, a.groupSize));
  const ny = checkedProduct(op, 'm * n', a.m, a.n);
  checkCudaGrid(op, a.m, a.n);
  const rules: BufferRule[] = [
    ['input', a.input, io, nx], ['weight', a.weight, ['u32', 'u8'], { bytes: nw, of: `${a.n} rows of ${quantizedRowBytes(a.k, a.bits)} bytes` }],
    ['scales', a.scales, 'bf16', ng], ['biases', a.biases, 'bf16', ng], ['output', a.output, io, ny],
  ];
  checkBufferRules(op, rules, device, true);
  checkNoAliasing(op, ruleBindings(rules), ['output'], 'every output reads a row of the input and of the weight that others read too');
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateQuantizedMatmul(a: QuantizedMatmulArgs, device?: Device): void {
  validateCrate('quantized_matmul', a, 'f32', device);
}

/** The dispatch of mlx-native's quantized_matmul kernel: one thread per output, 16 x 16 threadgroups (fewer at the edges of small sizes). */
function scalarDispatch(a: QuantizedMatmulArgs): PlannedDispatch {
  const tx = Math.min(16, a.n), ty = Math.min(16, a.m);
  return {
    kernel: 'quantized_matmul',
    buffers: [a.input, a.weight, a.scales, a.biases, a.output],
    bytes: [, , , , , packQuantizedMatmulParams(a)],
    grid: [ceilDiv(a.n, tx), ceilDiv(a.m, ty), 1],
    threads: [tx, ty, 1],
    cuda: quantizedCudaLaunch('quantized_matmul', a.m, a.n, a.k, a.groupSize, a.bits),
  };
}

/**
 * quantized_matmul (mlx-native's): output[i, j] = sum_k x[i, k] * w[j, k],
 * f32 input and output, bf16 scales and biases, any k and group size (rows
 * of quantizedRowBytes(k, bits) bytes; the file comment). As in the crate,
 * the input is rounded to bf16 before the products, which are summed in f32;
 * the weight is dequantized in f32 (on CUDA's tensor cores rounded to bf16).
 *
 * Rules: mlx-native's (validateCrate). Bindings: 0 input, 1 weight, 2
 * scales, 3 biases, 4 output, 5 QuantizedMatmulParams.
 * Grid (Metal): one thread per output, (ceil(n / 16), ceil(m / 16), 1)
 * threadgroups of (min(16, n), min(16, m), 1), as the crate's. CUDA: the
 * engine of quantizedCudaEngine (tensor cores for MLX's layouts, the vector
 * engine up to 8 rows of input, the matrix engine past them).
 */
export function quantizedMatmul(enc: Encoder, args: QuantizedMatmulArgs): void {
  record(enc, planQuantizedMatmul(args, enc.device.limits, enc.device));
}

/** quantizedMatmul's plan: validates, then one dispatch (see quantizedMatmul). */
export function planQuantizedMatmul(a: QuantizedMatmulArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateQuantizedMatmul(a, device);
  return planOf(scalarDispatch(a));
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateQuantizedMatmulSimd(a: QuantizedMatmulArgs, device?: Device): void {
  validateCrate('quantized_matmul_simd', a, 'f32', device);
}

/** mlx-native's rule for its SIMD kernel (else its host falls back to quantized_matmul): 4 or 8 bits, n a multiple of 8, k of 256. */
export function quantizedMatmulSimdApplies(a: Pick<QuantizedMatmulArgs, 'n' | 'k' | 'bits'>): boolean {
  return (a.bits === 4 || a.bits === 8) && a.n % 8 === 0 && a.k % 256 === 0;
}

/** A dispatch of mlx-native's SIMD kernels: (m, ceil(n / 8), 1) threadgroups of (32, 2, 1). */
function simdDispatch(kernel: string, a: QuantizedMatmulArgs): PlannedDispatch {
  return {
    kernel,
    buffers: [a.input, a.weight, a.scales, a.biases, a.output],
    bytes: [, , , , , packQuantizedMatmulParams(a)],
    grid: [a.m, ceilDiv(a.n, 8), 1],
    threads: [32, 2, 1],
    cuda: quantizedCudaLaunch(kernel, a.m, a.n, a.k, a.groupSize, a.bits),
  };
}

/**
 * quantized_matmul_simd (mlx-native's): the product of quantizedMatmul.
 * Where quantizedMatmulSimdApplies, the kernel quantized_matmul_simd: grid
 * (m, ceil(n / 8), 1) threadgroups of (32, 2, 1), threadgroup (i, b) taking
 * row i of the input against weight rows 8b .. 8b + 7, 4 per simdgroup,
 * lanes splitting k; elsewhere quantized_matmul, as the crate's host does.
 * Rules, bindings and numerics: quantizedMatmul's. CUDA: as quantizedMatmul.
 */
export function quantizedMatmulSimd(enc: Encoder, args: QuantizedMatmulArgs): void {
  record(enc, planQuantizedMatmulSimd(args, enc.device.limits, enc.device));
}

/** quantizedMatmulSimd's plan: validates, then one dispatch (see quantizedMatmulSimd). */
export function planQuantizedMatmulSimd(a: QuantizedMatmulArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateQuantizedMatmulSimd(a, device);
  return planOf(quantizedMatmulSimdApplies(a) ? simdDispatch('quantized_matmul_simd', a) : scalarDispatch(a));
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateQuantizedMatmulSimdBf16(a: QuantizedMatmulArgs, device?: Device): void {
  validateCrate('quantized_matmul_simd_bf16', a, 'bf16', device);
}

/**
 * quantized_matmul_simd_bf16 (mlx-native's dispatch_quantized_matmul_simd_bf16):
 * the product of quantizedMatmul with bf16 input and output (summed in f32,
 * rounded once). One dispatch of quantized_matmul_simd_bf16 at every size
 * the rules take: the kernel here takes 6 bits and any n, k and group size,
 * where the crate's host casts to f32, runs quantized_matmul and casts back
 * (the same products, two more dispatches).
 *
 * Rules: quantizedMatmul's, with bf16 input and output. Bindings: as
 * quantizedMatmul. Grid (Metal): (m, ceil(n / 8), 1) threadgroups of
 * (32, 2, 1), as quantizedMatmulSimd's kernel. CUDA: as quantizedMatmul.
 */
export function quantizedMatmulSimdBf16(enc: Encoder, args: QuantizedMatmulArgs): void {
  record(enc, planQuantizedMatmulSimdBf16(args, enc.device.limits, enc.device));
}

/** quantizedMatmulSimdBf16's plan: validates, then one dispatch (see quantizedMatmulSimdBf16). */
export function planQuantizedMatmulSimdBf16(a: QuantizedMatmulArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateQuantizedMatmulSimdBf16(a, device);
  return planOf(simdDispatch('quantized_matmul_simd_bf16', a));
}

// ---- the float64 reference ----

// CPU reference of the quantized_matmul family: MLX's affine quantizer, the
// packing of its rows, and dequantize-then-multiply in float64. The format is
// written down in ts/ops/quantized_matmul.ts.

/** The dtype scales and biases are stored in (the unquantized weight's). */
export type AffineScaleDType = 'f32' | 'f16' | 'bf16';

/** Bytes of one packed row of k values: 4 * ceil(k / 8) for 4 bits, 3 * ceil(k / 4) for 6, 4 * ceil(k / 4) for 8. */
export function affineRowBytes(k: number, bits: number): number {
  return bits === 6 ? 3 * Math.ceil(k / 4) : 4 * Math.ceil((k * bits) / 32);
}

/**
 * Packs q [rows, k] (each 0 .. 2^bits - 1) into rows of affineRowBytes(k,
 * bits) bytes: value i of a row at bits [i * bits, (i + 1) * bits) of the
 * row, bit b being bit b % 8 of byte b / 8 (so bit b % 32 of little-endian
 * word b / 32).
 */
export function affinePack(q: ArrayLike<number>, rows: number, k: number, bits: number): Uint8Array {
  const rb = affineRowBytes(k, bits);
  const out = new Uint8Array(rows * rb);
  for (let r = 0; r < rows; r++) {
    for (let i = 0; i < k; i++) {
      const v = q[r * k + i]!;
      if (!Number.isInteger(v) || v < 0 || v >= 2 ** bits) throw new RangeError(`affinePack: q[${r}, ${i}] = ${v} is not a ${bits}-bit value`);
      for (let b = 0; b < bits; b++) {
        if ((v >> b) & 1) {
          const bit = i * bits + b;
          out[r * rb + (bit >> 3)]! |= 1 << (bit & 7);
        }
      }
    }
  }
  return out;
}

/** The q values [rows, k] of rows packed as affinePack packs them. */
export function affineUnpack(packed: Uint8Array, rows: number, k: number, bits: number): Uint8Array {
  const rb = affineRowBytes(k, bits);
  const q = new Uint8Array(rows * k);
  for (let r = 0; r < rows; r++) {
    for (let i = 0; i < k; i++) {
      let v = 0;
      for (let b = 0; b < bits; b++) {
        const bit = i * bits + b;
        v |= ((packed[r * rb + (bit >> 3)]! >> (bit & 7)) & 1) << b;
      }
      q[r * k + i] = v;
    }
  }
  return q;
}

/** The packed bytes as the little-endian uint32 words MLX stores (the byte length a multiple of 4). */
export function affineWords(packed: Uint8Array): Uint32Array {
  if (packed.byteLength % 4 !== 0) throw new RangeError(`affineWords: ${packed.byteLength} bytes are not whole words`);
  const dv = new DataView(packed.buffer, packed.byteOffset, packed.byteLength);
  return Uint32Array.from({ length: packed.byteLength / 4 }, (_, i) => dv.getUint32(4 * i, true));
}

/** x rounded to the dtype (round to nearest even), as a number. */
export function affineRound(dtype: AffineScaleDType, x: number): number {
  if (dtype === 'bf16') return bf16BitsToF32(f32ToBf16Bits(x));
  if (dtype === 'f16') return f16BitsToF32(f32ToF16Bits(x));
  return Math.fround(x);
}

/** Round half to even (C's rint in the default rounding mode). */
function rint(x: number): number {
  const f = Math.floor(x);
  const d = x - f;
  if (d < 0.5) return f;
  if (d > 0.5) return f + 1;
  return f % 2 === 0 ? f : f + 1;
}

export interface AffineQuantized {
  /** q [rows, k] */
  q: Uint8Array;
  /** The packed rows (affinePack): MLX's uint32 [rows, k * bits / 32] as bytes. */
  packed: Uint8Array;
  /** [rows, k / groupSize], the values stored in the scale dtype. */
  scales: Float64Array;
  /** [rows, k / groupSize], the values stored in the scale dtype. */
  biases: Float64Array;
}

/**
 * MLX's affine quantization of w [rows, k] (k a multiple of groupSize), in
 * the float32 arithmetic of mlx.core.quantize (mlx/backend/cpu/quantized.cpp)
 * for each group of groupSize consecutive values of a row:
 *   n = 2^bits - 1; s = max((max - min) / n, 1e-7), negated unless
 *   |min| > |max|; edge = min if |min| > |max| else max;
 *   q0 = rint(edge / s); if q0 != 0: s = edge / q0, bias = edge, else bias = 0;
 *   q = clamp(rint((w - bias) / s), 0, n);
 * scale s and bias stored rounded to scaleDtype (q computed with the f32
 * values). The edge of larger magnitude is thus represented exactly, and so
 * is 0 when the group's range holds it near a step. MLX's Metal quantizer
 * starts each group's max at 0 rather than at its first value (the two agree
 * unless all of a group's values are negative). w's values are taken as
 * float32 (Math.fround).
 */
export function affineQuantize(w: ArrayLike<number>, rows: number, k: number, groupSize: number, bits: number,
  scaleDtype: AffineScaleDType = 'bf16'): AffineQuantized {
  if (k % groupSize !== 0) throw new RangeError(`affineQuantize: k = ${k} is not a multiple of the group size ${groupSize}`);
  const f = Math.fround;
  const nBins = 2 ** bits - 1;
  const eps = f(1e-7);
  const groups = k / groupSize;
  const q = new Uint8Array(rows * k);
  const scales = new Float64Array(rows * groups);
  const biases = new Float64Array(rows * groups);
  for (let r = 0; r < rows; r++) {
    for (let g = 0; g < groups; g++) {
      const at = r * k + g * groupSize;
      let lo = Infinity;
      let hi = -Infinity;
      for (let i = 0; i < groupSize; i++) {
        const v = f(w[at + i]!);
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
      }
      const mask = Math.abs(lo) > Math.abs(hi);
      let scale = Math.max(f(f(hi - lo) / nBins), eps);
      if (!mask) scale = -scale;
      const edge = mask ? lo : hi;
      const q0 = rint(f(edge / scale));
      let bias = 0;
      if (q0 !== 0) {
        scale = f(edge / q0);
        bias = edge;
      }
      for (let i = 0; i < groupSize; i++) {
        const v = rint(f(f(f(w[at + i]!) - bias) / scale));
        q[at + i] = Math.min(Math.max(v, 0), nBins);
      }
      scales[r * groups + g] = affineRound(scaleDtype, scale);
      biases[r * groups + g] = affineRound(scaleDtype, bias);
    }
  }
  return { q, packed: affinePack(q, rows, k, bits), scales, biases };
}

/**
 * w [rows, k] = scales[r, i / gs] * q[r, i] + biases[r, i / gs] in float64,
 * from rows packed as affinePack packs them (any k; ceil(k / gs) groups).
 */
export function affineDequantize(packed: Uint8Array, scales: ArrayLike<number>, biases: ArrayLike<number>, rows: number, k: number,
  groupSize: number, bits: number): Float64Array {
  const q = affineUnpack(packed, rows, k, bits);
  const groups = Math.ceil(k / groupSize);
  const w = new Float64Array(rows * k);
  for (let r = 0; r < rows; r++) {
    for (let i = 0; i < k; i++) {
      const g = r * groups + Math.floor(i / groupSize);
      w[r * k + i] = scales[g]! * q[r * k + i]! + biases[g]!;
    }
  }
  return w;
}

/**
 * y [m, n] = x [m, k] W^T with W [n, k] dequantized (affineDequantize), in
 * float64; and sum_k |x w| per output, the scale of its rounding error.
 */
export function affineQuantizedMatmulRef(x: ArrayLike<number>, packed: Uint8Array, scales: ArrayLike<number>, biases: ArrayLike<number>,
  m: number, n: number, k: number, groupSize: number, bits: number): { y: Float64Array; abs: Float64Array } {
  const w = affineDequantize(packed, scales, biases, n, k, groupSize, bits);
  return { y: denseRef(x, w, m, n, k), abs: denseAbsRef(x, w, m, n, k) };
}
