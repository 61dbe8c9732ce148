// softmax: softmax over rows, with an optional scale, softcap and additive
// bf16 mask; and softcap on its own. Kernel names, bindings and params bytes
// are mlx-native's (src/ops/softmax.rs, scale_mask_softmax.rs, softcap.rs),
// with scale_mask_softmax in f16 and bf16 and its pad word holding the softcap;
// and, not in the crate (added in its style), a two-pass form for rows too
// long or too few to fill the GPU one threadgroup per row, over a scratch
// buffer the caller gives. Kernels: shaders/softmax.metal and shaders/cuda/softmax.cu.

import src from '../../shaders/softmax.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/softmax.cu' with { type: 'text' };
import header from '../../shaders/softmax.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import { checkAtMost, checkBufferRules, like, checkBuffer, checkDtype, checkElements, checkNoAliasing, checkPositive, checkedProduct, invalid, overlaps } from '../validate.ts';
import { dtypeSize } from '../dtype.ts';
import { roundUp16, rowBlockThreads, rowLaunch, rowThreadgroup, type LaunchLimits } from '../launch.ts';
import { record, type OpPlan, type PlannedDispatch } from '../plan.ts';

export const SOFTMAX_FAMILY = 'softmax';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const SOFTMAX_SOURCES = familySources(SOFTMAX_FAMILY, { header, metal: src, cuda: cudaSrc });
export const SOFTMAX_KERNELS = [
  'softmax_f32', 'softmax_f16', 'softmax_bf16',
  'scale_mask_softmax_f32', 'scale_mask_softmax_f16', 'scale_mask_softmax_bf16',
  'softcap_f32', 'softcap_f16', 'softcap_bf16',
  'softmax_blocks_f32', 'softmax_blocks_f16', 'softmax_blocks_bf16',
  'softmax_finish_f32', 'softmax_finish_f16', 'softmax_finish_bf16',
  'softmax_grid_f32', 'softmax_grid_f16', 'softmax_grid_bf16',
] as const;
/** Threads per row the Metal launch uses at most (mlx-native's). */
export const SOFTMAX_MAX_THREADS = 256;
/** SoftmaxParams hold cols as an f32: exact up to 2^24. */
export const SOFTMAX_MAX_COLS = 2 ** 24;
/** softcap's threadgroup (mlx-native's): 256 threads, one element each. */
export const SOFTCAP_THREADS = 256;
/** Elements of a slice of the two-pass form at least (a threadgroup each); longer rows take longer slices. */
export const SOFTMAX_SLICE = 2048;
/** Slices of a row at most in the two-pass form: each threadgroup of the second pass merges all of its row's. */
export const SOFTMAX_MAX_SLICES = 256;
/**
 * The two-pass form runs, given scratch, for rows of more than one slice
 * when there are fewer rows than this (one threadgroup per row would leave
 * GPUs idle: two per SM of an H100 or H200, 132 SMs) or a row is longer
 * than SOFTMAX_HELD_COLS.
 */
export const SOFTMAX_FILL_ROWS = 264;
/** The longest row the one-pass CUDA kernel holds in registers (1024 threads, 32 elements each); longer ones are read twice. */
export const SOFTMAX_HELD_COLS = 32768;
/** The two-pass grid's second axis holds the rows: CUDA's limit. */
export const SOFTMAX_TWO_PASS_MAX_ROWS = 65535;
/** Threads of a two-pass threadgroup. */
const SOFTMAX_BLOCK_THREADS = 256;
/** softcap's grid counts threads in 32 bits. */
export const SOFTCAP_MAX_ELEMENTS = 2 ** 32 - SOFTCAP_THREADS;
const U32_MAX = 0xffff_ffff;

/** struct SoftmaxParams (softmax_<t>, buffer 2). */
export const SOFTMAX_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'SoftmaxParams');
/** struct ScaleMaskSoftmaxParams (scale_mask_softmax_<t>, buffer 3). */
export const SCALE_MASK_SOFTMAX_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'ScaleMaskSoftmaxParams');
/** struct SoftcapParams (softcap_<t>, buffer 2). */
export const SOFTCAP_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'SoftcapParams');
/** struct SoftmaxBlocksParams (softmax_blocks_<t> buffer 3, softmax_finish_<t> buffer 4). */
export const SOFTMAX_BLOCKS_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'SoftmaxBlocksParams');
/** struct SoftmaxGridParams (softmax_grid_<t> buffer 4). */
export const SOFTMAX_GRID_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'SoftmaxGridParams');

/**
 * The scratch of the one-dispatch form holds a (max, sum) per slice of at
 * least this many elements: its slices, and the two-pass form's (at least
 * SOFTMAX_SLICE), fit rows * ceil(cols / SOFTMAX_GRID_MIN_SLICE) pairs.
 */
export const SOFTMAX_GRID_MIN_SLICE = 1024;
/** Rounds of the one-dispatch form at most: a barrier word each, after the pairs. */
export const SOFTMAX_GRID_ROUNDS = 16;
/** Threadgroups of the one-dispatch form at most. */
export const SOFTMAX_GRID_MAX_BLOCKS = 1024;
/** 16-byte vectors a thread of softmax_grid_<t> holds (shaders/cuda/softmax.cu GRID_HOLD, GRID_HOLD_MASKED). */
const SOFTMAX_GRID_HOLD = 4;
const SOFTMAX_GRID_HOLD_MASKED = 2;

export interface SoftmaxArgs {
  /** [rows, cols], f32, f16 or bf16 */
  input: Buffer;
  /** [rows, cols] in input's dtype, output; may be input (in place) */
  output: Buffer;
  rows: number;
  /** Elements per row (the softmax axis), at most 2^24. */
  cols: number;
  /** Multiplies x first (1 when absent), e.g. 1 / sqrt(headDim). */
  scale?: number;
  /** > 0: v = softcap * tanh(x * scale / softcap) before the mask (Gemma 2); 0 or absent: none. */
  softcap?: number;
  /** [seqQ, cols] bf16, added after the softcap: row r adds mask row r % seqQ (0 or -inf for a causal mask). */
  mask?: Buffer;
  /** Mask rows (query positions), given with a mask; rows is a multiple. */
  seqQ?: number;
  /**
   * f32 of softmaxScratchElements(rows, cols), zero when new (its barrier
   * words; see there): given, rows of more than one slice run over several
   * threadgroups a row where one threadgroup per row would leave the GPU
   * idle (fewer than SOFTMAX_FILL_ROWS rows) or re-read the row anyway
   * (cols > SOFTMAX_HELD_COLS): in one dispatch on CUDA (softmaxGrid), else
   * in two passes. Not over input, output or the mask.
   */
  scratch?: Buffer;
}

export interface SoftcapArgs {
  /** [n] (any shape), f32, f16 or bf16 */
  input: Buffer;
  /** input's dtype and element count; may be input (in place) */
  output: Buffer;
  /** > 0: y = cap * tanh(x / cap) (Gemma's final logits: 30). */
  cap: number;
}

export function packSoftmaxParams(p: { cols: number }): Uint8Array {
  return packFields(SOFTMAX_PARAMS_LAYOUT, { cols: p.cols, reserved: 0 });
}
export function packScaleMaskSoftmaxParams(p: { cols: number; seqQ: number; scale: number; softcap: number }): Uint8Array {
  return packFields(SCALE_MASK_SOFTMAX_PARAMS_LAYOUT, { cols: p.cols, seq_q: p.seqQ, scale: p.scale, softcap: p.softcap });
}
export function packSoftcapParams(p: { cap: number; n: number }): Uint8Array {
  return packFields(SOFTCAP_PARAMS_LAYOUT, { cap: p.cap, n_elements: p.n });
}

export function packSoftmaxGridParams(p: {
  cols: number; seqQ: number; scale: number; softcap: number; rows: number; rowsPerRound: number; slices: number; slice: number;
  barrier: number; sharedVectors: number;
}): Uint8Array {
  return packFields(SOFTMAX_GRID_PARAMS_LAYOUT, {
    cols: p.cols, seq_q: p.seqQ, scale: p.scale, softcap: p.softcap, rows: p.rows, rows_per_round: p.rowsPerRound,
    slices: p.slices, slice: p.slice, barrier: p.barrier, shared_vectors: p.sharedVectors,
  });
}

export function packSoftmaxBlocksParams(p: { cols: number; seqQ: number; scale: number; softcap: number; slice: number; nBlocks: number }): Uint8Array {
  return packFields(SOFTMAX_BLOCKS_PARAMS_LAYOUT, {
    cols: p.cols, seq_q: p.seqQ, scale: p.scale, softcap: p.softcap, slice: p.slice, n_blocks: p.nBlocks,
  });
}

/**
 * Threadgroups of the two-pass form enough to fill an H100 or H200 several
 * times over (132 SMs, 4 to 8 resident each): slices grow while the grid
 * keeps at least this many.
 */
export const SOFTMAX_FILL_SLICES = 1056;

/**
 * Elements of a slice of the two-pass form: SOFTMAX_SLICE, doubled until a
 * row has at most SOFTMAX_MAX_SLICES, then doubled again while rows * the
 * slices a row keep at least SOFTMAX_FILL_SLICES threadgroups (longer
 * slices: fewer partials to merge and more loads in flight a threadgroup).
 */
export function softmaxSlice(cols: number, rows = 1): number {
  let slice = SOFTMAX_SLICE;
  while (Math.ceil(cols / slice) > SOFTMAX_MAX_SLICES) slice *= 2;
  while (rows * Math.ceil(cols / (2 * slice)) >= SOFTMAX_FILL_SLICES) slice *= 2;
  return slice;
}

/**
 * f32 elements of softmax's scratch: per row, ceil(cols /
 * SOFTMAX_GRID_MIN_SLICE) (max, sum) pairs (room for the slices of either
 * form), then, from the next 16-byte boundary, SOFTMAX_GRID_ROUNDS barrier
 * words of the one-dispatch form,
 * which must be zero the first time the scratch is given (a new buffer is
 * zero-filled) and which softmax leaves as it found them. Give softmax a
 * scratch of its own: another op writing those words makes the
 * one-dispatch form fall back to slower work (never to wrong results).
 */
export function softmaxScratchElements(rows: number, cols: number): number {
  return softmaxBarrierAt(rows, cols) + SOFTMAX_GRID_ROUNDS;
}

/** Where the barrier words start in softmax's scratch: after the pairs, at a 16-byte boundary. */
function softmaxBarrierAt(rows: number, cols: number): number {
  return Math.ceil(checkedProduct('softmax', 'scratch elements', rows, Math.ceil(cols / SOFTMAX_GRID_MIN_SLICE), 2) / 4) * 4;
}

/**
 * The one-dispatch form's shape: threadgroups, their threads, rows a round,
 * slices a row and their length, the vectors of a slice kept in threadgroup
 * memory, and the threadgroup memory's bytes.
 */
export interface SoftmaxGrid {
  blocks: number;
  threads: number;
  rowsPerRound: number;
  slices: number;
  slice: number;
  sharedVectors: number;
  sharedBytes: number;
}

/** Bytes of softmax_grid_<t>'s threadgroup(0) before the vectors it keeps there (32 floats, a word, padding). */
const SOFTMAX_GRID_RED_BYTES = 144;

/**
 * The one-dispatch form (softmax_grid_<t>) for these arguments, or null
 * where it does not run: it needs the device's multiprocessor count (CUDA;
 * one threadgroup of at most 1024 threads an SM, which the kernel's
 * __launch_bounds__(1024, 1) keeps resident: every block of the grid runs
 * at once, as its grid-wide wait needs), an output apart from the input,
 * and a row cut into at most that many slices of what a threadgroup holds,
 * in at most SOFTMAX_GRID_ROUNDS rounds. A threadgroup holds 4 vectors a
 * thread (2 with a mask) and, without a mask, as many more as the device's
 * threadgroup memory takes. Rows go in rounds of as many as the grid holds;
 * a round's rows are cut into as many slices as the grid has threadgroups
 * for them (no shorter than SOFTMAX_GRID_MIN_SLICE), and a threadgroup has
 * the threads to hold its slice at two vectors a thread (at least 64, at
 * most 1024), the rest of the slice in threadgroup memory.
 */
export function softmaxGrid(a: Pick<SoftmaxArgs, 'rows' | 'cols' | 'mask' | 'input' | 'output'>, limits: DeviceLimits): SoftmaxGrid | null {
  const blocks = Math.min(limits.multiprocessors, SOFTMAX_GRID_MAX_BLOCKS);
  if (!(blocks > 0) || limits.simdWidth !== 32 || overlaps(a.input, a.output)) return null;
  const vec = 16 / dtypeSize(a.input.dtype);
  const holdVectors = a.mask === undefined ? SOFTMAX_GRID_HOLD : SOFTMAX_GRID_HOLD_MASKED;
  const maxThreads = Math.min(1024, limits.maxThreadsPerThreadgroup);
  const sharedMax = a.mask === undefined ? Math.max(0, Math.floor((limits.maxThreadgroupMemory - SOFTMAX_GRID_RED_BYTES) / 16)) : 0;
  const fewest = Math.ceil(a.cols / ((holdVectors * maxThreads + sharedMax) * vec));
  if (fewest > blocks) return null;
  const rowsPerRound = Math.min(a.rows, Math.floor(blocks / fewest));
  if (Math.ceil(a.rows / rowsPerRound) > SOFTMAX_GRID_ROUNDS) return null;
  const want = Math.max(fewest, Math.min(Math.floor(blocks / rowsPerRound), Math.ceil(a.cols / SOFTMAX_GRID_MIN_SLICE)));
  const slice = Math.ceil(Math.ceil(a.cols / want) / vec) * vec;
  const threads = Math.min(maxThreads, Math.max(64, Math.ceil(slice / (2 * vec) / 32) * 32));
  const sharedVectors = Math.max(0, slice / vec - holdVectors * threads);
  const sharedBytes = SOFTMAX_GRID_RED_BYTES + 16 * sharedVectors;
  return { blocks, threads, rowsPerRound, slices: Math.ceil(a.cols / slice), slice, sharedVectors, sharedBytes };
}

/** True when the arguments need scale_mask_softmax (a scale, a softcap or a mask). */
function extended(a: SoftmaxArgs): boolean {
  return a.mask !== undefined || (a.scale !== undefined && a.scale !== 1) || (a.softcap !== undefined && a.softcap !== 0);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateSoftmax(a: SoftmaxArgs, device?: Device): void {
  const op = 'softmax';
  checkPositive(op, 'rows', a.rows);
  checkPositive(op, 'cols', a.cols);
  checkAtMost(op, 'rows', a.rows, U32_MAX, '2^32 - 1');
  checkAtMost(op, 'cols', a.cols, SOFTMAX_MAX_COLS, '2^24 (the params hold cols as an f32)');
  if (a.scale !== undefined && !Number.isFinite(a.scale)) throw invalid(op, 'scale', 'a finite number', a.scale);
  if (a.softcap !== undefined && (!Number.isFinite(a.softcap) || a.softcap < 0)) throw invalid(op, 'softcap', 'a finite number >= 0', a.softcap);
  const n = checkedProduct(op, 'rows * cols', a.rows, a.cols);
  checkBufferRules(op, [['input', a.input, ['f32', 'f16', 'bf16'], n], ['output', a.output, like('input'), n]], device);
  if (a.mask !== undefined) {
    const seqQ = a.seqQ as number;
    checkPositive(op, 'seqQ', seqQ);
    if (a.rows % seqQ !== 0) throw invalid(op, 'seqQ', `a divisor of rows (${a.rows})`, seqQ);
  }
  checkBufferRules(op, [
    ['mask', a.mask, 'bf16', a.mask === undefined ? 0 : (a.seqQ as number) * a.cols, true],
    ['scratch', a.scratch, 'f32', a.scratch === undefined ? 0 : softmaxScratchElements(a.rows, a.cols), true],
  ], device);
  // In place (output over exactly input) is safe: each thread reads only the
  // elements it writes. The mask, which other rows read, is not; nor the
  // scratch, which the first pass writes while others read the rows.
  checkNoAliasing(op, [['input', a.input], ['mask', a.mask], ['output', a.output], ['scratch', a.scratch]], ['output', 'scratch'],
    'a row of output over another row of input, the mask or the scratch', [['output', 'input']]);
}

/** Throws MlxError('InvalidArgument') naming the argument unless the arguments fit. */
export function validateSoftcap(a: SoftcapArgs, device?: Device): void {
  const op = 'softcap';
  if (typeof a.cap !== 'number' || !Number.isFinite(a.cap) || a.cap <= 0) throw invalid(op, 'cap', 'a finite number > 0', a.cap);
  checkBuffer(op, 'input', a.input, device);
  checkBuffer(op, 'output', a.output, device);
  checkDtype(op, 'input', a.input, ['f32', 'f16', 'bf16']);
  checkDtype(op, 'output', a.output, a.input.dtype);
  const n = a.input.elementCount;
  checkPositive(op, 'input.elementCount', n);
  checkAtMost(op, 'input.elementCount', n, SOFTCAP_MAX_ELEMENTS, '2^32 - 256');
  checkElements(op, 'output', a.output, n);
  checkNoAliasing(op, [['input', a.input], ['output', a.output]], ['output'], 'an element of output over another of input', [['output', 'input']]);
}

/**
 * The Metal threadgroup of a row (min(256, nextPow2(cols)), one float per
 * simdgroup), and the CUDA block of one row per block (rowLaunch): as few
 * threads as hold the row at 32 elements each, rounded up to 32, at most 1024.
 */
export function softmaxThreadgroup(cols: number, limits: LaunchLimits): {
  threads: number; sharedBytes: number; cudaThreads: number; cudaSharedBytes: number;
} {
  const { threads, sharedBytes } = rowThreadgroup(cols, SOFTMAX_MAX_THREADS, limits);
  const cudaThreads = rowBlockThreads(cols, limits);
  return { threads, sharedBytes, cudaThreads, cudaSharedBytes: roundUp16(Math.ceil(cudaThreads / limits.simdWidth) * 4) };
}

/**
 * The CUDA launch of the one-pass kernels: rowLaunch's, but where the rows
 * run one block each and are fewer than the device's multiprocessors, the
 * block has the threads to hold its row at 8 elements a thread (at most
 * 1024): fewer elements a thread shorten the row's serial work when the
 * GPU is mostly idle anyway (a decode step's heads).
 */
export function softmaxRowLaunch(rows: number, cols: number, elementBytes: number, limits: DeviceLimits): ReturnType<typeof rowLaunch> {
  const launch = rowLaunch(rows, cols, 16 / elementBytes, limits);
  if (launch === null || launch.threads[1] !== 1 || !(rows < limits.multiprocessors)) return launch;
  const threads = Math.min(limits.maxThreadsPerThreadgroup, 1024, Math.max(launch.threads[0], Math.ceil(cols / 8 / 32) * 32));
  return { grid: launch.grid, threads: [threads, 1, 1], threadgroupMemory: [roundUp16(Math.ceil(threads / 32) * 4)] };
}

/** A plan of the family's dispatches. */
function softmaxPlan(dispatches: PlannedDispatch[]): OpPlan {
  return { family: SOFTMAX_FAMILY, sources: SOFTMAX_SOURCES, kernels: SOFTMAX_KERNELS, dispatches };
}

/** Whether softmax runs its two-pass form for these arguments (see SoftmaxArgs.scratch). */
export function softmaxTwoPass(a: Pick<SoftmaxArgs, 'rows' | 'cols' | 'scratch'>): boolean {
  return a.scratch !== undefined && Math.ceil(a.cols / softmaxSlice(a.cols, a.rows)) > 1 && a.rows <= SOFTMAX_TWO_PASS_MAX_ROWS &&
    (a.rows < SOFTMAX_FILL_ROWS || a.cols > SOFTMAX_HELD_COLS);
}

/**
 * softmax over rows: v = c(x * scale) + mask[r % seqQ] with c(s) = softcap *
 * tanh(s / softcap) when softcap > 0; y[r, i] = exp(v[r, i] - max_r) /
 * sum_j exp(v[r, j] - max_r); a row whose every v is -inf gives zeros. Sums in f32.
 *
 * Layouts: input, output [rows, cols], one dtype: f32, f16 or bf16; mask
 * [seqQ, cols] bf16, shared by the rows r with one r % seqQ (heads of
 * [heads, seqQ, cols] scores). output may be input's buffer. scratch f32
 * [rows, n_blocks, 2] (softmaxScratchElements), optional.
 *
 * One pass (mlx-native's): softmax_<dtype> (no scale, softcap or mask),
 * else scale_mask_softmax_<dtype>. Bindings: softmax_<t> 0 input, 1 output,
 * 2 SoftmaxParams (cols as f32, 0); scale_mask_softmax_<t> 0 input, 1
 * output, 2 mask (input bound in its place when absent, seq_q 0), 3
 * ScaleMaskSoftmaxParams. threadgroup(0) one float per simdgroup. Grid:
 * (rows, 1, 1) threadgroups of min(256, nextPow2(cols)) threads; the CUDA
 * twin's launch is sized to the row (rowLaunch: rows of up to 32 lanes
 * where cols <= 1024, else a block of about cols / 32 threads, at most 1024).
 * The bytes that must move: input read and output written once, 2 * rows *
 * cols * the element size (and the mask's rows).
 *
 * Two passes (softmaxTwoPass: scratch given, more than one slice of
 * softmaxSlice(cols) elements a row, and rows < SOFTMAX_FILL_ROWS or cols >
 * SOFTMAX_HELD_COLS): softmax_blocks_<dtype> (0 input, 1 mask or input, 2
 * scratch, 3 SoftmaxBlocksParams) writes each slice's max and sum of
 * exp(v - max); softmax_finish_<dtype> (0 input, 1 mask or input, 2
 * scratch, 3 output, 4 SoftmaxBlocksParams) merges a row's pairs and writes
 * the slice. Both grid (n_blocks, rows, 1) of 256 threads, threadgroup(0)
 * one float per simdgroup. The input is read twice (the second time from L2
 * where it still is): up to 3 * rows * cols * the element size.
 *
 * One dispatch (where the two passes would run, softmaxGrid gives a shape:
 * CUDA, output apart from input): softmax_grid_<dtype> (0 input, 1 mask or
 * input, 2 scratch, 3 output, 4 SoftmaxGridParams), grid (the SM count, 1,
 * 1) of 64 to 1024 threads, threadgroup(0) 144 bytes (32 floats, a word)
 * and the vectors kept there. Rows go in rounds; each block holds
 * its slice of a round's rows in registers and threadgroup memory,
 * publishes the slice's (max, sum), waits on the round's barrier word for
 * the grid's other blocks (all resident), merges its row's pairs and writes
 * its slice: the input read once, 2 * rows * cols * the element size.
 */
export function softmax(enc: Encoder, args: SoftmaxArgs): void {
  record(enc, planSoftmax(args, enc.device.limits, enc.device));
}

/** softmax's plan: validates, then one dispatch, or two (see softmax). */
export function planSoftmax(a: SoftmaxArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateSoftmax(a, device);
  const ext = extended(a);
  const seqQ = a.mask === undefined ? 0 : a.seqQ!;
  const scale = a.scale ?? 1;
  const softcap = a.softcap ?? 0;
  const grid = softmaxTwoPass(a) ? softmaxGrid(a, limits) : null;
  if (grid !== null) {
    const params = packSoftmaxGridParams({
      cols: a.cols, seqQ, scale, softcap, rows: a.rows, rowsPerRound: grid.rowsPerRound, slices: grid.slices, slice: grid.slice,
      barrier: softmaxBarrierAt(a.rows, a.cols), sharedVectors: grid.sharedVectors,
    });
    return softmaxPlan([{
      kernel: `softmax_grid_${a.input.dtype}`,
      buffers: [a.input, a.mask ?? a.input, a.scratch, a.output],
      bytes: [, , , , params],
      grid: [grid.blocks, 1, 1],
      threads: [grid.threads, 1, 1],
      threadgroupMemory: [grid.sharedBytes],
    }]);
  }
  if (softmaxTwoPass(a)) {
    const slice = softmaxSlice(a.cols, a.rows);
    const nBlocks = Math.ceil(a.cols / slice);
    const params = packSoftmaxBlocksParams({ cols: a.cols, seqQ, scale, softcap, slice, nBlocks });
    const threads = Math.min(SOFTMAX_BLOCK_THREADS, limits.maxThreadsPerThreadgroup);
    const launch = {
      grid: [nBlocks, a.rows, 1] as [number, number, number],
      threads: [threads, 1, 1] as [number, number, number],
      threadgroupMemory: [roundUp16(Math.ceil(threads / limits.simdWidth) * 4)],
    };
    const mask = a.mask ?? a.input;
    return softmaxPlan([
      { kernel: `softmax_blocks_${a.input.dtype}`, buffers: [a.input, mask, a.scratch], bytes: [, , , params], ...launch },
      { kernel: `softmax_finish_${a.input.dtype}`, buffers: [a.input, mask, a.scratch, a.output], bytes: [, , , , params], ...launch },
    ]);
  }
  const { threads, sharedBytes } = softmaxThreadgroup(a.cols, limits);
  const cuda = softmaxRowLaunch(a.rows, a.cols, dtypeSize(a.input.dtype), limits);
  const launch = {
    grid: [a.rows, 1, 1] as [number, number, number],
    threads: [threads, 1, 1] as [number, number, number],
    threadgroupMemory: [sharedBytes],
    ...(cuda === null ? {} : { cuda }),
  };
  return softmaxPlan([ext
    ? {
      kernel: `scale_mask_softmax_${a.input.dtype}`,
      buffers: [a.input, a.output, a.mask ?? a.input],
      bytes: [, , , packScaleMaskSoftmaxParams({ cols: a.cols, seqQ, scale, softcap })],
      ...launch,
    }
    : {
      kernel: `softmax_${a.input.dtype}`,
      buffers: [a.input, a.output],
      bytes: [, , packSoftmaxParams(a)],
      ...launch,
    }]);
}

/**
 * softcap: y[i] = cap * tanh(x[i] / cap), bounding values to (-cap, cap)
 * (Gemma's final logit softcap, cap 30). Arithmetic in f32.
 *
 * Layouts: input, output of n elements (any shape), one dtype: f32, f16 or
 * bf16; output may be input's buffer.
 * Kernels: softcap_<dtype>. Bindings: 0 input, 1 output, 2 SoftcapParams (cap, n as u32).
 * Grid: (ceil(n / 256), 1, 1) threadgroups of min(256, n) threads, one
 * element each; the CUDA twin gives each thread one 16-byte vector.
 */
export function softcap(enc: Encoder, args: SoftcapArgs): void {
  record(enc, planSoftcap(args, enc.device.limits, enc.device));
}

/** softcap's plan: validates, then one dispatch (see softcap). */
export function planSoftcap(a: SoftcapArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateSoftcap(a, device);
  const n = a.input.elementCount;
  const threads = Math.min(SOFTCAP_THREADS, n, limits.maxThreadsPerThreadgroup);
  const vec = 16 / (a.input.dtype === 'f32' ? 4 : 2);
  return softmaxPlan([{
    kernel: `softcap_${a.input.dtype}`,
    buffers: [a.input, a.output],
    bytes: [, , packSoftcapParams({ cap: a.cap, n })],
    grid: [Math.ceil(n / threads), 1, 1],
    threads: [threads, 1, 1],
    cuda: { grid: [Math.ceil(n / (SOFTCAP_THREADS * vec)), 1, 1], threads: [SOFTCAP_THREADS, 1, 1] },
  }]);
}
