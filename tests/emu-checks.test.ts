// The emulator's checks, through the public API: what it catches in a kernel
// that would misbehave (or silently work by luck) on a GPU.
//
// Kernels here are deliberately wrong. Each test names the defect and the
// report the emulator must give: the kernel, the binding, the offset, the
// .metal file and line.

import { describe, expect, test } from 'bun:test';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { Device, MlxError, type Buffer, type Pipeline } from '../ts/index.ts';
import { backendAbsence, errorOf } from './helpers.ts';

const FILE = 'emu_checks.metal';

const SOURCE = `#include <metal_stdlib>
using namespace metal;

// Shifts each threadgroup's values left by one through threadgroup memory.
// Defect: no barrier between reading tg[i + 1] and overwriting tg[i].
kernel void shift_missing_barrier(device uint* out [[buffer(0)]],
                                  threadgroup uint* tg [[threadgroup(0)]],
                                  uint i [[thread_index_in_threadgroup]],
                                  uint n [[threads_per_threadgroup]],
                                  uint gid [[thread_position_in_grid]]) {
  tg[i] = i;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  uint v = i + 1 < n ? tg[i + 1] : 0u;
  tg[i] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[gid] = tg[i];
}

// Defect: no bounds check against the element count.
kernel void write_past_end(device float* out [[buffer(0)]],
                           uint gid [[thread_position_in_grid]]) {
  out[gid] = 1.0f; // MARK:device-oob
}

// Defect: the last thread writes one element past the threadgroup buffer.
kernel void tg_past_end(device float* out [[buffer(0)]],
                        threadgroup float* tg [[threadgroup(0)]],
                        uint i [[thread_index_in_threadgroup]],
                        uint gid [[thread_position_in_grid]]) {
  tg[i + 1] = float(i); // MARK:tg-oob
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[gid] = tg[i];
}

// Defect: the threadgroup array is sized for 32 threads, run with more.
kernel void static_tg_past_end(device float* out [[buffer(0)]],
                               uint i [[thread_index_in_threadgroup]],
                               uint gid [[thread_position_in_grid]]) {
  threadgroup float tile[32];
  tile[i] = float(i); // MARK:static-oob
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[gid] = tile[i % 32];
}

// Defect: the two halves of the threadgroup wait at different barriers.
kernel void divergent_barrier(device float* out [[buffer(0)]],
                              uint i [[thread_index_in_threadgroup]]) {
  if (i < 16) {
    threadgroup_barrier(mem_flags::mem_threadgroup); // MARK:barrier-a
  } else {
    threadgroup_barrier(mem_flags::mem_threadgroup); // MARK:barrier-b
  }
  out[i] = 1.0f;
}

// Defect: an unchecked pointer (the address of a threadgroup scalar) far
// outside any memory.
kernel void wild_pointer(device float* out [[buffer(0)]],
                         threadgroup float* tg [[threadgroup(0)]],
                         uint i [[thread_index_in_threadgroup]]) {
  threadgroup float scalar;
  threadgroup float* raw = &scalar;
  tg[i] = 1.0f;
  if (i == 5) raw[0x4000000000000ul] = 2.0f;
  out[i] = tg[i];
}

// Defect: the last thread writes past threadgroup memory through an element
// address taken with &.
kernel void tg_addr_past_end(device float* out [[buffer(0)]],
                             threadgroup float* tg [[threadgroup(0)]],
                             uint i [[thread_index_in_threadgroup]]) {
  threadgroup float* slot = &tg[i + 1]; // MARK:tg-addr-oob
  *slot = float(i);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  device float* dst = &out[i];
  *dst = tg[i];
}

// Threadgroup variables: 40 + 4 + 48 bytes, each rounded up to 16 (48 + 16 + 48).
static void publish(threadgroup float4* extra, uint i) {
  extra[i % 3] = float4(float(i));
}
kernel void static_tg(device float* out [[buffer(0)]],
                      uint i [[thread_index_in_threadgroup]]) {
  threadgroup float part[10];
  threadgroup uint count;
  threadgroup float4 extra[3];
  if (i < 10) part[i] = float(i);
  if (i == 0) count = 1u;
  publish(extra, i);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = part[i % 10] + float(count) + extra[0].x;
}

// 24 KiB of threadgroup variables, more with the dynamic memory bound below.
kernel void big_static_tg(device float* out [[buffer(0)]],
                          threadgroup float* dyn [[threadgroup(0)]],
                          uint i [[thread_index_in_threadgroup]]) {
  threadgroup float big[6144];
  big[i] = 1.0f;
  dyn[i] = 1.0f;
  out[i] = big[i] + dyn[i];
}

kernel void copy2(device const float* a [[buffer(0)]],
                  device float* b [[buffer(1)]],
                  threadgroup float* tg [[threadgroup(0)]],
                  uint gid [[thread_position_in_grid]]) {
  b[gid] = a[gid];
}
`;

/** 1-based line of the source line that holds `mark`. */
function lineOf(src: string, mark: string): number {
  const i = src.split('\n').findIndex((l) => l.includes(mark));
  if (i < 0) throw new Error(`no line with ${mark}`);
  return i + 1;
}


const absent = backendAbsence('emu');

describe.if(absent === null)('emu checks', () => {
  function setup(options: Record<string, string> = {}): { device: Device; pipeline: (name: string) => Pipeline } {
    const device = Device.open({ backend: 'emu' });
    for (const [k, v] of Object.entries(options)) device.setOption(k, v);
    const lib = device.compile(SOURCE, { name: FILE });
    return { device, pipeline: (name) => lib.pipeline(name) };
  }

  function runShift(options: Record<string, string>): number[] {
    const { device, pipeline } = setup(options);
    try {
      const n = 128;
      const groups = 4;
      const out = device.alloc('u32', [n * groups]);
      const enc = device.encoder();
      enc.dispatch(pipeline('shift_missing_barrier'), { buffers: { 0: out }, threadgroupMemory: { 0: n * 4 } },
        [groups, 1, 1], [n, 1, 1]);
      enc.commitAndWait();
      const got = Array.from(out.read() as Uint32Array);
      enc.release();
      out.release();
      return got;
    } finally {
      device.close();
    }
  }

  const shiftWant = Array.from({ length: 4 * 128 }, (_, k) => (k % 128 === 127 ? 0 : (k % 128) + 1));

  test('a missing barrier: hidden by the sequential schedule, exposed by the random one', () => {
    // Sequential runs thread i to its next barrier before thread i + 1 starts,
    // so every read of tg[i + 1] still sees the old value.
    expect(runShift({ schedule: 'sequential' })).toEqual(shiftWant);
    // Random preempts threads at threadgroup-memory accesses.
    expect(runShift({ schedule: 'random', seed: '1' })).not.toEqual(shiftWant);
    expect(runShift({ schedule: 'random', seed: '2024' })).not.toEqual(shiftWant);
  });

  test('a write past the end of a device buffer names kernel, binding, offset and line', () => {
    const { device, pipeline } = setup();
    try {
      const out = device.alloc('f32', [100]);
      const enc = device.encoder();
      enc.dispatch(pipeline('write_past_end'), { buffers: { 0: out } }, [2, 1, 1], [64, 1, 1]);
      const e = errorOf(() => enc.commitAndWait());
      expect(e.kind).toBe('CommandBufferError');
      expect(e.message).toContain("kernel 'write_past_end'");
      expect(e.message).toContain('[[buffer(0)]]');
      expect(e.message).toContain('byte offset 400');
      expect(e.message).toContain('binding length 400');
      expect(e.message).toContain(`${FILE}:${lineOf(SOURCE, 'MARK:device-oob')}:`);
      // The in-bounds writes happened.
      expect((out.read() as Float32Array)[99]).toBe(1);
    } finally {
      device.close();
    }
  });

  test('a write past threadgroup memory names kernel, binding, offset and line', () => {
    const { device, pipeline } = setup();
    try {
      const out = device.alloc('f32', [64]);
      const enc = device.encoder();
      enc.dispatch(pipeline('tg_past_end'), { buffers: { 0: out }, threadgroupMemory: { 0: 64 * 4 } },
        [1, 1, 1], [64, 1, 1]);
      const e = errorOf(() => enc.commitAndWait());
      expect(e.kind).toBe('CommandBufferError');
      expect(e.message).toContain("kernel 'tg_past_end'");
      expect(e.message).toContain('[[threadgroup(0)]]');
      expect(e.message).toContain('byte offset 256');
      expect(e.message).toContain(`${FILE}:${lineOf(SOURCE, 'MARK:tg-oob')}:`);
    } finally {
      device.close();
    }
  });

  test('a write past a threadgroup array declared in the kernel is reported', () => {
    const { device, pipeline } = setup();
    try {
      const out = device.alloc('f32', [64]);
      const enc = device.encoder();
      enc.dispatch(pipeline('static_tg_past_end'), { buffers: { 0: out } }, [1, 1, 1], [64, 1, 1]);
      const e = errorOf(() => enc.commitAndWait());
      expect(e.kind).toBe('CommandBufferError');
      expect(e.message).toContain("kernel 'static_tg_past_end'");
      expect(e.message).toContain('threadgroup variable');
      expect(e.message).toContain('byte offset 128');
      expect(e.message).toContain(`${FILE}:${lineOf(SOURCE, 'MARK:static-oob')}:`);
    } finally {
      device.close();
    }
  });

  test('threads waiting at different barriers: the error names both sites', () => {
    for (const schedule of ['sequential', 'random']) {
      const { device, pipeline } = setup({ schedule });
      try {
        const out = device.alloc('f32', [32]);
        const enc = device.encoder();
        enc.dispatch(pipeline('divergent_barrier'), { buffers: { 0: out } }, [1, 1, 1], [32, 1, 1]);
        const e = errorOf(() => enc.commitAndWait());
        expect(e.kind).toBe('CommandBufferError');
        expect(e.message).toContain("kernel 'divergent_barrier'");
        expect(e.message).toContain(`${FILE}:${lineOf(SOURCE, 'MARK:barrier-a')}:`);
        expect(e.message).toContain(`${FILE}:${lineOf(SOURCE, 'MARK:barrier-b')}:`);
        // No thread went past its barrier.
        expect(Array.from(out.read() as Float32Array)).toEqual(new Array(32).fill(0));
        // The device still works after the failed commit.
        enc.dispatch(pipeline('write_past_end'), { buffers: { 0: out } }, [1, 1, 1], [32, 1, 1]);
        enc.commitAndWait();
      } finally {
        device.close();
      }
    }
  });

  test('a fault through an unchecked pointer fails the commit, not the process', () => {
    const { device, pipeline } = setup();
    try {
      const out = device.alloc('f32', [32]);
      const enc = device.encoder();
      enc.dispatch(pipeline('wild_pointer'), { buffers: { 0: out }, threadgroupMemory: { 0: 128 } },
        [1, 1, 1], [32, 1, 1]);
      const e = errorOf(() => enc.commitAndWait());
      expect(e.kind).toBe('CommandBufferError');
      expect(e.message).toContain("kernel 'wild_pointer': invalid memory access");
      expect(e.message).toContain('thread (5,0,0) of threadgroup (0,0,0)');
      // The device still works.
      enc.dispatch(pipeline('write_past_end'), { buffers: { 0: out } }, [1, 1, 1], [32, 1, 1]);
      enc.commitAndWait();
    } finally {
      device.close();
    }
  });

  test('a write past threadgroup memory through &tg[i] names kernel, binding, offset and line', () => {
    const { device, pipeline } = setup();
    try {
      const out = device.alloc('f32', [64]);
      const enc = device.encoder();
      enc.dispatch(pipeline('tg_addr_past_end'), { buffers: { 0: out }, threadgroupMemory: { 0: 64 * 4 } },
        [1, 1, 1], [64, 1, 1]);
      const e = errorOf(() => enc.commitAndWait());
      expect(e.kind).toBe('CommandBufferError');
      expect(e.message).toContain("kernel 'tg_addr_past_end': out-of-bounds access");
      expect(e.message).toContain('[[threadgroup(0)]]');
      expect(e.message).toContain('byte offset 256');
      expect(e.message).toContain(`${FILE}:${lineOf(SOURCE, 'MARK:tg-addr-oob')}:`);
    } finally {
      device.close();
    }
  });

  test('static threadgroup memory is known before the first dispatch and counts towards the limit', () => {
    const { device, pipeline } = setup();
    try {
      expect(pipeline('static_tg').staticThreadgroupMemory).toBe(48 + 16 + 48);
      expect(pipeline('copy2').staticThreadgroupMemory).toBe(0);
      const big = pipeline('big_static_tg');
      expect(big.staticThreadgroupMemory).toBe(6144 * 4);
      const out = device.alloc('f32', [64]);
      const enc = device.encoder();
      // 24 KiB static + 9 KiB dynamic: refused at dispatch, before any run.
      const e = errorOf(() => enc.dispatch(big, { buffers: { 0: out }, threadgroupMemory: { 0: 9 * 1024 } },
        [1, 1, 1], [64, 1, 1]));
      expect(e.kind).toBe('InvalidArgument');
      expect(e.message).toContain("kernel 'big_static_tg'");
      expect(e.message).toContain('24576 bytes static');
      // 24 KiB + 8 KiB fits.
      enc.dispatch(big, { buffers: { 0: out }, threadgroupMemory: { 0: 8 * 1024 } }, [1, 1, 1], [64, 1, 1]);
      enc.commitAndWait();
      expect((out.read() as Float32Array)[63]).toBe(2);
      expect(big.staticThreadgroupMemory).toBe(6144 * 4);
    } finally {
      device.close();
    }
  });

  describe('launch limits are enforced at dispatch', () => {
    function dispatchError(
      name: string,
      bind: (a: Buffer, b: Buffer) => Parameters<ReturnType<Device['encoder']>['dispatch']>[1],
      threads: [number, number, number],
    ): MlxError {
      const { device, pipeline } = setup();
      try {
        const a = device.alloc('f32', [4096]);
        const b = device.alloc('f32', [4096]);
        const enc = device.encoder();
        const p = pipeline(name);
        return errorOf(() => enc.dispatch(p, bind(a, b), [1, 1, 1], threads));
      } finally {
        device.close();
      }
    }

    test('1025 threads per threadgroup', () => {
      const e = dispatchError('copy2', (a, b) => ({ buffers: { 0: a, 1: b }, threadgroupMemory: { 0: 16 } }),
        [1025, 1, 1]);
      // Refused by Encoder.dispatch from the pipeline's limit, before the
      // emulator's own check (native/emu/tests/runtime covers that one).
      expect(e.kind).toBe('InvalidArgument');
      expect(e.message).toContain('copy2');
      expect(e.message).toContain('1025');
      expect(e.message).toContain('1024');
    });

    test('32 KiB + 4 bytes of threadgroup memory', () => {
      const e = dispatchError('copy2', (a, b) => ({ buffers: { 0: a, 1: b }, threadgroupMemory: { 0: 32768 + 4 } }),
        [32, 1, 1]);
      expect(e.kind).toBe('InvalidArgument');
      expect(e.message).toContain("kernel 'copy2'");
      expect(e.message).toContain('32768');
    });

    test('an unbound buffer', () => {
      const e = dispatchError('copy2', (a) => ({ buffers: { 0: a }, threadgroupMemory: { 0: 16 } }), [32, 1, 1]);
      expect(e.kind).toBe('InvalidArgument');
      expect(e.message).toContain("kernel 'copy2': [[buffer(1)]] is not bound");
    });

    test('a threadgroup buffer without a length', () => {
      const e = dispatchError('copy2', (a, b) => ({ buffers: { 0: a, 1: b } }), [32, 1, 1]);
      expect(e.kind).toBe('InvalidArgument');
      expect(e.message).toContain("kernel 'copy2': [[threadgroup(0)]] has no threadgroup memory length");
    });
  });

  test('a compile error cites the .metal file and line', () => {
    const bad = `#include <metal_stdlib>
using namespace metal;

kernel void broken(device float* out [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  out[gid] = undefined_value; // MARK:compile-error
}
`;
    const device = Device.open({ backend: 'emu' });
    try {
      const e = errorOf(() => device.compile(bad, { name: 'broken.metal' }));
      expect(e.kind).toBe('ShaderCompilationError');
      expect(e.message).toContain(`broken.metal:${lineOf(bad, 'MARK:compile-error')}:`);
      expect(e.message).toContain('undefined_value');
    } finally {
      device.close();
    }
  });

  test('an unknown kernel name is KernelNotFound', () => {
    const { device, pipeline } = setup();
    try {
      const e = errorOf(() => pipeline('no_such_kernel'));
      expect(e.kind).toBe('KernelNotFound');
      expect(e.message).toContain('no_such_kernel');
    } finally {
      device.close();
    }
  });

  test('bad emulator options are rejected', () => {
    const device = Device.open({ backend: 'emu' });
    try {
      expect(errorOf(() => device.setOption('schedule', 'chaotic')).kind).toBe('InvalidArgument');
      expect(errorOf(() => device.setOption('seed', '-1')).kind).toBe('InvalidArgument');
      expect(errorOf(() => device.setOption('speed', 'fast')).kind).toBe('InvalidArgument');
    } finally {
      device.close();
    }
  });
});

// The runtime's own C++ tests (scheduler, C ABI) build two executables, which
// takes a while on a small machine: they run under CI, or when asked for.
const runtimeTests = process.env.CI !== undefined || process.env.MLX_NATIVE_EMU_RUNTIME_TESTS === '1';
describe.if(runtimeTests)('emu runtime C++ tests', () => {
  test('native/emu/tests/runtime/run.sh', () => {
    const script = join(import.meta.dir, '..', 'native', 'emu', 'tests', 'runtime', 'run.sh');
    const r = spawnSync('bash', [script], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`run.sh exited with ${r.status}:\n${r.stdout}\n${r.stderr}`);
    expect(r.stdout).toContain('0 failures');
  }, 600_000);
});
