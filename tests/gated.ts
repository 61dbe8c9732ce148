// The tests the gated activation families share (silu_mul, sigmoid_mul,
// gelu's gelu_tanh_mul: y = f(gate) * other, from two inputs and from rows
// [gate | other]): every validation rule of both forms, and parity against
// the float64 reference on every backend, for f32, f16 and bf16: sizes at
// the edges (one element, odd sizes, sizes under, at and past the 256-thread
// group and the 16-byte vector), several rows, in place, saturating gates
// (|g| up to the dtype's largest finite value: no NaN, the limits), and
// threadgroup sizes other than the op's.

import { expect, test } from 'bun:test';
import { Buffer, type Device, type DType, type Encoder } from '../ts/index.ts';
import type { FamilySources } from '../ts/registry.ts';
import { describeBackends, expectInvalid, maxRelErr, poisoned, randomArray, rng, TOL, type ValidationContext } from './helpers.ts';
import { a, buf, EW, int, out, type Case } from './op-contract.ts';

type Float = 'f32' | 'f16' | 'bf16';
export const FLOATS: readonly Float[] = ['f32', 'f16', 'bf16'];

export interface GatedFamily {
  /** The family, its sources and kernels (for dispatches at other threadgroup sizes). */
  family: string;
  sources: FamilySources;
  kernels: readonly string[];
  /** The two ops' names, as their messages start. */
  pairOp: string;
  halvesOp: string;
  /** The pair form's two input names in binding order (silu_mul: gate, up; sigmoid_mul: x, gate), and which is the gate. */
  pairNames: readonly [string, string];
  gateName: string;
  /** The halves form's input name. */
  halvesInput: string;
  /** Records the pair op with these buffers. */
  pair(enc: Encoder, gate: Buffer, other: Buffer, output: Buffer): void;
  /** Records the halves op. */
  halves(enc: Encoder, input: Buffer, output: Buffer, rows: number, dim: number): void;
  pairRef(gate: ArrayLike<number>, other: ArrayLike<number>): Float64Array;
  halvesRef(input: ArrayLike<number>, rows: number, dim: number): Float64Array;
  /** The pair kernel's buffers in binding order. */
  pairBindings(gate: Buffer, other: Buffer, output: Buffer): Buffer[];
  /** The params bytes of the pair kernel (buffer 3) and of the halves kernel (buffer 2). */
  packPair(n: number): Uint8Array;
  packHalves(dim: number, rows: number): Uint8Array;
}

/**
 * A Buffer that reports `count` elements of `dtype` without holding them: the
 * element bounds are checked before any size-proportional work, and a buffer
 * of 2^32 elements would take 8 GiB or more.
 */
export function phantomBuffer(device: Device, dtype: DType, count: number): Buffer {
  const b = Object.create(Buffer.prototype) as Buffer;
  for (const [k, v] of Object.entries({ device, released: false, dtype, elementCount: count, shape: [count] })) {
    Object.defineProperty(b, k, { value: v });
  }
  return b;
}

/** Every rule of the pair form, refused with the op's words. */
export function expectPairRules(f: GatedFamily, { device, enc, buf }: ValidationContext): void {
  const [an, bn] = f.pairNames;
  const call = (m: Record<string, unknown>) => {
    const args = { [an]: buf('f32', 30), [bn]: buf('f32', 30), output: buf('f32', 30), ...m } as Record<string, Buffer>;
    return () => pairByName(f, enc(), args);
  };
  const shared = buf('f32', 34);
  type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
  const cases: Case[] = [
    [{ [an]: undefined }, an, 'a Buffer', 'none'],
    [{ [bn]: 3 }, bn, 'a Buffer', '3'],
    [{ output: null }, 'output', 'a Buffer', 'null'],
    [{ [an]: buf('u16', 30) }, `${an}.dtype`, 'one of f32, f16, bf16', 'u16'],
    [{ [bn]: buf('f16', 30) }, `${bn}.dtype`, 'f32', 'f16'],
    [{ output: buf('bf16', 30) }, 'output.dtype', 'f32', 'bf16'],
    [{ [bn]: buf('f32', 31) }, `${bn}.elementCount`, '30', '31'],
    [{ output: buf('f32', 29) }, 'output.elementCount', '30', '29'],
    [{ [an]: phantomBuffer(device(), 'f32', 2 ** 32) }, `${an}.elementCount`, 'at most 2^32 - 256', `${2 ** 32}`],
    [{ [an]: shared.view('f32', [30]), output: shared.view('f32', [30], 16) }, 'output', `a buffer other than ${an}`, 'a view overlapping'],
    [{ [bn]: shared.view('f32', [30], 16), output: shared.view('f32', [30]) }, 'output', `a buffer other than ${bn}`, 'a view overlapping'],
  ];
  for (const [m, arg, expected, actual] of cases) expectInvalid(call(m), f.pairOp, arg, expected, actual);
  const other = buf('f32', 30);
  expect(() => pairByName(f, enc(), { [an]: other, [bn]: other, output: other })).not.toThrow();
}

/** Every rule of the halves form, refused with the op's words. */
export function expectHalvesRules(f: GatedFamily, { enc, buf }: ValidationContext): void {
  const base = () => ({ input: buf('bf16', 24), output: buf('bf16', 12), rows: 3, dim: 4 });
  type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
  const shared = buf('bf16', 40);
  const x = f.halvesInput;
  const cases: Case[] = [
    [{ rows: 0 }, 'rows', 'a positive integer', '0'],
    [{ dim: 1.5 }, 'dim', 'a positive integer', '1.5'],
    [{ rows: 2 ** 31, dim: 2 ** 23 }, 'rows * dim', 'a product of integers at most 2^53 - 1', `${2 ** 31} * ${2 ** 23}`],
    [{ rows: 2 ** 16, dim: 2 ** 16 }, 'rows * dim', 'at most 2^32 - 256', `${2 ** 32}`],
    [{ input: undefined }, x, 'a Buffer', 'none'],
    [{ output: 'y' }, 'output', 'a Buffer', 'y'],
    [{ input: buf('u32', 24) }, `${x}.dtype`, 'one of f32, f16, bf16', 'u32'],
    [{ output: buf('f16', 12) }, 'output.dtype', 'bf16', 'f16'],
    [{ input: buf('bf16', 12) }, `${x}.elementCount`, '24', '12'],
    [{ output: buf('bf16', 24) }, 'output.elementCount', '12', '24'],
    [{ input: shared.view('bf16', [24]), output: shared.view('bf16', [12], 32) }, 'output', `a buffer other than ${x}`, 'a view overlapping'],
  ];
  for (const [m, arg, expected, actual] of cases) {
    const a = { ...base(), ...m } as { input: Buffer; output: Buffer; rows: number; dim: number };
    expectInvalid(() => f.halves(enc(), a.input, a.output, a.rows, a.dim), f.halvesOp, arg, expected, actual);
  }
  const whole = buf('bf16', 24);
  expectInvalid(() => f.halves(enc(), whole, whole.view('bf16', [12]), 3, 4), f.halvesOp, 'output', `a buffer other than ${x}`,
    'a view overlapping');
}

/** The pair op called with arguments by name (gate and the other input as the family names them). */
function pairByName(f: GatedFamily, enc: Encoder, args: Record<string, Buffer>): void {
  const [an, bn] = f.pairNames;
  const [gate, other] = an === f.gateName ? [args[an]!, args[bn]!] : [args[bn]!, args[an]!];
  f.pair(enc, gate, other, args.output!);
}

/**
 * The error of an elementwise output: maxRelErr with its floor of 1e-3 of the
 * largest |want|, and for f16 at least its smallest normal (2^-14), below
 * which its spacing is absolute (a lone gelu(-7.5) ~ -4e-18 is 0 in f16).
 */
export function gatedErr(dtype: Float, got: ArrayLike<number>, want: ArrayLike<number>): number {
  let scale = 0;
  for (let i = 0; i < want.length; i++) if (Number.isFinite(want[i]!)) scale = Math.max(scale, Math.abs(want[i]!));
  return maxRelErr(got, want, Math.max(1e-3 * scale, dtype === 'f16' ? 2 ** -14 : 0, Number.MIN_VALUE));
}

/** Pair sizes: one element, under and past a 16-byte vector, the 256-thread group, odd sizes, an MLP row. */
const PAIR_SIZES = [1, 2, 3, 7, 8, 9, 255, 256, 257, 1000, 4099, 17408];
/** Halves shapes [rows, dim]: odd dims make rows start off 16-byte alignment (the CUDA twin's element-by-element path). */
const HALVES_SHAPES: readonly [number, number][] = [
  [1, 1], [1, 2], [3, 3], [2, 7], [4, 8], [2, 9], [3, 64], [2, 255], [2, 256], [3, 257], [1, 1000], [2, 2051],
];

/** Values that saturate the activations: past exp's f32 range (|g| > 88.7), and the dtype's largest finite values. */
function saturating(dtype: Float): number[] {
  const big = dtype === 'f16' ? [1e3, 1e4, 65504] : [1e3, 1e4, 1e20, 1e30, 3e38];
  return [0, 1e-6, 0.5, 1, 10, 20, 40, 80, 88, 89, 100, ...big].flatMap((v) => [v, -v]);
}

export function describeGatedParity(f: GatedFamily): void {
  describeBackends(`${f.family} parity (${f.pairOp}, ${f.halvesOp})`, ({ device }) => {
    const run = (dev: Device, record: (enc: Encoder) => void) => {
      const enc = dev.encoder();
      record(enc);
      enc.commitAndWait();
      enc.release();
    };

    for (const dtype of FLOATS) {
      test(`${dtype}: two inputs, n = ${PAIR_SIZES.join(', ')}`, () => {
        const dev = device();
        const over: string[] = [];
        for (const n of PAIR_SIZES) {
          const r = rng(n * 31 + dtype.length);
          const gate = dev.upload(dtype, [n], randomArray(r, n, -8, 8));
          const other = dev.upload(dtype, [n], randomArray(r, n, -2, 2));
          const y = poisoned(dev, dtype, [n]);
          run(dev, (enc) => f.pair(enc, gate, other, y));
          const e = gatedErr(dtype, y.readNumbers(), f.pairRef(gate.readNumbers(), other.readNumbers()));
          if (!(e < TOL[dtype])) over.push(`n ${n}: ${e}`);
          for (const b of [gate, other, y]) b.release();
        }
        expect(over).toEqual([]);
      });

      test(`${dtype}: halves, [rows, dim] = ${HALVES_SHAPES.map(([r, d]) => `[${r}, ${d}]`).join(' ')}`, () => {
        const dev = device();
        const over: string[] = [];
        for (const [rows, dim] of HALVES_SHAPES) {
          const x = dev.upload(dtype, [rows, 2 * dim], randomArray(rng(rows * 7919 + dim), 2 * rows * dim, -8, 8));
          const y = poisoned(dev, dtype, [rows, dim]);
          run(dev, (enc) => f.halves(enc, x, y, rows, dim));
          const e = gatedErr(dtype, y.readNumbers(), f.halvesRef(x.readNumbers(), rows, dim));
          if (!(e < TOL[dtype])) over.push(`[${rows}, ${dim}]: ${e}`);
          x.release();
          y.release();
        }
        expect(over).toEqual([]);
      });

      test(`${dtype}: saturating gates, |g| up to ${saturating(dtype).at(-2)}: finite, the limits`, () => {
        const dev = device();
        const g = saturating(dtype);
        const n = g.length;
        const r = rng(n);
        const sign = () => (r.next() < 0.5 ? -1 : 1);
        const gate = dev.upload(dtype, [n], g);
        const other = dev.upload(dtype, [n], Array.from({ length: n }, () => sign() * r.uniform(0.25, 1)));
        const y = poisoned(dev, dtype, [n]);
        run(dev, (enc) => f.pair(enc, gate, other, y));
        const got = y.readNumbers();
        expect(got.filter((v) => !Number.isFinite(v)).length).toBe(0);
        expect(gatedErr(dtype, got, f.pairRef(gate.readNumbers(), other.readNumbers()))).toBeLessThan(TOL[dtype]);
        // The same gates as rows [gate | other], then [-gate | other].
        const gs = gate.readNumbers();
        const os = other.readNumbers();
        const x = dev.upload(dtype, [2, 2 * n], [...gs, ...os, ...gs.map((v) => -v), ...os]);
        const yh = poisoned(dev, dtype, [2, n]);
        run(dev, (enc) => f.halves(enc, x, yh, 2, n));
        const gotH = yh.readNumbers();
        expect(gotH.filter((v) => !Number.isFinite(v)).length).toBe(0);
        expect(gatedErr(dtype, gotH, f.halvesRef(x.readNumbers(), 2, n))).toBeLessThan(TOL[dtype]);
        for (const b of [gate, other, y, x, yh]) b.release();
      });
    }

    test('in place: output over the gate, over the other input (f32, bf16)', () => {
      const dev = device();
      for (const dtype of ['f32', 'bf16'] as const) {
        const n = 1031;
        const r = rng(n);
        for (const over of ['gate', 'other'] as const) {
          const gate = dev.upload(dtype, [n], randomArray(r, n, -6, 6));
          const other = dev.upload(dtype, [n], randomArray(r, n, -2, 2));
          const want = f.pairRef(gate.readNumbers(), other.readNumbers());
          const y = over === 'gate' ? gate : other;
          run(dev, (enc) => f.pair(enc, gate, other, y));
          expect(gatedErr(dtype, y.readNumbers(), want)).toBeLessThan(TOL[dtype]);
          gate.release();
          other.release();
        }
      }
    });

    test('any threadgroup size: 1, 40, 96, 1000 threads (the kernels bound their own work)', () => {
      const dev = device();
      dev.kernels.register(f.family, f.sources, f.kernels);
      const over: string[] = [];
      for (const threads of [1, 40, 96, 1000]) {
        const [n, rows, dim] = [1037, 3, 301];
        const r = rng(threads);
        const gate = dev.upload('f16', [n], randomArray(r, n, -6, 6));
        const other = dev.upload('f16', [n], randomArray(r, n, -2, 2));
        const y = poisoned(dev, 'f16', [n]);
        let enc = dev.encoder();
        enc.dispatch(dev.kernels.pipeline(`${f.pairOp}_f16`), { buffers: f.pairBindings(gate, other, y), bytes: { 3: f.packPair(n) } },
          [Math.ceil(n / threads), 1, 1], [threads, 1, 1]);
        enc.commitAndWait();
        enc.release();
        const e = gatedErr('f16', y.readNumbers(), f.pairRef(gate.readNumbers(), other.readNumbers()));
        if (!(e < TOL.f16)) over.push(`${f.pairOp}, ${threads} threads: ${e}`);
        const x = dev.upload('f16', [rows, 2 * dim], randomArray(r, 2 * rows * dim, -6, 6));
        const yh = poisoned(dev, 'f16', [rows, dim]);
        enc = dev.encoder();
        enc.dispatch(dev.kernels.pipeline(`${f.halvesOp}_f16`), { buffers: [x, yh], bytes: { 2: f.packHalves(dim, rows) } },
          [Math.ceil(dim / threads), rows, 1], [threads, 1, 1]);
        enc.commitAndWait();
        enc.release();
        const eh = gatedErr('f16', yh.readNumbers(), f.halvesRef(x.readNumbers(), rows, dim));
        if (!(eh < TOL.f16)) over.push(`${f.halvesOp}, ${threads} threads: ${eh}`);
        for (const b of [gate, other, y, x, yh]) b.release();
      }
      expect(over).toEqual([]);
    });
  });
}

/** An op's function name: its message's name in camelCase. */
const camel = (op: string): string => op.replace(/_(\w)/g, (_, c: string) => c.toUpperCase());

/**
 * The op cases of a family's two forms (tests/op-contract.ts). The pair
 * form takes its element count from the first buffer: any count, the others
 * the same.
 */
export function gatedOpCases(f: GatedFamily): Case[] {
  const [an, bn] = f.pairNames;
  const x = f.halvesInput;
  return [
    {
      fn: camel(f.pairOp), op: f.pairOp,
      keys: { [an]: buf(EW, { freeCount: true }), [bn]: buf(EW, { freeCount: true }), output: out(EW, { freeCount: true }) },
      inPlace: [['output', an], ['output', bn]],
      make: (d) => ({ [an]: a(d, 'bf16', 20), [bn]: a(d, 'bf16', 20), output: a(d, 'bf16', 20) }),
    },
    {
      fn: camel(f.halvesOp), op: f.halvesOp,
      keys: { [x]: buf(EW), output: out(EW), rows: int, dim: int },
      make: (d) => ({ [x]: a(d, 'f16', 42), output: a(d, 'f16', 21), rows: 3, dim: 7 }),
    },
  ];
}
