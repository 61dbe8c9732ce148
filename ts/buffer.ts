// Device buffers: typed by dtype and shape, bytes on the device; and views of
// them (a byte range of a buffer, with a dtype and shape of its own).

import { toArrayBuffer, type Pointer } from 'bun:ffi';
import type { Device } from './device.ts';
import {
  DTYPES,
  decodeNumbers,
  dtypeSize,
  encodeNumbers,
  isDType,
  newTypedArray,
  storageTypes,
  typedArrayName,
  viewAs,
  type DType,
  type TypedArray,
} from './dtype.ts';
import { MlxError } from './errors.ts';
import { releasedError, track, untrack, type DeviceState } from './handles.ts';
import { check, msgBuf, msgCap } from './native.ts';

function asBytes(data: ArrayBufferView): Uint8Array {
  return data instanceof Uint8Array ? data : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

const an = (noun: string): string => `${/^[AEIO]/i.test(noun) ? 'an' : 'a'} ${noun}`; // a Uint8Array, an Int32Array

/** The view's ArrayBuffer keeps its Buffer alive: memory under a live view is never freed by collection. */
const OWNER = Symbol('mlx-native buffer');

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (typeof v !== 'object') return typeof v === 'string' ? `a string` : String(v);
  return `a ${(v as object).constructor?.name ?? 'object'}`;
}

export interface WriteOptions {
  /** Where in the buffer the data goes, in bytes; default 0. */
  byteOffset?: number;
  /** Convert a typed array of another element type to the dtype, instead of refusing it. */
  convert?: boolean;
}

/** Views start at a multiple of this many bytes: kernels load up to 16-byte vectors. */
export const VIEW_ALIGN = 16;

export class Buffer {
  readonly device: Device;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly elementCount: number;
  readonly byteLength: number;
  /** Where this buffer's bytes start in the allocation it views (0 for an allocation). */
  readonly byteOffset: number;
  /** The allocation that holds the bytes: this buffer, or the one a view was made from. */
  readonly root: Buffer;
  /** @internal */
  readonly _state: DeviceState;
  /** @internal native handle (of the root allocation); 0 once released. */
  _h: number;
  /** @internal the root, as the encoder reads it (the object it holds and marks). */
  readonly _root: Buffer;
  private readonly hostPtr: number;
  private hostArray: TypedArray | null = null;
  /** @internal commits in flight that bind this allocation, and those that may write it (ts/encoder.ts; roots only). */
  _pending = 0;
  _pendingWrites = 0;
  /** @internal the recording stamp under which a dispatch last may write it (ts/encoder.ts). */
  _writeMark = 0;
  /** @internal the recording stamp under which an encoder last held it (ts/encoder.ts). */
  _holdMark = 0;
  /** @internal the recording stamp under which a flush counted it in _pendingWrites (ts/encoder.ts). */
  _flushWriteMark = 0;
  /** @internal the barrier segments in which a dispatch last read / wrote it (ts/encoder.ts). */
  _rSeg = 0;
  _wSeg = 0;

  /** @internal made by Device.alloc (root = null) and by view(). */
  constructor(
    device: Device,
    state: DeviceState,
    dtype: DType,
    shape: readonly number[],
    elementCount: number,
    handle: number,
    root: Buffer | null = null,
    byteOffset = 0,
  ) {
    this.device = device;
    this._state = state;
    this.dtype = dtype;
    this.shape = Object.freeze([...shape]);
    this.elementCount = elementCount;
    this.byteLength = elementCount * dtypeSize(dtype);
    this._h = handle;
    this.root = root ?? this;
    this._root = this.root;
    this.byteOffset = byteOffset;
    if (root === null) {
      this.hostPtr = Number(state.sym.mlxn_buffer_host_ptr(handle as Pointer) ?? 0);
      track(state, this, handle, 'buffer');
    } else {
      this.hostPtr = 0; // a view's host array is a window of its root's
    }
  }

  /** True for a view made by view() or slice(). */
  get isView(): boolean {
    return this.root !== this;
  }

  get released(): boolean {
    return this._h === 0 || this.root._h === 0 || this._state.closed;
  }

  private describe(): string {
    return `${this.isView ? 'view' : 'buffer'} (${this.dtype} [${this.shape.join(', ')}]${this.isView ? ` at byte ${this.byteOffset}` : ''})`;
  }

  private handle(): Pointer {
    if (this._h === 0 || this.root._h === 0 || this._state.closed) throw releasedError(this.describe());
    return this._h as Pointer;
  }

  /**
   * The handle for host access. Work in flight on the allocation forbids
   * writing it (the work may read what is overwritten) and reading it where
   * that work may write it.
   */
  private hostHandle(what: string, reads = false): Pointer {
    const h = this.handle();
    const root = this.root;
    const pending = reads ? root._pendingWrites : root._pending;
    if (pending > 0) {
      throw new MlxError(
        'InvalidArgument',
        `Buffer.${what}: the ${this.describe()} must not be ${reads ? 'written by' : 'bound to'} a commit still running (got ${pending} commit(s) in flight); await the commit first`,
      );
    }
    return h;
  }

  /**
   * A view of `shape` elements of `dtype` starting `byteOffset` bytes into
   * this buffer: bound wherever an op takes a buffer, without copying. The
   * start must be a multiple of 16 bytes in the allocation and the view must
   * lie inside this buffer. A view keeps its allocation alive; releasing the
   * allocation (or closing the device) makes its views unusable too.
   */
  view(dtype: DType, shape: readonly number[], byteOffset = 0): Buffer {
    this.handle();
    const op = 'Buffer.view';
    if (!isDType(dtype)) throw new MlxError('UnsupportedDtype', `${op}: dtype must be one of ${DTYPES.join(', ')} (got ${String(dtype)})`);
    if (!Array.isArray(shape)) throw new MlxError('InvalidArgument', `${op}: shape must be an array of positive integers (got ${describe(shape)})`);
    let count = 1;
    for (let i = 0; i < shape.length; i++) {
      const d = shape[i];
      if (!Number.isSafeInteger(d) || d! <= 0) {
        throw new MlxError('InvalidArgument', `${op}: shape[${i}] must be a positive integer (got ${String(d)}) in shape [${shape.join(', ')}]`);
      }
      count *= d!;
      if (count * dtypeSize(dtype) > this.byteLength) break; // refused below, before the product can grow further
    }
    const bytes = count * dtypeSize(dtype);
    if (!Number.isSafeInteger(byteOffset) || byteOffset < 0) {
      throw new MlxError('InvalidArgument', `${op}: byteOffset must be an integer >= 0 (got ${String(byteOffset)})`);
    }
    if (bytes > this.byteLength || byteOffset > this.byteLength - bytes) {
      throw new MlxError(
        'InvalidArgument',
        `${op}: byteOffset + the view's bytes must be at most the ${this.byteLength} bytes of the ${this.describe()} (got ${byteOffset} + ${bytes}, ${dtype} [${shape.join(', ')}])`,
      );
    }
    const at = this.byteOffset + byteOffset;
    if (at % VIEW_ALIGN !== 0) {
      throw new MlxError('InvalidArgument', `${op}: the view's start in its allocation must be a multiple of ${VIEW_ALIGN} bytes (got ${at})`);
    }
    const root = this.root;
    return new Buffer(this.device, this._state, dtype, shape, count, root._h, root, at);
  }

  /** Rows [start, end) of the leading dimension, as a view of the same dtype. */
  slice(start: number, end: number = this.shape[0] ?? 0): Buffer {
    const op = 'Buffer.slice';
    const rows = this.shape[0];
    if (rows === undefined) throw new MlxError('InvalidArgument', `${op}: the buffer must have a leading dimension (got shape [])`);
    if (!Number.isInteger(start) || !Number.isInteger(end) || start < 0 || end > rows || start >= end) {
      throw new MlxError('InvalidArgument', `${op}: start and end must be integers with 0 <= start < end <= ${rows} (got ${String(start)}, ${String(end)})`);
    }
    const rowBytes = this.byteLength / rows;
    return this.view(this.dtype, [end - start, ...this.shape.slice(1)], start * rowBytes);
  }

  /**
   * Writes data at byteOffset (bytes; default 0). A typed array must be of the
   * buffer's storage type (f32 Float32Array, f16 Float16Array or its bit
   * patterns as Uint16Array, bf16/u16 Uint16Array, u8 Uint8Array, u32
   * Uint32Array, i32 Int32Array); any other is an MlxError, unless
   * `{ convert: true }` asks for its values to be converted to the dtype (as
   * writeNumbers does: f16/bf16 rounded to nearest even, integers checked).
   * A DataView or ArrayBuffer is written as raw bytes.
   */
  write(data: ArrayBufferView | ArrayBuffer, at: number | WriteOptions = 0): void {
    const h = this.hostHandle('write');
    if (typeof at !== 'number' && (typeof at !== 'object' || at === null)) {
      throw new MlxError('InvalidArgument', `Buffer.write: the second argument must be a byte offset or { byteOffset?, convert? } (got ${describe(at)})`);
    }
    const opts: WriteOptions = typeof at === 'number' ? { byteOffset: at } : at;
    const byteOffset = opts.byteOffset ?? 0;
    if (data instanceof ArrayBuffer) data = new Uint8Array(data);
    else if (!ArrayBuffer.isView(data)) {
      throw new MlxError('InvalidArgument', `Buffer.write: data must be a typed array, DataView or ArrayBuffer (got ${describe(data)})`);
    } else {
      const type = typedArrayName(data);
      const want = storageTypes(this.dtype);
      if (type !== null && !want.includes(type)) {
        if (opts.convert !== true) {
          throw new MlxError(
            'InvalidArgument',
            `Buffer.write: data must be ${an(want.join(' or '))} for a ${this.dtype} buffer (got ${an(type)}); pass { convert: true } to convert its values to ${this.dtype}, or a DataView / ArrayBuffer to write raw bytes`,
          );
        }
        if (type === 'BigInt64Array' || type === 'BigUint64Array') {
          throw new MlxError('InvalidArgument', `Buffer.write: data must hold numbers to be converted to ${this.dtype} (got ${an(type)})`);
        }
        data = encodeNumbers(this.dtype, data as unknown as ArrayLike<number>, 'Buffer.write');
      }
    }
    if (!Number.isInteger(byteOffset) || byteOffset < 0 || byteOffset + data.byteLength > this.byteLength) {
      throw new MlxError(
        'InvalidArgument',
        `Buffer.write: byteOffset + data.byteLength must be at most ${this.byteLength} with an integer byteOffset >= 0 (got ${byteOffset} + ${data.byteLength})`,
      );
    }
    if (data.byteLength === 0) return;
    check(this._state.sym.mlxn_buffer_write(h, this.byteOffset + byteOffset, asBytes(data), data.byteLength, msgBuf, msgCap), 'Buffer.write');
  }

  /** The contents in the dtype's storage type: f32 Float32Array, f16 Float16Array, bf16 its bit patterns in a Uint16Array, u8/u16/u32/i32 their own. */
  read(): TypedArray {
    const h = this.hostHandle('read', true);
    const out = newTypedArray(this.dtype, this.elementCount);
    check(this._state.sym.mlxn_buffer_read(h, this.byteOffset, asBytes(out), this.byteLength, msgBuf, msgCap), 'Buffer.read');
    return out;
  }

  /** The contents as numbers (f16/bf16 decoded). */
  readNumbers(): Float64Array {
    return decodeNumbers(this.dtype, this.read());
  }

  /** Writes numbers converted to the dtype (f16/bf16 rounded to nearest even); length must be elementCount. */
  writeNumbers(data: ArrayLike<number>): void {
    this.hostHandle('writeNumbers');
    if (data === null || typeof data !== 'object' || typeof data.length !== 'number') {
      throw new MlxError('InvalidArgument', `Buffer.writeNumbers: data must be an array-like of numbers (got ${describe(data)})`);
    }
    if (data.length !== this.elementCount) {
      throw new MlxError('InvalidArgument', `Buffer.writeNumbers: data.length must be ${this.elementCount} (got ${data.length})`);
    }
    this.write(encodeNumbers(this.dtype, data, 'Buffer.writeNumbers'));
  }

  /** Sets every element to value (e.g. NaN to poison an output). */
  fill(value: number): void {
    this.hostHandle('fill');
    const one = encodeNumbers(this.dtype, [value], 'Buffer.fill');
    const all = newTypedArray(this.dtype === 'f16' ? 'u16' : this.dtype, this.elementCount); // f16 filled by bit pattern (keeps a NaN's bits)
    all.fill(one[0]!);
    this.write(all);
  }

  /**
   * A typed array over the buffer's own memory where the device shares memory
   * with the host (metal, emu); null where it does not (cuda). It keeps the
   * allocation alive; when the allocation is released or its device closed,
   * the array is detached (its length becomes 0), never left over freed
   * memory. Taking it while a commit that binds the allocation runs throws,
   * and it must not be touched while such a commit runs.
   */
  hostView(): TypedArray | null {
    this.hostHandle('hostView');
    const root = this.root;
    if (root.hostPtr === 0) return null;
    if (this.hostArray === null) {
      let ab = root.hostArray?.buffer as ArrayBuffer | undefined;
      if (ab === undefined) {
        ab = toArrayBuffer(root.hostPtr as Pointer, 0, root.byteLength);
        Object.defineProperty(ab, OWNER, { value: root });
        this._state.views.set(root._h, new WeakRef(ab));
        root.hostArray = viewAs(root.dtype, ab, 0, root.elementCount);
      }
      // A view's array is a window of its root's, so detaching the root's detaches it.
      if (this !== root) this.hostArray = viewAs(this.dtype, ab, this.byteOffset, this.elementCount);
    }
    return this.hostArray;
  }

  /**
   * Frees the allocation (deferred while recorded or running work binds it);
   * its views become unusable with it. Releasing a view only makes the view
   * unusable.
   */
  release(): void {
    if (this._h === 0) return;
    if (this !== this.root) {
      this._h = 0;
      this.hostArray = null;
      return;
    }
    untrack(this);
    this._state.releaseHandle(this._h, 'buffer'); // detaches the host arrays, its views' too
    this._h = 0;
    this.hostArray = null;
  }

  [Symbol.dispose](): void {
    this.release();
  }
}
