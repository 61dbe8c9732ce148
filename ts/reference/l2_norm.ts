// CPU reference of l2_norm: float64 accumulation.

/** y[r, i] = x[r, i] / sqrt(sum_j x[r, j]^2 + eps), rows of dim. */
export function l2NormRef(x: ArrayLike<number>, rows: number, dim: number, eps: number): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    let sq = 0;
    for (let i = 0; i < dim; i++) sq += x[r * dim + i]! * x[r * dim + i]!;
    const inv = 1 / Math.sqrt(sq + eps);
    for (let i = 0; i < dim; i++) y[r * dim + i] = x[r * dim + i]! * inv;
  }
  return y;
}
