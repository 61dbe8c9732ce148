import { describe, expect, test } from 'bun:test';
import metalSource from '../shaders/flash_attn_vec.metal' with { type: 'text' };
import { f16BitsToF32, f32ToF16Bits, type DType, type Device } from '../ts/index.ts';
import {
  FLASH_ATTN_VEC_PARAMS_LAYOUT,
  FLASH_ATTN_VEC_REDUCE_PARAMS_LAYOUT,
  flashAttnVec,
  flashAttnVecTmpElements,
  packFlashAttnVecParams,
  packFlashAttnVecReduceParams,
  validateFlashAttnVec,
  type FlashAttnVecBuffers,
  type FlashAttnVecMask,
  type FlashAttnVecParams,
} from '../ts/ops/flash_attn_vec.ts';
import { flashAttnVecRef, type FlashAttnVecRefShape } from '../ts/reference/flash_attn_vec.ts';
import { describeValidation, TOL, describeBackends, maxRelErr, randomArray, rng, expectInvalidParts } from './helpers.ts';
import { readField } from './metal-source.ts';
import * as faOps from '../ts/ops/flash_attn_vec.ts';
import * as mlx from '../ts/index.ts';

const f16 = (x: number): number => f16BitsToF32(f32ToF16Bits(x));

function refShape(p: FlashAttnVecParams): FlashAttnVecRefShape {
  return { ...p, slidingWindow: p.slidingWindow ?? 0, softcap: p.softcap ?? 0 };
}

/**
 * Attention written a second way, to check the reference: K and V heads
 * repeated to nHeads first, a mask row of 0 / -Infinity, then softmax.
 */
function attentionExpanded(s: FlashAttnVecRefShape, q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>): Float64Array {
  const D = s.headDim;
  const rep = (x: ArrayLike<number>): Float64Array => {
    const out = new Float64Array(s.batch * s.nHeads * s.kvSeqLen * D);
    for (let b = 0; b < s.batch; b++) {
      for (let h = 0; h < s.nHeads; h++) {
        const src = (b * s.nKvHeads + Math.floor((h * s.nKvHeads) / s.nHeads)) * s.kvCapacity * D;
        const dst = (b * s.nHeads + h) * s.kvSeqLen * D;
        for (let i = 0; i < s.kvSeqLen * D; i++) out[dst + i] = x[src + i]!;
      }
    }
    return out;
  };
  const ke = rep(k);
  const ve = rep(v);
  const mask = new Float64Array(s.kvSeqLen).map((_, j) =>
    s.mask === 'slidingWindow' && s.slidingWindow > 0 && s.kvSeqLen - 1 - j >= s.slidingWindow ? -Infinity : 0,
  );
  const out = new Float64Array(s.batch * s.nHeads * D);
  for (let r = 0; r < s.batch * s.nHeads; r++) {
    const logits = new Float64Array(s.kvSeqLen).map((_, j) => {
      let dot = 0;
      for (let d = 0; d < D; d++) dot += q[r * D + d]! * ke[(r * s.kvSeqLen + j) * D + d]!;
      const x = dot * s.scale;
      return (s.softcap > 0 ? Math.tanh(x / s.softcap) * s.softcap : x) + mask[j]!;
    });
    const m = Math.max(...logits);
    const e = logits.map((x) => Math.exp(x - m));
    const z = e.reduce((a, x) => a + x, 0);
    for (let d = 0; d < D; d++) {
      let acc = 0;
      for (let j = 0; j < s.kvSeqLen; j++) acc += (e[j]! / z) * ve[(r * s.kvSeqLen + j) * D + d]!;
      out[r * D + d] = acc;
    }
  }
  return out;
}

interface Case {
  name: string;
  p: FlashAttnVecParams;
  kv: 'f32' | 'f16';
}

const base: FlashAttnVecParams = {
  batch: 1, nHeads: 2, nKvHeads: 2, headDim: 256, kvSeqLen: 1, kvCapacity: 1, scale: 1 / 16, mask: 'none', nwg: 1,
};
const mk = (o: Partial<FlashAttnVecParams>): FlashAttnVecParams => ({ ...base, ...o });

const CASES: Case[] = [
  { name: 'D256 f32, GQA 1, kv 1, nwg 1', kv: 'f32', p: mk({}) },
  { name: 'D256 f32, GQA 2, kv 31, nwg 3, causal', kv: 'f32', p: mk({ nHeads: 4, nKvHeads: 2, kvSeqLen: 31, kvCapacity: 31, nwg: 3, mask: 'causal' }) },
  { name: 'D256 f16, GQA 8, kv 33 of capacity 40, nwg 32', kv: 'f16', p: mk({ nHeads: 8, nKvHeads: 1, kvSeqLen: 33, kvCapacity: 40, nwg: 32 }) },
  { name: 'D512 f32, GQA 2, kv 100, nwg 3, window 40', kv: 'f32', p: mk({ headDim: 512, nHeads: 4, nKvHeads: 2, kvSeqLen: 100, kvCapacity: 100, nwg: 3, mask: 'slidingWindow', slidingWindow: 40, scale: 1 / 22 }) },
  { name: 'D512 f16, GQA 1, kv 1000, nwg 3, causal, softcap 5', kv: 'f16', p: mk({ headDim: 512, nHeads: 1, nKvHeads: 1, kvSeqLen: 1000, kvCapacity: 1000, nwg: 3, mask: 'causal', scale: 1, softcap: 5 }) },
  { name: 'D256 f32, batch 2, GQA 2, kv 100 of 128, nwg 3, window 64, softcap 5', kv: 'f32', p: mk({ batch: 2, nHeads: 4, nKvHeads: 2, kvSeqLen: 100, kvCapacity: 128, nwg: 3, mask: 'slidingWindow', slidingWindow: 64, scale: 0.5, softcap: 5 }) },
  { name: 'D256 f16, GQA 2, kv 1000 of 1024, nwg 1, window 300', kv: 'f16', p: mk({ nHeads: 2, nKvHeads: 1, kvSeqLen: 1000, kvCapacity: 1024, nwg: 1, mask: 'slidingWindow', slidingWindow: 300 }) },
  { name: 'D512 f32, GQA 2, kv 33, nwg 32, window 1', kv: 'f32', p: mk({ headDim: 512, nHeads: 2, nKvHeads: 1, kvSeqLen: 33, kvCapacity: 33, nwg: 32, mask: 'slidingWindow', slidingWindow: 1 }) },
  { name: 'D256 f32, batch 2, GQA 1, kv 1000, nwg 32, window past the start', kv: 'f32', p: mk({ batch: 2, nHeads: 1, nKvHeads: 1, kvSeqLen: 1000, kvCapacity: 1000, nwg: 32, mask: 'slidingWindow', slidingWindow: 4096 }) },
  { name: 'D512 f32, GQA 8, kv 1, nwg 3', kv: 'f32', p: mk({ headDim: 512, nHeads: 8, nKvHeads: 1, nwg: 3 }) },
];

/**
 * Seeded inputs in [-1, 1), rounded to the dtypes of their buffers. K and V rows the op must not use (positions at or
 * past kvSeqLen, and before a sliding window) are NaN, so any use of them
 * shows in the output (unless poison is false).
 */
function makeInputs(c: Case, seed: number, poison = true): { q: Float64Array; k: Float64Array; v: Float64Array } {
  const p = c.p;
  const r = rng(seed);
  const D = p.headDim;
  const q = randomArray(r, p.batch * p.nHeads * D);
  const k = randomArray(r, p.batch * p.nKvHeads * p.kvCapacity * D);
  const v = randomArray(r, k.length);
  const lo = p.mask === 'slidingWindow' ? Math.max(0, p.kvSeqLen - (p.slidingWindow ?? 0)) : 0;
  for (let hk = 0; hk < p.batch * p.nKvHeads; hk++) {
    for (let j = 0; j < p.kvCapacity; j++) {
      if (!poison || (j >= lo && j < p.kvSeqLen)) continue;
      const off = (hk * p.kvCapacity + j) * D;
      k.fill(NaN, off, off + D);
      v.fill(NaN, off, off + D);
    }
  }
  // The values as the buffers store them.
  const round = c.kv === 'f16' ? f16 : Math.fround;
  for (const a of [k, v]) for (let i = 0; i < a.length; i++) a[i] = round(a[i]!);
  return { q: q.map(Math.fround), k, v };
}

describe('flash_attn_vec reference', () => {
  test('matches attention written with expanded heads and an additive mask', () => {
    for (const c of CASES.filter((x) => x.p.kvSeqLen <= 100)) {
      const { q, k, v } = makeInputs(c, 5, false);
      const s = refShape(c.p);
      expect(maxRelErr(flashAttnVecRef(s, q, k, v), attentionExpanded(s, q, k, v))).toBeLessThan(1e-12);
    }
  });

  test('causal equals none for the decode query; a window past the start equals none; softcap changes the result', () => {
    const c = CASES[5]!;
    const { q, k, v } = makeInputs({ ...c, p: { ...c.p, mask: 'none', kvCapacity: c.p.kvSeqLen } }, 6);
    const s = refShape({ ...c.p, kvCapacity: c.p.kvSeqLen, mask: 'none' });
    const none = flashAttnVecRef(s, q, k, v);
    expect(flashAttnVecRef({ ...s, mask: 'causal' }, q, k, v)).toEqual(none);
    expect(flashAttnVecRef({ ...s, mask: 'slidingWindow', slidingWindow: s.kvSeqLen }, q, k, v)).toEqual(none);
    expect(maxRelErr(flashAttnVecRef({ ...s, softcap: 0 }, q, k, v), none)).toBeGreaterThan(1e-2);
  });
});

describe('flash_attn_vec params', () => {
  test('FlashAttnVecParams packer matches the struct of the .metal source', () => {
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
    for (const f of fields) expect([f.name, readField(bytes, f)]).toEqual([f.name, want[f.name]!]);
    const masks: [FlashAttnVecMask, number][] = [['none', 0], ['causal', 1], ['slidingWindow', 2]];
    for (const [mask, code] of masks) {
      expect(new DataView(packFlashAttnVecParams({ ...p, mask }).buffer).getUint32(24, true)).toBe(code);
    }
  });

  test('FlashAttnVecReduceParams packer matches the struct of the .metal source', () => {
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

function allocFor(dev: Device, p: FlashAttnVecParams, kv: DType): FlashAttnVecBuffers {
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
    expectInvalidParts(() => validateFlashAttnVec({ ...ok, headDim: 128, ...bufs }), 'flash_attn_vec', 'headDim must be 256 or 512', '(got 128)');
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
      ['k', 'bf16', kvn, ['k.dtype must be one of f32, f16', '(got bf16)']],
      ['k', 'f16', kvn - 1, ['k.elementCount must be ' + kvn]],
      ['v', 'f32', kvn, ['v.dtype must be f16', '(got f32)']],
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
    expectInvalidParts(() => flashAttnVec(enc, { ...ok, ...bufs, headDim: 128 }), 'flash_attn_vec', 'headDim must be 256 or 512');
    enc.release();
    tmp?.release();
    releaseAll(noTmp);
  });

  // f32 tolerance: the kernel computes in f32 from the values as stored (f16
  // K/V are decoded exactly for the reference), so f32 rounding of the dot
  // products, exp and sums is the only difference. That rounding is absolute,
  // of order f32 epsilon times the output's scale (each output is a convex
  // combination of V rows); elements that cancel to near zero carry the same
  // absolute error. So the error is measured against the largest |want|:
  // max |got - want| / max |want| below TOL.f32.
  for (const c of CASES) {
    test(`parity: ${c.name}`, () => {
      const dev = device();
      const p = c.p;
      const { q, k, v } = makeInputs(c, 100 + CASES.indexOf(c));
      const D = p.headDim;
      const qb = dev.upload('f32', [p.batch, p.nHeads, D], q);
      const kb = dev.upload(c.kv, [p.batch, p.nKvHeads, p.kvCapacity, D], k);
      const vb = dev.upload(c.kv, [p.batch, p.nKvHeads, p.kvCapacity, D], v);
      const out = dev.alloc('f32', [p.batch, p.nHeads, D]);
      out.fill(NaN);
      const bufs: FlashAttnVecBuffers = { q: qb, k: kb, v: vb, out };
      if (p.nwg > 1) {
        bufs.tmp = dev.alloc('f32', [flashAttnVecTmpElements(p)]);
        bufs.tmp.fill(NaN);
      }
      const enc = dev.encoder();
      flashAttnVec(enc, { ...p, ...bufs });
      enc.commitAndWait();
      enc.release();
      const want = flashAttnVecRef(refShape(p), q, k, v);
      const scale = want.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
      const err = maxRelErr(out.readNumbers(), want, scale);
      console.log(`flash_attn_vec ${c.name}: max abs err / max |want| ${err.toExponential(2)}`);
      expect(err).toBeLessThan(TOL.f32);
      releaseAll(bufs);
    });
  }
});

// ---- buffers that are not live buffers of the device; optional scalars; aliasing ----

describeValidation('flash_attn_vec: buffers, optional arguments and aliasing', ({ device, enc, buf }) => {
  // Two query heads over one KV head of capacity 2: q, k, v and out are all 512 f32.
  const args = () => ({
    q: buf('f32', 512), k: buf('f32', 512), v: buf('f32', 512), out: buf('f32', 512),
    batch: 1, nHeads: 2, nKvHeads: 1, headDim: 256, kvSeqLen: 2, kvCapacity: 2, scale: 0.0625, mask: 'none' as const, nwg: 1,
  });

  test('a softcap of null, or a tmp that is not a buffer, is refused even where unused (nwg = 1)', () => {
    const a = args();
    faOps.flashAttnVec(enc(), a);
    expectInvalidParts(() => faOps.flashAttnVec(enc(), { ...a, softcap: null as unknown as number }), 'flash_attn_vec',
      'softcap must be a finite number >= 0 (0 disables) or absent', '(got null)');
    expectInvalidParts(() => faOps.flashAttnVec(enc(), { ...a, tmp: 'scratch' as unknown as mlx.Buffer }), 'flash_attn_vec',
      'tmp must be a Buffer', '(got scratch)');
  });

  test('out bound as k or v is refused (every threadgroup of a KV head reads them)', () => {
    const a = args();
    expectInvalidParts(() => faOps.flashAttnVec(enc(), { ...a, out: a.k }), 'flash_attn_vec', 'out must be a buffer other than k', '(got the buffer of k)');
    expectInvalidParts(() => faOps.flashAttnVec(enc(), { ...a, out: a.v }), 'flash_attn_vec', 'out must be a buffer other than v');
  });

  test('null and foreign buffers are MlxErrors naming the argument', () => {
    const a = args();
    expectInvalidParts(() => faOps.flashAttnVec(enc(), { ...a, q: null as unknown as mlx.Buffer }), 'flash_attn_vec', 'q must be a Buffer', '(got null)');
    const other = mlx.Device.open({ backend: device().backend });
    try {
      expectInvalidParts(() => faOps.flashAttnVec(enc(), { ...a, v: other.alloc('f32', [512]) }), 'flash_attn_vec',
        "v must be a buffer of the encoder's device", 'a buffer of another device');
    } finally {
      other.close();
    }
  });
});
