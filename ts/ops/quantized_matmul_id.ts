// quantized_matmul_id: MLX affine quantized products of per-expert weights,
// routed by per-token expert ids (MoE). Kernel name, bindings, param struct
// and validation rules of mlx-native's quantized_matmul_id module
// (src/ops/quantized_matmul_id.rs, quantized_matmul_id); added in its style,
// as the crate has them for neither MLX's affine format nor f16/bf16
// activations: the typed vector form quantized_mv_id_<t>, the matrix form
// quantized_mm_id_<t> over pairs grouped by expert (moe_dispatch_sort), and
// the fused gate/up projections quantized_gate_up_{mv,mm}_id_<t> (the
// issue's fused_gate_up_silu, with Gemma 4's GELU as a second activation).
// Kernels: shaders/quantized_matmul_id.metal and
// shaders/cuda/quantized_matmul_id.cu. The weight format is MLX's
// (ts/ops/quantized_matmul.ts writes it down).
//
// Pairs: x has m rows, ids [m, nExpertUsed]; pair p is row p / nExpertUsed,
// slot p % nExpertUsed, and has one output row: y [m, nExpertUsed, n]. The
// gate/up projections of a layer take x [tokens, hidden] with nExpertUsed =
// top-k; the down projection takes their output, one row per pair, as
// [tokens * topK, intermediate] with nExpertUsed = 1 and the same ids (the
// crate's Gemma 4 path does the same).
//
// Experts: the weight, scales and biases of every expert in one buffer each,
// expert e's rows starting expertRows rows after expert e - 1's (default n:
// stacked [E, n, ...] tensors, mlx's switch_mlp). A fused [E, 2 I, H]
// gate_up tensor is two views of one buffer, the up view starting I rows in,
// both with expertRows 2 I.
//
// An id past the experts (>= numExperts) cannot be refused without reading
// the ids on the host; its output row is zeros, and no kernel reads outside
// the weights for it (mlx-native's kernel skips such a row, leaving it
// unwritten).

import src from '../../shaders/quantized_matmul_id.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/quantized_matmul_id.cu' with { type: 'text' };
import header from '../../shaders/quantized_matmul_id.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familyPlans, record, type CudaLaunch, type Launch, type OpPlan, type PlannedDispatch } from '../plan.ts';
import { checkPairs, expertProductOp, moeTileSlots, type ExpertFamily, type ExpertProductBase, type GateActivation } from '../expert-products.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBufferRules, checkedProduct, checkedU32Product, checkMultiple, checkNoAliasing, checkU32Count, invalid, ruleBindings, U32_MAX,
  type BufferRule, type DtypeOf,
} from '../validate.ts';
import {
  AFFINE_GROUP_SIZES, checkAffineBits, quantizedRowBytes, affineDequantize, GC_MAX_SHARED, gcSharedBytes, quantizedChunked,
  type QuantizedMatmulSizes,
} from './quantized_matmul.ts';
import { ceilDiv, CUDA_GRID_MAX } from '../launch.ts';
import { denseGateUpIdRef, denseMatmulIdRef, type IdRef, type IdSizesRef } from './dense_matmul_id.ts';

export const QUANTIZED_MATMUL_ID_FAMILY = 'quantized_matmul_id';
/** The family's kernel sources by backend, as registered by every dispatch. */
/** The group-column kernels of one type (CUDA): the plain and gate_up vector forms, x of the type or f32. */
const gcKernels = (t: 'bf16' | 'f16'): string[] =>
  ['quantized_mv_id_gc', 'quantized_gate_up_mv_id_gc'].flatMap((k) => [`${k}_${t}`, `${k}_${t}_xf32`]);
/** Their compact entries (quantizedIdMvCudaEntry): group sizes 32, 64, 128; 1 or 2 warps a tile, gate_up also 4. */
const gcCompactEntries = (t: 'bf16' | 'f16'): string[] =>
  [32, 64, 128].flatMap((gs) => gcKernels(t).flatMap((k) => (k.includes('gate_up') ? [1, 2, 4] : [1, 2]).map((w) => `${k}_g${gs}_w${w}`)));
/**
 * The CUDA program's parts 1 to 4 (FamilySources.cudaParts): the group-column
 * vector kernels of bf16 and f16, and their compact entries of bf16 and f16
 * (8 to 11 s of NVRTC 13.0 on one thread each, part 0 too, where the whole
 * family took 49 s); the other entries are part 0.
 */
export const QUANTIZED_MATMUL_ID_CUDA_PARTS: readonly (readonly string[])[] = [
  gcKernels('bf16'), gcKernels('f16'), gcCompactEntries('bf16'), gcCompactEntries('f16'),
];
export const QUANTIZED_MATMUL_ID_SOURCES = familySources(QUANTIZED_MATMUL_ID_FAMILY, {
  header, metal: src, cuda: cudaSrc, cudaParts: QUANTIZED_MATMUL_ID_CUDA_PARTS,
});
export const QUANTIZED_MATMUL_ID_KERNELS = [
  'quantized_matmul_id',
  'quantized_mv_id_f16', 'quantized_mv_id_bf16', 'quantized_gate_up_mv_id_f16', 'quantized_gate_up_mv_id_bf16',
  'quantized_mv_id_gc_f16', 'quantized_mv_id_gc_bf16', 'quantized_gate_up_mv_id_gc_f16', 'quantized_gate_up_mv_id_gc_bf16',
  'quantized_mv_id_f16_xf32', 'quantized_mv_id_bf16_xf32', 'quantized_gate_up_mv_id_f16_xf32', 'quantized_gate_up_mv_id_bf16_xf32',
  'quantized_mv_id_gc_f16_xf32', 'quantized_mv_id_gc_bf16_xf32', 'quantized_gate_up_mv_id_gc_f16_xf32', 'quantized_gate_up_mv_id_gc_bf16_xf32',
  'quantized_mm_id_f16', 'quantized_mm_id_bf16', 'quantized_gate_up_mm_id_f16', 'quantized_gate_up_mm_id_bf16',
] as const;
const planOf = familyPlans({
  family: QUANTIZED_MATMUL_ID_FAMILY, sources: QUANTIZED_MATMUL_ID_SOURCES, kernels: QUANTIZED_MATMUL_ID_KERNELS,
});

/** struct QuantizedMatmulIdParams (buffer 6 of quantized_matmul_id, quantized_mv_id_<t>, quantized_mm_id_<t>). */
export const QUANTIZED_MATMUL_ID_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'QuantizedMatmulIdParams');
/** struct QuantizedGateUpIdParams (buffer 6 of quantized_gate_up_{mv,mm}_id_<t>). */
export const QUANTIZED_GATE_UP_ID_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'QuantizedGateUpIdParams');

/** The per-expert products' gate activations and tile slots (ts/expert-products.ts, shared with dense_matmul_id). */
export { GATE_ACTIVATIONS, moeTileSlots, type GateActivation } from '../expert-products.ts';

export type QuantizedIdDType = 'f16' | 'bf16';
const ID_DTYPES: readonly QuantizedIdDType[] = ['f16', 'bf16'];

interface IdSizes {
  m: number;
  n: number;
  k: number;
  groupSize: number;
  bits: number;
  nExpertUsed: number;
  numExperts: number;
  /** Bytes between two experts' weights, elements between their scales (biases alike). */
  weightStride: number;
  scalesStride: number;
}

function idFields(s: IdSizes): Record<string, number> {
  return {
    M: s.m, K: s.k, N: s.n, group_size: s.groupSize, bits: s.bits, n_expert_used: s.nExpertUsed, num_experts: s.numExperts,
    expert_weight_stride: s.weightStride, expert_scales_stride: s.scalesStride, expert_biases_stride: s.scalesStride,
  };
}

export function packQuantizedMatmulIdParams(s: IdSizes): Uint8Array {
  return packFields(QUANTIZED_MATMUL_ID_PARAMS_LAYOUT, idFields(s));
}

export function packQuantizedGateUpIdParams(s: IdSizes & { activation?: GateActivation }): Uint8Array {
  return packFields(QUANTIZED_GATE_UP_ID_PARAMS_LAYOUT, { ...idFields(s), activation: s.activation === 'gelu_tanh' ? 1 : 0 });
}

// ---- CUDA launches (shaders/cuda/quantized_matmul_id.cu; one-dimensional grids) ----

/**
 * 16-row tiles a block of the CUDA vector engine takes: its 8 warps split
 * the k steps (4 chunks of 32 values a step) of every tile, so a short row
 * (few steps) takes more tiles a block and keeps the warps busy. The kernel
 * derives the same number from k.
 */
export function quantizedIdMvTiles(k: number): number {
  const steps = ceilDiv(ceilDiv(k, 32), 4);
  return steps >= 8 ? 1 : steps >= 4 ? 2 : 4;
}

/** Output rows a block of the CUDA vector engine takes: 16 a tile (8 for gate/up: each tile holds 8 gate and 8 up rows). */
export function quantizedIdMvCudaRows(k: number, gateUp: boolean): number {
  return quantizedIdMvTiles(k) * (gateUp ? 8 : 16);
}

/**
 * The group-column path (shaders/cuda/quantized_matmul_id.cu qid_gc; the
 * prelude's qmv_gc per pair, one token a pair) takes 4-bit codes in MLX's
 * chunks whose x fits GC_MAX_SHARED bytes permuted; the kernel decides alike
 * (gc_id_takes), and its any engine still takes operands a vector load
 * cannot read, at any launch.
 */
export function quantizedIdGcTakes(k: number, groupSize: number, bits: number): boolean {
  return bits === 4 && quantizedChunked(k, groupSize) && gcSharedBytes(k, groupSize) <= GC_MAX_SHARED;
}
/** Blocks of 128 threads the group-column path's grid reaches before it takes fewer warps a tile (gc_id_warps). */
export const QUANTIZED_ID_GC_BLOCKS = 512;
/**
 * Warps a tile of the group-column path (gc_id_warps): the smallest of 1, 2
 * and 4 (1 and 2 for the plain form, whose 4 spills) whose grid reaches
 * QUANTIZED_ID_GC_BLOCKS blocks (bench/notes/moe-gc-2026-11-26.md), and no
 * more than the tile's rounds of 8 groups (ceil(k / groupSize / 8), to a
 * power of two): the warps of a tile split its rounds, and one past them
 * would have none (Qwen3.6's down product, k 512 in groups of 64: one round,
 * one warp; bench/results/shared-slot-h100-2026-11-27.md).
 */
export function quantizedIdGcWarps(pairs: number, n: number, gateUp: boolean, k: number, groupSize: number): number {
  const tiles = pairs * ceilDiv(n, gateUp ? 8 : 16);
  const w = tiles >= 4 * QUANTIZED_ID_GC_BLOCKS ? 1 : tiles >= 2 * QUANTIZED_ID_GC_BLOCKS || !gateUp ? 2 : 4;
  const rounds = ceilDiv(Math.floor(k / groupSize), 8);
  return Math.min(w, rounds >= 4 ? 4 : rounds >= 2 ? 2 : 1);
}

/**
 * The CUDA vector form's launch: the group-column path's where it takes
 * the sizes (quantizedIdGcTakes: 128 threads, pairs x ceil(tiles W / 4)
 * blocks, tiles of 16 rows or 8 gate-up outputs, dynamic shared memory
 * gcSharedBytes), else the vector engine's (a 256-thread block per pair and
 * block of rows). The typed ops run that path by their _gc kernels
 * (quantizedIdMvKernel), mlx-native's quantized_matmul_id inside its entry.
 */
export function quantizedIdMvCudaLaunch(pairs: number, n: number, k: number, gateUp: boolean, bits: number, groupSize: number): Launch {
  if (quantizedIdGcTakes(k, groupSize, bits)) {
    const w = quantizedIdGcWarps(pairs, n, gateUp, k, groupSize);
    return {
      grid: [pairs * ceilDiv(ceilDiv(n, gateUp ? 8 : 16) * w, 4), 1, 1], threads: [128, 1, 1],
      threadgroupMemory: { 0: gcSharedBytes(k, groupSize) },
    };
  }
  return { grid: [pairs * ceilDiv(n, quantizedIdMvCudaRows(k, gateUp)), 1, 1], threads: [256, 1, 1] };
}

/**
 * The kernel of the typed vector forms: quantized_mv_id_gc_<t> and
 * quantized_gate_up_mv_id_gc_<t> (ours) where the group-column path takes
 * the sizes (their CUDA entries are that path alone, at 128 registers; the
 * Metal ones the crate's kernels under another name), else the crate's
 * quantized_mv_id_<t> and quantized_gate_up_mv_id_<t> (the vector engine,
 * whose 6- and 8-bit rows need its three blocks an SM). dtype: the output's
 * (and the scales'); xF32: x f32, the kernels' _xf32 twins (ours), which
 * round x to dtype as they read it (the CUDA vector engine's at two blocks
 * an SM).
 */
export function quantizedIdMvKernel(op: string, dtype: string, k: number, groupSize: number, bits: number, xF32 = false): string {
  return (quantizedIdGcTakes(k, groupSize, bits) ? `${op}_gc_${dtype}` : `${op}_${dtype}`) + (xF32 ? '_xf32' : '');
}

/**
 * The compact CUDA entry (shaders/cuda/quantized_matmul_id.cu, docs/internals.md
 * "Compact CUDA entries") of a typed vector form's _gc kernel at these
 * sizes: `<kernel>_g<groupSize>_w<quantizedIdGcWarps>`, the group-column
 * path at that group size and warp count alone. Undefined for the other
 * kernels (their own entries run).
 */
export function quantizedIdMvCudaEntry(kernel: string, pairs: number, n: number, k: number, gateUp: boolean, groupSize: number): string | undefined {
  if (!/^quantized_(gate_up_)?mv_id_gc_(f16|bf16)(_xf32)?$/.test(kernel)) return undefined;
  return `${kernel}_g${groupSize}_w${quantizedIdGcWarps(pairs, n, gateUp, k, groupSize)}`;
}

/** Pair rows of a tile of the CUDA matrix engine (64 x 128 weight rows, 4 warps). */
export const QUANTIZED_MM_ID_CUDA_BM = 64;
/** Dynamic shared memory of the CUDA matrix engine: 4 stages of (64 + 128) rows of 40 16-bit values. */
export const QUANTIZED_MM_ID_CUDA_SHARED_BYTES = 4 * (64 + 128) * 40 * 2;
/** Pair rows of a tile of the Metal matrix kernels. */
export const QUANTIZED_MM_ID_METAL_BM = 32;

/** The CUDA matrix engine's launch: a 128-thread block per (tile slot, 128 weight rows; 64 outputs for gate/up). */
export function quantizedIdMmCudaLaunch(pairs: number, n: number, numExperts: number, gateUp: boolean): Launch {
  const slots = moeTileSlots(pairs, numExperts, QUANTIZED_MM_ID_CUDA_BM);
  return {
    grid: [slots * ceilDiv(n, gateUp ? 64 : 128), 1, 1], threads: [128, 1, 1],
    threadgroupMemory: { 0: QUANTIZED_MM_ID_CUDA_SHARED_BYTES },
  };
}

// ---- validation ----

interface TypedArgsBase extends ExpertProductBase {
  /** [m, k]: f16 or bf16 (the output's dtype); f32 in the vector forms */
  x: Buffer;
  /** Columns of x and of the unpacked weight: a multiple of groupSize. */
  k: number;
  /** 32, 64 or 128 */
  groupSize: number;
  /** 4, 6 or 8 */
  bits: number;
}

/** One expert set: u32 packed rows, scales and biases in the output's dtype, numExperts of them expertRows rows apart. */
export interface QuantizedExperts {
  /** u32 [((numExperts - 1) * expertRows + n) * k * bits / 32] */
  weight: Buffer;
  /** [((numExperts - 1) * expertRows + n) * k / groupSize], the output's dtype */
  scales: Buffer;
  /** as scales */
  biases: Buffer;
}

export interface QuantizedMvIdArgs extends TypedArgsBase, QuantizedExperts {
  /** u32 [m, nExpertUsed]: fused_moe_routing's expertIds */
  ids: Buffer;
}

export interface QuantizedMmIdArgs extends TypedArgsBase, QuantizedExperts {
  /** u32 [numExperts + 2]: moe_dispatch_sort's offsets of these ids */
  offsets: Buffer;
  /** u32 [m * nExpertUsed]: moe_dispatch_sort's order */
  order: Buffer;
}

export interface QuantizedGateUpBase extends TypedArgsBase {
  gateWeight: Buffer;
  gateScales: Buffer;
  gateBiases: Buffer;
  upWeight: Buffer;
  upScales: Buffer;
  upBiases: Buffer;
  /** The gate's activation; silu when absent. */
  activation?: GateActivation;
}

export interface QuantizedGateUpMvIdArgs extends QuantizedGateUpBase {
  ids: Buffer;
}

export interface QuantizedGateUpMmIdArgs extends QuantizedGateUpBase {
  offsets: Buffer;
  order: Buffer;
}

/** The vector form's CUDA grid (a block per pair and block of rows) within 2^31 - 1 blocks. */
function checkMvGrid(op: string, pairs: number, n: number, k: number, gateUpForm: boolean, bits: number, groupSize: number): void {
  const blocks = quantizedIdMvCudaLaunch(pairs, n, k, gateUpForm, bits, groupSize).grid[0];
  if (blocks > CUDA_GRID_MAX) {
    throw invalid(op, 'm * nExpertUsed', `small enough for ${CUDA_GRID_MAX} CUDA blocks (one per pair and ${quantizedIdMvCudaRows(k, gateUpForm)} rows)`, pairs);
  }
}

/** The matrix form's CUDA grid (tile slots x column tiles) within 2^31 - 1 blocks. */
function checkMmGrid(op: string, pairs: number, n: number, numExperts: number, gateUpForm: boolean): void {
  const cols = ceilDiv(n, gateUpForm ? 64 : 128);
  if (quantizedIdMmCudaLaunch(pairs, n, numExperts, gateUpForm).grid[0] <= CUDA_GRID_MAX) return;
  const what = `small enough for ${CUDA_GRID_MAX} CUDA blocks (${cols} column tiles x (pairs / 64 + numExperts + 1) tile slots)`;
  if ((numExperts + 1) * cols > CUDA_GRID_MAX) throw invalid(op, 'numExperts', what, numExperts);
  throw invalid(op, 'm * nExpertUsed', what, pairs);
}

function sizesOf(a: TypedArgsBase): IdSizes {
  const rows = a.expertRows ?? a.n;
  return { m: a.m, n: a.n, k: a.k, groupSize: a.groupSize, bits: a.bits, nExpertUsed: a.nExpertUsed, numExperts: a.numExperts,
    weightStride: (rows * a.k * a.bits) / 8, scalesStride: (rows * a.k) / a.groupSize };
}

const QUANTIZED: ExpertFamily<TypedArgsBase & { activation?: GateActivation }> = {
  plan: planOf,
  // The vector forms take f32 x as well (their _xf32 kernels round it to the scales' type as they read it).
  xDtypes: (f) => (f.matrix ? ID_DTYPES : ['f32', ...ID_DTYPES]),
  outputDtype: (of) => (of('x') === 'f32' ? ID_DTYPES : of('x')),
  set: ['weight', 'scales', 'biases'],
  checkSizes(op, a) {
    checkAffineBits(op, a.bits);
    if (!(AFFINE_GROUP_SIZES as readonly number[]).includes(a.groupSize)) throw invalid(op, 'groupSize', '32, 64 or 128', a.groupSize);
    checkMultiple(op, 'k', a.k, a.groupSize, 'groupSize');
  },
  checkGrid: (f, a, pairs) => (f.matrix ? checkMmGrid(f.op, pairs, a.n, a.numExperts, f.gateUp)
    : checkMvGrid(f.op, pairs, a.n, a.k, f.gateUp, a.bits, a.groupSize)),
  expect(op, a, rows) {
    const rowBytes = (a.k * a.bits) / 8;
    const groups = a.k / a.groupSize;
    const weightStride = checkedProduct(op, 'expertRows * k * bits / 8', rows, rowBytes);
    checkAtMost(op, 'expertRows * k * bits / 8', weightStride, U32_MAX, '2^32 - 1 (the params hold the byte stride as a u32)');
    const allRows = checkedProduct(op, '(numExperts - 1) * expertRows + n', a.numExperts - 1, rows) + a.n;
    const nw = checkedProduct(op, 'weight words', allRows, rowBytes / 4);
    const ng = checkedProduct(op, 'scale groups', allRows, groups);
    const t: DtypeOf = (of) => of(of('x') === 'f32' ? 'output' : 'x');
    return [['u32', nw], [t, ng], [t, ng]];
  },
  params: (f, a) => (f.gateUp
    ? packQuantizedGateUpIdParams({ ...sizesOf(a), activation: a.activation })
    : packQuantizedMatmulIdParams(sizesOf(a))),
  launch(f, a, pairs) {
    return f.matrix
      ? { grid: [ceilDiv(a.n, f.gateUp ? 32 : 64), moeTileSlots(pairs, a.numExperts, QUANTIZED_MM_ID_METAL_BM), 1], threads: [128, 1, 1],
        cuda: quantizedIdMmCudaLaunch(pairs, a.n, a.numExperts, f.gateUp) }
      : mvLaunch(f.op, f.gateUp, a, pairs);
  },
};

/** A typed vector form's launch: its kernel, and on CUDA the compact entry of a _gc kernel (quantizedIdMvCudaEntry). */
function mvLaunch(op: string, gateUp: boolean, a: TypedArgsBase, pairs: number): Pick<PlannedDispatch, 'grid' | 'threads'> & { cuda: CudaLaunch; kernel: string } {
  const kernel = quantizedIdMvKernel(op, a.output.dtype, a.k, a.groupSize, a.bits, a.x.dtype === 'f32');
  const entry = quantizedIdMvCudaEntry(kernel, pairs, a.n, a.k, gateUp, a.groupSize);
  const cuda = quantizedIdMvCudaLaunch(pairs, a.n, a.k, gateUp, a.bits, a.groupSize);
  return { grid: [ceilDiv(a.n, 8), pairs, 1], threads: [32, 2, 1], cuda: entry === undefined ? cuda : { ...cuda, entry }, kernel };
}

const mvId = expertProductOp<TypedArgsBase, QuantizedMvIdArgs>(QUANTIZED, { op: 'quantized_mv_id', matrix: false, gateUp: false });
const mmId = expertProductOp<TypedArgsBase, QuantizedMmIdArgs>(QUANTIZED, { op: 'quantized_mm_id', matrix: true, gateUp: false });
const gateUpMvId = expertProductOp<TypedArgsBase, QuantizedGateUpMvIdArgs>(QUANTIZED, { op: 'quantized_gate_up_mv_id', matrix: false, gateUp: true });
const gateUpMmId = expertProductOp<TypedArgsBase, QuantizedGateUpMmIdArgs>(QUANTIZED, { op: 'quantized_gate_up_mm_id', matrix: true, gateUp: true });

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateQuantizedMvId = mvId.validate;
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateQuantizedMmId = mmId.validate;
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateQuantizedGateUpMvId = gateUpMvId.validate;
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateQuantizedGateUpMmId = gateUpMmId.validate;

/**
 * quantized_mv_id: y[p, j] = sum_k x[p / U, k] * w_e[j, k] for each pair p
 * (U = nExpertUsed, e = ids[p]), w_e expert e's dequantized weight (MLX's
 * affine format: scale * q + bias per group), products summed in f32, y
 * rounded once; zeros for an id >= numExperts. The vector form: each
 * expert's rows read once per pair (decode: a few tokens, bandwidth-bound).
 *
 * Layouts: x [m, k]; weight u32, scales, biases: numExperts experts of n rows
 * (QuantizedExperts), expertRows apart; ids u32 [m, nExpertUsed]; output
 * [m, nExpertUsed, n]; scales, biases and output f16 or bf16, one dtype; x
 * that dtype, or f32, rounded to it as the kernels read it (the result of
 * casting x first, bit for bit: a model's f32 activations need no cast
 * dispatch); exact element counts; the output overlaps no input. bits 4, 6,
 * 8; groupSize 32, 64, 128 dividing k.
 * Kernels: quantized_mv_id_<dtype>, or for 4-bit codes (quantizedIdMvKernel)
 * quantized_mv_id_gc_<dtype> (ours; on CUDA the group-column path); with
 * f32 x the same names with _xf32 (ours), dtype the output's.
 * Bindings: 0 x, 1 weight, 2 scales, 3 biases, 4 ids, 5 output, 6
 * QuantizedMatmulIdParams (the crate's struct; strides from expertRows).
 * Grid (Metal): (ceil(n / 8), pairs, 1) threadgroups of (32, 2, 1), 4 rows a
 * simdgroup, lanes splitting k. CUDA: quantizedIdMvCudaLaunch (tensor cores:
 * 256 threads over 16-row tiles of one pair, or at 4 bits the group-column
 * path, 128 threads, the eight groups of a round as the mma's columns).
 */
export const quantizedMvId = mvId.op;
/** quantizedMvId's plan: validates, then one dispatch (see quantizedMvId). */
export const planQuantizedMvId = mvId.plan;

/**
 * quantized_mm_id: quantizedMvId's product in the matrix form, over the
 * pairs grouped by expert (moeDispatchSort of the same ids: offsets and
 * order): for each expert, tiles of its pairs (x rows gathered through the
 * order) against its dequantized weight, the outputs scattered back to pair
 * order; an expert without pairs costs an empty tile slot. Prefill.
 *
 * Layouts: as quantizedMvId, with offsets u32 [numExperts + 2] and order u32
 * [m * nExpertUsed] in place of ids (moeDispatchSort's outputs; the group of
 * ids past the experts gets zeros).
 * Kernels: quantized_mm_id_<dtype>. Bindings: 0 x, 1 weight, 2 scales, 3
 * biases, 4 offsets, 5 output, 6 QuantizedMatmulIdParams, 7 order.
 * Grid (Metal): (ceil(n / 64), floor(pairs / 32) + numExperts + 1, 1)
 * threadgroups of 128: a tile of 32 pairs x 64 weight rows, simdgroup
 * matrices. CUDA: quantizedIdMmCudaLaunch (64 pairs x 128 rows, mma.sync).
 */
export const quantizedMmId = mmId.op;
/** quantizedMmId's plan: validates, then one dispatch (see quantizedMmId). */
export const planQuantizedMmId = mmId.plan;

/**
 * quantized_gate_up_mv_id: the fused gate/up projection of the experts,
 * y[p, j] = act(sum_k x[p / U, k] g_e[j, k]) * sum_k x[p / U, k] u_e[j, k],
 * g and u the gate and up weights of expert e = ids[p] (one pass over x),
 * act silu (default; SwiGLU, Qwen3.6) or gelu_tanh (GeGLU, Gemma 4); f32
 * sums, y rounded once; zeros for an id >= numExperts.
 *
 * Layouts: as quantizedMvId, with gate* and up* expert sets of one shape.
 * Kernels: quantized_gate_up_mv_id_<dtype>, or for 4-bit codes
 * quantized_gate_up_mv_id_gc_<dtype>, with _xf32 for f32 x (as quantizedMvId). Bindings: 0 x, 1 gate_weight, 2
 * gate_scales, 3 gate_biases, 4 ids, 5 output, 6 QuantizedGateUpIdParams, 7
 * up_weight, 8 up_scales, 9 up_biases.
 * Grid: as quantizedMvId (CUDA: 8 output rows a tile, their gate and up rows
 * as the mma's 16).
 */
export const quantizedGateUpMvId = gateUpMvId.op;
/** quantizedGateUpMvId's plan: validates, then one dispatch (see quantizedGateUpMvId). */
export const planQuantizedGateUpMvId = gateUpMvId.plan;

/**
 * quantized_gate_up_mm_id: quantizedGateUpMvId's product in the matrix form
 * over the pairs grouped by expert (as quantizedMmId).
 *
 * Layouts: as quantizedGateUpMvId with offsets and order in place of ids.
 * Kernels: quantized_gate_up_mm_id_<dtype>. Bindings: 0 x, 1 gate_weight, 2
 * gate_scales, 3 gate_biases, 4 offsets, 5 output, 6 QuantizedGateUpIdParams,
 * 7 order, 8 up_weight, 9 up_scales, 10 up_biases.
 * Grid (Metal): (ceil(n / 32), floor(pairs / 32) + numExperts + 1, 1)
 * threadgroups of 128: 32 pairs x (32 gate + 32 up rows). CUDA:
 * quantizedIdMmCudaLaunch (64 pairs x 64 outputs, gate and up columns
 * interleaved by 8).
 */
export const quantizedGateUpMmId = gateUpMmId.op;
/** quantizedGateUpMmId's plan: validates, then one dispatch (see quantizedGateUpMmId). */
export const planQuantizedGateUpMmId = gateUpMmId.plan;

// ---- mlx-native's quantized_matmul_id ----

/** mlx-native's arguments (its QuantizedMatmulIdParams' sizes), with the output it would allocate given here. */
export interface QuantizedMatmulIdArgs extends QuantizedMatmulSizes {
  /** f32 [m, k] at least */
  input: Buffer;
  /** u32 or u8: numExperts experts of n rows of quantizedRowBytes(k, bits) bytes, contiguous, at least */
  weight: Buffer;
  /** bf16 [numExperts, n, ceil(k / groupSize)] at least */
  scales: Buffer;
  /** bf16, as scales */
  biases: Buffer;
  /** u32 [m, nExpertUsed] at least */
  ids: Buffer;
  /** f32 [m, nExpertUsed, n] at least; output */
  output: Buffer;
  nExpertUsed: number;
  numExperts: number;
}

/**
 * Throws MlxError('InvalidArgument') naming the argument unless the
 * arguments fit: mlx-native's rules (bits 4, 6 or 8; m, k, n, groupSize,
 * nExpertUsed, numExperts > 0; each buffer at least its size: the weight
 * numExperts * n * quantizedRowBytes(k, bits) bytes, scales and biases
 * numExperts * n * ceil(k / groupSize) bf16), with the u32 fields' bounds
 * (the expert strides too), dtypes and no aliasing.
 */
export function validateQuantizedMatmulId(a: QuantizedMatmulIdArgs, device?: Device): void {
  const op = 'quantized_matmul_id';
  checkAffineBits(op, a.bits);
  for (const arg of ['m', 'k', 'n', 'groupSize', 'nExpertUsed', 'numExperts'] as const) checkU32Count(op, arg, a[arg]);
  const pairs = checkPairs(op, a.m, a.nExpertUsed);
  const expertBytes = checkedProduct(op, 'n * row bytes', a.n, quantizedRowBytes(a.k, a.bits));
  checkAtMost(op, 'n * row bytes', expertBytes, U32_MAX, '2^32 - 1 (the params hold the expert stride as a u32)');
  const expertGroups = checkedU32Product(op, 'n * ceil(k / groupSize)', a.n, ceilDiv(a.k, a.groupSize));
  const nw = checkedProduct(op, 'numExperts * n * row bytes', a.numExperts, expertBytes);
  const ng = checkedProduct(op, 'numExperts * n * ceil(k / groupSize)', a.numExperts, expertGroups);
  const nx = checkedProduct(op, 'm * k', a.m, a.k);
  const ny = checkedProduct(op, 'm * nExpertUsed * n', pairs, a.n);
  checkMvGrid(op, pairs, a.n, a.k, false, a.bits, a.groupSize);
  const rules: BufferRule[] = [
    ['input', a.input, 'f32', nx],
    ['weight', a.weight, ['u32', 'u8'], { bytes: nw, of: `${a.numExperts} experts of ${a.n} rows of ${quantizedRowBytes(a.k, a.bits)} bytes` }],
    ['scales', a.scales, 'bf16', ng], ['biases', a.biases, 'bf16', ng], ['ids', a.ids, 'u32', pairs], ['output', a.output, 'f32', ny],
  ];
  checkBufferRules(op, rules, device, true);
  checkNoAliasing(op, ruleBindings(rules), ['output'], 'every output row reads the input and weights that other rows read too');
}

/**
 * quantized_matmul_id (mlx-native's): output[p, j] = sum_k x[p / U, k] *
 * w_e[j, k], e = ids[p], U = nExpertUsed; f32 input (rounded to bf16 before
 * the products, as the crate does) and output, bf16 scales and biases, any k
 * and group size (rows of quantizedRowBytes(k, bits) bytes, ceil(k /
 * groupSize) groups), experts contiguous (the crate's strides); products
 * summed in f32 (on CUDA's tensor cores the weight reaches them in bf16).
 * An id >= numExperts gives a row of zeros (the crate leaves it unwritten).
 *
 * Rules: mlx-native's (validateQuantizedMatmulId). Bindings: 0 input, 1
 * weight, 2 scales, 3 biases, 4 ids, 5 output, 6 QuantizedMatmulIdParams.
 * Grid (Metal): one thread per output, (ceil(n / 16), ceil(pairs / 16), 1)
 * threadgroups of (min(16, n), min(16, pairs), 1), as the crate's. CUDA: the
 * vector engine (quantizedIdMvCudaLaunch) on MLX's layouts, a thread per
 * output on the others.
 */
export function quantizedMatmulId(enc: Encoder, args: QuantizedMatmulIdArgs): void {
  record(enc, planQuantizedMatmulId(args, enc.device.limits, enc.device));
}

/** quantizedMatmulId's plan: validates, then one dispatch (see quantizedMatmulId). */
export function planQuantizedMatmulId(a: QuantizedMatmulIdArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateQuantizedMatmulId(a, device);
  const pairs = a.m * a.nExpertUsed;
  const tx = Math.min(16, a.n), ty = Math.min(16, pairs);
  return planOf({
    kernel: 'quantized_matmul_id',
    buffers: [a.input, a.weight, a.scales, a.biases, a.ids, a.output],
    bytes: [, , , , , , packQuantizedMatmulIdParams({
      m: a.m, n: a.n, k: a.k, groupSize: a.groupSize, bits: a.bits, nExpertUsed: a.nExpertUsed, numExperts: a.numExperts,
      weightStride: a.n * quantizedRowBytes(a.k, a.bits), scalesStride: a.n * ceilDiv(a.k, a.groupSize),
    })],
    grid: [ceilDiv(a.n, tx), ceilDiv(pairs, ty), 1],
    threads: [tx, ty, 1],
    cuda: quantizedIdMvCudaLaunch(pairs, a.n, a.k, false, a.bits, a.groupSize),
  });
}

// ---- the float64 reference ----

// CPU reference of the quantized_matmul_id family: the experts dequantized
// in float64 (MLX's affine format, ts/ops/quantized_matmul.ts), then the
// per-pair products of ts/ops/dense_matmul_id.ts.

/** The experts of one buffer set: every expert's n rows, expert e's first row at row e * expertRows. */
export interface AffineExpertsRef {
  /** The packed rows of all experts (affinePack's layout), ((E - 1) * expertRows + n) rows. */
  packed: Uint8Array;
  scales: ArrayLike<number>;
  biases: ArrayLike<number>;
}

export interface QuantizedIdSizesRef extends IdSizesRef {
  groupSize: number;
  bits: number;
}

/** Every expert's dequantized rows, [rows of the buffer, k] in float64. */
function dequantizeAll(ex: AffineExpertsRef, s: QuantizedIdSizesRef): Float64Array {
  const rows = (s.numExperts - 1) * (s.expertRows ?? s.n) + s.n;
  return affineDequantize(ex.packed, ex.scales, ex.biases, rows, s.k, s.groupSize, s.bits);
}

/** quantized_matmul_id's product: denseMatmulIdRef over the dequantized experts (zeros for ids past them). */
export function quantizedMatmulIdRef(x: ArrayLike<number>, ex: AffineExpertsRef, ids: ArrayLike<number>, s: QuantizedIdSizesRef): IdRef {
  return denseMatmulIdRef(x, dequantizeAll(ex, s), ids, s);
}

/** The fused gate/up product: denseGateUpIdRef over the dequantized gate and up experts. */
export function quantizedGateUpIdRef(x: ArrayLike<number>, gate: AffineExpertsRef, up: AffineExpertsRef, ids: ArrayLike<number>,
  s: QuantizedIdSizesRef, activation: 'silu' | 'gelu_tanh'): IdRef {
  return denseGateUpIdRef(x, dequantizeAll(gate, s), dequantizeAll(up, s), ids, s, activation);
}
