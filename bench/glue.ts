// Times rms_norm, softmax, softcap, the elementwise family, embedding,
// kv_cache_copy, the gated activations (silu_mul, gelu_tanh_mul, sigmoid_mul
// and their halves forms, gelu), the sample family (argmax, top-k, sampling),
// the MoE glue (moe_dispatch: the grouping of pairs by expert and
// mlx-native's glue kernels; moe_weighted_reduce), the fused norms of the
// models' decode steps, the gated delta net's
// decode step (its glue chain against gated_delta_net_decode_fused),
// the dense decode products, the MLX affine quantized products (every kernel
// of quantized_matmul, decode and a 64-token prefill), the GGUF block
// products, dequantization and quantized embedding rows
// (quantized_matmul_ggml) and flash_attn_prefill's
// mask builder and tile classifier (bench/attention.ts times the attention)
// with the encoder's GPU time, at the shapes of Gemma 4 and Qwen3.6 layers:
// per case a warm-up commit, then 5
// commits of `iters` back-to-back dispatches; time per dispatch = median of
// gpuTimeNs / iters. Prints the time, the bytes each dispatch must move
// (inputs read once, outputs written once) and the rate they imply.
//
//   bun run bench/glue.ts [--small] [--only TEXT] [--variants] [--replay] [--parts]
// (--replay: each case's dispatches recorded once in a replayable encoder,
// then 5 replays, device time a dispatch, median: on cuda one CUDA graph, so
// the host's launch pace cannot set the time, as in a replayed decode step;
// --small: shapes the emulator runs; --only (repeatable): the cases whose
// name contains one of the TEXTs, as for a profiler's run; --variants: on cuda, rows of the same ops
// recorded from their plans with other CUDA launches, the variants' block
// below, to choose a launch by measurement; --parts: after a row of several
// dispatches whose case gives its plan (argmax, the sampler), the plan's
// first k dispatches alone for each k, so each dispatch's share of the row
// is the difference of two lines)
//
// Backend: MLX_NATIVE_BACKEND or the default. Inputs are random, never zeros.

import { Device, type Buffer, type DType, type Encoder } from '../ts/index.ts';
import { ggmlBlocksBuffer, gpuTimePerDispatch, normalLogits, uniformBuffer, wordBuffer } from './common.ts';
import { cast, elementwiseAdd, elementwiseAddScaled, elementwiseMul, scalarMul } from '../ts/ops/elementwise.ts';
import { denseMatmul, denseMatvec } from '../ts/ops/dense.ts';
import { affineQuantizedMatmul, quantizedMatmul, quantizedMatmulSimd, quantizedMatmulSimdBf16 } from '../ts/ops/quantized_matmul.ts';
import { GGML_QUANT_TYPES, ggmlBlockOf, ggmlDequantize, ggmlRowBytesOf, quantizedMatmulGgml } from '../ts/ops/quantized_matmul_ggml.ts';
import { rmsNorm, rmsNormPerHead } from '../ts/ops/rms_norm.ts';
import { packSoftmaxStreamParams, SOFTMAX_STREAM_HELD, softcap, softmax, softmaxScratchElements } from '../ts/ops/softmax.ts';
import { embedding } from '../ts/ops/embedding.ts';
import { kvCacheCopySeqDual } from '../ts/ops/kv_cache_copy.ts';
import { gelu, geluTanhMul, geluTanhMulHalves } from '../ts/ops/gelu.ts';
import { sigmoidMul, sigmoidMulHalves } from '../ts/ops/sigmoid_mul.ts';
import { siluMul, siluMulHalves } from '../ts/ops/silu_mul.ts';
import { argmax, argmaxScratchElements, planArgmax, planSample, philox4x32, sample, sampleScratchElements, softmaxSample, topK, topKScratchElements } from '../ts/ops/sample.ts';
import { flashAttnPrefillBlk, flashAttnPrefillMask } from '../ts/ops/flash_attn_prefill.ts';
import {
  fusedGeluMul, moeAccumulate, moeDispatchSort, moeGatherTopkWeights, moeSwigluBatch, moeSwigluSeq, moeWeightedSum, moeWeightedSumSeq,
} from '../ts/ops/moe_dispatch.ts';
import { moeWeightedReduce, moeWeightedReduceNorm } from '../ts/ops/moe_weighted_reduce.ts';
import { fusedNormAddNorms, fusedNormMoeSum } from '../ts/ops/fused_norm.ts';
import { fusedHeadNormRope, fusedHeadNormRopeQkv } from '../ts/ops/fused_head_norm_rope.ts';
import { rope, ropeNeox } from '../ts/ops/rope.ts';
import { ropeMulti } from '../ts/ops/rope_multi.ts';
import { computeGBeta } from '../ts/ops/compute_g_beta.ts';
import { gatedDeltaNetDecode, gatedDeltaNetDecodeFused } from '../ts/ops/gated_delta_net.ts';
import { l2Norm, planL2Norm } from '../ts/ops/l2_norm.ts';
import { planSsmNormGate, ssmNormGate } from '../ts/ops/ssm_norm_gate.ts';
import { planRmsNormPerHead } from '../ts/ops/rms_norm.ts';
import { planSoftmax } from '../ts/ops/softmax.ts';
import { planEmbedding } from '../ts/ops/embedding.ts';
import { planKvCacheCopySeqDual } from '../ts/ops/kv_cache_copy.ts';
import { record, type OpPlan } from '../ts/plan.ts';

const small = process.argv.includes('--small');
const variants = process.argv.includes('--variants');
const replay = process.argv.includes('--replay');
const parts = process.argv.includes('--parts');
const only = process.argv.flatMap((a, i) => (a === '--only' ? [process.argv[i + 1] ?? ''] : []));
const dev = Device.open();
const size = (d: DType) => (d === 'f32' ? 4 : 2);

const random = (dtype: DType, shape: number[]): Buffer => uniformBuffer(dev, dtype, shape, 2);

interface Case { name: string; bytes: number; record: (enc: Encoder) => void; plan?: () => OpPlan }

function cases(): Case[] {
  const out: Case[] = [];
  out.push(...normSoftmaxCases());
  out.push(...ropeCases());
  out.push(...elementwiseCases(), ...embeddingCases(), ...kvCacheCopyCases());
  out.push(...siluMulCases(), ...geluCases(), ...sigmoidMulCases());
  out.push(...sampleCases());
  out.push(...denseCases());
  out.push(...quantizedMatmulCases());
  out.push(...quantizedMatmulGgmlCases());
  out.push(...flashAttnPrefillCases());
  out.push(...moeDispatchCases(), ...moeWeightedReduceCases(), ...fusedDecodeNormCases());
  out.push(...gdnDecodeCases());
  if (variants && dev.backend === 'cuda') out.push(...launchVariantCases());
  return out;
}

// ---- rms_norm, softmax, softcap ----
// Gemma 4 31B's hidden rows (5376) and Qwen3's q-norm (32 heads x 128), a
// prefill and one decode token; attention scores with Gemma 2's softcap and
// a causal mask; the vocabulary (262144) softmax of 64 rows and of one,
// without a scratch and with one (the rows with a scratch run in two
// passes, which move up to half as much again: the input read twice, the
// second time from L2 where it still is). Bytes (the floor): inputs read
// once, outputs written once.
function normSoftmaxCases(): Case[] {
  const out: Case[] = [];
  const rows = small ? 8 : 16384;
  for (const dt of ['bf16', 'f32'] as const) {
    const dim = small ? 256 : 5376; // Gemma 4 31B hidden size
    const x = random(dt, [rows, dim]);
    const w = random(dt, [dim]);
    const y = dev.alloc(dt, [rows, dim]);
    out.push({ name: `rms_norm ${dt} [${rows}, ${dim}]`, bytes: 2 * rows * dim * size(dt), record: (e) => rmsNorm(e, { input: x, weight: w, output: y, rows, dim }) });
    const x1 = random(dt, [1, dim]);
    const y1 = dev.alloc(dt, [1, dim]);
    out.push({ name: `rms_norm ${dt} [1, ${dim}] (decode)`, bytes: 2 * dim * size(dt), record: (e) => rmsNorm(e, { input: x1, weight: w, output: y1, rows: 1, dim }) });
    // Qwen3.6-35B-A3B's hidden rows (2048), one decode token: a block of one vector a thread.
    const d2 = small ? 128 : 2048;
    const x2 = random(dt, [1, d2]);
    const w2 = random(dt, [d2]);
    const y2 = dev.alloc(dt, [1, d2]);
    out.push({ name: `rms_norm ${dt} [1, ${d2}] (decode)`, bytes: 2 * d2 * size(dt), record: (e) => rmsNorm(e, { input: x2, weight: w2, output: y2, rows: 1, dim: d2 }) });
  }
  // The gated delta net's per-head norms of Qwen3.6-35B-A3B: l2_norm of q and k ([tokens x 2 x 16, 128] f32) and
  // the output's ssm_norm_gate ([tokens x 32, 128] f32, z and the weight beside), a 4096-token prompt and one token.
  for (const tokens of [small ? 4 : 4096, 1]) {
    const tag = tokens === 1 ? ' (decode)' : '';
    const qkRows = tokens * 2 * 16, vRows = tokens * 32, d = 128;
    const qk = random('f32', [qkRows, d]);
    const qky = dev.alloc('f32', [qkRows, d]);
    out.push({ name: `l2_norm f32 [${qkRows}, ${d}]${tag}`, bytes: 8 * qkRows * d, record: (e) => l2Norm(e, { x: qk, y: qky, rows: qkRows, dim: d }) });
    const x = random('f32', [vRows, d]), z = random('f32', [vRows, d]), w = random('f32', [d]);
    const y = dev.alloc('f32', [vRows, d]);
    out.push({ name: `ssm_norm_gate f32 [${vRows}, ${d}]${tag}`, bytes: 12 * vRows * d + 4 * d,
      record: (e) => ssmNormGate(e, { attnOut: x, weight: w, z, output: y, rows: vRows, dV: d, eps: 1e-6 }) });
  }
  for (const tokens of [small ? 4 : 8192, 1]) {
    const [heads, headDim] = small ? [2, 128] : [32, 128]; // Qwen3 q-norm
    const q = random('bf16', [tokens, heads, headDim]);
    const w = random('bf16', [headDim]);
    const y = dev.alloc('bf16', [tokens, heads, headDim]);
    out.push({ name: `rms_norm_per_head bf16 [${tokens}, ${heads}, ${headDim}]${tokens === 1 ? ' (decode)' : ''}`, bytes: 4 * tokens * heads * headDim,
      record: (e) => rmsNormPerHead(e, { input: q, weight: w, output: y, tokens, heads, headDim }) });
  }
  {
    const [heads, seq] = small ? [2, 64] : [32, 2048];
    const s = random('f32', [heads * seq, seq]);
    const mask = dev.upload('bf16', [seq, seq], Array.from({ length: seq * seq }, (_, i) => (i % seq > Math.floor(i / seq) ? -Infinity : 0)));
    const p = dev.alloc('f32', [heads * seq, seq]);
    out.push({ name: `softmax f32 scale+softcap+mask [${heads}x${seq}, ${seq}]`, bytes: 8 * heads * seq * seq + 2 * seq * seq,
      record: (e) => softmax(e, { input: s, output: p, rows: heads * seq, cols: seq, scale: 0.0884, softcap: 50, mask, seqQ: seq }) });
    // One decode token's scores over 8192 keys (the last row of the causal mask: nothing masked).
    const keys = small ? 512 : 8192;
    const s1 = random('f32', [heads, keys]);
    const m1 = dev.upload('bf16', [1, keys], new Array(keys).fill(0));
    const p1 = dev.alloc('f32', [heads, keys]);
    out.push({ name: `softmax f32 scale+softcap+mask [${heads}x1, ${keys}] (decode)`, bytes: 8 * heads * keys + 2 * keys,
      record: (e) => softmax(e, { input: s1, output: p1, rows: heads, cols: keys, scale: 0.0884, softcap: 50, mask: m1, seqQ: 1 }) });
  }
  for (const [r, c, dt] of [[small ? 2 : 4096, small ? 512 : 8192, 'bf16'], [small ? 2 : 64, small ? 4096 : 262144, 'f32'], [1, small ? 4096 : 262144, 'f32']] as const) {
    const x = random(dt, [r, c]);
    const y = dev.alloc(dt, [r, c]);
    const tag = r === 1 ? ' (decode)' : '';
    out.push({ name: `softmax ${dt} [${r}, ${c}]${tag}`, bytes: 2 * r * c * size(dt), record: (e) => softmax(e, { input: x, output: y, rows: r, cols: c }) });
    if (dt === 'f32') {
      // With a scratch: on cuda one streamed dispatch (softmax_stream), elsewhere the two passes.
      const scratch = dev.alloc('f32', [softmaxScratchElements(r, c)]);
      out.push({ name: `softmax ${dt} [${r}, ${c}] with scratch${tag}`, bytes: 2 * r * c * size(dt),
        record: (e) => softmax(e, { input: x, output: y, rows: r, cols: c, scratch }) });
    }
  }
  {
    const n = small ? 4096 : 64 * 262144;
    const x = random('bf16', [n]);
    const y = dev.alloc('bf16', [n]);
    out.push({ name: `softcap bf16 [${n}] cap 30`, bytes: 4 * n, record: (e) => softcap(e, { input: x, output: y, cap: 30 }) });
  }
  return out;
}
// ---- end of rms_norm, softmax, softcap ----

// ---- the rope family ----
// Rotary embeddings of the models' q, bf16 out of place, a prefill of 8192
// tokens (positions 0 to 8191) and one decode token (position 8192):
// rope_neox at Qwen3.6's full attention (16 heads of 256, 64 rotated, theta
// 1e7) and a Gemma 4 31B sliding layer (32 heads of 256, all rotated, theta
// 1e4); rope_multi (imrope, sections [11, 11, 10, 0], 64 rotated, base 1e7)
// at Qwen3.6's full attention; fused_head_norm_rope (per-head RMS norm, then
// rope_neox) at Gemma 4 26B-A4B's sliding q (16 heads of 256, all rotated,
// theta 1e4); rope (normal pairing, a row a head) at 32 heads of 128, theta
// 1e4, the prefill alone. Bytes: x read and y written once, the positions
// (4 bytes a token, rope_multi's four rows; rope's one a row) and the
// norm's weight read.
function ropeCases(): Case[] {
  const out: Case[] = [];
  for (const tokens of [small ? 4 : 8192, 1]) {
    const tag = tokens === 1 ? ' (decode)' : '';
    const pos = Array.from({ length: tokens }, (_, i) => (tokens === 1 ? 8192 : i));
    const positions = dev.upload('u32', [tokens], pos);
    const positions4 = dev.upload('i32', [4, tokens], [...pos, ...pos, ...pos, ...pos]);
    const shapes = [[16, 256, 64, 1e7, 'Qwen3.6 full attn q'], [32, 256, 256, 1e4, 'Gemma 4 sliding q']] as const;
    for (const [hs, ds, rs, theta, label] of shapes) {
      const [h, d, r] = small ? [2, 128, Math.min(rs, 128)] : [hs, ds, rs];
      const x = random('bf16', [tokens, h, d]);
      const y = dev.alloc('bf16', [tokens, h, d]);
      out.push({ name: `rope_neox bf16 [${tokens}, ${h}, ${d}] rot ${r} ${label}${tag}`, bytes: 4 * tokens * h * d + 4 * tokens,
        record: (e) => ropeNeox(e, { input: x, output: y, positions, seqLen: tokens, nHeads: h, headDim: d, ropeDim: r, theta }) });
    }
    const [h, d] = small ? [2, 128] : [16, 256];
    const x = random('bf16', [tokens, h, d]);
    const w = random('bf16', [d]);
    const y = dev.alloc('bf16', [tokens, h, d]);
    out.push({ name: `rope_multi imrope bf16 [${tokens}, ${h}, ${d}] rot 64 Qwen3.6 full attn q${tag}`, bytes: 4 * tokens * h * d + 16 * tokens,
      record: (e) => ropeMulti(e, { input: x, output: y, positions: positions4, seqLen: tokens, nHeads: h, headDim: d, ropeDim: 64, freqBase: 1e7,
        mode: 'imrope', sections: [11, 11, 10, 0] }) });
    out.push({ name: `fused_head_norm_rope bf16 [${tokens}, ${h}, ${d}] rot ${d} Gemma 4 sliding q${tag}`, bytes: 4 * tokens * h * d + 2 * d + 4 * tokens,
      record: (e) => fusedHeadNormRope(e, { input: x, output: y, weight: w, positions, seqLen: tokens, nHeads: h, headDim: d, halfRopeDim: d / 2,
        eps: 1e-6, theta: 1e4 }) });
    if (tokens > 1) {
      // The models' form: q, k and v of a Gemma 4 26B-A4B sliding layer in one dispatch, f32 in place (decode: fusedDecodeNormCases).
      const [nh, nkv, dq] = small ? [4, 2, 64] : [16, 8, 256];
      const q = random('f32', [tokens, nh, dq]), kk = random('f32', [tokens, nkv, dq]), v = random('f32', [tokens, nkv, dq]);
      const qWeight = random('f32', [dq]), kWeight = random('f32', [dq]);
      out.push({ name: `fused_head_norm_rope_qkv f32 q [${tokens}, ${nh}, ${dq}] k, v [${tokens}, ${nkv}, ${dq}]`,
        bytes: 8 * dq * tokens * (nh + 2 * nkv) + 8 * dq + 4 * tokens,
        record: (e) => fusedHeadNormRopeQkv(e, { q, k: kk, v, qWeight, kWeight, positions, seqLen: tokens, nHeads: nh, nKvHeads: nkv,
          headDim: dq, halfRopeDim: dq / 2, eps: 1e-6, theta: 1e4 }) });
    }
  }
  {
    const [tokens, h, d] = small ? [4, 2, 128] : [8192, 32, 128];
    const rows = tokens * h;
    const x = random('bf16', [rows, d]);
    const y = dev.alloc('bf16', [rows, d]);
    const positions = dev.upload('u32', [rows], Array.from({ length: rows }, (_, i) => Math.floor(i / h)));
    out.push({ name: `rope bf16 [${tokens}x${h}, ${d}]`, bytes: 4 * rows * d + 4 * rows,
      record: (e) => rope(e, { input: x, output: y, positions, seqLen: rows, headDim: d, theta: 1e4 }) });
  }
  return out;
}
// ---- end of the rope family ----

// ---- launch variants (--variants, cuda only) ----
// Rows whose CUDA launch the bytes alone do not decide: each op's plan, its
// one dispatch recorded with another CUDA launch (the kernels take any launch
// of the form their plan's comment gives), beside the planned one. Names end
// in the launch; bytes as the rows above.
function launchVariantCases(): Case[] {
  const out: Case[] = [];
  const sms = dev.limits.multiprocessors;
  const variant = (name: string, bytes: number, plan: OpPlan, cuda: { grid: [number, number, number]; threads: [number, number, number]; threadgroupMemory?: number[] }): Case => {
    const d = plan.dispatches[0]!;
    const varied: OpPlan = { ...plan, dispatches: [{ ...d, cuda: { ...cuda, threadgroupMemory: cuda.threadgroupMemory ?? d.cuda?.threadgroupMemory } }] };
    return { name: `${name} [${cuda.grid[0]} x (${cuda.threads[0]}, ${cuda.threads[1]})]`, bytes, record: (e) => record(e, varied) };
  };
  {
    // rms_norm_per_head [8192, 32, 128] bf16: rows of 4 (planned), 8 and 16 lanes (4, 2, 1 vectors a lane), 256 threads a block.
    const [tokens, heads, headDim] = [8192, 32, 128];
    const q = random('bf16', [tokens, heads, headDim]);
    const w = random('bf16', [headDim]);
    const y = dev.alloc('bf16', [tokens, heads, headDim]);
    const plan = planRmsNormPerHead({ input: q, weight: w, output: y, tokens, heads, headDim }, dev.limits, dev);
    const rows = tokens * heads;
    for (const lanes of [4, 8, 16]) {
      out.push(variant('rms_norm_per_head bf16 [8192, 32, 128] variant', 4 * rows * headDim, plan, { grid: [rows / (256 / lanes), 1, 1], threads: [lanes, 256 / lanes, 1] }));
    }
  }
  {
    // l2_norm and ssm_norm_gate at a 4096-token prompt's gated delta net heads (f32 [rows, 128]): rows of 8 lanes
    // (planned) beside a block of 128 threads a row (the launch before the row kernels' form).
    const d = 128;
    const qkRows = 4096 * 32, vRows = 4096 * 32;
    const qk = random('f32', [qkRows, d]);
    const qky = dev.alloc('f32', [qkRows, d]);
    const l2 = planL2Norm({ x: qk, y: qky, rows: qkRows, dim: d }, dev.limits, dev);
    const x = random('f32', [vRows, d]), z = random('f32', [vRows, d]), w = random('f32', [d]);
    const y = dev.alloc('f32', [vRows, d]);
    const gate = planSsmNormGate({ attnOut: x, weight: w, z, output: y, rows: vRows, dV: d, eps: 1e-6 }, dev.limits, dev);
    for (const [lanes, r] of [[8, 32], [128, 1]] as const) {
      const launch = { grid: [qkRows / r, 1, 1] as [number, number, number], threads: [lanes, r, 1] as [number, number, number], threadgroupMemory: [16] };
      out.push(variant(`l2_norm f32 [${qkRows}, ${d}] variant`, 8 * qkRows * d, l2, launch));
      out.push(variant(`ssm_norm_gate f32 [${vRows}, ${d}] variant`, 12 * vRows * d + 4 * d, gate, launch));
    }
  }
  {
    // softmax bf16 [4096, 8192]: 256 threads a row (planned: 32 elements each), 512, 1024.
    const [r, c] = [4096, 8192];
    const x = random('bf16', [r, c]);
    const y = dev.alloc('bf16', [r, c]);
    const plan = planSoftmax({ input: x, output: y, rows: r, cols: c }, dev.limits, dev);
    for (const t of [256, 512, 1024]) out.push(variant('softmax bf16 [4096, 8192] variant', 4 * r * c, plan, { grid: [r, 1, 1], threads: [t, 1, 1], threadgroupMemory: [Math.ceil(t / 32 / 4) * 16] }));
  }
  {
    // The vocabulary softmax streamed (softmax_stream_f32) at 1 to 8 rows and 64: slices of 8192 (256 threads x 8
    // vectors), 4096, 2048 and 1024 at 256 and 128 threads; grids of 4 blocks an SM and, at 128 threads (64
    // registers: 8 fit an SM), of 5, 6 and 8; every block resident. Beside them, the two passes.
    const c = 262144;
    for (const r of [1, 2, 4, 8, 64]) {
      const x = random('f32', [r, c]);
      const y = dev.alloc('f32', [r, c]);
      const plan = planSoftmax({ input: x, output: y, rows: r, cols: c, scratch: dev.alloc('f32', [softmaxScratchElements(r, c)]) }, dev.limits, dev);
      const d = plan.dispatches[0]!;
      if (!d.kernel.startsWith('softmax_stream')) continue;
      // The two passes (softmax_blocks, softmax_finish), planned as where no streamed shape is given.
      const twoPass = planSoftmax({ input: x, output: y, rows: r, cols: c, scratch: d.buffers[1] }, { ...dev.limits, multiprocessors: 0 }, dev);
      out.push({ name: `softmax f32 [${r}, ${c}] streamed variant: two passes`, bytes: 8 * r * c, record: (e) => record(e, twoPass) });
      const scratch = dev.alloc('f32', [r * (c / 1024) * 2]);
      for (const [slice, threads, perSm] of [[8192, 256, 4], [4096, 256, 4], [2048, 256, 4], [4096, 128, 4], [4096, 128, 5], [4096, 128, 6],
        [4096, 128, 8], [2048, 128, 4], [2048, 128, 8], [1024, 128, 4]] as const) {
        const nBlocks = c / slice;
        if (nBlocks > perSm * sms || slice / 4 > threads * SOFTMAX_STREAM_HELD || (r < 64 && (perSm !== 4 || slice < 4096))) continue;
        const bytes = { ...d.bytes, 4: packSoftmaxStreamParams({ cols: c, rows: r, scale: 1, slice, nBlocks }) };
        const grid: [number, number, number] = [Math.min(r * nBlocks, perSm * sms), 1, 1];
        const varied: OpPlan = {
          ...plan,
          dispatches: [{ ...d, buffers: { ...d.buffers, 1: scratch }, bytes, cuda: { grid, threads: [threads, 1, 1], threadgroupMemory: [Math.ceil((threads / 32 + 1) / 4) * 16] } }],
        };
        out.push({ name: `softmax f32 [${r}, ${c}] streamed variant slice ${slice} [${grid[0]} x ${threads}]`, bytes: 8 * r * c, record: (e) => record(e, varied) });
      }
    }
  }
  {
    // The masked scores [32x2048, 2048] f32: 128 threads a row (planned: 16 elements each), 256, 512.
    const [heads, seq] = [32, 2048];
    const sc = random('f32', [heads * seq, seq]);
    const mask = dev.upload('bf16', [seq, seq], Array.from({ length: seq * seq }, (_, i) => (i % seq > Math.floor(i / seq) ? -Infinity : 0)));
    const p = dev.alloc('f32', [heads * seq, seq]);
    const plan = planSoftmax({ input: sc, output: p, rows: heads * seq, cols: seq, scale: 0.0884, softcap: 50, mask, seqQ: seq }, dev.limits, dev);
    for (const t of [128, 256, 512]) {
      out.push(variant('softmax f32 scale+softcap+mask [32x2048, 2048] variant', 8 * heads * seq * seq + 2 * seq * seq, plan,
        { grid: [heads * seq, 1, 1], threads: [t, 1, 1], threadgroupMemory: [Math.ceil(t / 32 / 4) * 16] }));
    }
  }
  {
    // Its decode row [32x1, 8192] f32: 1024 threads a row (planned, fewer rows than SMs: 2 vectors each), 512 (4,
    // the most a thread holds), 256 (the row streamed twice).
    const [heads, keys] = [32, 8192];
    const sc = random('f32', [heads, keys]);
    const mask = dev.upload('bf16', [1, keys], new Array(keys).fill(0));
    const p = dev.alloc('f32', [heads, keys]);
    const plan = planSoftmax({ input: sc, output: p, rows: heads, cols: keys, scale: 0.0884, softcap: 50, mask, seqQ: 1 }, dev.limits, dev);
    for (const t of [1024, 512, 256]) {
      out.push(variant('softmax f32 scale+softcap+mask [32x1, 8192] (decode) variant', 8 * heads * keys + 2 * keys, plan,
        { grid: [heads, 1, 1], threads: [t, 1, 1], threadgroupMemory: [Math.ceil(t / 32 / 4) * 16] }));
    }
  }
  {
    // kv_cache_copy_seq bf16 K+V [8192 tok, 8, 256]: 32 steps of 16 bytes a row; 4 steps a thread (planned, 8 lanes),
    // 2 (16 lanes), 1 (32 lanes), 256 threads a block; and 4 steps at a grid of 4 blocks an SM (rows strided).
    const [tokens, heads, headDim, capacity] = [8192, 8, 256, 8192];
    const k = random('bf16', [tokens, heads, headDim]);
    const v = random('bf16', [tokens, heads, headDim]);
    const ck = dev.alloc('bf16', [heads, capacity, headDim]);
    const cv = dev.alloc('bf16', [heads, capacity, headDim]);
    const plan = planKvCacheCopySeqDual({ srcK: k, srcV: v, cacheK: ck, cacheV: cv, nHeads: heads, headDim, capacity, seqPosStart: 0, nTokens: tokens }, dev.limits, dev);
    const rows = 2 * tokens * heads, bytes = 2 * tokens * heads * headDim * 4;
    for (const lanes of [8, 16, 32]) {
      out.push(variant('kv_cache_copy_seq bf16->bf16 K+V [8192 tok, 8, 256] variant', bytes, plan, { grid: [rows / (256 / lanes), 1, 1], threads: [lanes, 256 / lanes, 1] }));
    }
    out.push(variant('kv_cache_copy_seq bf16->bf16 K+V [8192 tok, 8, 256] variant', bytes, plan, { grid: [4 * sms, 1, 1], threads: [8, 32, 1] }));
  }
  {
    // embedding bf16 [8192 tok, 5376] of 262144: 672 steps a row; 192 lanes (planned: 4 steps each), 256 (3 or 2), and
    // the planned block at a grid of 4 blocks an SM (rows strided).
    const [vocab, hidden, tokens] = [262144, 5376, 8192];
    const table = random('bf16', [vocab, hidden]);
    const ids = dev.upload('u32', [tokens], Array.from({ length: tokens }, (_, i) => (i * 2654435761) % vocab));
    const y = dev.alloc('bf16', [tokens, hidden]);
    const plan = planEmbedding({ table, tokenIds: ids, output: y, vocabSize: vocab, hiddenSize: hidden, nTokens: tokens, scale: Math.sqrt(hidden) }, dev.limits, dev);
    const bytes = 2 * tokens * hidden * 2 + 4 * tokens;
    out.push(variant('embedding bf16 [8192 tok, 5376] of 262144 variant', bytes, plan, { grid: [tokens, 1, 1], threads: [192, 1, 1] }));
    out.push(variant('embedding bf16 [8192 tok, 5376] of 262144 variant', bytes, plan, { grid: [tokens, 1, 1], threads: [256, 1, 1] }));
    out.push(variant('embedding bf16 [8192 tok, 5376] of 262144 variant', bytes, plan, { grid: [4 * sms, 1, 1], threads: [192, 1, 1] }));
  }
  return out;
}
// ---- end of launch variants ----

// ---- flash_attn_prefill: the mask builder and the tile classifier ----
// Gemma 4's sliding layers (window 1024) over an 8192-token prefill, and one
// decode query over 32768 keys. Floor: the mask builder writes the [qL, kL]
// bf16 mask once (2 qL kL bytes); the classifier reads it once and writes
// one byte per tile (32 x 16, the d256 entry's).
function flashAttnPrefillCases(): Case[] {
  const out: Case[] = [];
  for (const [qL, kL] of [small ? [64, 64] : [8192, 8192], [1, small ? 256 : 32768]] as const) {
    const tag = qL === 1 ? ' (decode)' : '';
    const mask = dev.alloc('bf16', [qL, kL]);
    const qOffset = kL - qL;
    out.push({ name: `flash_attn_prefill_mask bf16 [${qL}, ${kL}] causal w1024${tag}`, bytes: 2 * qL * kL,
      record: (e) => flashAttnPrefillMask(e, { mask, seqLenQ: qL, seqLenK: kL, causal: true, slidingWindow: 1024, qOffset }) });
    const nt = Math.ceil(qL / 32) * Math.ceil(kL / 16);
    const blk = dev.alloc('u8', [nt]);
    const init = dev.encoder();
    flashAttnPrefillMask(init, { mask, seqLenQ: qL, seqLenK: kL, causal: true, slidingWindow: 1024, qOffset });
    init.commitAndWait();
    init.release();
    out.push({ name: `flash_attn_prefill_blk bf16 [${qL}, ${kL}] tiles 32x16${tag}`, bytes: 2 * qL * kL + nt,
      record: (e) => flashAttnPrefillBlk(e, { mask, blk, seqLenQ: qL, seqLenK: kL, bq: 32, bk: 16 }) });
  }
  return out;
}
// ---- end of flash_attn_prefill ----

// ---- dense: decode products, memory-bound on the weight (bench/matmul.ts has the matrix shapes) ----
// bytes: the weight read once, x read, y written; the floor is bytes / copy bandwidth.
function denseCases(): Case[] {
  const out: Case[] = [];
  // Qwen3.6 27B MLP up (5120 -> 17408), one token and eight (dense_mv_bf16).
  for (const m of [1, 8]) {
    const [n, k] = small ? [512, 256] : [17408, 5120];
    const x = random('bf16', [m, k]);
    const w = random('bf16', [n, k]);
    const y = dev.alloc('bf16', [m, n]);
    out.push({ name: `dense_mv_bf16 [${m}, ${k}] x [${n}, ${k}]^T`, bytes: 2 * (n * k + m * k + m * n),
      record: (e) => denseMatmul(e, { x, weight: w, output: y, m, n, k }) });
  }
  // Gemma 4's vocabulary projection (5376 -> 262144) from an f32 hidden state (mlx-native's dense_matvec_bf16w_f32io).
  {
    const [n, k] = small ? [4096, 256] : [262144, 5376];
    const a = random('f32', [1, k]);
    const b = random('bf16', [n, k]);
    const c = dev.alloc('f32', [1, n]);
    out.push({ name: `dense_matvec_bf16w_f32io [1, ${k}] x [${n}, ${k}]^T`, bytes: 2 * n * k + 4 * (k + n),
      record: (e) => denseMatvec(e, { a, b, output: c, m: 1, n, k }) });
  }
  return out;
}

// ---- quantized_matmul: MLX affine quantized products, one row per kernel (bench/matmul.ts has the prefill shapes) ----
// Qwen3.6 27B MLP up (5120 -> 17408): decode (1 and 8 tokens) and a 64-token
// prefill, where the weight is still read about once (64 x 128 tiles). bytes:
// the packed weight, scales and biases read once, x read, y written.
function quantizedMatmulCases(): Case[] {
  const out: Case[] = [];
  const [n, k] = small ? [512, 256] : [17408, 5120];
  const weightOf = (bits: number, gs: number, sdt: DType) => ({
    weight: wordBuffer(dev, (n * k * bits) / 32), scales: uniformBuffer(dev, sdt, [(n * k) / gs], 0.02), biases: uniformBuffer(dev, sdt, [(n * k) / gs], 0.1),
    bytes: (n * k * bits) / 8 + ((2 * n * k) / gs) * size(sdt),
  });
  const affine = (dt: 'f32' | 'f16' | 'bf16', bits: number, gs: number, m: number): Case => {
    const w = weightOf(bits, gs, dt);
    const x = uniformBuffer(dev, dt, [m, k], 1);
    const y = dev.alloc(dt, [m, n]);
    const kernel = m <= 8 ? `quantized_mv_${dt}` : `quantized_mm_${dt}`;
    return { name: `${kernel} q${bits} g${gs} [${m}, ${k}] x [${n}, ${k}]^T`, bytes: w.bytes + (m * k + m * n) * size(dt),
      record: (e) => affineQuantizedMatmul(e, { x, weight: w.weight, scales: w.scales, biases: w.biases, output: y, m, n, k, groupSize: gs, bits }) };
  };
  out.push(affine('bf16', 4, 64, 1), affine('bf16', 4, 64, 8), affine('f16', 4, 32, 1), affine('f32', 8, 128, 1));
  out.push(affine('bf16', 4, 64, 64), affine('f16', 6, 64, 64), affine('f32', 4, 64, 16));
  // mlx-native's kernels, bf16 scales: f32 x (quantized_matmul, quantized_matmul_simd) and bf16 x.
  const crate = (name: string, op: typeof quantizedMatmul, io: 'f32' | 'bf16', bits: number, m: number): Case => {
    const w = weightOf(bits, 64, 'bf16');
    const input = uniformBuffer(dev, io, [m, k], 1);
    const output = dev.alloc(io, [m, n]);
    return { name: `${name} q${bits} g64 [${m}, ${k}] x [${n}, ${k}]^T`, bytes: w.bytes + (m * k + m * n) * size(io),
      record: (e) => op(e, { input, weight: w.weight, scales: w.scales, biases: w.biases, output, m, k, n, groupSize: 64, bits }) };
  };
  out.push(crate('quantized_matmul', quantizedMatmul, 'f32', 4, 1), crate('quantized_matmul_simd', quantizedMatmulSimd, 'f32', 4, 1),
    crate('quantized_matmul_simd_bf16', quantizedMatmulSimdBf16, 'bf16', 6, 1), crate('quantized_matmul_simd_bf16', quantizedMatmulSimdBf16, 'bf16', 4, 64));
  return out;
}
// ---- end of quantized_matmul ----

// ---- quantized_matmul_ggml: GGUF blocks (floors and predictions: notes/ggml-2026-11-26.md) ----
// Every format's vector kernel at one decode token and matrix kernel at a
// 64-token prefill (Qwen3.6 27B MLP up, 5120 -> 17408; f32 x and y as the
// crate's kernels take them); the dequantization of that weight to bf16
// (every format; f32 and f16 for Q4_K); embedding rows to bf16 from a table
// of Gemma 4's vocabulary (262144 x 5376) in each format, 8192 tokens and one
// (decode), with its sqrt(hidden) scale. Bytes (the floor): the blocks read
// once (for embedding rows, those of the rows gathered), x and ids read, the
// outputs written once.
function quantizedMatmulGgmlCases(): Case[] {
  const out: Case[] = [];
  const [n, k] = small ? [512, 512] : [17408, 5120];
  for (const t of GGML_QUANT_TYPES) {
    const weight = ggmlBlocksBuffer(dev, t, (n * k) / ggmlBlockOf(t).qk);
    const wBytes = n * ggmlRowBytesOf(t, k);
    for (const m of [1, small ? 16 : 64]) {
      const x = uniformBuffer(dev, 'f32', [m, k], 1);
      const y = dev.alloc('f32', [m, n]);
      out.push({ name: `kernel_mul_${m === 1 ? 'mv' : 'mm'}_${t.toLowerCase().replace('_k', '_K')}_f32 [${m}, ${k}] x [${n}, ${k}]^T`,
        bytes: wBytes + 4 * (m * k + m * n), record: (e) => quantizedMatmulGgml(e, { input: x, weight, output: y, m, n, k, ggmlType: t }) });
    }
    for (const dt of t === 'Q4_K' ? (['bf16', 'f32', 'f16'] as const) : (['bf16'] as const)) {
      const w = dev.alloc(dt, [n * k]);
      out.push({ name: `ggml_dequantize ${t} -> ${dt} [${n}, ${k}]`, bytes: wBytes + n * k * size(dt),
        record: (e) => ggmlDequantize(e, { src: weight, output: w, count: n * k, ggmlType: t }) });
    }
  }
  const [vocab, hidden] = small ? [512, 256] : [262144, 5376];
  for (const t of GGML_QUANT_TYPES) {
    const table = ggmlBlocksBuffer(dev, t, (vocab * hidden) / ggmlBlockOf(t).qk);
    const rowBytes = ggmlRowBytesOf(t, hidden);
    for (const tokens of [small ? 16 : 8192, 1]) {
      const ids = dev.upload('u32', [tokens], Array.from({ length: tokens }, (_, i) => (i * 2654435761) % vocab));
      const y = dev.alloc('bf16', [tokens, hidden]);
      out.push({ name: `embedding ${t} -> bf16 [${tokens} tok, ${hidden}] of ${vocab}${tokens === 1 ? ' (decode)' : ''}`,
        bytes: tokens * (rowBytes + 2 * hidden + 4),
        record: (e) => embedding(e, { table, tableType: t, tokenIds: ids, output: y, vocabSize: vocab, hiddenSize: hidden, nTokens: tokens,
          scale: Math.sqrt(hidden) }) });
    }
  }
  return out;
}
// ---- end of quantized_matmul_ggml ----

// ---- sample: argmax, top-k, softmax_sample, the sampler, Philox ----
// Gemma 4's vocabulary (262144); decode is one row, the large shape 64 rows
// (a batch of decode streams, or speculative verification). Bytes: the floor,
// the logits read once and the outputs written once (with top-k 0 the
// sampler's first pass also writes z, and its whole-row passes read it again,
// which the floor leaves out). At one row
// the floor is a microsecond or less (1 MB at 3.3 TB/s is 0.3 us): the time
// is launch and synchronization latency, two to five dispatches per op.
// The one-row sampler rows take every path of the kernels: greedy, no
// filter, candidates (top-k), the whole-row passes with the nucleus inside
// the candidates (N(0, 36)) and past them (N(0, 4)), min-p alone both ways,
// the penalty; bench/notes/sample-speed-2026-11-26.md predicts them.
function sampleCases(): Case[] {
  const out: Case[] = [];
  const vocab = small ? 8192 : 262144;
  const big = small ? 2 : 64;
  const peaked = (rows: number, sigma: number): Buffer => normalLogits(dev, rows, vocab, sigma);
  for (const rows of [big, 1]) {
    const x = random('f32', [rows, vocab]);
    const idx = dev.alloc('u32', [rows]);
    const val = dev.alloc('f32', [rows]);
    const scratch = dev.alloc('u32', [argmaxScratchElements(rows, vocab)]);
    out.push({ name: `argmax f32 [${rows}, ${vocab}] two passes`, bytes: 4 * rows * vocab,
      record: (e) => argmax(e, { input: x, outIndex: idx, outValue: val, rows, nElements: vocab, scratch }),
      plan: () => planArgmax({ input: x, outIndex: idx, outValue: val, rows, nElements: vocab, scratch }, dev.limits, dev) });
    if (rows === 1) {
      out.push({ name: `argmax f32 [1, ${vocab}] one threadgroup (mlx-native's)`, bytes: 4 * vocab,
        record: (e) => argmax(e, { input: x, outIndex: idx, outValue: val, rows, nElements: vocab }) });
    }
    const k = rows === 1 ? 256 : 64;
    const ti = dev.alloc('u32', [rows, k]);
    const tv = dev.alloc('f32', [rows, k]);
    const ts = dev.alloc('u32', [topKScratchElements(rows, vocab, k)]);
    out.push({ name: `top_k f32 [${rows}, ${vocab}] k ${k}`, bytes: 4 * rows * vocab + 8 * rows * k,
      record: (e) => topK(e, { input: x, outIndices: ti, outValues: tv, rows, nElements: vocab, k, scratch: ts }) });
  }
  const configs: [string, { temperature: number; topK?: number; topP?: number; minP?: number; repetitionPenalty?: number }, number][] = [
    ['T 1, top-k 64, top-p 0.95 (Gemma 4)', { temperature: 1, topK: 64, topP: 0.95 }, 6],
    ['T 0.7, top-k 20, top-p 0.8, rp 1.05 x 64 ids (Qwen3.6)', { temperature: 0.7, topK: 20, topP: 0.8, repetitionPenalty: 1.05 }, 6],
    ['T 1, no filter', { temperature: 1 }, 6],
    ['T 0 (greedy)', { temperature: 0 }, 6],
    ['T 1, top-p 0.95 alone, N(0, 36) logits', { temperature: 1, topP: 0.95 }, 6],
    ['T 1, top-p 0.95 alone, N(0, 4) logits (whole-row path)', { temperature: 1, topP: 0.95 }, 2],
    ['T 1, min-p 0.02 alone, N(0, 36) logits', { temperature: 1, minP: 0.02 }, 6],
    ['T 1, min-p 0.02 alone, N(0, 4) logits (whole-row path)', { temperature: 1, minP: 0.02 }, 2],
  ];
  let counter = 0;
  for (const rows of [big, 1]) {
    const prevTokens = dev.upload('u32', [rows, 64], Array.from({ length: rows * 64 }, (_, i) => (i * 40503) % vocab));
    const token = dev.alloc('u32', [rows]);
    const logprob = dev.alloc('f32', [rows]);
    const scratch = dev.alloc('u32', [sampleScratchElements(rows, vocab)]);
    for (const [what, o, sigma] of rows === 1 ? configs : configs.slice(0, 1)) {
      const logits = peaked(rows, sigma);
      const prev = o.repetitionPenalty !== undefined ? { prevTokens, nPrev: 64 } : {};
      out.push({ name: `sample [${rows}, ${vocab}] ${what}`, bytes: 4 * rows * vocab,
        record: (e) => sample(e, { logits, outToken: token, outLogprob: logprob, scratch, rows, vocab, ...o, ...prev, seed: 1, counter: counter++ }),
        plan: () => planSample({ logits, outToken: token, outLogprob: logprob, scratch, rows, vocab, ...o, ...prev, seed: 1, counter: 0 },
          dev.limits, dev) });
    }
  }
  {
    const logits = peaked(1, 6);
    const probs = dev.alloc('f32', [vocab]);
    const token = dev.alloc('u32', [1]);
    const logprob = dev.alloc('f32', [1]);
    out.push({ name: `softmax_sample f32 [${vocab}] (mlx-native's, one threadgroup)`, bytes: 8 * vocab,
      record: (e) => softmaxSample(e, { logits: logits.view('f32', [vocab]), scratch: probs, outToken: token, outLogprob: logprob,
        nElements: vocab, temperature: 1, randomVal: 0.5 }) });
  }
  {
    const n = small ? 4096 : 2 ** 22;
    const bits = dev.alloc('u32', [n, 4]);
    out.push({ name: `philox4x32 [${n}, 4] u32`, bytes: 16 * n,
      record: (e) => philox4x32(e, { output: bits, n, key: [1, 2], counter: [0, 0, 0, 0] }) });
  }
  return out;
}

// ---- elementwise ----
// The residual stream of Gemma 4 31B (hidden 5376): a prefill of 8192 tokens
// and one decode token. Bytes: each input read once, the output written once.
function elementwiseCases(): Case[] {
  const out: Case[] = [];
  const hidden = small ? 256 : 5376;
  for (const tokens of [small ? 8 : 8192, 1]) {
    const n = tokens * hidden;
    const shape = `[${tokens}, ${hidden}]${tokens === 1 ? ' (decode)' : ''}`;
    const x = { f32: random('f32', [tokens, hidden]), f16: random('f16', [tokens, hidden]), bf16: random('bf16', [tokens, hidden]) };
    const y = { f32: dev.alloc('f32', [tokens, hidden]), f16: dev.alloc('f16', [tokens, hidden]), bf16: dev.alloc('bf16', [tokens, hidden]) };
    for (const dt of ['bf16', 'f32'] as const) {
      const a = x[dt];
      const b = random(dt, [tokens, hidden]);
      out.push({ name: `elementwise_add ${dt} ${shape}`, bytes: 3 * n * size(dt), record: (e) => elementwiseAdd(e, { a, b, output: y[dt] }) });
      if (dt === 'f32') continue;
      out.push({ name: `elementwise_mul ${dt} ${shape}`, bytes: 3 * n * size(dt), record: (e) => elementwiseMul(e, { a, b, output: y[dt] }) });
      out.push({ name: `elementwise_add_scaled ${dt} ${shape} s 0.5`, bytes: 3 * n * size(dt),
        record: (e) => elementwiseAddScaled(e, { a, b, output: y[dt], scale: 0.5 }) });
      out.push({ name: `scalar_mul ${dt} ${shape} s sqrt(5376)`, bytes: 2 * n * size(dt),
        record: (e) => scalarMul(e, { input: a, output: y[dt], scalar: Math.sqrt(5376) }) });
    }
    for (const [from, to] of [['f32', 'bf16'], ['bf16', 'f32'], ['f32', 'f16'], ['f16', 'f32'], ['f16', 'bf16'], ['bf16', 'f16']] as const) {
      out.push({ name: `cast ${from} -> ${to} ${shape}`, bytes: n * (size(from) + size(to)),
        record: (e) => cast(e, { input: x[from], output: y[to] }) });
    }
  }
  return out;
}
// ---- end of elementwise ----

// ---- embedding: Gemma 4 31B's table (262144 x 5376 bf16, scaled by sqrt(5376)) ----
// Floor: the rows read and written once, plus the ids.
function embeddingCases(): Case[] {
  const out: Case[] = [];
  const [vocab, hidden] = small ? [512, 256] : [262144, 5376];
  const table = dev.alloc('bf16', [vocab, hidden]);
  // Random bf16 values in [-2, 2), one block repeated over the table (a full random fill of 2.8 GB from the host is slow).
  const block = new Uint16Array(Math.min(vocab * hidden, 1 << 24));
  let s = 0x2545f491;
  for (let i = 0; i < block.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    block[i] = (s >>> 16) & 0xbfff;
  }
  for (let at = 0; at < vocab * hidden; at += block.length) table.write(block.subarray(0, Math.min(block.length, vocab * hidden - at)), at * 2);
  for (const tokens of [small ? 16 : 8192, 1]) {
    const ids = dev.upload('u32', [tokens], Array.from({ length: tokens }, (_, i) => (i * 2654435761) % vocab));
    const y = dev.alloc('bf16', [tokens, hidden]);
    const scale = Math.sqrt(hidden);
    out.push({
      name: `embedding bf16 [${tokens} tok, ${hidden}] of ${vocab}${tokens === 1 ? ' (decode)' : ''}`,
      bytes: 2 * tokens * hidden * 2 + 4 * tokens,
      record: (e) => embedding(e, { table, tokenIds: ids, output: y, vocabSize: vocab, hiddenSize: hidden, nTokens: tokens, scale }),
    });
  }
  return out;
}
// ---- end of embedding ----

// ---- kv_cache_copy: K and V of a prefill and of a decode token into bf16 caches (8 KV heads x 256) ----
// Floor: K and V read once and written once.
function kvCacheCopyCases(): Case[] {
  const out: Case[] = [];
  const [heads, headDim] = [8, 256];
  const capacity = small ? 64 : 8192;
  for (const [tokens, from, to] of [[small ? 32 : 8192, 'bf16', 'bf16'], [small ? 32 : 8192, 'f32', 'f16'], [1, 'bf16', 'bf16']] as const) {
    const k = random(from, [tokens, heads, headDim]);
    const v = random(from, [tokens, heads, headDim]);
    const ck = dev.alloc(to, [heads, capacity, headDim]);
    const cv = dev.alloc(to, [heads, capacity, headDim]);
    const pos = tokens === 1 ? capacity - 1 : 0;
    out.push({
      name: `kv_cache_copy_seq ${from}->${to} K+V [${tokens} tok, ${heads}, ${headDim}]${tokens === 1 ? ' (decode)' : ''}`,
      bytes: 2 * tokens * heads * headDim * (size(from) + size(to)),
      record: (e) => kvCacheCopySeqDual(e, { srcK: k, srcV: v, cacheK: ck, cacheV: cv, nHeads: heads, headDim, capacity, seqPosStart: pos, nTokens: tokens }),
    });
  }
  return out;
}
// ---- end of kv_cache_copy ----

// ---- the gated activations: silu_mul, gelu (gelu_tanh_mul and gelu alone),
// sigmoid_mul, each from two inputs and from rows [gate | other], bf16. A
// prefill of 8192 tokens and one decode token at Qwen3.6-27B's MLP
// (intermediate 17408, SwiGLU), Gemma 4 31B's MLP (intermediate 21504, GeGLU)
// and the output gate of Qwen3.6 full attention (16 heads x 256). Floor: the
// gated forms read 2 n and write n elements (6 n bytes), gelu reads and
// writes n (4 n bytes).
type Recorder = (e: Encoder) => void;
interface GatedOp {
  pair: string;
  label: string;
  dim: number;
  two: (gate: Buffer, other: Buffer, y: Buffer) => Recorder;
  halves: (x: Buffer, y: Buffer, rows: number, dim: number) => Recorder;
}

function gatedCases(op: GatedOp, alone?: (x: Buffer, y: Buffer) => Recorder): Case[] {
  const out: Case[] = [];
  for (const rows of [small ? 4 : 8192, 1]) {
    const n = rows * op.dim;
    const [gate, other, halves] = [random('bf16', [rows, op.dim]), random('bf16', [rows, op.dim]), random('bf16', [rows, 2 * op.dim])];
    const y = dev.alloc('bf16', [rows, op.dim]);
    const tag = rows === 1 ? ' (decode)' : '';
    out.push({ name: `${op.pair} bf16 [${rows}, ${op.dim}] ${op.label}${tag}`, bytes: 6 * n, record: op.two(gate, other, y) });
    out.push({ name: `${op.pair}_halves bf16 [${rows}, 2x${op.dim}]${tag}`, bytes: 6 * n, record: op.halves(halves, y, rows, op.dim) });
    if (alone !== undefined) out.push({ name: `gelu bf16 [${rows}, ${op.dim}]${tag}`, bytes: 4 * n, record: alone(gate, y) });
  }
  return out;
}

function siluMulCases(): Case[] {
  return gatedCases({
    pair: 'silu_mul', label: 'Qwen3.6 MLP', dim: small ? 512 : 17408,
    two: (gate, up, output) => (e) => siluMul(e, { gate, up, output }),
    halves: (gateUp, output, rows, dim) => (e) => siluMulHalves(e, { gateUp, output, rows, dim }),
  });
}

function geluCases(): Case[] {
  return gatedCases({
    pair: 'gelu_tanh_mul', label: 'Gemma 4 MLP', dim: small ? 512 : 21504,
    two: (gate, up, output) => (e) => geluTanhMul(e, { gate, up, output }),
    halves: (gateUp, output, rows, dim) => (e) => geluTanhMulHalves(e, { gateUp, output, rows, dim }),
  }, (input, output) => (e) => gelu(e, { input, output }));
}

function sigmoidMulCases(): Case[] {
  return gatedCases({
    pair: 'sigmoid_mul', label: 'Qwen3.6 attn gate', dim: small ? 256 : 4096,
    two: (gate, x, output) => (e) => sigmoidMul(e, { x, gate, output }),
    halves: (gateX, output, rows, dim) => (e) => sigmoidMulHalves(e, { gateX, output, rows, dim }),
  });
}
// ---- end of the gated activations ----

// ---- the gated delta net's decode step (Qwen3.6-35B-A3B: 16 key / 32 value heads of 128) ----
// The chain a layer ran (l2_norm over q and k, compute_g_beta,
// gated_delta_net_decode) beside gated_delta_net_decode_fused, which does
// the three in one dispatch; f32 as the model holds them. Bytes: the state
// read and written, q, k, v, the gates and the output.
function gdnDecodeCases(): Case[] {
  const hk = small ? 2 : 16, hv = small ? 4 : 32, dk = small ? 32 : 128, dv = small ? 32 : 128;
  const qk = random('f32', [2 * hk, dk]);
  const q = qk.view('f32', [1, hk, dk], 0), k = qk.view('f32', [1, hk, dk], hk * dk * 4);
  const v = random('f32', [1, hv, dv]), a = random('f32', [1, hv]), b = random('f32', [1, hv]);
  const aLog = random('f32', [hv]), dtBias = random('f32', [hv]);
  const g = dev.alloc('f32', [1, hv]), beta = dev.alloc('f32', [1, hv]);
  const state = uniformBuffer(dev, 'f32', [1, hv, dv, dk], 0.1);
  const output = dev.alloc('f32', [1, hv, dv]);
  const dims = { batch: 1, nQkHeads: hk, nHeads: hv, kDim: dk, vDim: dv };
  const bytes = 4 * (2 * hv * dv * dk + 2 * hk * dk + 2 * hv * dv + 4 * hv);
  const what = `[${hk} / ${hv} heads, ${dk}, ${dv}] f32 (decode)`;
  return [
    {
      name: `gated delta net step ${what}: l2_norm + compute_g_beta + gated_delta_net_decode`, bytes,
      record: (e) => {
        l2Norm(e, { x: qk, y: qk, rows: 2 * hk, dim: dk, eps: 1e-6 });
        computeGBeta(e, { a, b, aLog, dtBias, g, beta, batch: 1, seqLen: 1, nHeads: hv });
        gatedDeltaNetDecode(e, { ...dims, q, k, v, g, beta, state, output });
      },
    },
    {
      name: `gated delta net step ${what}: gated_delta_net_decode_fused`, bytes,
      record: (e) => gatedDeltaNetDecodeFused(e, { ...dims, q, k, v, a, b, aLog, dtBias, state, output, eps: 1e-6 }),
    },
  ];
}
// ---- end of the gated delta net's decode step ----

// ---- moe_dispatch: the grouping of (token, slot) pairs by expert, and mlx-native's glue kernels ----
// moe_dispatch_sort at Qwen3.6-35B-A3B's 256 experts, top-8: one token and
// a 4096-token prefill (bytes: the ids read, the offsets and the order
// written; one threadgroup, so a latency more than a bandwidth). The crate's
// glue at Gemma 4 26B-A4B's experts (top-8 of 128, moe_intermediate 704,
// hidden 2816; its "swiglu" kernels gate with GELU): the per-slot GELU gate
// and the weighted sums for one token and for 512, gather_topk for one.
// Floor: inputs read once, outputs written once.
function moeDispatchCases(): Case[] {
  const out: Case[] = [];
  const E = small ? 16 : 256, topK = 8;
  for (const tokens of [1, small ? 32 : 4096]) {
    const nPairs = tokens * topK;
    const ids = dev.upload('u32', [nPairs], Array.from({ length: nPairs }, (_, i) => (i * 2654435761 + (i >> 3) * 97) % E));
    const offsets = dev.alloc('u32', [E + 2]);
    const order = dev.alloc('u32', [nPairs]);
    out.push({ name: `moe_dispatch_sort ${tokens} tok x top-${topK} of ${E}${tokens === 1 ? ' (decode)' : ''}`, bytes: 4 * (2 * nPairs + E + 2),
      record: (e) => moeDispatchSort(e, { ids, offsets, order, nPairs, numExperts: E }) });
  }
  const [I, H, k] = small ? [64, 128, 8] : [704, 2816, 8];
  for (const tokens of [1, small ? 4 : 512]) {
    const tag = tokens === 1 ? ' (decode)' : '';
    const gu = random('bf16', [tokens, k, 2 * I]);
    const h = dev.alloc('bf16', [tokens, k, I]);
    out.push({ name: `moe_swiglu_seq_bf16 [${tokens}, ${k}, 2x${I}]${tag}`, bytes: 6 * tokens * k * I,
      record: (e) => moeSwigluSeq(e, { gateUp: gu, output: h, intermediate: I, topK: k, nTokens: tokens }) });
    const y = random('bf16', [tokens, k, H]);
    const w = random('f32', [tokens, k]);
    const o = dev.alloc('bf16', [tokens, H]);
    const of = dev.alloc('f32', [tokens, H]);
    out.push({ name: `moe_weighted_sum_seq_bf16 [${tokens}, ${k}, ${H}]${tag}`, bytes: 2 * tokens * H * (k + 1) + 4 * tokens * k,
      record: (e) => moeWeightedSumSeq(e, { expertOutputs: y, weights: w, output: o, hiddenSize: H, topK: k, nTokens: tokens }) });
    out.push({ name: `moe_weighted_sum_seq_bf16_input -> f32 [${tokens}, ${k}, ${H}]${tag}`, bytes: 2 * tokens * H * k + 4 * tokens * (H + k),
      record: (e) => moeWeightedSumSeq(e, { expertOutputs: y, weights: w, output: of, hiddenSize: H, topK: k, nTokens: tokens }) });
    const g = random('bf16', [tokens * k * I]);
    const u = random('bf16', [tokens * k * I]);
    const go = dev.alloc('bf16', [tokens * k * I]);
    const n = tokens * k * I;
    out.push({ name: `fused_gelu_mul_bf16 [${n}]${tag}`, bytes: 6 * n, record: (e) => fusedGeluMul(e, { gateOut: g, upOut: u, output: go, nElements: n }) });
  }
  {
    const gu = random('f32', [k, 2 * I]);
    const h = dev.alloc('f32', [k, I]);
    out.push({ name: `moe_swiglu_batch f32 [${k}, 2x${I}] (decode)`, bytes: 12 * k * I,
      record: (e) => moeSwigluBatch(e, { gateUp: gu, output: h, intermediate: I, topK: k }) });
    const y = random('f32', [k, H]);
    const w = random('f32', [k]);
    const o = dev.alloc('f32', [H]);
    out.push({ name: `moe_weighted_sum f32 [${k}, ${H}] (decode)`, bytes: 4 * (k * H + k + H),
      record: (e) => moeWeightedSum(e, { expertOutputs: y, weights: w, output: o, hiddenSize: H, topK: k }) });
    out.push({ name: `moe_accumulate f32 [${H}] (decode)`, bytes: 12 * H,
      record: (e) => moeAccumulate(e, { accumulator: o, expertOutput: y, routingWeight: 0.25, nElements: H }) });
    const En = small ? 16 : 128;
    const probs = random('f32', [En]);
    const sortedIdx = dev.upload('u32', [En], Array.from({ length: En }, (_, i) => (i * 37) % En));
    const scale = random('f32', [En]);
    const ids = dev.alloc('u32', [k]);
    const ws = dev.alloc('f32', [k]);
    out.push({ name: `moe_gather_topk_weights top-${k} of ${En} (decode)`, bytes: 4 * (3 * k + 2 * k),
      record: (e) => moeGatherTopkWeights(e, { softmaxProbs: probs, sortedIndices: sortedIdx, perExpertScale: scale, outExpertIds: ids,
        outWeights: ws, nExperts: En, topK: k }) });
  }
  return out;
}
// ---- end of moe_dispatch ----

// ---- moe_weighted_reduce: Qwen3.6-35B-A3B's MoE output (top-8 experts weighted, the sigmoid-gated shared
// expert and the residual added; hidden 2048): a 4096-token prefill and one decode token, bf16, and the
// crate's f32 kernel. Floor: top-8 expert rows, the shared row, the residual and the gate read once, the output written.
function moeWeightedReduceCases(): Case[] {
  const out: Case[] = [];
  const [h, k] = small ? [256, 8] : [2048, 8];
  for (const [dt, tokens] of [['bf16', small ? 16 : 4096], ['bf16', 1], ['f32', 1]] as const) {
    const s = size(dt);
    const yExpert = random(dt, [tokens, k, h]);
    const expertW = random('f32', [tokens, k]);
    const shLogit = random(dt, [tokens]);
    const yShared = random(dt, [tokens, h]);
    const residual = random(dt, [tokens, h]);
    const output = dev.alloc(dt, [tokens, h]);
    out.push({
      name: `moe_weighted_reduce_${dt} [${tokens}, top-${k}, ${h}] +shared +residual${tokens === 1 ? ' (decode)' : ''}`,
      bytes: tokens * h * s * (k + 3) + tokens * (4 * k + s),
      record: (e) => moeWeightedReduce(e, { expertW, yExpert, shLogit, yShared, residual, output, nTokens: tokens, topK: k, h }),
    });
  }
  // The models' decode forms: bf16 expert rows beside f32 activations (_bf16_input), and the shared expert as a
  // ninth bf16 row of the products' output (_bf16_shared, a view of that row).
  for (const shared of [false, true]) {
    const rows = random('bf16', [1, k + 1, h]);
    const yExpert = rows.view('bf16', [1, k, h], 0);
    const yShared = shared ? rows.view('bf16', [1, h], k * h * 2) : random('f32', [1, h]);
    const expertW = random('f32', [1, k]);
    const shLogit = random('f32', [1]);
    const residual = random('f32', [1, h]);
    const output = dev.alloc('f32', [1, h]);
    out.push({
      name: `moe_weighted_reduce_bf16_${shared ? 'shared' : 'input'} [1, top-${k}, ${h}] +shared +residual (decode)`,
      bytes: h * (2 * k + (shared ? 2 : 4) + 8) + 4 * k + 4,
      record: (e) => moeWeightedReduce(e, { expertW, yExpert, shLogit, yShared, residual, output, nTokens: 1, topK: k, h }),
    });
  }
  return out;
}
// ---- end of moe_weighted_reduce ----

// ---- the fused norms of the models' decode steps: Gemma 4 26B-A4B (hidden 2816, 16 query and 8 key heads of
// 256, top-8 experts) and Qwen3.6-35B-A3B (hidden 2048, top-8 and the shared row). One token each; the floor:
// every input row read once, every output written once.
function fusedDecodeNormCases(): Case[] {
  const out: Case[] = [];
  const H = small ? 256 : 2816, k = 8;
  {
    const residual = random('f32', [1, H]), input = random('f32', [1, H]), weight = random('f32', [H]), scalar = random('f32', [1]);
    const nw = [0, 1, 2].map(() => random('f32', [H]));
    const normed = [0, 1, 2].map(() => dev.alloc('f32', [1, H]));
    out.push({
      name: `fused_norm_add_norms f32 [1, ${H}] +3 norms (2 weighted) (decode)`, bytes: 4 * H * (3 + 2 + 4),
      record: (e) => fusedNormAddNorms(e, {
        residual, input, weight, output: residual, rows: 1, dim: H, eps: 1e-6,
        normed0: normed[0], normWeight0: nw[0], normed1: normed[1], normed2: normed[2], normWeight2: nw[2],
      }),
    });
    out.push({
      name: `fused_norm_add_norms f32 [1, ${H}] +scalar +1 norm (decode)`, bytes: 4 * H * (3 + 1 + 2),
      record: (e) => fusedNormAddNorms(e, { residual, input, weight, output: residual, scalar, rows: 1, dim: H, eps: 1e-6, normed0: normed[0], normWeight0: nw[0] }),
    });
    const yExpert = random('bf16', [1, k, H]), expertW = random('f32', [1, k]);
    out.push({
      name: `fused_norm_moe_sum_bf16_input [1, top-${k}, ${H}] (decode)`, bytes: 2 * k * H + 4 * H * 4 + 4 * k,
      record: (e) => fusedNormMoeSum(e, { input, weight, expertW, yExpert, moeWeight: nw[1]!, output: input, rows: 1, dim: H, topK: k, eps: 1e-6 }),
    });
  }
  {
    const [nh, nkv, d] = small ? [4, 2, 64] : [16, 8, 256];
    const q = random('f32', [1, nh, d]), kk = random('f32', [1, nkv, d]), v = random('f32', [1, nkv, d]);
    const qWeight = random('f32', [d]), kWeight = random('f32', [d]);
    const positions = dev.upload('u32', [1], [1234]);
    out.push({
      name: `fused_head_norm_rope_qkv f32 q [1, ${nh}, ${d}] k, v [1, ${nkv}, ${d}] (decode)`, bytes: 8 * d * (nh + 2 * nkv) + 8 * d,
      record: (e) => fusedHeadNormRopeQkv(e, { q, k: kk, v, qWeight, kWeight, positions, seqLen: 1, nHeads: nh, nKvHeads: nkv, headDim: d,
        halfRopeDim: d / 2, eps: 1e-6, theta: 1e4 }),
    });
  }
  {
    const h = small ? 256 : 2048;
    const rows = random('bf16', [1, k + 1, h]);
    const expertW = random('f32', [1, k]), shLogit = random('f32', [1]), residual = random('f32', [1, h]), normWeight = random('f32', [h]);
    const normed = dev.alloc('f32', [1, h]);
    out.push({
      name: `moe_weighted_reduce_norm_bf16_shared [1, top-${k}, ${h}] +shared +residual +norm (decode)`, bytes: h * (2 * (k + 1) + 4 * 4) + 4 * k + 4,
      record: (e) => moeWeightedReduceNorm(e, {
        expertW, yExpert: rows.view('bf16', [1, k, h], 0), shLogit, yShared: rows.view('bf16', [1, h], k * h * 2), residual, output: residual,
        normWeight, normed, nTokens: 1, topK: k, h, eps: 1e-6,
      }),
    });
  }
  return out;
}
// ---- end of the fused norms ----

/** --replay: the iters dispatches recorded once (a replayable encoder), then 5 replays: device time a dispatch, median. */
function replayedTimes(c: Case, iters: number): number[] {
  const enc = dev.encoder({ replayable: true });
  for (let i = 0; i < iters; i++) c.record(enc);
  enc.commitAndWait();
  const ts = Array.from({ length: 5 }, () => {
    enc.replayAndWait();
    return enc.gpuTimeNs / iters;
  });
  enc.release();
  return ts;
}

const time = (c: Case, iters: number): number => gpuTimePerDispatch(dev, c.record, iters);

console.log(`device: ${dev.name} (${dev.backend})${replay ? ', replayed' : ''}`);
/** A case's time a dispatch (ns): median of 5 commits or replays of `iters` back to back. */
function measure(c: Case): number {
  const probe = time(c, 1);
  const iters = Math.max(1, Math.min(200, Math.round(2e7 / Math.max(probe, 1))));
  const ts = (replay ? replayedTimes(c, iters) : Array.from({ length: 5 }, () => time(c, iters))).sort((a, b) => a - b);
  return ts[2]!;
}

for (const c of cases().filter((x) => only.length === 0 || only.some((t) => x.name.includes(t)))) {
  const ns = measure(c);
  console.log(`${c.name.padEnd(52)} ${(ns / 1000).toFixed(2).padStart(9)} us  ${(c.bytes / 1e6).toFixed(1).padStart(8)} MB  ${(c.bytes / ns).toFixed(0).padStart(5)} GB/s`);
  const plan = parts ? c.plan?.() : undefined;
  for (let k = 1; plan !== undefined && k < plan.dispatches.length; k++) {
    const sub: OpPlan = { ...plan, dispatches: plan.dispatches.slice(0, k) };
    const last = `  its first ${k} dispatch${k > 1 ? 'es' : ''}, to ${sub.dispatches[k - 1]!.kernel}`;
    console.log(`${last.padEnd(52)} ${(measure({ ...c, record: (e) => record(e, sub) }) / 1000).toFixed(2).padStart(9)} us`);
  }
}
dev.close();
