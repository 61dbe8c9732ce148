// flash_attn_vec: split-KV decode attention (one query token per sequence
// and head), GQA. mlx-native's entries (src/ops/flash_attn_vec.rs,
// src/shaders/flash_attn_vec.metal): flash_attn_vec[_f16kv]_dk{256,512} and
// flash_attn_vec_reduce_dk{256,512}, their FlashAttnVecParams, bindings,
// grids, tmp layout and validation. Added here in the crate's pattern (the
// crate lacks them): bf16 K/V (flash_attn_vec_bf16kv_dk*), head dim 128
// (*_dk128), and the varlen entries (flash_attn_vec_varlen[_f16kv|_bf16kv]_dk*:
// a batch of sequences of their own lengths, read from a u32 buffer at
// binding 5, each cache global or a sliding layer's ring).
// Kernels: shaders/flash_attn_vec.metal and shaders/cuda/flash_attn_vec.cu.

import metalSource from '../../shaders/flash_attn_vec.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/flash_attn_vec.cu' with { type: 'text' };
import header from '../../shaders/flash_attn_vec.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { familyPlans, record, type Launch, type OpPlan, type PlannedDispatch } from '../plan.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBoolean, checkBuffer, checkDtype, checkedProduct, checkElements, checkMultiple, checkNoAliasing, checkPositive, invalid, U32_MAX,
} from '../validate.ts';

const OP = 'flash_attn_vec';
const OP_VARLEN = 'flash_attn_vec_varlen';
const FAMILY = 'flash_attn_vec';
/**
 * The CUDA program's parts 1 to 9 (FamilySources.cudaParts): the uniform
 * and varlen entries of one K/V dtype (f32, f16, bf16) and head dim (128,
 * 256, 512), 0.6-1.7 s of NVRTC 13.0 on one thread each (the whole family
 * took 9.7 s); the reductions are part 0 (0.2 s). A model's decode
 * compiles its cache's dtype at its layers' head dims.
 */
export const FLASH_ATTN_VEC_CUDA_PARTS: readonly (readonly string[])[] = ['', 'f16kv_', 'bf16kv_'].flatMap((tag) =>
  [128, 256, 512].map((d) => [`flash_attn_vec_${tag}dk${d}`, `flash_attn_vec_varlen_${tag}dk${d}`]));
/** The family's sources by backend, as registered by every dispatch. */
export const FLASH_ATTN_VEC_SOURCES = familySources(FAMILY, {
  header, metal: metalSource, cuda: cudaSrc, cudaParts: FLASH_ATTN_VEC_CUDA_PARTS,
});
export const FLASH_ATTN_VEC_KERNELS = [
  'flash_attn_vec_dk128',
  'flash_attn_vec_dk256',
  'flash_attn_vec_dk512',
  'flash_attn_vec_f16kv_dk128',
  'flash_attn_vec_f16kv_dk256',
  'flash_attn_vec_f16kv_dk512',
  'flash_attn_vec_bf16kv_dk128',
  'flash_attn_vec_bf16kv_dk256',
  'flash_attn_vec_bf16kv_dk512',
  'flash_attn_vec_varlen_dk128',
  'flash_attn_vec_varlen_dk256',
  'flash_attn_vec_varlen_dk512',
  'flash_attn_vec_varlen_f16kv_dk128',
  'flash_attn_vec_varlen_f16kv_dk256',
  'flash_attn_vec_varlen_f16kv_dk512',
  'flash_attn_vec_varlen_bf16kv_dk128',
  'flash_attn_vec_varlen_bf16kv_dk256',
  'flash_attn_vec_varlen_bf16kv_dk512',
  'flash_attn_vec_reduce_dk128',
  'flash_attn_vec_reduce_dk256',
  'flash_attn_vec_reduce_dk512',
] as const;
const planOf = familyPlans({ family: FAMILY, sources: FLASH_ATTN_VEC_SOURCES, kernels: FLASH_ATTN_VEC_KERNELS });

/** Head dims of the kernels. */
export const FLASH_ATTN_VEC_HEAD_DIMS = [128, 256, 512] as const;
/** K/V dtypes of the kernels (q and out are f32). */
export const FLASH_ATTN_VEC_KV_DTYPES = ['f32', 'f16', 'bf16'] as const;
export type FlashAttnVecKvDtype = (typeof FLASH_ATTN_VEC_KV_DTYPES)[number];
const KV_TAG: Record<FlashAttnVecKvDtype, string> = { f32: '', f16: 'f16kv_', bf16: 'bf16kv_' };

/** Lanes of the one simdgroup of a main-kernel threadgroup. */
const SIMD = 32;
/** The most workgroups per row: the reduce kernel gives each one a lane. */
export const FLASH_ATTN_VEC_MAX_NWG = 32;
/**
 * threadgroup(0) of a Metal main kernel: what mlx-native's host binds there,
 * (PAD(D, 128) * 3 + 128) halves; the kernels use none of it (they reduce and
 * broadcast within the simdgroup), so any length the crate's host gives works.
 */
export function flashAttnVecThreadgroupBytes(headDim: number): number {
  const padded = Math.ceil(headDim / 128) * 128;
  return (3 * padded + 4 * SIMD) * 2;
}
/** CUDA main kernels: warps per block (both paths). */
const CUDA_WARPS = 4;
/** CUDA f32 K/V (FFMA path): the dynamic shared memory, a cp.async ring of 768 bytes per lane. */
export const FLASH_ATTN_VEC_CUDA_THREADGROUP_BYTES = CUDA_WARPS * SIMD * 768;
/** CUDA f32 K/V: fewer blocks than this split a GQA group's query heads over more blocks. */
const CUDA_MIN_BLOCKS = 128;
/** CUDA f16 / bf16 K/V (tensor-core path): query heads per block (the n of mma m16n8k16). */
export const FLASH_ATTN_VEC_CUDA_MMA_HEADS = 8;
/**
 * CUDA f16 / bf16 K/V: the dynamic shared memory of a block, by head dim: each
 * warp's ring of 16-key K and V tiles (192 KB: 12, 6 or 3 tiles of 16 x D
 * 16-bit values), plus, at D 512, the split query (16 x 512 16-bit values).
 * 192-208 KB: a GPU with 227 KB of shared memory per block (H100, H200).
 */
export function flashAttnVecCudaMmaSharedBytes(headDim: number): number {
  return 192 * 1024 + (headDim === 512 ? 16 * 512 * 2 : 0);
}

/**
 * CUDA grid x of the f32 path: blocks per GQA group, each taking ceil(group /
 * x) query heads (at most 8 / (headDim * 4 / 512) of them, the registers'
 * limit), halving the heads per block while the grid has fewer than
 * CUDA_MIN_BLOCKS blocks.
 */
export function flashAttnVecCudaHeadBlocks(p: Pick<FlashAttnVecParams, 'batch' | 'nHeads' | 'nKvHeads' | 'headDim' | 'nwg'>,
  kvBytes: number): number {
  const group = p.nHeads / p.nKvHeads;
  const slices = (p.headDim * kvBytes) / (SIMD * 16);
  let hpb = Math.min(group, Math.max(1, Math.floor(8 / slices)));
  while (hpb > 1 && Math.ceil(group / hpb) * p.nKvHeads * p.batch * p.nwg < CUDA_MIN_BLOCKS) hpb = Math.ceil(hpb / 2);
  return Math.ceil(group / hpb);
}

export type FlashAttnVecMask = 'none' | 'causal' | 'slidingWindow';
const MASK_CODE: Record<FlashAttnVecMask, number> = { none: 0, causal: 1, slidingWindow: 2 };

/** What both ops share: the heads, the cache's shape, the scores and the split. */
interface FlashAttnVecCommon {
  /** Sequences: B. */
  batch: number;
  nHeads: number;
  /** KV heads; nHeads is a multiple of it (GQA). */
  nKvHeads: number;
  /** Head dimension of Q, K and V: 128, 256 or 512. */
  headDim: number;
  /** Allocated KV slots per (sequence, KV head) (the stride between KV heads). */
  kvCapacity: number;
  /** Multiplies q . k. */
  scale: number;
  mask: FlashAttnVecMask;
  /** Visible keys under 'slidingWindow' (positive there): the query's position and the slidingWindow - 1 before it; ignored otherwise. */
  slidingWindow?: number;
  /** Logit softcap: s = softcap * tanh(s / softcap) after scaling; 0 or absent disables. */
  softcap?: number;
  /** Workgroups splitting each row's visible keys, 1..32. */
  nwg: number;
}

export interface FlashAttnVecParams extends FlashAttnVecCommon {
  /** Valid KV positions of every sequence; the query sits at position kvSeqLen - 1. */
  kvSeqLen: number;
}

export interface FlashAttnVecBuffers {
  /** [batch, nHeads, headDim] f32 */
  q: Buffer;
  /** [batch, nKvHeads, kvCapacity, headDim] f32, f16 or bf16 */
  k: Buffer;
  /** [batch, nKvHeads, kvCapacity, headDim], the dtype of k */
  v: Buffer;
  /** [batch, nHeads, headDim] f32 */
  out: Buffer;
  /** f32 of flashAttnVecTmpElements(params) elements; required when nwg > 1, unused when nwg == 1. */
  tmp?: Buffer;
}
export interface FlashAttnVecArgs extends FlashAttnVecBuffers, FlashAttnVecParams {}

export interface FlashAttnVecVarlenParams extends FlashAttnVecCommon {
  /**
   * true: each cache is a ring (a sliding-window layer's, as kvCacheCopySeq
   * with ring: true writes it): position j lives in slot j % kvCapacity and
   * the cache holds the last kvCapacity positions. false or absent: a global
   * cache, position j in slot j.
   */
  ring?: boolean;
}

export interface FlashAttnVecVarlenArgs extends FlashAttnVecBuffers, FlashAttnVecVarlenParams {
  /**
   * [batch] u32: positions written to each sequence's cache (its query sits
   * at position seqLens[b] - 1). 0 gives zeros. On a global cache a length
   * above kvCapacity is read as kvCapacity (the kernels never read past the
   * cache, whatever the buffer holds).
   */
  seqLens: Buffer;
}

/** struct FlashAttnVecParams of shaders/flash_attn_vec.h. */
export const FLASH_ATTN_VEC_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FlashAttnVecParams');
/** struct FlashAttnVecVarlenParams of shaders/flash_attn_vec.h. */
export const FLASH_ATTN_VEC_VARLEN_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FlashAttnVecVarlenParams');
/** struct FlashAttnVecReduceParams of shaders/flash_attn_vec.h. */
export const FLASH_ATTN_VEC_REDUCE_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FlashAttnVecReduceParams');

function commonFields(p: FlashAttnVecCommon): Record<string, number> {
  return {
    n_heads: p.nHeads,
    n_kv_heads: p.nKvHeads,
    head_dim: p.headDim,
    kv_capacity: p.kvCapacity,
    scale: p.scale,
    mask_type: MASK_CODE[p.mask],
    sliding_window: p.mask === 'slidingWindow' ? (p.slidingWindow ?? 0) : 0,
    softcap: p.softcap ?? 0,
    nwg: p.nwg,
  };
}

/** The main kernel's FlashAttnVecParams, little-endian. */
export function packFlashAttnVecParams(p: FlashAttnVecParams): Uint8Array {
  return packFields(FLASH_ATTN_VEC_PARAMS_LAYOUT, { ...commonFields(p), kv_seq_len: p.kvSeqLen });
}

/** The varlen main kernel's FlashAttnVecVarlenParams, little-endian. */
export function packFlashAttnVecVarlenParams(p: FlashAttnVecVarlenParams): Uint8Array {
  return packFields(FLASH_ATTN_VEC_VARLEN_PARAMS_LAYOUT, { ...commonFields(p), ring: p.ring === true ? 1 : 0 });
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

function checkU32(op: string, arg: string, value: number): void {
  checkAtMost(op, arg, value, U32_MAX, '2^32 - 1');
}

/** The checks of both ops but kvSeqLen and seqLens. */
function validateCommon(op: string, a: FlashAttnVecCommon & FlashAttnVecBuffers, device?: Device): void {
  for (const [arg, value] of [
    ['batch', a.batch], ['nHeads', a.nHeads], ['nKvHeads', a.nKvHeads], ['headDim', a.headDim], ['kvCapacity', a.kvCapacity], ['nwg', a.nwg],
  ] as const) {
    checkPositive(op, arg, value);
    checkU32(op, arg, value);
  }
  if (!(FLASH_ATTN_VEC_HEAD_DIMS as readonly number[]).includes(a.headDim)) throw invalid(op, 'headDim', '128, 256 or 512', a.headDim);
  checkMultiple(op, 'nHeads', a.nHeads, a.nKvHeads, 'nKvHeads');
  checkAtMost(op, 'nwg', a.nwg, FLASH_ATTN_VEC_MAX_NWG);
  checkU32(op, 'batch * nwg', checkedProduct(op, 'batch * nwg', a.batch, a.nwg));
  if (!Object.hasOwn(MASK_CODE, a.mask)) throw invalid(op, 'mask', `one of ${Object.keys(MASK_CODE).join(', ')}`, a.mask);
  if (a.mask === 'slidingWindow') {
    checkPositive(op, 'slidingWindow', a.slidingWindow ?? 0);
    checkU32(op, 'slidingWindow', a.slidingWindow ?? 0);
  }
  if (!Number.isFinite(a.scale)) throw invalid(op, 'scale', 'a finite number', a.scale);
  if (a.softcap !== undefined && (typeof a.softcap !== 'number' || !Number.isFinite(a.softcap) || a.softcap < 0)) {
    throw invalid(op, 'softcap', 'a finite number >= 0 (0 disables) or absent', a.softcap);
  }

  const qElems = checkedProduct(op, 'q elements', a.batch, a.nHeads, a.headDim);
  const kvElems = checkedProduct(op, 'k elements', a.batch, a.nKvHeads, a.kvCapacity, a.headDim);
  for (const [arg, b] of [['q', a.q], ['k', a.k], ['v', a.v], ['out', a.out]] as const) checkBuffer(op, arg, b, device);
  // tmp is unused when nwg == 1, but a value given there must still be a buffer.
  if (a.tmp !== undefined) checkBuffer(op, 'tmp', a.tmp, device);
  checkDtype(op, 'q', a.q, 'f32');
  checkElements(op, 'q', a.q, qElems);
  checkDtype(op, 'k', a.k, FLASH_ATTN_VEC_KV_DTYPES);
  checkElements(op, 'k', a.k, kvElems);
  checkDtype(op, 'v', a.v, a.k.dtype);
  checkElements(op, 'v', a.v, kvElems);
  checkDtype(op, 'out', a.out, 'f32');
  checkElements(op, 'out', a.out, qElems);
  if (a.nwg > 1) {
    if (a.tmp === undefined) throw invalid(op, 'tmp', `a f32 buffer of flashAttnVecTmpElements = ${flashAttnVecTmpElements(a)} elements when nwg > 1`, 'none');
    checkDtype(op, 'tmp', a.tmp, 'f32');
    checkElements(op, 'tmp', a.tmp, flashAttnVecTmpElements(a));
  }
}

const ALIAS_WHY = 'the CUDA kernel takes q, k and v as __restrict__, and every threadgroup of a KV head reads all of k and v';

/** Throws MlxError('InvalidArgument') naming the argument unless params and buffers fit the kernels. */
export function validateFlashAttnVec(a: FlashAttnVecArgs, device?: Device): void {
  validateCommon(OP, a, device);
  checkPositive(OP, 'kvSeqLen', a.kvSeqLen);
  checkU32(OP, 'kvSeqLen', a.kvSeqLen);
  checkAtMost(OP, 'kvSeqLen', a.kvSeqLen, a.kvCapacity, 'kvCapacity');
  checkNoAliasing(OP, [['q', a.q], ['k', a.k], ['v', a.v], ['out', a.out], ['tmp', a.nwg > 1 ? a.tmp : undefined]], ['out', 'tmp'], ALIAS_WHY);
}

/** Throws MlxError('InvalidArgument') naming the argument unless params and buffers fit the varlen kernels. */
export function validateFlashAttnVecVarlen(a: FlashAttnVecVarlenArgs, device?: Device): void {
  validateCommon(OP_VARLEN, a, device);
  checkBoolean(OP_VARLEN, 'ring', a.ring, true);
  if (a.ring === true && a.mask === 'slidingWindow' && !((a.slidingWindow ?? 0) <= a.kvCapacity)) {
    throw invalid(OP_VARLEN, 'slidingWindow', `at most kvCapacity (${a.kvCapacity}) on a ring, which holds the last kvCapacity positions`, a.slidingWindow);
  }
  checkBuffer(OP_VARLEN, 'seqLens', a.seqLens, device);
  checkDtype(OP_VARLEN, 'seqLens', a.seqLens, 'u32');
  checkElements(OP_VARLEN, 'seqLens', a.seqLens, a.batch);
  checkNoAliasing(OP_VARLEN, [['q', a.q], ['k', a.k], ['v', a.v], ['seqLens', a.seqLens], ['out', a.out], ['tmp', a.nwg > 1 ? a.tmp : undefined]],
    ['out', 'tmp'], ALIAS_WHY);
}

/**
 * The CUDA launch of a main kernel. f16 / bf16 K/V: the tensor-core kernels,
 * grid (ceil(group / 8), nKvHeads, B * nwg) of 128 threads, each block the 8
 * query heads of a GQA group from blockIdx.x * 8 over one KV head and one
 * split, flashAttnVecCudaMmaSharedBytes(headDim) of shared memory. f32 K/V:
 * grid (flashAttnVecCudaHeadBlocks, nKvHeads, B * nwg), 128 threads,
 * FLASH_ATTN_VEC_CUDA_THREADGROUP_BYTES.
 */
function cudaMainLaunch(a: FlashAttnVecCommon, kv: FlashAttnVecKvDtype): Launch {
  const group = a.nHeads / a.nKvHeads;
  if (kv === 'f32') {
    return {
      threadgroupMemory: [FLASH_ATTN_VEC_CUDA_THREADGROUP_BYTES],
      grid: [flashAttnVecCudaHeadBlocks(a, 4), a.nKvHeads, a.batch * a.nwg],
      threads: [CUDA_WARPS * SIMD, 1, 1],
    };
  }
  return {
    threadgroupMemory: [flashAttnVecCudaMmaSharedBytes(a.headDim)],
    grid: [Math.ceil(group / FLASH_ATTN_VEC_CUDA_MMA_HEADS), a.nKvHeads, a.batch * a.nwg],
    threads: [CUDA_WARPS * SIMD, 1, 1],
  };
}

/** The main dispatch (kernel and bytes given), then the reduce when nwg > 1. */
function planMainAndReduce(a: FlashAttnVecCommon & FlashAttnVecBuffers, kernel: string, params: Uint8Array, extra: Buffer[]): OpPlan {
  const kv = a.k.dtype as FlashAttnVecKvDtype;
  const main: PlannedDispatch = {
    kernel,
    buffers: [, a.q, a.k, a.v, a.nwg === 1 ? a.out : a.tmp!, ...extra],
    bytes: [params],
    threadgroupMemory: [flashAttnVecThreadgroupBytes(a.headDim)],
    grid: [1, a.nHeads, a.batch * a.nwg],
    threads: [SIMD, 1, 1],
    cuda: cudaMainLaunch(a, kv),
  };
  const dispatches: PlannedDispatch[] = [main];
  if (a.nwg > 1) {
    dispatches.push({
      kernel: `flash_attn_vec_reduce_dk${a.headDim}`,
      buffers: [, a.tmp!, a.out],
      bytes: [packFlashAttnVecReduceParams(a), , , new Uint32Array([a.nwg])],
      grid: [a.batch * a.nHeads, 1, 1],
      threads: [SIMD * a.nwg, 1, 1],
    });
  }
  return planOf(...dispatches);
}

/**
 * out[b, h, :] = softmax_j(s_j) . V[b, kh, j, :] over the visible j < kvSeqLen,
 * s_j = scale * Q[b, h, :] . K[b, kh, j, :], capped as softcap * tanh(s_j / softcap)
 * when softcap > 0, kh = h / (nHeads / nKvHeads). The query sits at position
 * kvSeqLen - 1, so 'causal' sees every j < kvSeqLen (as 'none' does) and
 * 'slidingWindow' sees j >= kvSeqLen - slidingWindow.
 *
 * Layouts: q [B, nHeads, D] f32; k, v [B, nKvHeads, kvCapacity, D] f32, f16 or
 * bf16; out [B, nHeads, D] f32. D = headDim: 128, 256 or 512.
 *
 * Dispatches flash_attn_vec[_f16kv|_bf16kv]_dk<D> (mlx-native's names; bf16
 * and D 128 added in its pattern) with bindings 0 params
 * (FlashAttnVecParams), 1 q, 2 k, 3 v, 4 dst, threadgroup(0) flashAttnVecThreadgroupBytes (unused), grid
 * (1, nHeads, B * nwg), 32 threads. With nwg == 1 dst is out. With nwg > 1 dst
 * is tmp (partials [B * nHeads, D / 4, nwg] float4, then (S, M) pairs
 * [B * nHeads, nwg, 2]), and flash_attn_vec_reduce_dk<D> follows after a
 * barrier (the encoder's): bindings 0 FlashAttnVecReduceParams, 1 tmp, 2 out, 3 nwg (u32),
 * grid (B * nHeads, 1, 1), 32 * nwg threads.
 * On cuda the main kernel reads each K/V row once per block of GQA query
 * heads (cudaMainLaunch: f16 / bf16 K/V on tensor cores, f32 on FFMA); tmp
 * and the reduce as above. The tensor-core kernels round the query and the
 * softmax weights to the K/V type in two terms (hi + lo: about 2^-22 of them
 * kept with f16, 2^-18 with bf16), so with f16 K/V the query must lie within
 * f16's range (|q| < 65504) there.
 */
export function flashAttnVec(enc: Encoder, args: FlashAttnVecArgs): void {
  record(enc, planFlashAttnVec(args, enc.device.limits, enc.device));
}

/** flashAttnVec's plan: the main kernel, then (nwg > 1) the reduce, which reads what main wrote to tmp. */
export function planFlashAttnVec(args: FlashAttnVecArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateFlashAttnVec(args, device);
  const kernel = `flash_attn_vec_${KV_TAG[args.k.dtype as FlashAttnVecKvDtype]}dk${args.headDim}`;
  return planMainAndReduce(args, kernel, packFlashAttnVecParams(args), []);
}

/**
 * Decode attention over a batch of sequences of their own lengths, as
 * flashAttnVec with kvSeqLen = seqLens[b] per sequence, over global caches or
 * the rings of a sliding-window layer. Sequence b has written len =
 * seqLens[b] positions (its query sits at len - 1); the visible positions j
 * lie in [lo, hi):
 * - a global cache (ring absent or false): slot j holds position j;
 *   hi = min(len, kvCapacity), lo = 0;
 * - a ring (ring: true): slot j % kvCapacity holds position j, the last
 *   kvCapacity positions are kept (kvCacheCopySeq with ring: true writes them);
 *   hi = len, lo = max(0, len - kvCapacity);
 * - 'slidingWindow' raises lo to len - slidingWindow (on a ring slidingWindow
 *   <= kvCapacity; a ring of capacity = window needs no mask at all).
 * A sequence of length 0 gives zeros. Each sequence's visible keys are split
 * into nwg contiguous shares (blocks of 32 keys on Metal, tiles of 16 on CUDA),
 * so a short sequence leaves later splits empty (their partials weigh 0).
 *
 * Layouts as flashAttnVec; seqLens [B] u32.
 * Dispatches flash_attn_vec_varlen[_f16kv|_bf16kv]_dk<D> (not in mlx-native;
 * its main kernel's bindings with FlashAttnVecVarlenParams at 0 and seqLens
 * at 5), grid, threads and threadgroup memory as flashAttnVec's main kernel,
 * then flash_attn_vec_reduce_dk<D> when nwg > 1, as flashAttnVec.
 */
export function flashAttnVecVarlen(enc: Encoder, args: FlashAttnVecVarlenArgs): void {
  record(enc, planFlashAttnVecVarlen(args, enc.device.limits, enc.device));
}

/** flashAttnVecVarlen's plan: the varlen main kernel, then (nwg > 1) the reduce. */
export function planFlashAttnVecVarlen(args: FlashAttnVecVarlenArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateFlashAttnVecVarlen(args, device);
  const kernel = `flash_attn_vec_varlen_${KV_TAG[args.k.dtype as FlashAttnVecKvDtype]}dk${args.headDim}`;
  return planMainAndReduce(args, kernel, packFlashAttnVecVarlenParams(args), [args.seqLens]);
}

// ---- the float64 reference ----

// CPU reference of split-KV decode attention (flash_attn_vec and its varlen
// form): plain loops, float64. The split over workgroups does not change the
// math, so the reference is one softmax over the visible keys.

export type FlashAttnVecRefMask = FlashAttnVecMask;

/** What both forms share: the ops' sizes and scores, with slidingWindow and softcap given. */
export interface FlashAttnVecRefCommon extends Pick<FlashAttnVecCommon, 'batch' | 'nHeads' | 'nKvHeads' | 'headDim' | 'kvCapacity' | 'scale' | 'mask'> {
  /** Visible keys under 'slidingWindow'; 0 leaves every key visible. */
  slidingWindow: number;
  /** Logit softcap; 0 disables. */
  softcap: number;
}

export interface FlashAttnVecRefShape extends FlashAttnVecRefCommon {
  kvSeqLen: number;
}

export interface FlashAttnVecVarlenRefShape extends FlashAttnVecRefCommon {
  /** Positions written to each sequence's cache (batch of them). */
  seqLens: ArrayLike<number>;
  /** Slot j % kvCapacity holds position j (the last kvCapacity positions are kept); else slot j holds position j. */
  ring: boolean;
}

/**
 * The visible positions [lo, hi) of a sequence of len positions, and the slot
 * of position j: a global cache keeps positions below kvCapacity in their own
 * slots; a ring keeps the last kvCapacity positions, j in slot j % kvCapacity;
 * a sliding window keeps the last slidingWindow positions of those.
 */
export function flashAttnVecSpan(len: number, kvCapacity: number, ring: boolean, mask: FlashAttnVecRefMask, slidingWindow: number):
  { lo: number; hi: number; slot: (j: number) => number } {
  const hi = ring ? len : Math.min(len, kvCapacity);
  let lo = ring ? Math.max(0, len - kvCapacity) : 0;
  if (mask === 'slidingWindow' && slidingWindow > 0) lo = Math.max(lo, len - slidingWindow);
  return { lo, hi, slot: ring ? (j) => j % kvCapacity : (j) => j };
}

/** Attention of every head of sequence b over its visible keys, written into out. */
function attendSequence(s: FlashAttnVecRefCommon, b: number, span: ReturnType<typeof flashAttnVecSpan>,
  q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>, out: Float64Array): void {
  const D = s.headDim;
  const group = s.nHeads / s.nKvHeads;
  const n = Math.max(0, span.hi - span.lo);
  const scores = new Float64Array(n);
  for (let h = 0; h < s.nHeads; h++) {
    const qOff = (b * s.nHeads + h) * D;
    const kvOff = (b * s.nKvHeads + Math.floor(h / group)) * s.kvCapacity * D;
    let max = -Infinity;
    for (let i = 0; i < n; i++) {
      const row = kvOff + span.slot(span.lo + i) * D;
      let dot = 0;
      for (let d = 0; d < D; d++) dot += q[qOff + d]! * k[row + d]!;
      let x = s.scale * dot;
      if (s.softcap > 0) x = s.softcap * Math.tanh(x / s.softcap);
      scores[i] = x;
      if (x > max) max = x;
    }
    let sum = 0;
    for (let i = 0; i < n; i++) {
      scores[i] = Math.exp(scores[i]! - max);
      sum += scores[i]!;
    }
    for (let i = 0; i < n; i++) {
      const p = scores[i]! / sum;
      const row = kvOff + span.slot(span.lo + i) * D;
      for (let d = 0; d < D; d++) out[qOff + d] = out[qOff + d]! + p * v[row + d]!;
    }
  }
}

/**
 * out[b, h, :] = sum_j p_j * v[b, kh, j, :] with kh = h / (nHeads / nKvHeads),
 * p = softmax over the visible j of s_j = scale * q[b, h, :] . k[b, kh, j, :],
 * capped as softcap * tanh(s_j / softcap) when softcap > 0. The query sits at
 * position kvSeqLen - 1: causal sees every j < kvSeqLen, a sliding window sees
 * j >= kvSeqLen - slidingWindow.
 * q [B, nHeads, D]; k, v [B, nKvHeads, kvCapacity, D] (f16 / bf16 values already decoded);
 * returns [B, nHeads, D].
 */
export function flashAttnVecRef(
  s: FlashAttnVecRefShape, q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>,
): Float64Array {
  const out = new Float64Array(s.batch * s.nHeads * s.headDim);
  for (let b = 0; b < s.batch; b++) {
    attendSequence(s, b, flashAttnVecSpan(s.kvSeqLen, s.kvCapacity, false, s.mask, s.slidingWindow), q, k, v, out);
  }
  return out;
}

/**
 * flashAttnVecRef with sequence b of seqLens[b] positions, over a global
 * cache or a ring (flashAttnVecSpan); a sequence of length 0 gives zeros.
 * Layouts as flashAttnVecRef.
 */
export function flashAttnVecVarlenRef(
  s: FlashAttnVecVarlenRefShape, q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>,
): Float64Array {
  const out = new Float64Array(s.batch * s.nHeads * s.headDim);
  for (let b = 0; b < s.batch; b++) {
    attendSequence(s, b, flashAttnVecSpan(s.seqLens[b]!, s.kvCapacity, s.ring, s.mask, s.slidingWindow), q, k, v, out);
  }
  return out;
}
