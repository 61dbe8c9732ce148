// softmax: softmax over rows, with an optional scale, softcap and additive
// bf16 mask; and softcap on its own. Kernel names, bindings and params bytes
// are mlx-native's (src/ops/softmax.rs, scale_mask_softmax.rs, softcap.rs),
// with scale_mask_softmax in f16 and bf16 and its pad word holding the softcap;
// and, not in the crate (added in its style), for rows too long or too few
// to fill the GPU one threadgroup per row, a two-pass form over a scratch
// buffer the caller gives and, on CUDA, a streamed form of one dispatch
// (with that scratch or the encoder's words). Kernels: shaders/softmax.metal
// and shaders/cuda/softmax.cu.

import src from '../../shaders/softmax.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/softmax.cu' with { type: 'text' };
import header from '../../shaders/softmax.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import {
  checkAtMost, checkBuffer, checkBufferRules, checkDtype, checkElements, checkNoAliasing, checkPositive, checkedProduct, invalid, like, overlaps,
} from '../validate.ts';
import { dtypeSize } from '../dtype.ts';
import { ROW_HELD, roundUp16, rowBlockThreads, rowLaunch, rowThreadgroup, type LaunchLimits } from '../launch.ts';
import { record, type OpPlan } from '../plan.ts';

export const SOFTMAX_FAMILY = 'softmax';
/** The family's kernel sources by backend, as registered by every dispatch. */
export const SOFTMAX_SOURCES = familySources(SOFTMAX_FAMILY, { header, metal: src, cuda: cudaSrc });
export const SOFTMAX_KERNELS = [
  'softmax_f32', 'softmax_f16', 'softmax_bf16',
  'scale_mask_softmax_f32', 'scale_mask_softmax_f16', 'scale_mask_softmax_bf16',
  'softcap_f32', 'softcap_f16', 'softcap_bf16',
  'softmax_blocks_f32', 'softmax_blocks_f16', 'softmax_blocks_bf16',
  'softmax_finish_f32', 'softmax_finish_f16', 'softmax_finish_bf16',
  'softmax_stream_f32', 'softmax_stream_f16', 'softmax_stream_bf16',
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
/**
 * Elements a thread of the CUDA scale_mask_softmax holds (its launch gives a
 * row cols / 16 threads): 16, half softmax's, since it holds the mask's words
 * beside x's within 64 registers; rows past 16384 are read twice.
 */
export const SOFTMAX_EXT_HELD = 16;
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
/** struct SoftmaxStreamParams (softmax_stream_<t> buffer 4). */
export const SOFTMAX_STREAM_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'SoftmaxStreamParams');
/** Threads of a softmax_stream block (half for a few rows: softmaxStream); each holds SOFTMAX_STREAM_HELD 16-byte vectors of its slice. */
export const SOFTMAX_STREAM_THREADS = 256;
/** The CUDA kernel's STREAM_HELD: a slice is 256 x 8 vectors (8192 f32, 16384 f16 or bf16 elements, 32 KB). */
export const SOFTMAX_STREAM_HELD = 8;
/**
 * The encoder's working words (Encoder._scratchWords) the streamed form
 * takes for its partials where the caller gives no scratch, at most (4 MiB):
 * rows needing more run in one pass.
 */
export const SOFTMAX_STREAM_WORDS_MAX = 2 ** 20;
/** softmax_stream blocks resident an SM (its launch bounds: 256 threads, 4 blocks, 64 registers). */
export const SOFTMAX_STREAM_BLOCKS_PER_SM = 4;

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
   * f32 of softmaxScratchElements(rows, cols): given, rows of more than one
   * slice run in two passes where one threadgroup per row would leave the
   * GPU idle (fewer than SOFTMAX_FILL_ROWS rows) or re-read the row anyway
   * (cols > SOFTMAX_HELD_COLS). Not over input, output or the mask. On
   * CUDA the streamed form (softmaxStream) takes those rows in one dispatch
   * with or without it.
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
export function packSoftmaxStreamParams(p: { cols: number; rows: number; scale: number; slice: number; nBlocks: number }): Uint8Array {
  return packFields(SOFTMAX_STREAM_PARAMS_LAYOUT, { cols: p.cols, rows: p.rows, scale: p.scale, slice: p.slice, n_blocks: p.nBlocks });
}
export function packSoftcapParams(p: { cap: number; n: number }): Uint8Array {
  return packFields(SOFTCAP_PARAMS_LAYOUT, { cap: p.cap, n_elements: p.n });
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

/** f32 elements of softmax's scratch: per row and slice (softmaxSlice(cols, rows)), its (max, sum). */
export function softmaxScratchElements(rows: number, cols: number): number {
  return checkedProduct('softmax', 'scratch elements', rows, Math.ceil(cols / softmaxSlice(cols, rows)), 2);
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
    checkBuffer(op, 'mask', a.mask, device);
    checkDtype(op, 'mask', a.mask, 'bf16');
    checkElements(op, 'mask', a.mask, seqQ * a.cols);
  }
  if (a.scratch !== undefined) {
    checkBuffer(op, 'scratch', a.scratch, device);
    checkDtype(op, 'scratch', a.scratch, 'f32');
    checkElements(op, 'scratch', a.scratch, softmaxScratchElements(a.rows, a.cols));
  }
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
 * Whether rows of this shape are better split in slices over several
 * threadgroups (the two-pass and streamed forms) than one threadgroup a row:
 * more than one slice a row, and fewer rows than fill the GPU or rows too
 * long to hold.
 */
function softmaxSliced(a: Pick<SoftmaxArgs, 'rows' | 'cols'>): boolean {
  return Math.ceil(a.cols / softmaxSlice(a.cols, a.rows)) > 1 && a.rows <= SOFTMAX_TWO_PASS_MAX_ROWS &&
    (a.rows < SOFTMAX_FILL_ROWS || a.cols > SOFTMAX_HELD_COLS);
}

/** Whether softmax runs its two-pass form for these arguments (see SoftmaxArgs.scratch). */
export function softmaxTwoPass(a: Pick<SoftmaxArgs, 'rows' | 'cols' | 'scratch'>): boolean {
  return a.scratch !== undefined && softmaxSliced(a);
}

/**
 * The streamed form's shape where softmax runs it (CUDA, instead of the two
 * passes, or the one pass where no scratch is given): the two-pass form's
 * shapes, no mask and no softcap (held in 64 registers, its tanh would
 * spill), output not over input, and rows of at most
 * SOFTMAX_STREAM_BLOCKS_PER_SM x SMs slices whose partials fit the scratch
 * (without one, SOFTMAX_STREAM_WORDS_MAX of the encoder's words); else null. Slices of SOFTMAX_STREAM_THREADS x SOFTMAX_STREAM_HELD
 * 16-byte vectors, one block per slice up to every block an SM holds; where
 * those slices would fill at most a quarter of the SMs, blocks of half the
 * threads and slices of half the length.
 */
export function softmaxStream(a: Pick<SoftmaxArgs, 'input' | 'output' | 'rows' | 'cols' | 'scratch' | 'mask' | 'softcap'>, limits: DeviceLimits):
  { slice: number; nBlocks: number; blocks: number; threads: number } | null {
  if (limits.multiprocessors <= 0 || a.mask !== undefined || (a.softcap ?? 0) !== 0 || !softmaxSliced(a) || overlaps(a.output, a.input)) return null;
  const perThread = SOFTMAX_STREAM_HELD * (16 / dtypeSize(a.input.dtype));
  // Where the slices of 256 threads would fill at most a quarter of the SMs
  // (one vocabulary row), blocks of 128 and half the slice, so twice the SMs
  // read the row; from two such rows on, the longer slices are faster
  // (measured: bench/results/softmax-rows-h100-2026-11-26.md).
  const threads = 4 * a.rows * Math.ceil(a.cols / (SOFTMAX_STREAM_THREADS * perThread)) <= limits.multiprocessors
    ? SOFTMAX_STREAM_THREADS / 2 : SOFTMAX_STREAM_THREADS;
  const slice = threads * perThread;
  const nBlocks = Math.ceil(a.cols / slice);
  const resident = SOFTMAX_STREAM_BLOCKS_PER_SM * limits.multiprocessors;
  const partials = a.rows * nBlocks * 2;
  if (nBlocks > resident || partials > (a.scratch === undefined ? SOFTMAX_STREAM_WORDS_MAX : a.scratch.elementCount)) return null;
  return { slice, nBlocks, blocks: Math.min(a.rows * nBlocks, resident), threads };
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
 * where cols <= 1024 (512 for scale_mask_softmax), else a block of about
 * cols / 32 threads (cols / 16: SOFTMAX_EXT_HELD), at most 1024; softmax_<t>
 * with fewer rows than SMs: a block of one 16-byte vector a thread).
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
 * Streamed (CUDA, where softmaxStream gives a shape: the two-pass shapes
 * without a mask or softcap, output not over input, with or without a
 * scratch): one dispatch, softmax_stream_<dtype> (0 input, 1 the scratch,
 * or without one words of the encoder's (Encoder._scratchWords), 2 output,
 * 3 a word a row of the encoder's (Encoder._syncWords), 4
 * SoftmaxStreamParams), grid (blocks, 1, 1) of 256 threads (128 for a few
 * rows: softmaxStream), every block resident, threadgroup(0) one float per
 * simdgroup and one more. Each block holds a slice, writes its pair, waits
 * for its row's other slices at the row's word, merges the pairs and
 * writes the slice: the input is read once.
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
  const stream = softmaxStream(a, limits);
  if (stream !== null) {
    const { slice, nBlocks, blocks, threads } = stream;
    return {
      family: SOFTMAX_FAMILY,
      sources: SOFTMAX_SOURCES,
      kernels: SOFTMAX_KERNELS,
      dispatches: [{
        kernel: `softmax_stream_${a.input.dtype}`,
        buffers: [a.input, a.scratch, a.output],
        bytes: [, , , , packSoftmaxStreamParams({ cols: a.cols, rows: a.rows, scale, slice, nBlocks })],
        syncWords: { binding: 3, count: a.rows },
        // Without the caller's scratch, the partials in the encoder's words.
        ...(a.scratch === undefined ? { scratchWords: { binding: 1, count: a.rows * nBlocks * 2 } } : {}),
        grid: [blocks, 1, 1],
        threads: [threads, 1, 1],
        threadgroupMemory: [roundUp16((Math.ceil(threads / limits.simdWidth) + 1) * 4)],
      }],
    };
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
    return {
      family: SOFTMAX_FAMILY,
      sources: SOFTMAX_SOURCES,
      kernels: SOFTMAX_KERNELS,
      dispatches: [
        { kernel: `softmax_blocks_${a.input.dtype}`, buffers: [a.input, mask, a.scratch], bytes: [, , , params], ...launch },
        { kernel: `softmax_finish_${a.input.dtype}`, buffers: [a.input, mask, a.scratch, a.output], bytes: [, , , , params], ...launch },
      ],
    };
  }
  const { threads, sharedBytes } = softmaxThreadgroup(a.cols, limits);
  // scale_mask_softmax keeps SOFTMAX_EXT_HELD elements a thread for fewer
  // rows than SMs too (no spread to one vector a thread): its work an element
  // (the tanh, the mask) outweighs the depth of a thread's loads. H100, one
  // decode token's [32x1, 8192] scores: 4.76 us at 512 threads, 5.07 at 1024
  // (bench/results/glue-h100-2026-11-26b.md).
  const cuda = rowLaunch(a.rows, a.cols, 16 / dtypeSize(a.input.dtype), limits, ext ? 0 : limits.multiprocessors, ext ? SOFTMAX_EXT_HELD : ROW_HELD);
  const launch = {
    grid: [a.rows, 1, 1] as [number, number, number],
    threads: [threads, 1, 1] as [number, number, number],
    threadgroupMemory: [sharedBytes],
    ...(cuda === null ? {} : { cuda }),
  };
  return {
    family: SOFTMAX_FAMILY,
    sources: SOFTMAX_SOURCES,
    kernels: SOFTMAX_KERNELS,
    dispatches: [ext
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
      }],
  };
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
  return {
    family: SOFTMAX_FAMILY,
    sources: SOFTMAX_SOURCES,
    kernels: SOFTMAX_KERNELS,
    dispatches: [{
      kernel: `softcap_${a.input.dtype}`,
      buffers: [a.input, a.output],
      bytes: [, , packSoftcapParams({ cap: a.cap, n })],
      grid: [Math.ceil(n / threads), 1, 1],
      threads: [threads, 1, 1],
      cuda: { grid: [Math.ceil(n / (SOFTCAP_THREADS * vec)), 1, 1], threads: [SOFTCAP_THREADS, 1, 1] },
    }],
  };
}

// ---- the float64 reference ----

// CPU reference of softmax and softcap: float64 arithmetic.

/** cap * tanh(x / cap), elementwise. */
export function softcapRef(x: ArrayLike<number>, cap: number): Float64Array {
  const y = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) y[i] = cap * Math.tanh(x[i]! / cap);
  return y;
}

/**
 * Softmax of rows of cols over v = c(x * scale) + mask[r % seqQ], c(s) =
 * softcap * tanh(s / softcap) when softcap > 0; a row whose every v is -inf
 * gives zeros.
 */
export function softmaxRef(x: ArrayLike<number>, rows: number, cols: number,
  opts: { scale?: number; softcap?: number; mask?: ArrayLike<number>; seqQ?: number } = {}): Float64Array {
  const scale = opts.scale ?? 1;
  const cap = opts.softcap ?? 0;
  const seqQ = opts.seqQ ?? rows;
  const y = new Float64Array(rows * cols);
  const v = new Float64Array(cols);
  for (let r = 0; r < rows; r++) {
    let m = -Infinity;
    for (let i = 0; i < cols; i++) {
      let t = x[r * cols + i]! * scale;
      if (cap > 0) t = cap * Math.tanh(t / cap);
      if (opts.mask !== undefined) t += opts.mask[(r % seqQ) * cols + i]!;
      v[i] = t;
      m = Math.max(m, t);
    }
    if (m === -Infinity) continue;
    let s = 0;
    for (let i = 0; i < cols; i++) s += Math.exp(v[i]! - m);
    for (let i = 0; i < cols; i++) y[r * cols + i] = Math.exp(v[i]! - m) / s;
  }
  return y;
}
