// CPU reference of the dense family: float64 products and sums.

/**
 * y[b, i, j] = sum_k x[b, i, k] * w[b / (batch / wBatch), j, k]: x
 * [batch, m, k], w [wBatch, n, k] (rows [out, in], as checkpoints store
 * them), y [batch, m, n]; batch a multiple of wBatch.
 */
export function denseRef(x: ArrayLike<number>, w: ArrayLike<number>, m: number, n: number, k: number, batch = 1,
  wBatch = 1): Float64Array {
  return denseSums(x, w, m, n, k, batch, wBatch, false);
}

/**
 * sum_k |x[b, i, k] * w[b / r, j, k]|, laid out as denseRef's y: the scale
 * of each output's rounding error (a sum in floating point errs by a few
 * units of its precision times the sum of its terms' magnitudes, whatever
 * the sum itself is).
 */
export function denseAbsRef(x: ArrayLike<number>, w: ArrayLike<number>, m: number, n: number, k: number, batch = 1,
  wBatch = 1): Float64Array {
  return denseSums(x, w, m, n, k, batch, wBatch, true);
}

function denseSums(x: ArrayLike<number>, w: ArrayLike<number>, m: number, n: number, k: number, batch: number, wBatch: number,
  abs: boolean): Float64Array {
  const r = batch / wBatch;
  const y = new Float64Array(batch * m * n);
  for (let b = 0; b < batch; b++) {
    const wb = Math.floor(b / r) * n * k;
    for (let i = 0; i < m; i++) {
      const xo = (b * m + i) * k;
      for (let j = 0; j < n; j++) {
        const wo = wb + j * k;
        let s = 0;
        for (let q = 0; q < k; q++) {
          const p = x[xo + q]! * w[wo + q]!;
          s += abs ? Math.abs(p) : p;
        }
        y[(b * m + i) * n + j] = s;
      }
    }
  }
  return y;
}
