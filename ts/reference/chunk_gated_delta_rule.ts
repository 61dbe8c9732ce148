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

import { bf16BitsToF32, f32ToBf16Bits } from '../dtype.ts';
import type { GatedDeltaNetRefDims } from './gated_delta_net.ts';

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
