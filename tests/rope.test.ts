// rope: the param packers against the .metal declarations, the reference
// against hand-computed values, every validation rule, and parity on every
// backend: normal and neox pairing, partial rotary, frequency factors, f32,
// f16 and bf16, u32 and i32 positions up to 131071, odd head counts, head
// dims 64 to 512, one token and many, in place.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/rope.metal' with { type: 'text' };
import {
  ROPE_KERNELS,
  ROPE_NEOX_PARAMS_LAYOUT,
  ROPE_PARAMS_LAYOUT,
  packRopeNeoxParams,
  packRopeParams,
  rope,
  ropeLaunch,
  ropeRowsCudaLaunch,
  ropeNeox,
  ropeAngle,
  ropeNeoxRef,
  ropeRef,
} from '../ts/ops/rope.ts';
import { describeBackends, describeValidation, expectInvalid, rng, randomArray, runsOnEmulator, scaledErr, run, TOL } from './helpers.ts';
import { bufferParam } from './metal-source.ts';
import type { Buffer, Device } from '../ts/index.ts';
import { a, buf, F, int, opContract, out } from './op-contract.ts';

describe('rope param packers match the .metal declarations', () => {
  test('RopeParams (theta, headDim, ropeDim, 0) as floats at buffer(2); RopeNeoxParams (nHeads, hasFreqFactors) at buffer(4)', () => {
    for (const k of ROPE_KERNELS) expect(bufferParam(src, k, 2)).toMatch(/^constant RopeParams& params /);
    for (const k of ROPE_KERNELS.filter((k) => k.startsWith('rope_neox'))) {
      expect(bufferParam(src, k, 4)).toMatch(/^constant RopeNeoxParams& rope_params /);
    }
    const b = packRopeParams({ theta: 1e6, headDim: 256, ropeDim: 64 });
    const v = new DataView(b.buffer);
    expect(ROPE_PARAMS_LAYOUT.map((f) => v.getFloat32(f.offset, true))).toEqual([1e6, 256, 64, 0]);
    const n = packRopeNeoxParams({ nHeads: 7, hasFreqFactors: true });
    const w = new DataView(n.buffer);
    expect(ROPE_NEOX_PARAMS_LAYOUT.map((f) => w.getUint32(f.offset, true))).toEqual([7, 1]);
  });
  test('launch: min(64, pairs) x (4 | 2 | 1) threads, rows exactly covered; CUDA puts rows on x', () => {
    expect(ropeLaunch(64, 12)).toEqual({ grid: [1, 3, 1], threads: [64, 4, 1], cuda: { grid: [3, 1, 1], threads: [64, 4, 1] } });
    expect(ropeLaunch(256, 6)).toEqual({ grid: [4, 3, 1], threads: [64, 2, 1], cuda: { grid: [3, 4, 1], threads: [64, 2, 1] } });
    expect(ropeLaunch(48, 15)).toEqual({ grid: [1, 15, 1], threads: [48, 1, 1], cuda: { grid: [15, 1, 1], threads: [48, 1, 1] } });
  });
  test('CUDA rows form of rope: 128 rows or more, a multiple of 8, covered exactly by 8 rows a thread, 2 chunks of 4 elements', () => {
    expect(ropeRowsCudaLaunch('rope_bf16', 128, 262144)).toEqual({ grid: [2048, 1, 1], threads: [16, 16, 1], entry: 'rope_bf16_rows' });
    expect(ropeRowsCudaLaunch('rope_f32', 640, 256)).toEqual({ grid: [8, 2, 1], threads: [64, 4, 1], entry: 'rope_f32_rows' });
    expect(ropeRowsCudaLaunch('rope_f16', 12, 200)).toEqual({ grid: [25, 1, 1], threads: [2, 1, 1], entry: 'rope_f16_rows' });
    expect(ropeRowsCudaLaunch('rope_f32', 128, 120)).toBeUndefined();
    expect(ropeRowsCudaLaunch('rope_f32', 128, 130)).toBeUndefined();
  });
});

describe('rope reference against hand-computed values', () => {
  test('headDim 2: (1, 0) at position p turns by p radians; position 0 is the identity', () => {
    const y = ropeRef([1, 0, 1, 0, 0.3, -0.7], [2, 131071, 0], 3, 2, 10000);
    expect(y[0]).toBeCloseTo(Math.cos(2), 15);
    expect(y[1]).toBeCloseTo(Math.sin(2), 15);
    expect(y[2]).toBeCloseTo(Math.cos(131071), 12);
    expect([y[4], y[5]]).toEqual([0.3, -0.7]);
  });
  test('angles: pos * theta^(-2i/d) / ff', () => {
    expect(ropeAngle(5, 1, 4, 100)).toBeCloseTo(0.5, 15);
    expect(ropeAngle(5, 1, 4, 100, 2)).toBeCloseTo(0.25, 15);
  });
  test('neox: pairs (i, i + d/2), the exponent over headDim, pairs past ropeDim/2 copied', () => {
    // headDim 4, ropeDim 2: pair 0 = (x0, x2) turns by pos; pair 1 = (x1, x3) is copied.
    const y = ropeNeoxRef([1, 5, 0, 6], [3], 1, 1, 4, 2, 10000);
    expect(y[0]).toBeCloseTo(Math.cos(3), 15);
    expect(y[2]).toBeCloseTo(Math.sin(3), 15);
    expect([y[1], y[3]]).toEqual([5, 6]);
    // headDim 4, ropeDim 4: pair 1 turns by pos * theta^(-1/2) / ff.
    const z = ropeNeoxRef([0, 1, 0, 0], [8], 1, 1, 4, 4, 16, [1, 4]);
    expect(z[1]).toBeCloseTo(Math.cos(0.5), 15);
    expect(z[3]).toBeCloseTo(Math.sin(0.5), 15);
  });
});

// ---- validation ----

describeValidation('rope validation', ({ enc, buf }) => {
  test('rope: every rule', () => {
    const base = () => ({ input: buf('f32', 24), output: buf('f32', 24), positions: buf('u32', 3), seqLen: 3, headDim: 8, theta: 1e4 });
    type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
    const cases: Case[] = [
      [{ seqLen: 0 }, 'seqLen', 'a positive integer', '0'],
      [{ seqLen: 2 ** 32 }, 'seqLen', 'at most 2^32 - 1', `${2 ** 32}`],
      [{ headDim: 1.5 }, 'headDim', 'a positive integer', '1.5'],
      [{ headDim: 7 }, 'headDim', 'a multiple of 2', '7'],
      [{ headDim: 2 ** 25 }, 'headDim', 'at most 2^24', `${2 ** 25}`],
      [{ theta: 0 }, 'theta', 'a finite f32 > 0', '0'],
      [{ theta: Number.POSITIVE_INFINITY }, 'theta', 'a finite f32 > 0', 'Infinity'],
      [{ theta: 1e39 }, 'theta', 'a finite f32 > 0', '1e+39'],
      [{ seqLen: 2 ** 31, headDim: 2 ** 23 }, 'seqLen * headDim', 'a product of integers at most 2^53 - 1', `${2 ** 31} * ${2 ** 23}`],
      [{ input: buf('u16', 24) }, 'input.dtype', 'one of f32, f16, bf16', 'u16'],
      [{ output: buf('f16', 24) }, 'output.dtype', 'f32', 'f16'],
      [{ positions: buf('f32', 3) }, 'positions.dtype', 'one of u32, i32', 'f32'],
      [{ input: buf('f32', 25) }, 'input.elementCount', '24', '25'],
      [{ output: buf('f32', 16) }, 'output.elementCount', '24', '16'],
      [{ positions: buf('u32', 4) }, 'positions.elementCount', '3', '4'],
    ];
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => rope(enc(), { ...base(), ...m }), 'rope', arg, expected, actual);
    const root = buf('f32', 48);
    expectInvalid(() => rope(enc(), { ...base(), input: root.view('f32', [24]), output: root.view('f32', [24], 16) }), 'rope', 'output',
      'a buffer other than input', 'a view overlapping input');
  });
  test('rope_neox: every rule', () => {
    const base = () => ({
      input: buf('f32', 48), output: buf('f32', 48), positions: buf('u32', 2), seqLen: 2, nHeads: 3, headDim: 8, ropeDim: 4, theta: 1e6,
    });
    type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
    const cases: Case[] = [
      [{ seqLen: -1 }, 'seqLen', 'a positive integer', '-1'],
      [{ nHeads: 0 }, 'nHeads', 'a positive integer', '0'],
      [{ nHeads: 2 ** 32 }, 'nHeads', 'at most 2^32 - 1', `${2 ** 32}`],
      [{ headDim: 9 }, 'headDim', 'a multiple of 2', '9'],
      [{ ropeDim: 0 }, 'ropeDim', 'a positive integer', '0'],
      [{ ropeDim: 3 }, 'ropeDim', 'a multiple of 2', '3'],
      [{ ropeDim: 10 }, 'ropeDim', 'at most headDim (8)', '10'],
      [{ theta: -2 }, 'theta', 'a finite f32 > 0', '-2'],
      [{ seqLen: 2 ** 20, nHeads: 2 ** 13 }, 'seqLen * nHeads', 'at most 2^32 - 1', `${2 ** 33}`],
      [{ input: buf('i32', 48) }, 'input.dtype', 'one of f32, f16, bf16', 'i32'],
      [{ output: buf('bf16', 48) }, 'output.dtype', 'f32', 'bf16'],
      [{ positions: buf('u16', 2) }, 'positions.dtype', 'one of u32, i32', 'u16'],
      [{ input: buf('f32', 47) }, 'input.elementCount', '48', '47'],
      [{ output: buf('f32', 96) }, 'output.elementCount', '48', '96'],
      [{ positions: buf('i32', 6) }, 'positions.elementCount', '2', '6'],
      [{ freqFactors: buf('f16', 2) }, 'freqFactors.dtype', 'f32', 'f16'],
      [{ freqFactors: buf('f32', 4) }, 'freqFactors.elementCount', '2', '4'],
      [{ input: buf('bf16', 48), output: buf('bf16', 48), freqFactors: buf('f32', 2) }, 'freqFactors',
        'absent for bf16 input (rope_neox_bf16 takes none)', 'a buffer'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => ropeNeox(enc(), { ...base(), ...m }), 'rope_neox', arg, expected, actual);
    }
    const o = buf('f32', 48);
    expectInvalid(() => ropeNeox(enc(), { ...base(), output: o, freqFactors: o.view('f32', [2]) }), 'rope_neox', 'output',
      'a buffer other than freqFactors', 'a view overlapping freqFactors');
    expectInvalid(() => ropeNeox(enc(), { ...base(), freqFactors: null as unknown as Buffer }), 'rope_neox', 'freqFactors', 'a Buffer', 'null');
  });
});

// ---- parity ----

// The error bound. The kernels form the angle in f32, as mlx-native's (and
// llama.cpp's) do: pos / theta^(2i/d) / ff, then sin and cos. Rounding the
// exponent 2i/d moves theta^(2i/d) by up to ln(theta) * (2i/d) * 2^-24
// relatively; pow (CUDA powf: 4 ulp at most), the two divisions and the
// rounding of the angle itself add at most 8 * 2^-24 more; sin and cos of the
// f32 angle add 2^-23 absolute. So
//   |angle_f32 - angle| <= |angle| * (ln(theta) * 2i/d + 8) * 2^-24 + 2^-23,
// and each output of a pair of magnitude r = hypot(a, b) is off by at most
// e = r * that + r * 2^-22 (the f32 rotation), plus half an ulp of the f32
// result in the output dtype: (|want| + e) * 2^-11 for f16 (2^-25 absolute
// below its smallest normal), (|want| + e) * 2^-8 for bf16. At position 131071 and theta 1e6 this is up to about
// 3e-2 * r at the highest pairs: the angle 131071 is itself only held to
// 2^-8 radians by f32, so no f32 kernel does much better there. At
// positions under 16 the bound is under 1e-5 * r for f32, and the test also
// holds those to TOL.
type Dt = 'f32' | 'f16' | 'bf16';
const U_OUT: Record<Dt, number> = { f32: 0, f16: 2 ** -11, bf16: 2 ** -8 };

/** max over elements of |got - want| / bound (<= 1 passes); pairs listed as [row, i, j] index triples. */
function boundRatio(dt: Dt, got: ArrayLike<number>, want: ArrayLike<number>, x: ArrayLike<number>,
  pairs: Iterable<[number, number, number, number]>, theta: number): number {
  let worst = 0;
  for (const [ia, ib, angle, rho] of pairs) {
    const r = Math.hypot(x[ia]!, x[ib]!);
    const dAngle = Math.abs(angle) * (Math.log(theta) * rho + 8) * 2 ** -24 + 2 ** -23;
    for (const k of [ia, ib]) {
      const g = got[k]!;
      if (!Number.isFinite(g)) return Infinity;
      const e32 = r * dAngle + r * 2 ** -22;
      const bound = e32 + (Math.abs(want[k]!) + e32) * U_OUT[dt] + (dt === 'f16' ? 2 ** -25 : 0) + Number.MIN_VALUE;
      worst = Math.max(worst, Math.abs(g - want[k]!) / bound);
    }
  }
  return worst;
}

function* normalPairs(pos: ArrayLike<number>, seqLen: number, headDim: number, theta: number): Generator<[number, number, number, number]> {
  for (let r = 0; r < seqLen; r++) {
    for (let i = 0; i < headDim / 2; i++) {
      yield [r * headDim + 2 * i, r * headDim + 2 * i + 1, ropeAngle(pos[r]!, i, headDim, theta), (2 * i) / headDim];
    }
  }
}

function* neoxPairs(pos: ArrayLike<number>, seqLen: number, nHeads: number, headDim: number, ropeDim: number, theta: number,
  ff?: ArrayLike<number>): Generator<[number, number, number, number]> {
  for (let r = 0; r < seqLen * nHeads; r++) {
    for (let i = 0; i < ropeDim / 2; i++) {
      const t = ropeAngle(pos[Math.floor(r / nHeads)]!, i, headDim, theta, ff === undefined ? 1 : ff[i]!);
      yield [r * headDim + i, r * headDim + i + headDim / 2, t, (2 * i) / headDim];
    }
  }
}

/** Positions: 131071 and 0 first, then uniform in [0, maxPos). */
function positionsOf(seed: number, n: number, maxPos: number): number[] {
  const g = rng(seed);
  return Array.from({ length: n }, (_, i) => (i === 0 ? Math.min(131071, maxPos - 1) : i === 1 ? 0 : Math.floor(g.next() * maxPos)));
}

/** The elements past the rotated pairs of each row (neox partial rotary) are the input's, bit for bit. */
function tailMismatches(got: ArrayLike<number>, x: ArrayLike<number>, rows: number, headDim: number, ropeDim: number): number {
  let bad = 0;
  for (let r = 0; r < rows; r++) {
    for (let i = ropeDim / 2; i < headDim / 2; i++) {
      for (const k of [r * headDim + i, r * headDim + i + headDim / 2]) if (!Object.is(got[k], x[k])) bad++;
    }
  }
  return bad;
}

const print = (s: string): void => {
  if (process.env.MLXN_PRINT_ERRORS) console.log(s);
};

describeBackends('rope parity', ({ device }) => {
  /** [seqLen, headDim, theta, rows a position holds (1: every row its own)] */
  const NORMAL: readonly [number, number, number, number][] = [
    [1, 64, 1e4, 1], [7, 128, 1e4, 1], [4, 256, 1e6, 1], [3, 512, 1e7, 1], [9, 2, 1e4, 1], [33, 96, 5e5, 1],
    // CUDA's rows form (128 rows or more, a multiple of 8) holds 4 pairs of 8 rows a thread and keeps a (cos, sin)
    // while the position repeats: a token's 32 heads; runs of 3 across a thread's 8 rows with half rows of 6 pairs
    // (no vectors); 80 threads of pairs a row (a second block of 64 along the pairs); 25 groups of 8 rows (one a
    // block); 130 rows (not a multiple of 8: the one-pair form).
    [128, 128, 1e4, 32], [136, 12, 1e4, 3], [256, 640, 1e6, 1], [200, 64, 1e4, 5], [130, 64, 1e4, 1],
  ];
  for (const dt of ['f32', 'f16', 'bf16'] as const) {
    test(`rope ${dt}: normal pairing, head dims 2 to 512, positions to 131071`, () => {
      const dev = device();
      const over: string[] = [];
      let worst = 0;
      for (const [seqLen, headDim, theta, repeat] of NORMAL) {
        const n = seqLen * headDim;
        const input = dev.upload(dt, [seqLen, headDim], randomArray(rng(n + 17), n, -2, 2));
        const output = dev.alloc(dt, [seqLen, headDim]);
        output.fill(Number.NaN);
        const runs = positionsOf(seqLen * 31 + headDim, Math.ceil(seqLen / repeat), 131072);
        const pos = Array.from({ length: seqLen }, (_, r) => runs[Math.floor(r / repeat)]!);
        const positions = dev.upload('u32', [seqLen], pos);
        run(dev, (enc) => rope(enc, { input, output, positions, seqLen, headDim, theta }));
        const x = input.readNumbers();
        const got = output.readNumbers();
        const e = boundRatio(dt, got, ropeRef(x, pos, seqLen, headDim, theta), x, normalPairs(pos, seqLen, headDim, theta), theta);
        if (!(e <= 1)) over.push(`[${seqLen}, ${headDim}] theta ${theta}: ${e} of the bound`);
        worst = Math.max(worst, e);
        input.release();
        output.release();
        positions.release();
      }
      print(`rope ${dt}: largest error ${worst} of the bound`);
      expect(over).toEqual([]);
    });
  }

  /** [seqLen, nHeads, headDim, ropeDim, theta]: Qwen3.6 (256, a quarter rotated), Gemma 4 (256 sliding; 512, a quarter, global). */
  const NEOX: readonly [number, number, number, number, number][] = [
    [1, 1, 64, 64, 1e4], [3, 5, 128, 128, 1e4], [2, 3, 256, 64, 1e7], [2, 1, 512, 128, 1e6], [1, 7, 512, 512, 1e6],
    [17, 3, 128, 32, 1e4], [5, 2, 2, 2, 1e4], [4, 2, 256, 256, 1e4],
    // CUDA's heads form (16 tokens or more) holds 4 pairs of 8 heads a thread: 19 heads (8 + 8 + 3), rotated pairs
    // ending inside a thread's four (13 of 32; 5 of 6), half rows of 3 pairs (no vectors), Gemma 4's full rotation.
    [17, 19, 64, 26, 1e4], [16, 9, 12, 10, 1e4], [18, 4, 6, 4, 1e4], [20, 8, 256, 256, 1e4],
  ];
  for (const dt of ['f32', 'f16', 'bf16'] as const) {
    test(`rope_neox ${dt}: split pairing, partial rotary, odd head counts`, () => {
      const dev = device();
      const over: string[] = [];
      let worst = 0;
      for (const [seqLen, nHeads, headDim, ropeDim, theta] of NEOX) {
        const rows = seqLen * nHeads;
        const n = rows * headDim;
        const input = dev.upload(dt, [seqLen, nHeads, headDim], randomArray(rng(n + ropeDim), n, -2, 2));
        const output = dev.alloc(dt, [seqLen, nHeads, headDim]);
        output.fill(Number.NaN);
        const pos = positionsOf(rows * 7 + ropeDim, seqLen, 131072);
        const positions = dev.upload('u32', [seqLen], pos);
        run(dev, (enc) => ropeNeox(enc, { input, output, positions, seqLen, nHeads, headDim, ropeDim, theta }));
        const x = input.readNumbers();
        const got = output.readNumbers();
        const want = ropeNeoxRef(x, pos, seqLen, nHeads, headDim, ropeDim, theta);
        const e = boundRatio(dt, got, want, x, neoxPairs(pos, seqLen, nHeads, headDim, ropeDim, theta), theta);
        const tail = tailMismatches(got, x, rows, headDim, ropeDim);
        if (!(e <= 1) || tail !== 0) over.push(`[${seqLen}, ${nHeads}, ${headDim}] rope ${ropeDim}: ${e} of the bound, ${tail} copied elements differ`);
        worst = Math.max(worst, e);
        input.release();
        output.release();
        positions.release();
      }
      print(`rope_neox ${dt}: largest error ${worst} of the bound`);
      expect(over).toEqual([]);
    });
  }

  for (const dt of ['f32', 'f16'] as const) {
    test(`rope_neox ${dt}: frequency factors (scaled, and 1e30: a pair left as it is), i32 positions`, () => {
      const dev = device();
      const [seqLen, nHeads, headDim, ropeDim, theta] = [5, 3, 256, 128, 1e6];
      const n = seqLen * nHeads * headDim;
      const input = dev.upload(dt, [n], randomArray(rng(5), n, -1, 1));
      const output = dev.alloc(dt, [n]);
      output.fill(Number.NaN);
      const ffs = Array.from({ length: ropeDim / 2 }, (_, i) => (i % 5 === 4 ? 1e30 : 1 + (i % 7)));
      const freqFactors = dev.upload('f32', [ropeDim / 2], ffs);
      const pos = positionsOf(3, seqLen, 131072);
      const positions = dev.upload('i32', [seqLen], pos);
      run(dev, (enc) => ropeNeox(enc, { input, output, positions, freqFactors, seqLen, nHeads, headDim, ropeDim, theta }));
      const x = input.readNumbers();
      const got = output.readNumbers();
      const want = ropeNeoxRef(x, pos, seqLen, nHeads, headDim, ropeDim, theta, ffs);
      const e = boundRatio(dt, got, want, x, neoxPairs(pos, seqLen, nHeads, headDim, ropeDim, theta, ffs), theta);
      print(`rope_neox ${dt} with factors: largest error ${e} of the bound`);
      expect(e).toBeLessThanOrEqual(1);
      // A factor of 1e30 gives angle 0 in f32: cos 1, sin 0, the pair unchanged.
      for (let i = 4; i < ropeDim / 2; i += 5) expect([got[i], got[i + headDim / 2]]).toEqual([x[i], x[i + headDim / 2]]);
    });
  }

  test('small positions (< 16) within TOL of the closed form; in place; one token', () => {
    const dev = device();
    const over: string[] = [];
    for (const dt of ['f32', 'f16', 'bf16'] as const) {
      const [seqLen, nHeads, headDim, ropeDim, theta] = [6, 3, 128, 128, 1e4];
      const n = seqLen * nHeads * headDim;
      const pos = positionsOf(dt.length, seqLen, 16);
      const positions = dev.upload('u32', [seqLen], pos);
      const x = dev.upload(dt, [n], randomArray(rng(99), n, -1, 1));
      const xs = x.readNumbers();
      run(dev, (enc) => ropeNeox(enc, { input: x, output: x, positions, seqLen, nHeads, headDim, ropeDim, theta }));
      const e1 = scaledErr(x.readNumbers(), ropeNeoxRef(xs, pos, seqLen, nHeads, headDim, ropeDim, theta));
      // The normal pairing over 144 rows (CUDA's rows form): 18 tokens' 8 heads, a position each token.
      const rowsN = 144;
      const posN = Array.from({ length: rowsN }, (_, r) => pos[Math.floor(r / 8) % seqLen]!);
      const positionsN = dev.upload('u32', [rowsN], posN);
      const y = dev.upload(dt, [rowsN * headDim], randomArray(rng(98), rowsN * headDim, -1, 1));
      const ys = y.readNumbers();
      run(dev, (enc) => rope(enc, { input: y, output: y, positions: positionsN, seqLen: rowsN, headDim, theta }));
      const e2 = scaledErr(y.readNumbers(), ropeRef(ys, posN, rowsN, headDim, theta));
      // One token, one head.
      const z = dev.upload(dt, [headDim], randomArray(rng(97), headDim, -1, 1));
      const zo = dev.alloc(dt, [headDim]);
      zo.fill(Number.NaN);
      const p1 = dev.upload('u32', [1], [11]);
      run(dev, (enc) => ropeNeox(enc, { input: z, output: zo, positions: p1, seqLen: 1, nHeads: 1, headDim, ropeDim: 32, theta }));
      const e3 = scaledErr(zo.readNumbers(), ropeNeoxRef(z.readNumbers(), [11], 1, 1, headDim, 32, theta));
      for (const [what, e] of [['neox in place', e1], ['normal in place', e2], ['one token', e3]] as const) {
        if (!(e < TOL[dt])) over.push(`${dt} ${what}: ${e}`);
      }
      print(`rope ${dt} small positions: ${e1}, ${e2}, ${e3}`);
    }
    expect(over).toEqual([]);
  });

  test('many rows: 300000 rows (CUDA: past 65535 blocks on one axis); emulator: 4099 rows', () => {
    const dev = device();
    const [nHeads, headDim, ropeDim, theta] = [1, 8, 4, 1e4];
    const seqLen = runsOnEmulator(dev) ? 4099 : 300_000;
    const n = seqLen * nHeads * headDim;
    const input = dev.upload('bf16', [n], randomArray(rng(1), n, -1, 1));
    const output = dev.alloc('bf16', [n]);
    output.fill(Number.NaN);
    const pos = Array.from({ length: seqLen }, (_, i) => i % 131072);
    const positions = dev.upload('u32', [seqLen], pos);
    run(dev, (enc) => ropeNeox(enc, { input, output, positions, seqLen, nHeads, headDim, ropeDim, theta }));
    const x = input.readNumbers();
    const got = output.readNumbers();
    const e = boundRatio('bf16', got, ropeNeoxRef(x, pos, seqLen, nHeads, headDim, ropeDim, theta), x,
      neoxPairs(pos, seqLen, nHeads, headDim, ropeDim, theta), theta);
    expect(e).toBeLessThanOrEqual(1);
    expect(tailMismatches(got, x, seqLen, headDim, ropeDim)).toBe(0);
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('rope', [
  {
    fn: 'rope', op: 'rope',
    keys: {
      input: buf(['f32', 'f16', 'bf16']), output: out(['f32', 'f16', 'bf16']), positions: buf(['u32', 'i32']),
      seqLen: int, headDim: int, theta: { kind: 'num' },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({ input: a(d, 'bf16', 24), output: a(d, 'bf16', 24), positions: a(d, 'u32', 3), seqLen: 3, headDim: 8, theta: 1e4 }),
    fill: (args) => (args.positions as Buffer).writeNumbers([3, 0, 131071]),
  },
  {
    fn: 'ropeNeox', op: 'rope_neox',
    keys: {
      input: buf(['f32', 'f16', 'bf16']), output: out(['f32', 'f16', 'bf16']), positions: buf(['u32', 'i32']),
      freqFactors: { kind: 'buf?', dtypes: F }, seqLen: int, nHeads: int, headDim: int, ropeDim: int, theta: { kind: 'num' },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({
      input: a(d, 'f32', 48), output: a(d, 'f32', 48), positions: a(d, 'i32', 2), freqFactors: a(d, 'f32', 2),
      seqLen: 2, nHeads: 3, headDim: 8, ropeDim: 4, theta: 1e6,
    }),
    fill: (args) => {
      (args.positions as Buffer).writeNumbers([5, 4099]);
      if (args.freqFactors !== undefined) (args.freqFactors as Buffer).writeNumbers([1, 8]);
    },
  },
]);
