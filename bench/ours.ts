// Times our kernels on the cases of bench/shapes.json with the encoder's GPU
// time: per case, warm-up commits, then `repeats` commits of `iters`
// back-to-back dispatches each; the time per dispatch is the median over the
// commits of gpuTimeNs / iters (min also kept). iters is chosen per case so a
// commit lasts about --target-ms (from a one-dispatch probe).
//
//   bun run bench/ours.ts [--smoke] [--graphs] [--repeats N] [--target-ms X] [--json PATH]
//
// --graphs: the `iters` dispatches are recorded once into a replayable
// encoder and each timed batch is a replay of it (a CUDA graph on cuda), so
// the host's launch rate cannot set the time of short kernels; peers.py
// --graphs times the peers the same way (torch.cuda.CUDAGraph).
//
// --smoke: the tiny cases of shapes.json (the emulator runs them); backend:
// MLX_NATIVE_BACKEND or the default. Inputs are random (never zeros), written
// as raw bytes. A case that fails (an op the backend lacks, say) prints a
// FAILED line with the reason and the run goes on.

import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Device, type Buffer, type DType, type Encoder } from '../ts/index.ts';
import { chunkGatedDeltaRule, chunkLocalCumsum, gatedDeltaNetChunk } from '../ts/ops/chunk_gated_delta_rule.ts';
import { flashAttnVec, flashAttnVecTmpElements } from '../ts/ops/flash_attn_vec.ts';
import { fusedNormAdd, fusedResidualNorm } from '../ts/ops/fused_norm.ts';
import { gatedDeltaNet, gatedDeltaNetDecode } from '../ts/ops/gated_delta_net.ts';
import { fusedMoeRouting, fusedMoeRoutingBatch } from '../ts/ops/moe_routing.ts';

export type Case = { kernel: string } & Record<string, number | string>;

/** "k=v k=v ..." over the case's fields except kernel, in file order (bench/peers.py builds the same). */
export function shapeKey(c: Case): string {
  return Object.entries(c).filter(([k]) => k !== 'kernel').map(([k, v]) => `${k}=${v}`).join(' ');
}

interface Args { smoke: boolean; graphs: boolean; repeats: number; targetMs: number; json: string | null }

function parseArgs(argv: readonly string[]): Args {
  const a: Args = { smoke: false, graphs: false, repeats: 10, targetMs: 20, json: null };
  for (let i = 0; i < argv.length; i++) {
    const x = argv[i]!;
    const next = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`ours.ts: ${x} needs a value`);
      return v;
    };
    if (x === '--smoke') a.smoke = true;
    else if (x === '--graphs') a.graphs = true;
    else if (x === '--repeats') a.repeats = Number(next());
    else if (x === '--target-ms') a.targetMs = Number(next());
    else if (x === '--json') a.json = next();
    else throw new Error(`ours.ts: unknown argument ${x}`);
  }
  if (!(a.repeats >= 1) || !(a.targetMs > 0)) throw new Error('ours.ts: --repeats >= 1 and --target-ms > 0');
  return a;
}

/** xorshift32 stream: fast enough to fill hundreds of millions of elements. */
function stream(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5; s >>>= 0;
    return s;
  };
}

/**
 * A buffer of random values of magnitude in [2^-e1, 2^-e0) and random sign,
 * written as raw bytes: f32 uniform in (-hi, hi); f16/bf16 from random bit
 * patterns with a bounded exponent (no infinities, NaNs or zeros).
 */
function randomBuffer(dev: Device, dtype: DType, shape: readonly number[], hi: number, seed: number): Buffer {
  const n = shape.reduce((x, y) => x * y, 1);
  const next = stream(seed);
  const b = dev.alloc(dtype, shape);
  if (dtype === 'f32') {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = ((next() / 0x1_0000_0000) * 2 - 1) * hi;
    b.write(a);
    return b;
  }
  // Exponent of hi, and four binades below it.
  const e = Math.floor(Math.log2(hi));
  const a = new Uint16Array(n);
  if (dtype === 'bf16') {
    for (let i = 0; i < n; i++) {
      const r = next();
      a[i] = ((r & 1) << 15) | ((127 + e - ((r >>> 1) % 4)) << 7) | ((r >>> 8) & 0x7f);
    }
  } else if (dtype === 'f16') {
    for (let i = 0; i < n; i++) {
      const r = next();
      a[i] = ((r & 1) << 15) | ((15 + e - ((r >>> 1) % 4)) << 10) | ((r >>> 8) & 0x3ff);
    }
  } else {
    throw new Error(`randomBuffer: ${dtype}`);
  }
  b.write(a);
  return b;
}

/** A buffer of random f32 values in [lo, hi). */
function rangeBuffer(dev: Device, shape: readonly number[], lo: number, hi: number, seed: number): Buffer {
  const n = shape.reduce((x, y) => x * y, 1);
  const next = stream(seed);
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = lo + (hi - lo) * (next() / 0x1_0000_0000);
  const b = dev.alloc('f32', shape);
  b.write(a);
  return b;
}

/** A prepared case: record(enc) records one run of the op; buffers released after. */
interface Prepared {
  record: (enc: Encoder) => void;
  buffers: Buffer[];
  variant: string;
}

type Preparer = (dev: Device, c: Case) => Prepared[] | string;

const num = (c: Case, k: string): number => {
  const v = c[k];
  if (typeof v !== 'number') throw new Error(`case ${c.kernel}: ${k} must be a number`);
  return v;
};

const PREPARERS: Record<string, Preparer> = {
  fused_norm_add(dev, c) {
    const rows = num(c, 'rows'); const dim = num(c, 'dim');
    const residual = randomBuffer(dev, 'f32', [rows, dim], 1, 1);
    const input = randomBuffer(dev, 'f32', [rows, dim], 1, 2);
    const weight = randomBuffer(dev, 'f32', [dim], 1, 3);
    const output = dev.alloc('f32', [rows, dim]);
    return [{
      variant: 'f32', buffers: [residual, input, weight, output],
      record: (enc) => fusedNormAdd(enc, { residual, input, weight, output, rows, dim, eps: 1e-6 }),
    }];
  },
  fused_residual_norm(dev, c) {
    const rows = num(c, 'rows'); const dim = num(c, 'dim');
    const residual = randomBuffer(dev, 'f32', [rows, dim], 1, 1);
    const input = randomBuffer(dev, 'f32', [rows, dim], 1, 2);
    const weight = randomBuffer(dev, 'f32', [dim], 1, 3);
    const normedOutput = dev.alloc('f32', [rows, dim]);
    const sumOutput = dev.alloc('f32', [rows, dim]);
    return [{
      variant: 'f32, writes sum', buffers: [residual, input, weight, normedOutput, sumOutput],
      record: (enc) => fusedResidualNorm(enc, { residual, input, weight, normedOutput, sumOutput, rows, dim, eps: 1e-6 }),
    }];
  },
  moe_routing(dev, c) {
    const nTokens = num(c, 'tokens'); const numExperts = num(c, 'experts'); const topK = num(c, 'topK');
    const logits = randomBuffer(dev, 'f32', [nTokens, numExperts], 4, 4);
    const perExpertScale = rangeBuffer(dev, [numExperts], 0.5, 1.5, 5);
    const expertIds = dev.alloc('u32', [nTokens, topK]);
    const routingWeights = dev.alloc('f32', [nTokens, topK]);
    const args = { logits, perExpertScale, expertIds, routingWeights, numExperts, topK };
    return [{
      variant: nTokens === 1 ? 'single-token kernel' : 'batch kernel',
      buffers: [logits, perExpertScale, expertIds, routingWeights],
      record: nTokens === 1 ? (enc) => fusedMoeRouting(enc, args) : (enc) => fusedMoeRoutingBatch(enc, { ...args, nTokens }),
    }];
  },
  flash_attn_vec(dev, c) {
    const batch = num(c, 'batch'); const nHeads = num(c, 'nHeads'); const nKvHeads = num(c, 'nKvHeads');
    const headDim = num(c, 'headDim'); const kv = num(c, 'kv');
    const q = randomBuffer(dev, 'f32', [batch, nHeads, headDim], 1, 6);
    const out = dev.alloc('f32', [batch, nHeads, headDim]);
    const base = { batch, nHeads, nKvHeads, headDim, kvSeqLen: kv, kvCapacity: kv, scale: 1 / Math.sqrt(headDim), mask: 'causal' as const };
    const nwgs = kv >= 32 * 64 ? [8, 16, 32] : [1, 4];
    // f16 K/V (the dtype of the earlier runs) and bf16, both on the CUDA tensor-core kernels.
    return (['f16', 'bf16'] as const).flatMap((kvType, j) => {
      const k = randomBuffer(dev, kvType, [batch, nKvHeads, kv, headDim], 1, 7);
      const v = randomBuffer(dev, kvType, [batch, nKvHeads, kv, headDim], 1, 8);
      const shared = j === 0 ? [q, k, v, out] : [k, v];
      return nwgs.map((nwg, i) => {
        const p = { ...base, nwg };
        const tmp = nwg > 1 ? dev.alloc('f32', [flashAttnVecTmpElements(p)]) : undefined;
        return {
          variant: `${kvType} KV, nwg ${nwg}`,
          buffers: [...(i === 0 ? shared : []), ...(tmp ? [tmp] : [])],
          record: (enc: Encoder) => flashAttnVec(enc, { ...p, q, k, v, out, tmp }),
        };
      });
    });
  },
  chunk_local_cumsum(dev, c) {
    const b = num(c, 'b'); const t = num(c, 't'); const h = num(c, 'h'); const bt = num(c, 'bt');
    const gIn = rangeBuffer(dev, [b, t, h], -0.1, -0.005, 9);
    const gCumsum = dev.alloc('f32', [b, t, h]);
    return [{ variant: 'f32', buffers: [gIn, gCumsum], record: (enc) => chunkLocalCumsum(enc, { gIn, gCumsum, batch: b, seqLen: t, nHeads: h, bt }) }];
  },
  gated_delta_net_chunk(dev, c) {
    const p = { b: num(c, 'b'), t: num(c, 't'), hg: num(c, 'hg'), h: num(c, 'h'), k: num(c, 'k'), v: num(c, 'v'), bt: 64 };
    const nt = Math.ceil(p.t / p.bt);
    const k = randomBuffer(dev, 'bf16', [p.b, p.t, p.hg, p.k], 1 / 16, 10);
    const w = randomBuffer(dev, 'bf16', [p.b, p.t, p.h, p.k], 1 / 16, 11);
    const u = randomBuffer(dev, 'bf16', [p.b, p.t, p.h, p.v], 1 / 4, 12);
    const g = rangeBuffer(dev, [p.b, p.t, p.h], -1, 0, 13);
    const h0 = randomBuffer(dev, 'f32', [p.b, p.h, p.v, p.k], 0.1, 14);
    const hOut = dev.alloc('bf16', [p.b, nt, p.h, p.v, p.k]);
    const vNew = dev.alloc('bf16', [p.b, p.t, p.h, p.v]);
    const finalState = dev.alloc('f32', [p.b, p.h, p.v, p.k]);
    return [{
      variant: 'bf16 k/w/u, f32 state', buffers: [k, w, u, g, h0, hOut, vNew, finalState],
      record: (enc) => gatedDeltaNetChunk(enc, {
        k, w, u, g, h0, hOut, vNew, finalState, batch: p.b, seqLen: p.t, nQkHeads: p.hg, nHeads: p.h, kDim: p.k, vDim: p.v, bt: p.bt,
      }),
    }];
  },
  gated_delta_rule_prefill(dev, c) {
    const p = { b: num(c, 'b'), t: num(c, 't'), hg: num(c, 'hg'), h: num(c, 'h'), k: num(c, 'k'), v: num(c, 'v') };
    const q = randomBuffer(dev, 'bf16', [p.b, p.t, p.hg, p.k], 1 / 8, 15);
    const k = randomBuffer(dev, 'bf16', [p.b, p.t, p.hg, p.k], 1 / 8, 16);
    const v = randomBuffer(dev, 'bf16', [p.b, p.t, p.h, p.v], 1, 17);
    const g = rangeBuffer(dev, [p.b, p.t, p.h], -0.1, -0.005, 18);
    const beta = rangeBuffer(dev, [p.b, p.t, p.h], 0.1, 0.9, 19);
    const initialState = randomBuffer(dev, 'f32', [p.b, p.h, p.v, p.k], 0.1, 20);
    const output = dev.alloc('bf16', [p.b, p.t, p.h, p.v]);
    const finalState = dev.alloc('f32', [p.b, p.h, p.v, p.k]);
    const out: Prepared[] = [{
      variant: 'recurrent kernel (gated_delta_net), bf16',
      buffers: [q, k, v, g, beta, initialState, output, finalState],
      record: (enc) => gatedDeltaNet(enc, {
        q, k, v, g, beta, initialState, output, finalState,
        batch: p.b, seqLen: p.t, nQkHeads: p.hg, nHeads: p.h, kDim: p.k, vDim: p.v,
      }),
    }];
    const o = dev.alloc('bf16', [p.b, p.t, p.h, p.v]);
    const finalState2 = dev.alloc('f32', [p.b, p.h, p.v, p.k]);
    out.push({
      variant: 'chunked pipeline (chunk_gated_delta_rule), bf16',
      buffers: [o, finalState2],
      record: (enc) => chunkGatedDeltaRule(enc, {
        q, k, v, g, beta, initialState, o, finalState: finalState2,
        batch: p.b, seqLen: p.t, nQkHeads: p.hg, nHeads: p.h, kDim: p.k, vDim: p.v,
      }),
    });
    return out;
  },
  gated_delta_rule_decode(dev, c) {
    const p = { b: num(c, 'b'), hg: num(c, 'hg'), h: num(c, 'h'), k: num(c, 'k'), v: num(c, 'v') };
    const q = randomBuffer(dev, 'bf16', [p.b, p.hg, p.k], 1 / 8, 21);
    const k = randomBuffer(dev, 'bf16', [p.b, p.hg, p.k], 1 / 8, 22);
    const v = randomBuffer(dev, 'bf16', [p.b, p.h, p.v], 1, 23);
    const g = rangeBuffer(dev, [p.b, p.h], -0.1, -0.005, 24);
    const beta = rangeBuffer(dev, [p.b, p.h], 0.1, 0.9, 25);
    const state = randomBuffer(dev, 'f32', [p.b, p.h, p.v, p.k], 0.1, 26);
    const output = dev.alloc('bf16', [p.b, p.h, p.v]);
    return [{
      variant: 'bf16, state in place', buffers: [q, k, v, g, beta, state, output],
      record: (enc) => gatedDeltaNetDecode(enc, {
        q, k, v, g, beta, state, output, batch: p.b, nQkHeads: p.hg, nHeads: p.h, kDim: p.k, vDim: p.v,
      }),
    }];
  },
};

function median(a: readonly number[]): number {
  const s = [...a].sort((x, y) => x - y);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** Device time of one commit of `iters` recordings, in ns. */
function commitOnce(dev: Device, p: Prepared, iters: number): number {
  const enc = dev.encoder();
  try {
    for (let i = 0; i < iters; i++) p.record(enc);
    enc.commitAndWait();
    return enc.gpuTimeNs;
  } finally {
    enc.release();
  }
}

export interface OursResult {
  kernel: string;
  shape: string;
  variant: string;
  us: number | null;
  minUs: number | null;
  iters: number;
  repeats: number;
  note?: string;
}

/** Device times of `repeats` replays of one recording of `iters` recordings, in ns each. */
function replays(dev: Device, p: Prepared, iters: number, repeats: number): number[] {
  const enc = dev.encoder({ replayable: true });
  try {
    for (let i = 0; i < iters; i++) p.record(enc);
    enc.commitAndWait();
    enc.replayAndWait(); // the first replay captures the graph
    const per: number[] = [];
    for (let r = 0; r < repeats; r++) {
      enc.replayAndWait();
      per.push(enc.gpuTimeNs);
    }
    return per;
  } finally {
    enc.release();
  }
}

function timeCase(dev: Device, p: Prepared, args: Args): { us: number; minUs: number; iters: number } {
  commitOnce(dev, p, 1); // compile + first touch
  const probe = Math.max(commitOnce(dev, p, 1), 1);
  const iters = Math.max(1, Math.min(args.smoke ? 4 : 2000, Math.round((args.targetMs * 1e6) / probe)));
  let per: number[];
  if (args.graphs) {
    per = replays(dev, p, iters, args.repeats).map((ns) => ns / iters);
  } else {
    commitOnce(dev, p, iters); // warm-up at the timed size
    per = [];
    for (let r = 0; r < args.repeats; r++) per.push(commitOnce(dev, p, iters) / iters);
  }
  return { us: median(per) / 1e3, minUs: Math.min(...per) / 1e3, iters };
}

function main(): void {
  const args = parseArgs(process.argv.slice(2));
  const shapes = JSON.parse(readFileSync(join(import.meta.dir, 'shapes.json'), 'utf8')) as { full: Case[]; smoke: Case[] };
  const cases = args.smoke ? shapes.smoke : shapes.full;
  using dev = Device.open();
  console.log(`ours: backend ${dev.backend}, device ${dev.name}, ${cases.length} cases, repeats ${args.repeats}, target ${args.targetMs} ms per commit${args.graphs ? ", timed as replays of one recording" : ""}`);
  const results: OursResult[] = [];
  // Written after every case, so a run stopped part way keeps what it timed.
  const save = (): void => {
    if (args.json === null) return;
    const doc = { backend: dev.backend, device: dev.name, date: new Date().toISOString(), smoke: args.smoke, graphs: args.graphs, results };
    writeFileSync(args.json, JSON.stringify(doc, null, 1) + '\n');
  };
  for (const c of cases) {
    const shape = shapeKey(c);
    const prep = PREPARERS[c.kernel];
    if (prep === undefined) {
      console.log(`ours: ${c.kernel} [${shape}]: skipped, no preparer for this kernel`);
      results.push({ kernel: c.kernel, shape, variant: '-', us: null, minUs: null, iters: 0, repeats: 0, note: 'no preparer' });
      continue;
    }
    let prepared: Prepared[] = [];
    try {
      const p = prep(dev, c);
      if (typeof p === 'string') throw new Error(p);
      prepared = p;
      for (const one of prepared) {
        const t = timeCase(dev, one, args);
        console.log(`ours: ${c.kernel} [${shape}] ${one.variant}: ${t.us.toFixed(2)} us (min ${t.minUs.toFixed(2)}, ${t.iters} per commit)`);
        results.push({ kernel: c.kernel, shape, variant: one.variant, us: t.us, minUs: t.minUs, iters: t.iters, repeats: args.repeats });
      }
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      console.log(`ours: ${c.kernel} [${shape}]: FAILED: ${why}`);
      results.push({ kernel: c.kernel, shape, variant: '-', us: null, minUs: null, iters: 0, repeats: 0, note: `failed: ${why}` });
    } finally {
      for (const one of prepared) for (const b of one.buffers) b.release();
    }
    save();
  }
  save();
}

if (import.meta.main) main();
