// moe_weighted_reduce: the param packer against the header and the .metal
// bindings, the reference against values by hand, every validation rule, and
// parity on every backend (f32, f16, bf16; one token and many; hidden sizes
// under, at and past a threadgroup and not a multiple of the 16-byte vector;
// with and without the residual, and in place over it; inputs as views at
// offsets of one allocation, outputs poisoned).
//
// Error measure: |got - want| / (sum of |terms|) per output (dotErr: the
// sum of top_k products, the gated shared term and the residual, each f32
// rounding bounded by its term's magnitude), under the output dtype's TOL.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/moe_weighted_reduce.metal' with { type: 'text' };
import type { Buffer, Device } from '../ts/index.ts';
import {
  MOE_WEIGHTED_REDUCE_KERNELS,
  MOE_WEIGHTED_REDUCE_NORM_PARAMS_LAYOUT,
  moeWeightedReduce,
  moeWeightedReduceCudaLaunch,
  moeWeightedReduceNorm,
  packMoeWeightedReduceParams,
  packMoeWeightedReduceNormParams,
  moeWeightedReduceRef,
} from '../ts/ops/moe_weighted_reduce.ts';
import { rmsNormRef } from '../ts/ops/rms_norm.ts';
import { readField } from './metal-source.ts';
import { describeBackends, describeValidation, dotErr, expectInvalid, poisoned, randomArray, rng, roundedTo, TOL } from './helpers.ts';
import { a, buf, EW, F, int, opContract, out } from './op-contract.ts';

describe('moe_weighted_reduce param packer matches the .metal declaration', () => {
  test('MoeWeightedReduceParams (n_tokens, top_k, h, add_residual) at buffer(0); the CUDA launch', () => {
    for (const k of MOE_WEIGHTED_REDUCE_KERNELS) {
      const struct = k.startsWith('moe_weighted_reduce_norm_') ? 'MoeWeightedReduceNormParams' : 'MoeWeightedReduceParams';
      expect(src).toMatch(new RegExp(`kernel void ${k}\\(\\s*constant ${struct}&\\s+p\\s+\\[\\[buffer\\(0\\)\\]\\]`));
    }
    const pn = packMoeWeightedReduceNormParams({ nTokens: 3, topK: 8, h: 2048, addResidual: true, eps: 1e-6 });
    expect(MOE_WEIGHTED_REDUCE_NORM_PARAMS_LAYOUT.map((f) => readField(pn, f))).toEqual([3, 8, 2048, 1, Math.fround(1e-6)]);
    const p = packMoeWeightedReduceParams({ nTokens: 3, topK: 8, h: 2048, addResidual: true });
    expect(Array.from(new Uint32Array(p.buffer, p.byteOffset, 4))).toEqual([3, 8, 2048, 1]);
    expect(moeWeightedReduceCudaLaunch(1, 2048, 'bf16')).toEqual({ grid: [1, 1, 1], threads: [256, 1, 1] });
    expect(moeWeightedReduceCudaLaunch(512, 2048, 'f32')).toEqual({ grid: [2, 512, 1], threads: [256, 1, 1] });
  });
});

describe('moe_weighted_reduce reference against values by hand', () => {
  test('two slots, a shared expert gated by sigmoid(0) = 1/2, a residual', () => {
    const y = moeWeightedReduceRef([0.25, 0.75], [4, 8, -4, 0], [0], [10, 20], [1, 1], 1, 2, 2);
    expect(Array.from(y)).toEqual([0.25 * 4 + 0.75 * -4 + 5 + 1, 0.25 * 8 + 0 + 10 + 1]);
  });
});

describeValidation('moe_weighted_reduce validation', ({ enc, buf }) => {
  test('every rule', () => {
    const base = () => ({
      expertW: buf('f32', 6), yExpert: buf('bf16', 54), shLogit: buf('bf16', 2), yShared: buf('bf16', 18),
      residual: buf('bf16', 18) as Buffer | undefined, output: buf('bf16', 18), nTokens: 2, topK: 3, h: 9,
    });
    const big = buf('bf16', 40);
    type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
    const cases: Case[] = [
      [{ nTokens: 0 }, 'nTokens', 'a positive integer', '0'],
      [{ topK: 1.5 }, 'topK', 'a positive integer', '1.5'],
      [{ h: 2 ** 32 }, 'h', 'at most 2^32 - 1', `${2 ** 32}`],
      [{ nTokens: 65536 }, 'nTokens', 'at most 65535', '65536'],
      [{ nTokens: 60000, topK: 2 ** 20, h: 2 ** 20 }, 'nTokens * topK * h', 'a product of integers at most 2^53 - 1', '62914560000 * 1048576'],
      [{ expertW: buf('bf16', 6) }, 'expertW.dtype', 'f32', 'bf16'],
      [{ yExpert: buf('u32', 54) }, 'yExpert.dtype', 'one of f32, f16, bf16', 'u32'],
      [{ shLogit: buf('f32', 2) }, 'shLogit.dtype', 'bf16', 'f32'],
      [{ yShared: buf('f16', 18) }, 'yShared.dtype', 'bf16', 'f16'],
      [{ residual: buf('f32', 18) }, 'residual.dtype', 'bf16', 'f32'],
      [{ output: buf('f16', 18) }, 'output.dtype', 'one of bf16, f32', 'f16'],
      [{ output: buf('f32', 18) }, 'shLogit.dtype', 'f32', 'bf16'],
      [{ expertW: buf('f32', 5) }, 'expertW.elementCount', 'at least 6', '5'],
      [{ yExpert: buf('bf16', 53) }, 'yExpert.elementCount', 'at least 54', '53'],
      [{ shLogit: buf('bf16', 1) }, 'shLogit.elementCount', 'at least 2', '1'],
      [{ yShared: buf('bf16', 17) }, 'yShared.elementCount', 'at least 18', '17'],
      [{ residual: buf('bf16', 17) }, 'residual.elementCount', 'at least 18', '17'],
      [{ output: buf('bf16', 17) }, 'output.elementCount', 'at least 18', '17'],
      [{ yShared: big.view('bf16', [18]), output: big.view('bf16', [18], 16) }, 'output', 'a buffer other than yShared', 'a view overlapping yShared'],
      [{ residual: big.view('bf16', [18]), output: big.view('bf16', [18], 16) }, 'output', 'a buffer other than residual', 'a view overlapping residual'],
      [{ residual: null }, 'residual', 'a Buffer', 'null'],
      // The shared row in bf16 only beside bf16 expert outputs and f32 activations (_bf16_shared).
      [{ output: buf('f32', 18), shLogit: buf('f32', 2), residual: buf('f32', 18), yShared: buf('f16', 18) }, 'yShared.dtype', 'one of f32, bf16', 'f16'],
      [{ yExpert: buf('f32', 54), output: buf('f32', 18), shLogit: buf('f32', 2), residual: buf('f32', 18) }, 'yShared.dtype', 'f32', 'bf16'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => moeWeightedReduce(enc(), { ...base(), ...m } as never), 'moe_weighted_reduce', arg, expected, actual);
    }
  });

  test('moe_weighted_reduce_norm: the reduction\'s rules, f32 output, the norm\'s weight, output and eps', () => {
    const op = 'moe_weighted_reduce_norm';
    const base = () => ({
      expertW: buf('f32', 6), yExpert: buf('bf16', 54), shLogit: buf('f32', 2), yShared: buf('bf16', 18),
      residual: buf('f32', 18) as Buffer | undefined, output: buf('f32', 18), normWeight: buf('f32', 9), normed: buf('f32', 18),
      nTokens: 2, topK: 3, h: 9, eps: 1e-6,
    });
    type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
    const cases: Case[] = [
      [{ nTokens: 0 }, 'nTokens', 'a positive integer', '0'],
      [{ yExpert: buf('f16', 54), yShared: buf('f16', 18), shLogit: buf('f16', 2), residual: buf('f16', 18), output: buf('f16', 18) },
        'output.dtype', 'f32', 'f16'],
      [{ normWeight: buf('bf16', 9) }, 'normWeight.dtype', 'f32', 'bf16'],
      [{ normWeight: buf('f32', 8) }, 'normWeight.elementCount', 'at least 9', '8'],
      [{ normed: buf('bf16', 18) }, 'normed.dtype', 'f32', 'bf16'],
      [{ normed: buf('f32', 17) }, 'normed.elementCount', 'at least 18', '17'],
      [{ eps: -1 }, 'eps', 'a finite number >= 0', '-1'],
      [{ eps: Number.NaN }, 'eps', 'a finite number >= 0', 'NaN'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => moeWeightedReduceNorm(enc(), { ...base(), ...m } as never), op, arg, expected, actual);
    }
    const b = base();
    expectInvalid(() => moeWeightedReduceNorm(enc(), { ...b, normed: b.residual! }), op, 'normed', 'a buffer other than residual', 'the buffer of residual');
    expectInvalid(() => moeWeightedReduceNorm(enc(), { ...b, normed: b.output }), op, 'output', 'a buffer other than normed', 'the buffer of normed');
    moeWeightedReduceNorm(enc(), { ...b, output: b.residual! });
  });
});

describeBackends('moe_weighted_reduce parity', ({ device }) => {
  // dt: every activation's dtype; 'bf16_input': bf16 expert outputs, f32 for the rest; 'bf16_shared': the shared
  // row in bf16 too.
  type Form0 = 'f32' | 'f16' | 'bf16' | 'bf16_input' | 'bf16_shared';
  function check(dev: Device, form0: Form0, T: number, K: number, H: number, form: 'residual' | 'none' | 'in place', seed: number,
    norm = false): number {
    const r = rng(seed);
    const mixed = form0 === 'bf16_input' || form0 === 'bf16_shared';
    const dt = mixed ? 'f32' : form0, et = mixed ? 'bf16' : form0, st = form0 === 'bf16_shared' ? 'bf16' : dt;
    const w = roundedTo('f32', randomArray(r, T * K, 0, 1));
    const ye = roundedTo(et, randomArray(r, T * K * H, -2, 2));
    const sl = roundedTo(dt, randomArray(r, T, -4, 4));
    const ys = roundedTo(st, randomArray(r, T * H, -2, 2));
    const res = roundedTo(dt, randomArray(r, T * H, -3, 3));
    // The inputs as views at 16-byte offsets of one allocation, garbage between them.
    const size = dt === 'f32' ? 4 : 2;
    const parts = [T * K * H * (et === 'f32' ? 4 : 2), T * size, T * H * (st === 'f32' ? 4 : 2), T * H * size];
    const at: number[] = [];
    let end = 48;
    for (const p of parts) {
      at.push(end);
      end = Math.ceil((end + p) / 16) * 16 + 16;
    }
    const root = dev.alloc('u8', [end]);
    root.write(Uint8Array.from({ length: end }, () => Math.floor(r.uniform(0, 256))));
    const yExpert = root.view(et, [T * K, H], at[0]!);
    yExpert.writeNumbers(ye);
    const shLogit = root.view(dt, [T], at[1]!);
    shLogit.writeNumbers(sl);
    const yShared = root.view(st, [T, H], at[2]!);
    yShared.writeNumbers(ys);
    const residual = root.view(dt, [T, H], at[3]!);
    residual.writeNumbers(res);
    const expertW = dev.upload('f32', [T, K], w);
    const output = form === 'in place' ? residual : poisoned(dev, dt, [T, H]);
    const nw = randomArray(r, H, 0.5, 1.5);
    const normWeight = norm ? dev.upload('f32', [H], nw) : undefined;
    const normed = norm ? poisoned(dev, 'f32', [T, H]) : undefined;
    const enc = dev.encoder();
    const args = { expertW, yExpert, shLogit, yShared, residual: form === 'none' ? undefined : residual, output, nTokens: T, topK: K, h: H };
    if (norm) moeWeightedReduceNorm(enc, { ...args, normWeight: normWeight!, normed: normed!, eps: 1e-6 });
    else moeWeightedReduce(enc, args);
    enc.commitAndWait();
    enc.release();
    const withRes = form === 'none' ? null : res;
    const want = moeWeightedReduceRef(w, ye, sl, ys, withRes, T, K, H), terms = moeWeightedReduceRef(w, ye, sl, ys, withRes, T, K, H, true);
    let err = dotErr(output.readNumbers(), want, terms);
    if (norm) {
      // normed = output * r * w: the output's error bound (its terms) carried by r * w, plus the norm's own rounding.
      const wantN = rmsNormRef(want, nw, T, H, 1e-6), got = normed!.readNumbers();
      for (let t = 0; t < T; t++) {
        let sq = 0;
        for (let d = 0; d < H; d++) sq += want[t * H + d]! ** 2;
        const rr = 1 / Math.sqrt(sq / H + 1e-6);
        for (let d = 0; d < H; d++) {
          const i = t * H + d;
          const scale = terms[i]! * rr * nw[d]! + Math.abs(wantN[i]!) + Number.MIN_VALUE;
          err = Math.max(err, Math.abs(got[i]! - wantN[i]!) / scale);
        }
      }
      normWeight!.release();
      normed!.release();
    }
    root.release();
    expertW.release();
    if (form !== 'in place') output.release();
    return err;
  }

  // bf16_input, bf16_shared: the bf16 rows rounded to bf16 by the reference's inputs too, so the f32 tolerance.
  for (const dt of ['f32', 'f16', 'bf16', 'bf16_input', 'bf16_shared'] as const) {
    test(`${dt}: one token and many, odd hidden sizes, with and without the residual, in place`, () => {
      const dev = device();
      const over: string[] = [];
      const shapes: [T: number, K: number, H: number][] = [[1, 1, 1], [1, 8, 2048], [3, 8, 257], [5, 2, 7], [2, 4, 512], [7, 3, 100]];
      let seed = 1;
      for (const [T, K, H] of shapes) {
        for (const form of ['residual', 'none', 'in place'] as const) {
          const e = check(dev, dt, T, K, H, form, seed++);
          if (!(e < TOL[dt === 'bf16_input' || dt === 'bf16_shared' ? 'f32' : dt])) over.push(`[${T}, ${K}, ${H}] ${form}: ${e}`);
        }
      }
      expect(over).toEqual([]);
    });
  }

  for (const dt of ['f32', 'bf16_input', 'bf16_shared'] as const) {
    test(`moe_weighted_reduce_norm ${dt}: the reduction and its rows' norm, one token and many, odd sizes, in place`, () => {
      const dev = device();
      const over: string[] = [];
      const shapes: [T: number, K: number, H: number][] = [[1, 1, 1], [1, 8, 2048], [3, 8, 257], [5, 2, 7], [2, 4, 4100], [7, 3, 100]];
      let seed = 100;
      for (const [T, K, H] of shapes) {
        for (const form of ['residual', 'none', 'in place'] as const) {
          const e = check(dev, dt, T, K, H, form, seed++, true);
          if (!(e < TOL.f32)) over.push(`[${T}, ${K}, ${H}] ${form}: ${e}`);
        }
      }
      expect(over).toEqual([]);
    });
  }
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('moe_weighted_reduce', [
  // The crate's rule: each buffer at least its size (freeCount).
  {
    fn: 'moeWeightedReduce', op: 'moe_weighted_reduce',
    keys: {
      expertW: buf(F, { freeCount: true }), yExpert: buf(EW, { freeCount: true }), shLogit: buf(EW, { freeCount: true }),
      yShared: buf(EW, { freeCount: true }), residual: { kind: 'buf?', dtypes: EW, freeCount: true }, output: out(EW, { freeCount: true }),
      nTokens: int, topK: int, h: int,
    },
    inPlace: [['output', 'residual']],
    make: (d) => ({
      expertW: a(d, 'f32', 6), yExpert: a(d, 'bf16', 6 * 9), shLogit: a(d, 'bf16', 2), yShared: a(d, 'bf16', 18), residual: a(d, 'bf16', 18),
      output: a(d, 'bf16', 18), nTokens: 2, topK: 3, h: 9,
    }),
  },
  // bf16 expert outputs beside f32 activations (moe_weighted_reduce_bf16_input; f32 ones take the f32 kernel; a bf16
  // shared row _bf16_shared).
  {
    fn: 'moeWeightedReduce', op: 'moe_weighted_reduce',
    keys: {
      expertW: buf(F, { freeCount: true }), yExpert: buf(['bf16', 'f32'], { freeCount: true }), shLogit: buf(F, { freeCount: true }),
      yShared: buf(['f32', 'bf16'], { freeCount: true }), residual: { kind: 'buf?', dtypes: F, freeCount: true }, output: out(F, { freeCount: true }),
      nTokens: int, topK: int, h: int,
    },
    inPlace: [['output', 'residual']],
    make: (d) => ({
      expertW: a(d, 'f32', 6), yExpert: a(d, 'bf16', 6 * 12), shLogit: a(d, 'f32', 2), yShared: a(d, 'f32', 24), residual: a(d, 'f32', 24),
      output: a(d, 'f32', 24), nTokens: 2, topK: 3, h: 12,
    }),
  },
  // The shared row in bf16 too (moe_weighted_reduce_bf16_shared: the shared expert as one more slot of the products).
  {
    fn: 'moeWeightedReduce', op: 'moe_weighted_reduce',
    keys: {
      expertW: buf(F, { freeCount: true }), yExpert: buf(['bf16', 'f32'], { freeCount: true }), shLogit: buf(F, { freeCount: true }),
      yShared: buf(['bf16', 'f32'], { freeCount: true }), residual: { kind: 'buf?', dtypes: F, freeCount: true }, output: out(F, { freeCount: true }),
      nTokens: int, topK: int, h: int,
    },
    inPlace: [['output', 'residual']],
    make: (d) => ({
      expertW: a(d, 'f32', 6), yExpert: a(d, 'bf16', 6 * 12), shLogit: a(d, 'f32', 2), yShared: a(d, 'bf16', 24), residual: a(d, 'f32', 24),
      output: a(d, 'f32', 24), nTokens: 2, topK: 3, h: 12,
    }),
  },
  // The reduction and the norm of its rows (moe_weighted_reduce_norm_*: f32 output).
  {
    fn: 'moeWeightedReduceNorm', op: 'moe_weighted_reduce_norm',
    keys: {
      expertW: buf(F, { freeCount: true }), yExpert: buf(['bf16', 'f32'], { freeCount: true }), shLogit: buf(F, { freeCount: true }),
      yShared: buf(['bf16', 'f32'], { freeCount: true }), residual: { kind: 'buf?', dtypes: F, freeCount: true }, output: out(F, { freeCount: true }),
      normWeight: buf(F, { freeCount: true }), normed: out(F, { freeCount: true }), nTokens: int, topK: int, h: int, eps: { kind: 'nonneg' },
    },
    inPlace: [['output', 'residual']],
    make: (d) => ({
      expertW: a(d, 'f32', 6), yExpert: a(d, 'bf16', 6 * 12), shLogit: a(d, 'f32', 2), yShared: a(d, 'bf16', 24), residual: a(d, 'f32', 24),
      output: a(d, 'f32', 24), normWeight: a(d, 'f32', 12), normed: a(d, 'f32', 24), nTokens: 2, topK: 3, h: 12, eps: 1e-6,
    }),
  },
]);
