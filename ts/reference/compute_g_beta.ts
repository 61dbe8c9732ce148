// CPU reference of compute_g_beta: float64.

/** PyTorch's softplus with beta 1 and threshold 20: x above 20, else log(1 + exp(x)). */
export function softplusRef(x: number): number {
  return x > 20 ? x : Math.log1p(Math.exp(x));
}

/**
 * g[i] = -exp(aLog[h]) * softplus(a[i] + dtBias[h]); beta[i] = 1 / (1 + exp(-b[i])),
 * over [B, T, H] with h = i % H.
 */
export function computeGBetaRef(
  h: number, a: ArrayLike<number>, b: ArrayLike<number>, aLog: ArrayLike<number>, dtBias: ArrayLike<number>,
): { g: Float64Array; beta: Float64Array } {
  const g = new Float64Array(a.length);
  const beta = new Float64Array(a.length);
  for (let i = 0; i < a.length; i++) {
    const hh = i % h;
    g[i] = -Math.exp(aLog[hh]!) * softplusRef(a[i]! + dtBias[hh]!);
    beta[i] = 1 / (1 + Math.exp(-b[i]!));
  }
  return { g, beta };
}
