// The demo: every kernel family on the best backend present, at model shapes,
// each checked against its CPU reference, printed as one table.
//
//   bun run demo                      # best backend present
//   MLX_NATIVE_BACKEND=emu bun run demo
//
// Shapes (stated per row in the table's "model" column):
//   Qwen3.6 linear-attention layer: H = 32 value heads, Hg = 16 key heads,
//     K = V = 128, chunk 64 (gated delta net, its cumsum, ssm_norm_gate);
//   Qwen3.6-style MoE router: 512 experts, top-8;
//   a Qwen3.6 linear-attention layer end to end: the short conv (C = 2 Hg K +
//     H V = 8192, kernel 4), l2 norm of q and k, g and beta, the chunked
//     prefill, and one decode step continuing from the prefill's final state,
//     checked against the token-by-token recurrence over all T + 1 tokens;
//   Gemma 4 decode attention: head dim 256 (sliding layers) and 512 (global
//     layers), 16 query / 2 KV heads; with bf16 K/V: Qwen3.6 full attention
//     (16 / 2 heads of 256) over one long cache, and a Gemma 4 sliding
//     layer's rings of 1024 read for 4 sequences at their own positions in
//     one call (varlen); Gemma 4 sublayer norms at hidden 4096;
//   rotary embeddings: Qwen3.6 full attention (IMROPE, 16 heads of 256, 64
//     rotated, base 1e7), Gemma 4 k rope (2 KV heads of 256) and q norm + rope
//     (16 heads: 256 sliding, 512 global with a quarter rotated).
//   the glue: RMS norm at Gemma 4 31B's hidden 5376 (bf16), the per-head q
//   norm of Qwen3.6 full attention (16 heads x 256) and Gemma 4's unscaled
//   v norm (head dim 512), attention softmax with scale, softcap 50 and a
//   causal mask, softmax over Gemma 4's 262144-token vocabulary and its final
//   logit softcap (30).
//   glue speed forms: the vocabulary softmax in two passes over a scratch,
//   and the crate's gelu alone at Gemma 4 31B's MLP width (21504, bf16).
//   elementwise: the residual add of Gemma 4 31B (hidden 5376, bf16).
//   embedding: Gemma 4 31B's scaled lookup (hidden 5376 bf16, times
//   sqrt(5376) rounded to bf16 as Hugging Face does) from the first 1024
//   rows of its vocabulary (the gather does not depend on the table's height);
//   kv_cache_copy: a Gemma 4 sliding layer's prefill (8 KV heads of 256, bf16
//   activations) kept in an f16 ring of its 1024-token window.
//   the gated activations: SwiGLU over Qwen3.6-27B's fused gate_up (MLP
//   intermediate 17408), GeGLU of Gemma 4 31B's MLP (intermediate 21504) and
//   the sigmoid output gate of Qwen3.6 full attention (16 heads x 256).
//   logit softcap (30);
//   sampling: one token from Gemma 4's 262144-token vocabulary with its
//   defaults (temperature 1, top-k 64, top-p 0.95).
//   prefill attention: a Gemma 4 sliding layer (16 query / 8 KV heads of
//     256, window 1024, causal) and a global layer (head dim 512, the
//     llamacpp entry, causal) over a prompt, checked at 48 query rows drawn
//     at random (every head).
//   dense products (y = x W^T, weights [out, in]): Qwen3.6 27B's MLP up
//   projection (5120 -> 17408, bf16) for one decode token and prefills of
//   64 and (on a GPU) 512 tokens, and Gemma 4's vocabulary projection
//   (5376 -> 262144) from an f32 hidden state with bf16 weights. The weights
//   repeat 1024 (4096 for the vocabulary) random rows, so the host holds no
//   float64 copy of them; the prefills are checked at 512 output columns (64
//   at 512 tokens) and the vocabulary at 8192 rows
//   drawn at random (every tile alike), the decode row at every output.
//   quantized products (MLX affine, as mlx-community's 4-bit checkpoints:
//   groups of 64, bf16 scales): Qwen3.6 27B's MLP up projection (5120 ->
//   17408) for one decode token and a 64-token prefill, 1024 distinct rows
//   quantized by MLX's algorithm and repeated; checked at every output of the
//   decode row and 512 random columns of the prefill.
//   GGUF block products: Qwen3.6 27B's MLP up projection (5120 -> 17408) in
//   Q4_K (llama.cpp's Q4_K_M mix) for one decode token and a 64-token
//   prefill, 1024 distinct rows quantized by llama.cpp's reference quantizer
//   and repeated, checked as the MLX rows; Gemma 4 31B's scaled embedding
//   rows (hidden 5376) from a Q6_K table of 1024 rows, and the whole table
//   dequantized to bf16.
//   per-expert products: a Qwen3.6-35B-A3B MoE layer (hidden 2048, 256
//   experts of 512, top-8, MLX 4-bit g64; 8 experts on the emulator) for one
//   decode token and a prefill: routing, the grouping of the pairs by expert
//   (checked exactly), the fused gate/up projection with SiLU, the down
//   projection over the pairs, the shared expert (the same kernels with one
//   expert) and its sigmoid gate, and the weighted reduce with the residual,
//   each stage checked against float64 from the stage before it (the decode
//   token at every output, the prefill at 256 random ones); and Gemma 4
//   26B-A4B's bf16 experts (hidden 2816, 704, top-8 of 128; 16 on the
//   emulator) through the dense gate/up projection with GELU for one token.
//   The experts repeat a few distinct ones so the host holds those alone in
//   float64.
//   weights: Qwen3.6-35B-A3B's layer 0 (hidden 2048) written to a temporary
//   file, mapped and uploaded packed: its gated delta net and norms as a bf16
//   safetensors file in HF naming, and 32 of its 256 experts as a Q4_K GGUF
//   (ffn_{gate,up,down}_exps); checked byte for byte against the file (the
//   error is the fraction of bytes that differ), timed on the host (wall time
//   of the upload from the mapping).
//   models: the tiny random-weight Qwen3.6 (qwen3_5_moe: gated delta net and
//   gated attention layers, 8 experts top-2 and a shared expert) and Gemma 4
//   (sliding and global layers, head dims 256 / 512; one with the MoE block
//   and keys as values, one with per-layer inputs and shared KV layers) of
//   tests/fixtures/models, loaded with mlx-native/models and run end to end:
//   a 12-token prompt, then 8 greedy decode steps, each step one encoder
//   reading back only its token; checked against transformers' own float32
//   logits (the largest relative L2 error of the last prompt position and the
//   8 steps; the tokens must be transformers'), timed on the host (prefill
//   and the 8 steps), decode speed in tokens per second.
// On the emulator the sequence lengths are shortened (it runs one fiber per
// GPU thread), and the table says so.
//
// Error: max |got - want| / max |want| over each output, against the float64
// reference; the tolerance is the dtype's (f32 1e-5, bf16 1e-2), except the gated
// delta net's f32 final state (1e-3), which accumulates bf16 products over
// the whole sequence, and the chunked prefill against the exact recurrence
// (o 2e-2, state 1e-2), whose intermediates are stored in bf16; the sampled
// token must be the reference's, and its log-probability, an f32 sum over
// the kept tokens, within 1e-4; prefill attention max |got - want| / max |v|
// (each output row is a convex combination of v's rows), under bf16's 1e-2.
// Time: device time of the commit (wall time
// on the emulator), after the kernel was compiled.

import { Device, type Buffer, type DType, type Encoder } from '../ts/index.ts';
import {
  chunkGatedDeltaRule, chunkLocalCumsum, gatedDeltaNetChunk, gatedDeltaRuleRecurrentRef, chunkLocalCumsumRef, gatedDeltaNetChunkRef,
} from '../ts/ops/chunk_gated_delta_rule.ts';
import { computeGBeta, computeGBetaRef } from '../ts/ops/compute_g_beta.ts';
import { elementwiseAdd, elementwiseAddRef } from '../ts/ops/elementwise.ts';
import { denseMatmul, denseMatvec, denseRef } from '../ts/ops/dense.ts';
import { flashAttnPrefill, flashAttnPrefillRef } from '../ts/ops/flash_attn_prefill.ts';
import { affineQuantizedMatmul, affineDequantize, affineQuantize, quantizedDequantize } from '../ts/ops/quantized_matmul.ts';
import { quantizedGateUpMmId, quantizedGateUpMvId, quantizedMmId, quantizedMvId } from '../ts/ops/quantized_matmul_id.ts';
import { denseGateUpMvId } from '../ts/ops/dense_matmul_id.ts';
import { moeDispatchSort, moeDispatchSortRef } from '../ts/ops/moe_dispatch.ts';
import { moeWeightedReduce, moeWeightedReduceNorm, moeWeightedReduceRef } from '../ts/ops/moe_weighted_reduce.ts';
import {
  ggmlDequantize, ggmlRowBytesOf, quantizedMatmulGgml, ggmlDequantizeRef, ggmlEmbeddingRef, ggmlQuantize,
} from '../ts/ops/quantized_matmul_ggml.ts';
import { quantizedMatmulIdGgml, quantizedMatmulIdGgmlMm, quantizedMatmulIdGgmlMmGateUp } from '../ts/ops/quantized_matmul_id_ggml.ts';
import {
  flashAttnVec, flashAttnVecTmpElements, flashAttnVecVarlen, type FlashAttnVecParams, type FlashAttnVecVarlenParams, flashAttnVecRef,
  flashAttnVecVarlenRef,
} from '../ts/ops/flash_attn_vec.ts';
import {
  fusedNormAdd, fusedNormAddNorms, fusedNormAddNormsRef, fusedNormMoeSum, fusedNormMoeSumRef, fusedResidualNorm, fusedNormAddRef, fusedResidualNormRef,
} from '../ts/ops/fused_norm.ts';
import { gatedDeltaNetDecode } from '../ts/ops/gated_delta_net.ts';
import { l2Norm, l2NormRef } from '../ts/ops/l2_norm.ts';
import { fusedHeadNormRope, fusedHeadNormRopeQkv, fusedHeadNormRopeRef } from '../ts/ops/fused_head_norm_rope.ts';
import { ropeNeox, ropeNeoxRef } from '../ts/ops/rope.ts';
import { ropeMulti, ropeMultiRef } from '../ts/ops/rope_multi.ts';
import { rmsNorm, rmsNormPerHead, rmsNormRef } from '../ts/ops/rms_norm.ts';
import { planSoftmax, softcap, softmax, softmaxScratchElements, softcapRef, softmaxRef } from '../ts/ops/softmax.ts';
import { embedding, embeddingRef } from '../ts/ops/embedding.ts';
import { kvCacheCopySeqDual, kvCacheCopySeqRef } from '../ts/ops/kv_cache_copy.ts';
import { gelu, geluTanhMul, geluRef, geluTanhMulRef, geluTanhRef } from '../ts/ops/gelu.ts';
import { sigmoidMul, sigmoidMulRef } from '../ts/ops/sigmoid_mul.ts';
import { siluMulHalves, siluMulHalvesRef } from '../ts/ops/silu_mul.ts';
import { fusedMoeRouting, fusedMoeRoutingBatch, moeRoutingRef } from '../ts/ops/moe_routing.ts';
import { ssmConv, ssmConvRef } from '../ts/ops/ssm_conv.ts';
import { ssmNormGate, ssmNormGateRef } from '../ts/ops/ssm_norm_gate.ts';
import { sample, sampleScratchElements, sampleRowRef } from '../ts/ops/sample.ts';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GgufFile, SafetensorsFile, checkModel, type WeightSource } from '../ts/weights/index.ts';
import { ggufBytes, safetensorsBytes } from '../tests/weights-writers.ts';
import { loadModel } from '../ts/models/index.ts';
import { modelFixture, relL2 } from '../tests/model-fixtures.ts';

interface Row {
  kernel: string;
  model: string;
  shape: string;
  err: number;
  tol: number;
  ms: number;
}

/** Seeded generator (mulberry32) so every run checks the same inputs. */
function makeRng(seed: number): { uniform(lo: number, hi: number): number; normal(): number } {
  let s = seed >>> 0;
  const next = (): number => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    uniform: (lo, hi) => lo + (hi - lo) * next(),
    normal: () => Math.sqrt(-2 * Math.log(1 - next())) * Math.cos(2 * Math.PI * next()),
  };
}

const rng = makeRng(20261122);
const randn = (n: number, scale = 1): Float64Array => new Float64Array(n).map(() => scale * rng.normal());
const uniform = (n: number, lo: number, hi: number): Float64Array => new Float64Array(n).map(() => rng.uniform(lo, hi));

/** The values a buffer of this dtype holds for these numbers (f16/bf16 rounded). */
function stored(device: Device, dtype: DType, data: ArrayLike<number>): { buf: Buffer; values: Float64Array } {
  const buf = device.upload(dtype, [data.length], data);
  return { buf, values: buf.readNumbers() };
}

/**
 * A bf16 weight [n, k] whose rows repeat `distinct` random rows (row j is row
 * j % distinct): a vocabulary-sized matrix without a float64 copy of it on
 * the host. row(j) gives the values row j holds.
 */
function repeatedRows(device: Device, n: number, k: number, distinct: number): { buf: Buffer; row: (j: number) => Float64Array } {
  const block = device.upload('bf16', [distinct * k], randn(distinct * k, 0.05));
  const values = block.readNumbers();
  const bits = block.read() as Uint16Array;
  block.release();
  const buf = device.alloc('bf16', [n, k]);
  for (let r = 0; r < n; r += distinct) {
    const rows = Math.min(distinct, n - r);
    buf.write(bits.subarray(0, rows * k), { byteOffset: r * k * 2 });
  }
  return { buf, row: (j) => values.subarray((j % distinct) * k, (j % distinct + 1) * k) };
}

function poisoned(device: Device, dtype: DType, n: number): Buffer {
  const buf = device.alloc(dtype, [n]);
  if (dtype === 'f32' || dtype === 'f16' || dtype === 'bf16') buf.fill(Number.NaN);
  else buf.fill(0xffffffff);
  return buf;
}

/** max |got - want| / max |want|; NaN anywhere in got counts as infinite error. */
function scaledErr(got: ArrayLike<number>, want: ArrayLike<number>): number {
  let scale = 0;
  let worst = 0;
  for (let i = 0; i < want.length; i++) scale = Math.max(scale, Math.abs(want[i]!));
  for (let i = 0; i < want.length; i++) {
    const d = Math.abs(got[i]! - want[i]!);
    if (!(d <= worst)) worst = Number.isNaN(d) ? Infinity : d;
  }
  return scale === 0 ? worst : worst / scale;
}

/** Barriers the encoders placed (automatically, from what each dispatch reads and writes). */
let barriers = 0;

function timed(device: Device, record: (enc: ReturnType<Device['encoder']>) => void): number {
  using enc = device.encoder();
  record(enc);
  barriers += enc.barrierCount;
  enc.commitAndWait();
  return enc.gpuTimeNs / 1e6;
}

/**
 * Sampled outputs of y [tokens, n] = x w^T against the float64 reference, row
 * j of w given by row(j): every column of one token, else `perToken` random
 * columns of every token. The outputs and the reference's, in step.
 */
function sampledProduct(y: Buffer, x: Float64Array, row: (j: number) => Float64Array, tokens: number, n: number, k: number,
  perToken: number): { seen: number[]; want: number[] } {
  const cols = tokens === 1 ? Array.from({ length: n }, (_, j) => j) : Array.from({ length: perToken }, () => Math.floor(rng.uniform(0, n)));
  const got = y.readNumbers();
  const seen: number[] = [];
  const want: number[] = [];
  for (let t = 0; t < tokens; t++) {
    for (const j of cols) {
      seen.push(got[t * n + j]!);
      want.push(denseRef(x.subarray(t * k, (t + 1) * k), row(j), 1, 1, k)[0]!);
    }
  }
  return { seen, want };
}

/**
 * The error of rows of `cols` outputs against wantAt(row, column): every
 * output where `all`, else 256 random ones.
 */
function sampledErr(got: Float64Array, cols: number, all: boolean, wantAt: (row: number, col: number) => number): number {
  const samples = all ? Array.from({ length: got.length }, (_, i) => i) : Array.from({ length: 256 }, () => Math.floor(rng.uniform(0, got.length)));
  return scaledErr(samples.map((i) => got[i]!), samples.map((i) => wantAt(Math.floor(i / cols), i % cols)));
}

function main(): number {
  using device = Device.open();
  const emu = device.backend === 'emu';
  const rows: Row[] = [];
  const note = emu ? ' (shortened for the emulator)' : '';
  /**
   * The row of a kernel with one output: its inputs stored, in order (so
   * drawn in that order), its output poisoned, the kernel timed, the output
   * against ref of the inputs' stored values; every buffer released.
   */
  const oneOutput = (row: Omit<Row, 'err' | 'ms'>, inputs: [DType, ArrayLike<number>][], output: [DType, number],
    record: (enc: Encoder, ins: Buffer[], out: Buffer) => void, ref: (values: Float64Array[]) => ArrayLike<number>): void => {
    const ins = inputs.map(([dtype, data]) => stored(device, dtype, data));
    const out = poisoned(device, ...output);
    const ms = timed(device, (enc) => record(enc, ins.map((i) => i.buf), out));
    rows.push({ ...row, err: scaledErr(out.readNumbers(), ref(ins.map((i) => i.values))), ms });
    for (const b of [...ins.map((i) => i.buf), out]) b.release();
  };

  // --- Gemma 4 sublayer norms, hidden 4096 ---
  {
    const tokens = 16;
    const dim = 4096;
    const n = tokens * dim;
    oneOutput({ kernel: 'fused_norm_add_f32', model: 'Gemma 4 norm', shape: `${tokens} x ${dim}`, tol: 1e-5 },
      [['f32', randn(n)], ['f32', randn(n, 3)], ['f32', uniform(dim, 0.5, 1.5)]], ['f32', n],
      (enc, [res, inp, w], output) => fusedNormAdd(enc, { residual: res!, input: inp!, weight: w!, output, rows: tokens, dim, eps: 1e-6 }),
      ([res, inp, w]) => fusedNormAddRef(res!, inp!, w!, tokens, dim, 1e-6));
  }
  {
    const tokens = 16;
    const dim = 4096;
    const n = tokens * dim;
    const res = stored(device, 'bf16', randn(n));
    const inp = stored(device, 'bf16', randn(n, 3));
    const w = stored(device, 'bf16', uniform(dim, 0.5, 1.5));
    const normed = poisoned(device, 'bf16', n);
    const sum = poisoned(device, 'bf16', n);
    const ms = timed(device, (enc) =>
      fusedResidualNorm(enc, {
        residual: res.buf, input: inp.buf, weight: w.buf, normedOutput: normed, sumOutput: sum,
        rows: tokens, dim, eps: 1e-6,
      }));
    const want = fusedResidualNormRef(res.values, inp.values, w.values, tokens, dim, 1e-6);
    const err = Math.max(scaledErr(normed.readNumbers(), want.normed), scaledErr(sum.readNumbers(), want.sum));
    rows.push({ kernel: 'fused_residual_norm_bf16', model: 'Gemma 4 norm', shape: `${tokens} x ${dim}`, err, tol: 1e-2, ms });
    for (const b of [res.buf, inp.buf, w.buf, normed, sum]) b.release();
  }
  // Gemma 4 26B-A4B's decode-step fusions (hidden 2816): the post-attention residual update with its three norms
  // (the MLP's, the router's, the experts' inputs), and the MLP and expert branches joined (top-8, bf16 expert rows).
  {
    const tokens = 4;
    const dim = 2816;
    const n = tokens * dim;
    const res = stored(device, 'f32', randn(n)), inp = stored(device, 'f32', randn(n, 3)), w = stored(device, 'f32', uniform(dim, 0.5, 1.5));
    const nw = [uniform(dim, 0.5, 1.5), null, uniform(dim, 0.5, 1.5)].map((v) => (v === null ? null : stored(device, 'f32', v)));
    const out = poisoned(device, 'f32', n);
    const normed = [0, 1, 2].map(() => poisoned(device, 'f32', n));
    const ms = timed(device, (enc) => fusedNormAddNorms(enc, {
      residual: res.buf, input: inp.buf, weight: w.buf, output: out, rows: tokens, dim, eps: 1e-6,
      normed0: normed[0], normWeight0: nw[0]!.buf, normed1: normed[1], normed2: normed[2], normWeight2: nw[2]!.buf,
    }));
    const want = fusedNormAddNormsRef(res.values, inp.values, w.values, tokens, dim, 1e-6, undefined, nw.map((v) => v?.values ?? null));
    const err = Math.max(scaledErr(out.readNumbers(), want.output), ...normed.map((b, j) => scaledErr(b.readNumbers(), want.normed[j]!)));
    rows.push({ kernel: 'fused_norm_add_norms_f32', model: 'Gemma 4 26B-A4B norms', shape: `${tokens} x ${dim}, 3 norms`, err, tol: 1e-5, ms });
    for (const b of [res.buf, inp.buf, w.buf, out, ...normed, ...nw.flatMap((v) => (v === null ? [] : [v.buf]))]) b.release();
  }
  {
    const tokens = 4;
    const dim = 2816;
    const topK = 8;
    oneOutput({ kernel: 'fused_norm_moe_sum_bf16_input', model: 'Gemma 4 26B-A4B MLP + experts', shape: `${tokens} x ${dim}, top-${topK}`, tol: 1e-5 },
      [['f32', randn(tokens * dim)], ['f32', uniform(dim, 0.5, 1.5)], ['f32', uniform(tokens * topK, 0.05, 1)],
        ['bf16', randn(tokens * topK * dim, 2)], ['f32', uniform(dim, 0.5, 1.5)]], ['f32', tokens * dim],
      (enc, [x, w, ew, ye, mw], output) => fusedNormMoeSum(enc, {
        input: x!, weight: w!, expertW: ew!, yExpert: ye!, moeWeight: mw!, output, rows: tokens, dim, topK, eps: 1e-6,
      }),
      ([x, w, ew, ye, mw]) => fusedNormMoeSumRef(x!, w!, ew!, ye!, mw!, tokens, topK, dim, 1e-6));
  }
  // Qwen3.6-35B-A3B's decode-step end (hidden 2048): the MoE reduction over top-8 and the shared expert as a ninth
  // bf16 row, the residual, and the next layer's input norm of the result.
  {
    const H = 2048, topK = 8;
    const rowsIn = stored(device, 'bf16', randn((topK + 1) * H, 2));
    const ew = stored(device, 'f32', uniform(topK, 0.05, 1)), logit = stored(device, 'f32', randn(1));
    const residual = stored(device, 'f32', randn(H, 3)), nw = stored(device, 'f32', uniform(H, 0.5, 1.5));
    const out = poisoned(device, 'f32', H), normed = poisoned(device, 'f32', H);
    const ms = timed(device, (enc) => moeWeightedReduceNorm(enc, {
      expertW: ew.buf, yExpert: rowsIn.buf.view('bf16', [1, topK, H], 0), shLogit: logit.buf, yShared: rowsIn.buf.view('bf16', [1, H], topK * H * 2),
      residual: residual.buf, output: out, normWeight: nw.buf, normed, nTokens: 1, topK, h: H, eps: 1e-6,
    }));
    const want = moeWeightedReduceRef(ew.values, rowsIn.values, logit.values, rowsIn.values.subarray(topK * H), residual.values, 1, topK, H);
    const err = Math.max(scaledErr(out.readNumbers(), want), scaledErr(normed.readNumbers(), rmsNormRef(want, nw.values, 1, H, 1e-6)));
    rows.push({ kernel: 'moe_weighted_reduce_norm_bf16_shared', model: 'Qwen3.6-35B-A3B layer end', shape: `1 tok x ${H}, top-${topK} + shared + norm`,
      err, tol: 1e-5, ms });
    for (const b of [rowsIn.buf, ew.buf, logit.buf, residual.buf, nw.buf, out, normed]) b.release();
  }

  // --- MoE router, 512 experts, top-8 ---
  for (const tokens of [1, emu ? 64 : 8192]) {
    const experts = 512;
    const topK = 8;
    const logits = stored(device, 'f32', randn(tokens * experts, 2));
    const scale = stored(device, 'f32', uniform(experts, 0.5, 2));
    const ids = poisoned(device, 'u32', tokens * topK);
    const weights = poisoned(device, 'f32', tokens * topK);
    const args = { logits: logits.buf, expertIds: ids, routingWeights: weights, perExpertScale: scale.buf, numExperts: experts, topK };
    const ms = timed(device, (enc) =>
      tokens === 1 ? fusedMoeRouting(enc, args) : fusedMoeRoutingBatch(enc, { ...args, nTokens: tokens }));
    const want = moeRoutingRef(logits.values, scale.values, tokens, experts, topK);
    const gotIds = ids.read();
    let idMismatch = 0;
    for (let i = 0; i < gotIds.length; i++) if (gotIds[i] !== want.expertIds[i]) idMismatch++;
    const err = idMismatch > 0 ? Infinity : scaledErr(weights.readNumbers(), want.weights);
    rows.push({
      kernel: tokens === 1 ? 'fused_moe_routing_f32' : 'fused_moe_routing_batch_f32', model: 'Qwen3.6 MoE router',
      shape: `${tokens} tok x ${experts} experts, top-${topK}${tokens > 1 ? note : ''}`, err, tol: 1e-5, ms,
    });
    for (const b of [logits.buf, scale.buf, ids, weights]) b.release();
  }

  // --- Qwen3.6 linear attention: ssm_norm_gate, cumsum, inter-state recurrence ---
  const H = 32;
  const HG = 16;
  const KD = 128;
  const VD = 128;
  const T = emu ? 256 : 4096;
  {
    const rowsN = T * H;
    oneOutput({ kernel: 'ssm_norm_gate_f32', model: 'Qwen3.6 GDN', shape: `${T} tok x ${H} heads x ${VD}${note}`, tol: 1e-5 },
      [['f32', randn(rowsN * VD)], ['f32', randn(rowsN * VD)], ['f32', uniform(VD, 0.5, 1.5)]], ['f32', rowsN * VD],
      (enc, [a, z, w], output) => ssmNormGate(enc, { attnOut: a!, weight: w!, z: z!, output, rows: rowsN, dV: VD, eps: 1e-6 }),
      ([a, z, w]) => ssmNormGateRef(a!, w!, z!, rowsN, VD, 1e-6));
  }
  {
    const BT = 64;
    const g = stored(device, 'f32', uniform(T * H, -0.1, -0.005));
    const out = poisoned(device, 'f32', T * H);
    const ms = timed(device, (enc) => chunkLocalCumsum(enc, { gIn: g.buf, gCumsum: out, batch: 1, seqLen: T, nHeads: H, bt: BT }));
    const want = chunkLocalCumsumRef(g.values, 1, T, H, BT);
    rows.push({ kernel: 'chunk_local_cumsum_g_f32', model: 'Qwen3.6 GDN', shape: `B=1 T=${T} H=${H} BT=${BT}${note}`, err: scaledErr(out.readNumbers(), want), tol: 1e-5, ms });
    for (const b of [g.buf, out]) b.release();
  }
  {
    const p = { b: 1, t: T, hg: HG, h: H, k: KD, v: VD, bt: 64 };
    const NT = Math.ceil(T / p.bt);
    // Magnitudes as the chunked pipeline produces them: k L2-normalized,
    // beta in (0.1, 0.9), g cumsummed within chunks, w ~ beta exp(g) k, u ~ beta v.
    const k = randn(T * HG * KD);
    for (let r = 0; r < T * HG; r++) {
      let n2 = 0;
      for (let i = 0; i < KD; i++) n2 += k[r * KD + i]! ** 2;
      for (let i = 0; i < KD; i++) k[r * KD + i] = k[r * KD + i]! / Math.sqrt(n2);
    }
    const gc = chunkLocalCumsumRef(uniform(T * H, -0.1, -0.005), 1, T, H, 64);
    const beta = uniform(T * H, 0.1, 0.9);
    const w = new Float64Array(T * H * KD);
    const u = randn(T * H * VD);
    for (let t = 0; t < T; t++) {
      for (let h = 0; h < H; h++) {
        const bg = beta[t * H + h]! * Math.exp(gc[t * H + h]!);
        const kh = Math.floor(h / (H / HG));
        for (let i = 0; i < KD; i++) w[(t * H + h) * KD + i] = bg * k[(t * HG + kh) * KD + i]!;
        for (let i = 0; i < VD; i++) u[(t * H + h) * VD + i] = beta[t * H + h]! * u[(t * H + h) * VD + i]!;
      }
    }
    const kb = stored(device, 'bf16', k);
    const wb = stored(device, 'bf16', w);
    const ub = stored(device, 'bf16', u);
    const gb = stored(device, 'f32', gc);
    const h0 = stored(device, 'f32', randn(H * VD * KD, 0.1));
    const hOut = poisoned(device, 'bf16', NT * H * VD * KD);
    const vNew = poisoned(device, 'bf16', T * H * VD);
    const fin = poisoned(device, 'f32', H * VD * KD);
    const ms = timed(device, (enc) =>
      gatedDeltaNetChunk(enc, { k: kb.buf, w: wb.buf, u: ub.buf, g: gb.buf, h0: h0.buf, hOut, vNew, finalState: fin,
        batch: 1, seqLen: T, nQkHeads: HG, nHeads: H, kDim: KD, vDim: VD, bt: 64 }));
    const want = gatedDeltaNetChunkRef(p, { k: kb.values, w: wb.values, u: ub.values, g: gb.values, h0: h0.values }, { mirrorBf16: true });
    const shape = `B=1 T=${T} H=${H} Hg=${HG} K=V=${KD}${note}`;
    rows.push({ kernel: 'gated_delta_net_chunk_inter_state_bf16 (v_new, h_out)', model: 'Qwen3.6 GDN', shape,
      err: Math.max(scaledErr(vNew.readNumbers(), want.vNew), scaledErr(hOut.readNumbers(), want.hOut)), tol: 1e-2, ms });
    rows.push({ kernel: 'gated_delta_net_chunk_inter_state_bf16 (final state)', model: 'Qwen3.6 GDN', shape,
      err: scaledErr(fin.readNumbers(), want.finalState), tol: 1e-3, ms });
    for (const b of [kb.buf, wb.buf, ub.buf, gb.buf, h0.buf, hOut, vNew, fin]) b.release();
  }

  // --- Gemma 4 decode attention, 16 query / 2 KV heads ---
  for (const c of [
    { headDim: 256, kv: 'f16' as const, kvSeqLen: emu ? 2048 : 32768, nwg: 16, mask: 'slidingWindow' as const, window: 1024 },
    { headDim: 512, kv: 'f32' as const, kvSeqLen: emu ? 1000 : 8192, nwg: 8, mask: 'causal' as const, window: 0 },
  ]) {
    const p: FlashAttnVecParams = {
      batch: 1, nHeads: 16, nKvHeads: 2, headDim: c.headDim, kvSeqLen: c.kvSeqLen, kvCapacity: c.kvSeqLen,
      scale: 1 / Math.sqrt(c.headDim), mask: c.mask, slidingWindow: c.window, softcap: 0, nwg: c.nwg,
    };
    const q = stored(device, 'f32', randn(16 * c.headDim));
    const k = stored(device, c.kv, randn(2 * c.kvSeqLen * c.headDim));
    const v = stored(device, c.kv, randn(2 * c.kvSeqLen * c.headDim));
    const out = poisoned(device, 'f32', 16 * c.headDim);
    const tmp = poisoned(device, 'f32', flashAttnVecTmpElements(p));
    const ms = timed(device, (enc) => flashAttnVec(enc, { ...p, q: q.buf, k: k.buf, v: v.buf, out, tmp }));
    const want = flashAttnVecRef({ ...p, slidingWindow: c.window, softcap: 0 }, q.values, k.values, v.values);
    const name = `flash_attn_vec_${c.kv === 'f16' ? 'f16kv_' : ''}dk${c.headDim} + reduce`;
    rows.push({ kernel: name, model: `Gemma 4 ${c.headDim === 256 ? 'sliding' : 'global'} attn`,
      shape: `kv ${c.kvSeqLen}, 16q/2kv heads, NWG ${c.nwg}, ${c.mask}${note}`, err: scaledErr(out.readNumbers(), want), tol: 1e-5, ms });
    for (const b of [q.buf, k.buf, v.buf, out, tmp]) b.release();
  }

  // --- flash_attn_vec, bf16 K/V on every backend's decode path: Qwen3.6's
  // full attention (16 query / 2 KV heads of 256) over one long cache, and a
  // Gemma 4 sliding layer's rings (window 1024) read for 4 sequences at their
  // own positions in one call ---
  {
    const kvLen = emu ? 2048 : 32768;
    const p: FlashAttnVecParams = {
      batch: 1, nHeads: 16, nKvHeads: 2, headDim: 256, kvSeqLen: kvLen, kvCapacity: kvLen, scale: 1 / 16, mask: 'causal', nwg: 32,
    };
    const q = stored(device, 'f32', randn(16 * 256));
    const k = stored(device, 'bf16', randn(2 * kvLen * 256));
    const v = stored(device, 'bf16', randn(2 * kvLen * 256));
    const out = poisoned(device, 'f32', 16 * 256);
    const tmp = poisoned(device, 'f32', flashAttnVecTmpElements(p));
    const ms = timed(device, (enc) => flashAttnVec(enc, { ...p, q: q.buf, k: k.buf, v: v.buf, out, tmp }));
    const want = flashAttnVecRef({ ...p, slidingWindow: 0, softcap: 0 }, q.values, k.values, v.values);
    rows.push({ kernel: 'flash_attn_vec_bf16kv_dk256 + reduce', model: 'Qwen3.6 full attn decode',
      shape: `kv ${kvLen}, 16q/2kv heads, NWG 32${note}`, err: scaledErr(out.readNumbers(), want), tol: 1e-5, ms });
    for (const b of [q.buf, k.buf, v.buf, out, tmp]) b.release();
  }
  {
    const W = emu ? 128 : 1024;
    const lens = emu ? [3001, 128, 17, 500] : [40007, 1024, 100, 5000];
    const p: FlashAttnVecVarlenParams = {
      batch: 4, nHeads: 16, nKvHeads: 2, headDim: 256, kvCapacity: W, scale: 1, mask: 'none', nwg: 8, ring: true,
    };
    const q = stored(device, 'f32', randn(4 * 16 * 256, 1 / 16));
    const k = stored(device, 'bf16', randn(4 * 2 * W * 256));
    const v = stored(device, 'bf16', randn(4 * 2 * W * 256));
    const seqLens = device.upload('u32', [4], lens);
    const out = poisoned(device, 'f32', 4 * 16 * 256);
    const tmp = poisoned(device, 'f32', flashAttnVecTmpElements(p));
    const ms = timed(device, (enc) => flashAttnVecVarlen(enc, { ...p, q: q.buf, k: k.buf, v: v.buf, out, tmp, seqLens }));
    const want = flashAttnVecVarlenRef({ ...p, slidingWindow: 0, softcap: 0, ring: true, seqLens: lens }, q.values, k.values, v.values);
    rows.push({ kernel: 'flash_attn_vec_varlen_bf16kv_dk256 + reduce', model: 'Gemma 4 sliding attn decode',
      shape: `ring ${W} at positions ${lens.join(', ')}, 16q/2kv heads, NWG 8${note}`, err: scaledErr(out.readNumbers(), want), tol: 1e-5, ms });
    for (const b of [q.buf, k.buf, v.buf, out, tmp, seqLens]) b.release();
  }
  // --- end of flash_attn_vec, bf16 K/V ---

  // --- Qwen3.6 linear-attention layer, end to end: conv, l2 norm, g/beta,
  // chunked prefill of T tokens, then one decode step from its final state ---
  {
    const TL = emu ? 128 : 1024;
    const C = 2 * HG * KD + H * VD;
    const shape = `T=${TL} H=${H} Hg=${HG} K=V=${KD}${note}`;

    const x = stored(device, 'f32', randn(TL * C));
    const cw = stored(device, 'f32', randn(C * 4, 0.5));
    const cy = poisoned(device, 'f32', TL * C);
    const cs = poisoned(device, 'f32', C * 3);
    let ms = timed(device, (enc) =>
      ssmConv(enc, { x: x.buf, weight: cw.buf, state: cs, y: cy, b: 1, t: TL, c: C, ks: 4, silu: true, freshState: true }));
    const conv = ssmConvRef({ b: 1, t: TL, c: C, ks: 4, silu: true }, x.values, cw.values);
    rows.push({ kernel: 'ssm_conv_f32 (y, state)', model: 'Qwen3.6 GDN conv', shape: `T=${TL} C=${C} KS=4 SiLU${note}`,
      err: Math.max(scaledErr(cy.readNumbers(), conv.y), scaledErr(cs.readNumbers(), conv.newState)), tol: 1e-5, ms });
    for (const b of [x.buf, cw.buf, cy, cs]) b.release();

    // T + 1 tokens of q, k (L2-normalized on the device), v, a, b; the last one is the decode token.
    const n = TL + 1;
    const qk = stored(device, 'bf16', randn(2 * n * HG * KD));
    const qkN = poisoned(device, 'bf16', 2 * n * HG * KD);
    ms = timed(device, (enc) => l2Norm(enc, { x: qk.buf, y: qkN, rows: 2 * n * HG, dim: KD, eps: 1e-6 }));
    const qkNorm = qkN.readNumbers();
    rows.push({ kernel: 'l2_norm_bf16', model: 'Qwen3.6 GDN q, k', shape: `${2 * n * HG} rows x ${KD}${note}`,
      err: scaledErr(qkNorm, l2NormRef(qk.values, 2 * n * HG, KD, 1e-6)), tol: 1e-2, ms });

    const a = stored(device, 'f32', randn(n * H));
    const bIn = stored(device, 'f32', randn(n * H));
    const aLog = stored(device, 'f32', uniform(H, -1, 0.5));
    const dtBias = stored(device, 'f32', uniform(H, -1, 1));
    const g = poisoned(device, 'f32', n * H);
    const beta = poisoned(device, 'f32', n * H);
    ms = timed(device, (enc) =>
      computeGBeta(enc, { a: a.buf, b: bIn.buf, aLog: aLog.buf, dtBias: dtBias.buf, g, beta, batch: 1, seqLen: n, nHeads: H }));
    const gb = computeGBetaRef(H, a.values, bIn.values, aLog.values, dtBias.values);
    const gVals = g.readNumbers();
    const betaVals = beta.readNumbers();
    rows.push({ kernel: 'compute_g_beta_f32', model: 'Qwen3.6 GDN gates', shape: `T=${n} H=${H}${note}`,
      err: Math.max(scaledErr(gVals, gb.g), scaledErr(betaVals, gb.beta)), tol: 1e-5, ms });

    // q and k as [T, Hg, K] each, from the normalized rows; v random.
    const qAll = qkNorm.subarray(0, n * HG * KD);
    const kAll = qkNorm.subarray(n * HG * KD);
    const vAll = stored(device, 'bf16', randn(n * H * VD)).values;
    const part = (arr: Float64Array, t0: number, t1: number, row: number): Float64Array => arr.slice(t0 * row, t1 * row);
    const q = device.upload('bf16', [TL * HG * KD], part(qAll, 0, TL, HG * KD));
    const k = device.upload('bf16', [TL * HG * KD], part(kAll, 0, TL, HG * KD));
    const v = device.upload('bf16', [TL * H * VD], part(vAll, 0, TL, H * VD));
    const gP = device.upload('f32', [TL * H], part(gVals, 0, TL, H));
    const betaP = device.upload('f32', [TL * H], part(betaVals, 0, TL, H));
    const o = poisoned(device, 'bf16', TL * H * VD);
    const state = poisoned(device, 'f32', H * VD * KD);
    const scale = 1 / Math.sqrt(KD);
    ms = timed(device, (enc) => chunkGatedDeltaRule(enc, {
      q, k, v, g: gP, beta: betaP, o, finalState: state, batch: 1, seqLen: TL, nQkHeads: HG, nHeads: H, kDim: KD, vDim: VD, scale,
    }));
    const shapeRef = { hg: HG, h: H, k: KD, v: VD };
    const prefill = gatedDeltaRuleRecurrentRef({ ...shapeRef, cuSeqlens: [0, TL] },
      { q: qAll, k: kAll, v: vAll, g: gVals, beta: betaVals }, scale);
    // o and the state pass through bf16 storage of w, u, v_new, the chunk-start states and o.
    rows.push({ kernel: 'chunk_gated_delta_rule (o)', model: 'Qwen3.6 GDN prefill', shape,
      err: scaledErr(o.readNumbers(), prefill.o), tol: 2e-2, ms });
    rows.push({ kernel: 'chunk_gated_delta_rule (final state)', model: 'Qwen3.6 GDN prefill', shape,
      err: scaledErr(state.readNumbers(), prefill.finalState), tol: 1e-2, ms });

    // Decode token T from the prefill's state, in place; against the recurrence over all T + 1 tokens.
    const tok = (arr: Float64Array, row: number): Float64Array => arr.slice(TL * row, n * row);
    const dq = device.upload('bf16', [HG * KD], tok(qAll, HG * KD));
    const dk = device.upload('bf16', [HG * KD], tok(kAll, HG * KD));
    const dv = device.upload('bf16', [H * VD], tok(vAll, H * VD));
    const dg = device.upload('f32', [H], tok(gVals, H));
    const dbeta = device.upload('f32', [H], tok(betaVals, H));
    const dout = poisoned(device, 'bf16', H * VD);
    ms = timed(device, (enc) => gatedDeltaNetDecode(enc, {
      q: dq, k: dk, v: dv, g: dg, beta: dbeta, state, output: dout, batch: 1, nQkHeads: HG, nHeads: H, kDim: KD, vDim: VD, scale,
    }));
    const whole = gatedDeltaRuleRecurrentRef({ ...shapeRef, cuSeqlens: [0, n] },
      { q: qAll, k: kAll, v: vAll, g: gVals, beta: betaVals }, scale);
    rows.push({ kernel: 'gated_delta_net_decode_bf16 after prefill', model: 'Qwen3.6 GDN decode', shape: `token ${TL} of ${n}`,
      err: Math.max(scaledErr(dout.readNumbers(), whole.o.subarray(TL * H * VD)), scaledErr(state.readNumbers(), whole.finalState)),
      tol: 2e-2, ms });
    for (const b of [qk.buf, qkN, a.buf, bIn.buf, aLog.buf, dtBias.buf, g, beta, q, k, v, gP, betaP, o, state, dq, dk, dv, dg, dbeta, dout]) b.release();
  }

  // --- rotary embeddings: Qwen3.6 full attention (IMROPE [11, 11, 10, 0], a quarter of 256
  // rotated, base 1e7) and Gemma 4 (q/k norm + rope: 256 sliding base 1e4, 512 global a
  // quarter rotated base 1e6), tokens at positions 1000 and on ---
  {
    const T = emu ? 8 : 512;
    const start = 1000;
    const pos = Array.from({ length: T }, (_, i) => start + i);
    const positions = device.upload('u32', [T], pos);
    const positions4 = device.upload('i32', [4, T], [...pos, ...pos, ...pos, ...pos]);
    {
      const [heads, hd] = [16, 256];
      const x = stored(device, 'bf16', randn(T * heads * hd));
      const out = poisoned(device, 'bf16', T * heads * hd);
      const ms = timed(device, (enc) => ropeMulti(enc, {
        input: x.buf, output: out, positions: positions4, seqLen: T, nHeads: heads, headDim: hd, ropeDim: 64, freqBase: 1e7,
        mode: 'imrope', sections: [11, 11, 10, 0],
      }));
      const want = ropeMultiRef(x.values, [...pos, ...pos, ...pos, ...pos], T, heads, hd, 64, 1e7, 'imrope', [11, 11, 10, 0]);
      rows.push({ kernel: 'rope_multi_bf16 (imrope)', model: 'Qwen3.6 full attn q', shape: `${T} tok x ${heads} x ${hd}, rot 64${note}`,
        err: scaledErr(out.readNumbers(), want), tol: 1e-2, ms });
      x.buf.release();
      out.release();
    }
    {
      const [heads, hd] = [2, 256];
      const x = stored(device, 'bf16', randn(T * heads * hd));
      const out = poisoned(device, 'bf16', T * heads * hd);
      const ms = timed(device, (enc) => ropeNeox(enc, {
        input: x.buf, output: out, positions, seqLen: T, nHeads: heads, headDim: hd, ropeDim: hd, theta: 1e4,
      }));
      rows.push({ kernel: 'rope_neox_bf16', model: 'Gemma 4 sliding attn k', shape: `${T} tok x ${heads} x ${hd}${note}`,
        err: scaledErr(out.readNumbers(), ropeNeoxRef(x.values, pos, T, heads, hd, hd, 1e4)), tol: 1e-2, ms });
      x.buf.release();
      out.release();
    }
    for (const [hd, half, theta, kind] of [[256, 128, 1e4, 'sliding'], [512, 64, 1e6, 'global']] as const) {
      const heads = 16;
      const x = stored(device, 'bf16', randn(T * heads * hd, 4));
      const w = stored(device, 'bf16', uniform(hd, 0.5, 1.5));
      const out = poisoned(device, 'bf16', T * heads * hd);
      const ms = timed(device, (enc) => fusedHeadNormRope(enc, {
        input: x.buf, output: out, weight: w.buf, positions, seqLen: T, nHeads: heads, headDim: hd, halfRopeDim: half, eps: 1e-6, theta,
      }));
      const want = fusedHeadNormRopeRef(x.values, w.values, pos, T, heads, hd, half, 1e-6, theta);
      rows.push({ kernel: 'fused_head_norm_rope_batch_bf16', model: `Gemma 4 ${kind} attn q`,
        shape: `${T} tok x ${heads} x ${hd}, rot ${2 * half}${note}`, err: scaledErr(out.readNumbers(), want), tol: 1e-2, ms });
      for (const b of [x.buf, w.buf, out]) b.release();
    }
    {
      // A Gemma 4 sliding layer's q (16 heads), k and v (8 heads) of 256 in one dispatch: q and k normalized and
      // rotated, v normalized, each in place.
      const [nh, nkv, hd] = [16, 8, 256];
      const q = stored(device, 'f32', randn(T * nh * hd, 5)), k = stored(device, 'f32', randn(T * nkv * hd, 6));
      const v = stored(device, 'f32', randn(T * nkv * hd, 7));
      const qw = stored(device, 'f32', uniform(hd, 0.5, 1.5)), kw = stored(device, 'f32', uniform(hd, 0.5, 1.5));
      const ms = timed(device, (enc) => fusedHeadNormRopeQkv(enc, {
        q: q.buf, k: k.buf, v: v.buf, qWeight: qw.buf, kWeight: kw.buf, positions, seqLen: T, nHeads: nh, nKvHeads: nkv, headDim: hd,
        halfRopeDim: hd / 2, eps: 1e-6, theta: 1e4,
      }));
      // One timed dispatch (timed runs the work once): the buffers hold its results.
      const err = Math.max(
        scaledErr(q.buf.readNumbers(), fusedHeadNormRopeRef(q.values, qw.values, pos, T, nh, hd, hd / 2, 1e-6, 1e4)),
        scaledErr(k.buf.readNumbers(), fusedHeadNormRopeRef(k.values, kw.values, pos, T, nkv, hd, hd / 2, 1e-6, 1e4)),
        scaledErr(v.buf.readNumbers(), fusedHeadNormRopeRef(v.values, undefined, pos, T, nkv, hd, 0, 1e-6, 1e4)));
      // The tolerance: the f32 angle's error bound at the largest position (tests/rope.test.ts: |angle| (ln(theta)
      // 2i / d + 8) 2^-24 + 2^-23, here at its largest i) plus the norm's 2^-20.
      const tol = pos[T - 1]! * (Math.log(1e4) + 8) * 2 ** -24 + 2 ** -23 + 2 ** -20;
      rows.push({ kernel: 'fused_head_norm_rope_qkv_f32', model: 'Gemma 4 sliding attn q, k, v',
        shape: `${T} tok x (${nh} + 2 x ${nkv}) x ${hd}${note}`, err, tol, ms });
      for (const b of [q.buf, k.buf, v.buf, qw.buf, kw.buf]) b.release();
    }
    positions.release();
    positions4.release();
  }

  // --- the glue: RMS norms, softmax, softcap ---
  {
    const tokens = 16;
    const dim = 5376;
    oneOutput({ kernel: 'rms_norm_bf16', model: 'Gemma 4 31B norm', shape: `${tokens} x ${dim}`, tol: 1e-2 },
      [['bf16', randn(tokens * dim, 4)], ['bf16', uniform(dim, 0.5, 1.5)]], ['bf16', tokens * dim],
      (enc, [x, w], output) => rmsNorm(enc, { input: x!, weight: w!, output, rows: tokens, dim }),
      ([x, w]) => rmsNormRef(x!, w!, tokens, dim, 1e-6));
  }
  for (const [model, heads, headDim, weighted] of [['Qwen3.6 q norm', 16, 256, true], ['Gemma 4 v norm', 2, 512, false]] as const) {
    const tokens = 16;
    const n = tokens * heads * headDim;
    oneOutput({ kernel: weighted ? 'rms_norm_bf16 (per head)' : 'rms_norm_no_scale_bf16 (per head)', model,
      shape: `${tokens} tok x ${heads} heads x ${headDim}`, tol: 1e-2 },
      [['bf16', randn(n, 5)], ['bf16', uniform(headDim, 0.5, 1.5)]], ['bf16', n],
      (enc, [x, w], output) => rmsNormPerHead(enc, { input: x!, weight: weighted ? w : undefined, output, tokens, heads, headDim }),
      ([x, w]) => rmsNormRef(x!, weighted ? w! : null, tokens * heads, headDim, 1e-6));
  }
  {
    const [heads, q, keys] = [16, 16, 512];
    const scores = stored(device, 'f32', randn(heads * q * keys, 8));
    const maskValues = Array.from({ length: q * keys }, (_, i) => (i % keys > keys - q + Math.floor(i / keys) ? -Infinity : 0));
    const mask = stored(device, 'bf16', maskValues);
    const p = poisoned(device, 'f32', heads * q * keys);
    const opts = { scale: 1 / 16, softcap: 50 };
    const ms = timed(device, (enc) =>
      softmax(enc, { input: scores.buf, output: p, rows: heads * q, cols: keys, ...opts, mask: mask.buf, seqQ: q }));
    rows.push({ kernel: 'scale_mask_softmax_f32', model: 'attention scores', shape: `${heads} heads x ${q} q x ${keys} keys, softcap 50`,
      err: scaledErr(p.readNumbers(), softmaxRef(scores.values, heads * q, keys, { ...opts, mask: mask.values, seqQ: q })), tol: 1e-5, ms });
    for (const b of [scores.buf, mask.buf, p]) b.release();
  }
  {
    const vocab = 262144;
    const logits = stored(device, 'f32', randn(vocab, 6));
    const capped = poisoned(device, 'f32', vocab);
    const probs = poisoned(device, 'f32', vocab);
    let ms = timed(device, (enc) => softcap(enc, { input: logits.buf, output: capped, cap: 30 }));
    const cappedWant = softcapRef(logits.values, 30);
    rows.push({ kernel: 'softcap_f32', model: 'Gemma 4 final logits', shape: `${vocab}`, err: scaledErr(capped.readNumbers(), cappedWant), tol: 1e-5, ms });
    // The kernels the plan picks (one row of the vocabulary without a scratch: softmax_f32).
    const planned = planSoftmax({ input: capped, output: probs, rows: 1, cols: vocab }, device.limits, device).dispatches.map((d) => d.kernel).join(' + ');
    ms = timed(device, (enc) => softmax(enc, { input: capped, output: probs, rows: 1, cols: vocab }));
    rows.push({ kernel: planned, model: 'Gemma 4 vocabulary', shape: `1 x ${vocab}`,
      err: scaledErr(probs.readNumbers(), softmaxRef(capped.readNumbers(), 1, vocab)), tol: 1e-5, ms });
    for (const b of [logits.buf, capped, probs]) b.release();
  }

  // --- glue speed forms: softmax over a scratch (two passes), gelu alone (the crate's gelu_bf16) ---
  {
    const vocab = 262144;
    const logits = stored(device, 'f32', randn(vocab, 6));
    const probs = poisoned(device, 'f32', vocab);
    const scratch = device.alloc('f32', [softmaxScratchElements(1, vocab)]);
    // Two passes (softmax_blocks_f32 + softmax_finish_f32, 128 slices).
    const planned = planSoftmax({ input: logits.buf, output: probs, rows: 1, cols: vocab, scratch }, device.limits, device).dispatches.map((d) => d.kernel).join(' + ');
    const ms = timed(device, (enc) => softmax(enc, { input: logits.buf, output: probs, rows: 1, cols: vocab, scratch }));
    rows.push({ kernel: planned, model: 'Gemma 4 vocabulary', shape: `1 x ${vocab}, with a scratch`,
      err: scaledErr(probs.readNumbers(), softmaxRef(logits.values, 1, vocab)), tol: 1e-5, ms });
    for (const b of [logits.buf, probs, scratch]) b.release();
  }
  {
    const tokens = 16;
    const dim = 21504;
    oneOutput({ kernel: 'gelu_bf16', model: 'Gemma 4 31B MLP activation', shape: `${tokens} tok x ${dim}`, tol: 1e-2 },
      [['bf16', randn(tokens * dim, 3)]], ['bf16', tokens * dim],
      (enc, [x], output) => gelu(enc, { input: x!, output }), ([x]) => geluRef(x!));
  }
  // --- end of glue speed forms ---

  // --- elementwise: the residual add, h = h + sublayer(h) ---
  {
    const tokens = 16;
    const dim = 5376;
    oneOutput({ kernel: 'elementwise_add_bf16', model: 'Gemma 4 31B residual', shape: `${tokens} x ${dim}`, tol: 1e-2 },
      [['bf16', randn(tokens * dim, 2)], ['bf16', randn(tokens * dim, 0.5)]], ['bf16', tokens * dim],
      (enc, [h, sub], output) => elementwiseAdd(enc, { a: h!, b: sub!, output }), ([h, sub]) => elementwiseAddRef(h!, sub!));
  }
  // --- end of elementwise ---
  // --- the gated activations: silu_mul, gelu, sigmoid_mul ---
  {
    const tokens = 16;
    const dim = 17408;
    oneOutput({ kernel: 'silu_mul_halves_bf16', model: 'Qwen3.6-27B MLP (fused gate_up)', shape: `${tokens} tok x 2 x ${dim}`, tol: 1e-2 },
      [['bf16', randn(tokens * 2 * dim, 2)]], ['bf16', tokens * dim],
      (enc, [gateUp], output) => siluMulHalves(enc, { gateUp: gateUp!, output, rows: tokens, dim }),
      ([gateUp]) => siluMulHalvesRef(gateUp!, tokens, dim));
  }
  {
    const tokens = 16;
    const dim = 21504;
    oneOutput({ kernel: 'gelu_tanh_mul_bf16', model: 'Gemma 4 31B MLP (GeGLU)', shape: `${tokens} tok x ${dim}`, tol: 1e-2 },
      [['bf16', randn(tokens * dim, 2)], ['bf16', randn(tokens * dim, 2)]], ['bf16', tokens * dim],
      (enc, [gate, up], output) => geluTanhMul(enc, { gate: gate!, up: up!, output }), ([gate, up]) => geluTanhMulRef(gate!, up!));
  }
  {
    const [tokens, heads, headDim] = [16, 16, 256];
    const n = tokens * heads * headDim;
    oneOutput({ kernel: 'sigmoid_mul_bf16', model: 'Qwen3.6 attn output gate', shape: `${tokens} tok x ${heads} heads x ${headDim}`, tol: 1e-2 },
      [['bf16', randn(n, 1)], ['bf16', randn(n, 3)]], ['bf16', n],
      (enc, [x, gate], output) => sigmoidMul(enc, { x: x!, gate: gate!, output }), ([x, gate]) => sigmoidMulRef(x!, gate!));
  }
  // --- end of the gated activations ---

  // --- embedding: Gemma 4 31B's scaled lookup ---
  {
    const [vocab, hidden, tokens] = [1024, 5376, 16];
    const table = stored(device, 'bf16', randn(vocab * hidden));
    const idValues = Array.from({ length: tokens }, () => Math.floor(rng.uniform(0, vocab)));
    const ids = device.upload('u32', [tokens], idValues);
    const out = poisoned(device, 'bf16', tokens * hidden);
    const scale = stored(device, 'bf16', [Math.sqrt(hidden)]).values[0]!;
    const ms = timed(device, (enc) =>
      embedding(enc, { table: table.buf, tokenIds: ids, output: out, vocabSize: vocab, hiddenSize: hidden, nTokens: tokens, scale }));
    rows.push({ kernel: 'embedding_gather_scale_batch_bf16', model: 'Gemma 4 31B embedding', shape: `${tokens} tok x ${hidden} (rows of ${vocab})`,
      err: scaledErr(out.readNumbers(), embeddingRef(table.values, idValues, vocab, hidden, scale)), tol: 1e-2, ms });
    for (const b of [table.buf, ids, out]) b.release();
  }
  // --- end of embedding ---

  // --- kv_cache_copy: a Gemma 4 sliding layer's prefill into its ring ---
  {
    const [heads, headDim, window] = [8, 256, 1024];
    const seqLen = emu ? 1100 : 8192;
    const n = Math.min(seqLen, window);
    const k = stored(device, 'bf16', randn(seqLen * heads * headDim));
    const v = stored(device, 'bf16', randn(seqLen * heads * headDim));
    const ck = poisoned(device, 'f16', heads * window * headDim);
    const cv = poisoned(device, 'f16', heads * window * headDim);
    const seq = { nHeads: heads, headDim, capacity: window, seqPosStart: seqLen - n, nTokens: n, srcTokOffset: seqLen - n, ring: true };
    const ms = timed(device, (enc) => kvCacheCopySeqDual(enc, { srcK: k.buf, srcV: v.buf, cacheK: ck, cacheV: cv, ...seq }));
    const empty = new Float64Array(heads * window * headDim);
    const want = (x: Float64Array) => kvCacheCopySeqRef(x, empty, heads, headDim, window, seq.seqPosStart, n, seq.srcTokOffset);
    rows.push({ kernel: 'kv_cache_copy_seq_bf16_to_f16_kv_dual', model: 'Gemma 4 sliding KV ring',
      shape: `${seqLen} tok -> last ${n} in ${heads} x ${window} x ${headDim}${emu ? note : ''}`,
      err: Math.max(scaledErr(ck.readNumbers(), want(k.values)), scaledErr(cv.readNumbers(), want(v.values))), tol: 1e-3, ms });
    for (const b of [k.buf, v.buf, ck, cv]) b.release();
  }
  // --- end of kv_cache_copy ---
  // --- sample: one token from Gemma 4's vocabulary with its sampling defaults, and with top-p alone ---
  {
    const vocab = 262144;
    // N(0, 36) logits: the defaults' 64 candidates; N(0, 4) logits with top-p 0.95 alone: a nucleus of
    // about 95000 tokens, drawn by the whole-row passes.
    for (const [sigma, o, kernels] of [
      [6, { temperature: 1, topK: 64, topP: 0.95, seed: 2026, counter: 1 }, 'sample_blocks_f32 + sample_finish_f32'],
      [2, { temperature: 1, topP: 0.95, seed: 2026, counter: 2 }, 'sample_blocks_f32 + 3 sample_mass_f32 + sample_finish_f32'],
    ] as const) {
      const logits = stored(device, 'f32', randn(vocab, sigma));
      const token = poisoned(device, 'u32', 1);
      const logprob = poisoned(device, 'f32', 1);
      const scratch = device.alloc('u32', [sampleScratchElements(1, vocab)]);
      const ms = timed(device, (enc) => sample(enc, { logits: logits.buf, outToken: token, outLogprob: logprob, scratch, rows: 1, vocab, ...o }));
      const want = sampleRowRef(logits.values, vocab, 0, o);
      // The token must be the reference's; the error is that of its log-probability.
      const err = token.read()[0] === want.token ? Math.abs(logprob.read()[0]! - want.logprob) / Math.max(1, Math.abs(want.logprob)) : Infinity;
      const filters = 'topK' in o ? 'top-k 64, top-p 0.95' : 'top-p 0.95 alone, whole row';
      rows.push({ kernel: kernels, model: 'Gemma 4 sampling', shape: `1 x ${vocab}, T 1, ${filters}`, err, tol: 1e-4, ms });
      for (const b of [logits.buf, token, logprob, scratch]) b.release();
    }
  }
  // --- dense products: Qwen3.6 27B MLP up (5120 -> 17408; prefill of 512 tokens on a GPU: wgmma on Hopper), Gemma 4 vocabulary (5376 -> 262144) ---
  {
    const [k, n] = [5120, emu ? 1024 : 17408];
    const w = repeatedRows(device, n, k, 1024);
    for (const tokens of emu ? [1, 64] : [1, 64, 512]) {
      const x = stored(device, 'bf16', randn(tokens * k));
      const y = poisoned(device, 'bf16', tokens * n);
      const ms = timed(device, (enc) => denseMatmul(enc, { x: x.buf, weight: w.buf, output: y, m: tokens, n, k }));
      const { seen, want } = sampledProduct(y, x.values, w.row, tokens, n, k, tokens > 64 ? 64 : 512);
      rows.push({ kernel: tokens === 1 ? 'dense_mv_bf16' : 'dense_mm_bf16', model: 'Qwen3.6 27B MLP up',
        shape: `${tokens} tok x ${k} -> ${n}${note}`, err: scaledErr(seen, want), tol: 1e-2, ms });
      x.buf.release();
      y.release();
    }
    w.buf.release();
  }
  {
    const [k, n] = [5376, emu ? 16384 : 262144];
    const x = stored(device, 'f32', randn(k));
    const w = repeatedRows(device, n, k, 4096);
    const y = poisoned(device, 'f32', n);
    const ms = timed(device, (enc) => denseMatvec(enc, { a: x.buf, b: w.buf, output: y, m: 1, n, k }));
    const got = y.readNumbers();
    const checked = Array.from({ length: 8192 }, () => Math.floor(rng.uniform(0, n)));
    const want = checked.map((j) => denseRef(x.values, w.row(j), 1, 1, k)[0]!);
    rows.push({ kernel: 'dense_matvec_bf16w_f32io', model: 'Gemma 4 vocabulary', shape: `1 x ${k} -> ${n}${note}`,
      err: scaledErr(checked.map((j) => got[j]!), want), tol: 1e-5, ms });
    for (const b of [x.buf, w.buf, y]) b.release();
  }

  // --- quantized products: Qwen3.6 27B MLP up (5120 -> 17408), MLX's 4 bits, groups of 64, bf16 scales ---
  {
    const [k, n, distinct, gs, bits] = [5120, emu ? 1024 : 17408, 1024, 64, 4];
    const qz = affineQuantize(randn(distinct * k, 0.05), distinct, k, gs, bits, 'bf16');
    const w = affineDequantize(qz.packed, qz.scales, qz.biases, distinct, k, gs, bits);
    const row = (j: number): Float64Array => w.subarray((j % distinct) * k, (j % distinct + 1) * k);
    const rowBytes = (k * bits) / 8;
    const groups = k / gs;
    const weight = device.alloc('u32', [(n * rowBytes) / 4]);
    const scales = device.alloc('bf16', [n * groups]);
    const biases = device.alloc('bf16', [n * groups]);
    const s16 = device.upload('bf16', [distinct * groups], qz.scales).read() as Uint16Array;
    const b16 = device.upload('bf16', [distinct * groups], qz.biases).read() as Uint16Array;
    for (let r = 0; r < n; r += distinct) {
      const rows = Math.min(distinct, n - r);
      weight.write(new DataView(qz.packed.buffer, 0, rows * rowBytes), { byteOffset: r * rowBytes });
      scales.write(s16.subarray(0, rows * groups), { byteOffset: r * groups * 2 });
      biases.write(b16.subarray(0, rows * groups), { byteOffset: r * groups * 2 });
    }
    for (const tokens of [1, 64]) {
      const x = stored(device, 'bf16', randn(tokens * k));
      const y = poisoned(device, 'bf16', tokens * n);
      const ms = timed(device, (enc) =>
        affineQuantizedMatmul(enc, { x: x.buf, weight, scales, biases, output: y, m: tokens, n, k, groupSize: gs, bits }));
      const { seen, want } = sampledProduct(y, x.values, row, tokens, n, k, 512);
      rows.push({ kernel: tokens === 1 ? 'quantized_mv_bf16' : 'quantized_mm_bf16', model: 'Qwen3.6 27B MLP up, MLX 4-bit g64',
        shape: `${tokens} tok x ${k} -> ${n}${note}`, err: scaledErr(seen, want), tol: 1e-2, ms });
      x.buf.release();
      y.release();
    }
    // The weight itself dequantized to f16 (a prompt's products on CUDA run the dense tiles on it): 8192 sampled values
    // against the float64 dequantization, f16's tolerance (one rounding).
    const whole = poisoned(device, 'f16', n * k);
    const dqMs = timed(device, (enc) => quantizedDequantize(enc, { weight, scales, biases, output: whole, n, k, groupSize: gs, bits }));
    const got = whole.readNumbers();
    const at = Array.from({ length: 8192 }, () => [Math.floor(rng.uniform(0, n)), Math.floor(rng.uniform(0, k))] as const);
    rows.push({ kernel: 'quantized_dequantize_bf16_f16', model: 'Qwen3.6 27B MLP up, MLX 4-bit g64', shape: `[${n}, ${k}] -> f16${note}`,
      err: scaledErr(at.map(([j, c]) => got[j * k + c]!), at.map(([j, c]) => row(j)[c]!)), tol: 1e-3, ms: dqMs });
    whole.release();
    for (const b of [weight, scales, biases]) b.release();
  }
  // --- end of quantized products ---

  // --- GGUF blocks: Qwen3.6 27B MLP up (5120 -> 17408) in Q4_K; Gemma 4 embedding rows from a Q6_K table ---
  {
    const [k, n, distinct] = [5120, emu ? 1024 : 17408, 1024];
    const q = ggmlQuantize('Q4_K', randn(distinct * k, 0.05), distinct, k);
    const w = ggmlDequantizeRef('Q4_K', q, distinct * k);
    const row = (j: number): Float64Array => w.subarray((j % distinct) * k, (j % distinct + 1) * k);
    const rowBytes = ggmlRowBytesOf('Q4_K', k);
    const weight = device.alloc('u8', [n * rowBytes]);
    for (let r = 0; r < n; r += distinct) weight.write(q.subarray(0, Math.min(distinct, n - r) * rowBytes), { byteOffset: r * rowBytes });
    for (const tokens of [1, 64]) {
      const x = stored(device, 'f32', randn(tokens * k));
      const y = poisoned(device, 'f32', tokens * n);
      const ms = timed(device, (enc) => quantizedMatmulGgml(enc, { input: x.buf, weight, output: y, m: tokens, n, k, ggmlType: 'Q4_K' }));
      const { seen, want } = sampledProduct(y, x.values, row, tokens, n, k, 512);
      // Metal's vector kernel sums f32 products of an f32 weight; its matrix kernel stages the weight in f16,
      // and CUDA's tensor cores take the weight and x in bf16.
      const tol = tokens === 1 && device.backend !== 'cuda' ? 1e-5 : 1e-2;
      rows.push({ kernel: tokens === 1 ? 'kernel_mul_mv_q4_K_f32' : 'kernel_mul_mm_q4_K_f32', model: 'Qwen3.6 27B MLP up, GGUF Q4_K',
        shape: `${tokens} tok x ${k} -> ${n}${note}`, err: scaledErr(seen, want), tol, ms });
      x.buf.release();
      y.release();
    }
    weight.release();
  }
  {
    const [vocab, hidden, tokens] = [1024, 5376, emu ? 32 : 512];
    const q = ggmlQuantize('Q6_K', randn(vocab * hidden, 0.05), vocab, hidden);
    const table = device.upload('u8', [q.length], q);
    const ids = Array.from({ length: tokens }, () => Math.floor(rng.uniform(0, vocab)));
    const idBuf = device.upload('u32', [tokens], ids);
    const scale = Math.sqrt(hidden);
    const out = poisoned(device, 'bf16', tokens * hidden);
    const ms = timed(device, (enc) => embedding(enc, { table, tableType: 'Q6_K', tokenIds: idBuf, output: out, vocabSize: vocab, hiddenSize: hidden,
      nTokens: tokens, scale }));
    rows.push({ kernel: 'embedding_gather_scale_batch_q6_K_to_bf16', model: 'Gemma 4 31B embedding, GGUF Q6_K', shape: `${tokens} tok x ${hidden} (rows of ${vocab})`,
      err: scaledErr(out.readNumbers(), ggmlEmbeddingRef('Q6_K', q, ids, vocab, hidden, scale)), tol: 1e-2, ms });
    const whole = poisoned(device, 'bf16', vocab * hidden);
    const ms2 = timed(device, (enc) => ggmlDequantize(enc, { src: table, output: whole, count: vocab * hidden, ggmlType: 'Q6_K' }));
    rows.push({ kernel: 'kernel_dequantize_q6_K_bf16', model: 'Gemma 4 31B embedding table, GGUF Q6_K', shape: `${vocab} x ${hidden}`,
      err: scaledErr(whole.readNumbers(), ggmlDequantizeRef('Q6_K', q, vocab * hidden)), tol: 1e-2, ms: ms2 });
    for (const b of [table, idBuf, out, whole]) b.release();
  }
  // --- end of GGUF blocks ---

  // --- GGUF experts: Qwen3.6-35B-A3B's gate projection (2048 -> 512) of 256 Q4_K experts, top-8 ---
  {
    // Experts repeat 4 distinct quantized ones (expert e holds e % 4's blocks): 256 experts without their float64 copies.
    // The emulator's prefill takes 16 of them, so that its tiles hold several pairs.
    const [topK, n, k, distinct] = [8, 512, 2048, 4];
    const q = ggmlQuantize('Q4_K', randn(distinct * n * k, 0.05), distinct * n, k);
    const w = ggmlDequantizeRef('Q4_K', q, distinct * n * k);
    const expertBytes = n * ggmlRowBytesOf('Q4_K', k);
    const weight = device.alloc('u8', [256 * expertBytes]);
    for (let e = 0; e < 256; e += distinct) weight.write(q, { byteOffset: e * expertBytes });
    for (const tokens of [1, emu ? 16 : 64]) {
      const E = tokens > 1 && emu ? 16 : 256;
      const P = tokens * topK;
      const pick = Array.from({ length: P }, () => Math.floor(rng.uniform(0, E)));
      const ids = device.upload('u32', [P], pick);
      const x = stored(device, 'f32', randn(tokens * k));
      const y = poisoned(device, 'f32', P * n);
      const a = { input: x.buf, weight, output: y, nTokens: tokens, topK, n, k, nExperts: E, ggmlType: 'Q4_K' as const };
      const offsets = device.alloc('u32', [E + 2]);
      const order = device.alloc('u32', [P]);
      if (tokens > 1) {
        const enc = device.encoder();
        moeDispatchSort(enc, { ids, offsets, order, nPairs: P, numExperts: E });
        enc.commitAndWait();
        enc.release();
      }
      const ms = timed(device, (enc) => (tokens === 1 ? quantizedMatmulIdGgml(enc, { ...a, ids }) : quantizedMatmulIdGgmlMm(enc, { ...a, offsets, order })));
      // 512 sampled outputs against the float64 product with the dequantized expert.
      const got = y.readNumbers();
      const seen: number[] = [];
      const want: number[] = [];
      for (let i = 0; i < 512; i++) {
        const p = Math.floor(rng.uniform(0, P));
        const j = Math.floor(rng.uniform(0, n));
        const base = ((pick[p]! % distinct) * n + j) * k;
        let v = 0;
        for (let c = 0; c < k; c++) v += x.values[Math.floor(p / topK) * k + c]! * w[base + c]!;
        seen.push(got[p * n + j]!);
        want.push(v);
      }
      // As the dense GGUF rows: Metal's vector kernel sums f32 products of an f32 weight; its matrix kernel stages the
      // weight in f16, and CUDA's tensor cores take the weight and x in bf16.
      const tol = tokens === 1 && device.backend !== 'cuda' ? 1e-5 : 1e-2;
      rows.push({ kernel: tokens === 1 ? 'kernel_mul_mv_id_q4_K_f32' : 'kernel_mul_mm_id_q4_K_f32', model: 'Qwen3.6 35B-A3B experts gate, GGUF Q4_K',
        shape: `${tokens} tok x top-${topK} of ${E}, ${k} -> ${n}${tokens > 1 ? note : ''}`, err: scaledErr(seen, want), tol, ms });
      if (tokens > 1) {
        // The fused gate/up matrix form over the same grouping, expert e's up rows the gate rows of distinct expert
        // (e + 1) % 4: silu(x . g) * (x . u), 512 sampled outputs.
        const up = device.alloc('u8', [E * expertBytes]);
        for (let e = 0; e < E; e++) up.write(q.subarray(((e + 1) % distinct) * expertBytes, ((e + 1) % distinct + 1) * expertBytes), { byteOffset: e * expertBytes });
        const h = poisoned(device, 'f32', P * n);
        const guMs = timed(device, (enc) => quantizedMatmulIdGgmlMmGateUp(enc, {
          input: x.buf, gateWeight: weight, upWeight: up, output: h, nTokens: tokens, topK, n, k, nExperts: E, ggmlType: 'Q4_K', offsets, order,
        }));
        const hv = h.readNumbers();
        const gSeen: number[] = [];
        const gWant: number[] = [];
        for (let i = 0; i < 512; i++) {
          const p = Math.floor(rng.uniform(0, P));
          const j = Math.floor(rng.uniform(0, n));
          const dot = (e: number): number => {
            const base = ((e % distinct) * n + j) * k;
            let v = 0;
            for (let c = 0; c < k; c++) v += x.values[Math.floor(p / topK) * k + c]! * w[base + c]!;
            return v;
          };
          const e = pick[p]!;
          gSeen.push(hv[p * n + j]!);
          gWant.push((dot(e) / (1 + Math.exp(-dot(e)))) * dot(e + 1));
        }
        rows.push({ kernel: 'kernel_mul_mm_id_q4_K_f32_gate_up', model: 'Qwen3.6 35B-A3B experts gate/up, GGUF Q4_K, SwiGLU',
          shape: `${tokens} tok x top-${topK} of ${E}, ${k} -> 2 x ${n}${note}`, err: scaledErr(gSeen, gWant), tol: 1e-2, ms: guMs });
        h.release();
        up.release();
      }
      for (const b of [ids, x.buf, y, offsets, order]) b.release();
    }
    weight.release();
  }
  // --- end of GGUF experts ---

  // --- per-expert (MoE) products: a Qwen3.6-35B-A3B MoE layer, MLX 4-bit g64, and Gemma 4 26B-A4B's bf16 experts ---
  {
    // Qwen3.6-35B-A3B: hidden 2048, 256 experts of moe_intermediate 512, top-8, a shared expert of 512 gated by
    // sigmoid(x W_sg^T). The experts' weights repeat 8 distinct quantized experts (expert e is e % 8), so the host
    // keeps 8 dequantized in float64. Routing by fused_moe_routing_batch on random logits.
    const [H, I, E, topK, distinct, gs] = [2048, 512, emu ? 8 : 256, 8, 8, 64];
    const experts = (rows: number, k: number, count = E): { weight: Buffer; scales: Buffer; biases: Buffer; w: Float64Array } => {
      const d = Math.min(distinct, count);
      const qz = affineQuantize(randn(d * rows * k, 0.05), d * rows, k, gs, 4, 'bf16');
      const w = affineDequantize(qz.packed, qz.scales, qz.biases, d * rows, k, gs, 4);
      const one = (rows * k) / 2;
      const groups = (rows * k) / gs;
      const weight = device.alloc('u32', [(count * one) / 4]);
      const scales = device.alloc('bf16', [count * groups]);
      const biases = device.alloc('bf16', [count * groups]);
      const s16 = device.upload('bf16', [d * groups], qz.scales).read() as Uint16Array;
      const b16 = device.upload('bf16', [d * groups], qz.biases).read() as Uint16Array;
      for (let e = 0; e < count; e += d) {
        weight.write(new DataView(qz.packed.buffer, 0, d * one), { byteOffset: e * one });
        scales.write(s16, { byteOffset: e * groups * 2 });
        biases.write(b16, { byteOffset: e * groups * 2 });
      }
      return { weight, scales, biases, w };
    };
    const gate = experts(I, H);
    const up = experts(I, H);
    const down = experts(H, I);
    const shared = { gate: experts(I, H, 1), up: experts(I, H, 1), down: experts(H, I, 1) };
    const wsg = stored(device, 'bf16', randn(H, 0.05));
    const zeros = device.upload('u32', [emu ? 4 : 512], new Array(emu ? 4 : 512).fill(0));
    const act = (g: number): number => g / (1 + Math.exp(-g));
    /** x [rows, k] times expert rows (float64 weights of distinct experts, each `n` rows). */
    const expertDot = (x: ArrayLike<number>, xRow: number, w: Float64Array, e: number, n: number, j: number, k: number): number =>
      denseRef(Array.prototype.slice.call(x, xRow * k, (xRow + 1) * k), w.subarray(((e % distinct) * n + j) * k, ((e % distinct) * n + j + 1) * k), 1, 1, k)[0]!;
    for (const T of [1, emu ? 4 : 512]) {
      const P = T * topK;
      const tag = `${T === 1 ? 'decode' : `${T}-token prefill`}, top-${topK} of ${E}${note}`;
      const x = stored(device, 'bf16', randn(T * H));
      const residual = stored(device, 'bf16', randn(T * H));
      const logits = device.upload('f32', [T, E], randn(T * E));
      const scale = device.upload('f32', [E], new Array(E).fill(1));
      const ids = device.alloc('u32', [T, topK]);
      const weights = device.alloc('f32', [T, topK]);
      const offsets = poisoned(device, 'u32', E + 2);
      const order = poisoned(device, 'u32', P);
      const h = poisoned(device, 'bf16', P * I);
      const y = poisoned(device, 'bf16', P * H);
      const hs = poisoned(device, 'bf16', T * I);
      const ys = poisoned(device, 'bf16', T * H);
      const logit = poisoned(device, 'bf16', T);
      const out = poisoned(device, 'bf16', T * H);
      const q = { groupSize: gs, bits: 4, numExperts: E };
      timed(device, (enc) => fusedMoeRoutingBatch(enc, { logits, expertIds: ids, routingWeights: weights, perExpertScale: scale, numExperts: E, topK, nTokens: T }));
      const sortMs = T === 1 ? 0 : timed(device, (enc) => moeDispatchSort(enc, { ids, offsets, order, nPairs: P, numExperts: E }));
      const gu = { x: x.buf, gateWeight: gate.weight, gateScales: gate.scales, gateBiases: gate.biases, upWeight: up.weight, upScales: up.scales,
        upBiases: up.biases, output: h, m: T, n: I, k: H, nExpertUsed: topK, ...q };
      const guMs = timed(device, (enc) => (T === 1 ? quantizedGateUpMvId(enc, { ...gu, ids }) : quantizedGateUpMmId(enc, { ...gu, offsets, order })));
      const dn = { x: h, weight: down.weight, scales: down.scales, biases: down.biases, output: y, m: P, n: H, k: I, nExpertUsed: 1, ...q };
      const downMs = timed(device, (enc) => (T === 1 ? quantizedMvId(enc, { ...dn, ids }) : quantizedMmId(enc, { ...dn, offsets, order })));
      // The shared expert: the same kernels with one expert, every row routed to it; its gate logit by dense_matmul.
      const one = { numExperts: 1, groupSize: gs, bits: 4 };
      const zid = zeros.slice(0, T);
      timed(device, (enc) => {
        quantizedGateUpMvId(enc, { x: x.buf, gateWeight: shared.gate.weight, gateScales: shared.gate.scales, gateBiases: shared.gate.biases,
          upWeight: shared.up.weight, upScales: shared.up.scales, upBiases: shared.up.biases, ids: zid, output: hs, m: T, n: I, k: H, nExpertUsed: 1,
          ...one });
        quantizedMvId(enc, { x: hs, weight: shared.down.weight, scales: shared.down.scales, biases: shared.down.biases, ids: zid, output: ys, m: T,
          n: H, k: I, nExpertUsed: 1, ...one });
        denseMatmul(enc, { x: x.buf, weight: wsg.buf, output: logit, m: T, n: 1, k: H });
      });
      const reduceMs = timed(device, (enc) => moeWeightedReduce(enc, { expertW: weights, yExpert: y, shLogit: logit, yShared: ys,
        residual: residual.buf, output: out, nTokens: T, topK, h: H }));
      const idv = ids.read() as Uint32Array;
      const wv = weights.readNumbers();
      // The grouping: offsets exactly, and each expert's pairs (order within an expert is free).
      if (T > 1) {
        const want = moeDispatchSortRef(idv, E);
        const off = offsets.read() as Uint32Array;
        const ord = order.read() as Uint32Array;
        let bad = 0;
        for (let b = 0; b <= E + 1; b++) if (off[b] !== want.offsets[b]) bad++;
        for (let b = 0; b <= E && bad === 0; b++) {
          const got = Array.from(ord.subarray(off[b]!, off[b + 1]!)).sort((a, c) => a - c);
          const exp = Array.from(want.order.subarray(want.offsets[b]!, want.offsets[b + 1]!)).sort((a, c) => a - c);
          if (got.join() !== exp.join()) bad++;
        }
        rows.push({ kernel: 'moe_dispatch_sort', model: 'Qwen3.6-35B-A3B MoE', shape: `${P} pairs, ${tag}`, err: bad, tol: 0, ms: sortMs });
      }
      // gate/up: every output of the decode token, 256 random (pair, column) of the prefill.
      const hv = h.readNumbers();
      const hErr = sampledErr(hv, I, T === 1, (p, j) =>
        act(expertDot(x.values, Math.floor(p / topK), gate.w, idv[p]!, I, j, H)) * expertDot(x.values, Math.floor(p / topK), up.w, idv[p]!, I, j, H));
      rows.push({ kernel: T === 1 ? 'quantized_gate_up_mv_id_bf16' : 'quantized_gate_up_mm_id_bf16', model: 'Qwen3.6-35B-A3B experts, SwiGLU',
        shape: `${H} -> 2 x ${I}, ${tag}`, err: hErr, tol: 1e-2, ms: guMs });
      // down: from the device's h (rounded to bf16), sampled alike over [P, H].
      const yv = y.readNumbers();
      const yErr = sampledErr(yv, H, T === 1, (p, j) => expertDot(hv, p, down.w, idv[p]!, H, j, I));
      rows.push({ kernel: T === 1 ? 'quantized_mv_id_bf16' : 'quantized_mm_id_bf16', model: 'Qwen3.6-35B-A3B experts, down',
        shape: `${I} -> ${H} over ${P} pairs, ${tag}`, err: yErr, tol: 1e-2, ms: downMs });
      // The layer's output: the reduce against the device's expert outputs, shared output and gate logit (each checked above or by its own tests).
      const ysv = ys.readNumbers();
      const lv = logit.readNumbers();
      const ov = out.readNumbers();
      const want = new Float64Array(T * H);
      for (let t = 0; t < T; t++) {
        const g = 1 / (1 + Math.exp(-lv[t]!));
        for (let d = 0; d < H; d++) {
          let acc = residual.values[t * H + d]! + g * ysv[t * H + d]!;
          for (let s2 = 0; s2 < topK; s2++) acc += wv[t * topK + s2]! * yv[(t * topK + s2) * H + d]!;
          want[t * H + d] = acc;
        }
      }
      rows.push({ kernel: 'moe_weighted_reduce_bf16', model: 'Qwen3.6-35B-A3B MoE output', shape: `${T} tok x ${H}, top-${topK} + shared + residual${note}`,
        err: scaledErr(ov, want), tol: 1e-2, ms: reduceMs });
      for (const b of [x.buf, residual.buf, logits, scale, ids, weights, offsets, order, h, y, hs, ys, logit, out]) b.release();
    }
    for (const e of [gate, up, down, shared.gate, shared.up, shared.down]) for (const b of [e.weight, e.scales, e.biases]) b.release();
    wsg.buf.release();
    zeros.release();
  }
  {
    // Gemma 4 26B-A4B's experts in bf16 (hidden 2816, moe_intermediate 704, top-8 of 128, GELU gate): one decode
    // token through dense_gate_up_mv_id, the experts repeating 4 distinct ones.
    const [H, I, E, topK, distinct] = [2816, 704, emu ? 16 : 128, 8, 4];
    const g = stored(device, 'bf16', randn(distinct * I * H, 0.05));
    const u = stored(device, 'bf16', randn(distinct * I * H, 0.05));
    const full = (src: { buf: Buffer }): Buffer => {
      const bits = src.buf.read() as Uint16Array;
      const b = device.alloc('bf16', [E * I * H]);
      for (let e = 0; e < E; e += distinct) b.write(bits, { byteOffset: e * I * H * 2 });
      return b;
    };
    const [gw, uw] = [full(g), full(u)];
    const x = stored(device, 'bf16', randn(H));
    const idList = Array.from({ length: topK }, (_, s2) => (s2 * 5 + 3) % E);
    const ids = device.upload('u32', [topK], idList);
    const h = poisoned(device, 'bf16', topK * I);
    const ms = timed(device, (enc) => denseGateUpMvId(enc, { x: x.buf, gateWeight: gw, upWeight: uw, ids, output: h, m: 1, n: I, k: H, nExpertUsed: topK,
      numExperts: E, activation: 'gelu_tanh' }));
    const hv = h.readNumbers();
    const want: number[] = [];
    for (let p = 0; p < topK; p++) {
      const e = idList[p]! % distinct;
      for (let j = 0; j < I; j++) {
        const row = (m: Float64Array): number => denseRef(x.values, m.subarray((e * I + j) * H, (e * I + j + 1) * H), 1, 1, H)[0]!;
        want.push(geluTanhRef(row(g.values)) * row(u.values));
      }
    }
    rows.push({ kernel: 'dense_gate_up_mv_id_bf16', model: 'Gemma 4 26B-A4B experts, GeGLU', shape: `1 tok x ${H} -> 2 x ${I}, top-${topK} of ${E}${note}`,
      err: scaledErr(hv, want), tol: 1e-2, ms });
    for (const b of [g.buf, u.buf, gw, uw, x.buf, ids, h]) b.release();
  }
  // --- end of per-expert (MoE) products ---

  // --- weights: Qwen3.6 layer 0 through mmap and uploadPacked ---
  {
    const dir = mkdtempSync(join(tmpdir(), 'mlxn-demo-weights-'));
    try {
      /** Random bytes, 4 at a time (the files are tens of MB). */
      const noise = (n: number): Uint8Array => {
        const w = new Uint32Array(Math.ceil(n / 4));
        let x = 0x9e3779b9;
        for (let i = 0; i < w.length; i++) w[i] = x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
        return new Uint8Array(w.buffer, 0, n);
      };
      const upload = (src: WeightSource): { err: number; ms: number; bytes: number } => {
        const t0 = performance.now();
        const packed = src.uploadPacked(device);
        const ms = performance.now() - t0;
        let differ = 0;
        let total = 0;
        for (const [name, view] of packed.views) {
          const got = view.read();
          const want = src.bytes(name);
          const g = new Uint8Array(got.buffer, got.byteOffset, got.byteLength);
          for (let i = 0; i < want.length; i++) if (g[i] !== want[i]) differ++;
          total += want.length;
        }
        packed.release();
        return { err: differ / total, ms, bytes: total };
      };
      const [H, KH, VH, D, CONV] = [2048, 16, 32, 128, 4];
      const qkv = 2 * KH * D + VH * D;
      const p = 'model.language_model.layers.0.';
      const bf16 = (name: string, shape: number[]) => ({ name, dtype: 'BF16', shape, data: noise(2 * shape.reduce((a, b) => a * b, 1)) });
      const f32 = (name: string, shape: number[]) => ({ name, dtype: 'F32', shape, data: noise(4 * shape.reduce((a, b) => a * b, 1)) });
      const tensors = [
        bf16(`${p}input_layernorm.weight`, [H]), bf16(`${p}post_attention_layernorm.weight`, [H]),
        bf16(`${p}linear_attn.in_proj_qkv.weight`, [qkv, H]), bf16(`${p}linear_attn.in_proj_z.weight`, [VH * D, H]),
        bf16(`${p}linear_attn.in_proj_b.weight`, [VH, H]), bf16(`${p}linear_attn.in_proj_a.weight`, [VH, H]),
        bf16(`${p}linear_attn.conv1d.weight`, [qkv, 1, CONV]), f32(`${p}linear_attn.dt_bias`, [VH]), f32(`${p}linear_attn.A_log`, [VH]),
        f32(`${p}linear_attn.norm.weight`, [D]), bf16(`${p}linear_attn.out_proj.weight`, [H, VH * D]),
      ];
      const stPath = join(dir, 'model.safetensors');
      writeFileSync(stPath, safetensorsBytes(tensors));
      const st = SafetensorsFile.open(stPath);
      // The names are Qwen3.6's: the report finds the layer's MoE block absent and nothing unexpected.
      const report = checkModel(st, { arch: 'qwen3_5_moe', numLayers: 1 });
      const named = report.unexpected.length === 0 && report.missing.every((n) => n.includes('.mlp.') || !n.startsWith(p));
      const a = upload(st);
      rows.push({ kernel: 'weights: safetensors mmap + uploadPacked', model: 'Qwen3.6 layer 0 GDN (HF names)',
        shape: `${tensors.length} tensors, ${(a.bytes / 2 ** 20).toFixed(1)} MiB bf16/f32`, err: named ? a.err : Infinity, tol: 0, ms: a.ms });

      const [E, I] = [32, 512];
      const w = ggufBytes({
        metadata: [['general.architecture', { type: 'string', value: 'qwen35moe' }]],
        tensors: [
          { name: 'blk.0.ffn_gate_exps.weight', type: 'Q4_K', dims: [H, I, E], data: noise((H * I * E / 256) * 144) },
          { name: 'blk.0.ffn_up_exps.weight', type: 'Q4_K', dims: [H, I, E], data: noise((H * I * E / 256) * 144) },
          { name: 'blk.0.ffn_down_exps.weight', type: 'Q4_K', dims: [I, H, E], data: noise((I * H * E / 256) * 144) },
        ],
      }, { next: () => 0.5, uniform: (lo) => lo, normal: () => 0 });
      const ggPath = join(dir, 'experts.gguf');
      writeFileSync(ggPath, w.bytes);
      const g = upload(GgufFile.open(ggPath));
      rows.push({ kernel: 'weights: GGUF Q4_K mmap + uploadPacked', model: 'Qwen3.6 layer 0 experts',
        shape: `3 x [${E} of 256, ${I}, ${H}] Q4_K, ${(g.bytes / 2 ** 20).toFixed(1)} MiB`, err: g.err, tol: 0, ms: g.ms });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  // --- end of weights ---
  // --- flash_attn_prefill: Gemma 4 prefill attention, sliding (d256, window 1024) and global (d512) layers ---
  for (const c of [
    { kernel: 'flash_attn_prefill_bf16_d256', model: 'Gemma 4 sliding attn prefill', d: 256, T: emu ? 160 : 4096, window: emu ? 48 : 1024 },
    { kernel: 'flash_attn_prefill_llamacpp_bf16_d512', model: 'Gemma 4 global attn prefill', d: 512, T: emu ? 72 : 2048, window: 0 },
  ]) {
    const [H, Hkv, T, d] = [16, 8, c.T, c.d];
    const q = stored(device, 'bf16', randn(H * T * d));
    const k = stored(device, 'bf16', randn(Hkv * T * d));
    const v = stored(device, 'bf16', randn(Hkv * T * d));
    const out = poisoned(device, 'bf16', H * T * d);
    const args = { batch: 1, nHeads: H, nKvHeads: Hkv, headDim: d, seqLenQ: T, seqLenK: T, causal: true, ...(c.window ? { slidingWindow: c.window } : {}) };
    const ms = timed(device, (enc) => flashAttnPrefill(enc, { ...args, q: q.buf, k: k.buf, v: v.buf, out }));
    // 48 query rows (every head), each against the reference of one query at its position.
    const got = out.readNumbers();
    let err = 0;
    let vmax = 0;
    for (const x of v.values) vmax = Math.max(vmax, Math.abs(x));
    for (let n = 0; n < 48; n++) {
      const i = Math.floor(rng.uniform(0, T));
      const qi = new Float64Array(H * d);
      for (let h = 0; h < H; h++) qi.set(q.values.subarray((h * T + i) * d, (h * T + i + 1) * d), h * d);
      const want = flashAttnPrefillRef({ ...args, seqLenQ: 1, qOffset: i, scale: 1 / Math.sqrt(d) }, qi, k.values, v.values);
      for (let h = 0; h < H; h++) {
        for (let j = 0; j < d; j++) {
          const e = Math.abs(got[(h * T + i) * d + j]! - want[h * d + j]!) / vmax;
          if (!(e <= err)) err = Number.isNaN(e) ? Infinity : e;
        }
      }
    }
    rows.push({ kernel: c.kernel, model: c.model, shape: `T ${T}, ${H}q/${Hkv}kv heads x ${d}, causal${c.window ? `, window ${c.window}` : ''}${note}`,
      err, tol: 1e-2, ms });
    for (const b of [q.buf, k.buf, v.buf, out]) b.release();
  }
  // --- end of flash_attn_prefill ---
  // --- models: tiny Qwen3.6 and Gemma 4, prefill and greedy decode end to end, against transformers ---
  for (const [fixture, name] of [
    ['qwen3_5_moe', 'Qwen3.6 tiny (GDN + gated attn, MoE)'],
    ['gemma4', 'Gemma 4 tiny (MoE, k = v global)'],
    ['gemma4_e', 'Gemma 4 tiny (per-layer inputs, shared KV)'],
  ] as const) {
    const fx = modelFixture(fixture);
    const steps = fx.decode.length;
    using m = loadModel(fx.folder, device, { maxContext: 64, precision: 'exact', prefillAttention: 'vector' });
    const t0 = performance.now();
    const tokens = [m.prefill(fx.prompt)];
    const t1 = performance.now();
    let err = relL2(m.logits.readNumbers(), fx.prefill[fx.prompt.length - 1]!);
    let decodeMs = 0;
    for (let i = 0; i < steps; i++) {
      const s0 = performance.now();
      tokens.push(m.decode());
      decodeMs += performance.now() - s0;
      err = Math.max(err, relL2(m.logits.readNumbers(), fx.decode[i]!));
    }
    if (tokens.some((t, i) => t !== fx.tokens[i])) err = Infinity;
    rows.push({ kernel: `models: ${fixture} vs transformers ${fx.manifest.versions['transformers']}`, model: name,
      shape: `${m.config.numLayers} layers, prompt ${fx.prompt.length} (${(t1 - t0).toFixed(0)} ms) + ${steps} decode, ${(steps / (decodeMs / 1000)).toFixed(1)} tok/s`,
      err, tol: 1e-4, ms: t1 - t0 + decodeMs });
  }
  // --- end of models ---
  // --- models, decode replayed: the tiny Qwen3.6 with decode steps recorded once and replayed ---
  {
    const fx = modelFixture('qwen3_5_moe');
    const steps = fx.decode.length;
    // Host time per decode step (recording or patching, plus submission), the median of the steps after the first.
    const hostPerStep = (replay: boolean) => {
      using m = loadModel(fx.folder, device, { maxContext: 64, precision: 'exact', prefillAttention: 'vector', replay });
      const tokens = [m.prefill(fx.prompt)];
      let err = 0;
      const host: number[] = [];
      const t0 = performance.now();
      for (let i = 0; i < steps; i++) {
        tokens.push(m.decode());
        if (i > 0) host.push(m.hostStepMs);
        err = Math.max(err, relL2(m.logits.readNumbers(), fx.decode[i]!));
      }
      const ms = performance.now() - t0;
      if (tokens.some((t, i) => t !== fx.tokens[i])) err = Infinity;
      host.sort((a, b) => a - b);
      return { err, ms, host: host[host.length >> 1]!, dispatches: m.stepDispatches };
    };
    const plain = hostPerStep(false);
    const replayed = hostPerStep(true);
    rows.push({ kernel: `models: qwen3_5_moe decode replayed vs transformers ${fx.manifest.versions['transformers']}`, model: 'Qwen3.6 tiny (GDN + gated attn, MoE)',
      shape: `${steps} decode steps of ${replayed.dispatches} dispatches; host per step ${plain.host.toFixed(2)} ms recorded, ${replayed.host.toFixed(2)} ms replayed`,
      err: replayed.err, tol: 1e-4, ms: replayed.ms });
  }
  // --- end of models, decode replayed ---

  const header = ['kernel', 'model', 'shape', 'backend', 'max err', 'tol', 'time ms', ''];
  const table = rows.map((r) => [
    r.kernel, r.model, r.shape, device.backend, r.err.toExponential(2), r.tol.toExponential(0), r.ms.toFixed(3),
    r.err <= r.tol ? 'ok' : 'FAIL',
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...table.map((row) => row[i]!.length)));
  const line = (cells: string[]): string => cells.map((c, i) => c.padEnd(widths[i]!)).join('  ');
  console.log(`mlx-native demo on ${device.backend}: ${device.name}`);
  console.log(line(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const row of table) console.log(line(row));
  const failed = rows.filter((r) => !(r.err <= r.tol)).length;
  console.log(failed === 0 ? `all ${rows.length} checks within tolerance` : `${failed} of ${rows.length} checks FAILED`);
  console.log(`barriers placed by the encoders: ${barriers}`);
  return failed === 0 ? 0 : 1;
}

process.exit(main());
