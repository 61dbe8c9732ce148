import { describe, expect, test } from 'bun:test';
import { Device, type Buffer, type DeviceLimits, type DType } from '../ts/index.ts';
import {
  GDR_SCRATCH_SHAPES,
  chunkGatedDeltaRule,
  chunkGatedDeltaRuleLayout,
  chunkGatedDeltaRuleScratch,
  chunkLocalCumsumVarlen,
  chunkTriSolveInvert,
  gatedDeltaNetChunkInterStateVarlen,
  gatedDeltaNetChunkO,
  gatedDeltaNetKkt,
  gatedDeltaNetKktSolveWu,
  gatedDeltaNetRecomputeWu,
  packChunkGatedDeltaRuleParams,
  validateChunkGatedDeltaRule,
  validateChunkTriSolveInvert,
  validateGatedDeltaNetChunkInterStateVarlen,
  planGatedDeltaNetChunkInterStateVarlen,
  GDR_INTER_RING_BYTES,
  GDR_INTER_WG_BYTES,
  GDR_INTER_WG3_BYTES,
  interStateK128Cuda,
  type ChunkGatedDeltaRuleArgs,
  chunkGatedDeltaRuleChunkedRef,
  chunkLocalCumsumVarlenRef,
  chunkORef,
  gatedDeltaRuleRecurrentRef,
  interStateRef,
  kktRef,
  recomputeWuRef,
  refChunks,
  triSolveInvertRef,
  type GdrRecurrentInputs,
  type GdrRefShape,
} from '../ts/ops/chunk_gated_delta_rule.ts';
import {
  TOL, describeBackends, describeValidation, maxRelErr, nmse, rng, type Rng, expectInvalidParts, maxAbs, bf16, randomArray,
} from './helpers.ts';
import { flat, flatName, type CumsumShape, type GdrShape, type SeedShape, type StepShape } from './gdr-args.ts';
import { a, BF, buf, F, int, opContract, out, U32, type Case, type KeySpec } from './op-contract.ts';

interface Shape {
  hg: number;
  h: number;
  k: number;
  v: number;
  /** Cumulative sequence offsets. */
  cu: number[];
}

/** b sequences of t tokens as offsets. */
const even = (b: number, t: number): number[] => Array.from({ length: b + 1 }, (_, i) => i * t);
const refShape = (s: Shape): GdrRefShape => ({ hg: s.hg, h: s.h, k: s.k, v: s.v, cuSeqlens: s.cu });
const nTokOf = (s: Shape): number => s.cu[s.cu.length - 1]!;
const nSeqOf = (s: Shape): number => s.cu.length - 1;

interface GdrData extends GdrRecurrentInputs {
  q: Float64Array;
  k: Float64Array;
  v: Float64Array;
  g: Float64Array;
  beta: Float64Array;
  h0?: Float64Array;
}

interface DataOpts {
  /** Range of the raw log decay per token. */
  g?: [number, number];
  /** Range of beta. */
  beta?: [number, number];
  betaBf16?: boolean;
  h0?: boolean;
}

/**
 * Inputs as a model makes them, already rounded to their storage dtypes (so
 * the references see exactly what the kernels read): q and k L2-normalized per
 * token and K head (bf16), v normal (bf16), g uniform per token (f32), beta
 * uniform (f32, or bf16), an initial state of scale 0.5 (f32).
 */
function makeData(r: Rng, s: Shape, o: DataOpts = {}): GdrData {
  const nTok = nTokOf(s);
  const unit = (): Float64Array => {
    const x = new Float64Array(nTok * s.hg * s.k);
    for (let row = 0; row < nTok * s.hg; row++) {
      let n2 = 0;
      for (let i = 0; i < s.k; i++) {
        const y = r.normal();
        x[row * s.k + i] = y;
        n2 += y * y;
      }
      for (let i = 0; i < s.k; i++) x[row * s.k + i] = bf16(x[row * s.k + i]! / Math.sqrt(n2));
    }
    return x;
  };
  const [glo, ghi] = o.g ?? [-0.5, -0.01];
  const [blo, bhi] = o.beta ?? [0.05, 0.95];
  const d: GdrData = {
    q: unit(),
    k: unit(),
    v: new Float64Array(nTok * s.h * s.v).map(() => bf16(r.normal())),
    g: new Float64Array(nTok * s.h).map(() => Math.fround(r.uniform(glo, ghi))),
    beta: new Float64Array(nTok * s.h).map(() => (o.betaBf16 ? bf16 : Math.fround)(r.uniform(blo, bhi))),
  };
  if (o.h0) d.h0 = new Float64Array(nSeqOf(s) * s.h * s.v * s.k).map(() => Math.fround(0.5 * r.normal()));
  return d;
}

describe('chunk_gated_delta_rule reference', () => {
  test('the chunked steps in float64 equal the token-by-token recurrence', () => {
    const shapes: Shape[] = [
      { hg: 1, h: 2, k: 16, v: 8, cu: even(1, 130) },
      { hg: 2, h: 4, k: 8, v: 8, cu: even(2, 65) },
      { hg: 1, h: 1, k: 8, v: 16, cu: [0, 1, 71, 135] },
    ];
    for (const s of shapes) {
      const d = makeData(rng(3 + s.h), s, { h0: s.h !== 4 });
      const rec = gatedDeltaRuleRecurrentRef(refShape(s), d, 0.3);
      const ch = chunkGatedDeltaRuleChunkedRef(refShape(s), d, 0.3);
      expect(maxRelErr(ch.o, rec.o)).toBeLessThan(1e-9);
      expect(maxRelErr(ch.finalState, rec.finalState)).toBeLessThan(1e-9);
    }
  });

  test('refChunks and the op layout: chunks never straddle sequences', () => {
    expect(refChunks([0, 1, 71, 135]).map((c) => [c.t0, c.len, c.seq])).toEqual([[0, 1, 0], [1, 64, 1], [65, 6, 1], [71, 64, 2]]);
    const l = chunkGatedDeltaRuleLayout(1, 135, [0, 1, 71, 135]);
    expect([l.nTok, l.nSeq, l.nt]).toEqual([135, 3, 4]);
    expect([...l.chunks]).toEqual([0, 1, 1, 64, 65, 6, 71, 64]);
    expect([...l.seqs]).toEqual([0, 0, 1, 1, 71, 3, 135, 4]);
    const e = chunkGatedDeltaRuleLayout(2, 65);
    expect([...e.chunks]).toEqual([0, 64, 64, 1, 65, 64, 129, 1]);
    expect([...e.seqs]).toEqual([0, 0, 65, 2, 130, 4]);
  });

  test('the packer writes struct ChunkGatedDeltaRuleParams', () => {
    const packed = packChunkGatedDeltaRuleParams(flat({ nTok: 135, nt: 4, nSeq: 3, hg: 2, h: 6, k: 128, v: 64, scale: 0.25 }));
    const dv = new DataView(packed.buffer, packed.byteOffset, packed.byteLength);
    expect(packed.byteLength).toBe(32);
    expect([0, 4, 8, 12, 16, 20, 24].map((o) => dv.getUint32(o, true))).toEqual([135, 4, 3, 2, 6, 128, 64]);
    expect(dv.getFloat32(28, true)).toBe(0.25);
    const dflt = packChunkGatedDeltaRuleParams(flat({ nTok: 1, nt: 1, nSeq: 1, hg: 1, h: 1, k: 64, v: 64 }));
    expect(new DataView(dflt.buffer).getFloat32(28, true)).toBe(Math.fround(1 / 8));
  });
});

interface Bufs {
  q: Buffer;
  k: Buffer;
  v: Buffer;
  g: Buffer;
  beta: Buffer;
  h0?: Buffer;
  o: Buffer;
  finalState: Buffer;
}

function upload(dev: Device, s: Shape, d: GdrData, betaDtype: DType = 'f32'): Bufs {
  const nTok = nTokOf(s);
  const state = nSeqOf(s) * s.h * s.v * s.k;
  const b: Bufs = {
    q: dev.upload('bf16', [nTok, s.hg, s.k], d.q),
    k: dev.upload('bf16', [nTok, s.hg, s.k], d.k),
    v: dev.upload('bf16', [nTok, s.h, s.v], d.v),
    g: dev.upload('f32', [nTok, s.h], d.g),
    beta: dev.upload(betaDtype, [nTok, s.h], d.beta),
    o: dev.alloc('bf16', [nTok, s.h, s.v]),
    finalState: dev.alloc('f32', [state]),
  };
  if (d.h0 !== undefined) b.h0 = dev.upload('f32', [state], d.h0);
  b.o.fill(NaN);
  b.finalState.fill(NaN);
  return b;
}

function releaseAll(b: Bufs): void {
  for (const x of Object.values(b)) (x as Buffer | undefined)?.release();
}

function pipelineParams(s: Shape, scale: number, varlen: boolean): GdrShape {
  const nTok = nTokOf(s);
  const p: GdrShape = varlen
    ? { b: 1, t: nTok, hg: s.hg, h: s.h, k: s.k, v: s.v, scale, cuSeqlens: s.cu }
    : { b: nSeqOf(s), t: s.cu[1]!, hg: s.hg, h: s.h, k: s.k, v: s.v, scale };
  return p;
}

function run(dev: Device, b: Bufs, p: GdrShape): { o: Float64Array; state: Float64Array } {
  const enc = dev.encoder();
  const args: ChunkGatedDeltaRuleArgs = { q: b.q, k: b.k, v: b.v, g: b.g, beta: b.beta, o: b.o, finalState: b.finalState, ...flat(p)};
  if (b.h0 !== undefined) args.initialState = b.h0;
  chunkGatedDeltaRule(enc, args);
  enc.commitAndWait();
  enc.release();
  return { o: b.o.readNumbers(), state: b.finalState.readNumbers() };
}

const stepOf = (s: Shape, scale?: number): StepShape => {
  const l = chunkGatedDeltaRuleLayout(1, nTokOf(s), s.cu);
  const p: StepShape = { nTok: l.nTok, nt: l.nt, nSeq: l.nSeq, hg: s.hg, h: s.h, k: s.k, v: s.v };
  if (scale !== undefined) p.scale = scale;
  return p;
};

describeBackends('chunk_gated_delta_rule', ({ device }) => {
  // ---- validation ----

  const okShape: Shape = { hg: 2, h: 4, k: 64, v: 64, cu: even(2, 65) };
  const okParams = (): GdrShape => pipelineParams(okShape, 0.125, false);
  const allocArgs = (dev: Device, over: Partial<Record<keyof Bufs, [DType, number]>> = {}): ChunkGatedDeltaRuleArgs => {
    const s = okShape;
    const n = nTokOf(s);
    const state = nSeqOf(s) * s.h * s.v * s.k;
    const spec: Record<keyof Bufs, [DType, number]> = {
      q: ['bf16', n * s.hg * s.k], k: ['bf16', n * s.hg * s.k], v: ['bf16', n * s.h * s.v], g: ['f32', n * s.h],
      beta: ['f32', n * s.h], h0: ['f32', state], o: ['bf16', n * s.h * s.v], finalState: ['f32', state], ...over,
    };
    const a = (key: keyof Bufs): Buffer => dev.alloc(spec[key][0], [spec[key][1]]);
    return {
      q: a('q'), k: a('k'), v: a('v'), g: a('g'), beta: a('beta'), initialState: a('h0'), o: a('o'), finalState: a('finalState'),
      ...flat(okParams()),
    };
  };
  const releaseArgs = (a: ChunkGatedDeltaRuleArgs): void => {
    for (const b of [a.q, a.k, a.v, a.g, a.beta, a.initialState, a.o, a.finalState]) b?.release();
  };

  test('validation: dims, K, V, GQA, scale, the 32-bit token limit', () => {
    const dev = device();
    const a = allocArgs(dev);
    validateChunkGatedDeltaRule(a);
    const withP = (o: Partial<GdrShape>): ChunkGatedDeltaRuleArgs => ({ ...a, ...flat({ ...okParams(), ...o })});
    for (const arg of ['b', 't', 'hg', 'h', 'k', 'v'] as const) {
      expectInvalidParts(() => validateChunkGatedDeltaRule(withP({ [arg]: 0 })), 'chunk_gated_delta_rule', `${flatName(arg)} must be a positive integer`, '(got 0)');
      expectInvalidParts(() => validateChunkGatedDeltaRule(withP({ [arg]: 1.5 })), 'chunk_gated_delta_rule', `${flatName(arg)} must be a positive integer`, '(got 1.5)');
    }
    expectInvalidParts(() => validateChunkGatedDeltaRule(withP({ h: 2 ** 32 })), 'chunk_gated_delta_rule', 'nHeads must be at most 2^32 - 1');
    expectInvalidParts(() => validateChunkGatedDeltaRule(withP({ b: 2 ** 16, t: 2 ** 16 })), 'chunk_gated_delta_rule', 'batch * seqLen must be at most 2^32 - 1', '(got 4294967296)');
    expectInvalidParts(() => validateChunkGatedDeltaRule(withP({ h: 3 })), 'chunk_gated_delta_rule', 'nHeads must be a multiple of nQkHeads (2)', '(got 3)');
    expectInvalidParts(() => validateChunkGatedDeltaRule(withP({ k: 96 })), 'chunk_gated_delta_rule', 'kDim must be one of 64, 128, 256', '(got 96)');
    expectInvalidParts(() => validateChunkGatedDeltaRule(withP({ k: 512 })), 'chunk_gated_delta_rule', 'kDim must be one of 64, 128, 256', '(got 512)');
    expectInvalidParts(() => validateChunkGatedDeltaRule(withP({ v: 96 })), 'chunk_gated_delta_rule', 'vDim must be a multiple of 64 at most 256', '(got 96)');
    expectInvalidParts(() => validateChunkGatedDeltaRule(withP({ v: 320 })), 'chunk_gated_delta_rule', 'vDim must be a multiple of 64 at most 256', '(got 320)');
    expectInvalidParts(() => validateChunkGatedDeltaRule(withP({ scale: NaN })), 'chunk_gated_delta_rule', 'scale must be a finite number', '(got NaN)');
    releaseArgs(a);
  });

  test('validation: cuSeqlens', () => {
    const dev = device();
    const a = allocArgs(dev);
    const cu = (c: number[], b = 1, t = 130): ChunkGatedDeltaRuleArgs => ({ ...a, ...flat({ ...okParams(), b, t, cuSeqlens: c })});
    validateChunkGatedDeltaRule(cu([0, 70, 130]));
    expectInvalidParts(() => validateChunkGatedDeltaRule(cu([0, 65, 130], 2, 65)), 'chunk_gated_delta_rule', 'batch must be 1 when cuSeqlens is given', '(got 2)');
    expectInvalidParts(() => validateChunkGatedDeltaRule(cu([0])), 'chunk_gated_delta_rule', 'cuSeqlens.length must be at least 2', '(got 1)');
    // The buffers are checked before the offsets (the sequence count, and so the
    // state size, is the length of cuSeqlens): these tables have two sequences.
    expectInvalidParts(() => validateChunkGatedDeltaRule(cu([1, 70, 130])), 'chunk_gated_delta_rule', 'cuSeqlens[0] must be 0', '(got 1)');
    expectInvalidParts(() => validateChunkGatedDeltaRule(cu([0, 130, 130])), 'chunk_gated_delta_rule', 'cuSeqlens[2] must be an integer above cuSeqlens[1] = 130', '(got 130)');
    expectInvalidParts(() => validateChunkGatedDeltaRule(cu([0, 70.5, 130])), 'chunk_gated_delta_rule', 'cuSeqlens[1] must be an integer above cuSeqlens[0] = 0', '(got 70.5)');
    expectInvalidParts(() => validateChunkGatedDeltaRule(cu([0, 70, 129])), 'chunk_gated_delta_rule', 'cuSeqlens[2] must be seqLen = 130', '(got 129)');
    // Three sequences: the states hold 3 of them.
    expectInvalidParts(() => validateChunkGatedDeltaRule(cu([0, 1, 71, 130])), 'chunk_gated_delta_rule', 'finalState.elementCount must be 49152');
    releaseArgs(a);
  });

  test('validation: dtype and element count of every buffer; beta f32 or bf16', () => {
    const dev = device();
    const keys: (keyof Bufs)[] = ['q', 'k', 'v', 'g', 'beta', 'h0', 'o', 'finalState'];
    const names: Record<keyof Bufs, string> = {
      q: 'q', k: 'k', v: 'v', g: 'g', beta: 'beta', h0: 'initialState', o: 'o', finalState: 'finalState',
    };
    const good = allocArgs(dev);
    const bf = allocArgs(dev, { beta: ['bf16', good.beta.elementCount] });
    validateChunkGatedDeltaRule(bf);
    const noH0 = { ...good };
    delete noH0.initialState;
    validateChunkGatedDeltaRule(noH0);
    releaseArgs(bf);
    for (const key of keys) {
      const right: Buffer = key === 'h0' ? good.initialState! : good[key];
      const wrong: DType = right.dtype === 'f32' ? (key === 'beta' ? 'f16' : 'bf16') : 'f32';
      const expectDtype = key === 'beta' ? 'one of f32, bf16' : right.dtype;
      const bad1 = allocArgs(dev, { [key]: [wrong, right.elementCount] });
      expectInvalidParts(() => validateChunkGatedDeltaRule(bad1), 'chunk_gated_delta_rule', `${names[key]}.dtype must be ${expectDtype}`, `(got ${wrong})`);
      releaseArgs(bad1);
      const bad2 = allocArgs(dev, { [key]: [right.dtype, right.elementCount + 1] });
      expectInvalidParts(() => validateChunkGatedDeltaRule(bad2), 'chunk_gated_delta_rule', `${names[key]}.elementCount must be ${right.elementCount}`);
      releaseArgs(bad2);
    }
    const enc = dev.encoder();
    expectInvalidParts(() => chunkGatedDeltaRule(enc, { ...good, ...flat({ ...okParams(), k: 32 })}), 'chunk_gated_delta_rule', 'kDim must be one of 64, 128, 256');
    enc.release();
    releaseArgs(good);
  });

  test('validation: step ops (nt and nSeq ranges, tables, buffers)', () => {
    const dev = device();
    const p = stepOf(okShape);
    const n = p.nTok * p.h * 64;
    const a = dev.alloc('f32', [n]);
    const chunks = dev.alloc('u32', [p.nt, 2]);
    validateChunkTriSolveInvert({ a, ai: a, chunks, ...flat(p)});
    expectInvalidParts(() => validateChunkTriSolveInvert({ a, ai: a, chunks, ...flat({ ...p, nt: 2 })}), 'chunk_gated_delta_rule', 'nt must be between ceil(nTok / 64) and nTok = 130', '(got 2)');
    expectInvalidParts(() => validateChunkTriSolveInvert({ a, ai: a, chunks, ...flat({ ...p, nt: 131 })}), 'chunk_gated_delta_rule', 'nt must be between');
    expectInvalidParts(() => validateChunkTriSolveInvert({ a, ai: a, chunks, ...flat({ ...p, nSeq: 5 })}), 'chunk_gated_delta_rule', 'nSeq must be at most nt = 4', '(got 5)');
    expectInvalidParts(() => validateChunkTriSolveInvert({ a, ai: a, chunks, ...flat({ ...p, nTok: 0 })}), 'chunk_gated_delta_rule', 'nTok must be a positive integer');
    expectInvalidParts(() => validateChunkTriSolveInvert({ a, ai: a, chunks, ...flat({ ...p, nTok: 2 ** 40, nt: 2 ** 34 })}), 'chunk_gated_delta_rule', 'nTok must be at most 2^32 - 1');
    expectInvalidParts(() => validateChunkTriSolveInvert({ a, ai: a, chunks: a, ...flat(p)}), 'chunk_gated_delta_rule', 'chunks.dtype must be u32', '(got f32)');
    const short = dev.alloc('u32', [p.nt]);
    expectInvalidParts(() => validateChunkTriSolveInvert({ a, ai: a, chunks: short, ...flat(p)}), 'chunk_gated_delta_rule', `chunks.elementCount must be ${2 * p.nt}`);
    const bfA = dev.alloc('bf16', [n]);
    expectInvalidParts(() => validateChunkTriSolveInvert({ a: bfA, ai: a, chunks, ...flat(p)}), 'chunk_gated_delta_rule', 'a.dtype must be f32', '(got bf16)');
    // The inter-state step checks its sequence table.
    const s = (d: DType, c: number): Buffer => dev.alloc(d, [c]);
    const st = p.nSeq * p.h * p.v * p.k;
    const args = {
      k: s('bf16', p.nTok * p.hg * p.k), w: s('bf16', p.nTok * p.h * p.k), u: s('bf16', p.nTok * p.h * p.v), g: s('f32', p.nTok * p.h),
      h0: s('f32', st), hOut: s('bf16', p.nt * p.h * p.v * p.k), vNew: s('bf16', p.nTok * p.h * p.v), finalState: s('f32', st),
      seqs: s('u32', 2 * (p.nSeq + 1)), ...flat(p),
    };
    validateGatedDeltaNetChunkInterStateVarlen(args);
    expectInvalidParts(() => validateGatedDeltaNetChunkInterStateVarlen({ ...args, seqs: chunks }), 'chunk_gated_delta_rule', `seqs.elementCount must be ${2 * (p.nSeq + 1)}`);
    expectInvalidParts(() => validateGatedDeltaNetChunkInterStateVarlen({ ...args, hOut: args.vNew }), 'chunk_gated_delta_rule', `hOut.elementCount must be ${p.nt * p.h * p.v * p.k}`);
    for (const b of [a, chunks, short, bfA, ...Object.values(args).filter((x): x is Buffer => typeof x === 'object' && 'release' in x)]) b.release();
  });

  // ---- steps ----
  // Each step runs on inputs as stored (bf16 / f32) and is compared with its
  // float64 reference on those same inputs.

  test('step: varlen cumsum (f32, exact sums of up to 64 terms)', () => {
    const dev = device();
    const s: Shape = { hg: 1, h: 3, k: 64, v: 64, cu: [0, 1, 71, 135] };
    const d = makeData(rng(11), s);
    const p = stepOf(s);
    const l = chunkGatedDeltaRuleLayout(1, p.nTok, s.cu);
    const gIn = dev.upload('f32', [p.nTok, p.h], d.g);
    const gCum = dev.alloc('f32', [p.nTok, p.h]);
    gCum.fill(NaN);
    const chunks = dev.upload('u32', [p.nt, 2], l.chunks);
    const enc = dev.encoder();
    chunkLocalCumsumVarlen(enc, { gIn, gCum, chunks, ...flat(p)});
    enc.commitAndWait();
    enc.release();
    const want = chunkLocalCumsumVarlenRef(s.cu, s.h, d.g);
    const err = maxRelErr(gCum.readNumbers(), want);
    console.log(`cumsum varlen: max rel err ${err.toExponential(2)}`);
    // f32 sums of at most 64 terms of one sign: under 64 f32 ulps relative.
    expect(err).toBeLessThan(64 * 2 ** -24);
    for (const b of [gIn, gCum, chunks]) b.release();
  });

  // kkt, tri-solve and w/u together on one tail-heavy varlen layout: each step
  // is fed the stored output of the one before and compared to its reference
  // on that input.
  for (const { name, s, betaDtype } of [
    { name: 'K = 64, H = 4, Hg = 2, varlen [1, 70, 64]', s: { hg: 2, h: 4, k: 64, v: 64, cu: [0, 1, 71, 135] }, betaDtype: 'f32' as DType },
    { name: 'K = 256, V = 128, H = Hg = 1, T = 65, beta bf16', s: { hg: 1, h: 1, k: 256, v: 128, cu: even(1, 65) }, betaDtype: 'bf16' as DType },
  ]) {
    test(`steps kkt, tri-solve, w/u: ${name}`, () => {
      const dev = device();
      const d = makeData(rng(21 + s.k), s, { betaBf16: betaDtype === 'bf16' });
      const p = stepOf(s);
      const l = chunkGatedDeltaRuleLayout(1, p.nTok, s.cu);
      const gc = chunkLocalCumsumVarlenRef(s.cu, s.h, d.g).map(Math.fround);
      const k = dev.upload('bf16', [p.nTok, p.hg, p.k], d.k);
      const v = dev.upload('bf16', [p.nTok, p.h, p.v], d.v);
      const g = dev.upload('f32', [p.nTok, p.h], gc);
      const beta = dev.upload(betaDtype, [p.nTok, p.h], d.beta);
      const chunks = dev.upload('u32', [p.nt, 2], l.chunks);
      const a = dev.alloc('f32', [p.nTok, p.h, 64]);
      const ai = dev.alloc('f32', [p.nTok, p.h, 64]);
      const w = dev.alloc('bf16', [p.nTok, p.h, p.k]);
      const u = dev.alloc('bf16', [p.nTok, p.h, p.v]);
      for (const b of [a, ai, w, u]) b.fill(NaN);
      const rs = refShape(s);

      let enc = dev.encoder();
      gatedDeltaNetKkt(enc, { k, g, beta, a, chunks, ...flat(p)});
      enc.commitAndWait();
      enc.release();
      const aGot = a.readNumbers();
      const aWant = kktRef(rs, d.k, gc, d.beta);
      // f32 dot products of bf16 values (exact products, f32 sums of up to 256
      // terms) and an f32 exp: a few f32 ulps of A's scale (max |A|).
      const errA = maxRelErr(aGot, aWant, maxAbs(aWant));
      expect(errA).toBeLessThan(1e-5);

      enc = dev.encoder();
      chunkTriSolveInvert(enc, { a, ai, chunks, ...flat(p)});
      enc.commitAndWait();
      enc.release();
      const aiGot = ai.readNumbers();
      const aiWant = triSolveInvertRef(s.cu, s.h, aGot);
      // Forward substitution in f32 over up to 63 terms, measured against the
      // inverse's scale (max |Ai|).
      const errAi = maxRelErr(aiGot, aiWant, maxAbs(aiWant));
      expect(errAi).toBeLessThan(1e-5);

      enc = dev.encoder();
      gatedDeltaNetRecomputeWu(enc, { k, v, beta, g, ai, w, u, chunks, ...flat(p)});
      enc.commitAndWait();
      enc.release();
      const wu = recomputeWuRef(rs, d.k, d.v, d.beta, gc, aiGot);
      // f32 products, one bf16 rounding at the store: a boundary flip from f32
      // summation order is one bf16 ulp, 2^-7 relative at most.
      const errW = maxRelErr(w.readNumbers(), wu.w);
      const errU = maxRelErr(u.readNumbers(), wu.u);
      console.log(`steps ${name}: A ${errA.toExponential(2)}, Ai ${errAi.toExponential(2)}, w ${errW.toExponential(2)}, u ${errU.toExponential(2)}`);
      expect(errW).toBeLessThan(TOL.bf16);
      expect(errU).toBeLessThan(TOL.bf16);
      // The in-place form (a and ai one buffer) gives the same inverse.
      enc = dev.encoder();
      chunkTriSolveInvert(enc, { a, ai: a, chunks, ...flat(p)});
      enc.commitAndWait();
      enc.release();
      expect([...a.readNumbers()]).toEqual([...aiGot]);

      // The three steps in one kernel, against the float64 chain on the
      // stored inputs (A and its inverse exact) and against the steps' w, u.
      const w2 = dev.alloc('bf16', [p.nTok, p.h, p.k]);
      const u2 = dev.alloc('bf16', [p.nTok, p.h, p.v]);
      for (const b of [w2, u2]) b.fill(NaN);
      enc = dev.encoder();
      gatedDeltaNetKktSolveWu(enc, { k, v, beta, g, w: w2, u: u2, chunks, ...flat(p)});
      enc.commitAndWait();
      enc.release();
      const exact = recomputeWuRef(rs, d.k, d.v, d.beta, gc, triSolveInvertRef(s.cu, s.h, aWant));
      const w2Got = w2.readNumbers(), u2Got = u2.readNumbers();
      // One bf16 rounding of a result within ~1e-5 of exact: half a bf16 ulp,
      // under 2^-8 of the output's scale; against the steps, whose f32 result
      // differs in the last bits, a rounding may land one ulp apart: 2^-7 of
      // the scale at most. On the emulator the Metal kernel runs the steps'
      // code and order, so there the two are equal.
      const errW2 = maxRelErr(w2Got, exact.w, maxAbs(exact.w));
      const errU2 = maxRelErr(u2Got, exact.u, maxAbs(exact.u));
      const stepsW = maxRelErr(w2Got, w.readNumbers(), maxAbs(exact.w));
      const stepsU = maxRelErr(u2Got, u.readNumbers(), maxAbs(exact.u));
      console.log(`fused kkt/solve/w/u ${name}: w ${errW2.toExponential(2)}, u ${errU2.toExponential(2)}; against the steps w ${stepsW.toExponential(2)}, u ${stepsU.toExponential(2)}`);
      expect(errW2).toBeLessThan(2 ** -8 + 1e-4);
      expect(errU2).toBeLessThan(2 ** -8 + 1e-4);
      expect(stepsW).toBeLessThan(2 ** -7 + 1e-4);
      expect(stepsU).toBeLessThan(2 ** -7 + 1e-4);
      for (const b of [k, v, g, beta, chunks, a, ai, w, u, w2, u2]) b.release();
    });
  }

  for (const { name, s } of [
    { name: 'K = 64, V = 64, varlen [1, 70, 64], H = 2, Hg = 1', s: { hg: 1, h: 2, k: 64, v: 64, cu: [0, 1, 71, 135] } },
    { name: 'K = 128, V = 128, T = 130 (tail of 2)', s: { hg: 1, h: 1, k: 128, v: 128, cu: even(1, 130) } },
    { name: 'K = 256, V = 64, two sequences of 63', s: { hg: 1, h: 1, k: 256, v: 64, cu: even(2, 63) } },
  ]) {
    test(`steps inter-state and chunk_o: ${name}`, () => {
      const dev = device();
      const r = rng(31 + s.k + s.v);
      const d = makeData(r, s, { h0: true });
      const p = stepOf(s, 0.2);
      const l = chunkGatedDeltaRuleLayout(1, p.nTok, s.cu);
      const rs = refShape(s);
      const gc = chunkLocalCumsumVarlenRef(s.cu, s.h, d.g).map(Math.fround);
      // w and u of the scale the WY step makes: bf16, magnitudes like beta k and beta v.
      const wIn = new Float64Array(p.nTok * p.h * p.k).map(() => bf16(0.1 * r.normal()));
      const uIn = new Float64Array(p.nTok * p.h * p.v).map(() => bf16(0.5 * r.normal()));
      const k = dev.upload('bf16', [p.nTok, p.hg, p.k], d.k);
      const q = dev.upload('bf16', [p.nTok, p.hg, p.k], d.q);
      const w = dev.upload('bf16', [p.nTok, p.h, p.k], wIn);
      const u = dev.upload('bf16', [p.nTok, p.h, p.v], uIn);
      const g = dev.upload('f32', [p.nTok, p.h], gc);
      const h0 = dev.upload('f32', [p.nSeq, p.h, p.v, p.k], d.h0!);
      const seqs = dev.upload('u32', [p.nSeq + 1, 2], l.seqs);
      const chunks = dev.upload('u32', [p.nt, 2], l.chunks);
      const hOut = dev.alloc('bf16', [p.nt, p.h, p.v, p.k]);
      const vNew = dev.alloc('bf16', [p.nTok, p.h, p.v]);
      const fin = dev.alloc('f32', [p.nSeq, p.h, p.v, p.k]);
      const o = dev.alloc('bf16', [p.nTok, p.h, p.v]);
      for (const b of [hOut, vNew, fin, o]) b.fill(NaN);
      const enc = dev.encoder();
      gatedDeltaNetChunkInterStateVarlen(enc, { k, w, u, g, h0, hOut, vNew, finalState: fin, seqs, ...flat(p)});
      enc.barrier();
      gatedDeltaNetChunkO(enc, { q, k, vNew, h: hOut, g, o, chunks, ...flat(p)});
      enc.commitAndWait();
      enc.release();

      const ref = interStateRef(rs, { k: d.k, w: wIn, u: uIn, g: gc, h0: d.h0! }, { mirrorBf16: true });
      const errH = maxRelErr(hOut.readNumbers(), ref.hOut);
      const errV = maxRelErr(vNew.readNumbers(), ref.vNew);
      const st = fin.readNumbers();
      const errS = maxRelErr(st, ref.finalState, maxAbs(ref.finalState));
      // chunk_o on the kernel's own v_new and states (bf16 as stored).
      const oWant = chunkORef(rs, { q: d.q, k: d.k, vNew: vNew.readNumbers(), h: hOut.readNumbers(), g: gc }, 0.2, { mirrorBf16: true });
      const oGot = o.readNumbers();
      const errO = maxRelErr(oGot, oWant);
      console.log(
        `inter-state + chunk_o ${name}: h ${errH.toExponential(2)}, v_new ${errV.toExponential(2)}, ` +
          `final_state ${errS.toExponential(2)} (of max), o ${errO.toExponential(2)}, o nmse ${nmse(oGot, oWant).toExponential(2)}`,
      );
      // h and v_new are bf16, rounded at the same points as the mirroring
      // reference: one bf16 ulp where f32 summation order crosses a rounding
      // boundary. final_state is f32 over such bf16 terms: measured against its
      // largest value (a flip is an absolute error of one term's ulp).
      expect(errH).toBeLessThan(TOL.bf16);
      expect(errV).toBeLessThan(TOL.bf16);
      expect(errS).toBeLessThan(1e-3);
      // o: bf16 store of a sum whose gated scores are bf16 in both; a score
      // that rounds the other way moves o by one score ulp times v_new.
      expect(errO).toBeLessThan(TOL.bf16);
      for (const b of [k, q, w, u, g, h0, seqs, chunks, hOut, vNew, fin, o]) b.release();
    });
  }

  // ---- the whole forward against the token-by-token recurrence ----
  // Error budget: the pipeline stores w, u, v_new, the chunk-start states and
  // the gated scores in bf16 (relative 2^-9 each) and o in bf16; the reference
  // is exact float64 on the same stored inputs. Measured on these cases: o
  // within 6.4e-3 of its scale elementwise (max |error| / max |o|), NMSE at
  // most 1.8e-5; the f32 final state within 4.3e-3 of its scale, NMSE at most
  // 1.7e-5. Bounds: 2e-2 and NMSE 1e-4 for o, 1e-2 and NMSE 1e-4 for the
  // state. Dropping the diagonal of the causal mask gives an o NMSE of 3e-3 at
  // T = 1 and 0.2 at T = 64; a chunk length off by one gives state errors of 1.

  interface Case {
    name: string;
    s: Shape;
    varlen?: boolean;
    data?: DataOpts;
    betaDtype?: DType;
  }
  const cases: Case[] = [
    { name: 'T = 1, K = V = 64', s: { hg: 1, h: 1, k: 64, v: 64, cu: even(1, 1) }, data: { h0: true } },
    { name: 'T = 63, K = 64, V = 128, H = 2, Hg = 1', s: { hg: 1, h: 2, k: 64, v: 128, cu: even(1, 63) } },
    { name: 'T = 64, K = V = 128 (the K = 128 inter-state kernel), B = 2, initial state', s: { hg: 1, h: 1, k: 128, v: 128, cu: even(2, 64) }, data: { h0: true } },
    { name: 'T = 65, K = 128, V = 64, H = 4, Hg = 1', s: { hg: 1, h: 4, k: 128, v: 64, cu: even(1, 65) }, data: { h0: true } },
    { name: 'T = 130, K = 64, V = 256, H = Hg = 2', s: { hg: 2, h: 2, k: 64, v: 256, cu: even(1, 130) } },
    { name: 'T = 130, K = 256, V = 128, initial state, beta bf16', s: { hg: 1, h: 1, k: 256, v: 128, cu: even(1, 130) }, data: { h0: true, betaBf16: true }, betaDtype: 'bf16' },
    { name: 'T = 192, K = 128, V = 64, H = 4, Hg = 2 (K = 128 kernel, 3 chunks)', s: { hg: 2, h: 4, k: 128, v: 64, cu: even(1, 192) }, data: { h0: true } },
    { name: 'varlen [1, 70, 64], K = 128, V = 64, H = 2, Hg = 1, initial state', s: { hg: 1, h: 2, k: 128, v: 64, cu: [0, 1, 71, 135] }, varlen: true, data: { h0: true } },
    { name: 'varlen [1, 70, 64], K = 64, V = 128, no initial state', s: { hg: 1, h: 1, k: 64, v: 128, cu: [0, 1, 71, 135] }, varlen: true },
    { name: 'adversarial: g near 0, beta near 1', s: { hg: 1, h: 2, k: 64, v: 64, cu: even(1, 130) }, data: { g: [-1e-4, 0], beta: [0.98, 1], h0: true } },
    { name: 'adversarial: g near -20 (state forgotten every token)', s: { hg: 1, h: 1, k: 64, v: 64, cu: even(1, 70) }, data: { g: [-20, -19], h0: true } },
    { name: 'adversarial: mixed g in (-20, 0), beta in (0, 1)', s: { hg: 1, h: 2, k: 128, v: 64, cu: [0, 5, 69, 130] }, varlen: true, data: { g: [-20, 0], beta: [0, 1] } },
  ];
  for (const c of cases) {
    test(`pipeline vs recurrence: ${c.name}`, () => {
      const dev = device();
      const d = makeData(rng(101 + c.s.k + c.s.v + nTokOf(c.s)), c.s, c.data);
      const scale = 1 / Math.sqrt(c.s.k);
      const b = upload(dev, c.s, d, c.betaDtype);
      const got = run(dev, b, pipelineParams(c.s, scale, c.varlen ?? false));
      const want = gatedDeltaRuleRecurrentRef(refShape(c.s), d, scale);
      const errO = maxRelErr(got.o, want.o, maxAbs(want.o));
      const nO = nmse(got.o, want.o);
      const errS = maxRelErr(got.state, want.finalState, maxAbs(want.finalState));
      const nS = nmse(got.state, want.finalState);
      console.log(
        `pipeline ${c.name}: o max err / max |o| ${errO.toExponential(2)}, nmse ${nO.toExponential(2)}; ` +
          `state ${errS.toExponential(2)}, nmse ${nS.toExponential(2)}`,
      );
      expect(errO).toBeLessThan(2e-2);
      expect(nO).toBeLessThan(1e-4);
      expect(errS).toBeLessThan(1e-2);
      expect(nS).toBeLessThan(1e-4);
      releaseAll(b);
    });
  }

  test('prefill then decode: the final state continues the recurrence', () => {
    const dev = device();
    const s: Shape = { hg: 1, h: 2, k: 64, v: 64, cu: even(1, 72) };
    const d = makeData(rng(5), s, { h0: true });
    const scale = 0.125;
    const whole = gatedDeltaRuleRecurrentRef(refShape(s), d, scale);
    // Prefill tokens 0..69, then two one-token steps from the state each leaves.
    const part = (t0: number, t1: number): GdrData => {
      const sl = (x: Float64Array, w: number): Float64Array => x.slice(t0 * w, t1 * w);
      return { q: sl(d.q, s.hg * s.k), k: sl(d.k, s.hg * s.k), v: sl(d.v, s.h * s.v), g: sl(d.g, s.h), beta: sl(d.beta, s.h) };
    };
    let state = d.h0!;
    const o: number[] = [];
    for (const [t0, t1] of [[0, 70], [70, 71], [71, 72]] as const) {
      const ps: Shape = { ...s, cu: even(1, t1 - t0) };
      const b = upload(dev, ps, { ...part(t0, t1), h0: Float64Array.from(state) });
      const got = run(dev, b, pipelineParams(ps, scale, false));
      o.push(...got.o);
      state = got.state;
      releaseAll(b);
    }
    const errO = maxRelErr(o, whole.o, maxAbs(whole.o));
    const errS = maxRelErr(state, whole.finalState, maxAbs(whole.finalState));
    console.log(`prefill + 2 decode steps: o ${errO.toExponential(2)}, state ${errS.toExponential(2)}`);
    expect(errO).toBeLessThan(2e-2);
    expect(errS).toBeLessThan(1e-2);
  });

  test('two calls of one shape in one encoder share the scratch and both match', () => {
    const dev = device();
    const s: Shape = { hg: 1, h: 2, k: 64, v: 64, cu: [0, 1, 71, 135] };
    const d1 = makeData(rng(41), s);
    const d2 = makeData(rng(42), s, { h0: true });
    const b1 = upload(dev, s, d1);
    const b2 = upload(dev, s, d2);
    const p = pipelineParams(s, 0.125, true);
    const enc = dev.encoder();
    chunkGatedDeltaRule(enc, { q: b1.q, k: b1.k, v: b1.v, g: b1.g, beta: b1.beta, o: b1.o, finalState: b1.finalState, ...flat(p)});
    chunkGatedDeltaRule(enc, {
      q: b2.q, k: b2.k, v: b2.v, g: b2.g, beta: b2.beta, initialState: b2.h0!, o: b2.o, finalState: b2.finalState, ...flat(p),
    });
    enc.commitAndWait();
    enc.release();
    for (const [b, d] of [[b1, d1], [b2, d2]] as const) {
      const want = gatedDeltaRuleRecurrentRef(refShape(s), d, 0.125);
      expect(nmse(b.o.readNumbers(), want.o)).toBeLessThan(1e-4);
      expect(nmse(b.finalState.readNumbers(), want.finalState)).toBeLessThan(1e-4);
    }
    releaseAll(b1);
    releaseAll(b2);
  });

  // Issue 9: the scratch of a sixth shape evicted (released) the entries that
  // the first calls, recorded in the same encoder, still used.
  test('more shapes than the scratch keeps, in one encoder: every call matches', async () => {
    const dev = device();
    chunkGatedDeltaRuleScratch(dev).dispose();
    const calls = Array.from({ length: GDR_SCRATCH_SHAPES + 2 }, (_, i) => {
      const s: Shape = { hg: 1, h: 2, k: 64, v: 64, cu: even(1, 20 + 13 * i) };
      const d = makeData(rng(300 + i), s);
      return { s, d, b: upload(dev, s, d) };
    });
    using enc = dev.encoder();
    for (const { s, b } of calls) {
      chunkGatedDeltaRule(enc, { q: b.q, k: b.k, v: b.v, g: b.g, beta: b.beta, o: b.o, finalState: b.finalState, ...flat(pipelineParams(s, 0.125, false))});
    }
    Bun.gc(true);
    // Memory freed by the eviction would be handed out again here.
    const churn = Array.from({ length: 16 }, () => dev.upload('f32', [4096], new Float64Array(4096).fill(1e30)));
    await enc.commit();
    for (const c of churn) c.release();
    for (const { s, d, b } of calls) {
      const want = gatedDeltaRuleRecurrentRef(refShape(s), d, 0.125);
      expect(nmse(b.o.readNumbers(), want.o)).toBeLessThan(1e-4);
      expect(nmse(b.finalState.readNumbers(), want.finalState)).toBeLessThan(1e-4);
      releaseAll(b);
    }
  });

  // Two encoders recording the same shape before either commits: their
  // commits may run at once, so they must not share scratch.
  test('two encoders, one shape, both recorded before either commits: both match', async () => {
    const dev = device();
    const s: Shape = { hg: 1, h: 2, k: 64, v: 64, cu: even(1, 70) };
    const runs = [0, 1].map((i) => {
      const d = makeData(rng(400 + i), s);
      return { d, b: upload(dev, s, d), enc: dev.encoder() };
    });
    for (const { b, enc } of runs) {
      chunkGatedDeltaRule(enc, { q: b.q, k: b.k, v: b.v, g: b.g, beta: b.beta, o: b.o, finalState: b.finalState, ...flat(pipelineParams(s, 0.125, false))});
    }
    await Promise.all(runs.map((r) => r.enc.commit()));
    for (const { d, b, enc } of runs) {
      const want = gatedDeltaRuleRecurrentRef(refShape(s), d, 0.125);
      expect(nmse(b.o.readNumbers(), want.o)).toBeLessThan(1e-4);
      expect(nmse(b.finalState.readNumbers(), want.finalState)).toBeLessThan(1e-4);
      releaseAll(b);
      enc.release();
    }
  });

  // Issue 9: an op that throws halfway left its first dispatches recorded.
  test('a call refused at its last dispatch records nothing', () => {
    const dev = device();
    const s: Shape = { hg: 1, h: 1, k: 64, v: 64, cu: even(1, 70) };
    const b = upload(dev, s, makeData(rng(500), s));
    b.o.fill(Number.NaN);
    b.finalState.fill(Number.NaN);
    using enc = dev.encoder();
    // A pipeline of chunk_o that a backend-side limit refuses would do the
    // same; a dispatch refused on the TypeScript side is enough to show it.
    const real = enc.dispatch.bind(enc);
    let n = 0;
    enc.dispatch = (p, bindings, grid, threads) => {
      if (++n === 4) throw new Error('refused at the fourth dispatch');
      real(p, bindings, grid, threads);
    };
    expect(() => chunkGatedDeltaRule(enc, { q: b.q, k: b.k, v: b.v, g: b.g, beta: b.beta, o: b.o, finalState: b.finalState, ...flat(pipelineParams(s, 0.125, false))})).toThrow('fourth');
    expect(n).toBe(4);
    enc.commitAndWait();
    expect(b.o.readNumbers().every(Number.isNaN)).toBe(true);
    expect(b.finalState.readNumbers().every(Number.isNaN)).toBe(true);
    releaseAll(b);
  });

  test('scratch: kept per shape (least recently used released past the limit), dispose releases it', () => {
    const dev = device();
    const scratch = chunkGatedDeltaRuleScratch(dev);
    scratch.dispose();
    expect(scratch.shapes).toBe(0);
    const s: Shape = { hg: 1, h: 1, k: 64, v: 64, cu: even(1, 3) };
    for (let t = 1; t <= GDR_SCRATCH_SHAPES + 2; t++) {
      const ps: Shape = { ...s, cu: even(1, t) };
      const b = upload(dev, ps, makeData(rng(t), ps));
      run(dev, b, pipelineParams(ps, 0.125, false));
      // The same shape again reuses its entry.
      run(dev, b, pipelineParams(ps, 0.125, false));
      releaseAll(b);
      expect(scratch.shapes).toBe(Math.min(t, GDR_SCRATCH_SHAPES));
    }
    expect(scratch.byteLength).toBeGreaterThan(0);
    expect(chunkGatedDeltaRuleScratch(dev)).toBe(scratch);
    scratch.dispose();
    expect(scratch.shapes).toBe(0);
    expect(scratch.byteLength).toBe(0);
  });
});

// ---- refusals cost O(1) in what they refuse; tables that index memory are bounded ----

describeValidation('chunk_gated_delta_rule: refusal costs', ({ enc, buf }) => {
  const small = (b: number, t: number, cuSeqlens?: ArrayLike<number>): ChunkGatedDeltaRuleArgs => {
    const params: GdrShape = { b, t, hg: 1, h: 1, k: 64, v: 64 };
    if (cuSeqlens !== undefined) params.cuSeqlens = cuSeqlens;
    return {
      q: buf('bf16', 64), k: buf('bf16', 64), v: buf('bf16', 64), g: buf('f32', 1), beta: buf('f32', 1),
      o: buf('bf16', 64), finalState: buf('f32', 4096), ...flat(params),
    };
  };
  /** Runs fn (expected to throw), returning its wall time and the growth of the resident set. */
  const cost = (fn: () => void): { ms: number; bytes: number } => {
    Bun.gc(true);
    const rss0 = process.memoryUsage().rss;
    const t0 = performance.now();
    expectInvalidParts(fn, 'chunk_gated_delta_rule', 'q.elementCount must be');
    const ms = performance.now() - t0;
    return { ms, bytes: process.memoryUsage().rss - rss0 };
  };

  test('b = 2^24 and b = 2^31 with one token of buffers refuse in under 50 ms, without memory proportional to b', () => {
    // The buffers and the encoder are made before the clock starts (allocation
    // on a GPU takes milliseconds of its own).
    const e = enc();
    for (const b of [2 ** 24, 2 ** 31]) {
      const args = small(b, 1);
      const c = cost(() => chunkGatedDeltaRule(e, args));
      expect(c.ms).toBeLessThan(50);
      expect(c.bytes).toBeLessThan(32 * 2 ** 20);
    }
    // t tokens in one sequence: the chunk tables would be t / 64 entries.
    const args = small(1, 2 ** 32 - 1);
    const c = cost(() => chunkGatedDeltaRule(e, args));
    expect(c.ms).toBeLessThan(50);
  });

  test('cuSeqlens longer than seqLen + 1 is refused by its length alone, before its contents', () => {
    const huge = { length: 2 ** 31 } as ArrayLike<number>;
    const e = enc();
    const args = small(1, 64, huge);
    const t0 = performance.now();
    expectInvalidParts(() => chunkGatedDeltaRule(e, args), 'chunk_gated_delta_rule',
      'cuSeqlens.length must be at most seqLen + 1 = 65', `(got ${2 ** 31})`);
    expect(performance.now() - t0).toBeLessThan(50);
    expectInvalidParts(() => chunkGatedDeltaRule(enc(), small(1, 64, null as unknown as number[])), 'chunk_gated_delta_rule',
      'cuSeqlens must be an array of offsets', '(got null)');
  });
});

describeValidation('chunk_gated_delta_rule: buffers and aliasing', ({ device, enc, buf }) => {
  const p: StepShape = { nTok: 64, nt: 1, nSeq: 1, hg: 1, h: 1, k: 64, v: 64 };
  const interArgs = () => ({
    k: buf('bf16', 4096), w: buf('bf16', 4096), u: buf('bf16', 4096), g: buf('f32', 64), h0: buf('f32', 4096),
    hOut: buf('bf16', 4096), vNew: buf('bf16', 4096), finalState: buf('f32', 4096), seqs: buf('u32', 4), ...flat(p),
  });

  // Limits of an A100 (mma.sync) and of an H200 (wgmma, 227 KiB of shared memory a block, 132 SMs).
  const a100 = (l: DeviceLimits): DeviceLimits => ({ ...l, computeCapability: 80, maxThreadgroupMemory: 166912, multiprocessors: 108 });
  const h200 = (l: DeviceLimits): DeviceLimits => ({ ...l, computeCapability: 90, maxThreadgroupMemory: 232448, multiprocessors: 132 });

  test('the state walk launches V / 32 (K 256: V / 16) blocks of 128 threads, on CUDA at K 128 8 warps and the ring of shared memory (compute capability 9.0: warpgroup products, three slots where the grid has at most a block an SM)', () => {
    for (const k of [64, 128, 256]) {
      const s: StepShape = { nTok: 128, nt: 2, nSeq: 2, hg: 2, h: 4, k, v: 64 };
      const a = {
        k: buf('bf16', 128 * 2 * k), w: buf('bf16', 128 * 4 * k), u: buf('bf16', 128 * 4 * 64), g: buf('f32', 128 * 4),
        h0: buf('f32', 2 * 4 * 64 * k), hOut: buf('bf16', 2 * 4 * 64 * k), vNew: buf('bf16', 128 * 4 * 64),
        finalState: buf('f32', 2 * 4 * 64 * k), seqs: buf('u32', 6), ...flat(s),
      };
      const dev = device();
      for (const [limits, cuda] of [
        [a100(dev.limits), { grid: [2, 4, 2], threads: [256, 1, 1], threadgroupMemory: { 0: GDR_INTER_RING_BYTES } }],
        [h200(dev.limits), {
          grid: [2, 4, 2], threads: [256, 1, 1], threadgroupMemory: { 0: GDR_INTER_WG3_BYTES }, entry: 'gated_delta_net_chunk_inter_state_k128_wg_bf16',
        }],
      ] as const) {
        const [d] = planGatedDeltaNetChunkInterStateVarlen(a, limits, dev).dispatches;
        expect(d!.kernel).toBe(`gated_delta_net_chunk_inter_state_k${k}_bf16`);
        expect(d!.threads).toEqual([128, 1, 1]);
        expect(d!.grid).toEqual([k === 256 ? 4 : 2, 4, 2]);
        expect(d!.cuda).toEqual(k === 128 ? cuda : undefined);
      }
    }
    // InterRing<128, 32, 2>: two slots of k and w rows [64][136] and u rows [64][40] bf16, g [64] f32.
    expect(GDR_INTER_RING_BYTES).toBe(80384);
    // InterRingWg: the same rows with w's unpadded, each slot in whole KB (39 KB), after 1 KB to align, hb (8 KB) and stage (4 KB).
    expect(GDR_INTER_WG_BYTES).toBe(93184);
    expect(GDR_INTER_WG3_BYTES).toBe(93184 + 39936);
    const l8 = a100(device().limits), l9 = h200(device().limits);
    // The ring's offsets inside a chunk are 32-bit: 64 H max(K, V) < 2^31, else the 8-warp form without it.
    expect(interStateK128Cuda(131071, 128, 256, 1, l8)).toEqual({ grid: [8, 131071, 1], threads: [256, 1, 1], threadgroupMemory: { 0: 80384 } });
    for (const l of [l8, l9]) {
      expect(interStateK128Cuda(131072, 128, 256, 1, l)).toEqual({
        grid: [8, 131072, 1], threads: [256, 1, 1], entry: 'gated_delta_net_chunk_inter_state_k128_ws8_bf16',
      });
      expect(interStateK128Cuda(262144, 128, 128, 3, l).entry).toBe('gated_delta_net_chunk_inter_state_k128_ws8_bf16');
    }
    expect(interStateK128Cuda(262143, 128, 128, 3, l8).threadgroupMemory).toEqual({ 0: 80384 });
    expect(interStateK128Cuda(262143, 128, 128, 3, l9).threadgroupMemory).toEqual({ 0: 93184 });
    // Three slots up to a block an SM (Qwen3.6's 32 heads of V 128 at B 1: 128 blocks), two beyond (B 2: 256).
    expect(interStateK128Cuda(32, 128, 128, 1, l9).threadgroupMemory).toEqual({ 0: GDR_INTER_WG3_BYTES });
    expect(interStateK128Cuda(33, 128, 128, 1, l9).threadgroupMemory).toEqual({ 0: GDR_INTER_WG3_BYTES });
    expect(interStateK128Cuda(34, 128, 128, 1, l9).threadgroupMemory).toEqual({ 0: GDR_INTER_WG_BYTES });
    expect(interStateK128Cuda(32, 128, 128, 2, l9).threadgroupMemory).toEqual({ 0: GDR_INTER_WG_BYTES });
    // Compute capability 9.0 without room for the warpgroup walk's shared memory: the ring on mma.sync; with room for two slots only, two.
    expect(interStateK128Cuda(4, 128, 128, 1, { computeCapability: 90, maxThreadgroupMemory: 93183, multiprocessors: 132 }).entry).toBeUndefined();
    expect(interStateK128Cuda(4, 128, 128, 1, { computeCapability: 90, maxThreadgroupMemory: 93184, multiprocessors: 132 }).threadgroupMemory).toEqual({ 0: 93184 });
    expect(interStateK128Cuda(4, 128, 128, 1, { computeCapability: 100, maxThreadgroupMemory: 232448, multiprocessors: 148 }).entry).toBeUndefined();
  });

  test('an output bound as an input the kernel reads elsewhere is refused (vNew as w, o as q, finalState as initialState)', () => {
    const a = interArgs();
    gatedDeltaNetChunkInterStateVarlen(enc(), a);
    expectInvalidParts(() => gatedDeltaNetChunkInterStateVarlen(enc(), { ...a, vNew: a.w }), 'chunk_gated_delta_rule',
      'vNew must be a buffer other than w', '(got the buffer of w)');
    expectInvalidParts(() => gatedDeltaNetChunkInterStateVarlen(enc(), { ...a, finalState: a.h0 }), 'chunk_gated_delta_rule',
      'finalState must be a buffer other than h0');
    expectInvalidParts(() => gatedDeltaNetChunkInterStateVarlen(enc(), { ...a, hOut: a.k }), 'chunk_gated_delta_rule',
      'hOut must be a buffer other than k');
    const chunks = buf('u32', 2);
    const w = { k: a.k, v: a.u, beta: a.g, g: buf('f32', 64), ai: buf('f32', 4096), w: a.w, u: a.vNew, chunks, ...flat(p)};
    expectInvalidParts(() => gatedDeltaNetRecomputeWu(enc(), { ...w, w: w.k }), 'chunk_gated_delta_rule', 'w must be a buffer other than k');
    expectInvalidParts(() => gatedDeltaNetRecomputeWu(enc(), { ...w, u: w.w }), 'chunk_gated_delta_rule', 'w must be a buffer other than u');
    const o = { q: a.k, k: a.w, vNew: a.u, h: a.hOut, g: a.g, o: a.vNew, chunks, ...flat(p)};
    gatedDeltaNetChunkO(enc(), o);
    expectInvalidParts(() => gatedDeltaNetChunkO(enc(), { ...o, o: o.vNew }), 'chunk_gated_delta_rule', 'o must be a buffer other than vNew');
    // The whole forward: o is written last, after v is read, so o may be v; q, k and the states may not.
    const f: ChunkGatedDeltaRuleArgs = {
      q: a.k, k: a.w, v: a.u, g: a.g, beta: buf('f32', 64), o: a.vNew, initialState: a.h0, finalState: a.finalState,
      ...flat({ b: 1, t: 64, hg: 1, h: 1, k: 64, v: 64 }),
    };
    validateChunkGatedDeltaRule({ ...f, o: f.v }, device());
    expectInvalidParts(() => validateChunkGatedDeltaRule({ ...f, o: f.q }), 'chunk_gated_delta_rule', 'o must be a buffer other than q');
    expectInvalidParts(() => validateChunkGatedDeltaRule({ ...f, finalState: f.initialState! }), 'chunk_gated_delta_rule',
      'finalState must be a buffer other than initialState');
  });

  test('null, missing, released and foreign buffers and a missing dimension are MlxErrors naming the argument', () => {
    const a = interArgs();
    const nul = null as unknown as Buffer;
    expectInvalidParts(() => gatedDeltaNetChunkInterStateVarlen(enc(), { ...a, vNew: nul }), 'chunk_gated_delta_rule', 'vNew must be a Buffer', '(got null)');
    expectInvalidParts(() => gatedDeltaNetChunkInterStateVarlen(enc(), { ...a, seqs: undefined as unknown as Buffer }), 'chunk_gated_delta_rule',
      'seqs must be a Buffer', '(got none)');
    const gone = buf('u32', 4);
    gone.release();
    expectInvalidParts(() => gatedDeltaNetChunkInterStateVarlen(enc(), { ...a, seqs: gone }), 'chunk_gated_delta_rule', 'seqs must be a live Buffer');
    const other = Device.open({ backend: device().backend });
    try {
      const foreign = other.alloc('bf16', [4096]);
      expectInvalidParts(() => gatedDeltaNetChunkInterStateVarlen(enc(), { ...a, k: foreign }), 'chunk_gated_delta_rule',
        "k must be a buffer of the encoder's device", 'a buffer of another device');
    } finally {
      other.close();
    }
    expectInvalidParts(() => gatedDeltaNetChunkInterStateVarlen(enc(), { ...a, nSeq: undefined as unknown as number }),
      'chunk_gated_delta_rule', 'nSeq must be a positive integer', '(got undefined)');
    const f = { q: a.k, k: a.w, v: a.u, g: a.g, beta: buf('f32', 64), o: a.vNew, finalState: a.finalState, ...flat({ b: 1, t: 64, hg: 1, h: 1, k: 64, v: 64 })};
    expectInvalidParts(() => chunkGatedDeltaRule(enc(), { ...f, beta: nul }), 'chunk_gated_delta_rule', 'beta must be a Buffer', '(got null)');
    expectInvalidParts(() => chunkGatedDeltaRule(enc(), { ...f, initialState: nul }), 'chunk_gated_delta_rule', 'initialState must be a Buffer', '(got null)');
  });
});

describeBackends('chunk_gated_delta_rule tables', ({ device }) => {
  // Tables are device buffers: the step kernels bound every entry they read.
  // 128 tokens; chunk 0 is (0, 64), every other entry is out of bounds.
  const p: StepShape = { nTok: 128, nt: 6, nSeq: 1, hg: 1, h: 1, k: 64, v: 64 };
  const BAD_CHUNKS = [0, 64, 1e6, 64, 100, 0, 64, 65, 0xffff_ffff, 2, 127, 2];
  const rows = (b: Buffer, width: number): { head: number[]; tail: number[] } => {
    const x = Array.from(b.readNumbers());
    return { head: x.slice(0, 64 * width), tail: x.slice(64 * width) };
  };
  const expectChunk0Only = (b: Buffer, width: number): void => {
    const { head, tail } = rows(b, width);
    expect(head.every(Number.isFinite)).toBe(true);
    expect(tail.every(Number.isNaN)).toBe(true);
  };

  test('chunks entries outside nTok or of length 0 or > 64 are skipped: no access past a buffer, nothing written', () => {
    const dev = device();
    const r = rng(9);
    const up = (dtype: DType, n: number, lo = -1, hi = 1): Buffer => dev.upload(dtype, [n], randomArray(r, n, lo, hi));
    const nan = (dtype: DType, n: number): Buffer => {
      const b = dev.alloc(dtype, [n]);
      b.fill(NaN);
      return b;
    };
    const chunks = dev.upload('u32', [p.nt, 2], BAD_CHUNKS);
    const k = up('bf16', 128 * 64, -0.2, 0.2);
    const v = up('bf16', 128 * 64);
    const q = up('bf16', 128 * 64);
    const g = up('f32', 128, -0.1, 0);
    const beta = up('f32', 128, 0, 1);
    const h = up('bf16', p.nt * 64 * 64, -0.1, 0.1);
    const gCum = nan('f32', 128);
    const a = nan('f32', 128 * 64);
    const ai = nan('f32', 128 * 64);
    const w = nan('bf16', 128 * 64);
    const u = nan('bf16', 128 * 64);
    const o = nan('bf16', 128 * 64);
    const w2 = nan('bf16', 128 * 64);
    const u2 = nan('bf16', 128 * 64);
    const enc = dev.encoder();
    chunkLocalCumsumVarlen(enc, { gIn: g, gCum, chunks, ...flat(p)});
    gatedDeltaNetKktSolveWu(enc, { k, v, beta, g, w: w2, u: u2, chunks, ...flat(p)});
    gatedDeltaNetKkt(enc, { k, g, beta, a, chunks, ...flat(p)});
    enc.barrier();
    chunkTriSolveInvert(enc, { a, ai, chunks, ...flat(p)});
    enc.barrier();
    gatedDeltaNetRecomputeWu(enc, { k, v, beta, g, ai, w, u, chunks, ...flat(p)});
    gatedDeltaNetChunkO(enc, { q, k, vNew: v, h, g, o, chunks, ...flat(p)});
    enc.commitAndWait();
    enc.release();
    expectChunk0Only(gCum, 1);
    expectChunk0Only(a, 64);
    expectChunk0Only(ai, 64);
    expectChunk0Only(w, 64);
    expectChunk0Only(u, 64);
    expectChunk0Only(o, 64);
    expectChunk0Only(w2, 64);
    expectChunk0Only(u2, 64);
    for (const b of [chunks, k, v, q, g, beta, h, gCum, a, ai, w, u, o, w2, u2]) b.release();
  });

  test('seqs entries that are not increasing within (nTok, nt) with ceil(tokens / 64) chunks are skipped', () => {
    const dev = device();
    const r = rng(10);
    const up = (dtype: DType, n: number): Buffer => dev.upload(dtype, [n], randomArray(r, n, -0.1, 0.1));
    const sp: StepShape = { ...p, nt: 3 };
    const ins = {
      k: up('bf16', 128 * 64), w: up('bf16', 128 * 64), u: up('bf16', 128 * 64), g: up('f32', 128), h0: up('f32', 4096),
    };
    const outs = { hOut: dev.alloc('bf16', [3 * 4096]), vNew: dev.alloc('bf16', [128 * 64]), finalState: dev.alloc('f32', [4096]) };
    for (const seqs of [
      [0, 0, 1e6, 3], // tokens past nTok
      [0, 0, 128, 1e6], // chunks past nt
      [0, 0, 128, 3], // 3 chunks for 128 tokens
      [5000, 0, 128, 2], // first token after the end
      [0, 2, 128, 0], // chunks decreasing
    ]) {
      for (const b of Object.values(outs)) b.fill(NaN);
      const table = dev.upload('u32', [2, 2], seqs);
      const enc = dev.encoder();
      gatedDeltaNetChunkInterStateVarlen(enc, { ...ins, ...outs, seqs: table, ...flat(sp)});
      enc.commitAndWait();
      enc.release();
      table.release();
      for (const b of Object.values(outs)) expect(Array.from(b.readNumbers()).every(Number.isNaN)).toBe(true);
    }
    // The valid table of the same shape still runs.
    const table = dev.upload('u32', [2, 2], [0, 0, 128, 2]);
    const hOut = dev.alloc('bf16', [2 * 4096]);
    const enc = dev.encoder();
    gatedDeltaNetChunkInterStateVarlen(enc, { ...ins, ...outs, hOut, seqs: table, ...flat({ ...sp, nt: 2 })});
    enc.commitAndWait();
    enc.release();
    expect(Array.from(outs.finalState.readNumbers()).every(Number.isFinite)).toBe(true);
    for (const b of [table, hOut, ...Object.values(ins), ...Object.values(outs)]) b.release();
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

// The chunked steps at nTok = 3 tokens in one chunk of one sequence, H = Hg = 1, K = V = 64.
const STEP = { nTok: 3, nt: 1, nSeq: 1, nQkHeads: 1, nHeads: 1, kDim: 64, vDim: 64 };
const stepParams: Record<string, KeySpec> = {
  nTok: int, nt: int, nSeq: int, nQkHeads: int, nHeads: int, kDim: int, vDim: int, scale: { kind: 'num?' },
};
const chunksOf = (d: Device): Buffer => d.upload('u32', [1, 2], [0, 3]);
const seqsOf = (d: Device): Buffer => d.upload('u32', [2, 2], [0, 0, 3, 1]);
const tableFill = (args: Record<string, unknown>): void => {
  if (args.chunks !== undefined) (args.chunks as Buffer).writeNumbers([0, 3]);
  if (args.seqs !== undefined) (args.seqs as Buffer).writeNumbers([0, 0, 3, 1]);
};

opContract('chunk_gated_delta_rule', [
  {
    fn: 'chunkLocalCumsum', op: 'chunk_local_cumsum',
    keys: { gIn: buf(F), gCumsum: out(F), batch: int, seqLen: int, nHeads: int, bt: int },
    make: (d) => ({ gIn: a(d, 'f32', 30), gCumsum: a(d, 'f32', 30), batch: 2, seqLen: 5, nHeads: 3, bt: 4 }),
  },
  {
    fn: 'gatedDeltaNetChunk', op: 'gated_delta_net_chunk',
    keys: {
      k: buf(BF), w: buf(BF), u: buf(BF), g: buf(F), h0: buf(F), hOut: out(BF), vNew: out(BF), finalState: out(F),
      batch: int, seqLen: int, nQkHeads: int, nHeads: int, kDim: int, vDim: int, bt: int,
    },
    make: (d) => ({
      k: a(d, 'bf16', 64 * 128), w: a(d, 'bf16', 64 * 128), u: a(d, 'bf16', 64 * 32), g: a(d, 'f32', 64),
      h0: a(d, 'f32', 32 * 128), hOut: a(d, 'bf16', 32 * 128), vNew: a(d, 'bf16', 64 * 32), finalState: a(d, 'f32', 32 * 128),
      batch: 1, seqLen: 64, nQkHeads: 1, nHeads: 1, kDim: 128, vDim: 32, bt: 64,
    }),
  },
  // The steps (their tables are device buffers) and the whole forward.
  {
    fn: 'chunkLocalCumsumVarlen', op: 'chunk_gated_delta_rule',
    keys: { gIn: buf(F), gCum: out(F), chunks: buf(U32, { table: true }), ...stepParams },
    make: (d) => ({ gIn: a(d, 'f32', 3), gCum: a(d, 'f32', 3), chunks: chunksOf(d), ...STEP }),
    fill: tableFill,
  },
  {
    fn: 'gatedDeltaNetKkt', op: 'chunk_gated_delta_rule',
    keys: { k: buf(BF), g: buf(F), beta: buf(['f32', 'bf16']), a: out(F), chunks: buf(U32, { table: true }), ...stepParams },
    make: (d) => ({
      k: a(d, 'bf16', 192), g: a(d, 'f32', 3), beta: a(d, 'bf16', 3), a: a(d, 'f32', 192), chunks: chunksOf(d), ...STEP,
    }),
    fill: tableFill,
  },
  {
    fn: 'chunkTriSolveInvert', op: 'chunk_gated_delta_rule',
    keys: { a: buf(F), ai: out(F), chunks: buf(U32, { table: true }), ...stepParams },
    inPlace: [['a', 'ai']],
    make: (d) => ({ a: a(d, 'f32', 192), ai: a(d, 'f32', 192), chunks: chunksOf(d), ...STEP }),
    fill: tableFill,
  },
  {
    fn: 'gatedDeltaNetRecomputeWu', op: 'chunk_gated_delta_rule',
    keys: {
      k: buf(BF), v: buf(BF), beta: buf(['f32', 'bf16']), g: buf(F), ai: buf(F), w: out(BF), u: out(BF),
      chunks: buf(U32, { table: true }), ...stepParams,
    },
    make: (d) => ({
      k: a(d, 'bf16', 192), v: a(d, 'bf16', 192), beta: a(d, 'f32', 3), g: a(d, 'f32', 3), ai: a(d, 'f32', 192),
      w: a(d, 'bf16', 192), u: a(d, 'bf16', 192), chunks: chunksOf(d), ...STEP,
    }),
    fill: tableFill,
  },
  {
    fn: 'gatedDeltaNetKktSolveWu', op: 'chunk_gated_delta_rule',
    keys: {
      k: buf(BF), v: buf(BF), beta: buf(['f32', 'bf16']), g: buf(F), w: out(BF), u: out(BF),
      chunks: buf(U32, { table: true }), ...stepParams,
    },
    make: (d) => ({
      k: a(d, 'bf16', 192), v: a(d, 'bf16', 192), beta: a(d, 'f32', 3), g: a(d, 'f32', 3),
      w: a(d, 'bf16', 192), u: a(d, 'bf16', 192), chunks: chunksOf(d), ...STEP,
    }),
    fill: tableFill,
  },
  {
    fn: 'gatedDeltaNetChunkInterStateVarlen', op: 'chunk_gated_delta_rule',
    keys: {
      k: buf(BF), w: buf(BF), u: buf(BF), g: buf(F), h0: buf(F), hOut: out(BF), vNew: out(BF), finalState: out(F),
      seqs: buf(U32, { table: true }), ...stepParams,
    },
    make: (d) => ({
      k: a(d, 'bf16', 192), w: a(d, 'bf16', 192), u: a(d, 'bf16', 192), g: a(d, 'f32', 3), h0: a(d, 'f32', 4096),
      hOut: a(d, 'bf16', 4096), vNew: a(d, 'bf16', 192), finalState: a(d, 'f32', 4096), seqs: seqsOf(d), ...STEP,
    }),
    fill: tableFill,
  },
  {
    fn: 'gatedDeltaNetChunkO', op: 'chunk_gated_delta_rule',
    keys: {
      q: buf(BF), k: buf(BF), vNew: buf(BF), h: buf(BF), g: buf(F), o: out(BF), chunks: buf(U32, { table: true }), ...stepParams,
    },
    make: (d) => ({
      q: a(d, 'bf16', 192), k: a(d, 'bf16', 192), vNew: a(d, 'bf16', 192), h: a(d, 'bf16', 4096), g: a(d, 'f32', 3),
      o: a(d, 'bf16', 192), chunks: chunksOf(d), ...STEP, scale: 0.125,
    }),
    fill: tableFill,
  },
  ...[undefined, [0, 1, 3]].map((cu): Case => ({
    fn: 'chunkGatedDeltaRule', op: 'chunk_gated_delta_rule',
    keys: {
      q: buf(BF), k: buf(BF), v: buf(BF), g: buf(F), beta: buf(['f32', 'bf16']), initialState: { kind: 'buf?', dtypes: F },
      o: out(BF), finalState: out(F),
      batch: int, seqLen: int, nQkHeads: int, nHeads: int, kDim: int, vDim: int, scale: { kind: 'num?' },
      cuSeqlens: { kind: 'offsets?' },
    },
    make: (d) => {
      const nSeq = cu === undefined ? 1 : cu.length - 1;
      return {
        q: a(d, 'bf16', 192), k: a(d, 'bf16', 192), v: a(d, 'bf16', 192), g: a(d, 'f32', 3), beta: a(d, 'f32', 3),
        initialState: a(d, 'f32', nSeq * 4096), o: a(d, 'bf16', 192), finalState: a(d, 'f32', nSeq * 4096),
        batch: 1, seqLen: 3, nQkHeads: 1, nHeads: 1, kDim: 64, vDim: 64, ...(cu === undefined ? {} : { cuSeqlens: [...cu] }),
      };
    },
  })),
]);
