// Qwen3.6 (transformers' qwen3_5_moe text model, modeling_qwen3_5_moe.py)
// on mlx-native's ops. Every layer:
//   h += mixer(rms_norm(h) * (1 + w_in));  h += moe(rms_norm(h) * (1 + w_post))
// where the mixer is a gated delta net (linear_attention layers) or gated
// full attention (full_attention layers), and the MoE block is a top-k
// softmax router over the experts plus a shared expert gated by
// sigmoid(x w_sg). Then rms_norm(h) * (1 + w), and logits = h W_lm^T.
//
// Gated delta net, per token (transformers' Qwen3_5MoeGatedDeltaNet; a
// prompt runs the chunked form on bf16 inputs by default, the token-by-token
// recurrence in f32 with precision 'exact'):
//   [q k v] = silu(causal_conv1d(x W_qkv^T)) (kernel 4, a state of the last 3 inputs)
//   q, k = l2_norm per head; g = -exp(A_log) softplus(x W_a^T + dt_bias); beta = sigmoid(x W_b^T)
//   S = S exp(g); S += beta (v - S k) k^T; o = S q / sqrt(K)   (value head h reads key head h / (Hv / Hk))
//   out = (rms_norm(o) * w_norm * silu(x W_z^T)) W_out^T
// Gated attention (Qwen3_5MoeAttention): q_proj gives per head the query and
// an output gate; q, k get a per-head rms_norm * (1 + w) and rotary embedding
// on their first rotaryDim elements; softmax(q k^T / sqrt(D)) v over the
// causal context; out = (attn * sigmoid(gate)) W_o^T.
//
// Load-time rearrangements (exact; they change no value):
// - Hugging Face rotates the pairs (i, i + rotaryDim / 2) inside the first
//   rotaryDim elements of a head; the rope kernels rotate (i, i + D / 2).
//   The rows of q_proj's query part and of k_proj (with the q/k norm
//   weights) are permuted within each head so that HF's pair i lands on the
//   kernels' pair i; q . k is the same under one permutation of both. The
//   kernels' frequency theta^(-2i / D) becomes HF's theta^(-2i / rotaryDim)
//   with theta' = theta^(D / rotaryDim).
// - q_proj's rows (per head: D query rows, then D gate rows) are split into
//   a query projection and a gate projection.
// - The (1 + w) norm weights are stored as 1 + w in f32 (exact for bf16 w).
// - The routed experts stay as stored (blocks.ts RoutedExperts: a fused
//   gate_up tensor is two views of one buffer; per-expert tensors are
//   stacked), widened to f32 for the 'exact' precision when dense.
//
// The MoE block runs each token's top-k experts alone (blocks.ts
// routedExperts), then moe_weighted_reduce adds their weighted outputs, the
// shared expert times sigmoid(x w_sg) and the residual in one pass (before
// another layer, moe_weighted_reduce_norm, which also writes that layer's
// input norm). A
// shared expert as wide as the routed ones and stored as they are is also
// stacked after them as expert E, and a decode step runs it as slot k of the
// per-expert products (sharedIds) instead of its own products.
//
// A decode step runs the projections of one input stored alike as one
// product (blocks.ts project): the gated delta net's qkv, z, a and b; the
// attention's query, gate, keys and values; the router, the shared expert's
// gate and up (unless it runs as a slot) and its gate logit. The residual
// add and the next norm are one fused_residual_norm; the gated delta net's
// q / k norms, gates and recurrence one gated_delta_net_decode_fused.

import type { Buffer } from '../buffer.ts';
import type { Device } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { computeGBeta } from '../ops/compute_g_beta.ts';
import { chunkGatedDeltaRule, GDR_K_VALUES, GDR_MAX_V, GDR_V_MULTIPLE } from '../ops/chunk_gated_delta_rule.ts';
import { cast } from '../ops/elementwise.ts';
import { fusedResidualNorm } from '../ops/fused_norm.ts';
import { moeWeightedReduce, moeWeightedReduceNorm, type MoeWeightedReduceArgs } from '../ops/moe_weighted_reduce.ts';
import { fusedHeadNormRopeQkv } from '../ops/fused_head_norm_rope.ts';
import { gatedDeltaNet, gatedDeltaNetDecodeFused, type GatedDeltaNetDecodeFusedArgs } from '../ops/gated_delta_net.ts';
import { l2Norm } from '../ops/l2_norm.ts';
import { rmsNorm } from '../ops/rms_norm.ts';
import { sigmoidMul } from '../ops/sigmoid_mul.ts';
import { siluMulHalves } from '../ops/silu_mul.ts';
import { ssmConv, ssmConvDecode } from '../ops/ssm_conv.ts';
import { ssmNormGate } from '../ops/ssm_norm_gate.ts';
import type { Qwen35MoeLayer, Qwen35MoeWeights, TensorRef } from '../weights/index.ts';
import { invalid } from '../validate.ts';
import { linear, project, routedExperts, rows, type Linear, type Projection, type RoutedExperts } from './blocks.ts';
import { attentionDecode, attentionPrefill, fillCache, newKvCache, releaseKvCache, type AttentionSpec, type KvCache } from './attention.ts';
import { Checkpoint, type EmbeddingTable } from './checkpoint.ts';
import type { Qwen35MoeConfig } from './config.ts';
import { expertsFor } from './experts.ts';
import { CausalLM, type ModelOptions } from './model.ts';

interface GatedDeltaNetWeights {
  /** in_proj_qkv [C, H], in_proj_z, in_proj_a and in_proj_b, in this order. */
  readonly inProj: Projection;
  /** in_proj_qkv's q, k and v row blocks. */
  readonly q: Linear;
  readonly k: Linear;
  readonly v: Linear;
  readonly z: Linear;
  readonly a: Linear;
  readonly b: Linear;
  readonly out: Linear;
  /** conv1d [C, KS] f32. */
  readonly conv: Buffer;
  readonly aLog: Buffer;
  readonly dtBias: Buffer;
  /** The output norm's weight [V] f32. */
  readonly norm: Buffer;
}

interface GatedAttentionWeights {
  /** q, gate, k and v, in this order. */
  readonly inProj: Projection;
  readonly q: Linear;
  readonly gate: Linear;
  readonly k: Linear;
  readonly v: Linear;
  readonly o: Linear;
  /** 1 + w, permuted as the rows of q and k, f32 [D]. */
  readonly qNorm: Buffer;
  readonly kNorm: Buffer;
}

interface MoeWeights {
  /**
   * router, sharedGateUp and sharedGate, in this order; router and
   * sharedGate alone where the experts hold the shared expert (a decode step
   * then runs it as one more slot: experts.sharedSlot).
   */
  readonly inProj: Projection;
  readonly router: Linear;
  readonly experts: RoutedExperts;
  /** The shared expert's gate and up stacked [2 Is, H], and its down [H, Is] (what a prompt runs). */
  readonly sharedGateUp: Linear;
  readonly sharedDown: Linear;
  /** [1, H] */
  readonly sharedGate: Linear;
}

interface LayerWeights {
  readonly type: 'linear_attention' | 'full_attention';
  readonly inputNorm: Buffer;
  readonly postNorm: Buffer;
  readonly gdn: GatedDeltaNetWeights | null;
  readonly attn: GatedAttentionWeights | null;
  readonly moe: MoeWeights;
}

/** A layer's state across steps: the conv history and recurrent state, or the KV cache. */
interface LayerState {
  /** [C, KS - 1] f32, oldest input first. */
  readonly conv: Buffer | null;
  /** [Hv, V, K] f32. */
  readonly recurrent: Buffer | null;
  readonly kv: KvCache | null;
}

/** new row i of a head takes stored row perm[i]: HF's pairs (i, i + r/2), i < r/2, onto (i, i + D/2). */
export function rotaryPermutation(headDim: number, rotaryDim: number): number[] {
  const half = headDim / 2, rh = rotaryDim / 2, pass = half - rh;
  const perm: number[] = [];
  for (let j = 0; j < headDim; j++) {
    if (j < rh) perm.push(j);
    else if (j < half) perm.push(rotaryDim + (j - rh));
    else if (j < half + rh) perm.push(rh + (j - half));
    else perm.push(rotaryDim + pass + (j - half - rh));
  }
  return perm;
}

export class Qwen35Moe extends CausalLM {
  declare readonly config: Qwen35MoeConfig;
  private readonly embedTable: EmbeddingTable;
  private readonly lmHead: Linear;
  private readonly finalNorm: Buffer;
  private readonly layers: LayerWeights[];
  private readonly state: LayerState[];
  private readonly ropeTheta: number;
  /**
   * Key heads the gated delta net runs: the config's, or one per value head
   * where a GGUF file stores the value heads tiled (Hk > 1, Hk != Hv: value
   * head j reads key head j % Hk, so the key heads are repeated into that
   * order and every value-head tensor, out_proj's columns included, stays as
   * stored).
   */
  private readonly keyHeads: number;
  /**
   * u32 [1, k + 1] where a layer's experts hold its shared expert: a decode
   * step's routing writes the first k ids, the last stays numExperts (the
   * shared expert's slot in the stacks). Null otherwise.
   */
  private readonly sharedIds: Buffer | null;

  constructor(device: Device, config: Qwen35MoeConfig, ckpt: Checkpoint, names: Qwen35MoeWeights, opts: ModelOptions = {}) {
    super(device, config, ckpt, opts);
    const c = config;
    ({ table: this.embedTable, head: this.lmHead } = this.embeddingAndHead(names));
    this.finalNorm = onePlus(ckpt, names.finalNorm);
    this.ropeTheta = c.ropeTheta ** (c.headDim / c.rotaryDim);
    const hk = c.linearNumKeyHeads, hv = c.linearNumValueHeads;
    this.keyHeads = names.naming === 'gguf' && hk > 1 && hk !== hv ? hv : hk;
    this.layers = names.layers.map((l) => this.loadLayer(l));
    this.state = this.layers.map((l) => this.newState(l));
    this.sharedIds = null;
    if (this.layers.some((l) => l.moe.experts.sharedSlot)) {
      this.sharedIds = device.alloc('u32', [1, c.numExpertsPerTok + 1]);
      this.sharedIds.writeNumbers(Array.from({ length: c.numExpertsPerTok + 1 }, (_, i) => (i === c.numExpertsPerTok ? c.numExperts : 0)));
    }
  }

  private loadLayer(l: Qwen35MoeLayer): LayerWeights {
    const c = this.config, ck = this.ckpt;
    if (l.type !== c.layerTypes[l.index]) throw invalid('loadModel', `layer ${l.index}`, `a ${c.layerTypes[l.index]} layer (config.json)`, l.type);
    let gdn: GatedDeltaNetWeights | null = null;
    let attn: GatedAttentionWeights | null = null;
    if (l.linearAttention !== null) {
      const w = l.linearAttention;
      const dk = c.linearKeyHeadDim, storedKd = c.linearNumKeyHeads * dk, kd = this.keyHeads * dk, vd = c.linearNumValueHeads * c.linearValueHeadDim;
      const inRows = ck.shape(w.inProjQkv)[0]!;
      if (inRows !== 2 * storedKd + vd) throw invalid('loadModel', `${w.inProjQkv.name} rows`, `2 * ${storedKd} + ${vd} (the config's heads)`, inRows);
      // Value heads in GGUF's tiled order read key head j % Hk: the q and k rows (and conv channels) repeated per value head.
      const channelRows = this.keyHeads === c.linearNumKeyHeads ? undefined : [
        ...Array.from({ length: kd }, (_, i) => (Math.floor(i / dk) % c.linearNumKeyHeads) * dk + (i % dk)),
        ...Array.from({ length: kd }, (_, i) => storedKd + (Math.floor(i / dk) % c.linearNumKeyHeads) * dk + (i % dk)),
        ...Array.from({ length: vd }, (_, i) => 2 * storedKd + i),
      ];
      const inProj = ck.projection([[{ ref: w.inProjQkv, rows: channelRows }], [{ ref: w.inProjZ }], [{ ref: w.inProjA }], [{ ref: w.inProjB }]]);
      const [qkv, z, a, b] = inProj.layers as [Linear, Linear, Linear, Linear];
      const stored = ck.host(w.conv1d), ks = c.convKernel;
      const convVals = channelRows === undefined ? stored : new Float32Array(channelRows.length * ks);
      channelRows?.forEach((r, i) => convVals.set(stored.subarray(r * ks, (r + 1) * ks), i * ks));
      gdn = {
        inProj,
        q: Checkpoint.rowsView(qkv, 0, kd),
        k: Checkpoint.rowsView(qkv, kd, kd),
        v: Checkpoint.rowsView(qkv, 2 * kd, vd),
        z, a, b,
        out: ck.linear([{ ref: w.outProj }]),
        conv: ck.f32(convVals, [qkv.n, c.convKernel]),
        aLog: ck.f32(ck.hf(w.aLog), [c.linearNumValueHeads]),
        dtBias: ck.f32(ck.host(w.dtBias), [c.linearNumValueHeads]),
        norm: ck.f32(ck.host(w.norm), [c.linearValueHeadDim]),
      };
    } else if (l.fullAttention !== null) {
      const w = l.fullAttention;
      const d = c.headDim;
      const perm = rotaryPermutation(d, c.rotaryDim);
      const qRows: number[] = [], gateRows: number[] = [], kRows: number[] = [];
      for (let h = 0; h < c.numHeads; h++) {
        for (const p of perm) qRows.push(h * 2 * d + p);
        for (let i = 0; i < d; i++) gateRows.push(h * 2 * d + d + i);
      }
      for (let h = 0; h < c.numKvHeads; h++) for (const p of perm) kRows.push(h * d + p);
      const permuted = (ref: TensorRef) => {
        const v = ck.onePlus(ref);
        return ck.f32(Float32Array.from(perm, (p) => v[p]!), [d]);
      };
      const inProj = ck.projection([[{ ref: w.qProj, rows: qRows }], [{ ref: w.qProj, rows: gateRows }], [{ ref: w.kProj, rows: kRows }], [{ ref: w.vProj }]]);
      const [q, gate, k, v] = inProj.layers as [Linear, Linear, Linear, Linear];
      attn = {
        inProj, q, gate, k, v,
        o: ck.linear([{ ref: w.oProj }]),
        qNorm: permuted(w.qNorm),
        kNorm: permuted(w.kNorm),
      };
    }
    const m = l.moe;
    const s = m.sharedExpert;
    // A shared expert as wide as the routed ones, stored as they are, is stacked after them as one more expert.
    const experts = expertsFor(ck, m.experts, c.numExperts, c.moeIntermediateSize, c.hiddenSize, 'silu', null,
      ck.dtype === 'f32' || this.precision === 'exact', `layer ${l.index}`,
      c.sharedExpertIntermediateSize === c.moeIntermediateSize ? s : null);
    let inProj: Projection, router: Linear, sharedGateUp: Linear, sharedGate: Linear;
    if (experts.sharedSlot) {
      inProj = ck.projection([[{ ref: m.router }], [{ ref: m.sharedExpertGate }]]);
      [router, sharedGate] = inProj.layers as [Linear, Linear];
      sharedGateUp = ck.linear([{ ref: s.gate }, { ref: s.up }]);
    } else {
      inProj = ck.projection([[{ ref: m.router }], [{ ref: s.gate }, { ref: s.up }], [{ ref: m.sharedExpertGate }]]);
      [router, sharedGateUp, sharedGate] = inProj.layers as [Linear, Linear, Linear];
    }
    return {
      type: l.type,
      inputNorm: onePlus(ck, l.inputNorm),
      postNorm: onePlus(ck, l.postAttentionNorm),
      gdn, attn,
      moe: { inProj, router, sharedGateUp, sharedGate, experts, sharedDown: ck.linear([{ ref: s.down }]) },
    };
  }

  private newState(l: LayerWeights): LayerState {
    const c = this.config;
    if (l.type === 'linear_attention') {
      const channels = 2 * this.keyHeads * c.linearKeyHeadDim + c.linearNumValueHeads * c.linearValueHeadDim;
      return {
        conv: this.device.alloc('f32', [channels, c.convKernel - 1]),
        recurrent: this.device.alloc('f32', [c.linearNumValueHeads, c.linearValueHeadDim, c.linearKeyHeadDim]),
        kv: null,
      };
    }
    return { conv: null, recurrent: null, kv: newKvCache(this.device, c.numKvHeads, c.headDim, this.maxContext, false) };
  }

  protected resetState(tokens: number): void {
    // The prompt's first tokens overwrite the caches. A prompt of more than
    // one token runs the prompt forms, which start the conv and recurrent
    // states from zeros without reading them (ssm_conv's freshState, the
    // chunked and recurrent rules without initialState) and write them at
    // the end; one token runs the decode forms, which read them: only then
    // are they cleared here, from the host (63 MB at Qwen3.6-35B-A3B's
    // size, which a CPU profile of a 64-token prompt on an H100 machine put
    // at about 45 ms of its 62 ms of host time).
    if (tokens > 1) return;
    for (const s of this.state) {
      s.conv?.fill(0);
      s.recurrent?.fill(0);
    }
  }

  protected releaseWeights(): void {
    this.sharedIds?.release();
    for (const s of this.state ?? []) {
      s.conv?.release();
      s.recurrent?.release();
      if (s.kv !== null) releaseKvCache(s.kv);
    }
  }

  protected forward(enc: Encoder, ids: Buffer, t: number, logitRows: number, logitsOut: Buffer, _hostIds: readonly number[] | null): void {
    const c = this.config, s = this.scratch, H = c.hiddenSize;
    const h = s.get('h', 'f32', [t, H]);
    const x = s.get('x', 'f32', [t, H]);
    const y = s.get('y', 'f32', [t, H]);
    this.embed(enc, this.embedTable, ids, h, t);
    const positions = this.positions(t);
    rmsNorm(enc, { input: h, weight: this.layers[0]!.inputNorm, output: x, rows: t, dim: H, eps: c.rmsNormEps });
    for (const [i, l] of this.layers.entries()) {
      // x = rms_norm(h) * (1 + w_in) here: the first norm, or the layer before's MoE reduction wrote it.
      if (l.gdn !== null) this.gatedDeltaNet(enc, l.gdn, this.state[i]!, x, y, t);
      else this.gatedAttention(enc, l.attn!, this.state[i]!.kv!, x, y, t, positions);
      // h += y; x = rms_norm(h) * (1 + w_post)
      fusedResidualNorm(enc, { residual: h, input: y, weight: l.postNorm, normedOutput: x, sumOutput: h, rows: t, dim: H, eps: c.rmsNormEps });
      this.moe(enc, l.moe, x, h, t, this.layers[i + 1]?.inputNorm);
      this.layerDone(enc);
    }
    const last = rows(h, t - logitRows, logitRows, H);
    const xn = s.get('xLast', 'f32', [logitRows, H]);
    rmsNorm(enc, { input: last, weight: this.finalNorm, output: xn, rows: logitRows, dim: H, eps: c.rmsNormEps });
    linear(enc, this.lmHead, xn, logitsOut, logitRows, this.precision, this.scratch);
  }

  private gatedDeltaNet(enc: Encoder, w: GatedDeltaNetWeights, st: LayerState, x: Buffer, out: Buffer, t: number): void {
    const c = this.config, s = this.scratch, p = this.precision;
    const hk = this.keyHeads, hv = c.linearNumValueHeads, dk = c.linearKeyHeadDim, dv = c.linearValueHeadDim;
    const kd = hk * dk, vd = hv * dv, channels = 2 * kd + vd, ks = c.convKernel;
    const conv = st.conv!, state = st.recurrent!;
    let q: Buffer, k: Buffer, v: Buffer, a: Buffer, b: Buffer, z: Buffer;
    if (t === 1) {
      // One token: one product for qkv, z, a and b, one conv step over all channels; q, k, v are its column blocks.
      let mixed: Buffer;
      [mixed, z, a, b] = project(enc, s, 'gdn.in', w.inProj, x, 1, p) as [Buffer, Buffer, Buffer, Buffer];
      const convOut = s.get('gdn.conv', 'f32', [1, channels]);
      ssmConvDecode(enc, { x: mixed, weight: w.conv, state: conv, y: convOut, b: 1, c: channels, ks, silu: true });
      // q and k before their l2 norm: the fused decode step below applies it.
      q = convOut.view('f32', [1, hk, dk], 0);
      k = convOut.view('f32', [1, hk, dk], kd * 4);
      v = convOut.view('f32', [1, hv, dv], 2 * kd * 4);
    } else {
      // A prompt: q, k and v projected and convolved apart (each token-major), the conv state in three channel blocks.
      const parts: [Linear, number, number][] = [[w.q, 0, kd], [w.k, kd, kd], [w.v, 2 * kd, vd]];
      const outs = parts.map(([lin, at, n], j) => {
        const proj = s.get(`gdn.proj${j}`, 'f32', [t, n]);
        const y = s.get(`gdn.conv${j}`, 'f32', [t, n]);
        linear(enc, lin, x, proj, t, p, this.scratch);
        ssmConv(enc, {
          x: proj, weight: rows(w.conv, at, n, ks), state: rows(conv, at, n, ks - 1), y,
          b: 1, t, c: n, ks, silu: true, freshState: true,
        });
        return y;
      });
      q = outs[0]!;
      k = outs[1]!;
      v = outs[2]!;
      l2Norm(enc, { x: q, y: q, rows: t * hk, dim: dk, eps: 1e-6 });
      l2Norm(enc, { x: k, y: k, rows: t * hk, dim: dk, eps: 1e-6 });
      a = s.get('gdn.a', 'f32', [t, hv]);
      b = s.get('gdn.b', 'f32', [t, hv]);
      z = s.get('gdn.z', 'f32', [t, vd]);
      linear(enc, w.a, x, a, t, p, this.scratch);
      linear(enc, w.b, x, b, t, p, this.scratch);
      linear(enc, w.z, x, z, t, p, this.scratch);
    }
    const o = s.get('gdn.o', 'f32', [t, vd]);
    const dims = { batch: 1, nQkHeads: hk, nHeads: hv, kDim: dk, vDim: dv };
    if (t === 1) {
      // One dispatch for the l2 norms of q and k, the gates and the recurrence.
      gatedDeltaNetDecodeFused(enc, { ...dims, q, k, v, a, b, aLog: w.aLog, dtBias: w.dtBias, state, output: o, eps: 1e-6 });
    } else {
      this.gatedDeltaRule(enc, { ...dims, q, k, v, a, b, aLog: w.aLog, dtBias: w.dtBias, state, output: o }, t);
    }
    ssmNormGate(enc, { attnOut: o, weight: w.norm, z, output: o, rows: t * hv, dV: dv, eps: c.rmsNormEps });
    linear(enc, w.out, o, out, t, p, this.scratch);
  }

  /** A prompt's gates and recurrence: compute_g_beta, then the chunked form ('fast', K and V it takes) or the recurrent one. */
  private gatedDeltaRule(enc: Encoder, r: GatedDeltaRuleInputs, t: number): void {
    const s = this.scratch, p = this.precision;
    const { q, k, v, a, b, aLog, dtBias, state, output: o, ...dims } = r;
    const hv = dims.nHeads, dk = dims.kDim, dv = dims.vDim, kd = dims.nQkHeads * dk, vd = hv * dv;
    const g = s.get('gdn.g', 'f32', [t, hv]);
    const beta = s.get('gdn.beta', 'f32', [t, hv]);
    computeGBeta(enc, { a, b, aLog, dtBias, g, beta, batch: 1, seqLen: t, nHeads: hv });
    if (p === 'fast' && chunked(dk, dv)) {
      // The chunked form (64-token chunks on matrix units) over bf16 q, k, v; its output bf16, the state f32.
      const q16 = s.get('gdn.q16', 'bf16', [t, kd]);
      const k16 = s.get('gdn.k16', 'bf16', [t, kd]);
      const v16 = s.get('gdn.v16', 'bf16', [t, vd]);
      const o16 = s.get('gdn.o16', 'bf16', [t, vd]);
      cast(enc, { input: q, output: q16 });
      cast(enc, { input: k, output: k16 });
      cast(enc, { input: v, output: v16 });
      chunkGatedDeltaRule(enc, { ...dims, seqLen: t, q: q16, k: k16, v: v16, g, beta, o: o16, finalState: state });
      cast(enc, { input: o16, output: o });
    } else {
      gatedDeltaNet(enc, { ...dims, seqLen: t, q, k, v, g, beta, output: o, finalState: state });
    }
  }

  private gatedAttention(enc: Encoder, w: GatedAttentionWeights, cache: KvCache, x: Buffer, out: Buffer, t: number, positions: Buffer): void {
    const c = this.config, s = this.scratch, p = this.precision, d = c.headDim;
    const [qRows, gate, kRows, vRows] = project(enc, s, 'attn.in', w.inProj, x, t, p) as [Buffer, Buffer, Buffer, Buffer];
    const q = qRows.view('f32', [t, c.numHeads, d], 0);
    const k = kRows.view('f32', [t, c.numKvHeads, d], 0);
    const v = vRows.view('f32', [t, c.numKvHeads, d], 0);
    const o = s.get('attn.o', 'f32', [t, c.numHeads, d]);
    const rope = { positions, seqLen: t, headDim: d, halfRopeDim: c.rotaryDim / 2, eps: c.rmsNormEps, theta: this.ropeTheta };
    fusedHeadNormRopeQkv(enc, { ...rope, q, k, qWeight: w.qNorm, kWeight: w.kNorm, nHeads: c.numHeads, nKvHeads: c.numKvHeads });
    const spec: AttentionSpec = { nHeads: c.numHeads, nKvHeads: c.numKvHeads, headDim: d, scale: 1 / Math.sqrt(d), window: null };
    if (t === 1) {
      attentionDecode(enc, s, spec, cache, q, k, v, o, this.position, this.steps);
    } else {
      attentionPrefill(enc, s, spec, q, k, v, o, t, this.prefillAttention);
      fillCache(enc, cache, k, v, t);
    }
    sigmoidMul(enc, { x: o, gate, output: o });
    linear(enc, w.o, o.view('f32', [t, c.numHeads * d], 0), out, t, p, this.scratch);
  }

  /**
   * h += the MoE block of x: the routed experts, the shared expert gated by
   * sigmoid(x w_sg); then, given the next layer's input norm weight, x =
   * rms_norm(h) * it (in the reduction's dispatch).
   */
  private moe(enc: Encoder, w: MoeWeights, x: Buffer, h: Buffer, t: number, nextNorm: Buffer | undefined): void {
    const c = this.config, s = this.scratch, p = this.precision, H = c.hiddenSize, k = c.numExpertsPerTok;
    if (w.experts.sharedSlot) {
      const [logits, g] = project(enc, s, 'moe.in', w.inProj, x, t, p) as [Buffer, Buffer];
      if (t === 1) {
        // The shared expert as slot k of the products (its id, numExperts, stays in sharedIds after the routed ones).
        const routed = routedExperts(enc, s, w.experts, x, logits, 1, k, p, this.sharedIds!);
        let y = routed.outputs;
        if (y.dtype === 'f16') {
          y = s.get('moe.out.f32', 'f32', [1, k + 1, H]);
          cast(enc, { input: routed.outputs, output: y });
        }
        const size = y.dtype === 'f32' ? 4 : 2;
        this.reduce(enc, {
          expertW: routed.weights, yExpert: y.view(y.dtype, [1, k, H], 0), shLogit: g.view('f32', [1], 0),
          yShared: y.view(y.dtype, [1, H], k * H * size), residual: h, output: h, nTokens: 1, topK: k, h: H,
        }, x, nextNorm);
        return;
      }
      const gu = s.get('moe.sharedGateUp', 'f32', [t, w.sharedGateUp.n]);
      linear(enc, w.sharedGateUp, x, gu, t, p, this.scratch);
      this.moeRest(enc, w, x, h, t, logits, gu, g, nextNorm);
      return;
    }
    const [logits, gu, g] = project(enc, s, 'moe.in', w.inProj, x, t, p) as [Buffer, Buffer, Buffer];
    this.moeRest(enc, w, x, h, t, logits, gu, g, nextNorm);
  }

  /** moe_weighted_reduce into h, and where the next layer's norm weight is given, x = rms_norm(h) * it in the same dispatch. */
  private reduce(enc: Encoder, args: MoeWeightedReduceArgs, x: Buffer, nextNorm: Buffer | undefined): void {
    if (nextNorm === undefined) moeWeightedReduce(enc, args);
    else moeWeightedReduceNorm(enc, { ...args, normWeight: nextNorm, normed: x, eps: this.config.rmsNormEps });
  }

  /** The MoE block after its input products: the routed experts, the shared expert's activation and down, the sum. */
  private moeRest(enc: Encoder, w: MoeWeights, x: Buffer, h: Buffer, t: number, logits: Buffer, gu: Buffer, g: Buffer,
    nextNorm: Buffer | undefined): void {
    const c = this.config, s = this.scratch, p = this.precision, H = c.hiddenSize, k = c.numExpertsPerTok;
    const routed = routedExperts(enc, s, w.experts, x, logits, t, k, p);
    // f32 and bf16 expert outputs are read as they are (moe_weighted_reduce_bf16_input), f16 ones through f32.
    let yExpert = routed.outputs;
    if (yExpert.dtype === 'f16') {
      yExpert = s.get('moe.out.f32', 'f32', [t, k, H]);
      cast(enc, { input: routed.outputs, output: yExpert });
    }
    const is = c.sharedExpertIntermediateSize;
    const act = s.get('moe.sharedAct', 'f32', [t, is]);
    const shared = s.get('moe.shared', 'f32', [t, H]);
    siluMulHalves(enc, { gateUp: gu, output: act, rows: t, dim: is });
    linear(enc, w.sharedDown, act, shared, t, p, this.scratch);
    this.reduce(enc, {
      expertW: routed.weights, yExpert, shLogit: g.view('f32', [t], 0), yShared: shared, residual: h, output: h, nTokens: t, topK: k, h: H,
    }, x, nextNorm);
  }
}

/** The gated delta rule's inputs as a layer holds them (q and k normalized for a prompt, before the norm at one token). */
type GatedDeltaRuleInputs = Omit<GatedDeltaNetDecodeFusedArgs, 'eps'>;

/** Head dims the chunked gated delta rule takes. */
function chunked(kDim: number, vDim: number): boolean {
  return (GDR_K_VALUES as readonly number[]).includes(kDim) && vDim % GDR_V_MULTIPLE === 0 && vDim <= GDR_MAX_V;
}

/** A (1 + w) norm weight as 1 + w in f32 (as GGUF stores it: Checkpoint.onePlus). */
function onePlus(ck: Checkpoint, ref: TensorRef): Buffer {
  const v = ck.onePlus(ref);
  return ck.f32(v, [v.length]);
}
