import { describe, expect, test } from 'bun:test';
import { type DType, type Device } from '../ts/index.ts';
import {
  FLASH_ATTN_VEC_PARAMS_LAYOUT,
  FLASH_ATTN_VEC_REDUCE_PARAMS_LAYOUT,
  FLASH_ATTN_VEC_VARLEN_PARAMS_LAYOUT,
  flashAttnVec,
  flashAttnVecTmpElements,
  flashAttnVecVarlen,
  packFlashAttnVecParams,
  packFlashAttnVecReduceParams,
  packFlashAttnVecVarlenParams,
  validateFlashAttnVec,
  validateFlashAttnVecVarlen,
  type FlashAttnVecBuffers,
  type FlashAttnVecKvDtype,
  type FlashAttnVecMask,
  type FlashAttnVecParams,
  type FlashAttnVecVarlenParams,
  flashAttnVecRef,
  flashAttnVecSpan,
  flashAttnVecVarlenRef,
  type FlashAttnVecRefShape,
  type FlashAttnVecVarlenRefShape,
} from '../ts/ops/flash_attn_vec.ts';
import { kvCacheCopySeq } from '../ts/ops/kv_cache_copy.ts';
import { describeValidation, TOL, describeBackends, maxRelErr, poisoned, randomArray, rng, roundedTo, scaledErr, expectInvalidParts } from './helpers.ts';
import { readField } from './metal-source.ts';
import * as faOps from '../ts/ops/flash_attn_vec.ts';
import * as mlx from '../ts/index.ts';
import { a, buf, F, int, opContract, out, U32, type KeySpec } from './op-contract.ts';
import type { Buffer } from '../ts/index.ts';

function refShape(p: FlashAttnVecParams): FlashAttnVecRefShape {
  return { ...p, slidingWindow: p.slidingWindow ?? 0, softcap: p.softcap ?? 0 };
}
function varlenRefShape(p: FlashAttnVecVarlenParams, seqLens: readonly number[]): FlashAttnVecVarlenRefShape {
  return { ...p, slidingWindow: p.slidingWindow ?? 0, softcap: p.softcap ?? 0, ring: p.ring === true, seqLens };
}

/**
 * Attention written a second way, to check the reference: each sequence's
 * keys unrolled into position order (position j from its slot), K and V heads
 * repeated to nHeads, a mask row of 0 / -Infinity over every position below
 * the length, then softmax.
 */
function attentionExpanded(s: FlashAttnVecVarlenRefShape, q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>): Float64Array {
  const D = s.headDim;
  const out = new Float64Array(s.batch * s.nHeads * D);
  for (let b = 0; b < s.batch; b++) {
    const len = s.seqLens[b]!;
    // Positions held: a ring the last kvCapacity, a global cache those below kvCapacity.
    const held = (j: number): boolean => (s.ring ? j >= len - s.kvCapacity : j < s.kvCapacity);
    const inWindow = (j: number): boolean => !(s.mask === 'slidingWindow' && s.slidingWindow > 0) || len - 1 - j < s.slidingWindow;
    for (let h = 0; h < s.nHeads; h++) {
      const r = b * s.nHeads + h;
      const kvBase = (b * s.nKvHeads + Math.floor((h * s.nKvHeads) / s.nHeads)) * s.kvCapacity * D;
      const row = (j: number): number => kvBase + (s.ring ? j % s.kvCapacity : j) * D;
      const logits = Array.from({ length: len }, (_, j) => {
        if (!held(j) || !inWindow(j)) return -Infinity;
        let dot = 0;
        for (let d = 0; d < D; d++) dot += q[r * D + d]! * k[row(j) + d]!;
        const x = dot * s.scale;
        return s.softcap > 0 ? Math.tanh(x / s.softcap) * s.softcap : x;
      });
      if (len === 0) continue;
      const m = Math.max(...logits);
      const e = logits.map((x) => Math.exp(x - m));
      const z = e.reduce((a, x) => a + x, 0);
      for (let d = 0; d < D; d++) {
        let acc = 0;
        for (let j = 0; j < len; j++) if (e[j]! > 0) acc += (e[j]! / z) * v[row(j) + d]!;
        out[r * D + d] = acc;
      }
    }
  }
  return out;
}

interface Case {
  name: string;
  p: FlashAttnVecParams;
  kv: FlashAttnVecKvDtype;
}

const base: FlashAttnVecParams = {
  batch: 1, nHeads: 2, nKvHeads: 2, headDim: 256, kvSeqLen: 1, kvCapacity: 1, scale: 1 / 16, mask: 'none', nwg: 1,
};
const mk = (o: Partial<FlashAttnVecParams>): FlashAttnVecParams => ({ ...base, ...o });

// Every head dim and K/V dtype; one key; keys not a multiple of the Metal
// block (32) or the CUDA tile (16), and exactly one of each; more splits
// than blocks; GQA groups below, at and above the 8 heads of a CUDA mma
// block; windows of one key and past the start.
const CASES: Case[] = [
  { name: 'D128 f32, GQA 1, kv 1, nwg 1', kv: 'f32', p: mk({ headDim: 128, scale: 1 / 11 }) },
  { name: 'D128 f16, GQA 8, kv 33 of capacity 40, nwg 32', kv: 'f16', p: mk({ headDim: 128, nHeads: 8, nKvHeads: 1, kvSeqLen: 33, kvCapacity: 40, nwg: 32 }) },
  { name: 'D128 bf16, batch 3, GQA 2, kv 100 of 128, nwg 3, window 40, softcap 5', kv: 'bf16', p: mk({ headDim: 128, batch: 3, nHeads: 4, nKvHeads: 2, kvSeqLen: 100, kvCapacity: 128, nwg: 3, mask: 'slidingWindow', slidingWindow: 40, softcap: 5, scale: 0.3 }) },
  { name: 'D128 bf16, GQA 6 (a partial block of heads), kv 16 (one CUDA tile), nwg 2', kv: 'bf16', p: mk({ headDim: 128, nHeads: 12, nKvHeads: 2, kvSeqLen: 16, kvCapacity: 16, nwg: 2 }) },
  { name: 'D256 f32, GQA 1, kv 1, nwg 1', kv: 'f32', p: mk({}) },
  { name: 'D256 f32, GQA 2, kv 31, nwg 3, causal', kv: 'f32', p: mk({ nHeads: 4, nKvHeads: 2, kvSeqLen: 31, kvCapacity: 31, nwg: 3, mask: 'causal' }) },
  { name: 'D256 f16, GQA 8, kv 33 of capacity 40, nwg 32', kv: 'f16', p: mk({ nHeads: 8, nKvHeads: 1, kvSeqLen: 33, kvCapacity: 40, nwg: 32 }) },
  { name: 'D256 bf16, 16/2 heads, kv 1000 of 1024, nwg 7, window 300', kv: 'bf16', p: mk({ nHeads: 16, nKvHeads: 2, kvSeqLen: 1000, kvCapacity: 1024, nwg: 7, mask: 'slidingWindow', slidingWindow: 300 }) },
  { name: 'D256 bf16, GQA 16 (two CUDA blocks of heads), kv 65, nwg 2', kv: 'bf16', p: mk({ nHeads: 16, nKvHeads: 1, kvSeqLen: 65, kvCapacity: 65, nwg: 2 }) },
  { name: 'D256 f32, batch 2, GQA 2, kv 100 of 128, nwg 3, window 64, softcap 5', kv: 'f32', p: mk({ batch: 2, nHeads: 4, nKvHeads: 2, kvSeqLen: 100, kvCapacity: 128, nwg: 3, mask: 'slidingWindow', slidingWindow: 64, scale: 0.5, softcap: 5 }) },
  { name: 'D256 f16, GQA 2, kv 1000 of 1024, nwg 1, window 300', kv: 'f16', p: mk({ nHeads: 2, nKvHeads: 1, kvSeqLen: 1000, kvCapacity: 1024, nwg: 1, mask: 'slidingWindow', slidingWindow: 300 }) },
  { name: 'D256 f32, batch 2, GQA 1, kv 1000, nwg 32, window past the start', kv: 'f32', p: mk({ batch: 2, nHeads: 1, nKvHeads: 1, kvSeqLen: 1000, kvCapacity: 1000, nwg: 32, mask: 'slidingWindow', slidingWindow: 4096 }) },
  { name: 'D512 f32, GQA 2, kv 100, nwg 3, window 40', kv: 'f32', p: mk({ headDim: 512, nHeads: 4, nKvHeads: 2, kvSeqLen: 100, kvCapacity: 100, nwg: 3, mask: 'slidingWindow', slidingWindow: 40, scale: 1 / 22 }) },
  { name: 'D512 f16, GQA 1, kv 1000, nwg 3, causal, softcap 5', kv: 'f16', p: mk({ headDim: 512, nHeads: 1, nKvHeads: 1, kvSeqLen: 1000, kvCapacity: 1000, nwg: 3, mask: 'causal', scale: 1, softcap: 5 }) },
  { name: 'D512 f32, GQA 2, kv 33, nwg 32, window 1', kv: 'f32', p: mk({ headDim: 512, nHeads: 2, nKvHeads: 1, kvSeqLen: 33, kvCapacity: 33, nwg: 32, mask: 'slidingWindow', slidingWindow: 1 }) },
  { name: 'D512 f32, GQA 8, kv 1, nwg 3', kv: 'f32', p: mk({ headDim: 512, nHeads: 8, nKvHeads: 1, nwg: 3 }) },
  { name: 'D512 bf16, batch 2, GQA 4, kv 257 of 260, nwg 5, window 1', kv: 'bf16', p: mk({ headDim: 512, batch: 2, nHeads: 8, nKvHeads: 2, kvSeqLen: 257, kvCapacity: 260, nwg: 5, mask: 'slidingWindow', slidingWindow: 1, scale: 1 / 22 }) },
  { name: 'D512 bf16, GQA 8, kv 32 (one Metal block), nwg 1', kv: 'bf16', p: mk({ headDim: 512, nHeads: 8, nKvHeads: 1, kvSeqLen: 32, kvCapacity: 32, scale: 1 / 22 }) },
];

interface VarlenCase {
  name: string;
  p: FlashAttnVecVarlenParams;
  seqLens: number[];
  kv: FlashAttnVecKvDtype;
}
const vmk = (o: Partial<FlashAttnVecVarlenParams>): FlashAttnVecVarlenParams => ({
  batch: 1, nHeads: 8, nKvHeads: 1, headDim: 256, kvCapacity: 32, scale: 1 / 16, mask: 'none', nwg: 1, ...o,
});

// Batches of different lengths (0 and 1 among them); rings at the window's
// edges: a position below the window, at it, one past it, wrapped many times;
// a window narrower than its ring; a global cache given lengths past it.
const VARLEN_CASES: VarlenCase[] = [
  { name: 'D256 bf16 ring of 32 (the window): positions 1, 31, 32, 33, 1000', kv: 'bf16', seqLens: [1, 31, 32, 33, 1000],
    p: vmk({ batch: 5, ring: true, nwg: 4 }) },
  { name: 'D128 f16 global cache of 64: lengths 0, 1, 17, 64, nwg 32, GQA 2', kv: 'f16', seqLens: [0, 1, 17, 64],
    p: vmk({ batch: 4, headDim: 128, nHeads: 4, nKvHeads: 2, kvCapacity: 64, nwg: 32, scale: 1 / 11 }) },
  { name: 'D512 f32 ring of 40, window 24, softcap 8: positions 23, 24, 25, 4097', kv: 'f32', seqLens: [23, 24, 25, 4097],
    p: vmk({ batch: 4, headDim: 512, nHeads: 8, nKvHeads: 2, kvCapacity: 40, ring: true, mask: 'slidingWindow', slidingWindow: 24, softcap: 8, nwg: 3, scale: 1 / 22 }) },
  { name: 'D256 f32 global cache of 48, window 16: lengths 60 (read as 48), 33', kv: 'f32', seqLens: [60, 33],
    p: vmk({ batch: 2, nHeads: 4, nKvHeads: 2, kvCapacity: 48, mask: 'slidingWindow', slidingWindow: 16 }) },
  { name: 'D128 bf16 ring of 16, window 16, GQA 16: positions 16, 17, 33', kv: 'bf16', seqLens: [16, 17, 33],
    p: vmk({ batch: 3, headDim: 128, nHeads: 16, nKvHeads: 1, kvCapacity: 16, ring: true, mask: 'slidingWindow', slidingWindow: 16, nwg: 2, scale: 1 / 11 }) },
  { name: 'D512 bf16 global cache of 300, causal: lengths 100, 7, 257, nwg 5', kv: 'bf16', seqLens: [100, 7, 257],
    p: vmk({ batch: 3, headDim: 512, nHeads: 4, nKvHeads: 2, kvCapacity: 300, mask: 'causal', nwg: 5, scale: 1 / 22 }) },
  { name: 'D256 f16 ring of 100: positions 99, 100, 101, 12345, nwg 8', kv: 'f16', seqLens: [99, 100, 101, 12345],
    p: vmk({ batch: 4, nHeads: 16, nKvHeads: 2, kvCapacity: 100, ring: true, nwg: 8 }) },
];

/**
 * Seeded inputs in [-1, 1), rounded to the dtypes of their buffers. K and V
 * slots the op must not read (positions outside each sequence's visible
 * span) are NaN, so any use of them shows in the output (unless poison is false).
 */
function makeInputs(p: FlashAttnVecVarlenParams, seqLens: readonly number[], kv: DType, seed: number, poison = true):
  { q: Float64Array; k: Float64Array; v: Float64Array } {
  const r = rng(seed);
  const D = p.headDim;
  const q = randomArray(r, p.batch * p.nHeads * D);
  const k = randomArray(r, p.batch * p.nKvHeads * p.kvCapacity * D);
  const v = randomArray(r, k.length);
  for (let b = 0; b < p.batch && poison; b++) {
    const sp = flashAttnVecSpan(seqLens[b]!, p.kvCapacity, p.ring === true, p.mask, p.slidingWindow ?? 0);
    const used = new Uint8Array(p.kvCapacity);
    for (let j = sp.lo; j < sp.hi; j++) used[sp.slot(j)] = 1;
    for (let h = 0; h < p.nKvHeads; h++) {
      for (let s = 0; s < p.kvCapacity; s++) {
        if (used[s]) continue;
        const off = ((b * p.nKvHeads + h) * p.kvCapacity + s) * D;
        k.fill(NaN, off, off + D);
        v.fill(NaN, off, off + D);
      }
    }
  }
  return { q: roundedTo('f32', q), k: roundedTo(kv, k), v: roundedTo(kv, v) };
}

const uniformLens = (p: FlashAttnVecParams): number[] => new Array<number>(p.batch).fill(p.kvSeqLen);

describe('flash_attn_vec reference', () => {
  test('matches attention written in position order with expanded heads and an additive mask', () => {
    for (const c of CASES.filter((x) => x.p.kvSeqLen <= 100)) {
      const { q, k, v } = makeInputs(c.p, uniformLens(c.p), c.kv, 5, false);
      const s = refShape(c.p);
      const expanded = attentionExpanded({ ...s, ring: false, seqLens: uniformLens(c.p) }, q, k, v);
      expect([c.name, maxRelErr(flashAttnVecRef(s, q, k, v), expanded) < 1e-12]).toEqual([c.name, true]);
    }
    for (const c of VARLEN_CASES.filter((x) => x.p.headDim <= 256)) {
      const { q, k, v } = makeInputs(c.p, c.seqLens, c.kv, 6, false);
      const s = varlenRefShape(c.p, c.seqLens);
      expect([c.name, maxRelErr(flashAttnVecVarlenRef(s, q, k, v), attentionExpanded(s, q, k, v)) < 1e-12]).toEqual([c.name, true]);
    }
  });

  test('causal equals none for the decode query; a window past the start equals none; softcap changes the result', () => {
    const c = CASES[9]!;
    const p = { ...c.p, mask: 'none' as const, kvCapacity: c.p.kvSeqLen };
    const { q, k, v } = makeInputs(p, uniformLens(p), 'f32', 6);
    const s = refShape(p);
    const none = flashAttnVecRef(s, q, k, v);
    expect(flashAttnVecRef({ ...s, mask: 'causal' }, q, k, v)).toEqual(none);
    expect(flashAttnVecRef({ ...s, mask: 'slidingWindow', slidingWindow: s.kvSeqLen }, q, k, v)).toEqual(none);
    expect(maxRelErr(flashAttnVecRef({ ...s, softcap: 0 }, q, k, v), none)).toBeGreaterThan(1e-2);
  });

  test('spans: a ring keeps the last kvCapacity positions, a window the last slidingWindow, a global cache those below kvCapacity', () => {
    const at = (len: number, cap: number, ring: boolean, w = 0): [number, number] => {
      const s = flashAttnVecSpan(len, cap, ring, w > 0 ? 'slidingWindow' : 'none', w);
      return [s.lo, s.hi];
    };
    expect(at(5, 8, true)).toEqual([0, 5]);
    expect(at(8, 8, true)).toEqual([0, 8]);
    expect(at(9, 8, true)).toEqual([1, 9]);
    expect(at(1000, 8, true, 3)).toEqual([997, 1000]);
    expect(at(20, 16, false)).toEqual([0, 16]);
    expect(at(0, 16, true)).toEqual([0, 0]);
    expect(flashAttnVecSpan(1000, 8, true, 'none', 0).slot(999)).toBe(7);
  });
});

describe('flash_attn_vec params', () => {
  test('FlashAttnVecParams packer matches the struct of the header', () => {
    const fields = FLASH_ATTN_VEC_PARAMS_LAYOUT;
    const p: FlashAttnVecParams = {
      batch: 3, nHeads: 16, nKvHeads: 4, headDim: 512, kvSeqLen: 777, kvCapacity: 1024, scale: 0.125,
      mask: 'slidingWindow', slidingWindow: 321, softcap: 30, nwg: 7,
    };
    const want: Record<string, number> = {
      n_heads: 16, n_kv_heads: 4, head_dim: 512, kv_seq_len: 777, kv_capacity: 1024, scale: 0.125,
      mask_type: 2, sliding_window: 321, softcap: 30, nwg: 7,
    };
    const bytes = packFlashAttnVecParams(p);
    expect(bytes.byteLength).toBe(4 * fields.length);
    expect(fields.map((f) => f.name)).toEqual(Object.keys(want));
    for (const f of fields) expect([f.name, readField(bytes, f)]).toEqual([f.name, want[f.name]!]);
    const masks: [FlashAttnVecMask, number][] = [['none', 0], ['causal', 1], ['slidingWindow', 2]];
    for (const [mask, code] of masks) {
      expect(new DataView(packFlashAttnVecParams({ ...p, mask }).buffer).getUint32(24, true)).toBe(code);
    }
    // The window is packed only under its mask.
    expect(new DataView(packFlashAttnVecParams({ ...p, mask: 'causal' }).buffer).getUint32(28, true)).toBe(0);
  });

  test('FlashAttnVecVarlenParams packer matches the struct of the header', () => {
    const fields = FLASH_ATTN_VEC_VARLEN_PARAMS_LAYOUT;
    const p: FlashAttnVecVarlenParams = {
      batch: 3, nHeads: 16, nKvHeads: 2, headDim: 128, kvCapacity: 1024, scale: 0.5, mask: 'slidingWindow', slidingWindow: 1024,
      softcap: 50, nwg: 9, ring: true,
    };
    const want: Record<string, number> = {
      n_heads: 16, n_kv_heads: 2, head_dim: 128, kv_capacity: 1024, scale: 0.5, mask_type: 2, sliding_window: 1024,
      softcap: 50, nwg: 9, ring: 1,
    };
    const bytes = packFlashAttnVecVarlenParams(p);
    expect(bytes.byteLength).toBe(4 * fields.length);
    expect(fields.map((f) => f.name)).toEqual(Object.keys(want));
    for (const f of fields) expect([f.name, readField(bytes, f)]).toEqual([f.name, want[f.name]!]);
    const ring = fields.find((f) => f.name === 'ring')!;
    expect(readField(packFlashAttnVecVarlenParams({ ...p, ring: undefined }), ring)).toBe(0);
  });

  test('FlashAttnVecReduceParams packer matches the struct of the header', () => {
    const fields = FLASH_ATTN_VEC_REDUCE_PARAMS_LAYOUT;
    const bytes = packFlashAttnVecReduceParams({ batch: 3, nHeads: 5 });
    expect(bytes.byteLength).toBe(4 * fields.length);
    expect(new DataView(bytes.buffer).getUint32(0, true)).toBe(15);
  });

  test('tmp size: nwg partial rows of headDim plus nwg (S, M) pairs per row; none for nwg 1', () => {
    expect(flashAttnVecTmpElements({ batch: 2, nHeads: 3, headDim: 256, nwg: 4 })).toBe(2 * 3 * 4 * (256 + 2));
    expect(flashAttnVecTmpElements({ batch: 2, nHeads: 3, headDim: 256, nwg: 1 })).toBe(0);
  });

});

function allocFor(dev: Device, p: Pick<FlashAttnVecParams, 'batch' | 'nHeads' | 'nKvHeads' | 'kvCapacity' | 'headDim' | 'nwg'>, kv: DType): FlashAttnVecBuffers {
  const qn = p.batch * p.nHeads * p.headDim;
  const kvn = p.batch * p.nKvHeads * p.kvCapacity * p.headDim;
  const bufs: FlashAttnVecBuffers = {
    q: dev.alloc('f32', [qn]), k: dev.alloc(kv, [kvn]), v: dev.alloc(kv, [kvn]), out: dev.alloc('f32', [qn]),
  };
  if (p.nwg > 1) bufs.tmp = dev.alloc('f32', [flashAttnVecTmpElements(p)]);
  return bufs;
}

function releaseAll(b: FlashAttnVecBuffers): void {
  for (const x of [b.q, b.k, b.v, b.out, b.tmp]) x?.release();
}

/** Uploads the inputs, poisons out and tmp, runs record, returns out's numbers. */
function runOp(dev: Device, p: FlashAttnVecVarlenParams, kv: DType, x: { q: Float64Array; k: Float64Array; v: Float64Array },
  rec: (enc: mlx.Encoder, bufs: FlashAttnVecBuffers) => void): Float64Array {
  const D = p.headDim;
  const bufs: FlashAttnVecBuffers = {
    q: dev.upload('f32', [p.batch, p.nHeads, D], x.q),
    k: dev.upload(kv, [p.batch, p.nKvHeads, p.kvCapacity, D], x.k),
    v: dev.upload(kv, [p.batch, p.nKvHeads, p.kvCapacity, D], x.v),
    out: poisoned(dev, 'f32', [p.batch, p.nHeads, D]),
  };
  if (p.nwg > 1) bufs.tmp = poisoned(dev, 'f32', [flashAttnVecTmpElements(p)]);
  const enc = dev.encoder();
  rec(enc, bufs);
  enc.commitAndWait();
  enc.release();
  const got = bufs.out.readNumbers();
  releaseAll(bufs);
  return got;
}

describeBackends('flash_attn_vec', ({ device }) => {
  test('validation: every rule on the params', () => {
    const dev = device();
    const ok = mk({ nHeads: 4, nKvHeads: 2, kvSeqLen: 40, kvCapacity: 64, nwg: 2 });
    const bufs = allocFor(dev, ok, 'f32');
    validateFlashAttnVec({ ...ok, ...bufs });
    for (const arg of ['batch', 'nHeads', 'nKvHeads', 'headDim', 'kvSeqLen', 'kvCapacity', 'nwg'] as const) {
      expectInvalidParts(() => validateFlashAttnVec({ ...ok, [arg]: 0, ...bufs }), 'flash_attn_vec', `${arg} must be a positive integer`, '(got 0)');
    }
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, nKvHeads: 2 ** 32, ...bufs }), 'flash_attn_vec', 'nKvHeads must be at most 2^32 - 1');
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, batch: 2 ** 31, nwg: 2, ...bufs }), 'flash_attn_vec', 'batch * nwg must be at most 2^32 - 1', '(got 4294967296)');
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, mask: 'slidingWindow', slidingWindow: 2 ** 32, ...bufs }), 'flash_attn_vec', 'slidingWindow must be at most 2^32 - 1');
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, batch: 2 ** 20, kvCapacity: 2 ** 25, ...bufs }), 'flash_attn_vec', 'k elements must be a product of integers at most 2^53 - 1');
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, headDim: 64, ...bufs }), 'flash_attn_vec', 'headDim must be 128, 256 or 512', '(got 64)');
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, nKvHeads: 3, ...bufs }), 'flash_attn_vec', 'nHeads must be a multiple of nKvHeads (3)', '(got 4)');
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, kvSeqLen: 65, ...bufs }), 'flash_attn_vec', 'kvSeqLen must be at most kvCapacity (64)', '(got 65)');
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, nwg: 33, ...bufs }), 'flash_attn_vec', 'nwg must be at most 32', '(got 33)');
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, mask: 'upper' as FlashAttnVecMask, ...bufs }), 'flash_attn_vec', 'mask must be one of none, causal, slidingWindow', '(got upper)');
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, mask: 'slidingWindow', ...bufs }), 'flash_attn_vec', 'slidingWindow must be a positive integer', '(got 0)');
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, mask: 'slidingWindow', slidingWindow: 2.5, ...bufs }), 'flash_attn_vec', 'slidingWindow must be a positive integer', '(got 2.5)');
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, scale: NaN, ...bufs }), 'flash_attn_vec', 'scale must be a finite number', '(got NaN)');
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, softcap: -1, ...bufs }), 'flash_attn_vec', 'softcap must be a finite number >= 0', '(got -1)');
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, softcap: Infinity, ...bufs }), 'flash_attn_vec', 'softcap must be a finite number >= 0', '(got Infinity)');
    releaseAll(bufs);
  });

  test('validation: dtype and element count of every buffer, tmp when nwg > 1', () => {
    const dev = device();
    const ok = mk({ nHeads: 4, nKvHeads: 2, kvSeqLen: 40, kvCapacity: 64, nwg: 2 });
    const bufs = allocFor(dev, ok, 'f16');
    validateFlashAttnVec({ ...ok, ...bufs });
    const qn = bufs.q.elementCount;
    const kvn = bufs.k.elementCount;
    const tmpn = flashAttnVecTmpElements(ok);
    const swaps: [keyof FlashAttnVecBuffers, DType, number, string[]][] = [
      ['q', 'f16', qn, ['q.dtype must be f32', '(got f16)']],
      ['q', 'f32', qn + 1, ['q.elementCount must be ' + qn]],
      ['k', 'u16', kvn, ['k.dtype must be one of f32, f16, bf16', '(got u16)']],
      ['k', 'f16', kvn - 1, ['k.elementCount must be ' + kvn]],
      ['v', 'bf16', kvn, ['v.dtype must be f16', '(got bf16)']],
      ['v', 'f16', kvn * 2, ['v.elementCount must be ' + kvn]],
      ['out', 'f16', qn, ['out.dtype must be f32', '(got f16)']],
      ['out', 'f32', qn - 4, ['out.elementCount must be ' + qn]],
      ['tmp', 'f16', tmpn, ['tmp.dtype must be f32', '(got f16)']],
      ['tmp', 'f32', tmpn - 2, ['tmp.elementCount must be ' + tmpn]],
    ];
    for (const [key, dtype, n, parts] of swaps) {
      const wrong = dev.alloc(dtype, [n]);
      expectInvalidParts(() => validateFlashAttnVec({ ...ok, ...{ ...bufs, [key]: wrong } }), 'flash_attn_vec', ...parts);
      wrong.release();
    }
    const { tmp, ...noTmp } = bufs;
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, ...noTmp }), 'flash_attn_vec', 'tmp must be a f32 buffer of flashAttnVecTmpElements = ' + tmpn);
    validateFlashAttnVec({ ...ok, nwg: 1, ...noTmp });
    const enc = dev.encoder();
    expectInvalidParts(() => flashAttnVec(enc, { ...ok, ...bufs, headDim: 64 }), 'flash_attn_vec', 'headDim must be 128, 256 or 512');
    expect(enc.barrierCount).toBe(0);
    enc.release();
    tmp?.release();
    releaseAll(noTmp);
  });

  test('validation (varlen): seqLens, ring, the window on a ring, and the shared rules under its own name', () => {
    const dev = device();
    const ok = vmk({ batch: 3, nHeads: 4, nKvHeads: 2, kvCapacity: 64, nwg: 2, ring: true, mask: 'slidingWindow', slidingWindow: 64 });
    const bufs = allocFor(dev, ok, 'bf16');
    const seqLens = dev.upload('u32', [3], [1, 64, 1000]);
    const args = { ...ok, ...bufs, seqLens };
    validateFlashAttnVecVarlen(args);
    const op = 'flash_attn_vec_varlen';
    expectInvalidParts(() => validateFlashAttnVecVarlen({ ...args, slidingWindow: 65 }), op,
      'slidingWindow must be at most kvCapacity (64) on a ring, which holds the last kvCapacity positions', '(got 65)');
    validateFlashAttnVecVarlen({ ...args, ring: false, slidingWindow: 65 });
    expectInvalidParts(() => validateFlashAttnVecVarlen({ ...args, ring: 1 as unknown as boolean }), op, 'ring must be true, false or absent', '(got 1)');
    expectInvalidParts(() => validateFlashAttnVecVarlen({ ...args, seqLens: undefined as unknown as mlx.Buffer }), op, 'seqLens must be a Buffer', '(got none)');
    const wrongType = dev.alloc('i32', [3]);
    expectInvalidParts(() => validateFlashAttnVecVarlen({ ...args, seqLens: wrongType }), op, 'seqLens.dtype must be u32', '(got i32)');
    const wrongCount = dev.alloc('u32', [4]);
    expectInvalidParts(() => validateFlashAttnVecVarlen({ ...args, seqLens: wrongCount }), op, 'seqLens.elementCount must be 3', '(got 4');
    expectInvalidParts(() => validateFlashAttnVecVarlen({ ...args, headDim: 96 }), op, 'headDim must be 128, 256 or 512', '(got 96)');
    expectInvalidParts(() => validateFlashAttnVecVarlen({ ...args, kvCapacity: 0 }), op, 'kvCapacity must be a positive integer', '(got 0)');
    expectInvalidParts(() => validateFlashAttnVecVarlen({ ...args, out: bufs.k }), op, 'out.dtype must be f32', '(got bf16)');
    const enc = dev.encoder();
    expectInvalidParts(() => flashAttnVecVarlen(enc, { ...args, nwg: 40 }), op, 'nwg must be at most 32', '(got 40)');
    enc.release();
    for (const b of [wrongType, wrongCount, seqLens]) b.release();
    releaseAll(bufs);
  });

  // Tolerance: f32 (max |got - want| / max |want| below TOL.f32) for every K/V
  // dtype. The reference works on the K/V values as stored (f16 / bf16 decoded
  // exactly), so only the kernel's arithmetic differs: f32 everywhere on
  // Metal, and on CUDA f32 for f32 K/V while the f16 / bf16 tensor-core
  // kernels split the query and the softmax weights into two 16-bit terms
  // (hi + lo), which carry them to about 2^-22 (f16) and 2^-18 (bf16)
  // relative; the CPU simulation of those kernels
  // (shaders/cuda/tests/sim/flash_attn_vec_driver.cpp) measures up to 4e-7
  // (f16) and 3.3e-6 (bf16) at these shapes. The rounding error is absolute,
  // of order epsilon times the output's scale (each output is a convex
  // combination of V rows), so it is measured against the largest |want|.
  for (const c of CASES) {
    test(`parity: ${c.name}`, () => {
      const dev = device();
      const lens = uniformLens(c.p);
      const x = makeInputs(c.p, lens, c.kv, 100 + CASES.indexOf(c));
      const got = runOp(dev, c.p, c.kv, x, (enc, bufs) => flashAttnVec(enc, { ...c.p, ...bufs }));
      const err = scaledErr(got, flashAttnVecRef(refShape(c.p), x.q, x.k, x.v));
      console.log(`flash_attn_vec ${c.name}: max abs err / max |want| ${err.toExponential(2)}`);
      expect(err).toBeLessThan(TOL.f32);
    });
  }

  for (const c of VARLEN_CASES) {
    test(`parity (varlen): ${c.name}`, () => {
      const dev = device();
      const x = makeInputs(c.p, c.seqLens, c.kv, 200 + VARLEN_CASES.indexOf(c));
      const seqLens = dev.upload('u32', [c.p.batch], c.seqLens);
      const got = runOp(dev, c.p, c.kv, x, (enc, bufs) => flashAttnVecVarlen(enc, { ...c.p, ...bufs, seqLens }));
      seqLens.release();
      const want = flashAttnVecVarlenRef(varlenRefShape(c.p, c.seqLens), x.q, x.k, x.v);
      const err = scaledErr(got, want);
      console.log(`flash_attn_vec_varlen ${c.name}: max abs err / max |want| ${err.toExponential(2)}`);
      expect(err).toBeLessThan(TOL.f32);
      // A sequence of length 0 gives zeros.
      const D = c.p.headDim;
      c.seqLens.forEach((len, b) => {
        if (len === 0) expect(got.slice(b * c.p.nHeads * D, (b + 1) * c.p.nHeads * D).every((y) => y === 0)).toBe(true);
      });
    });
  }

  test('varlen with every length kvSeqLen on a global cache is the main kernel, bit for bit (one body)', () => {
    const dev = device();
    for (const kv of ['f32', 'f16', 'bf16'] as const) {
      const p = mk({ batch: 2, headDim: 128, nHeads: 8, nKvHeads: 2, kvSeqLen: 77, kvCapacity: 80, nwg: 3, mask: 'slidingWindow', slidingWindow: 50, softcap: 4 });
      const lens = uniformLens(p);
      const x = makeInputs(p, lens, kv, 300);
      const main = runOp(dev, p, kv, x, (enc, bufs) => flashAttnVec(enc, { ...p, ...bufs }));
      const seqLens = dev.upload('u32', [p.batch], lens);
      const { kvSeqLen: _, ...vp } = p;
      const varlen = runOp(dev, p, kv, x, (enc, bufs) => flashAttnVecVarlen(enc, { ...vp, ...bufs, seqLens }));
      seqLens.release();
      expect([kv, Array.from(varlen)]).toEqual([kv, Array.from(main)]);
    }
  });

  // A sliding layer's decode as a runtime runs it: kv_cache_copy writes each
  // sequence's prefill (its last `window` tokens) and then one token per step
  // into a bf16 ring of capacity window (each sequence's cache a view of one
  // allocation), and flash_attn_vec_varlen reads the rings at the sequences'
  // own positions, checked against attention over each sequence's history.
  test('kv_cache_copy rings feed flash_attn_vec_varlen: prefill, then decode steps past the window', () => {
    const dev = device();
    const W = 16, D = 128, HKV = 2, H = 8, B = 2;
    const prefill = [21, 5];
    const steps = 20;
    const r = rng(400);
    const total = Math.max(...prefill) + steps;
    // Per sequence, the keys and values of every position (bf16 values), [total, HKV, D].
    const hist = Array.from({ length: B }, () => ({ k: roundedTo('bf16', randomArray(r, total * HKV * D)), v: roundedTo('bf16', randomArray(r, total * HKV * D)) }));
    const cacheK = poisoned(dev, 'bf16', [B, HKV, W, D]);
    const cacheV = poisoned(dev, 'bf16', [B, HKV, W, D]);
    const ringOf = (c: mlx.Buffer, b: number): mlx.Buffer => c.view('bf16', [HKV, W, D], b * HKV * W * D * 2);
    // Positions [start, start + n) of sequence b's keys or values into its ring.
    const write = (b: number, which: 'k' | 'v', start: number, n: number): void => {
      const src = dev.upload('bf16', [n, HKV, D], hist[b]![which].subarray(start * HKV * D, (start + n) * HKV * D));
      const enc = dev.encoder();
      kvCacheCopySeq(enc, { src, cache: ringOf(which === 'k' ? cacheK : cacheV, b), nHeads: HKV, headDim: D, capacity: W,
        seqPosStart: start, nTokens: n, ring: true });
      enc.commitAndWait();
      enc.release();
      src.release();
    };
    const lens = [...prefill];
    for (let b = 0; b < B; b++) {
      const keep = Math.min(prefill[b]!, W);
      for (const which of ['k', 'v'] as const) write(b, which, prefill[b]! - keep, keep);
    }
    const p = vmk({ batch: B, headDim: D, nHeads: H, nKvHeads: HKV, kvCapacity: W, ring: true, nwg: 2, scale: 1 / 11 });
    let worst = 0;
    for (let step = 0; step < steps; step++) {
      for (let b = 0; b < B; b++) {
        for (const which of ['k', 'v'] as const) write(b, which, lens[b]!, 1);
        lens[b]! += 1;
      }
      const q = roundedTo('f32', randomArray(r, B * H * D));
      const qb = dev.upload('f32', [B, H, D], q);
      const out = poisoned(dev, 'f32', [B, H, D]);
      const tmp = poisoned(dev, 'f32', [flashAttnVecTmpElements(p)]);
      const seqLens = dev.upload('u32', [B], lens);
      const enc = dev.encoder();
      flashAttnVecVarlen(enc, { ...p, q: qb, k: cacheK, v: cacheV, out, tmp, seqLens });
      enc.commitAndWait();
      enc.release();
      // The reference over each sequence's last W positions, in a global cache of their own.
      const want = new Float64Array(B * H * D);
      for (let b = 0; b < B; b++) {
        const lo = Math.max(0, lens[b]! - W), n = lens[b]! - lo;
        const kk = new Float64Array(HKV * n * D), vv = new Float64Array(HKV * n * D);
        for (let h = 0; h < HKV; h++) {
          for (let j = 0; j < n; j++) {
            for (let d = 0; d < D; d++) {
              kk[(h * n + j) * D + d] = hist[b]!.k[((lo + j) * HKV + h) * D + d]!;
              vv[(h * n + j) * D + d] = hist[b]!.v[((lo + j) * HKV + h) * D + d]!;
            }
          }
        }
        const one = flashAttnVecRef({ ...p, batch: 1, kvSeqLen: n, kvCapacity: n, mask: 'none', slidingWindow: 0, softcap: 0 },
          q.subarray(b * H * D, (b + 1) * H * D), kk, vv);
        want.set(one, b * H * D);
      }
      worst = Math.max(worst, scaledErr(out.readNumbers(), want));
      for (const x of [qb, out, tmp, seqLens]) x.release();
    }
    console.log(`kv_cache_copy ring -> flash_attn_vec_varlen, ${steps} steps: max abs err / max |want| ${worst.toExponential(2)}`);
    expect(worst).toBeLessThan(TOL.f32);
    cacheK.release();
    cacheV.release();
  });
});

// ---- buffers that are not live buffers of the device; optional scalars; aliasing ----

describeValidation('flash_attn_vec: plans, buffers, optional arguments and aliasing', ({ device, enc, buf }) => {
  // Two query heads over one KV head of capacity 2: q, k, v and out are all 512 f32.
  const args = () => ({
    q: buf('f32', 512), k: buf('f32', 512), v: buf('f32', 512), out: buf('f32', 512),
    batch: 1, nHeads: 2, nKvHeads: 1, headDim: 256, kvSeqLen: 2, kvCapacity: 2, scale: 0.0625, mask: 'none' as const, nwg: 1,
  });

  test('plans: kernel names by K/V dtype and head dim; the CUDA launch by K/V dtype', () => {
    const dev = device();
    for (const kv of ['f32', 'f16', 'bf16'] as const) {
      for (const headDim of [128, 256, 512]) {
        const p = mk({ headDim, nHeads: 16, nKvHeads: 2, kvSeqLen: 3, kvCapacity: 4, nwg: 2 });
        const bufs = allocFor(dev, p, kv);
        const plan = faOps.planFlashAttnVec({ ...p, ...bufs }, dev.limits);
        const tag = kv === 'f32' ? '' : `${kv}kv_`;
        expect(plan.dispatches.map((d) => d.kernel)).toEqual([`flash_attn_vec_${tag}dk${headDim}`, `flash_attn_vec_reduce_dk${headDim}`]);
        // threadgroup(0): what mlx-native's host binds ((PK + SH + 2 PV) halves), unused by the kernels.
        expect(plan.dispatches[0]!.threadgroupMemory).toEqual([{ 128: 1024, 256: 1792, 512: 3328 }[headDim]]);
        const seqLens = dev.upload('u32', [1], [3]);
        const vplan = faOps.planFlashAttnVecVarlen({ ...p, ...bufs, seqLens }, dev.limits);
        expect(vplan.dispatches[0]!.kernel).toBe(`flash_attn_vec_varlen_${tag}dk${headDim}`);
        expect(vplan.dispatches[0]!.buffers[5]).toBe(seqLens);
        const cuda = plan.dispatches[0]!.cuda!;
        if (kv === 'f32') {
          expect(cuda.threadgroupMemory).toEqual([faOps.FLASH_ATTN_VEC_CUDA_THREADGROUP_BYTES]);
        } else {
          // One block per 8 query heads of a group (here the group is 8), KV head, sequence and split.
          expect(cuda.grid).toEqual([1, 2, 2]);
          expect(cuda.threadgroupMemory).toEqual([faOps.flashAttnVecCudaMmaSharedBytes(headDim)]);
        }
        seqLens.release();
        releaseAll(bufs);
      }
    }
  });

  test('a softcap of null, or a tmp that is not a buffer, is refused even where unused (nwg = 1)', () => {
    const a = args();
    faOps.flashAttnVec(enc(), a);
    expectInvalidParts(() => faOps.flashAttnVec(enc(), { ...a, softcap: null as unknown as number }), 'flash_attn_vec',
      'softcap must be a finite number >= 0 (0 disables) or absent', '(got null)');
    expectInvalidParts(() => faOps.flashAttnVec(enc(), { ...a, tmp: 'scratch' as unknown as mlx.Buffer }), 'flash_attn_vec',
      'tmp must be a Buffer', '(got scratch)');
  });

  test('out bound as k, v or seqLens is refused (every threadgroup of a KV head reads them)', () => {
    const a = args();
    expectInvalidParts(() => faOps.flashAttnVec(enc(), { ...a, out: a.k }), 'flash_attn_vec', 'out must be a buffer other than k', '(got the buffer of k)');
    expectInvalidParts(() => faOps.flashAttnVec(enc(), { ...a, out: a.v }), 'flash_attn_vec', 'out must be a buffer other than v');
    const { kvSeqLen: _, ...vp } = a;
    const outView = a.out.view('u32', [1], 0);
    expectInvalidParts(() => faOps.flashAttnVecVarlen(enc(), { ...vp, seqLens: outView }), 'flash_attn_vec_varlen',
      'out must be a buffer other than seqLens', '(got a view overlapping seqLens)');
  });

  test('null and foreign buffers are MlxErrors naming the argument', () => {
    const a = args();
    expectInvalidParts(() => faOps.flashAttnVec(enc(), { ...a, q: null as unknown as mlx.Buffer }), 'flash_attn_vec', 'q must be a Buffer', '(got null)');
    const other = mlx.Device.open({ backend: device().backend });
    try {
      expectInvalidParts(() => faOps.flashAttnVec(enc(), { ...a, v: other.alloc('f32', [512]) }), 'flash_attn_vec',
        "v must be a buffer of the encoder's device", 'a buffer of another device');
      const { kvSeqLen: _, ...vp } = a;
      expectInvalidParts(() => faOps.flashAttnVecVarlen(enc(), { ...vp, seqLens: other.alloc('u32', [1]) }), 'flash_attn_vec_varlen',
        "seqLens must be a buffer of the encoder's device", 'a buffer of another device');
    } finally {
      other.close();
    }
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

/** flashAttnVec's arguments, shared by its sets (f32 KV split over workgroups, f16 KV in one, bf16 KV at head dim 128). */
const FLASH_ATTN_VEC_KEYS: Record<string, KeySpec> = {
  q: buf(F), k: buf(['f32', 'f16', 'bf16']), v: buf(['f32', 'f16', 'bf16']), out: out(F), tmp: { kind: 'buf?', dtypes: F, output: true, readWhen: (x) => x.nwg !== 1 },
  batch: int, nHeads: int, nKvHeads: int, headDim: int, kvSeqLen: int, kvCapacity: int, nwg: int,
  scale: { kind: 'num' }, mask: { kind: 'enum', values: ['none', 'causal', 'slidingWindow'] },
  slidingWindow: { kind: 'int', readWhen: (x) => x.mask === 'slidingWindow' }, softcap: { kind: 'nonneg?' },
};
/** flashAttnVecVarlen's: flashAttnVec's without kvSeqLen, with the lengths (any u32 is safe to read by) and the ring flag. */
const FLASH_ATTN_VEC_VARLEN_KEYS: Record<string, KeySpec> = {
  ...Object.fromEntries(Object.entries(FLASH_ATTN_VEC_KEYS).filter(([k]) => k !== 'kvSeqLen')),
  seqLens: buf(U32), ring: { kind: 'bool?' },
};

opContract('flash_attn_vec', [
  {
    fn: 'flashAttnVec', op: 'flash_attn_vec',
    keys: FLASH_ATTN_VEC_KEYS,
    make: (d) => ({
      q: a(d, 'f32', 512), k: a(d, 'f32', 1024), v: a(d, 'f32', 1024), out: a(d, 'f32', 512), tmp: a(d, 'f32', 2 * 258 * 2),
      batch: 1, nHeads: 2, nKvHeads: 1, headDim: 256, kvSeqLen: 3, kvCapacity: 4, nwg: 2, scale: 0.0625, mask: 'causal',
    }),
  },
  {
    fn: 'flashAttnVec', op: 'flash_attn_vec',
    keys: FLASH_ATTN_VEC_KEYS,
    make: (d) => ({
      q: a(d, 'f32', 256), k: a(d, 'f16', 512), v: a(d, 'f16', 512), out: a(d, 'f32', 256),
      batch: 1, nHeads: 1, nKvHeads: 1, headDim: 256, kvSeqLen: 2, kvCapacity: 2, nwg: 1, scale: 0.0625,
      mask: 'slidingWindow', slidingWindow: 1, softcap: 30,
    }),
  },
  {
    fn: 'flashAttnVec', op: 'flash_attn_vec',
    keys: FLASH_ATTN_VEC_KEYS,
    make: (d) => ({
      q: a(d, 'f32', 256), k: a(d, 'bf16', 128 * 5), v: a(d, 'bf16', 128 * 5), out: a(d, 'f32', 256), tmp: a(d, 'f32', 2 * 130 * 3),
      batch: 1, nHeads: 2, nKvHeads: 1, headDim: 128, kvSeqLen: 5, kvCapacity: 5, nwg: 3, scale: 0.09, mask: 'none',
    }),
  },
  {
    fn: 'flashAttnVecVarlen', op: 'flash_attn_vec_varlen',
    keys: FLASH_ATTN_VEC_VARLEN_KEYS,
    make: (d) => ({
      q: a(d, 'f32', 2 * 2 * 128), k: a(d, 'bf16', 2 * 4 * 128), v: a(d, 'bf16', 2 * 4 * 128), out: a(d, 'f32', 2 * 2 * 128),
      tmp: a(d, 'f32', 2 * 2 * 130 * 2), seqLens: d.upload('u32', [2], [3, 9]),
      batch: 2, nHeads: 2, nKvHeads: 1, headDim: 128, kvCapacity: 4, nwg: 2, scale: 0.09, mask: 'slidingWindow', slidingWindow: 4, ring: true,
    }),
    fill: (args) => (args.seqLens as Buffer).writeNumbers([3, 9]),
  },
]);
