// silu_mul: the reference against hand-computed values, the param packers
// against the .metal declarations, the launch, every validation rule of both
// forms, and parity on every backend (tests/gated.ts: f32, f16, bf16, sizes
// at the edges, several rows, in place, saturating gates, other threadgroup
// sizes).

import { describe, expect, test } from 'bun:test';
import src from '../shaders/silu_mul.metal' with { type: 'text' };
import {
  SILU_MUL_FAMILY,
  SILU_MUL_KERNELS,
  SILU_MUL_SOURCES,
  packSiluMulHalvesParams,
  packSiluMulParams,
  planSiluMul,
  planSiluMulHalves,
  siluMul,
  siluMulHalves,
  siluMulHalvesRef,
  siluMulRef,
  siluRef,
} from '../ts/ops/silu_mul.ts';
import { gatedLaunch } from '../ts/gated.ts';
import { describeGatedParity, expectHalvesRules, expectPairRules, gatedOpCases, type GatedFamily } from './gated.ts';
import { opContract } from './op-contract.ts';
import { describeValidation, TARGET_LIMITS, words } from './helpers.ts';

const FAMILY: GatedFamily = {
  family: SILU_MUL_FAMILY, sources: SILU_MUL_SOURCES, kernels: SILU_MUL_KERNELS,
  pairOp: 'silu_mul', halvesOp: 'silu_mul_halves', pairNames: ['gate', 'up'], gateName: 'gate', halvesInput: 'gateUp',
  pair: (enc, gate, up, output) => siluMul(enc, { gate, up, output }),
  halves: (enc, gateUp, output, rows, dim) => siluMulHalves(enc, { gateUp, output, rows, dim }),
  pairRef: siluMulRef,
  halvesRef: siluMulHalvesRef,
  pairBindings: (gate, up, output) => [gate, up, output],
  packPair: (n) => packSiluMulParams({ n }),
  packHalves: (dim, rows) => packSiluMulHalvesParams({ dim, rows }),
};

describe('silu_mul param packers match the .metal declarations', () => {
  test('SiluMulParams (n, mlx-native\'s 4-byte params buffer) at buffer(3); SiluMulHalvesParams (dim, rows) at buffer(2)', () => {
    expect(src).toMatch(/kernel void silu_mul\([^{]*constant SiluMulParams&\s+params\s+\[\[buffer\(3\)\]\]/);
    expect(src).toMatch(/kernel void silu_mul_halves\([^{]*constant SiluMulHalvesParams&\s+params\s+\[\[buffer\(2\)\]\]/);
    expect(words(packSiluMulParams({ n: 17408 }))).toEqual([17408]);
    expect(words(packSiluMulHalvesParams({ dim: 17408, rows: 3 }))).toEqual([17408, 3]);
  });
  test('mlx-native\'s bindings: 0 gate, 1 up, 2 output', () => {
    expect(src).toMatch(/device const T\*\s+gate\s+\[\[buffer\(0\)\]\],\s*device const T\*\s+up\s+\[\[buffer\(1\)\]\],\s*device T\*\s+output\s+\[\[buffer\(2\)\]\]/);
  });
});

describe('the gated launch (ts/gated.ts, every gated op)', () => {
  test('Metal: one element per thread, (ceil(dim / tg), rows) groups of min(256, dim); CUDA: one 16-byte vector per thread', () => {
    expect(gatedLaunch(1, 17408, 'bf16', TARGET_LIMITS.cuda)).toEqual({
      grid: [68, 1, 1], threads: [256, 1, 1], cuda: { grid: [9, 1, 1], threads: [256, 1, 1] },
    });
    expect(gatedLaunch(8192, 17408, 'bf16', TARGET_LIMITS.cuda).cuda.grid).toEqual([8192 * 2176 / 256, 1, 1]);
    expect(gatedLaunch(8192, 17408, 'f32', TARGET_LIMITS.metal).grid).toEqual([68, 8192, 1]);
    expect(gatedLaunch(3, 7, 'f32', TARGET_LIMITS.metal)).toEqual({
      grid: [1, 3, 1], threads: [7, 1, 1], cuda: { grid: [1, 1, 1], threads: [256, 1, 1] },
    });
    expect(gatedLaunch(1, 1, 'f16', TARGET_LIMITS.metal)).toEqual({
      grid: [1, 1, 1], threads: [1, 1, 1], cuda: { grid: [1, 1, 1], threads: [256, 1, 1] },
    });
  });
});

describe('silu_mul reference against hand-computed values', () => {
  test('silu(0) = 0, silu(1) = 1 / (1 + 1/e), silu(-1); the limits: g and -0', () => {
    expect(siluRef(0)).toBe(0);
    expect(siluRef(1)).toBeCloseTo(1 / (1 + Math.exp(-1)), 15);
    expect(siluRef(-1)).toBeCloseTo(-1 / (1 + Math.E), 15);
    expect(siluRef(1000)).toBe(1000);
    expect(Object.is(siluRef(-1000), -0)).toBe(true);
    expect(Array.from(siluMulRef([2, -3], [0.5, 4]))).toEqual([siluRef(2) * 0.5, siluRef(-3) * 4]);
    expect(Array.from(siluMulHalvesRef([1, 2, 10, 20, 3, 4, 30, 40], 2, 2))).toEqual(
      [siluRef(1) * 10, siluRef(2) * 20, siluRef(3) * 30, siluRef(4) * 40]);
  });
});

describeValidation('silu_mul validation', (ctx) => {
  test('every rule of silu_mul', () => expectPairRules(FAMILY, ctx));
  test('every rule of silu_mul_halves', () => expectHalvesRules(FAMILY, ctx));
  test('plans: the kernel of the dtype, mlx-native\'s bindings, the params bytes', () => {
    const { buf } = ctx;
    const [gate, up, output] = [buf('bf16', 10), buf('bf16', 10), buf('bf16', 10)];
    const d = planSiluMul({ gate, up, output }, TARGET_LIMITS.metal).dispatches;
    expect(d.length).toBe(1);
    expect(d[0]!.kernel).toBe('silu_mul_bf16');
    expect(d[0]!.buffers).toEqual([gate, up, output]);
    expect(words(d[0]!.bytes![3] as Uint8Array)).toEqual([10]);
    const h = planSiluMulHalves({ gateUp: buf('f32', 12), output: buf('f32', 6), rows: 2, dim: 3 }, TARGET_LIMITS.metal).dispatches[0]!;
    expect(h.kernel).toBe('silu_mul_halves_f32');
    expect(words(h.bytes![2] as Uint8Array)).toEqual([3, 2]);
  });
});

describeGatedParity(FAMILY);

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('silu_mul', gatedOpCases(FAMILY));
