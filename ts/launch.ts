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
