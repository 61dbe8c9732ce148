// CPU reference of gelu: float64 arithmetic, the tanh approximation as written.

/** gelu(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). */
export function geluTanhRef(x: number): number {
  return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
}

/** output[i] = gelu(input[i]). */
export function geluRef(input: ArrayLike<number>): Float64Array {
  const y = new Float64Array(input.length);
  for (let i = 0; i < input.length; i++) y[i] = geluTanhRef(input[i]!);
  return y;
}

/** output[i] = gelu(gate[i]) * up[i]. */
export function geluTanhMulRef(gate: ArrayLike<number>, up: ArrayLike<number>): Float64Array {
  const y = new Float64Array(gate.length);
  for (let i = 0; i < gate.length; i++) y[i] = geluTanhRef(gate[i]!) * up[i]!;
  return y;
}

/** output[r, c] = gelu(gateUp[r, c]) * gateUp[r, dim + c], gateUp [rows, 2 * dim] (gate half first). */
export function geluTanhMulHalvesRef(gateUp: ArrayLike<number>, rows: number, dim: number): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < dim; c++) y[r * dim + c] = geluTanhRef(gateUp[2 * r * dim + c]!) * gateUp[2 * r * dim + dim + c]!;
  }
  return y;
}
