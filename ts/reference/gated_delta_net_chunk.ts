// CPU reference of the chunked gated delta rule's inter-chunk state
// recurrence (gated_delta_net_chunk_inter_state_bf16): plain loops, float64.

import { bf16BitsToF32, f32ToBf16Bits } from '../dtype.ts';

export interface GatedDeltaNetChunkRefShape {
  b: number;
  t: number;
  hg: number;
  h: number;
  k: number;
  v: number;
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

const bf16 = (x: number): number => bf16BitsToF32(f32ToBf16Bits(x));
const same = (x: number): number => x;

/**
 * For each (b, head), h = h0[b, head] ([V, K]); per chunk of bt tokens, with
 * `last` the chunk's last token and kh = head / (H / Hg):
 *   hOut[b, c, head] = R(h)
 *   vn[t, v]  = u[t, v] - sum_k w[t, k] * R(h)[v, k];   vNew[t, v] = R(vn)
 *   h[v, k]   = h[v, k] * exp(g[last]) + sum_t R(vn[t, v] * exp(g[last] - g[t])) * k[t, kh, k]
 * finalState[b, head] = h.
 * R rounds to bf16 when mirrorBf16 is set, as the kernel stores and multiplies
 * those values (and then h is also rounded to f32 after each chunk, as the
 * kernel keeps it); without it every value stays float64, the exact chunked
 * form of the token-by-token recurrence.
 */
export function gatedDeltaNetChunkRef(
  s: GatedDeltaNetChunkRefShape, x: GatedDeltaNetChunkRefInputs, opts: { mirrorBf16: boolean },
): GatedDeltaNetChunkRefOutputs {
  const { b: B, t: T, hg: Hg, h: H, k: K, v: V, bt: BT } = s;
  const NT = Math.ceil(T / BT);
  const R = opts.mirrorBf16 ? bf16 : same;
  const F = opts.mirrorBf16 ? Math.fround : same;
  const group = H / Hg;
  const hOut = new Float64Array(B * NT * H * V * K);
  const vNew = new Float64Array(B * T * H * V);
  const finalState = new Float64Array(B * H * V * K);
  const hs = new Float64Array(V * K);
  const hr = new Float64Array(V * K);
  const vg = new Float64Array(BT * V);

  for (let b = 0; b < B; b++) {
    for (let head = 0; head < H; head++) {
      const kh = Math.floor(head / group);
      const stateOff = (b * H + head) * V * K;
      for (let i = 0; i < V * K; i++) hs[i] = x.h0[stateOff + i]!;
      for (let c = 0; c < NT; c++) {
        const t0 = c * BT;
        const t1 = Math.min(t0 + BT, T);
        const gLast = x.g[(b * T + t1 - 1) * H + head]!;
        const snapOff = ((b * NT + c) * H + head) * V * K;
        for (let i = 0; i < V * K; i++) {
          hr[i] = R(hs[i]!);
          hOut[snapOff + i] = hr[i]!;
        }
        for (let t = t0; t < t1; t++) {
          const wOff = ((b * T + t) * H + head) * K;
          const uOff = ((b * T + t) * H + head) * V;
          const gate = Math.exp(gLast - x.g[(b * T + t) * H + head]!);
          for (let vv = 0; vv < V; vv++) {
            let dot = 0;
            for (let kk = 0; kk < K; kk++) dot += x.w[wOff + kk]! * hr[vv * K + kk]!;
            const vn = x.u[uOff + vv]! - dot;
            vNew[uOff + vv] = R(vn);
            vg[(t - t0) * V + vv] = R(vn * gate);
          }
        }
        const decay = Math.exp(gLast);
        for (let vv = 0; vv < V; vv++) {
          for (let kk = 0; kk < K; kk++) {
            let acc = hs[vv * K + kk]! * decay;
            for (let t = t0; t < t1; t++) {
              acc += vg[(t - t0) * V + vv]! * x.k[((b * T + t) * Hg + kh) * K + kk]!;
            }
            hs[vv * K + kk] = F(acc);
          }
        }
      }
      for (let i = 0; i < V * K; i++) finalState[stateOff + i] = hs[i]!;
    }
  }
  return { hOut, vNew, finalState };
}
