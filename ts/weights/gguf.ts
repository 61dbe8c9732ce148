// GGUF (llama.cpp / ggml), versions 2 and 3, little-endian:
//
//   "GGUF", version u32, tensor_count u64, metadata_kv_count u64,
//   metadata: key (string), value type u32, value,
//   tensor infos: name (string), n_dims u32, dims u64[n_dims] (innermost first),
//                 ggml type u32, offset u64 (relative to the data section),
//   padding to the alignment, then the data section.
//
// A string is a u64 byte length and that many bytes of UTF-8; an array is its
// item type u32, a u64 count and the items. The alignment is the metadata
// value general.alignment (a u32 power of two), 32 where absent. Version 1
// (32-bit counts and lengths) is refused, and so is a big-endian file (its
// version reads byte-swapped). The layout follows ggml's docs/gguf.md; the
// type numbers and block sizes are ggml's (ggml.h, ggml-common.h).
//
// Checks, each refusal an MlxError naming the file, the key or tensor, what
// was expected and what was found, in O(header) time and memory (counts are
// held against the bytes left before anything is allocated): every read
// inside the file, key and tensor names UTF-8 and unique, tensor names under
// 64 bytes (ggml's GGML_MAX_NAME), at most 4 dimensions, a known ggml type,
// the innermost dimension a multiple of the type's block, sizes below 2^53,
// offsets multiples of the alignment, every tensor inside the data section
// and no two overlapping, booleans 0 or 1, arrays nested at most 4 deep.

import type { MlxError } from '../errors.ts';
import {
  decodeUtf8,
  elementProduct,
  fileError,
  givenBytes,
  mapFile,
  elementStorage,
  shown,
  type FileBytes,
  type TensorInfo,
  type TensorStorage,
} from './common.ts';
import { FileSource } from './source.ts';

/** A ggml tensor type: `blockSize` elements stored in `typeSize` bytes. */
export interface GgmlType {
  readonly id: number;
  readonly name: string;
  readonly blockSize: number;
  readonly typeSize: number;
  /** Stored as blocks of scales and packed values (uploaded as raw bytes, one row of blocks per innermost row). */
  readonly quantized: boolean;
}

const t = (id: number, name: string, blockSize: number, typeSize: number): GgmlType =>
  Object.freeze({ id, name, blockSize, typeSize, quantized: blockSize > 1 });

/**
 * Every ggml type a GGUF file may hold, by llama.cpp's numbers. Block bytes
 * are the sizes of ggml-common.h's block structs: e.g. Q4_0 = f16 scale + 16
 * bytes of nibbles = 18; Q4_K = f16 d, dmin + 12 bytes of 6-bit scales + 128
 * bytes of nibbles = 144 per 256; Q8_K = f32 d + 256 int8 + 16 int16 sums = 292.
 */
export const GGML_TYPES: readonly GgmlType[] = Object.freeze([
  t(0, 'F32', 1, 4), t(1, 'F16', 1, 2),
  t(2, 'Q4_0', 32, 18), t(3, 'Q4_1', 32, 20),
  t(6, 'Q5_0', 32, 22), t(7, 'Q5_1', 32, 24),
  t(8, 'Q8_0', 32, 34), t(9, 'Q8_1', 32, 36),
  t(10, 'Q2_K', 256, 84), t(11, 'Q3_K', 256, 110), t(12, 'Q4_K', 256, 144),
  t(13, 'Q5_K', 256, 176), t(14, 'Q6_K', 256, 210), t(15, 'Q8_K', 256, 292),
  t(16, 'IQ2_XXS', 256, 66), t(17, 'IQ2_XS', 256, 74), t(18, 'IQ3_XXS', 256, 98),
  t(19, 'IQ1_S', 256, 50), t(20, 'IQ4_NL', 32, 18), t(21, 'IQ3_S', 256, 110),
  t(22, 'IQ2_S', 256, 82), t(23, 'IQ4_XS', 256, 136),
  t(24, 'I8', 1, 1), t(25, 'I16', 1, 2), t(26, 'I32', 1, 4), t(27, 'I64', 1, 8), t(28, 'F64', 1, 8),
  t(29, 'IQ1_M', 256, 56), t(30, 'BF16', 1, 2),
  t(34, 'TQ1_0', 256, 54), t(35, 'TQ2_0', 256, 66), t(39, 'MXFP4', 32, 17),
]);

const BY_ID = new Map(GGML_TYPES.map((x) => [x.id, x]));
const BY_NAME = new Map(GGML_TYPES.map((x) => [x.name, x]));
/** Numbers ggml used once and dropped (Q4_2, Q4_3, the Q4_0_x_y and IQ4_NL_x_y repacks). */
const REMOVED_TYPES = new Set([4, 5, 31, 32, 33, 36, 37, 38]);

/** The ggml type of a number or name, or undefined. */
export function ggmlType(idOrName: number | string): GgmlType | undefined {
  return typeof idOrName === 'number' ? BY_ID.get(idOrName) : BY_NAME.get(idOrName);
}

export type GgufValueType = 'u8' | 'i8' | 'u16' | 'i16' | 'u32' | 'i32' | 'f32' | 'bool' | 'string' | 'array' | 'u64' | 'i64' | 'f64';
/** The metadata value types by their numbers in the file (index = number). */
export const GGUF_VALUE_TYPES: readonly GgufValueType[] = Object.freeze(['u8', 'i8', 'u16', 'i16', 'u32', 'i32', 'f32', 'bool', 'string', 'array', 'u64', 'i64', 'f64']);

export type GgufArrayItems =
  | Uint8Array | Int8Array | Uint16Array | Int16Array | Uint32Array | Int32Array | Float32Array
  | BigUint64Array | BigInt64Array | Float64Array
  | readonly boolean[] | readonly string[] | readonly GgufArray[];
/** An array value: numbers as a typed array of their type (a copy), booleans, strings or nested arrays as arrays. */
export interface GgufArray {
  readonly itemType: GgufValueType;
  readonly items: GgufArrayItems;
}
/** A metadata value with its type; 64-bit integers as bigint. */
export type GgufValue =
  | { readonly type: 'u8' | 'i8' | 'u16' | 'i16' | 'u32' | 'i32' | 'f32' | 'f64'; readonly value: number }
  | { readonly type: 'u64' | 'i64'; readonly value: bigint }
  | { readonly type: 'bool'; readonly value: boolean }
  | { readonly type: 'string'; readonly value: string }
  | { readonly type: 'array'; readonly value: GgufArray };

export interface GgufTensorInfo extends TensorInfo {
  readonly format: 'gguf';
  readonly ggmlType: GgmlType;
  /** Dimensions innermost first, as the file stores them (ggml's ne). */
  readonly dims: readonly number[];
  /** The offset the file gives, relative to the data section. */
  readonly dataOffset: number;
}

export interface GgufHeader {
  readonly version: number;
  readonly alignment: number;
  /** Where the data section starts in the file. */
  readonly dataStart: number;
  readonly metadata: ReadonlyMap<string, GgufValue>;
  /** Every tensor, in the order of its bytes. */
  readonly tensors: ReadonlyMap<string, GgufTensorInfo>;
}

export const GGUF_DEFAULT_ALIGNMENT = 32;
/** Tensor names are shorter than ggml's GGML_MAX_NAME (64, with the terminating NUL). */
export const GGUF_MAX_NAME_BYTES = 63;
/** Metadata keys are at most 65535 bytes (docs/gguf.md). */
export const GGUF_MAX_KEY_BYTES = 65535;
/** ggml's GGML_MAX_DIMS. */
export const GGUF_MAX_DIMS = 4;
const MAX_ARRAY_DEPTH = 4;
/** The fewest bytes one item of each value type takes (counts are checked against the bytes left with it). */
const MIN_ITEM_BYTES: Record<GgufValueType, number> = {
  u8: 1, i8: 1, bool: 1, u16: 2, i16: 2, u32: 4, i32: 4, f32: 4, u64: 8, i64: 8, f64: 8, string: 8, array: 12,
};
const TYPED: Partial<Record<GgufValueType, { size: number; make: (b: ArrayBuffer) => GgufArrayItems }>> = {
  u8: { size: 1, make: (b) => new Uint8Array(b) },
  i8: { size: 1, make: (b) => new Int8Array(b) },
  u16: { size: 2, make: (b) => new Uint16Array(b) },
  i16: { size: 2, make: (b) => new Int16Array(b) },
  u32: { size: 4, make: (b) => new Uint32Array(b) },
  i32: { size: 4, make: (b) => new Int32Array(b) },
  f32: { size: 4, make: (b) => new Float32Array(b) },
  u64: { size: 8, make: (b) => new BigUint64Array(b) },
  i64: { size: 8, make: (b) => new BigInt64Array(b) },
  f64: { size: 8, make: (b) => new Float64Array(b) },
};

type Err = (subject: string, expected: string, actual: string, kind?: 'InvalidArgument' | 'UnsupportedDtype') => MlxError;

/** Bounds-checked little-endian reads; every read names what it reads. */
class Cursor {
  pos = 0;
  private readonly dv: DataView;
  constructor(readonly bytes: Uint8Array, private readonly err: Err) {
    this.dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  get left(): number {
    return this.bytes.length - this.pos;
  }
  need(n: number, what: string): void {
    if (n > this.left) throw this.err(`${what} (at byte ${this.pos})`, `${n} bytes inside the file`, `${this.left} bytes left of ${this.bytes.length}; truncated?`);
  }
  u8(what: string): number {
    this.need(1, what);
    return this.bytes[this.pos++]!;
  }
  u32(what: string): number {
    this.need(4, what);
    const v = this.dv.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }
  u64(what: string): bigint {
    this.need(8, what);
    const v = this.dv.getBigUint64(this.pos, true);
    this.pos += 8;
    return v;
  }
  /** A u64 that must be an exact number (below 2^53). */
  size(what: string): number {
    const at = this.pos;
    const v = this.u64(what);
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw this.err(`${what} (at byte ${at})`, 'below 2^53', `${v}`);
    return Number(v);
  }
  string(what: string, maxBytes: number): string {
    const at = this.pos;
    const len = this.size(`${what} length`);
    if (len > maxBytes) throw this.err(`${what} length (at byte ${at})`, `at most ${maxBytes} bytes`, `${len}`);
    this.need(len, what);
    const s = decodeUtf8(this.bytes.subarray(this.pos, this.pos + len));
    if (s === null) throw this.err(`${what} (at byte ${this.pos})`, 'UTF-8 text', 'bytes that are not valid UTF-8');
    this.pos += len;
    return s;
  }
  scalar(type: GgufValueType, what: string): GgufValue {
    const at = this.pos;
    switch (type) {
      case 'u8':
        return { type, value: this.u8(what) };
      case 'i8':
        this.need(1, what);
        return { type, value: this.dv.getInt8(this.pos++) };
      case 'u16':
      case 'i16': {
        this.need(2, what);
        const value = type === 'u16' ? this.dv.getUint16(this.pos, true) : this.dv.getInt16(this.pos, true);
        this.pos += 2;
        return { type, value };
      }
      case 'u32':
      case 'i32':
      case 'f32': {
        this.need(4, what);
        const value = type === 'u32' ? this.dv.getUint32(this.pos, true) : type === 'i32' ? this.dv.getInt32(this.pos, true) : this.dv.getFloat32(this.pos, true);
        this.pos += 4;
        return { type, value };
      }
      case 'u64':
      case 'i64': {
        this.need(8, what);
        const value = type === 'u64' ? this.dv.getBigUint64(this.pos, true) : this.dv.getBigInt64(this.pos, true);
        this.pos += 8;
        return { type, value };
      }
      case 'f64': {
        this.need(8, what);
        const value = this.dv.getFloat64(this.pos, true);
        this.pos += 8;
        return { type, value };
      }
      case 'bool': {
        const b = this.u8(what);
        if (b > 1) throw this.err(`${what} (at byte ${at})`, 'a boolean byte, 0 or 1', `${b}`);
        return { type, value: b === 1 };
      }
      case 'string':
        // Values are bounded only by the file: a chat template or a vocabulary entry may be long.
        return { type, value: this.string(what, Number.MAX_SAFE_INTEGER) };
      case 'array':
        return { type, value: this.array(what, 1) };
    }
  }
  valueType(what: string): GgufValueType {
    const at = this.pos;
    const id = this.u32(what);
    const type = GGUF_VALUE_TYPES[id];
    if (type === undefined) throw this.err(`${what} (at byte ${at})`, `a value type 0 to ${GGUF_VALUE_TYPES.length - 1}`, `${id}`);
    return type;
  }
  array(what: string, depth: number): GgufArray {
    const itemType = this.valueType(`${what} item type`);
    const at = this.pos;
    const count = this.size(`${what} count`);
    if (itemType === 'array' && depth >= MAX_ARRAY_DEPTH) throw this.err(`${what} (at byte ${at})`, `arrays nested at most ${MAX_ARRAY_DEPTH} deep`, 'a deeper array');
    if (count > Math.floor(this.left / MIN_ITEM_BYTES[itemType])) {
      throw this.err(`${what} count (at byte ${at})`, `at most the ${Math.floor(this.left / MIN_ITEM_BYTES[itemType])} items of ${itemType} that the ${this.left} bytes left can hold`, `${count}`);
    }
    const typed = TYPED[itemType];
    if (typed !== undefined) {
      const n = count * typed.size;
      const items = typed.make(this.bytes.slice(this.pos, this.pos + n).buffer as ArrayBuffer);
      this.pos += n;
      return { itemType, items };
    }
    const items: (boolean | string | GgufArray)[] = new Array(count);
    for (let i = 0; i < count; i++) {
      const itemWhat = `${what}[${i}]`;
      if (itemType === 'array') items[i] = this.array(itemWhat, depth + 1);
      else items[i] = this.scalar(itemType, itemWhat).value as boolean | string;
    }
    return { itemType, items: items as readonly boolean[] | readonly string[] | readonly GgufArray[] };
  }
}

function storageOf(type: GgmlType, shape: readonly number[]): TensorStorage {
  if (!type.quantized) return elementStorage(type.name, shape, type.typeSize as 1 | 2 | 4 | 8);
  // Quantized: one row of blocks per innermost row, so rows (and experts) slice like any tensor.
  const ne0 = shape[shape.length - 1]!;
  return { dtype: 'u8', shape: [...shape.slice(0, -1), (ne0 / type.blockSize) * type.typeSize], raw: true };
}

/**
 * Parses and checks the header of a GGUF file held in `bytes`; `file` names
 * it in messages. Costs O(header); the data section is only measured.
 */
export function parseGguf(bytes: Uint8Array, file: string): GgufHeader {
  const err: Err = (subject, expected, actual, kind = 'InvalidArgument') => fileError('gguf', file, subject, expected, actual, kind);
  const c = new Cursor(bytes, err);
  c.need(4, 'the magic');
  if (bytes[0] !== 0x47 || bytes[1] !== 0x47 || bytes[2] !== 0x55 || bytes[3] !== 0x46) {
    throw err('the magic (bytes 0 to 4)', '"GGUF"', shown(String.fromCharCode(...bytes.subarray(0, 4))));
  }
  c.pos = 4;
  const version = c.u32('the version');
  if (version !== 2 && version !== 3) {
    const swapped = ((version & 0xff) << 24 | (version & 0xff00) << 8 | (version >>> 8) & 0xff00 | version >>> 24) >>> 0;
    if (swapped === 2 || swapped === 3) throw err('the version', '2 or 3, little-endian', `${version}: a big-endian file, which this reader does not take`);
    throw err('the version', '2 or 3', version === 1 ? '1 (32-bit counts, superseded by version 2)' : `${version}`);
  }
  const tensorCount = c.size('the tensor count');
  const kvCount = c.size('the metadata count');
  // Each key-value pair takes at least 13 bytes (key length, value type, one byte of value), each tensor info 24.
  if (kvCount > Math.floor(c.left / 13)) throw err('the metadata count (at byte 16)', `at most ${Math.floor(c.left / 13)} for the ${c.left} bytes left`, `${kvCount}`);
  if (tensorCount > Math.floor((c.left - kvCount * 13) / 24)) {
    throw err('the tensor count (at byte 8)', `at most ${Math.floor((c.left - kvCount * 13) / 24)} for the ${c.left} bytes left`, `${tensorCount}`);
  }

  const metadata = new Map<string, GgufValue>();
  for (let i = 0; i < kvCount; i++) {
    const keyAt = c.pos;
    const key = c.string(`metadata key ${i}`, GGUF_MAX_KEY_BYTES);
    if (metadata.has(key)) throw err(`the metadata key ${shown(key)} (at byte ${keyAt})`, 'unique', 'a second entry');
    const what = `the metadata value of ${shown(key)}`;
    metadata.set(key, c.scalar(c.valueType(`${what} type`), what));
  }

  let alignment = GGUF_DEFAULT_ALIGNMENT;
  const a = metadata.get('general.alignment');
  if (a !== undefined) {
    if (a.type !== 'u32') throw err('the metadata value of "general.alignment"', 'a u32', `a ${a.type}`);
    if (a.value === 0 || (a.value & (a.value - 1)) !== 0) throw err('the metadata value of "general.alignment"', 'a power of two', `${a.value}`);
    alignment = a.value;
  }

  const infos: { name: string; dims: number[]; type: GgmlType; offset: number; bytes: number; at: number }[] = [];
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const at = c.pos;
    const name = c.string(`the name of tensor info ${i}`, GGUF_MAX_NAME_BYTES);
    if (names.has(name)) throw err(`the tensor name ${shown(name)} (tensor info ${i}, at byte ${at})`, 'unique', 'a second entry');
    names.add(name);
    const what = `the tensor ${shown(name)}`;
    const nDims = c.u32(`${what} dimension count`);
    if (nDims > GGUF_MAX_DIMS) throw err(`${what} dimension count`, `at most ${GGUF_MAX_DIMS}`, `${nDims}`);
    const dims: number[] = [];
    for (let d = 0; d < nDims; d++) dims.push(c.size(`${what} dims[${d}]`));
    const typeAt = c.pos;
    const typeId = c.u32(`${what} type`);
    const type = BY_ID.get(typeId);
    if (type === undefined) {
      throw err(`${what} type (at byte ${typeAt})`, 'a ggml type number', REMOVED_TYPES.has(typeId) ? `${typeId}, a type ggml has removed` : `${typeId}`, 'UnsupportedDtype');
    }
    const offset = c.size(`${what} offset`);
    const elements = elementProduct(dims);
    if (elements < 0) throw err(`${what} dims`, 'a product below 2^53', `[${dims.join(', ')}]`);
    const ne0 = nDims === 0 ? 1 : dims[0]!;
    if (ne0 % type.blockSize !== 0) throw err(`${what} dims[0] (innermost)`, `a multiple of the ${type.name} block of ${type.blockSize}`, `${ne0}`);
    const byteCount = (elements / type.blockSize) * type.typeSize;
    if (!Number.isSafeInteger(byteCount)) throw err(`${what} byte size`, 'below 2^53', `[${dims.join(', ')}] of ${type.name}, which overflows`);
    if (offset % alignment !== 0) throw err(`${what} offset`, `a multiple of the alignment ${alignment}`, `${offset}`);
    infos.push({ name, dims, type, offset, bytes: byteCount, at });
  }

  const dataStart = Math.ceil(c.pos / alignment) * alignment;
  if (infos.length > 0 && dataStart > bytes.length) {
    throw err(`the data section start (byte ${dataStart})`, 'inside the file', `a file of ${bytes.length} bytes; truncated?`);
  }
  const dataLength = Math.max(0, bytes.length - dataStart);
  for (const x of infos) {
    if (x.offset > dataLength || x.bytes > dataLength - x.offset) {
      throw err(`the tensor ${shown(x.name)} data`, `inside the ${dataLength}-byte data section`, `bytes ${x.offset} to ${x.offset + x.bytes} of it; truncated?`);
    }
  }
  const order = [...infos].sort((p, q) => p.offset - q.offset || p.bytes - q.bytes);
  for (let i = 1; i < order.length; i++) {
    const p = order[i - 1]!;
    const q = order[i]!;
    if (q.offset < p.offset + p.bytes) {
      throw err(`the tensor ${shown(q.name)} data (bytes ${q.offset} to ${q.offset + q.bytes})`, `clear of the tensor ${shown(p.name)} (bytes ${p.offset} to ${p.offset + p.bytes})`, 'an overlap');
    }
  }

  const tensors = new Map<string, GgufTensorInfo>();
  for (const x of order) {
    const shape = [...x.dims].reverse();
    tensors.set(x.name, {
      name: x.name,
      format: 'gguf' as const,
      file,
      dtype: x.type.name,
      shape,
      elementCount: elementProduct(shape),
      byteOffset: dataStart + x.offset,
      byteLength: x.bytes,
      storage: storageOf(x.type, shape),
      ggmlType: x.type,
      dims: x.dims,
      dataOffset: x.offset,
    });
  }
  return { version, alignment, dataStart, metadata, tensors };
}

/** The value as plain JavaScript: numbers, bigints (64-bit integers), booleans, strings, arrays (typed for numbers). */
function plain(v: GgufValue): unknown {
  return v.type === 'array' ? v.value.items : v.value;
}

/** One GGUF file, mapped into memory and checked. */
export class GgufFile extends FileSource<GgufTensorInfo> {
  readonly version: number;
  readonly alignment: number;
  readonly metadata: ReadonlyMap<string, GgufValue>;

  /** `h`: the file's header, parsed as the file is given. */
  private constructor(file: FileBytes, h = parseGguf(file.bytes, file.path)) {
    super('gguf', file, h);
    this.version = h.version;
    this.alignment = h.alignment;
    this.metadata = h.metadata;
  }

  /** Maps the file (Bun.mmap, read-only) and checks its header. */
  static open(path: string): GgufFile {
    return new GgufFile(mapFile('gguf', path));
  }

  /** A file already in memory; `name` stands for its path in messages. */
  static fromBytes(bytes: Uint8Array, name = '<memory>'): GgufFile {
    return new GgufFile(givenBytes('gguf', bytes, name));
  }

  /** general.architecture ('qwen35moe', 'gemma4', ...), or null. */
  get architecture(): string | null {
    const v = this.metadata.get('general.architecture');
    return v?.type === 'string' ? v.value : null;
  }

  /** The value of a key as plain JavaScript, or undefined where absent. */
  get(key: string): unknown {
    const v = this.metadata.get(key);
    return v === undefined ? undefined : plain(v);
  }

  /** A numeric scalar (64-bit integers converted where below 2^53), or undefined where absent; MlxError for another type. */
  getNumber(key: string): number | undefined {
    const v = this.metadata.get(key);
    if (v === undefined) return undefined;
    if (v.type === 'u64' || v.type === 'i64') {
      if (v.value > BigInt(Number.MAX_SAFE_INTEGER) || v.value < -BigInt(Number.MAX_SAFE_INTEGER)) {
        throw fileError('gguf', this.path, `the metadata value of ${shown(key)}`, 'a number below 2^53', `${v.value}`);
      }
      return Number(v.value);
    }
    if (typeof v.value === 'number') return v.value;
    throw fileError('gguf', this.path, `the metadata value of ${shown(key)}`, 'a number', `a ${v.type}`);
  }

  /** A string value, or undefined where absent; MlxError for another type. */
  getString(key: string): string | undefined {
    const v = this.metadata.get(key);
    if (v === undefined) return undefined;
    if (v.type !== 'string') throw fileError('gguf', this.path, `the metadata value of ${shown(key)}`, 'a string', `a ${v.type}`);
    return v.value;
  }
}
