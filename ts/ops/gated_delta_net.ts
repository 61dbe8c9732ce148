// gated_delta_net: the gated delta rule token by token (prefill reference
// semantics) and its one-token decode step with the state updated in place.
// Kernels: shaders/gated_delta_net.metal and shaders/cuda/gated_delta_net.cu.

import src from '../../shaders/gated_delta_net.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/gated_delta_net.cu' with { type: 'text' };
import header from '../../shaders/gated_delta_net.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device } from '../device.ts';
import type { DType } from '../dtype.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBuffer, checkDtype, checkElements, checkMultiple, checkNoAliasing, checkObject, checkPositive, checkedProduct,
  invalid,
} from '../validate.ts';

export const GATED_DELTA_NET_FAMILY = 'gated_delta_net';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const GATED_DELTA_NET_SOURCES = familySources(GATED_DELTA_NET_FAMILY, { header, metal: src, cuda: cudaSrc });
export const GATED_DELTA_NET_KERNELS = [
  'gated_delta_net_f32',
  'gated_delta_net_bf16',
  'gated_delta_net_decode_f32',
  'gated_delta_net_decode_bf16',
] as const;
type Kernel = (typeof GATED_DELTA_NET_KERNELS)[number];

/** Lanes of a simdgroup: K is split across them. */
export const GDN_LANES = 32;
/** The largest K: 8 state elements per lane per row in registers. */
export const GDN_MAX_K = 256;
/** Rows v per threadgroup (4 simdgroups of 4 rows). */
export const GDN_BV = 16;
/** Threads per threadgroup. */
export const GDN_THREADS = 128;
const U32_MAX = 0xffff_ffff;

/** struct GatedDeltaNetParams (gated_delta_net_{f32,bf16}, buffer 8). */
export const GATED_DELTA_NET_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GatedDeltaNetParams');
/** struct GatedDeltaNetDecodeParams (gated_delta_net_decode_{f32,bf16}, buffer 7). */
export const GATED_DELTA_NET_DECODE_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GatedDeltaNetDecodeParams');

export interface GatedDeltaNetDecodeParams {
  /** Sequences B. */
  b: number;
  /** q/k heads Hg. */
  hg: number;
  /** v heads H, a multiple of hg (head h reads q/k head h / (H / Hg)). */
  h: number;
  /** Head dimension K of q and k: a multiple of 32, at most 256. */
  k: number;
  /** Head dimension V of v and o. */
  v: number;
  /** Output scale; K^-1/2 when absent. */
  scale?: number;
}
export interface GatedDeltaNetParams extends GatedDeltaNetDecodeParams {
  /** Tokens T per sequence. */
  t: number;
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
export function gatedDeltaNetScale(p: Pick<GatedDeltaNetDecodeParams, 'k' | 'scale'>): number {
  return p.scale ?? 1 / Math.sqrt(p.k);
}

export function packGatedDeltaNetParams(p: GatedDeltaNetParams & { hasInitialState: boolean }): Uint8Array {
  return packFields(GATED_DELTA_NET_PARAMS_LAYOUT, {
    b: p.b, t: p.t, hg: p.hg, h: p.h, k: p.k, v: p.v, scale: gatedDeltaNetScale(p), has_initial_state: p.hasInitialState ? 1 : 0,
  });
}
export function packGatedDeltaNetDecodeParams(p: GatedDeltaNetDecodeParams): Uint8Array {
  return packFields(GATED_DELTA_NET_DECODE_PARAMS_LAYOUT, {
    b: p.b, hg: p.hg, h: p.h, k: p.k, v: p.v, scale: gatedDeltaNetScale(p),
  });
}

/** Rules on the dimensions shared by both ops. */
function validateDims(op: string, dims: readonly (readonly [string, number])[], p: GatedDeltaNetDecodeParams): void {
  for (const [arg, value] of dims) {
    checkPositive(op, arg, value);
    checkAtMost(op, arg, value, U32_MAX, '2^32 - 1');
  }
  checkMultiple(op, 'h', p.h, p.hg, 'hg');
  checkMultiple(op, 'k', p.k, GDN_LANES, 'the simdgroup width');
  checkAtMost(op, 'k', p.k, GDN_MAX_K, 'MAX_K');
  if (p.scale !== undefined && !Number.isFinite(p.scale)) throw invalid(op, 'scale', 'a finite number', p.scale);
}

/** Activation dtype (q's); k, v and output must match it. */
function activationDtype(op: string, b: { q: Buffer; k: Buffer; v: Buffer; output: Buffer }): DType {
  checkDtype(op, 'q', b.q, ['f32', 'bf16']);
  const dt = b.q.dtype;
  checkDtype(op, 'k', b.k, dt);
  checkDtype(op, 'v', b.v, dt);
  checkDtype(op, 'output', b.output, dt);
  return dt;
}

/** Throws MlxError('InvalidArgument') naming the argument unless params and buffers fit; returns the activation dtype. */
export function validateGatedDeltaNet(p: GatedDeltaNetParams, b: GatedDeltaNetBuffers, device?: Device): DType {
  const op = 'gated_delta_net';
  checkObject(op, 'params', p);
  validateDims(op, [['b', p.b], ['t', p.t], ['hg', p.hg], ['h', p.h], ['k', p.k], ['v', p.v]], p);
  const bindings = [
    ['q', b.q], ['k', b.k], ['v', b.v], ['g', b.g], ['beta', b.beta], ['initialState', b.initialState], ['output', b.output],
    ['finalState', b.finalState],
  ] as const;
  for (const [arg, x] of bindings) if (x !== undefined || arg !== 'initialState') checkBuffer(op, arg, x, device);
  const dt = activationDtype(op, b);
  const qk = checkedProduct(op, 'q elements', p.b, p.t, p.hg, p.k);
  const vo = checkedProduct(op, 'v elements', p.b, p.t, p.h, p.v);
  const gb = checkedProduct(op, 'g elements', p.b, p.t, p.h);
  const st = checkedProduct(op, 'b * h * v * k', p.b, p.h, p.v, p.k);
  checkElements(op, 'q', b.q, qk);
  checkElements(op, 'k', b.k, qk);
  checkElements(op, 'v', b.v, vo);
  checkElements(op, 'output', b.output, vo);
  checkDtype(op, 'g', b.g, 'f32');
  checkElements(op, 'g', b.g, gb);
  checkDtype(op, 'beta', b.beta, 'f32');
  checkElements(op, 'beta', b.beta, gb);
  checkNoAliasing(op, bindings, ['output', 'finalState'],
    'the CUDA kernel takes q, k, v, g, beta and output as __restrict__; only finalState may be initialState',
    [['initialState', 'finalState']]);
  if (b.initialState !== undefined) {
    checkDtype(op, 'initialState', b.initialState, 'f32');
    checkElements(op, 'initialState', b.initialState, st);
  }
  checkDtype(op, 'finalState', b.finalState, 'f32');
  checkElements(op, 'finalState', b.finalState, st);
  return dt;
}

/** Throws MlxError('InvalidArgument') naming the argument unless params and buffers fit; returns the activation dtype. */
export function validateGatedDeltaNetDecode(p: GatedDeltaNetDecodeParams, b: GatedDeltaNetDecodeBuffers, device?: Device): DType {
  const op = 'gated_delta_net_decode';
  checkObject(op, 'params', p);
  validateDims(op, [['b', p.b], ['hg', p.hg], ['h', p.h], ['k', p.k], ['v', p.v]], p);
  const bindings = [
    ['q', b.q], ['k', b.k], ['v', b.v], ['g', b.g], ['beta', b.beta], ['state', b.state], ['output', b.output],
  ] as const;
  for (const [arg, x] of bindings) checkBuffer(op, arg, x, device);
  const dt = activationDtype(op, b);
  const qk = checkedProduct(op, 'q elements', p.b, p.hg, p.k);
  const vo = checkedProduct(op, 'v elements', p.b, p.h, p.v);
  const gb = checkedProduct(op, 'g elements', p.b, p.h);
  const st = checkedProduct(op, 'state elements', p.b, p.h, p.v, p.k);
  checkElements(op, 'q', b.q, qk);
  checkElements(op, 'k', b.k, qk);
  checkElements(op, 'v', b.v, vo);
  checkElements(op, 'output', b.output, vo);
  checkDtype(op, 'g', b.g, 'f32');
  checkElements(op, 'g', b.g, gb);
  checkDtype(op, 'beta', b.beta, 'f32');
  checkElements(op, 'beta', b.beta, gb);
  checkDtype(op, 'state', b.state, 'f32');
  checkElements(op, 'state', b.state, st);
  checkNoAliasing(op, bindings, ['state', 'output'], 'the CUDA kernel takes q, k, v, g, beta and output as __restrict__');
  return dt;
}

/** Grid of both kernels: (ceil(V / 16), H, B) threadgroups of 128 threads. */
export function gatedDeltaNetGrid(p: Pick<GatedDeltaNetDecodeParams, 'b' | 'h' | 'v'>): [number, number, number] {
  return [Math.ceil(p.v / GDN_BV), p.h, p.b];
}

function pipeline(enc: Encoder, kernel: Kernel) {
  const registry = enc.device.kernels;
  registry.register(GATED_DELTA_NET_FAMILY, GATED_DELTA_NET_SOURCES, GATED_DELTA_NET_KERNELS);
  return registry.pipeline(kernel);
}

/** The shape under `params` (its k and v are head dimensions; the buffers k and v are the keys and values). */
export interface GatedDeltaNetArgs extends GatedDeltaNetBuffers {
  params: GatedDeltaNetParams;
}
export interface GatedDeltaNetDecodeArgs extends GatedDeltaNetDecodeBuffers {
  params: GatedDeltaNetDecodeParams;
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
  const p = args.params;
  const dt = validateGatedDeltaNet(p, args, enc.device);
  const hasInitialState = args.initialState !== undefined;
  enc.dispatch(
    pipeline(enc, dt === 'bf16' ? 'gated_delta_net_bf16' : 'gated_delta_net_f32'),
    {
      buffers: [
        args.q, args.k, args.v, args.g, args.beta,
        args.initialState ?? args.finalState, args.output, args.finalState,
      ],
      bytes: [, , , , , , , , packGatedDeltaNetParams({ ...p, hasInitialState })],
    },
    gatedDeltaNetGrid(p),
    [GDN_THREADS, 1, 1],
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
  const p = args.params;
  const dt = validateGatedDeltaNetDecode(p, args, enc.device);
  enc.dispatch(
    pipeline(enc, dt === 'bf16' ? 'gated_delta_net_decode_bf16' : 'gated_delta_net_decode_f32'),
    {
      buffers: [args.q, args.k, args.v, args.g, args.beta, args.state, args.output],
      bytes: [, , , , , , , packGatedDeltaNetDecodeParams(p)],
    },
    gatedDeltaNetGrid(p),
    [GDN_THREADS, 1, 1],
  );
}
