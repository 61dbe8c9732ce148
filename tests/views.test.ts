// Views: a Buffer over a byte range of another buffer's allocation, bound
// wherever a buffer is taken. The ops see a view as any buffer (dtype, shape,
// element count); dispatch binds the allocation's handle at the view's offset.
// Every op binding views at non-zero offsets is part of each family's op
// contract (tests/op-contract.ts).

import { expect, test } from 'bun:test';
import { Device } from '../ts/index.ts';
import { l2Norm } from '../ts/ops/index.ts';
import { l2NormRef } from '../ts/reference/index.ts';
import { describeBackends, expectMlxError, maxRelErr, randomArray, rng, TOL } from './helpers.ts';

describeBackends('views', ({ device }) => {
  test('view and slice: ranges, shapes, host reads and writes at their offset', () => {
    const dev = device();
    using b = dev.upload('f32', [8, 12], Array.from({ length: 96 }, (_, i) => i));
    const rows = b.slice(2, 5);
    expect(rows.isView).toBe(true);
    expect(rows.root).toBe(b);
    expect(rows.byteOffset).toBe(2 * 48);
    expect(rows.shape).toEqual([3, 12]);
    expect(Array.from(rows.readNumbers())).toEqual(Array.from({ length: 36 }, (_, i) => 24 + i));
    const u = b.view('u32', [4], 16);
    expect(u.elementCount).toBe(4);
    rows.writeNumbers(new Float64Array(36).fill(-1));
    const all = b.readNumbers();
    expect(all[23]).toBe(23);
    expect(all[24]).toBe(-1);
    expect(all[59]).toBe(-1);
    expect(all[60]).toBe(60);
    // A view of a view starts at the sum of the offsets.
    const inner = rows.slice(1, 2);
    expect(inner.byteOffset).toBe(3 * 48);
    expect(inner.root).toBe(b);
  });

  test('refusals: outside the buffer, misaligned, bad shapes and dtypes, after release', () => {
    const dev = device();
    const b = dev.alloc('f32', [10, 4]);
    expectMlxError(() => b.view('f32', [41]), 'Buffer.view: byteOffset + the view');
    expectMlxError(() => b.view('f32', [4], 160), 'Buffer.view: byteOffset + the view');
    expectMlxError(() => b.view('f32', [2], 8), 'multiple of 16 bytes');
    expectMlxError(() => b.view('f32', [2], -16), 'byteOffset must be an integer >= 0');
    expectMlxError(() => b.view('f32', [0]), 'shape[0] must be a positive integer');
    expectMlxError(() => b.view('f32', 3 as unknown as number[]), 'shape must be an array');
    expectMlxError(() => b.view('f64' as never, [1]), 'dtype must be one of');
    expectMlxError(() => b.slice(3, 3), '0 <= start < end <= 10');
    expectMlxError(() => b.slice(0, 11), '0 <= start < end <= 10');
    // Rows of 12 bytes: row 1 starts at byte 12, not a multiple of 16.
    using odd = dev.alloc('f32', [4, 3]);
    expectMlxError(() => odd.slice(1), 'multiple of 16 bytes');
    // A huge shape is refused without computing past the buffer's size.
    expectMlxError(() => b.view('f32', [2 ** 40, 2 ** 40, 2 ** 40]), 'Buffer.view: byteOffset + the view');
    const v = b.slice(4);
    b.release();
    expect(v.released).toBe(true);
    expectMlxError(() => v.read(), 'after release');
    expectMlxError(() => v.slice(1), 'after release');
    using enc = dev.encoder();
    using y = dev.alloc('f32', [6, 4]);
    expectMlxError(() => l2Norm(enc, { x: v, y, rows: 6, dim: 4 }), 'l2_norm: x must be a live Buffer');
    // Releasing a view leaves its allocation usable.
    using c = dev.alloc('f32', [8]);
    const cv = c.view('f32', [4], 16);
    cv.release();
    expect(cv.released).toBe(true);
    expect(c.released).toBe(false);
    c.read();
  });

  test('ops read and write views at non-zero offsets; bytes around them stay untouched', async () => {
    const dev = device();
    const rows = 6, dim = 100, r = rng(21);
    const x = randomArray(r, rows * dim, -2, 2);
    // x sits in rows 3..8 of a 16-row allocation, y in rows 9..14 of another,
    // both surrounded by sentinels.
    using xa = dev.upload('f32', [16, dim], new Float64Array(16 * dim).fill(7));
    using ya = dev.upload('f32', [16, dim], new Float64Array(16 * dim).fill(9));
    const xv = xa.slice(3, 3 + rows);
    xv.writeNumbers(x);
    const yv = ya.slice(9, 9 + rows);
    yv.fill(Number.NaN);
    using enc = dev.encoder();
    l2Norm(enc, { x: xv, y: yv, rows, dim });
    await enc.commit();
    expect(maxRelErr(yv.readNumbers(), l2NormRef(x, rows, dim, 1e-6))).toBeLessThan(TOL.f32);
    const ys = ya.readNumbers();
    for (let i = 0; i < 16 * dim; i++) if (i < 9 * dim || i >= 15 * dim) expect(ys[i]).toBe(9);
    const xs = xa.readNumbers();
    for (let i = 0; i < 16 * dim; i++) if (i < 3 * dim || i >= 9 * dim) expect(xs[i]).toBe(7);
  });

  test('a view alone keeps its allocation alive through collection; work on a view holds the allocation', async () => {
    const dev = device();
    const rows = 4, dim = 64;
    const x = randomArray(rng(22), rows * dim, -1, 1);
    const v = (() => {
      const a = dev.alloc('f32', [2 * rows, dim]);
      const s = a.slice(rows);
      s.writeNumbers(x);
      return s;
    })();
    for (let i = 0; i < 3; i++) {
      Bun.gc(true);
      await new Promise((res) => setTimeout(res, 0));
    }
    expect(Array.from(v.readNumbers())).toEqual(Array.from(Float32Array.from(x)));
    using y = dev.alloc('f32', [rows, dim]);
    using enc = dev.encoder();
    l2Norm(enc, { x: v, y, rows, dim });
    const pending = enc.commit();
    // Work in flight on an allocation forbids writes through any view of it,
    // and reads where the work writes it.
    expectMlxError(() => v.root.fill(0), 'must not be bound to a commit still running');
    expectMlxError(() => v.writeNumbers(x), 'must not be bound to a commit still running');
    expect(v.read().length).toBe(rows * dim);
    expectMlxError(() => y.read(), 'must not be written by a commit still running');
    await pending;
    expect(maxRelErr(y.readNumbers(), l2NormRef(x, rows, dim, 1e-6))).toBeLessThan(TOL.f32);
  });

  test('aliasing rules see views: in place over the same range is allowed, a partial overlap is not', () => {
    const dev = device();
    using a = dev.alloc('f32', [8, 64]);
    using enc = dev.encoder();
    l2Norm(enc, { x: a.slice(0, 4), y: a.slice(0, 4), rows: 4, dim: 64 }); // in place, as y = x
    expectMlxError(() => l2Norm(enc, { x: a.slice(0, 4), y: a.slice(2, 6), rows: 4, dim: 64 }), 'got a view overlapping x');
    l2Norm(enc, { x: a.slice(0, 4), y: a.slice(4, 8), rows: 4, dim: 64 }); // disjoint
  });

  test('barriers between dispatches on two views of one allocation (whole allocations overlap)', () => {
    const dev = device();
    using a = dev.alloc('f32', [8, 64]);
    using enc = dev.encoder();
    l2Norm(enc, { x: a.slice(0, 4), y: a.slice(4, 8), rows: 4, dim: 64 });
    l2Norm(enc, { x: a.slice(4, 8), y: a.slice(4, 8), rows: 4, dim: 64 });
    expect(enc.barrierCount).toBe(1);
  });

  test('host arrays of a view are windows of the allocation, detached with it', () => {
    const dev = device();
    if (!dev.limits.sharedMemory) {
      expect(dev.alloc('f32', [4]).slice(0, 2).hostView()).toBeNull();
      return;
    }
    const a = dev.upload('f32', [8, 4], Array.from({ length: 32 }, (_, i) => i));
    const w = a.slice(2, 4).hostView() as Float32Array;
    expect(Array.from(w)).toEqual(Array.from({ length: 8 }, (_, i) => 8 + i));
    w[0] = -5;
    expect(a.readNumbers()[8]).toBe(-5);
    a.release();
    expect(w.length).toBe(0);
    const own = Device.open({ backend: dev.backend });
    const w2 = own.alloc('f32', [8]).view('f32', [4], 16).hostView() as Float32Array;
    expect(w2.length).toBe(4);
    own.close();
    expect(w2.length).toBe(0);
  });
});
