// Element types and the f16 / bf16 conversions.
//
// Conversions from numbers first round the number to f32 (Math.fround), then
// from f32 to the 16-bit type with round-to-nearest-even, as a GPU's f32 ->
// half conversion does. Infinities, signed zeros and subnormals are kept;
// NaN stays NaN. The array functions work on bit patterns, so a Float32Array
// NaN keeps its payload's top bits and fromF16/fromBf16 write exact patterns;
// the scalar functions pass through JS numbers, where the engine may
// canonicalize a NaN's payload.

import { MlxError } from './errors.ts';

export type DType = 'f32' | 'f16' | 'bf16' | 'u8' | 'u16' | 'u32' | 'i32';

/** The storage types of the dtypes: f32 Float32Array, f16 Float16Array, bf16/u16 Uint16Array, u8, u32, i32. */
export type TypedArray = Float32Array | Float16Array | Uint16Array | Uint8Array | Uint32Array | Int32Array;

export const DTYPES: readonly DType[] = ['f32', 'f16', 'bf16', 'u8', 'u16', 'u32', 'i32'];

const SIZES: Record<DType, number> = { f32: 4, f16: 2, bf16: 2, u8: 1, u16: 2, u32: 4, i32: 4 };

export function isDType(x: unknown): x is DType {
  return typeof x === 'string' && Object.hasOwn(SIZES, x);
}

/** Bytes per element. */
export function dtypeSize(d: DType): number {
  const s = SIZES[d];
  if (s === undefined) throw new MlxError('UnsupportedDtype', `dtypeSize: dtype must be one of ${DTYPES.join(', ')} (got ${String(d)})`);
  return s;
}

// Scratch for reinterpreting one f32 (module-private, single-threaded).
const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);

function f32Bits(x: number): number {
  scratchF32[0] = x;
  return scratchU32[0]!;
}

function bitsF32(b: number): number {
  scratchU32[0] = b;
  return scratchF32[0]!;
}

/** f32 bit pattern -> f16 bit pattern, round-to-nearest-even. */
export function f32BitsToF16Bits(f: number): number {
  const sign = (f >>> 16) & 0x8000;
  const exp = (f >>> 23) & 0xff;
  const mant = f & 0x7fffff;
  if (exp === 0xff) {
    // Inf, or NaN keeping the payload's top 10 bits (never letting it become Inf).
    return mant === 0 ? sign | 0x7c00 : sign | 0x7c00 | (mant >>> 13 || 0x200);
  }
  const e = exp - 112; // f16 biased exponent
  if (e >= 31) return sign | 0x7c00;
  if (e >= 1) {
    let h = (e << 10) | (mant >>> 13);
    const rest = mant & 0x1fff;
    if (rest > 0x1000 || (rest === 0x1000 && (h & 1) !== 0)) h++; // a carry may reach Inf: correct
    return sign | h;
  }
  // f16 subnormal or zero: the value is m * 2^-24 with m = M >> shift, M the
  // 24-bit significand.
  if (exp === 0) return sign; // f32 subnormals are far below 2^-25
  const shift = 126 - exp; // >= 14
  if (shift > 24) return sign;
  const M = mant | 0x800000;
  let h = M >>> shift;
  const rest = M & ((1 << shift) - 1);
  const half = 1 << (shift - 1);
  if (rest > half || (rest === half && (h & 1) !== 0)) h++;
  return sign | h;
}

/** f16 bit pattern -> f32 bit pattern (exact). */
export function f16BitsToF32Bits(h: number): number {
  const sign = (h & 0x8000) << 16;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0x1f) return (sign | 0x7f800000 | (m << 13)) >>> 0;
  if (e !== 0) return (sign | ((e + 112) << 23) | (m << 13)) >>> 0;
  if (m === 0) return sign >>> 0;
  // Subnormal: normalize so the leading 1 becomes the implicit bit.
  let shift = 0;
  let mm = m;
  while ((mm & 0x400) === 0) {
    mm <<= 1;
    shift++;
  }
  return (sign | ((113 - shift) << 23) | ((mm & 0x3ff) << 13)) >>> 0;
}

/** f32 bit pattern -> bf16 bit pattern, round-to-nearest-even. */
export function f32BitsToBf16Bits(f: number): number {
  if ((f & 0x7fffffff) > 0x7f800000) {
    const h = f >>> 16;
    return (h & 0x7f) === 0 ? h | 0x40 : h; // NaN whose payload sits only in the low half
  }
  return ((f >>> 0) + 0x7fff + ((f >>> 16) & 1)) >>> 16;
}

export function f32ToF16Bits(x: number): number {
  return f32BitsToF16Bits(f32Bits(x));
}

export function f16BitsToF32(h: number): number {
  return bitsF32(f16BitsToF32Bits(h & 0xffff));
}

export function f32ToBf16Bits(x: number): number {
  return f32BitsToBf16Bits(f32Bits(x));
}

export function bf16BitsToF32(h: number): number {
  return bitsF32((h & 0xffff) << 16);
}

// f16 -> f32 bits for all 65536 patterns, built on first use (256 KiB).
let f16Table: Uint32Array | null = null;
function f16ToF32Table(): Uint32Array {
  if (f16Table === null) {
    f16Table = new Uint32Array(65536);
    for (let h = 0; h < 65536; h++) f16Table[h] = f16BitsToF32Bits(h);
  }
  return f16Table;
}

/** The f32 bit patterns of a, read without passing through JS numbers where a is a Float32Array. */
function forEachF32Bits(a: ArrayLike<number>, out: Uint16Array, conv: (bits: number) => number): Uint16Array {
  if (a instanceof Float32Array) {
    const bits = new Uint32Array(a.buffer, a.byteOffset, a.length);
    for (let i = 0; i < bits.length; i++) out[i] = conv(bits[i]!);
  } else {
    for (let i = 0; i < a.length; i++) out[i] = conv(f32Bits(a[i]!));
  }
  return out;
}

export function toF16(a: ArrayLike<number>): Uint16Array {
  return forEachF32Bits(a, new Uint16Array(a.length), f32BitsToF16Bits);
}

export function fromF16(a: Uint16Array): Float32Array {
  const table = f16ToF32Table();
  const bits = new Uint32Array(a.length);
  for (let i = 0; i < a.length; i++) bits[i] = table[a[i]!]!;
  return new Float32Array(bits.buffer);
}

export function toBf16(a: ArrayLike<number>): Uint16Array {
  return forEachF32Bits(a, new Uint16Array(a.length), f32BitsToBf16Bits);
}

export function fromBf16(a: Uint16Array): Float32Array {
  const bits = new Uint32Array(a.length);
  for (let i = 0; i < a.length; i++) bits[i] = a[i]! << 16;
  return new Float32Array(bits.buffer);
}

/** A typed array of `count` elements of the dtype's raw storage type. */
export function newTypedArray(dtype: DType, count: number): TypedArray {
  switch (dtype) {
    case 'f32':
      return new Float32Array(count);
    case 'f16':
      return new Float16Array(count);
    case 'bf16':
    case 'u16':
      return new Uint16Array(count);
    case 'u8':
      return new Uint8Array(count);
    case 'u32':
      return new Uint32Array(count);
    case 'i32':
      return new Int32Array(count);
  }
}

/** A typed array viewing `bytes` (length a multiple of the element size) as the dtype's storage type. */
export function viewAs(dtype: DType, buf: ArrayBuffer, byteOffset: number, count: number): TypedArray {
  switch (dtype) {
    case 'f32':
      return new Float32Array(buf, byteOffset, count);
    case 'f16':
      return new Float16Array(buf, byteOffset, count);
    case 'bf16':
    case 'u16':
      return new Uint16Array(buf, byteOffset, count);
    case 'u8':
      return new Uint8Array(buf, byteOffset, count);
    case 'u32':
      return new Uint32Array(buf, byteOffset, count);
    case 'i32':
      return new Int32Array(buf, byteOffset, count);
  }
}

const INT_RANGES: Partial<Record<DType, [number, number]>> = {
  u8: [0, 0xff],
  u16: [0, 0xffff],
  u32: [0, 0xffffffff],
  i32: [-0x80000000, 0x7fffffff],
};

/**
 * Numbers -> the dtype's raw storage: f32 rounded, f16/bf16 rounded to nearest
 * even, integers checked to be integral and in range (an MlxError names the
 * first offender, `what` naming the caller).
 */
export function encodeNumbers(dtype: DType, data: ArrayLike<number>, what: string): TypedArray {
  switch (dtype) {
    case 'f32':
      return Float32Array.from(data);
    case 'f16':
      return toF16(data);
    case 'bf16':
      return toBf16(data);
    default: {
      const [lo, hi] = INT_RANGES[dtype]!;
      const out = newTypedArray(dtype, data.length);
      for (let i = 0; i < data.length; i++) {
        const v = data[i]!;
        if (!Number.isInteger(v) || v < lo || v > hi) {
          throw new MlxError('InvalidArgument', `${what}: element ${i} must be an integer in [${lo}, ${hi}] for dtype ${dtype} (got ${v})`);
        }
        out[i] = v;
      }
      return out;
    }
  }
}

/** The dtype's raw storage (f16 as Float16Array or bit patterns) -> numbers (f16/bf16 decoded). */
export function decodeNumbers(dtype: DType, raw: TypedArray): Float64Array {
  const out = new Float64Array(raw.length);
  if (raw instanceof Float16Array) {
    out.set(raw);
  } else if (dtype === 'f16') {
    const table = f16ToF32Table();
    for (let i = 0; i < raw.length; i++) out[i] = bitsF32(table[raw[i]!]!);
  } else if (dtype === 'bf16') {
    for (let i = 0; i < raw.length; i++) out[i] = bitsF32(raw[i]! << 16);
  } else {
    out.set(raw);
  }
  return out;
}

/** The typed arrays a buffer of the dtype takes as they are (f16 also its bit patterns, as Uint16Array). */
const STORAGE: Record<DType, readonly string[]> = {
  f32: ['Float32Array'],
  f16: ['Float16Array', 'Uint16Array'],
  bf16: ['Uint16Array'],
  u8: ['Uint8Array'],
  u16: ['Uint16Array'],
  u32: ['Uint32Array'],
  i32: ['Int32Array'],
};

/** The names of the typed arrays whose elements are the dtype's storage (see Buffer.write). */
export function storageTypes(dtype: DType): readonly string[] {
  return STORAGE[dtype];
}

/** The typed array's type name ('Float32Array', ...; a Node Buffer is a Uint8Array), or null for a DataView. */
export function typedArrayName(data: ArrayBufferView): string | null {
  const tag = Object.prototype.toString.call(data).slice(8, -1);
  return tag === 'DataView' ? null : tag;
}
