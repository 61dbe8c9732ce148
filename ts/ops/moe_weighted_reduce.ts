// moe_weighted_reduce: an MoE layer's expert outputs reduced back to one row
// per token, with the shared expert and the residual folded in. Kernel name,
// bindings, param struct and rules of mlx-native's moe_weighted_reduce module
// (moe_weighted_reduce_f32); moe_weighted_reduce_f16 and _bf16 are added
// (16-bit activations, f32 routing weights), and _bf16_input (bf16 expert
// outputs, f32 for the rest). Kernels:
// shaders/moe_weighted_reduce.metal and shaders/cuda/moe_weighted_reduce.cu.

import src from '../../shaders/moe_weighted_reduce.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/moe_weighted_reduce.cu' with { type: 'text' };
import header from '../../shaders/moe_weighted_reduce.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import { dtypeSize } from '../dtype.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familyPlans, record, type Launch, type OpPlan } from '../plan.ts';
import { familySources } from '../registry.ts';
import {
  checkBufferRules, checkDtype, checkedProduct, checkGridDim, checkNoAliasing, checkU32Count, invalid, like, ruleBindings, type BufferRule,
} from '../validate.ts';
import { ceilDiv, rowThreadgroup } from '../launch.ts';

export const MOE_WEIGHTED_REDUCE_FAMILY = 'moe_weighted_reduce';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const MOE_WEIGHTED_REDUCE_SOURCES = familySources(MOE_WEIGHTED_REDUCE_FAMILY, { header, metal: src, cuda: cudaSrc });
export const MOE_WEIGHTED_REDUCE_KERNELS = [
  'moe_weighted_reduce_f32', 'moe_weighted_reduce_f16', 'moe_weighted_reduce_bf16', 'moe_weighted_reduce_bf16_input',
  'moe_weighted_reduce_bf16_shared', 'moe_weighted_reduce_norm_f32', 'moe_weighted_reduce_norm_bf16_input',
  'moe_weighted_reduce_norm_bf16_shared',
] as const;
const planOf = familyPlans({
  family: MOE_WEIGHTED_REDUCE_FAMILY, sources: MOE_WEIGHTED_REDUCE_SOURCES, kernels: MOE_WEIGHTED_REDUCE_KERNELS,
});

/** struct MoeWeightedReduceParams (buffer 0 of every kernel of the family). */
export const MOE_WEIGHTED_REDUCE_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'MoeWeightedReduceParams');

/** struct MoeWeightedReduceNormParams (buffer 0 of moe_weighted_reduce_norm_*). */
export const MOE_WEIGHTED_REDUCE_NORM_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'MoeWeightedReduceNormParams');

/** Threads of a threadgroup: the kernels index by 256 (mlx-native's TG_SIZE). */
export const MOE_WEIGHTED_REDUCE_THREADS = 256;


export interface MoeWeightedReduceArgs {
  /** f32 [nTokens, topK]: the routing weights (fused_moe_routing's, renormalized and scaled) */
  expertW: Buffer;
  /** [nTokens, topK, h]: f32, f16 or bf16, the routed experts' outputs in (token, slot) order */
  yExpert: Buffer;
  /** [nTokens], output's dtype: the shared expert gate's raw output (sigmoid applied here) */
  shLogit: Buffer;
  /** [nTokens, h], output's dtype, or bf16 beside bf16 yExpert and f32 output: the shared expert's output */
  yShared: Buffer;
  /** [nTokens, h], output's dtype; added when given; may be output (in place) */
  residual?: Buffer;
  /** [nTokens, h], yExpert's dtype, or f32 beside bf16 yExpert; output */
  output: Buffer;
  nTokens: number;
  topK: number;
  /** The hidden size. */
  h: number;
}

export interface MoeWeightedReduceNormArgs extends MoeWeightedReduceArgs {
  /** f32 [h]: the weight of the norm of each output row */
  normWeight: Buffer;
  /** f32 [nTokens, h]: output * rmsInv(output) * normWeight, per row */
  normed: Buffer;
  /** Added to mean(output^2) under the square root. */
  eps: number;
}

export function packMoeWeightedReduceNormParams(p: { nTokens: number; topK: number; h: number; addResidual: boolean; eps: number }): Uint8Array {
  return packFields(MOE_WEIGHTED_REDUCE_NORM_PARAMS_LAYOUT, {
    n_tokens: p.nTokens, top_k: p.topK, h: p.h, add_residual: p.addResidual ? 1 : 0, eps: p.eps,
  });
}

export function packMoeWeightedReduceParams(p: { nTokens: number; topK: number; h: number; addResidual: boolean }): Uint8Array {
  return packFields(MOE_WEIGHTED_REDUCE_PARAMS_LAYOUT, { n_tokens: p.nTokens, top_k: p.topK, h: p.h, add_residual: p.addResidual ? 1 : 0 });
}

/**
 * Throws MlxError('InvalidArgument') naming the argument unless the
 * arguments fit: mlx-native's rules (n_tokens, top_k, h > 0; each buffer at
 * least its size), with dtypes, the u32 and grid bounds, and no output over
 * an input but the residual exactly (in place).
 */
export function validateMoeWeightedReduce(a: MoeWeightedReduceArgs, device?: Device): void {
  checkReduce('moe_weighted_reduce', a, [], [], device);
}

/**
 * moe_weighted_reduce's rules, with the further buffers of a form that has
 * them (their rules after the reduction's) and which of those it writes.
 */
function checkReduce(op: string, a: MoeWeightedReduceArgs, more: readonly BufferRule[], moreOutputs: readonly string[], device?: Device): void {
  for (const arg of ['nTokens', 'topK', 'h'] as const) checkU32Count(op, arg, a[arg]);
  checkGridDim(op, 'nTokens', a.nTokens);
  const slots = checkedProduct(op, 'nTokens * topK', a.nTokens, a.topK);
  const ny = checkedProduct(op, 'nTokens * topK * h', slots, a.h);
  const nh = checkedProduct(op, 'nTokens * h', a.nTokens, a.h);
  // output's dtype right after yExpert's: it is yExpert's, or f32 beside bf16 (_bf16_input); the rest follow output,
  // but yShared may be bf16 with yExpert beside f32 (_bf16_shared).
  const rules: BufferRule[] = [
    ['expertW', a.expertW, 'f32', slots], ['yExpert', a.yExpert, ['f32', 'f16', 'bf16'], ny],
    ['output', a.output, (of) => (of('yExpert') === 'bf16' ? ['bf16', 'f32'] : of('yExpert')), nh],
    ['shLogit', a.shLogit, like('output'), a.nTokens],
    ['yShared', a.yShared, (of) => (of('yExpert') === 'bf16' && of('output') === 'f32' ? ['f32', 'bf16'] : of('output')), nh],
    ['residual', a.residual, like('output'), nh, true],
    ...more,
  ];
  checkBufferRules(op, rules, device, true);
  checkNoAliasing(op, ruleBindings(rules), ['output', ...moreOutputs],
    'every output element reads its token\'s slots, gate and shared row; only the residual may be read in place', [['output', 'residual']]);
}

/**
 * Throws MlxError('InvalidArgument') naming the argument unless the
 * arguments fit: moe_weighted_reduce's rules with f32 output, normWeight f32
 * [h], normed f32 [nTokens, h] (a buffer of its own), eps finite and >= 0.
 */
export function validateMoeWeightedReduceNorm(a: MoeWeightedReduceNormArgs, device?: Device): void {
  const op = 'moe_weighted_reduce_norm';
  checkReduce(op, a, [['normWeight', a.normWeight, 'f32', a.h], ['normed', a.normed, 'f32', a.nTokens * a.h]], ['normed'], device);
  checkDtype(op, 'output', a.output, 'f32');
  if (typeof a.eps !== 'number' || !Number.isFinite(a.eps) || a.eps < 0) throw invalid(op, 'eps', 'a finite number >= 0', a.eps);
}

/** The CUDA launch: one thread per 16-byte vector of an output row, 256 a block (shaders/cuda/moe_weighted_reduce.cu). */
export function moeWeightedReduceCudaLaunch(nTokens: number, h: number, dtype: 'f32' | 'f16' | 'bf16'): Launch {
  const vec = 16 / dtypeSize(dtype);
  return { grid: [ceilDiv(ceilDiv(h, vec), MOE_WEIGHTED_REDUCE_THREADS), nTokens, 1], threads: [MOE_WEIGHTED_REDUCE_THREADS, 1, 1] };
}

/**
 * moe_weighted_reduce: output[t, d] = sum_k expertW[t, k] * yExpert[t, k, d]
 * + sigmoid(shLogit[t]) * yShared[t, d] (+ residual[t, d] when given); slots
 * in order, then the shared term, then the residual, summed in f32 and
 * rounded once to the output's dtype. Qwen3.6's MoE block (routed experts
 * plus the sigmoid-gated shared expert, transformers' Qwen3_5MoeSparseMoeBlock)
 * with the decoder layer's residual add folded in. A model without a shared
 * expert (Gemma 4) takes moeWeightedSumSeq.
 *
 * Layouts: expertW f32 [nTokens, topK]; yExpert [nTokens, topK, h]; shLogit
 * [nTokens]; yShared, residual, output [nTokens, h]; one dtype (f32, f16,
 * bf16) for all but expertW, or bf16 yExpert with f32 for the rest (the
 * per-expert products' 16-bit outputs read without a cast), yShared bf16
 * too (the shared expert run as one more slot of those products); each buffer at
 * least its size (mlx-native's rule); output may be residual, nothing else.
 * Kernels: moe_weighted_reduce_<dtype>, moe_weighted_reduce_bf16_input,
 * moe_weighted_reduce_bf16_shared (ours, the two mixed forms). Bindings: 0 MoeWeightedReduceParams
 * (n_tokens, top_k, h, add_residual), 1 expert_w, 2 y_expert, 3 sh_logit,
 * 4 y_shared, 5 residual (yShared's buffer in its place when absent; not
 * read), 6 output.
 * Grid: (ceil(h / 256), nTokens, 1) threadgroups of 256, one thread per
 * element (the crate's); CUDA: a thread per 16-byte vector of a row
 * (moeWeightedReduceCudaLaunch).
 */
export function moeWeightedReduce(enc: Encoder, args: MoeWeightedReduceArgs): void {
  record(enc, planMoeWeightedReduce(args, enc.device.limits, enc.device));
}

/** moeWeightedReduce's plan: validates, then one dispatch (see moeWeightedReduce). */
export function planMoeWeightedReduce(a: MoeWeightedReduceArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateMoeWeightedReduce(a, device);
  const dt = a.output.dtype as 'f32' | 'f16' | 'bf16';
  return planOf({
    kernel: a.yExpert.dtype === dt ? `moe_weighted_reduce_${dt}` : `moe_weighted_reduce_bf16_${a.yShared.dtype === dt ? 'input' : 'shared'}`,
    buffers: [, a.expertW, a.yExpert, a.shLogit, a.yShared, a.residual ?? a.yShared, a.output],
    bytes: [packMoeWeightedReduceParams({ ...a, addResidual: a.residual !== undefined })],
    grid: [ceilDiv(a.h, MOE_WEIGHTED_REDUCE_THREADS), a.nTokens, 1],
    threads: [MOE_WEIGHTED_REDUCE_THREADS, 1, 1],
    cuda: moeWeightedReduceCudaLaunch(a.nTokens, a.h, dt),
  });
}

/**
 * moe_weighted_reduce_norm (ours): moeWeightedReduce with f32 output, and
 * normed[t] = output[t] * rmsInv(output[t]) * normWeight per row,
 * rmsInv(x) = 1 / sqrt(mean(x^2) + eps): a decoder layer's end and the next
 * layer's input norm in one dispatch.
 *
 * Layouts: moeWeightedReduce's with output f32 (f32 throughout, or bf16
 * yExpert, or bf16 yExpert and yShared); normWeight f32 [h]; normed f32
 * [nTokens, h]; output may be residual.
 * Kernels: moe_weighted_reduce_norm_f32, _bf16_input, _bf16_shared.
 * Bindings: 0 MoeWeightedReduceNormParams (n_tokens, top_k, h,
 * add_residual, eps), 1 to 6 as moeWeightedReduce's, 7 normWeight, 8 normed;
 * threadgroup(0) one float per simdgroup.
 * Grid: (nTokens, 1, 1) threadgroups of min(256, nextPow2(h)) threads.
 */
export function moeWeightedReduceNorm(enc: Encoder, args: MoeWeightedReduceNormArgs): void {
  record(enc, planMoeWeightedReduceNorm(args, enc.device.limits, enc.device));
}

/** moeWeightedReduceNorm's plan: validates, then one dispatch (see moeWeightedReduceNorm). */
export function planMoeWeightedReduceNorm(a: MoeWeightedReduceNormArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateMoeWeightedReduceNorm(a, device);
  const { threads, sharedBytes } = rowThreadgroup(a.h, MOE_WEIGHTED_REDUCE_THREADS, limits);
  return planOf({
    kernel: a.yExpert.dtype === 'f32' ? 'moe_weighted_reduce_norm_f32' : `moe_weighted_reduce_norm_bf16_${a.yShared.dtype === 'f32' ? 'input' : 'shared'}`,
    buffers: [, a.expertW, a.yExpert, a.shLogit, a.yShared, a.residual ?? a.yShared, a.output, a.normWeight, a.normed],
    bytes: [packMoeWeightedReduceNormParams({ ...a, addResidual: a.residual !== undefined })],
    threadgroupMemory: [sharedBytes],
    grid: [a.nTokens, 1, 1],
    threads: [threads, 1, 1],
  });
}

// ---- the float64 reference ----

// CPU reference of moe_weighted_reduce: float64.

/**
 * output[t, d] = sum_k expertW[t, k] * yExpert[t, k, d] + sigmoid(shLogit[t])
 * * yShared[t, d] (+ residual[t, d] when given); and, with abs, the same sum
 * of |terms| (the scale of its rounding error).
 */
export function moeWeightedReduceRef(expertW: ArrayLike<number>, yExpert: ArrayLike<number>, shLogit: ArrayLike<number>,
  yShared: ArrayLike<number>, residual: ArrayLike<number> | null, nTokens: number, topK: number, h: number, abs = false): Float64Array {
  const f = abs ? Math.abs : (v: number): number => v;
  const out = new Float64Array(nTokens * h);
  for (let t = 0; t < nTokens; t++) {
    const gate = 1 / (1 + Math.exp(-shLogit[t]!));
    for (let d = 0; d < h; d++) {
      let acc = 0;
      for (let k = 0; k < topK; k++) acc += f(expertW[t * topK + k]! * yExpert[(t * topK + k) * h + d]!);
      acc += f(gate * yShared[t * h + d]!);
      if (residual !== null) acc += f(residual[t * h + d]!);
      out[t * h + d] = acc;
    }
  }
  return out;
}

