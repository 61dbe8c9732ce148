// Argument checks shared by the ops. Every message names the op, the
// argument, what was expected and what was given:
//   "<op>: <arg> must be <expected> (got <actual>)"

import { Buffer } from './buffer.ts';
import type { DType } from './dtype.ts';
import { MlxError } from './errors.ts';

function show(actual: unknown): string {
  if (Array.isArray(actual)) return `[${actual.map(show).join(', ')}]`;
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

/** value is a Buffer (or a view) that is not released: what every op binds. */
export function checkBuffer(op: string, arg: string, value: unknown): asserts value is Buffer {
  if (!(value instanceof Buffer)) {
    const got = value === null || value === undefined ? String(value) : typeof value === 'object' ? `a ${(value as object).constructor?.name ?? 'object'}` : `${typeof value} ${String(value)}`;
    throw invalid(op, arg, 'a Buffer', got);
  }
  if (value.released) throw invalid(op, arg, 'a live buffer', 'a released buffer (or one of a closed device)');
}

/** The buffer's dtype is `dtype`, or one of them. */
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

/** The two buffers share bytes: the same allocation, with overlapping ranges. */
export function overlaps(a: Buffer, b: Buffer): boolean {
  return a.root === b.root && a.byteOffset < b.byteOffset + b.byteLength && b.byteOffset < a.byteOffset + a.byteLength;
}

/**
 * Each output shares no memory with the inputs or the other outputs listed:
 * a kernel that reads one place while another thread writes an overlapping
 * one gives wrong results. Pairs a kernel supports (in place) are left out by
 * the caller. Names are the arguments'.
 */
export function checkNoOverlap(op: string, outputs: readonly (readonly [string, Buffer])[], inputs: readonly (readonly [string, Buffer | undefined])[]): void {
  for (let i = 0; i < outputs.length; i++) {
    const [name, out] = outputs[i]!;
    for (const [other, buf] of [...inputs, ...outputs.slice(i + 1)]) {
      if (buf !== undefined && overlaps(out, buf)) throw invalid(op, name, `a buffer that shares no memory with ${other}`, `one that does`);
    }
  }
}
