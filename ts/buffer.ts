// Device buffers: typed by dtype and shape, bytes on the device.

import { toArrayBuffer, type Pointer } from 'bun:ffi';
import type { Device } from './device.ts';
import { decodeNumbers, dtypeSize, encodeNumbers, newTypedArray, viewAs, type DType, type TypedArray } from './dtype.ts';
import { MlxError } from './errors.ts';
import { releasedError, track, untrack, type DeviceState } from './handles.ts';
import { check, msgBuf, msgCap } from './native.ts';

function asBytes(data: ArrayBufferView): Uint8Array {
  return data instanceof Uint8Array ? data : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** The view's ArrayBuffer keeps its Buffer alive: memory under a live view is never freed by collection. */
const OWNER = Symbol('mlx-native buffer');

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (typeof v !== 'object') return typeof v === 'string' ? `a string` : String(v);
  return `a ${(v as object).constructor?.name ?? 'object'}`;
}

export class Buffer {
  readonly device: Device;
  readonly dtype: DType;
  readonly shape: readonly number[];
  readonly elementCount: number;
  readonly byteLength: number;
  /** @internal */
  readonly _state: DeviceState;
  /** @internal native handle; 0 once released. */
  _h: number;
  private readonly hostPtr: number;
  private hostView: TypedArray | null = null;
  /** @internal bindings of commits in flight that bind this buffer (ts/encoder.ts). */
  _pending = 0;
  /** @internal the recording stamp under which an encoder last held it (ts/encoder.ts). */
  _holdMark = 0;
  /** @internal the barrier segments in which a dispatch last read / wrote it (ts/encoder.ts). */
  _rSeg = 0;
  _wSeg = 0;

  /** @internal made by Device.alloc. */
  constructor(device: Device, state: DeviceState, dtype: DType, shape: readonly number[], elementCount: number, handle: number) {
    this.device = device;
    this._state = state;
    this.dtype = dtype;
    this.shape = Object.freeze([...shape]);
    this.elementCount = elementCount;
    this.byteLength = elementCount * dtypeSize(dtype);
    this._h = handle;
    this.hostPtr = Number(state.sym.mlxn_buffer_host_ptr(handle as Pointer) ?? 0);
    track(state, this, handle, 'buffer');
  }

  get released(): boolean {
    return this._h === 0 || this._state.closed;
  }

  private handle(): Pointer {
    if (this._h === 0 || this._state.closed) throw releasedError(`buffer (${this.dtype} [${this.shape.join(', ')}])`);
    return this._h as Pointer;
  }

  /** The handle for host access, which work in flight on the buffer forbids. */
  private hostHandle(what: string): Pointer {
    const h = this.handle();
    if (this._pending > 0) {
      throw new MlxError(
        'InvalidArgument',
        `Buffer.${what}: the buffer (${this.dtype} [${this.shape.join(', ')}]) must not be bound to a commit still running (got ${this._pending} binding(s) in flight); await the commit first`,
      );
    }
    return h;
  }

  /** Writes raw bytes (a typed array, DataView or ArrayBuffer) at byteOffset. */
  write(data: ArrayBufferView | ArrayBuffer, byteOffset = 0): void {
    const h = this.hostHandle('write');
    if (data instanceof ArrayBuffer) data = new Uint8Array(data);
    else if (!ArrayBuffer.isView(data)) {
      throw new MlxError('InvalidArgument', `Buffer.write: data must be a typed array, DataView or ArrayBuffer (got ${describe(data)})`);
    }
    if (!Number.isInteger(byteOffset) || byteOffset < 0 || byteOffset + data.byteLength > this.byteLength) {
      throw new MlxError(
        'InvalidArgument',
        `Buffer.write: byteOffset + data.byteLength must be at most ${this.byteLength} with an integer byteOffset >= 0 (got ${byteOffset} + ${data.byteLength})`,
      );
    }
    if (data.byteLength === 0) return;
    check(this._state.sym.mlxn_buffer_write(h, byteOffset, asBytes(data), data.byteLength, msgBuf, msgCap), 'Buffer.write');
  }

  /** The raw contents, typed by dtype (f16/bf16 as their bit patterns in a Uint16Array). */
  read(): TypedArray {
    const h = this.hostHandle('read');
    const out = newTypedArray(this.dtype, this.elementCount);
    check(this._state.sym.mlxn_buffer_read(h, 0, asBytes(out), this.byteLength, msgBuf, msgCap), 'Buffer.read');
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
    const all = newTypedArray(this.dtype, this.elementCount);
    all.fill(one[0]!);
    this.write(all);
  }

  /**
   * A typed array over the buffer's own memory where the device shares memory
   * with the host (metal, emu); null where it does not (cuda). The view keeps
   * the buffer alive; when the buffer is released or its device closed, the
   * view is detached (its length becomes 0), never left over freed memory.
   * Taking it while a commit that binds the buffer runs throws, and a view
   * must not be touched while such a commit runs.
   */
  view(): TypedArray | null {
    this.hostHandle('view');
    if (this.hostPtr === 0) return null;
    if (this.hostView === null) {
      const ab = toArrayBuffer(this.hostPtr as Pointer, 0, this.byteLength);
      Object.defineProperty(ab, OWNER, { value: this });
      this._state.views.set(this._h, new WeakRef(ab));
      this.hostView = viewAs(this.dtype, ab, 0, this.elementCount);
    }
    return this.hostView;
  }

  release(): void {
    if (this._h === 0) return;
    untrack(this);
    this._state.releaseHandle(this._h, 'buffer'); // detaches the view
    this._h = 0;
    this.hostView = null;
  }

  [Symbol.dispose](): void {
    this.release();
  }
}
