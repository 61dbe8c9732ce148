// Chunk-local cumulative sum of the gated delta net log-decay g over time.
// Kernel: shaders/chunk_local_cumsum.metal. One threadgroup per (chunk, head, batch).

import src from '../../shaders/chunk_local_cumsum.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/chunk_local_cumsum.cu' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import { checkAtMost, checkBuffer, checkDtype, checkElements, checkPositive, checkedProduct } from '../validate.ts';

export const CHUNK_LOCAL_CUMSUM_FAMILY = 'chunk_local_cumsum';
const SOURCES = familySources(CHUNK_LOCAL_CUMSUM_FAMILY, { metal: src, cuda: cudaSrc });
export const CHUNK_LOCAL_CUMSUM_KERNELS = ['chunk_local_cumsum_g_f32'] as const;
/** One thread per timestep of a chunk: Metal's threadgroup limit. */
export const CHUNK_LOCAL_CUMSUM_MAX_BT = 1024;
const MAX_ELEMENTS_U32 = 0xffff_ffff;

/** struct ChunkLocalCumsumParams (buffer 2): [B, T, H, BT, NT]. */
export const CHUNK_LOCAL_CUMSUM_PARAMS_LAYOUT: readonly ParamField[] = [
  { name: 'b', type: 'u32', offset: 0 },
  { name: 't', type: 'u32', offset: 4 },
  { name: 'h', type: 'u32', offset: 8 },
  { name: 'bt', type: 'u32', offset: 12 },
  { name: 'nt', type: 'u32', offset: 16 },
];

export interface ChunkLocalCumsumParams {
  /** Batch. */
  b: number;
  /** Timesteps (any; the last chunk may be partial). */
  t: number;
  /** Heads. */
  h: number;
  /** Chunk size (64 in FLA and the gated delta net chunk kernels). */
  bt: number;
}
export interface ChunkLocalCumsumBuffers {
  /** f32 [b, t, h] */
  gIn: Buffer;
  /** f32 [b, t, h], output */
  gCumsum: Buffer;
}

/** Number of chunks: ceil(t / bt). */
export function numChunks(p: ChunkLocalCumsumParams): number {
  return Math.ceil(p.t / p.bt);
}

export function packChunkLocalCumsumParams(p: ChunkLocalCumsumParams): Uint8Array {
  return packFields(CHUNK_LOCAL_CUMSUM_PARAMS_LAYOUT, { b: p.b, t: p.t, h: p.h, bt: p.bt, nt: numChunks(p) });
}

/** device: the encoder's, when the buffers must belong to it. gCumsum may be gIn (in place). */
export function validateChunkLocalCumsum(p: ChunkLocalCumsumParams, buf: ChunkLocalCumsumBuffers, device?: Device): void {
  const op = 'chunk_local_cumsum';
  checkPositive(op, 'b', p.b);
  checkPositive(op, 't', p.t);
  checkPositive(op, 'h', p.h);
  checkPositive(op, 'bt', p.bt);
  checkAtMost(op, 'bt', p.bt, CHUNK_LOCAL_CUMSUM_MAX_BT, 'the threads per threadgroup limit');
  const n = checkedProduct(op, 'b * t * h', p.b, p.t, p.h);
  checkAtMost(op, 'b * t * h', n, MAX_ELEMENTS_U32, 'the 32-bit index limit');
  checkBuffer(op, 'gIn', buf.gIn, device);
  checkBuffer(op, 'gCumsum', buf.gCumsum, device);
  checkDtype(op, 'gIn', buf.gIn, 'f32');
  checkDtype(op, 'gCumsum', buf.gCumsum, 'f32');
  checkElements(op, 'gIn', buf.gIn, n);
  checkElements(op, 'gCumsum', buf.gCumsum, n);
}


/**
 * chunk_local_cumsum: gCumsum[b, t, h] = sum of gIn[b, s, h] for s from
 * floor(t / bt) * bt through t (inclusive prefix sum restarted every bt steps).
 *
 * Layouts (f32): gIn, gCumsum [b, t, h], h innermost. gCumsum may be gIn's
 * buffer (each thread reads its element before the barrier and writes it after).
 * Bindings: 0 gIn, 1 gCumsum, 2 ChunkLocalCumsumParams [b, t, h, bt, nt].
 * Grid: (1, h, b * nt) threadgroups of (bt, 1, 1) threads, nt = ceil(t / bt);
 * threads past t in the last chunk are masked.
 */
export function chunkLocalCumsum(enc: Encoder, args: ChunkLocalCumsumBuffers & ChunkLocalCumsumParams): void {
  validateChunkLocalCumsum(args, args, enc.device);
  const registry = enc.device.kernels;
  registry.register(CHUNK_LOCAL_CUMSUM_FAMILY, SOURCES, CHUNK_LOCAL_CUMSUM_KERNELS);
  enc.dispatch(registry.pipeline('chunk_local_cumsum_g_f32'), {
    buffers: [args.gIn, args.gCumsum],
    bytes: [, , packChunkLocalCumsumParams(args)],
  }, [1, args.h, args.b * numChunks(args)], [args.bt, 1, 1]);
}
