// l2_norm: per-row L2 normalization (FLA's l2norm), applied to the gated
// delta net's q and k per head. Kernels: shaders/l2_norm.metal and
// shaders/cuda/l2_norm.cu, one threadgroup per row.

import src from '../../shaders/l2_norm.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/l2_norm.cu' with { type: 'text' };
import header from '../../shaders/l2_norm.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import { dtypeSize, type DType } from '../dtype.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBufferRules, checkedProduct, checkNoAliasing, checkPositive, invalid, like, ruleBindings, U32_MAX, type BufferRule,
} from '../validate.ts';
import { rowLaunch, rowThreadgroup, type LaunchLimits } from '../launch.ts';
import { familyPlans, record, type OpPlan } from '../plan.ts';

export const L2_NORM_FAMILY = 'l2_norm';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const L2_NORM_SOURCES = familySources(L2_NORM_FAMILY, { header, metal: src, cuda: cudaSrc });
export const L2_NORM_KERNELS = ['l2_norm_f32', 'l2_norm_f16', 'l2_norm_bf16'] as const;
const planOf = familyPlans({ family: L2_NORM_FAMILY, sources: L2_NORM_SOURCES, kernels: L2_NORM_KERNELS });
/** Threads per row the op uses at most. */
export const L2_NORM_MAX_THREADS = 256;
/** FLA's default epsilon. */
export const L2_NORM_DEFAULT_EPS = 1e-6;

/** struct L2NormParams (buffer 2). */
export const L2_NORM_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'L2NormParams');

export interface L2NormParams {
  /** Rows, each normalized alone (B * T * heads for q or k). */
  rows: number;
  /** Elements per row (the head dimension). */
  dim: number;
  /** Added to sum(x^2) under the square root; 1e-6 when absent. */
  eps?: number;
}
export interface L2NormBuffers {
  /** [rows, dim], f32, f16 or bf16 */
  x: Buffer;
  /** [rows, dim] in x's dtype, output; may be x (in place) */
  y: Buffer;
}
export interface L2NormArgs extends L2NormBuffers, L2NormParams {}

export function packL2NormParams(p: L2NormParams): Uint8Array {
  return packFields(L2_NORM_PARAMS_LAYOUT, { rows: p.rows, dim: p.dim, eps: p.eps ?? L2_NORM_DEFAULT_EPS });
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateL2Norm(a: L2NormArgs, device?: Device): void {
  const op = 'l2_norm';
  checkPositive(op, 'rows', a.rows);
  checkPositive(op, 'dim', a.dim);
  checkAtMost(op, 'rows', a.rows, U32_MAX, '2^32 - 1');
  checkAtMost(op, 'dim', a.dim, U32_MAX, '2^32 - 1');
  if (a.eps !== undefined && (!Number.isFinite(a.eps) || a.eps < 0)) throw invalid(op, 'eps', 'a finite number >= 0', a.eps);
  const n = checkedProduct(op, 'rows * dim', a.rows, a.dim);
  const rules: BufferRule[] = [['x', a.x, ['f32', 'f16', 'bf16'], n], ['y', a.y, like('x'), n]];
  checkBufferRules(op, rules, device);
  // In place (y over exactly x) is safe: each row is read before it is
  // written, by the one threadgroup that owns it. A partial overlap is not.
  checkNoAliasing(op, ruleBindings(rules), ['y'], 'a row of y over another row of x', [['y', 'x']]);
}

/** Threads per row and the threadgroup(0) bytes (one float per simdgroup, in 16-byte units). */
export function l2NormThreadgroup(dim: number, limits: LaunchLimits): { threads: number; sharedBytes: number } {
  return rowThreadgroup(dim, L2_NORM_MAX_THREADS, limits);
}

/**
 * The CUDA twin's launch (shaders/cuda/l2_norm.cu, a row kernel): rowLaunch's,
 * sized to the row; null: the Metal launch.
 */
export function l2NormCudaLaunch(rows: number, dim: number, dtype: DType, limits: LaunchLimits, multiprocessors = 0): ReturnType<typeof rowLaunch> {
  return rowLaunch(rows, dim, 16 / dtypeSize(dtype), limits, multiprocessors);
}

/**
 * l2_norm: y[r, i] = x[r, i] / sqrt(sum_j x[r, j]^2 + eps), eps inside the
 * square root as FLA's l2norm (default 1e-6); sums in f32.
 *
 * Layouts: x, y [rows, dim], one dtype: f32, f16 or bf16 (l2_norm_<dtype>).
 * y may be x's buffer.
 * Bindings: 0 x, 1 y, 2 L2NormParams; threadgroup(0) one float per simdgroup.
 * Grid: (rows, 1, 1) threadgroups of min(256, nextPow2(dim)) threads; on
 * CUDA l2NormCudaLaunch's.
 */
export function l2Norm(enc: Encoder, args: L2NormArgs): void {
  record(enc, planL2Norm(args, enc.device.limits, enc.device));
}

/** l2Norm's plan: validates, then one dispatch (see l2Norm). */
export function planL2Norm(a: L2NormArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateL2Norm(a, device);
  const { threads, sharedBytes } = l2NormThreadgroup(a.dim, limits);
  const cuda = l2NormCudaLaunch(a.rows, a.dim, a.x.dtype, limits, limits.multiprocessors);
  return planOf({
    kernel: `l2_norm_${a.x.dtype}`,
    buffers: [a.x, a.y],
    bytes: [, , packL2NormParams(a)],
    threadgroupMemory: [sharedBytes],
    grid: [a.rows, 1, 1],
    threads: [threads, 1, 1],
    ...(cuda === null ? {} : { cuda }),
  });
}

// ---- the float64 reference ----

// CPU reference of l2_norm: float64 accumulation.

/** y[r, i] = x[r, i] / sqrt(sum_j x[r, j]^2 + eps), rows of dim. */
export function l2NormRef(x: ArrayLike<number>, rows: number, dim: number, eps: number): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    let sq = 0;
    for (let i = 0; i < dim; i++) sq += x[r * dim + i]! * x[r * dim + i]!;
    const inv = 1 / Math.sqrt(sq + eps);
    for (let i = 0; i < dim; i++) y[r * dim + i] = x[r * dim + i]! * inv;
  }
  return y;
}
