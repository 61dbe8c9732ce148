// What the weight readers share: the tensor description both formats give,
// the device storage an upload makes of a tensor, the file mapping, and the
// words of every refusal.

import { statSync } from 'node:fs';
import type { DType } from '../dtype.ts';
import { MlxError, type MlxErrorKind } from '../errors.ts';

export type WeightFormat = 'safetensors' | 'gguf';

/**
 * What an upload makes of a tensor: a device dtype and shape. `raw` says the
 * device dtype only carries the bytes (quantized blocks, i8 / bool / fp8 as
 * u8, i16 as u16, 64-bit elements as pairs of u32 along the last axis).
 */
export interface TensorStorage {
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly raw: boolean;
}

/** One tensor of a weight file, as its header describes it (checked against the file). */
export interface TensorInfo {
  readonly name: string;
  readonly format: WeightFormat;
  /** The file that holds its bytes (the path given, or the name given to fromBytes). */
  readonly file: string;
  /** The format's own type name: a safetensors dtype ('BF16', 'F8_E4M3', ...) or a ggml type ('Q4_K', 'F32', ...). */
  readonly dtype: string;
  /** Outermost dimension first (GGUF's dims reversed), as PyTorch and safetensors write it. */
  readonly shape: readonly number[];
  readonly elementCount: number;
  /** Where its bytes start in the file. */
  readonly byteOffset: number;
  readonly byteLength: number;
  readonly storage: TensorStorage;
}

/** The value as a message shows it: strings quoted with control characters escaped, cut past 120 characters. */
export function shown(v: unknown): string {
  if (typeof v === 'string') {
    const s = v.length > 120 ? `${v.slice(0, 120)}...` : v;
    return JSON.stringify(s);
  }
  if (typeof v === 'bigint') return `${v}`;
  if (Array.isArray(v)) return v.length > 8 ? `[${v.slice(0, 8).map(shown).join(', ')}, ... (${v.length} items)]` : `[${v.map(shown).join(', ')}]`;
  if (v === null) return 'null';
  if (typeof v === 'object') return `a ${(v as object).constructor?.name ?? 'null-prototype'} object`;
  return String(v);
}

/**
 * The refusal of a weight file: "<format> <file>: <subject> must be <expected>
 * (got <actual>)", the words of ts/validate.ts with the file in place of the op.
 */
export function fileError(
  format: WeightFormat | 'safetensors index',
  file: string,
  subject: string,
  expected: string,
  actual: string,
  kind: MlxErrorKind = 'InvalidArgument',
): MlxError {
  return new MlxError(kind, `${format} ${file}: ${subject} must be ${expected} (got ${actual})`);
}

/** A refusal of an API argument (not of the file): "<op>: <arg> must be <expected> (got <actual>)". */
export function argError(op: string, arg: string, expected: string, actual: unknown): MlxError {
  return new MlxError('InvalidArgument', `${op}: ${arg} must be ${expected} (got ${typeof actual === 'string' ? actual : shown(actual)})`);
}

/** The product of the dimensions, or -1 where it passes 2^53 - 1 (checked after each factor, so it never loses exactness unseen). */
export function elementProduct(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) {
    n *= d;
    if (!Number.isSafeInteger(n)) return -1;
  }
  return n;
}

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The bytes as UTF-8, or null where they are not valid UTF-8. */
export function decodeUtf8(bytes: Uint8Array): string | null {
  try {
    return utf8.decode(bytes);
  } catch {
    return null;
  }
}

/** The element types that uploads keep as the device dtype of the same name; the others are raw. */
const DEVICE_DTYPES: Readonly<Record<string, DType>> = { F32: 'f32', F16: 'f16', BF16: 'bf16', I32: 'i32', U32: 'u32', U16: 'u16', U8: 'u8' };

/** The storage of elements of a format's type `dtype`, `size` bytes each: its device dtype, else raw. */
export function elementStorage(dtype: string, shape: readonly number[], size: 1 | 2 | 4 | 8): TensorStorage {
  const d = DEVICE_DTYPES[dtype];
  return d === undefined ? rawStorage(shape, size) : { dtype: d, shape, raw: false };
}

/** Elements of `size` bytes stored as the device dtype of that size, 64-bit ones as u32 pairs. */
export function rawStorage(shape: readonly number[], size: 1 | 2 | 4 | 8): TensorStorage {
  if (size === 8) {
    const last = shape.length === 0 ? 1 : shape[shape.length - 1]!;
    return { dtype: 'u32', shape: [...shape.slice(0, -1), last * 2], raw: true };
  }
  return { dtype: size === 1 ? 'u8' : size === 2 ? 'u16' : 'u32', shape: [...shape], raw: true };
}

/** A mapped (or given) file: its bytes and the name messages use. */
export interface FileBytes {
  readonly path: string;
  readonly bytes: Uint8Array;
  /** Mapped from the file at `path` (false: bytes given under a name). */
  readonly mapped: boolean;
}

/**
 * Maps the file read-only into memory (Bun.mmap, MAP_PRIVATE: writes to the
 * array never reach the file). The pages are read from the file as they are
 * touched; the mapping lives while the array is referenced. An empty file
 * has no mapping (mmap refuses length 0) and gives an empty array. The file
 * must not be truncated while mapped: touching a page past the new end
 * raises SIGBUS.
 */
export function mapFile(format: WeightFormat | 'safetensors index', path: string): FileBytes {
  if (typeof path !== 'string' || path.length === 0) throw argError(`${format}: open`, 'path', 'a non-empty file path', shown(path));
  let size: number;
  try {
    const st = statSync(path);
    if (!st.isFile()) throw fileError(format, path, 'the path', 'a regular file', st.isDirectory() ? 'a directory' : 'another kind of file');
    size = st.size;
  } catch (e) {
    if (e instanceof MlxError) throw e;
    throw fileError(format, path, 'the path', 'a readable file', (e as Error).message);
  }
  if (size === 0) return { path, bytes: new Uint8Array(0), mapped: true };
  try {
    return { path, bytes: Bun.mmap(path, { shared: false }), mapped: true };
  } catch (e) {
    throw fileError(format, path, 'the file', 'mappable into memory', (e as Error).message);
  }
}

/** In-memory bytes under a name (tests, files already read, network buffers). */
export function givenBytes(format: WeightFormat, bytes: Uint8Array, name: string): FileBytes {
  if (!(bytes instanceof Uint8Array)) throw argError(`${format}: fromBytes`, 'bytes', 'a Uint8Array', bytes);
  if (typeof name !== 'string' || name.length === 0) throw argError(`${format}: fromBytes`, 'name', 'a non-empty string', shown(name));
  return { path: name, bytes, mapped: false };
}
