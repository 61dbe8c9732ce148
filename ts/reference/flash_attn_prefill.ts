// CPU references of flash_attn_prefill: plain loops in float64. The
// attention is one softmax per query row over the keys it sees (the tiling
// and the online softmax do not change the math); the mask builder and the
// tile classifier as their kernels define them.

export interface FlashAttnPrefillRefShape {
  batch: number;
  nHeads: number;
  nKvHeads: number;
  headDim: number;
  /** Query rows per sequence (with cuSeqlens: of q in all sequences). */
  seqLenQ: number;
  /** Keys per sequence (with cuSeqlens: rows of k in all sequences). */
  seqLenK: number;
  /** Rows of the key axis of k and v; seqLenK when absent. */
  kvCapacity?: number;
  scale: number;
  causal: boolean;
  /** Absolute position of query row 0; 0 when absent. */
  qOffset?: number;
  /** Keys with p - j >= slidingWindow are hidden from the query at position p; 0 or absent: no window. */
  slidingWindow?: number;
  /** Logit softcap; 0 or absent disables. */
  softcap?: number;
  /** headMajor [B, H, L, D] (default) or seqMajor [B, L, H, D]; with cuSeqlens always packed [L, H, D]. */
  layout?: 'headMajor' | 'seqMajor';
  /** Offsets of each sequence's query rows and key rows (batch + 1 each). */
  cuSeqlensQ?: ArrayLike<number>;
  cuSeqlensK?: ArrayLike<number>;
  /** An additive mask (added to the scaled, capped score) or a bool one (0 hides), [seqLenQ, seqLenK] (broadcast) or [B, H, seqLenQ, seqLenK]. */
  mask?: { kind: 'additive' | 'bool'; broadcast: boolean; data: ArrayLike<number> };
}

/**
 * out[b, h, i, :] = sum_j p_ij v[b, h / g, j, :], p_i = softmax over the
 * visible j of s_ij = scale q[b, h, i, :] . k[b, h / g, j, :], capped
 * (softcap tanh(s / softcap)) and masked; visible: j below the sequence's
 * key count, j <= qOffset + i when causal, qOffset + i - j < slidingWindow,
 * and not hidden by the mask. A row with no visible key is 0. q, k, v
 * (already decoded) and the result in the layout of the shape.
 */
export function flashAttnPrefillRef(s: FlashAttnPrefillRefShape, q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>): Float64Array {
  const D = s.headDim;
  const H = s.nHeads;
  const Hkv = s.nKvHeads;
  const group = H / Hkv;
  const varlen = s.cuSeqlensQ !== undefined;
  const layout = varlen ? 'seqMajor' : (s.layout ?? 'headMajor');
  const cap = s.kvCapacity ?? s.seqLenK;
  const W = s.slidingWindow ?? 0;
  const out = new Float64Array(varlen ? s.seqLenQ * H * D : s.batch * H * s.seqLenQ * D);
  // Element offset of (sequence b, head h, row r) in a [B, heads, rows, D] or [B, rows, heads, D] tensor.
  const at = (b: number, h: number, r: number, heads: number, rows: number): number =>
    varlen ? (r * heads + h) * D : layout === 'headMajor' ? ((b * heads + h) * rows + r) * D : ((b * rows + r) * heads + h) * D;
  const scores = new Float64Array(varlen ? s.seqLenK : s.seqLenK);
  for (let b = 0; b < s.batch; b++) {
    const q0 = varlen ? s.cuSeqlensQ![b]! : 0;
    const qn = varlen ? s.cuSeqlensQ![b + 1]! - q0 : s.seqLenQ;
    const k0 = varlen ? s.cuSeqlensK![b]! : 0;
    const kn = varlen ? s.cuSeqlensK![b + 1]! - k0 : s.seqLenK;
    const off = varlen ? kn - qn : (s.qOffset ?? 0);
    for (let h = 0; h < H; h++) {
      const kh = Math.floor(h / group);
      for (let i = 0; i < qn; i++) {
        const p = off + i;
        const qo = at(b, h, q0 + i, H, s.seqLenQ);
        let max = -Infinity;
        for (let j = 0; j < kn; j++) {
          scores[j] = -Infinity;
          if (s.causal && j > p) continue;
          if (W > 0 && p - j >= W) continue;
          const ko = at(b, kh, k0 + j, Hkv, cap);
          let dot = 0;
          for (let d = 0; d < D; d++) dot += q[qo + d]! * k[ko + d]!;
          let x = s.scale * dot;
          if (s.softcap !== undefined && s.softcap > 0) x = s.softcap * Math.tanh(x / s.softcap);
          if (s.mask !== undefined) {
            const mi = s.mask.broadcast ? i * s.seqLenK + j : ((b * H + h) * s.seqLenQ + i) * s.seqLenK + j;
            const m = s.mask.data[mi]!;
            if (s.mask.kind === 'bool') {
              if (m === 0) continue;
            } else {
              x += m;
            }
          }
          scores[j] = x;
          if (x > max) max = x;
        }
        if (max === -Infinity) continue;
        let sum = 0;
        for (let j = 0; j < kn; j++) {
          const e = scores[j] === -Infinity ? 0 : Math.exp(scores[j]! - max);
          scores[j] = e;
          sum += e;
        }
        const oo = at(b, h, q0 + i, H, s.seqLenQ);
        for (let j = 0; j < kn; j++) {
          if (scores[j] === 0) continue;
          const w = scores[j]! / sum;
          const vo = at(b, kh, k0 + j, Hkv, cap);
          for (let d = 0; d < D; d++) out[oo + d] = out[oo + d]! + w * v[vo + d]!;
        }
      }
    }
  }
  return out;
}

/** The mask builder: [seqLenQ, seqLenK] of 0 (seen) and -inf (hidden: causal and k > a, or a - k >= slidingWindow; a = qOffset + q). */
export function flashAttnPrefillMaskRef(p: { seqLenQ: number; seqLenK: number; causal: boolean; slidingWindow?: number; qOffset?: number }): Float64Array {
  const out = new Float64Array(p.seqLenQ * p.seqLenK);
  for (let q = 0; q < p.seqLenQ; q++) {
    const a = q + (p.qOffset ?? 0);
    for (let k = 0; k < p.seqLenK; k++) {
      const hidden = (p.causal && k > a) || (p.slidingWindow !== undefined && a - k >= p.slidingWindow);
      out[q * p.seqLenK + k] = hidden ? -Infinity : 0;
    }
  }
  return out;
}

/**
 * The tile classes of a [seqLenQ, seqLenK] additive mask at tiles of (bq,
 * bk): 0 when the tile's largest value is <= -1e30, 2 when every value is 0,
 * else 1; a tile crossing seqLenK is 1; rows past seqLenQ do not count (a
 * tile of none is 0). [ceil(seqLenQ / bq), ceil(seqLenK / bk)].
 */
export function flashAttnPrefillBlkRef(mask: ArrayLike<number>, seqLenQ: number, seqLenK: number, bq: number, bk: number): Uint8Array {
  const nq = Math.ceil(seqLenQ / bq);
  const nk = Math.ceil(seqLenK / bk);
  const out = new Uint8Array(nq * nk);
  for (let qt = 0; qt < nq; qt++) {
    for (let kt = 0; kt < nk; kt++) {
      let res: number;
      if ((kt + 1) * bk > seqLenK) {
        res = 1;
      } else {
        let mn = Infinity;
        let mx = -Infinity;
        for (let r = qt * bq; r < Math.min(seqLenQ, (qt + 1) * bq); r++) {
          for (let c = kt * bk; c < (kt + 1) * bk; c++) {
            const x = mask[r * seqLenK + c]!;
            mn = Math.min(mn, x);
            mx = Math.max(mx, x);
          }
        }
        res = mx <= -1e30 ? 0 : mn === 0 && mx === 0 ? 2 : 1;
      }
      out[qt * nk + kt] = res;
    }
  }
  return out;
}
