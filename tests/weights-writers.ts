// Writers of safetensors and GGUF files for the weight readers' tests and the
// demo's weights rows (not shipped). Each writes what the format's own writers write, and lets a
// test change what a malicious or broken writer would: the header text, the
// length field, offsets, counts, types. The GGUF writer also returns where
// each header field lies, so the fuzz can edit fields in place.

import { ggmlType, GGUF_VALUE_TYPES, type GgufArray, type GgufValue } from '../ts/weights/index.ts';
import type { Rng } from './helpers.ts';

/** Random bytes, never all zero: every upload round trip then compares real contents. */
export function randomBytes(rng: Rng, n: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.floor(rng.next() * 256);
  if (n > 0) out[0] = out[0]! | 1;
  return out;
}

// ---- safetensors ----

export interface StTensor {
  name: string;
  dtype: string;
  shape: number[];
  data: Uint8Array;
}

export interface StOptions {
  metadata?: Record<string, string>;
  /** The JSON header text, written as given instead of the one the tensors make. */
  header?: string;
  /** The length field, written as given instead of the header's length. */
  lengthField?: bigint;
  /** Spaces after the JSON so the data starts at a multiple of 8, as the reference writer does (default true). */
  pad?: boolean;
  /** Bytes appended after the data. */
  trailing?: Uint8Array;
}

/** The JSON header of the tensors, offsets in the given order. */
export function safetensorsHeader(tensors: StTensor[], metadata?: Record<string, string>): Record<string, unknown> {
  const h: Record<string, unknown> = {};
  // defineProperty: a tensor named "__proto__" is a key like any other, not the prototype.
  const set = (k: string, v: unknown) => Object.defineProperty(h, k, { value: v, enumerable: true, writable: true, configurable: true });
  if (metadata !== undefined) set('__metadata__', metadata);
  let at = 0;
  for (const t of tensors) {
    set(t.name, { dtype: t.dtype, shape: t.shape, data_offsets: [at, at + t.data.length] });
    at += t.data.length;
  }
  return h;
}

export function safetensorsBytes(tensors: StTensor[], opts: StOptions = {}): Uint8Array {
  let text = opts.header ?? JSON.stringify(safetensorsHeader(tensors, opts.metadata));
  if (opts.pad !== false) while ((8 + new TextEncoder().encode(text).length) % 8 !== 0) text += ' ';
  const json = new TextEncoder().encode(text);
  const dataLen = tensors.reduce((s, t) => s + t.data.length, 0);
  const trailing = opts.trailing ?? new Uint8Array(0);
  const out = new Uint8Array(8 + json.length + dataLen + trailing.length);
  new DataView(out.buffer).setBigUint64(0, opts.lengthField ?? BigInt(json.length), true);
  out.set(json, 8);
  let at = 8 + json.length;
  for (const t of tensors) {
    out.set(t.data, at);
    at += t.data.length;
  }
  out.set(trailing, at);
  return out;
}

// ---- GGUF ----

export interface GgufTensorSpec {
  name: string;
  /** A ggml type name, or a number written as is. */
  type: string | number;
  /** Innermost first, as the file stores them. */
  dims: number[];
  /** Default: random bytes of the type's size. */
  data?: Uint8Array;
  /** Default: the next multiple of the alignment after the previous tensor. */
  offset?: number;
}

export interface GgufSpec {
  version?: number;
  /** Written as a u32 general.alignment first; absent: the default 32 applies. */
  alignment?: number;
  metadata?: [string, GgufValue][];
  tensors?: GgufTensorSpec[];
  /** Data bytes cut off the end. */
  cut?: number;
}

/** Where a header field lies (for edits in place). */
export interface GgufField {
  what: string;
  at: number;
  size: number;
}

export interface GgufWritten {
  bytes: Uint8Array;
  fields: GgufField[];
  /** Where the data section starts. */
  dataStart: number;
  /** Each tensor's bytes (as written). */
  data: Map<string, Uint8Array>;
}

/** The bytes a scalar value takes (a string: its length field). */
const SCALAR_BYTES: Record<string, number> = { u8: 1, i8: 1, bool: 1, u16: 2, i16: 2, u32: 4, i32: 4, f32: 4, u64: 8, i64: 8, f64: 8, string: 8 };

class Out {
  private buf = new Uint8Array(256);
  private dv = new DataView(this.buf.buffer);
  len = 0;
  readonly fields: GgufField[] = [];
  private grow(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let cap = this.buf.length;
    while (cap < this.len + n) cap *= 2;
    const b = new Uint8Array(cap);
    b.set(this.buf.subarray(0, this.len));
    this.buf = b;
    this.dv = new DataView(b.buffer);
  }
  field(what: string, size: number): void {
    this.fields.push({ what, at: this.len, size });
  }
  u8(v: number, what?: string): void {
    if (what !== undefined) this.field(what, 1);
    this.grow(1);
    this.dv.setUint8(this.len, v);
    this.len += 1;
  }
  u32(v: number, what?: string): void {
    if (what !== undefined) this.field(what, 4);
    this.grow(4);
    this.dv.setUint32(this.len, v >>> 0, true);
    this.len += 4;
  }
  u64(v: number | bigint, what?: string): void {
    if (what !== undefined) this.field(what, 8);
    this.grow(8);
    this.dv.setBigUint64(this.len, BigInt(v), true);
    this.len += 8;
  }
  bytes(b: Uint8Array): void {
    this.grow(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
  }
  string(s: string, what?: string): void {
    const b = new TextEncoder().encode(s);
    this.u64(b.length, what === undefined ? undefined : `${what} length`);
    this.bytes(b);
  }
  typed(type: string, v: number | bigint | boolean | string): void {
    this.grow(8);
    switch (type) {
      case 'u8': this.dv.setUint8(this.len, v as number); this.len += 1; break;
      case 'i8': this.dv.setInt8(this.len, v as number); this.len += 1; break;
      case 'bool': this.dv.setUint8(this.len, v ? 1 : 0); this.len += 1; break;
      case 'u16': this.dv.setUint16(this.len, v as number, true); this.len += 2; break;
      case 'i16': this.dv.setInt16(this.len, v as number, true); this.len += 2; break;
      case 'u32': this.dv.setUint32(this.len, v as number, true); this.len += 4; break;
      case 'i32': this.dv.setInt32(this.len, v as number, true); this.len += 4; break;
      case 'f32': this.dv.setFloat32(this.len, v as number, true); this.len += 4; break;
      case 'u64': this.dv.setBigUint64(this.len, BigInt(v as bigint), true); this.len += 8; break;
      case 'i64': this.dv.setBigInt64(this.len, BigInt(v as bigint), true); this.len += 8; break;
      case 'f64': this.dv.setFloat64(this.len, v as number, true); this.len += 8; break;
      case 'string': this.string(v as string); break;
      default: throw new Error(`no scalar writer for ${type}`);
    }
  }
  array(a: GgufArray, what: string): void {
    this.u32(GGUF_VALUE_TYPES.indexOf(a.itemType), `${what} item type`);
    this.u64(a.items.length, `${what} count`);
    for (const item of a.items as Iterable<unknown>) {
      if (a.itemType === 'array') this.array(item as GgufArray, `${what} item`);
      else this.typed(a.itemType, item as number);
    }
  }
  value(v: GgufValue, what: string): void {
    this.u32(GGUF_VALUE_TYPES.indexOf(v.type), `${what} type`);
    if (v.type === 'array') this.array(v.value, what);
    else {
      this.field(`${what} value`, SCALAR_BYTES[v.type]!);
      this.typed(v.type, v.value);
    }
  }
  done(): Uint8Array {
    return this.buf.slice(0, this.len);
  }
}

/** Bytes of a tensor of the ggml type and dims. */
export function ggufTensorBytes(type: string, dims: number[]): number {
  const t = ggmlType(type)!;
  const n = dims.reduce((a, b) => a * b, 1);
  return (n / t.blockSize) * t.typeSize;
}

export function ggufBytes(spec: GgufSpec, rng: Rng): GgufWritten {
  const o = new Out();
  const alignment = spec.alignment ?? 32;
  const metadata: [string, GgufValue][] = [];
  if (spec.alignment !== undefined) metadata.push(['general.alignment', { type: 'u32', value: spec.alignment }]);
  metadata.push(...(spec.metadata ?? []));
  const tensors = spec.tensors ?? [];
  o.bytes(new TextEncoder().encode('GGUF'));
  o.u32(spec.version ?? 3, 'version');
  o.u64(tensors.length, 'tensor count');
  o.u64(metadata.length, 'metadata count');
  for (const [k, v] of metadata) {
    o.string(k, `key ${k}`);
    o.value(v, `value ${k}`);
  }
  const data = new Map<string, Uint8Array>();
  let next = 0;
  const placed: { offset: number; bytes: Uint8Array }[] = [];
  for (const t of tensors) {
    const size = typeof t.type === 'string' ? ggufTensorBytes(t.type, t.dims) : 16;
    const bytes = t.data ?? randomBytes(rng, size);
    const offset = t.offset ?? Math.ceil(next / alignment) * alignment;
    next = offset + bytes.length;
    data.set(t.name, bytes);
    placed.push({ offset, bytes });
    o.string(t.name, `tensor ${t.name} name`);
    o.u32(t.dims.length, `tensor ${t.name} n_dims`);
    t.dims.forEach((d, i) => o.u64(d, `tensor ${t.name} dims[${i}]`));
    o.u32(typeof t.type === 'string' ? ggmlType(t.type)!.id : t.type, `tensor ${t.name} type`);
    o.u64(offset, `tensor ${t.name} offset`);
  }
  const dataStart = Math.ceil(o.len / alignment) * alignment;
  const end = placed.reduce((m, p) => Math.max(m, p.offset + p.bytes.length), 0);
  const header = o.done();
  const out = new Uint8Array(Math.max(tensors.length > 0 ? dataStart + end : header.length, header.length) - (spec.cut ?? 0));
  out.set(header.subarray(0, Math.min(header.length, out.length)));
  for (const p of placed) {
    const at = dataStart + p.offset;
    if (at < out.length) out.set(p.bytes.subarray(0, Math.max(0, Math.min(p.bytes.length, out.length - at))), at);
  }
  return { bytes: out, fields: o.fields, dataStart, data };
}

/** Metadata of every value type, arrays of each item type and a nested array. */
export function everyMetadataType(): [string, GgufValue][] {
  const arr = (itemType: GgufArray['itemType'], items: GgufArray['items']): GgufValue => ({ type: 'array', value: { itemType, items } });
  return [
    ['general.architecture', { type: 'string', value: 'llama' }],
    ['t.u8', { type: 'u8', value: 200 }],
    ['t.i8', { type: 'i8', value: -100 }],
    ['t.u16', { type: 'u16', value: 60000 }],
    ['t.i16', { type: 'i16', value: -30000 }],
    ['t.u32', { type: 'u32', value: 4000000000 }],
    ['t.i32', { type: 'i32', value: -2000000000 }],
    ['t.f32', { type: 'f32', value: 1.5 }],
    ['t.bool', { type: 'bool', value: true }],
    ['t.string', { type: 'string', value: 'héllo, ✓' }],
    ['t.u64', { type: 'u64', value: 2n ** 63n + 5n }],
    ['t.i64', { type: 'i64', value: -(2n ** 62n) }],
    ['t.f64', { type: 'f64', value: Math.PI }],
    ['a.u8', arr('u8', new Uint8Array([1, 2, 255]))],
    ['a.i8', arr('i8', new Int8Array([-1, 2, -128]))],
    ['a.u16', arr('u16', new Uint16Array([1, 65535]))],
    ['a.i16', arr('i16', new Int16Array([-2, 3]))],
    ['a.u32', arr('u32', new Uint32Array([7, 4294967295]))],
    ['a.i32', arr('i32', new Int32Array([-7, 8]))],
    ['a.f32', arr('f32', new Float32Array([0.25, -2]))],
    ['a.bool', arr('bool', [true, false, true])],
    ['a.string', arr('string', ['a', '', 'tokens ▁x'])],
    ['a.u64', arr('u64', new BigUint64Array([1n, 2n ** 64n - 1n]))],
    ['a.i64', arr('i64', new BigInt64Array([-1n, 5n]))],
    ['a.f64', arr('f64', new Float64Array([1e-300, 2]))],
    ['a.array', arr('array', [{ itemType: 'u32', items: new Uint32Array([1, 2]) }, { itemType: 'string', items: ['x'] }])],
    ['a.empty', arr('f32', new Float32Array(0))],
  ];
}
