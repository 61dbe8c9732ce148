// Lifetimes of work in flight (issue 9): nothing bound to a recorded or
// running dispatch is freed, whoever lets go of it (collection, release(),
// `using`, Device.close()); host access to a buffer in flight is refused; a
// view never outlives its memory; an op that throws records nothing.
//
// Collection is forced with Bun.gc(true), then fresh buffers filled with a
// marker are allocated so that memory freed too early is handed out again and
// overwritten before the commit runs.

import { expect, test } from 'bun:test';
import { Device, MlxError, type Buffer, type Library } from '../ts/index.ts';
import { flashAttnVec, flashAttnVecTmpElements, l2Norm } from '../ts/ops/index.ts';
import { l2NormRef } from '../ts/reference/index.ts';
import { describeBackends, expectMlxError, maxRelErr, randomArray, rng, runsOnEmulator, TOL } from './helpers.ts';

const ADD_SOURCE = {
  metal: `#include <metal_stdlib>
using namespace metal;
kernel void add_one(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                    constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  if (i < n) y[i] = x[i] + 1.0f;
}
`,
  cuda: `extern "C" __global__ void add_one(const float* x, float* y, const unsigned* n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < *n) y[i] = x[i] + 1.0f;
}
`,
};

function compileAdd(dev: Device): Library {
  return dev.compile(dev.backend === 'cuda' ? ADD_SOURCE.cuda : ADD_SOURCE.metal, { name: dev.backend === 'cuda' ? 'add_one.cu' : 'add_one.metal' });
}

/** Collects garbage and lets the finalization callbacks run (they run as tasks, after the collection). */
async function collect(): Promise<void> {
  for (let i = 0; i < 3; i++) {
    Bun.gc(true);
    await new Promise((res) => setTimeout(res, 0));
  }
}

/** Allocates and fills buffers so that freed memory is reused and overwritten. */
function churn(dev: Device, n = 24, elements = 1024): void {
  const held: Buffer[] = [];
  for (let i = 0; i < n; i++) held.push(dev.upload('f32', [elements], new Float64Array(elements).fill(-7e30)));
  for (const b of held) b.release();
}


const ROWS = 8;
const DIM = 200;

describeBackends('lifetimes', ({ device }) => {
  test('an input referenced only by a recorded dispatch survives collection until the commit (decode loop, 30 steps)', async () => {
    const dev = device();
    const r = rng(11);
    using y = dev.alloc('f32', [ROWS, DIM]);
    using enc = dev.encoder();
    for (let step = 0; step < 30; step++) {
      const x = randomArray(r, ROWS * DIM, -2, 2);
      y.fill(Number.NaN);
      // The uploaded x is referenced by nothing but the encoder.
      l2Norm(enc, { x: dev.upload('f32', [ROWS, DIM], x), y, rows: ROWS, dim: DIM });
      await collect();
      churn(dev, 4, ROWS * DIM);
      await enc.commit();
      expect(maxRelErr(y.readNumbers(), l2NormRef(x, ROWS, DIM, 1e-6))).toBeLessThan(TOL.f32);
    }
  });

  test('a library and pipeline referenced only by a recorded dispatch survive collection', async () => {
    const dev = device();
    using x = dev.upload('f32', [256], Array.from({ length: 256 }, (_, i) => i));
    using y = dev.alloc('f32', [256]);
    using enc = dev.encoder();
    (() => {
      const lib = compileAdd(dev);
      enc.dispatch(lib.pipeline('add_one'), { buffers: [x, y], bytes: [, , Uint32Array.of(256)] }, [2, 1, 1], [128, 1, 1]);
    })();
    await collect();
    churn(dev);
    await enc.commit();
    expect(Array.from(y.readNumbers())).toEqual(Array.from({ length: 256 }, (_, i) => i + 1));
  });

  test('release() of a bound buffer, pipeline and library before the commit defers their free to the end of the work', async () => {
    const dev = device();
    const before = dev.liveHandles;
    const lib = compileAdd(dev);
    const pipe = lib.pipeline('add_one');
    const x = dev.upload('f32', [1000], Array.from({ length: 1000 }, (_, i) => i * 0.5));
    using y = dev.alloc('f32', [1000]);
    using enc = dev.encoder();
    enc.dispatch(pipe, { buffers: [x, y], bytes: [, , Uint32Array.of(1000)] }, [8, 1, 1], [128, 1, 1]);
    x.release();
    lib.release();
    expect(x.released).toBe(true);
    expect(pipe.released).toBe(true);
    expectMlxError(() => x.read(), 'after release');
    churn(dev);
    await enc.commit();
    expect(Array.from(y.readNumbers())).toEqual(Array.from({ length: 1000 }, (_, i) => i * 0.5 + 1));
    // Released handles are gone for the caller; y and enc remain.
    expect(dev.liveHandles).toBe(before + 2);
  });

  test('`using` buffers whose scope ends while their commit runs', async () => {
    const dev = device();
    const x = randomArray(rng(12), ROWS * DIM, -1, 1);
    using y = dev.alloc('f32', [ROWS, DIM]);
    using enc = dev.encoder();
    let pending: Promise<void>;
    {
      using xb = dev.upload('f32', [ROWS, DIM], x);
      l2Norm(enc, { x: xb, y, rows: ROWS, dim: DIM });
      pending = enc.commit();
    }
    churn(dev);
    await pending;
    expect(maxRelErr(y.readNumbers(), l2NormRef(x, ROWS, DIM, 1e-6))).toBeLessThan(TOL.f32);
  });

  test('host access to a buffer bound to a commit in flight throws (reads: only where the work writes it); after the commit it works', async () => {
    const dev = device();
    const x = randomArray(rng(13), ROWS * DIM, -1, 1);
    using xb = dev.upload('f32', [ROWS, DIM], x);
    using y = dev.alloc('f32', [ROWS, DIM]);
    using other = dev.alloc('f32', [4]);
    using enc = dev.encoder();
    l2Norm(enc, { x: xb, y, rows: ROWS, dim: DIM });
    const pending = enc.commit();
    expectMlxError(() => y.read(), 'must not be written by a commit still running');
    // x is only read by the work: reading it is fine, writing it is not.
    expect(Array.from(xb.readNumbers())).toEqual(Array.from(Float32Array.from(x)));
    expectMlxError(() => y.write(new Float32Array(4)), 'Buffer.write');
    expectMlxError(() => y.fill(0), 'Buffer.fill');
    expectMlxError(() => xb.writeNumbers(x), 'Buffer.writeNumbers');
    expectMlxError(() => y.hostView(), 'Buffer.hostView');
    other.read(); // not bound: fine
    await pending;
    expect(maxRelErr(y.readNumbers(), l2NormRef(x, ROWS, DIM, 1e-6))).toBeLessThan(TOL.f32);
    y.fill(0);
    if (runsOnEmulator(dev)) {
      // A commit that fails lets go of its buffers too (the emulator reports
      // the out-of-bounds read of x).
      const lib = compileAdd(dev);
      enc.dispatch(lib.pipeline('add_one'), { buffers: [xb, y], bytes: [, , Uint32Array.of(ROWS * DIM + 64)] }, [13, 1, 1], [128, 1, 1]);
      expectMlxError(() => enc.commitAndWait(), 'out-of-bounds');
      expect(y.read().length).toBe(ROWS * DIM);
    }
  });

  test('a view keeps its buffer alive, and is detached (empty) when the buffer is released or its device closed', async () => {
    const dev = device();
    if (!dev.limits.sharedMemory) {
      expect(dev.alloc('f32', [4]).hostView()).toBeNull();
      return;
    }
    const view = (() => dev.upload('f32', [1024], Array.from({ length: 1024 }, (_, i) => i)).hostView() as Float32Array)();
    await collect();
    churn(dev);
    expect(view[1000]).toBe(1000);
    const b = dev.upload('f32', [16], Array.from({ length: 16 }, (_, i) => i));
    const v = b.hostView() as Float32Array;
    const alias = new Float32Array(v.buffer, 8, 2);
    b.release();
    expect(v.length).toBe(0);
    expect(alias.length).toBe(0);
    expect(v[3]).toBeUndefined();
    const own = Device.open({ backend: dev.backend });
    const w = own.upload('f32', [8], [1, 2, 3, 4, 5, 6, 7, 8]).hostView() as Float32Array;
    expect(w[7]).toBe(8);
    own.close();
    expect(w.length).toBe(0);
    expect(w[7]).toBeUndefined();
  });

  test('Device.close() during a commit waits for the work, then the commit rejects; nothing is read after free', async () => {
    const own = Device.open({ backend: device().backend });
    // Enough work that it is still running when close() is called: a GPU
    // runs the emulator's share in microseconds.
    const { rows, dim, n } = runsOnEmulator(own) ? { rows: 64, dim: 1024, n: 8 } : { rows: 4096, dim: 4096, n: 200 };
    const xb = own.upload('f32', [rows, dim], randomArray(rng(14), rows * dim, -1, 1));
    const y = own.alloc('f32', [rows, dim]);
    const enc = own.encoder();
    for (let i = 0; i < n; i++) l2Norm(enc, { x: xb, y, rows, dim });
    const pending = enc.commit();
    own.close();
    let caught: unknown;
    try {
      await pending;
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(MlxError);
    expect((caught as MlxError).message).toContain('its device was closed while its commit was in flight');
    expect(own.liveHandles).toBe(0);
  });

  test('an op whose second dispatch is refused records nothing (flashAttnVec, nwg > 1, out released before the reduce)', () => {
    const dev = device();
    const p = { batch: 1, nHeads: 2, nKvHeads: 1, headDim: 256, kvSeqLen: 5, kvCapacity: 5, scale: 1 / 16, mask: 'none' as const, nwg: 2 };
    const r = rng(15);
    using q = dev.upload('f32', [1, 2, 256], randomArray(r, 512));
    using k = dev.upload('f32', [1, 1, 5, 256], randomArray(r, 1280));
    using v = dev.upload('f32', [1, 1, 5, 256], randomArray(r, 1280));
    const out = dev.alloc('f32', [1, 2, 256]);
    using tmp = dev.alloc('f32', [flashAttnVecTmpElements(p)]);
    tmp.fill(Number.NaN);
    using enc = dev.encoder();
    // The reduce (out's only writer) is refused: out is released just before it.
    const real = enc.dispatch.bind(enc);
    enc.dispatch = (pipe, b, g, t) => {
      if (pipe.name.startsWith('flash_attn_vec_reduce')) out.release();
      real(pipe, b, g, t);
    };
    expectMlxError(() => flashAttnVec(enc, { ...p, q, k, v, out, tmp }), 'after release');
    enc.commitAndWait();
    // The main kernel, which writes tmp, was not recorded either.
    expect(tmp.readNumbers().every(Number.isNaN)).toBe(true);
  }, 60_000); // the first use compiles the family (NVRTC on a fresh machine takes seconds)

  test('write() takes typed arrays, DataViews and ArrayBuffers (their own bytes only); anything else is an MlxError', () => {
    const dev = device();
    using b = dev.alloc('u8', [1 << 20]);
    b.fill(7);
    b.write(new ArrayBuffer(1 << 20));
    expect(b.read().every((x) => x === 0)).toBe(true);
    const ab = new ArrayBuffer(16);
    new Uint8Array(ab).fill(9);
    b.write(new DataView(ab, 4, 8), 100);
    expect(Array.from((b.read() as Uint8Array).subarray(98, 110))).toEqual([0, 0, 9, 9, 9, 9, 9, 9, 9, 9, 0, 0]);
    expectMlxError(() => b.write([1, 2, 3] as unknown as Uint8Array), 'Buffer.write: data must be');
    expectMlxError(() => b.write(null as unknown as Uint8Array), 'Buffer.write: data must be');
    expectMlxError(() => b.writeNumbers(null as unknown as number[]), 'Buffer.writeNumbers: data must be');
    expectMlxError(() => dev.alloc('f32', 5 as unknown as number[]), 'Device.alloc: shape must be');
    expectMlxError(() => dev.compile(null as unknown as string), 'Device.compile: source must be');
    using enc = dev.encoder();
    const pipe = compileAdd(dev).pipeline('add_one');
    const bad = (x: unknown) => x as never;
    expectMlxError(() => enc.dispatch(bad(null), { buffers: [b] }, [1, 1, 1], [1, 1, 1]), 'pipeline must be a Pipeline');
    expectMlxError(() => enc.dispatch(pipe, { buffers: [bad(null), b] }, [1, 1, 1], [1, 1, 1]), 'buffer at index 0 must be');
    expectMlxError(() => enc.dispatch(pipe, { buffers: [bad([null, 0]), b] }, [1, 1, 1], [1, 1, 1]), 'buffer at index 0 must be');
    expectMlxError(() => enc.dispatch(pipe, { buffers: [b, b], bytes: [, , bad([1])] }, [1, 1, 1], [1, 1, 1]), 'bytes at index 2 must be');
    expectMlxError(() => enc.dispatch(pipe, bad(null), [1, 1, 1], [1, 1, 1]), 'bindings must be');
    expectMlxError(() => enc.dispatch(pipe, { buffers: [b, b] }, bad(null), [1, 1, 1]), 'grid[0] must be');
    expectMlxError(() => enc.dispatch(pipe, { buffers: [b, b] }, [1, 1, 1], bad(5)), 'threads[0] must be');
  });
});
