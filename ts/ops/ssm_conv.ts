// ssm_conv: causal depthwise conv1d over the last KS tokens with a rolling
// state (Qwen3.5/3.6 linear attention's short conv), prefill and decode.
// Kernels: shaders/ssm_conv.metal and shaders/cuda/ssm_conv.cu.

import src from '../../shaders/ssm_conv.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/ssm_conv.cu' with { type: 'text' };
import header from '../../shaders/ssm_conv.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { DType } from '../dtype.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBoolean, checkBuffer, checkDtype, checkedProduct, checkElements, checkNoAliasing, checkU32Count, invalid,
} from '../validate.ts';
import { familyPlans, record, type OpPlan } from '../plan.ts';

export const SSM_CONV_FAMILY = 'ssm_conv';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const SSM_CONV_SOURCES = familySources(SSM_CONV_FAMILY, { header, metal: src, cuda: cudaSrc });
export const SSM_CONV_KERNELS = ['ssm_conv_f32', 'ssm_conv_bf16', 'ssm_conv_bf16_wf32'] as const;
const planOf = familyPlans({ family: SSM_CONV_FAMILY, sources: SSM_CONV_SOURCES, kernels: SSM_CONV_KERNELS });
type Kernel = (typeof SSM_CONV_KERNELS)[number];

/** Kernel sizes the kernels hold in registers: 2 ..= 8. */
export const SSM_CONV_MIN_KS = 2;
export const SSM_CONV_MAX_KS = 8;
/** Threads per threadgroup, one channel each. */
export const SSM_CONV_THREADS = 128;
/** Tokens per thread: at least MAX_KS - 1, so only token block 0 reads the state. */
export const SSM_CONV_TOKENS_PER_THREAD = 16;
/** The kernel indexes the history with int: KS - 1 + T must stay below 2^31. */
const MAX_T = 0x7fff_ffff - SSM_CONV_MAX_KS;

/** struct SsmConvParams (buffer 4). */
export const SSM_CONV_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'SsmConvParams');

export interface SsmConvParams {
  /** Sequences B. */
  b: number;
  /** Tokens T per sequence (1 for decode). */
  t: number;
  /** Channels C (the conv dim). */
  c: number;
  /** Kernel size KS, 2 ..= 8 (4 in Qwen3.5/3.6). */
  ks: number;
  /** Apply SiLU to the output (the model does). */
  silu: boolean;
  /**
   * With a state: true treats the history before token 0 as zeros (a fresh
   * sequence) and only writes the state; false (default) reads it first.
   */
  freshState?: boolean;
}

export interface SsmConvBuffers {
  /** [B, T, C], f32 or bf16 */
  x: Buffer;
  /** [C, KS]: f32 with f32 x; bf16 or f32 with bf16 x */
  weight: Buffer;
  /**
   * [B, C, KS-1] in x's dtype, oldest token first: the inputs before token 0,
   * replaced in place by the last KS-1 inputs. Absent: zero history, nothing kept.
   */
  state?: Buffer;
  /** [B, T, C] in x's dtype, output; not x's buffer */
  y: Buffer;
}

export function packSsmConvParams(p: SsmConvParams & { readState: boolean; writeState: boolean }): Uint8Array {
  return packFields(SSM_CONV_PARAMS_LAYOUT, {
    b: p.b, t: p.t, c: p.c, ks: p.ks, tb: SSM_CONV_TOKENS_PER_THREAD,
    read_state: p.readState ? 1 : 0, write_state: p.writeState ? 1 : 0, apply_silu: p.silu ? 1 : 0,
  });
}

export interface SsmConvArgs extends SsmConvBuffers, SsmConvParams {}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateSsmConv(a: SsmConvArgs, device?: Device): void {
  check('ssm_conv', a, a, device);
}

function check(op: string, p: SsmConvParams, buf: SsmConvBuffers, device: Device | undefined): void {
  for (const [arg, value] of [['b', p.b], ['t', p.t], ['c', p.c], ['ks', p.ks]] as const) checkU32Count(op, arg, value);
  checkAtMost(op, 't', p.t, MAX_T, '2^31 - 9 (the history is indexed with int)');
  if (p.ks < SSM_CONV_MIN_KS || p.ks > SSM_CONV_MAX_KS) {
    throw invalid(op, 'ks', `in [${SSM_CONV_MIN_KS}, ${SSM_CONV_MAX_KS}]`, p.ks);
  }
  checkBoolean(op, 'silu', p.silu);
  checkBoolean(op, 'freshState', p.freshState, true);
  const n = checkedProduct(op, 'x elements', p.b, p.t, p.c);
  const w = checkedProduct(op, 'weight elements', p.c, p.ks);
  const st = checkedProduct(op, 'state elements', p.b, p.c, p.ks - 1);
  const bindings = [['x', buf.x], ['weight', buf.weight], ['state', buf.state], ['y', buf.y]] as const;
  for (const [arg, b] of bindings) if (b !== undefined || arg !== 'state') checkBuffer(op, arg, b, device);
  checkDtype(op, 'x', buf.x, ['f32', 'bf16']);
  const dt: DType = buf.x.dtype;
  checkDtype(op, 'weight', buf.weight, dt === 'bf16' ? ['bf16', 'f32'] : ['f32']);
  checkDtype(op, 'y', buf.y, dt);
  if (buf.state !== undefined) checkDtype(op, 'state', buf.state, dt);
  checkElements(op, 'x', buf.x, n);
  checkElements(op, 'weight', buf.weight, w);
  checkElements(op, 'y', buf.y, n);
  if (buf.state !== undefined) checkElements(op, 'state', buf.state, st);
  if (buf.y === buf.x) throw invalid(op, 'y', "a buffer other than x (other threads still read x's tokens)", 'x');
  checkNoAliasing(op, bindings, ['state', 'y'], 'the CUDA kernel takes x, weight and y as __restrict__, and other threads still read them');
  if (p.freshState === true && buf.state === undefined) {
    throw invalid(op, 'freshState', 'false or absent when no state is given', true);
  }
}

/** The kernel of validated buffers: by x's dtype, then the weight's. */
function kernelOf(buf: SsmConvBuffers): Kernel {
  if (buf.x.dtype === 'f32') return 'ssm_conv_f32';
  return buf.weight.dtype === 'f32' ? 'ssm_conv_bf16_wf32' : 'ssm_conv_bf16';
}

/** Grid: (ceil(C / 128), ceil(T / 16), B) threadgroups of 128 threads. */
export function ssmConvGrid(p: Pick<SsmConvParams, 'b' | 't' | 'c'>): [number, number, number] {
  return [Math.ceil(p.c / SSM_CONV_THREADS), Math.ceil(p.t / SSM_CONV_TOKENS_PER_THREAD), p.b];
}

function plan(p: SsmConvParams, buf: SsmConvBuffers): OpPlan {
  const hasState = buf.state !== undefined;
  return planOf({
    kernel: kernelOf(buf),
    buffers: [buf.x, buf.weight, buf.state ?? buf.y, buf.y],
    bytes: [, , , , packSsmConvParams({ ...p, readState: hasState && p.freshState !== true, writeState: hasState })],
    grid: ssmConvGrid(p),
    threads: [SSM_CONV_THREADS, 1, 1],
  });
}

/**
 * ssm_conv: causal depthwise conv1d. Per (b, c), with the history
 * xx = state[b, c, :] ++ x[b, :, c] (zeros for the state when it is absent or
 * freshState):
 *   y[b, t, c] = act(sum_{j < KS} weight[c, j] * xx[t + j]),  act = SiLU when silu
 * and, when a state is given, state[b, c, i] = xx[T + i] for i < KS - 1
 * (in place). Sums and SiLU in f32.
 *
 * Layouts: x, y [B, T, C]; weight [C, KS]; state [B, C, KS-1]. dtypes: all
 * f32 (ssm_conv_f32); bf16 x, y, state with a bf16 weight (ssm_conv_bf16) or
 * an f32 weight (ssm_conv_bf16_wf32). The state is in x's dtype because it
 * holds x's values: no rounding is added.
 *
 * Bindings: 0 x, 1 weight, 2 state (y stands in when absent; read_state =
 * write_state = 0 keep it untouched), 3 y, 4 SsmConvParams.
 * Grid (ceil(C / 128), ceil(T / 16), B) threadgroups of 128 threads.
 */
export function ssmConv(enc: Encoder, args: SsmConvArgs): void {
  record(enc, planSsmConv(args, enc.device.limits, enc.device));
}
export function planSsmConv(args: SsmConvArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateSsmConv(args, device);
  return plan(args, args);
}

export interface SsmConvDecodeBuffers {
  /** [B, C] (one token per sequence), f32 or bf16 */
  x: Buffer;
  /** [C, KS] */
  weight: Buffer;
  /** [B, C, KS-1] in x's dtype, read and updated in place */
  state: Buffer;
  /** [B, C] in x's dtype, output */
  y: Buffer;
}
export interface SsmConvDecodeArgs extends SsmConvDecodeBuffers, Omit<SsmConvParams, 't' | 'freshState'> {}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateSsmConvDecode(a: SsmConvDecodeArgs, device?: Device): void {
  const op = 'ssm_conv_decode';
  // The decode step reads and shifts the state: without one it would be a conv over zeros that keeps nothing.
  checkBuffer(op, 'state', a.state, device);
  check(op, decodeParams(a), a, device);
}
const decodeParams = (a: SsmConvDecodeArgs): SsmConvParams => ({ b: a.b, t: 1, c: a.c, ks: a.ks, silu: a.silu });

/**
 * ssm_conv_decode: one token per sequence, the state read and shifted in
 * place: y[b, c] = act(sum_{j < KS-1} weight[c, j] * state[b, c, j] + weight[c, KS-1] * x[b, c]);
 * state[b, c] = state[b, c, 1 ..] ++ x[b, c]. The same kernels as ssm_conv
 * with T = 1, so n decode steps equal ssm_conv over those n tokens.
 */
export function ssmConvDecode(enc: Encoder, args: SsmConvDecodeArgs): void {
  record(enc, planSsmConvDecode(args, enc.device.limits, enc.device));
}
export function planSsmConvDecode(args: SsmConvDecodeArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateSsmConvDecode(args, device);
  return plan(decodeParams(args), args);
}

// ---- the float64 reference ----

// CPU reference of the causal depthwise conv1d with rolling state (ssm_conv):
// plain loops, float64 accumulation.

export interface SsmConvRefShape {
  b: number;
  t: number;
  c: number;
  ks: number;
  silu: boolean;
}

/**
 * Per (b, c), xx = state[b, c, :] ++ x[b, :, c] (zeros for the state when absent):
 *   y[b, t, c] = act(sum_{j < ks} weight[c, j] * xx[t + j]),  act = SiLU when silu
 *   newState[b, c, i] = xx[t + i], i < ks - 1
 * Layouts: x, y [B, T, C]; weight [C, KS]; state, newState [B, C, KS-1].
 */
export function ssmConvRef(
  s: SsmConvRefShape, x: ArrayLike<number>, weight: ArrayLike<number>, state?: ArrayLike<number>,
): { y: Float64Array; newState: Float64Array } {
  const { b: B, t: T, c: C, ks: KS } = s;
  const hist = KS - 1;
  const y = new Float64Array(B * T * C);
  const newState = new Float64Array(B * C * hist);
  const xx = new Float64Array(hist + T);
  for (let b = 0; b < B; b++) {
    for (let c = 0; c < C; c++) {
      for (let i = 0; i < hist; i++) xx[i] = state === undefined ? 0 : state[(b * C + c) * hist + i]!;
      for (let t = 0; t < T; t++) xx[hist + t] = x[(b * T + t) * C + c]!;
      for (let t = 0; t < T; t++) {
        let acc = 0;
        for (let j = 0; j < KS; j++) acc += weight[c * KS + j]! * xx[t + j]!;
        y[(b * T + t) * C + c] = s.silu ? acc / (1 + Math.exp(-acc)) : acc;
      }
      for (let i = 0; i < hist; i++) newState[(b * C + c) * hist + i] = xx[T + i]!;
    }
  }
  return { y, newState };
}
