// ssm_norm_gate: validation rules, the param packer against the .metal
// struct, the reference against hand-computed values, and parity on every backend.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/ssm_norm_gate.metal' with { type: 'text' };
import {
  SSM_NORM_GATE_FAMILY,
  SSM_NORM_GATE_KERNELS,
  SSM_NORM_GATE_SOURCES,
  SSM_NORM_GATE_PARAMS_LAYOUT,
  packSsmNormGateParams,
  ssmNormGate,
  ssmNormGateCudaLaunch,
  ssmNormGateThreadgroup,
  ssmNormGateRef,
} from '../ts/ops/ssm_norm_gate.ts';
import { describeBackends, maxRelErr, randomArray, rng, TOL, TARGET_LIMITS, expectInvalid, describeValidation, type Rng } from './helpers.ts';
import { bufferParam } from './metal-source.ts';
import * as sngOps from '../ts/ops/ssm_norm_gate.ts';
import * as mlx from '../ts/index.ts';
import { a, buf, F, int, opContract, out } from './op-contract.ts';

// ---- the param structs against the .metal source ----

describe('ssm_norm_gate param packer matches the .metal declaration', () => {
  test('SsmNormGateParams: [eps, d_v, 0, 0] as floats, bound at buffer(4)', () => {
    expect(bufferParam(src, 'ssm_norm_gate_f32', 4)).toMatch(/^constant SsmNormGateParams& params /);
    const bytes = packSsmNormGateParams({ rows: 3, dV: 128, eps: 1e-6 });
    const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    expect(bytes.byteLength).toBe(16);
    expect(SSM_NORM_GATE_PARAMS_LAYOUT.map((f) => v.getFloat32(f.offset, true))).toEqual([Math.fround(1e-6), 128, 0, 0]);
  });
  test('threadgroup: min(256, nextPow2(dV)) threads, one float per simdgroup in 16-byte units', () => {
    expect(ssmNormGateThreadgroup(1, TARGET_LIMITS.metal)).toEqual({ threads: 1, sharedBytes: 16 });
    expect(ssmNormGateThreadgroup(128, TARGET_LIMITS.metal)).toEqual({ threads: 128, sharedBytes: 16 });
    expect(ssmNormGateThreadgroup(1000, TARGET_LIMITS.metal)).toEqual({ threads: 256, sharedBytes: 32 });
  });
  test('CUDA: rowLaunch, sized to the row (rows of 8 lanes for heads of 128; a block per row otherwise)', () => {
    const c = TARGET_LIMITS.cuda;
    // Qwen3.6's gated delta net output of a 4096-token prompt: [4096 x 32, 128], 8 lanes of 4 vectors, 32 rows a block.
    expect(ssmNormGateCudaLaunch(131072, 128, c)).toEqual({ grid: [4096, 1, 1], threads: [8, 32, 1] });
    // One decode token's 32 heads: one block of 32 rows.
    expect(ssmNormGateCudaLaunch(32, 128, c, 132)).toEqual({ grid: [1, 1, 1], threads: [8, 32, 1] });
    expect(ssmNormGateCudaLaunch(3, 1000, c)).toEqual({ grid: [3, 1, 1], threads: [32, 1, 1], threadgroupMemory: [16] });
    expect(ssmNormGateCudaLaunch(32, 128, { ...c, simdWidth: 64 })).toBeNull();
  });
});

describe('ssm_norm_gate reference against hand-computed values', () => {
  test('row [3, 4], weight [1, 2], z [0, 2], eps 0', () => {
    const inv = 1 / Math.sqrt(12.5);
    const out = ssmNormGateRef([3, 4], [1, 2], [0, 2], 1, 2, 0);
    expect(out[0]).toBe(0); // silu(0) = 0
    expect(out[1]).toBeCloseTo(4 * inv * 2 * (2 / (1 + Math.exp(-2))), 14);
  });
});

// ---- validation ----

describeValidation('ssm_norm_gate validation', ({ enc, buf }) => {
  test('every rule', () => {
    const rows = 3;
    const dV = 8;
    const n = rows * dV;
    const base = () => ({ attnOut: buf('f32', n), weight: buf('f32', dV), z: buf('f32', n), output: buf('f32', n), rows, dV, eps: 1e-6 });
    const cases: [Record<string, unknown>, string, string, string][] = [
      [{ rows: 0 }, 'rows', 'a positive integer', '0'],
      [{ dV: -1 }, 'dV', 'a positive integer', '-1'],
      [{ dV: 2 ** 24 + 1, rows: 1 }, 'dV', 'at most 2^24 (d_v is passed as an f32) (16777216)', '16777217'],
      [{ eps: Infinity }, 'eps', 'a finite number >= 0', 'Infinity'],
      [{ eps: -1 }, 'eps', 'a finite number >= 0', '-1'],
      [{ rows: 2 ** 20, dV: 2 ** 13 }, 'rows * dV', 'at most the 32-bit index limit (4294967295)', `${2 ** 33}`],
      [{ rows: 2 ** 45, dV: 2 ** 10 }, 'rows * dV', 'a product of integers at most 2^53 - 1', `${2 ** 45} * ${2 ** 10}`],
      [{ attnOut: buf('bf16', n) }, 'attnOut.dtype', 'f32', 'bf16'],
      [{ weight: buf('f16', dV) }, 'weight.dtype', 'f32', 'f16'],
      [{ z: buf('bf16', n) }, 'z.dtype', 'f32', 'bf16'],
      [{ output: buf('u32', n) }, 'output.dtype', 'f32', 'u32'],
      [{ attnOut: buf('f32', n - 1) }, 'attnOut.elementCount', `${n}`, `${n - 1}`],
      [{ weight: buf('f32', n) }, 'weight.elementCount', `${dV}`, `${n}`],
      [{ z: buf('f32', 1) }, 'z.elementCount', `${n}`, '1'],
      [{ output: buf('f32', n + 8) }, 'output.elementCount', `${n}`, `${n + 8}`],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => ssmNormGate(enc(), { ...base(), ...m }), 'ssm_norm_gate', arg, expected, actual);
    }
  });
});

// ---- parity ----

/** Random attnOut [rows, dV] in [-2, 2], weight [dV] in [0.5, 1.5], z in [-6, 6] (drawn in that order); output poisoned. */
function inputs(dev: mlx.Device, rows: number, dV: number, r: Rng): { attnOut: mlx.Buffer; weight: mlx.Buffer; z: mlx.Buffer; output: mlx.Buffer } {
  const attnOut = dev.upload('f32', [rows, dV], randomArray(r, rows * dV, -2, 2));
  const weight = dev.upload('f32', [dV], randomArray(r, dV, 0.5, 1.5));
  const z = dev.upload('f32', [rows, dV], randomArray(r, rows * dV, -6, 6));
  const output = dev.alloc('f32', [rows, dV]);
  output.fill(Number.NaN);
  return { attnOut, weight, z, output };
}

describeBackends('ssm_norm_gate parity', ({ device }) => {
  // Row shapes: dV below, at and past the 256-thread group, odd, not multiples of 4 or 32.
  const SHAPES: readonly [rows: number, dV: number][] = [
    [1, 1], [4, 3], [3, 31], [2, 33], [32, 128], [2, 255], [2, 257], [3, 1000], [1, 4099], [40, 64], [96, 128],
  ];
  test('f32 against the float64 reference', () => {
    const dev = device();
    const over: string[] = [];
    let worst = 0;
    for (const [rows, dV] of SHAPES) {
      const { attnOut, weight, z, output } = inputs(dev, rows, dV, rng(rows * 613 + dV));
      const eps = 1e-6;
      const enc = dev.encoder();
      ssmNormGate(enc, { attnOut, weight, z, output, rows, dV, eps });
      enc.commitAndWait();
      const want = ssmNormGateRef(attnOut.readNumbers(), weight.readNumbers(), z.readNumbers(), rows, dV, eps);
      const err = maxRelErr(output.readNumbers(), want);
      worst = Math.max(worst, err);
      if (!(err < TOL.f32)) over.push(`[${rows}, ${dV}]: ${err}`);
    }
    if (process.env.MLXN_PRINT_ERRORS) console.log(`ssm_norm_gate f32: largest error ${worst}`);
    expect(over).toEqual([]);
  });

  test('any threadgroup size: 1, 100, 1000 threads, tg floats of threadgroup memory as the Rust host binds', () => {
    const dev = device();
    dev.kernels.register(SSM_NORM_GATE_FAMILY, SSM_NORM_GATE_SOURCES, SSM_NORM_GATE_KERNELS);
    const pipe = dev.kernels.pipeline('ssm_norm_gate_f32');
    const over: string[] = [];
    for (const threads of [1, 100, 1000]) {
      for (const dV of [5, 257, 1100]) {
        const rows = 2;
        const { attnOut, weight, z, output } = inputs(dev, rows, dV, rng(threads * 3 + dV));
        const enc = dev.encoder();
        enc.dispatch(pipe, {
          buffers: { 0: attnOut, 1: weight, 2: z, 3: output },
          bytes: { 4: packSsmNormGateParams({ rows, dV, eps: 1e-6 }) },
          threadgroupMemory: { 0: Math.ceil((threads * 4) / 16) * 16 },
        }, [rows, 1, 1], [threads, 1, 1]);
        enc.commitAndWait();
        const want = ssmNormGateRef(attnOut.readNumbers(), weight.readNumbers(), z.readNumbers(), rows, dV, 1e-6);
        const err = maxRelErr(output.readNumbers(), want);
        if (!(err < TOL.f32)) over.push(`tg ${threads} dV ${dV}: ${err}`);
      }
    }
    expect(over).toEqual([]);
  });
});

// ---- buffers that are not live buffers of the device; aliasing ----

describeValidation('ssm_norm_gate: buffers and aliasing', ({ device, enc, buf }) => {
  test('output in place of attnOut or z is allowed, as the weight refused; null and foreign buffers are MlxErrors', () => {
    const a = { attnOut: buf('f32', 16), weight: buf('f32', 8), z: buf('f32', 16), output: buf('f32', 16), rows: 2, dV: 8, eps: 1e-6 };
    sngOps.ssmNormGate(enc(), { ...a, output: a.attnOut });
    sngOps.ssmNormGate(enc(), { ...a, output: a.z });
    const w = buf('f32', 8);
    expectInvalid(() => sngOps.ssmNormGate(enc(), { attnOut: buf('f32', 8), weight: w, z: buf('f32', 8), output: w, rows: 1, dV: 8, eps: 1e-6 }),
      'ssm_norm_gate', 'output', 'a buffer other than weight', 'the buffer of weight');
    expectInvalid(() => sngOps.ssmNormGate(enc(), { ...a, z: undefined as unknown as mlx.Buffer }), 'ssm_norm_gate', 'z', 'a Buffer', 'none');
    const other = mlx.Device.open({ backend: device().backend });
    try {
      expectInvalid(() => sngOps.ssmNormGate(enc(), { ...a, weight: other.alloc('f32', [8]) }), 'ssm_norm_gate', 'weight',
        "a buffer of the encoder's device", 'a buffer of another device');
    } finally {
      other.close();
    }
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('ssm_norm_gate', [
  {
    fn: 'ssmNormGate', op: 'ssm_norm_gate',
    keys: { attnOut: buf(F), weight: buf(F), z: buf(F), output: out(F), rows: int, dV: int, eps: { kind: 'nonneg' } },
    make: (d) => ({ attnOut: a(d, 'f32', 16), weight: a(d, 'f32', 8), z: a(d, 'f32', 16), output: a(d, 'f32', 16), rows: 2, dV: 8, eps: 1e-6 }),
  },
]);
