// CPU reference of kv_cache_copy: the cache after the writes, float64.

/**
 * A head-major cache [nHeads, capacity, headDim] after
 * cache[h, (seqPosStart + t) % capacity, d] = src[srcTokOffset + t, h, d]
 * for t < nTokens; every other slot keeps its value from `cache` (copied, not
 * changed). src is [srcTokens, nHeads, headDim].
 */
export function kvCacheCopySeqRef(src: ArrayLike<number>, cache: ArrayLike<number>, nHeads: number, headDim: number, capacity: number,
  seqPosStart: number, nTokens: number, srcTokOffset = 0): Float64Array {
  const out = Float64Array.from(cache);
  for (let t = 0; t < nTokens; t++) {
    const slot = (seqPosStart + t) % capacity;
    for (let h = 0; h < nHeads; h++) {
      for (let d = 0; d < headDim; d++) {
        out[(h * capacity + slot) * headDim + d] = src[((srcTokOffset + t) * nHeads + h) * headDim + d]!;
      }
    }
  }
  return out;
}

/**
 * A token-major cache [cacheCap, rowSize] after cache[slot(writePos + t), i] =
 * src[t, i] for t < nNew, slot(p) = p % cacheCap when sliding, else p; other
 * rows keep their values.
 */
export function kvCacheCopyRef(src: ArrayLike<number>, cache: ArrayLike<number>, writePos: number, rowSize: number, nNew: number,
  cacheCap: number, sliding: boolean): Float64Array {
  const out = Float64Array.from(cache);
  for (let t = 0; t < nNew; t++) {
    const slot = sliding ? (writePos + t) % cacheCap : writePos + t;
    for (let i = 0; i < rowSize; i++) out[slot * rowSize + i] = src[t * rowSize + i]!;
  }
  return out;
}

/**
 * The keys (or values) of positions [end - n, end), n = min(end, capacity)
 * for a ring or end for a global cache, in position order, as a head-major
 * cache [nHeads, n, headDim]: what a cache holding those positions at slot
 * position % capacity means, laid out linearly.
 */
export function kvCacheLinearRef(cache: ArrayLike<number>, nHeads: number, headDim: number, capacity: number, end: number,
  ring: boolean): Float64Array {
  const n = ring ? Math.min(end, capacity) : end;
  const out = new Float64Array(nHeads * n * headDim);
  for (let h = 0; h < nHeads; h++) {
    for (let j = 0; j < n; j++) {
      const slot = (end - n + j) % capacity;
      for (let d = 0; d < headDim; d++) out[(h * n + j) * headDim + d] = cache[(h * capacity + slot) * headDim + d]!;
    }
  }
  return out;
}
