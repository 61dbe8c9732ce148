// CPU reference of the moe_dispatch family: plain loops, float64.

import { geluTanhRef } from './gelu.ts';

export interface MoeDispatchSortRef {
  /** [numExperts + 2]: offsets[b] = the pairs whose group (min(id, numExperts)) is before b; the last = nPairs */
  offsets: Uint32Array;
  /** [nPairs]: the pairs grouped by expert, increasing within a group (the kernel's order within a group is any) */
  order: Uint32Array;
}

/** The pairs of ids [nPairs] grouped by expert, ids >= numExperts in one last group. */
export function moeDispatchSortRef(ids: ArrayLike<number>, numExperts: number): MoeDispatchSortRef {
  const n = ids.length;
  const offsets = new Uint32Array(numExperts + 2);
  for (let p = 0; p < n; p++) offsets[Math.min(ids[p]!, numExperts) + 1]!++;
  for (let b = 1; b <= numExperts + 1; b++) offsets[b]! += offsets[b - 1]!;
  const cursor = offsets.slice();
  const order = new Uint32Array(n);
  for (let p = 0; p < n; p++) order[cursor[Math.min(ids[p]!, numExperts)]!++] = p;
  return { offsets, order };
}

/** y[r, i] = gelu(gateUp[r, i]) * gateUp[r, dim + i] for rows of [gate | up] (the crate's "swiglu" kernels). */
export function moeSwigluRowsRef(gateUp: ArrayLike<number>, rows: number, dim: number): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    for (let i = 0; i < dim; i++) y[r * dim + i] = geluTanhRef(gateUp[2 * r * dim + i]!) * gateUp[2 * r * dim + dim + i]!;
  }
  return y;
}

/** out[t, d] = sum_k weights[t, k] * y[t, k, d]: y [nTokens, topK, hidden], weights [nTokens, topK]. */
export function moeWeightedSumRef(y: ArrayLike<number>, weights: ArrayLike<number>, nTokens: number, topK: number,
  hidden: number): Float64Array {
  const out = new Float64Array(nTokens * hidden);
  for (let t = 0; t < nTokens; t++) {
    for (let k = 0; k < topK; k++) {
      const w = weights[t * topK + k]!;
      const row = (t * topK + k) * hidden;
      for (let d = 0; d < hidden; d++) out[t * hidden + d]! += w * y[row + d]!;
    }
  }
  return out;
}

/** moe_gather_topk_weights: the first topK sorted indices and their renormalized, scaled probabilities (indices past the experts weigh 0). */
export function moeGatherTopkWeightsRef(probs: ArrayLike<number>, sorted: ArrayLike<number>, scale: ArrayLike<number>, nExperts: number,
  topK: number): { ids: Uint32Array; weights: Float64Array } {
  const ids = new Uint32Array(topK);
  const weights = new Float64Array(topK);
  let sum = 0;
  for (let k = 0; k < topK; k++) {
    ids[k] = sorted[k]!;
    if (ids[k]! < nExperts) sum += probs[ids[k]!]!;
  }
  for (let k = 0; k < topK; k++) {
    const e = ids[k]!;
    weights[k] = e < nExperts && sum > 0 ? (probs[e]! / sum) * scale[e]! : 0;
  }
  return { ids, weights };
}
