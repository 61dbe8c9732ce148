// Automatic barriers: the encoder places a barrier exactly where a dispatch
// reads or writes a buffer that an earlier dispatch since the last barrier
// writes, or writes one that such a dispatch reads. What a kernel writes comes
// from its Metal declaration (a `device` binding not declared const).
// Under the emulator's random schedule, dispatches between two barriers run in
// a shuffled order, so a barrier that is missing shows as wrong results.

import { expect, test } from 'bun:test';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Device, Library } from '../ts/index.ts';
import { ALL_BUFFERS, kernelWrites, metalEntries } from '../ts/metal-source.ts';
import { l2Norm } from '../ts/ops/index.ts';
import { l2NormRef } from '../ts/reference/index.ts';
import { describeBackends, expectMlxError, maxRelErr, randomArray, rng, TOL } from './helpers.ts';

const METAL = `#include <metal_stdlib>
using namespace metal;
// y = x + 1
kernel void inc(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  if (i < n) y[i] = x[i] + 1.0f;
}
// x = x * 2, in place
kernel void twice(device float* x [[buffer(0)]], constant uint& n [[buffer(1)]], uint i [[thread_position_in_grid]]) {
  if (i < n) x[i] = x[i] * 2.0f;
}
`;
const CUDA = `extern "C" __global__ void inc(const float* x, float* y, const unsigned* n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < *n) y[i] = x[i] + 1.0f;
}
extern "C" __global__ void twice(float* x, const unsigned* n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < *n) x[i] = x[i] * 2.0f;
}
`;

const N = 4096;
const n32 = Uint32Array.of(N);

function lib(dev: Device): Library {
  const cuda = dev.backend === 'cuda';
  return dev.compile(cuda ? CUDA : METAL, { name: cuda ? 'barriers.cu' : 'barriers.metal' });
}

test('what a kernel writes, read from its Metal declaration', () => {
  expect(kernelWrites(METAL, 'inc')).toBe(0b10);
  expect(kernelWrites(METAL, 'twice')).toBe(0b01);
  expect(kernelWrites(`kernel void k(constant float* a [[buffer(0)]], const device float* b [[buffer(1)]], device float4* c [[buffer(3)]]) {}`, 'k')).toBe(0b1000);
  // Template instantiations resolve to their template.
  expect(kernelWrites(`template <typename T> kernel void t(device const T* a [[buffer(0)]], device T* b [[buffer(2)]]) {}
template [[host_name("t_f32")]] kernel decltype(t<float>) t<float>;`, 't_f32')).toBe(0b100);
  // Unknown: every binding counts as written.
  expect(kernelWrites(METAL, 'absent')).toBe(ALL_BUFFERS);
});

test("every kernel of shaders/ has a declaration the encoder reads (none falls back to 'writes everything')", () => {
  const dir = join(import.meta.dir, '..', 'shaders');
  let kernels = 0;
  for (const f of readdirSync(dir).filter((f) => f.endsWith('.metal'))) {
    const src = readFileSync(join(dir, f), 'utf8');
    for (const k of metalEntries(src)) {
      const w = kernelWrites(src, k);
      expect({ kernel: k, writes: w === ALL_BUFFERS ? 'unknown' : 'known' }).toEqual({ kernel: k, writes: 'known' });
      expect(w).not.toBe(0); // every kernel writes something
      kernels++;
    }
  }
  expect(kernels).toBeGreaterThan(35);
});

describeBackends('automatic barriers', ({ device, label }) => {
  test('a chain of 8 dependent dispatches with no manual barrier: 7 barriers, correct result', async () => {
    const dev = device();
    const l = lib(dev);
    const inc = l.pipeline('inc');
    const x = randomArray(rng(1), N, -1, 1);
    const bufs = Array.from({ length: 9 }, (_, i) => (i === 0 ? dev.upload('f32', [N], x) : dev.alloc('f32', [N])));
    for (const b of bufs.slice(1)) b.fill(Number.NaN);
    using enc = dev.encoder();
    for (let i = 0; i < 8; i++) enc.dispatch(inc, { buffers: [bufs[i]!, bufs[i + 1]!], bytes: [, , n32] }, [N / 256, 1, 1], [256, 1, 1]);
    expect(enc.barrierCount).toBe(7);
    await enc.commit();
    expect(maxRelErr(bufs[8]!.readNumbers(), Array.from(x, (v) => v + 8), 1)).toBeLessThan(TOL.f32);
    for (const b of bufs) b.release();
  });

  test('independent dispatches (shared read-only input) get no barrier; a write after reads gets one', async () => {
    const dev = device();
    const l = lib(dev);
    const x = randomArray(rng(2), N, -1, 1);
    using xb = dev.upload('f32', [N], x);
    const outs = Array.from({ length: 4 }, () => dev.alloc('f32', [N]));
    using enc = dev.encoder();
    // What each writes is declared, since a CUDA source compiled directly says
    // nothing the encoder reads (undeclared, every binding counts as written).
    for (const o of outs) enc.dispatch(l.pipeline('inc'), { buffers: [xb, o], bytes: [, , n32], writes: [1] }, [N / 256, 1, 1], [256, 1, 1]);
    expect(enc.barrierCount).toBe(0);
    // x is written now: it must wait for the four readers (write after read).
    enc.dispatch(l.pipeline('twice'), { buffers: [xb], bytes: [, n32], writes: [0] }, [N / 256, 1, 1], [256, 1, 1]);
    expect(enc.barrierCount).toBe(1);
    await enc.commit();
    for (const o of outs) expect(maxRelErr(o.readNumbers(), Array.from(x, (v) => v + 1), 1)).toBeLessThan(TOL.f32);
    expect(maxRelErr(xb.readNumbers(), Array.from(x, (v) => v * 2), 1)).toBeLessThan(TOL.f32);
    for (const o of outs) o.release();
  });

  test('ops chained with no manual barrier (l2Norm into l2Norm in place, then into a third buffer)', async () => {
    const dev = device();
    const rows = 16, dim = 300;
    const x = randomArray(rng(3), rows * dim, -3, 3);
    using xb = dev.upload('f32', [rows, dim], x);
    using y = dev.alloc('f32', [rows, dim]);
    using z = dev.alloc('f32', [rows, dim]);
    y.fill(Number.NaN);
    z.fill(Number.NaN);
    using enc = dev.encoder();
    l2Norm(enc, { x: xb, y, rows, dim, eps: 1 });
    l2Norm(enc, { x: y, y, rows, dim, eps: 1 });
    l2Norm(enc, { x: y, y: z, rows, dim, eps: 1 });
    expect(enc.barrierCount).toBe(2);
    await enc.commit();
    const once = l2NormRef(x, rows, dim, 1);
    const want = l2NormRef(l2NormRef(once, rows, dim, 1), rows, dim, 1);
    expect(maxRelErr(z.readNumbers(), want)).toBeLessThan(TOL.f32);
  });

  test('undeclared writes of a kernel whose declaration is unknown count as writes of every binding', () => {
    const dev = device();
    const inc = lib(dev).pipeline('inc');
    using x = dev.alloc('f32', [N]);
    using a = dev.alloc('f32', [N]);
    using b = dev.alloc('f32', [N]);
    using enc = dev.encoder();
    enc.dispatch(inc, { buffers: [x, a], bytes: [, , n32] }, [N / 256, 1, 1], [256, 1, 1]);
    enc.dispatch(inc, { buffers: [x, b], bytes: [, , n32] }, [N / 256, 1, 1], [256, 1, 1]);
    // Metal source: x is read-only, no barrier. CUDA source: x may be written, one barrier.
    expect(enc.barrierCount).toBe(dev.backend === 'cuda' ? 1 : 0);
    expectMlxError(() => enc.dispatch(inc, { buffers: [x, b], bytes: [, , n32], writes: [31] }, [1, 1, 1], [1, 1, 1]), 'writes[] must be a buffer index in [0, 30]');
  });

  test('a manual barrier starts a new stretch: no second barrier is added after it', () => {
    const dev = device();
    const inc = lib(dev).pipeline('inc');
    using a = dev.alloc('f32', [N]);
    using b = dev.alloc('f32', [N]);
    using enc = dev.encoder();
    enc.dispatch(inc, { buffers: [a, b], bytes: [, , n32] }, [N / 256, 1, 1], [256, 1, 1]);
    enc.barrier();
    enc.dispatch(inc, { buffers: [b, a], bytes: [, , n32] }, [N / 256, 1, 1], [256, 1, 1]);
    expect(enc.barrierCount).toBe(1);
  });

  if (label === 'emu-random') {
    test('a barrier deliberately dropped (autoBarriers: false) is caught by the random schedule', async () => {
      const dev = device();
      const inc = lib(dev).pipeline('inc');
      const x = randomArray(rng(4), N, -1, 1);
      const bufs = Array.from({ length: 9 }, (_, i) => (i === 0 ? dev.upload('f32', [N], x) : dev.alloc('f32', [N])));
      for (const b of bufs.slice(1)) b.fill(Number.NaN);
      using enc = dev.encoder({ autoBarriers: false });
      for (let i = 0; i < 8; i++) enc.dispatch(inc, { buffers: [bufs[i]!, bufs[i + 1]!], bytes: [, , n32] }, [N / 256, 1, 1], [256, 1, 1]);
      expect(enc.barrierCount).toBe(0);
      await enc.commit();
      // Shuffled, some step ran before its input was written: NaN (or a
      // stale value) reaches the end.
      expect(maxRelErr(bufs[8]!.readNumbers(), Array.from(x, (v) => v + 8), 1)).not.toBeLessThan(TOL.f32);
      for (const b of bufs) b.release();
    });
  }
});
