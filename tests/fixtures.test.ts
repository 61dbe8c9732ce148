// Our kernels against references computed outside this project: PyTorch in
// float64 and FLA's naive gated delta rule in float64, stored under
// tests/fixtures/ by tests/fixtures/make_fixtures.py (run on the GPU machine).
// Each fixture's manifest (<name>.json) lists its arrays in <name>.bin; the
// inputs are stored exactly as the kernels take them and every expected
// array is the float64 result of exactly those inputs.

import { describe, expect, test } from 'bun:test';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fromBf16, fromF16, type Buffer, type DType, type Device } from '../ts/index.ts';
import { chunkGatedDeltaRule, chunkLocalCumsum, gatedDeltaNetChunk } from '../ts/ops/chunk_gated_delta_rule.ts';
import { flashAttnVec, flashAttnVecTmpElements, type FlashAttnVecMask } from '../ts/ops/flash_attn_vec.ts';
import {
  fusedNormAdd, fusedNormAddScalar, fusedResidualNorm, fusedResidualNormScalar,
} from '../ts/ops/fused_norm.ts';
import { gatedDeltaNet, gatedDeltaNetDecode } from '../ts/ops/gated_delta_net.ts';
import { fusedMoeRouting, fusedMoeRoutingBatch } from '../ts/ops/moe_routing.ts';
import { ssmNormGate } from '../ts/ops/ssm_norm_gate.ts';
import { TOL, describeBackends, maxRelErr, nmse, run } from './helpers.ts';
import { flat } from './gdr-args.ts';

const DIR = join(import.meta.dir, 'fixtures');

/** Every fixture make_fixtures.py writes; a missing one fails the suite. */
export const FIXTURE_NAMES = [
  'fused_norm', 'moe_routing_batch', 'moe_routing_token', 'ssm_norm_gate', 'chunk_local_cumsum',
  'flash_attn_vec_d256', 'flash_attn_vec_d512', 'gated_delta_rule',
] as const;
type FixtureName = (typeof FIXTURE_NAMES)[number];

type StoredDType = 'f64' | 'f32' | 'f16' | 'bf16' | 'u32';

interface ArrayEntry {
  name: string;
  role: 'input' | 'expected';
  dtype: StoredDType;
  shape: number[];
  offset: number;
  bytes: number;
  note?: string;
}

interface Manifest {
  name: string;
  op: string;
  seed: number;
  params: Record<string, unknown>;
  source: string;
  versions: Record<string, string>;
  arrays: ArrayEntry[];
  checks?: Record<string, number>;
  peers?: Record<string, number | string>;
}

const STORED_SIZE: Record<StoredDType, number> = { f64: 8, f32: 4, f16: 2, bf16: 2, u32: 4 };

/** One fixture: its manifest and the arrays of its .bin, decoded on demand. */
export class Fixture {
  readonly manifest: Manifest;
  private readonly bin: Uint8Array;

  constructor(readonly name: string) {
    this.manifest = JSON.parse(readFileSync(join(DIR, `${name}.json`), 'utf8')) as Manifest;
    this.bin = new Uint8Array(readFileSync(join(DIR, `${name}.bin`)));
    for (const a of this.manifest.arrays) {
      const n = a.shape.reduce((x, y) => x * y, 1);
      if (a.bytes !== n * STORED_SIZE[a.dtype] || a.offset % 8 !== 0 || a.offset + a.bytes > this.bin.byteLength) {
        throw new Error(`fixture ${name}: array ${a.name} has a bad extent (offset ${a.offset}, ${a.bytes} bytes)`);
      }
    }
  }

  entry(name: string): ArrayEntry {
    const e = this.manifest.arrays.find((a) => a.name === name);
    if (e === undefined) throw new Error(`fixture ${this.name}: no array ${name}`);
    return e;
  }

  shape(name: string): number[] {
    return this.entry(name).shape;
  }

  /** A copy of the array's bytes, as the typed array of its stored dtype. */
  raw(name: string): Float64Array | Float32Array | Uint16Array | Uint32Array {
    const e = this.entry(name);
    const bytes = this.bin.slice(e.offset, e.offset + e.bytes).buffer;
    switch (e.dtype) {
      case 'f64': return new Float64Array(bytes);
      case 'f32': return new Float32Array(bytes);
      case 'f16':
      case 'bf16': return new Uint16Array(bytes);
      case 'u32': return new Uint32Array(bytes);
    }
  }

  /** The array's values as numbers (f16 and bf16 decoded). */
  numbers(name: string): Float64Array {
    const e = this.entry(name);
    const r = this.raw(name);
    if (e.dtype === 'f16') return Float64Array.from(fromF16(r as Uint16Array));
    if (e.dtype === 'bf16') return Float64Array.from(fromBf16(r as Uint16Array));
    return Float64Array.from(r);
  }

  /**
   * A device buffer of `dtype` (default: the stored dtype) holding the array.
   * Same dtype: the stored bytes, written as they are. f32 from f16/bf16: the
   * decoded values, which f32 holds exactly.
   */
  upload(dev: Device, name: string, dtype?: DType): Buffer {
    const e = this.entry(name);
    const want = dtype ?? (e.dtype as DType);
    if (want === e.dtype) {
      const b = dev.alloc(want, e.shape);
      b.write(this.raw(name));
      return b;
    }
    if (want === 'f32' && (e.dtype === 'f16' || e.dtype === 'bf16')) return dev.upload('f32', e.shape, this.numbers(name));
    throw new Error(`fixture ${this.name}: cannot upload ${name} (${e.dtype}) as ${want}`);
  }

  param(key: string): number {
    const v = this.manifest.params[key];
    if (typeof v !== 'number') throw new Error(`fixture ${this.name}: param ${key} is not a number`);
    return v;
  }
}

const loaded = new Map<FixtureName, Fixture>();
function fixture(name: FixtureName): Fixture {
  let f = loaded.get(name);
  if (f === undefined) {
    f = new Fixture(name);
    loaded.set(name, f);
  }
  return f;
}

function releaseAll(bufs: readonly Buffer[]): void {
  for (const b of bufs) b.release();
}

/** An output buffer poisoned, so an unwritten element fails. */
function poisoned(dev: Device, dtype: DType, shape: readonly number[]): Buffer {
  const b = dev.alloc(dtype, shape);
  // NaN where the dtype has one; an id no expert has for u32.
  b.fill(dtype === 'u32' ? 0xffff_ffff : NaN);
  return b;
}

/** max |got - want| / max |want|: absolute error at the data's scale. */
function errAtScale(got: ArrayLike<number>, want: ArrayLike<number>): number {
  let scale = 0;
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]!));
  return maxRelErr(got, want, scale);
}

/** [B, H, X, Y] -> [B, H, Y, X] (FLA's state layout [.., K, V] to ours [.., V, K] and back). */
function swapLast2(a: ArrayLike<number>, bh: number, x: number, y: number): Float64Array {
  const out = new Float64Array(bh * x * y);
  for (let m = 0; m < bh; m++) {
    for (let i = 0; i < x; i++) {
      for (let j = 0; j < y; j++) out[(m * y + j) * x + i] = a[(m * x + i) * y + j]!;
    }
  }
  return out;
}

/** Collects (label, error, bound) and fails once with every case over its bound. */
function expectAllUnder(rows: readonly [string, number, number][]): void {
  for (const [label, err, bound] of rows) console.log(`fixtures ${label}: ${err.toExponential(2)} (bound ${bound})`);
  const over = rows.filter(([, err, bound]) => !(err < bound)).map(([l, e, b]) => `${l}: ${e} >= ${b}`);
  expect(over).toEqual([]);
}

describe('fixtures: files', () => {
  for (const name of FIXTURE_NAMES) {
    test(`${name}: manifest and data present and consistent`, () => {
      expect(existsSync(join(DIR, `${name}.json`))).toBe(true);
      expect(existsSync(join(DIR, `${name}.bin`))).toBe(true);
      const f = fixture(name);
      expect(f.manifest.name).toBe(name);
      expect(f.manifest.arrays.some((a) => a.role === 'expected')).toBe(true);
      for (const a of f.manifest.arrays.filter((x) => x.role === 'expected' && x.dtype !== 'u32')) {
        expect({ array: a.name, finite: f.numbers(a.name).every(Number.isFinite) }).toEqual({ array: a.name, finite: true });
      }
    });
  }
});

describeBackends('fixtures', ({ device }) => {
  // Fused norms: f32 within TOL.f32, bf16 outputs (one bf16 rounding, 2^-9
  // relative, on top) within TOL.bf16, both as max |got - want| / max |want|.
  // The outputs residual + normed add terms of either sign, so an element
  // near zero keeps only the absolute accuracy of the terms (f32 epsilon
  // times their size): its relative error is unbounded in any f32
  // evaluation, and the data's scale is the honest yardstick.
  test('fused_norm: every variant against torch rms_norm', () => {
    const dev = device();
    const f = fixture('fused_norm');
    const rows = f.param('rows');
    const dim = f.param('dim');
    const eps = f.param('eps');
    const shape = [rows, dim];
    const errs: [string, number, number][] = [];
    for (const dt of ['f32', 'bf16'] as const) {
      const sfx = dt === 'bf16' ? '_bf16' : '';
      const residual = f.upload(dev, `residual${sfx}`);
      const input = f.upload(dev, `input${sfx}`);
      const weight = f.upload(dev, `weight${sfx}`);
      const output = poisoned(dev, dt, shape);
      const normedOutput = poisoned(dev, dt, shape);
      const sumOutput = poisoned(dev, dt, shape);
      run(dev, (enc) => {
        fusedNormAdd(enc, { residual, input, weight, output, rows, dim, eps });
        fusedResidualNorm(enc, { residual, input, weight, normedOutput, sumOutput, rows, dim, eps });
      });
      const tol = TOL[dt];
      errs.push([`fused_norm_add ${dt}`, errAtScale(output.readNumbers(), f.numbers(`norm_add${sfx}`)), tol]);
      errs.push([`fused_residual_norm ${dt} normed`, errAtScale(normedOutput.readNumbers(), f.numbers(`residual_norm_normed${sfx}`)), tol]);
      errs.push([`fused_residual_norm ${dt} sum`, errAtScale(sumOutput.readNumbers(), f.numbers(`residual_norm_sum${sfx}`)), tol]);
      releaseAll([residual, input, weight, output, normedOutput, sumOutput]);
    }
    const residual = f.upload(dev, 'residual');
    const input = f.upload(dev, 'input');
    const weight = f.upload(dev, 'weight');
    for (const which of ['one', 'vec'] as const) {
      const scalar = f.upload(dev, `scalar_${which}`);
      const out1 = poisoned(dev, 'f32', shape);
      const out2 = poisoned(dev, 'f32', shape);
      run(dev, (enc) => {
        fusedResidualNormScalar(enc, { residual, input, weight, output: out1, scalar, rows, dim, eps });
        fusedNormAddScalar(enc, { residual, input, weight, output: out2, scalar, rows, dim, eps });
      });
      errs.push([`fused_residual_norm_scalar ${which}`, errAtScale(out1.readNumbers(), f.numbers(`residual_norm_scalar_${which}`)), TOL.f32]);
      errs.push([`fused_norm_add_scalar ${which}`, errAtScale(out2.readNumbers(), f.numbers(`norm_add_scalar_${which}`)), TOL.f32]);
      releaseAll([scalar, out1, out2]);
    }
    releaseAll([residual, input, weight]);
    expectAllUnder(errs);
  });

  for (const name of ['moe_routing_batch', 'moe_routing_token'] as const) {
    test(`${name}: ids equal torch.topk's, weights within TOL.f32`, () => {
      const dev = device();
      const f = fixture(name);
      const nTokens = f.param('nTokens');
      const numExperts = f.param('numExperts');
      const topK = f.param('topK');
      const logits = f.upload(dev, 'logits');
      const perExpertScale = f.upload(dev, 'per_expert_scale');
      const wantIds = Array.from(f.raw('expert_ids'));
      const wantW = f.numbers('routing_weights');
      const kernels: ['batch' | 'single', number][] = [['batch', nTokens]];
      if (nTokens === 1) kernels.push(['single', 1]);
      for (const [kind] of kernels) {
        const expertIds = poisoned(dev, 'u32', [nTokens, topK]);
        const routingWeights = poisoned(dev, 'f32', [nTokens, topK]);
        const args = { logits, expertIds, routingWeights, perExpertScale, numExperts, topK };
        run(dev, (enc) => {
          if (kind === 'batch') fusedMoeRoutingBatch(enc, { ...args, nTokens });
          else fusedMoeRouting(enc, args);
        });
        expect({ kind, ids: Array.from(expertIds.read()) }).toEqual({ kind, ids: wantIds });
        expectAllUnder([[`${name} ${kind} weights`, maxRelErr(routingWeights.readNumbers(), wantW), TOL.f32]]);
        releaseAll([expertIds, routingWeights]);
      }
      releaseAll([logits, perExpertScale]);
    });
  }

  test('ssm_norm_gate: against torch rms_norm * silu', () => {
    const dev = device();
    const f = fixture('ssm_norm_gate');
    const rows = f.param('rows');
    const dV = f.param('dV');
    const attnOut = f.upload(dev, 'attn_out');
    const weight = f.upload(dev, 'weight');
    const z = f.upload(dev, 'z');
    const output = poisoned(dev, 'f32', [rows, dV]);
    run(dev, (enc) => ssmNormGate(enc, { attnOut, weight, z, output, rows, dV, eps: f.param('eps') }));
    expectAllUnder([['ssm_norm_gate', maxRelErr(output.readNumbers(), f.numbers('output')), TOL.f32]]);
    releaseAll([attnOut, weight, z, output]);
  });

  test('chunk_local_cumsum: against torch cumsum per chunk (partial last chunk)', () => {
    const dev = device();
    const f = fixture('chunk_local_cumsum');
    const p = { b: f.param('b'), t: f.param('t'), h: f.param('h'), bt: f.param('bt') };
    const gIn = f.upload(dev, 'g');
    const gCumsum = poisoned(dev, 'f32', [p.b, p.t, p.h]);
    run(dev, (enc) => chunkLocalCumsum(enc, { gIn, gCumsum, ...flat(p) }));
    expectAllUnder([['chunk_local_cumsum', maxRelErr(gCumsum.readNumbers(), f.numbers('g_cumsum')), TOL.f32]]);
    releaseAll([gIn, gCumsum]);
  });

  // Decode attention: f32 arithmetic on the stored values (f16 K/V decoded
  // exactly; the f32 run takes the same values), so the error is f32
  // rounding at the output's scale: max |got - want| / max |want| < TOL.f32,
  // as tests/flash_attn_vec.test.ts measures it. nwg 1 (one pass) and 3 (split
  // KV + reduce, a split that does not divide kvSeqLen).
  for (const name of ['flash_attn_vec_d256', 'flash_attn_vec_d512'] as const) {
    test(`${name}: against torch SDPA (GQA, window) and eager softcap, f16 and f32 KV, nwg 1 and 3`, () => {
      const dev = device();
      const f = fixture(name);
      const batch = f.param('batch');
      const nHeads = f.param('nHeads');
      const nKvHeads = f.param('nKvHeads');
      const headDim = f.param('headDim');
      const kvCapacity = f.param('kvCapacity');
      const kvSeqLen = f.param('kvSeqLen');
      const cases = f.manifest.params.cases as { name: string; scale: number; slidingWindow: number; softcap: number }[];
      const q = f.upload(dev, 'q');
      const errs: [string, number, number][] = [];
      for (const kvDtype of ['f16', 'f32'] as const) {
        const k = f.upload(dev, 'k', kvDtype);
        const v = f.upload(dev, 'v', kvDtype);
        for (const c of cases) {
          const masks: FlashAttnVecMask[] = c.slidingWindow > 0 ? ['slidingWindow'] : ['none', 'causal'];
          for (const mask of masks) {
            for (const nwg of [1, 3]) {
              const p = {
                batch, nHeads, nKvHeads, headDim, kvSeqLen, kvCapacity, nwg, mask,
                scale: c.scale, softcap: c.softcap, slidingWindow: c.slidingWindow > 0 ? c.slidingWindow : undefined,
              };
              const out = poisoned(dev, 'f32', [batch, nHeads, headDim]);
              const tmp = nwg > 1 ? poisoned(dev, 'f32', [flashAttnVecTmpElements(p)]) : undefined;
              run(dev, (enc) => flashAttnVec(enc, { ...p, q, k, v, out, tmp }));
              errs.push([`${name} ${c.name} ${mask} kv ${kvDtype} nwg ${nwg}`,
                errAtScale(out.readNumbers(), f.numbers(`out_${c.name}`)), TOL.f32]);
              releaseAll(tmp === undefined ? [out] : [out, tmp]);
            }
          }
        }
        releaseAll([k, v]);
      }
      q.release();
      expectAllUnder(errs);
    });
  }

  // The inter-chunk step takes bf16 k, w, u and stores bf16 chunk states and
  // v_new: each product has bf16 operands, so against the float64 result the
  // error is a sum of bf16 roundings (2^-9 relative each), not f32's. Bounds:
  // nmse < 1e-4 (pure bf16 rounding gives about 1e-6; a wrong index or layout
  // gives order 1) and max |got - want| / max |want| < 2e-2.
  test('gated_delta_rule: gated_delta_net_chunk against the fwd_h recurrence and FLA naive final state', () => {
    const dev = device();
    const f = fixture('gated_delta_rule');
    const p = {
      b: f.param('b'), t: f.param('t'), hg: f.param('hg'), h: f.param('h'),
      k: f.param('k'), v: f.param('v'), bt: f.param('bt'),
    };
    const nt = Math.ceil(p.t / p.bt);
    const bh = p.b * p.h;
    const k = f.upload(dev, 'k');
    const w = f.upload(dev, 'chunk_w');
    const u = f.upload(dev, 'chunk_u');
    const g = f.upload(dev, 'chunk_g_cumsum');
    const h0 = dev.upload('f32', [p.b, p.h, p.v, p.k], swapLast2(f.numbers('h0'), bh, p.k, p.v));
    const hOut = poisoned(dev, 'bf16', [p.b, nt, p.h, p.v, p.k]);
    const vNew = poisoned(dev, 'bf16', [p.b, p.t, p.h, p.v]);
    const finalState = poisoned(dev, 'f32', [p.b, p.h, p.v, p.k]);
    run(dev, (enc) => gatedDeltaNetChunk(enc, { k, w, u, g, h0, hOut, vNew, finalState, ...flat(p) }));
    const gotH = hOut.readNumbers();
    const gotV = vNew.readNumbers();
    const gotS = finalState.readNumbers();
    const wantS = f.numbers('chunk_final_state');
    // FLA's naive recurrence ran on the unrounded WY inputs: the kernel's
    // final state, transposed to FLA's [B, H, K, V], lands within the same
    // bf16 bounds of it.
    const naiveS = f.numbers('final_state');
    const rows: [string, number, number][] = [
      ['gdn_chunk h nmse', nmse(gotH, f.numbers('chunk_h')), 1e-4],
      ['gdn_chunk h max err at scale', errAtScale(gotH, f.numbers('chunk_h')), 2e-2],
      ['gdn_chunk v_new nmse', nmse(gotV, f.numbers('chunk_v_new')), 1e-4],
      ['gdn_chunk v_new max err at scale', errAtScale(gotV, f.numbers('chunk_v_new')), 2e-2],
      ['gdn_chunk final nmse', nmse(gotS, wantS), 1e-4],
      ['gdn_chunk final max err at scale', errAtScale(gotS, wantS), 2e-2],
      ['gdn_chunk final vs FLA naive recurrence nmse', nmse(swapLast2(gotS, bh, p.v, p.k), naiveS), 1e-4],
    ];
    releaseAll([k, w, u, g, h0, hOut, vNew, finalState]);
    expectAllUnder(rows);
  });

  // gated_delta_net (token by token, f32 arithmetic) against FLA's naive
  // recurrence, as max |got - want| / max |want|: f32 within TOL.f32 (128
  // steps of f32 rounding; about 2e-7 on emu); bf16 activations, whose output
  // is stored as bf16, within TOL.bf16.
  // The decode kernel, stepped T times over the same tokens with the state in
  // place, must give the same outputs and final state.
  for (const dt of ['f32', 'bf16'] as const) {
    test(`gated_delta_rule: gated_delta_net ${dt} and gated_delta_net_decode ${dt} against FLA naive_recurrent_gated_delta_rule`, () => {
      const dev = device();
      const f = fixture('gated_delta_rule');
      const params = {
        b: f.param('b'), t: f.param('t'), hg: f.param('hg'), h: f.param('h'),
        k: f.param('k'), v: f.param('v'), scale: f.param('scale'),
      };
      const decodeArgs = { batch: params.b, nQkHeads: params.hg, nHeads: params.h, kDim: params.k, vDim: params.v, scale: params.scale };
      const { b: B, t: T, hg: Hg, h: H, k: K, v: V } = params;
      const bh = B * H;
      const h0 = swapLast2(f.numbers('h0'), bh, K, V);
      const wantO = f.numbers('o');
      const wantS = f.numbers('final_state');
      const bound = TOL[dt];
      const q = f.upload(dev, 'q', dt);
      const k = f.upload(dev, 'k', dt);
      const v = f.upload(dev, 'v', dt);
      const g = f.upload(dev, 'g');
      const beta = f.upload(dev, 'beta');
      const initialState = dev.upload('f32', [B, H, V, K], h0);
      const output = poisoned(dev, dt, [B, T, H, V]);
      const finalState = poisoned(dev, 'f32', [B, H, V, K]);
      run(dev, (enc) => gatedDeltaNet(enc, { q, k, v, g, beta, initialState, output, finalState, ...decodeArgs, seqLen: params.t }));
      const rows: [string, number, number][] = [
        [`gated_delta_net ${dt} o`, errAtScale(output.readNumbers(), wantO), bound],
        [`gated_delta_net ${dt} final`, errAtScale(swapLast2(finalState.readNumbers(), bh, V, K), wantS), bound],
      ];
      releaseAll([q, k, v, g, beta, initialState, output, finalState]);

      // Decode: B = 1 here, so token t of each [B, T, ...] array is one contiguous slice.
      if (B !== 1) throw new Error('the decode check slices tokens of a batch-1 fixture');
      const all = { q: f.numbers('q'), k: f.numbers('k'), v: f.numbers('v'), g: f.numbers('g'), beta: f.numbers('beta') };
      const state = dev.upload('f32', [B, H, V, K], h0);
      const outs: Buffer[] = [];
      const inputs: Buffer[] = [];
      run(dev, (enc) => {
        for (let t = 0; t < T; t++) {
          const slice = (a: Float64Array, n: number) => a.subarray(t * n, (t + 1) * n);
          const qt = dev.upload(dt, [B, Hg, K], slice(all.q, Hg * K));
          const kt = dev.upload(dt, [B, Hg, K], slice(all.k, Hg * K));
          const vt = dev.upload(dt, [B, H, V], slice(all.v, H * V));
          const gt = dev.upload('f32', [B, H], slice(all.g, H));
          const bt = dev.upload('f32', [B, H], slice(all.beta, H));
          const ot = poisoned(dev, dt, [B, H, V]);
          inputs.push(qt, kt, vt, gt, bt);
          outs.push(ot);
          if (t > 0) enc.barrier();
          gatedDeltaNetDecode(enc, { q: qt, k: kt, v: vt, g: gt, beta: bt, state, output: ot, ...decodeArgs });
        }
      });
      const gotO = new Float64Array(T * H * V);
      outs.forEach((o, t) => gotO.set(o.readNumbers(), t * H * V));
      rows.push([`gated_delta_net_decode ${dt} x${T} o`, errAtScale(gotO, wantO), bound]);
      rows.push([`gated_delta_net_decode ${dt} x${T} final`, errAtScale(swapLast2(state.readNumbers(), bh, V, K), wantS), bound]);
      releaseAll([...outs, ...inputs, state]);
      expectAllUnder(rows);
    });
  }

  // The whole chunked pipeline (bf16 activations, bf16 intermediates w, u,
  // v_new, chunk states; o stored as bf16) against FLA's naive recurrence on
  // the same inputs: o within TOL.bf16 at its scale; the f32 final state
  // with the bf16 bounds of the inter-chunk check (nmse < 1e-4, max error at
  // scale < 2e-2).
  test('gated_delta_rule: chunk_gated_delta_rule against FLA naive_recurrent_gated_delta_rule', () => {
    const dev = device();
    const f = fixture('gated_delta_rule');
    const params = {
      b: f.param('b'), t: f.param('t'), hg: f.param('hg'), h: f.param('h'),
      k: f.param('k'), v: f.param('v'), scale: f.param('scale'),
    };
    const { b: B, t: T, h: H, k: K, v: V } = params;
    const bh = B * H;
    const q = f.upload(dev, 'q');
    const k = f.upload(dev, 'k');
    const v = f.upload(dev, 'v');
    const g = f.upload(dev, 'g');
    const beta = f.upload(dev, 'beta');
    const initialState = dev.upload('f32', [B, H, V, K], swapLast2(f.numbers('h0'), bh, K, V));
    const o = poisoned(dev, 'bf16', [B, T, H, V]);
    const finalState = poisoned(dev, 'f32', [B, H, V, K]);
    run(dev, (enc) => chunkGatedDeltaRule(enc, { q, k, v, g, beta, initialState, o, finalState, ...flat(params) }));
    const gotS = swapLast2(finalState.readNumbers(), bh, V, K);
    const wantS = f.numbers('final_state');
    const rows: [string, number, number][] = [
      ['chunk_gated_delta_rule o', errAtScale(o.readNumbers(), f.numbers('o')), TOL.bf16],
      ['chunk_gated_delta_rule final nmse', nmse(gotS, wantS), 1e-4],
      ['chunk_gated_delta_rule final max err at scale', errAtScale(gotS, wantS), 2e-2],
    ];
    releaseAll([q, k, v, g, beta, initialState, o, finalState]);
    expectAllUnder(rows);
  });
});
