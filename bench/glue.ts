// Times rms_norm, softmax and softcap (and the sample family: argmax, top-k,
// sampling) with the encoder's GPU time, at the
// shapes of Gemma 4 and Qwen3.6 layers: per case a warm-up commit, then 5
// commits of `iters` back-to-back dispatches; time per dispatch = median of
// gpuTimeNs / iters. Prints the time, the bytes each dispatch must move
// (inputs read once, outputs written once) and the rate they imply.
//
//   bun run bench/glue.ts [--small]      (--small: shapes the emulator runs)
//
// Backend: MLX_NATIVE_BACKEND or the default. Inputs are random, never zeros.

import { Device, type Buffer, type DType, type Encoder } from '../ts/index.ts';
import { rmsNorm, rmsNormPerHead } from '../ts/ops/rms_norm.ts';
import { softcap, softmax } from '../ts/ops/softmax.ts';
import { argmax, argmaxScratchElements, philox4x32, sample, sampleScratchElements, softmaxSample, topK, topKScratchElements } from '../ts/ops/sample.ts';

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
  out.push(...sampleCases());
  return out;
}

// ---- sample: argmax, top-k, softmax_sample, the sampler, Philox ----
// Gemma 4's vocabulary (262144); decode is one row, the large shape 64 rows
// (a batch of decode streams, or speculative verification). Bytes: the floor,
// the logits read once and the outputs written once (the sampler's first pass
// also writes z, as many bytes again, which its floor leaves out). At one row
// the floor is a microsecond or less (1 MB at 3.3 TB/s is 0.3 us): the time
// is launch and synchronization latency, two dispatches per op.
function sampleCases(): Case[] {
  const out: Case[] = [];
  const vocab = small ? 8192 : 262144;
  const big = small ? 2 : 64;
  /** Logits N(0, sigma^2): at sigma 6 the 0.95 nucleus of 262144 tokens is about 44 tokens, at sigma 2 about 95000. */
  const peaked = (rows: number, sigma: number): Buffer => {
    const data = new Float32Array(rows * vocab);
    let s = 0x2545f491;
    for (let i = 0; i < data.length; i += 2) {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      const u = (s + 1) / 2 ** 32;
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      const r = sigma * Math.sqrt(-2 * Math.log(u));
      data[i] = r * Math.cos((2 * Math.PI * s) / 2 ** 32);
      if (i + 1 < data.length) data[i + 1] = r * Math.sin((2 * Math.PI * s) / 2 ** 32);
    }
    return dev.upload('f32', [rows, vocab], data);
  };
  for (const rows of [big, 1]) {
    const x = random('f32', [rows, vocab]);
    const idx = dev.alloc('u32', [rows]);
    const val = dev.alloc('f32', [rows]);
    const scratch = dev.alloc('u32', [argmaxScratchElements(rows, vocab)]);
    out.push({ name: `argmax f32 [${rows}, ${vocab}] two passes`, bytes: 4 * rows * vocab,
      record: (e) => argmax(e, { input: x, outIndex: idx, outValue: val, rows, nElements: vocab, scratch }) });
    if (rows === 1) {
      out.push({ name: `argmax f32 [1, ${vocab}] one threadgroup (mlx-native's)`, bytes: 4 * vocab,
        record: (e) => argmax(e, { input: x, outIndex: idx, outValue: val, rows, nElements: vocab }) });
    }
    const k = rows === 1 ? 256 : 64;
    const ti = dev.alloc('u32', [rows, k]);
    const tv = dev.alloc('f32', [rows, k]);
    const ts = dev.alloc('u32', [topKScratchElements(rows, vocab, k)]);
    out.push({ name: `top_k f32 [${rows}, ${vocab}] k ${k}`, bytes: 4 * rows * vocab + 8 * rows * k,
      record: (e) => topK(e, { input: x, outIndices: ti, outValues: tv, rows, nElements: vocab, k, scratch: ts }) });
  }
  const configs: [string, { temperature: number; topK?: number; topP?: number; minP?: number; repetitionPenalty?: number }, number][] = [
    ['T 1, top-k 64, top-p 0.95 (Gemma 4)', { temperature: 1, topK: 64, topP: 0.95 }, 6],
    ['T 0.7, top-k 20, top-p 0.8, rp 1.05 x 64 ids (Qwen3.6)', { temperature: 0.7, topK: 20, topP: 0.8, repetitionPenalty: 1.05 }, 6],
    ['T 1, no filter', { temperature: 1 }, 6],
    ['T 1, top-p 0.95 alone, N(0, 36) logits', { temperature: 1, topP: 0.95 }, 6],
    ['T 1, top-p 0.95 alone, N(0, 4) logits (whole-row path)', { temperature: 1, topP: 0.95 }, 2],
  ];
  let counter = 0;
  for (const rows of [big, 1]) {
    const prevTokens = dev.upload('u32', [rows, 64], Array.from({ length: rows * 64 }, (_, i) => (i * 40503) % vocab));
    const token = dev.alloc('u32', [rows]);
    const logprob = dev.alloc('f32', [rows]);
    const scratch = dev.alloc('u32', [sampleScratchElements(rows, vocab)]);
    for (const [what, o, sigma] of rows === 1 ? configs : configs.slice(0, 1)) {
      const logits = peaked(rows, sigma);
      const prev = o.repetitionPenalty !== undefined ? { prevTokens, nPrev: 64 } : {};
      out.push({ name: `sample [${rows}, ${vocab}] ${what}`, bytes: 4 * rows * vocab,
        record: (e) => sample(e, { logits, outToken: token, outLogprob: logprob, scratch, rows, vocab, ...o, ...prev, seed: 1, counter: counter++ }) });
    }
  }
  {
    const logits = peaked(1, 6);
    const probs = dev.alloc('f32', [vocab]);
    const token = dev.alloc('u32', [1]);
    const logprob = dev.alloc('f32', [1]);
    out.push({ name: `softmax_sample f32 [${vocab}] (mlx-native's, one threadgroup)`, bytes: 8 * vocab,
      record: (e) => softmaxSample(e, { logits: logits.view('f32', [vocab]), scratch: probs, outToken: token, outLogprob: logprob,
        nElements: vocab, temperature: 1, randomVal: 0.5 }) });
  }
  {
    const n = small ? 4096 : 2 ** 22;
    const bits = dev.alloc('u32', [n, 4]);
    out.push({ name: `philox4x32 [${n}, 4] u32`, bytes: 16 * n,
      record: (e) => philox4x32(e, { output: bits, n, key: [1, 2], counter: [0, 0, 0, 0] }) });
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
