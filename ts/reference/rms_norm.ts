// CPU reference of rms_norm: float64 accumulation.

/**
 * y[r, i] = x[r, i] / sqrt(mean_j x[r, j]^2 + eps) * s[i], rows of dim, with
 * s = weight, 1 + weight (onePlus) or 1 (weight null).
 */
export function rmsNormRef(x: ArrayLike<number>, weight: ArrayLike<number> | null, rows: number, dim: number, eps: number,
  onePlus = false): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    let sq = 0;
    for (let i = 0; i < dim; i++) sq += x[r * dim + i]! * x[r * dim + i]!;
    const inv = 1 / Math.sqrt(sq / dim + eps);
    for (let i = 0; i < dim; i++) {
      const s = weight === null ? 1 : onePlus ? 1 + weight[i]! : weight[i]!;
      y[r * dim + i] = x[r * dim + i]! * inv * s;
    }
  }
  return y;
}
