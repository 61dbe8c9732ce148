// embedding: rows of a table gathered by u32 ids, with a scale (Gemma
// multiplies its embeddings by sqrt(hidden)). Kernel names, bindings and
// params are mlx-native's: gather_f32 (src/ops/gather.rs) and
// embedding_gather_scale_f32 / embedding_gather_scale_batch_f32
// (src/ops/elementwise.rs). Added here: f16 and bf16 tables, with outputs in
// the table's dtype or f32; gather in f16 and bf16; and a fourth word of
// the batched params, vocab_size, so the kernel clamps ids it reads from
// device memory (mlx-native's batched kernel has no bound and reads past
// the table on a bad id). Tables of GGUF blocks (Q4_0, Q8_0, Q4_K, Q5_K,
// Q6_K: tableType) gather through the quantized_matmul_ggml family's kernels
// (ts/ops/quantized_matmul_ggml.ts, which dequantizes them). mlx-native's MLX
// affine quantized tables (src/ops/embedding.rs, 4- and 6-bit) are not here.
// Kernels: shaders/embedding.metal and shaders/cuda/embedding.cu.

import src from '../../shaders/embedding.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/embedding.cu' with { type: 'text' };
import header from '../../shaders/embedding.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import { dtypeSize, type DType } from '../dtype.ts';
import type { Encoder } from '../encoder.ts';
import { rowCopyLaunch, rowCopyUnit, type LaunchLimits } from '../launch.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familyPlans, record, type OpPlan, type PlannedDispatch } from '../plan.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBuffer, checkBufferRules, checkDtype, checkedProduct, checkElements, checkNoAliasing, checkPositive, checkU32Count, invalid, like,
  ruleBindings, U32_MAX, type BufferRule,
} from '../validate.ts';
import { planGgmlEmbedding, validateGgmlEmbedding, type GgmlEmbeddingArgs, type GgmlQuantType } from './quantized_matmul_ggml.ts';

export const EMBEDDING_FAMILY = 'embedding';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const EMBEDDING_SOURCES = familySources(EMBEDDING_FAMILY, { header, metal: src, cuda: cudaSrc });
export const EMBEDDING_KERNELS = [
  'gather_f32', 'gather_f16', 'gather_bf16',
  'embedding_gather_scale_f32', 'embedding_gather_scale_f16', 'embedding_gather_scale_bf16',
  'embedding_gather_scale_f16_to_f32', 'embedding_gather_scale_bf16_to_f32',
  'embedding_gather_scale_batch_f32', 'embedding_gather_scale_batch_f16', 'embedding_gather_scale_batch_bf16',
  'embedding_gather_scale_batch_f16_to_f32', 'embedding_gather_scale_batch_bf16_to_f32',
] as const;
const planOf = familyPlans({ family: EMBEDDING_FAMILY, sources: EMBEDDING_SOURCES, kernels: EMBEDDING_KERNELS });
/** Threads per threadgroup of the Metal grids at most (mlx-native's). */
export const EMBEDDING_MAX_THREADS = 256;
/** Elements an output may have: the grids count threads in 32 bits. */
export const EMBEDDING_MAX_ELEMENTS = 2 ** 32 - EMBEDDING_MAX_THREADS;

/** struct GatherParams (gather_<t>, buffer 3). */
export const GATHER_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GatherParams');
/** struct EmbedGatherScaleParams (embedding_gather_scale_<t>, buffer 2). */
export const EMBED_GATHER_SCALE_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'EmbedGatherScaleParams');
/** struct EmbedGatherScaleBatchParams (embedding_gather_scale_batch_<t>, buffer 3). */
export const EMBED_GATHER_SCALE_BATCH_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'EmbedGatherScaleBatchParams');

export interface EmbeddingArgs {
  /** [vocabSize, hiddenSize], f32, f16 or bf16; with tableType, u8: vocabSize rows of hiddenSize / QK blocks */
  table: Buffer;
  /** The table's GGUF block format (a GGUF TensorInfo's dtype); absent: a table of floats of its dtype. */
  tableType?: GgmlQuantType;
  /** [nTokens] u32; an id >= vocabSize reads row vocabSize - 1 */
  tokenIds: Buffer;
  /** [nTokens, hiddenSize], the table's dtype or f32; f32, f16 or bf16 with tableType */
  output: Buffer;
  vocabSize: number;
  hiddenSize: number;
  nTokens: number;
  /** Multiplies every element (in f32); 1 when absent. Gemma: sqrt(hiddenSize), rounded to bf16 as Hugging Face does. */
  scale?: number;
}

export interface EmbeddingTokenArgs {
  /** [vocabSize, hiddenSize], f32, f16 or bf16 */
  table: Buffer;
  /** [hiddenSize], the table's dtype or f32 */
  output: Buffer;
  /** The row, an integer in [0, vocabSize) (checked here: the kernel has no bound). */
  tokenId: number;
  vocabSize: number;
  hiddenSize: number;
  /** Multiplies every element (in f32); 1 when absent. */
  scale?: number;
}

export interface GatherArgs {
  /** [srcRows, rowWidth], f32, f16 or bf16 */
  src: Buffer;
  /** [nIndices] u32; an index >= srcRows reads row srcRows - 1 */
  indices: Buffer;
  /** [nIndices, rowWidth], src's dtype */
  output: Buffer;
  srcRows: number;
  rowWidth: number;
  nIndices: number;
}

export function packGatherParams(p: { rowWidth: number; nIndices: number; srcRows: number }): Uint8Array {
  return packFields(GATHER_PARAMS_LAYOUT, { row_width: p.rowWidth, n_indices: p.nIndices, src_rows: p.srcRows });
}
export function packEmbedGatherScaleParams(p: { scale: number; hiddenSize: number; tokenId: number }): Uint8Array {
  return packFields(EMBED_GATHER_SCALE_PARAMS_LAYOUT, { scale: p.scale, hidden_size: p.hiddenSize, token_id: p.tokenId });
}
export function packEmbedGatherScaleBatchParams(p: { scale: number; hiddenSize: number; nTokens: number; vocabSize: number }): Uint8Array {
  return packFields(EMBED_GATHER_SCALE_BATCH_PARAMS_LAYOUT, {
    scale: p.scale, hidden_size: p.hiddenSize, n_tokens: p.nTokens, vocab_size: p.vocabSize,
  });
}

/** The kernel suffix for a table and output dtype: `<t>` when they agree, `<t>_to_f32` for an f32 output of a 16-bit table. */
function suffix(table: DType, output: DType): string {
  return table === output ? table : `${table}_to_f32`;
}

/** The rules on sizes, scale, table and output that both embedding ops share (outArg names the output's element count). */
function validateTable(op: string, a: { table: Buffer; output: Buffer; vocabSize: number; hiddenSize: number; scale?: number },
  rows: number, outArg: string, device?: Device): void {
  checkPositive(op, 'vocabSize', a.vocabSize);
  checkPositive(op, 'hiddenSize', a.hiddenSize);
  checkAtMost(op, 'vocabSize', a.vocabSize, U32_MAX, '2^32 - 1');
  checkAtMost(op, 'hiddenSize', a.hiddenSize, U32_MAX, '2^32 - 1');
  if (a.scale !== undefined && (typeof a.scale !== 'number' || !Number.isFinite(a.scale))) {
    throw invalid(op, 'scale', 'a finite number or absent', a.scale);
  }
  const tableElems = checkedProduct(op, 'vocabSize * hiddenSize', a.vocabSize, a.hiddenSize);
  const outElems = checkedProduct(op, outArg, rows, a.hiddenSize);
  checkAtMost(op, outArg, outElems, EMBEDDING_MAX_ELEMENTS, '2^32 - 256 (the grids count threads in 32 bits)');
  checkBufferRules(op, [
    ['table', a.table, ['f32', 'f16', 'bf16'], tableElems],
    ['output', a.output, (dtypeOf) => (dtypeOf('table') === 'f32' ? 'f32' : [dtypeOf('table'), 'f32']), outElems],
  ], device);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateEmbedding(a: EmbeddingArgs, device?: Device): void {
  const op = 'embedding';
  if (a.tableType !== undefined) {
    validateGgmlEmbedding(a as GgmlEmbeddingArgs, device, op);
    return;
  }
  checkPositive(op, 'nTokens', a.nTokens);
  checkAtMost(op, 'nTokens', a.nTokens, U32_MAX, '2^32 - 1');
  validateTable(op, a, a.nTokens, 'nTokens * hiddenSize', device);
  checkBuffer(op, 'tokenIds', a.tokenIds, device);
  checkDtype(op, 'tokenIds', a.tokenIds, 'u32');
  checkElements(op, 'tokenIds', a.tokenIds, a.nTokens);
  checkNoAliasing(op, [['table', a.table], ['tokenIds', a.tokenIds], ['output', a.output]], ['output'],
    'every output row reads its id and any row of the table');
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateEmbeddingToken(a: EmbeddingTokenArgs, device?: Device): void {
  const op = 'embedding_token';
  validateTable(op, a, 1, 'hiddenSize', device);
  if (!Number.isSafeInteger(a.tokenId) || a.tokenId < 0 || a.tokenId >= a.vocabSize) {
    throw invalid(op, 'tokenId', `an integer in [0, vocabSize) = [0, ${a.vocabSize})`, a.tokenId);
  }
  checkNoAliasing(op, [['table', a.table], ['output', a.output]], ['output'], 'the output is written while the table is read');
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateGather(a: GatherArgs, device?: Device): void {
  const op = 'gather';
  for (const [arg, v] of [['srcRows', a.srcRows], ['rowWidth', a.rowWidth], ['nIndices', a.nIndices]] as const) checkU32Count(op, arg, v);
  const srcElems = checkedProduct(op, 'srcRows * rowWidth', a.srcRows, a.rowWidth);
  const outElems = checkedProduct(op, 'nIndices * rowWidth', a.nIndices, a.rowWidth);
  checkAtMost(op, 'nIndices * rowWidth', outElems, EMBEDDING_MAX_ELEMENTS, '2^32 - 256 (the grids count threads in 32 bits)');
  const rules: BufferRule[] = [
    ['src', a.src, ['f32', 'f16', 'bf16'], srcElems], ['indices', a.indices, 'u32', a.nIndices], ['output', a.output, like('src'), outElems],
  ];
  checkBufferRules(op, rules, device);
  checkNoAliasing(op, ruleBindings(rules), ['output'], 'every output row reads its index and any row of src');
}

/** The Metal threadgroup over a row of n elements: min(256, n) threads (mlx-native's). */
export function embeddingThreads(n: number, limits: LaunchLimits): number {
  return Math.min(EMBEDDING_MAX_THREADS, n, limits.maxThreadsPerThreadgroup);
}

/** One dispatch of rows rows of len elements: the Metal grid of mlx-native and the CUDA copy_rows launch. */
function rowsDispatch(kernel: string, buffers: PlannedDispatch['buffers'], bytes: PlannedDispatch['bytes'], rows: number, len: number,
  from: DType, to: DType, limits: DeviceLimits): OpPlan {
  const tg = embeddingThreads(len, limits);
  return planOf({
    kernel, buffers, bytes,
    grid: [Math.ceil(len / tg), rows, 1],
    threads: [tg, 1, 1],
    cuda: rowCopyLaunch(rows, len, rowCopyUnit(dtypeSize(from), dtypeSize(to)), limits),
  });
}

/**
 * embedding: output[i, j] = table[min(tokenIds[i], vocabSize - 1), j] * scale,
 * the product in f32 rounded once to the output's dtype (scale 1 when absent:
 * the table's values unchanged). An id past the table reads its last row
 * (mlx-native's gather rule), so a bad id in device memory never reads
 * outside the table. With tableType, the table's rows are GGUF blocks,
 * dequantized in f32 (planGgmlEmbedding: the quantized_matmul_ggml family's
 * embedding_gather_scale_batch_<t>_to_<o>, output f32, f16 or bf16).
 *
 * Layouts: table [vocabSize, hiddenSize] f32, f16 or bf16; tokenIds [nTokens]
 * u32; output [nTokens, hiddenSize] in the table's dtype or f32.
 * Kernels: embedding_gather_scale_batch_<t>, t = f32, f16, bf16, f16_to_f32, bf16_to_f32.
 * Bindings: 0 table, 1 tokenIds, 2 output, 3 EmbedGatherScaleBatchParams
 * (scale, hidden_size, n_tokens, vocab_size).
 * Grid: (ceil(hiddenSize / tg), nTokens, 1) threadgroups of tg = min(256,
 * hiddenSize) threads, one element each (mlx-native's grid of hiddenSize x
 * nTokens threads); the CUDA twin moves 16-byte steps (rowCopyLaunch).
 */
export function embedding(enc: Encoder, args: EmbeddingArgs): void {
  record(enc, planEmbedding(args, enc.device.limits, enc.device));
}

/** embedding's plan: validates, then one dispatch (see embedding). */
export function planEmbedding(a: EmbeddingArgs, limits: DeviceLimits, device?: Device): OpPlan {
  if (a.tableType !== undefined) return planGgmlEmbedding(a as GgmlEmbeddingArgs, limits, device);
  validateEmbedding(a, device);
  const params = packEmbedGatherScaleBatchParams({ scale: a.scale ?? 1, hiddenSize: a.hiddenSize, nTokens: a.nTokens, vocabSize: a.vocabSize });
  return rowsDispatch(`embedding_gather_scale_batch_${suffix(a.table.dtype, a.output.dtype)}`, [a.table, a.tokenIds, a.output],
    [, , , params], a.nTokens, a.hiddenSize, a.table.dtype, a.output.dtype, limits);
}

/**
 * embedding_token: output[j] = table[tokenId, j] * scale for one id given by
 * the host (decode), checked against vocabSize here; the product in f32
 * rounded once to the output's dtype (scale 1 when absent).
 *
 * Layouts: table [vocabSize, hiddenSize] f32, f16 or bf16; output
 * [hiddenSize] in the table's dtype or f32.
 * Kernels: embedding_gather_scale_<t>, t as for embedding.
 * Bindings: 0 table, 1 output, 2 EmbedGatherScaleParams (scale, hidden_size, token_id).
 * Grid: (ceil(hiddenSize / tg), 1, 1) threadgroups of tg = min(256,
 * hiddenSize) threads; the CUDA twin as embedding's.
 */
export function embeddingToken(enc: Encoder, args: EmbeddingTokenArgs): void {
  record(enc, planEmbeddingToken(args, enc.device.limits, enc.device));
}

/** embeddingToken's plan: validates, then one dispatch (see embeddingToken). */
export function planEmbeddingToken(a: EmbeddingTokenArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateEmbeddingToken(a, device);
  const params = packEmbedGatherScaleParams({ scale: a.scale ?? 1, hiddenSize: a.hiddenSize, tokenId: a.tokenId });
  return rowsDispatch(`embedding_gather_scale_${suffix(a.table.dtype, a.output.dtype)}`, [a.table, a.output],
    [, , params], 1, a.hiddenSize, a.table.dtype, a.output.dtype, limits);
}

/**
 * gather: output[i, j] = src[min(indices[i], srcRows - 1), j], elements
 * copied unchanged (mlx-native's index_select along rows; an index past src
 * reads its last row).
 *
 * Layouts: src [srcRows, rowWidth] f32, f16 or bf16; indices [nIndices] u32;
 * output [nIndices, rowWidth] in src's dtype.
 * Kernels: gather_<dtype>. Bindings: 0 src, 1 indices, 2 output, 3
 * GatherParams (row_width, n_indices, src_rows).
 * Grid: (ceil(rowWidth / tg), nIndices, 1) threadgroups of tg = min(256,
 * rowWidth) threads; the CUDA twin as embedding's.
 */
export function gather(enc: Encoder, args: GatherArgs): void {
  record(enc, planGather(args, enc.device.limits, enc.device));
}

/** gather's plan: validates, then one dispatch (see gather). */
export function planGather(a: GatherArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateGather(a, device);
  const params = packGatherParams(a);
  return rowsDispatch(`gather_${a.src.dtype}`, [a.src, a.indices, a.output], [, , , params], a.nIndices, a.rowWidth,
    a.src.dtype, a.src.dtype, limits);
}

// ---- the float64 reference ----

// CPU reference of the embedding family: row gathers by index, float64.

/**
 * out[i, j] = table[min(ids[i], vocab - 1), j] * scale over rows of hidden
 * elements: the embedding lookup (ids past the table read its last row, as
 * the kernels clamp them). scale is applied as given; the kernels hold it as
 * an f32 (pass Math.fround(scale) to compare with them).
 */
export function embeddingRef(table: ArrayLike<number>, ids: ArrayLike<number>, vocab: number, hidden: number, scale = 1): Float64Array {
  const n = ids.length;
  const out = new Float64Array(n * hidden);
  for (let i = 0; i < n; i++) {
    const row = Math.min(ids[i]!, vocab - 1);
    for (let j = 0; j < hidden; j++) out[i * hidden + j] = table[row * hidden + j]! * scale;
  }
  return out;
}

/** out[i, j] = src[min(indices[i], srcRows - 1), j]: gather (index_select) of rows of width elements. */
export function gatherRef(src: ArrayLike<number>, indices: ArrayLike<number>, srcRows: number, width: number): Float64Array {
  return embeddingRef(src, indices, srcRows, width, 1);
}
