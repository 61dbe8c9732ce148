// CPU reference of split-KV decode attention (flash_attn_vec and its varlen
// form): plain loops, float64. The split over workgroups does not change the
// math, so the reference is one softmax over the visible keys.

export type FlashAttnVecRefMask = 'none' | 'causal' | 'slidingWindow';

/** What both forms share. */
export interface FlashAttnVecRefCommon {
  batch: number;
  nHeads: number;
  nKvHeads: number;
  headDim: number;
  kvCapacity: number;
  scale: number;
  mask: FlashAttnVecRefMask;
  /** Visible keys under 'slidingWindow'; 0 leaves every key visible. */
  slidingWindow: number;
  /** Logit softcap; 0 disables. */
  softcap: number;
}

export interface FlashAttnVecRefShape extends FlashAttnVecRefCommon {
  kvSeqLen: number;
}

export interface FlashAttnVecVarlenRefShape extends FlashAttnVecRefCommon {
  /** Positions written to each sequence's cache (batch of them). */
  seqLens: ArrayLike<number>;
  /** Slot j % kvCapacity holds position j (the last kvCapacity positions are kept); else slot j holds position j. */
  ring: boolean;
}

/**
 * The visible positions [lo, hi) of a sequence of len positions, and the slot
 * of position j: a global cache keeps positions below kvCapacity in their own
 * slots; a ring keeps the last kvCapacity positions, j in slot j % kvCapacity;
 * a sliding window keeps the last slidingWindow positions of those.
 */
export function flashAttnVecSpan(len: number, kvCapacity: number, ring: boolean, mask: FlashAttnVecRefMask, slidingWindow: number):
  { lo: number; hi: number; slot: (j: number) => number } {
  const hi = ring ? len : Math.min(len, kvCapacity);
  let lo = ring ? Math.max(0, len - kvCapacity) : 0;
  if (mask === 'slidingWindow' && slidingWindow > 0) lo = Math.max(lo, len - slidingWindow);
  return { lo, hi, slot: ring ? (j) => j % kvCapacity : (j) => j };
}

/** Attention of every head of sequence b over its visible keys, written into out. */
function attendSequence(s: FlashAttnVecRefCommon, b: number, span: ReturnType<typeof flashAttnVecSpan>,
  q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>, out: Float64Array): void {
  const D = s.headDim;
  const group = s.nHeads / s.nKvHeads;
  const n = Math.max(0, span.hi - span.lo);
  const scores = new Float64Array(n);
  for (let h = 0; h < s.nHeads; h++) {
    const qOff = (b * s.nHeads + h) * D;
    const kvOff = (b * s.nKvHeads + Math.floor(h / group)) * s.kvCapacity * D;
    let max = -Infinity;
    for (let i = 0; i < n; i++) {
      const row = kvOff + span.slot(span.lo + i) * D;
      let dot = 0;
      for (let d = 0; d < D; d++) dot += q[qOff + d]! * k[row + d]!;
      let x = s.scale * dot;
      if (s.softcap > 0) x = s.softcap * Math.tanh(x / s.softcap);
      scores[i] = x;
      if (x > max) max = x;
    }
    let sum = 0;
    for (let i = 0; i < n; i++) {
      scores[i] = Math.exp(scores[i]! - max);
      sum += scores[i]!;
    }
    for (let i = 0; i < n; i++) {
      const p = scores[i]! / sum;
      const row = kvOff + span.slot(span.lo + i) * D;
      for (let d = 0; d < D; d++) out[qOff + d] = out[qOff + d]! + p * v[row + d]!;
    }
  }
}

/**
 * out[b, h, :] = sum_j p_j * v[b, kh, j, :] with kh = h / (nHeads / nKvHeads),
 * p = softmax over the visible j of s_j = scale * q[b, h, :] . k[b, kh, j, :],
 * capped as softcap * tanh(s_j / softcap) when softcap > 0. The query sits at
 * position kvSeqLen - 1: causal sees every j < kvSeqLen, a sliding window sees
 * j >= kvSeqLen - slidingWindow.
 * q [B, nHeads, D]; k, v [B, nKvHeads, kvCapacity, D] (f16 / bf16 values already decoded);
 * returns [B, nHeads, D].
 */
export function flashAttnVecRef(
  s: FlashAttnVecRefShape, q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>,
): Float64Array {
  const out = new Float64Array(s.batch * s.nHeads * s.headDim);
  for (let b = 0; b < s.batch; b++) {
    attendSequence(s, b, flashAttnVecSpan(s.kvSeqLen, s.kvCapacity, false, s.mask, s.slidingWindow), q, k, v, out);
  }
  return out;
}

/**
 * flashAttnVecRef with sequence b of seqLens[b] positions, over a global
 * cache or a ring (flashAttnVecSpan); a sequence of length 0 gives zeros.
 * Layouts as flashAttnVecRef.
 */
export function flashAttnVecVarlenRef(
  s: FlashAttnVecVarlenRefShape, q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>,
): Float64Array {
  const out = new Float64Array(s.batch * s.nHeads * s.headDim);
  for (let b = 0; b < s.batch; b++) {
    attendSequence(s, b, flashAttnVecSpan(s.seqLens[b]!, s.kvCapacity, s.ring, s.mask, s.slidingWindow), q, k, v, out);
  }
  return out;
}
