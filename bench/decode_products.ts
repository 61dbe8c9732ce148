// The decode products of a model where they run: behind a small kernel, with
// their weights out of L2. A decode step reads each layer's weights once,
// long after the step before read them (a Qwen3.6-35B-A3B step reads 1.7
// GB, the H100's L2 holds 50 MB), and most products follow a one-block glue
// kernel (a norm, the routing, an activation). bench/qmv_variants.ts times a
// product back to back with itself over one weight, which stays in L2 when
// it is smaller than L2: not the model's case.
//
// Each case records, in one replayable encoder, L pairs [glue, product],
// every product over weights of its own (L sets, together past twice the
// L2), and times the replays: device time a pair. Beside it, the same L
// products back to back without the glue and the L glue kernels alone, so
// that a pair's time reads against its parts: where the product's blocks
// ask L2 for their weights while the glue runs (common.cuh
// MLXN_PREFETCH_ENTRY), a pair takes less than glue + product.
//
//   MLX_NATIVE_BACKEND=cuda bun run bench/decode_products.ts [--only TEXT]... [--l2-mb 50]
//
// The last column is a product's rate alone over the copy rate measured in
// the same run (scalar_mul f32 over 256 MiB, bytes read + written): issue
// 14's decode goal is 0.85 of it. bench/decode_peers.py times PyTorch's
// F.linear (cuBLAS, eager and compiled) at the dense rows the same way.
//
// Shapes: Qwen3.6-35B-A3B's decode (hidden 2048, MLX affine 4-bit groups of
// 64 with bf16 scales and biases, as bench/models.ts builds it; the router
// bf16), and Gemma 4 26B-A4B's (hidden 2816; the router f32, [128, 2816],
// as its loader folds it); f32 activations as the models keep them. The
// per-expert rows route each pair's token to 8 random experts of 256 (Gemma
// 4: of 128), new ones a pair (the ids uploaded before the commit). Glue:
// rms_norm f32 over the product's input row (what precedes an in_proj; the
// other products' glue kernels are one-block kernels of the same size).
// The `gguf` rows: GGUF blocks at the same shapes (quantized_matmul_ggml,
// quantized_matmul_id_ggml; random blocks with scales 0.01, common.ts).

import { Device, type Buffer, type Encoder } from '../ts/index.ts';
import { ggmlBlocksBuffer, routing, uniformBuffer, wordBuffer } from './common.ts';
import { rmsNorm } from '../ts/ops/rms_norm.ts';
import { denseGemvBf16F32, denseMatmul } from '../ts/ops/dense.ts';
import { quantizedMatmulSimd } from '../ts/ops/quantized_matmul.ts';
import { quantizedGateUpMvId, quantizedMvId } from '../ts/ops/quantized_matmul_id.ts';
import { ggmlBlockOf, ggmlRowBytesOf, quantizedMatmulGgml, type GgmlQuantType } from '../ts/ops/quantized_matmul_ggml.ts';
import { scalarMul } from '../ts/ops/elementwise.ts';
import { quantizedMatmulIdGgml, quantizedMatmulIdGgmlGateUp } from '../ts/ops/quantized_matmul_id_ggml.ts';

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
};
// --only (repeatable): the cases whose label holds one of the texts.
const only = process.argv.flatMap((a, i) => (a === '--only' && i + 1 < process.argv.length ? [process.argv[i + 1]!] : []));
const L2_BYTES = Number(arg('--l2-mb') ?? 50) * 1e6;

const dev = Device.open();
const GS = 64;

interface Case {
  name: string;
  /** Bytes a product reads from memory: its weights (codes, scales, biases), x and y. */
  bytes: number;
  /** Input width (the glue's row). */
  k: number;
  /** Records product i (0 <= i < sets) reading x. */
  product: (enc: Encoder, i: number, x: Buffer) => void;
  /** Distinct weight sets. */
  sets: number;
  release: () => void;
}

/** Sets enough to pass twice the L2 (at least 4), capped at 64. */
const setsFor = (bytes: number): number => Math.min(64, Math.max(4, Math.ceil((2 * L2_BYTES) / bytes)));

function affine(name: string, n: number, k: number): Case {
  const wBytes = (n * k) / 2, sBytes = ((n * k) / GS) * 2;
  const bytes = wBytes + 2 * sBytes + 4 * (k + n);
  const sets = setsFor(bytes);
  const ws = Array.from({ length: sets }, () => ({
    weight: wordBuffer(dev, (n * k) / 8),
    scales: uniformBuffer(dev, 'bf16', [(n * k) / GS], 0.02),
    biases: uniformBuffer(dev, 'bf16', [(n * k) / GS], 0.1),
  }));
  const y = dev.alloc('f32', [1, n]);
  return {
    name: `${name} q4 g64 [${n}, ${k}]`, bytes, k, sets,
    product: (enc, i, x) => quantizedMatmulSimd(enc, { input: x, ...ws[i]!, output: y, m: 1, n, k, groupSize: GS, bits: 4 }),
    release: () => {
      for (const w of ws) for (const b of Object.values(w)) b.release();
      y.release();
    },
  };
}

/** A dense router as the models call it (blocks.ts linear): bf16 through hf2q_dense_gemv_bf16_f32_4, f32 through dense_mv_f32. */
function dense(name: string, dtype: 'bf16' | 'f32', n: number, k: number): Case {
  const bytes = n * k * (dtype === 'f32' ? 4 : 2) + 4 * (k + n);
  const sets = setsFor(bytes);
  const ws = Array.from({ length: sets }, () => uniformBuffer(dev, dtype, [n, k], 0.05));
  const y = dev.alloc('f32', [1, n]);
  return {
    name: `${name} ${dtype} [${n}, ${k}]`, bytes, k, sets,
    product: (enc, i, x) => dtype === 'f32'
      ? denseMatmul(enc, { x, weight: ws[i]!, output: y, m: 1, n, k })
      : denseGemvBf16F32(enc, { src0: ws[i]!, src1: x, dst: y, m: 1, n, k, src0Batch: 1, src1Batch: 1 }),
    release: () => {
      for (const w of ws) w.release();
      y.release();
    },
  };
}

/** 8 of E experts, q4 g64 bf16; gate/up (n the intermediate, k hidden) or down (pairs as rows, k the intermediate). */
function experts(name: string, gateUp: boolean, E: number, n: number, k: number): Case {
  const topK = 8, mats = gateUp ? 2 : 1;
  const perExpert = (n * k) / 2 + 2 * ((n * k) / GS) * 2;
  const stacked = () => ({
    weight: wordBuffer(dev, (E * n * k) / 8),
    scales: uniformBuffer(dev, 'bf16', [(E * n * k) / GS], 0.02),
    biases: uniformBuffer(dev, 'bf16', [(E * n * k) / GS], 0.1),
  });
  const g = stacked(), u = gateUp ? stacked() : null;
  const bytes = mats * topK * perExpert + (gateUp ? 4 * k : 2 * topK * k) + 2 * topK * n;
  // Routings of their own: the products' experts rarely repeat across a replay (8 of 256 a pair).
  const sets = 32;
  const ids = Array.from({ length: sets }, (_, i) => dev.upload('u32', [gateUp ? 1 : topK, gateUp ? topK : 1], routing(1, E, topK, 0x51ed + 97 * i)));
  const y = dev.alloc('bf16', [topK * n]);
  const xDown = uniformBuffer(dev, 'bf16', [topK, k], 0.5);
  const common = { m: gateUp ? 1 : topK, n, k, numExperts: E, expertRows: n, groupSize: GS, bits: 4 };
  return {
    name: `${name} q4 g64 8 of ${E} [${n}, ${k}]`, bytes, k, sets,
    product: (enc, i, x) => {
      if (u !== null) {
        quantizedGateUpMvId(enc, {
          ...common, x, nExpertUsed: topK, activation: 'silu', output: y, ids: ids[i]!,
          gateWeight: g.weight, gateScales: g.scales, gateBiases: g.biases, upWeight: u.weight, upScales: u.scales, upBiases: u.biases,
        });
      } else {
        quantizedMvId(enc, { ...common, x: xDown, nExpertUsed: 1, output: y, ids: ids[i]!, ...g });
      }
    },
    release: () => {
      for (const b of [...Object.values(g), ...(u ? Object.values(u) : []), ...ids, y, xDown]) b.release();
    },
  };
}

/** A GGUF product at one token (quantized_matmul_ggml's vector form): n rows of k values in blocks of `type`. */
function ggml(name: string, type: GgmlQuantType, n: number, k: number): Case {
  const bytes = n * ggmlRowBytesOf(type, k) + 4 * (k + n);
  const sets = setsFor(bytes);
  const ws = Array.from({ length: sets }, () => ggmlBlocksBuffer(dev, type, (n * k) / ggmlBlockOf(type).qk));
  const y = dev.alloc('f32', [1, n]);
  return {
    name: `${name} ${type} [${n}, ${k}]`, bytes, k, sets,
    product: (enc, i, x) => quantizedMatmulGgml(enc, { input: x, weight: ws[i]!, output: y, m: 1, n, k, ggmlType: type }),
    release: () => {
      for (const w of ws) w.release();
      y.release();
    },
  };
}

/** 8 of E experts in GGUF blocks: gate/up (n the intermediate, k hidden; silu) or down (8 pairs as rows, k the intermediate). */
function ggmlExperts(name: string, type: GgmlQuantType, gateUp: boolean, E: number, n: number, k: number): Case {
  const topK = 8, mats = gateUp ? 2 : 1;
  const perExpert = n * ggmlRowBytesOf(type, k);
  const stacked = () => ggmlBlocksBuffer(dev, type, (E * n * k) / ggmlBlockOf(type).qk);
  const g = stacked(), u = gateUp ? stacked() : null;
  const bytes = mats * topK * perExpert + (gateUp ? 4 * k : 4 * topK * k) + 4 * topK * n;
  const sets = 32;
  const ids = Array.from({ length: sets }, (_, i) => dev.upload('u32', [gateUp ? 1 : topK, gateUp ? topK : 1], routing(1, E, topK, 0x51ed + 97 * i)));
  const y = dev.alloc('f32', [topK * n]);
  const xDown = uniformBuffer(dev, 'f32', [topK, k], 0.5);
  const sizes = { nTokens: gateUp ? 1 : topK, topK: gateUp ? topK : 1, n, k, nExperts: E, ggmlType: type };
  return {
    name: `${name} ${type} 8 of ${E} [${n}, ${k}]`, bytes, k, sets,
    product: (enc, i, x) => {
      if (u !== null) {
        quantizedMatmulIdGgmlGateUp(enc, { ...sizes, input: x, gateWeight: g, upWeight: u, ids: ids[i]!, output: y, activation: 'silu' });
      } else {
        quantizedMatmulIdGgml(enc, { ...sizes, input: xDown, weight: g, ids: ids[i]!, output: y });
      }
    },
    release: () => {
      for (const b of [g, ...(u ? [u] : []), ...ids, y, xDown]) b.release();
    },
  };
}

const makers: [string, () => Case][] = [
  ['gdn in_proj', () => affine('gdn in_proj', 12352, 2048)],
  ['gdn out_proj', () => affine('gdn out_proj', 2048, 4096)],
  ['shared gate_up', () => affine('shared gate_up', 1024, 2048)],
  ['shared down', () => affine('shared down', 2048, 512)],
  ['router', () => dense('router', 'bf16', 257, 2048)],
  ['gemma4 router', () => dense('gemma4 router', 'f32', 128, 2816)],
  ['experts gate_up', () => experts('experts gate_up', true, 256, 512, 2048)],
  ['experts down', () => experts('experts down', false, 256, 2048, 512)],
  // Gemma 4 26B-A4B (hidden 2816): a sliding layer's q and o projections and its keys (values alike), the dense
  // MLP's gate/up (stacked) and down, the routed experts (8 of 128, intermediate 704).
  ['gemma4 q_proj', () => affine('gemma4 q_proj', 4096, 2816)],
  ['gemma4 k_proj', () => affine('gemma4 k_proj', 2048, 2816)],
  ['gemma4 o_proj', () => affine('gemma4 o_proj', 2816, 4096)],
  ['gemma4 mlp gate_up', () => affine('gemma4 mlp gate_up', 4224, 2816)],
  ['gemma4 mlp down', () => affine('gemma4 mlp down', 2816, 2112)],
  ['gemma4 experts gate_up', () => experts('gemma4 experts gate_up', true, 128, 704, 2816)],
  ['gemma4 experts down', () => experts('gemma4 experts down', false, 128, 2816, 704)],
  // GGUF at one token, as bench/models.ts builds a Q4_K model (Q8_0 where rows are not multiples of 256: Gemma 4's
  // dense MLP down, k 2112, and its experts' down, k 704), and Q8_0 at Qwen3.6-35B-A3B's in_proj and experts.
  ['gguf gemma4 o_proj', () => ggml('gguf gemma4 o_proj', 'Q4_K', 2816, 4096)],
  ['gguf gemma4 mlp down', () => ggml('gguf gemma4 mlp down', 'Q8_0', 2816, 2112)],
  ['gguf gemma4 experts gate_up', () => ggmlExperts('gguf gemma4 experts gate_up', 'Q4_K', true, 128, 704, 2816)],
  ['gguf gemma4 experts down', () => ggmlExperts('gguf gemma4 experts down', 'Q8_0', false, 128, 2816, 704)],
  ['gguf q8_0 gdn in_proj', () => ggml('gguf q8_0 gdn in_proj', 'Q8_0', 12352, 2048)],
  ['gguf q8_0 experts gate_up', () => ggmlExperts('gguf q8_0 experts gate_up', 'Q8_0', true, 256, 512, 2048)],
  ['gguf q8_0 experts down', () => ggmlExperts('gguf q8_0 experts down', 'Q8_0', false, 256, 2048, 512)],
  ['gguf q8_0 lm_head', () => ggml('gguf q8_0 lm_head', 'Q8_0', 262144, 2816)],
  // Q8_0 at Qwen3.6-35B-A3B's smaller one-token products: attention's out_proj, the shared expert's gate/up and down.
  ['gguf q8_0 out_proj', () => ggml('gguf q8_0 out_proj', 'Q8_0', 2048, 4096)],
  ['gguf q8_0 shared gate_up', () => ggml('gguf q8_0 shared gate_up', 'Q8_0', 1024, 2048)],
  ['gguf q8_0 shared down', () => ggml('gguf q8_0 shared down', 'Q8_0', 2048, 512)],
  // Q6_K where a Q4_K_M file holds it (llama.cpp's mix: about half the layers' down projections, experts' too, and
  // the output): Qwen3.6-35B-A3B's experts' down and out_proj, Gemma 4's output over its 262144-token vocabulary.
  ['gguf q6_k experts down', () => ggmlExperts('gguf q6_k experts down', 'Q6_K', false, 256, 2048, 512)],
  ['gguf q6_k out_proj', () => ggml('gguf q6_k out_proj', 'Q6_K', 2048, 4096)],
  ['gguf q6_k lm_head', () => ggml('gguf q6_k lm_head', 'Q6_K', 262144, 2816)],
  // Issue 14's decode table (bench/matmul.ts's m=1 rows: Qwen3.6 27B's MLP, Gemma 4 31B's up projection), here with
  // their weights out of L2 (the H200's 60 MB holds most of a 50 MB weight that matmul.ts reads again and again).
  ['Qwen3.6 up', () => affine('Qwen3.6 up', 17408, 5120)],
  ['Qwen3.6 down', () => affine('Qwen3.6 down', 5120, 17408)],
  ['Gemma 4 up', () => affine('Gemma 4 up', 21504, 5376)],
  ['gguf Qwen3.6 up', () => ggml('gguf Qwen3.6 up', 'Q4_K', 17408, 5120)],
  ['gguf Qwen3.6 down', () => ggml('gguf Qwen3.6 down', 'Q4_K', 5120, 17408)],
  ['gguf Gemma 4 up', () => ggml('gguf Gemma 4 up', 'Q4_K', 21504, 5376)],
  ['bf16 Qwen3.6 up', () => dense('bf16 Qwen3.6 up', 'bf16', 17408, 5120)],
  ['bf16 Qwen3.6 down', () => dense('bf16 Qwen3.6 down', 'bf16', 5120, 17408)],
  ['bf16 Gemma 4 up', () => dense('bf16 Gemma 4 up', 'bf16', 21504, 5376)],
];

/** Device time of one replay of `record`, over `per` units: median of 7 replays after one. */
function replayed(record: (enc: Encoder) => void, per: number): number {
  const enc = dev.encoder({ replayable: true });
  record(enc);
  enc.commitAndWait();
  const ts: number[] = [];
  for (let r = 0; r < 8; r++) {
    enc.replayAndWait();
    if (r > 0) ts.push(enc.gpuTimeNs / per);
  }
  enc.release();
  return ts.sort((a, b) => a - b)[3]!;
}

const COPY_N = 64 * 1024 * 1024; // 256 MiB of f32
const copyIn = uniformBuffer(dev, 'f32', [COPY_N], 1);
const copyOut = dev.alloc('f32', [COPY_N]);
const copyGbs = (8 * COPY_N) / replayed((enc) => scalarMul(enc, { input: copyIn, output: copyOut, scalar: 1 }), 1);
copyIn.release();
copyOut.release();
console.log(`device: ${dev.name} (${dev.backend}); weights out of L2: sets past 2 x ${L2_BYTES / 1e6} MB; copy (scalar_mul f32, 256 MiB, ` +
  `read + write) ${copyGbs.toFixed(0)} GB/s`);
console.log('case | sets | glue + product, a pair | product alone | glue alone | pair - (product + glue) | product alone GB/s | of copy');
for (const [label, make] of makers) {
  if (only.length > 0 && !only.some((o) => label.includes(o))) continue;
  const c = make();
  const x = uniformBuffer(dev, 'f32', [1, c.k], 1);
  const xn = dev.alloc('f32', [1, c.k]);
  const norm = uniformBuffer(dev, 'f32', [c.k], 1);
  const glue = (enc: Encoder) => rmsNorm(enc, { input: x, weight: norm, output: xn, rows: 1, dim: c.k, eps: 1e-6 });
  const pair = replayed((enc) => {
    for (let i = 0; i < c.sets; i++) {
      glue(enc);
      c.product(enc, i, xn);
    }
  }, c.sets);
  const product = replayed((enc) => {
    for (let i = 0; i < c.sets; i++) c.product(enc, i, xn);
  }, c.sets);
  const glueAlone = replayed((enc) => {
    for (let i = 0; i < c.sets; i++) glue(enc);
  }, c.sets);
  const us = (ns: number) => (ns / 1000).toFixed(2);
  console.log(`${c.name} | ${c.sets} | ${us(pair)} | ${us(product)} | ${us(glueAlone)} | ${us(pair - product - glueAlone)} | ` +
    `${(c.bytes / product).toFixed(0)} | ${(c.bytes / product / copyGbs).toFixed(2)}`);
  for (const b of [x, xn, norm]) b.release();
  c.release();
}
dev.close();
