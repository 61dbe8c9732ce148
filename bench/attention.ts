// Times flash_attn_prefill (ts/ops/flash_attn_prefill.ts) with the encoder's
// GPU time at the prefill shapes of issue 15: T 8192 causal at head dims 128
// and 256 (and 512, Gemma 4's global layers), 32 query / 8 KV heads, bf16;
// a sliding window of 1024 over T 32768 and over T 8192 (time should follow
// T x window, not T^2); a prefill continuing earlier turns; eight sequences
// in one call. Then decode attention (flash_attn_vec, flashAttnVecCases):
// one query token per sequence, 16 query / 2 KV heads (Qwen3.6's full
// attention, Gemma 4's layers), f32 query, bf16 K/V (f16 and f32 for
// comparison): D 256 over 32768 keys at batch 1 and 8, D 512 (Gemma 4
// global), D 128, a sliding layer's ring of 1024 read at position 32775,
// and 8 sequences of different lengths in one call.
// Per case a warm-up commit, then 5 commits of `iters`
// back-to-back dispatches; time per dispatch = median of gpuTimeNs / iters.
// bench/attention_peers.py times torch SDPA (each backend) and FlashAttention
// at the same shapes and measures the bf16 matrix rate it divides by.
//
//   bun run bench/attention.ts [--small] [--peak-tflops T] [--copy-gbs G] [--only TEXT]...
//
// --only (repeatable) keeps the cases whose name holds one of the texts; the
// others are not built.
//
// --small: shapes the emulator runs. Flops: 4 D per (query head, visible
// key) (q.k and p.v), counting only the keys each query sees (causal: T^2 / 2
// per head, the convention of FlashAttention's reports: 2 * 2 * B * H * T^2
// / 2 * D). With --peak-tflops (the bf16 matmul rate attention_peers.py
// printed on the same machine) each row gets its floor, flops / peak, and
// our fraction of it. Bytes: q, k, v read once and out written once (the
// memory floor, far below the compute floor at the prefill shapes); for
// decode, the K and V bytes read (the floor the issue states). With
// --copy-gbs (the copy bandwidth attention_peers.py printed) the decode rows
// get their fraction of it.
// Backend: MLX_NATIVE_BACKEND or the default. Inputs are random, never zeros.

import { Device, type Buffer, type Encoder } from '../ts/index.ts';
import { flashAttnPrefill, type FlashAttnPrefillArgs } from '../ts/ops/flash_attn_prefill.ts';
import { flashAttnVec, flashAttnVecTmpElements, flashAttnVecVarlen, type FlashAttnVecKvDtype } from '../ts/ops/flash_attn_vec.ts';
import { uniformBuffer } from './common.ts';

const small = process.argv.includes('--small');
const arg = (name: string): number | null => {
  const i = process.argv.indexOf(name);
  return i < 0 ? null : Number(process.argv[i + 1]);
};
const only = process.argv.flatMap((a, i) => (a === '--only' && i + 1 < process.argv.length ? [process.argv[i + 1]!] : []));
const wanted = (name: string): boolean => only.length === 0 || only.some((o) => name.includes(o));
const peakTflops = arg('--peak-tflops');
const copyGbs = arg('--copy-gbs');
const dev = Device.open();

/** n random bf16 values in (-2, 2): one random block written over and over (a host fill of GBs is slow). */
function random(n: number): Buffer {
  const b = dev.alloc('bf16', [n]);
  const block = new Uint16Array(Math.min(n, 1 << 22));
  let s = 0x9e3779b9;
  for (let i = 0; i < block.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    block[i] = (s >>> 16) & 0xbfff;
  }
  for (let at = 0; at < n; at += block.length) b.write(block.subarray(0, Math.min(block.length, n - at)), at * 2);
  return b;
}

/** Keys the queries of one head see: query i at position off + i, keys j < tk. */
function visible(tq: number, tk: number, off: number, causal: boolean, window: number): number {
  let n = 0;
  for (let i = 0; i < tq; i++) {
    const p = off + i;
    const hi = causal ? Math.min(tk, p + 1) : tk;
    const lo = window > 0 ? Math.max(0, p - window + 1) : 0;
    n += Math.max(0, hi - lo);
  }
  return n;
}

interface Case {
  name: string;
  flops: number;
  bytes: number;
  /** Memory-bound (decode): the row reports its fraction of --copy-gbs. */
  memoryBound?: boolean;
  record: (enc: Encoder) => void;
}

interface Shape {
  label: string;
  batch: number;
  h: number;
  hkv: number;
  d: number;
  tq: number;
  tk: number;
  causal: boolean;
  window?: number;
  /** Sequences of equal length in one call (cu_seqlens) instead of a batch. */
  seqs?: number;
}

function attention(s: Shape): Case | null {
  const off = s.tk - s.tq;
  const seqs = s.seqs ?? 0;
  const name = `${s.label} D=${s.d} H=${s.h}/${s.hkv} ${seqs > 0 ? `${seqs} seqs x ` : `B=${s.batch} `}Tq=${s.tq} Tk=${s.tk}` +
    `${s.causal ? ' causal' : ''}${s.window ? ` window ${s.window}` : ''}`;
  if (!wanted(name)) return null;
  const rowsQ = seqs > 0 ? seqs * s.tq : s.batch * s.tq;
  const rowsK = seqs > 0 ? seqs * s.tk : s.batch * s.tk;
  const q = random(rowsQ * s.h * s.d);
  const k = random(rowsK * s.hkv * s.d);
  const v = random(rowsK * s.hkv * s.d);
  const out = dev.alloc('bf16', [rowsQ * s.h * s.d]);
  const args: FlashAttnPrefillArgs = {
    q, k, v, out, batch: seqs > 0 ? seqs : s.batch, nHeads: s.h, nKvHeads: s.hkv, headDim: s.d,
    seqLenQ: seqs > 0 ? rowsQ : s.tq, seqLenK: seqs > 0 ? rowsK : s.tk, causal: s.causal,
    ...(off > 0 && seqs === 0 ? { qOffset: off } : {}), ...(s.window ? { slidingWindow: s.window } : {}),
  };
  if (seqs > 0) {
    args.cuSeqlensQ = dev.upload('u32', [seqs + 1], Array.from({ length: seqs + 1 }, (_, i) => i * s.tq));
    args.cuSeqlensK = dev.upload('u32', [seqs + 1], Array.from({ length: seqs + 1 }, (_, i) => i * s.tk));
    args.maxSeqLenQ = s.tq;
  }
  const n = Math.max(seqs, s.batch);
  return {
    name,
    flops: 4 * n * s.h * s.d * visible(s.tq, s.tk, off, s.causal, s.window ?? 0),
    bytes: 2 * s.d * (2 * rowsQ * s.h + 2 * rowsK * s.hkv),
    record: (e) => flashAttnPrefill(e, args),
  };
}

function cases(): Case[] {
  return [...prefillCases(), ...flashAttnVecCases()].filter((c): c is Case => c !== null);
}

function prefillCases(): (Case | null)[] {
  if (small) {
    return [
      attention({ label: 'prefill', batch: 1, h: 4, hkv: 2, d: 128, tq: 64, tk: 64, causal: true }),
      attention({ label: 'sliding', batch: 1, h: 2, hkv: 1, d: 256, tq: 96, tk: 96, causal: true, window: 32 }),
    ];
  }
  const [h, hkv] = [32, 8];
  return [
    attention({ label: 'prefill', batch: 1, h, hkv, d: 128, tq: 8192, tk: 8192, causal: true }),
    attention({ label: 'prefill', batch: 1, h, hkv, d: 256, tq: 8192, tk: 8192, causal: true }),
    attention({ label: 'prefill', batch: 1, h, hkv, d: 512, tq: 8192, tk: 8192, causal: true }),
    attention({ label: 'prefill', batch: 1, h, hkv, d: 128, tq: 8192, tk: 8192, causal: false }),
    attention({ label: 'sliding', batch: 1, h, hkv, d: 256, tq: 32768, tk: 32768, causal: true, window: 1024 }),
    attention({ label: 'sliding', batch: 1, h, hkv, d: 256, tq: 8192, tk: 8192, causal: true, window: 1024 }),
    attention({ label: 'sliding', batch: 1, h, hkv, d: 128, tq: 32768, tk: 32768, causal: true, window: 1024 }),
    attention({ label: 'continue', batch: 1, h, hkv, d: 256, tq: 2048, tk: 8192, causal: true }),
    attention({ label: 'varlen', batch: 1, h, hkv, d: 128, tq: 1024, tk: 1024, causal: true, seqs: 8 }),
  ];
}

// ---- flash_attn_vec: decode attention (issue 15 item 2) ----
// One query token per sequence over its KV cache, GQA, f32 query and output.
// Bytes: the K and V rows read (the floor: bytes / copy bandwidth); flops 4 D
// per (query head, visible key).

interface DecodeShape {
  label: string;
  batch: number;
  h: number;
  hkv: number;
  d: number;
  kv: FlashAttnVecKvDtype;
  /** Slots per sequence and KV head. */
  cap: number;
  /** Positions written per sequence (a ring: any; a global cache: at most cap). */
  lens: number[];
  ring?: boolean;
  nwg: number;
}

function decode(s: DecodeShape): Case | null {
  const uniform = !s.ring && s.lens.every((x) => x === s.lens[0]);
  const lens = uniform ? `kv=${s.lens[0]}` : s.ring ? `ring ${s.cap} at ${s.lens[0]}` : `lens ${s.lens.join(',')}`;
  const name = `${s.label} D=${s.d} H=${s.h}/${s.hkv} B=${s.batch} ${lens} ${s.kv} K/V nwg ${s.nwg}`;
  if (!wanted(name)) return null;
  const q = uniformBuffer(dev, 'f32', [s.batch, s.h, s.d], 2);
  const k = uniformBuffer(dev, s.kv, [s.batch, s.hkv, s.cap, s.d], 2);
  const v = uniformBuffer(dev, s.kv, [s.batch, s.hkv, s.cap, s.d], 2);
  const out = dev.alloc('f32', [s.batch, s.h, s.d]);
  const common = { q, k, v, out, batch: s.batch, nHeads: s.h, nKvHeads: s.hkv, headDim: s.d, kvCapacity: s.cap, scale: 1 / Math.sqrt(s.d),
    mask: 'causal' as const, nwg: s.nwg };
  const tmp = s.nwg > 1 ? dev.alloc('f32', [flashAttnVecTmpElements(common)]) : undefined;
  const visible = s.lens.map((len) => Math.min(len, s.cap));   // a ring holds its last cap positions, a global cache those below cap
  const keys = visible.reduce((a, b) => a + b, 0);
  let record: (e: Encoder) => void;
  if (uniform) {
    const args = { ...common, tmp, kvSeqLen: s.lens[0]! };
    record = (e) => flashAttnVec(e, args);
  } else {
    const args = { ...common, tmp, seqLens: dev.upload('u32', [s.batch], s.lens), ring: s.ring === true };
    record = (e) => flashAttnVecVarlen(e, args);
  }
  const bytesPer = s.kv === 'f32' ? 4 : 2;
  return {
    name,
    flops: 4 * s.h * s.d * keys,
    bytes: 2 * s.hkv * s.d * bytesPer * keys,
    memoryBound: true,
    record,
  };
}

function flashAttnVecCases(): (Case | null)[] {
  if (small) {
    return [
      decode({ label: 'decode', batch: 2, h: 4, hkv: 2, d: 256, kv: 'bf16', cap: 256, lens: [256, 256], nwg: 4 }),
      decode({ label: 'decode ring', batch: 2, h: 4, hkv: 2, d: 256, kv: 'bf16', cap: 64, lens: [300, 301], ring: true, nwg: 2 }),
      decode({ label: 'decode varlen', batch: 2, h: 4, hkv: 2, d: 128, kv: 'f16', cap: 128, lens: [100, 7], nwg: 2 }),
    ];
  }
  const [h, hkv, n] = [16, 2, 32768];
  return [
    decode({ label: 'decode', batch: 1, h, hkv, d: 256, kv: 'bf16', cap: n, lens: [n], nwg: 32 }),
    decode({ label: 'decode', batch: 1, h, hkv, d: 256, kv: 'bf16', cap: n, lens: [n], nwg: 16 }),
    decode({ label: 'decode', batch: 8, h, hkv, d: 256, kv: 'bf16', cap: n, lens: new Array(8).fill(n), nwg: 8 }),
    decode({ label: 'decode', batch: 8, h, hkv, d: 256, kv: 'bf16', cap: n, lens: new Array(8).fill(n), nwg: 16 }),
    decode({ label: 'decode', batch: 1, h, hkv, d: 256, kv: 'f16', cap: n, lens: [n], nwg: 32 }),
    decode({ label: 'decode', batch: 8, h, hkv, d: 256, kv: 'f16', cap: n, lens: new Array(8).fill(n), nwg: 8 }),
    decode({ label: 'decode', batch: 1, h, hkv, d: 256, kv: 'f32', cap: n, lens: [n], nwg: 32 }),
    decode({ label: 'decode global', batch: 1, h, hkv, d: 512, kv: 'bf16', cap: n, lens: [n], nwg: 32 }),
    decode({ label: 'decode', batch: 8, h, hkv, d: 128, kv: 'bf16', cap: n, lens: new Array(8).fill(n), nwg: 8 }),
    decode({ label: 'decode sliding', batch: 1, h, hkv, d: 256, kv: 'bf16', cap: 1024, lens: [n + 7], ring: true, nwg: 8 }),
    decode({ label: 'decode sliding', batch: 8, h, hkv, d: 256, kv: 'bf16', cap: 1024, lens: new Array(8).fill(n + 7), ring: true, nwg: 8 }),
    decode({ label: 'decode varlen', batch: 8, h, hkv, d: 256, kv: 'bf16', cap: n,
      lens: [32768, 16384, 8192, 4096, 30000, 1, 777, 20000], nwg: 16 }),
  ];
}
// ---- end of flash_attn_vec ----

function time(c: Case, iters: number): number {
  const enc = dev.encoder();
  for (let i = 0; i < iters; i++) c.record(enc);
  enc.commitAndWait();
  const t = enc.gpuTimeNs / iters;
  enc.release();
  return t;
}

console.log(`device: ${dev.name} (${dev.backend})${peakTflops ? `, peak ${peakTflops} TFLOP/s` : ''}${copyGbs ? `, copy ${copyGbs} GB/s` : ''}`);
for (const c of cases()) {
  const probe = time(c, 1);
  const iters = Math.max(1, Math.min(100, Math.round(1e8 / Math.max(probe, 1))));
  const ts = Array.from({ length: 5 }, () => time(c, iters)).sort((a, b) => a - b);
  const ns = ts[2]!;
  const floor = c.memoryBound
    ? (copyGbs ? `  floor ${(c.bytes / copyGbs / 1000).toFixed(1).padStart(8)} us (${((100 * c.bytes) / copyGbs / ns).toFixed(0)}% of copy)` : '')
    : peakTflops ? `  floor ${(c.flops / (peakTflops * 1e3) / 1000).toFixed(1).padStart(8)} us (${((100 * c.flops) / (peakTflops * 1e3) / ns).toFixed(0)}% of peak)` : '';
  console.log(`${c.name.padEnd(72)} ${(ns / 1000).toFixed(1).padStart(10)} us  ${(c.flops / ns / 1e3).toFixed(1).padStart(6)} TFLOP/s  ` +
    `${(c.bytes / ns).toFixed(0).padStart(5)} GB/s${floor}`);
}
dev.close();
