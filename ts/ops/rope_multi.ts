// rope_multi: multi-section rotary position embedding (MROPE, IMROPE of
// Qwen3.5 / Qwen3.6, VISION of the Qwen3-VL ViT), mlx-native's rope_multi.
// Kernels: shaders/rope_multi.metal and shaders/cuda/rope_multi.cu, one
// thread per pair.

import src from '../../shaders/rope_multi.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/rope_multi.cu' with { type: 'text' };
import header from '../../shaders/rope_multi.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import { ROPE_HEADS_MIN_TOKENS, ropeHeadsCudaLaunch } from './rope.ts';
import {
  checkAtMost, checkBufferRules, checkedProduct, checkedU32Product, checkMultiple, checkNoAliasing, checkPositive, F32_MAX, invalid, like, ruleBindings, U32_MAX,
  type BufferRule,
} from '../validate.ts';
import { familyPlans, record, type OpPlan, type PlannedDispatch } from '../plan.ts';

export const ROPE_MULTI_FAMILY = 'rope_multi';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const ROPE_MULTI_SOURCES = familySources(ROPE_MULTI_FAMILY, { header, metal: src, cuda: cudaSrc });
export const ROPE_MULTI_KERNELS = ['rope_multi_f32', 'rope_multi_f16', 'rope_multi_bf16'] as const;
const planOf = familyPlans({ family: ROPE_MULTI_FAMILY, sources: ROPE_MULTI_SOURCES, kernels: ROPE_MULTI_KERNELS });
/** Threads per threadgroup (mlx-native's 256). */
export const ROPE_MULTI_THREADS = 256;

/** The modes, as ggml's GGML_ROPE_TYPE_* codes that the kernels read. */
export const ROPE_MULTI_MODES = { mrope: 8, imrope: 40, vision: 24 } as const;
export type RopeMultiMode = keyof typeof ROPE_MULTI_MODES;

/** struct RopeMultiParams (buffer 2): (freq_base, head_dim, rope_dim, 0) as floats. */
export const ROPE_MULTI_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'RopeMultiParams');
/** struct RopeMultiRopeParams (buffer 4): (n_heads, mode, seq_len, 0). */
export const ROPE_MULTI_ROPE_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'RopeMultiRopeParams');
/** struct RopeMultiSections (buffer 5): (s0, s1, s2, s3). */
export const ROPE_MULTI_SECTIONS_LAYOUT: readonly ParamField[] = structLayout(header, 'RopeMultiSections');

export interface RopeMultiArgs {
  /** [seqLen, nHeads, headDim], f32, f16 or bf16 */
  input: Buffer;
  /** as input, output; may be input (in place) */
  output: Buffer;
  /** [4, seqLen] i32 (or u32 below 2^31): the t, h, w and e positions of each token */
  positions: Buffer;
  seqLen: number;
  nHeads: number;
  /** Elements per row, even. */
  headDim: number;
  /** Rotated elements, even, in (0, headDim]; vision: headDim. */
  ropeDim: number;
  /** Frequency base (Qwen3.5 / 3.6: 1e7). */
  freqBase: number;
  mode: RopeMultiMode;
  /** Pairs per axis [s0, s1, s2, s3] (Qwen3.5 / 3.6 text: [11, 11, 10, 0]); vision: s0 + s1 = headDim / 2. */
  sections: readonly [number, number, number, number];
}

export function packRopeMultiParams(a: Pick<RopeMultiArgs, 'freqBase' | 'headDim' | 'ropeDim'>): Uint8Array {
  return packFields(ROPE_MULTI_PARAMS_LAYOUT, { freq_base: a.freqBase, head_dim: a.headDim, rope_dim: a.ropeDim, reserved: 0 });
}
export function packRopeMultiRopeParams(a: Pick<RopeMultiArgs, 'nHeads' | 'mode' | 'seqLen'>): Uint8Array {
  return packFields(ROPE_MULTI_ROPE_PARAMS_LAYOUT, { n_heads: a.nHeads, mode: ROPE_MULTI_MODES[a.mode], seq_len: a.seqLen, reserved: 0 });
}
export function packRopeMultiSections(s: readonly number[]): Uint8Array {
  return packFields(ROPE_MULTI_SECTIONS_LAYOUT, { s0: s[0]!, s1: s[1]!, s2: s[2]!, s3: s[3]! });
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateRopeMulti(a: RopeMultiArgs, device?: Device): void {
  const op = 'rope_multi';
  checkPositive(op, 'seqLen', a.seqLen);
  checkPositive(op, 'nHeads', a.nHeads);
  checkAtMost(op, 'seqLen', a.seqLen, U32_MAX, '2^32 - 1');
  checkAtMost(op, 'nHeads', a.nHeads, U32_MAX, '2^32 - 1');
  checkPositive(op, 'headDim', a.headDim);
  checkMultiple(op, 'headDim', a.headDim, 2);
  checkAtMost(op, 'headDim', a.headDim, 2 ** 24, '2^24');
  checkPositive(op, 'ropeDim', a.ropeDim);
  checkMultiple(op, 'ropeDim', a.ropeDim, 2);
  checkAtMost(op, 'ropeDim', a.ropeDim, a.headDim, 'headDim');
  if (typeof a.freqBase !== 'number' || !Number.isFinite(a.freqBase) || a.freqBase <= 0 || a.freqBase > F32_MAX) {
    throw invalid(op, 'freqBase', 'a finite f32 > 0', a.freqBase);
  }
  if (typeof a.mode !== 'string' || !Object.hasOwn(ROPE_MULTI_MODES, a.mode)) throw invalid(op, 'mode', 'one of mrope, imrope, vision', a.mode);
  if (!Array.isArray(a.sections) || a.sections.length !== 4) throw invalid(op, 'sections', 'an array of 4 section sizes', a.sections);
  for (let i = 0; i < 4; i++) {
    const s = a.sections[i];
    if (typeof s !== 'number' || !Number.isSafeInteger(s) || s < 0 || s > 2 ** 24) {
      throw invalid(op, `sections[${i}]`, 'an integer in [0, 2^24]', s);
    }
  }
  if (a.mode === 'vision') {
    // ggml's vision rope rotates every pair and restarts the exponent per section.
    if (a.ropeDim !== a.headDim) throw invalid(op, 'ropeDim', `headDim (${a.headDim}) in vision mode`, a.ropeDim);
    if (a.sections[0] + a.sections[1] !== a.headDim / 2) {
      throw invalid(op, 'sections[0] + sections[1]', `headDim / 2 (${a.headDim / 2}) in vision mode`, a.sections[0] + a.sections[1]);
    }
  }
  const rows = checkedU32Product(op, 'seqLen * nHeads', a.seqLen, a.nHeads);
  const n = checkedProduct(op, 'seqLen * nHeads * headDim', a.seqLen, a.nHeads, a.headDim);
  const np = checkedProduct(op, '4 * seqLen', 4, a.seqLen);
  const rules: BufferRule[] = [
    ['input', a.input, ['f32', 'f16', 'bf16'], n], ['output', a.output, like('input'), n], ['positions', a.positions, ['i32', 'u32'], np],
  ];
  checkBufferRules(op, rules, device);
  checkNoAliasing(op, ruleBindings(rules), ['output'], 'rows of output over other rows of input', [['output', 'input']]);
}

/**
 * mlx-native's launch: (tx, ty) = (min(headDim/2, 256), min(rows, 256 / tx))
 * threads, the kernels check both bounds. Metal: pairs on x, rows on y; CUDA:
 * rows on the grid's x (gridDim.y stops at 65535); from ROPE_HEADS_MIN_TOKENS
 * tokens the CUDA heads form (rope.ts's ropeHeadsCudaLaunch).
 */
export function ropeMultiLaunch(halfDim: number, rows: number): Pick<PlannedDispatch, 'grid' | 'threads' | 'cuda'> {
  const tx = Math.min(halfDim, ROPE_MULTI_THREADS);
  const ty = Math.min(rows, Math.floor(ROPE_MULTI_THREADS / tx));
  const px = Math.ceil(halfDim / tx);
  const py = Math.ceil(rows / ty);
  return { grid: [px, py, 1], threads: [tx, ty, 1], cuda: { grid: [py, px, 1], threads: [tx, ty, 1] } };
}

/**
 * rope_multi: NeoX pairs (x[p], x[p + headDim/2]) of each row turn by
 *   MROPE, IMROPE: angle = pos[axis][token] * freqBase^(-2p / ropeDim)
 *   VISION:        angle = pos[axis][token] * freqBase^(-2q / (headDim / 2))
 * for p < ropeDim / 2 (the other pairs are copied), the axis of pair p from
 * its sector p % (s0 + s1 + s2 + s3) (see shaders/rope_multi.metal); q is p's
 * index inside its vision section. With the four position rows equal and
 * ropeDim = headDim, IMROPE is NeoX rope (ropeNeox).
 * Partial rotary pairs as mlx-native's kernel does: (x[p], x[p + headDim/2])
 * for p < ropeDim / 2. Hugging Face's Qwen3.5 and llama.cpp's rope pair
 * (x[p], x[p + ropeDim/2]) inside the first ropeDim elements and pass
 * [ropeDim, headDim) through; the two agree only when ropeDim = headDim.
 *
 * Layouts: input, output [seqLen, nHeads, headDim], one dtype: f32, f16 or
 * bf16; positions [4, seqLen] i32 (t, h, w, e). output may be input.
 * Bindings: 0 input, 1 output, 2 RopeMultiParams, 3 positions,
 * 4 RopeMultiRopeParams, 5 RopeMultiSections.
 * Grid: (ceil(headDim/2 / tx), ceil(seqLen * nHeads / ty)) threadgroups of
 * (tx, ty) = (min(headDim/2, 256), min(rows, 256 / tx)); on CUDA from
 * ROPE_HEADS_MIN_TOKENS tokens rope.ts's ropeHeadsCudaLaunch (a thread
 * ROPE_PAIRS pairs of ROPE_HEADS heads).
 */
export function ropeMulti(enc: Encoder, args: RopeMultiArgs): void {
  record(enc, planRopeMulti(args, enc.device.limits, enc.device));
}

/** ropeMulti's plan: validates, then one dispatch (see ropeMulti). */
export function planRopeMulti(a: RopeMultiArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateRopeMulti(a, device);
  return planOf({
    kernel: `rope_multi_${a.input.dtype}`,
    buffers: [a.input, a.output, , a.positions],
    bytes: [, , packRopeMultiParams(a), , packRopeMultiRopeParams(a), packRopeMultiSections(a.sections)],
    ...ropeMultiLaunch(a.headDim / 2, a.seqLen * a.nHeads),
    ...(a.seqLen >= ROPE_HEADS_MIN_TOKENS
      ? { cuda: ropeHeadsCudaLaunch(`rope_multi_${a.input.dtype}`, a.headDim / 2, a.seqLen, a.nHeads) } : {}),
  });
}

// ---- the float64 reference ----

// CPU reference of rope_multi: the closed form in float64.

/** The position axis (0 t, 1 h, 2 w, 3 e) of a sector, by mode. */
export function ropeMultiAxis(sector: number, mode: 'mrope' | 'imrope' | 'vision', s: readonly number[]): number {
  if (mode === 'imrope') {
    const k = sector % 3;
    if (k === 0 && sector < 3 * s[0]!) return 0;
    if (k === 1 && sector < 3 * s[1]!) return 1;
    if (k === 2 && sector < 3 * s[2]!) return 2;
    return 3;
  }
  if (mode === 'vision') return sector < s[0]! ? 0 : 1;
  if (sector < s[0]!) return 0;
  if (sector < s[0]! + s[1]!) return 1;
  if (sector < s[0]! + s[1]! + s[2]!) return 2;
  return 3;
}

/** The angle of pair p of a token: its axis' position times the pair's frequency; also the exponent 2p/denom. */
export function ropeMultiAngle(positions: ArrayLike<number>, seqLen: number, token: number, p: number, headDim: number,
  ropeDim: number, freqBase: number, mode: 'mrope' | 'imrope' | 'vision', s: readonly number[]): [angle: number, exponent: number] {
  const vision = mode === 'vision';
  const total = vision ? s[0]! + s[1]! : s[0]! + s[1]! + s[2]! + s[3]!;
  const sector = p % Math.max(total, 1);
  const axis = ropeMultiAxis(sector, mode, s);
  const q = vision ? (sector < s[0]! ? sector : sector - s[0]!) : p;
  const exponent = (2 * q) / (vision ? headDim / 2 : ropeDim);
  return [positions[axis * seqLen + token]! * freqBase ** -exponent, exponent];
}

/** rope_multi over rows [seqLen * nHeads, headDim]: NeoX pairs, pairs past ropeDim / 2 copied. */
export function ropeMultiRef(x: ArrayLike<number>, positions: ArrayLike<number>, seqLen: number, nHeads: number, headDim: number,
  ropeDim: number, freqBase: number, mode: 'mrope' | 'imrope' | 'vision', sections: readonly number[]): Float64Array {
  const y = Float64Array.from(x);
  const half = headDim / 2;
  for (let r = 0; r < seqLen * nHeads; r++) {
    const token = Math.floor(r / nHeads);
    for (let p = 0; p < ropeDim / 2; p++) {
      const [t] = ropeMultiAngle(positions, seqLen, token, p, headDim, ropeDim, freqBase, mode, sections);
      const a = x[r * headDim + p]!;
      const b = x[r * headDim + p + half]!;
      y[r * headDim + p] = a * Math.cos(t) - b * Math.sin(t);
      y[r * headDim + p + half] = a * Math.sin(t) + b * Math.cos(t);
    }
  }
  return y;
}
