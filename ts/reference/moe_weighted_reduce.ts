// CPU reference of moe_weighted_reduce: float64.

/**
 * output[t, d] = sum_k expertW[t, k] * yExpert[t, k, d] + sigmoid(shLogit[t])
 * * yShared[t, d] (+ residual[t, d] when given); and, with abs, the same sum
 * of |terms| (the scale of its rounding error).
 */
export function moeWeightedReduceRef(expertW: ArrayLike<number>, yExpert: ArrayLike<number>, shLogit: ArrayLike<number>,
  yShared: ArrayLike<number>, residual: ArrayLike<number> | null, nTokens: number, topK: number, h: number, abs = false): Float64Array {
  const f = abs ? Math.abs : (v: number): number => v;
  const out = new Float64Array(nTokens * h);
  for (let t = 0; t < nTokens; t++) {
    const gate = 1 / (1 + Math.exp(-shLogit[t]!));
    for (let d = 0; d < h; d++) {
      let acc = 0;
      for (let k = 0; k < topK; k++) acc += f(expertW[t * topK + k]! * yExpert[(t * topK + k) * h + d]!);
      acc += f(gate * yShared[t * h + d]!);
      if (residual !== null) acc += f(residual[t * h + d]!);
      out[t * h + d] = acc;
    }
  }
  return out;
}
