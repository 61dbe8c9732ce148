// flash_attn_vec: split-KV decode attention (one query token per row).

import metalSource from '../../shaders/flash_attn_vec.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/flash_attn_vec.cu' with { type: 'text' };
import header from '../../shaders/flash_attn_vec.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { record, type OpPlan, type PlannedDispatch } from '../plan.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBuffer, checkDtype, checkElements, checkMultiple, checkNoAliasing, checkPositive, checkedProduct, invalid,
} from '../validate.ts';

const OP = 'flash_attn_vec';
const FAMILY = 'flash_attn_vec';
/** The family's sources by backend, as registered by every dispatch. */
export const FLASH_ATTN_VEC_SOURCES = familySources(FAMILY, { header, metal: metalSource, cuda: cudaSrc });
export const FLASH_ATTN_VEC_KERNELS = [
  'flash_attn_vec_dk256',
  'flash_attn_vec_dk512',
  'flash_attn_vec_f16kv_dk256',
  'flash_attn_vec_f16kv_dk512',
  'flash_attn_vec_reduce_dk256',
  'flash_attn_vec_reduce_dk512',
] as const;

/** Lanes of the one simdgroup of a main-kernel threadgroup. */
const SIMD = 32;
/** The most workgroups per row: the reduce kernel gives each one a lane. */
export const FLASH_ATTN_VEC_MAX_NWG = 32;
/** Threadgroup memory of the main kernel: a 32 x 33 f32 transpose scratch and 32 f32 weights. */
export const FLASH_ATTN_VEC_THREADGROUP_BYTES = (SIMD * (SIMD + 1) + SIMD) * 4;
const U32_MAX = 0xffff_ffff;
/** CUDA main kernel: warps per block and the dynamic shared memory (a cp.async ring of 768 bytes per lane). */
const CUDA_WARPS = 4;
export const FLASH_ATTN_VEC_CUDA_THREADGROUP_BYTES = CUDA_WARPS * SIMD * 768;
/** CUDA: fewer blocks than this split a GQA group's query heads over more blocks. */
const CUDA_MIN_BLOCKS = 128;

/**
 * CUDA grid x: blocks per GQA group, each taking ceil(group / x) query heads
 * (at most 8 / (headDim * bytes / 512) of them, the registers' limit), halving
 * the heads per block while the grid has fewer than CUDA_MIN_BLOCKS blocks.
 */
export function flashAttnVecCudaHeadBlocks(p: Pick<FlashAttnVecParams, 'batch' | 'nHeads' | 'nKvHeads' | 'headDim' | 'nwg'>,
  kvBytes: number): number {
  const group = p.nHeads / p.nKvHeads;
  const slices = (p.headDim * kvBytes) / (SIMD * 16);
  let hpb = Math.min(group, 8 / slices);
  while (hpb > 1 && Math.ceil(group / hpb) * p.nKvHeads * p.batch * p.nwg < CUDA_MIN_BLOCKS) hpb = Math.ceil(hpb / 2);
  return Math.ceil(group / hpb);
}

export type FlashAttnVecMask = 'none' | 'causal' | 'slidingWindow';
const MASK_CODE: Record<FlashAttnVecMask, number> = { none: 0, causal: 1, slidingWindow: 2 };

export interface FlashAttnVecParams {
  /** Rows of queries: B. */
  batch: number;
  nHeads: number;
  /** KV heads; nHeads is a multiple of it (GQA). */
  nKvHeads: number;
  /** Head dimension of Q, K and V: 256 or 512. */
  headDim: number;
  /** Valid KV positions; the query sits at position kvSeqLen - 1. */
  kvSeqLen: number;
  /** Allocated KV positions per head (the stride between KV heads). */
  kvCapacity: number;
  /** Multiplies q . k. */
  scale: number;
  mask: FlashAttnVecMask;
  /** Visible keys under 'slidingWindow' (positive there); ignored otherwise. */
  slidingWindow?: number;
  /** Logit softcap: s = softcap * tanh(s / softcap) after scaling; 0 or absent disables. */
  softcap?: number;
  /** Workgroups splitting each row's KV positions, 1..32. */
  nwg: number;
}

export interface FlashAttnVecBuffers {
  /** [batch, nHeads, headDim] f32 */
  q: Buffer;
  /** [batch, nKvHeads, kvCapacity, headDim] f32 or f16 */
  k: Buffer;
  /** [batch, nKvHeads, kvCapacity, headDim], the dtype of k */
  v: Buffer;
  /** [batch, nHeads, headDim] f32 */
  out: Buffer;
  /** f32 of flashAttnVecTmpElements(params) elements; required when nwg > 1, unused when nwg == 1. */
  tmp?: Buffer;
}
export interface FlashAttnVecArgs extends FlashAttnVecBuffers, FlashAttnVecParams {}

/** struct FlashAttnVecParams of shaders/flash_attn_vec.metal. */
export const FLASH_ATTN_VEC_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FlashAttnVecParams');

/** struct FlashAttnVecReduceParams of shaders/flash_attn_vec.metal. */
export const FLASH_ATTN_VEC_REDUCE_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FlashAttnVecReduceParams');

/** The main kernel's FlashAttnVecParams, little-endian. */
export function packFlashAttnVecParams(p: FlashAttnVecParams): Uint8Array {
  return packFields(FLASH_ATTN_VEC_PARAMS_LAYOUT, {
    n_heads: p.nHeads,
    n_kv_heads: p.nKvHeads,
    head_dim: p.headDim,
    kv_seq_len: p.kvSeqLen,
    kv_capacity: p.kvCapacity,
    scale: p.scale,
    mask_type: MASK_CODE[p.mask],
    sliding_window: p.mask === 'slidingWindow' ? (p.slidingWindow ?? 0) : 0,
    softcap: p.softcap ?? 0,
    nwg: p.nwg,
  });
}

/** The reduce kernel's FlashAttnVecReduceParams: nrows = batch * nHeads. */
export function packFlashAttnVecReduceParams(p: Pick<FlashAttnVecParams, 'batch' | 'nHeads'>): Uint8Array {
  return packFields(FLASH_ATTN_VEC_REDUCE_PARAMS_LAYOUT, { nrows: p.batch * p.nHeads });
}

/**
 * f32 elements of the tmp buffer: per row (batch * nHeads rows) nwg partial
 * outputs of headDim floats, then nwg (S, M) pairs. 0 when nwg == 1.
 */
export function flashAttnVecTmpElements(p: Pick<FlashAttnVecParams, 'batch' | 'nHeads' | 'headDim' | 'nwg'>): number {
  if (p.nwg === 1) return 0;
  return checkedProduct(OP, 'tmp elements', p.batch, p.nHeads, p.headDim + 2, p.nwg);
}

function checkU32(arg: string, value: number): void {
  checkAtMost(OP, arg, value, U32_MAX, '2^32 - 1');
}

/** Throws MlxError('InvalidArgument') naming the argument unless params and buffers fit the kernels. */
export function validateFlashAttnVec(a: FlashAttnVecArgs, device?: Device): void {
  const p = a, bufs = a;
  for (const [arg, value] of [
    ['batch', p.batch], ['nHeads', p.nHeads], ['nKvHeads', p.nKvHeads], ['headDim', p.headDim],
    ['kvSeqLen', p.kvSeqLen], ['kvCapacity', p.kvCapacity], ['nwg', p.nwg],
  ] as const) {
    checkPositive(OP, arg, value);
    checkU32(arg, value);
  }
  if (p.headDim !== 256 && p.headDim !== 512) throw invalid(OP, 'headDim', '256 or 512', p.headDim);
  checkMultiple(OP, 'nHeads', p.nHeads, p.nKvHeads, 'nKvHeads');
  checkAtMost(OP, 'kvSeqLen', p.kvSeqLen, p.kvCapacity, 'kvCapacity');
  checkAtMost(OP, 'nwg', p.nwg, FLASH_ATTN_VEC_MAX_NWG);
  checkU32('batch * nwg', checkedProduct(OP, 'batch * nwg', p.batch, p.nwg));
  if (!Object.hasOwn(MASK_CODE, p.mask)) throw invalid(OP, 'mask', `one of ${Object.keys(MASK_CODE).join(', ')}`, p.mask);
  if (p.mask === 'slidingWindow') {
    checkPositive(OP, 'slidingWindow', p.slidingWindow ?? 0);
    checkU32('slidingWindow', p.slidingWindow ?? 0);
  }
  if (!Number.isFinite(p.scale)) throw invalid(OP, 'scale', 'a finite number', p.scale);
  if (p.softcap !== undefined && (typeof p.softcap !== 'number' || !Number.isFinite(p.softcap) || p.softcap < 0)) {
    throw invalid(OP, 'softcap', 'a finite number >= 0 (0 disables) or absent', p.softcap);
  }

  const qElems = checkedProduct(OP, 'q elements', p.batch, p.nHeads, p.headDim);
  const kvElems = checkedProduct(OP, 'k elements', p.batch, p.nKvHeads, p.kvCapacity, p.headDim);
  for (const [arg, b] of [['q', bufs.q], ['k', bufs.k], ['v', bufs.v], ['out', bufs.out]] as const) checkBuffer(OP, arg, b, device);
  // tmp is unused when nwg == 1, but a value given there must still be a buffer.
  if (bufs.tmp !== undefined) checkBuffer(OP, 'tmp', bufs.tmp, device);
  checkDtype(OP, 'q', bufs.q, 'f32');
  checkElements(OP, 'q', bufs.q, qElems);
  checkDtype(OP, 'k', bufs.k, ['f32', 'f16']);
  checkElements(OP, 'k', bufs.k, kvElems);
  checkDtype(OP, 'v', bufs.v, bufs.k.dtype);
  checkElements(OP, 'v', bufs.v, kvElems);
  checkDtype(OP, 'out', bufs.out, 'f32');
  checkElements(OP, 'out', bufs.out, qElems);
  if (p.nwg > 1) {
    if (bufs.tmp === undefined) throw invalid(OP, 'tmp', `a f32 buffer of flashAttnVecTmpElements = ${flashAttnVecTmpElements(p)} elements when nwg > 1`, 'none');
    checkDtype(OP, 'tmp', bufs.tmp, 'f32');
    checkElements(OP, 'tmp', bufs.tmp, flashAttnVecTmpElements(p));
  }
  checkNoAliasing(OP, [['q', bufs.q], ['k', bufs.k], ['v', bufs.v], ['out', bufs.out], ['tmp', p.nwg > 1 ? bufs.tmp : undefined]],
    ['out', 'tmp'], 'the CUDA kernel takes q, k and v as __restrict__, and every threadgroup of a KV head reads all of k and v');
}

/**
 * out[b, h, :] = softmax_j(s_j) . V[b, kh, j, :] over the visible j < kvSeqLen,
 * s_j = scale * Q[b, h, :] . K[b, kh, j, :], capped as softcap * tanh(s_j / softcap)
 * when softcap > 0, kh = h / (nHeads / nKvHeads). The query sits at position
 * kvSeqLen - 1, so 'causal' sees every j < kvSeqLen (as 'none' does) and
 * 'slidingWindow' sees j >= kvSeqLen - slidingWindow.
 *
 * Layouts: q [B, nHeads, D] f32; k, v [B, nKvHeads, kvCapacity, D] f32 or f16;
 * out [B, nHeads, D] f32. D = headDim.
 *
 * Dispatches flash_attn_vec[_f16kv]_dk<D> with bindings 0 params
 * (FlashAttnVecParams), 1 q, 2 k, 3 v, 4 dst, threadgroup(0) 4352 bytes, grid
 * (1, nHeads, B * nwg), 32 threads. With nwg == 1 dst is out. With nwg > 1 dst
 * is tmp (partials [B * nHeads, D / 4, nwg] float4, then (S, M) pairs
 * [B * nHeads, nwg, 2]), and flash_attn_vec_reduce_dk<D> follows after a
 * barrier (the encoder's): bindings 0 FlashAttnVecReduceParams, 1 tmp, 2 out, 3 nwg (u32),
 * grid (B * nHeads, 1, 1), 32 * nwg threads.
 * On cuda the main kernel reads each K/V row once per block of GQA query
 * heads: grid (flashAttnVecCudaHeadBlocks, nKvHeads, B * nwg), 128 threads,
 * threadgroup(0) FLASH_ATTN_VEC_CUDA_THREADGROUP_BYTES; tmp and the reduce as above.
 */
export function flashAttnVec(enc: Encoder, args: FlashAttnVecArgs): void {
  record(enc, planFlashAttnVec(args, enc.device.limits, enc.device));
}

/** flashAttnVec's plan: the main kernel, then (nwg > 1) the reduce, which reads what main wrote to tmp. */
export function planFlashAttnVec(args: FlashAttnVecArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateFlashAttnVec(args, device);
  const d = args.headDim;
  const f16 = args.k.dtype === 'f16';
  const main: PlannedDispatch = {
    kernel: f16 ? `flash_attn_vec_f16kv_dk${d}` : `flash_attn_vec_dk${d}`,
    buffers: [, args.q, args.k, args.v, args.nwg === 1 ? args.out : args.tmp!],
    bytes: [packFlashAttnVecParams(args)],
    threadgroupMemory: [FLASH_ATTN_VEC_THREADGROUP_BYTES],
    grid: [1, args.nHeads, args.batch * args.nwg],
    threads: [SIMD, 1, 1],
    cuda: {
      threadgroupMemory: [FLASH_ATTN_VEC_CUDA_THREADGROUP_BYTES],
      grid: [flashAttnVecCudaHeadBlocks(args, f16 ? 2 : 4), args.nKvHeads, args.batch * args.nwg],
      threads: [CUDA_WARPS * SIMD, 1, 1],
    },
  };
  const dispatches: PlannedDispatch[] = [main];
  if (args.nwg > 1) {
    dispatches.push({
      kernel: `flash_attn_vec_reduce_dk${d}`,
      buffers: [, args.tmp!, args.out],
      bytes: [packFlashAttnVecReduceParams(args), , , new Uint32Array([args.nwg])],
      grid: [args.batch * args.nHeads, 1, 1],
      threads: [SIMD * args.nwg, 1, 1],
    });
  }
  return { family: FAMILY, sources: FLASH_ATTN_VEC_SOURCES, kernels: FLASH_ATTN_VEC_KERNELS, dispatches };
}
