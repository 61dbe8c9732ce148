// flash_attn_prefill: attention over a prompt (prefill) on matrix units,
// tiled with an online softmax. Kernel names, bindings, param structs,
// function constants and the crate's validation rules are mlx-native's
// (src/ops/flash_attn_prefill.rs, flash_attn_prefill_d512.rs,
// flash_attn_prefill_mask.rs, flash_attn_prefill_blk.rs: one family here).
// Added in the crate's style: head dim 128, the logit softcap (function
// constant 304, the value in the crate's softcapping field), a sliding
// window (in the 4 bytes of padding of AttnParams), several sequences in
// one call (function constant 305: cu_seqlens at buffers 8 and 9), and f16
// twins of the mask builder and the tile classifier. Kernels:
// shaders/flash_attn_prefill.metal and shaders/cuda/flash_attn_prefill.cu.

import src from '../../shaders/flash_attn_prefill.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/flash_attn_prefill.cu' with { type: 'text' };
import header from '../../shaders/flash_attn_prefill.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder, TensorMapBinding } from '../encoder.ts';
import type { FunctionConstants } from '../library.ts';
import { ceilDiv, nextPow2 } from '../launch.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familyPlans, record, type Launch, type OpPlan } from '../plan.ts';
import { familySources } from '../registry.ts';
import {
  checkAtLeast, checkAtMost, checkBoolean, checkBuffer, checkBufferRules, checkDtype, checkedProduct, checkGridDim, checkMultiple, checkNoAliasing, checkPositive,
  I32_MAX, invalid, like, U32_MAX,
} from '../validate.ts';

export const FLASH_ATTN_PREFILL_FAMILY = 'flash_attn_prefill';
/**
 * The CUDA program's parts 1 to 6 (FamilySources.cudaParts): the attention
 * entries of one head dim and input type, D 128 and up, each 1.8-2.8 s of
 * NVRTC 13.0 on one thread (the whole family took 17.1 s, again for every
 * set of function constants): a model's prefill compiles the one or two it
 * uses. D 64 and the mask builders are part 0 (1.9 s).
 */
export const FLASH_ATTN_PREFILL_CUDA_PARTS: readonly (readonly string[])[] = [
  ['flash_attn_prefill_bf16_d128', 'flash_attn_prefill_bf16_d128_boolmask'],
  ['flash_attn_prefill_f16_d128', 'flash_attn_prefill_f16_d128_boolmask'],
  ['flash_attn_prefill_bf16_d256', 'flash_attn_prefill_bf16_d256_boolmask'],
  ['flash_attn_prefill_f16_d256', 'flash_attn_prefill_f16_d256_boolmask'],
  ['flash_attn_prefill_bf16_d512', 'flash_attn_prefill_bf16_d512_boolmask', 'flash_attn_prefill_llamacpp_bf16_d512', 'flash_attn_prefill_llamacpp_bf16_d512_boolmask'],
  ['flash_attn_prefill_f16_d512', 'flash_attn_prefill_f16_d512_boolmask', 'flash_attn_prefill_llamacpp_f16_d512', 'flash_attn_prefill_llamacpp_f16_d512_boolmask'],
];
/** The family's kernel sources by backend, as registered by every dispatch. */
export const FLASH_ATTN_PREFILL_SOURCES = familySources(FLASH_ATTN_PREFILL_FAMILY, {
  header, metal: src, cuda: cudaSrc, cudaParts: FLASH_ATTN_PREFILL_CUDA_PARTS,
});

const HEAD_DIMS = [64, 128, 256, 512] as const;
export type FlashAttnPrefillHeadDim = (typeof HEAD_DIMS)[number];
export type FlashAttnPrefillDType = 'bf16' | 'f16';
const DTYPES: readonly FlashAttnPrefillDType[] = ['bf16', 'f16'];

export const FLASH_ATTN_PREFILL_KERNELS = [
  'flash_attn_prefill_bf16_d64', 'flash_attn_prefill_bf16_d64_boolmask', 'flash_attn_prefill_f16_d64', 'flash_attn_prefill_f16_d64_boolmask',
  'flash_attn_prefill_bf16_d128', 'flash_attn_prefill_bf16_d128_boolmask', 'flash_attn_prefill_f16_d128', 'flash_attn_prefill_f16_d128_boolmask',
  'flash_attn_prefill_bf16_d256', 'flash_attn_prefill_bf16_d256_boolmask', 'flash_attn_prefill_f16_d256', 'flash_attn_prefill_f16_d256_boolmask',
  'flash_attn_prefill_bf16_d512', 'flash_attn_prefill_bf16_d512_boolmask', 'flash_attn_prefill_f16_d512', 'flash_attn_prefill_f16_d512_boolmask',
  'flash_attn_prefill_llamacpp_bf16_d512', 'flash_attn_prefill_llamacpp_bf16_d512_boolmask',
  'flash_attn_prefill_llamacpp_f16_d512', 'flash_attn_prefill_llamacpp_f16_d512_boolmask',
  'flash_attn_prefill_mask_fill_bf16', 'flash_attn_prefill_mask_fill_f16',
  'flash_attn_prefill_blk_bf16', 'flash_attn_prefill_blk_f16',
] as const;
const planOf = familyPlans({ family: FLASH_ATTN_PREFILL_FAMILY, sources: FLASH_ATTN_PREFILL_SOURCES, kernels: FLASH_ATTN_PREFILL_KERNELS });

/** struct AttnParams (buffer 4 of the attention entries; 160 bytes). */
export const ATTN_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'AttnParams');
/** struct AttnMaskParams (buffer 5 with has_mask; 24 bytes). */
export const ATTN_MASK_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'AttnMaskParams');
/** struct FlashAttnPrefillMaskParams (buffer 1 of the mask builders; 16 bytes). */
export const FLASH_ATTN_PREFILL_MASK_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FlashAttnPrefillMaskParams');
/** struct FlashAttnPrefillBlkParams (buffer 2 of the tile classifiers; 16 bytes). */
export const FLASH_ATTN_PREFILL_BLK_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'FlashAttnPrefillBlkParams');

/**
 * The function constants: mlx-native's (align_Q 200 and align_K 201, which
 * the kernels here do not need; has_mask 300, do_causal 301, has_blk 303;
 * the llamacpp entries' nsg 322, read from the threadgroup instead; the tile
 * classifier's BQ 400 and BK 401) and the two added (has_softcap 304,
 * has_seqlens 305).
 */
export const FLASH_ATTN_PREFILL_FC = {
  alignQ: 200, alignK: 201, hasMask: 300, doCausal: 301, hasBlk: 303, hasSoftcap: 304, hasSeqlens: 305, nsg: 322, blkBq: 400, blkBk: 401,
} as const;

/** threadgroup(0) of the llamacpp entries: the crate's 28672 bytes (qs [8][512], kvs [16][512], ss [8][8][16] f32). */
export const FLASH_ATTN_PREFILL_LLAMACPP_SHARED_BYTES = 28672;



/** The kernel shape an argument set runs on Metal: which entries, their tiles and the blk tile they read. */
export interface FlashAttnPrefillTile {
  /** The llamacpp entry (D = 512 after llama.cpp) or the tile entries. */
  llamacpp: boolean;
  /** Query rows per threadgroup. */
  bq: number;
  /** The crate's key tile: NK, NK_aligned, kL_rem of the params and the blk tile's columns. */
  bk: number;
  /** Simdgroups per threadgroup. */
  nsg: number;
}

/**
 * The entry geometry (the crate's): BQ 32, BK 16 and 4 simdgroups for head
 * dims 64, 128 and 256; BQ 8, BK 8, 1 simdgroup for the d512 tile entries;
 * the llamacpp entries 8 rows, blk tiles of 64 keys, 4 or 8 simdgroups.
 */
export function flashAttnPrefillTile(headDim: number, d512Kernel: 'llamacpp' | 'tiles' = 'llamacpp', nsg: 4 | 8 = 8): FlashAttnPrefillTile {
  if (headDim === 512) return d512Kernel === 'llamacpp' ? { llamacpp: true, bq: 8, bk: 64, nsg } : { llamacpp: false, bq: 8, bk: 8, nsg: 1 };
  return { llamacpp: false, bq: 32, bk: 16, nsg: 4 };
}

/**
 * The CUDA twin's tile (shaders/cuda/flash_attn_prefill.cu): bq query rows
 * a block, bk keys a step. On GPUs other than Hopper (mma.sync, K and V
 * tiles staged by cp.async with rows padded by 16 bytes): D 64 and 128: 4
 * warps of 32 rows; D 256: 4 warps of 16; D 512: 8 warps, two per 16 rows,
 * each holding half of the output columns (both compute the rows' scores).
 * On Hopper (flashAttnPrefillUsesWgmma: D 128 and 256 on compute capability
 * 9.0), FlashAttention-3's structure on wgmma: two warpgroups of 64 rows,
 * 128 (D 128) or 64 (D 256) keys a step, Q and two stages of K and V in
 * 128-byte swizzled rows plus 1024 bytes to align them
 * (flashAttnPrefillHopperBytes); 256 threads at D 128, 384 at D 256, where a
 * producer warpgroup copies K and V by TMA (the plan's tensor maps).
 */
export function flashAttnPrefillCudaTile(headDim: number, limits?: Pick<DeviceLimits, 'computeCapability' | 'maxThreadgroupMemory'>): { bq: number; bk: number; threads: number; sharedBytes: number } {
  if (limits !== undefined && flashAttnPrefillUsesWgmma(headDim, limits)) {
    return { bq: 128, bk: headDim === 128 ? 128 : 64, threads: headDim === 128 ? 256 : 384, sharedBytes: flashAttnPrefillHopperBytes(headDim) };
  }
  const [bq, bk, threads] = headDim <= 128 ? [128, 64, 128] : headDim === 256 ? [64, 64, 128] : [64, 32, 256];
  return { bq, bk, threads, sharedBytes: (bq + 2 * bk) * (headDim + 8) * 2 };
}

/** Dynamic shared memory of the Hopper launch (WG_SMEM of the .cu): 128 + 4 bk rows of D 16-bit values, 1024 to align them (164864 bytes at D 128, 197632 at D 256). */
export function flashAttnPrefillHopperBytes(headDim: number): number {
  return (128 + 4 * (headDim === 128 ? 128 : 64)) * headDim * 2 + 1024;
}

/** Static shared memory the Hopper launch's entries may hold besides flashAttnPrefillHopperBytes: D 256's mbarriers (80 bytes in the sm_90a build), with room to spare. */
export const FLASH_ATTN_PREFILL_HOPPER_STATIC_BYTES = 128;

/** Whether a head dim takes the Hopper launch: D 128 or 256 on compute capability 9.0 (sm_90a's wgmma) with room for its stages and mbarriers. */
export function flashAttnPrefillUsesWgmma(headDim: number, limits: Pick<DeviceLimits, 'computeCapability' | 'maxThreadgroupMemory'>): boolean {
  return limits.computeCapability === 90 && (headDim === 128 || headDim === 256) &&
    flashAttnPrefillHopperBytes(headDim) + FLASH_ATTN_PREFILL_HOPPER_STATIC_BYTES <= limits.maxThreadgroupMemory;
}

export type FlashAttnPrefillLayout = 'headMajor' | 'seqMajor';

export interface FlashAttnPrefillArgs {
  /** Queries: headMajor [batch, nHeads, seqLenQ, headDim], seqMajor [batch, seqLenQ, nHeads, headDim]; with cuSeqlens [seqLenQ, nHeads, headDim]. bf16 or f16. */
  q: Buffer;
  /** Keys: headMajor [batch, nKvHeads, kvCapacity, headDim], seqMajor [batch, kvCapacity, nKvHeads, headDim]; with cuSeqlens [seqLenK, nKvHeads, headDim]. q's dtype. */
  k: Buffer;
  /** Values, as k. */
  v: Buffer;
  /** Output, as q. */
  out: Buffer;
  /** Sequences (B); with cuSeqlens, the sequences they delimit. */
  batch: number;
  nHeads: number;
  /** KV heads, dividing nHeads (GQA: query head h reads KV head h / (nHeads / nKvHeads)). */
  nKvHeads: number;
  /** 64, 128, 256 or 512. */
  headDim: number;
  /** Query rows per sequence; with cuSeqlens, the rows of q in all sequences. */
  seqLenQ: number;
  /** Keys each query row may see (the valid rows of k); with cuSeqlens, the rows of k in all sequences. */
  seqLenK: number;
  /** Rows of the key axis of k and v (a KV slot's capacity); seqLenK when absent. */
  kvCapacity?: number;
  /** Multiplies q . k; 1 / sqrt(headDim) when absent. */
  scale?: number;
  /** Query row i (absolute position qOffset + i) sees keys j <= qOffset + i. */
  causal?: boolean;
  /** Absolute position of query row 0 among the keys (prefill after earlier turns); 0 when absent. */
  qOffset?: number;
  /** The query at absolute position p sees only keys j with p - j < slidingWindow. */
  slidingWindow?: number;
  /** Logit softcap: s = softcap * tanh(s / softcap) after the scale. */
  softcap?: number;
  /**
   * An additive mask (q's dtype, added to the scaled scores; -inf hides) or
   * a bool one (u8, 0 hides): shape [seqLenQ, seqLenK] shared by every batch
   * and head when the buffer's shape has two dimensions, else [batch,
   * nHeads, seqLenQ, seqLenK].
   */
  mask?: Buffer;
  /** Tile classes of the (additive) mask from flashAttnPrefillBlk at flashAttnPrefillBlkTile's tile. */
  blk?: Buffer;
  /** headMajor (the default) or seqMajor (token-major, the layout of projections). */
  layout?: FlashAttnPrefillLayout;
  /** Several sequences in one call: u32 or i32 [batch + 1] offsets of each sequence's rows of q, and of k and v (packed, token-major). */
  cuSeqlensQ?: Buffer;
  cuSeqlensK?: Buffer;
  /** With cuSeqlens: at least the longest sequence's query rows (the grid); seqLenQ when absent. */
  maxSeqLenQ?: number;
  /** Head dim 512: the llamacpp entries (the default) or the tile entries. */
  d512Kernel?: 'llamacpp' | 'tiles';
  /** Simdgroups of the llamacpp entries: 4 or 8 (the default). */
  nsg?: 4 | 8;
}

/** A [B, H, L, D] (headMajor) or [B, L, H, D] (seqMajor) tensor's strides in elements: batch, head, row. */
function strides(layout: FlashAttnPrefillLayout, heads: number, rows: number, d: number): [number, number, number] {
  return layout === 'headMajor' ? [heads * rows * d, rows * d, d] : [rows * heads * d, d, heads * d];
}

/** Everything the plan derives from validated arguments. */
interface Shape {
  /** Elements of k (and of v) the op reads from. */
  kvElems: number;
  dt: FlashAttnPrefillDType;
  layout: FlashAttnPrefillLayout;
  varlen: boolean;
  capacity: number;
  gridRows: number;
  tile: FlashAttnPrefillTile;
  boolMask: boolean;
  maskBroadcast: boolean;
}

function checkOptionalInt(op: string, arg: string, value: unknown, min: number, max: number, maxName: string): void {
  if (value === undefined) return;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw invalid(op, arg, min === 0 ? 'an integer >= 0 or absent' : 'a positive integer or absent', value);
  }
  checkAtMost(op, arg, value, max, maxName);
}

function shapeOf(a: FlashAttnPrefillArgs, device?: Device): Shape {
  const op = 'flash_attn_prefill';
  for (const arg of ['batch', 'nHeads', 'nKvHeads', 'headDim', 'seqLenQ', 'seqLenK'] as const) {
    checkPositive(op, arg, a[arg]);
    checkAtMost(op, arg, a[arg], I32_MAX, '2^31 - 1');
  }
  if (!(HEAD_DIMS as readonly number[]).includes(a.headDim)) throw invalid(op, 'headDim', '64, 128, 256 or 512', a.headDim);
  checkMultiple(op, 'nHeads', a.nHeads, a.nKvHeads, 'nKvHeads');
  checkGridDim(op, 'nHeads', a.nHeads);
  checkGridDim(op, 'batch', a.batch);
  checkOptionalInt(op, 'kvCapacity', a.kvCapacity, 1, I32_MAX, '2^31 - 1');
  checkOptionalInt(op, 'qOffset', a.qOffset, 0, I32_MAX, '2^31 - 1');
  checkOptionalInt(op, 'slidingWindow', a.slidingWindow, 1, I32_MAX, '2^31 - 1');
  checkOptionalInt(op, 'maxSeqLenQ', a.maxSeqLenQ, 1, I32_MAX, '2^31 - 1');
  if (a.scale !== undefined && (typeof a.scale !== 'number' || !Number.isFinite(a.scale))) throw invalid(op, 'scale', 'a finite number or absent', a.scale);
  if (a.softcap !== undefined && (typeof a.softcap !== 'number' || !Number.isFinite(a.softcap) || a.softcap <= 0)) {
    throw invalid(op, 'softcap', 'a finite number > 0 or absent', a.softcap);
  }
  checkBoolean(op, 'causal', a.causal, true);
  if (a.layout !== undefined && a.layout !== 'headMajor' && a.layout !== 'seqMajor') throw invalid(op, 'layout', "'headMajor', 'seqMajor' or absent", a.layout);
  if (a.d512Kernel !== undefined && a.d512Kernel !== 'llamacpp' && a.d512Kernel !== 'tiles') {
    throw invalid(op, 'd512Kernel', "'llamacpp', 'tiles' or absent", a.d512Kernel);
  }
  if (a.nsg !== undefined && a.nsg !== 4 && a.nsg !== 8) throw invalid(op, 'nsg', '4, 8 or absent', a.nsg);
  const capacity = a.kvCapacity ?? a.seqLenK;
  checkAtMost(op, 'seqLenK', a.seqLenK, capacity, 'kvCapacity');
  const qOffset = a.qOffset ?? 0;
  if (qOffset > 0) checkAtMost(op, 'qOffset + seqLenQ', qOffset + a.seqLenQ, a.seqLenK, 'seqLenK');

  const varlen = a.cuSeqlensQ !== undefined || a.cuSeqlensK !== undefined;
  if (varlen) {
    if (a.cuSeqlensQ === undefined) throw invalid(op, 'cuSeqlensQ', 'a Buffer when cuSeqlensK is given', 'none');
    if (a.cuSeqlensK === undefined) throw invalid(op, 'cuSeqlensK', 'a Buffer when cuSeqlensQ is given', 'none');
    if (a.layout === 'headMajor') throw invalid(op, 'layout', "'seqMajor' or absent with cuSeqlens (packed token-major rows)", a.layout);
    if (a.kvCapacity !== undefined && a.kvCapacity !== a.seqLenK) throw invalid(op, 'kvCapacity', 'seqLenK or absent with cuSeqlens', a.kvCapacity);
    if (qOffset > 0) throw invalid(op, 'qOffset', '0 or absent with cuSeqlens (each sequence\'s queries are its last keys)', qOffset);
    if (a.mask !== undefined) throw invalid(op, 'mask', 'absent with cuSeqlens', a.mask);
  } else if (a.maxSeqLenQ !== undefined) {
    throw invalid(op, 'maxSeqLenQ', 'absent without cuSeqlens', a.maxSeqLenQ);
  }
  if (a.maxSeqLenQ !== undefined) checkAtMost(op, 'maxSeqLenQ', a.maxSeqLenQ, a.seqLenQ, 'seqLenQ');
  if (a.blk !== undefined && a.mask === undefined) throw invalid(op, 'blk', 'absent without a mask (it classifies the mask\'s tiles)', a.blk);
  if ((a.d512Kernel !== undefined || a.nsg !== undefined) && a.headDim !== 512) {
    throw invalid(op, a.d512Kernel !== undefined ? 'd512Kernel' : 'nsg', 'absent unless headDim is 512', a.d512Kernel ?? a.nsg);
  }
  if (a.nsg !== undefined && a.d512Kernel === 'tiles') throw invalid(op, 'nsg', "absent with d512Kernel 'tiles'", a.nsg);
  const layout: FlashAttnPrefillLayout = varlen ? 'seqMajor' : (a.layout ?? 'headMajor');
  const tile = flashAttnPrefillTile(a.headDim, a.d512Kernel, a.nsg);
  const gridRows = varlen ? (a.maxSeqLenQ ?? a.seqLenQ) : a.seqLenQ;

  const qElems = checkedProduct(op, 'q elements', varlen ? 1 : a.batch, a.nHeads, a.seqLenQ, a.headDim);
  const kvElems = checkedProduct(op, 'k elements', varlen ? 1 : a.batch, a.nKvHeads, capacity, a.headDim);
  // mlx-native's buffer-size rule: at least the elements (a larger buffer's first elements are used).
  checkBufferRules(op, [
    ['q', a.q, DTYPES, qElems], ['k', a.k, like('q'), kvElems], ['v', a.v, like('q'), kvElems], ['out', a.out, like('q'), qElems],
  ], device, true);
  const dt = a.q.dtype as FlashAttnPrefillDType;
  let boolMask = false;
  let maskBroadcast = false;
  if (a.mask !== undefined) {
    checkBuffer(op, 'mask', a.mask, device);
    checkDtype(op, 'mask', a.mask, [dt, 'u8']);
    boolMask = a.mask.dtype === 'u8';
    maskBroadcast = a.mask.shape.length === 2;
    checkAtLeast(op, 'mask', a.mask, maskBroadcast
      ? checkedProduct(op, 'mask elements', a.seqLenQ, a.seqLenK)
      : checkedProduct(op, 'mask elements', a.batch, a.nHeads, a.seqLenQ, a.seqLenK));
  }
  if (a.blk !== undefined) {
    checkBuffer(op, 'blk', a.blk, device);
    if (boolMask) throw invalid(op, 'blk', 'absent with a bool mask (it classifies an additive mask)', a.blk);
    checkDtype(op, 'blk', a.blk, 'u8');
    checkAtLeast(op, 'blk', a.blk, checkedProduct(op, 'blk elements', ceilDiv(a.seqLenQ, tile.bq), ceilDiv(a.seqLenK, tile.bk)));
  }
  if (varlen) {
    checkBufferRules(op, [['cuSeqlensQ', a.cuSeqlensQ, ['u32', 'i32'], a.batch + 1], ['cuSeqlensK', a.cuSeqlensK, ['u32', 'i32'], a.batch + 1]],
      device, true);
  }
  checkNoAliasing(op, [['q', a.q], ['k', a.k], ['v', a.v], ['out', a.out], ['mask', a.mask], ['blk', a.blk],
    ['cuSeqlensQ', a.cuSeqlensQ], ['cuSeqlensK', a.cuSeqlensK]], ['out'],
  'every output row reads rows of q, k and v that other rows read too');
  return { dt, layout, varlen, capacity, gridRows, tile, boolMask, maskBroadcast, kvElems };
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateFlashAttnPrefill(a: FlashAttnPrefillArgs, device?: Device): void {
  shapeOf(a, device);
}

/** The entry an argument set runs. */
export function flashAttnPrefillKernel(dt: FlashAttnPrefillDType, headDim: number, boolMask: boolean, llamacpp: boolean): string {
  const base = llamacpp ? `flash_attn_prefill_llamacpp_${dt}_d512` : `flash_attn_prefill_${dt}_d${headDim}`;
  return boolMask ? `${base}_boolmask` : base;
}

/** The AttnParams bytes the crate's host code writes for the same shape, with the added window. */
export function packAttnParams(p: {
  batch: number; nHeads: number; nKvHeads: number; headDim: number; seqLenQ: number; seqLenK: number; gridRows?: number;
  scale: number; softcap?: number; qOffset?: number; slidingWindow?: number; bq: number; bk: number;
  q: readonly [number, number, number]; k: readonly [number, number, number]; v: readonly [number, number, number];
  o: readonly [number, number, number];
}): Uint8Array {
  const rows = p.gridRows ?? p.seqLenQ;
  return packFields(ATTN_PARAMS_LAYOUT, {
    B: p.batch, H: p.nHeads, D: p.headDim, qL: p.seqLenQ, kL: p.seqLenK, gqa_factor: p.nHeads / p.nKvHeads,
    scale: p.scale, softcapping: p.softcap ?? 1.0,
    NQ: ceilDiv(rows, p.bq), NK: ceilDiv(p.seqLenK, p.bk), NQ_aligned: Math.floor(p.seqLenQ / p.bq),
    NK_aligned: Math.floor(p.seqLenK / p.bk), qL_rem: p.seqLenQ % p.bq, kL_rem: p.seqLenK % p.bk,
    qL_off: p.qOffset ?? 0, window: p.slidingWindow ?? 0,
    Q_stride_b: p.q[0], Q_stride_h: p.q[1], Q_stride_l: p.q[2],
    K_stride_b: p.k[0], K_stride_h: p.k[1], K_stride_l: p.k[2],
    V_stride_b: p.v[0], V_stride_h: p.v[1], V_stride_l: p.v[2],
    O_stride_b: p.o[0], O_stride_h: p.o[1], O_stride_l: p.o[2],
  });
}

export function packAttnMaskParams(s: readonly [number, number, number]): Uint8Array {
  return packFields(ATTN_MASK_PARAMS_LAYOUT, { M_stride_b: s[0], M_stride_h: s[1], M_stride_q: s[2] });
}

/**
 * flash_attn_prefill: out[b, h, i, :] = sum_j p_ij v[b, h / g, j, :], p_i =
 * softmax_j(s_ij), s_ij = scale * q[b, h, i, :] . k[b, h / g, j, :] (g =
 * nHeads / nKvHeads), then capped as softcap * tanh(s / softcap), plus an
 * additive mask (a bool mask's 0 hides j); causal hides keys j > qOffset + i,
 * slidingWindow hides keys j <= qOffset + i - slidingWindow. A row that sees
 * no key is 0. Scores, sums and P V in f32; out rounded once.
 *
 * Several sequences (cuSeqlensQ, cuSeqlensK, u32 [batch + 1]): sequence z
 * has query rows cuSeqlensQ[z] .. cuSeqlensQ[z + 1] - 1 of q and out and key
 * rows cuSeqlensK[z] .. cuSeqlensK[z + 1] - 1 of k and v (token-major,
 * packed), its queries being its last keys (qOffset = its key count minus
 * its query count, so a sequence may continue earlier turns); offsets are
 * clamped to seqLenQ and seqLenK, and rows past maxSeqLenQ are not computed.
 *
 * Rules: mlx-native's (positive sizes, nHeads a multiple of nKvHeads, each
 * buffer at least its elements, a blk only with a mask, qOffset + seqLenQ
 * <= seqLenK <= kvCapacity, nsg 4 or 8) and the int fields' bounds.
 * Kernels: flash_attn_prefill_<dt>_d<headDim>[_boolmask], or for head dim
 * 512 flash_attn_prefill_llamacpp_<dt>_d512[_boolmask] (the default) with
 * function constants has_mask (300), do_causal (301), has_blk (303),
 * has_softcap (304), has_seqlens (305).
 * Bindings: 0 q, 1 k, 2 v, 3 out, 4 AttnParams (strides of the layout), 5
 * AttnMaskParams, 6 mask, 7 blk, 8 cuSeqlensQ, 9 cuSeqlensK. Every index is
 * bound (q in place of an absent buffer, zero mask params): Metal ignores
 * what the function constants leave out, and the CUDA twin takes one pointer
 * per binding, and its own 10 and 11: K's and V's tensor maps on D 256's
 * Hopper launch (rows of K_stride_l elements, boxes of 64 x 64, 128-byte
 * swizzle), q in their place on the other launches.
 * Grid (Metal): (ceil(seqLenQ / BQ), nHeads, batch) threadgroups of
 * (32, NSG, 1) at flashAttnPrefillTile; the llamacpp entries take
 * threadgroup(0) 28672 bytes. CUDA: (ceil(seqLenQ / bq), nHeads, batch)
 * blocks at flashAttnPrefillCudaTile of the device's limits (rows =
 * maxSeqLenQ with cuSeqlens): on Hopper, D 128 and 256 take the wgmma path.
 */
export function flashAttnPrefill(enc: Encoder, args: FlashAttnPrefillArgs): void {
  record(enc, planFlashAttnPrefill(args, enc.device.limits, enc.device));
}

/** flashAttnPrefill's plan: validates, then one dispatch (see flashAttnPrefill). */
export function planFlashAttnPrefill(a: FlashAttnPrefillArgs, limits: DeviceLimits, device?: Device): OpPlan {
  const s = shapeOf(a, device);
  const d = a.headDim;
  const qs = s.varlen ? [0, d, a.nHeads * d] as const : strides(s.layout, a.nHeads, a.seqLenQ, d);
  const ks = s.varlen ? [0, d, a.nKvHeads * d] as const : strides(s.layout, a.nKvHeads, s.capacity, d);
  const params = packAttnParams({
    batch: a.batch, nHeads: a.nHeads, nKvHeads: a.nKvHeads, headDim: d, seqLenQ: a.seqLenQ, seqLenK: a.seqLenK,
    gridRows: s.gridRows, scale: a.scale ?? 1 / Math.sqrt(d), softcap: a.softcap, qOffset: a.qOffset,
    slidingWindow: a.slidingWindow, bq: s.tile.bq, bk: s.tile.bk, q: qs, k: ks, v: ks, o: qs,
  });
  const maskStrides: [number, number, number] = s.maskBroadcast ? [0, 0, a.seqLenK] : [a.nHeads * a.seqLenQ * a.seqLenK, a.seqLenQ * a.seqLenK, a.seqLenK];
  const constants: FunctionConstants = {
    [FLASH_ATTN_PREFILL_FC.hasMask]: a.mask !== undefined,
    [FLASH_ATTN_PREFILL_FC.doCausal]: a.causal === true,
    [FLASH_ATTN_PREFILL_FC.hasBlk]: a.blk !== undefined,
    [FLASH_ATTN_PREFILL_FC.hasSoftcap]: a.softcap !== undefined,
    [FLASH_ATTN_PREFILL_FC.hasSeqlens]: s.varlen,
  };
  // D 256's Hopper launch copies whole K and V tiles by TMA: its maps see
  // each buffer as rows of K_stride_l elements (a row a key of every KV
  // head, or of one), from the buffer's start (buffers and views start
  // 16-byte aligned, rows of D 256 are whole 16-byte chunks), as many rows as
  // a 32-bit coordinate reaches.
  const kRows = s.kvElems / ks[2];
  const hopper = flashAttnPrefillUsesWgmma(d, limits) && (d === 128 || kRows < 2 ** 31);
  const maps = hopper && d === 256;
  const cuda = flashAttnPrefillCudaTile(d, hopper ? limits : undefined);
  const kvMap = (buffer: Buffer): TensorMapBinding => ({
    buffer, dtype: s.dt, dims: [ks[2], kRows], strides: [ks[2] * 2], box: [64, cuda.bk], swizzle: 128, l2Promotion: 256,
  });
  return planOf({
    kernel: flashAttnPrefillKernel(s.dt, d, s.boolMask, s.tile.llamacpp),
    constants,
    buffers: [a.q, a.k, a.v, a.out, , , a.mask ?? a.q, a.blk ?? a.q, a.cuSeqlensQ ?? a.q, a.cuSeqlensK ?? a.q],
    bytes: [, , , , params, packAttnMaskParams(a.mask === undefined ? [0, 0, 0] : maskStrides)],
    grid: [ceilDiv(s.gridRows, s.tile.bq), a.nHeads, a.batch],
    threads: [32, s.tile.nsg, 1],
    ...(s.tile.llamacpp ? { threadgroupMemory: [FLASH_ATTN_PREFILL_LLAMACPP_SHARED_BYTES] } : {}),
    cuda: {
      grid: [ceilDiv(s.gridRows, cuda.bq), a.nHeads, a.batch],
      threads: [cuda.threads, 1, 1],
      threadgroupMemory: [cuda.sharedBytes],
      // The CUDA entries' K and V maps (10, 11): q in their place where the launch reads none.
      ...(maps ? { tensorMaps: { 10: kvMap(a.k), 11: kvMap(a.v) } } : { buffers: { 10: a.q, 11: a.q } }),
    },
  });
}

// ---- the mask builder (mlx-native's build_sdpa_mask_bf16) ----

export interface FlashAttnPrefillMaskArgs {
  /** [seqLenQ, seqLenK] bf16 or f16, output: 0 where attended, -inf where hidden. */
  mask: Buffer;
  seqLenQ: number;
  seqLenK: number;
  /** Hide keys after the query (k > qOffset + q). */
  causal: boolean;
  /** Hide keys with qOffset + q - k >= slidingWindow (positive; the crate refuses 0). */
  slidingWindow?: number;
  /** Absolute position of row 0; 0 when absent. */
  qOffset?: number;
}

/** Threads per row of the mask builder (mlx-native's): min(256, max(32, nextPow2(seqLenK))). */
export function flashAttnPrefillMaskThreads(seqLenK: number): number {
  return Math.min(256, Math.max(32, nextPow2(seqLenK)));
}

export function packFlashAttnPrefillMaskParams(p: { seqLenK: number; qOffset?: number; slidingWindow?: number; causal: boolean }): Uint8Array {
  return packFields(FLASH_ATTN_PREFILL_MASK_PARAMS_LAYOUT, {
    seq_len_k: p.seqLenK, q_abs_offset: p.qOffset ?? 0,
    n_swa: p.slidingWindow === undefined ? -1 : Math.min(p.slidingWindow, I32_MAX), causal: p.causal ? 1 : 0,
  });
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateFlashAttnPrefillMask(a: FlashAttnPrefillMaskArgs, device?: Device): void {
  const op = 'flash_attn_prefill_mask';
  checkPositive(op, 'seqLenQ', a.seqLenQ);
  checkPositive(op, 'seqLenK', a.seqLenK);
  checkAtMost(op, 'seqLenQ', a.seqLenQ, I32_MAX, '2^31 - 1');
  checkAtMost(op, 'seqLenK', a.seqLenK, U32_MAX, '2^32 - 1');
  checkBoolean(op, 'causal', a.causal);
  if (a.slidingWindow !== undefined && (typeof a.slidingWindow !== 'number' || !Number.isSafeInteger(a.slidingWindow) || a.slidingWindow <= 0)) {
    throw invalid(op, 'slidingWindow', 'a positive integer or absent (the crate refuses a window of 0)', a.slidingWindow);
  }
  checkOptionalInt(op, 'qOffset', a.qOffset, 0, U32_MAX, '2^32 - 1');
  const n = checkedProduct(op, 'seqLenQ * seqLenK', a.seqLenQ, a.seqLenK);
  checkBuffer(op, 'mask', a.mask, device);
  checkDtype(op, 'mask', a.mask, DTYPES);
  checkAtLeast(op, 'mask', a.mask, n);
}

/**
 * flash_attn_prefill_mask (mlx-native's build_sdpa_mask_bf16, into the
 * caller's buffer; f16 added): mask[q, k] = -inf where causal and k > a, or
 * a - k >= slidingWindow, with a = qOffset + q; else 0. The [seqLenQ,
 * seqLenK] plane is what flashAttnPrefill takes as a mask shared by every
 * batch and head.
 * Kernels: flash_attn_prefill_mask_fill_{bf16,f16}. Bindings: 0 mask, 1
 * FlashAttnPrefillMaskParams (n_swa -1 without a window).
 * Grid: (seqLenQ, 1, 1) threadgroups of flashAttnPrefillMaskThreads(seqLenK)
 * threads striding over the row.
 */
export function flashAttnPrefillMask(enc: Encoder, args: FlashAttnPrefillMaskArgs): void {
  record(enc, planFlashAttnPrefillMask(args, enc.device.limits, enc.device));
}

/** flashAttnPrefillMask's plan: validates, then one dispatch (see flashAttnPrefillMask). */
export function planFlashAttnPrefillMask(a: FlashAttnPrefillMaskArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateFlashAttnPrefillMask(a, device);
  return planOf({
    kernel: `flash_attn_prefill_mask_fill_${a.mask.dtype}`,
    buffers: [a.mask],
    bytes: [, packFlashAttnPrefillMaskParams(a)],
    grid: [a.seqLenQ, 1, 1],
    threads: [flashAttnPrefillMaskThreads(a.seqLenK), 1, 1],
  });
}

// ---- the tile classifier (mlx-native's flash_attn_prefill_blk) ----

export interface FlashAttnPrefillBlkArgs {
  /** The additive mask [seqLenQ, seqLenK], bf16 or f16. */
  mask: Buffer;
  /** u8 [ceil(seqLenQ / bq), ceil(seqLenK / bk)], output. */
  blk: Buffer;
  seqLenQ: number;
  seqLenK: number;
  /** The tile: flashAttnPrefillBlkTile's for the attention entry that reads blk. */
  bq: number;
  bk: number;
}

/** The (bq, bk) tile whose classes flashAttnPrefill reads for these arguments (the entry's BQ and the crate's BK). */
export function flashAttnPrefillBlkTile(a: Pick<FlashAttnPrefillArgs, 'headDim' | 'd512Kernel'>): { bq: number; bk: number } {
  const t = flashAttnPrefillTile(a.headDim, a.d512Kernel);
  return { bq: t.bq, bk: t.bk };
}

export function packFlashAttnPrefillBlkParams(p: { seqLenQ: number; seqLenK: number }): Uint8Array {
  return packFields(FLASH_ATTN_PREFILL_BLK_PARAMS_LAYOUT, { seq_len_q: p.seqLenQ, seq_len_k: p.seqLenK, mask_row_stride: p.seqLenK, _pad: 0 });
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateFlashAttnPrefillBlk(a: FlashAttnPrefillBlkArgs, device?: Device): void {
  const op = 'flash_attn_prefill_blk';
  for (const arg of ['seqLenQ', 'seqLenK', 'bq', 'bk'] as const) {
    checkPositive(op, arg, a[arg]);
    checkAtMost(op, arg, a[arg], I32_MAX, '2^31 - 1');
  }
  const n = checkedProduct(op, 'seqLenQ * seqLenK', a.seqLenQ, a.seqLenK);
  const tiles = checkedProduct(op, 'blk elements', ceilDiv(a.seqLenQ, a.bq), ceilDiv(a.seqLenK, a.bk));
  checkAtMost(op, 'blk elements', tiles, I32_MAX, '2^31 - 1 (the CUDA grid)');
  checkBufferRules(op, [['mask', a.mask, DTYPES, n], ['blk', a.blk, 'u8', tiles]], device, true);
  checkNoAliasing(op, [['mask', a.mask], ['blk', a.blk]], ['blk'], 'the classes are written while the mask is read');
}

/**
 * flash_attn_prefill_blk (mlx-native's dispatch_flash_attn_prefill_blk; f16
 * added): blk[qt, kt] classifies the mask's tile of rows qt * bq .. and
 * columns kt * bk ..: 0 when its largest value is <= -1e30 (the attention
 * skips it), 2 when every value is 0 (no mask to add), else 1; a tile
 * crossing seqLenK is 1. Rows past seqLenQ are not read. Unlike the crate's
 * kernel, columns past the 32nd of a tile are read too (its llamacpp tiles
 * are 64 wide).
 * Kernels: flash_attn_prefill_blk_{bf16,f16} with function constants BQ (400)
 * and BK (401). Bindings: 0 mask, 1 blk, 2 FlashAttnPrefillBlkParams.
 * Grid (Metal): (ceil(seqLenK / bk), ceil(seqLenQ / bq), 1) threadgroups of
 * 32 threads. CUDA: the same tiles in a one-dimensional grid.
 */
export function flashAttnPrefillBlk(enc: Encoder, args: FlashAttnPrefillBlkArgs): void {
  record(enc, planFlashAttnPrefillBlk(args, enc.device.limits, enc.device));
}

/** flashAttnPrefillBlk's plan: validates, then one dispatch (see flashAttnPrefillBlk). */
export function planFlashAttnPrefillBlk(a: FlashAttnPrefillBlkArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateFlashAttnPrefillBlk(a, device);
  const nq = ceilDiv(a.seqLenQ, a.bq);
  const nk = ceilDiv(a.seqLenK, a.bk);
  return planOf({
    kernel: `flash_attn_prefill_blk_${a.mask.dtype}`,
    constants: {
      [FLASH_ATTN_PREFILL_FC.blkBq]: { type: 'i32', value: a.bq },
      [FLASH_ATTN_PREFILL_FC.blkBk]: { type: 'i32', value: a.bk },
    },
    buffers: [a.mask, a.blk],
    bytes: [, , packFlashAttnPrefillBlkParams(a)],
    grid: [nk, nq, 1],
    threads: [32, 1, 1],
    cuda: { grid: [nk * nq, 1, 1], threads: [32, 1, 1] } satisfies Launch,
  });
}

// ---- the float64 reference ----

// CPU references of flash_attn_prefill: plain loops in float64. The
// attention is one softmax per query row over the keys it sees (the tiling
// and the online softmax do not change the math); the mask builder and the
// tile classifier as their kernels define them.

/**
 * A call's sizes and options as the op takes them (FlashAttnPrefillArgs),
 * slidingWindow and softcap also disabled by 0; the scale and causality
 * given; the offsets and the mask as numbers.
 */
export interface FlashAttnPrefillRefShape extends Pick<FlashAttnPrefillArgs,
  'batch' | 'nHeads' | 'nKvHeads' | 'headDim' | 'seqLenQ' | 'seqLenK' | 'kvCapacity' | 'qOffset' | 'slidingWindow' | 'softcap' | 'layout'> {
  scale: number;
  causal: boolean;
  /** Offsets of each sequence's query rows and key rows (batch + 1 each). */
  cuSeqlensQ?: ArrayLike<number>;
  cuSeqlensK?: ArrayLike<number>;
  /** An additive mask (added to the scaled, capped score) or a bool one (0 hides), [seqLenQ, seqLenK] (broadcast) or [B, H, seqLenQ, seqLenK]. */
  mask?: { kind: 'additive' | 'bool'; broadcast: boolean; data: ArrayLike<number> };
}

/**
 * out[b, h, i, :] = sum_j p_ij v[b, h / g, j, :], p_i = softmax over the
 * visible j of s_ij = scale q[b, h, i, :] . k[b, h / g, j, :], capped
 * (softcap tanh(s / softcap)) and masked; visible: j below the sequence's
 * key count, j <= qOffset + i when causal, qOffset + i - j < slidingWindow,
 * and not hidden by the mask. A row with no visible key is 0. q, k, v
 * (already decoded) and the result in the layout of the shape.
 */
export function flashAttnPrefillRef(s: FlashAttnPrefillRefShape, q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>): Float64Array {
  const D = s.headDim;
  const H = s.nHeads;
  const Hkv = s.nKvHeads;
  const group = H / Hkv;
  const varlen = s.cuSeqlensQ !== undefined;
  const layout = varlen ? 'seqMajor' : (s.layout ?? 'headMajor');
  const cap = s.kvCapacity ?? s.seqLenK;
  const W = s.slidingWindow ?? 0;
  const out = new Float64Array(varlen ? s.seqLenQ * H * D : s.batch * H * s.seqLenQ * D);
  // Element offset of (sequence b, head h, row r) in a [B, heads, rows, D] or [B, rows, heads, D] tensor.
  const at = (b: number, h: number, r: number, heads: number, rows: number): number =>
    varlen ? (r * heads + h) * D : layout === 'headMajor' ? ((b * heads + h) * rows + r) * D : ((b * rows + r) * heads + h) * D;
  const scores = new Float64Array(varlen ? s.seqLenK : s.seqLenK);
  for (let b = 0; b < s.batch; b++) {
    const q0 = varlen ? s.cuSeqlensQ![b]! : 0;
    const qn = varlen ? s.cuSeqlensQ![b + 1]! - q0 : s.seqLenQ;
    const k0 = varlen ? s.cuSeqlensK![b]! : 0;
    const kn = varlen ? s.cuSeqlensK![b + 1]! - k0 : s.seqLenK;
    const off = varlen ? kn - qn : (s.qOffset ?? 0);
    for (let h = 0; h < H; h++) {
      const kh = Math.floor(h / group);
      for (let i = 0; i < qn; i++) {
        const p = off + i;
        const qo = at(b, h, q0 + i, H, s.seqLenQ);
        let max = -Infinity;
        for (let j = 0; j < kn; j++) {
          scores[j] = -Infinity;
          if (s.causal && j > p) continue;
          if (W > 0 && p - j >= W) continue;
          const ko = at(b, kh, k0 + j, Hkv, cap);
          let dot = 0;
          for (let d = 0; d < D; d++) dot += q[qo + d]! * k[ko + d]!;
          let x = s.scale * dot;
          if (s.softcap !== undefined && s.softcap > 0) x = s.softcap * Math.tanh(x / s.softcap);
          if (s.mask !== undefined) {
            const mi = s.mask.broadcast ? i * s.seqLenK + j : ((b * H + h) * s.seqLenQ + i) * s.seqLenK + j;
            const m = s.mask.data[mi]!;
            if (s.mask.kind === 'bool') {
              if (m === 0) continue;
            } else {
              x += m;
            }
          }
          scores[j] = x;
          if (x > max) max = x;
        }
        if (max === -Infinity) continue;
        let sum = 0;
        for (let j = 0; j < kn; j++) {
          const e = scores[j] === -Infinity ? 0 : Math.exp(scores[j]! - max);
          scores[j] = e;
          sum += e;
        }
        const oo = at(b, h, q0 + i, H, s.seqLenQ);
        for (let j = 0; j < kn; j++) {
          if (scores[j] === 0) continue;
          const w = scores[j]! / sum;
          const vo = at(b, kh, k0 + j, Hkv, cap);
          for (let d = 0; d < D; d++) out[oo + d] = out[oo + d]! + w * v[vo + d]!;
        }
      }
    }
  }
  return out;
}

/** The mask builder: [seqLenQ, seqLenK] of 0 (seen) and -inf (hidden: causal and k > a, or a - k >= slidingWindow; a = qOffset + q). */
export function flashAttnPrefillMaskRef(p: { seqLenQ: number; seqLenK: number; causal: boolean; slidingWindow?: number; qOffset?: number }): Float64Array {
  const out = new Float64Array(p.seqLenQ * p.seqLenK);
  for (let q = 0; q < p.seqLenQ; q++) {
    const a = q + (p.qOffset ?? 0);
    for (let k = 0; k < p.seqLenK; k++) {
      const hidden = (p.causal && k > a) || (p.slidingWindow !== undefined && a - k >= p.slidingWindow);
      out[q * p.seqLenK + k] = hidden ? -Infinity : 0;
    }
  }
  return out;
}

/**
 * The tile classes of a [seqLenQ, seqLenK] additive mask at tiles of (bq,
 * bk): 0 when the tile's largest value is <= -1e30, 2 when every value is 0,
 * else 1; a tile crossing seqLenK is 1; rows past seqLenQ do not count (a
 * tile of none is 0). [ceil(seqLenQ / bq), ceil(seqLenK / bk)].
 */
export function flashAttnPrefillBlkRef(mask: ArrayLike<number>, seqLenQ: number, seqLenK: number, bq: number, bk: number): Uint8Array {
  const nq = Math.ceil(seqLenQ / bq);
  const nk = Math.ceil(seqLenK / bk);
  const out = new Uint8Array(nq * nk);
  for (let qt = 0; qt < nq; qt++) {
    for (let kt = 0; kt < nk; kt++) {
      let res: number;
      if ((kt + 1) * bk > seqLenK) {
        res = 1;
      } else {
        let mn = Infinity;
        let mx = -Infinity;
        for (let r = qt * bq; r < Math.min(seqLenQ, (qt + 1) * bq); r++) {
          for (let c = kt * bk; c < (kt + 1) * bk; c++) {
            const x = mask[r * seqLenK + c]!;
            mn = Math.min(mn, x);
            mx = Math.max(mx, x);
          }
        }
        res = mx <= -1e30 ? 0 : mn === 0 && mx === 0 ? 2 : 1;
      }
      out[qt * nk + kt] = res;
    }
  }
  return out;
}
