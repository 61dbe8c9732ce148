// CPU reference of the embedding family: row gathers by index, float64.

/**
 * out[i, j] = table[min(ids[i], vocab - 1), j] * scale over rows of hidden
 * elements: the embedding lookup (ids past the table read its last row, as
 * the kernels clamp them). scale is applied as given; the kernels hold it as
 * an f32 (pass Math.fround(scale) to compare with them).
 */
export function embeddingRef(table: ArrayLike<number>, ids: ArrayLike<number>, vocab: number, hidden: number, scale = 1): Float64Array {
  const n = ids.length;
  const out = new Float64Array(n * hidden);
  for (let i = 0; i < n; i++) {
    const row = Math.min(ids[i]!, vocab - 1);
    for (let j = 0; j < hidden; j++) out[i * hidden + j] = table[row * hidden + j]! * scale;
  }
  return out;
}

/** out[i, j] = src[min(indices[i], srcRows - 1), j]: gather (index_select) of rows of width elements. */
export function gatherRef(src: ArrayLike<number>, indices: ArrayLike<number>, srcRows: number, width: number): Float64Array {
  return embeddingRef(src, indices, srcRows, width, 1);
}
