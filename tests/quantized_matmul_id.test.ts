// quantized_matmul_id: the param packers against the header and the .metal
// bindings, the launches, the reference against values by hand, every
// validation rule of each op, and parity against the float64 reference on
// every backend: the vector form for every bits x group size x dtype, one
// token and several, ids past the experts (a row of zeros), ids and weights
// as views at offsets of larger allocations; the matrix form after
// moe_dispatch_sort with experts that get no pair, one expert that gets all
// of them (more than a tile), many tokens; the fused gate/up projections
// (silu and gelu) in both forms over a fused [E, 2 I, k] tensor taken as two
// views; a down projection over pairs (nExpertUsed = 1); the vector forms
// over f32 x (the bits of casting x first, and the reference); mlx-native's
// quantized_matmul_id on its odd layouts (any k and group size) and MLX's.
//
// Error measure: |got - want| / sum_k |x w| per output (dotErr, as
// tests/quantized_matmul.test.ts: the rounding of a sum of products scales
// with its terms, not with the sum); for gate/up the first-order bound
// |act'(g)| sum|x g| |u| + |act(g)| sum|x u| (quantizedGateUpIdRef). Tolerance:
// dotTolerance of the dtype the weight meets x in (f16, bf16; bf16 for
// mlx-native's kernel, whose x is rounded to bf16 and whose weight reaches
// CUDA's tensor cores in bf16).

import { describe, expect, test } from 'bun:test';
import src from '../shaders/quantized_matmul_id.metal' with { type: 'text' };
import type { Buffer, DType, Device } from '../ts/index.ts';
import { cast } from '../ts/ops/elementwise.ts';
import { moeDispatchSort } from '../ts/ops/moe_dispatch.ts';
import {
  QUANTIZED_MATMUL_ID_KERNELS,
  moeTileSlots,
  packQuantizedGateUpIdParams,
  packQuantizedMatmulIdParams,
  quantizedGateUpMmId,
  quantizedGateUpMvId,
  quantizedIdMmCudaLaunch,
  quantizedIdGcTakes,
  quantizedIdGcWarps,
  quantizedIdMvKernel,
  quantizedIdMvCudaEntry,
  quantizedIdMvCudaLaunch,
  quantizedIdMvTiles,
  quantizedMatmulId,
  quantizedMmId,
  quantizedMvId,
  planQuantizedMvId,
  planQuantizedGateUpMvId,
  quantizedGateUpIdRef,
  quantizedMatmulIdRef,
  type AffineExpertsRef,
  type QuantizedIdSizesRef,
} from '../ts/ops/quantized_matmul_id.ts';
import { affinePack, affineQuantize, affineRowBytes, gcSharedBytes } from '../ts/ops/quantized_matmul.ts';
import { record, type Launch } from '../ts/plan.ts';
import { compactEntryProblem, CXX } from './cuda-source.ts';
import {
  describeBackends, describeValidation, dotErr, dotTolerance, expectInvalid, poisoned, randomArray, rng, roundedTo, run, TARGET_LIMITS, type Rng,
} from './helpers.ts';
import { downErrors, gateUpCasesOver, idsFor, matrixCasesOver, type IdProduct, type IdShape } from './matmul-id.ts';
import { a, BF, buf, F, int, opContract, out, randomWords, U32, type Case, type KeySpec } from './op-contract.ts';

describe('quantized_matmul_id param packers match the header and the .metal bindings', () => {
  test('QuantizedMatmulIdParams (the crate\'s 10 fields) and QuantizedGateUpIdParams at buffer(6)', () => {
    for (const k of QUANTIZED_MATMUL_ID_KERNELS) {
      const s = k.includes('gate_up') ? 'QuantizedGateUpIdParams' : 'QuantizedMatmulIdParams';
      expect(src).toMatch(new RegExp(`kernel void ${k}\\([^{]*constant ${s}&\\s+params\\s+\\[\\[buffer\\(6\\)\\]\\]`));
    }
    const sizes = { m: 3, n: 7, k: 64, groupSize: 32, bits: 6, nExpertUsed: 2, numExperts: 5, weightStride: 336, scalesStride: 14 };
    const p = packQuantizedMatmulIdParams(sizes);
    expect(Array.from(new Uint32Array(p.buffer, p.byteOffset, p.byteLength / 4))).toEqual([3, 64, 7, 32, 6, 2, 5, 336, 14, 14]);
    const g = packQuantizedGateUpIdParams({ ...sizes, activation: 'gelu_tanh' });
    expect(Array.from(new Uint32Array(g.buffer, g.byteOffset, g.byteLength / 4))).toEqual([3, 64, 7, 32, 6, 2, 5, 336, 14, 14, 1]);
    expect(new Uint32Array(packQuantizedGateUpIdParams(sizes).buffer)[10]).toBe(0);
  });
  test('launches: vector tiles by k steps, matrix tile slots, shared memory within an H100\'s', () => {
    expect([32, 512, 704, 2048, 5120].map(quantizedIdMvTiles)).toEqual([4, 2, 2, 1, 1]);
    // 6 and 8 bits, the vector engine: 8 tokens x top-8, gate/up (k = 2048, 8 outputs a tile) and down (k = 512, 32 rows a block).
    expect(quantizedIdMvCudaLaunch(64, 512, 2048, true, 6, 64)).toEqual({ grid: [64 * 64, 1, 1], threads: [256, 1, 1] });
    expect(quantizedIdMvCudaLaunch(64, 2048, 512, false, 8, 64)).toEqual({ grid: [64 * 64, 1, 1], threads: [256, 1, 1] });
    // 4 bits, the group-column path: W = 1 from 2048 tiles, 2 from 1024 (and for the plain form below), else 4; at most
    // the tile's rounds of 8 groups (k / groupSize / 8, to a power of two).
    const gc = (blocks: number, k: number, gs: number): Launch => ({ grid: [blocks, 1, 1], threads: [128, 1, 1], threadgroupMemory: { 0: gcSharedBytes(k, gs) } });
    expect(quantizedIdMvCudaLaunch(64, 512, 2048, true, 4, 64)).toEqual(gc(64 * 16, 2048, 64)); // 4096 tiles, W 1
    expect(quantizedIdMvCudaLaunch(64, 2048, 512, false, 4, 64)).toEqual(gc(64 * 32, 512, 64)); // 8192 tiles, W 1
    expect(quantizedIdMvCudaLaunch(8, 512, 2048, true, 4, 64)).toEqual(gc(8 * 64, 2048, 64)); // 512 tiles, W 4 (4 rounds)
    expect(quantizedIdMvCudaLaunch(8, 2048, 512, false, 4, 64)).toEqual(gc(8 * 32, 512, 64)); // 1024 tiles, one round: W 1
    expect(quantizedIdMvCudaLaunch(8, 2048, 1024, false, 4, 64)).toEqual(gc(8 * 64, 1024, 64)); // 1024 tiles, 2 rounds: W 2
    expect(quantizedIdMvCudaLaunch(8, 704, 2816, true, 4, 64)).toEqual(gc(8 * 88, 2816, 64)); // 704 tiles, W 4 (6 rounds)
    expect(quantizedIdMvCudaLaunch(8, 2816, 704, false, 4, 64)).toEqual(gc(8 * 88, 704, 64)); // 1408 tiles, 2 rounds: W 2
    expect(quantizedIdMvCudaLaunch(2, 40, 256, false, 4, 32)).toEqual(gc(2 * 1, 256, 32)); // 6 tiles, one round: W 1
    expect(quantizedIdMvCudaLaunch(8, 512, 1536, true, 4, 64)).toEqual(gc(8 * 32, 1536, 64)); // 512 tiles, 3 rounds: W 2
    expect([[64, 512, true, 2048], [8, 2048, false, 2048], [8, 512, true, 2048], [1, 16, false, 2048], [9, 2048, false, 512], [9, 512, true, 2048]]
      .map(([p, n, g, k]) => quantizedIdGcWarps(p as number, n as number, g as boolean, k as number, 64)))
      .toEqual([1, 2, 4, 2, 1, 4]);
    expect(quantizedIdGcTakes(2048, 64, 4)).toBe(true);
    // The typed ops' kernels: the _gc ones where the path takes the sizes.
    expect([
      quantizedIdMvKernel('quantized_gate_up_mv_id', 'bf16', 2048, 64, 4), quantizedIdMvKernel('quantized_mv_id', 'f16', 512, 32, 4),
      quantizedIdMvKernel('quantized_gate_up_mv_id', 'bf16', 2048, 64, 8), quantizedIdMvKernel('quantized_mv_id', 'f16', 512, 32, 6),
    ]).toEqual(['quantized_gate_up_mv_id_gc_bf16', 'quantized_mv_id_gc_f16', 'quantized_gate_up_mv_id_bf16', 'quantized_mv_id_f16']);
    expect([quantizedIdGcTakes(2048, 64, 8), quantizedIdGcTakes(2048, 64, 6), quantizedIdGcTakes(65536, 32, 4)]).toEqual([false, false, false]);
    expect(moeTileSlots(4096, 256, 64)).toBe(64 + 257);
    expect(quantizedIdMmCudaLaunch(4096, 512, 256, true)).toEqual({
      grid: [321 * 8, 1, 1], threads: [128, 1, 1], threadgroupMemory: { 0: 61440 },
    });
    expect(61440).toBeLessThanOrEqual(TARGET_LIMITS.cuda.maxThreadgroupMemory);
  });
});

describe('compact CUDA entries of the _gc kernels (quantizedIdMvCudaEntry)', () => {
  test('the group-column path\'s entry at the group size and warps of the sizes; none for the other kernels', () => {
    expect([
      quantizedIdMvCudaEntry('quantized_gate_up_mv_id_gc_bf16_xf32', 8, 512, 2048, true, 64), quantizedIdMvCudaEntry('quantized_mv_id_gc_bf16', 8, 2048, 1024, false, 64),
      quantizedIdMvCudaEntry('quantized_gate_up_mv_id_gc_f16', 64, 512, 2048, true, 32), quantizedIdMvCudaEntry('quantized_mv_id_gc_f16_xf32', 2, 40, 2048, false, 128),
      quantizedIdMvCudaEntry('quantized_mv_id_gc_bf16', 9, 2048, 512, false, 64),
      quantizedIdMvCudaEntry('quantized_mv_id_bf16', 8, 2048, 512, false, 64), quantizedIdMvCudaEntry('quantized_matmul_id', 8, 2048, 512, false, 64),
    ]).toEqual([
      'quantized_gate_up_mv_id_gc_bf16_xf32_g64_w4', 'quantized_mv_id_gc_bf16_g64_w2', 'quantized_gate_up_mv_id_gc_f16_g32_w1',
      'quantized_mv_id_gc_f16_xf32_g128_w2', 'quantized_mv_id_gc_bf16_g64_w1', undefined, undefined,
    ]);
  });
  test.if(CXX !== undefined)('every entry the rule names is in shaders/cuda/quantized_matmul_id.cu with its kernel\'s parameters', () => {
    const named = new Map<string, string>();
    for (const op of ['quantized_mv_id', 'quantized_gate_up_mv_id']) for (const dt of ['f16', 'bf16']) for (const xF32 of [false, true]) {
      for (const gs of [32, 64, 128]) for (const pairs of [1, 8, 16, 64]) for (const k of [512, 4096]) {
        const kernel = quantizedIdMvKernel(op, dt, k, gs, 4, xF32);
        const e = quantizedIdMvCudaEntry(kernel, pairs, 1024, k, op === 'quantized_gate_up_mv_id', gs);
        if (e !== undefined) named.set(e, kernel);
      }
    }
    expect(named.size).toBe(60);
    expect([...named].map(([e, kernel]) => compactEntryProblem('quantized_matmul_id', kernel, e)).filter((p) => p !== '')).toEqual([]);
  });
});

describe('quantized_matmul_id reference against values by hand', () => {
  test('two experts of 1 row, k = 32, 4 bits: each pair takes its expert; an id past them gives zeros', () => {
    // Expert 0: q = 1 everywhere, scale 0.5, bias -1 -> w = -0.5; expert 1: q = 3, scale 1, bias 0 -> w = 3.
    const q = [...Array(32).fill(1), ...Array(32).fill(3)];
    const ex: AffineExpertsRef = { packed: affinePack(q, 2, 32, 4), scales: [0.5, 1], biases: [-1, 0] };
    const x = Array.from({ length: 32 }, (_, i) => (i % 2 === 0 ? 1 : 2));
    const r = quantizedMatmulIdRef(x, ex, [1, 0, 7], { m: 1, n: 1, k: 32, groupSize: 32, bits: 4, nExpertUsed: 3, numExperts: 2 });
    expect(Array.from(r.y)).toEqual([3 * 48, -0.5 * 48, 0]);
    expect(Array.from(r.abs)).toEqual([3 * 48, 0.5 * 48, 1]);
  });
});

describeValidation('quantized_matmul_id validation', ({ enc, buf }) => {
  type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
  // m = 3 rows, 2 slots, 4 experts of n = 5 rows, k = 64, 4 bits, groups of 32: 8 words and 2 groups a row.
  const mv = () => ({
    x: buf('bf16', 192), weight: buf('u32', 160), scales: buf('bf16', 40), biases: buf('bf16', 40), ids: buf('u32', 6),
    output: buf('bf16', 30), m: 3, n: 5, k: 64, groupSize: 32, bits: 4, nExpertUsed: 2, numExperts: 4,
  });
  test('quantized_mv_id: every rule', () => {
    const big = buf('bf16', 64);
    const cases: Case[] = [
      [{ m: 0 }, 'm', 'a positive integer', '0'],
      [{ n: 2 ** 32 }, 'n', 'at most 2^32 - 1', `${2 ** 32}`],
      [{ nExpertUsed: 1.5 }, 'nExpertUsed', 'a positive integer', '1.5'],
      [{ numExperts: -1 }, 'numExperts', 'a positive integer', '-1'],
      [{ bits: 5 }, 'bits', '4, 6 or 8', '5'],
      [{ groupSize: 16 }, 'groupSize', '32, 64 or 128', '16'],
      [{ k: 96, groupSize: 64 }, 'k', 'a multiple of groupSize (64)', '96'],
      [{ expertRows: 4 }, 'expertRows', 'at least n (5)', '4'],
      [{ expertRows: 0 }, 'expertRows', 'a positive integer', '0'],
      [{ m: 2 ** 31, nExpertUsed: 2 }, 'm * nExpertUsed', 'at most 2^32 - 2', `${2 ** 32}`],
      [{ n: 5, expertRows: 2 ** 27 }, 'expertRows * k * bits / 8', 'at most 2^32 - 1', `${2 ** 32}`],
      [{ m: 2 ** 30, n: 5000 }, 'm * nExpertUsed', 'small enough for', `${2 ** 31}`],
      [{ x: buf('u32', 192) }, 'x.dtype', 'one of f32, f16, bf16', 'u32'],
      // f32 x: scales, biases and output of one 16-bit dtype.
      [{ x: buf('f32', 192), output: buf('f32', 30) }, 'output.dtype', 'one of f16, bf16', 'f32'],
      [{ x: buf('f32', 192), scales: buf('f16', 40) }, 'scales.dtype', 'bf16', 'f16'],
      [{ x: buf('f32', 192), output: buf('f16', 30) }, 'scales.dtype', 'f16', 'bf16'],
      [{ x: buf('f32', 191) }, 'x.elementCount', '192', '191'],
      [{ weight: buf('u8', 640) }, 'weight.dtype', 'u32', 'u8'],
      [{ scales: buf('f16', 40) }, 'scales.dtype', 'bf16', 'f16'],
      [{ biases: buf('f32', 40) }, 'biases.dtype', 'bf16', 'f32'],
      [{ ids: buf('i32', 6) }, 'ids.dtype', 'u32', 'i32'],
      [{ output: buf('f16', 30) }, 'output.dtype', 'bf16', 'f16'],
      [{ x: buf('bf16', 191) }, 'x.elementCount', '192', '191'],
      [{ weight: buf('u32', 161) }, 'weight.elementCount', '160', '161'],
      [{ scales: buf('bf16', 39) }, 'scales.elementCount', '40', '39'],
      [{ biases: buf('bf16', 41) }, 'biases.elementCount', '40', '41'],
      [{ ids: buf('u32', 5) }, 'ids.elementCount', '6', '5'],
      [{ output: buf('bf16', 31) }, 'output.elementCount', '30', '31'],
      [{ expertRows: 6 }, 'weight.elementCount', '184', '160'],
      [{ scales: big.view('bf16', [40]), output: big.view('bf16', [30], 32) }, 'output', 'a buffer other than scales', 'a view overlapping scales'],
      [{ ids: 3 }, 'ids', 'a Buffer', '3'],
    ];
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => quantizedMvId(enc(), { ...mv(), ...m } as never), 'quantized_mv_id', arg, expected, actual);
  });
  test('quantized_mm_id: offsets and order in place of ids', () => {
    const mm = () => {
      const { ids: _, ...rest } = mv();
      return { ...rest, offsets: buf('u32', 6), order: buf('u32', 6) };
    };
    const cases: Case[] = [
      [{ offsets: buf('u32', 5) }, 'offsets.elementCount', '6', '5'],
      [{ order: buf('u32', 7) }, 'order.elementCount', '6', '7'],
      [{ order: buf('f32', 6) }, 'order.dtype', 'u32', 'f32'],
      [{ offsets: undefined }, 'offsets', 'a Buffer', 'none'],
      [{ x: buf('f32', 192) }, 'x.dtype', 'one of f16, bf16', 'f32'],
      [{ numExperts: 2 ** 31 }, 'numExperts', 'small enough for', `${2 ** 31}`],
      [{ m: 2 ** 31 - 1, nExpertUsed: 2, n: 2 ** 20 }, 'm * nExpertUsed', 'small enough for', `${2 ** 32 - 2}`],
    ];
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => quantizedMmId(enc(), { ...mm(), ...m } as never), 'quantized_mm_id', arg, expected, actual);
  });
  test('quantized_gate_up_{mv,mm}_id: both expert sets and the activation', () => {
    const gu = () => {
      const { weight, scales, biases, ...rest } = mv();
      return { ...rest, gateWeight: weight, gateScales: scales, gateBiases: biases, upWeight: buf('u32', 160), upScales: buf('bf16', 40), upBiases: buf('bf16', 40) };
    };
    const cases: Case[] = [
      [{ activation: 'relu' }, 'activation', "'silu', 'gelu_tanh' or absent", 'relu'],
      [{ gateWeight: buf('u32', 159) }, 'gateWeight.elementCount', '160', '159'],
      [{ upScales: buf('f16', 40) }, 'upScales.dtype', 'bf16', 'f16'],
      [{ x: buf('f32', 192), upBiases: buf('f16', 40) }, 'upBiases.dtype', 'bf16', 'f16'],
      [{ upBiases: buf('bf16', 39) }, 'upBiases.elementCount', '40', '39'],
      [{ upWeight: undefined }, 'upWeight', 'a Buffer', 'none'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => quantizedGateUpMvId(enc(), { ...gu(), ...m } as never), 'quantized_gate_up_mv_id', arg, expected, actual);
    }
    const { ids: _, ...rest } = gu();
    expectInvalid(() => quantizedGateUpMmId(enc(), { ...rest, offsets: buf('u32', 6), order: buf('u32', 6), activation: 1 } as never),
      'quantized_gate_up_mm_id', 'activation', "'silu', 'gelu_tanh' or absent", '1');
    expectInvalid(() => quantizedGateUpMmId(enc(), { ...rest, offsets: buf('u32', 6), order: buf('u32', 5) } as never),
      'quantized_gate_up_mm_id', 'order.elementCount', '6', '5');
  });
  test('quantized_matmul_id (mlx-native\'s rules: each buffer at least its size, any k and group size)', () => {
    // m = 2, 2 slots, 3 experts of n = 3 rows, k = 10, 6 bits (rows of 9 bytes), groups of 4 (3 a row).
    const crate = () => ({
      input: buf('f32', 20), weight: buf('u8', 81), scales: buf('bf16', 27), biases: buf('bf16', 27), ids: buf('u32', 4),
      output: buf('f32', 12), m: 2, k: 10, n: 3, groupSize: 4, bits: 6, nExpertUsed: 2, numExperts: 3,
    });
    const cases: Case[] = [
      [{ bits: 3 }, 'bits', '4, 6 or 8', '3'],
      [{ groupSize: 0 }, 'groupSize', 'a positive integer', '0'],
      [{ nExpertUsed: 0 }, 'nExpertUsed', 'a positive integer', '0'],
      [{ numExperts: 2 ** 32 }, 'numExperts', 'at most 2^32 - 1', `${2 ** 32}`],
      [{ n: 2 ** 29, k: 32 }, 'n * row bytes', 'at most 2^32 - 1', `${2 ** 29 * 24}`],
      [{ input: buf('bf16', 20) }, 'input.dtype', 'f32', 'bf16'],
      [{ weight: buf('f32', 81) }, 'weight.dtype', 'one of u32, u8', 'f32'],
      [{ scales: buf('f16', 27) }, 'scales.dtype', 'bf16', 'f16'],
      [{ ids: buf('f32', 4) }, 'ids.dtype', 'u32', 'f32'],
      [{ output: buf('bf16', 12) }, 'output.dtype', 'f32', 'bf16'],
      [{ input: buf('f32', 19) }, 'input.elementCount', 'at least 20', '19'],
      [{ weight: buf('u8', 80) }, 'weight.byteLength', 'at least 81', '80'],
      [{ scales: buf('bf16', 26) }, 'scales.elementCount', 'at least 27', '26'],
      [{ biases: buf('bf16', 26) }, 'biases.elementCount', 'at least 27', '26'],
      [{ ids: buf('u32', 3) }, 'ids.elementCount', 'at least 4', '3'],
      [{ output: buf('f32', 11) }, 'output.elementCount', 'at least 12', '11'],
    ];
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => quantizedMatmulId(enc(), { ...crate(), ...m } as never), 'quantized_matmul_id', arg, expected, actual);
    const b = buf('f32', 40);
    expectInvalid(() => quantizedMatmulId(enc(), { ...crate(), input: b, output: b }), 'quantized_matmul_id', 'output', 'a buffer other than input', 'the buffer of input');
  });
});

// ---- parity ----

/** Views at 16-byte offsets of one u8 allocation with random bytes around them. */
class Arena {
  readonly root: Buffer;
  private at = 32;
  constructor(dev: Device, bytes: number, r: Rng) {
    this.root = dev.alloc('u8', [bytes + 64]);
    this.root.write(Uint8Array.from({ length: bytes + 64 }, () => Math.floor(r.uniform(0, 256))));
  }
  /** A view of `count` elements; numbers converted, or raw bytes. */
  put(dtype: DType, count: number, data: ArrayLike<number> | Uint8Array, raw = false): Buffer {
    const size = dtype === 'f32' || dtype === 'u32' ? 4 : dtype === 'u8' ? 1 : 2;
    const v = this.root.view(dtype, [count], this.at);
    if (raw) v.write(new DataView((data as Uint8Array).buffer, (data as Uint8Array).byteOffset, count * size));
    else v.writeNumbers(data);
    this.at = Math.ceil((this.at + count * size) / 16) * 16 + 16;
    return v;
  }
}

/** Bytes an Arena needs for these element counts (each rounded up and padded as put() places them). */
function arenaBytes(parts: [size: number, count: number][]): number {
  return parts.reduce((s, [size, count]) => s + Math.ceil((count * size) / 16) * 16 + 16, 48);
}

/** Random weights of `rows` rows, MLX-quantized with scales and biases in dt. */
function experts(r: Rng, rows: number, k: number, gs: number, bits: number, dt: 'f16' | 'bf16' | 'f32'): AffineExpertsRef & { packed: Uint8Array } {
  const q = affineQuantize(randomArray(r, rows * k, -1, 1), rows, k, gs, bits, dt);
  return { packed: q.packed, scales: q.scales, biases: q.biases };
}

/** Experts packed by affineQuantize as device buffers: the words, scales and biases of dtype dt. */
function uploadExperts(dev: Device, e: AffineExpertsRef & { packed: Uint8Array }, dt: 'f16' | 'bf16'): { weight: Buffer; scales: Buffer; biases: Buffer } {
  const weight = dev.alloc('u32', [e.packed.length / 4]);
  weight.write(new Uint32Array(e.packed.buffer, e.packed.byteOffset, e.packed.length / 4));
  const scales = dev.alloc(dt, [e.scales.length]);
  scales.writeNumbers(e.scales);
  const biases = dev.alloc(dt, [e.biases.length]);
  biases.writeNumbers(e.biases);
  return { weight, scales, biases };
}

interface Shape extends QuantizedIdSizesRef, IdShape {
  dt: 'f16' | 'bf16';
}

/** IdProduct (tests/matmul-id.ts), every operand a view of one Arena. */
function checkProduct(dev: Device, ...[s, ids, form, seed, gateUp]: Parameters<IdProduct<Shape>>): number {
  const r = rng(seed);
  const { m, n, k, dt } = s;
  const pairs = m * s.nExpertUsed;
  const E = s.numExperts;
  const fused = gateUp?.fused === true;
  const expertRows = s.expertRows ?? (fused ? 2 * n : n);
  const rowBytes = affineRowBytes(k, s.bits);
  const groups = k / s.groupSize;
  const viewRows = (E - 1) * expertRows + n;
  const stored = fused ? E * expertRows : viewRows;
  const x = roundedTo(dt, randomArray(r, m * k, -1, 1));
  const gate = experts(r, stored, k, s.groupSize, s.bits, dt);
  const up = gateUp !== undefined && !fused ? experts(r, stored, k, s.groupSize, s.bits, dt) : gate;
  const arena = new Arena(dev, arenaBytes([[2, m * k], [1, 2 * stored * rowBytes], [2, 4 * stored * groups], [4, pairs]]) + 4096, r);
  const xb = arena.put(dt, m * k, x);
  const idb = arena.put('u32', pairs, ids);
  const wv = (e: AffineExpertsRef, at: number): { weight: Buffer; scales: Buffer; biases: Buffer } => {
    const w = arena.put('u32', (viewRows * rowBytes) / 4, e.packed.subarray(at * rowBytes, (at + viewRows) * rowBytes), true);
    const sc = arena.put(dt, viewRows * groups, Array.from(e.scales).slice(at * groups, (at + viewRows) * groups));
    const bi = arena.put(dt, viewRows * groups, Array.from(e.biases).slice(at * groups, (at + viewRows) * groups));
    return { weight: w, scales: sc, biases: bi };
  };
  const g = wv(gate, 0);
  const u = gateUp === undefined ? g : wv(up, fused ? n : 0);
  const outRoot = dev.alloc(dt, [pairs * n + 32]);
  outRoot.fill(Number.NaN);
  const output = outRoot.view(dt, [pairs * n], 64);
  const offsets = dev.alloc('u32', [E + 2]);
  const order = dev.alloc('u32', [pairs]);
  const sizes = { m, n, k, groupSize: s.groupSize, bits: s.bits, nExpertUsed: s.nExpertUsed, numExperts: E, expertRows };
  run(dev, (enc) => {
    if (form === 'matrix') moeDispatchSort(enc, { ids: idb, offsets, order, nPairs: pairs, numExperts: E });
    if (gateUp === undefined) {
      if (form === 'vector') quantizedMvId(enc, { x: xb, ...g, ids: idb, output, ...sizes });
      else quantizedMmId(enc, { x: xb, ...g, offsets, order, output, ...sizes });
    } else {
      const parts = {
        x: xb, gateWeight: g.weight, gateScales: g.scales, gateBiases: g.biases, upWeight: u.weight, upScales: u.scales, upBiases: u.biases,
        output, activation: gateUp.activation, ...sizes,
      };
      if (form === 'vector') quantizedGateUpMvId(enc, { ...parts, ids: idb });
      else quantizedGateUpMmId(enc, { ...parts, offsets, order });
    }
  });
  // The reference reads the experts as the views hold them (the up view starts n rows into a fused tensor).
  const sub = (e: AffineExpertsRef, at: number): AffineExpertsRef => ({
    packed: e.packed.subarray(at * rowBytes, (at + viewRows) * rowBytes),
    scales: Array.from(e.scales).slice(at * groups, (at + viewRows) * groups),
    biases: Array.from(e.biases).slice(at * groups, (at + viewRows) * groups),
  });
  const want = gateUp === undefined ? quantizedMatmulIdRef(x, sub(gate, 0), ids, sizes)
    : quantizedGateUpIdRef(x, sub(gate, 0), sub(up, fused ? n : 0), ids, sizes, gateUp.activation);
  const all = outRoot.readNumbers();
  // f16 below its smallest normal (2^-14) is spaced 2^-24 apart: an output there errs by up to 2^-25
  // whatever the sums' error, 2^-11 of a 2^-14 floor (under TOL.f16). bf16's normals reach 1e-38.
  const floor = dt === 'f16' ? 2 ** -14 : 0;
  const err = dotErr(all.slice(32), want.y, want.abs.map((v) => v + floor));
  const outside = Array.from(all.slice(0, 32)).every(Number.isNaN);
  for (const b of [arena.root, outRoot, offsets, order]) b.release();
  return outside ? err : Infinity;
}

describeBackends('quantized_matmul_id parity', ({ device }) => {
  test('vector form: every bits x group size x dtype; one token and three x top-2 of 5 experts; ids past the experts', () => {
    const dev = device();
    const over: string[] = [];
    let seed = 1;
    for (const dt of ['f16', 'bf16'] as const) {
      for (const bits of [4, 6, 8]) {
        for (const gs of [32, 64, 128]) {
          for (const m of [1, 3]) {
            const s: Shape = { dt, m, n: 13, k: 128, groupSize: gs, bits, nExpertUsed: 2, numExperts: 5 };
            const ids = idsFor(rng(seed), m * 2, 5, (p) => (p === 1 ? 9 : null), true);
            const e = checkProduct(dev, s, ids, 'vector', seed++);
            if (!(e < dotTolerance(dt, s.k))) over.push(`${dt} ${bits} bits gs ${gs} m ${m}: ${e}`);
          }
        }
      }
    }
    expect(over).toEqual([]);
  });

  test('matrix form after moe_dispatch_sort: empty experts, one expert taking all, ids past the experts, n past a tile', () => {
    const dev = device();
    expect(matrixCasesOver<Shape>((...c) => checkProduct(dev, ...c), [
      ['40 tokens x top-3 of 9, expert 4 empty', { dt: 'bf16', m: 40, n: 70, k: 64, groupSize: 32, bits: 4, nExpertUsed: 3, numExperts: 9 },
        () => null, true, 4],
      ['one expert takes all 75 pairs', { dt: 'f16', m: 25, n: 9, k: 64, groupSize: 64, bits: 6, nExpertUsed: 3, numExperts: 4 }, () => 2, false,
        null],
      ['one token, top-8 of 12 experts', { dt: 'bf16', m: 1, n: 33, k: 128, groupSize: 128, bits: 8, nExpertUsed: 8, numExperts: 12 },
        (p) => 11 - p, false, null],
    ])).toEqual([]);
  });

  test('fused gate/up (silu, gelu_tanh), vector and matrix forms, separate and fused [E, 2 I, k] weights', () => {
    const dev = device();
    expect(gateUpCasesOver<Shape>((...c) => checkProduct(dev, ...c), (form): Shape => form === 'vector'
      ? { dt: 'bf16', m: 2, n: 24, k: 64, groupSize: 32, bits: 4, nExpertUsed: 4, numExperts: 6 }
      : { dt: 'f16', m: 30, n: 40, k: 96, groupSize: 32, bits: 6, nExpertUsed: 2, numExperts: 5 })).toEqual([]);
  });

  test('a down projection over pairs (m = tokens x top-k, nExpertUsed = 1), Qwen3.6-like k = 512 of 2048 rows trimmed to 48', () => {
    const dev = device();
    const s: Shape = { dt: 'bf16', m: 2 * 8, n: 48, k: 512, groupSize: 64, bits: 4, nExpertUsed: 1, numExperts: 16 };
    for (const e of downErrors<Shape>((...c) => checkProduct(dev, ...c), s)) expect(e).toBeLessThan(dotTolerance('bf16', 512));
  });

  test('the vector and matrix forms agree on the same ids (8 tokens x top-8 of 20 experts)', () => {
    const dev = device();
    const s: Shape = { dt: 'bf16', m: 8, n: 20, k: 64, groupSize: 64, bits: 8, nExpertUsed: 8, numExperts: 20 };
    const ids = idsFor(rng(400), 64, 20, () => null, false);
    expect(checkProduct(dev, s, ids, 'vector', 401)).toBeLessThan(dotTolerance('bf16', 64));
    expect(checkProduct(dev, s, ids, 'matrix', 401)).toBeLessThan(dotTolerance('bf16', 64));
  });

  test('the vector forms over f32 x: the bits of x cast to the scales\' type first, and the reference; every bits, both dtypes, plain and gate/up', () => {
    const dev = device();
    const over: string[] = [];
    let seed = 500;
    for (const dt of ['f16', 'bf16'] as const) {
      for (const bits of [4, 6, 8]) {
        for (const gateUp of [false, true]) {
          const r = rng(seed++);
          // k 256 in groups of 64: the group-column path's sizes for 4 bits (quantizedIdGcTakes), the vector engine's else.
          const m = 2, n = 24, k = 256, gs = 64, U = 3, E = 5, pairs = m * U;
          const x = randomArray(r, m * k, -2, 2);
          const ids = [4, 0, 9, 2, 2, 1];
          const gate = experts(r, E * n, k, gs, bits, dt);
          const up = experts(r, E * n, k, gs, bits, dt);
          const xb = dev.alloc('f32', [m * k]);
          xb.writeNumbers(x);
          const xc = dev.alloc(dt, [m * k]);
          const idb = dev.alloc('u32', [pairs]);
          idb.writeNumbers(ids);
          const g = uploadExperts(dev, gate, dt), u = uploadExperts(dev, up, dt);
          const outs = [poisoned(dev, dt, [pairs * n]), poisoned(dev, dt, [pairs * n])];
          const sizes = { m, n, k, groupSize: gs, bits, nExpertUsed: U, numExperts: E };
          run(dev, (enc) => {
            cast(enc, { input: xb, output: xc });
            for (const [xin, output] of [[xb, outs[0]!], [xc, outs[1]!]] as const) {
              if (gateUp) {
                quantizedGateUpMvId(enc, {
                  x: xin, gateWeight: g.weight, gateScales: g.scales, gateBiases: g.biases, upWeight: u.weight, upScales: u.scales,
                  upBiases: u.biases, ids: idb, output, ...sizes,
                });
              } else {
                quantizedMvId(enc, { x: xin, ...g, ids: idb, output, ...sizes });
              }
            }
          });
          const got = outs[0]!.readNumbers(), cast16 = outs[1]!.readNumbers();
          const xr = roundedTo(dt, x);
          const want = gateUp ? quantizedGateUpIdRef(xr, gate, up, ids, sizes, 'silu') : quantizedMatmulIdRef(xr, gate, ids, sizes);
          const floor = dt === 'f16' ? 2 ** -14 : 0;
          const err = dotErr(got, want.y, want.abs.map((v) => v + floor));
          const what = `${dt} ${bits} bits${gateUp ? ' gate/up' : ''}`;
          if (!Array.from(got).every((v, i) => Object.is(v, cast16[i]))) over.push(`${what}: not the cast's bits`);
          if (!(err < dotTolerance(dt, k))) over.push(`${what}: error ${err}`);
          for (const b of [xb, xc, idb, g.weight, g.scales, g.biases, u.weight, u.scales, u.biases, ...outs]) b.release();
        }
      }
    }
    expect(over).toEqual([]);
  });

  test('the _gc kernels through their compact CUDA entries: the kernel\'s own entry\'s bits, every warp count, group sizes, x f32 and 16-bit, an id past the experts', () => {
    const dev = device();
    const over: string[] = [];
    const warps = new Set<string>();
    let seed = 900;
    for (const [gateUp, xF32, dt, m, U, n, k, gs] of [
      // W 4, 2, 1 for gate/up; 2 and 1 for the plain form (k sets the rounds that bound W).
      [true, true, 'bf16', 1, 2, 24, 2048, 64], [true, false, 'f16', 2, 4, 1024, 512, 32], [true, true, 'f16', 4, 4, 1024, 128, 128],
      [false, false, 'bf16', 1, 3, 40, 2048, 128], [false, true, 'bf16', 4, 4, 2048, 64, 32],
    ] as const) {
      const r = rng(seed++);
      const E = 5, pairs = m * U, bits = 4;
      const x = roundedTo(xF32 ? 'f32' : dt, randomArray(r, m * k, -2, 2));
      const ids = Array.from({ length: pairs }, (_, i) => (i === 1 ? 7 : Math.floor(r.uniform(0, E))));
      const gate = experts(r, E * n, k, gs, bits, dt);
      const up = experts(r, E * n, k, gs, bits, dt);
      const xb = dev.alloc(xF32 ? 'f32' : dt, [m * k]);
      xb.writeNumbers(x);
      const idb = dev.alloc('u32', [pairs]);
      idb.writeNumbers(ids);
      const g = uploadExperts(dev, gate, dt), u = uploadExperts(dev, up, dt);
      const output = poisoned(dev, dt, [pairs * n]);
      const sizes = { m, n, k, groupSize: gs, bits, nExpertUsed: U, numExperts: E };
      const plan = gateUp
        ? planQuantizedGateUpMvId({ x: xb, gateWeight: g.weight, gateScales: g.scales, gateBiases: g.biases, upWeight: u.weight, upScales: u.scales,
          upBiases: u.biases, ids: idb, output, ...sizes }, dev.limits, dev)
        : planQuantizedMvId({ x: xb, ...g, ids: idb, output, ...sizes }, dev.limits, dev);
      const d = plan.dispatches[0]!;
      const what = `${gateUp ? 'gate/up' : 'plain'} ${xF32 ? 'f32' : dt} x ${pairs} pairs n ${n} gs ${gs}`;
      if (d.cuda?.entry !== quantizedIdMvCudaEntry(d.kernel, pairs, n, k, gateUp, gs) || d.cuda?.entry === undefined) over.push(`${what}: entry ${d.cuda?.entry}`);
      warps.add(`${gateUp ? 'gate/up' : 'plain'} ${d.cuda?.entry?.replace(/.*_w/, 'w')}`);
      run(dev, (enc) => record(enc, plan));
      const viaEntry = output.readNumbers();
      output.fill(Number.NaN);
      run(dev, (enc) => record(enc, { ...plan, dispatches: [{ ...d, cuda: { grid: d.cuda!.grid, threads: d.cuda!.threads, threadgroupMemory: d.cuda!.threadgroupMemory } }] }));
      const viaKernel = output.readNumbers();
      if (!Array.from(viaEntry).every((v, i) => Object.is(v, viaKernel[i]))) over.push(`${what}: not the _gc kernel's bits`);
      const xr = roundedTo(dt, x);
      const want = gateUp ? quantizedGateUpIdRef(xr, gate, up, ids, sizes, 'silu') : quantizedMatmulIdRef(xr, gate, ids, sizes);
      const floor = dt === 'f16' ? 2 ** -14 : 0;
      const err = dotErr(viaEntry, want.y, want.abs.map((v) => v + floor));
      if (!(err < dotTolerance(dt, k))) over.push(`${what}: error ${err}`);
      for (const b of [xb, idb, g.weight, g.scales, g.biases, u.weight, u.scales, u.biases, output]) b.release();
    }
    expect(over).toEqual([]);
    expect([...warps].sort()).toEqual(['gate/up w1', 'gate/up w2', 'gate/up w4', 'plain w1', 'plain w2']);
  }, 120_000);

  test('mlx-native\'s quantized_matmul_id: its odd layouts (k = 10, group 4, 6-bit rows as u8) and MLX\'s; larger buffers; a bad id gives zeros', () => {
    const dev = device();
    const over: string[] = [];
    const cases = [
      { m: 2, k: 10, n: 3, groupSize: 4, bits: 6, nExpertUsed: 2, numExperts: 3, u8: true },
      { m: 3, k: 96, n: 17, groupSize: 32, bits: 4, nExpertUsed: 2, numExperts: 4, u8: false },
      { m: 1, k: 256, n: 8, groupSize: 64, bits: 8, nExpertUsed: 4, numExperts: 6, u8: false },
    ];
    let seed = 500;
    for (const c of cases) {
      const r = rng(seed++);
      const pairs = c.m * c.nExpertUsed;
      const rows = c.numExperts * c.n;
      const q = Array.from({ length: rows * c.k }, () => Math.floor(r.uniform(0, 2 ** c.bits)));
      const packed = affinePack(q, rows, c.k, c.bits);
      const g = rows * Math.ceil(c.k / c.groupSize);
      const scales = roundedTo('bf16', randomArray(r, g, 0.001, 0.02));
      const biases = roundedTo('bf16', randomArray(r, g, -0.1, 0.1));
      const x = roundedTo('f32', randomArray(r, c.m * c.k, -1, 1));
      const ids = idsFor(r, pairs, c.numExperts, (p) => (p === pairs - 1 ? c.numExperts : null), false);
      const input = dev.upload('f32', [c.m * c.k + 3], [...x, 9, 9, 9]);
      const weight = c.u8 ? dev.alloc('u8', [packed.byteLength + 5]) : dev.alloc('u32', [Math.ceil(packed.byteLength / 4) + 2]);
      weight.write(new DataView(packed.buffer, packed.byteOffset, packed.byteLength), { byteOffset: 0 });
      const sb = dev.upload('bf16', [g + 1], [...scales, 1]);
      const bb = dev.upload('bf16', [g + 1], [...biases, 1]);
      const idb = dev.upload('u32', [pairs + 1], [...ids, 0]);
      const output = poisoned(dev, 'f32', [pairs * c.n + 4]);
      run(dev, (enc) => quantizedMatmulId(enc, { input, weight, scales: sb, biases: bb, ids: idb, output, ...c }));
      const want = quantizedMatmulIdRef(roundedTo('bf16', x), { packed, scales, biases }, ids, c);
      const got = output.readNumbers();
      const e = dotErr(got.slice(0, pairs * c.n), want.y, want.abs);
      if (!(e < dotTolerance('bf16', c.k)) || !Array.from(got.slice(pairs * c.n)).every(Number.isNaN)) over.push(`${JSON.stringify(c)}: ${e}`);
      for (const b of [input, weight, sb, bb, idb, output]) b.release();
    }
    expect(over).toEqual([]);
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('quantized_matmul_id', [
  // The ids, offsets and order are tables.
  // m = 3 rows x 2 slots, 4 experts of n = 5 rows, k = 64, 4 bits, groups of 32: 8 words and 2 groups a row.
  ...(['quantizedMvId', 'quantizedMmId', 'quantizedGateUpMvId', 'quantizedGateUpMmId'] as const).map((fn): Case => {
    const gu = fn.includes('GateUp');
    const mm = fn.includes('Mm');
    const experts = (pre: string): Record<string, KeySpec> => gu
      ? { [`${pre}Weight`]: buf(U32), [`${pre}Scales`]: buf(['f16', 'bf16']), [`${pre}Biases`]: buf(['f16', 'bf16']) }
      : { weight: buf(U32), scales: buf(['f16', 'bf16']), biases: buf(['f16', 'bf16']) };
    const routing: Record<string, KeySpec> = mm ? { offsets: buf(U32, { table: true }), order: buf(U32, { table: true }) } : { ids: buf(U32, { table: true }) };
    const op = { quantizedMvId: 'quantized_mv_id', quantizedMmId: 'quantized_mm_id', quantizedGateUpMvId: 'quantized_gate_up_mv_id', quantizedGateUpMmId: 'quantized_gate_up_mm_id' }[fn];
    return {
      fn, op,
      keys: {
        x: buf(mm ? ['f16', 'bf16'] : ['f32', 'f16', 'bf16']), ...experts('gate'), ...(gu ? experts('up') : {}), ...routing, output: out(['f16', 'bf16']),
        m: int, n: int, k: int, groupSize: { kind: 'enum', values: [32, 64, 128] }, bits: { kind: 'enum', values: [4, 6, 8] },
        nExpertUsed: int, numExperts: int, expertRows: { kind: 'int?' },
        ...(gu ? { activation: { kind: 'enum', values: [undefined, 'silu', 'gelu_tanh'] } } : {}),
      },
      make: (d) => {
        const set = (pre: string): Record<string, Buffer> => gu
          ? { [`${pre}Weight`]: a(d, 'u32', 160), [`${pre}Scales`]: a(d, 'bf16', 40), [`${pre}Biases`]: a(d, 'bf16', 40) }
          : { weight: a(d, 'u32', 160), scales: a(d, 'bf16', 40), biases: a(d, 'bf16', 40) };
        return {
          x: a(d, 'bf16', 192), ...set('gate'), ...(gu ? set('up') : {}),
          ...(mm ? { offsets: a(d, 'u32', 6), order: a(d, 'u32', 6) } : { ids: a(d, 'u32', 6) }), output: a(d, 'bf16', 30),
          m: 3, n: 5, k: 64, groupSize: 32, bits: 4, nExpertUsed: 2, numExperts: 4, ...(gu ? { activation: 'gelu_tanh' } : {}),
        };
      },
      fill: (args) => {
        for (const w of ['weight', 'gateWeight', 'upWeight']) if (args[w] !== undefined) randomWords(args[w] as Buffer);
        if (args.ids !== undefined) (args.ids as Buffer).writeNumbers([3, 0, 1, 7, 2, 2]);
        if (args.offsets !== undefined) (args.offsets as Buffer).writeNumbers([0, 1, 2, 4, 5, 6]);
        if (args.order !== undefined) (args.order as Buffer).writeNumbers([1, 4, 2, 5, 0, 3]);
      },
    };
  }),
  {
    fn: 'quantizedMatmulId', op: 'quantized_matmul_id',
    // mlx-native's rule: each buffer at least its size (freeCount); any k and group size.
    keys: {
      input: buf(F, { freeCount: true }), weight: buf(['u32', 'u8'], { freeCount: true }), scales: buf(BF, { freeCount: true }),
      biases: buf(BF, { freeCount: true }), ids: buf(U32, { freeCount: true, table: true }), output: out(F, { freeCount: true }),
      m: int, k: int, n: int, groupSize: int, bits: { kind: 'enum', values: [4, 6, 8] }, nExpertUsed: int, numExperts: int,
    },
    make: (d) => ({
      input: a(d, 'f32', 20), weight: a(d, 'u8', 81), scales: a(d, 'bf16', 27), biases: a(d, 'bf16', 27), ids: a(d, 'u32', 4),
      output: a(d, 'f32', 12), m: 2, k: 10, n: 3, groupSize: 4, bits: 6, nExpertUsed: 2, numExperts: 3,
    }),
    fill: (args) => (args.ids as Buffer).writeNumbers([2, 0, 5, 1]),
  },
]);
