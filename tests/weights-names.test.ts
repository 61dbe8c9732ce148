// The tensor names of Qwen3.6 (qwen3_5_moe / qwen35moe) and Gemma 4
// (gemma4) in HF and GGUF naming (ts/weights/names.ts): checkpoints of small
// configurations named as transformers, mlx and llama.cpp write them, mapped
// to the per-layer description; and every kind of finding: missing names,
// unexpected names, towers and MTP heads set aside, layer types against the
// config.

import { afterAll, describe, expect, test } from 'bun:test';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkModel, describeModel, formatReport, GgufFile, openWeights, SafetensorsFile, type Gemma4Weights, type GgufValue, type Qwen35MoeWeights } from '../ts/weights/index.ts';
import { errorOf, rng } from './helpers.ts';
import { ggufBytes, safetensorsBytes } from './weights-writers.ts';

const r = rng(0x4e4d);

// ---- Qwen3.6: 4 layers, every 4th full attention, 4 experts ----

const QWEN_TYPES = ['linear_attention', 'linear_attention', 'linear_attention', 'full_attention'] as const;
const QWEN_CONFIG = { model_type: 'qwen3_5_moe', text_config: { num_hidden_layers: 4, layer_types: QWEN_TYPES, tie_word_embeddings: false } };

type ExpertLayout = 'per_expert' | 'gate_up' | 'stacked';

function qwenHf(prefix: string, experts: ExpertLayout, affine = false, extras = true): string[] {
  const names: string[] = [];
  const lin = (n: string) => {
    names.push(n);
    if (affine) names.push(n.replace(/\.weight$/, '.scales'), n.replace(/\.weight$/, '.biases'));
  };
  lin(`${prefix}embed_tokens.weight`);
  names.push(`${prefix}norm.weight`);
  lin('lm_head.weight');
  QWEN_TYPES.forEach((type, i) => {
    const b = `${prefix}layers.${i}.`;
    names.push(`${b}input_layernorm.weight`, `${b}post_attention_layernorm.weight`);
    if (type === 'linear_attention') {
      for (const p of ['in_proj_qkv', 'in_proj_z', 'in_proj_b', 'in_proj_a', 'out_proj']) lin(`${b}linear_attn.${p}.weight`);
      names.push(`${b}linear_attn.conv1d.weight`, `${b}linear_attn.dt_bias`, `${b}linear_attn.A_log`, `${b}linear_attn.norm.weight`);
    } else {
      for (const p of ['q_proj', 'k_proj', 'v_proj', 'o_proj']) lin(`${b}self_attn.${p}.weight`);
      names.push(`${b}self_attn.q_norm.weight`, `${b}self_attn.k_norm.weight`);
    }
    lin(`${b}mlp.gate.weight`);
    lin(`${b}mlp.shared_expert_gate.weight`);
    for (const p of ['gate', 'up', 'down']) lin(`${b}mlp.shared_expert.${p}_proj.weight`);
    if (experts === 'gate_up') names.push(`${b}mlp.experts.gate_up_proj`, `${b}mlp.experts.down_proj`);
    else if (experts === 'stacked') for (const p of ['gate', 'up', 'down']) lin(`${b}mlp.switch_mlp.${p}_proj.weight`);
    else for (let e = 0; e < 4; e++) for (const p of ['gate', 'up', 'down']) lin(`${b}mlp.experts.${e}.${p}_proj.weight`);
  });
  if (extras) names.push('mtp.layers.0.mlp.gate.weight', 'mtp.fc.weight', 'model.visual.blocks.0.attn.qkv.weight');
  return names;
}

function qwenGguf(blocks: number, fusedExperts: boolean): string[] {
  const names = ['token_embd.weight', 'output_norm.weight', 'output.weight'];
  for (let i = 0; i < blocks; i++) {
    const b = `blk.${i}.`;
    names.push(`${b}attn_norm.weight`, `${b}post_attention_norm.weight`);
    if ((i + 1) % 4 !== 0) {
      names.push(...['attn_qkv.weight', 'attn_gate.weight', 'ssm_beta.weight', 'ssm_alpha.weight', 'ssm_conv1d.weight', 'ssm_dt.bias', 'ssm_a', 'ssm_norm.weight', 'ssm_out.weight'].map((n) => b + n));
    } else {
      names.push(...['attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight', 'attn_q_norm.weight', 'attn_k_norm.weight'].map((n) => b + n));
    }
    names.push(...['ffn_gate_inp.weight', 'ffn_gate_inp_shexp.weight', 'ffn_gate_shexp.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight'].map((n) => b + n));
    names.push(...(fusedExperts ? ['ffn_gate_up_exps.weight', 'ffn_down_exps.weight'] : ['ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight']).map((n) => b + n));
  }
  return names;
}

/** A GGUF file holding the names (tiny F32 tensors) and the metadata. */
function ggufOf(names: string[], metadata: [string, GgufValue][], shape: (n: string) => number[] = () => [2]): GgufFile {
  const w = ggufBytes({ metadata, tensors: names.map((name) => ({ name, type: 'F32', dims: [...shape(name)].reverse() })) }, r);
  return GgufFile.fromBytes(w.bytes, 'model.gguf');
}

/** A safetensors file holding the names (F32 tensors of the given shapes). */
function safetensorsOf(names: string[], shape: (n: string) => number[] = () => [2]): SafetensorsFile {
  const ts = names.map((name) => {
    const s = shape(name);
    return { name, dtype: 'F32', shape: s, data: new Uint8Array(4 * s.reduce((a, b) => a * b, 1)).fill(1) };
  });
  return SafetensorsFile.fromBytes(safetensorsBytes(ts), 'model.safetensors');
}

describe('Qwen3.6 (qwen3_5_moe)', () => {
  test('HF names of the multimodal checkpoint, one tensor per expert: every layer described; MTP and vision set aside', () => {
    const names = qwenHf('model.language_model.', 'per_expert');
    const m = describeModel(names, { config: QWEN_CONFIG }) as Qwen35MoeWeights;
    expect(m).toMatchObject({ arch: 'qwen3_5_moe', naming: 'hf', prefix: 'model.language_model.', numLayers: 4 });
    expect(m.embed.name).toBe('model.language_model.embed_tokens.weight');
    expect(m.lmHead?.name).toBe('lm_head.weight');
    expect(m.layers.map((l) => l.type)).toEqual([...QWEN_TYPES]);
    const l0 = m.layers[0]!;
    expect(l0.fullAttention).toBeNull();
    expect(l0.linearAttention!.aLog).toEqual({ name: 'model.language_model.layers.0.linear_attn.A_log', dtype: null, shape: null, transforms: [] });
    expect(l0.linearAttention!.dtBias.name).toBe('model.language_model.layers.0.linear_attn.dt_bias');
    const l3 = m.layers[3]!;
    expect(l3.linearAttention).toBeNull();
    expect(l3.fullAttention!.qNorm.name).toBe('model.language_model.layers.3.self_attn.q_norm.weight');
    const ex = l3.moe.experts;
    expect(ex.layout).toBe('per_expert');
    if (ex.layout === 'per_expert') {
      expect(ex.count).toBe(4);
      expect(ex.down[2]!.name).toBe('model.language_model.layers.3.mlp.experts.2.down_proj.weight');
    }
    expect(l3.moe.sharedExpertGate.name).toBe('model.language_model.layers.3.mlp.shared_expert_gate.weight');
    expect([...m.ignored].sort()).toEqual(['model.visual.blocks.0.attn.qkv.weight', 'mtp.fc.weight', 'mtp.layers.0.mlp.gate.weight']);
    expect([...m.tensorNames].sort()).toEqual(names.filter((n) => !m.ignored.includes(n)).sort());
  });

  test("transformers' fused experts under model.; the layer types read from the tensors when no config is given", () => {
    const m = describeModel(qwenHf('model.', 'gate_up', false, false), { arch: 'qwen3_5_moe' }) as Qwen35MoeWeights;
    expect(m.prefix).toBe('model.');
    expect(m.layers.map((l) => l.type)).toEqual([...QWEN_TYPES]);
    expect(m.layers[1]!.moe.experts).toMatchObject({ layout: 'gate_up', gateUp: { name: 'model.layers.1.mlp.experts.gate_up_proj' }, down: { name: 'model.layers.1.mlp.experts.down_proj' } });
  });

  test('MLX affine: scales and biases taken with each linear weight; stacked switch_mlp experts', () => {
    const names = qwenHf('language_model.model.', 'stacked', true, false).map((n) => (n === 'lm_head.weight' ? 'language_model.lm_head.weight' : n))
      .concat(['language_model.lm_head.scales', 'language_model.lm_head.biases']).filter((n) => !n.startsWith('lm_head.'));
    const m = describeModel(names, { config: QWEN_CONFIG }) as Qwen35MoeWeights;
    expect(m.prefix).toBe('language_model.model.');
    expect(m.lmHead).toMatchObject({ name: 'language_model.lm_head.weight', scales: 'language_model.lm_head.scales', biases: 'language_model.lm_head.biases' });
    const q = m.layers[0]!.linearAttention!.inProjQkv;
    expect(q).toMatchObject({ scales: 'language_model.model.layers.0.linear_attn.in_proj_qkv.scales', biases: 'language_model.model.layers.0.linear_attn.in_proj_qkv.biases' });
    expect(m.layers[0]!.linearAttention!.norm.scales).toBeUndefined();
    const ex = m.layers[2]!.moe.experts;
    expect(ex.layout).toBe('stacked');
    if (ex.layout === 'stacked') expect(ex.up.scales).toBe('language_model.model.layers.2.mlp.switch_mlp.up_proj.scales');
    expect(m.tensorNames.length).toBe(names.length);
  });

  test('GGUF: architecture, layer count and layer types from the metadata; the MTP block set aside; what the converter did to each tensor', () => {
    const names = qwenGguf(5, false).concat(['blk.4.nextn.eh_proj.weight']);
    const meta: [string, GgufValue][] = [
      ['general.architecture', { type: 'string', value: 'qwen35moe' }],
      ['qwen35moe.block_count', { type: 'u32', value: 5 }],
      ['qwen35moe.nextn_predict_layers', { type: 'u32', value: 1 }],
      ['qwen35moe.full_attention_interval', { type: 'u32', value: 4 }],
    ];
    const f = ggufOf(names, meta, (n) => (n.endsWith('ssm_a') ? [32] : [2, 3]));
    const m = describeModel(f) as Qwen35MoeWeights;
    expect(m).toMatchObject({ arch: 'qwen3_5_moe', naming: 'gguf', prefix: '', numLayers: 4 });
    expect(m.layers.map((l) => l.type)).toEqual([...QWEN_TYPES]);
    const la = m.layers[0]!.linearAttention!;
    expect(la.aLog).toEqual({ name: 'blk.0.ssm_a', dtype: 'F32', shape: [32], transforms: ['neg_exp', 'v_heads_tiled'] });
    expect(la.dtBias).toMatchObject({ name: 'blk.0.ssm_dt.bias', transforms: ['v_heads_tiled'] });
    expect(la.norm.transforms).toEqual([]); // linear_attn.norm is stored as it is
    expect(m.layers[0]!.inputNorm.transforms).toEqual(['plus_one']);
    expect(m.layers[3]!.fullAttention!.kNorm).toMatchObject({ name: 'blk.3.attn_k_norm.weight', transforms: ['plus_one'] });
    expect(m.finalNorm.transforms).toEqual(['plus_one']);
    expect(m.layers[3]!.moe.experts).toMatchObject({ layout: 'stacked', gate: { name: 'blk.3.ffn_gate_exps.weight', shape: [2, 3] } });
    expect(m.ignored.length).toBe(names.filter((n) => n.startsWith('blk.4.')).length);
    const fused = describeModel(qwenGguf(4, true), { arch: 'qwen3_5_moe' }) as Qwen35MoeWeights;
    expect(fused.layers[0]!.moe.experts).toMatchObject({ layout: 'gate_up', gateUp: { name: 'blk.0.ffn_gate_up_exps.weight' } });
  });
});

// ---- Gemma 4: 6 layers, 5 sliding then 1 global; head dims 8 and 16 here ----

const GEMMA_TYPES = ['sliding_attention', 'sliding_attention', 'sliding_attention', 'sliding_attention', 'sliding_attention', 'full_attention'] as const;

interface GemmaOpts {
  moe?: boolean;
  ple?: boolean;
  /** The last n layers reuse earlier layers' KV: no k/v projections or k_norm. */
  kvShared?: number;
  /** Global layers without v_proj (keys serve as values). */
  kEqV?: boolean;
}

function gemmaHf(prefix: string, o: GemmaOpts = {}): string[] {
  const names = [`${prefix}embed_tokens.weight`, `${prefix}norm.weight`];
  if (o.ple) names.push(`${prefix}embed_tokens_per_layer.weight`, `${prefix}per_layer_model_projection.weight`, `${prefix}per_layer_projection_norm.weight`);
  GEMMA_TYPES.forEach((type, i) => {
    const b = `${prefix}layers.${i}.`;
    const shared = i >= GEMMA_TYPES.length - (o.kvShared ?? 0);
    names.push(...['q_proj', 'o_proj'].map((p) => `${b}self_attn.${p}.weight`), `${b}self_attn.q_norm.weight`);
    if (!shared) {
      names.push(`${b}self_attn.k_proj.weight`, `${b}self_attn.k_norm.weight`);
      if (!(o.kEqV && type === 'full_attention')) names.push(`${b}self_attn.v_proj.weight`);
    }
    names.push(...['input_layernorm', 'post_attention_layernorm', 'pre_feedforward_layernorm', 'post_feedforward_layernorm'].map((n) => `${b}${n}.weight`));
    names.push(...['gate', 'up', 'down'].map((p) => `${b}mlp.${p}_proj.weight`), `${b}layer_scalar`);
    if (o.moe) {
      names.push(`${b}router.proj.weight`, `${b}router.scale`, `${b}router.per_expert_scale`, `${b}experts.gate_up_proj`, `${b}experts.down_proj`);
      names.push(...['pre_feedforward_layernorm_2', 'post_feedforward_layernorm_1', 'post_feedforward_layernorm_2'].map((n) => `${b}${n}.weight`));
    }
    if (o.ple) names.push(`${b}per_layer_input_gate.weight`, `${b}per_layer_projection.weight`, `${b}post_per_layer_input_norm.weight`);
  });
  return names;
}

function gemmaGguf(o: GemmaOpts = {}): string[] {
  const names = ['token_embd.weight', 'output_norm.weight', 'rope_freqs.weight'];
  if (o.ple) names.push('per_layer_token_embd.weight', 'per_layer_model_proj.weight', 'per_layer_proj_norm.weight');
  GEMMA_TYPES.forEach((type, i) => {
    const b = `blk.${i}.`;
    names.push(...['attn_q', 'attn_output', 'attn_q_norm', 'attn_k', 'attn_k_norm'].map((n) => `${b}${n}.weight`));
    if (!(o.kEqV && type === 'full_attention')) names.push(`${b}attn_v.weight`);
    names.push(...['attn_norm', 'post_attention_norm', 'ffn_norm', 'post_ffw_norm', 'ffn_gate', 'ffn_up', 'ffn_down', 'layer_output_scale'].map((n) => `${b}${n}.weight`));
    if (o.moe) {
      names.push(...['ffn_gate_inp.weight', 'ffn_gate_inp.scale', 'ffn_down_exps.scale', 'ffn_gate_up_exps.weight', 'ffn_down_exps.weight', 'pre_ffw_norm_2.weight', 'post_ffw_norm_1.weight', 'post_ffw_norm_2.weight'].map((n) => b + n));
    }
    if (o.ple) names.push(...['inp_gate', 'proj', 'post_norm'].map((n) => `${b}${n}.weight`));
  });
  return names;
}

/** q_norm of the head dim of the layer's kind (8 sliding, 16 global); [2] elsewhere. */
function gemmaShape(n: string): number[] {
  const m = /layers\.(\d+)\.self_attn\.q_norm|blk\.(\d+)\.attn_q_norm/.exec(n);
  if (m === null) return [2];
  return [GEMMA_TYPES[Number(m[1] ?? m[2])] === 'full_attention' ? 16 : 8];
}

describe('Gemma 4 (gemma4)', () => {
  test('HF: MoE, per-layer inputs, KV-shared layers and keys-as-values global layers; types from the config; towers set aside', () => {
    const names = gemmaHf('model.language_model.', { moe: true, ple: true, kvShared: 2, kEqV: true }).concat(['model.vision_tower.encoder.layers.0.mlp.fc1.weight', 'model.embed_audio.embedding_projection.weight']);
    const m = describeModel(names, { config: { model_type: 'gemma4', text_config: { num_hidden_layers: 6, layer_types: GEMMA_TYPES } } }) as Gemma4Weights;
    expect(m).toMatchObject({ arch: 'gemma4', naming: 'hf', numLayers: 6, lmHead: null, ropeFreqs: null });
    expect(m.layers.map((l) => l.type)).toEqual([...GEMMA_TYPES]);
    expect(m.perLayer!.embedTokens.name).toBe('model.language_model.embed_tokens_per_layer.weight');
    const l0 = m.layers[0]!;
    expect(l0.attention.vProj?.name).toBe('model.language_model.layers.0.self_attn.v_proj.weight');
    expect(l0.layerScalar?.name).toBe('model.language_model.layers.0.layer_scalar');
    expect(l0.moe).toMatchObject({ router: { name: 'model.language_model.layers.0.router.proj.weight' }, perExpertScale: { name: 'model.language_model.layers.0.router.per_expert_scale' }, experts: { layout: 'gate_up' } });
    expect(l0.perLayerInput!.postNorm.name).toBe('model.language_model.layers.0.post_per_layer_input_norm.weight');
    const l5 = m.layers[5]!; // global and KV-shared
    expect(l5.attention).toMatchObject({ kProj: null, kNorm: null, vProj: null });
    expect(m.ignored.length).toBe(2);
  });

  test('HF dense, from a file: head dims from q_norm; the layer kinds inferred from the two sizes when no config says', () => {
    const f = safetensorsOf(gemmaHf('model.'), gemmaShape);
    const m = describeModel(f, { arch: 'gemma4' }) as Gemma4Weights;
    expect(m.layers.map((l) => l.headDim)).toEqual([8, 8, 8, 8, 8, 16]);
    expect(m.layers.map((l) => l.type)).toEqual([...GEMMA_TYPES]);
    expect(m.layers[0]!.moe).toBeNull();
    expect(m.perLayer).toBeNull();
    expect(m.layers[2]!.mlp.down).toEqual({ name: 'model.layers.2.mlp.down_proj.weight', dtype: 'F32', shape: [2], transforms: [] });
    // Without a config and with one head dim, the kind is unknown.
    const same = describeModel(safetensorsOf(gemmaHf('model.')), { arch: 'gemma4' }) as Gemma4Weights;
    expect(same.layers.every((l) => l.type === 'unknown')).toBe(true);
  });

  test('GGUF: the sliding-window pattern gives the kinds; MoE scales, fused experts, per-layer inputs and rope_freqs', () => {
    const f = ggufOf(gemmaGguf({ moe: true, ple: true, kEqV: true }), [
      ['general.architecture', { type: 'string', value: 'gemma4' }],
      ['gemma4.block_count', { type: 'u32', value: 6 }],
      ['gemma4.attention.sliding_window_pattern', { type: 'array', value: { itemType: 'bool', items: GEMMA_TYPES.map((t) => t === 'sliding_attention') } }],
    ], gemmaShape);
    const m = describeModel(f) as Gemma4Weights;
    expect(m.layers.map((l) => l.type)).toEqual([...GEMMA_TYPES]);
    expect(m.layers.map((l) => l.headDim)).toEqual([8, 8, 8, 8, 8, 16]);
    expect(m.ropeFreqs?.name).toBe('rope_freqs.weight');
    const l5 = m.layers[5]!;
    expect(l5.attention.vProj).toBeNull();
    expect(l5.moe).toMatchObject({ routerScale: { name: 'blk.5.ffn_gate_inp.scale' }, perExpertScale: { name: 'blk.5.ffn_down_exps.scale' }, experts: { layout: 'gate_up', down: { name: 'blk.5.ffn_down_exps.weight' } } });
    expect(l5.layerScalar?.name).toBe('blk.5.layer_output_scale.weight');
    expect(l5.inputNorm.transforms).toEqual([]); // Gemma 4's norms are stored as they are
    expect(m.perLayer!.projectionNorm.name).toBe('per_layer_proj_norm.weight');
  });
});

describe('the config.json beside a checkpoint', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mlxn-names-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('gives the architecture and the layer types; a broken one is refused; bytes given in memory never look for one', () => {
    const names = qwenHf('model.language_model.', 'gate_up', false, true).map((n) => ({ name: n, dtype: 'U8', shape: [1], data: new Uint8Array([1]) }));
    writeFileSync(join(dir, 'model.safetensors'), safetensorsBytes(names));
    writeFileSync(join(dir, 'config.json'), JSON.stringify(QWEN_CONFIG));
    const m = describeModel(openWeights(dir));
    expect(m.arch).toBe('qwen3_5_moe');
    expect(m.layers.map((l) => l.type)).toEqual([...QWEN_TYPES]);
    expect(() => describeModel(SafetensorsFile.fromBytes(safetensorsBytes(names), join(dir, 'model.safetensors')))).toThrow("describeModel: opts.arch must be 'qwen3_5_moe' or 'gemma4'");
    writeFileSync(join(dir, 'config.json'), '{"model_type": ');
    expect(() => describeModel(openWeights(dir))).toThrow(`describeModel: the config ${join(dir, 'config.json')} must be readable JSON (got`);
    expect(describeModel(openWeights(dir), { config: QWEN_CONFIG }).numLayers).toBe(4); // a given config wins
  });
});

describe('findings: missing, unexpected, problems', () => {
  test('a checkpoint without a tensor, or with one no role takes, is reported by name; describeModel refuses it', () => {
    const full = qwenHf('model.', 'per_expert', false, false);
    const names = full.filter((n) => n !== 'model.layers.1.mlp.experts.2.up_proj.weight' && n !== 'model.layers.3.self_attn.k_norm.weight').concat(['model.layers.0.linear_attn.in_proj_qkv.bias', 'model.extra.weight']);
    const rep = checkModel(names, { config: QWEN_CONFIG });
    expect(rep.missing).toEqual(['model.layers.1.mlp.experts.2.up_proj.weight', 'model.layers.3.self_attn.k_norm.weight']);
    expect(rep.unexpected).toEqual(['model.layers.0.linear_attn.in_proj_qkv.bias', 'model.extra.weight']);
    expect(rep.complete).toBe(false);
    const e = errorOf(() => describeModel(names, { config: QWEN_CONFIG }));
    expect(e.kind).toBe('InvalidArgument');
    expect(e.message).toBe(
      'describeModel: hf tensor names must hold the tensors of qwen3_5_moe (got qwen3_5_moe (hf names, 4 layers): ' +
      '2 missing: model.layers.1.mlp.experts.2.up_proj.weight, model.layers.3.self_attn.k_norm.weight; ' +
      '2 unexpected: model.layers.0.linear_attn.in_proj_qkv.bias, model.extra.weight)',
    );
    // Unexpected names alone can be allowed; missing ones never.
    const extraOnly = full.concat(['model.extra.weight']);
    expect(() => describeModel(extraOnly, { config: QWEN_CONFIG })).toThrow('1 unexpected: model.extra.weight');
    expect(describeModel(extraOnly, { config: QWEN_CONFIG, allowUnexpected: true }).tensorNames).not.toContain('model.extra.weight');
    expect(checkModel(full, { config: QWEN_CONFIG }).complete).toBe(true);
  });

  test('a file names itself in the refusal; lm_head missing where the config unties it; a GGUF block missing', () => {
    const f = safetensorsOf(qwenHf('model.', 'gate_up', false, false).filter((n) => n !== 'lm_head.weight'));
    expect(() => describeModel(f, { config: QWEN_CONFIG })).toThrow('describeModel: safetensors model.safetensors must hold the tensors of qwen3_5_moe (got qwen3_5_moe (hf names, 4 layers): 1 missing: lm_head.weight)');
    expect(describeModel(f, { arch: 'qwen3_5_moe' }).lmHead).toBeNull(); // tied when nothing says otherwise
    const rep = checkModel(qwenGguf(4, false).filter((n) => !n.startsWith('blk.2.')), { arch: 'qwen3_5_moe', numLayers: 4 });
    expect(rep.missing.length).toBe(9 + 2 + 5 + 3);
    expect(rep.missing).toContain('blk.2.ssm_a');
    expect(formatReport(rep, 2)).toStartWith('qwen3_5_moe (gguf names, 4 layers): 19 missing: blk.2.attn_norm.weight, blk.2.post_attention_norm.weight, ... (17 more)');
  });

  test('layer types: both attention kinds in one layer, a type against the tensors, a type the model does not have', () => {
    const names = qwenHf('model.', 'gate_up', false, false).concat(['model.layers.0.self_attn.q_proj.weight']);
    expect(checkModel(names, { arch: 'qwen3_5_moe' }).problems).toEqual(['layer 0: holds both gated delta net and full attention tensors']);
    const swapped = ['full_attention', ...QWEN_TYPES.slice(1)];
    const rep = checkModel(qwenHf('model.', 'gate_up', false, false), { arch: 'qwen3_5_moe', layerTypes: swapped });
    expect(rep.problems).toEqual(['layer 0: declared full_attention but holds the other kind\'s tensors']);
    expect(rep.missing).toContain('model.layers.0.self_attn.q_proj.weight');
    expect(rep.unexpected).toContain('model.layers.0.linear_attn.A_log');
    expect(checkModel(gemmaHf('model.'), { arch: 'gemma4', layerTypes: [...GEMMA_TYPES.slice(1), 'chunked'] }).problems).toEqual(['layer 5: type "chunked" must be sliding_attention or full_attention']);
  });

  test('indices far past what is present are one problem each, not a name per absent layer or expert', () => {
    const names = qwenHf('model.', 'per_expert', false, false).concat(['model.layers.999999.input_layernorm.weight', 'model.layers.2.mlp.experts.500000.up_proj.weight']);
    const rep = checkModel(names, { arch: 'qwen3_5_moe' });
    expect(rep.problems).toEqual(['layer indices reach 999999 but 5 layers hold tensors', 'model.layers.2.mlp.experts.: expert indices reach 500000 but 5 experts hold tensors']);
    expect(rep.numLayers).toBe(5);
    expect(rep.missing.length).toBeLessThan(40); // layer 4 (absent) by name, nothing for the far indices
    expect(rep.unexpected).toContain('model.layers.999999.input_layernorm.weight');
    expect(rep.unexpected).toContain('model.layers.2.mlp.experts.0.gate_proj.weight');
  });

  test('arguments: the architecture, the layer types, the source', () => {
    const e = (fn: () => unknown) => errorOf(fn).message;
    expect(e(() => describeModel(['a']))).toBe("describeModel: opts.arch must be 'qwen3_5_moe' or 'gemma4' (or opts.config with its model_type, or a GGUF file) (got none)");
    expect(e(() => describeModel(['a'], { arch: 'llama' as never }))).toBe("describeModel: opts.arch must be 'qwen3_5_moe' or 'gemma4' (got llama)");
    expect(e(() => describeModel(['a'], { config: { model_type: 'qwen3' } }))).toStartWith('describeModel: opts.config.model_type must be one of qwen3_5_moe, qwen3_5_moe_text, gemma4, gemma4_text (got qwen3)');
    expect(e(() => describeModel(ggufOf(['x'], [['general.architecture', { type: 'string', value: 'llama' }]])))).toBe('describeModel: the GGUF general.architecture must be one of qwen35moe, gemma4 (got llama)');
    expect(e(() => checkModel(qwenHf('model.', 'gate_up'), { arch: 'qwen3_5_moe', layerTypes: ['full_attention'] }))).toBe('describeModel: the layer types must be one per layer (4) (got 1 of them)');
    expect(e(() => checkModel(['a'], { arch: 'gemma4', numLayers: -1 }))).toBe('describeModel: opts.numLayers must be an integer from 0 to 4096 (got -1)');
    expect(e(() => checkModel(ggufOf(['x'], [['general.architecture', { type: 'string', value: 'gemma4' }], ['gemma4.block_count', { type: 'u32', value: 2 ** 31 }]])))).toBe('describeModel: the layer count must be an integer from 0 to 4096 (got 2147483648)');
    expect(e(() => checkModel({} as never, { arch: 'gemma4' }))).toStartWith('describeModel: source must be a weight file (SafetensorsFile, ShardedSafetensors, GgufFile) or an array of tensor names');
  });
});
