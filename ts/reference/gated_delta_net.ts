// CPU reference of the gated delta rule token by token (gated_delta_net,
// gated_delta_net_decode): plain loops, float64 throughout.

/** The sizes of the gated delta rule: sequences, tokens each, K heads, V heads, K and V head dimensions. */
export interface GatedDeltaNetRefDims {
  b: number;
  t: number;
  hg: number;
  h: number;
  k: number;
  v: number;
}

export interface GatedDeltaNetRefShape extends GatedDeltaNetRefDims {
  scale: number;
}

export interface GatedDeltaNetRefInputs {
  /** [B, T, Hg, K] */
  q: ArrayLike<number>;
  /** [B, T, Hg, K] */
  k: ArrayLike<number>;
  /** [B, T, H, V] */
  v: ArrayLike<number>;
  /** [B, T, H] log decay */
  g: ArrayLike<number>;
  /** [B, T, H] */
  beta: ArrayLike<number>;
  /** [B, H, V, K]; zero when absent */
  initialState?: ArrayLike<number>;
}

export interface GatedDeltaNetRefOutputs {
  /** [B, T, H, V] */
  output: Float64Array;
  /** [B, H, V, K] */
  finalState: Float64Array;
}

/**
 * Per (b, head), S [V, K] = initialState[b, head] (or zero), kh = head / (H / Hg):
 *   S = S * exp(g_t);  kv = S k_t;  delta = (v_t - kv) * beta_t;
 *   S = S + delta k_t^T;  output_t = scale * S q_t
 * finalState[b, head] = S after the last token.
 */
export function gatedDeltaNetRef(s: GatedDeltaNetRefShape, x: GatedDeltaNetRefInputs): GatedDeltaNetRefOutputs {
  const { b: B, t: T, hg: Hg, h: H, k: K, v: V, scale } = s;
  const group = H / Hg;
  const output = new Float64Array(B * T * H * V);
  const finalState = new Float64Array(B * H * V * K);
  const S = new Float64Array(V * K);
  for (let b = 0; b < B; b++) {
    for (let head = 0; head < H; head++) {
      const kh = Math.floor(head / group);
      const off = (b * H + head) * V * K;
      for (let i = 0; i < V * K; i++) S[i] = x.initialState === undefined ? 0 : x.initialState[off + i]!;
      for (let t = 0; t < T; t++) {
        const gh = (b * T + t) * H + head;
        const qk = ((b * T + t) * Hg + kh) * K;
        const decay = Math.exp(x.g[gh]!);
        const beta = x.beta[gh]!;
        for (let vv = 0; vv < V; vv++) {
          const row = vv * K;
          let kv = 0;
          for (let kk = 0; kk < K; kk++) {
            S[row + kk] = S[row + kk]! * decay;
            kv += S[row + kk]! * x.k[qk + kk]!;
          }
          const delta = (x.v[gh * V + vv]! - kv) * beta;
          let o = 0;
          for (let kk = 0; kk < K; kk++) {
            S[row + kk] = S[row + kk]! + delta * x.k[qk + kk]!;
            o += S[row + kk]! * x.q[qk + kk]!;
          }
          output[gh * V + vv] = scale * o;
        }
      }
      finalState.set(S, off);
    }
  }
  return { output, finalState };
}
