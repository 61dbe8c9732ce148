// The argument sets of every op of ts/ops: what each argument is, and a
// valid set at a small shape. Used by the validation fuzz
// (tests/fuzz-validation.test.ts) and the views test (tests/views.test.ts).

import type { Buffer, Device, DType } from '../ts/index.ts';
import { GGML_QUANT_TYPES, ggmlBlockOf, ggmlRowBytesOf, type GgmlQuantType } from '../ts/ops/quantized_matmul_ggml.ts';
import { ggmlQuantize } from '../ts/reference/quantized_matmul_ggml.ts';
import type { Rng } from './helpers.ts';

export type Kind =
  | 'buf' // a live buffer of the device (required)
  | 'buf?' // absent, or as buf
  | 'int' // a safe integer > 0
  | 'int?' // absent, or as int
  | 'num' // a finite number
  | 'num?'
  | 'nonneg' // a finite number >= 0
  | 'nonneg?'
  | 'bool'
  | 'bool?'
  | 'enum' // one of `values`
  | 'offsets?' // cuSeqlens: absent or an array of offsets
  | 'free'; // anything (ignored by the op in this set)

export interface KeySpec {
  kind: Kind;
  /** Buffers: every dtype the argument takes in some valid set. */
  dtypes?: readonly DType[];
  /** Buffers: the element count may differ with no size changed (e.g. a scalar of 1 or dim elements). */
  freeCount?: boolean;
  /** Buffers: a table whose contents index memory (random contents are a mutation). */
  table?: boolean;
  /** Buffers: written by the op. */
  output?: boolean;
  /**
   * Buffers: the op's working memory, whose contents after the op are not
   * specified (a multi-block selection's candidates arrive in the order the
   * blocks append them): compared by neither the views nor the plans test.
   */
  working?: boolean;
  values?: readonly unknown[];
  /** When the op reads the argument (default: always); otherwise a buffer must only be live if given, and a scalar is free. */
  readWhen?: (args: Args) => boolean;
}

export interface Case {
  /** The exported function. */
  fn: string;
  /** The first word of its messages. */
  op: string;
  /** The arguments and what they are. */
  keys: Record<string, KeySpec>;
  /** Pairs of arguments that may be one buffer (in place, documented). */
  inPlace?: readonly (readonly [string, string])[];
  /** A valid argument set at a small shape on device d. */
  make(d: Device): Record<string, unknown>;
  /** Valid contents of the tables and other inputs that must hold particular values. */
  fill?(args: Record<string, unknown>): void;
}

export type Args = Record<string, unknown>;

const F = ['f32'] as const;
const BF = ['bf16'] as const;
const U32 = ['u32'] as const;
const EW = ['f32', 'f16', 'bf16'] as const;
const buf = (dtypes: readonly DType[], extra: Partial<KeySpec> = {}): KeySpec => ({ kind: 'buf', dtypes, ...extra });
const out = (dtypes: readonly DType[], extra: Partial<KeySpec> = {}): KeySpec => ({ kind: 'buf', dtypes, output: true, ...extra });
const int: KeySpec = { kind: 'int' };

const a = (d: Device, dtype: DType, n: number): Buffer => d.alloc(dtype, [n]);
/** Packed quantized weights: any bits are valid values (a fixed scramble of the word index). */
const randomWords = (b: Buffer): void => b.writeNumbers(Array.from({ length: b.elementCount }, (_, i) => Math.imul(i + 1, 0x9e3779b1) >>> 0));
/**
 * GGUF blocks in a u8 buffer: as many whole blocks of the type as it holds,
 * quantized from values in [-1, 1) (any bytes are valid blocks; quantized
 * ones keep the f16 scales finite, so results compare bit for bit).
 */
const ggmlBlocks = (b: Buffer, type: unknown): void => {
  if (!(GGML_QUANT_TYPES as readonly unknown[]).includes(type)) return;
  const { qk, bytes } = ggmlBlockOf(type as GgmlQuantType);
  const blocks = Math.floor(b.byteLength / bytes);
  if (blocks === 0) return;
  const q = ggmlQuantize(type as GgmlQuantType, Array.from({ length: blocks * qk }, (_, i) => Math.sin(i * 0.37)), 1, blocks * qk);
  const all = new Uint8Array(b.byteLength);
  all.set(q);
  b.write(all);
};

// ---- the generators: one per op and variant ----

// The chunked steps at nTok = 3 tokens in one chunk of one sequence, H = Hg = 1, K = V = 64.
const STEP = { nTok: 3, nt: 1, nSeq: 1, nQkHeads: 1, nHeads: 1, kDim: 64, vDim: 64 };
const stepParams: Record<string, KeySpec> = {
  nTok: int, nt: int, nSeq: int, nQkHeads: int, nHeads: int, kDim: int, vDim: int, scale: { kind: 'num?' },
};
const chunksOf = (d: Device): Buffer => d.upload('u32', [1, 2], [0, 3]);
const seqsOf = (d: Device): Buffer => d.upload('u32', [2, 2], [0, 0, 3, 1]);
const tableFill = (args: Record<string, unknown>): void => {
  if (args.chunks !== undefined) (args.chunks as Buffer).writeNumbers([0, 3]);
  if (args.seqs !== undefined) (args.seqs as Buffer).writeNumbers([0, 0, 3, 1]);
};

/** flashAttnVec's arguments, shared by its sets (f32 KV split over workgroups, f16 KV in one, bf16 KV at head dim 128). */
const FLASH_ATTN_VEC_KEYS: Record<string, KeySpec> = {
  q: buf(F), k: buf(['f32', 'f16', 'bf16']), v: buf(['f32', 'f16', 'bf16']), out: out(F), tmp: { kind: 'buf?', dtypes: F, output: true, readWhen: (x) => x.nwg !== 1 },
  batch: int, nHeads: int, nKvHeads: int, headDim: int, kvSeqLen: int, kvCapacity: int, nwg: int,
  scale: { kind: 'num' }, mask: { kind: 'enum', values: ['none', 'causal', 'slidingWindow'] },
  slidingWindow: { kind: 'int', readWhen: (x) => x.mask === 'slidingWindow' }, softcap: { kind: 'nonneg?' },
};
/** flashAttnVecVarlen's: flashAttnVec's without kvSeqLen, with the lengths (any u32 is safe to read by) and the ring flag. */
const FLASH_ATTN_VEC_VARLEN_KEYS: Record<string, KeySpec> = {
  ...Object.fromEntries(Object.entries(FLASH_ATTN_VEC_KEYS).filter(([k]) => k !== 'kvSeqLen')),
  seqLens: buf(U32), ring: { kind: 'bool?' },
};

export const CASES: Case[] = [
  {
    fn: 'chunkLocalCumsum', op: 'chunk_local_cumsum',
    keys: { gIn: buf(F), gCumsum: out(F), batch: int, seqLen: int, nHeads: int, bt: int },
    make: (d) => ({ gIn: a(d, 'f32', 30), gCumsum: a(d, 'f32', 30), batch: 2, seqLen: 5, nHeads: 3, bt: 4 }),
  },
  {
    fn: 'computeGBeta', op: 'compute_g_beta',
    keys: {
      a: buf(['f32', 'bf16']), b: buf(['f32', 'bf16']), aLog: buf(F), dtBias: buf(F), g: out(F), beta: out(F),
      batch: int, seqLen: int, nHeads: int,
    },
    make: (d) => ({
      a: a(d, 'f32', 24), b: a(d, 'f32', 24), aLog: a(d, 'f32', 4), dtBias: a(d, 'f32', 4), g: a(d, 'f32', 24),
      beta: a(d, 'f32', 24), batch: 2, seqLen: 3, nHeads: 4,
    }),
  },
  // ---- elementwise: the element count is the first input's (any count), the other buffers' the same,
  // so all of them may change together ----
  ...(['elementwiseAdd', 'elementwiseMul', 'elementwiseAddScaled'] as const).map((fn): Case => ({
    fn, op: { elementwiseAdd: 'elementwise_add', elementwiseMul: 'elementwise_mul', elementwiseAddScaled: 'elementwise_add_scaled' }[fn],
    keys: {
      a: buf(EW, { freeCount: true }), b: buf(EW, { freeCount: true }), output: out(EW, { freeCount: true }),
      ...(fn === 'elementwiseAddScaled' ? { scale: { kind: 'num' } } : {}),
    },
    inPlace: [['a', 'output'], ['b', 'output']],
    make: (d) => ({
      a: a(d, 'bf16', 21), b: a(d, 'bf16', 21), output: a(d, 'bf16', 21), ...(fn === 'elementwiseAddScaled' ? { scale: 0.5 } : {}),
    }),
  })),
  {
    fn: 'scalarMul', op: 'scalar_mul',
    keys: { input: buf(EW, { freeCount: true }), output: out(EW, { freeCount: true }), scalar: { kind: 'num' } },
    inPlace: [['input', 'output']],
    make: (d) => ({ input: a(d, 'f16', 19), output: a(d, 'f16', 19), scalar: 73.3 }),
  },
  {
    fn: 'cast', op: 'cast',
    keys: { input: buf(EW, { freeCount: true }), output: out(EW, { freeCount: true }) },
    make: (d) => ({ input: a(d, 'f32', 17), output: a(d, 'bf16', 17) }),
  },
  // ---- end of elementwise ----
  // ---- embedding: row gathers by u32 ids (the ids a table: random contents are a mutation, clamped by the kernels) ----
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
  // ---- end of embedding ----
  // ---- dense (matrix products) ----
  ...[
    { dtype: 'bf16', m: 3, n: 10, k: 40, batch: 2, weightBatch: 1 },
    { dtype: 'f16', m: 9, n: 5, k: 16, batch: 2, weightBatch: 2 },
  ].map((p): Case => ({
    fn: 'denseMatmul', op: 'dense_matmul',
    keys: {
      x: buf(['f32', 'f16', 'bf16']), weight: buf(['f32', 'f16', 'bf16']), output: out(['f32', 'f16', 'bf16']), m: int, n: int, k: int,
      batch: { kind: 'int?' }, weightBatch: { kind: 'int?' }, form: { kind: 'enum', values: ['vector', 'matrix', undefined] },
    },
    make: (d) => ({
      x: a(d, p.dtype as DType, p.batch * p.m * p.k), weight: a(d, p.dtype as DType, p.weightBatch * p.n * p.k),
      output: a(d, p.dtype as DType, p.batch * p.m * p.n), m: p.m, n: p.n, k: p.k, batch: p.batch, weightBatch: p.weightBatch,
    }),
  })),
  // mlx-native's rule: each buffer holds at least its elements (freeCount).
  ...[1, 3].map((m): Case => ({
    fn: 'denseGemmF16', op: 'dense_gemm_f16',
    keys: {
      a: buf(['f16'], { freeCount: true }), b: buf(['f16'], { freeCount: true }), output: out(['f16'], { freeCount: true }), m: int, n: int, k: int,
    },
    make: (d) => ({ a: a(d, 'f16', m * 24), b: a(d, 'f16', 5 * 24), output: a(d, 'f16', m * 5), m, n: 5, k: 24 }),
  })),
  {
    fn: 'denseMatvec', op: 'dense_matvec',
    keys: {
      a: buf(['f32', 'f16'], { freeCount: true }), b: buf(['f32', 'f16', 'bf16'], { freeCount: true }),
      output: out(['f32', 'f16'], { freeCount: true }), m: int, n: int, k: int,
    },
    make: (d) => ({ a: a(d, 'f32', 20), b: a(d, 'bf16', 120), output: a(d, 'f32', 6), m: 1, n: 6, k: 20 }),
  },
  {
    fn: 'denseGemvBf16F32', op: 'dense_gemv_bf16_f32',
    keys: {
      src0: buf(BF, { freeCount: true }), src1: buf(F, { freeCount: true }), dst: out(F, { freeCount: true }),
      m: int, n: int, k: int, src0Batch: int, src1Batch: int,
    },
    make: (d) => ({
      src0: a(d, 'bf16', 2 * 6 * 40), src1: a(d, 'f32', 4 * 2 * 40), dst: a(d, 'f32', 4 * 2 * 6), m: 2, n: 6, k: 40, src0Batch: 2, src1Batch: 4,
    }),
  },
  {
    fn: 'denseMatmulTensor', op: 'dense_matmul_tensor',
    keys: {
      src0: buf(['f32', 'f16', 'bf16'], { freeCount: true }), src1: buf(F, { freeCount: true }), dst: out(F, { freeCount: true }),
      m: int, n: int, k: int, src0Batch: int, src1Batch: int,
    },
    make: (d) => ({
      src0: a(d, 'f16', 6 * 32), src1: a(d, 'f32', 2 * 3 * 32), dst: a(d, 'f32', 2 * 3 * 6), m: 3, n: 6, k: 32, src0Batch: 1, src1Batch: 2,
    }),
  },
  // ---- quantized_matmul (MLX affine quantization; the weight's contents are any bits) ----
  ...[
    { dtype: 'bf16', m: 3, n: 10, k: 64, groupSize: 32, bits: 4 },
    { dtype: 'f16', m: 9, n: 5, k: 128, groupSize: 64, bits: 6 },
  ].map((p): Case => ({
    fn: 'affineQuantizedMatmul', op: 'affine_quantized_matmul',
    keys: {
      x: buf(EW), weight: buf(U32), scales: buf(EW), biases: buf(EW), output: out(EW), m: int, n: int, k: int,
      groupSize: { kind: 'enum', values: [32, 64, 128] }, bits: { kind: 'enum', values: [4, 6, 8] },
      form: { kind: 'enum', values: ['vector', 'matrix', undefined] },
    },
    make: (d) => ({
      x: a(d, p.dtype as DType, p.m * p.k), weight: a(d, 'u32', (p.n * p.k * p.bits) / 32), scales: a(d, p.dtype as DType, (p.n * p.k) / p.groupSize),
      biases: a(d, p.dtype as DType, (p.n * p.k) / p.groupSize), output: a(d, p.dtype as DType, p.m * p.n), m: p.m, n: p.n, k: p.k,
      groupSize: p.groupSize, bits: p.bits,
    }),
    fill: (args) => randomWords(args.weight as Buffer),
  })),
  // mlx-native's rule: each buffer holds at least its size (freeCount); any k and group size.
  ...([
    ['quantizedMatmul', 'quantized_matmul', 'f32', { m: 2, k: 10, n: 3, groupSize: 4, bits: 6 }],
    ['quantizedMatmulSimd', 'quantized_matmul_simd', 'f32', { m: 2, k: 256, n: 8, groupSize: 64, bits: 4 }],
    ['quantizedMatmulSimdBf16', 'quantized_matmul_simd_bf16', 'bf16', { m: 9, k: 96, n: 5, groupSize: 32, bits: 8 }],
  ] as const).map(([fn, op, io, p]): Case => ({
    fn, op,
    keys: {
      input: buf([io], { freeCount: true }), weight: buf(['u32', 'u8'], { freeCount: true }), scales: buf(BF, { freeCount: true }),
      biases: buf(BF, { freeCount: true }), output: out([io], { freeCount: true }), m: int, k: int, n: int, groupSize: int,
      bits: { kind: 'enum', values: [4, 6, 8] },
    },
    make: (d) => ({
      input: a(d, io, p.m * p.k), weight: a(d, 'u32', Math.ceil((p.n * (p.bits === 6 ? 3 * Math.ceil(p.k / 4) : 4 * Math.ceil((p.k * p.bits) / 32))) / 4)),
      scales: a(d, 'bf16', p.n * Math.ceil(p.k / p.groupSize)), biases: a(d, 'bf16', p.n * Math.ceil(p.k / p.groupSize)), output: a(d, io, p.m * p.n),
      ...p,
    }),
    fill: (args) => randomWords(args.weight as Buffer),
  })),
  // ---- end of quantized_matmul ----
  // ---- quantized_matmul_ggml (GGUF blocks; the crate's rule: each buffer at least its size) ----
  ...([
    { ggmlType: 'Q4_0', m: 3, n: 5, k: 64 },
    { ggmlType: 'Q6_K', m: 9, n: 3, k: 256 },
  ] as const).map((p): Case => ({
    fn: 'quantizedMatmulGgml', op: 'quantized_matmul_ggml',
    keys: {
      input: buf(F, { freeCount: true }), weight: buf(['u8'], { freeCount: true }), output: out(F, { freeCount: true }), m: int, n: int, k: int,
      ggmlType: { kind: 'enum', values: GGML_QUANT_TYPES }, form: { kind: 'enum', values: ['vector', 'matrix', undefined] },
    },
    make: (d) => ({
      input: a(d, 'f32', p.m * p.k), weight: a(d, 'u8', p.n * ggmlRowBytesOf(p.ggmlType, p.k)), output: a(d, 'f32', p.m * p.n), ...p,
    }),
    fill: (args) => ggmlBlocks(args.weight as Buffer, args.ggmlType),
  })),
  {
    fn: 'ggmlDequantize', op: 'ggml_dequantize',
    keys: { src: buf(['u8']), output: out(['f32', 'f16', 'bf16']), count: int, ggmlType: { kind: 'enum', values: GGML_QUANT_TYPES } },
    make: (d) => ({ src: a(d, 'u8', 2 * ggmlRowBytesOf('Q5_K', 256)), output: a(d, 'f16', 512), count: 512, ggmlType: 'Q5_K' }),
    fill: (args) => ggmlBlocks(args.src as Buffer, args.ggmlType),
  },
  // ---- end of quantized_matmul_ggml ----
  // ---- quantized_matmul_id (MLX affine per-expert products; ids, offsets and order are tables) ----
  // m = 3 rows x 2 slots, 4 experts of n = 5 rows, k = 64, 4 bits, groups of 32: 8 words and 2 groups a row.
  ...(['quantizedMvId', 'quantizedMmId', 'quantizedGateUpMvId', 'quantizedGateUpMmId'] as const).map((fn): Case => {
    const gu = fn.includes('GateUp');
    const mm = fn.includes('Mm');
    const experts = (pre: string): Record<string, KeySpec> => gu
      ? { [`${pre}Weight`]: buf(U32), [`${pre}Scales`]: buf(['f16', 'bf16']), [`${pre}Biases`]: buf(['f16', 'bf16']) }
      : { weight: buf(U32), scales: buf(['f16', 'bf16']), biases: buf(['f16', 'bf16']) };
    const routing: Record<string, KeySpec> = mm ? { offsets: buf(U32, { table: true }), order: buf(U32, { table: true }) } : { ids: buf(U32, { table: true }) };
    const op = { quantizedMvId: 'quantized_mv_id', quantizedMmId: 'quantized_mm_id', quantizedGateUpMvId: 'quantized_gate_up_mv_id', quantizedGateUpMmId: 'quantized_gate_up_mm_id' }[fn];
    return {
      fn, op,
      keys: {
        x: buf(['f16', 'bf16']), ...experts('gate'), ...(gu ? experts('up') : {}), ...routing, output: out(['f16', 'bf16']),
        m: int, n: int, k: int, groupSize: { kind: 'enum', values: [32, 64, 128] }, bits: { kind: 'enum', values: [4, 6, 8] },
        nExpertUsed: int, numExperts: int, expertRows: { kind: 'int?' },
        ...(gu ? { activation: { kind: 'enum', values: [undefined, 'silu', 'gelu_tanh'] } } : {}),
      },
      make: (d) => {
        const set = (pre: string): Record<string, Buffer> => gu
          ? { [`${pre}Weight`]: a(d, 'u32', 160), [`${pre}Scales`]: a(d, 'bf16', 40), [`${pre}Biases`]: a(d, 'bf16', 40) }
          : { weight: a(d, 'u32', 160), scales: a(d, 'bf16', 40), biases: a(d, 'bf16', 40) };
        return {
          x: a(d, 'bf16', 192), ...set('gate'), ...(gu ? set('up') : {}),
          ...(mm ? { offsets: a(d, 'u32', 6), order: a(d, 'u32', 6) } : { ids: a(d, 'u32', 6) }), output: a(d, 'bf16', 30),
          m: 3, n: 5, k: 64, groupSize: 32, bits: 4, nExpertUsed: 2, numExperts: 4, ...(gu ? { activation: 'gelu_tanh' } : {}),
        };
      },
      fill: (args) => {
        for (const w of ['weight', 'gateWeight', 'upWeight']) if (args[w] !== undefined) randomWords(args[w] as Buffer);
        if (args.ids !== undefined) (args.ids as Buffer).writeNumbers([3, 0, 1, 7, 2, 2]);
        if (args.offsets !== undefined) (args.offsets as Buffer).writeNumbers([0, 1, 2, 4, 5, 6]);
        if (args.order !== undefined) (args.order as Buffer).writeNumbers([1, 4, 2, 5, 0, 3]);
      },
    };
  }),
  {
    fn: 'quantizedMatmulId', op: 'quantized_matmul_id',
    // mlx-native's rule: each buffer at least its size (freeCount); any k and group size.
    keys: {
      input: buf(F, { freeCount: true }), weight: buf(['u32', 'u8'], { freeCount: true }), scales: buf(BF, { freeCount: true }),
      biases: buf(BF, { freeCount: true }), ids: buf(U32, { freeCount: true, table: true }), output: out(F, { freeCount: true }),
      m: int, k: int, n: int, groupSize: int, bits: { kind: 'enum', values: [4, 6, 8] }, nExpertUsed: int, numExperts: int,
    },
    make: (d) => ({
      input: a(d, 'f32', 20), weight: a(d, 'u8', 81), scales: a(d, 'bf16', 27), biases: a(d, 'bf16', 27), ids: a(d, 'u32', 4),
      output: a(d, 'f32', 12), m: 2, k: 10, n: 3, groupSize: 4, bits: 6, nExpertUsed: 2, numExperts: 3,
    }),
    fill: (args) => (args.ids as Buffer).writeNumbers([2, 0, 5, 1]),
  },
  // ---- end of quantized_matmul_id ----
  // ---- dense_matmul_id (per-expert products of f32 / f16 / bf16 weights; ids, offsets and order are tables) ----
  // m = 3 rows x 2 slots, 4 experts of n = 5 rows, k = 12.
  ...(['denseMvId', 'denseMmId', 'denseGateUpMvId', 'denseGateUpMmId'] as const).map((fn): Case => {
    const gu = fn.includes('GateUp');
    const mm = fn.includes('Mm');
    const dts = mm ? (['f16', 'bf16'] as const) : EW;
    const op = { denseMvId: 'dense_mv_id', denseMmId: 'dense_mm_id', denseGateUpMvId: 'dense_gate_up_mv_id', denseGateUpMmId: 'dense_gate_up_mm_id' }[fn];
    return {
      fn, op,
      keys: {
        x: buf(dts), ...(gu ? { gateWeight: buf(dts), upWeight: buf(dts) } : { weight: buf(dts) }),
        ...(mm ? { offsets: buf(U32, { table: true }), order: buf(U32, { table: true }) } : { ids: buf(U32, { table: true }) }),
        output: out(dts), m: int, n: int, k: int, nExpertUsed: int, numExperts: int, expertRows: { kind: 'int?' },
        ...(gu ? { activation: { kind: 'enum', values: [undefined, 'silu', 'gelu_tanh'] } } : {}),
      },
      make: (d) => ({
        x: a(d, 'f16', 36), ...(gu ? { gateWeight: a(d, 'f16', 240), upWeight: a(d, 'f16', 240) } : { weight: a(d, 'f16', 240) }),
        ...(mm ? { offsets: a(d, 'u32', 6), order: a(d, 'u32', 6) } : { ids: a(d, 'u32', 6) }), output: a(d, 'f16', 30),
        m: 3, n: 5, k: 12, nExpertUsed: 2, numExperts: 4, ...(gu ? { activation: 'silu' } : {}),
      }),
      fill: (args) => {
        if (args.ids !== undefined) (args.ids as Buffer).writeNumbers([3, 0, 1, 9, 2, 2]);
        if (args.offsets !== undefined) (args.offsets as Buffer).writeNumbers([0, 1, 2, 4, 5, 6]);
        if (args.order !== undefined) (args.order as Buffer).writeNumbers([1, 4, 2, 5, 0, 3]);
      },
    };
  }),
  // ---- end of dense_matmul_id ----
  {
    fn: 'flashAttnVec', op: 'flash_attn_vec',
    keys: FLASH_ATTN_VEC_KEYS,
    make: (d) => ({
      q: a(d, 'f32', 512), k: a(d, 'f32', 1024), v: a(d, 'f32', 1024), out: a(d, 'f32', 512), tmp: a(d, 'f32', 2 * 258 * 2),
      batch: 1, nHeads: 2, nKvHeads: 1, headDim: 256, kvSeqLen: 3, kvCapacity: 4, nwg: 2, scale: 0.0625, mask: 'causal',
    }),
  },
  {
    fn: 'flashAttnVec', op: 'flash_attn_vec',
    keys: FLASH_ATTN_VEC_KEYS,
    make: (d) => ({
      q: a(d, 'f32', 256), k: a(d, 'f16', 512), v: a(d, 'f16', 512), out: a(d, 'f32', 256),
      batch: 1, nHeads: 1, nKvHeads: 1, headDim: 256, kvSeqLen: 2, kvCapacity: 2, nwg: 1, scale: 0.0625,
      mask: 'slidingWindow', slidingWindow: 1, softcap: 30,
    }),
  },
  {
    fn: 'flashAttnVec', op: 'flash_attn_vec',
    keys: FLASH_ATTN_VEC_KEYS,
    make: (d) => ({
      q: a(d, 'f32', 256), k: a(d, 'bf16', 128 * 5), v: a(d, 'bf16', 128 * 5), out: a(d, 'f32', 256), tmp: a(d, 'f32', 2 * 130 * 3),
      batch: 1, nHeads: 2, nKvHeads: 1, headDim: 128, kvSeqLen: 5, kvCapacity: 5, nwg: 3, scale: 0.09, mask: 'none',
    }),
  },
  {
    fn: 'flashAttnVecVarlen', op: 'flash_attn_vec_varlen',
    keys: FLASH_ATTN_VEC_VARLEN_KEYS,
    make: (d) => ({
      q: a(d, 'f32', 2 * 2 * 128), k: a(d, 'bf16', 2 * 4 * 128), v: a(d, 'bf16', 2 * 4 * 128), out: a(d, 'f32', 2 * 2 * 128),
      tmp: a(d, 'f32', 2 * 2 * 130 * 2), seqLens: d.upload('u32', [2], [3, 9]),
      batch: 2, nHeads: 2, nKvHeads: 1, headDim: 128, kvCapacity: 4, nwg: 2, scale: 0.09, mask: 'slidingWindow', slidingWindow: 4, ring: true,
    }),
    fill: (args) => (args.seqLens as Buffer).writeNumbers([3, 9]),
  },
  // ---- flash_attn_prefill: attention over a prompt, the mask builder, the tile classifier ----
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
  // ---- end of flash_attn_prefill ----
  ...(['fusedNormAdd', 'fusedResidualNorm', 'fusedResidualNormScalar', 'fusedNormAddScalar'] as const).map((fn): Case => {
    const op = { fusedNormAdd: 'fused_norm_add', fusedResidualNorm: 'fused_residual_norm',
      fusedResidualNormScalar: 'fused_residual_norm_scalar', fusedNormAddScalar: 'fused_norm_add_scalar' }[fn];
    const scalar = fn.endsWith('Scalar');
    const act = scalar ? F : (['f32', 'bf16'] as const);
    const keys: Record<string, KeySpec> = {
      residual: buf(act), input: buf(act), weight: buf(act), rows: int, dim: int, eps: { kind: 'nonneg' },
    };
    if (fn === 'fusedResidualNorm') {
      keys.normedOutput = out(act);
      keys.sumOutput = { kind: 'buf?', dtypes: act, output: true };
    } else {
      keys.output = out(act);
    }
    if (scalar) keys.scalar = buf(F, { freeCount: true });
    return {
      fn, op, keys,
      make: (d) => {
        const args: Record<string, unknown> = {
          residual: a(d, 'f32', 16), input: a(d, 'f32', 16), weight: a(d, 'f32', 8), rows: 2, dim: 8, eps: 1e-6,
        };
        if (fn === 'fusedResidualNorm') {
          args.normedOutput = a(d, 'f32', 16);
          args.sumOutput = a(d, 'f32', 16);
        } else {
          args.output = a(d, 'f32', 16);
        }
        if (scalar) args.scalar = a(d, 'f32', 8);
        return args;
      },
    };
  }),
  {
    fn: 'gatedDeltaNet', op: 'gated_delta_net',
    keys: {
      q: buf(['f32', 'bf16']), k: buf(['f32', 'bf16']), v: buf(['f32', 'bf16']), g: buf(F), beta: buf(F),
      initialState: { kind: 'buf?', dtypes: F }, output: out(['f32', 'bf16']), finalState: out(F),
      batch: int, seqLen: int, nQkHeads: int, nHeads: int, kDim: int, vDim: int, scale: { kind: 'num?' },
    },
    inPlace: [['initialState', 'finalState']],
    make: (d) => ({
      q: a(d, 'f32', 64), k: a(d, 'f32', 64), v: a(d, 'f32', 64), g: a(d, 'f32', 4), beta: a(d, 'f32', 4),
      initialState: a(d, 'f32', 1024), output: a(d, 'f32', 64), finalState: a(d, 'f32', 1024),
      batch: 1, seqLen: 2, nQkHeads: 1, nHeads: 2, kDim: 32, vDim: 16,
    }),
  },
  {
    fn: 'gatedDeltaNetDecode', op: 'gated_delta_net_decode',
    keys: {
      q: buf(['f32', 'bf16']), k: buf(['f32', 'bf16']), v: buf(['f32', 'bf16']), g: buf(F), beta: buf(F),
      state: out(F), output: out(['f32', 'bf16']),
      batch: int, nQkHeads: int, nHeads: int, kDim: int, vDim: int, scale: { kind: 'num?' },
    },
    make: (d) => ({
      q: a(d, 'bf16', 32), k: a(d, 'bf16', 32), v: a(d, 'bf16', 32), g: a(d, 'f32', 2), beta: a(d, 'f32', 2),
      state: a(d, 'f32', 1024), output: a(d, 'bf16', 32), batch: 1, nQkHeads: 1, nHeads: 2, kDim: 32, vDim: 16, scale: 0.5,
    }),
  },
  {
    fn: 'gatedDeltaNetChunk', op: 'gated_delta_net_chunk',
    keys: {
      k: buf(BF), w: buf(BF), u: buf(BF), g: buf(F), h0: buf(F), hOut: out(BF), vNew: out(BF), finalState: out(F),
      batch: int, seqLen: int, nQkHeads: int, nHeads: int, kDim: int, vDim: int, bt: int,
    },
    make: (d) => ({
      k: a(d, 'bf16', 64 * 128), w: a(d, 'bf16', 64 * 128), u: a(d, 'bf16', 64 * 32), g: a(d, 'f32', 64),
      h0: a(d, 'f32', 32 * 128), hOut: a(d, 'bf16', 32 * 128), vNew: a(d, 'bf16', 64 * 32), finalState: a(d, 'f32', 32 * 128),
      batch: 1, seqLen: 64, nQkHeads: 1, nHeads: 1, kDim: 128, vDim: 32, bt: 64,
    }),
  },
  // ---- kv_cache_copy: the cache is written where the positions say, the rest kept ----
  {
    fn: 'kvCacheCopy', op: 'kv_cache_copy',
    // The source holds at least nNew rows (mlx-native's rule): its count is free.
    keys: {
      src: buf(['f32', 'f16', 'bf16'], { freeCount: true }), cache: out(['f32', 'f16', 'bf16']), writePos: { kind: 'nonneg' },
      rowSize: int, nNew: { kind: 'nonneg' }, cacheCap: int, isSliding: { kind: 'bool' },
    },
    make: (d) => ({ src: a(d, 'f16', 16), cache: a(d, 'f16', 32), writePos: 3, rowSize: 8, nNew: 2, cacheCap: 4, isSliding: true }),
  },
  {
    fn: 'kvCacheCopyBatch', op: 'kv_cache_copy_batch',
    keys: { src: buf(F), cache: out(['f32', 'f16']), nHeads: int, headDim: int, capacity: int, seqPos: { kind: 'nonneg' } },
    make: (d) => ({ src: a(d, 'f32', 16), cache: a(d, 'f16', 48), nHeads: 2, headDim: 8, capacity: 3, seqPos: 2 }),
  },
  {
    fn: 'kvCacheCopySeq', op: 'kv_cache_copy_seq',
    keys: {
      src: buf(['f32', 'f16', 'bf16'], { freeCount: true }), cache: out(['f32', 'f16', 'bf16']), nHeads: int, headDim: int, capacity: int,
      seqPosStart: { kind: 'nonneg' }, nTokens: { kind: 'nonneg' }, srcTokOffset: { kind: 'nonneg?' }, ring: { kind: 'bool?' },
    },
    make: (d) => ({
      src: a(d, 'bf16', 80), cache: a(d, 'f16', 64), nHeads: 2, headDim: 8, capacity: 4, seqPosStart: 5, nTokens: 3, srcTokOffset: 2, ring: true,
    }),
  },
  {
    fn: 'kvCacheCopySeqDual', op: 'kv_cache_copy_seq_dual',
    keys: {
      srcK: buf(['f32', 'f16', 'bf16'], { freeCount: true }), srcV: buf(['f32', 'f16', 'bf16'], { freeCount: true }),
      cacheK: out(['f32', 'f16', 'bf16']), cacheV: out(['f32', 'f16', 'bf16']), nHeads: int, headDim: int, capacity: int,
      seqPosStart: { kind: 'nonneg' }, nTokens: { kind: 'nonneg' }, srcTokOffset: { kind: 'nonneg?' }, ring: { kind: 'bool?' },
    },
    make: (d) => ({
      srcK: a(d, 'f32', 48), srcV: a(d, 'f32', 48), cacheK: a(d, 'bf16', 96), cacheV: a(d, 'bf16', 96),
      nHeads: 2, headDim: 8, capacity: 6, seqPosStart: 1, nTokens: 3,
    }),
  },
  // ---- end of kv_cache_copy ----
  {
    fn: 'l2Norm', op: 'l2_norm',
    keys: { x: buf(['f32', 'f16', 'bf16']), y: out(['f32', 'f16', 'bf16']), rows: int, dim: int, eps: { kind: 'nonneg?' } },
    inPlace: [['x', 'y']],
    make: (d) => ({ x: a(d, 'f16', 24), y: a(d, 'f16', 24), rows: 3, dim: 8 }),
  },
  ...(['f32', 'bf16'] as const).map((dt): Case => ({
    fn: 'fusedHeadNormRope', op: 'fused_head_norm_rope',
    keys: {
      input: buf(['f32', 'bf16']), output: out(['f32', 'bf16']), weight: { kind: 'buf?', dtypes: ['f32', 'bf16'] },
      positions: buf(['u32', 'i32']), freqFactors: { kind: 'buf?', dtypes: F, freeCount: true },
      outputBf16: { kind: 'buf?', dtypes: BF, output: true }, outputF32Perm: { kind: 'buf?', dtypes: F, output: true },
      permuted: { kind: 'bool?' }, seqLen: int, nHeads: int, headDim: int, halfRopeDim: { kind: 'nonneg' }, eps: { kind: 'nonneg' }, theta: { kind: 'num' },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({
      input: a(d, dt, 48), output: a(d, dt, 48), weight: a(d, dt, 8), positions: a(d, 'u32', 2), freqFactors: a(d, 'f32', 2),
      ...(dt === 'f32' ? { outputBf16: a(d, 'bf16', 48), outputF32Perm: a(d, 'f32', 48), permuted: true } : {}),
      seqLen: 2, nHeads: 3, headDim: 8, halfRopeDim: 2, eps: 1e-6, theta: 1e6,
    }),
    fill: (args) => (args.positions as Buffer).writeNumbers([6, 131071]),
  })),
  {
    fn: 'rmsNorm', op: 'rms_norm',
    keys: {
      input: buf(['f32', 'f16', 'bf16']), weight: { kind: 'buf?', dtypes: ['f32', 'bf16'] }, output: out(['f32', 'f16', 'bf16']),
      rows: int, dim: int, eps: { kind: 'nonneg?' }, onePlus: { kind: 'bool?' },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({ input: a(d, 'f16', 24), weight: a(d, 'f32', 8), output: a(d, 'f16', 24), rows: 3, dim: 8, onePlus: true }),
  },
  {
    fn: 'rmsNormPerHead', op: 'rms_norm_per_head',
    keys: {
      input: buf(['f32', 'f16', 'bf16']), weight: { kind: 'buf?', dtypes: ['f32', 'bf16'] }, output: out(['f32', 'f16', 'bf16']),
      tokens: int, heads: int, headDim: int, eps: { kind: 'nonneg?' }, onePlus: { kind: 'bool?' },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({ input: a(d, 'bf16', 48), weight: a(d, 'bf16', 8), output: a(d, 'bf16', 48), tokens: 3, heads: 2, headDim: 8 }),
  },
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
  // ---- moe_dispatch (the crate's glue kernels: each buffer at least its size, freeCount) ----
  {
    fn: 'moeDispatchSort', op: 'moe_dispatch_sort',
    keys: { ids: buf(U32, { table: true }), offsets: out(U32), order: out(U32), nPairs: int, numExperts: int },
    make: (d) => ({ ids: a(d, 'u32', 6), offsets: a(d, 'u32', 6), order: a(d, 'u32', 6), nPairs: 6, numExperts: 4 }),
    fill: (args) => (args.ids as Buffer).writeNumbers([3, 0, 9, 1, 3, 0]),
  },
  {
    fn: 'fusedGeluMul', op: 'fused_gelu_mul',
    keys: { gateOut: buf(['f32', 'bf16'], { freeCount: true }), upOut: buf(['f32', 'bf16'], { freeCount: true }), output: out(['f32', 'bf16'], { freeCount: true }), nElements: int },
    inPlace: [['gateOut', 'output'], ['upOut', 'output']],
    make: (d) => ({ gateOut: a(d, 'bf16', 13), upOut: a(d, 'bf16', 13), output: a(d, 'bf16', 13), nElements: 13 }),
  },
  {
    fn: 'moeAccumulate', op: 'moe_accumulate',
    keys: { accumulator: out(F, { freeCount: true }), expertOutput: buf(F, { freeCount: true }), routingWeight: { kind: 'num' }, nElements: int },
    inPlace: [['accumulator', 'expertOutput']],
    make: (d) => ({ accumulator: a(d, 'f32', 11), expertOutput: a(d, 'f32', 11), routingWeight: 0.25, nElements: 11 }),
  },
  {
    fn: 'moeZeroBuffer', op: 'moe_zero_buffer',
    keys: { buffer: out(F, { freeCount: true }), nElements: int },
    make: (d) => ({ buffer: a(d, 'f32', 7), nElements: 7 }),
  },
  {
    fn: 'moeSwigluFused', op: 'moe_swiglu_fused',
    keys: { gateUp: buf(F, { freeCount: true }), output: out(F, { freeCount: true }), nElements: int },
    make: (d) => ({ gateUp: a(d, 'f32', 10), output: a(d, 'f32', 5), nElements: 5 }),
  },
  {
    fn: 'moeSwigluBatch', op: 'moe_swiglu_batch',
    keys: { gateUp: buf(F, { freeCount: true }), output: out(F, { freeCount: true }), intermediate: int, topK: int },
    make: (d) => ({ gateUp: a(d, 'f32', 30), output: a(d, 'f32', 15), intermediate: 5, topK: 3 }),
  },
  {
    fn: 'moeWeightedSum', op: 'moe_weighted_sum',
    keys: { expertOutputs: buf(F, { freeCount: true }), weights: buf(F, { freeCount: true }), output: out(F, { freeCount: true }), hiddenSize: int, topK: int },
    make: (d) => ({ expertOutputs: a(d, 'f32', 18), weights: a(d, 'f32', 3), output: a(d, 'f32', 6), hiddenSize: 6, topK: 3 }),
  },
  {
    fn: 'moeSwigluSeq', op: 'moe_swiglu_seq',
    keys: { gateUp: buf(['f32', 'bf16'], { freeCount: true }), output: out(['f32', 'bf16'], { freeCount: true }), intermediate: int, topK: int, nTokens: int },
    make: (d) => ({ gateUp: a(d, 'bf16', 60), output: a(d, 'bf16', 30), intermediate: 5, topK: 3, nTokens: 2 }),
  },
  {
    fn: 'moeWeightedSumSeq', op: 'moe_weighted_sum_seq',
    keys: {
      expertOutputs: buf(['f32', 'bf16', 'f16'], { freeCount: true }), weights: buf(F, { freeCount: true }),
      output: out(['f32', 'bf16', 'f16'], { freeCount: true }), hiddenSize: int, topK: int, nTokens: int,
    },
    make: (d) => ({ expertOutputs: a(d, 'bf16', 36), weights: a(d, 'f32', 6), output: a(d, 'f32', 12), hiddenSize: 6, topK: 3, nTokens: 2 }),
  },
  {
    fn: 'moeGatherTopkWeights', op: 'moe_gather_topk_weights',
    keys: {
      softmaxProbs: buf(F, { freeCount: true }), sortedIndices: buf(U32, { freeCount: true, table: true }), perExpertScale: buf(F, { freeCount: true }),
      outExpertIds: out(U32, { freeCount: true }), outWeights: out(F, { freeCount: true }), nExperts: int, topK: int,
    },
    make: (d) => ({
      softmaxProbs: a(d, 'f32', 6), sortedIndices: a(d, 'u32', 6), perExpertScale: a(d, 'f32', 6), outExpertIds: a(d, 'u32', 2),
      outWeights: a(d, 'f32', 2), nExperts: 6, topK: 2,
    }),
    fill: (args) => (args.sortedIndices as Buffer).writeNumbers([4, 1, 0, 2, 3, 5]),
  },
  // ---- end of moe_dispatch ----
  // ---- moe_weighted_reduce (the crate's rule: each buffer at least its size, freeCount) ----
  {
    fn: 'moeWeightedReduce', op: 'moe_weighted_reduce',
    keys: {
      expertW: buf(F, { freeCount: true }), yExpert: buf(EW, { freeCount: true }), shLogit: buf(EW, { freeCount: true }),
      yShared: buf(EW, { freeCount: true }), residual: { kind: 'buf?', dtypes: EW, freeCount: true }, output: out(EW, { freeCount: true }),
      nTokens: int, topK: int, h: int,
    },
    inPlace: [['output', 'residual']],
    make: (d) => ({
      expertW: a(d, 'f32', 6), yExpert: a(d, 'bf16', 6 * 9), shLogit: a(d, 'bf16', 2), yShared: a(d, 'bf16', 18), residual: a(d, 'bf16', 18),
      output: a(d, 'bf16', 18), nTokens: 2, topK: 3, h: 9,
    }),
  },
  // ---- end of moe_weighted_reduce ----
  {
    fn: 'rope', op: 'rope',
    keys: {
      input: buf(['f32', 'f16', 'bf16']), output: out(['f32', 'f16', 'bf16']), positions: buf(['u32', 'i32']),
      seqLen: int, headDim: int, theta: { kind: 'num' },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({ input: a(d, 'bf16', 24), output: a(d, 'bf16', 24), positions: a(d, 'u32', 3), seqLen: 3, headDim: 8, theta: 1e4 }),
    fill: (args) => (args.positions as Buffer).writeNumbers([3, 0, 131071]),
  },
  {
    fn: 'ropeNeox', op: 'rope_neox',
    keys: {
      input: buf(['f32', 'f16', 'bf16']), output: out(['f32', 'f16', 'bf16']), positions: buf(['u32', 'i32']),
      freqFactors: { kind: 'buf?', dtypes: F }, seqLen: int, nHeads: int, headDim: int, ropeDim: int, theta: { kind: 'num' },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({
      input: a(d, 'f32', 48), output: a(d, 'f32', 48), positions: a(d, 'i32', 2), freqFactors: a(d, 'f32', 2),
      seqLen: 2, nHeads: 3, headDim: 8, ropeDim: 4, theta: 1e6,
    }),
    fill: (args) => {
      (args.positions as Buffer).writeNumbers([5, 4099]);
      if (args.freqFactors !== undefined) (args.freqFactors as Buffer).writeNumbers([1, 8]);
    },
  },
  {
    fn: 'ropeMulti', op: 'rope_multi',
    keys: {
      input: buf(['f32', 'f16', 'bf16']), output: out(['f32', 'f16', 'bf16']), positions: buf(['i32', 'u32']),
      seqLen: int, nHeads: int, headDim: int, ropeDim: int, freqBase: { kind: 'num' },
      mode: { kind: 'enum', values: ['mrope', 'imrope', 'vision'] }, sections: { kind: 'free' },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({
      input: a(d, 'f16', 48), output: a(d, 'f16', 48), positions: a(d, 'i32', 8), seqLen: 2, nHeads: 3, headDim: 8, ropeDim: 4,
      freqBase: 1e7, mode: 'imrope', sections: [1, 1, 0, 0],
    }),
    fill: (args) => (args.positions as Buffer).writeNumbers([7, 131071, 3, 5, 0, 9, 2, 4]),
  },
  {
    fn: 'softmax', op: 'softmax',
    keys: {
      input: buf(['f32', 'f16', 'bf16']), output: out(['f32', 'f16', 'bf16']), rows: int, cols: int,
      scale: { kind: 'num?' }, softcap: { kind: 'nonneg?' }, mask: { kind: 'buf?', dtypes: BF },
      seqQ: { kind: 'int', readWhen: (x) => x.mask !== undefined },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({
      input: a(d, 'f32', 32), output: a(d, 'f32', 32), rows: 4, cols: 8, scale: 0.25, softcap: 30, mask: a(d, 'bf16', 16), seqQ: 2,
    }),
  },
  {
    fn: 'softmax', op: 'softmax',
    keys: { input: buf(['f32', 'f16', 'bf16']), output: out(['f32', 'f16', 'bf16']), rows: int, cols: int },
    inPlace: [['input', 'output']],
    make: (d) => ({ input: a(d, 'bf16', 15), output: a(d, 'bf16', 15), rows: 3, cols: 5 }),
  },
  {
    // The two-pass form: rows past one slice (2048), with a scratch.
    fn: 'softmax', op: 'softmax',
    keys: {
      input: buf(['f32', 'f16', 'bf16']), output: out(['f32', 'f16', 'bf16']), rows: int, cols: int,
      scale: { kind: 'num?' }, mask: { kind: 'buf?', dtypes: BF }, seqQ: { kind: 'int', readWhen: (x) => x.mask !== undefined },
      scratch: { kind: 'buf?', dtypes: F, output: true },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({
      input: a(d, 'f32', 4200), output: a(d, 'f32', 4200), rows: 2, cols: 2100, scale: 0.5, mask: a(d, 'bf16', 2100), seqQ: 1,
      scratch: a(d, 'f32', 8),
    }),
  },
  {
    fn: 'softcap', op: 'softcap',
    // The element count is the input's (mlx-native's): any count, the output's the same.
    keys: {
      input: buf(['f32', 'f16', 'bf16'], { freeCount: true }), output: out(['f32', 'f16', 'bf16'], { freeCount: true }), cap: { kind: 'num' },
    },
    inPlace: [['input', 'output']],
    make: (d) => ({ input: a(d, 'f16', 20), output: a(d, 'f16', 20), cap: 30 }),
  },
  // ---- sample: argmax, top-k, softmax_sample, the sampler, Philox (two-pass forms: rows past one slice, with scratch) ----
  {
    fn: 'argmax', op: 'argmax',
    keys: { input: buf(F), outIndex: out(U32), outValue: out(F), rows: int, nElements: int, scratch: { kind: 'buf?', dtypes: U32, output: true } },
    make: (d) => ({ input: a(d, 'f32', 4200), outIndex: a(d, 'u32', 2), outValue: a(d, 'f32', 2), rows: 2, nElements: 2100, scratch: a(d, 'u32', 8) }),
  },
  {
    fn: 'topK', op: 'top_k',
    keys: {
      input: buf(F), outIndices: out(U32), outValues: out(F), rows: int, nElements: int, k: int,
      scratch: { kind: 'buf?', dtypes: U32, output: true, working: true },
    },
    make: (d) => ({
      // topKScratchElements(2, 2100, 3): 2 rows of 2 slices, 3 pairs and a 32-word summary each
      input: a(d, 'f32', 4200), outIndices: a(d, 'u32', 6), outValues: a(d, 'f32', 6), rows: 2, nElements: 2100, k: 3, scratch: a(d, 'u32', 152),
    }),
  },
  {
    fn: 'topK', op: 'top_k',
    keys: { input: buf(F), outIndices: out(U32), outValues: out(F), rows: int, nElements: int, k: int },
    make: (d) => ({ input: a(d, 'f32', 30), outIndices: a(d, 'u32', 12), outValues: a(d, 'f32', 12), rows: 3, nElements: 10, k: 4 }),
  },
  {
    fn: 'softmaxSample', op: 'softmax_sample',
    keys: {
      logits: buf(F), scratch: out(F), outToken: out(U32), outLogprob: out(F), nElements: int, temperature: { kind: 'nonneg' },
      randomVal: { kind: 'nonneg' },
    },
    make: (d) => ({
      logits: a(d, 'f32', 40), scratch: a(d, 'f32', 40), outToken: a(d, 'u32', 1), outLogprob: a(d, 'f32', 1), nElements: 40,
      temperature: 0.8, randomVal: 0.3,
    }),
  },
  {
    fn: 'sample', op: 'sample',
    keys: {
      logits: buf(F), prevTokens: { kind: 'buf?', dtypes: U32 }, outToken: out(U32), outLogprob: out(F), scratch: out(U32, { working: true }),
      rows: int, vocab: int, temperature: { kind: 'nonneg' }, topK: { kind: 'nonneg?' }, topP: { kind: 'nonneg?' },
      minP: { kind: 'nonneg?' }, repetitionPenalty: { kind: 'nonneg?' }, nPrev: { kind: 'int', readWhen: (x) => x.prevTokens !== undefined },
      seed: { kind: 'free' }, counter: { kind: 'free' },
    },
    make: (d) => ({
      logits: a(d, 'f32', 600), prevTokens: a(d, 'u32', 6), outToken: a(d, 'u32', 2), outLogprob: a(d, 'f32', 2),
      // sampleScratchElements(2, 300): z, stats, candidates, histograms, state, records, summaries per row
      scratch: a(d, 'u32', 2 * (300 + 4 + 2 * 256 + 9216 + 24 + 36 + 32)), rows: 2, vocab: 300, temperature: 0.8, topP: 0.9, minP: 0.05,
      repetitionPenalty: 1.2, nPrev: 3, seed: 5, counter: 9,
    }),
    fill: (args) => (args.prevTokens as Buffer | undefined)?.writeNumbers([1, 7, 299, 0, 300, 0xffffffff]),
  },
  {
    fn: 'philox4x32', op: 'philox4x32',
    keys: { output: out(U32), n: int, key: { kind: 'free' }, counter: { kind: 'free' } },
    make: (d) => ({ output: a(d, 'u32', 12), n: 3, key: [1, 2], counter: [0xffffffff, 4, 5, 6] }),
  },
  {
    fn: 'ssmConv', op: 'ssm_conv',
    keys: {
      x: buf(['f32', 'bf16']), weight: buf(['f32', 'bf16']), state: { kind: 'buf?', dtypes: ['f32', 'bf16'], output: true },
      y: out(['f32', 'bf16']), b: int, t: int, c: int, ks: int, silu: { kind: 'bool' }, freshState: { kind: 'bool?' },
    },
    make: (d) => ({
      x: a(d, 'f32', 12), weight: a(d, 'f32', 16), state: a(d, 'f32', 12), y: a(d, 'f32', 12), b: 1, t: 3, c: 4, ks: 4, silu: true,
    }),
  },
  {
    fn: 'ssmConvDecode', op: 'ssm_conv_decode',
    keys: {
      x: buf(['f32', 'bf16']), weight: buf(['f32', 'bf16']), state: out(['f32', 'bf16']), y: out(['f32', 'bf16']),
      b: int, c: int, ks: int, silu: { kind: 'bool' },
    },
    make: (d) => ({
      x: a(d, 'bf16', 8), weight: a(d, 'f32', 12), state: a(d, 'bf16', 16), y: a(d, 'bf16', 8), b: 2, c: 4, ks: 3, silu: false,
    }),
  },
  {
    fn: 'ssmNormGate', op: 'ssm_norm_gate',
    keys: { attnOut: buf(F), weight: buf(F), z: buf(F), output: out(F), rows: int, dV: int, eps: { kind: 'nonneg' } },
    make: (d) => ({ attnOut: a(d, 'f32', 16), weight: a(d, 'f32', 8), z: a(d, 'f32', 16), output: a(d, 'f32', 16), rows: 2, dV: 8, eps: 1e-6 }),
  },
  // ---- the gated activations: silu_mul, sigmoid_mul, gelu ----
  // The pair forms (and gelu) take their element count from the first
  // buffer: any count, the others the same.
  ...([['siluMul', 'silu_mul', 'gate', 'up'], ['sigmoidMul', 'sigmoid_mul', 'x', 'gate'], ['geluTanhMul', 'gelu_tanh_mul', 'gate', 'up']] as const)
    .map(([fn, op, an, bn]): Case => ({
      fn, op,
      keys: { [an]: buf(EW, { freeCount: true }), [bn]: buf(EW, { freeCount: true }), output: out(EW, { freeCount: true }) },
      inPlace: [['output', an], ['output', bn]],
      make: (d) => ({ [an]: a(d, 'bf16', 20), [bn]: a(d, 'bf16', 20), output: a(d, 'bf16', 20) }),
    })),
  ...([['siluMulHalves', 'silu_mul_halves', 'gateUp'], ['sigmoidMulHalves', 'sigmoid_mul_halves', 'gateX'],
    ['geluTanhMulHalves', 'gelu_tanh_mul_halves', 'gateUp']] as const).map(([fn, op, x]): Case => ({
    fn, op,
    keys: { [x]: buf(EW), output: out(EW), rows: int, dim: int },
    make: (d) => ({ [x]: a(d, 'f16', 42), output: a(d, 'f16', 21), rows: 3, dim: 7 }),
  })),
  {
    // 300 elements: a group of 256, then 44 over views of input and output.
    fn: 'gelu', op: 'gelu',
    keys: { input: buf(EW, { freeCount: true }), output: out(EW, { freeCount: true }) },
    inPlace: [['output', 'input']],
    make: (d) => ({ input: a(d, 'f32', 300), output: a(d, 'f32', 300) }),
  },
  // ---- chunk_gated_delta_rule: the steps (their tables are device buffers) and the whole forward ----
  {
    fn: 'chunkLocalCumsumVarlen', op: 'chunk_gated_delta_rule',
    keys: { gIn: buf(F), gCum: out(F), chunks: buf(U32, { table: true }), ...stepParams },
    make: (d) => ({ gIn: a(d, 'f32', 3), gCum: a(d, 'f32', 3), chunks: chunksOf(d), ...STEP }),
    fill: tableFill,
  },
  {
    fn: 'gatedDeltaNetKkt', op: 'chunk_gated_delta_rule',
    keys: { k: buf(BF), g: buf(F), beta: buf(['f32', 'bf16']), a: out(F), chunks: buf(U32, { table: true }), ...stepParams },
    make: (d) => ({
      k: a(d, 'bf16', 192), g: a(d, 'f32', 3), beta: a(d, 'bf16', 3), a: a(d, 'f32', 192), chunks: chunksOf(d), ...STEP,
    }),
    fill: tableFill,
  },
  {
    fn: 'chunkTriSolveInvert', op: 'chunk_gated_delta_rule',
    keys: { a: buf(F), ai: out(F), chunks: buf(U32, { table: true }), ...stepParams },
    inPlace: [['a', 'ai']],
    make: (d) => ({ a: a(d, 'f32', 192), ai: a(d, 'f32', 192), chunks: chunksOf(d), ...STEP }),
    fill: tableFill,
  },
  {
    fn: 'gatedDeltaNetRecomputeWu', op: 'chunk_gated_delta_rule',
    keys: {
      k: buf(BF), v: buf(BF), beta: buf(['f32', 'bf16']), g: buf(F), ai: buf(F), w: out(BF), u: out(BF),
      chunks: buf(U32, { table: true }), ...stepParams,
    },
    make: (d) => ({
      k: a(d, 'bf16', 192), v: a(d, 'bf16', 192), beta: a(d, 'f32', 3), g: a(d, 'f32', 3), ai: a(d, 'f32', 192),
      w: a(d, 'bf16', 192), u: a(d, 'bf16', 192), chunks: chunksOf(d), ...STEP,
    }),
    fill: tableFill,
  },
  {
    fn: 'gatedDeltaNetChunkInterStateVarlen', op: 'chunk_gated_delta_rule',
    keys: {
      k: buf(BF), w: buf(BF), u: buf(BF), g: buf(F), h0: buf(F), hOut: out(BF), vNew: out(BF), finalState: out(F),
      seqs: buf(U32, { table: true }), ...stepParams,
    },
    make: (d) => ({
      k: a(d, 'bf16', 192), w: a(d, 'bf16', 192), u: a(d, 'bf16', 192), g: a(d, 'f32', 3), h0: a(d, 'f32', 4096),
      hOut: a(d, 'bf16', 4096), vNew: a(d, 'bf16', 192), finalState: a(d, 'f32', 4096), seqs: seqsOf(d), ...STEP,
    }),
    fill: tableFill,
  },
  {
    fn: 'gatedDeltaNetChunkO', op: 'chunk_gated_delta_rule',
    keys: {
      q: buf(BF), k: buf(BF), vNew: buf(BF), h: buf(BF), g: buf(F), o: out(BF), chunks: buf(U32, { table: true }), ...stepParams,
    },
    make: (d) => ({
      q: a(d, 'bf16', 192), k: a(d, 'bf16', 192), vNew: a(d, 'bf16', 192), h: a(d, 'bf16', 4096), g: a(d, 'f32', 3),
      o: a(d, 'bf16', 192), chunks: chunksOf(d), ...STEP, scale: 0.125,
    }),
    fill: tableFill,
  },
  ...[undefined, [0, 1, 3]].map((cu): Case => ({
    fn: 'chunkGatedDeltaRule', op: 'chunk_gated_delta_rule',
    keys: {
      q: buf(BF), k: buf(BF), v: buf(BF), g: buf(F), beta: buf(['f32', 'bf16']), initialState: { kind: 'buf?', dtypes: F },
      o: out(BF), finalState: out(F),
      batch: int, seqLen: int, nQkHeads: int, nHeads: int, kDim: int, vDim: int, scale: { kind: 'num?' },
      cuSeqlens: { kind: 'offsets?' },
    },
    make: (d) => {
      const nSeq = cu === undefined ? 1 : cu.length - 1;
      return {
        q: a(d, 'bf16', 192), k: a(d, 'bf16', 192), v: a(d, 'bf16', 192), g: a(d, 'f32', 3), beta: a(d, 'f32', 3),
        initialState: a(d, 'f32', nSeq * 4096), o: a(d, 'bf16', 192), finalState: a(d, 'f32', nSeq * 4096),
        batch: 1, seqLen: 3, nQkHeads: 1, nHeads: 1, kDim: 64, vDim: 64, ...(cu === undefined ? {} : { cuSeqlens: [...cu] }),
      };
    },
  })),
];

// ---- argument sets ----

/** The value of an argument. */
export function getPath(args: Args, path: string): unknown {
  return args[path];
}

/** Seeded values in every input buffer of the set (u32 tables zeroed, u8 random bytes), then the case's own contents. */
export function fillInputs(c: Case, args: Args, r: Rng): void {
  for (const [path, spec] of Object.entries(c.keys)) {
    if (spec.kind !== 'buf' && spec.kind !== 'buf?') continue;
    const b = getPath(args, path) as Buffer | undefined;
    if (b === undefined) continue;
    if (b.dtype === 'u32' || b.dtype === 'i32') b.writeNumbers(Array.from({ length: b.elementCount }, () => 0));
    else if (b.dtype === 'u8') b.writeNumbers(Array.from({ length: b.elementCount }, () => Math.floor(r.uniform(0, 256))));
    else b.writeNumbers(Array.from({ length: b.elementCount }, () => r.uniform(-1, 1)));
  }
  c.fill?.(args);
}
