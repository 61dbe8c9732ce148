// CPU reference of the per-head RMS norm + SiLU gate: plain loops, float64.

/** output[r, d] = x[r, d] / sqrt(mean_d x[r, :]^2 + eps) * weight[d] * silu(z[r, d]). */
export function ssmNormGateRef(
  attnOut: ArrayLike<number>, weight: ArrayLike<number>, z: ArrayLike<number>,
  rows: number, dV: number, eps: number,
): Float64Array {
  const out = new Float64Array(rows * dV);
  for (let r = 0; r < rows; r++) {
    const base = r * dV;
    let sq = 0;
    for (let d = 0; d < dV; d++) sq += attnOut[base + d]! * attnOut[base + d]!;
    const inv = 1 / Math.sqrt(sq / dV + eps);
    for (let d = 0; d < dV; d++) {
      const zv = z[base + d]!;
      const silu = zv / (1 + Math.exp(-zv));
      out[base + d] = attnOut[base + d]! * inv * weight[d]! * silu;
    }
  }
  return out;
}
