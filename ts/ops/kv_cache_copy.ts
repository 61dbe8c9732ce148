// kv_cache_copy: new keys and values written into a preallocated KV cache at
// their positions; a sliding-window layer's cache is a ring (slot = position
// % capacity). Kernel names, bindings (each scalar at a binding of its own)
// and grids are mlx-native's (src/ops/kv_cache_copy.rs). Added here: the
// seq copies from every source dtype (f32, f16, bf16) to every cache dtype
// (kv_cache_copy_seq_<src>_to_<cache>, and each one's _kv_dual), the checks
// that keep every write inside the cache (mlx-native checks only the source
// and a global cache's end), the `ring` flag that says which of its two
// documented contracts a seq copy follows, and kvCacheReadSpan, what decode
// attention (flash_attn_vec) is given after the writes (flashAttnVecVarlen
// takes the positions written instead, and a ring's slots by position).
// Kernels: shaders/kv_cache_copy.metal and shaders/cuda/kv_cache_copy.cu.

import src from '../../shaders/kv_cache_copy.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/kv_cache_copy.cu' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import { dtypeSize, type DType } from '../dtype.ts';
import type { Encoder } from '../encoder.ts';
import { rowCopyLaunch, rowCopyUnit } from '../launch.ts';
import { familyPlans, record, type OpPlan, type PlannedDispatch } from '../plan.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBoolean, checkBuffer, checkBufferRules, checkDtype, checkedProduct, checkElements, checkNoAliasing, checkPositive, checkU32Count, invalid,
  ruleBindings, U32_MAX, type BufferRule,
} from '../validate.ts';

export const KV_CACHE_COPY_FAMILY = 'kv_cache_copy';
/** The family's kernel sources by backend (no header: every param is a u32 of its own binding). */
export const KV_CACHE_COPY_SOURCES = familySources(KV_CACHE_COPY_FAMILY, { metal: src, cuda: cudaSrc });

type Float = 'f32' | 'f16' | 'bf16';
const FLOATS: readonly Float[] = ['f32', 'f16', 'bf16'];

/** The seq kernel from a source dtype to a cache dtype (mlx-native's names where it has the pair). */
export function kvCacheCopySeqKernel(from: Float, to: Float): string {
  if (from === 'f32' && to === 'f32') return 'kv_cache_copy_seq_f32';
  if (from === 'bf16' && to === 'f32') return 'kv_cache_copy_seq_bf16';
  return `kv_cache_copy_seq_${from}_to_${to}`;
}

export const KV_CACHE_COPY_KERNELS = [
  'kv_cache_copy', 'kv_cache_copy_f32', 'kv_cache_copy_batch_f32', 'kv_cache_copy_batch_f32_to_f16',
  'kv_cache_copy_seq_f32', 'kv_cache_copy_seq_f32_to_f16', 'kv_cache_copy_seq_f32_to_bf16',
  'kv_cache_copy_seq_f16_to_f32', 'kv_cache_copy_seq_f16_to_f16', 'kv_cache_copy_seq_f16_to_bf16',
  'kv_cache_copy_seq_bf16', 'kv_cache_copy_seq_bf16_to_f16', 'kv_cache_copy_seq_bf16_to_bf16',
  'kv_cache_copy_seq_f32_kv_dual', 'kv_cache_copy_seq_f32_to_f16_kv_dual', 'kv_cache_copy_seq_f32_to_bf16_kv_dual',
  'kv_cache_copy_seq_f16_to_f32_kv_dual', 'kv_cache_copy_seq_f16_to_f16_kv_dual', 'kv_cache_copy_seq_f16_to_bf16_kv_dual',
  'kv_cache_copy_seq_bf16_kv_dual', 'kv_cache_copy_seq_bf16_to_f16_kv_dual', 'kv_cache_copy_seq_bf16_to_bf16_kv_dual',
] as const;
const planOf = familyPlans({ family: KV_CACHE_COPY_FAMILY, sources: KV_CACHE_COPY_SOURCES, kernels: KV_CACHE_COPY_KERNELS });
/** Threads per threadgroup of the Metal grids at most (mlx-native's). */
export const KV_CACHE_COPY_MAX_THREADS = 256;
/** Elements one dispatch may copy: the grids count threads in 32 bits. */
export const KV_CACHE_COPY_MAX_ELEMENTS = 2 ** 32 - KV_CACHE_COPY_MAX_THREADS;

export interface KvCacheCopyArgs {
  /** [srcRows, rowSize] with srcRows >= nNew (the first nNew rows are read): f32, f16 or bf16 */
  src: Buffer;
  /** [cacheCap, rowSize], token-major, src's dtype */
  cache: Buffer;
  /** Position of the first new token. */
  writePos: number;
  /** Elements per token row (nKvHeads * headDim). */
  rowSize: number;
  /** New tokens; 0 copies nothing and records nothing (mlx-native's rule). */
  nNew: number;
  /** Rows of the cache (the window of a sliding layer, the context of a global one). */
  cacheCap: number;
  /** Ring: token t goes to row (writePos + t) % cacheCap; else to writePos + t, which must stay below cacheCap. */
  isSliding: boolean;
}

export interface KvCacheCopyBatchArgs {
  /** [nHeads, headDim] f32: one token's keys or values */
  src: Buffer;
  /** [nHeads, capacity, headDim], f32 or f16 */
  cache: Buffer;
  nHeads: number;
  headDim: number;
  capacity: number;
  /** The slot written, already wrapped for a ring: below capacity. */
  seqPos: number;
}

export interface KvCacheCopySeqParams {
  nHeads: number;
  headDim: number;
  /** Slots per head: the window of a sliding (ring) layer, the context of a global one. */
  capacity: number;
  /** Absolute position of the first token written. */
  seqPosStart: number;
  /** Tokens written, at most capacity; 0 copies nothing and records nothing (mlx-native's rule). */
  nTokens: number;
  /** First source token read (default 0): a sliding layer's prefill keeps only its last tokens. */
  srcTokOffset?: number;
  /**
   * true: a ring (a sliding-window layer), token t goes to slot (seqPosStart + t) % capacity.
   * false or absent: a global cache, seqPosStart + nTokens <= capacity (the slot is the position).
   */
  ring?: boolean;
}

export interface KvCacheCopySeqArgs extends KvCacheCopySeqParams {
  /** [srcTokens, nHeads, headDim], srcTokens >= srcTokOffset + nTokens: f32, f16 or bf16 */
  src: Buffer;
  /** [nHeads, capacity, headDim]: f32, f16 or bf16 */
  cache: Buffer;
}

export interface KvCacheCopySeqDualArgs extends KvCacheCopySeqParams {
  /** [srcTokens, nHeads, headDim] keys: f32, f16 or bf16 */
  srcK: Buffer;
  /** values, srcK's dtype and shape */
  srcV: Buffer;
  /** [nHeads, capacity, headDim] */
  cacheK: Buffer;
  /** cacheK's dtype and shape */
  cacheV: Buffer;
}

/** The u32 scalar of one binding, little-endian. */
function u32(value: number): Uint32Array {
  return new Uint32Array([value]);
}

/** value is an integer >= 0. */
function checkCount(op: string, arg: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) throw invalid(op, arg, 'an integer >= 0', value);
}

/** value <= max, the message naming max and saying why it bounds value. */
function checkAtMostWhy(op: string, arg: string, value: number, max: number, maxName: string, why: string): void {
  if (!(value <= max)) throw invalid(op, arg, `at most ${maxName} (${max}): ${why}`, value);
}

/** Source rows of `row` elements held by a buffer: a whole number of them, at least `need`. */
function checkSourceRows(op: string, arg: string, buf: Buffer, row: number, need: number, rowName: string, needName: string): void {
  const n = buf.elementCount;
  if (n % row !== 0) throw invalid(op, `${arg}.elementCount`, `a multiple of ${rowName} (${row})`, n);
  if (n / row < need) throw invalid(op, `${arg}.elementCount`, `at least ${needName} = ${need} rows of ${row}`, n);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateKvCacheCopy(a: KvCacheCopyArgs, device?: Device): void {
  const op = 'kv_cache_copy';
  checkPositive(op, 'rowSize', a.rowSize);
  checkPositive(op, 'cacheCap', a.cacheCap);
  checkCount(op, 'nNew', a.nNew);
  checkCount(op, 'writePos', a.writePos);
  for (const [arg, v] of [['rowSize', a.rowSize], ['cacheCap', a.cacheCap], ['nNew', a.nNew], ['writePos', a.writePos]] as const) {
    checkAtMost(op, arg, v, U32_MAX, '2^32 - 1');
  }
  checkBoolean(op, 'isSliding', a.isSliding);
  const copied = checkedProduct(op, 'nNew * rowSize', a.nNew, a.rowSize);
  checkAtMost(op, 'nNew * rowSize', copied, KV_CACHE_COPY_MAX_ELEMENTS, '2^32 - 256 (the grid counts threads in 32 bits)');
  if (a.isSliding) {
    checkAtMostWhy(op, 'nNew', a.nNew, a.cacheCap, 'cacheCap', 'two new tokens of a ring on one row would race');
  } else {
    checkAtMostWhy(op, 'writePos + nNew', a.writePos + a.nNew, a.cacheCap, 'cacheCap', 'a cache that is not sliding does not wrap');
  }
  const cacheElems = checkedProduct(op, 'cacheCap * rowSize', a.cacheCap, a.rowSize);
  checkBuffer(op, 'src', a.src, device);
  checkBuffer(op, 'cache', a.cache, device);
  checkDtype(op, 'src', a.src, FLOATS);
  checkDtype(op, 'cache', a.cache, a.src.dtype);
  checkSourceRows(op, 'src', a.src, a.rowSize, a.nNew, 'rowSize', 'nNew');
  checkElements(op, 'cache', a.cache, cacheElems);
  checkNoAliasing(op, [['src', a.src], ['cache', a.cache]], ['cache'], 'rows of the cache are written while src is read');
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateKvCacheCopyBatch(a: KvCacheCopyBatchArgs, device?: Device): void {
  const op = 'kv_cache_copy_batch';
  for (const [arg, v] of [['nHeads', a.nHeads], ['headDim', a.headDim], ['capacity', a.capacity]] as const) checkU32Count(op, arg, v);
  checkCount(op, 'seqPos', a.seqPos);
  checkAtMostWhy(op, 'seqPos', a.seqPos, a.capacity - 1, 'capacity - 1', 'a slot (a ring position wrapped first)');
  const copied = checkedProduct(op, 'nHeads * headDim', a.nHeads, a.headDim);
  checkAtMost(op, 'nHeads * headDim', copied, KV_CACHE_COPY_MAX_ELEMENTS, '2^32 - 256 (the grid counts threads in 32 bits)');
  const cacheElems = checkedProduct(op, 'nHeads * capacity * headDim', a.nHeads, a.capacity, a.headDim);
  const rules: BufferRule[] = [['src', a.src, 'f32', copied], ['cache', a.cache, ['f32', 'f16'], cacheElems]];
  checkBufferRules(op, rules, device);
  checkNoAliasing(op, ruleBindings(rules), ['cache'], 'rows of the cache are written while src is read');
}

/** The rules on the seq params; returns the elements copied per stream and the cache's element count. */
function validateSeqParams(op: string, p: KvCacheCopySeqParams): { cacheElems: number; rowSize: number; srcNeed: number } {
  for (const [arg, v] of [['nHeads', p.nHeads], ['headDim', p.headDim], ['capacity', p.capacity]] as const) checkU32Count(op, arg, v);
  checkCount(op, 'nTokens', p.nTokens);
  checkCount(op, 'seqPosStart', p.seqPosStart);
  checkAtMost(op, 'seqPosStart', p.seqPosStart, U32_MAX, '2^32 - 1');
  if (p.srcTokOffset !== undefined) {
    checkCount(op, 'srcTokOffset', p.srcTokOffset);
    checkAtMost(op, 'srcTokOffset', p.srcTokOffset, U32_MAX, '2^32 - 1');
  }
  checkBoolean(op, 'ring', p.ring, true);
  checkAtMostWhy(op, 'nTokens', p.nTokens, p.capacity, 'capacity', 'two tokens of one copy on one slot would race');
  if (p.ring !== true) {
    checkAtMostWhy(op, 'seqPosStart + nTokens', p.seqPosStart + p.nTokens, p.capacity, 'capacity',
      'a global cache does not wrap (ring: true for a sliding layer)');
  }
  const rowSize = checkedProduct(op, 'nHeads * headDim', p.nHeads, p.headDim);
  const copied = checkedProduct(op, 'nTokens * nHeads * headDim', p.nTokens, rowSize);
  checkAtMost(op, 'nTokens * nHeads * headDim', copied, KV_CACHE_COPY_MAX_ELEMENTS, '2^32 - 256 (the grid counts threads in 32 bits)');
  const cacheElems = checkedProduct(op, 'nHeads * capacity * headDim', p.nHeads, p.capacity, p.headDim);
  return { cacheElems, rowSize, srcNeed: (p.srcTokOffset ?? 0) + p.nTokens };
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateKvCacheCopySeq(a: KvCacheCopySeqArgs, device?: Device): void {
  const op = 'kv_cache_copy_seq';
  const { cacheElems, rowSize, srcNeed } = validateSeqParams(op, a);
  checkBuffer(op, 'src', a.src, device);
  checkBuffer(op, 'cache', a.cache, device);
  checkDtype(op, 'src', a.src, FLOATS);
  checkDtype(op, 'cache', a.cache, FLOATS);
  checkSourceRows(op, 'src', a.src, rowSize, srcNeed, 'nHeads * headDim', 'srcTokOffset + nTokens');
  checkElements(op, 'cache', a.cache, cacheElems);
  checkNoAliasing(op, [['src', a.src], ['cache', a.cache]], ['cache'], 'rows of the cache are written while src is read');
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateKvCacheCopySeqDual(a: KvCacheCopySeqDualArgs, device?: Device): void {
  const op = 'kv_cache_copy_seq_dual';
  const { cacheElems, rowSize, srcNeed } = validateSeqParams(op, a);
  for (const [arg, b] of [['srcK', a.srcK], ['srcV', a.srcV], ['cacheK', a.cacheK], ['cacheV', a.cacheV]] as const) checkBuffer(op, arg, b, device);
  checkDtype(op, 'srcK', a.srcK, FLOATS);
  checkDtype(op, 'srcV', a.srcV, a.srcK.dtype);
  checkDtype(op, 'cacheK', a.cacheK, FLOATS);
  checkDtype(op, 'cacheV', a.cacheV, a.cacheK.dtype);
  checkSourceRows(op, 'srcK', a.srcK, rowSize, srcNeed, 'nHeads * headDim', 'srcTokOffset + nTokens');
  checkElements(op, 'srcV', a.srcV, a.srcK.elementCount);
  checkElements(op, 'cacheK', a.cacheK, cacheElems);
  checkElements(op, 'cacheV', a.cacheV, cacheElems);
  checkNoAliasing(op, [['srcK', a.srcK], ['srcV', a.srcV], ['cacheK', a.cacheK], ['cacheV', a.cacheV]], ['cacheK', 'cacheV'],
    'each cache is written while both sources are read');
}

/** Threads of a Metal threadgroup over an extent of n (mlx-native's min(256, n)). */
function tgOf(n: number, limits: DeviceLimits): number {
  return Math.min(KV_CACHE_COPY_MAX_THREADS, n, limits.maxThreadsPerThreadgroup);
}

/**
 * kv_cache_copy: cache[slot(writePos + t), i] = src[t, i] for t < nNew, i <
 * rowSize, slot(p) = p % cacheCap when isSliding (a ring), else p. A
 * token-major cache [cacheCap, rowSize] (one row per token, all heads): a
 * per-head cache of flash_attn_vec's layout when rowSize is one head's
 * headDim; for a multi-head cache [nKvHeads, capacity, headDim] use
 * kvCacheCopySeq. Values are copied bit for bit.
 *
 * Layouts: src [srcRows, rowSize], srcRows >= nNew, f32, f16 or bf16; cache
 * [cacheCap, rowSize] of src's dtype.
 * Kernels: kv_cache_copy_f32 (f32), kv_cache_copy (f16 and bf16: 16-bit words).
 * Bindings: 0 src, 1 cache, then one u32 each: 2 writePos, 3 rowSize, 4 nNew, 5 cacheCap, 6 isSliding.
 * Grid: (ceil(nNew * rowSize / tg), 1, 1) threadgroups of tg = min(256, nNew *
 * rowSize) threads, one element each (mlx-native's); the CUDA twin moves
 * 16-byte steps (rowCopyLaunch). nNew = 0 records nothing.
 */
export function kvCacheCopy(enc: Encoder, args: KvCacheCopyArgs): void {
  record(enc, planKvCacheCopy(args, enc.device.limits, enc.device));
}

/** kvCacheCopy's plan: validates, then one dispatch, or none for nNew = 0 (see kvCacheCopy). */
export function planKvCacheCopy(a: KvCacheCopyArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateKvCacheCopy(a, device);
  if (a.nNew === 0) return planOf();
  const total = a.nNew * a.rowSize;
  const tg = tgOf(total, limits);
  const dt = a.src.dtype;
  return planOf({
    kernel: dt === 'f32' ? 'kv_cache_copy_f32' : 'kv_cache_copy',
    buffers: [a.src, a.cache],
    bytes: [, , u32(a.writePos), u32(a.rowSize), u32(a.nNew), u32(a.cacheCap), u32(a.isSliding ? 1 : 0)],
    grid: [Math.ceil(total / tg), 1, 1],
    threads: [tg, 1, 1],
    cuda: rowCopyLaunch(a.nNew, a.rowSize, rowCopyUnit(dtypeSize(dt), dtypeSize(dt)), limits),
  });
}

/**
 * kv_cache_copy_batch: one decode token, every head at once:
 * cache[h, seqPos, d] = src[h, d], the f32 values rounded to the cache's dtype.
 * seqPos is a slot (for a ring, position % capacity).
 *
 * Layouts: src [nHeads, headDim] f32; cache [nHeads, capacity, headDim] f32 or f16.
 * Kernels: kv_cache_copy_batch_f32, kv_cache_copy_batch_f32_to_f16.
 * Bindings: 0 src, 1 cache, then one u32 each: 2 nHeads, 3 headDim, 4 capacity, 5 seqPos.
 * Grid: (ceil(headDim / tg), nHeads, 1) threadgroups of tg = min(256, headDim)
 * threads (mlx-native's); the CUDA twin as kvCacheCopy's.
 */
export function kvCacheCopyBatch(enc: Encoder, args: KvCacheCopyBatchArgs): void {
  record(enc, planKvCacheCopyBatch(args, enc.device.limits, enc.device));
}

/** kvCacheCopyBatch's plan: validates, then one dispatch (see kvCacheCopyBatch). */
export function planKvCacheCopyBatch(a: KvCacheCopyBatchArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateKvCacheCopyBatch(a, device);
  const tg = tgOf(a.headDim, limits);
  return planOf({
    kernel: a.cache.dtype === 'f16' ? 'kv_cache_copy_batch_f32_to_f16' : 'kv_cache_copy_batch_f32',
    buffers: [a.src, a.cache],
    bytes: [, , u32(a.nHeads), u32(a.headDim), u32(a.capacity), u32(a.seqPos)],
    grid: [Math.ceil(a.headDim / tg), a.nHeads, 1],
    threads: [tg, 1, 1],
    cuda: rowCopyLaunch(a.nHeads, a.headDim, rowCopyUnit(4, dtypeSize(a.cache.dtype)), limits),
  });
}

function seqDispatch(kernel: string, buffers: Buffer[], p: KvCacheCopySeqParams, from: DType, to: DType, limits: DeviceLimits,
  at: number): PlannedDispatch {
  const tg = tgOf(p.headDim, limits);
  const bytes: (Uint32Array | undefined)[] = new Array(at);
  bytes.push(u32(p.nHeads), u32(p.headDim), u32(p.capacity), u32(p.seqPosStart), u32(p.nTokens), u32(p.srcTokOffset ?? 0));
  return {
    kernel, buffers, bytes,
    grid: [Math.ceil(p.headDim / tg), p.nHeads, p.nTokens],
    threads: [tg, 1, 1],
    // The _kv_dual kernels take the K rows, then the V rows.
    cuda: rowCopyLaunch((at === 4 ? 2 : 1) * p.nTokens * p.nHeads, p.headDim, rowCopyUnit(dtypeSize(from), dtypeSize(to)), limits),
  };
}

/**
 * kv_cache_copy_seq: tokens t < nTokens of a prefill (or one decode token)
 * into a head-major cache, every head in one dispatch:
 * cache[h, (seqPosStart + t) % capacity, d] = src[srcTokOffset + t, h, d],
 * the values converted to the cache's dtype with one rounding (bit for bit
 * within one dtype). The cache is the layout flash_attn_vec reads (batch 1).
 *
 * The two contracts of mlx-native's seq copy: a global layer (ring absent or
 * false) writes positions [seqPosStart, seqPosStart + nTokens) below
 * capacity, so slot = position. A sliding-window layer (ring: true,
 * capacity = the window) writes slot = position % capacity; a prefill of
 * seqLen tokens keeps its last n = min(seqLen, capacity): nTokens = n,
 * srcTokOffset = seqPosStart = seqLen - n, each slot written once. nTokens
 * <= capacity always (two tokens on one slot would race). kvCacheReadSpan
 * gives what attention reads afterwards.
 *
 * Layouts: src [srcTokens, nHeads, headDim], srcTokens >= srcTokOffset +
 * nTokens, f32, f16 or bf16; cache [nHeads, capacity, headDim] f32, f16 or bf16.
 * Kernels: kv_cache_copy_seq_<src>_to_<cache>, mlx-native's kv_cache_copy_seq_f32
 * (f32 to f32) and kv_cache_copy_seq_bf16 (bf16 to f32) by their names.
 * Bindings: 0 src, 1 cache, then one u32 each: 2 nHeads, 3 headDim, 4 capacity,
 * 5 seqPosStart, 6 nTokens, 7 srcTokOffset.
 * Grid: (ceil(headDim / tg), nHeads, nTokens) threadgroups of tg = min(256,
 * headDim) threads, one element each (mlx-native's); the CUDA twin moves
 * 16-byte steps of each (token, head) row (rowCopyLaunch). nTokens = 0 records nothing.
 */
export function kvCacheCopySeq(enc: Encoder, args: KvCacheCopySeqArgs): void {
  record(enc, planKvCacheCopySeq(args, enc.device.limits, enc.device));
}

/** kvCacheCopySeq's plan: validates, then one dispatch, or none for nTokens = 0 (see kvCacheCopySeq). */
export function planKvCacheCopySeq(a: KvCacheCopySeqArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateKvCacheCopySeq(a, device);
  if (a.nTokens === 0) return planOf();
  const from = a.src.dtype as Float, to = a.cache.dtype as Float;
  return planOf(seqDispatch(kvCacheCopySeqKernel(from, to), [a.src, a.cache], a, from, to, limits, 2));
}

/**
 * kv_cache_copy_seq_dual: kvCacheCopySeq of keys and values in one dispatch
 * (one thread copies a K and a V element of the same coordinates).
 *
 * Layouts: srcK, srcV [srcTokens, nHeads, headDim] of one dtype; cacheK,
 * cacheV [nHeads, capacity, headDim] of one dtype.
 * Kernels: <the seq kernel>_kv_dual. Bindings: 0 srcK, 1 srcV, 2 cacheK, 3
 * cacheV, then one u32 each: 4 nHeads, 5 headDim, 6 capacity, 7 seqPosStart,
 * 8 nTokens, 9 srcTokOffset.
 * Grid: as kvCacheCopySeq's; the CUDA twin's launch covers 2 * nTokens *
 * nHeads rows (the K rows, then the V rows). nTokens = 0 records nothing.
 */
export function kvCacheCopySeqDual(enc: Encoder, args: KvCacheCopySeqDualArgs): void {
  record(enc, planKvCacheCopySeqDual(args, enc.device.limits, enc.device));
}

/** kvCacheCopySeqDual's plan: validates, then one dispatch, or none for nTokens = 0 (see kvCacheCopySeqDual). */
export function planKvCacheCopySeqDual(a: KvCacheCopySeqDualArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateKvCacheCopySeqDual(a, device);
  if (a.nTokens === 0) return planOf();
  const from = a.srcK.dtype as Float, to = a.cacheK.dtype as Float;
  return planOf(seqDispatch(`${kvCacheCopySeqKernel(from, to)}_kv_dual`, [a.srcK, a.srcV, a.cacheK, a.cacheV], a, from, to, limits, 4));
}

/**
 * What decode attention reads from a head-major cache after positions [0,
 * end) were written (the next token goes to position end):
 * - a global cache: kvSeqLen = end (at most capacity), slots in position order;
 * - a ring (ring: true, capacity = the window): kvSeqLen = min(end, capacity),
 *   the last kvSeqLen positions; oldestSlot (mlx-native's ring_start) holds
 *   the oldest of them once the ring has wrapped (end % capacity), else 0.
 * flash_attn_vec takes such a cache as it is (kvCapacity = capacity, kvSeqLen
 * as here): softmax over the keys does not depend on their order, and the
 * positions are in the keys already (rotary embedding comes before the copy).
 * On a ring every slot it reads is in the window, so the mask is 'none' (or
 * 'causal', the same for one query); 'slidingWindow' is for a global cache,
 * whose slots are positions. flashAttnVecVarlen with ring: true takes the
 * positions written instead (seqLens[b] = end, per sequence) and maps each
 * position to its slot itself, so a ring wider than the window works too.
 */
export function kvCacheReadSpan(end: number, capacity: number, ring: boolean): { kvSeqLen: number; oldestSlot: number } {
  const op = 'kv_cache_read_span';
  checkCount(op, 'end', end);
  checkPositive(op, 'capacity', capacity);
  if (!ring) {
    checkAtMostWhy(op, 'end', end, capacity, 'capacity', 'a global cache does not wrap');
    return { kvSeqLen: end, oldestSlot: 0 };
  }
  return { kvSeqLen: Math.min(end, capacity), oldestSlot: end > capacity ? end % capacity : 0 };
}

// ---- the float64 reference ----

// CPU reference of kv_cache_copy: the cache after the writes, float64.

/**
 * A head-major cache [nHeads, capacity, headDim] after
 * cache[h, (seqPosStart + t) % capacity, d] = src[srcTokOffset + t, h, d]
 * for t < nTokens; every other slot keeps its value from `cache` (copied, not
 * changed). src is [srcTokens, nHeads, headDim].
 */
export function kvCacheCopySeqRef(src: ArrayLike<number>, cache: ArrayLike<number>, nHeads: number, headDim: number, capacity: number,
  seqPosStart: number, nTokens: number, srcTokOffset = 0): Float64Array {
  const out = Float64Array.from(cache);
  for (let t = 0; t < nTokens; t++) {
    const slot = (seqPosStart + t) % capacity;
    for (let h = 0; h < nHeads; h++) {
      for (let d = 0; d < headDim; d++) {
        out[(h * capacity + slot) * headDim + d] = src[((srcTokOffset + t) * nHeads + h) * headDim + d]!;
      }
    }
  }
  return out;
}

/**
 * A token-major cache [cacheCap, rowSize] after cache[slot(writePos + t), i] =
 * src[t, i] for t < nNew, slot(p) = p % cacheCap when sliding, else p; other
 * rows keep their values.
 */
export function kvCacheCopyRef(src: ArrayLike<number>, cache: ArrayLike<number>, writePos: number, rowSize: number, nNew: number,
  cacheCap: number, sliding: boolean): Float64Array {
  const out = Float64Array.from(cache);
  for (let t = 0; t < nNew; t++) {
    const slot = sliding ? (writePos + t) % cacheCap : writePos + t;
    for (let i = 0; i < rowSize; i++) out[slot * rowSize + i] = src[t * rowSize + i]!;
  }
  return out;
}

/**
 * The keys (or values) of positions [end - n, end), n = min(end, capacity)
 * for a ring or end for a global cache, in position order, as a head-major
 * cache [nHeads, n, headDim]: what a cache holding those positions at slot
 * position % capacity means, laid out linearly.
 */
export function kvCacheLinearRef(cache: ArrayLike<number>, nHeads: number, headDim: number, capacity: number, end: number,
  ring: boolean): Float64Array {
  const n = ring ? Math.min(end, capacity) : end;
  const out = new Float64Array(nHeads * n * headDim);
  for (let h = 0; h < nHeads; h++) {
    for (let j = 0; j < n; j++) {
      const slot = (end - n + j) % capacity;
      for (let d = 0; d < headDim; d++) out[(h * n + j) * headDim + d] = cache[(h * capacity + slot) * headDim + d]!;
    }
  }
  return out;
}
