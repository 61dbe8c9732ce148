// compute_g_beta: the log decay g and write strength beta of Qwen3.5/3.6
// linear attention from the projections a and b. Kernels:
// shaders/compute_g_beta.metal and shaders/cuda/compute_g_beta.cu, one thread
// per element.

import src from '../../shaders/compute_g_beta.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/compute_g_beta.cu' with { type: 'text' };
import header from '../../shaders/compute_g_beta.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import { checkAtMost, checkBufferRules, checkedProduct, checkNoAliasing, checkPositive, like, ruleBindings, type BufferRule } from '../validate.ts';
import { familyPlans, record, type OpPlan } from '../plan.ts';

export const COMPUTE_G_BETA_FAMILY = 'compute_g_beta';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const COMPUTE_G_BETA_SOURCES = familySources(COMPUTE_G_BETA_FAMILY, { header, metal: src, cuda: cudaSrc });
export const COMPUTE_G_BETA_KERNELS = ['compute_g_beta_f32', 'compute_g_beta_bf16'] as const;
const planOf = familyPlans({ family: COMPUTE_G_BETA_FAMILY, sources: COMPUTE_G_BETA_SOURCES, kernels: COMPUTE_G_BETA_KERNELS });
/** Threads per threadgroup. */
export const COMPUTE_G_BETA_THREADS = 256;
/** Elements are indexed with 32-bit unsigned integers. */
const MAX_ELEMENTS_U32 = 0xffff_ffff;
/** softplus(x) = x above this, as PyTorch's default threshold. */
export const SOFTPLUS_THRESHOLD = 20;

/** struct ComputeGBetaParams (buffer 6). */
export const COMPUTE_G_BETA_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'ComputeGBetaParams');

export interface ComputeGBetaParams {
  /** Sequences B. */
  batch: number;
  /** Tokens T per sequence. */
  seqLen: number;
  /** Value heads H. */
  nHeads: number;
}
export interface ComputeGBetaBuffers {
  /** [B, T, H], f32 or bf16 (b shares its dtype) */
  a: Buffer;
  /** [B, T, H], the beta logits */
  b: Buffer;
  /** [H] f32 */
  aLog: Buffer;
  /** [H] f32 */
  dtBias: Buffer;
  /** [B, T, H] f32, output */
  g: Buffer;
  /** [B, T, H] f32, output */
  beta: Buffer;
}
export interface ComputeGBetaArgs extends ComputeGBetaBuffers, ComputeGBetaParams {}

export function packComputeGBetaParams(p: ComputeGBetaParams): Uint8Array {
  return packFields(COMPUTE_G_BETA_PARAMS_LAYOUT, { n: p.batch * p.seqLen * p.nHeads, h: p.nHeads });
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateComputeGBeta(buf: ComputeGBetaArgs, device?: Device): void {
  const op = 'compute_g_beta';
  const p = buf;
  checkPositive(op, 'batch', p.batch);
  checkPositive(op, 'seqLen', p.seqLen);
  checkPositive(op, 'nHeads', p.nHeads);
  const n = checkedProduct(op, 'batch * seqLen * nHeads', p.batch, p.seqLen, p.nHeads);
  checkAtMost(op, 'batch * seqLen * nHeads', n, MAX_ELEMENTS_U32, 'the 32-bit index limit');
  const rules: BufferRule[] = [
    ['a', buf.a, ['f32', 'bf16'], n], ['b', buf.b, like('a'), n], ['aLog', buf.aLog, 'f32', p.nHeads], ['dtBias', buf.dtBias, 'f32', p.nHeads],
    ['g', buf.g, 'f32', n], ['beta', buf.beta, 'f32', n],
  ];
  checkBufferRules(op, rules, device);
  checkNoAliasing(op, ruleBindings(rules), ['g', 'beta'],
    'the CUDA kernel takes g and beta as __restrict__, and the Metal kernel writes g before it reads b');
}

/**
 * compute_g_beta, elementwise over [B, T, H]:
 *   g    = -exp(aLog[h]) * softplus(a + dtBias[h])   softplus(x) = x for x > 20, else log(1 + exp(x))
 *   beta = sigmoid(b)
 * in f32. The buffer `b` is the beta logits (the model's in_proj_b output).
 *
 * Layouts: a, b [B, T, H] (both f32: compute_g_beta_f32, or both bf16:
 * compute_g_beta_bf16); aLog, dtBias [H] f32; g, beta [B, T, H] f32.
 * Bindings: 0 a, 1 b, 2 aLog, 3 dtBias, 4 g, 5 beta, 6 ComputeGBetaParams [n, h].
 * Grid: (ceil(n / 256), 1, 1) threadgroups of 256 threads, n = B * T * H.
 */
export function computeGBeta(enc: Encoder, args: ComputeGBetaArgs): void {
  record(enc, planComputeGBeta(args, enc.device.limits, enc.device));
}
export function planComputeGBeta(args: ComputeGBetaArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateComputeGBeta(args, device);
  const n = args.batch * args.seqLen * args.nHeads;
  return planOf({
    kernel: args.a.dtype === 'bf16' ? 'compute_g_beta_bf16' : 'compute_g_beta_f32',
    buffers: [args.a, args.b, args.aLog, args.dtBias, args.g, args.beta],
    bytes: [, , , , , , packComputeGBetaParams(args)],
    grid: [Math.ceil(n / COMPUTE_G_BETA_THREADS), 1, 1],
    threads: [COMPUTE_G_BETA_THREADS, 1, 1],
  });
}

// ---- the float64 reference ----

// CPU reference of compute_g_beta: float64.

/** PyTorch's softplus with beta 1 and threshold 20: x above 20, else log(1 + exp(x)). */
export function softplusRef(x: number): number {
  return x > 20 ? x : Math.log1p(Math.exp(x));
}

/**
 * g[i] = -exp(aLog[h]) * softplus(a[i] + dtBias[h]); beta[i] = 1 / (1 + exp(-b[i])),
 * over [B, T, H] with h = i % H.
 */
export function computeGBetaRef(
  h: number, a: ArrayLike<number>, b: ArrayLike<number>, aLog: ArrayLike<number>, dtBias: ArrayLike<number>,
): { g: Float64Array; beta: Float64Array } {
  const g = new Float64Array(a.length);
  const beta = new Float64Array(a.length);
  for (let i = 0; i < a.length; i++) {
    const hh = i % h;
    g[i] = -Math.exp(aLog[hh]!) * softplusRef(a[i]! + dtBias[hh]!);
    beta[i] = 1 / (1 + Math.exp(-b[i]!));
  }
  return { g, beta };
}
