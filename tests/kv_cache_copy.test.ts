// kv_cache_copy: the bindings against mlx-native's, the references by hand,
// every validation rule, and parity on every backend: the seq copies for
// each of the nine source/cache dtype pairs and their _kv_dual twins
// (global caches, wrapped rings, a sliding prefill keeping its last tokens,
// odd head sizes), the token-major copies (f16 and bf16 bit for bit through
// the 16-bit kernel), the one-token batch copies, zero tokens, other launch
// grids; then flash_attn_vec reading caches written this way, a wrapped
// ring and a global cache, against the reference over the same positions.

import { describe, expect, test } from 'bun:test';
import {
  KV_CACHE_COPY_FAMILY,
  KV_CACHE_COPY_KERNELS,
  KV_CACHE_COPY_SOURCES,
  kvCacheCopy,
  kvCacheCopyBatch,
  kvCacheCopySeq,
  kvCacheCopySeqDual,
  kvCacheCopySeqKernel,
  kvCacheReadSpan,
  planKvCacheCopySeq,
  kvCacheCopyRef,
  kvCacheCopySeqRef,
  kvCacheLinearRef,
} from '../ts/ops/kv_cache_copy.ts';
import { flashAttnVec, flashAttnVecTmpElements, type FlashAttnVecMask, flashAttnVecRef } from '../ts/ops/flash_attn_vec.ts';
import { bufferParam } from '../ts/metal-source.ts';
import { joinSources } from '../ts/registry.ts';
import { rowCopyLaunch } from '../ts/launch.ts';
import type { Buffer, Device, DType } from '../ts/index.ts';
import { describeBackends, describeValidation, expectInvalid, maxRelErr, poisoned, randomArray, rng, TARGET_LIMITS, TOL } from './helpers.ts';
import { a, buf, F, int, opContract, out } from './op-contract.ts';

type Float = 'f32' | 'f16' | 'bf16';
const FLOATS: readonly Float[] = ['f32', 'f16', 'bf16'];

describe('kv_cache_copy bindings match mlx-native', () => {
  const metal = joinSources(KV_CACHE_COPY_SOURCES.metal);
  const scalars = (k: string, from: number, names: string[]) =>
    names.forEach((n, i) => expect(bufferParam(metal, k, from + i)).toBe(`constant uint& ${n} [[buffer(${from + i})]]`));
  test('each scalar at a binding of its own, in mlx-native order', () => {
    for (const k of ['kv_cache_copy', 'kv_cache_copy_f32']) scalars(k, 2, ['write_pos', 'row_size', 'n_new', 'cache_cap', 'is_sliding']);
    for (const k of ['kv_cache_copy_batch_f32', 'kv_cache_copy_batch_f32_to_f16']) scalars(k, 2, ['n_heads', 'head_dim', 'capacity', 'seq_pos']);
    const seq = ['n_heads', 'head_dim', 'capacity', 'seq_pos_start', 'n_tokens', 'src_tok_offset'];
    for (const k of KV_CACHE_COPY_KERNELS.filter((k) => k.startsWith('kv_cache_copy_seq'))) {
      if (k.endsWith('_kv_dual')) {
        expect(bufferParam(metal, k, 1)).toContain('src_v');
        expect(bufferParam(metal, k, 3)).toContain('cache_v');
        scalars(k, 4, seq);
      } else {
        scalars(k, 2, seq);
      }
    }
  });
  test('the seq kernels by dtype pair: mlx-native names where it has the pair, <src>_to_<cache> otherwise', () => {
    expect(kvCacheCopySeqKernel('f32', 'f32')).toBe('kv_cache_copy_seq_f32');
    expect(kvCacheCopySeqKernel('bf16', 'f32')).toBe('kv_cache_copy_seq_bf16');
    expect(kvCacheCopySeqKernel('f32', 'f16')).toBe('kv_cache_copy_seq_f32_to_f16');
    expect(kvCacheCopySeqKernel('bf16', 'bf16')).toBe('kv_cache_copy_seq_bf16_to_bf16');
    for (const s of FLOATS) for (const c of FLOATS) {
      expect(KV_CACHE_COPY_KERNELS).toContain(kvCacheCopySeqKernel(s, c) as never);
      expect(KV_CACHE_COPY_KERNELS).toContain(`${kvCacheCopySeqKernel(s, c)}_kv_dual` as never);
    }
  });
  test('CUDA launch: copy_rows over (token, head) rows of 16-byte steps', () => {
    // A prefill of 8192 tokens x 8 heads x 256, bf16: 65536 rows of 32 steps, 8 threads a row (4 steps each), 32 rows a block.
    expect(rowCopyLaunch(8192 * 8, 256, 8, TARGET_LIMITS.cuda)).toEqual({ grid: [2048, 1, 1], threads: [8, 32, 1] });
    // One decode token: 8 rows, one block.
    expect(rowCopyLaunch(8, 256, 8, TARGET_LIMITS.cuda)).toEqual({ grid: [1, 1, 1], threads: [8, 32, 1] });
  });
});

describe('kv_cache_copy references and read spans by hand', () => {
  test('seq: a ring wraps; slots not written keep their values', () => {
    // 1 head of 1 element, capacity 3; positions 2, 3 -> slots 2, 0; source tokens 1, 2 of [10, 11, 12].
    expect([...kvCacheCopySeqRef([10, 11, 12], [7, 8, 9], 1, 1, 3, 2, 2, 1)]).toEqual([12, 8, 11]);
    expect([...kvCacheCopyRef([1, 2, 3, 4], [0, 0, 0, 0, 0, 0], 2, 2, 2, 3, true)]).toEqual([3, 4, 0, 0, 1, 2]);
    // A ring of 3 after positions 0..4: slots hold 3, 4, 2 -> in position order 2, 3, 4.
    expect([...kvCacheLinearRef([3, 4, 2], 1, 1, 3, 5, true)]).toEqual([2, 3, 4]);
  });
  test('kvCacheReadSpan: a global cache reads positions in order; a ring its last capacity positions', () => {
    expect(kvCacheReadSpan(5, 8, false)).toEqual({ kvSeqLen: 5, oldestSlot: 0 });
    expect(kvCacheReadSpan(5, 8, true)).toEqual({ kvSeqLen: 5, oldestSlot: 0 });
    expect(kvCacheReadSpan(8, 8, true)).toEqual({ kvSeqLen: 8, oldestSlot: 0 });
    expect(kvCacheReadSpan(13, 8, true)).toEqual({ kvSeqLen: 8, oldestSlot: 5 });
    expectInvalid(() => kvCacheReadSpan(9, 8, false), 'kv_cache_read_span', 'end', 'at most capacity (8)', '9');
    expectInvalid(() => kvCacheReadSpan(-1, 8, true), 'kv_cache_read_span', 'end', 'an integer >= 0', '-1');
    expectInvalid(() => kvCacheReadSpan(1, 0, true), 'kv_cache_read_span', 'capacity', 'a positive integer', '0');
  });
});

describeValidation('kv_cache_copy validation', ({ enc, buf }) => {
  type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
  test('every rule of kv_cache_copy', () => {
    const base = () => ({ src: buf('f16', 16), cache: buf('f16', 32), writePos: 3, rowSize: 8, nNew: 2, cacheCap: 4, isSliding: true });
    const shared = buf('f32', 48);
    const cases: Case[] = [
      [{ rowSize: 0 }, 'rowSize', 'a positive integer', '0'],
      [{ cacheCap: 1.5 }, 'cacheCap', 'a positive integer', '1.5'],
      [{ nNew: -1 }, 'nNew', 'an integer >= 0', '-1'],
      [{ writePos: 0.5 }, 'writePos', 'an integer >= 0', '0.5'],
      [{ writePos: 2 ** 32 }, 'writePos', 'at most 2^32 - 1', '4294967296'],
      [{ isSliding: 1 }, 'isSliding', 'true or false', '1'],
      [{ nNew: 2 ** 29, rowSize: 8 }, 'nNew * rowSize', 'at most 2^32 - 256', `${2 ** 32}`],
      [{ nNew: 5 }, 'nNew', 'at most cacheCap (4)', '5'],
      [{ isSliding: false }, 'writePos + nNew', 'at most cacheCap (4)', '5'],
      [{ src: buf('u16', 16) }, 'src.dtype', 'one of f32, f16, bf16', 'u16'],
      [{ cache: buf('bf16', 32) }, 'cache.dtype', 'f16', 'bf16'],
      [{ src: buf('f16', 12) }, 'src.elementCount', 'a multiple of rowSize (8)', '12'],
      [{ src: buf('f16', 8) }, 'src.elementCount', 'at least nNew = 2 rows of 8', '8'],
      [{ cache: buf('f16', 40) }, 'cache.elementCount', '32', '40'],
      [{ src: shared.view('f32', [16]), cache: shared.view('f32', [32], 16) }, 'cache', 'a buffer other than src', 'a view overlapping src'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => kvCacheCopy(enc(), { ...base(), ...m } as never), 'kv_cache_copy', arg, expected, actual);
    }
  });
  test('every rule of kv_cache_copy_batch', () => {
    const base = () => ({ src: buf('f32', 16), cache: buf('f16', 48), nHeads: 2, headDim: 8, capacity: 3, seqPos: 2 });
    const cases: Case[] = [
      [{ nHeads: 0 }, 'nHeads', 'a positive integer', '0'],
      [{ capacity: 2 ** 32 }, 'capacity', 'at most 2^32 - 1', '4294967296'],
      [{ seqPos: 3 }, 'seqPos', 'at most capacity - 1', '3'],
      [{ seqPos: -2 }, 'seqPos', 'an integer >= 0', '-2'],
      [{ src: buf('bf16', 16) }, 'src.dtype', 'f32', 'bf16'],
      [{ cache: buf('bf16', 48) }, 'cache.dtype', 'one of f32, f16', 'bf16'],
      [{ src: buf('f32', 24) }, 'src.elementCount', '16', '24'],
      [{ cache: buf('f16', 32) }, 'cache.elementCount', '48', '32'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => kvCacheCopyBatch(enc(), { ...base(), ...m } as never), 'kv_cache_copy_batch', arg, expected, actual);
    }
  });
  test('every rule of kv_cache_copy_seq', () => {
    const base = () => ({
      src: buf('bf16', 80), cache: buf('f16', 64), nHeads: 2, headDim: 8, capacity: 4, seqPosStart: 5, nTokens: 3, srcTokOffset: 2, ring: true,
    });
    const cases: Case[] = [
      [{ headDim: 0 }, 'headDim', 'a positive integer', '0'],
      [{ nHeads: 2 ** 32 }, 'nHeads', 'at most 2^32 - 1', '4294967296'],
      [{ nTokens: 1.5 }, 'nTokens', 'an integer >= 0', '1.5'],
      [{ seqPosStart: -1 }, 'seqPosStart', 'an integer >= 0', '-1'],
      [{ seqPosStart: 2 ** 32 }, 'seqPosStart', 'at most 2^32 - 1', '4294967296'],
      [{ srcTokOffset: Number.NaN }, 'srcTokOffset', 'an integer >= 0', 'NaN'],
      [{ ring: 'yes' }, 'ring', 'true, false or absent', 'yes'],
      [{ nTokens: 5 }, 'nTokens', 'at most capacity (4)', '5'],
      [{ ring: false }, 'seqPosStart + nTokens', 'at most capacity (4)', '8'],
      [{ ring: undefined, seqPosStart: 2 }, 'seqPosStart + nTokens', 'at most capacity (4)', '5'],
      [{ src: buf('i32', 80) }, 'src.dtype', 'one of f32, f16, bf16', 'i32'],
      [{ cache: buf('u8', 64) }, 'cache.dtype', 'one of f32, f16, bf16', 'u8'],
      [{ src: buf('bf16', 81) }, 'src.elementCount', 'a multiple of nHeads * headDim (16)', '81'],
      [{ src: buf('bf16', 64) }, 'src.elementCount', 'at least srcTokOffset + nTokens = 5 rows of 16', '64'],
      [{ cache: buf('f16', 48) }, 'cache.elementCount', '64', '48'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => kvCacheCopySeq(enc(), { ...base(), ...m } as never), 'kv_cache_copy_seq', arg, expected, actual);
    }
    const s = buf('f32', 64);
    expectInvalid(() => kvCacheCopySeq(enc(), { ...base(), src: s, cache: s, srcTokOffset: 0 }), 'kv_cache_copy_seq', 'cache', 'a buffer other than src', 'the buffer of src');
  });
  test('every rule of kv_cache_copy_seq_dual', () => {
    const base = () => ({
      srcK: buf('f32', 48), srcV: buf('f32', 48), cacheK: buf('bf16', 96), cacheV: buf('bf16', 96),
      nHeads: 2, headDim: 8, capacity: 6, seqPosStart: 1, nTokens: 3,
    });
    const cases: Case[] = [
      [{ capacity: 0 }, 'capacity', 'a positive integer', '0'],
      [{ seqPosStart: 4 }, 'seqPosStart + nTokens', 'at most capacity (6)', '7'],
      [{ srcV: buf('f16', 48) }, 'srcV.dtype', 'f32', 'f16'],
      [{ cacheV: buf('f32', 96) }, 'cacheV.dtype', 'bf16', 'f32'],
      [{ srcV: buf('f32', 64) }, 'srcV.elementCount', '48', '64'],
      [{ cacheK: buf('bf16', 95) }, 'cacheK.elementCount', '96', '95'],
      [{ cacheV: buf('bf16', 48) }, 'cacheV.elementCount', '96', '48'],
      [{ srcK: buf('f32', 32) }, 'srcK.elementCount', 'at least srcTokOffset + nTokens = 3 rows of 16', '32'],
      [{ srcV: undefined }, 'srcV', 'a Buffer', 'none'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => kvCacheCopySeqDual(enc(), { ...base(), ...m } as never), 'kv_cache_copy_seq_dual', arg, expected, actual);
    }
    const c = buf('bf16', 96);
    expectInvalid(() => kvCacheCopySeqDual(enc(), { ...base(), cacheK: c, cacheV: c }), 'kv_cache_copy_seq_dual', 'cacheK',
      'a buffer other than cacheV', 'the buffer of cacheV');
  });
});

/** Every element of got equals want's, NaN matching NaN (the slots not written keep their NaN poison). */
function sameValues(got: ArrayLike<number>, want: ArrayLike<number>): string | null {
  if (got.length !== want.length) return `length ${got.length}, want ${want.length}`;
  for (let i = 0; i < got.length; i++) if (!Object.is(got[i], want[i])) return `element ${i}: ${got[i]}, want ${want[i]}`;
  return null;
}

/** The values a buffer of this dtype holds for these numbers (rounded to nearest even; NaN stays NaN). */
function rounded(dev: Device, dtype: DType, values: ArrayLike<number>): Float64Array {
  const b = dev.upload(dtype, [values.length], values);
  const out = b.readNumbers();
  b.release();
  return out;
}

interface SeqShape { nHeads: number; headDim: number; capacity: number; seqPosStart: number; nTokens: number; srcTokOffset: number; ring: boolean }
/** One element; odd head sizes (CUDA's scalar path); wrapped rings; the sliding prefill contract; a decode token; head sizes past a threadgroup. */
const SEQ_SHAPES: readonly SeqShape[] = [
  { nHeads: 1, headDim: 1, capacity: 1, seqPosStart: 0, nTokens: 1, srcTokOffset: 0, ring: false },
  { nHeads: 2, headDim: 7, capacity: 5, seqPosStart: 1, nTokens: 3, srcTokOffset: 0, ring: false },
  { nHeads: 3, headDim: 64, capacity: 6, seqPosStart: 4, nTokens: 5, srcTokOffset: 1, ring: true },
  { nHeads: 2, headDim: 256, capacity: 16, seqPosStart: 0, nTokens: 16, srcTokOffset: 0, ring: false },
  { nHeads: 8, headDim: 256, capacity: 8, seqPosStart: 13, nTokens: 8, srcTokOffset: 13, ring: true },
  { nHeads: 1, headDim: 257, capacity: 4, seqPosStart: 2, nTokens: 2, srcTokOffset: 0, ring: false },
  { nHeads: 4, headDim: 512, capacity: 3, seqPosStart: 7, nTokens: 1, srcTokOffset: 0, ring: true },
];

describeBackends('kv_cache_copy parity', ({ device }) => {
  for (const from of FLOATS) {
    test(`seq and seq_dual from ${from} into f32, f16 and bf16 caches: written slots exact, the rest untouched`, () => {
      const dev = device();
      const problems: string[] = [];
      for (const to of FLOATS) {
        for (const [si, s] of SEQ_SHAPES.entries()) {
          const r = rng(si * 17 + FLOATS.indexOf(to));
          const srcTokens = s.srcTokOffset + s.nTokens + 1;
          const n = srcTokens * s.nHeads * s.headDim;
          const k = dev.upload(from, [srcTokens, s.nHeads, s.headDim], randomArray(r, n, -8, 8));
          const v = dev.upload(from, [srcTokens, s.nHeads, s.headDim], randomArray(r, n, -8, 8));
          const shape = [s.nHeads, s.capacity, s.headDim];
          const ck = poisoned(dev, to, shape);
          const cv = poisoned(dev, to, shape);
          const ck2 = poisoned(dev, to, shape);
          const enc = dev.encoder();
          kvCacheCopySeq(enc, { ...s, src: k, cache: ck });
          kvCacheCopySeqDual(enc, { ...s, srcK: k, srcV: v, cacheK: ck2, cacheV: cv });
          enc.commitAndWait();
          enc.release();
          const nan = new Float64Array(s.nHeads * s.capacity * s.headDim).fill(Number.NaN);
          const p = [s.nHeads, s.headDim, s.capacity, s.seqPosStart, s.nTokens, s.srcTokOffset] as const;
          const wantK = rounded(dev, to, kvCacheCopySeqRef(k.readNumbers(), nan, ...p));
          const wantV = rounded(dev, to, kvCacheCopySeqRef(v.readNumbers(), nan, ...p));
          for (const [what, got, want] of [['seq', ck, wantK], ['dual k', ck2, wantK], ['dual v', cv, wantV]] as const) {
            const e = sameValues(got.readNumbers(), want);
            if (e !== null) problems.push(`${from}->${to} shape ${si} ${what}: ${e}`);
          }
          for (const b of [k, v, ck, cv, ck2]) b.release();
        }
      }
      expect(problems).toEqual([]);
    });
  }

  test('kv_cache_copy (token-major): f32, and f16 and bf16 bit for bit through the 16-bit kernel; global and ring', () => {
    const dev = device();
    for (const dt of FLOATS) {
      for (const [rowSize, cap, writePos, nNew, sliding] of [[8, 4, 3, 2, true], [37, 5, 1, 4, false], [512, 6, 9, 6, true], [1, 1, 0, 1, false]] as const) {
        const src = dev.upload(dt, [nNew, rowSize], randomArray(rng(rowSize + cap), nNew * rowSize, -4, 4));
        if (dt === 'bf16') {
          // bf16 values whose bits are f16 signalling NaNs (0x7d01, 0xfd80): a conversion through f16 would change them.
          const bits = src.read() as Uint16Array;
          bits[0] = 0x7d01;
          bits[bits.length - 1] = 0xfd80;
          src.write(bits);
        }
        const cache = poisoned(dev, dt, [cap, rowSize]);
        const before = cache.read().slice();
        const enc = dev.encoder();
        kvCacheCopy(enc, { src, cache, writePos, rowSize, nNew, cacheCap: cap, isSliding: sliding });
        enc.commitAndWait();
        enc.release();
        // The expected bytes: rows moved as raw words from src, the rest as before.
        const got = cache.read();
        const want = before.slice();
        const s = src.read();
        for (let t = 0; t < nNew; t++) {
          const slot = sliding ? (writePos + t) % cap : writePos + t;
          for (let i = 0; i < rowSize; i++) want[slot * rowSize + i] = s[t * rowSize + i]!;
        }
        const bitsOf = (x: ArrayLike<number> & { buffer: ArrayBufferLike; byteOffset: number; length: number }) =>
          Array.from(dt === 'f32' ? new Uint32Array(x.buffer, x.byteOffset, x.length) : new Uint16Array(x.buffer, x.byteOffset, x.length));
        expect([dt, rowSize, bitsOf(got as Uint16Array)]).toEqual([dt, rowSize, bitsOf(want as Uint16Array)]);
        const nan = new Float64Array(cap * rowSize).fill(Number.NaN);
        expect(sameValues(cache.readNumbers(), kvCacheCopyRef(src.readNumbers(), nan, writePos, rowSize, nNew, cap, sliding))).toBeNull();
        src.release();
        cache.release();
      }
    }
  });

  test('kv_cache_copy_batch: one token, every head, into slot seqPos of f32 and f16 caches', () => {
    const dev = device();
    for (const to of ['f32', 'f16'] as const) {
      for (const [nHeads, headDim, capacity, seqPos] of [[1, 1, 1, 0], [8, 256, 5, 4], [3, 37, 4, 1]] as const) {
        const x = randomArray(rng(nHeads * headDim + seqPos), nHeads * headDim, -6, 6);
        const src = dev.upload('f32', [nHeads, headDim], x);
        const cache = poisoned(dev, to, [nHeads, capacity, headDim]);
        const enc = dev.encoder();
        kvCacheCopyBatch(enc, { src, cache, nHeads, headDim, capacity, seqPos });
        enc.commitAndWait();
        enc.release();
        const nan = new Float64Array(nHeads * capacity * headDim).fill(Number.NaN);
        const want = rounded(dev, to, kvCacheCopySeqRef(src.readNumbers(), nan, nHeads, headDim, capacity, seqPos, 1));
        expect(sameValues(cache.readNumbers(), want)).toBeNull();
        src.release();
        cache.release();
      }
    }
  });

  test('zero tokens record nothing and leave the cache as it was', () => {
    const dev = device();
    const src = dev.upload('f32', [2, 8], randomArray(rng(1), 16));
    const cache = dev.upload('f32', [4, 8], randomArray(rng(2), 32));
    const before = Array.from(cache.readNumbers());
    const seq = { nHeads: 1, headDim: 8, capacity: 4, seqPosStart: 2, nTokens: 0 };
    expect(planKvCacheCopySeq({ ...seq, src, cache }, dev.limits, dev).dispatches).toEqual([]);
    const enc = dev.encoder();
    kvCacheCopySeq(enc, { ...seq, src, cache });
    kvCacheCopySeqDual(enc, { ...seq, srcK: src, srcV: src, cacheK: cache, cacheV: dev.alloc('f32', [4, 8]) });
    kvCacheCopy(enc, { src, cache, writePos: 1, rowSize: 8, nNew: 0, cacheCap: 4, isSliding: false });
    enc.commitAndWait();
    enc.release();
    expect(Array.from(cache.readNumbers())).toEqual(before);
  });

  test('other launches cover the rows: whole threadgroups of 100 threads (Metal), 2 blocks of 32 (CUDA)', () => {
    const dev = device();
    dev.kernels.register(KV_CACHE_COPY_FAMILY, KV_CACHE_COPY_SOURCES, KV_CACHE_COPY_KERNELS);
    const pipe = dev.kernels.pipeline('kv_cache_copy_seq_bf16_to_f16');
    const s = { nHeads: 3, headDim: 256, capacity: 5, seqPosStart: 3, nTokens: 4, srcTokOffset: 1 };
    const srcTokens = 5;
    const src = dev.upload('bf16', [srcTokens, s.nHeads, s.headDim], randomArray(rng(9), srcTokens * s.nHeads * s.headDim, -2, 2));
    const cache = poisoned(dev, 'f16', [s.nHeads, s.capacity, s.headDim]);
    const enc = dev.encoder();
    const u = (x: number) => new Uint32Array([x]);
    const cuda = dev.backend === 'cuda';
    enc.dispatch(pipe, {
      buffers: [src, cache],
      bytes: [, , u(s.nHeads), u(s.headDim), u(s.capacity), u(s.seqPosStart), u(s.nTokens), u(s.srcTokOffset)],
    }, cuda ? [2, 1, 1] : [Math.ceil(s.headDim / 100), s.nHeads, s.nTokens], cuda ? [32, 1, 1] : [100, 1, 1]);
    enc.commitAndWait();
    enc.release();
    const nan = new Float64Array(s.nHeads * s.capacity * s.headDim).fill(Number.NaN);
    const want = rounded(dev, 'f16', kvCacheCopySeqRef(src.readNumbers(), nan, s.nHeads, s.headDim, s.capacity, s.seqPosStart, s.nTokens, s.srcTokOffset));
    expect(sameValues(cache.readNumbers(), want)).toBeNull();
  });
});

// What kv_cache_copy writes is what flash_attn_vec reads: caches filled by a
// prefill and decode steps, then decode attention over them, against the
// reference attention over the keys and values of the same positions taken
// from the activations (rounded to the cache dtype) in position order.
// f32 tolerance, as tests/flash_attn_vec.test.ts states it: max |got - want| / max |want|.
describeBackends('kv_cache_copy feeds flash_attn_vec', ({ device }) => {
  const [nKvHeads, nHeads, headDim] = [2, 4, 256];

  /** Random activations [tokens, nKvHeads, headDim] in dtype, as a buffer and the values it holds. */
  function acts(dev: Device, dtype: DType, tokens: number, seed: number): { buf: Buffer; values: Float64Array } {
    const buf = dev.upload(dtype, [tokens, nKvHeads, headDim], randomArray(rng(seed), tokens * nKvHeads * headDim, -1, 1));
    return { buf, values: buf.readNumbers() };
  }

  /** Attention of one random query over the cache, against the reference over positions [end - kvSeqLen, end) of the activations. */
  function attend(dev: Device, k: Buffer, v: Buffer, kAct: Float64Array, vAct: Float64Array, capacity: number, end: number, ring: boolean,
    mask: FlashAttnVecMask, window: number, nwg: number): number {
    const { kvSeqLen } = kvCacheReadSpan(end, capacity, ring);
    const q = randomArray(rng(end * 31 + capacity), nHeads * headDim, -1, 1);
    const qb = dev.upload('f32', [1, nHeads, headDim], q);
    const out = poisoned(dev, 'f32', [1, nHeads, headDim]);
    const p = { batch: 1, nHeads, nKvHeads, headDim, kvSeqLen, kvCapacity: capacity, scale: 1 / 16, mask, nwg,
      ...(mask === 'slidingWindow' ? { slidingWindow: window } : {}) };
    const tmp = nwg > 1 ? dev.alloc('f32', [flashAttnVecTmpElements(p)]) : undefined;
    const enc = dev.encoder();
    flashAttnVec(enc, { ...p, q: qb, k, v, out, tmp });
    enc.commitAndWait();
    enc.release();
    // The positions the cache holds, in order, from the activations ([token, head, d] to [head, j, d]), rounded as the cache stores them.
    const lin = (act: Float64Array): Float64Array => {
      const x = new Float64Array(nKvHeads * kvSeqLen * headDim);
      for (let h = 0; h < nKvHeads; h++) for (let j = 0; j < kvSeqLen; j++) for (let d = 0; d < headDim; d++) {
        x[(h * kvSeqLen + j) * headDim + d] = act[((end - kvSeqLen + j) * nKvHeads + h) * headDim + d]!;
      }
      return rounded(dev, k.dtype, x);
    };
    const want = flashAttnVecRef({ ...p, kvCapacity: kvSeqLen, slidingWindow: mask === 'slidingWindow' ? window : 0, softcap: 0 },
      q, lin(kAct), lin(vAct));
    // The cache itself, linearized by position, holds the same keys.
    expect(sameValues(kvCacheLinearRef(k.readNumbers(), nKvHeads, headDim, capacity, end, ring), lin(kAct))).toBeNull();
    const scale = want.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
    const err = maxRelErr(out.readNumbers(), want, scale);
    for (const b of [qb, out, tmp]) b?.release();
    return err;
  }

  test('a sliding layer: bf16 activations into an f16 ring of 8, a 13-token prefill, decode steps past the wrap', () => {
    const dev = device();
    const capacity = 8;
    const total = 16;
    const k = acts(dev, 'bf16', total, 1);
    const v = acts(dev, 'bf16', total, 2);
    const ck = poisoned(dev, 'f16', [nKvHeads, capacity, headDim]);
    const cv = poisoned(dev, 'f16', [nKvHeads, capacity, headDim]);
    // Prefill of 13 tokens: the ring keeps the last 8 (mlx-native's sliding contract).
    const seqLen = 13;
    const n = Math.min(seqLen, capacity);
    let enc = dev.encoder();
    kvCacheCopySeqDual(enc, {
      srcK: k.buf, srcV: v.buf, cacheK: ck, cacheV: cv, nHeads: nKvHeads, headDim, capacity,
      seqPosStart: seqLen - n, nTokens: n, srcTokOffset: seqLen - n, ring: true,
    });
    enc.commitAndWait();
    enc.release();
    const errs: number[] = [attend(dev, ck, cv, k.values, v.values, capacity, seqLen, true, 'none', 0, 1)];
    // Decode: one token a step at positions 13, 14, 15 (slots 5, 6, 7), read each time.
    for (let pos = seqLen; pos < total; pos++) {
      enc = dev.encoder();
      kvCacheCopySeq(enc, { src: k.buf, cache: ck, nHeads: nKvHeads, headDim, capacity, seqPosStart: pos, nTokens: 1, srcTokOffset: pos, ring: true });
      kvCacheCopySeq(enc, { src: v.buf, cache: cv, nHeads: nKvHeads, headDim, capacity, seqPosStart: pos, nTokens: 1, srcTokOffset: pos, ring: true });
      enc.commitAndWait();
      enc.release();
      errs.push(attend(dev, ck, cv, k.values, v.values, capacity, pos + 1, true, pos % 2 === 0 ? 'none' : 'causal', 0, 2));
    }
    expect(errs.every((e) => e < TOL.f32)).toBe(true);
  });

  test('a global layer: an f32 cache of 32, a 20-token prefill, a decode token by kv_cache_copy_batch, a sliding mask of 8', () => {
    const dev = device();
    const capacity = 32;
    const seqLen = 20;
    const k = acts(dev, 'f32', seqLen + 1, 3);
    const v = acts(dev, 'f32', seqLen + 1, 4);
    const ck = poisoned(dev, 'f32', [nKvHeads, capacity, headDim]);
    const cv = poisoned(dev, 'f32', [nKvHeads, capacity, headDim]);
    let enc = dev.encoder();
    kvCacheCopySeqDual(enc, { srcK: k.buf, srcV: v.buf, cacheK: ck, cacheV: cv, nHeads: nKvHeads, headDim, capacity, seqPosStart: 0, nTokens: seqLen });
    enc.commitAndWait();
    enc.release();
    const errs = [attend(dev, ck, cv, k.values, v.values, capacity, seqLen, false, 'causal', 0, 1)];
    // The decode token's rows alone, as a decode step holds them: [nKvHeads, headDim].
    const row = (a: Buffer) => dev.upload('f32', [nKvHeads, headDim], a.readNumbers().subarray(seqLen * nKvHeads * headDim));
    const kr = row(k.buf), vr = row(v.buf);
    enc = dev.encoder();
    kvCacheCopyBatch(enc, { src: kr, cache: ck, nHeads: nKvHeads, headDim, capacity, seqPos: seqLen });
    kvCacheCopyBatch(enc, { src: vr, cache: cv, nHeads: nKvHeads, headDim, capacity, seqPos: seqLen });
    enc.commitAndWait();
    enc.release();
    // The reference under a window of 8 over all 21 positions: the same as over the last 8 of them.
    errs.push(attend(dev, ck, cv, k.values, v.values, capacity, seqLen + 1, false, 'slidingWindow', 8, 2));
    expect(errs.every((e) => e < TOL.f32)).toBe(true);
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('kv_cache_copy', [
  // The cache is written where the positions say, the rest kept.
  {
    fn: 'kvCacheCopy', op: 'kv_cache_copy',
    // The source holds at least nNew rows (mlx-native's rule): its count is free.
    keys: {
      src: buf(['f32', 'f16', 'bf16'], { freeCount: true }), cache: out(['f32', 'f16', 'bf16']), writePos: { kind: 'nonneg' },
      rowSize: int, nNew: { kind: 'nonneg' }, cacheCap: int, isSliding: { kind: 'bool' },
    },
    make: (d) => ({ src: a(d, 'f16', 16), cache: a(d, 'f16', 32), writePos: 3, rowSize: 8, nNew: 2, cacheCap: 4, isSliding: true }),
  },
  {
    fn: 'kvCacheCopyBatch', op: 'kv_cache_copy_batch',
    keys: { src: buf(F), cache: out(['f32', 'f16']), nHeads: int, headDim: int, capacity: int, seqPos: { kind: 'nonneg' } },
    make: (d) => ({ src: a(d, 'f32', 16), cache: a(d, 'f16', 48), nHeads: 2, headDim: 8, capacity: 3, seqPos: 2 }),
  },
  {
    fn: 'kvCacheCopySeq', op: 'kv_cache_copy_seq',
    keys: {
      src: buf(['f32', 'f16', 'bf16'], { freeCount: true }), cache: out(['f32', 'f16', 'bf16']), nHeads: int, headDim: int, capacity: int,
      seqPosStart: { kind: 'nonneg' }, nTokens: { kind: 'nonneg' }, srcTokOffset: { kind: 'nonneg?' }, ring: { kind: 'bool?' },
    },
    make: (d) => ({
      src: a(d, 'bf16', 80), cache: a(d, 'f16', 64), nHeads: 2, headDim: 8, capacity: 4, seqPosStart: 5, nTokens: 3, srcTokOffset: 2, ring: true,
    }),
  },
  {
    fn: 'kvCacheCopySeqDual', op: 'kv_cache_copy_seq_dual',
    keys: {
      srcK: buf(['f32', 'f16', 'bf16'], { freeCount: true }), srcV: buf(['f32', 'f16', 'bf16'], { freeCount: true }),
      cacheK: out(['f32', 'f16', 'bf16']), cacheV: out(['f32', 'f16', 'bf16']), nHeads: int, headDim: int, capacity: int,
      seqPosStart: { kind: 'nonneg' }, nTokens: { kind: 'nonneg' }, srcTokOffset: { kind: 'nonneg?' }, ring: { kind: 'bool?' },
    },
    make: (d) => ({
      srcK: a(d, 'f32', 48), srcV: a(d, 'f32', 48), cacheK: a(d, 'bf16', 96), cacheV: a(d, 'bf16', 96),
      nHeads: 2, headDim: 8, capacity: 6, seqPosStart: 1, nTokens: 3,
    }),
  },
]);
