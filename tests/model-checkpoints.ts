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
import { fromBf16, toBf16 } from '../ts/index.ts';
import { affineDequantize, affineQuantize, affineWords } from '../ts/reference/quantized_matmul.ts';
import { SafetensorsFile } from '../ts/weights/index.ts';
import { rng, type Rng } from './helpers.ts';
import { safetensorsBytes, type StTensor } from './weights-writers.ts';

export type TinyArch = 'qwen3_5_moe' | 'gemma4' | 'gemma4_e';

/** The configurations of scripts/model_fixtures.py (every field the readers take). */
export function tinyConfig(arch: TinyArch): Record<string, unknown> {
  if (arch === 'qwen3_5_moe') {
    return {
      model_type: 'qwen3_5_moe_text', architectures: ['Qwen3_5MoeForCausalLM'],
      vocab_size: 512, hidden_size: 64, num_hidden_layers: 4,
      layer_types: ['linear_attention', 'full_attention', 'linear_attention', 'full_attention'],
      num_attention_heads: 2, num_key_value_heads: 1, head_dim: 256, hidden_act: 'silu', max_position_embeddings: 256,
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
function tensorsOf(arch: TinyArch): [string, number[], Draw][] {
  const c = tinyConfig(arch);
  const H = c['hidden_size'] as number, V = c['vocab_size'] as number, L = c['num_hidden_layers'] as number;
  const out: [string, number[], Draw][] = [];
  const add = (name: string, shape: number[], draw: Draw) => out.push([name, shape, draw]);
  if (arch === 'qwen3_5_moe') {
    const D = 256, nh = 2, nkv = 1, hk = 1, hv = 2, dk = 64, dv = 64, E = 8, I = 32, Is = 48;
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

/** Writes a tiny checkpoint into a new folder (under the system's temp folder unless given) and returns the folder. */
export function writeTinyCheckpoint(arch: TinyArch, seed: number, folder?: string): string {
  const dir = folder ?? mkdtempSync(join(tmpdir(), `mlxn-${arch}-`));
  mkdirSync(dir, { recursive: true });
  const r = rng(seed);
  const tensors: StTensor[] = tensorsOf(arch).map(([name, shape, draw]) => {
    const bits = toBf16(draw(r, shape));
    return { name, dtype: 'BF16', shape, data: new Uint8Array(bits.buffer, bits.byteOffset, bits.byteLength) };
  });
  writeFileSync(join(dir, 'model.safetensors'), safetensorsBytes(tensors, { metadata: { format: 'pt' } }));
  writeFileSync(join(dir, 'config.json'), JSON.stringify(tinyConfig(arch), null, 1));
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
