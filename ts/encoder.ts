// Command encoders, and the packing of one dispatch into the header's block.
//
// A dispatch is one FFI call: the pipeline, grid, threadgroup size and every
// binding go into one reusable block laid out as mlx_native.h describes
// (48-byte header, 24-byte binding records, then the inline payload). The
// block is shared by all encoders of the process: JavaScript runs on one
// thread and the native side copies the block before the call returns. With
// bindings given as arrays and inline data as Uint8Arrays, dispatch allocates
// nothing; a record costs one Object.values (or Object.keys) array, and other
// typed arrays one Uint8Array view.

import type { Pointer } from 'bun:ffi';
import type { Buffer } from './buffer.ts';
import type { Device } from './device.ts';
import { MlxError } from './errors.ts';
import { releasedError, track, untrack, type DeviceState } from './handles.ts';
import type { Pipeline } from './library.ts';
import { pollUntil, type PollOptions } from './poll.ts';
import {
  BIND,
  BLOCK_BINDING_COUNT,
  BLOCK_GRID,
  BLOCK_PAYLOAD_BYTES,
  BLOCK_PIPELINE,
  BLOCK_RESERVED,
  BLOCK_THREADS,
  DISPATCH_BINDING_BYTES,
  DISPATCH_HEADER_BYTES,
  ENCODER_STATE,
  MAX_BINDINGS,
  RECORD_A,
  RECORD_B,
  RECORD_INDEX,
  RECORD_KIND,
  TMAP_BOX,
  TMAP_DESC_BYTES,
  TMAP_DIMS,
  TMAP_DTYPE,
  TMAP_DTYPE_CODE,
  TMAP_L2,
  TMAP_MAX_RANK,
  TMAP_OFFSET,
  TMAP_RANK,
  TMAP_STRIDES,
  TMAP_SWIZZLE,
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
  /** @internal commits in flight that bind it (Buffer counts them; others may omit it). */
  _pending?: number;
  /** @internal commits in flight whose dispatches may write it. */
  _pendingWrites?: number;
  /** @internal the recording stamp under which a dispatch last may write it. */
  _writeMark?: number;
  /** @internal the recording stamp under which an encoder last held it. */
  _holdMark?: number;
  /** @internal the recording stamp under which a flush counted it in _pendingWrites. */
  _flushWriteMark?: number;
  /** @internal the barrier segment in which a dispatch last read it / wrote it. */
  _rSeg?: number;
  _wSeg?: number;
  /** Where a view starts in its allocation (absent or 0 for an allocation). */
  readonly byteOffset?: number;
  /** @internal the allocation of a view (absent or itself for an allocation). */
  readonly _root?: BindableBuffer;
}

export interface EncoderOptions {
  /** Place barriers between dependent dispatches (default true); false leaves them to enc.barrier(). */
  autoBarriers?: boolean;
  /**
   * Record once, replay many (default false): the first commit runs the
   * recording and keeps it, replay() runs it again, patch() changes the
   * inline bytes of recorded dispatches for the replays that follow. The
   * encoder holds what the recording binds until it is released.
   */
  replayable?: boolean;
}

/** One dispatch given again to Encoder.patch: what Encoder.dispatch takes. */
export interface PatchDispatch {
  pipeline: Pipeline;
  bindings: DispatchBindings;
  grid: Dim3;
  threads: Dim3;
}

/**
 * Bindings of one dispatch, by binding index. Arrays are accepted wherever a
 * record is (`buffers: [q, k, v, out]`, holes as undefined) and are the
 * faster form: enumerating the integer keys of a plain object costs the
 * engine several hundred nanoseconds, reading an array does not.
 */
export interface DispatchBindings<B extends BindableBuffer = Buffer> {
  /** Buffers by binding index; [buffer, byteOffset] binds from an offset. */
  buffers?: Record<number, B | readonly [B, number] | undefined>;
  /** Inline constant data by binding index (copied at dispatch). */
  bytes?: Record<number, ArrayBufferView | undefined>;
  /** Threadgroup memory byte lengths by threadgroup binding index. */
  threadgroupMemory?: Record<number, number | undefined>;
  /**
   * Tensor maps by binding index (CUDA's TMA, compute capability 9.0 on;
   * the other backends refuse them): the kernel's parameter is a pointer to
   * the CUtensorMap the backend encodes from the buffer and the descriptor.
   * The buffer is held and ordered as a buffer binding's is.
   */
  tensorMaps?: Record<number, TensorMapBinding<B> | undefined>;
  /**
   * The buffer indices this dispatch may write, for the encoder's barriers.
   * Absent: those its kernel declares writable (a Metal `device` binding
   * not declared const), or every binding where that is unknown (CUDA
   * source compiled directly), which only costs barriers.
   */
  writes?: readonly number[];
}

export type Dim3 = readonly [number, number, number];

/**
 * A tensor map over a buffer (mlx_native.h, MLXN_BIND_TENSOR_MAP): a
 * `dims` tensor of `dtype` elements from `offset` bytes into the buffer
 * (16-byte aligned), dimension 0 contiguous, dimension k + 1 `strides[k]`
 * bytes from one index to the next (multiples of 16); one copy moves a
 * `box` of elements (each 1 to 256, box[0] spanning a multiple of 16 bytes
 * and at most `swizzle` bytes where swizzled), elements past the dims read
 * as zeros. The backend refuses a map that reaches past the buffer.
 */
export interface TensorMapBinding<B extends BindableBuffer = Buffer> {
  buffer: B;
  /** Bytes from the buffer's (or view's) start to element (0, ..., 0); 0 when absent. */
  offset?: number;
  dtype: keyof typeof TMAP_DTYPE_CODE;
  /** Elements along each dimension, innermost first (1 to 5 of them). */
  dims: readonly number[];
  /** Bytes between consecutive indices of dimensions 1 .. rank - 1. */
  strides: readonly number[];
  /** Elements one copy moves along each dimension. */
  box: readonly number[];
  /** The shared-memory swizzle span in bytes (0: none). */
  swizzle?: 0 | 32 | 64 | 128;
  /** The L2 fetch size in bytes (0: none). */
  l2Promotion?: 0 | 64 | 128 | 256;
}

/**
 * u32 words an encoder hands to the dispatches it records (_syncWords,
 * _scratchWords): one arena the recording takes from, a distinct 16-byte
 * aligned range a dispatch, from its start again for each recording;
 * earlier (smaller) arenas kept, as dispatches of the recording may bind
 * them, until release. Zeroed when allocated.
 */
class WordArena {
  private arena: Buffer | null = null;
  private old: Buffer[] = [];
  /** The next free word of the arena in this recording. */
  private next = 0;
  /** Replayable only: the words handed out by dispatch index, what patch's plans bind again. */
  private byDispatch: Map<number, readonly [Buffer, number]> | null = null;

  take(enc: Encoder, method: string, count: number): readonly [Buffer, number] {
    if (!(Number.isInteger(count) && count > 0 && count <= SYNC_WORDS_MAX)) {
      throw new MlxError('InvalidArgument', `Encoder.${method}: count must be an integer in [1, ${SYNC_WORDS_MAX}] (got ${String(count)})`);
    }
    const at = Math.ceil(this.next / 4) * 4;
    let arena = this.arena;
    let first = at;
    if (arena === null || at + count > arena.elementCount) {
      if (arena !== null) this.old.push(arena);
      let n = SYNC_ARENA_WORDS;
      while (n < count) n *= 2;
      if (arena !== null) n = Math.max(n, 2 * arena.elementCount);
      arena = enc.device.alloc('u32', [n]);
      this.arena = arena;
      first = 0;
    }
    this.next = first + count;
    const binding = [arena, first * 4] as const;
    if (enc.replayable) (this.byDispatch ??= new Map()).set(enc.dispatchCount, binding);
    return binding;
  }

  of(index: number, count: number): readonly [Buffer, number] | undefined {
    const b = this.byDispatch?.get(index);
    return b !== undefined && b[0].elementCount - b[1] / 4 >= count ? b : undefined;
  }

  restart(): void {
    this.next = 0;
  }

  /** Frees every arena (the encoder's work is over). */
  release(): void {
    for (const a of this.old) a.release();
    this.arena?.release();
    this.arena = null;
    this.old = [];
    this.next = 0;
    this.byDispatch = null;
  }
}

const TWO_32 = 0x1_0000_0000;
/** Words of an encoder's first _syncWords or _scratchWords arena (4 KiB). */
const SYNC_ARENA_WORDS = 1024;
/** _syncWords' and _scratchWords' count at most (64 MiB of words). */
const SYNC_WORDS_MAX = 2 ** 24;
// The block's fields as indices into its u32 words (u64 fields: low word, then high).
const W_PIPELINE = BLOCK_PIPELINE / 4;
const W_GRID = BLOCK_GRID / 4;
const W_THREADS = BLOCK_THREADS / 4;
const W_BINDING_COUNT = BLOCK_BINDING_COUNT / 4;
const W_PAYLOAD_BYTES = BLOCK_PAYLOAD_BYTES / 4;
const W_RESERVED = BLOCK_RESERVED / 4;
// A record's fields, in words from the record's first word.
const R_KIND = RECORD_KIND / 4;
const R_INDEX = RECORD_INDEX / 4;
const R_A = RECORD_A / 4;
const R_B = RECORD_B / 4;
const RECORD_WORDS = DISPATCH_BINDING_BYTES / 4;
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

/** The binding index of a record key ("0".."30"), or throws. */
function keyIndex(kind: string, k: string): number {
  const index = +k;
  if (!(index >= 0 && index < MAX_BINDINGS && (index | 0) === index)) {
    throw bindErr(`${kind} binding index`, `an integer in [0, ${MAX_BINDINGS - 1}]`, k);
  }
  return index;
}

/** The bit mask of a dispatch's declared writes. */
function writesMask(writes: readonly number[]): number {
  if (!Array.isArray(writes)) throw bindErr('writes', 'an array of buffer indices', writes);
  let mask = 0;
  for (const i of writes) {
    if (!(Number.isInteger(i) && i >= 0 && i < MAX_BINDINGS)) throw bindErr('writes[]', `a buffer index in [0, ${MAX_BINDINGS - 1}]`, i);
    mask |= 1 << i;
  }
  return mask;
}

function isBindable(v: unknown): v is BindableBuffer {
  return typeof v === 'object' && v !== null && typeof (v as BindableBuffer)._h === 'number';
}

/**
 * The allocation a bound buffer stands for (a view binds its allocation's
 * handle at its own offset; the allocation is what the encoder holds and
 * marks), after the checks that it is a live buffer of this device: `arg`
 * names the binding, `what` what it must be, `released` the buffer in the
 * release error. Anything but a Buffer of this device fails the owner check
 * (null too, through ?.), whose error path then says which it is.
 */
function boundRoot(buf: BindableBuffer | undefined, owner: object, arg: string, what: string, released: string): BindableBuffer {
  if (buf?._state !== owner) {
    if (!isBindable(buf)) throw bindErr(arg, what, buf);
    throw bindErr(arg, "a buffer of the encoder's device", 'a buffer of another device');
  }
  const root = buf._root ?? buf;
  if (buf._h === 0 || root._h === 0) throw releasedError(released);
  return root;
}

/**
 * A binding record at word r: its kind, index, and a and b as 64-bit
 * values. A Uint32Array store takes its value modulo 2^32: the low word, and
 * the high word from the quotient (handles and offsets are below 2^53).
 */
function putRecord(w: Uint32Array, r: number, kind: number, index: number, a: number, b: number): void {
  w[r + R_KIND] = kind;
  w[r + R_INDEX] = index;
  w[r + R_A] = a;
  w[r + R_A + 1] = a / TWO_32;
  w[r + R_B] = b;
  w[r + R_B + 1] = b / TWO_32;
}

function checkDim(arg: string, v: number): void {
  if (!((v >>> 0) === v && v > 0)) throw bindErr(arg, 'a positive 32-bit integer', v);
}

type BufferBinding = BindableBuffer | readonly [BindableBuffer, number] | undefined;

// Bindings given as records are copied here by index first, so that one loop
// over an array serves both forms.
const recBuffers: BufferBinding[] = new Array<BufferBinding>(MAX_BINDINGS).fill(undefined);
const recBytes: (ArrayBufferView | undefined)[] = new Array<ArrayBufferView | undefined>(MAX_BINDINGS).fill(undefined);
const recTgm: (number | undefined)[] = new Array<number | undefined>(MAX_BINDINGS).fill(undefined);
const recTmaps: (TensorMapBinding<BindableBuffer> | undefined)[] = new Array<TensorMapBinding<BindableBuffer> | undefined>(MAX_BINDINGS).fill(undefined);
const NO_TMAPS: readonly (TensorMapBinding<BindableBuffer> | undefined)[] = [];

/**
 * Writes tensor map `t`'s descriptor at u8[at ..] (zeroed before): the
 * shapes checked here (integers, as many strides as dims above the first,
 * a known dtype), every rule of their values by the backend
 * (mlxn_tmap_check), which names the field.
 */
function packTensorMap(u8: Uint8Array, at: number, t: TensorMapBinding<BindableBuffer>, viewOffset: number, i: number): void {
  const arg = (f: string): string => `tensorMaps[${i}].${f}`;
  const code = TMAP_DTYPE_CODE[t.dtype];
  if (code === undefined) throw bindErr(arg('dtype'), `one of ${Object.keys(TMAP_DTYPE_CODE).join(', ')}`, t.dtype);
  const dims = t.dims, strides = t.strides, box = t.box;
  if (!Array.isArray(dims) || dims.length < 1 || dims.length > TMAP_MAX_RANK) throw bindErr(arg('dims'), `an array of 1 to ${TMAP_MAX_RANK} sizes`, dims);
  const rank = dims.length;
  if (!Array.isArray(strides) || strides.length !== rank - 1) throw bindErr(arg('strides'), `an array of ${rank - 1} byte strides (one per dim after the first)`, strides);
  if (!Array.isArray(box) || box.length !== rank) throw bindErr(arg('box'), `an array of ${rank} sizes (one per dim)`, box);
  const offset = (t.offset ?? 0) + viewOffset;
  const v = new DataView(u8.buffer, u8.byteOffset);
  const u64 = (o: number, x: number, what: string): void => {
    if (!(Number.isSafeInteger(x) && x >= 0)) throw bindErr(arg(what), 'an integer >= 0', x);
    v.setBigUint64(at + o, BigInt(x), true);
  };
  const u32 = (o: number, x: number, what: string): void => {
    if (!((x >>> 0) === x)) throw bindErr(arg(what), 'a 32-bit integer >= 0', x);
    v.setUint32(at + o, x, true);
  };
  u64(TMAP_OFFSET, offset, 'offset');
  v.setUint32(at + TMAP_DTYPE, code, true);
  v.setUint32(at + TMAP_RANK, rank, true);
  for (let k = 0; k < rank; k++) {
    u64(TMAP_DIMS + 8 * k, dims[k]!, `dims[${k}]`);
    u32(TMAP_BOX + 4 * k, box[k]!, `box[${k}]`);
    if (k > 0) u64(TMAP_STRIDES + 8 * (k - 1), strides[k - 1]!, `strides[${k - 1}]`);
  }
  u32(TMAP_SWIZZLE, t.swizzle ?? 0, 'swizzle');
  u32(TMAP_L2, t.l2Promotion ?? 0, 'l2Promotion');
}

/**
 * Copies a record's entries into `out` by index; returns 1 + the highest
 * index. Engines enumerate integer keys slowly (for-in or Object.keys: a few
 * hundred nanoseconds), and reading an index the record lacks is slow too.
 * So a record whose entries run contiguously from `start` (buffers from 0,
 * then bytes from the index after the last buffer: the usual layout) is
 * counted with Object.values and read upward from there; any other record is
 * enumerated with Object.keys.
 */
function fromRecord<T>(kind: string, rec: Record<number, T | undefined>, out: (T | undefined)[], start: number): number {
  const first = start < MAX_BINDINGS ? rec[start] : undefined;
  if (first !== undefined) {
    const count = Object.values(rec).length;
    const end = start + count;
    let i = start + 1;
    for (; i < end; i++) {
      const v = rec[i];
      if (v === undefined) break;
      out[i] = v;
    }
    if (i === end && end <= MAX_BINDINGS) {
      for (let j = 0; j < start; j++) out[j] = undefined;
      out[start] = first;
      return end;
    }
  }
  out.fill(undefined);
  const keys = Object.keys(rec);
  let len = 0;
  for (let j = 0; j < keys.length; j++) {
    const i = keyIndex(kind, keys[j]!);
    out[i] = rec[i];
    if (i >= len) len = i + 1;
  }
  return len;
}

function arrayTooLong(kind: string, length: number): MlxError {
  return bindErr(`${kind} (an array)`, `at most ${MAX_BINDINGS} long`, length);
}

/**
 * Writes one dispatch into `block` and returns its length in bytes
 * (48 + 24 n + payload). Buffers must be live (`_h` non-zero) and belong to
 * `owner` (their device's state). Binding records are written in the order
 * buffers, bytes, threadgroup memory, each by ascending index. When `hold`
 * is given, the bound buffers are left in it (count, then slots).
 */
export function packDispatch<B extends BindableBuffer>(
  block: DispatchBlock,
  owner: object,
  pipeline: number,
  b: DispatchBindings<B>,
  grid: Dim3,
  threads: Dim3,
  hold?: PackedBuffers,
): number {
  if (b === null || typeof b !== 'object') throw bindErr('bindings', 'an object { buffers, bytes, threadgroupMemory }', b);
  if (hold !== undefined) hold.count = 0;
  // Optional chaining: a grid or threads that is null or not an array of 3
  // fails the checks below as MlxError, with no extra test on the way.
  const g0 = grid?.[0], g1 = grid?.[1], g2 = grid?.[2];
  const t0 = threads?.[0], t1 = threads?.[1], t2 = threads?.[2];
  if (!((g0 >>> 0) === g0 && g0 > 0)) checkDim('grid[0]', g0);
  if (!((g1 >>> 0) === g1 && g1 > 0)) checkDim('grid[1]', g1);
  if (!((g2 >>> 0) === g2 && g2 > 0)) checkDim('grid[2]', g2);
  if (!((t0 >>> 0) === t0 && t0 > 0)) checkDim('threads[0]', t0);
  if (!((t1 >>> 0) === t1 && t1 > 0)) checkDim('threads[1]', t1);
  if (!((t2 >>> 0) === t2 && t2 > 0)) checkDim('threads[2]', t2);

  // Each binding kind as an array by index (records are copied into scratch).
  const buffers = b.buffers;
  let bufArr: readonly BufferBinding[] = recBuffers;
  let bufLen = 0;
  if (buffers !== undefined) {
    if (Array.isArray(buffers)) {
      bufArr = buffers;
      bufLen = buffers.length;
      if (bufLen > MAX_BINDINGS) throw arrayTooLong('buffers', bufLen);
    } else {
      bufLen = fromRecord('buffer', buffers, recBuffers, 0);
    }
  }
  const bytes = b.bytes;
  let bytesArr: readonly (ArrayBufferView | undefined)[] = recBytes;
  let bytesLen = 0;
  if (bytes !== undefined) {
    if (Array.isArray(bytes)) {
      bytesArr = bytes;
      bytesLen = bytes.length;
      if (bytesLen > MAX_BINDINGS) throw arrayTooLong('bytes', bytesLen);
    } else {
      bytesLen = fromRecord('bytes', bytes, recBytes, bufLen);
    }
  }
  const tgm = b.threadgroupMemory;
  let tgmArr: readonly (number | undefined)[] = recTgm;
  let tgmLen = 0;
  if (tgm !== undefined) {
    if (Array.isArray(tgm)) {
      tgmArr = tgm;
      tgmLen = tgm.length;
      if (tgmLen > MAX_BINDINGS) throw arrayTooLong('threadgroupMemory', tgmLen);
    } else {
      tgmLen = fromRecord('threadgroupMemory', tgm, recTgm, 0);
    }
  }

  const tmaps = b.tensorMaps;
  let tmapArr: readonly (TensorMapBinding<B> | undefined)[] = recTmaps as (TensorMapBinding<B> | undefined)[];
  let tmapLen = 0;
  if (tmaps !== undefined) tmapLen = fromRecord('tensorMaps', tmaps, recTmaps as (TensorMapBinding<B> | undefined)[], 0);
  else tmapArr = NO_TMAPS as (TensorMapBinding<B> | undefined)[];

  // The binding count and payload size place the payload right after the records.
  let count = 0;
  let payload = 0;
  for (let i = 0; i < bufLen; i++) if (bufArr[i] !== undefined) count++;
  for (let i = 0; i < bytesLen; i++) {
    const d = bytesArr[i];
    if (d !== undefined) {
      count++;
      payload = ((payload + PAYLOAD_ALIGN - 1) & ~(PAYLOAD_ALIGN - 1)) + d.byteLength;
    }
  }
  for (let i = 0; i < tgmLen; i++) if (tgmArr[i] !== undefined) count++;
  for (let i = 0; i < tmapLen; i++) {
    if (tmapArr[i] !== undefined) {
      count++;
      payload = ((payload + PAYLOAD_ALIGN - 1) & ~(PAYLOAD_ALIGN - 1)) + TMAP_DESC_BYTES;
    }
  }
  const payloadStart = DISPATCH_HEADER_BYTES + DISPATCH_BINDING_BYTES * count;
  block.reserve(payloadStart + payload);
  const w = block.words;
  const u8 = block.bytes;

  let r = DISPATCH_HEADER_BYTES / 4; // word index of the next binding record
  let used = 0; // bit i: buffer argument index i taken (buffers and bytes share it)
  for (let i = 0; i < bufLen; i++) {
    const v = bufArr[i];
    if (v === undefined) continue;
    let buf: BindableBuffer;
    let offset = 0;
    if (Array.isArray(v)) {
      buf = v[0];
      offset = v[1];
      if (!isBindable(buf)) throw bindErr(`buffer at index ${i}`, 'a Buffer in [buffer, byteOffset]', buf);
      if (!(offset >= 0 && offset <= buf.byteLength && Number.isInteger(offset))) {
        throw bindErr(`offset of buffer ${i}`, `an integer in [0, ${buf.byteLength}]`, offset);
      }
    } else {
      buf = v as BindableBuffer;
    }
    const root = boundRoot(buf, owner, `buffer at index ${i}`, 'a Buffer or [buffer, byteOffset]', `buffer bound at index ${i}`);
    offset += buf.byteOffset ?? 0;
    used |= 1 << i;
    if (hold !== undefined) {
      hold.index[hold.count] = i;
      hold.slots[hold.count++] = root;
    }
    putRecord(w, r, BIND.buffer, i, buf._h, offset);
    r += RECORD_WORDS;
  }

  let p = 0; // payload bytes written
  for (let i = 0; i < bytesLen; i++) {
    const data = bytesArr[i];
    if (data === undefined) continue;
    if ((used & (1 << i)) !== 0) throw bindErr(`bytes index ${i}`, 'an index no buffer uses', i);
    used |= 1 << i;
    if (!ArrayBuffer.isView(data)) throw bindErr(`bytes at index ${i}`, 'a typed array or DataView', data);
    const n = data.byteLength;
    if (n === 0) throw bindErr(`bytes at index ${i}`, 'non-empty', '0 bytes');
    const at = payloadStart + p;
    const aligned = (p + PAYLOAD_ALIGN - 1) & ~(PAYLOAD_ALIGN - 1);
    for (let j = at; j < payloadStart + aligned; j++) u8[j] = 0; // no stale bytes in the padding
    p = aligned;
    const src = data instanceof Uint8Array ? data : new Uint8Array(data.buffer, data.byteOffset, n);
    const dst = payloadStart + p;
    if (n <= 64) for (let j = 0; j < n; j++) u8[dst + j] = src[j]!;
    else u8.set(src, dst);
    putRecord(w, r, BIND.bytes, i, p, n);
    r += RECORD_WORDS;
    p += n;
  }

  for (let i = 0; i < tmapLen; i++) {
    const t = tmapArr[i];
    if (t === undefined) continue;
    if ((used & (1 << i)) !== 0) throw bindErr(`tensor map index ${i}`, 'an index no buffer or bytes uses', i);
    used |= 1 << i;
    const buf = t?.buffer as BindableBuffer;
    const root = boundRoot(buf, owner, `tensorMaps[${i}].buffer`, 'a Buffer', `buffer of the tensor map at index ${i}`);
    const at = payloadStart + p;
    const aligned = (p + PAYLOAD_ALIGN - 1) & ~(PAYLOAD_ALIGN - 1);
    for (let j = at; j < payloadStart + aligned + TMAP_DESC_BYTES; j++) u8[j] = 0;
    p = aligned;
    packTensorMap(u8, payloadStart + p, t, buf.byteOffset ?? 0, i);
    if (hold !== undefined) {
      hold.index[hold.count] = i;
      hold.slots[hold.count++] = root;
    }
    putRecord(w, r, BIND.tensorMap, i, buf._h, p);
    r += RECORD_WORDS;
    p += TMAP_DESC_BYTES;
  }

  for (let i = 0; i < tgmLen; i++) {
    const n = tgmArr[i];
    if (n === undefined) continue;
    if (!((n >>> 0) === n)) throw bindErr(`threadgroupMemory[${i}]`, 'a byte length, an integer >= 0', n);
    putRecord(w, r, BIND.threadgroupMemory, i, n, 0);
    r += RECORD_WORDS;
  }

  w[W_PIPELINE] = pipeline;
  w[W_PIPELINE + 1] = pipeline / TWO_32;
  w[W_GRID] = g0;
  w[W_GRID + 1] = g1;
  w[W_GRID + 2] = g2;
  w[W_THREADS] = t0;
  w[W_THREADS + 1] = t1;
  w[W_THREADS + 2] = t2;
  w[W_BINDING_COUNT] = count;
  w[W_PAYLOAD_BYTES] = payload;
  w[W_RESERVED] = 0;
  w[W_RESERVED + 1] = 0;
  return payloadStart + payload;
}

const block = new DispatchBlock();

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** What differs between two packed blocks in their first `end` bytes (header and records), or null. */
function firstDifference(a: Uint8Array, b: Uint8Array, end: number): string | null {
  for (let i = 0; i < end; i++) {
    if (a[i] === b[i]) continue;
    if (i < BLOCK_GRID) return 'pipeline';
    if (i < BLOCK_THREADS) return 'grid';
    if (i < BLOCK_BINDING_COUNT) return 'threadgroup size';
    if (i < DISPATCH_HEADER_BYTES) return 'binding count or payload size';
    const field = (i - DISPATCH_HEADER_BYTES) % DISPATCH_BINDING_BYTES;
    const rec = Math.floor((i - DISPATCH_HEADER_BYTES) / DISPATCH_BINDING_BYTES);
    return field < RECORD_A ? `binding kind or index (record ${rec})` : `buffer, offset, bytes length or threadgroup memory (record ${rec})`;
  }
  return null;
}

/**
 * The first tensor map whose descriptor differs between two blocks with the
 * same records (`records`: the payload's start), or null: what Encoder.patch
 * refuses besides the records (a recorded map cannot change).
 * @internal exported for its test
 */
export function tensorMapDifference(a: Uint8Array, b: Uint8Array, records: number): string | null {
  const words = new Uint32Array(a.buffer, a.byteOffset, records / 4);
  const n = (records - DISPATCH_HEADER_BYTES) / DISPATCH_BINDING_BYTES;
  for (let r = 0; r < n; r++) {
    const w = (DISPATCH_HEADER_BYTES + DISPATCH_BINDING_BYTES * r) / 4;
    if (words[w + R_KIND] !== BIND.tensorMap) continue;
    const at = records + words[w + R_B]!;
    if (!sameBytes(a.subarray(at, at + TMAP_DESC_BYTES), b.subarray(at, at + TMAP_DESC_BYTES))) return `tensor map descriptor (record ${r})`;
  }
  return null;
}

/** The buffers of the block packDispatch wrote last (a fixed scratch: nothing is allocated per dispatch). */
export interface PackedBuffers {
  count: number;
  slots: (BindableBuffer | undefined)[];
  /** The binding index of each slot. */
  index: Uint8Array;
}
const packedBuffers: PackedBuffers = {
  count: 0,
  slots: new Array<BindableBuffer | undefined>(MAX_BINDINGS).fill(undefined),
  index: new Uint8Array(MAX_BINDINGS),
};

// commit() polls with setImmediate for the first few polls (work that ends
// within a fraction of a millisecond returns at once), then with timeouts
// doubling from 1 ms to 8 ms.
const COMMIT_POLLS: PollOptions = { immediatePolls: 32, maxDelayMs: 8 };

let nextStamp = 1;

/** A dispatch or barrier of an atomic section, recorded when the section ends. */
interface Staged {
  /** The packed block (a copy); null for a barrier. */
  block: Uint8Array | null;
  pipeline: Pipeline | null;
  /** Index into `held` where this dispatch's objects end. */
  heldEnd: number;
}

/**
 * Records dispatches into one command buffer of the device.
 *
 * Lifetimes: from the moment a dispatch is recorded until the work of its
 * commit has ended (or the encoder is released without committing), the
 * encoder holds the Buffer and Pipeline objects it binds, so collection cannot
 * free them; release() of one of them meanwhile frees its handle for the
 * caller (using it again throws) while the backend keeps the memory until the
 * work is done. Host access to a buffer that a commit still running binds
 * throws MlxError: reading it when that work may write it, writing it (or
 * taking its host array) in any case.
 */
export class Encoder {
  readonly device: Device;
  /** @internal */
  readonly _state: DeviceState;
  /** @internal native handle; 0 once released. */
  _h: number;
  private inFlight = false;
  /** The work in flight is replayStart()'s, which wait() settles. */
  private started = false;
  private lastGpuTimeNs = 0;
  private lastSubmitMs = 0;
  /** Buffers and pipelines of the dispatches recorded since the last commit. */
  private held: (BindableBuffer | Pipeline)[] = [];
  /** The buffers among them that the commit's dispatches may write (each counts in its _pendingWrites). */
  private writtenInFlight: BindableBuffer[] = [];
  /** Those of the commit in flight; each buffer's _pending counts it once per binding. */
  private heldInFlight: (BindableBuffer | Pipeline)[] = [];
  /** flush(): how many of `held` count as in flight already (in _pending), and the buffers among them counted as written. */
  private flushedHeld = 0;
  private flushedWritten: BindableBuffer[] = [];
  /** Non-null inside atomic(): dispatches and barriers wait there. */
  private staged: Staged[] | null = null;
  /** Set when a backend refused part of an atomic section after the rest was recorded. */
  private broken: string | null = null;
  /** Unique per recording of any encoder: marks the objects `held` already has. */
  private stamp = nextStamp++;
  /** Unique per stretch between barriers: marks what dispatches since the last barrier read and wrote. */
  private segment = nextStamp++;
  private barriers = 0;
  private forceBarrier = false;
  private readonly autoBarriers: boolean;
  /** @internal counts recordings: advanced when a commit's work ends or the encoder is released. */
  _epoch = 0;
  /** Whether the first commit keeps the recording for replay() (EncoderOptions.replayable). */
  readonly replayable: boolean;
  /** A replayable encoder after its first commit: the recording is fixed. */
  private frozen = false;
  /** Dispatches the backend recorded (a replayable recording's dispatch indices count them). */
  private recorded = 0;
  /** Dispatches waiting in the atomic section being recorded. */
  private stagedDispatches = 0;
  /** Replayable only: a copy of each recorded block, what patch() holds a new one against. */
  private blocks: Uint8Array[] | null;
  /** Replayable only: what the kept recording binds, and what it may write (held until release). */
  private replayHeld: (BindableBuffer | Pipeline)[] = [];
  private replayWritten: BindableBuffer[] = [];
  /** _syncWords' zeroed words and _scratchWords' words (WordArena). */
  private readonly syncArena = new WordArena();
  private readonly scratchArena = new WordArena();

  /** @internal made by Device.encoder. */
  constructor(device: Device, state: DeviceState, autoBarriers: boolean, replayable = false) {
    const create = replayable ? state.sym.mlxn_encoder_create_replayable : state.sym.mlxn_encoder_create;
    check(create(state.handle, outSlot, msgBuf, msgCap), 'Device.encoder');
    this.replayable = replayable;
    this.blocks = replayable ? [] : null;
    this.autoBarriers = autoBarriers;
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
    if (this.frozen) {
      throw new MlxError('InvalidArgument', `Encoder.${what}: the encoder must be recording (got a replayable encoder whose recording was committed: replay() it)`);
    }
    return this._h as Pointer;
  }

  /** Records one dispatch: `grid` counts threadgroups, `threads` is the threadgroup size. */
  dispatch(p: Pipeline, b: DispatchBindings, grid: Dim3, threads: Dim3): void {
    const state = this._state;
    if (this._h === 0 || state.closed || this.inFlight || this.frozen) this.handle('dispatch'); // throws the reason
    if (typeof p !== 'object' || p === null || typeof p._h !== 'number') throw bindErr('pipeline', 'a Pipeline', p);
    const ph = p._h;
    if (ph === 0) throw releasedError(`pipeline ${p.name}`);
    if (p.library._state !== state) {
      throw new MlxError('InvalidArgument', `Encoder.dispatch: pipeline ${p.name} belongs to another device`);
    }
    const len = packDispatch(block, state, ph, b, grid, threads, packedBuffers);
    // Checked here too (the backends check it) so that an atomic section
    // refuses it before recording anything.
    const t = threads[0] * threads[1] * threads[2];
    if (t > p.maxThreads) {
      throw new MlxError('InvalidArgument', `Encoder.dispatch ${p.name}: threads per threadgroup must be at most ${p.maxThreads} for this pipeline (got ${threads[0]}x${threads[1]}x${threads[2]} = ${t})`);
    }
    const held = this.held;
    const mark = held.length;
    const n = packedBuffers.count;
    const slots = packedBuffers.slots;
    // One pass over the bound allocations: hold each once per recording (the
    // mark says it already is), note what may be written, and look for a
    // hazard with what dispatches since the last barrier read and wrote
    // (inside an atomic section, an op of several dispatches, the op's own
    // dependencies are ordered even when the caller places its barriers).
    const stamp = this.stamp;
    const writes = b.writes === undefined ? p._writes : writesMask(b.writes);
    const index = packedBuffers.index;
    const ordered = this.autoBarriers || this.staged !== null;
    const seg = this.segment;
    let hazard = this.forceBarrier;
    for (let i = 0; i < n; i++) {
      const o = slots[i]!;
      const w = (writes >>> index[i]!) & 1;
      if (w !== 0) o._writeMark = stamp;
      if (o._holdMark !== stamp) {
        o._holdMark = stamp;
        held.push(o);
      }
      if (o._wSeg! >= seg || (w !== 0 && o._rSeg! >= seg)) hazard = true;
    }
    if (p._holdMark !== stamp) {
      p._holdMark = stamp;
      held.push(p);
    }
    if (ordered) this.orderAfterWrites(writes, n, hazard);
    else for (let i = 0; i < n; i++) slots[i] = undefined;
    const staged = this.staged;
    if (staged !== null) {
      staged.push({ block: block.bytes.slice(0, len), pipeline: p, heldEnd: held.length });
      this.stagedDispatches++;
      return;
    }
    const status = state.sym.mlxn_encoder_dispatch(this._h as Pointer, block.bytes, len, msgBuf, msgCap);
    if (status !== 0) {
      this.dropHeld(mark);
      throw statusError(status, `dispatch ${p.name}`);
    }
    this.recorded++;
    if (this.blocks !== null) this.blocks.push(block.bytes.slice(0, len));
  }

  /**
   * @internal `count` u32 words in which the blocks of the next dispatch
   * recorded meet (arrival counters, flags), bound as [buffer, byteOffset],
   * 16-byte aligned; plans ask for them by PlannedDispatch.syncWords and
   * record() binds them. They belong to this encoder: zero when first
   * bound, never bound by another dispatch of the same recording, and not
   * reachable through the public API, so no caller writes or frees them. A
   * kernel that binds them must leave them as it found them in the bits it
   * reads (softmax_stream leaves each word's low 31 bits zero and flips its
   * top bit), so every commit or replay finds them so. Words are taken
   * afresh by each recording; those of a replayable recording stay its own.
   * A dispatch that never runs (an atomic section refused) leaves its words
   * unused.
   */
  _syncWords(count: number): readonly [Buffer, number] {
    this.handle('_syncWords');
    return this.syncArena.take(this, '_syncWords', count);
  }

  /**
   * @internal `count` u32 words of working memory for the next dispatch
   * recorded (per-block partial results it writes, then reads back within
   * the dispatch), bound as [buffer, byteOffset], 16-byte aligned; plans ask
   * for them by PlannedDispatch.scratchWords and record() binds them. As
   * _syncWords' words, they are this encoder's alone, never bound by another
   * dispatch of the same recording, taken afresh by each recording, kept by
   * a replayable one and freed with the encoder; unlike them, their contents
   * are whatever the last dispatch that bound them left (a kernel writes
   * before it reads).
   */
  _scratchWords(count: number): readonly [Buffer, number] {
    this.handle('_scratchWords');
    return this.scratchArena.take(this, '_scratchWords', count);
  }

  /**
   * @internal the words _syncWords gave dispatch `index` of a replayable
   * recording (what a patch of that dispatch binds again), if `count` of them.
   */
  _syncWordsOf(index: number, count: number): readonly [Buffer, number] | undefined {
    return this.syncArena.of(index, count);
  }

  /** @internal the words _scratchWords gave dispatch `index` of a replayable recording, if `count` of them. */
  _scratchWordsOf(index: number, count: number): readonly [Buffer, number] | undefined {
    return this.scratchArena.of(index, count);
  }

  /**
   * Dispatches recorded so far (inside an atomic section, those it has
   * staged too): the index the next dispatch will have, which patch() takes.
   */
  get dispatchCount(): number {
    return this.recorded + this.stagedDispatches;
  }

  /** Makes the writes of earlier dispatches visible to later ones. */
  barrier(): void {
    this.handle('barrier');
    this.recordBarrier();
  }

  private recordBarrier(): void {
    this.segment = nextStamp++;
    this.barriers++;
    if (this.staged !== null) {
      this.staged.push({ block: null, pipeline: null, heldEnd: this.held.length });
      return;
    }
    check(this._state.sym.mlxn_encoder_barrier(this._h as Pointer, msgBuf, msgCap), 'Encoder.barrier');
  }

  /**
   * Places a barrier before the dispatch being recorded when `hazard` says one
   * of its n buffers (packedBuffers) was written by a dispatch since the last
   * barrier, or that it writes one such a dispatch read; then marks what it
   * reads and writes, and clears the slots. Whole allocations: any two
   * bindings of one allocation overlap.
   *
   * Segment numbers grow across all encoders and a mark only ever rises, so a
   * mark at or above this encoder's segment means "since my last barrier" (or
   * another encoder's later work, which costs a barrier but never hides one of
   * this encoder's own writes).
   */
  private orderAfterWrites(writes: number, n: number, hazard: boolean): void {
    if (hazard) {
      this.forceBarrier = false;
      this.recordBarrier();
    }
    const seg = this.segment;
    const slots = packedBuffers.slots;
    const index = packedBuffers.index;
    for (let i = 0; i < n; i++) {
      const o = slots[i]!;
      slots[i] = undefined;
      if ((writes >>> index[i]!) & 1) {
        if (o._wSeg! < seg) o._wSeg = seg;
      } else if (o._rSeg! < seg) {
        o._rSeg = seg;
      }
    }
  }

  /** Barriers recorded by this encoder since it was made, placed automatically or by barrier(). */
  get barrierCount(): number {
    return this.barriers;
  }

  /**
   * Runs `fn` and records the dispatches and barriers it makes only if it
   * returns: when it throws, the encoder is as it was before. Ops that record
   * more than one dispatch run inside it, so a refusal halfway records
   * nothing. Sections nest (an inner one is part of the outer).
   */
  atomic<T>(fn: () => T): T {
    if (this.staged !== null) return fn();
    this.handle('atomic');
    const staged: Staged[] = [];
    const mark = this.held.length;
    this.staged = staged;
    this.stagedDispatches = 0;
    let result: T;
    try {
      result = fn();
    } catch (e) {
      this.dropHeld(mark);
      // The section's marks are on the buffers although its dispatches were
      // dropped, and its barriers with them: the next dispatch starts after a
      // barrier, whatever the marks say.
      this.forceBarrier = true;
      throw e;
    } finally {
      this.staged = null;
      this.stagedDispatches = 0;
    }
    const sym = this._state.sym;
    const h = this._h as Pointer;
    for (let i = 0; i < staged.length; i++) {
      const s = staged[i]!;
      const status = s.block === null
        ? sym.mlxn_encoder_barrier(h, msgBuf, msgCap)
        : sym.mlxn_encoder_dispatch(h, s.block, s.block.length, msgBuf, msgCap);
      if (status !== 0) {
        // The backend refused what every check here accepted: a disagreement
        // between this layer and the backend, not the caller's input. The
        // first i steps are recorded and cannot be taken back (Metal encodes
        // at dispatch), so the encoder refuses to commit them.
        const err = statusError(status, s.pipeline === null ? 'Encoder.barrier' : `dispatch ${s.pipeline.name}`);
        if (i > 0) {
          this.broken = `step ${i + 1} of ${staged.length} of an atomic section was refused after the first ${i} were recorded (${err.message}); release this encoder`;
          this.dropHeld(staged[i - 1]!.heldEnd);
        } else {
          this.dropHeld(mark);
        }
        throw err;
      }
      if (s.block !== null) {
        this.recorded++;
        if (this.blocks !== null) this.blocks.push(s.block);
      }
    }
    return result;
  }

  /**
   * Starts the dispatches recorded since the last flush or commit while the
   * recording goes on (mlx_native.h mlxn_encoder_flush): on cuda the device
   * runs them while the host records the rest; metal and the emulator start
   * the whole recording at its commit. Nothing else changes: commit (or
   * commitAndWait) still ends the recording and its wait covers everything
   * flushed, barriers order the dispatches as without the flush, and
   * gpuTimeNs spans the first flush to the end. From the flush on, what the
   * flushed dispatches bind counts as in flight (a buffer they bind cannot be
   * written from the host, one they may write cannot be read) until the
   * commit's work ends, on every backend alike. Refused inside atomic() and
   * for a replayable encoder (its recording is captured whole at its first
   * commit).
   */
  flush(): void {
    const h = this.handle('flush');
    if (this.broken !== null) throw new MlxError('Internal', `Encoder.flush: ${this.broken}`);
    if (this.staged !== null) throw new MlxError('InvalidArgument', 'Encoder.flush: must be called outside atomic() (got a call inside an atomic section)');
    if (this.replayable) {
      throw new MlxError('InvalidArgument', 'Encoder.flush: the encoder must not be replayable (its recording is captured whole at its first commit) (got a replayable encoder)');
    }
    const status = this._state.sym.mlxn_encoder_flush(h, msgBuf, msgCap);
    if (status !== 0) {
      // What the flush queued was waited for and dropped: the recording cannot be committed whole any more.
      const err = statusError(status, 'Encoder.flush');
      this.broken = `a flush failed, so the recording is incomplete (${err.message})`;
      throw err;
    }
    this.countInFlight();
  }

  /** Counts what `held` gained since the last flush as in flight (and what the recording writes among all of it). */
  private countInFlight(): void {
    const held = this.held;
    const written = this.flushedWritten;
    const stamp = this.stamp;
    for (let i = 0; i < held.length; i++) {
      const o = held[i] as BindableBuffer;
      if (o._pending === undefined) continue; // a pipeline
      if (i >= this.flushedHeld) o._pending++;
      // A buffer held since an earlier flush may be written by a dispatch recorded after it.
      if (o._writeMark === stamp && o._flushWriteMark !== stamp) {
        o._flushWriteMark = stamp;
        o._pendingWrites!++;
        written.push(o);
      }
    }
    this.flushedHeld = held.length;
  }

  private submit(): Pointer {
    const h = this.handle('commit');
    if (this.broken !== null) throw new MlxError('Internal', `Encoder.commit: ${this.broken}`);
    const t0 = performance.now();
    check(this._state.sym.mlxn_encoder_commit(h, msgBuf, msgCap), 'Encoder.commit');
    this.lastSubmitMs = performance.now() - t0;
    this.inFlight = true;
    const held = this.held;
    this.countInFlight();
    const written = this.flushedWritten;
    this.heldInFlight = held;
    this.writtenInFlight = written;
    this.flushedHeld = 0;
    this.flushedWritten = [];
    if (this.replayable) {
      this.frozen = true;
      this.replayHeld = held;
      this.replayWritten = written;
    }
    this.held = [];
    // The next recording's dispatches run after this commit's (which leave
    // the sync words as they found them): both arenas from their start again.
    this.syncArena.restart();
    this.scratchArena.restart();
    this.stamp = nextStamp++;
    this.segment = nextStamp++; // commits of one encoder run in order
    return h;
  }

  /** Lets go of the objects held from index `mark` on (dispatches not recorded after all). */
  private dropHeld(mark: number): void {
    const held = this.held;
    for (let i = mark; i < held.length; i++) held[i]!._holdMark = 0;
    held.length = mark;
  }

  /** Lets go of what the finished (or abandoned) commit held. */
  private settle(): void {
    const held = this.heldInFlight;
    for (let i = 0; i < held.length; i++) {
      const o = held[i]!;
      if ((o as BindableBuffer)._pending !== undefined) (o as BindableBuffer)._pending!--;
    }
    const written = this.writtenInFlight;
    for (let i = 0; i < written.length; i++) written[i]!._pendingWrites!--;
    this.heldInFlight = [];
    this.writtenInFlight = [];
    this.inFlight = false;
    this.started = false;
    // A replayable recording is never over before the encoder is released.
    if (!this.replayable) this._epoch++;
  }

  /**
   * @internal true while the recording of `epoch` is not over: recorded and
   * not yet committed, or committed and still running.
   */
  _recordingEpoch(epoch: number): boolean {
    return this._h !== 0 && !this._state.closed && this._epoch === epoch;
  }

  private finish(h: Pointer): void {
    const status = this._state.sym.mlxn_encoder_wait(h, msgBuf, msgCap);
    this.settle();
    if (status !== 0) throw statusError(status, 'command buffer');
    this.lastGpuTimeNs = Number(this._state.sym.mlxn_encoder_gpu_time_ns(h));
  }

  /** Submits the recorded work and blocks until it ends. */
  commitAndWait(): void {
    this.finish(this.submit());
  }

  /**
   * Submits the recorded work; resolves when it ends, polling without
   * blocking the event loop. Releasing the encoder or closing its device
   * meanwhile waits for the work, then rejects this promise.
   */
  async commit(): Promise<void> {
    await this.settleWhenDone(this.submit());
  }

  /** Polls the work of `h` without blocking the event loop, then finishes it. */
  private async settleWhenDone(h: Pointer): Promise<void> {
    const state = this._state;
    const sym = state.sym;
    // The first poll comes after a tick, so the encoder is in flight until the
    // promise settles, however quickly the work ends.
    await pollUntil(() => this._h === 0 || state.closed || sym.mlxn_encoder_status(h) !== ENCODER_STATE.pending, COMMIT_POLLS);
    if (state.closed) throw releasedError('encoder (its device was closed while its commit was in flight)');
    if (this._h === 0) throw releasedError('encoder (released while its commit was in flight)');
    this.finish(h);
  }

  private submitReplay(): Pointer {
    if (this._h === 0 || this._state.closed) throw releasedError('encoder');
    if (!this.replayable) {
      throw new MlxError('InvalidArgument', 'Encoder.replay: the encoder must be replayable (device.encoder({ replayable: true })) (got an encoder made without it)');
    }
    if (this.inFlight) {
      throw new MlxError('InvalidArgument', 'Encoder.replay: the encoder must have no work in flight (got a commit or replay still running; await it first)');
    }
    if (!this.frozen) {
      throw new MlxError('InvalidArgument', 'Encoder.replay: the recording must have been committed once (got a recording never committed)');
    }
    const h = this._h as Pointer;
    const t0 = performance.now();
    check(this._state.sym.mlxn_encoder_replay(h, msgBuf, msgCap), 'Encoder.replay');
    this.lastSubmitMs = performance.now() - t0;
    this.inFlight = true;
    const held = this.replayHeld;
    for (let i = 0; i < held.length; i++) {
      const o = held[i] as BindableBuffer;
      if (o._pending !== undefined) o._pending++;
    }
    const written = this.replayWritten;
    for (let i = 0; i < written.length; i++) written[i]!._pendingWrites!++;
    this.heldInFlight = held;
    this.writtenInFlight = written;
    return h;
  }

  /**
   * Runs the recording of a replayable encoder's first commit again (with
   * the inline bytes patch() set since); resolves when the work ends. Host
   * access to the buffers it binds follows the rules of commit().
   */
  async replay(): Promise<void> {
    await this.settleWhenDone(this.submitReplay());
  }

  /** replay(), blocking until the work ends. */
  replayAndWait(): void {
    this.finish(this.submitReplay());
  }

  /**
   * Submits a replay (as replay()) and returns at once, the work in flight
   * until wait(): the host can meanwhile prepare other work (patch another
   * encoder, write buffers this one does not bind).
   */
  replayStart(): void {
    this.submitReplay();
    this.started = true;
  }

  /**
   * Blocks until the work replayStart() submitted ends, and settles it as
   * replayAndWait() does (its errors thrown here); returns at once when
   * nothing is in flight. Work of commit() or replay() is theirs to settle.
   */
  wait(): void {
    if (this._h === 0 || this._state.closed) throw releasedError('encoder');
    if (!this.inFlight) return;
    if (!this.started) {
      throw new MlxError('InvalidArgument', 'Encoder.wait: the work in flight must be replayStart()\'s (got a commit or replay whose promise settles it; await that)');
    }
    this.started = false;
    this.finish(this._h as Pointer);
  }

  /**
   * Sets the inline bytes of recorded dispatches for the replays that
   * follow: dispatches `first`, `first + 1`, ... given again as they would be
   * recorded now, each of which must equal the recorded one but for the
   * contents of its bytes bindings (same pipeline, grid, threadgroup size,
   * buffers, offsets, binding indices and lengths). Every dispatch is checked
   * before any is patched; only the bytes bindings that changed cross the
   * FFI. A replayable encoder only, with no work in flight.
   */
  patch(first: number, dispatches: readonly PatchDispatch[]): void {
    if (this._h === 0 || this._state.closed) throw releasedError('encoder');
    const blocks = this.blocks;
    if (blocks === null) {
      throw new MlxError('InvalidArgument', 'Encoder.patch: the encoder must be replayable (device.encoder({ replayable: true })) (got an encoder made without it)');
    }
    if (this.inFlight) {
      throw new MlxError('InvalidArgument', 'Encoder.patch: the encoder must have no work in flight (got a commit or replay still running; await it first)');
    }
    if (!(Number.isInteger(first) && first >= 0 && first + dispatches.length <= blocks.length)) {
      throw new MlxError('InvalidArgument', `Encoder.patch: dispatches [first, first + ${dispatches.length}) must lie within the ${blocks.length} recorded (got first = ${first})`);
    }
    const fresh: Uint8Array[] = [];
    for (let i = 0; i < dispatches.length; i++) {
      const d = dispatches[i]!;
      const p = d.pipeline;
      if (typeof p !== 'object' || p === null || typeof p._h !== 'number') throw bindErr('pipeline', 'a Pipeline', p);
      if (p._h === 0) throw releasedError(`pipeline ${p.name}`);
      const len = packDispatch(block, this._state, p._h, d.bindings, d.grid, d.threads);
      const now = block.bytes.subarray(0, len);
      const was = blocks[first + i]!;
      const records = DISPATCH_HEADER_BYTES + DISPATCH_BINDING_BYTES * block.words[W_BINDING_COUNT]!;
      const what = len !== was.length ? 'block length (bindings or bytes lengths)' : firstDifference(now, was, records) ?? tensorMapDifference(now, was, records);
      if (what !== null) {
        throw new MlxError('InvalidArgument', `Encoder.patch: dispatch ${first + i} (${p.name}) must differ from the recorded one only in the contents of its bytes bindings (got another ${what})`);
      }
      fresh.push(now.slice());
    }
    const sym = this._state.sym;
    const h = this._h as Pointer;
    for (let i = 0; i < fresh.length; i++) {
      const now = fresh[i]!;
      const was = blocks[first + i]!;
      const words = new Uint32Array(now.buffer);
      const n = words[W_BINDING_COUNT]!;
      const payloadStart = DISPATCH_HEADER_BYTES + DISPATCH_BINDING_BYTES * n;
      for (let r = 0; r < n; r++) {
        const w = (DISPATCH_HEADER_BYTES + DISPATCH_BINDING_BYTES * r) / 4;
        if (words[w + R_KIND] !== BIND.bytes) continue;
        const at = payloadStart + words[w + R_A]!;
        const data = now.subarray(at, at + words[w + R_B]!);
        if (sameBytes(data, was.subarray(at, at + data.length))) continue;
        check(sym.mlxn_encoder_patch_bytes(h, first + i, words[w + R_INDEX]!, data, data.length, msgBuf, msgCap), 'Encoder.patch');
        was.set(data, at);
      }
    }
  }

  /**
   * Host time of the last commit's or replay's submission (the backend's
   * commit or replay call: cuda launches every kernel or the graph there),
   * in milliseconds; recording and waiting are not in it.
   */
  get submitMs(): number {
    return this.lastSubmitMs;
  }

  /** Device time of the last completed commit, in nanoseconds. */
  get gpuTimeNs(): number {
    return this.lastGpuTimeNs;
  }

  /** Waits for work in flight, then frees the encoder; recorded work is dropped. */
  release(): void {
    if (this._h === 0) return;
    untrack(this);
    this._state.releaseHandle(this._h, 'encoder'); // waits for work in flight
    this._h = 0;
    if (this.flushedHeld > 0 || this.flushedWritten.length > 0) {
      // Flushed and never committed: its counts go as a commit's would.
      this.heldInFlight = this.held.slice(0, this.flushedHeld);
      this.writtenInFlight = this.flushedWritten;
      this.flushedHeld = 0;
      this.flushedWritten = [];
    }
    this.settle();
    this._epoch++;
    this.held = [];
    this.staged = null;
    this.replayHeld = [];
    this.replayWritten = [];
    this.blocks = this.replayable ? [] : null;
    // The native encoder's work is over (its release waited for it).
    this.syncArena.release();
    this.scratchArena.release();
  }

  [Symbol.dispose](): void {
    this.release();
  }
}
