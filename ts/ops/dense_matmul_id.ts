// dense_matmul_id: per-expert products with f32, f16 or bf16 weights stored
// [out, in], routed by per-token expert ids (MoE): the dense twin of
// quantized_matmul_id (the dense_matmul_id; mlx-native has no dense
// _id kernel, so this family is designed in the style of its
// quantized_matmul_id: the same pairs, expert strides and id rule). Kernels:
// shaders/dense_matmul_id.metal and shaders/cuda/dense_matmul_id.cu.
//
// Pairs, experts and the fused gate_up layout are quantized_matmul_id's
// (ts/ops/quantized_matmul_id.ts): x [m, k], ids [m, nExpertUsed], pair p is
// row p / nExpertUsed of x and has output row p of y [m, nExpertUsed, n];
// expert e's weight [n, k] starts expertRows rows (default n) after expert
// e - 1's; a fused [E, 2 I, k] gate_up tensor is two views with expertRows
// 2 I. An id past the experts gives its row zeros and reads no weight.
//
// Forms: the vector form (dense_mv_id_<t>, dense_gate_up_mv_id_<t>; f32, f16,
// bf16) reads each routed expert's rows once per pair (decode); the matrix
// form (dense_mm_id_<t>, dense_gate_up_mm_id_<t>; f16, bf16) runs tiles of
// one expert's pairs after moeDispatchSort (prefill).

import src from '../../shaders/dense_matmul_id.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/dense_matmul_id.cu' with { type: 'text' };
import header from '../../shaders/dense_matmul_id.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familyPlans, type Launch } from '../plan.ts';
import { familySources } from '../registry.ts';
import { checkAtMost, checkedProduct, invalid, like, U32_MAX } from '../validate.ts';
import {
  expertProductOp, moeTileSlots, type ExpertFamily, type ExpertProductBase, type GateActivation, type ExpertSizes,
} from '../expert-products.ts';
import { ceilDiv, CUDA_GRID_MAX } from '../launch.ts';
import { geluTanhRef } from './gelu.ts';
import { siluRef } from './silu_mul.ts';

export const DENSE_MATMUL_ID_FAMILY = 'dense_matmul_id';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const DENSE_MATMUL_ID_SOURCES = familySources(DENSE_MATMUL_ID_FAMILY, { header, metal: src, cuda: cudaSrc });
export const DENSE_MATMUL_ID_KERNELS = [
  'dense_mv_id_f32', 'dense_mv_id_f16', 'dense_mv_id_bf16', 'dense_gate_up_mv_id_f32', 'dense_gate_up_mv_id_f16', 'dense_gate_up_mv_id_bf16',
  'dense_mm_id_f16', 'dense_mm_id_bf16', 'dense_gate_up_mm_id_f16', 'dense_gate_up_mm_id_bf16',
] as const;
const planOf = familyPlans({ family: DENSE_MATMUL_ID_FAMILY, sources: DENSE_MATMUL_ID_SOURCES, kernels: DENSE_MATMUL_ID_KERNELS });

/** struct DenseMatmulIdParams (buffer 4 of every kernel of the family). */
export const DENSE_MATMUL_ID_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'DenseMatmulIdParams');



export type DenseIdDType = 'f32' | 'f16' | 'bf16';

export function packDenseMatmulIdParams(p: {
  m: number; k: number; n: number; nExpertUsed: number; numExperts: number; expertStride: number; activation?: GateActivation;
}): Uint8Array {
  return packFields(DENSE_MATMUL_ID_PARAMS_LAYOUT, {
    M: p.m, K: p.k, N: p.n, n_expert_used: p.nExpertUsed, num_experts: p.numExperts, expert_stride: p.expertStride,
    activation: p.activation === 'gelu_tanh' ? 1 : 0,
  });
}

/** Weight rows (outputs) a block of the CUDA vector engine takes: one a warp, 8 warps. */
export const DENSE_MV_ID_CUDA_ROWS = 8;

/** The CUDA vector engine's launch: a 256-thread block per (pair, 8 rows). */
export function denseIdMvCudaLaunch(pairs: number, n: number): Launch {
  return { grid: [pairs * ceilDiv(n, DENSE_MV_ID_CUDA_ROWS), 1, 1], threads: [256, 1, 1] };
}

/** Pair rows of a tile of the CUDA matrix engine, and its dynamic shared memory (4 stages of (64 + 128) rows of 40 16-bit values). */
export const DENSE_MM_ID_CUDA_BM = 64;
export const DENSE_MM_ID_CUDA_SHARED_BYTES = 4 * (64 + 128) * 40 * 2;

/** The CUDA matrix engine's launch: a 128-thread block per (tile slot of 64 pairs, 128 weight rows; 64 outputs for gate/up). */
export function denseIdMmCudaLaunch(pairs: number, n: number, numExperts: number, gateUp: boolean): Launch {
  return {
    grid: [moeTileSlots(pairs, numExperts, DENSE_MM_ID_CUDA_BM) * ceilDiv(n, gateUp ? 64 : 128), 1, 1], threads: [128, 1, 1],
    threadgroupMemory: { 0: DENSE_MM_ID_CUDA_SHARED_BYTES },
  };
}

interface DenseIdBase extends ExpertProductBase {
  /** [m, k]: f32, f16 or bf16 (the matrix form: f16 or bf16) */
  x: Buffer;
}

export interface DenseMvIdArgs extends DenseIdBase {
  /** [((numExperts - 1) * expertRows + n) * k], x's dtype */
  weight: Buffer;
  /** u32 [m, nExpertUsed] */
  ids: Buffer;
}
export interface DenseMmIdArgs extends DenseIdBase {
  weight: Buffer;
  /** u32 [numExperts + 2]: moeDispatchSort's offsets of these ids */
  offsets: Buffer;
  /** u32 [m * nExpertUsed]: moeDispatchSort's order */
  order: Buffer;
}
export interface DenseGateUpBase extends DenseIdBase {
  gateWeight: Buffer;
  upWeight: Buffer;
  /** The gate's activation; silu when absent. */
  activation?: GateActivation;
}
export interface DenseGateUpMvIdArgs extends DenseGateUpBase {
  ids: Buffer;
}
export interface DenseGateUpMmIdArgs extends DenseGateUpBase {
  offsets: Buffer;
  order: Buffer;
}

const DENSE: ExpertFamily<DenseIdBase & { activation?: GateActivation }> = {
  plan: planOf,
  // The matrix form runs on 16-bit values only.
  xDtypes: (f) => (f.matrix ? ['f16', 'bf16'] : ['f32', 'f16', 'bf16']),
  set: ['weight'],
  checkGrid(f, a, pairs) {
    const blocks = f.matrix ? denseIdMmCudaLaunch(pairs, a.n, a.numExperts, f.gateUp).grid[0] : denseIdMvCudaLaunch(pairs, a.n).grid[0];
    if (blocks <= CUDA_GRID_MAX) return;
    const what = `small enough for ${CUDA_GRID_MAX} CUDA blocks`;
    if (f.matrix && (a.numExperts + 1) * ceilDiv(a.n, f.gateUp ? 64 : 128) > CUDA_GRID_MAX) throw invalid(f.op, 'numExperts', what, a.numExperts);
    throw invalid(f.op, 'm * nExpertUsed', what, pairs);
  },
  expect(op, a, rows) {
    const stride = checkedProduct(op, 'expertRows * k', rows, a.k);
    checkAtMost(op, 'expertRows * k', stride, U32_MAX, '2^32 - 1 (the params hold the expert stride as a u32)');
    const nw = checkedProduct(op, '((numExperts - 1) * expertRows + n) * k', checkedProduct(op, '(numExperts - 1) * expertRows', a.numExperts - 1, rows) + a.n, a.k);
    return [[like('x'), nw]];
  },
  params: (_f, a) => packDenseMatmulIdParams({ ...a, expertStride: (a.expertRows ?? a.n) * a.k }),
  launch(f, a, pairs) {
    return f.matrix
      ? { grid: [ceilDiv(a.n, f.gateUp ? 32 : 64), moeTileSlots(pairs, a.numExperts, 32), 1], threads: [128, 1, 1], cuda: denseIdMmCudaLaunch(pairs, a.n, a.numExperts, f.gateUp) }
      : { grid: [ceilDiv(a.n, 8), pairs, 1], threads: [32, 2, 1], cuda: denseIdMvCudaLaunch(pairs, a.n) };
  },
};

const mvId = expertProductOp<DenseIdBase, DenseMvIdArgs>(DENSE, { op: 'dense_mv_id', matrix: false, gateUp: false });
const mmId = expertProductOp<DenseIdBase, DenseMmIdArgs>(DENSE, { op: 'dense_mm_id', matrix: true, gateUp: false });
const gateUpMvId = expertProductOp<DenseIdBase, DenseGateUpMvIdArgs>(DENSE, { op: 'dense_gate_up_mv_id', matrix: false, gateUp: true });
const gateUpMmId = expertProductOp<DenseIdBase, DenseGateUpMmIdArgs>(DENSE, { op: 'dense_gate_up_mm_id', matrix: true, gateUp: true });

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateDenseMvId = mvId.validate;
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateDenseMmId = mmId.validate;
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateDenseGateUpMvId = gateUpMvId.validate;
/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export const validateDenseGateUpMmId = gateUpMmId.validate;

/**
 * dense_mv_id: y[p, j] = sum_k x[p / U, k] * w_e[j, k] for each pair p (U =
 * nExpertUsed, e = ids[p]), w_e expert e's weight [n, k]; products summed in
 * f32, y rounded once; zeros for an id >= numExperts. The vector form: each
 * routed expert's rows read once per pair (decode).
 *
 * Layouts: x [m, k]; weight [((numExperts - 1) * expertRows + n) * k];
 * ids u32 [m, nExpertUsed]; output [m, nExpertUsed, n]; x, weight and
 * output of one dtype (f32, f16, bf16); exact element counts; the output
 * overlaps no input.
 * Kernels: dense_mv_id_<dtype>. Bindings: 0 x, 1 weight, 2 ids, 3 output, 4
 * DenseMatmulIdParams (M, K, N, n_expert_used, num_experts, expert_stride,
 * activation).
 * Grid (Metal): (ceil(n / 8), pairs, 1) threadgroups of (32, 2, 1), 4 rows a
 * simdgroup, lanes over k. CUDA: denseIdMvCudaLaunch (a warp a row, 16-byte
 * streaming loads).
 */
export const denseMvId = mvId.op;
/** denseMvId's plan: validates, then one dispatch (see denseMvId). */
export const planDenseMvId = mvId.plan;

/**
 * dense_mm_id: denseMvId's product in the matrix form over the pairs grouped
 * by expert (moeDispatchSort of the same ids): tiles of one expert's pairs,
 * the x rows gathered through the order, the outputs scattered back to pair
 * order; an expert without pairs costs an empty tile slot (prefill).
 *
 * Layouts: as denseMvId with offsets u32 [numExperts + 2] and order u32
 * [m * nExpertUsed] (moeDispatchSort's) in place of ids; f16 or bf16.
 * Kernels: dense_mm_id_<dtype>. Bindings: 0 x, 1 weight, 2 offsets, 3
 * output, 4 DenseMatmulIdParams, 5 order.
 * Grid (Metal): (ceil(n / 64), floor(pairs / 32) + numExperts + 1, 1)
 * threadgroups of 128 (32 pairs x 64 rows, simdgroup matrices). CUDA:
 * denseIdMmCudaLaunch (64 pairs x 128 rows, cp.async stages, mma.sync; k a
 * multiple of 8 and 16-byte aligned rows, else a thread per output).
 */
export const denseMmId = mmId.op;
/** denseMmId's plan: validates, then one dispatch (see denseMmId). */
export const planDenseMmId = mmId.plan;

/**
 * dense_gate_up_mv_id: the fused gate/up projection of the experts,
 * y[p, j] = act(sum_k x[p / U, k] g_e[j, k]) * sum_k x[p / U, k] u_e[j, k]
 * (one pass over x), act silu (default) or gelu_tanh; zeros for an id >=
 * numExperts.
 *
 * Layouts: as denseMvId, with gateWeight and upWeight of one shape.
 * Kernels: dense_gate_up_mv_id_<dtype>. Bindings: 0 x, 1 gate_weight, 2
 * ids, 3 output, 4 DenseMatmulIdParams, 5 up_weight.
 * Grid: as denseMvId (CUDA: a warp takes a row's gate and up).
 */
export const denseGateUpMvId = gateUpMvId.op;
/** denseGateUpMvId's plan: validates, then one dispatch (see denseGateUpMvId). */
export const planDenseGateUpMvId = gateUpMvId.plan;

/**
 * dense_gate_up_mm_id: denseGateUpMvId's product in the matrix form over the
 * pairs grouped by expert (as denseMmId).
 *
 * Layouts: as denseGateUpMvId with offsets and order in place of ids; f16 or bf16.
 * Kernels: dense_gate_up_mm_id_<dtype>. Bindings: 0 x, 1 gate_weight, 2
 * offsets, 3 output, 4 DenseMatmulIdParams, 5 order, 6 up_weight.
 * Grid (Metal): (ceil(n / 32), floor(pairs / 32) + numExperts + 1, 1)
 * threadgroups of 128 (32 pairs x (32 gate + 32 up rows)). CUDA:
 * denseIdMmCudaLaunch (64 pairs x 64 outputs, gate and up columns
 * interleaved by 8).
 */
export const denseGateUpMmId = gateUpMmId.op;
/** denseGateUpMmId's plan: validates, then one dispatch (see denseGateUpMmId). */
export const planDenseGateUpMmId = gateUpMmId.plan;

// ---- the float64 reference ----

// CPU reference of the dense_matmul_id family (and of quantized_matmul_id
// once its experts are dequantized): per (row, slot) pair, the product with
// the routed expert's rows, in float64.

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
