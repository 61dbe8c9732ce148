// rope_multi: the param packers against the .metal declarations, the
// reference against hand-computed values and against rope_neox's, every
// validation rule, and parity on every backend for MROPE, IMROPE and VISION,
// f32, f16 and bf16, positions of four different axes up to 131071, partial
// rotary, sections that wrap, odd head counts, one token and many, in place.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/rope_multi.metal' with { type: 'text' };
import {
  ROPE_MULTI_KERNELS,
  ROPE_MULTI_PARAMS_LAYOUT,
  ROPE_MULTI_ROPE_PARAMS_LAYOUT,
  ROPE_MULTI_SECTIONS_LAYOUT,
  packRopeMultiParams,
  packRopeMultiRopeParams,
  packRopeMultiSections,
  ropeMulti,
  ropeMultiLaunch,
  type RopeMultiMode,
  ropeMultiAngle,
  ropeMultiAxis,
  ropeMultiRef,
} from '../ts/ops/rope_multi.ts';
import { ROPE_HEADS, ROPE_PAIRS, ropeHeadsCudaLaunch, ropeNeoxRef } from '../ts/ops/rope.ts';
import commonCuh from '../shaders/cuda/common.cuh' with { type: 'text' };
import { describeBackends, describeValidation, expectInvalid, rng, randomArray, runsOnEmulator, scaledErr, TOL } from './helpers.ts';
import { bufferParam } from './metal-source.ts';
import type { Device } from '../ts/index.ts';
import { a, buf, int, opContract, out } from './op-contract.ts';
import type { Buffer } from '../ts/index.ts';

describe('rope_multi param packers match the .metal declarations', () => {
  test('(freq_base, head_dim, rope_dim, 0) floats at buffer(2); (n_heads, mode, seq_len, 0) at (4); sections at (5)', () => {
    for (const k of ROPE_MULTI_KERNELS) {
      expect(bufferParam(src, k, 2)).toMatch(/^constant RopeMultiParams& params /);
      expect(bufferParam(src, k, 4)).toMatch(/^constant RopeMultiRopeParams& rope_params /);
      expect(bufferParam(src, k, 5)).toMatch(/^constant RopeMultiSections& sections /);
    }
    const f = new DataView(packRopeMultiParams({ freqBase: 1e7, headDim: 256, ropeDim: 64 }).buffer);
    expect(ROPE_MULTI_PARAMS_LAYOUT.map((x) => f.getFloat32(x.offset, true))).toEqual([1e7, 256, 64, 0]);
    const u = new DataView(packRopeMultiRopeParams({ nHeads: 5, mode: 'imrope', seqLen: 9 }).buffer);
    expect(ROPE_MULTI_ROPE_PARAMS_LAYOUT.map((x) => u.getUint32(x.offset, true))).toEqual([5, 40, 9, 0]);
    expect(new DataView(packRopeMultiRopeParams({ nHeads: 1, mode: 'mrope', seqLen: 1 }).buffer).getUint32(4, true)).toBe(8);
    expect(new DataView(packRopeMultiRopeParams({ nHeads: 1, mode: 'vision', seqLen: 1 }).buffer).getUint32(4, true)).toBe(24);
    const s = new DataView(packRopeMultiSections([11, 11, 10, 0]).buffer);
    expect(ROPE_MULTI_SECTIONS_LAYOUT.map((x) => s.getUint32(x.offset, true))).toEqual([11, 11, 10, 0]);
  });
  test('launch: (min(headDim/2, 256), min(rows, 256 / tx)) threads; CUDA puts rows on x; the heads form for many tokens', () => {
    expect(ropeMultiLaunch(128, 15)).toEqual({ grid: [1, 8, 1], threads: [128, 2, 1], cuda: { grid: [8, 1, 1], threads: [128, 2, 1] } });
    expect(ropeMultiLaunch(256, 3)).toEqual({ grid: [1, 3, 1], threads: [256, 1, 1], cuda: { grid: [3, 1, 1], threads: [256, 1, 1] } });
    expect(ropeMultiLaunch(32, 1)).toEqual({ grid: [1, 1, 1], threads: [32, 1, 1], cuda: { grid: [1, 1, 1], threads: [32, 1, 1] } });
    const e = 'k_heads';
    expect(ropeHeadsCudaLaunch('k', 128, 8192, 16)).toEqual({ grid: [8192, 1, 1], threads: [32, 2, 1], entry: e });
    expect(ropeHeadsCudaLaunch('k', 512, 5, 17)).toEqual({ grid: [5, 2, 1], threads: [64, 3, 1], entry: e });
    expect(ropeHeadsCudaLaunch('k', 3, 1, 2)).toEqual({ grid: [1, 1, 1], threads: [1, 1, 1], entry: e });
    expect(ropeHeadsCudaLaunch('k', 4, 3, 100000)).toEqual({ grid: [3, 1, 1], threads: [1, 1024, 1], entry: e });
    expect(commonCuh).toContain(`constexpr u32 ROPE_HEADS = ${ROPE_HEADS}u;`);
    expect(commonCuh).toContain(`constexpr u32 ROPE_PAIRS = ${ROPE_PAIRS}u;`);
  });
});

describe('rope_multi reference against hand-computed values', () => {
  test('axes: MROPE contiguous, IMROPE cycling by 3, VISION two sections', () => {
    const s = [2, 2, 1, 0];
    expect([0, 1, 2, 3, 4].map((k) => ropeMultiAxis(k, 'mrope', s))).toEqual([0, 0, 1, 1, 2]);
    expect([0, 1, 2, 3, 4, 5, 6].map((k) => ropeMultiAxis(k, 'imrope', s))).toEqual([0, 1, 2, 0, 1, 3, 3]);
    expect([0, 1, 2, 3].map((k) => ropeMultiAxis(k, 'vision', [2, 2, 0, 0]))).toEqual([0, 0, 1, 1]);
  });
  test('angles: pos[axis] * base^(-2p/ropeDim); vision restarts the exponent per section over headDim/2', () => {
    // positions [4, 1]: t 10, h 20, w 30, e 40; headDim 16, ropeDim 8, base 2.
    const pos = [10, 20, 30, 40];
    expect(ropeMultiAngle(pos, 1, 0, 3, 16, 8, 2, 'mrope', [2, 2, 1, 0])[0]).toBeCloseTo(20 * 2 ** -0.75, 14);
    expect(ropeMultiAngle(pos, 1, 0, 2, 16, 8, 2, 'imrope', [2, 2, 1, 0])[0]).toBeCloseTo(30 * 2 ** -0.5, 14);
    // vision, headDim 8, sections [2, 2]: pair 3 is axis 1, q = 1, exponent 2/4.
    expect(ropeMultiAngle(pos, 1, 0, 3, 8, 8, 2, 'vision', [2, 2, 0, 0])[0]).toBeCloseTo(20 * 2 ** -0.5, 14);
  });
  test('IMROPE with four equal position rows and ropeDim = headDim is NeoX rope', () => {
    const x = randomArray(rng(4), 2 * 3 * 16, -1, 1);
    const pos = [5, 9];
    const multi = ropeMultiRef(x, [...pos, ...pos, ...pos, ...pos], 2, 3, 16, 16, 1e4, 'imrope', [3, 3, 2, 0]);
    const neox = ropeNeoxRef(x, pos, 2, 3, 16, 16, 1e4);
    for (let i = 0; i < x.length; i++) expect(multi[i]).toBeCloseTo(neox[i]!, 14);
  });
});

describeValidation('rope_multi validation', ({ enc, buf }) => {
  test('every rule', () => {
    const base = () => ({
      input: buf('f32', 96), output: buf('f32', 96), positions: buf('i32', 8), seqLen: 2, nHeads: 3, headDim: 16, ropeDim: 8,
      freqBase: 1e7, mode: 'imrope' as RopeMultiMode, sections: [2, 1, 1, 0] as [number, number, number, number],
    });
    type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
    const cases: Case[] = [
      [{ seqLen: 0 }, 'seqLen', 'a positive integer', '0'],
      [{ nHeads: 1.5 }, 'nHeads', 'a positive integer', '1.5'],
      [{ headDim: 15 }, 'headDim', 'a multiple of 2', '15'],
      [{ headDim: 2 ** 25 }, 'headDim', 'at most 2^24', `${2 ** 25}`],
      [{ ropeDim: 0 }, 'ropeDim', 'a positive integer', '0'],
      [{ ropeDim: 5 }, 'ropeDim', 'a multiple of 2', '5'],
      [{ ropeDim: 18 }, 'ropeDim', 'at most headDim (16)', '18'],
      [{ freqBase: 0 }, 'freqBase', 'a finite f32 > 0', '0'],
      [{ freqBase: Number.NaN }, 'freqBase', 'a finite f32 > 0', 'NaN'],
      [{ mode: 'yarn' }, 'mode', 'one of mrope, imrope, vision', 'yarn'],
      [{ sections: [1, 2, 3] }, 'sections', 'an array of 4 section sizes', '[1, 2, 3]'],
      [{ sections: [1, -1, 0, 0] }, 'sections[1]', 'an integer in [0, 2^24]', '-1'],
      [{ mode: 'vision' }, 'ropeDim', 'headDim (16) in vision mode', '8'],
      [{ mode: 'vision', ropeDim: 16, sections: [4, 3, 1, 0] }, 'sections[0] + sections[1]', 'headDim / 2 (8) in vision mode', '7'],
      [{ seqLen: 2 ** 20, nHeads: 2 ** 13 }, 'seqLen * nHeads', 'at most 2^32 - 1', `${2 ** 33}`],
      [{ input: buf('u32', 96) }, 'input.dtype', 'one of f32, f16, bf16', 'u32'],
      [{ output: buf('bf16', 96) }, 'output.dtype', 'f32', 'bf16'],
      [{ positions: buf('f32', 8) }, 'positions.dtype', 'one of i32, u32', 'f32'],
      [{ input: buf('f32', 95) }, 'input.elementCount', '96', '95'],
      [{ output: buf('f32', 48) }, 'output.elementCount', '96', '48'],
      [{ positions: buf('i32', 2) }, 'positions.elementCount', '8', '2'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => ropeMulti(enc(), { ...base(), ...m }), 'rope_multi', arg, expected, actual);
    }
    const root = buf('f32', 192);
    expectInvalid(() => ropeMulti(enc(), { ...base(), input: root.view('f32', [96]), output: root.view('f32', [96], 16) }), 'rope_multi',
      'output', 'a buffer other than input', 'a view overlapping input');
  });
});

// The error bound of tests/rope.test.ts (there, why): the angle formed in f32
// is off by at most |angle| * (ln(base) * exponent + 8) * 2^-24 + 2^-23, an
// output of a pair of magnitude r by r times that plus r * 2^-22, plus half
// an ulp of the output dtype.
type Dt = 'f32' | 'f16' | 'bf16';
const U_OUT: Record<Dt, number> = { f32: 0, f16: 2 ** -11, bf16: 2 ** -8 };

interface Shape {
  seqLen: number; nHeads: number; headDim: number; ropeDim: number; freqBase: number; mode: RopeMultiMode;
  sections: [number, number, number, number];
}

/** max |got - want| / bound over the rotated pairs, and the copied elements that differ from the input. */
function check(dt: Dt, sh: Shape, got: ArrayLike<number>, x: ArrayLike<number>, pos: ArrayLike<number>): { ratio: number; copied: number } {
  const want = ropeMultiRef(x, pos, sh.seqLen, sh.nHeads, sh.headDim, sh.ropeDim, sh.freqBase, sh.mode, sh.sections);
  const half = sh.headDim / 2;
  let ratio = 0;
  let copied = 0;
  for (let r = 0; r < sh.seqLen * sh.nHeads; r++) {
    const token = Math.floor(r / sh.nHeads);
    for (let p = 0; p < half; p++) {
      const [ia, ib] = [r * sh.headDim + p, r * sh.headDim + p + half];
      if (p >= sh.ropeDim / 2) {
        if (!Object.is(got[ia], x[ia]) || !Object.is(got[ib], x[ib])) copied++;
        continue;
      }
      const [t, ex] = ropeMultiAngle(pos, sh.seqLen, token, p, sh.headDim, sh.ropeDim, sh.freqBase, sh.mode, sh.sections);
      const mag = Math.hypot(x[ia]!, x[ib]!);
      const e32 = mag * (Math.abs(t) * (Math.log(sh.freqBase) * ex + 8) * 2 ** -24 + 2 ** -23) + mag * 2 ** -22;
      for (const k of [ia, ib]) {
        if (!Number.isFinite(got[k]!)) return { ratio: Infinity, copied };
        const bound = e32 + (Math.abs(want[k]!) + e32) * U_OUT[dt] + (dt === 'f16' ? 2 ** -25 : 0) + Number.MIN_VALUE;
        ratio = Math.max(ratio, Math.abs(got[k]! - want[k]!) / bound);
      }
    }
  }
  return { ratio, copied };
}

/** Positions [4, seqLen]: each axis its own, 131071 and 0 among them, else uniform in [0, maxPos). */
function positionsOf(seed: number, seqLen: number, maxPos: number): number[] {
  const g = rng(seed);
  return Array.from({ length: 4 * seqLen }, (_, i) => (i === 0 ? Math.min(131071, maxPos - 1) : i === 1 ? 0 : Math.floor(g.next() * maxPos)));
}

function runOp(dev: Device, dt: Dt, sh: Shape, pos: number[], seed: number, inPlace = false): { got: Float64Array; x: Float64Array } {
  const n = sh.seqLen * sh.nHeads * sh.headDim;
  const input = dev.upload(dt, [sh.seqLen, sh.nHeads, sh.headDim], randomArray(rng(seed), n, -2, 2));
  const output = inPlace ? input : dev.alloc(dt, [sh.seqLen, sh.nHeads, sh.headDim]);
  const x = input.readNumbers();
  if (!inPlace) output.fill(Number.NaN);
  const positions = dev.upload('i32', [4, sh.seqLen], pos);
  const enc = dev.encoder();
  ropeMulti(enc, { input, output, positions, ...sh });
  enc.commitAndWait();
  enc.release();
  const got = output.readNumbers();
  input.release();
  if (!inPlace) output.release();
  positions.release();
  return { got, x };
}

const print = (s: string): void => {
  if (process.env.MLXN_PRINT_ERRORS) console.log(s);
};

describeBackends('rope_multi parity', ({ device }) => {
  const SHAPES: readonly Shape[] = [
    // Qwen3.5 / 3.6 full attention: a quarter of 256 rotated, IMROPE [11, 11, 10, 0], base 1e7.
    { seqLen: 3, nHeads: 5, headDim: 256, ropeDim: 64, freqBase: 1e7, mode: 'imrope', sections: [11, 11, 10, 0] },
    { seqLen: 1, nHeads: 1, headDim: 256, ropeDim: 64, freqBase: 1e7, mode: 'imrope', sections: [11, 11, 10, 0] },
    { seqLen: 2, nHeads: 3, headDim: 128, ropeDim: 128, freqBase: 1e4, mode: 'mrope', sections: [16, 24, 24, 0] },
    // Sections that cover fewer pairs than are rotated (the sector wraps), and an e axis.
    { seqLen: 5, nHeads: 1, headDim: 64, ropeDim: 48, freqBase: 1e4, mode: 'mrope', sections: [2, 2, 1, 3] },
    { seqLen: 2, nHeads: 7, headDim: 512, ropeDim: 128, freqBase: 1e6, mode: 'imrope', sections: [4, 3, 2, 1] },
    // CUDA's heads form (16 tokens or more): more heads than a thread holds (19: 8 + 8 + 3), rotated pairs ending
    // inside a thread's four (13); Qwen3.6's shape.
    { seqLen: 17, nHeads: 19, headDim: 64, ropeDim: 26, freqBase: 1e4, mode: 'imrope', sections: [5, 4, 4, 0] },
    { seqLen: 16, nHeads: 16, headDim: 256, ropeDim: 64, freqBase: 1e7, mode: 'imrope', sections: [11, 11, 10, 0] },
    // Qwen3-VL ViT: vision, sections [headDim/4, headDim/4].
    { seqLen: 4, nHeads: 2, headDim: 64, ropeDim: 64, freqBase: 1e4, mode: 'vision', sections: [16, 16, 0, 0] },
    { seqLen: 3, nHeads: 3, headDim: 80, ropeDim: 80, freqBase: 1e4, mode: 'vision', sections: [12, 28, 5, 5] },
  ];
  for (const dt of ['f32', 'f16', 'bf16'] as const) {
    test(`${dt}: MROPE, IMROPE, VISION, positions to 131071 on four axes`, () => {
      const dev = device();
      const over: string[] = [];
      let worst = 0;
      SHAPES.forEach((sh, i) => {
        const pos = positionsOf(i + 1, sh.seqLen, 131072);
        const { got, x } = runOp(dev, dt, sh, pos, 100 + i);
        const { ratio, copied } = check(dt, sh, got, x, pos);
        if (!(ratio <= 1) || copied !== 0) over.push(`${JSON.stringify(sh)}: ${ratio} of the bound, ${copied} copied elements differ`);
        worst = Math.max(worst, ratio);
      });
      print(`rope_multi ${dt}: largest error ${worst} of the bound`);
      expect(over).toEqual([]);
    });
  }

  test('small positions (< 16) within TOL; in place', () => {
    const dev = device();
    const sh: Shape = { seqLen: 6, nHeads: 3, headDim: 256, ropeDim: 64, freqBase: 1e7, mode: 'imrope', sections: [11, 11, 10, 0] };
    const over: string[] = [];
    for (const dt of ['f32', 'f16', 'bf16'] as const) {
      const pos = positionsOf(7, sh.seqLen, 16);
      const { got, x } = runOp(dev, dt, sh, pos, 9, true);
      const e = scaledErr(got, ropeMultiRef(x, pos, sh.seqLen, sh.nHeads, sh.headDim, sh.ropeDim, sh.freqBase, sh.mode, sh.sections));
      print(`rope_multi ${dt} small positions, in place: ${e}`);
      if (!(e < TOL[dt])) over.push(`${dt}: ${e}`);
    }
    expect(over).toEqual([]);
  });

  test('many rows: 200000 tokens (CUDA: past 65535 blocks on one axis); emulator: 2051', () => {
    const dev = device();
    const sh: Shape = {
      seqLen: runsOnEmulator(dev) ? 2051 : 200_000, nHeads: 1, headDim: 8, ropeDim: 8, freqBase: 1e4, mode: 'imrope', sections: [1, 1, 1, 1],
    };
    const pos = positionsOf(3, sh.seqLen, 131072);
    const { got, x } = runOp(dev, 'f32', sh, pos, 5);
    const { ratio, copied } = check('f32', sh, got, x, pos);
    expect(ratio).toBeLessThanOrEqual(1);
    expect(copied).toBe(0);
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('rope_multi', [
  {
    fn: 'ropeMulti', op: 'rope_multi',
    keys: {
      input: buf(['f32', 'f16', 'bf16']), output: out(['f32', 'f16', 'bf16']), positions: buf(['i32', 'u32']),
      seqLen: int, nHeads: int, headDim: int, ropeDim: int, freqBase: { kind: 'num' },
      mode: { kind: 'enum', values: ['mrope', 'imrope', 'vision'] }, sections: { kind: 'free' },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({
      input: a(d, 'f16', 48), output: a(d, 'f16', 48), positions: a(d, 'i32', 8), seqLen: 2, nHeads: 3, headDim: 8, ropeDim: 4,
      freqBase: 1e7, mode: 'imrope', sections: [1, 1, 0, 0],
    }),
    fill: (args) => (args.positions as Buffer).writeNumbers([7, 131071, 3, 5, 0, 9, 2, 4]),
  },
]);
