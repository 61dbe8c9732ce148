// fused_head_norm_rope: per-head RMS norm then NeoX rope in one pass,
// mlx-native's fused_head_norm_rope_f32 and fused_head_norm_rope_batch_bf16.
// Kernels: shaders/fused_head_norm_rope.metal and
// shaders/cuda/fused_head_norm_rope.cu, one threadgroup per (token, head).

import src from '../../shaders/fused_head_norm_rope.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/fused_head_norm_rope.cu' with { type: 'text' };
import header from '../../shaders/fused_head_norm_rope.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBoolean, checkBuffer, checkDtype, checkedProduct, checkedU32Product, checkElements, checkMultiple, checkNoAliasing, checkPositive, invalid, U32_MAX,
} from '../validate.ts';
import { rowThreadgroup, type LaunchLimits } from '../launch.ts';
import { familyPlans, record, type CudaLaunch, type OpPlan } from '../plan.ts';
import { checkRopeBuffers, checkTheta, ROPE_HEADS, ROPE_HEADS_MIN_TOKENS, ROPE_PAIRS, ropeNeoxRef } from './rope.ts';

export const FUSED_HEAD_NORM_ROPE_FAMILY = 'fused_head_norm_rope';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const FUSED_HEAD_NORM_ROPE_SOURCES = familySources(FUSED_HEAD_NORM_ROPE_FAMILY, { header, metal: src, cuda: cudaSrc });
export const FUSED_HEAD_NORM_ROPE_KERNELS = ['fused_head_norm_rope_f32', 'fused_head_norm_rope_batch_bf16', 'fused_head_norm_rope_qkv_f32'] as const;
const planOf = familyPlans({
  family: FUSED_HEAD_NORM_ROPE_FAMILY, sources: FUSED_HEAD_NORM_ROPE_SOURCES, kernels: FUSED_HEAD_NORM_ROPE_KERNELS,
});
/** Threads per row at most (mlx-native's 256). */
export const FUSED_HEAD_NORM_ROPE_MAX_THREADS = 256;

/** struct FusedHeadNormRopeF32Params (buffer 3 of fused_head_norm_rope_f32). */
export const FUSED_HEAD_NORM_ROPE_F32_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FusedHeadNormRopeF32Params');
/** struct FusedHeadNormRopeBatchBf16Params (buffer 3 of fused_head_norm_rope_batch_bf16). */
export const FUSED_HEAD_NORM_ROPE_BATCH_BF16_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FusedHeadNormRopeBatchBf16Params');
/** struct FusedHeadNormRopeQkvF32Params (buffer 3 of fused_head_norm_rope_qkv_f32). */
export const FUSED_HEAD_NORM_ROPE_QKV_F32_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FusedHeadNormRopeQkvF32Params');

export interface FusedHeadNormRopeArgs {
  /** [seqLen, nHeads, headDim], f32 (fused_head_norm_rope_f32) or bf16 (fused_head_norm_rope_batch_bf16) */
  input: Buffer;
  /** as input, output; may be input (in place) */
  output: Buffer;
  /** [headDim] in input's dtype, optional: the norm's scale (absent: none, the V-norm form) */
  weight?: Buffer;
  /** [seqLen] u32 (or i32 >= 0, read as its bits) */
  positions: Buffer;
  /** [halfRopeDim] f32 or longer (the first halfRopeDim are read), optional: pair i's frequency is divided by freqFactors[i] */
  freqFactors?: Buffer;
  /** f32 input only, optional: every output also as bf16, [seqLen, nHeads, headDim] or, with permuted, [nHeads, seqLen, headDim] */
  outputBf16?: Buffer;
  /** f32 input only, optional: every output also as f32 at the permuted layout [nHeads, seqLen, headDim] (or unpermuted without permuted) */
  outputF32Perm?: Buffer;
  /** Place outputBf16 and outputF32Perm at [head, token, i] (default false). */
  permuted?: boolean;
  seqLen: number;
  nHeads: number;
  /** Elements per head, even. */
  headDim: number;
  /** Rotated pairs (x[i], x[i + headDim/2]), i < halfRopeDim, at most headDim / 2; 0: the norm alone. */
  halfRopeDim: number;
  /** Added to mean(x^2) under the square root. */
  eps: number;
  /** Frequency base: pair i turns by pos * theta^(-2i / headDim). */
  theta: number;
}

/** Threads per row and the threadgroup(0) bytes (one float per simdgroup, in 16-byte units). */
export function fusedHeadNormRopeThreadgroup(headDim: number, limits: LaunchLimits): { threads: number; sharedBytes: number } {
  return rowThreadgroup(headDim, FUSED_HEAD_NORM_ROPE_MAX_THREADS, limits);
}

/** Tokens a block of the CUDA heads form at most (shaders/cuda/common.cuh ROPE_BLOCK_TOKENS, a power of two). */
export const ROPE_BLOCK_TOKENS = 2;
/** Threads of a block of the CUDA heads form at most (common.cuh ROPE_HEADS_BLOCK_THREADS: the entries' launch bounds). */
export const ROPE_HEADS_BLOCK_THREADS = 256;

/**
 * The CUDA heads form of the family's kernels (`<kernel>_heads`, see
 * shaders/cuda/fused_head_norm_rope.cu) where a head's row is a power of two
 * of up to 32 threads of ROPE_PAIRS pairs (headDim 8 to 256): grid (seqLen /
 * tz, 1, groups) of (tx, ty, tz) threads, tx = headDim / 2 / ROPE_PAIRS, ty
 * enough for ROPE_HEADS heads a thread of the most heads a group, rounded up
 * to whole warps (at most ROPE_HEADS_BLOCK_THREADS threads; the kernels loop
 * over the heads past them), tz tokens a block (up to ROPE_BLOCK_TOKENS,
 * dividing seqLen and within those threads), which share the powf of their
 * angles' divisors. undefined where the head's row does not fit that form or
 * the tokens are fewer than ROPE_HEADS_MIN_TOKENS.
 */
export function fusedHeadNormRopeHeadsLaunch(kernel: string, headDim: number, seqLen: number, heads: number,
  groups = 1, tokens = ROPE_BLOCK_TOKENS): CudaLaunch | undefined {
  const tx = headDim / 2 / ROPE_PAIRS;
  if (seqLen < ROPE_HEADS_MIN_TOKENS || !Number.isInteger(tx) || tx > 32 || (tx & (tx - 1)) !== 0) return undefined;
  const warp = 32 / tx;
  const ty = Math.min(Math.ceil(Math.ceil(heads / ROPE_HEADS) / warp) * warp, ROPE_HEADS_BLOCK_THREADS / tx);
  let tz = tokens;
  while (tz > 1 && (seqLen % tz !== 0 || tx * ty * tz > ROPE_HEADS_BLOCK_THREADS)) tz /= 2;
  return { grid: [seqLen / tz, 1, groups], threads: [tx, ty, tz], entry: `${kernel}_heads` };
}


export function packFusedHeadNormRopeF32Params(a: FusedHeadNormRopeArgs): Uint8Array {
  return packFields(FUSED_HEAD_NORM_ROPE_F32_PARAMS_LAYOUT, {
    head_dim: a.headDim, n_heads: a.nHeads, half_rope_dim: a.halfRopeDim, eps: a.eps, has_weight: a.weight ? 1 : 0,
    theta: a.theta, has_freq_factors: a.freqFactors ? 1 : 0, has_bf16_output: a.outputBf16 ? 1 : 0,
    bf16_permuted: a.permuted === true ? 1 : 0, seq_len: a.seqLen, has_f32_perm_output: a.outputF32Perm ? 1 : 0,
  });
}
export function packFusedHeadNormRopeBatchBf16Params(a: FusedHeadNormRopeArgs): Uint8Array {
  return packFields(FUSED_HEAD_NORM_ROPE_BATCH_BF16_PARAMS_LAYOUT, {
    head_dim: a.headDim, n_heads: a.nHeads, half_rope_dim: a.halfRopeDim, eps: a.eps, has_weight: a.weight ? 1 : 0,
    theta: a.theta, has_freq_factors: a.freqFactors ? 1 : 0, reserved: 0,
  });
}

/** The norm's and the rotation's scalars of both ops: halfRopeDim in [0, headDim / 2], eps finite >= 0, theta. */
function checkNormRope(op: string, a: { halfRopeDim: number; headDim: number; eps: number; theta: number }): void {
  if (typeof a.halfRopeDim !== 'number' || !Number.isSafeInteger(a.halfRopeDim) || a.halfRopeDim < 0) {
    throw invalid(op, 'halfRopeDim', 'an integer >= 0', a.halfRopeDim);
  }
  checkAtMost(op, 'halfRopeDim', a.halfRopeDim, a.headDim / 2, 'headDim / 2');
  if (typeof a.eps !== 'number' || !Number.isFinite(a.eps) || a.eps < 0) throw invalid(op, 'eps', 'a finite number >= 0', a.eps);
  checkTheta(op, a.theta);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateFusedHeadNormRope(a: FusedHeadNormRopeArgs, device?: Device): void {
  const op = 'fused_head_norm_rope';
  checkPositive(op, 'seqLen', a.seqLen);
  checkPositive(op, 'nHeads', a.nHeads);
  checkPositive(op, 'headDim', a.headDim);
  checkMultiple(op, 'headDim', a.headDim, 2);
  checkAtMost(op, 'seqLen', a.seqLen, U32_MAX, '2^32 - 1');
  checkAtMost(op, 'nHeads', a.nHeads, U32_MAX, '2^32 - 1');
  checkAtMost(op, 'headDim', a.headDim, U32_MAX, '2^32 - 1');
  checkNormRope(op, a);
  checkBoolean(op, 'permuted', a.permuted, true);
  const rows = checkedU32Product(op, 'seqLen * nHeads', a.seqLen, a.nHeads);
  const n = checkedProduct(op, 'seqLen * nHeads * headDim', a.seqLen, a.nHeads, a.headDim);
  checkRopeBuffers(op, a, ['f32', 'bf16'], n, a.seqLen, device,
    [['weight', a.weight], ['freqFactors', a.freqFactors], ['outputBf16', a.outputBf16], ['outputF32Perm', a.outputF32Perm]]);
  const dt = a.input.dtype;
  if (a.weight !== undefined) {
    checkDtype(op, 'weight', a.weight, dt);
    checkElements(op, 'weight', a.weight, a.headDim);
  }
  if (a.freqFactors !== undefined) {
    checkDtype(op, 'freqFactors', a.freqFactors, 'f32');
    if (a.freqFactors.elementCount < a.halfRopeDim) {
      throw invalid(op, 'freqFactors.elementCount', `at least halfRopeDim (${a.halfRopeDim})`, a.freqFactors.elementCount);
    }
  }
  for (const [arg, b, want] of [['outputBf16', a.outputBf16, 'bf16'], ['outputF32Perm', a.outputF32Perm, 'f32']] as const) {
    if (b === undefined) continue;
    if (dt !== 'f32') throw invalid(op, arg, 'absent for bf16 input (fused_head_norm_rope_batch_bf16 writes output alone)', 'a buffer');
    checkDtype(op, arg, b, want);
    checkElements(op, arg, b, n);
  }
  checkNoAliasing(op, [
    ['input', a.input], ['output', a.output], ['weight', a.weight], ['positions', a.positions], ['freqFactors', a.freqFactors],
    ['outputBf16', a.outputBf16], ['outputF32Perm', a.outputF32Perm],
  ], ['output', 'outputBf16', 'outputF32Perm'], 'a row of output over another row of input', [['output', 'input']]);
}

/**
 * fusedHeadNormRope: per (token, head) row of x,
 *   n[i] = x[i] / sqrt(sum_j x[j]^2 / headDim + eps) * (weight[i] if weight)
 * then NeoX rope: pair i = (n[i], n[i + headDim/2]) for i < halfRopeDim turns by
 *   angle = positions[token] * theta^(-2i / headDim) / freqFactors[i];
 * the other pairs are n unrotated (partial rotary; the exponent over headDim,
 * as rope_neox). Norm in f32, the angle in f32 (see tests/rope.test.ts for
 * its error at large positions).
 *
 * Layouts: input, output [seqLen, nHeads, headDim]: f32 (fused_head_norm_rope_f32,
 * f32 weight; optional outputBf16 bf16 and outputF32Perm f32 copies, at
 * [nHeads, seqLen, headDim] with permuted) or bf16 (fused_head_norm_rope_batch_bf16,
 * bf16 weight); positions [seqLen] u32; freqFactors [>= halfRopeDim] f32.
 * output may be input.
 * Bindings (f32): 0 input, 1 output, 2 weight, 3 FusedHeadNormRopeF32Params,
 * 4 positions, 5 freqFactors, 6 outputBf16, 7 outputF32Perm; (bf16) 0 to 5 alike
 * with FusedHeadNormRopeBatchBf16Params; an absent weight or freqFactors binds
 * input (never read), an absent copy binds output (never written). threadgroup(0): one float per simdgroup.
 * Grid: (seqLen * nHeads, 1, 1) threadgroups of min(256, nextPow2(headDim)) threads;
 * on CUDA the heads form where it fits and nothing is co-written
 * (fusedHeadNormRopeHeadsLaunch).
 */
export function fusedHeadNormRope(enc: Encoder, args: FusedHeadNormRopeArgs): void {
  record(enc, planFusedHeadNormRope(args, enc.device.limits, enc.device));
}

/** fusedHeadNormRope's plan: validates, then one dispatch (see fusedHeadNormRope). */
export function planFusedHeadNormRope(a: FusedHeadNormRopeArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateFusedHeadNormRope(a, device);
  const { threads, sharedBytes } = fusedHeadNormRopeThreadgroup(a.headDim, limits);
  const f32 = a.input.dtype === 'f32';
  // An absent weight or freqFactors binds input (never read); an absent
  // co-write binds output (never written: its has_* flag is 0), so the
  // dispatch writes no more than it does.
  const buffers: (Buffer | undefined)[] = [a.input, a.output, a.weight ?? a.input, , a.positions, a.freqFactors ?? a.input];
  if (f32) buffers.push(a.outputBf16 ?? a.output, a.outputF32Perm ?? a.output);
  const bytes: (Uint8Array | undefined)[] = [, , , f32 ? packFusedHeadNormRopeF32Params(a) : packFusedHeadNormRopeBatchBf16Params(a)];
  const kernel = f32 ? 'fused_head_norm_rope_f32' : 'fused_head_norm_rope_batch_bf16';
  // The heads form writes no co-write (outputBf16, outputF32Perm); the bf16 entry a token a block (measured faster).
  const cuda = a.outputBf16 === undefined && a.outputF32Perm === undefined
    ? fusedHeadNormRopeHeadsLaunch(kernel, a.headDim, a.seqLen, a.nHeads, 1, f32 ? ROPE_BLOCK_TOKENS : 1) : undefined;
  return planOf({
    kernel,
    buffers,
    bytes,
    threadgroupMemory: [sharedBytes],
    grid: [a.seqLen * a.nHeads, 1, 1],
    threads: [threads, 1, 1],
    ...(cuda === undefined ? {} : { cuda }),
  });
}

export interface FusedHeadNormRopeQkvArgs {
  /** [seqLen, nHeads, headDim] f32, normalized with qWeight and rotated in place. */
  q: Buffer;
  /** [seqLen, nKvHeads, headDim] f32, normalized with kWeight and rotated in place. */
  k: Buffer;
  /**
   * [seqLen, nKvHeads, headDim] f32, optional: normalized without weight or
   * rotation, in place, or (vFromK) written from k's values before k's norm.
   */
  v?: Buffer;
  /** v = k * rmsInv(k) from k's values (a layer whose keys are its values); requires v. Default false. */
  vFromK?: boolean;
  /** [headDim] f32 */
  qWeight: Buffer;
  /** [headDim] f32 */
  kWeight: Buffer;
  /** [seqLen] u32 (or i32 >= 0, read as its bits) */
  positions: Buffer;
  /** [halfRopeDim] f32 or longer, optional: pair i's frequency is divided by freqFactors[i] (q and k). */
  freqFactors?: Buffer;
  seqLen: number;
  nHeads: number;
  nKvHeads: number;
  /** Elements per head, even. */
  headDim: number;
  /** Rotated pairs of q and k, at most headDim / 2. */
  halfRopeDim: number;
  eps: number;
  theta: number;
}

export function packFusedHeadNormRopeQkvF32Params(a: FusedHeadNormRopeQkvArgs): Uint8Array {
  return packFields(FUSED_HEAD_NORM_ROPE_QKV_F32_PARAMS_LAYOUT, {
    head_dim: a.headDim, n_heads: a.nHeads, n_kv_heads: a.nKvHeads, half_rope_dim: a.halfRopeDim, eps: a.eps, theta: a.theta,
    has_freq_factors: a.freqFactors ? 1 : 0, v_mode: a.v === undefined ? 0 : a.vFromK === true ? 2 : 1, seq_len: a.seqLen,
  });
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateFusedHeadNormRopeQkv(a: FusedHeadNormRopeQkvArgs, device?: Device): void {
  const op = 'fused_head_norm_rope_qkv';
  checkPositive(op, 'seqLen', a.seqLen);
  checkPositive(op, 'nHeads', a.nHeads);
  checkPositive(op, 'nKvHeads', a.nKvHeads);
  checkPositive(op, 'headDim', a.headDim);
  checkMultiple(op, 'headDim', a.headDim, 2);
  checkNormRope(op, a);
  checkBoolean(op, 'vFromK', a.vFromK, true);
  // Every row of q, k and v is a threadgroup: the grid's count and the kernel's 32-bit row indices.
  checkedU32Product(op, 'seqLen * (nHeads + 2 * nKvHeads)', a.seqLen, a.nHeads + 2 * a.nKvHeads);
  const nq = checkedProduct(op, 'seqLen * nHeads * headDim', a.seqLen, a.nHeads, a.headDim);
  const nk = checkedProduct(op, 'seqLen * nKvHeads * headDim', a.seqLen, a.nKvHeads, a.headDim);
  const bindings: [string, Buffer | undefined][] = [
    ['q', a.q], ['k', a.k], ['v', a.v], ['qWeight', a.qWeight], ['kWeight', a.kWeight], ['positions', a.positions], ['freqFactors', a.freqFactors],
  ];
  for (const [arg, b] of bindings) if (b !== undefined || (arg !== 'v' && arg !== 'freqFactors')) checkBuffer(op, arg, b, device);
  if (a.vFromK === true && a.v === undefined) throw invalid(op, 'v', 'a Buffer (vFromK writes it)', 'undefined');
  for (const [arg, b] of bindings) if (b !== undefined && arg !== 'positions') checkDtype(op, arg, b, 'f32');
  checkDtype(op, 'positions', a.positions, ['u32', 'i32']);
  checkElements(op, 'q', a.q, nq);
  checkElements(op, 'k', a.k, nk);
  if (a.v !== undefined) checkElements(op, 'v', a.v, nk);
  checkElements(op, 'qWeight', a.qWeight, a.headDim);
  checkElements(op, 'kWeight', a.kWeight, a.headDim);
  checkElements(op, 'positions', a.positions, a.seqLen);
  if (a.freqFactors !== undefined && a.freqFactors.elementCount < a.halfRopeDim) {
    throw invalid(op, 'freqFactors.elementCount', `at least halfRopeDim (${a.halfRopeDim})`, a.freqFactors.elementCount);
  }
  // q, k and v are each updated in place, row by row; none may overlap another or an input.
  checkNoAliasing(op, bindings, ['q', 'k', 'v'], 'each is updated in place by its own rows');
}

/**
 * fusedHeadNormRopeQkv: one attention layer's per-head norms in one dispatch
 * (ours): q's and k's rows as fusedHeadNormRope with their weights and the
 * same rotation (positions, theta, halfRopeDim, freqFactors), in place; v's
 * rows, where v is given, normalized without weight or rotation, in place or
 * (vFromK) from k's values before k's norm.
 *
 * Layouts (f32): q [seqLen, nHeads, headDim]; k, v [seqLen, nKvHeads,
 * headDim]; qWeight, kWeight [headDim]; positions [seqLen] u32;
 * freqFactors [>= halfRopeDim].
 * Bindings: 0 q, 1 k, 2 v (k stands in when absent, never written), 3
 * FusedHeadNormRopeQkvF32Params, 4 positions, 5 qWeight, 6 kWeight, 7
 * freqFactors (qWeight stands in when absent, never read); threadgroup(0)
 * one float per simdgroup.
 * Grid: (seqLen * (nHeads + nKvHeads, + nKvHeads for v in place), 1, 1)
 * threadgroups of min(256, nextPow2(headDim)) threads; on CUDA the heads
 * form where it fits (fusedHeadNormRopeHeadsLaunch, z: q, k, v in place).
 */
export function fusedHeadNormRopeQkv(enc: Encoder, args: FusedHeadNormRopeQkvArgs): void {
  record(enc, planFusedHeadNormRopeQkv(args, enc.device.limits, enc.device));
}

/** fusedHeadNormRopeQkv's plan: validates, then one dispatch (see fusedHeadNormRopeQkv). */
export function planFusedHeadNormRopeQkv(a: FusedHeadNormRopeQkvArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateFusedHeadNormRopeQkv(a, device);
  const { threads, sharedBytes } = fusedHeadNormRopeThreadgroup(a.headDim, limits);
  const vRows = a.v !== undefined && a.vFromK !== true ? a.nKvHeads : 0;
  const cuda = fusedHeadNormRopeHeadsLaunch('fused_head_norm_rope_qkv_f32', a.headDim, a.seqLen, Math.max(a.nHeads, a.nKvHeads),
    vRows > 0 ? 3 : 2);
  return planOf({
    kernel: 'fused_head_norm_rope_qkv_f32',
    buffers: [a.q, a.k, a.v ?? a.k, , a.positions, a.qWeight, a.kWeight, a.freqFactors ?? a.qWeight],
    bytes: [, , , packFusedHeadNormRopeQkvF32Params(a)],
    threadgroupMemory: [sharedBytes],
    grid: [a.seqLen * (a.nHeads + a.nKvHeads + vRows), 1, 1],
    threads: [threads, 1, 1],
    ...(cuda === undefined ? {} : { cuda }),
  });
}

// ---- the float64 reference ----

// CPU reference of fused_head_norm_rope: float64, the closed form.

/**
 * Rows [seqLen * nHeads, headDim]: n = x / sqrt(mean(x^2) + eps) * weight,
 * then NeoX rope over the first halfRopeDim pairs (exponent over headDim).
 */
export function fusedHeadNormRopeRef(x: ArrayLike<number>, weight: ArrayLike<number> | undefined, positions: ArrayLike<number>,
  seqLen: number, nHeads: number, headDim: number, halfRopeDim: number, eps: number, theta: number,
  freqFactors?: ArrayLike<number>): Float64Array {
  const n = new Float64Array(seqLen * nHeads * headDim);
  for (let r = 0; r < seqLen * nHeads; r++) {
    let sq = 0;
    for (let i = 0; i < headDim; i++) sq += x[r * headDim + i]! ** 2;
    const inv = 1 / Math.sqrt(sq / headDim + eps);
    for (let i = 0; i < headDim; i++) n[r * headDim + i] = x[r * headDim + i]! * inv * (weight === undefined ? 1 : weight[i]!);
  }
  if (halfRopeDim === 0) return n;
  return ropeNeoxRef(n, positions, seqLen, nHeads, headDim, 2 * halfRopeDim, theta, freqFactors);
}

/** [seqLen, nHeads, headDim] to [nHeads, seqLen, headDim]. */
export function permuteTokensHeads(y: ArrayLike<number>, seqLen: number, nHeads: number, headDim: number): Float64Array {
  const out = new Float64Array(seqLen * nHeads * headDim);
  for (let t = 0; t < seqLen; t++) {
    for (let h = 0; h < nHeads; h++) {
      for (let i = 0; i < headDim; i++) out[(h * seqLen + t) * headDim + i] = y[(t * nHeads + h) * headDim + i]!;
    }
  }
  return out;
}
