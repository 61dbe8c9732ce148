// l2_norm: the reference against hand-computed values, the param packer
// against the .metal struct, every validation rule, and parity on every
// backend for f32, f16 and bf16 rows of many lengths, in place, and at odd
// threadgroup sizes.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/l2_norm.metal' with { type: 'text' };
import {
  L2_NORM_DEFAULT_EPS,
  L2_NORM_FAMILY,
  L2_NORM_KERNELS,
  L2_NORM_PARAMS_LAYOUT,
  L2_NORM_SOURCES,
  l2Norm,
  l2NormCudaLaunch,
  l2NormThreadgroup,
  packL2NormParams,
  l2NormRef,
} from '../ts/ops/l2_norm.ts';
import { describeBackends, maxRelErr, randomArray, rng, TOL, TARGET_LIMITS, expectInvalid, describeValidation } from './helpers.ts';
import * as l2Ops from '../ts/ops/l2_norm.ts';
import * as mlx from '../ts/index.ts';
import { a, buf, int, opContract, out } from './op-contract.ts';

describe('l2_norm param packer matches the .metal declaration', () => {
  test('L2NormParams: fields, offsets, bound at buffer(2) by every kernel; packed values', () => {
    for (const k of L2_NORM_KERNELS) {
      expect(src).toMatch(new RegExp(`kernel void ${k}\\([^{]*constant L2NormParams&\\s+params\\s+\\[\\[buffer\\(2\\)\\]\\]`));
    }
    const bytes = packL2NormParams({ rows: 7, dim: 4099 });
    const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    expect(bytes.byteLength).toBe(12);
    expect([v.getUint32(0, true), v.getUint32(4, true), v.getFloat32(8, true)]).toEqual([7, 4099, Math.fround(L2_NORM_DEFAULT_EPS)]);
    expect(new DataView(packL2NormParams({ rows: 1, dim: 1, eps: 0.5 }).buffer).getFloat32(8, true)).toBe(0.5);
  });
  test('threadgroup: min(256, nextPow2(dim)) threads, one float per simdgroup in 16-byte units', () => {
    expect(l2NormThreadgroup(1, TARGET_LIMITS.metal)).toEqual({ threads: 1, sharedBytes: 16 });
    expect(l2NormThreadgroup(100, TARGET_LIMITS.metal)).toEqual({ threads: 128, sharedBytes: 16 });
    expect(l2NormThreadgroup(5000, TARGET_LIMITS.metal)).toEqual({ threads: 256, sharedBytes: 32 });
  });
  test('CUDA: rowLaunch, sized to the row (rows of 8 lanes for heads of 128; a block per row otherwise)', () => {
    const c = TARGET_LIMITS.cuda;
    // Qwen3.6's q and k of a 4096-token prompt: [4096 x 16, 128] f32, 8 lanes of 4 vectors, 32 rows a block.
    expect(l2NormCudaLaunch(65536, 128, 'f32', c)).toEqual({ grid: [2048, 1, 1], threads: [8, 32, 1] });
    expect(l2NormCudaLaunch(64, 128, 'bf16', c)).toEqual({ grid: [2, 1, 1], threads: [8, 32, 1] });
    // 6 rows: no whole-warp row count divides them: a block per row (of one vector a thread, with fewer rows than SMs).
    expect(l2NormCudaLaunch(6, 64, 'f32', c, 132)).toEqual({ grid: [6, 1, 1], threads: [32, 1, 1], threadgroupMemory: [16] });
    expect(l2NormCudaLaunch(3, 2000, 'bf16', c)).toEqual({ grid: [3, 1, 1], threads: [64, 1, 1], threadgroupMemory: [16] });
    expect(l2NormCudaLaunch(64, 128, 'f32', { ...c, simdWidth: 64 })).toBeNull();
  });
});

describe('l2_norm reference against hand-computed values', () => {
  test('[3, 4] -> [0.6, 0.8]; eps inside the square root', () => {
    const unit = l2NormRef([3, 4, 0, 0], 2, 2, 0);
    expect(unit[0]).toBeCloseTo(0.6, 15);
    expect(unit[1]).toBeCloseTo(0.8, 15);
    const y = l2NormRef([3, 4], 1, 2, 11);
    expect(y[0]).toBeCloseTo(3 / 6, 15);
    expect(y[1]).toBeCloseTo(4 / 6, 15);
    expect([...l2NormRef([0, 0], 1, 2, 1e-6)]).toEqual([0, 0]);
  });
});

describeValidation('l2_norm validation', ({ enc, buf }) => {
  test('every rule', () => {
    const base = () => ({ rows: 3, dim: 10, x: buf('f32', 30), y: buf('f32', 30) });
    type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
    const cases: Case[] = [
      [{ rows: 0 }, 'rows', 'a positive integer', '0'],
      [{ dim: 2.5 }, 'dim', 'a positive integer', '2.5'],
      [{ rows: 2 ** 32 }, 'rows', 'at most 2^32 - 1 (4294967295)', '4294967296'],
      [{ dim: 2 ** 33 }, 'dim', 'at most 2^32 - 1 (4294967295)', `${2 ** 33}`],
      [{ eps: -1 }, 'eps', 'a finite number >= 0', '-1'],
      [{ eps: Number.NaN }, 'eps', 'a finite number >= 0', 'NaN'],
      [{ rows: 2 ** 30, dim: 2 ** 30 }, 'rows * dim', 'a product of integers at most 2^53 - 1', `${2 ** 30} * ${2 ** 30}`],
      [{ x: buf('u16', 30) }, 'x.dtype', 'one of f32, f16, bf16', 'u16'],
      [{ y: buf('f16', 30) }, 'y.dtype', 'f32', 'f16'],
      [{ x: buf('f32', 31) }, 'x.elementCount', '30', '31'],
      [{ y: buf('f32', 10) }, 'y.elementCount', '30', '10'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => l2Norm(enc(), { ...base(), ...m }), 'l2_norm', arg, expected, actual);
    }
  });
});

// Outputs are x times one f32 factor: no cancellation, so errors are
// elementwise relative, under the output dtype's tolerance. The floor is 1e-3
// of the largest |value|, and for f16 at least 2^-14, its smallest normal:
// below it f16 spacing is absolute (2^-24), and long rows (4099 elements)
// put outputs there.
const F16_MIN_NORMAL = 2 ** -14;
function l2Err(dtype: 'f32' | 'f16' | 'bf16', got: ArrayLike<number>, want: ArrayLike<number>): number {
  let scale = 0;
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]!));
  const floor = Math.max(1e-3 * scale, dtype === 'f16' ? F16_MIN_NORMAL : 0, Number.MIN_VALUE);
  return maxRelErr(got, want, floor);
}

describeBackends('l2_norm parity', ({ device }) => {
  /** Rows: one element, under, at and past a simdgroup and the 256-thread group, head sizes 64 / 128 / 256. */
  const SHAPES: readonly [rows: number, dim: number][] = [
    [1, 1], [4, 31], [6, 64], [3, 128], [2, 255], [2, 256], [3, 257], [2, 1000], [1, 4099], [40, 64], [64, 128],
  ];
  for (const dtype of ['f32', 'f16', 'bf16'] as const) {
    test(`${dtype}, eps 1e-6 and 0.5, a zero row`, () => {
      const dev = device();
      const over: string[] = [];
      let worst = 0;
      for (const [rows, dim] of SHAPES) {
        const data = randomArray(rng(rows * 1009 + dim), rows * dim, -3, 3);
        // The last row of a multi-row case is zero: eps keeps it finite (zero).
        if (rows > 1) data.fill(0, (rows - 1) * dim);
        const x = dev.upload(dtype, [rows, dim], data);
        const y = dev.alloc(dtype, [rows, dim]);
        for (const eps of [1e-6, 0.5]) {
          y.fill(Number.NaN);
          const enc = dev.encoder();
          l2Norm(enc, { x, y, rows, dim, eps });
          enc.commitAndWait();
          enc.release();
          const e = l2Err(dtype, y.readNumbers(), l2NormRef(x.readNumbers(), rows, dim, eps));
          if (!(e < TOL[dtype])) over.push(`[${rows}, ${dim}] eps ${eps}: ${e}`);
          worst = Math.max(worst, e);
        }
        x.release();
        y.release();
      }
      if (process.env.MLXN_PRINT_ERRORS) console.log(`l2_norm ${dtype}: largest error ${worst}`);
      expect(over).toEqual([]);
    });
  }

  test('in place (y is x) and the default eps', () => {
    const dev = device();
    const [rows, dim] = [5, 300];
    const data = randomArray(rng(11), rows * dim, -1, 1);
    const x = dev.upload('bf16', [rows, dim], data);
    const want = l2NormRef(x.readNumbers(), rows, dim, L2_NORM_DEFAULT_EPS);
    const enc = dev.encoder();
    l2Norm(enc, { x, y: x, rows, dim });
    enc.commitAndWait();
    enc.release();
    expect(maxRelErr(x.readNumbers(), want)).toBeLessThan(TOL.bf16);
  });

  test('any threadgroup size: 1, 40, 96, 1000 threads', () => {
    const dev = device();
    dev.kernels.register(L2_NORM_FAMILY, L2_NORM_SOURCES, L2_NORM_KERNELS);
    const pipe = dev.kernels.pipeline('l2_norm_f32');
    const over: string[] = [];
    for (const threads of [1, 40, 96, 1000]) {
      for (const dim of [7, 128, 1537]) {
        const rows = 2;
        const x = dev.upload('f32', [rows, dim], randomArray(rng(threads + dim), rows * dim, -2, 2));
        const y = dev.alloc('f32', [rows, dim]);
        y.fill(Number.NaN);
        const enc = dev.encoder();
        enc.dispatch(pipe, {
          buffers: { 0: x, 1: y },
          bytes: { 2: packL2NormParams({ rows, dim, eps: 1e-6 }) },
          threadgroupMemory: { 0: Math.ceil((Math.ceil(threads / 32) * 4) / 16) * 16 },
        }, [rows, 1, 1], [threads, 1, 1]);
        enc.commitAndWait();
        enc.release();
        const e = maxRelErr(y.readNumbers(), l2NormRef(x.readNumbers(), rows, dim, 1e-6));
        if (!(e < TOL.f32)) over.push(`tg ${threads} dim ${dim}: ${e}`);
      }
    }
    expect(over).toEqual([]);
  });
});

// ---- buffers that are not live buffers of the device ----

describeValidation('l2_norm: buffers', ({ device, enc, buf }) => {
  test('null, released and foreign buffers are MlxErrors naming the argument', () => {
    const x = buf('f32', 24);
    expectInvalid(() => l2Ops.l2Norm(enc(), { x, y: null as unknown as mlx.Buffer, rows: 3, dim: 8 }), 'l2_norm', 'y', 'a Buffer', 'null');
    expectInvalid(() => l2Ops.l2Norm(enc(), { x: 'x' as unknown as mlx.Buffer, y: x, rows: 3, dim: 8 }), 'l2_norm', 'x', 'a Buffer', 'x');
    const gone = buf('f32', 24);
    gone.release();
    expectInvalid(() => l2Ops.l2Norm(enc(), { x: gone, y: x, rows: 3, dim: 8 }), 'l2_norm', 'x', 'a live Buffer', 'a released buffer');
    const other = mlx.Device.open({ backend: device().backend });
    try {
      expectInvalid(() => l2Ops.l2Norm(enc(), { x, y: other.alloc('f32', [24]), rows: 3, dim: 8 }), 'l2_norm', 'y',
        "a buffer of the encoder's device", 'a buffer of another device');
    } finally {
      other.close();
    }
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('l2_norm', [
  {
    fn: 'l2Norm', op: 'l2_norm',
    keys: { x: buf(['f32', 'f16', 'bf16']), y: out(['f32', 'f16', 'bf16']), rows: int, dim: int, eps: { kind: 'nonneg?' } },
    inPlace: [['x', 'y']],
    make: (d) => ({ x: a(d, 'f16', 24), y: a(d, 'f16', 24), rows: 3, dim: 8 }),
  },
]);
