// mlx-native/models on GGUF checkpoints: tiny Qwen3.6 (qwen3_5_moe) and
// Gemma 4 (gemma4: MoE and keys-as-values layers; and with per-layer inputs,
// shared KV layers and double-wide MLPs) models written as
// llama.cpp's converter and quantizer write them (tests/model-checkpoints.ts
// ggufCheckpoint: GGUF names, Qwen3.6's norms as 1 + w, A_log as
// -exp(A_log), its value heads tiled, conv1d [C, 4]; linear layers and
// experts in Q4_0, Q8_0, Q4_K, Q5_K and Q6_K blocks, the embedding too),
// with the metadata llama.cpp's converter writes (llamaCppMetadata), loaded
// by loadModel from the .gguf file alone (the config read from its
// metadata), against the float64 references of tests/model-reference.ts
// run on the same models with every weight the value the GGUF file holds
// (dequantized, in Hugging Face's names and layouts): the logits of every
// prompt position and of 8 greedy decode steps, and the tokens. The config
// the metadata give equals config.json's, and a model loaded either way
// gives the same logits; config.json beside a GGUF file must agree with its
// metadata; absent optional keys take llama.cpp's defaults, MTP blocks are
// set aside. And the refusals of GGUF files loadModel does not run: another
// architecture, a block type the products do not read, metadata keys
// missing, of the wrong type or inconsistent.

import { afterAll, describe, expect, test } from 'bun:test';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Device } from '../ts/index.ts';
import { GgufFile, type GgufValue } from '../ts/weights/index.ts';
import {
  Checkpoint, ggufConfig, linear, loadModel, modelConfig, readConfigFile, routedExperts, Scratch, type ExpertWeights, type LoadOptions,
  type ProductPrecision, type RoutedExperts,
} from '../ts/models/index.ts';
import type { GateActivation } from '../ts/expert-products.ts';
import { geluTanhMul, geluTanhRef } from '../ts/ops/gelu.ts';
import { ggmlMatmulRef, ggmlQuantize, ggmlRowBytesOf, type GgmlQuantType } from '../ts/ops/quantized_matmul_ggml.ts';
import { gatedLinear, DEQUANT_MIN_ROWS, dequantTakes } from '../ts/models/blocks.ts';
import { quantizedMatmulIdGgml } from '../ts/ops/quantized_matmul_id_ggml.ts';
import { siluMul, siluRef } from '../ts/ops/silu_mul.ts';
import { describeBackends, dotErr, dotTolerance, expectInvalid, expectInvalidParts, maxRelErr, randomArray, rng, scaledErr, TOL } from './helpers.ts';
import { ggufCheckpoint, llamaCppMetadata, tinyConfig, writeTinyCheckpoint, type TinyArch } from './model-checkpoints.ts';
import { relL2 } from './model-fixtures.ts';
import { gemmaReference, qwenReference, type ReferenceRun } from './model-reference.ts';
import { ggufBytes } from './weights-writers.ts';

const PROMPT = [17, 301, 42, 9, 100, 200, 311, 7, 8, 450, 3, 77];
const STEPS = 8;
const ARCHS = ['qwen3_5_moe_gguf', 'gemma4_gguf', 'gemma4_e_gguf'] as const;

// Exact path on Metal's kernels (the emulator): the vector forms of the GGUF products dequantize each weight in f32
// and sum f32 products of the f32 inputs, the reference sums the same dequantized values in float64: what is left is
// f32 arithmetic, as for stored bf16 weights (tests/models.test.ts's EXACT_TOL and its reasons).
const EXACT_TOL = 1e-4;
// The default path (and CUDA, whose GGUF kernels take the weight and x in f16 in both forms): prompt products past
// 8 rows on the matrix forms (Metal stages the dequantized weight as f16, 2^-11 relative; CUDA rounds both operands
// to f16), attention and the chunked gated delta rule over bf16: tests/models.test.ts's DEFAULT_TOL over the
// rows whose routing in the reference is wider than ROUTING_GAP, and the tokens whose top-two gap is wider than
// TOKEN_GAP.
const DEFAULT_TOL = 3e-2;
const ROUTING_GAP = 0.05;
const TOKEN_GAP = 0.25;
// A model test's time limit: the first run of a path on a fresh cuda machine compiles (NVRTC) every family it uses
// (158 s on an H100 for the Qwen3.6 exact path beside another test file compiling, then 41 s for its default path).
const MODEL_TEST_MS = 300_000;

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

interface Written {
  /** The Hugging Face checkpoint the GGUF file was written from (config.json, model.safetensors). */
  hf: string;
  /** model.gguf with the config.json it was written from beside it. */
  gguf: string;
  /** The same model.gguf alone in its folder: the config comes from its metadata. */
  bare: string;
  types: Map<string, string>;
  ref: ReferenceRun;
}
const written = new Map<TinyArch, Written>();

function writtenOf(arch: TinyArch): Written {
  let w = written.get(arch);
  if (w === undefined) {
    const dir = mkdtempSync(join(tmpdir(), `mlxn-gguf-${arch}-`));
    dirs.push(dir);
    writeTinyCheckpoint(arch, arch === 'qwen3_5_moe_gguf' ? 31 : arch === 'gemma4_gguf' ? 32 : 33, join(dir, 'hf'));
    const types = ggufCheckpoint(join(dir, 'hf'), join(dir, 'gguf'), join(dir, 'deq'));
    const ref = arch === 'qwen3_5_moe_gguf' ? qwenReference(join(dir, 'deq'), PROMPT, STEPS) : gemmaReference(join(dir, 'deq'), PROMPT, STEPS);
    mkdirSync(join(dir, 'bare'));
    copyFileSync(join(dir, 'gguf', 'model.gguf'), join(dir, 'bare', 'model.gguf'));
    w = { hf: join(dir, 'hf'), gguf: join(dir, 'gguf'), bare: join(dir, 'bare'), types, ref };
    written.set(arch, w);
  }
  return w;
}

/** The largest relative L2 error of the prompt's and the decode steps' logits over the rows held (routing gap at least minGap), and the tokens. */
function runGguf(device: Device, arch: TinyArch, opts: LoadOptions, minGap: number): { err: number; rows: number; tokens: number[]; ref: ReferenceRun } {
  const byRow: string[] = [];
  const { bare, ref } = writtenOf(arch);
  using m = loadModel(join(bare, 'model.gguf'), device, { maxContext: 32, ...opts });
  const V = m.config.vocabSize;
  const tokens = [m.prefill(PROMPT, { allLogits: true })];
  const logits = m.logits.readNumbers();
  let err = 0, rows = 0;
  const held = (i: number) => ref.routingGaps[i]! >= minGap;
  PROMPT.forEach((_, p) => {
    if (!held(p)) return;
    rows++;
    const e = relL2(logits.subarray(p * V, (p + 1) * V), ref.prefill[p]!);
    byRow.push(`p${p} ${e.toExponential(1)}`);
    err = Math.max(err, e);
  });
  for (let i = 0; i < STEPS; i++) {
    tokens.push(m.decode());
    if (!held(PROMPT.length + i)) continue;
    rows++;
    const e = relL2(m.logits.readNumbers(), ref.decode[i]!);
    byRow.push(`d${i} ${e.toExponential(1)}`);
    err = Math.max(err, e);
  }
  // The error of each row held, on the log: where a bound is approached, whether prompt or decode rows carry it.
  console.log(`models-gguf ${arch} ${device.backend} ${opts.precision ?? 'fast'}: ${byRow.join(', ')}`);
  return { err, rows, tokens, ref };
}

/** Tokens that agree with the reference where its top-two logit gap is wider than `gap`. */
function clearTokens(ref: ReferenceRun, got: number[], gap: number): [number, number][] {
  const rows = [ref.prefill[PROMPT.length - 1]!, ...ref.decode];
  const out: [number, number][] = [];
  for (let i = 0; i < got.length; i++) {
    const sorted = [...rows[i]!].sort((a, b) => b - a);
    if (sorted[0]! - sorted[1]! > gap) out.push([got[i]!, ref.tokens[i]!]);
  }
  return out;
}

describe('GGUF checkpoints written like llama.cpp', () => {
  test('every GGUF block type the products read occurs (K formats, Q8_0 in each model), and the float tensors stay F32 / F16', () => {
    for (const arch of ARCHS) {
      const types = new Set(writtenOf(arch).types.values());
      for (const t of ['Q4_K', 'Q6_K', 'Q8_0', 'F32']) expect(types.has(t)).toBe(true);
    }
    const all = new Set(ARCHS.flatMap((a) => [...writtenOf(a).types.values()]));
    expect([...all].sort()).toEqual(['F16', 'F32', 'Q4_0', 'Q4_K', 'Q5_K', 'Q6_K', 'Q8_0']);
    const q = writtenOf('qwen3_5_moe_gguf').types;
    expect([q.get('token_embd.weight'), q.get('blk.0.attn_qkv.weight'), q.get('blk.0.ffn_gate_exps.weight'), q.get('blk.0.ffn_down_exps.weight')])
      .toEqual(['Q6_K', 'Q5_K', 'Q4_K', 'Q4_0']);
    const e = writtenOf('gemma4_e_gguf').types;
    expect([e.get('per_layer_token_embd.weight'), e.get('per_layer_model_proj.weight'), e.get('blk.0.inp_gate.weight'), e.get('blk.0.proj.weight')])
      .toEqual(['Q8_0', 'Q4_K', 'Q4_K', 'Q8_0']);
  }, 120_000);

  test('the config read from the metadata llama.cpp writes equals config.json\'s', () => {
    for (const arch of ARCHS) {
      const { hf, bare } = writtenOf(arch);
      const fromGguf = ggufConfig(GgufFile.open(join(bare, 'model.gguf')));
      expect(modelConfig(fromGguf)).toEqual(modelConfig(readConfigFile(hf)));
    }
    // What the metadata say, key by key (Gemma 4 with per-layer inputs, shared KV layers and double-wide MLPs).
    const e = ggufConfig(GgufFile.open(join(writtenOf('gemma4_e_gguf').bare, 'model.gguf')));
    expect(e).toMatchObject({
      model_type: 'gemma4_text', num_hidden_layers: 4, vocab_size: 512, hidden_size: 256, intermediate_size: 96, use_double_wide_mlp: true,
      num_kv_shared_layers: 2, hidden_size_per_layer_input: 32, head_dim: 256, global_head_dim: 512, attention_k_eq_v: false,
      sliding_window: 5, final_logit_softcapping: 30, rms_norm_eps: 1e-6, tie_word_embeddings: true, enable_moe_block: false,
      rope_parameters: {
        sliding_attention: { rope_type: 'default', rope_theta: 10_000 },
        full_attention: { rope_type: 'proportional', partial_rotary_factor: 0.25, rope_theta: 1_000_000 },
      },
    });
    const q = ggufConfig(GgufFile.open(join(writtenOf('qwen3_5_moe_gguf').bare, 'model.gguf')));
    expect(q).toMatchObject({
      model_type: 'qwen3_5_moe_text', vocab_size: 512, layer_types: ['linear_attention', 'full_attention', 'linear_attention', 'full_attention'],
      linear_num_key_heads: 2, linear_num_value_heads: 4, linear_key_head_dim: 64, linear_value_head_dim: 64,
      rope_parameters: { rope_type: 'default', rope_theta: 10_000_000, partial_rotary_factor: 0.25 }, tie_word_embeddings: false,
    });
  }, 120_000);
});

describe('GGUF metadata read as llama.cpp reads them', () => {
  /** The config of the metadata llamaCppMetadata writes for `arch`'s tiny config, edited; no tensors (the vocabulary from the tokens). */
  const configOf = (arch: TinyArch, edit: (m: Map<string, GgufValue>) => void): Record<string, unknown> => {
    const m = new Map(llamaCppMetadata(tinyConfig(arch)));
    if (!m.has('tokenizer.ggml.tokens')) m.set('tokenizer.ggml.tokens', { type: 'array', value: { itemType: 'string', items: Array.from({ length: 512 }, (_, i) => `t${i}`) } });
    edit(m);
    return ggufConfig(GgufFile.fromBytes(ggufBytes({ metadata: [...m.entries()] }, rng(4)).bytes));
  };
  const u32 = (value: number): GgufValue => ({ type: 'u32', value });

  test("MTP blocks past the model's layers, and llama.cpp's defaults where optional keys are absent", () => {
    // _Qwen35MtpMixin appends the MTP blocks to block_count and says how many in nextn_predict_layers.
    const mtp = configOf('qwen3_5_moe_gguf', (m) => {
      m.set('qwen35moe.block_count', u32(5));
      m.set('qwen35moe.nextn_predict_layers', u32(1));
    });
    expect([mtp['num_hidden_layers'], (mtp['layer_types'] as string[]).length]).toEqual([4, 4]);
    const q = configOf('qwen3_5_moe_gguf', (m) => {
      for (const key of ['attention.head_count_kv', 'attention.key_length', 'attention.value_length', 'rope.freq_base', 'rope.dimension_count', 'full_attention_interval']) {
        m.delete(`qwen35moe.${key}`);
      }
    });
    // head_count_kv = head_count, key_length = embedding_length / head_count, every pair rotated at theta 10000, a full layer in 4.
    expect(q).toMatchObject({
      num_key_value_heads: 2, head_dim: 128, rope_parameters: { rope_type: 'default', rope_theta: 10_000, partial_rotary_factor: 1 },
      layer_types: ['linear_attention', 'linear_attention', 'linear_attention', 'full_attention'], tie_word_embeddings: true,
    });
    const g = configOf('gemma4_gguf', (m) => {
      for (const key of ['final_logit_softcapping', 'expert_count', 'rope.freq_base_swa', 'attention.shared_kv_layers']) m.delete(`gemma4.${key}`);
    });
    // llama_hparams' final_logit_softcapping 30; no experts; the sliding rope at the full one's theta; no shared layers.
    expect(g).toMatchObject({
      final_logit_softcapping: 30, enable_moe_block: false, num_experts: null, num_kv_shared_layers: 0,
      rope_parameters: { sliding_attention: { rope_theta: 1_000_000 } },
    });
    expect(configOf('gemma4_gguf', (m) => m.set('gemma4.final_logit_softcapping', { type: 'f32', value: 0 }))['final_logit_softcapping']).toBeNull();
    // A vocabulary from A.vocab_size wins over the token list.
    expect(configOf('gemma4_gguf', (m) => m.set('gemma4.vocab_size', u32(600)))['vocab_size']).toBe(600);
  });

  test('refusals: a value head count that does not divide ssm.inner_size, a rope that is not the models\'', () => {
    expectInvalid(() => configOf('qwen3_5_moe_gguf', (m) => m.set('qwen35moe.ssm.inner_size', u32(250))), 'loadModel',
      'the GGUF key qwen35moe.ssm.inner_size', 'a multiple of qwen35moe.ssm.time_step_rank (4)', '250');
    expectInvalid(() => configOf('gemma4_gguf', (m) => m.set('gemma4.rope.dimension_count_swa', u32(128))), 'loadModel',
      'the GGUF key gemma4.rope.dimension_count_swa', 'key_length_swa (256)', '128');
    expectInvalid(() => configOf('qwen3_5_moe_gguf', (m) => m.set('qwen35moe.attention.value_length', u32(128))), 'loadModel',
      'the GGUF key qwen35moe.attention.value_length', 'qwen35moe.attention.key_length (256)', '128');
    expectInvalidParts(() => configOf('qwen3_5_moe_gguf', (m) => m.set('general.architecture', { type: 'string', value: 'qwen3next' })), 'loadModel',
      "the GGUF file's general.architecture (gguf <memory>) must be qwen35moe or gemma4 (got qwen3next)");
  });
});

/** `from`'s GGUF file rewritten to `out` with its metadata edited (tensors as they are). */
function rewriteGguf(from: string, out: string, edit: (m: Map<string, GgufValue>) => void): string {
  const src = GgufFile.open(from);
  const tensors = [...src.tensors.values()].map((t) => ({ name: t.name, type: t.dtype, dims: [...t.dims], data: src.bytes(t.name).slice() }));
  const metadata = new Map(src.metadata);
  edit(metadata);
  writeFileSync(out, ggufBytes({ metadata: [...metadata.entries()], tensors }, rng(3)).bytes);
  return out;
}

describeBackends('models on GGUF checkpoints against float64 references', ({ device, label }) => {
  if (label === 'emu-random') return;
  for (const arch of ARCHS) {
    test(`${arch}: prefill and ${STEPS} decode steps, exact products (the vector forms) and f32 prompt attention`, () => {
      const r = runGguf(device(), arch, { precision: 'exact', prefillAttention: 'vector' }, label === 'emu' ? 0 : ROUTING_GAP);
      if (label === 'emu') {
        expect(r.err).toBeLessThan(EXACT_TOL);
        expect(r.tokens).toEqual(r.ref.tokens);
      } else {
        expect(r.rows).toBeGreaterThanOrEqual(PROMPT.length);
        expect(r.err).toBeLessThan(DEFAULT_TOL);
        for (const [got, want] of clearTokens(r.ref, r.tokens, TOKEN_GAP)) expect(got).toBe(want);
      }
    }, MODEL_TEST_MS);
    test(`${arch}: prefill and ${STEPS} decode steps, the default (the matrix forms past 8 prompt rows, experts grouped by moe_dispatch_sort)`, () => {
      const r = runGguf(device(), arch, {}, ROUTING_GAP);
      expect(r.rows).toBeGreaterThanOrEqual(PROMPT.length);
      expect(r.err).toBeLessThan(DEFAULT_TOL);
      for (const [got, want] of clearTokens(r.ref, r.tokens, TOKEN_GAP)) expect(got).toBe(want);
    }, MODEL_TEST_MS);
  }

  // Decode steps recorded once and replayed (the default) against steps recorded afresh: the same tokens, and the same
  // logits (bit for bit on the emulator, whose replays run the same commands; within float noise elsewhere), through
  // a later prompt that keeps the recorded steps.
  for (const arch of ARCHS) {
    test(`${arch}: decode steps replayed and recorded afresh agree, across a later prompt`, () => {
      const run = (replay: boolean) => {
        using m = loadModel(join(writtenOf(arch).bare, 'model.gguf'), device(), { maxContext: 32, replay });
        const tokens = [m.prefill(PROMPT)];
        const logits: Float32Array[] = [];
        for (const prompt of [null, PROMPT.slice(0, 4)]) {
          if (prompt !== null) tokens.push(m.prefill(prompt));
          for (let i = 0; i < 3; i++) {
            tokens.push(m.decode());
            logits.push(m.logits.read() as Float32Array);
          }
        }
        return { tokens, logits };
      };
      const fresh = run(false), replayed = run(true);
      expect(replayed.tokens).toEqual(fresh.tokens);
      for (let i = 0; i < fresh.logits.length; i++) {
        if (label === 'emu') expect(Array.from(replayed.logits[i]!)).toEqual(Array.from(fresh.logits[i]!));
        else expect(relL2(replayed.logits[i]!, Float64Array.from(fresh.logits[i]!))).toBeLessThan(1e-5);
      }
    }, MODEL_TEST_MS);
  }
  test('refusals: a GGUF file of another architecture, a block type the products do not read, two GGUF files in a folder', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mlxn-gguf-refuse-'));
    dirs.push(dir);
    const cfg = JSON.stringify(tinyConfig('qwen3_5_moe_gguf'));
    // Another architecture: refused before its tensors are read.
    writeFileSync(join(dir, 'config.json'), cfg);
    writeFileSync(join(dir, 'llama.gguf'), ggufBytes({
      metadata: [['general.architecture', { type: 'string', value: 'llama' }]],
      tensors: [{ name: 'token_embd.weight', type: 'F32', dims: [256, 512] }],
    }, rng(1)).bytes);
    expectInvalidParts(() => loadModel(dir, device()), 'loadModel', "the GGUF file's general.architecture", 'must be qwen35moe', '(got llama)');
    // Two .gguf files: which one is meant is not guessed.
    writeFileSync(join(dir, 'other.gguf'), new Uint8Array(0));
    expectInvalidParts(() => loadModel(dir, device()), 'loadModel', 'the checkpoint folder', 'must be one .gguf file', '(got 2: ');
    // A tensor in a block type the products do not read (Q2_K): refused by name and type.
    const { gguf } = writtenOf('qwen3_5_moe_gguf');
    const src = GgufFile.open(join(gguf, 'model.gguf'));
    const tensors = [...src.tensors.values()].map((t) => (t.name === 'blk.0.attn_gate.weight'
      ? { name: t.name, type: 'Q2_K', dims: [...t.dims], data: new Uint8Array((t.elementCount / 256) * 84) }
      : { name: t.name, type: t.dtype, dims: [...t.dims], data: src.bytes(t.name).slice() }));
    const metadata = [...src.metadata.entries()];
    writeFileSync(join(dir, 'q2.gguf'), ggufBytes({ metadata, tensors }, rng(2)).bytes);
    expect(() => loadModel(join(dir, 'q2.gguf'), device())).toThrow(/blk\.0\.attn_gate\.weight must be F32, F16, BF16 or one of Q4_0, Q8_0, Q4_K, Q5_K, Q6_K \(got Q2_K\)/);
  }, 120_000);

  for (const arch of ARCHS) {
    test(`${arch}: loaded from its metadata and from config.json, the same logits (prefill and 2 decode steps)`, () => {
      const { gguf, bare } = writtenOf(arch);
      const run = (path: string) => {
        using m = loadModel(path, device(), { maxContext: 32, precision: 'exact', prefillAttention: 'vector' });
        m.prefill(PROMPT.slice(0, 6));
        const rows = [m.logits.readNumbers()];
        for (let i = 0; i < 2; i++) {
          m.decode();
          rows.push(m.logits.readNumbers());
        }
        return rows;
      };
      // config.json beside the file; the folder holding the file alone.
      const a = run(gguf), b = run(bare);
      // One config, one computation: the same numbers (bit for bit on the emulator; other backends may sum in another order).
      a.forEach((row, i) => (label === 'emu' ? expect(b[i]).toEqual(row) : expect(relL2(b[i]!, row)).toBeLessThan(1e-5)));
    }, MODEL_TEST_MS);
  }

  test('refusals of GGUF metadata: a required key missing, keys of the wrong type, config.json beside disagreeing', () => {
    const dir = mkdtempSync(join(tmpdir(), 'mlxn-gguf-meta-'));
    dirs.push(dir);
    const q = join(writtenOf('qwen3_5_moe_gguf').bare, 'model.gguf');
    const g = join(writtenOf('gemma4_gguf').bare, 'model.gguf');
    const each = (name: string) => {
      mkdirSync(join(dir, name));
      return join(dir, name, 'model.gguf');
    };
    // A key llama.cpp requires, absent.
    const noWidth = rewriteGguf(q, each('no-width'), (m) => m.delete('qwen35moe.embedding_length'));
    expectInvalid(() => loadModel(noWidth, device()), 'loadModel', 'the GGUF key qwen35moe.embedding_length', 'an unsigned integer (u32)', 'absent');
    const noPattern = rewriteGguf(g, each('no-pattern'), (m) => m.delete('gemma4.attention.sliding_window_pattern'));
    expectInvalid(() => loadModel(noPattern, device()), 'loadModel', 'the GGUF key gemma4.attention.sliding_window_pattern', 'an array of 4 booleans', 'absent');
    // Keys of the wrong type: a count as a string, a float as an integer, a per-layer list one item short.
    const strCount = rewriteGguf(g, each('str-count'), (m) => m.set('gemma4.block_count', { type: 'string', value: '4' }));
    expectInvalid(() => loadModel(strCount, device()), 'loadModel', 'the GGUF key gemma4.block_count', 'an unsigned integer (u32)', 'a string');
    const intEps = rewriteGguf(q, each('int-eps'), (m) => m.set('qwen35moe.attention.layer_norm_rms_epsilon', { type: 'u32', value: 0 }));
    expectInvalid(() => loadModel(intEps, device()), 'loadModel', 'the GGUF key qwen35moe.attention.layer_norm_rms_epsilon', 'a float (f32)', 'a u32');
    const shortKv = rewriteGguf(g, each('short-kv'), (m) => m.set('gemma4.attention.head_count_kv', { type: 'array', value: { itemType: 'i32', items: Int32Array.of(1, 1, 1) } }));
    expectInvalid(() => loadModel(shortKv, device()), 'loadModel', 'the GGUF key gemma4.attention.head_count_kv', 'an array of 4 integers', 'an array of 3 i32');
    // config.json beside the file wins, but must agree with what the metadata say: both values are named.
    rewriteGguf(g, each('window'), (m) => m.set('gemma4.attention.sliding_window', { type: 'u32', value: 7 }));
    writeFileSync(join(dir, 'window', 'config.json'), JSON.stringify(tinyConfig('gemma4_gguf')));
    expectInvalidParts(() => loadModel(join(dir, 'window'), device()), 'loadModel', 'gemma4.attention.sliding_window',
      'must be what config.json says: slidingWindow = 5', '(got slidingWindow = 7)');
  }, 120_000);

  test('GGUF layers stored alike share one product; row views start at whole rows of blocks, 16-byte aligned', () => {
    const { gguf } = writtenOf('qwen3_5_moe_gguf');
    const src = GgufFile.open(join(gguf, 'model.gguf'));
    const ck = new Checkpoint(src, device(), 'stored', null);
    try {
      const ref = (name: string) => ({ name, dtype: null, shape: null, transforms: [] });
      // ssm_alpha and ssm_beta (Q8_0, 4 rows each) share one Linear; attn_gate (Q4_K) has its own.
      const p = ck.projection([[{ ref: ref('blk.0.attn_gate.weight') }], [{ ref: ref('blk.0.ssm_alpha.weight') }], [{ ref: ref('blk.0.ssm_beta.weight') }]]);
      expect(p.groups.map((g) => g.members)).toEqual([[0], [1, 2]]);
      const [gate, alpha, beta] = p.layers;
      expect([gate!.kind, alpha!.kind, beta!.kind]).toEqual(['ggml', 'ggml', 'ggml']);
      if (beta?.kind !== 'ggml') throw new Error('beta must be a GGUF Linear');
      expect([beta.ggmlType, beta.n, beta.k]).toEqual(['Q8_0', 4, 256]);
      // beta's rows start 8 rows (PROJECTION_ROWS) into the group's: 8 * 272 bytes.
      expect(beta.weight.byteOffset - p.groups[1]!.linear.weight.byteOffset).toBe(8 * 272);
      const q = ggmlQuantize('Q8_0', new Float32Array(256).fill(0.5), 1, 256);
      expect(beta.weight.shape).toEqual([4, q.byteLength]);
    } finally {
      ck.release();
    }
  }, 120_000);
});

describeBackends('GGUF linear layers', ({ device }) => {
  // Past 8 rows the matrix form; on cuda from DEQUANT_MIN_ROWS rows (given a scratch) the weight dequantized to
  // f16, then the dense family's tensor tiles (2 dispatches). Either way the float64 reference of the GGUF weight at
  // f16's tolerance (both round the weight and x to f16), rows and columns off every tile, a NaN-poisoned output; one
  // scratch throughout, the largest weight first (the later weights dequantized into part of its buffer).
  test('the matrix form, and from DEQUANT_MIN_ROWS rows on cuda dequantize + dense: the reference', () => {
    const d = device(), r = rng(47);
    using s = new Scratch(d);
    const cases: [GgmlQuantType, number, number, number][] = [['Q4_K', 130, 72, 512], ['Q6_K', 129, 40, 256], ['Q8_0', 200, 33, 96], ['Q4_K', 40, 72, 512]];
    for (const [type, m, n, k] of cases) {
      const q = ggmlQuantize(type, randomArray(r, n * k, -1, 1), n, k);
      const xv = Float32Array.from(randomArray(r, m * k, -1, 1));
      using w = d.upload('u8', [q.length], q);
      using x = d.upload('f32', [m, k], xv);
      using y = d.alloc('f32', [m, n]);
      y.fill(Number.NaN);
      using enc = d.encoder();
      linear(enc, { kind: 'ggml', weight: w, ggmlType: type, n, k }, x, y, m, 'fast', s);
      expect(enc.dispatchCount).toBe(dequantTakes(m, n, k, d.limits) ? 2 : 1);
      enc.commitAndWait();
      const want = ggmlMatmulRef(type, xv, q, m, n, k);
      expect(dotErr(y.readNumbers(), want.y, want.abs)).toBeLessThanOrEqual(dotTolerance('f16', k));
    }
    const cuda = { computeCapability: 90 };
    expect([DEQUANT_MIN_ROWS - 1, DEQUANT_MIN_ROWS].map((m) => dequantTakes(m, 2048, 2048, cuda))).toEqual([false, true]);
    // Not a prompt's logits over a large vocabulary (a 1 GB f16 weight), nor off cuda.
    expect(dequantTakes(4096, 248320, 2048, cuda)).toBe(false);
    expect(dequantTakes(4096, 2048, 2048, { computeCapability: 0 })).toBe(false);
  });
});

describeBackends('routed GGUF experts', ({ device }) => {
  // Decode and 'exact' prompts take the fused gate/up vector product where gate and up share a block type (routing,
  // gate/up, down: 3 dispatches), else the two products and the activation (5); 'fast' prompts past 8 tokens the matrix
  // forms over moe_dispatch_sort: the fused gate/up matrix product where the types agree (routing, sort, gate/up, down:
  // 4), else the two products and the activation (6). The values: the unfused vector composition written out here, on
  // the same ids (Metal's vector kernels sum the same f32 products in the same order, fused or not; CUDA's activation
  // may differ from silu_mul's / gelu_tanh_mul's by an ulp, which the down product carries, and the matrix forms stage
  // the weights and x as f16: f16's tolerance there).
  test('the fused gate/up products at decode and at prompts, the unfused forms across block types; the values of the composition', () => {
    const d = device(), r = rng(43);
    const E = 6, H = 256, I = 64, topK = 2;
    const experts = (type: GgmlQuantType, n: number, k: number): Extract<ExpertWeights, { kind: 'ggml' }> => {
      const q = ggmlQuantize(type, randomArray(r, E * n * k, -1, 1), E * n, k);
      return { kind: 'ggml', weight: d.upload('u8', [q.length], q), expertRows: n, ggmlType: type, rowBytes: ggmlRowBytesOf(type, k) };
    };
    const gate = experts('Q4_K', I, H), upK = experts('Q4_K', I, H), up5 = experts('Q5_K', I, H), down = experts('Q4_0', H, I);
    using perExpertScale = d.upload('f32', [E], Array<number>(E).fill(1));
    const cases: [tokens: number, precision: ProductPrecision, up: typeof upK, act: GateActivation, dispatches: number][] = [
      [1, 'fast', upK, 'silu', 3], [3, 'exact', upK, 'gelu_tanh', 3], [12, 'exact', upK, 'silu', 3],
      [1, 'fast', up5, 'gelu_tanh', 5], [12, 'fast', upK, 'silu', 4], [12, 'fast', upK, 'gelu_tanh', 4], [12, 'fast', up5, 'silu', 6],
    ];
    for (const [tokens, precision, up, act, dispatches] of cases) {
      const ex: RoutedExperts = { gate, up, down, numExperts: E, sharedSlot: false, intermediate: I, hidden: H, act, dtype: 'f32', perExpertScale };
      using s = new Scratch(d);
      using x = d.upload('f32', [tokens, H], randomArray(r, tokens * H, -1, 1));
      using logits = d.upload('f32', [tokens, E], randomArray(r, tokens * E, -2, 2));
      using enc = d.encoder();
      const before = enc.dispatchCount;
      const { outputs } = routedExperts(enc, s, ex, x, logits, tokens, topK, precision);
      expect(enc.dispatchCount - before).toBe(dispatches);
      const matrix = precision === 'fast' && tokens > 8;
      const pairs = tokens * topK;
      const ids = s.get('moe.ids', 'u32', [tokens, topK]);
      const [g, u, h, y] = ['g', 'u', 'h', 'y'].map((n) => s.get(`want.${n}`, 'f32', [pairs, n === 'y' ? H : I]));
      const sizes = (w: typeof gate, n: number, k: number) => ({ weight: w.weight, n, k, nExperts: E, ggmlType: w.ggmlType });
      quantizedMatmulIdGgml(enc, { input: x, output: g!, nTokens: tokens, topK, ids, ...sizes(gate, I, H) });
      quantizedMatmulIdGgml(enc, { input: x, output: u!, nTokens: tokens, topK, ids, ...sizes(up, I, H) });
      (act === 'silu' ? siluMul : geluTanhMul)(enc, { gate: g!, up: u!, output: h! });
      quantizedMatmulIdGgml(enc, { input: h!, output: y!, nTokens: pairs, topK: 1, ids: ids.view('u32', [pairs, 1], 0), ...sizes(down, H, I) });
      enc.commitAndWait();
      // The matrix forms: f16 staging's error is of the sums' terms, not of outputs that cancel far below them. On cuda
      // both compositions stage x, the weights and h in f16 (each product's numerics are checked against float64 in
      // tests/quantized_matmul_id_ggml.test.ts): bf16's tolerance between the two, which a wrong operand or activation
      // exceeds many times over.
      const err = matrix ? scaledErr(outputs.readNumbers(), y!.readNumbers()) : maxRelErr(outputs.readNumbers(), y!.readNumbers());
      expect(err).toBeLessThanOrEqual(matrix ? (d.backend === 'cuda' ? TOL.bf16 : TOL.f16) : d.backend === 'cuda' ? TOL.f16 : TOL.f32);
    }
    // The last of the E stacked experts as a shared slot: E - 1 routed, one token runs topK + 1 slots (3 dispatches),
    // the composition on the same ids.
    for (const [up, act, dispatches] of [[upK, 'silu', 3], [up5, 'gelu_tanh', 5]] as const) {
      using routedScale = d.upload('f32', [E - 1], Array<number>(E - 1).fill(1));
      const ex: RoutedExperts = { gate, up, down, numExperts: E - 1, sharedSlot: true, intermediate: I, hidden: H, act, dtype: 'f32', perExpertScale: routedScale };
      const slots = topK + 1;
      using s = new Scratch(d);
      using x = d.upload('f32', [1, H], randomArray(r, H, -1, 1));
      using logits = d.upload('f32', [1, E - 1], randomArray(r, E - 1, -2, 2));
      using ids = d.upload('u32', [1, slots], [0xffffffff, 0xffffffff, E - 1]);
      using enc = d.encoder();
      const { outputs } = routedExperts(enc, s, ex, x, logits, 1, topK, 'fast', ids);
      expect(enc.dispatchCount).toBe(dispatches);
      expect(outputs.shape).toEqual([1, slots, H]);
      const [g, u, h, y] = ['g', 'u', 'h', 'y'].map((n) => s.get(`want.${n}`, 'f32', [slots, n === 'y' ? H : I]));
      const sizes = (w: typeof gate, n: number, k: number) => ({ weight: w.weight, n, k, nExperts: E, ggmlType: w.ggmlType });
      quantizedMatmulIdGgml(enc, { input: x, output: g!, nTokens: 1, topK: slots, ids, ...sizes(gate, I, H) });
      quantizedMatmulIdGgml(enc, { input: x, output: u!, nTokens: 1, topK: slots, ids, ...sizes(up, I, H) });
      (act === 'silu' ? siluMul : geluTanhMul)(enc, { gate: g!, up: u!, output: h! });
      quantizedMatmulIdGgml(enc, { input: h!, output: y!, nTokens: slots, topK: 1, ids: ids.view('u32', [slots, 1], 0), ...sizes(down, H, I) });
      enc.commitAndWait();
      expect(ids.readNumbers()[topK]).toBe(E - 1);
      expect(maxRelErr(outputs.readNumbers(), y!.readNumbers())).toBeLessThanOrEqual(d.backend === 'cuda' ? TOL.f16 : TOL.f32);
    }
    for (const w of [gate, upK, up5, down]) w.weight.release();
  });
});

describeBackends('GGUF gated MLP (gatedLinear)', ({ device }) => {
  // An MLP's stacked gate/up rows: up to 8 rows of x, one dispatch (the per-expert fused gate/up product over one
  // expert, ids 0); past 8 rows, linear's product and the activation over its halves (2). The values against the
  // float64 reference act(g) u of the dequantized weight, each output's error over its first-order bound
  // |act'(g) u| sum|gate terms| + |act(g)| sum|up terms| (dotErr's measure through the activation), under the
  // products' tolerance (f16's: the GGUF kernels may round x and the weight to f16, as 'GGUF linear layers' says);
  // a NaN-poisoned output.
  test('one dispatch at decode; the float64 reference through the activation', () => {
    const d = device(), r = rng(53);
    using zeroIds = d.upload('u32', [8], Array<number>(8).fill(0));
    using s = new Scratch(d);
    const cases: [GgmlQuantType, number, number, number, GateActivation][] = [
      ['Q4_K', 1, 96, 512, 'gelu_tanh'], ['Q8_0', 3, 40, 96, 'silu'], ['Q6_K', 8, 64, 256, 'gelu_tanh'], ['Q4_K', 12, 48, 256, 'silu'],
    ];
    for (const [type, m, n, k, act] of cases) {
      const q = ggmlQuantize(type, randomArray(r, 2 * n * k, -1, 1), 2 * n, k);
      using w = d.upload('u8', [2 * n, ggmlRowBytesOf(type, k)], q);
      const xv = Float32Array.from(randomArray(r, m * k, -1, 1));
      using x = d.upload('f32', [m, k], xv);
      using gu = d.alloc('f32', [m, 2 * n]);
      using y = d.alloc('f32', [m, n]);
      y.fill(Number.NaN);
      using enc = d.encoder();
      gatedLinear(enc, { kind: 'ggml', weight: w, ggmlType: type, n: 2 * n, k }, x, gu, y, m, act, zeroIds, 'fast', s);
      expect(enc.dispatchCount).toBe(m <= 8 ? 1 : 2);
      enc.commitAndWait();
      const ref = ggmlMatmulRef(type, xv, q, m, 2 * n, k);
      const f = act === 'silu' ? siluRef : geluTanhRef;
      const want = new Float64Array(m * n), bound = new Float64Array(m * n);
      for (let i = 0; i < m; i++) {
        for (let j = 0; j < n; j++) {
          const g = ref.y[i * 2 * n + j]!, u = ref.y[i * 2 * n + n + j]!;
          const slope = (f(g + 1e-6) - f(g - 1e-6)) / 2e-6;
          want[i * n + j] = f(g) * u;
          bound[i * n + j] = Math.abs(slope * u) * ref.abs[i * 2 * n + j]! + Math.abs(f(g)) * ref.abs[i * 2 * n + n + j]!;
        }
      }
      if (process.env.MLXN_PRINT_ERRORS) console.log(`gatedLinear ${type} [${m}, ${n}, ${k}] ${act}: ${dotErr(y.readNumbers(), want, bound)}`);
      expect(dotErr(y.readNumbers(), want, bound)).toBeLessThanOrEqual(dotTolerance('f16', k));
    }
    using w3 = d.upload('u8', [3, ggmlRowBytesOf('Q8_0', 32)], new Uint8Array(3 * ggmlRowBytesOf('Q8_0', 32)));
    using x1 = d.upload('f32', [1, 32], randomArray(r, 32, -1, 1));
    using enc = d.encoder();
    expectInvalid(() => gatedLinear(enc, { kind: 'ggml', weight: w3, ggmlType: 'Q8_0', n: 3, k: 32 }, x1, x1, x1, 1, 'silu', zeroIds),
      'gatedLinear', 'lin.n', 'an even number of rows (gate, then up)', '3');
  });
});

