// Whole-model speed at real dimensions (issue 16, item 5): Qwen3.6-35B-A3B
// (qwen3_5_moe) and Gemma 4 26B-A4B (gemma4, MoE) on random weights built on
// the device, through the same loader and forward passes as a checkpoint
// (ts/models): decode tokens per second at batch 1 (a short prompt, then
// decode steps recorded once and replayed), prefill tokens per second at 4096
// tokens, the host time of a decode step (recorded and replayed), and the
// floor: the bytes of weights one decode token reads (the routed experts of
// each layer, the shared expert, attention or the gated delta net, the
// router, one embedding row, the output projection) over the copy bandwidth
// measured in the same run.
//
//   bun run bench/models.ts [--small] [--model qwen3_5_moe|gemma4|all] [--quant q4|bf16|q4k|q4km]
//                           [--steps N] [--prompt P] [--prefill T] [--rounds R] [--copy-gbs B]
//                           [--layers L] [--vocab V] [--pdl on|off] [--concurrent on|off] [--flush on|off]
//                           [--cold-kernels] [--prefill-parts]
//
// Every kernel family is compiled first (KernelRegistry.warmup, a thread a
// core, or loaded from the disk cache), and the time that took printed, so
// that no phase times a compile.
//
// --small: tiny dimensions the emulator runs (the same code path); without
// it the real configurations (cuda: tens of GB of weights). --quant q4 (the
// default): every linear layer MLX affine 4-bit, groups of 64, bf16 scales
// and biases, the experts stacked as mlx's switch layers; the embedding
// bf16 (one row read a token), the routers dense. bf16: every weight bf16,
// the experts fused as transformers stores them. q4k: GGUF blocks as a
// llama.cpp Q4_K file holds them, every linear layer and expert Q4_K where
// its rows are multiples of 256 values, else Q8_0 (llama.cpp's fallback;
// Gemma 4's MLP and expert down projections, 2112 and 704 wide), through
// quantized_matmul_ggml and quantized_matmul_id_ggml; the embedding bf16,
// the routers dense (Hugging Face's names: the loader's GGUF path is the
// block type, not the naming). q4km: as q4k with llama.cpp's Q4_K_M mix
// (llama-quant.cpp): Q6_K for the output projection, and for the down
// projections (dense, shared and routed experts') and v projections of the
// layers its use_more_bits picks (the first and last eighth, every third
// between), Q8_0 where those rows are not multiples of 256. --copy-gbs: a copy
// bandwidth (GB/s, bytes read + written, e.g. bench/matmul_peers.py's) used
// for the floor beside the one measured here (our gather copying 1 GiB).
// --pdl on|off (cuda): programmatic dependent launch of the registry's
// kernels (the cuda device option 'pdl', on by default from sm_90).
// --concurrent on|off (cuda): the dispatches between two barriers side by
// side on several streams (the cuda device option 'concurrent', on by default).
// --flush on|off: ModelOptions.flushLayers (on by default): a prompt's layers
// start on the device as they are recorded (Encoder.flush; cuda), so its wall
// time overlaps the host's recording with the device's work.
// --layers, --vocab: the configuration cut to L layers and a vocabulary of V
// (the real widths kept), for a quick check of the real shapes, e.g. on the
// emulator.
// --cold-kernels (cuda): instead of the speed table, what each distinct
// dispatch of one decode step takes alone with its weights out of L2 and
// with its code out of the caches too (bench/code_cold.cu's fronts: an 80
// MiB read, then 16,384 straight-line FFMAs on every SM), each behind the
// step's first norm, 16 times in one replay; the dispatches are the step's
// own (captured as the model records it: its buffers, grids and entries).
// --prefill-parts: instead of the speed table, the prompt of --prefill
// tokens by parts: its dispatches captured as the model records them, each
// distinct one (entry, grid x block, inline params) run alone 16 times in one replay
// (warm: its weights and code as the one before left them), listed by its
// count x time, beside the whole prompt's device time.
//
// Configurations: Qwen3.6-35B-A3B is Qwen3_5MoeTextConfig's defaults
// (ts/models/config.ts reads them; hidden 2048, 40 layers of which every
// fourth full attention (16 heads of 256, 2 KV heads, rotary 64), the rest
// gated delta nets (16 key / 32 value heads of 128), 256 experts top-8 of
// 512, a shared expert of 512, vocabulary 248320, untied). Gemma 4 26B-A4B:
// hidden 2816, 30 layers (5 sliding of window 1024 to 1 global), 16 heads;
// sliding layers 8 KV heads of 256, global layers 2 KV heads of 512 with the
// keys as values; a dense MLP of 2112 beside 128 experts top-8 of 704;
// vocabulary 262144. Its checkpoint ties the output projection to the
// embedding; the loader reads a tied head as the bf16 table, which at q4
// would read 1.5 GB a token where MLX's quantized checkpoints read the
// quantized table, so the benchmark gives it an untied 4-bit output
// projection of the same shape (q4k: Q4_K).
//
// Weights never pass through the host: the packed 4-bit words are Philox
// random bits (philox4x32; every code is a valid 4-bit value), floats are
// rows of a small host tile (uniform within the tensor's spread) gathered on
// the device into place, scales near 1 / (4.6 sqrt(k)) and biases near -7.5
// times that, so every weight decodes to a finite value of about a fan-in
// initialization's size. GGUF blocks: rows of a host tile of 256 rows
// quantized by the reference quantizer (finite d and dmin) gathered into
// place as 4-byte words. Small tensors (norms, conv, A_log, the routers'
// scales) come from the host. Backend: MLX_NATIVE_BACKEND or the default.

import { Device, MlxError, type Buffer, type DType, type Encoder, type Pipeline } from '../ts/index.ts';
import { Encoder as EncoderClass, type DispatchBindings, type Dim3 } from '../ts/encoder.ts';
import { Checkpoint, Gemma4, Qwen35Moe, gemma4Config, qwen35MoeConfig, type CausalLM, type Linear, type RowsPart } from '../ts/models/index.ts';
import { gather } from '../ts/ops/embedding.ts';
import { philox4x32 } from '../ts/ops/sample.ts';
import { describeModel, WeightSource, type Gemma4Weights, type Qwen35MoeWeights, type TensorInfo, type TensorRef } from '../ts/weights/index.ts';
import { toBf16 } from '../ts/index.ts';
import { ggmlRowBytesOf, type GgmlQuantType, ggmlQuantize } from '../ts/ops/quantized_matmul_ggml.ts';

const argv = process.argv;
const small = argv.includes('--small');
const opt = (name: string): string | undefined => {
  const i = argv.indexOf(name);
  return i < 0 ? undefined : argv[i + 1];
};
const num = (name: string, fallback: number): number => {
  const v = opt(name);
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number (got ${v})`);
  return n;
};
const which = opt('--model') ?? 'all';
if (!['qwen3_5_moe', 'gemma4', 'all'].includes(which)) throw new Error(`--model must be qwen3_5_moe, gemma4 or all (got ${which})`);
const quantArg = opt('--quant') ?? 'q4';
if (quantArg !== 'q4' && quantArg !== 'bf16' && quantArg !== 'q4k' && quantArg !== 'q4km') {
  throw new Error(`--quant must be q4, bf16, q4k or q4km (got ${quantArg})`);
}
const quant: Mode = quantArg;
const steps = num('--steps', small ? 4 : 64);
const promptLen = num('--prompt', small ? 6 : 16);
const prefillLen = num('--prefill', small ? 24 : 4096);
const rounds = num('--rounds', small ? 2 : 3);
const copyGbsArg = opt('--copy-gbs') === undefined ? null : num('--copy-gbs', 1);
const layersArg = opt('--layers') === undefined ? null : num('--layers', 1);
const vocabArg = opt('--vocab') === undefined ? null : num('--vocab', 1);
const pdlArg = opt('--pdl');
const concurrentArg = opt('--concurrent');
const flushArg = opt('--flush');
const coldKernels = argv.includes('--cold-kernels');
const prefillParts = argv.includes('--prefill-parts');
if (pdlArg !== undefined && pdlArg !== 'on' && pdlArg !== 'off') throw new Error(`--pdl must be on or off (got ${pdlArg})`);
if (concurrentArg !== undefined && concurrentArg !== 'on' && concurrentArg !== 'off') throw new Error(`--concurrent must be on or off (got ${concurrentArg})`);
if (flushArg !== undefined && flushArg !== 'on' && flushArg !== 'off') throw new Error(`--flush must be on or off (got ${flushArg})`);
const GROUP = 64, BITS = 4;

// ---- configurations ----

type Json = Record<string, unknown>;

const QWEN_REAL: Json = {
  model_type: 'qwen3_5_moe_text', tie_word_embeddings: false,
  rope_parameters: { rope_type: 'default', rope_theta: 10_000_000, partial_rotary_factor: 0.25 },
};
const QWEN_SMALL: Json = {
  ...QWEN_REAL, vocab_size: 512, hidden_size: 128, num_hidden_layers: 4, num_attention_heads: 2, num_key_value_heads: 1, head_dim: 256,
  linear_num_key_heads: 1, linear_num_value_heads: 2, linear_key_head_dim: 64, linear_value_head_dim: 64,
  num_experts: 8, num_experts_per_tok: 2, moe_intermediate_size: 64, shared_expert_intermediate_size: 64,
};
const GEMMA_REAL: Json = {
  model_type: 'gemma4_text', vocab_size: 262_144, hidden_size: 2816, intermediate_size: 2112, num_hidden_layers: 30,
  num_attention_heads: 16, num_key_value_heads: 8, head_dim: 256, global_head_dim: 512, num_global_key_value_heads: 2,
  attention_k_eq_v: true, sliding_window: 1024, final_logit_softcapping: 30, tie_word_embeddings: false,
  hidden_size_per_layer_input: null, num_kv_shared_layers: 0,
  enable_moe_block: true, num_experts: 128, top_k_experts: 8, moe_intermediate_size: 704,
  rope_parameters: {
    sliding_attention: { rope_type: 'default', rope_theta: 10_000 },
    full_attention: { rope_type: 'proportional', partial_rotary_factor: 0.25, rope_theta: 1_000_000 },
  },
};
const GEMMA_SMALL: Json = {
  ...GEMMA_REAL, vocab_size: 512, hidden_size: 128, intermediate_size: 128, num_hidden_layers: 4,
  layer_types: ['sliding_attention', 'full_attention', 'sliding_attention', 'full_attention'],
  num_attention_heads: 2, num_key_value_heads: 1, num_global_key_value_heads: 1, sliding_window: 8,
  num_experts: 8, top_k_experts: 2, moe_intermediate_size: 64,
};

// ---- the tensors, by name (Hugging Face's, with mlx's switch layers for quantized experts) ----

/** How a tensor's values are drawn: floats uniform in center +- spread; packed words random. */
type Init = { readonly kind: 'float'; readonly center: number; readonly spread: number } | { readonly kind: 'words' } | { readonly kind: 'blocks' };

type Mode = 'q4' | 'bf16' | 'q4k' | 'q4km';
const gguf = (mode: Mode): boolean => mode === 'q4k' || mode === 'q4km';

/** The GGUF block type of a q4k layer of rows of k values: Q4_K, or Q8_0 where k is not a multiple of 256. */
const blockTypeOf = (k: number): GgmlQuantType => (k % 256 === 0 ? 'Q4_K' : 'Q8_0');

/** llama.cpp's use_more_bits (its integer divisions): the first and last eighth of the layers and every third between. */
const moreBits = (i: number, n: number): boolean => {
  const e = Math.floor(n / 8);
  return i < e || i >= Math.floor((7 * n) / 8) || (i - e) % 3 === 2;
};

/**
 * The GGUF block type of linear layer `name` (Hugging Face's) of rows of k values in a model of nLayers: q4k's
 * blockTypeOf; q4km's Q6_K (Q8_0 where k is not a multiple of 256) for the output projection and, in the layers
 * moreBits picks, the down and v projections.
 */
function ggufTypeOf(mode: Mode, name: string, k: number, nLayers: number): GgmlQuantType {
  if (mode === 'q4km') {
    const layer = /layers\.(\d+)\./.exec(name);
    const wide = name === 'lm_head' || (layer !== null && /(down_proj|v_proj)$/.test(name) && moreBits(Number(layer[1]), nLayers));
    if (wide) return k % 256 === 0 ? 'Q6_K' : 'Q8_0';
  }
  return blockTypeOf(k);
}

interface Spec {
  readonly name: string;
  readonly shape: readonly number[];
  readonly dtype: 'BF16' | 'U32' | GgmlQuantType;
  readonly init: Init;
}

const fanIn = (k: number): Init => ({ kind: 'float', center: 0, spread: Math.sqrt(3 / k) });
const around = (center: number, spread: number): Init => ({ kind: 'float', center, spread });

function tensorSpecs(arch: 'qwen3_5_moe' | 'gemma4', c: Json, mode: Mode): Spec[] {
  const out: Spec[] = [];
  const q4 = mode !== 'bf16';
  const plain = (name: string, shape: number[], init: Init) => out.push({ name, shape, dtype: 'BF16', init });
  // A linear layer [..., n, k]: bf16, MLX affine (packed words, scales, biases) or GGUF blocks.
  const lin = (base: string, shape: number[], quantize = q4, init?: Init) => {
    const k = shape[shape.length - 1]!, lead = shape.slice(0, -1);
    if (!quantize) {
      plain(`${base}.weight`, shape, init ?? fanIn(k));
      return;
    }
    if (gguf(mode)) {
      out.push({ name: `${base}.weight`, shape, dtype: ggufTypeOf(mode, base, k, L), init: { kind: 'blocks' } });
      return;
    }
    const scale = 1 / (4.6 * Math.sqrt(k));
    out.push({ name: `${base}.weight`, shape: [...lead, (k * BITS) / 32], dtype: 'U32', init: { kind: 'words' } });
    plain(`${base}.scales`, [...lead, k / GROUP], around(scale, 0.1 * scale));
    plain(`${base}.biases`, [...lead, k / GROUP], around(-7.5 * scale, 0.1 * scale));
  };
  const parsed = arch === 'qwen3_5_moe' ? qwen35MoeConfig(c) : gemma4Config(c);
  const H = parsed.hiddenSize, V = parsed.vocabSize, L = parsed.numLayers, nh = parsed.numHeads;
  plain('model.embed_tokens.weight', [V, H], around(0, 1));
  lin('lm_head', [V, H]);
  if (arch === 'qwen3_5_moe') {
    const cfg = qwen35MoeConfig(c);
    const D = cfg.headDim, nkv = cfg.numKvHeads, hk = cfg.linearNumKeyHeads, hv = cfg.linearNumValueHeads;
    const dk = cfg.linearKeyHeadDim, dv = cfg.linearValueHeadDim, E = cfg.numExperts, I = cfg.moeIntermediateSize, Is = cfg.sharedExpertIntermediateSize;
    const C = 2 * hk * dk + hv * dv;
    plain('model.norm.weight', [H], around(0, 0.1));
    for (let i = 0; i < L; i++) {
      const p = `model.layers.${i}.`;
      plain(`${p}input_layernorm.weight`, [H], around(0, 0.1));
      plain(`${p}post_attention_layernorm.weight`, [H], around(0, 0.1));
      if (cfg.layerTypes[i] === 'linear_attention') {
        lin(`${p}linear_attn.in_proj_qkv`, [C, H]);
        lin(`${p}linear_attn.in_proj_z`, [hv * dv, H]);
        lin(`${p}linear_attn.in_proj_b`, [hv, H]);
        lin(`${p}linear_attn.in_proj_a`, [hv, H]);
        plain(`${p}linear_attn.conv1d.weight`, [C, 1, 4], around(0, 0.5));
        plain(`${p}linear_attn.dt_bias`, [hv], around(0, 0.5));
        plain(`${p}linear_attn.A_log`, [hv], around(-1.5, 1.4));
        plain(`${p}linear_attn.norm.weight`, [dv], around(1, 0.1));
        lin(`${p}linear_attn.out_proj`, [H, hv * dv]);
      } else {
        lin(`${p}self_attn.q_proj`, [nh * D * 2, H]);
        lin(`${p}self_attn.k_proj`, [nkv * D, H]);
        lin(`${p}self_attn.v_proj`, [nkv * D, H]);
        lin(`${p}self_attn.o_proj`, [H, nh * D]);
        plain(`${p}self_attn.q_norm.weight`, [D], around(0, 0.1));
        plain(`${p}self_attn.k_norm.weight`, [D], around(0, 0.1));
      }
      lin(`${p}mlp.gate`, [E, H], false, around(0, 3 / Math.sqrt(H)));
      if (q4) {
        lin(`${p}mlp.switch_mlp.gate_proj`, [E, I, H]);
        lin(`${p}mlp.switch_mlp.up_proj`, [E, I, H]);
        lin(`${p}mlp.switch_mlp.down_proj`, [E, H, I]);
      } else {
        plain(`${p}mlp.experts.gate_up_proj`, [E, 2 * I, H], fanIn(H));
        plain(`${p}mlp.experts.down_proj`, [E, H, I], fanIn(I));
      }
      lin(`${p}mlp.shared_expert.gate_proj`, [Is, H]);
      lin(`${p}mlp.shared_expert.up_proj`, [Is, H]);
      lin(`${p}mlp.shared_expert.down_proj`, [H, Is]);
      lin(`${p}mlp.shared_expert_gate`, [1, H], false);
    }
    return out;
  }
  const cfg = gemma4Config(c);
  const m = cfg.moe!, E = m.numExperts, Ie = m.intermediateSize;
  plain('model.norm.weight', [H], around(1, 0.1));
  for (let i = 0; i < L; i++) {
    const p = `model.layers.${i}.`, l = cfg.layers[i]!, D = l.headDim, I = l.intermediateSize;
    for (const n of ['input_layernorm', 'post_attention_layernorm', 'pre_feedforward_layernorm', 'post_feedforward_layernorm']) plain(`${p}${n}.weight`, [H], around(1, 0.1));
    lin(`${p}self_attn.q_proj`, [nh * D, H]);
    lin(`${p}self_attn.o_proj`, [H, nh * D]);
    plain(`${p}self_attn.q_norm.weight`, [D], around(0.25, 0.025));
    lin(`${p}self_attn.k_proj`, [l.numKvHeads * D, H]);
    plain(`${p}self_attn.k_norm.weight`, [D], around(0.25, 0.025));
    if (!l.kEqV) lin(`${p}self_attn.v_proj`, [l.numKvHeads * D, H]);
    lin(`${p}mlp.gate_proj`, [I, H]);
    lin(`${p}mlp.up_proj`, [I, H]);
    lin(`${p}mlp.down_proj`, [H, I]);
    plain(`${p}router.proj.weight`, [E, H], around(0, 3));
    plain(`${p}router.scale`, [H], around(1, 0.1));
    plain(`${p}router.per_expert_scale`, [E], around(1, 0.1));
    if (q4) {
      lin(`${p}experts.switch_glu.gate_proj`, [E, Ie, H]);
      lin(`${p}experts.switch_glu.up_proj`, [E, Ie, H]);
      lin(`${p}experts.switch_glu.down_proj`, [E, H, Ie]);
    } else {
      plain(`${p}experts.gate_up_proj`, [E, 2 * Ie, H], fanIn(H));
      plain(`${p}experts.down_proj`, [E, H, Ie], fanIn(Ie));
    }
    for (const n of ['pre_feedforward_layernorm_2', 'post_feedforward_layernorm_1', 'post_feedforward_layernorm_2']) plain(`${p}${n}.weight`, [H], around(1, 0.1));
    plain(`${p}layer_scalar`, [1], around(0.9, 0.3));
  }
  return out;
}

/**
 * Small tensors' values from the host; larger ones the device fills (DeviceFilled), never read here. --small
 * lowers the bound so that its large tensors take the device's path too.
 */
const HOST_MAX_ELEMENTS = small ? 4096 : 1 << 20;

/** The tensors of a model by name and shape; bytes only for the small ones (generated when read). */
class SpecSource extends WeightSource {
  readonly tensors: ReadonlyMap<string, TensorInfo>;
  readonly description: string;
  readonly specs = new Map<string, Spec>();
  private seed = 0x1234567;

  constructor(specs: readonly Spec[], label: string) {
    super();
    this.description = `random weights of ${label}`;
    const map = new Map<string, TensorInfo>();
    for (const s of specs) {
      this.specs.set(s.name, s);
      const elementCount = s.shape.reduce((a, b) => a * b, 1);
      if (s.dtype !== 'U32' && s.dtype !== 'BF16') {
        // GGUF blocks: u8 rows of whole blocks, as a GGUF file's tensor (the loader reads the block type from it).
        const k = s.shape[s.shape.length - 1]!, rowBytes = ggmlRowBytesOf(s.dtype, k);
        const storageShape = [...s.shape.slice(0, -1), rowBytes];
        map.set(s.name, {
          name: s.name, format: 'gguf', file: s.name, dtype: s.dtype, shape: s.shape, elementCount, byteOffset: 0, byteLength: (elementCount / k) * rowBytes,
          storage: { dtype: 'u8', shape: storageShape, raw: true },
        });
        continue;
      }
      const dtype: DType = s.dtype === 'U32' ? 'u32' : 'bf16';
      const byteLength = elementCount * (s.dtype === 'U32' ? 4 : 2);
      map.set(s.name, {
        name: s.name, format: 'safetensors', file: s.name, dtype: s.dtype, shape: s.shape, elementCount, byteOffset: 0, byteLength,
        storage: { dtype, shape: s.shape, raw: false },
      });
    }
    this.tensors = map;
  }

  protected fileBytes(info: TensorInfo): Uint8Array {
    const s = this.specs.get(info.name)!;
    if (info.elementCount > HOST_MAX_ELEMENTS || s.init.kind !== 'float') {
      throw new Error(`bench/models: ${info.name} (${info.elementCount} elements) is filled on the device, never read on the host`);
    }
    const v = new Float32Array(info.elementCount);
    for (let i = 0; i < v.length; i++) v[i] = s.init.center + s.init.spread * (2 * this.next() - 1);
    const bits = toBf16(v);
    return new Uint8Array(bits.buffer, bits.byteOffset, bits.byteLength);
  }

  next(): number {
    this.seed = (Math.imul(this.seed, 1664525) + 1013904223) >>> 0;
    return this.seed / 2 ** 32;
  }
}

// ---- filling on the device ----

const TILE_ROWS = 256;

/** Fills device buffers: Philox words for packed weights, gathered rows of a host tile for floats. */
class Filler {
  private readonly tiles = new Map<string, Buffer>();
  private counter = 0;
  bytes = 0;
  constructor(readonly dev: Device, readonly source: SpecSource) {}

  words(buf: Buffer): void {
    const n = buf.elementCount, blocks = Math.floor(n / 4);
    this.bytes += buf.byteLength;
    if (blocks > 0) {
      using enc = this.dev.encoder();
      for (let at = 0; at < blocks; at += 1 << 28) {
        const count = Math.min(1 << 28, blocks - at);
        philox4x32(enc, { output: buf.view('u32', [count, 4], at * 16), n: count, key: [0x9e3779b9, 0x243f6a88], counter: [this.counter++, 0, 0, 0] });
      }
      enc.commitAndWait();
    }
    if (n % 4 !== 0) buf.write(Uint32Array.from({ length: n % 4 }, () => (this.source.next() * 2 ** 32) >>> 0), { byteOffset: blocks * 16 });
  }

  floats(buf: Buffer, init: Init): void {
    if (init.kind !== 'float') throw new Error('bench/models: a float buffer needs a float init');
    const n = buf.elementCount;
    this.bytes += buf.byteLength;
    const sample = () => init.center + init.spread * (2 * this.source.next() - 1);
    if (n <= HOST_MAX_ELEMENTS) {
      buf.writeNumbers(Float32Array.from({ length: n }, sample));
      return;
    }
    let width = 4096;
    while (n % width !== 0) width /= 2;
    if (width < 16) throw new Error(`bench/models: ${n} elements have no row width of at least 16 dividing them`);
    const key = `${buf.dtype}:${width}:${init.center}:${init.spread}`;
    let tile = this.tiles.get(key);
    if (tile === undefined) {
      tile = this.dev.upload(buf.dtype, [TILE_ROWS, width], Float32Array.from({ length: TILE_ROWS * width }, sample));
      this.tiles.set(key, tile);
    }
    const rows = n / width;
    using indices = this.dev.upload('u32', [rows], Uint32Array.from({ length: rows }, () => Math.floor(this.source.next() * TILE_ROWS)));
    using enc = this.dev.encoder();
    gather(enc, { src: tile, indices, output: buf.view(buf.dtype, [rows, width], 0), srcRows: TILE_ROWS, rowWidth: width, nIndices: rows });
    enc.commitAndWait();
  }

  /**
   * GGUF blocks of `type`, rows of k values: rows of a host tile (TILE_ROWS rows of fan-in values quantized by
   * the reference quantizer, so d and dmin are finite) gathered into place as 4-byte words, `span` rows at a time
   * where a row is not whole words (Q6_K's 210-byte and Q8_0's 34-byte blocks in odd numbers: rows of 2 bytes).
   */
  blocks(buf: Buffer, type: GgmlQuantType, k: number): void {
    const rowBytes = ggmlRowBytesOf(type, k), rows = buf.byteLength / rowBytes;
    this.bytes += buf.byteLength;
    const span = [1, 2, 4].find((r) => (r * rowBytes) % 4 === 0 && rows % r === 0 && TILE_ROWS % r === 0);
    if (span === undefined) throw new Error(`bench/models: ${rows} ${type} rows of ${k} values (${rowBytes} bytes) make no whole 4-byte words`);
    const key = `${type}:${k}`;
    let tile = this.tiles.get(key);
    if (tile === undefined) {
      const spread = Math.sqrt(3 / k);
      const values = Float32Array.from({ length: TILE_ROWS * k }, () => spread * (2 * this.source.next() - 1));
      const bytes = ggmlQuantize(type, values, TILE_ROWS, k);
      const raw = this.dev.alloc('u8', [bytes.byteLength]);
      raw.write(bytes);
      tile = raw;
      this.tiles.set(key, tile);
    }
    const words = (span * rowBytes) / 4, units = rows / span, tileUnits = TILE_ROWS / span;
    using indices = this.dev.upload('u32', [units], Uint32Array.from({ length: units }, () => Math.floor(this.source.next() * tileUnits)));
    using enc = this.dev.encoder();
    gather(enc, {
      src: tile.view('f32', [tileUnits, words], 0), indices, output: buf.view('f32', [units, words], 0), srcRows: tileUnits, rowWidth: words,
      nIndices: units,
    });
    enc.commitAndWait();
  }

  release(): void {
    for (const t of this.tiles.values()) t.release();
    this.tiles.clear();
  }
}

/** The loader's checkpoint with every large tensor allocated and filled on the device instead of uploaded. */
class DeviceFilled extends Checkpoint {
  constructor(readonly specSource: SpecSource, device: Device, quantization: { groupSize: number; bits: number } | null, readonly fill: Filler) {
    super(specSource, device, 'stored', quantization);
  }

  private alloc(dtype: DType, shape: readonly number[]): Buffer {
    return this.own(this.device.alloc(dtype, shape));
  }

  private initOf(name: string): Init {
    return this.specSource.specs.get(name)!.init;
  }

  override tensor(ref: TensorRef, shape?: readonly number[]): Buffer {
    const t = this.source.info(ref.name);
    const b = this.alloc(t.storage.dtype, shape ?? t.shape);
    this.fill.floats(b, this.initOf(ref.name));
    return b;
  }

  override linear(parts: readonly RowsPart[]): Linear {
    const first = parts[0]!.ref;
    const t = this.source.info(first.name);
    const n = parts.reduce((acc, p) => acc + (p.rows?.length ?? this.source.info(p.ref.name).shape[0]!) + (p.pad ?? 0), 0);
    if (first.scales !== undefined) {
      const q = this.quantization!;
      const packed = t.shape[1]!, k = (packed * 32) / q.bits, groups = k / q.groupSize;
      const weight = this.alloc('u32', [n, packed]);
      this.fill.words(weight);
      const d16 = this.keepsScales16([first.scales, first.biases!]) ? 'bf16' : 'f32';
      const scales = this.alloc(d16, [n, groups]), biases = this.alloc(d16, [n, groups]);
      this.fill.floats(scales, this.initOf(first.scales));
      this.fill.floats(biases, this.initOf(first.biases!));
      return { kind: 'affine', weight, scales, biases, n, k, groupSize: q.groupSize, bits: q.bits };
    }
    const k = t.shape[t.shape.length - 1]!;
    const gt = this.ggmlTypeOf(first.name);
    if (gt !== null) {
      const weight = this.alloc('u8', [n, ggmlRowBytesOf(gt, k)]);
      this.fill.blocks(weight, gt, k);
      return { kind: 'ggml', weight, ggmlType: gt, n, k };
    }
    const weight = this.alloc(t.storage.dtype, [n, k]);
    this.fill.floats(weight, this.initOf(first.name));
    return { kind: 'dense', weight, n, k };
  }

  override stack(parts: readonly RowsPart<TensorRef | string>[], rowWidth: number, widen: boolean): Buffer {
    const name = (r: TensorRef | string) => (typeof r === 'string' ? r : r.name);
    const first = this.source.info(name(parts[0]!.ref));
    // GGUF blocks: rowWidth counts bytes.
    const rowsOf = (t: TensorInfo) => (t.storage.dtype === 'u8' ? t.byteLength : t.elementCount) / rowWidth;
    const rows = parts.reduce((acc, p) => acc + (p.rows?.length ?? rowsOf(this.source.info(name(p.ref)))), 0);
    const stored = first.storage.dtype;
    const b = this.alloc(widen && stored !== 'u32' && stored !== 'u8' ? 'f32' : stored, [rows, rowWidth]);
    const gt = this.ggmlTypeOf(first.name);
    if (gt !== null) this.fill.blocks(b, gt, first.shape[first.shape.length - 1]!);
    else if (stored === 'u32') this.fill.words(b);
    else this.fill.floats(b, this.initOf(first.name));
    return b;
  }
}

// ---- the floor: bytes of weights one decode token reads ----

let benchMode: Mode = 'q4';

/**
 * Bytes of linear layer `name`'s weights (n rows of k): MLX affine (words, bf16 scales and biases), GGUF blocks
 * (q4k, q4km: ggufTypeOf's type in a model of nLayers) or bf16.
 */
function linearBytes(n: number, k: number, q4: boolean, name = '', nLayers = 0): number {
  if (q4 && gguf(benchMode)) return n * ggmlRowBytesOf(ggufTypeOf(benchMode, name, k, nLayers), k);
  return q4 ? (n * k * BITS) / 8 + 2 * 2 * n * (k / GROUP) : 2 * n * k;
}

/** Weight bytes per decode token, and the state bytes it reads and writes beside them (recurrent states, caches at context `ctx`). */
function decodeBytes(arch: 'qwen3_5_moe' | 'gemma4', c: Json, q4: boolean, ctx: number): { weights: number; state: number } {
  let w = 0, state = 0;
  if (arch === 'qwen3_5_moe') {
    const g = qwen35MoeConfig(c), H = g.hiddenSize;
    const C = 2 * g.linearNumKeyHeads * g.linearKeyHeadDim + g.linearNumValueHeads * g.linearValueHeadDim;
    const vd = g.linearNumValueHeads * g.linearValueHeadDim, L = g.layerTypes.length;
    w += 2 * H + linearBytes(g.vocabSize, H, q4, 'lm_head');
    for (const [i, type] of g.layerTypes.entries()) {
      const p = `model.layers.${i}.`;
      if (type === 'linear_attention') {
        w += linearBytes(C, H, q4) + linearBytes(vd, H, q4) + 2 * linearBytes(g.linearNumValueHeads, H, q4) + linearBytes(H, vd, q4) + 4 * C * 4;
        // The recurrent state [Hv, V, K] f32 read and written, the conv state [C, 3] too.
        state += 2 * 4 * (g.linearNumValueHeads * g.linearValueHeadDim * g.linearKeyHeadDim + C * 3);
      } else {
        w += linearBytes(2 * g.numHeads * g.headDim, H, q4) + linearBytes(g.numKvHeads * g.headDim, H, q4)
          + linearBytes(g.numKvHeads * g.headDim, H, q4, `${p}self_attn.v_proj`, L) + linearBytes(H, g.numHeads * g.headDim, q4);
        state += 2 * 4 * g.numKvHeads * g.headDim * ctx;
      }
      w += 2 * g.numExperts * H + 2 * H;
      w += g.numExpertsPerTok * (2 * linearBytes(g.moeIntermediateSize, H, q4)
        + linearBytes(H, g.moeIntermediateSize, q4, `${p}mlp.switch_mlp.down_proj`, L));
      w += 2 * linearBytes(g.sharedExpertIntermediateSize, H, q4) + linearBytes(H, g.sharedExpertIntermediateSize, q4, `${p}mlp.shared_expert.down_proj`, L);
    }
    return { weights: w, state };
  }
  const g = gemma4Config(c), H = g.hiddenSize, m = g.moe!, L = g.layers.length;
  w += 2 * H + linearBytes(g.vocabSize, H, q4, 'lm_head');
  for (const [i, l] of g.layers.entries()) {
    const D = l.headDim, p = `model.layers.${i}.`;
    w += linearBytes(g.numHeads * D, H, q4) + linearBytes(H, g.numHeads * D, q4) + linearBytes(l.numKvHeads * D, H, q4);
    if (!l.kEqV) w += linearBytes(l.numKvHeads * D, H, q4, `${p}self_attn.v_proj`, L);
    w += 2 * linearBytes(l.intermediateSize, H, q4) + linearBytes(H, l.intermediateSize, q4, `${p}mlp.down_proj`, L);
    // The router bf16 as stored.
    w += 2 * m.numExperts * H
      + m.topK * (2 * linearBytes(m.intermediateSize, H, q4) + linearBytes(H, m.intermediateSize, q4, `${p}experts.switch_glu.down_proj`, L));
    const span = l.type === 'sliding_attention' ? Math.min(ctx, g.slidingWindow) : ctx;
    state += (l.kEqV ? 1 : 2) * 4 * l.numKvHeads * D * span;
  }
  return { weights: w, state };
}

// ---- measurement ----

const dev = Device.open();
if (pdlArg !== undefined) dev.setOption('pdl', pdlArg);
if (concurrentArg !== undefined) dev.setOption('concurrent', concurrentArg);

/** Our copy bandwidth: gather copying `bytes` of f32 rows (read + written), best of 5 in one commit each. */
function copyGbs(bytes: number): number {
  const width = 4096, rows = Math.max(1, Math.floor(bytes / (4 * width)));
  using src = dev.alloc('f32', [rows, width]);
  using dst = dev.alloc('f32', [rows, width]);
  using indices = dev.upload('u32', [rows], Uint32Array.from({ length: rows }, (_, i) => i));
  const once = () => {
    using enc = dev.encoder();
    gather(enc, { src, indices, output: dst, srcRows: rows, rowWidth: width, nIndices: rows });
    enc.commitAndWait();
    return enc.gpuTimeNs;
  };
  once();
  const best = Math.min(...Array.from({ length: 5 }, once));
  return (2 * rows * width * 4) / best;
}

const median = (v: number[]): number => {
  const s = [...v].sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

function randomIds(n: number, vocab: number, seed: number): number[] {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s % vocab;
  });
}

function run(arch: 'qwen3_5_moe' | 'gemma4', copy: number): void {
  const q4 = quant !== 'bf16';
  benchMode = quant;
  const raw: Json = { ...(arch === 'qwen3_5_moe' ? (small ? QWEN_SMALL : QWEN_REAL) : (small ? GEMMA_SMALL : GEMMA_REAL)) };
  if (layersArg !== null) {
    raw['num_hidden_layers'] = layersArg;
    delete raw['layer_types'];
  }
  if (vocabArg !== null) raw['vocab_size'] = vocabArg;
  const cut = [layersArg !== null ? `${layersArg} layers` : '', vocabArg !== null ? `vocabulary ${vocabArg}` : ''].filter((x) => x !== '').join(', ');
  const label = `${arch === 'qwen3_5_moe' ? 'Qwen3.6-35B-A3B' : 'Gemma 4 26B-A4B'}${small ? ' (--small dims)' : ''}${cut !== '' ? ` (cut to ${cut})` : ''}, `
    + `${quant === 'q4' ? 'MLX affine 4-bit g64' : quant === 'q4k' ? 'GGUF Q4_K (Q8_0 where rows are not multiples of 256)'
      : quant === 'q4km' ? "GGUF Q4_K_M's mix (Q6_K output, down and v projections of llama.cpp's use_more_bits layers; Q8_0 where rows are not multiples of 256)" : 'bf16'}`;
  const t0 = performance.now();
  const source = new SpecSource(tensorSpecs(arch, raw, quant), label);
  const filler = new Filler(dev, source);
  const names = describeModel(source, { config: raw });
  const ck = new DeviceFilled(source, dev, quant === 'q4' ? { groupSize: GROUP, bits: BITS } : null, filler);
  const maxContext = Math.max(prefillLen, promptLen + steps + 1) + 16;
  const flushLayers = flushArg !== 'off';
  let model: CausalLM;
  try {
    model = arch === 'qwen3_5_moe'
      ? new Qwen35Moe(dev, qwen35MoeConfig(raw), ck, names as Qwen35MoeWeights, { maxContext, replay: true, flushLayers })
      : new Gemma4(dev, gemma4Config(raw), ck, names as Gemma4Weights, { maxContext, replay: true, flushLayers });
  } catch (e) {
    ck.release();
    throw e;
  } finally {
    filler.release();
  }
  const buildS = (performance.now() - t0) / 1000;
  try {
    const vocab = model.config.vocabSize;
    const prompt = randomIds(promptLen, vocab, 7);
    // Warm-up: the first prompt and steps compile and load every kernel.
    model.prefill(prompt);
    for (let i = 0; i < 2; i++) model.decode();
    if (coldKernels) {
      coldKernelTable(model, prompt, label);
      return;
    }
    if (prefillParts) {
      prefillPartsTable(model, randomIds(prefillLen, vocab, 11), label);
      return;
    }
    const recordedWall: number[] = [], recordedHost: number[] = [], replayWall: number[] = [], replayHost: number[] = [], replayDevice: number[] = [];
    let finite = true;
    for (let r = 0; r < rounds; r++) {
      // Each round's first two steps (one a parity) record afresh; the model would keep them across prompts.
      model.dropRecordedSteps();
      model.prefill(prompt);
      for (let i = 0; i < steps; i++) {
        const t = performance.now();
        model.decode();
        const wall = performance.now() - t;
        (i < 2 ? recordedWall : replayWall).push(wall);
        (i < 2 ? recordedHost : replayHost).push(model.hostStepMs);
        if (i >= 2) replayDevice.push(model.deviceStepMs);
      }
      const last = model.logits.readNumbers();
      finite &&= last.every(Number.isFinite);
    }
    // A later prompt keeps the recorded steps: its first step replays.
    model.prefill(prompt);
    const t1 = performance.now();
    model.decode();
    const firstAfterPrompt = performance.now() - t1;
    const ctx = promptLen + steps;
    const { weights, state } = decodeBytes(arch, raw, q4, ctx);
    const stepMs = median(replayWall);
    console.log(`\n${label}: weights ${(filler.bytes / 1e9).toPrecision(3)} GB built on the device in ${buildS.toFixed(1)} s; ${model.stepDispatches} dispatches a decode step in ${model.stepBarriers + 1} stretches`);
    console.log(`  decode (batch 1, ${rounds} x ${steps} steps after a ${promptLen}-token prompt, replayed): ${stepMs.toFixed(3)} ms/token = ${(1000 / stepMs).toFixed(1)} tokens/s`
      + (finite ? '' : '  (logits not finite)'));
    console.log(`  decode step recorded afresh (the first two after a model's first prompt): ${median(recordedWall).toFixed(3)} ms = ${(1000 / median(recordedWall)).toFixed(1)} tokens/s;`
      + ` the first after a later prompt (replayed): ${firstAfterPrompt.toFixed(3)} ms`);
    console.log(`  host time a step: recorded ${median(recordedHost).toFixed(3)} ms, replayed ${median(replayHost).toFixed(3)} ms`);
    // A replayed step's wall time is its host share (the patches and the submission), then the device's, then the
    // wait's and the token's read: nothing of the host's share runs under the device's.
    const deviceMs = median(replayDevice);
    console.log(`  device time a replayed step: ${deviceMs.toFixed(3)} ms (the rest of the step's ${stepMs.toFixed(3)} ms: host ${median(replayHost).toFixed(3)}, `
      + `wait and read ${(stepMs - deviceMs - median(replayHost)).toFixed(3)})`);
    const floors: [string, number][] = [[`measured copy ${copy.toPrecision(4)} GB/s`, copy]];
    if (copyGbsArg !== null) floors.push([`--copy-gbs ${copyGbsArg}`, copyGbsArg]);
    for (const [what, bw] of floors) {
      const us = weights / bw / 1000;
      console.log(`  floor (${what}): ${(weights / 1e6).toFixed(1)} MB of weights a token = ${us.toFixed(1)} us = ${(1e6 / us).toFixed(0)} tokens/s;`
        + ` decode at ${((100 * us) / (stepMs * 1000)).toFixed(1)}% of it (its device time at ${((100 * us) / (deviceMs * 1000)).toFixed(1)}%)`
        + ` (with ${(state / 1e6).toFixed(1)} MB of state read and written at context ${ctx}: ${((100 * (weights + state) / bw / 1000) / (stepMs * 1000)).toFixed(1)}%)`);
    }
    // Printed before the prompt of prefillLen: its first run (a warm-up, the matrix kernels' first use) and two timed.
    const long = randomIds(prefillLen, vocab, 11);
    model.prefill(long);
    const prefillMs: number[] = [];
    let parts = '';
    for (let r = 0; r < 2; r++) {
      const t = performance.now();
      model.prefill(long);
      const ms = performance.now() - t;
      if (prefillMs.every((x) => ms < x)) {
        parts = `host ${model.hostPrefillMs.toFixed(1)} ms recording and submitting, device ${model.devicePrefillMs.toFixed(1)} ms`
          + (flushLayers && dev.backend === 'cuda' ? ' from the first layer\'s launch, layers flushed as recorded' : ', one submission');
      }
      prefillMs.push(ms);
    }
    console.log(`  prefill ${prefillLen} tokens: ${Math.min(...prefillMs).toFixed(1)} ms = ${(prefillLen / Math.min(...prefillMs) * 1000).toFixed(0)} tokens/s (best of 2; ${parts})`);
  } finally {
    model.release();
  }
}

// ---- --cold-kernels ----

const COLD_FRONTS = `
#define R2(x) x x
#define R4(x) R2(R2(x))
#define R16(x) R4(R4(x))
#define R256(x) R16(R16(x))
#define R2048(x) R256(R4(R2(x)))
// Reads 80 MiB through L2 (the default policy): nothing of a kernel ahead stays there.
extern "C" __global__ void __launch_bounds__(256) cold_flush(const float4* p, float* out) {
    const unsigned long long n = (80ull << 20) / 16;
    float s = 0.f;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
        const float4 v = p[i];
        s += v.x + v.y + v.z + v.w;
    }
    if (s == 1.2345e30f) out[0] = s;
}
// 16,384 straight-line FFMAs (256 KB of code), a block of 4 warps an SM: nothing of a kernel ahead stays in the SMs' instruction caches.
extern "C" __global__ void __launch_bounds__(128, 1) cold_pollute(float* out) {
    const float a = out[1], b = out[2];
    float v0 = threadIdx.x, v1 = v0 + 1.f, v2 = v0 + 2.f, v3 = v0 + 3.f, v4 = v0 + 4.f, v5 = v0 + 5.f, v6 = v0 + 6.f, v7 = v0 + 7.f;
    R2048(v0 = fmaf(v0, a, b); v1 = fmaf(v1, a, b); v2 = fmaf(v2, a, b); v3 = fmaf(v3, a, b);
          v4 = fmaf(v4, a, b); v5 = fmaf(v5, a, b); v6 = fmaf(v6, a, b); v7 = fmaf(v7, a, b);)
    const float s = v0 + v1 + v2 + v3 + v4 + v5 + v6 + v7;
    if (s == 1.2345e30f) out[0] = s;
}
`;

interface Captured { p: Pipeline; b: DispatchBindings; g: Dim3; t: Dim3 }

/** The dispatches of one decode step as the model records it (the first step after a prompt is recorded, not replayed). */
function captureStep(model: CausalLM, prompt: number[]): Captured[] {
  const out: Captured[] = [];
  const proto = EncoderClass.prototype as unknown as { dispatch: (p: Pipeline, b: DispatchBindings, g: Dim3, t: Dim3) => void };
  const orig = proto.dispatch;
  // The model keeps its recorded steps across prompts: drop them, so that the step after the prompt records.
  model.dropRecordedSteps();
  model.prefill(prompt);
  proto.dispatch = function (this: Encoder, p, b, g, t) {
    out.push({ p, b, g, t });
    orig.call(this, p, b, g, t);
  };
  try {
    model.decode();
  } finally {
    proto.dispatch = orig;
  }
  return out;
}

/** A replayable encoder of seq repeated reps times: the median device time of one (us), over 5 replays after a first. */
function timeAlone(seq: (enc: Encoder) => void, reps: number): number {
  const enc = dev.encoder({ replayable: true });
  try {
    for (let i = 0; i < reps; i++) seq(enc);
    enc.commitAndWait();
    const ts: number[] = [];
    for (let r = 0; r < 6; r++) {
      enc.replayAndWait();
      if (r > 0) ts.push(enc.gpuTimeNs / reps / 1000);
    }
    return median(ts);
  } finally {
    enc.release();
  }
}

function prefillPartsTable(model: CausalLM, tokens: number[], label: string): void {
  model.prefill(tokens);
  const parts: Captured[] = [];
  const proto = EncoderClass.prototype as unknown as { dispatch: (p: Pipeline, b: DispatchBindings, g: Dim3, t: Dim3) => void };
  const orig = proto.dispatch;
  proto.dispatch = function (this: Encoder, p, b, g, t) {
    parts.push({ p, b, g, t });
    orig.call(this, p, b, g, t);
  };
  try {
    model.prefill(tokens);
  } finally {
    proto.dispatch = orig;
  }
  const whole = model.devicePrefillMs * 1000;
  // Distinct by entry, grid, block and inline params (a product's k is in its params): dispatches of one entry and
  // grid but other params are listed apart, numbered #1, #2, ... in prompt order.
  const groups = new Map<string, { d: Captured; count: number; label: string }>();
  const variants = new Map<string, number>();
  for (const d of parts) {
    const shape = `${d.p.name} ${d.g.join('x')} x ${d.t.join('x')}`;
    const params = Object.entries(d.b.bytes ?? {}).map(([i, v]) => `${i}:${Array.from(new Uint8Array(v!.buffer, v!.byteOffset, v!.byteLength)).join(',')}`).join(' ');
    const key = `${shape} ${params}`;
    const g = groups.get(key);
    if (g) {
      g.count++;
    } else {
      const j = (variants.get(shape) ?? 0) + 1;
      variants.set(shape, j);
      groups.set(key, { d, count: 1, label: `${shape} #${j}` });
    }
  }
  const rows: { key: string; count: number; us: number }[] = [];
  // Buffers the prompt made for itself and released at its end (the recording encoder's words, casts' outputs):
  // the dispatch runs on zeroed stand-ins of their size (the library refuses the released ones, as it should).
  const stands = new Map<Buffer, Buffer>();
  const stand = (b: Buffer): Buffer => {
    let s = stands.get(b.root);
    if (s === undefined) {
      s = dev.alloc('u8', [b.root.byteLength]);
      s.fill(0);
      stands.set(b.root, s);
    }
    return b.isView ? s.view(b.dtype, b.shape, b.byteOffset) : s.view(b.dtype, b.shape, 0);
  };
  let stood = 0;
  for (const { d, count, label: key } of groups.values()) {
    // The sampler's kernels bind the recording encoder's own words: not run again.
    if (/^(argmax|sample|top_k|philox)/.test(d.p.name)) continue;
    const buffers: NonNullable<DispatchBindings['buffers']> = {};
    let replaced = false;
    for (const [i, v] of Object.entries(d.b.buffers ?? {})) {
      if (v === undefined) continue;
      const [buf, off] = Array.isArray(v) ? v as readonly [Buffer, number] : [v as Buffer, undefined];
      const use = buf.released ? stand(buf) : buf;
      replaced ||= use !== buf;
      buffers[Number(i)] = off === undefined ? use : [use, off];
    }
    if (replaced) stood += count;
    rows.push({ key: replaced ? `${key} (on stand-ins)` : key, count, us: timeAlone((e) => e.dispatch(d.p, { ...d.b, buffers }, d.g, d.t), 16) });
  }
  for (const s of stands.values()) s.release();
  rows.sort((a, b) => b.count * b.us - a.count * a.us);
  const sum = rows.reduce((acc, r) => acc + r.count * r.us, 0);
  console.log(`\n${label}: a prompt of ${tokens.length} tokens, ${parts.length} dispatches, device ${(whole / 1000).toFixed(2)} ms,`
    + ` host ${model.hostPrefillMs.toFixed(2)} ms; the distinct dispatches alone sum to ${(sum / 1000).toFixed(2)} ms`);
  if (stood > 0) console.log(`${stood} dispatches ran on zeroed stand-ins of buffers the prompt released at its end (its encoder's words, its own temporaries)`);
  console.log('dispatch | count | us each, alone | us in all | share of the sum');
  for (const r of rows) {
    console.log(`${r.key} | ${r.count} | ${r.us.toFixed(2)} | ${(r.count * r.us).toFixed(1)} | ${(100 * r.count * r.us / sum).toFixed(1)} %`);
  }
}

function coldKernelTable(model: CausalLM, prompt: number[], label: string): void {
  if (dev.backend !== 'cuda') throw new Error('--cold-kernels: the fronts are CUDA kernels; run on the cuda backend');
  const step = captureStep(model, prompt);
  const lib = dev.compile(COLD_FRONTS, { name: 'cold_fronts.cu' });
  using flushBuf = dev.alloc('f32', [(80 << 20) / 4]);
  flushBuf.fill(0.5);
  using sink = dev.upload('f32', [4], Float32Array.from([0, 1.0001, 0.5, 0]));
  const flush = lib.pipeline('cold_flush'), pollute = lib.pipeline('cold_pollute');
  const sms = Math.max(1, dev.limits.multiprocessors);
  const fronts = {
    flush: (enc: Encoder) => enc.dispatch(flush, { buffers: { 0: flushBuf, 1: sink } }, [sms * 8, 1, 1], [256, 1, 1]),
    pollute: (enc: Encoder) => enc.dispatch(pollute, { buffers: { 0: sink } }, [sms, 1, 1], [128, 1, 1]),
  };
  const run1 = (enc: Encoder, d: Captured) => enc.dispatch(d.p, d.b, d.g, d.t);
  const glue = step.find((d) => d.p.name.startsWith('rms_norm'))!;
  const time = (seq: (enc: Encoder) => void): number => timeAlone(seq, 16);
  const warm0 = time((e) => run1(e, glue));
  const a0 = time((e) => { fronts.flush(e); run1(e, glue); });
  const b0 = time((e) => { fronts.flush(e); fronts.pollute(e); run1(e, glue); });
  console.log(`\n${label}: ${step.length} dispatches a decode step; each distinct one (entry, grid x block) in step order, us a dispatch`);
  console.log(`behind the step's first norm (${glue.p.name}): fronts alone ${warm0.toFixed(2)} / ${a0.toFixed(2)} / ${b0.toFixed(2)} us`);
  console.log('dispatch | count in the step | warm (same dispatch again) | weights cold | code and weights cold | code\'s share');
  const seen = new Map<string, number>();
  for (const d of step) {
    const key = `${d.p.name} ${d.g.join('x')} x ${d.t.join('x')}`;
    seen.set(key, (seen.get(key) ?? 0) + 1);
  }
  const done = new Set<string>();
  for (const d of step) {
    const key = `${d.p.name} ${d.g.join('x')} x ${d.t.join('x')}`;
    // Kernels bound to the recording encoder's own words (the sampler's) are not run again here.
    if (done.has(key) || /^(argmax|sample|top_k|philox)/.test(d.p.name)) continue;
    done.add(key);
    const warm = time((e) => { run1(e, glue); run1(e, d); }) - warm0;
    const a = time((e) => { fronts.flush(e); run1(e, glue); run1(e, d); }) - a0;
    const b = time((e) => { fronts.flush(e); fronts.pollute(e); run1(e, glue); run1(e, d); }) - b0;
    console.log(`${key} | ${seen.get(key)} | ${warm.toFixed(2)} | ${a.toFixed(2)} | ${b.toFixed(2)} | ${(b - a).toFixed(2)}`);
  }
  lib.release();
}

console.log(`device: ${dev.name} (${dev.backend}), ${new Date().toISOString().slice(0, 10)}`);
{
  // Every family compiled first, on as many threads as there are cores (or loaded from the disk cache), so that no
  // phase below times a compile and a fresh machine does not compile them one at a time on first use.
  const t0 = performance.now();
  let cached = 0, families = 0;
  await dev.kernels.warmup(undefined, {
    concurrency: Math.max(1, navigator.hardwareConcurrency),
    onProgress: (p) => { families = p.total; if (p.cached) cached++; },
  });
  console.log(`kernels: ${families} families ready in ${((performance.now() - t0) / 1000).toFixed(1)} s (${cached} already loaded)`);
}
// The emulator copies 4 MiB (a GiB would take it minutes); a GPU 1 GiB.
const copy = copyGbs(dev.backend === 'emu' ? 1 << 22 : 1 << 30);
console.log(`copy bandwidth (gather, f32 rows, read + written): ${copy.toPrecision(4)} GB/s${copyGbsArg !== null ? `; --copy-gbs ${copyGbsArg}` : ''}`);
for (const arch of ['qwen3_5_moe', 'gemma4'] as const) if (which === 'all' || which === arch) run(arch, copy);
