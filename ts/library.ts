// Libraries (kernel sources compiled at run time) and their pipelines.

import type { Pointer } from 'bun:ffi';
import type { Device } from './device.ts';
import { f32ToF16Bits } from './dtype.ts';
import { MlxError } from './errors.ts';
import { releasedError, track, untrack, type DeviceState } from './handles.ts';
import { ALL_BUFFERS, kernelWrites } from './metal-source.ts';
import { CONST_TYPE, check, msgBuf, msgCap, outSlot, readString, takeHandle } from './native.ts';
import { pollUntil, type PollOptions } from './poll.ts';

export type FunctionConstantType = 'i32' | 'u32' | 'f32' | 'f16' | 'i16' | 'u16';

/** Function-constant values by index: a boolean, or a typed scalar. */
export type FunctionConstants = Record<number, boolean | { type: FunctionConstantType; value: number }>;

const CONSTANT_RECORD_BYTES = 12;

const INT_CONSTANT_RANGES: Record<'i32' | 'u32' | 'i16' | 'u16', [number, number]> = {
  i32: [-0x80000000, 0x7fffffff],
  u32: [0, 0xffffffff],
  i16: [-0x8000, 0x7fff],
  u16: [0, 0xffff],
};

const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);

/**
 * The header's constants array: 12-byte records { u32 index; u32 type; u32
 * bits } in ascending index order. bits hold the value in its own type's bit
 * pattern, zero-extended to 32 bits (i16 -1 is 0x0000ffff; bool is 0 or 1).
 */
export function packConstants(constants: FunctionConstants | undefined): Uint32Array {
  const indices = constants ? Object.keys(constants).map(Number).sort((a, b) => a - b) : [];
  const out = new Uint32Array(indices.length * (CONSTANT_RECORD_BYTES / 4));
  indices.forEach((index, i) => {
    if (!Number.isInteger(index) || index < 0 || index > 0xffff) {
      throw new MlxError('InvalidArgument', `function constants: index must be an integer in [0, 65535] (got ${index})`);
    }
    const c = constants![index]!;
    let type: number;
    let bits: number;
    if (typeof c === 'boolean') {
      type = CONST_TYPE.bool;
      bits = c ? 1 : 0;
    } else if (c.type === 'f32') {
      type = CONST_TYPE.f32;
      scratchF32[0] = c.value;
      bits = scratchU32[0]!;
    } else if (c.type === 'f16') {
      type = CONST_TYPE.f16;
      bits = f32ToF16Bits(c.value);
    } else if (c.type in INT_CONSTANT_RANGES) {
      const [lo, hi] = INT_CONSTANT_RANGES[c.type];
      if (!Number.isInteger(c.value) || c.value < lo || c.value > hi) {
        throw new MlxError('InvalidArgument', `function constant ${index}: value must be an integer in [${lo}, ${hi}] for ${c.type} (got ${c.value})`);
      }
      type = CONST_TYPE[c.type];
      bits = c.type === 'i16' ? c.value & 0xffff : c.value >>> 0;
    } else {
      throw new MlxError('InvalidArgument', `function constant ${index}: type must be one of bool, ${Object.keys(CONST_TYPE).slice(1).join(', ')} (got ${String((c as { type: unknown }).type)})`);
    }
    out[i * 3] = index;
    out[i * 3 + 1] = type;
    out[i * 3 + 2] = bits;
  });
  return out;
}

/** A canonical text key of a set of constants ('' for none), for caches. */
export function constantsKey(constants: FunctionConstants | undefined): string {
  if (!constants) return '';
  const recs = packConstants(constants);
  let key = '';
  for (let i = 0; i < recs.length; i += 3) key += `${recs[i]}:${recs[i + 1]}:${recs[i + 2]};`;
  return key;
}

export class Pipeline {
  readonly device: Device;
  readonly library: Library;
  readonly name: string;
  readonly maxThreads: number;
  readonly staticThreadgroupMemory: number;
  /** @internal native handle; 0 once released. */
  _h: number;
  /** @internal the recording stamp under which an encoder last held it (ts/encoder.ts). */
  _holdMark = 0;
  /**
   * @internal the [[buffer(n)]] bindings the kernel may write, as a bit mask,
   * read from its Metal declaration (every binding where that is unknown):
   * the encoder's barriers follow from it.
   */
  _writes: number;

  /** @internal made by Library.pipeline. */
  constructor(library: Library, name: string, handle: number) {
    this.device = library.device;
    this.library = library;
    this.name = name;
    this._h = handle;
    this._writes = library._metalSource === null ? ALL_BUFFERS : kernelWrites(library._metalSource, name);
    const sym = library._state.sym;
    this.maxThreads = sym.mlxn_pipeline_max_threads(handle as Pointer);
    this.staticThreadgroupMemory = Number(sym.mlxn_pipeline_static_threadgroup_memory(handle as Pointer));
  }

  get released(): boolean {
    return this._h === 0 || this.library._state.closed;
  }
}

export class Library {
  readonly device: Device;
  /** The file name that compile errors cite. */
  readonly name: string;
  /** @internal */
  readonly _state: DeviceState;
  /** @internal native handle; 0 once released. */
  _h: number;
  private readonly pipelines = new Map<string, Pipeline>();
  private names: string[] | null = null;

  /** @internal made by Device.compile. */
  /** @internal the Metal source it was compiled from (null for CUDA source). */
  readonly _metalSource: string | null;

  constructor(device: Device, state: DeviceState, name: string, handle: number, metalSource: string | null) {
    this.device = device;
    this._state = state;
    this.name = name;
    this._metalSource = metalSource;
    this._h = handle;
    track(state, this, handle, 'library');
  }

  private handle(): Pointer {
    if (this._h === 0 || this._state.closed) throw releasedError(`library ${this.name}`);
    return this._h as Pointer;
  }

  /** The kernel entry names of the library. */
  get kernelNames(): string[] {
    if (this.names === null) {
      const h = this.handle();
      const text = readString((out, cap) => Number(this._state.sym.mlxn_library_kernel_names(h, out, cap)));
      this.names = text.length === 0 ? [] : text.split('\n').filter((s) => s.length > 0);
    }
    return [...this.names];
  }

  /** The pipeline of one kernel, created once; MlxError('KernelNotFound') if absent. */
  pipeline(name: string): Pipeline {
    const cached = this.pipelines.get(name);
    if (cached) {
      this.handle();
      return cached;
    }
    const h = this.handle();
    check(this._state.sym.mlxn_pipeline_create(h, name, outSlot, msgBuf, msgCap), `pipeline ${name} of ${this.name}`);
    const handle = takeHandle();
    // The library owns its pipelines: they are freed with it (release, close
    // or collection), and each pipeline keeps its library alive.
    track(this._state, this, handle, 'pipeline');
    const p = new Pipeline(this, name, handle);
    this.pipelines.set(name, p);
    return p;
  }

  /** Frees the library and its pipelines; using either afterwards throws. */
  release(): void {
    if (this._h === 0) return;
    for (const p of this.pipelines.values()) {
      this._state.releaseHandle(p._h, 'pipeline');
      p._h = 0;
    }
    this.pipelines.clear();
    untrack(this);
    this._state.releaseHandle(this._h, 'library');
    this._h = 0;
  }

  [Symbol.dispose](): void {
    this.release();
  }
}

// A compile job is polled with timeouts from the first poll: a compile takes
// tens of milliseconds at least.
const COMPILE_POLLS: PollOptions = { immediatePolls: 0, maxDelayMs: 8 };

/**
 * A compile running on a native thread (Device.compileAsync, the kernel
 * registry's warm-up). `done` polls and never blocks; `finish()` takes the
 * library, waiting for the compile if it has not ended. Closing the device
 * meanwhile waits for the compile and frees what it made.
 */
export class CompileJob {
  readonly device: Device;
  /** The file name that compile errors cite. */
  readonly name: string;
  private readonly state: DeviceState;
  private readonly metalSource: string | null;
  private h: number;
  private outcome: { library: Library } | { error: unknown } | null = null;

  /** @internal made by Device.compileAsync and the kernel registry. */
  constructor(device: Device, state: DeviceState, name: string, handle: number, metalSource: string | null) {
    this.device = device;
    this.state = state;
    this.name = name;
    this.metalSource = metalSource;
    this.h = handle;
    track(state, this, handle, 'compile');
  }

  /** True once the library or the compile error is ready (or the device closed). */
  get done(): boolean {
    if (this.h === 0 || this.state.closed) return true;
    return this.state.sym.mlxn_compile_job_done(this.h as Pointer) === 1;
  }

  /** The library, or the compile's MlxError; the same one on every call. */
  finish(): Library {
    if (this.outcome === null) {
      if (this.state.closed) throw releasedError(`compile of ${this.name} (its device was closed)`);
      const h = this.h;
      this.h = 0;
      untrack(this);
      this.state.live.delete(h);
      try {
        check(this.state.sym.mlxn_compile_job_finish(h as Pointer, outSlot, msgBuf, msgCap), `compile ${this.name}`);
        this.outcome = { library: new Library(this.device, this.state, this.name, takeHandle(), this.metalSource) };
      } catch (error) {
        this.outcome = { error };
      }
    }
    if ('library' in this.outcome) return this.outcome.library;
    throw this.outcome.error;
  }

  /** Resolves with the library once the compile ends, polling without blocking. */
  async wait(): Promise<Library> {
    await pollUntil(() => this.done, COMPILE_POLLS);
    return this.finish();
  }
}
