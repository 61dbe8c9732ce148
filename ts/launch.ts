// Launch shapes shared by the ops.

import type { DeviceLimits } from './device.ts';

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

/** Elements a row may have for the one-warp-per-row launch (32 lanes holding 32 floats each). */
export const WARP_ROW_MAX = 1024;

/**
 * The CUDA launch of a row kernel whose twin can take one warp per row
 * (blockDim (32, R, 1), grid (rows / R, 1, 1)): for rows of at most
 * WARP_ROW_MAX elements, R the largest of 8, 4, 2 that divides rows (the
 * kernels have no row count to bound a partial block). Null otherwise: one
 * block per row, as Metal.
 */
export function warpRowsLaunch(rows: number, n: number, limits: LaunchLimits): { grid: [number, number, number]; threads: [number, number, number] } | null {
  if (n > WARP_ROW_MAX || limits.simdWidth !== 32) return null;
  const r = [8, 4, 2].find((k) => rows % k === 0 && 32 * k <= limits.maxThreadsPerThreadgroup);
  return r === undefined ? null : { grid: [rows / r, 1, 1], threads: [32, r, 1] };
}

/** Steps each thread of copy_rows (shaders/cuda/common.cuh) issues before storing them. */
export const ROW_COPY_STEPS = 4;
/** Threads per block of the copy_rows launch. */
export const ROW_COPY_THREADS = 256;
/** Blocks a small copy is spread over at least (where it has the steps): two per SM of an H100 or H200 (132 SMs). */
export const ROW_COPY_FILL_BLOCKS = 264;

/**
 * Elements one step of copy_rows moves from a source of srcBytes per element
 * to a destination of dstBytes: 16 bytes of the narrower.
 */
export function rowCopyUnit(srcBytes: number, dstBytes: number): number {
  return 16 / Math.min(srcBytes, dstBytes);
}

/**
 * The CUDA launch of a kernel built on copy_rows, for rows rows of len
 * elements moved in steps of `unit`: blocks of 256 threads, ROW_COPY_STEPS
 * steps a thread where there are enough to fill the device, else one step a
 * thread over up to ROW_COPY_FILL_BLOCKS blocks (any grid covers the rows:
 * the kernel strides over them).
 */
export function rowCopyLaunch(rows: number, len: number, unit: number, limits: LaunchLimits): {
  grid: [number, number, number]; threads: [number, number, number];
} {
  const steps = rows * Math.ceil(len / unit);
  const threads = Math.min(ROW_COPY_THREADS, limits.maxThreadsPerThreadgroup);
  const full = Math.ceil(steps / (threads * ROW_COPY_STEPS));
  const blocks = Math.max(full, Math.min(Math.ceil(steps / threads), ROW_COPY_FILL_BLOCKS));
  return { grid: [blocks, 1, 1], threads: [threads, 1, 1] };
}
