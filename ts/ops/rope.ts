// rope: rotary position embedding, mlx-native's rope family (rope_<dtype>,
// rope_neox_<dtype>). Kernels: shaders/rope.metal and shaders/cuda/rope.cu:
// one thread per rotated pair, and on CUDA for many rows the `_rows` (rope)
// and `_heads` (rope_neox) forms, a thread 4 pairs of 8 rows or heads.

import src from '../../shaders/rope.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/rope.cu' with { type: 'text' };
import header from '../../shaders/rope.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { DType } from '../dtype.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBuffer, checkDtype, checkedProduct, checkedU32Product, checkElements, checkMultiple, checkNoAliasing, checkPositive, F32_MAX, invalid, U32_MAX,
} from '../validate.ts';
import { familyPlans, record, type CudaLaunch, type OpPlan, type PlannedDispatch } from '../plan.ts';

export const ROPE_FAMILY = 'rope';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const ROPE_SOURCES = familySources(ROPE_FAMILY, { header, metal: src, cuda: cudaSrc });
export const ROPE_KERNELS = ['rope_f32', 'rope_f16', 'rope_bf16', 'rope_neox_f32', 'rope_neox_f16', 'rope_neox_bf16'] as const;
const planOf = familyPlans({ family: ROPE_FAMILY, sources: ROPE_SOURCES, kernels: ROPE_KERNELS });
/** Pairs per threadgroup row at most (mlx-native's 64). */
export const ROPE_MAX_PAIR_THREADS = 64;
/** The largest head dimension: RopeParams carries dimensions as f32, exact up to 2^24. */
export const ROPE_MAX_HEAD_DIM = 2 ** 24;

/** struct RopeParams (buffer 2): mlx-native's float4 (theta, head_dim, rope_dim, 0). */
export const ROPE_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'RopeParams');
/** struct RopeNeoxParams (buffer 4 of rope_neox_*): (n_heads, has_freq_factors). */
export const ROPE_NEOX_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'RopeNeoxParams');

export function packRopeParams(p: { theta: number; headDim: number; ropeDim?: number }): Uint8Array {
  return packFields(ROPE_PARAMS_LAYOUT, { theta: p.theta, head_dim: p.headDim, rope_dim: p.ropeDim ?? 0, reserved: 0 });
}
export function packRopeNeoxParams(p: { nHeads: number; hasFreqFactors: boolean }): Uint8Array {
  return packFields(ROPE_NEOX_PARAMS_LAYOUT, { n_heads: p.nHeads, has_freq_factors: p.hasFreqFactors ? 1 : 0 });
}

export interface RopeArgs {
  /** [seqLen, headDim], f32, f16 or bf16 */
  input: Buffer;
  /** [seqLen, headDim] in input's dtype, output; may be input (in place) */
  output: Buffer;
  /** [seqLen] u32, or i32 read as its bits (values >= 0): the position of each row */
  positions: Buffer;
  /** Rows (one position each). Several heads of a token: one row each, the position repeated. */
  seqLen: number;
  /** Elements per row, even; every pair (x[2i], x[2i+1]) is rotated. */
  headDim: number;
  /** Frequency base: pair i turns by pos * theta^(-2i / headDim). */
  theta: number;
}

export interface RopeNeoxArgs {
  /** [seqLen * nHeads, headDim] (token-major), f32, f16 or bf16 */
  input: Buffer;
  /** as input, output; may be input (in place) */
  output: Buffer;
  /** [seqLen] u32, or i32 read as its bits (values >= 0): the position of each token */
  positions: Buffer;
  /** [ropeDim / 2] f32, optional (not for bf16, as mlx-native): pair i's frequency is divided by freqFactors[i] */
  freqFactors?: Buffer;
  seqLen: number;
  nHeads: number;
  /** Elements per row, even. */
  headDim: number;
  /** Rotated elements, even, in (0, headDim]: pairs (x[i], x[i + headDim/2]) for i < ropeDim / 2. */
  ropeDim: number;
  /** Frequency base: pair i turns by pos * theta^(-2i / headDim) / freqFactors[i]. */
  theta: number;
}

/** theta (the frequency base) is a finite f32 > 0. */
export function checkTheta(op: string, theta: number): void {
  if (typeof theta !== 'number' || !Number.isFinite(theta) || theta <= 0 || theta > F32_MAX) {
    throw invalid(op, 'theta', 'a finite f32 > 0', theta);
  }
}

function checkHeadDim(op: string, headDim: number): void {
  checkPositive(op, 'headDim', headDim);
  checkMultiple(op, 'headDim', headDim, 2);
  checkAtMost(op, 'headDim', headDim, ROPE_MAX_HEAD_DIM, '2^24');
}

/**
 * The input, output and positions of a rope op, with its optional buffers
 * checked live alongside, in phases: every one a live buffer, then the dtypes
 * (input one of `dtypes`, output input's, positions u32 or i32), then the
 * counts (n in and out, seqLen positions).
 */
export function checkRopeBuffers(op: string, a: { input: Buffer; output: Buffer; positions: Buffer }, dtypes: readonly DType[], n: number,
  seqLen: number, device?: Device, optional: readonly (readonly [string, Buffer | undefined])[] = []): void {
  checkBuffer(op, 'input', a.input, device);
  checkBuffer(op, 'output', a.output, device);
  checkBuffer(op, 'positions', a.positions, device);
  for (const [arg, b] of optional) if (b !== undefined) checkBuffer(op, arg, b, device);
  checkDtype(op, 'input', a.input, dtypes);
  checkDtype(op, 'output', a.output, a.input.dtype);
  checkDtype(op, 'positions', a.positions, ['u32', 'i32']);
  checkElements(op, 'input', a.input, n);
  checkElements(op, 'output', a.output, n);
  checkElements(op, 'positions', a.positions, seqLen);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateRope(a: RopeArgs, device?: Device): void {
  const op = 'rope';
  checkPositive(op, 'seqLen', a.seqLen);
  checkAtMost(op, 'seqLen', a.seqLen, U32_MAX, '2^32 - 1');
  checkHeadDim(op, a.headDim);
  checkTheta(op, a.theta);
  const n = checkedProduct(op, 'seqLen * headDim', a.seqLen, a.headDim);
  checkRopeBuffers(op, a, ['f32', 'f16', 'bf16'], n, a.seqLen, device);
  // In place (output over exactly input) is safe: each pair is read, then
  // written, by one thread. A partial overlap is not.
  checkNoAliasing(op, [['input', a.input], ['output', a.output], ['positions', a.positions]], ['output'],
    'rows of output over other rows of input', [['output', 'input']]);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateRopeNeox(a: RopeNeoxArgs, device?: Device): void {
  const op = 'rope_neox';
  checkPositive(op, 'seqLen', a.seqLen);
  checkPositive(op, 'nHeads', a.nHeads);
  checkAtMost(op, 'seqLen', a.seqLen, U32_MAX, '2^32 - 1');
  checkAtMost(op, 'nHeads', a.nHeads, U32_MAX, '2^32 - 1');
  checkHeadDim(op, a.headDim);
  checkPositive(op, 'ropeDim', a.ropeDim);
  checkMultiple(op, 'ropeDim', a.ropeDim, 2);
  checkAtMost(op, 'ropeDim', a.ropeDim, a.headDim, 'headDim');
  checkTheta(op, a.theta);
  const rows = checkedU32Product(op, 'seqLen * nHeads', a.seqLen, a.nHeads);
  const n = checkedProduct(op, 'seqLen * nHeads * headDim', a.seqLen, a.nHeads, a.headDim);
  checkRopeBuffers(op, a, ['f32', 'f16', 'bf16'], n, a.seqLen, device, [['freqFactors', a.freqFactors]]);
  if (a.freqFactors !== undefined) {
    if (a.input.dtype === 'bf16') {
      throw invalid(op, 'freqFactors', 'absent for bf16 input (rope_neox_bf16 takes none)', 'a buffer');
    }
    checkDtype(op, 'freqFactors', a.freqFactors, 'f32');
    checkElements(op, 'freqFactors', a.freqFactors, a.ropeDim / 2);
  }
  checkNoAliasing(op, [['input', a.input], ['output', a.output], ['positions', a.positions], ['freqFactors', a.freqFactors]],
    ['output'], 'rows of output over other rows of input', [['output', 'input']]);
}

/**
 * The launch of `pairs` threads per row over `rows` rows: (min(64, pairs), ty)
 * threads, ty in {4, 2, 1} the largest dividing rows, so the rows need no
 * bounds check (mlx-native dispatches exact threads). Metal: pairs on x, rows
 * on y; CUDA: rows on the grid's x (gridDim.y stops at 65535).
 */
/** Heads of a token one CUDA thread of rope_neox and rope_multi holds (common.cuh's ROPE_HEADS). */
export const ROPE_HEADS = 8;
/** Consecutive pairs one CUDA thread of rope_neox and rope_multi holds (common.cuh's ROPE_PAIRS). */
export const ROPE_PAIRS = 4;

/**
 * The CUDA heads form of rope_neox and rope_multi (`<kernel>_heads`, from
 * ROPE_HEADS_MIN_TOKENS tokens) over rows of headDim / 2 =
 * halfDim pairs (the rotated ones and those past ropeDim / 2): grid (seqLen,
 * ceil(units / tx)) of (tx, ty) = (min(64, units), ceil(nHeads / ROPE_HEADS))
 * threads, units = ceil(halfDim / ROPE_PAIRS), a thread ROPE_PAIRS pairs of
 * ROPE_HEADS heads of its token (ty at most 1024 / tx; the kernels loop over
 * the heads past them).
 */
export function ropeHeadsCudaLaunch(kernel: string, halfDim: number, seqLen: number, nHeads: number): CudaLaunch {
  const units = Math.ceil(halfDim / ROPE_PAIRS);
  const tx = Math.min(ROPE_MAX_PAIR_THREADS, units);
  const ty = Math.min(Math.ceil(nHeads / ROPE_HEADS), Math.floor(1024 / tx));
  return { grid: [seqLen, Math.ceil(units / tx), 1], threads: [tx, ty, 1], entry: `${kernel}_heads` };
}

/**
 * Tokens from which rope_neox, rope_multi and fused_head_norm_rope take their
 * CUDA heads form: below, the one-pair (or one-row) threads' shorter chains
 * win (a decode token: 3.0-4.1 us against 4.6-6.9 on an H100,
 * bench/results/rope-h100-2026-11-28.md).
 */
export const ROPE_HEADS_MIN_TOKENS = 16;

export function ropeLaunch(pairs: number, rows: number): Pick<PlannedDispatch, 'grid' | 'threads' | 'cuda'> {
  const tx = Math.min(ROPE_MAX_PAIR_THREADS, pairs);
  const ty = rows % 4 === 0 ? 4 : rows % 2 === 0 ? 2 : 1;
  const px = Math.ceil(pairs / tx);
  return {
    grid: [px, rows / ty, 1],
    threads: [tx, ty, 1],
    cuda: { grid: [rows / ty, px, 1], threads: [tx, ty, 1] },
  };
}

/**
 * rope (normal pairing, mlx-native's rope_<dtype>): every pair (x[2i], x[2i+1])
 * of row r turns by angle = positions[r] * theta^(-2i / headDim):
 *   (a, b) -> (a cos - b sin, a sin + b cos), in f32.
 *
 * Layouts: input, output [seqLen, headDim], one dtype: f32, f16 or bf16;
 * positions [seqLen] u32 (or i32 >= 0). output may be input.
 * Bindings: 0 input, 1 output, 2 RopeParams (theta, headDim, 0, 0), 3 positions.
 * Grid: (ceil(headDim/2 / tx), seqLen / ty) threadgroups of (tx, ty) = (min(64, headDim/2), 4|2|1);
 * on CUDA the rows form where ropeRowsCudaLaunch takes the rows.
 */
export function rope(enc: Encoder, args: RopeArgs): void {
  record(enc, planRope(args, enc.device.limits, enc.device));
}

/** rope's plan: validates, then one dispatch (see rope). */
export function planRope(a: RopeArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateRope(a, device);
  const rows = ropeRowsCudaLaunch(`rope_${a.input.dtype}`, a.headDim, a.seqLen);
  return planOf({
    kernel: `rope_${a.input.dtype}`,
    buffers: [a.input, a.output, , a.positions],
    bytes: [, , packRopeParams({ theta: a.theta, headDim: a.headDim })],
    ...ropeLaunch(a.headDim / 2, a.seqLen),
    ...(rows ? { cuda: rows } : {}),
  });
}

/**
 * The CUDA rows form of rope (`<kernel>_rows`, shaders/cuda/rope.cu) where
 * the rows are at least ROPE_HEADS_MIN_TOKENS * ROPE_HEADS and a multiple of
 * ROPE_HEADS: a thread two chunks of ROPE_PAIRS elements (two pairs each),
 * blockDim.x chunks apart, of ROPE_HEADS consecutive rows, each pair's
 * divisor formed once and each (cos, sin) once a run of rows of one
 * position. Grid (rows / ROPE_HEADS / ty, ceil(chunks / 2 / tx)) of (tx, ty)
 * = (min(64, ceil(chunks / 2)), the largest power of two up to 256 / tx
 * dividing rows / ROPE_HEADS), chunks = ceil(headDim / ROPE_PAIRS): the grid
 * covers the rows exactly, as the kernel has no row count. undefined below
 * those rows.
 */
export function ropeRowsCudaLaunch(kernel: string, headDim: number, rows: number): CudaLaunch | undefined {
  if (rows < ROPE_HEADS_MIN_TOKENS * ROPE_HEADS || rows % ROPE_HEADS !== 0) return undefined;
  const units = Math.ceil(Math.ceil(headDim / ROPE_PAIRS) / 2);
  const tx = Math.min(ROPE_MAX_PAIR_THREADS, units);
  const groups = rows / ROPE_HEADS;
  let ty = 1;
  while (ty * 2 * tx <= 256 && groups % (ty * 2) === 0) ty *= 2;
  return { grid: [groups / ty, Math.ceil(units / tx), 1], threads: [tx, ty, 1], entry: `${kernel}_rows` };
}

/**
 * ropeNeox (split pairing, mlx-native's rope_neox_<dtype>, MLX's
 * traditional=False): in each row, pair i = (x[i], x[i + headDim/2]) turns by
 *   angle = positions[token] * theta^(-2i / headDim) / freqFactors[i]
 * for i < ropeDim / 2; the other pairs are copied (partial rotary). The
 * exponent's denominator is headDim, not ropeDim, as mlx-lm's proportional
 * rope (Gemma 4's global layers); freqFactors (f32, f16) scale frequencies
 * (linear scaling: all factors equal; a factor of 1e30 turns a pair off).
 * Partial rotary here is Gemma 4's (MLX's split at headDim/2), not Hugging
 * Face's Qwen3.5 form, which pairs (x[i], x[i + ropeDim/2]) inside the first
 * ropeDim elements; the two agree when ropeDim = headDim.
 *
 * Layouts: input, output [seqLen, nHeads, headDim], one dtype: f32, f16 or
 * bf16; positions [seqLen] u32 (or i32 >= 0); freqFactors [ropeDim/2] f32.
 * output may be input.
 * Bindings: 0 input, 1 output, 2 RopeParams (theta, headDim, ropeDim, 0),
 * 3 positions, 4 RopeNeoxParams (nHeads, hasFreqFactors), 5 freqFactors
 * (f32, f16; input bound in its place when absent, never read).
 * Grid: (ceil(ropeDim/2 / tx), seqLen * nHeads / ty) threadgroups of
 * (tx, ty) = (min(64, ropeDim/2), 4|2|1); on CUDA from ROPE_HEADS_MIN_TOKENS
 * tokens the heads form (ropeHeadsCudaLaunch).
 */
export function ropeNeox(enc: Encoder, args: RopeNeoxArgs): void {
  record(enc, planRopeNeox(args, enc.device.limits, enc.device));
}

/** ropeNeox's plan: validates, then one dispatch (see ropeNeox). */
export function planRopeNeox(a: RopeNeoxArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateRopeNeox(a, device);
  const dtype = a.input.dtype;
  const hasFreqFactors = a.freqFactors !== undefined;
  const buffers: (Buffer | undefined)[] = [a.input, a.output, , a.positions];
  if (dtype !== 'bf16') buffers[5] = a.freqFactors ?? a.input;
  return planOf({
    kernel: `rope_neox_${dtype}`,
    buffers,
    bytes: [, , packRopeParams(a), , packRopeNeoxParams({ nHeads: a.nHeads, hasFreqFactors })],
    ...ropeLaunch(a.ropeDim / 2, a.seqLen * a.nHeads),
    ...(a.seqLen >= ROPE_HEADS_MIN_TOKENS ? { cuda: ropeHeadsCudaLaunch(`rope_neox_${dtype}`, a.headDim / 2, a.seqLen, a.nHeads) } : {}),
  });
}

// ---- the float64 reference ----

// CPU reference of rope: the closed form in float64.

/** The angle of pair i at pos: pos * theta^(-2i / headDim) / ff. */
export function ropeAngle(pos: number, i: number, headDim: number, theta: number, ff = 1): number {
  return pos * theta ** (-2 * i / headDim) / ff;
}

/** rope (normal pairing): rows [seqLen, headDim], pairs (x[2i], x[2i+1]), positions[row]. */
export function ropeRef(x: ArrayLike<number>, positions: ArrayLike<number>, seqLen: number, headDim: number,
  theta: number): Float64Array {
  const y = new Float64Array(seqLen * headDim);
  for (let r = 0; r < seqLen; r++) {
    for (let i = 0; i < headDim / 2; i++) {
      const t = ropeAngle(positions[r]!, i, headDim, theta);
      const at = r * headDim + 2 * i;
      const a = x[at]!;
      const b = x[at + 1]!;
      y[at] = a * Math.cos(t) - b * Math.sin(t);
      y[at + 1] = a * Math.sin(t) + b * Math.cos(t);
    }
  }
  return y;
}

/**
 * rope_neox (split pairing): rows [seqLen * nHeads, headDim], pairs
 * (x[i], x[i + headDim/2]) rotated for i < ropeDim / 2, copied otherwise;
 * the position of row r is positions[floor(r / nHeads)].
 */
export function ropeNeoxRef(x: ArrayLike<number>, positions: ArrayLike<number>, seqLen: number, nHeads: number,
  headDim: number, ropeDim: number, theta: number, freqFactors?: ArrayLike<number>): Float64Array {
  const y = Float64Array.from(x);
  const half = headDim / 2;
  for (let r = 0; r < seqLen * nHeads; r++) {
    const pos = positions[Math.floor(r / nHeads)]!;
    for (let i = 0; i < ropeDim / 2; i++) {
      const t = ropeAngle(pos, i, headDim, theta, freqFactors === undefined ? 1 : freqFactors[i]!);
      const a = x[r * headDim + i]!;
      const b = x[r * headDim + i + half]!;
      y[r * headDim + i] = a * Math.cos(t) - b * Math.sin(t);
      y[r * headDim + i + half] = a * Math.sin(t) + b * Math.cos(t);
    }
  }
  return y;
}
