// Fused RMS norm + residual ops (Gemma 4 sub-layer boundaries).
// Kernels: shaders/fused_norm.metal. One threadgroup per row.

import src from '../../shaders/fused_norm.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/fused_norm.cu' with { type: 'text' };
import header from '../../shaders/fused_norm.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField, type ParamType } from '../params.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBuffer, checkDtype, checkElements, checkNoAliasing, checkPositive, checkedProduct, invalid,
} from '../validate.ts';
import { rowThreadgroup, type LaunchLimits } from '../launch.ts';
import { familyPlans, record, type OpPlan } from '../plan.ts';
import { rmsNormRef } from './rms_norm.ts';

export const FUSED_NORM_FAMILY = 'fused_norm';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const FUSED_NORM_SOURCES = familySources(FUSED_NORM_FAMILY, { header, metal: src, cuda: cudaSrc });
export const FUSED_NORM_KERNELS = [
  'fused_norm_add_f32',
  'fused_norm_add_bf16',
  'fused_residual_norm_f32',
  'fused_residual_norm_bf16',
  'fused_residual_norm_scalar_f32',
  'fused_norm_add_scalar_f32',
  'fused_norm_add_norms_f32',
  'fused_norm_moe_sum_f32',
  'fused_norm_moe_sum_bf16_input',
] as const;
const planOf = familyPlans({ family: FUSED_NORM_FAMILY, sources: FUSED_NORM_SOURCES, kernels: FUSED_NORM_KERNELS });

/** Kernels index rows * dim elements with 32-bit unsigned integers. */
export const MAX_ELEMENTS_U32 = 0xffff_ffff;
/** Threads per threadgroup the ops use at most (one row per threadgroup). */
export const FUSED_NORM_MAX_THREADS = 256;

/** One scalar argument bound by itself at a buffer index. */
export interface ScalarArg {
  readonly name: string;
  readonly type: ParamType;
  readonly binding: number;
}

/** The (dim, rows, eps) scalars of fused_norm_add_{f32,bf16}, bound at 4, 5, 6. */
export const FUSED_NORM_ADD_ARGS: readonly ScalarArg[] = [
  { name: 'dim', type: 'u32', binding: 4 },
  { name: 'rows', type: 'u32', binding: 5 },
  { name: 'eps', type: 'f32', binding: 6 },
];
/** struct FusedResidualNormParams (fused_residual_norm_{f32,bf16}, buffer 5). */
export const FUSED_RESIDUAL_NORM_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FusedResidualNormParams');
/** struct FusedResidualNormScalarF32Params (fused_residual_norm_scalar_f32, buffer 5). */
export const FUSED_RESIDUAL_NORM_SCALAR_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FusedResidualNormScalarF32Params');
/** struct FusedNormAddScalarF32Params (fused_norm_add_scalar_f32, buffer 5). */
export const FUSED_NORM_ADD_SCALAR_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FusedNormAddScalarF32Params');
/** struct FusedNormAddNormsF32Params (fused_norm_add_norms_f32, buffer 5). */
export const FUSED_NORM_ADD_NORMS_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FusedNormAddNormsF32Params');
/** struct FusedNormMoeSumParams (fused_norm_moe_sum_{f32,bf16_input}, buffer 6). */
export const FUSED_NORM_MOE_SUM_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FusedNormMoeSumParams');
/** Normed outputs fused_norm_add_norms writes at most. */
export const FUSED_NORM_MAX_NORMS = 3;

/** Shape and epsilon shared by every fused norm op. */
export interface FusedNormParams {
  /** Rows, each normalized independently. */
  rows: number;
  /** Elements per row. */
  dim: number;
  /** Added to mean(x^2) under the square root. */
  eps: number;
}

export interface FusedNormAddBuffers {
  residual: Buffer;
  input: Buffer;
  weight: Buffer;
  output: Buffer;
}
export interface FusedResidualNormBuffers {
  residual: Buffer;
  input: Buffer;
  weight: Buffer;
  normedOutput: Buffer;
  /** When given, residual + input is also stored here. */
  sumOutput?: Buffer;
}
export interface FusedNormScalarBuffers {
  residual: Buffer;
  input: Buffer;
  weight: Buffer;
  output: Buffer;
  /** One element (applied to all) or dim elements (per column). */
  scalar: Buffer;
}

export interface FusedNormAddNormsBuffers {
  residual: Buffer;
  input: Buffer;
  weight: Buffer;
  output: Buffer;
  /** When given: one element (applied to all) or dim elements (per column), h = (residual + normed input) * scalar. */
  scalar?: Buffer;
  /** The normed outputs of h, written in order: normed0, then normed1, then normed2 (each needs the ones before it). */
  normed0?: Buffer;
  normed1?: Buffer;
  normed2?: Buffer;
  /** normedJ's weight [dim]; absent: normedJ = h * rmsInv(h). */
  normWeight0?: Buffer;
  normWeight1?: Buffer;
  normWeight2?: Buffer;
}
export interface FusedNormMoeSumBuffers {
  /** f32 [rows, dim]: one branch's output (Gemma 4's MLP). */
  input: Buffer;
  /** f32 [dim]: its norm's weight. */
  weight: Buffer;
  /** f32 [rows, topK]: the routing weights. */
  expertW: Buffer;
  /** f32 or bf16 [rows, topK, dim]: the routed experts' outputs, slots in routing order. */
  yExpert: Buffer;
  /** f32 [dim]: the weight of the norm of their weighted sum. */
  moeWeight: Buffer;
  /** f32 [rows, dim]; may be input (in place). */
  output: Buffer;
}

export interface FusedNormAddArgs extends FusedNormAddBuffers, FusedNormParams {}
export interface FusedNormAddNormsArgs extends FusedNormAddNormsBuffers, FusedNormParams {}
export interface FusedNormMoeSumArgs extends FusedNormMoeSumBuffers, FusedNormParams {
  /** Experts a row: the slots of yExpert and expertW. */
  topK: number;
}
export interface FusedResidualNormArgs extends FusedResidualNormBuffers, FusedNormParams {}
export interface FusedNormScalarArgs extends FusedNormScalarBuffers, FusedNormParams {}

export function packFusedNormAddArgs(p: FusedNormParams): (Uint8Array | undefined)[] {
  const u = (v: number) => new Uint8Array(new Uint32Array([v]).buffer);
  const f = (v: number) => new Uint8Array(new Float32Array([v]).buffer);
  return [, , , , u(p.dim), u(p.rows), f(p.eps)];
}
export function packFusedResidualNormParams(p: FusedNormParams & { writeSum: boolean }): Uint8Array {
  return packFields(FUSED_RESIDUAL_NORM_PARAMS_LAYOUT, {
    dim: p.dim, rows: p.rows, eps: p.eps, write_sum: p.writeSum ? 1 : 0,
  });
}
export function packFusedResidualNormScalarParams(p: FusedNormParams & { scalarIsVector: boolean }): Uint8Array {
  return packFields(FUSED_RESIDUAL_NORM_SCALAR_PARAMS_LAYOUT, {
    dim: p.dim, rows: p.rows, eps: p.eps, scalar_is_vector: p.scalarIsVector ? 1 : 0,
  });
}
export function packFusedNormAddScalarParams(p: FusedNormParams & { scalarIsVector: boolean }): Uint8Array {
  return packFields(FUSED_NORM_ADD_SCALAR_PARAMS_LAYOUT, {
    dim: p.dim, rows: p.rows, eps: p.eps, scalar_is_vector: p.scalarIsVector ? 1 : 0,
  });
}

export function packFusedNormAddNormsParams(
  p: FusedNormParams & { scalarMode: 0 | 1 | 2; norms: number; weighted: number },
): Uint8Array {
  return packFields(FUSED_NORM_ADD_NORMS_PARAMS_LAYOUT, {
    dim: p.dim, rows: p.rows, eps: p.eps, scalar_mode: p.scalarMode, norms: p.norms, weighted: p.weighted,
  });
}
export function packFusedNormMoeSumParams(p: FusedNormParams & { topK: number }): Uint8Array {
  return packFields(FUSED_NORM_MOE_SUM_PARAMS_LAYOUT, { dim: p.dim, rows: p.rows, top_k: p.topK, eps: p.eps });
}

/** Rules shared by every fused norm op; returns rows * dim. */
function validateShape(op: string, p: FusedNormParams): number {
  checkPositive(op, 'rows', p.rows);
  checkPositive(op, 'dim', p.dim);
  if (!Number.isFinite(p.eps) || p.eps < 0) throw invalid(op, 'eps', 'a finite number >= 0', p.eps);
  const n = checkedProduct(op, 'rows * dim', p.rows, p.dim);
  checkAtMost(op, 'rows * dim', n, MAX_ELEMENTS_U32, 'the 32-bit index limit');
  return n;
}

/**
 * Every buffer argument is a live buffer (of device when given), and no
 * output is bound as another argument except residual or input: each thread
 * reads its elements of those before it writes its elements of the outputs
 * (the sums of squares are taken first), so a residual stream can be updated
 * in place. Two outputs are never one buffer, nor an output the weight or
 * scalar, which every row reads.
 */
function checkBindings(op: string, bindings: readonly (readonly [string, Buffer | undefined])[], outputs: readonly string[],
  device: Device | undefined): void {
  for (const [arg, b] of bindings) if (b !== undefined || !optionalOutputs.includes(arg)) checkBuffer(op, arg, b, device);
  const inPlace = outputs.flatMap((o) => [[o, 'residual'], [o, 'input']] as const);
  checkNoAliasing(op, bindings, outputs, 'only residual or input may be updated in place', inPlace);
}
const optionalOutputs = ['sumOutput', 'scalar', 'normed0', 'normed1', 'normed2', 'normWeight0', 'normWeight1', 'normWeight2'];

export function validateFusedNormAdd(b: FusedNormAddArgs, device?: Device): void {
  const op = 'fused_norm_add';
  const n = validateShape(op, b);
  checkBindings(op, [['residual', b.residual], ['input', b.input], ['weight', b.weight], ['output', b.output]], ['output'], device);
  checkDtype(op, 'input', b.input, ['f32', 'bf16']);
  const dt = b.input.dtype;
  checkDtype(op, 'residual', b.residual, dt);
  checkDtype(op, 'weight', b.weight, dt);
  checkDtype(op, 'output', b.output, dt);
  checkElements(op, 'residual', b.residual, n);
  checkElements(op, 'input', b.input, n);
  checkElements(op, 'weight', b.weight, b.dim);
  checkElements(op, 'output', b.output, n);
}

export function validateFusedResidualNorm(b: FusedResidualNormArgs, device?: Device): void {
  const op = 'fused_residual_norm';
  const n = validateShape(op, b);
  checkBindings(op, [
    ['residual', b.residual], ['input', b.input], ['weight', b.weight], ['normedOutput', b.normedOutput], ['sumOutput', b.sumOutput],
  ], ['normedOutput', 'sumOutput'], device);
  checkDtype(op, 'input', b.input, ['f32', 'bf16']);
  const dt = b.input.dtype;
  checkDtype(op, 'residual', b.residual, dt);
  checkDtype(op, 'weight', b.weight, dt);
  checkDtype(op, 'normedOutput', b.normedOutput, dt);
  if (b.sumOutput !== undefined) checkDtype(op, 'sumOutput', b.sumOutput, dt);
  checkElements(op, 'residual', b.residual, n);
  checkElements(op, 'input', b.input, n);
  checkElements(op, 'weight', b.weight, b.dim);
  checkElements(op, 'normedOutput', b.normedOutput, n);
  if (b.sumOutput !== undefined) checkElements(op, 'sumOutput', b.sumOutput, n);
}

function validateScalarOp(op: string, b: FusedNormScalarArgs, device: Device | undefined): void {
  const p = b;
  const n = validateShape(op, p);
  checkBindings(op, [['residual', b.residual], ['input', b.input], ['weight', b.weight], ['output', b.output], ['scalar', b.scalar]],
    ['output'], device);
  checkDtype(op, 'input', b.input, ['f32']);
  checkDtype(op, 'residual', b.residual, 'f32');
  checkDtype(op, 'weight', b.weight, 'f32');
  checkDtype(op, 'output', b.output, 'f32');
  checkDtype(op, 'scalar', b.scalar, 'f32');
  checkElements(op, 'residual', b.residual, n);
  checkElements(op, 'input', b.input, n);
  checkElements(op, 'weight', b.weight, p.dim);
  checkElements(op, 'output', b.output, n);
  const sc = b.scalar.elementCount;
  if (sc !== 1 && sc !== p.dim) {
    throw invalid(op, 'scalar', `1 or dim (${p.dim}) elements`, `${sc} elements`);
  }
}

export function validateFusedResidualNormScalar(a: FusedNormScalarArgs, device?: Device): void {
  validateScalarOp('fused_residual_norm_scalar', a, device);
}
export function validateFusedNormAddScalar(a: FusedNormScalarArgs, device?: Device): void {
  validateScalarOp('fused_norm_add_scalar', a, device);
}

const NORMED = ['normed0', 'normed1', 'normed2'] as const;
const NORM_WEIGHTS = ['normWeight0', 'normWeight1', 'normWeight2'] as const;

/** The normed outputs given, in order (a gap is refused by validateFusedNormAddNorms). */
function normsOf(b: FusedNormAddNormsBuffers): number {
  let n = 0;
  while (n < FUSED_NORM_MAX_NORMS && b[NORMED[n]!] !== undefined) n++;
  return n;
}

export function validateFusedNormAddNorms(b: FusedNormAddNormsArgs, device?: Device): void {
  const op = 'fused_norm_add_norms';
  const n = validateShape(op, b);
  const bindings: [string, Buffer | undefined][] = [
    ['residual', b.residual], ['input', b.input], ['weight', b.weight], ['output', b.output], ['scalar', b.scalar],
    ...NORMED.flatMap((o, j) => [[o, b[o]], [NORM_WEIGHTS[j]!, b[NORM_WEIGHTS[j]!]]] as [string, Buffer | undefined][]),
  ];
  checkBindings(op, bindings, ['output', ...NORMED], device);
  const norms = normsOf(b);
  for (let j = 0; j < FUSED_NORM_MAX_NORMS; j++) {
    if (j >= norms && b[NORMED[j]!] !== undefined) throw invalid(op, NORMED[j]!, `absent, as ${NORMED[norms]} is`, 'a Buffer');
    if (j >= norms && b[NORM_WEIGHTS[j]!] !== undefined) throw invalid(op, NORM_WEIGHTS[j]!, `absent, as ${NORMED[j]} is`, 'a Buffer');
  }
  for (const [arg, buf] of bindings) {
    if (buf === undefined) continue;
    checkDtype(op, arg, buf, 'f32');
  }
  checkElements(op, 'residual', b.residual, n);
  checkElements(op, 'input', b.input, n);
  checkElements(op, 'weight', b.weight, b.dim);
  checkElements(op, 'output', b.output, n);
  if (b.scalar !== undefined && b.scalar.elementCount !== 1 && b.scalar.elementCount !== b.dim) {
    throw invalid(op, 'scalar', `1 or dim (${b.dim}) elements`, `${b.scalar.elementCount} elements`);
  }
  for (let j = 0; j < norms; j++) {
    checkElements(op, NORMED[j]!, b[NORMED[j]!]!, n);
    const w = b[NORM_WEIGHTS[j]!];
    if (w !== undefined) checkElements(op, NORM_WEIGHTS[j]!, w, b.dim);
  }
}

export function validateFusedNormMoeSum(b: FusedNormMoeSumArgs, device?: Device): void {
  const op = 'fused_norm_moe_sum';
  const n = validateShape(op, b);
  checkPositive(op, 'topK', b.topK);
  const ne = checkedProduct(op, 'rows * topK * dim', b.rows, b.topK, b.dim);
  checkAtMost(op, 'rows * topK * dim', ne, MAX_ELEMENTS_U32, 'the 32-bit index limit');
  const bindings: [string, Buffer][] = [
    ['input', b.input], ['weight', b.weight], ['expertW', b.expertW], ['yExpert', b.yExpert], ['moeWeight', b.moeWeight], ['output', b.output],
  ];
  for (const [arg, buf] of bindings) checkBuffer(op, arg, buf, device);
  checkNoAliasing(op, bindings, ['output'], 'only input may be updated in place', [['output', 'input']]);
  checkDtype(op, 'input', b.input, 'f32');
  checkDtype(op, 'weight', b.weight, 'f32');
  checkDtype(op, 'expertW', b.expertW, 'f32');
  checkDtype(op, 'yExpert', b.yExpert, ['f32', 'bf16']);
  checkDtype(op, 'moeWeight', b.moeWeight, 'f32');
  checkDtype(op, 'output', b.output, 'f32');
  checkElements(op, 'input', b.input, n);
  checkElements(op, 'weight', b.weight, b.dim);
  checkElements(op, 'expertW', b.expertW, b.rows * b.topK);
  checkElements(op, 'yExpert', b.yExpert, ne);
  checkElements(op, 'moeWeight', b.moeWeight, b.dim);
  checkElements(op, 'output', b.output, n);
}

/** Threads per row and the threadgroup(0) bytes (one float per simdgroup, 16-byte multiple). */
export function fusedNormThreadgroup(dim: number, limits: LaunchLimits): { threads: number; sharedBytes: number } {
  return rowThreadgroup(dim, FUSED_NORM_MAX_THREADS, limits);
}

/** The plan of one row-per-threadgroup dispatch of a fused norm kernel. */
function rowsPlan(
  kernel: (typeof FUSED_NORM_KERNELS)[number], p: FusedNormParams, limits: LaunchLimits,
  buffers: Buffer[] | Record<number, Buffer>, bytes: (Uint8Array | undefined)[],
): OpPlan {
  const { threads, sharedBytes } = fusedNormThreadgroup(p.dim, limits);
  return planOf({ kernel, buffers, bytes, threadgroupMemory: [sharedBytes], grid: [p.rows, 1, 1], threads: [threads, 1, 1] });
}

/**
 * fused_norm_add: output = residual + input * rmsInv(input) * weight, per row,
 * rmsInv(x) = 1 / sqrt(mean(x^2) + eps) (Gemma 4's post-attention / post-FFN order).
 *
 * Layouts: residual, input, output [rows, dim]; weight [dim]. All f32
 * (fused_norm_add_f32) or all bf16 (fused_norm_add_bf16, f32 arithmetic);
 * the kernel is chosen by input's dtype.
 * Bindings: 0 residual, 1 input, 2 weight, 3 output, 4 dim (u32), 5 rows (u32),
 * 6 eps (f32); threadgroup(0) one float per simdgroup.
 * Grid: (rows, 1, 1) threadgroups of min(256, nextPow2(dim)) threads.
 */
export function fusedNormAdd(enc: Encoder, args: FusedNormAddArgs): void {
  record(enc, planFusedNormAdd(args, enc.device.limits, enc.device));
}
export function planFusedNormAdd(args: FusedNormAddArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateFusedNormAdd(args, device);
  return rowsPlan(args.input.dtype === 'bf16' ? 'fused_norm_add_bf16' : 'fused_norm_add_f32', args, limits,
    [args.residual, args.input, args.weight, args.output], packFusedNormAddArgs(args));
}

/**
 * fused_residual_norm: sum = residual + input; normedOutput = sum * rmsInv(sum) * weight,
 * per row; sum also stored to sumOutput when given (the next layer's residual).
 *
 * Layouts: residual, input, normedOutput, sumOutput [rows, dim]; weight [dim].
 * All f32 (fused_residual_norm_f32) or all bf16 (fused_residual_norm_bf16: the
 * sum is kept in f32 for the norm and rounded to bf16 only when stored).
 * Bindings: 0 residual, 1 input, 2 weight, 3 normedOutput, 4 sumOutput
 * (normedOutput stands in when absent; write_sum = 0 keeps it unwritten),
 * 5 FusedResidualNormParams; threadgroup(0) one float per simdgroup.
 * Grid: (rows, 1, 1) threadgroups of min(256, nextPow2(dim)) threads.
 */
export function fusedResidualNorm(enc: Encoder, args: FusedResidualNormArgs): void {
  record(enc, planFusedResidualNorm(args, enc.device.limits, enc.device));
}
export function planFusedResidualNorm(args: FusedResidualNormArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateFusedResidualNorm(args, device);
  const writeSum = args.sumOutput !== undefined;
  return rowsPlan(args.input.dtype === 'bf16' ? 'fused_residual_norm_bf16' : 'fused_residual_norm_f32', args, limits,
    [args.residual, args.input, args.weight, args.normedOutput, args.sumOutput ?? args.normedOutput],
    [, , , , , packFusedResidualNormParams({ ...args, writeSum })]);
}

/**
 * fused_residual_norm_scalar: sum = residual + input;
 * output = sum * rmsInv(sum) * weight * scalar, per row.
 *
 * Layouts (f32): residual, input, output [rows, dim]; weight [dim]; scalar [1]
 * (applied to every element) or [dim] (per column).
 * Bindings: 0 residual, 1 input, 2 weight, 3 output, 4 scalar,
 * 5 FusedResidualNormScalarF32Params; threadgroup(0) one float per simdgroup.
 * Grid: (rows, 1, 1) threadgroups of min(256, nextPow2(dim)) threads.
 */
export function fusedResidualNormScalar(enc: Encoder, args: FusedNormScalarArgs): void {
  record(enc, planFusedResidualNormScalar(args, enc.device.limits, enc.device));
}
export function planFusedResidualNormScalar(args: FusedNormScalarArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateFusedResidualNormScalar(args, device);
  return scalarPlan('fused_residual_norm_scalar_f32', args, limits, packFusedResidualNormScalarParams);
}

/** The plan of the two scalar forms, which bind alike: their params after the scalar, which is a vector unless it has one element. */
function scalarPlan(kernel: (typeof FUSED_NORM_KERNELS)[number], args: FusedNormScalarArgs, limits: LaunchLimits,
  pack: (p: FusedNormParams & { scalarIsVector: boolean }) => Uint8Array): OpPlan {
  return rowsPlan(kernel, args, limits, [args.residual, args.input, args.weight, args.output, args.scalar],
    [, , , , , pack({ ...args, scalarIsVector: args.scalar.elementCount !== 1 })]);
}

/**
 * fused_norm_add_scalar: output = (residual + input * rmsInv(input) * weight) * scalar,
 * per row: Gemma 4's end of layer, the norm over input alone.
 *
 * Layouts, bindings and grid: fusedResidualNormScalar's, with
 * FusedNormAddScalarF32Params at 5.
 */
export function fusedNormAddScalar(enc: Encoder, args: FusedNormScalarArgs): void {
  record(enc, planFusedNormAddScalar(args, enc.device.limits, enc.device));
}
export function planFusedNormAddScalar(args: FusedNormScalarArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateFusedNormAddScalar(args, device);
  return scalarPlan('fused_norm_add_scalar_f32', args, limits, packFusedNormAddScalarParams);
}

/**
 * fused_norm_add_norms: a residual update and the norms of its result, per
 * row (Gemma 4's sub-layer boundaries, where the next products read norms of
 * the updated residual stream):
 *   h = (residual + input * rmsInv(input) * weight) * scalar (scalar absent: 1)
 *   output = h; normedJ = h * rmsInv(h) * normWeightJ (absent: 1), for each normedJ given.
 *
 * Layouts (f32): residual, input, output, normedJ [rows, dim]; weight,
 * normWeightJ [dim]; scalar [1] (applied to every element) or [dim]. Any
 * output may be residual or input (in place); no two outputs are one buffer.
 * Bindings: 0 residual, 1 input, 2 weight, 3 output, 4 scalar (weight stands
 * in when absent), 5 FusedNormAddNormsF32Params, 6 + 2j normWeightJ (weight
 * stands in), 7 + 2j normedJ (output stands in, unwritten);
 * threadgroup(0) one float per simdgroup.
 * Grid: (rows, 1, 1) threadgroups of min(256, nextPow2(dim)) threads.
 */
export function fusedNormAddNorms(enc: Encoder, args: FusedNormAddNormsArgs): void {
  record(enc, planFusedNormAddNorms(args, enc.device.limits, enc.device));
}
export function planFusedNormAddNorms(args: FusedNormAddNormsArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateFusedNormAddNorms(args, device);
  const norms = normsOf(args);
  const scalarMode = args.scalar === undefined ? 0 : args.scalar.elementCount === 1 ? 1 : 2;
  let weighted = 0;
  for (let j = 0; j < norms; j++) if (args[NORM_WEIGHTS[j]!] !== undefined) weighted |= 1 << j;
  // Binding 5 is the params.
  const buffers: Record<number, Buffer> = { 0: args.residual, 1: args.input, 2: args.weight, 3: args.output, 4: args.scalar ?? args.weight };
  for (let j = 0; j < FUSED_NORM_MAX_NORMS; j++) {
    buffers[6 + 2 * j] = args[NORM_WEIGHTS[j]!] ?? args.weight;
    buffers[7 + 2 * j] = args[NORMED[j]!] ?? args.output;
  }
  return rowsPlan('fused_norm_add_norms_f32', args, limits, buffers,
    [, , , , , packFusedNormAddNormsParams({ ...args, scalarMode, norms, weighted })]);
}

/**
 * fused_norm_moe_sum: Gemma 4's two feed-forward branches joined, per row:
 *   e = sum_k expertW[k] yExpert[k] (slots in order, f32)
 *   output = input * rmsInv(input) * weight + e * rmsInv(e) * moeWeight.
 *
 * Layouts: input, output f32 [rows, dim]; weight, moeWeight f32 [dim];
 * expertW f32 [rows, topK]; yExpert [rows, topK, dim] f32
 * (fused_norm_moe_sum_f32) or bf16 (fused_norm_moe_sum_bf16_input). output
 * may be input (in place).
 * Bindings: 0 input, 1 weight, 2 expertW, 3 yExpert, 4 moeWeight, 5 output,
 * 6 FusedNormMoeSumParams; threadgroup(0) one float per simdgroup.
 * Grid: (rows, 1, 1) threadgroups of min(256, nextPow2(dim)) threads.
 */
export function fusedNormMoeSum(enc: Encoder, args: FusedNormMoeSumArgs): void {
  record(enc, planFusedNormMoeSum(args, enc.device.limits, enc.device));
}
export function planFusedNormMoeSum(args: FusedNormMoeSumArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateFusedNormMoeSum(args, device);
  return rowsPlan(args.yExpert.dtype === 'bf16' ? 'fused_norm_moe_sum_bf16_input' : 'fused_norm_moe_sum_f32', args, limits,
    [args.input, args.weight, args.expertW, args.yExpert, args.moeWeight, args.output], [, , , , , , packFusedNormMoeSumParams(args)]);
}

// ---- the float64 reference ----

// CPU references of the fused RMS norm family: plain loops, float64
// accumulation. Inputs are numbers (bf16 data already decoded); outputs are
// float64, unrounded.

/** 1 / sqrt(mean(x[base .. base+dim)^2) + eps). */
function rmsInv(x: ArrayLike<number>, base: number, dim: number, eps: number): number {
  let sq = 0;
  for (let i = 0; i < dim; i++) {
    const v = x[base + i]!;
    sq += v * v;
  }
  return 1 / Math.sqrt(sq / dim + eps);
}

function scalarAt(scalar: ArrayLike<number> | undefined, i: number): number {
  if (scalar === undefined) return 1;
  return scalar.length === 1 ? scalar[0]! : scalar[i]!;
}

/**
 * output = (residual + input * rmsInv(input) * weight) * scalar, per row of dim.
 * scalar: absent (1), one element (broadcast) or dim elements.
 */
export function fusedNormAddRef(
  residual: ArrayLike<number>, input: ArrayLike<number>, weight: ArrayLike<number>,
  rows: number, dim: number, eps: number, scalar?: ArrayLike<number>,
): Float64Array {
  const out = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    const base = r * dim;
    const inv = rmsInv(input, base, dim, eps);
    for (let i = 0; i < dim; i++) {
      const normed = input[base + i]! * inv * weight[i]!;
      out[base + i] = (residual[base + i]! + normed) * scalarAt(scalar, i);
    }
  }
  return out;
}

/**
 * sum = residual + input; normed = sum * rmsInv(sum) * weight * scalar, per row.
 * scalar: absent (1), one element (broadcast) or dim elements.
 */
export function fusedResidualNormRef(
  residual: ArrayLike<number>, input: ArrayLike<number>, weight: ArrayLike<number>,
  rows: number, dim: number, eps: number, scalar?: ArrayLike<number>,
): { normed: Float64Array; sum: Float64Array } {
  const sum = new Float64Array(rows * dim);
  for (let j = 0; j < rows * dim; j++) sum[j] = residual[j]! + input[j]!;
  const normed = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    const base = r * dim;
    const inv = rmsInv(sum, base, dim, eps);
    for (let i = 0; i < dim; i++) {
      normed[base + i] = sum[base + i]! * inv * weight[i]! * scalarAt(scalar, i);
    }
  }
  return { normed, sum };
}

/**
 * h = (residual + input * rmsInv(input) * weight) * scalar per row; normed[j]
 * = h * rmsInv(h) * normWeights[j] (null: unweighted), one array per entry.
 */
export function fusedNormAddNormsRef(
  residual: ArrayLike<number>, input: ArrayLike<number>, weight: ArrayLike<number>,
  rows: number, dim: number, eps: number, scalar: ArrayLike<number> | undefined,
  normWeights: readonly (ArrayLike<number> | null)[],
): { output: Float64Array; normed: Float64Array[] } {
  const output = fusedNormAddRef(residual, input, weight, rows, dim, eps, scalar);
  return { output, normed: normWeights.map((w) => rmsNormRef(output, w, rows, dim, eps)) };
}

/** output = input * rmsInv(input) * weight + e * rmsInv(e) * moeWeight per row, e = sum_k expertW[k] yExpert[k]. */
export function fusedNormMoeSumRef(
  input: ArrayLike<number>, weight: ArrayLike<number>, expertW: ArrayLike<number>, yExpert: ArrayLike<number>,
  moeWeight: ArrayLike<number>, rows: number, topK: number, dim: number, eps: number,
): Float64Array {
  const out = new Float64Array(rows * dim);
  const e = new Float64Array(dim);
  for (let r = 0; r < rows; r++) {
    const base = r * dim;
    e.fill(0);
    for (let k = 0; k < topK; k++) {
      const wk = expertW[r * topK + k]!;
      for (let i = 0; i < dim; i++) e[i] = e[i]! + wk * yExpert[(r * topK + k) * dim + i]!;
    }
    const rx = rmsInv(input, base, dim, eps);
    const re = rmsInv(e, 0, dim, eps);
    for (let i = 0; i < dim; i++) out[base + i] = input[base + i]! * rx * weight[i]! + e[i]! * re * moeWeight[i]!;
  }
  return out;
}
