// rms_norm: the reference against hand-computed values, the param packer
// against the .metal struct, every validation rule, and parity on every
// backend for f32, f16 and bf16 rows (weight, 1 + weight, no weight), the
// per-head form, in place, long rows and odd threadgroup sizes.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/rms_norm.metal' with { type: 'text' };
import {
  RMS_NORM_DEFAULT_EPS,
  RMS_NORM_FAMILY,
  RMS_NORM_KERNELS,
  RMS_NORM_SOURCES,
  RMS_NORM_WEIGHT_DTYPE,
  packRmsNormParams,
  rmsNorm,
  rmsNormPerHead,
  rmsNormCudaLaunch,
  rmsNormThreadgroup,
  rmsNormRef,
} from '../ts/ops/rms_norm.ts';
import { describeBackends, describeValidation, expectInvalid, maxRelErr, randomArray, rng, TARGET_LIMITS, TOL } from './helpers.ts';
import type { Buffer } from '../ts/index.ts';
import { rowLaunch } from '../ts/launch.ts';
import { a, buf, int, opContract, out } from './op-contract.ts';

describe('rms_norm param packer matches the .metal declaration', () => {
  test('RmsNormParams (eps, dim as f32): bound at buffer(3), or buffer(2) without a weight', () => {
    for (const k of RMS_NORM_KERNELS) {
      const at = k.includes('no_scale') ? 2 : 3;
      expect(src).toMatch(new RegExp(`kernel void ${k}\\([^{]*constant RmsNormParams&\\s+params\\s+\\[\\[buffer\\(${at}\\)\\]\\]`));
    }
    const bytes = packRmsNormParams({ dim: 4099 });
    const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    expect(bytes.byteLength).toBe(8);
    expect([v.getFloat32(0, true), v.getFloat32(4, true)]).toEqual([Math.fround(RMS_NORM_DEFAULT_EPS), 4099]);
  });
  test('threadgroup: min(256, nextPow2(dim)) threads', () => {
    expect(rmsNormThreadgroup(1, TARGET_LIMITS.metal)).toEqual({ threads: 1, sharedBytes: 16 });
    expect(rmsNormThreadgroup(2816, TARGET_LIMITS.cuda)).toEqual({ threads: 256, sharedBytes: 32 });
  });
  test('CUDA: launches sized to the row, 32 elements a thread (rowLaunch)', () => {
    const c = TARGET_LIMITS.cuda;
    // Qwen3's q-norm, 128 bf16 a row: 8 lanes of 2 vectors (ROW_LINE_LANES: a row's load a whole 128-byte line,
    // where 4 lanes of 4 would each hold 32 elements), 32 rows a block of 256.
    expect(rmsNormCudaLaunch(262144, 128, 'bf16', c)).toEqual({ grid: [8192, 1, 1], threads: [8, 32, 1] });
    // f32 rows of 64 (16 vectors): 8 lanes, in blocks of at least 4 rows (whole warps): 6 rows take one block per row.
    expect(rowLaunch(6, 64, 4, c)).toEqual({ grid: [6, 1, 1], threads: [32, 1, 1], threadgroupMemory: [16] });
    expect(rowLaunch(32, 64, 4, c)).toEqual({ grid: [1, 1, 1], threads: [8, 32, 1] });
    // A row of fewer vectors than 8 takes a lane a vector: 16 f32, 4 lanes.
    expect(rowLaunch(64, 16, 4, c)).toEqual({ grid: [1, 1, 1], threads: [4, 64, 1] });
    // A row not of whole vectors takes 32 lanes (the kernels stride element by element), R = 8, 4 or 2.
    expect(rowLaunch(6, 65, 4, c)).toEqual({ grid: [3, 1, 1], threads: [32, 2, 1] });
    expect(rowLaunch(5, 65, 4, c)).toEqual({ grid: [5, 1, 1], threads: [32, 1, 1], threadgroupMemory: [16] });
    // Longer rows: one block per row of ceil(dim / 32) threads rounded up to 32: Gemma 4's 5376 takes 192.
    expect(rmsNormCudaLaunch(16384, 5376, 'bf16', c)).toEqual({ grid: [16384, 1, 1], threads: [192, 1, 1], threadgroupMemory: [32] });
    expect(rowLaunch(8, 1025, 8, c)).toEqual({ grid: [8, 1, 1], threads: [64, 1, 1], threadgroupMemory: [16] });
    expect(rowLaunch(1, 2 ** 24, 8, c)).toEqual({ grid: [1, 1, 1], threads: [1024, 1, 1], threadgroupMemory: [128] });
    // Fewer rows than SMs (decode): one 16-byte vector a thread, at most 1024; rows of lanes and rows
    // not of whole vectors as before.
    expect(rmsNormCudaLaunch(1, 2048, 'f32', c, c.multiprocessors)).toEqual({ grid: [1, 1, 1], threads: [512, 1, 1], threadgroupMemory: [64] });
    expect(rmsNormCudaLaunch(1, 5376, 'bf16', c, c.multiprocessors)).toEqual({ grid: [1, 1, 1], threads: [672, 1, 1], threadgroupMemory: [96] });
    expect(rowLaunch(131, 2 ** 20, 4, c, 132)).toEqual({ grid: [131, 1, 1], threads: [1024, 1, 1], threadgroupMemory: [128] });
    expect(rowLaunch(132, 2048, 4, c, 132)).toEqual(rowLaunch(132, 2048, 4, c));
    expect(rowLaunch(32, 64, 4, c, 132)).toEqual({ grid: [1, 1, 1], threads: [8, 32, 1] });
    expect(rowLaunch(5, 2049, 4, c, 132)).toEqual(rowLaunch(5, 2049, 4, c));
    // Not a 32-wide SIMD: the Metal launch.
    expect(rowLaunch(8, 128, 8, { ...c, simdWidth: 64 })).toBeNull();
  });
});

describe('rms_norm reference against hand-computed values', () => {
  test('[3, 4]: rms = sqrt(12.5); weight, 1 + weight, none', () => {
    const r = Math.sqrt(12.5);
    const y = rmsNormRef([3, 4], [2, 0.5], 1, 2, 0);
    expect(y[0]).toBeCloseTo((3 / r) * 2, 14);
    expect(y[1]).toBeCloseTo((4 / r) * 0.5, 14);
    const g = rmsNormRef([3, 4], [2, 0.5], 1, 2, 0, true);
    expect(g[0]).toBeCloseTo((3 / r) * 3, 14);
    expect(g[1]).toBeCloseTo((4 / r) * 1.5, 14);
    expect(rmsNormRef([3, 4], null, 1, 2, 0.5)[1]).toBeCloseTo(4 / Math.sqrt(13), 14);
  });
});

describeValidation('rms_norm validation', ({ enc, buf }) => {
  test('every rule', () => {
    const base = () => ({ rows: 3, dim: 10, input: buf('f32', 30), weight: buf('f32', 10) as Buffer | undefined, output: buf('f32', 30) });
    type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
    const same = buf('f32', 34);
    const cases: Case[] = [
      [{ rows: 0 }, 'rows', 'a positive integer', '0'],
      [{ dim: 2.5 }, 'dim', 'a positive integer', '2.5'],
      [{ rows: 2 ** 32 }, 'rows', 'at most 2^32 - 1', '4294967296'],
      [{ dim: 2 ** 24 + 1 }, 'dim', 'at most 2^24', `${2 ** 24 + 1}`],
      [{ eps: -1 }, 'eps', 'a finite number >= 0', '-1'],
      [{ onePlus: 1 }, 'onePlus', 'true, false or absent', '1'],
      [{ weight: undefined, onePlus: true }, 'weight', 'a Buffer when onePlus is set', 'absent'],
      [{ rows: 2 ** 31, dim: 2 ** 23 }, 'rows * dim', 'a product of integers at most 2^53 - 1', `${2 ** 31} * ${2 ** 23}`],
      [{ input: buf('u16', 30) }, 'input.dtype', 'one of f32, f16, bf16', 'u16'],
      [{ output: buf('f16', 30) }, 'output.dtype', 'f32', 'f16'],
      [{ weight: buf('bf16', 10) }, 'weight.dtype', 'f32', 'bf16'],
      [{ input: buf('bf16', 30), output: buf('bf16', 30) }, 'weight.dtype', 'bf16', 'f32'],
      [{ input: buf('f32', 31) }, 'input.elementCount', '30', '31'],
      [{ output: buf('f32', 10) }, 'output.elementCount', '30', '10'],
      [{ weight: buf('f32', 11) }, 'weight.elementCount', '10', '11'],
      [{ input: same.view('f32', [30]), output: same.view('f32', [30], 16) }, 'output', 'a buffer other than input', 'a view overlapping input'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => rmsNorm(enc(), { ...base(), ...m }), 'rms_norm', arg, expected, actual);
    }
    const w = buf('f32', 10);
    expectInvalid(() => rmsNorm(enc(), { rows: 1, dim: 10, input: w, weight: w, output: w }), 'rms_norm', 'output',
      'a buffer other than weight', 'the buffer of weight');
    const head = () => ({ tokens: 2, heads: 3, headDim: 4, input: buf('bf16', 24), weight: buf('bf16', 4), output: buf('bf16', 24) });
    expectInvalid(() => rmsNormPerHead(enc(), { ...head(), heads: 0 }), 'rms_norm_per_head', 'heads', 'a positive integer', '0');
    expectInvalid(() => rmsNormPerHead(enc(), { ...head(), weight: buf('bf16', 24) }), 'rms_norm_per_head', 'weight.elementCount', '4', '24');
    expectInvalid(() => rmsNormPerHead(enc(), { ...head(), input: buf('bf16', 12) }), 'rms_norm_per_head', 'input.elementCount', '24', '12');
  });
});

// Outputs are x times f32 factors: no cancellation, so errors are elementwise
// relative, under the output dtype's tolerance, with a floor of 1e-3 of the
// largest |value| (and f16's smallest normal, below which its spacing is absolute).
function normErr(dtype: 'f32' | 'f16' | 'bf16', got: ArrayLike<number>, want: ArrayLike<number>): number {
  let scale = 0;
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]!));
  return maxRelErr(got, want, Math.max(1e-3 * scale, dtype === 'f16' ? 2 ** -14 : 0, Number.MIN_VALUE));
}

describeBackends('rms_norm parity', ({ device }) => {
  /** One element, odd sizes under and past a simdgroup and the 256-thread group, head sizes, hidden sizes. */
  const SHAPES: readonly [rows: number, dim: number][] = [
    [1, 1], [3, 3], [4, 31], [2, 33], [6, 64], [3, 128], [2, 256], [3, 257], [2, 1000], [1, 2816], [1, 4099],
  ];
  for (const dtype of ['f32', 'f16', 'bf16'] as const) {
    test(`${dtype}: weight, 1 + weight, no weight`, () => {
      const dev = device();
      const over: string[] = [];
      let worst = 0;
      for (const [rows, dim] of SHAPES) {
        const r = rng(rows * 7919 + dim);
        const x = dev.upload(dtype, [rows, dim], randomArray(r, rows * dim, -3, 3));
        const w = dev.upload(RMS_NORM_WEIGHT_DTYPE[dtype], [dim], randomArray(r, dim, -1.5, 1.5));
        const y = dev.alloc(dtype, [rows, dim]);
        for (const form of ['weight', 'onePlus', 'none'] as const) {
          const eps = form === 'none' ? 0.25 : 1e-6;
          y.fill(Number.NaN);
          const enc = dev.encoder();
          rmsNorm(enc, { input: x, weight: form === 'none' ? undefined : w, output: y, rows, dim, eps, onePlus: form === 'onePlus' });
          enc.commitAndWait();
          enc.release();
          const want = rmsNormRef(x.readNumbers(), form === 'none' ? null : w.readNumbers(), rows, dim, eps, form === 'onePlus');
          const e = normErr(dtype, y.readNumbers(), want);
          if (!(e < TOL[dtype])) over.push(`[${rows}, ${dim}] ${form}: ${e}`);
          worst = Math.max(worst, e);
        }
        x.release();
        w.release();
        y.release();
      }
      if (process.env.MLXN_PRINT_ERRORS) console.log(`rms_norm ${dtype}: largest error ${worst}`);
      expect(over).toEqual([]);
    });
  }

  test('per head (Qwen3 q-norm: 5 tokens x 16 heads x 128; Gemma 4 k-norm: 3 x 2 x 256 bf16)', () => {
    const dev = device();
    for (const [dtype, tokens, heads, headDim] of [['f32', 5, 16, 128], ['bf16', 3, 2, 256]] as const) {
      const r = rng(tokens * heads + headDim);
      const x = dev.upload(dtype, [tokens, heads, headDim], randomArray(r, tokens * heads * headDim, -4, 4));
      const w = dev.upload(RMS_NORM_WEIGHT_DTYPE[dtype], [headDim], randomArray(r, headDim, 0.5, 1.5));
      const y = dev.alloc(dtype, [tokens, heads, headDim]);
      y.fill(Number.NaN);
      const enc = dev.encoder();
      rmsNormPerHead(enc, { input: x, weight: w, output: y, tokens, heads, headDim });
      enc.commitAndWait();
      enc.release();
      const want = rmsNormRef(x.readNumbers(), w.readNumbers(), tokens * heads, headDim, RMS_NORM_DEFAULT_EPS);
      expect(normErr(dtype, y.readNumbers(), want)).toBeLessThan(TOL[dtype]);
    }
  });

  test('in place (output is input), and a long row (Gemma 4 vocabulary-sized 262144)', () => {
    const dev = device();
    const [rows, dim] = [4, 320];
    const x = dev.upload('bf16', [rows, dim], randomArray(rng(5), rows * dim, -1, 1));
    const w = dev.upload('bf16', [dim], randomArray(rng(6), dim, -1, 1));
    const want = rmsNormRef(x.readNumbers(), w.readNumbers(), rows, dim, RMS_NORM_DEFAULT_EPS, true);
    let enc = dev.encoder();
    rmsNorm(enc, { input: x, weight: w, output: x, rows, dim, onePlus: true });
    enc.commitAndWait();
    enc.release();
    expect(normErr('bf16', x.readNumbers(), want)).toBeLessThan(TOL.bf16);

    const n = 262144;
    const big = dev.upload('f32', [1, n], randomArray(rng(7), n, -2, 2));
    const out = dev.alloc('f32', [1, n]);
    out.fill(Number.NaN);
    enc = dev.encoder();
    rmsNorm(enc, { input: big, output: out, rows: 1, dim: n });
    enc.commitAndWait();
    enc.release();
    expect(normErr('f32', out.readNumbers(), rmsNormRef(big.readNumbers(), null, 1, n, RMS_NORM_DEFAULT_EPS))).toBeLessThan(TOL.f32);
  });

  test('any threadgroup size: 1, 40, 96, 1000 threads', () => {
    const dev = device();
    dev.kernels.register(RMS_NORM_FAMILY, RMS_NORM_SOURCES, RMS_NORM_KERNELS);
    const pipe = dev.kernels.pipeline('rms_norm_f16');
    const over: string[] = [];
    for (const threads of [1, 40, 96, 1000]) {
      for (const dim of [7, 128, 1537]) {
        const rows = 2;
        const x = dev.upload('f16', [rows, dim], randomArray(rng(threads + dim), rows * dim, -2, 2));
        const w = dev.upload('f32', [dim], randomArray(rng(dim), dim, -2, 2));
        const y = dev.alloc('f16', [rows, dim]);
        y.fill(Number.NaN);
        const enc = dev.encoder();
        enc.dispatch(pipe, {
          buffers: { 0: x, 1: w, 2: y },
          bytes: { 3: packRmsNormParams({ dim, eps: 1e-6 }) },
          threadgroupMemory: { 0: Math.ceil((Math.ceil(threads / 32) * 4) / 16) * 16 },
        }, [rows, 1, 1], [threads, 1, 1]);
        enc.commitAndWait();
        enc.release();
        const e = normErr('f16', y.readNumbers(), rmsNormRef(x.readNumbers(), w.readNumbers(), rows, dim, 1e-6));
        if (!(e < TOL.f16)) over.push(`tg ${threads} dim ${dim}: ${e}`);
      }
    }
    expect(over).toEqual([]);
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('rms_norm', [
  {
    fn: 'rmsNorm', op: 'rms_norm',
    keys: {
      input: buf(['f32', 'f16', 'bf16']), weight: { kind: 'buf?', dtypes: ['f32', 'bf16'] }, output: out(['f32', 'f16', 'bf16']),
      rows: int, dim: int, eps: { kind: 'nonneg?' }, onePlus: { kind: 'bool?' },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({ input: a(d, 'f16', 24), weight: a(d, 'f32', 8), output: a(d, 'f16', 24), rows: 3, dim: 8, onePlus: true }),
  },
  {
    fn: 'rmsNormPerHead', op: 'rms_norm_per_head',
    keys: {
      input: buf(['f32', 'f16', 'bf16']), weight: { kind: 'buf?', dtypes: ['f32', 'bf16'] }, output: out(['f32', 'f16', 'bf16']),
      tokens: int, heads: int, headDim: int, eps: { kind: 'nonneg?' }, onePlus: { kind: 'bool?' },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({ input: a(d, 'bf16', 48), weight: a(d, 'bf16', 8), output: a(d, 'bf16', 48), tokens: 3, heads: 2, headDim: 8 }),
  },
]);
