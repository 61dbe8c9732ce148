// Shared test helpers: those of mlx-native/testing (ts/testing.ts: the backend
// matrix, seeded random inputs, error measures with tolerances by dtype), and
// the project's own (validation expectations, target limits).

import { afterAll, describe, expect } from 'bun:test';
import {
  MlxError,
  bf16BitsToF32,
  f32ToBf16Bits,
  type BackendName,
  type Buffer,
  type DType,
  type Device,
  type DeviceLimits,
  type Encoder,
} from '../ts/index.ts';
import { backends, describeBackends as describeBackendsOf, openDevice } from '../ts/testing.ts';

// The project's tests use the package's own testing module (mlx-native/testing).
export {
  EMU_RANDOM_SEED,
  TOL,
  backendAbsence,
  backends,
  dotErr,
  dotTolerance,
  expectClose,
  maxAbs,
  maxRelErr,
  nmse,
  openDevice,
  poisoned,
  randomArray,
  rng,
  roundedTo,
  scaledErr,
  tolerance,
  type BackendCase,
  type Rng,
} from '../ts/testing.ts';

/**
 * The backend matrix of ts/testing.ts; under CI an absent emulator is a
 * failure, since every kernel must run there.
 */
export function describeBackends(name: string, fn: (ctx: { device: () => Device; label: string; backend: BackendName }) => void): void {
  describeBackendsOf(name, fn, { required: process.env['CI'] ? ['emu'] : [] });
}

/**
 * True when the device's kernels run on the CPU emulator: the emu backend, or
 * the metal backend built on Linux over the emulator (swift/Sources/Metal).
 * Tests size long work by it, and check the emulator's run-time faults
 * (out-of-bounds access) only where it executes.
 */
export function runsOnEmulator(d: Device): boolean {
  return d.backend === 'emu' || d.name.startsWith('CPU emulator');
}

/** The 32-bit words of packed params, as u32. */
export const words = (b: Uint8Array): number[] =>
  Array.from({ length: b.byteLength / 4 }, (_, i) => new DataView(b.buffer, b.byteOffset).getUint32(4 * i, true));

/** Packed params read word by word, as u32 (u) or f32 (f), and their size. */
export const wordView = (b: Uint8Array): { u: (i: number) => number; f: (i: number) => number; bytes: number } => {
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  return { u: (i: number) => v.getUint32(4 * i, true), f: (i: number) => v.getFloat32(4 * i, true), bytes: b.byteLength };
};

/** x rounded to bf16 (round-to-nearest-even), as a number. */
export const bf16 = (x: number): number => bf16BitsToF32(f32ToBf16Bits(x));

/**
 * The limits of the devices plans are checked against without them: an Apple
 * GPU (metal; the emulator reports the same) and an H100 (cuda: 227 KiB of
 * shared memory per block after opt-in, compute capability 9.0, 132 SMs).
 */
export const TARGET_LIMITS = {
  metal: { maxThreadsPerThreadgroup: 1024, maxThreadgroupMemory: 32768, simdWidth: 32, maxBufferLength: 2 ** 35, sharedMemory: true,
    computeCapability: 0, multiprocessors: 0 },
  cuda: { maxThreadsPerThreadgroup: 1024, maxThreadgroupMemory: 232448, simdWidth: 32, maxBufferLength: 85 * 2 ** 30, sharedMemory: false,
    computeCapability: 90, multiprocessors: 132 },
} as const satisfies Record<string, DeviceLimits>;

// ---- validation ----

/** The MlxError that fn throws, expected to be of kind InvalidArgument. */
function invalidArgumentOf(fn: () => void): MlxError {
  let err: unknown = null;
  try {
    fn();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(MlxError);
  const e = err as MlxError;
  expect(e.kind).toBe('InvalidArgument');
  return e;
}

/**
 * fn throws MlxError('InvalidArgument') with the message of ts/validate.ts:
 * "<op>: <arg> must be <expected> (got <actual>)", where expected and actual
 * may be the start of what the message says.
 */
export function expectInvalid(fn: () => void, op: string, arg: string, expected: string, actual: string): void {
  const e = invalidArgumentOf(fn);
  expect(e.message).toStartWith(`${op}: ${arg} must be `);
  expect(e.message).toContain(expected);
  expect(e.message).toContain(`(got ${actual}`);
}

/** The MlxError fn throws (anything else it throws is rethrown; throwing nothing fails). */
export function errorOf(fn: () => unknown): MlxError {
  try {
    fn();
  } catch (e) {
    if (e instanceof MlxError) return e;
    throw e;
  }
  throw new Error('expected an MlxError, none was thrown');
}

/** fn throws an MlxError (of any kind) whose message contains `text`; returns it. */
export function expectMlxError(fn: () => unknown, text: string): MlxError {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(MlxError);
  expect((caught as MlxError).message).toContain(text);
  return caught as MlxError;
}

/** fn throws MlxError('InvalidArgument') whose message starts "<op>: " and contains every part. */
export function expectInvalidParts(fn: () => void, op: string, ...parts: string[]): void {
  const e = invalidArgumentOf(fn);
  expect(e.message).toStartWith(`${op}: `);
  for (const part of parts) expect(e.message).toContain(part);
}

export interface ValidationContext {
  /** A device of the first backend present, opened on first use and closed after the block. */
  device: () => Device;
  /** One encoder for every case: validation throws before anything is recorded. */
  enc: () => Encoder;
  /** A zero-filled buffer of n elements, shape [n]. */
  buf: (dtype: DType, n: number) => Buffer;
}

/** A describe block of validation tests on the first backend present; skipped where none is. */
export function describeValidation(name: string, fn: (ctx: ValidationContext) => void): void {
  const present = backends();
  describe.if(present.length > 0)(name, () => {
    let dev: Device | null = null;
    const device = (): Device => (dev ??= openDevice(present[0]!));
    afterAll(() => dev?.close());
    let encoder: Encoder | null = null;
    const enc = (): Encoder => (encoder ??= device().encoder());
    fn({ device, enc, buf: (dtype, n) => device().alloc(dtype, [n]) });
  });
}

/** Records with rec on a new encoder of dev, commits, waits, and releases the encoder. */
export function run(dev: Device, rec: (enc: Encoder) => void): void {
  const enc = dev.encoder();
  try {
    rec(enc);
    enc.commitAndWait();
  } finally {
    enc.release();
  }
}
