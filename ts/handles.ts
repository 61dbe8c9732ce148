// Ownership of native handles.
//
// Each Device has one DeviceState: its library, its native handle and the
// handles of every live object made from it. Releasing an object (release(),
// `using`, or the FinalizationRegistry when it is collected unreleased) frees
// its handle once; closing the device frees every handle still live, children
// first. The finalizer's held values reference the DeviceState, never the
// objects themselves, so registration does not keep an object alive.
//
// Work in flight: an encoder holds the objects its recorded dispatches bind
// (ts/encoder.ts), so none is collected before its work ends; a handle freed
// here while work still uses it (release(), Device.close()) stays valid in the
// backend until that work ends, because every backend counts the references
// of its dispatches. Closing a device waits for its encoders' work and its
// compile jobs first.

import type { Pointer } from 'bun:ffi';
import { MlxError } from './errors.ts';
import { msgBuf, msgCap, type NativeLib, type Symbols } from './native.ts';

export type HandleKind = 'compile' | 'encoder' | 'pipeline' | 'library' | 'buffer';

// Release order at device close: what uses an object goes before it.
const RELEASE_ORDER: readonly HandleKind[] = ['compile', 'encoder', 'pipeline', 'library', 'buffer'];

export class DeviceState {
  readonly lib: NativeLib;
  readonly sym: Symbols;
  readonly handle: Pointer;
  closed = false;
  readonly live = new Map<number, HandleKind>();
  /** Host views of buffers (Buffer.hostView()), detached when their buffer is freed. */
  readonly views = new Map<number, WeakRef<ArrayBuffer>>();

  constructor(lib: NativeLib, handle: Pointer) {
    this.lib = lib;
    this.sym = lib.sym;
    this.handle = handle;
  }

  /** Frees a live handle of this device once; a second call does nothing. */
  releaseHandle(handle: number, kind: HandleKind): void {
    if (this.closed || this.live.get(handle) !== kind) return;
    this.live.delete(handle);
    if (kind === 'buffer') this.detachView(handle);
    freeHandle(this.sym, handle as Pointer, kind);
  }

  /**
   * Detaches the host view of a buffer whose memory goes away, so that a
   * typed array the caller kept reads as empty instead of touching freed
   * memory (transfer(0) detaches without copying).
   */
  detachView(handle: number): void {
    const ref = this.views.get(handle);
    if (ref === undefined) return;
    this.views.delete(handle);
    const ab = ref.deref();
    if (ab !== undefined && !ab.detached) ab.transfer(0);
  }

  /** Frees every live child handle, then the device. */
  close(): void {
    if (this.closed) return;
    for (const h of [...this.views.keys()]) this.detachView(h);
    for (const kind of RELEASE_ORDER) {
      for (const [h, k] of this.live) if (k === kind) freeHandle(this.sym, h as Pointer, k);
    }
    this.live.clear();
    this.closed = true;
    this.sym.mlxn_device_close(this.handle);
  }
}

function freeHandle(sym: Symbols, h: Pointer, kind: HandleKind): void {
  switch (kind) {
    case 'encoder':
      // Work in flight still uses the encoder: let it end first. Its error, if
      // any, has no one left to report to.
      sym.mlxn_encoder_wait(h, msgBuf, msgCap);
      msgBuf[0] = 0;
      sym.mlxn_encoder_release(h);
      return;
    case 'compile': {
      // A compile job (ts/library.ts CompileJob) nobody finished: let the
      // compile end, then free the library it made.
      const out = new BigUint64Array(1);
      sym.mlxn_compile_job_finish(h, out, msgBuf, msgCap);
      msgBuf[0] = 0;
      if (out[0] !== 0n) sym.mlxn_library_release(Number(out[0]) as Pointer);
      return;
    }
    case 'pipeline':
      sym.mlxn_pipeline_release(h);
      return;
    case 'library':
      sym.mlxn_library_release(h);
      return;
    case 'buffer':
      sym.mlxn_buffer_release(h);
      return;
  }
}

interface Held {
  state: DeviceState;
  handle: number;
  kind: HandleKind;
}

const children = new FinalizationRegistry<Held>((held) => held.state.releaseHandle(held.handle, held.kind));
const devices = new FinalizationRegistry<DeviceState>((state) => state.close());

/** Records a new child handle; `owner` is the object whose collection frees it. */
export function track(state: DeviceState, owner: object, handle: number, kind: HandleKind): void {
  state.live.set(handle, kind);
  children.register(owner, { state, handle, kind }, owner);
}

export function untrack(owner: object): void {
  children.unregister(owner);
}

export function trackDevice(owner: object, state: DeviceState): void {
  devices.register(owner, state, owner);
}

export function untrackDevice(owner: object): void {
  devices.unregister(owner);
}

export function releasedError(what: string): MlxError {
  return new MlxError('InvalidArgument', `${what} was used after release (or after its device was closed)`);
}
