// dense: the param packers against the header and the .metal bindings (the
// byte layouts of mlx-native's structs), the reference against values by
// hand, every validation rule of each op, and parity against the float64
// reference on every backend: f32, f16 and bf16, the vector and the matrix
// forms at sizes that are not multiples of any tile (1, 7, 33, 100, 257),
// one row and many, batches with a shared and a broadcast weight, weights and
// inputs as views at non-zero offsets of larger buffers, mlx-native's
// batched kernels with byte strides of their own, the sizes that take the
// CUDA kernels' other tiles and rows per block, and on CUDA the Hopper
// launches of every tile width (wgmma on sm_90a), dispatched directly.
//
// Error measure: |got - want| / sum_k |x w| per output (denseAbsRef). A sum
// in floating point errs by units of its precision times the sum of its
// terms' magnitudes, whatever the sum itself is (random inputs cancel), so
// this is the measure the rounding bounds speak of. Tolerances are TOL's:
// f32 sums of K products err by about sqrt(K) units of f32 precision (6e-8)
// relative to sum |x w| (rounding errors of random sign), 4e-6 at K = 4096,
// inside TOL.f32 = 1e-5 up to there; past 4096 the tolerance grows as
// sqrt(K / 4096). A 16-bit output adds one rounding of y, at most 2^-11
// (f16) or 2^-9 (bf16) of |y| <= sum |x w|, inside TOL.f16 and TOL.bf16.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/dense.metal' with { type: 'text' };
import type { Buffer, DType, Device } from '../ts/index.ts';
import {
  DENSE_FAMILY,
  DENSE_GEMV_BF16_SHARED_BYTES,
  DENSE_KERNELS,
  DENSE_MM_TENSOR_SHARED_BYTES,
  DENSE_SOURCES,
  denseGemmF16,
  denseGemvBf16F32,
  denseGemvBf16Simdgroups,
  denseMatmul,
  denseMatmulTensor,
  denseMatvec,
  DENSE_MM_HOPPER_WIDTHS,
  DENSE_MATVEC_CUDA_ROWS,
  denseMmCudaLaunch,
  denseMmHopperBytes,
  denseMmHopperRate,
  denseMmHopperWidth,
  denseMmUsesWgmma,
  denseMvCudaLaunch,
  denseGemvBf16CudaLaunch,
  packDenseGemmParams,
  packDenseGemvBf16Params,
  packDenseMmTensorParams,
  packDenseParams,
  planDenseMatmul,
  type DenseDType,
  denseAbsRef,
  denseRef,
} from '../ts/ops/dense.ts';
import type { Launch } from '../ts/plan.ts';
import {
  describeBackends, describeValidation, dotErr, dotTolerance, expectInvalid, randomArray, rng, roundedTo, run, TARGET_LIMITS, TOL,
} from './helpers.ts';
import { a, BF, buf, F, int, opContract, out, type Case } from './op-contract.ts';

/**
 * A buffer of n random values in [-1, 1) (never zeros) as a view at a
 * non-zero offset inside a larger allocation (garbage around it), and the
 * values it holds.
 */
function viewOf(dev: Device, dtype: DType, shape: number[], seed: number): { buf: Buffer; values: Float64Array; root: Buffer } {
  const n = shape.reduce((a, b) => a * b, 1);
  const r = rng(seed);
  const pad = 48 / (dtype === 'f32' ? 4 : 2);
  const root = dev.upload(dtype, [pad + n + pad], randomArray(r, pad + n + pad, -4, 4));
  const buf = root.view(dtype, shape, 48);
  const values = roundedTo(dtype, randomArray(r, n));
  buf.writeNumbers(values);
  return { buf, values, root };
}

describe('dense param packers match the header and the .metal bindings', () => {
  const view = (b: Uint8Array): DataView => new DataView(b.buffer, b.byteOffset, b.byteLength);
  test('DenseGemmParams (M, N, K): buffer(3) of dense_gemm_f16 and dense_matvec_*', () => {
    for (const k of ['dense_gemm_f16', 'dense_matvec_f16', 'dense_matvec_f16w_f32io', 'dense_matvec_bf16w_f32io', 'dense_matvec_f32']) {
      expect(src).toMatch(new RegExp(`kernel void ${k}\\([^{]*constant DenseGemmParams&\\s+params\\s+\\[\\[buffer\\(3\\)\\]\\]`));
    }
    const v = view(packDenseGemmParams({ m: 3, n: 5, k: 7 }));
    expect([v.byteLength, v.getUint32(0, true), v.getUint32(4, true), v.getUint32(8, true)]).toEqual([12, 3, 5, 7]);
  });
  test("DenseGemvBf16Params: llama.cpp's 112-byte mul_mv block at buffer(0), mlx-native's offsets and values", () => {
    expect(src).toMatch(/kernel void hf2q_dense_gemv_bf16_f32_4\([^{]*constant DenseGemvBf16Params&\s+args\s+\[\[buffer\(0\)\]\]/);
    const v = view(packDenseGemvBf16Params({ m: 3, n: 5, k: 64, src0Batch: 2, src1Batch: 8 }));
    expect(v.byteLength).toBe(112);
    const i32 = (o: number): number => v.getInt32(o, true);
    const u64 = (o: number): number => Number(v.getBigUint64(o, true));
    expect([i32(0), i32(4), i32(8), v.getUint32(12, true)]).toEqual([64, 5, 2, 0]);
    expect([u64(16), u64(24), u64(32), u64(40)]).toEqual([2, 128, 640, 0]);
    expect([i32(48), i32(52), i32(56), v.getUint32(60, true)]).toEqual([64, 3, 8, 0]);
    expect([u64(64), u64(72), u64(80), u64(88)]).toEqual([4, 256, 768, 0]);
    expect([i32(96), i32(100), i32(104), v.getInt16(108, true), v.getInt16(110, true)]).toEqual([5, 3, 2, 4, 1]);
  });
  test('DenseMmTensorParams: 88 bytes at buffer(0) of hf2q_dense_mm_*, the offsets of mlx-native\'s #[repr(C)] struct', () => {
    for (const w of ['bf16', 'f16', 'f32']) {
      expect(src).toMatch(new RegExp(`kernel void hf2q_dense_mm_${w}_f32_tensor\\([^{]*constant DenseMmTensorParams&\\s+args\\s+\\[\\[buffer\\(0\\)\\]\\]`));
    }
    const v = view(packDenseMmTensorParams({ m: 35, n: 67, k: 64, src0Batch: 2, src1Batch: 8, weightBytes: 2 }));
    expect(v.byteLength).toBe(88);
    const i32 = (o: number): number => v.getInt32(o, true);
    const u64 = (o: number): number => Number(v.getBigUint64(o, true));
    expect([i32(0), i32(4), u64(8), u64(16), u64(24), i32(32), v.getUint32(36, true)]).toEqual([64, 2, 128, 67 * 128, 0, 8, 0]);
    expect([u64(40), u64(48), u64(56), u64(64), i32(72), i32(76)]).toEqual([4, 256, 35 * 256, 0, 67, 35]);
    expect([v.getInt16(80, true), v.getInt16(82, true), v.getUint32(84, true)]).toEqual([4, 1, 0]);
  });
  test('DenseParams (m, n, k, batch, w_batch): buffer(3) of dense_mm_<t> and dense_mv_<t>', () => {
    for (const t of ['f32', 'f16', 'bf16']) {
      for (const form of ['mm', 'mv']) {
        expect(src).toMatch(new RegExp(`kernel void dense_${form}_${t}\\([^{]*constant DenseParams&\\s+params\\s+\\[\\[buffer\\(3\\)\\]\\]`));
      }
    }
    const v = view(packDenseParams({ m: 2, n: 3, k: 4, batch: 6, weightBatch: 3 }));
    expect(Array.from({ length: 5 }, (_, i) => v.getUint32(4 * i, true))).toEqual([2, 3, 4, 6, 3]);
  });
  test('launches: the vector form in 8- (f32 at one token or below 1024 rows), 16- or 32-row CUDA blocks, tile shapes by size, the crate kernels\' grids', () => {
    expect(denseMvCudaLaunch(17408, 2, 'bf16', 1)).toEqual({ grid: [2 * 544, 1, 1], threads: [256, 1, 1] });
    expect(denseMvCudaLaunch(17408, 2, 'f32', 1)).toEqual({ grid: [2 * 2176, 1, 1], threads: [256, 1, 1] });
    expect(denseMvCudaLaunch(17408, 2, 'f32', 4)).toEqual({ grid: [2 * 544, 1, 1], threads: [256, 1, 1] });
    expect(denseMvCudaLaunch(1000, 1, 'bf16', 2)).toEqual({ grid: [63, 1, 1], threads: [256, 1, 1] });
    expect(denseMvCudaLaunch(1000, 1, 'f32', 2)).toEqual({ grid: [125, 1, 1], threads: [256, 1, 1] });
    expect(denseMvCudaLaunch(1024, 3, 'f32', 8)).toEqual({ grid: [3 * 64, 1, 1], threads: [256, 1, 1] });
    // dense_gemv_bf16_f32: a block a row where 8-row blocks would be fewer than the SMs (132), else 8-row blocks.
    const rows = { entry: 'hf2q_dense_gemv_bf16_f32_4_rows', threads: [256, 1, 1] as const, threadgroupMemory: [32] };
    expect(denseGemvBf16CudaLaunch(1, 128, 1, TARGET_LIMITS.cuda)).toEqual({ ...rows, grid: [128, 1, 1] });
    expect(denseGemvBf16CudaLaunch(1, 257, 2, TARGET_LIMITS.cuda)).toEqual({ ...rows, grid: [2 * 257, 1, 1] });
    expect(denseGemvBf16CudaLaunch(2, 257, 2, TARGET_LIMITS.cuda)).toEqual({ grid: [4 * 33, 1, 1], threads: [256, 1, 1] });
    expect(denseGemvBf16CudaLaunch(1, 1048, 1, TARGET_LIMITS.cuda)).toEqual({ ...rows, grid: [1048, 1, 1] });
    expect(denseGemvBf16CudaLaunch(1, 1056, 1, TARGET_LIMITS.cuda)).toEqual({ grid: [132, 1, 1], threads: [256, 1, 1] });
    expect(denseGemvBf16CudaLaunch(5, 128, 8, TARGET_LIMITS.cuda)).toEqual({ grid: [16 * 40, 1, 1], threads: [256, 1, 1] });
    // Off Hopper (an A100's limits): the mma.sync tiles.
    const a100 = { ...TARGET_LIMITS.cuda, computeCapability: 80, multiprocessors: 108, maxThreadgroupMemory: 166912 };
    expect(denseMmCudaLaunch(4096, 4096, 1, 'bf16', a100)).toEqual({ grid: [16 * 32, 1, 1], threads: [256, 1, 1], threadgroupMemory: { 0: 122880 } });
    expect(denseMmCudaLaunch(512, 17408, 1, 'bf16', a100)).toEqual({ grid: [136 * 8, 1, 1], threads: [128, 1, 1], threadgroupMemory: { 0: 61440 } });
    for (const l of [a100, TARGET_LIMITS.cuda]) {
      expect(denseMmCudaLaunch(100, 100, 3, 'f32', l)).toEqual({ grid: [2 * 2 * 3, 1, 1], threads: [256, 1, 1] });
    }
    expect(122880).toBeLessThanOrEqual(a100.maxThreadgroupMemory);
    expect([denseGemvBf16Simdgroups(1), denseGemvBf16Simdgroups(129), denseGemvBf16Simdgroups(5120)]).toEqual([1, 2, 4]);
    expect(DENSE_MM_TENSOR_SHARED_BYTES).toEqual({ bf16: 8192, f16: 8192, f32: 16384 });
    expect(DENSE_GEMV_BF16_SHARED_BYTES).toBe(256);
  });
  test('Hopper launches: 128 x 256 to 128 x 128 tiles by the waves they leave on the SMs, the shared memory naming the width', () => {
    const h100 = TARGET_LIMITS.cuda;
    expect([denseMmUsesWgmma(h100), denseMmUsesWgmma({ ...h100, computeCapability: 80 }), denseMmUsesWgmma({ ...h100, computeCapability: 100 }),
      denseMmUsesWgmma({ ...h100, maxThreadgroupMemory: 166912 })]).toEqual([true, false, false, false]);
    expect(DENSE_MM_HOPPER_WIDTHS.map(denseMmHopperBytes)).toEqual([197632, 226304, 205824, 185344, 164864]);
    expect(new Set(DENSE_MM_HOPPER_WIDTHS.map(denseMmHopperBytes)).size).toBe(DENSE_MM_HOPPER_WIDTHS.length);
    // The rate by shared-memory bytes a clock: 128 at 256, 8192 / bn + 96 below.
    expect(DENSE_MM_HOPPER_WIDTHS.map((bn) => Number(denseMmHopperRate(bn).toFixed(3)))).toEqual([1, 0.966, 0.923, 0.87, 0.8]);
    for (const bn of DENSE_MM_HOPPER_WIDTHS) expect(denseMmHopperBytes(bn)).toBeLessThanOrEqual(h100.maxThreadgroupMemory);
    const launch = (m: number, n: number, batch = 1) => denseMmCudaLaunch(m, n, batch, 'bf16', h100);
    const hopper = (bn: number, tiles: number): Launch => ({ grid: [tiles, 1, 1], threads: [256, 1, 1], threadgroupMemory: { 0: denseMmHopperBytes(bn) } });
    // 4096^3: 512 tiles of 128 x 256 in 4 rounds of 132 beat 704 of 128 x 192 in 6.
    expect(launch(4096, 4096)).toEqual(hopper(256, 512));
    // Qwen3.6 up at 512 tokens: 364 tiles of 128 x 192 (3 rounds) beat 272 of 128 x 256 and 312 of 128 x 224 (3 rounds of wider tiles).
    expect(launch(512, 17408)).toEqual(hopper(192, 4 * 91));
    // Qwen3.6 down at 512: one round at 160 (128 tiles) or wider; the narrowest of them.
    expect(launch(512, 5120)).toEqual(hopper(160, 4 * 32));
    // Gemma 4 up at 512: 384 tiles of 128 x 224 in 3 rounds beat 336 of 128 x 256 in 3 and 448 of 128 x 192 in 4.
    expect(launch(512, 21504)).toEqual(hopper(224, 4 * 96));
    expect(launch(8192, 17408)).toEqual(hopper(256, 64 * 68));
    // One round at every width: the narrowest finishes first.
    expect(launch(9, 7)).toEqual(hopper(128, 1));
    expect(launch(1000, 1000, 2)).toEqual(hopper(128, 8 * 8 * 2));
    // An H100 PCIe's 114 SMs: 312 tiles of 128 x 224 in 3 rounds beat 364 of 128 x 192 in 4; unknown SMs: the widest.
    expect([denseMmHopperWidth(4096, 4096, 1, 132), denseMmHopperWidth(512, 17408, 1, 114), denseMmHopperWidth(9, 7, 1, 0)]).toEqual([256, 224, 256]);
    // The f16 and the crate's kernels take the same launches.
    expect(denseMmCudaLaunch(512, 17408, 1, 'f16', h100)).toEqual(launch(512, 17408));
  });
});

describe('dense reference against values by hand', () => {
  test('y = x W^T, a broadcast weight batch, and the sums of |x w|', () => {
    // x [2, 1, 2], w [1, 2, 2]: w rows (1, 2) and (3, -4).
    const x = [1, 2, -1, 0.5];
    const w = [1, 2, 3, -4];
    expect(Array.from(denseRef(x, w, 1, 2, 2, 2, 1))).toEqual([5, -5, 0, -5]);
    expect(Array.from(denseAbsRef(x, w, 1, 2, 2, 2, 1))).toEqual([5, 11, 2, 5]);
    // Two weight batches, each used by its own x batch.
    expect(Array.from(denseRef([1, 1], [2, 3], 1, 1, 1, 2, 2))).toEqual([2, 3]);
  });
});

describeValidation('dense validation', ({ enc, buf }) => {
  type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
  test('dense_matmul: every rule', () => {
    const base = () => ({ x: buf('bf16', 2 * 3 * 8), weight: buf('bf16', 5 * 8), output: buf('bf16', 2 * 3 * 5), m: 3, n: 5, k: 8, batch: 2 });
    const same = buf('bf16', 64);
    const cases: Case[] = [
      [{ m: 0 }, 'm', 'a positive integer', '0'],
      [{ n: 1.5 }, 'n', 'a positive integer', '1.5'],
      [{ k: -1 }, 'k', 'a positive integer', '-1'],
      [{ batch: 0 }, 'batch', 'a positive integer', '0'],
      [{ weightBatch: 0 }, 'weightBatch', 'a positive integer', '0'],
      [{ k: 2 ** 32 }, 'k', 'at most 2^32 - 1', `${2 ** 32}`],
      [{ weightBatch: 3, weight: buf('bf16', 120) }, 'batch', 'a multiple of weightBatch (3)', '2'],
      [{ form: 'dense' }, 'form', "'vector', 'matrix' or absent", 'dense'],
      [{ m: 9, x: buf('bf16', 144), output: buf('bf16', 90), form: 'vector' }, 'm', 'at most 8 (the vector form)', '9'],
      [{ m: 2 ** 31, n: 2 ** 20 }, 'm', 'at most 8388544 for n = 1048576', `${2 ** 31}`],
      [{ batch: 2 ** 31 }, 'batch', 'at most 2147483647 (the CUDA grid', `${2 ** 31}`],
      [{ m: 2 ** 26, k: 2 ** 26, batch: 2 ** 2 }, 'batch * m * k', 'a product of integers at most 2^53 - 1', `4 * ${2 ** 26} * ${2 ** 26}`],
      [{ x: buf('u16', 48) }, 'x.dtype', 'one of f32, f16, bf16', 'u16'],
      [{ weight: buf('f32', 40) }, 'weight.dtype', 'bf16', 'f32'],
      [{ output: buf('f16', 30) }, 'output.dtype', 'bf16', 'f16'],
      [{ x: buf('bf16', 47) }, 'x.elementCount', '48', '47'],
      [{ weight: buf('bf16', 80) }, 'weight.elementCount', '40', '80'],
      [{ output: buf('bf16', 31) }, 'output.elementCount', '30', '31'],
      [{ x: same.view('bf16', [48]), output: same.view('bf16', [30], 16) }, 'output', 'a buffer other than x', 'a view overlapping x'],
    ];
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => denseMatmul(enc(), { ...base(), ...m }), 'dense_matmul', arg, expected, actual);
    const w = buf('bf16', 40);
    expectInvalid(() => denseMatmul(enc(), { ...base(), weight: w, output: w.view('bf16', [30]) }), 'dense_matmul', 'output',
      'a buffer other than weight', 'a view overlapping weight');
  });
  test('dense_gemm_f16 and dense_matvec: mlx-native\'s rules (sizes at least, m = 1 for the matvec), dtypes, aliasing', () => {
    const base = () => ({ a: buf('f16', 3 * 8), b: buf('f16', 5 * 8), output: buf('f16', 15), m: 3, n: 5, k: 8 });
    const cases: Case[] = [
      [{ m: 0 }, 'm', 'a positive integer', '0'],
      [{ n: 0 }, 'n', 'a positive integer', '0'],
      [{ k: 0 }, 'k', 'a positive integer', '0'],
      [{ m: 2 ** 32 }, 'm', 'at most 2^32 - 1', `${2 ** 32}`],
      [{ a: buf('bf16', 24) }, 'a.dtype', 'f16', 'bf16'],
      [{ b: buf('f32', 40) }, 'b.dtype', 'f16', 'f32'],
      [{ output: buf('f32', 15) }, 'output.dtype', 'f16', 'f32'],
      [{ a: buf('f16', 23) }, 'a.elementCount', 'at least 24', '23'],
      [{ b: buf('f16', 39) }, 'b.elementCount', 'at least 40', '39'],
      [{ output: buf('f16', 14) }, 'output.elementCount', 'at least 15', '14'],
    ];
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => denseGemmF16(enc(), { ...base(), ...m }), 'dense_gemm_f16', arg, expected, actual);
    // Larger buffers are taken (their first elements), as in mlx-native.
    denseGemmF16(enc(), { ...base(), a: buf('f16', 100), output: buf('f16', 99) });
    const ab = buf('f16', 40);
    expectInvalid(() => denseGemmF16(enc(), { ...base(), b: ab, output: ab }), 'dense_gemm_f16', 'output', 'a buffer other than b', 'the buffer of b');

    const mv = () => ({ a: buf('f32', 8), b: buf('bf16', 5 * 8), output: buf('f32', 5), m: 1, n: 5, k: 8 });
    const mvCases: Case[] = [
      [{ m: 2, a: buf('f32', 16), output: buf('f32', 10) }, 'm', '1 (decode only)', '2'],
      [{ a: buf('bf16', 8) }, 'a.dtype', 'one of f32, f16', 'bf16'],
      [{ b: buf('u8', 40) }, 'b.dtype', 'one of f32, f16, bf16', 'u8'],
      [{ a: buf('f16', 8) }, 'b.dtype', 'f16', 'bf16'],
      [{ output: buf('f16', 5) }, 'output.dtype', 'f32', 'f16'],
      [{ b: buf('bf16', 39) }, 'b.elementCount', 'at least 40', '39'],
      [{ n: 0 }, 'n', 'a positive integer', '0'],
    ];
    for (const [m, arg, expected, actual] of mvCases) expectInvalid(() => denseMatvec(enc(), { ...mv(), ...m }), 'dense_matvec', arg, expected, actual);
  });
  test('dense_gemv_bf16_f32 and dense_matmul_tensor: mlx-native\'s rules (batches, broadcast, k >= 32), the int fields', () => {
    const base = () => ({
      src0: buf('bf16', 2 * 5 * 32), src1: buf('f32', 4 * 3 * 32), dst: buf('f32', 4 * 3 * 5), m: 3, n: 5, k: 32, src0Batch: 2, src1Batch: 4,
    });
    for (const [fn, op] of [[denseGemvBf16F32, 'dense_gemv_bf16_f32'], [denseMatmulTensor, 'dense_matmul_tensor']] as const) {
      const cases: Case[] = [
        [{ m: 0 }, 'm', 'a positive integer', '0'],
        [{ src0Batch: 0 }, 'src0Batch', 'a positive integer', '0'],
        [{ src1Batch: 1.5 }, 'src1Batch', 'a positive integer', '1.5'],
        [{ n: 2 ** 31 }, 'n', 'at most 2^31 - 1', `${2 ** 31}`],
        [{ src0Batch: 3 }, 'src1Batch', 'a multiple of src0Batch (3)', '4'],
        [{ src0Batch: 1, src1Batch: 32768 }, 'src1Batch / src0Batch', 'at most 32767 (a short in the params)', '32768'],
        [{ src1: buf('bf16', 384) }, 'src1.dtype', 'f32', 'bf16'],
        [{ dst: buf('f16', 60) }, 'dst.dtype', 'f32', 'f16'],
        [{ src0: buf('bf16', 319) }, 'src0.elementCount', 'at least 320', '319'],
        [{ src1: buf('f32', 383) }, 'src1.elementCount', 'at least 384', '383'],
        [{ dst: buf('f32', 59) }, 'dst.elementCount', 'at least 60', '59'],
        [{ src1Batch: 2 ** 30, src0Batch: 2 ** 16 }, 'src1Batch', 'at most 715827882 (the CUDA grid', `${2 ** 30}`],
        // 8-row vector blocks: ceil(2^24 / 8) blocks a row of src1 times 1024 rows is 2^31.
        [{ n: 2 ** 24, m: 2 ** 10 }, 'm', 'at most 1023 for n = 16777216', `${2 ** 10}`],
      ];
      for (const [m, arg, expected, actual] of cases) expectInvalid(() => fn(enc(), { ...base(), ...m }), op, arg, expected, actual);
      const d = buf('f32', 384);
      expectInvalid(() => fn(enc(), { ...base(), src1: d, dst: d }), op, 'dst', 'a buffer other than src1', 'the buffer of src1');
    }
    expectInvalid(() => denseGemvBf16F32(enc(), { ...base(), src0: buf('f16', 320) }), 'dense_gemv_bf16_f32', 'src0.dtype', 'bf16', 'f16');
    expectInvalid(() => denseMatmulTensor(enc(), { ...base(), src0: buf('u16', 320) }), 'dense_matmul_tensor', 'src0.dtype', 'one of f32, f16, bf16', 'u16');
    expectInvalid(() => denseMatmulTensor(enc(), { ...base(), k: 31, src0: buf('bf16', 320), src1: buf('f32', 384) }), 'dense_matmul_tensor', 'k',
      'at least 32', '31');
  });
});

describeBackends('dense parity', ({ device, backend }) => {
  /** One product through denseMatmul against the reference, inputs and output as views; returns the error. */
  function matmul(dev: Device, dtype: DenseDType, m: number, n: number, k: number, batch: number, wBatch: number,
    form: 'vector' | 'matrix'): number {
    const seed = m * 7919 + n * 104729 + k * 31 + batch;
    const x = viewOf(dev, dtype, [batch, m, k], seed);
    const w = viewOf(dev, dtype, [wBatch, n, k], seed + 1);
    const yRoot = dev.alloc(dtype, [batch * m * n + 64]);
    yRoot.fill(Number.NaN);
    const y = yRoot.view(dtype, [batch, m, n], 32);
    run(dev, (e) => denseMatmul(e, { x: x.buf, weight: w.buf, output: y, m, n, k, batch, weightBatch: wBatch, form }));
    const err = dotErr(y.readNumbers(), denseRef(x.values, w.values, m, n, k, batch, wBatch), denseAbsRef(x.values, w.values, m, n, k, batch, wBatch));
    // Nothing outside the output view was written.
    const all = yRoot.readNumbers();
    const outside = [...all.slice(0, 32 / (dtype === 'f32' ? 4 : 2)), ...all.slice(32 / (dtype === 'f32' ? 4 : 2) + batch * m * n)];
    if (!outside.every(Number.isNaN)) return Infinity;
    for (const b of [x.root, w.root, yRoot]) b.release();
    return err;
  }

  /** Odd sizes: one element, under and past a simdgroup, a tile, several tiles; k tails of every residue. */
  const VECTOR: readonly [m: number, n: number, k: number][] = [[1, 1, 1], [1, 7, 33], [3, 33, 7], [8, 100, 257], [5, 257, 100], [2, 64, 512]];
  const MATRIX: readonly [m: number, n: number, k: number][] = [
    [1, 1, 1], [9, 7, 33], [33, 65, 7], [100, 33, 100], [64, 128, 64], [70, 200, 257],
  ];
  for (const dtype of ['f32', 'f16', 'bf16'] as const) {
    test(`${dtype}: vector and matrix forms at odd sizes, as views`, () => {
      const dev = device();
      const over: string[] = [];
      for (const [form, shapes] of [['vector', VECTOR], ['matrix', MATRIX]] as const) {
        for (const [m, n, k] of shapes) {
          const e = matmul(dev, dtype, m, n, k, 1, 1, form);
          if (!(e <= dotTolerance(dtype, k))) over.push(`${form} [${m}, ${n}, ${k}]: ${e}`);
        }
      }
      expect(over).toEqual([]);
    });
  }

  test('batched: a weight per batch, and one weight broadcast over batches (both forms)', () => {
    const dev = device();
    const over: string[] = [];
    for (const [dtype, m, n, k, batch, wBatch] of [
      ['bf16', 3, 40, 64, 4, 2], ['f16', 1, 17, 24, 3, 3], ['f32', 5, 9, 40, 6, 1], ['bf16', 20, 70, 72, 3, 1], ['f16', 33, 40, 30, 4, 4],
    ] as const) {
      for (const form of m <= 8 ? (['vector', 'matrix'] as const) : (['matrix'] as const)) {
        const e = matmul(dev, dtype, m, n, k, batch, wBatch, form);
        if (!(e <= dotTolerance(dtype, k))) over.push(`${dtype} ${form} [${batch}/${wBatch} x ${m}, ${n}, ${k}]: ${e}`);
      }
    }
    expect(over).toEqual([]);
  });

  test('the form by default: vector for m <= 8, matrix past it', () => {
    const dev = device();
    const w = dev.alloc('bf16', [4 * 16]);
    const plan = (m: number): string =>
      planDenseMatmul({ x: dev.alloc('bf16', [m * 16]), weight: w, output: dev.alloc('bf16', [m * 4]), m, n: 4, k: 16 }, dev.limits, dev).dispatches[0]!.kernel;
    expect([plan(1), plan(8), plan(9)]).toEqual(['dense_mv_bf16', 'dense_mv_bf16', 'dense_mm_bf16']);
  });

  test('larger sizes (the CUDA kernels\' 32-row vector blocks from n = 8192, 128 x 256 tiles from m, n = 1024), k not a multiple of 8', () => {
    const dev = device();
    const over: string[] = [];
    for (const [dtype, m, n, k, form] of [
      ['bf16', 3, 8192, 64, 'vector'], ['f16', 8, 8200, 40, 'vector'], ['bf16', 1024, 1024, 96, 'matrix'],
      ['f16', 1030, 1100, 100, 'matrix'], ['bf16', 1024, 1030, 36, 'matrix'], ['f32', 200, 300, 129, 'matrix'],
    ] as const) {
      const e = matmul(dev, dtype, m, n, k, 1, 1, form);
      if (!(e <= dotTolerance(dtype, k))) over.push(`${dtype} ${form} [${m}, ${n}, ${k}]: ${e}`);
    }
    expect(over).toEqual([]);
  });

  // The Hopper launches dispatched directly, every tile width the device has
  // room for (on Hopper: wgmma; elsewhere the mma.sync tiles of the same
  // shape): k past the stages and with tails, the register paths (k % 8 !=
  // 0, f32 x, padded rows), batches, partial tiles.
  test.skipIf(backend !== 'cuda')('CUDA Hopper launches: each tile width, every copy path, dense_mm, dense_gemm_f16 and hf2q_dense_mm', () => {
    const dev = device();
    dev.kernels.register(DENSE_FAMILY, DENSE_SOURCES, DENSE_KERNELS);
    const over: string[] = [];
    const widths = DENSE_MM_HOPPER_WIDTHS.filter((bn) => denseMmHopperBytes(bn) <= dev.limits.maxThreadgroupMemory);
    expect(widths.length).toBeGreaterThan(0);
    const go = (kernel: string, bn: number, m: number, n: number, batch: number, buffers: Record<number, Buffer>, bytes: Record<number, Uint8Array>) =>
      run(dev, (e) => e.dispatch(dev.kernels.pipeline(kernel), { buffers, bytes, threadgroupMemory: { 0: denseMmHopperBytes(bn) } },
        [Math.ceil(n / bn) * Math.ceil(m / 128) * batch, 1, 1], [256, 1, 1]));
    for (const bn of widths) {
      for (const [dt, m, n, k, batch, wBatch] of [['bf16', 200, 300, 520, 1, 1], ['f16', 130, 70, 100, 2, 1], ['bf16', 9, 7, 36, 1, 1]] as const) {
        const x = viewOf(dev, dt, [batch, m, k], m + n + k + bn);
        const w = viewOf(dev, dt, [wBatch, n, k], m * n + k + bn);
        const y = dev.alloc(dt, [batch, m, n]);
        y.fill(Number.NaN);
        go(`dense_mm_${dt}`, bn, m, n, batch, { 0: x.buf, 1: w.buf, 2: y }, { 3: packDenseParams({ m, n, k, batch, weightBatch: wBatch }) });
        const err = dotErr(y.readNumbers(), denseRef(x.values, w.values, m, n, k, batch, wBatch), denseAbsRef(x.values, w.values, m, n, k, batch, wBatch));
        if (!(err <= dotTolerance(dt, k))) over.push(`dense_mm_${dt} [128 x ${bn}] [${batch}/${wBatch} x ${m}, ${n}, ${k}]: ${err}`);
      }
      {
        const [m, n, k] = [33, 200, 72];
        const a = viewOf(dev, 'f16', [m, k], bn + 1);
        const b = viewOf(dev, 'f16', [n, k], bn + 2);
        const c = dev.alloc('f16', [m, n]);
        c.fill(Number.NaN);
        go('dense_gemm_f16', bn, m, n, 1, { 0: a.buf, 1: b.buf, 2: c }, { 3: packDenseGemmParams({ m, n, k }) });
        const err = dotErr(c.readNumbers(), denseRef(a.values, b.values, m, n, k), denseAbsRef(a.values, b.values, m, n, k));
        if (!(err <= dotTolerance('f16', k))) over.push(`dense_gemm_f16 [128 x ${bn}]: ${err}`);
      }
      for (const [w, m, n, k, b0, b1] of [['bf16', 35, 67, 264, 2, 4], ['f16', 140, 30, 40, 1, 1]] as const) {
        const src0 = viewOf(dev, w, [b0, n, k], bn + k);
        const src1 = viewOf(dev, 'f32', [b1, m, k], bn + m);
        const dst = dev.alloc('f32', [b1, m, n]);
        dst.fill(Number.NaN);
        go(`hf2q_dense_mm_${w}_f32_tensor`, bn, m, n, b1, { 1: src0.buf, 2: src1.buf, 3: dst },
          { 0: packDenseMmTensorParams({ m, n, k, src0Batch: b0, src1Batch: b1, weightBytes: 2 }) });
        const x = roundedTo(w, src1.values);
        const err = dotErr(dst.readNumbers(), denseRef(x, src0.values, m, n, k, b1, b0), denseAbsRef(x, src0.values, m, n, k, b1, b0));
        if (!(err <= dotTolerance('f32', k))) over.push(`hf2q_dense_mm_${w}_f32_tensor [128 x ${bn}] [${b1}/${b0} x ${m}, ${n}, ${k}]: ${err}`);
      }
    }
    expect(over).toEqual([]);
  });

  test('dense_gemm_f16 (m = 1: dense_matvec_f16) and dense_matvec (f32 input, f32 / f16 / bf16 weights)', () => {
    const dev = device();
    const over: string[] = [];
    for (const [m, n, k] of [[1, 1, 1], [1, 9, 130], [1, 33, 64], [2, 7, 33], [40, 70, 100]] as const) {
      const a = viewOf(dev, 'f16', [m, k], m + n + k);
      const b = viewOf(dev, 'f16', [n, k], m * n + k);
      const c = dev.alloc('f16', [m, n]);
      c.fill(Number.NaN);
      run(dev, (e) => denseGemmF16(e, { a: a.buf, b: b.buf, output: c, m, n, k }));
      const err = dotErr(c.readNumbers(), denseRef(a.values, b.values, m, n, k), denseAbsRef(a.values, b.values, m, n, k));
      if (!(err <= dotTolerance('f16', k))) over.push(`dense_gemm_f16 [${m}, ${n}, ${k}]: ${err}`);
    }
    for (const [at, bt] of [['f32', 'f32'], ['f32', 'f16'], ['f32', 'bf16'], ['f16', 'f16']] as const) {
      for (const [n, k] of [[1, 1], [7, 33], [9, 130], [20, 256], [300, 1000]] as const) {
        const a = viewOf(dev, at, [1, k], n + k);
        const b = viewOf(dev, bt, [n, k], n * k);
        const c = dev.alloc(at, [1, n]);
        c.fill(Number.NaN);
        run(dev, (e) => denseMatvec(e, { a: a.buf, b: b.buf, output: c, m: 1, n, k }));
        const err = dotErr(c.readNumbers(), denseRef(a.values, b.values, 1, n, k), denseAbsRef(a.values, b.values, 1, n, k));
        if (!(err <= dotTolerance(at, k))) over.push(`dense_matvec ${at} x ${bt} [${n}, ${k}]: ${err}`);
      }
    }
    expect(over).toEqual([]);
  });

  test('dense_gemv_bf16_f32: batches with a broadcast weight, several rows, 1 to 4 simdgroups, routers\' shapes, many rows', () => {
    const dev = device();
    const over: string[] = [];
    // On an H200 every shape but the last takes the CUDA entry of a block a row (denseGemvBf16CudaLaunch): Gemma 4's
    // router [128, 2816], Qwen3.6's [257, 2048]; [1100, 64] the 8-row blocks.
    for (const [m, n, k, b0, b1] of [[1, 1, 1, 1, 1], [1, 7, 33, 1, 1], [3, 9, 130, 2, 4], [2, 20, 512, 1, 1], [1, 33, 100, 3, 3],
      [1, 128, 2816, 1, 1], [1, 257, 2048, 1, 1], [1, 1100, 64, 1, 1]] as const) {
      const src0 = viewOf(dev, 'bf16', [b0, n, k], n + k);
      const src1 = viewOf(dev, 'f32', [b1, m, k], m + k);
      const dst = dev.alloc('f32', [b1, m, n]);
      dst.fill(Number.NaN);
      run(dev, (e) => denseGemvBf16F32(e, { src0: src0.buf, src1: src1.buf, dst, m, n, k, src0Batch: b0, src1Batch: b1 }));
      const err = dotErr(dst.readNumbers(), denseRef(src1.values, src0.values, m, n, k, b1, b0), denseAbsRef(src1.values, src0.values, m, n, k, b1, b0));
      if (!(err <= dotTolerance('f32', k))) over.push(`[${b1}/${b0} x ${m}, ${n}, ${k}]: ${err}`);
    }
    expect(over).toEqual([]);
  });

  test('dense_matmul_tensor: bf16, f16 and f32 weights, partial tiles, broadcast; the input rounded to the weight\'s type', () => {
    const dev = device();
    const over: string[] = [];
    for (const w of ['bf16', 'f16', 'f32'] as const) {
      for (const [m, n, k, b0, b1] of [[1, 7, 33, 1, 1], [32, 64, 32, 1, 1], [35, 67, 64, 2, 8], [70, 130, 100, 1, 2]] as const) {
        const src0 = viewOf(dev, w, [b0, n, k], n + k);
        const src1 = viewOf(dev, 'f32', [b1, m, k], m * k);
        const dst = dev.alloc('f32', [b1, m, n]);
        dst.fill(Number.NaN);
        run(dev, (e) => denseMatmulTensor(e, { src0: src0.buf, src1: src1.buf, dst, m, n, k, src0Batch: b0, src1Batch: b1 }));
        const x = roundedTo(w, src1.values);
        const err = dotErr(dst.readNumbers(), denseRef(x, src0.values, m, n, k, b1, b0), denseAbsRef(x, src0.values, m, n, k, b1, b0));
        if (!(err <= dotTolerance('f32', k))) over.push(`${w} [${b1}/${b0} x ${m}, ${n}, ${k}]: ${err}`);
      }
    }
    expect(over).toEqual([]);
  });

  test('byte strides of the params honoured: padded weight and input rows (16-byte aligned and not), a gap between weight batches', () => {
    const dev = device();
    dev.kernels.register(DENSE_FAMILY, DENSE_SOURCES, DENSE_KERNELS);
    const [m, n, k, b0, b1] = [5, 70, 40, 2, 4];
    const cuda = dev.backend === 'cuda';
    const over: string[] = [];
    // Weight rows wRow elements apart, batches 80 rows apart; input rows xRow floats apart.
    for (const [wRow, xRow] of [[48, 44], [45, 41]] as const) {
      const wBatchRows = 80;
      const r = rng(wRow + xRow);
      const w16 = roundedTo('bf16', randomArray(r, b0 * wBatchRows * wRow, -1, 1));
      const xs = roundedTo('f32', randomArray(r, b1 * m * xRow, -1, 1));
      const src0 = dev.upload('bf16', [w16.length], w16);
      const src1 = dev.upload('f32', [xs.length], xs);
      const wDense = new Float64Array(b0 * n * k);
      const xDense = new Float64Array(b1 * m * k);
      for (let b = 0; b < b0; b++) for (let j = 0; j < n; j++) for (let q = 0; q < k; q++) wDense[(b * n + j) * k + q] = w16[(b * wBatchRows + j) * wRow + q]!;
      for (let b = 0; b < b1; b++) for (let i = 0; i < m; i++) for (let q = 0; q < k; q++) xDense[(b * m + i) * k + q] = xs[(b * m + i) * xRow + q]!;
      const [nb01, nb02, nb11, nb12] = [wRow * 2, wBatchRows * wRow * 2, xRow * 4, m * xRow * 4];

      const gemv = new DataView(packDenseGemvBf16Params({ m, n, k, src0Batch: b0, src1Batch: b1 }).buffer);
      for (const [at, v] of [[24, nb01], [32, nb02], [72, nb11], [80, nb12]] as const) gemv.setBigUint64(at, BigInt(v), true);
      const mm = new DataView(packDenseMmTensorParams({ m, n, k, src0Batch: b0, src1Batch: b1, weightBytes: 2 }).buffer);
      for (const [at, v] of [[8, nb01], [16, nb02], [48, nb11], [56, nb12]] as const) mm.setBigUint64(at, BigInt(v), true);
      const xr = roundedTo('bf16', xDense);
      const mmLaunch = denseMmCudaLaunch(m, n, b1, 'bf16', dev.limits);
      for (const [kernel, params, grid, threads, shared, x] of [
        ['hf2q_dense_gemv_bf16_f32_4', gemv, cuda ? [Math.ceil(n / DENSE_MATVEC_CUDA_ROWS) * m * b1, 1, 1] : [35, m, b1], cuda ? [256, 1, 1] : [32, 1, 1], 256, xDense],
        ['hf2q_dense_mm_bf16_f32_tensor', mm, cuda ? mmLaunch.grid : [1, 2, b1], cuda ? mmLaunch.threads : [128, 1, 1],
          cuda ? mmLaunch.threadgroupMemory![0]! : 8192, xr],
      ] as const) {
        const dst = dev.alloc('f32', [b1 * m * n]);
        dst.fill(Number.NaN);
        run(dev, (e) => e.dispatch(dev.kernels.pipeline(kernel), {
          buffers: { 1: src0, 2: src1, 3: dst }, bytes: { 0: new Uint8Array(params.buffer) }, threadgroupMemory: { 0: shared },
        }, grid as [number, number, number], threads as [number, number, number]));
        const err = dotErr(dst.readNumbers(), denseRef(x, wDense, m, n, k, b1, b0), denseAbsRef(x, wDense, m, n, k, b1, b0));
        if (!(err <= dotTolerance('f32', k))) over.push(`${kernel} rows ${wRow} / ${xRow}: ${err}`);
        dst.release();
      }
      src0.release();
      src1.release();
    }
    expect(over).toEqual([]);
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('dense', [
  ...[
    { dtype: 'bf16', m: 3, n: 10, k: 40, batch: 2, weightBatch: 1 },
    { dtype: 'f16', m: 9, n: 5, k: 16, batch: 2, weightBatch: 2 },
  ].map((p): Case => ({
    fn: 'denseMatmul', op: 'dense_matmul',
    keys: {
      x: buf(['f32', 'f16', 'bf16']), weight: buf(['f32', 'f16', 'bf16']), output: out(['f32', 'f16', 'bf16']), m: int, n: int, k: int,
      batch: { kind: 'int?' }, weightBatch: { kind: 'int?' }, form: { kind: 'enum', values: ['vector', 'matrix', undefined] },
    },
    make: (d) => ({
      x: a(d, p.dtype as DType, p.batch * p.m * p.k), weight: a(d, p.dtype as DType, p.weightBatch * p.n * p.k),
      output: a(d, p.dtype as DType, p.batch * p.m * p.n), m: p.m, n: p.n, k: p.k, batch: p.batch, weightBatch: p.weightBatch,
    }),
  })),
  // mlx-native's rule: each buffer holds at least its elements (freeCount).
  ...[1, 3].map((m): Case => ({
    fn: 'denseGemmF16', op: 'dense_gemm_f16',
    keys: {
      a: buf(['f16'], { freeCount: true }), b: buf(['f16'], { freeCount: true }), output: out(['f16'], { freeCount: true }), m: int, n: int, k: int,
    },
    make: (d) => ({ a: a(d, 'f16', m * 24), b: a(d, 'f16', 5 * 24), output: a(d, 'f16', m * 5), m, n: 5, k: 24 }),
  })),
  {
    fn: 'denseMatvec', op: 'dense_matvec',
    keys: {
      a: buf(['f32', 'f16'], { freeCount: true }), b: buf(['f32', 'f16', 'bf16'], { freeCount: true }),
      output: out(['f32', 'f16'], { freeCount: true }), m: int, n: int, k: int,
    },
    make: (d) => ({ a: a(d, 'f32', 20), b: a(d, 'bf16', 120), output: a(d, 'f32', 6), m: 1, n: 6, k: 20 }),
  },
  {
    fn: 'denseGemvBf16F32', op: 'dense_gemv_bf16_f32',
    keys: {
      src0: buf(BF, { freeCount: true }), src1: buf(F, { freeCount: true }), dst: out(F, { freeCount: true }),
      m: int, n: int, k: int, src0Batch: int, src1Batch: int,
    },
    make: (d) => ({
      src0: a(d, 'bf16', 2 * 6 * 40), src1: a(d, 'f32', 4 * 2 * 40), dst: a(d, 'f32', 4 * 2 * 6), m: 2, n: 6, k: 40, src0Batch: 2, src1Batch: 4,
    }),
  },
  {
    fn: 'denseMatmulTensor', op: 'dense_matmul_tensor',
    keys: {
      src0: buf(['f32', 'f16', 'bf16'], { freeCount: true }), src1: buf(F, { freeCount: true }), dst: out(F, { freeCount: true }),
      m: int, n: int, k: int, src0Batch: int, src1Batch: int,
    },
    make: (d) => ({
      src0: a(d, 'f16', 6 * 32), src1: a(d, 'f32', 2 * 3 * 32), dst: a(d, 'f32', 2 * 3 * 6), m: 3, n: 6, k: 32, src0Batch: 1, src1Batch: 2,
    }),
  },
]);
