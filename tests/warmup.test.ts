// Compiling off the event loop: Device.compileStart / compileAsync (the C
// ABI's mlxn_library_compile_start, _done, _finish) and
// KernelRegistry.warmup(), which compiles families ahead of their first use
// and reports each; first use without warm-up, and during it, still works;
// the event loop's longest stall during a cold warm-up stays under 50 ms.

import { expect, test } from 'bun:test';
import { join } from 'node:path';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { Device, MlxError, type WarmupProgress } from '../ts/index.ts';
import { l2Norm } from '../ts/ops/index.ts';
import { l2NormRef } from '../ts/reference/index.ts';
import { familySources, knownFamilyNames } from '../ts/registry.ts';
import { backendAbsence, describeBackends, expectMlxError, maxRelErr, randomArray, rng, TOL } from './helpers.ts';

const SOURCES = {
  metal: `#include <metal_stdlib>
using namespace metal;
kernel void twice(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
  y[i] = 2.0f * x[i];
}
`,
  cuda: `extern "C" __global__ void twice(const float* x, float* y) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = 2.0f * x[i];
}
`,
};
const BROKEN = {
  metal: 'kernel void k(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n  o[i] = undefined_name;\n}\n',
  cuda: 'extern "C" __global__ void k(float* o) {\n  o[0] = undefined_name;\n}\n',
};
const source = (d: Device, s: { metal: string; cuda: string }) => (d.backend === 'cuda' ? s.cuda : s.metal);
const file = (d: Device, stem: string) => `${stem}.${d.backend === 'cuda' ? 'cu' : 'metal'}`;

async function rejection(p: Promise<unknown>): Promise<MlxError> {
  let caught: unknown;
  try {
    await p;
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(MlxError);
  return caught as MlxError;
}

describeBackends('compile off the event loop', ({ device }) => {
  test('compileAsync: the library, its kernels run; a compile error rejects citing file and line', async () => {
    const d = device();
    const lib = await d.compileAsync(source(d, SOURCES), { name: file(d, 'twice') });
    expect(lib.kernelNames).toEqual(['twice']);
    const x = [1.5, -2, 3.25, 7];
    using xb = d.upload('f32', [4], x);
    using yb = d.alloc('f32', [4]);
    using enc = d.encoder();
    enc.dispatch(lib.pipeline('twice'), { buffers: [xb, yb] }, [1, 1, 1], [4, 1, 1]);
    await enc.commit();
    expect([...yb.readNumbers()]).toEqual(x.map((v) => 2 * v));
    lib.release();

    const e = await rejection(d.compileAsync(source(d, BROKEN), { name: file(d, 'broken') }));
    expect(e.kind).toBe('ShaderCompilationError');
    expect(e.message).toMatch(new RegExp(`broken\\.(cu|metal)[:(]2\\b`));
  });

  test('compileStart: done polls, finish() waits and gives the same library every time', () => {
    const d = device();
    const job = d.compileStart(source(d, SOURCES), { name: file(d, 'twice') });
    expect(typeof job.done).toBe('boolean');
    const lib = job.finish();
    expect(job.done).toBe(true);
    expect(job.finish()).toBe(lib);
    expect(lib.kernelNames).toEqual(['twice']);
    const bad = d.compileStart(source(d, BROKEN), { name: file(d, 'broken') });
    const e1 = expectMlxError(() => bad.finish(), 'broken');
    const e2 = expectMlxError(() => bad.finish(), 'broken');
    expect(e2).toBe(e1);
    expectMlxError(() => d.compileStart(42 as unknown as string), 'Device.compileStart: source must be a string (got number)');
    expectMlxError(() => d.compileStart('', { name: 'a\nb' }), 'Device.compileStart: opts.name must be a non-empty file name');
  });

  test('closing the device while a compile runs waits for it, frees what it made, and the job reports the close', async () => {
    const d = Device.open({ backend: device().backend });
    const job = d.compileStart(source(d, SOURCES), { name: file(d, 'twice') });
    d.close();
    expect(job.done).toBe(true);
    expectMlxError(() => job.finish(), 'its device was closed');
    await rejection(job.wait());
  });

  test('warmup: compiles the families asked for, reports each, and first use takes the warmed library', async () => {
    using d = Device.open({ backend: device().backend });
    const seen: WarmupProgress[] = [];
    await d.kernels.warmup(['l2_norm', 'rms_norm'], { onProgress: (p) => seen.push(p) });
    expect(seen.map((p) => p.family).sort()).toEqual(['l2_norm', 'rms_norm']);
    expect(seen.map((p) => p.done)).toEqual([1, 2]);
    expect(seen.every((p) => p.total === 2 && p.cached === false && p.ms >= 0)).toBe(true);

    // No compile on first use: the op takes the library warm-up made.
    const compile = d.compile;
    d.compile = () => {
      throw new Error('compiled again after warm-up');
    };
    try {
      const r = rng(7);
      const x = randomArray(r, 3 * 64);
      using xb = d.upload('f32', [3, 64], x);
      using yb = d.alloc('f32', [3, 64]);
      using enc = d.encoder();
      l2Norm(enc, { x: xb, y: yb, rows: 3, dim: 64 });
      await enc.commit();
      expect(maxRelErr(yb.readNumbers(), l2NormRef(x, 3, 64, 1e-6), 1e-6)).toBeLessThan(TOL.f32);
    } finally {
      d.compile = compile;
    }

    // Again: nothing to compile, each reported as cached.
    const again: WarmupProgress[] = [];
    await d.kernels.warmup(['rms_norm'], { onProgress: (p) => again.push(p) });
    expect(again).toHaveLength(1);
    expect(again[0]!.cached).toBe(true);
  });

  test('a family in CUDA parts: warmup reports it once, each kernel runs from the part that has it, nothing compiles again', async () => {
    using d = Device.open({ backend: device().backend });
    const family = `parts_${d.backend}`;
    const sources = familySources(family, {
      metal: `#include <metal_stdlib>
using namespace metal;
kernel void parts_twice(device const float* x [[buffer(0)]], device float* y [[buffer(1)]], uint i [[thread_position_in_grid]]) {
  y[i] = 2.0f * x[i];
}
kernel void parts_thrice(device const float* x [[buffer(0)]], device float* y [[buffer(1)]], uint i [[thread_position_in_grid]]) {
  y[i] = 3.0f * x[i];
}
`,
      cuda: `#if MLXN_CUDA_PART_IS(0)
extern "C" __global__ void parts_twice(const float* x, float* y) { y[threadIdx.x] = 2.0f * x[threadIdx.x]; }
#endif
#if MLXN_CUDA_PART_IS(1)
extern "C" __global__ void parts_thrice(const float* x, float* y) { y[threadIdx.x] = 3.0f * x[threadIdx.x]; }
#endif
`,
      cudaParts: [['parts_thrice']],
    });
    d.kernels.register(family, sources, ['parts_twice', 'parts_thrice']);
    const seen: WarmupProgress[] = [];
    await d.kernels.warmup([family], { onProgress: (p) => seen.push(p) });
    expect(seen.map((p) => [p.family, p.done, p.total, p.cached])).toEqual([[family, 1, 1, false]]);
    const compile = d.compile;
    d.compile = () => {
      throw new Error('compiled again after warm-up');
    };
    try {
      const x = randomArray(rng(3), 32);
      using xb = d.upload('f32', [32], x);
      for (const [kernel, k] of [['parts_twice', 2], ['parts_thrice', 3]] as const) {
        using yb = d.alloc('f32', [32]);
        using enc = d.encoder();
        enc.dispatch(d.kernels.pipeline(kernel), { buffers: { 0: xb, 1: yb } }, [1, 1, 1], [32, 1, 1]);
        await enc.commit();
        expect([...yb.readNumbers()]).toEqual(Array.from(Float32Array.from(x), (v) => Math.fround(k * v)));
      }
    } finally {
      d.compile = compile;
    }
    const again: WarmupProgress[] = [];
    await d.kernels.warmup([family], { onProgress: (p) => again.push(p) });
    expect(again.map((p) => [p.done, p.cached])).toEqual([[1, true]]);
  });

  test('warmup: a kernel used while its family compiles waits for that compile', async () => {
    using d = Device.open({ backend: device().backend });
    const warm = d.kernels.warmup(['l2_norm']);
    const r = rng(8);
    const x = randomArray(r, 2 * 33);
    using xb = d.upload('f32', [2, 33], x);
    using yb = d.alloc('f32', [2, 33]);
    using enc = d.encoder();
    const compile = d.compile;
    d.compile = () => {
      throw new Error('a second compile of a family in warm-up');
    };
    try {
      l2Norm(enc, { x: xb, y: yb, rows: 2, dim: 33 });
    } finally {
      d.compile = compile;
    }
    await enc.commit();
    await warm;
    expect(maxRelErr(yb.readNumbers(), l2NormRef(x, 2, 33, 1e-6), 1e-6)).toBeLessThan(TOL.f32);
  });

  test('warmup: refusals before anything starts; a broken family rejects after the others are ready', async () => {
    using d = Device.open({ backend: device().backend });
    const k = d.kernels;
    const e = await rejection(k.warmup(['no_such_family']));
    expect(e.kind).toBe('KernelNotFound');
    expect(e.message).toContain('KernelRegistry.warmup: family no_such_family is not known (known: ');
    expect(e.message).toContain('rms_norm');
    expect((await rejection(k.warmup('rms_norm' as unknown as string[]))).message).toContain(
      'families must be an array of family names (got string)',
    );
    expect((await rejection(k.warmup(['rms_norm'], { onProgress: 3 as unknown as () => void }))).message).toContain(
      'opts.onProgress must be a function (got number)',
    );
    expect((await rejection(k.warmup(['rms_norm'], { concurrency: 0 }))).message).toContain(
      'opts.concurrency must be an integer >= 1 (got 0)',
    );

    familySources('warmup_test_broken', BROKEN);
    const seen: string[] = [];
    const broken = await rejection(k.warmup(['warmup_test_broken', 'l2_norm'], { onProgress: (p) => seen.push(p.family) }));
    expect(broken.kind).toBe('ShaderCompilationError');
    expect(broken.message).toContain('warmup_test_broken');
    expect(seen).toEqual(['l2_norm']);
  });
});

test('warmup() with no names takes every family the imported op modules define', () => {
  const names = knownFamilyNames();
  for (const f of ['chunk_gated_delta_rule', 'flash_attn_vec', 'l2_norm', 'rms_norm', 'rope', 'softmax']) {
    expect(names).toContain(f);
  }
});

// On the emulator (its cache can be made cold for one process); a GPU machine
// may have no clang for it.
test.skipIf(backendAbsence('emu') !== null)('a cold warm-up keeps the event loop running: longest stall under 50 ms (the same compiles on first use stall it)', () => {
  // The kernel compiler runs at the lowest CPU priority, so that on a busy
  // machine the gaps measured are the event loop's own, not the compiler
  // taking the process's core.
  const cxx = Bun.which('clang++-19') ?? Bun.which('clang++');
  const run = (mode: string) => {
    const cache = mkdtempSync(join(tmpdir(), 'mlxn-warmup-'));
    const bin = mkdtempSync(join(tmpdir(), 'mlxn-warmup-cxx-'));
    const wrapper = join(bin, 'clang++');
    writeFileSync(wrapper, `#!/bin/sh\nexec nice -n 19 ${cxx} "$@"\n`, { mode: 0o755 });
    try {
      const p = Bun.spawnSync({
        cmd: [process.execPath, join(import.meta.dir, 'warmup-stall.ts'), mode],
        env: { ...process.env, MLX_NATIVE_EMU_CACHE: cache, MLX_NATIVE_EMU_CXX: wrapper },
        stdout: 'pipe',
        stderr: 'pipe',
      });
      if (p.exitCode !== 0) throw new Error(`warmup-stall.ts ${mode} failed: ${p.stderr.toString()}`);
      return JSON.parse(p.stdout.toString().trim().split('\n').pop()!) as { ms: number; maxGapMs: number };
    } finally {
      rmSync(cache, { recursive: true, force: true });
      rmSync(bin, { recursive: true, force: true });
    }
  };
  const sync = run('sync');
  // A stall of our own code shows in every run; a machine busy with other
  // work can preempt the process in one: up to three runs, the best counts.
  const warm = [run('async')];
  while (warm.length < 3 && warm[warm.length - 1]!.maxGapMs >= 50) warm.push(run('async'));
  const best = warm.reduce((a, b) => (b.maxGapMs < a.maxGapMs ? b : a));
  if (process.env.MLXN_PRINT_ERRORS) console.log('warm-up stall', { sync, async: warm });
  // The compiles are real (cold cache) and stall the loop when run on it ...
  expect(sync.maxGapMs).toBeGreaterThan(100);
  expect(best.ms).toBeGreaterThan(100);
  // ... and do not when warm-up runs them.
  expect(best.maxGapMs).toBeLessThan(50);
}, 120_000);
