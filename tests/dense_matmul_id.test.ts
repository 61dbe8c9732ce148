// dense_matmul_id: the param packer against the header and the .metal
// bindings, the launches, the reference against values by hand, every
// validation rule of each op, and parity against the float64 reference on
// every backend: the vector form in f32, f16 and bf16 at odd k (not a
// multiple of the 16-byte vector) and even, one token and several, ids past
// the experts (zeros), ids and weights as views at offsets; the matrix form
// after moe_dispatch_sort with an empty expert, one expert taking every
// pair (past a tile), k not a multiple of 8 or of the 32-wide stage; the
// fused gate/up projections (silu, gelu) in both forms over separate and
// fused [E, 2 I, k] weights; a down projection over pairs.
//
// Error measure: |got - want| / sum_k |x w| per output (dotErr; for gate/up
// the first-order bound of denseGateUpIdRef), under dotTolerance of the
// dtype (f32 sums of products of the stored values; f16 and bf16 outputs
// rounded once more, and staged as such in the matrix form's tiles), with
// f16's absolute spacing below its smallest normal as a floor.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/dense_matmul_id.metal' with { type: 'text' };
import type { Buffer, Device } from '../ts/index.ts';
import {
  DENSE_MATMUL_ID_KERNELS,
  denseGateUpMmId,
  denseGateUpMvId,
  denseIdMmCudaLaunch,
  denseIdMvCudaLaunch,
  denseMmId,
  denseMvId,
  packDenseMatmulIdParams,
  denseGateUpIdRef,
  denseMatmulIdRef,
} from '../ts/ops/dense_matmul_id.ts';
import { moeDispatchSort } from '../ts/ops/moe_dispatch.ts';
import { describeBackends, describeValidation, dotErr, dotTolerance, expectInvalid, randomArray, rng, roundedTo, run } from './helpers.ts';
import { downErrors, gateUpCasesOver, idsFor, matrixCasesOver, type IdProduct, type IdShape } from './matmul-id.ts';
import { a, buf, EW, int, opContract, out, U32, type Case } from './op-contract.ts';

describe('dense_matmul_id param packer matches the header and the .metal bindings', () => {
  test('DenseMatmulIdParams at buffer(4) of every kernel; the CUDA launches', () => {
    for (const k of DENSE_MATMUL_ID_KERNELS) {
      expect(src).toMatch(new RegExp(`kernel void ${k}\\([^{]*constant DenseMatmulIdParams&\\s+params\\s+\\[\\[buffer\\(4\\)\\]\\]`));
    }
    const p = packDenseMatmulIdParams({ m: 3, k: 2816, n: 704, nExpertUsed: 8, numExperts: 128, expertStride: 2816 * 1408, activation: 'gelu_tanh' });
    expect(Array.from(new Uint32Array(p.buffer, p.byteOffset, 7))).toEqual([3, 2816, 704, 8, 128, 2816 * 1408, 1]);
    expect(denseIdMvCudaLaunch(64, 512)).toEqual({ grid: [64 * 64, 1, 1], threads: [256, 1, 1] });
    expect(denseIdMmCudaLaunch(4096, 704, 128, true).grid).toEqual([(64 + 129) * 11, 1, 1]);
  });
});

describe('dense_matmul_id reference against values by hand', () => {
  test('two experts of one row: each pair takes its expert; gate/up with silu; an id past the experts gives zeros', () => {
    const w = [1, 2, 3, -1, 0, 2];
    const r = denseMatmulIdRef([1, 1, 1], w, [1, 0, 5], { m: 1, n: 1, k: 3, nExpertUsed: 3, numExperts: 2 });
    expect(Array.from(r.y)).toEqual([1, 6, 0]);
    const g = denseGateUpIdRef([1, 1, 1], w, [2, 2, 2, 1, 1, 1], [0], { m: 1, n: 1, k: 3, nExpertUsed: 1, numExperts: 2 }, 'silu');
    expect(g.y[0]).toBeCloseTo((6 / (1 + Math.exp(-6))) * 6, 12);
  });
});

describeValidation('dense_matmul_id validation', ({ enc, buf }) => {
  type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
  // m = 3 rows x 2 slots, 4 experts of n = 5 rows, k = 12.
  const mv = () => ({
    x: buf('bf16', 36), weight: buf('bf16', 240), ids: buf('u32', 6), output: buf('bf16', 30),
    m: 3, n: 5, k: 12, nExpertUsed: 2, numExperts: 4,
  });
  test('dense_mv_id: every rule', () => {
    const big = buf('bf16', 400);
    const cases: Case[] = [
      [{ m: 0 }, 'm', 'a positive integer', '0'],
      [{ k: 2 ** 32 }, 'k', 'at most 2^32 - 1', `${2 ** 32}`],
      [{ nExpertUsed: 0.5 }, 'nExpertUsed', 'a positive integer', '0.5'],
      [{ numExperts: 0 }, 'numExperts', 'a positive integer', '0'],
      [{ expertRows: 4 }, 'expertRows', 'at least n (5)', '4'],
      [{ expertRows: -2 }, 'expertRows', 'a positive integer', '-2'],
      [{ m: 2 ** 31, nExpertUsed: 2 }, 'm * nExpertUsed', 'at most 2^32 - 2', `${2 ** 32}`],
      [{ m: 2 ** 30, n: 64 }, 'm * nExpertUsed', 'small enough for', `${2 ** 31}`],
      [{ expertRows: 2 ** 30 }, 'expertRows * k', 'at most 2^32 - 1', `${2 ** 30 * 12}`],
      [{ x: buf('u32', 36) }, 'x.dtype', 'one of f32, f16, bf16', 'u32'],
      [{ weight: buf('f16', 240) }, 'weight.dtype', 'bf16', 'f16'],
      [{ ids: buf('i32', 6) }, 'ids.dtype', 'u32', 'i32'],
      [{ output: buf('f32', 30) }, 'output.dtype', 'bf16', 'f32'],
      [{ x: buf('bf16', 35) }, 'x.elementCount', '36', '35'],
      [{ weight: buf('bf16', 241) }, 'weight.elementCount', '240', '241'],
      [{ expertRows: 7 }, 'weight.elementCount', '312', '240'],
      [{ ids: buf('u32', 7) }, 'ids.elementCount', '6', '7'],
      [{ output: buf('bf16', 29) }, 'output.elementCount', '30', '29'],
      [{ weight: big.view('bf16', [240]), output: big.view('bf16', [30], 256) }, 'output', 'a buffer other than weight', 'a view overlapping weight'],
    ];
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => denseMvId(enc(), { ...mv(), ...m } as never), 'dense_mv_id', arg, expected, actual);
  });
  test('dense_mm_id, dense_gate_up_{mv,mm}_id', () => {
    const { ids: _, ...rest } = mv();
    const mm = () => ({ ...rest, offsets: buf('u32', 6), order: buf('u32', 6) });
    const cases: Case[] = [
      [{ x: buf('f32', 36), weight: buf('f32', 240), output: buf('f32', 30) }, 'x.dtype', 'one of f16, bf16', 'f32'],
      [{ offsets: buf('u32', 7) }, 'offsets.elementCount', '6', '7'],
      [{ order: buf('u32', 5) }, 'order.elementCount', '6', '5'],
      [{ numExperts: 2 ** 31 }, 'numExperts', 'small enough for', `${2 ** 31}`],
    ];
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => denseMmId(enc(), { ...mm(), ...m } as never), 'dense_mm_id', arg, expected, actual);
    const gu = () => {
      const { weight, ...r } = mv();
      return { ...r, gateWeight: weight, upWeight: buf('bf16', 240) };
    };
    const gcases: Case[] = [
      [{ activation: 'tanh' }, 'activation', "'silu', 'gelu_tanh' or absent", 'tanh'],
      [{ upWeight: buf('bf16', 239) }, 'upWeight.elementCount', '240', '239'],
      [{ gateWeight: buf('f32', 240) }, 'gateWeight.dtype', 'bf16', 'f32'],
      [{ upWeight: undefined }, 'upWeight', 'a Buffer', 'none'],
    ];
    for (const [m, arg, expected, actual] of gcases) {
      expectInvalid(() => denseGateUpMvId(enc(), { ...gu(), ...m } as never), 'dense_gate_up_mv_id', arg, expected, actual);
    }
    const { ids: __, ...grest } = gu();
    expectInvalid(() => denseGateUpMmId(enc(), { ...grest, offsets: buf('u32', 6), order: buf('u32', 6), activation: 'relu' } as never),
      'dense_gate_up_mm_id', 'activation', "'silu', 'gelu_tanh' or absent", 'relu');
    expectInvalid(() => denseGateUpMmId(enc(), { ...grest, offsets: buf('u32', 5), order: buf('u32', 6) } as never),
      'dense_gate_up_mm_id', 'offsets.elementCount', '6', '5');
  });
});

// ---- parity ----

type Shape = IdShape;

/** IdProduct (tests/matmul-id.ts), every operand a view at an offset of one allocation with random bytes around it. */
function checkProduct(dev: Device, ...[s, ids, form, seed, gateUp]: Parameters<IdProduct<Shape>>): number {
  const r = rng(seed);
  const { m, n, k, dt } = s;
  const pairs = m * s.nExpertUsed;
  const E = s.numExperts;
  const fused = gateUp?.fused === true;
  const expertRows = fused ? 2 * n : n;
  const viewRows = (E - 1) * expertRows + n;
  const stored = fused ? E * expertRows : viewRows;
  const size = dt === 'f32' ? 4 : 2;
  const x = roundedTo(dt, randomArray(r, m * k, -1, 1));
  const g = roundedTo(dt, randomArray(r, stored * k, -1, 1));
  const u = gateUp !== undefined && !fused ? roundedTo(dt, randomArray(r, stored * k, -1, 1)) : g;
  const al = (b: number): number => Math.ceil(b / 16) * 16;
  const bytes = 64 + al(m * k * size) + 16 + 2 * (al(stored * k * size) + 16) + al(pairs * 4) + 16;
  const root = dev.alloc('u8', [bytes + 64]);
  root.write(Uint8Array.from({ length: bytes + 64 }, () => Math.floor(r.uniform(0, 256))));
  let at = 48;
  const put = (dtype: 'f32' | 'f16' | 'bf16' | 'u32', data: ArrayLike<number>, count: number, byteShift = 0): Buffer => {
    const v = root.view(dtype, [count], at + byteShift);
    v.writeNumbers(data);
    at = al(at + byteShift + count * (dtype === 'u32' ? 4 : dtype === 'f32' ? 4 : 2)) + 16;
    return v;
  };
  const xb = put(dt, x, m * k);
  const idb = put('u32', ids, pairs);
  // The fused tensor: the gate view its first viewRows rows, the up view the same count n rows in.
  let gw: Buffer, uw: Buffer;
  if (fused) {
    const base = at;
    gw = put(dt, g.slice(0, viewRows * k), viewRows * k);
    const whole = root.view(dt, [stored * k], base);
    whole.writeNumbers(g);
    const upAt = base + n * k * size;
    if (upAt % 16 !== 0) throw new Error('test shape: the up view must start at a 16-byte boundary');
    uw = root.view(dt, [viewRows * k], upAt);
    at = al(base + stored * k * size) + 16;
  } else {
    gw = put(dt, g, viewRows * k);
    uw = gateUp !== undefined ? put(dt, u, viewRows * k) : gw;
  }
  const outRoot = dev.alloc(dt, [pairs * n + 64]);
  outRoot.fill(Number.NaN);
  const output = outRoot.view(dt, [pairs * n], 32 * size);
  const offsets = dev.alloc('u32', [E + 2]);
  const order = dev.alloc('u32', [pairs]);
  const sizes = { m, n, k, nExpertUsed: s.nExpertUsed, numExperts: E, expertRows };
  run(dev, (enc) => {
    if (form === 'matrix') moeDispatchSort(enc, { ids: idb, offsets, order, nPairs: pairs, numExperts: E });
    if (gateUp === undefined) {
      if (form === 'vector') denseMvId(enc, { x: xb, weight: gw, ids: idb, output, ...sizes });
      else denseMmId(enc, { x: xb, weight: gw, offsets, order, output, ...sizes });
    } else {
      const parts = { x: xb, gateWeight: gw, upWeight: uw, output, activation: gateUp.activation, ...sizes };
      if (form === 'vector') denseGateUpMvId(enc, { ...parts, ids: idb });
      else denseGateUpMmId(enc, { ...parts, offsets, order });
    }
  });
  const upRows = fused ? u.slice(n * k, (n + viewRows) * k) : u;
  const want = gateUp === undefined ? denseMatmulIdRef(x, g, ids, sizes) : denseGateUpIdRef(x, g, upRows, ids, sizes, gateUp.activation);
  const all = outRoot.readNumbers();
  const floor = dt === 'f16' ? 2 ** -14 : 0;
  const err = dotErr(all.slice(32, 32 + pairs * n), want.y, want.abs.map((v) => v + floor));
  const outside = [...all.slice(0, 32), ...all.slice(32 + pairs * n)].every(Number.isNaN);
  for (const b of [root, outRoot, offsets, order]) b.release();
  return outside ? err : Infinity;
}

describeBackends('dense_matmul_id parity', ({ device }) => {
  test('vector form: f32, f16, bf16; k odd and a multiple of the vector; one token and several; ids past the experts', () => {
    const dev = device();
    const over: string[] = [];
    let seed = 1;
    for (const dt of ['f32', 'f16', 'bf16'] as const) {
      for (const k of [37, 64, 200]) {
        for (const m of [1, 3]) {
          const s: Shape = { dt, m, n: 11, k, nExpertUsed: 2, numExperts: 5 };
          const ids = idsFor(rng(seed), m * 2, 5, (p) => (p === 1 ? 99 : null), true);
          const e = checkProduct(dev, s, ids, 'vector', seed++);
          if (!(e < dotTolerance(dt, k))) over.push(`${dt} k ${k} m ${m}: ${e}`);
        }
      }
    }
    expect(over).toEqual([]);
  });

  test('matrix form after moe_dispatch_sort: an empty expert, one expert taking all, k not a multiple of 8 or 32', () => {
    const dev = device();
    expect(matrixCasesOver<Shape>((...c) => checkProduct(dev, ...c), [
      ['40 tokens x top-3 of 7, k = 72', { dt: 'bf16', m: 40, n: 70, k: 72, nExpertUsed: 3, numExperts: 7 }, () => null, true, 2],
      ['one expert takes all 70 pairs, k = 45', { dt: 'f16', m: 35, n: 9, k: 45, nExpertUsed: 2, numExperts: 3 }, () => 1, false, null],
      ['one token, top-4 of 6', { dt: 'bf16', m: 1, n: 33, k: 128, nExpertUsed: 4, numExperts: 6 }, (p) => 5 - p, false, null],
    ])).toEqual([]);
  });

  test('fused gate/up (silu, gelu_tanh), vector and matrix forms, separate and fused [E, 2 I, k] weights', () => {
    const dev = device();
    expect(gateUpCasesOver<Shape>((...c) => checkProduct(dev, ...c), (form, fused): Shape => form === 'vector'
      ? { dt: fused ? 'f32' : 'bf16', m: 2, n: 24, k: 40, nExpertUsed: 4, numExperts: 6 }
      : { dt: 'f16', m: 30, n: 40, k: 64, nExpertUsed: 2, numExperts: 5 })).toEqual([]);
  });

  test('a down projection over pairs (m = tokens x top-k, nExpertUsed = 1; Gemma 4-like k = 704 trimmed rows)', () => {
    const dev = device();
    const s: Shape = { dt: 'bf16', m: 3 * 8, n: 40, k: 704, nExpertUsed: 1, numExperts: 16 };
    for (const e of downErrors<Shape>((...c) => checkProduct(dev, ...c), s)) expect(e).toBeLessThan(dotTolerance('bf16', 704));
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('dense_matmul_id', [
  // The ids, offsets and order are tables.
  // m = 3 rows x 2 slots, 4 experts of n = 5 rows, k = 12.
  ...(['denseMvId', 'denseMmId', 'denseGateUpMvId', 'denseGateUpMmId'] as const).map((fn): Case => {
    const gu = fn.includes('GateUp');
    const mm = fn.includes('Mm');
    const dts = mm ? (['f16', 'bf16'] as const) : EW;
    const op = { denseMvId: 'dense_mv_id', denseMmId: 'dense_mm_id', denseGateUpMvId: 'dense_gate_up_mv_id', denseGateUpMmId: 'dense_gate_up_mm_id' }[fn];
    return {
      fn, op,
      keys: {
        x: buf(dts), ...(gu ? { gateWeight: buf(dts), upWeight: buf(dts) } : { weight: buf(dts) }),
        ...(mm ? { offsets: buf(U32, { table: true }), order: buf(U32, { table: true }) } : { ids: buf(U32, { table: true }) }),
        output: out(dts), m: int, n: int, k: int, nExpertUsed: int, numExperts: int, expertRows: { kind: 'int?' },
        ...(gu ? { activation: { kind: 'enum', values: [undefined, 'silu', 'gelu_tanh'] } } : {}),
      },
      make: (d) => ({
        x: a(d, 'f16', 36), ...(gu ? { gateWeight: a(d, 'f16', 240), upWeight: a(d, 'f16', 240) } : { weight: a(d, 'f16', 240) }),
        ...(mm ? { offsets: a(d, 'u32', 6), order: a(d, 'u32', 6) } : { ids: a(d, 'u32', 6) }), output: a(d, 'f16', 30),
        m: 3, n: 5, k: 12, nExpertUsed: 2, numExperts: 4, ...(gu ? { activation: 'silu' } : {}),
      }),
      fill: (args) => {
        if (args.ids !== undefined) (args.ids as Buffer).writeNumbers([3, 0, 1, 9, 2, 2]);
        if (args.offsets !== undefined) (args.offsets as Buffer).writeNumbers([0, 1, 2, 4, 5, 6]);
        if (args.order !== undefined) (args.order as Buffer).writeNumbers([1, 4, 2, 5, 0, 3]);
      },
    };
  }),
]);
