// moe_routing: validation rules, the param packer against the .metal struct,
// the reference against hand-computed values, and parity on every backend.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/moe_routing.metal' with { type: 'text' };
import {
  FUSED_MOE_ROUTING_PARAMS_LAYOUT,
  MOE_ROUTING_FAMILY,
  MOE_ROUTING_KERNELS,
  MOE_ROUTING_SOURCES,
  moeRoutingMaxExperts,
  moeRoutingCudaEntry,
  fusedMoeRouting,
  planFusedMoeRouting,
  planFusedMoeRoutingBatch,
  fusedMoeRoutingBatch,
  moeRoutingThreadgroup,
  packFusedMoeRoutingParams,
  moeRoutingRef,
} from '../ts/ops/moe_routing.ts';
import { describeBackends, maxRelErr, randomArray, rng, TOL, TARGET_LIMITS, expectInvalid, describeValidation } from './helpers.ts';
import { bufferParam } from './metal-source.ts';
import * as moeOps from '../ts/ops/moe_routing.ts';
import * as mlx from '../ts/index.ts';
import { a, buf, F, int, opContract, out, U32 } from './op-contract.ts';
import { compactEntryProblem, CXX } from './cuda-source.ts';
import { record } from '../ts/plan.ts';

// ---- the param structs against the .metal source ----

describe('moe_routing param packer matches the .metal declaration', () => {
  test('FusedMoeRoutingParams: fields, order, offsets; bound at buffer(4) by both kernels', () => {
    for (const k of ['fused_moe_routing_f32', 'fused_moe_routing_batch_f32']) {
      expect(bufferParam(src, k, 4)).toMatch(/^constant FusedMoeRoutingParams& params /);
    }
    const bytes = packFusedMoeRoutingParams({ numExperts: 128, topK: 8 });
    const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    expect(bytes.byteLength).toBe(8);
    expect(FUSED_MOE_ROUTING_PARAMS_LAYOUT.map((f) => v.getUint32(f.offset, true))).toEqual([128, 8]);
  });
  test('threadgroup: min(256, nextPow2(numExperts)) threads, numExperts floats in 16-byte units', () => {
    expect(moeRoutingThreadgroup(1, TARGET_LIMITS.metal)).toEqual({ threads: 1, sharedBytes: 16 });
    expect(moeRoutingThreadgroup(5, TARGET_LIMITS.metal)).toEqual({ threads: 8, sharedBytes: 32 });
    expect(moeRoutingThreadgroup(128, TARGET_LIMITS.metal)).toEqual({ threads: 128, sharedBytes: 512 });
    expect(moeRoutingThreadgroup(513, TARGET_LIMITS.metal)).toEqual({ threads: 256, sharedBytes: 2064 });
  });
});

describe('moe_routing compact CUDA entries (moeRoutingCudaEntry)', () => {
  test('the warp path\'s entry by logits a lane; none past the warp path', () => {
    expect([[1, 1], [32, 8], [33, 2], [128, 8], [129, 8], [256, 8], [257, 5], [1024, 32], [1025, 8], [256, 33]]
      .map(([e, k]) => moeRoutingCudaEntry('fused_moe_routing_batch_f32', e!, k!))).toEqual([
      'fused_moe_routing_batch_f32_w1', 'fused_moe_routing_batch_f32_w1', 'fused_moe_routing_batch_f32_w2', 'fused_moe_routing_batch_f32_w4',
      'fused_moe_routing_batch_f32_w8', 'fused_moe_routing_batch_f32_w8', 'fused_moe_routing_batch_f32_w16', 'fused_moe_routing_batch_f32_w32',
      undefined, undefined,
    ]);
  });
  test.if(CXX !== undefined)('every entry the rule names is in shaders/cuda/moe_routing.cu with its kernel\'s parameters', () => {
    const named = new Map<string, string>();
    for (const kernel of MOE_ROUTING_KERNELS) for (let e = 1; e <= 1024; e++) named.set(moeRoutingCudaEntry(kernel, e, 8)!, kernel);
    expect(named.size).toBe(12);
    expect([...named].map(([e, kernel]) => compactEntryProblem('moe_routing', kernel, e)).filter((p) => p !== '')).toEqual([]);
  });
});

describe('moe_routing reference against hand-computed values', () => {
  test('softmax, top-2, renormalize, scale; ties to the lowest index; -inf logits', () => {
    // logits [0, ln 3, ln 2, ln 3]: p ∝ [1, 3, 2, 3]; top-2 = experts 1, 3 (tie, lower first).
    const r = moeRoutingRef([0, Math.log(3), Math.log(2), Math.log(3)], [1, 2, 1, 0.5], 1, 4, 2);
    expect([...r.expertIds]).toEqual([1, 3]);
    expect(r.weights[0]).toBeCloseTo(0.5 * 2, 14);
    expect(r.weights[1]).toBeCloseTo(0.5 * 0.5, 14);
    // top-3 adds expert 2: weights 3/8, 3/8, 2/8 before scale.
    const r3 = moeRoutingRef([0, Math.log(3), Math.log(2), Math.log(3)], [1, 1, 1, 1], 1, 4, 3);
    expect([...r3.expertIds]).toEqual([1, 3, 2]);
    expect(r3.weights[2]).toBeCloseTo(0.25, 14);
    // Every logit -inf: zero weights, experts in index order.
    const z = moeRoutingRef([-Infinity, -Infinity, -Infinity], [1, 1, 1], 1, 3, 2);
    expect([...z.expertIds]).toEqual([0, 1]);
    expect([...z.weights]).toEqual([0, 0]);
    // Masked experts (-inf) rank last and weigh 0.
    const m = moeRoutingRef([-Infinity, 1, -Infinity], [1, 1, 1], 1, 3, 2);
    expect([...m.expertIds]).toEqual([1, 0]);
    expect([...m.weights]).toEqual([1, 0]);
  });
});

// ---- validation ----

describeValidation('moe_routing validation', ({ enc, buf }) => {
  type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
  const E = 16;
  const K = 4;
  const maxExperts = (): number => moeRoutingMaxExperts(enc().device.limits);
  const commonCases = (tokens: number): Case[] => [
    [{ numExperts: 0 }, 'numExperts', 'a positive integer', '0'],
    [{ topK: 0 }, 'topK', 'a positive integer', '0'],
    [{ topK: 2.5 }, 'topK', 'a positive integer', '2.5'],
    [{ topK: E + 1 }, 'topK', 'at most numExperts (16)', '17'],
    // The limit is the device's: one f32 per expert in its threadgroup memory.
    [{ numExperts: maxExperts() + 1, topK: 1 }, 'numExperts',
      `at most ${maxExperts()} (one f32 per expert in the device's ${enc().device.limits.maxThreadgroupMemory} bytes of threadgroup memory`,
      `${maxExperts() + 1}`],
    [{ logits: buf('bf16', tokens * E) }, 'logits.dtype', 'f32', 'bf16'],
    [{ expertIds: buf('i32', tokens * K) }, 'expertIds.dtype', 'u32', 'i32'],
    [{ routingWeights: buf('f16', tokens * K) }, 'routingWeights.dtype', 'f32', 'f16'],
    [{ perExpertScale: buf('bf16', E) }, 'perExpertScale.dtype', 'f32', 'bf16'],
    [{ logits: buf('f32', tokens * E + 1) }, 'logits.elementCount', `${tokens * E}`, `${tokens * E + 1}`],
    [{ expertIds: buf('u32', tokens * K + 1) }, 'expertIds.elementCount', `${tokens * K}`, `${tokens * K + 1}`],
    [{ routingWeights: buf('f32', 1) }, 'routingWeights.elementCount', `${tokens * K}`, '1'],
    [{ perExpertScale: buf('f32', E - 1) }, 'perExpertScale.elementCount', `${E}`, `${E - 1}`],
  ];

  test('fused_moe_routing: every rule', () => {
    const base = () => ({ logits: buf('f32', E), expertIds: buf('u32', K), routingWeights: buf('f32', K), perExpertScale: buf('f32', E), numExperts: E, topK: K });
    for (const [m, arg, expected, actual] of commonCases(1)) {
      expectInvalid(() => fusedMoeRouting(enc(), { ...base(), ...m }), 'fused_moe_routing', arg, expected, actual);
    }
  });

  test('fused_moe_routing_batch: every rule', () => {
    const T = 3;
    const base = () => ({ logits: buf('f32', T * E), expertIds: buf('u32', T * K), routingWeights: buf('f32', T * K), perExpertScale: buf('f32', E), numExperts: E, topK: K, nTokens: T });
    const cases: Case[] = [
      ...commonCases(T),
      [{ nTokens: 0 }, 'nTokens', 'a positive integer', '0'],
      [{ nTokens: 2 ** 30, numExperts: 8, topK: 1 }, 'nTokens * numExperts', 'at most the 32-bit index limit (4294967295)', '8589934592'],
      [{ nTokens: 2 ** 50, numExperts: 16 }, 'nTokens * numExperts', 'a product of integers at most 2^53 - 1', `${2 ** 50} * 16`],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => fusedMoeRoutingBatch(enc(), { ...base(), ...m }), 'fused_moe_routing_batch', arg, expected, actual);
    }
  });
});

// ---- parity ----

describeBackends('moe_routing parity', ({ device }) => {
  /** Runs the single-token kernel (nTokens 1) or the batch kernel and checks ids exactly, weights within f32 tolerance. */
  function check(logits: ArrayLike<number>, scale: ArrayLike<number>, nTokens: number, numExperts: number, topK: number, batch: boolean): void {
    const dev = device();
    const lg = dev.upload('f32', [nTokens, numExperts], logits);
    const sc = dev.upload('f32', [numExperts], scale);
    const ids = dev.alloc('u32', [nTokens, topK]);
    ids.write(new Uint32Array(nTokens * topK).fill(0xffff_ffff));
    const w = dev.alloc('f32', [nTokens, topK]);
    w.fill(Number.NaN);
    const enc = dev.encoder();
    const args = { logits: lg, expertIds: ids, routingWeights: w, perExpertScale: sc, numExperts, topK };
    if (batch) fusedMoeRoutingBatch(enc, { ...args, nTokens });
    else fusedMoeRouting(enc, args);
    enc.commitAndWait();
    const want = moeRoutingRef(lg.readNumbers(), sc.readNumbers(), nTokens, numExperts, topK);
    const label = `${batch ? 'batch' : 'single'} tokens ${nTokens} experts ${numExperts} topK ${topK}`;
    expect({ label, ids: [...(ids.read() as Uint32Array)] }).toEqual({ label, ids: [...want.expertIds] });
    const err = maxRelErr(w.readNumbers(), want.weights);
    expect({ label, ok: err < TOL.f32, err }).toEqual({ label, ok: true, err });
  }

  const CASES: readonly [experts: number, topK: number][] = [
    [1, 1], [2, 1], [3, 3], [8, 2], [31, 4], [33, 33], [64, 8], [128, 8], [256, 8], [257, 5], [300, 300], [1000, 10],
  ];

  test('single token: random logits, many expert counts, top_k up to num_experts', () => {
    for (const [e, k] of CASES) {
      const r = rng(e * 131 + k);
      check(randomArray(r, e, -4, 4), randomArray(r, e, 0.5, 2), 1, e, k, false);
    }
  });

  test('batch: random logits over tokens', () => {
    for (const [t, e, k] of [[1, 8, 2], [5, 33, 4], [17, 128, 8], [3, 257, 257]] as const) {
      const r = rng(t * 7 + e * 131 + k);
      check(randomArray(r, t * e, -4, 4), randomArray(r, e, 0.5, 2), t, e, k, true);
    }
  });

  test('through the compact CUDA entries: the kernel\'s own entry\'s ids and weights bit for bit, every width of the warp path', () => {
    const dev = device();
    const wrong: string[] = [];
    for (const [t, e, k, batch] of [[1, 20, 4, false], [1, 64, 8, false], [3, 100, 8, true], [1, 256, 8, true], [2, 400, 16, true], [1, 1000, 32, false]] as const) {
      const r = rng(t * 7 + e * 13 + k);
      const lg = dev.upload('f32', [t, e], randomArray(r, t * e, -4, 4));
      const sc = dev.upload('f32', [e], randomArray(r, e, 0.5, 2));
      const ids = dev.alloc('u32', [t, k]);
      const w = dev.alloc('f32', [t, k]);
      const args = { logits: lg, expertIds: ids, routingWeights: w, perExpertScale: sc, numExperts: e, topK: k };
      const plan = batch ? planFusedMoeRoutingBatch({ ...args, nTokens: t }, dev.limits, dev) : planFusedMoeRouting(args, dev.limits, dev);
      const d = plan.dispatches[0]!;
      const runWith = (cuda: typeof d.cuda): [number[], number[]] => {
        ids.write(new Uint32Array(t * k).fill(0xffff_ffff));
        w.fill(Number.NaN);
        const enc = dev.encoder();
        record(enc, { ...plan, dispatches: [{ ...d, cuda }] });
        enc.commitAndWait();
        return [[...(ids.read() as Uint32Array)], [...w.readNumbers()]];
      };
      const [ie, we] = runWith(d.cuda);
      const [ik, wk] = runWith(d.cuda === undefined ? undefined : { grid: d.cuda.grid, threads: d.cuda.threads });
      const label = `${batch ? 'batch' : 'single'} tokens ${t} experts ${e} topK ${k}`;
      if (d.cuda?.entry === undefined) wrong.push(`${label}: no compact entry planned`);
      if (JSON.stringify(ie) !== JSON.stringify(ik) || !we.every((v, i) => Object.is(v, wk[i]))) wrong.push(`${label}: differs from the kernel's entry`);
      const want = moeRoutingRef(lg.readNumbers(), sc.readNumbers(), t, e, k);
      if (JSON.stringify(ie) !== JSON.stringify([...want.expertIds]) || !(maxRelErr(we, want.weights) < TOL.f32)) wrong.push(`${label}: against the reference`);
      for (const b of [lg, sc, ids, w]) b.release();
    }
    expect(wrong).toEqual([]);
  });

  test('ties go to the lowest index; all-equal logits; underflowed experts', () => {
    for (const batch of [false, true]) {
      const r = rng(99);
      // All equal: experts 0..k-1, weights 1/k * scale.
      check(new Float64Array(40).fill(0.75), randomArray(r, 40, 0.5, 2), 1, 40, 7, batch);
      // Repeated values: a few distinct levels over many experts, so ties cross threads and simdgroups.
      const levels = Float64Array.from({ length: 300 }, (_, i) => [1.5, -0.5, 1.5, 0.25][(i * 7) % 4]!);
      check(levels, randomArray(r, 300, 0.5, 2), 1, 300, 200, batch);
      // One dominant expert; the rest underflow to exactly 0 and tie among themselves.
      const dominant = Float64Array.from({ length: 50 }, (_, i) => (i === 37 ? 0 : -1000));
      check(dominant, randomArray(r, 50, 0.5, 2), 1, 50, 4, batch);
    }
  });

  test('any threadgroup size: 1, 48, 1000 threads, (2 * numExperts + tg) floats of threadgroup memory as the Rust host binds', () => {
    const dev = device();
    dev.kernels.register(MOE_ROUTING_FAMILY, MOE_ROUTING_SOURCES, MOE_ROUTING_KERNELS);
    const pipe = dev.kernels.pipeline('fused_moe_routing_batch_f32');
    for (const threads of [1, 48, 1000]) {
      for (const [t, e, k] of [[2, 300, 20], [3, 33, 33]] as const) {
        const r = rng(threads + e);
        const lg = dev.upload('f32', [t, e], randomArray(r, t * e, -4, 4));
        const sc = dev.upload('f32', [e], randomArray(r, e, 0.5, 2));
        const ids = dev.alloc('u32', [t, k]);
        ids.write(new Uint32Array(t * k).fill(0xffff_ffff));
        const w = dev.alloc('f32', [t, k]);
        w.fill(Number.NaN);
        const enc = dev.encoder();
        enc.dispatch(pipe, {
          buffers: { 0: lg, 1: ids, 2: w, 3: sc },
          bytes: { 4: packFusedMoeRoutingParams({ numExperts: e, topK: k }) },
          threadgroupMemory: { 0: Math.ceil(((2 * e + threads) * 4) / 16) * 16 },
        }, [t, 1, 1], [threads, 1, 1]);
        enc.commitAndWait();
        const want = moeRoutingRef(lg.readNumbers(), sc.readNumbers(), t, e, k);
        const label = `tg ${threads} tokens ${t} experts ${e} topK ${k}`;
        expect({ label, ids: [...(ids.read() as Uint32Array)] }).toEqual({ label, ids: [...want.expertIds] });
        const err = maxRelErr(w.readNumbers(), want.weights);
        expect({ label, ok: err < TOL.f32, err }).toEqual({ label, ok: true, err });
      }
    }
  });

  test('a last simdgroup of 8 lanes under 32 partials (tg 1000): experts it owns are scaled by the true max', () => {
    const dev = device();
    dev.kernels.register(MOE_ROUTING_FAMILY, MOE_ROUTING_SOURCES, MOE_ROUTING_KERNELS);
    const pipe = dev.kernels.pipeline('fused_moe_routing_f32');
    const e = 1000;
    const k = 3;
    const r = rng(1000);
    const logits = randomArray(r, e, -4, 4);
    logits[991] = 6; // owned by a full simdgroup
    logits[995] = 5.9; // owned by the last simdgroup (threads 992..999)
    const lg = dev.upload('f32', [e], logits);
    const sc = dev.upload('f32', [e], randomArray(r, e, 0.5, 2));
    const ids = dev.alloc('u32', [k]);
    ids.write(new Uint32Array(k).fill(0xffff_ffff));
    const w = dev.alloc('f32', [k]);
    w.fill(Number.NaN);
    const enc = dev.encoder();
    enc.dispatch(pipe, {
      buffers: { 0: lg, 1: ids, 2: w, 3: sc },
      bytes: { 4: packFusedMoeRoutingParams({ numExperts: e, topK: k }) },
      threadgroupMemory: { 0: e * 4 },
    }, [1, 1, 1], [1000, 1, 1]);
    enc.commitAndWait();
    const want = moeRoutingRef(lg.readNumbers(), sc.readNumbers(), 1, e, k);
    expect([...(ids.read() as Uint32Array)]).toEqual([...want.expertIds]);
    expect(maxRelErr(w.readNumbers(), want.weights)).toBeLessThan(TOL.f32);
  });

  test('masked (-inf) experts rank last; every logit -inf gives zero weights', () => {
    for (const batch of [false, true]) {
      const r = rng(7);
      const masked = randomArray(r, 64, -3, 3);
      for (let i = 0; i < 64; i += 3) masked[i] = -Infinity;
      check(masked, randomArray(r, 64, 0.5, 2), 1, 64, 50, batch);
      check(new Float64Array(20).fill(-Infinity), randomArray(r, 20, 0.5, 2), 1, 20, 3, batch);
    }
  });
});

// ---- buffers that are not live buffers of the device; aliasing ----

describeValidation('moe_routing: buffers and aliasing', ({ device, enc, buf }) => {
  test('null and foreign buffers are MlxErrors naming the argument; routingWeights as logits is refused', () => {
    const a = { logits: buf('f32', 8), expertIds: buf('u32', 2), routingWeights: buf('f32', 2), perExpertScale: buf('f32', 8), numExperts: 8, topK: 2 };
    moeOps.fusedMoeRouting(enc(), a);
    expectInvalid(() => moeOps.fusedMoeRouting(enc(), { ...a, logits: null as unknown as mlx.Buffer }), 'fused_moe_routing', 'logits', 'a Buffer', 'null');
    const other = mlx.Device.open({ backend: device().backend });
    try {
      expectInvalid(() => moeOps.fusedMoeRoutingBatch(enc(), { ...a, nTokens: 1, perExpertScale: other.alloc('f32', [8]) }),
        'fused_moe_routing_batch', 'perExpertScale', "a buffer of the encoder's device", 'a buffer of another device');
    } finally {
      other.close();
    }
    const all = { ...a, routingWeights: buf('f32', 8), expertIds: buf('u32', 8), topK: 8 };
    expectInvalid(() => moeOps.fusedMoeRouting(enc(), { ...all, routingWeights: all.logits }), 'fused_moe_routing', 'routingWeights',
      'a buffer other than logits', 'the buffer of logits');
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('moe_routing', [
  {
    fn: 'fusedMoeRouting', op: 'fused_moe_routing',
    keys: { logits: buf(F), expertIds: out(U32), routingWeights: out(F), perExpertScale: buf(F), numExperts: int, topK: int },
    make: (d) => ({
      logits: a(d, 'f32', 8), expertIds: a(d, 'u32', 2), routingWeights: a(d, 'f32', 2), perExpertScale: a(d, 'f32', 8),
      numExperts: 8, topK: 2,
    }),
  },
  {
    fn: 'fusedMoeRoutingBatch', op: 'fused_moe_routing_batch',
    keys: {
      logits: buf(F), expertIds: out(U32), routingWeights: out(F), perExpertScale: buf(F), numExperts: int, topK: int, nTokens: int,
    },
    make: (d) => ({
      logits: a(d, 'f32', 16), expertIds: a(d, 'u32', 4), routingWeights: a(d, 'f32', 4), perExpertScale: a(d, 'f32', 8),
      numExperts: 8, topK: 2, nTokens: 2,
    }),
  },
]);
