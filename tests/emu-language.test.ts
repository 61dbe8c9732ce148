// The Metal language as the emulator runs it: one small kernel per feature
// of the translator and the CPU metal_stdlib shim, each checked against a
// reference computed here. Run under both emulator schedules.

import { describe, expect, test } from 'bun:test';
import {
  Device,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  type Buffer,
  type DispatchBindings,
  type FunctionConstants,
  type Library,
} from '../ts/index.ts';
import { EMU_RANDOM_SEED, backendAbsence, bf16 } from './helpers.ts';

const FILE = 'emu_language.metal';

const SOURCE = `#include <metal_stdlib>
using namespace metal;

kernel void vectors(device const float4* a [[buffer(0)]],
                    device float* out [[buffer(1)]],
                    uint gid [[thread_position_in_grid]]) {
  float4 v = a[gid];
  float4 w = float4(v.xy, v.w, 1.0f);          // concatenation
  float4 s = float4(2.0f);                     // splat
  w.zw = v.yx;                                 // swizzle write
  w.x += 10.0f;                                // component write
  float3 c = v.rgb * s.xyz;                    // rgba spelling, vector * vector
  half4 h = half4(v);                          // conversion
  float4 back = float4(h);
  uint3 u = uint3(3, 4, 5);
  bool4 lt = v < w;
  float4 sel = select(float4(-1.0f), float4(1.0f), lt);
  ushort2 us = ushort2(65535, 7) + ushort2(1, 1);   // wraps in ushort
  device float* o = out + gid * 16;
  o[0] = w.x; o[1] = w.y; o[2] = w.z; o[3] = w.w;
  o[4] = c.r; o[5] = c.g; o[6] = c.b;
  o[7] = back.w;
  o[8] = float(u[2]) + float(u.y);
  o[9] = sel.x + 2.0f * sel.y + 4.0f * sel.z + 8.0f * sel.w;
  o[10] = float(us.x) + float(us.y);
  o[11] = dot(v, float4(1.0f, 2.0f, 3.0f, 4.0f));
  o[12] = (v * 2.0f - 1.0f).w;
  o[13] = (-v).x;
  o[14] = as_type<float>(as_type<uint>(v.z));
  o[15] = float2(v.wz).y;
}

kernel void half_ops(device const float* a [[buffer(0)]],
                     device const float* b [[buffer(1)]],
                     device half* out [[buffer(2)]],
                     uint i [[thread_position_in_grid]]) {
  half x = half(a[i]);
  half y = half(b[i]);
  out[3 * i + 0] = x * y + x;     // two roundings to half
  out[3 * i + 1] = x / y;
  out[3 * i + 2] = half(a[i] * b[i]);  // float product, one rounding
}

kernel void bfloat_ops(device const float* a [[buffer(0)]],
                       device const float* b [[buffer(1)]],
                       device bfloat* out [[buffer(2)]],
                       uint i [[thread_position_in_grid]]) {
  bfloat x = bfloat(a[i]);
  bfloat y = bfloat(b[i]);
  out[2 * i + 0] = x;
  out[2 * i + 1] = x * y + x;
}

kernel void math_fns(device const float* a [[buffer(0)]],
                     device float* out [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
  float x = a[i];
  device float* o = out + i * 24;
  o[0] = exp(x); o[1] = exp2(x); o[2] = log(x); o[3] = sqrt(x);
  o[4] = rsqrt(x); o[5] = pow(x, 1.5f); o[6] = fma(x, 3.0f, 0.25f); o[7] = min(x, 1.0f);
  o[8] = max(x, 1.0f); o[9] = clamp(x, 0.5f, 1.5f); o[10] = mix(1.0f, 3.0f, x); o[11] = abs(-x);
  o[12] = floor(3.0f * x) + ceil(3.0f * x) * 10.0f; o[13] = round(x * 4.0f) + trunc(-x * 4.0f) * 10.0f;
  o[14] = sign(x - 1.0f); o[15] = sin(x) + cos(x);
  o[16] = tanh(x); o[17] = precise::exp(x) - fast::exp(x) + metal::max(x, 0.0f);
  o[18] = length(float2(x, 1.0f)); o[19] = normalize(float3(x, 1.0f, 2.0f)).x;
  o[20] = step(1.0f, x) + (isinf(x / 0.0f) ? 2.0f : 0.0f) + (isnan(x - INFINITY + INFINITY) ? 4.0f : 0.0f);
  o[21] = all(float2(x, 1.0f) > 0.0f) + 2.0f * any(float2(x, 1.0f) > 1.2f);
  o[22] = (FLT_MAX > 1e38f ? 1.0f : 0.0f) + float(HALF_MAX);
  o[23] = max(float4(x), float4(1.0f, 0.5f, 2.0f, x)).z + exp(float2(x, 0.0f)).y;
}

kernel void int_fns(device const uint* a [[buffer(0)]],
                    device uint* out [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) {
  uint x = a[i];
  int s = int(x) - 1000;
  device uint* o = out + i * 9;
  o[0] = clz(x); o[1] = ctz(x); o[2] = popcount(x); o[3] = mulhi(x, 0x9e3779b9u);
  o[4] = uint(abs(s)); o[5] = min(x, 1000u); o[6] = max(x, 1000u); o[7] = clamp(x, 10u, 5000u);
  o[8] = rotate(x, 5u);
}

// Each thread writes 26 values; lanes 0-7 of every simdgroup leave the
// divergent part, so those collectives see 24 active lanes.
kernel void simd_fns(device const float* a [[buffer(0)]],
                     device float* out [[buffer(1)]],
                     uint gid [[thread_position_in_grid]],
                     ushort lane [[thread_index_in_simdgroup]],
                     ushort sg [[simdgroup_index_in_threadgroup]]) {
  float x = a[gid];
  uint u = uint(x);
  device float* o = out + gid * 26;
  o[0] = simd_sum(x);
  o[1] = simd_max(x);
  o[2] = simd_min(x);
  o[3] = simd_product((lane % 3 == 0) ? 2.0f : 1.0f);
  o[4] = float(simd_and(u | 0x100u));
  o[5] = float(simd_or(u));
  o[6] = float(simd_xor(u));
  o[7] = simd_shuffle(x, (lane * 7) % 32);
  o[8] = simd_shuffle_up(x, 3);
  o[9] = simd_shuffle_down(x, 5);
  o[10] = simd_shuffle_xor(x, 6);
  o[11] = simd_shuffle_rotate_up(x, 2);
  o[12] = simd_shuffle_rotate_down(x, 2);
  o[13] = simd_broadcast(x, 9);
  o[14] = simd_broadcast_first(x);
  o[15] = simd_prefix_inclusive_sum(x);
  o[16] = simd_prefix_exclusive_sum(x);
  o[17] = simd_prefix_inclusive_product((lane % 4 == 1) ? 2.0f : 1.0f);
  o[18] = simd_prefix_exclusive_product((lane % 4 == 1) ? 2.0f : 1.0f);
  o[19] = float(simd_all(x > 0.0f)) + 2.0f * float(simd_any(x > 30.0f));
  o[20] = float(uint64_t(simd_ballot(lane % 5 == 0)) & 0xffffffu);   // exact in a float
  o[21] = quad_sum(x) + 1000.0f * float(simd_is_first());
  o[22] = float4(simd_sum(float4(x, 1.0f, 2.0f, x))).w;
  if (lane >= 8) {
    o[23] = simd_sum(x);
    o[24] = simd_broadcast_first(x) + 1000.0f * float(simd_is_first());
    o[25] = simd_prefix_exclusive_sum(1.0f);
  } else {
    o[23] = -1.0f; o[24] = -1.0f; o[25] = -1.0f;
  }
}

kernel void atomics(device atomic_uint* counters [[buffer(0)]],
                    device atomic_int* imin [[buffer(1)]],
                    device atomic_float* fsum [[buffer(2)]],
                    device uint* tg_out [[buffer(3)]],
                    threadgroup atomic_uint* tga [[threadgroup(0)]],
                    uint gid [[thread_position_in_grid]],
                    uint tid [[thread_index_in_threadgroup]],
                    uint tgid [[threadgroup_position_in_grid]]) {
  threadgroup atomic_uint tgcount;
  threadgroup atomic_int tgarr[2];
  if (tid == 0) {
    atomic_store_explicit(&tgcount, 0u, memory_order_relaxed);
    atomic_store_explicit(&tgarr[0], 0, memory_order_relaxed);
    atomic_store_explicit(&tgarr[1], 1 << 30, memory_order_relaxed);
    atomic_store_explicit(tga, 0u, memory_order_relaxed);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  atomic_fetch_add_explicit(&counters[0], 1u, memory_order_relaxed);
  atomic_fetch_max_explicit(&counters[1], gid * 3u, memory_order_relaxed);
  atomic_fetch_or_explicit(&counters[2], 1u << (gid % 32u), memory_order_relaxed);
  atomic_fetch_xor_explicit(&counters[3], gid, memory_order_relaxed);
  atomic_fetch_sub_explicit(&counters[4], 2u, memory_order_relaxed);
  uint expected = atomic_load_explicit(&counters[5], memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(&counters[5], &expected, expected + 5u,
                                                memory_order_relaxed, memory_order_relaxed)) {
  }
  atomic_fetch_min_explicit(imin, int(gid) - 100, memory_order_relaxed);
  atomic_fetch_add_explicit(fsum, 0.5f, memory_order_relaxed);
  atomic_fetch_add_explicit(&tgcount, 1u, memory_order_relaxed);
  atomic_fetch_add_explicit(&tgarr[0], int(tid), memory_order_relaxed);
  atomic_fetch_min_explicit(&tgarr[1], int(tid) + 7, memory_order_relaxed);
  atomic_fetch_add_explicit(tga, 2u, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == 0) {
    tg_out[tgid * 4 + 0] = atomic_load_explicit(&tgcount, memory_order_relaxed);
    tg_out[tgid * 4 + 1] = uint(atomic_load_explicit(&tgarr[0], memory_order_relaxed));
    tg_out[tgid * 4 + 2] = uint(atomic_load_explicit(&tgarr[1], memory_order_relaxed));
    tg_out[tgid * 4 + 3] = atomic_exchange_explicit(tga, 0u, memory_order_relaxed);
  }
}

// A, B: 8x8 row-major f32 in a (B at offset 64); C at offset 128, stride 16
// (the left half of an 8x16 block). out: D = A*B + C, A*B^T (half),
// A*B (bfloat), thread_elements of A, a filled matrix, D stored at origin (8, 0)
// of a stride-16 block.
kernel void matrices(device const float* a [[buffer(0)]],
                     device float* out [[buffer(1)]],
                     threadgroup float* tb [[threadgroup(0)]],
                     ushort lane [[thread_index_in_simdgroup]]) {
  for (uint i = lane; i < 64; i += 32) tb[i] = a[64 + i];
  simdgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_float8x8 A, B, C, D;
  simdgroup_load(A, a, 8);
  simdgroup_load(B, tb, 8);
  simdgroup_load(C, a + 128, 16);
  simdgroup_multiply_accumulate(D, A, B, C);
  simdgroup_store(D, out, 8);
  simdgroup_half8x8 Ah, Bh, Dh;
  threadgroup half th[64];
  for (uint i = lane; i < 64; i += 32) th[i] = half(a[i]);
  simdgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_load(Ah, th, 8);
  for (uint i = lane; i < 64; i += 32) th[i] = half(a[64 + i]);
  simdgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_load(Bh, th, 8, ulong2(0, 0), true);
  simdgroup_multiply(Dh, Ah, Bh);
  simdgroup_float8x8 Df = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  simdgroup_multiply_accumulate(Df, Dh, make_filled_simdgroup_matrix<half, 8, 8>(1.0h), Df);
  simdgroup_store(Dh, th, 8);
  simdgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = lane; i < 64; i += 32) out[64 + i] = float(th[i]);
  simdgroup_bfloat8x8 Ab, Bb, Db;
  threadgroup bfloat tbf[128];
  for (uint i = lane; i < 128; i += 32) tbf[i] = bfloat(a[i]);
  simdgroup_barrier(mem_flags::mem_threadgroup);
  simdgroup_load(Ab, tbf, 8);
  simdgroup_load(Bb, tbf + 64, 8);
  simdgroup_multiply(Db, Ab, Bb);
  simdgroup_store(Db, tbf, 8);
  simdgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = lane; i < 64; i += 32) out[128 + i] = float(tbf[i]);
  out[192 + 2 * lane] = A.thread_elements()[0];
  out[192 + 2 * lane + 1] = A.thread_elements()[1];
  simdgroup_store(Df, out + 256, 8);
  simdgroup_store(D, out + 320, 16, ulong2(8, 0));
  simdgroup_store(make_filled_simdgroup_matrix<float, 8, 8>(3.0f), out + 320, 16);
}

template <typename T, int K>
kernel void scale_t(device const T* a [[buffer(0)]],
                    device T* o [[buffer(1)]],
                    uint gid [[thread_position_in_grid]]) {
  o[gid] = a[gid] * T(K);
}
typedef decltype(scale_t<float, 2>) scale_f32_t;
template [[host_name("scale_f32_x2")]] kernel scale_f32_t scale_t<float, 2>;
template [[host_name("scale_f16_x3")]] kernel void scale_t<half, 3>(device const half*, device half*, uint);

kernel void literals(device float* out [[buffer(0)]]) {
  out[0] = float(0.5h * 3.0h);
  out[1] = float(1.5bf + 0.25bf);
  out[2] = (0.1 + 0.2) - 0.3;     // float arithmetic: 0 exactly
  out[3] = 1e-1;
  out[4] = 0x10 + .25 + 2.f + 1.5e1f;
  out[5] = float(half(1.0) / 3.0h);
}

struct Params {
  uint n;
  float scale;
  packed_float3 pad3;
  float4 bias;
};

kernel void tg_arrays(device const float* a [[buffer(0)]],
                      device float* out [[buffer(1)]],
                      constant Params& p [[buffer(2)]],
                      constant float* cs [[buffer(3)]],
                      uint tid [[thread_index_in_threadgroup]],
                      uint3 tgpig [[threadgroup_position_in_grid]],
                      uint ntg [[threads_per_threadgroup]]) {
  threadgroup float tile[64];
  threadgroup float2 grid2[4][16];
  threadgroup uint first;
  uint base = tgpig[0] * ntg;
  tile[tid] = a[base + tid];
  grid2[tid / 16][tid % 16] = float2(float(tid), a[base + tid]);
  if (tid == 0) first = 1234u;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  device const float4* a4 = (device const float4*)(a + base);
  float v = tile[ntg - 1 - tid] + grid2[(tid + 1) % 4][tid % 16].x + float(first);
  v += ((threadgroup float*)(tile + 4))[0] + a4[1].y + reinterpret_cast<device const float*>(a4)[2];
  out[base + tid] = v * p.scale + p.bias.w + cs[1] + float(p.n);
}

kernel void builtins(device uint* out [[buffer(0)]],
                     uint3 tpig [[thread_position_in_grid]],
                     ushort3 tgpig [[threadgroup_position_in_grid]],
                     uint2 tptg [[thread_position_in_threadgroup]],
                     ushort3 ntg [[threads_per_threadgroup]],
                     uint3 ngroups [[threadgroups_per_grid]],
                     uint3 tpg [[threads_per_grid]],
                     ushort tid [[thread_index_in_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]],
                     uint sg [[simdgroup_index_in_threadgroup]],
                     uint nsg [[simdgroups_per_threadgroup]],
                     uint w [[threads_per_simdgroup]]) {
  uint g = (tpig.z * tpg.y + tpig.y) * tpg.x + tpig.x;
  device uint* o = out + g * 12;
  o[0] = tpig.x; o[1] = tpig.y; o[2] = tpig[2];
  o[3] = tgpig.x + 10u * tgpig.y + 100u * tgpig.z;
  o[4] = tptg.x + 10u * tptg.y;
  o[5] = ntg.x + 10u * ntg.y + 100u * ntg.z;
  o[6] = ngroups.x + 10u * ngroups.y + 100u * ngroups.z;
  o[7] = tid;
  o[8] = lane; o[9] = sg; o[10] = nsg; o[11] = w;
}
`;

const FC_SOURCE = `#include <metal_stdlib>
using namespace metal;
constant bool has_bias [[function_constant(0)]];
constant int mult [[function_constant(1)]];
constant float scale [[function_constant(2)]];
constant half hscale [[function_constant(3)]];
constant uint never [[function_constant(4)]];
constant bool use_scale = is_function_constant_defined(scale);

kernel void fc(device const float* a [[buffer(0)]],
               device float* out [[buffer(1)]],
               uint i [[thread_position_in_grid]]) {
  float v = a[i] * float(mult);
  if (use_scale) v *= scale;
  if (has_bias) v += 1.0f;
  if (is_function_constant_defined(hscale)) v += float(hscale);
  out[i] = v + (is_function_constant_defined(never) ? 1000.0f : 0.0f);
}
`;

// Arguments that exist only where a function constant is true, as Metal's
// [[buffer(n), function_constant(c)]]: a dispatch need not bind them when c
// is false or not given.
const FC_ARGS_SOURCE = `#include <metal_stdlib>
using namespace metal;
constant bool has_bias [[function_constant(0)]];
constant bool use_bias = is_function_constant_defined(has_bias) ? has_bias : false;
struct BiasParams { float scale; };

kernel void fc_args(device const float* a [[buffer(0)]],
                    device float* out [[buffer(1)]],
                    constant BiasParams& bp [[buffer(2), function_constant(has_bias)]],
                    device const float* bias [[buffer(3), function_constant(has_bias)]],
                    uint i [[thread_position_in_grid]]) {
  out[i] = use_bias ? a[i] + bp.scale * bias[i] : a[i];
}

kernel void fc_args_misuse(device float* out [[buffer(0)]],
                           device const float* bias [[buffer(1), function_constant(has_bias)]],
                           uint i [[thread_position_in_grid]]) {
  out[i] = bias[i];
}
`;

const absent = backendAbsence('emu');
const f16 = (x: number): number => f16BitsToF32(f32ToF16Bits(x));
const f32 = Math.fround;

/** Deterministic values: integers and simple fractions, so most checks are exact. */
function values(n: number, f: (i: number) => number): number[] {
  return Array.from({ length: n }, (_, i) => f(i));
}

function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, rel: number, what: string): void {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    const g = got[i]!;
    const w = want[i]!;
    const ok = Number.isNaN(w) ? Number.isNaN(g) : Math.abs(g - w) <= rel * Math.max(1, Math.abs(w));
    if (!ok) throw new Error(`${what}[${i}]: got ${g}, want ${w}`);
  }
}

const SCHEDULES: Record<string, Record<string, string>> = {
  sequential: { schedule: 'sequential' },
  random: { schedule: 'random', seed: EMU_RANDOM_SEED },
};

for (const [label, options] of Object.entries(SCHEDULES)) {
  describe.if(absent === null)(`emu language [${label}]`, () => {
    let device: Device;
    let lib: Library;
    const open = (): { device: Device; lib: Library } => {
      if (!device) {
        device = Device.open({ backend: 'emu' });
        for (const [k, v] of Object.entries(options)) device.setOption(k, v);
        lib = device.compile(SOURCE, { name: FILE });
      }
      return { device, lib };
    };
    function run(kernel: string, b: DispatchBindings, grid: [number, number, number], threads: [number, number, number],
      l?: Library): void {
      const { device: d, lib: lb } = open();
      const enc = d.encoder();
      enc.dispatch((l ?? lb).pipeline(kernel), b, grid, threads);
      enc.commitAndWait();
      enc.release();
    }
    const up = (dtype: 'f32' | 'u32' | 'i32', data: number[]): Buffer => open().device.upload(dtype, [data.length], data);
    const poisoned = (dtype: 'f32' | 'f16' | 'bf16' | 'u32', n: number): Buffer => {
      const b = open().device.alloc(dtype, [n]);
      if (dtype !== 'u32') b.fill(NaN);
      return b;
    };

    test('kernel names: plain kernels and template host_name instantiations', () => {
      const names = open().lib.kernelNames;
      for (const n of ['vectors', 'half_ops', 'simd_fns', 'scale_f32_x2', 'scale_f16_x3', 'builtins']) {
        expect(names).toContain(n);
      }
      expect(names).not.toContain('scale_t');
    });

    test('vectors: constructors, swizzles read and write, conversions, operators', () => {
      const n = 8;
      const a = values(4 * n, (i) => (i % 7) - 2.5 + i / 8);
      const out = poisoned('f32', 16 * n);
      run('vectors', { buffers: { 0: up('f32', a), 1: out } }, [1, 1, 1], [n, 1, 1]);
      const want: number[] = [];
      for (let g = 0; g < n; g++) {
        const [x, y, z, w] = a.slice(4 * g, 4 * g + 4) as [number, number, number, number];
        const W = [x + 10, y, y, x];
        const lt = [x < W[0]!, y < W[1]!, z < W[2]!, w < W[3]!];
        want.push(...W, x * 2, y * 2, z * 2, f16(w), 9, lt.reduce((s, b, i) => s + (b ? 1 : -1) * 2 ** i, 0), 8,
          f32(f32(f32(x + 2 * y) + 3 * z) + 4 * w), 2 * w - 1, -x, z, z);
      }
      expectClose(out.read() as Float32Array, want, 0, 'vectors');
    });

    test('half: every operation rounds to half', () => {
      const n = 64;
      const a = values(n, (i) => f32(Math.sin(i + 1) * 7.3));
      const b = values(n, (i) => f32(Math.cos(2 * i + 1) * 3.1 + (i % 2 ? 0.01 : -0.01)));
      const out = poisoned('f16', 3 * n);
      run('half_ops', { buffers: { 0: up('f32', a), 1: up('f32', b), 2: out } }, [2, 1, 1], [32, 1, 1]);
      const want: number[] = [];
      for (let i = 0; i < n; i++) {
        const x = f16(a[i]!);
        const y = f16(b[i]!);
        want.push(f16(f16(x * y) + x), f16(x / y), f16(f32(a[i]! * b[i]!)));
      }
      expectClose(Array.from(out.read() as Float16Array), want, 0, 'half');
    });

    test('bfloat: conversion rounds to nearest even, operations round to bfloat', () => {
      // Ties at both parities, just above a tie, NaN, infinity, and ordinary values.
      const bits = [0x3f808000, 0x3f818000, 0x3f808001, 0xbf838000, 0x7f800000, 0x3f80ffff, 0x40490fdb, 0xc2f6e979];
      const a = Array.from(new Float32Array(new Uint32Array(bits).buffer));
      const b = values(a.length, (i) => f32(1.01 + i * 0.37));
      const out = poisoned('bf16', 2 * a.length);
      run('bfloat_ops', { buffers: { 0: up('f32', a), 1: up('f32', b), 2: out } }, [1, 1, 1], [a.length, 1, 1]);
      const got = Array.from(out.read() as Uint16Array);
      const want: number[] = [];
      for (let i = 0; i < a.length; i++) {
        const x = bf16(a[i]!);
        const y = bf16(b[i]!);
        want.push(f32ToBf16Bits(a[i]!), f32ToBf16Bits(bf16(x * y) + x));
      }
      expect(got).toEqual(want);
      expect(got.slice(0, 8).filter((_, i) => i % 2 === 0)).toEqual([0x3f80, 0x3f82, 0x3f81, 0xbf84]);
    });

    test('math functions against double-precision references', () => {
      const xs = values(32, (i) => f32(0.1 + i * 0.073));
      const out = poisoned('f32', 24 * xs.length);
      run('math_fns', { buffers: { 0: up('f32', xs), 1: out } }, [1, 1, 1], [32, 1, 1]);
      const want: number[] = [];
      for (const x of xs) {
        const n3 = Math.hypot(x, 1, 2);
        want.push(Math.exp(x), 2 ** x, Math.log(x), Math.sqrt(x), 1 / Math.sqrt(x), x ** 1.5, f32(f32(3 * x) + 0.25),
          Math.min(x, 1), Math.max(x, 1), Math.min(Math.max(x, 0.5), 1.5), f32(1 + f32(2 * x)), x,
          Math.floor(f32(3 * x)) + Math.ceil(f32(3 * x)) * 10, Math.round(4 * x) + Math.trunc(-4 * x) * 10,
          Math.sign(f32(x - 1)), Math.sin(x) + Math.cos(x), Math.tanh(x), Math.max(x, 0), Math.hypot(x, 1), x / n3,
          (x < 1 ? 0 : 1) + 2 + 4, 1 + 2 * (x > 1.2 ? 1 : 0), 1 + 65504, Math.max(2, x) + 1);
      }
      expectClose(out.read() as Float32Array, want, 3e-6, 'math');
    });

    test('integer functions', () => {
      const xs = [1, 2, 3, 0x80000000, 0xffffffff, 1000, 999, 0x12345678, 0x00f00000, 7, 5000, 6000];
      const out = poisoned('u32', 9 * xs.length);
      run('int_fns', { buffers: { 0: up('u32', xs), 1: out } }, [1, 1, 1], [xs.length, 1, 1]);
      const want: number[] = [];
      for (const x of xs) {
        const ctz = x === 0 ? 32 : 31 - Math.clz32(x & -x);
        const mulhi = Number((BigInt(x) * 0x9e3779b9n) >> 32n);
        const s = ((x | 0) - 1000) | 0; // int arithmetic wraps
        const abs = Math.abs(s) >>> 0;
        want.push(Math.clz32(x), ctz, x.toString(2).split('1').length - 1, mulhi, abs, Math.min(x, 1000), Math.max(x, 1000),
          Math.min(Math.max(x, 10), 5000), ((x << 5) | (x >>> 27)) >>> 0);
      }
      expect(Array.from(out.read() as Uint32Array)).toEqual(want);
    });

    test('every simd_* function, with all lanes and with divergent lanes', () => {
      const nt = 64;
      const xs = values(nt, (i) => ((i * 13) % 37) + 1);
      const out = poisoned('f32', 26 * nt);
      run('simd_fns', { buffers: { 0: up('f32', xs), 1: out } }, [1, 1, 1], [nt, 1, 1]);
      const got = out.read() as Float32Array;
      for (let sg = 0; sg < 2; sg++) {
        const x = xs.slice(32 * sg, 32 * sg + 32);
        const u = x.map((v) => v >>> 0);
        const sum = x.reduce((s, v) => s + v, 0);
        for (let l = 0; l < 32; l++) {
          const prefix = (k: number, incl: boolean) => x.slice(0, incl ? k + 1 : k).reduce((s, v) => s + v, 0);
          const pprod = (k: number, incl: boolean) =>
            Array.from({ length: incl ? k + 1 : k }, (_, j) => (j % 4 === 1 ? 2 : 1)).reduce((p: number, v: number) => p * v, 1);
          const q = l & ~3;
          const active = x.slice(8);
          const want = [
            sum, Math.max(...x), Math.min(...x), 2 ** 11,
            u.reduce((s, v) => s & (v | 0x100), 0xffffffff) >>> 0, u.reduce((s, v) => s | v, 0), u.reduce((s, v) => s ^ v, 0),
            x[(l * 7) % 32]!, l >= 3 ? x[l - 3]! : x[l]!, l + 5 < 32 ? x[l + 5]! : x[l]!, x[l ^ 6]!,
            x[(l + 30) % 32]!, x[(l + 2) % 32]!, x[9]!, x[0]!,
            prefix(l, true), prefix(l, false), pprod(l, true), pprod(l, false),
            1 + 2 * (x.some((v) => v > 30) ? 1 : 0),
            [0, 5, 10, 15, 20].reduce((s, b) => s + 2 ** b, 0),
            x[q]! + x[q + 1]! + x[q + 2]! + x[q + 3]! + (l === 0 ? 1000 : 0),
            sum,
            l >= 8 ? active.reduce((s, v) => s + v, 0) : -1,
            l >= 8 ? x[8]! + (l === 8 ? 1000 : 0) : -1,
            l >= 8 ? l - 8 : -1,
          ];
          const g = Array.from(got.slice((32 * sg + l) * 26, (32 * sg + l + 1) * 26));
          expectClose(g, want, 0, `simd sg ${sg} lane ${l}`);
        }
      }
    });

    test('atomics on device and threadgroup memory', () => {
      const groups = 4;
      const nt = 64;
      const counters = up('u32', [0, 0, 0, 0, 1000000, 0]);
      const imin = up('i32', [0]);
      const fsum = up('f32', [0]);
      const tgOut = poisoned('u32', 4 * groups);
      run('atomics', { buffers: { 0: counters, 1: imin, 2: fsum, 3: tgOut }, threadgroupMemory: { 0: 16 } },
        [groups, 1, 1], [nt, 1, 1]);
      const total = groups * nt;
      let xor = 0;
      for (let g = 0; g < total; g++) xor ^= g;
      expect(Array.from(counters.read() as Uint32Array)).toEqual([total, 3 * (total - 1), 0xffffffff, xor, 1000000 - 2 * total,
        5 * total]);
      expect((imin.read() as Int32Array)[0]).toBe(-100);
      expect((fsum.read() as Float32Array)[0]).toBe(0.5 * total);
      const per = [nt, (nt * (nt - 1)) / 2, 7, 2 * nt];
      expect(Array.from(tgOut.read() as Uint32Array)).toEqual(Array.from({ length: groups }, () => per).flat());
    });

    test('simdgroup matrices: load, store, multiply, multiply_accumulate, thread_elements', () => {
      const a = values(256, (i) => ((i * 7) % 11) - 5 + ((i % 3) * 0.25));
      const out = poisoned('f32', 448);
      run('matrices', { buffers: { 0: up('f32', a), 1: out }, threadgroupMemory: { 0: 256 } }, [1, 1, 1], [32, 1, 1]);
      const got = Array.from(out.read() as Float32Array);
      const A = (r: number, c: number) => a[r * 8 + c]!;
      const B = (r: number, c: number) => a[64 + r * 8 + c]!;
      const C = (r: number, c: number) => a[128 + r * 16 + c]!;
      const D: number[] = [];
      const Dh: number[] = [];
      const Db: number[] = [];
      for (let r = 0; r < 8; r++) {
        for (let c = 0; c < 8; c++) {
          let s = 0;
          let sh = 0;
          let sb = 0;
          for (let k = 0; k < 8; k++) {
            s += A(r, k) * B(k, c);
            sh += f16(A(r, k)) * f16(B(c, k));
            sb += bf16(A(r, k)) * bf16(B(k, c));
          }
          D.push(s + C(r, c));
          Dh.push(f16(sh));
          Db.push(bf16(sb));
        }
      }
      expectClose(got.slice(0, 64), D, 1e-6, 'A*B+C');
      expectClose(got.slice(64, 128), Dh, 0, 'half A*B^T');
      expectClose(got.slice(128, 192), Db, 0, 'bfloat A*B');
      const te: number[] = [];
      for (let l = 0; l < 32; l++) {
        const q = l >> 2;
        const row = (q & 4) + ((l >> 1) % 4);
        const col = (q & 2) * 2 + (l % 2) * 2;
        te.push(A(row, col), A(row, col + 1));
      }
      expect(got.slice(192, 256)).toEqual(te);
      // The row sums of the half product, through a half x ones multiply into f32.
      const rowsum = Array.from({ length: 64 }, (_, i) => Dh.slice(8 * (i >> 3), 8 * (i >> 3) + 8).reduce((s, v) => s + v, 0));
      expectClose(got.slice(256, 320), rowsum, 1e-6, 'filled');
      for (let r = 0; r < 8; r++) {
        expect(got.slice(320 + 16 * r, 328 + 16 * r)).toEqual(Array(8).fill(3));
        expectClose(got.slice(328 + 16 * r, 336 + 16 * r), D.slice(8 * r, 8 * r + 8), 1e-6, `origin row ${r}`);
      }
    });

    test('template kernels instantiated with [[host_name]]', () => {
      const a = values(40, (i) => i * 0.5 - 3);
      const o = poisoned('f32', 40);
      run('scale_f32_x2', { buffers: { 0: up('f32', a), 1: o } }, [1, 1, 1], [40, 1, 1]);
      expect(Array.from(o.read() as Float32Array)).toEqual(a.map((x) => 2 * x));
      const h = open().device.upload('f16', [40], a);
      const oh = poisoned('f16', 40);
      run('scale_f16_x3', { buffers: { 0: h, 1: oh } }, [1, 1, 1], [40, 1, 1]);
      expect(Array.from(oh.read() as Float16Array)).toEqual(a.map((x) => f16(3 * f16(x))));
    });

    test('literals: float without suffix, h and bf suffixes, hex and exponent forms', () => {
      const out = poisoned('f32', 6);
      run('literals', { buffers: { 0: out } }, [1, 1, 1], [1, 1, 1]);
      expect(Array.from(out.read() as Float32Array)).toEqual([1.5, 1.75, 0, f32(0.1), 16 + 0.25 + 2 + 15, f16(1 / 3)]);
    });

    test('threadgroup arrays, scalars, casts, constant references and pointers', () => {
      const ntg = 64;
      const groups = 2;
      const a = values(ntg * groups, (i) => (i % 9) * 1.5 - 4);
      const params = new ArrayBuffer(48);
      const dv = new DataView(params);
      dv.setUint32(0, 3, true);
      dv.setFloat32(4, 0.5, true);
      dv.setFloat32(44, 100, true); // bias.w: float4 at offset 32
      const out = poisoned('f32', ntg * groups);
      run('tg_arrays', {
        buffers: { 0: up('f32', a), 1: out, 3: up('f32', [0, 7]) },
        bytes: { 2: new Uint8Array(params) },
      }, [groups, 1, 1], [ntg, 1, 1]);
      const want: number[] = [];
      for (let g = 0; g < groups; g++) {
        const base = g * ntg;
        for (let t = 0; t < ntg; t++) {
          const row = (t + 1) % 4;
          const v = a[base + ntg - 1 - t]! + (row * 16 + (t % 16)) + 1234 + a[base + 4]! + a[base + 5]! + a[base + 2]!;
          want.push(f32(v) * 0.5 + 100 + 7 + 3);
        }
      }
      expectClose(out.read() as Float32Array, want, 1e-6, 'tg_arrays');
    });

    test('builtins as uint, ushort and vectors of them', () => {
      const grid: [number, number, number] = [2, 3, 2];
      const tg: [number, number, number] = [4, 2, 5];
      const tpg = [grid[0] * tg[0], grid[1] * tg[1], grid[2] * tg[2]];
      const total = tpg[0]! * tpg[1]! * tpg[2]!;
      const out = poisoned('u32', 12 * total);
      run('builtins', { buffers: { 0: out } }, grid, tg);
      const got = out.read() as Uint32Array;
      for (let z = 0; z < tpg[2]!; z++) {
        for (let y = 0; y < tpg[1]!; y++) {
          for (let x = 0; x < tpg[0]!; x++) {
            const g = (z * tpg[1]! + y) * tpg[0]! + x;
            const lx = x % tg[0];
            const ly = y % tg[1];
            const lz = z % tg[2];
            const tid = (lz * tg[1] + ly) * tg[0] + lx;
            const want = [x, y, z, Math.floor(x / tg[0]) + 10 * Math.floor(y / tg[1]) + 100 * Math.floor(z / tg[2]),
              lx + 10 * ly, tg[0] + 10 * tg[1] + 100 * tg[2], grid[0] + 10 * grid[1] + 100 * grid[2], tid,
              tid % 32, Math.floor(tid / 32), Math.ceil((tg[0] * tg[1] * tg[2]) / 32), 32];
            expect(Array.from(got.slice(12 * g, 12 * g + 12))).toEqual(want);
          }
        }
      }
    });

    test('function constants: values, types, and is_function_constant_defined', () => {
      const { device: d } = open();
      const a = values(16, (i) => i - 4);
      const runFc = (constants: FunctionConstants): number[] => {
        const l = d.compile(FC_SOURCE, { name: 'emu_fc.metal', constants });
        const o = poisoned('f32', 16);
        run('fc', { buffers: { 0: up('f32', a), 1: o } }, [1, 1, 1], [16, 1, 1], l);
        return Array.from(o.read() as Float32Array);
      };
      expect(runFc({ 0: true, 1: { type: 'i32', value: 3 }, 2: { type: 'f32', value: 0.5 } }))
        .toEqual(a.map((x) => x * 3 * 0.5 + 1));
      expect(runFc({ 0: false, 1: { type: 'i32', value: -2 }, 3: { type: 'f16', value: 0.25 } }))
        .toEqual(a.map((x) => x * -2 + 0.25));
    });

    test('function constants gate arguments: unbound when false or not given, required when true', () => {
      const { device: d } = open();
      const a = values(8, (i) => i + 1);
      const bias = values(8, (i) => 10 * i);
      for (const constants of [{}, { 0: false }] as FunctionConstants[]) {
        const l = d.compile(FC_ARGS_SOURCE, { name: 'emu_fc_args.metal', constants });
        const o = poisoned('f32', 8);
        run('fc_args', { buffers: { 0: up('f32', a), 1: o } }, [1, 1, 1], [8, 1, 1], l);
        expect(Array.from(o.read() as Float32Array)).toEqual(a);
        // A buffer bound where the argument does not exist is ignored.
        run('fc_args', { buffers: { 0: up('f32', a), 1: o, 3: up('f32', bias) }, bytes: { 2: new Float32Array([2]) } },
          [1, 1, 1], [8, 1, 1], l);
        expect(Array.from(o.read() as Float32Array)).toEqual(a);
        // Reading an argument that does not exist is an out-of-bounds access.
        expect(() => run('fc_args_misuse', { buffers: { 0: poisoned('f32', 8) } }, [1, 1, 1], [8, 1, 1], l)).toThrow(/out-of-bounds access to device buffer \[\[buffer\(1\)\]\]/);
      }
      const on = d.compile(FC_ARGS_SOURCE, { name: 'emu_fc_args.metal', constants: { 0: true } });
      const o = poisoned('f32', 8);
      run('fc_args', { buffers: { 0: up('f32', a), 1: o, 3: up('f32', bias) }, bytes: { 2: new Float32Array([0.5]) } },
        [1, 1, 1], [8, 1, 1], on);
      expect(Array.from(o.read() as Float32Array)).toEqual(a.map((x, i) => x + 0.5 * bias[i]!));
      expect(() => run('fc_args', { buffers: { 0: up('f32', a), 1: o } }, [1, 1, 1], [8, 1, 1], on)).toThrow(/buffer\(2\)\]\] is not bound/);
    });

    test('translation errors cite the .metal file, line and column', () => {
      const { device: d } = open();
      const bad = '#include <metal_stdlib>\nusing namespace metal;\nkernel void k(texture2d<float> t [[texture(0)]]) {}\n';
      expect(() => d.compile(bad, { name: 'bad_attr.metal' })).toThrow(/bad_attr\.metal:3:\d+: .*texture/);
    });
  });
}
