// The TypeScript core: pure parts (dispatch packing, constants, validation,
// errors, loader messages) everywhere, and Device / Buffer / Encoder /
// compile / registry end to end on every backend present.

import { describe, expect, test } from 'bun:test';
import { spawnSync } from 'node:child_process';
import {
  checkAtMost,
  checkDtype,
  checkedProduct,
  checkElements,
  checkMultiple,
  checkPositive,
  invalid,
  MlxError,
  f16BitsToF32,
  type Device,
  type MlxErrorKind,
} from '../ts/index.ts';
import { statusKind } from '../ts/errors.ts';
import { DispatchBlock, packDispatch, tensorMapDifference, type BindableBuffer, type PackedBuffers } from '../ts/encoder.ts';
import { constantsKey, packConstants } from '../ts/library.ts';
import { familySources } from '../ts/registry.ts';
import { candidatePaths, libraryFileName, loadBackend } from '../ts/native.ts';
import { backendAbsence, describeBackends, errorOf, rng, randomArray, runsOnEmulator } from './helpers.ts';

/** Runs fn and returns the MlxError it throws (failing the test if it throws none or another error). */
function mlxError(fn: () => unknown): MlxError {
  try {
    fn();
  } catch (e) {
    if (e instanceof MlxError) return e;
    throw e;
  }
  throw new Error('expected an MlxError, but nothing was thrown');
}

function expectKind(fn: () => unknown, kind: MlxErrorKind, text?: string): void {
  const e = mlxError(fn);
  expect(e.kind).toBe(kind);
  if (text !== undefined) expect(e.message).toContain(text);
}

// ---------------------------------------------------------------- pure TS

describe('dispatch packing', () => {
  const owner = {};
  const bufA: BindableBuffer = { _h: 0x7f12_3456_7890, _state: owner, byteLength: 1024 };
  const bufB: BindableBuffer = { _h: 0x0000_5555_aaaa_0008, _state: owner, byteLength: 64 };
  const bufC: BindableBuffer = { _h: 0x10, _state: owner, byteLength: 4 };
  const pipeline = 0x7fff_0000_1234;

  test('matches the header layout byte for byte', () => {
    const block = new DispatchBlock();
    block.bytes.fill(0xee); // stale bytes must not leak into the block
    const len = packDispatch(
      block,
      owner,
      pipeline,
      {
        buffers: { 0: bufA, 1: [bufB, 16], 3: bufC },
        bytes: { 2: new Float32Array([1.5]), 4: new Uint8Array([1, 2, 3]) },
        threadgroupMemory: { 0: 256 },
      },
      [7, 2, 1],
      [64, 1, 1],
    );
    // Expected, written independently with DataView and 64-bit writes.
    const n = 6;
    const payload = 16 + 3; // bytes 2 at payload 0 (4 bytes), bytes 4 at payload 16 (3 bytes)
    const want = new ArrayBuffer(48 + 24 * n + payload);
    const dv = new DataView(want);
    dv.setBigUint64(0, BigInt(pipeline), true);
    [7, 2, 1, 64, 1, 1].forEach((v, i) => dv.setUint32(8 + 4 * i, v, true));
    dv.setUint32(32, n, true);
    dv.setUint32(36, payload, true);
    dv.setBigUint64(40, 0n, true);
    const recs: [number, number, bigint, bigint][] = [
      [1, 0, BigInt(bufA._h), 0n],
      [1, 1, BigInt(bufB._h), 16n],
      [1, 3, BigInt(bufC._h), 0n],
      [2, 2, 0n, 4n],
      [2, 4, 16n, 3n],
      [3, 0, 256n, 0n],
    ];
    recs.forEach(([kind, index, a, b], i) => {
      const o = 48 + 24 * i;
      dv.setUint32(o, kind, true);
      dv.setUint32(o + 4, index, true);
      dv.setBigUint64(o + 8, a, true);
      dv.setBigUint64(o + 16, b, true);
    });
    const p0 = 48 + 24 * n;
    dv.setFloat32(p0, 1.5, true);
    [1, 2, 3].forEach((v, i) => dv.setUint8(p0 + 16 + i, v));
    expect(len).toBe(want.byteLength);
    expect([...block.bytes.subarray(0, len)]).toEqual([...new Uint8Array(want)]);
  });

  test('arrays, dense records, sparse records and undefined entries pack the same', () => {
    const pack = (b: Parameters<typeof packDispatch<BindableBuffer>>[3]): number[] => {
      const block = new DispatchBlock();
      const len = packDispatch(block, owner, pipeline, b, [3, 1, 1], [32, 1, 1]);
      return [...block.bytes.subarray(0, len)];
    };
    const bytes4 = new Uint8Array([9, 9, 9, 9]);
    const want = pack({ buffers: { 0: bufA, 1: bufB, 3: bufC }, bytes: { 2: bytes4 }, threadgroupMemory: { 1: 64 } });
    expect(pack({ buffers: [bufA, bufB, undefined, bufC], bytes: [, , bytes4], threadgroupMemory: [, 64] })).toEqual(want);
    expect(pack({ buffers: { 0: bufA, 1: bufB, 2: undefined, 3: bufC }, bytes: { 2: bytes4 }, threadgroupMemory: { 1: 64 } })).toEqual(want);
    expect(pack({ buffers: { 3: bufC, 1: bufB, 0: bufA }, bytes: { 2: bytes4, 5: undefined }, threadgroupMemory: { 1: 64 } })).toEqual(want);
    // A dense record and its array.
    expect(pack({ buffers: { 0: bufA, 1: bufB, 2: bufC } })).toEqual(pack({ buffers: [bufA, bufB, bufC] }));
    expect(pack({ buffers: { 0: bufA, 1: bufB, 2: bufC } }).length).toBe(48 + 3 * 24);
  });

  test('a tensor map: its record (kind 4, the buffer, the descriptor\'s payload offset) and its descriptor byte for byte', () => {
    const block = new DispatchBlock();
    block.bytes.fill(0xee);
    const view: BindableBuffer = { _h: 0x44, _state: owner, byteLength: 512, byteOffset: 64, _root: bufA };
    const len = packDispatch(block, owner, pipeline, {
      buffers: { 0: bufB },
      bytes: { 1: new Uint8Array([7, 7, 7]) },
      tensorMaps: { 2: { buffer: view, offset: 32, dtype: 'bf16', dims: [128, 1000, 4], strides: [256, 256000], box: [64, 64, 1], swizzle: 128, l2Promotion: 256 } },
    }, [1, 1, 1], [384, 1, 1]);
    const n = 3, payload = 16 + 128; // bytes 1 at 0 (3 bytes), the descriptor at 16
    const want = new ArrayBuffer(48 + 24 * n + payload);
    const dv = new DataView(want);
    dv.setBigUint64(0, BigInt(pipeline), true);
    [1, 1, 1, 384, 1, 1].forEach((v, i) => dv.setUint32(8 + 4 * i, v, true));
    dv.setUint32(32, n, true);
    dv.setUint32(36, payload, true);
    ([[1, 0, BigInt(bufB._h), 0n], [2, 1, 0n, 3n], [4, 2, 0x44n, 16n]] as const).forEach(([kind, index, a, b], i) => {
      const o = 48 + 24 * i;
      dv.setUint32(o, kind, true);
      dv.setUint32(o + 4, index, true);
      dv.setBigUint64(o + 8, a, true);
      dv.setBigUint64(o + 16, b, true);
    });
    const p0 = 48 + 24 * n;
    [7, 7, 7].forEach((v, i) => dv.setUint8(p0 + i, v));
    const d = p0 + 16;
    dv.setBigUint64(d, 96n, true); // 32 + the view's 64
    dv.setUint32(d + 8, 5, true); // bf16
    dv.setUint32(d + 12, 3, true);
    [128n, 1000n, 4n].forEach((v, k) => dv.setBigUint64(d + 16 + 8 * k, v, true));
    [256n, 256000n].forEach((v, k) => dv.setBigUint64(d + 56 + 8 * k, v, true));
    [64, 64, 1].forEach((v, k) => dv.setUint32(d + 88 + 4 * k, v, true));
    dv.setUint32(d + 108, 128, true);
    dv.setUint32(d + 112, 256, true);
    expect(len).toBe(want.byteLength);
    expect([...block.bytes.subarray(0, len)]).toEqual([...new Uint8Array(want)]);
    // Held as a buffer binding is: the view's allocation, at its index.
    const hold: PackedBuffers = { count: 0, slots: new Array(31).fill(undefined), index: new Uint8Array(31) };
    packDispatch(block, owner, pipeline, { tensorMaps: { 5: { buffer: view, dtype: 'f32', dims: [4], strides: [], box: [4] } } }, [1, 1, 1], [1, 1, 1], hold);
    expect([hold.count, hold.index[0], hold.slots[0]]).toEqual([1, 5, bufA]);
  });

  test('a patch sees another tensor map descriptor, not only other records (Encoder.patch refuses it)', () => {
    const pack = (dims: number[]): Uint8Array => {
      const block = new DispatchBlock();
      const len = packDispatch(block, owner, pipeline, {
        bytes: { 0: new Uint8Array([1, 2, 3, 4]) },
        tensorMaps: { 1: { buffer: bufA, dtype: 'bf16', dims, strides: [256], box: [64, 8], swizzle: 128 } },
      }, [1, 1, 1], [128, 1, 1]);
      return block.bytes.slice(0, len);
    };
    const records = 48 + 2 * 24;
    const was = pack([128, 4]);
    expect(tensorMapDifference(pack([128, 4]), was, records)).toBeNull();
    expect(tensorMapDifference(pack([128, 3]), was, records)).toBe('tensor map descriptor (record 1)');
    // The same records either way: the descriptor lies in the payload.
    expect([...pack([128, 3]).subarray(0, records)]).toEqual([...was.subarray(0, records)]);
  });

  test('bad tensor maps are InvalidArgument with the field named', () => {
    const block = new DispatchBlock();
    const t = { buffer: bufA, dtype: 'bf16' as const, dims: [64, 8], strides: [128], box: [64, 8] };
    const pack = (m: Record<string, unknown>, extra?: Parameters<typeof packDispatch<BindableBuffer>>[3]) =>
      packDispatch(block, owner, 8, { ...extra, tensorMaps: { 0: { ...t, ...m } as typeof t } }, [1, 1, 1], [1, 1, 1]);
    expectKind(() => pack({ dtype: 'f64' }), 'InvalidArgument', 'tensorMaps[0].dtype must be one of u8, u16, u32, f16, bf16, f32 (got f64)');
    expectKind(() => pack({ dims: [] }), 'InvalidArgument', 'tensorMaps[0].dims must be an array of 1 to 5 sizes');
    expectKind(() => pack({ dims: [1, 1, 1, 1, 1, 1] }), 'InvalidArgument', 'tensorMaps[0].dims must be an array of 1 to 5 sizes');
    expectKind(() => pack({ strides: [] }), 'InvalidArgument', 'tensorMaps[0].strides must be an array of 1 byte strides (one per dim after the first) (got )');
    expectKind(() => pack({ box: [64] }), 'InvalidArgument', 'tensorMaps[0].box must be an array of 2 sizes (one per dim) (got 64)');
    expectKind(() => pack({ dims: [64, 2.5] }), 'InvalidArgument', 'tensorMaps[0].dims[1] must be an integer >= 0 (got 2.5)');
    expectKind(() => pack({ box: [64, -1] }), 'InvalidArgument', 'tensorMaps[0].box[1] must be a 32-bit integer >= 0 (got -1)');
    expectKind(() => pack({ offset: -16 }), 'InvalidArgument', 'tensorMaps[0].offset must be an integer >= 0 (got -16)');
    expectKind(() => pack({ buffer: { ...bufA, _h: 0 } }), 'InvalidArgument', 'used after release');
    expectKind(() => pack({ buffer: { ...bufA, _state: {} } }), 'InvalidArgument', 'tensorMaps[0].buffer must be a buffer of the encoder\'s device');
    expectKind(() => pack({ buffer: 7 }), 'InvalidArgument', 'tensorMaps[0].buffer must be a Buffer (got 7)');
    expectKind(() => pack({}, { buffers: { 0: bufB } }), 'InvalidArgument', 'tensor map index 0 must be an index no buffer or bytes uses');
  });

  test('a dispatch with no bindings is the bare header', () => {
    const block = new DispatchBlock();
    const len = packDispatch(block, owner, 8, {}, [1, 1, 1], [1, 1, 1]);
    expect(len).toBe(48);
    expect([...block.words.subarray(0, 12)]).toEqual([8, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]);
  });

  test('the block grows for a large payload', () => {
    const block = new DispatchBlock(64);
    const big = new Uint8Array(10000).map((_, i) => i & 0xff);
    const len = packDispatch(block, owner, 8, { bytes: { 0: big } }, [1, 1, 1], [1, 1, 1]);
    expect(len).toBe(48 + 24 + 10000);
    expect(block.bytes.length).toBeGreaterThanOrEqual(len);
    expect([...block.bytes.subarray(72, 72 + 10000)]).toEqual([...big]);
  });

  test('bad bindings are InvalidArgument with the argument named', () => {
    const block = new DispatchBlock();
    const pack = (b: Parameters<typeof packDispatch<BindableBuffer>>[3], grid: [number, number, number] = [1, 1, 1], threads: [number, number, number] = [1, 1, 1]) =>
      packDispatch(block, owner, 8, b, grid, threads);
    expectKind(() => pack({ buffers: { 31: bufA } }), 'InvalidArgument', 'buffer binding index must be an integer in [0, 30] (got 31)');
    expectKind(() => pack({ buffers: { 0: bufA, 1: bufB, ['x' as unknown as number]: bufC } }), 'InvalidArgument', 'buffer binding index must be an integer in [0, 30] (got x)');
    expectKind(() => pack({ buffers: new Array<BindableBuffer>(32).fill(bufA) }), 'InvalidArgument', 'buffers (an array) must be at most 31 long (got 32)');
    expectKind(() => pack({ buffers: { 0: { ...bufA, _h: 0 } } }), 'InvalidArgument', 'used after release');
    expectKind(() => pack({ buffers: { 0: { ...bufA, _state: {} } } }), 'InvalidArgument', 'another device');
    expectKind(() => pack({ buffers: { 0: [bufC, 5] } }), 'InvalidArgument', 'offset of buffer 0 must be an integer in [0, 4] (got 5)');
    expectKind(() => pack({ buffers: { 0: [bufC, 1.5] } }), 'InvalidArgument', 'offset of buffer 0');
    expectKind(() => pack({ buffers: { 2: bufA }, bytes: { 2: new Uint8Array(4) } }), 'InvalidArgument', 'bytes index 2');
    expectKind(() => pack({ bytes: { 0: new Uint8Array(0) } }), 'InvalidArgument', 'bytes at index 0 must be non-empty');
    expectKind(() => pack({ threadgroupMemory: { 0: -1 } }), 'InvalidArgument', 'threadgroupMemory[0]');
    expectKind(() => pack({}, [0, 1, 1]), 'InvalidArgument', 'grid[0] must be a positive 32-bit integer (got 0)');
    expectKind(() => pack({}, [1, 1, 1], [1, 2.5, 1]), 'InvalidArgument', 'threads[1]');
    expectKind(() => pack({}, [2 ** 32, 1, 1]), 'InvalidArgument', 'grid[0]');
  });
});

describe('function constants', () => {
  test('packed as sorted 12-byte records of index, type, bits', () => {
    const recs = packConstants({
      3: { type: 'u32', value: 7 },
      0: true,
      1: { type: 'f32', value: 1.5 },
      2: { type: 'i16', value: -1 },
      4: { type: 'f16', value: 1 },
      5: false,
      6: { type: 'i32', value: -2 },
      7: { type: 'u16', value: 65535 },
    });
    expect([...recs]).toEqual([
      0, 1, 1,
      1, 4, 0x3fc00000,
      2, 6, 0xffff,
      3, 3, 7,
      4, 5, 0x3c00,
      5, 1, 0,
      6, 2, 0xfffffffe,
      7, 7, 0xffff,
    ]);
    expect(packConstants(undefined).length).toBe(0);
  });

  test('values out of their type range are InvalidArgument', () => {
    expectKind(() => packConstants({ 0: { type: 'u16', value: 65536 } }), 'InvalidArgument', 'function constant 0');
    expectKind(() => packConstants({ 1: { type: 'i32', value: 0.5 } }), 'InvalidArgument', 'function constant 1');
    expectKind(() => packConstants({ 2: { type: 'u32', value: -1 } }), 'InvalidArgument', 'function constant 2');
  });

  test('the cache key ignores insertion order and tells values apart', () => {
    expect(constantsKey({ 1: true, 0: { type: 'u32', value: 3 } })).toBe(constantsKey({ 0: { type: 'u32', value: 3 }, 1: true }));
    expect(constantsKey({ 0: true })).not.toBe(constantsKey({ 0: false }));
    expect(constantsKey({ 0: { type: 'u32', value: 1 } })).not.toBe(constantsKey({ 0: { type: 'i32', value: 1 } }));
    expect(constantsKey(undefined)).toBe('');
  });
});

describe('validation helpers', () => {
  test('messages name op, argument, expected and actual', () => {
    expect(invalid('rms_norm', 'dim', 'a multiple of 4', 6).message).toBe('rms_norm: dim must be a multiple of 4 (got 6)');
    expect(invalid('op', 'shape', 'rank 2', [1, 2, 3]).message).toBe('op: shape must be rank 2 (got [1, 2, 3])');
    expectKind(() => checkPositive('op', 'n', 0), 'InvalidArgument', 'op: n must be a positive integer (got 0)');
    expectKind(() => checkPositive('op', 'n', 1.5), 'InvalidArgument', '(got 1.5)');
    expectKind(() => checkPositive('op', 'n', NaN), 'InvalidArgument', '(got NaN)');
    checkPositive('op', 'n', 1);
    expectKind(() => checkMultiple('op', 'dim', 10, 4), 'InvalidArgument', 'op: dim must be a multiple of 4 (got 10)');
    expectKind(() => checkMultiple('op', 'heads', 10, 4, 'kvHeads'), 'InvalidArgument', 'op: heads must be a multiple of kvHeads (4) (got 10)');
    checkMultiple('op', 'dim', 12, 4);
    expectKind(() => checkAtMost('op', 'dim', 1025, 1024, 'maxThreads'), 'InvalidArgument', 'op: dim must be at most maxThreads (1024) (got 1025)');
    expectKind(() => checkAtMost('op', 'dim', NaN, 1024), 'InvalidArgument', 'at most 1024');
    checkAtMost('op', 'dim', 1024, 1024);
    expect(checkedProduct('op', 'n', 3, 5, 7)).toBe(105);
    expectKind(() => checkedProduct('op', 'elements', 2 ** 30, 2 ** 30, 2 ** 30), 'InvalidArgument', 'op: elements must be a product');
  });
});

describe('errors', () => {
  test('status codes map to kinds', () => {
    const kinds = [1, 2, 3, 4, 5, 6, 7, 8, 99].map(statusKind);
    expect(kinds).toEqual([
      'InvalidArgument',
      'ShaderCompilationError',
      'KernelNotFound',
      'DeviceNotFound',
      'CommandBufferError',
      'BufferAllocationError',
      'UnsupportedDtype',
      'Internal',
      'Internal',
    ]);
    const e = new MlxError('KernelNotFound', 'x');
    expect(e).toBeInstanceOf(Error);
    expect(e.name).toBe('MlxError');
  });
});

describe('loader', () => {
  test('library file names', () => {
    expect(libraryFileName('emu', 'linux')).toBe('libmlx_native_emu.so');
    expect(libraryFileName('emu', 'darwin')).toBe('libmlx_native_emu.dylib');
    expect(libraryFileName('cuda', 'linux')).toBe('libmlx_native_cuda.so');
    expect(libraryFileName('metal', 'darwin')).toBe('libMlxNative.dylib');
    expect(candidatePaths('emu').at(-1)).toEndWith(`build/emu/${libraryFileName('emu')}`);
  });

  // Off macOS no metal library is found, unless MLX_NATIVE_LIB names one (the
  // Swift backend built on Linux over the emulator, as CI tests it).
  test.if(process.platform !== 'darwin' && !process.env.MLX_NATIVE_LIB)('a missing backend is DeviceNotFound listing the paths tried and the fix', () => {
    const e = mlxError(() => loadBackend('metal'));
    expect(e.kind).toBe('DeviceNotFound');
    expect(e.message).toContain('build/metal/libMlxNative.dylib: not found');
    expect(e.message).toContain('scripts/build-metal.sh');
  });

  // The environment is read when a backend is first loaded: run in a fresh process.
  function loadIn(env: Record<string, string>, backend: string): string {
    const code = `import { Device } from './ts/index.ts'; try { const d = Device.open(${backend === '' ? '' : `{ backend: '${backend}' }`}); console.log('opened ' + d.backend); } catch (e) { console.log(e.kind + ': ' + e.message); }`;
    const r = spawnSync(process.execPath, ['-e', code], { cwd: `${import.meta.dir}/..`, env: { ...process.env, ...env }, encoding: 'utf8' });
    return r.stdout + r.stderr;
  }

  test.if(process.platform !== 'darwin')('MLX_NATIVE_LIB that is not there is listed first', () => {
    const out = loadIn({ MLX_NATIVE_LIB: '/nonexistent/libx.so' }, 'metal');
    expect(out).toContain('DeviceNotFound: no metal backend library could be loaded');
    expect(out).toContain('/nonexistent/libx.so (MLX_NATIVE_LIB): no such file');
  });

  // Device.open() twice in a fresh process, with the environment given (and MLX_NATIVE_BACKEND unset unless given).
  function openTwice(env: Record<string, string>, opts: string): { backend: string; stderr: string } {
    const code = `import { Device } from './ts/index.ts'; Device.open(${opts}).close(); const d = Device.open(${opts}); console.log(d.backend); d.close();`;
    const base: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && k !== 'MLX_NATIVE_BACKEND' && k !== 'MLX_NATIVE_LIB') base[k] = v;
    const r = spawnSync(process.execPath, ['-e', code], { cwd: `${import.meta.dir}/..`, env: { ...base, ...env }, encoding: 'utf8' });
    expect(r.status).toBe(0);
    return { backend: r.stdout.trim(), stderr: r.stderr };
  }

  test.if(backendAbsence('emu') === null)('falling back to the emulator writes one stderr line: how to select it, how to get a GPU', () => {
    const { backend, stderr } = openTwice({}, '');
    if (backend !== 'emu') {
      expect(stderr).toBe(''); // a GPU backend was found: nothing to say
      return;
    }
    const lines = stderr.split('\n').filter((l) => l !== '');
    expect(lines.length).toBe(1);
    expect(lines[0]).toStartWith('mlx-native: no GPU backend (');
    expect(lines[0]).toContain('CPU emulator');
    expect(lines[0]).toContain("{ backend: 'emu' }");
    expect(lines[0]).toContain('MLX_NATIVE_BACKEND=emu');
    expect(lines[0]).toContain(process.platform === 'darwin' ? 'build-metal.sh' : 'build-cuda.sh');
  });

  test.if(backendAbsence('emu') === null)('the emulator selected explicitly is silent', () => {
    expect(openTwice({}, "{ backend: 'emu' }")).toEqual({ backend: 'emu', stderr: '' });
    expect(openTwice({ MLX_NATIVE_BACKEND: 'emu' }, '')).toEqual({ backend: 'emu', stderr: '' });
  });

  test('MLX_NATIVE_BACKEND must name a backend', () => {
    const out = loadIn({ MLX_NATIVE_BACKEND: 'vulkan' }, '');
    expect(out).toContain('InvalidArgument: MLX_NATIVE_BACKEND must be one of metal, cuda, emu (got vulkan)');
  });
});

// ---------------------------------------------------------------- end to end

const SRC = `
#include <metal_stdlib>
using namespace metal;

kernel void add(device const float* a [[buffer(0)]], device float* o [[buffer(1)]],
                constant float& s [[buffer(2)]], constant uint& n [[buffer(3)]],
                uint i [[thread_position_in_grid]]) {
  if (i < n) o[i] = a[i] + s;
}

// Writes one element past the end of o: the emulator must report it.
kernel void oob(device float* o [[buffer(0)]], constant uint& n [[buffer(1)]],
                uint i [[thread_position_in_grid]]) {
  o[i + n] = 1.0f;
}

// Burns time so that commit() has to poll.
kernel void spin(device float* o [[buffer(0)]], constant uint& iters [[buffer(1)]],
                 uint i [[thread_position_in_grid]]) {
  float x = float(i);
  for (uint k = 0; k < iters; ++k) x = x * 0.999f + 1.0f;
  o[i] = x;
}
`;

const FC_SRC = `
#include <metal_stdlib>
using namespace metal;
constant bool has_scale [[function_constant(0)]];
constant uint scale [[function_constant(1)]];

kernel void scale_or_copy(device const float* a [[buffer(0)]], device float* o [[buffer(1)]],
                          uint i [[thread_position_in_grid]]) {
  o[i] = has_scale ? a[i] * float(scale) : a[i];
}
`;

// The same kernels for the cuda backend: one pointer parameter per bound
// index in ascending order, inline bytes arriving as device pointers.
const CU_SRC = `
extern "C" __global__ void add(const float* a, float* o, const float* s, const unsigned* n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < *n) o[i] = a[i] + *s;
}
extern "C" __global__ void oob(float* o, const unsigned* n) {
  o[threadIdx.x + *n] = 1.0f;
}
extern "C" __global__ void spin(float* o, const unsigned* iters) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  float x = float(i);
  for (unsigned k = 0; k < *iters; ++k) x = x * 0.999f + 1.0f;
  o[i] = x;
}
`;

const CU_FC_SRC = `
extern "C" __global__ void scale_or_copy(const float* a, float* o) {
  unsigned i = threadIdx.x;
  o[i] = MLXN_FC_0 ? a[i] * float(MLXN_FC_1) : a[i];
}
`;

/** The test library of the device's backend. */
function coreLib(d: Device): ReturnType<Device['compile']> {
  return d.backend === 'cuda' ? d.compile(CU_SRC, { name: 'core_test.cu' }) : d.compile(SRC, { name: 'core_test.metal' });
}

function u32(v: number): Uint32Array {
  return Uint32Array.of(v);
}

describeBackends('core', ({ device, label }) => {
  const r = rng(label.length * 7919 + 1);

  test('device identity and limits', () => {
    const d = device();
    expect(d.name.length).toBeGreaterThan(0);
    expect(d.limits.maxThreadsPerThreadgroup).toBeGreaterThanOrEqual(256);
    expect(d.limits.maxThreadgroupMemory).toBeGreaterThanOrEqual(16384);
    expect([32, 64]).toContain(d.limits.simdWidth);
    expect(d.limits.maxBufferLength).toBeGreaterThan(2 ** 20);
    expect(d.limits.sharedMemory).toBe(d.backend !== 'cuda');
    // The GPU generation and SM count: cuda's own, 0 where the backend has none.
    if (d.backend === 'cuda') {
      expect(d.limits.computeCapability).toBeGreaterThanOrEqual(50);
      expect(d.limits.multiprocessors).toBeGreaterThanOrEqual(1);
    } else {
      expect([d.limits.computeCapability, d.limits.multiprocessors]).toEqual([0, 0]);
    }
  });

  test('buffers: zero-filled, numbers by dtype, raw bytes, fill, view', () => {
    const d = device();
    using z = d.alloc('f32', [3, 5]);
    expect(z.elementCount).toBe(15);
    expect(z.byteLength).toBe(60);
    expect(z.shape).toEqual([3, 5]);
    expect([...z.readNumbers()]).toEqual(new Array(15).fill(0));

    const vals = [0.5, -1.25, 3, 1024, -0.0625, 7];
    for (const dt of ['f32', 'f16', 'bf16'] as const) {
      using b = d.upload(dt, [6], vals);
      expect([...b.readNumbers()]).toEqual(vals);
    }
    using h = d.upload('f16', [2], [0.1, 65520]);
    expect([...new Uint16Array(h.read().buffer)]).toEqual([0x2e66, 0x7c00]);
    for (const [dt, v] of [['u8', [0, 255]], ['u16', [1, 65535]], ['u32', [0, 4294967295]], ['i32', [-5, 2147483647]]] as const) {
      using b = d.upload(dt, [2], v);
      expect([...b.readNumbers()]).toEqual([...v]);
    }

    using raw = d.alloc('u8', [8]);
    raw.write(new Uint8Array([9, 8, 7]), 2);
    expect([...raw.read()]).toEqual([0, 0, 9, 8, 7, 0, 0, 0]);
    raw.write(new DataView(new Uint16Array([0x0201]).buffer), 6); // raw bytes
    expect([...raw.read()]).toEqual([0, 0, 9, 8, 7, 0, 1, 2]);
    expectKind(() => raw.write(new Uint8Array(4), 6), 'InvalidArgument', 'at most 8');

    using poisoned = d.alloc('f32', [4]);
    poisoned.fill(NaN);
    expect([...poisoned.readNumbers()].every(Number.isNaN)).toBe(true);

    const v = z.hostView();
    if (d.limits.sharedMemory) {
      expect(v).toBeInstanceOf(Float32Array);
      v![4] = 42; // writes through to the device memory
      expect(z.readNumbers()[4]).toBe(42);
    } else {
      expect(v).toBeNull();
    }

    expectKind(() => d.alloc('f32', [2, 0]), 'InvalidArgument', 'shape[1] must be a positive integer (got 0)');
    expectKind(() => d.alloc('f64' as 'f32', [2]), 'UnsupportedDtype', 'Device.alloc: dtype');
    expectKind(() => d.upload('f32', [3], [1, 2]), 'InvalidArgument', 'data.length must be 3 (got 2)');
    expectKind(() => d.upload('u8', [1], [300]), 'InvalidArgument', 'integer in [0, 255]');
  });

  test('typed data both ways: the storage type or an error naming both types; conversion by name; f16 as Float16Array', () => {
    const d = device();
    using h = d.alloc('f16', [4]);
    const e = errorOf(() => h.write(new Float32Array([1, 2, 3, 4])));
    expect(e.kind).toBe('InvalidArgument');
    expect(e.message).toStartWith('Buffer.write: data must be a Float16Array or Uint16Array for a f16 buffer (got a Float32Array)');
    expect(e.message).toContain('{ convert: true }');
    expect([...h.readNumbers()]).toEqual([0, 0, 0, 0]); // nothing written
    h.write(new Float32Array([1, 2.5, 65520, 0.1]), { convert: true });
    const got = h.read();
    expect(got).toBeInstanceOf(Float16Array);
    expect([...got]).toEqual([1, 2.5, Infinity, f16BitsToF32(0x2e66)]);
    h.write(new Float16Array([-1, 0.5]), 4); // byteOffset 4: elements 2 and 3
    expect([...h.read()]).toEqual([1, 2.5, -1, 0.5]);
    h.write(new Uint16Array([0x3c00])); // f16 bit patterns are accepted as they are
    expect(h.read()[0]).toBe(1);
    h.fill(NaN);
    expect([...h.read()].every(Number.isNaN)).toBe(true);

    using f = d.alloc('f32', [2]);
    for (const wrong of [new Float64Array(2), new Float16Array(2), new Int32Array(2), new Uint8Array(8)]) {
      expect(errorOf(() => f.write(wrong)).message).toStartWith(`Buffer.write: data must be a Float32Array for a f32 buffer (got ${wrong instanceof Int32Array ? 'an' : 'a'} ${wrong.constructor.name})`);
    }
    f.write(new Float64Array([0.1, -3]), { convert: true });
    expect([...f.read()]).toEqual([Math.fround(0.1), -3]);
    f.write(new Float16Array([1.5]), { byteOffset: 4, convert: true });
    expect([...f.read()]).toEqual([Math.fround(0.1), 1.5]);

    using b = d.alloc('bf16', [2]);
    expect(errorOf(() => b.write(new Float16Array(2))).message).toStartWith('Buffer.write: data must be a Uint16Array for a bf16 buffer (got a Float16Array)');
    b.write(new Float32Array([1, 3]), { convert: true });
    expect([...b.read()]).toEqual([0x3f80, 0x4040]);

    using u = d.alloc('u8', [2]);
    expect(errorOf(() => u.write(new Float32Array([300]), { convert: true })).message).toContain('integer in [0, 255]');
    using i = d.alloc('i32', [1]);
    expect(errorOf(() => i.write(new Uint32Array(1))).message).toStartWith('Buffer.write: data must be an Int32Array for a i32 buffer (got a Uint32Array)');

    expect(errorOf(() => f.write(new Float32Array(1), 'x' as unknown as number)).message).toStartWith('Buffer.write: the second argument must be a byte offset or { byteOffset?, convert? } (got a string)');
    if (d.limits.sharedMemory) expect(h.hostView()).toBeInstanceOf(Float16Array);
  });

  test('a buffer used after release throws, release twice is harmless', () => {
    const d = device();
    const b = d.alloc('f32', [4]);
    b.release();
    b.release();
    expect(b.released).toBe(true);
    expectKind(() => b.read(), 'InvalidArgument', 'used after release');
    expectKind(() => b.writeNumbers([1, 2, 3, 4]), 'InvalidArgument', 'used after release');
    expectKind(() => b.hostView(), 'InvalidArgument', 'used after release');
    let inner: import('../ts/index.ts').Buffer;
    {
      using s = d.alloc('u32', [1]);
      inner = s;
    }
    expect(inner.released).toBe(true);
  });

  test('handles of collected, unreleased objects are freed by the finalizer', async () => {
    const d = device();
    const before = d.liveHandles;
    (() => {
      for (let i = 0; i < 64; i++) d.alloc('f32', [16]);
    })();
    expect(d.liveHandles).toBe(before + 64);
    for (let i = 0; i < 50 && d.liveHandles > before; i++) {
      Bun.gc(true);
      await new Promise((res) => setTimeout(res, 10));
    }
    expect(d.liveHandles).toBe(before);
  });

  test('compile: kernel names, pipelines, missing kernel, compile error with file and line', () => {
    const d = device();
    using lib = coreLib(d);
    expect(lib.kernelNames.sort()).toEqual(['add', 'oob', 'spin']);
    const p = lib.pipeline('add');
    expect(p.name).toBe('add');
    expect(p.maxThreads).toBeGreaterThanOrEqual(256);
    expect(p.staticThreadgroupMemory).toBe(0);
    expect(lib.pipeline('add')).toBe(p);
    expectKind(() => lib.pipeline('nope'), 'KernelNotFound', 'nope');

    const cuda = d.backend === 'cuda';
    const bad = cuda
      ? 'extern "C" __global__ void k(float* o) {\n  o[0] = undefined_name;\n}\n'
      : 'kernel void k(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n  o[i] = undefined_name;\n}\n';
    const file = cuda ? 'broken.cu' : 'broken.metal';
    const e = mlxError(() => d.compile(bad, { name: file }));
    expect(e.kind).toBe('ShaderCompilationError');
    expect(e.message).toMatch(new RegExp(`${file.replace('.', '\\.')}[:(]2\\b`));
  });

  test('dispatch: o = a + s over a grid that overhangs n', async () => {
    const d = device();
    const n = 1000;
    const a = randomArray(r, n);
    using ab = d.upload('f32', [n], a);
    using ob = d.alloc('f32', [n]);
    ob.fill(NaN);
    const lib = coreLib(d);
    using enc = d.encoder();
    enc.dispatch(lib.pipeline('add'), { buffers: { 0: ab, 1: ob }, bytes: { 2: Float32Array.of(2.5), 3: u32(n) } }, [Math.ceil(n / 64), 1, 1], [64, 1, 1]);
    await enc.commit();
    const got = ob.readNumbers();
    for (let i = 0; i < n; i++) if (got[i] !== Math.fround(Math.fround(a[i]!) + 2.5)) throw new Error(`o[${i}] = ${got[i]}`);
    expect(enc.gpuTimeNs).toBeGreaterThan(0);
    lib.release();
  });

  test('barrier orders dependent dispatches; offsets bind sub-ranges; encoders record again after a commit', () => {
    const d = device();
    const lib = coreLib(d);
    const add = lib.pipeline('add');
    const n = 33;
    const a = randomArray(r, n);
    using ab = d.upload('f32', [n], a);
    using mid = d.alloc('f32', [n]);
    using out = d.alloc('f32', [n + 8]);
    out.fill(NaN);
    using enc = d.encoder();
    const grid: [number, number, number] = [2, 1, 1];
    const tg: [number, number, number] = [32, 1, 1];
    enc.dispatch(add, { buffers: { 0: ab, 1: mid }, bytes: { 2: Float32Array.of(1), 3: u32(n) } }, grid, tg);
    enc.barrier();
    enc.dispatch(add, { buffers: { 0: mid, 1: [out, 32] }, bytes: { 2: Float32Array.of(-3), 3: u32(n) } }, grid, tg);
    enc.commitAndWait();
    const got = out.readNumbers();
    for (let i = 0; i < 8; i++) expect(got[i]).toBeNaN();
    for (let i = 0; i < n; i++) {
      const want = Math.fround(Math.fround(Math.fround(a[i]!) + 1) - 3);
      if (got[i + 8] !== want) throw new Error(`out[${i + 8}] = ${got[i + 8]}, want ${want}`);
    }
    // The same encoder records and commits again.
    enc.dispatch(add, { buffers: { 0: ab, 1: mid }, bytes: { 2: Float32Array.of(10), 3: u32(n) } }, grid, tg);
    enc.commitAndWait();
    expect(mid.readNumbers()[0]).toBe(Math.fround(Math.fround(a[0]!) + 10));
    lib.release();
  });

  test('_syncWords (internal): zero, 16-byte aligned, distinct within a recording, taken afresh by the next, grown past the arena; refusals', () => {
    const d = device();
    using enc = d.encoder();
    const [a, ao] = enc._syncWords(3);
    const [b, bo] = enc._syncWords(5);
    expect([ao % 16, bo % 16]).toEqual([0, 0]);
    expect(b === a && bo < ao + 12).toBe(false); // no overlap with the first three words
    expect(a.readNumbers().every((v) => v === 0)).toBe(true);
    // More than the arena holds: a larger one, the first kept (earlier dispatches may bind it).
    const [c, co] = enc._syncWords(5000);
    expect([c === a, co, c.elementCount >= 5000]).toEqual([false, 0, true]);
    expect(a.released).toBe(false);
    enc.commitAndWait();
    // The next recording takes from the start of the current arena again.
    const [e, eo] = enc._syncWords(2);
    expect([e === c, eo]).toEqual([true, 0]);
    for (const bad of [0, -1, 1.5, NaN, 2 ** 24 + 1]) {
      const err = mlxError(() => enc._syncWords(bad));
      expect(err.message).toContain('Encoder._syncWords: count must be an integer in [1, 16777216]');
    }
    enc.release();
    expect([a.released, c.released]).toEqual([true, true]);
  });

  test('_scratchWords (internal): 16-byte aligned, distinct within a recording and from the sync words, taken afresh by the next, grown; refusals', () => {
    const d = device();
    using enc = d.encoder();
    const [s0] = enc._syncWords(4);
    const [a, ao] = enc._scratchWords(3);
    const [b, bo] = enc._scratchWords(5);
    expect([a === s0, ao % 16, bo % 16, b === a && bo < ao + 12]).toEqual([false, 0, 0, false]);
    const [c, co] = enc._scratchWords(5000);
    expect([c === a, co, c.elementCount >= 5000, a.released]).toEqual([false, 0, true, false]);
    enc.commitAndWait();
    const [e, eo] = enc._scratchWords(2);
    expect([e === c, eo]).toEqual([true, 0]);
    for (const bad of [0, -1, 1.5, NaN, 2 ** 24 + 1]) {
      const err = mlxError(() => enc._scratchWords(bad));
      expect(err.message).toContain('Encoder._scratchWords: count must be an integer in [1, 16777216]');
    }
    enc.release();
    expect([a.released, c.released, s0.released]).toEqual([true, true, true]);
  });

  test('commit() polls without blocking the event loop', async () => {
    const d = device();
    const lib = coreLib(d);
    using o = d.alloc('f32', [256]);
    using enc = d.encoder();
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    // Sized to take tens of milliseconds on every backend.
    const iters = runsOnEmulator(d) ? 200_000 : 50_000_000;
    enc.dispatch(lib.pipeline('spin'), { buffers: { 0: o }, bytes: { 1: u32(iters) } }, [4, 1, 1], [64, 1, 1]);
    const t0 = performance.now();
    await enc.commit();
    const ms = performance.now() - t0;
    clearInterval(timer);
    expect(ms).toBeGreaterThan(20);
    expect(ticks).toBeGreaterThan(2);
    lib.release();
  });

  test('errors: recording during a commit, bad launches, out-of-bounds access, released pipeline', async () => {
    const d = device();
    const lib = coreLib(d);
    const add = lib.pipeline('add');
    using a = d.alloc('f32', [64]);
    using o = d.alloc('f32', [64]);
    using enc = d.encoder();
    const binds = { buffers: { 0: a, 1: o }, bytes: { 2: Float32Array.of(1), 3: u32(64) } };

    expectKind(() => enc.dispatch(add, binds, [1, 1, 1], [d.limits.maxThreadsPerThreadgroup + 1, 1, 1]), 'InvalidArgument', 'dispatch add');

    enc.dispatch(add, binds, [1, 1, 1], [64, 1, 1]);
    const pending = enc.commit();
    expectKind(() => enc.dispatch(add, binds, [1, 1, 1], [64, 1, 1]), 'InvalidArgument', 'commit in flight');
    await pending;

    if (runsOnEmulator(d)) {
      enc.dispatch(lib.pipeline('oob'), { buffers: { 0: o }, bytes: { 1: u32(64) } }, [1, 1, 1], [1, 1, 1]);
      expectKind(() => enc.commitAndWait(), 'CommandBufferError');
      // The encoder records again after an error.
      enc.dispatch(add, binds, [1, 1, 1], [64, 1, 1]);
      enc.commitAndWait();
    }

    lib.release();
    expectKind(() => enc.dispatch(add, binds, [1, 1, 1], [64, 1, 1]), 'InvalidArgument', 'pipeline add was used after release');
    expectKind(() => d.setOption('no_such_option', '1'), 'InvalidArgument', 'Device.setOption(no_such_option=1)');
  });

  test('registry: lazy compile, caches by kernel and constants, errors', () => {
    const d = device();
    const reg = d.kernels;
    expect(d.kernels).toBe(reg);
    reg.register('core_test', familySources('core_test', { metal: SRC, cuda: CU_SRC }), ['add', 'oob', 'spin']);
    // The same files again (other objects of equal text): a no-op.
    reg.register('core_test', familySources('core_test', { metal: SRC, cuda: CU_SRC }), ['add', 'oob', 'spin']);
    expectKind(() => reg.register('core_test', familySources('core_test', { metal: SRC + ' ' }), ['add', 'oob', 'spin']), 'InvalidArgument', 'already registered');
    expectKind(() => reg.register('other', familySources('other', { metal: SRC }), ['add']), 'InvalidArgument', 'kernel add of family other is already registered by family core_test');
    expectKind(() => reg.pipeline('unknown_kernel'), 'KernelNotFound', 'unknown_kernel is not registered');

    const p = reg.pipeline('add');
    expect(reg.pipeline('add')).toBe(p);
    expect(reg.pipeline('spin').library).toBe(p.library); // one library per family

    reg.register('core_fc', familySources('core_fc', { metal: FC_SRC, cuda: CU_FC_SRC }), ['scale_or_copy']);
    const scaled = reg.pipeline('scale_or_copy', { 0: true, 1: { type: 'u32', value: 3 } });
    const copy = reg.pipeline('scale_or_copy', { 0: false, 1: { type: 'u32', value: 3 } });
    expect(reg.pipeline('scale_or_copy', { 1: { type: 'u32', value: 3 }, 0: true })).toBe(scaled);
    expect(copy).not.toBe(scaled);

    const a = [1, 2, 3, 4];
    using ab = d.upload('f32', [4], a);
    using o1 = d.alloc('f32', [4]);
    using o2 = d.alloc('f32', [4]);
    using enc = d.encoder();
    enc.dispatch(scaled, { buffers: { 0: ab, 1: o1 } }, [1, 1, 1], [4, 1, 1]);
    enc.dispatch(copy, { buffers: { 0: ab, 1: o2 } }, [1, 1, 1], [4, 1, 1]);
    enc.commitAndWait();
    expect([...o1.readNumbers()]).toEqual([3, 6, 9, 12]);
    expect([...o2.readNumbers()]).toEqual(a);
  });

  test('validation helpers on buffers', () => {
    const d = device();
    using b = d.alloc('f16', [2, 3]);
    checkDtype('op', 'x', b, 'f16');
    checkDtype('op', 'x', b, ['f32', 'f16']);
    expectKind(() => checkDtype('op', 'x', b, 'f32'), 'InvalidArgument', 'op: x.dtype must be f32 (got f16)');
    expectKind(() => checkDtype('op', 'x', b, ['f32', 'bf16']), 'InvalidArgument', 'op: x.dtype must be one of f32, bf16 (got f16)');
    checkElements('op', 'x', b, 6);
    expectKind(() => checkElements('op', 'x', b, 8), 'InvalidArgument', 'op: x.elementCount must be 8 (got 6, shape [2, 3])');
  });
});

describeBackends('device close', ({ label }) => {
  test('closing frees every child; using them afterwards throws', async () => {
    const { openDevice, backends } = await import('./helpers.ts');
    const c = backends().find((b) => b.label === label)!;
    const d: Device = openDevice(c);
    const b = d.alloc('f32', [4]);
    const lib = coreLib(d);
    const p = lib.pipeline('add');
    const enc = d.encoder();
    d.close();
    d.close();
    expect(d.closed).toBe(true);
    expectKind(() => b.read(), 'InvalidArgument', 'used after release');
    expectKind(() => lib.kernelNames, 'InvalidArgument', 'used after release');
    expectKind(() => enc.dispatch(p, { buffers: { 0: b } }, [1, 1, 1], [1, 1, 1]), 'InvalidArgument', 'used after release');
    expectKind(() => d.alloc('f32', [1]), 'InvalidArgument', 'used after release');
    // Releasing children after the device is harmless.
    b.release();
    lib.release();
    enc.release();
  });
});
