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
import { roundUp16 } from '../launch.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { record, type OpPlan, type PlannedDispatch } from '../plan.ts';
import { familySources } from '../registry.ts';
import { checkAtLeast, checkAtMost, checkBuffer, checkDtype, checkElements, checkNoAliasing, checkPositive, checkedProduct, invalid } from '../validate.ts';

export const MOE_DISPATCH_FAMILY = 'moe_dispatch';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const MOE_DISPATCH_SOURCES = familySources(MOE_DISPATCH_FAMILY, { header, metal: src, cuda: cudaSrc });
export const MOE_DISPATCH_KERNELS = [
  'moe_dispatch_sort',
  'fused_gelu_mul', 'fused_gelu_mul_bf16', 'moe_accumulate', 'zero_buffer', 'moe_swiglu_fused', 'moe_swiglu_batch',
  'moe_weighted_sum', 'moe_swiglu_seq', 'moe_swiglu_seq_bf16', 'moe_weighted_sum_seq', 'moe_weighted_sum_seq_bf16_input',
  'moe_weighted_sum_seq_f16', 'moe_weighted_sum_seq_bf16', 'moe_gather_topk_weights',
] as const;

export const MOE_DISPATCH_SORT_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'MoeDispatchSortParams');
export const FUSED_GELU_MUL_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FusedGeluMulParams');
export const MOE_ACCUM_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'MoeAccumParams');
export const ZERO_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'ZeroParams');
export const MOE_WEIGHTED_SUM_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'MoeWeightedSumParams');
export const MOE_SWIGLU_SEQ_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'MoeSwigluSeqParams');
export const MOE_WEIGHTED_SUM_SEQ_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'MoeWeightedSumSeqParams');
export const MOE_GATHER_TOPK_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'MoeGatherTopkParams');

const U32_MAX = 0xffff_ffff;
/** Threads of a glue kernel's threadgroup at most (the crate's min(256, n)). */
const GLUE_THREADS = 256;
/** moe_gather_topk_weights' fixed array (mlx-native's limit). */
export const MOE_GATHER_TOPK_MAX = 8;
/** Threads of moe_dispatch_sort's one threadgroup at most. */
export const MOE_DISPATCH_SORT_MAX_THREADS = 1024;

const ceilDiv = (a: number, b: number): number => Math.ceil(a / b);
const u32 = (v: number): Uint8Array => new Uint8Array(new Uint32Array([v]).buffer);

function plan(dispatches: PlannedDispatch[]): OpPlan {
  return { family: MOE_DISPATCH_FAMILY, sources: MOE_DISPATCH_SOURCES, kernels: MOE_DISPATCH_KERNELS, dispatches };
}

/** A count of the crate's: a positive integer that its u32 fields hold. */
function checkCount(op: string, arg: string, v: number): void {
  checkPositive(op, arg, v);
  checkAtMost(op, arg, v, U32_MAX, '2^32 - 1');
}

/** One thread per element of n (the crate's launch): ceil(n / 256) threadgroups of min(256, n). */
function elementGrid(n: number): Pick<PlannedDispatch, 'grid' | 'threads'> {
  const tg = Math.min(GLUE_THREADS, n);
  return { grid: [ceilDiv(n, tg), 1, 1], threads: [tg, 1, 1] };
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
  checkCount(op, 'nPairs', a.nPairs);
  checkCount(op, 'numExperts', a.numExperts);
  if (limits !== undefined) {
    const max = moeDispatchSortMaxExperts(limits);
    checkAtMost(op, 'numExperts', a.numExperts, max, `${max} (a counter per expert in the device's ${limits.maxThreadgroupMemory} bytes of threadgroup memory)`);
  }
  checkAtMost(op, 'nPairs', a.nPairs, U32_MAX - 1, '2^32 - 2');
  const bindings = [['ids', a.ids], ['offsets', a.offsets], ['order', a.order]] as const;
  for (const [arg, b] of bindings) checkBuffer(op, arg, b, device);
  for (const [arg, b] of bindings) checkDtype(op, arg, b, 'u32');
  checkElements(op, 'ids', a.ids, a.nPairs);
  checkElements(op, 'offsets', a.offsets, a.numExperts + 2);
  checkElements(op, 'order', a.order, a.nPairs);
  checkNoAliasing(op, bindings, ['offsets', 'order'], 'the kernel reads the ids while it writes');
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
  return plan([{
    kernel: 'moe_dispatch_sort',
    buffers: [a.ids, a.offsets, a.order],
    bytes: [, , , packMoeDispatchSortParams(a)],
    threadgroupMemory: [sharedBytes],
    grid: [1, 1, 1],
    threads: [threads, 1, 1],
  }]);
}

// ---- mlx-native's elementwise kernels ----

export interface FusedGeluMulArgs {
  /** [nElements] f32 (fused_gelu_mul) or bf16 (fused_gelu_mul_bf16), at least */
  gateOut: Buffer;
  /** [nElements], gateOut's dtype, at least */
  upOut: Buffer;
  /** [nElements], gateOut's dtype, at least; output */
  output: Buffer;
  nElements: number;
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateFusedGeluMul(a: FusedGeluMulArgs, device?: Device): void {
  const op = 'fused_gelu_mul';
  checkCount(op, 'nElements', a.nElements);
  const bindings = [['gateOut', a.gateOut], ['upOut', a.upOut], ['output', a.output]] as const;
  for (const [arg, b] of bindings) checkBuffer(op, arg, b, device);
  checkDtype(op, 'gateOut', a.gateOut, ['f32', 'bf16']);
  checkDtype(op, 'upOut', a.upOut, a.gateOut.dtype);
  checkDtype(op, 'output', a.output, a.gateOut.dtype);
  for (const [arg, b] of bindings) checkAtLeast(op, arg, b, a.nElements);
  checkNoAliasing(op, bindings, ['output'], 'each element is read before it is written only where the ranges coincide',
    [['output', 'gateOut'], ['output', 'upOut']]);
}

/**
 * fused_gelu_mul / fused_gelu_mul_bf16 (mlx-native's fused_gelu_mul and
 * fused_gelu_mul_bf16_encode): output[i] = gelu(gateOut[i]) * upOut[i] for
 * i < nElements, gelu with the tanh approximation, f32 arithmetic (bf16
 * rounded when stored). output may be gateOut or upOut (in place).
 * Bindings: 0 gate_out, 1 up_out, 2 output, 3 FusedGeluMulParams.
 * Grid: ceil(n / 256) threadgroups of min(256, n) threads, one per element.
 */
export function fusedGeluMul(enc: Encoder, args: FusedGeluMulArgs): void {
  record(enc, planFusedGeluMul(args, enc.device.limits, enc.device));
}

export function planFusedGeluMul(a: FusedGeluMulArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateFusedGeluMul(a, device);
  return plan([{
    kernel: a.gateOut.dtype === 'bf16' ? 'fused_gelu_mul_bf16' : 'fused_gelu_mul',
    buffers: [a.gateOut, a.upOut, a.output],
    bytes: [, , , packFields(FUSED_GELU_MUL_PARAMS_LAYOUT, { n_elements: a.nElements })],
    ...elementGrid(a.nElements),
  }]);
}

export interface MoeAccumulateArgs {
  /** f32 [nElements] at least, read and written */
  accumulator: Buffer;
  /** f32 [nElements] at least */
  expertOutput: Buffer;
  /** A finite number. */
  routingWeight: number;
  nElements: number;
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateMoeAccumulate(a: MoeAccumulateArgs, device?: Device): void {
  const op = 'moe_accumulate';
  checkCount(op, 'nElements', a.nElements);
  if (typeof a.routingWeight !== 'number' || !Number.isFinite(a.routingWeight)) throw invalid(op, 'routingWeight', 'a finite number', a.routingWeight);
  const bindings = [['accumulator', a.accumulator], ['expertOutput', a.expertOutput]] as const;
  for (const [arg, b] of bindings) checkBuffer(op, arg, b, device);
  for (const [arg, b] of bindings) checkDtype(op, arg, b, 'f32');
  for (const [arg, b] of bindings) checkAtLeast(op, arg, b, a.nElements);
  checkNoAliasing(op, bindings, ['accumulator'], 'each element of the accumulator reads its own element of the expert output',
    [['accumulator', 'expertOutput']]);
}

/**
 * moe_accumulate (mlx-native's moe_accumulate_encode): accumulator[i] +=
 * routingWeight * expertOutput[i] for i < nElements, f32.
 * Bindings: 0 accumulator, 1 expert_output, 2 MoeAccumParams (n_elements,
 * routing_weight). Grid: one thread per element, threadgroups of min(256, n).
 */
export function moeAccumulate(enc: Encoder, args: MoeAccumulateArgs): void {
  record(enc, planMoeAccumulate(args, enc.device.limits, enc.device));
}

export function planMoeAccumulate(a: MoeAccumulateArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateMoeAccumulate(a, device);
  return plan([{
    kernel: 'moe_accumulate',
    buffers: [a.accumulator, a.expertOutput],
    bytes: [, , packFields(MOE_ACCUM_PARAMS_LAYOUT, { n_elements: a.nElements, routing_weight: a.routingWeight })],
    ...elementGrid(a.nElements),
  }]);
}

export interface MoeZeroBufferArgs {
  /** f32 [nElements] at least; output */
  buffer: Buffer;
  nElements: number;
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateMoeZeroBuffer(a: MoeZeroBufferArgs, device?: Device): void {
  const op = 'moe_zero_buffer';
  checkCount(op, 'nElements', a.nElements);
  checkBuffer(op, 'buffer', a.buffer, device);
  checkDtype(op, 'buffer', a.buffer, 'f32');
  checkAtLeast(op, 'buffer', a.buffer, a.nElements);
}

/**
 * moe_zero_buffer (mlx-native's moe_zero_buffer_encode, kernel zero_buffer):
 * buffer[i] = 0 for i < nElements (f32).
 * Bindings: 0 buffer, 1 ZeroParams. Grid: one thread per element.
 */
export function moeZeroBuffer(enc: Encoder, args: MoeZeroBufferArgs): void {
  record(enc, planMoeZeroBuffer(args, enc.device.limits, enc.device));
}

export function planMoeZeroBuffer(a: MoeZeroBufferArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateMoeZeroBuffer(a, device);
  return plan([{
    kernel: 'zero_buffer',
    buffers: [a.buffer],
    bytes: [, packFields(ZERO_PARAMS_LAYOUT, { n_elements: a.nElements })],
    ...elementGrid(a.nElements),
  }]);
}

export interface MoeSwigluFusedArgs {
  /** f32 [2 nElements] at least: gate, then up */
  gateUp: Buffer;
  /** f32 [nElements] at least; output */
  output: Buffer;
  nElements: number;
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateMoeSwigluFused(a: MoeSwigluFusedArgs, device?: Device): void {
  const op = 'moe_swiglu_fused';
  checkCount(op, 'nElements', a.nElements);
  checkAtMost(op, 'nElements', a.nElements, U32_MAX / 2, '2^31 - 1 (the gate_up buffer holds 2 nElements)');
  const bindings = [['gateUp', a.gateUp], ['output', a.output]] as const;
  for (const [arg, b] of bindings) checkBuffer(op, arg, b, device);
  for (const [arg, b] of bindings) checkDtype(op, arg, b, 'f32');
  checkAtLeast(op, 'gateUp', a.gateUp, 2 * a.nElements);
  checkAtLeast(op, 'output', a.output, a.nElements);
  checkNoAliasing(op, bindings, ['output'], 'the output would overwrite gate or up values other threads read');
}

/**
 * moe_swiglu_fused (mlx-native's moe_swiglu_fused_encode):
 * output[i] = gelu(gateUp[i]) * gateUp[nElements + i], f32 (the crate's
 * name; the gate is GELU, tanh approximation).
 * Bindings: 0 gate_up, 1 output, 2 FusedGeluMulParams. Grid: one thread per output.
 */
export function moeSwigluFused(enc: Encoder, args: MoeSwigluFusedArgs): void {
  record(enc, planMoeSwigluFused(args, enc.device.limits, enc.device));
}

export function planMoeSwigluFused(a: MoeSwigluFusedArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateMoeSwigluFused(a, device);
  return plan([{
    kernel: 'moe_swiglu_fused',
    buffers: [a.gateUp, a.output],
    bytes: [, , packFields(FUSED_GELU_MUL_PARAMS_LAYOUT, { n_elements: a.nElements })],
    ...elementGrid(a.nElements),
  }]);
}

export interface MoeSwigluBatchArgs {
  /** f32 [topK, 2 intermediate] at least: each slot's gate, then up */
  gateUp: Buffer;
  /** f32 [topK, intermediate] at least; output */
  output: Buffer;
  intermediate: number;
  topK: number;
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateMoeSwigluBatch(a: MoeSwigluBatchArgs, device?: Device): void {
  const op = 'moe_swiglu_batch';
  checkCount(op, 'intermediate', a.intermediate);
  checkCount(op, 'topK', a.topK);
  checkAtMost(op, 'topK', a.topK, 65535, '65535 (a grid dimension)');
  const n = checkedProduct(op, 'topK * 2 * intermediate', a.topK, 2, a.intermediate);
  checkAtMost(op, 'topK * 2 * intermediate', n, U32_MAX, '2^32 - 1');
  const bindings = [['gateUp', a.gateUp], ['output', a.output]] as const;
  for (const [arg, b] of bindings) checkBuffer(op, arg, b, device);
  for (const [arg, b] of bindings) checkDtype(op, arg, b, 'f32');
  checkAtLeast(op, 'gateUp', a.gateUp, n);
  checkAtLeast(op, 'output', a.output, n / 2);
  checkNoAliasing(op, bindings, ['output'], 'the output would overwrite gate or up values other threads read');
}

/**
 * moe_swiglu_batch (mlx-native's moe_swiglu_batch_encode): for each slot s
 * < topK, output[s, i] = gelu(gateUp[s, i]) * gateUp[s, intermediate + i]
 * (the crate's name; GELU gate), f32.
 * Bindings: 0 gate_up_buf, 1 output_buf, 2 intermediate (u32), 3 top_k (u32).
 * Grid: (ceil(intermediate / tg), topK, 1) threadgroups of tg = min(256, intermediate).
 */
export function moeSwigluBatch(enc: Encoder, args: MoeSwigluBatchArgs): void {
  record(enc, planMoeSwigluBatch(args, enc.device.limits, enc.device));
}

export function planMoeSwigluBatch(a: MoeSwigluBatchArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateMoeSwigluBatch(a, device);
  const tg = Math.min(GLUE_THREADS, a.intermediate);
  return plan([{
    kernel: 'moe_swiglu_batch',
    buffers: [a.gateUp, a.output],
    bytes: [, , u32(a.intermediate), u32(a.topK)],
    grid: [ceilDiv(a.intermediate, tg), a.topK, 1],
    threads: [tg, 1, 1],
  }]);
}

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

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateMoeWeightedSum(a: MoeWeightedSumArgs, device?: Device): void {
  const op = 'moe_weighted_sum';
  checkCount(op, 'hiddenSize', a.hiddenSize);
  checkCount(op, 'topK', a.topK);
  const n = checkedProduct(op, 'topK * hiddenSize', a.topK, a.hiddenSize);
  checkAtMost(op, 'topK * hiddenSize', n, U32_MAX, '2^32 - 1');
  const bindings = [['expertOutputs', a.expertOutputs], ['weights', a.weights], ['output', a.output]] as const;
  for (const [arg, b] of bindings) checkBuffer(op, arg, b, device);
  for (const [arg, b] of bindings) checkDtype(op, arg, b, 'f32');
  checkAtLeast(op, 'expertOutputs', a.expertOutputs, n);
  checkAtLeast(op, 'weights', a.weights, a.topK);
  checkAtLeast(op, 'output', a.output, a.hiddenSize);
  checkNoAliasing(op, bindings, ['output'], 'every output element reads every slot');
}

/**
 * moe_weighted_sum (mlx-native's moe_weighted_sum_encode): output[d] =
 * sum_k weights[k] * expertOutputs[k, d], slots in order, f32 (one token's
 * top-k expert outputs, routing weights pre-scaled).
 * Bindings: 0 expert_outputs, 1 weights, 2 output, 3 MoeWeightedSumParams.
 * Grid: one thread per output element.
 */
export function moeWeightedSum(enc: Encoder, args: MoeWeightedSumArgs): void {
  record(enc, planMoeWeightedSum(args, enc.device.limits, enc.device));
}

export function planMoeWeightedSum(a: MoeWeightedSumArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateMoeWeightedSum(a, device);
  return plan([{
    kernel: 'moe_weighted_sum',
    buffers: [a.expertOutputs, a.weights, a.output],
    bytes: [, , , packFields(MOE_WEIGHTED_SUM_PARAMS_LAYOUT, { hidden_size: a.hiddenSize, top_k: a.topK })],
    ...elementGrid(a.hiddenSize),
  }]);
}

export interface MoeSwigluSeqArgs {
  /** [nTokens, topK, 2 intermediate] at least, f32 (moe_swiglu_seq) or bf16 (moe_swiglu_seq_bf16) */
  gateUp: Buffer;
  /** [nTokens, topK, intermediate] at least, gateUp's dtype; output */
  output: Buffer;
  intermediate: number;
  topK: number;
  nTokens: number;
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateMoeSwigluSeq(a: MoeSwigluSeqArgs, device?: Device): void {
  const op = 'moe_swiglu_seq';
  checkCount(op, 'intermediate', a.intermediate);
  checkCount(op, 'topK', a.topK);
  checkCount(op, 'nTokens', a.nTokens);
  checkAtMost(op, 'topK', a.topK, 65535, '65535 (a grid dimension)');
  checkAtMost(op, 'nTokens', a.nTokens, 65535, '65535 (a grid dimension)');
  const n = checkedProduct(op, 'nTokens * topK * 2 * intermediate', a.nTokens, a.topK, 2, a.intermediate);
  checkAtMost(op, 'nTokens * topK * 2 * intermediate', n, U32_MAX, '2^32 - 1');
  const bindings = [['gateUp', a.gateUp], ['output', a.output]] as const;
  for (const [arg, b] of bindings) checkBuffer(op, arg, b, device);
  checkDtype(op, 'gateUp', a.gateUp, ['f32', 'bf16']);
  checkDtype(op, 'output', a.output, a.gateUp.dtype);
  checkAtLeast(op, 'gateUp', a.gateUp, n);
  checkAtLeast(op, 'output', a.output, n / 2);
  checkNoAliasing(op, bindings, ['output'], 'the output would overwrite gate or up values other threads read');
}

/**
 * moe_swiglu_seq / moe_swiglu_seq_bf16 (mlx-native's moe_swiglu_seq_encode
 * and _bf16_encode): for each token t and slot s, output[t, s, i] =
 * gelu(gateUp[t, s, i]) * gateUp[t, s, intermediate + i] (the crate's name;
 * GELU gate), f32 arithmetic, bf16 rounded when stored.
 * Bindings: 0 gate_up_buf, 1 output_buf, 2 MoeSwigluSeqParams.
 * Grid: (ceil(intermediate / tg), topK, nTokens) threadgroups of tg = min(256, intermediate).
 */
export function moeSwigluSeq(enc: Encoder, args: MoeSwigluSeqArgs): void {
  record(enc, planMoeSwigluSeq(args, enc.device.limits, enc.device));
}

export function planMoeSwigluSeq(a: MoeSwigluSeqArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateMoeSwigluSeq(a, device);
  const tg = Math.min(GLUE_THREADS, a.intermediate);
  return plan([{
    kernel: a.gateUp.dtype === 'bf16' ? 'moe_swiglu_seq_bf16' : 'moe_swiglu_seq',
    buffers: [a.gateUp, a.output],
    bytes: [, , packFields(MOE_SWIGLU_SEQ_PARAMS_LAYOUT, { intermediate: a.intermediate, top_k: a.topK, n_tokens: a.nTokens })],
    grid: [ceilDiv(a.intermediate, tg), a.topK, a.nTokens],
    threads: [tg, 1, 1],
  }]);
}

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

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateMoeWeightedSumSeq(a: MoeWeightedSumSeqArgs, device?: Device): void {
  const op = 'moe_weighted_sum_seq';
  checkCount(op, 'hiddenSize', a.hiddenSize);
  checkCount(op, 'topK', a.topK);
  checkCount(op, 'nTokens', a.nTokens);
  checkAtMost(op, 'nTokens', a.nTokens, 65535, '65535 (a grid dimension)');
  const n = checkedProduct(op, 'nTokens * topK * hiddenSize', a.nTokens, a.topK, a.hiddenSize);
  checkAtMost(op, 'nTokens * topK * hiddenSize', n, U32_MAX, '2^32 - 1');
  const bindings = [['expertOutputs', a.expertOutputs], ['weights', a.weights], ['output', a.output]] as const;
  for (const [arg, b] of bindings) checkBuffer(op, arg, b, device);
  checkDtype(op, 'expertOutputs', a.expertOutputs, ['f32', 'bf16', 'f16']);
  checkDtype(op, 'weights', a.weights, 'f32');
  const outs: Record<string, DType[]> = { f32: ['f32'], bf16: ['f32', 'bf16'], f16: ['f16'] };
  checkDtype(op, 'output', a.output, outs[a.expertOutputs.dtype]!);
  checkAtLeast(op, 'expertOutputs', a.expertOutputs, n);
  checkAtLeast(op, 'weights', a.weights, a.nTokens * a.topK);
  checkAtLeast(op, 'output', a.output, a.nTokens * a.hiddenSize);
  checkNoAliasing(op, bindings, ['output'], 'every output element reads every slot of its token');
}

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
export function moeWeightedSumSeq(enc: Encoder, args: MoeWeightedSumSeqArgs): void {
  record(enc, planMoeWeightedSumSeq(args, enc.device.limits, enc.device));
}

export function planMoeWeightedSumSeq(a: MoeWeightedSumSeqArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateMoeWeightedSumSeq(a, device);
  const tg = Math.min(GLUE_THREADS, a.hiddenSize);
  return plan([{
    kernel: moeWeightedSumSeqKernel(a.expertOutputs.dtype, a.output.dtype)!,
    buffers: [a.expertOutputs, a.weights, a.output],
    bytes: [, , , packFields(MOE_WEIGHTED_SUM_SEQ_PARAMS_LAYOUT, { hidden_size: a.hiddenSize, top_k: a.topK, n_tokens: a.nTokens })],
    grid: [ceilDiv(a.hiddenSize, tg), a.nTokens, 1],
    threads: [tg, 1, 1],
  }]);
}

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

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateMoeGatherTopkWeights(a: MoeGatherTopkWeightsArgs, device?: Device): void {
  const op = 'moe_gather_topk_weights';
  checkCount(op, 'nExperts', a.nExperts);
  checkCount(op, 'topK', a.topK);
  checkAtMost(op, 'topK', a.topK, a.nExperts, 'nExperts');
  checkAtMost(op, 'topK', a.topK, MOE_GATHER_TOPK_MAX, `${MOE_GATHER_TOPK_MAX} (the kernel's fixed array)`);
  const bindings = [
    ['softmaxProbs', a.softmaxProbs], ['sortedIndices', a.sortedIndices], ['perExpertScale', a.perExpertScale],
    ['outExpertIds', a.outExpertIds], ['outWeights', a.outWeights],
  ] as const;
  for (const [arg, b] of bindings) checkBuffer(op, arg, b, device);
  checkDtype(op, 'softmaxProbs', a.softmaxProbs, 'f32');
  checkDtype(op, 'sortedIndices', a.sortedIndices, 'u32');
  checkDtype(op, 'perExpertScale', a.perExpertScale, 'f32');
  checkDtype(op, 'outExpertIds', a.outExpertIds, 'u32');
  checkDtype(op, 'outWeights', a.outWeights, 'f32');
  checkAtLeast(op, 'softmaxProbs', a.softmaxProbs, a.nExperts);
  checkAtLeast(op, 'sortedIndices', a.sortedIndices, a.nExperts);
  checkAtLeast(op, 'perExpertScale', a.perExpertScale, a.nExperts);
  checkAtLeast(op, 'outExpertIds', a.outExpertIds, a.topK);
  checkAtLeast(op, 'outWeights', a.outWeights, a.topK);
  checkNoAliasing(op, bindings, ['outExpertIds', 'outWeights'], 'the kernel reads its inputs after it has written outputs');
}

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
export function moeGatherTopkWeights(enc: Encoder, args: MoeGatherTopkWeightsArgs): void {
  record(enc, planMoeGatherTopkWeights(args, enc.device.limits, enc.device));
}

export function planMoeGatherTopkWeights(a: MoeGatherTopkWeightsArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateMoeGatherTopkWeights(a, device);
  return plan([{
    kernel: 'moe_gather_topk_weights',
    buffers: [a.softmaxProbs, a.sortedIndices, a.perExpertScale, a.outExpertIds, a.outWeights],
    bytes: [, , , , , packFields(MOE_GATHER_TOPK_PARAMS_LAYOUT, { n_experts: a.nExperts, top_k: a.topK })],
    grid: [1, 1, 1],
    threads: [1, 1, 1],
  }]);
}
