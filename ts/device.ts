// Devices: the entry point. A Device owns its buffers, libraries, pipelines
// and encoders; closing it frees them all.

import type { Pointer } from 'bun:ffi';
import { Buffer } from './buffer.ts';
import { DTYPES, dtypeSize, isDType, type DType } from './dtype.ts';
import { Encoder, type EncoderOptions } from './encoder.ts';
import { MlxError } from './errors.ts';
import { DeviceState, releasedError, trackDevice, untrackDevice } from './handles.ts';
import { CompileJob, Library, packConstants, type FunctionConstants } from './library.ts';
import {
  BACKENDS,
  LIMIT,
  check,
  chooseBackendWhy,
  isBackendName,
  loadBackend,
  msgBuf,
  msgCap,
  outSlot,
  readString,
  takeHandle,
  warnFallbackOnce,
  type BackendName,
} from './native.ts';
import { KernelRegistry } from './registry.ts';

export interface DeviceLimits {
  readonly maxThreadsPerThreadgroup: number;
  /** Bytes. */
  readonly maxThreadgroupMemory: number;
  readonly simdWidth: number;
  /** Bytes. */
  readonly maxBufferLength: number;
  /** True where buffers are host-visible (Buffer.hostView() is non-null). */
  readonly sharedMemory: boolean;
  /** cuda: the compute capability as 10 * major + minor (90: an H100 or H200); 0 on metal and emu. */
  readonly computeCapability: number;
  /** cuda: the streaming multiprocessors; 0 where the backend has no such number (metal, emu). */
  readonly multiprocessors: number;
}

export interface OpenOptions {
  /**
   * Default: MLX_NATIVE_BACKEND, else the best present (metal, then cuda, then emu);
   * falling back to emu writes one line to stderr, naming an explicit emu writes nothing.
   */
  backend?: BackendName;
  /** Which device of the backend; default 0. */
  ordinal?: number;
}

export interface CompileOptions {
  /** The file name that compile errors cite; default "source.metal" or "source.cu". */
  name?: string;
  constants?: FunctionConstants;
}

const encoder = new TextEncoder();

export class Device {
  readonly backend: BackendName;
  readonly name: string;
  readonly limits: DeviceLimits;
  /** The library file this device's backend was loaded from. */
  readonly libraryPath: string;
  private readonly state: DeviceState;
  private registry: KernelRegistry | null = null;

  private constructor(state: DeviceState) {
    this.state = state;
    this.backend = state.lib.backend;
    this.libraryPath = state.lib.path;
    const sym = state.sym;
    const h = state.handle;
    this.name = readString((out, cap) => Number(sym.mlxn_device_name(h, out, cap)));
    const limit = (key: number): number => Number(sym.mlxn_device_limit(h, key));
    this.limits = Object.freeze({
      maxThreadsPerThreadgroup: limit(LIMIT.maxThreadsPerThreadgroup),
      maxThreadgroupMemory: limit(LIMIT.maxThreadgroupMemory),
      simdWidth: limit(LIMIT.simdWidth),
      maxBufferLength: limit(LIMIT.maxBufferLength),
      sharedMemory: limit(LIMIT.sharedMemory) === 1,
      computeCapability: limit(LIMIT.computeCapability),
      multiprocessors: limit(LIMIT.multiprocessors),
    });
    trackDevice(this, state);
  }

  /** Opens a device; MlxError('DeviceNotFound') says what was tried and how to fix it. */
  static open(opts: OpenOptions = {}): Device {
    let backend = opts.backend;
    let fallback: string | null = null;
    if (backend === undefined) ({ backend, fallback } = chooseBackendWhy());
    if (!isBackendName(backend)) {
      throw new MlxError('InvalidArgument', `Device.open: backend must be one of ${BACKENDS.join(', ')} (got ${String(backend)})`);
    }
    const ordinal = opts.ordinal ?? 0;
    if (!Number.isInteger(ordinal) || ordinal < 0) {
      throw new MlxError('InvalidArgument', `Device.open: ordinal must be an integer >= 0 (got ${ordinal})`);
    }
    const lib = loadBackend(backend);
    const count = lib.sym.mlxn_device_count();
    if (ordinal >= count) {
      throw new MlxError(
        'DeviceNotFound',
        `Device.open: ${backend} has ${count} device(s), so ordinal must be below ${count} (got ${ordinal}); library ${lib.path}`,
      );
    }
    check(lib.sym.mlxn_device_open(ordinal, outSlot, msgBuf, msgCap), `Device.open(${backend} #${ordinal})`);
    if (fallback !== null) warnFallbackOnce(fallback);
    return new Device(new DeviceState(lib, takeHandle()));
  }

  private handle(): Pointer {
    if (this.state.closed) throw releasedError(`device ${this.name}`);
    return this.state.handle;
  }

  get closed(): boolean {
    return this.state.closed;
  }

  /** Native handles (buffers, libraries, pipelines, encoders) of this device not yet freed: for leak checks. */
  get liveHandles(): number {
    return this.state.live.size;
  }

  /** A zero-filled buffer of the dtype and shape ([] is a scalar). */
  alloc(dtype: DType, shape: readonly number[]): Buffer {
    const h = this.handle();
    if (!isDType(dtype)) {
      throw new MlxError('UnsupportedDtype', `Device.alloc: dtype must be one of ${DTYPES.join(', ')} (got ${String(dtype)})`);
    }
    if (!Array.isArray(shape)) {
      throw new MlxError('InvalidArgument', `Device.alloc: shape must be an array of positive integers (got ${typeof shape === 'object' ? String(shape) : `${typeof shape} ${String(shape)}`})`);
    }
    let count = 1;
    for (let i = 0; i < shape.length; i++) {
      const d = shape[i]!;
      if (!Number.isInteger(d) || d <= 0) {
        throw new MlxError('InvalidArgument', `Device.alloc: shape[${i}] must be a positive integer (got ${d}) in shape [${shape.join(', ')}]`);
      }
      count *= d;
      if (!Number.isSafeInteger(count * dtypeSize(dtype))) {
        throw new MlxError('InvalidArgument', `Device.alloc: the byte length of shape [${shape.join(', ')}] must be below 2^53 (it overflows)`);
      }
    }
    const bytes = count * dtypeSize(dtype);
    check(
      this.state.sym.mlxn_buffer_alloc(h, bytes, outSlot, msgBuf, msgCap),
      `Device.alloc(${dtype} [${shape.join(', ')}], ${bytes} bytes)`,
    );
    return new Buffer(this, this.state, dtype, shape, count, takeHandle());
  }

  /** A buffer holding `data`, converted to dtype (f16/bf16 rounded to nearest even). */
  upload(dtype: DType, shape: readonly number[], data: ArrayLike<number>): Buffer {
    const buf = this.alloc(dtype, shape);
    try {
      buf.writeNumbers(data);
    } catch (e) {
      buf.release();
      throw e;
    }
    return buf;
  }

  /** Compiles kernel source for this backend (MSL for metal and emu, CUDA C++ for cuda). */
  compile(source: string, opts: CompileOptions = {}): Library {
    const { h, name, src, constants } = this.compileArgs('compile', source, opts);
    check(
      this.state.sym.mlxn_library_compile(h, src, src.length, name, constants, constants.length / 3, outSlot, msgBuf, msgCap),
      `compile ${name}`,
    );
    return new Library(this, this.state, name, takeHandle(), this.backend === 'cuda' ? null : source);
  }

  /**
   * Starts compiling on a native thread and returns at once; the job's
   * `wait()` resolves with the library (or rejects with the compile error)
   * without blocking the event loop, and `finish()` takes it synchronously.
   */
  compileStart(source: string, opts: CompileOptions = {}): CompileJob {
    const { h, name, src, constants } = this.compileArgs('compileStart', source, opts);
    check(
      this.state.sym.mlxn_library_compile_start(h, src, src.length, name, constants, constants.length / 3, outSlot, msgBuf, msgCap),
      `compile ${name}`,
    );
    return new CompileJob(this, this.state, name, takeHandle(), this.backend === 'cuda' ? null : source);
  }

  /** compile(), off the event loop: resolves with the library once the compile ends. */
  compileAsync(source: string, opts: CompileOptions = {}): Promise<Library> {
    return this.compileStart(source, opts).wait();
  }

  private compileArgs(op: string, source: string, opts: CompileOptions) {
    const h = this.handle();
    if (typeof source !== 'string') {
      throw new MlxError('InvalidArgument', `Device.${op}: source must be a string (got ${source === null ? 'null' : typeof source})`);
    }
    const name = opts.name ?? (this.backend === 'cuda' ? 'source.cu' : 'source.metal');
    // The name ends up in generated source (#line directives): no control characters.
    if (typeof name !== 'string' || name.length === 0 || /[\x00-\x1f\x7f]/.test(name)) {
      throw new MlxError('InvalidArgument', `Device.${op}: opts.name must be a non-empty file name without control characters (got ${JSON.stringify(name)})`);
    }
    return { h, name, src: encoder.encode(source), constants: packConstants(opts.constants) };
  }

  /**
   * A new encoder. With autoBarriers (the default) it places a barrier before
   * each dispatch that touches a buffer an earlier dispatch since the last
   * barrier writes, or writes one that an earlier dispatch reads; false leaves
   * the barriers between the dispatches and ops the caller records to
   * enc.barrier() (an op of several dispatches still orders its own steps).
   * replayable: the first commit keeps the recording for enc.replay() and
   * enc.patch() (see EncoderOptions).
   */
  encoder(opts: EncoderOptions = {}): Encoder {
    this.handle();
    return new Encoder(this, this.state, opts.autoBarriers ?? true, opts.replayable === true);
  }

  /** The device's kernel registry (one per device). */
  get kernels(): KernelRegistry {
    this.handle();
    if (this.registry === null) this.registry = new KernelRegistry(this);
    return this.registry;
  }

  /**
   * Sets a backend option; the emulator knows "schedule" (sequential | random), "seed" and "timeout_ms", cuda
   * "pdl" (on | off: programmatic dependent launch of the registry's kernels, on by default from sm_90) and
   * "concurrent" (on | off: the dispatches between two barriers side by side on several streams, on by default).
   */
  setOption(key: string, value: string): void {
    check(this.state.sym.mlxn_device_set_option(this.handle(), key, value, msgBuf, msgCap), `Device.setOption(${key}=${value})`);
  }

  /** Frees every buffer, library, pipeline and encoder of the device, then the device. */
  close(): void {
    if (this.state.closed) return;
    untrackDevice(this);
    this.state.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}
