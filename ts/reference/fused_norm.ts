// CPU references of the fused RMS norm family: plain loops, float64
// accumulation. Inputs are numbers (bf16 data already decoded); outputs are
// float64, unrounded.

/** 1 / sqrt(mean(x[base .. base+dim)^2) + eps). */
function rmsInv(x: ArrayLike<number>, base: number, dim: number, eps: number): number {
  let sq = 0;
  for (let i = 0; i < dim; i++) {
    const v = x[base + i]!;
    sq += v * v;
  }
  return 1 / Math.sqrt(sq / dim + eps);
}

function scalarAt(scalar: ArrayLike<number> | undefined, i: number): number {
  if (scalar === undefined) return 1;
  return scalar.length === 1 ? scalar[0]! : scalar[i]!;
}

/**
 * output = (residual + input * rmsInv(input) * weight) * scalar, per row of dim.
 * scalar: absent (1), one element (broadcast) or dim elements.
 */
export function fusedNormAddRef(
  residual: ArrayLike<number>, input: ArrayLike<number>, weight: ArrayLike<number>,
  rows: number, dim: number, eps: number, scalar?: ArrayLike<number>,
): Float64Array {
  const out = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    const base = r * dim;
    const inv = rmsInv(input, base, dim, eps);
    for (let i = 0; i < dim; i++) {
      const normed = input[base + i]! * inv * weight[i]!;
      out[base + i] = (residual[base + i]! + normed) * scalarAt(scalar, i);
    }
  }
  return out;
}

/**
 * sum = residual + input; normed = sum * rmsInv(sum) * weight * scalar, per row.
 * scalar: absent (1), one element (broadcast) or dim elements.
 */
export function fusedResidualNormRef(
  residual: ArrayLike<number>, input: ArrayLike<number>, weight: ArrayLike<number>,
  rows: number, dim: number, eps: number, scalar?: ArrayLike<number>,
): { normed: Float64Array; sum: Float64Array } {
  const sum = new Float64Array(rows * dim);
  for (let j = 0; j < rows * dim; j++) sum[j] = residual[j]! + input[j]!;
  const normed = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    const base = r * dim;
    const inv = rmsInv(sum, base, dim, eps);
    for (let i = 0; i < dim; i++) {
      normed[base + i] = sum[base + i]! * inv * weight[i]! * scalarAt(scalar, i);
    }
  }
  return { normed, sum };
}
