// The emulator's random schedule and time limit, through the public API:
// missing barriers it must expose (in a small kernel and in a mutant of a
// real kernel), and kernels that never finish.

import { describe, expect, test } from 'bun:test';
import moeSrc from '../shaders/moe_routing.metal' with { type: 'text' };
import { Device, MlxError } from '../ts/index.ts';
import { MOE_ROUTING_SOURCES, moeRoutingThreadgroup, packFusedMoeRoutingParams, moeRoutingRef } from '../ts/ops/moe_routing.ts';
import { joinSources } from '../ts/registry.ts';
import { backendAbsence, maxRelErr, randomArray, rng, TOL, errorOf } from './helpers.ts';

const FILE = 'emu_schedule.metal';

const SOURCE = `#include <metal_stdlib>
using namespace metal;

// Threadgroup arg-max, ROUNDS times, removing each round's winner (top-k).
// Per round: simd_max and simd_min per simdgroup, lane 0 publishes the
// simdgroup's best in partials[sg], barrier, every thread scans all partials.
// With MISSING_BARRIER, nothing keeps a simdgroup that finished its scan from
// publishing the next round's partial while another simdgroup still scans
// this round's.
template <bool MISSING_BARRIER>
kernel void argmax_rounds(device const float* in [[buffer(0)]],
                          device uint* out [[buffer(1)]],
                          constant uint& rounds [[buffer(2)]],
                          uint tid [[thread_index_in_threadgroup]],
                          uint n [[threads_per_threadgroup]],
                          uint group [[threadgroup_position_in_grid]],
                          uint sg [[simdgroup_index_in_threadgroup]],
                          uint lane [[thread_index_in_simdgroup]],
                          uint n_sg [[simdgroups_per_threadgroup]]) {
  threadgroup float part_value[32];
  threadgroup uint part_index[32];
  float v = in[group * n + tid];
  for (uint r = 0; r < rounds; ++r) {
    const float m = simd_max(v);
    const uint i = simd_min(v == m ? tid : 0xffffffffu);
    if (lane == 0) {
      part_value[sg] = m;
      part_index[sg] = i;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float best = -INFINITY;
    uint best_index = 0xffffffffu;
    for (uint s = 0; s < n_sg; ++s) {
      if (part_value[s] > best) {
        best = part_value[s];
        best_index = part_index[s];
      }
    }
    if (!MISSING_BARRIER) threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) out[group * rounds + r] = best_index;
    if (tid == best_index) v = -INFINITY;
  }
}
template [[host_name("argmax_rounds_missing_barrier")]] kernel void argmax_rounds<true>(
    device const float*, device uint*, constant uint&, uint, uint, uint, uint, uint, uint);
template [[host_name("argmax_rounds_ok")]] kernel void argmax_rounds<false>(
    device const float*, device uint*, constant uint&, uint, uint, uint, uint, uint, uint);

// Never ends: waits for a flag that nothing sets, without a barrier.
kernel void spin_forever(device atomic_uint* flag [[buffer(0)]],
                         device uint* out [[buffer(1)]],
                         uint gid [[thread_position_in_grid]]) {
  while (atomic_load_explicit(&flag[0], memory_order_relaxed) == 0u) {
  }
  out[gid] = 1u;
}

// Never ends: every thread loops through barriers.
kernel void barrier_forever(device const uint* flag [[buffer(0)]],
                            device uint* out [[buffer(1)]],
                            uint gid [[thread_position_in_grid]]) {
  while (flag[0] == 0u) {
    threadgroup_barrier(mem_flags::mem_none);
  }
  out[gid] = 1u;
}

kernel void fill_ones(device uint* out [[buffer(1)]], uint gid [[thread_position_in_grid]]) {
  out[gid] = 1u;
}
`;


const absent = backendAbsence('emu');

describe.if(absent === null)('emu random schedule', () => {
  const GROUPS = 4;
  const THREADS = 128;  // 4 simdgroups
  const ROUNDS = 6;
  // Distinct values per threadgroup, so every round has one winner.
  const values = Array.from({ length: GROUPS * THREADS }, (_, k) => ((k * 7919) % 1009) + k / 4096);
  const want: number[] = [];
  for (let g = 0; g < GROUPS; g++) {
    const order = Array.from({ length: THREADS }, (_, t) => t).sort(
      (a, b) => values[g * THREADS + b]! - values[g * THREADS + a]!);
    want.push(...order.slice(0, ROUNDS));
  }

  function runArgmax(kernel: string, options: Record<string, string>): number[] {
    const device = Device.open({ backend: 'emu' });
    try {
      for (const [k, v] of Object.entries(options)) device.setOption(k, v);
      const lib = device.compile(SOURCE, { name: FILE });
      const input = device.upload('f32', [GROUPS * THREADS], values);
      const out = device.alloc('u32', [GROUPS * ROUNDS]);
      const enc = device.encoder();
      enc.dispatch(lib.pipeline(kernel), { buffers: { 0: input, 1: out }, bytes: { 2: new Uint32Array([ROUNDS]) } },
        [GROUPS, 1, 1], [THREADS, 1, 1]);
      enc.commitAndWait();
      return Array.from(out.read() as Uint32Array);
    } finally {
      device.close();
    }
  }

  const SEEDS = ['1', '2', '3', '4', '5', '6', '7', '8', '9', '10'];

  test('a missing barrier after reading every simdgroup\'s partials: caught in most seeds', () => {
    // The sequential schedule runs the simdgroups in lockstep and hides it.
    expect(runArgmax('argmax_rounds_missing_barrier', { schedule: 'sequential' })).toEqual(want);
    const caught = SEEDS.filter((seed) => {
      const got = runArgmax('argmax_rounds_missing_barrier', { schedule: 'random', seed });
      return JSON.stringify(got) !== JSON.stringify(want);
    });
    expect(caught.length).toBeGreaterThanOrEqual(8);
  });

  test('the same kernel with its barrier passes under every seed', () => {
    expect(runArgmax('argmax_rounds_ok', { schedule: 'sequential' })).toEqual(want);
    for (const seed of SEEDS) expect({ seed, got: runArgmax('argmax_rounds_ok', { schedule: 'random', seed }) })
      .toEqual({ seed, got: want });
  });

  // shaders/moe_routing.metal with the trailing barrier of threadgroup_argmax
  // removed (in a copy: the shader itself is not touched).
  const TRAILING = /(ranks_before\(v, j, best_value, best_index\)\) \{[^}]*\}\s*\}\s*)threadgroup_barrier\(mem_flags::mem_threadgroup\);/;

  function runMoe(source: string, name: string, options: Record<string, string>): { idsOk: boolean; err: number } {
    const nTokens = 8;
    const numExperts = 256;
    const topK = 8;
    const r = rng(4242);
    const logits = randomArray(r, nTokens * numExperts, -4, 4);
    const scale = randomArray(r, numExperts, 0.5, 2);
    const device = Device.open({ backend: 'emu' });
    try {
      for (const [k, v] of Object.entries(options)) device.setOption(k, v);
      // The family's program, with `source` in place of shaders/moe_routing.metal.
      const files = MOE_ROUTING_SOURCES.metal.map((f) => (f.name === 'moe_routing.metal' ? { name, text: source } : f));
      const lib = device.compile(joinSources(files), { name });
      const lg = device.upload('f32', [nTokens, numExperts], logits);
      const sc = device.upload('f32', [numExperts], scale);
      const ids = device.alloc('u32', [nTokens, topK]);
      const w = device.alloc('f32', [nTokens, topK]);
      w.fill(Number.NaN);
      const { threads, sharedBytes } = moeRoutingThreadgroup(numExperts, device.limits);
      const enc = device.encoder();
      enc.dispatch(lib.pipeline('fused_moe_routing_batch_f32'), {
        buffers: { 0: lg, 1: ids, 2: w, 3: sc },
        bytes: { 4: packFusedMoeRoutingParams({ numExperts, topK }) },
        threadgroupMemory: { 0: sharedBytes },
      }, [nTokens, 1, 1], [threads, 1, 1]);
      enc.commitAndWait();
      const want = moeRoutingRef(lg.readNumbers(), sc.readNumbers(), nTokens, numExperts, topK);
      const idsOk = JSON.stringify([...(ids.read() as Uint32Array)]) === JSON.stringify([...want.expertIds]);
      return { idsOk, err: maxRelErr(w.readNumbers(), want.weights) };
    } finally {
      device.close();
    }
  }

  test('moe_routing without the trailing barrier of its arg-max fails parity under the random schedule', () => {
    const mutant = moeSrc.replace(TRAILING, '$1');
    expect(mutant).not.toBe(moeSrc);
    expect(mutant.length).toBe(moeSrc.length - 'threadgroup_barrier(mem_flags::mem_threadgroup);'.length);
    // The real kernel passes, the mutant passes only under the sequential schedule.
    for (const seed of ['11', '12', '13']) {
      const ok = runMoe(moeSrc, 'moe_routing.metal', { schedule: 'random', seed });
      expect({ seed, ...ok, tol: ok.err < TOL.f32 }).toEqual({ seed, idsOk: true, err: ok.err, tol: true });
    }
    const seq = runMoe(mutant, 'moe_routing_mutant.metal', { schedule: 'sequential' });
    expect(seq.idsOk && seq.err < TOL.f32).toBe(true);
    for (const seed of ['11', '12', '13']) {
      const bad = runMoe(mutant, 'moe_routing_mutant.metal', { schedule: 'random', seed });
      expect({ seed, parity: bad.idsOk && bad.err < TOL.f32 }).toEqual({ seed, parity: false });
    }
  });
});

describe.if(absent === null)('emu time limit', () => {
  function runForever(kernel: string, options: Record<string, string>): { error: MlxError; ms: number } {
    const device = Device.open({ backend: 'emu' });
    try {
      for (const [k, v] of Object.entries(options)) device.setOption(k, v);
      const lib = device.compile(SOURCE, { name: FILE });
      const flag = device.alloc('u32', [1]);
      const out = device.alloc('u32', [256]);
      const enc = device.encoder();
      enc.dispatch(lib.pipeline(kernel), { buffers: { 0: flag, 1: out } }, [4, 1, 1], [64, 1, 1]);
      const t0 = performance.now();
      const error = errorOf(() => enc.commitAndWait());
      const ms = performance.now() - t0;
      // The device and its worker threads still work.
      enc.dispatch(lib.pipeline('fill_ones'), { buffers: { 1: out } }, [4, 1, 1], [64, 1, 1]);
      enc.commitAndWait();
      expect(Array.from(out.read() as Uint32Array)).toEqual(new Array(256).fill(1));
      return { error, ms };
    } finally {
      device.close();
    }
  }

  for (const schedule of ['sequential', 'random']) {
    test(`an endless loop in kernel code fails the dispatch after timeout_ms (${schedule})`, () => {
      const { error, ms } = runForever('spin_forever', { schedule, timeout_ms: '300' });
      expect(error.kind).toBe('CommandBufferError');
      expect(error.message).toContain("kernel 'spin_forever': the dispatch did not finish within 300 ms");
      expect(error.message).toContain('was running kernel code');
      expect(ms).toBeGreaterThanOrEqual(250);
      expect(ms).toBeLessThan(5000);
    });

    test(`an endless loop through barriers fails the dispatch after timeout_ms (${schedule})`, () => {
      const { error } = runForever('barrier_forever', { schedule, timeout_ms: '200' });
      expect(error.kind).toBe('CommandBufferError');
      expect(error.message).toContain("kernel 'barrier_forever': the dispatch did not finish within 200 ms");
    });
  }

  test('timeout_ms must be a decimal unsigned integer', () => {
    const device = Device.open({ backend: 'emu' });
    try {
      expect(errorOf(() => device.setOption('timeout_ms', '1.5s')).kind).toBe('InvalidArgument');
      device.setOption('timeout_ms', '0');
    } finally {
      device.close();
    }
  });
});
