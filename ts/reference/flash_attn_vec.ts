// CPU reference of split-KV decode attention (flash_attn_vec): plain loops,
// float64. The split over workgroups does not change the math, so the
// reference is one softmax over the visible keys.

export type FlashAttnVecRefMask = 'none' | 'causal' | 'slidingWindow';

export interface FlashAttnVecRefShape {
  batch: number;
  nHeads: number;
  nKvHeads: number;
  headDim: number;
  kvSeqLen: number;
  kvCapacity: number;
  scale: number;
  mask: FlashAttnVecRefMask;
  /** Visible keys under 'slidingWindow'; 0 leaves every key visible. */
  slidingWindow: number;
  /** Logit softcap; 0 disables. */
  softcap: number;
}

/**
 * out[b, h, :] = sum_j p_j * v[b, kh, j, :] with kh = h / (nHeads / nKvHeads),
 * p = softmax over the visible j of s_j = scale * q[b, h, :] . k[b, kh, j, :],
 * capped as softcap * tanh(s_j / softcap) when softcap > 0. The query sits at
 * position kvSeqLen - 1: causal sees every j < kvSeqLen, a sliding window sees
 * j >= kvSeqLen - slidingWindow.
 * q [B, nHeads, D]; k, v [B, nKvHeads, kvCapacity, D] (f16 values already decoded);
 * returns [B, nHeads, D].
 */
export function flashAttnVecRef(
  s: FlashAttnVecRefShape, q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>,
): Float64Array {
  const D = s.headDim;
  const n = s.kvSeqLen;
  const group = s.nHeads / s.nKvHeads;
  const lo = s.mask === 'slidingWindow' && s.slidingWindow > 0 ? Math.max(0, n - s.slidingWindow) : 0;
  const out = new Float64Array(s.batch * s.nHeads * D);
  const scores = new Float64Array(n);
  for (let b = 0; b < s.batch; b++) {
    for (let h = 0; h < s.nHeads; h++) {
      const qOff = (b * s.nHeads + h) * D;
      const kvOff = (b * s.nKvHeads + Math.floor(h / group)) * s.kvCapacity * D;
      let max = -Infinity;
      for (let j = lo; j < n; j++) {
        let dot = 0;
        for (let d = 0; d < D; d++) dot += q[qOff + d]! * k[kvOff + j * D + d]!;
        let x = s.scale * dot;
        if (s.softcap > 0) x = s.softcap * Math.tanh(x / s.softcap);
        scores[j] = x;
        if (x > max) max = x;
      }
      let sum = 0;
      for (let j = lo; j < n; j++) {
        scores[j] = Math.exp(scores[j]! - max);
        sum += scores[j]!;
      }
      for (let j = lo; j < n; j++) {
        const p = scores[j]! / sum;
        const vRow = kvOff + j * D;
        for (let d = 0; d < D; d++) out[qOff + d] = out[qOff + d]! + p * v[vRow + d]!;
      }
    }
  }
  return out;
}
