// Times the CUDA quantized vector forms (decode, m <= 8) against their
// harness variants on the same inputs: for each shape, the op's plan
// (planQuantizedMatmulGgml / planAffineQuantizedMatmul) as it stands, then
// the same dispatch with the kernel swapped for each variant and the
// variant's own CUDA launch (shaders/cuda/quantized_matmul_ggml.cu's
// kernel_mul_mv_<t>_f32_vdq* and kernel_mul_mv_q4_K_f32_vgc*, shaders/cuda/quantized_matmul.cu's
// quantized_mv_<t>_vks*, _vdq* and _vgc*; floors, analysis and predictions
// in notes/qmv-variants-2026-11-26.md and notes/qmv-gc-2026-11-26.md; the
// per-expert rows time the ops' entries alone). The kernels are registered under a
// family of this script's own (the op's sources, the entries and the
// variants as its kernel list), so nothing of the ops changes.
//
//   MLX_NATIVE_BACKEND=cuda bun run bench/qmv_variants.ts [--only TEXT] [--copy-gbs B] [--sms S]
//
// Time: as bench/matmul.ts, the encoder's GPU time per dispatch, median of 5
// commits of `iters` back-to-back dispatches after a probe. GB/s over the
// weight's bytes (blocks, or packed words + scales + biases) plus x and y.
// "of copy": that rate over a device-to-device copy timed in the same run
// (elementwise scalar_mul f32 x 1.0 over 256 MiB, read + write counted), and
// over --copy-gbs when given (e.g. the peers' cudaMemcpy figure). diff: the
// largest |y_variant - y_entry| over the largest |y_entry|, `ok` under 2e-2
// (the tests' bf16 tolerance is 1e-2 of sum |x w|, which at these k is some
// 10x more than max |y|; the entry itself rounds x and w to bf16, the int8
// variants x to 8 bits a chunk, the bf16 outputs their last bit: expect
// 1e-3 to 1e-2). --sms: the SM count the persistent variants' grids are
// sized by (132: H100 SXM, H200).
// CUDA only: the variants have no Metal twins. One weight is read again and
// again, so at these sizes part of it comes from L2 (an H200's 60 MB);
// bench/decode_products.ts times the products with their weights out of it.

import { Device, type Buffer, type Encoder } from '../ts/index.ts';
import { ggmlBlocksBuffer, gpuTimePerDispatch, routing, uniformBuffer, wordBuffer } from './common.ts';
import { record, type OpPlan, type PlannedDispatch } from '../ts/plan.ts';
import { scalarMul } from '../ts/ops/elementwise.ts';
import {
  ggmlBlockOf, ggmlI8SharedBytesOf, ggmlRowBytesOf, planQuantizedMatmulGgml, QUANTIZED_MATMUL_GGML_KERNELS, QUANTIZED_MATMUL_GGML_SOURCES, type GgmlQuantType,
} from '../ts/ops/quantized_matmul_ggml.ts';
import { planAffineQuantizedMatmul, QUANTIZED_MATMUL_KERNELS, QUANTIZED_MATMUL_SOURCES } from '../ts/ops/quantized_matmul.ts';
import {
  planQuantizedGateUpMvId, planQuantizedMvId, QUANTIZED_MATMUL_ID_KERNELS, QUANTIZED_MATMUL_ID_SOURCES,
} from '../ts/ops/quantized_matmul_id.ts';
import {
  ggmlIdI8Blocks, planQuantizedMatmulIdGgml, QUANTIZED_MATMUL_ID_GGML_CUDA_PARTS, QUANTIZED_MATMUL_ID_GGML_KERNELS, QUANTIZED_MATMUL_ID_GGML_SOURCES,
} from '../ts/ops/quantized_matmul_id_ggml.ts';

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
};
const only = arg('--only');
const copyGbsArg = arg('--copy-gbs') === undefined ? null : Number(arg('--copy-gbs'));
const SMS = Number(arg('--sms') ?? 132);

const dev = Device.open();
if (dev.backend !== 'cuda') throw new Error(`bench/qmv_variants.ts: the variants are CUDA kernels (backend ${dev.backend}); set MLX_NATIVE_BACKEND=cuda`);

// ---- the variants and their launches ----

/** A variant: the suffix of the entry's name, and its CUDA launch at (m, n, k). */
interface Variant {
  suffix: string;
  launch: (m: number, n: number, k: number) => { grid: [number, number, number]; threads: [number, number, number]; shared: number };
}

/**
 * gdq<F, R, S, U> (kernel_mul_mv_<t>_f32_vdq*; common.cuh's i8_mv): 256 threads, a block walks
 * units of 8 / S x R rows; two blocks an SM (the launch bounds), so the grid
 * is min(units, 2 x SMs). Shared: int8 x, {d, sum} a chunk, 2 x 8 x R x 8 floats.
 */
function gdq(suffix: string, R: number, S: number): Variant {
  return {
    suffix,
    launch: (m, n, k) => ({
      grid: [Math.min(Math.ceil(n / ((8 / S) * R)), 2 * SMS), 1, 1],
      threads: [256, 1, 1],
      shared: m * k + m * (k / 32) * 8 + 2 * 8 * R * 8 * 4,
    }),
  };
}
const GGML_VARIANTS: Variant[] = [gdq('vdq1', 1, 1), gdq('vdq2', 2, 1), gdq('vdqs4', 1, 4)];
/**
 * mv_id_i8<F, R> (kernel_mul_mv_id_<t>_f32_i8 / _i8r4, Q8_0 and Q6_K): the
 * int8 engine per pair, R rows a warp, grid (ggmlIdI8Blocks, pairs) of 256
 * threads; shared ggmlI8SharedBytesOf(k, R). m is the pairs.
 */
function gdqId(suffix: string, R: number): Variant {
  return {
    suffix,
    launch: (pairs, n, k) => ({
      grid: [ggmlIdI8Blocks(pairs, n, R, { multiprocessors: SMS }), pairs, 1],
      threads: [256, 1, 1],
      shared: ggmlI8SharedBytesOf(k, R),
    }),
  };
}
const GGML_ID_VARIANTS: Variant[] = [gdqId('i8', 1), gdqId('i8r4', 4)];
/**
 * gmv_gc_q4k<W> (kernel_mul_mv_q4_K_f32_vgc2 / 4; one token): the group-column
 * engine on Q4_K's super-blocks, W warps a 16-row tile, 128 threads: grid
 * ceil(ceil(n / 16) W / 4); shared x as bf16 pairs (2 bytes a value), its
 * sub-blocks' sums and 1 KiB.
 */
function ggc(suffix: string, W: number): Variant {
  return {
    suffix,
    launch: (_m, n, k) => ({ grid: [Math.ceil((Math.ceil(n / 16) * W) / 4), 1, 1], threads: [128, 1, 1], shared: k * 2 + (k / 32) * 4 + 1024 }),
  };
}
const GGML_GC_VARIANTS: Variant[] = [ggc('vgc2', 2), ggc('vgc4', 4)];

/**
 * qmv_ks<..., RT> (quantized_mv_<t>_vks8 / _vks4): the vector engine with
 * 16 / RT parts of k as the mma's rows and columns, RT rows a block (one
 * token only): grid ceil(n / RT) of 256 threads; shared 8 warps x 128 floats.
 */
function qks(suffix: string, RT: number): Variant {
  return { suffix, launch: (_m, n) => ({ grid: [Math.ceil(n / RT), 1, 1], threads: [256, 1, 1], shared: 8 * 128 * 4 }) };
}
/**
 * affine_i8<T, R, S, ...> (quantized_mv_<t>_vdq1 / _vdqs4, 4 and 8 bits):
 * gdq's launch (common.cuh's i8_mv, R = 1).
 */
const AFFINE_I8_VARIANTS: Variant[] = [gdq('vdq1', 1, 1), gdq('vdqs4', 1, 4)];
const AFFINE_VARIANTS: Variant[] = [qks('vks8', 8), qks('vks4', 4), ...AFFINE_I8_VARIANTS];
/**
 * qmv_gc<T, GS, W> (quantized_mv_<t>_vgc1 / 2 / 4; 4 bits, one token): the
 * eight groups of a round as the mma's columns, W warps a 16-row tile, 128
 * threads: grid ceil(ceil(n / 16) W / 4); shared x permuted (K padded to
 * whole rounds of 8 groups, 2 bytes a value), its group sums and 1024 bytes.
 */
function qgc(suffix: string, W: number, gs: number): Variant {
  return {
    suffix,
    launch: (_m, n, k) => {
      const R = Math.ceil(k / gs / 8);
      return { grid: [Math.ceil((Math.ceil(n / 16) * W) / 4), 1, 1], threads: [128, 1, 1], shared: R * 8 * gs * 2 + R * 8 * 4 + 1024 };
    },
  };
}
/** _vgd<W>: a round more in flight, 3 blocks an SM. */
const GC_SUFFIXES: [string, number][] = [['vgc1', 1], ['vgc2', 2], ['vgc4', 4], ['vgd1', 1], ['vgd2', 2], ['vgd4', 4]];

// ---- the cases ----

interface Case {
  name: string;
  /** Weight (incl. scales / headers) + x + y bytes. */
  bytes: number;
  plan: OpPlan;
  output: Buffer;
  variants: Variant[];
  /** The variants apply at this m (the affine ones take one token; the per-expert ones: the pairs). */
  m: number;
  n: number;
  k: number;
}

function ggml(label: string, type: GgmlQuantType, m: number, n: number, k: number): Case {
  const input = uniformBuffer(dev, 'f32', [m * k], 0.5);
  const weight = ggmlBlocksBuffer(dev, type, (n * k) / ggmlBlockOf(type).qk);
  const output = dev.alloc('f32', [m * n]);
  return {
    name: `${label} ${type} f32 m=${m} n=${n} k=${k}`, bytes: n * ggmlRowBytesOf(type, k) + 4 * (m * k + m * n),
    plan: planQuantizedMatmulGgml({ input, weight, output, m, n, k, ggmlType: type }, dev.limits, dev), output,
    variants: [...GGML_VARIANTS, ...(type === 'Q4_K' && m === 1 ? GGML_GC_VARIANTS : [])], m, n, k,
  };
}

function affine(label: string, bits: number, gs: number, m: number, n: number, k: number): Case {
  const x = uniformBuffer(dev, 'bf16', [m * k], 0.5);
  const weight = wordBuffer(dev, (n * k * bits) / 32);
  const scales = uniformBuffer(dev, 'bf16', [(n * k) / gs], 0.02);
  const biases = uniformBuffer(dev, 'bf16', [(n * k) / gs], 0.1);
  const output = dev.alloc('bf16', [m * n]);
  return {
    name: `${label} q${bits} g${gs} bf16 m=${m} n=${n} k=${k}`, bytes: (n * k * bits) / 8 + ((2 * n * k) / gs + m * k + m * n) * 2,
    plan: planAffineQuantizedMatmul({ x, weight, scales, biases, output, m, n, k, groupSize: gs, bits }, dev.limits, dev), output,
    // _vks: one token; _vdq: 4 and 8 bits.
    variants: [
      ...(m === 1 ? AFFINE_VARIANTS.slice(0, 2) : []), ...(bits === 6 ? [] : AFFINE_I8_VARIANTS),
      ...(m === 1 && bits === 4 ? GC_SUFFIXES.map(([sfx, W]) => qgc(sfx, W, gs)) : []),
    ], m, n, k,
  };
}

/**
 * Per-expert products (quantized_gate_up_mv_id / quantized_mv_id, g64 bf16;
 * at 4 bits the ops' _gc kernels; x bf16, or f32 for the _xf32 kernels) at bench/matmul.ts's moe shapes and
 * routing: tokens x topK pairs of numExperts experts; down (k the
 * intermediate) takes the pairs as its rows, one expert each. Bytes: the
 * distinct experts' weights, x and y. No variants: the W of the
 * group-column path was chosen by the harness variants of 2026-11-26
 * (notes/moe-gc-2026-11-26.md), since folded into the op.
 */
function moeId(label: string, gateUp: boolean, tokens: number, topK: number, numExperts: number, n: number, k: number, bits = 4,
  xDtype: 'bf16' | 'f32' = 'bf16'): Case {
  const gs = 64, dt = 'bf16' as const;
  const pairIds = routing(tokens, numExperts, topK, 0x5eed + tokens * 31 + numExperts);
  const m = gateUp ? tokens : tokens * topK, U = gateUp ? topK : 1, pairs = m * U;
  const ids = dev.upload('u32', [pairs], pairIds);
  const set = () => ({
    weight: wordBuffer(dev, (numExperts * n * k * bits) / 32),
    scales: uniformBuffer(dev, dt, [(numExperts * n * k) / gs], 0.02),
    biases: uniformBuffer(dev, dt, [(numExperts * n * k) / gs], 0.1),
  });
  const g = set();
  const x = uniformBuffer(dev, xDtype, [m * k], 0.5);
  const output = dev.alloc(dt, [pairs * n]);
  const q = { m, n, k, nExpertUsed: U, numExperts, groupSize: gs, bits };
  const mats = gateUp ? 2 : 1;
  const bytes = mats * new Set(pairIds).size * ((n * k * bits) / 8 + ((2 * n * k) / gs) * 2) + m * k * (xDtype === 'f32' ? 4 : 2) + pairs * n * 2;
  let plan: OpPlan;
  if (gateUp) {
    const u = set();
    plan = planQuantizedGateUpMvId({
      x, gateWeight: g.weight, gateScales: g.scales, gateBiases: g.biases, upWeight: u.weight, upScales: u.scales, upBiases: u.biases,
      ids, output, ...q,
    }, dev.limits, dev);
  } else {
    plan = planQuantizedMvId({ x, ...g, ids, output, ...q }, dev.limits, dev);
  }
  return {
    name: `${label} q${bits} g${gs} bf16${xDtype === 'f32' ? ' x f32' : ''} pairs=${pairs} E=${numExperts} n=${n} k=${k}`, bytes, plan, output,
    variants: [], m: pairs, n, k,
  };
}

/**
 * Per-expert GGUF products, the plain vector form (planQuantizedMatmulIdGgml,
 * f32 x and y): `pairs` pairs of one token each (a decode step's down
 * projection: topK 1 over the pairs) of numExperts experts. Bytes: the
 * distinct experts' blocks, x and y. Variants: the int8 form with 1 and 4
 * rows a warp (Q8_0 and Q6_K), with 4 (the other formats).
 */
function ggmlId(label: string, type: GgmlQuantType, pairs: number, numExperts: number, n: number, k: number): Case {
  const pairIds = routing(1, numExperts, pairs, 0x5eed + pairs * 31 + numExperts);
  const ids = dev.upload('u32', [pairs], pairIds);
  const weight = ggmlBlocksBuffer(dev, type, (numExperts * n * k) / ggmlBlockOf(type).qk);
  const input = uniformBuffer(dev, 'f32', [pairs * k], 0.5);
  const output = dev.alloc('f32', [pairs * n]);
  return {
    name: `${label} ${type} f32 pairs=${pairs} E=${numExperts} n=${n} k=${k}`,
    bytes: new Set(pairIds).size * n * ggmlRowBytesOf(type, k) + 4 * pairs * (k + n),
    plan: planQuantizedMatmulIdGgml({ weight, input, output, ids, nTokens: pairs, topK: 1, n, k, nExperts: numExperts, ggmlType: type },
      dev.limits, dev),
    output, variants: type === 'Q8_0' || type === 'Q6_K' ? GGML_ID_VARIANTS : [gdqId('i8r4', 4)], m: pairs, n, k,
  };
}

// The shapes of the issue's table (bench/matmul.ts's " m=1 " rows), GGUF first, and two 8-token rows.
const cases: Case[] = [
  ggml('Qwen3.6 up', 'Q4_K', 1, 17408, 5120),
  ggml('Qwen3.6 up', 'Q6_K', 1, 17408, 5120),
  ggml('Qwen3.6 up', 'Q8_0', 1, 17408, 5120),
  ggml('Qwen3.6 up', 'Q4_0', 1, 17408, 5120),
  ggml('Qwen3.6 up', 'Q5_K', 1, 17408, 5120),
  ggml('Qwen3.6 down', 'Q4_K', 1, 5120, 17408),
  ggml('Qwen3.6 down', 'Q6_K', 1, 5120, 17408),
  ggml('Gemma 4 up', 'Q4_K', 1, 21504, 5376),
  ggml('Gemma 4 up', 'Q6_K', 1, 21504, 5376),
  ggml('Qwen3.6 up', 'Q4_K', 8, 17408, 5120),
  // A few tokens at once (batched or speculative decoding): the vector form's _xs entry from 2 tokens.
  ggml('Qwen3.6 up', 'Q4_K', 2, 17408, 5120),
  ggml('Qwen3.6 up', 'Q4_K', 4, 17408, 5120),
  ggml('Qwen3.6 down', 'Q4_K', 8, 5120, 17408),
  ggml('Gemma 4 up', 'Q6_K', 8, 21504, 5376),
  ggml('Qwen3.6 up', 'Q8_0', 8, 17408, 5120),
  affine('Qwen3.6 up', 4, 64, 1, 17408, 5120),
  affine('Qwen3.6 down', 4, 64, 1, 5120, 17408),
  affine('Gemma 4 up', 4, 64, 1, 21504, 5376),
  affine('Gemma 4 up', 6, 64, 1, 21504, 5376),
  affine('Gemma 4 up', 8, 64, 1, 21504, 5376),
  affine('Qwen3.6 up', 4, 64, 8, 17408, 5120),
  // Qwen3.6-35B-A3B's decode products (hidden 2048): the gated delta net's in_proj, attention's out_proj, lm_head.
  ggml('Qwen3.6-35B in_proj', 'Q4_K', 1, 12352, 2048),
  ggml('Qwen3.6-35B lm_head', 'Q4_K', 1, 248320, 2048),
  // Q4_K_M's Q6_K output projections and dense down / v projections, and Q8_0's (Q8_0 models; Q4_K_M where rows are
  // not multiples of 256: Gemma 4's MLP down), one token.
  ggml('Gemma 4 lm_head', 'Q6_K', 1, 262144, 2816),
  ggml('Qwen3.6-35B lm_head', 'Q6_K', 1, 248320, 2048),
  ggml('Qwen3.6-35B out_proj', 'Q6_K', 1, 2048, 4096),
  ggml('Qwen3.6-35B shared down', 'Q6_K', 1, 2048, 512),
  ggml('Gemma 4 lm_head', 'Q8_0', 1, 262144, 2816),
  ggml('Qwen3.6-35B in_proj', 'Q8_0', 1, 12352, 2048),
  ggml('Gemma 4 mlp down', 'Q8_0', 1, 2816, 2112),
  affine('Qwen3.6-35B in_proj', 4, 64, 1, 12352, 2048),
  affine('Qwen3.6-35B out_proj', 4, 64, 1, 2048, 4096),
  affine('Qwen3.6-35B lm_head', 4, 64, 1, 248320, 2048),
  // The per-expert products: issue 14's 8 tokens x top-8 of 512, and Qwen3.6-35B-A3B's and Gemma 4 26B-A4B's decode.
  moeId('8x top-8/512 gate_up', true, 8, 8, 512, 512, 2048),
  moeId('8x top-8/512 down', false, 8, 8, 512, 2048, 512),
  moeId('Qwen3.6 35B-A3B decode gate_up', true, 1, 8, 256, 512, 2048),
  moeId('Qwen3.6 35B-A3B decode down', false, 1, 8, 256, 2048, 512),
  moeId('Gemma 4 26B-A4B decode gate_up', true, 1, 8, 128, 704, 2816),
  // The same two decode gate_up products over the models' f32 x (the _xf32 kernels, no cast dispatch before them).
  moeId('Qwen3.6 35B-A3B decode gate_up', true, 1, 8, 256, 512, 2048, 4, 'f32'),
  moeId('Gemma 4 26B-A4B decode gate_up', true, 1, 8, 128, 704, 2816, 4, 'f32'),
  moeId('Qwen3.6 35B-A3B decode gate_up', true, 1, 8, 256, 512, 2048, 8),
  moeId('8x top-8/512 gate_up', true, 8, 8, 512, 512, 2048, 6),
  // The Q4_K_M mixes' per-expert down projections at decode (Gemma 4's Q8_0 at k 704, Qwen3.6's Q6_K at k 512) and a
  // Q8_0 model's (Qwen3.6, k 512).
  ggmlId('Gemma 4 26B-A4B decode down', 'Q8_0', 8, 128, 2816, 704),
  ggmlId('Qwen3.6 35B-A3B decode down', 'Q6_K', 8, 256, 2048, 512),
  ggmlId('Qwen3.6 35B-A3B decode down', 'Q8_0', 8, 256, 2048, 512),
  ggmlId('Qwen3.6 35B-A3B decode down', 'Q4_K', 8, 256, 2048, 512),
  ggmlId('Qwen3.6 35B-A3B decode down', 'Q5_K', 8, 256, 2048, 512),
  ggmlId('Qwen3.6 35B-A3B decode down', 'Q4_0', 8, 256, 2048, 512),
  // The shared expert's down projection (dense, k 512) in Q4_K and Q8_0 as well.
  ggml('Qwen3.6-35B shared down', 'Q4_K', 1, 2048, 512),
  ggml('Qwen3.6-35B shared down', 'Q8_0', 1, 2048, 512),
].filter((c) => only === undefined || c.name.includes(only));

// ---- one family of this script's own per source file: the entries and every variant ----

const ggmlVariantKernels = QUANTIZED_MATMUL_GGML_KERNELS.filter((k) => k.startsWith('kernel_mul_mv_'))
  .flatMap((k) => GGML_VARIANTS.map((v) => `${k}_${v.suffix}`))
  .concat(GGML_GC_VARIANTS.map((v) => `kernel_mul_mv_q4_K_f32_${v.suffix}`));
const affineVariantKernels = QUANTIZED_MATMUL_KERNELS.filter((k) => /^quantized_mv_(f16|bf16)$/.test(k))
  .flatMap((k) => [...AFFINE_VARIANTS.map((v) => v.suffix), ...GC_SUFFIXES.map(([sfx]) => sfx)].map((sfx) => `${k}_${sfx}`));
const FAMILIES = {
  ggml: { family: 'qmv_variants_ggml', sources: QUANTIZED_MATMUL_GGML_SOURCES, kernels: [...QUANTIZED_MATMUL_GGML_KERNELS, ...ggmlVariantKernels] },
  affine: { family: 'qmv_variants_affine', sources: QUANTIZED_MATMUL_SOURCES, kernels: [...QUANTIZED_MATMUL_KERNELS, ...affineVariantKernels] },
  id: { family: 'qmv_variants_id', sources: QUANTIZED_MATMUL_ID_SOURCES, kernels: [...QUANTIZED_MATMUL_ID_KERNELS] },
  // The CUDA parts list names every entry, the int8 forms (_i8 and _i8r4) among them.
  ggmlId: {
    family: 'qmv_variants_ggml_id', sources: QUANTIZED_MATMUL_ID_GGML_SOURCES,
    kernels: [...new Set([...QUANTIZED_MATMUL_ID_GGML_KERNELS, ...QUANTIZED_MATMUL_ID_GGML_CUDA_PARTS.flat()])],
  },
};

/** The op's plan recorded under this script's family, its dispatch's kernel and CUDA launch swapped where a variant is given. */
function planFor(c: Case, v: Variant | null, output: Buffer): OpPlan {
  const fam = c.plan.family === 'quantized_matmul_ggml' ? FAMILIES.ggml : c.plan.family === 'quantized_matmul_id' ? FAMILIES.id
    : c.plan.family === 'quantized_matmul_id_ggml' ? FAMILIES.ggmlId : FAMILIES.affine;
  if (c.plan.dispatches.length !== 1) throw new Error(`${c.name}: expected one dispatch, got ${c.plan.dispatches.length}`);
  const d = c.plan.dispatches[0]!;
  // The output binding: the one bound to the case's output buffer.
  const buffers: Record<number, Buffer | undefined> = { ...d.buffers };
  for (const i of Object.keys(buffers)) if (buffers[Number(i)] === c.output) buffers[Number(i)] = output;
  let swapped: PlannedDispatch = { ...d, buffers };
  if (v !== null) {
    const l = v.launch(c.m, c.n, c.k);
    swapped = { ...swapped, kernel: `${d.kernel}_${v.suffix}`, cuda: { grid: l.grid, threads: l.threads, threadgroupMemory: { 0: l.shared } } };
  }
  return { ...fam, dispatches: [swapped] };
}

function timeNs(recordOne: (e: Encoder) => void): number {
  const probe = gpuTimePerDispatch(dev, recordOne, 1);
  const iters = Math.max(1, Math.min(200, Math.round(2e8 / Math.max(probe, 1))));
  const ts = Array.from({ length: 5 }, () => gpuTimePerDispatch(dev, recordOne, iters)).sort((a, b) => a - b);
  return ts[2]!;
}

/** The output as f32 values (bf16 widened). */
function values(b: Buffer): Float32Array {
  const raw = b.read();
  if (b.dtype === 'f32') return raw as Float32Array;
  const u16 = raw as Uint16Array;
  const out = new Float32Array(u16.length);
  const u32 = new Uint32Array(out.buffer);
  for (let i = 0; i < u16.length; i++) u32[i] = u16[i]! << 16;
  return out;
}

// ---- the copy the rows are compared with ----

const COPY_N = 64 * 1024 * 1024; // 256 MiB of f32
const copyIn = uniformBuffer(dev, 'f32', [COPY_N], 1);
const copyOut = dev.alloc('f32', [COPY_N]);
const copyNs = timeNs((e) => scalarMul(e, { input: copyIn, output: copyOut, scalar: 1 }));
const copyGbs = (8 * COPY_N) / copyNs;
copyIn.release();
copyOut.release();
console.log(`device: ${dev.name} (${dev.backend}), ${SMS} SMs assumed; copy (scalar_mul f32, 256 MiB, read + write) ${copyGbs.toFixed(0)} GB/s` +
  (copyGbsArg ? `; --copy-gbs ${copyGbsArg}` : ''));

for (const c of cases) {
  console.log(`\n${c.name}  (${(c.bytes / 1e6).toFixed(2)} MB; floor ${(c.bytes / copyGbs / 1000).toFixed(2)} us at the copy rate, ` +
    `0.85 of copy: ${(c.bytes / copyGbs / 850).toFixed(2)} us)`);
  const ref = planFor(c, null, c.output);
  const entryNs = timeNs((e) => record(e, ref));
  const want = values(c.output);
  let scale = 0;
  for (const v of want) scale = Math.max(scale, Math.abs(v));
  const row = (label: string, ns: number, diff: string): void => {
    const gbs = c.bytes / ns;
    console.log(`  ${label.padEnd(34)} ${(ns / 1000).toFixed(2).padStart(8)} us  ${gbs.toFixed(0).padStart(5)} GB/s  ` +
      `${(gbs / copyGbs).toFixed(2)} of copy${copyGbsArg ? ` (${(gbs / copyGbsArg).toFixed(2)} of --copy-gbs)` : ''}  ${diff}`);
  };
  row(`${ref.dispatches[0]!.cuda?.entry ?? ref.dispatches[0]!.kernel} (entry)`, entryNs, '');
  for (const v of c.variants) {
    const out = dev.alloc(c.output.dtype, [c.m * c.n]);
    const plan = planFor(c, v, out);
    try {
      const ns = timeNs((e) => record(e, plan));
      const got = values(out);
      let diff = 0;
      for (let i = 0; i < got.length; i++) {
        const d = Math.abs(got[i]! - want[i]!);
        diff = Number.isNaN(d) ? Infinity : Math.max(diff, d);
      }
      row(plan.dispatches[0]!.kernel, ns, `diff ${(diff / scale).toExponential(2)} of max|y| ${diff / scale <= 2e-2 ? 'ok' : 'OVER 2e-2'}`);
    } catch (e) {
      console.log(`  ${plan.dispatches[0]!.kernel}: ${(e as Error).message}`);
    }
    out.release();
  }
}
dev.close();
