// A set of tensors in mapped files (one safetensors file, a sharded
// checkpoint, one GGUF file): their bytes as views of the mapping, and their
// upload into device buffers, one buffer per tensor or many tensors packed
// into a few large buffers with a view per tensor.
//
// Upload copies: the tensor's bytes go from the mapping (pages read from the
// file as they are touched) into a device allocation with Buffer.write, one
// memcpy where the device shares memory with the host (metal, emu) and one
// host-to-device copy on cuda. Handing the mapping itself to the device would
// need a C ABI function that wraps a host range as a buffer (Metal's
// makeBuffer(bytesNoCopy:) takes page-aligned ranges; a mapping starts on a
// page, so the whole data section would be wrapped once and each tensor bound
// as a view at its offset, which views allow at multiples of 16 bytes: every
// GGUF tensor, and safetensors tensors whose offsets happen to be aligned).
// The header (native/include/mlx_native.h) has no such function, so the
// readers return byte ranges and copy.

import { VIEW_ALIGN, type Buffer } from '../buffer.ts';
import type { Device } from '../device.ts';
import { dtypeSize, viewAs, type TypedArray } from '../dtype.ts';
import { MlxError } from '../errors.ts';
import { argError, shown, type FileBytes, type TensorInfo, type WeightFormat } from './common.ts';

export interface PackOptions {
  /** Each tensor starts at a multiple of this many bytes of its buffer: a power of two, at least 16; default 256. */
  align?: number;
  /** The most bytes one buffer holds; default (and at most) the device's maxBufferLength. */
  maxBufferBytes?: number;
}

/**
 * Tensors packed into a few device buffers (u8 allocations), each tensor a
 * view typed by its storage dtype and shape. Releasing it releases the
 * buffers, and with them every view.
 */
export class PackedWeights {
  /** The allocations, in the order the tensors were packed. */
  readonly buffers: readonly Buffer[];
  /** One view per tensor, by name. */
  readonly views: ReadonlyMap<string, Buffer>;
  /** Bytes allocated, padding included. */
  readonly byteLength: number;

  /** @internal made by WeightSource.uploadPacked */
  constructor(buffers: Buffer[], views: Map<string, Buffer>) {
    this.buffers = Object.freeze(buffers);
    this.views = views;
    this.byteLength = buffers.reduce((s, b) => s + b.byteLength, 0);
  }

  /** The view of a packed tensor; MlxError for a name that was not packed. */
  get(name: string): Buffer {
    const v = this.views.get(name);
    if (v === undefined) {
      throw argError('PackedWeights.get', 'name', `one of the ${this.views.size} packed tensors`, shown(name));
    }
    return v;
  }

  release(): void {
    for (const b of this.buffers) b.release();
  }

  [Symbol.dispose](): void {
    this.release();
  }
}

/** A set of named tensors in mapped files. */
export abstract class WeightSource {
  /** Every tensor, by name, in the order of its bytes in the file (shards in index order). */
  abstract readonly tensors: ReadonlyMap<string, TensorInfo>;
  /** What messages call this source ("safetensors model.safetensors", ...). */
  abstract readonly description: string;
  /** The mapped bytes of the file that holds the tensor. */
  protected abstract fileBytes(info: TensorInfo): Uint8Array;

  /** Tensor names in file order. */
  names(): string[] {
    return [...this.tensors.keys()];
  }

  has(name: string): boolean {
    return this.tensors.has(name);
  }

  /** The tensor's description; MlxError naming the source when it has no such tensor. */
  info(name: string): TensorInfo {
    const t = this.tensors.get(name);
    if (t === undefined) {
      throw new MlxError(
        'InvalidArgument',
        `${this.description}: tensor ${shown(name)} must be one of its ${this.tensors.size} tensors (got a name it does not hold)`,
      );
    }
    return t;
  }

  /** The tensor's bytes: a view of the mapping, no copy (valid while this source is referenced). */
  bytes(name: string): Uint8Array {
    const t = this.info(name);
    return this.fileBytes(t).subarray(t.byteOffset, t.byteOffset + t.byteLength);
  }

  /**
   * The tensor's bytes as a host typed array of its storage dtype (Float32Array
   * for F32, Uint16Array for BF16 bit patterns, Uint8Array for quantized
   * blocks, ...): a view of the mapping where the tensor's offset is a
   * multiple of the element size, a copy where it is not (safetensors data
   * offsets need not be aligned).
   */
  view(name: string): TypedArray {
    const t = this.info(name);
    const bytes = this.bytes(name);
    const size = dtypeSize(t.storage.dtype);
    const n = bytes.byteLength / size;
    const aligned = bytes.byteOffset % size === 0 ? bytes : bytes.slice();
    return viewAs(t.storage.dtype, aligned.buffer as ArrayBuffer, aligned.byteOffset, n);
  }

  /** One device buffer holding the tensor (its storage dtype and shape). */
  upload(device: Device, name: string): Buffer {
    const t = this.info(name);
    checkUploadable('upload', t);
    const buf = device.alloc(t.storage.dtype, t.storage.shape);
    try {
      const b = this.bytes(name);
      buf.write(new DataView(b.buffer, b.byteOffset, b.byteLength));
    } catch (e) {
      buf.release();
      throw e;
    }
    return buf;
  }

  /**
   * The tensors (default: every one with elements, in file order) packed
   * into as few device buffers as the size limit allows, in the order given;
   * each tensor a view at a multiple of `align` bytes. A model's weights then
   * live in a few allocations, and every op takes the views as buffers.
   */
  uploadPacked(device: Device, names?: readonly string[], opts: PackOptions = {}): PackedWeights {
    const op = 'uploadPacked';
    const list = names ?? [...this.tensors.values()].filter((t) => t.byteLength > 0).map((t) => t.name);
    if (!Array.isArray(list)) throw argError(op, 'names', 'an array of tensor names', shown(list));
    const align = opts.align ?? 256;
    if (!Number.isSafeInteger(align) || align < VIEW_ALIGN || (align & (align - 1)) !== 0) {
      throw argError(op, 'opts.align', `a power of two of at least ${VIEW_ALIGN}`, align);
    }
    const deviceMax = device.limits.maxBufferLength;
    const limit = opts.maxBufferBytes ?? deviceMax;
    if (!Number.isSafeInteger(limit) || limit <= 0 || limit > deviceMax) {
      throw argError(op, 'opts.maxBufferBytes', `a positive integer at most the device's maxBufferLength (${deviceMax})`, limit);
    }
    const seen = new Set<string>();
    const infos = list.map((name, i) => {
      if (typeof name !== 'string') throw argError(op, `names[${i}]`, 'a tensor name', name);
      if (seen.has(name)) throw argError(op, `names[${i}]`, 'a name not listed before', shown(name));
      seen.add(name);
      const t = this.info(name);
      checkUploadable(op, t);
      if (t.byteLength > limit) {
        throw argError(op, `the tensor ${shown(name)}`, `at most the buffer limit of ${limit} bytes`, `${t.byteLength} bytes`);
      }
      return t;
    });
    // Greedy: tensors in the order given, a new buffer when the next would pass the limit.
    const groups: { infos: TensorInfo[]; at: number[]; bytes: number }[] = [];
    let cur: (typeof groups)[number] | null = null;
    for (const t of infos) {
      const at: number = cur === null ? 0 : Math.ceil(cur.bytes / align) * align;
      if (cur === null || at + t.byteLength > limit) {
        cur = { infos: [t], at: [0], bytes: t.byteLength };
        groups.push(cur);
      } else {
        cur.infos.push(t);
        cur.at.push(at);
        cur.bytes = at + t.byteLength;
      }
    }
    const buffers: Buffer[] = [];
    const views = new Map<string, Buffer>();
    try {
      for (const g of groups) {
        const buf = device.alloc('u8', [g.bytes]);
        buffers.push(buf);
        g.infos.forEach((t, i) => {
          buf.write(this.bytes(t.name), g.at[i]!);
          views.set(t.name, buf.view(t.storage.dtype, t.storage.shape, g.at[i]!));
        });
      }
    } catch (e) {
      for (const b of buffers) b.release();
      throw e;
    }
    return new PackedWeights(buffers, views);
  }
}

/** A source of one file (SafetensorsFile, GgufFile): its bytes, mapped or given, and the tensors its header lists. */
export abstract class FileSource<T extends TensorInfo> extends WeightSource {
  readonly path: string;
  readonly description: string;
  /** Where the data section starts in the file. */
  readonly dataStart: number;
  readonly tensors: ReadonlyMap<string, T>;
  protected readonly file: FileBytes;

  protected constructor(format: WeightFormat, file: FileBytes, header: { dataStart: number; tensors: ReadonlyMap<string, T> }) {
    super();
    this.file = file;
    this.path = file.path;
    this.description = `${format} ${file.path}`;
    this.dataStart = header.dataStart;
    this.tensors = header.tensors;
  }

  protected fileBytes(): Uint8Array {
    return this.file.bytes;
  }
}

function checkUploadable(op: string, t: TensorInfo): void {
  if (t.byteLength === 0) {
    throw argError(op, `the tensor ${shown(t.name)}`, 'a tensor with elements (device buffers hold at least one)', `shape [${t.shape.join(', ')}]`);
  }
}
