// Per-head RMS norm times SiLU gate (gated delta net output stage).
// Kernel: shaders/ssm_norm_gate.metal. One threadgroup per head vector.

import src from '../../shaders/ssm_norm_gate.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/ssm_norm_gate.cu' with { type: 'text' };
import header from '../../shaders/ssm_norm_gate.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBufferRules, checkNoAliasing, checkPositive, checkedProduct, invalid, ruleBindings, type BufferRule,
} from '../validate.ts';
import { rowLaunch, rowThreadgroup, type LaunchLimits } from '../launch.ts';
import { familyPlans, record, type OpPlan } from '../plan.ts';

export const SSM_NORM_GATE_FAMILY = 'ssm_norm_gate';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const SSM_NORM_GATE_SOURCES = familySources(SSM_NORM_GATE_FAMILY, { header, metal: src, cuda: cudaSrc });
export const SSM_NORM_GATE_KERNELS = ['ssm_norm_gate_f32'] as const;
const planOf = familyPlans({ family: SSM_NORM_GATE_FAMILY, sources: SSM_NORM_GATE_SOURCES, kernels: SSM_NORM_GATE_KERNELS });
/** d_v travels as an f32, exact up to 2^24. */
export const SSM_NORM_GATE_MAX_DV = 1 << 24;
export const SSM_NORM_GATE_MAX_THREADS = 256;
const MAX_ELEMENTS_U32 = 0xffff_ffff;

/** struct SsmNormGateParams (buffer 4): four floats. */
export const SSM_NORM_GATE_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'SsmNormGateParams');

export interface SsmNormGateParams {
  /** Head vectors: tokens * value heads. */
  rows: number;
  /** Elements per head vector. */
  dV: number;
  eps: number;
}
export interface SsmNormGateBuffers {
  /** f32 [rows, dV] */
  attnOut: Buffer;
  /** f32 [dV] */
  weight: Buffer;
  /** f32 [rows, dV] */
  z: Buffer;
  /** f32 [rows, dV], output */
  output: Buffer;
}
export interface SsmNormGateArgs extends SsmNormGateBuffers, SsmNormGateParams {}

export function packSsmNormGateParams(p: SsmNormGateParams): Uint8Array {
  return packFields(SSM_NORM_GATE_PARAMS_LAYOUT, { eps: p.eps, d_v: p.dV, unused0: 0, unused1: 0 });
}

/** output may be attnOut or z (in place); device: the encoder's, when the buffers must belong to it. */
export function validateSsmNormGate(a: SsmNormGateArgs, device?: Device): void {
  const op = 'ssm_norm_gate';
  const p = a, b = a;
  checkPositive(op, 'rows', p.rows);
  checkPositive(op, 'dV', p.dV);
  checkAtMost(op, 'dV', p.dV, SSM_NORM_GATE_MAX_DV, '2^24 (d_v is passed as an f32)');
  if (!Number.isFinite(p.eps) || p.eps < 0) throw invalid(op, 'eps', 'a finite number >= 0', p.eps);
  const n = checkedProduct(op, 'rows * dV', p.rows, p.dV);
  checkAtMost(op, 'rows * dV', n, MAX_ELEMENTS_U32, 'the 32-bit index limit');
  const rules: BufferRule[] = [
    ['attnOut', b.attnOut, 'f32', n], ['weight', b.weight, 'f32', p.dV], ['z', b.z, 'f32', n], ['output', b.output, 'f32', n],
  ];
  checkBufferRules(op, rules, device);
  checkNoAliasing(op, ruleBindings(rules), ['output'], 'every row reads the whole weight', [['output', 'attnOut'], ['output', 'z']]);
}

/** Threads per row and the threadgroup(0) bytes (one float per simdgroup, 16-byte multiple). */
export function ssmNormGateThreadgroup(dV: number, limits: LaunchLimits): { threads: number; sharedBytes: number } {
  return rowThreadgroup(dV, SSM_NORM_GATE_MAX_THREADS, limits);
}

/**
 * The CUDA twin's launch (shaders/cuda/ssm_norm_gate.cu, a row kernel):
 * rowLaunch's, sized to the row (f32: 4 elements a vector); null: the Metal
 * launch.
 */
export function ssmNormGateCudaLaunch(rows: number, dV: number, limits: LaunchLimits, multiprocessors = 0): ReturnType<typeof rowLaunch> {
  return rowLaunch(rows, dV, 4, limits, multiprocessors);
}

/**
 * ssm_norm_gate: output[r, d] = attnOut[r, d] * rmsInv(attnOut[r, :]) * weight[d] * silu(z[r, d]),
 * rmsInv(x) = 1 / sqrt(mean(x^2) + eps), silu(x) = x / (1 + exp(-x)).
 *
 * Layouts (f32): attnOut, z, output [rows, dV] (a row is one token's value
 * head); weight [dV]. output may be attnOut's or z's buffer (a thread reads
 * its elements before it writes them, and the norm's sum is taken first).
 * Bindings: 0 attnOut, 1 weight, 2 z, 3 output, 4 SsmNormGateParams
 * [eps, dV as f32, 0, 0]; threadgroup(0) one float per simdgroup.
 * Grid: (rows, 1, 1) threadgroups of min(256, nextPow2(dV)) threads; on
 * CUDA ssmNormGateCudaLaunch's.
 */
export function ssmNormGate(enc: Encoder, args: SsmNormGateArgs): void {
  record(enc, planSsmNormGate(args, enc.device.limits, enc.device));
}
export function planSsmNormGate(args: SsmNormGateArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateSsmNormGate(args, device);
  const { threads, sharedBytes } = ssmNormGateThreadgroup(args.dV, limits);
  const cuda = ssmNormGateCudaLaunch(args.rows, args.dV, limits, limits.multiprocessors);
  return planOf({
    kernel: 'ssm_norm_gate_f32',
    buffers: [args.attnOut, args.weight, args.z, args.output],
    bytes: [, , , , packSsmNormGateParams(args)],
    threadgroupMemory: [sharedBytes],
    grid: [args.rows, 1, 1],
    threads: [threads, 1, 1],
    ...(cuda === null ? {} : { cuda }),
  });
}

// ---- the float64 reference ----

// CPU reference of the per-head RMS norm + SiLU gate: plain loops, float64.

/** output[r, d] = x[r, d] / sqrt(mean_d x[r, :]^2 + eps) * weight[d] * silu(z[r, d]). */
export function ssmNormGateRef(
  attnOut: ArrayLike<number>, weight: ArrayLike<number>, z: ArrayLike<number>,
  rows: number, dV: number, eps: number,
): Float64Array {
  const out = new Float64Array(rows * dV);
  for (let r = 0; r < rows; r++) {
    const base = r * dV;
    let sq = 0;
    for (let d = 0; d < dV; d++) sq += attnOut[base + d]! * attnOut[base + d]!;
    const inv = 1 / Math.sqrt(sq / dV + eps);
    for (let d = 0; d < dV; d++) {
      const zv = z[base + d]!;
      const silu = zv / (1 + Math.exp(-zv));
      out[base + d] = attnOut[base + d]! * inv * weight[d]! * silu;
    }
  }
  return out;
}
