// moe_dispatch: the dispatch of tokens to experts, and the glue around the
// per-expert products of an MoE layer. Kernels: shaders/moe_dispatch.metal
// and shaders/cuda/moe_dispatch.cu.
//
// moeDispatchSort (kernel moe_dispatch_sort, not in mlx-native: the crate
// groups pairs by expert only for its GGML matrix kernels, with llama.cpp's
// map0) groups the (token, slot) pairs of a routing table by expert on the
// device: per-expert offsets and the pairs in expert order, which the
// matrix forms of quantized_matmul_id and dense_matmul_id read (no host
// read-back of the routing).
//
// The rest are mlx-native's moe_dispatch module (src/ops/moe_dispatch.rs),
// its kernel names, bindings, param structs and rules (each buffer at least
// its size, every count > 0): fused_gelu_mul(_bf16), moe_accumulate,
// zero_buffer, moe_swiglu_fused, moe_swiglu_batch, moe_swiglu_seq(_bf16),
// moe_weighted_sum, moe_weighted_sum_seq(_bf16_input) and
// moe_gather_topk_weights; moe_weighted_sum_seq_f16 and _bf16 (16-bit expert
// outputs and output, f32 weights) are added. The crate's "swiglu" kernels
// gate with GELU (tanh approximation), Gemma 4's expert activation; they keep
// the crate's names and math. Its moe_dispatch host loop (f32 weights, a
// naive mat-vec per expert, routing weights on the host) is not carried:
// the _id products do that work on the device.

import src from '../../shaders/moe_dispatch.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/moe_dispatch.cu' with { type: 'text' };
import header from '../../shaders/moe_dispatch.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { DType } from '../dtype.ts';
import type { Encoder } from '../encoder.ts';
import { ceilDiv, roundUp16 } from '../launch.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familyPlans, opShape, record, type OpPlan, type OpShape, type PlannedDispatch } from '../plan.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBufferRules, checkedU32Product, checkGridDim, checkNoAliasing, checkU32Count, invalid, like, ruleBindings, U32_MAX, type BufferRule,
} from '../validate.ts';
import { geluTanhRef } from './gelu.ts';

export const MOE_DISPATCH_FAMILY = 'moe_dispatch';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const MOE_DISPATCH_SOURCES = familySources(MOE_DISPATCH_FAMILY, { header, metal: src, cuda: cudaSrc });
export const MOE_DISPATCH_KERNELS = [
  'moe_dispatch_sort',
  'fused_gelu_mul', 'fused_gelu_mul_bf16', 'moe_accumulate', 'zero_buffer', 'moe_swiglu_fused', 'moe_swiglu_batch',
  'moe_weighted_sum', 'moe_swiglu_seq', 'moe_swiglu_seq_bf16', 'moe_weighted_sum_seq', 'moe_weighted_sum_seq_bf16_input',
  'moe_weighted_sum_seq_f16', 'moe_weighted_sum_seq_bf16', 'moe_gather_topk_weights',
] as const;
const planOf = familyPlans({ family: MOE_DISPATCH_FAMILY, sources: MOE_DISPATCH_SOURCES, kernels: MOE_DISPATCH_KERNELS });

export const MOE_DISPATCH_SORT_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'MoeDispatchSortParams');
export const FUSED_GELU_MUL_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FusedGeluMulParams');
export const MOE_ACCUM_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'MoeAccumParams');
export const ZERO_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'ZeroParams');
export const MOE_WEIGHTED_SUM_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'MoeWeightedSumParams');
export const MOE_SWIGLU_SEQ_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'MoeSwigluSeqParams');
export const MOE_WEIGHTED_SUM_SEQ_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'MoeWeightedSumSeqParams');
export const MOE_GATHER_TOPK_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'MoeGatherTopkParams');

/** Threads of a glue kernel's threadgroup at most (the crate's min(256, n)). */
const GLUE_THREADS = 256;
/** moe_gather_topk_weights' fixed array (mlx-native's limit). */
export const MOE_GATHER_TOPK_MAX = 8;
/** Threads of moe_dispatch_sort's one threadgroup at most. */
export const MOE_DISPATCH_SORT_MAX_THREADS = 1024;

const u32 = (v: number): Uint8Array => new Uint8Array(new Uint32Array([v]).buffer);
const GATE_UP_WHY = 'the output would overwrite gate or up values other threads read';

/** One thread per element of n along x (the crate's launch): (ceil(n / tg), y, z) threadgroups of tg = min(256, n). */
function elementGrid(n: number, y = 1, z = 1): Pick<PlannedDispatch, 'grid' | 'threads'> {
  const tg = Math.min(GLUE_THREADS, n);
  return { grid: [ceilDiv(n, tg), y, z], threads: [tg, 1, 1] };
}

// ---- moe_dispatch_sort ----

export interface MoeDispatchSortArgs {
  /** u32 [nPairs]: the expert of each (token, slot) pair (fused_moe_routing's expertIds, flattened) */
  ids: Buffer;
  /** u32 [numExperts + 2], output: offsets[e] = the pairs of experts before e; offsets[numExperts] the ids past the experts; offsets[numExperts + 1] = nPairs */
  offsets: Buffer;
  /** u32 [nPairs], output: the pairs grouped by expert */
  order: Buffer;
  nPairs: number;
  numExperts: number;
}

export function packMoeDispatchSortParams(p: { nPairs: number; numExperts: number }): Uint8Array {
  return packFields(MOE_DISPATCH_SORT_PARAMS_LAYOUT, { n_pairs: p.nPairs, num_experts: p.numExperts });
}

/** The most experts moe_dispatch_sort's threadgroup holds: a counter per expert and one for the ids past them, beside 32 warps' partials. */
export function moeDispatchSortMaxExperts(limits: Pick<DeviceLimits, 'maxThreadgroupMemory'>): number {
  return Math.floor(limits.maxThreadgroupMemory / 4) - 32 - 1;
}

/** moe_dispatch_sort's launch: one threadgroup of up to 1024 threads (a multiple of 32), its counters and partials. */
export function moeDispatchSortLaunch(nPairs: number, numExperts: number, limits: Pick<DeviceLimits, 'maxThreadsPerThreadgroup'>):
  { threads: number; sharedBytes: number } {
  const cap = Math.min(MOE_DISPATCH_SORT_MAX_THREADS, limits.maxThreadsPerThreadgroup);
  const threads = Math.min(cap, Math.max(32, Math.ceil(Math.max(nPairs, numExperts + 1) / 32) * 32));
  return { threads, sharedBytes: roundUp16((numExperts + 1 + threads / 32) * 4) };
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit (the device's limits when given). */
export function validateMoeDispatchSort(a: MoeDispatchSortArgs, device?: Device, limits = device?.limits): void {
  const op = 'moe_dispatch_sort';
  checkU32Count(op, 'nPairs', a.nPairs);
  checkU32Count(op, 'numExperts', a.numExperts);
  if (limits !== undefined) {
    const max = moeDispatchSortMaxExperts(limits);
    checkAtMost(op, 'numExperts', a.numExperts, max, `${max} (a counter per expert in the device's ${limits.maxThreadgroupMemory} bytes of threadgroup memory)`);
  }
  checkAtMost(op, 'nPairs', a.nPairs, U32_MAX - 1, '2^32 - 2');
  const rules: BufferRule[] = [['ids', a.ids, 'u32', a.nPairs], ['offsets', a.offsets, 'u32', a.numExperts + 2], ['order', a.order, 'u32', a.nPairs]];
  checkBufferRules(op, rules, device);
  checkNoAliasing(op, ruleBindings(rules), ['offsets', 'order'], 'the kernel reads the ids while it writes');
}

/**
 * moe_dispatch_sort: the pairs p < nPairs of a routing table grouped by
 * expert. With b(p) = min(ids[p], numExperts) (ids past the experts share
 * one last group):
 *   offsets[b] = #{p : b(p) < b} for b = 0 .. numExperts, offsets[numExperts
 *   + 1] = nPairs; order[offsets[b] .. offsets[b + 1]) holds the pairs of
 *   group b, each pair once, in no particular order (the products do not
 *   depend on it).
 * For fused_moe_routing's expert ids [tokens, topK], pair p is token
 * p / topK, slot p % topK.
 *
 * Layouts: ids u32 [nPairs]; offsets u32 [numExperts + 2]; order u32
 * [nPairs]; none overlapping. numExperts at most moeDispatchSortMaxExperts.
 * Bindings: 0 ids, 1 offsets, 2 order, 3 MoeDispatchSortParams (n_pairs,
 * num_experts); threadgroup(0) numExperts + 1 counters and a u32 per
 * simdgroup.
 * Grid: (1, 1, 1) threadgroup of moeDispatchSortLaunch's threads (up to
 * 1024): counts by atomics in threadgroup memory, an exclusive scan, then
 * each pair placed at its group's cursor.
 */
export function moeDispatchSort(enc: Encoder, args: MoeDispatchSortArgs): void {
  record(enc, planMoeDispatchSort(args, enc.device.limits, enc.device));
}

/** moeDispatchSort's plan: validates, then one dispatch (see moeDispatchSort). */
export function planMoeDispatchSort(a: MoeDispatchSortArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateMoeDispatchSort(a, device, limits);
  const { threads, sharedBytes } = moeDispatchSortLaunch(a.nPairs, a.numExperts, limits);
  return planOf({
    kernel: 'moe_dispatch_sort',
    buffers: [a.ids, a.offsets, a.order],
    bytes: [, , , packMoeDispatchSortParams(a)],
    threadgroupMemory: [sharedBytes],
    grid: [1, 1, 1],
    threads: [threads, 1, 1],
  });
}

// ---- mlx-native's elementwise kernels ----

/** The names of A's number fields. */
type CountOf<A> = { [K in keyof A]: A[K] extends number ? K : never }[keyof A] & string;

/**
 * One of the crate's glue ops: every count > 0 and a u32, the counts a grid
 * spans along y or z within it, the elements of its largest buffer a u32,
 * the op's own rules; then each buffer at least its size (checked in
 * binding order: every buffer, then the dtypes, then the sizes), then no
 * output aliasing another binding but the in-place pairs; one dispatch of
 * the buffers in binding order, its params after them.
 */
interface GlueOp<A> {
  op: string;
  /** The counts, checked in this order. */
  counts: readonly CountOf<A>[];
  /** The counts that a grid spans along y or z. */
  gridDims?: readonly CountOf<A>[];
  /** The elements of the largest buffer: their name and factors. */
  total?(a: A): readonly [name: string, ...factors: number[]];
  /** The op's own rules, checked after those on the counts. */
  rules?(op: string, a: A): void;
  /** The buffers in binding order, with their dtypes and the elements each holds at least. */
  buffers(a: A): readonly BufferRule[];
  /** The outputs that may alias no other binding (but the inPlace pairs), and why; absent with one binding. */
  noAliasing?: { outputs: readonly string[]; why: string; inPlace?: readonly (readonly [string, string])[] };
  /** The kernel, the inline bytes bound after the buffers (params) and the launch. */
  dispatch(a: A): Pick<PlannedDispatch, 'kernel' | 'grid' | 'threads'> & { params: readonly Uint8Array[] };
}

function glueOp<A>(g: GlueOp<A>): OpShape<A> {
  const validate = (a: A, device?: Device): void => {
    const op = g.op;
    for (const arg of g.counts) checkU32Count(op, arg, a[arg] as number);
    for (const arg of g.gridDims ?? []) checkGridDim(op, arg, a[arg] as number);
    if (g.total !== undefined) {
      const [name, ...factors] = g.total(a);
      checkedU32Product(op, name, ...factors);
    }
    g.rules?.(op, a);
    const list = g.buffers(a);
    checkBufferRules(op, list, device, true);
    const n = g.noAliasing;
    if (n !== undefined) checkNoAliasing(op, ruleBindings(list), n.outputs, n.why, n.inPlace);
  };
  return opShape(validate, (a) => {
    const buffers = g.buffers(a).map(([, b]) => b);
    const { params, ...d } = g.dispatch(a);
    const bytes: (Uint8Array | undefined)[] = [];
    params.forEach((b, i) => (bytes[buffers.length + i] = b));
    return planOf({ ...d, buffers, bytes });
  });
}

export interface FusedGeluMulArgs {
  /** [nElements] f32 (fused_gelu_mul) or bf16 (fused_gelu_mul_bf16), at least */
  gateOut: Buffer;
  /** [nElements], gateOut's dtype, at least */
  upOut: Buffer;
  /** [nElements], gateOut's dtype, at least; output */
  output: Buffer;
  nElements: number;
}

const fusedGeluMulOp = glueOp<FusedGeluMulArgs>({
  op: 'fused_gelu_mul',
  counts: ['nElements'],
  buffers: (a) => [
    ['gateOut', a.gateOut, ['f32', 'bf16'], a.nElements], ['upOut', a.upOut, like('gateOut'), a.nElements],
    ['output', a.output, like('gateOut'), a.nElements],
  ],
  noAliasing: {
    outputs: ['output'],
    why: 'each element is read before it is written only where the ranges coincide',
    inPlace: [['output', 'gateOut'], ['output', 'upOut']],
  },
  dispatch: (a) => ({
    kernel: a.gateOut.dtype === 'bf16' ? 'fused_gelu_mul_bf16' : 'fused_gelu_mul',
    params: [packFields(FUSED_GELU_MUL_PARAMS_LAYOUT, { n_elements: a.nElements })],
    ...elementGrid(a.nElements),
  }),
});
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateFusedGeluMul = fusedGeluMulOp.validate;
/**
 * fused_gelu_mul / fused_gelu_mul_bf16 (mlx-native's fused_gelu_mul and
 * fused_gelu_mul_bf16_encode): output[i] = gelu(gateOut[i]) * upOut[i] for
 * i < nElements, gelu with the tanh approximation, f32 arithmetic (bf16
 * rounded when stored). output may be gateOut or upOut (in place).
 * Bindings: 0 gate_out, 1 up_out, 2 output, 3 FusedGeluMulParams.
 * Grid: ceil(n / 256) threadgroups of min(256, n) threads, one per element.
 */
export const fusedGeluMul = fusedGeluMulOp.op;
export const planFusedGeluMul = fusedGeluMulOp.plan;

export interface MoeAccumulateArgs {
  /** f32 [nElements] at least, read and written */
  accumulator: Buffer;
  /** f32 [nElements] at least */
  expertOutput: Buffer;
  /** A finite number. */
  routingWeight: number;
  nElements: number;
}

const moeAccumulateOp = glueOp<MoeAccumulateArgs>({
  op: 'moe_accumulate',
  counts: ['nElements'],
  rules(op, a) {
    if (typeof a.routingWeight !== 'number' || !Number.isFinite(a.routingWeight)) throw invalid(op, 'routingWeight', 'a finite number', a.routingWeight);
  },
  buffers: (a) => [['accumulator', a.accumulator, 'f32', a.nElements], ['expertOutput', a.expertOutput, 'f32', a.nElements]],
  noAliasing: {
    outputs: ['accumulator'],
    why: 'each element of the accumulator reads its own element of the expert output',
    inPlace: [['accumulator', 'expertOutput']],
  },
  dispatch: (a) => ({
    kernel: 'moe_accumulate',
    params: [packFields(MOE_ACCUM_PARAMS_LAYOUT, { n_elements: a.nElements, routing_weight: a.routingWeight })],
    ...elementGrid(a.nElements),
  }),
});
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateMoeAccumulate = moeAccumulateOp.validate;
/**
 * moe_accumulate (mlx-native's moe_accumulate_encode): accumulator[i] +=
 * routingWeight * expertOutput[i] for i < nElements, f32.
 * Bindings: 0 accumulator, 1 expert_output, 2 MoeAccumParams (n_elements,
 * routing_weight). Grid: one thread per element, threadgroups of min(256, n).
 */
export const moeAccumulate = moeAccumulateOp.op;
export const planMoeAccumulate = moeAccumulateOp.plan;

export interface MoeZeroBufferArgs {
  /** f32 [nElements] at least; output */
  buffer: Buffer;
  nElements: number;
}

const moeZeroBufferOp = glueOp<MoeZeroBufferArgs>({
  op: 'moe_zero_buffer',
  counts: ['nElements'],
  buffers: (a) => [['buffer', a.buffer, 'f32', a.nElements]],
  dispatch: (a) => ({ kernel: 'zero_buffer', params: [packFields(ZERO_PARAMS_LAYOUT, { n_elements: a.nElements })], ...elementGrid(a.nElements) }),
});
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateMoeZeroBuffer = moeZeroBufferOp.validate;
/**
 * moe_zero_buffer (mlx-native's moe_zero_buffer_encode, kernel zero_buffer):
 * buffer[i] = 0 for i < nElements (f32).
 * Bindings: 0 buffer, 1 ZeroParams. Grid: one thread per element.
 */
export const moeZeroBuffer = moeZeroBufferOp.op;
export const planMoeZeroBuffer = moeZeroBufferOp.plan;

export interface MoeSwigluFusedArgs {
  /** f32 [2 nElements] at least: gate, then up */
  gateUp: Buffer;
  /** f32 [nElements] at least; output */
  output: Buffer;
  nElements: number;
}

const moeSwigluFusedOp = glueOp<MoeSwigluFusedArgs>({
  op: 'moe_swiglu_fused',
  counts: ['nElements'],
  rules: (op, a) => checkAtMost(op, 'nElements', a.nElements, U32_MAX / 2, '2^31 - 1 (the gate_up buffer holds 2 nElements)'),
  buffers: (a) => [['gateUp', a.gateUp, 'f32', 2 * a.nElements], ['output', a.output, 'f32', a.nElements]],
  noAliasing: { outputs: ['output'], why: GATE_UP_WHY },
  dispatch: (a) => ({
    kernel: 'moe_swiglu_fused',
    params: [packFields(FUSED_GELU_MUL_PARAMS_LAYOUT, { n_elements: a.nElements })],
    ...elementGrid(a.nElements),
  }),
});
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateMoeSwigluFused = moeSwigluFusedOp.validate;
/**
 * moe_swiglu_fused (mlx-native's moe_swiglu_fused_encode):
 * output[i] = gelu(gateUp[i]) * gateUp[nElements + i], f32 (the crate's
 * name; the gate is GELU, tanh approximation).
 * Bindings: 0 gate_up, 1 output, 2 FusedGeluMulParams. Grid: one thread per output.
 */
export const moeSwigluFused = moeSwigluFusedOp.op;
export const planMoeSwigluFused = moeSwigluFusedOp.plan;

export interface MoeSwigluBatchArgs {
  /** f32 [topK, 2 intermediate] at least: each slot's gate, then up */
  gateUp: Buffer;
  /** f32 [topK, intermediate] at least; output */
  output: Buffer;
  intermediate: number;
  topK: number;
}

const moeSwigluBatchOp = glueOp<MoeSwigluBatchArgs>({
  op: 'moe_swiglu_batch',
  counts: ['intermediate', 'topK'],
  gridDims: ['topK'],
  total: (a) => ['topK * 2 * intermediate', a.topK, 2, a.intermediate],
  buffers: (a) => [['gateUp', a.gateUp, 'f32', a.topK * 2 * a.intermediate], ['output', a.output, 'f32', a.topK * a.intermediate]],
  noAliasing: { outputs: ['output'], why: GATE_UP_WHY },
  dispatch: (a) => ({ kernel: 'moe_swiglu_batch', params: [u32(a.intermediate), u32(a.topK)], ...elementGrid(a.intermediate, a.topK, 1) }),
});
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateMoeSwigluBatch = moeSwigluBatchOp.validate;
/**
 * moe_swiglu_batch (mlx-native's moe_swiglu_batch_encode): for each slot s
 * < topK, output[s, i] = gelu(gateUp[s, i]) * gateUp[s, intermediate + i]
 * (the crate's name; GELU gate), f32.
 * Bindings: 0 gate_up_buf, 1 output_buf, 2 intermediate (u32), 3 top_k (u32).
 * Grid: (ceil(intermediate / tg), topK, 1) threadgroups of tg = min(256, intermediate).
 */
export const moeSwigluBatch = moeSwigluBatchOp.op;
export const planMoeSwigluBatch = moeSwigluBatchOp.plan;

export interface MoeWeightedSumArgs {
  /** f32 [topK, hiddenSize] at least */
  expertOutputs: Buffer;
  /** f32 [topK] at least */
  weights: Buffer;
  /** f32 [hiddenSize] at least; output */
  output: Buffer;
  hiddenSize: number;
  topK: number;
}

const moeWeightedSumOp = glueOp<MoeWeightedSumArgs>({
  op: 'moe_weighted_sum',
  counts: ['hiddenSize', 'topK'],
  total: (a) => ['topK * hiddenSize', a.topK, a.hiddenSize],
  buffers: (a) => [
    ['expertOutputs', a.expertOutputs, 'f32', a.topK * a.hiddenSize], ['weights', a.weights, 'f32', a.topK], ['output', a.output, 'f32', a.hiddenSize],
  ],
  noAliasing: { outputs: ['output'], why: 'every output element reads every slot' },
  dispatch: (a) => ({
    kernel: 'moe_weighted_sum',
    params: [packFields(MOE_WEIGHTED_SUM_PARAMS_LAYOUT, { hidden_size: a.hiddenSize, top_k: a.topK })],
    ...elementGrid(a.hiddenSize),
  }),
});
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateMoeWeightedSum = moeWeightedSumOp.validate;
/**
 * moe_weighted_sum (mlx-native's moe_weighted_sum_encode): output[d] =
 * sum_k weights[k] * expertOutputs[k, d], slots in order, f32 (one token's
 * top-k expert outputs, routing weights pre-scaled).
 * Bindings: 0 expert_outputs, 1 weights, 2 output, 3 MoeWeightedSumParams.
 * Grid: one thread per output element.
 */
export const moeWeightedSum = moeWeightedSumOp.op;
export const planMoeWeightedSum = moeWeightedSumOp.plan;

export interface MoeSwigluSeqArgs {
  /** [nTokens, topK, 2 intermediate] at least, f32 (moe_swiglu_seq) or bf16 (moe_swiglu_seq_bf16) */
  gateUp: Buffer;
  /** [nTokens, topK, intermediate] at least, gateUp's dtype; output */
  output: Buffer;
  intermediate: number;
  topK: number;
  nTokens: number;
}

const moeSwigluSeqOp = glueOp<MoeSwigluSeqArgs>({
  op: 'moe_swiglu_seq',
  counts: ['intermediate', 'topK', 'nTokens'],
  gridDims: ['topK', 'nTokens'],
  total: (a) => ['nTokens * topK * 2 * intermediate', a.nTokens, a.topK, 2, a.intermediate],
  buffers: (a) => [
    ['gateUp', a.gateUp, ['f32', 'bf16'], a.nTokens * a.topK * 2 * a.intermediate],
    ['output', a.output, like('gateUp'), a.nTokens * a.topK * a.intermediate],
  ],
  noAliasing: { outputs: ['output'], why: GATE_UP_WHY },
  dispatch: (a) => ({
    kernel: a.gateUp.dtype === 'bf16' ? 'moe_swiglu_seq_bf16' : 'moe_swiglu_seq',
    params: [packFields(MOE_SWIGLU_SEQ_PARAMS_LAYOUT, { intermediate: a.intermediate, top_k: a.topK, n_tokens: a.nTokens })],
    ...elementGrid(a.intermediate, a.topK, a.nTokens),
  }),
});
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateMoeSwigluSeq = moeSwigluSeqOp.validate;
/**
 * moe_swiglu_seq / moe_swiglu_seq_bf16 (mlx-native's moe_swiglu_seq_encode
 * and _bf16_encode): for each token t and slot s, output[t, s, i] =
 * gelu(gateUp[t, s, i]) * gateUp[t, s, intermediate + i] (the crate's name;
 * GELU gate), f32 arithmetic, bf16 rounded when stored.
 * Bindings: 0 gate_up_buf, 1 output_buf, 2 MoeSwigluSeqParams.
 * Grid: (ceil(intermediate / tg), topK, nTokens) threadgroups of tg = min(256, intermediate).
 */
export const moeSwigluSeq = moeSwigluSeqOp.op;
export const planMoeSwigluSeq = moeSwigluSeqOp.plan;

export interface MoeWeightedSumSeqArgs {
  /** [nTokens, topK, hiddenSize] at least: f32, bf16 or f16 */
  expertOutputs: Buffer;
  /** f32 [nTokens, topK] at least */
  weights: Buffer;
  /** [nTokens, hiddenSize] at least, output: f32 for f32 expert outputs, f32 or bf16 for bf16 ones, f16 for f16 */
  output: Buffer;
  hiddenSize: number;
  topK: number;
  nTokens: number;
}

/** The kernel of moeWeightedSumSeq for these dtypes, or null where none takes them. */
export function moeWeightedSumSeqKernel(expertOutputs: DType, output: DType): string | null {
  if (expertOutputs === 'f32' && output === 'f32') return 'moe_weighted_sum_seq';
  if (expertOutputs === 'bf16' && output === 'f32') return 'moe_weighted_sum_seq_bf16_input';
  if (expertOutputs === 'bf16' && output === 'bf16') return 'moe_weighted_sum_seq_bf16';
  if (expertOutputs === 'f16' && output === 'f16') return 'moe_weighted_sum_seq_f16';
  return null;
}

const moeWeightedSumSeqOp = glueOp<MoeWeightedSumSeqArgs>({
  op: 'moe_weighted_sum_seq',
  counts: ['hiddenSize', 'topK', 'nTokens'],
  gridDims: ['nTokens'],
  total: (a) => ['nTokens * topK * hiddenSize', a.nTokens, a.topK, a.hiddenSize],
  buffers: (a) => [
    ['expertOutputs', a.expertOutputs, ['f32', 'bf16', 'f16'], a.nTokens * a.topK * a.hiddenSize], ['weights', a.weights, 'f32', a.nTokens * a.topK],
    ['output', a.output, (dtypeOf) => WEIGHTED_SUM_SEQ_OUTPUTS[dtypeOf('expertOutputs')] ?? [], a.nTokens * a.hiddenSize],
  ],
  noAliasing: { outputs: ['output'], why: 'every output element reads every slot of its token' },
  dispatch: (a) => ({
    kernel: moeWeightedSumSeqKernel(a.expertOutputs.dtype, a.output.dtype)!,
    params: [packFields(MOE_WEIGHTED_SUM_SEQ_PARAMS_LAYOUT, { hidden_size: a.hiddenSize, top_k: a.topK, n_tokens: a.nTokens })],
    ...elementGrid(a.hiddenSize, a.nTokens, 1),
  }),
});
/** The output dtypes moeWeightedSumSeq takes for each dtype of the expert outputs. */
const WEIGHTED_SUM_SEQ_OUTPUTS: Readonly<Record<string, readonly DType[]>> = { f32: ['f32'], bf16: ['f32', 'bf16'], f16: ['f16'] };
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateMoeWeightedSumSeq = moeWeightedSumSeqOp.validate;
/**
 * moe_weighted_sum_seq (mlx-native's moe_weighted_sum_seq_encode and
 * _bf16_input_encode; _f16 and _bf16 added): output[t, d] = sum_k
 * weights[t, k] * expertOutputs[t, k, d], slots in order, f32 sums rounded
 * once to the output's dtype. Kernel by dtypes (moeWeightedSumSeqKernel):
 * f32 -> f32 moe_weighted_sum_seq, bf16 -> f32 moe_weighted_sum_seq_bf16_input,
 * bf16 -> bf16 moe_weighted_sum_seq_bf16, f16 -> f16 moe_weighted_sum_seq_f16.
 * Bindings: 0 expert_outputs, 1 weights, 2 output, 3 MoeWeightedSumSeqParams.
 * Grid: (ceil(hiddenSize / tg), nTokens, 1) threadgroups of tg = min(256, hiddenSize).
 */
export const moeWeightedSumSeq = moeWeightedSumSeqOp.op;
export const planMoeWeightedSumSeq = moeWeightedSumSeqOp.plan;

export interface MoeGatherTopkWeightsArgs {
  /** f32 [nExperts] at least */
  softmaxProbs: Buffer;
  /** u32 [nExperts] at least: expert indices, most probable first */
  sortedIndices: Buffer;
  /** f32 [nExperts] at least */
  perExpertScale: Buffer;
  /** u32 [topK] at least; output */
  outExpertIds: Buffer;
  /** f32 [topK] at least; output */
  outWeights: Buffer;
  nExperts: number;
  /** 1 .. min(nExperts, 8) */
  topK: number;
}

const moeGatherTopkWeightsOp = glueOp<MoeGatherTopkWeightsArgs>({
  op: 'moe_gather_topk_weights',
  counts: ['nExperts', 'topK'],
  rules(op, a) {
    checkAtMost(op, 'topK', a.topK, a.nExperts, 'nExperts');
    checkAtMost(op, 'topK', a.topK, MOE_GATHER_TOPK_MAX, `${MOE_GATHER_TOPK_MAX} (the kernel's fixed array)`);
  },
  buffers: (a) => [
    ['softmaxProbs', a.softmaxProbs, 'f32', a.nExperts], ['sortedIndices', a.sortedIndices, 'u32', a.nExperts],
    ['perExpertScale', a.perExpertScale, 'f32', a.nExperts], ['outExpertIds', a.outExpertIds, 'u32', a.topK], ['outWeights', a.outWeights, 'f32', a.topK],
  ],
  noAliasing: { outputs: ['outExpertIds', 'outWeights'], why: 'the kernel reads its inputs after it has written outputs' },
  dispatch: (a) => ({
    kernel: 'moe_gather_topk_weights',
    params: [packFields(MOE_GATHER_TOPK_PARAMS_LAYOUT, { n_experts: a.nExperts, top_k: a.topK })],
    grid: [1, 1, 1], threads: [1, 1, 1],
  }),
});
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateMoeGatherTopkWeights = moeGatherTopkWeightsOp.validate;
/**
 * moe_gather_topk_weights (mlx-native's moe_gather_topk_weights_encode): for
 * k < topK, e = sortedIndices[k]: outExpertIds[k] = e, outWeights[k] =
 * softmaxProbs[e] / sum_j softmaxProbs[sortedIndices[j]] *
 * perExpertScale[e] (0 where that sum is not positive). An index past the
 * experts (>= nExperts) is written as it is with weight 0 and counts 0 in
 * the sum: the kernel reads nothing outside the buffers (the crate reads it
 * unchecked), and the per-expert products give such a slot zeros.
 * Bindings: 0 softmax_probs, 1 sorted_indices, 2 per_expert_scale, 3
 * out_expert_ids, 4 out_weights, 5 MoeGatherTopkParams. Grid: one thread.
 */
export const moeGatherTopkWeights = moeGatherTopkWeightsOp.op;
export const planMoeGatherTopkWeights = moeGatherTopkWeightsOp.plan;

// ---- the float64 reference ----

// CPU reference of the moe_dispatch family: plain loops, float64.

export interface MoeDispatchSortRef {
  /** [numExperts + 2]: offsets[b] = the pairs whose group (min(id, numExperts)) is before b; the last = nPairs */
  offsets: Uint32Array;
  /** [nPairs]: the pairs grouped by expert, increasing within a group (the kernel's order within a group is any) */
  order: Uint32Array;
}

/** The pairs of ids [nPairs] grouped by expert, ids >= numExperts in one last group. */
export function moeDispatchSortRef(ids: ArrayLike<number>, numExperts: number): MoeDispatchSortRef {
  const n = ids.length;
  const offsets = new Uint32Array(numExperts + 2);
  for (let p = 0; p < n; p++) offsets[Math.min(ids[p]!, numExperts) + 1]!++;
  for (let b = 1; b <= numExperts + 1; b++) offsets[b]! += offsets[b - 1]!;
  const cursor = offsets.slice();
  const order = new Uint32Array(n);
  for (let p = 0; p < n; p++) order[cursor[Math.min(ids[p]!, numExperts)]!++] = p;
  return { offsets, order };
}

/** y[r, i] = gelu(gateUp[r, i]) * gateUp[r, dim + i] for rows of [gate | up] (the crate's "swiglu" kernels). */
export function moeSwigluRowsRef(gateUp: ArrayLike<number>, rows: number, dim: number): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    for (let i = 0; i < dim; i++) y[r * dim + i] = geluTanhRef(gateUp[2 * r * dim + i]!) * gateUp[2 * r * dim + dim + i]!;
  }
  return y;
}

/** out[t, d] = sum_k weights[t, k] * y[t, k, d]: y [nTokens, topK, hidden], weights [nTokens, topK]. */
export function moeWeightedSumRef(y: ArrayLike<number>, weights: ArrayLike<number>, nTokens: number, topK: number,
  hidden: number): Float64Array {
  const out = new Float64Array(nTokens * hidden);
  for (let t = 0; t < nTokens; t++) {
    for (let k = 0; k < topK; k++) {
      const w = weights[t * topK + k]!;
      const row = (t * topK + k) * hidden;
      for (let d = 0; d < hidden; d++) out[t * hidden + d]! += w * y[row + d]!;
    }
  }
  return out;
}

/** moe_gather_topk_weights: the first topK sorted indices and their renormalized, scaled probabilities (indices past the experts weigh 0). */
export function moeGatherTopkWeightsRef(probs: ArrayLike<number>, sorted: ArrayLike<number>, scale: ArrayLike<number>, nExperts: number,
  topK: number): { ids: Uint32Array; weights: Float64Array } {
  const ids = new Uint32Array(topK);
  const weights = new Float64Array(topK);
  let sum = 0;
  for (let k = 0; k < topK; k++) {
    ids[k] = sorted[k]!;
    if (ids[k]! < nExperts) sum += probs[ids[k]!]!;
  }
  for (let k = 0; k < topK; k++) {
    const e = ids[k]!;
    weights[k] = e < nExperts && sum > 0 ? (probs[e]! / sum) * scale[e]! : 0;
  }
  return { ids, weights };
}
