// embedding, embedding_token and gather: the param packers against the
// header and the kernels' bindings, the reference by hand, every validation
// rule, and parity on every backend: each table/output dtype pair, rows of
// one element, odd widths (the CUDA scalar path), widths past a threadgroup
// and Gemma 4's hidden 5376, many rows, repeated ids, ids past the table
// (clamped to its last row, never read outside it), and other launch grids.

import { describe, expect, test } from 'bun:test';
import src from '../shaders/embedding.metal' with { type: 'text' };
import {
  EMBEDDING_FAMILY,
  EMBEDDING_KERNELS,
  EMBEDDING_SOURCES,
  embedding,
  embeddingToken,
  gather,
  packEmbedGatherScaleBatchParams,
  packEmbedGatherScaleParams,
  packGatherParams,
  embeddingRef,
  gatherRef,
} from '../ts/ops/embedding.ts';
import { bufferParam } from '../ts/metal-source.ts';
import { joinSources } from '../ts/registry.ts';
import { rowCopyLaunch } from '../ts/launch.ts';
import type { Buffer, DType } from '../ts/index.ts';
import { describeBackends, describeValidation, expectInvalid, maxRelErr, poisoned, randomArray, rng, TARGET_LIMITS, TOL, wordView } from './helpers.ts';
import { a, buf, ggmlBlocks, int, opContract, out, U32, type Case } from './op-contract.ts';
import { GGML_QUANT_TYPES, ggmlRowBytesOf } from '../ts/ops/quantized_matmul_ggml.ts';

describe('embedding param packers and bindings match the .metal declarations', () => {
  const metal = joinSources(EMBEDDING_SOURCES.metal);
  test('gather_<t>: 0 src, 1 indices, 2 output, 3 GatherParams (row_width, n_indices, src_rows)', () => {
    for (const k of EMBEDDING_KERNELS.filter((k) => k.startsWith('gather_'))) {
      expect(bufferParam(metal, k, 1)).toContain('device const uint* indices');
      expect(bufferParam(metal, k, 3)).toBe('constant GatherParams& params [[buffer(3)]]');
    }
    const g = wordView(packGatherParams({ rowWidth: 5376, nIndices: 3, srcRows: 262144 }));
    expect([g.bytes, g.u(0), g.u(1), g.u(2)]).toEqual([12, 5376, 3, 262144]);
  });
  test('embedding_gather_scale_<t>: 0 table, 1 output, 2 EmbedGatherScaleParams (scale, hidden_size, token_id)', () => {
    for (const k of EMBEDDING_KERNELS.filter((k) => k.startsWith('embedding_gather_scale_') && !k.includes('batch'))) {
      expect(bufferParam(metal, k, 2)).toBe('constant EmbedGatherScaleParams& params [[buffer(2)]]');
    }
    const p = wordView(packEmbedGatherScaleParams({ scale: 73.5, hiddenSize: 5376, tokenId: 262143 }));
    expect([p.bytes, p.f(0), p.u(1), p.u(2)]).toEqual([12, 73.5, 5376, 262143]);
  });
  test('embedding_gather_scale_batch_<t>: 0 table, 1 token_ids, 2 output, 3 EmbedGatherScaleBatchParams (+ vocab_size)', () => {
    for (const k of EMBEDDING_KERNELS.filter((k) => k.includes('batch'))) {
      expect(bufferParam(metal, k, 1)).toContain('device const uint* token_ids');
      expect(bufferParam(metal, k, 3)).toBe('constant EmbedGatherScaleBatchParams& params [[buffer(3)]]');
    }
    const p = wordView(packEmbedGatherScaleBatchParams({ scale: 0.5, hiddenSize: 4096, nTokens: 7, vocabSize: 151936 }));
    expect([p.bytes, p.f(0), p.u(1), p.u(2), p.u(3)]).toEqual([16, 0.5, 4096, 7, 151936]);
  });
  test('CUDA launch: copy_rows by rows, X threads a row for 4 steps of 16 bytes a thread, 256 / X rows a block', () => {
    // 8192 tokens x 5376 bf16: 672 steps a row, 168 threads' worth rounded up to 192: one row a block.
    expect(rowCopyLaunch(8192, 5376, 8, TARGET_LIMITS.cuda)).toEqual({ grid: [8192, 1, 1], threads: [192, 1, 1] });
    // One token: one block of 192.
    expect(rowCopyLaunch(1, 5376, 8, TARGET_LIMITS.cuda)).toEqual({ grid: [1, 1, 1], threads: [192, 1, 1] });
    // Rows of 32 steps: 8 threads a row, 32 rows a block; rows of one step: 256 rows a block.
    expect(rowCopyLaunch(64, 256, 8, TARGET_LIMITS.cuda)).toEqual({ grid: [2, 1, 1], threads: [8, 32, 1] });
    expect(rowCopyLaunch(1000, 3, 8, TARGET_LIMITS.cuda)).toEqual({ grid: [4, 1, 1], threads: [1, 256, 1] });
    // Rows past 1024 steps: 256 threads, each looping over its steps 4 at a time.
    expect(rowCopyLaunch(3, 16384, 8, TARGET_LIMITS.cuda)).toEqual({ grid: [3, 1, 1], threads: [256, 1, 1] });
  });
});

describe('embedding reference against hand-computed values', () => {
  test('rows by id, scaled; ids past the table read its last row', () => {
    const table = [1, 2, 3, 4, 5, 6]; // [3, 2]
    expect([...embeddingRef(table, [2, 0, 9], 3, 2, 0.5)]).toEqual([2.5, 3, 0.5, 1, 2.5, 3]);
    expect([...gatherRef(table, [1, 1, 0xffffffff], 3, 2)]).toEqual([3, 4, 3, 4, 5, 6]);
  });
});

describeValidation('embedding validation', ({ enc, buf }) => {
  type Case = [mutate: Record<string, unknown>, arg: string, expected: string, actual: string];
  test('every rule of embedding', () => {
    const base = () => ({ table: buf('bf16', 40), tokenIds: buf('u32', 3), output: buf('bf16', 24), vocabSize: 5, hiddenSize: 8, nTokens: 3 });
    const shared = buf('f32', 64);
    const cases: Case[] = [
      [{ nTokens: 0 }, 'nTokens', 'a positive integer', '0'],
      [{ nTokens: 2 ** 32 }, 'nTokens', 'at most 2^32 - 1', '4294967296'],
      [{ vocabSize: -1 }, 'vocabSize', 'a positive integer', '-1'],
      [{ hiddenSize: 1.5 }, 'hiddenSize', 'a positive integer', '1.5'],
      [{ vocabSize: 2 ** 32 }, 'vocabSize', 'at most 2^32 - 1', '4294967296'],
      [{ hiddenSize: 2 ** 32 }, 'hiddenSize', 'at most 2^32 - 1', '4294967296'],
      [{ scale: Number.NaN }, 'scale', 'a finite number or absent', 'NaN'],
      [{ scale: '2' }, 'scale', 'a finite number or absent', '2'],
      [{ vocabSize: 2 ** 32 - 1, hiddenSize: 2 ** 30 }, 'vocabSize * hiddenSize', 'a product of integers at most 2^53 - 1', `${2 ** 32 - 1} * ${2 ** 30}`],
      [{ nTokens: 2 ** 20, hiddenSize: 2 ** 12 }, 'nTokens * hiddenSize', 'at most 2^32 - 256', `${2 ** 32}`],
      [{ table: buf('u16', 40) }, 'table.dtype', 'one of f32, f16, bf16', 'u16'],
      [{ output: buf('f16', 24) }, 'output.dtype', 'one of bf16, f32', 'f16'],
      [{ table: buf('f32', 40) }, 'output.dtype', 'f32', 'bf16'],
      [{ table: buf('bf16', 48) }, 'table.elementCount', '40', '48'],
      [{ output: buf('bf16', 8) }, 'output.elementCount', '24', '8'],
      [{ tokenIds: buf('i32', 3) }, 'tokenIds.dtype', 'u32', 'i32'],
      [{ tokenIds: buf('u32', 4) }, 'tokenIds.elementCount', '3', '4'],
      [{ tokenIds: undefined }, 'tokenIds', 'a Buffer', 'none'],
      [{ table: shared.view('f32', [40]), output: shared.view('f32', [24], 32) }, 'output', 'a buffer other than table', 'a view overlapping table'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => embedding(enc(), { ...base(), ...m } as never), 'embedding', arg, expected, actual);
    }
  });
  test('every rule of embedding_token', () => {
    const base = () => ({ table: buf('f16', 40), output: buf('f32', 8), tokenId: 4, vocabSize: 5, hiddenSize: 8 });
    const cases: Case[] = [
      [{ tokenId: 5 }, 'tokenId', 'an integer in [0, vocabSize) = [0, 5)', '5'],
      [{ tokenId: -1 }, 'tokenId', 'an integer in [0, vocabSize)', '-1'],
      [{ tokenId: 0.5 }, 'tokenId', 'an integer in [0, vocabSize)', '0.5'],
      [{ vocabSize: 0 }, 'vocabSize', 'a positive integer', '0'],
      [{ hiddenSize: 2 ** 32 - 100, vocabSize: 1, table: buf('f16', 1) }, 'hiddenSize', 'at most 2^32 - 256', `${2 ** 32 - 100}`],
      [{ scale: Number.POSITIVE_INFINITY }, 'scale', 'a finite number or absent', 'Infinity'],
      [{ output: buf('bf16', 8) }, 'output.dtype', 'one of f16, f32', 'bf16'],
      [{ output: buf('f32', 9) }, 'output.elementCount', '8', '9'],
      [{ table: buf('f16', 41) }, 'table.elementCount', '40', '41'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => embeddingToken(enc(), { ...base(), ...m } as never), 'embedding_token', arg, expected, actual);
    }
    const t = buf('f32', 16);
    expectInvalid(() => embeddingToken(enc(), { table: t, output: t.view('f32', [8], 16), tokenId: 0, vocabSize: 2, hiddenSize: 8 }),
      'embedding_token', 'output', 'a buffer other than table', 'a view overlapping table');
  });
  test('every rule of gather', () => {
    const base = () => ({ src: buf('f32', 30), indices: buf('u32', 4), output: buf('f32', 20), srcRows: 6, rowWidth: 5, nIndices: 4 });
    const cases: Case[] = [
      [{ srcRows: 0 }, 'srcRows', 'a positive integer', '0'],
      [{ rowWidth: 2 ** 32 }, 'rowWidth', 'at most 2^32 - 1', '4294967296'],
      [{ nIndices: Number.NaN }, 'nIndices', 'a positive integer', 'NaN'],
      [{ nIndices: 2 ** 22, rowWidth: 2 ** 10 }, 'nIndices * rowWidth', 'at most 2^32 - 256', `${2 ** 32}`],
      [{ src: buf('u32', 30) }, 'src.dtype', 'one of f32, f16, bf16', 'u32'],
      [{ indices: buf('f32', 4) }, 'indices.dtype', 'u32', 'f32'],
      [{ output: buf('bf16', 20) }, 'output.dtype', 'f32', 'bf16'],
      [{ src: buf('f32', 31) }, 'src.elementCount', '30', '31'],
      [{ indices: buf('u32', 5) }, 'indices.elementCount', '4', '5'],
      [{ output: buf('f32', 25) }, 'output.elementCount', '20', '25'],
    ];
    for (const [m, arg, expected, actual] of cases) {
      expectInvalid(() => gather(enc(), { ...base(), ...m } as never), 'gather', arg, expected, actual);
    }
    const s = buf('f32', 30);
    expectInvalid(() => gather(enc(), { ...base(), src: s, output: s.view('f32', [20]) }), 'gather', 'output', 'a buffer other than src',
      'a view overlapping src');
  });
});

/** The pairs of table and output dtypes the kernels take. */
const PAIRS: readonly [DType, DType][] = [['f32', 'f32'], ['f16', 'f16'], ['bf16', 'bf16'], ['f16', 'f32'], ['bf16', 'f32']];
/** [vocab, hidden, tokens]: one element; odd widths (CUDA's scalar path) under and past a threadgroup; vector widths; Gemma 4's hidden. */
const SHAPES: readonly [number, number, number][] = [
  [1, 1, 1], [3, 7, 2], [5, 33, 4], [11, 256, 3], [4, 257, 5], [9, 1000, 6], [3, 4099, 2], [6, 5376, 3], [2, 64, 300],
];

/** Random ids in [0, vocab), with a repeat when there are two tokens or more. */
function ids(r: ReturnType<typeof rng>, vocab: number, n: number): number[] {
  const out = Array.from({ length: n }, () => Math.floor(r.next() * vocab));
  if (n > 1) out[n - 1] = out[0]!;
  return out;
}

/** Bit patterns of a buffer's elements, for exact comparisons. */
function bits(b: Buffer): number[] {
  const raw = b.read();
  return Array.from(raw instanceof Float32Array ? new Uint32Array(raw.buffer, raw.byteOffset, raw.length)
    : raw instanceof Float16Array ? new Uint16Array(raw.buffer, raw.byteOffset, raw.length) : raw);
}

describeBackends('embedding parity', ({ device }) => {
  for (const [t, o] of PAIRS) {
    test(`${t} table -> ${o}: unscaled rows exact, scaled within ${o}'s tolerance`, () => {
      const dev = device();
      const over: string[] = [];
      for (const [vocab, hidden, n] of SHAPES) {
        const r = rng(vocab * 131 + hidden * 7 + n);
        const table = dev.upload(t, [vocab, hidden], randomArray(r, vocab * hidden, -3, 3));
        const tv = table.readNumbers();
        const id = ids(r, vocab, n);
        const tokenIds = dev.upload('u32', [n], id);
        for (const scale of [undefined, Math.sqrt(hidden)]) {
          const out = poisoned(dev, o, [n, hidden]);
          const enc = dev.encoder();
          embedding(enc, { table, tokenIds, output: out, vocabSize: vocab, hiddenSize: hidden, nTokens: n, scale });
          enc.commitAndWait();
          enc.release();
          const want = embeddingRef(tv, id, vocab, hidden, Math.fround(scale ?? 1));
          if (scale === undefined) {
            // The table's values, unchanged (a 16-bit value is exact in f32): compare bit patterns.
            const exact = dev.upload(o, [n, hidden], want);
            if (JSON.stringify(bits(out)) !== JSON.stringify(bits(exact))) over.push(`[${vocab}, ${hidden}] x ${n}: not exact`);
            exact.release();
          } else {
            const e = maxRelErr(out.readNumbers(), want);
            if (!(e < TOL[o as 'f32'])) over.push(`[${vocab}, ${hidden}] x ${n} scale ${scale}: ${e}`);
          }
          out.release();
        }
        table.release();
        tokenIds.release();
      }
      expect(over).toEqual([]);
    });
  }

  test('ids past the table read its last row; nothing outside the table is read', () => {
    const dev = device();
    const [vocab, hidden] = [4, 48];
    // The table sits between two rows of sentinels inside one allocation.
    const whole = dev.upload('bf16', [vocab + 2, hidden], [
      ...new Array(hidden).fill(1e30), ...randomArray(rng(3), vocab * hidden, -2, 2), ...new Array(hidden).fill(-1e30),
    ]);
    const table = whole.view('bf16', [vocab, hidden], hidden * 2);
    const id = [vocab, vocab + 1, 2 ** 31, 0xffff_ffff, 0, vocab - 1];
    const tokenIds = dev.upload('u32', [id.length], id);
    for (const o of ['bf16', 'f32'] as const) {
      const out = poisoned(dev, o, [id.length, hidden]);
      const enc = dev.encoder();
      embedding(enc, { table, tokenIds, output: out, vocabSize: vocab, hiddenSize: hidden, nTokens: id.length, scale: 2 });
      enc.commitAndWait();
      enc.release();
      expect(maxRelErr(out.readNumbers(), embeddingRef(table.readNumbers(), id, vocab, hidden, 2))).toBeLessThan(TOL[o]);
      out.release();
    }
    const g = poisoned(dev, 'bf16', [id.length, hidden]);
    const enc = dev.encoder();
    gather(enc, { src: table, indices: tokenIds, output: g, srcRows: vocab, rowWidth: hidden, nIndices: id.length });
    enc.commitAndWait();
    enc.release();
    expect(Array.from(g.readNumbers())).toEqual(Array.from(gatherRef(table.readNumbers(), id, vocab, hidden)));
  });

  test('embedding_token: one id from the host, first and last rows, every dtype pair', () => {
    const dev = device();
    for (const [t, o] of PAIRS) {
      for (const [vocab, hidden] of [[1, 1], [7, 37], [5, 256], [3, 5376]] as const) {
        const table = dev.upload(t, [vocab, hidden], randomArray(rng(vocab + hidden), vocab * hidden, -4, 4));
        for (const tokenId of [0, vocab - 1]) {
          const out = poisoned(dev, o, [hidden]);
          const enc = dev.encoder();
          embeddingToken(enc, { table, output: out, tokenId, vocabSize: vocab, hiddenSize: hidden, scale: 0.75 });
          enc.commitAndWait();
          enc.release();
          const want = embeddingRef(table.readNumbers(), [tokenId], vocab, hidden, 0.75);
          expect([`${t}->${o} [${vocab}, ${hidden}] id ${tokenId}`, maxRelErr(out.readNumbers(), want) < TOL[o as 'f32']])
            .toEqual([`${t}->${o} [${vocab}, ${hidden}] id ${tokenId}`, true]);
          out.release();
        }
        table.release();
      }
    }
  });

  test('gather: every dtype, bit for bit (MoE rows by expert id)', () => {
    const dev = device();
    for (const t of ['f32', 'f16', 'bf16'] as const) {
      for (const [rows, width, n] of [[1, 1, 1], [8, 3, 5], [128, 64, 9], [5, 1031, 4]] as const) {
        const r = rng(rows * width + n);
        const srcBuf = dev.upload(t, [rows, width], randomArray(r, rows * width, -1, 1));
        const id = ids(r, rows, n);
        const idx = dev.upload('u32', [n], id);
        const out = poisoned(dev, t, [n, width]);
        const enc = dev.encoder();
        gather(enc, { src: srcBuf, indices: idx, output: out, srcRows: rows, rowWidth: width, nIndices: n });
        enc.commitAndWait();
        enc.release();
        const exact = dev.upload(t, [n, width], gatherRef(srcBuf.readNumbers(), id, rows, width));
        expect(bits(out)).toEqual(bits(exact));
        for (const b of [srcBuf, idx, out, exact]) b.release();
      }
    }
  });

  test('other launches cover the rows: whole threadgroups of 100 threads (Metal), a grid of 3 blocks of 64 (CUDA)', () => {
    const dev = device();
    dev.kernels.register(EMBEDDING_FAMILY, EMBEDDING_SOURCES, EMBEDDING_KERNELS);
    const pipe = dev.kernels.pipeline('embedding_gather_scale_batch_bf16');
    const [vocab, hidden, n] = [9, 5376, 7];
    const table = dev.upload('bf16', [vocab, hidden], randomArray(rng(77), vocab * hidden, -2, 2));
    const id = ids(rng(78), vocab, n);
    const tokenIds = dev.upload('u32', [n], id);
    const out = poisoned(dev, 'bf16', [n, hidden]);
    const enc = dev.encoder();
    const cuda = dev.backend === 'cuda';
    enc.dispatch(pipe, {
      buffers: [table, tokenIds, out],
      bytes: [, , , packEmbedGatherScaleBatchParams({ scale: 3, hiddenSize: hidden, nTokens: n, vocabSize: vocab })],
    }, cuda ? [3, 1, 1] : [Math.ceil(hidden / 100), n, 1], cuda ? [64, 1, 1] : [100, 1, 1]);
    enc.commitAndWait();
    enc.release();
    expect(maxRelErr(out.readNumbers(), embeddingRef(table.readNumbers(), id, vocab, hidden, 3))).toBeLessThan(TOL.bf16);
  });
});

// ---- the op contract (tests/op-contract.ts): the validation fuzz, views, plans ----

opContract('embedding', [
  // The ids are a table: random contents are a mutation, clamped by the kernels.
  ...([['bf16', 'f32'], ['f16', 'f16']] as const).map(([t, o]): Case => ({
    fn: 'embedding', op: 'embedding',
    keys: {
      table: buf(['f32', 'f16', 'bf16']), tokenIds: buf(U32, { table: true }), output: out(['f32', 'f16', 'bf16']),
      vocabSize: int, hiddenSize: int, nTokens: int, scale: { kind: 'num?' },
    },
    make: (d) => ({
      table: a(d, t, 5 * 24), tokenIds: a(d, 'u32', 3), output: a(d, o, 3 * 24), vocabSize: 5, hiddenSize: 24, nTokens: 3,
      ...(o === 'f32' ? { scale: 4.899 } : {}),
    }),
    fill: (args) => (args.tokenIds as Buffer).writeNumbers([4, 0, 2]),
  })),
  // A table of GGUF blocks (tableType): the quantized_matmul_ggml family's kernels.
  {
    fn: 'embedding', op: 'embedding',
    keys: {
      table: buf(['u8']), tableType: { kind: 'enum', values: GGML_QUANT_TYPES }, tokenIds: buf(U32, { table: true }),
      output: out(['f32', 'f16', 'bf16']), vocabSize: int, hiddenSize: int, nTokens: int, scale: { kind: 'num?' },
    },
    make: (d) => ({
      table: a(d, 'u8', 5 * ggmlRowBytesOf('Q4_K', 256)), tableType: 'Q4_K', tokenIds: a(d, 'u32', 3), output: a(d, 'bf16', 3 * 256),
      vocabSize: 5, hiddenSize: 256, nTokens: 3, scale: 16,
    }),
    fill: (args) => {
      ggmlBlocks(args.table as Buffer, args.tableType);
      (args.tokenIds as Buffer).writeNumbers([4, 0, 2]);
    },
  },
  {
    fn: 'embeddingToken', op: 'embedding_token',
    keys: {
      table: buf(['f32', 'f16', 'bf16']), output: out(['f32', 'f16', 'bf16']), tokenId: { kind: 'nonneg' },
      vocabSize: int, hiddenSize: int, scale: { kind: 'num?' },
    },
    make: (d) => ({ table: a(d, 'bf16', 4 * 40), output: a(d, 'bf16', 40), tokenId: 3, vocabSize: 4, hiddenSize: 40, scale: 6.3 }),
  },
  {
    fn: 'gather', op: 'gather',
    keys: { src: buf(['f32', 'f16', 'bf16']), indices: buf(U32, { table: true }), output: out(['f32', 'f16', 'bf16']), srcRows: int, rowWidth: int, nIndices: int },
    make: (d) => ({ src: a(d, 'f32', 6 * 5), indices: a(d, 'u32', 4), output: a(d, 'f32', 4 * 5), srcRows: 6, rowWidth: 5, nIndices: 4 }),
    fill: (args) => (args.indices as Buffer).writeNumbers([5, 1, 1, 0]),
  },
]);
