// softmax and softcap: the references against hand-computed values, the param
// packers against the .metal structs, every validation rule, and parity on
// every backend for f32, f16 and bf16: plain rows (mlx-native's softmax_<t>),
// scale + softcap + mask (scale_mask_softmax_<t>), fully masked rows, in
// place, long rows, odd threadgroup sizes; the two-pass form over a scratch
// (slices of odd lengths, masked slices, in place); the streamed form (one
// dispatch, blocks meeting at the encoder's words: several units a block,
// ragged and unaligned slices, replays and several in one recording);
// softcap over arrays of many lengths.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/softmax.metal' with { type: 'text' };
import {
  SOFTMAX_FAMILY,
  SOFTMAX_KERNELS,
  SOFTMAX_SOURCES,
  packScaleMaskSoftmaxParams,
  packSoftcapParams,
  packSoftmaxBlocksParams,
  packSoftmaxParams,
  packSoftmaxStreamParams,
  SOFTMAX_EXT_HELD,
  SOFTMAX_FILL_ROWS,
  planSoftcap,
  planSoftmax,
  softcap,
  softmax,
  softmaxScratchElements,
  softmaxSlice,
  softmaxStream,
  SOFTMAX_STREAM_WORDS_MAX,
  softmaxThreadgroup,
  softmaxTwoPass,
  softcapRef,
  softmaxRef,
} from '../ts/ops/softmax.ts';
import { describeBackends, describeValidation, expectInvalid, expectMlxError, maxRelErr, randomArray, rng, TARGET_LIMITS, TOL, wordView } from './helpers.ts';
import type { Device } from '../ts/index.ts';
import { rowLaunch } from '../ts/launch.ts';
import { patchPlan, record } from '../ts/plan.ts';
import { a, BF, buf, F, int, opContract, out } from './op-contract.ts';

describe('softmax param packers match the .metal declarations', () => {
  test('SoftmaxParams at buffer(2), ScaleMaskSoftmaxParams at buffer(3), SoftcapParams at buffer(2), SoftmaxBlocksParams at 3 and 4, SoftmaxStreamParams at 4', () => {
    for (const k of SOFTMAX_KERNELS) {
      if (k.startsWith('softmax_blocks') || k.startsWith('softmax_finish') || k.startsWith('softmax_stream')) continue;
      const [struct, at] = k.startsWith('scale_mask') ? ['ScaleMaskSoftmaxParams', 3] : k.startsWith('softcap') ? ['SoftcapParams', 2] : ['SoftmaxParams', 2];
      expect(src).toMatch(new RegExp(`kernel void ${k}\\([^{]*constant ${struct}&\\s+params\\s+\\[\\[buffer\\(${at}\\)\\]\\]`));
    }
    // The two-pass kernels are templates instantiated by host_name.
    expect(src).toMatch(/kernel void softmax_blocks_k\([^{]*constant SoftmaxBlocksParams&\s+params\s+\[\[buffer\(3\)\]\]/);
    expect(src).toMatch(/kernel void softmax_finish_k\([^{]*constant SoftmaxBlocksParams&\s+params\s+\[\[buffer\(4\)\]\]/);
    expect(src).toMatch(/kernel void softmax_stream_k\([^{]*constant SoftmaxStreamParams&\s+params\s+\[\[buffer\(4\)\]\]/);
    const st = wordView(packSoftmaxStreamParams({ cols: 262144, rows: 64, scale: 0.5, slice: 8192, nBlocks: 32 }));
    expect([st.bytes, st.u(0), st.u(1), st.f(2), st.u(3), st.u(4)]).toEqual([20, 262144, 64, 0.5, 8192, 32]);
    const b = wordView(packSoftmaxBlocksParams({ cols: 4099, seqQ: 3, scale: 0.125, softcap: 30, slice: 2048, nBlocks: 3 }));
    expect([b.bytes, b.u(0), b.u(1), b.f(2), b.f(3), b.u(4), b.u(5)]).toEqual([24, 4099, 3, 0.125, 30, 2048, 3]);
    const s = wordView(packSoftmaxParams({ cols: 4099 }));
    expect([s.bytes, s.f(0), s.f(1)]).toEqual([8, 4099, 0]);
    const m = wordView(packScaleMaskSoftmaxParams({ cols: 7, seqQ: 3, scale: 0.125, softcap: 30 }));
    expect([m.bytes, m.u(0), m.u(1), m.f(2), m.f(3)]).toEqual([16, 7, 3, 0.125, 30]);
    const c = wordView(packSoftcapParams({ cap: 30, n: 262144 }));
    expect([c.bytes, c.f(0), c.u(1)]).toEqual([8, 30, 262144]);
  });
  test('launch shapes: Metal min(256, nextPow2(cols)); CUDA a block of ceil(cols / 32) threads rounded up to 32, at most 1024', () => {
    expect(softmaxThreadgroup(3, TARGET_LIMITS.metal)).toEqual({ threads: 4, sharedBytes: 16, cudaThreads: 32, cudaSharedBytes: 16 });
    expect(softmaxThreadgroup(2048, TARGET_LIMITS.cuda)).toEqual({ threads: 256, sharedBytes: 32, cudaThreads: 64, cudaSharedBytes: 16 });
    expect(softmaxThreadgroup(262144, TARGET_LIMITS.cuda)).toEqual({ threads: 256, sharedBytes: 32, cudaThreads: 1024, cudaSharedBytes: 128 });
  });
  test('CUDA one-pass launch: scale_mask_softmax holds 16 elements a thread, for few rows too; softmax with fewer rows than SMs takes one vector a thread', () => {
    const c = TARGET_LIMITS.cuda;
    // Causal attention scores, 32 heads x 2048 queries over 2048 keys: 128 threads a row (4 f32 vectors each).
    expect(rowLaunch(65536, 2048, 4, c, c.multiprocessors, SOFTMAX_EXT_HELD)).toEqual({ grid: [65536, 1, 1], threads: [128, 1, 1], threadgroupMemory: [16] });
    // One decode token's scores, 32 heads over 8192 keys: rowLaunch would spread them to 1024 threads (2 vectors
    // each); the op's plan keeps 16 elements a thread, 512 threads.
    expect(rowLaunch(32, 8192, 4, c, c.multiprocessors, SOFTMAX_EXT_HELD)).toEqual({ grid: [32, 1, 1], threads: [1024, 1, 1], threadgroupMemory: [128] });
    // (The op's plans for those rows: the plans' test below.)
    // Rows of up to 512 take lanes at 16 elements each: 256 bf16 in 16 lanes, 16 rows a block.
    expect(rowLaunch(4096, 256, 8, c, c.multiprocessors, SOFTMAX_EXT_HELD)).toEqual({ grid: [256, 1, 1], threads: [16, 16, 1] });
  });
  test('two passes: slices of 2048 doubled to at most 256 a row; with scratch, for few rows or rows past 32768', () => {
    expect([softmaxSlice(1), softmaxSlice(262144), softmaxSlice(2048 * 256 + 1), softmaxSlice(2 ** 24)]).toEqual([2048, 2048, 4096, 65536]);
    expect([softmaxScratchElements(1, 262144), softmaxScratchElements(3, 4099), softmaxScratchElements(2, 2048)]).toEqual([256, 18, 4]);
    // Many rows take longer slices while the grid keeps SOFTMAX_FILL_SLICES threadgroups: 64 rows of 262144 in 32 slices of 8192.
    expect([softmaxSlice(262144, 64), softmaxSlice(262144, 8), softmaxScratchElements(64, 262144)]).toEqual([8192, 2048, 4096]);
    const s = {} as never;
    expect(softmaxTwoPass({ rows: 1, cols: 262144, scratch: s })).toBe(true);
    expect(softmaxTwoPass({ rows: 1, cols: 262144 })).toBe(false);
    expect(softmaxTwoPass({ rows: 64, cols: 2048, scratch: s })).toBe(false);
    expect(softmaxTwoPass({ rows: SOFTMAX_FILL_ROWS - 1, cols: 2049, scratch: s })).toBe(true);
    expect(softmaxTwoPass({ rows: SOFTMAX_FILL_ROWS, cols: 32768, scratch: s })).toBe(false);
    expect(softmaxTwoPass({ rows: SOFTMAX_FILL_ROWS, cols: 32769, scratch: s })).toBe(true);
    expect(softmaxTwoPass({ rows: 65536, cols: 65536, scratch: s })).toBe(false);
  });
});

describe('softmax reference against hand-computed values', () => {
  test('[0, ln 3] -> [1/4, 3/4]; scale, softcap, mask; a fully masked row is zeros', () => {
    const y = softmaxRef([0, Math.log(3)], 1, 2);
    expect(y[0]).toBeCloseTo(0.25, 15);
    expect(y[1]).toBeCloseTo(0.75, 15);
    const s = softmaxRef([0, 2 * Math.log(3)], 1, 2, { scale: 0.5 });
    expect(s[1]).toBeCloseTo(0.75, 15);
    const c = softmaxRef([0, 100], 1, 2, { softcap: 1 });
    expect(c[1]).toBeCloseTo(Math.E ** Math.tanh(100) / (1 + Math.E ** Math.tanh(100)), 14);
    expect([...softmaxRef([1, 2, 3, 4], 2, 2, { mask: [0, -Infinity, -Infinity, -Infinity], seqQ: 2 })]).toEqual([1, 0, 0, 0]);
    expect(softcapRef([30, -1e9], 30)[0]).toBeCloseTo(30 * Math.tanh(1), 14);
  });
});

describeValidation('softmax validation', ({ enc, buf }) => {
  test('every rule of softmax', () => {
    const base = () => ({ rows: 4, cols: 10, input: buf('f32', 40), output: buf('f32', 40) });
    type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
    const shared = buf('f32', 44);
    const cases: Case[] = [
      [{ rows: 0 }, 'rows', 'a positive integer', '0'],
      [{ cols: 1.5 }, 'cols', 'a positive integer', '1.5'],
      [{ rows: 2 ** 32 }, 'rows', 'at most 2^32 - 1', '4294967296'],
      [{ cols: 2 ** 24 + 1 }, 'cols', 'at most 2^24', `${2 ** 24 + 1}`],
      [{ scale: Number.POSITIVE_INFINITY }, 'scale', 'a finite number', 'Infinity'],
      [{ softcap: -1 }, 'softcap', 'a finite number >= 0', '-1'],
      [{ rows: 2 ** 31, cols: 2 ** 23 }, 'rows * cols', 'a product of integers at most 2^53 - 1', `${2 ** 31} * ${2 ** 23}`],
      [{ input: buf('i32', 40) }, 'input.dtype', 'one of f32, f16, bf16', 'i32'],
      [{ output: buf('bf16', 40) }, 'output.dtype', 'f32', 'bf16'],
      [{ input: buf('f32', 39) }, 'input.elementCount', '40', '39'],
      [{ output: buf('f32', 41) }, 'output.elementCount', '40', '41'],
      [{ mask: buf('bf16', 20), seqQ: 0 }, 'seqQ', 'a positive integer', '0'],
      [{ mask: buf('bf16', 30), seqQ: 3 }, 'seqQ', 'a divisor of rows (4)', '3'],
      [{ mask: buf('f32', 20), seqQ: 2 }, 'mask.dtype', 'bf16', 'f32'],
      [{ mask: buf('bf16', 20) }, 'seqQ', 'a positive integer', 'undefined'],
      [{ mask: buf('bf16', 20), seqQ: 4 }, 'mask.elementCount', '40', '20'],
      [{ input: shared.view('f32', [40]), output: shared.view('f32', [40], 16) }, 'output', 'a buffer other than input', 'a view overlapping input'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => softmax(enc(), { ...base(), ...m }), 'softmax', arg, expected, actual);
    }
    const mb = buf('bf16', 40);
    expectInvalid(() => softmax(enc(), { rows: 4, cols: 10, input: buf('bf16', 40), output: mb, mask: mb, seqQ: 4 }), 'softmax', 'output',
      'a buffer other than mask', 'the buffer of mask');
  });
  test('every rule of the scratch', () => {
    const base = () => ({ rows: 2, cols: 4099, input: buf('f32', 2 * 4099), output: buf('f32', 2 * 4099) });
    type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
    const cases: Case[] = [
      [{ scratch: null }, 'scratch', 'a Buffer', 'null'],
      [{ scratch: buf('u32', 12) }, 'scratch.dtype', 'f32', 'u32'],
      [{ scratch: buf('f32', 11) }, 'scratch.elementCount', '12', '11'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => softmax(enc(), { ...base(), ...m }), 'softmax', arg, expected, actual);
    }
    const x = buf('f32', 2 * 4099);
    expectInvalid(() => softmax(enc(), { ...base(), input: x, scratch: x.view('f32', [12]) }), 'softmax', 'scratch',
      'a buffer other than input', 'a view overlapping input');
    const y = buf('f32', 2 * 4099);
    expectInvalid(() => softmax(enc(), { ...base(), output: y, scratch: y.view('f32', [12], 16) }), 'softmax', 'output',
      'a buffer other than scratch', 'a view overlapping scratch');
  });
  test('every rule of softcap', () => {
    const base = () => ({ cap: 30, input: buf('bf16', 12), output: buf('bf16', 12) });
    type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
    const cases: Case[] = [
      [{ cap: 0 }, 'cap', 'a finite number > 0', '0'],
      [{ cap: Number.NaN }, 'cap', 'a finite number > 0', 'NaN'],
      [{ input: buf('u32', 12) }, 'input.dtype', 'one of f32, f16, bf16', 'u32'],
      [{ output: buf('f16', 12) }, 'output.dtype', 'bf16', 'f16'],
      [{ output: buf('bf16', 13) }, 'output.elementCount', '12', '13'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => softcap(enc(), { ...base(), ...m }), 'softcap', arg, expected, actual);
    }
  });
});

// Probabilities are products and quotients of exp: errors are relative,
// under the output dtype's tolerance, with a floor of 1e-3 of the largest
// probability (and f16's smallest normal, below which its spacing is absolute).
function probErr(dtype: 'f32' | 'f16' | 'bf16', got: ArrayLike<number>, want: ArrayLike<number>): number {
  let scale = 0;
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]!));
  return maxRelErr(got, want, Math.max(1e-3 * scale, dtype === 'f16' ? 2 ** -14 : 0, Number.MIN_VALUE));
}

/** A bf16 mask [seqQ, cols]: causal (-inf past the query's position, keys offset by cols - seqQ) plus a random bias in [-2, 0]. */
function maskOf(seqQ: number, cols: number, seed: number): number[] {
  const r = rng(seed);
  const m: number[] = [];
  for (let q = 0; q < seqQ; q++) for (let k = 0; k < cols; k++) m.push(k > q + cols - seqQ ? -Infinity : r.uniform(-2, 0));
  return m;
}

describeBackends('softmax parity', ({ device }) => {
  const SHAPES: readonly [rows: number, cols: number][] = [
    [1, 1], [3, 3], [4, 31], [2, 33], [6, 64], [3, 255], [2, 256], [3, 257], [2, 1000], [1, 4099], [2, 8192],
  ];
  const run = (dev: Device, dtype: 'f32' | 'f16' | 'bf16', rows: number, cols: number,
    opts: { scale?: number; softcap?: number; seqQ?: number; mask?: boolean | number[]; scratch?: boolean; inPlace?: boolean },
    lo: number, hi: number, seed: number): number => {
    const x = dev.upload(dtype, [rows, cols], randomArray(rng(seed), rows * cols, lo, hi));
    const x0 = x.readNumbers();
    const y = opts.inPlace ? x : dev.alloc(dtype, [rows, cols]);
    const seqQ = opts.seqQ ?? rows;
    const mask = opts.mask === undefined || opts.mask === false ? undefined
      : dev.upload('bf16', [seqQ, cols], opts.mask === true ? maskOf(seqQ, cols, seed + 1) : opts.mask);
    // A NaN-filled scratch: the first pass writes every pair the second reads.
    const scratch = opts.scratch ? dev.alloc('f32', [softmaxScratchElements(rows, cols)]) : undefined;
    scratch?.fill(Number.NaN);
    if (!opts.inPlace) y.fill(Number.NaN);
    const enc = dev.encoder();
    softmax(enc, { input: x, output: y, rows, cols, scale: opts.scale, softcap: opts.softcap, mask, seqQ: mask ? seqQ : undefined, scratch });
    enc.commitAndWait();
    enc.release();
    const want = softmaxRef(x0, rows, cols, { scale: opts.scale, softcap: opts.softcap, mask: mask?.readNumbers(), seqQ });
    const e = probErr(dtype, y.readNumbers(), want);
    x.release();
    if (!opts.inPlace) y.release();
    mask?.release();
    scratch?.release();
    return e;
  };
  for (const dtype of ['f32', 'f16', 'bf16'] as const) {
    test(`${dtype}: plain rows, and scale 0.125 + softcap 30 + a causal mask (rows = 2 heads x seqQ)`, () => {
      const dev = device();
      const over: string[] = [];
      let worst = 0;
      for (const [rows, cols] of SHAPES) {
        const plain = run(dev, dtype, rows, cols, {}, -4, 4, rows * 131 + cols);
        const seqQ = Math.max(1, Math.min(cols, 3));
        const ext = run(dev, dtype, 2 * seqQ, cols, { scale: 0.125, softcap: 30, mask: true, seqQ }, -400, 400, rows * 17 + cols);
        if (!(plain < TOL[dtype])) over.push(`[${rows}, ${cols}] plain: ${plain}`);
        if (!(ext < TOL[dtype])) over.push(`[${2 * seqQ}, ${cols}] scale+softcap+mask: ${ext}`);
        worst = Math.max(worst, plain, ext);
      }
      if (process.env.MLXN_PRINT_ERRORS) console.log(`softmax ${dtype}: largest error ${worst}`);
      expect(over).toEqual([]);
    });
  }

  test('scale alone, softcap alone, mask alone; a vocabulary row (262144, f32 and bf16)', () => {
    const dev = device();
    expect(run(dev, 'f32', 5, 100, { scale: 0.0625 }, -50, 50, 1)).toBeLessThan(TOL.f32);
    expect(run(dev, 'f32', 5, 100, { softcap: 5 }, -20, 20, 2)).toBeLessThan(TOL.f32);
    expect(run(dev, 'bf16', 6, 40, { mask: true, seqQ: 2 }, -3, 3, 3)).toBeLessThan(TOL.bf16);
    expect(run(dev, 'f32', 1, 262144, {}, -10, 10, 4)).toBeLessThan(TOL.f32);
    expect(run(dev, 'bf16', 1, 262144, { softcap: 30 }, -40, 40, 5)).toBeLessThan(TOL.bf16);
  });

  test('two passes over a scratch: a vocabulary row, slices of odd lengths, masked slices and rows, in place, 4096-element slices', () => {
    const dev = device();
    const over: string[] = [];
    const check = (what: string, e: number, tol: number) => {
      if (!(e < tol)) over.push(`${what}: ${e}`);
    };
    check('f32 [1, 262144]', run(dev, 'f32', 1, 262144, { scratch: true }, -10, 10, 11), TOL.f32);
    check('bf16 [3, 4099] scale+softcap+mask', run(dev, 'bf16', 6, 4099, { scale: 0.125, softcap: 30, mask: true, seqQ: 3, scratch: true }, -400, 400, 12), TOL.bf16);
    check('f16 [2, 6144]', run(dev, 'f16', 2, 6144, { scratch: true }, -4, 4, 13), TOL.f16);
    check('f32 [5, 2049] in place', run(dev, 'f32', 5, 2049, { scratch: true, inPlace: true }, -4, 4, 14), TOL.f32);
    // Row 0: its first slice masked out; row 1: every element; row 2: all but one of the last slice.
    const cols = 4100;
    const m = Array.from({ length: 3 * cols }, (_, i) => {
      const [r, c] = [Math.floor(i / cols), i % cols];
      return r === 0 ? (c < 2048 ? -Infinity : 0) : r === 1 ? -Infinity : c === cols - 1 ? 0 : -Infinity;
    });
    check('f32 [3, 4100] masked slices', run(dev, 'f32', 3, cols, { mask: m, seqQ: 3, scratch: true }, -4, 4, 15), TOL.f32);
    check('bf16 [1, 524296] (slices of 4096)', run(dev, 'bf16', 1, 2048 * 256 + 8, { scratch: true }, -8, 8, 16), TOL.bf16);
    expect(over).toEqual([]);
  });

  test('a fully masked row gives zeros; in place (output is input)', () => {
    const dev = device();
    const [rows, cols] = [3, 40];
    const x = dev.upload('f32', [rows, cols], randomArray(rng(9), rows * cols, -2, 2));
    const m = Array.from({ length: rows * cols }, (_, i) => (Math.floor(i / cols) === 1 ? -Infinity : 0));
    const mask = dev.upload('bf16', [rows, cols], m);
    const want = softmaxRef(x.readNumbers(), rows, cols, { mask: mask.readNumbers(), scale: 2 });
    const enc = dev.encoder();
    softmax(enc, { input: x, output: x, rows, cols, mask, seqQ: rows, scale: 2 });
    enc.commitAndWait();
    enc.release();
    const got = x.readNumbers();
    expect([...got.slice(cols, 2 * cols)]).toEqual(new Array(cols).fill(0));
    expect(probErr('f32', got, want)).toBeLessThan(TOL.f32);
  });

  // The streamed form as a device with `sms` multiprocessors plans it (4
  // blocks each): on cuda the real kernel, blocks taking several units and
  // meeting at the encoder's words; on the emulator the Metal twin.
  const streamed = (dev: Device, enc: ReturnType<Device['encoder']>, x: ReturnType<Device['alloc']>, y: ReturnType<Device['alloc']>,
    rows: number, cols: number, sms: number, scratch: ReturnType<Device['alloc']> | undefined, opts: { scale?: number } = {}) => {
    const plan = planSoftmax({ input: x, output: y, rows, cols, scratch, ...opts }, { ...dev.limits, multiprocessors: sms }, dev);
    expect(plan.dispatches.map((d) => [d.kernel, d.scratchWords?.binding])).toEqual([[`softmax_stream_${x.dtype}`, scratch === undefined ? 1 : undefined]]);
    record(enc, plan);
  };
  test('streamed: several units a block, ragged and unaligned slices, a scale, f32 / f16 / bf16', () => {
    const dev = device();
    const over: string[] = [];
    const cases: [dtype: 'f32' | 'f16' | 'bf16', rows: number, cols: number, sms: number, opts: { scale?: number }][] = [
      ['f32', 5, 20000, 1, {}], // 3 slices a row (the last 3616), 15 units over 4 blocks
      ['bf16', 3, 40000, 1, { scale: 3 }],
      ['f16', 7, 16385, 1, { scale: 0.25 }], // a last slice of one element (no whole vector), rows past the first unaligned
      ['f32', 2, 8193, 2, {}],
      ['f32', 3, 9001, 1, {}], // rows 1 and 2 start off 16-byte alignment: their slices element by element
      ['f32', 1, 262144, 132, {}],
    ];
    for (const [dtype, rows, cols, sms, opts] of cases) {
      // With the caller's scratch, then without one (the partials in the encoder's words).
      for (const given of [true, false]) {
        const x = dev.upload(dtype, [rows, cols], randomArray(rng(rows * cols + sms + (given ? 0 : 7)), rows * cols, -6, 6));
        const y = dev.alloc(dtype, [rows, cols]);
        y.fill(Number.NaN);
        const scratch = given ? dev.alloc('f32', [softmaxScratchElements(rows, cols)]) : undefined;
        scratch?.fill(Number.NaN);
        const enc = dev.encoder();
        streamed(dev, enc, x, y, rows, cols, sms, scratch, opts);
        enc.commitAndWait();
        enc.release();
        const e = probErr(dtype, y.readNumbers(), softmaxRef(x.readNumbers(), rows, cols, opts));
        if (!(e < TOL[dtype])) over.push(`${dtype} [${rows}, ${cols}] over ${sms} SMs${given ? '' : ' without a scratch'}: ${e}`);
        for (const b of [x, y, scratch]) b?.release();
      }
    }
    expect(over).toEqual([]);
  });
  test('streamed without a scratch: working words of the encoder, distinct for two in one recording, kept by a replayed one', () => {
    const dev = device();
    const [rows, cols] = [3, 30000];
    const xs = [0, 1].map((i) => dev.upload('f32', [rows, cols], randomArray(rng(60 + i), rows * cols, -5, 5)));
    const ys = [0, 1].map(() => dev.alloc('f32', [rows, cols]));
    const enc = dev.encoder({ replayable: true });
    streamed(dev, enc, xs[0]!, ys[0]!, rows, cols, 1, undefined);
    streamed(dev, enc, xs[1]!, ys[1]!, rows, cols, 1, undefined, { scale: 0.5 });
    const over: string[] = [];
    for (let round = 0; round < 3; round++) {
      if (round > 0) for (const [i, x] of xs.entries()) x.write(Float32Array.from(randomArray(rng(70 + 2 * round + i), rows * cols, -5, 5)));
      for (const y of ys) y.fill(Number.NaN);
      if (round === 0) enc.commitAndWait();
      else enc.replayAndWait();
      for (const [i, y] of ys.entries()) {
        const e = probErr('f32', y.readNumbers(), softmaxRef(xs[i]!.readNumbers(), rows, cols, i === 1 ? { scale: 0.5 } : {}));
        if (!(e < TOL.f32)) over.push(`round ${round}, softmax ${i}: ${e}`);
      }
    }
    // A patch (a new scale) binds the recorded words again; a plan with words onto a dispatch recorded with the
    // caller's scratch is refused.
    const limits = { ...dev.limits, multiprocessors: 1 };
    patchPlan(enc, 1, planSoftmax({ input: xs[1]!, output: ys[1]!, rows, cols, scale: 2 }, limits, dev));
    ys[1]!.fill(Number.NaN);
    enc.replayAndWait();
    const e = probErr('f32', ys[1]!.readNumbers(), softmaxRef(xs[1]!.readNumbers(), rows, cols, { scale: 2 }));
    if (!(e < TOL.f32)) over.push(`patched: ${e}`);
    enc.release();
    const s = dev.alloc('f32', [softmaxScratchElements(rows, cols)]);
    const given = dev.encoder({ replayable: true });
    streamed(dev, given, xs[0]!, ys[0]!, rows, cols, 1, s);
    given.commitAndWait();
    expectMlxError(() => patchPlan(given, 0, planSoftmax({ input: xs[0]!, output: ys[0]!, rows, cols }, limits, dev)),
      'patchPlan: dispatch 0 (softmax_stream_f32) must have been recorded with 24 scratch words (got a dispatch recorded without them)');
    given.release();
    for (const b of [...xs, ...ys, s]) b.release();
    expect(over).toEqual([]);
  });
  test('streamed: two in one recording, then replayed with new inputs (the words left as found)', () => {
    const dev = device();
    const [rows, cols] = [4, 20000];
    const x1 = dev.upload('f32', [rows, cols], randomArray(rng(31), rows * cols, -5, 5));
    const x2 = dev.upload('bf16', [rows, cols], randomArray(rng(32), rows * cols, -5, 5));
    const y1 = dev.alloc('f32', [rows, cols]);
    const y2 = dev.alloc('bf16', [rows, cols]);
    const s1 = dev.alloc('f32', [softmaxScratchElements(rows, cols)]);
    const s2 = dev.alloc('f32', [softmaxScratchElements(rows, cols)]);
    const enc = dev.encoder({ replayable: true });
    streamed(dev, enc, x1, y1, rows, cols, 1, s1);
    streamed(dev, enc, x2, y2, rows, cols, 1, s2, { scale: 2 });
    const over: string[] = [];
    for (let round = 0; round < 3; round++) {
      if (round > 0) {
        x1.write(Float32Array.from(randomArray(rng(40 + round), rows * cols, -5, 5)));
        x2.writeNumbers(randomArray(rng(50 + round), rows * cols, -5, 5));
      }
      y1.fill(Number.NaN);
      y2.fill(Number.NaN);
      if (round === 0) enc.commitAndWait();
      else enc.replayAndWait();
      const e1 = probErr('f32', y1.readNumbers(), softmaxRef(x1.readNumbers(), rows, cols));
      const e2 = probErr('bf16', y2.readNumbers(), softmaxRef(x2.readNumbers(), rows, cols, { scale: 2 }));
      if (!(e1 < TOL.f32)) over.push(`round ${round} f32: ${e1}`);
      if (!(e2 < TOL.bf16)) over.push(`round ${round} bf16: ${e2}`);
    }
    enc.release();
    for (const b of [x1, x2, y1, y2, s1, s2]) b.release();
    expect(over).toEqual([]);
  });

  test('any threadgroup size: 1, 40, 96, 1000 threads', () => {
    const dev = device();
    dev.kernels.register(SOFTMAX_FAMILY, SOFTMAX_SOURCES, SOFTMAX_KERNELS);
    const pipe = dev.kernels.pipeline('scale_mask_softmax_bf16');
    const over: string[] = [];
    for (const threads of [1, 40, 96, 1000]) {
      for (const cols of [7, 128, 1537]) {
        const rows = 2;
        const x = dev.upload('bf16', [rows, cols], randomArray(rng(threads + cols), rows * cols, -8, 8));
        const mask = dev.upload('bf16', [1, cols], maskOf(1, cols, cols).map((v, i) => (i === cols - 1 ? v : Math.max(v, -1))));
        const y = dev.alloc('bf16', [rows, cols]);
        y.fill(Number.NaN);
        const enc = dev.encoder();
        enc.dispatch(pipe, {
          buffers: { 0: x, 1: y, 2: mask },
          bytes: { 3: packScaleMaskSoftmaxParams({ cols, seqQ: 1, scale: 0.5, softcap: 3 }) },
          threadgroupMemory: { 0: Math.ceil((Math.ceil(threads / 32) * 4) / 16) * 16 },
        }, [rows, 1, 1], [threads, 1, 1]);
        enc.commitAndWait();
        enc.release();
        const want = softmaxRef(x.readNumbers(), rows, cols, { scale: 0.5, softcap: 3, mask: mask.readNumbers(), seqQ: 1 });
        const e = probErr('bf16', y.readNumbers(), want);
        if (!(e < TOL.bf16)) over.push(`tg ${threads} cols ${cols}: ${e}`);
      }
    }
    expect(over).toEqual([]);
  });
});

describeBackends('softcap parity', ({ device }) => {
  for (const dtype of ['f32', 'f16', 'bf16'] as const) {
    test(`${dtype}: n = 1, 3, 31, 33, 1000, 4099, 262144; cap 30 and 1.5; in place`, () => {
      const dev = device();
      const over: string[] = [];
      for (const n of [1, 3, 31, 33, 1000, 4099, 262144]) {
        const x = dev.upload(dtype, [n], randomArray(rng(n), n, -60, 60));
        const y = dev.alloc(dtype, [n]);
        for (const cap of [30, 1.5]) {
          y.fill(Number.NaN);
          const enc = dev.encoder();
          softcap(enc, { input: x, output: y, cap });
          enc.commitAndWait();
          enc.release();
          const want = softcapRef(x.readNumbers(), cap);
          const e = maxRelErr(y.readNumbers(), want, Math.max(1e-3 * cap, dtype === 'f16' ? 2 ** -14 : 0));
          if (!(e < TOL[dtype])) over.push(`n ${n} cap ${cap}: ${e}`);
        }
        const want = softcapRef(x.readNumbers(), 30);
        const enc = dev.encoder();
        softcap(enc, { input: x, output: x, cap: 30 });
        enc.commitAndWait();
        enc.release();
        const e = maxRelErr(x.readNumbers(), want, Math.max(1e-2, dtype === 'f16' ? 2 ** -14 : 0));
        if (!(e < TOL[dtype])) over.push(`n ${n} in place: ${e}`);
        x.release();
        y.release();
      }
      expect(over).toEqual([]);
    });
  }
});

describeValidation('softmax and softcap plans', ({ buf }) => {
  test('CUDA, fewer rows than SMs: scale_mask_softmax keeps 16 elements a thread, softmax spreads the row over up to 1024 threads', () => {
    const scores = buf('f32', 32 * 8192), mask = buf('bf16', 8192);
    const dec = planSoftmax({ input: scores, output: scores, rows: 32, cols: 8192, scale: 0.0884, softcap: 50, mask, seqQ: 1 }, TARGET_LIMITS.cuda).dispatches[0]!;
    expect([dec.kernel, dec.cuda]).toEqual(['scale_mask_softmax_f32', { grid: [32, 1, 1], threads: [512, 1, 1], threadgroupMemory: [64] }]);
    const plain = planSoftmax({ input: scores, output: scores, rows: 32, cols: 8192 }, TARGET_LIMITS.cuda).dispatches[0]!;
    expect([plain.kernel, plain.cuda]).toEqual(['softmax_f32', { grid: [32, 1, 1], threads: [1024, 1, 1], threadgroupMemory: [128] }]);
  });
  test('kernels, bindings and launches at Metal and CUDA limits', () => {
    const x = buf('f32', 2 * 262144);
    const y = buf('f32', 2 * 262144);
    // In place, one pass (the streamed form, not over its input, takes them otherwise: below).
    const plain = planSoftmax({ input: x, output: x, rows: 2, cols: 262144 }, TARGET_LIMITS.cuda).dispatches[0]!;
    expect(plain.kernel).toBe('softmax_f32');
    expect(plain.buffers).toEqual([x, x]);
    expect(planSoftmax({ input: x, output: y, rows: 2, cols: 262144 }, TARGET_LIMITS.cuda).dispatches.map((d) => d.kernel)).toEqual(['softmax_stream_f32']);
    expect([plain.grid, plain.threads, plain.cuda?.threads]).toEqual([[2, 1, 1], [256, 1, 1], [1024, 1, 1]]);
    const ext = planSoftmax({ input: x, output: y, rows: 2, cols: 262144, scale: 0.5 }, TARGET_LIMITS.metal).dispatches[0]!;
    expect(ext.kernel).toBe('scale_mask_softmax_f32');
    expect(ext.buffers).toEqual([x, y, x]);
    const p = wordView(ext.bytes![3] as Uint8Array);
    expect([p.u(0), p.u(1), p.f(2), p.f(3)]).toEqual([262144, 0, 0.5, 0]);
    const cap = planSoftcap({ input: buf('bf16', 1000), output: buf('bf16', 1000), cap: 30 }, TARGET_LIMITS.cuda).dispatches[0]!;
    expect([cap.kernel, cap.grid, cap.threads, cap.cuda?.grid]).toEqual(['softcap_bf16', [4, 1, 1], [256, 1, 1], [1, 1, 1]]);
    const short = planSoftmax({ input: buf('f16', 64 * 128), output: buf('f16', 64 * 128), rows: 64, cols: 128 }, TARGET_LIMITS.cuda).dispatches[0]!;
    // 128 f16 a row: 8 lanes of 2 vectors (a whole 128-byte line a load), 32 rows a block.
    expect([short.threads, short.cuda?.grid, short.cuda?.threads]).toEqual([[128, 1, 1], [2, 1, 1], [8, 32, 1]]);
    const odd = planSoftmax({ input: buf('f16', 3 * 128), output: buf('f16', 3 * 128), rows: 3, cols: 128 }, TARGET_LIMITS.cuda).dispatches[0]!;
    expect([odd.cuda?.grid, odd.cuda?.threads]).toEqual([[3, 1, 1], [32, 1, 1]]);
    // Two passes over a scratch: [2, 262144] in 128 slices a row, scale and mask.
    const scratch = buf('f32', softmaxScratchElements(2, 262144));
    const mask = buf('bf16', 262144);
    const two = planSoftmax({ input: x, output: y, rows: 2, cols: 262144, scratch, mask, seqQ: 1, scale: 0.5 }, TARGET_LIMITS.cuda);
    expect(two.dispatches.map((d) => [d.kernel, d.grid, d.threads, d.threadgroupMemory, d.cuda])).toEqual([
      ['softmax_blocks_f32', [128, 2, 1], [256, 1, 1], [32], undefined],
      ['softmax_finish_f32', [128, 2, 1], [256, 1, 1], [32], undefined],
    ]);
    expect(two.dispatches[0]!.buffers).toEqual([x, mask, scratch]);
    expect(two.dispatches[1]!.buffers).toEqual([x, mask, scratch, y]);
    const tp = wordView(two.dispatches[1]!.bytes![4] as Uint8Array);
    expect([tp.u(0), tp.u(1), tp.f(2), tp.f(3), tp.u(4), tp.u(5)]).toEqual([262144, 1, 0.5, 0, 2048, 128]);
    // The streamed form on CUDA: no mask, not in place, rows of at most 4 x SMs slices that fit the scratch.
    const vs = buf('f32', softmaxScratchElements(64, 262144));
    const vx = buf('f32', 64 * 262144), vy = buf('f32', 64 * 262144);
    const st = planSoftmax({ input: vx, output: vy, rows: 64, cols: 262144, scratch: vs }, TARGET_LIMITS.cuda).dispatches;
    expect(st.map((d) => [d.kernel, d.grid, d.threads, d.threadgroupMemory, d.syncWords])).toEqual([
      ['softmax_stream_f32', [528, 1, 1], [256, 1, 1], [48], { binding: 3, count: 64 }],
    ]);
    expect(st[0]!.buffers).toEqual([vx, vs, vy]);
    const sp = wordView(st[0]!.bytes![4] as Uint8Array);
    expect([sp.u(0), sp.u(1), sp.f(2), sp.u(3), sp.u(4)]).toEqual([262144, 64, 1, 8192, 32]);
    expect(softmaxStream({ input: buf('bf16', 262144), output: buf('bf16', 262144), rows: 1, cols: 262144, scratch: vs }, TARGET_LIMITS.cuda))
      .toEqual({ slice: 8192, nBlocks: 32, blocks: 32, threads: 128 });
    // A quarter of the SMs or fewer takes half blocks; two rows of f32 (64 slices of 8192 on 132 SMs) keep 256 threads.
    expect(softmaxStream({ input: buf('f32', 262144), output: buf('f32', 262144), rows: 1, cols: 262144, scratch: vs }, TARGET_LIMITS.cuda))
      .toEqual({ slice: 4096, nBlocks: 64, blocks: 64, threads: 128 });
    expect(softmaxStream({ input: buf('f32', 2 * 262144), output: buf('f32', 2 * 262144), rows: 2, cols: 262144, scratch: vs }, TARGET_LIMITS.cuda))
      .toEqual({ slice: 8192, nBlocks: 32, blocks: 64, threads: 256 });
    expect(softmaxStream({ input: vx, output: vy, rows: 64, cols: 262144, scratch: vs }, TARGET_LIMITS.metal)).toBe(null);
    expect(softmaxStream({ input: vx, output: vx, rows: 64, cols: 262144, scratch: vs }, TARGET_LIMITS.cuda)).toBe(null);
    expect(softmaxStream({ input: vx, output: vy, rows: 64, cols: 262144, scratch: vs, mask: buf('bf16', 262144) }, TARGET_LIMITS.cuda)).toBe(null);
    expect(softmaxStream({ input: vx, output: vy, rows: 64, cols: 262144, scratch: vs, softcap: 30 }, TARGET_LIMITS.cuda)).toBe(null);
    expect(softmaxStream({ input: vx, output: vy, rows: 1, cols: 2 ** 24, scratch: buf('f32', softmaxScratchElements(1, 2 ** 24)) }, TARGET_LIMITS.cuda)).toBe(null);
    // Without a scratch: the partials in the encoder's words, up to SOFTMAX_STREAM_WORDS_MAX of them; past it one pass.
    const ns = planSoftmax({ input: vx, output: vy, rows: 64, cols: 262144 }, TARGET_LIMITS.cuda).dispatches;
    expect(ns.map((d) => [d.kernel, d.grid, d.threads, d.buffers[1], d.syncWords, d.scratchWords])).toEqual([
      ['softmax_stream_f32', [528, 1, 1], [256, 1, 1], undefined, { binding: 3, count: 64 }, { binding: 1, count: 64 * 32 * 2 }],
    ]);
    // Rows of 528 slices (the most the grid holds): 992 of them take 1047552 words, 993 more than the 2^20 (softmaxStream
    // reads only the dtype and the ranges of input and output: stand-ins for buffers of billions of elements).
    const big = (n: number) => ({ dtype: 'f32', root: {}, byteOffset: 0, byteLength: 4 * n }) as unknown as ReturnType<typeof buf>;
    const cols = 528 * 8192;
    const at = (rows: number) => softmaxStream({ input: big(rows * cols), output: big(rows * cols), rows, cols }, TARGET_LIMITS.cuda);
    expect(at(992)).toEqual({ slice: 8192, nBlocks: 528, blocks: 528, threads: 256 });
    expect([992 * 528 * 2 <= SOFTMAX_STREAM_WORDS_MAX, 993 * 528 * 2 > SOFTMAX_STREAM_WORDS_MAX]).toEqual([true, true]);
    expect(at(993)).toBe(null);
    expect(planSoftmax({ input: vx, output: vy, rows: 64, cols: 262144 }, TARGET_LIMITS.metal).dispatches.map((d) => d.kernel)).toEqual(['softmax_f32']);
    // Many short rows: one pass even with a scratch.
    const many = planSoftmax({ input: buf('f32', 4096 * 2048), output: buf('f32', 4096 * 2048), rows: 4096, cols: 2048,
      scratch: buf('f32', softmaxScratchElements(4096, 2048)) }, TARGET_LIMITS.cuda);
    expect(many.dispatches.map((d) => d.kernel)).toEqual(['softmax_f32']);
    const one = planSoftcap({ input: buf('f32', 3), output: buf('f32', 3), cap: 30 }, TARGET_LIMITS.metal).dispatches[0]!;
    expect([one.grid, one.threads]).toEqual([[1, 1, 1], [3, 1, 1]]);
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('softmax', [
  {
    fn: 'softmax', op: 'softmax',
    keys: {
      input: buf(['f32', 'f16', 'bf16']), output: out(['f32', 'f16', 'bf16']), rows: int, cols: int,
      scale: { kind: 'num?' }, softcap: { kind: 'nonneg?' }, mask: { kind: 'buf?', dtypes: BF },
      seqQ: { kind: 'int', readWhen: (x) => x.mask !== undefined },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({
      input: a(d, 'f32', 32), output: a(d, 'f32', 32), rows: 4, cols: 8, scale: 0.25, softcap: 30, mask: a(d, 'bf16', 16), seqQ: 2,
    }),
  },
  {
    fn: 'softmax', op: 'softmax',
    keys: { input: buf(['f32', 'f16', 'bf16']), output: out(['f32', 'f16', 'bf16']), rows: int, cols: int },
    inPlace: [['input', 'output']],
    make: (d) => ({ input: a(d, 'bf16', 15), output: a(d, 'bf16', 15), rows: 3, cols: 5 }),
  },
  {
    // The two-pass form: rows past one slice (2048), with a scratch.
    fn: 'softmax', op: 'softmax',
    keys: {
      input: buf(['f32', 'f16', 'bf16']), output: out(['f32', 'f16', 'bf16']), rows: int, cols: int,
      scale: { kind: 'num?' }, mask: { kind: 'buf?', dtypes: BF }, seqQ: { kind: 'int', readWhen: (x) => x.mask !== undefined },
      scratch: { kind: 'buf?', dtypes: F, output: true },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({
      input: a(d, 'f32', 4200), output: a(d, 'f32', 4200), rows: 2, cols: 2100, scale: 0.5, mask: a(d, 'bf16', 2100), seqQ: 1,
      scratch: a(d, 'f32', 8),
    }),
  },
  {
    fn: 'softcap', op: 'softcap',
    // The element count is the input's (mlx-native's): any count, the output's the same.
    keys: {
      input: buf(['f32', 'f16', 'bf16'], { freeCount: true }), output: out(['f32', 'f16', 'bf16'], { freeCount: true }), cap: { kind: 'num' },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({ input: a(d, 'f16', 20), output: a(d, 'f16', 20), cap: 30 }),
  },
]);
