// CPU reference of the quantized_matmul_id_ggml family: each expert's GGML
// blocks dequantized in float64 from the documented formats
// (ggmlDequantizeRef, ts/reference/quantized_matmul_ggml.ts), then the
// per-pair products of ts/reference/dense_matmul_id.ts.

import { ggmlRowBytesOf } from '../ops/quantized_matmul_ggml.ts';
import type { GgmlIdSizes } from '../ops/quantized_matmul_id_ggml.ts';
import { denseMatmulIdRef, type IdRef } from './dense_matmul_id.ts';
import { ggmlDequantizeRef } from './quantized_matmul_ggml.ts';

/** The sizes of a product: nTokens rows of x, topK slots each, nExperts experts of n rows, expertStride bytes apart (the op's). */
export type GgmlIdSizesRef = GgmlIdSizes;

/**
 * y [nTokens * topK, n]: y[p, j] = sum_k x[p / topK, k] w_e[j, k], e =
 * ids[p], w_e expert e's rows dequantized from the bytes at e * expertStride
 * of weight; zeros for e >= nExperts (abs 1 there), with sum_k |x w| per output.
 */
export function ggmlMatmulIdRef(x: ArrayLike<number>, weight: Uint8Array, ids: ArrayLike<number>, s: GgmlIdSizesRef): IdRef {
  const expertBytes = s.n * ggmlRowBytesOf(s.ggmlType, s.k);
  const stride = s.expertStride ?? expertBytes;
  const w = new Float64Array(s.nExperts * s.n * s.k);
  for (let e = 0; e < s.nExperts; e++) {
    w.set(ggmlDequantizeRef(s.ggmlType, weight.subarray(e * stride, e * stride + expertBytes), s.n * s.k), e * s.n * s.k);
  }
  return denseMatmulIdRef(x, w, ids, { m: s.nTokens, n: s.n, k: s.k, nExpertUsed: s.topK, numExperts: s.nExperts });
}
