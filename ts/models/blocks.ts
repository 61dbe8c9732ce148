// The pieces both forward passes are built from, each a few public ops:
// linear layers over whatever the checkpoint stores, scratch buffers reused
// from step to step, a row scaled by a value that lives on the device, and
// the stand-in MoE that runs every expert.
//
// Activations are f32 throughout (the residual stream, norms, attention
// inputs and outputs); weights stay in the dtype they are stored in unless
// the loader was asked to widen them.

import type { Buffer } from '../buffer.ts';
import type { Device } from '../device.ts';
import type { DType } from '../dtype.ts';
import type { Encoder } from '../encoder.ts';
import { denseGemvBf16F32, denseMatmul, denseMatmulTensor, denseMatvec, DENSE_MM_TENSOR_MIN_K } from '../ops/dense.ts';
import { elementwiseAdd, elementwiseAddScaled, elementwiseMul } from '../ops/elementwise.ts';
import { gather } from '../ops/embedding.ts';
import { geluTanhMulHalves } from '../ops/gelu.ts';
import { affineQuantizedMatmul } from '../ops/quantized_matmul.ts';
import { argmax } from '../ops/sample.ts';
import { siluMulHalves } from '../ops/silu_mul.ts';
import { softmax } from '../ops/softmax.ts';

/**
 * A linear layer y = x W^T, W [n, k] as checkpoints store it: dense (f32,
 * bf16 or f16) or MLX affine-quantized (packed u32 rows with f32 scales and
 * biases per group).
 */
export type Linear =
  | { readonly kind: 'dense'; readonly weight: Buffer; readonly n: number; readonly k: number }
  | {
    readonly kind: 'affine'; readonly weight: Buffer; readonly scales: Buffer; readonly biases: Buffer;
    readonly n: number; readonly k: number; readonly groupSize: number; readonly bits: number;
  };

/**
 * How a prompt's work treats its f32 inputs: matrix products of more than 8
 * rows against 16-bit weights, and (Qwen3.6) the gated delta net.
 */
export type ProductPrecision =
  /** The tensor kernels, which round the inputs to the weight's dtype first (as mlx-native's prefill does); the chunked gated delta rule on bf16. */
  | 'fast'
  /** Every row through the vector kernels, which take the f32 inputs as they are, and the recurrence token by token in f32: slower for long prompts. */
  | 'exact';

/** Rows of x the vector kernels take at once. */
const VECTOR_ROWS = 8;

/**
 * y [m, n] f32 = x [m, k] f32 · W^T. f32 weights: dense_matmul. bf16: the
 * vector kernel (f32 inputs unrounded) for m <= 8, or for any m when
 * precision is 'exact' or k < 32; else the tensor kernel. f16: dense_matvec
 * row by row in the same cases, else the tensor kernel. Affine: the quantized
 * product (its vector form for m <= 8).
 */
export function linear(enc: Encoder, lin: Linear, x: Buffer, y: Buffer, m: number, precision: ProductPrecision = 'fast'): void {
  const { n, k } = lin;
  if (lin.kind === 'affine') {
    affineQuantizedMatmul(enc, { x, weight: lin.weight, scales: lin.scales, biases: lin.biases, output: y, m, n, k, groupSize: lin.groupSize, bits: lin.bits });
    return;
  }
  const w = lin.weight;
  if (w.dtype === 'f32') {
    denseMatmul(enc, { x, weight: w, output: y, m, n, k });
    return;
  }
  const vector = m <= VECTOR_ROWS || precision === 'exact' || k < DENSE_MM_TENSOR_MIN_K;
  if (!vector) {
    denseMatmulTensor(enc, { src0: w, src1: x, dst: y, m, n, k, src0Batch: 1, src1Batch: 1 });
  } else if (w.dtype === 'bf16') {
    denseGemvBf16F32(enc, { src0: w, src1: x, dst: y, m, n, k, src0Batch: 1, src1Batch: 1 });
  } else {
    for (let i = 0; i < m; i++) denseMatvec(enc, { a: rows(x, i, 1, k), b: w, output: rows(y, i, 1, n), m: 1, n, k });
  }
}

/** Rows [start, start + count) of a buffer seen as [rows, width] (a view; 16-byte aligned starts). */
export function rows(buf: Buffer, start: number, count: number, width: number): Buffer {
  return buf.view(buf.dtype, [count, width], start * width * sizeOf(buf.dtype));
}

function sizeOf(d: DType): number {
  return d === 'f16' || d === 'bf16' || d === 'u16' ? 2 : d === 'u8' ? 1 : 4;
}

/**
 * Scratch buffers by name, reused while the shape and dtype stay the same
 * (a decode step finds the buffers of the step before). Encoders order the
 * dispatches that share one, so a name may be reused within a step.
 */
export class Scratch {
  private readonly bufs = new Map<string, Buffer>();
  constructor(readonly device: Device) {}

  get(name: string, dtype: DType, shape: readonly number[]): Buffer {
    const have = this.bufs.get(name);
    if (have !== undefined && have.dtype === dtype && have.shape.length === shape.length && have.shape.every((d, i) => d === shape[i])) return have;
    have?.release();
    const b = this.device.alloc(dtype, shape);
    this.bufs.set(name, b);
    return b;
  }

  /** A buffer holding `values`, uploaded when first asked for (constants: ones, an identity matrix). */
  constant(name: string, dtype: DType, shape: readonly number[], values: () => ArrayLike<number>): Buffer {
    const have = this.bufs.get(name);
    if (have !== undefined && have.shape.every((d, i) => d === shape[i])) return have;
    have?.release();
    const b = this.device.upload(dtype, shape, values());
    this.bufs.set(name, b);
    return b;
  }

  release(): void {
    for (const b of this.bufs.values()) b.release();
    this.bufs.clear();
  }

  [Symbol.dispose](): void {
    this.release();
  }
}

/**
 * out[r, :] = scales[r] * v[r, :] for r < count, with the scales on the
 * device: a matrix product of inner size 1 per row (batch r: [1, 1] x
 * [width, 1]^T), so each element is one f32 product, as an elementwise
 * multiply by a broadcast scalar would give. v, out [count, width] f32;
 * scales [count] f32.
 */
export function scaleRows(enc: Encoder, v: Buffer, scales: Buffer, out: Buffer, count: number, width: number): void {
  denseMatmul(enc, {
    x: scales.view('f32', [count, 1, 1], 0),
    weight: v.view('f32', [count, width, 1], 0),
    output: out.view('f32', [count, 1, width], 0),
    m: 1, n: width, k: 1, batch: count, weightBatch: count,
  });
}

/**
 * The routing weights of every expert, dense: R [tokens, E] f32 with the
 * top-k renormalized softmax probabilities of each token's logits at its k
 * largest and 0 elsewhere, which equals softmax over the logits with all
 * but the top k set to -1e30 (the renormalization cancels the full
 * softmax's denominator). The top k come from k rounds of argmax, each
 * winner pushed to -1e30 for the next round and marked in a 0/1 mask
 * (rows of an identity matrix gathered by the winners' indices); the masked
 * logits are logits * mask + 1e30 * (mask - 1), exact in f32. Ties go to the
 * lower index, as torch.topk's do on distinct values.
 */
export function denseRouting(enc: Encoder, s: Scratch, logits: Buffer, out: Buffer, tokens: number, experts: number, topK: number): void {
  const ident = s.constant('moe.identity', 'f32', [experts, experts], () => {
    const a = new Float32Array(experts * experts);
    for (let e = 0; e < experts; e++) a[e * experts + e] = 1;
    return a;
  });
  const ones = s.constant(`moe.ones.${tokens}`, 'f32', [tokens, experts], () => new Float32Array(tokens * experts).fill(1));
  const work = s.get('moe.work', 'f32', [tokens, experts]);
  const mask = s.get('moe.mask', 'f32', [tokens, experts]);
  const hit = s.get('moe.hit', 'f32', [tokens, experts]);
  const idx = s.get('moe.idx', 'u32', [tokens]);
  const val = s.get('moe.val', 'f32', [tokens]);
  for (let round = 0; round < topK; round++) {
    const from = round === 0 ? logits : work;
    argmax(enc, { input: from, outIndex: idx, outValue: val, rows: tokens, nElements: experts });
    const target = round === 0 ? mask : hit;
    gather(enc, { src: ident, indices: idx, output: target, srcRows: experts, rowWidth: experts, nIndices: tokens });
    if (round > 0) elementwiseAdd(enc, { a: mask, b: hit, output: mask });
    if (round + 1 < topK) elementwiseAddScaled(enc, { a: from, b: target, output: work, scale: -1e30 });
  }
  // work = logits * mask; hit = mask - 1; out = work + 1e30 * hit; out = softmax(out)
  elementwiseMul(enc, { a: logits, b: mask, output: work });
  elementwiseAddScaled(enc, { a: mask, b: ones, output: hit, scale: -1 });
  elementwiseAddScaled(enc, { a: work, b: hit, output: out, scale: 1e30 });
  softmax(enc, { input: out, output: out, rows: tokens, cols: experts });
}

/** The experts of a MoE layer as the stand-in runs them: every expert's gate and up stacked, and the down projections side by side. */
export interface AllExperts {
  /** [E * 2I, H]: expert e's gate rows, then its up rows (transformers' gate_up_proj, stacked). */
  readonly gateUp: Linear;
  /** [H, E * I]: column block e is expert e's down projection (times any per-expert scale), f32. */
  readonly down: Linear;
  readonly numExperts: number;
  readonly intermediate: number;
  readonly act: 'silu' | 'gelu_tanh';
}

/**
 * The MoE experts' weighted sum for `tokens` rows of x [tokens, H] f32 with
 * dense routing weights R [tokens, E]: every expert runs on every token
 * (exact for any routing, and as costly as E experts), then
 *   out[t] = sum_e R[t, e] * down_e(act(gate_e x_t) * up_e x_t)
 * as one product: the activations of all experts [tokens, E * I] scaled per
 * (token, expert) by R, times the side-by-side down projections. This is
 * the one place the per-expert ops (quantized_matmul_id, dense_matmul_id,
 * the weighted reduce) take over once they exist.
 */
export function allExpertsMoe(enc: Encoder, s: Scratch, ex: AllExperts, x: Buffer, routing: Buffer, out: Buffer, tokens: number,
  precision: ProductPrecision): void {
  const e = ex.numExperts, i = ex.intermediate;
  const gu = s.get('moe.gateUp', 'f32', [tokens, e * 2 * i]);
  linear(enc, ex.gateUp, x, gu, tokens, precision);
  const act = s.get('moe.act', 'f32', [tokens * e, i]);
  const halves = { gateUp: gu.view('f32', [tokens * e, 2 * i], 0), output: act, rows: tokens * e, dim: i };
  if (ex.act === 'silu') siluMulHalves(enc, halves);
  else geluTanhMulHalves(enc, halves);
  const scaled = s.get('moe.scaled', 'f32', [tokens, e * i]);
  scaleRows(enc, act, routing, scaled, tokens * e, i);
  linear(enc, ex.down, scaled, out, tokens, precision);
}
