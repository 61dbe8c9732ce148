// Times rms_norm, softmax, softcap and the dense decode products with the
// encoder's GPU time, at the shapes of Gemma 4 and Qwen3.6 layers: per case a warm-up commit, then 5
// commits of `iters` back-to-back dispatches; time per dispatch = median of
// gpuTimeNs / iters. Prints the time, the bytes each dispatch must move
// (inputs read once, outputs written once) and the rate they imply.
//
//   bun run bench/glue.ts [--small]      (--small: shapes the emulator runs)
//
// Backend: MLX_NATIVE_BACKEND or the default. Inputs are random, never zeros.

import { Device, type Buffer, type DType, type Encoder } from '../ts/index.ts';
import { denseMatmul, denseMatvec } from '../ts/ops/dense.ts';
import { rmsNorm, rmsNormPerHead } from '../ts/ops/rms_norm.ts';
import { softcap, softmax } from '../ts/ops/softmax.ts';

const small = process.argv.includes('--small');
const dev = Device.open();
const size = (d: DType) => (d === 'f32' ? 4 : 2);

function random(dtype: DType, shape: number[]): Buffer {
  const n = shape.reduce((a, b) => a * b, 1);
  const data = new Float32Array(n);
  let s = 0x9e3779b9;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    data[i] = (s / 2 ** 32) * 4 - 2;
  }
  return dev.upload(dtype, shape, data);
}

interface Case { name: string; bytes: number; record: (enc: Encoder) => void }

function cases(): Case[] {
  const out: Case[] = [];
  const rows = small ? 8 : 16384;
  for (const dt of ['bf16', 'f32'] as const) {
    const dim = small ? 256 : 5376; // Gemma 4 31B hidden size
    const x = random(dt, [rows, dim]);
    const w = random(dt, [dim]);
    const y = dev.alloc(dt, [rows, dim]);
    out.push({ name: `rms_norm ${dt} [${rows}, ${dim}]`, bytes: 2 * rows * dim * size(dt), record: (e) => rmsNorm(e, { input: x, weight: w, output: y, rows, dim }) });
    const x1 = random(dt, [1, dim]);
    const y1 = dev.alloc(dt, [1, dim]);
    out.push({ name: `rms_norm ${dt} [1, ${dim}] (decode)`, bytes: 2 * dim * size(dt), record: (e) => rmsNorm(e, { input: x1, weight: w, output: y1, rows: 1, dim }) });
  }
  {
    const [tokens, heads, headDim] = small ? [4, 2, 128] : [8192, 32, 128]; // Qwen3 q-norm
    const q = random('bf16', [tokens, heads, headDim]);
    const w = random('bf16', [headDim]);
    const y = dev.alloc('bf16', [tokens, heads, headDim]);
    out.push({ name: `rms_norm_per_head bf16 [${tokens}, ${heads}, ${headDim}]`, bytes: 4 * tokens * heads * headDim,
      record: (e) => rmsNormPerHead(e, { input: q, weight: w, output: y, tokens, heads, headDim }) });
  }
  {
    const [heads, seq] = small ? [2, 64] : [32, 2048];
    const s = random('f32', [heads * seq, seq]);
    const mask = dev.upload('bf16', [seq, seq], Array.from({ length: seq * seq }, (_, i) => (i % seq > Math.floor(i / seq) ? -Infinity : 0)));
    const p = dev.alloc('f32', [heads * seq, seq]);
    out.push({ name: `softmax f32 scale+softcap+mask [${heads}x${seq}, ${seq}]`, bytes: 8 * heads * seq * seq + 2 * seq * seq,
      record: (e) => softmax(e, { input: s, output: p, rows: heads * seq, cols: seq, scale: 0.0884, softcap: 50, mask, seqQ: seq }) });
  }
  for (const [r, c, dt] of [[small ? 2 : 4096, small ? 512 : 8192, 'bf16'], [small ? 2 : 64, small ? 4096 : 262144, 'f32'], [1, small ? 4096 : 262144, 'f32']] as const) {
    const x = random(dt, [r, c]);
    const y = dev.alloc(dt, [r, c]);
    out.push({ name: `softmax ${dt} [${r}, ${c}]`, bytes: 2 * r * c * size(dt), record: (e) => softmax(e, { input: x, output: y, rows: r, cols: c }) });
  }
  {
    const n = small ? 4096 : 64 * 262144;
    const x = random('bf16', [n]);
    const y = dev.alloc('bf16', [n]);
    out.push({ name: `softcap bf16 [${n}] cap 30`, bytes: 4 * n, record: (e) => softcap(e, { input: x, output: y, cap: 30 }) });
  }
  out.push(...denseCases());
  return out;
}

// ---- dense: decode products, memory-bound on the weight (bench/matmul.ts has the matrix shapes) ----
// bytes: the weight read once, x read, y written; the floor is bytes / copy bandwidth.
function denseCases(): Case[] {
  const out: Case[] = [];
  // Qwen3.6 27B MLP up (5120 -> 17408), one token and eight (dense_mv_bf16).
  for (const m of [1, 8]) {
    const [n, k] = small ? [512, 256] : [17408, 5120];
    const x = random('bf16', [m, k]);
    const w = random('bf16', [n, k]);
    const y = dev.alloc('bf16', [m, n]);
    out.push({ name: `dense_mv_bf16 [${m}, ${k}] x [${n}, ${k}]^T`, bytes: 2 * (n * k + m * k + m * n),
      record: (e) => denseMatmul(e, { x, weight: w, output: y, m, n, k }) });
  }
  // Gemma 4's vocabulary projection (5376 -> 262144) from an f32 hidden state (mlx-native's dense_matvec_bf16w_f32io).
  {
    const [n, k] = small ? [4096, 256] : [262144, 5376];
    const a = random('f32', [1, k]);
    const b = random('bf16', [n, k]);
    const c = dev.alloc('f32', [1, n]);
    out.push({ name: `dense_matvec_bf16w_f32io [1, ${k}] x [${n}, ${k}]^T`, bytes: 2 * n * k + 4 * (k + n),
      record: (e) => denseMatvec(e, { a, b, output: c, m: 1, n, k }) });
  }
  return out;
}

function time(c: Case, iters: number): number {
  const enc = dev.encoder();
  for (let i = 0; i < iters; i++) c.record(enc);
  enc.commitAndWait();
  const t = enc.gpuTimeNs / iters;
  enc.release();
  return t;
}

console.log(`device: ${dev.name} (${dev.backend})`);
for (const c of cases()) {
  const probe = time(c, 1);
  const iters = Math.max(1, Math.min(200, Math.round(2e7 / Math.max(probe, 1))));
  const ts = Array.from({ length: 5 }, () => time(c, iters)).sort((a, b) => a - b);
  const ns = ts[2]!;
  console.log(`${c.name.padEnd(52)} ${(ns / 1000).toFixed(2).padStart(9)} us  ${(c.bytes / 1e6).toFixed(1).padStart(8)} MB  ${(c.bytes / ns).toFixed(0).padStart(5)} GB/s`);
}
dev.close();
