// Argument checks shared by the ops. Every message names the op, the
// argument, what was expected and what was given:
//   "<op>: <arg> must be <expected> (got <actual>)"

import { Buffer } from './buffer.ts';
import type { Device } from './device.ts';
import type { DType } from './dtype.ts';
import { MlxError } from './errors.ts';
import { CUDA_GRID_YZ_MAX } from './launch.ts';

/** The value as a message shows it: O(1) in its size (long arrays and strings are cut). */
function show(actual: unknown): string {
  if (Array.isArray(actual)) {
    const head = actual.slice(0, 8).map(show).join(', ');
    return actual.length > 8 ? `[${head}, ... (${actual.length} items)]` : `[${head}]`;
  }
  if (actual instanceof Buffer) return `a ${actual.dtype} buffer [${actual.shape.join(', ')}]`;
  if (typeof actual === 'string') return actual.length > 200 ? `${actual.slice(0, 200)}...` : actual;
  if (typeof actual === 'object' && actual !== null) return `a ${actual.constructor?.name ?? 'null-prototype'} object`;
  return String(actual);
}

/** The bounds of the params' integer fields, and the largest finite f32. */
export const U32_MAX = 0xffff_ffff;
export const I32_MAX = 0x7fff_ffff;
export const I16_MAX = 0x7fff;
export const F32_MAX = 3.4028234663852886e38;

export function invalid(op: string, arg: string, expected: string, actual: unknown): MlxError {
  return new MlxError('InvalidArgument', `${op}: ${arg} must be ${expected} (got ${show(actual)})`);
}

/** value is an integer > 0. */
export function checkPositive(op: string, arg: string, value: number): void {
  if (!Number.isSafeInteger(value) || value <= 0) throw invalid(op, arg, 'a positive integer', value);
}

/** value is a multiple of `of` (named ofName in the message when given). */
export function checkMultiple(op: string, arg: string, value: number, of: number, ofName?: string): void {
  if (value % of !== 0) throw invalid(op, arg, `a multiple of ${ofName === undefined ? of : `${ofName} (${of})`}`, value);
}

/** value <= max (named maxName in the message when given). */
export function checkAtMost(op: string, arg: string, value: number, max: number, maxName?: string): void {
  if (!(value <= max)) throw invalid(op, arg, `at most ${maxName === undefined ? max : `${maxName} (${max})`}`, value);
}

/** A count of a kernel's: a positive integer that a u32 field holds. */
export function checkU32Count(op: string, arg: string, value: number): void {
  checkPositive(op, arg, value);
  checkAtMost(op, arg, value, U32_MAX, '2^32 - 1');
}

/** A count that a launch spans along y or z: at most the CUDA grid's limit there (CUDA_GRID_YZ_MAX, 65535). */
export function checkGridDim(op: string, arg: string, value: number): void {
  checkAtMost(op, arg, value, CUDA_GRID_YZ_MAX, `${CUDA_GRID_YZ_MAX} (a grid dimension)`);
}

/**
 * value is a live Buffer: not null, not another kind of value, not released,
 * its device open, and of `device` when one is given (an encoder records only
 * its own device's buffers).
 */
export function checkBuffer(op: string, arg: string, value: unknown, device?: Device): asserts value is Buffer {
  if (!(value instanceof Buffer)) throw invalid(op, arg, 'a Buffer', value === undefined ? 'none' : value);
  if (value.released) throw invalid(op, arg, 'a live Buffer', 'a released buffer (or one of a closed device)');
  if (device !== undefined && value.device !== device) {
    throw invalid(op, arg, `a buffer of the encoder's device (${device.name})`, `a buffer of another device (${value.device.name})`);
  }
}

/** value is true or false (undefined too when optional). */
export function checkBoolean(op: string, arg: string, value: unknown, optional = false): void {
  if (typeof value === 'boolean' || (optional && value === undefined)) return;
  throw invalid(op, arg, optional ? 'true, false or absent' : 'true or false', value);
}

/** The two buffers share bytes: views of one allocation whose ranges overlap (or one buffer twice). */
export function overlaps(a: Buffer, b: Buffer): boolean {
  return a.root === b.root && a.byteOffset < b.byteOffset + b.byteLength && b.byteOffset < a.byteOffset + a.byteLength;
}

/**
 * No buffer that the op writes (named in `outputs`) shares memory with
 * another of its arguments (views of one allocation count when their ranges
 * overlap), except the pairs in `allowed` (in-place forms the kernels
 * support), and those only over exactly the same range. `bindings` lists every
 * buffer argument by name, absent ones as undefined. O(bindings^2), a handful.
 */
export function checkNoAliasing(
  op: string, bindings: readonly (readonly [string, Buffer | undefined])[], outputs: readonly string[],
  why: string, allowed: readonly (readonly [string, string])[] = [],
): void {
  for (const [out, buf] of bindings) {
    if (buf === undefined || !outputs.includes(out)) continue;
    for (const [other, otherBuf] of bindings) {
      if (other === out || otherBuf === undefined || !overlaps(buf, otherBuf)) continue;
      const same = buf.root === otherBuf.root && buf.byteOffset === otherBuf.byteOffset && buf.byteLength === otherBuf.byteLength;
      if (same && allowed.some(([x, y]) => (x === out && y === other) || (x === other && y === out))) continue;
      throw invalid(op, out, `a buffer other than ${other} (${why})`, same ? `the buffer of ${other}` : `a view overlapping ${other}`);
    }
  }
}

/** The buffer's dtype is `dtype`, or one of them (a non-Buffer value is refused by checkBuffer's rule). */
export function checkDtype(op: string, arg: string, buf: Buffer, dtype: DType | readonly DType[]): void {
  checkBuffer(op, arg, buf);
  const ok = typeof dtype === 'string' ? buf.dtype === dtype : dtype.includes(buf.dtype);
  if (!ok) throw invalid(op, `${arg}.dtype`, typeof dtype === 'string' ? dtype : `one of ${dtype.join(', ')}`, buf.dtype);
}

/** The buffer holds exactly `expected` elements. */
export function checkElements(op: string, arg: string, buf: Buffer, expected: number): void {
  checkBuffer(op, arg, buf);
  if (buf.elementCount !== expected) {
    throw invalid(op, `${arg}.elementCount`, `${expected}`, `${buf.elementCount}, shape [${buf.shape.join(', ')}]`);
  }
}

/**
 * mlx-native's buffer-size rule: the buffer holds at least `expected`
 * elements (a larger buffer's first elements are used).
 */
export function checkAtLeast(op: string, arg: string, buf: Buffer, expected: number): void {
  checkBuffer(op, arg, buf);
  if (buf.elementCount < expected) {
    throw invalid(op, `${arg}.elementCount`, `at least ${expected}`, `${buf.elementCount}, shape [${buf.shape.join(', ')}]`);
  }
}

/** The product of the factors, checked to stay an exact integer (at most 2^53 - 1). */
export function checkedProduct(op: string, arg: string, ...factors: number[]): number {
  let p = 1;
  for (const f of factors) {
    p *= f;
    if (!Number.isSafeInteger(p)) {
      throw invalid(op, arg, 'a product of integers at most 2^53 - 1', `${factors.join(' * ')}`);
    }
  }
  return p;
}

/** checkedProduct, then at most 2^32 - 1: a count that a u32 field or a 32-bit index holds. */
export function checkedU32Product(op: string, arg: string, ...factors: number[]): number {
  const p = checkedProduct(op, arg, ...factors);
  checkAtMost(op, arg, p, U32_MAX, '2^32 - 1');
  return p;
}

/** A dtype rule that reads the dtypes of the arguments listed before it (`like`: the same as one of them). */
export type DtypeOf = (dtypeOf: (arg: string) => DType) => DType | readonly DType[];
/** The dtype of the argument `arg` listed before. */
export const like = (arg: string): DtypeOf => (dtypeOf) => dtypeOf(arg);

/** An element count, or a byte length the buffer holds at least (mlx-native's rule on packed weights), `of` saying what the bytes are. */
export type CountRule = number | { readonly bytes: number; readonly of: string };

/**
 * A buffer argument: its name, the buffer, its dtype (or one of them, or a
 * rule on those before it), its element count, and whether it may be absent
 * (an absent optional argument is not checked).
 */
export type BufferRule = readonly [arg: string, buf: Buffer | undefined, dtype: DType | readonly DType[] | DtypeOf, count: CountRule, optional?: boolean];

/**
 * An op's buffer arguments, checked in phases so that the first rule broken
 * in this order is the one named: every one a live buffer (of `device`),
 * then every dtype, then every element count: exact, or with `atLeast`
 * mlx-native's rule (at least that many); a byte rule is always at least.
 */
export function checkBufferRules(op: string, all: readonly BufferRule[], device?: Device, atLeast = false): void {
  const rules = all.filter(([, buf, , , optional]) => !optional || buf !== undefined) as readonly (readonly [string, Buffer, BufferRule[2], CountRule, boolean?])[];
  for (const [arg, buf] of rules) checkBuffer(op, arg, buf, device);
  const dtypeOf = (name: string): DType => rules.find(([arg]) => arg === name)![1].dtype;
  for (const [arg, buf, dtype] of rules) checkDtype(op, arg, buf, typeof dtype === 'function' ? dtype(dtypeOf) : dtype);
  for (const [arg, buf, , count] of rules) {
    if (typeof count === 'object') {
      if (buf.byteLength < count.bytes) throw invalid(op, `${arg}.byteLength`, `at least ${count.bytes} (${count.of})`, buf.byteLength);
    } else if (atLeast) checkAtLeast(op, arg, buf, count);
    else checkElements(op, arg, buf, count);
  }
}

/**
 * An op's buffer arguments, each in turn: a live buffer (of `device`), then
 * its dtype, then exactly its element count, all of one before the next's.
 */
export function checkEachBuffer(
  op: string, list: readonly (readonly [arg: string, buf: Buffer | undefined, dtype: DType | readonly DType[], count: number])[], device?: Device,
): void {
  for (const [arg, buf, dtype, count] of list) {
    checkBuffer(op, arg, buf, device);
    checkDtype(op, arg, buf, dtype);
    checkElements(op, arg, buf, count);
  }
}

/** The rules' arguments as checkNoAliasing takes them. */
export function ruleBindings(rules: readonly BufferRule[]): [string, Buffer | undefined][] {
  return rules.map(([arg, buf]) => [arg, buf]);
}
