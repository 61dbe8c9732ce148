// Times flash_attn_prefill (ts/ops/flash_attn_prefill.ts) with the encoder's
// GPU time at the prefill shapes of issue 15: T 8192 causal at head dims 128
// and 256 (and 512, Gemma 4's global layers), 32 query / 8 KV heads, bf16;
// a sliding window of 1024 over T 32768 and over T 8192 (time should follow
// T x window, not T^2); a prefill continuing earlier turns; eight sequences
// in one call. Per case a warm-up commit, then 5 commits of `iters`
// back-to-back dispatches; time per dispatch = median of gpuTimeNs / iters.
// bench/attention_peers.py times torch SDPA (each backend) and FlashAttention
// at the same shapes and measures the bf16 matrix rate it divides by.
//
//   bun run bench/attention.ts [--small] [--peak-tflops T]
//
// --small: shapes the emulator runs. Flops: 4 D per (query head, visible
// key) (q.k and p.v), counting only the keys each query sees (causal: T^2 / 2
// per head, the convention of FlashAttention's reports: 2 * 2 * B * H * T^2
// / 2 * D). With --peak-tflops (the bf16 matmul rate attention_peers.py
// printed on the same machine) each row gets its floor, flops / peak, and
// our fraction of it. Bytes: q, k, v read once and out written once (the
// memory floor, far below the compute floor at these shapes).
// Backend: MLX_NATIVE_BACKEND or the default. Inputs are random, never zeros.

import { Device, type Buffer, type Encoder } from '../ts/index.ts';
import { flashAttnPrefill, type FlashAttnPrefillArgs } from '../ts/ops/flash_attn_prefill.ts';

const small = process.argv.includes('--small');
const arg = (name: string): number | null => {
  const i = process.argv.indexOf(name);
  return i < 0 ? null : Number(process.argv[i + 1]);
};
const peakTflops = arg('--peak-tflops');
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

function attention(s: Shape): Case {
  const off = s.tk - s.tq;
  const seqs = s.seqs ?? 0;
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
  const name = `${s.label} D=${s.d} H=${s.h}/${s.hkv} ${seqs > 0 ? `${seqs} seqs x ` : `B=${s.batch} `}Tq=${s.tq} Tk=${s.tk}` +
    `${s.causal ? ' causal' : ''}${s.window ? ` window ${s.window}` : ''}`;
  return {
    name,
    flops: 4 * n * s.h * s.d * visible(s.tq, s.tk, off, s.causal, s.window ?? 0),
    bytes: 2 * s.d * (2 * rowsQ * s.h + 2 * rowsK * s.hkv),
    record: (e) => flashAttnPrefill(e, args),
  };
}

function cases(): Case[] {
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

function time(c: Case, iters: number): number {
  const enc = dev.encoder();
  for (let i = 0; i < iters; i++) c.record(enc);
  enc.commitAndWait();
  const t = enc.gpuTimeNs / iters;
  enc.release();
  return t;
}

console.log(`device: ${dev.name} (${dev.backend})${peakTflops ? `, peak ${peakTflops} TFLOP/s` : ''}`);
for (const c of cases()) {
  const probe = time(c, 1);
  const iters = Math.max(1, Math.min(100, Math.round(1e8 / Math.max(probe, 1))));
  const ts = Array.from({ length: 5 }, () => time(c, iters)).sort((a, b) => a - b);
  const ns = ts[2]!;
  const floor = peakTflops ? `  floor ${(c.flops / (peakTflops * 1e3) / 1000).toFixed(1).padStart(8)} us (${((100 * c.flops) / (peakTflops * 1e3) / ns).toFixed(0)}% of peak)` : '';
  console.log(`${c.name.padEnd(72)} ${(ns / 1000).toFixed(1).padStart(10)} us  ${(c.flops / ns / 1e3).toFixed(1).padStart(6)} TFLOP/s  ` +
    `${(c.bytes / ns).toFixed(0).padStart(5)} GB/s${floor}`);
}
dev.close();
