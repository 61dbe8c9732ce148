// dense: matrix products with the weight stored [out, in] as checkpoints
// store it, y = x W^T, products summed in f32. Kernel names, bindings, param
// structs and the crate's validation rules are mlx-native's for its
// dense_gemm (dense_gemm_f16, dense_matvec_*), dense_gemv_bf16
// (hf2q_dense_gemv_bf16_f32_4) and dense_mm_{bf16,f16,f32_f32}
// (hf2q_dense_mm_*_f32_tensor) modules; dense_mm_<t> and dense_mv_<t>, one
// dtype for x, w and y (f32, f16 or bf16), batched, are added (the crate has
// bf16 weights only with f32 activations). Kernels: shaders/dense.metal and
// shaders/cuda/dense.cu.

import src from '../../shaders/dense.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/dense.cu' with { type: 'text' };
import header from '../../shaders/dense.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import { dtypeSize, type DType } from '../dtype.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBuffer, checkBufferRules, checkDtype, checkedProduct, checkMultiple, checkNoAliasing, checkPositive, I16_MAX, I32_MAX, invalid, like, ruleBindings, U32_MAX, type BufferRule,
} from '../validate.ts';
import { familyPlans, record, type Launch, type OpPlan, type PlannedDispatch, type CudaLaunch } from '../plan.ts';
import { ceilDiv, CUDA_GRID_MAX } from '../launch.ts';

export const DENSE_FAMILY = 'dense';
/** The family's kernel sources by backend, as registered by every dispatch. */
/**
 * The CUDA program's parts 1 to 5 (FamilySources.cudaParts): each tensor-tile
 * entry of 16-bit weights, about a megabyte of machine code and 12 to 27 s of
 * NVRTC 13.0 on one thread, compiles as a program of its own (the whole
 * family took 85 s); the other entries are part 0 (under 2 s).
 */
export const DENSE_CUDA_PARTS: readonly (readonly string[])[] = [
  ['dense_mm_bf16'], ['dense_mm_f16'], ['dense_gemm_f16'], ['hf2q_dense_mm_bf16_f32_tensor'], ['hf2q_dense_mm_f16_f32_tensor'],
];
export const DENSE_SOURCES = familySources(DENSE_FAMILY, { header, metal: src, cuda: cudaSrc, cudaParts: DENSE_CUDA_PARTS });
export const DENSE_KERNELS = [
  'dense_gemm_f16', 'dense_matvec_f16', 'dense_matvec_f16w_f32io', 'dense_matvec_bf16w_f32io', 'dense_matvec_f32',
  'hf2q_dense_gemv_bf16_f32_4',
  'hf2q_dense_mm_bf16_f32_tensor', 'hf2q_dense_mm_f16_f32_tensor', 'hf2q_dense_mm_f32_f32_tensor',
  'dense_mm_f32', 'dense_mm_f16', 'dense_mm_bf16', 'dense_mv_f32', 'dense_mv_f16', 'dense_mv_bf16',
] as const;
const planOf = familyPlans({ family: DENSE_FAMILY, sources: DENSE_SOURCES, kernels: DENSE_KERNELS });

/** struct DenseGemmParams (buffer 3 of dense_gemm_f16 and dense_matvec_*). */
export const DENSE_GEMM_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'DenseGemmParams');
/** struct DenseGemvBf16Params (buffer 0 of hf2q_dense_gemv_bf16_f32_4; 112 bytes). */
export const DENSE_GEMV_BF16_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'DenseGemvBf16Params');
/** struct DenseMmTensorParams (buffer 0 of hf2q_dense_mm_*_f32_tensor; 88 bytes). */
export const DENSE_MM_TENSOR_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'DenseMmTensorParams');
/** struct DenseParams (buffer 3 of dense_mm_<t> and dense_mv_<t>). */
export const DENSE_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'DenseParams');

/** Rows of x the vector form (dense_mv_<t>) takes at most: every weight row is read once for all of them. */
export const DENSE_MV_MAX_ROWS = 8;
/** mlx-native's rule for the hf2q_dense_mm kernels: at least one 32-wide k slice. */
export const DENSE_MM_TENSOR_MIN_K = 32;
/** threadgroup(0) of hf2q_dense_gemv_bf16_f32_4: 2 rows x 32 floats (mlx-native's 256 bytes). */
export const DENSE_GEMV_BF16_SHARED_BYTES = 256;
/** threadgroup(0) of hf2q_dense_mm_*_f32_tensor by weight dtype (mlx-native's sizes). */
export const DENSE_MM_TENSOR_SHARED_BYTES: Readonly<Record<'f32' | 'f16' | 'bf16', number>> = { bf16: 8192, f16: 8192, f32: 16384 };



// ---- param packers ----

export function packDenseGemmParams(p: { m: number; n: number; k: number }): Uint8Array {
  return packFields(DENSE_GEMM_PARAMS_LAYOUT, { M: p.m, N: p.n, K: p.k });
}

/** The batched crate kernels' sizes: x [src1Batch, m, k], weight [src0Batch, n, k], y [src1Batch, m, n], contiguous. */
export interface DenseBatchSizes {
  m: number;
  n: number;
  k: number;
  src0Batch: number;
  src1Batch: number;
}

/** The bytes mlx-native's dense_gemv_bf16_f32 writes for contiguous operands (bf16 weight, f32 input). */
export function packDenseGemvBf16Params(p: DenseBatchSizes): Uint8Array {
  const nb01 = p.k * 2;
  const nb11 = p.k * 4;
  return packFields(DENSE_GEMV_BF16_PARAMS_LAYOUT, {
    ne00: p.k, ne01: p.n, ne02: p.src0Batch, nb00: 2, nb01, nb02: p.n * nb01, nb03: 0,
    ne10: p.k, ne11: p.m, ne12: p.src1Batch, nb10: 4, nb11, nb12: p.m * nb11, nb13: 0,
    ne0: p.n, ne1: p.m, nr0: 2, r2: p.src1Batch / p.src0Batch, r3: 1,
  });
}

/** The bytes mlx-native's dense_matmul_<w>_f32_tensor writes for contiguous operands (weight of weightBytes per element, f32 input). */
export function packDenseMmTensorParams(p: DenseBatchSizes & { weightBytes: number }): Uint8Array {
  const nb01 = p.k * p.weightBytes;
  const nb11 = p.k * 4;
  return packFields(DENSE_MM_TENSOR_PARAMS_LAYOUT, {
    ne00: p.k, ne02: p.src0Batch, nb01, nb02: p.n * nb01, nb03: 0, ne12: p.src1Batch,
    nb10: 4, nb11, nb12: p.m * nb11, nb13: 0, ne0: p.n, ne1: p.m, r2: p.src1Batch / p.src0Batch, r3: 1,
  });
}

export function packDenseParams(p: { m: number; n: number; k: number; batch: number; weightBatch: number }): Uint8Array {
  return packFields(DENSE_PARAMS_LAYOUT, { m: p.m, n: p.n, k: p.k, batch: p.batch, w_batch: p.weightBatch });
}

// ---- CUDA launches (shaders/cuda/dense.cu; one-dimensional grids, the kernels decode blockIdx.x) ----

/**
 * Weight rows a block of the CUDA one-token vector kernels (dense_matvec_*,
 * hf2q_dense_gemv_bf16_f32_4 for each row of src1, dense_mv_f32 at m = 1):
 * 8 warps, a row each (dense.cu LANE_ROWS). Two rows a warp in turn, 16 a
 * block, read the weight 10-30 % slower at Qwen3.6's and Gemma 4's
 * projections (bench/notes/gemv-dense-2026-11-28.md).
 */
export const DENSE_MATVEC_CUDA_ROWS = 8;

/**
 * Rows of the weight one block of dense_mv_<t> takes on CUDA (the kernel's
 * mv_rows infers it from the grid): 32 from 8192 rows on, else 16 (the
 * tensor-core tiles of 16 rows of f16 and bf16, at any m), and for f32
 * DENSE_MATVEC_CUDA_ROWS at one token (a warp a row) and below 1024 rows
 * (a small weight spreads over twice the SMs).
 */
export function denseMvCudaRows(n: number, dtype: DenseDType, m: number): number {
  if (dtype === 'f32' && (m === 1 || n < 1024)) return DENSE_MATVEC_CUDA_ROWS;
  return n >= 8192 ? 32 : 16;
}

/** dense_mv_<t> on CUDA: 256 threads a block over denseMvCudaRows rows of one batch. */
export function denseMvCudaLaunch(n: number, batch: number, dtype: DenseDType, m: number): Launch {
  return { grid: [ceilDiv(n, denseMvCudaRows(n, dtype, m)) * batch, 1, 1], threads: [256, 1, 1] };
}

/**
 * The two mma.sync tile shapes of the CUDA tensor-core matrix kernels
 * (16-bit weights) on GPUs other than Hopper, told apart by the block size:
 * 128 x 256 outputs by 8 warps of 64 x 64 where m and n are both at least
 * 1024 (compute-bound sizes), else 64 x 128 by 4 warps of 32 x 64 (more
 * blocks for skinny or small products). k is staged 32 at a time through 4
 * cp.async stages, rows padded by 16 bytes.
 */
export function denseMmCudaTile(m: number, n: number): { bm: number; bn: number; threads: number; sharedBytes: number } {
  const big = m >= 1024 && n >= 1024;
  const [bm, bn, threads] = big ? [128, 256, 256] : [64, 128, 128];
  return { bm, bn, threads, sharedBytes: 4 * (bm + bn) * (32 + 8) * 2 };
}

/**
 * The widths of the Hopper tiles: 128 x bn outputs, two warpgroups of 64 x bn
 * on wgmma; multiples of 32, as the kernel's copies take them (a 176-wide
 * tile, tried, ran a round 20 % slower than 192 on an H100:
 * bench/notes/dense-widths-2026-11-27.md).
 */
export const DENSE_MM_HOPPER_WIDTHS = [256, 224, 192, 160, 128] as const;

/**
 * A Hopper tile's expected rate against full MMA rate: the shared-memory
 * bytes it moves per MMA clock against the SM's 128 a clock. A k16 step of
 * a 128 x bn tile takes bn clocks of MMA (4096 flops a clock) and moves
 * 8192 + 96 bn bytes (each warpgroup's wgmma reads its 64 rows of x and the
 * bn of the weight, the copies write 128 + bn rows): 128 bytes a clock at
 * 256 (1), 139 at 192 (0.92), 160 at 128 (0.8).
 */
export function denseMmHopperRate(bn: number): number {
  return Math.min(1, 128 / (96 + 8192 / bn));
}

/**
 * Dynamic shared memory of a Hopper tile's launch (shaders/cuda/dense.cu,
 * WG_SMEM): 4 stages (bn = 256) or 5 of 128 + bn swizzled rows of 128
 * bytes, and 1024 bytes to align them. The kernel reads the tile width from
 * this size (one size a width: 197632, 226304, 205824, 185344 and 164864
 * bytes for 256, 224, 192, 160 and 128).
 */
export function denseMmHopperBytes(bn: number): number {
  return (bn === 256 ? 4 : 5) * (128 + bn) * 128 + 1024;
}

/** Whether the CUDA matrix kernels take the Hopper launches: compute capability 9.0 (sm_90a's wgmma) and room for every tile's stages. */
export function denseMmUsesWgmma(limits: Pick<DeviceLimits, 'computeCapability' | 'maxThreadgroupMemory'>): boolean {
  return limits.computeCapability === 90 && DENSE_MM_HOPPER_WIDTHS.every((bn) => denseMmHopperBytes(bn) <= limits.maxThreadgroupMemory);
}

/**
 * The Hopper tile width for a product: for each width, tiles = ceil(m / 128)
 * ceil(n / bn) batch and rounds = ceil(tiles / SMs); the least rounds x bn /
 * rate (denseMmHopperRate) wins (ties to the wider), so 512 tokens take the
 * width whose tiles fill the SMs' last round and large products the widest.
 * Unknown SMs (0): 256.
 */
export function denseMmHopperWidth(m: number, n: number, batch: number, multiprocessors: number): number {
  if (!(multiprocessors > 0)) return 256;
  let best = 256;
  let bestCost = Infinity;
  for (const bn of DENSE_MM_HOPPER_WIDTHS) {
    const rounds = Math.ceil((ceilDiv(m, 128) * ceilDiv(n, bn) * batch) / multiprocessors);
    const cost = (rounds * bn) / denseMmHopperRate(bn);
    if (cost < bestCost * (1 - 1e-9)) [best, bestCost] = [bn, cost];
  }
  return best;
}

/**
 * A CUDA matrix kernel's launch: f32 weights on the 64 x 64 SIMT tile;
 * 16-bit weights on Hopper (denseMmUsesWgmma) 256 threads over 128 x bn
 * tiles (denseMmHopperWidth) with denseMmHopperBytes(bn) of shared memory,
 * elsewhere the mma.sync tiles of denseMmCudaTile.
 */
export function denseMmCudaLaunch(m: number, n: number, batch: number, weight: DType,
  limits: Pick<DeviceLimits, 'computeCapability' | 'maxThreadgroupMemory' | 'multiprocessors'>): Launch {
  if (weight === 'f32') return { grid: [ceilDiv(n, 64) * ceilDiv(m, 64) * batch, 1, 1], threads: [256, 1, 1] };
  if (denseMmUsesWgmma(limits)) {
    const bn = denseMmHopperWidth(m, n, batch, limits.multiprocessors);
    return { grid: [ceilDiv(n, bn) * ceilDiv(m, 128) * batch, 1, 1], threads: [256, 1, 1], threadgroupMemory: { 0: denseMmHopperBytes(bn) } };
  }
  const t = denseMmCudaTile(m, n);
  return { grid: [ceilDiv(n, t.bn) * ceilDiv(m, t.bm) * batch, 1, 1], threads: [t.threads, 1, 1], threadgroupMemory: { 0: t.sharedBytes } };
}

/**
 * The CUDA grids are one-dimensional: refuses sizes whose largest candidate
 * launch (the vector kernels' blocks of DENSE_MATVEC_CUDA_ROWS rows, the
 * fewest rows any of them takes, mvRows of them per batch; the matrix
 * kernels' smallest, 64 x 64 tiles) would pass 2^31 - 1 blocks, naming m
 * (the per-batch count) or the batch argument.
 */
function checkCudaGrid(op: string, m: number, n: number, mvRows: number, batchArg: string | null, batch: number): void {
  const mm = ceilDiv(n, 64) * ceilDiv(m, 64);
  const mv = ceilDiv(n, DENSE_MATVEC_CUDA_ROWS);
  const per = Math.max(mv * mvRows, mm);
  if (per > CUDA_GRID_MAX) {
    const mMax = Math.min(Math.floor(CUDA_GRID_MAX / ceilDiv(n, 64)) * 64, mvRows === 1 ? Infinity : Math.floor(CUDA_GRID_MAX / mv));
    throw invalid(op, 'm', `at most ${mMax} for n = ${n} (the CUDA grid's 2^31 - 1 blocks)`, m);
  }
  if (batchArg !== null && batch * per > CUDA_GRID_MAX) {
    throw invalid(op, batchArg, `at most ${Math.floor(CUDA_GRID_MAX / per)} (the CUDA grid's 2^31 - 1 blocks over ${per} a batch)`, batch);
  }
}

// ---- dense_matmul (x, w and y of one dtype) ----

export type DenseDType = 'f32' | 'f16' | 'bf16';
const DENSE_DTYPES: readonly DenseDType[] = ['f32', 'f16', 'bf16'];

export interface DenseMatmulArgs {
  /** [batch, m, k]: f32, f16 or bf16 */
  x: Buffer;
  /** [weightBatch, n, k], x's dtype: rows [out, in] */
  weight: Buffer;
  /** [batch, m, n], x's dtype, output */
  output: Buffer;
  /** Rows of x (tokens) per batch. */
  m: number;
  /** Rows of the weight (outputs). */
  n: number;
  /** Columns of x and of the weight (inputs). */
  k: number;
  /** Batches of x and y; 1 when absent. */
  batch?: number;
  /** Batches of the weight, dividing batch (x batch b uses weight batch b / (batch / weightBatch)); 1 when absent. */
  weightBatch?: number;
  /** The vector form (m <= 8) or the matrix form; by default the vector form for m <= 8. */
  form?: 'vector' | 'matrix';
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateDenseMatmul(a: DenseMatmulArgs, device?: Device): void {
  const op = 'dense_matmul';
  checkPositive(op, 'm', a.m);
  checkPositive(op, 'n', a.n);
  checkPositive(op, 'k', a.k);
  const batch = a.batch ?? 1;
  const wBatch = a.weightBatch ?? 1;
  if (a.batch !== undefined) checkPositive(op, 'batch', a.batch);
  if (a.weightBatch !== undefined) checkPositive(op, 'weightBatch', a.weightBatch);
  for (const [arg, v] of [['m', a.m], ['n', a.n], ['k', a.k], ['batch', batch]] as const) checkAtMost(op, arg, v, U32_MAX, '2^32 - 1');
  checkMultiple(op, 'batch', batch, wBatch, 'weightBatch');
  checkMatmulForm(op, a.form, a.m, DENSE_MV_MAX_ROWS);
  const nx = checkedProduct(op, 'batch * m * k', batch, a.m, a.k);
  const nw = checkedProduct(op, 'weightBatch * n * k', wBatch, a.n, a.k);
  const ny = checkedProduct(op, 'batch * m * n', batch, a.m, a.n);
  checkCudaGrid(op, a.m, a.n, 1, 'batch', batch);
  const rules: BufferRule[] = [['x', a.x, DENSE_DTYPES, nx], ['weight', a.weight, like('x'), nw], ['output', a.output, like('x'), ny]];
  checkBufferRules(op, rules, device);
  checkNoAliasing(op, ruleBindings(rules), ['output'], 'every output reads a row of x and of the weight that others read too');
}

/** The two forms of a matrix product: the vector form reads each weight row once for every row of x (a few rows), the matrix form tiles. */
export type MatmulForm = 'vector' | 'matrix';

/** A product's `form` argument: 'vector' (for at most maxRows rows of x; any where maxRows is absent), 'matrix' or absent. */
export function checkMatmulForm(op: string, form: unknown, m: number, maxRows?: number): void {
  if (form !== undefined && form !== 'vector' && form !== 'matrix') throw invalid(op, 'form', "'vector', 'matrix' or absent", form);
  if (form === 'vector' && maxRows !== undefined) checkAtMost(op, 'm', m, maxRows, `${maxRows} (the vector form)`);
}

/**
 * The Metal launch of a product's form (dense and affine): the vector form
 * (ceil(n / 8), 1, batch) threadgroups of (32, 2, 1), 4 weight rows a
 * simdgroup; the matrix form (ceil(n / 64), ceil(m / 32), batch) of 128
 * threads, a 32 x 64 tile each.
 */
export function matmulMetalLaunch(form: MatmulForm, m: number, n: number, batch = 1): Pick<PlannedDispatch, 'grid' | 'threads'> {
  return form === 'vector'
    ? { grid: [ceilDiv(n, 8), 1, batch], threads: [32, 2, 1] }
    : { grid: [ceilDiv(n, 64), ceilDiv(m, 32), batch], threads: [128, 1, 1] };
}

/** The form an argument set runs: the one asked for, else the vector form for m <= vectorRows. */
export function matmulForm(a: { m: number; form?: MatmulForm }, vectorRows: number): MatmulForm {
  return a.form ?? (a.m <= vectorRows ? 'vector' : 'matrix');
}

/** The form an argument set runs: the vector form for m <= DENSE_MV_MAX_ROWS unless the matrix form is asked for. */
export function denseMatmulForm(a: Pick<DenseMatmulArgs, 'm' | 'form'>): MatmulForm {
  return matmulForm(a, DENSE_MV_MAX_ROWS);
}

/**
 * dense_matmul: y[b, i, j] = sum_k x[b, i, k] * w[b / r, j, k], r = batch /
 * weightBatch; products of the stored values summed in f32, y rounded once
 * to its dtype. Not in mlx-native, in the style of its batched dense kernels.
 *
 * Layouts: x [batch, m, k], weight [weightBatch, n, k] (rows [out, in], as
 * checkpoints store them; a view inside a larger buffer is a weight like any
 * other), output [batch, m, n]; one dtype, f32, f16 or bf16; exact element
 * counts; the output overlaps neither input.
 * Kernels: dense_mv_<dtype> (the vector form, m <= 8: each weight row read
 * once for every row of x) and dense_mm_<dtype> (the matrix form).
 * Bindings: 0 x, 1 weight, 2 output, 3 DenseParams (m, n, k, batch, w_batch).
 * Grid (Metal): dense_mv (ceil(n / 8), 1, batch) threadgroups of (32, 2, 1);
 * dense_mm (ceil(n / 64), ceil(m / 32), batch) of 128 threads, a 32 x 64 tile
 * each. CUDA: dense_mv 256 threads a block over 8 (f32 at one token: a warp a
 * row), 16 or 32 weight rows (denseMvCudaLaunch; tensor cores for f16 and
 * bf16 where k is a multiple of 8), dense_mm the tensor-core tiles of denseMmCudaLaunch (wgmma on Hopper,
 * mma.sync elsewhere) or a 64 x 64 SIMT tile for f32.
 */
export function denseMatmul(enc: Encoder, args: DenseMatmulArgs): void {
  record(enc, planDenseMatmul(args, enc.device.limits, enc.device));
}

/** denseMatmul's plan: validates, then one dispatch (see denseMatmul). */
export function planDenseMatmul(a: DenseMatmulArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateDenseMatmul(a, device);
  const dt = a.x.dtype as DenseDType;
  const batch = a.batch ?? 1;
  const params = packDenseParams({ m: a.m, n: a.n, k: a.k, batch, weightBatch: a.weightBatch ?? 1 });
  const form = denseMatmulForm(a);
  return planOf({
    kernel: form === 'vector' ? `dense_mv_${dt}` : `dense_mm_${dt}`,
    buffers: [a.x, a.weight, a.output],
    bytes: [, , , params],
    ...matmulMetalLaunch(form, a.m, a.n, batch),
    cuda: form === 'vector' ? denseMvCudaLaunch(a.n, batch, dt, a.m) : denseMmCudaLaunch(a.m, a.n, batch, dt, limits),
  });
}

// ---- mlx-native's dense_gemm module ----

/** A [m, k], B [n, k], C [m, n] (mlx-native's names), with at least those element counts. */
export interface DenseGemmArgs {
  a: Buffer;
  b: Buffer;
  output: Buffer;
  m: number;
  n: number;
  k: number;
}

/** The crate's rules (m, n, k > 0; each buffer at least its size), the u32 fields' bounds, dtypes, no aliasing. */
function validateGemmSizes(op: string, a: DenseGemmArgs, dtypes: { a: DType | readonly DType[]; b: DType | readonly DType[]; output: DType },
  device?: Device): void {
  checkPositive(op, 'm', a.m);
  checkPositive(op, 'n', a.n);
  checkPositive(op, 'k', a.k);
  for (const [arg, v] of [['m', a.m], ['n', a.n], ['k', a.k]] as const) checkAtMost(op, arg, v, U32_MAX, '2^32 - 1');
  const na = checkedProduct(op, 'm * k', a.m, a.k);
  const nb = checkedProduct(op, 'n * k', a.n, a.k);
  const nc = checkedProduct(op, 'm * n', a.m, a.n);
  checkCudaGrid(op, a.m, a.n, 1, null, 1);
  const rules: BufferRule[] = [['a', a.a, dtypes.a, na], ['b', a.b, dtypes.b, nb], ['output', a.output, dtypes.output, nc]];
  checkBufferRules(op, rules, device, true);
  checkNoAliasing(op, ruleBindings(rules), ['output'], 'every output reads a row of a and of b that others read too');
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateDenseGemmF16(a: DenseGemmArgs, device?: Device): void {
  validateGemmSizes('dense_gemm_f16', a, { a: 'f16', b: 'f16', output: 'f16' }, device);
}

const gemmGrid = (m: number, n: number): [number, number, number] => [ceilDiv(n, 32), ceilDiv(m, 32), 1];
const matvecLaunch = (n: number): { grid: [number, number, number]; threads: [number, number, number]; cuda: Launch } => ({
  grid: [ceilDiv(n, 8), 1, 1],
  threads: [32, 2, 1],
  cuda: { grid: [ceilDiv(n, DENSE_MATVEC_CUDA_ROWS), 1, 1], threads: [256, 1, 1] },
});

/**
 * dense_gemm_f16 (mlx-native's dispatch_dense_gemm_f16): C = A B^T, A
 * [m, k], B [n, k], C [m, n], all f16; products summed in f32, C rounded to
 * f16. m == 1 runs dense_matvec_f16, else dense_gemm_f16.
 *
 * Layouts: as mlx-native, each buffer holding at least its elements (views
 * name a part of a larger buffer too). Bindings: 0 A, 1 B, 2 C, 3
 * DenseGemmParams (M, N, K).
 * Grid (Metal): dense_matvec_f16 (ceil(n / 8), 1, 1) threadgroups of
 * (32, 2, 1), 4 rows per simdgroup; dense_gemm_f16 (ceil(n / 32),
 * ceil(m / 32), 1) of 128 threads, 32 x 32 tiles. CUDA: dense_matvec 256
 * threads a block over 16 rows; dense_gemm_f16 the tensor-core tiles of
 * denseMmCudaLaunch.
 */
export function denseGemmF16(enc: Encoder, args: DenseGemmArgs): void {
  record(enc, planDenseGemmF16(args, enc.device.limits, enc.device));
}

/** denseGemmF16's plan: validates, then one dispatch (see denseGemmF16). */
export function planDenseGemmF16(a: DenseGemmArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateDenseGemmF16(a, device);
  const params = packDenseGemmParams(a);
  const common = { buffers: [a.a, a.b, a.output], bytes: [, , , params] };
  return planOf(a.m === 1
    ? { kernel: 'dense_matvec_f16', ...common, ...matvecLaunch(a.n) }
    : { kernel: 'dense_gemm_f16', ...common, grid: gemmGrid(a.m, a.n), threads: [128, 1, 1], cuda: denseMmCudaLaunch(a.m, a.n, 1, 'f16', limits) });
}

/** The matvec kernel of an (A, B) dtype pair that denseMatvec takes: C is A's dtype. */
export function denseMatvecKernel(a: DType, b: DType): string {
  if (a === 'f16') return 'dense_matvec_f16';
  return b === 'f32' ? 'dense_matvec_f32' : b === 'f16' ? 'dense_matvec_f16w_f32io' : 'dense_matvec_bf16w_f32io';
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateDenseMatvec(a: DenseGemmArgs, device?: Device): void {
  const op = 'dense_matvec';
  checkBuffer(op, 'a', a.a, device);
  checkDtype(op, 'a', a.a, ['f32', 'f16']);
  const at = a.a.dtype;
  validateGemmSizes(op, a, { a: at, b: at === 'f32' ? ['f32', 'f16', 'bf16'] : 'f16', output: at }, device);
  if (a.m !== 1) throw invalid(op, 'm', '1 (decode only)', a.m);
}

/**
 * dense_matvec (mlx-native's dispatch_dense_matvec_{f32, f16w_f32io,
 * bf16w_f32io}, and dense_matvec_f16): C = A B^T for one row, A [1, k], B
 * [n, k], C [1, n]; by dtype (A, B, C): (f32, f32, f32) dense_matvec_f32,
 * (f32, f16, f32) dense_matvec_f16w_f32io, (f32, bf16, f32)
 * dense_matvec_bf16w_f32io, (f16, f16, f16) dense_matvec_f16. Products of the
 * stored values summed in f32 (the f32 input is not rounded).
 *
 * Rules: mlx-native's (m must be 1), and as dense_gemm_f16's: each buffer at
 * least its elements. Bindings: 0 A, 1 B, 2 C, 3 DenseGemmParams.
 * Grid (Metal): (ceil(n / 8), 1, 1) threadgroups of (32, 2, 1), 4 rows per
 * simdgroup. CUDA: 256 threads a block over 16 rows, 16-byte loads where the
 * rows allow.
 */
export function denseMatvec(enc: Encoder, args: DenseGemmArgs): void {
  record(enc, planDenseMatvec(args, enc.device.limits, enc.device));
}

/** denseMatvec's plan: validates, then one dispatch (see denseMatvec). */
export function planDenseMatvec(a: DenseGemmArgs, _limits: DeviceLimits, device?: Device): OpPlan {
  validateDenseMatvec(a, device);
  return planOf({
    kernel: denseMatvecKernel(a.a.dtype, a.b.dtype),
    buffers: [a.a, a.b, a.output],
    bytes: [, , , packDenseGemmParams(a)],
    ...matvecLaunch(a.n),
  });
}

// ---- mlx-native's batched kernels (llama.cpp's argument blocks) ----

/** src0 [src0Batch, n, k] weight, src1 [src1Batch, m, k] f32 input, dst [src1Batch, m, n] f32 (mlx-native's names). */
export interface DenseBatchArgs extends DenseBatchSizes {
  src0: Buffer;
  src1: Buffer;
  dst: Buffer;
}

/**
 * The crate's rules (m, n, k and the batches > 0, src1Batch a multiple of
 * src0Batch, each buffer at least its size), the int fields' bounds (r2 a
 * short), dtypes, no aliasing.
 */
function validateBatch(op: string, a: DenseBatchArgs, weight: DType | readonly DType[], device?: Device): void {
  for (const arg of ['m', 'n', 'k', 'src0Batch', 'src1Batch'] as const) {
    checkPositive(op, arg, a[arg]);
    checkAtMost(op, arg, a[arg], I32_MAX, '2^31 - 1');
  }
  checkMultiple(op, 'src1Batch', a.src1Batch, a.src0Batch, 'src0Batch');
  checkAtMost(op, 'src1Batch / src0Batch', a.src1Batch / a.src0Batch, I16_MAX, '32767 (a short in the params)');
  const n0 = checkedProduct(op, 'src0Batch * n * k', a.src0Batch, a.n, a.k);
  const n1 = checkedProduct(op, 'src1Batch * m * k', a.src1Batch, a.m, a.k);
  const nd = checkedProduct(op, 'src1Batch * m * n', a.src1Batch, a.m, a.n);
  checkCudaGrid(op, a.m, a.n, a.m, 'src1Batch', a.src1Batch);
  const rules: BufferRule[] = [['src0', a.src0, weight, n0], ['src1', a.src1, 'f32', n1], ['dst', a.dst, 'f32', nd]];
  checkBufferRules(op, rules, device, true);
  checkNoAliasing(op, ruleBindings(rules), ['dst'], 'every output reads a row of src0 and of src1 that others read too');
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateDenseGemvBf16F32(a: DenseBatchArgs, device?: Device): void {
  validateBatch('dense_gemv_bf16_f32', a, 'bf16', device);
}

/** Simdgroups of hf2q_dense_gemv_bf16_f32_4 (mlx-native's host): min(4, ceil(k / 128)). */
export function denseGemvBf16Simdgroups(k: number): number {
  return Math.min(4, ceilDiv(k, 128));
}

/**
 * The CUDA launch of dense_gemv_bf16_f32: blocks of 256 threads over
 * DENSE_MATVEC_CUDA_ROWS rows of one row of src1 (a warp a row, each warp
 * walking its row and x whole); where those blocks would be fewer than the
 * SMs (a router's few rows: Gemma 4's [128, 2816] in 16 blocks), the CUDA
 * entry hf2q_dense_gemv_bf16_f32_4_rows, a block a row, the row's vectors
 * dealt over the block's threads (one memory round trip a thread, then the
 * block's sum; the same products summed in another order).
 */
export function denseGemvBf16CudaLaunch(m: number, n: number, src1Batch: number,
  limits: Pick<DeviceLimits, 'multiprocessors'>): CudaLaunch {
  const rowsOf = m * src1Batch;
  if (ceilDiv(n, DENSE_MATVEC_CUDA_ROWS) * rowsOf < limits.multiprocessors) {
    return { entry: 'hf2q_dense_gemv_bf16_f32_4_rows', grid: [n * rowsOf, 1, 1], threads: [256, 1, 1], threadgroupMemory: [32] };
  }
  return { grid: [ceilDiv(n, DENSE_MATVEC_CUDA_ROWS) * rowsOf, 1, 1], threads: [256, 1, 1] };
}

/**
 * dense_gemv_bf16_f32 (mlx-native's): dst[b, i, j] = sum_k src1[b, i, k] *
 * src0[b / r2, j, k], r2 = src1Batch / src0Batch; bf16 weight, f32 input and
 * output, products summed in f32 (the input is not rounded). Meant for
 * m = 1 (decode); any m runs, each row of src1 reading the weight again.
 *
 * Layouts: contiguous, each buffer at least its elements. Bindings: 0
 * DenseGemvBf16Params (llama.cpp's ggml_metal_kargs_mul_mv, byte strides:
 * the kernel honours any the params give), 1 src0, 2 src1, 3 dst;
 * threadgroup(0) 256 bytes.
 * Grid (Metal): (ceil(n / 2), m, src1Batch) threadgroups of (32, nsg, 1),
 * nsg = min(4, ceil(k / 128)), 2 rows each, the simdgroups splitting k.
 * CUDA: denseGemvBf16CudaLaunch.
 */
export function denseGemvBf16F32(enc: Encoder, args: DenseBatchArgs): void {
  record(enc, planDenseGemvBf16F32(args, enc.device.limits, enc.device));
}

/** denseGemvBf16F32's plan: validates, then one dispatch (see denseGemvBf16F32). */
export function planDenseGemvBf16F32(a: DenseBatchArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateDenseGemvBf16F32(a, device);
  return planOf({
    kernel: 'hf2q_dense_gemv_bf16_f32_4',
    buffers: [, a.src0, a.src1, a.dst],
    bytes: [packDenseGemvBf16Params(a)],
    threadgroupMemory: [DENSE_GEMV_BF16_SHARED_BYTES],
    grid: [ceilDiv(a.n, 2), a.m, a.src1Batch],
    threads: [32, denseGemvBf16Simdgroups(a.k), 1],
    cuda: denseGemvBf16CudaLaunch(a.m, a.n, a.src1Batch, limits),
  });
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateDenseMatmulTensor(a: DenseBatchArgs, device?: Device): void {
  const op = 'dense_matmul_tensor';
  validateBatch(op, a, DENSE_DTYPES, device);
  if (a.k < DENSE_MM_TENSOR_MIN_K) throw invalid(op, 'k', `at least ${DENSE_MM_TENSOR_MIN_K}`, a.k);
}

/**
 * dense_matmul_tensor (mlx-native's dense_matmul_{bf16,f16,f32}_f32_tensor,
 * by src0's dtype): dst[b, i, j] = sum_k src1[b, i, k] * src0[b / r2, j, k],
 * r2 = src1Batch / src0Batch; f32 input and output. As in the crate, the
 * input is rounded to the weight's dtype (bf16 or f16) before the products,
 * which are summed in f32; with an f32 weight nothing is rounded.
 *
 * Rules: mlx-native's (k >= 32, src1Batch a multiple of src0Batch, each
 * buffer at least its elements). Bindings: 0 DenseMmTensorParams (byte
 * strides, honoured as given), 1 src0, 2 src1, 3 dst; threadgroup(0) 8192
 * bytes (16-bit weights) or 16384 (f32).
 * Grid (Metal): (ceil(m / 32), ceil(n / 64), src1Batch) threadgroups of 128
 * threads, 32 x 64 tiles on simdgroup matrices (the crate's run on Apple's
 * tensor API). CUDA: the tensor-core tiles of denseMmCudaLaunch (the input
 * converted while staged), or a 64 x 64 SIMT tile for f32.
 */
export function denseMatmulTensor(enc: Encoder, args: DenseBatchArgs): void {
  record(enc, planDenseMatmulTensor(args, enc.device.limits, enc.device));
}

/** denseMatmulTensor's plan: validates, then one dispatch (see denseMatmulTensor). */
export function planDenseMatmulTensor(a: DenseBatchArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateDenseMatmulTensor(a, device);
  const w = a.src0.dtype as DenseDType;
  return planOf({
    kernel: `hf2q_dense_mm_${w}_f32_tensor`,
    buffers: [, a.src0, a.src1, a.dst],
    bytes: [packDenseMmTensorParams({ ...a, weightBytes: dtypeSize(w) })],
    threadgroupMemory: [DENSE_MM_TENSOR_SHARED_BYTES[w]],
    grid: [ceilDiv(a.m, 32), ceilDiv(a.n, 64), a.src1Batch],
    threads: [128, 1, 1],
    cuda: denseMmCudaLaunch(a.m, a.n, a.src1Batch, w, limits),
  });
}

// ---- the float64 reference ----

// CPU reference of the dense family: float64 products and sums.

/**
 * y[b, i, j] = sum_k x[b, i, k] * w[b / (batch / wBatch), j, k]: x
 * [batch, m, k], w [wBatch, n, k] (rows [out, in], as checkpoints store
 * them), y [batch, m, n]; batch a multiple of wBatch.
 */
export function denseRef(x: ArrayLike<number>, w: ArrayLike<number>, m: number, n: number, k: number, batch = 1,
  wBatch = 1): Float64Array {
  return denseSums(x, w, m, n, k, batch, wBatch, false);
}

/**
 * sum_k |x[b, i, k] * w[b / r, j, k]|, laid out as denseRef's y: the scale
 * of each output's rounding error (a sum in floating point errs by a few
 * units of its precision times the sum of its terms' magnitudes, whatever
 * the sum itself is).
 */
export function denseAbsRef(x: ArrayLike<number>, w: ArrayLike<number>, m: number, n: number, k: number, batch = 1,
  wBatch = 1): Float64Array {
  return denseSums(x, w, m, n, k, batch, wBatch, true);
}

function denseSums(x: ArrayLike<number>, w: ArrayLike<number>, m: number, n: number, k: number, batch: number, wBatch: number,
  abs: boolean): Float64Array {
  const r = batch / wBatch;
  const y = new Float64Array(batch * m * n);
  for (let b = 0; b < batch; b++) {
    const wb = Math.floor(b / r) * n * k;
    for (let i = 0; i < m; i++) {
      const xo = (b * m + i) * k;
      for (let j = 0; j < n; j++) {
        const wo = wb + j * k;
        let s = 0;
        for (let q = 0; q < k; q++) {
          const p = x[xo + q]! * w[wo + q]!;
          s += abs ? Math.abs(p) : p;
        }
        y[(b * m + i) * n + j] = s;
      }
    }
  }
  return y;
}
