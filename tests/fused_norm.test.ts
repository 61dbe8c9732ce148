// fused_norm: validation rules, the param packers against the .metal structs,
// the reference against hand-computed values, and parity on every backend.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/fused_norm.metal' with { type: 'text' };
import {
  FUSED_NORM_ADD_ARGS,
  FUSED_NORM_FAMILY,
  FUSED_NORM_KERNELS,
  FUSED_NORM_SOURCES,
  FUSED_NORM_ADD_SCALAR_PARAMS_LAYOUT,
  FUSED_NORM_ADD_NORMS_PARAMS_LAYOUT,
  FUSED_NORM_MOE_SUM_PARAMS_LAYOUT,
  FUSED_RESIDUAL_NORM_PARAMS_LAYOUT,
  FUSED_RESIDUAL_NORM_SCALAR_PARAMS_LAYOUT,
  fusedNormAdd,
  fusedNormAddScalar,
  fusedNormAddNorms,
  fusedNormMoeSum,
  fusedNormThreadgroup,
  fusedResidualNorm,
  fusedResidualNormScalar,
  packFusedNormAddArgs,
  packFusedNormAddScalarParams,
  packFusedResidualNormParams,
  packFusedResidualNormScalarParams,
  packFusedNormAddNormsParams,
  packFusedNormMoeSumParams,
  fusedNormAddRef,
  fusedNormAddNormsRef,
  fusedNormMoeSumRef,
  fusedResidualNormRef,
} from '../ts/ops/fused_norm.ts';
import type { ParamField } from '../ts/params.ts';
import { describeBackends, maxRelErr, randomArray, rng, TOL, TARGET_LIMITS, expectInvalid, describeValidation } from './helpers.ts';
import { bufferParam, readField } from './metal-source.ts';
import * as normOps from '../ts/ops/fused_norm.ts';
import * as mlx from '../ts/index.ts';
import { a, buf, F, int, opContract, out, type Case, type KeySpec } from './op-contract.ts';

// ---- the param structs against the .metal source ----

describe('fused_norm param packers match the .metal declarations', () => {
  const structs: [string, readonly ParamField[], string[]][] = [
    ['FusedResidualNormParams', FUSED_RESIDUAL_NORM_PARAMS_LAYOUT, ['fused_residual_norm_f32', 'fused_residual_norm_bf16']],
    ['FusedResidualNormScalarF32Params', FUSED_RESIDUAL_NORM_SCALAR_PARAMS_LAYOUT, ['fused_residual_norm_scalar_f32']],
    ['FusedNormAddScalarF32Params', FUSED_NORM_ADD_SCALAR_PARAMS_LAYOUT, ['fused_norm_add_scalar_f32']],
    ['FusedNormAddNormsF32Params', FUSED_NORM_ADD_NORMS_PARAMS_LAYOUT, ['fused_norm_add_norms_f32']],
  ];
  for (const [name, , kernels] of structs) {
    test(`${name}: bound at buffer(5)`, () => {
      for (const k of kernels) expect(bufferParam(src, k, 5)).toMatch(new RegExp(`^constant ${name}& params `));
    });
  }
  test('FusedNormMoeSumParams: bound at buffer(6)', () => {
    for (const k of ['fused_norm_moe_sum_f32', 'fused_norm_moe_sum_bf16_input']) {
      expect(bufferParam(src, k, 6)).toMatch(/^constant FusedNormMoeSumParams& params /);
    }
  });
  test('packFusedNormAddNormsParams and packFusedNormMoeSumParams write each field at its offset', () => {
    const a = packFusedNormAddNormsParams({ ...p, scalarMode: 2, norms: 3, weighted: 5 });
    expect(a.byteLength).toBe(24);
    expect(FUSED_NORM_ADD_NORMS_PARAMS_LAYOUT.map((x) => readField(a, x))).toEqual([4099, 7, Math.fround(1e-6), 2, 3, 5]);
    const b = packFusedNormMoeSumParams({ ...p, topK: 8 });
    expect(b.byteLength).toBe(16);
    expect(FUSED_NORM_MOE_SUM_PARAMS_LAYOUT.map((x) => readField(b, x))).toEqual([4099, 7, 8, Math.fround(1e-6)]);
  });

  const p = { dim: 4099, rows: 7, eps: 1e-6 };
  test('packFusedResidualNormParams writes each field at its offset', () => {
    for (const writeSum of [false, true]) {
      const bytes = packFusedResidualNormParams({ ...p, writeSum });
      expect(bytes.byteLength).toBe(16);
      const f = FUSED_RESIDUAL_NORM_PARAMS_LAYOUT;
      expect(f.map((x) => readField(bytes, x))).toEqual([4099, 7, Math.fround(1e-6), writeSum ? 1 : 0]);
    }
  });
  test('packFusedResidualNormScalarParams and packFusedNormAddScalarParams write each field at its offset', () => {
    for (const scalarIsVector of [false, true]) {
      const a = packFusedResidualNormScalarParams({ ...p, scalarIsVector });
      const b = packFusedNormAddScalarParams({ ...p, scalarIsVector });
      const want = [4099, 7, Math.fround(1e-6), scalarIsVector ? 1 : 0];
      expect(FUSED_RESIDUAL_NORM_SCALAR_PARAMS_LAYOUT.map((x) => readField(a, x))).toEqual(want);
      expect(FUSED_NORM_ADD_SCALAR_PARAMS_LAYOUT.map((x) => readField(b, x))).toEqual(want);
    }
  });
  test('fused_norm_add_{f32,bf16}: dim, rows, eps bound one by one as declared', () => {
    const bytes = packFusedNormAddArgs(p);
    for (const k of ['fused_norm_add_f32', 'fused_norm_add_bf16']) {
      for (const a of FUSED_NORM_ADD_ARGS) {
        const ctype = a.type === 'u32' ? 'uint' : 'float';
        expect(bufferParam(src, k, a.binding)).toMatch(new RegExp(`^constant ${ctype}& ${a.name} `));
        const b = bytes[a.binding]!;
        expect(b.byteLength).toBe(4);
        expect(readField(b, { name: a.name, type: a.type, offset: 0 })).toBe(a.name === 'eps' ? Math.fround(1e-6) : a.name === 'dim' ? 4099 : 7);
      }
    }
  });
  test('threadgroup size and memory: min(256, nextPow2(dim)) threads, one float per simdgroup in 16-byte units', () => {
    expect(fusedNormThreadgroup(1, TARGET_LIMITS.metal)).toEqual({ threads: 1, sharedBytes: 16 });
    expect(fusedNormThreadgroup(33, TARGET_LIMITS.metal)).toEqual({ threads: 64, sharedBytes: 16 });
    expect(fusedNormThreadgroup(257, TARGET_LIMITS.metal)).toEqual({ threads: 256, sharedBytes: 32 });
    expect(fusedNormThreadgroup(100000, TARGET_LIMITS.metal)).toEqual({ threads: 256, sharedBytes: 32 });
  });
});

describe('fused_norm reference against hand-computed values', () => {
  test('row [3, 4], weight [1, 2], eps 0: rmsInv = 1/sqrt(12.5)', () => {
    const inv = 1 / Math.sqrt(12.5);
    const out = fusedNormAddRef([10, 20], [3, 4], [1, 2], 1, 2, 0);
    expect(out[0]).toBeCloseTo(10 + 3 * inv, 14);
    expect(out[1]).toBeCloseTo(20 + 8 * inv, 14);
    const scaled = fusedNormAddRef([10, 20], [3, 4], [1, 2], 1, 2, 0, [0.5, 2]);
    expect(scaled[1]).toBeCloseTo((20 + 8 * inv) * 2, 14);
    // residual + input = [4, 4, 1, 1] per row (two rows of 2), each row normalized alone.
    const { normed, sum } = fusedResidualNormRef([1, 2, 0, 0], [3, 2, 1, 1], [1, 1], 2, 2, 0, [3]);
    expect([...sum]).toEqual([4, 4, 1, 1]);
    for (const v of normed) expect(v).toBeCloseTo(3, 14);
  });
  test('fused_norm_add_norms: h = [10 + 3 inv, 20 + 8 inv], then its norms, weighted [2, 1] and not', () => {
    const inv = 1 / Math.sqrt(12.5);
    const h = [10 + 3 * inv, 20 + 8 * inv];
    const hInv = 1 / Math.sqrt((h[0]! ** 2 + h[1]! ** 2) / 2);
    const { output, normed } = fusedNormAddNormsRef([10, 20], [3, 4], [1, 2], 1, 2, 0, undefined, [[2, 1], null]);
    expect(output[1]).toBeCloseTo(h[1]!, 14);
    expect(normed[0]![0]).toBeCloseTo(h[0]! * hInv * 2, 14);
    expect(normed[1]![1]).toBeCloseTo(h[1]! * hInv, 14);
  });
  test('fused_norm_moe_sum: x = [3, 4], e = 0.5 [2, 0] + 2 [0, 1] = [1, 2]', () => {
    const out = fusedNormMoeSumRef([3, 4], [1, 1], [0.5, 2], [2, 0, 0, 1], [1, 3], 1, 2, 2, 0);
    const rx = 1 / Math.sqrt(12.5), re = 1 / Math.sqrt(2.5);
    expect(out[0]).toBeCloseTo(3 * rx + 1 * re, 14);
    expect(out[1]).toBeCloseTo(4 * rx + 2 * re * 3, 14);
  });
});

// ---- validation ----

describeValidation('fused_norm validation', ({ enc, buf }) => {
  const rows = 2;
  const dim = 8;
  const n = rows * dim;

  type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
  const shapeCases = (): Case[] => [
    [{ rows: 0 }, 'rows', 'a positive integer', '0'],
    [{ dim: 1.5 }, 'dim', 'a positive integer', '1.5'],
    [{ dim: -3 }, 'dim', 'a positive integer', '-3'],
    [{ eps: Number.NaN }, 'eps', 'a finite number >= 0', 'NaN'],
    [{ eps: -1e-6 }, 'eps', 'a finite number >= 0', '-0.000001'],
    [{ rows: 65537, dim: 65536 }, 'rows * dim', 'at most the 32-bit index limit (4294967295)', '4295032832'],
    [{ rows: 2 ** 40, dim: 2 ** 20 }, 'rows * dim', 'a product of integers at most 2^53 - 1', `${2 ** 40} * ${2 ** 20}`],
  ];

  test('fused_norm_add: every rule', () => {
    const base = () => ({ residual: buf('f32', n), input: buf('f32', n), weight: buf('f32', dim), output: buf('f32', n), rows, dim, eps: 1e-6 });
    const cases: Case[] = [
      ...shapeCases(),
      [{ input: buf('f16', n) }, 'input.dtype', 'one of f32, bf16', 'f16'],
      [{ residual: buf('bf16', n) }, 'residual.dtype', 'f32', 'bf16'],
      [{ weight: buf('bf16', dim) }, 'weight.dtype', 'f32', 'bf16'],
      [{ output: buf('bf16', n) }, 'output.dtype', 'f32', 'bf16'],
      [{ residual: buf('f32', n + 1) }, 'residual.elementCount', '16', '17'],
      [{ input: buf('f32', n - 1) }, 'input.elementCount', '16', '15'],
      [{ weight: buf('f32', n) }, 'weight.elementCount', '8', '16'],
      [{ output: buf('f32', 1) }, 'output.elementCount', '16', '1'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => fusedNormAdd(enc(), { ...base(), ...m }), 'fused_norm_add', arg, expected, actual);
    }
    // bf16 activations with an f32 weight are refused: the weight follows the activations.
    expectInvalid(() => fusedNormAdd(enc(), {
      ...base(), residual: buf('bf16', n), input: buf('bf16', n), output: buf('bf16', n),
    }), 'fused_norm_add', 'weight.dtype', 'bf16', 'f32');
  });

  test('fused_residual_norm: every rule', () => {
    const base = () => ({ residual: buf('f32', n), input: buf('f32', n), weight: buf('f32', dim), normedOutput: buf('f32', n), sumOutput: buf('f32', n), rows, dim, eps: 1e-6 });
    const cases: Case[] = [
      ...shapeCases(),
      [{ input: buf('u32', n) }, 'input.dtype', 'one of f32, bf16', 'u32'],
      [{ residual: buf('bf16', n) }, 'residual.dtype', 'f32', 'bf16'],
      [{ weight: buf('f16', dim) }, 'weight.dtype', 'f32', 'f16'],
      [{ normedOutput: buf('bf16', n) }, 'normedOutput.dtype', 'f32', 'bf16'],
      [{ sumOutput: buf('bf16', n) }, 'sumOutput.dtype', 'f32', 'bf16'],
      [{ residual: buf('f32', 3) }, 'residual.elementCount', '16', '3'],
      [{ input: buf('f32', 3) }, 'input.elementCount', '16', '3'],
      [{ weight: buf('f32', 9) }, 'weight.elementCount', '8', '9'],
      [{ normedOutput: buf('f32', 32) }, 'normedOutput.elementCount', '16', '32'],
      [{ sumOutput: buf('f32', 15) }, 'sumOutput.elementCount', '16', '15'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => fusedResidualNorm(enc(), { ...base(), ...m }), 'fused_residual_norm', arg, expected, actual);
    }
  });

  for (const [name, fn] of [
    ['fused_residual_norm_scalar', fusedResidualNormScalar],
    ['fused_norm_add_scalar', fusedNormAddScalar],
  ] as const) {
    test(`${name}: every rule`, () => {
      const base = () => ({ residual: buf('f32', n), input: buf('f32', n), weight: buf('f32', dim), output: buf('f32', n), scalar: buf('f32', 1), rows, dim, eps: 1e-6 });
      const cases: Case[] = [
        ...shapeCases(),
        [{ input: buf('bf16', n) }, 'input.dtype', 'one of f32', 'bf16'],
        [{ residual: buf('bf16', n) }, 'residual.dtype', 'f32', 'bf16'],
        [{ weight: buf('bf16', dim) }, 'weight.dtype', 'f32', 'bf16'],
        [{ output: buf('bf16', n) }, 'output.dtype', 'f32', 'bf16'],
        [{ scalar: buf('bf16', 1) }, 'scalar.dtype', 'f32', 'bf16'],
        [{ residual: buf('f32', 3) }, 'residual.elementCount', '16', '3'],
        [{ input: buf('f32', 3) }, 'input.elementCount', '16', '3'],
        [{ weight: buf('f32', 1) }, 'weight.elementCount', '8', '1'],
        [{ output: buf('f32', 17) }, 'output.elementCount', '16', '17'],
        [{ scalar: buf('f32', 2) }, 'scalar', '1 or dim (8) elements', '2 elements'],
      ];
      for (const [m, arg, expected, actual] of cases) {
        expectInvalid(() => fn(enc(), { ...base(), ...m }), name, arg, expected, actual);
      }
    });
  }
  test('fused_norm_add_norms: every rule', () => {
    const base = () => ({
      residual: buf('f32', n), input: buf('f32', n), weight: buf('f32', dim), output: buf('f32', n), rows, dim, eps: 1e-6,
      normed0: buf('f32', n), normWeight0: buf('f32', dim), normed1: buf('f32', n),
    });
    const cases: Case[] = [
      ...shapeCases(),
      [{ input: buf('bf16', n) }, 'input.dtype', 'f32', 'bf16'],
      [{ residual: buf('f16', n) }, 'residual.dtype', 'f32', 'f16'],
      [{ normed1: buf('bf16', n) }, 'normed1.dtype', 'f32', 'bf16'],
      [{ normWeight0: buf('bf16', dim) }, 'normWeight0.dtype', 'f32', 'bf16'],
      [{ scalar: buf('bf16', 1) }, 'scalar.dtype', 'f32', 'bf16'],
      [{ weight: buf('f32', 1) }, 'weight.elementCount', '8', '1'],
      [{ output: buf('f32', 17) }, 'output.elementCount', '16', '17'],
      [{ normed0: buf('f32', 8) }, 'normed0.elementCount', '16', '8'],
      [{ normWeight0: buf('f32', 16) }, 'normWeight0.elementCount', '8', '16'],
      [{ scalar: buf('f32', 3) }, 'scalar', '1 or dim (8) elements', '3 elements'],
      [{ normed2: buf('f32', n), normed1: undefined }, 'normed2', 'absent, as normed1 is', 'a Buffer'],
      [{ normWeight1: buf('f32', dim), normed1: undefined }, 'normWeight1', 'absent, as normed1 is', 'a Buffer'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => fusedNormAddNorms(enc(), { ...base(), ...m }), 'fused_norm_add_norms', arg, expected, actual);
    }
    // Every output may be residual or input (each thread reads its elements before it writes them), no two outputs one
    // buffer, no output a weight or the scalar.
    const b = base();
    fusedNormAddNorms(enc(), { ...b, normed1: b.residual, output: b.input });
    expectInvalid(() => fusedNormAddNorms(enc(), { ...b, normed1: b.normWeight0 }), 'fused_norm_add_norms', 'normed1',
      'a buffer other than normWeight0', 'the buffer of normWeight0');
    expectInvalid(() => fusedNormAddNorms(enc(), { ...b, normed0: b.output }), 'fused_norm_add_norms', 'output',
      'a buffer other than normed0', 'the buffer of normed0');
    fusedNormAddNorms(enc(), { ...b, output: b.residual });
  });

  test('fused_norm_moe_sum: every rule', () => {
    const topK = 3;
    const base = () => ({
      input: buf('f32', n), weight: buf('f32', dim), expertW: buf('f32', rows * topK), yExpert: buf('bf16', n * topK),
      moeWeight: buf('f32', dim), output: buf('f32', n), rows, dim, topK, eps: 1e-6,
    });
    const cases: Case[] = [
      ...shapeCases(),
      [{ topK: 0 }, 'topK', 'a positive integer', '0'],
      [{ rows: 65537, dim: 8192, topK: 8 }, 'rows * topK * dim', 'at most the 32-bit index limit (4294967295)', '4295032832'],
      [{ input: buf('bf16', n) }, 'input.dtype', 'f32', 'bf16'],
      [{ yExpert: buf('f16', n * topK) }, 'yExpert.dtype', 'one of f32, bf16', 'f16'],
      [{ expertW: buf('bf16', rows * topK) }, 'expertW.dtype', 'f32', 'bf16'],
      [{ moeWeight: buf('bf16', dim) }, 'moeWeight.dtype', 'f32', 'bf16'],
      [{ output: buf('bf16', n) }, 'output.dtype', 'f32', 'bf16'],
      [{ expertW: buf('f32', rows * topK + 1) }, 'expertW.elementCount', '6', '7'],
      [{ yExpert: buf('bf16', n) }, 'yExpert.elementCount', '48', '16'],
      [{ moeWeight: buf('f32', n) }, 'moeWeight.elementCount', '8', '16'],
      [{ weight: buf('f32', 9) }, 'weight.elementCount', '8', '9'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => fusedNormMoeSum(enc(), { ...base(), ...m }), 'fused_norm_moe_sum', arg, expected, actual);
    }
    const b = base();
    fusedNormMoeSum(enc(), { ...b, output: b.input });
    const big = buf('f32', n + 4);
    expectInvalid(() => fusedNormMoeSum(enc(), { ...b, input: big.view('f32', [n], 0), output: big.view('f32', [n], 16) }),
      'fused_norm_moe_sum', 'output', 'a buffer other than input', 'a view overlapping input');
  });
});

// ---- parity ----

/** Row shapes: dims below, at and past the 256-thread group, odd, not multiples of 4 or 32. */
const SHAPES: readonly [rows: number, dim: number][] = [
  [1, 1], [5, 3], [3, 31], [67, 33], [2, 255], [2, 257], [3, 1000], [1, 4099], [1, 8192],
];

/**
 * Error of fused_norm_add outputs. They are residual + normed, terms of the
 * data's scale that may cancel; the kernel's f32 rounding is of the terms, so
 * the error is measured against max(|want|, 0.1 * max |want|).
 */
function sumErr(got: ArrayLike<number>, want: ArrayLike<number>): number {
  let scale = 0;
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]!));
  return maxRelErr(got, want, 0.1 * scale);
}

/**
 * Errors per case: check() fails listing every case over its tolerance;
 * MLXN_PRINT_ERRORS=1 prints the largest error of each test.
 */
class ErrorLog {
  private readonly over: string[] = [];
  private worst = 0;
  constructor(private readonly name: string) {}
  record(what: string, err: number, tol: number): void {
    if (!(err < tol)) this.over.push(`${what}: ${err} (tolerance ${tol})`);
    if (err > this.worst) this.worst = err;
  }
  check(): void {
    if (process.env.MLXN_PRINT_ERRORS) console.log(`${this.name}: largest error ${this.worst}`);
    expect(this.over).toEqual([]);
  }
}

describeBackends('fused_norm parity', ({ device }) => {
  const inputs = (seed: number, rows: number, dim: number) => {
    const r = rng(seed);
    return {
      residual: randomArray(r, rows * dim, -1, 1),
      input: randomArray(r, rows * dim, -2, 2),
      weight: randomArray(r, dim, 0.5, 1.5),
      scalarVec: randomArray(r, dim, -2, 2),
      scalarOne: randomArray(r, 1, 0.25, 2),
    };
  };
  const eps = 1e-6;

  for (const dtype of ['f32', 'bf16'] as const) {
    const tol = TOL[dtype];
    test(`fused_norm_add ${dtype}`, () => {
      const dev = device();
      const errs = new ErrorLog(`fused_norm_add ${dtype}`);
      for (const [rows, dim] of SHAPES) {
        const x = inputs(rows * 7919 + dim, rows, dim);
        const residual = dev.upload(dtype, [rows, dim], x.residual);
        const input = dev.upload(dtype, [rows, dim], x.input);
        const weight = dev.upload(dtype, [dim], x.weight);
        const output = dev.alloc(dtype, [rows, dim]);
        output.fill(Number.NaN);
        const enc = dev.encoder();
        fusedNormAdd(enc, { residual, input, weight, output, rows, dim, eps });
        enc.commitAndWait();
        const want = fusedNormAddRef(residual.readNumbers(), input.readNumbers(), weight.readNumbers(), rows, dim, eps);
        errs.record(`[${rows}, ${dim}]`, sumErr(output.readNumbers(), want), tol);
      }
      errs.check();
    });

    test(`fused_residual_norm ${dtype}, with and without the sum output`, () => {
      const dev = device();
      const errs = new ErrorLog(`fused_residual_norm ${dtype}`);
      for (const [rows, dim] of SHAPES) {
        const x = inputs(rows * 104729 + dim, rows, dim);
        const residual = dev.upload(dtype, [rows, dim], x.residual);
        const input = dev.upload(dtype, [rows, dim], x.input);
        const weight = dev.upload(dtype, [dim], x.weight);
        const normedOutput = dev.alloc(dtype, [rows, dim]);
        const sumOutput = dev.alloc(dtype, [rows, dim]);
        const want = fusedResidualNormRef(residual.readNumbers(), input.readNumbers(), weight.readNumbers(), rows, dim, eps);
        for (const withSum of [true, false]) {
          normedOutput.fill(Number.NaN);
          sumOutput.fill(Number.NaN);
          const enc = dev.encoder();
          fusedResidualNorm(enc, { residual, input, weight, normedOutput, ...(withSum ? { sumOutput } : {}), rows, dim, eps });
          enc.commitAndWait();
          errs.record(`normed [${rows}, ${dim}] sum ${withSum}`, maxRelErr(normedOutput.readNumbers(), want.normed), tol);
          const sum = sumOutput.readNumbers();
          if (withSum) errs.record(`sum [${rows}, ${dim}]`, maxRelErr(sum, want.sum), tol);
          else expect(sum.every(Number.isNaN)).toBe(true);
        }
      }
      errs.check();
    });
  }

  test('any threadgroup size: 1, 40, 96, 1000 threads, tg floats of threadgroup memory as the Rust host binds', () => {
    const dev = device();
    dev.kernels.register(FUSED_NORM_FAMILY, FUSED_NORM_SOURCES, FUSED_NORM_KERNELS);
    const pipe = dev.kernels.pipeline('fused_residual_norm_f32');
    const errs = new ErrorLog('fused_residual_norm_f32 odd threadgroups');
    for (const threads of [1, 40, 96, 1000]) {
      for (const dim of [7, 1000, 1537]) {
        const rows = 2;
        const x = inputs(threads * 17 + dim, rows, dim);
        const residual = dev.upload('f32', [rows, dim], x.residual);
        const input = dev.upload('f32', [rows, dim], x.input);
        const weight = dev.upload('f32', [dim], x.weight);
        const normedOutput = dev.alloc('f32', [rows, dim]);
        const sumOutput = dev.alloc('f32', [rows, dim]);
        normedOutput.fill(Number.NaN);
        sumOutput.fill(Number.NaN);
        const enc = dev.encoder();
        enc.dispatch(pipe, {
          buffers: { 0: residual, 1: input, 2: weight, 3: normedOutput, 4: sumOutput },
          bytes: { 5: packFusedResidualNormParams({ rows, dim, eps, writeSum: true }) },
          threadgroupMemory: { 0: Math.ceil((threads * 4) / 16) * 16 },
        }, [rows, 1, 1], [threads, 1, 1]);
        enc.commitAndWait();
        const want = fusedResidualNormRef(residual.readNumbers(), input.readNumbers(), weight.readNumbers(), rows, dim, eps);
        errs.record(`tg ${threads} dim ${dim} normed`, maxRelErr(normedOutput.readNumbers(), want.normed), TOL.f32);
        errs.record(`tg ${threads} dim ${dim} sum`, maxRelErr(sumOutput.readNumbers(), want.sum), TOL.f32);
      }
    }
    errs.check();
  });

  for (const [name, fn] of [
    ['fused_residual_norm_scalar', fusedResidualNormScalar],
    ['fused_norm_add_scalar', fusedNormAddScalar],
  ] as const) {
    test(`${name} f32, broadcast and per-column scalar`, () => {
      const dev = device();
      const errs = new ErrorLog(`${name} f32`);
      for (const [rows, dim] of SHAPES) {
        const x = inputs(rows * 31337 + dim, rows, dim);
        const residual = dev.upload('f32', [rows, dim], x.residual);
        const input = dev.upload('f32', [rows, dim], x.input);
        const weight = dev.upload('f32', [dim], x.weight);
        const output = dev.alloc('f32', [rows, dim]);
        for (const sc of [x.scalarOne, x.scalarVec]) {
          const scalar = dev.upload('f32', [sc.length], sc);
          output.fill(Number.NaN);
          const enc = dev.encoder();
          fn(enc, { residual, input, weight, output, scalar, rows, dim, eps });
          enc.commitAndWait();
          const args = [residual.readNumbers(), input.readNumbers(), weight.readNumbers(), rows, dim, eps, scalar.readNumbers()] as const;
          const got = output.readNumbers();
          const err = name === 'fused_norm_add_scalar'
            ? sumErr(got, fusedNormAddRef(...args))
            : maxRelErr(got, fusedResidualNormRef(...args).normed);
          errs.record(`[${rows}, ${dim}] scalar [${sc.length}]`, err, TOL.f32);
        }
      }
      errs.check();
    });
  }
});

/** SHAPES and Gemma 4's rows of 2816 (a decode step's one row, and more rows than a block's registers hold at once). */
const NORMS_SHAPES: readonly [rows: number, dim: number][] = [...SHAPES, [1, 2816], [16, 2816], [17, 2816]];

describeBackends('fused_norm parity: the norms after a residual update, the two branches joined', ({ device }) => {
  const eps = 1e-6;

  test('fused_norm_add_norms f32: 0 to 3 normed outputs, weighted or not, no scalar, one or per column, in place', () => {
    const dev = device();
    const errs = new ErrorLog('fused_norm_add_norms f32');
    // (normed outputs, weighted mask, scalar: 0 none / 1 one / 2 per column)
    const forms: [number, number, number][] = [[0, 0, 1], [1, 1, 0], [2, 2, 2], [3, 5, 1], [3, 7, 0], [3, 0, 2]];
    for (const [si, [rows, dim]] of NORMS_SHAPES.entries()) {
      const r = rng(rows * 7717 + dim);
      const [norms, weighted, mode] = forms[si % forms.length]!;
      const hostRes = randomArray(r, rows * dim, -1, 1);
      const hostIn = randomArray(r, rows * dim, -2, 2);
      const hostW = randomArray(r, dim, 0.5, 1.5);
      const hostNw = [0, 1, 2].map(() => randomArray(r, dim, 0.5, 1.5));
      const hostSc = mode === 0 ? undefined : randomArray(r, mode === 1 ? 1 : dim, 0.25, 2);
      const residual = dev.upload('f32', [rows, dim], hostRes);
      const input = dev.upload('f32', [rows, dim], hostIn);
      const weight = dev.upload('f32', [dim], hostW);
      const normWeights = hostNw.map((w) => dev.upload('f32', [dim], w));
      const scalar = hostSc === undefined ? undefined : dev.upload('f32', [hostSc.length], hostSc);
      const normed = [0, 1, 2].map(() => dev.alloc('f32', [rows, dim]));
      for (const o of normed) o.fill(Number.NaN);
      const want = fusedNormAddNormsRef(hostRes, hostIn, hostW, rows, dim, eps, hostSc,
        Array.from({ length: norms }, (_, j) => ((weighted >> j) & 1 ? hostNw[j]! : null)));
      // In place: output is residual.
      const args: Record<string, unknown> = { residual, input, weight, output: residual, rows, dim, eps, ...(scalar ? { scalar } : {}) };
      for (let j = 0; j < norms; j++) {
        args[`normed${j}`] = normed[j];
        if ((weighted >> j) & 1) args[`normWeight${j}`] = normWeights[j];
      }
      const enc = dev.encoder();
      fusedNormAddNorms(enc, args as never);
      enc.commitAndWait();
      const what = `[${rows}, ${dim}] norms ${norms} weighted ${weighted} scalar ${mode}`;
      errs.record(`${what} output`, sumErr(residual.readNumbers(), want.output), TOL.f32);
      // The normed outputs are h scaled per element: they carry h's rounding
      // (of terms that may cancel), measured as h's is.
      for (let j = 0; j < 3; j++) {
        const got = normed[j]!.readNumbers();
        if (j < norms) errs.record(`${what} normed${j}`, sumErr(got, want.normed[j]!), TOL.f32);
        else expect(got.every(Number.isNaN)).toBe(true);
      }
    }
    errs.check();
  });

  for (const yDtype of ['f32', 'bf16'] as const) {
    test(`fused_norm_moe_sum, ${yDtype} expert outputs: top-k 1, 3 and 8, in place and not`, () => {
      const dev = device();
      const errs = new ErrorLog(`fused_norm_moe_sum ${yDtype}`);
      for (const [si, [rows, dim]] of NORMS_SHAPES.entries()) {
        const topK = [1, 3, 8][si % 3]!;
        const r = rng(rows * 3571 + dim + topK);
        const input = dev.upload('f32', [rows, dim], randomArray(r, rows * dim, -2, 2));
        const weight = dev.upload('f32', [dim], randomArray(r, dim, 0.5, 1.5));
        const expertW = dev.upload('f32', [rows, topK], randomArray(r, rows * topK, 0.05, 1));
        const yExpert = dev.upload(yDtype, [rows, topK, dim], randomArray(r, rows * topK * dim, -3, 3));
        const moeWeight = dev.upload('f32', [dim], randomArray(r, dim, 0.5, 1.5));
        const want = fusedNormMoeSumRef(input.readNumbers(), weight.readNumbers(), expertW.readNumbers(), yExpert.readNumbers(),
          moeWeight.readNumbers(), rows, topK, dim, eps);
        const inPlace = si % 2 === 1;
        const output = inPlace ? input : dev.alloc('f32', [rows, dim]);
        if (!inPlace) output.fill(Number.NaN);
        const enc = dev.encoder();
        fusedNormMoeSum(enc, { input, weight, expertW, yExpert, moeWeight, output, rows, dim, topK, eps });
        enc.commitAndWait();
        errs.record(`[${rows}, ${dim}] top-k ${topK} in place ${inPlace}`, sumErr(output.readNumbers(), want), TOL.f32);
      }
      errs.check();
    });
  }
});

// ---- buffers that are not live buffers of the device; aliasing ----

describeValidation('fused_norm: buffers and aliasing', ({ device, enc, buf }) => {
  const shape = { rows: 2, dim: 8, eps: 1e-6 };

  test('a residual updated in place is allowed; two outputs in one buffer, or an output as the weight, are refused', () => {
    const residual = buf('f32', 16);
    const input = buf('f32', 16);
    const weight = buf('f32', 8);
    normOps.fusedNormAdd(enc(), { residual, input, weight, output: residual, ...shape });
    normOps.fusedResidualNorm(enc(), { residual, input, weight, normedOutput: buf('f32', 16), sumOutput: residual, ...shape });
    const normed = buf('f32', 16);
    expectInvalid(() => normOps.fusedResidualNorm(enc(), { residual, input, weight, normedOutput: normed, sumOutput: normed, ...shape }),
      'fused_residual_norm', 'normedOutput', 'a buffer other than sumOutput', 'the buffer of sumOutput');
    const one = { rows: 1, dim: 8, eps: 1e-6 };
    const w = buf('f32', 8);
    expectInvalid(() => normOps.fusedNormAdd(enc(), { residual: buf('f32', 8), input: buf('f32', 8), weight: w, output: w, ...one }),
      'fused_norm_add', 'output', 'a buffer other than weight', 'the buffer of weight');
  });

  test('null, released and foreign buffers are MlxErrors naming the argument', () => {
    const a = { residual: buf('f32', 16), input: buf('f32', 16), weight: buf('f32', 8), output: buf('f32', 16), scalar: buf('f32', 1), ...shape };
    expectInvalid(() => normOps.fusedNormAddScalar(enc(), { ...a, scalar: null as unknown as mlx.Buffer }), 'fused_norm_add_scalar', 'scalar', 'a Buffer', 'null');
    expectInvalid(() => normOps.fusedResidualNorm(enc(), { ...a, normedOutput: a.output, sumOutput: null as unknown as mlx.Buffer }),
      'fused_residual_norm', 'sumOutput', 'a Buffer', 'null');
    const gone = buf('f32', 8);
    gone.release();
    expectInvalid(() => normOps.fusedNormAdd(enc(), { ...a, weight: gone }), 'fused_norm_add', 'weight', 'a live Buffer', 'a released buffer');
    const other = mlx.Device.open({ backend: device().backend });
    try {
      expectInvalid(() => normOps.fusedNormAdd(enc(), { ...a, input: other.alloc('f32', [16]) }), 'fused_norm_add', 'input',
        "a buffer of the encoder's device", 'a buffer of another device');
    } finally {
      other.close();
    }
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('fused_norm', [
  ...(['fusedNormAdd', 'fusedResidualNorm', 'fusedResidualNormScalar', 'fusedNormAddScalar'] as const).map((fn): Case => {
    const op = { fusedNormAdd: 'fused_norm_add', fusedResidualNorm: 'fused_residual_norm',
      fusedResidualNormScalar: 'fused_residual_norm_scalar', fusedNormAddScalar: 'fused_norm_add_scalar' }[fn];
    const scalar = fn.endsWith('Scalar');
    const act = scalar ? F : (['f32', 'bf16'] as const);
    const keys: Record<string, KeySpec> = {
      residual: buf(act), input: buf(act), weight: buf(act), rows: int, dim: int, eps: { kind: 'nonneg' },
    };
    if (fn === 'fusedResidualNorm') {
      keys.normedOutput = out(act);
      keys.sumOutput = { kind: 'buf?', dtypes: act, output: true };
    } else {
      keys.output = out(act);
    }
    if (scalar) keys.scalar = buf(F, { freeCount: true });
    return {
      fn, op, keys,
      make: (d) => {
        const args: Record<string, unknown> = {
          residual: a(d, 'f32', 16), input: a(d, 'f32', 16), weight: a(d, 'f32', 8), rows: 2, dim: 8, eps: 1e-6,
        };
        if (fn === 'fusedResidualNorm') {
          args.normedOutput = a(d, 'f32', 16);
          args.sumOutput = a(d, 'f32', 16);
        } else {
          args.output = a(d, 'f32', 16);
        }
        if (scalar) args.scalar = a(d, 'f32', 8);
        return args;
      },
    };
  }),
  {
    fn: 'fusedNormAddNorms', op: 'fused_norm_add_norms',
    keys: {
      residual: buf(F), input: buf(F), weight: buf(F), output: out(F), rows: int, dim: int, eps: { kind: 'nonneg' },
      scalar: { kind: 'buf?', dtypes: F, freeCount: true },
      normed0: { kind: 'buf?', dtypes: F, output: true }, normed1: { kind: 'buf?', dtypes: F, output: true },
      normed2: { kind: 'buf?', dtypes: F, output: true },
      normWeight0: { kind: 'buf?', dtypes: F }, normWeight1: { kind: 'buf?', dtypes: F }, normWeight2: { kind: 'buf?', dtypes: F },
    },
    make: (d) => ({
      residual: a(d, 'f32', 16), input: a(d, 'f32', 16), weight: a(d, 'f32', 8), output: a(d, 'f32', 16), rows: 2, dim: 8, eps: 1e-6,
      scalar: a(d, 'f32', 1), normed0: a(d, 'f32', 16), normed1: a(d, 'f32', 16), normed2: a(d, 'f32', 16),
      normWeight0: a(d, 'f32', 8), normWeight2: a(d, 'f32', 8),
    }),
  },
  {
    fn: 'fusedNormMoeSum', op: 'fused_norm_moe_sum',
    keys: {
      input: buf(F), weight: buf(F), expertW: buf(F), yExpert: buf(['f32', 'bf16']), moeWeight: buf(F), output: out(F),
      rows: int, dim: int, topK: int, eps: { kind: 'nonneg' },
    },
    inPlace: [['output', 'input']],
    make: (d) => ({
      input: a(d, 'f32', 16), weight: a(d, 'f32', 8), expertW: a(d, 'f32', 6), yExpert: a(d, 'bf16', 48), moeWeight: a(d, 'f32', 8),
      output: a(d, 'f32', 16), rows: 2, dim: 8, topK: 3, eps: 1e-6,
    }),
  },
]);
