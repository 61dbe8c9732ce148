// Record once, replay many (issue 16, item 4): a replayable encoder's first
// commit keeps its recording; replay() runs the same launches, barriers and
// buffers again, patch() changes only the inline bytes of recorded
// dispatches. Replays equal fresh commits of the same work, patches take
// effect, every refusal (TypeScript and the C ABI's) is tested, buffers the
// caller released stay alive for the recording until the encoder is
// released, and replays add no barrier.

import { expect, test } from 'bun:test';
import type { Pointer } from 'bun:ffi';
import { Device, MlxError, patchPlan, type Buffer, type Encoder, type Library } from '../ts/index.ts';
import { elementwiseAdd, kvCacheCopySeqDual, l2Norm, planKvCacheCopySeqDual } from '../ts/ops/index.ts';
import { l2NormRef } from '../ts/reference/index.ts';
import { describeBackends, expectInvalidParts, expectMlxError, maxRelErr, randomArray, rng, TOL } from './helpers.ts';
import { ADD_K_AND_SPIN } from './replay-kernels.ts';

const SOURCE = ADD_K_AND_SPIN;
const SPIN_ITERATIONS = 60_000_000;

function compile(dev: Device): Library {
  const cuda = dev.backend === 'cuda';
  return dev.compile(cuda ? SOURCE.cuda : SOURCE.metal, { name: cuda ? 'replay_test.cu' : 'replay_test.metal' });
}

const f32 = (v: number): Float32Array => Float32Array.of(v);
const u32 = (v: number): Uint32Array => Uint32Array.of(v);

const ROWS = 5;
const DIM = 300; // more than one threadgroup of add_k (128 threads), not a multiple of it

/** l2Norm of x into y, then y + k into z (a barrier between): the work replayed. */
function recordChain(enc: Encoder, lib: Library, x: Buffer, y: Buffer, z: Buffer, k: number): void {
  l2Norm(enc, { x, y, rows: ROWS, dim: DIM });
  const n = ROWS * DIM;
  enc.dispatch(lib.pipeline('add_k'), { buffers: [y, z], bytes: [, , f32(k), u32(n)] }, [Math.ceil(n / 128), 1, 1], [128, 1, 1]);
}

function chainRef(x: Float64Array, k: number): Float64Array {
  return l2NormRef(x, ROWS, DIM, 1e-6).map((v) => Math.fround(Math.fround(v) + Math.fround(k)));
}

/** The raw C ABI of an encoder (for the backend's own refusals). */
function raw(enc: Encoder): { sym: Encoder['_state']['sym']; h: Pointer } {
  return { sym: enc._state.sym, h: enc._h as Pointer };
}

const MSG = new Uint8Array(1024);
function rawMessage(status: number): string {
  expect(status).toBe(1); // MLXN_ERR_INVALID_ARGUMENT
  return new TextDecoder().decode(MSG.subarray(0, MSG.indexOf(0)));
}

describeBackends('replay', ({ device }) => {
  // cuda launches the registry's kernels with programmatic dependent launch (each waits in mlxn_entry for the
  // kernel ahead of it); a kernel the caller compiled launches in plain stream order. A long chain of dependent
  // adds over a buffer large enough that each kernel runs for microseconds, with the caller's add_k between them,
  // must count exactly (small integers in f32), with the option on and off, committed and replayed.
  test('cuda: dependent kernels see each other\'s writes with programmatic dependent launch on and off', () => {
    const dev = device();
    if (dev.backend !== 'cuda') {
      expect(() => dev.setOption('pdl', 'on')).toThrow(MlxError);
      return;
    }
    const n = 1 << 22, steps = 48;
    using lib = compile(dev);
    using x = dev.upload('f32', [n], new Float32Array(n).fill(1));
    using y = dev.alloc('f32', [n]);
    try {
      for (const pdl of ['on', 'off', 'on']) {
        dev.setOption('pdl', pdl);
        using enc = dev.encoder({ replayable: true });
        for (let i = 0; i < steps; i++) {
          elementwiseAdd(enc, { a: y, b: x, output: y });
          if (i % 8 === 7) enc.dispatch(lib.pipeline('add_k'), { buffers: [y, y], bytes: [, , f32(2), u32(n)] }, [n / 128, 1, 1], [128, 1, 1]);
        }
        const want = steps + 2 * (steps / 8);
        for (let round = 0; round < 3; round++) {
          y.fill(0);
          if (round === 0) enc.commitAndWait();
          else enc.replayAndWait();
          const got = y.read();
          let bad = 0;
          for (let i = 0; i < n; i++) if (got[i] !== want) bad++;
          expect(`pdl ${pdl} round ${round}: ${bad} wrong`).toBe(`pdl ${pdl} round ${round}: 0 wrong`);
        }
      }
      expect(() => dev.setOption('pdl', 'maybe')).toThrow(/option pdl must be on or off \(got 'maybe'\)/);
    } finally {
      dev.setOption('pdl', 'on');
    }
  });

  test('replays equal fresh commits of the same work, for new inputs each step', async () => {
    const dev = device();
    const r = rng(1);
    using lib = compile(dev);
    using x = dev.alloc('f32', [ROWS, DIM]);
    using y = dev.alloc('f32', [ROWS, DIM]);
    using z = dev.alloc('f32', [ROWS, DIM]);
    using y2 = dev.alloc('f32', [ROWS, DIM]);
    using z2 = dev.alloc('f32', [ROWS, DIM]);
    using enc = dev.encoder({ replayable: true });
    recordChain(enc, lib, x, y, z, 0.5);
    for (let step = 0; step < 6; step++) {
      const xs = randomArray(r, ROWS * DIM, -2, 2);
      x.writeNumbers(xs);
      y.fill(Number.NaN);
      z.fill(Number.NaN);
      if (step === 0) await enc.commit();
      else if (step % 2 === 1) await enc.replay();
      else enc.replayAndWait();
      using fresh = dev.encoder();
      z2.fill(Number.NaN);
      recordChain(fresh, lib, x, y2, z2, 0.5);
      fresh.commitAndWait();
      const got = z.read();
      expect(Array.from(got)).toEqual(Array.from(z2.read()));
      expect(maxRelErr(z.readNumbers(), chainRef(xs, 0.5))).toBeLessThan(TOL.f32);
    }
  });

  test('patched bytes take effect on the next replays, and only there', () => {
    const dev = device();
    const r = rng(2);
    using lib = compile(dev);
    const n = 1;
    const xs = randomArray(r, DIM, -1, 1);
    using x = dev.upload('f32', [DIM], xs);
    using y = dev.alloc('f32', [DIM]);
    using enc = dev.encoder({ replayable: true });
    const at = enc.dispatchCount;
    const pipe = lib.pipeline('add_k');
    const grid = [Math.ceil(DIM / 128), 1, 1] as const, threads = [128, 1, 1] as const;
    enc.dispatch(pipe, { buffers: [x, y], bytes: [, , f32(1), u32(DIM)] }, grid, threads);
    expect(at).toBe(0);
    expect(enc.dispatchCount).toBe(n);
    enc.commitAndWait();
    expect(Array.from(y.read())).toEqual(Array.from(xs, (v) => Math.fround(Math.fround(v) + 1)));
    for (const k of [2.5, -3, 0.25]) {
      enc.patch(at, [{ pipeline: pipe, bindings: { buffers: [x, y], bytes: [, , f32(k), u32(DIM)] }, grid, threads }]);
      y.fill(Number.NaN);
      enc.replayAndWait();
      expect(Array.from(y.read())).toEqual(Array.from(xs, (v) => Math.fround(Math.fround(v) + k)));
    }
    // A shorter n, patched: the elements past it keep their poison.
    enc.patch(at, [{ pipeline: pipe, bindings: { buffers: [x, y], bytes: [, , f32(1), u32(7)] }, grid, threads }]);
    y.fill(Number.NaN);
    enc.replayAndWait();
    const got = y.read();
    for (let i = 0; i < 7; i++) expect(got[i]).toBe(Math.fround(Math.fround(xs[i]!) + 1));
    for (let i = 7; i < DIM; i++) expect(got[i]).toBeNaN();
  });

  // replayStart and wait: one encoder runs while the host patches another (CausalLM's decode steps do so).
  test('replayStart returns with the replay in flight; the host patches another encoder meanwhile; wait settles it', async () => {
    const dev = device();
    const r = rng(4);
    using lib = compile(dev);
    const xs = randomArray(r, DIM, -1, 1);
    using x = dev.upload('f32', [DIM], xs);
    using y0 = dev.alloc('f32', [DIM]);
    using y1 = dev.alloc('f32', [DIM]);
    const pipe = lib.pipeline('add_k');
    const grid = [Math.ceil(DIM / 128), 1, 1] as const, threads = [128, 1, 1] as const;
    const encs = [y0, y1].map((y, i) => {
      const e = dev.encoder({ replayable: true });
      e.dispatch(pipe, { buffers: [x, y], bytes: [, , f32(i), u32(DIM)] }, grid, threads);
      e.commitAndWait();
      return e;
    });
    try {
      const [a, b] = encs as [Encoder, Encoder];
      a.wait(); // nothing in flight: returns
      for (const k of [1.5, -2, 4]) {
        y0.fill(Number.NaN);
        a.replayStart();
        // a writes y0: the host may not read it, nor patch a, until wait().
        expect(() => y0.read()).toThrow(MlxError);
        expect(() => a.patch(0, [{ pipeline: pipe, bindings: { buffers: [x, y0], bytes: [, , f32(k), u32(DIM)] }, grid, threads }])).toThrow(MlxError);
        b.patch(0, [{ pipeline: pipe, bindings: { buffers: [x, y1], bytes: [, , f32(k), u32(DIM)] }, grid, threads }]);
        a.wait();
        expect(a.gpuTimeNs).toBeGreaterThanOrEqual(0);
        b.replayAndWait();
        expect(Array.from(y1.read())).toEqual(Array.from(xs, (v) => Math.fround(Math.fround(v) + k)));
        expect(Array.from(y0.read())).toEqual(Array.from(xs, (v) => Math.fround(Math.fround(v) + 0)));
      }
      // The work of replay() is its promise's to settle.
      const pending = a.replay();
      expectInvalidParts(() => a.wait(), 'Encoder.wait', "replayStart()'s");
      await pending;
    } finally {
      for (const e of encs) e.release();
    }
  });

  test("an op's plan for new arguments patches its recorded dispatches (kv_cache_copy's position)", () => {
    const dev = device();
    const r = rng(3);
    const heads = 2, d = 64, capacity = 9;
    using k = dev.alloc('f32', [1, heads, d]);
    using v = dev.alloc('f32', [1, heads, d]);
    using ck = dev.alloc('f32', [heads, capacity, d]);
    using cv = dev.alloc('f32', [heads, capacity, d]);
    ck.fill(Number.NaN);
    cv.fill(Number.NaN);
    const args = (position: number) => ({ srcK: k, srcV: v, cacheK: ck, cacheV: cv, nHeads: heads, headDim: d, capacity, seqPosStart: position, nTokens: 1 });
    using enc = dev.encoder({ replayable: true });
    const at = enc.dispatchCount;
    kvCacheCopySeqDual(enc, args(0));
    const rows: Float64Array[] = [];
    for (let pos = 0; pos < capacity; pos++) {
      const ks = randomArray(r, heads * d, -1, 1), vs = randomArray(r, heads * d, -1, 1);
      rows.push(ks);
      k.writeNumbers(ks);
      v.writeNumbers(vs);
      if (pos === 0) enc.commitAndWait();
      else {
        patchPlan(enc, at, planKvCacheCopySeqDual(args(pos), dev.limits, dev));
        enc.replayAndWait();
      }
    }
    const cache = ck.readNumbers();
    for (let pos = 0; pos < capacity; pos++) {
      for (let h = 0; h < heads; h++) {
        const got = cache.subarray((h * capacity + pos) * d, (h * capacity + pos + 1) * d);
        expect(Array.from(got)).toEqual(Array.from(rows[pos]!.subarray(h * d, (h + 1) * d)).map(Math.fround));
      }
    }
    // Two tokens need another grid: refused, nothing patched.
    using k2 = dev.alloc('f32', [2, heads, d]);
    using v2 = dev.alloc('f32', [2, heads, d]);
    expectMlxError(() => patchPlan(enc, at, planKvCacheCopySeqDual({ ...args(0), nTokens: 2, srcK: k2, srcV: v2 }, dev.limits, dev)),
      'Encoder.patch: dispatch 0');
  });

  test('refusals of the TypeScript API', async () => {
    const dev = device();
    using lib = compile(dev);
    using x = dev.alloc('f32', [DIM]);
    using y = dev.alloc('f32', [DIM]);
    using y2 = dev.alloc('f32', [DIM]);
    const pipe = lib.pipeline('add_k');
    const grid = [3, 1, 1] as const, threads = [128, 1, 1] as const;
    const bindings = (k: number, out = y, n = DIM) => ({ buffers: [x, out], bytes: [, , f32(k), u32(n)] });
    const again = (b = bindings(1), g: readonly [number, number, number] = grid) => [{ pipeline: pipe, bindings: b, grid: g, threads }];

    using plain = dev.encoder();
    plain.dispatch(pipe, bindings(1), grid, threads);
    expectMlxError(() => plain.replayAndWait(), 'Encoder.replay: the encoder must be replayable');
    expectMlxError(() => plain.patch(0, again()), 'Encoder.patch: the encoder must be replayable');
    plain.commitAndWait();

    using enc = dev.encoder({ replayable: true });
    expect(enc.replayable).toBe(true);
    enc.dispatch(pipe, bindings(1), grid, threads);
    expectMlxError(() => enc.replayAndWait(), 'Encoder.replay: the recording must have been committed once (got a recording never committed)');
    enc.commitAndWait();
    expectMlxError(() => enc.dispatch(pipe, bindings(1), grid, threads), 'Encoder.dispatch: the encoder must be recording (got a replayable encoder whose recording was committed');
    expectMlxError(() => enc.barrier(), 'Encoder.barrier: the encoder must be recording');
    expectMlxError(() => enc.commitAndWait(), 'Encoder.commit: the encoder must be recording');
    expectMlxError(() => enc.atomic(() => 0), 'Encoder.atomic: the encoder must be recording');
    expectMlxError(() => enc.patch(1, again()), 'Encoder.patch: dispatches [first, first + 1) must lie within the 1 recorded (got first = 1)');
    expectMlxError(() => enc.patch(-1, again()), '(got first = -1)');
    expectMlxError(() => enc.patch(0, again(bindings(1, y2))), 'Encoder.patch: dispatch 0 (add_k) must differ from the recorded one only in the contents of its bytes bindings (got another buffer, offset, bytes length or threadgroup memory (record 1))');
    expectMlxError(() => enc.patch(0, again(bindings(1), [4, 1, 1])), '(got another grid)');
    expectMlxError(() => enc.patch(0, again({ buffers: [x, y], bytes: [, , f32(1), new Uint32Array(2)] })), '(got another block length (bindings or bytes lengths))');
    expectMlxError(() => enc.patch(0, again({ buffers: [x, y], bytes: [, , , u32(DIM), f32(1)] })), 'Encoder.patch: dispatch 0 (add_k)');

    // In flight: replay and patch refused until the work has ended.
    using yl = dev.alloc('f32', [1]);
    using slow = dev.encoder({ replayable: true });
    slow.dispatch(lib.pipeline('spin'), { buffers: [yl], bytes: [, u32(SPIN_ITERATIONS)] }, [1, 1, 1], [1, 1, 1]);
    slow.commitAndWait();
    const running = slow.replay();
    expectMlxError(() => slow.replayAndWait(), 'Encoder.replay: the encoder must have no work in flight');
    expectMlxError(() => slow.patch(0, [{ pipeline: lib.pipeline('spin'), bindings: { buffers: [yl], bytes: [, u32(1)] }, grid: [1, 1, 1], threads: [1, 1, 1] }]),
      'Encoder.patch: the encoder must have no work in flight');
    // Host access to what the replay binds follows commit's rules.
    expectMlxError(() => yl.read(), '');
    expectMlxError(() => yl.fill(0), '');
    await running;
    expect(Number.isFinite(yl.read()[0]!)).toBe(true);
  });

  test("refusals of the C ABI (mlxn_encoder_replay, mlxn_encoder_patch_bytes)", () => {
    const dev = device();
    using lib = compile(dev);
    using x = dev.alloc('f32', [DIM]);
    using y = dev.alloc('f32', [DIM]);
    const pipe = lib.pipeline('add_k');
    const cap = MSG.length;

    using plain = dev.encoder();
    let { sym, h } = raw(plain);
    expect(rawMessage(sym.mlxn_encoder_replay(h, MSG, cap))).toBe(
      'mlxn_encoder_replay: encoder must be replayable (made by mlxn_encoder_create_replayable) (got an encoder made by mlxn_encoder_create)');
    expect(rawMessage(sym.mlxn_encoder_patch_bytes(h, 0, 2, f32(1), 4, MSG, cap))).toContain(
      'mlxn_encoder_patch_bytes: encoder must be replayable');

    using enc = dev.encoder({ replayable: true });
    ({ sym, h } = raw(enc));
    enc.dispatch(pipe, { buffers: [x, y], bytes: [, , f32(1), u32(DIM)] }, [3, 1, 1], [128, 1, 1]);
    expect(rawMessage(sym.mlxn_encoder_replay(h, MSG, cap))).toBe(
      'mlxn_encoder_replay: encoder must have committed its recording once (got a recording never committed)');
    enc.commitAndWait();
    expect(rawMessage(sym.mlxn_encoder_patch_bytes(h, 1, 2, f32(1), 4, MSG, cap))).toBe(
      'mlxn_encoder_patch_bytes: dispatch_index must be below 1, the recorded dispatch count (got 1)');
    expect(rawMessage(sym.mlxn_encoder_patch_bytes(h, 2 ** 40, 2, f32(1), 4, MSG, cap))).toContain('(got 1099511627776)');
    expect(rawMessage(sym.mlxn_encoder_patch_bytes(h, 0, 1, f32(1), 4, MSG, cap))).toBe(
      "mlxn_encoder_patch_bytes: binding_index must be a bytes binding of dispatch 0 (kernel 'add_k': 2, 3) (got 1)");
    expect(rawMessage(sym.mlxn_encoder_patch_bytes(h, 0, 2, new Float32Array(2), 8, MSG, cap))).toBe(
      'mlxn_encoder_patch_bytes: len must be 4, the recorded length (got 8)');
    expect(rawMessage(sym.mlxn_encoder_patch_bytes(h, 0, 2, null, 4, MSG, cap))).toBe(
      'mlxn_encoder_patch_bytes: data must be non-NULL (got NULL)');
    const block = new Uint8Array(48);
    expect(rawMessage(sym.mlxn_encoder_barrier(h, MSG, cap))).toContain('barrier: the encoder must be recording (got a replayable encoder whose recording was committed');
    expect(rawMessage(sym.mlxn_encoder_commit(h, MSG, cap))).toContain('commit: the encoder must be recording');
    expect(rawMessage(sym.mlxn_encoder_dispatch(h, block, 48, MSG, cap))).toContain('dispatch: the encoder must be recording');
    expect(sym.mlxn_encoder_patch_bytes(h, 0, 2, f32(7), 4, MSG, cap)).toBe(0);
    expect(sym.mlxn_encoder_replay(h, MSG, cap)).toBe(0);
    expect(sym.mlxn_encoder_wait(h, MSG, cap)).toBe(0);
    expect(y.read()[0]).toBe(Math.fround(x.read()[0]! + 7));

    // While a replay runs.
    using yl = dev.alloc('f32', [1]);
    using slow = dev.encoder({ replayable: true });
    slow.dispatch(lib.pipeline('spin'), { buffers: [yl], bytes: [, u32(SPIN_ITERATIONS)] }, [1, 1, 1], [1, 1, 1]);
    slow.commitAndWait();
    const s = raw(slow);
    expect(s.sym.mlxn_encoder_replay(s.h, MSG, cap)).toBe(0);
    expect(rawMessage(s.sym.mlxn_encoder_replay(s.h, MSG, cap))).toBe(
      'mlxn_encoder_replay: encoder must have no work running (got a commit or replay still running; wait first)');
    expect(rawMessage(s.sym.mlxn_encoder_patch_bytes(s.h, 0, 1, u32(1), 4, MSG, cap))).toBe(
      'mlxn_encoder_patch_bytes: encoder must have no work running (got a commit or replay still running; wait first)');
    expect(s.sym.mlxn_encoder_wait(s.h, MSG, cap)).toBe(0);
  });

  test('buffers and pipelines released by the caller stay alive for the recording until the encoder is released', async () => {
    const dev = device();
    const r = rng(4);
    const xs = randomArray(r, ROWS * DIM, -2, 2);
    using z = dev.alloc('f32', [ROWS, DIM]);
    const before = dev.liveHandles;
    let enc: Encoder | null = dev.encoder({ replayable: true });
    (() => {
      // Everything but z and the encoder is released before the first commit.
      const lib = compile(dev);
      const x = dev.upload('f32', [ROWS, DIM], xs);
      const y = dev.alloc('f32', [ROWS, DIM]);
      recordChain(enc, lib, x, y, z, 2);
      x.release();
      y.release();
      lib.release();
    })();
    for (let step = 0; step < 5; step++) {
      for (let i = 0; i < 3; i++) {
        Bun.gc(true);
        await new Promise((res) => setTimeout(res, 0));
      }
      // Fresh allocations take any memory freed too early, and overwrite it.
      const churn: Buffer[] = [];
      for (let i = 0; i < 16; i++) churn.push(dev.upload('f32', [ROWS, DIM], new Float64Array(ROWS * DIM).fill(-7e30)));
      for (const b of churn) b.release();
      z.fill(Number.NaN);
      if (step === 0) await enc.commit();
      else await enc.replay();
      expect(maxRelErr(z.readNumbers(), chainRef(xs, 2))).toBeLessThan(TOL.f32);
    }
    enc.release();
    enc = null;
    expect(dev.liveHandles).toBe(before);
  });

  test('replays add no barrier: the count stays what recording placed, as for a plain encoder', () => {
    const dev = device();
    using lib = compile(dev);
    using x = dev.alloc('f32', [ROWS, DIM]);
    using y = dev.alloc('f32', [ROWS, DIM]);
    using z = dev.alloc('f32', [ROWS, DIM]);
    using plain = dev.encoder();
    recordChain(plain, lib, x, y, z, 1);
    using enc = dev.encoder({ replayable: true });
    recordChain(enc, lib, x, y, z, 1);
    const placed = enc.barrierCount;
    expect(placed).toBe(plain.barrierCount);
    expect(placed).toBeGreaterThan(0);
    plain.commitAndWait();
    enc.commitAndWait();
    for (let i = 0; i < 3; i++) enc.replayAndWait();
    expect(enc.barrierCount).toBe(placed);
  });

  test('Device.encoder refuses a replayable encoder of a closed device like any other', () => {
    const dev = Device.open({ backend: device().backend });
    dev.close();
    expect(() => dev.encoder({ replayable: true })).toThrow(MlxError);
  });
});
