// CPU references of the sample family: float64 arithmetic on the f32 inputs,
// the order of shaders/sample.metal (by value, NaN above +inf, -0 equal to
// +0, ties to the lowest index), and Philox4x32-10 in 32-bit integers.

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The kernels' order key of an f32 value: unsigned order = value order, NaN above +inf, -0 as +0. */
export function orderKey(v: number): number {
  f32[0] = v;
  const b = u32[0]!;
  if ((b & 0x7fffffff) >>> 0 > 0x7f800000) return 0xffffffff;
  if ((b & 0x7fffffff) === 0) return 0x80000000;
  return (b & 0x80000000) !== 0 ? ~b >>> 0 : (b | 0x80000000) >>> 0;
}

/** (a, ia) ranks before (b, ib) in the kernels' order. */
export function ranksBefore(a: number, ia: number, b: number, ib: number): boolean {
  const ka = orderKey(a), kb = orderKey(b);
  return ka > kb || (ka === kb && ia < ib);
}

/** Per row of x [rows, n]: the index and value of the largest element. */
export function argmaxRef(x: ArrayLike<number>, rows: number, n: number): { index: Uint32Array; value: Float64Array } {
  const index = new Uint32Array(rows);
  const value = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let best = 0;
    for (let i = 1; i < n; i++) if (ranksBefore(x[r * n + i]!, i, x[r * n + best]!, best)) best = i;
    index[r] = best;
    value[r] = x[r * n + best]!;
  }
  return { index, value };
}

/** Indices 0..n-1 of one row in rank order. */
function rankOrder(v: ArrayLike<number>, n: number, at = 0): number[] {
  const keys = Array.from({ length: n }, (_, i) => orderKey(v[at + i]!));
  return Array.from({ length: n }, (_, i) => i).sort((a, b) => keys[b]! - keys[a]! || a - b);
}

/** Per row: the k best (value, index) in rank order; past n, (-inf, 0xffffffff). */
export function topKRef(x: ArrayLike<number>, rows: number, n: number, k: number): { indices: Uint32Array; values: Float64Array } {
  const indices = new Uint32Array(rows * k).fill(0xffffffff);
  const values = new Float64Array(rows * k).fill(-Infinity);
  for (let r = 0; r < rows; r++) {
    const order = rankOrder(x, n, r * n);
    for (let j = 0; j < Math.min(k, n); j++) {
      indices[r * k + j] = order[j]!;
      values[r * k + j] = x[r * n + order[j]!]!;
    }
  }
  return { indices, values };
}

/**
 * mlx-native's softmax_sample: p = softmax(logits / temperature); the token
 * is the first i whose CDF reaches randomVal (n - 1 if none does).
 */
export function softmaxSampleRef(logits: ArrayLike<number>, n: number, temperature: number, randomVal: number):
  { token: number; logprob: number; probs: Float64Array; cdf: Float64Array } {
  let m = -Infinity;
  for (let i = 0; i < n; i++) m = Math.max(m, logits[i]! / temperature);
  const probs = new Float64Array(n);
  let s = 0;
  for (let i = 0; i < n; i++) s += probs[i] = Math.exp(logits[i]! / temperature - m);
  const cdf = new Float64Array(n);
  let c = 0;
  for (let i = 0; i < n; i++) {
    probs[i]! /= s;
    c += probs[i]!;
    cdf[i] = c;
  }
  let token = cdf.findIndex((v) => v >= randomVal);
  if (token < 0) token = n - 1;
  return { token, logprob: Math.log(probs[token]!), probs, cdf };
}

// ---- Philox4x32-10 ----

/** The high and low 32 bits of a * b (32-bit unsigned). */
function mulhilo(a: number, b: number): [number, number] {
  const lo = Math.imul(a, b) >>> 0;
  const aH = a >>> 16, aL = a & 0xffff, bH = b >>> 16, bL = b & 0xffff;
  const mid1 = aH * bL, mid2 = aL * bH;
  const low = aL * bL;
  const carry = Math.floor(((low >>> 16) + (mid1 & 0xffff) + (mid2 & 0xffff)) / 65536);
  const hi = (aH * bH + Math.floor(mid1 / 65536) + Math.floor(mid2 / 65536) + carry) >>> 0;
  return [hi, lo];
}

/** Philox4x32-10 (Random123's philox4x32, 10 rounds) of a 128-bit counter (word 0 lowest) under a 64-bit key. */
export function philox4x32_10(counter: readonly number[], key: readonly number[]): [number, number, number, number] {
  let [c0, c1, c2, c3] = counter.map((w) => w >>> 0) as [number, number, number, number];
  let [k0, k1] = key.map((w) => w >>> 0) as [number, number];
  for (let r = 0; r < 10; r++) {
    const [hi0, lo0] = mulhilo(0xd2511f53, c0);
    const [hi1, lo1] = mulhilo(0xcd9e8d57, c2);
    [c0, c1, c2, c3] = [(hi1 ^ c1 ^ k0) >>> 0, lo1, (hi0 ^ c3 ^ k1) >>> 0, lo0];
    k0 = (k0 + 0x9e3779b9) >>> 0;
    k1 = (k1 + 0xbb67ae85) >>> 0;
  }
  return [c0, c1, c2, c3];
}

/** The words of a 64-bit integer, [lo, hi]. */
function words(v: number | bigint): [number, number] {
  if (typeof v === 'bigint') return [Number(v & 0xffff_ffffn), Number((v >> 32n) & 0xffff_ffffn)];
  return [v % 2 ** 32, Math.floor(v / 2 ** 32)];
}

/** The sampler's uniform for a row: Philox word 0's top 24 bits / 2^24. */
export function sampleUniform(seed: number | bigint, counter: number | bigint, row: number): number {
  const [s0, s1] = words(seed);
  const [c0, c1] = words(counter);
  return (philox4x32_10([c0, c1, row, 0], [s0, s1])[0] >>> 8) / 2 ** 24;
}

// ---- the filtered sampler ----

export interface SampleOptions {
  temperature: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repetitionPenalty?: number;
  /** [rows, nPrev] previous ids (any >= vocab ignored). */
  prevTokens?: ArrayLike<number>;
  nPrev?: number;
  seed: number | bigint;
  counter: number | bigint;
}

export interface SampleRow {
  /** The drawn token (0xffffffff where every z is -inf). */
  token: number;
  logprob: number;
  /** The kept set's probabilities over the vocabulary (0 outside it). */
  probs: Float64Array;
  /** The kept tokens, in the order the draw walks. */
  kept: number[];
  /** 'greedy', 'candidates' (rank order) or 'index' (index order): the kernels' path. */
  path: 'greedy' | 'candidates' | 'index' | 'none';
  /** The uniform of the draw. */
  u: number;
  /**
   * How far the decisions are from flipping, relative: the nearest CDF
   * boundary to the draw's target, the top-p and min-p boundaries at the
   * cut, and the overflow decision. f32 arithmetic in the kernels may decide
   * otherwise only where this is about 1e-6 or less.
   */
  margin: number;
}

/** z of one row: penalty, temperature (T = 0: x'), NaN as -inf, +inf as the largest f32. */
export function sampleLogits(x: ArrayLike<number>, vocab: number, row: number, o: SampleOptions): Float64Array {
  const z = new Float64Array(vocab);
  const pen = o.repetitionPenalty ?? 1;
  const flagged = new Uint8Array(vocab);
  if (o.prevTokens !== undefined && pen !== 1) {
    const np = o.nPrev ?? 0;
    for (let j = 0; j < np; j++) {
      const t = o.prevTokens[row * np + j]!;
      if (t < vocab) flagged[t] = 1;
    }
  }
  const T = Math.fround(o.temperature);
  for (let i = 0; i < vocab; i++) {
    let v = x[row * vocab + i]!;
    if (Number.isNaN(v)) {
      z[i] = -Infinity;
      continue;
    }
    if (flagged[i]) v = v > 0 ? v / Math.fround(pen) : v * Math.fround(pen);
    v = T > 0 ? v / T : v;
    z[i] = Math.min(v, 3.4028234663852886e38);
  }
  return z;
}

/** The sampler on one row (see ts/ops/sample.ts: the same filters, order and draw). */
export function sampleRowRef(x: ArrayLike<number>, vocab: number, row: number, o: SampleOptions): SampleRow {
  const z = sampleLogits(x, vocab, row, o);
  const probs = new Float64Array(vocab);
  const u = sampleUniform(o.seed, o.counter, row);
  const order = Array.from({ length: vocab }, (_, i) => i).sort((a, b) => (z[b]! - z[a]!) || a - b);
  const zmax = z[order[0]!]!;
  if (zmax === -Infinity) return { token: 0xffffffff, logprob: -Infinity, probs, kept: [], path: 'none', u, margin: Infinity };
  if (o.temperature === 0) {
    probs[order[0]!] = 1;
    return { token: order[0]!, logprob: 0, probs, kept: [order[0]!], path: 'greedy', u, margin: Infinity };
  }
  const w = z.map((v) => Math.exp(v - zmax));
  let mass = 0;
  for (const v of w) mass += v;
  const topK = o.topK ?? 0;
  const topP = Math.fround(o.topP ?? 1);
  const minP = Math.fround(o.minP ?? 0);
  const cand = topK > 0 ? Math.min(topK, vocab) : topP < 1 || minP > 0 ? Math.min(256, vocab) : 0;
  const limit = topK > 0 ? Math.min(topK, vocab) : vocab;
  let ref = 0;
  for (let r = 0; r < limit; r++) ref += w[order[r]!]!;
  if (topK === 0) ref = mass;
  let margin = Infinity;
  let kept = 0;
  let len = 0;
  for (let r = 0; r < limit; r++) {
    const wr = w[order[r]!]!;
    if (topP < 1) {
      margin = Math.min(margin, Math.abs(kept - topP * ref) / ref);
      if (!(kept < topP * ref)) break;
    }
    if (minP > 0) {
      margin = Math.min(margin, Math.abs(wr - minP) / Math.max(minP, 1e-30));
      if (!(wr >= minP)) break;
    }
    kept += wr;
    len = r + 1;
  }
  // With topK = 0 the candidates hold the kept set unless it takes them all.
  const candidatesPath = cand > 0 && !(topK === 0 && len >= cand && cand < vocab);
  const set = order.slice(0, len);
  const walk = candidatesPath ? set : [...set].sort((a, b) => a - b);
  for (const t of set) probs[t] = w[t]! / kept;
  const target = u * kept;
  let c = 0;
  let token = walk[walk.length - 1]!;
  let found = false;
  for (const t of walk) {
    const wt = w[t]!;
    if (wt <= 0) continue;
    margin = Math.min(margin, Math.abs(c + wt - target) / kept);
    if (!found && c + wt > target) {
      token = t;
      found = true;
    }
    c += wt;
  }
  return { token, logprob: Math.log(w[token]! / kept), probs, kept: walk, path: candidatesPath ? 'candidates' : 'index', u, margin };
}

/** The sampler on every row of logits [rows, vocab]. */
export function sampleRef(x: ArrayLike<number>, rows: number, vocab: number, o: SampleOptions): SampleRow[] {
  return Array.from({ length: rows }, (_, r) => sampleRowRef(x, vocab, r, o));
}
