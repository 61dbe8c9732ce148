// Times the dense family (ts/ops/dense.ts), the MLX affine quantized
// products (ts/ops/quantized_matmul.ts), the GGUF block products
// (ts/ops/quantized_matmul_ggml.ts) and the per-expert products
// (ts/ops/quantized_matmul_id.ts, ts/ops/dense_matmul_id.ts) with the
// encoder's GPU time, at 4096^3, at Qwen3.6 27B / Gemma 4 31B projection
// shapes and at Qwen3.6-35B-A3B / Gemma 4 26B-A4B expert shapes: per case a
// warm-up commit, then 5 commits of `iters` back-to-back dispatches; time
// per dispatch = median of gpuTimeNs / iters. bench/matmul_peers.py times
// torch.matmul / F.linear (cuBLAS) and torch.compile at the same shapes (for
// the quantized rows: F.linear on the dequantized bf16 weight, and MLX's
// dequantization in torch followed by F.linear) and measures the peak it
// divides by.
//
//   bun run bench/matmul.ts [--small] [--only TEXT]... [--peak-tflops T] [--copy-gbs B]
//
// --small: shapes the emulator runs; --only (repeatable): the cases whose
// name contains one of the TEXTs (e.g. "m=512" or "square bf16", for a
// profiler's run). With the peak
// bf16 TFLOP/s and the copy bandwidth (GB/s, bytes read + written) that
// matmul_peers.py printed on the same machine, each row also gets its floor
// and our fraction of it:
//   matrix form (compute-bound): floor = 2 m n k / peak;
//   vector form (decode, memory-bound): floor = bytes / copy bandwidth, the
//   bytes being the weight's (read once; quantized: the packed words, scales
//   and biases) plus x and y; for the per-expert rows the distinct experts'
//   weights the routing touches.
// Backend: MLX_NATIVE_BACKEND or the default. Inputs are random, never zeros.
// Each case reads one weight again and again, so a decode row whose weight
// fits in L2 (an H200's 60 MB holds most of a 50 MB 4-bit projection) reads
// it partly from L2; bench/decode_products.ts times the same products with
// their weights out of L2, as a model's decode step reads them.

import { Device, type Buffer, type DType, type Encoder } from '../ts/index.ts';
import { ggmlBlocksBuffer, gpuTimePerDispatch, routing, uniformBuffer, wordBuffer } from './common.ts';
import { denseMatmul, denseMatmulTensor, denseMatvec } from '../ts/ops/dense.ts';
import { affineQuantizedMatmul, quantizedDequantize, quantizedMatmulSimd } from '../ts/ops/quantized_matmul.ts';
import {
  GGML_QUANT_TYPES, ggmlBlockOf, ggmlDequantize, ggmlMatmulSplit, ggmlRowBytesOf, planQuantizedMatmulGgml, quantizedMatmulGgml, type GgmlQuantType,
} from '../ts/ops/quantized_matmul_ggml.ts';
import { quantizedGateUpMmId, quantizedGateUpMvId, quantizedMmId, quantizedMvId } from '../ts/ops/quantized_matmul_id.ts';
import { denseGateUpMmId, denseGateUpMvId, denseMmId, denseMvId } from '../ts/ops/dense_matmul_id.ts';
import {
  ggmlIdMmFewCudaLaunch, ggmlIdMmWgCudaLaunch, planQuantizedMatmulIdGgmlMm, quantizedMatmulIdGgml, quantizedMatmulIdGgmlGateUp, quantizedMatmulIdGgmlMm, quantizedMatmulIdGgmlMmGateUp, quantizedMatmulIdSwigluQ4_0,
} from '../ts/ops/quantized_matmul_id_ggml.ts';
import { siluMul } from '../ts/ops/silu_mul.ts';
import { record, type OpPlan } from '../ts/plan.ts';
import { moeDispatchSortRef } from '../ts/ops/moe_dispatch.ts';

const small = process.argv.includes('--small');
const arg = (name: string): number | null => {
  const i = process.argv.indexOf(name);
  return i < 0 ? null : Number(process.argv[i + 1]);
};
const only = process.argv.flatMap((a, i) => (a === '--only' ? [process.argv[i + 1] ?? ''] : []));
const peakTflops = arg('--peak-tflops');
const copyGbs = arg('--copy-gbs');
const dev = Device.open();
const size = (d: DType): number => (d === 'f32' ? 4 : 2);

const random = (dtype: DType, n: number): Buffer => uniformBuffer(dev, dtype, [n], 0.5);

interface Case {
  name: string;
  /** 2 m n k */
  flops: number;
  /** The weight read once, x read, y written. */
  bytes: number;
  /** Memory-bound (decode): the floor is bytes / bandwidth; else flops / peak. */
  memoryBound: boolean;
  record: (enc: Encoder) => void;
}

/** y = x W^T, x [m, k], W [n, k], one dtype (dense_matmul: the vector form for m <= 8). */
function dense(label: string, dt: 'bf16' | 'f16' | 'f32', m: number, n: number, k: number): Case {
  const x = random(dt, m * k);
  const w = random(dt, n * k);
  const y = dev.alloc(dt, [m * n]);
  return {
    name: `${label} ${dt} m=${m} n=${n} k=${k}`,
    flops: 2 * m * n * k,
    bytes: (n * k + m * k + m * n) * size(dt),
    memoryBound: m <= 8,
    record: (e) => denseMatmul(e, { x, weight: w, output: y, m, n, k }),
  };
}

function cases(): Case[] {
  if (small) {
    return [dense('square', 'bf16', 64, 64, 64), dense('decode', 'bf16', 1, 256, 256), dense('decode', 'bf16', 8, 256, 256), ...quantizedCases(),
      ...ggmlCases(), ...moeCases(), ...moeGgmlCases()];
  }
  const out: Case[] = [dense('square', 'bf16', 4096, 4096, 4096), dense('square', 'f16', 4096, 4096, 4096), dense('square', 'f32', 4096, 4096, 4096)];
  // Qwen3.6 27B MLP: hidden 5120, intermediate 17408 (gate/up 5120 -> 17408, down 17408 -> 5120).
  for (const m of [1, 8, 512, 8192]) out.push(dense('Qwen3.6 up', 'bf16', m, 17408, 5120));
  for (const m of [1, 512, 8192]) out.push(dense('Qwen3.6 down', 'bf16', m, 5120, 17408));
  // Gemma 4 31B: hidden 5376, MLP 21504 (4 x hidden); the 262144-token vocabulary projection.
  for (const m of [1, 8, 512, 8192]) out.push(dense('Gemma 4 up', 'bf16', m, 21504, 5376));
  for (const m of [512, 8192]) out.push(dense('Gemma 4 down', 'bf16', m, 5376, 21504));
  out.push(dense('Gemma 4 lm_head', 'bf16', 1, 262144, 5376));
  {
    // mlx-native's f32-activation decode kernel on the same vocabulary projection.
    const [n, k] = [262144, 5376];
    const a = random('f32', k);
    const b = random('bf16', n * k);
    const c = dev.alloc('f32', [n]);
    out.push({ name: `Gemma 4 lm_head dense_matvec_bf16w_f32io m=1 n=${n} k=${k}`, flops: 2 * n * k, bytes: 2 * n * k + 4 * (k + n), memoryBound: true,
      record: (e) => denseMatvec(e, { a, b, output: c, m: 1, n, k }) });
  }
  {
    // mlx-native's f32-activation matrix kernel (the input rounded to bf16 while staged).
    const [m, n, k] = [4096, 4096, 4096];
    const src1 = random('f32', m * k);
    const src0 = random('bf16', n * k);
    const dst = dev.alloc('f32', [m * n]);
    out.push({ name: `square hf2q_dense_mm_bf16_f32_tensor m=${m} n=${n} k=${k}`, flops: 2 * m * n * k, bytes: 2 * n * k + 4 * (m * k + m * n),
      memoryBound: false, record: (e) => denseMatmulTensor(e, { src0, src1, dst, m, n, k, src0Batch: 1, src1Batch: 1 }) });
  }
  return [...out, ...quantizedCases(), ...ggmlCases(), ...moeCases(), ...moeGgmlCases()];
}

// ---- quantized_matmul: MLX affine quantization (floors and predictions: notes/quantized-2026-11-25.md) ----

/**
 * y = x W^T with W [n, k] in MLX's affine format (bits, groups of gs; random
 * packed words), x, scales, biases and y of one dtype: affineQuantizedMatmul
 * (the vector form for m <= 8). Bytes: the packed weight, scales and biases
 * read once, x read, y written.
 */
function quantized(label: string, dt: 'bf16' | 'f16', bits: number, gs: number, m: number, n: number, k: number): Case {
  const x = random(dt, m * k);
  const weight = wordBuffer(dev, (n * k * bits) / 32);
  const scales = uniformBuffer(dev, dt, [(n * k) / gs], 0.02);
  const biases = uniformBuffer(dev, dt, [(n * k) / gs], 0.1);
  const y = dev.alloc(dt, [m * n]);
  return {
    name: `${label} q${bits} g${gs} ${dt} m=${m} n=${n} k=${k}`,
    flops: 2 * m * n * k,
    bytes: (n * k * bits) / 8 + ((2 * n * k) / gs + m * k + m * n) * size(dt),
    memoryBound: m <= 8,
    record: (e) => affineQuantizedMatmul(e, { x, weight, scales, biases, output: y, m, n, k, groupSize: gs, bits }),
  };
}

/**
 * Ours dequantize-then-product for MLX's affine rows: quantizedDequantize to
 * f16 (bf16 scales), then denseMatmulTensor (hf2q_dense_mm_f16_f32_tensor,
 * f32 x and y): what ts/models/blocks.ts linear runs for 'fast' affine rows
 * from DEQUANT_MIN_ROWS rows on CUDA, beside the matrix form at the same
 * sizes (quantized above, bf16 x and y).
 */
function affineDequantMatmul(label: string, bits: number, gs: number, m: number, n: number, k: number): Case {
  const x = random('f32', m * k);
  const weight = wordBuffer(dev, (n * k * bits) / 32);
  const scales = uniformBuffer(dev, 'bf16', [(n * k) / gs], 0.02);
  const biases = uniformBuffer(dev, 'bf16', [(n * k) / gs], 0.1);
  const w = dev.alloc('f16', [n * k]);
  const y = dev.alloc('f32', [m * n]);
  return {
    name: `${label} q${bits} g${gs} dequantize f16 + hf2q_dense_mm_f16_f32_tensor m=${m} n=${n} k=${k}`,
    flops: 2 * m * n * k,
    bytes: (n * k * bits) / 8 + (4 * n * k) / gs + 4 * (m * k + m * n),
    memoryBound: false,
    record: (e) => {
      quantizedDequantize(e, { weight, scales, biases, output: w, n, k, groupSize: gs, bits });
      denseMatmulTensor(e, { src0: w, src1: x, dst: y, m, n, k, src0Batch: 1, src1Batch: 1 });
    },
  };
}

/** quantizedMatmulSimd at one token: f32 x and y, 4 bits, groups of 64, bf16 scales and biases. */
function simd(label: string, n: number, k: number): Case {
  const gs = 64;
  const input = random('f32', k);
  const weight = wordBuffer(dev, (n * k) / 8);
  const scales = uniformBuffer(dev, 'bf16', [(n * k) / gs], 0.02);
  const biases = uniformBuffer(dev, 'bf16', [(n * k) / gs], 0.1);
  const output = dev.alloc('f32', [n]);
  return {
    name: `${label} quantized_matmul_simd q4 g64 f32 m=1 n=${n} k=${k}`, flops: 2 * n * k,
    bytes: (n * k) / 2 + (4 * n * k) / gs + 4 * (k + n), memoryBound: true,
    record: (e) => quantizedMatmulSimd(e, { input, weight, scales, biases, output, m: 1, k, n, groupSize: gs, bits: 4 }),
  };
}

function quantizedCases(): Case[] {
  if (small) {
    return [quantized('decode', 'bf16', 4, 64, 1, 256, 256), quantized('decode', 'bf16', 6, 32, 8, 256, 256),
      quantized('prefill', 'bf16', 8, 128, 64, 128, 256), affineDequantMatmul('prefill', 4, 64, 64, 128, 256)];
  }
  // mlx-community's default: 4 bits, groups of 64, bf16 scales; 6 and 8 bits at Gemma 4's up projection.
  const out: Case[] = [quantized('square', 'bf16', 4, 64, 1, 4096, 4096), quantized('square', 'bf16', 4, 64, 4096, 4096, 4096)];
  for (const m of [1, 8, 512, 8192]) out.push(quantized('Qwen3.6 up', 'bf16', 4, 64, m, 17408, 5120));
  out.push(quantized('Qwen3.6 down', 'bf16', 4, 64, 1, 5120, 17408));
  for (const bits of [4, 6, 8]) out.push(quantized('Gemma 4 up', 'bf16', bits, 64, 1, 21504, 5376));
  out.push(quantized('Gemma 4 up', 'f16', 4, 32, 1, 21504, 5376), quantized('Gemma 4 up', 'bf16', 4, 64, 8192, 21504, 5376));
  // The prompts' route on CUDA (ts/models/blocks.ts linear): the weight dequantized to f16, then the dense tiles.
  for (const m of [128, 512, 8192]) out.push(affineDequantMatmul('Qwen3.6 up', 4, 64, m, 17408, 5120));
  out.push(affineDequantMatmul('Gemma 4 up', 4, 64, 8192, 21504, 5376));
  for (const [label, n, k] of [['35B-A3B gdn in_proj', 12352, 2048], ['35B-A3B gdn out_proj', 2048, 4096]] as const) {
    out.push(quantized(`Qwen3.6 ${label}`, 'bf16', 4, 64, 4096, n, k), affineDequantMatmul(`Qwen3.6 ${label}`, 4, 64, 4096, n, k));
  }
  // mlx-native's f32-activation SIMD kernel (4 bits, bf16 scales) at one token: what the models' decode steps run
  // for every non-expert layer (ts/models/blocks.ts linear), at Qwen3.6 up and at Qwen3.6-35B-A3B's own shapes
  // (hidden 2048): the gated delta net's in_proj (qkv, z, a, b as one product), the attention's (q, gate, k, v),
  // the out projections, the shared expert's gate/up with its gate logit, its down, and the output projection.
  out.push(simd('Qwen3.6 up', 17408, 5120));
  for (const [label, n, k] of [['35B-A3B gdn in_proj', 12352, 2048], ['35B-A3B attn in_proj', 9216, 2048], ['35B-A3B gdn out_proj', 2048, 4096],
    ['35B-A3B shared gate_up', 1025, 2048], ['35B-A3B shared down', 2048, 512], ['35B-A3B lm_head', 248320, 2048]] as const) {
    out.push(simd(`Qwen3.6 ${label}`, n, k));
  }
  return out;
}
// ---- end of quantized_matmul ----

// ---- quantized_matmul_ggml: GGUF blocks (floors and predictions: notes/ggml-2026-11-26.md) ----

/**
 * y = x W^T with W [n, k] in a GGUF block format (random blocks, small
 * scales), f32 x and y: quantizedMatmulGgml (the vector form for m <= 8).
 * Bytes: the blocks read once, x read, y written.
 */
function ggml(label: string, type: GgmlQuantType, m: number, n: number, k: number, splitSms?: number): Case {
  const x = random('f32', m * k);
  const weight = ggmlBlocksBuffer(dev, type, (n * k) / ggmlBlockOf(type).qk);
  const y = dev.alloc('f32', [m * n]);
  if (splitSms !== undefined) {
    // Split k as a device of splitSms multiprocessors splits it (the device's own count, or more: blocks an SM).
    const sp = ggmlMatmulSplit(m, n, k, splitSms, Infinity);
    const scratch = dev.alloc('f32', [Math.max(1, (sp?.splits ?? 1) * m * n)]);
    const plan = planQuantizedMatmulGgml({ input: x, weight, output: y, m, n, k, ggmlType: type, scratch }, { ...dev.limits, multiprocessors: splitSms }, dev);
    return {
      name: `${label} ${type} f32 m=${m} n=${n} k=${k} split ${sp?.splits ?? 1}${splitSms === dev.limits.multiprocessors ? '' : ` (as ${splitSms} SMs)`}`,
      flops: 2 * m * n * k,
      bytes: n * ggmlRowBytesOf(type, k) + 4 * (m * k + m * n),
      memoryBound: false,
      record: (e) => record(e, plan),
    };
  }
  return {
    name: `${label} ${type} f32 m=${m} n=${n} k=${k}`,
    flops: 2 * m * n * k,
    bytes: n * ggmlRowBytesOf(type, k) + 4 * (m * k + m * n),
    memoryBound: m <= 8,
    record: (e) => quantizedMatmulGgml(e, { input: x, weight, output: y, m, n, k, ggmlType: type }),
  };
}

/**
 * Ours dequantize-then-product. 'bf16': ggmlDequantize to bf16, then
 * denseMatmul on bf16 x (the peer's composition). 'f32 x': to f16 (the
 * weight type of the GGUF matrix form's tensor cores), then
 * denseMatmulTensor (hf2q_dense_mm_f16_f32_tensor: x rounded to f16 as it
 * is staged, f32 sums and output): what ts/models/blocks.ts linear runs from
 * DEQUANT_MIN_ROWS rows on CUDA, beside quantizedMatmulGgml's matrix
 * form on the same sizes.
 */
function ggmlDequantMatmul(label: string, type: GgmlQuantType, m: number, n: number, k: number, form: 'bf16' | 'f32 x'): Case {
  const f32x = form === 'f32 x';
  const x = random(f32x ? 'f32' : 'bf16', m * k);
  const weight = ggmlBlocksBuffer(dev, type, (n * k) / ggmlBlockOf(type).qk);
  const w = dev.alloc(f32x ? 'f16' : 'bf16', [n * k]);
  const y = dev.alloc(f32x ? 'f32' : 'bf16', [m * n]);
  return {
    name: `${label} ${type} ${f32x ? 'dequantize f16 + hf2q_dense_mm_f16_f32_tensor' : 'dequantize + dense_mm_bf16'} m=${m} n=${n} k=${k}`,
    flops: 2 * m * n * k,
    bytes: n * ggmlRowBytesOf(type, k) + (f32x ? 4 : 2) * (m * k + m * n),
    memoryBound: false,
    record: (e) => {
      ggmlDequantize(e, { src: weight, output: w, count: n * k, ggmlType: type });
      if (f32x) denseMatmulTensor(e, { src0: w, src1: x, dst: y, m, n, k, src0Batch: 1, src1Batch: 1 });
      else denseMatmul(e, { x, weight: w, output: y, m, n, k });
    },
  };
}

function ggmlCases(): Case[] {
  if (small) {
    return [ggml('decode', 'Q4_K', 1, 256, 256), ggml('decode', 'Q6_K', 8, 256, 512), ggml('decode', 'Q4_0', 1, 256, 256),
      ggml('prefill', 'Q8_0', 64, 128, 256), ggml('prefill', 'Q5_K', 64, 128, 256)];
  }
  const out: Case[] = [];
  // Qwen3.6 27B MLP up (5120 -> 17408) in every format; Q4_K_M's mix: Q4_K, with Q6_K on down projections.
  for (const t of GGML_QUANT_TYPES) out.push(ggml('Qwen3.6 up', t, 1, 17408, 5120));
  out.push(ggml('Qwen3.6 up', 'Q4_K', 8, 17408, 5120));
  for (const t of ['Q4_K', 'Q6_K'] as const) out.push(ggml('Qwen3.6 down', t, 1, 5120, 17408));
  // Gemma 4 31B MLP up (5376 -> 21504): 21 super-blocks a row, Q6_K rows 2-byte aligned.
  for (const t of ['Q4_K', 'Q6_K', 'Q8_0'] as const) out.push(ggml('Gemma 4 up', t, 1, 21504, 5376));
  for (const m of [512, 8192]) out.push(ggml('Qwen3.6 up', 'Q4_K', m, 17408, 5120));
  out.push(ggml('Qwen3.6 up', 'Q4_0', 512, 17408, 5120), ggml('Gemma 4 up', 'Q6_K', 8192, 21504, 5376));
  out.push(ggmlDequantMatmul('Qwen3.6 up', 'Q4_K', 8192, 17408, 5120, 'bf16'));
  // A short prompt's products (Qwen3.6-35B-A3B, hidden 2048; notes/prompt-splitk-2026-11-27.md): the gated delta
  // net's out_proj, q / k, v / z, a / b and the shared expert's down at 64 tokens, whole and with k split; the
  // out_proj split as a device of twice the SMs would (two blocks an SM); q / k at 1024 tokens.
  const sms = dev.limits.multiprocessors;
  if (sms > 0) {
    for (const [n, k] of [[2048, 4096], [2048, 2048], [4096, 2048], [32, 2048], [2048, 512]] as const) {
      out.push(ggml('35B-A3B prompt', 'Q4_K', 64, n, k), ggml('35B-A3B prompt', 'Q4_K', 64, n, k, sms));
    }
    out.push(ggml('35B-A3B prompt', 'Q4_K', 64, 2048, 4096, 2 * sms));
    out.push(ggml('35B-A3B prompt', 'Q4_K', 1024, 2048, 2048), ggml('35B-A3B prompt', 'Q4_K', 1024, 2048, 2048, sms));
  }
  // Long prompts' products as the matrix form and dequantized to f16 then dense (notes/ggml-dequant-2026-11-27.md).
  for (const m of [512, 8192]) out.push(ggmlDequantMatmul('Qwen3.6 up', 'Q4_K', m, 17408, 5120, 'f32 x'));
  for (const m of [64, 128, 256, 1024, 4096]) {
    for (const [n, k] of [[2048, 2048], [4096, 2048], [2048, 4096]] as const) {
      out.push(ggml('35B-A3B long', 'Q4_K', m, n, k), ggmlDequantMatmul('35B-A3B long', 'Q4_K', m, n, k, 'f32 x'));
      if (sms > 0) out.push(ggml('35B-A3B long', 'Q4_K', m, n, k, sms));
    }
  }
  return out;
}
// ---- end of quantized_matmul_ggml ----
// ---- moe: per-expert products (quantized_matmul_id, dense_matmul_id; floors and predictions: notes/moe-2026-11-26.md) ----


/** moeDispatchSort's result for ids, computed here and uploaded (the matrix rows time the products alone). */
function sorted(ids: number[], numExperts: number): { offsets: Buffer; order: Buffer } {
  const { offsets, order } = moeDispatchSortRef(ids, numExperts);
  return { offsets: dev.upload('u32', [offsets.length], offsets), order: dev.upload('u32', [order.length], order) };
}

/**
 * An expert layer's projection for m rows x topK slots of numExperts experts
 * ([E, n, k] weights; gate/up: two of them, y = act(x G^T) * x U^T), bf16
 * activations. weight: MLX's 4-bit affine format with groups of 64, or bf16.
 * Down projections take one row per pair (m = tokens x topK, one slot each,
 * the same experts). Bytes: the distinct experts' weights (scales and biases
 * too) read once, x read, y written; the vector form's floor.
 */
function moe(label: string, weight: 'q4' | 'bf16', form: 'vector' | 'matrix', gateUp: boolean, tokens: number, topK: number,
  numExperts: number, n: number, k: number, down = false): Case {
  const gs = 64, dt = 'bf16' as const;
  const pairIds = routing(tokens, numExperts, topK, 0x5eed + tokens * 31 + numExperts);
  const m = down ? tokens * topK : tokens;
  const U = down ? 1 : topK;
  const ids = dev.upload('u32', [m * U], pairIds);
  const distinct = new Set(pairIds).size;
  const mats = gateUp ? 2 : 1;
  const expertBytes = weight === 'q4' ? (n * k) / 2 + ((2 * n * k) / gs) * 2 : n * k * 2;
  const x = random(dt, m * k);
  const y = dev.alloc(dt, [m * U * n]);
  const sizes = { m, n, k, nExpertUsed: U, numExperts };
  const name = `${label} ${weight} ${form}${gateUp ? ' gate_up' : ''} pairs=${m * U} E=${numExperts} n=${n} k=${k}`;
  const flops = 2 * m * U * n * k * mats;
  const bytes = mats * distinct * expertBytes + (m * k + m * U * n) * 2;
  // Prefill rows read every expert's weight too: memory-bound where the weights outweigh the products at an H100's
  // 3.35 TB/s and 990 TFLOP/s (notes/moe-2026-11-26.md).
  const memoryBound = form === 'vector' || bytes / 3.35e3 > flops / 990e3;
  const routed = form === 'matrix' ? sorted(pairIds, numExperts) : null;
  if (weight === 'bf16') {
    const w = [random(dt, numExperts * n * k), gateUp ? random(dt, numExperts * n * k) : null];
    const record = (e: Encoder): void => {
      if (gateUp) {
        const a = { x, gateWeight: w[0]!, upWeight: w[1]!, output: y, ...sizes };
        if (routed) denseGateUpMmId(e, { ...a, ...routed });
        else denseGateUpMvId(e, { ...a, ids });
      } else if (routed) denseMmId(e, { x, weight: w[0]!, output: y, ...sizes, ...routed });
      else denseMvId(e, { x, weight: w[0]!, output: y, ids, ...sizes });
    };
    return { name, flops, bytes, memoryBound, record };
  }
  const set = (): { weight: Buffer; scales: Buffer; biases: Buffer } => ({
    weight: wordBuffer(dev, (numExperts * n * k) / 8),
    scales: uniformBuffer(dev, dt, [(numExperts * n * k) / gs], 0.02),
    biases: uniformBuffer(dev, dt, [(numExperts * n * k) / gs], 0.1),
  });
  const g = set();
  const u = gateUp ? set() : g;
  const q = { ...sizes, groupSize: gs, bits: 4 };
  const record = (e: Encoder): void => {
    if (gateUp) {
      const a = {
        x, gateWeight: g.weight, gateScales: g.scales, gateBiases: g.biases, upWeight: u.weight, upScales: u.scales, upBiases: u.biases,
        output: y, ...q,
      };
      if (routed) quantizedGateUpMmId(e, { ...a, ...routed });
      else quantizedGateUpMvId(e, { ...a, ids });
    } else if (routed) quantizedMmId(e, { x, ...g, output: y, ...q, ...routed });
    else quantizedMvId(e, { x, ...g, output: y, ids, ...q });
  };
  return { name, flops, bytes, memoryBound, record };
}

function moeCases(): Case[] {
  if (small) {
    return [moe('small', 'q4', 'vector', true, 2, 4, 16, 64, 128), moe('small', 'q4', 'matrix', false, 16, 4, 16, 64, 128),
      moe('small', 'bf16', 'vector', false, 2, 4, 16, 64, 128), moe('small', 'bf16', 'matrix', true, 16, 4, 16, 64, 128)];
  }
  const out: Case[] = [];
  // The issue's decode shape: 8 tokens x top-8 of 512 experts, hidden 2048, intermediate 512.
  for (const w of ['q4', 'bf16'] as const) {
    out.push(moe('8x top-8/512 gate_up', w, 'vector', true, 8, 8, 512, 512, 2048));
    out.push(moe('8x top-8/512 down', w, 'vector', false, 8, 8, 512, 2048, 512, true));
  }
  out.push(moe('8x top-8/512 gate', 'q4', 'vector', false, 8, 8, 512, 512, 2048));
  // Qwen3.6-35B-A3B: 256 experts, top-8, hidden 2048, moe_intermediate 512. Decode (1 token), a 512-token prefill.
  out.push(moe('Qwen3.6 35B-A3B decode gate_up', 'q4', 'vector', true, 1, 8, 256, 512, 2048));
  out.push(moe('Qwen3.6 35B-A3B decode down', 'q4', 'vector', false, 1, 8, 256, 2048, 512, true));
  for (const w of ['q4', 'bf16'] as const) {
    out.push(moe('Qwen3.6 35B-A3B prefill 512 gate_up', w, 'matrix', true, 512, 8, 256, 512, 2048));
    out.push(moe('Qwen3.6 35B-A3B prefill 512 down', w, 'matrix', false, 512, 8, 256, 2048, 512, true));
  }
  out.push(moe('Qwen3.6 35B-A3B prefill 4096 gate_up', 'q4', 'matrix', true, 4096, 8, 256, 512, 2048));
  // bf16 experts at 4096 tokens (128 pairs an expert): what a long prompt's GGUF experts would run dequantized.
  out.push(moe('Qwen3.6 35B-A3B prefill 4096 gate_up', 'bf16', 'matrix', true, 4096, 8, 256, 512, 2048));
  out.push(moe('Qwen3.6 35B-A3B prefill 4096 down', 'bf16', 'matrix', false, 4096, 8, 256, 2048, 512, true));
  // Gemma 4 26B-A4B: 128 experts, top-8, hidden 2816, moe_intermediate 704, GELU gate (the same kernels).
  out.push(moe('Gemma 4 26B-A4B decode gate_up', 'q4', 'vector', true, 1, 8, 128, 704, 2816));
  out.push(moe('Gemma 4 26B-A4B prefill 512 gate_up', 'q4', 'matrix', true, 512, 8, 128, 704, 2816));
  return out;
}
// ---- end of moe ----

// ---- moe, GGUF blocks: per-expert products of quantized_matmul_id_ggml (floors and predictions: notes/moe-ggml-2026-11-26.md) ----

/**
 * One expert projection for tokens x topK pairs of numExperts experts with
 * [E, n, k] GGUF weights (random blocks, small scales), f32 x and y:
 * quantizedMatmulIdGgml (vector) or quantizedMatmulIdGgmlMm over the
 * pairs grouped by expert (grouped here, as the affine rows). A down
 * projection takes one row per pair (tokens x topK rows, one slot each, the
 * same experts). Bytes, the vector form's floor: the distinct experts'
 * blocks read once (n rows of k / 256 x 144 bytes for Q4_K), x read, y
 * written. At the issue's decode shape (8 tokens x top-8 of 512 experts,
 * Qwen3.6-35B-A3B's hidden 2048 and expert intermediate 512) the routing
 * below picks 61 distinct experts: 61 x 512 rows x 8 super-blocks x 144
 * bytes = 35.98 MB of blocks for the gate (or up) projection, the same for
 * the down one (2048 rows of 2 super-blocks); with x and y, 36.18 and 36.63
 * MB: floors of 10.8 and 10.9 us at an H100's 3.35 TB/s. The matrix form as
 * the op plans it ('matrix': on CUDA the few-pairs form where the pairs
 * average at most ggmlIdMmFewAverage(k) an expert), always the 64-row
 * tiles ('matrix 64': planned as for a device without CUDA's engines,
 * launched as CUDA's), or always the few-pairs form ('matrix few': that
 * plan's dispatch given the few-pairs entry and launch, to place the
 * threshold), or always the many-pairs form ('matrix wg': the same with the
 * wgmma entry and launch; compute capability 9.0 only).
 */
function moeGgml(label: string, type: GgmlQuantType, form: 'vector' | 'matrix' | 'matrix 64' | 'matrix few' | 'matrix wg', tokens: number, topK: number,
  numExperts: number, n: number, k: number, down = false): Case {
  const pairIds = routing(tokens, numExperts, topK, 0x5eed + tokens * 31 + numExperts);
  const nTokens = down ? tokens * topK : tokens;
  const U = down ? 1 : topK;
  const ids = dev.upload('u32', [nTokens * U], pairIds);
  const distinct = new Set(pairIds).size;
  const expertBytes = n * ggmlRowBytesOf(type, k);
  const x = random('f32', nTokens * k);
  const weight = ggmlBlocksBuffer(dev, type, (numExperts * n * k) / ggmlBlockOf(type).qk);
  const y = dev.alloc('f32', [nTokens * U * n]);
  const sizes = { nTokens, topK: U, n, k, nExperts: numExperts, ggmlType: type };
  const flops = 2 * nTokens * U * n * k;
  const bytes = distinct * expertBytes + 4 * (nTokens * k + nTokens * U * n);
  const routed = form !== 'vector' ? sorted(pairIds, numExperts) : null;
  const limits = form === 'matrix' ? dev.limits : { ...dev.limits, computeCapability: 0 };
  const plan = (): OpPlan => {
    const p = planQuantizedMatmulIdGgmlMm({ input: x, weight, output: y, ...sizes, ...routed! }, limits, dev);
    const d = p.dispatches[0]!;
    if (form === 'matrix few') return { ...p, dispatches: [{ ...d, kernel: `${d.kernel}_few`, cuda: ggmlIdMmFewCudaLaunch(type, nTokens * U, n, numExperts) }] };
    if (form === 'matrix wg') return { ...p, dispatches: [{ ...d, kernel: `${d.kernel}_wg`, cuda: ggmlIdMmWgCudaLaunch(type, nTokens * U, n, numExperts) }] };
    return p;
  };
  return {
    name: `${label} ${type} ${form} pairs=${nTokens * U} E=${numExperts} distinct=${distinct} n=${n} k=${k}`,
    flops, bytes,
    memoryBound: form === 'vector' || bytes / 3.35e3 > flops / 990e3,
    record: (e) => {
      if (routed) record(e, plan());
      else quantizedMatmulIdGgml(e, { input: x, weight, output: y, ids, ...sizes });
    },
  };
}

/**
 * The gate/up projection of tokens x topK pairs in the vector form, f32 x:
 * fused, one quantizedMatmulIdGgmlGateUp (silu); or unfused, what it
 * replaces: two quantizedMatmulIdGgml products (gate, up) and silu_mul,
 * timed as one record of three dispatches. matrix: the same in the matrix
 * form over the pairs grouped by expert (quantizedMatmulIdGgmlMmGateUp, or
 * two quantizedMatmulIdGgmlMm and silu_mul; notes/ggml-gate-up-mm-2026-11-29.md).
 * Bytes (both rows): the fused floor, the distinct experts' gate and up
 * blocks read once, x read, y written (notes/ggml-gate-up-2026-11-26.md).
 */
function moeGgmlGateUp(label: string, type: GgmlQuantType, fused: boolean, tokens: number, topK: number, numExperts: number, n: number,
  k: number, matrix = false): Case {
  const pairIds = routing(tokens, numExperts, topK, 0x5eed + tokens * 31 + numExperts);
  const pairs = tokens * topK;
  const ids = dev.upload('u32', [pairs], pairIds);
  const route = matrix ? sorted(pairIds, numExperts) : { ids };
  const distinct = new Set(pairIds).size;
  const x = random('f32', tokens * k);
  const gateWeight = ggmlBlocksBuffer(dev, type, (numExperts * n * k) / ggmlBlockOf(type).qk);
  const upWeight = ggmlBlocksBuffer(dev, type, (numExperts * n * k) / ggmlBlockOf(type).qk);
  const y = dev.alloc('f32', [pairs * n]);
  const gate = dev.alloc('f32', [pairs * n]);
  const up = dev.alloc('f32', [pairs * n]);
  const sizes = { nTokens: tokens, topK, n, k, nExperts: numExperts, ggmlType: type };
  return {
    name: `${label} ${type} ${matrix ? 'matrix ' : ''}${fused ? 'fused' : 'unfused (gate, up, silu_mul)'} pairs=${pairs} E=${numExperts} distinct=${distinct} n=${n} k=${k}`,
    flops: 2 * 2 * pairs * n * k,
    bytes: 2 * distinct * n * ggmlRowBytesOf(type, k) + 4 * (tokens * k + pairs * n),
    memoryBound: !matrix,
    record: (e) => {
      if (fused && 'offsets' in route) {
        quantizedMatmulIdGgmlMmGateUp(e, { input: x, gateWeight, upWeight, output: y, ...route, ...sizes });
      } else if (fused) {
        quantizedMatmulIdGgmlGateUp(e, { input: x, gateWeight, upWeight, output: y, ids, ...sizes });
      } else {
        const product = (weight: Buffer, output: Buffer) => ('offsets' in route
          ? quantizedMatmulIdGgmlMm(e, { input: x, weight, output, ...route, ...sizes })
          : quantizedMatmulIdGgml(e, { input: x, weight, output, ids, ...sizes }));
        product(gateWeight, gate);
        product(upWeight, up);
        siluMul(e, { gate, up, output: y });
      }
    },
  };
}

/**
 * The down projection of tokens x topK pairs with the SwiGLU before it, Q4_0
 * experts [E, n, k] (k the expert intermediate), f32 gate and up rows a
 * pair: fused, mlx-native's quantizedMatmulIdSwigluQ4_0 (one dispatch); or
 * unfused, what it replaces: silu_mul then quantizedMatmulIdGgml over the
 * pairs (two). Bytes (both rows): the fused floor, the distinct experts'
 * blocks read once, gate and up read, y written.
 */
function moeGgmlSwiglu(label: string, fused: boolean, tokens: number, topK: number, numExperts: number, n: number, k: number): Case {
  const pairIds = routing(tokens, numExperts, topK, 0x5eed + tokens * 31 + numExperts);
  const pairs = tokens * topK;
  const ids = dev.upload('u32', [pairs], pairIds);
  const distinct = new Set(pairIds).size;
  const gate = random('f32', pairs * k);
  const up = random('f32', pairs * k);
  const h = dev.alloc('f32', [pairs * k]);
  const weight = ggmlBlocksBuffer(dev, 'Q4_0', (numExperts * n * k) / ggmlBlockOf('Q4_0').qk);
  const y = dev.alloc('f32', [pairs * n]);
  const sizes = { nTokens: pairs, topK: 1, n, k, nExperts: numExperts, ggmlType: 'Q4_0' as const };
  return {
    name: `${label} Q4_0 ${fused ? 'fused (swiglu)' : 'unfused (silu_mul, down)'} pairs=${pairs} E=${numExperts} distinct=${distinct} n=${n} k=${k}`,
    flops: 2 * pairs * n * k,
    bytes: distinct * n * ggmlRowBytesOf('Q4_0', k) + 4 * (2 * pairs * k + pairs * n),
    memoryBound: true,
    record: (e) => {
      if (fused) {
        quantizedMatmulIdSwigluQ4_0(e, { gate, up, weight, ids, output: y, ...sizes });
      } else {
        siluMul(e, { gate, up, output: h });
        quantizedMatmulIdGgml(e, { input: h, weight, output: y, ids, ...sizes });
      }
    },
  };
}

function moeGgmlCases(): Case[] {
  if (small) {
    return [moeGgml('small', 'Q4_K', 'vector', 2, 4, 16, 64, 256), moeGgml('small', 'Q4_0', 'matrix', 16, 4, 16, 64, 128),
      moeGgmlGateUp('small GGUF gate_up', 'Q4_K', true, 1, 4, 16, 64, 256), moeGgmlGateUp('small GGUF gate_up', 'Q4_K', false, 1, 4, 16, 64, 256),
      moeGgmlGateUp('small GGUF gate_up', 'Q4_K', true, 16, 4, 16, 64, 256, true), moeGgmlGateUp('small GGUF gate_up', 'Q4_K', false, 16, 4, 16, 64, 256, true),
      moeGgmlSwiglu('small GGUF down', true, 1, 4, 16, 256, 64), moeGgmlSwiglu('small GGUF down', false, 1, 4, 16, 256, 64)];
  }
  return [
    // The issue's decode shape: 8 tokens x top-8 of 512 experts, hidden 2048, intermediate 512 (gate or up; down).
    moeGgml('8x top-8/512 gate', 'Q4_K', 'vector', 8, 8, 512, 512, 2048),
    moeGgml('8x top-8/512 down', 'Q4_K', 'vector', 8, 8, 512, 2048, 512, true),
    // Qwen3.6-35B-A3B: 256 experts; decode (1 token) and a 512-token prefill.
    moeGgml('Qwen3.6 35B-A3B decode gate', 'Q4_K', 'vector', 1, 8, 256, 512, 2048),
    // Its gate/up projection fused (one dispatch) beside the unfused pair and silu_mul (three).
    moeGgmlGateUp('Qwen3.6 35B-A3B decode GGUF gate_up', 'Q4_K', true, 1, 8, 256, 512, 2048),
    moeGgmlGateUp('Qwen3.6 35B-A3B decode GGUF gate_up', 'Q4_K', false, 1, 8, 256, 512, 2048),
    // Prompts: the gate/up matrix form against the two matrix products and silu_mul (64 tokens: the few-pairs form;
    // 512 and 4096: on Hopper the wgmma tiles).
    ...[64, 512, 4096].flatMap((t) => [true, false].map((f) => moeGgmlGateUp('Qwen3.6 35B-A3B prefill GGUF gate_up', 'Q4_K', f, t, 8, 256, 512, 2048, true))),
    // Its down projection with the SwiGLU fused (mlx-native's Q4_0 kernel) beside silu_mul and the plain product.
    moeGgmlSwiglu('Qwen3.6 35B-A3B decode GGUF down', true, 1, 8, 256, 2048, 512),
    moeGgmlSwiglu('Qwen3.6 35B-A3B decode GGUF down', false, 1, 8, 256, 2048, 512),
    // A 64-token prompt's expert products (about 2 rows an expert): the gate and up rows as one [1024, 2048], and down;
    // the gate at 128, 256 and 512 tokens (4, 8 and 16 pairs an expert), each as planned and in 64-row tiles.
    ...(['matrix', 'matrix 64'] as const).flatMap((form) => [
      moeGgml('Qwen3.6 35B-A3B prefill 64 gate_up', 'Q4_K', form, 64, 8, 256, 1024, 2048),
      moeGgml('Qwen3.6 35B-A3B prefill 64 down', 'Q4_K', form, 64, 8, 256, 2048, 512, true),
      moeGgml('Qwen3.6 35B-A3B prefill 128 gate', 'Q4_K', form, 128, 8, 256, 512, 2048),
      moeGgml('Qwen3.6 35B-A3B prefill 256 gate', 'Q4_K', form, 256, 8, 256, 512, 2048),
      moeGgml('Qwen3.6 35B-A3B prefill 256 down', 'Q4_K', form, 256, 8, 256, 2048, 512, true),
      moeGgml('Qwen3.6 35B-A3B prefill 512 gate', 'Q4_K', form, 512, 8, 256, 512, 2048),
      moeGgml('Qwen3.6 35B-A3B prefill 512 down', 'Q4_K', form, 512, 8, 256, 2048, 512, true),
      // Gemma 4 26B-A4B at 64 tokens: 128 experts (4 pairs an expert), its Q8_0 down (k 704).
      moeGgml('Gemma 4 26B-A4B prefill 64 gate', 'Q4_K', form, 64, 8, 128, 704, 2816),
      moeGgml('Gemma 4 26B-A4B prefill 64 down', 'Q8_0', form, 64, 8, 128, 2816, 704, true),
    ]),
    // Where the few-pairs form stops paying: 16 and 32 pairs an expert (512 and 1024 tokens), forced, beside the tiles.
    ...(['matrix few', 'matrix 64'] as const).flatMap((form) => [
      moeGgml('Qwen3.6 35B-A3B prefill 512 gate', 'Q4_K', form, 512, 8, 256, 512, 2048),
      moeGgml('Qwen3.6 35B-A3B prefill 512 down', 'Q4_K', form, 512, 8, 256, 2048, 512, true),
      moeGgml('Qwen3.6 35B-A3B prefill 1024 gate', 'Q4_K', form, 1024, 8, 256, 512, 2048),
      moeGgml('Qwen3.6 35B-A3B prefill 1024 down', 'Q4_K', form, 1024, 8, 256, 2048, 512, true),
    ]),
    // Where the many-pairs form (wgmma, 128 pairs a tile) starts paying, and long prompts: 8 to 128 pairs an expert
    // (256 to 4096 tokens over Qwen3.6's 256 experts; Gemma 4's 128 at 4096 tokens, 256 an expert), forced, beside
    // the 64-row tiles.
    ...(['matrix wg', 'matrix 64'] as const).flatMap((form) => [
      ...[256, 512, 1024, 2048, 4096].flatMap((t) => [
        moeGgml(`Qwen3.6 35B-A3B prefill ${t} gate`, 'Q4_K', form, t, 8, 256, 512, 2048),
        moeGgml(`Qwen3.6 35B-A3B prefill ${t} down`, 'Q4_K', form, t, 8, 256, 2048, 512, true),
      ]),
      moeGgml('Gemma 4 26B-A4B prefill 4096 gate', 'Q4_K', form, 4096, 8, 128, 704, 2816),
      moeGgml('Gemma 4 26B-A4B prefill 4096 down', 'Q8_0', form, 4096, 8, 128, 2816, 704, true),
    ]),
    // A long prompt's as the op plans it.
    moeGgml('Qwen3.6 35B-A3B prefill 4096 gate', 'Q4_K', 'matrix', 4096, 8, 256, 512, 2048),
    moeGgml('Qwen3.6 35B-A3B prefill 4096 down', 'Q4_K', 'matrix', 4096, 8, 256, 2048, 512, true),
  ];
}
// ---- end of moe, GGUF blocks ----

const time = (c: Case, iters: number): number => gpuTimePerDispatch(dev, c.record, iters);

console.log(`device: ${dev.name} (${dev.backend})${peakTflops ? `, peak ${peakTflops} TFLOP/s` : ''}${copyGbs ? `, copy ${copyGbs} GB/s` : ''}`);
for (const c of cases().filter((x) => only.length === 0 || only.some((t) => x.name.includes(t)))) {
  const probe = time(c, 1);
  const iters = Math.max(1, Math.min(200, Math.round(2e8 / Math.max(probe, 1))));
  const ts = Array.from({ length: 5 }, () => time(c, iters)).sort((a, b) => a - b);
  const ns = ts[2]!;
  const floorNs = c.memoryBound ? (copyGbs ? c.bytes / copyGbs : null) : peakTflops ? c.flops / (peakTflops * 1e3) : null;
  const floor = floorNs === null ? '' : `  floor ${(floorNs / 1000).toFixed(2).padStart(9)} us (${((100 * floorNs) / ns).toFixed(0)}% of it)`;
  console.log(`${c.name.padEnd(64)} ${(ns / 1000).toFixed(2).padStart(10)} us  ${(c.flops / ns / 1e3).toFixed(1).padStart(7)} TFLOP/s  ` +
    `${(c.bytes / ns).toFixed(0).padStart(5)} GB/s${floor}`);
}
dev.close();
