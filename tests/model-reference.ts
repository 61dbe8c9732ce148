// Float64 references of the two forward passes, written from transformers'
// modeling_qwen3_5_moe.py and modeling_gemma4.py (not from ts/models): one
// token at a time through every layer, with the caches and recurrent states
// as plain arrays. Hugging Face's rotary pairing, (1 + w) norms, fused q/gate
// rows and per-expert loops are followed as written there, so the load-time
// rearrangements of ts/models are checked, not shared. For the tests (not
// shipped).

import { openWeights } from '../ts/weights/index.ts';
import { fromBf16, fromF16 } from '../ts/index.ts';
import { gemma4Config, qwen35MoeConfig, readConfigFile, type Gemma4Config, type Qwen35MoeConfig } from '../ts/models/config.ts';

type Vec = Float64Array<ArrayBufferLike>;

class Weights {
  private readonly cache = new Map<string, Vec>();
  private readonly source: ReturnType<typeof openWeights>;
  constructor(folder: string) {
    this.source = openWeights(folder);
  }
  get(name: string): Vec {
    let v = this.cache.get(name);
    // Experts stored stacked (mlx's switch layers): the fused [E, 2I, H] gate_up and [E, H, I] down read from them.
    const m = /^(.*\.)experts\.(gate_up_proj|down_proj)$/.exec(name);
    if (v === undefined && m !== null && !this.has(name)) {
      const dir = m[1]!.endsWith('mlp.') ? `${m[1]}switch_mlp.` : `${m[1]}experts.switch_glu.`;
      if (m[2] === 'down_proj') return this.get(`${dir}down_proj.weight`);
      const gate = this.get(`${dir}gate_proj.weight`), up = this.get(`${dir}up_proj.weight`);
      const shape = (this.source as { info(n: string): { shape: readonly number[] } }).info(`${dir}gate_proj.weight`).shape;
      const [E, I, H] = shape as [number, number, number];
      v = new Float64Array(E * 2 * I * H);
      for (let e = 0; e < E; e++) {
        v.set(gate.subarray(e * I * H, (e + 1) * I * H), e * 2 * I * H);
        v.set(up.subarray(e * I * H, (e + 1) * I * H), (e * 2 + 1) * I * H);
      }
      this.cache.set(name, v);
      return v;
    }
    if (v === undefined) {
      const src = this.source;
      if (!('info' in src)) throw new Error('not a weight source');
      const t = src.info(name);
      const raw = src.view(name);
      const f = t.dtype === 'BF16' ? fromBf16(raw as Uint16Array) : t.dtype === 'F16' ? fromF16(new Uint16Array(raw.buffer, raw.byteOffset, raw.length)) : (raw as Float32Array);
      v = Float64Array.from(f);
      this.cache.set(name, v);
    }
    return v;
  }
  has(name: string): boolean {
    return 'has' in this.source && this.source.has(name);
  }
}

/** y = W x for W [n, k] (row-major), a sub-block of rows [r0, r0 + n) when given. */
function mv(w: Vec, x: Vec, n: number, r0 = 0): Vec {
  const k = x.length;
  const y = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    let s = 0;
    const o = (r0 + i) * k;
    for (let j = 0; j < k; j++) s += w[o + j]! * x[j]!;
    y[i] = s;
  }
  return y;
}

function rms(x: Vec, w: Vec | null, eps: number, onePlus = false): Vec {
  let ss = 0;
  for (const v of x) ss += v * v;
  const inv = 1 / Math.sqrt(ss / x.length + eps);
  return x.map((v, i) => v * inv * (w === null ? 1 : onePlus ? 1 + w[i]! : w[i]!));
}

const silu = (x: number) => x / (1 + Math.exp(-x));
const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));
const softplus = (x: number) => (x > 20 ? x : Math.log1p(Math.exp(x)));
const geluTanh = (x: number) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
const f32 = Math.fround;

function softmax(x: Vec): Vec {
  const m = Math.max(...x);
  const e = x.map((v) => Math.exp(v - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / s);
}

/** Indices of the k largest (ties: the lower index first, as torch.topk on distinct values). */
function topk(x: Vec, k: number): number[] {
  return [...x.keys()].sort((a, b) => x[b]! - x[a]! || a - b).slice(0, k);
}

function add(a: Vec, b: Vec): Vec {
  return a.map((v, i) => v + b[i]!);
}

/** Attention of one query row over keys/values [n][D] (GQA head mapping done by the caller). */
function attend(q: Vec, keys: Vec[], values: Vec[], scale: number): Vec {
  const s = Float64Array.from(keys, (k) => q.reduce((acc, v, i) => acc + v * k[i]!, 0) * scale);
  const p = softmax(s);
  const out = new Float64Array(q.length);
  values.forEach((v, j) => { for (let i = 0; i < out.length; i++) out[i]! += p[j]! * v[i]!; });
  return out;
}

/** HF rotate_half on x[0, dim): pairs (i, i + dim / 2) turned by pos * freq[i]. */
function ropeHalf(x: Vec, dim: number, freqs: readonly number[], pos: number): Vec {
  const y = Float64Array.from(x);
  const half = dim / 2;
  for (let i = 0; i < half; i++) {
    const a = pos * freqs[i]!;
    const c = Math.cos(a), s = Math.sin(a);
    y[i] = x[i]! * c - x[i + half]! * s;
    y[i + half] = x[i + half]! * c + x[i]! * s;
  }
  return y;
}

export interface ReferenceRun {
  /** Logits of every prompt position, then of each decode step. */
  prefill: Vec[];
  decode: Vec[];
  /**
   * Per prompt position, then per decode step: the narrowest routing call of
   * any MoE layer, the router logit of the last expert chosen less that of
   * the first left out (a flip there changes the experts that run).
   */
  routingGaps: number[];
  /** tokens[0] from the prompt's last position, tokens[i + 1] from decode step i (fed tokens[i]). */
  tokens: number[];
}

function argmax(x: Vec): number {
  let b = 0;
  for (let i = 1; i < x.length; i++) if (x[i]! > x[b]!) b = i;
  return b;
}

/** The router logits' gap between the k-th and (k+1)-th largest. */
function gapOf(logits: Vec, k: number): number {
  if (k >= logits.length) return Infinity;
  const s = [...logits].sort((a, b) => b - a);
  return s[k - 1]! - s[k]!;
}

function run(step: (tok: number, pos: number, gap: (g: number) => void) => Vec, prompt: readonly number[], steps: number): ReferenceRun {
  const routingGaps: number[] = [];
  const one = (tok: number, pos: number) => {
    let g = Infinity;
    const l = step(tok, pos, (x) => { g = Math.min(g, x); });
    routingGaps.push(g);
    return l;
  };
  const prefill = prompt.map((t, p) => one(t, p));
  const tokens = [argmax(prefill[prefill.length - 1]!)];
  const decode: Vec[] = [];
  for (let i = 0; i < steps; i++) {
    const l = one(tokens[i]!, prompt.length + i);
    decode.push(l);
    tokens.push(argmax(l));
  }
  return { prefill, decode, tokens, routingGaps };
}

// ---- Qwen3.6 ----

export function qwenReference(folder: string, prompt: readonly number[], steps: number): ReferenceRun {
  const c: Qwen35MoeConfig = qwen35MoeConfig(readConfigFile(folder));
  const W = new Weights(folder);
  const H = c.hiddenSize, eps = c.rmsNormEps;
  const hk = c.linearNumKeyHeads, hv = c.linearNumValueHeads, dk = c.linearKeyHeadDim, dv = c.linearValueHeadDim;
  const kd = hk * dk, vd = hv * dv, C = 2 * kd + vd, KS = c.convKernel, D = c.headDim, rot = c.rotaryDim;
  const freqs = Array.from({ length: rot / 2 }, (_, i) => 1 / c.ropeTheta ** ((2 * i) / rot));
  const conv: Vec[][] = [], state: Vec[][] = [], keys: Vec[][][] = [], vals: Vec[][][] = [];
  for (let l = 0; l < c.numLayers; l++) {
    conv.push(Array.from({ length: KS - 1 }, () => new Float64Array(C)));
    state.push(Array.from({ length: hv }, () => new Float64Array(dk * dv)));
    keys.push(Array.from({ length: c.numKvHeads }, () => []));
    vals.push(Array.from({ length: c.numKvHeads }, () => []));
  }
  const lm = W.has('lm_head.weight') ? 'lm_head.weight' : 'model.embed_tokens.weight';
  const step = (tok: number, pos: number, gap: (g: number) => void): Vec => {
    let h: Vec = W.get('model.embed_tokens.weight').slice(tok * H, (tok + 1) * H);
    for (let l = 0; l < c.numLayers; l++) {
      const p = `model.layers.${l}.`;
      const x = rms(h, W.get(`${p}input_layernorm.weight`), eps, true);
      let out: Vec;
      if (c.layerTypes[l] === 'linear_attention') {
        const mixed = mv(W.get(`${p}linear_attn.in_proj_qkv.weight`), x, C);
        const cw = W.get(`${p}linear_attn.conv1d.weight`);
        const hist = [...conv[l]!, mixed];
        const y = new Float64Array(C);
        for (let ch = 0; ch < C; ch++) {
          let s = 0;
          for (let j = 0; j < KS; j++) s += cw[ch * KS + j]! * hist[j]![ch]!;
          y[ch] = silu(s);
        }
        conv[l] = hist.slice(1);
        const l2 = (v: Vec) => { const n = 1 / Math.sqrt(v.reduce((a, b) => a + b * b, 0) + 1e-6); return v.map((e) => e * n); };
        const a = mv(W.get(`${p}linear_attn.in_proj_a.weight`), x, hv);
        const b = mv(W.get(`${p}linear_attn.in_proj_b.weight`), x, hv);
        const z = mv(W.get(`${p}linear_attn.in_proj_z.weight`), x, vd);
        const aLog = W.get(`${p}linear_attn.A_log`), dt = W.get(`${p}linear_attn.dt_bias`), nw = W.get(`${p}linear_attn.norm.weight`);
        const o = new Float64Array(vd);
        for (let head = 0; head < hv; head++) {
          const kh = Math.floor(head / (hv / hk));
          const q = l2(y.slice(kh * dk, (kh + 1) * dk)).map((e) => e / Math.sqrt(dk));
          const k = l2(y.slice(kd + kh * dk, kd + (kh + 1) * dk));
          const v = y.slice(2 * kd + head * dv, 2 * kd + (head + 1) * dv);
          const g = -Math.exp(aLog[head]!) * softplus(a[head]! + dt[head]!);
          const beta = sigmoid(b[head]!);
          const S = state[l]![head]!; // [dk, dv]
          for (let i = 0; i < S.length; i++) S[i]! *= Math.exp(g);
          for (let j = 0; j < dv; j++) {
            let mem = 0;
            for (let i = 0; i < dk; i++) mem += S[i * dv + j]! * k[i]!;
            const delta = (v[j]! - mem) * beta;
            for (let i = 0; i < dk; i++) S[i * dv + j]! += k[i]! * delta;
          }
          const oh = new Float64Array(dv);
          for (let j = 0; j < dv; j++) for (let i = 0; i < dk; i++) oh[j]! += S[i * dv + j]! * q[i]!;
          const n = rms(oh, nw, eps);
          for (let j = 0; j < dv; j++) o[head * dv + j] = n[j]! * silu(z[head * dv + j]!);
        }
        out = mv(W.get(`${p}linear_attn.out_proj.weight`), o, H);
      } else {
        const qg = mv(W.get(`${p}self_attn.q_proj.weight`), x, c.numHeads * 2 * D);
        const kAll = mv(W.get(`${p}self_attn.k_proj.weight`), x, c.numKvHeads * D);
        const vAll = mv(W.get(`${p}self_attn.v_proj.weight`), x, c.numKvHeads * D);
        const qn = W.get(`${p}self_attn.q_norm.weight`), kn = W.get(`${p}self_attn.k_norm.weight`);
        for (let kvh = 0; kvh < c.numKvHeads; kvh++) {
          const kh = rms(kAll.slice(kvh * D, (kvh + 1) * D), kn, eps, true);
          keys[l]![kvh]!.push(Float64Array.from([...ropeHalf(kh.slice(0, rot), rot, freqs, pos), ...kh.slice(rot)]));
          vals[l]![kvh]!.push(vAll.slice(kvh * D, (kvh + 1) * D));
        }
        const o = new Float64Array(c.numHeads * D);
        for (let head = 0; head < c.numHeads; head++) {
          const qh = rms(qg.slice(head * 2 * D, head * 2 * D + D), qn, eps, true);
          const q = Float64Array.from([...ropeHalf(qh.slice(0, rot), rot, freqs, pos), ...qh.slice(rot)]);
          const kvh = Math.floor(head / (c.numHeads / c.numKvHeads));
          const a = attend(q, keys[l]![kvh]!, vals[l]![kvh]!, 1 / Math.sqrt(D));
          for (let i = 0; i < D; i++) o[head * D + i] = a[i]! * sigmoid(qg[head * 2 * D + D + i]!);
        }
        out = mv(W.get(`${p}self_attn.o_proj.weight`), o, H);
      }
      h = add(h, out);
      const x2 = rms(h, W.get(`${p}post_attention_layernorm.weight`), eps, true);
      const routerLogits = mv(W.get(`${p}mlp.gate.weight`), x2, c.numExperts);
      gap(gapOf(routerLogits, c.numExpertsPerTok));
      const probs = softmax(routerLogits);
      const top = topk(probs, c.numExpertsPerTok);
      const sum = top.reduce((s, e) => s + probs[e]!, 0);
      const I = c.moeIntermediateSize;
      const gu = W.get(`${p}mlp.experts.gate_up_proj`), dn = W.get(`${p}mlp.experts.down_proj`);
      let moe: Vec = new Float64Array(H);
      for (const e of top) {
        const g = mv(gu, x2, 2 * I, e * 2 * I);
        const act = Float64Array.from({ length: I }, (_, i) => silu(g[i]!) * g[I + i]!);
        const y = mv(dn, act, H, e * H);
        moe = moe.map((v, i) => v + (probs[e]! / sum) * y[i]!);
      }
      const Is = c.sharedExpertIntermediateSize;
      const sg = mv(W.get(`${p}mlp.shared_expert.gate_proj.weight`), x2, Is);
      const su = mv(W.get(`${p}mlp.shared_expert.up_proj.weight`), x2, Is);
      const sh = mv(W.get(`${p}mlp.shared_expert.down_proj.weight`), sg.map((v, i) => silu(v) * su[i]!), H);
      const gate = sigmoid(mv(W.get(`${p}mlp.shared_expert_gate.weight`), x2, 1)[0]!);
      h = h.map((v, i) => v + moe[i]! + gate * sh[i]!);
    }
    return mv(W.get(lm), rms(h, W.get('model.norm.weight'), eps, true), c.vocabSize);
  };
  return run(step, prompt, steps);
}

// ---- Gemma 4 ----

export function gemmaReference(folder: string, prompt: readonly number[], steps: number): ReferenceRun {
  const c: Gemma4Config = gemma4Config(readConfigFile(folder));
  const W = new Weights(folder);
  const H = c.hiddenSize, eps = c.rmsNormEps, L = c.numLayers, P = c.perLayerInputSize;
  const keys: Vec[][][] = [], vals: Vec[][][] = [], poss: number[][] = [];
  for (let l = 0; l < L; l++) {
    keys.push(Array.from({ length: c.layers[l]!.numKvHeads }, () => []));
    vals.push(Array.from({ length: c.layers[l]!.numKvHeads }, () => []));
    poss.push([]);
  }
  const lm = W.has('lm_head.weight') ? 'lm_head.weight' : 'model.embed_tokens.weight';
  const step = (tok: number, pos: number, gap: (g: number) => void): Vec => {
    let h: Vec = W.get('model.embed_tokens.weight').slice(tok * H, (tok + 1) * H).map((v) => v * f32(Math.sqrt(H)));
    let pli: Vec[] = [];
    if (P > 0) {
      const proj = mv(W.get('model.per_layer_model_projection.weight'), h, L * P).map((v) => v * f32(1 / Math.sqrt(H)));
      const emb = W.get('model.embed_tokens_per_layer.weight').slice(tok * L * P, (tok + 1) * L * P).map((v) => v * f32(Math.sqrt(P)));
      pli = Array.from({ length: L }, (_, i) => {
        const n = rms(proj.slice(i * P, (i + 1) * P), W.get('model.per_layer_projection_norm.weight'), eps);
        return n.map((v, j) => (v + emb[i * P + j]!) * f32(Math.SQRT1_2));
      });
    }
    for (let l = 0; l < L; l++) {
      const p = `model.layers.${l}.`;
      const lc = c.layers[l]!, D = lc.headDim, sliding = lc.type === 'sliding_attention';
      const half = D / 2;
      const freqs = Array.from({ length: half }, (_, i) => (i < lc.halfRopeDim ? 1 / lc.ropeTheta ** ((2 * i) / D) / lc.ropeFactor : 0));
      const x = rms(h, W.get(`${p}input_layernorm.weight`), eps);
      const qAll = mv(W.get(`${p}self_attn.q_proj.weight`), x, c.numHeads * D);
      if (lc.kvSource === l) {
        const kAll = mv(W.get(`${p}self_attn.k_proj.weight`), x, lc.numKvHeads * D);
        const vAll = W.has(`${p}self_attn.v_proj.weight`) ? mv(W.get(`${p}self_attn.v_proj.weight`), x, lc.numKvHeads * D) : kAll;
        for (let kvh = 0; kvh < lc.numKvHeads; kvh++) {
          keys[l]![kvh]!.push(ropeHalf(rms(kAll.slice(kvh * D, (kvh + 1) * D), W.get(`${p}self_attn.k_norm.weight`), eps), D, freqs, pos));
          vals[l]![kvh]!.push(rms(vAll.slice(kvh * D, (kvh + 1) * D), null, eps));
        }
        poss[l]!.push(pos);
      }
      const src = lc.kvSource;
      const visible = poss[src]!.map((q, j) => (!sliding || q > pos - c.slidingWindow ? j : -1)).filter((j) => j >= 0);
      const o = new Float64Array(c.numHeads * D);
      for (let head = 0; head < c.numHeads; head++) {
        const q = ropeHalf(rms(qAll.slice(head * D, (head + 1) * D), W.get(`${p}self_attn.q_norm.weight`), eps), D, freqs, pos);
        const kvh = Math.floor(head / (c.numHeads / lc.numKvHeads));
        const a = attend(q, visible.map((j) => keys[src]![kvh]![j]!), visible.map((j) => vals[src]![kvh]![j]!), 1);
        o.set(a, head * D);
      }
      h = add(h, rms(mv(W.get(`${p}self_attn.o_proj.weight`), o, H), W.get(`${p}post_attention_layernorm.weight`), eps));
      const x2 = rms(h, W.get(`${p}pre_feedforward_layernorm.weight`), eps);
      const I = lc.intermediateSize;
      const g = mv(W.get(`${p}mlp.gate_proj.weight`), x2, I), u = mv(W.get(`${p}mlp.up_proj.weight`), x2, I);
      let m = mv(W.get(`${p}mlp.down_proj.weight`), g.map((v, i) => geluTanh(v) * u[i]!), H);
      if (c.moe !== null) {
        const m1 = rms(m, W.get(`${p}post_feedforward_layernorm_1.weight`), eps);
        const scale = W.get(`${p}router.scale`);
        const r = rms(h, null, eps).map((v, i) => v * scale[i]! / Math.sqrt(H));
        const routerLogits = mv(W.get(`${p}router.proj.weight`), r, c.moe.numExperts);
        gap(gapOf(routerLogits, c.moe.topK));
        const probs = softmax(routerLogits);
        const top = topk(probs, c.moe.topK);
        const sum = top.reduce((s, e) => s + probs[e]!, 0);
        const pes = W.get(`${p}router.per_expert_scale`);
        const xe = rms(h, W.get(`${p}pre_feedforward_layernorm_2.weight`), eps);
        const Ie = c.moe.intermediateSize;
        const gu = W.get(`${p}experts.gate_up_proj`), dn = W.get(`${p}experts.down_proj`);
        let e2: Vec = new Float64Array(H);
        for (const e of top) {
          const gg = mv(gu, xe, 2 * Ie, e * 2 * Ie);
          const y = mv(dn, Float64Array.from({ length: Ie }, (_, i) => geluTanh(gg[i]!) * gg[Ie + i]!), H, e * H);
          const w = (probs[e]! / sum) * pes[e]!;
          e2 = e2.map((v, i) => v + w * y[i]!);
        }
        m = add(m1, rms(e2, W.get(`${p}post_feedforward_layernorm_2.weight`), eps));
      }
      h = add(h, rms(m, W.get(`${p}post_feedforward_layernorm.weight`), eps));
      if (P > 0) {
        const gg = mv(W.get(`${p}per_layer_input_gate.weight`), h, P).map((v, i) => geluTanh(v) * pli[l]![i]!);
        h = add(h, rms(mv(W.get(`${p}per_layer_projection.weight`), gg, H), W.get(`${p}post_per_layer_input_norm.weight`), eps));
      }
      if (W.has(`${p}layer_scalar`)) {
        const s = W.get(`${p}layer_scalar`)[0]!;
        h = h.map((v) => v * s);
      }
    }
    const logits = mv(W.get(lm), rms(h, W.get('model.norm.weight'), eps), c.vocabSize);
    const cap = c.finalLogitSoftcap;
    return cap === null ? logits : logits.map((v) => cap * Math.tanh(v / cap));
  };
  return run(step, prompt, steps);
}
