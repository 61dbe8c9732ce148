// Command encoders, and the packing of one dispatch into the header's block.
//
// A dispatch is one FFI call: the pipeline, grid, threadgroup size and every
// binding go into one reusable block laid out as mlx_native.h describes
// (48-byte header, 24-byte binding records, then the inline payload). The
// block is shared by all encoders of the process: JavaScript runs on one
// thread and the native side copies the block before the call returns. On
// the success path dispatch allocates nothing.

import type { Pointer } from 'bun:ffi';
import type { Buffer } from './buffer.ts';
import type { Device } from './device.ts';
import { MlxError } from './errors.ts';
import { releasedError, track, untrack, type DeviceState } from './handles.ts';
import type { Pipeline } from './library.ts';
import {
  BIND,
  DISPATCH_BINDING_BYTES,
  DISPATCH_HEADER_BYTES,
  ENCODER_STATE,
  MAX_BINDINGS,
  check,
  msgBuf,
  msgCap,
  outSlot,
  statusError,
  takeHandle,
} from './native.ts';

/** What packDispatch needs of a buffer (Buffer has it). */
export interface BindableBuffer {
  readonly _h: number;
  readonly _state: object;
  readonly byteLength: number;
}

export interface DispatchBindings<B extends BindableBuffer = Buffer> {
  /** Buffers by binding index; [buffer, byteOffset] binds from an offset. */
  buffers?: Record<number, B | readonly [B, number]>;
  /** Inline constant data by binding index (copied at dispatch). */
  bytes?: Record<number, ArrayBufferView>;
  /** Threadgroup memory byte lengths by threadgroup binding index. */
  threadgroupMemory?: Record<number, number>;
}

export type Dim3 = readonly [number, number, number];

const TWO_32 = 0x1_0000_0000;
// Inline data starts 16-byte aligned inside the payload.
const PAYLOAD_ALIGN = 16;

/** The reusable dispatch block: one ArrayBuffer viewed as bytes and as u32 words. */
export class DispatchBlock {
  bytes: Uint8Array;
  words: Uint32Array;

  constructor(capacity = 8192) {
    this.bytes = new Uint8Array(capacity);
    this.words = new Uint32Array(this.bytes.buffer);
  }

  /** Grows (never shrinks) to at least `need` bytes. */
  reserve(need: number): void {
    if (need <= this.bytes.length) return;
    let cap = this.bytes.length;
    while (cap < need) cap *= 2;
    this.bytes = new Uint8Array(cap);
    this.words = new Uint32Array(this.bytes.buffer);
  }
}

function bindErr(arg: string, expected: string, actual: unknown): MlxError {
  return new MlxError('InvalidArgument', `Encoder.dispatch: ${arg} must be ${expected} (got ${String(actual)})`);
}

function checkIndex(kind: string, k: string): number {
  const index = +k;
  if (!(index >= 0 && index < MAX_BINDINGS && (index | 0) === index)) {
    throw bindErr(`${kind} binding index`, `an integer in [0, ${MAX_BINDINGS - 1}]`, k);
  }
  return index;
}

function checkDim(arg: string, v: number): void {
  if (!((v >>> 0) === v && v > 0)) throw bindErr(arg, 'a positive 32-bit integer', v);
}

function checkDims(grid: Dim3, threads: Dim3): void {
  checkDim('grid[0]', grid[0]);
  checkDim('grid[1]', grid[1]);
  checkDim('grid[2]', grid[2]);
  checkDim('threads[0]', threads[0]);
  checkDim('threads[1]', threads[1]);
  checkDim('threads[2]', threads[2]);
}

/**
 * Writes one dispatch into `block` and returns its length in bytes
 * (48 + 24 n + payload). Buffers must be live (`_h` non-zero) and belong to
 * `owner` (their device's state). Binding records are written in the order
 * buffers, bytes, threadgroup memory, each by ascending index.
 */
export function packDispatch<B extends BindableBuffer>(
  block: DispatchBlock,
  owner: object,
  pipeline: number,
  b: DispatchBindings<B>,
  grid: Dim3,
  threads: Dim3,
): number {
  checkDims(grid, threads);
  const buffers = b.buffers;
  const bytes = b.bytes;
  const tgm = b.threadgroupMemory;

  // Pass 1: count bindings and payload so that the payload's place is known.
  let n = 0;
  let payload = 0;
  if (buffers) for (const _ in buffers) n++;
  if (bytes) {
    for (const k in bytes) {
      n++;
      payload = Math.ceil(payload / PAYLOAD_ALIGN) * PAYLOAD_ALIGN + bytes[+k]!.byteLength;
    }
  }
  if (tgm) for (const _ in tgm) n++;
  if (n > 3 * MAX_BINDINGS) throw bindErr('the number of bindings', `at most ${3 * MAX_BINDINGS}`, n);
  const payloadStart = DISPATCH_HEADER_BYTES + DISPATCH_BINDING_BYTES * n;
  const total = payloadStart + payload;
  block.reserve(total);
  const w = block.words;
  const u8 = block.bytes;

  w[0] = pipeline % TWO_32;
  w[1] = Math.floor(pipeline / TWO_32);
  w[2] = grid[0];
  w[3] = grid[1];
  w[4] = grid[2];
  w[5] = threads[0];
  w[6] = threads[1];
  w[7] = threads[2];
  w[8] = n;
  w[9] = payload;
  w[10] = 0;
  w[11] = 0;

  // Pass 2: binding records (word index r) and payload (byte offset p).
  let r = DISPATCH_HEADER_BYTES / 4;
  let p = 0;
  let used = 0; // bit i: buffer argument index i taken (buffers and bytes share the table)
  if (buffers) {
    for (const k in buffers) {
      const index = checkIndex('buffer', k);
      const v = buffers[index]!;
      let buf: B;
      let offset = 0;
      if (Array.isArray(v)) {
        buf = v[0];
        offset = v[1];
      } else {
        buf = v as B;
      }
      const h = buf._h;
      if (h === 0) throw releasedError(`buffer bound at index ${index}`);
      if (buf._state !== owner) throw bindErr(`buffer at index ${index}`, "a buffer of the encoder's device", 'a buffer of another device');
      if (!(offset >= 0 && offset <= buf.byteLength && Number.isInteger(offset))) {
        throw bindErr(`offset of buffer ${index}`, `an integer in [0, ${buf.byteLength}]`, offset);
      }
      used |= 1 << index;
      w[r] = BIND.buffer;
      w[r + 1] = index;
      w[r + 2] = h % TWO_32;
      w[r + 3] = Math.floor(h / TWO_32);
      w[r + 4] = offset % TWO_32;
      w[r + 5] = Math.floor(offset / TWO_32);
      r += 6;
    }
  }
  if (bytes) {
    for (const k in bytes) {
      const index = checkIndex('bytes', k);
      if ((used & (1 << index)) !== 0) throw bindErr(`bytes index ${index}`, 'an index no buffer uses', index);
      used |= 1 << index;
      const data = bytes[index]!;
      const len = data.byteLength;
      if (len === 0) throw bindErr(`bytes at index ${index}`, 'non-empty', '0 bytes');
      const aligned = Math.ceil(p / PAYLOAD_ALIGN) * PAYLOAD_ALIGN;
      if (aligned !== p) u8.fill(0, payloadStart + p, payloadStart + aligned); // no stale bytes in the padding
      p = aligned;
      u8.set(
        data instanceof Uint8Array ? data : new Uint8Array(data.buffer, data.byteOffset, len),
        payloadStart + p,
      );
      w[r] = BIND.bytes;
      w[r + 1] = index;
      w[r + 2] = p;
      w[r + 3] = 0;
      w[r + 4] = len;
      w[r + 5] = 0;
      r += 6;
      p += len;
    }
  }
  if (tgm) {
    let tgUsed = 0;
    for (const k in tgm) {
      const index = checkIndex('threadgroupMemory', k);
      if ((tgUsed & (1 << index)) !== 0) throw bindErr(`threadgroupMemory index ${index}`, 'unique', index);
      tgUsed |= 1 << index;
      const len = tgm[index]!;
      if (!((len >>> 0) === len)) throw bindErr(`threadgroupMemory[${index}]`, 'a byte length, an integer >= 0', len);
      w[r] = BIND.threadgroupMemory;
      w[r + 1] = index;
      w[r + 2] = len;
      w[r + 3] = 0;
      w[r + 4] = 0;
      w[r + 5] = 0;
      r += 6;
    }
  }
  return total;
}

const block = new DispatchBlock();

function nextTick(): Promise<void> {
  return new Promise((res) => setImmediate(res));
}

function sleep(ms: number): Promise<void> {
  return new Promise((res) => setTimeout(res, ms));
}

// commit() polls with setImmediate for the first few polls (work that ends
// within a fraction of a millisecond returns at once), then with timeouts
// doubling from 1 ms to 8 ms.
const IMMEDIATE_POLLS = 32;
const MAX_POLL_MS = 8;

export class Encoder {
  readonly device: Device;
  /** @internal */
  readonly _state: DeviceState;
  /** @internal native handle; 0 once released. */
  _h: number;
  private inFlight = false;
  private lastGpuTimeNs = 0;

  /** @internal made by Device.encoder. */
  constructor(device: Device, state: DeviceState) {
    check(state.sym.mlxn_encoder_create(state.handle, outSlot, msgBuf, msgCap), 'Device.encoder');
    this.device = device;
    this._state = state;
    this._h = takeHandle();
    track(state, this, this._h, 'encoder');
  }

  private handle(what: string): Pointer {
    if (this._h === 0 || this._state.closed) throw releasedError('encoder');
    if (this.inFlight) {
      throw new MlxError('InvalidArgument', `Encoder.${what}: the encoder has a commit in flight; await commit() before recording again`);
    }
    return this._h as Pointer;
  }

  /** Records one dispatch: `grid` counts threadgroups, `threads` is the threadgroup size. */
  dispatch(p: Pipeline, b: DispatchBindings, grid: Dim3, threads: Dim3): void {
    const h = this.handle('dispatch');
    if (p._h === 0) throw releasedError(`pipeline ${p.name}`);
    if (p.library._state !== this._state) {
      throw new MlxError('InvalidArgument', `Encoder.dispatch: pipeline ${p.name} belongs to another device`);
    }
    const len = packDispatch(block, this._state, p._h, b, grid, threads);
    const status = this._state.sym.mlxn_encoder_dispatch(h, block.bytes, len, msgBuf, msgCap);
    if (status !== 0) throw statusError(status, `dispatch ${p.name}`);
  }

  /** Makes the writes of earlier dispatches visible to later ones. */
  barrier(): void {
    check(this._state.sym.mlxn_encoder_barrier(this.handle('barrier'), msgBuf, msgCap), 'Encoder.barrier');
  }

  private submit(): Pointer {
    const h = this.handle('commit');
    check(this._state.sym.mlxn_encoder_commit(h, msgBuf, msgCap), 'Encoder.commit');
    this.inFlight = true;
    return h;
  }

  private finish(h: Pointer): void {
    this.inFlight = false;
    const status = this._state.sym.mlxn_encoder_wait(h, msgBuf, msgCap);
    if (status !== 0) throw statusError(status, 'command buffer');
    this.lastGpuTimeNs = Number(this._state.sym.mlxn_encoder_gpu_time_ns(h));
  }

  /** Submits the recorded work and blocks until it ends. */
  commitAndWait(): void {
    this.finish(this.submit());
  }

  /** Submits the recorded work; resolves when it ends, polling without blocking the event loop. */
  async commit(): Promise<void> {
    const h = this.submit();
    const sym = this._state.sym;
    let polls = 0;
    let delay = 1;
    while (this._h !== 0 && sym.mlxn_encoder_status(h) === ENCODER_STATE.pending) {
      if (polls++ < IMMEDIATE_POLLS) {
        await nextTick();
      } else {
        await sleep(delay);
        delay = Math.min(delay * 2, MAX_POLL_MS);
      }
    }
    if (this._h === 0 || this._state.closed) throw releasedError('encoder (released while its commit was in flight)');
    this.finish(h);
  }

  /** Device time of the last completed commit, in nanoseconds. */
  get gpuTimeNs(): number {
    return this.lastGpuTimeNs;
  }

  release(): void {
    if (this._h === 0) return;
    untrack(this);
    this._state.releaseHandle(this._h, 'encoder');
    this._h = 0;
    this.inFlight = false;
  }

  [Symbol.dispose](): void {
    this.release();
  }
}
