// Fused MoE routing (softmax + top-k + renormalize + per-expert scale).
// Kernels: shaders/moe_routing.metal. One threadgroup per token.


import src from '../../shaders/moe_routing.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/moe_routing.cu' with { type: 'text' };
import header from '../../shaders/moe_routing.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBufferRules, checkNoAliasing, checkPositive, checkedProduct, ruleBindings, type BufferRule,
} from '../validate.ts';
import { nextPow2, roundUp16, type LaunchLimits } from '../launch.ts';
import { familyPlans, record, type OpPlan } from '../plan.ts';

export const MOE_ROUTING_FAMILY = 'moe_routing';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const MOE_ROUTING_SOURCES = familySources(MOE_ROUTING_FAMILY, { header, metal: src, cuda: cudaSrc });
export const MOE_ROUTING_KERNELS = ['fused_moe_routing_f32', 'fused_moe_routing_batch_f32'] as const;
const planOf = familyPlans({ family: MOE_ROUTING_FAMILY, sources: MOE_ROUTING_SOURCES, kernels: MOE_ROUTING_KERNELS });

/** Static threadgroup arrays of the kernels: 32 floats + 32 uints of arg-max partials. */
export const MOE_ROUTING_STATIC_TG_BYTES = 256;
/**
 * The most experts a device's threadgroup memory holds: the kernels keep one
 * float per expert in threadgroup(0), beside their static arrays (8128 in
 * Apple's 32 KiB, the Rust crate's limit).
 */
export function moeRoutingMaxExperts(limits: Pick<DeviceLimits, 'maxThreadgroupMemory'>): number {
  return Math.floor((limits.maxThreadgroupMemory - MOE_ROUTING_STATIC_TG_BYTES) / 4);
}
export const MOE_ROUTING_MAX_THREADS = 256;
const MAX_ELEMENTS_U32 = 0xffff_ffff;

/** struct FusedMoeRoutingParams (buffer 4). */
export const FUSED_MOE_ROUTING_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FusedMoeRoutingParams');

export interface MoeRoutingParams {
  numExperts: number;
  /** Experts selected per token, 1..numExperts. */
  topK: number;
}
export interface MoeRoutingBatchParams extends MoeRoutingParams {
  nTokens: number;
}
export interface MoeRoutingArgs extends MoeRoutingBuffers, MoeRoutingParams {}
export interface MoeRoutingBatchArgs extends MoeRoutingBuffers, MoeRoutingBatchParams {}
export interface MoeRoutingBuffers {
  /** f32 [nTokens, numExperts] */
  logits: Buffer;
  /** u32 [nTokens, topK], output */
  expertIds: Buffer;
  /** f32 [nTokens, topK], output */
  routingWeights: Buffer;
  /** f32 [numExperts] */
  perExpertScale: Buffer;
}

export function packFusedMoeRoutingParams(p: MoeRoutingParams): Uint8Array {
  return packFields(FUSED_MOE_ROUTING_PARAMS_LAYOUT, { num_experts: p.numExperts, top_k: p.topK });
}

/** The rules of both ops; the expert limit is that of `limits` (the device's when only it is given). */
function validate(op: string, p: MoeRoutingBatchParams, b: MoeRoutingBuffers, device: Device | undefined,
  limits: DeviceLimits | undefined): void {
  checkPositive(op, 'nTokens', p.nTokens);
  checkPositive(op, 'numExperts', p.numExperts);
  checkPositive(op, 'topK', p.topK);
  checkAtMost(op, 'topK', p.topK, p.numExperts, 'numExperts');
  if (limits !== undefined) {
    const max = moeRoutingMaxExperts(limits);
    checkAtMost(op, 'numExperts', p.numExperts, max,
      `${max} (one f32 per expert in the device's ${limits.maxThreadgroupMemory} bytes of threadgroup memory, ` +
      `${MOE_ROUTING_STATIC_TG_BYTES} of them static)`);
  }
  const nLogits = checkedProduct(op, 'nTokens * numExperts', p.nTokens, p.numExperts);
  checkAtMost(op, 'nTokens * numExperts', nLogits, MAX_ELEMENTS_U32, 'the 32-bit index limit');
  const nOut = checkedProduct(op, 'nTokens * topK', p.nTokens, p.topK);
  const rules: BufferRule[] = [
    ['logits', b.logits, 'f32', nLogits], ['expertIds', b.expertIds, 'u32', nOut], ['routingWeights', b.routingWeights, 'f32', nOut],
    ['perExpertScale', b.perExpertScale, 'f32', p.numExperts],
  ];
  checkBufferRules(op, rules, device);
  checkNoAliasing(op, ruleBindings(rules), ['expertIds', 'routingWeights'], 'the CUDA kernel takes every binding as __restrict__');
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit (the device's limits when given). */
export function validateFusedMoeRouting(a: MoeRoutingArgs, device?: Device, limits = device?.limits): void {
  validate('fused_moe_routing', { numExperts: a.numExperts, topK: a.topK, nTokens: 1 }, a, device, limits);
}
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit (the device's limits when given). */
export function validateFusedMoeRoutingBatch(a: MoeRoutingBatchArgs, device?: Device, limits = device?.limits): void {
  validate('fused_moe_routing_batch', a, a, device, limits);
}

/** Threads per token and the threadgroup(0) bytes (numExperts floats, 16-byte multiple). */
export function moeRoutingThreadgroup(numExperts: number, limits: LaunchLimits): { threads: number; sharedBytes: number } {
  const threads = Math.min(MOE_ROUTING_MAX_THREADS, limits.maxThreadsPerThreadgroup, nextPow2(numExperts));
  return { threads, sharedBytes: roundUp16(numExperts * 4) };
}

/**
 * CUDA: shapes the warp path of shaders/cuda/moe_routing.cu covers. The kernel
 * takes it when a block is one warp (32 threads), so on cuda the op launches
 * those shapes with 32 threads per token and no threadgroup memory.
 */
export const MOE_ROUTING_CUDA_WARP_MAX_EXPERTS = 1024;
export const MOE_ROUTING_CUDA_WARP_MAX_TOP_K = 32;

/**
 * The compact CUDA entry (shaders/cuda/moe_routing.cu, docs/internals.md
 * "Compact CUDA entries") of either kernel where the launch takes the warp
 * path: `<kernel>_w<PER>`, PER logits a lane (the smallest power of two with
 * 32 PER >= numExperts); undefined elsewhere.
 */
export function moeRoutingCudaEntry(kernel: string, numExperts: number, topK: number): string | undefined {
  if (numExperts > MOE_ROUTING_CUDA_WARP_MAX_EXPERTS || topK > MOE_ROUTING_CUDA_WARP_MAX_TOP_K) return undefined;
  return `${kernel}_w${Math.max(1, nextPow2(Math.ceil(numExperts / 32)))}`;
}

/** The plan of either kernel, after validation. */
function plan(kernel: (typeof MOE_ROUTING_KERNELS)[number], p: MoeRoutingBatchParams, b: MoeRoutingBuffers,
  limits: DeviceLimits): OpPlan {
  const { threads, sharedBytes } = moeRoutingThreadgroup(p.numExperts, limits);
  const warp = p.numExperts <= MOE_ROUTING_CUDA_WARP_MAX_EXPERTS && p.topK <= MOE_ROUTING_CUDA_WARP_MAX_TOP_K;
  return planOf({
    kernel,
    buffers: [b.logits, b.expertIds, b.routingWeights, b.perExpertScale],
    bytes: [, , , , packFusedMoeRoutingParams(p)],
    threadgroupMemory: [sharedBytes],
    grid: [p.nTokens, 1, 1],
    threads: [threads, 1, 1],
    cuda: warp ? { grid: [p.nTokens, 1, 1], threads: [32, 1, 1], entry: moeRoutingCudaEntry(kernel, p.numExperts, p.topK) } : undefined,
  });
}

/**
 * fused_moe_routing (one token):
 *   p = softmax(logits); ids = the topK experts by p, largest first, equal p in
 *   increasing expert index; routingWeights[k] = p[ids[k]] / sum_j p[ids[j]]
 *   * perExpertScale[ids[k]]; all zeros when that sum is not positive (every
 *   logit -inf).
 *
 * Layouts: logits f32 [numExperts]; expertIds u32 [topK]; routingWeights f32
 * [topK]; perExpertScale f32 [numExperts].
 * Bindings: 0 logits, 1 expertIds, 2 routingWeights, 3 perExpertScale,
 * 4 FusedMoeRoutingParams; threadgroup(0) numExperts floats.
 * Grid: (1, 1, 1) threadgroup of min(256, nextPow2(numExperts)) threads;
 * on cuda, numExperts <= 1024 and topK <= 32 take 32 threads and no
 * threadgroup memory instead (the kernel's warp path).
 */
export function fusedMoeRouting(enc: Encoder, args: MoeRoutingArgs): void {
  record(enc, planFusedMoeRouting(args, enc.device.limits, enc.device));
}
export function planFusedMoeRouting(args: MoeRoutingArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateFusedMoeRouting(args, device, limits);
  return plan('fused_moe_routing_f32', { ...args, nTokens: 1 }, args, limits);
}

/**
 * fused_moe_routing_batch: fused_moe_routing for nTokens tokens (prefill).
 *
 * Layouts: logits f32 [nTokens, numExperts]; expertIds u32 [nTokens, topK];
 * routingWeights f32 [nTokens, topK]; perExpertScale f32 [numExperts].
 * Bindings: as fused_moe_routing.
 * Grid: (nTokens, 1, 1) threadgroups of min(256, nextPow2(numExperts)) threads;
 * on cuda, numExperts <= 1024 and topK <= 32 take 32 threads per token and no
 * threadgroup memory instead (the kernel's warp path).
 */
export function fusedMoeRoutingBatch(enc: Encoder, args: MoeRoutingBatchArgs): void {
  record(enc, planFusedMoeRoutingBatch(args, enc.device.limits, enc.device));
}
export function planFusedMoeRoutingBatch(args: MoeRoutingBatchArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateFusedMoeRoutingBatch(args, device, limits);
  return plan('fused_moe_routing_batch_f32', args, args, limits);
}

// ---- the float64 reference ----

// CPU reference of fused MoE routing: plain loops, float64.

export interface MoeRoutingRef {
  /** [nTokens, topK] */
  expertIds: Uint32Array;
  /** [nTokens, topK] */
  weights: Float64Array;
}

/**
 * Per token: softmax over numExperts logits; the topK experts by probability,
 * largest first, equal probabilities in increasing expert index; their
 * probabilities renormalized to sum 1, then multiplied by perExpertScale.
 * When the selected probabilities do not sum to a positive number (every
 * logit -inf), every weight is 0.
 */
export function moeRoutingRef(
  logits: ArrayLike<number>, perExpertScale: ArrayLike<number>,
  nTokens: number, numExperts: number, topK: number,
): MoeRoutingRef {
  const expertIds = new Uint32Array(nTokens * topK);
  const weights = new Float64Array(nTokens * topK);
  const p = new Float64Array(numExperts);
  for (let tok = 0; tok < nTokens; tok++) {
    const base = tok * numExperts;
    let mx = -Infinity;
    for (let e = 0; e < numExperts; e++) mx = Math.max(mx, logits[base + e]!);
    let total = 0;
    for (let e = 0; e < numExperts; e++) {
      p[e] = mx === -Infinity ? 0 : Math.exp(logits[base + e]! - mx);
      total += p[e]!;
    }
    for (let e = 0; e < numExperts; e++) p[e] = total > 0 ? p[e]! / total : 0;

    const order = Array.from({ length: numExperts }, (_, e) => e);
    order.sort((a, b) => (p[b]! - p[a]!) || (a - b));
    let topSum = 0;
    for (let k = 0; k < topK; k++) topSum += p[order[k]!]!;
    for (let k = 0; k < topK; k++) {
      const e = order[k]!;
      expertIds[tok * topK + k] = e;
      weights[tok * topK + k] = topSum > 0 ? (p[e]! / topSum) * perExpertScale[e]! : 0;
    }
  }
  return { expertIds, weights };
}
