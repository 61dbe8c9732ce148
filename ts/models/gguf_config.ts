// A model's configuration read from a GGUF file's metadata, as llama.cpp's
// converter writes it and llama.cpp reads it back, for a checkpoint that
// has no config.json: the metadata become the Hugging Face text config
// (config.json's keys) that qwen35MoeConfig and gemma4Config consume, so
// both ways of loading build one config.
//
// Keys (A = qwen35moe or gemma4; gguf-py/gguf/constants.py Keys.*):
//   written by convert_hf_to_gguf's TextModel.set_gguf_parameters (every
//   arch): A.block_count, A.embedding_length, A.feed_forward_length,
//   A.attention.head_count, A.attention.head_count_kv, A.rope.freq_base
//   (rope_parameters' rope_theta, the full-attention one for Gemma),
//   A.rope.freq_base_swa (Gemma's sliding rope_theta),
//   A.attention.layer_norm_rms_epsilon, A.expert_count,
//   A.expert_used_count, A.attention.key_length / value_length (head_dim);
//   Qwen3.5 MoE (Qwen2MoeModel, Qwen3NextModel, _Qwen35MtpMixin):
//   A.expert_feed_forward_length, A.expert_shared_feed_forward_length,
//   A.ssm.conv_kernel, A.ssm.state_size (key head dim), A.ssm.group_count
//   (key heads), A.ssm.time_step_rank (value heads), A.ssm.inner_size
//   (value heads x value head dim), A.full_attention_interval,
//   A.rope.dimension_count (head_dim x partial_rotary_factor),
//   A.nextn_predict_layers (MTP blocks appended after the model's);
//   Gemma 4 (Gemma3Model, Gemma4Model): A.attention.sliding_window,
//   A.final_logit_softcapping, A.attention.shared_kv_layers,
//   A.embedding_length_per_layer_input, A.attention.sliding_window_pattern
//   (true = sliding, per layer), A.attention.key_length / value_length
//   (global_head_dim) and *_swa (head_dim), A.feed_forward_length as a
//   per-layer array when use_double_wide_mlp doubles the shared-KV layers,
//   A.attention.head_count_kv per layer (num_global_key_value_heads in the
//   global ones) when the config has both, A.rope.dimension_count
//   (global_head_dim: the proportional rope's still pairs are the 1e30
//   entries of the rope_freqs.weight tensor) and A.rope.dimension_count_swa,
//   A.expert_feed_forward_length.
//
// What the metadata leave out is taken as llama.cpp takes it (src/llama-
// model.cpp load_hparams, src/models/qwen35moe.cpp and gemma4.cpp
// load_arch_hparams; src/llama-hparams.h): head_count_kv = head_count,
// key_length = embedding_length / head_count, rope.dimension_count =
// key_length, rope.freq_base = 10000, rope.freq_base_swa = rope.freq_base,
// full_attention_interval = 4, nextn_predict_layers = 0, shared_kv_layers
// = 0, expert_feed_forward_length = feed_forward_length / expert_used_count,
// expert_shared_feed_forward_length = feed_forward_length, no experts where
// expert_count is absent, final_logit_softcapping = 30 (llama_hparams'
// default; 0 turns it off); the vocabulary is A.vocab_size, else the
// length of tokenizer.ggml.tokens, else token_embd.weight's rows (the
// per-layer-input vocabulary is the same one); the LM head is tied where
// output.weight is absent; keys are values (attention_k_eq_v) where the
// global layers that compute keys have no attn_v.weight. Required where
// llama.cpp requires them: block_count, embedding_length, head_count,
// layer_norm_rms_epsilon, the ssm sizes and the expert counts (Qwen),
// sliding_window, sliding_window_pattern, key_length_swa,
// embedding_length_per_layer_input and feed_forward_length (Gemma).
//
// Each key is read for its type: integers of any GGUF integer type (u32 is
// what the writer uses) that are exact and >= 0, floats f32 or f64 (an f32
// becomes the shortest decimal that rounds to it, so 1e-6 written as f32
// reads back 1e-6), per-layer values as a scalar or an array of one item
// per layer. A missing or mistyped key is an MlxError naming loadModel,
// the key, what was expected and what was found, in O(1) per key.

import type { GgufFile, GgufValue } from '../weights/gguf.ts';
import { invalid } from '../validate.ts';
import { modelConfig } from './config.ts';

type Json = Record<string, unknown>;
const OP = 'loadModel';

/** The architectures llama.cpp names these models by, and the config model_type of each. */
export const GGUF_MODEL_TYPE = { qwen35moe: 'qwen3_5_moe_text', gemma4: 'gemma4_text' } as const;
type GgufArch = keyof typeof GGUF_MODEL_TYPE;

const INT_TYPES = new Set(['u8', 'i8', 'u16', 'i16', 'u32', 'i32', 'u64', 'i64']);
/** A rope_freqs.weight entry at least this large leaves its pair still (llama.cpp's converter writes 1e30). */
const STILL_FREQ_FACTOR = 1e20;

/** A key llama.cpp requires is absent, while only what the metadata say is wanted. */
class Absent extends Error {}

/** The shortest decimal that rounds to the f32 x (the value the converter was given, in practice). */
function f32Decimal(x: number): number {
  for (let p = 1; p <= 9; p++) {
    const d = Number(x.toPrecision(p));
    if (Math.fround(d) === x) return d;
  }
  return x;
}

function typeName(v: GgufValue): string {
  return v.type === 'array' ? `an array of ${v.value.itemType}` : `a ${v.type}`;
}

/** Typed reads of one file's metadata; `strict`: an absent required key is refused, else it throws Absent. */
class Reader {
  constructor(readonly file: GgufFile, readonly strict: boolean) {}

  has(key: string): boolean {
    return this.file.metadata.has(key);
  }

  private absent(key: string, expected: string): never {
    if (this.strict) throw invalid(OP, `the GGUF key ${key}`, expected, 'absent');
    throw new Absent(key);
  }

  private intOf(key: string, v: GgufValue | { type: string; value: unknown }, what = ''): number {
    if (!INT_TYPES.has(v.type)) throw invalid(OP, `the GGUF key ${key}${what}`, 'an unsigned integer (u32)', typeName(v as GgufValue));
    const n = typeof v.value === 'bigint' ? Number(v.value) : (v.value as number);
    if (!Number.isSafeInteger(n) || n < 0) throw invalid(OP, `the GGUF key ${key}${what}`, 'an integer >= 0 below 2^53', String(v.value));
    return n;
  }

  uint(key: string, fallback?: () => number): number {
    const v = this.file.metadata.get(key);
    if (v === undefined) return fallback !== undefined ? fallback() : this.absent(key, 'an unsigned integer (u32)');
    return this.intOf(key, v);
  }

  float(key: string, fallback?: () => number): number {
    const v = this.file.metadata.get(key);
    if (v === undefined) return fallback !== undefined ? fallback() : this.absent(key, 'a float (f32)');
    if (v.type !== 'f32' && v.type !== 'f64') throw invalid(OP, `the GGUF key ${key}`, 'a float (f32)', typeName(v));
    if (!Number.isFinite(v.value)) throw invalid(OP, `the GGUF key ${key}`, 'a finite float', v.value);
    return v.type === 'f32' ? f32Decimal(v.value) : v.value;
  }

  /** One integer per layer: a scalar for every layer, or an array of n integers. */
  perLayer(key: string, n: number, fallback?: () => number[]): number[] {
    const v = this.file.metadata.get(key);
    if (v === undefined) return fallback !== undefined ? fallback() : this.absent(key, `an unsigned integer or an array of ${n} (one per layer)`);
    if (v.type !== 'array') return Array.from({ length: n }, () => this.intOf(key, v));
    const { itemType, items } = v.value;
    if (items.length !== n || !INT_TYPES.has(itemType)) {
      throw invalid(OP, `the GGUF key ${key}`, `an unsigned integer or an array of ${n} integers (one per layer)`, `an array of ${items.length} ${itemType}`);
    }
    return Array.from(items as ArrayLike<number | bigint>, (x, i) => this.intOf(key, { type: itemType, value: x }, `[${i}]`));
  }

  /** One flag per layer: an array of n booleans, or an integer for every layer (non-zero = true). */
  flags(key: string, n: number): boolean[] {
    const v = this.file.metadata.get(key);
    if (v === undefined) return this.absent(key, `an array of ${n} booleans (one per layer)`);
    if (v.type !== 'array') return Array.from({ length: n }, () => this.intOf(key, v) !== 0);
    const { itemType, items } = v.value;
    if (itemType !== 'bool' || items.length !== n) {
      throw invalid(OP, `the GGUF key ${key}`, `an array of ${n} booleans (one per layer)`, `an array of ${items.length} ${itemType}`);
    }
    return [...(items as readonly boolean[])];
  }

  /** The item count of an array key, or undefined where absent. */
  count(key: string): number | undefined {
    const v = this.file.metadata.get(key);
    if (v === undefined) return undefined;
    if (v.type !== 'array') throw invalid(OP, `the GGUF key ${key}`, 'an array', typeName(v));
    return v.value.items.length;
  }
}

/** One config key from the metadata: the keys (or tensors) that say it, and its value. */
interface Entry {
  readonly hf: string;
  /** The GGUF keys or tensor names it is read from; the metadata say it only where the first of them is present. */
  readonly from: readonly string[];
  readonly value: () => unknown;
}

function entriesOf(file: GgufFile, arch: GgufArch, r: Reader): Entry[] {
  const k = (s: string) => `${arch}.${s}`;
  const tensor = (name: string) => file.tensors.has(name);
  const layers = () => {
    const n = r.uint(k('block_count')) - (arch === 'qwen35moe' ? r.uint(k('nextn_predict_layers'), () => 0) : 0);
    if (n <= 0) throw invalid(OP, `the GGUF key ${k('block_count')}`, `more blocks than ${k('nextn_predict_layers')}`, n);
    return n;
  };
  // Per-layer arrays hold one item per block (MTP blocks too); the model's layers are the first ones.
  const blocks = () => r.uint(k('block_count'));
  const uniform = (key: string, values: number[]) => {
    if (values.some((x) => x !== values[0])) throw invalid(OP, `the GGUF key ${key}`, 'the same value in every layer', values);
    return values[0]!;
  };
  const heads = () => {
    const n = uniform(k('attention.head_count'), r.perLayer(k('attention.head_count'), blocks()));
    if (n === 0) throw invalid(OP, `the GGUF key ${k('attention.head_count')}`, 'an integer > 0', 0);
    return n;
  };
  const defaultHeadDim = () => Math.floor(r.uint(k('embedding_length')) / heads());
  const headDim = (key: string, valueKey: string, fallback: () => number) => {
    const d = r.uint(key, fallback);
    const v = r.uint(valueKey, () => d);
    if (v !== d) throw invalid(OP, `the GGUF key ${valueKey}`, `${key} (${d}): the models' values are as long as their keys`, v);
    if (d === 0) throw invalid(OP, `the GGUF key ${key}`, 'an integer > 0', d);
    return d;
  };
  const vocabFrom = k('vocab_size');
  const vocabKey = r.has(vocabFrom) ? vocabFrom : r.has('tokenizer.ggml.tokens') ? 'tokenizer.ggml.tokens' : 'token_embd.weight';
  const vocab = () => {
    if (vocabKey === vocabFrom) return r.uint(vocabFrom);
    if (vocabKey === 'tokenizer.ggml.tokens') return r.count(vocabKey)!;
    if (!tensor(vocabKey)) throw invalid(OP, `the GGUF file's vocabulary (${vocabFrom}, tokenizer.ggml.tokens or token_embd.weight)`, 'present', 'none of them');
    const t = file.info(vocabKey);
    return t.elementCount / t.shape[t.shape.length - 1]!;
  };
  const common: Entry[] = [
    { hf: 'num_hidden_layers', from: [k('block_count')], value: layers },
    { hf: 'vocab_size', from: [vocabKey], value: vocab },
    { hf: 'hidden_size', from: [k('embedding_length')], value: () => r.uint(k('embedding_length')) },
    { hf: 'rms_norm_eps', from: [k('attention.layer_norm_rms_epsilon')], value: () => r.float(k('attention.layer_norm_rms_epsilon')) },
    { hf: 'tie_word_embeddings', from: ['token_embd.weight'], value: () => !tensor('output.weight') },
    { hf: 'num_attention_heads', from: [k('attention.head_count')], value: heads },
  ];
  if (arch === 'qwen35moe') return [...common, ...qwenEntries(r, k, layers, blocks, heads, uniform, defaultHeadDim, headDim)];
  return [...common, ...gemmaEntries(file, r, k, layers, heads, defaultHeadDim, headDim, vocab, vocabKey)];
}

function qwenEntries(
  r: Reader, k: (s: string) => string, layers: () => number, blocks: () => number, heads: () => number,
  uniform: (key: string, values: number[]) => number, defaultHeadDim: () => number,
  headDim: (key: string, valueKey: string, fallback: () => number) => number,
): Entry[] {
  const dim = () => headDim(k('attention.key_length'), k('attention.value_length'), defaultHeadDim);
  const valueHeads = () => r.uint(k('ssm.time_step_rank'));
  const ffn = (key: string, per: () => number) => () => r.uint(key, () => {
    if (!r.has(k('feed_forward_length'))) return r.uint(key);
    return Math.floor(r.uint(k('feed_forward_length')) / per());
  });
  return [
    {
      hf: 'layer_types', from: [k('full_attention_interval')], value: () => {
        const interval = r.uint(k('full_attention_interval'), () => 4);
        if (interval === 0) throw invalid(OP, `the GGUF key ${k('full_attention_interval')}`, 'an integer > 0', 0);
        return Array.from({ length: layers() }, (_, i) => ((i + 1) % interval === 0 ? 'full_attention' : 'linear_attention'));
      },
    },
    {
      hf: 'num_key_value_heads', from: [k('attention.head_count_kv')],
      value: () => uniform(k('attention.head_count_kv'), r.perLayer(k('attention.head_count_kv'), blocks(), () => [heads()])),
    },
    { hf: 'head_dim', from: [k('attention.key_length')], value: dim },
    {
      hf: 'rope_parameters', from: [k('rope.freq_base')], value: () => {
        const d = dim();
        const rot = r.uint(k('rope.dimension_count'), () => d);
        const factor = rot / d;
        if (rot === 0 || rot % 2 !== 0 || rot > d || Math.floor(d * factor) !== rot) {
          throw invalid(OP, `the GGUF key ${k('rope.dimension_count')}`, `an even count of at most key_length (${d})`, rot);
        }
        return { rope_type: 'default', rope_theta: r.float(k('rope.freq_base'), () => 10_000), partial_rotary_factor: factor };
      },
    },
    { hf: 'linear_conv_kernel_dim', from: [k('ssm.conv_kernel')], value: () => r.uint(k('ssm.conv_kernel')) },
    { hf: 'linear_key_head_dim', from: [k('ssm.state_size')], value: () => r.uint(k('ssm.state_size')) },
    { hf: 'linear_num_key_heads', from: [k('ssm.group_count')], value: () => r.uint(k('ssm.group_count')) },
    { hf: 'linear_num_value_heads', from: [k('ssm.time_step_rank')], value: valueHeads },
    {
      hf: 'linear_value_head_dim', from: [k('ssm.inner_size')], value: () => {
        const inner = r.uint(k('ssm.inner_size')), hv = valueHeads();
        if (hv === 0 || inner % hv !== 0) throw invalid(OP, `the GGUF key ${k('ssm.inner_size')}`, `a multiple of ${k('ssm.time_step_rank')} (${hv})`, inner);
        return inner / hv;
      },
    },
    { hf: 'num_experts', from: [k('expert_count')], value: () => r.uint(k('expert_count')) },
    { hf: 'num_experts_per_tok', from: [k('expert_used_count')], value: () => r.uint(k('expert_used_count')) },
    { hf: 'moe_intermediate_size', from: [k('expert_feed_forward_length')], value: ffn(k('expert_feed_forward_length'), () => r.uint(k('expert_used_count'))) },
    { hf: 'shared_expert_intermediate_size', from: [k('expert_shared_feed_forward_length')], value: ffn(k('expert_shared_feed_forward_length'), () => 1) },
  ];
}

function gemmaEntries(
  file: GgufFile, r: Reader, k: (s: string) => string, layers: () => number, heads: () => number, defaultHeadDim: () => number,
  headDim: (key: string, valueKey: string, fallback: () => number) => number, vocab: () => number, vocabKey: string,
): Entry[] {
  const sliding = () => r.flags(k('attention.sliding_window_pattern'), layers());
  const shared = () => r.uint(k('attention.shared_kv_layers'), () => 0);
  const kvHeads = () => r.perLayer(k('attention.head_count_kv'), layers(), () => Array.from({ length: layers() }, heads));
  const globalDim = () => headDim(k('attention.key_length'), k('attention.value_length'), defaultHeadDim);
  const slidingDim = () => headDim(k('attention.key_length_swa'), k('attention.value_length_swa'), () => r.uint(k('attention.key_length_swa')));
  const ff = () => r.perLayer(k('feed_forward_length'), layers());
  // Keys serve as values where no global layer that computes its keys has a v projection (llama.cpp's use of k_proj for v).
  const kEqV = () => {
    const swa = sliding(), first = layers() - shared();
    const globals = swa.map((s, i) => (!s && i < first ? i : -1)).filter((i) => i >= 0);
    return globals.length > 0 && globals.every((i) => !file.tensors.has(`blk.${i}.attn_v.weight`));
  };
  const kvOf = (full: boolean) => {
    const swa = sliding(), kv = kvHeads();
    const at = swa.findIndex((s) => s !== full);
    return kv[at < 0 ? 0 : at]!;
  };
  // Layers whose KV head count the global fields do not give take it from per_layer_config.
  const overrides = () => {
    const swa = sliding(), kv = kvHeads(), eqv = kEqV(), slidingKv = kvOf(false), fullKv = kvOf(true);
    const out: Record<string, { num_key_value_heads: number }> = {};
    kv.forEach((n, i) => {
      if (n !== (!swa[i] && eqv ? fullKv : slidingKv)) out[String(i)] = { num_key_value_heads: n };
    });
    return Object.keys(out).length > 0 ? out : undefined;
  };
  const experts = () => r.uint(k('expert_count'), () => 0) > 0;
  return [
    { hf: 'vocab_size_per_layer_input', from: [vocabKey], value: vocab },
    { hf: 'layer_types', from: [k('attention.sliding_window_pattern')], value: () => sliding().map((s) => (s ? 'sliding_attention' : 'full_attention')) },
    { hf: 'intermediate_size', from: [k('feed_forward_length')], value: () => ff()[0] },
    {
      hf: 'use_double_wide_mlp', from: [k('feed_forward_length')], value: () => {
        const f = ff(), first = layers() - shared(), base = f[0]!;
        const wide = shared() > 0 && f[first] === 2 * base;
        f.forEach((n, i) => {
          const want = wide && i >= first ? 2 * base : base;
          if (n !== want) {
            throw invalid(OP, `the GGUF key ${k('feed_forward_length')}[${i}]`, `${want} (one width, doubled in the shared-KV layers only)`, n);
          }
        });
        return wide;
      },
    },
    { hf: 'num_kv_shared_layers', from: [k('attention.shared_kv_layers')], value: shared },
    { hf: 'num_key_value_heads', from: [k('attention.head_count_kv')], value: () => kvOf(false) },
    { hf: 'attention_k_eq_v', from: [k('attention.sliding_window_pattern')], value: kEqV },
    { hf: 'num_global_key_value_heads', from: [k('attention.head_count_kv')], value: () => (kEqV() ? kvOf(true) : null) },
    { hf: 'per_layer_config', from: [k('attention.head_count_kv')], value: overrides },
    { hf: 'head_dim', from: [k('attention.key_length_swa')], value: slidingDim },
    { hf: 'global_head_dim', from: [k('attention.key_length')], value: globalDim },
    { hf: 'sliding_window', from: [k('attention.sliding_window')], value: () => r.uint(k('attention.sliding_window')) },
    { hf: 'hidden_size_per_layer_input', from: [k('embedding_length_per_layer_input')], value: () => r.uint(k('embedding_length_per_layer_input')) },
    {
      hf: 'final_logit_softcapping', from: [k('final_logit_softcapping')], value: () => {
        const cap = r.float(k('final_logit_softcapping'), () => 30);
        return cap === 0 ? null : cap;
      },
    },
    { hf: 'rope_parameters', from: [k('rope.freq_base')], value: () => gemmaRope(file, r, k, globalDim(), slidingDim()) },
    { hf: 'enable_moe_block', from: [k('expert_count')], value: experts },
    { hf: 'num_experts', from: [k('expert_count')], value: () => (experts() ? r.uint(k('expert_count')) : null) },
    { hf: 'top_k_experts', from: [k('expert_count')], value: () => (experts() ? r.uint(k('expert_used_count')) : null) },
    { hf: 'moe_intermediate_size', from: [k('expert_count')], value: () => (experts() ? r.uint(k('expert_feed_forward_length')) : null) },
  ];
}

/**
 * Gemma 4's two ropes: sliding layers rotate every pair (rope.dimension_count_swa
 * = head_dim); global layers rotate every pair too (rope.dimension_count =
 * global_head_dim) at the frequencies divided by rope_freqs.weight, whose
 * leading entries (one value, the rope's linear factor) rotate and whose
 * trailing 1e30 ones leave their pairs still: the proportional rope's
 * partial_rotary_factor. Without the tensor every pair rotates.
 */
function gemmaRope(file: GgufFile, r: Reader, k: (s: string) => string, globalDim: number, slidingDim: number): Json {
  const theta = r.float(k('rope.freq_base'), () => 10_000);
  const thetaSwa = r.float(k('rope.freq_base_swa'), () => theta);
  const rot = r.uint(k('rope.dimension_count'), () => globalDim);
  if (rot !== globalDim) throw invalid(OP, `the GGUF key ${k('rope.dimension_count')}`, `key_length (${globalDim}): rope_freqs.weight leaves pairs still`, rot);
  const rotSwa = r.uint(k('rope.dimension_count_swa'), () => rot);
  if (rotSwa !== slidingDim) throw invalid(OP, `the GGUF key ${k('rope.dimension_count_swa')}`, `key_length_swa (${slidingDim}): sliding layers rotate every pair`, rotSwa);
  let rotated = globalDim / 2, factor = 1;
  const name = 'rope_freqs.weight';
  if (file.tensors.has(name)) {
    const t = file.info(name);
    if (t.dtype !== 'F32' || t.elementCount !== globalDim / 2) {
      throw invalid(OP, `the GGUF tensor ${name}`, `F32 [${globalDim / 2}] (half of key_length)`, `${t.dtype} [${t.shape.join(', ')}]`);
    }
    const f = file.view(name) as Float32Array;
    rotated = f.findIndex((x) => x >= STILL_FREQ_FACTOR);
    if (rotated < 0) rotated = f.length;
    factor = rotated > 0 ? f32Decimal(f[0]!) : 1;
    f.forEach((x, i) => {
      const ok = i < rotated ? x === f[0] && x > 0 : x >= STILL_FREQ_FACTOR;
      if (!ok) throw invalid(OP, `the GGUF tensor ${name}[${i}]`, `${i < rotated ? f[0] : '>= 1e20'} (one factor for the rotated pairs, then the still ones)`, x);
    });
  }
  const full: Json = { rope_type: 'proportional', partial_rotary_factor: (2 * rotated) / globalDim, rope_theta: theta };
  if (factor !== 1) full['factor'] = factor;
  return { sliding_attention: { rope_type: 'default', rope_theta: thetaSwa }, full_attention: full };
}

function archOf(file: GgufFile): GgufArch {
  const a = file.architecture;
  if (a !== 'qwen35moe' && a !== 'gemma4') {
    throw invalid(OP, `the GGUF file's general.architecture (${file.description})`, 'qwen35moe or gemma4', a ?? 'none');
  }
  return a;
}

/**
 * The Hugging Face text config (config.json's keys, model_type
 * qwen3_5_moe_text or gemma4_text) of a GGUF file from its metadata, read
 * as llama.cpp reads them: what modelConfig and describeModel take where a
 * checkpoint has no config.json.
 */
export function ggufConfig(file: GgufFile): Json {
  const arch = archOf(file);
  const out: Json = { model_type: GGUF_MODEL_TYPE[arch] };
  for (const e of entriesOf(file, arch, new Reader(file, true))) {
    const v = e.value();
    if (v !== undefined) out[e.hf] = v;
  }
  return out;
}

function textOf(config: Json): Json {
  const t = config['text_config'];
  return typeof t === 'object' && t !== null && !Array.isArray(t) ? (t as Json) : config;
}

/** The first place two parsed configs differ, as "path = value" for each. */
function difference(a: unknown, b: unknown, path: string): [string, string] | null {
  if (Bun.deepEquals(a, b, true)) return null;
  if (typeof a === 'object' && a !== null && typeof b === 'object' && b !== null) {
    for (const key of new Set([...Object.keys(a), ...Object.keys(b)])) {
      const d = difference((a as Json)[key], (b as Json)[key], path === '' ? key : `${path}.${key}`);
      if (d !== null) return d;
    }
  }
  return [`${path} = ${JSON.stringify(a)}`, `${path} = ${JSON.stringify(b)}`];
}

/**
 * Refuses a GGUF file whose metadata disagree with the config.json beside
 * it: for each config key the metadata say (its first GGUF key present),
 * config.json with that key replaced by the metadata's value must parse to
 * the config config.json parses to; the refusal names the GGUF key and
 * both values. Keys the metadata leave out are not checked.
 */
export function checkGgufAgrees(file: GgufFile, config: Json): void {
  const arch = archOf(file);
  const want = modelConfig(config);
  const r = new Reader(file, false);
  const nested = textOf(config) !== config;
  for (const e of entriesOf(file, arch, r)) {
    const first = e.from[0]!;
    if (!r.has(first) && !file.tensors.has(first)) continue;
    let v: unknown;
    try {
      v = e.value();
    } catch (err) {
      if (err instanceof Absent) continue;
      throw err;
    }
    if (v === undefined) continue;
    const text = { ...textOf(config), [e.hf]: v };
    const merged = nested ? { ...config, text_config: text } : text;
    let got: unknown;
    try {
      got = modelConfig(merged);
    } catch (err) {
      throw invalid(OP, `${file.description}'s ${e.from.join(', ')} (${e.hf} = ${JSON.stringify(v)})`, 'what config.json says', (err as Error).message);
    }
    const d = difference(want, got, '');
    if (d !== null) throw invalid(OP, `${file.description}'s ${e.from.join(', ')}`, `what config.json says: ${d[0]}`, d[1]);
  }
}
