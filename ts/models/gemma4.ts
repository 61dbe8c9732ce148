// Gemma 4 (transformers' gemma4 text model, modeling_gemma4.py) on
// mlx-native's ops. h = embed(ids) * sqrt(H), then every layer:
//   a = attention(rms_norm(h) w_in);                  h += rms_norm(a) w_post_attn
//   m = mlp(rms_norm(h) w_pre_ff)                      (gelu_tanh(x W_g^T) * x W_u^T) W_d^T
//   with the MoE block: m = rms_norm(m) w_post_ff1 + rms_norm(experts(rms_norm(h) w_pre_ff2)) w_post_ff2,
//     routed by softmax top-k over (rms_norm(h) * scale / sqrt(H)) W_r^T, times a scale per expert
//   h += rms_norm(m) w_post_ff
//   with per-layer inputs: h += rms_norm((gelu_tanh(h W_pg^T) * pli_i) W_pp^T) w_ppn
//   h *= layer_scalar
// then rms_norm(h) w, logits = h E^T (the embedding, tied), capped as
// cap * tanh(logits / cap).
//
// Attention: q, k get a per-head rms_norm * w and rotary embedding (sliding
// layers: every pair, theta 10^4; global layers: proportional rope, the
// first quarter of the pairs at theta^(-2i / D)), v a per-head rms_norm
// without weight; scores q . k unscaled (the norms set their size); sliding
// layers see the last `sliding_window` positions. Global layers may have
// their own head size (512) and KV heads, and use the keys as values
// (attention_k_eq_v). The last num_kv_shared_layers layers have no K/V
// projections: they read the cache of the last earlier layer of their kind.
// Per-layer inputs (the small models): for layer i,
//   pli_i = (rms_norm(h0 W_pm[i]^T / sqrt(H)) w_pn + E_pl[ids, i] * sqrt(P)) / sqrt(2)
// with h0 the scaled embedding.
//
// Load-time rearrangements (exact up to f32 rounding): the MLP's gate and up
// stacked [2I, H]; the router's scale and 1 / sqrt(H) as the weight of its
// input's norm (the router's weight as stored); the routed experts as stored (blocks.ts RoutedExperts;
// dense ones widened to f32 for the 'exact' precision), the scale per expert
// applied to the routing weights by fused_moe_routing.
//
// A decode step runs the query, key and value projections stored alike as
// one product (blocks.ts project). Every norm followed by its residual add
// is one fused_norm_add_norms, which also writes the norms of the updated h
// that the next products read (after attention: the MLP's, the router's and
// the experts' inputs; at a layer's end, the next layer's input norm, with
// the layer scalar folded in). The MLP's and the experts' branches meet in
// one fused_norm_moe_sum (the weighted sum of the experts' outputs, the two
// norms and their sum).

import type { Buffer } from '../buffer.ts';
import type { Device } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { cast, elementwiseAdd, scalarMul } from '../ops/elementwise.ts';
import { fusedNormAddNorms, fusedNormMoeSum, type FusedNormAddNormsArgs } from '../ops/fused_norm.ts';
import { embedding } from '../ops/embedding.ts';
import { fusedHeadNormRope, fusedHeadNormRopeQkv } from '../ops/fused_head_norm_rope.ts';
import { geluTanhMul } from '../ops/gelu.ts';
import { rmsNorm } from '../ops/rms_norm.ts';
import { softcap } from '../ops/softmax.ts';
import type { Gemma4Layer, Gemma4Weights } from '../weights/index.ts';
import { invalid } from '../validate.ts';
import { gatedLinear, linear, project, routedExperts, rows, VECTOR_ROWS, type Alongside, type Linear, type Projection, type RoutedExperts } from './blocks.ts';
import { attentionDecode, attentionPrefill, fillCache, newKvCache, releaseKvCache, type AttentionSpec, type KvCache } from './attention.ts';
import { Checkpoint, type EmbeddingTable } from './checkpoint.ts';
import type { Gemma4Config, Gemma4LayerConfig } from './config.ts';
import { expertsFor } from './experts.ts';
import { CausalLM, type ModelOptions } from './model.ts';

interface AttentionWeights {
  /** q, then k and v where the layer has them. */
  readonly inProj: Projection;
  readonly q: Linear;
  readonly o: Linear;
  readonly qNorm: Buffer;
  /** Null in a layer that reads another layer's keys and values. */
  readonly k: Linear | null;
  readonly kNorm: Buffer | null;
  /** Null where the keys are the values, or in a shared layer. */
  readonly v: Linear | null;
  /** The rope's frequency divisors (f32 [halfRopeDim]) where the config scales them. */
  readonly freqFactors: Buffer | null;
}

interface MoeWeights {
  /** [E, H]: the router's weight as stored. */
  readonly router: Linear;
  /** f32 [H]: its input's scale times 1 / sqrt(H), the weight of the router's input norm. */
  readonly routerNorm: Buffer;
  readonly experts: RoutedExperts;
  readonly preNorm2: Buffer;
  readonly postNorm1: Buffer;
  readonly postNorm2: Buffer;
}

interface LayerWeights {
  readonly cfg: Gemma4LayerConfig;
  readonly inputNorm: Buffer;
  readonly postAttnNorm: Buffer;
  readonly preFfNorm: Buffer;
  readonly postFfNorm: Buffer;
  readonly attn: AttentionWeights;
  /** gate and up stacked [2I, H], down [H, I]. */
  readonly mlpGateUp: Linear;
  readonly mlpDown: Linear;
  readonly moe: MoeWeights | null;
  readonly perLayer: { readonly gate: Linear; readonly proj: Linear; readonly norm: Buffer } | null;
  /** The layer scalar, and as f32 [1] where it is not 1. */
  readonly scalar: number;
  readonly scalarBuf: Buffer | null;
}

export class Gemma4 extends CausalLM {
  declare readonly config: Gemma4Config;
  private readonly embedTable: EmbeddingTable;
  private readonly lmHead: Linear;
  private readonly finalNorm: Buffer;
  private readonly layers: LayerWeights[];
  private readonly caches: (KvCache | null)[];
  private readonly perLayer: { readonly table: EmbeddingTable; readonly proj: Linear; readonly norm: Buffer } | null;
  /** u32 [VECTOR_ROWS] zeros: the ids of the MLP's fused gate/up product over its one "expert" (gatedLinear). */
  private readonly zeroIds: Buffer;

  constructor(device: Device, config: Gemma4Config, ckpt: Checkpoint, names: Gemma4Weights, opts: ModelOptions = {}) {
    super(device, config, ckpt, opts);
    const c = config;
    ({ table: this.embedTable, head: this.lmHead } = this.embeddingAndHead(names));
    this.finalNorm = ckpt.f32(ckpt.host(names.finalNorm), [c.hiddenSize]);
    if ((c.perLayerInputSize > 0) !== (names.perLayer !== null)) {
      throw invalid('loadModel', 'the per-layer input tensors', c.perLayerInputSize > 0 ? 'present (hidden_size_per_layer_input > 0)' : 'absent', names.perLayer === null ? 'absent' : 'present');
    }
    this.perLayer = names.perLayer === null ? null : {
      table: ckpt.table(names.perLayer.embedTokens),
      proj: ckpt.linear([{ ref: names.perLayer.modelProjection }]),
      norm: ckpt.f32(ckpt.host(names.perLayer.projectionNorm), [c.perLayerInputSize]),
    };
    this.layers = names.layers.map((l) => this.loadLayer(l));
    this.zeroIds = device.alloc('u32', [VECTOR_ROWS]);
    this.zeroIds.writeNumbers(new Array<number>(VECTOR_ROWS).fill(0));
    this.caches = c.layers.map((l, i) => (l.kvSource !== i ? null
      : newKvCache(device, l.numKvHeads, l.headDim, l.type === 'sliding_attention' ? c.slidingWindow : this.maxContext, l.type === 'sliding_attention')));
  }

  private loadLayer(l: Gemma4Layer): LayerWeights {
    const c = this.config, ck = this.ckpt, H = c.hiddenSize;
    const cfg = c.layers[l.index]!;
    const norm = (ref: { name: string }, n = H) => ck.f32(ck.host(ref.name), [n]);
    if (l.type !== 'unknown' && l.type !== cfg.type) throw invalid('loadModel', `layer ${l.index}`, `a ${cfg.type} layer (config.json)`, l.type);
    const a = l.attention;
    const owns = cfg.kvSource === l.index;
    if (owns && (a.kProj === null || a.kNorm === null)) throw invalid('loadModel', `layer ${l.index}`, 'k_proj and k_norm (it computes its own keys)', 'none');
    if (owns && !cfg.kEqV && a.vProj === null) throw invalid('loadModel', `layer ${l.index}`, 'v_proj (attention_k_eq_v is off here)', 'none');
    const inProj = ck.projection([[{ ref: a.qProj }], ...(owns ? [[{ ref: a.kProj! }]] : []), ...(owns && !cfg.kEqV ? [[{ ref: a.vProj! }]] : [])]);
    const attn: AttentionWeights = {
      inProj,
      q: inProj.layers[0]!,
      o: ck.linear([{ ref: a.oProj }]),
      qNorm: norm(a.qNorm, cfg.headDim),
      k: owns ? inProj.layers[1]! : null,
      kNorm: owns ? norm(a.kNorm!, cfg.headDim) : null,
      v: owns && !cfg.kEqV ? inProj.layers[2]! : null,
      freqFactors: cfg.ropeFactor === 1 ? null : ck.f32(new Float32Array(Math.max(1, cfg.halfRopeDim)).fill(cfg.ropeFactor), [Math.max(1, cfg.halfRopeDim)]),
    };
    let moe: MoeWeights | null = null;
    if (l.moe !== null) {
      const m = c.moe;
      if (m === null) throw invalid('loadModel', `layer ${l.index}'s MoE tensors`, 'absent (enable_moe_block is off)', 'present');
      const scale = ck.host(l.moe.routerScale), root = 1 / Math.sqrt(H);
      moe = {
        router: ck.linear([{ ref: l.moe.router }]),
        routerNorm: ck.f32(Float32Array.from(scale, (v) => v * root), [H]),
        experts: expertsFor(ck, l.moe.experts, m.numExperts, m.intermediateSize, H, 'gelu_tanh', ck.host(l.moe.perExpertScale),
          ck.dtype === 'f32' || this.precision === 'exact', `layer ${l.index}`),
        preNorm2: norm(l.moe.preFeedforwardNorm2),
        postNorm1: norm(l.moe.postFeedforwardNorm1),
        postNorm2: norm(l.moe.postFeedforwardNorm2),
      };
    } else if (c.moe !== null) {
      throw invalid('loadModel', `layer ${l.index}'s MoE tensors`, 'present (enable_moe_block is on)', 'absent');
    }
    const ple = l.perLayerInput;
    const scalar = l.layerScalar === null ? 1 : ck.host(l.layerScalar)[0]!;
    return {
      cfg,
      inputNorm: norm(l.inputNorm),
      postAttnNorm: norm(l.postAttentionNorm),
      preFfNorm: norm(l.preFeedforwardNorm),
      postFfNorm: norm(l.postFeedforwardNorm),
      attn,
      mlpGateUp: ck.linear([{ ref: l.mlp.gate }, { ref: l.mlp.up }]),
      mlpDown: ck.linear([{ ref: l.mlp.down }]),
      moe,
      perLayer: ple === null ? null : { gate: ck.linear([{ ref: ple.gate }]), proj: ck.linear([{ ref: ple.projection }]), norm: norm(ple.postNorm) },
      scalar,
      scalarBuf: scalar === 1 ? null : ck.f32(Float32Array.of(scalar), [1]),
    };
  }

  protected resetState(_tokens: number): void {
    // A prompt writes every slot it reads before reading it: nothing to clear.
  }

  protected releaseWeights(): void {
    this.zeroIds?.release();
    for (const c of this.caches ?? []) if (c !== null) releaseKvCache(c);
  }

  protected forward(enc: Encoder, ids: Buffer, t: number, logitRows: number, logitsOut: Buffer, hostIds: readonly number[] | null): void {
    const c = this.config, s = this.scratch, H = c.hiddenSize, eps = c.rmsNormEps;
    const h = s.get('h', 'f32', [t, H]);
    const x = s.get('x', 'f32', [t, H]);
    const y = s.get('y', 'f32', [t, H]);
    this.embed(enc, this.embedTable, ids, h, t, Math.fround(Math.sqrt(H)));
    const pli = this.perLayer === null ? null : this.perLayerInputs(enc, ids, hostIds, h, t);
    const positions = this.positions(t);
    // The MoE block's inputs: the router's (rms_norm(h) * scale / sqrt(H)) and the experts' (rms_norm(h) w_pre_ff2).
    const routerX = s.get('moe.routerX', 'f32', [t, H]);
    const expertX = s.get('moe.x', 'f32', [t, H]);
    // h += rms_norm(y) w (times the layer scalar where `last` and it is not 1), and the norms of the new h given.
    const normAdd = (l: LayerWeights, weight: Buffer, last: boolean, norms: Partial<FusedNormAddNormsArgs>) => {
      const scalar = last && l.scalarBuf !== null ? { scalar: l.scalarBuf } : {};
      fusedNormAddNorms(enc, { residual: h, input: y, weight, output: h, rows: t, dim: H, eps, ...scalar, ...norms });
    };
    rmsNorm(enc, { input: h, weight: this.layers[0]!.inputNorm, output: x, rows: t, dim: H, eps });
    for (const [i, l] of this.layers.entries()) {
      // x = rms_norm(h) w_in here: written by the step before (the first norm, or the layer before's last residual update).
      this.attention(enc, i, l, x, y, t, positions);
      normAdd(l, l.postAttnNorm, false, {
        normed0: x, normWeight0: l.preFfNorm,
        ...(l.moe !== null ? { normed1: routerX, normWeight1: l.moe.routerNorm, normed2: expertX, normWeight2: l.moe.preNorm2 } : {}),
      });
      const i2 = l.cfg.intermediateSize;
      const gu = s.get(`mlp.gateUp.${i2}`, 'f32', [t, 2 * i2]);
      const act = s.get(`mlp.act.${i2}`, 'f32', [t, i2]);
      const mlpGateUp = () => gatedLinear(enc, l.mlpGateUp, x, gu, act, t, 'gelu_tanh', this.zeroIds, this.precision, this.scratch);
      const mlp: Alongside = { afterGateUp: () => linear(enc, l.mlpDown, act, y, t, this.precision, this.scratch) };
      if (l.moe !== null) {
        this.moe(enc, l.moe, routerX, expertX, y, t, mlpGateUp, mlp);
      } else {
        mlpGateUp();
        mlp.afterGateUp();
      }
      const next = this.layers[i + 1];
      const nextNorm = next === undefined ? {} : { normed0: x, normWeight0: next.inputNorm };
      normAdd(l, l.postFfNorm, l.perLayer === null, l.perLayer === null ? nextNorm : {});
      if (l.perLayer !== null) {
        const P = c.perLayerInputSize;
        const g = s.get('pli.gate', 'f32', [t, P]);
        linear(enc, l.perLayer.gate, h, g, t, this.precision, this.scratch);
        geluTanhMul(enc, { gate: g, up: rows(pli!, i * t, t, P), output: g });
        linear(enc, l.perLayer.proj, g, y, t, this.precision, this.scratch);
        normAdd(l, l.perLayer.norm, true, nextNorm);
      }
      this.layerDone(enc);
    }
    const last = rows(h, t - logitRows, logitRows, H);
    const xn = s.get('xLast', 'f32', [logitRows, H]);
    rmsNorm(enc, { input: last, weight: this.finalNorm, output: xn, rows: logitRows, dim: H, eps });
    linear(enc, this.lmHead, xn, logitsOut, logitRows, this.precision, this.scratch);
    if (c.finalLogitSoftcap !== null) softcap(enc, { input: logitsOut, output: logitsOut, cap: c.finalLogitSoftcap });
  }

  /** pli [L, t, P] (layer-major, so layer i's rows are one block) from the ids and the scaled embedding h0 [t, H]. */
  private perLayerInputs(enc: Encoder, ids: Buffer, hostIds: readonly number[] | null, h0: Buffer, t: number): Buffer {
    const c = this.config, s = this.scratch, pl = this.perLayer!, L = c.numLayers, P = c.perLayerInputSize, H = c.hiddenSize;
    const out = s.get('pli', 'f32', [L * t, P]);
    const emb = s.get('pli.emb', 'f32', [L * t, P]);
    const finish = (proj: Buffer, e: Buffer, n: number, dst: Buffer) => {
      scalarMul(enc, { input: proj, output: proj, scalar: Math.fround(1 / Math.sqrt(H)) });
      rmsNorm(enc, { input: proj, weight: pl.norm, output: proj, rows: n, dim: P, eps: c.rmsNormEps });
      elementwiseAdd(enc, { a: proj, b: e, output: dst });
      scalarMul(enc, { input: dst, output: dst, scalar: Math.fround(Math.SQRT1_2) });
    };
    const embScale = Math.fround(Math.sqrt(P));
    if (t === 1) {
      // One token: its row of the table holds every layer's input, [L, P] = [L, 1, P].
      embedding(enc, {
        table: pl.table.buffer, tableType: pl.table.ggmlType, tokenIds: ids, output: emb.view('f32', [1, L * P], 0), vocabSize: c.perLayerVocabSize,
        hiddenSize: L * P, nTokens: 1, scale: embScale,
      });
      const proj = s.get('pli.proj', 'f32', [1, L * P]);
      linear(enc, pl.proj, h0, proj, 1, this.precision, this.scratch);
      finish(proj.view('f32', [L, P], 0), emb, L, out);
      return out;
    }
    if (hostIds === null) throw invalid('forward', 'hostIds', 'the prompt ids on the host (per-layer inputs of a prompt)', 'none');
    // A prompt: layer i's rows of the table ([V * L, P] seen row by row; GGUF blocks: P a multiple of the block) are ids * L + i.
    const tb = pl.table.buffer;
    const table = tb.view(tb.dtype, [c.perLayerVocabSize * L, tb.shape[1]! / L], 0);
    const idx = s.get('pli.idx', 'u32', [L * t]);
    idx.write(Uint32Array.from({ length: L * t }, (_, k) => hostIds[k % t]! * L + Math.floor(k / t)));
    embedding(enc, { table, tableType: pl.table.ggmlType, tokenIds: idx, output: emb, vocabSize: c.perLayerVocabSize * L, hiddenSize: P, nTokens: L * t, scale: embScale });
    const proj = s.get('pli.projRows', 'f32', [L * t, P]);
    for (let i = 0; i < L; i++) linear(enc, Checkpoint.rowsView(pl.proj, i * P, P), h0, rows(proj, i * t, t, P), t, this.precision, this.scratch);
    finish(proj, emb, L * t, out);
    return out;
  }

  private attention(enc: Encoder, i: number, l: LayerWeights, x: Buffer, out: Buffer, t: number, positions: Buffer): void {
    const c = this.config, s = this.scratch, p = this.precision, cfg = l.cfg, a = l.attn;
    const d = cfg.headDim, nh = c.numHeads, nkv = cfg.numKvHeads;
    const o = s.get(`attn.o.${d}`, 'f32', [t, nh, d]);
    // This layer's keys and values [t, nkv, d] (kept per layer through a prompt: shared layers read them).
    const kOut = s.get(`kv.${cfg.kvSource}.k`, 'f32', [t, nkv, d]);
    const vOut = s.get(`kv.${cfg.kvSource}.v`, 'f32', [t, nkv, d]);
    const owns = a.k !== null;
    let q: Buffer, k = kOut, v = vOut;
    if (t === 1) {
      // One token: q, k and v in one product (views of its row); a shared layer's reads of k and v come from the cache.
      const outs = project(enc, s, `attn.in.${d}`, a.inProj, x, 1, p);
      q = outs[0]!.view('f32', [1, nh, d], 0);
      if (owns) k = outs[1]!.view('f32', [1, nkv, d], 0);
      if (a.v !== null) v = outs[2]!.view('f32', [1, nkv, d], 0);
    } else {
      q = s.get(`attn.q.${d}`, 'f32', [t, nh, d]);
      linear(enc, a.q, x, q, t, p, this.scratch);
      if (owns) linear(enc, a.k!, x, k, t, p, this.scratch);
      if (a.v !== null) linear(enc, a.v, x, v, t, p, this.scratch);
    }
    const rope = {
      positions, seqLen: t, headDim: d, halfRopeDim: cfg.halfRopeDim, eps: c.rmsNormEps, theta: cfg.ropeTheta,
      ...(a.freqFactors !== null ? { freqFactors: a.freqFactors } : {}),
    };
    if (owns) {
      // q, k: norm and rotation; v = rms_norm(raw values) without weight (with keys as values, the raw keys before k_norm).
      fusedHeadNormRopeQkv(enc, { ...rope, q, k, v, vFromK: a.v === null, qWeight: a.qNorm, kWeight: a.kNorm!, nHeads: nh, nKvHeads: nkv });
    } else {
      fusedHeadNormRope(enc, { ...rope, input: q, output: q, weight: a.qNorm, nHeads: nh });
    }
    const spec: AttentionSpec = { nHeads: nh, nKvHeads: nkv, headDim: d, scale: 1, window: cfg.type === 'sliding_attention' ? c.slidingWindow : null };
    const cache = this.caches[cfg.kvSource]!;
    if (t === 1) {
      attentionDecode(enc, s, spec, cache, q, owns ? k : null, owns ? v : null, o, this.position, this.steps);
    } else {
      attentionPrefill(enc, s, spec, q, k, v, o, t, this.prefillAttention);
      if (owns) fillCache(enc, cache, k, v, t);
    }
    linear(enc, a.o, o.view('f32', [t, nh * d], 0), out, t, p, this.scratch);
  }

  /**
   * The MoE block beside the MLP, from the router's input rms_norm(h) * scale
   * / sqrt(H) and the experts' rms_norm(h) w_pre_ff2: y (the MLP's output) becomes
   * rms_norm(y) w1 + rms_norm(experts) w2. The MLP's products (writing y) are
   * recorded each in one stretch with a product of the MoE block: its gate/up
   * (mlpGateUp) with the router's, its down (mlp) with the experts' gate/up
   * (blocks.ts Alongside); the routing runs between them on its own.
   */
  private moe(enc: Encoder, w: MoeWeights, routerX: Buffer, expertX: Buffer, y: Buffer, t: number, mlpGateUp: () => void, mlp: Alongside): void {
    const c = this.config, s = this.scratch, H = c.hiddenSize, m = c.moe!, eps = c.rmsNormEps;
    const logits = s.get('moe.logits', 'f32', [t, m.numExperts]);
    linear(enc, w.router, routerX, logits, t, this.precision, this.scratch);
    mlpGateUp();
    const routed = routedExperts(enc, s, w.experts, expertX, logits, t, m.topK, this.precision, undefined, mlp);
    // f32 and bf16 expert outputs are read as they are, f16 ones through f32.
    let outputs = routed.outputs;
    if (outputs.dtype === 'f16') {
      outputs = s.get('moe.out.f32', 'f32', [t, m.topK, H]);
      cast(enc, { input: routed.outputs, output: outputs });
    }
    fusedNormMoeSum(enc, {
      input: y, weight: w.postNorm1, expertW: routed.weights, yExpert: outputs, moeWeight: w.postNorm2, output: y,
      rows: t, dim: H, topK: m.topK, eps,
    });
  }
}
