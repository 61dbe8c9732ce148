// CPU reference of the dense_matmul_id family (and of quantized_matmul_id
// once its experts are dequantized): per (row, slot) pair, the product with
// the routed expert's rows, in float64.

import type { ExpertSizes } from '../expert-products.ts';
import { geluTanhRef } from './gelu.ts';
import { siluRef } from './silu_mul.ts';

/** The sizes of a product (ts/expert-products.ts). */
export type IdSizesRef = ExpertSizes;

/** A product's values and, per output, the scale of its rounding error (sum_k |x w|, or the gate/up form's first-order bound). */
export interface IdRef {
  y: Float64Array;
  abs: Float64Array;
}

/** sum_k x[row, k] w[wrow, k] and sum_k |x w|. */
function dot(x: ArrayLike<number>, xRow: number, w: ArrayLike<number>, wRow: number, k: number): [number, number] {
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
 * y[p, j] = sum_k x[p / U, k] * w[e expertRows + j, k], e = ids[p], U =
 * nExpertUsed, for pairs p < m U: x [m, k], w the rows of every expert
 * [(E - 1) expertRows + n, k], y [m, U, n]. A row of zeros where e >=
 * numExperts (abs 1 there: any error is measured against 1).
 */
export function denseMatmulIdRef(x: ArrayLike<number>, w: ArrayLike<number>, ids: ArrayLike<number>, s: IdSizesRef): IdRef {
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

/** The gate's activation (GateActivation of ts/ops/quantized_matmul_id.ts). */
export function gateActivationRef(g: number, activation: 'silu' | 'gelu_tanh'): number {
  return activation === 'gelu_tanh' ? geluTanhRef(g) : siluRef(g);
}

/**
 * y[p, j] = act(sum_k x[p / U, k] g[e, j, k]) * sum_k x[p / U, k] u[e, j, k]
 * (g and u laid out as denseMatmulIdRef's w); zeros where e >= numExperts.
 * abs is the first-order bound of y's error given errors of at most abs_g
 * and abs_u in the two sums: |act'(g)| abs_g |u| + |act(g)| abs_u (which
 * also bounds |y|, so y's own rounding); 1 for the zero rows.
 */
export function denseGateUpIdRef(x: ArrayLike<number>, gate: ArrayLike<number>, up: ArrayLike<number>, ids: ArrayLike<number>, s: IdSizesRef,
  activation: 'silu' | 'gelu_tanh'): IdRef {
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
      const [g, ga] = dot(x, row, gate, e * rows + j, s.k);
      const [u, ua] = dot(x, row, up, e * rows + j, s.k);
      const h = 1e-5 * Math.max(1, Math.abs(g));
      const slope = (act(g + h) - act(g - h)) / (2 * h);
      y[p * s.n + j] = act(g) * u;
      abs[p * s.n + j] = Math.max(Math.abs(slope) * ga * Math.abs(u) + Math.abs(act(g)) * ua, Number.MIN_VALUE);
    }
  }
  return { y, abs };
}
