// CPU reference of silu_mul: float64 arithmetic.

/** silu(g) = g * sigmoid(g) = g / (1 + exp(-g)). */
export function siluRef(g: number): number {
  return g / (1 + Math.exp(-g));
}

/** output[i] = silu(gate[i]) * up[i]. */
export function siluMulRef(gate: ArrayLike<number>, up: ArrayLike<number>): Float64Array {
  const y = new Float64Array(gate.length);
  for (let i = 0; i < gate.length; i++) y[i] = siluRef(gate[i]!) * up[i]!;
  return y;
}

/** output[r, c] = silu(gateUp[r, c]) * gateUp[r, dim + c], gateUp [rows, 2 * dim] (gate half first). */
export function siluMulHalvesRef(gateUp: ArrayLike<number>, rows: number, dim: number): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < dim; c++) y[r * dim + c] = siluRef(gateUp[2 * r * dim + c]!) * gateUp[2 * r * dim + dim + c]!;
  }
  return y;
}
