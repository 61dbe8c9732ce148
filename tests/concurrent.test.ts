// The cuda backend runs the dispatches between two barriers (a stretch) side
// by side on streams beside the encoder's own, and joins them at the next
// barrier (native/cuda/src/backend.cpp launch_all; the device option
// `concurrent`, on by default). These tests hold it to both halves of that:
// every barrier still orders what comes after it behind everything before,
// committed and replayed (a CUDA graph with the same forks and joins), and
// the dispatches of one stretch really do run at the same time. Other
// backends refuse the option; the emulator's random schedule and Metal's
// concurrent encoder already treat a stretch as unordered.

import { expect, test } from 'bun:test';
import { MlxError, type Library } from '../ts/index.ts';
import { elementwiseAdd } from '../ts/ops/index.ts';
import { describeBackends } from './helpers.ts';

// await_flag: one thread waits until flag[0] is set or `limit_ns` of %globaltimer pass, then writes
// seen[0] = 1 (set while it waited) or 2 (it gave up). raise_flag sets flag[0].
const FLAGS = `extern "C" __global__ void await_flag(const unsigned* flag, unsigned* seen, const unsigned long long* limit_ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const volatile unsigned* f = flag;
  unsigned got = 0;
  for (;;) {
    if (*f != 0u) { got = 1; break; }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > *limit_ns) { got = 2; break; }
  }
  seen[0] = got;
}
extern "C" __global__ void raise_flag(unsigned* flag) {
  *(volatile unsigned*)flag = 1u;
  __threadfence();
}
`;

describeBackends('concurrent stretches', ({ device }) => {
  test('cuda: a barrier orders each stretch of side-by-side dispatches after the one before, on and off, committed and replayed', () => {
    const dev = device();
    if (dev.backend !== 'cuda') {
      expect(() => dev.setOption('concurrent', 'on')).toThrow(MlxError);
      return;
    }
    // Four running sums of x (one stretch of four adds a step) and a fifth that adds the first sum after each
    // step (its own stretch, behind the four): small integers in f32, so every element must be exact. A side
    // stream that did not wait for the stretch before, or a barrier that did not wait for the side streams,
    // leaves sums short.
    const n = 1 << 20, steps = 24;
    using x = dev.upload('f32', [n], new Float32Array(n).fill(1));
    const ys = [0, 1, 2, 3].map(() => dev.alloc('f32', [n]));
    using s = dev.alloc('f32', [n]);
    try {
      for (const mode of ['on', 'off', 'on']) {
        dev.setOption('concurrent', mode);
        using enc = dev.encoder({ replayable: true });
        for (let i = 0; i < steps; i++) {
          for (const y of ys) elementwiseAdd(enc, { a: y, b: x, output: y });
          elementwiseAdd(enc, { a: s, b: ys[0]!, output: s });
        }
        // A barrier before each step's adds and before each step's fifth: stretches of four, then of one.
        expect(enc.dispatchCount).toBe(5 * steps);
        expect(enc.barrierCount).toBe(2 * steps - 1);
        const want = [steps, steps, steps, steps, (steps * (steps + 1)) / 2];
        for (let round = 0; round < 3; round++) {
          for (const y of ys) y.fill(0);
          s.fill(0);
          if (round === 0) enc.commitAndWait();
          else enc.replayAndWait();
          const wrong = [...ys, s].map((b, k) => {
            let bad = 0;
            for (const v of b.readNumbers()) if (v !== want[k]) bad++;
            return bad;
          });
          expect(`concurrent ${mode} round ${round}: wrong ${wrong.join(', ')}`).toBe(`concurrent ${mode} round ${round}: wrong 0, 0, 0, 0, 0`);
        }
      }
      expect(() => dev.setOption('concurrent', 'maybe')).toThrow(/option concurrent must be on or off \(got 'maybe'\)/);
    } finally {
      dev.setOption('concurrent', 'on');
      for (const y of ys) y.release();
    }
  });

  test('cuda: the dispatches of one stretch run at the same time where the option is on, in order where it is off', () => {
    const dev = device();
    if (dev.backend !== 'cuda') {
      expect(() => dev.setOption('concurrent', 'off')).toThrow(/unknown (emu )?option 'concurrent'/);
      return;
    }
    // await_flag, then raise_flag, with no barrier between them (the caller places barriers): run side by
    // side, the first sees the second's flag; in order, it gives up after the limit and the flag comes later.
    using lib: Library = dev.compile(FLAGS, { name: 'concurrent_test.cu' });
    using flag = dev.alloc('u32', [1]);
    using seen = dev.alloc('u32', [1]);
    const limit = BigUint64Array.of(200_000_000n); // 200 ms
    try {
      for (const [mode, want] of [['on', 1], ['off', 2], ['on', 1]] as const) {
        dev.setOption('concurrent', mode);
        using enc = dev.encoder({ autoBarriers: false, replayable: true });
        enc.dispatch(lib.pipeline('await_flag'), { buffers: [flag, seen], bytes: [, , limit] }, [1, 1, 1], [1, 1, 1]);
        enc.dispatch(lib.pipeline('raise_flag'), { buffers: [flag] }, [1, 1, 1], [1, 1, 1]);
        expect(enc.barrierCount).toBe(0);
        for (let round = 0; round < 2; round++) {
          flag.fill(0);
          seen.fill(0);
          if (round === 0) enc.commitAndWait();
          else enc.replayAndWait();
          expect(`${mode} ${round}: seen ${seen.read()[0]}, flag ${flag.read()[0]}`).toBe(`${mode} ${round}: seen ${want}, flag 1`);
        }
      }
    } finally {
      dev.setOption('concurrent', 'on');
    }
  });
});

