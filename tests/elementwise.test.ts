// elementwise: the param packers against the .metal declarations, the
// launches, the reference's rounding against hand-computed values and
// against ts/dtype.ts, every validation rule, and on every backend: add,
// mul, add_scaled and scalar_mul in f32, f16 and bf16 at edge sizes (within
// the dtype's tolerance, and add and mul bit for bit the correctly rounded
// result), in place, unaligned bindings, and the casts in every direction:
// every f16 and bf16 value, and f32 ties, extremes, subnormals, NaNs and
// random bit patterns, bit for bit.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/elementwise.metal' with { type: 'text' };
import {
  ELEMENTWISE_DTYPES,
  ELEMENTWISE_FAMILY,
  ELEMENTWISE_KERNELS,
  ELEMENTWISE_SOURCES,
  cast,
  elementwiseAdd,
  elementwiseAddScaled,
  elementwiseLaunch,
  elementwiseMul,
  elementwiseVector,
  packElementwiseParams,
  packScalarMulParams,
  scalarMul,
  type ElementwiseDType,
  castRef,
  elementwiseAddRef,
  elementwiseAddScaledRef,
  elementwiseMulRef,
  formatMax,
  roundToDtype,
  scalarMulRef,
} from '../ts/ops/elementwise.ts';
import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, type Buffer, type Device, type Encoder } from '../ts/index.ts';
import { describeBackends, describeValidation, expectInvalid, maxRelErr, poisoned, randomArray, rng, TARGET_LIMITS, run, TOL } from './helpers.ts';
import { a, buf, EW, opContract, out, type Case } from './op-contract.ts';

const DTYPES = ELEMENTWISE_DTYPES;

/** The f32 value of a bit pattern. */
function f32OfBits(bits: number): number {
  return new Float32Array(new Uint32Array([bits]).buffer)[0]!;
}

describe('elementwise param packers match the .metal declarations', () => {
  test('ElementwiseParams (n_elements): buffer(3) of add and mul, buffer(2) of the casts', () => {
    for (const k of ELEMENTWISE_KERNELS) {
      const binary = /^elementwise_(add|mul)_/.test(k) && !k.includes('scaled');
      const castK = k.startsWith('cast_');
      if (!binary && !castK) continue;
      const m = new RegExp(`host_name\\("${k}"\\)\\]\\]\\s*kernel\\s+\\w+\\s+(\\w+)<`).exec(src);
      expect(m).not.toBeNull();
      expect(src).toMatch(new RegExp(`kernel void ${m![1]}\\([^{]*constant ElementwiseParams&\\s+params\\s+\\[\\[buffer\\(${binary ? 3 : 2}\\)\\]\\]`));
    }
    const bytes = packElementwiseParams({ n: 4099 });
    expect(bytes.byteLength).toBe(4);
    expect(new DataView(bytes.buffer).getUint32(0, true)).toBe(4099);
  });
  test('ScalarMulParams (scalar, count): buffer(2) of scalar_mul, buffer(3) of add_scaled', () => {
    expect(src).toMatch(/kernel void ew_scalar_mul\([^{]*constant ScalarMulParams&\s+params\s+\[\[buffer\(2\)\]\]/);
    expect(src).toMatch(/kernel void ew_add_scaled\([^{]*constant ScalarMulParams&\s+params\s+\[\[buffer\(3\)\]\]/);
    const bytes = packScalarMulParams({ scalar: 73.3212, n: 5376 });
    const v = new DataView(bytes.buffer);
    expect(bytes.byteLength).toBe(8);
    expect([v.getFloat32(0, true), v.getUint32(4, true)]).toEqual([Math.fround(73.3212), 5376]);
  });
  test('every kernel is an instantiation in the .metal source', () => {
    for (const k of ELEMENTWISE_KERNELS) expect(src).toContain(`[[host_name("${k}")]]`);
    const casts = ELEMENTWISE_KERNELS.filter((k) => k.startsWith('cast_'));
    expect(casts.length).toBe(6); // every ordered pair of f32, f16, bf16
  });
});

describe('elementwise launches', () => {
  test('vectors: 16 bytes of the narrower dtype', () => {
    expect(elementwiseVector('f32')).toBe(4);
    expect(elementwiseVector('bf16')).toBe(8);
    expect(elementwiseVector('f32', 'f16')).toBe(8);
    expect(elementwiseVector('bf16', 'f32')).toBe(8);
  });
  test('Metal one element a thread, min(256, n) a threadgroup; CUDA 256 threads of one vector', () => {
    expect(elementwiseLaunch(1, 8, TARGET_LIMITS.metal)).toMatchObject({ grid: [1, 1, 1], threads: [1, 1, 1] });
    expect(elementwiseLaunch(5376, 8, TARGET_LIMITS.cuda)).toEqual({
      grid: [21, 1, 1], threads: [256, 1, 1], cuda: { grid: [3, 1, 1], threads: [256, 1, 1] },
    });
    // The residual stream of a Gemma 4 31B prefill: [8192, 5376] bf16.
    expect(elementwiseLaunch(8192 * 5376, 8, TARGET_LIMITS.cuda).cuda).toEqual({ grid: [21504, 1, 1], threads: [256, 1, 1] });
  });
});

describe('elementwise reference against hand-computed values', () => {
  test('f16: the largest finite value, overflow, subnormals and ties to even', () => {
    expect(formatMax('f16')).toBe(65504);
    expect(roundToDtype(65519.99, 'f16')).toBe(65504);
    expect(roundToDtype(65520, 'f16')).toBe(Infinity); // the tie past 65504 rounds to the even 2^16: inf
    expect(roundToDtype(-1e6, 'f16')).toBe(-Infinity);
    expect(roundToDtype(2 ** -24, 'f16')).toBe(2 ** -24);
    expect(roundToDtype(2 ** -25, 'f16')).toBe(0); // tie between 0 and 2^-24: 0 is even
    expect(Object.is(roundToDtype(-(2 ** -25), 'f16'), -0)).toBe(true);
    expect(roundToDtype(3 * 2 ** -25, 'f16')).toBe(2 ** -23); // tie between 1 and 2 units: 2
    expect(roundToDtype(1 + 2 ** -11, 'f16')).toBe(1);
    expect(roundToDtype(1 + 3 * 2 ** -11, 'f16')).toBe(1 + 2 ** -9);
  });
  test('bf16: the largest finite value, f32 max overflows, subnormals and ties to even', () => {
    expect(formatMax('bf16')).toBe(3.3895313892515355e38);
    expect(roundToDtype(formatMax('f32'), 'bf16')).toBe(Infinity);
    expect(roundToDtype(1 + 2 ** -8, 'bf16')).toBe(1);
    expect(roundToDtype(1 + 3 * 2 ** -8, 'bf16')).toBe(1 + 2 ** -6);
    expect(roundToDtype(2 ** -133, 'bf16')).toBe(2 ** -133); // the smallest subnormal
    expect(roundToDtype(2 ** -134, 'bf16')).toBe(0);
    expect(roundToDtype(3 * 2 ** -134, 'bf16')).toBe(2 ** -132);
    expect(roundToDtype(Number.NaN, 'bf16')).toBeNaN();
  });
  test('agrees with ts/dtype.ts on 20000 random f32 bit patterns and every tie of the low half', () => {
    const r = rng(77);
    const patterns: number[] = [];
    for (let i = 0; i < 20000; i++) patterns.push(Math.floor(r.next() * 2 ** 32));
    for (let i = 0; i < 2000; i++) patterns.push(((Math.floor(r.next() * 2 ** 16) << 16) | 0x8000) >>> 0);
    for (const bits of patterns) {
      const x = f32OfBits(bits);
      if (Number.isNaN(x)) continue;
      expect([bits, roundToDtype(x, 'bf16')]).toEqual([bits, bf16BitsToF32(f32ToBf16Bits(x))]);
      expect([bits, roundToDtype(x, 'f16')]).toEqual([bits, f16BitsToF32(f32ToF16Bits(x))]);
      expect(roundToDtype(x, 'f32')).toBe(x);
    }
  });
  test('arithmetic', () => {
    expect(Array.from(elementwiseAddRef([1, 2], [0.5, -3]))).toEqual([1.5, -1]);
    expect(Array.from(elementwiseMulRef([1.5, 2], [2, -3]))).toEqual([3, -6]);
    expect(Array.from(elementwiseAddScaledRef([1, 2], [4, -1], 0.25))).toEqual([2, 1.75]);
    expect(Array.from(scalarMulRef([1, -2], 3))).toEqual([3, -6]);
    expect(Array.from(castRef([1 + 2 ** -11, 70000], 'f16'))).toEqual([1, Infinity]);
  });
});

describeValidation('elementwise validation', ({ enc, buf }) => {
  type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
  test('elementwise_add and elementwise_mul: every rule', () => {
    const base = () => ({ a: buf('bf16', 12), b: buf('bf16', 12), output: buf('bf16', 12) });
    const shared = buf('bf16', 40);
    const cases: Case[] = [
      [{ a: undefined }, 'a', 'a Buffer', 'none'],
      [{ b: 3 }, 'b', 'a Buffer', '3'],
      [{ output: null }, 'output', 'a Buffer', 'null'],
      [{ a: buf('u32', 12) }, 'a.dtype', 'one of f32, f16, bf16', 'u32'],
      [{ b: buf('f16', 12) }, 'b.dtype', 'bf16', 'f16'],
      [{ output: buf('f32', 12) }, 'output.dtype', 'bf16', 'f32'],
      [{ b: buf('bf16', 13) }, 'b.elementCount', '12', '13'],
      [{ output: buf('bf16', 11) }, 'output.elementCount', '12', '11'],
      [{ a: shared.view('bf16', [12]), output: shared.view('bf16', [12], 16) }, 'output', 'a buffer other than a', 'a view overlapping a'],
      [{ b: shared.view('bf16', [12]), output: shared.view('bf16', [12], 16) }, 'output', 'a buffer other than b', 'a view overlapping b'],
    ];
    for (const [fn, op] of [[elementwiseAdd, 'elementwise_add'], [elementwiseMul, 'elementwise_mul']] as const) {
      for (const [m, arg, expected, actual] of cases) expectInvalid(() => fn(enc(), { ...base(), ...m } as never), op, arg, expected, actual);
    }
  });
  test('elementwise_add_scaled: the scale, then the rules of add', () => {
    const base = () => ({ a: buf('f32', 5), b: buf('f32', 5), output: buf('f32', 5), scale: 0.5 });
    const cases: Case[] = [
      [{ scale: Number.NaN }, 'scale', 'a finite number of the f32 range', 'NaN'],
      [{ scale: Infinity }, 'scale', 'a finite number of the f32 range', 'Infinity'],
      [{ scale: 1e39 }, 'scale', 'a finite number of the f32 range', '1e+39'],
      [{ scale: '2' }, 'scale', 'a finite number of the f32 range', '2'],
      [{ b: buf('f16', 5) }, 'b.dtype', 'f32', 'f16'],
      [{ output: buf('f32', 6) }, 'output.elementCount', '5', '6'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => elementwiseAddScaled(enc(), { ...base(), ...m } as never), 'elementwise_add_scaled', arg, expected, actual);
    }
  });
  test('scalar_mul: every rule', () => {
    const base = () => ({ input: buf('f16', 9), output: buf('f16', 9), scalar: 2 });
    const shared = buf('f16', 40);
    const cases: Case[] = [
      [{ scalar: undefined }, 'scalar', 'a finite number of the f32 range', 'undefined'],
      [{ scalar: -Infinity }, 'scalar', 'a finite number of the f32 range', '-Infinity'],
      [{ input: {} }, 'input', 'a Buffer', 'a Object object'],
      [{ output: undefined }, 'output', 'a Buffer', 'none'],
      [{ input: buf('i32', 9) }, 'input.dtype', 'one of f32, f16, bf16', 'i32'],
      [{ output: buf('bf16', 9) }, 'output.dtype', 'f16', 'bf16'],
      [{ output: buf('f16', 18) }, 'output.elementCount', '9', '18'],
      [{ input: shared.view('f16', [9]), output: shared.view('f16', [9], 16) }, 'output', 'a buffer other than input', 'a view overlapping input'],
    ];
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => scalarMul(enc(), { ...base(), ...m } as never), 'scalar_mul', arg, expected, actual);
  });
  test('cast: every rule', () => {
    const base = () => ({ input: buf('f32', 7), output: buf('bf16', 7) });
    const shared = buf('f32', 16);
    const cases: Case[] = [
      [{ input: null }, 'input', 'a Buffer', 'null'],
      [{ output: 1 }, 'output', 'a Buffer', '1'],
      [{ input: buf('u16', 7) }, 'input.dtype', 'one of f32, f16, bf16', 'u16'],
      [{ output: buf('f32', 7) }, 'output.dtype', 'one of f16, bf16', 'f32'],
      [{ input: buf('bf16', 7), output: buf('bf16', 7) }, 'output.dtype', 'one of f32, f16', 'bf16'],
      [{ output: buf('u8', 7) }, 'output.dtype', 'one of f16, bf16', 'u8'],
      [{ output: buf('f16', 8) }, 'output.elementCount', '7', '8'],
      // f32 -> bf16 over the same allocation: the output's 14 bytes lie inside the input's 28.
      [{ input: shared.view('f32', [7]), output: shared.view('bf16', [7]) }, 'output', 'a buffer other than input', 'a view overlapping input'],
    ];
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => cast(enc(), { ...base(), ...m } as never), 'cast', arg, expected, actual);
  });
  test('element counts: at most 2^32 - 256', () => {
    // Stand-ins claiming 2^32 elements, over small buffers (the rule refuses by the count alone).
    const huge = (dtype: string): Buffer => Object.create(buf(dtype as 'f16', 16), { elementCount: { value: 2 ** 32 }, dtype: { value: dtype } });
    expectInvalid(() => cast(enc(), { input: huge('f16'), output: huge('f32') }), 'cast', 'input.elementCount', 'at most 2^32 - 256', '4294967296');
    expectInvalid(() => elementwiseAdd(enc(), { a: huge('bf16'), b: huge('bf16'), output: huge('bf16') }), 'elementwise_add',
      'a.elementCount', 'at most 2^32 - 256', '4294967296');
    expectInvalid(() => scalarMul(enc(), { input: huge('f32'), output: huge('f32'), scalar: 1 }), 'scalar_mul',
      'input.elementCount', 'at most 2^32 - 256', '4294967296');
  });
});

/** Elements per case: 1, odd sizes below and past a simdgroup, 256 and around it, several threadgroups and CUDA blocks, Gemma 4 hidden rows. */
const SIZES: readonly (readonly number[])[] = [
  [1], [3], [7], [8], [3, 11], [31], [255], [256], [257], [4, 1000], [2048], [3, 5376], [70001],
];

/** Elementwise relative error, floored at f16's smallest normal (below it f16's spacing is absolute) and 1e-3 of the largest |value|. */
function elemErr(dtype: ElementwiseDType, got: ArrayLike<number>, want: ArrayLike<number>): number {
  let scale = 0;
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]!));
  return maxRelErr(got, want, Math.max(1e-3 * scale, dtype === 'f16' ? 2 ** -14 : 0, Number.MIN_VALUE));
}

/** The indices where got differs from want rounded to the dtype (NaN matches NaN; -0 and 0 differ). */
function inexact(dtype: ElementwiseDType, got: ArrayLike<number>, want: ArrayLike<number>): string[] {
  const bad: string[] = [];
  for (let i = 0; i < want.length && bad.length < 8; i++) {
    const w = roundToDtype(want[i]!, dtype);
    const g = got[i]!;
    if (!(Object.is(g, w) || (Number.isNaN(g) && Number.isNaN(w)))) bad.push(`[${i}] got ${g}, want ${w} (exact ${want[i]})`);
  }
  return bad;
}

describeBackends('elementwise parity', ({ device }) => {
  for (const dtype of DTYPES) {
    test(`${dtype}: add, mul, add_scaled, scalar_mul at every size`, () => {
      const dev = device();
      const over: string[] = [];
      let worst = 0;
      for (const shape of SIZES) {
        const n = shape.reduce((x, y) => x * y, 1);
        const r = rng(n * 31 + dtype.length);
        const a = dev.upload(dtype, shape, randomArray(r, n, -3, 3));
        const b = dev.upload(dtype, shape, randomArray(r, n, -3, 3));
        const av = a.readNumbers();
        const bv = b.readNumbers();
        const scale = Math.fround(r.uniform(-2, 2));
        const scalar = Math.fround(Math.sqrt(5376)); // Gemma 4 31B's embedding scale
        const forms: [string, (e: Encoder, out: Buffer) => void, Float64Array, boolean][] = [
          ['add', (e, o) => elementwiseAdd(e, { a, b, output: o }), elementwiseAddRef(av, bv), true],
          ['mul', (e, o) => elementwiseMul(e, { a, b, output: o }), elementwiseMulRef(av, bv), true],
          ['add_scaled', (e, o) => elementwiseAddScaled(e, { a, b, output: o, scale }), elementwiseAddScaledRef(av, bv, scale), false],
          ['scalar_mul', (e, o) => scalarMul(e, { input: a, output: o, scalar }), scalarMulRef(av, scalar), false],
        ];
        for (const [name, rec, want, exact] of forms) {
          const out = poisoned(dev, dtype, shape);
          run(dev, (e) => rec(e, out));
          const got = out.readNumbers();
          const err = elemErr(dtype, got, want);
          worst = Math.max(worst, err);
          if (!(err < TOL[dtype])) over.push(`${name} [${shape}]: ${err}`);
          // Sums and products of two values of the dtype, in f32, are the correctly rounded results.
          if (exact) for (const s of inexact(dtype, got, want)) over.push(`${name} [${shape}] not correctly rounded: ${s}`);
          out.release();
        }
        a.release();
        b.release();
      }
      if (process.env.MLXN_PRINT_ERRORS) console.log(`elementwise ${dtype}: largest error ${worst}`);
      expect(over).toEqual([]);
    });
  }

  test('in place: the residual add into a (and b), scalar_mul and f16 <-> bf16 casts over their input', () => {
    const dev = device();
    const n = 5376 + 3;
    const r = rng(404);
    for (const dtype of DTYPES) {
      for (const into of ['a', 'b'] as const) {
        const a = dev.upload(dtype, [n], randomArray(r, n, -4, 4));
        const b = dev.upload(dtype, [n], randomArray(r, n, -4, 4));
        const want = elementwiseAddScaledRef(a.readNumbers(), b.readNumbers(), 0.5);
        run(dev, (e) => elementwiseAddScaled(e, { a, b, output: into === 'a' ? a : b, scale: 0.5 }));
        expect(elemErr(dtype, (into === 'a' ? a : b).readNumbers(), want)).toBeLessThan(TOL[dtype]);
        const scaled = scalarMulRef(a.readNumbers(), -0.75);
        run(dev, (e) => scalarMul(e, { input: a, output: a, scalar: -0.75 }));
        expect(elemErr(dtype, a.readNumbers(), scaled)).toBeLessThan(TOL[dtype]);
        a.release();
        b.release();
      }
    }
    for (const [from, to] of [['f16', 'bf16'], ['bf16', 'f16']] as const) {
      const x = dev.upload(from, [n], randomArray(r, n, -100, 100));
      const want = castRef(x.readNumbers(), to);
      const view = x.view(to, [n]);
      run(dev, (e) => cast(e, { input: x, output: view }));
      expect(inexact(to, view.readNumbers(), want)).toEqual([]);
      x.release();
    }
  });

  test('bindings at offsets that are not 16-byte aligned (the CUDA twin falls back to elements)', () => {
    const dev = device();
    dev.kernels.register(ELEMENTWISE_FAMILY, ELEMENTWISE_SOURCES, ELEMENTWISE_KERNELS);
    const n = 1001;
    const r = rng(5);
    for (const dtype of DTYPES) {
      const size = dtype === 'f32' ? 4 : 2;
      // a from element 1 and b from element 3 of theirs, output from element 5.
      const a = dev.upload(dtype, [n + 1], randomArray(r, n + 1, -2, 2));
      const b = dev.upload(dtype, [n + 3], randomArray(r, n + 3, -2, 2));
      const out = poisoned(dev, dtype, [n + 5]);
      run(dev, (e) => e.dispatch(dev.kernels.pipeline(`elementwise_add_${dtype}`), {
        buffers: [[a, size], [b, 3 * size], [out, 5 * size]], bytes: [, , , packElementwiseParams({ n })],
      }, [Math.ceil(n / 256), 1, 1], [256, 1, 1]));
      const got = out.readNumbers();
      expect(Number.isNaN(got[4]!)).toBe(true);
      const want = elementwiseAddRef(a.readNumbers().subarray(1), b.readNumbers().subarray(3));
      expect(inexact(dtype, got.subarray(5), want)).toEqual([]);
      for (const x of [a, b, out]) x.release();
    }
    const x = dev.upload('f32', [n + 1], randomArray(r, n + 1, -2, 2));
    const y = poisoned(dev, 'bf16', [n + 1]);
    run(dev, (e) => e.dispatch(dev.kernels.pipeline('cast_f32_to_bf16'), {
      buffers: [[x, 4], [y, 2]], bytes: [, , packElementwiseParams({ n })],
    }, [Math.ceil(n / 256), 1, 1], [256, 1, 1]));
    expect(inexact('bf16', y.readNumbers().subarray(1), castRef(x.readNumbers().subarray(1), 'bf16'))).toEqual([]);
    x.release();
    y.release();
  });

  /** Casts bits (the raw storage of `from`) to `to`; returns the input values and the output values. */
  function castBits(dev: Device, from: ElementwiseDType, to: ElementwiseDType, bits: Uint16Array | Uint32Array): { x: Float64Array; y: Float64Array } {
    const n = bits.length;
    const input = dev.alloc(from, [n]);
    input.write(from === 'f32' ? new Float32Array(bits.buffer, bits.byteOffset, n) : bits);
    const output = poisoned(dev, to, [n]);
    run(dev, (e) => cast(e, { input, output }));
    const out = { x: input.readNumbers(), y: output.readNumbers() };
    input.release();
    output.release();
    return out;
  }

  function expectCast(from: ElementwiseDType, to: ElementwiseDType, x: Float64Array, y: Float64Array): void {
    const bad = inexact(to, y, castRef(x, to));
    expect([`${from} -> ${to}`, bad]).toEqual([`${from} -> ${to}`, []]);
  }

  test('casts from f16 and bf16: every one of the 65536 values, to each other dtype', () => {
    const dev = device();
    const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
    for (const from of ['f16', 'bf16'] as const) {
      for (const to of DTYPES.filter((t) => t !== from)) {
        const { x, y } = castBits(dev, from, to, all);
        expectCast(from, to, x, y);
        // NaN stays NaN; infinities, zeros' signs, the extremes and the subnormals are all among them.
        let nans = 0;
        for (let i = 0; i < 65536; i++) if (Number.isNaN(x[i]!)) nans++;
        expect(nans).toBe(from === 'f16' ? 2046 : 254);
      }
    }
  });

  test('casts from f32: ties, extremes, overflow, subnormals, NaN payloads and random bit patterns', () => {
    const dev = device();
    const r = rng(2026);
    const bits: number[] = [
      0x00000000, 0x80000000, 0x7f800000, 0xff800000, // zeros, infinities
      0x7fc00000, 0xffc00000, 0x7f800001, 0x7f80ffff, 0xff800001, 0x7fffffff, 0x7fbfffff, // NaNs, some with payloads only in the low half
      0x7f7fffff, 0xff7fffff, 0x7f7f7fff, 0x7f7f8000, 0x7f7f8001, 0x7f7effff, // near f32 / bf16 max (0x7f7f8000 rounds to inf)
      0x00000001, 0x80000001, 0x00008000, 0x00018000, 0x00007fff, 0x00010000, 0x007fffff, 0x00800000, // f32 / bf16 subnormals and ties among them
      0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, 0xbf808000, // bf16 ties at 1: to even down, to even up, off the tie
      0x3f801000, 0x3f803000, 0x3f801001, 0x3f800fff, // f16 ties at 1
      0x477fe000, 0x477fefff, 0x477ff000, 0x477fffff, 0x47800000, 0xc77ff000, // f16 max 65504, just below the tie, the tie (inf), past it
      0x33800000, 0x33000000, 0x33000001, 0x33400000, 0x33c00000, 0x38800000, 0x387fc000, 0x387fe000, 0x38000000, // f16 subnormals, 2^-25 tie, min normal
      0xb3000000, 0xb3000001, // -2^-25 -> -0, just past it -> -2^-24
    ];
    for (let i = 0; i < 30000; i++) bits.push(Math.floor(r.next() * 2 ** 32));
    // Ties and neighbours at random exponents: low 16 bits 0x8000 +- 1 for bf16, low 13 bits 0x1000 +- 1 for f16.
    for (let i = 0; i < 3000; i++) {
      const hi = Math.floor(r.next() * 2 ** 16) << 16;
      for (const lo of [0x7fff, 0x8000, 0x8001]) bits.push((hi | lo) >>> 0);
      const e = (Math.floor(r.next() * 48) + 100) << 23;
      const m = Math.floor(r.next() * 2 ** 10) << 13;
      for (const lo of [0x0fff, 0x1000, 0x1001]) bits.push(((r.next() < 0.5 ? 0 : 0x80000000) | e | m | lo) >>> 0);
    }
    for (const to of ['f16', 'bf16'] as const) {
      const { x, y } = castBits(dev, 'f32', to, Uint32Array.from(bits));
      expectCast('f32', to, x, y);
      for (let i = 4; i < 11; i++) expect([to, bits[i]!.toString(16), Number.isNaN(y[i]!)]).toEqual([to, bits[i]!.toString(16), true]);
      expect(Object.is(y[1], -0)).toBe(true);
    }
  });

  test('cast round trips: f16 and bf16 through f32 come back bit for bit', () => {
    const dev = device();
    const n = 70001;
    const r = rng(9);
    for (const t of ['f16', 'bf16'] as const) {
      const x = dev.upload(t, [n], randomArray(r, n, -60000, 60000));
      const wide = poisoned(dev, 'f32', [n]);
      const back = poisoned(dev, t, [n]);
      run(dev, (e) => {
        cast(e, { input: x, output: wide });
        cast(e, { input: wide, output: back });
      });
      expect(Array.from(new Uint16Array((back.read() as Uint16Array | Float16Array).buffer))).toEqual(
        Array.from(new Uint16Array((x.read() as Uint16Array | Float16Array).buffer)));
      for (const b of [x, wide, back]) b.release();
    }
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('elementwise', [
  // The element count is the first input's (any count), the other buffers' the same,
  // so all of them may change together.
  ...(['elementwiseAdd', 'elementwiseMul', 'elementwiseAddScaled'] as const).map((fn): Case => ({
    fn, op: { elementwiseAdd: 'elementwise_add', elementwiseMul: 'elementwise_mul', elementwiseAddScaled: 'elementwise_add_scaled' }[fn],
    keys: {
      a: buf(EW, { freeCount: true }), b: buf(EW, { freeCount: true }), output: out(EW, { freeCount: true }),
      ...(fn === 'elementwiseAddScaled' ? { scale: { kind: 'num' } } : {}),
    },
    inPlace: [['a', 'output'], ['b', 'output']],
    make: (d) => ({
      a: a(d, 'bf16', 21), b: a(d, 'bf16', 21), output: a(d, 'bf16', 21), ...(fn === 'elementwiseAddScaled' ? { scale: 0.5 } : {}),
    }),
  })),
  {
    fn: 'scalarMul', op: 'scalar_mul',
    keys: { input: buf(EW, { freeCount: true }), output: out(EW, { freeCount: true }), scalar: { kind: 'num' } },
    inPlace: [['input', 'output']],
    make: (d) => ({ input: a(d, 'f16', 19), output: a(d, 'f16', 19), scalar: 73.3 }),
  },
  {
    fn: 'cast', op: 'cast',
    keys: { input: buf(EW, { freeCount: true }), output: out(EW, { freeCount: true }) },
    make: (d) => ({ input: a(d, 'f32', 17), output: a(d, 'bf16', 17) }),
  },
]);
