// Shared test helpers: the backends present on this machine, seeded random
// inputs, and error measures with tolerances by dtype.

import { afterAll, describe, expect, test } from 'bun:test';
import {
  Device,
  MlxError,
  bf16BitsToF32,
  f32ToBf16Bits,
  type BackendName,
  type Buffer,
  type DType,
  type DeviceLimits,
  type Encoder,
} from '../ts/index.ts';

export interface BackendCase {
  label: string;
  backend: BackendName;
  options?: Record<string, string>;
}

/** The seed of the emu-random schedule: fixed, so a failure replays. */
export const EMU_RANDOM_SEED = '20240611';

const CASES: readonly BackendCase[] = [
  { label: 'emu', backend: 'emu' },
  { label: 'emu-random', backend: 'emu', options: { schedule: 'random', seed: EMU_RANDOM_SEED } },
  { label: 'cuda', backend: 'cuda' },
  { label: 'metal', backend: 'metal' },
];

const absence = new Map<BackendName, string | null>();

/**
 * MLX_NATIVE_TEST_BACKENDS (comma-separated backend names) limits the backends
 * tested, e.g. `cuda` on a GPU machine without clang, where the emulator's
 * library opens but cannot compile kernels. Unset: every backend present.
 */
function selected(backend: BackendName): boolean {
  const list = process.env.MLX_NATIVE_TEST_BACKENDS;
  if (list === undefined || list.trim() === '') return true;
  return list.split(',').map((s) => s.trim()).includes(backend);
}

/** Why the backend cannot open a device here, or null when it can (probed once). */
export function backendAbsence(backend: BackendName): string | null {
  let why = absence.get(backend);
  if (why === undefined && !selected(backend)) {
    why = `not selected by MLX_NATIVE_TEST_BACKENDS=${process.env.MLX_NATIVE_TEST_BACKENDS}`;
    absence.set(backend, why);
  }
  if (why === undefined) {
    try {
      Device.open({ backend }).close();
      why = null;
    } catch (e) {
      why = e instanceof MlxError || e instanceof Error ? e.message : String(e);
    }
    absence.set(backend, why);
  }
  return why;
}

/** Every backend case present: 'emu' and 'emu-random' where the emulator builds, 'cuda' / 'metal' where they open. */
export function backends(): BackendCase[] {
  return CASES.filter((c) => backendAbsence(c.backend) === null);
}

/** Opens a device of the case with its options set. */
export function openDevice(c: BackendCase): Device {
  const device = Device.open({ backend: c.backend });
  for (const [k, v] of Object.entries(c.options ?? {})) device.setOption(k, v);
  return device;
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
/**
 * One describe block per backend case, named "<name> [<label>]": run where
 * the backend is present, listed as skipped where it is not. The device is
 * opened on first use and closed after the block. Under CI an absent
 * emulator is a failure, since every kernel must run there.
 */
export function describeBackends(name: string, fn: (ctx: { device: () => Device; label: string }) => void): void {
  for (const c of CASES) {
    const present = backendAbsence(c.backend) === null;
    describe.if(present)(`${name} [${c.label}]`, () => {
      let dev: Device | null = null;
      const device = (): Device => {
        if (dev === null) dev = openDevice(c);
        return dev;
      };
      if (present) {
        afterAll(() => {
          dev?.close();
          dev = null;
        });
      }
      fn({ device, label: c.label });
    });
  }
  const emuMissing = backendAbsence('emu');
  if (process.env.CI && emuMissing !== null) {
    describe(name, () => {
      test('the emu backend is present under CI', () => {
        throw new Error(emuMissing);
      });
    });
  }
}

export interface Rng {
  /** Uniform in [0, 1). */
  next(): number;
  uniform(lo: number, hi: number): number;
  /** Standard normal. */
  normal(): number;
}

/** A seeded generator (sfc32 seeded by splitmix32): the same seed gives the same sequence everywhere. */
export function rng(seed: number): Rng {
  let s = seed >>> 0;
  const splitmix = (): number => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
  let a = splitmix();
  let b = splitmix();
  let c = splitmix();
  let d = splitmix();
  const next = (): number => {
    const t = (((a + b) >>> 0) + d) >>> 0;
    d = (d + 1) >>> 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) >>> 0;
    c = ((c << 21) | (c >>> 11)) >>> 0;
    c = (c + t) >>> 0;
    return t / 0x1_0000_0000;
  };
  return {
    next,
    uniform: (lo, hi) => lo + (hi - lo) * next(),
    normal: () => {
      // Box-Muller; 1 - next() is in (0, 1], so the log is finite.
      const u = 1 - next();
      const v = next();
      return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
    },
  };
}

/** n uniform values in [lo, hi) (default [-1, 1)). */
export function randomArray(r: Rng, n: number, lo = -1, hi = 1): Float64Array {
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) out[i] = r.uniform(lo, hi);
  return out;
}

function checkLengths(got: ArrayLike<number>, want: ArrayLike<number>): void {
  if (got.length !== want.length) throw new Error(`length mismatch: got ${got.length}, want ${want.length}`);
}

/**
 * max_i |got_i - want_i| / max(|want_i|, floor). The default floor is 1e-3 of
 * the largest |want|, so elements near zero are measured against the data's
 * scale. A NaN where a number is wanted, or a mismatched infinity, is
 * Infinity (poisoned outputs that were never written fail); NaN where NaN is
 * wanted matches.
 */
export function maxRelErr(got: ArrayLike<number>, want: ArrayLike<number>, floor?: number): number {
  checkLengths(got, want);
  let scale = 0;
  for (let i = 0; i < want.length; i++) {
    const w = Math.abs(want[i]!);
    if (w > scale && Number.isFinite(w)) scale = w;
  }
  const f = floor ?? Math.max(scale * 1e-3, Number.MIN_VALUE);
  let worst = 0;
  for (let i = 0; i < got.length; i++) {
    const g = got[i]!;
    const w = want[i]!;
    if (Number.isNaN(w) && Number.isNaN(g)) continue;
    if (g === w) continue;
    if (!Number.isFinite(g) || !Number.isFinite(w)) return Infinity;
    const e = Math.abs(g - w) / Math.max(Math.abs(w), f);
    if (e > worst) worst = e;
  }
  return worst;
}

/** Normalized mean squared error: sum (got - want)^2 / sum want^2; Infinity if got has a non-finite value. */
export function nmse(got: ArrayLike<number>, want: ArrayLike<number>): number {
  checkLengths(got, want);
  let num = 0;
  let den = 0;
  for (let i = 0; i < got.length; i++) {
    const g = got[i]!;
    const w = want[i]!;
    if (!Number.isFinite(g)) return Infinity;
    num += (g - w) * (g - w);
    den += w * w;
  }
  return den === 0 ? num : num / den;
}

/** max_i |x_i| (0 for no elements). */
export function maxAbs(x: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < x.length; i++) m = Math.max(m, Math.abs(x[i]!));
  return m;
}

/**
 * max |got - want| / max |want|: for outputs that are sums of products which
 * may cancel to values far below their terms, whose error is of the terms' size.
 */
export function scaledErr(got: ArrayLike<number>, want: ArrayLike<number>): number {
  return maxRelErr(got, want, maxAbs(want));
}

/** x rounded to bf16 (round-to-nearest-even), as a number. */
export const bf16 = (x: number): number => bf16BitsToF32(f32ToBf16Bits(x));

/**
 * The limits of the devices plans are checked against without them: an Apple
 * GPU (metal; the emulator reports the same) and an H100 (cuda: 227 KiB of
 * shared memory per block after opt-in).
 */
export const TARGET_LIMITS = {
  metal: { maxThreadsPerThreadgroup: 1024, maxThreadgroupMemory: 32768, simdWidth: 32, maxBufferLength: 2 ** 35, sharedMemory: true },
  cuda: { maxThreadsPerThreadgroup: 1024, maxThreadgroupMemory: 232448, simdWidth: 32, maxBufferLength: 85 * 2 ** 30, sharedMemory: false },
} as const satisfies Record<string, DeviceLimits>;

/** Relative tolerances by dtype; an op that needs more says why next to its test. */
export const TOL = { f32: 1e-5, f16: 1e-3, bf16: 1e-2 } as const;

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
