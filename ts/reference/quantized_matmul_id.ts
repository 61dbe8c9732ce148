// CPU reference of the quantized_matmul_id family: the experts dequantized
// in float64 (MLX's affine format, ts/reference/quantized_matmul.ts), then
// the per-pair products of ts/reference/dense_matmul_id.ts.

import { denseGateUpIdRef, denseMatmulIdRef, type IdRef, type IdSizesRef } from './dense_matmul_id.ts';
import { affineDequantize } from './quantized_matmul.ts';

/** The experts of one buffer set: every expert's n rows, expert e's first row at row e * expertRows. */
export interface AffineExpertsRef {
  /** The packed rows of all experts (affinePack's layout), ((E - 1) * expertRows + n) rows. */
  packed: Uint8Array;
  scales: ArrayLike<number>;
  biases: ArrayLike<number>;
}

export interface QuantizedIdSizesRef extends IdSizesRef {
  groupSize: number;
  bits: number;
}

/** Every expert's dequantized rows, [rows of the buffer, k] in float64. */
function dequantizeAll(ex: AffineExpertsRef, s: QuantizedIdSizesRef): Float64Array {
  const rows = (s.numExperts - 1) * (s.expertRows ?? s.n) + s.n;
  return affineDequantize(ex.packed, ex.scales, ex.biases, rows, s.k, s.groupSize, s.bits);
}

/** quantized_matmul_id's product: denseMatmulIdRef over the dequantized experts (zeros for ids past them). */
export function quantizedMatmulIdRef(x: ArrayLike<number>, ex: AffineExpertsRef, ids: ArrayLike<number>, s: QuantizedIdSizesRef): IdRef {
  return denseMatmulIdRef(x, dequantizeAll(ex, s), ids, s);
}

/** The fused gate/up product: denseGateUpIdRef over the dequantized gate and up experts. */
export function quantizedGateUpIdRef(x: ArrayLike<number>, gate: AffineExpertsRef, up: AffineExpertsRef, ids: ArrayLike<number>,
  s: QuantizedIdSizesRef, activation: 'silu' | 'gelu_tanh'): IdRef {
  return denseGateUpIdRef(x, dequantizeAll(gate, s), dequantizeAll(up, s), ids, s, activation);
}
