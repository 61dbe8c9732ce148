// CPU reference of fused MoE routing: plain loops, float64.

export interface MoeRoutingRef {
  /** [nTokens, topK] */
  expertIds: Uint32Array;
  /** [nTokens, topK] */
  weights: Float64Array;
}

/**
 * Per token: softmax over numExperts logits; the topK experts by probability,
 * largest first, equal probabilities in increasing expert index; their
 * probabilities renormalized to sum 1, then multiplied by perExpertScale.
 * When the selected probabilities do not sum to a positive number (every
 * logit -inf), every weight is 0.
 */
export function moeRoutingRef(
  logits: ArrayLike<number>, perExpertScale: ArrayLike<number>,
  nTokens: number, numExperts: number, topK: number,
): MoeRoutingRef {
  const expertIds = new Uint32Array(nTokens * topK);
  const weights = new Float64Array(nTokens * topK);
  const p = new Float64Array(numExperts);
  for (let tok = 0; tok < nTokens; tok++) {
    const base = tok * numExperts;
    let mx = -Infinity;
    for (let e = 0; e < numExperts; e++) mx = Math.max(mx, logits[base + e]!);
    let total = 0;
    for (let e = 0; e < numExperts; e++) {
      p[e] = mx === -Infinity ? 0 : Math.exp(logits[base + e]! - mx);
      total += p[e]!;
    }
    for (let e = 0; e < numExperts; e++) p[e] = total > 0 ? p[e]! / total : 0;

    const order = Array.from({ length: numExperts }, (_, e) => e);
    order.sort((a, b) => (p[b]! - p[a]!) || (a - b));
    let topSum = 0;
    for (let k = 0; k < topK; k++) topSum += p[order[k]!]!;
    for (let k = 0; k < topK; k++) {
      const e = order[k]!;
      expertIds[tok * topK + k] = e;
      weights[tok * topK + k] = topSum > 0 ? (p[e]! / topSum) * perExpertScale[e]! : 0;
    }
  }
  return { expertIds, weights };
}
