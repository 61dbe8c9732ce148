// fused_head_norm_rope: the param packers against the .metal declarations,
// the reference against rms norm then rope by hand, every validation rule,
// and parity on every backend: f32 (with its bf16 and permuted copies) and
// bf16, with and without weight and frequency factors, partial rotary, head
// dims 64 to 512, odd head counts, one token and many, positions to 131071,
// in place.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/fused_head_norm_rope.metal' with { type: 'text' };
import commonCuh from '../shaders/cuda/common.cuh' with { type: 'text' };
import {
  FUSED_HEAD_NORM_ROPE_BATCH_BF16_PARAMS_LAYOUT,
  FUSED_HEAD_NORM_ROPE_F32_PARAMS_LAYOUT,
  FUSED_HEAD_NORM_ROPE_QKV_F32_PARAMS_LAYOUT,
  fusedHeadNormRope,
  fusedHeadNormRopeQkv,
  packFusedHeadNormRopeQkvF32Params,
  type FusedHeadNormRopeQkvArgs,
  fusedHeadNormRopeHeadsLaunch,
  ROPE_BLOCK_TOKENS,
  ROPE_HEADS_BLOCK_THREADS,
  fusedHeadNormRopeThreadgroup,
  packFusedHeadNormRopeBatchBf16Params,
  packFusedHeadNormRopeF32Params,
  type FusedHeadNormRopeArgs,
  fusedHeadNormRopeRef,
  permuteTokensHeads,
} from '../ts/ops/fused_head_norm_rope.ts';
import { ropeAngle } from '../ts/ops/rope.ts';
import { bf16, describeBackends, describeValidation, expectInvalid, rng, randomArray, scaledErr, TARGET_LIMITS, TOL } from './helpers.ts';
import { bufferParam } from './metal-source.ts';
import type { Buffer, Device } from '../ts/index.ts';
import { a, BF, buf, F, int, opContract, out, type Case } from './op-contract.ts';

describe('fused_head_norm_rope param packers match the .metal declarations', () => {
  test('the f32 and batch bf16 structs at buffer(3), mlx-native field order', () => {
    expect(bufferParam(src, 'fused_head_norm_rope_f32', 3)).toMatch(/^constant FusedHeadNormRopeF32Params& params /);
    expect(bufferParam(src, 'fused_head_norm_rope_batch_bf16', 3)).toMatch(/^constant FusedHeadNormRopeBatchBf16Params& params /);
    expect(FUSED_HEAD_NORM_ROPE_F32_PARAMS_LAYOUT.map((f) => f.name)).toEqual([
      'head_dim', 'n_heads', 'half_rope_dim', 'eps', 'has_weight', 'theta', 'has_freq_factors', 'has_bf16_output', 'bf16_permuted',
      'seq_len', 'has_f32_perm_output',
    ]);
    const fake = { byteLength: 0 } as unknown as Buffer;
    const a = { seqLen: 3, nHeads: 4, headDim: 256, halfRopeDim: 32, eps: 1e-6, theta: 1e6, weight: fake, outputBf16: fake, permuted: true } as
      unknown as FusedHeadNormRopeArgs;
    const v = new DataView(packFusedHeadNormRopeF32Params(a).buffer);
    const got = FUSED_HEAD_NORM_ROPE_F32_PARAMS_LAYOUT.map((f) => (f.type === 'f32' ? v.getFloat32(f.offset, true) : v.getUint32(f.offset, true)));
    expect(got).toEqual([256, 4, 32, Math.fround(1e-6), 1, 1e6, 0, 1, 1, 3, 0]);
    const w = new DataView(packFusedHeadNormRopeBatchBf16Params(a).buffer);
    expect(FUSED_HEAD_NORM_ROPE_BATCH_BF16_PARAMS_LAYOUT.map((f) => (f.type === 'f32' ? w.getFloat32(f.offset, true) : w.getUint32(f.offset, true))))
      .toEqual([256, 4, 32, Math.fround(1e-6), 1, 1e6, 0, 0]);
  });
  test('the qkv struct at buffer(3): fields, offsets, v_mode from v and vFromK', () => {
    expect(bufferParam(src, 'fused_head_norm_rope_qkv_f32', 3)).toMatch(/^constant FusedHeadNormRopeQkvF32Params& params /);
    const fake = { byteLength: 0 } as unknown as Buffer;
    const base = { seqLen: 3, nHeads: 16, nKvHeads: 8, headDim: 256, halfRopeDim: 32, eps: 1e-6, theta: 1e6, freqFactors: fake } as
      unknown as FusedHeadNormRopeQkvArgs;
    for (const [extra, mode] of [[{}, 0], [{ v: fake }, 1], [{ v: fake, vFromK: true }, 2]] as const) {
      const v = new DataView(packFusedHeadNormRopeQkvF32Params({ ...base, ...extra }).buffer);
      const got = FUSED_HEAD_NORM_ROPE_QKV_F32_PARAMS_LAYOUT.map((f) => (f.type === 'f32' ? v.getFloat32(f.offset, true) : v.getUint32(f.offset, true)));
      expect(got).toEqual([256, 16, 8, 32, Math.fround(1e-6), 1e6, 1, mode, 3]);
    }
  });
  test('CUDA heads form: many tokens, a head\'s row a power of two of up to 32 threads of 4 pairs, whole warps, tokens sharing a block, else none', () => {
    expect(fusedHeadNormRopeHeadsLaunch('k', 256, 4096, 16)).toEqual({ grid: [2048, 1, 1], threads: [32, 2, 2], entry: 'k_heads' });
    expect(fusedHeadNormRopeHeadsLaunch('k', 256, 18, 16)).toEqual({ grid: [9, 1, 1], threads: [32, 2, 2], entry: 'k_heads' });
    expect(fusedHeadNormRopeHeadsLaunch('k', 256, 17, 16)).toEqual({ grid: [17, 1, 1], threads: [32, 2, 1], entry: 'k_heads' });
    expect(fusedHeadNormRopeHeadsLaunch('k', 128, 16, 19, 3)).toEqual({ grid: [8, 1, 3], threads: [16, 4, 2], entry: 'k_heads' });
    expect(fusedHeadNormRopeHeadsLaunch('k', 8, 20, 1)).toEqual({ grid: [10, 1, 1], threads: [1, 32, 2], entry: 'k_heads' });
    expect(fusedHeadNormRopeHeadsLaunch('k', 64, 16, 100000)).toEqual({ grid: [16, 1, 1], threads: [8, 32, 1], entry: 'k_heads' });
    expect(fusedHeadNormRopeHeadsLaunch('k', 256, 4096, 16, 1, 1)).toEqual({ grid: [4096, 1, 1], threads: [32, 2, 1], entry: 'k_heads' });
    expect(fusedHeadNormRopeHeadsLaunch('k', 256, 15, 16)).toBeUndefined();  // few tokens: a block a row
    for (const d of [512, 6, 2, 96, 4]) expect(fusedHeadNormRopeHeadsLaunch('k', d, 64, 8)).toBeUndefined();
    expect(commonCuh).toContain(`constexpr u32 ROPE_BLOCK_TOKENS = ${ROPE_BLOCK_TOKENS}u;`);
    expect(commonCuh).toContain(`constexpr u32 ROPE_HEADS_BLOCK_THREADS = ${ROPE_HEADS_BLOCK_THREADS}u;`);
  });
  test('threadgroup: min(256, nextPow2(headDim)) threads, one float per simdgroup', () => {
    expect(fusedHeadNormRopeThreadgroup(64, TARGET_LIMITS.metal)).toEqual({ threads: 64, sharedBytes: 16 });
    expect(fusedHeadNormRopeThreadgroup(512, TARGET_LIMITS.metal)).toEqual({ threads: 256, sharedBytes: 32 });
  });
});

describe('fused_head_norm_rope reference against hand-computed values', () => {
  test('row [3, 4, 0, 0] (rms sqrt(25/4)), weight [1, 2, 1, 1], pair 0 turned by position 2', () => {
    const y = fusedHeadNormRopeRef([3, 4, 0, 0], [1, 2, 1, 1], [2], 1, 1, 4, 1, 0, 1e4);
    const n = [3 / 2.5, 8 / 2.5, 0, 0];
    expect(y[0]).toBeCloseTo(n[0]! * Math.cos(2), 14);
    expect(y[2]).toBeCloseTo(n[0]! * Math.sin(2), 14);
    expect([y[1], y[3]]).toEqual([n[1], 0]);
    const plain = fusedHeadNormRopeRef([3, 4, 0, 0], undefined, [9], 1, 1, 4, 0, 0, 1e4);
    [1.2, 1.6, 0, 0].forEach((v, i) => expect(plain[i]).toBeCloseTo(v, 14));
  });
});

describeValidation('fused_head_norm_rope validation', ({ enc, buf }) => {
  test('every rule', () => {
    const base = () => ({
      input: buf('f32', 48), output: buf('f32', 48), positions: buf('u32', 2), seqLen: 2, nHeads: 3, headDim: 8, halfRopeDim: 2,
      eps: 1e-6, theta: 1e6,
    });
    type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
    const cases: Case[] = [
      [{ seqLen: 0 }, 'seqLen', 'a positive integer', '0'],
      [{ nHeads: -3 }, 'nHeads', 'a positive integer', '-3'],
      [{ headDim: 7 }, 'headDim', 'a multiple of 2', '7'],
      [{ halfRopeDim: -1 }, 'halfRopeDim', 'an integer >= 0', '-1'],
      [{ halfRopeDim: 5 }, 'halfRopeDim', 'at most headDim / 2 (4)', '5'],
      [{ eps: -1 }, 'eps', 'a finite number >= 0', '-1'],
      [{ theta: 0 }, 'theta', 'a finite f32 > 0', '0'],
      [{ permuted: 1 }, 'permuted', 'true, false or absent', '1'],
      [{ seqLen: 2 ** 20, nHeads: 2 ** 13 }, 'seqLen * nHeads', 'at most 2^32 - 1', `${2 ** 33}`],
      [{ input: buf('f16', 48) }, 'input.dtype', 'one of f32, bf16', 'f16'],
      [{ output: buf('bf16', 48) }, 'output.dtype', 'f32', 'bf16'],
      [{ positions: buf('f32', 2) }, 'positions.dtype', 'one of u32, i32', 'f32'],
      [{ input: buf('f32', 40) }, 'input.elementCount', '48', '40'],
      [{ output: buf('f32', 49) }, 'output.elementCount', '48', '49'],
      [{ positions: buf('u32', 3) }, 'positions.elementCount', '2', '3'],
      [{ weight: buf('bf16', 8) }, 'weight.dtype', 'f32', 'bf16'],
      [{ weight: buf('f32', 4) }, 'weight.elementCount', '8', '4'],
      [{ freqFactors: buf('f16', 2) }, 'freqFactors.dtype', 'f32', 'f16'],
      [{ freqFactors: buf('f32', 1) }, 'freqFactors.elementCount', 'at least halfRopeDim (2)', '1'],
      [{ outputBf16: buf('f16', 48) }, 'outputBf16.dtype', 'bf16', 'f16'],
      [{ outputBf16: buf('bf16', 24) }, 'outputBf16.elementCount', '48', '24'],
      [{ outputF32Perm: buf('bf16', 48) }, 'outputF32Perm.dtype', 'f32', 'bf16'],
      [{ input: buf('bf16', 48), output: buf('bf16', 48), outputBf16: buf('bf16', 48) }, 'outputBf16',
        'absent for bf16 input', 'a buffer'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => fusedHeadNormRope(enc(), { ...base(), ...m }), 'fused_head_norm_rope', arg, expected, actual);
    }
    const o = buf('f32', 48);
    expectInvalid(() => fusedHeadNormRope(enc(), { ...base(), output: o, outputF32Perm: o }), 'fused_head_norm_rope', 'output',
      'a buffer other than outputF32Perm', 'the buffer of outputF32Perm');
  });
});

describeValidation('fused_head_norm_rope_qkv validation', ({ enc, buf }) => {
  test('every rule', () => {
    const op = 'fused_head_norm_rope_qkv';
    const base = () => ({
      q: buf('f32', 2 * 3 * 8), k: buf('f32', 2 * 1 * 8), v: buf('f32', 2 * 1 * 8) as Buffer | undefined, qWeight: buf('f32', 8), kWeight: buf('f32', 8),
      positions: buf('u32', 2), freqFactors: buf('f32', 4) as Buffer | undefined, seqLen: 2, nHeads: 3, nKvHeads: 1, headDim: 8,
      halfRopeDim: 2, eps: 1e-6, theta: 1e6, vFromK: false,
    });
    const cases: [Record<string, unknown>, string, string, string][] = [
      [{ seqLen: 0 }, 'seqLen', 'a positive integer', '0'],
      [{ nKvHeads: 0 }, 'nKvHeads', 'a positive integer', '0'],
      [{ headDim: 7 }, 'headDim', 'a multiple of 2', '7'],
      [{ halfRopeDim: 5 }, 'halfRopeDim', 'at most headDim / 2 (4)', '5'],
      [{ halfRopeDim: -1 }, 'halfRopeDim', 'an integer >= 0', '-1'],
      [{ eps: -1 }, 'eps', 'a finite number >= 0', '-1'],
      [{ theta: 0 }, 'theta', 'a finite f32 > 0', '0'],
      [{ vFromK: 1 }, 'vFromK', 'true, false or absent', '1'],
      [{ seqLen: 2 ** 31, nHeads: 1, nKvHeads: 1 }, 'seqLen * (nHeads + 2 * nKvHeads)', 'at most 2^32 - 1', ''],
      [{ v: undefined, vFromK: true }, 'v', 'a Buffer (vFromK writes it)', 'undefined'],
      [{ q: buf('bf16', 48) }, 'q.dtype', 'f32', 'bf16'],
      [{ v: buf('f16', 16) }, 'v.dtype', 'f32', 'f16'],
      [{ kWeight: buf('bf16', 8) }, 'kWeight.dtype', 'f32', 'bf16'],
      [{ positions: buf('f32', 2) }, 'positions.dtype', 'one of u32, i32', 'f32'],
      [{ q: buf('f32', 47) }, 'q.elementCount', '48', '47'],
      [{ k: buf('f32', 48) }, 'k.elementCount', '16', '48'],
      [{ v: buf('f32', 8) }, 'v.elementCount', '16', '8'],
      [{ qWeight: buf('f32', 4) }, 'qWeight.elementCount', '8', '4'],
      [{ positions: buf('u32', 3) }, 'positions.elementCount', '2', '3'],
      [{ freqFactors: buf('f32', 1) }, 'freqFactors.elementCount', 'at least halfRopeDim (2)', '1'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => fusedHeadNormRopeQkv(enc(), { ...base(), ...m } as never), op, arg, expected, actual);
    }
    const b = base();
    expectInvalid(() => fusedHeadNormRopeQkv(enc(), { ...b, v: b.k }), op, 'k', 'a buffer other than v', 'the buffer of v');
    expectInvalid(() => fusedHeadNormRopeQkv(enc(), { ...b, q: b.qWeight.view('f32', [8], 0), nHeads: 1, seqLen: 1, positions: buf('u32', 1), k: buf('f32', 8), v: buf('f32', 8) }),
      op, 'q', 'a buffer other than qWeight', 'the buffer of qWeight');
    fusedHeadNormRopeQkv(enc(), { ...b, v: undefined, freqFactors: undefined });
  });
});

// Outputs: the norm (relative error about 2^-22 in f32) then the rotation,
// whose angle error at large positions tests/rope.test.ts states and bounds
// (|angle| * (ln(theta) * 2i/d + 8) * 2^-24 + 2^-23); the bound here is that
// one on the normalized pair's magnitude r, plus r * 2^-20 for the norm and
// the rotation, plus half an ulp of a bf16 output.
function boundRatio(bf: boolean, got: ArrayLike<number>, want: ArrayLike<number>, pos: ArrayLike<number>,
  sh: { seqLen: number; nHeads: number; headDim: number; halfRopeDim: number; theta: number }, ff?: ArrayLike<number>): number {
  const half = sh.headDim / 2;
  let worst = 0;
  for (let r = 0; r < sh.seqLen * sh.nHeads; r++) {
    for (let i = 0; i < half; i++) {
      const [ia, ib] = [r * sh.headDim + i, r * sh.headDim + i + half];
      const mag = Math.hypot(want[ia]!, want[ib]!);
      let dAngle = 0;
      if (i < sh.halfRopeDim) {
        const t = ropeAngle(pos[Math.floor(r / sh.nHeads)]!, i, sh.headDim, sh.theta, ff === undefined ? 1 : ff[i]!);
        dAngle = Math.abs(t) * (Math.log(sh.theta) * (2 * i) / sh.headDim + 8) * 2 ** -24 + 2 ** -23;
      }
      const e32 = mag * (dAngle + 2 ** -20);
      for (const k of [ia, ib]) {
        if (!Number.isFinite(got[k]!)) return Infinity;
        const bound = e32 + (bf ? (Math.abs(want[k]!) + e32) * 2 ** -8 : 0) + Number.MIN_VALUE;
        worst = Math.max(worst, Math.abs(got[k]! - want[k]!) / bound);
      }
    }
  }
  return worst;
}

const print = (s: string): void => {
  if (process.env.MLXN_PRINT_ERRORS) console.log(s);
};

interface Shape { seqLen: number; nHeads: number; headDim: number; halfRopeDim: number; theta: number; weight: boolean; ff: boolean }

describeBackends('fused_head_norm_rope parity', ({ device }) => {
  const SHAPES: readonly Shape[] = [
    // Qwen3.6 q/k norm + a quarter of 256 rotated; Gemma 4 sliding (256, full) and global (512, a quarter, factors).
    { seqLen: 3, nHeads: 5, headDim: 256, halfRopeDim: 32, theta: 1e7, weight: true, ff: false },
    { seqLen: 2, nHeads: 3, headDim: 256, halfRopeDim: 128, theta: 1e4, weight: true, ff: false },
    { seqLen: 2, nHeads: 1, headDim: 512, halfRopeDim: 64, theta: 1e6, weight: true, ff: true },
    { seqLen: 1, nHeads: 7, headDim: 128, halfRopeDim: 64, theta: 1e6, weight: false, ff: false },
    { seqLen: 9, nHeads: 2, headDim: 64, halfRopeDim: 0, theta: 1e4, weight: true, ff: false },
    // CUDA's heads form (16 tokens or more): 19 heads (8 + 8 + 3 a thread), rotated pairs ending inside a thread's four,
    // half-warp rows.
    { seqLen: 17, nHeads: 19, headDim: 64, halfRopeDim: 13, theta: 1e4, weight: true, ff: true },
    { seqLen: 16, nHeads: 9, headDim: 128, halfRopeDim: 30, theta: 1e6, weight: false, ff: false },
    { seqLen: 20, nHeads: 4, headDim: 256, halfRopeDim: 128, theta: 1e4, weight: true, ff: false },
    { seqLen: 4, nHeads: 3, headDim: 2, halfRopeDim: 1, theta: 1e4, weight: false, ff: true },
  ];
  const run = (dev: Device, dt: 'f32' | 'bf16', sh: Shape, seed: number, extra: { copies?: boolean; permuted?: boolean; inPlace?: boolean; maxPos?: number } = {}) => {
    const n = sh.seqLen * sh.nHeads * sh.headDim;
    const g = rng(seed);
    const input = dev.upload(dt, [sh.seqLen, sh.nHeads, sh.headDim], randomArray(g, n, -3, 3));
    const output = extra.inPlace ? input : dev.alloc(dt, [sh.seqLen, sh.nHeads, sh.headDim]);
    const x = input.readNumbers();
    if (!extra.inPlace) output.fill(Number.NaN);
    const weight = sh.weight ? dev.upload(dt, [sh.headDim], randomArray(g, sh.headDim, 0.5, 1.5)) : undefined;
    const ffs = sh.ff ? Array.from({ length: sh.headDim / 2 }, (_, i) => (i % 3 === 2 ? 1e30 : 1 + (i % 4))) : undefined;
    const freqFactors = ffs ? dev.upload('f32', [ffs.length], ffs) : undefined;
    const maxPos = extra.maxPos ?? 131072;
    const pos = Array.from({ length: sh.seqLen }, (_, i) => (i === 0 ? maxPos - 1 : Math.floor(g.next() * maxPos)));
    const positions = dev.upload('u32', [sh.seqLen], pos);
    const outputBf16 = extra.copies ? dev.alloc('bf16', [n]) : undefined;
    const outputF32Perm = extra.copies ? dev.alloc('f32', [n]) : undefined;
    outputBf16?.fill(Number.NaN);
    outputF32Perm?.fill(Number.NaN);
    const enc = dev.encoder();
    fusedHeadNormRope(enc, {
      input, output, weight, positions, freqFactors, outputBf16, outputF32Perm, permuted: extra.permuted,
      seqLen: sh.seqLen, nHeads: sh.nHeads, headDim: sh.headDim, halfRopeDim: sh.halfRopeDim, eps: 1e-6, theta: sh.theta,
    });
    enc.commitAndWait();
    enc.release();
    const want = fusedHeadNormRopeRef(x, weight?.readNumbers(), pos, sh.seqLen, sh.nHeads, sh.headDim, sh.halfRopeDim, 1e-6, sh.theta, ffs);
    const res = { got: output.readNumbers(), want, pos, ffs, bf16Copy: outputBf16?.readNumbers(), f32Copy: outputF32Perm?.readNumbers() };
    for (const b of [input, weight, freqFactors, positions, outputBf16, outputF32Perm]) b?.release();
    if (!extra.inPlace) output.release();
    return res;
  };

  for (const dt of ['f32', 'bf16'] as const) {
    test(`${dt}: weight or none, factors or none, partial rotary, positions to 131071`, () => {
      const dev = device();
      const over: string[] = [];
      let worst = 0;
      SHAPES.forEach((sh, k) => {
        const { got, want, pos, ffs } = run(dev, dt, sh, 10 + k);
        const e = boundRatio(dt === 'bf16', got, want, pos, sh, ffs);
        if (!(e <= 1)) over.push(`${JSON.stringify(sh)}: ${e} of the bound`);
        worst = Math.max(worst, e);
      });
      print(`fused_head_norm_rope ${dt}: largest error ${worst} of the bound`);
      expect(over).toEqual([]);
    });
  }

  test('f32 with its bf16 and f32 copies, natural and permuted [head, token, i]', () => {
    const dev = device();
    const sh: Shape = { seqLen: 3, nHeads: 5, headDim: 128, halfRopeDim: 32, theta: 1e6, weight: true, ff: false };
    for (const permuted of [false, true]) {
      const { got, want, pos, bf16Copy, f32Copy } = run(dev, 'f32', sh, 3, { copies: true, permuted });
      expect(boundRatio(false, got, want, pos, sh)).toBeLessThanOrEqual(1);
      const placed = permuted ? permuteTokensHeads(got, sh.seqLen, sh.nHeads, sh.headDim) : got;
      // The copies are the f32 output itself, and it rounded to bf16, at their place.
      expect([...f32Copy!]).toEqual([...placed]);
      expect([...bf16Copy!]).toEqual([...placed].map(bf16));
    }
  });

  test('small positions (< 16) within TOL; in place', () => {
    const dev = device();
    const sh: Shape = { seqLen: 4, nHeads: 3, headDim: 256, halfRopeDim: 64, theta: 1e6, weight: true, ff: false };
    const over: string[] = [];
    for (const dt of ['f32', 'bf16'] as const) {
      const { got, want } = run(dev, dt, sh, 21, { inPlace: true, maxPos: 16 });
      const e = scaledErr(got, want);
      print(`fused_head_norm_rope ${dt} small positions, in place: ${e}`);
      if (!(e < TOL[dt])) over.push(`${dt}: ${e}`);
    }
    expect(over).toEqual([]);
  });
});

describeBackends('fused_head_norm_rope_qkv parity', ({ device }) => {
  // Gemma 4 sliding (256, full rotation, v in place), global (512, a quarter, factors, v from k), Qwen3.6 (256, a
  // quarter, no v), small odd shapes; one token and several.
  const SHAPES = [
    { seqLen: 1, nHeads: 16, nKvHeads: 8, headDim: 256, halfRopeDim: 128, theta: 1e4, ff: false, v: 'own' },
    { seqLen: 3, nHeads: 4, nKvHeads: 2, headDim: 512, halfRopeDim: 64, theta: 1e6, ff: true, v: 'fromK' },
    { seqLen: 2, nHeads: 5, nKvHeads: 1, headDim: 256, halfRopeDim: 32, theta: 1e7, ff: false, v: 'none' },
    { seqLen: 4, nHeads: 3, nKvHeads: 3, headDim: 6, halfRopeDim: 1, theta: 1e4, ff: true, v: 'own' },
    { seqLen: 17, nHeads: 19, nKvHeads: 2, headDim: 128, halfRopeDim: 30, theta: 1e6, ff: true, v: 'fromK' },
    { seqLen: 16, nHeads: 9, nKvHeads: 9, headDim: 64, halfRopeDim: 32, theta: 1e4, ff: false, v: 'own' },
    { seqLen: 18, nHeads: 16, nKvHeads: 8, headDim: 256, halfRopeDim: 128, theta: 1e4, ff: false, v: 'own' },
    // CUDA's heads form with as many k and v heads as q heads, v in place, factors.
    { seqLen: 16, nHeads: 16, nKvHeads: 16, headDim: 256, halfRopeDim: 64, theta: 1e4, ff: true, v: 'own' },
  ] as const;
  test('q, k and v in one dispatch: bit for bit the three single ops, and the float64 reference within its bound', () => {
    const dev = device();
    const over: string[] = [];
    SHAPES.forEach((sh, si) => {
      const g = rng(500 + si);
      const nq = sh.seqLen * sh.nHeads * sh.headDim, nk = sh.seqLen * sh.nKvHeads * sh.headDim;
      const hq = randomArray(g, nq, -3, 3), hk = randomArray(g, nk, -3, 3), hv = randomArray(g, nk, -3, 3);
      const qw = dev.upload('f32', [sh.headDim], randomArray(g, sh.headDim, 0.5, 1.5));
      const kw = dev.upload('f32', [sh.headDim], randomArray(g, sh.headDim, 0.5, 1.5));
      const ffs = sh.ff ? Array.from({ length: sh.headDim / 2 }, (_, i) => 1 + (i % 4)) : undefined;
      const freqFactors = ffs ? dev.upload('f32', [ffs.length], ffs) : undefined;
      const pos = Array.from({ length: sh.seqLen }, () => Math.floor(g.next() * 131072));
      const positions = dev.upload('u32', [sh.seqLen], pos);
      const rope = { positions, freqFactors, seqLen: sh.seqLen, headDim: sh.headDim, halfRopeDim: sh.halfRopeDim, eps: 1e-6, theta: sh.theta };
      // The fused op.
      const q = dev.upload('f32', [nq], hq), k = dev.upload('f32', [nk], hk);
      const v = sh.v === 'none' ? undefined : dev.upload('f32', [nk], sh.v === 'own' ? hv : Array(nk).fill(Number.NaN));
      let enc = dev.encoder();
      fusedHeadNormRopeQkv(enc, { ...rope, q, k, v, vFromK: sh.v === 'fromK', qWeight: qw, kWeight: kw, nHeads: sh.nHeads, nKvHeads: sh.nKvHeads });
      enc.commitAndWait();
      // The single ops.
      const q1 = dev.upload('f32', [nq], hq), k1 = dev.upload('f32', [nk], hk), v1 = dev.upload('f32', [nk], hv);
      enc = dev.encoder();
      fusedHeadNormRope(enc, { ...rope, input: q1, output: q1, weight: qw, nHeads: sh.nHeads });
      if (sh.v !== 'none') fusedHeadNormRope(enc, { ...rope, input: sh.v === 'own' ? v1 : k1, output: v1, nHeads: sh.nKvHeads, halfRopeDim: 0 });
      fusedHeadNormRope(enc, { ...rope, input: k1, output: k1, weight: kw, nHeads: sh.nKvHeads });
      enc.commitAndWait();
      const what = JSON.stringify(sh);
      if (!Bun.deepEquals(q.readNumbers(), q1.readNumbers())) over.push(`${what}: q differs from fused_head_norm_rope's`);
      if (!Bun.deepEquals(k.readNumbers(), k1.readNumbers())) over.push(`${what}: k differs`);
      if (v !== undefined && !Bun.deepEquals(v.readNumbers(), v1.readNumbers())) over.push(`${what}: v differs`);
      const shq = { ...sh, nHeads: sh.nHeads }, shk = { ...sh, nHeads: sh.nKvHeads };
      const wantQ = fusedHeadNormRopeRef(hq, qw.readNumbers(), pos, sh.seqLen, sh.nHeads, sh.headDim, sh.halfRopeDim, 1e-6, sh.theta, ffs);
      const wantK = fusedHeadNormRopeRef(hk, kw.readNumbers(), pos, sh.seqLen, sh.nKvHeads, sh.headDim, sh.halfRopeDim, 1e-6, sh.theta, ffs);
      const eq = boundRatio(false, q.readNumbers(), wantQ, pos, shq, ffs), ek = boundRatio(false, k.readNumbers(), wantK, pos, shk, ffs);
      if (!(eq <= 1 && ek <= 1)) over.push(`${what}: q ${eq}, k ${ek} of the bound`);
      if (v !== undefined) {
        const wantV = fusedHeadNormRopeRef(sh.v === 'own' ? hv : hk, undefined, pos, sh.seqLen, sh.nKvHeads, sh.headDim, 0, 1e-6, sh.theta);
        const ev = boundRatio(false, v.readNumbers(), wantV, pos, { ...shk, halfRopeDim: 0 });
        if (!(ev <= 1)) over.push(`${what}: v ${ev} of the bound`);
      }
    });
    expect(over).toEqual([]);
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('fused_head_norm_rope', [
  ...(['f32', 'bf16'] as const).map((dt): Case => ({
    fn: 'fusedHeadNormRope', op: 'fused_head_norm_rope',
    keys: {
      input: buf(['f32', 'bf16']), output: out(['f32', 'bf16']), weight: { kind: 'buf?', dtypes: ['f32', 'bf16'] },
      positions: buf(['u32', 'i32']), freqFactors: { kind: 'buf?', dtypes: F, freeCount: true },
      outputBf16: { kind: 'buf?', dtypes: BF, output: true }, outputF32Perm: { kind: 'buf?', dtypes: F, output: true },
      permuted: { kind: 'bool?' }, seqLen: int, nHeads: int, headDim: int, halfRopeDim: { kind: 'nonneg' }, eps: { kind: 'nonneg' }, theta: { kind: 'num' },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({
      input: a(d, dt, 48), output: a(d, dt, 48), weight: a(d, dt, 8), positions: a(d, 'u32', 2), freqFactors: a(d, 'f32', 2),
      ...(dt === 'f32' ? { outputBf16: a(d, 'bf16', 48), outputF32Perm: a(d, 'f32', 48), permuted: true } : {}),
      seqLen: 2, nHeads: 3, headDim: 8, halfRopeDim: 2, eps: 1e-6, theta: 1e6,
    }),
    fill: (args) => (args.positions as Buffer).writeNumbers([6, 131071]),
  })),
  {
    fn: 'fusedHeadNormRopeQkv', op: 'fused_head_norm_rope_qkv',
    keys: {
      q: out(F), k: out(F), v: { kind: 'buf?', dtypes: F, output: true }, vFromK: { kind: 'bool?' }, qWeight: buf(F), kWeight: buf(F),
      positions: buf(['u32', 'i32']), freqFactors: { kind: 'buf?', dtypes: F, freeCount: true },
      seqLen: int, nHeads: int, nKvHeads: int, headDim: int, halfRopeDim: { kind: 'nonneg' }, eps: { kind: 'nonneg' }, theta: { kind: 'num' },
    },
    make: (d) => ({
      q: a(d, 'f32', 48), k: a(d, 'f32', 16), v: a(d, 'f32', 16), vFromK: true, qWeight: a(d, 'f32', 8), kWeight: a(d, 'f32', 8),
      positions: a(d, 'u32', 2), freqFactors: a(d, 'f32', 2), seqLen: 2, nHeads: 3, nKvHeads: 1, headDim: 8, halfRopeDim: 2, eps: 1e-6, theta: 1e6,
    }),
    fill: (args) => (args.positions as Buffer).writeNumbers([6, 131071]),
  },
]);
