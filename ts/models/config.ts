// The text configurations of the two model families as transformers writes
// them in config.json (a multimodal checkpoint nests them in text_config),
// read into plain objects with every derived per-layer fact the forward
// passes need. transformers leaves out of config.json the fields equal to
// its class defaults, so an absent field takes that default here
// (Qwen3_5MoeTextConfig's and Gemma4TextConfig's). A field the forward pass
// cannot honour is refused here, by name, rather than silently ignored.

import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { invalid } from '../validate.ts';

const OP = 'model config';

type Json = Record<string, unknown>;

/** The text part of a config: text_config where the checkpoint nests it, else the whole object. */
function textOf(config: Json): Json {
  const t = config['text_config'];
  return typeof t === 'object' && t !== null && !Array.isArray(t) ? (t as Json) : config;
}

function int(c: Json, key: string, fallback?: number): number {
  const v = c[key] ?? fallback;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw invalid(OP, key, 'an integer >= 0', v);
  return v;
}

function positive(c: Json, key: string, fallback?: number): number {
  const v = int(c, key, fallback);
  if (v === 0) throw invalid(OP, key, 'an integer > 0', v);
  return v;
}

function num(c: Json, key: string, fallback?: number): number {
  const v = c[key] ?? fallback;
  if (typeof v !== 'number' || !Number.isFinite(v)) throw invalid(OP, key, 'a finite number', v);
  return v;
}

function bool(c: Json, key: string, fallback: boolean): boolean {
  const v = c[key] ?? fallback;
  if (typeof v !== 'boolean') throw invalid(OP, key, 'true or false', v);
  return v;
}

function str(c: Json, key: string, fallback: string): string {
  const v = c[key] ?? fallback;
  if (typeof v !== 'string') throw invalid(OP, key, 'a string', v);
  return v;
}

function obj(v: unknown, key: string): Json {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalid(OP, key, 'an object', v);
  return v as Json;
}

function layerTypes(c: Json, n: number, allowed: readonly string[], fallback: (i: number) => string): string[] {
  const v = c['layer_types'];
  if (v === undefined || v === null) return Array.from({ length: n }, (_, i) => fallback(i));
  if (!Array.isArray(v) || v.length !== n) throw invalid(OP, 'layer_types', `an array of ${n} layer types (num_hidden_layers)`, v);
  v.forEach((t, i) => {
    if (typeof t !== 'string' || !allowed.includes(t)) throw invalid(OP, `layer_types[${i}]`, `one of ${allowed.join(', ')}`, t);
  });
  return v as string[];
}

/** config.json of a checkpoint folder, parsed. */
export function readConfigFile(folder: string): Json {
  const path = existsSync(folder) && statSync(folder).isDirectory() ? join(folder, 'config.json') : folder;
  if (!existsSync(path)) throw invalid(OP, 'path', 'a checkpoint folder holding config.json, or a config.json file', path);
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw invalid(OP, path, 'readable JSON', (e as Error).message);
  }
  return obj(parsed, path);
}

/** The architecture a config names: 'qwen3_5_moe' or 'gemma4' (their text-only model types too). */
export function configArch(config: Json): 'qwen3_5_moe' | 'gemma4' {
  const top = config['model_type'];
  const text = textOf(config)['model_type'];
  for (const t of [top, text]) {
    if (t === 'qwen3_5_moe' || t === 'qwen3_5_moe_text') return 'qwen3_5_moe';
    if (t === 'gemma4' || t === 'gemma4_text') return 'gemma4';
  }
  throw invalid(OP, 'model_type', 'qwen3_5_moe, qwen3_5_moe_text, gemma4 or gemma4_text', top ?? text);
}

// ---- Qwen3.6 (qwen3_5_moe) ----

export interface Qwen35MoeConfig {
  readonly arch: 'qwen3_5_moe';
  readonly vocabSize: number;
  readonly hiddenSize: number;
  readonly numLayers: number;
  readonly layerTypes: readonly ('linear_attention' | 'full_attention')[];
  readonly rmsNormEps: number;
  readonly tieWordEmbeddings: boolean;
  /** Gated full attention. */
  readonly numHeads: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  /** Rotated elements of each head: headDim * partial_rotary_factor (Hugging Face's pairs (i, i + rotaryDim / 2)). */
  readonly rotaryDim: number;
  readonly ropeTheta: number;
  /** The gated delta net. */
  readonly linearNumKeyHeads: number;
  readonly linearNumValueHeads: number;
  readonly linearKeyHeadDim: number;
  readonly linearValueHeadDim: number;
  readonly convKernel: number;
  /** The MoE block. */
  readonly numExperts: number;
  readonly numExpertsPerTok: number;
  readonly moeIntermediateSize: number;
  readonly sharedExpertIntermediateSize: number;
}

export function qwen35MoeConfig(config: Json): Qwen35MoeConfig {
  const c = textOf(config);
  const numLayers = positive(c, 'num_hidden_layers', 40);
  const interval = positive(c, 'full_attention_interval', 4);
  const types = layerTypes(c, numLayers, ['linear_attention', 'full_attention'],
    (i) => ((i + 1) % interval === 0 ? 'full_attention' : 'linear_attention')) as Qwen35MoeConfig['layerTypes'];
  const rope = c['rope_parameters'] === undefined || c['rope_parameters'] === null ? c : obj(c['rope_parameters'], 'rope_parameters');
  const ropeType = str(rope, 'rope_type', 'default');
  if (ropeType !== 'default') throw invalid(OP, 'rope_parameters.rope_type', "'default' (the text model's positions are one axis)", ropeType);
  const numHeads = positive(c, 'num_attention_heads', 16);
  const hiddenSize = positive(c, 'hidden_size', 2048);
  const headDim = positive(c, 'head_dim', 256);
  const factor = num(rope, 'partial_rotary_factor', num(c, 'partial_rotary_factor', 0.25));
  const rotaryDim = Math.floor(headDim * factor);
  if (rotaryDim <= 0 || rotaryDim % 2 !== 0 || rotaryDim > headDim) {
    throw invalid(OP, 'partial_rotary_factor', `a fraction of head_dim (${headDim}) giving an even rotary dimension`, factor);
  }
  const act = str(c, 'hidden_act', 'silu');
  if (act !== 'silu') throw invalid(OP, 'hidden_act', "'silu'", act);
  if (c['attention_bias'] === true) throw invalid(OP, 'attention_bias', 'false (the projections have no bias)', true);
  const out: Qwen35MoeConfig = {
    arch: 'qwen3_5_moe',
    vocabSize: positive(c, 'vocab_size', 248_320),
    hiddenSize,
    numLayers,
    layerTypes: types,
    rmsNormEps: num(c, 'rms_norm_eps', 1e-6),
    tieWordEmbeddings: bool(c, 'tie_word_embeddings', bool(config, 'tie_word_embeddings', false)),
    numHeads,
    numKvHeads: positive(c, 'num_key_value_heads', 2),
    headDim,
    rotaryDim,
    ropeTheta: num(rope, 'rope_theta', num(c, 'rope_theta', 10_000)),
    linearNumKeyHeads: positive(c, 'linear_num_key_heads', 16),
    linearNumValueHeads: positive(c, 'linear_num_value_heads', 32),
    linearKeyHeadDim: positive(c, 'linear_key_head_dim', 128),
    linearValueHeadDim: positive(c, 'linear_value_head_dim', 128),
    convKernel: positive(c, 'linear_conv_kernel_dim', 4),
    numExperts: positive(c, 'num_experts', 256),
    numExpertsPerTok: positive(c, 'num_experts_per_tok', 8),
    moeIntermediateSize: positive(c, 'moe_intermediate_size', 512),
    sharedExpertIntermediateSize: positive(c, 'shared_expert_intermediate_size', 512),
  };
  if (out.numHeads % out.numKvHeads !== 0) throw invalid(OP, 'num_attention_heads', `a multiple of num_key_value_heads (${out.numKvHeads})`, out.numHeads);
  if (out.linearNumValueHeads % out.linearNumKeyHeads !== 0) {
    throw invalid(OP, 'linear_num_value_heads', `a multiple of linear_num_key_heads (${out.linearNumKeyHeads})`, out.linearNumValueHeads);
  }
  if (out.numExpertsPerTok > out.numExperts) throw invalid(OP, 'num_experts_per_tok', `at most num_experts (${out.numExperts})`, out.numExpertsPerTok);
  return out;
}

// ---- Gemma 4 (gemma4 text model) ----

export interface Gemma4LayerConfig {
  readonly type: 'sliding_attention' | 'full_attention';
  readonly headDim: number;
  readonly numKvHeads: number;
  /** Keys serve as values (attention_k_eq_v in a global layer): no v_proj. */
  readonly kEqV: boolean;
  /** The layer whose cache this layer reads (itself unless it shares another's keys and values). */
  readonly kvSource: number;
  /** Rotated pairs (i, i + headDim / 2), i < halfRopeDim. */
  readonly halfRopeDim: number;
  readonly ropeTheta: number;
  /** Every frequency is divided by this (the rope's linear factor; 1 when none). */
  readonly ropeFactor: number;
  readonly intermediateSize: number;
}

export interface Gemma4Config {
  readonly arch: 'gemma4';
  readonly vocabSize: number;
  readonly hiddenSize: number;
  readonly numLayers: number;
  readonly numHeads: number;
  readonly rmsNormEps: number;
  readonly tieWordEmbeddings: boolean;
  readonly slidingWindow: number;
  readonly finalLogitSoftcap: number | null;
  readonly layers: readonly Gemma4LayerConfig[];
  /** Per-layer inputs (the small models): their width, 0 when absent, and their vocabulary. */
  readonly perLayerInputSize: number;
  readonly perLayerVocabSize: number;
  readonly moe: { readonly numExperts: number; readonly topK: number; readonly intermediateSize: number } | null;
}

/** Gemma4TextConfig's rope when config.json has none. */
const GEMMA_DEFAULT_ROPE: Json = {
  sliding_attention: { rope_type: 'default', rope_theta: 10_000 },
  full_attention: { rope_type: 'proportional', partial_rotary_factor: 0.25, rope_theta: 1_000_000 },
};

function gemmaRope(c: Json, type: string, headDim: number): { halfRopeDim: number; ropeTheta: number; ropeFactor: number } {
  const all = obj(c['rope_parameters'] ?? GEMMA_DEFAULT_ROPE, 'rope_parameters');
  const p = obj(all[type], `rope_parameters.${type}`);
  const ropeType = str(p, 'rope_type', 'default');
  const theta = num(p, 'rope_theta');
  const factor = num(p, 'factor', 1);
  if (ropeType === 'default') return { halfRopeDim: headDim / 2, ropeTheta: theta, ropeFactor: 1 };
  if (ropeType === 'proportional') {
    // Frequencies theta^(-2i / headDim) for the first floor(fraction * headDim / 2) pairs, the others still.
    const fraction = num(p, 'partial_rotary_factor', 1);
    return { halfRopeDim: Math.floor((fraction * headDim) / 2), ropeTheta: theta, ropeFactor: factor };
  }
  throw invalid(OP, `rope_parameters.${type}.rope_type`, "'default' or 'proportional'", ropeType);
}

export function gemma4Config(config: Json): Gemma4Config {
  const c = textOf(config);
  const numLayers = positive(c, 'num_hidden_layers', 30);
  const types = layerTypes(c, numLayers, ['sliding_attention', 'full_attention'],
    (i) => ((i + 1) % 6 === 0 || i === numLayers - 1 ? 'full_attention' : 'sliding_attention')) as Gemma4LayerConfig['type'][];
  const bidirectional = c['use_bidirectional_attention'];
  if (bidirectional === 'all') throw invalid(OP, 'use_bidirectional_attention', "null or 'vision' (text is causal)", bidirectional);
  const act = str(c, 'hidden_activation', 'gelu_pytorch_tanh');
  if (act !== 'gelu_pytorch_tanh') throw invalid(OP, 'hidden_activation', "'gelu_pytorch_tanh'", act);
  if (c['attention_bias'] === true) throw invalid(OP, 'attention_bias', 'false (the projections have no bias)', true);
  const numHeads = positive(c, 'num_attention_heads', 8);
  const headDim = positive(c, 'head_dim', 256);
  const numKvHeads = positive(c, 'num_key_value_heads', 4);
  const perLayerCfg = (c['per_layer_config'] ?? null) as Json | null;
  const globalHeadDim = c['global_head_dim'] === null ? null : positive(c, 'global_head_dim', 512);
  const kEqV = bool(c, 'attention_k_eq_v', false);
  const globalKv = c['num_global_key_value_heads'] === undefined || c['num_global_key_value_heads'] === null ? null : positive(c, 'num_global_key_value_heads');
  const shared = int(c, 'num_kv_shared_layers', 0);
  const firstShared = numLayers - shared;
  const intermediate = positive(c, 'intermediate_size', 9216);
  const doubleWide = bool(c, 'use_double_wide_mlp', false);
  const layers: Gemma4LayerConfig[] = [];
  for (let i = 0; i < numLayers; i++) {
    const type = types[i]!;
    // A per-layer override (the newer config layout) wins over the global fields.
    const over = perLayerCfg !== null && typeof perLayerCfg === 'object' ? ((perLayerCfg[String(i)] ?? null) as Json | null) : null;
    const isGlobal = type === 'full_attention';
    let dim = isGlobal && globalHeadDim !== null ? globalHeadDim : headDim;
    let kv = isGlobal && kEqV && globalKv !== null ? globalKv : numKvHeads;
    if (over !== null) {
      if (typeof over['head_dim'] === 'number') dim = over['head_dim'];
      if (typeof over['num_key_value_heads'] === 'number') kv = over['num_key_value_heads'];
    }
    if (numHeads % kv !== 0) throw invalid(OP, `layer ${i} num_key_value_heads`, `a divisor of num_attention_heads (${numHeads})`, kv);
    let kvSource = i;
    if (shared > 0 && i >= firstShared) {
      // A shared layer reads the last layer of its kind before the shared ones.
      let s = -1;
      for (let j = firstShared - 1; j >= 0; j--) if (types[j] === type) { s = j; break; }
      if (s < 0) throw invalid(OP, 'num_kv_shared_layers', `a count leaving a ${type} layer before the shared ones`, shared);
      kvSource = s;
    }
    layers.push({
      type,
      headDim: dim,
      numKvHeads: kv,
      kEqV: kEqV && isGlobal,
      kvSource,
      ...gemmaRope(c, type, dim),
      intermediateSize: intermediate * (doubleWide && shared > 0 && i >= firstShared ? 2 : 1),
    });
  }
  // A shared layer attends with the source layer's head geometry.
  for (const [i, l] of layers.entries()) {
    const src = layers[l.kvSource]!;
    if (src.headDim !== l.headDim || src.numKvHeads !== l.numKvHeads) {
      throw invalid(OP, `layer ${i}`, `the head geometry of layer ${l.kvSource}, whose keys and values it reads`, `${l.headDim} x ${l.numKvHeads}`);
    }
  }
  const moeOn = bool(c, 'enable_moe_block', false);
  const softcap = c['final_logit_softcapping'];
  if (softcap !== null && softcap !== undefined && (typeof softcap !== 'number' || !(softcap > 0))) {
    throw invalid(OP, 'final_logit_softcapping', 'a number > 0 or null', softcap);
  }
  return {
    arch: 'gemma4',
    vocabSize: positive(c, 'vocab_size', 262_144),
    hiddenSize: positive(c, 'hidden_size', 2304),
    numLayers,
    numHeads,
    rmsNormEps: num(c, 'rms_norm_eps', 1e-6),
    tieWordEmbeddings: bool(c, 'tie_word_embeddings', bool(config, 'tie_word_embeddings', true)),
    slidingWindow: positive(c, 'sliding_window', 512),
    finalLogitSoftcap: typeof softcap === 'number' ? softcap : null,
    layers,
    perLayerInputSize: c['hidden_size_per_layer_input'] === null ? 0 : int(c, 'hidden_size_per_layer_input', 256),
    perLayerVocabSize: int(c, 'vocab_size_per_layer_input', 262_144),
    moe: moeOn
      ? { numExperts: positive(c, 'num_experts'), topK: positive(c, 'top_k_experts'), intermediateSize: positive(c, 'moe_intermediate_size') }
      : null,
  };
}

export type ModelConfig = Qwen35MoeConfig | Gemma4Config;

/** The config of either family, by its model_type. */
export function modelConfig(config: Json): ModelConfig {
  return configArch(config) === 'qwen3_5_moe' ? qwen35MoeConfig(config) : gemma4Config(config);
}
