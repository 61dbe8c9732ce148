// Tiny random-weight checkpoints of both model families, written the way
// transformers writes them (config.json, model.safetensors with its tensor
// names, bf16 weights), at the configurations of scripts/model_fixtures.py,
// for the model tests and the demo (not shipped). The weights are drawn at
// the scales that script uses, so activations stay near unit size and
// Gemma 4's unscaled attention scores (q . k after q_norm and k_norm, whose
// weights of 1/4 keep them near unit size as trained ones do) stay soft.

import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fromBf16, fromF16, toBf16, toF16 } from '../ts/index.ts';
import { type GgmlQuantType, ggmlDequantizeRef, ggmlQuantize } from '../ts/ops/quantized_matmul_ggml.ts';
import { affineDequantize, affineQuantize, affineWords } from '../ts/ops/quantized_matmul.ts';
import { SafetensorsFile } from '../ts/weights/index.ts';
import { rng, type Rng } from './helpers.ts';
import type { GgufValue } from '../ts/weights/gguf.ts';
import { ggufBytes, safetensorsBytes, type GgufTensorSpec, type StTensor } from './weights-writers.ts';

export type TinyArch = 'qwen3_5_moe' | 'gemma4' | 'gemma4_e' | 'qwen3_5_moe_gguf' | 'gemma4_gguf' | 'gemma4_e_gguf';

/**
 * The configurations of scripts/model_fixtures.py (every field the readers
 * take); the _gguf variants are the same models 256 wide (GGUF's K formats
 * take rows of multiples of 256 values), Qwen3.6's with two key heads and
 * four value heads (GGUF stores its value heads tiled) and a shared expert
 * 64 wide (Q4_0's blocks of 32), Gemma 4's per-layer inputs 32 wide (Q8_0's
 * blocks).
 */
export function tinyConfig(arch: TinyArch): Record<string, unknown> {
  if (arch === 'qwen3_5_moe_gguf') {
    return { ...tinyConfig('qwen3_5_moe'), hidden_size: 256, linear_num_key_heads: 2, linear_num_value_heads: 4, shared_expert_intermediate_size: 64 };
  }
  if (arch === 'gemma4_gguf') return { ...tinyConfig('gemma4'), hidden_size: 256 };
  if (arch === 'gemma4_e_gguf') return { ...tinyConfig('gemma4_e'), hidden_size: 256, hidden_size_per_layer_input: 32 };
  if (arch === 'qwen3_5_moe') {
    return {
      model_type: 'qwen3_5_moe_text', architectures: ['Qwen3_5MoeForCausalLM'],
      vocab_size: 512, hidden_size: 64, num_hidden_layers: 4,
      layer_types: ['linear_attention', 'full_attention', 'linear_attention', 'full_attention'],
      full_attention_interval: 2, num_attention_heads: 2, num_key_value_heads: 1, head_dim: 256, hidden_act: 'silu', max_position_embeddings: 256,
      rms_norm_eps: 1e-6, tie_word_embeddings: false, attention_bias: false,
      rope_parameters: { rope_type: 'default', rope_theta: 10_000_000, partial_rotary_factor: 0.25, mrope_section: [11, 11, 10], mrope_interleaved: true },
      linear_conv_kernel_dim: 4, linear_key_head_dim: 64, linear_value_head_dim: 64, linear_num_key_heads: 1, linear_num_value_heads: 2,
      moe_intermediate_size: 32, shared_expert_intermediate_size: 48, num_experts_per_tok: 2, num_experts: 8,
    };
  }
  const base: Record<string, unknown> = {
    model_type: 'gemma4_text', architectures: ['Gemma4ForCausalLM'],
    vocab_size: 512, hidden_size: 48, intermediate_size: 96, num_hidden_layers: 4,
    layer_types: ['sliding_attention', 'full_attention', 'sliding_attention', 'full_attention'],
    num_attention_heads: 2, num_key_value_heads: 1, head_dim: 256, global_head_dim: 512,
    hidden_activation: 'gelu_pytorch_tanh', max_position_embeddings: 256, rms_norm_eps: 1e-6, tie_word_embeddings: true,
    rope_parameters: {
      sliding_attention: { rope_type: 'default', rope_theta: 10_000 },
      full_attention: { rope_type: 'proportional', partial_rotary_factor: 0.25, rope_theta: 1_000_000 },
    },
    attention_bias: false, sliding_window: 5, final_logit_softcapping: 30,
    vocab_size_per_layer_input: 512, hidden_size_per_layer_input: 0,
    attention_k_eq_v: false, num_kv_shared_layers: 0, enable_moe_block: false, use_double_wide_mlp: false,
    num_global_key_value_heads: null, num_experts: null, top_k_experts: null, moe_intermediate_size: null,
  };
  if (arch === 'gemma4') {
    return { ...base, attention_k_eq_v: true, num_global_key_value_heads: 1, enable_moe_block: true, num_experts: 8, top_k_experts: 2, moe_intermediate_size: 32 };
  }
  return { ...base, hidden_size_per_layer_input: 16, num_kv_shared_layers: 2, use_double_wide_mlp: true };
}

type Draw = (r: Rng, shape: number[]) => number[];
const normal = (std: number): Draw => (r, shape) => Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => r.normal() * std);
const around = (center: number, spread: number): Draw => (r, shape) => normal(spread)(r, shape).map((x) => center + x);
const fanIn = (scale = 1): Draw => (r, shape) => normal(scale / Math.sqrt(shape[shape.length - 1]!))(r, shape);

/** The tensors of a tiny checkpoint: name, shape, how its values are drawn. */
function tensorsOf(arch: TinyArch, overrides: Record<string, unknown> = {}): [string, number[], Draw][] {
  const c = { ...tinyConfig(arch), ...overrides };
  const H = c['hidden_size'] as number, V = c['vocab_size'] as number, L = c['num_hidden_layers'] as number;
  const out: [string, number[], Draw][] = [];
  const add = (name: string, shape: number[], draw: Draw) => out.push([name, shape, draw]);
  if (arch === 'qwen3_5_moe' || arch === 'qwen3_5_moe_gguf') {
    const num = (k: string) => c[k] as number;
    const D = num('head_dim'), nh = num('num_attention_heads'), nkv = num('num_key_value_heads'), hk = num('linear_num_key_heads');
    const hv = num('linear_num_value_heads'), dk = num('linear_key_head_dim'), dv = num('linear_value_head_dim'), E = num('num_experts');
    const I = num('moe_intermediate_size'), Is = num('shared_expert_intermediate_size');
    const C = 2 * hk * dk + hv * dv;
    add('model.embed_tokens.weight', [V, H], normal(1));
    add('lm_head.weight', [V, H], fanIn(2));
    add('model.norm.weight', [H], normal(0.1));
    for (let i = 0; i < L; i++) {
      const p = `model.layers.${i}.`;
      add(`${p}input_layernorm.weight`, [H], normal(0.1));
      add(`${p}post_attention_layernorm.weight`, [H], normal(0.1));
      if (i % 2 === 0) {
        add(`${p}linear_attn.in_proj_qkv.weight`, [C, H], fanIn());
        add(`${p}linear_attn.in_proj_z.weight`, [hv * dv, H], fanIn());
        add(`${p}linear_attn.in_proj_b.weight`, [hv, H], fanIn());
        add(`${p}linear_attn.in_proj_a.weight`, [hv, H], fanIn());
        add(`${p}linear_attn.conv1d.weight`, [C, 1, 4], normal(0.5));
        add(`${p}linear_attn.dt_bias`, [hv], normal(0.5));
        add(`${p}linear_attn.A_log`, [hv], (r, s) => Array.from({ length: s[0]! }, () => Math.log(0.05 + 0.95 * r.next())));
        add(`${p}linear_attn.norm.weight`, [dv], around(1, 0.1));
        add(`${p}linear_attn.out_proj.weight`, [H, hv * dv], fanIn());
      } else {
        add(`${p}self_attn.q_proj.weight`, [nh * D * 2, H], fanIn());
        add(`${p}self_attn.k_proj.weight`, [nkv * D, H], fanIn());
        add(`${p}self_attn.v_proj.weight`, [nkv * D, H], fanIn());
        add(`${p}self_attn.o_proj.weight`, [H, nh * D], fanIn());
        add(`${p}self_attn.q_norm.weight`, [D], normal(0.1));
        add(`${p}self_attn.k_norm.weight`, [D], normal(0.1));
      }
      add(`${p}mlp.gate.weight`, [E, H], fanIn(3));
      add(`${p}mlp.experts.gate_up_proj`, [E, 2 * I, H], fanIn());
      add(`${p}mlp.experts.down_proj`, [E, H, I], fanIn());
      add(`${p}mlp.shared_expert.gate_proj.weight`, [Is, H], fanIn());
      add(`${p}mlp.shared_expert.up_proj.weight`, [Is, H], fanIn());
      add(`${p}mlp.shared_expert.down_proj.weight`, [H, Is], fanIn());
      add(`${p}mlp.shared_expert_gate.weight`, [1, H], fanIn());
    }
    return out;
  }
  const nh = 2, P = c['hidden_size_per_layer_input'] as number, shared = c['num_kv_shared_layers'] as number;
  const moe = c['enable_moe_block'] === true, kEqV = c['attention_k_eq_v'] === true;
  const E = 8, Ie = 32, I = c['intermediate_size'] as number;
  add('model.embed_tokens.weight', [V, H], normal(0.3));
  add('model.norm.weight', [H], around(1, 0.1));
  if (P > 0) {
    add('model.embed_tokens_per_layer.weight', [V, L * P], normal(0.3));
    add('model.per_layer_model_projection.weight', [L * P, H], fanIn());
    add('model.per_layer_projection_norm.weight', [P], around(1, 0.1));
  }
  for (let i = 0; i < L; i++) {
    const p = `model.layers.${i}.`;
    const global = i % 2 === 1;
    const D = global ? 512 : 256;
    const sharedLayer = shared > 0 && i >= L - shared;
    for (const n of ['input_layernorm', 'post_attention_layernorm', 'pre_feedforward_layernorm', 'post_feedforward_layernorm']) add(`${p}${n}.weight`, [H], around(1, 0.1));
    add(`${p}self_attn.q_proj.weight`, [nh * D, H], fanIn());
    add(`${p}self_attn.o_proj.weight`, [H, nh * D], fanIn());
    add(`${p}self_attn.q_norm.weight`, [D], around(0.25, 0.025));
    if (!sharedLayer) {
      add(`${p}self_attn.k_proj.weight`, [D, H], fanIn());
      add(`${p}self_attn.k_norm.weight`, [D], around(0.25, 0.025));
      if (!(kEqV && global)) add(`${p}self_attn.v_proj.weight`, [D, H], fanIn());
    }
    const Il = sharedLayer && c['use_double_wide_mlp'] === true ? 2 * I : I;
    add(`${p}mlp.gate_proj.weight`, [Il, H], fanIn());
    add(`${p}mlp.up_proj.weight`, [Il, H], fanIn());
    add(`${p}mlp.down_proj.weight`, [H, Il], fanIn());
    if (moe) {
      // The router sees rms_norm(h) / sqrt(H): weights of 3 give its logits a spread of about 3, as Qwen's.
      add(`${p}router.proj.weight`, [E, H], normal(3));
      add(`${p}router.scale`, [H], around(1, 0.1));
      add(`${p}router.per_expert_scale`, [E], around(1, 0.1));
      add(`${p}experts.gate_up_proj`, [E, 2 * Ie, H], fanIn());
      add(`${p}experts.down_proj`, [E, H, Ie], fanIn());
      for (const n of ['pre_feedforward_layernorm_2', 'post_feedforward_layernorm_1', 'post_feedforward_layernorm_2']) add(`${p}${n}.weight`, [H], around(1, 0.1));
    }
    if (P > 0) {
      add(`${p}per_layer_input_gate.weight`, [P, H], fanIn());
      add(`${p}per_layer_projection.weight`, [H, P], fanIn());
      add(`${p}post_per_layer_input_norm.weight`, [H], around(1, 0.1));
    }
    add(`${p}layer_scalar`, [1], (r) => [0.6 + 0.6 * r.next()]);
  }
  return out;
}

/**
 * Writes a tiny checkpoint into a new folder (under the system's temp folder
 * unless given) and returns the folder; overrides replace fields of
 * tinyConfig(arch), and the tensors follow them.
 */
export function writeTinyCheckpoint(arch: TinyArch, seed: number, folder?: string, overrides: Record<string, unknown> = {}): string {
  const dir = folder ?? mkdtempSync(join(tmpdir(), `mlxn-${arch}-`));
  mkdirSync(dir, { recursive: true });
  const r = rng(seed);
  const tensors: StTensor[] = tensorsOf(arch, overrides).map(([name, shape, draw]) => {
    const bits = toBf16(draw(r, shape));
    return { name, dtype: 'BF16', shape, data: new Uint8Array(bits.buffer, bits.byteOffset, bits.byteLength) };
  });
  writeFileSync(join(dir, 'model.safetensors'), safetensorsBytes(tensors, { metadata: { format: 'pt' } }));
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...tinyConfig(arch), ...overrides }, null, 1));
  return dir;
}

/**
 * The checkpoint in `folder` with its linear layers of inner size a multiple
 * of groupSize MLX affine-quantized (packed U32 weights, BF16 scales and
 * biases beside them, config.json's "quantization"), written to `quantized`,
 * and the same model with those weights dequantized (F32) to `dequantized`
 * for the float64 reference. The embedding, norms and conv stay as they
 * are; the experts too unless `experts` (stacked expert tensors [E, n, k],
 * mlx's switch layers, quantized row by row as MLX stores them: packed
 * [E, n, k * bits / 32], scales and biases [E, n, k / groupSize]).
 */
export function quantizeCheckpoint(folder: string, quantized: string, dequantized: string, groupSize: number, bits: number,
  experts = false): string[] {
  const src = SafetensorsFile.open(join(folder, 'model.safetensors'));
  const q: StTensor[] = [], d: StTensor[] = [];
  const done: string[] = [];
  const bytesOf = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  for (const t of src.tensors.values()) {
    const raw = src.bytes(t.name);
    const keep = { name: t.name, dtype: t.dtype, shape: [...t.shape], data: raw.slice() };
    const stacked = experts && t.shape.length === 3 && /\.switch_(mlp|glu)\./.test(t.name);
    const lead = stacked ? t.shape.slice(0, 2) : t.shape.slice(0, 1);
    const n = lead.reduce((a, b) => a * b, 1), k = t.shape[t.shape.length - 1];
    const linear = t.name.endsWith('.weight') && (t.shape.length === 2 || stacked) && !t.name.includes('embed_tokens') && k! % groupSize === 0
      && (stacked || !t.name.includes('.experts.'));
    if (!linear) {
      q.push(keep);
      d.push(keep);
      continue;
    }
    const w = fromBf16(src.view(t.name) as Uint16Array);
    const aq = affineQuantize(w, n, k!, groupSize, bits, 'bf16');
    const base = t.name.slice(0, -'.weight'.length);
    const words = affineWords(aq.packed);
    q.push({ name: t.name, dtype: 'U32', shape: [...lead, (k! * bits) / 32], data: bytesOf(words) });
    q.push({ name: `${base}.scales`, dtype: 'BF16', shape: [...lead, k! / groupSize], data: bytesOf(toBf16(aq.scales)) });
    q.push({ name: `${base}.biases`, dtype: 'BF16', shape: [...lead, k! / groupSize], data: bytesOf(toBf16(aq.biases)) });
    const deq = Float32Array.from(affineDequantize(aq.packed, aq.scales, aq.biases, n, k!, groupSize, bits));
    d.push({ name: t.name, dtype: 'F32', shape: [...t.shape], data: bytesOf(deq) });
    done.push(t.name);
  }
  const config = JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')) as Record<string, unknown>;
  for (const [dir, tensors, cfg] of [[quantized, q, { ...config, quantization: { group_size: groupSize, bits } }], [dequantized, d, config]] as const) {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'model.safetensors'), safetensorsBytes(tensors));
    writeFileSync(join(dir, 'config.json'), JSON.stringify(cfg, null, 1));
  }
  return done;
}

export interface Relayout {
  /** The text model's tensor prefix in place of 'model.' ('model.language_model.' in multimodal checkpoints). */
  prefix: string;
  /** How the experts are stored: one tensor per expert (the hub's), or stacked gate / up / down (mlx's switch layers). */
  experts: 'per_expert' | 'stacked';
  /** A tensor of a part the text model sets aside (a vision tower), which loading must skip. */
  extra: string;
}

/**
 * The same model as `folder`'s checkpoint under other names and layouts, as
 * multimodal and mlx checkpoints store it: the text model under
 * `prefix`, the experts split per expert or stacked, a vision tensor beside,
 * and the config nested in text_config under the multimodal model_type.
 * The values are the same, so its logits must be too.
 */
export function relayoutCheckpoint(folder: string, out: string, how: Relayout): void {
  const src = SafetensorsFile.open(join(folder, 'model.safetensors'));
  const config = JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')) as Record<string, unknown>;
  const tensors: StTensor[] = [];
  const rowBytes = (t: { shape: readonly number[] }) => 2 * t.shape[t.shape.length - 1]!;
  for (const t of src.tensors.values()) {
    const name = t.name.startsWith('model.') ? how.prefix + t.name.slice('model.'.length) : t.name;
    const bytes = src.bytes(t.name);
    const m = /^(.*\.)experts\.(gate_up_proj|down_proj)$/.exec(name);
    if (m === null) {
      tensors.push({ name, dtype: t.dtype, shape: [...t.shape], data: bytes.slice() });
      continue;
    }
    const [E, rows, cols] = t.shape as [number, number, number];
    const expertBytes = rows * rowBytes(t);
    const base = m[1]!;
    const part = (e: number, r0: number, n: number) => bytes.slice(e * expertBytes + r0 * rowBytes(t), e * expertBytes + (r0 + n) * rowBytes(t));
    const stackedDir = base.endsWith('mlp.') ? `${base}switch_mlp.` : `${base}experts.switch_glu.`;
    const kinds: [string, number, number][] = m[2] === 'gate_up_proj' ? [['gate_proj', 0, rows / 2], ['up_proj', rows / 2, rows / 2]] : [['down_proj', 0, rows]];
    for (const [kind, r0, n] of kinds) {
      if (how.experts === 'per_expert') {
        for (let e = 0; e < E; e++) tensors.push({ name: `${base}experts.${e}.${kind}.weight`, dtype: t.dtype, shape: [n, cols], data: part(e, r0, n) });
      } else {
        const all = new Uint8Array(E * n * rowBytes(t));
        for (let e = 0; e < E; e++) all.set(part(e, r0, n), e * n * rowBytes(t));
        tensors.push({ name: `${stackedDir}${kind}.weight`, dtype: t.dtype, shape: [E, n, cols], data: all });
      }
    }
  }
  tensors.push({ name: how.extra, dtype: 'BF16', shape: [4], data: new Uint8Array(8) });
  const type = String(config['model_type']).replace(/_text$/, '');
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'model.safetensors'), safetensorsBytes(tensors));
  writeFileSync(join(out, 'config.json'), JSON.stringify({ model_type: type, tie_word_embeddings: config['tie_word_embeddings'], text_config: config }, null, 1));
}

// ---- GGUF ----

/** A tensor's GGUF name (llama.cpp's, as ts/weights/names.ts maps them) below blk.N. or at the top. */
const GGUF_LAYER_NAMES: [RegExp, string][] = [
  [/^input_layernorm\.weight$/, 'attn_norm.weight'],
  [/^post_attention_layernorm\.weight$/, 'post_attention_norm.weight'],
  [/^linear_attn\.in_proj_qkv\.weight$/, 'attn_qkv.weight'],
  [/^linear_attn\.in_proj_z\.weight$/, 'attn_gate.weight'],
  [/^linear_attn\.in_proj_b\.weight$/, 'ssm_beta.weight'],
  [/^linear_attn\.in_proj_a\.weight$/, 'ssm_alpha.weight'],
  [/^linear_attn\.conv1d\.weight$/, 'ssm_conv1d.weight'],
  [/^linear_attn\.dt_bias$/, 'ssm_dt.bias'],
  [/^linear_attn\.A_log$/, 'ssm_a'],
  [/^linear_attn\.norm\.weight$/, 'ssm_norm.weight'],
  [/^linear_attn\.out_proj\.weight$/, 'ssm_out.weight'],
  [/^self_attn\.q_proj\.weight$/, 'attn_q.weight'],
  [/^self_attn\.k_proj\.weight$/, 'attn_k.weight'],
  [/^self_attn\.v_proj\.weight$/, 'attn_v.weight'],
  [/^self_attn\.o_proj\.weight$/, 'attn_output.weight'],
  [/^self_attn\.q_norm\.weight$/, 'attn_q_norm.weight'],
  [/^self_attn\.k_norm\.weight$/, 'attn_k_norm.weight'],
  [/^mlp\.gate\.weight$/, 'ffn_gate_inp.weight'],
  [/^mlp\.experts\.down_proj$/, 'ffn_down_exps.weight'],
  [/^mlp\.shared_expert\.gate_proj\.weight$/, 'ffn_gate_shexp.weight'],
  [/^mlp\.shared_expert\.up_proj\.weight$/, 'ffn_up_shexp.weight'],
  [/^mlp\.shared_expert\.down_proj\.weight$/, 'ffn_down_shexp.weight'],
  [/^mlp\.shared_expert_gate\.weight$/, 'ffn_gate_inp_shexp.weight'],
  [/^pre_feedforward_layernorm\.weight$/, 'ffn_norm.weight'],
  [/^post_feedforward_layernorm\.weight$/, 'post_ffw_norm.weight'],
  [/^mlp\.gate_proj\.weight$/, 'ffn_gate.weight'],
  [/^mlp\.up_proj\.weight$/, 'ffn_up.weight'],
  [/^mlp\.down_proj\.weight$/, 'ffn_down.weight'],
  [/^router\.proj\.weight$/, 'ffn_gate_inp.weight'],
  [/^router\.scale$/, 'ffn_gate_inp.scale'],
  [/^router\.per_expert_scale$/, 'ffn_down_exps.scale'],
  [/^experts\.gate_up_proj$/, 'ffn_gate_up_exps.weight'],
  [/^experts\.down_proj$/, 'ffn_down_exps.weight'],
  [/^pre_feedforward_layernorm_2\.weight$/, 'pre_ffw_norm_2.weight'],
  [/^post_feedforward_layernorm_1\.weight$/, 'post_ffw_norm_1.weight'],
  [/^post_feedforward_layernorm_2\.weight$/, 'post_ffw_norm_2.weight'],
  [/^layer_scalar$/, 'layer_output_scale.weight'],
  [/^per_layer_input_gate\.weight$/, 'inp_gate.weight'],
  [/^per_layer_projection\.weight$/, 'proj.weight'],
  [/^post_per_layer_input_norm\.weight$/, 'post_norm.weight'],
];
const GGUF_TOP_NAMES: Record<string, string> = {
  'model.embed_tokens.weight': 'token_embd.weight', 'lm_head.weight': 'output.weight', 'model.norm.weight': 'output_norm.weight',
  'model.embed_tokens_per_layer.weight': 'per_layer_token_embd.weight', 'model.per_layer_model_projection.weight': 'per_layer_model_proj.weight',
  'model.per_layer_projection_norm.weight': 'per_layer_proj_norm.weight',
};

/**
 * The block type of each GGUF tensor, after llama.cpp's Q4_K_M mix where
 * the row width allows (K formats need rows of multiples of 256 values,
 * Q4_0 / Q8_0 of 32; llama.cpp falls back the same way): every
 * quantized_matmul_ggml type occurs. Tensors of one vector, norms, the
 * conv, routers and scales stay F32 (the router of the shared expert F16).
 */
function ggufTypeOf(name: string, shape: readonly number[]): string {
  const k = shape[shape.length - 1]!;
  if (shape.length < 2 || /norm|ssm_conv1d|ssm_a$|ssm_dt|scale|ffn_gate_inp\.weight/.test(name)) return 'F32';
  if (name === 'ffn_gate_inp_shexp.weight' || name.endsWith('.ffn_gate_inp_shexp.weight')) return 'F16';
  if (name === 'output.weight') return 'Q6_K';
  if (name === 'token_embd.weight') return k % 256 === 0 ? 'Q6_K' : 'Q8_0';
  if (/attn_v\.weight$/.test(name)) return 'Q6_K';
  if (/attn_qkv\.weight$/.test(name) || /_shexp\.weight$/.test(name) && !name.includes('down')) return k % 256 === 0 ? 'Q5_K' : 'Q8_0';
  if (/ssm_(alpha|beta)\.weight$/.test(name)) return 'Q8_0';
  if (/ffn_down_(exps|shexp)\.weight$/.test(name)) return k % 256 === 0 ? 'Q6_K' : 'Q4_0';
  if (/ffn_down\.weight$/.test(name)) return k % 256 === 0 ? 'Q6_K' : 'Q8_0';
  return k % 256 === 0 ? 'Q4_K' : k % 32 === 0 ? 'Q8_0' : 'F16';
}

/**
 * The metadata llama.cpp's convert_hf_to_gguf.py writes for a text config
 * (TextModel.set_gguf_parameters, then Qwen2MoeModel / Qwen3NextModel /
 * _Qwen35MRopeMixin for qwen35moe, Gemma3Model / Gemma4Model for gemma4),
 * with the writer's types (gguf_writer.py: counts u32, floats f32, integer
 * lists i32, flag lists bool; a key written twice keeps the last value).
 * No tokenizer but a list of placeholder tokens for Qwen3.6 (its length is
 * the vocabulary); Gemma 4's vocabulary is left to token_embd.weight.
 */
export function llamaCppMetadata(config: Record<string, unknown>): [string, GgufValue][] {
  const c = config;
  const qwen = String(c['model_type']).startsWith('qwen');
  const arch = qwen ? 'qwen35moe' : 'gemma4';
  const kv = new Map<string, GgufValue>();
  const u32 = (k: string, v: unknown) => kv.set(`${arch}.${k}`, { type: 'u32', value: v as number });
  const f32 = (k: string, v: unknown) => kv.set(`${arch}.${k}`, { type: 'f32', value: Math.fround(v as number) });
  const i32s = (k: string, v: number[]) => kv.set(`${arch}.${k}`, { type: 'array', value: { itemType: 'i32', items: Int32Array.from(v) } });
  const has = (k: string) => c[k] !== undefined && c[k] !== null;
  kv.set('general.architecture', { type: 'string', value: arch });
  const layers = c['num_hidden_layers'] as number;
  const rope = c['rope_parameters'] as Record<string, unknown>;
  // TextModel.set_gguf_parameters.
  u32('block_count', layers);
  u32('context_length', c['max_position_embeddings']);
  u32('embedding_length', c['hidden_size']);
  if (has('intermediate_size')) u32('feed_forward_length', c['intermediate_size']);
  u32('attention.head_count', c['num_attention_heads']);
  u32('attention.head_count_kv', c['num_key_value_heads']);
  const ropeFull = (rope['full_attention'] ?? rope) as Record<string, unknown>;
  if (Array.isArray(rope['mrope_section'])) i32s('rope.dimension_sections', [...(rope['mrope_section'] as number[]), 0, 0, 0, 0].slice(0, 4));
  f32('rope.freq_base', ropeFull['rope_theta']);
  const swa = rope['sliding_attention'] as Record<string, unknown> | undefined;
  if (swa !== undefined) f32('rope.freq_base_swa', swa['rope_theta']);
  f32('attention.layer_norm_rms_epsilon', c['rms_norm_eps']);
  if (has('num_experts')) u32('expert_count', c['num_experts']);
  if (has('num_experts_per_tok') || has('top_k_experts')) u32('expert_used_count', c['num_experts_per_tok'] ?? c['top_k_experts']);
  u32('attention.key_length', c['head_dim']);
  u32('attention.value_length', c['head_dim']);
  kv.set('general.file_type', { type: 'u32', value: 32 });
  if (qwen) {
    u32('expert_feed_forward_length', c['moe_intermediate_size']);
    u32('expert_shared_feed_forward_length', c['shared_expert_intermediate_size']);
    u32('ssm.conv_kernel', c['linear_conv_kernel_dim']);
    u32('ssm.state_size', c['linear_key_head_dim']);
    u32('ssm.group_count', c['linear_num_key_heads']);
    u32('ssm.time_step_rank', c['linear_num_value_heads']);
    u32('ssm.inner_size', (c['linear_value_head_dim'] as number) * (c['linear_num_value_heads'] as number));
    u32('full_attention_interval', c['full_attention_interval'] ?? 4);
    u32('rope.dimension_count', Math.floor((c['head_dim'] as number) * ((c['partial_rotary_factor'] as number | undefined) ?? 0.25)));
    if (!kv.has(`${arch}.rope.dimension_sections`)) i32s('rope.dimension_sections', [11, 11, 10, 0]);
    const vocab = c['vocab_size'] as number;
    kv.set('tokenizer.ggml.model', { type: 'string', value: 'gpt2' });
    kv.set('tokenizer.ggml.tokens', { type: 'array', value: { itemType: 'string', items: Array.from({ length: vocab }, (_, i) => `[PAD${i}]`) } });
  } else {
    const shared = c['num_kv_shared_layers'] as number;
    const types = c['layer_types'] as string[];
    if (has('final_logit_softcapping')) f32('final_logit_softcapping', c['final_logit_softcapping']);
    u32('attention.sliding_window', c['sliding_window']);
    u32('attention.shared_kv_layers', shared);
    u32('embedding_length_per_layer_input', c['hidden_size_per_layer_input'] ?? 0);
    kv.set(`${arch}.attention.sliding_window_pattern`, { type: 'array', value: { itemType: 'bool', items: types.map((t) => t === 'sliding_attention') } });
    u32('attention.key_length', c['global_head_dim']);
    u32('attention.value_length', c['global_head_dim']);
    u32('attention.key_length_swa', c['head_dim']);
    u32('attention.value_length_swa', c['head_dim']);
    if (has('moe_intermediate_size')) u32('expert_feed_forward_length', c['moe_intermediate_size']);
    if (c['use_double_wide_mlp'] === true) {
      const n = c['intermediate_size'] as number;
      i32s('feed_forward_length', Array.from({ length: layers }, (_, i) => (i < layers - shared ? n : 2 * n)));
    }
    if (has('num_global_key_value_heads')) {
      i32s('attention.head_count_kv', types.map((t) => (t === 'sliding_attention' ? c['num_key_value_heads'] : c['num_global_key_value_heads']) as number));
    }
    u32('rope.dimension_count', c['global_head_dim']);
    u32('rope.dimension_count_swa', c['head_dim']);
  }
  return [...kv.entries()];
}

/**
 * The checkpoint in `folder` (HF names, BF16) as llama.cpp's converter and
 * quantizer write it: `out`/model.gguf (GGUF names; Qwen3.6's norms as 1 + w,
 * A_log as -exp(A_log), the gated delta net's value heads tiled, conv1d
 * [C, 4], the experts' gate and up apart; Gemma 4's as they are with the
 * experts' gate_up fused; linear layers in the blocks of ggufTypeOf) beside
 * config.json; and `dequantized`: the same model with HF names and layouts
 * and every weight the value the GGUF file holds (F32), for the float64
 * reference. Returns each GGUF tensor's type.
 */
export function ggufCheckpoint(folder: string, out: string, dequantized: string): Map<string, string> {
  const src = SafetensorsFile.open(join(folder, 'model.safetensors'));
  const config = JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')) as Record<string, unknown>;
  const qwen = String(config['model_type']).startsWith('qwen');
  const hk = (config['linear_num_key_heads'] as number | undefined) ?? 1, hv = (config['linear_num_value_heads'] as number | undefined) ?? 1;
  const dk = (config['linear_key_head_dim'] as number | undefined) ?? 0, dv = (config['linear_value_head_dim'] as number | undefined) ?? 0;
  // Tiled order: position j holds grouped head (j % hk) * (hv / hk) + floor(j / hk).
  const tiledHead = (j: number) => (j % hk) * (hv / hk) + Math.floor(j / hk);
  const tiled = qwen && hk !== hv;
  // Row permutations (stored row i = HF row perm[i]) of the tensors whose value heads are tiled.
  const headRows = (offset: number, per: number, total: number) => Array.from({ length: total }, (_, i) => {
    if (i < offset || !tiled) return i;
    const r = i - offset, j = Math.floor(r / per);
    return offset + tiledHead(j) * per + (r % per);
  });
  const gg: GgufTensorSpec[] = [], deq: StTensor[] = [];
  const types = new Map<string, string>();
  const f32Bytes = (a: Float32Array) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  const add = (hfName: string, ggName: string, hfShape: number[], values: Float32Array, storedShape: number[], rowPerm: number[] | null, colPerm: number[] | null,
    transform: ((x: number) => number) | null) => {
    // Stored = HF values permuted (rows, then columns) and transformed, in the stored shape [rows, k].
    const k = storedShape[storedShape.length - 1]!, rowsN = values.length / k;
    const stored = new Float32Array(values.length);
    for (let i = 0; i < rowsN; i++) {
      const from = rowPerm === null ? i : rowPerm[i]!;
      for (let j = 0; j < k; j++) stored[i * k + j] = values[from * k + (colPerm === null ? j : colPerm[j]!)]!;
    }
    if (transform !== null) for (let i = 0; i < stored.length; i++) stored[i] = Math.fround(transform(stored[i]!));
    const type = ggufTypeOf(ggName, storedShape);
    types.set(ggName, type);
    let data: Uint8Array, held: Float32Array;
    if (type === 'F32') {
      data = f32Bytes(stored);
      held = values;
    } else if (type === 'F16') {
      const bits = toF16(stored);
      data = new Uint8Array(bits.buffer, bits.byteOffset, bits.byteLength);
      held = fromF16(bits);
    } else {
      data = ggmlQuantize(type as GgmlQuantType, stored, rowsN, k);
      const back = ggmlDequantizeRef(type as GgmlQuantType, data, stored.length);
      // Undo the permutations: the HF layout of the values the file holds.
      held = new Float32Array(values.length);
      for (let i = 0; i < rowsN; i++) {
        const to = rowPerm === null ? i : rowPerm[i]!;
        for (let j = 0; j < k; j++) held[to * k + (colPerm === null ? j : colPerm[j]!)] = back[i * k + j]!;
      }
    }
    gg.push({ name: ggName, type, dims: [...storedShape].reverse(), data });
    deq.push({ name: hfName, dtype: 'F32', shape: hfShape, data: f32Bytes(held) });
  };
  for (const t of src.tensors.values()) {
    const values = fromBf16(src.view(t.name) as Uint16Array);
    const shape = [...t.shape];
    const top = GGUF_TOP_NAMES[t.name];
    if (top !== undefined) {
      add(t.name, top, shape, values, shape, null, null, qwen && top === 'output_norm.weight' ? (x) => 1 + x : null);
      continue;
    }
    const m = /^model\.layers\.(\d+)\.(.+)$/.exec(t.name);
    if (m === null) throw new Error(`ggufCheckpoint: no GGUF name for ${t.name}`);
    const base = `blk.${m[1]}.`, rest = m[2]!;
    if (rest === 'mlp.experts.gate_up_proj') {
      // Qwen3.6: llama.cpp's ffn_gate_exps and ffn_up_exps, [E, I, H] each.
      const [E, twoI, H] = shape as [number, number, number], I = twoI / 2;
      for (const [part, r0] of [['gate', 0], ['up', I]] as const) {
        const v = new Float32Array(E * I * H);
        for (let e = 0; e < E; e++) v.set(values.subarray((e * twoI + r0) * H, (e * twoI + r0 + I) * H), e * I * H);
        const hfName = `${t.name}.${part}`;
        add(hfName, `${base}ffn_${part}_exps.weight`, [E, I, H], v, [E, I, H], null, null, null);
      }
      continue;
    }
    const hit = GGUF_LAYER_NAMES.find(([re]) => re.test(rest));
    if (hit === undefined) throw new Error(`ggufCheckpoint: no GGUF name for ${t.name}`);
    const name = base + hit[1];
    const plusOne = qwen && /(^|_)norm\.weight$/.test(hit[1]) && hit[1] !== 'ssm_norm.weight';
    let stored = shape, rowPerm: number[] | null = null, colPerm: number[] | null = null, transform: ((x: number) => number) | null = plusOne ? (x) => 1 + x : null;
    if (qwen && rest.startsWith('linear_attn.')) {
      const kd = hk * dk;
      if (hit[1] === 'attn_qkv.weight' || hit[1] === 'ssm_conv1d.weight') rowPerm = headRows(2 * kd, dv, shape[0]!);
      if (hit[1] === 'attn_gate.weight') rowPerm = headRows(0, dv, shape[0]!);
      if (/ssm_(alpha|beta)\.weight|ssm_a$|ssm_dt\.bias/.test(hit[1])) rowPerm = headRows(0, 1, shape[0]!);
      if (hit[1] === 'ssm_out.weight') colPerm = headRows(0, dv, shape[1]!);
      if (hit[1] === 'ssm_conv1d.weight') stored = [shape[0]!, shape[2]!];
      if (hit[1] === 'ssm_a') transform = (x) => -Math.exp(x);
      if (shape.length === 1) stored = [shape[0]!, 1];
    }
    add(t.name, name, shape, values, stored, rowPerm, colPerm, transform);
    if (stored.length === 2 && shape.length === 1) gg[gg.length - 1]!.dims = [shape[0]!];
  }
  // The reference reads HF's fused gate_up: put the dequantized gate and up back together.
  const byName = new Map(deq.map((d) => [d.name, d]));
  const refTensors: StTensor[] = [];
  for (const d of deq) {
    const m = /^(.*\.gate_up_proj)\.(gate|up)$/.exec(d.name);
    if (m === null) {
      refTensors.push(d);
      continue;
    }
    if (m[2] === 'up') continue;
    const g = d, u = byName.get(`${m[1]}.up`)!;
    const [E, I, H] = g.shape as [number, number, number];
    const all = new Uint8Array(2 * g.data.byteLength);
    for (let e = 0; e < E; e++) {
      all.set(g.data.subarray(e * I * H * 4, (e + 1) * I * H * 4), 2 * e * I * H * 4);
      all.set(u.data.subarray(e * I * H * 4, (e + 1) * I * H * 4), (2 * e + 1) * I * H * 4);
    }
    refTensors.push({ name: m[1]!, dtype: 'F32', shape: [E, 2 * I, H], data: all });
  }
  if (!qwen) {
    // The converter's rope_freqs.weight (Gemma4Model.generate_extra_tensors): factor 1 for the rotated pairs of the
    // global layers' proportional rope, 1e30 (still) for the others.
    const full = (config['rope_parameters'] as Record<string, Record<string, number>>)['full_attention']!;
    const half = (config['global_head_dim'] as number) / 2, rotated = Math.floor(half * full['partial_rotary_factor']!);
    const f = Float32Array.from({ length: half }, (_, i) => (i < rotated ? 1 : 1e30));
    gg.push({ name: 'rope_freqs.weight', type: 'F32', dims: [half], data: f32Bytes(f) });
    types.set('rope_freqs.weight', 'F32');
  }
  const file = ggufBytes({ metadata: llamaCppMetadata(config), tensors: gg }, rng(0));
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'model.gguf'), file.bytes);
  writeFileSync(join(out, 'config.json'), JSON.stringify(config, null, 1));
  mkdirSync(dequantized, { recursive: true });
  writeFileSync(join(dequantized, 'model.safetensors'), safetensorsBytes(refTensors));
  writeFileSync(join(dequantized, 'config.json'), JSON.stringify(config, null, 1));
  return types;
}
