// gated_delta_net_chunk: the inter-chunk state recurrence of the chunked gated
// delta rule (Qwen3.5/3.6 linear attention), kernel
// gated_delta_net_chunk_inter_state_bf16.

import metalSource from '../../shaders/gated_delta_net_chunk.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/gated_delta_net_chunk.cu' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device } from '../device.ts';
import type { DType } from '../dtype.ts';
import type { Encoder } from '../encoder.ts';
import {
  checkAtMost, checkBuffer, checkDtype, checkElements, checkMultiple, checkNoAliasing, checkObject, checkPositive, checkedProduct,
  invalid,
} from '../validate.ts';
import type { ParamField } from '../params.ts';
import { familySources } from '../registry.ts';

const OP = 'gated_delta_net_chunk';
const FAMILY = 'gated_delta_net_chunk';
const KERNEL = 'gated_delta_net_chunk_inter_state_bf16';
export const GATED_DELTA_NET_CHUNK_KERNELS = [KERNEL] as const;
const SOURCES = familySources(FAMILY, { metal: metalSource, cuda: cudaSrc });

/** K the kernel is specialized to: its K-tile loops are hard-coded to 16 tiles of 8. */
export const GDN_CHUNK_MAX_K = 128;
/** The largest V: 8 slices of BV. */
export const GDN_CHUNK_MAX_V = 256;
/** V slice per threadgroup. */
export const GDN_CHUNK_BV = 32;
/** The only chunk size the kernel runs. */
export const GDN_CHUNK_BT = 64;
/** Apple's threadgroup memory limit, which the state slice and the staging tile share. */
export const GDN_CHUNK_MAX_THREADGROUP_BYTES = 32 * 1024;
const THREADS = 128;
const U32_MAX = 0xffff_ffff;

export interface GatedDeltaNetChunkParams {
  /** Batch size B. */
  b: number;
  /** Sequence length T, a multiple of bt. */
  t: number;
  /** K heads Hg. */
  hg: number;
  /** V heads H, a multiple of hg (GQA). */
  h: number;
  /** Head dimension of K: 128. */
  k: number;
  /** Head dimension of V: a multiple of 32, at most 256. */
  v: number;
  /** Chunk size BT: 64. */
  bt: number;
}

export interface GatedDeltaNetChunkBuffers {
  /** [B, T, Hg, K] bf16 */
  k: Buffer;
  /** [B, T, H, K] bf16, the WY-projected keys */
  w: Buffer;
  /** [B, T, H, V] bf16, the WY-projected values */
  u: Buffer;
  /** [B, T, H] f32, log decay cumsummed within each chunk */
  g: Buffer;
  /** [B, H, V, K] f32 initial state */
  h0: Buffer;
  /** [B, NT, H, V, K] bf16 chunk-start states (output) */
  hOut: Buffer;
  /** [B, T, H, V] bf16 (output) */
  vNew: Buffer;
  /** [B, H, V, K] f32 state after the last chunk (output) */
  finalState: Buffer;
}

/** Chunks: ceil(t / bt). */
export function numChunks(p: Pick<GatedDeltaNetChunkParams, 't' | 'bt'>): number {
  return Math.ceil(p.t / p.bt);
}

/** V heads per K head: h / hg. */
export function groupRatio(p: Pick<GatedDeltaNetChunkParams, 'h' | 'hg'>): number {
  return p.h / p.hg;
}

/** Threadgroup memory of the kernel: the f32 state slice BV x K and the bf16 staging tile BV x BT. */
export function gatedDeltaNetChunkThreadgroupBytes(p: Pick<GatedDeltaNetChunkParams, 'k' | 'bt'>): number {
  return GDN_CHUNK_BV * p.k * 4 + GDN_CHUNK_BV * p.bt * 2;
}

/** struct GatedDeltaNetChunkParams of shaders/gated_delta_net_chunk.metal: u32 [B, T, Hg, H, K, V, BT, NT]. */
export const GATED_DELTA_NET_CHUNK_PARAMS_LAYOUT: readonly ParamField[] = [
  { name: 'b', type: 'u32', offset: 0 },
  { name: 't', type: 'u32', offset: 4 },
  { name: 'hg', type: 'u32', offset: 8 },
  { name: 'h', type: 'u32', offset: 12 },
  { name: 'k', type: 'u32', offset: 16 },
  { name: 'v', type: 'u32', offset: 20 },
  { name: 'bt', type: 'u32', offset: 24 },
  { name: 'nt', type: 'u32', offset: 28 },
];

/** The kernel's params: u32 [B, T, Hg, H, K, V, BT, NT]. */
export function buildGatedDeltaNetChunkParams(p: GatedDeltaNetChunkParams): Uint32Array {
  return new Uint32Array([p.b, p.t, p.hg, p.h, p.k, p.v, p.bt, numChunks(p)]);
}

/** Throws MlxError('InvalidArgument') naming the argument unless params and buffers fit the kernel. */
export function validateGatedDeltaNetChunk(p: GatedDeltaNetChunkParams, bufs: GatedDeltaNetChunkBuffers, device?: Device): void {
  checkObject(OP, 'params', p);
  for (const [arg, value] of [['b', p.b], ['t', p.t], ['hg', p.hg], ['h', p.h], ['k', p.k], ['v', p.v], ['bt', p.bt]] as const) {
    checkPositive(OP, arg, value);
    checkAtMost(OP, arg, value, U32_MAX, '2^32 - 1');
  }
  checkMultiple(OP, 'h', p.h, p.hg, 'hg');
  if (p.k !== GDN_CHUNK_MAX_K) {
    throw invalid(OP, 'k', `equal to MAX_K = ${GDN_CHUNK_MAX_K} exactly: the kernel's K-tile loops are hard-coded to ${GDN_CHUNK_MAX_K / 8} tiles of 8`, p.k);
  }
  checkAtMost(OP, 'v', p.v, GDN_CHUNK_MAX_V, 'MAX_V');
  const tgBytes = gatedDeltaNetChunkThreadgroupBytes(p);
  if (tgBytes > GDN_CHUNK_MAX_THREADGROUP_BYTES) {
    throw invalid(
      OP, 'threadgroup memory (bv * k * 4 + bv * bt * 2)',
      `at most ${GDN_CHUNK_MAX_THREADGROUP_BYTES} bytes (bv=${GDN_CHUNK_BV}, k=${p.k}, bt=${p.bt})`, tgBytes,
    );
  }
  checkMultiple(OP, 't', p.t, p.bt, 'bt');
  if (p.bt !== GDN_CHUNK_BT) throw invalid(OP, 'bt', `${GDN_CHUNK_BT}`, p.bt);
  checkMultiple(OP, 'v', p.v, GDN_CHUNK_BV, 'BV');

  const nt = numChunks(p);
  const expected: readonly [keyof GatedDeltaNetChunkBuffers, DType, number][] = [
    ['k', 'bf16', checkedProduct(OP, 'k elements', p.b, p.t, p.hg, p.k)],
    ['w', 'bf16', checkedProduct(OP, 'w elements', p.b, p.t, p.h, p.k)],
    ['u', 'bf16', checkedProduct(OP, 'u elements', p.b, p.t, p.h, p.v)],
    ['g', 'f32', checkedProduct(OP, 'g elements', p.b, p.t, p.h)],
    ['h0', 'f32', checkedProduct(OP, 'h0 elements', p.b, p.h, p.v, p.k)],
    ['hOut', 'bf16', checkedProduct(OP, 'hOut elements', p.b, nt, p.h, p.v, p.k)],
    ['vNew', 'bf16', checkedProduct(OP, 'vNew elements', p.b, p.t, p.h, p.v)],
    ['finalState', 'f32', checkedProduct(OP, 'finalState elements', p.b, p.h, p.v, p.k)],
  ];
  for (const [key, dtype, count] of expected) {
    checkBuffer(OP, key, bufs[key], device);
    checkDtype(OP, key, bufs[key], dtype);
    checkElements(OP, key, bufs[key], count);
  }
  checkNoAliasing(OP, expected.map(([key]) => [key, bufs[key]] as const), ['hOut', 'vNew', 'finalState'],
    'the CUDA kernel takes every binding as __restrict__');
}

/** The buffers, and the shape under `params` (its k and v are dimensions, the buffers' k is the keys). */
export interface GatedDeltaNetChunkArgs extends GatedDeltaNetChunkBuffers {
  params: GatedDeltaNetChunkParams;
}

/**
 * Per (b, head), with the state h [V, K] f32 starting at h0 and chunks of
 * bt = 64 tokens, kh = head / (H / Hg), `last` the chunk's last token:
 *   hOut[b, c, head] = bf16(h)
 *   vn[t, v] = u[t, v] - sum_k w[t, k] * bf16(h)[v, k];   vNew[t, v] = bf16(vn)
 *   h[v, k]  = h[v, k] * exp(g[last]) + sum_t bf16(vn[t, v] * exp(g[last] - g[t])) * k[t, kh, k]
 * finalState[b, head] = h. Products take bf16 operands and sum in f32.
 *
 * Layouts: k [B, T, Hg, K]; w [B, T, H, K]; u, vNew [B, T, H, V] (bf16);
 * g [B, T, H] f32; h0, finalState [B, H, V, K] f32; hOut [B, NT, H, V, K] bf16.
 *
 * Bindings: 0 k, 1 w, 2 u, 3 g, 4 h0, 5 h_out, 6 v_new, 7 final_state,
 * 8 params (buildGatedDeltaNetChunkParams), threadgroup(0)
 * gatedDeltaNetChunkThreadgroupBytes (20 KiB). Grid (V / 32, H, B), 128 threads.
 */
export function gatedDeltaNetChunk(enc: Encoder, args: GatedDeltaNetChunkArgs): void {
  const p = args.params;
  validateGatedDeltaNetChunk(p, args, enc.device);
  const kernels = enc.device.kernels;
  kernels.register(FAMILY, SOURCES, GATED_DELTA_NET_CHUNK_KERNELS);
  enc.dispatch(
    kernels.pipeline(KERNEL),
    {
      buffers: [args.k, args.w, args.u, args.g, args.h0, args.hOut, args.vNew, args.finalState],
      bytes: [, , , , , , , , buildGatedDeltaNetChunkParams(p)],
      threadgroupMemory: [gatedDeltaNetChunkThreadgroupBytes(p)],
    },
    [p.v / GDN_CHUNK_BV, p.h, p.b],
    [THREADS, 1, 1],
  );
}
