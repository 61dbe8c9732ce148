// silu_mul: SwiGLU, silu(gate) * up, from two inputs (mlx-native's silu_mul,
// src/ops/silu_mul.rs: its kernel name, bindings and params bytes, with f16
// and bf16 added) and from rows that hold both halves (added here, in the
// crate's style). Kernels: shaders/silu_mul.metal and shaders/cuda/silu_mul.cu.

import src from '../../shaders/silu_mul.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/silu_mul.cu' with { type: 'text' };
import header from '../../shaders/silu_mul.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { gatedHalvesRef, gatedLaunch, gatedPairRef, validateGatedHalves, validateGatedPair, type GatedDType } from '../gated.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familyPlans, record, type OpPlan } from '../plan.ts';
import { familySources } from '../registry.ts';

export const SILU_MUL_FAMILY = 'silu_mul';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const SILU_MUL_SOURCES = familySources(SILU_MUL_FAMILY, { header, metal: src, cuda: cudaSrc });
export const SILU_MUL_KERNELS = [
  'silu_mul_f32', 'silu_mul_f16', 'silu_mul_bf16',
  'silu_mul_halves_f32', 'silu_mul_halves_f16', 'silu_mul_halves_bf16',
] as const;
const planOf = familyPlans({ family: SILU_MUL_FAMILY, sources: SILU_MUL_SOURCES, kernels: SILU_MUL_KERNELS });

/** struct SiluMulParams (silu_mul_<t>, buffer 3). */
export const SILU_MUL_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'SiluMulParams');
/** struct SiluMulHalvesParams (silu_mul_halves_<t>, buffer 2). */
export const SILU_MUL_HALVES_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'SiluMulHalvesParams');

export interface SiluMulArgs {
  /** [n] (any shape), f32, f16 or bf16 */
  gate: Buffer;
  /** gate's dtype and element count */
  up: Buffer;
  /** gate's dtype and element count, output; may be gate or up (in place) */
  output: Buffer;
}

export interface SiluMulHalvesArgs {
  /** [rows, 2 * dim], f32, f16 or bf16: each row is gate (dim elements), then up (dim) */
  gateUp: Buffer;
  /** [rows, dim] in gateUp's dtype, output; not over gateUp */
  output: Buffer;
  rows: number;
  /** Outputs per row (the intermediate size); rows of gateUp hold twice as many. */
  dim: number;
}

export function packSiluMulParams(p: { n: number }): Uint8Array {
  return packFields(SILU_MUL_PARAMS_LAYOUT, { n: p.n });
}
export function packSiluMulHalvesParams(p: { dim: number; rows: number }): Uint8Array {
  return packFields(SILU_MUL_HALVES_PARAMS_LAYOUT, { dim: p.dim, rows: p.rows });
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateSiluMul(a: SiluMulArgs, device?: Device): void {
  validateGatedPair('silu_mul', ['gate', 'up'], a.gate, a.up, a.output, device);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateSiluMulHalves(a: SiluMulHalvesArgs, device?: Device): void {
  validateGatedHalves('silu_mul_halves', 'gateUp', a.gateUp, a.output, a.rows, a.dim, device);
}

/**
 * silu_mul: output[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g))
 * (SwiGLU, the MLP activation of Qwen3.5/3.6 and their MoE experts).
 * Arithmetic in f32; finite inputs never give NaN (silu saturates to -0 for
 * very negative g).
 *
 * Layouts: gate, up, output of n elements (any shapes), one dtype: f32, f16
 * or bf16 (mlx-native's silu_mul_f32, with f16 and bf16 added). output may
 * be gate or up. mlx-native accepts buffers larger than n and uses their
 * first n elements; here each holds exactly n (a view gives a prefix).
 * Kernels: silu_mul_<dtype>. Bindings: 0 gate, 1 up, 2 output, 3
 * SiluMulParams (n as a u32: mlx-native's params buffer).
 * Grid: (ceil(n / 256), 1, 1) threadgroups of min(256, n) threads, one
 * element each; the CUDA twin gives each thread one 16-byte vector.
 */
export function siluMul(enc: Encoder, args: SiluMulArgs): void {
  record(enc, planSiluMul(args, enc.device.limits, enc.device));
}

/** siluMul's plan: validates, then one dispatch (see siluMul). */
export function planSiluMul(a: SiluMulArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateSiluMul(a, device);
  const n = a.gate.elementCount;
  const dtype = a.gate.dtype as GatedDType;
  return planOf({
    kernel: `silu_mul_${dtype}`,
    buffers: [a.gate, a.up, a.output],
    bytes: [, , , packSiluMulParams({ n })],
    ...gatedLaunch(1, n, dtype, limits),
  });
}

/**
 * silu_mul_halves: output[r, c] = silu(gateUp[r, c]) * gateUp[r, dim + c],
 * SwiGLU over the output of a fused gate_up projection, whose rows hold the
 * gate half first, then the up half (halves, not interleaved: the order of
 * mlx-native's moe_swiglu_fused and of the fused gate_up_proj layers of
 * Hugging Face models, which chunk the projection into gate, then up). Not in
 * mlx-native's silu_mul module: added in its style.
 *
 * Layouts: gateUp [rows, 2 * dim], output [rows, dim], one dtype: f32, f16
 * or bf16; output shares no memory with gateUp.
 * Kernels: silu_mul_halves_<dtype>. Bindings: 0 gateUp, 1 output, 2
 * SiluMulHalvesParams (dim, rows).
 * Grid: (ceil(dim / tg), rows, 1) threadgroups of tg = min(256, dim)
 * threads, one element each; the CUDA twin gives each thread one 16-byte
 * vector of a row (gatedLaunch).
 */
export function siluMulHalves(enc: Encoder, args: SiluMulHalvesArgs): void {
  record(enc, planSiluMulHalves(args, enc.device.limits, enc.device));
}

/** siluMulHalves's plan: validates, then one dispatch (see siluMulHalves). */
export function planSiluMulHalves(a: SiluMulHalvesArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateSiluMulHalves(a, device);
  const dtype = a.gateUp.dtype as GatedDType;
  return planOf({
    kernel: `silu_mul_halves_${dtype}`,
    buffers: [a.gateUp, a.output],
    bytes: [, , packSiluMulHalvesParams({ dim: a.dim, rows: a.rows })],
    ...gatedLaunch(a.rows, a.dim, dtype, limits),
  });
}

// ---- the float64 reference ----

// CPU reference of silu_mul: float64 arithmetic.

/** silu(g) = g * sigmoid(g) = g / (1 + exp(-g)). */
export function siluRef(g: number): number {
  return g / (1 + Math.exp(-g));
}

/** output[i] = silu(gate[i]) * up[i]. */
export function siluMulRef(gate: ArrayLike<number>, up: ArrayLike<number>): Float64Array {
  return gatedPairRef(siluRef, gate, up);
}

/** output[r, c] = silu(gateUp[r, c]) * gateUp[r, dim + c], gateUp [rows, 2 * dim] (gate half first). */
export function siluMulHalvesRef(gateUp: ArrayLike<number>, rows: number, dim: number): Float64Array {
  return gatedHalvesRef(siluRef, gateUp, rows, dim);
}
