// ssm_conv: the reference against hand-computed values, the param packer
// against the .metal struct, every validation rule, parity on every backend
// (with, without and with a fresh state; SiLU on and off; every dtype
// combination), and decode steps against the prefill kernel.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/ssm_conv.metal' with { type: 'text' };
import type { Buffer } from '../ts/index.ts';
import {
  SSM_CONV_KERNELS,
  SSM_CONV_MAX_KS,
  SSM_CONV_PARAMS_LAYOUT,
  SSM_CONV_TOKENS_PER_THREAD,
  packSsmConvParams,
  ssmConv,
  ssmConvDecode,
  ssmConvGrid,
  type SsmConvParams,
  ssmConvRef,
} from '../ts/ops/ssm_conv.ts';
import { describeBackends, randomArray, rng, TOL, expectInvalid, describeValidation, scaledErr } from './helpers.ts';
import * as ssmConvOps from '../ts/ops/ssm_conv.ts';
import * as mlx from '../ts/index.ts';
import { a, buf, int, opContract, out } from './op-contract.ts';

// ---- the param structs against the .metal source ----

describe('ssm_conv param packer matches the .metal declaration', () => {
  test('SsmConvParams: fields, offsets, bound at buffer(4) by every kernel; packed values', () => {
    for (const k of SSM_CONV_KERNELS) {
      expect(src).toMatch(new RegExp(`kernel void ${k}\\([^{]*constant SsmConvParams&\\s+params\\s+\\[\\[buffer\\(4\\)\\]\\]`));
    }
    const bytes = packSsmConvParams({ b: 3, t: 1000, c: 8192, ks: 4, silu: true, readState: false, writeState: true });
    const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    expect(bytes.byteLength).toBe(32);
    expect(SSM_CONV_PARAMS_LAYOUT.map((f) => v.getUint32(f.offset, true))).toEqual([3, 1000, 8192, 4, SSM_CONV_TOKENS_PER_THREAD, 0, 1, 1]);
  });
  test('token blocks reach back at most KS - 1 <= tokens per thread; grid', () => {
    expect(SSM_CONV_TOKENS_PER_THREAD).toBeGreaterThanOrEqual(SSM_CONV_MAX_KS - 1);
    expect(src).toContain(`SSM_CONV_MAX_KS = ${SSM_CONV_MAX_KS};`);
    expect(ssmConvGrid({ b: 2, t: 33, c: 129 })).toEqual([2, 3, 2]);
  });
});

describe('ssm_conv reference against hand-computed values', () => {
  test('C = 1, KS = 3, T = 2, with state', () => {
    // xx = [s0, s1, x0, x1] = [1, 2, 3, 4]; w = [1, 10, 100]
    // y0 = 1 + 20 + 300 = 321; y1 = 2 + 30 + 400 = 432; new state = [3, 4].
    const r = ssmConvRef({ b: 1, t: 2, c: 1, ks: 3, silu: false }, [3, 4], [1, 10, 100], [1, 2]);
    expect([...r.y]).toEqual([321, 432]);
    expect([...r.newState]).toEqual([3, 4]);
    // T = 1 < KS - 1: the state shifts by one. SiLU(y) = y / (1 + e^-y).
    const d = ssmConvRef({ b: 1, t: 1, c: 1, ks: 3, silu: true }, [-1], [1, 1, 1], [1, 2]);
    expect(d.y[0]).toBeCloseTo(2 / (1 + Math.exp(-2)), 15);
    expect([...d.newState]).toEqual([2, -1]);
  });
});

// ---- validation ----

describeValidation('ssm_conv validation', ({ enc, buf }) => {
  type Case = [params: Record<string, unknown>, bufs: Record<string, Buffer>, arg: string, expected: string, actual: string];
  const shapeCases = (dims: readonly string[]): Case[] => [
    ...dims.map((a): Case => [{ [a]: 0 }, {}, a, 'a positive integer', '0']),
    [{ c: 2.5 }, {}, 'c', 'a positive integer', '2.5'],
    [{ c: 2 ** 32 }, {}, 'c', 'at most 2^32 - 1 (4294967295)', '4294967296'],
    [{ ks: 1 }, {}, 'ks', 'in [2, 8]', '1'],
    [{ ks: 9 }, {}, 'ks', 'in [2, 8]', '9'],
  ];

  test('ssm_conv: every rule', () => {
    const op = 'ssm_conv';
    const [B, T, C, KS] = [2, 5, 40, 4];
    const n = B * T * C;
    const base = () => ({
      b: B, t: T, c: C, ks: KS, silu: true,
      x: buf('f32', n), weight: buf('f32', C * KS), state: buf('f32', B * C * (KS - 1)), y: buf('f32', n),
    });
    const cases: Case[] = [
      ...shapeCases(['b', 't', 'c', 'ks']),
      [{ t: 2 ** 31 }, {}, 't', 'at most 2^31 - 9 (the history is indexed with int) (2147483639)', '2147483648'],
      [{ b: 2 ** 30, t: 2 ** 30, c: 2 ** 10 }, {}, 'x elements', 'a product of integers at most 2^53 - 1', `${2 ** 30} * ${2 ** 30} * ${2 ** 10}`],
      [{}, { x: buf('f16', n) }, 'x.dtype', 'one of f32, bf16', 'f16'],
      [{}, { weight: buf('bf16', C * KS) }, 'weight.dtype', 'one of f32', 'bf16'],
      [{}, { y: buf('bf16', n) }, 'y.dtype', 'f32', 'bf16'],
      [{}, { state: buf('bf16', B * C * (KS - 1)) }, 'state.dtype', 'f32', 'bf16'],
      [{}, { x: buf('f32', n + 1) }, 'x.elementCount', `${n}`, `${n + 1}`],
      [{}, { weight: buf('f32', C * (KS - 1)) }, 'weight.elementCount', `${C * KS}`, `${C * (KS - 1)}`],
      [{}, { y: buf('f32', n - 1) }, 'y.elementCount', `${n}`, `${n - 1}`],
      [{}, { state: buf('f32', B * C * KS) }, 'state.elementCount', `${B * C * (KS - 1)}`, `${B * C * KS}`],
      [{ state: undefined, freshState: true }, {}, 'freshState', 'false or absent when no state is given', 'true'],
    ];
    for (const [pm, bm, arg, expected, actual] of cases) {
      expectInvalid(() => ssmConv(enc(), { ...base(), ...bm, ...pm }), op, arg, expected, actual);
    }
    const x = buf('f32', n);
    expectInvalid(() => ssmConv(enc(), { ...base(), x, y: x }), op, 'y', 'a buffer other than x', 'x');
    // bf16 x: the weight may be bf16 or f32; y and state follow x.
    const xb = buf('bf16', n);
    expectInvalid(() => ssmConv(enc(), { ...base(), x: xb, weight: buf('f16', C * KS) }), op, 'weight.dtype', 'one of bf16, f32', 'f16');
    expectInvalid(() => ssmConv(enc(), { ...base(), x: xb, y: buf('bf16', n) }), op, 'state.dtype', 'bf16', 'f32');
  });

  test('ssm_conv_decode: every rule', () => {
    const op = 'ssm_conv_decode';
    const [B, C, KS] = [3, 33, 4];
    const base = () => ({
      b: B, c: C, ks: KS, silu: false,
      x: buf('f32', B * C), weight: buf('f32', C * KS), state: buf('f32', B * C * (KS - 1)), y: buf('f32', B * C),
    });
    const cases: Case[] = [
      ...shapeCases(['b', 'c', 'ks']),
      [{}, { x: buf('u32', B * C) }, 'x.dtype', 'one of f32, bf16', 'u32'],
      [{}, { weight: buf('bf16', C * KS) }, 'weight.dtype', 'one of f32', 'bf16'],
      [{}, { y: buf('bf16', B * C) }, 'y.dtype', 'f32', 'bf16'],
      [{}, { state: buf('f16', B * C * (KS - 1)) }, 'state.dtype', 'f32', 'f16'],
      [{}, { x: buf('f32', 2 * B * C) }, 'x.elementCount', `${B * C}`, `${2 * B * C}`],
      [{}, { weight: buf('f32', C) }, 'weight.elementCount', `${C * KS}`, `${C}`],
      [{}, { y: buf('f32', 1) }, 'y.elementCount', `${B * C}`, '1'],
      [{}, { state: buf('f32', B * C) }, 'state.elementCount', `${B * C * (KS - 1)}`, `${B * C}`],
    ];
    for (const [pm, bm, arg, expected, actual] of cases) {
      expectInvalid(() => ssmConvDecode(enc(), { ...base(), ...bm, ...pm }), op, arg, expected, actual);
    }
    const x = buf('f32', B * C);
    expectInvalid(() => ssmConvDecode(enc(), { ...base(), x, y: x }), op, 'y', 'a buffer other than x', 'x');
  });
});

// ---- parity ----

// Errors are scaledErr (max |got - want| / max |want|): outputs are sums of KS products that may cancel.

type Combo = { x: 'f32' | 'bf16'; w: 'f32' | 'bf16' };
const COMBOS: readonly Combo[] = [{ x: 'f32', w: 'f32' }, { x: 'bf16', w: 'bf16' }, { x: 'bf16', w: 'f32' }];

describeBackends('ssm_conv parity', ({ device }) => {
  // Channels not multiples of 32 or of the 128-thread group; T of one token,
  // under KS - 1 (the state shifts), inside one token block, across blocks.
  const shapes: readonly Omit<SsmConvParams, 'silu'>[] = [
    { b: 1, t: 1, c: 37, ks: 4 },
    { b: 2, t: 2, c: 150, ks: 4 },
    { b: 2, t: 37, c: 70, ks: 4 },
    { b: 1, t: 20, c: 129, ks: 2 },
    { b: 2, t: 5, c: 31, ks: 8 },
    { b: 1, t: 3, c: 300, ks: 8 },
  ];
  type StateMode = 'state' | 'fresh' | 'none';

  for (const combo of COMBOS) {
    test(`ssm_conv x ${combo.x}, weight ${combo.w}: state read / fresh / absent, SiLU on and off`, () => {
      const dev = device();
      const over: string[] = [];
      let worst = 0;
      for (const [si, s] of shapes.entries()) {
        const r = rng(4000 + si);
        const hist = s.ks - 1;
        const x = dev.upload(combo.x, [s.b * s.t * s.c], randomArray(r, s.b * s.t * s.c, -2, 2));
        const weight = dev.upload(combo.w, [s.c * s.ks], randomArray(r, s.c * s.ks, -0.6, 0.6));
        const state0 = randomArray(r, s.b * s.c * hist, -2, 2);
        const y = dev.alloc(combo.x, [s.b * s.t * s.c]);
        for (const mode of ['state', 'fresh', 'none'] as StateMode[]) {
          for (const silu of [true, false]) {
            const p: SsmConvParams = { ...s, silu, ...(mode === 'fresh' ? { freshState: true } : {}) };
            const state = mode === 'none' ? undefined : dev.upload(combo.x, [state0.length], state0);
            const stateIn = state?.readNumbers();
            y.fill(Number.NaN);
            const enc = dev.encoder();
            ssmConv(enc, { ...p, x, weight, y, ...(state === undefined ? {} : { state }) });
            enc.commitAndWait();
            enc.release();
            const ref = ssmConvRef(p, x.readNumbers(), weight.readNumbers(), mode === 'state' ? stateIn : undefined);
            const e = scaledErr(y.readNumbers(), ref.y);
            const tol = combo.x === 'bf16' ? TOL.bf16 : TOL.f32;
            if (!(e < tol)) over.push(`[${s.b}, ${s.t}, ${s.c}] ks ${s.ks} ${mode} silu ${silu}: ${e}`);
            worst = Math.max(worst, e);
            // The new state is a copy of inputs (or of the old state): exact.
            if (state !== undefined) expect(Array.from(state.readNumbers())).toEqual(Array.from(ref.newState));
            state?.release();
          }
        }
        x.release();
        weight.release();
        y.release();
      }
      if (process.env.MLXN_PRINT_ERRORS) console.log(`ssm_conv ${combo.x}/${combo.w}: largest error ${worst}`);
      expect(over).toEqual([]);
    });
  }

  for (const combo of COMBOS) {
    test(`decode x ${combo.x}, weight ${combo.w}: n steps one at a time equal ssm_conv over the n tokens, bit for bit`, () => {
      const dev = device();
      const [B, T, C, KS] = [2, 6, 45, 4];
      const r = rng(77);
      const xs = randomArray(r, B * T * C, -2, 2);
      const x = dev.upload(combo.x, [xs.length], xs);
      const weight = dev.upload(combo.w, [C * KS], randomArray(r, C * KS, -0.6, 0.6));
      const state0 = randomArray(r, B * C * (KS - 1), -2, 2);
      const statePrefill = dev.upload(combo.x, [state0.length], state0);
      const y = dev.alloc(combo.x, [xs.length]);
      y.fill(Number.NaN);
      const enc = dev.encoder();
      ssmConv(enc, { b: B, t: T, c: C, ks: KS, silu: true, x, weight, state: statePrefill, y });
      enc.commitAndWait();
      enc.release();

      const want = y.readNumbers();
      const xn = x.readNumbers();
      const state = dev.upload(combo.x, [state0.length], state0);
      const step = dev.alloc(combo.x, [B * C]);
      for (let t = 0; t < T; t++) {
        const xt = new Float64Array(B * C);
        const wt = new Float64Array(B * C);
        for (let b = 0; b < B; b++) {
          xt.set(xn.subarray((b * T + t) * C, (b * T + t + 1) * C), b * C);
          wt.set(want.subarray((b * T + t) * C, (b * T + t + 1) * C), b * C);
        }
        step.fill(Number.NaN);
        const e = dev.encoder();
        ssmConvDecode(e, { b: B, c: C, ks: KS, silu: true, x: dev.upload(combo.x, [B * C], xt), weight, state, y: step });
        e.commitAndWait();
        e.release();
        expect(Array.from(step.readNumbers())).toEqual(Array.from(wt));
      }
      expect(Array.from(state.readNumbers())).toEqual(Array.from(statePrefill.readNumbers()));
    });
  }
});

// ---- buffers that are not live buffers of the device; the decode state; aliasing ----

describeValidation('ssm_conv: buffers, state and aliasing', ({ device, enc, buf }) => {
  const args = () => ({ x: buf('f32', 12), weight: buf('f32', 16), state: buf('f32', 12), y: buf('f32', 12), b: 1, t: 3, c: 4, ks: 4, silu: true });

  test('ssmConvDecode refuses a missing state (it reads and shifts it)', () => {
    const a = { x: buf('f32', 4), weight: buf('f32', 16), state: buf('f32', 12), y: buf('f32', 4), b: 1, c: 4, ks: 4, silu: false };
    ssmConvOps.ssmConvDecode(enc(), a);
    expectInvalid(() => ssmConvOps.ssmConvDecode(enc(), { ...a, state: undefined as unknown as Buffer }), 'ssm_conv_decode', 'state', 'a Buffer', 'none');
  });

  test('the state bound as x or y is refused; silu and freshState are booleans', () => {
    const a = args();
    ssmConvOps.ssmConv(enc(), a);
    expectInvalid(() => ssmConvOps.ssmConv(enc(), { ...a, state: a.x }), 'ssm_conv', 'state', 'a buffer other than x', 'the buffer of x');
    expectInvalid(() => ssmConvOps.ssmConv(enc(), { ...a, state: a.y }), 'ssm_conv', 'state', 'a buffer other than y', 'the buffer of y');
    expectInvalid(() => ssmConvOps.ssmConv(enc(), { ...a, silu: 'yes' as unknown as boolean }), 'ssm_conv', 'silu', 'true or false', 'yes');
    expectInvalid(() => ssmConvOps.ssmConv(enc(), { ...a, freshState: 1 as unknown as boolean }), 'ssm_conv', 'freshState', 'true, false or absent', '1');
  });

  test('null, released and foreign buffers are MlxErrors naming the argument', () => {
    const a = args();
    expectInvalid(() => ssmConvOps.ssmConv(enc(), { ...a, weight: null as unknown as Buffer }), 'ssm_conv', 'weight', 'a Buffer', 'null');
    expectInvalid(() => ssmConvOps.ssmConv(enc(), { ...a, state: null as unknown as Buffer }), 'ssm_conv', 'state', 'a Buffer', 'null');
    const gone = buf('f32', 12);
    gone.release();
    expectInvalid(() => ssmConvOps.ssmConv(enc(), { ...a, y: gone }), 'ssm_conv', 'y', 'a live Buffer', 'a released buffer');
    const other = mlx.Device.open({ backend: device().backend });
    try {
      expectInvalid(() => ssmConvOps.ssmConv(enc(), { ...a, x: other.alloc('f32', [12]) }), 'ssm_conv', 'x', "a buffer of the encoder's device", 'a buffer of another device');
    } finally {
      other.close();
    }
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('ssm_conv', [
  {
    fn: 'ssmConv', op: 'ssm_conv',
    keys: {
      x: buf(['f32', 'bf16']), weight: buf(['f32', 'bf16']), state: { kind: 'buf?', dtypes: ['f32', 'bf16'], output: true },
      y: out(['f32', 'bf16']), b: int, t: int, c: int, ks: int, silu: { kind: 'bool' }, freshState: { kind: 'bool?' },
    },
    make: (d) => ({
      x: a(d, 'f32', 12), weight: a(d, 'f32', 16), state: a(d, 'f32', 12), y: a(d, 'f32', 12), b: 1, t: 3, c: 4, ks: 4, silu: true,
    }),
  },
  {
    fn: 'ssmConvDecode', op: 'ssm_conv_decode',
    keys: {
      x: buf(['f32', 'bf16']), weight: buf(['f32', 'bf16']), state: out(['f32', 'bf16']), y: out(['f32', 'bf16']),
      b: int, c: int, ks: int, silu: { kind: 'bool' },
    },
    make: (d) => ({
      x: a(d, 'bf16', 8), weight: a(d, 'f32', 12), state: a(d, 'bf16', 16), y: a(d, 'bf16', 8), b: 2, c: 4, ks: 3, silu: false,
    }),
  },
]);
