// softmax: softmax over rows, with an optional scale, softcap and additive
// bf16 mask; and softcap on its own. Kernel names, bindings and params bytes
// are mlx-native's (src/ops/softmax.rs, scale_mask_softmax.rs, softcap.rs),
// with scale_mask_softmax in f16 and bf16 and its pad word holding the softcap.
// Kernels: shaders/softmax.metal and shaders/cuda/softmax.cu.

import src from '../../shaders/softmax.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/softmax.cu' with { type: 'text' };
import header from '../../shaders/softmax.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import { checkAtMost, checkBuffer, checkDtype, checkElements, checkNoAliasing, checkPositive, checkedProduct, invalid } from '../validate.ts';
import { nextPow2, roundUp16, rowThreadgroup, warpRowsLaunch, type LaunchLimits } from '../launch.ts';
import { record, type OpPlan } from '../plan.ts';

export const SOFTMAX_FAMILY = 'softmax';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const SOFTMAX_SOURCES = familySources(SOFTMAX_FAMILY, { header, metal: src, cuda: cudaSrc });
export const SOFTMAX_KERNELS = [
  'softmax_f32', 'softmax_f16', 'softmax_bf16',
  'scale_mask_softmax_f32', 'scale_mask_softmax_f16', 'scale_mask_softmax_bf16',
  'softcap_f32', 'softcap_f16', 'softcap_bf16',
] as const;
/** Threads per row the Metal launch uses at most (mlx-native's). */
export const SOFTMAX_MAX_THREADS = 256;
/** SoftmaxParams hold cols as an f32: exact up to 2^24. */
export const SOFTMAX_MAX_COLS = 2 ** 24;
/** softcap's threadgroup (mlx-native's): 256 threads, one element each. */
export const SOFTCAP_THREADS = 256;
/** softcap's grid counts threads in 32 bits. */
export const SOFTCAP_MAX_ELEMENTS = 2 ** 32 - SOFTCAP_THREADS;
const U32_MAX = 0xffff_ffff;

/** struct SoftmaxParams (softmax_<t>, buffer 2). */
export const SOFTMAX_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'SoftmaxParams');
/** struct ScaleMaskSoftmaxParams (scale_mask_softmax_<t>, buffer 3). */
export const SCALE_MASK_SOFTMAX_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'ScaleMaskSoftmaxParams');
/** struct SoftcapParams (softcap_<t>, buffer 2). */
export const SOFTCAP_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'SoftcapParams');

export interface SoftmaxArgs {
  /** [rows, cols], f32, f16 or bf16 */
  input: Buffer;
  /** [rows, cols] in input's dtype, output; may be input (in place) */
  output: Buffer;
  rows: number;
  /** Elements per row (the softmax axis), at most 2^24. */
  cols: number;
  /** Multiplies x first (1 when absent), e.g. 1 / sqrt(headDim). */
  scale?: number;
  /** > 0: v = softcap * tanh(x * scale / softcap) before the mask (Gemma 2); 0 or absent: none. */
  softcap?: number;
  /** [seqQ, cols] bf16, added after the softcap: row r adds mask row r % seqQ (0 or -inf for a causal mask). */
  mask?: Buffer;
  /** Mask rows (query positions), given with a mask; rows is a multiple. */
  seqQ?: number;
}

export interface SoftcapArgs {
  /** [n] (any shape), f32, f16 or bf16 */
  input: Buffer;
  /** input's dtype and element count; may be input (in place) */
  output: Buffer;
  /** > 0: y = cap * tanh(x / cap) (Gemma's final logits: 30). */
  cap: number;
}

export function packSoftmaxParams(p: { cols: number }): Uint8Array {
  return packFields(SOFTMAX_PARAMS_LAYOUT, { cols: p.cols, reserved: 0 });
}
export function packScaleMaskSoftmaxParams(p: { cols: number; seqQ: number; scale: number; softcap: number }): Uint8Array {
  return packFields(SCALE_MASK_SOFTMAX_PARAMS_LAYOUT, { cols: p.cols, seq_q: p.seqQ, scale: p.scale, softcap: p.softcap });
}
export function packSoftcapParams(p: { cap: number; n: number }): Uint8Array {
  return packFields(SOFTCAP_PARAMS_LAYOUT, { cap: p.cap, n_elements: p.n });
}

/** True when the arguments need scale_mask_softmax (a scale, a softcap or a mask). */
function extended(a: SoftmaxArgs): boolean {
  return a.mask !== undefined || (a.scale !== undefined && a.scale !== 1) || (a.softcap !== undefined && a.softcap !== 0);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateSoftmax(a: SoftmaxArgs, device?: Device): void {
  const op = 'softmax';
  checkPositive(op, 'rows', a.rows);
  checkPositive(op, 'cols', a.cols);
  checkAtMost(op, 'rows', a.rows, U32_MAX, '2^32 - 1');
  checkAtMost(op, 'cols', a.cols, SOFTMAX_MAX_COLS, '2^24 (the params hold cols as an f32)');
  if (a.scale !== undefined && !Number.isFinite(a.scale)) throw invalid(op, 'scale', 'a finite number', a.scale);
  if (a.softcap !== undefined && (!Number.isFinite(a.softcap) || a.softcap < 0)) throw invalid(op, 'softcap', 'a finite number >= 0', a.softcap);
  const n = checkedProduct(op, 'rows * cols', a.rows, a.cols);
  checkBuffer(op, 'input', a.input, device);
  checkBuffer(op, 'output', a.output, device);
  checkDtype(op, 'input', a.input, ['f32', 'f16', 'bf16']);
  checkDtype(op, 'output', a.output, a.input.dtype);
  checkElements(op, 'input', a.input, n);
  checkElements(op, 'output', a.output, n);
  if (a.mask !== undefined) {
    const seqQ = a.seqQ as number;
    checkPositive(op, 'seqQ', seqQ);
    if (a.rows % seqQ !== 0) throw invalid(op, 'seqQ', `a divisor of rows (${a.rows})`, seqQ);
    checkBuffer(op, 'mask', a.mask, device);
    checkDtype(op, 'mask', a.mask, 'bf16');
    checkElements(op, 'mask', a.mask, seqQ * a.cols);
  }
  // In place (output over exactly input) is safe: each thread reads only the
  // elements it writes. The mask, which other rows read, is not.
  checkNoAliasing(op, [['input', a.input], ['mask', a.mask], ['output', a.output]], ['output'],
    'a row of output over another row of input, or the mask', [['output', 'input']]);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateSoftcap(a: SoftcapArgs, device?: Device): void {
  const op = 'softcap';
  if (typeof a.cap !== 'number' || !Number.isFinite(a.cap) || a.cap <= 0) throw invalid(op, 'cap', 'a finite number > 0', a.cap);
  checkBuffer(op, 'input', a.input, device);
  checkBuffer(op, 'output', a.output, device);
  checkDtype(op, 'input', a.input, ['f32', 'f16', 'bf16']);
  checkDtype(op, 'output', a.output, a.input.dtype);
  const n = a.input.elementCount;
  checkPositive(op, 'input.elementCount', n);
  checkAtMost(op, 'input.elementCount', n, SOFTCAP_MAX_ELEMENTS, '2^32 - 256');
  checkElements(op, 'output', a.output, n);
  checkNoAliasing(op, [['input', a.input], ['output', a.output]], ['output'], 'an element of output over another of input', [['output', 'input']]);
}

/**
 * The Metal threadgroup of a row (min(256, nextPow2(cols)), one float per
 * simdgroup), and the CUDA block: enough threads, up to 1024, that each
 * holds at most 32 floats of the row in registers.
 */
export function softmaxThreadgroup(cols: number, limits: LaunchLimits): {
  threads: number; sharedBytes: number; cudaThreads: number; cudaSharedBytes: number;
} {
  const { threads, sharedBytes } = rowThreadgroup(cols, SOFTMAX_MAX_THREADS, limits);
  const cudaThreads = Math.min(limits.maxThreadsPerThreadgroup, 1024, Math.max(threads, nextPow2(Math.ceil(cols / 32))));
  return { threads, sharedBytes, cudaThreads, cudaSharedBytes: roundUp16(Math.ceil(cudaThreads / limits.simdWidth) * 4) };
}

/**
 * softmax over rows: v = c(x * scale) + mask[r % seqQ] with c(s) = softcap *
 * tanh(s / softcap) when softcap > 0; y[r, i] = exp(v[r, i] - max_r) /
 * sum_j exp(v[r, j] - max_r); a row whose every v is -inf gives zeros. Sums in f32.
 *
 * Layouts: input, output [rows, cols], one dtype: f32, f16 or bf16; mask
 * [seqQ, cols] bf16, shared by the rows r with one r % seqQ (heads of
 * [heads, seqQ, cols] scores). output may be input's buffer.
 * Kernels: softmax_<dtype> (no scale, softcap or mask: mlx-native's softmax),
 * else scale_mask_softmax_<dtype>.
 * Bindings: softmax_<t> 0 input, 1 output, 2 SoftmaxParams (cols as f32, 0);
 * scale_mask_softmax_<t> 0 input, 1 output, 2 mask (input bound in its place
 * when absent, seq_q 0), 3 ScaleMaskSoftmaxParams. threadgroup(0) one float per simdgroup.
 * Grid: (rows, 1, 1) threadgroups of min(256, nextPow2(cols)) threads; the
 * CUDA twin runs up to 1024 (softmaxThreadgroup), or one warp per row where
 * rows are short (warpRowsLaunch).
 */
export function softmax(enc: Encoder, args: SoftmaxArgs): void {
  record(enc, planSoftmax(args, enc.device.limits, enc.device));
}

/** softmax's plan: validates, then one dispatch (see softmax). */
export function planSoftmax(a: SoftmaxArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateSoftmax(a, device);
  const { threads, sharedBytes, cudaThreads, cudaSharedBytes } = softmaxThreadgroup(a.cols, limits);
  const ext = extended(a);
  const launch = {
    grid: [a.rows, 1, 1] as [number, number, number],
    threads: [threads, 1, 1] as [number, number, number],
    threadgroupMemory: [sharedBytes],
    cuda: warpRowsLaunch(a.rows, a.cols, limits) ?? {
      grid: [a.rows, 1, 1] as [number, number, number], threads: [cudaThreads, 1, 1] as [number, number, number], threadgroupMemory: [cudaSharedBytes],
    },
  };
  return {
    family: SOFTMAX_FAMILY,
    sources: SOFTMAX_SOURCES,
    kernels: SOFTMAX_KERNELS,
    dispatches: [ext
      ? {
        kernel: `scale_mask_softmax_${a.input.dtype}`,
        buffers: [a.input, a.output, a.mask ?? a.input],
        bytes: [, , , packScaleMaskSoftmaxParams({
          cols: a.cols, seqQ: a.mask === undefined ? 0 : a.seqQ!, scale: a.scale ?? 1, softcap: a.softcap ?? 0,
        })],
        ...launch,
      }
      : {
        kernel: `softmax_${a.input.dtype}`,
        buffers: [a.input, a.output],
        bytes: [, , packSoftmaxParams(a)],
        ...launch,
      }],
  };
}

/**
 * softcap: y[i] = cap * tanh(x[i] / cap), bounding values to (-cap, cap)
 * (Gemma's final logit softcap, cap 30). Arithmetic in f32.
 *
 * Layouts: input, output of n elements (any shape), one dtype: f32, f16 or
 * bf16; output may be input's buffer.
 * Kernels: softcap_<dtype>. Bindings: 0 input, 1 output, 2 SoftcapParams (cap, n as u32).
 * Grid: (ceil(n / 256), 1, 1) threadgroups of min(256, n) threads, one
 * element each; the CUDA twin gives each thread one 16-byte vector.
 */
export function softcap(enc: Encoder, args: SoftcapArgs): void {
  record(enc, planSoftcap(args, enc.device.limits, enc.device));
}

/** softcap's plan: validates, then one dispatch (see softcap). */
export function planSoftcap(a: SoftcapArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateSoftcap(a, device);
  const n = a.input.elementCount;
  const threads = Math.min(SOFTCAP_THREADS, n, limits.maxThreadsPerThreadgroup);
  const vec = 16 / (a.input.dtype === 'f32' ? 4 : 2);
  return {
    family: SOFTMAX_FAMILY,
    sources: SOFTMAX_SOURCES,
    kernels: SOFTMAX_KERNELS,
    dispatches: [{
      kernel: `softcap_${a.input.dtype}`,
      buffers: [a.input, a.output],
      bytes: [, , packSoftcapParams({ cap: a.cap, n })],
      grid: [Math.ceil(n / threads), 1, 1],
      threads: [threads, 1, 1],
      cuda: { grid: [Math.ceil(n / (SOFTCAP_THREADS * vec)), 1, 1], threads: [SOFTCAP_THREADS, 1, 1] },
    }],
  };
}
