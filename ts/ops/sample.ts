// sample: token selection over rows of logits. argmax (mlx-native's
// argmax_f32, src/ops/argmax.rs), topK (mlx-native's top_k_f32,
// src/ops/top_k.rs, with k up to 256 and sorted output), softmaxSample
// (mlx-native's softmax_sample_f32, src/ops/softmax_sample.rs), and what the
// crate lacks, in its style: two-pass forms of argmax and topK for long rows,
// the filtered sampler `sample` (repetition penalty, temperature, top-k,
// top-p, min-p, drawn with Philox4x32-10, every pass spread over slices of
// the row) and `philox4x32` random bits.
// Kernels: shaders/sample.metal and shaders/cuda/sample.cu.

import src from '../../shaders/sample.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/sample.cu' with { type: 'text' };
import header from '../../shaders/sample.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import { checkAtMost, checkBufferRules, checkNoAliasing, checkPositive, checkedProduct, invalid } from '../validate.ts';
import { nextPow2, roundUp16, type LaunchLimits } from '../launch.ts';
import { record, type OpPlan, type PlannedDispatch } from '../plan.ts';

export const SAMPLE_FAMILY = 'sample';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const SAMPLE_SOURCES = familySources(SAMPLE_FAMILY, { header, metal: src, cuda: cudaSrc });
export const SAMPLE_KERNELS = [
  'argmax_f32', 'argmax_blocks_f32', 'argmax_merge_f32',
  'top_k_f32', 'top_k_blocks_f32', 'top_k_merge_f32',
  'softmax_sample_f32',
  'sample_blocks_f32', 'sample_mass_f32', 'sample_finish_f32',
  'philox4x32_10_u32',
] as const;

/** The largest k of topK and of the sampler's top-k (mlx-native's top_k_f32 stops at 128). */
export const SAMPLE_MAX_K = 256;
/** Elements per threadgroup of argmax's first pass at least (its scratch is sized for this slice). */
export const ARGMAX_SLICE = 2048;
/**
 * First-pass threadgroups of argmax that fill a large GPU in one wave: past
 * them, the slices grow. 512 is under 4 a multiprocessor of a 132-SM H100 or
 * H200, where 5 of the CUDA first pass's blocks fit an SM: 1024 ran in 1.55
 * waves, its second wave half empty.
 */
const ARGMAX_FILL_BLOCKS = 512;

/**
 * Elements per threadgroup of argmax's first pass: ARGMAX_SLICE doubled (up
 * to 16 times) while the threadgroups stay at least ARGMAX_FILL_BLOCKS, so
 * that many rows run in fewer, longer threadgroups and one row stays spread.
 */
export function argmaxSlice(rows: number, nElements: number): number {
  let slice = ARGMAX_SLICE;
  while (slice < 16 * ARGMAX_SLICE && rows * Math.ceil(nElements / (2 * slice)) >= ARGMAX_FILL_BLOCKS) slice *= 2;
  return slice;
}
/** Elements per threadgroup of the sampler's passes at most (its threadgroup flags one byte per element). */
export const SAMPLE_SLICE = 4096;
/**
 * Items a thread of the selecting kernels holds at once (shaders/sample.metal
 * SAMPLE_ITEMS): a slice of at most this many per thread is loaded once.
 */
export const SAMPLE_ITEMS = 16;
/** Per-row words of the sampler's scratch regions (shaders/sample.metal's SampleLimits, layout()). */
export const SAMPLE_HIST_WORDS = 9216;
export const SAMPLE_STATE_WORDS = 24;
export const SAMPLE_REC_WORDS = 36;
/**
 * Words per slice of the candidate summaries that the CUDA slice passes write
 * beside their candidates (top_k_blocks_f32, sample_blocks_f32) and the CUDA
 * merging block reads (shaders/cuda/sample.cu); the Metal kernels leave them.
 */
export const SAMPLE_SUM_WORDS = 32;
/** The sampler's vocabulary limit: counts and the tie rule run in f32, exact to 2^24. */
export const SAMPLE_MAX_VOCAB = 2 ** 24;
/** softmaxSample's params hold n as an f32: exact up to 2^24. */
export const SOFTMAX_SAMPLE_MAX_N = 2 ** 24;
/** Threads of the block passes (Metal). */
const BLOCK_THREADS = 256;
/** Threads of the sampler's finish at least (it walks a slice of up to 4096 z). */
const FINISH_THREADS = 256;
/**
 * Threads of the CUDA twins of the slice passes at most: 8 items a thread
 * (two 16-byte loads, held in registers through the radix levels), 512 for a
 * 4096-element slice.
 */
const CUDA_SELECT_THREADS = 512;
/** Threads of the CUDA whole-row passes and finish: 4 z a thread of a 4096-element slice; 16 candidates a thread of 64 slices' 256. */
const CUDA_ROW_THREADS = 1024;
/** Candidates a thread of the CUDA finish holds where they fit 1024 threads (sample.cu: finish_candidates). */
const CUDA_CAND_ITEMS = 8;
/** Threads of the one-threadgroup kernels at most (the kernels' arrays). */
const MAX_THREADS = 1024;
/** The second grid axis (slices per row): CUDA's limit. */
const MAX_BLOCKS = 65535;
/** Philox blocks of one dispatch (four words each, 32-bit thread indices). */
export const PHILOX_MAX_BLOCKS = 2 ** 30;
const PHILOX_THREADS = 256;
const U32_MAX = 0xffff_ffff;

export const ARGMAX_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'ArgmaxParams');
export const ARGMAX_BLOCKS_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'ArgmaxBlocksParams');
export const TOP_K_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'TopKParams');
export const TOP_K_BLOCKS_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'TopKBlocksParams');
export const SOFTMAX_SAMPLE_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'SoftmaxSampleParams');
export const SAMPLE_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'SampleParams');
export const PHILOX_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'PhiloxParams');

export function packArgmaxParams(p: { nElements: number }): Uint8Array {
  return packFields(ARGMAX_PARAMS_LAYOUT, { n_elements: p.nElements });
}
export function packArgmaxBlocksParams(p: { nElements: number; slice: number; nBlocks: number }): Uint8Array {
  return packFields(ARGMAX_BLOCKS_PARAMS_LAYOUT, { n_elements: p.nElements, slice: p.slice, n_blocks: p.nBlocks });
}
export function packTopKParams(p: { nElements: number; k: number }): Uint8Array {
  return packFields(TOP_K_PARAMS_LAYOUT, { n_elements: p.nElements, k: p.k });
}
export function packTopKBlocksParams(p: { nElements: number; k: number; slice: number; nBlocks: number }): Uint8Array {
  return packFields(TOP_K_BLOCKS_PARAMS_LAYOUT, { n_elements: p.nElements, k: p.k, slice: p.slice, n_blocks: p.nBlocks });
}
export function packSoftmaxSampleParams(p: { nElements: number; temperature: number; randomVal: number }): Uint8Array {
  return packFields(SOFTMAX_SAMPLE_PARAMS_LAYOUT, { n_elements: p.nElements, temperature: p.temperature, random_val: p.randomVal });
}
export function packPhiloxParams(p: { counter: readonly number[]; key: readonly number[]; nBlocks: number }): Uint8Array {
  return packFields(PHILOX_PARAMS_LAYOUT, {
    counter0: p.counter[0]!, counter1: p.counter[1]!, counter2: p.counter[2]!, counter3: p.counter[3]!,
    key0: p.key[0]!, key1: p.key[1]!, n_blocks: p.nBlocks,
  });
}

/** Threads of a one-threadgroup pass over `work` items: a power of two in [32, 1024], within the device's limit. */
function threadsFor(work: number, max: number, limits: LaunchLimits): number {
  return Math.min(max, limits.maxThreadsPerThreadgroup, Math.max(32, nextPow2(work)));
}

// ---- argmax ----

export interface ArgmaxArgs {
  /** f32 [rows, nElements] */
  input: Buffer;
  /** u32 [rows], output: the index of each row's largest value (ties: the lowest index; NaN ranks above +inf) */
  outIndex: Buffer;
  /** f32 [rows], output: that value, as stored */
  outValue: Buffer;
  rows: number;
  /** Elements per row, 1 to 2^32 - 1. */
  nElements: number;
  /** u32 of argmaxScratchElements(rows, nElements): given, rows longer than ARGMAX_SLICE run in two passes. */
  scratch?: Buffer;
}

/** u32 elements of argmax's scratch: per row and slice of ARGMAX_SLICE, a (value, index) pair. */
export function argmaxScratchElements(rows: number, nElements: number): number {
  return checkedProduct('argmax', 'scratch elements', rows, Math.ceil(nElements / ARGMAX_SLICE), 2);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateArgmax(a: ArgmaxArgs, device?: Device): void {
  const op = 'argmax';
  checkPositive(op, 'rows', a.rows);
  checkPositive(op, 'nElements', a.nElements);
  checkAtMost(op, 'rows', a.rows, U32_MAX, '2^32 - 1');
  checkAtMost(op, 'nElements', a.nElements, U32_MAX, '2^32 - 1 (u32 indices)');
  checkAtMost(op, 'nElements', a.nElements, MAX_BLOCKS * ARGMAX_SLICE, `${MAX_BLOCKS} slices of ${ARGMAX_SLICE}`);
  const n = checkedProduct(op, 'rows * nElements', a.rows, a.nElements);
  checkBufferRules(op, [
    ['input', a.input, 'f32', n],
    ['outIndex', a.outIndex, 'u32', a.rows],
    ['outValue', a.outValue, 'f32', a.rows],
    ['scratch', a.scratch, 'u32', a.scratch === undefined ? 0 : argmaxScratchElements(a.rows, a.nElements), true],
  ], device);
  checkNoAliasing(op, [['input', a.input], ['outIndex', a.outIndex], ['outValue', a.outValue], ['scratch', a.scratch]],
    ['outIndex', 'outValue', 'scratch'], 'a threadgroup writes while others read the rows');
}

/**
 * argmax: per row of input, the index and value of the largest element, in
 * the order of shaders/sample.metal: by value, NaN above +inf (the first NaN
 * wins, as torch.argmax), -0 equal to +0, ties to the lowest index.
 * mlx-native's argmax_f32 ignores NaN and is one row; this one takes rows
 * from the grid and the crate's host code drives it unchanged (rows = 1).
 *
 * Layouts: input f32 [rows, nElements]; outIndex u32 [rows]; outValue f32 [rows].
 * Without scratch (or nElements <= ARGMAX_SLICE): argmax_f32, bindings 0
 * input, 1 outIndex, 2 outValue, 3 ArgmaxParams (n_elements);
 * threadgroup(0)/(1) one float / uint per thread; grid (rows, 1, 1) of
 * min(1024, nextPow2(nElements)) threads (mlx-native's).
 * With scratch: argmax_blocks_f32 (0 input, 1 scratch, 2 ArgmaxBlocksParams;
 * grid (rows, ceil(nElements / argmaxSlice(rows, nElements)), 1) of 256
 * threads), then
 * argmax_merge_f32 (0 scratch, 1 outIndex, 2 outValue, 3 ArgmaxBlocksParams;
 * grid (rows, 1, 1)). The bytes that must move: 4 * rows * nElements.
 */
export function argmax(enc: Encoder, args: ArgmaxArgs): void {
  record(enc, planArgmax(args, enc.device.limits, enc.device));
}

/** argmax's plan: validates, then one dispatch or two (see argmax). */
export function planArgmax(a: ArgmaxArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateArgmax(a, device);
  const n = a.nElements;
  if (a.scratch === undefined || n <= ARGMAX_SLICE) {
    const threads = Math.min(MAX_THREADS, limits.maxThreadsPerThreadgroup, nextPow2(n));
    const grid: [number, number, number] = [a.rows, 1, 1];
    return {
      family: SAMPLE_FAMILY, sources: SAMPLE_SOURCES, kernels: SAMPLE_KERNELS,
      dispatches: [{
        kernel: 'argmax_f32', buffers: [a.input, a.outIndex, a.outValue], bytes: [, , , packArgmaxParams({ nElements: n })],
        threadgroupMemory: [roundUp16(4 * threads), roundUp16(4 * threads)], grid, threads: [threads, 1, 1],
        cuda: { grid, threads: [threads, 1, 1] },
      }],
    };
  }
  const slice = argmaxSlice(a.rows, n);
  const nBlocks = Math.ceil(n / slice);
  const params = packArgmaxBlocksParams({ nElements: n, slice, nBlocks });
  const merge = threadsFor(nBlocks, MAX_THREADS, limits);
  return {
    family: SAMPLE_FAMILY, sources: SAMPLE_SOURCES, kernels: SAMPLE_KERNELS,
    dispatches: [
      { kernel: 'argmax_blocks_f32', buffers: [a.input, a.scratch], bytes: [, , params], grid: [a.rows, nBlocks, 1],
        threads: [Math.min(BLOCK_THREADS, limits.maxThreadsPerThreadgroup), 1, 1] },
      { kernel: 'argmax_merge_f32', buffers: [a.scratch, a.outIndex, a.outValue], bytes: [, , , params], grid: [a.rows, 1, 1],
        threads: [merge, 1, 1] },
    ],
  };
}

// ---- top-k ----

export interface TopKArgs {
  /** f32 [rows, nElements] */
  input: Buffer;
  /** u32 [rows, k], output: indices of the k largest, in rank order */
  outIndices: Buffer;
  /** f32 [rows, k], output: their values */
  outValues: Buffer;
  rows: number;
  nElements: number;
  /** 1 to 256; past nElements the entries are (-inf, 0xffffffff). */
  k: number;
  /** u32 of topKScratchElements(rows, nElements, k): given, rows longer than one slice run in two passes. */
  scratch?: Buffer;
}

/** Elements per threadgroup of topK's first pass: small k takes smaller slices (more threadgroups, fewer candidates each). */
export function topKSlice(k: number): number {
  return k <= 64 ? 2048 : 4096;
}

/**
 * u32 elements of topK's scratch: per row, each slice's k (value, index)
 * pairs, then each slice's summary (SAMPLE_SUM_WORDS).
 */
export function topKScratchElements(rows: number, nElements: number, k: number): number {
  return checkedProduct('top_k', 'scratch elements', rows, Math.ceil(nElements / topKSlice(k)), 2 * k + SAMPLE_SUM_WORDS);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateTopK(a: TopKArgs, device?: Device): void {
  const op = 'top_k';
  checkPositive(op, 'rows', a.rows);
  checkPositive(op, 'nElements', a.nElements);
  checkPositive(op, 'k', a.k);
  checkAtMost(op, 'rows', a.rows, U32_MAX, '2^32 - 1');
  checkAtMost(op, 'nElements', a.nElements, U32_MAX, '2^32 - 1 (u32 indices)');
  checkAtMost(op, 'k', a.k, SAMPLE_MAX_K, 'SAMPLE_MAX_K');
  checkAtMost(op, 'nElements', a.nElements, MAX_BLOCKS * topKSlice(a.k), `${MAX_BLOCKS} slices of ${topKSlice(a.k)}`);
  const n = checkedProduct(op, 'rows * nElements', a.rows, a.nElements);
  const nk = checkedProduct(op, 'rows * k', a.rows, a.k);
  checkBufferRules(op, [
    ['input', a.input, 'f32', n],
    ['outIndices', a.outIndices, 'u32', nk],
    ['outValues', a.outValues, 'f32', nk],
    ['scratch', a.scratch, 'u32', a.scratch === undefined ? 0 : topKScratchElements(a.rows, a.nElements, a.k), true],
  ], device);
  checkNoAliasing(op, [['input', a.input], ['outIndices', a.outIndices], ['outValues', a.outValues], ['scratch', a.scratch]],
    ['outIndices', 'outValues', 'scratch'], 'a threadgroup writes while others read the rows');
}

/**
 * topK: per row, the k largest elements, exact, in rank order (the order of
 * argmax: NaN above +inf, -0 equal to +0, ties to the lowest index, as
 * torch.topk orders). mlx-native's top_k_f32 (k <= 128, per-thread windows,
 * order not guaranteed) is here a radix select on (key, ~index) with k up to
 * 256 and output sorted by counting ranks: the crate's host code drives it unchanged (its
 * threadgroup memory, tg_size * k per array, covers what the kernel needs).
 * mlx-native accepts k > nElements; the entries past nElements are
 * (-inf, 0xffffffff) here.
 *
 * Layouts: input f32 [rows, nElements]; outIndices u32 [rows, k]; outValues f32 [rows, k].
 * Without scratch (or one slice per row): top_k_f32, bindings 0 input,
 * 1 outIndices, 2 outValues, 3 TopKParams (n_elements, k); threadgroup(0)
 * max(256, threads) floats, (1) max(nextPow2(k) + 4, threads) uints (the
 * kernel's only threadgroup memory); grid (rows, 1, 1) of
 * min(1024, max(32, nextPow2(nElements))) threads.
 * With scratch: top_k_blocks_f32 (0 input, 1 scratch, 2 TopKBlocksParams;
 * grid (rows, ceil(nElements / topKSlice(k)), 1) of 256 threads (CUDA: 8
 * elements each): each slice's top k, unordered, and on CUDA the level-0
 * bins that hold them (the summary), then top_k_merge_f32 (0 scratch, 1
 * outIndices, 2 outValues, 3 TopKBlocksParams; grid (rows, 1, 1)), which on
 * CUDA bins the candidates of one summary bin only. The bytes that must
 * move: 4 * rows * nElements read, 8 * rows * k written.
 */
export function topK(enc: Encoder, args: TopKArgs): void {
  record(enc, planTopK(args, enc.device.limits, enc.device));
}

/** topK's plan: validates, then one dispatch or two (see topK). */
export function planTopK(a: TopKArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateTopK(a, device);
  const n = a.nElements;
  const slice = topKSlice(a.k);
  if (a.scratch === undefined || n <= slice) {
    const threads = threadsFor(n, MAX_THREADS, limits);
    const span = nextPow2(Math.min(a.k, n));
    const grid: [number, number, number] = [a.rows, 1, 1];
    return {
      family: SAMPLE_FAMILY, sources: SAMPLE_SOURCES, kernels: SAMPLE_KERNELS,
      dispatches: [{
        kernel: 'top_k_f32', buffers: [a.input, a.outIndices, a.outValues], bytes: [, , , packTopKParams({ nElements: n, k: a.k })],
        threadgroupMemory: [roundUp16(4 * Math.max(256, threads)), roundUp16(4 * Math.max(span + 4, threads))], grid,
        threads: [threads, 1, 1], cuda: { grid, threads: [threads, 1, 1] },
      }],
    };
  }
  const nBlocks = Math.ceil(n / slice);
  const params = packTopKBlocksParams({ nElements: n, k: a.k, slice, nBlocks });
  return {
    family: SAMPLE_FAMILY, sources: SAMPLE_SOURCES, kernels: SAMPLE_KERNELS,
    dispatches: [
      { kernel: 'top_k_blocks_f32', buffers: [a.input, a.scratch], bytes: [, , params], grid: [a.rows, nBlocks, 1],
        threads: [Math.min(BLOCK_THREADS, limits.maxThreadsPerThreadgroup), 1, 1],
        cuda: { grid: [a.rows, nBlocks, 1], threads: [threadsFor(slice / 8, CUDA_SELECT_THREADS, limits), 1, 1] } },
      { kernel: 'top_k_merge_f32', buffers: [a.scratch, a.outIndices, a.outValues], bytes: [, , , params], grid: [a.rows, 1, 1],
        threads: [threadsFor(nBlocks * a.k, MAX_THREADS, limits), 1, 1] },
    ],
  };
}

// ---- mlx-native's softmax_sample ----

export interface SoftmaxSampleArgs {
  /** f32 [nElements] */
  logits: Buffer;
  /** f32 [nElements], output: the probabilities softmax(logits / temperature) */
  scratch: Buffer;
  /** u32 [1], output: the sampled token */
  outToken: Buffer;
  /** f32 [1], output: ln of its probability */
  outLogprob: Buffer;
  /** 1 to 2^24. */
  nElements: number;
  /** > 0 */
  temperature: number;
  /** Uniform in [0, 1): the token is the first whose CDF reaches it. */
  randomVal: number;
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateSoftmaxSample(a: SoftmaxSampleArgs, device?: Device): void {
  const op = 'softmax_sample';
  checkPositive(op, 'nElements', a.nElements);
  checkAtMost(op, 'nElements', a.nElements, SOFTMAX_SAMPLE_MAX_N, '2^24 (the params hold it as an f32)');
  if (typeof a.temperature !== 'number' || !Number.isFinite(a.temperature) || a.temperature <= 0) {
    throw invalid(op, 'temperature', 'a finite number > 0', a.temperature);
  }
  if (typeof a.randomVal !== 'number' || !(a.randomVal >= 0 && Math.fround(a.randomVal) < 1)) {
    throw invalid(op, 'randomVal', 'a number in [0, 1) (as an f32)', a.randomVal);
  }
  checkBufferRules(op, [
    ['logits', a.logits, 'f32', a.nElements],
    ['scratch', a.scratch, 'f32', a.nElements],
    ['outToken', a.outToken, 'u32', 1],
    ['outLogprob', a.outLogprob, 'f32', 1],
  ], device);
  checkNoAliasing(op, [['logits', a.logits], ['scratch', a.scratch], ['outToken', a.outToken], ['outLogprob', a.outLogprob]],
    ['scratch', 'outToken', 'outLogprob'], 'the kernel reads the logits and the probabilities while it writes');
}

/**
 * softmaxSample: mlx-native's softmax_sample_f32. p = softmax(logits /
 * temperature) (written to scratch); the token is the first i whose CDF
 * p_0 + ... + p_i reaches randomVal (nElements - 1 where rounding leaves the
 * CDF short of it), out_logprob = ln p_i. The CDF is summed by contiguous
 * chunks in parallel, where the crate's thread 0 walks it alone.
 *
 * Bindings: 0 logits, 1 scratch, 2 outToken, 3 outLogprob, 4
 * SoftmaxSampleParams (n as f32, temperature, randomVal); threadgroup(0) one
 * float per thread (mlx-native's; the kernel uses one per simdgroup).
 * Grid (1, 1, 1) of min(1024, nextPow2(nElements)) threads.
 */
export function softmaxSample(enc: Encoder, args: SoftmaxSampleArgs): void {
  record(enc, planSoftmaxSample(args, enc.device.limits, enc.device));
}

/** softmaxSample's plan: validates, then one dispatch (see softmaxSample). */
export function planSoftmaxSample(a: SoftmaxSampleArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateSoftmaxSample(a, device);
  const threads = Math.min(MAX_THREADS, limits.maxThreadsPerThreadgroup, nextPow2(a.nElements));
  const grid: [number, number, number] = [1, 1, 1];
  return {
    family: SAMPLE_FAMILY, sources: SAMPLE_SOURCES, kernels: SAMPLE_KERNELS,
    dispatches: [{
      kernel: 'softmax_sample_f32', buffers: [a.logits, a.scratch, a.outToken, a.outLogprob],
      bytes: [, , , , packSoftmaxSampleParams(a)], threadgroupMemory: [roundUp16(4 * threads)], grid, threads: [threads, 1, 1],
      cuda: { grid, threads: [threads, 1, 1] },
    }],
  };
}

// ---- the filtered sampler ----

/** A 64-bit integer: a safe integer number >= 0 or a bigint below 2^64. */
export type U64 = number | bigint;

export interface SampleArgs {
  /** f32 [rows, vocab] */
  logits: Buffer;
  /** u32 [rows, nPrev]: each row's previous token ids, penalized once each; ids >= vocab are ignored (padding). */
  prevTokens?: Buffer;
  /** u32 [rows], output: the drawn token (0xffffffff where every logit is -inf or NaN) */
  outToken: Buffer;
  /** f32 [rows], output: ln of its probability in the kept set (0 when greedy) */
  outLogprob: Buffer;
  /** u32 of sampleScratchElements(rows, vocab) */
  scratch: Buffer;
  rows: number;
  /** 1 to 2^24 */
  vocab: number;
  /** >= 0; 0 draws greedily (the argmax of the penalized logits). */
  temperature: number;
  /** 0 (absent): no top-k; else 1 to 256. */
  topK?: number;
  /** (0, 1]; 1 (absent): no top-p. */
  topP?: number;
  /** [0, 1]; 0 (absent): no min-p. */
  minP?: number;
  /** > 0; 1 (absent): no penalty. */
  repetitionPenalty?: number;
  /** Previous ids per row, with prevTokens. */
  nPrev?: number;
  /** Philox key. */
  seed: U64;
  /** Philox counter words 0 and 1 (e.g. the decode step); word 2 is the row. */
  counter: U64;
}

/**
 * Elements per threadgroup of the sampler's first pass: 2048 where the
 * slices keep at most 64 candidates (twice the threadgroups, half the work
 * each), 4096 for more (fewer candidates for the finish to merge).
 */
export function sampleSlice(candidates: number): number {
  return candidates > 64 ? SAMPLE_SLICE : SAMPLE_SLICE / 2;
}

/**
 * u32 elements of the sampler's scratch, for any filters, per row (the
 * regions of shaders/sample.metal's layout()): z (vocab rounded up to 4), 4
 * words per slice of 2048, 256 candidate pairs per slice of 4096 (64 per
 * slice of 2048 take no more), the whole-row histograms and state, a record
 * per slice of 4096, and a candidate summary per slice of 2048 (CUDA's).
 */
export function sampleScratchElements(rows: number, vocab: number): number {
  const slices = Math.ceil(vocab / SAMPLE_SLICE);
  const halves = Math.ceil(vocab / (SAMPLE_SLICE / 2));
  const perRow = Math.ceil(vocab / 4) * 4 + 4 * halves + 2 * SAMPLE_MAX_K * slices
    + SAMPLE_HIST_WORDS + SAMPLE_STATE_WORDS + SAMPLE_REC_WORDS * slices + SAMPLE_SUM_WORDS * halves;
  return checkedProduct('sample', 'scratch elements', rows, perRow);
}

/** The candidates the first pass keeps per slice: top-k's, or 256 when top-p or min-p act on the whole vocabulary, else none. */
export function sampleCandidates(a: Pick<SampleArgs, 'vocab' | 'topK' | 'topP' | 'minP'>): number {
  const k = a.topK ?? 0;
  if (k > 0) return Math.min(k, a.vocab);
  // As the kernels see them: the params hold f32s.
  return Math.fround(a.topP ?? 1) < 1 || Math.fround(a.minP ?? 0) > 0 ? Math.min(SAMPLE_MAX_K, a.vocab) : 0;
}

/** [lo, hi] words of a 64-bit argument, or null when it is not one. */
function u64Words(v: unknown): [number, number] | null {
  if (typeof v === 'number') {
    if (!Number.isSafeInteger(v) || v < 0) return null;
    return [v % 2 ** 32, Math.floor(v / 2 ** 32)];
  }
  if (typeof v === 'bigint') {
    if (v < 0n || v >= 1n << 64n) return null;
    return [Number(v & 0xffff_ffffn), Number(v >> 32n)];
  }
  return null;
}

function checkU64(op: string, arg: string, v: unknown): [number, number] {
  const w = u64Words(v);
  if (w === null) throw invalid(op, arg, 'an integer in [0, 2^64) (a safe integer number or a bigint)', v);
  return w;
}

function finiteIn(op: string, arg: string, v: unknown, ok: (x: number) => boolean, expected: string): void {
  if (typeof v !== 'number' || !Number.isFinite(v) || !ok(v)) throw invalid(op, arg, expected, v);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateSample(a: SampleArgs, device?: Device): void {
  const op = 'sample';
  checkPositive(op, 'rows', a.rows);
  checkPositive(op, 'vocab', a.vocab);
  checkAtMost(op, 'rows', a.rows, U32_MAX, '2^32 - 1');
  checkAtMost(op, 'vocab', a.vocab, SAMPLE_MAX_VOCAB, '2^24');
  finiteIn(op, 'temperature', a.temperature, (x) => x >= 0, 'a finite number >= 0');
  if (a.topK !== undefined && !(Number.isSafeInteger(a.topK) && a.topK >= 0 && a.topK <= SAMPLE_MAX_K)) {
    throw invalid(op, 'topK', `an integer in [0, ${SAMPLE_MAX_K}]`, a.topK);
  }
  if (a.topP !== undefined) finiteIn(op, 'topP', a.topP, (x) => x > 0 && x <= 1, 'a number in (0, 1]');
  if (a.minP !== undefined) finiteIn(op, 'minP', a.minP, (x) => x >= 0 && x <= 1, 'a number in [0, 1]');
  if (a.repetitionPenalty !== undefined) finiteIn(op, 'repetitionPenalty', a.repetitionPenalty, (x) => x > 0, 'a finite number > 0');
  checkU64(op, 'seed', a.seed);
  checkU64(op, 'counter', a.counter);
  const n = checkedProduct(op, 'rows * vocab', a.rows, a.vocab);
  let nPrev = 0;
  if (a.prevTokens !== undefined) {
    checkPositive(op, 'nPrev', a.nPrev as number);
    checkAtMost(op, 'nPrev', a.nPrev as number, U32_MAX, '2^32 - 1');
    nPrev = checkedProduct(op, 'rows * nPrev', a.rows, a.nPrev as number);
  }
  const scratch = sampleScratchElements(a.rows, a.vocab);
  checkBufferRules(op, [
    ['logits', a.logits, 'f32', n],
    ['prevTokens', a.prevTokens, 'u32', nPrev, true],
    ['outToken', a.outToken, 'u32', a.rows],
    ['outLogprob', a.outLogprob, 'f32', a.rows],
    ['scratch', a.scratch, 'u32', scratch],
  ], device);
  checkNoAliasing(op, [['logits', a.logits], ['prevTokens', a.prevTokens], ['outToken', a.outToken], ['outLogprob', a.outLogprob],
    ['scratch', a.scratch]], ['outToken', 'outLogprob', 'scratch'], 'the passes read the logits, the ids and the scratch while they write');
}

/** The sampler's params; `pass` is sample_mass_f32's (0 for the other passes). */
export function packSampleParams(a: SampleArgs, pass = 0): Uint8Array {
  const cand = sampleCandidates(a);
  const slice = sampleSlice(cand);
  const [seedLo, seedHi] = u64Words(a.seed)!;
  const [ctrLo, ctrHi] = u64Words(a.counter)!;
  return packFields(SAMPLE_PARAMS_LAYOUT, {
    n_vocab: a.vocab, rows: a.rows, slice, n_blocks: Math.ceil(a.vocab / slice), top_k: a.topK ?? 0,
    n_cand: cand, n_prev: a.prevTokens === undefined ? 0 : a.nPrev!, temperature: a.temperature,
    top_p: a.topP ?? 1, min_p: a.minP ?? 0, repetition_penalty: a.repetitionPenalty ?? 1,
    seed_lo: seedLo, seed_hi: seedHi, counter_lo: ctrLo, counter_hi: ctrHi, pass,
  });
}

/**
 * The passes over the whole row the plan adds (sample_mass_f32's pass
 * numbers): top_k 0 with top-p or min-p and more tokens than candidates,
 * where the candidates may not hold the kept set; three passes for the top-p
 * cut, one (the records) for min-p alone.
 */
export function sampleMassPasses(a: Pick<SampleArgs, 'vocab' | 'topK' | 'topP' | 'minP' | 'temperature'>): number[] {
  const cand = sampleCandidates(a);
  if (!(Math.fround(a.temperature) > 0) || (a.topK ?? 0) > 0 || cand === 0 || cand >= a.vocab) return [];
  return Math.fround(a.topP ?? 1) < 1 ? [0, 1, 2] : [2];
}

/**
 * sample: one token per row of logits, drawn from the distribution that the
 * filters leave, as Hugging Face applies them (repetition penalty, then
 * temperature, top-k, top-p, min-p):
 *   x'_i = x_i / rp if x_i > 0 else x_i * rp, for the row's previous ids
 *   z_i = x'_i / T (NaN as -inf, +inf as the largest float); T = 0: greedy
 *   kept: a prefix of the rank order of z (argmax's order): the topK first;
 *   those whose predecessors hold less than topP of the mass (of the top-k
 *   set with topK, else of the row); those with exp(z_i - z_max) >= minP
 *   Ties at the top-k and top-p cuts go to the lowest index, so exactly
 *   topK tokens pass top-k (Hugging Face keeps every token equal to the k-th
 *   value, llama.cpp exactly k). llama.cpp's default chain applies the
 *   temperature after top-p and min-p; Hugging Face's and this one before.
 *   u = Philox4x32-10(counter (counter lo, counter hi, row, 0), key seed),
 *   word 0's top 24 bits / 2^24: the token is the first in the kept set's
 *   order whose cumulative weight exp(z - z_max) exceeds u times the kept
 *   total. The order is rank order when the kept set comes from the
 *   candidates (topK > 0, or topP / minP that keep at most 256 tokens), index
 *   order otherwise. The same (seed, counter, row) draws the same token.
 * mlx-native has no such op (its softmax_sample draws from the whole softmax
 * with a random value the host supplies); this one follows the crate's style:
 * scratch from the caller, one params struct, validation before recording.
 *
 * Layouts: logits f32 [rows, vocab]; prevTokens u32 [rows, nPrev];
 * outToken u32 [rows]; outLogprob f32 [rows]; scratch u32
 * [sampleScratchElements(rows, vocab)].
 * Dispatches (shaders/sample.metal's header states each pass):
 * sample_blocks_f32 (0 logits, 1 prevTokens (logits when absent, unread), 2
 * scratch, 3 SampleParams; grid (rows, ceil(vocab / sampleSlice), 1)): each
 * slice's max, index of the max, sum of exp and candidates (on CUDA with
 * their summary), and with topK = 0 its z; then, with topK = 0 and topP or
 * minP over more than 256 tokens, sample_mass_f32 (0 scratch, 1 SampleParams
 * with `pass`; the same grid) for each of sampleMassPasses (the top-p cut's
 * histograms over the whole row, spread over the slices; on CUDA, where
 * the slice pass selects no candidates for them, they also list the tokens
 * that may be kept: the min-p set, the tokens from the top-p cut's bin up,
 * and the finish draws from a list of fewer than 256 in rank order); then
 * sample_finish_f32 (0
 * scratch, 1 outToken, 2 outLogprob, 3 SampleParams; grid (rows, 1, 1) of
 * 256 to 1024 threads; CUDA: 1024 where it walks z, one per 8
 * candidates otherwise).
 * The bytes that must move: the logits, read once (4 * rows * vocab); with
 * topK = 0 the first pass also writes z, which the finish reads back for one
 * slice, and the mass passes read three times more where they run.
 */
export function sample(enc: Encoder, args: SampleArgs): void {
  record(enc, planSample(args, enc.device.limits, enc.device));
}

/** sample's plan: validates, then the passes (see sample). */
export function planSample(a: SampleArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateSample(a, device);
  const cand = sampleCandidates(a);
  const nb = Math.ceil(a.vocab / sampleSlice(cand));
  const params = packSampleParams(a);
  const slice = Math.min(sampleSlice(cand), a.vocab);
  // Metal: 256 threads, up to 16 z each; CUDA: 8 each (two 16-byte loads).
  const grid: [number, number, number] = [a.rows, nb, 1];
  const rowPass = {
    grid, threads: [threadsFor(slice, BLOCK_THREADS, limits), 1, 1] as [number, number, number],
    cuda: { grid, threads: [threadsFor(slice / 8, CUDA_SELECT_THREADS, limits), 1, 1] as [number, number, number] },
  };
  const blocks: PlannedDispatch = {
    kernel: 'sample_blocks_f32', buffers: [a.logits, a.prevTokens ?? a.logits, a.scratch], bytes: [, , , params], ...rowPass,
  };
  const cudaRow: [number, number, number] = [threadsFor(CUDA_ROW_THREADS, CUDA_ROW_THREADS, limits), 1, 1];
  const mass: PlannedDispatch[] = sampleMassPasses(a).map((pass) => ({
    kernel: 'sample_mass_f32', buffers: [a.scratch], bytes: [, packSampleParams(a, pass)], grid, threads: rowPass.threads,
    cuda: { grid, threads: cudaRow },
  }));
  // The finish holds its candidates in registers: SAMPLE_ITEMS per thread
  // (Metal); CUDA's 8 per thread up to 1024 threads (16 past 8192
  // candidates). CUDA's walks a slice of z (no filter, the whole row) at 1024 threads.
  const threads: [number, number, number] = [threadsFor(Math.max(FINISH_THREADS, Math.ceil((nb * cand) / SAMPLE_ITEMS)), MAX_THREADS, limits), 1, 1];
  const cudaCand: [number, number, number] = [threadsFor(Math.max(FINISH_THREADS, Math.ceil((nb * cand) / CUDA_CAND_ITEMS)), MAX_THREADS, limits), 1, 1];
  const walks = Math.fround(a.temperature) > 0 && (cand === 0 || mass.length > 0);
  const finish: PlannedDispatch = {
    kernel: 'sample_finish_f32', buffers: [a.scratch, a.outToken, a.outLogprob], bytes: [, , , params],
    grid: [a.rows, 1, 1], threads, cuda: { grid: [a.rows, 1, 1], threads: walks ? cudaRow : cudaCand },
  };
  return { family: SAMPLE_FAMILY, sources: SAMPLE_SOURCES, kernels: SAMPLE_KERNELS, dispatches: [blocks, ...mass, finish] };
}

// ---- Philox4x32-10 ----

export interface Philox4x32Args {
  /** u32 [n, 4], output: block j is Philox4x32-10(counter + j, key) */
  output: Buffer;
  /** Blocks of four words, 1 to 2^30. */
  n: number;
  /** Two u32 words. */
  key: readonly number[];
  /** Four u32 words, word 0 lowest (a 128-bit counter). */
  counter: readonly number[];
}

function checkWords(op: string, arg: string, v: unknown, count: number): void {
  const ok = Array.isArray(v) && v.length === count && v.every((w) => Number.isInteger(w) && w >= 0 && w <= U32_MAX);
  if (!ok) throw invalid(op, arg, `an array of ${count} integers in [0, 2^32)`, v);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validatePhilox4x32(a: Philox4x32Args, device?: Device): void {
  const op = 'philox4x32';
  checkPositive(op, 'n', a.n);
  checkAtMost(op, 'n', a.n, PHILOX_MAX_BLOCKS, '2^30');
  checkWords(op, 'key', a.key, 2);
  checkWords(op, 'counter', a.counter, 4);
  checkBufferRules(op, [['output', a.output, 'u32', 4 * a.n]], device);
}

/**
 * philox4x32: counter-based random bits, Random123's philox4x32 with 10
 * rounds (the generator the sampler draws with; its known-answer vectors
 * hold on every backend). Block j of output is Philox4x32-10 of the 128-bit
 * counter + j under the 64-bit key.
 *
 * Bindings: 0 output u32 [n, 4], 1 PhiloxParams (counter words, key words,
 * n). Grid (ceil(n / 256), 1, 1) of 256 threads.
 */
export function philox4x32(enc: Encoder, args: Philox4x32Args): void {
  record(enc, planPhilox4x32(args, enc.device.limits, enc.device));
}

/** philox4x32's plan: validates, then one dispatch (see philox4x32). */
export function planPhilox4x32(a: Philox4x32Args, limits: DeviceLimits, device?: Device): OpPlan {
  validatePhilox4x32(a, device);
  const threads = Math.min(PHILOX_THREADS, limits.maxThreadsPerThreadgroup);
  return {
    family: SAMPLE_FAMILY, sources: SAMPLE_SOURCES, kernels: SAMPLE_KERNELS,
    dispatches: [{
      kernel: 'philox4x32_10_u32', buffers: [a.output], bytes: [, packPhiloxParams({ counter: a.counter, key: a.key, nBlocks: a.n })],
      grid: [Math.ceil(a.n / threads), 1, 1], threads: [threads, 1, 1],
    }],
  };
}

// ---- the float64 reference ----

// CPU references of the sample family: float64 arithmetic on the f32 inputs,
// the order of shaders/sample.metal (by value, NaN above +inf, -0 equal to
// +0, ties to the lowest index), and Philox4x32-10 in 32-bit integers.

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The kernels' order key of an f32 value: unsigned order = value order, NaN above +inf, -0 as +0. */
export function orderKey(v: number): number {
  f32[0] = v;
  const b = u32[0]!;
  if ((b & 0x7fffffff) >>> 0 > 0x7f800000) return 0xffffffff;
  if ((b & 0x7fffffff) === 0) return 0x80000000;
  return (b & 0x80000000) !== 0 ? ~b >>> 0 : (b | 0x80000000) >>> 0;
}

/** (a, ia) ranks before (b, ib) in the kernels' order. */
export function ranksBefore(a: number, ia: number, b: number, ib: number): boolean {
  const ka = orderKey(a), kb = orderKey(b);
  return ka > kb || (ka === kb && ia < ib);
}

/** Per row of x [rows, n]: the index and value of the largest element. */
export function argmaxRef(x: ArrayLike<number>, rows: number, n: number): { index: Uint32Array; value: Float64Array } {
  const index = new Uint32Array(rows);
  const value = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let best = 0;
    for (let i = 1; i < n; i++) if (ranksBefore(x[r * n + i]!, i, x[r * n + best]!, best)) best = i;
    index[r] = best;
    value[r] = x[r * n + best]!;
  }
  return { index, value };
}

/** Indices 0..n-1 of one row in rank order. */
function rankOrder(v: ArrayLike<number>, n: number, at = 0): number[] {
  const keys = Array.from({ length: n }, (_, i) => orderKey(v[at + i]!));
  return Array.from({ length: n }, (_, i) => i).sort((a, b) => keys[b]! - keys[a]! || a - b);
}

/** Per row: the k best (value, index) in rank order; past n, (-inf, 0xffffffff). */
export function topKRef(x: ArrayLike<number>, rows: number, n: number, k: number): { indices: Uint32Array; values: Float64Array } {
  const indices = new Uint32Array(rows * k).fill(0xffffffff);
  const values = new Float64Array(rows * k).fill(-Infinity);
  for (let r = 0; r < rows; r++) {
    const order = rankOrder(x, n, r * n);
    for (let j = 0; j < Math.min(k, n); j++) {
      indices[r * k + j] = order[j]!;
      values[r * k + j] = x[r * n + order[j]!]!;
    }
  }
  return { indices, values };
}

/**
 * mlx-native's softmax_sample: p = softmax(logits / temperature); the token
 * is the first i whose CDF reaches randomVal (n - 1 if none does).
 */
export function softmaxSampleRef(logits: ArrayLike<number>, n: number, temperature: number, randomVal: number):
  { token: number; logprob: number; probs: Float64Array; cdf: Float64Array } {
  let m = -Infinity;
  for (let i = 0; i < n; i++) m = Math.max(m, logits[i]! / temperature);
  const probs = new Float64Array(n);
  let s = 0;
  for (let i = 0; i < n; i++) s += probs[i] = Math.exp(logits[i]! / temperature - m);
  const cdf = new Float64Array(n);
  let c = 0;
  for (let i = 0; i < n; i++) {
    probs[i]! /= s;
    c += probs[i]!;
    cdf[i] = c;
  }
  let token = cdf.findIndex((v) => v >= randomVal);
  if (token < 0) token = n - 1;
  return { token, logprob: Math.log(probs[token]!), probs, cdf };
}

// ---- Philox4x32-10 ----

/** The high and low 32 bits of a * b (32-bit unsigned). */
function mulhilo(a: number, b: number): [number, number] {
  const lo = Math.imul(a, b) >>> 0;
  const aH = a >>> 16, aL = a & 0xffff, bH = b >>> 16, bL = b & 0xffff;
  const mid1 = aH * bL, mid2 = aL * bH;
  const low = aL * bL;
  const carry = Math.floor(((low >>> 16) + (mid1 & 0xffff) + (mid2 & 0xffff)) / 65536);
  const hi = (aH * bH + Math.floor(mid1 / 65536) + Math.floor(mid2 / 65536) + carry) >>> 0;
  return [hi, lo];
}

/** Philox4x32-10 (Random123's philox4x32, 10 rounds) of a 128-bit counter (word 0 lowest) under a 64-bit key. */
export function philox4x32_10(counter: readonly number[], key: readonly number[]): [number, number, number, number] {
  let [c0, c1, c2, c3] = counter.map((w) => w >>> 0) as [number, number, number, number];
  let [k0, k1] = key.map((w) => w >>> 0) as [number, number];
  for (let r = 0; r < 10; r++) {
    const [hi0, lo0] = mulhilo(0xd2511f53, c0);
    const [hi1, lo1] = mulhilo(0xcd9e8d57, c2);
    [c0, c1, c2, c3] = [(hi1 ^ c1 ^ k0) >>> 0, lo1, (hi0 ^ c3 ^ k1) >>> 0, lo0];
    k0 = (k0 + 0x9e3779b9) >>> 0;
    k1 = (k1 + 0xbb67ae85) >>> 0;
  }
  return [c0, c1, c2, c3];
}

/** The words of a 64-bit integer, [lo, hi]. */
function words(v: number | bigint): [number, number] {
  if (typeof v === 'bigint') return [Number(v & 0xffff_ffffn), Number((v >> 32n) & 0xffff_ffffn)];
  return [v % 2 ** 32, Math.floor(v / 2 ** 32)];
}

/** The sampler's uniform for a row: Philox word 0's top 24 bits / 2^24. */
export function sampleUniform(seed: number | bigint, counter: number | bigint, row: number): number {
  const [s0, s1] = words(seed);
  const [c0, c1] = words(counter);
  return (philox4x32_10([c0, c1, row, 0], [s0, s1])[0] >>> 8) / 2 ** 24;
}

// ---- the filtered sampler ----

export interface SampleOptions {
  temperature: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repetitionPenalty?: number;
  /** [rows, nPrev] previous ids (any >= vocab ignored). */
  prevTokens?: ArrayLike<number>;
  nPrev?: number;
  seed: number | bigint;
  counter: number | bigint;
}

export interface SampleRow {
  /** The drawn token (0xffffffff where every z is -inf). */
  token: number;
  logprob: number;
  /** The kept set's probabilities over the vocabulary (0 outside it). */
  probs: Float64Array;
  /** The kept tokens, in the order the draw walks. */
  kept: number[];
  /** 'greedy', 'candidates' (rank order) or 'index' (index order): the kernels' path. */
  path: 'greedy' | 'candidates' | 'index' | 'none';
  /** The uniform of the draw. */
  u: number;
  /**
   * How far the decisions are from flipping, relative: the nearest CDF
   * boundary to the draw's target, the top-p and min-p boundaries at the
   * cut, and the overflow decision. f32 arithmetic in the kernels may decide
   * otherwise only where this is about 1e-6 or less.
   */
  margin: number;
}

/** z of one row: penalty, temperature (T = 0: x'), NaN as -inf, +inf as the largest f32. */
export function sampleLogits(x: ArrayLike<number>, vocab: number, row: number, o: SampleOptions): Float64Array {
  const z = new Float64Array(vocab);
  const pen = o.repetitionPenalty ?? 1;
  const flagged = new Uint8Array(vocab);
  if (o.prevTokens !== undefined && pen !== 1) {
    const np = o.nPrev ?? 0;
    for (let j = 0; j < np; j++) {
      const t = o.prevTokens[row * np + j]!;
      if (t < vocab) flagged[t] = 1;
    }
  }
  const T = Math.fround(o.temperature);
  for (let i = 0; i < vocab; i++) {
    let v = x[row * vocab + i]!;
    if (Number.isNaN(v)) {
      z[i] = -Infinity;
      continue;
    }
    if (flagged[i]) v = v > 0 ? v / Math.fround(pen) : v * Math.fround(pen);
    v = T > 0 ? v / T : v;
    z[i] = Math.min(v, 3.4028234663852886e38);
  }
  return z;
}

/** The sampler on one row (see ts/ops/sample.ts: the same filters, order and draw). */
export function sampleRowRef(x: ArrayLike<number>, vocab: number, row: number, o: SampleOptions): SampleRow {
  const z = sampleLogits(x, vocab, row, o);
  const probs = new Float64Array(vocab);
  const u = sampleUniform(o.seed, o.counter, row);
  const order = Array.from({ length: vocab }, (_, i) => i).sort((a, b) => (z[b]! - z[a]!) || a - b);
  const zmax = z[order[0]!]!;
  if (zmax === -Infinity) return { token: 0xffffffff, logprob: -Infinity, probs, kept: [], path: 'none', u, margin: Infinity };
  if (o.temperature === 0) {
    probs[order[0]!] = 1;
    return { token: order[0]!, logprob: 0, probs, kept: [order[0]!], path: 'greedy', u, margin: Infinity };
  }
  const w = z.map((v) => Math.exp(v - zmax));
  let mass = 0;
  for (const v of w) mass += v;
  const topK = o.topK ?? 0;
  const topP = Math.fround(o.topP ?? 1);
  const minP = Math.fround(o.minP ?? 0);
  const cand = topK > 0 ? Math.min(topK, vocab) : topP < 1 || minP > 0 ? Math.min(256, vocab) : 0;
  const limit = topK > 0 ? Math.min(topK, vocab) : vocab;
  let ref = 0;
  for (let r = 0; r < limit; r++) ref += w[order[r]!]!;
  if (topK === 0) ref = mass;
  let margin = Infinity;
  let kept = 0;
  let len = 0;
  for (let r = 0; r < limit; r++) {
    const wr = w[order[r]!]!;
    if (topP < 1) {
      margin = Math.min(margin, Math.abs(kept - topP * ref) / ref);
      if (!(kept < topP * ref)) break;
    }
    if (minP > 0) {
      margin = Math.min(margin, Math.abs(wr - minP) / Math.max(minP, 1e-30));
      if (!(wr >= minP)) break;
    }
    kept += wr;
    len = r + 1;
  }
  // With topK = 0 the candidates hold the kept set unless it takes them all.
  const candidatesPath = cand > 0 && !(topK === 0 && len >= cand && cand < vocab);
  const set = order.slice(0, len);
  const walk = candidatesPath ? set : [...set].sort((a, b) => a - b);
  for (const t of set) probs[t] = w[t]! / kept;
  const target = u * kept;
  let c = 0;
  let token = walk[walk.length - 1]!;
  let found = false;
  for (const t of walk) {
    const wt = w[t]!;
    if (wt <= 0) continue;
    margin = Math.min(margin, Math.abs(c + wt - target) / kept);
    if (!found && c + wt > target) {
      token = t;
      found = true;
    }
    c += wt;
  }
  return { token, logprob: Math.log(w[token]! / kept), probs, kept: walk, path: candidatesPath ? 'candidates' : 'index', u, margin };
}

/** The sampler on every row of logits [rows, vocab]. */
export function sampleRef(x: ArrayLike<number>, rows: number, vocab: number, o: SampleOptions): SampleRow[] {
  return Array.from({ length: rows }, (_, r) => sampleRowRef(x, vocab, r, o));
}
