// CPU reference of the quantized_matmul_id family: the experts dequantized
// in float64 (MLX's affine format, ts/reference/quantized_matmul.ts), then
// per (row, slot) pair the product with the routed expert's rows.

import { geluTanhRef } from './gelu.ts';
import { affineDequantize } from './quantized_matmul.ts';
import { siluRef } from './silu_mul.ts';

/** The experts of one buffer set: every expert's n rows, expert e's first row at row e * expertRows. */
export interface AffineExpertsRef {
  /** The packed rows of all experts (affinePack's layout), ((E - 1) * expertRows + n) rows. */
  packed: Uint8Array;
  scales: ArrayLike<number>;
  biases: ArrayLike<number>;
}

export interface IdSizesRef {
  m: number;
  n: number;
  k: number;
  groupSize: number;
  bits: number;
  nExpertUsed: number;
  numExperts: number;
  /** Rows from one expert to the next; n when absent. */
  expertRows?: number;
}

/** A product's values and, per output, the scale of its rounding error (sum_k |x w|, or the gate/up form's first-order bound). */
export interface IdRef {
  y: Float64Array;
  abs: Float64Array;
}

/** Every expert's dequantized rows, [rows of the buffer, k] in float64. */
function dequantizeAll(ex: AffineExpertsRef, s: IdSizesRef): Float64Array {
  const rows = (s.numExperts - 1) * (s.expertRows ?? s.n) + s.n;
  return affineDequantize(ex.packed, ex.scales, ex.biases, rows, s.k, s.groupSize, s.bits);
}

/** sum_k x[row, k] w[wrow, k] and sum_k |x w|. */
function dot(x: ArrayLike<number>, xRow: number, w: Float64Array, wRow: number, k: number): [number, number] {
  let v = 0;
  let a = 0;
  for (let i = 0; i < k; i++) {
    const t = x[xRow * k + i]! * w[wRow * k + i]!;
    v += t;
    a += Math.abs(t);
  }
  return [v, a];
}

/**
 * y[p, j] = sum_k x[p / U, k] * w_e[j, k], e = ids[p], U = nExpertUsed, for
 * pairs p < m U; a row of zeros where e >= numExperts (abs 1 there: any
 * error is measured against 1). x [m, k]; y [m, U, n].
 */
export function quantizedMatmulIdRef(x: ArrayLike<number>, ex: AffineExpertsRef, ids: ArrayLike<number>, s: IdSizesRef): IdRef {
  const w = dequantizeAll(ex, s);
  const pairs = s.m * s.nExpertUsed;
  const rows = s.expertRows ?? s.n;
  const y = new Float64Array(pairs * s.n);
  const abs = new Float64Array(pairs * s.n);
  for (let p = 0; p < pairs; p++) {
    const e = ids[p]!;
    if (e >= s.numExperts) {
      abs.fill(1, p * s.n, (p + 1) * s.n);
      continue;
    }
    for (let j = 0; j < s.n; j++) {
      const [v, a] = dot(x, Math.floor(p / s.nExpertUsed), w, e * rows + j, s.k);
      y[p * s.n + j] = v;
      abs[p * s.n + j] = Math.max(a, Number.MIN_VALUE);
    }
  }
  return { y, abs };
}

/** The gate's activation (ts/ops/quantized_matmul_id.ts GateActivation). */
export function gateActivationRef(g: number, activation: 'silu' | 'gelu_tanh'): number {
  return activation === 'gelu_tanh' ? geluTanhRef(g) : siluRef(g);
}

/**
 * y[p, j] = act(sum_k x[p / U, k] g_e[j, k]) * sum_k x[p / U, k] u_e[j, k];
 * zeros where e >= numExperts. abs is the first-order bound of y's error
 * given errors of at most abs_g and abs_u in the two sums: |act'(g)| abs_g
 * |u| + |act(g)| abs_u (which also bounds |y|, so y's own rounding); 1 for
 * the zero rows of ids past the experts.
 */
export function quantizedGateUpIdRef(x: ArrayLike<number>, gate: AffineExpertsRef, up: AffineExpertsRef, ids: ArrayLike<number>,
  s: IdSizesRef, activation: 'silu' | 'gelu_tanh'): IdRef {
  const gw = dequantizeAll(gate, s);
  const uw = dequantizeAll(up, s);
  const pairs = s.m * s.nExpertUsed;
  const rows = s.expertRows ?? s.n;
  const y = new Float64Array(pairs * s.n);
  const abs = new Float64Array(pairs * s.n);
  const act = (v: number): number => gateActivationRef(v, activation);
  for (let p = 0; p < pairs; p++) {
    const e = ids[p]!;
    if (e >= s.numExperts) {
      abs.fill(1, p * s.n, (p + 1) * s.n);
      continue;
    }
    const row = Math.floor(p / s.nExpertUsed);
    for (let j = 0; j < s.n; j++) {
      const [g, ga] = dot(x, row, gw, e * rows + j, s.k);
      const [u, ua] = dot(x, row, uw, e * rows + j, s.k);
      const h = 1e-5 * Math.max(1, Math.abs(g));
      const slope = (act(g + h) - act(g - h)) / (2 * h);
      y[p * s.n + j] = act(g) * u;
      abs[p * s.n + j] = Math.max(Math.abs(slope) * ga * Math.abs(u) + Math.abs(act(g)) * ua, Number.MIN_VALUE);
    }
  }
  return { y, abs };
}
