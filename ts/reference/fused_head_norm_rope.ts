// CPU reference of fused_head_norm_rope: float64, the closed form.

import { ropeNeoxRef } from './rope.ts';

/**
 * Rows [seqLen * nHeads, headDim]: n = x / sqrt(mean(x^2) + eps) * weight,
 * then NeoX rope over the first halfRopeDim pairs (exponent over headDim).
 */
export function fusedHeadNormRopeRef(x: ArrayLike<number>, weight: ArrayLike<number> | undefined, positions: ArrayLike<number>,
  seqLen: number, nHeads: number, headDim: number, halfRopeDim: number, eps: number, theta: number,
  freqFactors?: ArrayLike<number>): Float64Array {
  const n = new Float64Array(seqLen * nHeads * headDim);
  for (let r = 0; r < seqLen * nHeads; r++) {
    let sq = 0;
    for (let i = 0; i < headDim; i++) sq += x[r * headDim + i]! ** 2;
    const inv = 1 / Math.sqrt(sq / headDim + eps);
    for (let i = 0; i < headDim; i++) n[r * headDim + i] = x[r * headDim + i]! * inv * (weight === undefined ? 1 : weight[i]!);
  }
  if (halfRopeDim === 0) return n;
  return ropeNeoxRef(n, positions, seqLen, nHeads, headDim, 2 * halfRopeDim, theta, freqFactors);
}

/** [seqLen, nHeads, headDim] to [nHeads, seqLen, headDim]. */
export function permuteTokensHeads(y: ArrayLike<number>, seqLen: number, nHeads: number, headDim: number): Float64Array {
  const out = new Float64Array(seqLen * nHeads * headDim);
  for (let t = 0; t < seqLen; t++) {
    for (let h = 0; h < nHeads; h++) {
      for (let i = 0; i < headDim; i++) out[(h * seqLen + t) * headDim + i] = y[(t * nHeads + h) * headDim + i]!;
    }
  }
  return out;
}
