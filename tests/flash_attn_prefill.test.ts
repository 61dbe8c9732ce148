// flash_attn_prefill: the param packers against the header and the .metal
// bindings (mlx-native's byte layouts and function-constant gates), the
// reference against values by hand, every validation rule of the three ops,
// and parity against the float64 reference on every backend: every head dim
// (64, 128, 256, 512: the tile entries, the llamacpp ones with 4 and 8
// simdgroups) in bf16 and f16, GQA 1, 2 and 8, sizes that are no multiple of
// any tile (1, 21, 37, 45, 70), causal, queries at an offset in a KV slot
// larger than the keys, token-major layouts, sliding windows at their edges
// (1 key, mid-tile, longer than the keys), the logit softcap, additive masks
// shared and per head, bool masks, a row that sees no key, blk tiles (the
// same bits as without them), several sequences of different lengths in one
// call, the mask builder and the tile classifier, and dispatches made the
// way mlx-native's host code makes them (bindings 0-4 only, the crate's
// constants). On CUDA the op's own launches (on Hopper the wgmma tiles of D
// 128 and 256) and, for D 128 and 256, the mma.sync launches other GPUs
// take; the CUDA launch the plan picks from the device's limits. Outputs
// start NaN-poisoned.
//
// Error measure: max |got - want| / max |v|. Each output row is a convex
// combination of v's rows, so max |v| bounds it, and every error source is
// relative to it: the output's rounding (half an ulp of |out| <= max |v|),
// on CUDA the probabilities rounded to the input type for the P V product
// (each p_j by at most 2^-9 (bf16) or 2^-11 (f16) of itself, sum p_j |v_j|
// <= max |v|), f32 sums and 2^x of the special function unit (a few f32
// ulps). So the error stays under 2^-8 (bf16) and 2^-10 (f16) of max |v|:
// TOL.bf16 = 1e-2 and TOL.f16 = 1e-3, no wider tolerance needed.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/flash_attn_prefill.metal' with { type: 'text' };
import type { Buffer, Device, DeviceLimits, FunctionConstants, TensorMapBinding } from '../ts/index.ts';
import { bufferParam, kernelParams } from '../ts/metal-source.ts';
import {
  ATTN_MASK_PARAMS_LAYOUT,
  ATTN_PARAMS_LAYOUT,
  FLASH_ATTN_PREFILL_BLK_PARAMS_LAYOUT,
  FLASH_ATTN_PREFILL_FAMILY,
  FLASH_ATTN_PREFILL_KERNELS,
  FLASH_ATTN_PREFILL_LLAMACPP_SHARED_BYTES,
  FLASH_ATTN_PREFILL_MASK_PARAMS_LAYOUT,
  FLASH_ATTN_PREFILL_SOURCES,
  flashAttnPrefill,
  flashAttnPrefillBlk,
  flashAttnPrefillBlkTile,
  flashAttnPrefillCudaTile,
  FLASH_ATTN_PREFILL_HOPPER_STATIC_BYTES,
  flashAttnPrefillHopperBytes,
  flashAttnPrefillUsesWgmma,
  flashAttnPrefillMask,
  flashAttnPrefillMaskThreads,
  flashAttnPrefillTile,
  packAttnMaskParams,
  packAttnParams,
  packFlashAttnPrefillMaskParams,
  planFlashAttnPrefill,
  type FlashAttnPrefillArgs,
  flashAttnPrefillBlkRef,
  flashAttnPrefillMaskRef,
  flashAttnPrefillRef,
  type FlashAttnPrefillRefShape,
} from '../ts/ops/flash_attn_prefill.ts';
import { structSize } from '../ts/params.ts';
import { record } from '../ts/plan.ts';
import { describeBackends, describeValidation, expectInvalid, maxAbs, poisoned, randomArray, rng, TARGET_LIMITS, TOL } from './helpers.ts';
import { a, buf, int, opContract, out, type Case } from './op-contract.ts';
import type { DType } from '../ts/index.ts';

/** max |got - want| / max |v| (Infinity for a NaN: a poisoned output never written). */
function attnErr(got: ArrayLike<number>, want: ArrayLike<number>, vmax: number): number {
  let worst = 0;
  for (let i = 0; i < want.length; i++) {
    const e = Math.abs(got[i]! - want[i]!) / vmax;
    if (!(e <= worst)) worst = Number.isNaN(e) ? Infinity : e;
  }
  return worst;
}

describe('flash_attn_prefill params against the header and the .metal bindings', () => {
  test("AttnParams: the crate's 160 bytes, the window in its padding, strides as ulong", () => {
    expect(structSize(ATTN_PARAMS_LAYOUT)).toBe(160);
    const at = Object.fromEntries(ATTN_PARAMS_LAYOUT.map((f) => [f.name, f.offset]));
    expect([at.B, at.scale, at.softcapping, at.NQ, at.qL_off, at.window]).toEqual([0, 24, 28, 32, 56, 60]);
    expect([at.Q_stride_b, at.K_stride_b, at.V_stride_b, at.O_stride_b, at.O_stride_l]).toEqual([64, 88, 112, 136, 152]);
    expect(structSize(ATTN_MASK_PARAMS_LAYOUT)).toBe(24);
    expect(structSize(FLASH_ATTN_PREFILL_MASK_PARAMS_LAYOUT)).toBe(16);
    expect(structSize(FLASH_ATTN_PREFILL_BLK_PARAMS_LAYOUT)).toBe(16);
  });

  test("packAttnParams writes what the crate's d256 dispatcher writes (tiles of 32 x 16, softcapping 1 when off)", () => {
    const b = packAttnParams({
      batch: 1, nHeads: 16, nKvHeads: 8, headDim: 256, seqLenQ: 100, seqLenK: 100, scale: 0.0625, bq: 32, bk: 16,
      q: [16 * 100 * 256, 100 * 256, 256], k: [8 * 100 * 256, 100 * 256, 256], v: [8 * 100 * 256, 100 * 256, 256], o: [16 * 100 * 256, 100 * 256, 256],
    });
    const v = new DataView(b.buffer);
    const i32 = (o: number): number => v.getInt32(o, true);
    expect([i32(0), i32(4), i32(8), i32(12), i32(16), i32(20)]).toEqual([1, 16, 256, 100, 100, 2]);
    expect([v.getFloat32(24, true), v.getFloat32(28, true)]).toEqual([0.0625, 1]);
    expect([i32(32), i32(36), i32(40), i32(44), i32(48), i32(52), i32(56), i32(60)]).toEqual([4, 7, 3, 6, 4, 4, 0, 0]);
    expect([v.getBigUint64(64, true), v.getBigUint64(80, true), v.getBigUint64(96, true)]).toEqual([409600n, 256n, 100n * 256n]);
    const m = new DataView(packAttnMaskParams([0, 0, 100]).buffer);
    expect([m.getBigUint64(0, true), m.getBigUint64(8, true), m.getBigUint64(16, true)]).toEqual([0n, 0n, 100n]);
    const f = new DataView(packFlashAttnPrefillMaskParams({ seqLenK: 9, qOffset: 3, causal: true }).buffer);
    expect([f.getUint32(0, true), f.getUint32(4, true), f.getInt32(8, true), f.getUint32(12, true)]).toEqual([9, 3, -1, 1]);
  });

  test('every attention entry: Q, K, V, O, params at 0-4; mask params, mask, blk, cu_seqlens gated by function constants', () => {
    const attention = FLASH_ATTN_PREFILL_KERNELS.filter((k) => !k.includes('mask_fill') && !k.includes('_blk_'));
    expect(attention.length).toBe(20);
    for (const k of attention) {
      expect(bufferParam(src, k, 3)).toMatch(/^device T\* O /);
      expect(bufferParam(src, k, 4)).toMatch(/^constant AttnParams& params/);
      expect(bufferParam(src, k, 5)).toContain('function_constant(has_mask)');
      expect(bufferParam(src, k, 6)).toContain('function_constant(has_mask)');
      expect(bufferParam(src, k, 7)).toContain('function_constant(has_blk)');
      expect(bufferParam(src, k, 8)).toContain('function_constant(has_seqlens)');
      expect(bufferParam(src, k, 9)).toContain('function_constant(has_seqlens)');
      const tg = kernelParams(src, k).some((p) => p.includes('[[threadgroup(0)]]'));
      expect([k, tg]).toEqual([k, k.includes('llamacpp')]);
    }
    expect(FLASH_ATTN_PREFILL_SOURCES.metal.at(-1)!.name).toBe(`${FLASH_ATTN_PREFILL_FAMILY}.metal`);
  });

  test("tiles: the crate's Metal geometry, the CUDA tiles within an H100's shared memory", () => {
    expect(flashAttnPrefillTile(256)).toEqual({ llamacpp: false, bq: 32, bk: 16, nsg: 4 });
    expect(flashAttnPrefillTile(512)).toEqual({ llamacpp: true, bq: 8, bk: 64, nsg: 8 });
    expect(flashAttnPrefillTile(512, 'tiles')).toEqual({ llamacpp: false, bq: 8, bk: 8, nsg: 1 });
    expect(flashAttnPrefillBlkTile({ headDim: 128 })).toEqual({ bq: 32, bk: 16 });
    expect(FLASH_ATTN_PREFILL_LLAMACPP_SHARED_BYTES).toBe(28672);
    expect(flashAttnPrefillMaskThreads(1)).toBe(32);
    expect(flashAttnPrefillMaskThreads(100)).toBe(128);
    expect(flashAttnPrefillMaskThreads(5000)).toBe(256);
    for (const d of [64, 128, 256, 512]) {
      const t = flashAttnPrefillCudaTile(d);
      expect(t.sharedBytes).toBe((t.bq + 2 * t.bk) * (d + 8) * 2);
      expect(t.sharedBytes).toBeLessThanOrEqual(TARGET_LIMITS.cuda.maxThreadgroupMemory);
    }
    expect(flashAttnPrefillCudaTile(128)).toEqual({ bq: 128, bk: 64, threads: 128, sharedBytes: 69632 });
    expect(flashAttnPrefillCudaTile(512)).toEqual({ bq: 64, bk: 32, threads: 256, sharedBytes: 133120 });
  });
  test('Hopper: D 128 and 256 take the wgmma launch (256 and 384 threads) on compute capability 9.0, the others keep theirs', () => {
    const h100 = TARGET_LIMITS.cuda;
    const a100 = { ...h100, computeCapability: 80, maxThreadgroupMemory: 166912 };
    expect([128, 256].map((d) => flashAttnPrefillUsesWgmma(d, h100))).toEqual([true, true]);
    expect([64, 512].map((d) => flashAttnPrefillUsesWgmma(d, h100))).toEqual([false, false]);
    expect([flashAttnPrefillUsesWgmma(128, a100), flashAttnPrefillUsesWgmma(128, { ...h100, computeCapability: 100 }),
      flashAttnPrefillUsesWgmma(256, { ...h100, maxThreadgroupMemory: 166912 })]).toEqual([false, false, false]);
    expect([flashAttnPrefillHopperBytes(128), flashAttnPrefillHopperBytes(256)]).toEqual([164864, 197632]);
    expect(flashAttnPrefillCudaTile(128, h100)).toEqual({ bq: 128, bk: 128, threads: 256, sharedBytes: 164864 });
    expect(flashAttnPrefillCudaTile(256, h100)).toEqual({ bq: 128, bk: 64, threads: 384, sharedBytes: 197632 });
    for (const d of [64, 512]) expect(flashAttnPrefillCudaTile(d, h100)).toEqual(flashAttnPrefillCudaTile(d));
    for (const d of [64, 128, 256, 512]) expect(flashAttnPrefillCudaTile(d, a100)).toEqual(flashAttnPrefillCudaTile(d));
    for (const d of [128, 256]) expect(flashAttnPrefillHopperBytes(d) + FLASH_ATTN_PREFILL_HOPPER_STATIC_BYTES).toBeLessThanOrEqual(h100.maxThreadgroupMemory);
    // The mbarriers' room counts: a limit of exactly the stages' bytes takes the mma.sync launch.
    expect(flashAttnPrefillUsesWgmma(256, { ...h100, maxThreadgroupMemory: flashAttnPrefillHopperBytes(256) })).toBe(false);
    expect(flashAttnPrefillUsesWgmma(256, { ...h100, maxThreadgroupMemory: flashAttnPrefillHopperBytes(256) + FLASH_ATTN_PREFILL_HOPPER_STATIC_BYTES })).toBe(true);
  });
});

describe('flash_attn_prefill reference against values by hand', () => {
  // One query over two keys, head dim 1 (the math does not care): s = (2, 0) * scale.
  const shape = (o: Partial<FlashAttnPrefillRefShape>): FlashAttnPrefillRefShape =>
    ({ batch: 1, nHeads: 1, nKvHeads: 1, headDim: 1, seqLenQ: 1, seqLenK: 2, scale: 1, causal: false, ...o });
  test('softmax of the scores, causal, window, softcap, masks', () => {
    const q = [2], k = [1, 0], v = [1, 3];
    const w0 = Math.exp(2) / (Math.exp(2) + 1);
    expect(flashAttnPrefillRef(shape({}), q, k, v)[0]).toBeCloseTo(w0 + 3 * (1 - w0), 14);
    expect(flashAttnPrefillRef(shape({ causal: true }), q, k, v)[0]).toBe(1);
    expect(flashAttnPrefillRef(shape({ causal: true, qOffset: 1, slidingWindow: 1 }), q, k, v)[0]).toBe(3);
    const capped = Math.exp(2 * Math.tanh(0.5)) / (Math.exp(2 * Math.tanh(0.5)) + 1);
    expect(flashAttnPrefillRef(shape({ softcap: 2, scale: 0.5 }), q, k, v)[0]).toBeCloseTo(capped + 3 * (1 - capped), 14);
    expect(flashAttnPrefillRef(shape({ mask: { kind: 'additive', broadcast: true, data: [-2, 0] } }), q, k, v)[0]).toBeCloseTo(2, 14);
    expect(flashAttnPrefillRef(shape({ mask: { kind: 'bool', broadcast: false, data: [0, 1] } }), q, k, v)[0]).toBe(3);
    expect(flashAttnPrefillRef(shape({ mask: { kind: 'bool', broadcast: true, data: [0, 0] } }), q, k, v)[0]).toBe(0);
  });
  test('the mask builder and the tile classes', () => {
    expect(Array.from(flashAttnPrefillMaskRef({ seqLenQ: 2, seqLenK: 4, causal: true, qOffset: 1, slidingWindow: 2 })))
      .toEqual([0, 0, -Infinity, -Infinity, -Infinity, 0, 0, -Infinity]);
    const m = [0, 0, -Infinity, -Infinity, 0, 0, -Infinity, -Infinity, 0, -1, 0, 0];
    expect(Array.from(flashAttnPrefillBlkRef(m, 3, 4, 2, 2))).toEqual([2, 0, 1, 2]);
    expect(Array.from(flashAttnPrefillBlkRef(m, 3, 4, 2, 3))).toEqual([1, 1, 1, 1]);
  });
});

describeValidation('flash_attn_prefill validation', ({ device, enc, buf }) => {
  test('the plan takes its CUDA launch from the limits: the Hopper launch at D 256 on an H100, the mma.sync one on an A100', () => {
    const [b, h, hkv, d, t] = [1, 4, 2, 256, 300];
    const args: FlashAttnPrefillArgs = {
      q: buf('bf16', b * h * t * d), k: buf('bf16', b * hkv * t * d), v: buf('bf16', b * hkv * t * d), out: buf('bf16', b * h * t * d),
      batch: b, nHeads: h, nKvHeads: hkv, headDim: d, seqLenQ: t, seqLenK: t, causal: true,
    };
    const h100 = TARGET_LIMITS.cuda;
    const a100 = { ...h100, computeCapability: 80, maxThreadgroupMemory: 166912 };
    const kMap: TensorMapBinding = { buffer: args.k, dtype: 'bf16', dims: [d, b * hkv * t], strides: [2 * d], box: [64, 64], swizzle: 128, l2Promotion: 256 };
    expect(planFlashAttnPrefill(args, h100, device()).dispatches[0]!.cuda).toEqual({
      grid: [3, h, b], threads: [384, 1, 1], threadgroupMemory: [197632], tensorMaps: { 10: kMap, 11: { ...kMap, buffer: args.v } },
    });
    expect(planFlashAttnPrefill(args, a100, device()).dispatches[0]!.cuda).toEqual({
      grid: [5, h, b], threads: [128, 1, 1], threadgroupMemory: [101376], buffers: { 10: args.q, 11: args.q },
    });
    // Token-major rows: a map row is a key of every KV head (K_stride_l elements).
    const s = { ...args, layout: 'seqMajor' as const, kvCapacity: 320, k: buf('bf16', b * hkv * 320 * d), v: buf('bf16', b * hkv * 320 * d) };
    expect(planFlashAttnPrefill(s, h100, device()).dispatches[0]!.cuda!.tensorMaps![10]).toEqual(
      { buffer: s.k, dtype: 'bf16', dims: [hkv * d, b * 320], strides: [hkv * d * 2], box: [64, 64], swizzle: 128, l2Promotion: 256 });
    // D 128's Hopper launch: 256 threads copying by cp.async, no maps.
    const d128 = { ...args, headDim: 128, q: buf('bf16', b * h * t * 128), k: buf('bf16', b * hkv * t * 128), v: buf('bf16', b * hkv * t * 128), out: buf('bf16', b * h * t * 128) };
    expect(planFlashAttnPrefill(d128, h100, device()).dispatches[0]!.cuda).toEqual({
      grid: [3, h, b], threads: [256, 1, 1], threadgroupMemory: [164864], buffers: { 10: d128.q, 11: d128.q },
    });
  });
  test('every rule of flashAttnPrefill', () => {
    const base = (): Record<string, unknown> => ({
      q: buf('bf16', 2 * 4 * 5 * 64), k: buf('bf16', 2 * 2 * 7 * 64), v: buf('bf16', 2 * 2 * 7 * 64), out: buf('bf16', 2 * 4 * 5 * 64),
      batch: 2, nHeads: 4, nKvHeads: 2, headDim: 64, seqLenQ: 5, seqLenK: 7,
    });
    type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
    const q = buf('bf16', 4096);
    const cases: Case[] = [
      [{ batch: 0 }, 'batch', 'a positive integer', '0'],
      [{ nHeads: 2.5 }, 'nHeads', 'a positive integer', '2.5'],
      [{ seqLenK: 2 ** 31 }, 'seqLenK', 'at most 2^31 - 1', `${2 ** 31}`],
      [{ headDim: 96 }, 'headDim', '64, 128, 256 or 512', '96'],
      [{ nKvHeads: 3 }, 'nHeads', 'a multiple of nKvHeads (3)', '4'],
      [{ nHeads: 65536, nKvHeads: 1 }, 'nHeads', 'at most 65535', '65536'],
      [{ batch: 65536 }, 'batch', 'at most 65535', '65536'],
      [{ kvCapacity: 0 }, 'kvCapacity', 'a positive integer or absent', '0'],
      [{ kvCapacity: 6 }, 'seqLenK', 'at most kvCapacity (6)', '7'],
      [{ qOffset: -1 }, 'qOffset', 'an integer >= 0 or absent', '-1'],
      [{ qOffset: 3 }, 'qOffset + seqLenQ', 'at most seqLenK (7)', '8'],
      [{ slidingWindow: 0 }, 'slidingWindow', 'a positive integer or absent', '0'],
      [{ scale: Number.NaN }, 'scale', 'a finite number or absent', 'NaN'],
      [{ softcap: 0 }, 'softcap', 'a finite number > 0 or absent', '0'],
      [{ causal: 1 }, 'causal', 'true, false or absent', '1'],
      [{ layout: 'hm' }, 'layout', "'headMajor', 'seqMajor' or absent", 'hm'],
      [{ d512Kernel: 'tiles' }, 'd512Kernel', 'absent unless headDim is 512', 'tiles'],
      [{ nsg: 6 }, 'nsg', '4, 8 or absent', '6'],
      [{ maxSeqLenQ: 2 }, 'maxSeqLenQ', 'absent without cuSeqlens', '2'],
      [{ cuSeqlensQ: buf('u32', 3) }, 'cuSeqlensK', 'a Buffer when cuSeqlensQ is given', 'none'],
      [{ cuSeqlensQ: buf('u32', 3), cuSeqlensK: buf('u32', 3), layout: 'headMajor' }, 'layout', "'seqMajor' or absent with cuSeqlens", 'headMajor'],
      [{ cuSeqlensQ: buf('u32', 3), cuSeqlensK: buf('u32', 3), qOffset: 1 }, 'qOffset', '0 or absent with cuSeqlens', '1'],
      [{ cuSeqlensQ: buf('u32', 3), cuSeqlensK: buf('u32', 3), mask: buf('bf16', 35) }, 'mask', 'absent with cuSeqlens', 'a bf16 buffer'],
      [{ cuSeqlensQ: buf('f32', 3), cuSeqlensK: buf('u32', 3) }, 'cuSeqlensQ.dtype', 'one of u32, i32', 'f32'],
      [{ cuSeqlensQ: buf('u32', 2), cuSeqlensK: buf('u32', 3) }, 'cuSeqlensQ.elementCount', 'at least 3', '2'],
      [{ cuSeqlensQ: buf('u32', 3), cuSeqlensK: buf('u32', 3), maxSeqLenQ: 6 }, 'maxSeqLenQ', 'at most seqLenQ (5)', '6'],
      [{ blk: buf('u8', 1) }, 'blk', 'absent without a mask', 'a u8 buffer'],
      [{ q: buf('f32', 2560) }, 'q.dtype', 'one of bf16, f16', 'f32'],
      [{ v: buf('f16', 1792) }, 'v.dtype', 'bf16', 'f16'],
      [{ k: buf('bf16', 1791) }, 'k.elementCount', 'at least 1792', '1791'],
      [{ out: buf('bf16', 2559) }, 'out.elementCount', 'at least 2560', '2559'],
      [{ mask: buf('f16', 35) }, 'mask.dtype', 'one of bf16, u8', 'f16'],
      [{ mask: buf('u8', 279) }, 'mask.elementCount', 'at least 280', '279'],
      [{ mask: buf('bf16', 280), blk: buf('f32', 1) }, 'blk.dtype', 'u8', 'f32'],
      [{ mask: buf('u8', 280), blk: buf('u8', 1) }, 'blk', 'absent with a bool mask', 'a u8 buffer'],
      [{ q, out: q }, 'out', 'a buffer other than q', 'the buffer of q'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => flashAttnPrefill(enc(), { ...base(), ...m } as unknown as FlashAttnPrefillArgs), 'flash_attn_prefill', arg, expected, actual);
    }
    // blk tiles are (32, 16) for head dim 64: 40 x 7 has ceil(40 / 32) * ceil(7 / 16) = 2 of them.
    expectInvalid(() => flashAttnPrefill(enc(), {
      ...base(), q: buf('bf16', 2 * 4 * 40 * 64), out: buf('bf16', 2 * 4 * 40 * 64), seqLenQ: 40, mask: device().alloc('bf16', [40, 7]), blk: buf('u8', 1),
    } as unknown as FlashAttnPrefillArgs), 'flash_attn_prefill', 'blk.elementCount', 'at least 2', '1');
    // The d512 options.
    const d512 = { ...base(), headDim: 512, q: buf('bf16', 2 * 4 * 5 * 512), k: buf('bf16', 2 * 2 * 7 * 512), v: buf('bf16', 2 * 2 * 7 * 512), out: buf('bf16', 2 * 4 * 5 * 512) };
    expectInvalid(() => flashAttnPrefill(enc(), { ...d512, d512Kernel: 'tiles', nsg: 4 } as unknown as FlashAttnPrefillArgs), 'flash_attn_prefill', 'nsg', "absent with d512Kernel 'tiles'", '4');
    expectInvalid(() => flashAttnPrefill(enc(), { ...d512, d512Kernel: 'x' } as unknown as FlashAttnPrefillArgs), 'flash_attn_prefill', 'd512Kernel', "'llamacpp', 'tiles' or absent", 'x');
  });

  test('every rule of flashAttnPrefillMask and flashAttnPrefillBlk', () => {
    const mk = (): Record<string, unknown> => ({ mask: buf('bf16', 20), seqLenQ: 4, seqLenK: 5, causal: true });
    const op = 'flash_attn_prefill_mask';
    const run = (m: Record<string, unknown>): void => flashAttnPrefillMask(enc(), { ...mk(), ...m } as never);
    expectInvalid(() => run({ seqLenQ: 0 }), op, 'seqLenQ', 'a positive integer', '0');
    expectInvalid(() => run({ seqLenK: 2 ** 32 }), op, 'seqLenK', 'at most 2^32 - 1', `${2 ** 32}`);
    expectInvalid(() => run({ causal: undefined }), op, 'causal', 'true or false', 'undefined');
    expectInvalid(() => run({ slidingWindow: 0 }), op, 'slidingWindow', 'a positive integer or absent (the crate refuses a window of 0)', '0');
    expectInvalid(() => run({ qOffset: 0.5 }), op, 'qOffset', 'an integer >= 0 or absent', '0.5');
    expectInvalid(() => run({ mask: buf('f32', 20) }), op, 'mask.dtype', 'one of bf16, f16', 'f32');
    expectInvalid(() => run({ mask: buf('f16', 19) }), op, 'mask.elementCount', 'at least 20', '19');
    const bk = (): Record<string, unknown> => ({ mask: buf('bf16', 40 * 50), blk: buf('u8', 8), seqLenQ: 40, seqLenK: 50, bq: 32, bk: 16 });
    const ob = 'flash_attn_prefill_blk';
    const runB = (m: Record<string, unknown>): void => flashAttnPrefillBlk(enc(), { ...bk(), ...m } as never);
    expectInvalid(() => runB({ bq: 0 }), ob, 'bq', 'a positive integer', '0');
    expectInvalid(() => runB({ bk: 2 ** 31 }), ob, 'bk', 'at most 2^31 - 1', `${2 ** 31}`);
    expectInvalid(() => runB({ mask: buf('u8', 2000) }), ob, 'mask.dtype', 'one of bf16, f16', 'u8');
    expectInvalid(() => runB({ blk: buf('i32', 8) }), ob, 'blk.dtype', 'u8', 'i32');
    expectInvalid(() => runB({ mask: buf('bf16', 1999) }), ob, 'mask.elementCount', 'at least 2000', '1999');
    expectInvalid(() => runB({ blk: buf('u8', 7) }), ob, 'blk.elementCount', 'at least 8', '7');
    const m = buf('bf16', 2000);
    expectInvalid(() => runB({ mask: m, blk: m.view('u8', [8]) }), ob, 'blk', 'a buffer other than mask', 'a view overlapping mask');
  });
});

// ---- parity ----

/** One argument set: the reference's shape (scale and causal optional, as the op takes them), and how to run it. */
interface Run extends Omit<FlashAttnPrefillRefShape, 'scale' | 'causal' | 'cuSeqlensQ' | 'cuSeqlensK' | 'mask'>,
  Partial<Pick<FlashAttnPrefillRefShape, 'scale' | 'causal'>> {
  what: string;
  dtype: 'bf16' | 'f16';
  /** Plan with these limits instead of the device's (the CUDA launch follows them). */
  limits?: DeviceLimits;
  mask?: 'additive' | 'additiveHeads' | 'bool' | 'boolHeads';
  blk?: boolean;
  cuSeqlensQ?: number[];
  cuSeqlensK?: number[];
  cuDtype?: 'u32' | 'i32';
  d512Kernel?: 'llamacpp' | 'tiles';
  nsg?: 4 | 8;
  /** Key row r scaled by 1 + keyRamp r (headMajor, no cuSeqlens): scores grow along the keys, so a row's running maximum rises by many units from one key tile to the next and O is rescaled by factors far below 1. */
  keyRamp?: number;
}

/** Runs one argument set on the device with fresh random inputs; returns the error and the output's bits. */
function runAttention(dev: Device, c: Run, seed: number): { err: number; out: Float64Array; bits: Uint16Array } {
  const r = rng(seed);
  const varlen = c.cuSeqlensQ !== undefined;
  const cap = c.kvCapacity ?? c.seqLenK;
  const qn = (varlen ? 1 : c.batch) * c.nHeads * c.seqLenQ * c.headDim;
  const kn = (varlen ? 1 : c.batch) * c.nKvHeads * cap * c.headDim;
  const q = dev.upload(c.dtype, [qn], randomArray(r, qn, -1.5, 1.5));
  const kData = randomArray(r, kn, -1.5, 1.5);
  if (c.keyRamp !== undefined) {
    for (let i = 0; i < kn; i++) kData[i]! *= 1 + c.keyRamp * (Math.floor(i / c.headDim) % cap);
  }
  const k = dev.upload(c.dtype, [kn], kData);
  const v = dev.upload(c.dtype, [kn], randomArray(r, kn, -1, 1));
  const out = poisoned(dev, c.dtype, [qn]);
  let mask: Buffer | undefined;
  let maskRef: FlashAttnPrefillRefShape['mask'];
  if (c.mask !== undefined) {
    const heads = c.mask.endsWith('Heads');
    const n = (heads ? c.batch * c.nHeads : 1) * c.seqLenQ * c.seqLenK;
    const bool = c.mask.startsWith('bool');
    // Additive: 0 on a causal band of 24 keys, -inf past it, finite values on every other 16-row band.
    const data = Array.from({ length: n }, (_, i) => {
      const row = Math.floor(i / c.seqLenK) % c.seqLenQ, col = i % c.seqLenK;
      if (bool) return r.next() < 0.3 ? 0 : 1;
      if (col > row + 3 || row - col >= 24) return -Infinity;
      return Math.floor(row / 16) % 2 === 1 ? Math.round(r.uniform(-4, 2)) / 2 : 0;
    });
    mask = dev.upload(bool ? 'u8' : c.dtype, heads ? [c.batch, c.nHeads, c.seqLenQ, c.seqLenK] : [c.seqLenQ, c.seqLenK], data);
    maskRef = { kind: bool ? 'bool' : 'additive', broadcast: !heads, data: mask.readNumbers() };
  }
  let blk: Buffer | undefined;
  if (c.blk) {
    const t = flashAttnPrefillBlkTile(c);
    blk = dev.alloc('u8', [Math.ceil(c.seqLenQ / t.bq) * Math.ceil(c.seqLenK / t.bk)]);
  }
  const cuQ = varlen ? dev.upload(c.cuDtype ?? 'u32', [c.cuSeqlensQ!.length], c.cuSeqlensQ!) : undefined;
  const cuK = varlen ? dev.upload(c.cuDtype ?? 'u32', [c.cuSeqlensK!.length], c.cuSeqlensK!) : undefined;
  const args: FlashAttnPrefillArgs = {
    q, k, v, out, batch: c.batch, nHeads: c.nHeads, nKvHeads: c.nKvHeads, headDim: c.headDim, seqLenQ: c.seqLenQ, seqLenK: c.seqLenK,
    kvCapacity: c.kvCapacity, scale: c.scale, causal: c.causal, qOffset: c.qOffset, slidingWindow: c.slidingWindow, softcap: c.softcap,
    layout: c.layout, mask, blk, cuSeqlensQ: cuQ, cuSeqlensK: cuK, d512Kernel: c.d512Kernel, nsg: c.nsg,
    maxSeqLenQ: varlen ? Math.max(...c.cuSeqlensQ!.slice(1).map((x, i) => x - c.cuSeqlensQ![i]!)) : undefined,
  };
  const enc = dev.encoder();
  if (blk !== undefined) {
    const t = flashAttnPrefillBlkTile(c);
    flashAttnPrefillBlk(enc, { mask: mask!, blk, seqLenQ: c.seqLenQ, seqLenK: c.seqLenK, bq: t.bq, bk: t.bk });
  }
  if (c.limits !== undefined) record(enc, planFlashAttnPrefill(args, c.limits, dev));
  else flashAttnPrefill(enc, args);
  enc.commitAndWait();
  enc.release();
  const want = flashAttnPrefillRef({
    ...c, scale: c.scale ?? 1 / Math.sqrt(c.headDim), causal: c.causal === true, mask: maskRef,
  }, q.readNumbers(), k.readNumbers(), v.readNumbers());
  const got = out.readNumbers();
  const bits = new Uint16Array(out.read().buffer.slice(0));
  const err = attnErr(got, want, maxAbs(v.readNumbers()));
  for (const b of [q, k, v, out, mask, blk, cuQ, cuK]) b?.release();
  return { err, out: got, bits };
}

describeBackends('flash_attn_prefill parity', ({ device, backend }) => {
  const check = (runs: readonly Run[]): void => {
    const dev = device();
    const over: string[] = [];
    let worst = 0;
    runs.forEach((c, i) => {
      const { err } = runAttention(dev, c, 1000 + i);
      if (!(err < TOL[c.dtype])) over.push(`${c.what} (${c.dtype}, d${c.headDim}): ${err}`);
      worst = Math.max(worst, err);
    });
    if (process.env.MLXN_PRINT_ERRORS) console.log(`flash_attn_prefill: largest error ${worst}`);
    expect(over).toEqual([]);
  };

  test('every head dim and dtype: GQA 1, 2 and 8, query and key counts past one tile and no multiple of it', () => {
    const runs: Run[] = [];
    for (const headDim of [64, 128, 256, 512]) {
      for (const dtype of ['bf16', 'f16'] as const) {
        for (const [nHeads, nKvHeads] of [[2, 2], [4, 2], [8, 1]] as const) {
          runs.push({ what: `GQA ${nHeads / nKvHeads}`, dtype, batch: 2, nHeads, nKvHeads, headDim, seqLenQ: 37, seqLenK: 45, scale: headDim === 64 ? 0.5 : undefined });
        }
      }
    }
    check(runs);
  });

  test('scores growing along the keys: O rescaled past the first key tile by factors far below 1', () => {
    const runs: Run[] = [];
    for (const headDim of [64, 128, 256, 512]) {
      for (const dtype of ['bf16', 'f16'] as const) {
        runs.push({ what: 'keys growing', dtype, batch: 1, nHeads: 2, nKvHeads: 1, headDim, seqLenQ: 40, seqLenK: 300, keyRamp: 0.05 });
      }
      runs.push({ what: 'keys growing, causal', dtype: 'bf16', batch: 1, nHeads: 2, nKvHeads: 1, headDim, seqLenQ: 40, seqLenK: 300, qOffset: 260, causal: true, keyRamp: 0.05 });
    }
    check(runs);
  });

  test('causal: the diagonal, queries at an offset in a larger KV slot, one key, one query', () => {
    const runs: Run[] = [];
    for (const headDim of [64, 128, 256, 512]) {
      runs.push(
        { what: 'causal 40 x 40', dtype: 'bf16', batch: 1, nHeads: 2, nKvHeads: 1, headDim, seqLenQ: 40, seqLenK: 40, causal: true },
        { what: 'causal 21 queries at 20 of 41 keys, slot 64', dtype: 'f16', batch: 2, nHeads: 2, nKvHeads: 2, headDim, seqLenQ: 21, seqLenK: 41, kvCapacity: 64, qOffset: 20, causal: true },
        { what: 'one key', dtype: 'bf16', batch: 1, nHeads: 1, nKvHeads: 1, headDim, seqLenQ: 1, seqLenK: 1, causal: true },
        { what: 'one query after 32 keys', dtype: 'bf16', batch: 1, nHeads: 2, nKvHeads: 1, headDim, seqLenQ: 1, seqLenK: 33, qOffset: 32, causal: true },
      );
    }
    // Several query tiles and key steps of every CUDA launch (the Hopper one's 128 rows and 128 or 64 keys a step).
    for (const headDim of [128, 256]) {
      runs.push({ what: 'causal 300 x 300', dtype: 'bf16', batch: 1, nHeads: 2, nKvHeads: 1, headDim, seqLenQ: 300, seqLenK: 300, causal: true });
    }
    check(runs);
  });

  // On Hopper the op takes the wgmma launch for D 128 and 256; the mma.sync
  // launch other GPUs take (an A100's limits), dispatched on the same device.
  test.skipIf(backend !== 'cuda')('CUDA: the mma.sync launches of D 128 and 256 beside the Hopper ones', () => {
    const a100: DeviceLimits = { ...device().limits, computeCapability: 80, maxThreadgroupMemory: 166912 };
    const runs: Run[] = [];
    for (const headDim of [128, 256]) {
      for (const limits of [a100, undefined]) {
        runs.push(
          { what: 'causal 300 x 300', dtype: 'bf16', batch: 1, nHeads: 4, nKvHeads: 1, headDim, seqLenQ: 300, seqLenK: 300, causal: true, limits },
          { what: 'window 50, softcap, mask', dtype: 'f16', batch: 2, nHeads: 2, nKvHeads: 1, headDim, seqLenQ: 70, seqLenK: 150, qOffset: 80, slidingWindow: 50, softcap: 30, mask: 'additive', limits },
        );
      }
    }
    check(runs);
  });

  test('sliding windows: 1 key, ending mid-tile, longer than the keys; with and without causal', () => {
    const runs: Run[] = [];
    for (const headDim of [64, 256, 512]) {
      for (const slidingWindow of [1, 17, 100]) {
        runs.push({ what: `causal window ${slidingWindow}`, dtype: 'bf16', batch: 1, nHeads: 2, nKvHeads: 1, headDim, seqLenQ: 45, seqLenK: 70, qOffset: 25, causal: true, slidingWindow });
      }
      runs.push({ what: 'window 9, not causal', dtype: 'f16', batch: 1, nHeads: 2, nKvHeads: 2, headDim, seqLenQ: 33, seqLenK: 33, slidingWindow: 9 });
    }
    check(runs);
  });

  test('token-major layouts, a KV slot, the logit softcap', () => {
    check([
      { what: 'token-major (the crate\'s d64 SeqMajor)', dtype: 'bf16', batch: 2, nHeads: 4, nKvHeads: 4, headDim: 64, seqLenQ: 33, seqLenK: 33, layout: 'seqMajor' },
      { what: 'token-major, causal, slot 50', dtype: 'f16', batch: 1, nHeads: 4, nKvHeads: 2, headDim: 128, seqLenQ: 20, seqLenK: 40, kvCapacity: 50, qOffset: 20, causal: true, layout: 'seqMajor' },
      { what: 'softcap 30, causal', dtype: 'bf16', batch: 1, nHeads: 2, nKvHeads: 1, headDim: 256, seqLenQ: 37, seqLenK: 37, causal: true, softcap: 30, scale: 1 },
      { what: 'softcap 5, causal, 9 queries after 21 keys', dtype: 'f16', batch: 1, nHeads: 2, nKvHeads: 2, headDim: 512, seqLenQ: 9, seqLenK: 30, qOffset: 21, causal: true, softcap: 5, scale: 0.5 },
    ]);
  });

  test('masks: additive shared and per head, bool shared and per head (rows that see no key are 0)', () => {
    const runs: Run[] = [];
    for (const headDim of [64, 128, 256, 512]) {
      runs.push(
        { what: 'additive [qL, kL]', dtype: 'bf16', batch: 2, nHeads: 2, nKvHeads: 1, headDim, seqLenQ: 40, seqLenK: 50, mask: 'additive' },
        { what: 'additive per head, causal', dtype: 'f16', batch: 1, nHeads: 2, nKvHeads: 2, headDim, seqLenQ: 37, seqLenK: 37, mask: 'additiveHeads', causal: true },
        { what: 'bool [qL, kL]', dtype: 'bf16', batch: 1, nHeads: 2, nKvHeads: 1, headDim, seqLenQ: 21, seqLenK: 45, mask: 'bool' },
        { what: 'bool per head', dtype: 'f16', batch: 2, nHeads: 2, nKvHeads: 1, headDim, seqLenQ: 9, seqLenK: 20, mask: 'boolHeads' },
      );
    }
    check(runs);
  });

  test('blk: the tile classes skip what they may, the same bits as without them', () => {
    const dev = device();
    for (const [headDim, d512Kernel] of [[64, undefined], [256, undefined], [512, 'llamacpp'], [512, 'tiles']] as const) {
      const c: Run = { what: 'blk', dtype: 'bf16', batch: 1, nHeads: 2, nKvHeads: 1, headDim, seqLenQ: 70, seqLenK: 80, mask: 'additive', d512Kernel, causal: true };
      const a = runAttention(dev, c, 77);
      const b = runAttention(dev, { ...c, blk: true }, 77);
      expect([headDim, d512Kernel, a.err < TOL.bf16]).toEqual([headDim, d512Kernel, true]);
      expect([headDim, d512Kernel, Array.from(b.bits)]).toEqual([headDim, d512Kernel, Array.from(a.bits)]);
    }
  });

  test('several sequences in one call: different lengths, one continuing earlier turns, one with no queries', () => {
    // Queries 5, 1, 30, 0; keys 5, 61 (the one query continues 60 earlier keys), 30, 24.
    const cuSeqlensQ = [0, 5, 6, 36, 36];
    const cuSeqlensK = [0, 5, 66, 96, 120];
    const runs: Run[] = [];
    for (const headDim of [64, 128, 256, 512]) {
      runs.push(
        { what: 'varlen causal', dtype: 'bf16', batch: 4, nHeads: 4, nKvHeads: 2, headDim, seqLenQ: 36, seqLenK: 120, causal: true, cuSeqlensQ, cuSeqlensK },
        { what: 'varlen causal window 7, i32 offsets', dtype: 'f16', batch: 4, nHeads: 2, nKvHeads: 1, headDim, seqLenQ: 36, seqLenK: 120, causal: true, slidingWindow: 7, cuSeqlensQ, cuSeqlensK, cuDtype: 'i32' },
      );
    }
    runs.push({ what: 'varlen, 2 sequences, window 12', dtype: 'bf16', batch: 2, nHeads: 2, nKvHeads: 2, headDim: 64, seqLenQ: 40, seqLenK: 50, causal: true, slidingWindow: 12, cuSeqlensQ: [0, 7, 40], cuSeqlensK: [0, 20, 50] });
    check(runs);
  });

  test('the d512 entries: llamacpp with 4 and 8 simdgroups, the tile entries', () => {
    check([
      { what: 'llamacpp nsg 4', dtype: 'bf16', batch: 1, nHeads: 2, nKvHeads: 1, headDim: 512, seqLenQ: 19, seqLenK: 70, nsg: 4, causal: true, qOffset: 51 },
      { what: 'llamacpp nsg 8', dtype: 'f16', batch: 1, nHeads: 2, nKvHeads: 1, headDim: 512, seqLenQ: 19, seqLenK: 70, nsg: 8 },
      { what: 'tiles', dtype: 'bf16', batch: 1, nHeads: 2, nKvHeads: 2, headDim: 512, seqLenQ: 19, seqLenK: 70, d512Kernel: 'tiles', causal: true, qOffset: 51 },
    ]);
  });

  test('the mask builder and the tile classifier against their references (exact)', () => {
    const dev = device();
    for (const [dtype, seqLenQ, seqLenK, causal, slidingWindow, qOffset] of [
      ['bf16', 37, 45, true, undefined, undefined], ['f16', 20, 300, true, 17, 30], ['bf16', 9, 7, false, 3, 5],
    ] as const) {
      const mask = poisoned(dev, dtype, [seqLenQ, seqLenK]);
      const enc = dev.encoder();
      flashAttnPrefillMask(enc, { mask, seqLenQ, seqLenK, causal, slidingWindow, qOffset });
      enc.commitAndWait();
      enc.release();
      expect(Array.from(mask.readNumbers())).toEqual(Array.from(flashAttnPrefillMaskRef({ seqLenQ, seqLenK, causal, slidingWindow, qOffset })));
    }
    // Classes on a causal window mask with finite bands at the tiles of the three entry shapes (BK 64
    // is past one simdgroup's 32 lanes), the last row and column of tiles partial.
    const r = rng(5);
    for (const [dtype, seqLenQ, seqLenK, bq, bk] of [['bf16', 100, 200, 32, 16], ['f16', 43, 300, 8, 64], ['bf16', 30, 50, 8, 8]] as const) {
      const data = Array.from({ length: seqLenQ * seqLenK }, (_, i) => {
        const row = Math.floor(i / seqLenK), col = i % seqLenK;
        if (col > row + 5 || row - col >= 90) return -Infinity;
        return Math.floor(row / 16) % 3 === 1 && col % 41 === 3 ? r.uniform(-2, 0) : 0;
      });
      const mask = dev.upload(dtype, [seqLenQ, seqLenK], data);
      const n = Math.ceil(seqLenQ / bq) * Math.ceil(seqLenK / bk);
      const blk = poisoned(dev, 'u8', [n]);
      const enc = dev.encoder();
      flashAttnPrefillBlk(enc, { mask, blk, seqLenQ, seqLenK, bq, bk });
      enc.commitAndWait();
      enc.release();
      const want = flashAttnPrefillBlkRef(mask.readNumbers(), seqLenQ, seqLenK, bq, bk);
      expect([bq, bk, Array.from(blk.read() as Uint8Array)]).toEqual([bq, bk, Array.from(want)]);
      expect(new Set(want).size).toBeGreaterThan(1);
    }
  });

  // mlx-native's host code drives Metal; the CUDA twin takes one pointer per binding, so every index is bound there.
  test.skipIf(backend === 'cuda')("dispatches made as mlx-native's host code makes them: bindings 0-4 (0-6 with a mask), its constants", () => {
    const dev = device();
    const kernels = dev.kernels;
    kernels.register(FLASH_ATTN_PREFILL_FAMILY, FLASH_ATTN_PREFILL_SOURCES, FLASH_ATTN_PREFILL_KERNELS);
    const r = rng(9);
    // The crate's d256 prefill (tiles 32 x 16) and its D = 512 llamacpp kernel (8 x 64, nsg 8,
    // threadgroup(0) 28672 bytes): causal, GQA 2, unaligned lengths; the d256 one with a shared mask.
    for (const [d, kernel, bq, bk, withMask] of [
      [256, 'flash_attn_prefill_bf16_d256', 32, 16, false], [512, 'flash_attn_prefill_llamacpp_bf16_d512', 8, 64, false],
      [256, 'flash_attn_prefill_bf16_d256', 32, 16, true],
    ] as const) {
      const [B, H, Hkv, qL, kL] = [1, 4, 2, 45, 45];
      const q = dev.upload('bf16', [B, H, qL, d], randomArray(r, B * H * qL * d));
      const k = dev.upload('bf16', [B, Hkv, kL, d], randomArray(r, B * Hkv * kL * d));
      const v = dev.upload('bf16', [B, Hkv, kL, d], randomArray(r, B * Hkv * kL * d));
      const out = poisoned(dev, 'bf16', [B, H, qL, d]);
      const maskData = flashAttnPrefillMaskRef({ seqLenQ: qL, seqLenK: kL, causal: true, slidingWindow: 20 });
      const mask = withMask ? dev.upload('bf16', [qL, kL], maskData) : undefined;
      const params = packAttnParams({
        batch: B, nHeads: H, nKvHeads: Hkv, headDim: d, seqLenQ: qL, seqLenK: kL, scale: 1 / Math.sqrt(d), bq, bk,
        q: [H * qL * d, qL * d, d], k: [Hkv * kL * d, kL * d, d], v: [Hkv * kL * d, kL * d, d], o: [H * qL * d, qL * d, d],
      });
      const constants: FunctionConstants = { 200: qL % bq === 0, 201: kL % bk === 0, 300: withMask, 301: !withMask, 303: false };
      if (d === 512) constants[322] = { type: 'i32', value: 8 };
      const enc = dev.encoder();
      enc.dispatch(kernels.pipeline(kernel, constants), {
        buffers: withMask ? [q, k, v, out, , , mask] : [q, k, v, out],
        bytes: withMask ? [, , , , params, packAttnMaskParams([0, 0, kL])] : [, , , , params],
        ...(d === 512 ? { threadgroupMemory: [FLASH_ATTN_PREFILL_LLAMACPP_SHARED_BYTES] } : {}),
      }, [Math.ceil(qL / bq), H, B], [32, d === 512 ? 8 : 4, 1]);
      enc.commitAndWait();
      enc.release();
      const want = flashAttnPrefillRef({
        batch: B, nHeads: H, nKvHeads: Hkv, headDim: d, seqLenQ: qL, seqLenK: kL, scale: 1 / Math.sqrt(d), causal: !withMask,
        mask: withMask ? { kind: 'additive', broadcast: true, data: maskData } : undefined,
      }, q.readNumbers(), k.readNumbers(), v.readNumbers());
      const err = attnErr(out.readNumbers(), want, maxAbs(v.readNumbers()));
      expect([kernel, withMask, err < TOL.bf16]).toEqual([kernel, withMask, true]);
    }
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('flash_attn_prefill', [
  // mlx-native's rule: each buffer holds at least its elements (freeCount); cu_seqlens are tables
  // (the kernels clamp the offsets to the rows of q and k).
  ...[
    { dt: 'bf16', headDim: 64, causal: true, layout: 'headMajor', mask: 'none', varlen: false },
    { dt: 'f16', headDim: 128, causal: false, layout: 'seqMajor', mask: 'additive', varlen: false },
    { dt: 'bf16', headDim: 512, causal: true, layout: 'headMajor', mask: 'bool', varlen: false },
    { dt: 'bf16', headDim: 256, causal: true, layout: 'seqMajor', mask: 'none', varlen: true },
  ].map((p): Case => ({
    fn: 'flashAttnPrefill', op: 'flash_attn_prefill',
    keys: {
      q: buf(['bf16', 'f16'], { freeCount: true }), k: buf(['bf16', 'f16'], { freeCount: true }), v: buf(['bf16', 'f16'], { freeCount: true }),
      out: out(['bf16', 'f16'], { freeCount: true }),
      mask: { kind: 'buf?', dtypes: ['bf16', 'f16', 'u8'], freeCount: true }, blk: { kind: 'buf?', dtypes: ['u8'], freeCount: true },
      cuSeqlensQ: { kind: 'buf?', dtypes: ['u32', 'i32'], freeCount: true, table: true },
      cuSeqlensK: { kind: 'buf?', dtypes: ['u32', 'i32'], freeCount: true, table: true },
      batch: int, nHeads: int, nKvHeads: int, headDim: int, seqLenQ: int, seqLenK: int, kvCapacity: { kind: 'int?' },
      scale: { kind: 'num?' }, causal: { kind: 'bool?' }, qOffset: { kind: 'nonneg?' }, slidingWindow: { kind: 'int?' },
      softcap: { kind: 'nonneg?' }, maxSeqLenQ: { kind: 'int?' },
      layout: { kind: 'enum', values: ['headMajor', 'seqMajor', undefined] },
      d512Kernel: { kind: 'enum', values: ['llamacpp', 'tiles', undefined] }, nsg: { kind: 'enum', values: [4, 8, undefined] },
    },
    make: (d) => {
      const dt = p.dt as DType;
      const [b, h, hkv, ql, kl] = p.varlen ? [2, 2, 1, 3, 5] : [1, 2, 1, 3, 6];
      const qn = (p.varlen ? 1 : b) * h * ql * p.headDim;
      const kn = (p.varlen ? 1 : b) * hkv * kl * p.headDim;
      return {
        q: a(d, dt, qn), k: a(d, dt, kn), v: a(d, dt, kn), out: a(d, dt, qn),
        batch: b, nHeads: h, nKvHeads: hkv, headDim: p.headDim, seqLenQ: ql, seqLenK: kl, causal: p.causal, layout: p.layout,
        ...(p.mask === 'additive' ? { mask: d.alloc(dt, [ql, kl]), softcap: 30 } : {}),
        ...(p.mask === 'bool' ? { mask: a(d, 'u8', b * h * ql * kl), slidingWindow: 4, qOffset: 2, seqLenQ: 2, nsg: 4 } : {}),
        ...(p.varlen ? { cuSeqlensQ: a(d, 'u32', b + 1), cuSeqlensK: a(d, 'i32', b + 1), maxSeqLenQ: 2 } : {}),
      };
    },
    fill: (args) => {
      if (args.cuSeqlensQ !== undefined) (args.cuSeqlensQ as Buffer).writeNumbers([0, 1, 3]);
      if (args.cuSeqlensK !== undefined) (args.cuSeqlensK as Buffer).writeNumbers([0, 2, 5]);
      if (args.mask !== undefined && (args.mask as Buffer).dtype === 'u8') {
        const m = args.mask as Buffer;
        m.writeNumbers(Array.from({ length: m.elementCount }, (_, i) => (i % 3 === 1 ? 0 : 1)));
      }
    },
  })),
  {
    fn: 'flashAttnPrefillMask', op: 'flash_attn_prefill_mask',
    keys: {
      mask: out(['bf16', 'f16'], { freeCount: true }), seqLenQ: int, seqLenK: int, causal: { kind: 'bool' },
      slidingWindow: { kind: 'int?' }, qOffset: { kind: 'nonneg?' },
    },
    make: (d) => ({ mask: d.alloc('bf16', [5, 9]), seqLenQ: 5, seqLenK: 9, causal: true, slidingWindow: 3, qOffset: 4 }),
  },
  {
    fn: 'flashAttnPrefillBlk', op: 'flash_attn_prefill_blk',
    keys: {
      mask: buf(['bf16', 'f16'], { freeCount: true }), blk: out(['u8'], { freeCount: true }), seqLenQ: int, seqLenK: int, bq: int, bk: int,
    },
    make: (d) => ({ mask: d.alloc('f16', [40, 50]), blk: a(d, 'u8', 8), seqLenQ: 40, seqLenK: 50, bq: 32, bk: 16 }),
  },
]);
