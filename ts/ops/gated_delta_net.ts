// gated_delta_net: the gated delta rule token by token (prefill reference
// semantics) and its one-token decode step with the state updated in place.
// Kernels: shaders/gated_delta_net.metal and shaders/cuda/gated_delta_net.cu.

import src from '../../shaders/gated_delta_net.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/gated_delta_net.cu' with { type: 'text' };
import header from '../../shaders/gated_delta_net.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBuffer, checkDtype, checkedProduct, checkElements, checkMultiple, checkNoAliasing, checkU32Count, invalid,
} from '../validate.ts';
import { familyPlans, record, type OpPlan } from '../plan.ts';
import { computeGBetaRef } from './compute_g_beta.ts';
import { l2NormRef } from './l2_norm.ts';

export const GATED_DELTA_NET_FAMILY = 'gated_delta_net';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const GATED_DELTA_NET_SOURCES = familySources(GATED_DELTA_NET_FAMILY, { header, metal: src, cuda: cudaSrc });
export const GATED_DELTA_NET_KERNELS = [
  'gated_delta_net_f32',
  'gated_delta_net_bf16',
  'gated_delta_net_decode_f32',
  'gated_delta_net_decode_bf16',
  'gated_delta_net_decode_fused_f32',
  'gated_delta_net_decode_fused_bf16',
] as const;
const planOf = familyPlans({ family: GATED_DELTA_NET_FAMILY, sources: GATED_DELTA_NET_SOURCES, kernels: GATED_DELTA_NET_KERNELS });
type Kernel = (typeof GATED_DELTA_NET_KERNELS)[number];

/** Lanes of a simdgroup: K is split across them. */
export const GDN_LANES = 32;
/** The largest K: 8 state elements per lane per row in registers. */
export const GDN_MAX_K = 256;
/** Rows v per threadgroup (4 simdgroups of 4 rows). */
export const GDN_BV = 16;
/** Threads per threadgroup. */
export const GDN_THREADS = 128;

/** struct GatedDeltaNetParams (gated_delta_net_{f32,bf16}, buffer 8). */
export const GATED_DELTA_NET_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GatedDeltaNetParams');
/** struct GatedDeltaNetDecodeParams (gated_delta_net_decode_{f32,bf16}, buffer 7). */
export const GATED_DELTA_NET_DECODE_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GatedDeltaNetDecodeParams');
/** struct GatedDeltaNetDecodeFusedParams (gated_delta_net_decode_fused_{f32,bf16}, buffer 9). */
export const GATED_DELTA_NET_DECODE_FUSED_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GatedDeltaNetDecodeFusedParams');

export interface GatedDeltaNetDecodeParams {
  /** Sequences B. */
  batch: number;
  /** q/k heads Hg. */
  nQkHeads: number;
  /** v heads H, a multiple of nQkHeads (head h reads q/k head h / (H / Hg)). */
  nHeads: number;
  /** Head dimension K of q and k: a multiple of 32, at most 256. */
  kDim: number;
  /** Head dimension V of v and output. */
  vDim: number;
  /** Output scale; K^-1/2 when absent. */
  scale?: number;
}
export interface GatedDeltaNetParams extends GatedDeltaNetDecodeParams {
  /** Tokens T per sequence. */
  seqLen: number;
}

export interface GatedDeltaNetBuffers {
  /** [B, T, Hg, K], f32 or bf16 (q, k, v and output share one dtype) */
  q: Buffer;
  /** [B, T, Hg, K] */
  k: Buffer;
  /** [B, T, H, V] */
  v: Buffer;
  /** [B, T, H] f32, log decay (the state is scaled by exp(g)) */
  g: Buffer;
  /** [B, T, H] f32 */
  beta: Buffer;
  /** [B, H, V, K] f32; zero when absent. May be finalState's buffer. */
  initialState?: Buffer;
  /** [B, T, H, V], output */
  output: Buffer;
  /** [B, H, V, K] f32, output */
  finalState: Buffer;
}
export interface GatedDeltaNetDecodeBuffers {
  /** [B, Hg, K], f32 or bf16 (q, k, v and output share one dtype) */
  q: Buffer;
  /** [B, Hg, K] */
  k: Buffer;
  /** [B, H, V] */
  v: Buffer;
  /** [B, H] f32 */
  g: Buffer;
  /** [B, H] f32 */
  beta: Buffer;
  /** [B, H, V, K] f32, read and updated in place */
  state: Buffer;
  /** [B, H, V], output */
  output: Buffer;
}

/** The scale the kernels use: p.scale, or K^-1/2. */
export function gatedDeltaNetScale(p: Pick<GatedDeltaNetDecodeParams, 'kDim' | 'scale'>): number {
  return p.scale ?? 1 / Math.sqrt(p.kDim);
}

export function packGatedDeltaNetParams(p: GatedDeltaNetParams & { hasInitialState: boolean }): Uint8Array {
  return packFields(GATED_DELTA_NET_PARAMS_LAYOUT, {
    b: p.batch, t: p.seqLen, hg: p.nQkHeads, h: p.nHeads, k: p.kDim, v: p.vDim, scale: gatedDeltaNetScale(p),
    has_initial_state: p.hasInitialState ? 1 : 0,
  });
}
export function packGatedDeltaNetDecodeParams(p: GatedDeltaNetDecodeParams): Uint8Array {
  return packFields(GATED_DELTA_NET_DECODE_PARAMS_LAYOUT, {
    b: p.batch, hg: p.nQkHeads, h: p.nHeads, k: p.kDim, v: p.vDim, scale: gatedDeltaNetScale(p),
  });
}

/** Rules on the dimensions shared by both ops. */
function validateDims(op: string, dims: readonly (readonly [string, number])[], p: GatedDeltaNetDecodeParams): void {
  for (const [arg, value] of dims) checkU32Count(op, arg, value);
  checkMultiple(op, 'nHeads', p.nHeads, p.nQkHeads, 'nQkHeads');
  checkMultiple(op, 'kDim', p.kDim, GDN_LANES, 'the simdgroup width');
  checkAtMost(op, 'kDim', p.kDim, GDN_MAX_K, 'MAX_K');
  if (p.scale !== undefined && !Number.isFinite(p.scale)) throw invalid(op, 'scale', 'a finite number', p.scale);
}

/**
 * The rules the ops share on q, k, v, output and the per-head gates (g and
 * beta, or the fused step's a and b): q f32 or bf16, k, v and output of its
 * dtype, the gates f32, element counts over seqLen tokens per sequence, or
 * one when absent; returns the state's element count.
 */
function checkInputs(op: string, p: GatedDeltaNetDecodeParams, seqLen: number | undefined,
  b: { q: Buffer; k: Buffer; v: Buffer; output: Buffer }, gates: readonly (readonly [string, Buffer])[]): number {
  checkDtype(op, 'q', b.q, ['f32', 'bf16']);
  checkDtype(op, 'k', b.k, b.q.dtype);
  checkDtype(op, 'v', b.v, b.q.dtype);
  checkDtype(op, 'output', b.output, b.q.dtype);
  const t = seqLen === undefined ? [] : [seqLen];
  const qk = checkedProduct(op, 'q elements', p.batch, ...t, p.nQkHeads, p.kDim);
  const vo = checkedProduct(op, 'v elements', p.batch, ...t, p.nHeads, p.vDim);
  const gb = checkedProduct(op, 'g elements', p.batch, ...t, p.nHeads);
  const st = checkedProduct(op, 'state elements', p.batch, p.nHeads, p.vDim, p.kDim);
  checkElements(op, 'q', b.q, qk);
  checkElements(op, 'k', b.k, qk);
  checkElements(op, 'v', b.v, vo);
  checkElements(op, 'output', b.output, vo);
  for (const [arg, x] of gates) {
    checkDtype(op, arg, x, 'f32');
    checkElements(op, arg, x, gb);
  }
  return st;
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateGatedDeltaNet(b: GatedDeltaNetArgs, device?: Device): void {
  const op = 'gated_delta_net';
  const p = b;
  validateDims(op, [['batch', p.batch], ['seqLen', p.seqLen], ['nQkHeads', p.nQkHeads], ['nHeads', p.nHeads], ['kDim', p.kDim], ['vDim', p.vDim]], p);
  const bindings = [
    ['q', b.q], ['k', b.k], ['v', b.v], ['g', b.g], ['beta', b.beta], ['initialState', b.initialState], ['output', b.output],
    ['finalState', b.finalState],
  ] as const;
  for (const [arg, x] of bindings) if (x !== undefined || arg !== 'initialState') checkBuffer(op, arg, x, device);
  const st = checkInputs(op, p, p.seqLen, b, [['g', b.g], ['beta', b.beta]]);
  checkNoAliasing(op, bindings, ['output', 'finalState'],
    'the CUDA kernel takes q, k, v, g, beta and output as __restrict__; only finalState may be initialState',
    [['initialState', 'finalState']]);
  if (b.initialState !== undefined) {
    checkDtype(op, 'initialState', b.initialState, 'f32');
    checkElements(op, 'initialState', b.initialState, st);
  }
  checkDtype(op, 'finalState', b.finalState, 'f32');
  checkElements(op, 'finalState', b.finalState, st);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateGatedDeltaNetDecode(b: GatedDeltaNetDecodeArgs, device?: Device): void {
  const op = 'gated_delta_net_decode';
  const p = b;
  validateDims(op, [['batch', p.batch], ['nQkHeads', p.nQkHeads], ['nHeads', p.nHeads], ['kDim', p.kDim], ['vDim', p.vDim]], p);
  const bindings = [
    ['q', b.q], ['k', b.k], ['v', b.v], ['g', b.g], ['beta', b.beta], ['state', b.state], ['output', b.output],
  ] as const;
  for (const [arg, x] of bindings) checkBuffer(op, arg, x, device);
  const st = checkInputs(op, p, undefined, b, [['g', b.g], ['beta', b.beta]]);
  checkDtype(op, 'state', b.state, 'f32');
  checkElements(op, 'state', b.state, st);
  checkNoAliasing(op, bindings, ['state', 'output'], 'the CUDA kernel takes q, k, v, g, beta and output as __restrict__');
}

/** The l2 norm's eps of the fused decode step when absent (l2_norm's default). */
export const GDN_FUSED_DEFAULT_EPS = 1e-6;

export interface GatedDeltaNetDecodeFusedBuffers {
  /** [B, Hg, K] before its l2 norm, f32 or bf16 (q, k, v and output share one dtype) */
  q: Buffer;
  /** [B, Hg, K] before its l2 norm */
  k: Buffer;
  /** [B, H, V] */
  v: Buffer;
  /** [B, H] f32: the decay gate's input (compute_g_beta's a) */
  a: Buffer;
  /** [B, H] f32: beta's input (compute_g_beta's b) */
  b: Buffer;
  /** [H] f32 */
  aLog: Buffer;
  /** [H] f32 */
  dtBias: Buffer;
  /** [B, H, V, K] f32, read and updated in place */
  state: Buffer;
  /** [B, H, V], output */
  output: Buffer;
}
export interface GatedDeltaNetDecodeFusedArgs extends GatedDeltaNetDecodeFusedBuffers, GatedDeltaNetDecodeParams {
  /** The l2 norm's eps, inside the square root: finite, >= 0; GDN_FUSED_DEFAULT_EPS when absent. */
  eps?: number;
}

export function packGatedDeltaNetDecodeFusedParams(p: GatedDeltaNetDecodeParams & { eps?: number }): Uint8Array {
  return packFields(GATED_DELTA_NET_DECODE_FUSED_PARAMS_LAYOUT, {
    b: p.batch, hg: p.nQkHeads, h: p.nHeads, k: p.kDim, v: p.vDim, scale: gatedDeltaNetScale(p), l2_eps: p.eps ?? GDN_FUSED_DEFAULT_EPS,
  });
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateGatedDeltaNetDecodeFused(b: GatedDeltaNetDecodeFusedArgs, device?: Device): void {
  const op = 'gated_delta_net_decode_fused';
  const p = b;
  validateDims(op, [['batch', p.batch], ['nQkHeads', p.nQkHeads], ['nHeads', p.nHeads], ['kDim', p.kDim], ['vDim', p.vDim]], p);
  if (p.eps !== undefined && (!Number.isFinite(p.eps) || p.eps < 0)) throw invalid(op, 'eps', 'a finite number >= 0', p.eps);
  const bindings = [
    ['q', b.q], ['k', b.k], ['v', b.v], ['a', b.a], ['b', b.b], ['aLog', b.aLog], ['dtBias', b.dtBias], ['state', b.state],
    ['output', b.output],
  ] as const;
  for (const [arg, x] of bindings) checkBuffer(op, arg, x, device);
  const st = checkInputs(op, p, undefined, b, [['a', b.a], ['b', b.b]]);
  for (const arg of ['aLog', 'dtBias'] as const) {
    checkDtype(op, arg, b[arg], 'f32');
    checkElements(op, arg, b[arg], p.nHeads);
  }
  checkDtype(op, 'state', b.state, 'f32');
  checkElements(op, 'state', b.state, st);
  checkNoAliasing(op, bindings, ['state', 'output'], 'the kernel reads every input while it writes the state and the output');
}

/** Grid of the kernels: (ceil(V / 16), H, B) threadgroups of 128 threads. */
export function gatedDeltaNetGrid(p: Pick<GatedDeltaNetDecodeParams, 'batch' | 'nHeads' | 'vDim'>): [number, number, number] {
  return [Math.ceil(p.vDim / GDN_BV), p.nHeads, p.batch];
}

export interface GatedDeltaNetArgs extends GatedDeltaNetBuffers, GatedDeltaNetParams {}
export interface GatedDeltaNetDecodeArgs extends GatedDeltaNetDecodeBuffers, GatedDeltaNetDecodeParams {}

function plan(kernel: Kernel, buffers: Buffer[], params: Uint8Array, p: GatedDeltaNetDecodeParams): OpPlan {
  const bytes: (Uint8Array | undefined)[] = [];
  bytes[buffers.length] = params;
  return planOf({ kernel, buffers, bytes, grid: gatedDeltaNetGrid(p), threads: [GDN_THREADS, 1, 1] });
}

/**
 * gated_delta_net: the gated delta rule over T tokens. Per (b, head), with the
 * state S [V, K] starting at initialState (zero when absent) and
 * kh = head / (H / Hg):
 *   S = S * exp(g_t);  delta = (v_t - S k_t) * beta_t;  S = S + delta k_t^T;
 *   output_t = scale * S q_t
 * finalState = S after the last token. All arithmetic f32.
 *
 * Layouts: q, k [B, T, Hg, K]; v, output [B, T, H, V] (all f32:
 * gated_delta_net_f32, or all bf16: gated_delta_net_bf16); g, beta [B, T, H]
 * f32; initialState, finalState [B, H, V, K] f32, K innermost: the layout of
 * gated_delta_net_chunk's h0 / final_state and of gated_delta_net_decode's state.
 * initialState may be finalState's buffer (each state row is read, then
 * written, by one simdgroup).
 *
 * Bindings: 0 q, 1 k, 2 v, 3 g, 4 beta, 5 initialState (finalState stands in
 * when absent; has_initial_state = 0 keeps it unread), 6 output, 7 finalState,
 * 8 GatedDeltaNetParams. Grid (ceil(V / 16), H, B) threadgroups of 128 threads.
 */
export function gatedDeltaNet(enc: Encoder, args: GatedDeltaNetArgs): void {
  record(enc, planGatedDeltaNet(args, enc.device.limits, enc.device));
}
export function planGatedDeltaNet(args: GatedDeltaNetArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateGatedDeltaNet(args, device);
  const hasInitialState = args.initialState !== undefined;
  return plan(
    args.q.dtype === 'bf16' ? 'gated_delta_net_bf16' : 'gated_delta_net_f32',
    [args.q, args.k, args.v, args.g, args.beta, args.initialState ?? args.finalState, args.output, args.finalState],
    packGatedDeltaNetParams({ ...args, hasInitialState }),
    args,
  );
}

/**
 * gated_delta_net_decode: one token per sequence, the state updated in place.
 * Per (b, head), S = state[b, head] [V, K], kh = head / (H / Hg):
 *   S = S * exp(g);  delta = (v - S k) * beta;  S = S + delta k^T;  output = scale * S q
 * the same arithmetic as gated_delta_net with T = 1, so n decode steps give
 * what gated_delta_net gives over those n tokens.
 *
 * Layouts: q, k [B, Hg, K]; v, output [B, H, V] (all f32 or all bf16);
 * g, beta [B, H] f32; state [B, H, V, K] f32 (read and written).
 *
 * Bindings: 0 q, 1 k, 2 v, 3 g, 4 beta, 5 state, 6 output,
 * 7 GatedDeltaNetDecodeParams. Grid (ceil(V / 16), H, B) threadgroups of 128 threads.
 */
export function gatedDeltaNetDecode(enc: Encoder, args: GatedDeltaNetDecodeArgs): void {
  record(enc, planGatedDeltaNetDecode(args, enc.device.limits, enc.device));
}
export function planGatedDeltaNetDecode(args: GatedDeltaNetDecodeArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateGatedDeltaNetDecode(args, device);
  return plan(
    args.q.dtype === 'bf16' ? 'gated_delta_net_decode_bf16' : 'gated_delta_net_decode_f32',
    [args.q, args.k, args.v, args.g, args.beta, args.state, args.output],
    packGatedDeltaNetDecodeParams(args),
    args,
  );
}

/**
 * gated_delta_net_decode_fused (ours): one decode step with its inputs'
 * norms and gates in it, where a model runs l2_norm on q and k,
 * compute_g_beta and gated_delta_net_decode in turn:
 *   q, k = x / sqrt(sum x^2 + eps) per head;  g = -exp(aLog[h]) softplus(a + dtBias[h]);
 *   beta = sigmoid(b);  then gated_delta_net_decode's step.
 * The arithmetic of those three ops (the norms' sums over a simdgroup), in one dispatch.
 *
 * Layouts: q, k [B, Hg, K] (before the norm); v, output [B, H, V] (all f32 or
 * all bf16); a, b [B, H] f32; aLog, dtBias [H] f32; state [B, H, V, K] f32
 * (read and written).
 *
 * Bindings: 0 q, 1 k, 2 v, 3 a, 4 b, 5 aLog, 6 dtBias, 7 state, 8 output, 9
 * GatedDeltaNetDecodeFusedParams. Grid (ceil(V / 16), H, B) threadgroups of 128 threads.
 */
export function gatedDeltaNetDecodeFused(enc: Encoder, args: GatedDeltaNetDecodeFusedArgs): void {
  record(enc, planGatedDeltaNetDecodeFused(args, enc.device.limits, enc.device));
}
export function planGatedDeltaNetDecodeFused(args: GatedDeltaNetDecodeFusedArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateGatedDeltaNetDecodeFused(args, device);
  return plan(
    args.q.dtype === 'bf16' ? 'gated_delta_net_decode_fused_bf16' : 'gated_delta_net_decode_fused_f32',
    [args.q, args.k, args.v, args.a, args.b, args.aLog, args.dtBias, args.state, args.output],
    packGatedDeltaNetDecodeFusedParams(args),
    args,
  );
}

// ---- the float64 reference ----

// CPU reference of the gated delta rule token by token (gated_delta_net,
// gated_delta_net_decode): plain loops, float64 throughout.

/** The sizes of the gated delta rule: sequences, tokens each, K heads, V heads, K and V head dimensions. */
export interface GatedDeltaNetRefDims {
  b: number;
  t: number;
  hg: number;
  h: number;
  k: number;
  v: number;
}

export interface GatedDeltaNetRefShape extends GatedDeltaNetRefDims {
  scale: number;
}

export interface GatedDeltaNetRefInputs {
  /** [B, T, Hg, K] */
  q: ArrayLike<number>;
  /** [B, T, Hg, K] */
  k: ArrayLike<number>;
  /** [B, T, H, V] */
  v: ArrayLike<number>;
  /** [B, T, H] log decay */
  g: ArrayLike<number>;
  /** [B, T, H] */
  beta: ArrayLike<number>;
  /** [B, H, V, K]; zero when absent */
  initialState?: ArrayLike<number>;
}

export interface GatedDeltaNetRefOutputs {
  /** [B, T, H, V] */
  output: Float64Array;
  /** [B, H, V, K] */
  finalState: Float64Array;
}

/**
 * Per (b, head), S [V, K] = initialState[b, head] (or zero), kh = head / (H / Hg):
 *   S = S * exp(g_t);  kv = S k_t;  delta = (v_t - kv) * beta_t;
 *   S = S + delta k_t^T;  output_t = scale * S q_t
 * finalState[b, head] = S after the last token.
 */
export function gatedDeltaNetRef(s: GatedDeltaNetRefShape, x: GatedDeltaNetRefInputs): GatedDeltaNetRefOutputs {
  const { b: B, t: T, hg: Hg, h: H, k: K, v: V, scale } = s;
  const group = H / Hg;
  const output = new Float64Array(B * T * H * V);
  const finalState = new Float64Array(B * H * V * K);
  const S = new Float64Array(V * K);
  for (let b = 0; b < B; b++) {
    for (let head = 0; head < H; head++) {
      const kh = Math.floor(head / group);
      const off = (b * H + head) * V * K;
      for (let i = 0; i < V * K; i++) S[i] = x.initialState === undefined ? 0 : x.initialState[off + i]!;
      for (let t = 0; t < T; t++) {
        const gh = (b * T + t) * H + head;
        const qk = ((b * T + t) * Hg + kh) * K;
        const decay = Math.exp(x.g[gh]!);
        const beta = x.beta[gh]!;
        for (let vv = 0; vv < V; vv++) {
          const row = vv * K;
          let kv = 0;
          for (let kk = 0; kk < K; kk++) {
            S[row + kk] = S[row + kk]! * decay;
            kv += S[row + kk]! * x.k[qk + kk]!;
          }
          const delta = (x.v[gh * V + vv]! - kv) * beta;
          let o = 0;
          for (let kk = 0; kk < K; kk++) {
            S[row + kk] = S[row + kk]! + delta * x.k[qk + kk]!;
            o += S[row + kk]! * x.q[qk + kk]!;
          }
          output[gh * V + vv] = scale * o;
        }
      }
      finalState.set(S, off);
    }
  }
  return { output, finalState };
}

/**
 * The fused decode step: q and k l2-normalized per head (l2NormRef), the
 * gates (computeGBetaRef), then gatedDeltaNetRef over one token from state.
 */
export function gatedDeltaNetDecodeFusedRef(
  s: Omit<GatedDeltaNetRefShape, 't'> & { eps: number },
  x: { q: ArrayLike<number>; k: ArrayLike<number>; v: ArrayLike<number>; a: ArrayLike<number>; b: ArrayLike<number>;
    aLog: ArrayLike<number>; dtBias: ArrayLike<number>; state: ArrayLike<number> },
): GatedDeltaNetRefOutputs {
  const rows = s.b * s.hg;
  const { g, beta } = computeGBetaRef(s.h, x.a, x.b, x.aLog, x.dtBias);
  return gatedDeltaNetRef({ ...s, t: 1 }, {
    q: l2NormRef(x.q, rows, s.k, s.eps), k: l2NormRef(x.k, rows, s.k, s.eps), v: x.v, g, beta, initialState: x.state,
  });
}
