// rms_norm: RMS normalization over rows, with a weight, with Gemma 2/3's
// (1 + weight), or with none; the per-head q/k norm of Qwen3 and Gemma 3/4
// is the same kernel over [tokens * heads, headDim]. Kernel names, bindings
// and the params bytes are mlx-native's (src/ops/rms_norm.rs), with the
// one_plus entries and rms_norm_no_scale_f16 added. Kernels:
// shaders/rms_norm.metal (one threadgroup per row, the crate's launch) and
// shaders/cuda/rms_norm.cu (the same launch, or one of its own sized to the row).

import src from '../../shaders/rms_norm.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/rms_norm.cu' with { type: 'text' };
import header from '../../shaders/rms_norm.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import { dtypeSize, type DType } from '../dtype.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBoolean, checkBuffer, checkDtype, checkedProduct, checkElements, checkNoAliasing, checkPositive, invalid, U32_MAX,
} from '../validate.ts';
import { rowLaunch, rowThreadgroup, type LaunchLimits } from '../launch.ts';
import { familyPlans, record, type OpPlan } from '../plan.ts';

export const RMS_NORM_FAMILY = 'rms_norm';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const RMS_NORM_SOURCES = familySources(RMS_NORM_FAMILY, { header, metal: src, cuda: cudaSrc });
export const RMS_NORM_KERNELS = [
  'rms_norm_f32', 'rms_norm_f16', 'rms_norm_bf16',
  'rms_norm_one_plus_f32', 'rms_norm_one_plus_f16', 'rms_norm_one_plus_bf16',
  'rms_norm_no_scale_f32', 'rms_norm_no_scale_f16', 'rms_norm_no_scale_bf16',
] as const;
const planOf = familyPlans({ family: RMS_NORM_FAMILY, sources: RMS_NORM_SOURCES, kernels: RMS_NORM_KERNELS });
/** Threads per row the op uses at most (mlx-native's). */
export const RMS_NORM_MAX_THREADS = 256;
/** mlx-native's epsilon (Gemma 4). */
export const RMS_NORM_DEFAULT_EPS = 1e-6;
/** The params hold dim as an f32: exact up to 2^24. */
export const RMS_NORM_MAX_DIM = 2 ** 24;

/** The weight dtype each activation dtype takes, as mlx-native binds them. */
export const RMS_NORM_WEIGHT_DTYPE: Readonly<Record<'f32' | 'f16' | 'bf16', DType>> = { f32: 'f32', f16: 'f32', bf16: 'bf16' };

/** struct RmsNormParams (buffer 3, or 2 without a weight). */
export const RMS_NORM_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'RmsNormParams');

export interface RmsNormParams {
  /** Rows, each normalized alone. */
  rows: number;
  /** Elements per row, at most 2^24. */
  dim: number;
  /** Added to mean(x^2) under the square root; 1e-6 when absent. */
  eps?: number;
  /** Scale by (1 + weight) (Gemma 2/3 norm weights) rather than weight. */
  onePlus?: boolean;
}
export interface RmsNormBuffers {
  /** [rows, dim], f32, f16 or bf16 */
  input: Buffer;
  /** [dim]: f32 for f32 and f16 input, bf16 for bf16; absent: no scale */
  weight?: Buffer;
  /** [rows, dim] in input's dtype, output; may be input (in place) */
  output: Buffer;
}
export interface RmsNormArgs extends RmsNormBuffers, RmsNormParams {}

/** The per-head form: [tokens, heads, headDim] normalized over headDim, one weight [headDim] for every head. */
export interface RmsNormPerHeadArgs extends RmsNormBuffers {
  tokens: number;
  heads: number;
  headDim: number;
  eps?: number;
  onePlus?: boolean;
}

export function packRmsNormParams(p: { dim: number; eps?: number }): Uint8Array {
  return packFields(RMS_NORM_PARAMS_LAYOUT, { eps: p.eps ?? RMS_NORM_DEFAULT_EPS, dim: p.dim });
}

/** The rules after the sizes' own; rowsArg and dimArg name what gives rows and dim. */
function validateRows(op: string, a: RmsNormBuffers & { eps?: number; onePlus?: boolean }, rows: number, dim: number,
  rowsArg: string, dimArg: string, device?: Device): void {
  checkAtMost(op, rowsArg, rows, U32_MAX, '2^32 - 1');
  checkAtMost(op, dimArg, dim, RMS_NORM_MAX_DIM, '2^24 (the params hold dim as an f32)');
  if (a.eps !== undefined && (!Number.isFinite(a.eps) || a.eps < 0)) throw invalid(op, 'eps', 'a finite number >= 0', a.eps);
  checkBoolean(op, 'onePlus', a.onePlus, true);
  const n = checkedProduct(op, `${rowsArg} * ${dimArg}`, rows, dim);
  checkBuffer(op, 'input', a.input, device);
  if (a.weight !== undefined) checkBuffer(op, 'weight', a.weight, device);
  else if (a.onePlus === true) throw invalid(op, 'weight', 'a Buffer when onePlus is set', 'absent');
  checkBuffer(op, 'output', a.output, device);
  checkDtype(op, 'input', a.input, ['f32', 'f16', 'bf16']);
  const dt = a.input.dtype as 'f32' | 'f16' | 'bf16';
  checkDtype(op, 'output', a.output, dt);
  if (a.weight !== undefined) checkDtype(op, 'weight', a.weight, RMS_NORM_WEIGHT_DTYPE[dt]);
  checkElements(op, 'input', a.input, n);
  checkElements(op, 'output', a.output, n);
  if (a.weight !== undefined) checkElements(op, 'weight', a.weight, dim);
  // In place (output over exactly input) is safe: each thread reads its
  // elements before it writes them. The weight, which every row reads, is not.
  checkNoAliasing(op, [['input', a.input], ['weight', a.weight], ['output', a.output]], ['output'],
    'a row of output over another row of input, or the weight', [['output', 'input']]);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateRmsNorm(a: RmsNormArgs, device?: Device): void {
  const op = 'rms_norm';
  checkPositive(op, 'rows', a.rows);
  checkPositive(op, 'dim', a.dim);
  validateRows(op, a, a.rows, a.dim, 'rows', 'dim', device);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateRmsNormPerHead(a: RmsNormPerHeadArgs, device?: Device): void {
  const op = 'rms_norm_per_head';
  checkPositive(op, 'tokens', a.tokens);
  checkPositive(op, 'heads', a.heads);
  checkPositive(op, 'headDim', a.headDim);
  validateRows(op, a, checkedProduct(op, 'tokens * heads', a.tokens, a.heads), a.headDim, 'tokens * heads', 'headDim', device);
}

/** Threads per row and the threadgroup(0) bytes (one float per simdgroup, in 16-byte units). */
export function rmsNormThreadgroup(dim: number, limits: LaunchLimits): { threads: number; sharedBytes: number } {
  return rowThreadgroup(dim, RMS_NORM_MAX_THREADS, limits);
}

/** The kernel an argument set runs. */
export function rmsNormKernel(dtype: DType, weighted: boolean, onePlus: boolean): string {
  return weighted ? (onePlus ? `rms_norm_one_plus_${dtype}` : `rms_norm_${dtype}`) : `rms_norm_no_scale_${dtype}`;
}

/**
 * The CUDA twin's launch (shaders/cuda/rms_norm.cu): sized to the row
 * (rowLaunch), rows of up to 32 lanes for dim <= 1024, else one block of
 * ceil(dim / 32) threads (rounded up to 32) per row, or of one 16-byte
 * vector a thread where the rows are fewer than `multiprocessors` (decode);
 * null: the Metal launch.
 */
export function rmsNormCudaLaunch(rows: number, dim: number, dtype: DType, limits: LaunchLimits, multiprocessors = 0): ReturnType<typeof rowLaunch> {
  return rowLaunch(rows, dim, 16 / dtypeSize(dtype), limits, multiprocessors);
}

function planRows(a: RmsNormBuffers & { eps?: number; onePlus?: boolean }, rows: number, dim: number, limits: DeviceLimits): OpPlan {
  const { threads, sharedBytes } = rmsNormThreadgroup(dim, limits);
  const params = packRmsNormParams({ dim, eps: a.eps });
  const weighted = a.weight !== undefined;
  const cuda = rmsNormCudaLaunch(rows, dim, a.input.dtype, limits, limits.multiprocessors);
  return planOf({
    kernel: rmsNormKernel(a.input.dtype, weighted, a.onePlus === true),
    buffers: weighted ? [a.input, a.weight, a.output] : [a.input, a.output],
    bytes: weighted ? [, , , params] : [, , params],
    threadgroupMemory: [sharedBytes],
    grid: [rows, 1, 1],
    threads: [threads, 1, 1],
    ...(cuda === null ? {} : { cuda }),
  });
}

/**
 * rms_norm: y[r, i] = x[r, i] / sqrt(mean_j x[r, j]^2 + eps) * s[i], with
 * s = weight, 1 + weight (onePlus) or 1 (no weight); eps 1e-6 when absent;
 * sums in f32.
 *
 * Layouts: input, output [rows, dim], one dtype: f32, f16 or bf16; weight
 * [dim], f32 for f32 and f16 input, bf16 for bf16 (mlx-native's binding).
 * output may be input's buffer.
 * Kernels: rms_norm_<dtype>, rms_norm_one_plus_<dtype>, rms_norm_no_scale_<dtype>.
 * Bindings: 0 input, 1 weight, 2 output, 3 RmsNormParams (eps, dim as f32);
 * without a weight 0 input, 1 output, 2 RmsNormParams. threadgroup(0) one
 * float per simdgroup.
 * Grid: (rows, 1, 1) threadgroups of min(256, nextPow2(dim)) threads; the
 * CUDA twin's launch is sized to the row (rmsNormCudaLaunch): rows of up to
 * 32 lanes where dim <= 1024, else a block of about dim / 32 threads.
 */
export function rmsNorm(enc: Encoder, args: RmsNormArgs): void {
  record(enc, planRmsNorm(args, enc.device.limits, enc.device));
}

/** rmsNorm's plan: validates, then one dispatch (see rmsNorm). */
export function planRmsNorm(a: RmsNormArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateRmsNorm(a, device);
  return planRows(a, a.rows, a.dim, limits);
}

/**
 * rms_norm_per_head: the q/k norm of Qwen3 and Gemma 3/4. input, output
 * [tokens, heads, headDim], each head's vector normalized alone and scaled by
 * one weight [headDim] (or 1 + weight, or none): rmsNorm at rows = tokens * heads,
 * dim = headDim, the same kernels, bindings and grid.
 */
export function rmsNormPerHead(enc: Encoder, args: RmsNormPerHeadArgs): void {
  record(enc, planRmsNormPerHead(args, enc.device.limits, enc.device));
}

/** rmsNormPerHead's plan: validates, then one dispatch (see rmsNormPerHead). */
export function planRmsNormPerHead(a: RmsNormPerHeadArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateRmsNormPerHead(a, device);
  return planRows(a, a.tokens * a.heads, a.headDim, limits);
}

// ---- the float64 reference ----

// CPU reference of rms_norm: float64 accumulation.

/**
 * y[r, i] = x[r, i] / sqrt(mean_j x[r, j]^2 + eps) * s[i], rows of dim, with
 * s = weight, 1 + weight (onePlus) or 1 (weight null).
 */
export function rmsNormRef(x: ArrayLike<number>, weight: ArrayLike<number> | null, rows: number, dim: number, eps: number,
  onePlus = false): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    let sq = 0;
    for (let i = 0; i < dim; i++) sq += x[r * dim + i]! * x[r * dim + i]!;
    const inv = 1 / Math.sqrt(sq / dim + eps);
    for (let i = 0; i < dim; i++) {
      const s = weight === null ? 1 : onePlus ? 1 + weight[i]! : weight[i]!;
      y[r * dim + i] = x[r * dim + i]! * inv * s;
    }
  }
  return y;
}
