// CPU reference of softmax and softcap: float64 arithmetic.

/** cap * tanh(x / cap), elementwise. */
export function softcapRef(x: ArrayLike<number>, cap: number): Float64Array {
  const y = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) y[i] = cap * Math.tanh(x[i]! / cap);
  return y;
}

/**
 * Softmax of rows of cols over v = c(x * scale) + mask[r % seqQ], c(s) =
 * softcap * tanh(s / softcap) when softcap > 0; a row whose every v is -inf
 * gives zeros.
 */
export function softmaxRef(x: ArrayLike<number>, rows: number, cols: number,
  opts: { scale?: number; softcap?: number; mask?: ArrayLike<number>; seqQ?: number } = {}): Float64Array {
  const scale = opts.scale ?? 1;
  const cap = opts.softcap ?? 0;
  const seqQ = opts.seqQ ?? rows;
  const y = new Float64Array(rows * cols);
  const v = new Float64Array(cols);
  for (let r = 0; r < rows; r++) {
    let m = -Infinity;
    for (let i = 0; i < cols; i++) {
      let t = x[r * cols + i]! * scale;
      if (cap > 0) t = cap * Math.tanh(t / cap);
      if (opts.mask !== undefined) t += opts.mask[(r % seqQ) * cols + i]!;
      v[i] = t;
      m = Math.max(m, t);
    }
    if (m === -Infinity) continue;
    let s = 0;
    for (let i = 0; i < cols; i++) s += Math.exp(v[i]! - m);
    for (let i = 0; i < cols; i++) y[r * cols + i] = Math.exp(v[i]! - m) / s;
  }
  return y;
}
