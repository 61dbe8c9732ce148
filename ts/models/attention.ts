// Attention of both models over a KV cache on the device: the cache of a
// global layer holds every position (slot = position), a sliding-window
// layer's is a ring of `window` slots (slot = position % window), both in
// the head-major layout [kvHeads, capacity, headDim] that kv_cache_copy
// writes and flash_attn_vec reads. A layer that shares another layer's keys
// and values (Gemma 4's last layers) reads that layer's cache.
//
// Decode: the new token's keys and values are copied into the cache, then
// flash_attn_vec attends over what kvCacheReadSpan says is visible (on a
// ring every slot is inside the window, and attention does not depend on
// the order of the keys, so no mask is needed). Its split of the keys into
// workgroups follows the cache's capacity, not the current length, so that
// a step's plan differs from the last one only in inline bytes (the
// position, the length) and a replayed decode step can be patched (StepPatches).
// Prefill of a prompt (positions 0 .. T-1): 'flash' casts queries, keys and
// values to bf16 and runs flash_attn_prefill (causal, with the window);
// 'vector' runs flash_attn_vec once per query row over f32 keys and values
// (slower, no rounding of the inputs). Either way the cache is then filled
// with the prompt's keys (a ring keeps the last `window`).

import type { Buffer } from '../buffer.ts';
import type { Device } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { cast } from '../ops/elementwise.ts';
import { flashAttnPrefill } from '../ops/flash_attn_prefill.ts';
import { flashAttnVec, flashAttnVecTmpElements, planFlashAttnVec, type FlashAttnVecArgs, type FlashAttnVecMask } from '../ops/flash_attn_vec.ts';
import { kvCacheCopySeqDual, kvCacheReadSpan, planKvCacheCopySeqDual, type KvCacheCopySeqDualArgs } from '../ops/kv_cache_copy.ts';
import type { OpPlan } from '../plan.ts';
import { rows, type Scratch } from './blocks.ts';

export type PrefillAttention = 'flash' | 'vector';

/** One layer's keys and values on the device. */
export interface KvCache {
  readonly k: Buffer;
  readonly v: Buffer;
  readonly nKvHeads: number;
  readonly headDim: number;
  /** Slots per head: the context of a global layer, the window of a ring. */
  readonly capacity: number;
  readonly ring: boolean;
}

export function newKvCache(device: Device, nKvHeads: number, headDim: number, capacity: number, ring: boolean): KvCache {
  return {
    k: device.alloc('f32', [nKvHeads, capacity, headDim]),
    v: device.alloc('f32', [nKvHeads, capacity, headDim]),
    nKvHeads, headDim, capacity, ring,
  };
}

export function releaseKvCache(c: KvCache): void {
  c.k.release();
  c.v.release();
}

/** The shape of one layer's attention. */
export interface AttentionSpec {
  readonly nHeads: number;
  readonly nKvHeads: number;
  readonly headDim: number;
  /** Multiplies q . k (Qwen: headDim^-1/2; Gemma 4: 1, its q_norm scales). */
  readonly scale: number;
  /** Keys visible to a query: the last `window` positions, itself included; null: all before it. */
  readonly window: number | null;
}

/** Workgroups splitting the keys of one row: one per 256 keys, at most 32. */
function workgroups(keys: number): number {
  return Math.min(32, Math.max(1, Math.ceil(keys / 256)));
}

/**
 * The per-step ops of a decode step recorded for replay (Encoder.replay):
 * each at the index of its first recorded dispatch, with its plan for any
 * later position, which patchPlan gives to the recording before a replay.
 */
export class StepPatches {
  readonly ops: { first: number; planAt: (position: number) => OpPlan }[] = [];
  add(first: number, planAt: (position: number) => OpPlan): void {
    this.ops.push({ first, planAt });
  }
}

/** flash_attn_vec's arguments for one query row q [1, nHeads, D] over keys [0, kvSeqLen) of k, v [nKvHeads, capacity, D], in nwg splits. */
function rowArgs(s: Scratch, spec: AttentionSpec, q: Buffer, k: Buffer, v: Buffer, capacity: number, kvSeqLen: number,
  mask: FlashAttnVecMask, out: Buffer, nwg: number): FlashAttnVecArgs {
  const p = {
    batch: 1, nHeads: spec.nHeads, nKvHeads: spec.nKvHeads, headDim: spec.headDim, kvSeqLen, kvCapacity: capacity,
    scale: spec.scale, mask, nwg, ...(mask === 'slidingWindow' ? { slidingWindow: spec.window! } : {}),
  };
  const tmp = nwg > 1 ? s.get(`attn.tmp.${spec.nHeads}.${spec.headDim}.${nwg}`, 'f32', [flashAttnVecTmpElements(p)]) : undefined;
  return { ...p, q, k, v, out, ...(tmp ? { tmp } : {}) };
}

/** flash_attn_vec for one query row of a prompt, split by its own length. */
function attendRow(enc: Encoder, s: Scratch, spec: AttentionSpec, q: Buffer, k: Buffer, v: Buffer, capacity: number, kvSeqLen: number,
  mask: FlashAttnVecMask, out: Buffer): void {
  flashAttnVec(enc, rowArgs(s, spec, q, k, v, capacity, kvSeqLen, mask, out, workgroups(kvSeqLen)));
}

/**
 * One decode token at `position`: q [1, nHeads, D] f32; kNew, vNew [1,
 * nKvHeads, D] f32 written to the cache first (null where the layer reads
 * another layer's cache, written already); out [1, nHeads, D] f32. With
 * `steps`, the two ops' plans for other positions are noted there.
 */
export function attentionDecode(enc: Encoder, s: Scratch, spec: AttentionSpec, cache: KvCache, q: Buffer, kNew: Buffer | null,
  vNew: Buffer | null, out: Buffer, position: number, steps: StepPatches | null = null): void {
  const device = enc.device;
  if (kNew !== null && vNew !== null) {
    const copyArgs = (pos: number): KvCacheCopySeqDualArgs => ({
      srcK: kNew, srcV: vNew, cacheK: cache.k, cacheV: cache.v, nHeads: cache.nKvHeads, headDim: cache.headDim,
      capacity: cache.capacity, seqPosStart: pos, nTokens: 1, ring: cache.ring,
    });
    steps?.add(enc.dispatchCount, (pos) => planKvCacheCopySeqDual(copyArgs(pos), device.limits, device));
    kvCacheCopySeqDual(enc, copyArgs(position));
  }
  const mask: FlashAttnVecMask = !cache.ring && spec.window !== null ? 'slidingWindow' : 'none';
  const nwg = workgroups(cache.capacity);
  const attendArgs = (pos: number): FlashAttnVecArgs =>
    rowArgs(s, spec, q, cache.k, cache.v, cache.capacity, kvCacheReadSpan(pos + 1, cache.capacity, cache.ring).kvSeqLen, mask, out, nwg);
  steps?.add(enc.dispatchCount, (pos) => planFlashAttnVec(attendArgs(pos), device.limits, device));
  flashAttnVec(enc, attendArgs(position));
}

/** Writes a prompt's keys and values [T, nKvHeads, D] (positions 0 .. T-1) into a layer's own cache. */
export function fillCache(enc: Encoder, cache: KvCache, k: Buffer, v: Buffer, tokens: number): void {
  const n = cache.ring ? Math.min(tokens, cache.capacity) : tokens;
  kvCacheCopySeqDual(enc, {
    srcK: k, srcV: v, cacheK: cache.k, cacheV: cache.v, nHeads: cache.nKvHeads, headDim: cache.headDim,
    capacity: cache.capacity, seqPosStart: tokens - n, nTokens: n, srcTokOffset: tokens - n, ring: cache.ring,
  });
}

/**
 * Causal attention of a prompt's T query rows q [T, nHeads, D] over its own
 * keys and values k, v [T, nKvHeads, D] (f32, after norms and rotary
 * embedding), positions 0 .. T-1; out [T, nHeads, D] f32. Does not write
 * any cache (fillCache does).
 */
export function attentionPrefill(enc: Encoder, s: Scratch, spec: AttentionSpec, q: Buffer, k: Buffer, v: Buffer, out: Buffer,
  tokens: number, mode: PrefillAttention): void {
  const { nHeads, nKvHeads, headDim: d } = spec;
  if (mode === 'flash') {
    // Named by the heads' shape: layers of two kinds (Gemma 4's sliding and global ones) keep a set each instead
    // of re-allocating at every change of kind.
    const at = `${nHeads}.${nKvHeads}.${d}`;
    const qb = s.get(`attn.q16.${at}`, 'bf16', [tokens, nHeads, d]);
    const kb = s.get(`attn.k16.${at}`, 'bf16', [tokens, nKvHeads, d]);
    const vb = s.get(`attn.v16.${at}`, 'bf16', [tokens, nKvHeads, d]);
    const ob = s.get(`attn.o16.${at}`, 'bf16', [tokens, nHeads, d]);
    cast(enc, { input: q, output: qb });
    cast(enc, { input: k, output: kb });
    cast(enc, { input: v, output: vb });
    flashAttnPrefill(enc, {
      q: qb, k: kb, v: vb, out: ob, batch: 1, nHeads, nKvHeads, headDim: d, seqLenQ: tokens, seqLenK: tokens,
      scale: spec.scale, causal: true, layout: 'seqMajor', ...(spec.window !== null ? { slidingWindow: spec.window } : {}),
    });
    cast(enc, { input: ob, output: out });
    return;
  }
  // The prompt's keys head-major, one slot per position; row t sees slots < t + 1 (and the window's).
  const kh = s.get(`attn.kh.${nKvHeads}.${d}`, 'f32', [nKvHeads, tokens, d]);
  const vh = s.get(`attn.vh.${nKvHeads}.${d}`, 'f32', [nKvHeads, tokens, d]);
  kvCacheCopySeqDual(enc, {
    srcK: k, srcV: v, cacheK: kh, cacheV: vh, nHeads: nKvHeads, headDim: d, capacity: tokens, seqPosStart: 0, nTokens: tokens,
  });
  const mask: FlashAttnVecMask = spec.window !== null ? 'slidingWindow' : 'none';
  for (let t = 0; t < tokens; t++) {
    attendRow(enc, s, spec, rows(q, t, 1, nHeads * d).view('f32', [1, nHeads, d], 0), kh, vh, tokens, t + 1, mask,
      rows(out, t, 1, nHeads * d).view('f32', [1, nHeads, d], 0));
  }
}
