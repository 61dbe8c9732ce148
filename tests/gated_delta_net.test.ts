// gated_delta_net: the reference against hand-computed values, the param
// packers against the .metal structs, every validation rule, parity of the
// recurrent and decode kernels on every backend, decode steps against the
// recurrent kernel, and the chunked kernel's final state continued by decode.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/gated_delta_net.metal' with { type: 'text' };
import type { Buffer, DType, Device } from '../ts/index.ts';
import {
  GATED_DELTA_NET_DECODE_FUSED_PARAMS_LAYOUT,
  GATED_DELTA_NET_DECODE_PARAMS_LAYOUT,
  GATED_DELTA_NET_PARAMS_LAYOUT,
  gatedDeltaNet,
  gatedDeltaNetDecode,
  gatedDeltaNetDecodeFused,
  gatedDeltaNetDecodeFusedRef,
  packGatedDeltaNetDecodeFusedParams,
  type GatedDeltaNetDecodeFusedArgs,
  gatedDeltaNetGrid,
  gatedDeltaNetScale,
  packGatedDeltaNetDecodeParams,
  packGatedDeltaNetParams,
  type GatedDeltaNetBuffers,
  type GatedDeltaNetDecodeBuffers,
  type GatedDeltaNetDecodeParams,
  type GatedDeltaNetParams,
  gatedDeltaNetRef,
  type GatedDeltaNetRefInputs,
} from '../ts/ops/gated_delta_net.ts';
import { gatedDeltaNetChunk } from '../ts/ops/chunk_gated_delta_rule.ts';
import { computeGBeta } from '../ts/ops/compute_g_beta.ts';
import { l2Norm } from '../ts/ops/l2_norm.ts';
import {
  describeBackends,
  nmse,
  rng,
  TOL,
  type Rng,
  expectInvalid,
  describeValidation,
  scaledErr,
  bf16,
} from './helpers.ts';
import { bufferParam, readFields } from './metal-source.ts';
import * as gdnOps from '../ts/ops/gated_delta_net.ts';
import * as mlx from '../ts/index.ts';
import { a, buf, F, int, opContract, out } from './op-contract.ts';

/** A shape in the reference's short names (gatedDeltaNetRef, ts/ops/gated_delta_net.ts). */
interface Shape { b: number; t: number; hg: number; h: number; k: number; v: number; scale?: number }
/** The ops' flat arguments of a shape. */
const gdnArgs = (p: Shape): GatedDeltaNetParams => ({ ...decodeArgsOf(p), seqLen: p.t });
const decodeArgsOf = (p: Omit<Shape, 't'>): GatedDeltaNetDecodeParams => ({
  batch: p.b, nQkHeads: p.hg, nHeads: p.h, kDim: p.k, vDim: p.v, ...(p.scale === undefined ? {} : { scale: p.scale }),
});

// ---- the param structs against the .metal source ----

describe('gated_delta_net param packers match the .metal declarations', () => {
  test('GatedDeltaNetParams: fields, offsets, bound at buffer(8); packed values', () => {
    for (const k of ['gated_delta_net_f32', 'gated_delta_net_bf16']) {
      expect(bufferParam(src, k, 8)).toMatch(/^constant GatedDeltaNetParams& params /);
    }
    const p = { batch: 3, seqLen: 70000, nQkHeads: 2, nHeads: 6, kDim: 128, vDim: 96 };
    const bytes = packGatedDeltaNetParams({ ...p, hasInitialState: true });
    expect(bytes.byteLength).toBe(32);
    expect(readFields(bytes, GATED_DELTA_NET_PARAMS_LAYOUT)).toEqual([3, 70000, 2, 6, 128, 96, Math.fround(1 / Math.sqrt(128)), 1]);
    const scaled = packGatedDeltaNetParams({ ...p, scale: 0.25, hasInitialState: false });
    expect(readFields(scaled, GATED_DELTA_NET_PARAMS_LAYOUT).slice(6)).toEqual([0.25, 0]);
  });
  test('GatedDeltaNetDecodeParams: fields, offsets, bound at buffer(7); packed values', () => {
    for (const k of ['gated_delta_net_decode_f32', 'gated_delta_net_decode_bf16']) {
      expect(bufferParam(src, k, 7)).toMatch(/^constant GatedDeltaNetDecodeParams& params /);
    }
    const bytes = packGatedDeltaNetDecodeParams({ batch: 5, nQkHeads: 4, nHeads: 16, kDim: 256, vDim: 64, scale: -1.5 });
    expect(bytes.byteLength).toBe(24);
    expect(readFields(bytes, GATED_DELTA_NET_DECODE_PARAMS_LAYOUT)).toEqual([5, 4, 16, 256, 64, -1.5]);
  });
  test('GatedDeltaNetDecodeFusedParams: the decode fields and l2_eps, bound at buffer(9); packed values', () => {
    for (const k of ['gated_delta_net_decode_fused_f32', 'gated_delta_net_decode_fused_bf16']) {
      expect(bufferParam(src, k, 9)).toMatch(/^constant GatedDeltaNetDecodeFusedParams& params /);
    }
    const bytes = packGatedDeltaNetDecodeFusedParams({ batch: 5, nQkHeads: 4, nHeads: 16, kDim: 256, vDim: 64, scale: -1.5, eps: 0.25 });
    expect(bytes.byteLength).toBe(28);
    expect(readFields(bytes, GATED_DELTA_NET_DECODE_FUSED_PARAMS_LAYOUT)).toEqual([5, 4, 16, 256, 64, -1.5, 0.25]);
    expect(readFields(packGatedDeltaNetDecodeFusedParams({ batch: 1, nQkHeads: 1, nHeads: 1, kDim: 64, vDim: 8 }),
      GATED_DELTA_NET_DECODE_FUSED_PARAMS_LAYOUT).slice(5)).toEqual([0.125, Math.fround(1e-6)]);
  });
  test('scale default K^-1/2, grid (ceil(V / 16), H, B)', () => {
    expect(gatedDeltaNetScale({ kDim: 64 })).toBe(0.125);
    expect(gatedDeltaNetScale({ kDim: 64, scale: 2 })).toBe(2);
    expect(gatedDeltaNetGrid({ batch: 2, nHeads: 3, vDim: 40 })).toEqual([3, 3, 2]);
  });
});

describe('gated_delta_net reference against hand-computed values', () => {
  test('two tokens, K = 2, V = 1', () => {
    // t0: S = 0; delta = 3; S = [3, 0]; o = S q = 3.
    // t1: S = 0.5 S = [1.5, 0]; kv = S [0, 1] = 0; delta = (1 - 0) * 0.5; S = [1.5, 0.5]; o = S [1, 1] = 2.
    const ref = gatedDeltaNetRef(
      { b: 1, t: 2, hg: 1, h: 1, k: 2, v: 1, scale: 1 },
      { q: [1, 0, 1, 1], k: [1, 0, 0, 1], v: [3, 1], g: [0, Math.log(0.5)], beta: [1, 0.5] },
    );
    expect([...ref.output]).toEqual([3, 2]);
    expect([...ref.finalState]).toEqual([1.5, 0.5]);
    // An initial state decays first: S0 = [2, 0], g = log 0.5 -> S = [1, 0]; k = [1, 0], v = 1, beta = 1 -> delta = 0.
    const withState = gatedDeltaNetRef(
      { b: 1, t: 1, hg: 1, h: 1, k: 2, v: 1, scale: 0.5 },
      { q: [1, 0], k: [1, 0], v: [1], g: [Math.log(0.5)], beta: [1], initialState: [2, 0] },
    );
    expect([...withState.output]).toEqual([0.5]);
    expect([...withState.finalState]).toEqual([1, 0]);
  });
});

// ---- validation ----

describeValidation('gated_delta_net validation', ({ enc, buf }) => {
  const P: GatedDeltaNetParams = { batch: 2, seqLen: 3, nQkHeads: 1, nHeads: 2, kDim: 64, vDim: 16 };
  const QK = 2 * 3 * 1 * 64;
  const VO = 2 * 3 * 2 * 16;
  const GB = 2 * 3 * 2;
  const ST = 2 * 2 * 16 * 64;
  type Case = [params: Partial<GatedDeltaNetParams>, bufs: Record<string, Buffer>, arg: string, expected: string, actual: string];

  const dimCases = (dims: readonly string[]): Case[] => [
    ...dims.map((a): Case => [{ [a]: 0 }, {}, a, 'a positive integer', '0']),
    [{ nQkHeads: 1.5 }, {}, 'nQkHeads', 'a positive integer', '1.5'],
    [{ vDim: 2 ** 32 }, {}, 'vDim', 'at most 2^32 - 1 (4294967295)', '4294967296'],
    [{ nHeads: 3, nQkHeads: 2 }, {}, 'nHeads', 'a multiple of nQkHeads (2)', '3'],
    [{ kDim: 48 }, {}, 'kDim', 'a multiple of the simdgroup width (32)', '48'],
    [{ kDim: 288 }, {}, 'kDim', 'at most MAX_K (256)', '288'],
    [{ scale: Number.NaN }, {}, 'scale', 'a finite number', 'NaN'],
    [{ scale: Infinity }, {}, 'scale', 'a finite number', 'Infinity'],
  ];
  const bufCases = (): Case[] => [
    [{}, { q: buf('f16', QK) }, 'q.dtype', 'one of f32, bf16', 'f16'],
    [{}, { k: buf('bf16', QK) }, 'k.dtype', 'f32', 'bf16'],
    [{}, { v: buf('bf16', VO) }, 'v.dtype', 'f32', 'bf16'],
    [{}, { output: buf('bf16', VO) }, 'output.dtype', 'f32', 'bf16'],
    [{}, { q: buf('f32', QK + 1) }, 'q.elementCount', `${QK}`, `${QK + 1}`],
    [{}, { k: buf('f32', QK - 1) }, 'k.elementCount', `${QK}`, `${QK - 1}`],
    [{}, { v: buf('f32', VO * 2) }, 'v.elementCount', `${VO}`, `${VO * 2}`],
    [{}, { output: buf('f32', 1) }, 'output.elementCount', `${VO}`, '1'],
    [{}, { g: buf('bf16', GB) }, 'g.dtype', 'f32', 'bf16'],
    [{}, { g: buf('f32', GB + 2) }, 'g.elementCount', `${GB}`, `${GB + 2}`],
    [{}, { beta: buf('f16', GB) }, 'beta.dtype', 'f32', 'f16'],
    [{}, { beta: buf('f32', 1) }, 'beta.elementCount', `${GB}`, '1'],
  ];

  test('gated_delta_net: every rule', () => {
    const op = 'gated_delta_net';
    const base = (): GatedDeltaNetBuffers => ({
      q: buf('f32', QK), k: buf('f32', QK), v: buf('f32', VO), g: buf('f32', GB), beta: buf('f32', GB),
      initialState: buf('f32', ST), output: buf('f32', VO), finalState: buf('f32', ST),
    });
    const cases: Case[] = [
      ...dimCases(['batch', 'seqLen', 'nQkHeads', 'nHeads', 'kDim', 'vDim']),
      [{ batch: 2 ** 20, seqLen: 2 ** 20, nQkHeads: 2 ** 14, nHeads: 2 ** 14 }, {}, 'q elements', 'a product of integers at most 2^53 - 1', `${2 ** 20} * ${2 ** 20} * ${2 ** 14} * 64`],
      ...bufCases(),
      [{}, { initialState: buf('bf16', ST) }, 'initialState.dtype', 'f32', 'bf16'],
      [{}, { initialState: buf('f32', ST - 1) }, 'initialState.elementCount', `${ST}`, `${ST - 1}`],
      [{}, { finalState: buf('f16', ST) }, 'finalState.dtype', 'f32', 'f16'],
      [{}, { finalState: buf('f32', ST + 64) }, 'finalState.elementCount', `${ST}`, `${ST + 64}`],
    ];
    for (const [pm, bm, arg, expected, actual] of cases) {
      expectInvalid(() => gatedDeltaNet(enc(), { ...base(), ...bm, ...P, ...pm }), op, arg, expected, actual);
    }
    // bf16 activations take bf16 k, v and output too.
    expectInvalid(() => gatedDeltaNet(enc(), { ...base(), q: buf('bf16', QK), ...P }), op, 'k.dtype', 'bf16', 'f32');
  });

  test('gated_delta_net_decode: every rule', () => {
    const op = 'gated_delta_net_decode';
    const D: GatedDeltaNetDecodeParams = { batch: 2, nQkHeads: 1, nHeads: 2, kDim: 64, vDim: 16 };
    const qk = 2 * 64;
    const vo = 2 * 2 * 16;
    const gb = 2 * 2;
    const base = (): GatedDeltaNetDecodeBuffers => ({
      q: buf('f32', qk), k: buf('f32', qk), v: buf('f32', vo), g: buf('f32', gb), beta: buf('f32', gb),
      state: buf('f32', ST), output: buf('f32', vo),
    });
    const cases: Case[] = [
      ...dimCases(['batch', 'nQkHeads', 'nHeads', 'kDim', 'vDim']),
      [{ batch: 2 ** 30, nQkHeads: 2 ** 30, nHeads: 2 ** 30 }, {}, 'q elements', 'a product of integers at most 2^53 - 1', `${2 ** 30} * ${2 ** 30} * 64`],
      [{}, { q: buf('u32', qk) }, 'q.dtype', 'one of f32, bf16', 'u32'],
      [{}, { k: buf('bf16', qk) }, 'k.dtype', 'f32', 'bf16'],
      [{}, { v: buf('bf16', vo) }, 'v.dtype', 'f32', 'bf16'],
      [{}, { output: buf('bf16', vo) }, 'output.dtype', 'f32', 'bf16'],
      [{}, { q: buf('f32', QK) }, 'q.elementCount', `${qk}`, `${QK}`],
      [{}, { k: buf('f32', qk + 1) }, 'k.elementCount', `${qk}`, `${qk + 1}`],
      [{}, { v: buf('f32', VO) }, 'v.elementCount', `${vo}`, `${VO}`],
      [{}, { output: buf('f32', vo - 1) }, 'output.elementCount', `${vo}`, `${vo - 1}`],
      [{}, { g: buf('bf16', gb) }, 'g.dtype', 'f32', 'bf16'],
      [{}, { g: buf('f32', GB) }, 'g.elementCount', `${gb}`, `${GB}`],
      [{}, { beta: buf('bf16', gb) }, 'beta.dtype', 'f32', 'bf16'],
      [{}, { beta: buf('f32', gb + 1) }, 'beta.elementCount', `${gb}`, `${gb + 1}`],
      [{}, { state: buf('bf16', ST) }, 'state.dtype', 'f32', 'bf16'],
      [{}, { state: buf('f32', ST / 2) }, 'state.elementCount', `${ST}`, `${ST / 2}`],
    ];
    for (const [pm, bm, arg, expected, actual] of cases) {
      expectInvalid(() => gatedDeltaNetDecode(enc(), { ...base(), ...bm, ...D, ...pm }), op, arg, expected, actual);
    }
  });

  test('gated_delta_net_decode_fused: every rule', () => {
    const op = 'gated_delta_net_decode_fused';
    const D: GatedDeltaNetDecodeParams = { batch: 2, nQkHeads: 1, nHeads: 2, kDim: 64, vDim: 16 };
    const qk = 2 * 64;
    const vo = 2 * 2 * 16;
    const gb = 2 * 2;
    const base = () => ({
      q: buf('f32', qk), k: buf('f32', qk), v: buf('f32', vo), a: buf('f32', gb), b: buf('f32', gb), aLog: buf('f32', 2),
      dtBias: buf('f32', 2), state: buf('f32', ST), output: buf('f32', vo),
    });
    const cases: [Record<string, unknown>, Record<string, unknown>, string, string, string][] = [
      ...dimCases(['batch', 'nQkHeads', 'nHeads', 'kDim', 'vDim']),
      [{ eps: -1 }, {}, 'eps', 'a finite number >= 0', '-1'],
      [{ eps: Number.NaN }, {}, 'eps', 'a finite number >= 0', 'NaN'],
      [{}, { q: buf('u32', qk) }, 'q.dtype', 'one of f32, bf16', 'u32'],
      [{}, { k: buf('bf16', qk) }, 'k.dtype', 'f32', 'bf16'],
      [{}, { output: buf('bf16', vo) }, 'output.dtype', 'f32', 'bf16'],
      [{}, { v: buf('f32', VO) }, 'v.elementCount', `${vo}`, `${VO}`],
      [{}, { a: buf('bf16', gb) }, 'a.dtype', 'f32', 'bf16'],
      [{}, { a: buf('f32', gb + 1) }, 'a.elementCount', `${gb}`, `${gb + 1}`],
      [{}, { b: buf('f32', gb - 1) }, 'b.elementCount', `${gb}`, `${gb - 1}`],
      [{}, { aLog: buf('f16', 2) }, 'aLog.dtype', 'f32', 'f16'],
      [{}, { dtBias: buf('f32', 3) }, 'dtBias.elementCount', '2', '3'],
      [{}, { state: buf('f32', ST / 2) }, 'state.elementCount', `${ST}`, `${ST / 2}`],
      [{}, { b: undefined }, 'b', 'a Buffer', 'none'],
    ];
    for (const [pm, bm, arg, expected, actual] of cases) {
      expectInvalid(() => gatedDeltaNetDecodeFused(enc(), { ...base(), ...bm, ...D, ...pm } as GatedDeltaNetDecodeFusedArgs), op, arg, expected, actual);
    }
    const st = buf('f32', ST);
    expectInvalid(() => gatedDeltaNetDecodeFused(enc(), { ...base(), state: st, output: st.view('f32', [vo], 0), ...D } as GatedDeltaNetDecodeFusedArgs),
      op, 'state', 'a buffer other than output', 'a view overlapping output');
  });
});

// ---- parity ----

interface Inputs {
  q: Float64Array;
  k: Float64Array;
  v: Float64Array;
  g: Float64Array;
  beta: Float64Array;
  h0: Float64Array;
}

/** Rows of n normal values, each scaled to unit L2 norm (as l2_norm leaves q and k). */
function unitRows(r: Rng, rows: number, n: number): Float64Array {
  const out = new Float64Array(rows * n);
  for (let row = 0; row < rows; row++) {
    let s = 0;
    for (let i = 0; i < n; i++) {
      const x = r.normal();
      out[row * n + i] = x;
      s += x * x;
    }
    const inv = 1 / Math.sqrt(s);
    for (let i = 0; i < n; i++) out[row * n + i] = out[row * n + i]! * inv;
  }
  return out;
}

type Gates = 'model' | 'adversarial';

/**
 * Inputs as the model makes them: q, k unit rows, v normal, g in (-5, 0)
 * (decays in (e^-5, 1)), beta in (0, 1), a normal initial state. Adversarial
 * gates mix g near 0 (no decay: the state keeps everything) with g = -30
 * (the state all but erased) and beta near 1 (full overwrite).
 */
function makeInputs(seed: number, p: Shape, gates: Gates): Inputs {
  const r = rng(seed);
  const { b: B, t: T, hg: Hg, h: H, k: K, v: V } = p;
  const q = unitRows(r, B * T * Hg, K);
  const k = unitRows(r, B * T * Hg, K);
  const v = new Float64Array(B * T * H * V).map(() => r.normal());
  const n = B * T * H;
  const g = new Float64Array(n);
  const beta = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    if (gates === 'model') {
      g[i] = r.uniform(-5, 0);
      beta[i] = r.uniform(0, 1);
    } else {
      const u = r.next();
      g[i] = u < 0.45 ? -r.uniform(0, 1e-6) : u < 0.9 ? -r.uniform(1e-4, 1e-2) : -30;
      beta[i] = r.uniform(0.999, 1);
    }
  }
  const h0 = new Float64Array(B * H * V * K).map(() => 0.5 * r.normal());
  return { q, k, v, g, beta, h0 };
}

// Error measure: every output element and every state update is a sum over
// K of products of the data's scale (unit q and k against state rows), which
// may cancel to a value far below its terms; the kernel's f32 error is of the
// terms' size. So errors are max |got - want| / max |want| (scaledErr), under
// TOL.f32 for f32 values; bf16 outputs are compared with the reference
// rounded to bf16, under TOL.bf16 (one bf16 rounding, 2^-8 relative).
describeBackends('gated_delta_net parity', ({ device }) => {
  const shapes: { name: string; p: Shape }[] = [
    { name: 'T = 1, K = V = 64, H = Hg = 1', p: { b: 1, t: 1, hg: 1, h: 1, k: 64, v: 64 } },
    { name: 'B = 2, T = 6, K = 128, V = 32, H/Hg = 2', p: { b: 2, t: 6, hg: 2, h: 4, k: 128, v: 32 } },
    { name: 'T = 5, K = 256, V = 40 (partial row groups), H/Hg = 4', p: { b: 1, t: 5, hg: 1, h: 4, k: 256, v: 40 } },
    { name: 'T = 4, K = 64, V = 256, H = Hg = 2', p: { b: 1, t: 4, hg: 2, h: 2, k: 64, v: 256 } },
    { name: 'T = 8, K = 128, V = 128, H/Hg = 2', p: { b: 1, t: 8, hg: 1, h: 2, k: 128, v: 128 } },
  ];

  const upload = (dev: Device, dtype: DType, data: Float64Array): Buffer => dev.upload(dtype, [data.length], data);
  /** The inputs on the device (q, k, v in dtype; g, beta, h0 in f32), an output and a final state. */
  const onDevice = (dev: Device, dtype: DType, x: Inputs, p: Shape) => ({
    q: upload(dev, dtype, x.q), k: upload(dev, dtype, x.k), v: upload(dev, dtype, x.v),
    g: upload(dev, 'f32', x.g), beta: upload(dev, 'f32', x.beta), h0: upload(dev, 'f32', x.h0),
    output: dev.alloc(dtype, [p.b * p.t * p.h * p.v]), finalState: dev.alloc('f32', [x.h0.length]),
  });

  for (const dtype of ['f32', 'bf16'] as const) {
    for (const gates of ['model', 'adversarial'] as const) {
      test(`gated_delta_net ${dtype}, ${gates} gates, with and without an initial state`, () => {
        const dev = device();
        const over: string[] = [];
        let worst = 0;
        let worstBf16 = 0;
        for (const [si, { name, p }] of shapes.entries()) {
          const x = makeInputs(100 + si * 7 + (gates === 'model' ? 0 : 1000), p, gates);
          const { q, k, v, g, beta, h0, output, finalState } = onDevice(dev, dtype, x, p);
          const stored: GatedDeltaNetRefInputs = {
            q: q.readNumbers(), k: k.readNumbers(), v: v.readNumbers(), g: g.readNumbers(), beta: beta.readNumbers(),
          };
          for (const withState of [true, false]) {
            output.fill(Number.NaN);
            finalState.fill(Number.NaN);
            const enc = dev.encoder();
            gatedDeltaNet(enc, { q, k, v, g, beta, ...(withState ? { initialState: h0 } : {}), output, finalState, ...gdnArgs(p) });
            enc.commitAndWait();
            enc.release();
            const ref = gatedDeltaNetRef({ ...p, scale: gatedDeltaNetScale(decodeArgsOf(p)) }, { ...stored, ...(withState ? { initialState: h0.readNumbers() } : {}) });
            const wantOut = dtype === 'bf16' ? ref.output.map(bf16) : ref.output;
            const eo = scaledErr(output.readNumbers(), wantOut);
            const es = scaledErr(finalState.readNumbers(), ref.finalState);
            const tolOut = dtype === 'bf16' ? TOL.bf16 : TOL.f32;
            if (!(eo < tolOut)) over.push(`${name} state ${withState}: output ${eo}`);
            if (!(es < TOL.f32)) over.push(`${name} state ${withState}: finalState ${es}`);
            worst = Math.max(worst, es, dtype === 'f32' ? eo : 0);
            if (dtype === 'bf16') worstBf16 = Math.max(worstBf16, eo);
          }
          for (const b of [q, k, v, g, beta, h0, output, finalState]) b.release();
        }
        if (process.env.MLXN_PRINT_ERRORS) console.log(`gated_delta_net ${dtype} ${gates}: largest f32 error ${worst}, bf16 output error ${worstBf16}`);
        expect(over).toEqual([]);
      });
    }
  }

  test('gated_delta_net_decode_fused f32 / bf16: the float64 reference of l2_norm, compute_g_beta and the decode step; f32 also the three ops run in turn', () => {
    const dev = device();
    const over: string[] = [];
    const fusedShapes: Omit<Shape, 't'>[] = [
      { b: 1, hg: 16, h: 32, k: 128, v: 128 }, { b: 2, hg: 1, h: 2, k: 64, v: 40 }, { b: 1, hg: 2, h: 2, k: 256, v: 16, scale: 0.3 },
    ];
    for (const [si, p] of fusedShapes.entries()) {
      for (const dtype of ['f32', 'bf16'] as const) {
        const r = rng(700 + si * 3 + (dtype === 'bf16' ? 1 : 0));
        const nqk = p.b * p.hg * p.k, nv = p.b * p.h * p.v, ng = p.b * p.h, nst = p.b * p.h * p.v * p.k;
        const normal = (n: number, sc: number) => new Float64Array(n).map(() => sc * r.normal());
        const x = {
          q: normal(nqk, 3), k: normal(nqk, 3), v: normal(nv, 1), a: normal(ng, 2), b: normal(ng, 2),
          aLog: new Float64Array(p.h).map(() => r.uniform(-2, 1)), dtBias: normal(p.h, 0.5), state: normal(nst, 0.5),
        };
        const up = (dt: DType, d: Float64Array) => dev.upload(dt, [d.length], d);
        const q = up(dtype, x.q), k = up(dtype, x.k), v = up(dtype, x.v), a = up('f32', x.a), b = up('f32', x.b);
        const aLog = up('f32', x.aLog), dtBias = up('f32', x.dtBias), state = up('f32', x.state);
        const output = dev.alloc(dtype, [nv]);
        output.fill(Number.NaN);
        const eps = 1e-6;
        const enc = dev.encoder();
        gatedDeltaNetDecodeFused(enc, { q, k, v, a, b, aLog, dtBias, state, output, ...decodeArgsOf(p), eps });
        enc.commitAndWait();
        enc.release();
        const stored = { ...x, q: q.readNumbers(), k: k.readNumbers(), v: v.readNumbers() };
        const ref = gatedDeltaNetDecodeFusedRef({ ...p, scale: gatedDeltaNetScale(decodeArgsOf(p)), eps }, stored);
        const name = `${dtype} b ${p.b} hg ${p.hg} h ${p.h} k ${p.k} v ${p.v}`;
        const eo = scaledErr(output.readNumbers(), dtype === 'bf16' ? ref.output.map(bf16) : ref.output);
        const es = scaledErr(state.readNumbers(), ref.finalState);
        if (!(eo < (dtype === 'bf16' ? TOL.bf16 : TOL.f32))) over.push(`${name}: output ${eo}`);
        if (!(es < TOL.f32)) over.push(`${name}: state ${es}`);
        if (dtype === 'f32') {
          // The ops the fused step replaces, over the same inputs: within f32 rounding of it.
          const q2 = up('f32', x.q), k2 = up('f32', x.k), st2 = up('f32', x.state), g = dev.alloc('f32', [ng]), beta = dev.alloc('f32', [ng]);
          const out2 = dev.alloc('f32', [nv]);
          const e2 = dev.encoder();
          l2Norm(e2, { x: q2, y: q2, rows: p.b * p.hg, dim: p.k, eps });
          l2Norm(e2, { x: k2, y: k2, rows: p.b * p.hg, dim: p.k, eps });
          computeGBeta(e2, { a, b, aLog, dtBias, g, beta, batch: p.b, seqLen: 1, nHeads: p.h });
          gatedDeltaNetDecode(e2, { q: q2, k: k2, v, g, beta, state: st2, output: out2, ...decodeArgsOf(p) });
          e2.commitAndWait();
          e2.release();
          const d1 = scaledErr(output.readNumbers(), out2.readNumbers()), d2 = scaledErr(state.readNumbers(), st2.readNumbers());
          if (!(d1 < TOL.f32 && d2 < TOL.f32)) over.push(`${name}: against the three ops ${d1} / ${d2}`);
          for (const buf of [q2, k2, st2, g, beta, out2]) buf.release();
        }
        for (const buf of [q, k, v, a, b, aLog, dtBias, state, output]) buf.release();
      }
    }
    expect(over).toEqual([]);
  });

  test('initialState may be finalState (in place): same result as separate buffers', () => {
    const dev = device();
    const p: Shape = { b: 2, t: 3, hg: 1, h: 2, k: 64, v: 24 };
    const x = makeInputs(77, p, 'model');
    const ins = { q: upload(dev, 'f32', x.q), k: upload(dev, 'f32', x.k), v: upload(dev, 'f32', x.v), g: upload(dev, 'f32', x.g), beta: upload(dev, 'f32', x.beta) };
    const h0 = upload(dev, 'f32', x.h0);
    const state = upload(dev, 'f32', x.h0);
    const out1 = dev.alloc('f32', [p.b * p.t * p.h * p.v]);
    const out2 = dev.alloc('f32', [p.b * p.t * p.h * p.v]);
    const fin = dev.alloc('f32', [x.h0.length]);
    out1.fill(Number.NaN);
    out2.fill(Number.NaN);
    fin.fill(Number.NaN);
    const enc = dev.encoder();
    gatedDeltaNet(enc, { ...ins, initialState: h0, output: out1, finalState: fin, ...gdnArgs(p) });
    gatedDeltaNet(enc, { ...ins, initialState: state, output: out2, finalState: state, ...gdnArgs(p) });
    enc.commitAndWait();
    enc.release();
    expect(Array.from(out2.read())).toEqual(Array.from(out1.read()));
    expect(Array.from(state.read())).toEqual(Array.from(fin.read()));
    const ref = gatedDeltaNetRef({ ...p, scale: gatedDeltaNetScale(decodeArgsOf(p)) }, { ...x, initialState: x.h0 });
    expect(scaledErr(state.readNumbers(), ref.finalState)).toBeLessThan(TOL.f32);
  });

  for (const dtype of ['f32', 'bf16'] as const) {
    test(`decode ${dtype}: n steps one at a time equal the recurrent kernel over the n tokens, bit for bit`, () => {
      const dev = device();
      const cases: { p: Shape; scale?: number }[] = [
        { p: { b: 2, t: 4, hg: 1, h: 2, k: 128, v: 40 } },
        { p: { b: 1, t: 3, hg: 2, h: 8, k: 64, v: 16 }, scale: 0.3 },
        { p: { b: 2, t: 2, hg: 1, h: 1, k: 256, v: 64 } },
      ];
      for (const [ci, { p: p0, scale }] of cases.entries()) {
        const p = { ...p0, ...(scale === undefined ? {} : { scale }) };
        const { b: B, t: T, hg: Hg, h: H, k: K, v: V } = p;
        const x = makeInputs(500 + ci, p, ci === 1 ? 'adversarial' : 'model');
        const { q, k, v, g, beta, h0, output, finalState } = onDevice(dev, dtype, x, p);
        output.fill(Number.NaN);
        finalState.fill(Number.NaN);
        const enc = dev.encoder();
        gatedDeltaNet(enc, { q, k, v, g, beta, initialState: h0, output, finalState, ...gdnArgs(p) });
        enc.commitAndWait();
        enc.release();

        // Token t of every sequence, gathered from [B, T, ...] into [B, ...].
        const at = (src: Float64Array, t: number, inner: number): Float64Array => {
          const out = new Float64Array(B * inner);
          for (let b = 0; b < B; b++) out.set(src.subarray((b * T + t) * inner, (b * T + t + 1) * inner), b * inner);
          return out;
        };
        const qs = q.readNumbers();
        const ks = k.readNumbers();
        const vs = v.readNumbers();
        const state = upload(dev, 'f32', x.h0);
        const step = dev.alloc(dtype, [B * H * V]);
        const want = output.readNumbers();
        const decodeParams = { b: B, hg: Hg, h: H, k: K, v: V, ...(scale === undefined ? {} : { scale }) };
        for (let t = 0; t < T; t++) {
          step.fill(Number.NaN);
          const e = dev.encoder();
          gatedDeltaNetDecode(e, {
            q: upload(dev, dtype, at(qs, t, Hg * K)), k: upload(dev, dtype, at(ks, t, Hg * K)), v: upload(dev, dtype, at(vs, t, H * V)),
            g: upload(dev, 'f32', at(x.g, t, H)), beta: upload(dev, 'f32', at(x.beta, t, H)),
            state, output: step, ...decodeArgsOf(decodeParams),
          });
          e.commitAndWait();
          e.release();
          expect(Array.from(step.readNumbers())).toEqual(Array.from(at(want, t, H * V)));
        }
        expect(Array.from(state.read())).toEqual(Array.from(finalState.read()));
        const ref = gatedDeltaNetRef({ ...p, scale: gatedDeltaNetScale(decodeArgsOf(p)) }, {
          q: qs, k: ks, v: vs, g: g.readNumbers(), beta: beta.readNumbers(), initialState: h0.readNumbers(),
        });
        expect(scaledErr(state.readNumbers(), ref.finalState)).toBeLessThan(TOL.f32);
      }
    });
  }

  test('state handover: the chunked kernel\'s final state, continued by decode, matches the recurrent kernel', () => {
    // One sequence, one head, one chunk of 64 tokens (the chunk kernel's
    // shape: K = 128, BT = 64), then one decode token. k and v are bf16 values
    // so both kernels see the same inputs; the chunk kernel's bf16 operands
    // (w, u, state snapshots) give it bf16-level error, so agreement is NMSE
    // below 1e-4; a transposed state layout would give NMSE of order 1.
    const dev = device();
    const [T, K, V] = [64, 128, 32];
    const r = rng(9001);
    const kx = unitRows(r, T + 1, K).map(bf16);
    const vx = new Float64Array((T + 1) * V).map(() => bf16(r.normal()));
    const beta = new Float64Array(T + 1).map(() => Math.fround(r.uniform(0.1, 0.9)));
    const gRaw = new Float64Array(T + 1).map(() => Math.fround(r.uniform(-0.1, -0.005)));
    const qx = unitRows(r, T + 1, K).map(bf16);
    const h0 = new Float64Array(V * K).map(() => Math.fround(0.5 * r.normal()));

    // WY form of the chunk, float64: G = cumsum g; L[i, j] = beta_i e^(G_i - G_j) k_i.k_j (j < i);
    // (I + L) u = beta v; (I + L) w = beta e^G k.
    const G = new Float64Array(T);
    for (let t = 0, acc = 0; t < T; t++) G[t] = acc += gRaw[t]!;
    const u = new Float64Array(T * V);
    const w = new Float64Array(T * K);
    for (let i = 0; i < T; i++) {
      for (let d = 0; d < V; d++) u[i * V + d] = beta[i]! * vx[i * V + d]!;
      for (let d = 0; d < K; d++) w[i * K + d] = beta[i]! * Math.exp(G[i]!) * kx[i * K + d]!;
      for (let j = 0; j < i; j++) {
        let kk = 0;
        for (let d = 0; d < K; d++) kk += kx[i * K + d]! * kx[j * K + d]!;
        const l = beta[i]! * Math.exp(G[i]! - G[j]!) * kk;
        for (let d = 0; d < V; d++) u[i * V + d] = u[i * V + d]! - l * u[j * V + d]!;
        for (let d = 0; d < K; d++) w[i * K + d] = w[i * K + d]! - l * w[j * K + d]!;
      }
    }
    const chunkState = dev.alloc('f32', [V * K]);
    chunkState.fill(Number.NaN);
    const enc = dev.encoder();
    gatedDeltaNetChunk(enc, {
      k: dev.upload('bf16', [T * K], kx.subarray(0, T * K)), w: dev.upload('bf16', [T * K], w), u: dev.upload('bf16', [T * V], u),
      g: dev.upload('f32', [T], G), h0: dev.upload('f32', [V * K], h0),
      hOut: dev.alloc('bf16', [V * K]), vNew: dev.alloc('bf16', [T * V]), finalState: chunkState,
      batch: 1, seqLen: T, nQkHeads: 1, nHeads: 1, kDim: K, vDim: V, bt: 64,
    });
    // The recurrent kernel over the same 64 tokens and the decode token after them.
    const p: Shape = { b: 1, t: T + 1, hg: 1, h: 1, k: K, v: V };
    const output = dev.alloc('f32', [(T + 1) * V]);
    const finalState = dev.alloc('f32', [V * K]);
    output.fill(Number.NaN);
    gatedDeltaNet(enc, {
      q: dev.upload('f32', [qx.length], qx), k: dev.upload('f32', [kx.length], kx), v: dev.upload('f32', [vx.length], vx),
      g: dev.upload('f32', [T + 1], gRaw), beta: dev.upload('f32', [T + 1], beta),
      initialState: dev.upload('f32', [V * K], h0), output, finalState, ...gdnArgs(p),
    });
    enc.commitAndWait();
    enc.release();
    const tokenState = gatedDeltaNetRef({ ...p, t: T, scale: gatedDeltaNetScale(decodeArgsOf(p)) }, {
      q: qx, k: kx, v: vx, g: gRaw, beta, initialState: h0,
    }).finalState;
    expect(nmse(chunkState.readNumbers(), tokenState)).toBeLessThan(1e-4);

    const step = dev.alloc('f32', [V]);
    step.fill(Number.NaN);
    const e = dev.encoder();
    gatedDeltaNetDecode(e, {
      q: dev.upload('f32', [K], qx.subarray(T * K)), k: dev.upload('f32', [K], kx.subarray(T * K)), v: dev.upload('f32', [V], vx.subarray(T * V)),
      g: dev.upload('f32', [1], [gRaw[T]!]), beta: dev.upload('f32', [1], [beta[T]!]),
      state: chunkState, output: step, ...decodeArgsOf({ b: 1, hg: 1, h: 1, k: K, v: V }),
    });
    e.commitAndWait();
    e.release();
    const errs = [
      nmse(step.readNumbers(), output.readNumbers().subarray(T * V)),
      nmse(chunkState.readNumbers(), finalState.readNumbers()),
    ];
    // The same comparison with the state read as [K, V] (transposed) must fail.
    const s = chunkState.readNumbers();
    const transposed = new Float64Array(V * K).map((_, i) => s[(i % K) * V + Math.floor(i / K)]!);
    if (process.env.MLXN_PRINT_ERRORS) console.log(`handover nmse: decode output ${errs[0]}, state ${errs[1]}, transposed ${nmse(transposed, finalState.readNumbers())}`);
    expect(errs[0]).toBeLessThan(1e-4);
    expect(errs[1]).toBeLessThan(1e-4);
    expect(nmse(transposed, finalState.readNumbers())).toBeGreaterThan(0.1);
  });
});

// ---- buffers that are not live buffers of the device; params; aliasing ----

describeValidation('gated_delta_net: buffers, params and aliasing', ({ device, enc, buf }) => {
  const p = { b: 1, t: 2, hg: 1, h: 2, k: 32, v: 16 };
  const args = () => ({
    q: buf('f32', 64), k: buf('f32', 64), v: buf('f32', 64), g: buf('f32', 4), beta: buf('f32', 4),
    initialState: buf('f32', 1024), output: buf('f32', 64), finalState: buf('f32', 1024), ...gdnArgs(p),
  });
  const decodeArgs = () => ({
    q: buf('f32', 32), k: buf('f32', 32), v: buf('f32', 32), g: buf('f32', 2), beta: buf('f32', 2), state: buf('f32', 1024),
    output: buf('f32', 32), ...decodeArgsOf({ b: 1, hg: 1, h: 2, k: 32, v: 16 }),
  });

  test('output bound as q or k is refused (read by other threadgroups); initialState as finalState stays allowed', () => {
    const a = args();
    gdnOps.gatedDeltaNet(enc(), { ...a, initialState: a.finalState });
    expectInvalid(() => gdnOps.gatedDeltaNet(enc(), { ...a, output: a.q }), 'gated_delta_net', 'output', 'a buffer other than q', 'the buffer of q');
    expectInvalid(() => gdnOps.gatedDeltaNet(enc(), { ...a, output: a.k }), 'gated_delta_net', 'output', 'a buffer other than k', 'the buffer of k');
    const d = decodeArgs();
    gdnOps.gatedDeltaNetDecode(enc(), d);
    expectInvalid(() => gdnOps.gatedDeltaNetDecode(enc(), { ...d, output: d.k }), 'gated_delta_net_decode', 'output', 'a buffer other than k', 'the buffer of k');
  });

  test('null, missing and foreign buffers and a missing dimension are MlxErrors naming the argument', () => {
    const a = args();
    expectInvalid(() => gdnOps.gatedDeltaNet(enc(), { ...a, initialState: null as unknown as Buffer }), 'gated_delta_net', 'initialState', 'a Buffer', 'null');
    expectInvalid(() => gdnOps.gatedDeltaNet(enc(), { ...a, g: undefined as unknown as Buffer }), 'gated_delta_net', 'g', 'a Buffer', 'none');
    expectInvalid(() => gdnOps.gatedDeltaNet(enc(), { ...a, nHeads: undefined as unknown as number }), 'gated_delta_net', 'nHeads', 'a positive integer', 'undefined');
    const d = decodeArgs();
    expectInvalid(() => gdnOps.gatedDeltaNetDecode(enc(), { ...d, state: null as unknown as Buffer }), 'gated_delta_net_decode', 'state', 'a Buffer', 'null');
    const other = mlx.Device.open({ backend: device().backend });
    try {
      expectInvalid(() => gdnOps.gatedDeltaNetDecode(enc(), { ...d, beta: other.alloc('f32', [2]) }), 'gated_delta_net_decode', 'beta',
        "a buffer of the encoder's device", 'a buffer of another device');
    } finally {
      other.close();
    }
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('gated_delta_net', [
  {
    fn: 'gatedDeltaNet', op: 'gated_delta_net',
    keys: {
      q: buf(['f32', 'bf16']), k: buf(['f32', 'bf16']), v: buf(['f32', 'bf16']), g: buf(F), beta: buf(F),
      initialState: { kind: 'buf?', dtypes: F }, output: out(['f32', 'bf16']), finalState: out(F),
      batch: int, seqLen: int, nQkHeads: int, nHeads: int, kDim: int, vDim: int, scale: { kind: 'num?' },
    },
    inPlace: [['initialState', 'finalState']],
    make: (d) => ({
      q: a(d, 'f32', 64), k: a(d, 'f32', 64), v: a(d, 'f32', 64), g: a(d, 'f32', 4), beta: a(d, 'f32', 4),
      initialState: a(d, 'f32', 1024), output: a(d, 'f32', 64), finalState: a(d, 'f32', 1024),
      batch: 1, seqLen: 2, nQkHeads: 1, nHeads: 2, kDim: 32, vDim: 16,
    }),
  },
  {
    fn: 'gatedDeltaNetDecode', op: 'gated_delta_net_decode',
    keys: {
      q: buf(['f32', 'bf16']), k: buf(['f32', 'bf16']), v: buf(['f32', 'bf16']), g: buf(F), beta: buf(F),
      state: out(F), output: out(['f32', 'bf16']),
      batch: int, nQkHeads: int, nHeads: int, kDim: int, vDim: int, scale: { kind: 'num?' },
    },
    make: (d) => ({
      q: a(d, 'bf16', 32), k: a(d, 'bf16', 32), v: a(d, 'bf16', 32), g: a(d, 'f32', 2), beta: a(d, 'f32', 2),
      state: a(d, 'f32', 1024), output: a(d, 'bf16', 32), batch: 1, nQkHeads: 1, nHeads: 2, kDim: 32, vDim: 16, scale: 0.5,
    }),
  },
  {
    fn: 'gatedDeltaNetDecodeFused', op: 'gated_delta_net_decode_fused',
    keys: {
      q: buf(['f32', 'bf16']), k: buf(['f32', 'bf16']), v: buf(['f32', 'bf16']), a: buf(F), b: buf(F), aLog: buf(F), dtBias: buf(F),
      state: out(F), output: out(['f32', 'bf16']),
      batch: int, nQkHeads: int, nHeads: int, kDim: int, vDim: int, scale: { kind: 'num?' }, eps: { kind: 'num?' },
    },
    make: (d) => ({
      q: a(d, 'bf16', 32), k: a(d, 'bf16', 32), v: a(d, 'bf16', 32), a: a(d, 'f32', 2), b: a(d, 'f32', 2), aLog: a(d, 'f32', 2),
      dtBias: a(d, 'f32', 2), state: a(d, 'f32', 1024), output: a(d, 'bf16', 32), batch: 1, nQkHeads: 1, nHeads: 2, kDim: 32, vDim: 16,
      eps: 1e-6,
    }),
  },
]);
