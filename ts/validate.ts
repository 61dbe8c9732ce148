// Argument checks shared by the ops. Every message names the op, the
// argument, what was expected and what was given:
//   "<op>: <arg> must be <expected> (got <actual>)"

import { Buffer } from './buffer.ts';
import type { Device } from './device.ts';
import type { DType } from './dtype.ts';
import { MlxError } from './errors.ts';

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

/**
 * An op's buffer argument for checkBuffers: its name, its value, its dtype
 * (or those allowed), its element count, and whether it may be absent.
 */
export type BufferRule = readonly [arg: string, value: Buffer | undefined, dtype: DType | readonly DType[], elements: number, optional?: boolean];

/**
 * checkBuffer on every rule's value (an optional one only when present),
 * then checkDtype on each, then checkElements: the order in which an op's
 * messages name its arguments.
 */
export function checkBuffers(op: string, device: Device | undefined, rules: readonly BufferRule[]): void {
  const present = rules.filter(([, value, , , optional]) => !optional || value !== undefined);
  for (const [arg, value] of present) checkBuffer(op, arg, value, device);
  for (const [arg, value, dtype] of present) checkDtype(op, arg, value!, dtype);
  for (const [arg, value, , elements] of present) checkElements(op, arg, value!, elements);
}

/**
 * An input and an output of its dtype and element count: checkBuffer on
 * both, then the input's dtype (one of `dtypes`) and the output's (the
 * input's), then the element count of each.
 */
export function checkInOut(
  op: string, device: Device | undefined, input: readonly [string, Buffer], output: readonly [string, Buffer],
  dtypes: readonly DType[], elements: number,
): void {
  checkBuffer(op, input[0], input[1], device);
  checkBuffer(op, output[0], output[1], device);
  checkDtype(op, input[0], input[1], dtypes);
  checkDtype(op, output[0], output[1], input[1].dtype);
  checkElements(op, input[0], input[1], elements);
  checkElements(op, output[0], output[1], elements);
}
