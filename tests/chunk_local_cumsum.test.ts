// chunk_local_cumsum: validation rules, the param packer against the .metal
// struct, the reference against hand-computed values, and parity on every backend.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/chunk_gated_delta_rule.metal' with { type: 'text' };
import {
  CHUNK_LOCAL_CUMSUM_PARAMS_LAYOUT,
  chunkGatedDeltaRuleLayout,
  chunkLocalCumsum,
  chunkLocalCumsumVarlen,
  numChunks,
  packChunkLocalCumsumParams,
  chunkLocalCumsumRef,
} from '../ts/ops/chunk_gated_delta_rule.ts';
import { describeBackends, maxRelErr, randomArray, rng, TOL, expectInvalid, describeValidation } from './helpers.ts';
import { flat, flatName, type CumsumShape, type GdrShape, type SeedShape, type StepShape } from './gdr-args.ts';
import { bufferParam } from './metal-source.ts';
import * as cumsumOps from '../ts/ops/chunk_gated_delta_rule.ts';
import * as mlx from '../ts/index.ts';

// ---- the param structs against the .metal source ----

describe('chunk_local_cumsum param packer matches the .metal declaration', () => {
  test('ChunkLocalCumsumParams: [B, T, H, BT, NT] as uints, bound at buffer(2)', () => {
    expect(bufferParam(src, 'chunk_local_cumsum_g_f32', 2)).toMatch(/^constant ChunkLocalCumsumParams& params /);
    const p = { b: 2, t: 130, h: 3, bt: 64 };
    const bytes = packChunkLocalCumsumParams(flat(p));
    const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    expect(bytes.byteLength).toBe(20);
    expect(CHUNK_LOCAL_CUMSUM_PARAMS_LAYOUT.map((f) => v.getUint32(f.offset, true))).toEqual([2, 130, 3, 64, 3]);
    expect(numChunks(flat(p))).toBe(3);
  });
});

describe('chunk_local_cumsum reference against hand-computed values', () => {
  test('T 5, BT 2, two heads', () => {
    // g[t, h] for h = 0: 1..5; h = 1: 10, 20, ...
    const g = [1, 10, 2, 20, 3, 30, 4, 40, 5, 50];
    expect([...chunkLocalCumsumRef(g, 1, 5, 2, 2)]).toEqual([1, 10, 3, 30, 3, 30, 7, 70, 5, 50]);
  });
});

// ---- validation ----

describeValidation('chunk_local_cumsum validation', ({ enc, buf }) => {
  test('every rule', () => {
    const n = 2 * 10 * 3;
    const base = () => ({ gIn: buf('f32', n), gCumsum: buf('f32', n), batch: 2, seqLen: 10, nHeads: 3, bt: 4 });
    const cases: [Record<string, unknown>, string, string, string][] = [
      [{ batch: 0 }, 'batch', 'a positive integer', '0'],
      [{ seqLen: -2 }, 'seqLen', 'a positive integer', '-2'],
      [{ nHeads: 0.5 }, 'nHeads', 'a positive integer', '0.5'],
      [{ bt: 0 }, 'bt', 'a positive integer', '0'],
      [{ bt: 2048 }, 'bt', 'at most the threads per threadgroup limit (1024)', '2048'],
      [{ batch: 2 ** 12, seqLen: 2 ** 12, nHeads: 2 ** 9 }, 'batch * seqLen * nHeads', 'at most the 32-bit index limit (4294967295)', `${2 ** 33}`],
      [{ batch: 2 ** 30, seqLen: 2 ** 30, nHeads: 2 }, 'batch * seqLen * nHeads', 'a product of integers at most 2^53 - 1',
        `${2 ** 30} * ${2 ** 30} * 2`],
      [{ gIn: buf('bf16', n) }, 'gIn.dtype', 'f32', 'bf16'],
      [{ gCumsum: buf('f16', n) }, 'gCumsum.dtype', 'f32', 'f16'],
      [{ gIn: buf('f32', n - 3) }, 'gIn.elementCount', `${n}`, `${n - 3}`],
      [{ gCumsum: buf('f32', n + 1) }, 'gCumsum.elementCount', `${n}`, `${n + 1}`],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => chunkLocalCumsum(enc(), { ...base(), ...m }), 'chunk_local_cumsum', arg, expected, actual);
    }
  });
});

// ---- parity ----

describeBackends('chunk_local_cumsum parity', ({ device }) => {
  // [B, T, H, BT]: one chunk, T a multiple of BT, tail chunks, BT not a power of 2,
  // BT below and above a simdgroup, a single timestep.
  const SHAPES: readonly [b: number, t: number, h: number, bt: number][] = [
    [1, 1, 1, 64], [1, 64, 2, 64], [2, 100, 3, 64], [1, 130, 4, 64], [2, 17, 5, 16],
    [1, 50, 2, 48], [1, 37, 3, 7], [1, 300, 1, 256], [1, 1024, 2, 1024], [3, 65, 2, 32],
  ];
  for (const [what, lo, hi] of [['negative log-decay', -2, -0.01], ['mixed-sign', -1, 1]] as const) {
    test(`f32 ${what} inputs`, () => {
      const dev = device();
      const over: string[] = [];
      let worst = 0;
      for (const [b, t, h, bt] of SHAPES) {
        const r = rng(b * 1009 + t * 31 + h * 7 + bt);
        const gIn = dev.upload('f32', [b, t, h], randomArray(r, b * t * h, lo, hi));
        const gCumsum = dev.alloc('f32', [b, t, h]);
        gCumsum.fill(Number.NaN);
        const enc = dev.encoder();
        chunkLocalCumsum(enc, { gIn, gCumsum, ...flat({ b, t, h, bt }) });
        enc.commitAndWait();
        const want = chunkLocalCumsumRef(gIn.readNumbers(), b, t, h, bt);
        // Mixed-sign prefix sums cancel: their error is measured against the data's scale
        // (a floor of the largest |partial sum| times 0.1), the f32 rounding being of the terms.
        const scale = want.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
        const err = maxRelErr(gCumsum.readNumbers(), want, lo < 0 && hi > 0 ? 0.1 * scale : undefined);
        worst = Math.max(worst, err);
        if (!(err < TOL.f32)) over.push(`[${b}, ${t}, ${h}] bt ${bt}: ${err}`);
      }
      if (process.env.MLXN_PRINT_ERRORS) console.log(`chunk_local_cumsum ${what}: largest error ${worst}`);
      expect(over).toEqual([]);
    });
  }
});

// ---- one scan: the seed's entry and the varlen step give the same bits ----

describeBackends('chunk_local_cumsum: the same scan as chunk_local_cumsum_varlen_g_f32', ({ device }) => {
  test('B = 2, T = 100 (a partial last chunk), H = 3, bt = 64: equal bit for bit', () => {
    const dev = device();
    const [b, t, h] = [2, 100, 3];
    const gIn = dev.upload('f32', [b, t, h], randomArray(rng(5), b * t * h, -1, 1));
    const seed = dev.alloc('f32', [b, t, h]);
    const varlen = dev.alloc('f32', [b, t, h]);
    seed.fill(Number.NaN);
    varlen.fill(Number.NaN);
    const layout = chunkGatedDeltaRuleLayout(b, t);
    const chunks = dev.upload('u32', [layout.chunks.length], layout.chunks);
    const enc = dev.encoder();
    chunkLocalCumsum(enc, { gIn, gCumsum: seed, ...flat({ b, t, h, bt: 64 }) });
    chunkLocalCumsumVarlen(enc, {
      gIn, gCum: varlen, chunks, ...flat({ nTok: layout.nTok, nt: layout.nt, nSeq: layout.nSeq, hg: 1, h, k: 64, v: 64 }),
    });
    enc.commitAndWait();
    enc.release();
    expect(Array.from(seed.read())).toEqual(Array.from(varlen.read()));
    for (const x of [gIn, seed, varlen, chunks]) x.release();
  });
});

// ---- buffers that are not live buffers of the device ----

describeValidation('chunk_local_cumsum: buffers', ({ device, enc, buf }) => {
  test('null and foreign buffers are MlxErrors naming the argument; in place stays allowed', () => {
    const g = buf('f32', 30);
    const shape = flat({ b: 2, t: 5, h: 3, bt: 4 });
    cumsumOps.chunkLocalCumsum(enc(), { gIn: g, gCumsum: g, ...shape });
    expectInvalid(() => cumsumOps.chunkLocalCumsum(enc(), { gIn: null as unknown as mlx.Buffer, gCumsum: g, ...shape }), 'chunk_local_cumsum', 'gIn', 'a Buffer', 'null');
    const other = mlx.Device.open({ backend: device().backend });
    try {
      expectInvalid(() => cumsumOps.chunkLocalCumsum(enc(), { gIn: g, gCumsum: other.alloc('f32', [30]), ...shape }), 'chunk_local_cumsum', 'gCumsum',
        "a buffer of the encoder's device", 'a buffer of another device');
    } finally {
      other.close();
    }
  });
});
