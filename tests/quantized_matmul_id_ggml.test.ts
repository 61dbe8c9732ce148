// quantized_matmul_id_ggml: the param packers against the header and the
// .metal bindings, the launches, the reference against values by hand, every
// validation rule of the three ops, and parity against the float64
// dequantize-then-multiply reference on every backend: Q4_0, Q8_0, Q4_K,
// Q5_K and Q6_K, the vector form (routed by ids), the matrix form (after
// moe_dispatch_sort of the same ids, in the same encoder) and the fused
// gate/up vector and matrix forms (silu and gelu_tanh), one token and many, odd n (1, 7,
// 9, 33, 37, 70, 130: under and past a simdgroup's, a threadgroup's and the
// tiles' rows), experts that get several pairs and experts that get none,
// ids past the experts (rows of zeros), a down projection over pairs (topK
// 1), experts further apart than their bytes (expertStride, not a multiple
// of 16), and the input and the weights as views inside one larger
// allocation with garbage around them, the output a NaN-poisoned view.
//
// Error measure: |got - want| / sum_k |x w| per output (w dequantized in
// float64), as tests/quantized_matmul_ggml.test.ts, with its tolerances:
// TOL of the type the dequantized weight meets x in, grown as sqrt(k / 4096)
// past 4096 (dotTolerance): Metal's vector kernels f32, its matrix kernels
// f16 (the weight staged as f16), CUDA's tensor cores f16.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/quantized_matmul_id_ggml.metal' with { type: 'text' };
import type { Buffer, Device } from '../ts/index.ts';
import { moeDispatchSort } from '../ts/ops/moe_dispatch.ts';
import {
  GGML_QUANT_TYPES, ggmlBlockOf, ggmlGcSharedBytes, ggmlMvCudaSharedBytes, ggmlRowBytesOf, type GgmlQuantType, ggmlQuantize,
} from '../ts/ops/quantized_matmul_ggml.ts';
import {
  GGML_MATMUL_ID_MM_GATE_UP_PARAMS_LAYOUT, GGML_MATMUL_ID_MM_PARAMS_LAYOUT, GGML_MATVEC_ID_GATE_UP_PARAMS_LAYOUT, GGML_MATVEC_ID_PARAMS_LAYOUT, ggmlGateUpIdRef, ggmlIdMmCudaLaunch,
  ggmlIdMmFew, ggmlIdMmFewCudaLaunch, ggmlIdMmWg, ggmlIdMmWgCudaLaunch, ggmlIdMmWgSharedBytes, ggmlIdI8Launch, ggmlIdI8Rows, ggmlIdMvCudaLaunch, ggmlIdGc8Takes, packGgmlMatmulIdMmGateUpParams, packGgmlMatmulIdMmParams, packGgmlMatvecIdGateUpParams, packGgmlMatvecIdParams, planQuantizedMatmulIdGgml,
  planQuantizedMatmulIdGgmlGateUp, planQuantizedMatmulIdGgmlMm, planQuantizedMatmulIdGgmlMmGateUp, planQuantizedMatmulIdSwigluQ4_0, QUANTIZED_MATMUL_ID_GGML_KERNELS,
  quantizedMatmulIdGgml, quantizedMatmulIdGgmlGateUp, quantizedMatmulIdGgmlMm, quantizedMatmulIdGgmlMmGateUp, quantizedMatmulIdSwigluQ4_0, ggmlMatmulIdRef, ggmlSwigluIdRef,
} from '../ts/ops/quantized_matmul_id_ggml.ts';
import { siluRef } from '../ts/ops/silu_mul.ts';
import { GATE_ACTIVATIONS, type GateActivation } from '../ts/expert-products.ts';
import { gateActivationRef } from '../ts/ops/dense_matmul_id.ts';
import { structSize } from '../ts/params.ts';
import { record, type CudaLaunch } from '../ts/plan.ts';
import { describeBackends, describeValidation, dotErr, dotTolerance, expectInvalid, randomArray, rng, run, TARGET_LIMITS } from './helpers.ts';
import { a, buf, F, ggmlBlocks, int, opContract, out, U32, type Case } from './op-contract.ts';

describe('quantized_matmul_id_ggml param packers match the header and the .metal bindings', () => {
  test("GgmlMatvecIdParams (the crate's 12 fields) at buffer(4), GgmlMatmulIdMm_MmParams at buffer(0)", () => {
    for (const k of QUANTIZED_MATMUL_ID_GGML_KERNELS) {
      if (k.endsWith('_swiglu')) {
        // The crate's own bindings: 0 weight, 1 gate, 2 up, 3 y, 4 ids, 5 GgmlMatvecIdParams.
        expect(src).toMatch(new RegExp(`kernel void ${k}\\(\\s*device const uchar\\*\\s+src0\\s+\\[\\[buffer\\(0\\)\\]\\],\\s*` +
          'device const float\\*\\s+gate\\s+\\[\\[buffer\\(1\\)\\]\\],\\s*device const float\\*\\s+up\\s+\\[\\[buffer\\(2\\)\\]\\],\\s*' +
          'device float\\*\\s+dst\\s+\\[\\[buffer\\(3\\)\\]\\],\\s*device const uint\\*\\s+ids\\s+\\[\\[buffer\\(4\\)\\]\\],\\s*' +
          'constant GgmlMatvecIdParams&\\s+p\\s+\\[\\[buffer\\(5\\)\\]\\]'));
        continue;
      }
      const re = k.includes('_mm_id_') && k.includes('_gate_up')
        ? /kernel void ggml_mul_mm_id_gate_up\([^{]*constant GgmlMatmulIdMmGateUpParams&\s+args\s+\[\[buffer\(0\)\]\],(?:[^{]*)device const uchar\*\s+up\s+\[\[buffer\(6\)\]\]/
        : k.endsWith('_gate_up')
        ? /kernel void ggml_mul_mv_id_gate_up\([^{]*constant GgmlMatvecIdGateUpParams&\s+p\s+\[\[buffer\(4\)\]\],\s*device const uchar\*\s+up\s+\[\[buffer\(5\)\]\]/
        : k.includes('_mv_id_')
          ? /kernel void ggml_mul_mv_id\([^{]*constant GgmlMatvecIdParams&\s+p\s+\[\[buffer\(4\)\]\]/
          : /kernel void ggml_mul_mm_id\([^{]*constant GgmlMatmulIdMm_MmParams&\s+args\s+\[\[buffer\(0\)\]\]/;
      expect(src).toMatch(re);
      expect(src).toContain(`[[host_name("${k}")]]`);
    }
    expect(structSize(GGML_MATVEC_ID_PARAMS_LAYOUT)).toBe(80);
    expect(structSize(GGML_MATMUL_ID_MM_PARAMS_LAYOUT)).toBe(96);
    const s = { nTokens: 3, topK: 2, n: 5, k: 256, nExperts: 7, ggmlType: 'Q4_K' as const };
    const v = new DataView(packGgmlMatvecIdParams(s).buffer);
    const u64 = (o: number): number => Number(v.getBigUint64(o, true));
    // ne00, ne01, ne02 (experts), ne10, ne12, ne0, ne1 (pairs); r2, r3, top_k, n_tokens; expert_stride (5 rows of 144 bytes).
    expect([0, 8, 16, 24, 32, 40, 48].map(u64)).toEqual([256, 5, 7, 256, 1, 5, 6]);
    expect([56, 60, 64, 68].map((o) => v.getUint32(o, true))).toEqual([1, 1, 2, 3]);
    expect(u64(72)).toBe(720);
    expect(Number(new DataView(packGgmlMatvecIdParams({ ...s, expertStride: 1000 }).buffer).getBigUint64(72, true))).toBe(1000);
    // The gate/up params: the same 80 bytes, then activation (0 silu, 1 gelu_tanh), padded to 88.
    expect(structSize(GGML_MATVEC_ID_GATE_UP_PARAMS_LAYOUT)).toBe(88);
    const gu = packGgmlMatvecIdGateUpParams({ ...s, activation: 'gelu_tanh' });
    expect(gu.subarray(0, 80)).toEqual(packGgmlMatvecIdParams(s));
    expect(new DataView(gu.buffer).getUint32(80, true)).toBe(1);
    expect(new DataView(packGgmlMatvecIdGateUpParams(s).buffer).getUint32(80, true)).toBe(0);
    const m = new DataView(packGgmlMatmulIdMmParams(s).buffer);
    // ne00, ne02; nb01, nb02; ne11; nb10, nb11, nb12; ne20, ne21, ne0, ne1; r2, r3.
    expect([m.getInt32(0, true), m.getInt32(4, true)]).toEqual([256, 7]);
    expect([8, 16].map((o) => Number(m.getBigUint64(o, true)))).toEqual([144, 720]);
    expect(m.getInt32(32, true)).toBe(2);
    expect([40, 48, 56].map((o) => Number(m.getBigUint64(o, true)))).toEqual([4, 0, 1024]);
    expect([72, 76, 80, 84].map((o) => m.getInt32(o, true))).toEqual([2, 3, 5, 2]);
    expect([m.getInt16(88, true), m.getInt16(90, true)]).toEqual([1, 1]);
    // The matrix gate/up params: the same 96 bytes, then activation and a padding word.
    expect(structSize(GGML_MATMUL_ID_MM_GATE_UP_PARAMS_LAYOUT)).toBe(104);
    const mg = packGgmlMatmulIdMmGateUpParams({ ...s, activation: 'gelu_tanh' });
    expect(mg.subarray(0, 96)).toEqual(packGgmlMatmulIdMmParams(s));
    expect([96, 100].map((o) => new DataView(mg.buffer).getUint32(o, true))).toEqual([1, 0]);
    expect(new DataView(packGgmlMatmulIdMmGateUpParams(s).buffer).getUint32(96, true)).toBe(0);
  });
  test('launches: the vector engine per pair and 16 rows, matrix tile slots of 64 pairs or of 8 (few pairs an expert), shared memory within an H100\'s', () => {
    // Qwen3.6-35B-A3B decode, 8 tokens x top-8: gate (k = 2048, n = 512) and down (k = 512, n = 2048).
    expect(ggmlIdMvCudaLaunch('Q4_K', 64, 512, 2048)).toEqual({ grid: [64 * 32, 1, 1], threads: [128, 1, 1], threadgroupMemory: { 0: ggmlMvCudaSharedBytes('Q4_K') } });
    expect(ggmlIdMvCudaLaunch('Q6_K', 64, 2048, 512).grid[0]).toBe(64 * 128);
    // The gate/up form: 8 output rows a block (their gate and up rows the engine's 16), the same shared memory.
    expect(ggmlIdMvCudaLaunch('Q4_K', 8, 512, 2048, true)).toEqual({ grid: [8 * 64, 1, 1], threads: [128, 1, 1], threadgroupMemory: { 0: ggmlMvCudaSharedBytes('Q4_K') } });
    expect(ggmlIdMvCudaLaunch('Q4_0', 3, 9, 32, true).grid[0]).toBe(3 * 2);
    // Q4_K's gate/up form of few tiles (at most 2 an SM over the pairs, k of 8 super-blocks or more, experts on 16 bytes):
    // 8 warps a tile, a tile a block of 256 threads (Gemma 4's MLP through gatedLinear: one pair, 2112 outputs, k 2816).
    const cu = TARGET_LIMITS.cuda, rb = (k: number) => (k / 256) * 144;
    expect(ggmlIdMvCudaLaunch('Q4_K', 1, 2112, 2816, true, cu, 2112 * rb(2816))).toEqual({ grid: [264, 1, 1], threads: [256, 1, 1],
      threadgroupMemory: { 0: ggmlGcSharedBytes('Q4_K', 2816) }, entry: 'kernel_mul_mv_id_q4_K_f32_gate_up_gc8' });
    expect([ggmlIdGc8Takes('Q4_K', 2, 2112, 2816, cu, 0), ggmlIdGc8Takes('Q4_K', 1, 2112, 1792, cu, 0), ggmlIdGc8Takes('Q4_K', 1, 2112, 2816, cu, 20),
      ggmlIdGc8Takes('Q4_K', 1, 2112, 2816, { multiprocessors: 0 }, 0), ggmlIdGc8Takes('Q6_K', 1, 2112, 2816, cu, 0)])
      .toEqual([false, false, false, false, false]);
    expect([ggmlIdGc8Takes('Q4_K', 8, 37, 2048, cu, 0), ggmlIdMvCudaLaunch('Q4_K', 8, 37, 2048, false, cu).entry]).toEqual([true, undefined]);
    // Q4_K's group-column engine on the same grid: its shared memory (x of the pair's token) where that is more, up
    // to x's copy within GC_MAX_SHARED; past it the vector engine's alone (the kernel decides alike).
    expect(ggmlIdMvCudaLaunch('Q4_K', 8, 2048, 32768).threadgroupMemory).toEqual({ 0: ggmlGcSharedBytes('Q4_K', 32768) });
    expect(ggmlGcSharedBytes('Q4_K', 32768)).toBeGreaterThan(ggmlMvCudaSharedBytes('Q4_K'));
    expect(ggmlIdMvCudaLaunch('Q4_K', 8, 2048, 65536).threadgroupMemory).toEqual({ 0: ggmlMvCudaSharedBytes('Q4_K') });
    // Q6_K's engine alike (x as f16 with a sum a group of 16): its own shared memory up to x's copy within the bound.
    expect(ggmlIdMvCudaLaunch('Q6_K', 8, 2048, 32768).threadgroupMemory).toEqual({ 0: ggmlGcSharedBytes('Q6_K', 32768) });
    expect(ggmlGcSharedBytes('Q6_K', 32768)).toBe(4 * 3 * 16 * 240 + 32768 * 2 + 32768 / 4 + 320);
    expect(ggmlIdMvCudaLaunch('Q6_K', 8, 2048, 65536).threadgroupMemory).toEqual({ 0: ggmlMvCudaSharedBytes('Q6_K') });
    // Q8_0's group-column engine at one token a pair, its own shared memory (ggmlGcSharedBytes): Gemma 4's expert down
    // (k 704, a stage a warp), k 2112 (3 stages), k 352 (2 rounds, one stage).
    expect([704, 2112, 352].map((k) => ggmlIdMvCudaLaunch('Q8_0', 8, 2816, k).threadgroupMemory![0]))
      .toEqual([ggmlGcSharedBytes('Q8_0', 704), ggmlGcSharedBytes('Q8_0', 2112), ggmlGcSharedBytes('Q8_0', 352)]);
    expect([704, 2112].map((k) => ggmlGcSharedBytes('Q8_0', k))).toEqual([4 * 16 * 304 + 3 * 8 * 68 + 320, 4 * 3 * 16 * 304 + 9 * 8 * 68 + 320]);
    // The plan's plain vector form of Q6_K and Q8_0 on CUDA: the int8 engine per pair (ggmlIdI8Launch), grid (G, pairs) of
    // 256 threads, G blocks a pair so that the pairs take 2 an SM (132 SMs), at most the pair's units of 8 x R rows, at
    // least one; x as int8, a {scale, sum} pair a chunk of 32 and 2 x 8 x R x 8 floats. R = 4 rows a warp (_i8r4) up to
    // 32 chunks a row, else 1 (_i8). Gemma 4's Q8_0 expert down (k 704, n 2816), Qwen3.6's Q6_K and Q8_0 ones (k 512,
    // n 2048), 8 pairs; 300 pairs; a pair's one unit; no SM count: every unit; a long row (k 2112).
    const i8 = (t: string, g: number, pairs: number, k: number, R: number): CudaLaunch => ({
      grid: [g, pairs, 1], threads: [256, 1, 1], threadgroupMemory: { 0: k + (k / 32) * 8 + 2 * 8 * R * 8 * 4 },
      entry: `kernel_mul_mv_id_${t}_f32_${R === 4 ? 'i8r4' : 'i8'}`,
    });
    expect(ggmlIdI8Launch('Q8_0', 8, 2816, 704, { multiprocessors: 132 })).toEqual(i8('q8_0', 33, 8, 704, 4));
    expect(ggmlIdI8Launch('Q6_K', 8, 2048, 512, { multiprocessors: 132 })).toEqual(i8('q6_K', 33, 8, 512, 4));
    expect(ggmlIdI8Launch('Q8_0', 8, 2048, 512, { multiprocessors: 132 })).toEqual(i8('q8_0', 33, 8, 512, 4));
    expect(ggmlIdI8Launch('Q6_K', 300, 2048, 512, { multiprocessors: 132 })).toEqual(i8('q6_K', 1, 300, 512, 4));
    expect(ggmlIdI8Launch('Q6_K', 2, 9, 256, { multiprocessors: 132 })).toEqual(i8('q6_K', 1, 2, 256, 4));
    expect(ggmlIdI8Launch('Q8_0', 8, 2816, 704)).toEqual(i8('q8_0', 88, 8, 704, 4));
    expect(ggmlIdI8Launch('Q8_0', 8, 2816, 2112, { multiprocessors: 132 })).toEqual(i8('q8_0', 33, 8, 2112, 1));
    expect([992, 1024, 1056, 1280].map(ggmlIdI8Rows)).toEqual([4, 4, 1, 1]);
    // Not for the other formats, past the grid's y (65535 pairs) or past x's copy within GC_MAX_SHARED.
    expect((['Q4_0', 'Q4_K', 'Q5_K'] as const).map((t) => ggmlIdI8Launch(t, 8, 2048, 512))).toEqual([null, null, null]);
    expect(ggmlIdI8Launch('Q6_K', 65536, 64, 256)).toBeNull();
    expect(ggmlIdI8Launch('Q8_0', 8, 64, 2 ** 20)).toBeNull();
    // 512 tokens x top-8 of 256 experts: 4096 / 64 + 257 slots x 4 column tiles of 128.
    expect(ggmlIdMmCudaLaunch(4096, 512, 256)).toEqual({ grid: [321 * 4, 1, 1], threads: [128, 1, 1], threadgroupMemory: { 0: 30720 } });
    // The few-pairs form at 64 tokens x top-8 of 256: 512 / 8 + 257 slots x 8 blocks of 64 rows, the vector engine's memory.
    expect(ggmlIdMmFewCudaLaunch('Q4_K', 512, 512, 256)).toEqual({ grid: [321 * 8, 1, 1], threads: [128, 1, 1], threadgroupMemory: { 0: ggmlMvCudaSharedBytes('Q4_K') } });
    // Taken on CUDA up to 8 pairs an expert on average (256 tokens x top-8 of 256), 16 from k 2048; not past them nor
    // off CUDA.
    const cuda = { computeCapability: 90 };
    expect([512, 2048, 2049].map((p) => ggmlIdMmFew('Q4_K', p, 2048, 512, 256, cuda))).toEqual([true, true, false]);
    expect([2049, 4096, 4097].map((p) => ggmlIdMmFew('Q4_K', p, 512, 2048, 256, cuda))).toEqual([true, true, false]);
    expect(ggmlIdMmFew('Q4_K', 512, 512, 2048, 256, { computeCapability: 0 })).toBe(false);
    // Nor where its grid would pass CUDA's.
    expect(ggmlIdMmFew('Q4_K', 64, 2 ** 33, 256, 8, cuda)).toBe(false);
    // The many-pairs form at 4096 tokens x top-8 of 256: 32768 / 128 + 257 slots x 4 column tiles of 128, 256
    // threads, 3 stages of 256 swizzled rows of 128 bytes (and 1024 to align them), for Q4_K and Q5_K two steps of
    // 128 rows' units (3 and 5 of 16 bytes); two blocks of Q4_K's (each with 2 KiB of static and driver memory)
    // within an H100's 228 KiB.
    expect(ggmlIdMmWgCudaLaunch('Q4_K', 32768, 512, 256)).toEqual({ grid: [513 * 4, 1, 1], threads: [256, 1, 1], threadgroupMemory: { 0: 111616 } });
    expect(GGML_QUANT_TYPES.map((t) => ggmlIdMmWgSharedBytes(t))).toEqual([99328, 99328, 111616, 119808, 99328]);
    expect(2 * (ggmlIdMmWgSharedBytes('Q4_K') + 2048)).toBeLessThanOrEqual(228 * 1024);
    for (const t of GGML_QUANT_TYPES) expect(ggmlIdMmWgSharedBytes(t)).toBeLessThanOrEqual(TARGET_LIMITS.cuda.maxThreadgroupMemory);
    // Taken on compute capability 9.0 from 8 pairs an expert on average (256 tokens x top-8 of 256), before the
    // few-pairs form, with room for its stages; not below, not elsewhere, not where its grid would pass CUDA's.
    const hopper = { computeCapability: 90, maxThreadgroupMemory: TARGET_LIMITS.cuda.maxThreadgroupMemory };
    expect([2047, 2048, 32768].map((p) => ggmlIdMmWg('Q4_K', p, 512, 256, hopper))).toEqual([false, true, true]);
    expect(ggmlIdMmWg('Q4_K', 32768, 512, 256, { ...hopper, computeCapability: 89 })).toBe(false);
    expect(ggmlIdMmWg('Q4_K', 32768, 512, 256, { ...hopper, maxThreadgroupMemory: 111615 })).toBe(false);
    expect(ggmlIdMmWg('Q4_K', 2 ** 26, 2 ** 20, 1, hopper)).toBe(false);
    for (const t of GGML_QUANT_TYPES) expect(ggmlMvCudaSharedBytes(t)).toBeLessThanOrEqual(TARGET_LIMITS.cuda.maxThreadgroupMemory);
  });
});

describe('quantized_matmul_id_ggml reference against values by hand', () => {
  test('two Q8_0 experts of 1 row, k = 32: each pair takes its expert; an id past them gives zeros', () => {
    // Expert 0: d = 0.5, q = 2 everywhere (w = 1); expert 1: d = 0.25, q = -4 (w = -1). f16 0.5 = 0x3800, 0.25 = 0x3400.
    const block = (dLo: number, dHi: number, q: number): number[] => [dLo, dHi, ...Array<number>(32).fill(q & 0xff)];
    const weight = Uint8Array.from([...block(0x00, 0x38, 2), ...block(0x00, 0x34, -4)]);
    const x = Array.from({ length: 64 }, (_, i) => (i < 32 ? 1 : 2));
    const r = ggmlMatmulIdRef(x, weight, [1, 0, 9, 0], { nTokens: 2, topK: 2, n: 1, k: 32, nExperts: 2, ggmlType: 'Q8_0' });
    expect(Array.from(r.y)).toEqual([-32, 32, 0, 64]);
    expect(Array.from(r.abs)).toEqual([32, 32, 1, 64]);
  });
  test('gate/up: act(x . gate) * (x . up) of each pair\'s expert; an id past them gives zeros', () => {
    // Expert 0: gate w = 1, up w = -1; expert 1: gate w = -1, up w = 1 (d = 0.5 with q = +-2). x = 0.25 / 0.125 per token.
    const block = (q: number): number[] => [0x00, 0x38, ...Array<number>(32).fill(q & 0xff)];
    const gate = Uint8Array.from([...block(2), ...block(-2)]);
    const up = Uint8Array.from([...block(-2), ...block(2)]);
    const x = Array.from({ length: 64 }, (_, i) => (i < 32 ? 0.25 : 0.125));
    const sizes = { nTokens: 2, topK: 2, n: 1, k: 32, nExperts: 2, ggmlType: 'Q8_0' as const };
    for (const act of GATE_ACTIVATIONS) {
      const r = ggmlGateUpIdRef(x, gate, up, [0, 1, 1, 5], sizes, act);
      // Token 0 (dots +-8): expert 0 act(8) * -8, expert 1 act(-8) * 8; token 1 (dots +-4): expert 1 act(-4) * 4; then zeros.
      const f = (g: number): number => gateActivationRef(g, act);
      expect(Array.from(r.y)).toEqual([f(8) * -8, f(-8) * 8, f(-4) * 4, 0]);
      expect(r.abs[3]).toBe(1);
    }
  });
  test('swiglu: each pair\'s own silu(gate) * up against its expert\'s Q4_0 rows; an id past them gives zeros', () => {
    // Expert 0: d = 0.5, q = 10 (w = 1); expert 1: q = 6 (w = -1). Pair p's gate g_p and up 2 everywhere: y = +-32 silu(g_p) 2.
    const block = (q: number): number[] => [0x00, 0x38, ...Array<number>(16).fill(q | (q << 4))];
    const weight = Uint8Array.from([...block(10), ...block(6)]);
    const gs = [1, -0.5, 3];
    const gate = gs.flatMap((g) => Array<number>(32).fill(g)), up = Array<number>(96).fill(2);
    const r = ggmlSwigluIdRef(gate, up, weight, [1, 0, 7], { nTokens: 3, topK: 1, n: 1, k: 32, nExperts: 2, ggmlType: 'Q4_0' });
    [-64 * siluRef(1), 64 * siluRef(-0.5), 0].forEach((v, i) => expect(r.y[i]!).toBeCloseTo(v, 12));
    [64 * siluRef(1), 64 * Math.abs(siluRef(-0.5)), 1].forEach((v, i) => expect(r.abs[i]!).toBeCloseTo(v, 12));
  });
});

describeValidation('quantized_matmul_id_ggml validation', ({ enc, buf }) => {
  type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
  // Q4_K, 2 tokens x top-3 of 4 experts of n = 5 rows, k = 256: 720 bytes an expert.
  const sizes = { nTokens: 2, topK: 3, n: 5, k: 256, nExperts: 4, ggmlType: 'Q4_K' };
  const common = (): Case[] => [
    [{ ggmlType: 'Q4_1' }, 'ggmlType', 'Q4_0, Q8_0, Q4_K, Q5_K, Q6_K', 'Q4_1'],
    [{ nTokens: 0 }, 'nTokens', 'a positive integer', '0'],
    [{ k: 1.5 }, 'k', 'a positive integer', '1.5'],
    [{ n: -1 }, 'n', 'a positive integer', '-1'],
    [{ topK: 0 }, 'topK', 'a positive integer', '0'],
    [{ nExperts: 0 }, 'nExperts', 'a positive integer', '0'],
    [{ n: 2 ** 31 }, 'n', 'at most 2^31 - 1', `${2 ** 31}`],
    [{ k: 288 }, 'k', "a multiple of Q4_K's block (256)", '288'],
    [{ expertStride: 719 }, 'expertStride', 'at least the bytes of an expert (720)', '719'],
    [{ expertStride: -1 }, 'expertStride', 'a safe integer >= 0 or absent', '-1'],
    [{ expertStride: 722 }, 'expertStride', "a multiple of Q4_K's row alignment (4)", '722'],
    [{ input: buf('bf16', 512) }, 'input.dtype', 'f32', 'bf16'],
    [{ weight: buf('u32', 720) }, 'weight.dtype', 'u8', 'u32'],
    [{ output: buf('f16', 30) }, 'output.dtype', 'f32', 'f16'],
    [{ input: buf('f32', 511) }, 'input.elementCount', 'at least 512', '511'],
    [{ weight: buf('u8', 2879) }, 'weight.byteLength', 'at least 2880 (4 experts of 5 rows of 144 bytes of Q4_K, 720 bytes apart)', '2879'],
    [{ expertStride: 800 }, 'weight.byteLength', 'at least 3120', '2880'],
    [{ ggmlType: 'Q6_K' }, 'weight.byteLength', 'at least 4200', '2880'],
    [{ output: buf('f32', 29) }, 'output.elementCount', 'at least 30', '29'],
  ];
  // The family's rules of a weight, held to each of the gate/up forms' gateWeight and upWeight (the other
  // arguments' rules as they are, the weight's size named after the gate's).
  const twoWeights = (cases: Case[]): Case[] => cases.flatMap(([m, arg, expected, actual]): Case[] => ('weight' in m
    ? ['gateWeight', 'upWeight'].map((w): Case => [{ [w]: m.weight }, arg.replace('weight', w), expected, actual])
    : [[m, arg.replace(/^weight\./, 'gateWeight.'), expected, actual]]));
  test('quantized_matmul_id_ggml: every rule', () => {
    const base = () => ({ input: buf('f32', 512), weight: buf('u8', 2880), ids: buf('u32', 6), output: buf('f32', 30), ...sizes });
    const cases: Case[] = [
      ...common(),
      [{ ids: buf('i32', 6) }, 'ids.dtype', 'u32', 'i32'],
      [{ ids: buf('u32', 5) }, 'ids.elementCount', 'at least 6', '5'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => quantizedMatmulIdGgml(enc(), { ...base(), ...m } as never), 'quantized_matmul_id_ggml', arg, expected, actual);
    }
    // The crate's rule: larger buffers are taken (their first bytes).
    quantizedMatmulIdGgml(enc(), { ...base(), input: buf('f32', 600), weight: buf('u8', 3000), ids: buf('u32', 8), output: buf('f32', 40) } as never);
    const x = buf('f32', 1024);
    expectInvalid(() => quantizedMatmulIdGgml(enc(), { ...base(), input: x.view('f32', [512]), output: x.view('f32', [30], 1024) } as never),
      'quantized_matmul_id_ggml', 'output', 'a buffer other than input', 'a view overlapping input');
  });
  test('quantized_matmul_id_ggml_gate_up: every rule, each weight held to the weight\'s', () => {
    const base = () => ({
      input: buf('f32', 512), gateWeight: buf('u8', 2880), upWeight: buf('u8', 2880), ids: buf('u32', 6), output: buf('f32', 30), ...sizes,
    });
    const cases: Case[] = [
      [{ activation: 'gelu' }, 'activation', "'silu', 'gelu_tanh' or absent", 'gelu'],
      [{ ids: buf('i32', 6) }, 'ids.dtype', 'u32', 'i32'],
      [{ ids: buf('u32', 5) }, 'ids.elementCount', 'at least 6', '5'],
    ];
    cases.push(...twoWeights(common()));
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => quantizedMatmulIdGgmlGateUp(enc(), { ...base(), ...m } as never), 'quantized_matmul_id_ggml_gate_up', arg, expected, actual);
    }
    // Larger buffers are taken; gate and up may be views of one buffer (a fused gate_up tensor), the output not.
    quantizedMatmulIdGgmlGateUp(enc(), { ...base(), gateWeight: buf('u8', 3000), upWeight: buf('u8', 2900), activation: 'gelu_tanh' } as never);
    // A fused [4, 2 x 5 rows] gate_up tensor: experts 1440 bytes apart, the up view 720 bytes in.
    const w = buf('u8', 4 * 1440);
    quantizedMatmulIdGgmlGateUp(enc(), { ...base(), gateWeight: w.view('u8', [5040]), upWeight: w.view('u8', [5040], 720), expertStride: 1440 } as never);
    expectInvalid(() => quantizedMatmulIdGgmlGateUp(enc(), { ...base(), upWeight: w.view('u8', [2880]), output: w.view('f32', [30], 2000) } as never),
      'quantized_matmul_id_ggml_gate_up', 'output', 'a buffer other than upWeight', 'a view overlapping upWeight');
  });
  test('quantized_matmul_id_swiglu_q4_0: the crate\'s rules (Q4_0 alone, gate and up a row per pair) and the family\'s', () => {
    // Q4_0, 2 tokens x top-3 (6 pairs) of 4 experts of n = 5 rows, k = 64 (2 blocks of 18 bytes a row): 180 bytes an expert.
    const q = { nTokens: 2, topK: 3, n: 5, k: 64, nExperts: 4, ggmlType: 'Q4_0' };
    const base = () => ({ gate: buf('f32', 384), up: buf('f32', 384), weight: buf('u8', 720), ids: buf('u32', 6), output: buf('f32', 30), ...q });
    const cases: Case[] = [
      [{ ggmlType: 'Q8_0' }, 'ggmlType', 'Q4_0', 'Q8_0'],
      [{ ggmlType: 'Q4_1' }, 'ggmlType', 'Q4_0', 'Q4_1'],
      [{ nTokens: 0 }, 'nTokens', 'a positive integer', '0'],
      [{ k: 0 }, 'k', 'a positive integer', '0'],
      [{ n: 0 }, 'n', 'a positive integer', '0'],
      [{ topK: 0 }, 'topK', 'a positive integer', '0'],
      [{ nExperts: 0 }, 'nExperts', 'a positive integer', '0'],
      [{ k: 48 }, 'k', "a multiple of Q4_0's block (32)", '48'],
      [{ expertStride: 179 }, 'expertStride', 'at least the bytes of an expert (180)', '179'],
      [{ expertStride: 181 }, 'expertStride', "a multiple of Q4_0's row alignment (2)", '181'],
      [{ gate: buf('bf16', 384) }, 'gate.dtype', 'f32', 'bf16'],
      [{ up: buf('f16', 384) }, 'up.dtype', 'f32', 'f16'],
      [{ gate: buf('f32', 383) }, 'gate.elementCount', 'at least 384', '383'],
      [{ up: buf('f32', 383) }, 'up.elementCount', 'at least 384', '383'],
      [{ weight: buf('u32', 720) }, 'weight.dtype', 'u8', 'u32'],
      [{ weight: buf('u8', 719) }, 'weight.byteLength', 'at least 720 (4 experts of 5 rows of 36 bytes of Q4_0, 180 bytes apart)', '719'],
      [{ ids: buf('i32', 6) }, 'ids.dtype', 'u32', 'i32'],
      [{ ids: buf('u32', 5) }, 'ids.elementCount', 'at least 6', '5'],
      [{ output: buf('f32', 29) }, 'output.elementCount', 'at least 30', '29'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => quantizedMatmulIdSwigluQ4_0(enc(), { ...base(), ...m } as never), 'quantized_matmul_id_swiglu_q4_0', arg, expected, actual);
    }
    quantizedMatmulIdSwigluQ4_0(enc(), { ...base(), gate: buf('f32', 400), weight: buf('u8', 800), output: buf('f32', 31) } as never);
    const g = buf('f32', 1024);
    expectInvalid(() => quantizedMatmulIdSwigluQ4_0(enc(), { ...base(), gate: g.view('f32', [384]), output: g.view('f32', [30], 1024) } as never),
      'quantized_matmul_id_swiglu_q4_0', 'output', 'a buffer other than gate', 'a view overlapping gate');
  });
  test('quantized_matmul_id_ggml_mm: every rule', () => {
    const base = () => ({ input: buf('f32', 512), weight: buf('u8', 2880), offsets: buf('u32', 6), order: buf('u32', 6), output: buf('f32', 30), ...sizes });
    const cases: Case[] = [
      ...common(),
      [{ offsets: buf('i32', 6) }, 'offsets.dtype', 'u32', 'i32'],
      [{ offsets: buf('u32', 5) }, 'offsets.elementCount', 'at least 6', '5'],
      [{ order: buf('u32', 5) }, 'order.elementCount', 'at least 6', '5'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => quantizedMatmulIdGgmlMm(enc(), { ...base(), ...m } as never), 'quantized_matmul_id_ggml_mm', arg, expected, actual);
    }
    const w = buf('u8', 4096);
    expectInvalid(() => quantizedMatmulIdGgmlMm(enc(), { ...base(), weight: w.view('u8', [2880]), output: w.view('f32', [30], 2000) } as never),
      'quantized_matmul_id_ggml_mm', 'output', 'a buffer other than weight', 'a view overlapping weight');
  });
  test('quantized_matmul_id_ggml_mm_gate_up: every rule, each weight held to the weight\'s', () => {
    const op = 'quantized_matmul_id_ggml_mm_gate_up';
    const base = () => ({
      input: buf('f32', 512), gateWeight: buf('u8', 2880), upWeight: buf('u8', 2880), offsets: buf('u32', 6), order: buf('u32', 6),
      output: buf('f32', 30), ...sizes,
    });
    const cases: Case[] = [
      [{ activation: 'relu' }, 'activation', "'silu', 'gelu_tanh' or absent", 'relu'],
      [{ offsets: buf('i32', 6) }, 'offsets.dtype', 'u32', 'i32'],
      [{ offsets: buf('u32', 5) }, 'offsets.elementCount', 'at least 6', '5'],
      [{ order: buf('u32', 5) }, 'order.elementCount', 'at least 6', '5'],
    ];
    cases.push(...twoWeights(common()));
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => quantizedMatmulIdGgmlMmGateUp(enc(), { ...base(), ...m } as never), op, arg, expected, actual);
    }
    // A fused [4, 2 x 5 rows] gate_up tensor: two views of one buffer, experts 1440 bytes apart; the output may not overlap it.
    const w = buf('u8', 4 * 1440);
    quantizedMatmulIdGgmlMmGateUp(enc(), { ...base(), gateWeight: w.view('u8', [5040]), upWeight: w.view('u8', [5040], 720), expertStride: 1440 } as never);
    expectInvalid(() => quantizedMatmulIdGgmlMmGateUp(enc(), { ...base(), upWeight: w.view('u8', [2880]), output: w.view('f32', [30], 2000) } as never),
      op, 'output', 'a buffer other than upWeight', 'a view overlapping upWeight');
  });
});

interface Shape {
  nTokens: number;
  topK: number;
  n: number;
  /** k in blocks of the type. */
  blocks: number;
  nExperts: number;
  /** Bytes between experts beyond their own (expertStride = expert bytes + pad; 2 more for Q4_K and Q5_K, whose rows must be 4-byte aligned). */
  pad?: number;
}

/**
 * The vector form, the matrix form (as planned, or planned as one of CUDA's forms), the fused gate/up vector form with its
 * activation, the fused gate/up matrix form (gateUpMm; matrix as the matrix form's), or the swiglu down projection (Q4_0).
 */
type Form = 'vector' | 'matrix' | 'swiglu' | { gateUp: GateActivation } | { matrix: 'few' | 'wg' | 'tiles' }
  | { gateUpMm: GateActivation; matrix?: 'few' | 'wg' | 'tiles' };

/**
 * One product on the device against the reference: every expert's weight
 * quantized from random values (garbage in the pad between experts), x
 * random; x and the weight as views at non-zero offsets of one u8 allocation
 * with garbage around them, the output a NaN-poisoned view of another. The
 * matrix form runs moe_dispatch_sort of the ids first, in the same encoder.
 * The gate/up form takes a second weight (the up projection) of the same
 * layout, a view after the gate's in the same allocation; its bound is the
 * reference's first-order one plus tol sum |x g| sum |x u| (errors of tol
 * times their sums of |x w| in both products, multiplied: what is left where
 * the gate and up sums are both near 0), tol the one it is held to. The
 * swiglu form takes gate and up rows of each pair (gate in [-3, 3]) where
 * the others take x, up a view after the weight's. { matrix }: the matrix
 * form planned for a CUDA device ('few': kernel_mul_mm_id_<t>_f32_few where
 * ggmlIdMmFew takes it, 'wg': kernel_mul_mm_id_<t>_f32_wg on compute
 * capability 9.0 where ggmlIdMmWg takes it, whose Metal twins the emulator
 * runs; 'tiles': the 64-row tiles of kernel_mul_mm_id_<t>_f32), whatever
 * the device.
 * Returns the error (Infinity where anything outside the output view was written).
 */
function product(dev: Device, type: GgmlQuantType, s: Shape, ids: number[], form: Form, seed: number, tol = 0): number {
  const r = rng(seed);
  const k = ggmlBlockOf(type).qk * s.blocks;
  const pairs = s.nTokens * s.topK;
  const expertBytes = s.n * ggmlRowBytesOf(type, k);
  const stride = expertBytes + (s.pad === undefined ? 0 : s.pad + (type === 'Q4_K' || type === 'Q5_K' ? 2 : 0));
  const experts = (): Uint8Array => {
    const w = Uint8Array.from({ length: (s.nExperts - 1) * stride + expertBytes }, () => Math.floor(r.uniform(0, 256)));
    for (let e = 0; e < s.nExperts; e++) w.set(ggmlQuantize(type, randomArray(r, s.n * k, -1, 1), s.n, k), e * stride);
    return w;
  };
  const w = experts();
  const gateUp = typeof form !== 'object' ? null : 'gateUp' in form ? form.gateUp : 'gateUpMm' in form ? form.gateUpMm : null;
  const gateUpMm = typeof form === 'object' && 'gateUpMm' in form;
  const u = gateUp ? experts() : new Uint8Array(0);
  const swiglu = form === 'swiglu';
  const xRows = swiglu ? pairs : s.nTokens;
  const x = Float32Array.from(randomArray(r, xRows * k, swiglu ? -3 : -1, swiglu ? 3 : 1));
  const xu = swiglu ? Float32Array.from(randomArray(r, pairs * k, -1, 1)) : new Float32Array(0);
  const al = (b: number): number => Math.ceil(b / 16) * 16;
  const xAt = 48;
  const wAt = al(xAt + 4 * x.length) + 32;
  const uAt = wAt + al(w.length) + 16;
  const root = dev.alloc('u8', [uAt + al(Math.max(u.length, 4 * xu.length)) + 48]);
  root.write(Uint8Array.from({ length: root.byteLength }, () => Math.floor(r.uniform(0, 256))));
  const xv = root.view('f32', [xRows, k], xAt);
  xv.write(x);
  const wv = root.view('u8', [w.length], wAt);
  wv.write(w);
  const outRoot = dev.alloc('f32', [pairs * s.n + 24]);
  outRoot.fill(Number.NaN);
  const output = outRoot.view('f32', [pairs, s.n], 32);
  const idBuf = dev.upload('u32', [pairs], ids);
  const sizes = { nTokens: s.nTokens, topK: s.topK, n: s.n, k, nExperts: s.nExperts, expertStride: s.pad === undefined ? undefined : stride, ggmlType: type };
  const held: Buffer[] = [root, outRoot, idBuf];
  const want = gateUp ? ggmlGateUpIdRef(x, w, u, ids, sizes, gateUp)
    : swiglu ? ggmlSwigluIdRef(x, xu, w, ids, sizes) : ggmlMatmulIdRef(x, w, ids, sizes);
  if (swiglu) {
    const upv = root.view('f32', [pairs, k], uAt);
    upv.write(xu);
    run(dev, (e) => quantizedMatmulIdSwigluQ4_0(e, { gate: xv, up: upv, weight: wv, ids: idBuf, output, ...sizes }));
  } else if (gateUp && !gateUpMm) {
    const uv = root.view('u8', [u.length], uAt);
    uv.write(u);
    run(dev, (e) => quantizedMatmulIdGgmlGateUp(e, { input: xv, gateWeight: wv, upWeight: uv, ids: idBuf, output, activation: gateUp, ...sizes }));
  } else if (form === 'vector') {
    run(dev, (e) => quantizedMatmulIdGgml(e, { input: xv, weight: wv, ids: idBuf, output, ...sizes }));
  } else {
    const offsets = dev.alloc('u32', [s.nExperts + 2]);
    const order = dev.alloc('u32', [pairs]);
    held.push(offsets, order);
    const args = { input: xv, weight: wv, offsets, order, output, ...sizes };
    const plan = typeof form === 'object' && 'matrix' in form ? form.matrix ?? null : null;
    const limits = plan === null ? dev.limits : plan === 'tiles' ? { ...dev.limits, computeCapability: 0 }
      : { ...dev.limits, computeCapability: 90, maxThreadgroupMemory: Math.max(dev.limits.maxThreadgroupMemory, ggmlIdMmWgSharedBytes(type)) };
    let planned = () => planQuantizedMatmulIdGgmlMm(args, limits, dev);
    if (gateUpMm) {
      const uv = root.view('u8', [u.length], uAt);
      uv.write(u);
      const { weight: _, ...io } = args;
      planned = () => planQuantizedMatmulIdGgmlMmGateUp({ ...io, gateWeight: wv, upWeight: uv, activation: gateUp! }, limits, dev);
    }
    if (plan) {
      // Each plan's shapes are ones it takes: the few-pairs form's average under 8 an expert, the many-pairs form's 8 or more.
      const kernel = planned().dispatches[0]!.kernel;
      expect(kernel.slice(kernel.lastIndexOf('_f32') + 4)).toBe(`${gateUpMm ? '_gate_up' : ''}${plan === 'tiles' ? '' : `_${plan}`}`);
    }
    run(dev, (e) => {
      moeDispatchSort(e, { ids: idBuf, offsets, order, nPairs: pairs, numExperts: s.nExperts });
      record(e, planned());
    });
  }
  const got = output.readNumbers();
  if (gateUp) {
    // An activation deep in its tail (gelu_tanh of a gate below about -10) gives products below f32's smallest normal,
    // which Metal flushes to zero: an absolute error within 2^-126 counts as none.
    for (let i = 0; i < got.length; i++) if (Math.abs(got[i]! - want.y[i]!) <= 2 ** -126) got[i] = want.y[i]!;
  }
  if (gateUp) {
    const ga = ggmlMatmulIdRef(x, w, ids, sizes).abs, ua = ggmlMatmulIdRef(x, u, ids, sizes).abs;
    for (let i = 0; i < got.length; i++) if (ids[Math.floor(i / s.n)]! < s.nExperts) want.abs[i]! += tol * ga[i]! * ua[i]!;
  }
  const err = dotErr(got, want.y, want.abs);
  const all = outRoot.readNumbers();
  const outside = [...all.slice(0, 8), ...all.slice(8 + pairs * s.n)];
  for (const b of held) b.release();
  return outside.every(Number.isNaN) ? err : Infinity;
}

/** Ids [pairs]: experts below `used` (so experts used .. nExperts - 1 get no pair), and where `bad` some past the experts. */
function idsOf(seed: number, pairs: number, nExperts: number, used: number, bad: boolean): number[] {
  const r = rng(seed);
  return Array.from({ length: pairs }, (_, p) => (bad && p % 5 === 3 ? nExperts + Math.floor(r.uniform(0, 1e9)) : Math.floor(r.uniform(0, used))));
}

describeBackends('quantized_matmul_id_ggml parity', ({ device, backend }) => {
  // CUDA's plain vector form on the int8 engine rounds x to int8 a chunk of 32 values (about bf16's 8 bits:
  // ggmlIdI8Launch, which takes it by format and k).
  const tolOf = (form: Form, k: number, type?: GgmlQuantType): number =>
    dotTolerance(backend !== 'cuda' && form !== 'matrix' ? 'f32'
      : backend === 'cuda' && form === 'vector' && type !== undefined && ggmlIdI8Launch(type, 1, 1, k) !== null ? 'bf16' : 'f16', k);
  // [shape, experts used of nExperts, ids past the experts]: one token, several tokens, a down projection over pairs (topK 1),
  // experts without pairs, odd n under and past the tiles, experts further apart than their bytes.
  const VECTOR: readonly [Shape, number, boolean][] = [
    [{ nTokens: 1, topK: 4, n: 7, blocks: 1, nExperts: 9 }, 9, false],
    [{ nTokens: 3, topK: 2, n: 33, blocks: 2, nExperts: 5, pad: 18 }, 3, true],
    [{ nTokens: 6, topK: 1, n: 1, blocks: 1, nExperts: 4 }, 4, true],
    // k 704 for Q8_0 (22 blocks), decode's 8 pairs with ids past the experts.
    [{ nTokens: 1, topK: 8, n: 37, blocks: 22, nExperts: 9 }, 9, true],
  ];
  const MATRIX: readonly [Shape, number, boolean][] = [
    [{ nTokens: 9, topK: 2, n: 37, blocks: 1, nExperts: 6 }, 4, true],
    [{ nTokens: 40, topK: 2, n: 70, blocks: 2, nExperts: 3, pad: 18 }, 3, false],
    [{ nTokens: 70, topK: 1, n: 130, blocks: 1, nExperts: 5 }, 2, true],
  ];
  for (const type of GGML_QUANT_TYPES) {
    test(`${type}: both forms at odd sizes, empty experts, ids past the experts, views, a NaN-poisoned output`, () => {
      const dev = device();
      const over: string[] = [];
      let seed = 1;
      for (const [form, shapes] of [['vector', VECTOR], ['matrix', MATRIX]] as const) {
        for (const [s, used, bad] of shapes) {
          const k = ggmlBlockOf(type).qk * s.blocks;
          const ids = idsOf(seed * 31, s.nTokens * s.topK, s.nExperts, used, bad);
          const e = product(dev, type, s, ids, form, seed++ * 7919 + k);
          if (!(e <= tolOf(form, k, type))) over.push(`${form} ${JSON.stringify(s)}: ${e}`);
        }
      }
      expect(over).toEqual([]);
    }, 120_000);
  }

  // The matrix form planned two ways on every backend (cuda: the few-pairs engine or the wgmma tiles, and the 64-row
  // tiles; the emulator: their entries' Metal twins and the matrix kernel), each form at shapes it takes.
  // Few pairs: a short prompt's spread (64 pairs over 20 of 24 experts, ids past them, n past a CUDA block's 16 rows,
  // experts further apart than their bytes); 80 pairs over 3 of 12 experts (slots of 8 of one expert, the last
  // short); n 1.
  const FEW: readonly [Shape, number, boolean][] = [
    [{ nTokens: 16, topK: 4, n: 37, blocks: 2, nExperts: 24, pad: 18 }, 20, true],
    [{ nTokens: 40, topK: 2, n: 20, blocks: 1, nExperts: 12 }, 3, false],
    [{ nTokens: 5, topK: 3, n: 1, blocks: 3, nExperts: 4 }, 4, true],
  ];
  // Many pairs (cuda: wgmma tiles of 128 pairs on compute capability 9.0): 200 pairs over 4 of 5 experts (about 40
  // an expert, one without pairs, ids past them, n past a tile's 128 rows, experts further apart than their bytes:
  // Q4_K's and Q5_K's rows off 16-byte alignment, so raw_fetch's path); one expert of 160 pairs (two slots, the
  // second short; aligned: Q4_K's and Q5_K's units' copies); n 1 with k of 3 blocks (Q4_0 and Q8_0: a last k step
  // of one 32-value chunk).
  const WG: readonly [Shape, number, boolean][] = [
    [{ nTokens: 100, topK: 2, n: 130, blocks: 1, nExperts: 5, pad: 18 }, 4, true],
    [{ nTokens: 160, topK: 1, n: 20, blocks: 2, nExperts: 1 }, 1, false],
    [{ nTokens: 40, topK: 1, n: 1, blocks: 3, nExperts: 1 }, 1, false],
  ];
  const PLANNED: readonly ['few' | 'wg', string, readonly [Shape, number, boolean][], number][] = [
    ['few', 'the few-pairs form', FEW, 301],
    ['wg', 'the many-pairs form', WG, 501],
  ];
  for (const [form, what, shapes, seed0] of PLANNED) {
    for (const type of GGML_QUANT_TYPES) {
      test(`${type}: the matrix form as ${what} and as 64-row tiles, a NaN-poisoned output`, () => {
        const dev = device();
        const over: string[] = [];
        let seed = seed0;
        for (const plan of [form, 'tiles'] as const) {
          for (const [s, used, bad] of shapes) {
            const k = ggmlBlockOf(type).qk * s.blocks;
            const ids = idsOf(seed * 31, s.nTokens * s.topK, s.nExperts, used, bad);
            const e = product(dev, type, s, ids, { matrix: plan }, seed++ * 7919 + k);
            if (!(e <= tolOf('matrix', k))) over.push(`${plan} ${JSON.stringify(s)}: ${e}`);
          }
        }
        expect(over).toEqual([]);
      }, 120_000);
    }
  }

  // The gate/up form: decode (1 token, top-8 of 12 experts drawn from the first 5, so experts repeat and 7 get none; n = 9 past
  // a CUDA block's 8 rows), several tokens with ids past the experts and experts further apart than their bytes, a one-row n.
  const GATE_UP: readonly [Shape, number, boolean][] = [
    [{ nTokens: 1, topK: 8, n: 9, blocks: 2, nExperts: 12 }, 5, false],
    [{ nTokens: 3, topK: 2, n: 33, blocks: 1, nExperts: 5, pad: 18 }, 3, true],
    [{ nTokens: 2, topK: 3, n: 1, blocks: 1, nExperts: 4 }, 4, true],
  ];
  for (const type of GGML_QUANT_TYPES) {
    test(`${type}: the gate/up form, silu and gelu_tanh, repeated and empty experts, ids past them, views, a NaN-poisoned output`, () => {
      const dev = device();
      const over: string[] = [];
      let seed = 101;
      for (const act of GATE_ACTIVATIONS) {
        for (const [s, used, bad] of GATE_UP) {
          const k = ggmlBlockOf(type).qk * s.blocks;
          const ids = idsOf(seed * 31, s.nTokens * s.topK, s.nExperts, used, bad);
          const form: Form = { gateUp: act };
          const e = product(dev, type, s, ids, form, seed++ * 7919 + k, tolOf(form, k));
          if (!(e <= tolOf(form, k))) over.push(`${act} ${JSON.stringify(s)}: ${e}`);
        }
      }
      expect(over).toEqual([]);
    }, 120_000);
  }

  // The gate/up matrix form, planned as each of CUDA's forms (the emulator: their entries' Metal twins) and as the 64-row
  // tiles, at the shapes each takes (few and many pairs an expert, as the plain matrix form's tests above), and as the op
  // plans it at the matrix form's shapes; the activations alternate.
  const GATE_UP_MM: readonly ['few' | 'wg' | 'tiles' | undefined, readonly [Shape, number, boolean][]][] = [
    ['few', FEW], ['wg', WG], ['tiles', [FEW[0]!, WG[0]!]], [undefined, MATRIX],
  ];
  for (const type of GGML_QUANT_TYPES) {
    test(`${type}: the gate/up matrix form as each CUDA form and as planned, silu and gelu_tanh, a NaN-poisoned output`, () => {
      const dev = device();
      const over: string[] = [];
      let seed = 901;
      for (const [plan, shapes] of GATE_UP_MM) {
        for (const [s, used, bad] of shapes) {
          const k = ggmlBlockOf(type).qk * s.blocks;
          const ids = idsOf(seed * 31, s.nTokens * s.topK, s.nExperts, used, bad);
          const form: Form = { gateUpMm: seed % 2 === 0 ? 'silu' : 'gelu_tanh', ...(plan ? { matrix: plan } : {}) };
          const e = product(dev, type, s, ids, form, seed++ * 7919 + k, tolOf('matrix', k));
          if (!(e <= tolOf('matrix', k))) over.push(`${JSON.stringify(form)} ${JSON.stringify(s)}: ${e}`);
        }
      }
      expect(over).toEqual([]);
    }, 120_000);
  }

  // Q8_0 at one token a pair (on CUDA the plain form on the int8 engine, 4 rows a warp at k 704 and 736 and 1 at 2112;
  // the gate/up form on the group-column engine): decode's 8 pairs at Gemma 4's expert down (k 704: two rounds of 8
  // blocks and 6 more) with n past a tile; experts 4 bytes further apart than their bytes (rows on 4 bytes) at k 2112
  // with ids past them; k 736 (23 blocks: rows on 2 bytes) with experts 18 bytes apart past theirs; the gate/up form at
  // each.
  test('Q8_0: the vector and gate/up forms at k 704, 2112 and 736, experts on 4 and on 2 bytes, ids past them', () => {
    const dev = device();
    const over: string[] = [];
    const shapes: readonly [Shape, number, boolean][] = [
      [{ nTokens: 1, topK: 8, n: 37, blocks: 22, nExperts: 16 }, 16, false],
      [{ nTokens: 3, topK: 2, n: 20, blocks: 66, nExperts: 6, pad: 4 }, 4, true],
      [{ nTokens: 2, topK: 4, n: 17, blocks: 23, nExperts: 5, pad: 18 }, 5, false],
    ];
    let seed = 501;
    for (const form of ['vector', { gateUp: 'silu' }, { gateUp: 'gelu_tanh' }] as const) {
      for (const [s, used, bad] of shapes) {
        const k = 32 * s.blocks;
        const ids = idsOf(seed * 31, s.nTokens * s.topK, s.nExperts, used, bad);
        const e = product(dev, 'Q8_0', s, ids, form, seed++ * 7919 + k, tolOf(form, k, 'Q8_0'));
        if (!(e <= tolOf(form, k, 'Q8_0'))) over.push(`${JSON.stringify(form)} ${JSON.stringify(s)}: ${e}`);
      }
    }
    expect(over).toEqual([]);
  }, 120_000);

  // Q4_K's gate/up form where the pairs' tiles of 8 outputs number at most 2 an SM and k holds 8 super-blocks or more
  // (on CUDA kernel_mul_mv_id_q4_K_f32_gate_up_gc8, 8 warps a tile): decode's 8 pairs with n past a tile, one pair of
  // 100 outputs at Gemma 4's k 2816 (its MLP through gatedLinear: one expert); and with experts off 16 bytes (pad) and
  // ids past them, which keeps the 4-warp entry.
  test('Q4_K: the gate/up form at k 2048 and 2816, few tiles, experts on 16 bytes and off them, ids past them', () => {
    const dev = device();
    const over: string[] = [];
    const shapes: readonly [Shape, number, boolean][] = [
      [{ nTokens: 1, topK: 8, n: 37, blocks: 8, nExperts: 12 }, 5, false],
      [{ nTokens: 1, topK: 1, n: 100, blocks: 11, nExperts: 1 }, 1, false],
      [{ nTokens: 2, topK: 2, n: 20, blocks: 8, nExperts: 5, pad: 18 }, 4, true],
    ];
    let seed = 701;
    for (const act of GATE_ACTIVATIONS) {
      for (const [s, used, bad] of shapes) {
        const k = 256 * s.blocks;
        const ids = idsOf(seed * 31, s.nTokens * s.topK, s.nExperts, used, bad);
        const form: Form = { gateUp: act };
        const e = product(dev, 'Q4_K', s, ids, form, seed++ * 7919 + k, tolOf(form, k));
        if (!(e <= tolOf(form, k))) over.push(`${act} ${JSON.stringify(s)}: ${e}`);
      }
    }
    expect(over).toEqual([]);
  }, 120_000);

  // The swiglu down projection (Q4_0 only): decode's 8 pairs of top-8 from 5 of 12 experts (n = 9 past a simdgroup's
  // 4 rows and a threadgroup's 8), several tokens with ids past the experts and experts further apart than their bytes,
  // a one-row n.
  const SWIGLU: readonly [Shape, number, boolean][] = [
    [{ nTokens: 1, topK: 8, n: 9, blocks: 4, nExperts: 12 }, 5, false],
    [{ nTokens: 3, topK: 2, n: 37, blocks: 1, nExperts: 5, pad: 18 }, 3, true],
    [{ nTokens: 4, topK: 1, n: 1, blocks: 2, nExperts: 3 }, 3, true],
  ];
  test('Q4_0: the swiglu down projection at odd sizes, repeated and empty experts, ids past them, views, a NaN-poisoned output', () => {
    const dev = device();
    const over: string[] = [];
    let seed = 201;
    for (const [s, used, bad] of SWIGLU) {
      const k = 32 * s.blocks;
      const ids = idsOf(seed * 31, s.nTokens * s.topK, s.nExperts, used, bad);
      const e = product(dev, 'Q4_0', s, ids, 'swiglu', seed++ * 7919 + k);
      if (!(e <= tolOf('swiglu', k))) over.push(`${JSON.stringify(s)}: ${e}`);
    }
    expect(over).toEqual([]);
  });

  test('the plans name the forms and bind the crate\'s slots', () => {
    const dev = device();
    const w = dev.alloc('u8', [4 * 2 * 144]);
    const base = { input: dev.alloc('f32', [2 * 256]), weight: w, output: dev.alloc('f32', [2 * 2 * 2]), nTokens: 2, topK: 2, n: 2, k: 256, nExperts: 4, ggmlType: 'Q4_K' as const };
    const mv = planQuantizedMatmulIdGgml({ ...base, ids: dev.alloc('u32', [4]) }, dev.limits, dev).dispatches[0]!;
    const mm = planQuantizedMatmulIdGgmlMm({ ...base, offsets: dev.alloc('u32', [6]), order: dev.alloc('u32', [4]) }, dev.limits, dev).dispatches[0]!;
    // 4 pairs over 4 experts: on cuda the few-pairs form, elsewhere the matrix kernel.
    expect([mv.kernel, mm.kernel]).toEqual(['kernel_mul_mv_id_q4_K_f32', `kernel_mul_mm_id_q4_K_f32${backend === 'cuda' ? '_few' : ''}`]);
    expect([mv.grid, mv.threads]).toEqual([[1, 4, 1], [2, 32, 1]]);
    expect([mm.grid, mm.threads]).toEqual([[1, 0 + 4 + 1, 1], [128, 1, 1]]);
    const u = dev.alloc('u8', [4 * 2 * 144]);
    const { weight: _, ...io } = base;
    const gu = planQuantizedMatmulIdGgmlGateUp({ ...io, gateWeight: w, upWeight: u, ids: dev.alloc('u32', [4]) }, dev.limits, dev).dispatches[0]!;
    expect([gu.kernel, gu.grid, gu.threads]).toEqual(['kernel_mul_mv_id_q4_K_f32_gate_up', [1, 4, 1], [2, 32, 1]]);
    expect([0, 1, 2, 3, 5].map((i) => gu.buffers?.[i])).toEqual([w, io.input, io.output, expect.anything(), u]);
    // The gate/up matrix form: 32 outputs a Metal threadgroup, the matrix form's slots; on cuda the few-pairs form here.
    const [offsets, order] = [dev.alloc('u32', [6]), dev.alloc('u32', [4])];
    const gm = planQuantizedMatmulIdGgmlMmGateUp({ ...io, gateWeight: w, upWeight: u, offsets, order, activation: 'gelu_tanh' }, dev.limits, dev).dispatches[0]!;
    expect([gm.kernel, gm.grid, gm.threads]).toEqual([`kernel_mul_mm_id_q4_K_f32_gate_up${backend === 'cuda' ? '_few' : ''}`, [1, 0 + 4 + 1, 1], [128, 1, 1]]);
    expect([1, 2, 3, 4, 5, 6].map((i) => gm.buffers?.[i])).toEqual([w, io.input, offsets, order, io.output, u]);
    expect(gm.bytes?.[0]).toEqual(packGgmlMatmulIdMmGateUpParams({ ...io, activation: 'gelu_tanh' }));
    // The crate's swiglu: Q4_0 experts of 2 rows of 2 blocks, gate and up a row per pair; its grid (ceil(n / 8), pairs) of (8, 8).
    const q = { nTokens: 2, topK: 2, n: 2, k: 64, nExperts: 4, ggmlType: 'Q4_0' as const };
    const [gate, upRows] = [dev.alloc('f32', [4 * 64]), dev.alloc('f32', [4 * 64])];
    const sw = planQuantizedMatmulIdSwigluQ4_0({ ...q, gate, up: upRows, weight: dev.alloc('u8', [4 * 72]), ids: dev.alloc('u32', [4]), output: io.output }, dev.limits, dev)
      .dispatches[0]!;
    expect([sw.kernel, sw.grid, sw.threads]).toEqual(['kernel_mul_mv_id_q4_0_f32_swiglu', [1, 4, 1], [8, 8, 1]]);
    expect([1, 2, 3].map((i) => sw.buffers?.[i])).toEqual([gate, upRows, io.output]);
  });
});

opContract('quantized_matmul_id_ggml', [
  // The crate's swiglu: Q4_0, 3 tokens x top-2 (6 pairs) of 4 experts of n = 5 rows, k = 64; gate and up a row per pair.
  {
    fn: 'quantizedMatmulIdSwigluQ4_0', op: 'quantized_matmul_id_swiglu_q4_0',
    keys: {
      gate: buf(F, { freeCount: true }), up: buf(F, { freeCount: true }), weight: buf(['u8'], { freeCount: true }),
      output: out(F, { freeCount: true }), ids: buf(U32, { table: true, freeCount: true }),
      nTokens: int, topK: int, n: int, k: int, nExperts: int, expertStride: { kind: 'int?' }, ggmlType: { kind: 'enum', values: GGML_QUANT_TYPES },
    },
    make: (d) => ({
      gate: a(d, 'f32', 6 * 64), up: a(d, 'f32', 6 * 64), weight: a(d, 'u8', 4 * 180), output: a(d, 'f32', 6 * 5), ids: a(d, 'u32', 6),
      nTokens: 3, topK: 2, n: 5, k: 64, nExperts: 4, ggmlType: 'Q4_0',
    }),
    fill: (args) => ggmlBlocks(args.weight as Buffer, args.ggmlType),
  },
  // The gate/up form at the same shape, gate and up two buffers of 4 experts of 180 bytes.
  {
    fn: 'quantizedMatmulIdGgmlGateUp', op: 'quantized_matmul_id_ggml_gate_up',
    keys: {
      input: buf(F, { freeCount: true }), gateWeight: buf(['u8'], { freeCount: true }), upWeight: buf(['u8'], { freeCount: true }),
      output: out(F, { freeCount: true }), ids: buf(U32, { table: true, freeCount: true }),
      nTokens: int, topK: int, n: int, k: int, nExperts: int, expertStride: { kind: 'int?' },
      ggmlType: { kind: 'enum', values: GGML_QUANT_TYPES }, activation: { kind: 'enum', values: [...GATE_ACTIVATIONS, undefined] },
    },
    make: (d) => ({
      input: a(d, 'f32', 3 * 64), gateWeight: a(d, 'u8', 4 * 180), upWeight: a(d, 'u8', 4 * 180), output: a(d, 'f32', 6 * 5),
      ids: a(d, 'u32', 6), nTokens: 3, topK: 2, n: 5, k: 64, nExperts: 4, ggmlType: 'Q4_0', activation: 'gelu_tanh',
    }),
    fill: (args) => {
      ggmlBlocks(args.gateWeight as Buffer, args.ggmlType);
      ggmlBlocks(args.upWeight as Buffer, args.ggmlType);
    },
  },
  // The gate/up matrix form at the same shape.
  {
    fn: 'quantizedMatmulIdGgmlMmGateUp', op: 'quantized_matmul_id_ggml_mm_gate_up',
    keys: {
      input: buf(F, { freeCount: true }), gateWeight: buf(['u8'], { freeCount: true }), upWeight: buf(['u8'], { freeCount: true }),
      output: out(F, { freeCount: true }), offsets: buf(U32, { table: true, freeCount: true }), order: buf(U32, { table: true, freeCount: true }),
      nTokens: int, topK: int, n: int, k: int, nExperts: int, expertStride: { kind: 'int?' },
      ggmlType: { kind: 'enum', values: GGML_QUANT_TYPES }, activation: { kind: 'enum', values: [...GATE_ACTIVATIONS, undefined] },
    },
    make: (d) => ({
      input: a(d, 'f32', 3 * 64), gateWeight: a(d, 'u8', 4 * 180), upWeight: a(d, 'u8', 4 * 180), output: a(d, 'f32', 6 * 5),
      offsets: a(d, 'u32', 6), order: a(d, 'u32', 6), nTokens: 3, topK: 2, n: 5, k: 64, nExperts: 4, ggmlType: 'Q4_0', activation: 'silu',
    }),
    fill: (args) => {
      ggmlBlocks(args.gateWeight as Buffer, args.ggmlType);
      ggmlBlocks(args.upWeight as Buffer, args.ggmlType);
    },
  },
  // Q4_0, 3 tokens x top-2 of 4 experts of n = 5 rows, k = 64 (2 blocks of 18 bytes a row): 180 bytes an expert.
  ...(['quantizedMatmulIdGgml', 'quantizedMatmulIdGgmlMm'] as const).map((fn): Case => {
    const mm = fn.endsWith('Mm');
    return {
      fn, op: mm ? 'quantized_matmul_id_ggml_mm' : 'quantized_matmul_id_ggml',
      keys: {
        input: buf(F, { freeCount: true }), weight: buf(['u8'], { freeCount: true }), output: out(F, { freeCount: true }),
        ...(mm ? { offsets: buf(U32, { table: true, freeCount: true }), order: buf(U32, { table: true, freeCount: true }) } : { ids: buf(U32, { table: true, freeCount: true }) }),
        nTokens: int, topK: int, n: int, k: int, nExperts: int, expertStride: { kind: 'int?' },
        ggmlType: { kind: 'enum', values: GGML_QUANT_TYPES },
      },
      make: (d) => ({
        input: a(d, 'f32', 3 * 64), weight: a(d, 'u8', 4 * 180), output: a(d, 'f32', 6 * 5),
        ...(mm ? { offsets: a(d, 'u32', 6), order: a(d, 'u32', 6) } : { ids: a(d, 'u32', 6) }),
        nTokens: 3, topK: 2, n: 5, k: 64, nExperts: 4, ggmlType: 'Q4_0',
      }),
      fill: (args) => ggmlBlocks(args.weight as Buffer, args.ggmlType),
    };
  }),
]);
