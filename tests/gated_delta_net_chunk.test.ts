import { describe, expect, test } from 'bun:test';
import type { Buffer, DType, Device } from '../ts/index.ts';
import type { CudaLaunch } from '../ts/plan.ts';
import {
  GATED_DELTA_NET_CHUNK_PARAMS_LAYOUT,
  buildGatedDeltaNetChunkParams,
  gatedDeltaNetChunk,
  gatedDeltaNetChunkThreadgroupBytes,
  chunkGatedDeltaRuleLayout,
  gatedDeltaNetChunkInterStateVarlen,
  groupRatio,
  numChunks,
  validateGatedDeltaNetChunk,
  type GatedDeltaNetChunkBuffers,
  gatedDeltaNetChunkRef,
  type GatedDeltaNetChunkRefInputs,
} from '../ts/ops/chunk_gated_delta_rule.ts';
import { describeValidation, TOL, describeBackends, maxRelErr, nmse, rng, type Rng, expectInvalidParts, bf16 } from './helpers.ts';
import { flat, flatName, type CumsumShape, type GdrShape, type SeedShape, type StepShape } from './gdr-args.ts';
import * as chunkOps from '../ts/ops/chunk_gated_delta_rule.ts';
import * as mlx from '../ts/index.ts';

interface GdnData extends GatedDeltaNetChunkRefInputs {
  k: Float64Array;
  w: Float64Array;
  u: Float64Array;
  g: Float64Array;
  h0: Float64Array;
  /** Raw values and gates the WY inputs were built from (float64, before any bf16 rounding). */
  vRaw: Float64Array;
  beta: Float64Array;
  gRaw: Float64Array;
}

/**
 * Inputs as the chunked pipeline makes them: k L2-normalized per (b, t, kh),
 * beta in (0.1, 0.9), log decay g in (-0.1, -0.005) cumsummed within chunks,
 * and w, u from the WY transform of each chunk in float64:
 *   L[i, j] = beta_i exp(G_i - G_j) k_i . k_j (j < i),  (I + L) u = beta v,
 *   (I + L) w = beta exp(G) k.
 */
function makeData(r: Rng, p: SeedShape): GdnData {
  const { b: B, t: T, hg: Hg, h: H, k: K, v: V, bt: BT } = p;
  const k = new Float64Array(B * T * Hg * K);
  for (let row = 0; row < B * T * Hg; row++) {
    let n2 = 0;
    for (let i = 0; i < K; i++) {
      const x = r.normal();
      k[row * K + i] = x;
      n2 += x * x;
    }
    const inv = 1 / Math.sqrt(n2);
    for (let i = 0; i < K; i++) k[row * K + i] = k[row * K + i]! * inv;
  }
  const vRaw = new Float64Array(B * T * H * V).map(() => r.normal());
  const beta = new Float64Array(B * T * H).map(() => r.uniform(0.1, 0.9));
  const gRaw = new Float64Array(B * T * H).map(() => r.uniform(-0.1, -0.005));
  const g = new Float64Array(B * T * H);
  const h0 = new Float64Array(B * H * V * K).map(() => 0.5 * r.normal());
  const w = new Float64Array(B * T * H * K);
  const u = new Float64Array(B * T * H * V);
  const group = H / Hg;
  for (let b = 0; b < B; b++) {
    for (let head = 0; head < H; head++) {
      const kh = Math.floor(head / group);
      const kRow = (t: number): number => ((b * T + t) * Hg + kh) * K;
      const hRow = (t: number): number => (b * T + t) * H + head;
      for (let t0 = 0; t0 < T; t0 += BT) {
        let acc = 0;
        for (let t = t0; t < t0 + BT; t++) {
          acc += gRaw[hRow(t)]!;
          g[hRow(t)] = acc;
        }
        for (let i = t0; i < t0 + BT; i++) {
          const bi = beta[hRow(i)]!;
          const gi = g[hRow(i)]!;
          for (let d = 0; d < V; d++) u[hRow(i) * V + d] = bi * vRaw[hRow(i) * V + d]!;
          for (let d = 0; d < K; d++) w[hRow(i) * K + d] = bi * Math.exp(gi) * k[kRow(i) + d]!;
          for (let j = t0; j < i; j++) {
            let kk = 0;
            for (let d = 0; d < K; d++) kk += k[kRow(i) + d]! * k[kRow(j) + d]!;
            const l = bi * Math.exp(gi - g[hRow(j)]!) * kk;
            for (let d = 0; d < V; d++) u[hRow(i) * V + d] = u[hRow(i) * V + d]! - l * u[hRow(j) * V + d]!;
            for (let d = 0; d < K; d++) w[hRow(i) * K + d] = w[hRow(i) * K + d]! - l * w[hRow(j) * K + d]!;
          }
        }
      }
    }
  }
  return { k, w, u, g, h0, vRaw, beta, gRaw };
}

/**
 * The gated delta rule token by token, float64, independent of the chunked form:
 *   S_t = exp(g_t) S_{t-1};  delta_t = beta_t (v_t - S_t k_t);  S_t += delta_t k_t^T.
 * Returns the final states [B, H, V, K] and the deltas [B, T, H, V] (what the
 * chunked form calls v_new).
 */
function tokenRecurrence(p: SeedShape, d: GdnData): { state: Float64Array; delta: Float64Array } {
  const { b: B, t: T, hg: Hg, h: H, k: K, v: V } = p;
  const state = new Float64Array(B * H * V * K);
  const delta = new Float64Array(B * T * H * V);
  const S = new Float64Array(V * K);
  for (let b = 0; b < B; b++) {
    for (let head = 0; head < H; head++) {
      const kh = Math.floor(head / (H / Hg));
      const off = (b * H + head) * V * K;
      for (let i = 0; i < V * K; i++) S[i] = d.h0[off + i]!;
      for (let t = 0; t < T; t++) {
        const hr = (b * T + t) * H + head;
        const kr = ((b * T + t) * Hg + kh) * K;
        const a = Math.exp(d.gRaw[hr]!);
        for (let i = 0; i < V * K; i++) S[i] = S[i]! * a;
        for (let vv = 0; vv < V; vv++) {
          let sk = 0;
          for (let kk = 0; kk < K; kk++) sk += S[vv * K + kk]! * d.k[kr + kk]!;
          const dl = d.beta[hr]! * (d.vRaw[hr * V + vv]! - sk);
          delta[hr * V + vv] = dl;
          for (let kk = 0; kk < K; kk++) S[vv * K + kk] = S[vv * K + kk]! + dl * d.k[kr + kk]!;
        }
      }
      state.set(S, off);
    }
  }
  return { state, delta };
}

const shape = (o: Partial<SeedShape> = {}): SeedShape => ({
  b: 1, t: 64, hg: 1, h: 1, k: 128, v: 32, bt: 64, ...o,
});

describe('gated_delta_net_chunk reference', () => {
  test('the chunked form without bf16 rounding equals the token-by-token recurrence', () => {
    for (const p of [shape({ t: 128, hg: 1, h: 2, v: 32 }), shape({ b: 2, t: 64, hg: 2, h: 2, v: 32 })]) {
      const d = makeData(rng(7), p);
      const tok = tokenRecurrence(p, d);
      const ref = gatedDeltaNetChunkRef(p, d, { mirrorBf16: false });
      expect(maxRelErr(ref.finalState, tok.state)).toBeLessThan(1e-9);
      expect(maxRelErr(ref.vNew, tok.delta)).toBeLessThan(1e-9);
    }
  });

  test('the bf16-mirroring reference stays within bf16 error of the exact one', () => {
    const p = shape({ t: 128, h: 2, v: 32 });
    const d = makeData(rng(8), p);
    const exact = gatedDeltaNetChunkRef(p, d, { mirrorBf16: false });
    const mirrored = gatedDeltaNetChunkRef(p, d, { mirrorBf16: true });
    expect(nmse(mirrored.finalState, exact.finalState)).toBeLessThan(1e-4);
    expect(nmse(mirrored.vNew, exact.vNew)).toBeLessThan(1e-4);
  });
});

describe('gated_delta_net_chunk params', () => {
  test('numChunks, groupRatio, threadgroup bytes', () => {
    expect(numChunks({ seqLen: 192, bt: 64 })).toBe(3);
    expect(numChunks({ seqLen: 65, bt: 64 })).toBe(2);
    expect(groupRatio({ nHeads: 8, nQkHeads: 2 })).toBe(4);
    expect(gatedDeltaNetChunkThreadgroupBytes({ kDim: 128, bt: 64 })).toBe(32 * 128 * 4 + 32 * 64 * 2);
  });

  test('the packer writes struct GatedDeltaNetChunkParams', () => {
    const fields = GATED_DELTA_NET_CHUNK_PARAMS_LAYOUT;
    expect(fields.every((f) => f.type === 'u32')).toBe(true);
    const p = shape({ b: 3, t: 320, hg: 2, h: 6, v: 96 });
    const want: Record<string, number> = { b: 3, t: 320, hg: 2, h: 6, k: 128, v: 96, bt: 64, nt: 5 };
    const packed = buildGatedDeltaNetChunkParams(flat(p));
    expect(packed.byteLength).toBe(4 * fields.length);
    const dv = new DataView(packed.buffer, packed.byteOffset, packed.byteLength);
    for (const f of fields) expect([f.name, dv.getUint32(f.offset, true)]).toEqual([f.name, want[f.name]!]);
  });
});

type Bufs = GatedDeltaNetChunkBuffers;

function allocBuffers(dev: Device, p: SeedShape, over: Partial<Record<keyof Bufs, [DType, number]>> = {}): Bufs {
  const nt = Math.ceil(p.t / p.bt);
  const spec: Record<keyof Bufs, [DType, number]> = {
    k: ['bf16', p.b * p.t * p.hg * p.k],
    w: ['bf16', p.b * p.t * p.h * p.k],
    u: ['bf16', p.b * p.t * p.h * p.v],
    g: ['f32', p.b * p.t * p.h],
    h0: ['f32', p.b * p.h * p.v * p.k],
    hOut: ['bf16', p.b * nt * p.h * p.v * p.k],
    vNew: ['bf16', p.b * p.t * p.h * p.v],
    finalState: ['f32', p.b * p.h * p.v * p.k],
    ...over,
  };
  const a = (key: keyof Bufs): Buffer => dev.alloc(spec[key][0], [spec[key][1]]);
  return { k: a('k'), w: a('w'), u: a('u'), g: a('g'), h0: a('h0'), hOut: a('hOut'), vNew: a('vNew'), finalState: a('finalState') };
}

function release(b: Bufs): void {
  for (const x of Object.values(b)) x.release();
}

describeBackends('gated_delta_net_chunk', ({ device }) => {
  test('validation: dims, K, V, threadgroup memory, chunking', () => {
    const dev = device();
    const ok = shape({ t: 128, hg: 2, h: 4, v: 64 });
    const bufs = allocBuffers(dev, ok);
    validateGatedDeltaNetChunk({ ...flat(ok), ...bufs });
    for (const arg of ['b', 't', 'hg', 'h', 'k', 'v', 'bt'] as const) {
      expectInvalidParts(() => validateGatedDeltaNetChunk({ ...flat({ ...ok, [arg]: 0 }), ...bufs }), 'gated_delta_net_chunk', `${flatName(arg)} must be a positive integer`, '(got 0)');
    }
    expectInvalidParts(() => validateGatedDeltaNetChunk({ ...flat({ ...ok, t: 2 ** 32 }), ...bufs }), 'gated_delta_net_chunk', 'seqLen must be at most 2^32 - 1', '(got 4294967296)');
    expectInvalidParts(() => validateGatedDeltaNetChunk({ ...flat({ ...ok, b: 2 ** 20, t: 2 ** 26 }), ...bufs }), 'gated_delta_net_chunk', 'k elements must be a product of integers at most 2^53 - 1');
    expectInvalidParts(() => validateGatedDeltaNetChunk({ ...flat({ ...ok, h: 3 }), ...bufs }), 'gated_delta_net_chunk', 'nHeads must be a multiple of nQkHeads (2)', '(got 3)');
    expectInvalidParts(() => validateGatedDeltaNetChunk({ ...flat({ ...ok, k: 64 }), ...bufs }), 'gated_delta_net_chunk', 'kDim must be equal to MAX_K = 128', '(got 64)');
    expectInvalidParts(() => validateGatedDeltaNetChunk({ ...flat({ ...ok, v: 288 }), ...bufs }), 'gated_delta_net_chunk', 'vDim must be at most MAX_V (256)', '(got 288)');
    expectInvalidParts(() => validateGatedDeltaNetChunk({ ...flat({ ...ok, t: 512, bt: 512 }), ...bufs }), 'gated_delta_net_chunk', 'threadgroup memory', 'at most 24576 bytes', '(got 49152)');
    expectInvalidParts(() => validateGatedDeltaNetChunk({ ...flat({ ...ok, t: 100 }), ...bufs }), 'gated_delta_net_chunk', 'seqLen must be a multiple of bt (64)', '(got 100)');
    expectInvalidParts(() => validateGatedDeltaNetChunk({ ...flat({ ...ok, bt: 32 }), ...bufs }), 'gated_delta_net_chunk', 'bt must be 64', '(got 32)');
    expectInvalidParts(() => validateGatedDeltaNetChunk({ ...flat({ ...ok, v: 48 }), ...bufs }), 'gated_delta_net_chunk', 'vDim must be a multiple of BV (32)', '(got 48)');
    release(bufs);
  });

  test('validation: K = 256 is rejected naming 256 and MAX_K = 128, before any buffer check', () => {
    const dev = device();
    const one = (d: DType): Buffer => dev.alloc(d, [1]);
    const bufs: Bufs = {
      k: one('bf16'), w: one('bf16'), u: one('bf16'), g: one('f32'),
      h0: one('f32'), hOut: one('bf16'), vNew: one('bf16'), finalState: one('f32'),
    };
    expectInvalidParts(() => validateGatedDeltaNetChunk({ ...flat(shape({ t: 128, hg: 2, h: 4, k: 256, v: 128 })), ...bufs }), 'gated_delta_net_chunk', '256', 'MAX_K = 128', 'exactly', 'hard-coded');
    release(bufs);
  });

  test('validation: dtype and element count of every buffer', () => {
    const dev = device();
    const ok = shape({ t: 128, hg: 1, h: 2, v: 32 });
    // Messages name the arguments as the caller passes them (camelCase).
    const names: Record<keyof Bufs, string> = {
      k: 'k', w: 'w', u: 'u', g: 'g', h0: 'h0', hOut: 'hOut', vNew: 'vNew', finalState: 'finalState',
    };
    const good = allocBuffers(dev, ok);
    for (const key of Object.keys(names) as (keyof Bufs)[]) {
      const right = good[key];
      const wrongDtype: DType = right.dtype === 'bf16' ? 'f32' : 'bf16';
      const bad1 = allocBuffers(dev, ok, { [key]: [wrongDtype, right.elementCount] });
      expectInvalidParts(() => validateGatedDeltaNetChunk({ ...flat(ok), ...bad1 }), 'gated_delta_net_chunk', `${names[key]}.dtype must be ${right.dtype}`, `(got ${wrongDtype})`);
      release(bad1);
      const bad2 = allocBuffers(dev, ok, { [key]: [right.dtype, right.elementCount + 1] });
      expectInvalidParts(() => validateGatedDeltaNetChunk({ ...flat(ok), ...bad2 }), 'gated_delta_net_chunk', `${names[key]}.elementCount must be ${right.elementCount}`);
      release(bad2);
    }
    const enc = dev.encoder();
    expectInvalidParts(() => gatedDeltaNetChunk(enc, { ...good, ...flat({ ...ok, v: 48 })}), 'gated_delta_net_chunk', 'vDim must be a multiple of BV (32)');
    enc.release();
    release(good);
  });

  // Tolerances: hOut and vNew are bf16 and compared elementwise with the
  // reference that rounds at the same points, so they differ only where f32
  // summation order moves a value across a bf16 rounding boundary: one bf16
  // ulp, at most 2^-7 relative (under TOL.bf16). finalState is f32 and sums
  // products of those bf16-rounded operands; a boundary flip moves one term by
  // one bf16 ulp of a gated value, an absolute error, so finalState is measured
  // against its largest |value|: max |error| / max |want| below 1e-3, and NMSE
  // below 1e-8.
  const cases: { name: string; p: SeedShape }[] = [
    { name: 'one chunk, H = Hg = 1, V = 32', p: shape({ t: 64, hg: 1, h: 1, v: 32 }) },
    { name: 'three chunks, Hg = 1 < H = 2, V = 64', p: shape({ t: 192, hg: 1, h: 2, v: 64 }) },
    { name: 'two chunks, V = 256 (8 tiles)', p: shape({ t: 128, hg: 1, h: 1, v: 256 }) },
    { name: 'batch 2, Hg = 2 < H = 4, two chunks', p: shape({ b: 2, t: 128, hg: 2, h: 4, v: 32 }) },
  ];
  for (const { name, p } of cases) {
    test(`parity: ${name}`, () => {
      const dev = device();
      const d = makeData(rng(1000 + p.t + p.h * 7 + p.v + p.b * 31), p);
      const up = (dtype: DType, data: ArrayLike<number>, n: number): Buffer => dev.upload(dtype, [n], data);
      const bufs: Bufs = {
        k: up('bf16', d.k, d.k.length),
        w: up('bf16', d.w, d.w.length),
        u: up('bf16', d.u, d.u.length),
        g: up('f32', d.g, d.g.length),
        h0: up('f32', d.h0, d.h0.length),
        hOut: dev.alloc('bf16', [p.b * numChunks(flat(p)) * p.h * p.v * p.k]),
        vNew: dev.alloc('bf16', [d.u.length]),
        finalState: dev.alloc('f32', [d.h0.length]),
      };
      bufs.hOut.fill(NaN);
      bufs.vNew.fill(NaN);
      bufs.finalState.fill(NaN);
      const enc = dev.encoder();
      gatedDeltaNetChunk(enc, { ...bufs, ...flat(p)});
      enc.commitAndWait();
      enc.release();

      // The kernel sees the inputs as stored: bf16-rounded k, w, u and f32 g, h0.
      const stored: GatedDeltaNetChunkRefInputs = {
        k: d.k.map(bf16), w: d.w.map(bf16), u: d.u.map(bf16), g: d.g.map(Math.fround), h0: d.h0.map(Math.fround),
      };
      const ref = gatedDeltaNetChunkRef(p, stored, { mirrorBf16: true });
      const errH = maxRelErr(bufs.hOut.readNumbers(), ref.hOut);
      const errV = maxRelErr(bufs.vNew.readNumbers(), ref.vNew);
      const state = bufs.finalState.readNumbers();
      const scale = ref.finalState.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
      const errS = maxRelErr(state, ref.finalState, scale);
      const nmseS = nmse(state, ref.finalState);
      console.log(
        `gated_delta_net_chunk ${name}: max rel err h_out ${errH.toExponential(2)}, v_new ${errV.toExponential(2)}; ` +
          `final_state max abs err / max |want| ${errS.toExponential(2)}, nmse ${nmseS.toExponential(2)}`,
      );
      expect(errH).toBeLessThan(TOL.bf16);
      expect(errV).toBeLessThan(TOL.bf16);
      expect(errS).toBeLessThan(1e-3);
      expect(nmseS).toBeLessThan(1e-8);
      release(bufs);
    });
  }
});

// ---- one body: the seed's entry runs the varlen inter-state kernel's code ----

describeBackends('gated_delta_net_chunk: the same kernel body as the varlen inter-state step', ({ device }) => {
  test('B = 2 sequences of 128 tokens: hOut, vNew, finalState equal gatedDeltaNetChunkInterStateVarlen (k = 128) bit for bit', () => {
    const dev = device();
    const p = shape({ b: 2, t: 128, hg: 1, h: 2, v: 64 });
    const d = makeData(rng(77), p);
    const up = (dtype: DType, data: ArrayLike<number>): Buffer => dev.upload(dtype, [data.length], data);
    const ins = { k: up('bf16', d.k), w: up('bf16', d.w), u: up('bf16', d.u), g: up('f32', d.g), h0: up('f32', d.h0) };
    const outs = () => {
      const o = {
        hOut: dev.alloc('bf16', [p.b * numChunks(flat(p)) * p.h * p.v * p.k]),
        vNew: dev.alloc('bf16', [d.u.length]),
        finalState: dev.alloc('f32', [d.h0.length]),
      };
      for (const b of Object.values(o)) b.fill(NaN);
      return o;
    };
    const seed = outs();
    const varlen = outs();
    const layout = chunkGatedDeltaRuleLayout(p.b, p.t);
    const seqs = dev.upload('u32', [layout.seqs.length], layout.seqs);
    const enc = dev.encoder();
    gatedDeltaNetChunk(enc, { ...ins, ...seed, ...flat(p)});
    gatedDeltaNetChunkInterStateVarlen(enc, {
      ...ins, ...varlen, seqs,
      ...flat({ nTok: layout.nTok, nt: layout.nt, nSeq: layout.nSeq, hg: p.hg, h: p.h, k: p.k, v: p.v }),
    });
    enc.commitAndWait();
    enc.release();
    for (const key of ['hOut', 'vNew', 'finalState'] as const) {
      expect(Array.from(seed[key].read())).toEqual(Array.from(varlen[key].read()));
    }
    for (const b of [...Object.values(ins), ...Object.values(seed), ...Object.values(varlen), seqs]) b.release();
  });
});

// ---- buffers that are not live buffers of the device; params; aliasing ----

describeValidation('gated_delta_net_chunk: buffers, params and aliasing', ({ device, enc, buf }) => {
  const params = { b: 1, t: 64, hg: 1, h: 1, k: 128, v: 32, bt: 64 };
  const args = () => ({
    k: buf('bf16', 64 * 128), w: buf('bf16', 64 * 128), u: buf('bf16', 64 * 32), g: buf('f32', 64), h0: buf('f32', 32 * 128),
    hOut: buf('bf16', 32 * 128), vNew: buf('bf16', 64 * 32), finalState: buf('f32', 32 * 128), ...flat(params),
  });

  test('the launch: 128 threads a block of 32 V rows; on CUDA with compute capability 9.0 the warpgroup walk (256 threads, its shared memory: three slots up to a block an SM)', () => {
    const a = args();
    const l = device().limits;
    const wg = (bytes: number): CudaLaunch => ({
      grid: [1, 1, 1], threads: [256, 1, 1], threadgroupMemory: { 0: bytes }, entry: 'gated_delta_net_chunk_inter_state_wg_bf16',
    });
    for (const [limits, cuda] of [
      [{ ...l, computeCapability: 80, maxThreadgroupMemory: 166912, multiprocessors: 108 }, undefined],
      [{ ...l, computeCapability: 90, maxThreadgroupMemory: 232448, multiprocessors: 132 }, wg(chunkOps.GDR_INTER_WG3_BYTES)],
      [{ ...l, computeCapability: 90, maxThreadgroupMemory: chunkOps.GDR_INTER_WG3_BYTES - 1, multiprocessors: 132 }, wg(chunkOps.GDR_INTER_WG_BYTES)],
      [{ ...l, computeCapability: 90, maxThreadgroupMemory: 232448, multiprocessors: 0 }, wg(chunkOps.GDR_INTER_WG_BYTES)],
      [{ ...l, computeCapability: 90, maxThreadgroupMemory: chunkOps.GDR_INTER_WG_BYTES - 1, multiprocessors: 132 }, undefined],
    ] as const) {
      const [d] = chunkOps.planGatedDeltaNetChunk(a, limits, device()).dispatches;
      expect([d!.kernel, d!.grid, d!.threads, d!.threadgroupMemory]).toEqual(['gated_delta_net_chunk_inter_state_bf16', [1, 1, 1], [128, 1, 1], [20480]]);
      expect(d!.cuda).toEqual(cuda);
    }
  });

  test('an output bound as another argument is refused (the CUDA kernel takes every binding as __restrict__)', () => {
    const a = args();
    chunkOps.gatedDeltaNetChunk(enc(), a);
    expectInvalidParts(() => chunkOps.gatedDeltaNetChunk(enc(), { ...a, vNew: a.u }), 'gated_delta_net_chunk', 'vNew must be a buffer other than u', '(got the buffer of u)');
    expectInvalidParts(() => chunkOps.gatedDeltaNetChunk(enc(), { ...a, finalState: a.h0 }), 'gated_delta_net_chunk', 'finalState must be a buffer other than h0');
  });

  test('null, released and foreign buffers and a missing dimension are MlxErrors naming the argument', () => {
    const a = args();
    expectInvalidParts(() => chunkOps.gatedDeltaNetChunk(enc(), { ...a, hOut: null as unknown as mlx.Buffer }), 'gated_delta_net_chunk', 'hOut must be a Buffer', '(got null)');
    const gone = buf('f32', 64);
    gone.release();
    expectInvalidParts(() => chunkOps.gatedDeltaNetChunk(enc(), { ...a, g: gone }), 'gated_delta_net_chunk', 'g must be a live Buffer');
    expectInvalidParts(() => chunkOps.gatedDeltaNetChunk(enc(), { ...a, vDim: undefined as unknown as number }), 'gated_delta_net_chunk',
      'vDim must be a positive integer', '(got undefined)');
    const other = mlx.Device.open({ backend: device().backend });
    try {
      expectInvalidParts(() => chunkOps.gatedDeltaNetChunk(enc(), { ...a, w: other.alloc('bf16', [64 * 128]) }), 'gated_delta_net_chunk',
        "w must be a buffer of the encoder's device", 'a buffer of another device');
    } finally {
      other.close();
    }
  });
});
