// Encoder.flush (mlx_native.h mlxn_encoder_flush): the dispatches recorded so
// far start while the recording goes on (cuda launches them at once; metal and
// the emulator start the whole recording at its commit). These tests hold it
// to its contract on every backend: a recording flushed anywhere (after every
// dispatch, in the middle of a stretch between barriers, with nothing new,
// right after a barrier) computes exactly what one commit of it computes;
// what flushed dispatches bind counts as in flight for host access from the
// flush until the commit's work ends (or the encoder is released); and the
// refusals name the call and the reason.

import { expect, test } from 'bun:test';
import { MlxError } from '../ts/index.ts';
import { elementwiseAdd } from '../ts/ops/index.ts';
import { describeBackends, expectMlxError } from './helpers.ts';

describeBackends('flush', ({ device }) => {
  test('a recording flushed along the way computes what one commit of it computes', () => {
    const dev = device();
    // Four running sums of x (a stretch of four independent adds a step) and a fifth that adds the first sum after
    // each step, as tests/concurrent.test.ts: small integers in f32, so every element must be exact. The flushes
    // land after every dispatch, inside a stretch, twice in a row, and right after a barrier.
    // 40 steps of five dispatches: their inline bytes outgrow cuda's first 4 KiB staging buffer mid-recording, while
    // flushed kernels still read it (it is kept until the commit's work ends).
    const n = dev.backend === 'cuda' ? 1 << 20 : 4096, steps = 40;
    using x = dev.upload('f32', [n], new Float32Array(n).fill(1));
    const ys = [0, 1, 2, 3].map(() => dev.alloc('f32', [n]));
    using s = dev.alloc('f32', [n]);
    try {
      const plans: { name: string; at: (step: number, k: number) => boolean }[] = [
        { name: 'never', at: () => false },
        { name: 'after every dispatch', at: () => true },
        { name: 'inside each stretch of four', at: (_, k) => k === 1 },
        { name: 'after every seventh step', at: (step, k) => k === 4 && step % 7 === 6 },
      ];
      const want = [steps, steps, steps, steps, (steps * (steps + 1)) / 2];
      for (const plan of plans) {
        for (const y of ys) y.fill(0);
        s.fill(0);
        using enc = dev.encoder();
        enc.flush(); // nothing recorded yet: nothing to start
        for (let step = 0; step < steps; step++) {
          for (const [k, y] of ys.entries()) {
            elementwiseAdd(enc, { a: y, b: x, output: y });
            if (plan.at(step, k)) enc.flush();
          }
          elementwiseAdd(enc, { a: s, b: ys[0]!, output: s });
          if (plan.at(step, 4)) {
            enc.flush();
            enc.flush(); // nothing new since the last one
          }
        }
        expect(enc.dispatchCount).toBe(5 * steps);
        expect(enc.barrierCount).toBe(2 * steps - 1);
        enc.commitAndWait();
        const wrong = [...ys, s].map((b, k) => {
          let bad = 0;
          for (const v of b.readNumbers()) if (v !== want[k]) bad++;
          return bad;
        });
        expect(`flush ${plan.name}: wrong ${wrong.join(', ')}`).toBe(`flush ${plan.name}: wrong 0, 0, 0, 0, 0`);
        if (dev.backend !== 'emu') expect(enc.gpuTimeNs).toBeGreaterThan(0);
        // The encoder records afresh after the commit, flushes included.
        elementwiseAdd(enc, { a: s, b: x, output: s });
        enc.flush();
        enc.commitAndWait();
        expect(s.readNumbers()[n - 1]).toBe(want[4]! + 1);
      }
    } finally {
      for (const y of ys) y.release();
    }
  });

  test('what flushed dispatches bind is in flight for the host until the commit ends or the encoder goes', async () => {
    const dev = device();
    const n = 1024;
    using a = dev.upload('f32', [n], new Float32Array(n).fill(2));
    using b = dev.upload('f32', [n], new Float32Array(n).fill(3));
    using out = dev.alloc('f32', [n]);
    using later = dev.alloc('f32', [n]);
    for (const end of ['commit', 'release'] as const) {
      out.fill(0);
      later.fill(0);
      const enc = dev.encoder();
      elementwiseAdd(enc, { a, b, output: out });
      // Recorded, not flushed: the host may still write what it reads (the dispatch sees it at the commit).
      a.fill(2);
      enc.flush();
      expectMlxError(() => a.fill(1), 'Buffer.fill');
      expectMlxError(() => out.read(), 'must not be written by a commit still running');
      expect(b.readNumbers()[0]).toBe(3); // only read by the flushed work
      // `b` is held since the flush; a dispatch after it writes `b`, so the commit counts `b` as written too.
      elementwiseAdd(enc, { a: out, b: a, output: later });
      elementwiseAdd(enc, { a: later, b: a, output: b });
      later.fill(0); // recorded after the flush, not flushed: still the host's until the commit
      if (end === 'release') {
        enc.release();
        // Released without a commit: nothing stays in flight. (What was flushed ran on cuda, which waited for it
        // at the release; metal and the emulator never started it.)
        a.fill(2);
        expect([dev.backend === 'cuda' ? 5 : 0]).toContain(out.readNumbers()[0]!);
        b.fill(3);
        continue;
      }
      const done = enc.commit();
      expectMlxError(() => b.read(), 'must not be written by a commit still running');
      expectMlxError(() => later.read(), 'must not be written by a commit still running');
      expectMlxError(() => a.fill(1), 'Buffer.fill');
      await done;
      expect(out.readNumbers()[0]).toBe(5);
      expect(later.readNumbers()[0]).toBe(7);
      expect(b.readNumbers()[0]).toBe(9);
      b.fill(3);
      a.fill(2);
      enc.release();
    }
  });

  test('refusals: a replayable encoder, inside atomic(), with a commit in flight, after release, the C ABI', async () => {
    const dev = device();
    const n = 256;
    using x = dev.upload('f32', [n], new Float32Array(n).fill(1));
    using y = dev.alloc('f32', [n]);
    {
      using enc = dev.encoder({ replayable: true });
      elementwiseAdd(enc, { a: x, b: x, output: y });
      expectMlxError(() => enc.flush(), 'Encoder.flush: the encoder must not be replayable (its recording is captured whole at its first commit) (got a replayable encoder)');
      enc.commitAndWait(); // the refusal recorded nothing and broke nothing
      expect(y.readNumbers()[0]).toBe(2);
    }
    {
      using enc = dev.encoder();
      enc.atomic(() => {
        elementwiseAdd(enc, { a: x, b: x, output: y });
        expectMlxError(() => enc.flush(), 'Encoder.flush: must be called outside atomic() (got a call inside an atomic section)');
      });
      elementwiseAdd(enc, { a: y, b: x, output: y });
      const done = enc.commit();
      expectMlxError(() => enc.flush(), 'Encoder.flush: the encoder has a commit in flight');
      await done;
      expect(y.readNumbers()[0]).toBe(3);
      enc.release();
      expect(() => enc.flush()).toThrow(MlxError);
    }
    // The C ABI's own checks, which the TypeScript ones stand in front of (the same words on every backend).
    using kept = dev.encoder({ replayable: true });
    const sym = kept._state.sym;
    const msg = new Uint8Array(512);
    const text = () => new TextDecoder().decode(msg.subarray(0, msg.indexOf(0)));
    expect(sym.mlxn_encoder_flush(null, msg, msg.length)).not.toBe(0);
    expect(text()).toContain('flush');
    expect(sym.mlxn_encoder_flush(kept._h as never, msg, msg.length)).not.toBe(0);
    expect(text()).toBe('flush: encoder must not be replayable (its recording is captured whole at its first commit) (got a replayable encoder)');
  });
});
