// Launch shapes shared by the ops.

import type { DeviceLimits } from './device.ts';

/** Blocks of a one-dimensional CUDA grid at most (gridDim.x). */
export const CUDA_GRID_MAX = 0x7fff_ffff;
/** gridDim.y and gridDim.z of a CUDA launch at most. */
export const CUDA_GRID_YZ_MAX = 65535;

/** ceil(a / b). */
export const ceilDiv = (a: number, b: number): number => Math.ceil(a / b);

/** Blocks of the CUDA kernels that stride over chunks of 32 values (the dequantizations, GGUF embedding rows) at most. */
export const CHUNKS_CUDA_BLOCKS = 4096;

/** The CUDA launch of a kernel striding over `chunks32` chunks of 32 values: 256 threads a block, a chunk a thread at a time. */
export function chunksCudaLaunch(chunks32: number): { grid: [number, number, number]; threads: [number, number, number] } {
  return { grid: [Math.max(1, Math.min(ceilDiv(chunks32, 256), CHUNKS_CUDA_BLOCKS)), 1, 1], threads: [256, 1, 1] };
}

/** What a launch shape depends on of a device. */
export type LaunchLimits = Pick<DeviceLimits, 'maxThreadsPerThreadgroup' | 'simdWidth'>;

/** The smallest power of two >= n (1 for n <= 1). */
export function nextPow2(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

/** bytes rounded up to a multiple of 16 (threadgroup memory lengths are). */
export function roundUp16(bytes: number): number {
  return Math.ceil(bytes / 16) * 16;
}

/**
 * The threadgroup of a kernel that reduces one row of n elements:
 * min(maxThreads, the device's limit, nextPow2(n)) threads, and threadgroup(0)
 * bytes holding one float per simdgroup of the device's width (the reduction
 * partials), rounded up to 16.
 */
export function rowThreadgroup(n: number, maxThreads: number, limits: LaunchLimits): { threads: number; sharedBytes: number } {
  const threads = Math.min(maxThreads, limits.maxThreadsPerThreadgroup, nextPow2(n));
  return { threads, sharedBytes: roundUp16(Math.ceil(threads / limits.simdWidth) * 4) };
}

/** Elements a thread of a CUDA row kernel holds in registers (rms_norm, l2_norm, ssm_norm_gate, softmax: 32 floats, or their raw words). */
export const ROW_HELD = 32;
/** Elements a row may have for the launch of rows of up to 32 lanes (32 lanes holding ROW_HELD each). */
export const WARP_ROW_MAX = 32 * ROW_HELD;
/** Threads of a block of short rows at most. */
const ROW_BLOCK = 256;
/**
 * Lanes of a short row at least, where it has that many 16-byte vectors: a
 * load or store of the row's lanes then covers a whole 128-byte line (fewer
 * lanes holding more vectors each would touch half lines, twice as many
 * requests for the same bytes).
 */
export const ROW_LINE_LANES = 8;

/**
 * The CUDA launch of a row kernel (shaders/cuda/common.cuh: row_index,
 * row_sum, row_max) for rows of n elements, sized to the row so that more
 * rows are resident on an SM: as few threads as hold it at `held` (the
 * kernel's; ROW_HELD unless given) elements a thread, t = ceil(n / held).
 * vec is the elements of a 16-byte vector; the kernels hold the row only
 * where n is a multiple of it.
 *
 * - Short rows (n <= 32 held): rows of L lanes, blockDim (L, R, 1), grid
 *   (rows / R, 1, 1), L = nextPow2(t), at least ROW_LINE_LANES (or the
 *   row's vectors, when fewer), where n % vec == 0 (else 32: the kernels
 *   stride element by element), R the largest of 256 / L, 128 / L,
 *   64 / L, 32 / L that divides rows (the kernels have no row count to bound
 *   a partial block, and whole warps keep the shuffles full); a single row
 *   of 32 lanes is the block form below.
 * - Otherwise, or where no R divides rows: one block per row, grid (rows,
 *   1, 1) of min(1024, t rounded up to 32) threads (at least 32), and
 *   dynamic shared memory of one float per warp. Where the rows are fewer
 *   than `multiprocessors` (the device's SMs, when known), each row has an
 *   SM to itself, and its block takes one 16-byte vector a thread (n / vec
 *   threads rounded up to 32, at most 1024): a thread's loads, and whatever
 *   waits on each of them in turn, are then one deep, not 32 / vec.
 *
 * Null where simdWidth is not 32 (the Metal launch is the only one then).
 */
export function rowLaunch(rows: number, n: number, vec: number, limits: LaunchLimits, multiprocessors = 0, held = ROW_HELD): {
  grid: [number, number, number]; threads: [number, number, number]; threadgroupMemory?: number[];
} | null {
  if (limits.simdWidth !== 32) return null;
  const t = Math.ceil(n / held);
  if (n <= 32 * held) {
    const lanes = n % vec === 0 ? Math.max(nextPow2(t), Math.min(ROW_LINE_LANES, nextPow2(n / vec))) : 32;
    const r = [ROW_BLOCK, 128, 64, 32].map((b) => b / lanes)
      .find((k) => k >= 1 && rows % k === 0 && k * lanes <= limits.maxThreadsPerThreadgroup);
    if (r !== undefined && r > 1) return { grid: [rows / r, 1, 1], threads: [lanes, r, 1] };
  }
  const spread = rows < multiprocessors && n % vec === 0;
  const threads = spread
    ? Math.min(limits.maxThreadsPerThreadgroup, 1024, Math.max(32, Math.ceil(n / vec / 32) * 32))
    : rowBlockThreads(n, limits, held);
  return { grid: [rows, 1, 1], threads: [threads, 1, 1], threadgroupMemory: [roundUp16(Math.ceil(threads / 32) * 4)] };
}

/** Threads of rowLaunch's one-block-per-row form: ceil(n / held) rounded up to 32, in [32, min(1024, the device's limit)]. */
export function rowBlockThreads(n: number, limits: LaunchLimits, held = ROW_HELD): number {
  return Math.min(limits.maxThreadsPerThreadgroup, 1024, Math.max(32, Math.ceil(n / held / 32) * 32));
}

/** Steps each thread of copy_rows (shaders/cuda/common.cuh) issues before storing them. */
export const ROW_COPY_STEPS = 4;
/** Threads per block of the copy_rows launch at most. */
export const ROW_COPY_THREADS = 256;

/**
 * Elements one step of copy_rows moves from a source of srcBytes per element
 * to a destination of dstBytes: 16 bytes of the narrower.
 */
export function rowCopyUnit(srcBytes: number, dstBytes: number): number {
  return 16 / Math.min(srcBytes, dstBytes);
}

/**
 * The CUDA launch of a kernel built on copy_rows, for rows rows of len
 * elements moved in steps of `unit`: blockDim (X, Y), Y rows a block and X
 * threads a row, X enough for ROW_COPY_STEPS steps a thread (a multiple of
 * 32 up to ROW_COPY_THREADS, or a power of two below 32: whole rows to a
 * warp), Y = ROW_COPY_THREADS / X; grid ceil(rows / Y) (the kernel strides
 * over rows, so any grid covers them).
 */
export function rowCopyLaunch(rows: number, len: number, unit: number, limits: LaunchLimits): {
  grid: [number, number, number]; threads: [number, number, number];
} {
  const threads = Math.min(ROW_COPY_THREADS, limits.maxThreadsPerThreadgroup);
  const want = Math.ceil(Math.ceil(len / unit) / ROW_COPY_STEPS);
  const lanes = want >= 32 ? Math.min(threads, Math.ceil(want / 32) * 32) : nextPow2(want);
  const perBlock = Math.max(1, Math.floor(threads / lanes));
  // The kernels stride over rows: a grid past CUDA's limit (2^31 - 1 blocks) is cut to it.
  return { grid: [Math.min(Math.ceil(rows / perBlock), 0x7fff_ffff), 1, 1], threads: [lanes, perBlock, 1] };
}
