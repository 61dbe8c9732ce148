// compute_g_beta: the reference against hand-computed values, the param
// packer against the .metal struct, every validation rule, and parity on
// every backend with model-like and adversarial inputs.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/compute_g_beta.metal' with { type: 'text' };
import prelude from '../shaders/common.metal' with { type: 'text' };
import cudaPrelude from '../shaders/cuda/common.cuh' with { type: 'text' };
import type { Buffer } from '../ts/index.ts';
import {
  COMPUTE_G_BETA_KERNELS,
  COMPUTE_G_BETA_PARAMS_LAYOUT,
  SOFTPLUS_THRESHOLD,
  computeGBeta,
  packComputeGBetaParams,
  type ComputeGBetaParams,
  computeGBetaRef,
  softplusRef,
} from '../ts/ops/compute_g_beta.ts';
import { describeBackends, maxRelErr, rng, TOL, type Rng, expectInvalid, describeValidation } from './helpers.ts';
import * as gbOps from '../ts/ops/compute_g_beta.ts';
import * as mlx from '../ts/index.ts';
import { a, buf, F, int, opContract, out } from './op-contract.ts';

describe('compute_g_beta param packer matches the .metal declaration', () => {
  test('ComputeGBetaParams: fields, offsets, bound at buffer(6) by every kernel; packed values', () => {
    for (const k of COMPUTE_G_BETA_KERNELS) {
      expect(src).toMatch(new RegExp(`kernel void ${k}\\([^{]*constant ComputeGBetaParams&\\s+params\\s+\\[\\[buffer\\(6\\)\\]\\]`));
    }
    const bytes = packComputeGBetaParams({ batch: 3, seqLen: 1000, nHeads: 48 });
    const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    expect(bytes.byteLength).toBe(8);
    expect([v.getUint32(0, true), v.getUint32(4, true)]).toEqual([144000, 48]);
  });
  test('the kernels use the softplus threshold the op documents (the preludes\' gdn_gates, which gated_delta_net shares)', () => {
    expect(src).toContain('gdn_gates(');
    for (const text of [prelude, cudaPrelude]) expect(text).toContain(`x > ${SOFTPLUS_THRESHOLD}.0f ? x :`);
  });
});

describe('compute_g_beta reference against hand-computed values', () => {
  test('softplus(0) = ln 2, threshold 20, sigmoid(0) = 1/2', () => {
    expect(softplusRef(0)).toBe(Math.LN2);
    expect(softplusRef(20.5)).toBe(20.5);
    expect(softplusRef(19.5)).toBeCloseTo(19.5 + Math.exp(-19.5), 14);
    // h = 2: g[i] = -exp(aLog[i % 2]) * softplus(a[i] + dtBias[i % 2]).
    const r = computeGBetaRef(2, [0, 1, -1, 30], [0, 2, -3, 100], [0, Math.log(2)], [0, -1]);
    expect([...r.g]).toEqual([-Math.LN2, -2 * Math.LN2, -Math.log1p(Math.exp(-1)), -2 * 29]);
    expect(r.beta[0]).toBe(0.5);
    expect(r.beta[1]).toBeCloseTo(1 / (1 + Math.exp(-2)), 15);
    expect(r.beta[3]).toBe(1);
  });
});

describeValidation('compute_g_beta validation', ({ enc, buf }) => {
  test('every rule', () => {
    const P: ComputeGBetaParams = { batch: 2, seqLen: 3, nHeads: 5 };
    const n = 30;
    const base = () => ({
      a: buf('f32', n), b: buf('f32', n), aLog: buf('f32', 5), dtBias: buf('f32', 5), g: buf('f32', n), beta: buf('f32', n),
    });
    type Case = [params: Partial<ComputeGBetaParams>, bufs: Record<string, Buffer>, arg: string, expected: string, actual: string];
    const cases: Case[] = [
      [{ batch: 0 }, {}, 'batch', 'a positive integer', '0'],
      [{ seqLen: -1 }, {}, 'seqLen', 'a positive integer', '-1'],
      [{ nHeads: 0.5 }, {}, 'nHeads', 'a positive integer', '0.5'],
      [{ batch: 2 ** 16, seqLen: 2 ** 16, nHeads: 2 }, {}, 'batch * seqLen * nHeads', 'at most the 32-bit index limit (4294967295)', `${2 ** 33}`],
      [{ batch: 2 ** 30, seqLen: 2 ** 30, nHeads: 2 ** 10 }, {}, 'batch * seqLen * nHeads', 'a product of integers at most 2^53 - 1',
        `${2 ** 30} * ${2 ** 30} * ${2 ** 10}`],
      [{}, { a: buf('f16', n) }, 'a.dtype', 'one of f32, bf16', 'f16'],
      [{}, { b: buf('bf16', n) }, 'b.dtype', 'f32', 'bf16'],
      [{}, { aLog: buf('bf16', 5) }, 'aLog.dtype', 'f32', 'bf16'],
      [{}, { dtBias: buf('bf16', 5) }, 'dtBias.dtype', 'f32', 'bf16'],
      [{}, { g: buf('bf16', n) }, 'g.dtype', 'f32', 'bf16'],
      [{}, { beta: buf('f16', n) }, 'beta.dtype', 'f32', 'f16'],
      [{}, { a: buf('f32', n + 1) }, 'a.elementCount', `${n}`, `${n + 1}`],
      [{}, { b: buf('f32', n - 1) }, 'b.elementCount', `${n}`, `${n - 1}`],
      [{}, { aLog: buf('f32', n) }, 'aLog.elementCount', '5', `${n}`],
      [{}, { dtBias: buf('f32', 1) }, 'dtBias.elementCount', '5', '1'],
      [{}, { g: buf('f32', 5) }, 'g.elementCount', `${n}`, '5'],
      [{}, { beta: buf('f32', 2 * n) }, 'beta.elementCount', `${n}`, `${2 * n}`],
    ];
    for (const [pm, bm, arg, expected, actual] of cases) {
      expectInvalid(() => computeGBeta(enc(), { ...base(), ...bm, ...P, ...pm }), 'compute_g_beta', arg, expected, actual);
    }
    // bf16 a takes a bf16 b.
    expectInvalid(() => computeGBeta(enc(), { ...base(), a: buf('bf16', n), ...P }), 'compute_g_beta', 'b.dtype', 'bf16', 'f32');
  });
});

type Mode = 'model' | 'adversarial';

/**
 * Model-like: a, b normal, A_log = log(uniform(1, 16)), dt_bias in (-2, 2).
 * Adversarial: a + dt_bias at the softplus threshold (19.9 .. 20.1) and far
 * beyond it (60), very negative (-80, where softplus is exp(x), a value that
 * log(1 + exp(x)) would lose entirely in f32), and b at ±80, where sigmoid is
 * 1 or 1.8e-35.
 */
/** A shape: B, T, H. */
interface Shape { b: number; t: number; h: number }

function makeInputs(r: Rng, p: Shape, mode: Mode) {
  const n = p.b * p.t * p.h;
  const aLog = new Float64Array(p.h).map(() => Math.log(r.uniform(1, 16)));
  const dtBias = new Float64Array(p.h).map(() => r.uniform(-2, 2));
  const a = new Float64Array(n);
  const b = new Float64Array(n);
  const spots = [19.9, 19.999, 20, 20.001, 20.1, 60, -20, -40, -80];
  for (let i = 0; i < n; i++) {
    if (mode === 'model') {
      a[i] = 2 * r.normal();
      b[i] = 2 * r.normal();
    } else {
      a[i] = spots[i % spots.length]! + r.uniform(-0.01, 0.01) - dtBias[i % p.h]!;
      b[i] = [80, -80, 15, -15, 0.001][i % 5]! * r.uniform(0.9, 1);
    }
  }
  return { a, b, aLog, dtBias };
}

// Every output is a product, exp, log and division of f32 values with no
// cancellation, so errors are elementwise relative (floor 1e-30), under
// TOL.f32. The largest comes from the f32 sum x = a + dt_bias: its rounding,
// up to |x| 2^-24 absolute, becomes the relative error of exp(x) where
// softplus(x) = exp(x) (about 2e-6 at x = -80).
describeBackends('compute_g_beta parity', ({ device }) => {
  const shapes: readonly Shape[] = [
    { b: 1, t: 1, h: 1 },
    { b: 2, t: 7, h: 3 },
    { b: 1, t: 33, h: 32 },
    { b: 2, t: 5, h: 48 },
  ];
  for (const dtype of ['f32', 'bf16'] as const) {
    for (const mode of ['model', 'adversarial'] as const) {
      test(`${dtype} a and b, ${mode} inputs`, () => {
        const dev = device();
        let worst = 0;
        const over: string[] = [];
        for (const [si, p] of shapes.entries()) {
          const x = makeInputs(rng(300 + si + (mode === 'model' ? 0 : 50)), p, mode);
          const n = p.b * p.t * p.h;
          const a = dev.upload(dtype, [n], x.a);
          const b = dev.upload(dtype, [n], x.b);
          const aLog = dev.upload('f32', [p.h], x.aLog);
          const dtBias = dev.upload('f32', [p.h], x.dtBias);
          const g = dev.alloc('f32', [n]);
          const beta = dev.alloc('f32', [n]);
          g.fill(Number.NaN);
          beta.fill(Number.NaN);
          const enc = dev.encoder();
          computeGBeta(enc, { a, b, aLog, dtBias, g, beta, batch: p.b, seqLen: p.t, nHeads: p.h });
          enc.commitAndWait();
          enc.release();
          const ref = computeGBetaRef(p.h, a.readNumbers(), b.readNumbers(), aLog.readNumbers(), dtBias.readNumbers());
          const eg = maxRelErr(g.readNumbers(), ref.g, 1e-30);
          const eb = maxRelErr(beta.readNumbers(), ref.beta, 1e-30);
          if (!(eg < TOL.f32)) over.push(`[${p.b}, ${p.t}, ${p.h}] g ${eg}`);
          if (!(eb < TOL.f32)) over.push(`[${p.b}, ${p.t}, ${p.h}] beta ${eb}`);
          worst = Math.max(worst, eg, eb);
          for (const buf of [a, b, aLog, dtBias, g, beta]) buf.release();
        }
        if (process.env.MLXN_PRINT_ERRORS) console.log(`compute_g_beta ${dtype} ${mode}: largest error ${worst}`);
        expect(over).toEqual([]);
      });
    }
  }
});

// ---- buffers that are not live buffers of the device; params; aliasing ----

describeValidation('compute_g_beta: buffers, params and aliasing', ({ device, enc, buf }) => {
  const args = () => ({
    a: buf('f32', 24), b: buf('f32', 24), aLog: buf('f32', 4), dtBias: buf('f32', 4), g: buf('f32', 24), beta: buf('f32', 24),
    batch: 2, seqLen: 3, nHeads: 4,
  });

  test('g or beta bound as another argument is refused (the Metal kernel writes g before it reads b)', () => {
    const a = args();
    gbOps.computeGBeta(enc(), a);
    expectInvalid(() => gbOps.computeGBeta(enc(), { ...a, g: a.b }), 'compute_g_beta', 'g', 'a buffer other than b', 'the buffer of b');
    expectInvalid(() => gbOps.computeGBeta(enc(), { ...a, beta: a.g }), 'compute_g_beta', 'g', 'a buffer other than beta', 'the buffer of beta');
  });

  test('null and foreign buffers and a missing dimension are MlxErrors naming the argument', () => {
    const a = args();
    expectInvalid(() => gbOps.computeGBeta(enc(), { ...a, aLog: null as unknown as Buffer }), 'compute_g_beta', 'aLog', 'a Buffer', 'null');
    expectInvalid(() => gbOps.computeGBeta(enc(), { ...a, seqLen: undefined as unknown as number }),
      'compute_g_beta', 'seqLen', 'a positive integer', 'undefined');
    const other = mlx.Device.open({ backend: device().backend });
    try {
      expectInvalid(() => gbOps.computeGBeta(enc(), { ...a, dtBias: other.alloc('f32', [4]) }), 'compute_g_beta', 'dtBias',
        "a buffer of the encoder's device", 'a buffer of another device');
    } finally {
      other.close();
    }
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('compute_g_beta', [
  {
    fn: 'computeGBeta', op: 'compute_g_beta',
    keys: {
      a: buf(['f32', 'bf16']), b: buf(['f32', 'bf16']), aLog: buf(F), dtBias: buf(F), g: out(F), beta: out(F),
      batch: int, seqLen: int, nHeads: int,
    },
    make: (d) => ({
      a: a(d, 'f32', 24), b: a(d, 'f32', 24), aLog: a(d, 'f32', 4), dtBias: a(d, 'f32', 4), g: a(d, 'f32', 24),
      beta: a(d, 'f32', 24), batch: 2, seqLen: 3, nHeads: 4,
    }),
  },
]);
