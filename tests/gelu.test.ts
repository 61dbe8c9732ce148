// gelu: the reference against hand-computed values (the tanh approximation
// as written), the param packers against the .metal declarations, every
// validation rule of gelu, gelu_tanh_mul and its halves form, gelu's launch
// (one thread per element, the rest in a second dispatch), and parity on
// every backend: gelu alone at sizes around the 256-thread group, in place,
// large |x|; gelu_tanh_mul through tests/gated.ts (f32, f16, bf16, sizes at
// the edges, several rows, in place, saturating gates, other threadgroup sizes).

import { describe, expect, test } from 'bun:test';
import src from '../shaders/gelu.metal' with { type: 'text' };
import {
  GELU_FAMILY,
  GELU_KERNELS,
  GELU_SOURCES,
  gelu,
  geluTanhMul,
  geluTanhMulHalves,
  packGeluTanhMulHalvesParams,
  packGeluTanhMulParams,
  geluCudaLaunch,
  planGelu,
  geluRef,
  geluTanhMulHalvesRef,
  geluTanhMulRef,
  geluTanhRef,
} from '../ts/ops/gelu.ts';
import type { Buffer } from '../ts/index.ts';
import { describeGatedParity, expectHalvesRules, expectPairRules, FLOATS, gatedErr, gatedOpCases, phantomBuffer, type GatedFamily } from './gated.ts';
import { describeBackends, describeValidation, expectInvalid, poisoned, randomArray, rng, TARGET_LIMITS, TOL, words } from './helpers.ts';
import { a, buf, EW, opContract, out } from './op-contract.ts';

const FAMILY: GatedFamily = {
  family: GELU_FAMILY, sources: GELU_SOURCES, kernels: GELU_KERNELS,
  pairOp: 'gelu_tanh_mul', halvesOp: 'gelu_tanh_mul_halves', pairNames: ['gate', 'up'], gateName: 'gate', halvesInput: 'gateUp',
  pair: (enc, gate, up, output) => geluTanhMul(enc, { gate, up, output }),
  halves: (enc, gateUp, output, rows, dim) => geluTanhMulHalves(enc, { gateUp, output, rows, dim }),
  pairRef: geluTanhMulRef,
  halvesRef: geluTanhMulHalvesRef,
  pairBindings: (gate, up, output) => [gate, up, output],
  packPair: (n) => packGeluTanhMulParams({ n }),
  packHalves: (dim, rows) => packGeluTanhMulHalvesParams({ dim, rows }),
};

describe('gelu param packers and bindings match the .metal declarations', () => {
  test('gelu_<t>: mlx-native\'s 0 input, 1 output and no params', () => {
    expect(src).toMatch(/kernel void gelu\(\s*device const T\*\s+input\s+\[\[buffer\(0\)\]\],\s*device T\*\s+output\s+\[\[buffer\(1\)\]\],\s*uint id/);
  });
  test('GeluTanhMulParams (n) at buffer(3) after 0 gate, 1 up, 2 output; GeluTanhMulHalvesParams (dim, rows) at buffer(2)', () => {
    expect(src).toMatch(/kernel void gelu_tanh_mul\(\s*device const T\*\s+gate\s+\[\[buffer\(0\)\]\],\s*device const T\*\s+up\s+\[\[buffer\(1\)\]\],\s*device T\*\s+output\s+\[\[buffer\(2\)\]\],\s*constant GeluTanhMulParams&\s+params\s+\[\[buffer\(3\)\]\]/);
    expect(src).toMatch(/kernel void gelu_tanh_mul_halves\([^{]*constant GeluTanhMulHalvesParams&\s+params\s+\[\[buffer\(2\)\]\]/);
    expect(words(packGeluTanhMulParams({ n: 21504 }))).toEqual([21504]);
    expect(words(packGeluTanhMulHalvesParams({ dim: 21504, rows: 2 }))).toEqual([21504, 2]);
  });
});

describe('gelu reference against hand-computed values', () => {
  test('gelu(0) = 0, gelu(1) = 0.5 (1 + tanh(sqrt(2/pi) 1.044715)); the limits x and -0; GeGLU rows', () => {
    expect(geluTanhRef(0)).toBe(0);
    expect(geluTanhRef(1)).toBeCloseTo(0.5 * (1 + Math.tanh(0.7978845608028654 * 1.044715)), 15);
    expect(geluTanhRef(1)).toBeCloseTo(0.8411919906082768, 12);
    expect(geluTanhRef(-1)).toBeCloseTo(-0.15880800939172324, 12);
    expect(geluTanhRef(100)).toBe(100);
    expect(Object.is(geluTanhRef(-100), -0)).toBe(true);
    expect(Array.from(geluRef([2, -3]))).toEqual([geluTanhRef(2), geluTanhRef(-3)]);
    expect(Array.from(geluTanhMulRef([2], [3]))).toEqual([3 * geluTanhRef(2)]);
    expect(Array.from(geluTanhMulHalvesRef([1, 2, 10, 20, 3, 4, 30, 40], 2, 2))).toEqual(
      [geluTanhRef(1) * 10, geluTanhRef(2) * 20, geluTanhRef(3) * 30, geluTanhRef(4) * 40]);
  });
  test('the kernels\' form x / (1 + exp(-2u)) is the same function', () => {
    for (const x of [-12, -5, -1, -0.1, 0.3, 2, 7]) {
      const u = Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3);
      expect(x / (1 + Math.exp(-2 * u))).toBeCloseTo(geluTanhRef(x), 14);
    }
  });
});

describeValidation('gelu validation', (ctx) => {
  test('every rule of gelu', () => {
    const { device, enc, buf } = ctx;
    const shared = buf('f16', 24);
    type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
    const cases: Case[] = [
      [{ input: undefined }, 'input', 'a Buffer', 'none'],
      [{ output: 1 }, 'output', 'a Buffer', '1'],
      [{ input: buf('i32', 10) }, 'input.dtype', 'one of f32, f16, bf16', 'i32'],
      [{ output: buf('bf16', 10) }, 'output.dtype', 'f16', 'bf16'],
      [{ output: buf('f16', 11) }, 'output.elementCount', '10', '11'],
      [{ input: phantomBuffer(device(), 'f16', 2 ** 32) }, 'input.elementCount', 'at most 2^32 - 256', `${2 ** 32}`],
      [{ input: shared.view('f16', [10]), output: shared.view('f16', [10], 16) }, 'output', 'a buffer other than input', 'a view overlapping input'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      const a = { input: buf('f16', 10), output: buf('f16', 10), ...m } as { input: Buffer; output: Buffer };
      expectInvalid(() => gelu(enc(), a), 'gelu', arg, expected, actual);
    }
  });
  test('every rule of gelu_tanh_mul', () => expectPairRules(FAMILY, ctx));
  test('every rule of gelu_tanh_mul_halves', () => expectHalvesRules(FAMILY, ctx));
  test('gelu\'s launch: floor(n / 256) groups of 256, then one group of n % 256 over views at element 256 floor(n / 256)', () => {
    const { buf } = ctx;
    const plan = (n: number) => {
      const [input, output] = [buf('bf16', n), buf('bf16', n)];
      return { input, output, d: planGelu({ input, output }, TARGET_LIMITS.metal).dispatches };
    };
    let p = plan(512);
    expect(p.d.map((d) => [d.grid, d.threads])).toEqual([[[2, 1, 1], [256, 1, 1]]]);
    expect(p.d[0]!.buffers).toEqual([p.input, p.output]);
    p = plan(7);
    expect(p.d.map((d) => [d.grid, d.threads])).toEqual([[[1, 1, 1], [7, 1, 1]]]);
    p = plan(4099);
    expect(p.d.map((d) => [d.grid, d.threads])).toEqual([[[16, 1, 1], [256, 1, 1]], [[1, 1, 1], [3, 1, 1]]]);
    const [vi, vo] = [p.d[1]!.buffers[0]!, p.d[1]!.buffers[1]!];
    expect([vi.root, vi.byteOffset, vi.elementCount, vo.root, vo.byteOffset]).toEqual([p.input, 4096 * 2, 3, p.output, 4096 * 2]);
  });
  test('gelu\'s CUDA launch: the first dispatch one 16-byte vector a thread, in blocks (T / 2, 2), T dividing the vectors', () => {
    const { buf } = ctx;
    const cuda = (dtype: 'f32' | 'bf16', n: number) =>
      planGelu({ input: buf(dtype, n), output: buf(dtype, n) }, TARGET_LIMITS.cuda).dispatches.map((d) => d.cuda && [d.cuda.grid, d.cuda.threads]);
    expect(cuda('bf16', 4099)).toEqual([[[2, 1, 1], [128, 2, 1]], undefined]);
    expect(cuda('bf16', 768)).toEqual([[[3, 1, 1], [16, 2, 1]]]);
    expect(cuda('f32', 1024)).toEqual([[[1, 1, 1], [128, 2, 1]]]);
    expect(cuda('bf16', 21504)).toEqual([[[21, 1, 1], [64, 2, 1]]]);
    expect(cuda('bf16', 8192 * 21504)).toEqual([[[86016, 1, 1], [128, 2, 1]]]);
    expect(cuda('bf16', 7)).toEqual([undefined]);
    expect(geluCudaLaunch(256, 'bf16', { maxThreadsPerThreadgroup: 1, simdWidth: 32 })).toBeNull();
  });
});

describeBackends('gelu parity', ({ device }) => {
  const SIZES = [1, 2, 255, 256, 257, 511, 512, 513, 768, 4099, 21504];
  for (const dtype of FLOATS) {
    test(`${dtype}: n = ${SIZES.join(', ')}; |x| up to the dtype's range`, () => {
      const dev = device();
      const over: string[] = [];
      for (const n of SIZES) {
        const x = dev.upload(dtype, [n], randomArray(rng(n), n, -8, 8));
        const y = poisoned(dev, dtype, [n]);
        const enc = dev.encoder();
        gelu(enc, { input: x, output: y });
        enc.commitAndWait();
        enc.release();
        const e = gatedErr(dtype, y.readNumbers(), geluRef(x.readNumbers()));
        if (!(e < TOL[dtype])) over.push(`n ${n}: ${e}`);
        x.release();
        y.release();
      }
      const big = dtype === 'f16' ? [9, 10, 11, 20, 1e3, 65504] : [9, 10, 11, 20, 1e3, 1e20, 3e38];
      const x = dev.upload(dtype, [2 * big.length], big.flatMap((v) => [v, -v]));
      const y = poisoned(dev, dtype, [2 * big.length]);
      const enc = dev.encoder();
      gelu(enc, { input: x, output: y });
      enc.commitAndWait();
      enc.release();
      const got = y.readNumbers();
      if (got.some((v) => !Number.isFinite(v))) over.push(`large |x|: ${Array.from(got).join(', ')}`);
      const e = gatedErr(dtype, got, geluRef(x.readNumbers()));
      if (!(e < TOL[dtype])) over.push(`large |x|: ${e}`);
      expect(over).toEqual([]);
    });
  }

  test('in place (bf16, 1000 elements: both dispatches)', () => {
    const dev = device();
    const x = dev.upload('bf16', [1000], randomArray(rng(1000), 1000, -6, 6));
    const want = geluRef(x.readNumbers());
    const enc = dev.encoder();
    gelu(enc, { input: x, output: x });
    enc.commitAndWait();
    enc.release();
    expect(gatedErr('bf16', x.readNumbers(), want)).toBeLessThan(TOL.bf16);
  });
});

describeGatedParity(FAMILY);

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('gelu', [
  ...gatedOpCases(FAMILY),
  {
    // 300 elements: a group of 256, then 44 over views of input and output.
    fn: 'gelu', op: 'gelu',
    keys: { input: buf(EW, { freeCount: true }), output: out(EW, { freeCount: true }) },
    inPlace: [['output', 'input']],
    make: (d) => ({ input: a(d, 'f32', 300), output: a(d, 'f32', 300) }),
  },
]);
