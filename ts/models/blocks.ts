// The pieces both forward passes are built from, each a few public ops:
// linear layers over whatever the checkpoint stores, scratch buffers reused
// from step to step, and the routed experts of a MoE layer (each token's
// top-k experts alone, through the per-expert products).
//
// Activations are f32 throughout (the residual stream, norms, attention
// inputs and outputs); weights stay in the dtype they are stored in unless
// the loader was asked to widen them.

import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { DType } from '../dtype.ts';
import type { Encoder } from '../encoder.ts';
import { denseGemvBf16F32, denseMatmul, denseMatmulTensor, denseMatvec, DENSE_MM_TENSOR_MIN_K } from '../ops/dense.ts';
import { denseGateUpMmId, denseGateUpMvId, denseMmId, denseMvId } from '../ops/dense_matmul_id.ts';
import { cast } from '../ops/elementwise.ts';
import { moeDispatchSort } from '../ops/moe_dispatch.ts';
import { fusedMoeRoutingBatch } from '../ops/moe_routing.ts';
import { affineQuantizedMatmul, quantizedChunked, quantizedDequantize, quantizedMatmulSimd } from '../ops/quantized_matmul.ts';
import { invalid } from '../validate.ts';
import { quantizedGateUpMmId, quantizedGateUpMvId, quantizedMmId, quantizedMvId, type GateActivation } from '../ops/quantized_matmul_id.ts';
import { ggmlDequantize, ggmlRowBytesOf, quantizedMatmulGgml, quantizedMatmulGgmlScratchElements, type GgmlQuantType } from '../ops/quantized_matmul_ggml.ts';
import { quantizedMatmulIdGgml, quantizedMatmulIdGgmlGateUp, quantizedMatmulIdGgmlMm, quantizedMatmulIdGgmlMmGateUp } from '../ops/quantized_matmul_id_ggml.ts';
import { geluTanhMul, geluTanhMulHalves } from '../ops/gelu.ts';
import { siluMul, siluMulHalves } from '../ops/silu_mul.ts';

/**
 * A linear layer y = x W^T, W [n, k] as checkpoints store it: dense (f32,
 * bf16 or f16), MLX affine-quantized (packed u32 rows with f32 scales and
 * biases per group), or GGUF blocks (u8 [n, k / QK * block bytes]: each row
 * whole blocks of ggmlType, as the file stores them).
 */
export type Linear =
  | { readonly kind: 'dense'; readonly weight: Buffer; readonly n: number; readonly k: number }
  | {
    readonly kind: 'affine'; readonly weight: Buffer; readonly scales: Buffer; readonly biases: Buffer;
    readonly n: number; readonly k: number; readonly groupSize: number; readonly bits: number;
  }
  | { readonly kind: 'ggml'; readonly weight: Buffer; readonly ggmlType: GgmlQuantType; readonly n: number; readonly k: number };

/**
 * How a prompt's work treats its f32 inputs: matrix products of more than 8
 * rows against 16-bit weights, and (Qwen3.6) the gated delta net.
 */
export type ProductPrecision =
  /**
   * The tensor kernels, which round the inputs to the weight's dtype first (as mlx-native's prefill does); the
   * chunked gated delta rule on bf16. The routed experts of a 16-bit model take their input rounded to its dtype
   * at every step, decode included (the per-expert products take 16-bit activations).
   */
  | 'fast'
  /**
   * Every row through the vector kernels, which take the f32 inputs as they are, and the recurrence token by token
   * in f32: slower for long prompts. Dense routed experts are widened to f32 at load (twice the memory of bf16) so
   * that they see their inputs unrounded too; MLX affine experts still take 16-bit activations.
   */
  | 'exact';

/** Rows of x the vector kernels take at once. */
export const VECTOR_ROWS = 8;

/**
 * A GGUF or MLX affine ('fast': bf16 scales) product on CUDA from this many
 * rows of x runs on its weight dequantized to f16 (linear): GGUF on an H100
 * 1.8-3.7x faster than the matrix form (split or not) from 256 rows at
 * Qwen3.6-35B-A3B's sizes and 3.1-3.4x at Qwen3.6 27B's up projection
 * (bench/results/ggml-dequant-h100-2026-11-27.md); MLX's 4-bit matrix form at
 * Qwen3.6's up projection took 674.8 us at 512 rows where the dense tiles
 * took 160.3 on bf16 (bench/results/matmul-attn-refresh-h200-2026-11-29.md).
 */
export const DEQUANT_MIN_ROWS = 128;
/** Bytes of f16 weight the dequantized path holds at most (a prompt's full logits over a large vocabulary stay on the matrix form). */
export const DEQUANT_MAX_BYTES = 256 * 2 ** 20;

/** Whether linear runs a GGUF or MLX affine product of m rows on its weight dequantized to f16 (on CUDA; see linear). */
export function dequantTakes(m: number, n: number, k: number, limits: Pick<DeviceLimits, 'computeCapability'>): boolean {
  return m >= DEQUANT_MIN_ROWS && limits.computeCapability > 0 && 2 * n * k <= DEQUANT_MAX_BYTES;
}

/**
 * y [m, n] f32 = x [m, k] f32 · W^T. f32 weights: dense_matmul. bf16: the
 * vector kernel (f32 inputs unrounded) for m <= 8, or for any m when
 * precision is 'exact' or k < 32; else the tensor kernel. f16: dense_matvec
 * row by row in the same cases, else the tensor kernel. Affine: with f32
 * scales the f32 quantized product (its vector form for m <= 8), inputs as
 * they are; with bf16 scales mlx-native's quantized_matmul_simd, which rounds
 * the inputs to bf16. GGUF blocks: quantized_matmul_ggml, its vector form
 * (f32 inputs as they are, the weight dequantized in f32) for m <= 8 and for
 * any m when precision is 'exact', else its matrix form (Metal stages the
 * weight as f16; CUDA's tensor cores take both in f16), which on CUDA splits
 * k across blocks where its tiles leave multiprocessors idle, its partials
 * in s's 'products.split' (absent s: never split). On CUDA from
 * DEQUANT_MIN_ROWS rows (given s, the f16 weight within
 * DEQUANT_MAX_BYTES), GGUF blocks and, under 'fast', MLX affine rows with
 * bf16 scales: the weight dequantized to f16 into s's 'products.dequant'
 * (ggmlDequantize, quantizedDequantize), then the dense family's tensor
 * tiles on the f32 rows (hf2q_dense_mm_f16_f32_tensor: x rounded to f16 as
 * it is staged, f32 sums): for GGUF the matrix form's numerics on wgmma; for
 * affine rows x and the weight in f16 where quantized_matmul_simd takes both
 * in bf16.
 */
export function linear(enc: Encoder, lin: Linear, x: Buffer, y: Buffer, m: number, precision: ProductPrecision = 'fast', s?: Scratch): void {
  const { n, k } = lin;
  if (lin.kind === 'ggml') {
    const form = m <= VECTOR_ROWS || precision === 'exact' ? 'vector' : 'matrix';
    if (form === 'matrix' && s !== undefined && dequantTakes(m, n, k, enc.device.limits)) {
      const w = s.atLeast('products.dequant', 'f16', n * k).view('f16', [n, k], 0);
      ggmlDequantize(enc, { src: lin.weight, output: w, count: n * k, ggmlType: lin.ggmlType });
      denseMatmulTensor(enc, { src0: w, src1: x, dst: y, m, n, k, src0Batch: 1, src1Batch: 1 });
      return;
    }
    // Where the matrix form splits k (a short prompt's products on CUDA), its partials in one scratch all share.
    const words = form === 'matrix' && s !== undefined ? quantizedMatmulGgmlScratchElements(m, n, k, enc.device.limits) : 0;
    const scratch = words > 0 ? s!.atLeast('products.split', 'f32', words) : undefined;
    quantizedMatmulGgml(enc, { input: x, weight: lin.weight, output: y, m, n, k, ggmlType: lin.ggmlType, form, scratch });
    return;
  }
  if (lin.kind === 'affine') {
    if (lin.scales.dtype === 'bf16' && precision === 'fast' && s !== undefined && quantizedChunked(k, lin.groupSize) &&
      dequantTakes(m, n, k, enc.device.limits)) {
      const w = s.atLeast('products.dequant', 'f16', n * k).view('f16', [n, k], 0);
      quantizedDequantize(enc, { weight: lin.weight, scales: lin.scales, biases: lin.biases, output: w, n, k, groupSize: lin.groupSize, bits: lin.bits });
      denseMatmulTensor(enc, { src0: w, src1: x, dst: y, m, n, k, src0Batch: 1, src1Batch: 1 });
      return;
    }
    if (lin.scales.dtype === 'bf16') {
      // bf16 scales (Checkpoint.affineScales16, the 'fast' precision): mlx-native's product of f32 rows, rounded to
      // bf16 on the way in (tensor cores on cuda).
      quantizedMatmulSimd(enc, { input: x, weight: lin.weight, scales: lin.scales, biases: lin.biases, output: y, m, n, k, groupSize: lin.groupSize, bits: lin.bits });
    } else {
      affineQuantizedMatmul(enc, { x, weight: lin.weight, scales: lin.scales, biases: lin.biases, output: y, m, n, k, groupSize: lin.groupSize, bits: lin.bits });
    }
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

/**
 * output [m, n / 2] = act(gate) * up for m rows of x, gate and up the halves
 * of one linear's rows (an MLP's stacked projections: gate rows [0, n / 2),
 * up rows [n / 2, n)). GGUF rows at up to VECTOR_ROWS rows of x: one
 * dispatch, the per-expert fused gate/up product over a single expert (each
 * row's id 0, from zeroIds: u32, at least m zeros), the vector engine that
 * linear's product runs, with the activation applied to the gate's sums as
 * they leave it. Otherwise linear's product into gu [m, n], then the
 * activation over its halves.
 */
export function gatedLinear(enc: Encoder, lin: Linear, x: Buffer, gu: Buffer, output: Buffer, m: number, activation: GateActivation,
  zeroIds: Buffer, precision: ProductPrecision = 'fast', s?: Scratch): void {
  if (lin.n % 2 !== 0) throw invalid('gatedLinear', 'lin.n', 'an even number of rows (gate, then up)', lin.n);
  const half = lin.n / 2;
  if (lin.kind === 'ggml' && m <= VECTOR_ROWS) {
    const rowBytes = ggmlRowBytesOf(lin.ggmlType, lin.k);
    quantizedMatmulIdGgmlGateUp(enc, {
      input: x, output, nTokens: m, topK: 1, n: half, k: lin.k, nExperts: 1, ggmlType: lin.ggmlType,
      gateWeight: lin.weight.view('u8', [half, rowBytes], 0), upWeight: lin.weight.view('u8', [half, rowBytes], half * rowBytes),
      ids: zeroIds, activation,
    });
    return;
  }
  linear(enc, lin, x, gu, m, precision, s);
  (activation === 'silu' ? siluMulHalves : geluTanhMulHalves)(enc, { gateUp: gu, output, rows: m, dim: half });
}

/**
 * Linear layers that read one input (Checkpoint.projection): each layer, and
 * the stacked Linears of the layers stored alike, with the row each layer
 * starts at in its group's.
 */
export interface Projection {
  readonly layers: readonly Linear[];
  readonly groups: readonly { readonly linear: Linear; readonly members: readonly number[]; readonly starts: readonly number[] }[];
}

/**
 * y_i [t, n_i] f32 = x [t, k] W_i^T for every layer of p, in its order. One
 * row (a decode step): one product per group, each layer's output a view of
 * its group's [1, n] row (the padding rows' outputs unread). More rows: one
 * product per layer, each into its own scratch buffer (the layers' outputs
 * must each be contiguous). Scratch names start with key.
 */
export function project(enc: Encoder, s: Scratch, key: string, p: Projection, x: Buffer, t: number, precision: ProductPrecision): Buffer[] {
  const out: Buffer[] = new Array(p.layers.length);
  if (t === 1) {
    p.groups.forEach((g, i) => {
      // Named by its width too: one key may serve projections of several shapes (Gemma 4's shared layers).
      const y = s.get(`${key}.${i}.${g.linear.n}`, 'f32', [1, g.linear.n]);
      linear(enc, g.linear, x, y, 1, precision, s);
      g.members.forEach((m, j) => {
        out[m] = g.members.length === 1 ? y : y.view('f32', [1, p.layers[m]!.n], g.starts[j]! * 4);
      });
    });
  } else {
    p.layers.forEach((lin, m) => {
      out[m] = s.get(`${key}.layer${m}.${lin.n}`, 'f32', [t, lin.n]);
      linear(enc, lin, x, out[m]!, t, precision, s);
    });
  }
  return out;
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

  /**
   * A buffer of at least `count` elements, kept while it is large enough
   * (working memory of varying size: a split product's partials), else
   * replaced by one of `count`.
   */
  atLeast(name: string, dtype: DType, count: number): Buffer {
    const have = this.bufs.get(name);
    if (have !== undefined && have.dtype === dtype && have.elementCount >= count) return have;
    have?.release();
    const b = this.device.alloc(dtype, [count]);
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
 * One projection of every expert of a MoE layer, as the per-expert products
 * take it: expert e's [n, k] rows start e * expertRows rows into the
 * buffers (a fused [E, 2I, H] gate_up tensor gives its gate and up as two
 * views of one buffer, expertRows 2I). Dense: f32, bf16 or f16 rows. MLX
 * affine: packed u32 rows with scales and biases [rows, k / groupSize] in
 * bf16 or f16. GGUF: u8 rows of whole blocks of ggmlType (rowBytes each).
 */
export type ExpertWeights =
  | { readonly kind: 'dense'; readonly weight: Buffer; readonly expertRows: number }
  | { readonly kind: 'ggml'; readonly weight: Buffer; readonly expertRows: number; readonly ggmlType: GgmlQuantType; readonly rowBytes: number }
  | {
    readonly kind: 'affine'; readonly weight: Buffer; readonly scales: Buffer; readonly biases: Buffer; readonly expertRows: number;
    readonly groupSize: number; readonly bits: number;
  };

/** The routed experts of a MoE layer. */
export interface RoutedExperts {
  /** [E][I, H] each */
  readonly gate: ExpertWeights;
  readonly up: ExpertWeights;
  /** [E][H, I] */
  readonly down: ExpertWeights;
  /** The routed experts (the router's logits). */
  readonly numExperts: number;
  /**
   * Whether the stacks hold one expert more, numExperts, the layer's shared
   * expert (experts.ts expertsFor), which a decode step runs as one more slot
   * of the products (routedExperts' sharedIds).
   */
  readonly sharedSlot: boolean;
  readonly intermediate: number;
  readonly hidden: number;
  readonly act: GateActivation;
  /**
   * The dtype the products take their activations in: f32 for f32 dense
   * experts and GGUF experts (the inputs as they are), else the weights'
   * (dense) or the scales' (affine) 16-bit dtype, the layer's f32 input
   * rounded to it once.
   */
  readonly dtype: 'f32' | 'f16' | 'bf16';
  /** f32 [E]: multiplies each expert's routing weight (Gemma 4's per-expert scale; ones for Qwen3.6). */
  readonly perExpertScale: Buffer;
}

/**
 * A caller's work that does not touch the routed experts' buffers (Gemma 4's
 * dense MLP beside its MoE block: its down product), which routedExperts
 * records after its gate/up products. The encoder's barriers then put it in
 * one stretch with them (it reads nothing they write), so their dispatches
 * may run side by side (on cuda they do: docs/internals.md, Barriers) instead
 * of one after the other.
 */
export interface Alongside {
  readonly afterGateUp: () => void;
}

/** Where a MoE layer's routed experts left their work: one row per (token, slot) pair. */
export interface ExpertOutputs {
  /** [tokens, topK, H] in the experts' dtype: each pair's expert output, unweighted ([1, topK + 1, H], the shared expert's last, with sharedIds). */
  readonly outputs: Buffer;
  /** f32 [tokens, topK]: the pairs' routing weights (renormalized top-k softmax, times the per-expert scale). */
  readonly weights: Buffer;
}

/**
 * The routed experts of `tokens` rows of x [tokens, H] f32 with router
 * logits [tokens, E] f32: fused_moe_routing picks each token's top k (the
 * softmax renormalized over them, equal probabilities to the lower index),
 * then only those experts run: the fused gate/up product with the
 * activation ([tokens, k, I]) and the down product, one row per pair
 * ([tokens * k, H]). Decode and 'exact' prompts take the vector forms
 * (each pair reads its expert's rows; f32 experts always do, as the matrix
 * forms take 16-bit activations); a 'fast' prompt of more than 8 tokens
 * groups the pairs by expert on the device (moe_dispatch_sort) for the
 * matrix forms. GGUF experts (f32 activations): for decode and 'exact'
 * prompts the fused gate/up vector form (quantized_matmul_id_ggml's
 * kernel_mul_mv_id_<t>_f32_gate_up) where gate and up share a block type
 * and expert stride, else two quantized_matmul_id_ggml vector products and
 * the activation times up (silu_mul / gelu_tanh_mul); for 'fast' prompts past
 * 8 tokens the two matrix products over moe_dispatch_sort's grouping (the
 * family has no fused matrix form) and the activation; then the down product.
 * Nothing is read back: the routing stays on the device.
 *
 * sharedIds (one token, experts with a sharedSlot): u32 [1, topK + 1] whose
 * last id is numExperts, the shared expert's slot in the stacks; the routing
 * writes the first topK, and the products run topK + 1 slots, so that the
 * shared expert costs no dispatch of its own.
 *
 * alongside: the caller's work that neither reads nor writes the experts'
 * (Alongside), recorded between the experts' steps.
 */
export function routedExperts(enc: Encoder, s: Scratch, ex: RoutedExperts, x: Buffer, logits: Buffer, tokens: number, topK: number,
  precision: ProductPrecision, sharedIds?: Buffer, alongside?: Alongside): ExpertOutputs {
  const E = ex.numExperts, I = ex.intermediate, H = ex.hidden, dt = ex.dtype;
  // Experts in the stacks, and slots a token runs.
  const nE = E + (ex.sharedSlot ? 1 : 0);
  const slots = topK + (sharedIds === undefined ? 0 : 1), pairs = tokens * slots;
  if (sharedIds !== undefined) {
    if (!ex.sharedSlot) throw invalid('moe', 'sharedIds', 'experts stacked with their shared expert (sharedSlot)', 'experts without it');
    if (tokens !== 1) throw invalid('moe', 'tokens', '1 with sharedIds (a decode step)', tokens);
    if (sharedIds.dtype !== 'u32' || sharedIds.elementCount !== slots) throw invalid('moe', 'sharedIds', `u32 [1, ${slots}]`, `${sharedIds.dtype} [${sharedIds.shape.join(', ')}]`);
  }
  // The products' ids: the routing's, or the routing's and the shared slot's.
  const slotIds = sharedIds ?? s.get('moe.ids', 'u32', [tokens, topK]);
  const ids = sharedIds === undefined ? slotIds : sharedIds.view('u32', [1, topK], 0);
  const weights = s.get('moe.weights', 'f32', [tokens, topK]);
  fusedMoeRoutingBatch(enc, { logits, expertIds: ids, routingWeights: weights, perExpertScale: ex.perExpertScale, numExperts: E, topK, nTokens: tokens });
  // x in the experts' dtype where a kernel needs it so: the dense forms and the matrix forms (the affine vector
  // forms round f32 x as they read it, the same values without a cast dispatch; the GGUF forms take f32).
  const castX = (): Buffer => {
    if (dt === 'f32') return x;
    const xe = s.get(`moe.x.${dt}`, dt, [tokens, H]);
    cast(enc, { input: x, output: xe });
    return xe;
  };
  const act = s.get(`moe.act.${dt}`, dt, [tokens, slots, I]);
  const outputs = s.get(`moe.out.${dt}`, dt, [tokens, slots, H]);
  const actRows = act.view(dt, [pairs, I], 0);
  const gateUp = { output: act, m: tokens, n: I, k: H, nExpertUsed: slots, numExperts: nE, expertRows: ex.gate.expertRows, activation: ex.act };
  const down = { x: actRows, output: outputs, m: pairs, n: H, k: I, nExpertUsed: 1, numExperts: nE, expertRows: ex.down.expertRows };
  const g = ex.gate, u = ex.up, d = ex.down;
  if (g.kind === 'ggml' || u.kind === 'ggml' || d.kind === 'ggml') {
    if (g.kind !== 'ggml' || u.kind !== 'ggml' || d.kind !== 'ggml') throw invalid('moe', 'the experts', 'gate, up and down of one kind', `${g.kind}, ${u.kind}, ${d.kind}`);
    const sizes = (w: GgmlExperts, n: number, k: number) => ({ weight: w.weight, n, k, nExperts: nE, expertStride: w.expertRows * w.rowBytes, ggmlType: w.ggmlType });
    const matrix = tokens > VECTOR_ROWS && precision === 'fast';
    let route: { ids: Buffer } | { offsets: Buffer; order: Buffer };
    if (matrix) {
      const offsets = s.get('moe.offsets', 'u32', [nE + 2]);
      const order = s.get('moe.order', 'u32', [pairs]);
      moeDispatchSort(enc, { ids, offsets, order, nPairs: pairs, numExperts: nE });
      route = { offsets, order };
    } else {
      route = { ids: slotIds };
    }
    const product = (args: Parameters<typeof quantizedMatmulIdGgml>[1] | Parameters<typeof quantizedMatmulIdGgmlMm>[1]) => {
      if ('ids' in args) quantizedMatmulIdGgml(enc, args);
      else quantizedMatmulIdGgmlMm(enc, args);
    };
    const pairRoute = 'ids' in route ? { ids: slotIds.view('u32', [pairs, 1], 0) } : route;
    if (g.ggmlType === u.ggmlType && g.expertRows * g.rowBytes === u.expertRows * u.rowBytes) {
      // One fused gate/up product: the two [pairs, I] products are never written.
      const { weight: gateWeight, ...gs } = sizes(g, I, H);
      const fused = { input: x, output: act, nTokens: tokens, topK: slots, ...gs, gateWeight, upWeight: u.weight, activation: ex.act };
      if ('ids' in route) quantizedMatmulIdGgmlGateUp(enc, { ...fused, ids: slotIds });
      else quantizedMatmulIdGgmlMmGateUp(enc, { ...fused, ...route });
    } else {
      const gate = s.get('moe.gate.f32', 'f32', [tokens, slots, I]);
      const up = s.get('moe.up.f32', 'f32', [tokens, slots, I]);
      product({ input: x, output: gate, nTokens: tokens, topK: slots, ...sizes(g, I, H), ...route });
      product({ input: x, output: up, nTokens: tokens, topK: slots, ...sizes(u, I, H), ...route });
      (ex.act === 'silu' ? siluMul : geluTanhMul)(enc, { gate, up, output: act });
    }
    alongside?.afterGateUp();
    product({ input: actRows, output: outputs, nTokens: pairs, topK: 1, ...sizes(d, H, I), ...pairRoute });
    return { outputs, weights };
  }
  if (dt !== 'f32' && tokens > VECTOR_ROWS && precision === 'fast') {
    const offsets = s.get('moe.offsets', 'u32', [nE + 2]);
    const order = s.get('moe.order', 'u32', [pairs]);
    moeDispatchSort(enc, { ids, offsets, order, nPairs: pairs, numExperts: nE });
    if (g.kind === 'dense' && u.kind === 'dense' && d.kind === 'dense') {
      denseGateUpMmId(enc, { ...gateUp, x: castX(), gateWeight: g.weight, upWeight: u.weight, offsets, order });
      alongside?.afterGateUp();
      denseMmId(enc, { ...down, weight: d.weight, offsets, order });
    } else if (g.kind === 'affine' && u.kind === 'affine' && d.kind === 'affine') {
      quantizedGateUpMmId(enc, { ...gateUp, x: castX(), ...affineGateUp(g, u), offsets, order });
      alongside?.afterGateUp();
      quantizedMmId(enc, { ...down, ...affineOf(d), offsets, order });
    } else {
      throw invalid('moe', 'the experts', 'gate, up and down of one kind', `${g.kind}, ${u.kind}, ${d.kind}`);
    }
  } else {
    const pairIds = slotIds.view('u32', [pairs, 1], 0);
    if (g.kind === 'dense' && u.kind === 'dense' && d.kind === 'dense') {
      denseGateUpMvId(enc, { ...gateUp, x: castX(), gateWeight: g.weight, upWeight: u.weight, ids: slotIds });
      alongside?.afterGateUp();
      denseMvId(enc, { ...down, weight: d.weight, ids: pairIds });
    } else if (g.kind === 'affine' && u.kind === 'affine' && d.kind === 'affine') {
      quantizedGateUpMvId(enc, { ...gateUp, x, ...affineGateUp(g, u), ids: slotIds });
      alongside?.afterGateUp();
      quantizedMvId(enc, { ...down, ...affineOf(d), ids: pairIds });
    } else {
      throw invalid('moe', 'the experts', 'gate, up and down of one kind', `${g.kind}, ${u.kind}, ${d.kind}`);
    }
  }
  return { outputs, weights };
}

type Affine = Extract<ExpertWeights, { kind: 'affine' }>;
type GgmlExperts = Extract<ExpertWeights, { kind: 'ggml' }>;

function affineOf(w: Affine) {
  return { weight: w.weight, scales: w.scales, biases: w.biases, groupSize: w.groupSize, bits: w.bits };
}

function affineGateUp(g: Affine, u: Affine) {
  if (g.groupSize !== u.groupSize || g.bits !== u.bits) {
    throw invalid('moe', "the experts' up projection", `gate's quantization (${g.bits} bits, groups of ${g.groupSize})`, `${u.bits} bits, groups of ${u.groupSize}`);
  }
  return {
    gateWeight: g.weight, gateScales: g.scales, gateBiases: g.biases, upWeight: u.weight, upScales: u.scales, upBiases: u.biases,
    groupSize: g.groupSize, bits: g.bits,
  };
}
