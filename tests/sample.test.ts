// sample: the packers against the .metal declarations, the references
// against hand-computed values and Philox4x32-10's published known answers,
// every validation rule, and on every backend: argmax and top-k (one and two
// passes, ties, NaN, -0, k past n, mlx-native's own launches), softmax_sample,
// Philox's known answers on the device, and the sampler: the same tokens as
// the reference away from rounding boundaries (the whole-row passes too, with
// ties at the top-p cut across slices and more keys at the cut than a slice's
// record lists), its distribution under a chi-square test, and each filter
// excluding exactly what it should.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/sample.metal' with { type: 'text' };
import cudaSrc from '../shaders/cuda/sample.cu' with { type: 'text' };
import {
  ARGMAX_SLICE,
  SAMPLE_FAMILY,
  SAMPLE_KERNELS,
  SAMPLE_HIST_WORDS,
  SAMPLE_ITEMS,
  SAMPLE_MAX_K,
  SAMPLE_REC_WORDS,
  SAMPLE_SOURCES,
  SAMPLE_STATE_WORDS,
  SAMPLE_SUM_WORDS,
  argmax,
  argmaxScratchElements,
  argmaxSlice,
  packArgmaxParams,
  packSampleParams,
  packTopKParams,
  philox4x32,
  planSample,
  planTopK,
  sample,
  sampleCandidates,
  sampleMassPasses,
  sampleScratchElements,
  sampleSlice,
  softmaxSample,
  topK,
  topKScratchElements,
  topKSlice,
  type SampleArgs,
  argmaxRef,
  orderKey,
  philox4x32_10,
  sampleLogits,
  sampleRef,
  sampleRowRef,
  sampleUniform,
  softmaxSampleRef,
  topKRef,
  type SampleOptions,
} from '../ts/ops/sample.ts';
import { describeBackends, describeValidation, expectInvalid, maxRelErr, poisoned, randomArray, rng, runsOnEmulator, TARGET_LIMITS, run, TOL } from './helpers.ts';
import { launchOf } from '../ts/plan.ts';
import type { Buffer, Device } from '../ts/index.ts';
import { a, buf, F, int, opContract, out, U32 } from './op-contract.ts';

// Random123's tests/kat_vectors, the three philox4x32 10-round lines: counter, key, output.
const PHILOX_KAT: readonly [readonly number[], readonly number[], readonly number[]][] = [
  [[0, 0, 0, 0], [0, 0], [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]],
  [[0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff], [0xffffffff, 0xffffffff], [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]],
  [[0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0], [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]],
];

const F32_MAX = 3.4028234663852886e38;

/** Distinct values, spaced far beyond f32 rounding: a shuffled ramp. */
function distinctLogits(r: ReturnType<typeof rng>, n: number, lo: number, hi: number): Float64Array {
  const v = Float64Array.from({ length: n }, (_, i) => lo + ((hi - lo) * i) / Math.max(1, n - 1));
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(r.next() * (i + 1));
    [v[i], v[j]] = [v[j]!, v[i]!];
  }
  return v;
}

// ---- chi-square ----

/** ln Gamma(a), a > 0 (Lanczos, g = 7, 9 terms: about 1e-15 relative). */
function lnGamma(a: number): number {
  const c = [0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
    12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7];
  if (a < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * a)) - lnGamma(1 - a);
  const x = a - 1;
  let s = c[0]!;
  for (let i = 1; i < 9; i++) s += c[i]! / (x + i);
  const t = x + 7.5;
  return 0.5 * Math.log(2 * Math.PI) + (x + 0.5) * Math.log(t) - t + Math.log(s);
}

/** Q(a, x) = Gamma(a, x) / Gamma(a): the series below a + 1, the continued fraction (modified Lentz) above. */
function gammaQ(a: number, x: number): number {
  if (x <= 0) return 1;
  const front = Math.exp(-x + a * Math.log(x) - lnGamma(a));
  if (x < a + 1) {
    let term = 1 / a;
    let sum = term;
    for (let n = 1; n < 1000 && Math.abs(term) > Math.abs(sum) * 1e-16; n++) {
      term *= x / (a + n);
      sum += term;
    }
    return 1 - sum * front;
  }
  const tiny = 1e-300;
  let b = x + 1 - a;
  let c = 1 / tiny;
  let d = 1 / b;
  let h = d;
  for (let i = 1; i < 1000; i++) {
    const an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (Math.abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (Math.abs(c) < tiny) c = tiny;
    d = 1 / d;
    const del = d * c;
    h *= del;
    if (Math.abs(del - 1) < 1e-16) break;
  }
  return front * h;
}

/**
 * Pearson's chi-square of counts against probabilities over the tokens with
 * p > 0, and its p-value (df = those tokens - 1). Draws of a token with p = 0
 * count as Infinity.
 */
function chiSquare(counts: ArrayLike<number>, probs: ArrayLike<number>, draws: number): { stat: number; df: number; p: number } {
  let stat = 0;
  let cells = 0;
  for (let i = 0; i < probs.length; i++) {
    const e = draws * probs[i]!;
    if (e === 0) {
      if (counts[i]! > 0) return { stat: Infinity, df: 0, p: 0 };
      continue;
    }
    stat += (counts[i]! - e) ** 2 / e;
    cells++;
  }
  const df = cells - 1;
  return { stat, df, p: df === 0 ? 1 : gammaQ(df / 2, stat / 2) };
}

describe('sample param packers match the .metal declarations', () => {
  test('each kernel binds its struct where the ops put it', () => {
    const at: Record<string, [string, number]> = {
      argmax_f32: ['ArgmaxParams', 3], argmax_blocks_f32: ['ArgmaxBlocksParams', 2], argmax_merge_f32: ['ArgmaxBlocksParams', 3],
      top_k_f32: ['TopKParams', 3], top_k_blocks_f32: ['TopKBlocksParams', 2], top_k_merge_f32: ['TopKBlocksParams', 3],
      softmax_sample_f32: ['SoftmaxSampleParams', 4], sample_blocks_f32: ['SampleParams', 3], sample_mass_f32: ['SampleParams', 1],
      sample_finish_f32: ['SampleParams', 3],
      philox4x32_10_u32: ['PhiloxParams', 1],
    };
    expect(Object.keys(at).sort()).toEqual([...SAMPLE_KERNELS].sort());
    for (const [k, [struct, i]] of Object.entries(at)) {
      expect(src).toMatch(new RegExp(`kernel void ${k}\\([^{]*constant ${struct}&\\s+\\w+\\s+\\[\\[buffer\\(${i}\\)\\]\\]`));
    }
  });
  test('mlx-native\'s words: argmax (n), top_k (ne, K); the sampler\'s fields in order', () => {
    expect(Array.from(new Uint32Array(packArgmaxParams({ nElements: 262144 }).buffer))).toEqual([262144]);
    expect(Array.from(new Uint32Array(packTopKParams({ nElements: 262144, k: 64 }).buffer))).toEqual([262144, 64]);
    const a = { rows: 2, vocab: 10000, temperature: 0.7, topK: 40, topP: 0.95, minP: 0.05, repetitionPenalty: 1.1,
      prevTokens: {} as Buffer, nPrev: 3, seed: 2n ** 40n + 5n, counter: 7 } as unknown as SampleArgs;
    const bytes = packSampleParams(a);
    const v = new DataView(bytes.buffer);
    const u = (i: number) => v.getUint32(4 * i, true);
    const f = (i: number) => v.getFloat32(4 * i, true);
    expect(bytes.byteLength).toBe(64);
    expect([u(0), u(1), u(2), u(3), u(4), u(5), u(6)]).toEqual([10000, 2, 2048, 5, 40, 40, 3]);
    expect([f(7), f(8), f(9), f(10)]).toEqual([Math.fround(0.7), Math.fround(0.95), Math.fround(0.05), Math.fround(1.1)]);
    expect([u(11), u(12), u(13), u(14), u(15)]).toEqual([5, 256, 7, 0, 0]);
    expect(new DataView(packSampleParams(a, 2).buffer).getUint32(60, true)).toBe(2);
  });
  test('candidates: top-k\'s, 256 for top-p or min-p over the whole vocabulary, none otherwise', () => {
    expect(sampleCandidates({ vocab: 1000, topK: 20 })).toBe(20);
    expect(sampleCandidates({ vocab: 10, topK: 20 })).toBe(10);
    expect(sampleCandidates({ vocab: 1000, topP: 0.9 })).toBe(SAMPLE_MAX_K);
    expect(sampleCandidates({ vocab: 100, minP: 0.1 })).toBe(100);
    expect(sampleCandidates({ vocab: 1000 })).toBe(0);
    // z, 4 words per slice of 2048, 256 pairs per slice of 4096, histograms, state, a record per slice of
    // 4096, a summary per slice of 2048.
    expect(sampleScratchElements(1, 262144)).toBe(262144 + 4 * 128 + 2 * 256 * 64 + 9216 + 24 + 36 * 64 + 32 * 128);
    expect(sampleScratchElements(2, 7)).toBe(2 * (8 + 4 + 512 + 9216 + 24 + 36 + 32));
    expect([sampleSlice(64), sampleSlice(65)]).toEqual([2048, 4096]);
    expect(argmaxScratchElements(2, 262144)).toBe(2 * 128 * 2);
    // Per slice: k pairs and a summary.
    expect(topKScratchElements(1, 262144, 256)).toBe(64 * (256 * 2 + 32));
    expect(topKScratchElements(3, 5000, 64)).toBe(3 * 3 * (64 * 2 + 32));
    expect(topKSlice(40)).toBe(2048);
  });
  test('the scratch layout\'s words and SAMPLE_ITEMS are the kernels\' (SampleLimits of both sources)', () => {
    const want = { SAMPLE_ITEMS, SAMPLE_HIST_WORDS, SAMPLE_STATE_WORDS, SAMPLE_REC_WORDS, SAMPLE_SUM_WORDS, SAMPLE_MAX_K };
    for (const text of [src, cudaSrc]) {
      for (const [name, value] of Object.entries(want)) expect([name, Number(new RegExp(`\\b${name} = (\\d+)`).exec(text)?.[1])]).toEqual([name, value]);
    }
  });
  test('the whole-row passes: top-k 0 with top-p (three) or min-p alone (one), past 256 tokens, T > 0', () => {
    expect(sampleMassPasses({ vocab: 262144, temperature: 1, topP: 0.95 })).toEqual([0, 1, 2]);
    expect(sampleMassPasses({ vocab: 262144, temperature: 1, topP: 0.95, minP: 0.05 })).toEqual([0, 1, 2]);
    expect(sampleMassPasses({ vocab: 262144, temperature: 1, minP: 0.05 })).toEqual([2]);
    expect(sampleMassPasses({ vocab: 262144, temperature: 1, topK: 64, topP: 0.95 })).toEqual([]);
    expect(sampleMassPasses({ vocab: 262144, temperature: 0, topP: 0.95 })).toEqual([]);
    expect(sampleMassPasses({ vocab: 262144, temperature: 1 })).toEqual([]);
    expect(sampleMassPasses({ vocab: 256, temperature: 1, topP: 0.5 })).toEqual([]);
    expect(sampleMassPasses({ vocab: 257, temperature: 1, topP: 0.5 })).toEqual([0, 1, 2]);
  });
});

describe('sample references against hand-computed values', () => {
  test('the order: NaN above +inf, -0 equal to +0, then by value', () => {
    const ordered = [NaN, Infinity, 3, 1e-30, 0, -1e-30, -2, -Infinity];
    for (let i = 1; i < ordered.length; i++) expect(orderKey(ordered[i - 1]!)).toBeGreaterThan(orderKey(ordered[i]!));
    expect(orderKey(-0)).toBe(orderKey(0));
    expect(orderKey(-NaN)).toBe(orderKey(NaN));
  });
  test('argmax and top-k: ties to the lowest index, NaN first, padding past n', () => {
    expect(Array.from(argmaxRef([1, 5, 5, 2, -0, 0, 0, -1], 2, 4).index)).toEqual([1, 0]);
    expect(Array.from(argmaxRef([1, NaN, 9, NaN], 1, 4).index)).toEqual([1]);
    expect(Array.from(argmaxRef([-Infinity, -Infinity], 1, 2).index)).toEqual([0]);
    const t = topKRef([3, 1, 3, 2, 3], 1, 5, 4);
    expect(Array.from(t.indices)).toEqual([0, 2, 4, 3]);
    const p = topKRef([1, 2], 1, 2, 3);
    expect(Array.from(p.indices)).toEqual([1, 0, 0xffffffff]);
    expect(Array.from(p.values)).toEqual([2, 1, -Infinity]);
  });
  test('Philox4x32-10: Random123\'s known answers', () => {
    for (const [ctr, key, want] of PHILOX_KAT) expect(philox4x32_10(ctr, key) as number[]).toEqual([...want]);
  });
  test('softmax_sample: the first CDF entry that reaches the value', () => {
    const r = softmaxSampleRef([0, Math.log(3)], 2, 1, 0.25);
    expect(r.token).toBe(0);
    expect(r.probs[1]).toBeCloseTo(0.75, 14);
    expect(softmaxSampleRef([0, Math.log(3)], 2, 1, 0.26).token).toBe(1);
    expect(softmaxSampleRef([0, 0], 2, 1, 0).token).toBe(0);
  });
  test('penalty: positive logits divided, negative multiplied, once per id, ids past the vocabulary ignored', () => {
    const o: SampleOptions = { temperature: 2, repetitionPenalty: 1.5, prevTokens: [0, 1, 1, 1, 99, 3], nPrev: 6, seed: 0, counter: 0 };
    expect(Array.from(sampleLogits([3, -3, 0, 6, NaN, Infinity], 6, 0, o))).toEqual([1, -2.25, 0, 2, -Infinity, F32_MAX]);
  });
  test('filters on [ln 8, ln 4, ln 2, ln 1, ln 1]: the kept prefix by hand', () => {
    const x = [Math.log(8), Math.log(4), Math.log(2), 0, 0];
    const kept = (o: Partial<SampleOptions>) => sampleRowRef(x, 5, 0, { temperature: 1, seed: 1, counter: 0, ...o }).kept.slice().sort();
    expect(kept({})).toEqual([0, 1, 2, 3, 4]);
    expect(kept({ topK: 2 })).toEqual([0, 1]);
    // masses 8/16, 4/16, 2/16, 1/16, 1/16: the predecessors of token 2 hold 12/16
    expect(kept({ topP: 0.75 })).toEqual([0, 1]);
    expect(kept({ topP: 0.76 })).toEqual([0, 1, 2]);
    // top-p within the top-3 set (14 of mass): 12/14 < 0.9, so token 2 stays
    expect(kept({ topK: 3, topP: 0.9 })).toEqual([0, 1, 2]);
    expect(kept({ minP: 0.25 })).toEqual([0, 1, 2]);
    expect(kept({ minP: 0.26 })).toEqual([0, 1]);
    // the tie at the top-p cut: the lower index first
    expect(kept({ topP: 0.9 })).toEqual([0, 1, 2, 3]);
    const r = sampleRowRef(x, 5, 0, { temperature: 1, topK: 2, seed: 1, counter: 0 });
    expect(r.probs[0]).toBeCloseTo(2 / 3, 14);
    expect(r.logprob).toBeCloseTo(Math.log(r.probs[r.token]!), 14);
    expect(sampleRowRef(x, 5, 0, { temperature: 0, seed: 1, counter: 0 }).token).toBe(0);
  });
  test('the uniform: Philox word 0 of (counter lo, counter hi, row, 0) under the seed, top 24 bits', () => {
    const want = (philox4x32_10([7, 1, 3, 0], [0x12345678, 9])[0] >>> 8) / 2 ** 24;
    expect(sampleUniform(9n * 2n ** 32n + 0x12345678n, 2 ** 32 + 7, 3)).toBe(want);
  });
});

describeValidation('sample validation', ({ enc, buf }) => {
  type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
  test('argmax: every rule', () => {
    const base = () => ({ rows: 2, nElements: 5000, input: buf('f32', 10000), outIndex: buf('u32', 2), outValue: buf('f32', 2),
      scratch: buf('u32', argmaxScratchElements(2, 5000)) as Buffer | undefined });
    const same = buf('u32', 8);
    const cases: Case[] = [
      [{ rows: 0 }, 'rows', 'a positive integer', '0'],
      [{ nElements: 1.5 }, 'nElements', 'a positive integer', '1.5'],
      [{ rows: 2 ** 32 }, 'rows', 'at most 2^32 - 1', `${2 ** 32}`],
      [{ nElements: 2 ** 32 }, 'nElements', 'at most 2^32 - 1', `${2 ** 32}`],
      [{ nElements: 65535 * 2048 + 1 }, 'nElements', '65535 slices of 2048', `${65535 * 2048 + 1}`],
      [{ rows: 2 ** 30, nElements: 2 ** 24 }, 'rows * nElements', 'a product of integers at most 2^53 - 1', `${2 ** 30} * ${2 ** 24}`],
      [{ input: buf('bf16', 10000) }, 'input.dtype', 'f32', 'bf16'],
      [{ outIndex: buf('i32', 2) }, 'outIndex.dtype', 'u32', 'i32'],
      [{ outValue: buf('u32', 2) }, 'outValue.dtype', 'f32', 'u32'],
      [{ scratch: buf('f32', argmaxScratchElements(2, 5000)) }, 'scratch.dtype', 'u32', 'f32'],
      [{ input: buf('f32', 9999) }, 'input.elementCount', '10000', '9999'],
      [{ outIndex: buf('u32', 1) }, 'outIndex.elementCount', '2', '1'],
      [{ outValue: buf('f32', 3) }, 'outValue.elementCount', '2', '3'],
      [{ scratch: buf('u32', 7) }, 'scratch.elementCount', `${argmaxScratchElements(2, 5000)}`, '7'],
      [{ input: 3 }, 'input', 'a Buffer', '3'],
      [{ outIndex: same.view('u32', [2]), scratch: undefined, outValue: same.view('f32', [2]) }, 'outIndex', 'a buffer other than outValue', 'the buffer of outValue'],
    ];
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => argmax(enc(), { ...base(), ...m } as never), 'argmax', arg, expected, actual);
    const x = buf('f32', 10000);
    expectInvalid(() => argmax(enc(), { ...base(), input: x, outValue: x.view('f32', [2]) }), 'argmax', 'outValue', 'a buffer other than input', 'a view overlapping input');
  });
  test('top_k: every rule', () => {
    const base = () => ({ rows: 2, nElements: 300, k: 10, input: buf('f32', 600), outIndices: buf('u32', 20), outValues: buf('f32', 20) });
    const cases: Case[] = [
      [{ k: 0 }, 'k', 'a positive integer', '0'],
      [{ k: 257 }, 'k', 'at most SAMPLE_MAX_K (256)', '257'],
      [{ rows: -1 }, 'rows', 'a positive integer', '-1'],
      [{ nElements: 65535 * 4096 + 1, k: 100 }, 'nElements', '65535 slices of 4096', `${65535 * 4096 + 1}`],
      [{ input: buf('f16', 600) }, 'input.dtype', 'f32', 'f16'],
      [{ outIndices: buf('f32', 20) }, 'outIndices.dtype', 'u32', 'f32'],
      [{ outValues: buf('f32', 10) }, 'outValues.elementCount', '20', '10'],
      [{ outIndices: buf('u32', 30) }, 'outIndices.elementCount', '20', '30'],
      [{ scratch: buf('u32', 5) }, 'scratch.elementCount', `${topKScratchElements(2, 300, 10)}`, '5'],
      [{ scratch: 'x' }, 'scratch', 'a Buffer', 'x'],
    ];
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => topK(enc(), { ...base(), ...m } as never), 'top_k', arg, expected, actual);
    const y = buf('f32', 600);
    expectInvalid(() => topK(enc(), { ...base(), input: y, outValues: y.view('f32', [20], 64) }), 'top_k', 'outValues', 'a buffer other than input', 'a view overlapping input');
  });
  test('softmax_sample: every rule', () => {
    const base = () => ({ nElements: 8, temperature: 1, randomVal: 0.5, logits: buf('f32', 8), scratch: buf('f32', 8),
      outToken: buf('u32', 1), outLogprob: buf('f32', 1) });
    const cases: Case[] = [
      [{ nElements: 0 }, 'nElements', 'a positive integer', '0'],
      [{ nElements: 2 ** 24 + 1 }, 'nElements', 'at most 2^24', `${2 ** 24 + 1}`],
      [{ temperature: 0 }, 'temperature', 'a finite number > 0', '0'],
      [{ temperature: NaN }, 'temperature', 'a finite number > 0', 'NaN'],
      [{ randomVal: 1 }, 'randomVal', 'a number in [0, 1)', '1'],
      [{ randomVal: -0.1 }, 'randomVal', 'a number in [0, 1)', '-0.1'],
      [{ randomVal: 0.99999999 }, 'randomVal', 'a number in [0, 1) (as an f32)', '0.99999999'],
      [{ logits: buf('u32', 8) }, 'logits.dtype', 'f32', 'u32'],
      [{ scratch: buf('f32', 9) }, 'scratch.elementCount', '8', '9'],
      [{ outToken: buf('u32', 2) }, 'outToken.elementCount', '1', '2'],
      [{ outLogprob: buf('u32', 1) }, 'outLogprob.dtype', 'f32', 'u32'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => softmaxSample(enc(), { ...base(), ...m } as never), 'softmax_sample', arg, expected, actual);
    }
    const l = buf('f32', 8);
    expectInvalid(() => softmaxSample(enc(), { ...base(), logits: l, scratch: l }), 'softmax_sample', 'scratch', 'a buffer other than logits', 'the buffer of logits');
  });
  test('sample: every rule', () => {
    const base = () => ({ rows: 2, vocab: 100, temperature: 1, seed: 1, counter: 2, logits: buf('f32', 200), prevTokens: buf('u32', 6) as Buffer | undefined,
      nPrev: 3, outToken: buf('u32', 2), outLogprob: buf('f32', 2), scratch: buf('u32', sampleScratchElements(2, 100)) });
    const cases: Case[] = [
      [{ rows: 0 }, 'rows', 'a positive integer', '0'],
      [{ vocab: 2 ** 24 + 1 }, 'vocab', 'at most 2^24', `${2 ** 24 + 1}`],
      [{ temperature: -1 }, 'temperature', 'a finite number >= 0', '-1'],
      [{ temperature: Infinity }, 'temperature', 'a finite number >= 0', 'Infinity'],
      [{ topK: 257 }, 'topK', 'an integer in [0, 256]', '257'],
      [{ topK: 1.5 }, 'topK', 'an integer in [0, 256]', '1.5'],
      [{ topP: 0 }, 'topP', 'a number in (0, 1]', '0'],
      [{ topP: 1.5 }, 'topP', 'a number in (0, 1]', '1.5'],
      [{ minP: -0.1 }, 'minP', 'a number in [0, 1]', '-0.1'],
      [{ minP: NaN }, 'minP', 'a number in [0, 1]', 'NaN'],
      [{ repetitionPenalty: 0 }, 'repetitionPenalty', 'a finite number > 0', '0'],
      [{ seed: -1 }, 'seed', 'an integer in [0, 2^64)', '-1'],
      [{ seed: 2n ** 64n }, 'seed', 'an integer in [0, 2^64)', `${2n ** 64n}`],
      [{ counter: 1.5 }, 'counter', 'an integer in [0, 2^64)', '1.5'],
      [{ counter: '3' }, 'counter', 'an integer in [0, 2^64)', '3'],
      [{ nPrev: 0 }, 'nPrev', 'a positive integer', '0'],
      [{ nPrev: undefined }, 'nPrev', 'a positive integer', 'undefined'],
      [{ logits: buf('bf16', 200) }, 'logits.dtype', 'f32', 'bf16'],
      [{ prevTokens: buf('i32', 6) }, 'prevTokens.dtype', 'u32', 'i32'],
      [{ prevTokens: buf('u32', 5) }, 'prevTokens.elementCount', '6', '5'],
      [{ outToken: buf('f32', 2) }, 'outToken.dtype', 'u32', 'f32'],
      [{ outLogprob: buf('f32', 1) }, 'outLogprob.elementCount', '2', '1'],
      [{ scratch: buf('u32', 100) }, 'scratch.elementCount', `${sampleScratchElements(2, 100)}`, '100'],
      [{ scratch: buf('f32', sampleScratchElements(2, 100)) }, 'scratch.dtype', 'u32', 'f32'],
    ];
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => sample(enc(), { ...base(), ...m } as never), 'sample', arg, expected, actual);
    const s = buf('u32', sampleScratchElements(2, 100));
    expectInvalid(() => sample(enc(), { ...base(), scratch: s, outToken: s.view('u32', [2]) }), 'sample', 'outToken', 'a buffer other than scratch', 'a view overlapping scratch');
    // Without prevTokens, nPrev is not read.
    sample(enc(), { ...base(), prevTokens: undefined, nPrev: undefined });
  });
  test('the CUDA launches: slice passes of 8 items a thread, whole-row passes of 1024 threads a slice', () => {
    const vocab = 262144;
    const logits = buf('f32', 2 * vocab);
    const scratch = buf('u32', sampleScratchElements(2, vocab));
    const launches = (o: Partial<SampleArgs>) =>
      planSample({ rows: 2, vocab, temperature: 1, seed: 1, counter: 2, logits, outToken: buf('u32', 2), outLogprob: buf('f32', 2), scratch, ...o },
        TARGET_LIMITS.cuda).dispatches.map((d) => [d.kernel, launchOf(d, 'cuda').grid.join('x'), launchOf(d, 'cuda').threads[0]]);
    const mass = (y: number) => ['sample_mass_f32', `2x${y}x1`, 1024];
    expect(launches({ topP: 0.95 })).toEqual([['sample_blocks_f32', '2x64x1', 512], mass(64), mass(64), mass(64), ['sample_finish_f32', '2x1x1', 1024]]);
    expect(launches({ minP: 0.05 })).toEqual([['sample_blocks_f32', '2x64x1', 512], mass(64), ['sample_finish_f32', '2x1x1', 1024]]);
    // 128 slices' 64 candidates, 8 a thread; 20 each, 8 a thread (320, rounded up); 64 slices' 256, 16 a thread.
    expect(launches({ topK: 64, topP: 0.95 })).toEqual([['sample_blocks_f32', '2x128x1', 256], ['sample_finish_f32', '2x1x1', 1024]]);
    expect(launches({ topK: 20, topP: 0.8 })).toEqual([['sample_blocks_f32', '2x128x1', 256], ['sample_finish_f32', '2x1x1', 512]]);
    expect(launches({ topK: 256 })).toEqual([['sample_blocks_f32', '2x64x1', 512], ['sample_finish_f32', '2x1x1', 1024]]);
    expect(launches({})).toEqual([['sample_blocks_f32', '2x128x1', 256], ['sample_finish_f32', '2x1x1', 1024]]);
    expect(launches({ temperature: 0 })).toEqual([['sample_blocks_f32', '2x128x1', 256], ['sample_finish_f32', '2x1x1', 256]]);
    const top = planTopK({ rows: 2, nElements: vocab, k: 256, input: logits, outIndices: buf('u32', 512), outValues: buf('f32', 512),
      scratch: buf('u32', topKScratchElements(2, vocab, 256)) }, TARGET_LIMITS.cuda);
    expect(top.dispatches.map((d) => [d.kernel, launchOf(d, 'cuda').grid.join('x'), launchOf(d, 'cuda').threads[0]]))
      .toEqual([['top_k_blocks_f32', '2x64x1', 512], ['top_k_merge_f32', '2x1x1', 1024]]);
  });
  test('philox4x32: every rule', () => {
    const base = () => ({ n: 3, key: [1, 2], counter: [0, 0, 0, 0], output: buf('u32', 12) });
    const cases: Case[] = [
      [{ n: 0 }, 'n', 'a positive integer', '0'],
      [{ n: 2 ** 30 + 1 }, 'n', 'at most 2^30', `${2 ** 30 + 1}`],
      [{ key: [1] }, 'key', 'an array of 2 integers in [0, 2^32)', '[1]'],
      [{ key: [1, 2 ** 32] }, 'key', 'an array of 2 integers in [0, 2^32)', `[1, ${2 ** 32}]`],
      [{ counter: [0, 0, 0, -1] }, 'counter', 'an array of 4 integers in [0, 2^32)', '[0, 0, 0, -1]'],
      [{ output: buf('f32', 12) }, 'output.dtype', 'u32', 'f32'],
      [{ output: buf('u32', 11) }, 'output.elementCount', '12', '11'],
    ];
    for (const [m, arg, expected, actual] of cases) expectInvalid(() => philox4x32(enc(), { ...base(), ...m } as never), 'philox4x32', arg, expected, actual);
  });
});

describeBackends('sample parity', ({ device }) => {
  test('philox4x32: Random123\'s known answers on the device, and the 128-bit counter carry', () => {
    const dev = device();
    for (const [ctr, key, want] of PHILOX_KAT) {
      const out = poisoned(dev, 'u32', [1, 4]);
      run(dev, (e) => philox4x32(e, { output: out, n: 1, key, counter: ctr }));
      expect(Array.from(out.read())).toEqual([...want]);
      out.release();
    }
    // Blocks past a word boundary: counter 0xfffffffe + j carries into words 1..3.
    const n = 600;
    const out = poisoned(dev, 'u32', [n, 4]);
    const ctr = [0xfffffffe, 0xffffffff, 0xffffffff, 5];
    run(dev, (e) => philox4x32(e, { output: out, n, key: [3, 4], counter: ctr }));
    const got = out.read();
    for (const j of [0, 1, 2, 3, 599]) {
      const c0 = (ctr[0]! + j) % 2 ** 32;
      const carry = ctr[0]! + j >= 2 ** 32 ? 1 : 0;
      const c = carry ? [c0, 0, 0, 6] : [c0, ...ctr.slice(1)];
      expect(Array.from(got.slice(4 * j, 4 * j + 4))).toEqual(philox4x32_10(c, [3, 4]));
    }
    out.release();
  });

  test('argmax: one pass and two, every size class, 262144 (Gemma 4\'s vocabulary)', () => {
    const dev = device();
    const shapes: [number, number][] = [[1, 1], [3, 5], [2, 31], [2, 33], [1, 257], [2, 1000], [3, 2048], [2, 2049], [1, 4099], [2, 9000], [1, 262144]];
    const over: string[] = [];
    for (const [rows, n] of shapes) {
      const r = rng(rows * 31 + n);
      const x = randomArray(r, rows * n, -8, 8);
      const input = dev.upload('f32', [rows, n], x);
      const want = argmaxRef(input.readNumbers(), rows, n);
      for (const twoPass of [false, true]) {
        const outIndex = poisoned(dev, 'u32', [rows]);
        const outValue = poisoned(dev, 'f32', [rows]);
        const scratch = twoPass ? dev.alloc('u32', [argmaxScratchElements(rows, n)]) : undefined;
        run(dev, (e) => argmax(e, { input, outIndex, outValue, rows, nElements: n, scratch }));
        if (Array.from(outIndex.read()).join() !== Array.from(want.index).join() || Array.from(outValue.readNumbers()).join() !== Array.from(want.value).join()) {
          over.push(`[${rows}, ${n}] ${twoPass ? 'two passes' : 'one'}`);
        }
        for (const b of [outIndex, outValue, scratch]) b?.release();
      }
      input.release();
    }
    expect(over).toEqual([]);
  });

  test('argmax: ties to the lowest index across slices, NaN above +inf, -0 equal to +0, all -inf', () => {
    const dev = device();
    // Rows of an odd length take the scalar scans; of a multiple of 4 the vector-wise ones (CUDA), where
    // rows 5-7 put the ties, NaNs and zeros inside one 16-byte vector.
    for (const n of [3 * ARGMAX_SLICE + 17, 3 * ARGMAX_SLICE + 16]) {
      const rows = 8;
      const x = new Float64Array(rows * n).fill(-1);
      x[0 * n + 3000] = 7; x[0 * n + 2100] = 7; x[0 * n + 6000] = 7;   // row 0: 2100
      x[1 * n + 5000] = Infinity; x[1 * n + 4100] = NaN; x[1 * n + 6100] = NaN;  // row 1: first NaN, 4100
      for (let i = 0; i < n; i++) x[2 * n + i] = i % 2 === 0 ? -0 : 0;           // row 2: 0
      x.fill(-Infinity, 3 * n, 4 * n);                                          // row 3: 0, -inf
      x[4 * n + n - 1] = 1e-30; x[4 * n + 10] = -0; x[4 * n + 20] = 0;          // row 4: the last
      x[5 * n + 4100] = Infinity; x[5 * n + 4102] = NaN; x[5 * n + 4103] = NaN; x[5 * n + 4111] = NaN;  // row 5: 4102
      x[6 * n + 11] = 3; x[6 * n + 10] = 3; x[6 * n + 4097] = 3; x[6 * n + 2] = 2;  // row 6: 10
      x.fill(-2, 7 * n, 8 * n); x[7 * n + 2049] = 0; x[7 * n + 2050] = -0; x[7 * n + 2048] = -0;  // row 7: 2048, -0
      const input = dev.upload('f32', [rows, n], x);
      const want = [2100, 4100, 0, 0, n - 1, 4102, 10, 2048];
      expect(Array.from(argmaxRef(input.readNumbers(), rows, n).index)).toEqual(want);
      for (const scratch of [undefined, dev.alloc('u32', [argmaxScratchElements(rows, n)])]) {
        const outIndex = poisoned(dev, 'u32', [rows]);
        const outValue = poisoned(dev, 'f32', [rows]);
        run(dev, (e) => argmax(e, { input, outIndex, outValue, rows, nElements: n, scratch }));
        expect(Array.from(outIndex.read())).toEqual(want);
        const v = outValue.read() as Float32Array;
        expect([v[0], Number.isNaN(v[1]), Object.is(v[2], -0), v[3], v[4], Number.isNaN(v[5]), v[6], Object.is(v[7], -0)])
          .toEqual([7, true, true, -Infinity, Math.fround(1e-30), true, 3, true]);
        for (const b of [outIndex, outValue, scratch]) b?.release();
      }
      input.release();
    }
  });

  test('argmax: many rows take longer slices, ties to the lowest index across them and in their last part', () => {
    expect([argmaxSlice(1, 262144), argmaxSlice(64, 262144), argmaxSlice(256, 8197), argmaxSlice(1024, 2049)])
      .toEqual([ARGMAX_SLICE, 16 * ARGMAX_SLICE, 4 * ARGMAX_SLICE, 16 * ARGMAX_SLICE]);
    const dev = device();
    const [rows, n] = [256, 8197];  // slices of 8192: two a row, the second of 5
    const x = randomArray(rng(512), rows * n, -8, 8);
    for (let r = 0; r < rows; r += 3) {
      x[r * n + n - 1 - (r % 5)] = 9;                 // a maximum in the short last slice
      if (r % 2 === 0) x[r * n + 8191 - (r % 7)] = 9;  // tied at the first slice's end: that one
    }
    const input = dev.upload('f32', [rows, n], x);
    const want = argmaxRef(input.readNumbers(), rows, n);
    const outIndex = poisoned(dev, 'u32', [rows]);
    const outValue = poisoned(dev, 'f32', [rows]);
    const scratch = dev.alloc('u32', [argmaxScratchElements(rows, n)]);
    run(dev, (e) => argmax(e, { input, outIndex, outValue, rows, nElements: n, scratch }));
    expect(Array.from(outIndex.read())).toEqual(Array.from(want.index));
    expect(Array.from(outValue.readNumbers())).toEqual(Array.from(want.value));
    expect(outIndex.read()[6]).toBe(8191 - 6);
    for (const b of [input, outIndex, outValue, scratch]) b.release();
  });

  test('argmax_f32 at mlx-native\'s launch and at odd threadgroup sizes', () => {
    const dev = device();
    dev.kernels.register(SAMPLE_FAMILY, SAMPLE_SOURCES, SAMPLE_KERNELS);
    const pipe = dev.kernels.pipeline('argmax_f32');
    for (const [n, threads] of [[100, 128], [5000, 1024], [5000, 40], [77, 96], [3, 1]] as const) {
      const x = randomArray(rng(n + threads), n, -3, 3);
      const input = dev.upload('f32', [n], x);
      const outIndex = poisoned(dev, 'u32', [1]);
      const outValue = poisoned(dev, 'f32', [1]);
      run(dev, (e) => e.dispatch(pipe, {
        buffers: [input, outIndex, outValue], bytes: [, , , packArgmaxParams({ nElements: n })],
        threadgroupMemory: [threads * 4, threads * 4],
      }, [1, 1, 1], [threads, 1, 1]));
      expect(outIndex.read()[0]).toBe(argmaxRef(input.readNumbers(), 1, n).index[0]!);
      for (const b of [input, outIndex, outValue]) b.release();
    }
  });

  test('top_k: exact and sorted, one pass and two, k up to 256 over 262144', () => {
    const dev = device();
    const emu = runsOnEmulator(dev);
    const shapes: [rows: number, n: number, k: number][] = [
      [1, 1, 1], [2, 5, 3], [2, 5, 8], [3, 100, 256], [2, 1000, 1], [2, 1000, 64], [1, 4099, 100], [2, 2049, 256], [2, 9000, 40],
      [1, 262144, 256], [1, 262144, 40], ...(emu ? [] : [[4, 262144, 256], [1, 152064, 20]] as [number, number, number][]),
    ];
    const over: string[] = [];
    for (const [rows, n, k] of shapes) {
      // Quantized values: many equal ones, so ties cross slices and the cut.
      const r = rng(rows * 7 + n + k);
      const x = Float64Array.from({ length: rows * n }, () => Math.round(r.uniform(-50, 50)) / 4);
      const input = dev.upload('f32', [rows, n], x);
      const want = topKRef(input.readNumbers(), rows, n, k);
      for (const twoPass of [false, true]) {
        if (!twoPass && n === 262144 && !emu && rows > 1) continue;
        const outIndices = poisoned(dev, 'u32', [rows, k]);
        const outValues = poisoned(dev, 'f32', [rows, k]);
        const scratch = twoPass ? dev.alloc('u32', [topKScratchElements(rows, n, k)]) : undefined;
        run(dev, (e) => topK(e, { input, outIndices, outValues, rows, nElements: n, k, scratch }));
        if (Array.from(outIndices.read()).join() !== Array.from(want.indices).join() || Array.from(outValues.readNumbers()).join() !== Array.from(want.values).join()) {
          over.push(`[${rows}, ${n}] k ${k} ${twoPass ? 'two passes' : 'one'}`);
        }
        for (const b of [outIndices, outValues, scratch]) b?.release();
      }
      input.release();
    }
    expect(over).toEqual([]);
  });

  test('top_k: distinct random values, NaN and infinities ranked, all-equal rows', () => {
    const dev = device();
    const rows = 3, n = 6000, k = 50;
    const x = Float64Array.from(randomArray(rng(3), rows * n, -4, 4));
    x[100] = NaN; x[5999] = Infinity; x[4000] = -Infinity; x[200] = NaN;
    x.fill(2.5, 2 * n, 3 * n);
    const input = dev.upload('f32', [rows, n], x);
    const want = topKRef(input.readNumbers(), rows, n, k);
    for (const scratch of [undefined, dev.alloc('u32', [topKScratchElements(rows, n, k)])]) {
      const outIndices = poisoned(dev, 'u32', [rows, k]);
      const outValues = poisoned(dev, 'f32', [rows, k]);
      run(dev, (e) => topK(e, { input, outIndices, outValues, rows, nElements: n, k, scratch }));
      expect(Array.from(outIndices.read())).toEqual(Array.from(want.indices));
      expect(Array.from(outIndices.read().slice(0, 3))).toEqual([100, 200, 5999]);
      expect(Array.from(outIndices.read().slice(2 * k, 2 * k + 3))).toEqual([0, 1, 2]);
    }
  });

  test('top_k_f32 at mlx-native\'s launches (k <= 128; tg 128 / 64 / 32, tg * k floats and uints: 32 KiB at k = 128)', () => {
    const dev = device();
    dev.kernels.register(SAMPLE_FAMILY, SAMPLE_SOURCES, SAMPLE_KERNELS);
    const pipe = dev.kernels.pipeline('top_k_f32');
    for (const k of [1, 2, 3, 32, 33, 64, 65, 128]) {
      const tg = k <= 32 ? 128 : k <= 64 ? 64 : 32;
      const n = 3000;
      const input = dev.upload('f32', [n], randomArray(rng(k), n, -1, 1));
      const outIndices = poisoned(dev, 'u32', [k]);
      const outValues = poisoned(dev, 'f32', [k]);
      run(dev, (e) => e.dispatch(pipe, {
        buffers: [input, outIndices, outValues], bytes: [, , , packTopKParams({ nElements: n, k })],
        threadgroupMemory: [tg * k * 4, tg * k * 4],
      }, [1, 1, 1], [tg, 1, 1]));
      expect(Array.from(outIndices.read())).toEqual(Array.from(topKRef(input.readNumbers(), 1, n, k).indices));
      for (const b of [input, outIndices, outValues]) b.release();
    }
  });

  test('softmax_sample: the reference\'s token away from CDF boundaries, its log-probability and the probabilities', () => {
    const dev = device();
    for (const [n, temperature] of [[1, 1], [10, 1], [1000, 0.7], [262144, 1.3]] as const) {
      const logits = dev.upload('f32', [n], randomArray(rng(n), n, -6, 6));
      const x = logits.readNumbers();
      const scratch = poisoned(dev, 'f32', [n]);
      const outToken = poisoned(dev, 'u32', [1]);
      const outLogprob = poisoned(dev, 'f32', [1]);
      for (const randomVal of [0, 0.1, 0.5, 0.93, 0.999]) {
        const want = softmaxSampleRef(x, n, temperature, randomVal);
        run(dev, (e) => softmaxSample(e, { logits, scratch, outToken, outLogprob, nElements: n, temperature, randomVal }));
        const t = outToken.read()[0]!;
        // f32 CDF sums: the token may differ only where randomVal is within 1e-5 of a CDF boundary.
        const near = Math.min(...Array.from(want.cdf, (c) => Math.abs(c - randomVal)));
        if (near > 1e-5) expect(t).toBe(want.token);
        // ln p of the token: p within f32's tolerance, relative, so ln p within about 1e-5 (1e-4 leaves room).
        expect(Math.abs(outLogprob.read()[0]! - Math.log(want.probs[t]!))).toBeLessThan(1e-4);
        expect(maxRelErr(scratch.readNumbers(), want.probs, Number.MIN_VALUE)).toBeLessThan(TOL.f32);
      }
      for (const b of [logits, scratch, outToken, outLogprob]) b.release();
    }
  });

  /** Runs the sampler; returns tokens and logprobs. */
  function draw(dev: Device, x: ArrayLike<number>, rows: number, vocab: number, o: SampleOptions & { prev?: number[] }): { tokens: Uint32Array; logprobs: Float32Array } {
    const logits = dev.upload('f32', [rows, vocab], x);
    const prevTokens = o.prevTokens === undefined ? undefined : dev.upload('u32', [rows, o.nPrev!], o.prevTokens);
    const outToken = dev.alloc('u32', [rows]);
    outToken.fill(0xabcdef);
    const outLogprob = poisoned(dev, 'f32', [rows]);
    const scratch = poisoned(dev, 'u32', [sampleScratchElements(rows, vocab)]);
    run(dev, (e) => sample(e, { logits, prevTokens, outToken, outLogprob, scratch, rows, vocab, temperature: o.temperature,
      topK: o.topK, topP: o.topP, minP: o.minP, repetitionPenalty: o.repetitionPenalty, nPrev: o.nPrev, seed: o.seed, counter: o.counter }));
    const tokens = outToken.read() as Uint32Array;
    const logprobs = outLogprob.read() as Float32Array;
    for (const b of [logits, prevTokens, outToken, outLogprob, scratch]) b?.release();
    return { tokens, logprobs };
  }

  test('sample: the reference\'s tokens and log-probabilities on every path, vocabularies 1 to 262144', () => {
    const dev = device();
    const emu = runsOnEmulator(dev);
    const configs: [name: string, o: Omit<SampleOptions, 'seed' | 'counter'>][] = [
      ['greedy', { temperature: 0 }],
      ['temperature', { temperature: 0.8 }],
      ['top-k 40', { temperature: 0.7, topK: 40 }],
      ['top-k 256 + top-p', { temperature: 1, topK: 256, topP: 0.9 }],
      ['top-k + top-p + min-p + penalty', { temperature: 0.6, topK: 20, topP: 0.95, minP: 0.05, repetitionPenalty: 1.3 }],
      ['top-p alone', { temperature: 1, topP: 0.9 }],
      ['min-p alone', { temperature: 1.2, minP: 0.2 }],
      ['top-p alone, small nucleus', { temperature: 0.3, topP: 0.8 }],
    ];
    const shapes: [rows: number, vocab: number][] = [[3, 1], [4, 7], [4, 300], [3, 5000], [2, 9000], [1, 262144]];
    const skipped: string[] = [];
    const over: string[] = [];
    let compared = 0;
    for (const [rows, vocab] of shapes) {
      if (emu && vocab === 262144) continue;
      const r = rng(vocab * 13 + rows);
      const x = distinctLogits(r, rows * vocab, -12, 12);
      const nPrev = 5;
      const prevTokens = Array.from({ length: rows * nPrev }, () => Math.floor(r.next() * (vocab + 3)));
      for (const [name, c] of configs) {
        const o: SampleOptions = { ...c, seed: vocab * 7 + 1, counter: 11, ...(c.repetitionPenalty ? { prevTokens, nPrev } : {}) };
        const want = sampleRef(x, rows, vocab, o);
        const got = draw(dev, x, rows, vocab, o);
        for (let row = 0; row < rows; row++) {
          const w = want[row]!;
          // The kernels' f32 sums of weights are within about 1e-6 of the kept
          // mass (none of these rows differs at 1e-6 on the emulator): a row
          // is compared where every decision is 1e-5 away from flipping.
          if (w.margin < 1e-5) {
            skipped.push(`${name} [${rows}, ${vocab}] row ${row}: margin ${w.margin}`);
            continue;
          }
          compared++;
          const t = got.tokens[row]!;
          // f32 sums over up to 2^18 terms: the log of the kept mass to 1e-4.
          if (t !== w.token || !(Math.abs(got.logprobs[row]! - w.logprob) <= 1e-4 * Math.max(1, Math.abs(w.logprob)))) {
            over.push(`${name} [${rows}, ${vocab}] row ${row} (${w.path}): token ${t} logprob ${got.logprobs[row]}, want ${w.token} ${w.logprob}`);
          }
        }
      }
    }
    expect(over).toEqual([]);
    // Rounding boundaries are rare on these inputs: almost every row is
    // compared (on an H100, with the 262144 vocabulary: 4 skipped of 136).
    expect(skipped.length).toBeLessThanOrEqual(Math.ceil(compared / 25));
  });

  test('sample at Gemma 4\'s vocabulary (262144): each path, one row', () => {
    const dev = device();
    const vocab = 262144;
    const x = distinctLogits(rng(262144), vocab, -20, 20);
    for (const c of [{ temperature: 0 }, { temperature: 1 }, { temperature: 0.7, topK: 64, topP: 0.95, minP: 0.05 },
      { temperature: 1, topP: 0.95 }, { temperature: 2, topP: 0.5 }] as Omit<SampleOptions, 'seed' | 'counter'>[]) {
      const o: SampleOptions = { ...c, seed: 99, counter: 1234 };
      const [want] = sampleRef(x, 1, vocab, o);
      const got = draw(dev, x, 1, vocab, o);
      if (want!.margin > 1e-4) expect([got.tokens[0], JSON.stringify(c)]).toEqual([want!.token, JSON.stringify(c)]);
      expect(Math.abs(got.logprobs[0]! - want!.logprob)).toBeLessThan(1e-4 * Math.max(1, Math.abs(want!.logprob)));
    }
  }, 120_000);

  // Distribution: N draws (rows with distinct counters) of one small
  // vocabulary against the reference's probabilities. Pearson's chi-square
  // with a p-value threshold of 1e-6: a correct sampler fails a
  // configuration with probability 1e-6; the seeds are fixed, so the outcome
  // is deterministic. Every kept token has probability >= 0.01, so in 4000
  // draws each appears (a miss has probability below 1e-17): the observed
  // support must equal the kept set exactly.
  const VOCAB = 12;
  const BASE = [2.0, 1.6, 1.5, 1.0, 0.9, 0.5, 0.2, -0.3, -1.0, -0.6, 0.1, 1.2];
  const DRAWS = 4000;
  const FILTERS: [name: string, o: Omit<SampleOptions, 'seed' | 'counter' | 'prevTokens' | 'nPrev'>, prev?: number[]][] = [
    ['temperature 1', { temperature: 1 }],
    ['temperature 0.5, top-k 5', { temperature: 0.5, topK: 5 }],
    ['top-p 0.7', { temperature: 1, topP: 0.7 }],
    ['min-p 0.3', { temperature: 1.3, minP: 0.3 }],
    ['top-k 8, top-p 0.9, min-p 0.1', { temperature: 0.9, topK: 8, topP: 0.9, minP: 0.1 }],
    ['penalty 2 on 0, 3, 11 (twice), -0.6 at 9, 99', { temperature: 1, repetitionPenalty: 2 }, [0, 3, 11, 11, 9, 99]],
  ];
  for (const [name, f, prev] of FILTERS) {
    test(`sample distribution, ${name}: chi-square p > 1e-6, support = the kept set`, () => {
      const dev = device();
      const x = Array.from({ length: DRAWS }, () => BASE).flat();
      const nPrev = prev?.length;
      const prevTokens = prev === undefined ? undefined : Array.from({ length: DRAWS }, () => prev).flat();
      const o: SampleOptions = { ...f, seed: 0x5eed, counter: 42, prevTokens, nPrev };
      const want = sampleRowRef(x, VOCAB, 0, o);
      const got = draw(dev, x, DRAWS, VOCAB, o);
      const counts = new Array<number>(VOCAB).fill(0);
      for (const t of got.tokens) counts[t]!++;
      const support = counts.flatMap((c, i) => (c > 0 ? [i] : []));
      expect(support).toEqual([...want.kept].sort((a, b) => a - b));
      for (const t of want.kept) expect(want.probs[t]!).toBeGreaterThanOrEqual(0.01);
      const { p } = chiSquare(counts, want.probs, DRAWS);
      expect(p).toBeGreaterThan(1e-6);
    });
  }

  test('sample: each filter excludes exactly what it should', () => {
    const dev = device();
    const x = Array.from({ length: DRAWS }, () => BASE).flat();
    const seen = (o: Omit<SampleOptions, 'seed' | 'counter'>): number[] => {
      const got = draw(dev, x, DRAWS, VOCAB, { ...o, seed: 3, counter: 5 });
      return [...new Set(got.tokens)].sort((a, b) => a - b);
    };
    // BASE ranks 0, 1, 2, 11, 3, 4, 5, 6, 10, 7, 9, 8.
    expect(seen({ temperature: 1, topK: 3 })).toEqual([0, 1, 2]);
    expect(seen({ temperature: 1, topK: 1 })).toEqual([0]);
    // e^(z - 2): 1, .670, .607, .449, .368, .333, ...: min-p 0.44 keeps four.
    expect(seen({ temperature: 1, minP: 0.44 })).toEqual([0, 1, 2, 11]);
    // top-p: weights 1, .670, .607, ... of 4.19 in all: 0.3 of it (1.26) is passed at token 1.
    expect(seen({ temperature: 1, topP: 0.3 })).toEqual([0, 1]);
    expect(seen({ temperature: 1, topP: 1e-6 })).toEqual([0]);
    // Five samplings of DRAWS rows each: about a minute under the emulator's random schedule on 2 cores.
  }, 300_000);

  test('sample: temperature 0 is the argmax of the penalized logits; a penalty moves it', () => {
    const dev = device();
    const rows = 6, vocab = 3000;
    const x = Array.from(distinctLogits(rng(5), rows * vocab, -5, 5));
    // Each row's best token penalized (divided by 4): the greedy choice moves to the second best.
    const best = argmaxRef(x, rows, vocab).index;
    const prevTokens = Array.from(best);
    const got = draw(dev, x, rows, vocab, { temperature: 0, repetitionPenalty: 4, prevTokens, nPrev: 1, seed: 0, counter: 0 });
    const penalized = Array.from({ length: rows }, (_, r) => sampleLogits(x, vocab, r, { temperature: 0, repetitionPenalty: 4, prevTokens, nPrev: 1, seed: 0, counter: 0 }));
    const want = penalized.map((z) => argmaxRef(z, 1, vocab).index[0]!);
    expect(Array.from(got.tokens)).toEqual(want);
    expect(Array.from(got.tokens).every((t, r) => t !== best[r])).toBe(true);
    expect(Array.from(got.logprobs)).toEqual(new Array(rows).fill(0));
    const plain = draw(dev, x, rows, vocab, { temperature: 0, seed: 0, counter: 0 });
    expect(Array.from(plain.tokens)).toEqual(Array.from(best));
  });

  test('sample: a draw is reproducible from (seed, counter, row); another counter draws anew', () => {
    const dev = device();
    const rows = 64, vocab = 50;
    const x = Array.from({ length: rows }, () => Array.from({ length: vocab }, (_, i) => Math.sin(i))).flat();
    const o = { temperature: 1, seed: 2n ** 63n + 1n, counter: 2 ** 40 };
    const a = draw(dev, x, rows, vocab, o);
    const b = draw(dev, x, rows, vocab, o);
    const c = draw(dev, x, rows, vocab, { ...o, counter: 2 ** 40 + 1 });
    expect(Array.from(a.tokens)).toEqual(Array.from(b.tokens));
    expect(Array.from(a.tokens)).not.toEqual(Array.from(c.tokens));
    expect(new Set(a.tokens).size).toBeGreaterThan(10);
  });

  test('sample: -inf and NaN logits are never drawn, +inf ones share the mass, a row of -inf gives 0xffffffff', () => {
    const dev = device();
    const vocab = 40;
    const rows = 400;
    const row = Array.from({ length: vocab }, (_, i) => (i % 3 === 0 ? -Infinity : i % 3 === 1 ? NaN : 0.1 * i));
    const x = Array.from({ length: rows }, () => row).flat();
    for (const o of [{ temperature: 1 }, { temperature: 1, topP: 0.9 }, { temperature: 1, topK: 30 }, { temperature: 1, minP: 0.01 }]) {
      const got = draw(dev, x, rows, vocab, { ...o, seed: 1, counter: 1 });
      expect(Array.from(got.tokens).every((t) => t % 3 === 2)).toBe(true);
    }
    const inf = Array.from({ length: vocab }, (_, i) => (i === 7 || i === 30 ? Infinity : i));
    const got = draw(dev, Array.from({ length: rows }, () => inf).flat(), rows, vocab, { temperature: 0.5, seed: 2, counter: 2 });
    const counts = [7, 30].map((t) => Array.from(got.tokens).filter((v) => v === t).length);
    expect(counts[0]! + counts[1]!).toBe(rows);
    expect(chiSquare(counts, [0.5, 0.5], rows).p).toBeGreaterThan(1e-6);
    expect(Array.from(got.logprobs).every((l) => Math.abs(l - Math.log(0.5)) < 1e-6)).toBe(true);
    const dead = draw(dev, [-Infinity, NaN, -Infinity, -Infinity, NaN, -Infinity], 2, 3, { temperature: 1, seed: 0, counter: 0 });
    expect(Array.from(dead.tokens)).toEqual([0xffffffff, 0xffffffff]);
    expect(Array.from(dead.logprobs)).toEqual([-Infinity, -Infinity]);
  });

  test('sample: top-p over the whole vocabulary past the candidates, ties at the cut to the lowest indices', () => {
    const dev = device();
    // 1000 equal logits, top-p 0.5: the first 500 indices (more than the 256 candidates).
    const vocab = 1000, rows = 48;
    const x = new Array<number>(rows * vocab).fill(0.25);
    const got = draw(dev, x, rows, vocab, { temperature: 1, topP: 0.5, seed: 8, counter: 8 });
    expect(Array.from(got.tokens).every((t) => t < 500)).toBe(true);
    expect(Math.max(...got.tokens)).toBeGreaterThan(300);
    expect(Array.from(got.logprobs).every((l) => Math.abs(l - Math.log(1 / 500)) < 1e-4)).toBe(true);
    // Two slices, a flat tail past 256 tokens: min-p 0.9 keeps every token within ln(1/0.9) of the top.
    const v2 = 5000;
    const flat = Array.from({ length: v2 }, (_, i) => (i % 7 === 0 ? 1 : i % 11 === 5 ? 0.5 : 0.95 + (i % 5) * 0.001));
    const want = sampleRowRef(flat, v2, 0, { temperature: 1, minP: 0.9, seed: 4, counter: 4 });
    expect(want.path).toBe('index');
    const d2 = draw(dev, Array.from({ length: 40 }, () => flat).flat(), 40, v2, { temperature: 1, minP: 0.9, seed: 4, counter: 4 });
    const kept = new Set(want.kept);
    expect(kept.size).toBeGreaterThan(4000);
    expect(Array.from(d2.tokens).every((t) => kept.has(t))).toBe(true);
  });

  test('sample: the whole row over several slices (ties at the top-p cut across slices, more keys at the cut than a record lists, min-p)', () => {
    const dev = device();
    const cases: [name: string, rows: number, vocab: number, x: Float64Array, o: Omit<SampleOptions, 'seed' | 'counter'>][] = [];
    // Logits on a grid of 1/8, as bf16 logits repeat values: hundreds of ties at each value, in every slice.
    const r = rng(77);
    const grid = Float64Array.from({ length: 6 * 20000 }, () => Math.round(r.uniform(-40, 40)) / 8);
    cases.push(['ties, top-p 0.5', 6, 20000, grid, { temperature: 1, topP: 0.5 }]);
    cases.push(['ties, top-p 0.9 + min-p 0.3', 6, 20000, grid, { temperature: 1, topP: 0.9, minP: 0.3 }]);
    cases.push(['ties, min-p 0.4 alone', 6, 20000, grid, { temperature: 1, minP: 0.4 }]);
    // 300 values an ulp apart at 1.0: the last round's 1024 keys hold them all, past the 32 a record lists.
    const bits = Uint32Array.from({ length: 4 * 12000 }, () => 0x3f800000 + Math.floor(r.next() * 300));
    const ulps = Float64Array.from(new Float32Array(bits.buffer));
    // Weights within 4e-5 of 1: targets half a token from a boundary.
    cases.push(['record overflow, top-p', 4, 12000, ulps, { temperature: 1, topP: 8400.5 / 12000 }]);
    for (const [name, rows, vocab, x, c] of cases) {
      const o: SampleOptions = { ...c, seed: 5, counter: 77 };
      const want = sampleRef(x, rows, vocab, o);
      const got = draw(dev, x, rows, vocab, o);
      let compared = 0;
      for (let row = 0; row < rows; row++) {
        const w = want[row]!;
        expect([name, w.path]).toEqual([name, 'index']);
        // Equal weights put many decisions near a boundary: those rows are skipped.
        if (w.margin < 1e-5) continue;
        compared++;
        expect([name, row, got.tokens[row]]).toEqual([name, row, w.token]);
        expect(Math.abs(got.logprobs[row]! - w.logprob)).toBeLessThan(1e-4 * Math.max(1, Math.abs(w.logprob)));
      }
      expect([name, compared]).not.toEqual([name, 0]);
    }
  }, 120_000);
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('sample', [
  // The two-pass forms: rows past one slice, with scratch.
  {
    fn: 'argmax', op: 'argmax',
    keys: { input: buf(F), outIndex: out(U32), outValue: out(F), rows: int, nElements: int, scratch: { kind: 'buf?', dtypes: U32, output: true } },
    make: (d) => ({ input: a(d, 'f32', 4200), outIndex: a(d, 'u32', 2), outValue: a(d, 'f32', 2), rows: 2, nElements: 2100, scratch: a(d, 'u32', 8) }),
  },
  {
    fn: 'topK', op: 'top_k',
    keys: {
      input: buf(F), outIndices: out(U32), outValues: out(F), rows: int, nElements: int, k: int,
      scratch: { kind: 'buf?', dtypes: U32, output: true, working: true },
    },
    make: (d) => ({
      // topKScratchElements(2, 2100, 3): 2 rows of 2 slices, 3 pairs and a 32-word summary each
      input: a(d, 'f32', 4200), outIndices: a(d, 'u32', 6), outValues: a(d, 'f32', 6), rows: 2, nElements: 2100, k: 3, scratch: a(d, 'u32', 152),
    }),
  },
  {
    fn: 'topK', op: 'top_k',
    keys: { input: buf(F), outIndices: out(U32), outValues: out(F), rows: int, nElements: int, k: int },
    make: (d) => ({ input: a(d, 'f32', 30), outIndices: a(d, 'u32', 12), outValues: a(d, 'f32', 12), rows: 3, nElements: 10, k: 4 }),
  },
  {
    fn: 'softmaxSample', op: 'softmax_sample',
    keys: {
      logits: buf(F), scratch: out(F), outToken: out(U32), outLogprob: out(F), nElements: int, temperature: { kind: 'nonneg' },
      randomVal: { kind: 'nonneg' },
    },
    make: (d) => ({
      logits: a(d, 'f32', 40), scratch: a(d, 'f32', 40), outToken: a(d, 'u32', 1), outLogprob: a(d, 'f32', 1), nElements: 40,
      temperature: 0.8, randomVal: 0.3,
    }),
  },
  {
    fn: 'sample', op: 'sample',
    keys: {
      logits: buf(F), prevTokens: { kind: 'buf?', dtypes: U32 }, outToken: out(U32), outLogprob: out(F), scratch: out(U32, { working: true }),
      rows: int, vocab: int, temperature: { kind: 'nonneg' }, topK: { kind: 'nonneg?' }, topP: { kind: 'nonneg?' },
      minP: { kind: 'nonneg?' }, repetitionPenalty: { kind: 'nonneg?' }, nPrev: { kind: 'int', readWhen: (x) => x.prevTokens !== undefined },
      seed: { kind: 'free' }, counter: { kind: 'free' },
    },
    make: (d) => ({
      logits: a(d, 'f32', 600), prevTokens: a(d, 'u32', 6), outToken: a(d, 'u32', 2), outLogprob: a(d, 'f32', 2),
      // sampleScratchElements(2, 300): z, stats, candidates, histograms, state, records, summaries per row
      scratch: a(d, 'u32', 2 * (300 + 4 + 2 * 256 + 9216 + 24 + 36 + 32)), rows: 2, vocab: 300, temperature: 0.8, topP: 0.9, minP: 0.05,
      repetitionPenalty: 1.2, nPrev: 3, seed: 5, counter: 9,
    }),
    fill: (args) => (args.prevTokens as Buffer | undefined)?.writeNumbers([1, 7, 299, 0, 300, 0xffffffff]),
  },
  {
    fn: 'philox4x32', op: 'philox4x32',
    keys: { output: out(U32), n: int, key: { kind: 'free' }, counter: { kind: 'free' } },
    make: (d) => ({ output: a(d, 'u32', 12), n: 3, key: [1, 2], counter: [0xffffffff, 4, 5, 6] }),
  },
]);
