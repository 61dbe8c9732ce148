// Kernel faults and runaway dispatches on the emulator: each is an error of
// the dispatch, never of the process, and the device keeps working after it.
//
// - A synchronous signal raised by kernel code (SIGFPE, SIGILL, SIGTRAP,
//   SIGABRT, as SIGSEGV/SIGBUS already were) fails the commit with
//   CommandBufferError naming the signal, the kernel and the thread.
// - The time limit (option timeout_ms) ends a dispatch within twice its
//   value, whatever the kernel does: an endless loop that keeps calling the
//   out-of-bounds hook or spends its time in libm, a grid of 2^32
//   threadgroups, a dispatch waiting behind another for the workers.
// - Grids too large to index are refused at dispatch.
//
// After each failure a good dispatch on the same device and encoder must give
// the right output. Every case runs under both schedules.

import { describe, expect, test } from 'bun:test';
import { Device, MlxError, type Encoder, type Library } from '../ts/index.ts';
import { backendAbsence, EMU_RANDOM_SEED, errorOf } from './helpers.ts';

const FILE = 'emu_faults.metal';

const SOURCE = `#include <metal_stdlib>
using namespace metal;

// out[i] = a[i] / b[i]. The operands come from buffers, so the compiler
// cannot fold or remove the division.
kernel void int_divide(device int* out [[buffer(0)]],
                   device const int* a [[buffer(1)]],
                   device const int* b [[buffer(2)]],
                   uint gid [[thread_position_in_grid]]) {
  out[gid] = a[gid] / b[gid];
}

// The thread whose index is which[0] stops at a trap instruction.
kernel void trap_at(device uint* out [[buffer(0)]],
                    device const uint* which [[buffer(1)]],
                    uint gid [[thread_position_in_grid]]) {
  if (gid == which[0]) __builtin_trap();
  out[gid] = gid;
}

// The thread whose index is which[0] stops at a breakpoint.
kernel void debugtrap_at(device uint* out [[buffer(0)]],
                         device const uint* which [[buffer(1)]],
                         uint gid [[thread_position_in_grid]]) {
  if (gid == which[0]) __builtin_debugtrap();
  out[gid] = gid;
}

// The thread whose index is which[0] calls abort().
kernel void abort_at(device uint* out [[buffer(0)]],
                     device const uint* which [[buffer(1)]],
                     uint gid [[thread_position_in_grid]]) {
  if (gid == which[0]) __builtin_abort();
  out[gid] = gid;
}

// Loops until stop[0] is nonzero (it never is), writing past the end of out
// on every iteration: each write goes through the out-of-bounds hook.
kernel void oob_forever(device uint* out [[buffer(0)]],
                        device const uint* stop [[buffer(1)]],
                        uint gid [[thread_position_in_grid]]) {
  for (uint i = 0; stop[0] == 0u; ++i) out[gid + 4096u + (i & 1023u)] = i;
}

// Loops until stop[0] is nonzero (it never is), spending most of its time in
// libm: the watchdog abandons a thread only at an instruction of the kernel's
// own library, so it must catch this one in the few instructions between calls.
kernel void libm_forever(device float* out [[buffer(0)]],
                         device const uint* stop [[buffer(1)]],
                         uint gid [[thread_position_in_grid]]) {
  float x = float(gid);
  while (stop[0] == 0u) x = precise::sin(x) + precise::cos(x * 1.0001f) + precise::exp(-x);
  out[gid] = x;
}

kernel void mark_first(device uint* out [[buffer(0)]],
                       uint gid [[thread_position_in_grid]]) {
  if (gid == 0u) out[0] = 7u;
}

kernel void fill_index(device uint* out [[buffer(0)]],
                       uint gid [[thread_position_in_grid]]) {
  out[gid] = gid * 3u + 1u;
}
`;


async function asyncErrorOf(p: Promise<void>): Promise<MlxError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof MlxError) return e;
    throw e;
  }
  throw new Error('expected an MlxError, none was thrown');
}

const N = 64;
const GOOD = Array.from({ length: N }, (_, i) => i * 3 + 1);

/** A good dispatch on the same device and encoder after a failed one: it runs and its output is right. */
function expectStillWorks(device: Device, lib: Library, enc: Encoder): void {
  const out = device.alloc('u32', [N]);
  enc.dispatch(lib.pipeline('fill_index'), { buffers: [out] }, [2, 1, 1], [N / 2, 1, 1]);
  enc.commitAndWait();
  expect(Array.from(out.read() as Uint32Array)).toEqual(GOOD);
  out.release();
}

const absent = backendAbsence('emu');
const SCHEDULES: Record<string, Record<string, string>> = {
  sequential: { schedule: 'sequential' },
  random: { schedule: 'random', seed: EMU_RANDOM_SEED },
};

for (const [schedule, options] of Object.entries(SCHEDULES)) {
  describe.if(absent === null)(`emu faults [${schedule}]`, () => {
    function open(timeoutMs = '20000'): { device: Device; lib: Library } {
      const device = Device.open({ backend: 'emu' });
      for (const [k, v] of Object.entries(options)) device.setOption(k, v);
      device.setOption('timeout_ms', timeoutMs);
      return { device, lib: device.compile(SOURCE, { name: FILE }) };
    }

    /** Runs `kernel` over 64 threads (2 threadgroups of 32) and returns the commit's error. */
    function faultOf(device: Device, lib: Library, enc: Encoder, kernel: string, inputs: Int32Array[]): MlxError {
      const out = device.alloc('i32', [N]);
      const bufs = inputs.map((a) => device.upload('i32', [a.length], a));
      enc.dispatch(lib.pipeline(kernel), { buffers: [out, ...bufs] }, [2, 1, 1], [N / 2, 1, 1]);
      const e = errorOf(() => enc.commitAndWait());
      for (const b of [out, ...bufs]) b.release();
      return e;
    }

    const x64 = process.arch === 'x64';

    // aarch64 integer division does not trap (it returns 0): x86-64 only.
    test.if(x64)('integer division by zero fails the dispatch, not the process', () => {
      const { device, lib } = open();
      try {
        const enc = device.encoder();
        const a = Int32Array.from({ length: N }, (_, i) => 100 + i);
        const b = Int32Array.from({ length: N }, (_, i) => (i === 37 ? 0 : 1 + (i % 5)));
        const e = faultOf(device, lib, enc, 'int_divide', [a, b]);
        expect(e.kind).toBe('CommandBufferError');
        expect(e.message).toContain("kernel 'int_divide': integer division by zero");
        expect(e.message).toContain('SIGFPE');
        expect(e.message).toContain('thread (5,0,0) of threadgroup (1,0,0)');
        expectStillWorks(device, lib, enc);
      } finally {
        device.close();
      }
    });

    test.if(x64)('INT_MIN / -1 fails the dispatch, not the process', () => {
      const { device, lib } = open();
      try {
        const enc = device.encoder();
        const a = Int32Array.from({ length: N }, (_, i) => (i === 9 ? -0x80000000 : i));
        const b = Int32Array.from({ length: N }, (_, i) => (i === 9 ? -1 : 1));
        const e = faultOf(device, lib, enc, 'int_divide', [a, b]);
        expect(e.kind).toBe('CommandBufferError');
        expect(e.message).toContain("kernel 'int_divide': integer division by zero or overflow");
        expect(e.message).toContain('thread (9,0,0) of threadgroup (0,0,0)');
        expectStillWorks(device, lib, enc);
      } finally {
        device.close();
      }
    });

    // __builtin_trap is ud2 on x86-64 (SIGILL) and brk on aarch64 (SIGTRAP).
    test('__builtin_trap fails the dispatch, not the process', () => {
      const { device, lib } = open();
      try {
        const enc = device.encoder();
        const e = faultOf(device, lib, enc, 'trap_at', [Int32Array.of(40)]);
        expect(e.kind).toBe('CommandBufferError');
        expect(e.message).toContain(x64 ? "kernel 'trap_at': illegal instruction (SIGILL" : "kernel 'trap_at': trap (SIGTRAP");
        expect(e.message).toContain('thread (8,0,0) of threadgroup (1,0,0)');
        expectStillWorks(device, lib, enc);
      } finally {
        device.close();
      }
    });

    test('__builtin_debugtrap (SIGTRAP) fails the dispatch, not the process', () => {
      const { device, lib } = open();
      try {
        const enc = device.encoder();
        const e = faultOf(device, lib, enc, 'debugtrap_at', [Int32Array.of(3)]);
        expect(e.kind).toBe('CommandBufferError');
        expect(e.message).toContain("kernel 'debugtrap_at': trap (SIGTRAP");
        expect(e.message).toContain('thread (3,0,0) of threadgroup (0,0,0)');
        expectStillWorks(device, lib, enc);
      } finally {
        device.close();
      }
    });

    test('abort() fails the dispatch, not the process, and may happen again', () => {
      const { device, lib } = open();
      try {
        const enc = device.encoder();
        for (const which of [63, 0]) {
          const e = faultOf(device, lib, enc, 'abort_at', [Int32Array.of(which)]);
          expect(e.kind).toBe('CommandBufferError');
          expect(e.message).toContain("kernel 'abort_at': abort (SIGABRT");
          expect(e.message).toContain(`thread (${which % 32},0,0) of threadgroup (${which >> 5},0,0)`);
          expectStillWorks(device, lib, enc);
        }
      } finally {
        device.close();
      }
    });

    // The watchdog must never abandon a thread inside the out-of-bounds hook,
    // which takes the error slot's lock and allocates: a thread abandoned
    // holding a lock hangs the commit (or corrupts the heap). One timed run at
    // 300 ms, then 20 runs at 30 ms, each a chance for the signal to land there.
    test('an endless loop of out-of-bounds writes ends at the time limit (300 ms, within 600 ms), 21 times', async () => {
      const { device, lib } = open('300');
      try {
        const enc = device.encoder();
        const out = device.alloc('u32', [N]);
        const stop = device.alloc('u32', [1]);
        const p = lib.pipeline('oob_forever');
        enc.dispatch(p, { buffers: [out, stop] }, [4, 1, 1], [32, 1, 1]);
        const t0 = performance.now();
        const e = await asyncErrorOf(enc.commit());
        const ms = performance.now() - t0;
        expect(e.kind).toBe('CommandBufferError');
        expect(e.message).toContain("kernel 'oob_forever': the dispatch did not finish within 300 ms");
        expect(ms).toBeGreaterThanOrEqual(290);
        expect(ms).toBeLessThan(600);
        expectStillWorks(device, lib, enc);
        device.setOption('timeout_ms', '30');
        const t1 = performance.now();
        for (let run = 0; run < 20; run++) {
          enc.dispatch(p, { buffers: [out, stop] }, [4, 1, 1], [32, 1, 1]);
          const e30 = errorOf(() => enc.commitAndWait());
          expect({ run, message: e30.message.includes("kernel 'oob_forever': the dispatch did not finish within 30 ms") })
            .toEqual({ run, message: true });
        }
        expect(performance.now() - t1).toBeLessThan(20 * 60);
        // Released only now: a buffer collected during an async commit would
        // be freed under the running kernel.
        out.release();
        stop.release();
        expectStillWorks(device, lib, enc);
      } finally {
        device.close();
      }
    }, 4000);

    test('an endless loop that spends its time in libm ends at the time limit (100 ms, within 200 ms), 5 times', () => {
      const { device, lib } = open('100');
      try {
        const enc = device.encoder();
        const out = device.alloc('f32', [N]);
        const stop = device.alloc('u32', [1]);
        for (let run = 0; run < 5; run++) {
          enc.dispatch(lib.pipeline('libm_forever'), { buffers: [out, stop] }, [2, 1, 1], [32, 1, 1]);
          const t0 = performance.now();
          const e = errorOf(() => enc.commitAndWait());
          const ms = Math.round(performance.now() - t0);
          expect(e.kind).toBe('CommandBufferError');
          expect(e.message).toContain("kernel 'libm_forever': the dispatch did not finish within 100 ms");
          expect(e.message).toContain('was running kernel code');
          expect({ run, ms, within: ms < 200 }).toEqual({ run, ms, within: true });
        }
        out.release();
        stop.release();
        expectStillWorks(device, lib, enc);
      } finally {
        device.close();
      }
    });

    test('a grid of 2^32 threadgroups ends at the time limit (500 ms, within 1 s)', async () => {
      const { device, lib } = open('500');
      try {
        const enc = device.encoder();
        const out = device.alloc('u32', [1]);
        enc.dispatch(lib.pipeline('mark_first'), { buffers: [out] }, [65536, 65536, 1], [1, 1, 1]);
        const t0 = performance.now();
        const e = await asyncErrorOf(enc.commit());
        const ms = performance.now() - t0;
        expect(e.kind).toBe('CommandBufferError');
        expect(e.message).toContain("kernel 'mark_first': the dispatch did not finish within 500 ms");
        expect(ms).toBeGreaterThanOrEqual(490);
        expect(ms).toBeLessThan(1000);
        expect((out.read() as Uint32Array)[0]).toBe(7);
        expectStillWorks(device, lib, enc);
      } finally {
        device.close();
      }
    }, 3000);

    // B's time runs from its commit, also while it waits for the workers
    // that A holds: B must end at its own limit, not when A ends.
    test('a dispatch queued behind another ends at its own time limit (150 ms, within 300 ms)', async () => {
      const { device, lib } = open('600');
      try {
        const p = lib.pipeline('oob_forever');
        const outA = device.alloc('u32', [N]);
        const outB = device.alloc('u32', [N]);
        const stop = device.alloc('u32', [1]);
        const encA = device.encoder();
        encA.dispatch(p, { buffers: [outA, stop] }, [64, 1, 1], [32, 1, 1]);
        device.setOption('timeout_ms', '150');
        const encB = device.encoder();
        encB.dispatch(p, { buffers: [outB, stop] }, [4, 1, 1], [32, 1, 1]);
        const t0 = performance.now();
        const a = asyncErrorOf(encA.commit()).then((e) => ({ e, ms: performance.now() - t0 }));
        await Bun.sleep(50); // A holds every worker by now
        const t1 = performance.now();
        const b = asyncErrorOf(encB.commit()).then((e) => ({ e, ms: performance.now() - t1 }));
        const [ra, rb] = await Promise.all([a, b]);
        expect(rb.e.message).toContain("kernel 'oob_forever': the dispatch did not finish within 150 ms");
        expect(rb.ms).toBeLessThan(300);
        expect(ra.e.message).toContain("kernel 'oob_forever': the dispatch did not finish within 600 ms");
        expect(ra.ms).toBeGreaterThanOrEqual(590);
        expect(ra.ms).toBeLessThan(1200);
        for (const b of [outA, outB, stop]) b.release();
        expectStillWorks(device, lib, encA);
        expectStillWorks(device, lib, encB);
      } finally {
        device.close();
      }
    }, 4000);

    test('a grid of [2^31, 2^31, 4] threadgroups (2^64) is refused at dispatch', () => {
      const { device, lib } = open();
      try {
        const enc = device.encoder();
        const out = device.alloc('u32', [1]);
        const e = errorOf(() => enc.dispatch(lib.pipeline('mark_first'), { buffers: [out] }, [2 ** 31, 2 ** 31, 4], [1, 1, 1]));
        expect(e.kind).toBe('InvalidArgument');
        expect(e.message).toContain("kernel 'mark_first'");
        expect(e.message).toContain('(2147483648,2147483648,4) threadgroups');
        expect(e.message).toContain('2^63');
        expectStillWorks(device, lib, enc);
      } finally {
        device.close();
      }
    });

    test('threads per grid past 2^32-1 on an axis (thread_position_in_grid is a uint) is refused at dispatch', () => {
      const { device, lib } = open();
      try {
        const enc = device.encoder();
        const out = device.alloc('u32', [1]);
        const e = errorOf(() => enc.dispatch(lib.pipeline('mark_first'), { buffers: [out] }, [1, 2 ** 30, 1], [1, 4, 1]));
        expect(e.kind).toBe('InvalidArgument');
        expect(e.message).toContain("kernel 'mark_first'");
        expect(e.message).toContain('threads per grid on axis y must be at most 4294967295, 32 bits (got 1073741824 threadgroups x 4 threads = 4294967296)');
        expectStillWorks(device, lib, enc);
      } finally {
        device.close();
      }
    });
  });
}
