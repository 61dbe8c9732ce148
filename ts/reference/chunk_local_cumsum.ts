// CPU reference of the chunk-local cumulative sum over time: plain loops, float64.

/**
 * g: [b, t, h], h innermost. Returns out[b, t, h] = sum of g[b, s, h] for s
 * from the start of t's chunk (floor(t / bt) * bt) through t.
 */
export function chunkLocalCumsumRef(
  g: ArrayLike<number>, b: number, t: number, h: number, bt: number,
): Float64Array {
  const out = new Float64Array(b * t * h);
  for (let ib = 0; ib < b; ib++) {
    for (let ih = 0; ih < h; ih++) {
      let acc = 0;
      for (let it = 0; it < t; it++) {
        if (it % bt === 0) acc = 0;
        const at = (ib * t + it) * h + ih;
        acc += g[at]!;
        out[at] = acc;
      }
    }
  }
  return out;
}
