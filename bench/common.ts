// What the benchmark scripts of ours share: random device buffers (uniform
// values, random u32 words for packed quantized weights, where every bit
// pattern is a valid row, or GGUF blocks with their scales set) and the GPU
// time of a recorded dispatch.

import { f32ToF16Bits, type Buffer, type Device, type DType, type Encoder } from '../ts/index.ts';
import { ggmlBlockOf, type GgmlQuantType } from '../ts/ops/quantized_matmul_ggml.ts';

const BLOCK = 1 << 22;
const BYTES: Record<string, number> = { f32: 4, f16: 2, bf16: 2 };

/**
 * Uniform in [-hi, hi), never zero in practice, from a linear congruential
 * stream. Past 2^22 elements a block of 2^22 values repeats (a
 * vocabulary-sized weight does not fit in one host array, and filling
 * gigabytes value by value is slow).
 */
export function uniformBuffer(dev: Device, dtype: DType, shape: readonly number[], hi: number): Buffer {
  const n = shape.reduce((a, b) => a * b, 1);
  const blockN = Math.min(n, BLOCK);
  const data = new Float32Array(blockN);
  let s = 0x9e3779b9;
  for (let i = 0; i < blockN; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    data[i] = ((s / 2 ** 32) * 2 - 1) * hi;
  }
  if (blockN === n) return dev.upload(dtype, shape, data);
  const block = dev.upload(dtype, [blockN], data);
  const bits = block.read();
  block.release();
  const buf = dev.alloc(dtype, shape);
  for (let i = 0; i < n; i += blockN) {
    buf.write(bits.subarray(0, Math.min(blockN, n - i)), { byteOffset: i * BYTES[dtype]! });
  }
  return buf;
}

/** GPU time of one dispatch: `iters` of them back to back in one commit, in ns each. */
export function gpuTimePerDispatch(dev: Device, record: (enc: Encoder) => void, iters: number): number {
  const enc = dev.encoder();
  for (let i = 0; i < iters; i++) record(enc);
  enc.commitAndWait();
  const t = enc.gpuTimeNs / iters;
  enc.release();
  return t;
}

/** n random u32 words (the same stream, whole words), a block of 2^22 repeating past it. */
export function wordBuffer(dev: Device, n: number): Buffer {
  const blockN = Math.min(n, BLOCK);
  const data = new Uint32Array(blockN);
  let s = 0x2545f491;
  for (let i = 0; i < blockN; i++) data[i] = s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
  const buf = dev.alloc('u32', [n]);
  for (let i = 0; i < n; i += blockN) buf.write(data.subarray(0, Math.min(blockN, n - i)), { byteOffset: i * 4 });
  return buf;
}

/**
 * `blocks` GGUF blocks of a format as a u8 buffer: random bytes with every
 * f16 scale (d; dmin for Q4_K and Q5_K) 0.01, as bench/ggml_torch.py's
 * random_blocks makes them; a run of whole blocks of about 4 MB repeats past it.
 */
export function ggmlBlocksBuffer(dev: Device, type: GgmlQuantType, blocks: number): Buffer {
  const { bytes } = ggmlBlockOf(type);
  const runBlocks = Math.min(blocks, Math.floor(BLOCK / bytes));
  const run = new Uint8Array(runBlocks * bytes);
  let s = 0x6c078965;
  for (let i = 0; i < run.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    run[i] = s >>> 24;
  }
  const d = f32ToF16Bits(0.01);
  const at = type === 'Q6_K' ? 208 : 0;
  for (let b = 0; b < runBlocks; b++) {
    const o = b * bytes;
    run[o + at] = d & 0xff;
    run[o + at + 1] = d >> 8;
    if (type === 'Q4_K' || type === 'Q5_K') {
      run[o + 2] = d & 0xff;
      run[o + 3] = d >> 8;
    }
  }
  const buf = dev.alloc('u8', [blocks * bytes]);
  for (let b = 0; b < blocks; b += runBlocks) buf.write(run.subarray(0, Math.min(runBlocks, blocks - b) * bytes), { byteOffset: b * bytes });
  return buf;
}

/** Seeded routing: m tokens, each to topK distinct experts of numExperts, uniform. */
export function routing(m: number, numExperts: number, topK: number, seed: number): number[] {
  let s = seed >>> 0;
  const next = (): number => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
  const ids: number[] = [];
  for (let t = 0; t < m; t++) {
    const picked = new Set<number>();
    while (picked.size < topK) picked.add(Math.floor(next() * numExperts));
    ids.push(...picked);
  }
  return ids;
}

/**
 * Logits N(0, sigma^2) [rows, vocab] (Box-Muller over a linear congruential
 * stream, the same values every run). At sigma 6 the 0.95 nucleus of 262144
 * tokens is about 44 tokens, at sigma 2 about 95000; min-p 0.02 keeps about
 * 10 and 1000 (past the sampler's 256 candidates: its whole-row passes).
 */
export function normalLogits(dev: Device, rows: number, vocab: number, sigma: number): Buffer {
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
}
