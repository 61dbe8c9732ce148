// The tensor names of the target models, as Hugging Face checkpoints and
// llama.cpp's GGUF files spell them, mapped to one structured description
// per layer; and the report of what a checkpoint lacks or holds beyond it.
//
// Qwen3.6 (HF model_type qwen3_5_moe; GGUF architecture qwen35moe), after
// transformers' modeling_qwen3_5_moe.py and llama.cpp's gguf-py constants
// (MODEL_TENSORS[QWEN35MOE]) and convert_hf_to_gguf.py:
//   every layer: input_layernorm, post_attention_layernorm, and the MoE block
//     (mlp.gate router; experts; mlp.shared_expert.{gate,up,down}_proj;
//     mlp.shared_expert_gate);
//   gated delta net layers (linear_attention): linear_attn.in_proj_qkv,
//     in_proj_z, in_proj_b, in_proj_a, conv1d, dt_bias, A_log, norm, out_proj;
//   gated full attention layers (full_attention): self_attn.q_proj (queries
//     and their output gate, interleaved per head), k_proj, v_proj, o_proj,
//     q_norm, k_norm.
// Gemma 4 (gemma4 in both), after transformers' modeling_gemma4.py and
//   llama.cpp's MODEL_TENSORS[GEMMA4] and its Gemma4Model converter: every
//   layer has self_attn.q_proj, o_proj, q_norm (k_proj, k_norm and v_proj
//   are absent in layers that share another layer's KV, and v_proj in global
//   layers whose keys are their values), the four sublayer norms, the dense
//   MLP, optionally the MoE block (router.proj, router.scale,
//   router.per_expert_scale, experts, three more norms) and the per-layer
//   input (per_layer_input_gate, per_layer_projection,
//   post_per_layer_input_norm), and layer_scalar. Sliding layers have head
//   dim 256, global ones 512 (global_head_dim): a layer's kind comes from the
//   config's layer_types, else GGUF's gemma4.attention.sliding_window_pattern,
//   else from the q_norm sizes when two occur.
//
// Experts come in the layouts checkpoints use: one tensor per expert
// (experts.<e>.{gate,up,down}_proj.weight), stacked [E, ...] tensors (mlx's
// switch_mlp / switch_glu, GGUF's ffn_{gate,up,down}_exps), or gate and up
// fused (transformers' experts.gate_up_proj [E, 2 I, H], GGUF's
// ffn_gate_up_exps). MLX affine-quantized checkpoints carry `.scales` and
// `.biases` beside a linear layer's `.weight`; they are taken with it.
//
// GGUF tensors are not always HF's under another name: the converter writes
// Qwen3.6's A_log as -exp(A_log), every norm but linear_attn.norm as 1 + w
// (Qwen's norms scale by 1 + w), and, when the key and value head counts of
// the gated delta net differ, its value heads in tiled rather than grouped
// order (in_proj_qkv's V rows, in_proj_z, in_proj_a/b, A_log, dt_bias,
// conv1d's V channels, out_proj's columns); conv1d loses its unit axis.
// Each TensorRef lists these as `transforms`. Gemma 4's norms are stored as
// they are (its norms scale by w).

import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { MlxError } from '../errors.ts';
import { shown, type TensorInfo } from './common.ts';
import { GgufFile } from './gguf.ts';
import { SafetensorsFile, ShardedSafetensors } from './safetensors.ts';
import { WeightSource } from './source.ts';

/** What llama.cpp's converter did to the HF tensor (GGUF naming only). */
export type GgufTransform = 'neg_exp' | 'plus_one' | 'v_heads_tiled';

export interface TensorRef {
  readonly name: string;
  /** From the source; null when only names were given. */
  readonly dtype: string | null;
  readonly shape: readonly number[] | null;
  /** MLX affine quantization: the scales and biases beside the packed weight. */
  readonly scales?: string;
  readonly biases?: string;
  readonly transforms: readonly GgufTransform[];
}

export type Experts =
  | { readonly layout: 'per_expert'; readonly count: number; readonly gate: readonly TensorRef[]; readonly up: readonly TensorRef[]; readonly down: readonly TensorRef[] }
  | { readonly layout: 'stacked'; readonly gate: TensorRef; readonly up: TensorRef; readonly down: TensorRef }
  | { readonly layout: 'gate_up'; readonly gateUp: TensorRef; readonly down: TensorRef };

export interface Qwen35MoeLayer {
  readonly index: number;
  readonly type: 'linear_attention' | 'full_attention';
  readonly inputNorm: TensorRef;
  readonly postAttentionNorm: TensorRef;
  /** The gated delta net (linear_attention layers). */
  readonly linearAttention: {
    readonly inProjQkv: TensorRef; readonly inProjZ: TensorRef; readonly inProjB: TensorRef; readonly inProjA: TensorRef;
    readonly conv1d: TensorRef; readonly dtBias: TensorRef; readonly aLog: TensorRef; readonly norm: TensorRef; readonly outProj: TensorRef;
  } | null;
  /** Gated attention (full_attention layers). */
  readonly fullAttention: {
    readonly qProj: TensorRef; readonly kProj: TensorRef; readonly vProj: TensorRef; readonly oProj: TensorRef;
    readonly qNorm: TensorRef; readonly kNorm: TensorRef;
  } | null;
  readonly moe: {
    readonly router: TensorRef;
    readonly experts: Experts;
    readonly sharedExpert: { readonly gate: TensorRef; readonly up: TensorRef; readonly down: TensorRef };
    readonly sharedExpertGate: TensorRef;
  };
}

export interface Gemma4Layer {
  readonly index: number;
  /** From layer_types, the GGUF sliding-window pattern or the q_norm sizes; 'unknown' where none tells. */
  readonly type: 'sliding_attention' | 'full_attention' | 'unknown';
  /** q_norm's size (256 in sliding layers, 512 in global ones), when shapes are known. */
  readonly headDim: number | null;
  readonly inputNorm: TensorRef;
  readonly postAttentionNorm: TensorRef;
  readonly preFeedforwardNorm: TensorRef;
  readonly postFeedforwardNorm: TensorRef;
  readonly attention: {
    readonly qProj: TensorRef; readonly oProj: TensorRef; readonly qNorm: TensorRef;
    /** Null in layers that reuse another layer's keys and values. */
    readonly kProj: TensorRef | null; readonly kNorm: TensorRef | null;
    /** Null where keys serve as values (attention_k_eq_v global layers) or KV is shared. */
    readonly vProj: TensorRef | null;
  };
  readonly mlp: { readonly gate: TensorRef; readonly up: TensorRef; readonly down: TensorRef };
  readonly moe: {
    readonly router: TensorRef; readonly routerScale: TensorRef; readonly perExpertScale: TensorRef; readonly experts: Experts;
    readonly preFeedforwardNorm2: TensorRef; readonly postFeedforwardNorm1: TensorRef; readonly postFeedforwardNorm2: TensorRef;
  } | null;
  readonly perLayerInput: { readonly gate: TensorRef; readonly projection: TensorRef; readonly postNorm: TensorRef } | null;
  /** Absent in some exports; the forward pass then scales by 1. */
  readonly layerScalar: TensorRef | null;
}

interface ModelBase {
  readonly naming: 'hf' | 'gguf';
  /** The HF prefix of the text model ('model.language_model.', 'model.', ...); '' for GGUF. */
  readonly prefix: string;
  readonly numLayers: number;
  readonly embed: TensorRef;
  readonly finalNorm: TensorRef;
  /** Null where the output projection is tied to the embedding. */
  readonly lmHead: TensorRef | null;
  /** Names of the source set aside on purpose: vision and audio towers, MTP heads. */
  readonly ignored: readonly string[];
  /** Every tensor name the description uses (scales and biases included), for uploadPacked. */
  readonly tensorNames: readonly string[];
}
export interface Qwen35MoeWeights extends ModelBase {
  readonly arch: 'qwen3_5_moe';
  readonly layers: readonly Qwen35MoeLayer[];
}
export interface Gemma4Weights extends ModelBase {
  readonly arch: 'gemma4';
  readonly layers: readonly Gemma4Layer[];
  /** Per-layer embeddings (the small Gemma 4 models), or null. */
  readonly perLayer: { readonly embedTokens: TensorRef; readonly modelProjection: TensorRef; readonly projectionNorm: TensorRef } | null;
  /** GGUF only: the frequency factors of the global layers' proportional rope. */
  readonly ropeFreqs: TensorRef | null;
}
export type ModelWeights = Qwen35MoeWeights | Gemma4Weights;
export type ModelArch = ModelWeights['arch'];

/** What a checkpoint lacks or holds beyond the model's names. */
export interface WeightsReport {
  readonly arch: ModelArch;
  readonly naming: 'hf' | 'gguf';
  readonly numLayers: number;
  /** Names the model needs and the source lacks. */
  readonly missing: readonly string[];
  /** Names of the source no role takes and nothing sets aside. */
  readonly unexpected: readonly string[];
  readonly ignored: readonly string[];
  /** Inconsistencies that are not one name: a layer with both attention kinds, a layer type against the config, ... */
  readonly problems: readonly string[];
  readonly complete: boolean;
}

export interface DescribeOptions {
  /** 'qwen3_5_moe' or 'gemma4'; default: the config's model_type, else GGUF's general.architecture. */
  arch?: ModelArch;
  /**
   * The checkpoint's config.json, parsed: its model_type, num_hidden_layers,
   * layer_types and tie_word_embeddings are used (text_config's where it has
   * one). Default: the config.json beside a safetensors file or index, if any.
   */
  config?: Record<string, unknown>;
  /** Layers of the model; default: the config's, else GGUF's block_count less MTP blocks, else the highest layer index + 1. */
  numLayers?: number;
  /** Per layer 'linear_attention' / 'full_attention' (Qwen) or 'sliding_attention' / 'full_attention' (Gemma); default: the config's. */
  layerTypes?: readonly string[];
  /** describeModel: accept names no role takes (default false: they are refused like missing ones). */
  allowUnexpected?: boolean;
}

type NameSource = WeightSource | readonly string[];

// ---- role tables: [key, HF name below the layer (or model) prefix, GGUF name below blk.N. (or top level), flags] ----

interface Role {
  key: string;
  hf: string | null;
  gguf: string | null;
  /** A linear layer's weight: MLX affine scales and biases may accompany it. */
  linear?: boolean;
  optional?: boolean;
  transforms?: GgufTransform[];
}
type Flags = Omit<Role, 'key' | 'hf' | 'gguf'>;
const r = (key: string, hf: string | null, gguf: string | null, flags: Flags = {}): Role => ({ key, hf, gguf, ...flags });
const L = { linear: true };
const PLUS1: GgufTransform[] = ['plus_one'];
const TILED: GgufTransform[] = ['v_heads_tiled'];

const QWEN_NORMS = [
  r('inputNorm', 'input_layernorm.weight', 'attn_norm.weight', { transforms: PLUS1 }),
  r('postAttentionNorm', 'post_attention_layernorm.weight', 'post_attention_norm.weight', { transforms: PLUS1 }),
];
const QWEN_LINEAR_ATTN = [
  r('inProjQkv', 'linear_attn.in_proj_qkv.weight', 'attn_qkv.weight', { ...L, transforms: TILED }),
  r('inProjZ', 'linear_attn.in_proj_z.weight', 'attn_gate.weight', { ...L, transforms: TILED }),
  r('inProjB', 'linear_attn.in_proj_b.weight', 'ssm_beta.weight', { ...L, transforms: TILED }),
  r('inProjA', 'linear_attn.in_proj_a.weight', 'ssm_alpha.weight', { ...L, transforms: TILED }),
  r('conv1d', 'linear_attn.conv1d.weight', 'ssm_conv1d.weight', { transforms: TILED }),
  r('dtBias', 'linear_attn.dt_bias', 'ssm_dt.bias', { transforms: TILED }),
  r('aLog', 'linear_attn.A_log', 'ssm_a', { transforms: ['neg_exp', 'v_heads_tiled'] }),
  r('norm', 'linear_attn.norm.weight', 'ssm_norm.weight'),
  r('outProj', 'linear_attn.out_proj.weight', 'ssm_out.weight', { ...L, transforms: TILED }),
];
/**
 * The attention projections and q/k norms, named alike by both models; `kv`
 * adds to the k and v projections' flags, qNorm and kNorm are the norms'.
 */
function attentionRoles(kv: Flags, qNorm: Flags, kNorm: Flags): Role[] {
  return [
    r('qProj', 'self_attn.q_proj.weight', 'attn_q.weight', L),
    r('kProj', 'self_attn.k_proj.weight', 'attn_k.weight', { ...L, ...kv }),
    r('vProj', 'self_attn.v_proj.weight', 'attn_v.weight', { ...L, ...kv }),
    r('oProj', 'self_attn.o_proj.weight', 'attn_output.weight', L),
    r('qNorm', 'self_attn.q_norm.weight', 'attn_q_norm.weight', qNorm),
    r('kNorm', 'self_attn.k_norm.weight', 'attn_k_norm.weight', kNorm),
  ];
}
const QWEN_FULL_ATTN = attentionRoles({}, { transforms: PLUS1 }, { transforms: PLUS1 });
const QWEN_MOE = [
  r('router', 'mlp.gate.weight', 'ffn_gate_inp.weight', L),
  r('sharedExpertGate', 'mlp.shared_expert_gate.weight', 'ffn_gate_inp_shexp.weight', L),
];
const QWEN_SHARED = [
  r('gate', 'mlp.shared_expert.gate_proj.weight', 'ffn_gate_shexp.weight', L),
  r('up', 'mlp.shared_expert.up_proj.weight', 'ffn_up_shexp.weight', L),
  r('down', 'mlp.shared_expert.down_proj.weight', 'ffn_down_shexp.weight', L),
];
const QWEN_GLOBAL = [
  r('embed', 'embed_tokens.weight', 'token_embd.weight', L),
  r('finalNorm', 'norm.weight', 'output_norm.weight', { transforms: PLUS1 }),
];

const GEMMA_NORMS = [
  r('inputNorm', 'input_layernorm.weight', 'attn_norm.weight'),
  r('postAttentionNorm', 'post_attention_layernorm.weight', 'post_attention_norm.weight'),
  r('preFeedforwardNorm', 'pre_feedforward_layernorm.weight', 'ffn_norm.weight'),
  r('postFeedforwardNorm', 'post_feedforward_layernorm.weight', 'post_ffw_norm.weight'),
];
/** Gemma 4's layers that read another layer's cache have neither k and v projections nor a k norm. */
const GEMMA_ATTN = attentionRoles({ optional: true }, {}, { optional: true });
const GEMMA_MLP = [
  r('gate', 'mlp.gate_proj.weight', 'ffn_gate.weight', L),
  r('up', 'mlp.up_proj.weight', 'ffn_up.weight', L),
  r('down', 'mlp.down_proj.weight', 'ffn_down.weight', L),
];
const GEMMA_MOE = [
  r('router', 'router.proj.weight', 'ffn_gate_inp.weight', L),
  r('routerScale', 'router.scale', 'ffn_gate_inp.scale'),
  r('perExpertScale', 'router.per_expert_scale', 'ffn_down_exps.scale'),
  r('preFeedforwardNorm2', 'pre_feedforward_layernorm_2.weight', 'pre_ffw_norm_2.weight'),
  r('postFeedforwardNorm1', 'post_feedforward_layernorm_1.weight', 'post_ffw_norm_1.weight'),
  r('postFeedforwardNorm2', 'post_feedforward_layernorm_2.weight', 'post_ffw_norm_2.weight'),
];
const GEMMA_PLE = [
  r('gate', 'per_layer_input_gate.weight', 'inp_gate.weight', L),
  r('projection', 'per_layer_projection.weight', 'proj.weight', L),
  r('postNorm', 'post_per_layer_input_norm.weight', 'post_norm.weight'),
];
const GEMMA_SCALAR = [r('layerScalar', 'layer_scalar', 'layer_output_scale.weight', { optional: true })];
const GEMMA_GLOBAL = [
  r('embed', 'embed_tokens.weight', 'token_embd.weight', L),
  r('finalNorm', 'norm.weight', 'output_norm.weight'),
];
const GEMMA_PER_LAYER = [
  r('embedTokens', 'embed_tokens_per_layer.weight', 'per_layer_token_embd.weight', L),
  r('modelProjection', 'per_layer_model_projection.weight', 'per_layer_model_proj.weight', L),
  r('projectionNorm', 'per_layer_projection_norm.weight', 'per_layer_proj_norm.weight'),
];

/** Expert tensor names of each layout, below the layer. */
interface ExpertNames {
  /** HF: the folder of per-expert and fused tensors ('mlp.experts.' / 'experts.'). */
  hfExperts: string;
  /** mlx: the stacked folder ('mlp.switch_mlp.' / 'experts.switch_glu.'). */
  hfStacked: string;
}
const QWEN_EXPERTS: ExpertNames = { hfExperts: 'mlp.experts.', hfStacked: 'mlp.switch_mlp.' };
const GEMMA_EXPERTS: ExpertNames = { hfExperts: 'experts.', hfStacked: 'experts.switch_glu.' };

/** HF names of the parts a text model checkpoint may carry besides it. */
const IGNORED_HF: Record<ModelArch, RegExp> = {
  qwen3_5_moe: /^(model\.)?(mtp|visual)\./,
  gemma4: /^(model\.)?(vision_tower|audio_tower|embed_vision|embed_audio|multi_modal_projector)\./,
};
const HF_PREFIXES = ['model.language_model.', 'language_model.model.', 'model.', ''];
/** The most layers a description has (a count past it is refused: the description's work grows with it). */
const MAX_LAYERS = 4096;
/** Layers or experts absent between present ones that are listed as missing names; a larger gap is one problem. */
const MAX_LISTED_GAP = 64;
const HF_LM_HEADS = ['lm_head.weight', 'language_model.lm_head.weight'];

const GGUF_ARCH: Record<string, ModelArch> = { qwen35moe: 'qwen3_5_moe', gemma4: 'gemma4' };
const HF_ARCH: Record<string, ModelArch> = { qwen3_5_moe: 'qwen3_5_moe', qwen3_5_moe_text: 'qwen3_5_moe', gemma4: 'gemma4', gemma4_text: 'gemma4' };

// ---- the engine ----

class Scan {
  readonly names: Set<string>;
  readonly claimed = new Set<string>();
  readonly missing: string[] = [];
  readonly problems: string[] = [];
  constructor(
    readonly naming: 'hf' | 'gguf',
    list: readonly string[],
    private readonly info: ((n: string) => TensorInfo | undefined) | null,
  ) {
    this.names = new Set(list);
  }

  /** The tensor if present (claimed, with its MLX affine companions), else null. */
  take(name: string, transforms: readonly GgufTransform[] = [], linear = false): TensorRef | null {
    if (!this.names.has(name)) return null;
    this.claimed.add(name);
    const t = this.info?.(name);
    const ref: { -readonly [K in keyof TensorRef]: TensorRef[K] } = {
      name,
      dtype: t?.dtype ?? null,
      shape: t?.shape ?? null,
      transforms: this.naming === 'gguf' ? transforms : [],
    };
    if (linear && this.naming === 'hf' && name.endsWith('.weight')) {
      const base = name.slice(0, -'.weight'.length);
      for (const part of ['scales', 'biases'] as const) {
        const companion = `${base}.${part}`;
        if (this.names.has(companion)) {
          this.claimed.add(companion);
          ref[part] = companion;
        }
      }
    }
    return ref;
  }

  /** The roles of a group under `base`: null when the group is optional and none is present; missing required ones recorded. */
  group(base: string, roles: readonly Role[], required: boolean): Record<string, TensorRef | null> | null {
    const nameOf = (role: Role): string | null => {
      const rel = this.naming === 'hf' ? role.hf : role.gguf;
      return rel === null ? null : base + rel;
    };
    if (!required && !roles.some((role) => { const n = nameOf(role); return n !== null && this.names.has(n); })) return null;
    const out: Record<string, TensorRef | null> = {};
    for (const role of roles) {
      const n = nameOf(role);
      const ref = n === null ? null : this.take(n, role.transforms, role.linear);
      if (ref === null && n !== null && !role.optional) this.missing.push(n);
      out[role.key] = ref;
    }
    return out;
  }

  /** The experts of a layer in whichever layout the names use; missing names recorded. */
  experts(layerBase: string, layerRest: ReadonlySet<string>, e: ExpertNames, arch: ModelArch): Experts | null {
    if (this.naming === 'gguf') {
      const down = this.take(`${layerBase}ffn_down_exps.weight`);
      const gateUp = this.take(`${layerBase}ffn_gate_up_exps.weight`);
      if (gateUp !== null) {
        if (down === null) this.missing.push(`${layerBase}ffn_down_exps.weight`);
        return down === null ? null : { layout: 'gate_up', gateUp, down };
      }
      if (arch === 'gemma4') {
        if (down === null) this.missing.push(`${layerBase}ffn_down_exps.weight`);
        this.missing.push(`${layerBase}ffn_gate_up_exps.weight`);
        return null;
      }
      const gate = this.take(`${layerBase}ffn_gate_exps.weight`);
      const up = this.take(`${layerBase}ffn_up_exps.weight`);
      for (const [ref, part] of [[gate, 'gate'], [up, 'up'], [down, 'down']] as const) if (ref === null) this.missing.push(`${layerBase}ffn_${part}_exps.weight`);
      return gate && up && down ? { layout: 'stacked', gate, up, down } : null;
    }
    // HF: fused, stacked (mlx) or per expert.
    const fusedGateUp = `${layerBase}${e.hfExperts}gate_up_proj`;
    if (this.names.has(fusedGateUp)) {
      const gateUp = this.take(fusedGateUp)!;
      const down = this.take(`${layerBase}${e.hfExperts}down_proj`);
      if (down === null) this.missing.push(`${layerBase}${e.hfExperts}down_proj`);
      return down === null ? null : { layout: 'gate_up', gateUp, down };
    }
    if (this.names.has(`${layerBase}${e.hfStacked}gate_proj.weight`) || this.names.has(`${layerBase}${e.hfStacked}down_proj.weight`)) {
      const g = this.group(`${layerBase}${e.hfStacked}`, [r('gate', 'gate_proj.weight', null, L), r('up', 'up_proj.weight', null, L), r('down', 'down_proj.weight', null, L)], true)!;
      return g['gate'] && g['up'] && g['down'] ? { layout: 'stacked', gate: g['gate'], up: g['up'], down: g['down'] } : null;
    }
    const rel = new RegExp(`^${e.hfExperts.replaceAll('.', '\\.')}(\\d{1,6})\\.(gate|up|down)_proj\\.weight$`);
    const indices = new Set<number>();
    for (const rest of layerRest) {
      const m = rel.exec(rest);
      if (m !== null) indices.add(Number(m[1]));
    }
    if (indices.size === 0) {
      this.missing.push(fusedGateUp, `${layerBase}${e.hfExperts}down_proj`);
      return null;
    }
    const count = Math.max(...indices) + 1;
    // A few absent experts are listed by name; an index far past the experts present is one problem, not a million names.
    if (count - indices.size > MAX_LISTED_GAP) {
      this.problems.push(`${layerBase}${e.hfExperts}: expert indices reach ${count - 1} but ${indices.size} experts hold tensors`);
      return null;
    }
    const parts = { gate: [] as TensorRef[], up: [] as TensorRef[], down: [] as TensorRef[] };
    let complete = true;
    for (let x = 0; x < count; x++) {
      for (const part of ['gate', 'up', 'down'] as const) {
        const n = `${layerBase}${e.hfExperts}${x}.${part}_proj.weight`;
        const ref = this.take(n, [], true);
        if (ref === null) {
          this.missing.push(n);
          complete = false;
        } else parts[part].push(ref);
      }
    }
    return complete ? { layout: 'per_expert', count, ...parts } : null;
  }
}

function archOf(source: NameSource, opts: DescribeOptions): ModelArch {
  if (opts.arch !== undefined) {
    if (opts.arch !== 'qwen3_5_moe' && opts.arch !== 'gemma4') throw argTypeError('opts.arch', "'qwen3_5_moe' or 'gemma4'", opts.arch);
    return opts.arch;
  }
  const modelType = opts.config?.['model_type'];
  if (typeof modelType === 'string') {
    const a = HF_ARCH[modelType];
    if (a === undefined) throw argTypeError('opts.config.model_type', `one of ${Object.keys(HF_ARCH).join(', ')}`, modelType);
    return a;
  }
  if (source instanceof GgufFile) {
    const a = source.architecture;
    const mapped = a === null ? undefined : GGUF_ARCH[a];
    if (mapped === undefined) throw argTypeError('the GGUF general.architecture', `one of ${Object.keys(GGUF_ARCH).join(', ')}`, a ?? 'none');
    return mapped;
  }
  throw argTypeError('opts.arch', "'qwen3_5_moe' or 'gemma4' (or opts.config with its model_type, or a GGUF file)", 'none');
}

function argTypeError(arg: string, expected: string, actual: unknown): MlxError {
  return new MlxError('InvalidArgument', `describeModel: ${arg} must be ${expected} (got ${typeof actual === 'string' ? actual : shown(actual)})`);
}

interface Setup {
  arch: ModelArch;
  scan: Scan;
  prefix: string;
  numLayers: number;
  layerTypes: readonly string[] | null;
  /** Names below each layer prefix, by layer index. */
  layerRest: Map<number, Set<string>>;
  ignoredRe: RegExp;
  /** The first GGUF block of MTP heads (block_count less nextn_predict_layers); blocks from it are set aside. */
  mtpFrom: number;
  /** The config's tie_word_embeddings, where it says. */
  tiedKnown: boolean | null;
}

/** The config.json beside a safetensors checkpoint, parsed, or undefined where there is none. */
function configBeside(source: NameSource): Record<string, unknown> | undefined {
  const path = source instanceof SafetensorsFile ? (source.fromFile ? source.path : null) : source instanceof ShardedSafetensors ? source.indexPath : null;
  if (path === null) return undefined;
  const p = join(dirname(path), 'config.json');
  if (!existsSync(p)) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(p, 'utf8'));
  } catch (e) {
    throw argTypeError(`the config ${p}`, 'readable JSON', (e as Error).message);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw argTypeError(`the config ${p}`, 'a JSON object', shown(parsed));
  return parsed as Record<string, unknown>;
}

function setup(source: NameSource, givenOpts: DescribeOptions): Setup {
  const opts = givenOpts.config === undefined ? { ...givenOpts, config: configBeside(source) } : givenOpts;
  let list: readonly string[];
  let info: ((n: string) => TensorInfo | undefined) | null = null;
  if (source instanceof WeightSource) {
    list = source.names();
    info = (n) => source.tensors.get(n);
  } else if (Array.isArray(source) && source.every((n) => typeof n === 'string')) {
    list = source;
  } else {
    throw argTypeError('source', 'a weight file (SafetensorsFile, ShardedSafetensors, GgufFile) or an array of tensor names', source);
  }
  const arch = archOf(source, opts);
  const naming = source instanceof GgufFile || list.includes('token_embd.weight') || list.some((n) => n.startsWith('blk.')) ? 'gguf' : 'hf';
  const scan = new Scan(naming, list, info);
  const text = (opts.config?.['text_config'] ?? opts.config ?? {}) as Record<string, unknown>;

  let prefix = '';
  if (naming === 'hf') {
    prefix = HF_PREFIXES.find((p) => scan.names.has(`${p}embed_tokens.weight`) || list.some((n) => n.startsWith(`${p}layers.0.`))) ?? 'model.';
  }
  const layerRe = naming === 'hf' ? new RegExp(`^${prefix.replaceAll('.', '\\.')}layers\\.(\\d{1,6})\\.(.+)$`) : /^blk\.(\d{1,6})\.(.+)$/;
  const layerRest = new Map<number, Set<string>>();
  let maxIndex = -1;
  for (const n of list) {
    const m = layerRe.exec(n);
    if (m === null) continue;
    const i = Number(m[1]);
    if (!layerRest.has(i)) layerRest.set(i, new Set());
    layerRest.get(i)!.add(m[2]!);
    maxIndex = Math.max(maxIndex, i);
  }

  let numLayers = opts.numLayers;
  let mtpFrom = Number.MAX_SAFE_INTEGER;
  const ggufArch = arch === 'qwen3_5_moe' ? 'qwen35moe' : 'gemma4';
  if (numLayers === undefined && typeof text['num_hidden_layers'] === 'number') numLayers = text['num_hidden_layers'];
  if (source instanceof GgufFile) {
    const blocks = source.getNumber(`${ggufArch}.block_count`);
    const nextn = source.getNumber(`${ggufArch}.nextn_predict_layers`) ?? 0;
    if (blocks !== undefined) {
      mtpFrom = blocks - nextn;
      numLayers ??= mtpFrom;
    }
  }
  const problems: string[] = [];
  if (numLayers === undefined) {
    numLayers = maxIndex + 1;
    if (numLayers - layerRest.size > MAX_LISTED_GAP) {
      // Indices far past the layers present: those present are described, the far ones left unexpected.
      problems.push(`layer indices reach ${maxIndex} but ${layerRest.size} layers hold tensors`);
      numLayers = layerRest.size;
    }
  }
  if (!Number.isSafeInteger(numLayers) || numLayers < 0 || numLayers > MAX_LAYERS) {
    throw argTypeError(opts.numLayers !== undefined ? 'opts.numLayers' : 'the layer count', `an integer from 0 to ${MAX_LAYERS}`, numLayers);
  }

  let layerTypes: readonly string[] | null = opts.layerTypes ?? (Array.isArray(text['layer_types']) ? (text['layer_types'] as string[]) : null);
  if (layerTypes !== null && layerTypes.length !== numLayers) {
    throw argTypeError('the layer types', `one per layer (${numLayers})`, `${layerTypes.length} of them`);
  }
  if (layerTypes === null && source instanceof GgufFile) {
    if (arch === 'gemma4') {
      const pattern = source.get('gemma4.attention.sliding_window_pattern');
      if (Array.isArray(pattern) && pattern.length >= numLayers) layerTypes = pattern.slice(0, numLayers).map((s) => (s ? 'sliding_attention' : 'full_attention'));
    } else {
      const interval = source.getNumber('qwen35moe.full_attention_interval');
      if (interval !== undefined && interval > 0) layerTypes = Array.from({ length: numLayers }, (_, i) => ((i + 1) % interval === 0 ? 'full_attention' : 'linear_attention'));
    }
  }
  const tie = text['tie_word_embeddings'] ?? opts.config?.['tie_word_embeddings'];
  scan.problems.push(...problems);
  return { arch, scan, prefix, numLayers, layerTypes, layerRest, ignoredRe: IGNORED_HF[arch], mtpFrom, tiedKnown: typeof tie === 'boolean' ? tie : null };
}

function layerBase(s: Setup, i: number): string {
  return s.scan.naming === 'hf' ? `${s.prefix}layers.${i}.` : `blk.${i}.`;
}

function globals(s: Setup, roles: readonly Role[]): Record<string, TensorRef | null> {
  const g = s.scan.group(s.scan.naming === 'hf' ? s.prefix : '', roles, true)!;
  let lmHead: TensorRef | null = null;
  if (s.scan.naming === 'hf') {
    for (const n of HF_LM_HEADS) lmHead ??= s.scan.take(n, [], true);
  } else {
    lmHead = s.scan.take('output.weight');
  }
  if (lmHead === null && s.tiedKnown === false) s.scan.missing.push(s.scan.naming === 'hf' ? 'lm_head.weight' : 'output.weight');
  g['lmHead'] = lmHead;
  return g;
}

/** What no role took: unexpected, unless it is set aside (towers, MTP). */
function leftovers(s: Setup): { unexpected: string[]; ignored: string[] } {
  const unexpected: string[] = [];
  const ignored: string[] = [];
  const mtp = /^blk\.(\d{1,6})\./;
  for (const n of s.scan.names) {
    if (s.scan.claimed.has(n)) continue;
    let aside = false;
    if (s.scan.naming === 'hf') aside = s.ignoredRe.test(n);
    else {
      const m = mtp.exec(n);
      aside = n.includes('.nextn.') || (m !== null && Number(m[1]) >= s.mtpFrom);
    }
    (aside ? ignored : unexpected).push(n);
  }
  return { unexpected, ignored };
}

function describeQwen(s: Setup): { layers: Qwen35MoeLayer[]; globals: Record<string, TensorRef | null> } {
  const { scan } = s;
  const g = globals(s, QWEN_GLOBAL);
  const layers: Qwen35MoeLayer[] = [];
  for (let i = 0; i < s.numLayers; i++) {
    const base = layerBase(s, i);
    const rest = s.layerRest.get(i) ?? new Set<string>();
    const hasLinear = [...rest].some((n) => (scan.naming === 'hf' ? n.startsWith('linear_attn.') : /^(ssm_|attn_qkv\.|attn_gate\.)/.test(n)));
    const hasFull = [...rest].some((n) => (scan.naming === 'hf' ? n.startsWith('self_attn.') : /^attn_(q|k|v|output|q_norm|k_norm)\./.test(n)));
    const declared = s.layerTypes?.[i];
    if (declared !== undefined && declared !== 'linear_attention' && declared !== 'full_attention') {
      scan.problems.push(`layer ${i}: type ${shown(declared)} must be linear_attention or full_attention`);
    }
    if (hasLinear && hasFull) scan.problems.push(`layer ${i}: holds both gated delta net and full attention tensors`);
    const type: Qwen35MoeLayer['type'] = declared === 'full_attention' || declared === 'linear_attention' ? declared : hasFull && !hasLinear ? 'full_attention' : 'linear_attention';
    if (declared !== undefined && ((type === 'full_attention' && hasLinear && !hasFull) || (type === 'linear_attention' && hasFull && !hasLinear))) {
      scan.problems.push(`layer ${i}: declared ${type} but holds the other kind's tensors`);
    }
    const norms = scan.group(base, QWEN_NORMS, true)!;
    const linear = type === 'linear_attention' ? scan.group(base, QWEN_LINEAR_ATTN, true) : null;
    const full = type === 'full_attention' ? scan.group(base, QWEN_FULL_ATTN, true) : null;
    const moe = scan.group(base, QWEN_MOE, true)!;
    const shared = scan.group(base, QWEN_SHARED, true)!;
    const experts = scan.experts(base, rest, QWEN_EXPERTS, 'qwen3_5_moe');
    layers.push({
      index: i,
      type,
      inputNorm: norms['inputNorm']!,
      postAttentionNorm: norms['postAttentionNorm']!,
      linearAttention: linear as Qwen35MoeLayer['linearAttention'],
      fullAttention: full as Qwen35MoeLayer['fullAttention'],
      moe: { router: moe['router']!, sharedExpertGate: moe['sharedExpertGate']!, sharedExpert: shared as Qwen35MoeLayer['moe']['sharedExpert'], experts: experts! },
    });
  }
  return { layers, globals: g };
}

function describeGemma(s: Setup): { layers: Gemma4Layer[]; globals: Record<string, TensorRef | null>; perLayer: Gemma4Weights['perLayer']; ropeFreqs: TensorRef | null } {
  const { scan } = s;
  const g = globals(s, GEMMA_GLOBAL);
  const perLayer = scan.group(scan.naming === 'hf' ? s.prefix : '', GEMMA_PER_LAYER, false) as Gemma4Weights['perLayer'];
  const ropeFreqs = scan.naming === 'gguf' ? scan.take('rope_freqs.weight') : null;
  const layers: Gemma4Layer[] = [];
  const raw: { attention: Record<string, TensorRef | null>; headDim: number | null }[] = [];
  for (let i = 0; i < s.numLayers; i++) {
    const base = layerBase(s, i);
    const rest = s.layerRest.get(i) ?? new Set<string>();
    const norms = scan.group(base, GEMMA_NORMS, true)!;
    const attention = scan.group(base, GEMMA_ATTN, true)!;
    const mlp = scan.group(base, GEMMA_MLP, true)!;
    const moeRoles = scan.group(base, GEMMA_MOE, false);
    const experts = moeRoles === null ? null : scan.experts(base, rest, GEMMA_EXPERTS, 'gemma4');
    const ple = scan.group(base, GEMMA_PLE, false);
    const scalar = scan.group(base, GEMMA_SCALAR, true)!;
    const qNormShape = attention['qNorm']?.shape;
    const headDim = qNormShape?.length === 1 ? qNormShape[0]! : null;
    raw.push({ attention, headDim });
    const declared = s.layerTypes?.[i];
    if (declared !== undefined && declared !== 'sliding_attention' && declared !== 'full_attention') {
      scan.problems.push(`layer ${i}: type ${shown(declared)} must be sliding_attention or full_attention`);
    }
    layers.push({
      index: i,
      type: declared === 'sliding_attention' || declared === 'full_attention' ? declared : 'unknown',
      headDim,
      inputNorm: norms['inputNorm']!,
      postAttentionNorm: norms['postAttentionNorm']!,
      preFeedforwardNorm: norms['preFeedforwardNorm']!,
      postFeedforwardNorm: norms['postFeedforwardNorm']!,
      attention: attention as unknown as Gemma4Layer['attention'],
      mlp: mlp as unknown as Gemma4Layer['mlp'],
      moe: moeRoles === null ? null : ({ ...moeRoles, experts } as unknown as Gemma4Layer['moe']),
      perLayerInput: ple as Gemma4Layer['perLayerInput'],
      layerScalar: scalar['layerScalar'] ?? null,
    });
  }
  // Without declared types: two q_norm sizes tell sliding (the smaller) from global layers.
  if (s.layerTypes === null) {
    const dims = [...new Set(raw.map((x) => x.headDim).filter((d): d is number => d !== null))].sort((a, b) => a - b);
    if (dims.length === 2) {
      layers.forEach((l, i) => {
        const d = raw[i]!.headDim;
        if (d !== null) (l as { type: Gemma4Layer['type'] }).type = d === dims[0] ? 'sliding_attention' : 'full_attention';
      });
    }
  }
  return { layers, globals: g, perLayer, ropeFreqs };
}

function run(source: NameSource, opts: DescribeOptions) {
  const s = setup(source, opts);
  const body = s.arch === 'qwen3_5_moe' ? describeQwen(s) : describeGemma(s);
  const { unexpected, ignored } = leftovers(s);
  const report: WeightsReport = {
    arch: s.arch,
    naming: s.scan.naming,
    numLayers: s.numLayers,
    missing: s.scan.missing,
    unexpected,
    ignored,
    problems: s.scan.problems,
    complete: s.scan.missing.length === 0 && unexpected.length === 0 && s.scan.problems.length === 0,
  };
  return { s, body, report };
}

/**
 * What the source lacks or holds beyond the model (opts.arch, or the
 * config's or GGUF file's architecture): names missing, names unexpected,
 * names set aside (vision / audio towers, MTP heads) and other problems.
 */
export function checkModel(source: NameSource, opts: DescribeOptions = {}): WeightsReport {
  return run(source, opts).report;
}

/** The report as one message: counts, then the first names of each list. */
export function formatReport(report: WeightsReport, max = 12): string {
  const list = (what: string, xs: readonly string[]) =>
    xs.length === 0 ? [] : [`${xs.length} ${what}: ${xs.slice(0, max).join(', ')}${xs.length > max ? `, ... (${xs.length - max} more)` : ''}`];
  const parts = [...list('missing', report.missing), ...list('unexpected', report.unexpected), ...list('problems', report.problems)];
  return `${report.arch} (${report.naming} names, ${report.numLayers} layers): ${parts.length === 0 ? 'complete' : parts.join('; ')}`;
}

/**
 * The model's tensors as one structured description per layer. Throws an
 * MlxError listing the missing names (and unexpected ones, unless
 * opts.allowUnexpected) where the source does not hold exactly the model;
 * checkModel gives the same findings without throwing.
 */
export function describeModel(source: NameSource, opts: DescribeOptions = {}): ModelWeights {
  const { s, body, report } = run(source, opts);
  const refused = report.missing.length > 0 || report.problems.length > 0 || (report.unexpected.length > 0 && opts.allowUnexpected !== true);
  if (refused) {
    const what = source instanceof WeightSource ? source.description : `${report.naming} tensor names`;
    throw new MlxError('InvalidArgument', `describeModel: ${what} must hold the tensors of ${s.arch} (got ${formatReport(report)})`);
  }
  const g = body.globals;
  const tensorNames = Object.freeze([...s.scan.claimed]);
  const common = {
    naming: s.scan.naming,
    prefix: s.prefix,
    numLayers: s.numLayers,
    embed: g['embed']!,
    finalNorm: g['finalNorm']!,
    lmHead: g['lmHead'] ?? null,
    ignored: report.ignored,
    tensorNames,
  };
  if (s.arch === 'qwen3_5_moe') return { arch: 'qwen3_5_moe', ...common, layers: body.layers as Qwen35MoeLayer[] };
  const gb = body as ReturnType<typeof describeGemma>;
  return { arch: 'gemma4', ...common, layers: gb.layers, perLayer: gb.perLayer, ropeFreqs: gb.ropeFreqs };
}
