// CPU reference of the causal depthwise conv1d with rolling state (ssm_conv):
// plain loops, float64 accumulation.

export interface SsmConvRefShape {
  b: number;
  t: number;
  c: number;
  ks: number;
  silu: boolean;
}

/**
 * Per (b, c), xx = state[b, c, :] ++ x[b, :, c] (zeros for the state when absent):
 *   y[b, t, c] = act(sum_{j < ks} weight[c, j] * xx[t + j]),  act = SiLU when silu
 *   newState[b, c, i] = xx[t + i], i < ks - 1
 * Layouts: x, y [B, T, C]; weight [C, KS]; state, newState [B, C, KS-1].
 */
export function ssmConvRef(
  s: SsmConvRefShape, x: ArrayLike<number>, weight: ArrayLike<number>, state?: ArrayLike<number>,
): { y: Float64Array; newState: Float64Array } {
  const { b: B, t: T, c: C, ks: KS } = s;
  const hist = KS - 1;
  const y = new Float64Array(B * T * C);
  const newState = new Float64Array(B * C * hist);
  const xx = new Float64Array(hist + T);
  for (let b = 0; b < B; b++) {
    for (let c = 0; c < C; c++) {
      for (let i = 0; i < hist; i++) xx[i] = state === undefined ? 0 : state[(b * C + c) * hist + i]!;
      for (let t = 0; t < T; t++) xx[hist + t] = x[(b * T + t) * C + c]!;
      for (let t = 0; t < T; t++) {
        let acc = 0;
        for (let j = 0; j < KS; j++) acc += weight[c * KS + j]! * xx[t + j]!;
        y[(b * T + t) * C + c] = s.silu ? acc / (1 + Math.exp(-acc)) : acc;
      }
      for (let i = 0; i < hist; i++) newState[(b * C + c) * hist + i] = xx[T + i]!;
    }
  }
  return { y, newState };
}
