// mlx-native/testing: what a parity suite of GPU kernels needs, the same
// helpers this project's own tests use (tests/helpers.ts re-exports them).
//
// - describeBackends: one describe block per backend present (emu, emu with a
//   randomized thread schedule, cuda, metal); absent ones listed as skipped.
// - Tolerances by dtype (TOL, tolerance, dotTolerance), error measures
//   (maxRelErr, nmse, scaledErr, maxAbs, dotErr), the values a buffer of a
//   dtype holds (roundedTo), and expectClose, which names the worst element.
// - poisoned: NaN-filled outputs, so an element a kernel never writes fails.
// - rng / randomArray: seeded inputs, the same on every machine.
//
// MLX_NATIVE_TEST_BACKENDS (comma-separated names) limits the backends run.

import { afterAll, describe, test } from 'bun:test';
import type { Buffer } from './buffer.ts';
import { Device } from './device.ts';
import { fromBf16, fromF16, toBf16, toF16, type DType } from './dtype.ts';
import { MlxError } from './errors.ts';
import type { BackendName } from './native.ts';

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
  const list = process.env['MLX_NATIVE_TEST_BACKENDS'];
  if (list === undefined || list.trim() === '') return true;
  return list.split(',').map((s) => s.trim()).includes(backend);
}

/** Why the backend cannot open a device here, or null when it can (probed once). */
export function backendAbsence(backend: BackendName): string | null {
  let why = absence.get(backend);
  if (why === undefined && !selected(backend)) {
    why = `not selected by MLX_NATIVE_TEST_BACKENDS=${process.env['MLX_NATIVE_TEST_BACKENDS']}`;
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

export interface DescribeBackendsOptions {
  /**
   * Backends whose absence is a failure rather than a skip (e.g. ['emu'] in a
   * CI that must run every kernel); default none.
   */
  required?: readonly BackendName[];
}

/**
 * One describe block per backend case, named "<name> [<label>]": run where
 * the backend is present, listed as skipped where it is not, so a run shows
 * what it did not test. The device is opened on first use (with the case's
 * options) and closed after the block.
 */
export function describeBackends(
  name: string,
  fn: (ctx: { device: () => Device; label: string; backend: BackendName }) => void,
  opts: DescribeBackendsOptions = {},
): void {
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
      fn({ device, label: c.label, backend: c.backend });
    });
  }
  for (const b of opts.required ?? []) {
    const missing = backendAbsence(b);
    if (missing === null) continue;
    describe(name, () => {
      test(`the ${b} backend is present`, () => {
        throw new Error(missing);
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

/**
 * Relative tolerances by dtype (max relative error against a float64
 * reference): f32 1e-5, f16 1e-3, bf16 1e-2. An op that accumulates more
 * rounding says why next to its test.
 */
export const TOL = { f32: 1e-5, f16: 1e-3, bf16: 1e-2 } as const;

/**
 * The error of sums of products (matrix products, attention): max over
 * outputs of |got - want| / sum_k |x w| (abs, from the reference); Infinity
 * where got is NaN (a poisoned output never written).
 */
export function dotErr(got: ArrayLike<number>, want: ArrayLike<number>, abs: ArrayLike<number>): number {
  let worst = 0;
  for (let i = 0; i < want.length; i++) {
    const e = Math.abs(got[i]! - want[i]!) / abs[i]!;
    if (!(e <= worst)) worst = Number.isNaN(e) ? Infinity : e;
  }
  return worst;
}

/**
 * dotErr's tolerance for sums over k terms: TOL of the dtype the products
 * are rounded to, grown as sqrt(k / 4096) past k = 4096 (rounding errors of
 * a long f32 sum add like a random walk).
 */
export function dotTolerance(dtype: 'f32' | 'f16' | 'bf16', k: number): number {
  return TOL[dtype] * Math.max(1, Math.sqrt(k / 4096));
}

/** The values a buffer of the dtype holds for these numbers (rounded to nearest even). */
export function roundedTo(dtype: DType, v: ArrayLike<number>): Float64Array {
  if (dtype === 'bf16') return Float64Array.from(fromBf16(toBf16(v)));
  if (dtype === 'f16') return Float64Array.from(fromF16(toF16(v)));
  if (dtype === 'f32') return Float64Array.from(Float32Array.from(v));
  return Float64Array.from(v);
}

/** The relative tolerance of a dtype (integers compare exactly: 0). */
export function tolerance(dtype: DType): number {
  return dtype === 'f32' || dtype === 'f16' || dtype === 'bf16' ? TOL[dtype] : 0;
}

/**
 * Throws unless maxRelErr(got, want) <= tol (a number, or a dtype's
 * tolerance); the message names the worst element, its value and the wanted one.
 */
export function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, tol: number | DType, what = 'output'): void {
  const limit = typeof tol === 'number' ? tol : tolerance(tol);
  const err = maxRelErr(got, want);
  if (err <= limit) return;
  let worst = 0;
  let worstErr = -1;
  let scale = 0;
  for (let i = 0; i < want.length; i++) if (Number.isFinite(want[i]!)) scale = Math.max(scale, Math.abs(want[i]!));
  for (let i = 0; i < got.length; i++) {
    const g = got[i]!;
    const w = want[i]!;
    if (g === w || (Number.isNaN(g) && Number.isNaN(w))) continue;
    const e = Number.isFinite(g) && Number.isFinite(w) ? Math.abs(g - w) / Math.max(Math.abs(w), scale * 1e-3) : Infinity;
    if (e > worstErr) {
      worstErr = e;
      worst = i;
    }
  }
  throw new Error(`${what}: max relative error ${err} exceeds ${limit} (element ${worst}: got ${got[worst]}, want ${want[worst]})`);
}

/**
 * A buffer of the dtype and shape filled with NaN (integers: all bits set), for
 * outputs: an element the kernel never writes then fails every comparison.
 */
export function poisoned(device: Device, dtype: DType, shape: readonly number[]): Buffer {
  const b = device.alloc(dtype, shape);
  try {
    if (dtype === 'f32' || dtype === 'f16' || dtype === 'bf16') b.fill(NaN);
    else b.fill(dtype === 'u8' ? 0xff : dtype === 'u16' ? 0xffff : dtype === 'u32' ? 0xffffffff : -1);
  } catch (e) {
    b.release();
    throw e;
  }
  return b;
}
