// sigmoid_mul: the reference against hand-computed values, the param packers
// against the .metal declarations, every validation rule of both forms, and
// parity on every backend (tests/gated.ts: f32, f16, bf16, sizes at the
// edges, several rows, in place, saturating gates, other threadgroup sizes).

import { describe, expect, test } from 'bun:test';
import src from '../shaders/sigmoid_mul.metal' with { type: 'text' };
import {
  SIGMOID_MUL_FAMILY,
  SIGMOID_MUL_KERNELS,
  SIGMOID_MUL_SOURCES,
  packSigmoidMulHalvesParams,
  packSigmoidMulParams,
  planSigmoidMul,
  sigmoidMul,
  sigmoidMulHalves,
  sigmoidMulHalvesRef,
  sigmoidMulRef,
  sigmoidRef,
} from '../ts/ops/sigmoid_mul.ts';
import { describeGatedParity, expectHalvesRules, expectPairRules, gatedOpCases, type GatedFamily } from './gated.ts';
import { opContract } from './op-contract.ts';
import { describeValidation, TARGET_LIMITS, words } from './helpers.ts';

const FAMILY: GatedFamily = {
  family: SIGMOID_MUL_FAMILY, sources: SIGMOID_MUL_SOURCES, kernels: SIGMOID_MUL_KERNELS,
  pairOp: 'sigmoid_mul', halvesOp: 'sigmoid_mul_halves', pairNames: ['x', 'gate'], gateName: 'gate', halvesInput: 'gateX',
  pair: (enc, gate, x, output) => sigmoidMul(enc, { x, gate, output }),
  halves: (enc, gateX, output, rows, dim) => sigmoidMulHalves(enc, { gateX, output, rows, dim }),
  pairRef: (gate, x) => sigmoidMulRef(x, gate),
  halvesRef: sigmoidMulHalvesRef,
  pairBindings: (gate, x, output) => [x, gate, output],
  packPair: (n) => packSigmoidMulParams({ n }),
  packHalves: (dim, rows) => packSigmoidMulHalvesParams({ dim, rows }),
};

describe('sigmoid_mul param packers match the .metal declarations', () => {
  test('SigmoidMulParams (n, mlx-native\'s 4-byte params buffer) at buffer(3); SigmoidMulHalvesParams (dim, rows) at buffer(2)', () => {
    expect(src).toMatch(/kernel void sigmoid_mul\([^{]*constant SigmoidMulParams&\s+params\s+\[\[buffer\(3\)\]\]/);
    expect(src).toMatch(/kernel void sigmoid_mul_halves\([^{]*constant SigmoidMulHalvesParams&\s+params\s+\[\[buffer\(2\)\]\]/);
    expect(words(packSigmoidMulParams({ n: 4096 }))).toEqual([4096]);
    expect(words(packSigmoidMulHalvesParams({ dim: 256, rows: 16 }))).toEqual([256, 16]);
  });
  test('mlx-native\'s bindings: 0 x, 1 gate, 2 output', () => {
    expect(src).toMatch(/device const T\*\s+x\s+\[\[buffer\(0\)\]\],\s*device const T\*\s+gate\s+\[\[buffer\(1\)\]\],\s*device T\*\s+output\s+\[\[buffer\(2\)\]\]/);
  });
});

describe('sigmoid_mul reference against hand-computed values', () => {
  test('sigmoid(0) = 1/2, sigmoid(2) = 1 / (1 + e^-2); the limits 1 and 0', () => {
    expect(sigmoidRef(0)).toBe(0.5);
    expect(sigmoidRef(2)).toBeCloseTo(1 / (1 + Math.exp(-2)), 15);
    expect(sigmoidRef(-2)).toBeCloseTo(1 - sigmoidRef(2), 15);
    expect(sigmoidRef(1000)).toBe(1);
    expect(sigmoidRef(-1000)).toBe(0);
    expect(Array.from(sigmoidMulRef([3, -4], [0, 2]))).toEqual([1.5, -4 * sigmoidRef(2)]);
    expect(Array.from(sigmoidMulHalvesRef([0, 2, 10, 20, -2, 0, 30, 40], 2, 2))).toEqual(
      [5, 20 * sigmoidRef(2), 30 * sigmoidRef(-2), 20]);
  });
});

describeValidation('sigmoid_mul validation', (ctx) => {
  test('every rule of sigmoid_mul', () => expectPairRules(FAMILY, ctx));
  test('every rule of sigmoid_mul_halves', () => expectHalvesRules(FAMILY, ctx));
  test('plans: the kernel of the dtype and mlx-native\'s bindings (x first)', () => {
    const { buf } = ctx;
    const [x, gate, output] = [buf('f16', 10), buf('f16', 10), buf('f16', 10)];
    const d = planSigmoidMul({ x, gate, output }, TARGET_LIMITS.cuda).dispatches[0]!;
    expect(d.kernel).toBe('sigmoid_mul_f16');
    expect(d.buffers).toEqual([x, gate, output]);
    expect(words(d.bytes![3] as Uint8Array)).toEqual([10]);
  });
});

describeGatedParity(FAMILY);

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('sigmoid_mul', gatedOpCases(FAMILY));
