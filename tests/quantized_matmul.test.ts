// quantized_matmul: the param packer against the header and the .metal
// bindings, MLX's packing against words packed by hand, the quantizer
// against groups quantized by hand and against its error bound, every
// validation rule of each op, and parity against the float64
// dequantize-then-multiply reference on every backend: 4, 6 and 8 bits x
// group sizes 32, 64 and 128 x f32, f16 and bf16, the vector and the matrix
// forms at sizes that are not multiples of any tile (n = 1, 7, 33, 70, ...;
// k a multiple of the group as MLX requires), one row and many, weights,
// scales and biases as views inside one larger allocation (as uploadPacked
// lays a checkpoint out), and mlx-native's kernels with its own examples,
// its odd layouts (any k and group size, 6-bit rows of 3 bytes per 4
// values) and both of quantized_matmul_simd's kernels; and larger sizes
// (CUDA's 128 x 256 tiles, many vector blocks).
//
// Error measure: |got - want| / sum_k |x w| per output (w dequantized in
// float64), as in tests/dense.test.ts (which says why). Tolerance: TOL of the
// type the dequantized weight meets x in. f32 (quantized_{mv,mm}_f32: sums of
// f32 products, grown as sqrt(k / 4096) past 4096 as dense's); f16 and bf16
// (the matrix form stages the weight in x's dtype, CUDA's tensor cores take
// it so, each product erring by at most 2^-11 or 2^-9 of |x w|, the output
// rounded once more); and bf16 for mlx-native's kernels, whose x is rounded
// to bf16 (the reference rounds it too) and whose weight reaches CUDA's
// tensor cores in bf16.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/quantized_matmul.metal' with { type: 'text' };
import type { Buffer, DType, Device } from '../ts/index.ts';
import {
  QUANTIZED_MATMUL_KERNELS,
  QUANTIZED_MATMUL_SOURCES,
  QUANTIZED_MV_CUDA_SHARED_BYTES,
  affineQuantizedMatmul,
  packQuantizedMatmulParams,
  planAffineQuantizedMatmul,
  planQuantizedMatmul,
  planQuantizedMatmulSimd,
  planQuantizedMatmulSimdBf16,
  quantizedChunked,
  quantizedCudaEngine,
  quantizedCudaEntry,
  quantizedCudaLaunch,
  GC_MIN_N,
  gcSharedBytes,
  quantizedMatmul,
  quantizedMatmulSimd,
  quantizedMatmulSimdApplies,
  quantizedMatmulSimdBf16,
  quantizedDequantize,
  quantizedRowBytes,
  type AffineDType,
  affineDequantize,
  affinePack,
  affineQuantize,
  affineQuantizedMatmulRef,
  affineRowBytes,
  affineUnpack,
  affineWords,
} from '../ts/ops/quantized_matmul.ts';
import {
  describeBackends, describeValidation, dotErr, dotTolerance, expectInvalid, maxRelErr, randomArray, rng, roundedTo, run, TARGET_LIMITS, TOL,
} from './helpers.ts';
import { a, BF, buf, EW, int, opContract, out, randomWords, U32, type Case } from './op-contract.ts';
import { compactEntryProblem, CXX } from './cuda-source.ts';
import { record } from '../ts/plan.ts';
import { joinSources } from '../ts/registry.ts';
import { kernelWrites } from '../ts/metal-source.ts';

/**
 * Random weights [n, k] quantized (affineQuantize), and x [m, k], uploaded as
 * views at non-zero offsets of one u8 allocation with garbage around them
 * (the weight as u32 words, scales and biases in sdt), the output a
 * NaN-poisoned view of another.
 */
interface Setup {
  x: Buffer;
  weight: Buffer;
  scales: Buffer;
  biases: Buffer;
  output: Buffer;
  want: { y: Float64Array; abs: Float64Array };
  /** The output allocation and where the view starts in it (bytes). */
  outRoot: Buffer;
  outAt: number;
  roots: Buffer[];
  /** The packed rows, scales and biases as written. */
  packed: Uint8Array;
  scaleValues: Float64Array;
  biasValues: Float64Array;
}

function setup(dev: Device, o: { m: number; n: number; k: number; gs: number; bits: number; xdt: DType; sdt: 'f32' | 'f16' | 'bf16';
  weightDtype?: 'u32' | 'u8'; roundX?: boolean; seed: number; crateLayout?: boolean }): Setup {
  const r = rng(o.seed);
  const { m, n, k, gs, bits } = o;
  // MLX's quantizer where k is a multiple of the group; otherwise (mlx-native's layouts) random q, scales and biases.
  let packed: Uint8Array;
  let scales: Float64Array;
  let biases: Float64Array;
  if (!o.crateLayout) {
    const qz = affineQuantize(randomArray(r, n * k, -1, 1), n, k, gs, bits, o.sdt);
    ({ packed, scales, biases } = qz);
  } else {
    const q = Array.from({ length: n * k }, () => Math.floor(r.uniform(0, 2 ** bits)));
    packed = affinePack(q, n, k, bits);
    const groups = n * Math.ceil(k / gs);
    scales = roundedTo(o.sdt, randomArray(r, groups, 0.001, 0.02));
    biases = roundedTo(o.sdt, randomArray(r, groups, -0.1, 0.1));
  }
  const xs = roundedTo(o.xdt, randomArray(r, m * k, -1, 1));
  const size = (d: DType): number => (d === 'f32' || d === 'u32' ? 4 : d === 'u8' ? 1 : 2);
  const al = (b: number): number => Math.ceil(b / 16) * 16;
  // One allocation: 32 bytes of garbage, then x, weight, scales and biases, each 16-byte aligned, garbage after.
  const parts = [m * k * size(o.xdt), packed.byteLength, scales.length * size(o.sdt), biases.length * size(o.sdt)];
  const at: number[] = [];
  let end = 32;
  for (const p of parts) {
    at.push(end);
    end = al(end + p) + 16;
  }
  const root = dev.alloc('u8', [end + 32]);
  root.write(Uint8Array.from({ length: end + 32 }, () => Math.floor(r.uniform(0, 256))));
  const wdt = o.weightDtype ?? 'u32';
  const x = root.view(o.xdt, [m, k], at[0]!);
  x.writeNumbers(xs);
  const weight = wdt === 'u32' ? root.view('u32', [packed.byteLength / 4], at[1]!) : root.view('u8', [packed.byteLength], at[1]!);
  weight.write(new DataView(packed.buffer, packed.byteOffset, packed.byteLength));
  const sb = root.view(o.sdt, [scales.length], at[2]!);
  sb.writeNumbers(scales);
  const bb = root.view(o.sdt, [biases.length], at[3]!);
  bb.writeNumbers(biases);
  const outRoot = dev.alloc(o.xdt, [m * n + 64]);
  outRoot.fill(Number.NaN);
  const outAt = 32;
  const output = outRoot.view(o.xdt, [m, n], outAt);
  const xr = o.roundX ? roundedTo('bf16', xs) : xs;
  return {
    x, weight, scales: sb, biases: bb, output, outRoot, outAt, roots: [root, outRoot], packed, scaleValues: scales, biasValues: biases,
    want: affineQuantizedMatmulRef(xr, packed, scales, biases, m, n, k, gs, bits),
  };
}

/** The error of s's output against its reference; Infinity where anything outside the output view was written. */
function errOf(s: Setup): number {
  const err = dotErr(s.output.readNumbers(), s.want.y, s.want.abs);
  const all = s.outRoot.readNumbers();
  const skip = s.outAt / (s.output.byteLength / s.output.elementCount);
  const outside = [...all.slice(0, skip), ...all.slice(skip + s.output.elementCount)];
  for (const b of s.roots) b.release();
  return outside.every(Number.isNaN) ? err : Infinity;
}

describe('quantized_matmul param packer matches the header and the .metal bindings', () => {
  test('QuantizedMatmulParams (M, K, N, group_size, bits): buffer(5) of every product kernel, buffer(4) of the dequantization\'s, mlx-native\'s order', () => {
    for (const k of QUANTIZED_MATMUL_KERNELS) {
      if (k.startsWith('quantized_dequantize_')) {
        expect(src).toContain(`[[host_name("${k}")]] kernel q_dequantize_`);
        continue;
      }
      expect(src).toMatch(new RegExp(`kernel void ${k}\\([^{]*constant QuantizedMatmulParams&\\s+params\\s+\\[\\[buffer\\(5\\)\\]\\]`));
    }
    expect(src).toMatch(/kernel void q_dequantize\(\s*device const uchar\*\s+weight\s+\[\[buffer\(0\)\]\],\s*device const T\*\s+scales\s+\[\[buffer\(1\)\]\],\s*device const T\*\s+biases\s+\[\[buffer\(2\)\]\],\s*device O\*\s+output\s+\[\[buffer\(3\)\]\],\s*constant QuantizedMatmulParams&\s+p\s+\[\[buffer\(4\)\]\]/);
    const p = packQuantizedMatmulParams({ m: 3, k: 64, n: 7, groupSize: 32, bits: 6 });
    const v = new DataView(p.buffer, p.byteOffset, p.byteLength);
    expect([p.byteLength, ...Array.from({ length: 5 }, (_, i) => v.getUint32(4 * i, true))]).toEqual([20, 3, 64, 7, 32, 6]);
  });
  test('launches: the CUDA engine by kernel and size, the crate\'s SIMD rule, shared memory within an H100\'s', () => {
    expect(quantizedCudaEngine('quantized_mv_bf16', 3, 7, 64, 32, 4)).toBe('vector');
    expect(quantizedCudaEngine('quantized_mm_f16', 3, 7, 64, 32, 4)).toBe('matrix');
    expect(quantizedCudaEngine('quantized_mv_f32', 1, 8192, 64, 32, 4)).toBe('simt');
    expect([8, 9].map((m) => quantizedCudaEngine('quantized_matmul', m, 7, 256, 64, 4))).toEqual(['vector', 'matrix']);
    expect(quantizedCudaEngine('quantized_matmul_simd_bf16', 1, 8192, 100, 4, 4)).toBe('any');
    // The group-column engine: one token, 4 bits, n from GC_MIN_N, x's shared copy within its bound.
    expect([
      ['quantized_mv_bf16', 1, GC_MIN_N, 5120, 64, 4], ['quantized_mv_f16', 1, GC_MIN_N - 1, 5120, 64, 4], ['quantized_mv_bf16', 2, 8192, 5120, 64, 4],
      ['quantized_mv_bf16', 1, 8192, 5120, 64, 6], ['quantized_matmul_simd', 1, 248320, 2048, 64, 4], ['quantized_matmul', 1, 8192, 49152, 128, 4],
    ].map(([kn, m, n, k, gs, bits]) => quantizedCudaEngine(kn as string, m as number, n as number, k as number, gs as number, bits as number)))
      .toEqual(['groups', 'vector', 'vector', 'vector', 'groups', 'vector']);
    expect(quantizedCudaLaunch('quantized_mv_bf16', 1, 17408, 5120, 64, 6)).toEqual({
      grid: [1088, 1, 1], threads: [256, 1, 1], threadgroupMemory: { 0: QUANTIZED_MV_CUDA_SHARED_BYTES }, entry: 'quantized_mv_bf16_vec6',
    });
    // 1088 tiles (past 1024): 2 warps a tile; 772: 4. Shared: 10 rounds of 8 groups of 64 as 16-bit values, their sums, 1 KiB.
    expect(quantizedCudaLaunch('quantized_mv_bf16', 1, 17408, 5120, 64, 4)).toEqual({
      grid: [544, 1, 1], threads: [128, 1, 1], threadgroupMemory: { 0: 10 * 512 * 2 + 10 * 8 * 4 + 1024 }, entry: 'quantized_mv_bf16_gc64_w2',
    });
    expect(quantizedCudaLaunch('quantized_matmul_simd', 1, 12352, 2048, 64, 4).grid).toEqual([772, 1, 1]);
    expect(gcSharedBytes(5376, 64)).toBe(11 * 512 * 2 + 11 * 8 * 4 + 1024);
    expect(quantizedCudaLaunch('quantized_mv_bf16', 1, 4096, 4096, 64, 8).grid).toEqual([256, 1, 1]);
    expect(quantizedCudaLaunch('quantized_mm_bf16', 4096, 4096, 4096, 64, 4)).toEqual({
      grid: [16 * 32, 1, 1], threads: [256, 1, 1], threadgroupMemory: { 0: 122880 },
    });
    // mlx-native's kernels take the 64 x 128 tiles at every size.
    expect(quantizedCudaLaunch('quantized_matmul_simd_bf16', 4096, 4096, 4096, 64, 4)).toEqual({
      grid: [32 * 64, 1, 1], threads: [128, 1, 1], threadgroupMemory: { 0: 61440 },
    });
    expect(quantizedCudaLaunch('quantized_matmul', 3, 10, 100, 48, 4).grid).toEqual([1, 1, 1]);
    expect(122880).toBeLessThanOrEqual(TARGET_LIMITS.cuda.maxThreadgroupMemory);
    expect([[4, 8, 256], [8, 16, 512], [6, 8, 256], [4, 12, 256], [4, 8, 128]].map(([bits, n, k]) =>
      quantizedMatmulSimdApplies({ bits: bits!, n: n!, k: k! }))).toEqual([true, true, false, false, false]);
  });
});

describe('compact CUDA entries of the vector forms (quantizedCudaEntry)', () => {
  test('the engine\'s entry where the sizes name one: vector by bits, group-column by group size and warps; none elsewhere', () => {
    expect([
      ['quantized_matmul_simd', 1, 2048, 4096, 64, 4], ['quantized_matmul', 8, 2048, 4096, 32, 6], ['quantized_matmul_simd_bf16', 3, 100, 256, 128, 8],
      ['quantized_matmul_simd', 1, 12352, 2048, 64, 4], ['quantized_matmul_simd', 1, 248320, 2048, 64, 4],
      ['quantized_matmul_simd_bf16', 1, 8192, 5120, 128, 4],
      // the matrix engine (m 9), the any-layout one (k not a multiple of the group), the family's own kernels
      ['quantized_mv_bf16', 1, 2048, 4096, 64, 4], ['quantized_mv_f16', 1, 17408, 5120, 32, 4],
      // the matrix engine (m 9), the any-layout one (k not a multiple of the group), f32's SIMT engine, the matrix kernels
      ['quantized_matmul_simd', 9, 2048, 4096, 64, 4], ['quantized_matmul', 1, 2048, 96, 48, 4], ['quantized_mv_f32', 1, 2048, 4096, 64, 4],
      ['quantized_mm_bf16', 1, 2048, 4096, 64, 4],
    ].map(([kn, m, n, k, gs, bits]) => quantizedCudaLaunch(kn as string, m as number, n as number, k as number, gs as number, bits as number).entry))
      .toEqual([
        'quantized_matmul_vec4', 'quantized_matmul_vec6', 'quantized_matmul_simd_bf16_vec8',
        'quantized_matmul_gc64_w4', 'quantized_matmul_gc64_w2', 'quantized_matmul_simd_bf16_gc128_w4',
        'quantized_mv_bf16_vec4', 'quantized_mv_f16_gc32_w2',
        undefined, undefined, undefined, undefined,
      ]);
  });
  test.if(CXX !== undefined)('every entry the rule names is in shaders/cuda/quantized_matmul.cu with the kernel\'s parameters', () => {
    const named = new Map<string, string>();
    for (const kernel of ['quantized_matmul', 'quantized_matmul_simd', 'quantized_matmul_simd_bf16', 'quantized_mv_f16', 'quantized_mv_bf16']) {
      for (const bits of [4, 6, 8]) for (const gs of [32, 64, 128]) for (const [m, n] of [[1, 64], [8, 64], [1, GC_MIN_N], [1, 16 * 1025]]) {
        const e = quantizedCudaEntry(kernel, m!, n!, 2 * 128, gs, bits);
        if (e !== undefined) named.set(e, kernel);
      }
    }
    expect(named.size).toBe(36);
    expect([...named].map(([e, kernel]) => compactEntryProblem('quantized_matmul', kernel, e)).filter((p) => p !== '')).toEqual([]);
    // Kernels that share an entry (quantized_matmul, quantized_matmul_simd) write alike: the registry gives an entry's
    // pipeline the writes of the kernel it stands for, one mask for both.
    const metal = joinSources(QUANTIZED_MATMUL_SOURCES.metal);
    expect(kernelWrites(metal, 'quantized_matmul')).toBe(kernelWrites(metal, 'quantized_matmul_simd'));
  });
});

describe('MLX\'s packing and quantizer against values by hand', () => {
  test('words packed by hand: 4 bits low nibble first, 8 bits low byte first, 6 bits straddling words', () => {
    // MLX's docs: "for 4-bit quantization we fit 8 elements in an unsigned 32 bit
    // integer where the 1st element occupies the 4 least significant bits".
    expect(Array.from(affineWords(affinePack([1, 2, 3, 4, 5, 6, 7, 8], 1, 8, 4)))).toEqual([0x87654321]);
    expect(Array.from(affineWords(affinePack([0x11, 0x22, 0x33, 0x44, 0xff, 0, 0x80, 1], 1, 8, 8)))).toEqual([0x44332211, 0x018000ff]);
    // 6 bits, q = 1 .. 16: 4 values in 3 bytes (0x81, 0x30, 0x10 for 1, 2, 3, 4);
    // value 5 (q 6) holds bits 30-35, value 10 (q 11) bits 60-65.
    const six = affinePack(Array.from({ length: 16 }, (_, j) => j + 1), 1, 16, 6);
    expect(Array.from(six.subarray(0, 3))).toEqual([0x81, 0x30, 0x10]);
    expect(Array.from(affineWords(six))).toEqual([0x85103081, 0xb2892071, 0x40f38d30]);
    expect(Array.from(affineUnpack(six, 1, 16, 6))).toEqual(Array.from({ length: 16 }, (_, j) => j + 1));
  });
  test('rows of mlx-native\'s layout for any k: whole words for 4 and 8 bits, 3 bytes per 4 values for 6', () => {
    expect([affineRowBytes(4, 4), affineRowBytes(9, 4), affineRowBytes(4, 6), affineRowBytes(5, 6), affineRowBytes(5, 8)]).toEqual([4, 8, 3, 6, 8]);
    for (const [k, bits] of [[4, 4], [9, 4], [4, 6], [5, 6], [5, 8], [64, 6], [96, 4]] as const) expect(quantizedRowBytes(k, bits)).toBe(affineRowBytes(k, bits));
    // MLX's rows: k * bits / 8 bytes for k a multiple of 32.
    for (const bits of [4, 6, 8]) expect(affineRowBytes(96, bits)).toBe((96 * bits) / 8);
    const r = rng(3);
    for (const [k, bits] of [[5, 6], [7, 4], [3, 8], [33, 6]] as const) {
      const q = Array.from({ length: 3 * k }, () => Math.floor(r.uniform(0, 2 ** bits)));
      expect(Array.from(affineUnpack(affinePack(q, 3, k, bits), 3, k, bits))).toEqual(q);
    }
    expect([quantizedChunked(64, 32), quantizedChunked(96, 64), quantizedChunked(64, 16), quantizedChunked(4, 64)]).toEqual([true, false, false, false]);
  });
  test('groups quantized by hand: the edge of larger magnitude exact, scale negative when it is the max', () => {
    // 0 .. 15 twice: |min| > |max| fails, so s = -(15 / 15) = -1, edge = max = 15, q = 15 - w.
    const up = Array.from({ length: 32 }, (_, i) => i % 16);
    const a = affineQuantize(up, 1, 32, 32, 4, 'bf16');
    expect([a.scales[0], a.biases[0]]).toEqual([-1, 15]);
    expect(Array.from(a.q)).toEqual(up.map((w) => 15 - w));
    expect(Array.from(affineWords(a.packed))).toEqual([0x89abcdef, 0x01234567, 0x89abcdef, 0x01234567]);
    expect(Array.from(affineDequantize(a.packed, a.scales, a.biases, 1, 32, 32, 4))).toEqual(up);
    // 0 .. -15: edge = min = -15, s = 1, q = w + 15.
    const down = up.map((w) => -w);
    const b = affineQuantize(down, 1, 32, 32, 4, 'f16');
    expect([b.scales[0], b.biases[0]]).toEqual([1, -15]);
    expect(Array.from(b.q)).toEqual(down.map((w) => w + 15));
    // A constant group: the step is 1e-7 and q0 = 0, so bias 0 and every q 0.
    const c = affineQuantize(new Array(32).fill(0), 1, 32, 32, 8, 'f32');
    expect([c.biases[0], Array.from(c.q).every((q) => q === 0)]).toEqual([0, true]);
    expect(c.scales[0]).toBeCloseTo(-1e-7, 12);
    // Two groups of 64 in a row, 8 bits: each its own scale; [-1, 0.5] keeps -1 exact (q 0).
    const w = Array.from({ length: 128 }, (_, i) => (i < 64 ? -1 + (1.5 * i) / 63 : (2 * (i - 64)) / 63));
    const d = affineQuantize(w, 1, 128, 64, 8, 'f32');
    expect(d.biases[0]).toBe(-1);
    expect(d.q[0]).toBe(0);
    expect(d.biases[1]).toBe(2);
  });
  test('random weights, every bits x group size x scale dtype: q in range, |w - dequantized| within half a step (or clamped) and the rounding of s and b', () => {
    const r = rng(11);
    for (const bits of [4, 6, 8]) {
      for (const gs of [32, 64, 128]) {
        for (const sdt of ['f32', 'f16', 'bf16'] as const) {
          const [rows, k] = [3, 2 * gs];
          const w = randomArray(r, rows * k, -2, 1.5);
          const qz = affineQuantize(w, rows, k, gs, bits, sdt);
          expect(qz.q.every((q) => q < 2 ** bits)).toBe(true);
          const deq = affineDequantize(qz.packed, qz.scales, qz.biases, rows, k, gs, bits);
          const u = sdt === 'f32' ? 2 ** -23 : sdt === 'f16' ? 2 ** -10 : 2 ** -8;
          const n = 2 ** bits - 1;
          for (let i = 0; i < rows * k; i++) {
            const g = Math.floor(i / gs);
            const [s, b] = [qz.scales[g]!, qz.biases[g]!];
            // Inside [b, b + n s] half a step; past it (the step shrinks so that the edge is exact) clamped to its end.
            const v = Math.fround(w[i]!);
            const past = Math.max(0, Math.min(b, b + n * s) - v, v - Math.max(b, b + n * s));
            const bound = past + Math.abs(s) * (0.5 + n * u) + Math.abs(b) * u + 1e-6;
            if (!(Math.abs(deq[i]! - v) <= bound)) {
              throw new Error(`bits ${bits} gs ${gs} ${sdt}: w[${i}] = ${w[i]} dequantized to ${deq[i]} (bound ${bound})`);
            }
          }
        }
      }
    }
  });
});

describeValidation('quantized_matmul validation', ({ enc, buf }) => {
  type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
  test('quantized_dequantize: every rule', () => {
    // 5 rows of k 64, 4 bits: 32 bytes a row, 2 groups of 32.
    const base = () => ({
      weight: buf('u32', 40), scales: buf('bf16', 10), biases: buf('bf16', 10), output: buf('f16', 320), n: 5, k: 64, groupSize: 32, bits: 4,
    });
    const cases: Case[] = [
      [{ n: 0 }, 'n', 'a positive integer', '0'],
      [{ k: 1.5 }, 'k', 'a positive integer', '1.5'],
      [{ bits: 3 }, 'bits', '4, 6 or 8', '3'],
      [{ groupSize: 48 }, 'groupSize', '32, 64 or 128', '48'],
      [{ k: 96, groupSize: 64 }, 'k', 'a multiple of groupSize (64)', '96'],
      [{ n: 2 ** 32, k: 32 }, 'n * k / 32 (the chunks)', 'at most 2^32 - 1', `${2 ** 32}`],
      [{ weight: buf('f32', 40) }, 'weight.dtype', 'one of u32, u8', 'f32'],
      [{ weight: buf('u32', 39) }, 'weight.byteLength', 'at least 160 (5 rows of 32 bytes)', '156'],
      [{ bits: 6 }, 'weight.byteLength', 'at least 240 (5 rows of 48 bytes)', '160'],
      [{ scales: buf('u16', 10) }, 'scales.dtype', 'one of f32, f16, bf16', 'u16'],
      [{ scales: buf('bf16', 9) }, 'scales.elementCount', '10', '9'],
      [{ groupSize: 64 }, 'scales.elementCount', '5', '10'],
      [{ biases: buf('f16', 10) }, 'biases.dtype', 'bf16', 'f16'],
      [{ biases: buf('bf16', 11) }, 'biases.elementCount', '10', '11'],
      [{ output: buf('i32', 320) }, 'output.dtype', 'one of f32, f16, bf16', 'i32'],
      [{ output: buf('f16', 319) }, 'output.elementCount', '320', '319'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => quantizedDequantize(enc(), { ...base(), ...m } as never), 'quantized_dequantize', arg, expected, actual);
    }
    const w = buf('u8', 1024);
    expectInvalid(() => quantizedDequantize(enc(), { ...base(), weight: w.view('u8', [160]), output: w.view('f16', [320], 128) } as never),
      'quantized_dequantize', 'output', 'a buffer other than weight', 'a view overlapping weight');
  });
  test('affine_quantized_matmul: every rule', () => {
    const base = () => ({
      x: buf('bf16', 3 * 64), weight: buf('u32', 5 * 64 * 4 / 32), scales: buf('bf16', 5 * 2), biases: buf('bf16', 5 * 2), output: buf('bf16', 15),
      m: 3, n: 5, k: 64, groupSize: 32, bits: 4,
    });
    const cases: Case[] = [
      [{ m: 0 }, 'm', 'a positive integer', '0'],
      [{ n: 1.5 }, 'n', 'a positive integer', '1.5'],
      [{ k: -1 }, 'k', 'a positive integer', '-1'],
      [{ bits: 5 }, 'bits', '4, 6 or 8', '5'],
      [{ bits: undefined }, 'bits', '4, 6 or 8', 'undefined'],
      [{ groupSize: 16 }, 'groupSize', '32, 64 or 128', '16'],
      [{ n: 2 ** 32 }, 'n', 'at most 2^32 - 1', `${2 ** 32}`],
      [{ k: 96, groupSize: 64 }, 'k', 'a multiple of groupSize (64)', '96'],
      [{ form: 'dense' }, 'form', "'vector', 'matrix' or absent", 'dense'],
      [{ m: 9, form: 'vector' }, 'm', 'at most 8 (the vector form)', '9'],
      [{ m: 2 ** 31, n: 2 ** 20 }, 'm', 'at most 16777152 for n = 1048576', `${2 ** 31}`],
      [{ m: 2 ** 27, k: 2 ** 27 }, 'm * k', 'a product of integers at most 2^53 - 1', `${2 ** 27} * ${2 ** 27}`],
      [{ x: buf('u16', 192) }, 'x.dtype', 'one of f32, f16, bf16', 'u16'],
      [{ weight: buf('u8', 160) }, 'weight.dtype', 'u32', 'u8'],
      [{ scales: buf('f16', 10) }, 'scales.dtype', 'bf16', 'f16'],
      [{ biases: buf('f32', 10) }, 'biases.dtype', 'bf16', 'f32'],
      [{ output: buf('f32', 15) }, 'output.dtype', 'bf16', 'f32'],
      [{ x: buf('bf16', 191) }, 'x.elementCount', '192', '191'],
      [{ weight: buf('u32', 41) }, 'weight.elementCount', '40', '41'],
      [{ bits: 6 }, 'weight.elementCount', '60', '40'],
      [{ scales: buf('bf16', 11) }, 'scales.elementCount', '10', '11'],
      [{ groupSize: 64 }, 'scales.elementCount', '5', '10'],
      [{ biases: buf('bf16', 9) }, 'biases.elementCount', '10', '9'],
      [{ output: buf('bf16', 16) }, 'output.elementCount', '15', '16'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => affineQuantizedMatmul(enc(), { ...base(), ...m }), 'affine_quantized_matmul', arg, expected, actual);
    }
    const x = buf('bf16', 192 + 16);
    expectInvalid(() => affineQuantizedMatmul(enc(), { ...base(), x: x.view('bf16', [192]), output: x.view('bf16', [15], 32) }),
      'affine_quantized_matmul', 'output', 'a buffer other than x', 'a view overlapping x');
    const w = buf('u32', 40);
    expectInvalid(() => affineQuantizedMatmul(enc(), { ...base(), weight: w, output: w.view('bf16', [15]) }), 'affine_quantized_matmul', 'output',
      'a buffer other than weight', 'a view overlapping weight');
    const sc = buf('bf16', 32);
    expectInvalid(() => affineQuantizedMatmul(enc(), { ...base(), scales: sc.view('bf16', [10]), output: sc.view('bf16', [15], 16) }),
      'affine_quantized_matmul', 'output', 'a buffer other than scales', 'a view overlapping scales');
  });
  test('quantized_matmul, _simd, _simd_bf16: mlx-native\'s rules (bits first, sizes at least, any group size), dtypes, aliasing', () => {
    for (const [fn, op, io] of [
      [quantizedMatmul, 'quantized_matmul', 'f32'], [quantizedMatmulSimd, 'quantized_matmul_simd', 'f32'],
      [quantizedMatmulSimdBf16, 'quantized_matmul_simd_bf16', 'bf16'],
    ] as const) {
      const other = io === 'f32' ? 'bf16' : 'f32';
      const base = () => ({
        input: buf(io, 2 * 10), weight: buf('u8', 3 * 9), scales: buf('bf16', 3 * 3), biases: buf('bf16', 3 * 3), output: buf(io, 6),
        m: 2, k: 10, n: 3, groupSize: 4, bits: 6,
      });
      const cases: Case[] = [
        [{ bits: 5, m: 0 }, 'bits', '4, 6 or 8', '5'],
        [{ m: 0 }, 'm', 'a positive integer', '0'],
        [{ k: 0 }, 'k', 'a positive integer', '0'],
        [{ n: -2 }, 'n', 'a positive integer', '-2'],
        [{ groupSize: 0 }, 'groupSize', 'a positive integer', '0'],
        [{ groupSize: 2 ** 32 }, 'groupSize', 'at most 2^32 - 1', `${2 ** 32}`],
        [{ input: buf(other, 20) }, 'input.dtype', io, other],
        [{ weight: buf('f32', 9) }, 'weight.dtype', 'one of u32, u8', 'f32'],
        [{ scales: buf('f16', 9) }, 'scales.dtype', 'bf16', 'f16'],
        [{ biases: buf('f32', 9) }, 'biases.dtype', 'bf16', 'f32'],
        [{ output: buf(other, 6) }, 'output.dtype', io, other],
        [{ input: buf(io, 19) }, 'input.elementCount', 'at least 20', '19'],
        [{ weight: buf('u8', 26) }, 'weight.byteLength', 'at least 27 (3 rows of 9 bytes)', '26'],
        [{ scales: buf('bf16', 8) }, 'scales.elementCount', 'at least 9', '8'],
        [{ groupSize: 3 }, 'scales.elementCount', 'at least 12', '9'],
        [{ biases: buf('bf16', 8) }, 'biases.elementCount', 'at least 9', '8'],
        [{ output: buf(io, 5) }, 'output.elementCount', 'at least 6', '5'],
      ];
      for (const [m, arg, expected, actual] of cases) expectInvalid(() => fn(enc(), { ...base(), ...m }), op, arg, expected, actual);
      // 6 bits: rows of 3 * ceil(10 / 4) = 9 bytes; 8 bits: 4 * ceil(10 / 4) = 12, so a u32 weight of 11 words (44 bytes) is enough.
      fn(enc(), { ...base(), bits: 8, weight: buf('u32', 11) });
      expectInvalid(() => fn(enc(), { ...base(), bits: 4, k: 20, input: buf(io, 40), scales: buf('bf16', 15), biases: buf('bf16', 15), weight: buf('u32', 8) }),
        op, 'weight.byteLength', 'at least 36 (3 rows of 12 bytes)', '32');
      // Larger buffers are taken (their first elements), as in mlx-native.
      fn(enc(), { ...base(), input: buf(io, 100), weight: buf('u32', 100), scales: buf('bf16', 99), output: buf(io, 7) });
      const io2 = buf(io, 20);
      expectInvalid(() => fn(enc(), { ...base(), input: io2, output: io2 }), op, 'output', 'a buffer other than input', 'the buffer of input');
    }
  });
});

describeBackends('quantized_matmul parity', ({ device }) => {
  // The weight itself: every bits x group size, scales of each dtype to outputs of each (the f32 fused multiply-add
  // against float64 rounded once: within an ulp of the output's dtype, so its tolerance), odd row counts, the weight,
  // scales and biases views among garbage (u32 and u8 weights), a NaN-poisoned output view.
  test('quantized_dequantize: every bits x group size, scales and outputs of each dtype, views, a NaN-poisoned output', () => {
    const dev = device();
    const over: string[] = [];
    let seed = 11;
    for (const bits of [4, 6, 8]) {
      for (const gs of [32, 64, 128]) {
        for (const [sdt, odt, n, groups] of [['bf16', 'f16', 3, 2], ['f16', 'bf16', 1, 3], ['f32', 'f32', 5, 1], ['bf16', 'f32', 2, 2]] as const) {
          const k = gs * groups;
          const s = setup(dev, { m: 1, n, k, gs, bits, xdt: 'f32', sdt, weightDtype: seed % 2 === 0 ? 'u8' : 'u32', seed: seed++ });
          const want = roundedTo(odt, affineDequantize(s.packed, s.scaleValues, s.biasValues, n, k, gs, bits));
          const root = dev.alloc(odt, [n * k + 48]);
          root.fill(Number.NaN);
          const at = 32 / (odt === 'f32' ? 4 : 2);
          const output = root.view(odt, [n, k], 32);
          run(dev, (e) => quantizedDequantize(e, { weight: s.weight, scales: s.scales, biases: s.biases, output, n, k, groupSize: gs, bits }));
          const err = maxRelErr(output.readNumbers(), want);
          const all = root.readNumbers();
          const outside = [...all.slice(0, at), ...all.slice(at + n * k)];
          if (!(err <= TOL[odt]) || !outside.every(Number.isNaN)) over.push(`bits ${bits} gs ${gs} ${sdt} -> ${odt} [${n}, ${k}]: ${err}`);
          for (const b of [...s.roots, root]) b.release();
        }
      }
    }
    expect(over).toEqual([]);
  });

  /** affineQuantizedMatmul at one size; returns the error (the file comment). */
  function affine(dev: Device, dt: AffineDType, m: number, n: number, k: number, gs: number, bits: number, form: 'vector' | 'matrix'): number {
    const s = setup(dev, { m, n, k, gs, bits, xdt: dt, sdt: dt, seed: m * 7919 + n * 104729 + k * 31 + gs + bits });
    run(dev, (e) => affineQuantizedMatmul(e, { x: s.x, weight: s.weight, scales: s.scales, biases: s.biases, output: s.output, m, n, k,
      groupSize: gs, bits, form }));
    return errOf(s);
  }

  // Odd sizes: one output, under and past a simdgroup's rows, a threadgroup's, tiles; k one group or several.
  const VECTOR: readonly [m: number, n: number, groups: number][] = [[1, 1, 1], [1, 37, 3], [3, 33, 2], [8, 70, 5]];
  const MATRIX: readonly [m: number, n: number, groups: number][] = [[1, 1, 1], [9, 7, 2], [33, 65, 3], [70, 130, 1]];
  for (const dt of ['f32', 'f16', 'bf16'] as const) {
    test(`${dt}: every bits x group size, vector and matrix forms at odd sizes, all operands views`, () => {
      const dev = device();
      const over: string[] = [];
      for (const bits of [4, 6, 8]) {
        for (const gs of [32, 64, 128]) {
          for (const [form, shapes] of [['vector', VECTOR], ['matrix', MATRIX]] as const) {
            for (const [m, n, groups] of shapes) {
              const k = gs * groups;
              const e = affine(dev, dt, m, n, k, gs, bits, form);
              if (!(e <= dotTolerance(dt, k))) over.push(`${form} bits ${bits} gs ${gs} [${m}, ${n}, ${k}]: ${e}`);
            }
          }
        }
      }
      expect(over).toEqual([]);
    }, 120_000);
  }

  test('the form by default: vector for m <= 8, matrix past it', () => {
    const dev = device();
    const plan = (m: number): string => planAffineQuantizedMatmul({
      x: dev.alloc('bf16', [m * 64]), weight: dev.alloc('u32', [4 * 8]), scales: dev.alloc('bf16', [4 * 2]), biases: dev.alloc('bf16', [4 * 2]),
      output: dev.alloc('bf16', [m * 4]), m, n: 4, k: 64, groupSize: 32, bits: 4,
    }, dev.limits, dev).dispatches[0]!.kernel;
    expect([plan(1), plan(8), plan(9)]).toEqual(['quantized_mv_bf16', 'quantized_mv_bf16', 'quantized_mm_bf16']);
  });

  test('Qwen3.6-like rows: k = 2048 (hidden of the 35B-A3B), 4 and 8 bits, group 64, one token and a 40-token prefill', () => {
    const dev = device();
    const over: string[] = [];
    for (const [dt, m, bits] of [['bf16', 1, 4], ['bf16', 40, 4], ['f16', 2, 8], ['bf16', 17, 6]] as const) {
      const e = affine(dev, dt, m, 96, 2048, 64, bits, m <= 8 ? 'vector' : 'matrix');
      if (!(e <= dotTolerance(dt, 2048))) over.push(`${dt} bits ${bits} m ${m}: ${e}`);
    }
    expect(over).toEqual([]);
  }, 120_000);

  test('larger sizes (CUDA\'s 128 x 256 tiles from m, n = 1024; 513 vector blocks)', () => {
    const dev = device();
    const over: string[] = [];
    for (const [dt, m, n, k, bits, form] of [
      ['bf16', 3, 8200, 64, 4, 'vector'], ['f16', 8, 8192, 32, 6, 'vector'], ['bf16', 1030, 1040, 32, 8, 'matrix'],
    ] as const) {
      const e = affine(dev, dt, m, n, k, 32, bits, form);
      if (!(e <= dotTolerance(dt, k))) over.push(`${dt} ${form} bits ${bits} [${m}, ${n}, ${k}]: ${e}`);
    }
    expect(over).toEqual([]);
  }, 120_000);

  test('one token of 4-bit codes from n = GC_MIN_N (CUDA\'s group-column engine): every group size, partial rounds and tiles, both warp splits, mlx-native\'s f32 entries', () => {
    const dev = device();
    const over: string[] = [];
    // k / gs of 10 and 9 groups: a round of 8 and a partial one; n past a 16-row tile; 1025 tiles take 2 warps a tile.
    for (const [dt, n, k, gs] of [['bf16', GC_MIN_N + 4, 320, 32], ['f16', GC_MIN_N + 8, 1152, 128], ['bf16', 16400, 640, 64]] as const) {
      const e = affine(dev, dt, 1, n, k, gs, 4, 'vector');
      if (!(e <= dotTolerance(dt, k))) over.push(`${dt} [1, ${n}, ${k}] gs ${gs}: ${e}`);
    }
    for (const [fn, op, io, n, k, gs] of [
      [quantizedMatmulSimd, 'quantized_matmul_simd', 'f32', GC_MIN_N + 1, 512, 64], [quantizedMatmul, 'quantized_matmul', 'f32', GC_MIN_N, 1152, 128],
      [quantizedMatmulSimdBf16, 'quantized_matmul_simd_bf16', 'bf16', GC_MIN_N + 15, 256, 32],
    ] as const) {
      const s = setup(dev, { m: 1, n, k, gs, bits: 4, xdt: io, sdt: 'bf16', roundX: true, seed: n + k + gs });
      run(dev, (e) => fn(e, { input: s.x, weight: s.weight, scales: s.scales, biases: s.biases, output: s.output, m: 1, k, n, groupSize: gs, bits: 4 }));
      const err = errOf(s);
      if (!(err <= dotTolerance('bf16', k))) over.push(`${op} [1, ${n}, ${k}] gs ${gs}: ${err}`);
    }
    expect(over).toEqual([]);
  }, 120_000);

  test('the vector forms through their compact CUDA entries: the kernel\'s own entry\'s results bit for bit (vector at every bits, group-column)', () => {
    const dev = device();
    const wrong: string[] = [];
    for (const [kernel, io, m, n, k, gs, bits] of [
      ['quantized_matmul_simd', 'f32', 3, 40, 256, 64, 4], ['quantized_matmul', 'f32', 8, 17, 192, 32, 6], ['quantized_matmul_simd_bf16', 'bf16', 1, 33, 256, 128, 8],
      ['quantized_matmul_simd', 'f32', 1, GC_MIN_N + 3, 320, 32, 4], ['quantized_matmul_simd_bf16', 'bf16', 1, 16 * 1025, 128, 64, 4],
      ['quantized_mv_bf16', 'bf16', 5, 24, 256, 64, 6], ['quantized_mv_f16', 'f16', 1, GC_MIN_N + 9, 384, 128, 4],
    ] as const) {
      const crate = kernel.startsWith('quantized_matmul');
      const s = setup(dev, { m, n, k, gs, bits, xdt: io, sdt: crate ? 'bf16' : io, roundX: crate, seed: n * 3 + k + bits });
      const args = { input: s.x, weight: s.weight, scales: s.scales, biases: s.biases, output: s.output, m, k, n, groupSize: gs, bits };
      const plan = kernel === 'quantized_matmul' ? planQuantizedMatmul(args, dev.limits, dev)
        : kernel === 'quantized_matmul_simd' ? planQuantizedMatmulSimd(args, dev.limits, dev)
        : kernel === 'quantized_matmul_simd_bf16' ? planQuantizedMatmulSimdBf16(args, dev.limits, dev)
        : planAffineQuantizedMatmul({ x: s.x, weight: s.weight, scales: s.scales, biases: s.biases, output: s.output, m, n, k, groupSize: gs, bits },
          dev.limits, dev);
      const d = plan.dispatches[0]!;
      if (d.cuda?.entry === undefined) wrong.push(`${kernel} [${m}, ${n}, ${k}]: no compact entry planned`);
      run(dev, (e) => record(e, plan));
      const viaEntry = s.output.readNumbers();
      s.output.fill(Number.NaN);
      run(dev, (e) => record(e, { ...plan, dispatches: [{ ...d, cuda: { grid: d.cuda!.grid, threads: d.cuda!.threads, threadgroupMemory: d.cuda!.threadgroupMemory } }] }));
      const viaKernel = s.output.readNumbers();
      const differ = viaEntry.findIndex((v, i) => !Object.is(v, viaKernel[i]));
      if (differ >= 0) wrong.push(`${kernel} [${m}, ${n}, ${k}] gs ${gs} bits ${bits}: output ${differ} ${viaEntry[differ]} vs ${viaKernel[differ]}`);
      const err = errOf(s);
      if (!(err <= dotTolerance(crate ? 'bf16' : io, k))) wrong.push(`${kernel} [${m}, ${n}, ${k}]: error ${err}`);
    }
    expect(wrong).toEqual([]);
  }, 120_000);

  test('mlx-native\'s own examples (its quantized_matmul tests): values by hand', () => {
    const dev = device();
    /** One quantized_matmul with q [n, k] packed by hand, bf16 scales and biases. */
    const one = (x: number[], q: number[], m: number, k: number, n: number, gs: number, bits: number, scales: number[], biases: number[]): number[] => {
      const packed = affinePack(q, n, k, bits);
      const weight = bits === 6 ? dev.upload('u8', [packed.length], packed) : dev.upload('u32', [packed.length / 4], affineWords(packed));
      const output = dev.alloc('f32', [m * n]);
      output.fill(Number.NaN);
      run(dev, (e) => quantizedMatmul(e, {
        input: dev.upload('f32', [m * k], x), weight, scales: dev.upload('bf16', [scales.length], scales),
        biases: dev.upload('bf16', [biases.length], biases), output, m, k, n, groupSize: gs, bits,
      }));
      return Array.from(output.readNumbers());
    };
    const near = (got: number[], want: number[], tol: number): void => {
      expect(got.map((g, i) => Math.abs(g - want[i]!) <= tol)).toEqual(want.map(() => true));
    };
    // The crate's tolerances: bf16 scales (0.1 is 0.10009765625 in bf16).
    near(one([1, 2, 3, 4], [1, 2, 3, 4, 5, 6, 7, 8], 1, 4, 2, 64, 4, [0.1, 0.2], [0, 0]), [3, 14], 0.1);
    near(one([1, 2, 3, 4], [1, 2, 3, 4, 10, 20, 30, 40], 1, 4, 2, 64, 6, [0.1, 0.05], [0, 0]), [3, 15], 0.1);
    near(one([1, 1, 1, 1], [0, 0, 0, 0], 1, 4, 1, 64, 4, [1], [0.5]), [2], 0.01);
    near(one([1, 0, 0, 0, 0, 1, 0, 0], [2, 4, 6, 8], 2, 4, 1, 64, 4, [0.5], [0]), [1, 2], 0.01);
    near(one([1, 2, 3, 4], [10, 20, 30, 40, 50, 60, 70, 80], 1, 4, 2, 64, 8, [0.01, 0.02], [0, 0]), [3, 14], 0.1);
    near(one(new Array(8).fill(1), [1, 1, 1, 1, 2, 2, 2, 2], 1, 8, 1, 4, 4, [0.5, 1], [0, 0]), [10], 0.1);
  });

  test('mlx-native\'s kernels: MLX\'s layouts and its odd ones (any k and group size, u8 6-bit rows), one row to many', () => {
    const dev = device();
    const over: string[] = [];
    const cases: [name: string, m: number, n: number, k: number, gs: number, bits: number][] = [
      // MLX's layouts: CUDA's vector engine (m <= 8) and matrix engine (m > 8).
      ['chunked', 1, 37, 128, 64, 4], ['chunked', 5, 16, 256, 32, 6], ['chunked', 20, 33, 256, 128, 8], ['chunked', 9, 8, 512, 64, 4],
      // Others: a thread per output everywhere but in mlx-native's SIMD kernels.
      ['odd', 1, 3, 4, 64, 4], ['odd', 3, 7, 10, 4, 6], ['odd', 2, 5, 100, 48, 8], ['odd', 12, 9, 33, 32, 6], ['odd', 2, 8, 256, 16, 4],
    ];
    for (const [name, m, n, k, gs, bits] of cases) {
      const chunked = quantizedChunked(k, gs);
      for (const [fn, op, io] of [
        [quantizedMatmul, 'quantized_matmul', 'f32'], [quantizedMatmulSimd, 'quantized_matmul_simd', 'f32'],
        [quantizedMatmulSimdBf16, 'quantized_matmul_simd_bf16', 'bf16'],
      ] as const) {
        const s = setup(dev, {
          m, n, k, gs, bits, xdt: io, sdt: 'bf16', roundX: true, seed: m * 31 + n * 7 + k + bits, crateLayout: !chunked,
          weightDtype: bits === 6 && !chunked ? 'u8' : 'u32',
        });
        run(dev, (e) => fn(e, { input: s.x, weight: s.weight, scales: s.scales, biases: s.biases, output: s.output, m, k, n, groupSize: gs, bits }));
        const err = errOf(s);
        if (!(err <= dotTolerance('bf16', k))) over.push(`${op} ${name} [${m}, ${n}, ${k}] gs ${gs} bits ${bits}: ${err}`);
      }
    }
    expect(over).toEqual([]);
  });

  test('quantized_matmul_simd: its SIMD kernel where the crate\'s rule holds, quantized_matmul elsewhere, the same products', () => {
    const dev = device();
    const args = (n: number, k: number, bits: number) => ({
      input: dev.alloc('f32', [k]), weight: dev.alloc('u32', [n * k / 4]), scales: dev.alloc('bf16', [n * k / 32]), biases: dev.alloc('bf16', [n * k / 32]),
      output: dev.alloc('f32', [n]), m: 1, k, n, groupSize: 32, bits,
    });
    const kernel = (n: number, k: number, bits: number): string => planQuantizedMatmulSimd(args(n, k, bits), dev.limits, dev).dispatches[0]!.kernel;
    expect([kernel(16, 256, 4), kernel(16, 256, 8), kernel(16, 256, 6), kernel(12, 256, 4), kernel(16, 128, 4)]).toEqual([
      'quantized_matmul_simd', 'quantized_matmul_simd', 'quantized_matmul', 'quantized_matmul', 'quantized_matmul',
    ]);
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('quantized_matmul', [
  // The dequantization: 5 rows of k 64, 4 bits, bf16 scales to an f16 output.
  {
    fn: 'quantizedDequantize', op: 'quantized_dequantize',
    keys: {
      weight: buf(['u32', 'u8'], { freeCount: true }), scales: buf(EW), biases: buf(EW), output: out(EW), n: int, k: int,
      groupSize: { kind: 'enum', values: [32, 64, 128] }, bits: { kind: 'enum', values: [4, 6, 8] },
    },
    make: (d) => ({
      weight: a(d, 'u32', 40), scales: a(d, 'bf16', 10), biases: a(d, 'bf16', 10), output: a(d, 'f16', 320), n: 5, k: 64, groupSize: 32, bits: 4,
    }),
    fill: (args) => randomWords(args.weight as Buffer),
  },
  // The weight's contents are any bits.
  ...[
    { dtype: 'bf16', m: 3, n: 10, k: 64, groupSize: 32, bits: 4 },
    { dtype: 'f16', m: 9, n: 5, k: 128, groupSize: 64, bits: 6 },
  ].map((p): Case => ({
    fn: 'affineQuantizedMatmul', op: 'affine_quantized_matmul',
    keys: {
      x: buf(EW), weight: buf(U32), scales: buf(EW), biases: buf(EW), output: out(EW), m: int, n: int, k: int,
      groupSize: { kind: 'enum', values: [32, 64, 128] }, bits: { kind: 'enum', values: [4, 6, 8] },
      form: { kind: 'enum', values: ['vector', 'matrix', undefined] },
    },
    make: (d) => ({
      x: a(d, p.dtype as DType, p.m * p.k), weight: a(d, 'u32', (p.n * p.k * p.bits) / 32), scales: a(d, p.dtype as DType, (p.n * p.k) / p.groupSize),
      biases: a(d, p.dtype as DType, (p.n * p.k) / p.groupSize), output: a(d, p.dtype as DType, p.m * p.n), m: p.m, n: p.n, k: p.k,
      groupSize: p.groupSize, bits: p.bits,
    }),
    fill: (args) => randomWords(args.weight as Buffer),
  })),
  // mlx-native's rule: each buffer holds at least its size (freeCount); any k and group size.
  ...([
    ['quantizedMatmul', 'quantized_matmul', 'f32', { m: 2, k: 10, n: 3, groupSize: 4, bits: 6 }],
    ['quantizedMatmulSimd', 'quantized_matmul_simd', 'f32', { m: 2, k: 256, n: 8, groupSize: 64, bits: 4 }],
    ['quantizedMatmulSimdBf16', 'quantized_matmul_simd_bf16', 'bf16', { m: 9, k: 96, n: 5, groupSize: 32, bits: 8 }],
  ] as const).map(([fn, op, io, p]): Case => ({
    fn, op,
    keys: {
      input: buf([io], { freeCount: true }), weight: buf(['u32', 'u8'], { freeCount: true }), scales: buf(BF, { freeCount: true }),
      biases: buf(BF, { freeCount: true }), output: out([io], { freeCount: true }), m: int, k: int, n: int, groupSize: int,
      bits: { kind: 'enum', values: [4, 6, 8] },
    },
    make: (d) => ({
      input: a(d, io, p.m * p.k), weight: a(d, 'u32', Math.ceil((p.n * (p.bits === 6 ? 3 * Math.ceil(p.k / 4) : 4 * Math.ceil((p.k * p.bits) / 32))) / 4)),
      scales: a(d, 'bf16', p.n * Math.ceil(p.k / p.groupSize)), biases: a(d, 'bf16', p.n * Math.ceil(p.k / p.groupSize)), output: a(d, io, p.m * p.n),
      ...p,
    }),
    fill: (args) => randomWords(args.weight as Buffer),
  })),
]);
