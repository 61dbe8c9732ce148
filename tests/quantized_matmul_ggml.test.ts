// quantized_matmul_ggml: the param packers against the header and the .metal
// bindings, the launches, the block layouts against blocks written by hand
// from the format descriptions (ts/ops/quantized_matmul_ggml.ts), llama.cpp's
// reference quantizers against blocks quantized by hand and their error
// bounds, every validation rule of each op, and parity against the float64
// dequantize-then-multiply reference on every backend: Q4_0, Q8_0, Q4_K,
// Q5_K and Q6_K, the vector and the matrix forms at sizes that are not
// multiples of any tile (n = 1, 7, 33, 37, 70, 130; k one block or several,
// a multiple of the block as GGUF requires), one token, 8 and past 8, the
// input and the weight as views inside one larger allocation with garbage
// around them (a GGUF data section), whole-tensor dequantization to f32, f16
// and bf16, embedding rows from tables of blocks (a scale, a bad id
// clamped), and a GGUF file written by tests/weights-writers.ts, read by
// ts/weights and multiplied.
//
// Error measure of the products: |got - want| / sum_k |x w| per output (w
// dequantized in float64), as tests/dense.test.ts. Tolerance: TOL of the
// type the dequantized weight meets x in, grown as sqrt(k / 4096) past 4096
// (dotTolerance): Metal's vector kernels sum f32 products of an f32 weight
// (f32); its matrix kernels stage the weight as f16, x as f32 (f16); CUDA's
// tensor cores take both in f16 (f16), the weight rounded from a and b
// rounded to f16, and one token of Q8_0 or Q6_K on the int8 entry (x
// rounded to int8 a chunk of 32 values, about bf16's 8 bits: bf16)
// (ts/ops/quantized_matmul_ggml.ts).
// Dequantization and embedding rows: max |got - want| / max |want| under the
// output dtype's TOL (each value computed in f32, rounded once).

import { describe, expect, test } from 'bun:test';
import src from '../shaders/quantized_matmul_ggml.metal' with { type: 'text' };
import type { Device } from '../ts/index.ts';
import { bufferParam } from '../ts/metal-source.ts';
import { embedding } from '../ts/ops/embedding.ts';
import {
  GGML_MATMUL_MM_PARAMS_LAYOUT,
  GGML_MATMUL_SPLIT_PARAMS_LAYOUT,
  GGML_MATVEC_PARAMS_LAYOUT,
  GGML_KERNEL_TYPE,
  ggmlMatmulSplit,
  packGgmlMatmulSplitParams,
  quantizedMatmulGgmlScratchElements,
  GGML_MM_SHARED_BYTES,
  GGML_QUANT_TYPES,
  QUANTIZED_MATMUL_GGML_KERNELS,
  ggmlBlockOf,
  ggmlDequantize,
  ggmlGcTakes,
  ggmlGc8Takes,
  GC8_TILES_PER_SM,
  GC_Q6_MAX_BLOCKS,
  ggmlI8Takes,
  ggmlMvXsSharedBytes,
  ggmlMatmulCudaLaunch,
  ggmlMvCudaShared,
  ggmlMmCudaTile,
  ggmlMvCudaSharedBytes,
  ggmlMvCudaStageRow,
  ggmlMvMetalLaunch,
  ggmlRowBytesOf,
  packGgmlDequantizeParams,
  packGgmlEmbeddingParams,
  packGgmlMatmulMmParams,
  packGgmlMatvecParams,
  planQuantizedMatmulGgml,
  quantizedMatmulGgml,
  type GgmlQuantType,
  ggmlDequantizeRef,
  ggmlEmbeddingRef,
  ggmlMatmulRef,
  ggmlQuantize,
} from '../ts/ops/quantized_matmul_ggml.ts';
import { structSize } from '../ts/params.ts';
import { record, type CudaLaunch } from '../ts/plan.ts';
import { GgufFile } from '../ts/weights/index.ts';
import {
  describeBackends, describeValidation, dotErr, dotTolerance, expectInvalid, randomArray, rng, run, scaledErr, TARGET_LIMITS, TOL,
} from './helpers.ts';
import { ggufBytes } from './weights-writers.ts';
import { a, buf, F, ggmlBlocks, int, opContract, out, type Case } from './op-contract.ts';
import type { Buffer } from '../ts/index.ts';

const f16Bytes = (lo: number, hi: number): number[] => [lo, hi];
/** Bytes of an f16 (little-endian) for the few values the hand-made blocks use. */
const HALF: Record<number, number[]> = { 1: f16Bytes(0x00, 0x3c), 0.5: f16Bytes(0x00, 0x38), 0.25: f16Bytes(0x00, 0x34), 0.125: f16Bytes(0x00, 0x30) };

/**
 * Blocks written by hand from the format descriptions, with the values each
 * must give (worked out from the description, not from the code).
 */
function handBlocks(): { type: GgmlQuantType; bytes: Uint8Array; values: number[] }[] {
  const out: { type: GgmlQuantType; bytes: Uint8Array; values: number[] }[] = [];
  {
    // Q4_0: d = 0.5, qs[j] = j | (15 - j) << 4: value j = 0.5 (j - 8), value 16 + j = 0.5 (7 - j).
    const qs = Array.from({ length: 16 }, (_, j) => j | ((15 - j) << 4));
    const values = [...Array.from({ length: 16 }, (_, j) => 0.5 * (j - 8)), ...Array.from({ length: 16 }, (_, j) => 0.5 * (7 - j))];
    out.push({ type: 'Q4_0', bytes: Uint8Array.from([...HALF[0.5]!, ...qs]), values });
  }
  {
    // Q8_0: d = 0.25, qs int8: -128, -1, 0, 1, 127, then 2, 3, ... 28.
    const q = [-128, -1, 0, 1, 127, ...Array.from({ length: 27 }, (_, j) => j + 2)];
    out.push({ type: 'Q8_0', bytes: Uint8Array.from([...HALF[0.25]!, ...q.map((v) => v & 0xff)]), values: q.map((v) => 0.25 * v) });
  }
  // Q4_K / Q5_K: d = 1, dmin = 0.5; 6-bit scales sc = 1, 2, 3, 63, 17, 33, 48, 5 and mins m = 0, 10, 20, 30, 40, 50, 60, 63:
  // bytes 0-3 sc_j | (sc_{j+4} >> 4) << 6, bytes 4-7 m_j | (m_{j+4} >> 4) << 6, bytes 8-11 (sc_j & 15) | (m_j & 15) << 4 for j = 4..7.
  const sc = [1, 2, 3, 63, 17, 33, 48, 5];
  const mn = [0, 10, 20, 30, 40, 50, 60, 63];
  const scales = [0x41, 0x82, 0xc3, 0x3f, 0x80, 0xca, 0xd4, 0xde, 0x81, 0x21, 0xc0, 0xf5];
  // qs[i] = (i % 16) | (15 - i % 16) << 4: sub-block s (nibble s % 2 of qs[32 (s / 2) + l]) holds l % 16 (s even) or 15 - l % 16 (s odd).
  const qs = Array.from({ length: 128 }, (_, i) => (i % 16) | ((15 - (i % 16)) << 4));
  const q4 = (s: number, l: number): number => (s % 2 === 0 ? l % 16 : 15 - (l % 16));
  {
    const values = Array.from({ length: 256 }, (_, v) => sc[v >> 5]! * q4(v >> 5, v % 32) - 0.5 * mn[v >> 5]!);
    out.push({ type: 'Q4_K', bytes: Uint8Array.from([...HALF[1]!, ...HALF[0.5]!, ...scales, ...qs]), values });
  }
  {
    // Q5_K: qh[l] = l, so bit s of qh[l] (the fifth bit of value l of sub-block s) is bit s of l.
    const qh = Array.from({ length: 32 }, (_, l) => l);
    const values = Array.from({ length: 256 }, (_, v) => {
      const [s, l] = [v >> 5, v % 32];
      return sc[s]! * (q4(s, l) + 16 * ((l >> s) & 1)) - 0.5 * mn[s]!;
    });
    out.push({ type: 'Q5_K', bytes: Uint8Array.from([...HALF[1]!, ...HALF[0.5]!, ...scales, ...qh, ...qs]), values });
  }
  {
    // Q6_K: ql all 0x21 (low nibble 1, high 2), qh all 0b11100100 (bits 2p, 2p + 1 = p), scales[i] = i - 8, d = 0.5 (last):
    // value v = 128 h + 32 p + l has q = (p < 2 ? 1 : 2) | p << 4, i.e. 1, 17, 34, 50; w = 0.5 (v / 16 - 8) (q - 32).
    const q = [1, 17, 34, 50];
    const values = Array.from({ length: 256 }, (_, v) => 0.5 * ((v >> 4) - 8) * (q[(v >> 5) & 3]! - 32));
    const bytes = Uint8Array.from([...new Array(128).fill(0x21), ...new Array(64).fill(0xe4), ...Array.from({ length: 16 }, (_, i) => (i - 8) & 0xff), ...HALF[0.5]!]);
    out.push({ type: 'Q6_K', bytes, values });
  }
  return out;
}

describe('quantized_matmul_ggml params, bindings and launches', () => {
  test("GgmlMatvecParams: the crate's seven 64-bit sizes and r2, r3 (64 bytes); buffer(3) of the vector kernels", () => {
    expect(GGML_MATVEC_PARAMS_LAYOUT.map((f) => [f.name, f.offset])).toEqual([
      ['ne00', 0], ['ne01', 8], ['ne02', 16], ['ne10', 24], ['ne12', 32], ['ne0', 40], ['ne1', 48], ['r2', 56], ['r3', 60],
    ]);
    const p = packGgmlMatvecParams({ m: 3, n: 7, k: 256 });
    const v = new DataView(p.buffer, p.byteOffset, p.byteLength);
    expect([p.byteLength, ...[0, 8, 16, 24, 32, 40, 48].map((o) => Number(v.getBigUint64(o, true))), v.getUint32(56, true), v.getUint32(60, true)])
      .toEqual([64, 256, 7, 1, 256, 1, 7, 3, 1, 1]);
    for (const t of ['q4_0', 'q8_0', 'q4_K', 'q5_K', 'q6_K']) {
      const k = `kernel_mul_mv_${t}_f32`;
      expect(bufferParam(src, k, 3)).toContain('constant GgmlMatvecParams&');
      expect(bufferParam(src, k, 0)).toContain('device const uchar*');
      expect(bufferParam(src, k, 1)).toContain('device const float*');
      expect(bufferParam(src, k, 2)).toMatch(/^device float\*/);
    }
  });
  test("GgmlMatmulMmParams: llama.cpp's mul_mm block with the crate's padding (88 bytes); buffer(0) of the matrix kernels", () => {
    expect(GGML_MATMUL_MM_PARAMS_LAYOUT.map((f) => [f.name, f.offset])).toEqual([
      ['ne00', 0], ['ne02', 4], ['nb01', 8], ['nb02', 16], ['nb03', 24], ['ne12', 32], ['nb10', 40], ['nb11', 48], ['nb12', 56], ['nb13', 64],
      ['ne0', 72], ['ne1', 76], ['r2', 80], ['r3', 82],
    ]);
    expect(structSize(GGML_MATMUL_MM_PARAMS_LAYOUT)).toBe(88);
    const p = packGgmlMatmulMmParams({ m: 5, n: 7, k: 512, ggmlType: 'Q6_K' });
    const v = new DataView(p.buffer, p.byteOffset, p.byteLength);
    const u64 = (o: number): number => Number(v.getBigUint64(o, true));
    // nb01: 2 super-blocks of 210 bytes; nb11: 512 floats.
    expect([v.getInt32(0, true), v.getInt32(4, true), u64(8), u64(16), u64(24), v.getInt32(32, true), u64(40), u64(48), u64(56), u64(64),
      v.getInt32(72, true), v.getInt32(76, true), v.getInt16(80, true), v.getInt16(82, true)])
      .toEqual([512, 1, 420, 2940, 0, 1, 4, 2048, 10240, 0, 7, 5, 1, 1]);
    for (const t of ['q4_0', 'q8_0', 'q4_K', 'q5_K', 'q6_K']) {
      const k = `kernel_mul_mm_${t}_f32`;
      expect(bufferParam(src, k, 0)).toContain('constant GgmlMatmulMmParams&');
      expect(bufferParam(src, k, 1)).toContain('device const uchar*');
      expect(bufferParam(src, k, 2)).toContain('device const float*');
      expect(bufferParam(src, k, 3)).toMatch(/^device float\*/);
    }
    expect(GGML_MM_SHARED_BYTES).toBe(64 * 32 * 2 + 32 * 32 * 4);
  });
  test('the dequantization and embedding params and bindings', () => {
    expect(Array.from(packGgmlDequantizeParams({ nChunks: 0x12345 }))).toEqual([0x45, 0x23, 0x01, 0x00]);
    const e = packGgmlEmbeddingParams({ scale: 2, hiddenSize: 256, nTokens: 3, vocabSize: 9 });
    const v = new DataView(e.buffer, e.byteOffset, e.byteLength);
    expect([v.getFloat32(0, true), v.getUint32(4, true), v.getUint32(8, true), v.getUint32(12, true)]).toEqual([2, 256, 3, 9]);
    expect(bufferParam(src, 'kernel_dequantize_q4_K_bf16', 2)).toContain('constant GgmlDequantizeParams&');
    expect(bufferParam(src, 'embedding_gather_scale_batch_q6_K_to_f16', 3)).toContain('constant GgmlEmbeddingParams&');
    expect(QUANTIZED_MATMUL_GGML_KERNELS.length).toBe(45);
  });
  test('the split-k form: GgmlMatmulSplitParams (8 bytes), buffer(6); partials and words writable (4, 5)', () => {
    expect(structSize(GGML_MATMUL_SPLIT_PARAMS_LAYOUT)).toBe(8);
    const sp = packGgmlMatmulSplitParams({ splits: 7, chunks: 0x10203 });
    expect(Array.from(sp)).toEqual([7, 0, 0, 0, 3, 2, 1, 0]);
    for (const t of GGML_QUANT_TYPES) {
      const k = `kernel_mul_mm_${GGML_KERNEL_TYPE[t]}_f32_splitk`;
      expect(QUANTIZED_MATMUL_GGML_KERNELS as readonly string[]).toContain(k);
      expect(bufferParam(src, k, 0)).toContain('constant GgmlMatmulMmParams&');
      expect(bufferParam(src, k, 3)).toMatch(/^device float\*/);
      expect(bufferParam(src, k, 4)).toMatch(/^device float\*/);
      expect(bufferParam(src, k, 5)).toMatch(/^device uint\*/);
      expect(bufferParam(src, k, 6)).toContain('constant GgmlMatmulSplitParams&');
    }
  });
  test("launches: the crate's Metal grids, the CUDA engines, shared memory within an H100's", () => {
    expect(ggmlMvMetalLaunch('Q4_0', 3, 17)).toEqual({ grid: [3, 3, 1], threads: [8, 8, 1] });
    expect(ggmlMvMetalLaunch('Q6_K', 1, 17)).toEqual({ grid: [9, 1, 1], threads: [2, 32, 1] });
    // A window of 256 values from 16-byte units: Q4_0 144 bytes (176), Q8_0 272 (304), Q4_K 144, Q5_K 176 (208), Q6_K 210 (240).
    expect(GGML_QUANT_TYPES.map((t) => ggmlMvCudaStageRow(t))).toEqual([176, 304, 176, 208, 240]);
    // From 2 tokens the _xs entry: 64 rows a block of 128 threads, the stages and two windows of x for 8 tokens.
    expect(ggmlMatmulCudaLaunch('Q4_K', 'vector', 2, 17408, 5120)).toEqual({ grid: [272, 1, 1], threads: [128, 1, 1],
      threadgroupMemory: { 0: 4 * 3 * 16 * 176 + 2 * 8 * 144 * 4 }, entry: 'kernel_mul_mv_q4_K_f32_xs' });
    expect(GGML_QUANT_TYPES.map((t) => ggmlMatmulCudaLaunch(t, 'vector', 8, 70, 256).grid[0])).toEqual([2, 2, 2, 2, 2]);
    expect(ggmlMvXsSharedBytes('Q6_K')).toBe(4 * 3 * 16 * 240 + 9216);
    // One token of Q4_K: the group-column engine on the same grid, with x's copy where it is the larger (k 17408), under the bound.
    expect([5120, 17408, 49152].map((k) => [ggmlGcTakes('Q4_K', 1, k, 320), ggmlMatmulCudaLaunch('Q4_K', 'vector', 1, 5120, k).threadgroupMemory![0]]))
      .toEqual([[true, 4 * 3 * 16 * 176 + 2048], [true, 17408 * 2 + 544 * 4 + 1024], [false, 4 * 3 * 16 * 176 + 2048]]);
    expect([ggmlGcTakes('Q4_0', 1, 5120, 320), ggmlGcTakes('Q4_K', 2, 5120, 320)]).toEqual([false, false]);
    // Few tiles of Q4_K (at most 2 an SM, k of 8 super-blocks or more): 8 warps a tile, a tile a block of 256 threads.
    const sms = TARGET_LIMITS.cuda.multiprocessors;
    expect(ggmlMatmulCudaLaunch('Q4_K', 'vector', 1, 2816, 4096, TARGET_LIMITS.cuda)).toEqual({ grid: [176, 1, 1], threads: [256, 1, 1],
      threadgroupMemory: { 0: 4096 * 2 + 128 * 4 + 1024 }, entry: 'kernel_mul_mv_q4_K_f32_gc8' });
    expect([16 * GC8_TILES_PER_SM * sms, 16 * GC8_TILES_PER_SM * sms + 1].map((n) => ggmlGc8Takes('Q4_K', 1, n, 2048, TARGET_LIMITS.cuda)))
      .toEqual([true, false]);
    expect([ggmlGc8Takes('Q4_K', 1, 2816, 1792, TARGET_LIMITS.cuda), ggmlGc8Takes('Q4_K', 2, 2816, 4096, TARGET_LIMITS.cuda),
      ggmlGc8Takes('Q4_K', 1, 2816, 4096, { multiprocessors: 0 }), ggmlGc8Takes('Q6_K', 1, 2816, 4096, TARGET_LIMITS.cuda),
      ggmlGc8Takes('Q4_K', 1, 2816, 49152, TARGET_LIMITS.cuda)]).toEqual([false, false, false, false, false]);
    expect(ggmlMatmulCudaLaunch('Q4_K', 'vector', 1, 8192, 2816, TARGET_LIMITS.cuda).entry).toBeUndefined();
    // One token of Q8_0 at the vector entry's own launch (the op takes the int8 entry: below): its group-column engine
    // at any k whose x fits, with shared memory of its own: 4 warps' stages
    // of 16 rows of 304 bytes (one a round a warp takes, up to 3), x (68 bytes a block of 32, whole rounds of 256)
    // and 320 bytes. k 704: 3 rounds, a stage a warp; 2112: 9 rounds, 3 stages; 96: one partial round.
    const q8 = (stages: number, rounds: number) => 4 * stages * 16 * 304 + rounds * 8 * 68 + 320;
    expect([704, 2112, 96, 46080, 46336].map((k) => [ggmlGcTakes('Q8_0', 1, k, 176), ggmlMvCudaShared('Q8_0', 1, k, 176)]))
      .toEqual([[true, q8(1, 3)], [true, q8(3, 9)], [true, q8(1, 1)], [true, q8(3, 180)], [false, 4 * 3 * 16 * 304 + 2048]]);
    expect(ggmlGcTakes('Q8_0', 2, 2112, 176)).toBe(false);
    // One token of Q6_K: its group-column engine alike, x as f16 with a sum a group of 16 values (k 2 + k / 4 + 320 bytes).
    expect([512, 5376, 43520, 43776].map((k) => [ggmlGcTakes('Q6_K', 1, k, 128), ggmlMvCudaShared('Q6_K', 1, k, 128)]))
      .toEqual([[true, 4 * 16 * 240 + 1024 + 128 + 320], [true, 4 * 3 * 16 * 240 + 5376 * 2 + 1344 + 320],
        [true, 4 * 3 * 16 * 240 + 43520 * 2 + 10880 + 320], [false, 4 * 3 * 16 * 240 + 2048]]);
    // Past GC_Q6_MAX_BLOCKS blocks (an output projection over a large vocabulary), Q6_K's vector engine.
    expect([ggmlGcTakes('Q6_K', 1, 2816, GC_Q6_MAX_BLOCKS), ggmlGcTakes('Q6_K', 1, 2816, GC_Q6_MAX_BLOCKS + 1)]).toEqual([true, false]);
    // One token of Q8_0 and Q6_K at any size whose x fits: the int8 entries, 256 threads, a block
    // a unit of 8 warps' rows up to 2 an SM, x as int8 with a {scale, sum} pair a chunk of 32 and 2 x 8 x rows x 8
    // floats; a row a warp (_i8), or Q6_K past GC_Q6_MAX_BLOCKS tiles of 16 rows 4 rows a warp (_i8g).
    const i8 = (t: string, grid: number, k: number, g = false): CudaLaunch => ({ grid: [grid, 1, 1], threads: [256, 1, 1],
      threadgroupMemory: { 0: k + (k / 32) * 8 + (g ? 2048 : 512) }, entry: `kernel_mul_mv_${t}_f32_${g ? 'i8g' : 'i8'}` });
    expect(ggmlMatmulCudaLaunch('Q8_0', 'vector', 1, 12352, 2048, TARGET_LIMITS.cuda)).toEqual(i8('q8_0', 264, 2048));
    expect(ggmlMatmulCudaLaunch('Q8_0', 'vector', 1, 8192, 2048, { multiprocessors: 1000 })).toEqual(i8('q8_0', 1024, 2048));
    expect(ggmlMatmulCudaLaunch('Q8_0', 'vector', 1, 2816, 2112, TARGET_LIMITS.cuda)).toEqual(i8('q8_0', 264, 2112));
    expect(ggmlMatmulCudaLaunch('Q8_0', 'vector', 1, 37, 704)).toEqual(i8('q8_0', 5, 704));
    expect(ggmlMatmulCudaLaunch('Q6_K', 'vector', 1, 2048, 4096, TARGET_LIMITS.cuda)).toEqual(i8('q6_K', 256, 4096));
    expect(ggmlMatmulCudaLaunch('Q6_K', 'vector', 1, 37, 256)).toEqual(i8('q6_K', 5, 256));
    expect(ggmlMatmulCudaLaunch('Q6_K', 'vector', 1, 16 * GC_Q6_MAX_BLOCKS, 256)).toEqual(i8('q6_K', 4096, 256));
    expect(ggmlMatmulCudaLaunch('Q6_K', 'vector', 1, 16 * GC_Q6_MAX_BLOCKS + 1, 256)).toEqual(i8('q6_K', 1025, 256, true));
    expect(ggmlMatmulCudaLaunch('Q6_K', 'vector', 1, 262144, 2816, TARGET_LIMITS.cuda)).toEqual(i8('q6_K', 264, 2816, true));
    expect([ggmlI8Takes('Q8_0', 2, 8192, 2048), ggmlI8Takes('Q6_K', 1, 16 * GC_Q6_MAX_BLOCKS, 2816),
      ggmlI8Takes('Q6_K', 1, 16 * GC_Q6_MAX_BLOCKS + 1, 2816), ggmlI8Takes('Q6_K', 2, 2048, 2816), ggmlI8Takes('Q4_K', 1, 17408, 5120),
      ggmlI8Takes('Q8_0', 1, 12352, 78208), ggmlI8Takes('Q8_0', 1, 12352, 78240), ggmlI8Takes('Q6_K', 1, 262144, 76800),
      ggmlI8Takes('Q6_K', 1, 262144, 77056)]).toEqual([false, true, true, false, false, true, false, true, false]);
    expect(ggmlMatmulCudaLaunch('Q4_0', 'vector', 1, 2816, 2112).entry).toBeUndefined();
    expect(ggmlMatmulCudaLaunch('Q4_K', 'matrix', 8192, 17408, 5120)).toEqual({ grid: [68 * 64, 1, 1], threads: [256, 1, 1],
      threadgroupMemory: { 0: 61440 } });
    expect(ggmlMmCudaTile(100, 100)).toEqual({ bm: 64, bn: 128, threads: 128, sharedBytes: 30720 });
    for (const t of GGML_QUANT_TYPES) expect(ggmlMvCudaSharedBytes(t)).toBeLessThanOrEqual(TARGET_LIMITS.cuda.maxThreadgroupMemory / 2);
  });
  test('split k: slices where the tiles leave SMs idle, at least 8 chunks of 32 each, none empty, within the scratch', () => {
    const sp = (m: number, n: number, k: number, scratch = Infinity, sms = 132) => ggmlMatmulSplit(m, n, k, sms, scratch);
    // 64 tokens of Qwen3.6: 16 tiles of 64 x 128 at k 4096, 2048 and 512 (under GGML_SPLIT_MIN_K: none); one tile
    // ([32, 2048]); 1024 tokens on 64 tiles of 128 x 256 (two slices), on 128 (none).
    expect([sp(64, 2048, 4096), sp(64, 2048, 2048), sp(64, 2048, 512), sp(64, 32, 2048), sp(1024, 2048, 2048), sp(1024, 4096, 2048)])
      .toEqual([{ splits: 8, chunks: 16 }, { splits: 8, chunks: 8 }, null, { splits: 8, chunks: 8 }, { splits: 2, chunks: 32 }, null]);
    // From k 1024 (32 chunks: 4 slices of 8); k 992 (31 chunks) never.
    expect([sp(64, 2048, 1024), sp(64, 2048, 992)]).toEqual([{ splits: 4, chunks: 8 }, null]);
    // The scratch holds 3 slices: 128 chunks as 3 of 43 (the last 42); 72 chunks over 4 tiles: 9 of 8.
    expect([sp(64, 2048, 4096, 3 * 64 * 2048), sp(70, 130, 2304), sp(64, 2048, 4096, 2 * 64 * 2048 - 1), sp(64, 2048, 4096, Infinity, 0)])
      .toEqual([{ splits: 3, chunks: 43 }, { splits: 9, chunks: 8 }, null, null]);
    // 16 slices at most.
    expect(sp(9, 7, 32 * 1024)).toEqual({ splits: 16, chunks: 64 });
    expect([quantizedMatmulGgmlScratchElements(64, 2048, 4096, TARGET_LIMITS.cuda), quantizedMatmulGgmlScratchElements(64, 2048, 4096, TARGET_LIMITS.metal)])
      .toEqual([8 * 64 * 2048, 0]);
  });
});

describe('the block layouts against blocks by hand', () => {
  for (const { type, bytes, values } of handBlocks()) {
    test(`${type}: ${bytes.length} bytes, ${values.length} values`, () => {
      expect(bytes.length).toBe(ggmlBlockOf(type).bytes);
      expect(Array.from(ggmlDequantizeRef(type, bytes, values.length))).toEqual(values);
    });
  }
  test('a few values of each worked out by hand', () => {
    const [q40, q80, q4k, q5k, q6k] = handBlocks().map((b) => ggmlDequantizeRef(b.type, b.bytes, b.values.length));
    expect([q40![0], q40![15], q40![16], q40![31]]).toEqual([-4, 3.5, 3.5, -4]);
    expect([q80![0], q80![1], q80![4]]).toEqual([-32, -0.25, 31.75]);
    // Q4_K sub-block 3 (sc 63, m 30), value 96 + 5: q = 15 - 5 = 10 -> 630 - 15; sub-block 6 (sc 48, m 60), value 192: q 0 -> -30.
    expect([q4k![101], q4k![192]]).toEqual([615, -30]);
    // Q5_K value 32 + 3 (sub-block 1, sc 2, m 10): q = 12 + 16 (bit 1 of 3) -> 56 - 5.
    expect(q5k![35]).toBe(51);
    // Q6_K: v = 0 -> 0.5 (-8) (1 - 32) = 124; v = 40 -> 0.5 (-6) (17 - 32) = 45; v = 100 -> -18; v = 200 -> 4.
    expect([q6k![0], q6k![40], q6k![100], q6k![200]]).toEqual([124, 45, -18, 4]);
  });
});

describe("llama.cpp's reference quantizers", () => {
  test('Q4_0 and Q8_0 of blocks by hand', () => {
    // x = 1/32 .. 32/32: max = 1, d = -1/8, q = min(15, trunc(x * -8 + 8.5)) = 8 - j / 4 rounded: x = 1 -> 0.
    const x = Array.from({ length: 32 }, (_, j) => (j + 1) / 32);
    const b = ggmlQuantize('Q4_0', x, 1, 32);
    expect([b[0], b[1]]).toEqual([0x00, 0xb0]); // f16 -0.125
    const q = Array.from({ length: 32 }, (_, j) => (j < 16 ? b[2 + j]! & 15 : b[2 + j - 16]! >> 4));
    expect(q).toEqual(x.map((v) => Math.min(15, Math.trunc(v * -8 + 8.5))));
    expect(q[31]).toBe(0);
    // Zeros: d = 0 / -8 = -0 (f16 0x8000, as C computes it), every q 8 (0x88).
    expect(Array.from(ggmlQuantize('Q4_0', new Array(32).fill(0), 1, 32))).toEqual([0x00, 0x80, ...new Array(16).fill(0x88)]);
    // Q8_0: amax 127 -> d = 1, q = x exactly, roundf half away from zero on the way.
    const y = Array.from({ length: 32 }, (_, j) => (j % 2 ? 1 : -1) * (j === 0 ? 127 : j * 3.5));
    const c = ggmlQuantize('Q8_0', y, 1, 32);
    expect([c[0], c[1]]).toEqual([0x00, 0x3c]);
    expect(Array.from(c.subarray(2)).map((v) => (v << 24) >> 24)).toEqual(y.map((v) => Math.sign(v) * Math.floor(Math.abs(v) + 0.5)));
  });
  test('a zero super-block: Q6_K all zero bytes; Q4_K / Q5_K d = dmin = 0', () => {
    expect(ggmlQuantize('Q6_K', new Array(256).fill(0), 1, 256).every((v) => v === 0)).toBe(true);
    for (const t of ['Q4_K', 'Q5_K'] as const) {
      const b = ggmlQuantize(t, new Array(256).fill(0), 1, 256);
      expect(Array.from(b.subarray(0, 4))).toEqual([0, 0, 0, 0]);
      expect(Array.from(ggmlDequantizeRef(t, b, 256)).every((v) => v === 0)).toBe(true);
    }
  });
  test('random weights, every format: the round trip within its step', () => {
    const r = rng(5);
    // max |w - x| over the values of N(0, 1)-like uniform [-1, 1] rows, with margins above what each format reaches:
    // Q4_0 half a step of max / 8, on the clamped side a whole one (0.125); Q8_0 half of amax / 127 and d's rounding to f16 over 127
    // steps (d (0.5 + 127 2^-11)); the K formats their sub-block steps.
    const bound: Record<GgmlQuantType, number> = { Q4_0: 0.126, Q8_0: 0.0045, Q4_K: 0.09, Q5_K: 0.05, Q6_K: 0.025 };
    for (const t of GGML_QUANT_TYPES) {
      const x = randomArray(r, 4 * 512, -1, 1);
      const w = ggmlDequantizeRef(t, ggmlQuantize(t, x, 4, 512), 4 * 512);
      let worst = 0;
      let rms = 0;
      for (let i = 0; i < x.length; i++) {
        worst = Math.max(worst, Math.abs(w[i]! - Math.fround(x[i]!)));
        rms += (w[i]! - x[i]!) ** 2;
      }
      expect({ t, ok: worst <= bound[t] }).toEqual({ t, ok: true });
      // The finer formats reach a smaller error: 4 bits > 5 > 6 > 8.
      expect(Math.sqrt(rms / x.length)).toBeLessThan(bound[t] / 2);
    }
  });
});

describeValidation('quantized_matmul_ggml validation', ({ enc, buf }) => {
  type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
  test('quantized_matmul_ggml: every rule', () => {
    // Q4_K, n = 5, k = 256: 5 rows of 144 bytes.
    const base = () => ({ input: buf('f32', 3 * 256), weight: buf('u8', 5 * 144), output: buf('f32', 15), m: 3, n: 5, k: 256, ggmlType: 'Q4_K' });
    const cases: Case[] = [
      [{ ggmlType: 'Q4_1' }, 'ggmlType', 'Q4_0, Q8_0, Q4_K, Q5_K, Q6_K', 'Q4_1'],
      [{ ggmlType: undefined }, 'ggmlType', 'Q4_0, Q8_0', 'undefined'],
      [{ m: 0 }, 'm', 'a positive integer', '0'],
      [{ k: 1.5 }, 'k', 'a positive integer', '1.5'],
      [{ n: -1 }, 'n', 'a positive integer', '-1'],
      [{ n: 2 ** 31 }, 'n', 'at most 2^31 - 1', `${2 ** 31}`],
      [{ k: 288 }, 'k', "a multiple of Q4_K's block (256)", '288'],
      [{ form: 'dense' }, 'form', "'vector', 'matrix' or absent", 'dense'],
      [{ m: 2 ** 24, n: 2 ** 24 }, 'm', 'at most 1048512 for n = 16777216', `${2 ** 24}`],
      [{ input: buf('bf16', 768) }, 'input.dtype', 'f32', 'bf16'],
      [{ weight: buf('u32', 180) }, 'weight.dtype', 'u8', 'u32'],
      [{ output: buf('f16', 15) }, 'output.dtype', 'f32', 'f16'],
      [{ input: buf('f32', 767) }, 'input.elementCount', 'at least 768', '767'],
      [{ weight: buf('u8', 719) }, 'weight.byteLength', 'at least 720 (5 rows of 144 bytes of Q4_K)', '719'],
      [{ ggmlType: 'Q6_K' }, 'weight.byteLength', 'at least 1050 (5 rows of 210 bytes of Q6_K)', '720'],
      [{ output: buf('f32', 14) }, 'output.elementCount', 'at least 15', '14'],
      [{ scratch: buf('f16', 15) }, 'scratch.dtype', 'f32', 'f16'],
      [{ scratch: buf('f32', 14) }, 'scratch.elementCount', 'at least 15', '14'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => quantizedMatmulGgml(enc(), { ...base(), ...m } as never), 'quantized_matmul_ggml', arg, expected, actual);
    }
    // The crate's rule: larger buffers are taken (their first bytes); Q4_0 at k = 32 needs 5 rows of 18 bytes.
    quantizedMatmulGgml(enc(), { ...base(), input: buf('f32', 1000), weight: buf('u8', 1000), output: buf('f32', 16) } as never);
    quantizedMatmulGgml(enc(), { ...base(), k: 32, ggmlType: 'Q4_0', weight: buf('u8', 90) } as never);
    const x = buf('f32', 3 * 256 + 16);
    expectInvalid(() => quantizedMatmulGgml(enc(), { ...base(), input: x.view('f32', [768]), output: x.view('f32', [15], 64) } as never),
      'quantized_matmul_ggml', 'output', 'a buffer other than input', 'a view overlapping input');
    const w = buf('u8', 1024);
    expectInvalid(() => quantizedMatmulGgml(enc(), { ...base(), weight: w, output: w.view('f32', [15], 16) } as never), 'quantized_matmul_ggml',
      'output', 'a buffer other than weight', 'a view overlapping weight');
    const o = buf('f32', 64);
    expectInvalid(() => quantizedMatmulGgml(enc(), { ...base(), output: o.view('f32', [15]), scratch: o.view('f32', [20], 32) } as never),
      'quantized_matmul_ggml', 'output', 'a buffer other than scratch', 'a view overlapping scratch');
    const xs = buf('f32', 3 * 256 + 64);
    expectInvalid(() => quantizedMatmulGgml(enc(), { ...base(), input: xs.view('f32', [768]), scratch: xs.view('f32', [20], 3008) } as never),
      'quantized_matmul_ggml', 'scratch', 'a buffer other than input', 'a view overlapping input');
  });
  test('ggml_dequantize: every rule', () => {
    const base = () => ({ src: buf('u8', 2 * 34), output: buf('bf16', 64), count: 64, ggmlType: 'Q8_0' });
    const cases: Case[] = [
      [{ ggmlType: 'F16' }, 'ggmlType', 'Q4_0, Q8_0, Q4_K, Q5_K, Q6_K', 'F16'],
      [{ count: 0 }, 'count', 'a positive integer', '0'],
      [{ count: 48 }, 'count', "a multiple of Q8_0's block (32)", '48'],
      [{ count: 2 ** 37 }, 'count', 'at most 16 x (2^32 - 1), chunks of 16 counted in 32 bits (68719476720)', `${2 ** 37}`],
      [{ src: buf('i32', 17) }, 'src.dtype', 'u8', 'i32'],
      [{ output: buf('u16', 64) }, 'output.dtype', 'one of f32, f16, bf16', 'u16'],
      [{ src: buf('u8', 69) }, 'src.elementCount', '68', '69'],
      [{ ggmlType: 'Q4_0' }, 'src.elementCount', '36', '68'],
      [{ output: buf('bf16', 63) }, 'output.elementCount', '64', '63'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => ggmlDequantize(enc(), { ...base(), ...m } as never), 'ggml_dequantize', arg, expected, actual);
    }
    const b = buf('u8', 68 + 256);
    expectInvalid(() => ggmlDequantize(enc(), { ...base(), src: b.view('u8', [68]), output: b.view('bf16', [64], 64) } as never), 'ggml_dequantize',
      'output', 'a buffer other than src', 'a view overlapping src');
  });
  test('embedding with a table of blocks (tableType): every rule', () => {
    // Q5_K, 3 rows of 256: 3 x 176 bytes.
    const base = () => ({ table: buf('u8', 3 * 176), tableType: 'Q5_K', tokenIds: buf('u32', 2), output: buf('f16', 512), vocabSize: 3, hiddenSize: 256,
      nTokens: 2 });
    const cases: Case[] = [
      [{ tableType: 'BF16' }, 'tableType', 'Q4_0, Q8_0, Q4_K, Q5_K, Q6_K', 'BF16'],
      [{ tableType: null }, 'tableType', 'Q4_0', 'null'],
      [{ vocabSize: 0 }, 'vocabSize', 'a positive integer', '0'],
      [{ hiddenSize: 2.5 }, 'hiddenSize', 'a positive integer', '2.5'],
      [{ nTokens: 2 ** 32 }, 'nTokens', 'at most 2^32 - 1', `${2 ** 32}`],
      [{ hiddenSize: 128 }, 'hiddenSize', "a multiple of Q5_K's block (256)", '128'],
      [{ scale: Number.NaN }, 'scale', 'a finite number or absent', 'NaN'],
      [{ table: buf('bf16', 3 * 256) }, 'table.dtype', 'u8', 'bf16'],
      [{ tokenIds: buf('i32', 2) }, 'tokenIds.dtype', 'u32', 'i32'],
      [{ output: buf('u32', 512) }, 'output.dtype', 'one of f32, f16, bf16', 'u32'],
      [{ table: buf('u8', 3 * 176 + 1) }, 'table.elementCount', '528', '529'],
      [{ tableType: 'Q4_K' }, 'table.elementCount', '432', '528'],
      [{ tokenIds: buf('u32', 3) }, 'tokenIds.elementCount', '2', '3'],
      [{ output: buf('f16', 256) }, 'output.elementCount', '512', '256'],
    ];
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => embedding(enc(), { ...base(), ...m } as never), 'embedding', arg, expected, actual);
    const t = buf('u8', 4096);
    expectInvalid(() => embedding(enc(), { ...base(), table: t.view('u8', [528]), output: t.view('f16', [512], 512) } as never), 'embedding', 'output',
      'a buffer other than table', 'a view overlapping table');
  });
});

/**
 * Random weights [n, k] quantized (ggmlQuantize) and x [m, k], both uploaded as
 * views at non-zero offsets of one u8 allocation with garbage around them;
 * the output a NaN-poisoned view of another. Returns the error of the
 * product (Infinity where anything outside the output view was written).
 * split: the matrix form planned as a device of `sms` multiprocessors plans
 * it, with a NaN-poisoned scratch of `scratch` floats, its splits checked
 * (on cuda the split-k kernel, on the emulator its Metal twin).
 */
function product(dev: Device, type: GgmlQuantType, m: number, n: number, k: number, form: 'vector' | 'matrix' | undefined, seed: number,
  split?: { sms: number; scratch: number; splits: number }): number {
  const r = rng(seed);
  const w = ggmlQuantize(type, randomArray(r, n * k, -1, 1), n, k);
  const x = Float32Array.from(randomArray(r, m * k, -1, 1));
  const al = (b: number): number => Math.ceil(b / 16) * 16;
  const xAt = 48;
  const wAt = al(xAt + 4 * m * k) + 32;
  const root = dev.alloc('u8', [wAt + al(w.length) + 48]);
  root.write(Uint8Array.from({ length: root.byteLength }, () => Math.floor(r.uniform(0, 256))));
  const xv = root.view('f32', [m, k], xAt);
  xv.write(x);
  const wv = root.view('u8', [w.length], wAt);
  wv.write(w);
  const outRoot = dev.alloc('f32', [m * n + 24]);
  outRoot.fill(Number.NaN);
  const out = outRoot.view('f32', [m, n], 32);
  if (split === undefined) {
    run(dev, (e) => quantizedMatmulGgml(e, { input: xv, weight: wv, output: out, m, n, k, ggmlType: type, form }));
  } else {
    using scratch = dev.alloc('f32', [split.scratch]);
    scratch.fill(Number.NaN);
    const plan = planQuantizedMatmulGgml({ input: xv, weight: wv, output: out, m, n, k, ggmlType: type, form: 'matrix', scratch },
      { ...dev.limits, multiprocessors: split.sms }, dev);
    const d = plan.dispatches[0]!;
    const bytes = d.bytes?.[6];
    const splits = bytes === undefined ? 1 : new DataView(bytes.buffer, bytes.byteOffset).getUint32(0, true);
    expect([d.kernel.endsWith('_splitk'), splits]).toEqual([split.splits > 1, split.splits]);
    run(dev, (e) => record(e, plan));
  }
  const want = ggmlMatmulRef(type, x, w, m, n, k);
  const err = dotErr(out.readNumbers(), want.y, want.abs);
  const all = outRoot.readNumbers();
  const outside = [...all.slice(0, 8), ...all.slice(8 + m * n)];
  root.release();
  outRoot.release();
  return outside.every(Number.isNaN) ? err : Infinity;
}

describeBackends('quantized_matmul_ggml parity', ({ device, backend }) => {
  /** The tolerance of a form at k (the file comment). */
  const tolOf = (form: 'vector' | 'matrix', k: number, i8 = false): number =>
    dotTolerance(backend !== 'cuda' && form === 'vector' ? 'f32' : backend === 'cuda' && i8 ? 'bf16' : 'f16', k);
  /** The tolerance of one product as the op plans it (on cuda the int8 entry where ggmlI8Takes). */
  const tolFor = (type: GgmlQuantType, form: 'vector' | 'matrix', m: number, n: number, k: number): number =>
    tolOf(form, k, form === 'vector' && ggmlI8Takes(type, m, n, k));

  // [m, n, blocks of k]: one output, odd row counts under and past a simdgroup's, a threadgroup's and the tiles.
  // Past 8 rows of input the vector form takes them 8 at a time (asked for: mlx-native routes them to the matrix form).
  const VECTOR: readonly [number, number, number][] = [[1, 1, 1], [1, 37, 2], [3, 33, 1], [8, 70, 3], [11, 21, 2]];
  const MATRIX: readonly [number, number, number][] = [[9, 7, 2], [33, 65, 3], [70, 130, 1]];
  for (const type of GGML_QUANT_TYPES) {
    test(`${type}: the vector and matrix forms at odd sizes, input and weight views`, () => {
      const dev = device();
      const qk = ggmlBlockOf(type).qk;
      const over: string[] = [];
      for (const [form, shapes] of [['vector', VECTOR], ['matrix', MATRIX]] as const) {
        for (const [m, n, blocks] of shapes) {
          const k = qk * blocks;
          const e = product(dev, type, m, n, k, form, m * 7919 + n * 104729 + k);
          if (!(e <= tolFor(type, form, m, n, k))) over.push(`${form} [${m}, ${n}, ${k}]: ${e}`);
        }
      }
      expect(over).toEqual([]);
    }, 120_000);
  }

  // One token of the int8 entries at large sizes and at Q6_K's bound between them (cuda's launches; the other
  // backends run these sizes through the vector kernels the odd sizes above cover): Q8_0 over many units and a
  // partial one (8197 rows; k 704, 22 chunks; 2 bytes a row past 4), Q6_K up to and past GC_Q6_MAX_BLOCKS tiles (_i8,
  // then _i8g: k 256, one super-block, rows on 2 bytes, 32784 rows half a unit of 32), and _i8g with rows past N in a
  // warp's last group of 4 (32771 rows; k 2816, 11 super-blocks: rows alternately on 4 and 2 bytes).
  test.skipIf(backend !== 'cuda')('one token: the int8 entries (Q8_0 [8197, 704], Q6_K [32768 | 32784, 256], [32771, 2816])', () => {
    const dev = device();
    const over: string[] = [];
    const cases = [['Q8_0', 8197, 704], ['Q6_K', 32768, 256], ['Q6_K', 32784, 256], ['Q6_K', 32771, 2816]] as const;
    for (const [type, n, k] of cases) {
      const e = product(dev, type, 1, n, k, undefined, n + k);
      if (!(e <= tolFor(type, 'vector', 1, n, k))) over.push(`${type} [${n}, ${k}]: ${e}`);
    }
    expect(cases.map(([type, n, k]) => ggmlMatmulCudaLaunch(type, 'vector', 1, n, k).entry ?? 'the vector entry'))
      .toEqual(['kernel_mul_mv_q8_0_f32_i8', 'kernel_mul_mv_q6_K_f32_i8', 'kernel_mul_mv_q6_K_f32_i8g', 'kernel_mul_mv_q6_K_f32_i8g']);
    expect(over).toEqual([]);
  }, 120_000);

  // Split k, [m, n, k, scratch in m x n planes, splits] at 132 SMs: ragged m and n tiles with 72 chunks as 9 slices;
  // 50 chunks as 6 (the last 5); one tile as 16; a scratch of 3 planes; one plane (no split: the matrix kernel).
  const SPLIT: readonly [GgmlQuantType, number, number, number, number, number][] = [
    ['Q4_K', 70, 130, 2304, 64, 9], ['Q8_0', 33, 65, 1600, 64, 6], ['Q6_K', 9, 7, 8192, 64, 16], ['Q5_K', 64, 200, 4096, 3, 3],
    ['Q4_0', 40, 24, 1024, 1, 1],
  ];
  test(`split k: ${SPLIT.map(([t, m, n, k, , s]) => `${t} [${m}, ${n}, ${k}] / ${s}`).join(', ')}, poisoned scratch`, () => {
    const dev = device();
    const over: string[] = [];
    // On cuda also two of a 64-token prompt's products at the 35B-A3B's sizes (its out_proj; a / b).
    const real: typeof SPLIT = backend === 'cuda' ? [['Q4_K', 64, 2048, 4096, 8, 8], ['Q6_K', 64, 32, 2048, 8, 8]] : [];
    for (const [type, m, n, k, planes, splits] of [...SPLIT, ...real]) {
      const e = product(dev, type, m, n, k, 'matrix', m * 17 + n + k, { sms: 132, scratch: planes * m * n, splits });
      if (!(e <= tolOf('matrix', k))) over.push(`${type} [${m}, ${n}, ${k}]: ${e}`);
    }
    expect(over).toEqual([]);
  }, 120_000);

  test('split k: the same result whichever slice arrives last, and again from a replay (the words end as they began)', () => {
    const dev = device();
    const [m, n, k] = [64, 256, 4096];
    const r = rng(77);
    const wq = ggmlQuantize('Q4_K', randomArray(r, n * k, -1, 1), n, k);
    const xa = Float32Array.from(randomArray(r, m * k, -1, 1));
    const w = dev.upload('u8', [wq.length], wq);
    const x = dev.upload('f32', [m, k], xa);
    const ys = [dev.alloc('f32', [m, n]), dev.alloc('f32', [m, n])];
    const scratch = dev.alloc('f32', [16 * m * n]);
    const limits = { ...dev.limits, multiprocessors: 132 };
    const enc = dev.encoder({ replayable: true });
    for (const y of ys) record(enc, planQuantizedMatmulGgml({ input: x, weight: w, output: y, m, n, k, ggmlType: 'Q4_K', scratch }, limits, dev));
    const got: Float32Array[] = [];
    for (let round = 0; round < 3; round++) {
      for (const y of ys) y.fill(Number.NaN);
      if (round === 0) enc.commitAndWait();
      else enc.replayAndWait();
      got.push(...ys.map((y) => Float32Array.from(y.readNumbers())));
    }
    enc.release();
    const want = ggmlMatmulRef('Q4_K', xa, wq, m, n, k);
    const e = dotErr(got[0]!, want.y, want.abs);
    expect(e).toBeLessThanOrEqual(tolOf('matrix', k));
    for (const g of got) expect(g).toEqual(got[0]!);
    for (const b of [w, x, ...ys, scratch]) b.release();
  }, 120_000);

  test("mlx-native's routing: the vector form up to 8 tokens, the matrix form past them (Q4_K too); either form at any m", () => {
    const dev = device();
    const plan = (m: number, type: GgmlQuantType, form?: 'vector' | 'matrix'): string => planQuantizedMatmulGgml({
      input: dev.alloc('f32', [m * 256]), weight: dev.alloc('u8', [4 * ggmlRowBytesOf(type, 256)]), output: dev.alloc('f32', [m * 4]),
      m, n: 4, k: 256, ggmlType: type, form,
    }, dev.limits, dev).dispatches[0]!.kernel;
    expect([plan(1, 'Q4_K'), plan(8, 'Q8_0'), plan(9, 'Q4_K'), plan(9, 'Q5_K'), plan(2, 'Q6_K', 'matrix'), plan(20, 'Q4_0', 'vector')]).toEqual([
      'kernel_mul_mv_q4_K_f32', 'kernel_mul_mv_q8_0_f32', 'kernel_mul_mm_q4_K_f32', 'kernel_mul_mm_q5_K_f32', 'kernel_mul_mm_q6_K_f32',
      'kernel_mul_mv_q4_0_f32',
    ]);
    // The vector kernels past 8 tokens (CUDA: two groups of 8) and the matrix kernels at one.
    const over: string[] = [];
    for (const [type, m, form] of [['Q8_0', 11, 'vector'], ['Q5_K', 1, 'matrix'], ['Q4_0', 17, 'vector']] as const) {
      const k = ggmlBlockOf(type).qk * 2;
      const e = product(dev, type, m, 19, k, form, m + 3);
      if (!(e <= tolOf(form, k))) over.push(`${type} ${form} m ${m}: ${e}`);
    }
    expect(over).toEqual([]);
  });

  test('Qwen3.6-like rows: k = 2048 (hidden of the 35B-A3B), one token and a 40-token prefill, every format', () => {
    const dev = device();
    const over: string[] = [];
    for (const type of GGML_QUANT_TYPES) {
      for (const m of [1, 40]) {
        const form = m <= 8 ? 'vector' : 'matrix';
        const e = product(dev, type, m, 24, 2048, undefined, m * 31 + type.length);
        if (!(e <= tolOf(form, 2048))) over.push(`${type} m ${m}: ${e}`);
      }
    }
    expect(over).toEqual([]);
  }, 120_000);

  // One token where CUDA takes a group-column engine, [n, k] a format and the seed's multiplier of n: Q4_K from one
  // super-block to past the vector engine's shared memory; Q8_0 with a partial last round (704), one of two blocks (64),
  // rows on 2 bytes (96, 736: odd blocks), long rows; Q6_K from one super-block, rows on 2 bytes (768: odd
  // super-blocks), long rows. Rows past a tile in each.
  const ONE_TOKEN: readonly [GgmlQuantType, number, readonly (readonly [number, number])[]][] = [
    ['Q4_K', 1, [[19, 256], [40, 17408], [3, 5376], [2816, 4096]]],
    ['Q8_0', 3, [[37, 704], [5, 64], [7, 96], [19, 736], [16, 2112], [9, 17408]]],
    ['Q6_K', 5, [[37, 256], [19, 768], [16, 2048], [9, 17408]]],
  ];
  for (const [type, seedOf, shapes] of ONE_TOKEN) {
    test(`one token of ${type} (CUDA's group-column engine): ${shapes.map(([n, k]) => `[${n}, ${k}]`).join(', ')}`, () => {
      const dev = device();
      const over: string[] = [];
      for (const [n, k] of shapes) {
        const e = product(dev, type, 1, n, k, 'vector', n * seedOf + k);
        if (!(e <= tolOf('vector', k))) over.push(`[1, ${n}, ${k}]: ${e}`);
      }
      expect(over).toEqual([]);
    }, 120_000);
  }

  test('blocks by hand through the kernels: ggml_dequantize to f32 gives the values worked out by hand', () => {
    const dev = device();
    for (const { type, bytes, values } of handBlocks()) {
      const out = dev.alloc('f32', [values.length]);
      out.fill(Number.NaN);
      run(dev, (e) => ggmlDequantize(e, { src: dev.upload('u8', [bytes.length], bytes), output: out, count: values.length, ggmlType: type }));
      // The sign of a zero is the kernel's choice (d * 0 or a fused multiply-add with +0): compared as numbers.
      const plusZero = (a: ArrayLike<number>) => Array.from(a, (x) => x + 0);
      expect({ type, got: plusZero(out.readNumbers()) }).toEqual({ type, got: plusZero(values) });
    }
  });

  test('ggml_dequantize: every format to f32, f16 and bf16, one block and several, src a view', () => {
    const dev = device();
    const over: string[] = [];
    const r = rng(17);
    for (const type of GGML_QUANT_TYPES) {
      for (const [dtype, blocks] of [['f32', 3], ['f16', 1], ['bf16', 5]] as const) {
        const { qk } = ggmlBlockOf(type);
        const count = qk * blocks;
        const w = ggmlQuantize(type, randomArray(r, count, -2, 2), 1, count);
        const root = dev.alloc('u8', [w.length + 64]);
        root.fill(0xa5);
        const view = root.view('u8', [w.length], 32);
        view.write(w);
        const out = dev.alloc(dtype, [count]);
        out.fill(Number.NaN);
        run(dev, (e) => ggmlDequantize(e, { src: view, output: out, count, ggmlType: type }));
        const err = scaledErr(out.readNumbers(), ggmlDequantizeRef(type, w, count));
        if (!(err <= TOL[dtype])) over.push(`${type} -> ${dtype} (${blocks} blocks): ${err}`);
      }
    }
    expect(over).toEqual([]);
  });

  test('embedding rows from tables of blocks: every format and output dtype, a scale, an id past the table read as the last row', () => {
    const dev = device();
    const over: string[] = [];
    const r = rng(23);
    for (const type of GGML_QUANT_TYPES) {
      for (const [dtype, scale] of [['f32', undefined], ['bf16', 73.3], ['f16', 0.5]] as const) {
        const { qk } = ggmlBlockOf(type);
        const [vocab, hidden] = [6, qk * (type === 'Q4_0' ? 3 : 1)];
        const table = ggmlQuantize(type, randomArray(r, vocab * hidden, -1, 1), vocab, hidden);
        const ids = [4, 0, 9, 5, 2];
        const root = dev.alloc('u8', [table.length + 96]);
        const tv = root.view('u8', [table.length], 48);
        tv.write(table);
        const idv = dev.alloc('u32', [ids.length + 4]).view('u32', [ids.length], 16);
        idv.writeNumbers(ids);
        const out = dev.alloc(dtype, [ids.length * hidden]);
        out.fill(Number.NaN);
        run(dev, (e) => embedding(e, { table: tv, tableType: type, tokenIds: idv, output: out, vocabSize: vocab, hiddenSize: hidden, nTokens: ids.length,
          scale }));
        const want = ggmlEmbeddingRef(type, table, ids, vocab, hidden, scale ?? 1);
        const err = scaledErr(out.readNumbers(), want);
        if (!(err <= TOL[dtype])) over.push(`${type} -> ${dtype}: ${err}`);
      }
    }
    expect(over).toEqual([]);
  });

  test('a GGUF file: quantized tensors written, read by ts/weights, uploaded packed and multiplied by their ggml type', () => {
    const dev = device();
    const r = rng(29);
    const [n, k, m] = [12, 512, 3];
    const tensors = GGML_QUANT_TYPES.map((type) => ({
      name: `blk.0.ffn_up_${type.toLowerCase()}.weight`, type, dims: [k, n], data: ggmlQuantize(type, randomArray(r, n * k, -1, 1), n, k),
    }));
    const file = ggufBytes({ metadata: [['general.architecture', { type: 'string', value: 'qwen35moe' }]], tensors }, r);
    const gguf = GgufFile.fromBytes(file.bytes, 'ggml-test.gguf');
    const packed = gguf.uploadPacked(dev);
    const x = Float32Array.from(randomArray(r, m * k, -1, 1));
    const input = dev.upload('f32', [m, k], x);
    const over: string[] = [];
    for (const t of tensors) {
      const info = gguf.info(t.name);
      expect([info.dtype, info.shape, info.storage.dtype]).toEqual([t.type, [n, k], 'u8']);
      const weight = packed.get(t.name);
      expect(weight.byteOffset % 16).toBe(0);
      const output = dev.alloc('f32', [m, n]);
      output.fill(Number.NaN);
      run(dev, (e) => quantizedMatmulGgml(e, { input, weight, output, m, n: info.shape[0]!, k: info.shape[1]!, ggmlType: info.dtype as GgmlQuantType }));
      const want = ggmlMatmulRef(t.type, x, gguf.bytes(t.name), m, n, k);
      const e = dotErr(output.readNumbers(), want.y, want.abs);
      if (!(e <= tolOf('vector', k))) over.push(`${t.type}: ${e}`);
    }
    packed.release();
    expect(over).toEqual([]);
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('quantized_matmul_ggml', [
  // The crate's rule: each buffer at least its size.
  ...([
    { ggmlType: 'Q4_0', m: 3, n: 5, k: 64 },
    { ggmlType: 'Q6_K', m: 9, n: 3, k: 256 },
  ] as const).map((p): Case => ({
    fn: 'quantizedMatmulGgml', op: 'quantized_matmul_ggml',
    keys: {
      input: buf(F, { freeCount: true }), weight: buf(['u8'], { freeCount: true }), output: out(F, { freeCount: true }), m: int, n: int, k: int,
      ggmlType: { kind: 'enum', values: GGML_QUANT_TYPES }, form: { kind: 'enum', values: ['vector', 'matrix', undefined] },
    },
    make: (d) => ({
      input: a(d, 'f32', p.m * p.k), weight: a(d, 'u8', p.n * ggmlRowBytesOf(p.ggmlType, p.k)), output: a(d, 'f32', p.m * p.n), ...p,
    }),
    fill: (args) => ggmlBlocks(args.weight as Buffer, args.ggmlType),
  })),
  {
    fn: 'ggmlDequantize', op: 'ggml_dequantize',
    keys: { src: buf(['u8']), output: out(['f32', 'f16', 'bf16']), count: int, ggmlType: { kind: 'enum', values: GGML_QUANT_TYPES } },
    make: (d) => ({ src: a(d, 'u8', 2 * ggmlRowBytesOf('Q5_K', 256)), output: a(d, 'f16', 512), count: 512, ggmlType: 'Q5_K' }),
    fill: (args) => ggmlBlocks(args.src as Buffer, args.ggmlType),
  },
]);
