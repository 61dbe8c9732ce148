// sigmoid_mul: x * sigmoid(gate), the output gate of Qwen3.5/3.6 full
// attention, from two inputs (mlx-native's sigmoid_mul, src/ops/sigmoid_mul.rs:
// its kernel names, bindings and params bytes, with f16 added) and from rows
// that hold both halves (added here, in the crate's style). Kernels:
// shaders/sigmoid_mul.metal and shaders/cuda/sigmoid_mul.cu.

import src from '../../shaders/sigmoid_mul.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/sigmoid_mul.cu' with { type: 'text' };
import header from '../../shaders/sigmoid_mul.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { gatedHalvesRef, gatedLaunch, gatedPairRef, validateGatedHalves, validateGatedPair, type GatedDType } from '../gated.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familyPlans, record, type OpPlan } from '../plan.ts';
import { familySources } from '../registry.ts';

export const SIGMOID_MUL_FAMILY = 'sigmoid_mul';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const SIGMOID_MUL_SOURCES = familySources(SIGMOID_MUL_FAMILY, { header, metal: src, cuda: cudaSrc });
export const SIGMOID_MUL_KERNELS = [
  'sigmoid_mul_f32', 'sigmoid_mul_f16', 'sigmoid_mul_bf16',
  'sigmoid_mul_halves_f32', 'sigmoid_mul_halves_f16', 'sigmoid_mul_halves_bf16',
] as const;
const planOf = familyPlans({ family: SIGMOID_MUL_FAMILY, sources: SIGMOID_MUL_SOURCES, kernels: SIGMOID_MUL_KERNELS });

/** struct SigmoidMulParams (sigmoid_mul_<t>, buffer 3). */
export const SIGMOID_MUL_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'SigmoidMulParams');
/** struct SigmoidMulHalvesParams (sigmoid_mul_halves_<t>, buffer 2). */
export const SIGMOID_MUL_HALVES_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'SigmoidMulHalvesParams');

export interface SigmoidMulArgs {
  /** [n] (any shape), f32, f16 or bf16: the values gated (the attention output) */
  x: Buffer;
  /** x's dtype and element count */
  gate: Buffer;
  /** x's dtype and element count, output; may be x or gate (in place) */
  output: Buffer;
}

export interface SigmoidMulHalvesArgs {
  /** [rows, 2 * dim], f32, f16 or bf16: each row is gate (dim elements), then x (dim) */
  gateX: Buffer;
  /** [rows, dim] in gateX's dtype, output; not over gateX */
  output: Buffer;
  rows: number;
  /** Outputs per row; rows of gateX hold twice as many. */
  dim: number;
}

export function packSigmoidMulParams(p: { n: number }): Uint8Array {
  return packFields(SIGMOID_MUL_PARAMS_LAYOUT, { n: p.n });
}
export function packSigmoidMulHalvesParams(p: { dim: number; rows: number }): Uint8Array {
  return packFields(SIGMOID_MUL_HALVES_PARAMS_LAYOUT, { dim: p.dim, rows: p.rows });
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateSigmoidMul(a: SigmoidMulArgs, device?: Device): void {
  validateGatedPair('sigmoid_mul', ['x', 'gate'], a.x, a.gate, a.output, device);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateSigmoidMulHalves(a: SigmoidMulHalvesArgs, device?: Device): void {
  validateGatedHalves('sigmoid_mul_halves', 'gateX', a.gateX, a.output, a.rows, a.dim, device);
}

/**
 * sigmoid_mul: output[i] = x[i] * sigmoid(gate[i]), sigmoid(g) = 1 / (1 +
 * exp(-g)): the output gate of Qwen3.5/3.6 full attention, whose q_proj
 * yields a gate per head beside the query (a sigmoid, not a SiLU). Arithmetic
 * in f32; finite inputs never give NaN.
 *
 * Layouts: x, gate, output of n elements (any shapes), one dtype: f32, f16
 * or bf16 (mlx-native's sigmoid_mul_f32 and _bf16, with f16 added). output
 * may be x or gate. As in mlx-native, every buffer holds exactly n elements.
 * Kernels: sigmoid_mul_<dtype>. Bindings: 0 x, 1 gate, 2 output, 3
 * SigmoidMulParams (n as a u32: mlx-native's params buffer).
 * Grid: (ceil(n / 256), 1, 1) threadgroups of min(256, n) threads, one
 * element each; the CUDA twin gives each thread one 16-byte vector.
 */
export function sigmoidMul(enc: Encoder, args: SigmoidMulArgs): void {
  record(enc, planSigmoidMul(args, enc.device.limits, enc.device));
}

/** sigmoidMul's plan: validates, then one dispatch (see sigmoidMul). */
export function planSigmoidMul(a: SigmoidMulArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateSigmoidMul(a, device);
  const n = a.x.elementCount;
  const dtype = a.x.dtype as GatedDType;
  return planOf({
    kernel: `sigmoid_mul_${dtype}`,
    buffers: [a.x, a.gate, a.output],
    bytes: [, , , packSigmoidMulParams({ n })],
    ...gatedLaunch(1, n, dtype, limits),
  });
}

/**
 * sigmoid_mul_halves: output[r, c] = gateX[r, dim + c] * sigmoid(gateX[r, c]),
 * over rows that hold the gate half first, then the values gated (the order
 * of the other gated families' halves forms: the gate first). Not in
 * mlx-native's sigmoid_mul module: added in its style. Qwen3.5/3.6's q_proj
 * output holds [query | gate] per head, with the query first: its gate is a
 * strided part of that output, which the two-input form takes once gathered.
 *
 * Layouts: gateX [rows, 2 * dim], output [rows, dim], one dtype: f32, f16
 * or bf16; output shares no memory with gateX.
 * Kernels: sigmoid_mul_halves_<dtype>. Bindings: 0 gateX, 1 output, 2
 * SigmoidMulHalvesParams (dim, rows).
 * Grid: (ceil(dim / tg), rows, 1) threadgroups of tg = min(256, dim)
 * threads, one element each; the CUDA twin gives each thread one 16-byte
 * vector of a row (gatedLaunch).
 */
export function sigmoidMulHalves(enc: Encoder, args: SigmoidMulHalvesArgs): void {
  record(enc, planSigmoidMulHalves(args, enc.device.limits, enc.device));
}

/** sigmoidMulHalves's plan: validates, then one dispatch (see sigmoidMulHalves). */
export function planSigmoidMulHalves(a: SigmoidMulHalvesArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateSigmoidMulHalves(a, device);
  const dtype = a.gateX.dtype as GatedDType;
  return planOf({
    kernel: `sigmoid_mul_halves_${dtype}`,
    buffers: [a.gateX, a.output],
    bytes: [, , packSigmoidMulHalvesParams({ dim: a.dim, rows: a.rows })],
    ...gatedLaunch(a.rows, a.dim, dtype, limits),
  });
}

// ---- the float64 reference ----

// CPU reference of sigmoid_mul: float64 arithmetic.

/** sigmoid(g) = 1 / (1 + exp(-g)). */
export function sigmoidRef(g: number): number {
  return 1 / (1 + Math.exp(-g));
}

/** output[i] = x[i] * sigmoid(gate[i]). */
export function sigmoidMulRef(x: ArrayLike<number>, gate: ArrayLike<number>): Float64Array {
  return gatedPairRef(sigmoidRef, gate, x);
}

/** output[r, c] = gateX[r, dim + c] * sigmoid(gateX[r, c]), gateX [rows, 2 * dim] (gate half first). */
export function sigmoidMulHalvesRef(gateX: ArrayLike<number>, rows: number, dim: number): Float64Array {
  return gatedHalvesRef(sigmoidRef, gateX, rows, dim);
}
