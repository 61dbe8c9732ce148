// The dispatch block, written once: its layout in native/include/mlx_native.h,
// its one decoder in native/include/mlx_native_block.h (emu, cuda and metal
// decode with it), the TypeScript packer's constants (ts/native.ts).
//
//   - the TypeScript constants are the header's, as a C compiler sees them;
//   - the decoder's own C/C++ test (native/common/tests) passes;
//   - malformed blocks sent through mlxn_encoder_dispatch on the emu backend
//     are refused with the decoder's exact words (native/cuda/tests/test_cuda.c
//     checks the same words on cuda).

import { describe, expect, test } from 'bun:test';
import type { Pointer } from 'bun:ffi';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Device } from '../ts/index.ts';
import * as N from '../ts/native.ts';
import { cString, msgBuf, msgCap } from '../ts/native.ts';

const ROOT = join(import.meta.dir, '..');
const HEADER = join(ROOT, 'native', 'include', 'mlx_native.h');
const CC = ['clang-19', 'clang', 'gcc', 'cc'].find((c) => spawnSync('bash', ['-c', `command -v ${c}`]).status === 0);

// Each block constant of the header, by its C name, and the TypeScript value
// that stands for it.
const TS_VALUES: Record<string, number> = {
  MLXN_BIND_BUFFER: N.BIND.buffer,
  MLXN_BIND_BYTES: N.BIND.bytes,
  MLXN_BIND_THREADGROUP_MEMORY: N.BIND.threadgroupMemory,
  MLXN_BIND_TENSOR_MAP: N.BIND.tensorMap,
  MLXN_TMAP_DESC_BYTES: N.TMAP_DESC_BYTES,
  MLXN_TMAP_MAX_RANK: N.TMAP_MAX_RANK,
  MLXN_TMAP_OFFSET: N.TMAP_OFFSET,
  MLXN_TMAP_DTYPE: N.TMAP_DTYPE,
  MLXN_TMAP_RANK: N.TMAP_RANK,
  MLXN_TMAP_DIMS: N.TMAP_DIMS,
  MLXN_TMAP_STRIDES: N.TMAP_STRIDES,
  MLXN_TMAP_BOX: N.TMAP_BOX,
  MLXN_TMAP_SWIZZLE: N.TMAP_SWIZZLE,
  MLXN_TMAP_L2: N.TMAP_L2,
  MLXN_TMAP_RESERVED: N.TMAP_RESERVED,
  MLXN_TMAP_DTYPE_U8: N.TMAP_DTYPE_CODE.u8,
  MLXN_TMAP_DTYPE_U16: N.TMAP_DTYPE_CODE.u16,
  MLXN_TMAP_DTYPE_U32: N.TMAP_DTYPE_CODE.u32,
  MLXN_TMAP_DTYPE_F16: N.TMAP_DTYPE_CODE.f16,
  MLXN_TMAP_DTYPE_BF16: N.TMAP_DTYPE_CODE.bf16,
  MLXN_TMAP_DTYPE_F32: N.TMAP_DTYPE_CODE.f32,
  MLXN_DISPATCH_HEADER_BYTES: N.DISPATCH_HEADER_BYTES,
  MLXN_DISPATCH_BINDING_BYTES: N.DISPATCH_BINDING_BYTES,
  MLXN_MAX_BINDINGS: N.MAX_BINDINGS,
  MLXN_BLOCK_PIPELINE: N.BLOCK_PIPELINE,
  MLXN_BLOCK_GRID: N.BLOCK_GRID,
  MLXN_BLOCK_THREADS: N.BLOCK_THREADS,
  MLXN_BLOCK_BINDING_COUNT: N.BLOCK_BINDING_COUNT,
  MLXN_BLOCK_PAYLOAD_BYTES: N.BLOCK_PAYLOAD_BYTES,
  MLXN_BLOCK_RESERVED: N.BLOCK_RESERVED,
  MLXN_RECORD_KIND: N.RECORD_KIND,
  MLXN_RECORD_INDEX: N.RECORD_INDEX,
  MLXN_RECORD_A: N.RECORD_A,
  MLXN_RECORD_B: N.RECORD_B,
};

/** The header's block constants (bindings, dispatch sizes, block, record and tensor-map descriptor offsets), by name. */
function headerBlockNames(text: string): string[] {
  const names = [...text.matchAll(/^#define\s+(MLXN_(?:BIND_|DISPATCH_|BLOCK_|RECORD_|TMAP_|MAX_BINDINGS)\w*)\s/gm)].map((m) => m[1]!);
  return [...new Set(names)].sort();
}

/** The values a C compiler gives the names, through a program that prints them. */
function compiledValues(names: string[]): Record<string, number> {
  const dir = mkdtempSync(join(tmpdir(), 'mlxn-block-'));
  try {
    const src = join(dir, 'constants.c');
    const exe = join(dir, 'constants');
    writeFileSync(src, [
      '#include <stdio.h>',
      '#include "mlx_native.h"',
      'int main(void) {',
      ...names.map((n) => `  printf("%s %llu\\n", "${n}", (unsigned long long)(${n}));`),
      '  return 0;',
      '}',
    ].join('\n'));
    const build = spawnSync(CC!, ['-std=c99', '-Wall', '-Werror', '-I', join(ROOT, 'native', 'include'), src, '-o', exe], { encoding: 'utf8' });
    if (build.status !== 0) throw new Error(`compiling the constants failed:\n${build.stderr}`);
    const run = spawnSync(exe, { encoding: 'utf8' });
    if (run.status !== 0) throw new Error(`the constants program failed: ${run.stderr}`);
    const out: Record<string, number> = {};
    for (const line of run.stdout.trim().split('\n')) {
      const [name, value] = line.split(' ');
      out[name!] = Number(value);
    }
    return out;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe.skipIf(CC === undefined)('dispatch block layout', () => {
  test('the TypeScript constants are the header\'s, as compiled', () => {
    const names = headerBlockNames(readFileSync(HEADER, 'utf8'));
    // A parser that finds nothing would make the comparison vacuous.
    expect(names.length).toBeGreaterThanOrEqual(16);
    // Every block constant of the header has its TypeScript value, and no other.
    expect(Object.keys(TS_VALUES).sort()).toEqual(names);
    expect(TS_VALUES).toEqual(compiledValues(names));
  });

  test('the decoder\'s C and C++ unit test (native/common/tests/run.sh)', () => {
    const r = spawnSync('bash', [join(ROOT, 'native', 'common', 'tests', 'run.sh')], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`run.sh exited with ${r.status}:\n${r.stdout}\n${r.stderr}`);
    const results = r.stdout.match(/^\d+ checks, 0 failures$/gm) ?? [];
    expect(results.length).toBe(2); // C99 and C++
  }, 60_000);
});

// ---- malformed blocks through the C ABI of the emu backend ----

const KERNELS = `#include <metal_stdlib>
using namespace metal;
kernel void add_one(device float* x [[buffer(0)]], constant uint& n [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) {
  if (i < n) x[i] += 1.0f;
}
kernel void uses_tg(device float* x [[buffer(0)]], threadgroup float* tg [[threadgroup(0)]],
                    uint i [[thread_index_in_threadgroup]]) {
  tg[i] = x[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  x[i] = tg[i] + 1.0f;
}
`;

/** A block built field by field with the named offsets. */
class BlockBuilder {
  private records: [number, number, bigint, bigint][] = [];
  private payload: number[] = [];
  constructor(
    private pipeline: bigint,
    private grid: [number, number, number] = [1, 1, 1],
    private threads: [number, number, number] = [32, 1, 1],
  ) {}
  record(kind: number, index: number, a: bigint | number, b: bigint | number): this {
    this.records.push([kind, index, BigInt(a), BigInt(b)]);
    return this;
  }
  buffer(index: number, handle: bigint, offset = 0): this {
    return this.record(N.BIND.buffer, index, handle, offset);
  }
  bytes(index: number, data: number[]): this {
    this.record(N.BIND.bytes, index, this.payload.length, data.length);
    this.payload.push(...data);
    return this;
  }
  threadgroup(index: number, length: number): this {
    return this.record(N.BIND.threadgroupMemory, index, length, 0);
  }
  build(): Uint8Array {
    const n = this.records.length;
    const at = N.DISPATCH_HEADER_BYTES + N.DISPATCH_BINDING_BYTES * n;
    const out = new Uint8Array(at + this.payload.length);
    const v = new DataView(out.buffer);
    v.setBigUint64(N.BLOCK_PIPELINE, this.pipeline, true);
    for (let d = 0; d < 3; d++) {
      v.setUint32(N.BLOCK_GRID + 4 * d, this.grid[d]!, true);
      v.setUint32(N.BLOCK_THREADS + 4 * d, this.threads[d]!, true);
    }
    v.setUint32(N.BLOCK_BINDING_COUNT, n, true);
    v.setUint32(N.BLOCK_PAYLOAD_BYTES, this.payload.length, true);
    this.records.forEach(([kind, index, a, b], i) => {
      const r = N.DISPATCH_HEADER_BYTES + N.DISPATCH_BINDING_BYTES * i;
      v.setUint32(r + N.RECORD_KIND, kind, true);
      v.setUint32(r + N.RECORD_INDEX, index, true);
      v.setBigUint64(r + N.RECORD_A, a, true);
      v.setBigUint64(r + N.RECORD_B, b, true);
    });
    out.set(this.payload, at);
    return out;
  }
}

function emuAbsent(): boolean {
  try {
    Device.open({ backend: 'emu' }).close();
    return false;
  } catch {
    return true;
  }
}

describe.skipIf(emuAbsent())('malformed blocks through mlxn_encoder_dispatch (emu)', () => {
  test('each is refused with the decoder\'s words, and nothing is recorded', () => {
    const device = Device.open({ backend: 'emu' });
    try {
      const lib = device.compile(KERNELS, { name: 'block.metal' });
      const add = lib.pipeline('add_one');
      const tgp = lib.pipeline('uses_tg');
      const buf = device.alloc('f32', [100]); // 400 bytes
      const enc = device.encoder();
      const sym = enc._state.sym;
      const P = BigInt(add._h);
      const B = BigInt(buf._h);
      const n4 = [100, 0, 0, 0];
      const dispatch = (block: Uint8Array | null, len?: number): string => {
        msgBuf[0] = 0;
        const st = sym.mlxn_encoder_dispatch(enc._h as Pointer, block, len ?? block?.length ?? 0, msgBuf, msgCap);
        return `${st} ${cString(msgBuf)}`;
      };
      const refused = (text: string): string => `1 ${text}`; // MLXN_ERR_INVALID_ARGUMENT
      const K = "dispatch: kernel 'add_one': ";
      const good = () => new BlockBuilder(P).buffer(0, B).bytes(1, n4);

      // The block's own faults (the decoder).
      expect(dispatch(null, 48)).toBe(refused('dispatch: block must be non-NULL'));
      const ok = good().build();
      expect(dispatch(ok, 40)).toBe(refused("dispatch: block_len must be at least 48, the header's size (got 40)"));
      expect(dispatch(ok, ok.length - 1)).toBe(refused(`${K}block_len must be 48 + 24 * 2 bindings + 4 payload bytes = 100 (got 99)`));
      {
        const b = good().build();
        new DataView(b.buffer).setUint32(N.BLOCK_BINDING_COUNT, 63, true);
        expect(dispatch(b)).toBe(refused(`${K}binding count must be at most 62, one per [[buffer(i)]] and [[threadgroup(i)]] index (got 63)`));
      }
      {
        const b = good().build();
        new DataView(b.buffer).setUint32(N.BLOCK_RESERVED, 7, true);
        expect(dispatch(b)).toBe(refused(`${K}the header's reserved field (byte 40) must be 0 (got 7)`));
      }
      expect(dispatch(new BlockBuilder(P, [1, 0, 1]).buffer(0, B).bytes(1, n4).build()))
        .toBe(refused(`${K}threadgroups per grid must be positive on every axis (got 1x0x1)`));
      expect(dispatch(new BlockBuilder(P, [1, 1, 1], [0, 1, 1]).buffer(0, B).bytes(1, n4).build()))
        .toBe(refused(`${K}threads per threadgroup must be positive on every axis (got 0x1x1)`));
      expect(dispatch(new BlockBuilder(P, [0x1_0000, 1, 1], [0x1_0000, 1, 1]).buffer(0, B).bytes(1, n4).build()))
        .toBe(refused(`${K}threads per grid on axis x must be at most 4294967295, 32 bits (got 65536 threadgroups x 65536 threads = 4294967296)`));
      expect(dispatch(good().record(9, 2, 0, 0).build()))
        .toBe(refused(`${K}binding 2: kind must be 1 (buffer), 2 (bytes), 3 (threadgroup memory) or 4 (tensor map) (got 9)`));
      // A well-formed tensor map binding: the emulator has none (CUDA's TMA).
      expect(dispatch(new BlockBuilder(P).buffer(0, B).bytes(1, [...n4, ...new Array<number>(12).fill(0), ...new Array<number>(128).fill(0)]).record(N.BIND.tensorMap, 2, B, 16).build()))
        .toBe(refused(`${K}binding 2 (tensor map [[buffer(2)]]): the binding must be a buffer or bytes: this backend has no tensor maps (CUDA's, on compute capability 9.0 and later)`));
      expect(dispatch(good().record(N.BIND.tensorMap, 2, B, 0).build()))
        .toBe(refused(`${K}binding 2 (tensor map [[buffer(2)]]): offset + length must be at most the payload's 4 bytes (got 0 + 128)`));
      expect(dispatch(new BlockBuilder(P).buffer(31, B).build()))
        .toBe(refused(`${K}binding 0 (buffer): index must be below 31 (got 31)`));
      expect(dispatch(good().buffer(1, B).build()))
        .toBe(refused(`${K}binding 2 (buffer [[buffer(1)]]): [[buffer(1)]] must be bound once (binding 1 binds it too)`));
      expect(dispatch(good().threadgroup(3, 16).threadgroup(3, 32).build()))
        .toBe(refused(`${K}binding 3 (threadgroup memory [[threadgroup(3)]]): [[threadgroup(3)]] must be bound once (binding 2 binds it too)`));
      expect(dispatch(new BlockBuilder(P).buffer(0, B).bytes(1, n4).record(N.BIND.bytes, 2, 2, 4).build()))
        .toBe(refused(`${K}binding 2 (bytes [[buffer(2)]]): offset + length must be at most the payload's 4 bytes (got 2 + 4)`));
      expect(dispatch(good().record(N.BIND.threadgroupMemory, 0, 16, 1).build()))
        .toBe(refused(`${K}binding 2 (threadgroup memory [[threadgroup(0)]]): the record's b must be 0 (got 1)`));

      // What the backend finds with the decoder's words.
      expect(dispatch(new BlockBuilder(0x1234n).buffer(0, B).bytes(1, n4).build()))
        .toBe(refused("dispatch: the pipeline handle must be a live pipeline of the encoder's device (got 0x1234)"));
      expect(dispatch(new BlockBuilder(P).buffer(0, 0x5678n).bytes(1, n4).build()))
        .toBe(refused(`${K}binding 0 (buffer [[buffer(0)]]): the handle must be a live buffer of the encoder's device (got 0x5678)`));
      expect(dispatch(new BlockBuilder(P).buffer(0, B, 404).bytes(1, n4).build()))
        .toBe(refused(`${K}binding 0 (buffer [[buffer(0)]]): offset must be at most the buffer's length, 400 bytes (got 404)`));
      expect(dispatch(new BlockBuilder(P, [1, 1, 1], [2048, 1, 1]).buffer(0, B).bytes(1, n4).build()))
        .toBe(refused(`${K}threads per threadgroup must be at most 1024 for this pipeline (got 2048x1x1 = 2048)`));
      const limit = device.limits.maxThreadgroupMemory;
      expect(dispatch(new BlockBuilder(BigInt(tgp._h)).buffer(0, B).threadgroup(0, limit + 1).build()))
        .toBe(refused(`dispatch: kernel 'uses_tg': threadgroup memory must be at most ${limit} bytes per threadgroup (got ${limit + 16} bytes bound + 0 bytes static)`));

      // None of them was recorded: the encoder's commit runs nothing, and a
      // valid block still records.
      expect(dispatch(ok)).toBe('0 ');
      enc.commitAndWait();
      expect((buf.read() as Float32Array)[0]).toBe(1);
      enc.release();
    } finally {
      device.close();
    }
  });
});
