// CPU reference of sigmoid_mul: float64 arithmetic.

/** sigmoid(g) = 1 / (1 + exp(-g)). */
export function sigmoidRef(g: number): number {
  return 1 / (1 + Math.exp(-g));
}

/** output[i] = x[i] * sigmoid(gate[i]). */
export function sigmoidMulRef(x: ArrayLike<number>, gate: ArrayLike<number>): Float64Array {
  const y = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) y[i] = x[i]! * sigmoidRef(gate[i]!);
  return y;
}

/** output[r, c] = gateX[r, dim + c] * sigmoid(gateX[r, c]), gateX [rows, 2 * dim] (gate half first). */
export function sigmoidMulHalvesRef(gateX: ArrayLike<number>, rows: number, dim: number): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < dim; c++) y[r * dim + c] = gateX[2 * r * dim + dim + c]! * sigmoidRef(gateX[2 * r * dim + c]!);
  }
  return y;
}
