// moe_dispatch: the param packers against the header and the .metal
// bindings, the references against values by hand, every validation rule,
// and parity on every backend: moe_dispatch_sort exactly (offsets equal, each
// expert's pairs the same set; one pair, many pairs past one threadgroup,
// experts with no pair, one expert with all of them, ids past the experts),
// and mlx-native's glue kernels against their float64 references at odd
// sizes, with outputs poisoned and the crate's "at least" buffers larger
// than needed.
//
// Tolerances: GELU's gate is a few f32 operations per element (an exp and a
// division), within TOL.f32 of the float64 value relative to the largest
// |output| (maxRelErr's floor); the weighted sums are sums of up to 8
// products, measured as |got - want| / sum_k |w y| (dotErr: cancellation
// between slots leaves the f32 rounding of the terms); a bf16 or f16 output
// is rounded once more, within TOL of its dtype.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/moe_dispatch.metal' with { type: 'text' };
import type { DType, Device } from '../ts/index.ts';
import {
  MOE_DISPATCH_KERNELS,
  fusedGeluMul,
  moeAccumulate,
  moeDispatchSort,
  moeDispatchSortLaunch,
  moeDispatchSortMaxExperts,
  moeGatherTopkWeights,
  moeSwigluBatch,
  moeSwigluFused,
  moeSwigluSeq,
  moeWeightedSum,
  moeWeightedSumSeq,
  moeWeightedSumSeqKernel,
  moeZeroBuffer,
  packMoeDispatchSortParams,
  moeDispatchSortRef,
  moeGatherTopkWeightsRef,
  moeSwigluRowsRef,
  moeWeightedSumRef,
} from '../ts/ops/moe_dispatch.ts';
import { geluTanhMulRef } from '../ts/ops/gelu.ts';
import { describeBackends, describeValidation, dotErr, expectInvalid, maxRelErr, poisoned, randomArray, rng, roundedTo, TARGET_LIMITS, TOL, run } from './helpers.ts';
import { a, buf, F, int, opContract, out, U32 } from './op-contract.ts';
import type { Buffer } from '../ts/index.ts';

describe('moe_dispatch param structs match the .metal bindings', () => {
  test('each kernel takes its struct at the crate\'s index', () => {
    const at: Record<string, [string, number]> = {
      moe_dispatch_sort: ['MoeDispatchSortParams', 3], fused_gelu_mul: ['FusedGeluMulParams', 3], fused_gelu_mul_bf16: ['FusedGeluMulParams', 3],
      moe_accumulate: ['MoeAccumParams', 2], zero_buffer: ['ZeroParams', 1], moe_swiglu_fused: ['FusedGeluMulParams', 2],
      moe_weighted_sum: ['MoeWeightedSumParams', 3], moe_swiglu_seq: ['MoeSwigluSeqParams', 2], moe_swiglu_seq_bf16: ['MoeSwigluSeqParams', 2],
      moe_weighted_sum_seq: ['MoeWeightedSumSeqParams', 3], moe_weighted_sum_seq_bf16_input: ['MoeWeightedSumSeqParams', 3],
      moe_weighted_sum_seq_f16: ['MoeWeightedSumSeqParams', 3], moe_weighted_sum_seq_bf16: ['MoeWeightedSumSeqParams', 3],
      moe_gather_topk_weights: ['MoeGatherTopkParams', 5],
    };
    for (const k of MOE_DISPATCH_KERNELS) {
      if (k === 'moe_swiglu_batch') {
        expect(src).toMatch(/kernel void moe_swiglu_batch\([^{]*constant uint&\s+intermediate\s+\[\[buffer\(2\)\]\][^{]*constant uint&\s+top_k\s+\[\[buffer\(3\)\]\]/);
        continue;
      }
      const [s, i] = at[k]!;
      expect(src).toMatch(new RegExp(`kernel void ${k}\\([^{]*constant ${s}&\\s+\\w+\\s+\\[\\[buffer\\(${i}\\)\\]\\]`));
    }
    const p = packMoeDispatchSortParams({ nPairs: 24, numExperts: 256 });
    expect(Array.from(new Uint32Array(p.buffer, p.byteOffset, 2))).toEqual([24, 256]);
  });
  test('moe_dispatch_sort launch: one threadgroup, a multiple of 32 threads, counters and partials', () => {
    expect(moeDispatchSortLaunch(1, 4, TARGET_LIMITS.cuda)).toEqual({ threads: 32, sharedBytes: 32 });
    expect(moeDispatchSortLaunch(64, 256, TARGET_LIMITS.cuda)).toEqual({ threads: 288, sharedBytes: 1072 });
    expect(moeDispatchSortLaunch(65536, 512, TARGET_LIMITS.metal)).toEqual({ threads: 1024, sharedBytes: 2192 });
    expect(moeDispatchSortMaxExperts(TARGET_LIMITS.metal)).toBe(8159);
  });
  test('moeWeightedSumSeq: the kernel by dtypes', () => {
    expect([['f32', 'f32'], ['bf16', 'f32'], ['bf16', 'bf16'], ['f16', 'f16'], ['f16', 'f32']].map(([a, b]) =>
      moeWeightedSumSeqKernel(a as DType, b as DType))).toEqual([
      'moe_weighted_sum_seq', 'moe_weighted_sum_seq_bf16_input', 'moe_weighted_sum_seq_bf16', 'moe_weighted_sum_seq_f16', null,
    ]);
  });
});

describe('moe_dispatch references against values by hand', () => {
  test('grouping: offsets and order, ids past the experts last', () => {
    const r = moeDispatchSortRef([2, 0, 7, 2, 1, 0], 3);
    expect(Array.from(r.offsets)).toEqual([0, 2, 3, 5, 6]);
    expect(Array.from(r.order)).toEqual([1, 5, 4, 0, 3, 2]);
  });
  test('gather top-k: renormalized and scaled; an index past the experts weighs 0', () => {
    const g = moeGatherTopkWeightsRef([0.1, 0.5, 0.2, 0.2], [1, 2, 9], [1, 2, 3, 4], 4, 3);
    expect(Array.from(g.ids)).toEqual([1, 2, 9]);
    expect(g.weights[0]).toBeCloseTo((0.5 / 0.7) * 2, 12);
    expect(g.weights[1]).toBeCloseTo((0.2 / 0.7) * 3, 12);
    expect(g.weights[2]).toBe(0);
  });
});

describeValidation('moe_dispatch validation', ({ device, enc, buf }) => {
  type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
  const each = (op: string, f: (a: Record<string, unknown>) => void, base: () => Record<string, unknown>, cases: Case[]): void => {
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => f({ ...base(), ...m }), op, arg, expected, actual);
  };
  test('moe_dispatch_sort', () => {
    const base = () => ({ ids: buf('u32', 6), offsets: buf('u32', 6), order: buf('u32', 6), nPairs: 6, numExperts: 4 });
    const same = buf('u32', 6);
    each('moe_dispatch_sort', (a) => moeDispatchSort(enc(), a as never), base, [
      [{ nPairs: 0 }, 'nPairs', 'a positive integer', '0'],
      [{ numExperts: 1.5 }, 'numExperts', 'a positive integer', '1.5'],
      [{ numExperts: 2 ** 32 }, 'numExperts', 'at most 2^32 - 1', `${2 ** 32}`],
      // One past what the device's threadgroup memory counts (8k on Apple's 32 KiB, more on cuda).
      [{ numExperts: moeDispatchSortMaxExperts(device().limits) + 1 }, 'numExperts', 'a counter per expert', `${moeDispatchSortMaxExperts(device().limits) + 1}`],
      [{ ids: buf('i32', 6) }, 'ids.dtype', 'u32', 'i32'],
      [{ order: buf('f32', 6) }, 'order.dtype', 'u32', 'f32'],
      [{ ids: buf('u32', 5) }, 'ids.elementCount', '6', '5'],
      [{ offsets: buf('u32', 5) }, 'offsets.elementCount', '6', '5'],
      [{ order: buf('u32', 7) }, 'order.elementCount', '6', '7'],
      [{ ids: same, order: same }, 'order', 'a buffer other than ids', 'the buffer of ids'],
      [{ ids: 3 }, 'ids', 'a Buffer', '3'],
    ]);
  });
  test('fused_gelu_mul, moe_accumulate, moe_zero_buffer', () => {
    const g = () => ({ gateOut: buf('f32', 8), upOut: buf('f32', 8), output: buf('f32', 8), nElements: 8 });
    const shared = buf('f32', 16);
    each('fused_gelu_mul', (a) => fusedGeluMul(enc(), a as never), g, [
      [{ nElements: 0 }, 'nElements', 'a positive integer', '0'],
      [{ gateOut: buf('f16', 8) }, 'gateOut.dtype', 'one of f32, bf16', 'f16'],
      [{ upOut: buf('bf16', 8) }, 'upOut.dtype', 'f32', 'bf16'],
      [{ output: buf('bf16', 8) }, 'output.dtype', 'f32', 'bf16'],
      [{ gateOut: buf('f32', 7) }, 'gateOut.elementCount', 'at least 8', '7'],
      [{ upOut: buf('f32', 7) }, 'upOut.elementCount', 'at least 8', '7'],
      [{ output: buf('f32', 7) }, 'output.elementCount', 'at least 8', '7'],
      [{ gateOut: shared.view('f32', [8]), output: shared.view('f32', [8], 16) }, 'output', 'a buffer other than gateOut', 'a view overlapping gateOut'],
    ]);
    const acc = () => ({ accumulator: buf('f32', 8), expertOutput: buf('f32', 8), routingWeight: 0.5, nElements: 8 });
    each('moe_accumulate', (a) => moeAccumulate(enc(), a as never), acc, [
      [{ nElements: -1 }, 'nElements', 'a positive integer', '-1'],
      [{ routingWeight: Number.NaN }, 'routingWeight', 'a finite number', 'NaN'],
      [{ accumulator: buf('bf16', 8) }, 'accumulator.dtype', 'f32', 'bf16'],
      [{ expertOutput: buf('f32', 3) }, 'expertOutput.elementCount', 'at least 8', '3'],
      [{ accumulator: buf('f32', 3) }, 'accumulator.elementCount', 'at least 8', '3'],
    ]);
    each('moe_zero_buffer', (a) => moeZeroBuffer(enc(), a as never), () => ({ buffer: buf('f32', 8), nElements: 8 }), [
      [{ nElements: 0 }, 'nElements', 'a positive integer', '0'],
      [{ buffer: buf('u32', 8) }, 'buffer.dtype', 'f32', 'u32'],
      [{ buffer: buf('f32', 7) }, 'buffer.elementCount', 'at least 8', '7'],
    ]);
  });
  test('moe_swiglu_fused, moe_swiglu_batch, moe_swiglu_seq', () => {
    each('moe_swiglu_fused', (a) => moeSwigluFused(enc(), a as never), () => ({ gateUp: buf('f32', 8), output: buf('f32', 4), nElements: 4 }), [
      [{ nElements: 0 }, 'nElements', 'a positive integer', '0'],
      [{ nElements: 2 ** 31 }, 'nElements', 'at most 2^31 - 1', `${2 ** 31}`],
      [{ gateUp: buf('bf16', 8) }, 'gateUp.dtype', 'f32', 'bf16'],
      [{ gateUp: buf('f32', 7) }, 'gateUp.elementCount', 'at least 8', '7'],
      [{ output: buf('f32', 3) }, 'output.elementCount', 'at least 4', '3'],
    ]);
    const gu = buf('f32', 24);
    each('moe_swiglu_batch', (a) => moeSwigluBatch(enc(), a as never), () => ({ gateUp: buf('f32', 24), output: buf('f32', 12), intermediate: 4, topK: 3 }), [
      [{ intermediate: 0 }, 'intermediate', 'a positive integer', '0'],
      [{ topK: 70000 }, 'topK', 'at most 65535', '70000'],
      [{ output: buf('f16', 12) }, 'output.dtype', 'f32', 'f16'],
      [{ gateUp: buf('f32', 23) }, 'gateUp.elementCount', 'at least 24', '23'],
      [{ output: buf('f32', 11) }, 'output.elementCount', 'at least 12', '11'],
      [{ gateUp: gu, output: gu.view('f32', [12], 16) }, 'output', 'a buffer other than gateUp', 'a view overlapping gateUp'],
    ]);
    each('moe_swiglu_seq', (a) => moeSwigluSeq(enc(), a as never),
      () => ({ gateUp: buf('bf16', 48), output: buf('bf16', 24), intermediate: 4, topK: 3, nTokens: 2 }), [
        [{ nTokens: 0 }, 'nTokens', 'a positive integer', '0'],
        [{ nTokens: 70000 }, 'nTokens', 'at most 65535', '70000'],
        [{ intermediate: 2 ** 31, topK: 1, nTokens: 1 }, 'nTokens * topK * 2 * intermediate', 'at most 2^32 - 1', `${2 ** 32}`],
        [{ gateUp: buf('f16', 48) }, 'gateUp.dtype', 'one of f32, bf16', 'f16'],
        [{ output: buf('f32', 24) }, 'output.dtype', 'bf16', 'f32'],
        [{ gateUp: buf('bf16', 47) }, 'gateUp.elementCount', 'at least 48', '47'],
        [{ output: buf('bf16', 23) }, 'output.elementCount', 'at least 24', '23'],
      ]);
  });
  test('moe_weighted_sum, moe_weighted_sum_seq, moe_gather_topk_weights', () => {
    each('moe_weighted_sum', (a) => moeWeightedSum(enc(), a as never),
      () => ({ expertOutputs: buf('f32', 12), weights: buf('f32', 3), output: buf('f32', 4), hiddenSize: 4, topK: 3 }), [
        [{ hiddenSize: 0 }, 'hiddenSize', 'a positive integer', '0'],
        [{ topK: 2 ** 20, hiddenSize: 2 ** 20 }, 'topK * hiddenSize', 'at most 2^32 - 1', `${2 ** 40}`],
        [{ weights: buf('bf16', 3) }, 'weights.dtype', 'f32', 'bf16'],
        [{ expertOutputs: buf('f32', 11) }, 'expertOutputs.elementCount', 'at least 12', '11'],
        [{ weights: buf('f32', 2) }, 'weights.elementCount', 'at least 3', '2'],
        [{ output: buf('f32', 3) }, 'output.elementCount', 'at least 4', '3'],
      ]);
    const wss = () => ({ expertOutputs: buf('bf16', 24), weights: buf('f32', 6), output: buf('bf16', 8), hiddenSize: 4, topK: 3, nTokens: 2 });
    const y = buf('f32', 24);
    each('moe_weighted_sum_seq', (a) => moeWeightedSumSeq(enc(), a as never), wss, [
      [{ topK: 0 }, 'topK', 'a positive integer', '0'],
      [{ nTokens: 65536 }, 'nTokens', 'at most 65535', '65536'],
      [{ expertOutputs: buf('u32', 24) }, 'expertOutputs.dtype', 'one of f32, bf16, f16', 'u32'],
      [{ weights: buf('bf16', 6) }, 'weights.dtype', 'f32', 'bf16'],
      [{ output: buf('f16', 8) }, 'output.dtype', 'one of f32, bf16', 'f16'],
      [{ expertOutputs: buf('f16', 24), output: buf('f32', 8) }, 'output.dtype', 'one of f16', 'f32'],
      [{ expertOutputs: buf('bf16', 23) }, 'expertOutputs.elementCount', 'at least 24', '23'],
      [{ weights: buf('f32', 5) }, 'weights.elementCount', 'at least 6', '5'],
      [{ output: buf('bf16', 7) }, 'output.elementCount', 'at least 8', '7'],
      [{ expertOutputs: y, output: y.view('f32', [8]) }, 'output', 'a buffer other than expertOutputs', 'a view overlapping expertOutputs'],
    ]);
    const gt = () => ({
      softmaxProbs: buf('f32', 6), sortedIndices: buf('u32', 6), perExpertScale: buf('f32', 6), outExpertIds: buf('u32', 2),
      outWeights: buf('f32', 2), nExperts: 6, topK: 2,
    });
    each('moe_gather_topk_weights', (a) => moeGatherTopkWeights(enc(), a as never), gt, [
      [{ nExperts: 0 }, 'nExperts', 'a positive integer', '0'],
      [{ topK: 7 }, 'topK', 'at most nExperts (6)', '7'],
      [{ topK: 9, nExperts: 12 }, 'topK', 'at most 8', '9'],
      [{ softmaxProbs: buf('bf16', 6) }, 'softmaxProbs.dtype', 'f32', 'bf16'],
      [{ sortedIndices: buf('i32', 6) }, 'sortedIndices.dtype', 'u32', 'i32'],
      [{ outExpertIds: buf('f32', 2) }, 'outExpertIds.dtype', 'u32', 'f32'],
      [{ softmaxProbs: buf('f32', 5) }, 'softmaxProbs.elementCount', 'at least 6', '5'],
      [{ sortedIndices: buf('u32', 5) }, 'sortedIndices.elementCount', 'at least 6', '5'],
      [{ perExpertScale: buf('f32', 5) }, 'perExpertScale.elementCount', 'at least 6', '5'],
      [{ outExpertIds: buf('u32', 1) }, 'outExpertIds.elementCount', 'at least 2', '1'],
      [{ outWeights: buf('f32', 1) }, 'outWeights.elementCount', 'at least 2', '1'],
    ]);
  });
});

const abs = (v: ArrayLike<number>): Float64Array => Float64Array.from(v, Math.abs);

/** The groups of a dispatch as sorted lists, to compare with the reference whatever the order within a group. */
function groups(offsets: ArrayLike<number>, order: ArrayLike<number>): number[][] {
  const out: number[][] = [];
  for (let b = 0; b + 1 < offsets.length; b++) out.push(Array.from(order).slice(offsets[b]!, offsets[b + 1]!).sort((x, y) => x - y));
  return out;
}

describeBackends('moe_dispatch parity', ({ device }) => {
  test('moe_dispatch_sort: offsets exactly, each expert\'s pairs; empty experts, one expert taking all, ids past the experts', () => {
    const dev = device();
    const cases: [name: string, nPairs: number, numExperts: number, id: (p: number, r: ReturnType<typeof rng>) => number][] = [
      ['one pair', 1, 1, () => 0],
      ['one token, top-8 of 256', 8, 256, (p) => (p * 37 + 5) % 256],
      ['8 tokens x top-8 of 512', 64, 512, (p, r) => Math.floor(r.uniform(0, 512))],
      ['one expert takes all', 300, 16, () => 11],
      ['most experts empty, some ids past them', 97, 40, (p, r) => (r.next() < 0.1 ? 40 + Math.floor(r.uniform(0, 3e9)) : 3 * Math.floor(r.uniform(0, 4)))],
      ['past one threadgroup: 5000 pairs of 300 experts', 5000, 300, (p, r) => Math.floor(r.uniform(0, 300))],
      ['more experts than pairs and threads', 20, 2000, (p) => 1999 - p * 50],
    ];
    for (const [name, nPairs, numExperts, id] of cases) {
      const r = rng(nPairs * 31 + numExperts);
      const ids = Array.from({ length: nPairs }, (_, p) => id(p, r));
      const root = dev.alloc('u32', [nPairs + 8]);
      root.writeNumbers(Array.from({ length: nPairs + 8 }, (_, i) => 0xdead0000 + i));
      const idsBuf = root.view('u32', [nPairs], 16);
      idsBuf.writeNumbers(ids);
      const offsets = poisoned(dev, 'u32', [numExperts + 2]);
      const order = poisoned(dev, 'u32', [nPairs]);
      run(dev, (enc) => moeDispatchSort(enc, { ids: idsBuf, offsets, order, nPairs, numExperts }));
      const want = moeDispatchSortRef(ids, numExperts);
      const off = offsets.read() as Uint32Array;
      expect(Array.from(off), name).toEqual(Array.from(want.offsets));
      expect(groups(off, order.read() as Uint32Array), name).toEqual(groups(want.offsets, want.order));
      for (const b of [root, offsets, order]) b.release();
    }
  });

  test('fused_gelu_mul (f32, bf16), in place; moe_accumulate; zero_buffer; buffers larger than needed', () => {
    const dev = device();
    for (const [dt, n] of [['f32', 1], ['f32', 257], ['bf16', 1000]] as const) {
      const r = rng(n);
      const g = roundedTo(dt, randomArray(r, n + 5, -6, 6));
      const u = roundedTo(dt, randomArray(r, n + 5, -2, 2));
      const gate = dev.upload(dt, [n + 5], g);
      const up = dev.upload(dt, [n + 5], u);
      const out = poisoned(dev, dt, [n + 3]);
      run(dev, (enc) => fusedGeluMul(enc, { gateOut: gate, upOut: up, output: out, nElements: n }));
      const got = out.readNumbers();
      const want = geluTanhMulRef(g.slice(0, n), u.slice(0, n));
      expect(maxRelErr(got.slice(0, n), want)).toBeLessThan(TOL[dt]);
      expect(Array.from(got.slice(n)).every(Number.isNaN)).toBe(true);
      run(dev, (enc) => fusedGeluMul(enc, { gateOut: gate, upOut: up, output: gate, nElements: n }));
      expect(maxRelErr(gate.readNumbers().slice(0, n), want)).toBeLessThan(TOL[dt]);
      for (const b of [gate, up, out]) b.release();
    }
    const r = rng(7);
    const n = 333;
    const a0 = roundedTo('f32', randomArray(r, n, -1, 1));
    const e = roundedTo('f32', randomArray(r, n + 1, -1, 1));
    const acc = dev.upload('f32', [n], a0);
    const eo = dev.upload('f32', [n + 1], e);
    run(dev, (enc) => moeAccumulate(enc, { accumulator: acc, expertOutput: eo, routingWeight: 0.375, nElements: n }));
    expect(maxRelErr(acc.readNumbers(), Float64Array.from(a0, (v, i) => v + 0.375 * e[i]!))).toBeLessThan(TOL.f32);
    run(dev, (enc) => moeZeroBuffer(enc, { buffer: acc, nElements: 300 }));
    const z = acc.readNumbers();
    expect(Array.from(z.slice(0, 300)).every((v) => v === 0)).toBe(true);
    expect(z[300]).not.toBe(0);
  });

  test('moe_swiglu_fused, _batch, _seq (f32, bf16): the GELU gate of gate | up rows', () => {
    const dev = device();
    const r = rng(11);
    const I = 37;
    const gu = roundedTo('f32', randomArray(r, 3 * 2 * I, -4, 4));
    const gateUp = dev.upload('f32', [3, 2 * I], gu);
    let out = poisoned(dev, 'f32', [I]);
    run(dev, (enc) => moeSwigluFused(enc, { gateUp, output: out, nElements: I }));
    expect(maxRelErr(out.readNumbers(), moeSwigluRowsRef(gu, 1, I))).toBeLessThan(TOL.f32);
    out.release();
    out = poisoned(dev, 'f32', [3, I]);
    run(dev, (enc) => moeSwigluBatch(enc, { gateUp, output: out, intermediate: I, topK: 3 }));
    expect(maxRelErr(out.readNumbers(), moeSwigluRowsRef(gu, 3, I))).toBeLessThan(TOL.f32);
    out.release();
    gateUp.release();
    for (const [dt, T, K, n] of [['f32', 2, 3, 300], ['bf16', 3, 2, 5]] as const) {
      const v = roundedTo(dt, randomArray(r, T * K * 2 * n, -4, 4));
      const g = dev.upload(dt, [T, K, 2 * n], v);
      const o = poisoned(dev, dt, [T, K, n]);
      run(dev, (enc) => moeSwigluSeq(enc, { gateUp: g, output: o, intermediate: n, topK: K, nTokens: T }));
      expect(maxRelErr(o.readNumbers(), moeSwigluRowsRef(v, T * K, n))).toBeLessThan(TOL[dt]);
      g.release();
      o.release();
    }
  });

  test('moe_weighted_sum and moe_weighted_sum_seq (f32, bf16 -> f32, bf16, f16)', () => {
    const dev = device();
    const r = rng(13);
    const [K, H] = [8, 263];
    const y = roundedTo('f32', randomArray(r, K * H, -2, 2));
    const w = roundedTo('f32', randomArray(r, K, 0, 1));
    const yb = dev.upload('f32', [K, H], y);
    const wb = dev.upload('f32', [K], w);
    const ob = poisoned(dev, 'f32', [H]);
    run(dev, (enc) => moeWeightedSum(enc, { expertOutputs: yb, weights: wb, output: ob, hiddenSize: H, topK: K }));
    expect(dotErr(ob.readNumbers(), moeWeightedSumRef(y, w, 1, K, H), moeWeightedSumRef(abs(y), abs(w), 1, K, H))).toBeLessThan(TOL.f32);
    for (const b of [yb, wb, ob]) b.release();
    for (const [din, dout, T, k, h] of [['f32', 'f32', 3, 8, 300], ['bf16', 'f32', 2, 4, 33], ['bf16', 'bf16', 5, 8, 64], ['f16', 'f16', 1, 1, 7]] as const) {
      const yv = roundedTo(din, randomArray(r, T * k * h, -2, 2));
      const wv = roundedTo('f32', randomArray(r, T * k, 0, 1));
      const ys = dev.upload(din, [T, k, h], yv);
      const ws = dev.upload('f32', [T, k], wv);
      const os = poisoned(dev, dout, [T, h]);
      run(dev, (enc) => moeWeightedSumSeq(enc, { expertOutputs: ys, weights: ws, output: os, hiddenSize: h, topK: k, nTokens: T }));
      const err = dotErr(os.readNumbers(), moeWeightedSumRef(yv, wv, T, k, h), moeWeightedSumRef(abs(yv), abs(wv), T, k, h));
      expect(err, `${din} -> ${dout}`).toBeLessThan(TOL[dout]);
      for (const b of [ys, ws, os]) b.release();
    }
  });

  test('moe_gather_topk_weights: top-8 of 128 (Gemma 4), and an index past the experts read as nothing', () => {
    const dev = device();
    const r = rng(17);
    const E = 128;
    const logits = randomArray(r, E, -3, 3);
    const mx = Math.max(...logits);
    const ex = Array.from(logits, (v) => Math.exp(v - mx));
    const tot = ex.reduce((s, v) => s + v, 0);
    const probs = ex.map((v) => v / tot);
    const sorted = Array.from({ length: E }, (_, i) => i).sort((x, y) => probs[y]! - probs[x]!);
    const scale = randomArray(r, E, 0.5, 1.5);
    for (const [k, idx] of [[8, sorted], [3, [5, 1000, 7, ...sorted.slice(3)]]] as const) {
      const pb = dev.upload('f32', [E], probs);
      const sb = dev.upload('u32', [E], idx);
      const cb = dev.upload('f32', [E], scale);
      const ids = poisoned(dev, 'u32', [k]);
      const ws = poisoned(dev, 'f32', [k]);
      run(dev, (enc) => moeGatherTopkWeights(enc, {
        softmaxProbs: pb, sortedIndices: sb, perExpertScale: cb, outExpertIds: ids, outWeights: ws, nExperts: E, topK: k,
      }));
      const want = moeGatherTopkWeightsRef(roundedTo('f32', probs), idx, roundedTo('f32', scale), E, k);
      expect(Array.from(ids.read() as Uint32Array)).toEqual(Array.from(want.ids));
      expect(maxRelErr(ws.readNumbers(), want.weights)).toBeLessThan(TOL.f32);
      for (const b of [pb, sb, cb, ids, ws]) b.release();
    }
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('moe_dispatch', [
  // The crate's rule: each buffer at least its size (freeCount).
  {
    fn: 'moeDispatchSort', op: 'moe_dispatch_sort',
    keys: { ids: buf(U32, { table: true }), offsets: out(U32), order: out(U32), nPairs: int, numExperts: int },
    make: (d) => ({ ids: a(d, 'u32', 6), offsets: a(d, 'u32', 6), order: a(d, 'u32', 6), nPairs: 6, numExperts: 4 }),
    fill: (args) => (args.ids as Buffer).writeNumbers([3, 0, 9, 1, 3, 0]),
  },
  {
    fn: 'fusedGeluMul', op: 'fused_gelu_mul',
    keys: { gateOut: buf(['f32', 'bf16'], { freeCount: true }), upOut: buf(['f32', 'bf16'], { freeCount: true }), output: out(['f32', 'bf16'], { freeCount: true }), nElements: int },
    inPlace: [['gateOut', 'output'], ['upOut', 'output']],
    make: (d) => ({ gateOut: a(d, 'bf16', 13), upOut: a(d, 'bf16', 13), output: a(d, 'bf16', 13), nElements: 13 }),
  },
  {
    fn: 'moeAccumulate', op: 'moe_accumulate',
    keys: { accumulator: out(F, { freeCount: true }), expertOutput: buf(F, { freeCount: true }), routingWeight: { kind: 'num' }, nElements: int },
    inPlace: [['accumulator', 'expertOutput']],
    make: (d) => ({ accumulator: a(d, 'f32', 11), expertOutput: a(d, 'f32', 11), routingWeight: 0.25, nElements: 11 }),
  },
  {
    fn: 'moeZeroBuffer', op: 'moe_zero_buffer',
    keys: { buffer: out(F, { freeCount: true }), nElements: int },
    make: (d) => ({ buffer: a(d, 'f32', 7), nElements: 7 }),
  },
  {
    fn: 'moeSwigluFused', op: 'moe_swiglu_fused',
    keys: { gateUp: buf(F, { freeCount: true }), output: out(F, { freeCount: true }), nElements: int },
    make: (d) => ({ gateUp: a(d, 'f32', 10), output: a(d, 'f32', 5), nElements: 5 }),
  },
  {
    fn: 'moeSwigluBatch', op: 'moe_swiglu_batch',
    keys: { gateUp: buf(F, { freeCount: true }), output: out(F, { freeCount: true }), intermediate: int, topK: int },
    make: (d) => ({ gateUp: a(d, 'f32', 30), output: a(d, 'f32', 15), intermediate: 5, topK: 3 }),
  },
  {
    fn: 'moeWeightedSum', op: 'moe_weighted_sum',
    keys: { expertOutputs: buf(F, { freeCount: true }), weights: buf(F, { freeCount: true }), output: out(F, { freeCount: true }), hiddenSize: int, topK: int },
    make: (d) => ({ expertOutputs: a(d, 'f32', 18), weights: a(d, 'f32', 3), output: a(d, 'f32', 6), hiddenSize: 6, topK: 3 }),
  },
  {
    fn: 'moeSwigluSeq', op: 'moe_swiglu_seq',
    keys: { gateUp: buf(['f32', 'bf16'], { freeCount: true }), output: out(['f32', 'bf16'], { freeCount: true }), intermediate: int, topK: int, nTokens: int },
    make: (d) => ({ gateUp: a(d, 'bf16', 60), output: a(d, 'bf16', 30), intermediate: 5, topK: 3, nTokens: 2 }),
  },
  {
    fn: 'moeWeightedSumSeq', op: 'moe_weighted_sum_seq',
    keys: {
      expertOutputs: buf(['f32', 'bf16', 'f16'], { freeCount: true }), weights: buf(F, { freeCount: true }),
      output: out(['f32', 'bf16', 'f16'], { freeCount: true }), hiddenSize: int, topK: int, nTokens: int,
    },
    make: (d) => ({ expertOutputs: a(d, 'bf16', 36), weights: a(d, 'f32', 6), output: a(d, 'f32', 12), hiddenSize: 6, topK: 3, nTokens: 2 }),
  },
  {
    fn: 'moeGatherTopkWeights', op: 'moe_gather_topk_weights',
    keys: {
      softmaxProbs: buf(F, { freeCount: true }), sortedIndices: buf(U32, { freeCount: true, table: true }), perExpertScale: buf(F, { freeCount: true }),
      outExpertIds: out(U32, { freeCount: true }), outWeights: out(F, { freeCount: true }), nExperts: int, topK: int,
    },
    make: (d) => ({
      softmaxProbs: a(d, 'f32', 6), sortedIndices: a(d, 'u32', 6), perExpertScale: a(d, 'f32', 6), outExpertIds: a(d, 'u32', 2),
      outWeights: a(d, 'f32', 2), nExperts: 6, topK: 2,
    }),
    fill: (args) => (args.sortedIndices as Buffer).writeNumbers([4, 1, 0, 2, 3, 5]),
  },
]);
