// chunk_gated_delta_rule: the chunked forward of the gated delta rule
// (Qwen3.5/3.6 linear attention; arXiv 2412.06464 section 4, FLA's
// chunk_gated_delta_rule) from q, k, v, g, beta to o and the final state, as
// one op (chunkGatedDeltaRule) over its steps, each also an op of its own.
//
// Chunks are 64 tokens from each sequence's start; a sequence's last chunk
// may be short (masked, never refused), and chunks never straddle sequences.
// Tokens are flat over all sequences: B sequences of T tokens, or, with
// cuSeqlens, one batch of variable-length sequences (as FLA's varlen).
// chunkGatedDeltaRuleLayout builds the two u32 tables that the step kernels
// read: chunks [nt] (first token, length) and seqs [nSeq + 1] (first token,
// first chunk, then the totals).
//
// The family also holds the two entries of the seed's host code (mlx-native),
// kept with their names, bindings and params: chunkLocalCumsum
// (chunk_local_cumsum_g_f32, B sequences of T tokens, any chunk size) and
// gatedDeltaNetChunk (gated_delta_net_chunk_inter_state_bf16, K = 128, T a
// multiple of 64). Their kernels run the same code as the varlen steps.

import metalSource from '../../shaders/chunk_gated_delta_rule.metal' with { type: 'text' };
import cudaSrc from '../../shaders/cuda/chunk_gated_delta_rule.cu' with { type: 'text' };
import header from '../../shaders/chunk_gated_delta_rule.h' with { type: 'text' };
import type { Buffer } from '../buffer.ts';
import type { Device, DeviceLimits } from '../device.ts';
import { type DType, bf16BitsToF32, f32ToBf16Bits } from '../dtype.ts';
import type { Dim3, Encoder } from '../encoder.ts';
import {
  checkAtMost, checkBufferRules, checkedProduct, checkedU32Product, checkEachBuffer, checkMultiple, checkNoAliasing, checkPositive, checkU32Count, invalid,
  U32_MAX,
} from '../validate.ts';
import { packFields, structLayout, type ParamField } from '../params.ts';
import { familySources } from '../registry.ts';
import { familyPlans, opShape, record, type CudaLaunch, type OpPlan, type OpShape, type PlannedDispatch } from '../plan.ts';
import type { GatedDeltaNetRefDims } from './gated_delta_net.ts';

const OP = 'chunk_gated_delta_rule';
const FAMILY = 'chunk_gated_delta_rule';
const CUMSUM = 'chunk_local_cumsum_varlen_g_f32';
const KKT = 'gated_delta_net_kkt_bf16';
const KKT_BETA_BF16 = 'gated_delta_net_kkt_bf16_beta_bf16';
const SOLVE = 'chunk_tri_solve_invert_f32';
const WU = 'gated_delta_net_recompute_wu_bf16';
const WU_BETA_BF16 = 'gated_delta_net_recompute_wu_bf16_beta_bf16';
const KKT_SOLVE_WU = 'gated_delta_net_kkt_solve_wu_bf16';
const KKT_SOLVE_WU_BETA_BF16 = 'gated_delta_net_kkt_solve_wu_bf16_beta_bf16';
const INTER_K64 = 'gated_delta_net_chunk_inter_state_k64_bf16';
const INTER_K128 = 'gated_delta_net_chunk_inter_state_k128_bf16';
const INTER_K256 = 'gated_delta_net_chunk_inter_state_k256_bf16';
const CHUNK_O = 'gated_delta_net_chunk_o_bf16';
const SEED_CUMSUM = 'chunk_local_cumsum_g_f32';
const SEED_INTER = 'gated_delta_net_chunk_inter_state_bf16';
export const CHUNK_GATED_DELTA_RULE_KERNELS = [
  CUMSUM, KKT, KKT_BETA_BF16, SOLVE, WU, WU_BETA_BF16, KKT_SOLVE_WU, KKT_SOLVE_WU_BETA_BF16, INTER_K64, INTER_K128, INTER_K256, CHUNK_O, SEED_CUMSUM, SEED_INTER,
] as const;
/** The family's sources by backend (the cuda file has the same entry points and bindings; grids as each plan's cuda launch says). */
export const CHUNK_GATED_DELTA_RULE_SOURCES = familySources(FAMILY, { header, metal: metalSource, cuda: cudaSrc });
const planOf = familyPlans({ family: FAMILY, sources: CHUNK_GATED_DELTA_RULE_SOURCES, kernels: CHUNK_GATED_DELTA_RULE_KERNELS });

/** Tokens per chunk, fixed in every kernel. */
export const GDR_BT = 64;
/** Head dimensions of q and k that the inter-state kernels are instantiated for. */
export const GDR_K_VALUES: readonly number[] = [64, 128, 256];
/** V is tiled by 64 in chunk_o. */
export const GDR_V_MULTIPLE = 64;
export const GDR_MAX_V = 256;
/** The inter-state kernel of a head dimension K (one of GDR_K_VALUES). */
function interStateKernel(k: number): string {
  return k === 64 ? INTER_K64 : k === 128 ? INTER_K128 : INTER_K256;
}
/** V rows of the state per inter-state threadgroup, by K: 32 x K f32 must leave room for staging in 32 KiB. */
export function interStateBv(k: number): number {
  return k === 256 ? 16 : 32;
}

/**
 * Dynamic shared memory of the CUDA walk at K 128: its ring of two chunks'
 * k and w rows [64][136], u rows [64][40] bf16 and g [64] f32 (InterRing<128, 32, 2>).
 */
export const GDR_INTER_RING_BYTES = 2 * (2 * GDR_BT * 136 * 2 + GDR_BT * 40 * 2 + GDR_BT * 4);
/** A slot of InterRingWg: w rows [64][128], k rows [64][136], u rows [64][40] bf16, g [64] f32, rounded up to whole KB. */
const GDR_INTER_WG_SLOT = Math.ceil((GDR_BT * 128 * 2 + GDR_BT * 136 * 2 + GDR_BT * 40 * 2 + GDR_BT * 4) / 1024) * 1024;
/**
 * Dynamic shared memory of the CUDA walk on warpgroup products (GDR_INTER_WG_BYTES
 * of shaders/cuda/chunk_gated_delta_rule.cu): 1024 bytes to align, hb [32][128]
 * and stage [32][64] bf16, then two InterRingWg slots.
 */
export const GDR_INTER_WG_BYTES = 1024 + 32 * 128 * 2 + 32 * GDR_BT * 2 + 2 * GDR_INTER_WG_SLOT;
/**
 * The same with three slots (GDR_INTER_WG3_BYTES of the .cu): the walk copies
 * two chunks ahead. Taken where the grid has at most a block an SM, which
 * then loses no occupancy to the third slot.
 */
export const GDR_INTER_WG3_BYTES = 1024 + 32 * 128 * 2 + 32 * GDR_BT * 2 + 3 * GDR_INTER_WG_SLOT;
/** The ring forms' offsets inside a chunk (64 rows of k, w, u and v_new) are 32-bit: 64 H max(K, V) under 2^31. */
function ringOffsetsFit(nHeads: number, kDim: number, vDim: number): boolean {
  return GDR_BT * nHeads * Math.max(kDim, vDim) < 2 ** 31;
}
/**
 * Whether the K 128 walk runs on warpgroup products (sm_90a's wgmma): on
 * compute capability 9.0 with room for GDR_INTER_WG_BYTES, where a chunk's
 * rows fit the ring's 32-bit offsets.
 */
export function interStateUsesWgmma(nHeads: number, kDim: number, vDim: number,
  limits: Pick<DeviceLimits, 'computeCapability' | 'maxThreadgroupMemory'>): boolean {
  return kDim === 128 && limits.computeCapability === 90 && GDR_INTER_WG_BYTES <= limits.maxThreadgroupMemory &&
    ringOffsetsFit(nHeads, kDim, vDim);
}
/**
 * The warpgroup walk's shared memory for a grid of `blocks`: three slots
 * (GDR_INTER_WG3_BYTES) where the grid has at most a block an SM and they
 * fit, else two (GDR_INTER_WG_BYTES, two blocks an SM).
 */
export function interStateWgBytes(blocks: number, limits: Pick<DeviceLimits, 'maxThreadgroupMemory' | 'multiprocessors'>): number {
  return blocks <= limits.multiprocessors && GDR_INTER_WG3_BYTES <= limits.maxThreadgroupMemory ? GDR_INTER_WG3_BYTES : GDR_INTER_WG_BYTES;
}
/**
 * The CUDA launch of the walk at K 128 (shaders/cuda/chunk_gated_delta_rule.cu),
 * 8 warps a block of 32 V rows: on warpgroup products (_wg, interStateWgBytes)
 * where interStateUsesWgmma; else on mma.sync with its operands through the
 * ring of GDR_INTER_RING_BYTES; the 8-warp form without the ring (_ws8) where
 * a chunk's rows do not fit 32-bit offsets.
 */
export function interStateK128Cuda(nHeads: number, kDim: number, vDim: number, nSeq: number,
  limits: Pick<DeviceLimits, 'computeCapability' | 'maxThreadgroupMemory' | 'multiprocessors'>): CudaLaunch {
  const grid: Dim3 = [vDim / 32, nHeads, nSeq];
  if (interStateUsesWgmma(nHeads, kDim, vDim, limits)) {
    const bytes = interStateWgBytes(grid[0] * grid[1] * grid[2], limits);
    return { grid, threads: [256, 1, 1], threadgroupMemory: { 0: bytes }, entry: 'gated_delta_net_chunk_inter_state_k128_wg_bf16' };
  }
  if (ringOffsetsFit(nHeads, kDim, vDim)) {
    return { grid, threads: [256, 1, 1], threadgroupMemory: { 0: GDR_INTER_RING_BYTES } };
  }
  return { grid, threads: [256, 1, 1], entry: 'gated_delta_net_chunk_inter_state_k128_ws8_bf16' };
}

/** struct ChunkGatedDeltaRuleParams of shaders/chunk_gated_delta_rule.metal, bound last by every step kernel there. */
export const CHUNK_GATED_DELTA_RULE_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'ChunkGatedDeltaRuleParams');

/** Chunks of a sequence of seqLen tokens: ceil(seqLen / bt). */
export function numChunks(p: { seqLen: number; bt: number }): number {
  return Math.ceil(p.seqLen / p.bt);
}

/** Shape of the step ops: tokens and chunks over all sequences, heads and head dimensions. */
export interface GdrStepParams {
  /** Tokens over all sequences. */
  nTok: number;
  /** Chunks over all sequences. */
  nt: number;
  /** Sequences. */
  nSeq: number;
  /** K heads Hg (of q and k). */
  nQkHeads: number;
  /** V heads H, a multiple of nQkHeads. */
  nHeads: number;
  /** Head dimension K of q and k: 64, 128 or 256. */
  kDim: number;
  /** Head dimension V of v: a multiple of 64, at most 256. */
  vDim: number;
  /** Scale of q . k (chunk_o only; default 1 / sqrt(kDim)). */
  scale?: number;
}

export function packChunkGatedDeltaRuleParams(p: GdrStepParams): Uint8Array {
  return packFields(CHUNK_GATED_DELTA_RULE_PARAMS_LAYOUT, {
    n_tok: p.nTok, nt: p.nt, n_seq: p.nSeq, hg: p.nQkHeads, h: p.nHeads, k: p.kDim, v: p.vDim,
    scale: p.scale ?? 1 / Math.sqrt(p.kDim),
  });
}

/** The chunk tables of one call. */
export interface GdrChunkLayout {
  nTok: number;
  nSeq: number;
  nt: number;
  /** [nt, 2]: first token, length (1..64) of each chunk. */
  chunks: Uint32Array;
  /** [nSeq + 1, 2]: first token, first chunk of each sequence, then (nTok, nt). */
  seqs: Uint32Array;
}

/**
 * The chunk tables of `batch` sequences of seqLen tokens, or, with cuSeqlens
 * (batch = 1), of the sequences between consecutive offsets (0 =
 * cuSeqlens[0] < ... < cuSeqlens[n] = seqLen, so every sequence has at least
 * one token). The checks before the tables are O(1); the tables take
 * O(nSeq + nt) time and memory, nt <= batch * seqLen, which
 * chunkGatedDeltaRule bounds first by its buffers.
 */
export function chunkGatedDeltaRuleLayout(batch: number, seqLen: number, cuSeqlens?: ArrayLike<number>): GdrChunkLayout {
  const b = batch, t = seqLen;
  checkPositive(OP, 'batch', b);
  checkPositive(OP, 'seqLen', t);
  const nTok = checkedU32Product(OP, 'batch * seqLen', b, t);
  let offset: (s: number) => number;
  let nSeq: number;
  if (cuSeqlens === undefined) {
    nSeq = b;
    offset = (s) => s * t;
  } else {
    nSeq = checkCuSeqlensLength(b, t, cuSeqlens);
    const offsets = cuSeqlens;
    if (offsets[0] !== 0) throw invalid(OP, 'cuSeqlens[0]', '0', offsets[0]);
    for (let i = 1; i <= nSeq; i++) {
      const x = offsets[i]!;
      if (!Number.isSafeInteger(x) || x <= offsets[i - 1]!) {
        throw invalid(OP, `cuSeqlens[${i}]`, `an integer above cuSeqlens[${i - 1}] = ${offsets[i - 1]} (sequences are not empty)`, x);
      }
    }
    if (offsets[nSeq] !== t) throw invalid(OP, `cuSeqlens[${nSeq}]`, `seqLen = ${t}`, offsets[nSeq]);
    offset = (s) => offsets[s]!;
  }
  let nt = 0;
  for (let s = 0; s < nSeq; s++) nt += Math.ceil((offset(s + 1) - offset(s)) / GDR_BT);
  const chunks = new Uint32Array(2 * nt);
  const seqs = new Uint32Array(2 * (nSeq + 1));
  let c = 0;
  for (let s = 0; s < nSeq; s++) {
    const start = offset(s);
    const end = offset(s + 1);
    seqs[2 * s] = start;
    seqs[2 * s + 1] = c;
    for (let t0 = start; t0 < end; t0 += GDR_BT) {
      chunks[2 * c] = t0;
      chunks[2 * c + 1] = Math.min(GDR_BT, end - t0);
      c++;
    }
  }
  seqs[2 * nSeq] = nTok;
  seqs[2 * nSeq + 1] = nt;
  return { nTok, nSeq, nt, chunks, seqs };
}

/**
 * The sequences of cuSeqlens, checked in O(1): batch = 1, an array-like of 2
 * to seqLen + 1 offsets (at most seqLen sequences, none empty). Its contents
 * are checked by chunkGatedDeltaRuleLayout.
 */
function checkCuSeqlensLength(b: number, t: number, cuSeqlens: ArrayLike<number>): number {
  if (b !== 1) throw invalid(OP, 'batch', '1 when cuSeqlens is given (the sequences are concatenated along seqLen)', b);
  if (typeof cuSeqlens !== 'object' || cuSeqlens === null || !Number.isSafeInteger(cuSeqlens.length)) {
    throw invalid(OP, 'cuSeqlens', 'an array of offsets', cuSeqlens);
  }
  const n = cuSeqlens.length;
  if (n < 2) throw invalid(OP, 'cuSeqlens.length', 'at least 2 (0, then the end of each sequence)', n);
  if (n > t + 1) throw invalid(OP, 'cuSeqlens.length', `at most seqLen + 1 = ${t + 1} (sequences are not empty)`, n);
  return n - 1;
}

/** Checks the shape that every step shares. */
export function validateGdrStepParams(p: GdrStepParams): void {
  for (const [arg, value] of [
    ['nTok', p.nTok], ['nt', p.nt], ['nSeq', p.nSeq], ['nQkHeads', p.nQkHeads], ['nHeads', p.nHeads], ['kDim', p.kDim], ['vDim', p.vDim],
  ] as const) {
    checkU32Count(OP, arg, value);
  }
  checkHeadsAndDims(p);
  if (p.nt < Math.ceil(p.nTok / GDR_BT) || p.nt > p.nTok) throw invalid(OP, 'nt', `between ceil(nTok / 64) and nTok = ${p.nTok}`, p.nt);
  if (p.nSeq > p.nt) throw invalid(OP, 'nSeq', `at most nt = ${p.nt}`, p.nSeq);
  checkedProduct(OP, 'nTok * nHeads * max(kDim, vDim, 64)', p.nTok, p.nHeads, Math.max(p.kDim, p.vDim, GDR_BT));
  checkedProduct(OP, 'nt * nHeads * vDim * kDim', p.nt, p.nHeads, p.vDim, p.kDim);
}

/** The rules on heads, head dimensions and scale that the steps and the whole op share. */
function checkHeadsAndDims(p: Pick<GdrStepParams, 'nQkHeads' | 'nHeads' | 'kDim' | 'vDim' | 'scale'>): void {
  if (p.nHeads % p.nQkHeads !== 0) throw invalid(OP, 'nHeads', `a multiple of nQkHeads (${p.nQkHeads})`, p.nHeads);
  if (!GDR_K_VALUES.includes(p.kDim)) throw invalid(OP, 'kDim', `one of ${GDR_K_VALUES.join(', ')}`, p.kDim);
  if (p.vDim % GDR_V_MULTIPLE !== 0 || p.vDim > GDR_MAX_V) {
    throw invalid(OP, 'vDim', `a multiple of ${GDR_V_MULTIPLE} at most ${GDR_MAX_V}`, p.vDim);
  }
  if (p.scale !== undefined && !Number.isFinite(p.scale)) throw invalid(OP, 'scale', 'a finite number', p.scale);
}

type Expect = readonly [name: string, buf: Buffer, dtype: DType | readonly DType[], count: number];

const RESTRICT = 'the kernel writes it while other threadgroups read the other, and the CUDA kernels take both as __restrict__';
const chunksExpect = (p: GdrStepParams, b: Buffer): Expect => ['chunks', b, 'u32', 2 * p.nt];
const keysExpect = (p: GdrStepParams & GdrKeys): Expect => ['k', p.k, 'bf16', p.nTok * p.nQkHeads * p.kDim];
const decayExpect = (p: GdrStepParams & GdrDecay): Expect => ['g', p.g, 'f32', p.nTok * p.nHeads];
const seqsExpect = (p: GdrStepParams, b: Buffer): Expect => ['seqs', b, 'u32', 2 * (p.nSeq + 1)];

/** A step's params struct at the binding after its buffers. */
function stepBytes(nBuffers: number, p: GdrStepParams): (Uint8Array | undefined)[] {
  const bytes: (Uint8Array | undefined)[] = [];
  bytes[nBuffers] = packChunkGatedDeltaRuleParams(p);
  return bytes;
}

// ---- steps ----

/**
 * A step of the chunked rule: its kernel, its buffers in binding order (with
 * the dtype and element count each must have; the params struct is bound
 * after them), the outputs that may not alias another argument (absent where
 * the kernel runs in place), and its launch.
 */
interface GdrStep<A extends GdrStepParams> {
  buffers(a: A): Expect[];
  outputs?: readonly string[];
  /**
   * The kernel, its threads per threadgroup, its grid (a threadgroup per
   * chunk and head, (nt, H, 1), where absent) and the CUDA twin's launch
   * where it differs.
   */
  launch(a: A, limits: DeviceLimits): Pick<PlannedDispatch, 'kernel' | 'cuda'> & { threads: number; grid?: Dim3 };
}

/** A step's three functions of the op shape, and its dispatch without validation (for chunkGatedDeltaRule's plan) on a device of `limits`. */
function gdrStep<A extends GdrStepParams>(s: GdrStep<A>): OpShape<A> & { dispatch(a: A, limits: DeviceLimits): PlannedDispatch } {
  const validate = (a: A, device?: Device): void => {
    validateGdrStepParams(a);
    const list = s.buffers(a);
    checkEachBuffer(OP, list, device);
    if (s.outputs !== undefined) checkNoAliasing(OP, list.map(([name, buf]) => [name, buf] as const), s.outputs, RESTRICT);
  };
  const dispatch = (a: A, limits: DeviceLimits): PlannedDispatch => {
    const buffers = s.buffers(a).map(([, buf]) => buf);
    const { kernel, threads, grid = [a.nt, a.nHeads, 1], cuda } = s.launch(a, limits);
    return { kernel, buffers, bytes: stepBytes(buffers.length, a), grid, threads: [threads, 1, 1], ...(cuda === undefined ? {} : { cuda }) };
  };
  return { ...opShape(validate, (a, limits) => planOf(dispatch(a, limits))), dispatch };
}

/** The keys, as the steps take them. */
interface GdrKeys {
  /** [nTok, Hg, K] bf16 */
  k: Buffer;
}
/** The log decay, as the steps after the cumsum take it. */
interface GdrDecay {
  /** [nTok, H] f32, cumsummed within chunks */
  g: Buffer;
}
/** The chunk table of the steps that walk chunks. */
interface GdrChunks {
  /** u32 [nt, 2] (chunkGatedDeltaRuleLayout) */
  chunks: Buffer;
}

export interface GdrCumsumArgs extends GdrStepParams, GdrChunks {
  /** [nTok, H] f32 raw log decay */
  gIn: Buffer;
  /** [nTok, H] f32 (output) */
  gCum: Buffer;
}

const cumsumStep = gdrStep<GdrCumsumArgs>({
  buffers: (a) => [['gIn', a.gIn, 'f32', a.nTok * a.nHeads], ['gCum', a.gCum, 'f32', a.nTok * a.nHeads], chunksExpect(a, a.chunks)],
  outputs: ['gCum'],
  launch: (a) => ({ kernel: CUMSUM, threads: GDR_BT, cuda: { grid: [a.nt, Math.ceil(a.nHeads / 32), 1], threads: [256, 1, 1] } }),
});
/**
 * The chunks table is a device buffer, so its contents are not read here: a
 * kernel skips a chunk whose (first token, length) is not within nTok with a
 * length of 1..64, so no table indexes past the buffers validated below.
 */
export const validateChunkLocalCumsumVarlen = cumsumStep.validate;
/**
 * gCum[t, h] = sum of gIn[s, h] for s from the first token of t's chunk
 * through t. Bindings: 0 gIn, 1 gCum, 2 chunks, 3 params. Grid (nt, H), 64
 * threads; on CUDA (nt, ceil(H / 32)) of 256 (a block scans 32 heads of a chunk).
 */
export const chunkLocalCumsumVarlen = cumsumStep.op;
export const planChunkLocalCumsumVarlen = cumsumStep.plan;

export interface GdrKktArgs extends GdrStepParams, GdrKeys, GdrDecay, GdrChunks {
  /** [nTok, H] f32 or bf16 */
  beta: Buffer;
  /** [nTok, H, 64] f32 (output) */
  a: Buffer;
}

const kktStep = gdrStep<GdrKktArgs>({
  buffers: (a) => [
    keysExpect(a), decayExpect(a), ['beta', a.beta, ['f32', 'bf16'], a.nTok * a.nHeads],
    ['a', a.a, 'f32', a.nTok * a.nHeads * GDR_BT], chunksExpect(a, a.chunks),
  ],
  outputs: ['a'],
  launch: (a) => ({ kernel: a.beta.dtype === 'bf16' ? KKT_BETA_BF16 : KKT, threads: 256 }),
});
export const validateGatedDeltaNetKkt = kktStep.validate;
/**
 * a[t0 + i, h, j] = beta_i exp(g_i - g_j) k_i . k_j for j < i, 0 for the other
 * j in 0..63 (rows i < len of each chunk; kh = h / (H / Hg)).
 * Bindings: 0 k, 1 g, 2 beta, 3 a, 4 chunks, 5 params. Grid (nt, H), 256 threads.
 */
export const gatedDeltaNetKkt = kktStep.op;
export const planGatedDeltaNetKkt = kktStep.plan;

export interface GdrSolveArgs extends GdrStepParams, GdrChunks {
  /** [nTok, H, 64] f32, strictly lower triangular per chunk */
  a: Buffer;
  /** [nTok, H, 64] f32 (output); may be the same buffer as a */
  ai: Buffer;
}

const solveStep = gdrStep<GdrSolveArgs>({
  buffers: (a) => [['a', a.a, 'f32', a.nTok * a.nHeads * GDR_BT], ['ai', a.ai, 'f32', a.nTok * a.nHeads * GDR_BT], chunksExpect(a, a.chunks)],
  launch: () => ({ kernel: SOLVE, threads: GDR_BT }),
});
export const validateChunkTriSolveInvert = solveStep.validate;
/**
 * ai = (I + a)^-1 per chunk and head, unit lower triangular (rows i < len;
 * columns past len are 0). a and ai may be one buffer: each threadgroup reads
 * its chunk whole before writing. Bindings: 0 a, 1 ai, 2 chunks, 3 params.
 * Grid (nt, H), 64 threads (one per column).
 */
export const chunkTriSolveInvert = solveStep.op;
export const planChunkTriSolveInvert = solveStep.plan;

/** The arguments of the steps that write w and u (recompute_wu, and kkt_solve_wu, which computes Ai itself). */
export interface GdrKktSolveWuArgs extends GdrStepParams, GdrKeys, GdrDecay, GdrChunks {
  /** [nTok, H, V] bf16 */
  v: Buffer;
  /** [nTok, H] f32 or bf16 */
  beta: Buffer;
  /** [nTok, H, K] bf16 (output) */
  w: Buffer;
  /** [nTok, H, V] bf16 (output) */
  u: Buffer;
}

export interface GdrWuArgs extends GdrKktSolveWuArgs {
  /** [nTok, H, 64] f32 */
  ai: Buffer;
}

/** The rules of the w/u steps' inputs before Ai (k, v, beta, g) and of what they write (w, u, then the chunk table), in binding order. */
const wuInputs = (a: GdrKktSolveWuArgs): Expect[] => [
  keysExpect(a), ['v', a.v, 'bf16', a.nTok * a.nHeads * a.vDim], ['beta', a.beta, ['f32', 'bf16'], a.nTok * a.nHeads], decayExpect(a),
];
const wuOutputs = (a: GdrKktSolveWuArgs): Expect[] => [
  ['w', a.w, 'bf16', a.nTok * a.nHeads * a.kDim], ['u', a.u, 'bf16', a.nTok * a.nHeads * a.vDim], chunksExpect(a, a.chunks),
];

const wuStep = gdrStep<GdrWuArgs>({
  buffers: (a) => [...wuInputs(a), ['ai', a.ai, 'f32', a.nTok * a.nHeads * GDR_BT], ...wuOutputs(a)],
  outputs: ['w', 'u'],
  launch: (a) => ({ kernel: a.beta.dtype === 'bf16' ? WU_BETA_BF16 : WU, threads: 256 }),
});
export const validateGatedDeltaNetRecomputeWu = wuStep.validate;
/**
 * w[i] = bf16(sum_j ai[i, j] beta_j exp(g_j) k_j), u[i] = bf16(sum_j ai[i, j] beta_j v_j)
 * per chunk, f32 products. Bindings: 0 k, 1 v, 2 beta, 3 g, 4 ai, 5 w, 6 u,
 * 7 chunks, 8 params. Grid (nt, H), 256 threads.
 */
export const gatedDeltaNetRecomputeWu = wuStep.op;
export const planGatedDeltaNetRecomputeWu = wuStep.plan;

const kktSolveWuStep = gdrStep<GdrKktSolveWuArgs>({
  buffers: (a) => [...wuInputs(a), ...wuOutputs(a)],
  outputs: ['w', 'u'],
  launch: (a) => ({
    kernel: a.beta.dtype === 'bf16' ? KKT_SOLVE_WU_BETA_BF16 : KKT_SOLVE_WU, threads: 256,
    cuda: { grid: [a.nHeads, a.nt, 1], threads: [256, 1, 1] },
  }),
});
export const validateGatedDeltaNetKktSolveWu = kktSolveWuStep.validate;
/**
 * The kkt, tri-solve and w/u steps in one kernel, A and (I + A)^-1 kept on
 * chip: w and u as gatedDeltaNetRecomputeWu gives them from the Ai of the
 * two steps before (up to f32 rounding). Bindings: 0 k, 1 v, 2 beta, 3 g,
 * 4 w, 5 u, 6 chunks, 7 params. Grid (nt, H), on CUDA (H, nt) (a chunk's
 * heads side by side: a GQA group reads k once from memory), 256 threads.
 */
export const gatedDeltaNetKktSolveWu = kktSolveWuStep.op;
export const planGatedDeltaNetKktSolveWu = kktSolveWuStep.plan;

export interface GdrInterStateArgs extends GdrStepParams, GdrKeys, GdrDecay {
  /** [nTok, H, K] bf16 */
  w: Buffer;
  /** [nTok, H, V] bf16 */
  u: Buffer;
  /** [nSeq, H, V, K] f32 */
  h0: Buffer;
  /** [nt, H, V, K] bf16 chunk-start states (output) */
  hOut: Buffer;
  /** [nTok, H, V] bf16 (output) */
  vNew: Buffer;
  /** [nSeq, H, V, K] f32 (output) */
  finalState: Buffer;
  /** u32 [nSeq + 1, 2] (chunkGatedDeltaRuleLayout) */
  seqs: Buffer;
}

const interStateStep = gdrStep<GdrInterStateArgs>({
  buffers: (a) => {
    const state = a.nSeq * a.nHeads * a.vDim * a.kDim;
    return [
      keysExpect(a), ['w', a.w, 'bf16', a.nTok * a.nHeads * a.kDim], ['u', a.u, 'bf16', a.nTok * a.nHeads * a.vDim],
      decayExpect(a), ['h0', a.h0, 'f32', state], ['hOut', a.hOut, 'bf16', a.nt * a.nHeads * a.vDim * a.kDim],
      ['vNew', a.vNew, 'bf16', a.nTok * a.nHeads * a.vDim], ['finalState', a.finalState, 'f32', state], seqsExpect(a, a.seqs),
    ];
  },
  outputs: ['hOut', 'vNew', 'finalState'],
  launch: (a, limits) => ({
    kernel: interStateKernel(a.kDim), threads: 128, grid: [a.vDim / interStateBv(a.kDim), a.nHeads, a.nSeq],
    ...(a.kDim === 128 ? { cuda: interStateK128Cuda(a.nHeads, a.kDim, a.vDim, a.nSeq, limits) } : {}),
  }),
});
/**
 * The seqs table is a device buffer, so its contents are not read here: the
 * kernel skips a sequence whose entries are not increasing within (nTok, nt)
 * with ceil(tokens / 64) chunks, so no table indexes past the buffers
 * validated below.
 */
export const validateGatedDeltaNetChunkInterStateVarlen = interStateStep.validate;
/**
 * The inter-chunk state recurrence, per sequence and head (the math and the
 * kernel body of gatedDeltaNetChunk, for any chunk lengths, sequences and K of 64, 128, 256).
 * Bindings: 0 k, 1 w, 2 u, 3 g, 4 h0, 5 hOut, 6 vNew, 7 finalState, 8 seqs,
 * 9 params. Grid (V / BV, H, nSeq), 128 threads, BV = interStateBv(k); on
 * CUDA at K 128 interStateK128Cuda's launch.
 */
export const gatedDeltaNetChunkInterStateVarlen = interStateStep.op;
export const planGatedDeltaNetChunkInterStateVarlen = interStateStep.plan;

export interface GdrChunkOArgs extends GdrStepParams, GdrKeys, GdrDecay, GdrChunks {
  /** [nTok, Hg, K] bf16 */
  q: Buffer;
  /** [nTok, H, V] bf16 */
  vNew: Buffer;
  /** [nt, H, V, K] bf16 chunk-start states */
  h: Buffer;
  /** [nTok, H, V] bf16 (output) */
  o: Buffer;
}

const chunkOStep = gdrStep<GdrChunkOArgs>({
  buffers: (a) => [
    ['q', a.q, 'bf16', a.nTok * a.nQkHeads * a.kDim], keysExpect(a), ['vNew', a.vNew, 'bf16', a.nTok * a.nHeads * a.vDim],
    ['h', a.h, 'bf16', a.nt * a.nHeads * a.vDim * a.kDim], decayExpect(a), ['o', a.o, 'bf16', a.nTok * a.nHeads * a.vDim],
    chunksExpect(a, a.chunks),
  ],
  outputs: ['o'],
  launch: (a) => ({
    kernel: CHUNK_O, threads: 256, grid: [a.vDim / GDR_V_MULTIPLE, a.nt, a.nHeads],
    cuda: {
      grid: [a.vDim / chunkOCudaColumns(a.vDim), a.nHeads, a.nt], threads: [256, 1, 1],
      threadgroupMemory: { 0: chunkOCudaSharedBytes(a.kDim, a.vDim) },
    },
  }),
});
export const validateGatedDeltaNetChunkO = chunkOStep.validate;
/**
 * o[i, v] = bf16(scale (exp(g_i) q_i . h[v] + sum_{j <= i} bf16(exp(g_i - g_j) q_i . k_j) vNew[j, v]))
 * per chunk, h its chunk-start state. Bindings: 0 q, 1 k, 2 vNew, 3 h, 4 g,
 * 5 o, 6 chunks, 7 params. Grid (V / 64, nt, H), on CUDA (V / VB, H, nt) with
 * VB = chunkOCudaColumns(V) and chunkOCudaSharedBytes of dynamic shared
 * memory (every operand of a block staged at once); 256 threads.
 */
export const gatedDeltaNetChunkO = chunkOStep.op;
export const planGatedDeltaNetChunkO = chunkOStep.plan;

/** V columns per block of the CUDA chunk_o: 128 where V is a multiple of 128, else 64. */
export function chunkOCudaColumns(vDim: number): number {
  return vDim % 128 === 0 ? 128 : 64;
}
/** Dynamic shared memory of the CUDA chunk_o: q, k [64][K + 8], h [VB][K + 8], v_new [64][VB + 8] bf16. */
export function chunkOCudaSharedBytes(kDim: number, vDim: number): number {
  const vb = chunkOCudaColumns(vDim);
  return 2 * ((2 * GDR_BT + vb) * (kDim + 8) + GDR_BT * (vb + 8));
}

// ---- scratch ----

/** The buffers a call of chunkGatedDeltaRule works in, besides its arguments. */
export interface GdrScratch {
  gCum: Buffer;
  w: Buffer;
  u: Buffer;
  hSnap: Buffer;
  vNew: Buffer;
  chunks: Buffer;
  seqs: Buffer;
  /** Zero initial state, allocated on the first call without one. */
  zeros: Buffer | null;
}

/** Scratch of one shape on device, with its chunk tables written. */
function allocScratch(d: Device, p: GdrStepParams, layout: GdrChunkLayout): GdrScratch {
  const s: GdrScratch = {
    gCum: d.alloc('f32', [p.nTok, p.nHeads]),
    w: d.alloc('bf16', [p.nTok, p.nHeads, p.kDim]),
    u: d.alloc('bf16', [p.nTok, p.nHeads, p.vDim]),
    hSnap: d.alloc('bf16', [p.nt, p.nHeads, p.vDim, p.kDim]),
    vNew: d.alloc('bf16', [p.nTok, p.nHeads, p.vDim]),
    chunks: d.alloc('u32', [p.nt, 2]),
    seqs: d.alloc('u32', [p.nSeq + 1, 2]),
    zeros: null,
  };
  s.chunks.write(layout.chunks);
  s.seqs.write(layout.seqs);
  return s;
}

interface ScratchEntry extends GdrScratch {
  key: string;
  /** The encoder that last recorded a call on this entry, and its recording epoch then. */
  user: WeakRef<Encoder> | null;
  userEpoch: number;
}

/** How many shapes a device keeps scratch for; the least recently used beyond it is released. */
export const GDR_SCRATCH_SHAPES = 4;

/**
 * The scratch buffers of chunkGatedDeltaRule on one device: per shape
 * (H, K, V and the sequence offsets, which fix nTok, nt, nSeq), g cumsummed [nTok, H] f32,
 * w [nTok, H, K], u and vNew [nTok, H, V], the chunk-start states
 * [nt, H, V, K] (bf16), the two chunk tables, and zeros [nSeq, H, V, K] f32 for
 * calls without an initial state. The GDR_SCRATCH_SHAPES most recently used
 * shapes are kept; dispose() releases them all (the next call allocates again).
 * Closing the device releases them too.
 */
export class ChunkGatedDeltaRuleScratch {
  private entries: ScratchEntry[] = [];
  readonly device: Device;

  constructor(device: Device) {
    this.device = device;
  }

  /** Shapes held. */
  get shapes(): number {
    return this.entries.length;
  }

  /** Bytes held. */
  get byteLength(): number {
    let n = 0;
    for (const e of this.entries) {
      for (const b of [e.gCum, e.w, e.u, e.hSnap, e.vNew, e.chunks, e.seqs, e.zeros]) n += b?.byteLength ?? 0;
    }
    return n;
  }

  /**
   * @internal the entry of a shape and chunk layout, most recently used first.
   * The layout is part of the key and its tables are written only when the
   * entry is made, so calls encoded before one commit never see each other's
   * tables. An entry that another encoder has recorded into and not yet
   * finished with (recorded, or committed and running) is not shared: the
   * two commits could run at once, so this encoder gets an entry of its own.
   * Entries released here (beyond GDR_SCRATCH_SHAPES) stay alive in the
   * backend for the work that still uses them.
   */
  entry(p: GdrStepParams, layout: GdrChunkLayout, enc: Encoder): ScratchEntry {
    const key = `${p.nHeads},${p.kDim},${p.vDim}:${layout.seqs.join(',')}`;
    const at = this.entries.findIndex((e) => e.key === key && !busyFor(e, enc));
    if (at >= 0) {
      const [e] = this.entries.splice(at, 1);
      this.entries.unshift(e!);
      claim(e!, enc);
      return e!;
    }
    const e: ScratchEntry = { key, ...allocScratch(this.device, p, layout), user: null, userEpoch: 0 };
    claim(e, enc);
    this.entries.unshift(e);
    while (this.entries.length > GDR_SCRATCH_SHAPES) release(this.entries.pop()!);
    return e;
  }

  dispose(): void {
    for (const e of this.entries) release(e);
    this.entries = [];
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}

function busyFor(e: ScratchEntry, enc: Encoder): boolean {
  const u = e.user?.deref();
  return u !== undefined && u !== enc && u._recordingEpoch(e.userEpoch);
}

function claim(e: ScratchEntry, enc: Encoder): void {
  if (e.user?.deref() !== enc) e.user = new WeakRef(enc);
  e.userEpoch = enc._epoch;
}

function release(e: ScratchEntry): void {
  for (const b of [e.gCum, e.w, e.u, e.hSnap, e.vNew, e.chunks, e.seqs, e.zeros]) {
    if (b !== null && !b.device.closed) b.release();
  }
}

const scratchByDevice = new WeakMap<Device, ChunkGatedDeltaRuleScratch>();

/** The scratch of chunkGatedDeltaRule on this device (made on first use). */
export function chunkGatedDeltaRuleScratch(device: Device): ChunkGatedDeltaRuleScratch {
  let s = scratchByDevice.get(device);
  if (s === undefined) {
    s = new ChunkGatedDeltaRuleScratch(device);
    scratchByDevice.set(device, s);
  }
  return s;
}

// ---- the whole forward ----

export interface ChunkGatedDeltaRuleParams {
  /** Sequences B of seqLen tokens; 1 with cuSeqlens. */
  batch: number;
  /** Tokens T per sequence, or in all sequences with cuSeqlens. */
  seqLen: number;
  /** K heads Hg. */
  nQkHeads: number;
  /** V heads H, a multiple of nQkHeads (GQA: V head h reads K head h / (H / Hg)). */
  nHeads: number;
  /** Head dimension K of q and k: 64, 128 or 256. */
  kDim: number;
  /** Head dimension V of v: 64, 128, 192 or 256. */
  vDim: number;
  /** Multiplies q . k and q . h; default 1 / sqrt(kDim). */
  scale?: number;
  /** Cumulative offsets of variable-length sequences [0, ..., seqLen] (batch = 1). */
  cuSeqlens?: ArrayLike<number>;
}

export interface ChunkGatedDeltaRuleArgs extends ChunkGatedDeltaRuleParams {
  /** [B, T, Hg, K] bf16 */
  q: Buffer;
  /** [B, T, Hg, K] bf16 */
  k: Buffer;
  /** [B, T, H, V] bf16 */
  v: Buffer;
  /** [B, T, H] f32, raw log decay (cumsummed inside) */
  g: Buffer;
  /** [B, T, H] f32 or bf16 */
  beta: Buffer;
  /** [N, H, V, K] f32, N = batch or the number of sequences; zeros when absent */
  initialState?: Buffer;
  /** [B, T, H, V] bf16 (output) */
  o: Buffer;
  /** [N, H, V, K] f32 (output) */
  finalState: Buffer;
}

/** The step shape of a call (validating its params against the chunk layout). */
export function chunkGatedDeltaRuleStepParams(p: ChunkGatedDeltaRuleParams, layout: GdrChunkLayout): GdrStepParams {
  const s: GdrStepParams = {
    nTok: layout.nTok, nt: layout.nt, nSeq: layout.nSeq, nQkHeads: p.nQkHeads, nHeads: p.nHeads, kDim: p.kDim, vDim: p.vDim,
  };
  if (p.scale !== undefined) s.scale = p.scale;
  validateGdrStepParams(s);
  return s;
}

/**
 * Checks the arguments, then builds the chunk tables. Everything before the
 * tables is O(1) in batch, seqLen and the sequences: the scalars, the length
 * of cuSeqlens, then the buffers, whose element counts prove that
 * batch * seqLen tokens (and so the tables, O(nSeq + nt) with
 * nSeq, nt <= batch * seqLen) fit memory already allocated.
 */
export function validateChunkGatedDeltaRule(a: ChunkGatedDeltaRuleArgs, device?: Device): { step: GdrStepParams; layout: GdrChunkLayout } {
  const p = a;
  for (const [arg, value] of [
    ['batch', p.batch], ['seqLen', p.seqLen], ['nQkHeads', p.nQkHeads], ['nHeads', p.nHeads], ['kDim', p.kDim], ['vDim', p.vDim],
  ] as const) {
    checkU32Count(OP, arg, value);
  }
  const nTok = checkedU32Product(OP, 'batch * seqLen', p.batch, p.seqLen);
  checkHeadsAndDims(p);
  const nSeq = p.cuSeqlens === undefined ? p.batch : checkCuSeqlensLength(p.batch, p.seqLen, p.cuSeqlens);
  const qk = checkedProduct(OP, 'batch * seqLen * nQkHeads * kDim', nTok, p.nQkHeads, p.kDim);
  const vo = checkedProduct(OP, 'batch * seqLen * nHeads * vDim', nTok, p.nHeads, p.vDim);
  const gb = checkedProduct(OP, 'batch * seqLen * nHeads', nTok, p.nHeads);
  const state = checkedProduct(OP, 'sequences * nHeads * vDim * kDim', nSeq, p.nHeads, p.vDim, p.kDim);
  const list: Expect[] = [
    ['q', a.q, 'bf16', qk], ['k', a.k, 'bf16', qk], ['v', a.v, 'bf16', vo], ['g', a.g, 'f32', gb],
    ['beta', a.beta, ['f32', 'bf16'], gb], ['o', a.o, 'bf16', vo], ['finalState', a.finalState, 'f32', state],
  ];
  if (a.initialState !== undefined) list.push(['initialState', a.initialState, 'f32', state]);
  checkEachBuffer(OP, list, device);
  // o is written by the last step (chunk_o), which reads q and k; v, g and
  // beta are read only by earlier steps. finalState is written by the
  // inter-state step, which reads the initial state (both __restrict__ on CUDA).
  checkNoAliasing(OP, [['q', a.q], ['k', a.k], ['o', a.o]], ['o'], 'chunk_o writes o while other threadgroups read q and k');
  checkNoAliasing(OP, [['initialState', a.initialState], ['finalState', a.finalState]], ['finalState'],
    'the inter-state kernels take both as __restrict__');
  const layout = chunkGatedDeltaRuleLayout(p.batch, p.seqLen, p.cuSeqlens);
  const step = chunkGatedDeltaRuleStepParams(p, layout);
  return { step, layout };
}

/**
 * The chunked gated delta rule forward. Per sequence and V head (kh = head / (H / Hg)),
 * it equals the recurrence from S = initialState (or 0), S [V, K]:
 *   S = S exp(g_t);  delta = beta_t (v_t - S k_t);  S += delta k_t^T;  o_t = scale S q_t
 * with finalState = S after the sequence's last token, so a decode step that
 * continues from finalState continues the recurrence.
 *
 * Steps, each a dispatch, ordered by the barriers the encoder places from
 * what each step reads and writes (chunks of 64 tokens):
 *   1. g cumsummed within chunks: chunk_local_cumsum_varlen_g_f32
 *   2. w, u = gated_delta_net_kkt_solve_wu_bf16: A = beta_i exp(g_i - g_j)
 *      k_i . k_j (j < i), Ai = (I + A)^-1, w = Ai (beta exp(g) k), u = Ai (beta v),
 *      A and Ai kept on chip (the steps kkt, tri-solve and w/u in one kernel)
 *   3. chunk-start states h, v_new, finalState: gated_delta_net_chunk_inter_state_k{K}_bf16
 *      (on CUDA at K 128 interStateK128Cuda's launch: warpgroup products on compute capability 9.0)
 *   4. o = gated_delta_net_chunk_o_bf16
 * Stored in bf16: w, u, v_new, the chunk-start states and o; A, Ai (on chip),
 * g and the running state are f32.
 *
 * Layouts: q, k [B, T, Hg, K] bf16; v, o [B, T, H, V] bf16; g, beta [B, T, H]
 * (beta f32 or bf16); initialState, finalState [N, H, V, K] f32 (K innermost,
 * the layout of the recurrent kernels). With cuSeqlens, B = 1 and T is the
 * total of the sequences. Scratch comes from chunkGatedDeltaRuleScratch(device)
 * (kept per shape; dispose() releases it).
 */
export function chunkGatedDeltaRule(enc: Encoder, a: ChunkGatedDeltaRuleArgs): void {
  const { step, layout } = validateChunkGatedDeltaRule(a, enc.device);
  const s = chunkGatedDeltaRuleScratch(enc.device).entry(step, layout, enc);
  if (a.initialState === undefined) s.zeros ??= enc.device.alloc('f32', [step.nSeq, step.nHeads, step.vDim, step.kDim]);
  // Four dispatches, recorded atomically: a refusal of any records none of them.
  record(enc, stepsPlan(a, step, s, enc.device.limits));
}

/**
 * chunkGatedDeltaRule's plan: validates, then its four steps over `scratch`,
 * or over scratch of its own allocated on q's device (and a zero initial
 * state when none is given) when absent.
 */
export function planChunkGatedDeltaRule(a: ChunkGatedDeltaRuleArgs, limits: DeviceLimits, device?: Device,
  scratch?: GdrScratch): OpPlan {
  const { step, layout } = validateChunkGatedDeltaRule(a, device);
  const s = scratch ?? allocScratch(a.q.device, step, layout);
  if (a.initialState === undefined) s.zeros ??= a.q.device.alloc('f32', [step.nSeq, step.nHeads, step.vDim, step.kDim]);
  return stepsPlan(a, step, s, limits);
}

function stepsPlan(a: ChunkGatedDeltaRuleArgs, step: GdrStepParams, s: GdrScratch, limits: DeviceLimits): OpPlan {
  const h0 = a.initialState ?? s.zeros!;
  // No manual barriers: the encoder orders each step after the writes it
  // reads, and after a call encoded before this one that still reads the
  // same scratch.
  return planOf(
    cumsumStep.dispatch({ ...step, gIn: a.g, gCum: s.gCum, chunks: s.chunks }, limits),
    kktSolveWuStep.dispatch({ ...step, k: a.k, v: a.v, beta: a.beta, g: s.gCum, w: s.w, u: s.u, chunks: s.chunks }, limits),
    interStateStep.dispatch({ ...step, k: a.k, w: s.w, u: s.u, g: s.gCum, h0, hOut: s.hSnap, vNew: s.vNew, finalState: a.finalState, seqs: s.seqs }, limits),
    chunkOStep.dispatch({ ...step, q: a.q, k: a.k, vNew: s.vNew, h: s.hSnap, g: s.gCum, o: a.o, chunks: s.chunks }, limits),
  );
}

// ---- the seed's entries (host code written against mlx-native drives them) ----

/** The family of the seed's cumsum kernel (the one family of the chunked gated delta rule). */
export const CHUNK_LOCAL_CUMSUM_FAMILY = FAMILY;
/** The seed's cumsum kernel. */
export const CHUNK_LOCAL_CUMSUM_KERNELS = [SEED_CUMSUM] as const;
/** One thread per timestep of a chunk: Metal's threadgroup limit. */
export const CHUNK_LOCAL_CUMSUM_MAX_BT = 1024;

/** struct ChunkLocalCumsumParams (buffer 2): [B, T, H, BT, NT]. */
export const CHUNK_LOCAL_CUMSUM_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'ChunkLocalCumsumParams');

export interface ChunkLocalCumsumParams {
  /** Sequences B. */
  batch: number;
  /** Timesteps T per sequence (any; the last chunk may be partial). */
  seqLen: number;
  /** Heads H. */
  nHeads: number;
  /** Chunk size (64 in FLA and the gated delta net chunk kernels). */
  bt: number;
}
export interface ChunkLocalCumsumBuffers {
  /** f32 [b, t, h] */
  gIn: Buffer;
  /** f32 [b, t, h], output */
  gCumsum: Buffer;
}
export interface ChunkLocalCumsumArgs extends ChunkLocalCumsumBuffers, ChunkLocalCumsumParams {}

export function packChunkLocalCumsumParams(p: ChunkLocalCumsumParams): Uint8Array {
  return packFields(CHUNK_LOCAL_CUMSUM_PARAMS_LAYOUT, { b: p.batch, t: p.seqLen, h: p.nHeads, bt: p.bt, nt: numChunks(p) });
}

/** device: the encoder's, when the buffers must belong to it. gCumsum may be gIn (in place). */
export function validateChunkLocalCumsum(a: ChunkLocalCumsumArgs, device?: Device): void {
  const op = 'chunk_local_cumsum';
  const p = a, buf = a;
  checkPositive(op, 'batch', p.batch);
  checkPositive(op, 'seqLen', p.seqLen);
  checkPositive(op, 'nHeads', p.nHeads);
  checkPositive(op, 'bt', p.bt);
  checkAtMost(op, 'bt', p.bt, device?.limits.maxThreadsPerThreadgroup ?? CHUNK_LOCAL_CUMSUM_MAX_BT, 'the threads per threadgroup limit');
  const n = checkedProduct(op, 'batch * seqLen * nHeads', p.batch, p.seqLen, p.nHeads);
  checkAtMost(op, 'batch * seqLen * nHeads', n, U32_MAX, 'the 32-bit index limit');
  checkBufferRules(op, [['gIn', buf.gIn, 'f32', n], ['gCumsum', buf.gCumsum, 'f32', n]], device);
}

/**
 * chunk_local_cumsum: gCumsum[b, t, h] = sum of gIn[b, s, h] for s from
 * floor(t / bt) * bt through t (inclusive prefix sum restarted every bt steps).
 *
 * Layouts (f32): gIn, gCumsum [b, t, h], h innermost. gCumsum may be gIn's
 * buffer (each thread reads its element before the barrier and writes it after).
 * Bindings: 0 gIn, 1 gCumsum, 2 ChunkLocalCumsumParams [b, t, h, bt, nt].
 * Grid: (1, h, b * nt) threadgroups of (bt, 1, 1) threads, nt = ceil(t / bt);
 * threads past t in the last chunk are masked.
 */
export function chunkLocalCumsum(enc: Encoder, args: ChunkLocalCumsumArgs): void {
  record(enc, planChunkLocalCumsum(args, enc.device.limits, enc.device));
}
export function planChunkLocalCumsum(args: ChunkLocalCumsumArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateChunkLocalCumsum(args, device);
  checkAtMost('chunk_local_cumsum', 'bt', args.bt, limits.maxThreadsPerThreadgroup, 'the threads per threadgroup limit');
  return planOf({
    kernel: SEED_CUMSUM,
    buffers: [args.gIn, args.gCumsum],
    bytes: [, , packChunkLocalCumsumParams(args)],
    grid: [1, args.nHeads, args.batch * numChunks(args)],
    threads: [args.bt, 1, 1],
  });
}

const GDN_OP = 'gated_delta_net_chunk';
/** The seed's inter-state kernel. */
export const GATED_DELTA_NET_CHUNK_KERNELS = [SEED_INTER] as const;

/** K of the seed's kernel: it instantiates the inter-state body at K = 128 only. */
export const GDN_CHUNK_MAX_K = 128;
/** The largest V: 8 slices of BV. */
export const GDN_CHUNK_MAX_V = 256;
/** V slice per threadgroup. */
export const GDN_CHUNK_BV = 32;
/** The only chunk size the kernel runs. */
export const GDN_CHUNK_BT = 64;
/** Apple's threadgroup memory limit: what validation assumes when it is given no device or limits. */
export const GDN_CHUNK_MAX_THREADGROUP_BYTES = 32 * 1024;
/** The kernel's static threadgroup memory: the 8 KiB staging region beside threadgroup(0). */
export const GDN_CHUNK_STATIC_TG_BYTES = 8 * 1024;

export interface GatedDeltaNetChunkParams {
  /** Sequences B. */
  batch: number;
  /** Sequence length T, a multiple of bt. */
  seqLen: number;
  /** K heads Hg. */
  nQkHeads: number;
  /** V heads H, a multiple of nQkHeads (GQA). */
  nHeads: number;
  /** Head dimension K: 128. */
  kDim: number;
  /** Head dimension V: a multiple of 32, at most 256. */
  vDim: number;
  /** Chunk size BT: 64. */
  bt: number;
}

export interface GatedDeltaNetChunkBuffers {
  /** [B, T, Hg, K] bf16 */
  k: Buffer;
  /** [B, T, H, K] bf16, the WY-projected keys */
  w: Buffer;
  /** [B, T, H, V] bf16, the WY-projected values */
  u: Buffer;
  /** [B, T, H] f32, log decay cumsummed within each chunk */
  g: Buffer;
  /** [B, H, V, K] f32 initial state */
  h0: Buffer;
  /** [B, NT, H, V, K] bf16 chunk-start states (output) */
  hOut: Buffer;
  /** [B, T, H, V] bf16 (output) */
  vNew: Buffer;
  /** [B, H, V, K] f32 state after the last chunk (output) */
  finalState: Buffer;
}

/** V heads per K head: nHeads / nQkHeads. */
export function groupRatio(p: Pick<GatedDeltaNetChunkParams, 'nHeads' | 'nQkHeads'>): number {
  return p.nHeads / p.nQkHeads;
}

/**
 * threadgroup(0) of the kernel: the f32 state slice BV x K and the bf16 gated
 * values BV x BT (the kernel adds an 8 KiB staging region of its own: 28 KiB in all).
 */
export function gatedDeltaNetChunkThreadgroupBytes(p: Pick<GatedDeltaNetChunkParams, 'kDim' | 'bt'>): number {
  return GDN_CHUNK_BV * p.kDim * 4 + GDN_CHUNK_BV * p.bt * 2;
}

/** struct GatedDeltaNetChunkParams of shaders/chunk_gated_delta_rule.metal: u32 [B, T, Hg, H, K, V, BT, NT]. */
export const GATED_DELTA_NET_CHUNK_PARAMS_LAYOUT: readonly ParamField[] = structLayout(header, 'GatedDeltaNetChunkParams');

/** The kernel's params: u32 [B, T, Hg, H, K, V, BT, NT]. */
export function buildGatedDeltaNetChunkParams(p: GatedDeltaNetChunkParams): Uint8Array {
  return packFields(GATED_DELTA_NET_CHUNK_PARAMS_LAYOUT, {
    b: p.batch, t: p.seqLen, hg: p.nQkHeads, h: p.nHeads, k: p.kDim, v: p.vDim, bt: p.bt, nt: numChunks(p),
  });
}

export interface GatedDeltaNetChunkArgs extends GatedDeltaNetChunkBuffers, GatedDeltaNetChunkParams {}

/**
 * Throws MlxError('InvalidArgument') naming the argument unless the arguments
 * fit the kernel, whose threadgroup memory is that of `limits` (the device's
 * when only it is given; Apple's 32 KiB when neither is).
 */
export function validateGatedDeltaNetChunk(a: GatedDeltaNetChunkArgs, device?: Device, limits = device?.limits): void {
  const p = a, bufs = a;
  for (const [arg, value] of [
    ['batch', p.batch], ['seqLen', p.seqLen], ['nQkHeads', p.nQkHeads], ['nHeads', p.nHeads], ['kDim', p.kDim], ['vDim', p.vDim], ['bt', p.bt],
  ] as const) {
    checkU32Count(GDN_OP, arg, value);
  }
  checkMultiple(GDN_OP, 'nHeads', p.nHeads, p.nQkHeads, 'nQkHeads');
  if (p.kDim !== GDN_CHUNK_MAX_K) {
    throw invalid(GDN_OP, 'kDim', `equal to MAX_K = ${GDN_CHUNK_MAX_K} exactly: the kernel's K-tile loops are hard-coded to ${GDN_CHUNK_MAX_K / 8} tiles of 8`, p.kDim);
  }
  checkAtMost(GDN_OP, 'vDim', p.vDim, GDN_CHUNK_MAX_V, 'MAX_V');
  // threadgroup(0), plus the kernel's static 8 KiB staging region.
  const tgBytes = gatedDeltaNetChunkThreadgroupBytes(p);
  const room = (limits?.maxThreadgroupMemory ?? GDN_CHUNK_MAX_THREADGROUP_BYTES) - GDN_CHUNK_STATIC_TG_BYTES;
  if (tgBytes > room) {
    throw invalid(
      GDN_OP, 'threadgroup memory (bv * kDim * 4 + bv * bt * 2)',
      `at most ${room} bytes (the device's threadgroup memory less the kernel's ${GDN_CHUNK_STATIC_TG_BYTES} static bytes; ` +
        `bv=${GDN_CHUNK_BV}, kDim=${p.kDim}, bt=${p.bt})`, tgBytes,
    );
  }
  checkMultiple(GDN_OP, 'seqLen', p.seqLen, p.bt, 'bt');
  if (p.bt !== GDN_CHUNK_BT) throw invalid(GDN_OP, 'bt', `${GDN_CHUNK_BT}`, p.bt);
  checkMultiple(GDN_OP, 'vDim', p.vDim, GDN_CHUNK_BV, 'BV');

  const nt = numChunks(p);
  const expected: readonly [keyof GatedDeltaNetChunkBuffers, DType, number][] = [
    ['k', 'bf16', checkedProduct(GDN_OP, 'k elements', p.batch, p.seqLen, p.nQkHeads, p.kDim)],
    ['w', 'bf16', checkedProduct(GDN_OP, 'w elements', p.batch, p.seqLen, p.nHeads, p.kDim)],
    ['u', 'bf16', checkedProduct(GDN_OP, 'u elements', p.batch, p.seqLen, p.nHeads, p.vDim)],
    ['g', 'f32', checkedProduct(GDN_OP, 'g elements', p.batch, p.seqLen, p.nHeads)],
    ['h0', 'f32', checkedProduct(GDN_OP, 'h0 elements', p.batch, p.nHeads, p.vDim, p.kDim)],
    ['hOut', 'bf16', checkedProduct(GDN_OP, 'hOut elements', p.batch, nt, p.nHeads, p.vDim, p.kDim)],
    ['vNew', 'bf16', checkedProduct(GDN_OP, 'vNew elements', p.batch, p.seqLen, p.nHeads, p.vDim)],
    ['finalState', 'f32', checkedProduct(GDN_OP, 'finalState elements', p.batch, p.nHeads, p.vDim, p.kDim)],
  ];
  checkEachBuffer(GDN_OP, expected.map(([key, dtype, count]) => [key, bufs[key], dtype, count] as const), device);
  checkNoAliasing(GDN_OP, expected.map(([key]) => [key, bufs[key]] as const), ['hOut', 'vNew', 'finalState'],
    'the CUDA kernel takes every binding as __restrict__');
}

/**
 * Per (b, head), with the state h [V, K] f32 starting at h0 and chunks of
 * bt = 64 tokens, kh = head / (H / Hg), `last` the chunk's last token:
 *   hOut[b, c, head] = bf16(h)
 *   vn[t, v] = u[t, v] - sum_k w[t, k] * bf16(h)[v, k];   vNew[t, v] = bf16(vn)
 *   h[v, k]  = h[v, k] * exp(g[last]) + sum_t bf16(vn[t, v] * exp(g[last] - g[t])) * k[t, kh, k]
 * finalState[b, head] = h. Products take bf16 operands and sum in f32.
 *
 * Layouts: k [B, T, Hg, K]; w [B, T, H, K]; u, vNew [B, T, H, V] (bf16);
 * g [B, T, H] f32; h0, finalState [B, H, V, K] f32; hOut [B, NT, H, V, K] bf16.
 *
 * Bindings: 0 k, 1 w, 2 u, 3 g, 4 h0, 5 h_out, 6 v_new, 7 final_state,
 * 8 params (buildGatedDeltaNetChunkParams), threadgroup(0)
 * gatedDeltaNetChunkThreadgroupBytes (20 KiB). Grid (V / 32, H, B), 128 threads.
 * The kernel runs the state walk of the varlen kernels
 * (gated_delta_net_chunk_inter_state_k{K}_bf16) with sequence b = tokens [b T, b T + T);
 * on CUDA with compute capability 9.0 the walk on warpgroup products (gatedDeltaNetChunkWgCuda).
 */
export function gatedDeltaNetChunk(enc: Encoder, args: GatedDeltaNetChunkArgs): void {
  record(enc, planGatedDeltaNetChunk(args, enc.device.limits, enc.device));
}
/**
 * The seed's CUDA launch on warpgroup products (where interStateUsesWgmma):
 * the walk of the varlen step's _wg entry over the seed's layout, 256 threads,
 * interStateWgBytes; elsewhere its own entry at the Metal launch.
 */
export function gatedDeltaNetChunkWgCuda(p: Pick<GatedDeltaNetChunkParams, 'batch' | 'nHeads' | 'vDim'>,
  limits: Pick<DeviceLimits, 'maxThreadgroupMemory' | 'multiprocessors'>): CudaLaunch {
  const grid: Dim3 = [p.vDim / GDN_CHUNK_BV, p.nHeads, p.batch];
  return {
    grid, threads: [256, 1, 1], threadgroupMemory: { 0: interStateWgBytes(grid[0] * grid[1] * grid[2], limits) },
    entry: 'gated_delta_net_chunk_inter_state_wg_bf16',
  };
}
export function planGatedDeltaNetChunk(args: GatedDeltaNetChunkArgs, limits: DeviceLimits, device?: Device): OpPlan {
  validateGatedDeltaNetChunk(args, device, limits);
  return planOf({
    kernel: SEED_INTER,
    buffers: [args.k, args.w, args.u, args.g, args.h0, args.hOut, args.vNew, args.finalState],
    bytes: [, , , , , , , , buildGatedDeltaNetChunkParams(args)],
    threadgroupMemory: [gatedDeltaNetChunkThreadgroupBytes(args)],
    grid: [args.vDim / GDN_CHUNK_BV, args.nHeads, args.batch],
    threads: [128, 1, 1],
    ...(interStateUsesWgmma(args.nHeads, args.kDim, args.vDim, limits) ? { cuda: gatedDeltaNetChunkWgCuda(args, limits) } : {}),
  });
}

// ---- the float64 reference ----

// CPU references of the chunked gated delta rule (chunk_gated_delta_rule):
// the token-by-token recurrence, which is the ground truth of the whole
// pipeline, and each chunked step on its own. Plain loops, float64.
//
// Tokens are flat over all sequences; `cuSeqlens` holds the cumulative
// sequence offsets [0, len0, len0 + len1, ..., nTok] (B sequences of T tokens
// are [0, T, 2T, ..., BT]). Chunks are 64 tokens from each sequence's start,
// the last one of a sequence possibly shorter, numbered over all sequences in
// order. Layouts as the kernels: q, k [nTok, Hg, K]; v, o, u, vNew [nTok, H, V];
// w [nTok, H, K]; g, beta [nTok, H]; A, Ai [nTok, H, 64]; states [nSeq, H, V, K];
// chunk-start states [nt, H, V, K].

/** Chunk size of every step. */
export const REF_BT = 64;

export interface GdrRefShape {
  /** K heads. */
  hg: number;
  /** V heads, a multiple of hg. */
  h: number;
  /** Head dimension of q and k. */
  k: number;
  /** Head dimension of v. */
  v: number;
  /** Cumulative sequence offsets, from 0 to the number of tokens. */
  cuSeqlens: readonly number[];
}

export interface RefChunk {
  /** Index over all sequences. */
  index: number;
  /** First token (flat). */
  t0: number;
  /** Tokens, 1..64. */
  len: number;
  seq: number;
}

/** The chunks of every sequence, in order (chunks of bt tokens: 64 but in the seed's cumsum). */
export function refChunks(cuSeqlens: readonly number[], bt = REF_BT): RefChunk[] {
  const out: RefChunk[] = [];
  for (let s = 0; s + 1 < cuSeqlens.length; s++) {
    for (let t0 = cuSeqlens[s]!; t0 < cuSeqlens[s + 1]!; t0 += bt) {
      out.push({ index: out.length, t0, len: Math.min(bt, cuSeqlens[s + 1]! - t0), seq: s });
    }
  }
  return out;
}

/** The offsets of b sequences of t tokens: [0, t, 2t, ..., bt]. */
export function uniformCuSeqlens(b: number, t: number): number[] {
  return Array.from({ length: b + 1 }, (_, i) => i * t);
}

const bf16 = (x: number): number => bf16BitsToF32(f32ToBf16Bits(x));
const same = (x: number): number => x;
const nTokOf = (s: GdrRefShape): number => s.cuSeqlens[s.cuSeqlens.length - 1]!;
const nSeqOf = (s: GdrRefShape): number => s.cuSeqlens.length - 1;

export interface GdrRecurrentInputs {
  /** [nTok, Hg, K] */
  q: ArrayLike<number>;
  /** [nTok, Hg, K] */
  k: ArrayLike<number>;
  /** [nTok, H, V] */
  v: ArrayLike<number>;
  /** [nTok, H], raw log decay (not cumsummed) */
  g: ArrayLike<number>;
  /** [nTok, H] */
  beta: ArrayLike<number>;
  /** [nSeq, H, V, K]; zeros when absent */
  h0?: ArrayLike<number>;
}

/**
 * The gated delta rule token by token, per sequence and V head (kh = head / (H / Hg)),
 * S [V, K] starting at h0:
 *   S = S exp(g_t);  delta = beta_t (v_t - S k_t);  S += delta k_t^T;  o_t = scale S q_t.
 * Returns o [nTok, H, V] and the final states [nSeq, H, V, K].
 */
export function gatedDeltaRuleRecurrentRef(
  s: GdrRefShape, x: GdrRecurrentInputs, scale: number,
): { o: Float64Array; finalState: Float64Array } {
  const { hg: Hg, h: H, k: K, v: V } = s;
  const nTok = nTokOf(s);
  const nSeq = nSeqOf(s);
  const o = new Float64Array(nTok * H * V);
  const finalState = new Float64Array(nSeq * H * V * K);
  const S = new Float64Array(V * K);
  for (let seq = 0; seq < nSeq; seq++) {
    for (let head = 0; head < H; head++) {
      const kh = Math.floor(head / (H / Hg));
      const off = (seq * H + head) * V * K;
      for (let i = 0; i < V * K; i++) S[i] = x.h0 === undefined ? 0 : x.h0[off + i]!;
      for (let t = s.cuSeqlens[seq]!; t < s.cuSeqlens[seq + 1]!; t++) {
        const hr = t * H + head;
        const kr = (t * Hg + kh) * K;
        const a = Math.exp(x.g[hr]!);
        for (let i = 0; i < V * K; i++) S[i] = S[i]! * a;
        for (let vv = 0; vv < V; vv++) {
          let sk = 0;
          for (let kk = 0; kk < K; kk++) sk += S[vv * K + kk]! * x.k[kr + kk]!;
          const d = x.beta[hr]! * (x.v[hr * V + vv]! - sk);
          let sq = 0;
          for (let kk = 0; kk < K; kk++) {
            const sv = S[vv * K + kk]! + d * x.k[kr + kk]!;
            S[vv * K + kk] = sv;
            sq += sv * x.q[kr + kk]!;
          }
          o[hr * V + vv] = scale * sq;
        }
      }
      finalState.set(S, off);
    }
  }
  return { o, finalState };
}

/** g cumsummed within each chunk (of bt tokens, 64 unless given): [nTok, H]. */
export function chunkLocalCumsumVarlenRef(cuSeqlens: readonly number[], h: number, g: ArrayLike<number>, bt = REF_BT): Float64Array {
  const out = new Float64Array(g.length);
  for (const c of refChunks(cuSeqlens, bt)) {
    for (let head = 0; head < h; head++) {
      let acc = 0;
      for (let t = c.t0; t < c.t0 + c.len; t++) {
        acc += g[t * h + head]!;
        out[t * h + head] = acc;
      }
    }
  }
  return out;
}

/**
 * The seed's chunk_local_cumsum: g [b, t, h], h innermost; out[b, t, h] = sum
 * of g[b, s, h] for s from the start of t's chunk (floor(t / bt) * bt) through t.
 */
export function chunkLocalCumsumRef(g: ArrayLike<number>, b: number, t: number, h: number, bt: number): Float64Array {
  return chunkLocalCumsumVarlenRef(uniformCuSeqlens(b, t), h, g, bt);
}

/**
 * A[t0 + i, head, j] = beta_i exp(g_i - g_j) k_i . k_j for j < i, 0 for the
 * other j of the row (0..63). g cumsummed. [nTok, H, 64].
 */
export function kktRef(
  s: GdrRefShape, k: ArrayLike<number>, g: ArrayLike<number>, beta: ArrayLike<number>,
): Float64Array {
  const { hg: Hg, h: H, k: K } = s;
  const a = new Float64Array(nTokOf(s) * H * REF_BT);
  for (const c of refChunks(s.cuSeqlens)) {
    for (let head = 0; head < H; head++) {
      const kh = Math.floor(head / (H / Hg));
      for (let i = 0; i < c.len; i++) {
        const ti = c.t0 + i;
        for (let j = 0; j < i; j++) {
          const tj = c.t0 + j;
          let dot = 0;
          for (let d = 0; d < K; d++) dot += k[(ti * Hg + kh) * K + d]! * k[(tj * Hg + kh) * K + d]!;
          a[(ti * H + head) * REF_BT + j] = beta[ti * H + head]! * Math.exp(g[ti * H + head]! - g[tj * H + head]!) * dot;
        }
      }
    }
  }
  return a;
}

/** Ai = (I + A)^-1 per chunk and head (A strictly lower triangular): [nTok, H, 64]. */
export function triSolveInvertRef(cuSeqlens: readonly number[], h: number, a: ArrayLike<number>): Float64Array {
  const ai = new Float64Array(a.length);
  for (const c of refChunks(cuSeqlens)) {
    for (let head = 0; head < h; head++) {
      const row = (i: number): number => ((c.t0 + i) * h + head) * REF_BT;
      for (let i = 0; i < c.len; i++) {
        for (let col = 0; col <= i; col++) {
          let x = i === col ? 1 : 0;
          for (let j = col; j < i; j++) x -= a[row(i) + j]! * ai[row(j) + col]!;
          ai[row(i) + col] = x;
        }
      }
    }
  }
  return ai;
}

/** w = Ai (beta exp(g) k) [nTok, H, K] and u = Ai (beta v) [nTok, H, V], per chunk; g cumsummed. */
export function recomputeWuRef(
  s: GdrRefShape, k: ArrayLike<number>, v: ArrayLike<number>, beta: ArrayLike<number>, g: ArrayLike<number>, ai: ArrayLike<number>,
): { w: Float64Array; u: Float64Array } {
  const { hg: Hg, h: H, k: K, v: V } = s;
  const nTok = nTokOf(s);
  const w = new Float64Array(nTok * H * K);
  const u = new Float64Array(nTok * H * V);
  for (const c of refChunks(s.cuSeqlens)) {
    for (let head = 0; head < H; head++) {
      const kh = Math.floor(head / (H / Hg));
      for (let i = 0; i < c.len; i++) {
        const ti = c.t0 + i;
        for (let j = 0; j <= i; j++) {
          const tj = c.t0 + j;
          const x = ai[(ti * H + head) * REF_BT + j]!;
          const b = beta[tj * H + head]!;
          const bg = b * Math.exp(g[tj * H + head]!);
          for (let d = 0; d < K; d++) w[(ti * H + head) * K + d] = w[(ti * H + head) * K + d]! + x * bg * k[(tj * Hg + kh) * K + d]!;
          for (let d = 0; d < V; d++) u[(ti * H + head) * V + d] = u[(ti * H + head) * V + d]! + x * b * v[(tj * H + head) * V + d]!;
        }
      }
    }
  }
  return { w, u };
}

export interface InterStateRefInputs {
  /** [nTok, Hg, K] */
  k: ArrayLike<number>;
  /** [nTok, H, K] */
  w: ArrayLike<number>;
  /** [nTok, H, V] */
  u: ArrayLike<number>;
  /** [nTok, H], cumsummed within chunks */
  g: ArrayLike<number>;
  /** [nSeq, H, V, K] */
  h0: ArrayLike<number>;
}

/**
 * The inter-chunk state recurrence per sequence and head, state h [V, K] from h0;
 * per chunk (last = its last token):
 *   hOut[c, head] = R(h)
 *   vn[t, v] = u[t, v] - sum_k w[t, k] R(h)[v, k];   vNew[t, v] = R(vn)
 *   h = h exp(g[last]) + sum_t R(vn[t, v] exp(g[last] - g[t])) k[t, kh, k]
 * R rounds to bf16 (and h to f32 after each chunk) with mirrorBf16, as the
 * kernels store and multiply those values; otherwise everything stays float64.
 */
export function interStateRef(
  s: GdrRefShape, x: InterStateRefInputs, opts: { mirrorBf16: boolean }, bt = REF_BT,
): { hOut: Float64Array; vNew: Float64Array; finalState: Float64Array } {
  const { hg: Hg, h: H, k: K, v: V } = s;
  const R = opts.mirrorBf16 ? bf16 : same;
  const F = opts.mirrorBf16 ? Math.fround : same;
  const chunks = refChunks(s.cuSeqlens, bt);
  const hOut = new Float64Array(chunks.length * H * V * K);
  const vNew = new Float64Array(nTokOf(s) * H * V);
  const finalState = new Float64Array(nSeqOf(s) * H * V * K);
  const hs = new Float64Array(V * K);
  const hr = new Float64Array(V * K);
  const vg = new Float64Array(bt * V);
  for (let seq = 0; seq < nSeqOf(s); seq++) {
    for (let head = 0; head < H; head++) {
      const kh = Math.floor(head / (H / Hg));
      const off = (seq * H + head) * V * K;
      for (let i = 0; i < V * K; i++) hs[i] = x.h0[off + i]!;
      for (const c of chunks) {
        if (c.seq !== seq) continue;
        const gLast = x.g[(c.t0 + c.len - 1) * H + head]!;
        const snap = (c.index * H + head) * V * K;
        for (let i = 0; i < V * K; i++) {
          hr[i] = R(hs[i]!);
          hOut[snap + i] = hr[i]!;
        }
        for (let i = 0; i < c.len; i++) {
          const t = c.t0 + i;
          const gate = Math.exp(gLast - x.g[t * H + head]!);
          for (let vv = 0; vv < V; vv++) {
            let dot = 0;
            for (let kk = 0; kk < K; kk++) dot += x.w[(t * H + head) * K + kk]! * hr[vv * K + kk]!;
            const vn = x.u[(t * H + head) * V + vv]! - dot;
            vNew[(t * H + head) * V + vv] = R(vn);
            vg[i * V + vv] = R(vn * gate);
          }
        }
        const decay = Math.exp(gLast);
        for (let vv = 0; vv < V; vv++) {
          for (let kk = 0; kk < K; kk++) {
            let acc = hs[vv * K + kk]! * decay;
            for (let i = 0; i < c.len; i++) acc += vg[i * V + vv]! * x.k[((c.t0 + i) * Hg + kh) * K + kk]!;
            hs[vv * K + kk] = F(acc);
          }
        }
      }
      finalState.set(hs, off);
    }
  }
  return { hOut, vNew, finalState };
}

export interface GatedDeltaNetChunkRefShape extends GatedDeltaNetRefDims {
  bt: number;
}

export interface GatedDeltaNetChunkRefInputs {
  /** [B, T, Hg, K] */
  k: ArrayLike<number>;
  /** [B, T, H, K] */
  w: ArrayLike<number>;
  /** [B, T, H, V] */
  u: ArrayLike<number>;
  /** [B, T, H], cumsummed within each chunk */
  g: ArrayLike<number>;
  /** [B, H, V, K] */
  h0: ArrayLike<number>;
}

export interface GatedDeltaNetChunkRefOutputs {
  /** [B, NT, H, V, K] chunk-start states */
  hOut: Float64Array;
  /** [B, T, H, V] */
  vNew: Float64Array;
  /** [B, H, V, K] */
  finalState: Float64Array;
}

/**
 * The seed's gated_delta_net_chunk: interStateRef over b sequences of t tokens
 * in chunks of bt. Layouts: k [B, T, Hg, K]; w [B, T, H, K]; u, vNew
 * [B, T, H, V]; g [B, T, H]; h0, finalState [B, H, V, K]; hOut [B, NT, H, V, K].
 */
export function gatedDeltaNetChunkRef(
  s: GatedDeltaNetChunkRefShape, x: GatedDeltaNetChunkRefInputs, opts: { mirrorBf16: boolean },
): GatedDeltaNetChunkRefOutputs {
  return interStateRef({ hg: s.hg, h: s.h, k: s.k, v: s.v, cuSeqlens: uniformCuSeqlens(s.b, s.t) }, x, opts, s.bt);
}

export interface ChunkORefInputs {
  /** [nTok, Hg, K] */
  q: ArrayLike<number>;
  /** [nTok, Hg, K] */
  k: ArrayLike<number>;
  /** [nTok, H, V] */
  vNew: ArrayLike<number>;
  /** [nt, H, V, K] chunk-start states */
  h: ArrayLike<number>;
  /** [nTok, H], cumsummed within chunks */
  g: ArrayLike<number>;
}

/**
 * o[t0 + i, head, v] = scale (exp(g_i) sum_k q_i[k] h[c, head, v, k]
 *                             + sum_{j <= i} R(exp(g_i - g_j) q_i . k_j) vNew[t0 + j, head, v]),
 * R rounding to bf16 with mirrorBf16 (the kernel multiplies the gated scores in bf16).
 */
export function chunkORef(s: GdrRefShape, x: ChunkORefInputs, scale: number, opts: { mirrorBf16: boolean }): Float64Array {
  const { hg: Hg, h: H, k: K, v: V } = s;
  const R = opts.mirrorBf16 ? bf16 : same;
  const o = new Float64Array(nTokOf(s) * H * V);
  const p = new Float64Array(REF_BT);
  for (const c of refChunks(s.cuSeqlens)) {
    for (let head = 0; head < H; head++) {
      const kh = Math.floor(head / (H / Hg));
      const hOff = (c.index * H + head) * V * K;
      for (let i = 0; i < c.len; i++) {
        const ti = c.t0 + i;
        const qOff = (ti * Hg + kh) * K;
        const gi = x.g[ti * H + head]!;
        for (let j = 0; j <= i; j++) {
          const tj = c.t0 + j;
          let dot = 0;
          for (let d = 0; d < K; d++) dot += x.q[qOff + d]! * x.k[(tj * Hg + kh) * K + d]!;
          p[j] = R(dot * Math.exp(gi - x.g[tj * H + head]!));
        }
        const eg = Math.exp(gi);
        for (let vv = 0; vv < V; vv++) {
          let inter = 0;
          for (let d = 0; d < K; d++) inter += x.q[qOff + d]! * x.h[hOff + vv * K + d]!;
          let intra = 0;
          for (let j = 0; j <= i; j++) intra += p[j]! * x.vNew[((c.t0 + j) * H + head) * V + vv]!;
          o[(ti * H + head) * V + vv] = scale * (eg * inter + intra);
        }
      }
    }
  }
  return o;
}

/**
 * Every chunked step composed in float64 without rounding: equals the
 * token-by-token recurrence up to float64 error (a test holds them together).
 */
export function chunkGatedDeltaRuleChunkedRef(
  s: GdrRefShape, x: GdrRecurrentInputs, scale: number,
): { o: Float64Array; finalState: Float64Array } {
  const g = chunkLocalCumsumVarlenRef(s.cuSeqlens, s.h, x.g);
  const a = kktRef(s, x.k, g, x.beta);
  const ai = triSolveInvertRef(s.cuSeqlens, s.h, a);
  const { w, u } = recomputeWuRef(s, x.k, x.v, x.beta, g, ai);
  const h0 = x.h0 ?? new Float64Array(nSeqOf(s) * s.h * s.v * s.k);
  const st = interStateRef(s, { k: x.k, w, u, g, h0 }, { mirrorBf16: false });
  const o = chunkORef(s, { q: x.q, k: x.k, vNew: st.vNew, h: st.hOut, g }, scale, { mirrorBf16: false });
  return { o, finalState: st.finalState };
}
