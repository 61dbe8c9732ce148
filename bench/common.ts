// What the benchmark scripts of ours share: random device buffers (uniform
// values, or random u32 words for packed quantized weights, where every bit
// pattern is a valid row) and the GPU time of a recorded dispatch.

import type { Buffer, Device, DType, Encoder } from '../ts/index.ts';

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
