// The emulator's on-disk cache of compiled kernels: a .so is reused only by
// the same emulator build, shim headers, compiler and flags. Each step runs in
// its own process (the shim and the build are fixed per process) against one
// fresh cache directory, and counts the kernel libraries in it.

import { afterAll, describe, expect, test } from 'bun:test';
import { spawnSync } from 'node:child_process';
import { appendFileSync, chmodSync, copyFileSync, cpSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { backendAbsence } from './helpers.ts';

const absent = backendAbsence('emu');
const ROOT = join(import.meta.dir, '..');
const LIB = join(ROOT, 'build', 'emu', 'libmlx_native_emu.so');

describe.if(absent === null)('emu kernel cache key', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mlxn-emu-cache-test-'));
  const cache = join(dir, 'cache');
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const script = join(dir, 'compile.ts');
  writeFileSync(script, `
import { Device } from ${JSON.stringify(join(ROOT, 'ts', 'index.ts'))};
const device = Device.open({ backend: 'emu' });
const lib = device.compile(\`#include <metal_stdlib>
using namespace metal;
kernel void twice(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 2.0f * x[i]; }
\`, { name: 'cache_key.metal' });
const x = device.upload('f32', [4], [1, 2, 3, 4]);
const enc = device.encoder();
enc.dispatch(lib.pipeline('twice'), { buffers: { 0: x } }, [1, 1, 1], [4, 1, 1]);
enc.commitAndWait();
console.log(JSON.stringify(Array.from(x.read() as Float32Array)));
device.close();
`);

  /** Runs the script with these variables; returns the .so files in the cache afterwards. */
  function compileWith(env: Record<string, string>): string[] {
    const r = spawnSync('bun', [script], {
      encoding: 'utf8',
      env: { ...process.env, MLX_NATIVE_BACKEND: 'emu', MLX_NATIVE_EMU_CACHE: cache, ...env },
    });
    if (r.status !== 0) throw new Error(`compile step failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
    expect(r.stdout.trim()).toBe('[2,4,6,8]');
    return readdirSync(cache).filter((f) => f.endsWith('.kernels')).sort();
  }

  test('the same build, shim, compiler and flags reuse the .so; any change compiles a new one', () => {
    const first = compileWith({});
    expect(first.length).toBe(1);
    expect(compileWith({})).toEqual(first);

    // Shim headers with one more comment line.
    const shimDir = readdirSync(cache).find((f) => f.startsWith('shim-'));
    expect(shimDir).toBeDefined();
    const shim = join(dir, 'shim');
    cpSync(join(cache, shimDir!), shim, { recursive: true });
    appendFileSync(join(shim, 'mlxn_core.h'), '\n// changed\n');
    const afterShim = compileWith({ MLX_NATIVE_EMU_SHIM: shim });
    expect(afterShim.length).toBe(2);

    // Another compiler: a wrapper (another path) that execs the same clang++
    // but reports another --version.
    const which = spawnSync('bash', ['-c', 'command -v clang++-19 || command -v clang++'], { encoding: 'utf8' });
    const real = which.stdout.trim();
    expect(real).not.toBe('');
    const wrapper = join(dir, 'clang++-wrapper');
    writeFileSync(wrapper, `#!/bin/sh\nif [ "$1" = "--version" ]; then echo "wrapped compiler 1.0"; fi\nexec ${JSON.stringify(real)} "$@"\n`);
    chmodSync(wrapper, 0o755);
    const afterCxx = compileWith({ MLX_NATIVE_EMU_CXX: wrapper });
    expect(afterCxx.length).toBe(3);
    // Same path, other --version: the identity is part of the key.
    writeFileSync(wrapper, `#!/bin/sh\nif [ "$1" = "--version" ]; then echo "wrapped compiler 2.0"; fi\nexec ${JSON.stringify(real)} "$@"\n`);
    expect(compileWith({ MLX_NATIVE_EMU_CXX: wrapper }).length).toBe(4);

    // Another emulator build: the same library with other bytes.
    const lib = join(dir, 'libmlx_native_emu.so');
    copyFileSync(LIB, lib);
    appendFileSync(lib, 'another build');
    expect(compileWith({ MLX_NATIVE_LIB: lib }).length).toBe(5);
    // And that build reuses its own.
    expect(compileWith({ MLX_NATIVE_LIB: lib }).length).toBe(5);
  }, 120_000);
});
