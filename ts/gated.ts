// What the gated activation families share (ts/ops/silu_mul.ts,
// ts/ops/sigmoid_mul.ts, ts/ops/gelu.ts: y = f(a) * b elementwise): the rules
// of their two forms, their launch, and the float64 references of the two
// forms given f.
//
//   pair:   a, b and y of n elements each (any shapes), one dtype
//   halves: x [rows, 2 * dim] whose rows hold a then b, y [rows, dim]
//
// Dtypes f32, f16 and bf16 (the kernels compute in f32).

import type { Buffer } from './buffer.ts';
import type { Device } from './device.ts';
import { dtypeSize } from './dtype.ts';
import type { LaunchLimits } from './launch.ts';
import type { Launch } from './plan.ts';
import { checkAtMost, checkBuffer, checkDtype, checkElements, checkNoAliasing, checkPositive, checkedProduct } from './validate.ts';

export type GatedDType = 'f32' | 'f16' | 'bf16';
export const GATED_DTYPES: readonly GatedDType[] = ['f32', 'f16', 'bf16'];
/**
 * Output elements at most: the kernels take n as a u32 and index threads in
 * 32 bits, and a grid of 256-thread groups must stay below 2^32 threads.
 */
export const GATED_MAX_ELEMENTS = 2 ** 32 - 256;
const MAX_NAME = '2^32 - 256';
/** Threads per threadgroup (mlx-native's 256, one element each) and per CUDA block (one 16-byte vector each). */
export const GATED_THREADS = 256;

/**
 * The pair form's rules: a, b and output live buffers of the device, one
 * dtype of f32, f16 and bf16, each of a's element count n (at most 2^32 -
 * 256); output may be a or b exactly (each element is read before it is
 * written), but no other overlap. names are a's and b's argument names.
 * Returns n.
 */
export function validateGatedPair(op: string, names: readonly [string, string], a: Buffer, b: Buffer, output: Buffer,
  device?: Device): number {
  const [an, bn] = names;
  checkBuffer(op, an, a, device);
  checkBuffer(op, bn, b, device);
  checkBuffer(op, 'output', output, device);
  checkDtype(op, an, a, GATED_DTYPES);
  checkDtype(op, bn, b, a.dtype);
  checkDtype(op, 'output', output, a.dtype);
  const n = a.elementCount;
  checkAtMost(op, `${an}.elementCount`, n, GATED_MAX_ELEMENTS, MAX_NAME);
  checkElements(op, bn, b, n);
  checkElements(op, 'output', output, n);
  checkNoAliasing(op, [[an, a], [bn, b], ['output', output]], ['output'], 'an element of output over another element of an input',
    [['output', an], ['output', bn]]);
  return n;
}

/**
 * The halves form's rules: rows and dim positive, rows * dim at most 2^32 -
 * 256; input [rows, 2 * dim] and output [rows, dim] live buffers of the
 * device, one dtype of f32, f16 and bf16; output shares no memory with input
 * (its rows lie over input rows that other threads read).
 */
export function validateGatedHalves(op: string, inputName: string, input: Buffer, output: Buffer, rows: number, dim: number,
  device?: Device): void {
  checkPositive(op, 'rows', rows);
  checkPositive(op, 'dim', dim);
  const n = checkedProduct(op, 'rows * dim', rows, dim);
  checkAtMost(op, 'rows * dim', n, GATED_MAX_ELEMENTS, MAX_NAME);
  checkBuffer(op, inputName, input, device);
  checkBuffer(op, 'output', output, device);
  checkDtype(op, inputName, input, GATED_DTYPES);
  checkDtype(op, 'output', output, input.dtype);
  checkElements(op, inputName, input, 2 * n);
  checkElements(op, 'output', output, n);
  checkNoAliasing(op, [[inputName, input], ['output', output]], ['output'], 'output rows lie over input rows that other threads read');
}

/**
 * The launch of a gated kernel over rows of dim outputs (the pair form: one
 * row of n). Metal, one element per thread: grid (ceil(dim / tg), rows, 1)
 * of tg = min(256, dim) threads. CUDA, one 16-byte vector (16 / element
 * size elements) of a row per thread: grid (ceil(rows * ceil(dim / vec) /
 * 256), 1, 1) of 256.
 */
export function gatedLaunch(rows: number, dim: number, dtype: GatedDType, limits: LaunchLimits): Launch & { cuda: Launch } {
  const tg = Math.min(GATED_THREADS, dim, limits.maxThreadsPerThreadgroup);
  const block = Math.min(GATED_THREADS, limits.maxThreadsPerThreadgroup);
  const chunks = rows * Math.ceil(dim / (16 / dtypeSize(dtype)));
  return {
    grid: [Math.ceil(dim / tg), rows, 1],
    threads: [tg, 1, 1],
    cuda: { grid: [Math.ceil(chunks / block), 1, 1], threads: [block, 1, 1] },
  };
}

/** The pair form's float64 reference: y[i] = f(a[i]) * b[i], i < a.length. */
export function gatedPairRef(f: (g: number) => number, a: ArrayLike<number>, b: ArrayLike<number>): Float64Array {
  const y = new Float64Array(a.length);
  for (let i = 0; i < a.length; i++) y[i] = f(a[i]!) * b[i]!;
  return y;
}

/** The halves form's float64 reference: y[r, c] = f(x[r, c]) * x[r, dim + c], x [rows, 2 * dim] (a half first). */
export function gatedHalvesRef(f: (g: number) => number, x: ArrayLike<number>, rows: number, dim: number): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < dim; c++) y[r * dim + c] = f(x[2 * r * dim + c]!) * x[2 * r * dim + dim + c]!;
  }
  return y;
}
