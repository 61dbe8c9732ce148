// mlx-native/models: the config readers (transformers' defaults, derived
// per-layer facts, refusals), the load-time rotary permutation, the pieces
// of blocks.ts against float64 host references, and both whole models
// (Qwen3.6's qwen3_5_moe, Gemma 4 with its MoE and keys-as-values layers,
// and Gemma 4 with per-layer inputs and shared KV layers): against
// transformers' own float32 logits (tests/fixtures/models/, written by
// scripts/model_fixtures.py on the GPU machine with transformers 5.17), and
// against the float64 references of tests/model-reference.ts (written from
// transformers' modeling files) on other tiny random checkpoints (quantized
// ones too): the logits of every prompt position and of 8 greedy decode
// steps, and the tokens.

import { describe, expect, test } from 'bun:test';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Device, type Pipeline } from '../ts/index.ts';
import { fromBf16, toBf16 } from '../ts/index.ts';
import { Encoder as EncoderClass } from '../ts/encoder.ts';
import {
  Checkpoint, PROJECTION_ROWS, Scratch, gemma4Config, linear, loadModel, project, qwen35MoeConfig, rotaryPermutation, routedExperts,
  type CausalLM, type ExpertWeights, type Gemma4Config, type LoadOptions, type Qwen35MoeConfig, type RoutedExperts,
} from '../ts/models/index.ts';
import { SafetensorsFile, type TensorRef } from '../ts/weights/index.ts';
import { safetensorsBytes } from './weights-writers.ts';
import { affineDequantize, affineQuantize, affineQuantizedMatmulRef, affineWords } from '../ts/ops/quantized_matmul.ts';
import { dequantTakes } from '../ts/models/blocks.ts';
import {
  describeBackends, describeValidation, dotErr, dotTolerance, expectInvalid, expectInvalidParts, maxRelErr, randomArray, rng, roundedTo, TOL,
} from './helpers.ts';
import { quantizeCheckpoint, relayoutCheckpoint, tinyConfig, writeTinyCheckpoint, type Relayout, type TinyArch } from './model-checkpoints.ts';
import { modelFixture, modelFixtureNames, relL2, type ModelFixture } from './model-fixtures.ts';
import { gemmaReference, qwenReference, type ReferenceRun } from './model-reference.ts';

const PROMPT = [17, 301, 42, 9, 100, 200, 311, 7, 8, 450, 3, 77];
const STEPS = 8;


describe('model configs', () => {
  test('Qwen3.6: the tiny config and derived sizes; partial rotary from rope_parameters', () => {
    const c = qwen35MoeConfig(tinyConfig('qwen3_5_moe'));
    expect([c.vocabSize, c.hiddenSize, c.numLayers, c.headDim, c.rotaryDim, c.ropeTheta]).toEqual([512, 64, 4, 256, 64, 1e7]);
    expect(c.layerTypes).toEqual(['linear_attention', 'full_attention', 'linear_attention', 'full_attention']);
    expect([c.linearNumKeyHeads, c.linearNumValueHeads, c.linearKeyHeadDim, c.linearValueHeadDim, c.convKernel]).toEqual([1, 2, 64, 64, 4]);
    expect([c.numExperts, c.numExpertsPerTok, c.moeIntermediateSize, c.sharedExpertIntermediateSize]).toEqual([8, 2, 32, 48]);
  });
  test("Qwen3.6: absent fields take Qwen3_5MoeTextConfig's defaults; text_config of a multimodal config is read", () => {
    const c = qwen35MoeConfig({ model_type: 'qwen3_5_moe', text_config: { rope_parameters: { rope_type: 'default', rope_theta: 1e7, partial_rotary_factor: 0.25 } } });
    expect([c.vocabSize, c.hiddenSize, c.numLayers, c.numHeads, c.numKvHeads, c.headDim, c.rotaryDim]).toEqual([248_320, 2048, 40, 16, 2, 256, 64]);
    expect(c.layerTypes.slice(0, 4)).toEqual(['linear_attention', 'linear_attention', 'linear_attention', 'full_attention']);
    expect([c.linearNumKeyHeads, c.linearNumValueHeads, c.numExperts, c.numExpertsPerTok, c.tieWordEmbeddings]).toEqual([16, 32, 256, 8, false]);
  });
  test('Gemma 4: per-layer head dims, KV heads, keys as values, rope; shared layers read the last layer of their kind', () => {
    const g = gemma4Config(tinyConfig('gemma4'));
    expect(g.layers.map((l) => [l.type, l.headDim, l.numKvHeads, l.kEqV, l.kvSource, l.halfRopeDim, l.ropeTheta])).toEqual([
      ['sliding_attention', 256, 1, false, 0, 128, 1e4], ['full_attention', 512, 1, true, 1, 64, 1e6],
      ['sliding_attention', 256, 1, false, 2, 128, 1e4], ['full_attention', 512, 1, true, 3, 64, 1e6],
    ]);
    expect([g.slidingWindow, g.finalLogitSoftcap, g.perLayerInputSize, g.moe]).toEqual([5, 30, 0, { numExperts: 8, topK: 2, intermediateSize: 32 }]);
    const e = gemma4Config(tinyConfig('gemma4_e'));
    expect(e.layers.map((l) => [l.kvSource, l.intermediateSize])).toEqual([[0, 96], [1, 96], [0, 192], [1, 192]]);
    expect([e.perLayerInputSize, e.perLayerVocabSize, e.moe]).toEqual([16, 512, null]);
  });
  test("Gemma 4: absent fields take Gemma4TextConfig's defaults (the 5:1 pattern, the last layer global, proportional rope)", () => {
    const g = gemma4Config({ model_type: 'gemma4_text', num_hidden_layers: 8 });
    expect(g.layers.map((l) => l.type[0])).toEqual(['s', 's', 's', 's', 's', 'f', 's', 'f']);
    expect(g.layers[5]!).toMatchObject({ headDim: 512, numKvHeads: 4, halfRopeDim: 64, ropeTheta: 1e6 });
    expect([g.hiddenSize, g.slidingWindow, g.perLayerInputSize, g.tieWordEmbeddings]).toEqual([2304, 512, 256, true]);
  });
  test('refusals name the field, the expectation and the value', () => {
    expectInvalid(() => qwen35MoeConfig({ ...tinyConfig('qwen3_5_moe'), layer_types: ['linear_attention'] }), 'model config', 'layer_types', 'an array of 4 layer types', '[');
    expectInvalid(() => qwen35MoeConfig({ ...tinyConfig('qwen3_5_moe'), layer_types: ['linear_attention', 'full_attention', 'mamba', 'full_attention'] }),
      'model config', 'layer_types[2]', 'one of linear_attention, full_attention', 'mamba');
    expectInvalid(() => qwen35MoeConfig({ ...tinyConfig('qwen3_5_moe'), hidden_act: 'gelu' }), 'model config', 'hidden_act', "'silu'", 'gelu');
    expectInvalid(() => qwen35MoeConfig({ ...tinyConfig('qwen3_5_moe'), rope_parameters: { rope_type: 'yarn', rope_theta: 1e7 } }),
      'model config', 'rope_parameters.rope_type', "'default'", 'yarn');
    expectInvalid(() => qwen35MoeConfig({ ...tinyConfig('qwen3_5_moe'), num_experts_per_tok: 9 }), 'model config', 'num_experts_per_tok', 'at most num_experts (8)', '9');
    expectInvalid(() => gemma4Config({ ...tinyConfig('gemma4'), use_bidirectional_attention: 'all' }), 'model config', 'use_bidirectional_attention', 'text is causal', 'all');
    expectInvalid(() => gemma4Config({ ...tinyConfig('gemma4'), num_kv_shared_layers: 3 }),
      'model config', 'num_kv_shared_layers', 'a count leaving a full_attention layer before the shared ones', '3');
    expectInvalid(() => gemma4Config({ ...tinyConfig('gemma4'), final_logit_softcapping: -1 }), 'model config', 'final_logit_softcapping', 'a number > 0 or null', '-1');
  });
});

describe('rotaryPermutation', () => {
  test("Hugging Face's pairs (i, i + r/2) in the first r elements land on the kernels' pairs (i, i + D/2); the rest keep their order", () => {
    expect(rotaryPermutation(8, 4)).toEqual([0, 1, 4, 5, 2, 3, 6, 7]);
    const p = rotaryPermutation(256, 64);
    expect([...p].sort((a, b) => a - b)).toEqual(Array.from({ length: 256 }, (_, i) => i));
    for (let i = 0; i < 32; i++) expect([p[i], p[i + 128]]).toEqual([i, i + 32]);
    expect(rotaryPermutation(64, 64)).toEqual(Array.from({ length: 64 }, (_, i) => i));
  });
});

/** Top-k renormalized softmax weights, dense [tokens, E] (ties to the lower index). */
function routingRef(logits: Float64Array, tokens: number, experts: number, k: number): Float64Array {
  const out = new Float64Array(tokens * experts);
  for (let t = 0; t < tokens; t++) {
    const row = logits.subarray(t * experts, (t + 1) * experts);
    const top = [...row.keys()].sort((a, b) => row[b]! - row[a]! || a - b).slice(0, k);
    const m = Math.max(...top.map((e) => row[e]!));
    const s = top.reduce((acc, e) => acc + Math.exp(row[e]! - m), 0);
    for (const e of top) out[t * experts + e] = Math.exp(row[e]! - m) / s;
  }
  return out;
}

describeBackends('model blocks', ({ device }) => {
  // Each token's top k experts alone, through the per-expert products: the weighted sum of the pairs' outputs
  // against float64 over the same values (the 16-bit forms round x to the experts' dtype once, as the block does).
  // shared: the stacks hold one expert more (a shared expert, sharedSlot), run at one token as slot k through
  // sharedIds; its unweighted output is checked as well. A prompt with such stacks runs the routed experts alone.
  test('routedExperts: each token\'s top-k experts, dense f32 / bf16 and 4- and 8-bit affine, vector and grouped matrix forms, a shared slot', () => {
    const d = device(), r = rng(13);
    type Case = readonly [tokens: number, E: number, I: number, H: number, k: number, act: 'silu' | 'gelu_tanh', kind: 'f32' | 'bf16' | 'q4' | 'q8', fast: boolean, shared?: boolean];
    const cases: Case[] = [
      [1, 4, 8, 16, 2, 'silu', 'f32', false], [5, 8, 16, 32, 8, 'gelu_tanh', 'f32', true],
      [3, 8, 16, 32, 2, 'gelu_tanh', 'bf16', true], [12, 8, 32, 64, 2, 'silu', 'bf16', true],
      [1, 8, 32, 64, 2, 'silu', 'q4', true], [12, 16, 32, 64, 3, 'gelu_tanh', 'q8', true],
      [1, 4, 8, 16, 2, 'silu', 'f32', false, true], [1, 8, 16, 32, 8, 'silu', 'bf16', true, true],
      [1, 8, 32, 64, 2, 'silu', 'q4', true, true], [1, 16, 32, 64, 3, 'gelu_tanh', 'q8', false, true],
      [12, 8, 32, 64, 2, 'silu', 'q4', true, true], [3, 8, 16, 32, 2, 'gelu_tanh', 'f32', true, true],
    ];
    for (const [tokens, E, I, H, k, act, kind, fast, shared = false] of cases) {
      const slot = shared && tokens === 1;
      const nE = E + (shared ? 1 : 0), slots = k + (slot ? 1 : 0);
      const logits = randomArray(r, tokens * E, -3, 3);
      const x = randomArray(r, tokens * H, -1, 1);
      const scale = randomArray(r, E, 0.5, 1.5);
      using s = new Scratch(d);
      const owned: { release(): void }[] = [];
      const up = <T extends { release(): void }>(b: T): T => { owned.push(b); return b; };
      // Host values of each projection [E * n, k] as the device sees them, and the device form.
      const project = (n: number, kk: number): { values: Float64Array; w: ExpertWeights } => {
        const raw = randomArray(r, nE * n * kk, -0.5, 0.5);
        if (kind === 'f32' || kind === 'bf16') {
          const b = up(d.upload(kind, [nE * n, kk], raw));
          return { values: Float64Array.from(b.readNumbers()), w: { kind: 'dense', weight: b, expertRows: n } };
        }
        const bits = kind === 'q4' ? 4 : 8, g = 32;
        const q = affineQuantize(raw, nE * n, kk, g, bits, 'bf16');
        const weight = up(d.upload('u32', [nE * n, (kk * bits) / 32], affineWords(q.packed)));
        const scales = up(d.upload('bf16', [nE * n, kk / g], fromBf16(toBf16(q.scales))));
        const biases = up(d.upload('bf16', [nE * n, kk / g], fromBf16(toBf16(q.biases))));
        const values = affineDequantize(q.packed, scales.readNumbers(), biases.readNumbers(), nE * n, kk, g, bits);
        return { values, w: { kind: 'affine', weight, scales, biases, expertRows: n, groupSize: g, bits } };
      };
      const gate = project(I, H), upP = project(I, H), down = project(H, I);
      const dtype = kind === 'f32' ? 'f32' : 'bf16';
      const ex: RoutedExperts = {
        gate: gate.w, up: upP.w, down: down.w, numExperts: E, sharedSlot: shared, intermediate: I, hidden: H, act, dtype,
        perExpertScale: up(d.upload('f32', [E], scale)),
      };
      using xb = d.upload('f32', [tokens, H], x);
      using lb = d.upload('f32', [tokens, E], logits);
      s.get(`moe.out.${dtype}`, dtype, [tokens, slots, H]).fill(Number.NaN);
      // The shared slot's ids: poisoned where the routing writes, E after.
      const sharedIds = slot ? up(d.upload('u32', [1, k + 1], Array.from({ length: k + 1 }, (_, i) => (i === k ? E : 0xffffffff)))) : undefined;
      using enc = d.encoder();
      const out = routedExperts(enc, s, ex, xb, lb, tokens, k, fast ? 'fast' : 'exact', sharedIds);
      enc.commitAndWait();
      const ys = out.outputs.readNumbers(), ws = out.weights.readNumbers();
      expect(out.outputs.shape).toEqual([tokens, slots, H]);
      const got = new Float64Array(tokens * H);
      for (let t = 0; t < tokens; t++) for (let j = 0; j < k; j++) for (let h = 0; h < H; h++) got[t * H + h]! += ws[t * k + j]! * ys[(t * slots + j) * H + h]!;
      const routing = routingRef(Float64Array.from(logits, Math.fround), tokens, E, k);
      const xr = dtype === 'bf16' ? fromBf16(toBf16(Float32Array.from(x))) : Float32Array.from(x);
      const f = act === 'silu' ? (z: number) => z / (1 + Math.exp(-z)) : (z: number) => 0.5 * z * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (z + 0.044715 * z ** 3)));
      // Expert e's output for token t, unweighted.
      const expertOut = (t: number, e: number): Float64Array => {
        const a = Array.from({ length: I }, (_, i) => {
          let gs = 0, us = 0;
          for (let j = 0; j < H; j++) {
            gs += gate.values[(e * I + i) * H + j]! * xr[t * H + j]!;
            us += upP.values[(e * I + i) * H + j]! * xr[t * H + j]!;
          }
          return f(gs) * us;
        });
        return Float64Array.from({ length: H }, (_, h) => {
          let sum = 0;
          for (let i = 0; i < I; i++) sum += down.values[(e * H + h) * I + i]! * a[i]!;
          return sum;
        });
      };
      const want = new Float64Array(tokens * H);
      for (let t = 0; t < tokens; t++) {
        for (let e = 0; e < E; e++) {
          const rw = routing[t * E + e]! * Math.fround(scale[e]!);
          if (rw === 0) continue;
          const y = expertOut(t, e);
          for (let h = 0; h < H; h++) want[t * H + h]! += rw * y[h]!;
        }
      }
      // f32: sums of f32 products in another order, TOL.f32. bf16: the activations and the outputs are stored in
      // bf16 (2^-9 each), TOL.bf16. Routing weights: the kernel's softmax in f32 (TOL.f32 of the reference's).
      const tol = dtype === 'f32' ? TOL.f32 : TOL.bf16;
      for (let i = 0; i < tokens * k; i++) expect(Number.isFinite(ws[i]!)).toBe(true);
      expect(relL2(got, want)).toBeLessThan(tol);
      if (slot) expect(relL2(Float64Array.from(ys.slice(k * H, (k + 1) * H)), expertOut(0, E))).toBeLessThan(tol);
      for (const b of owned) b.release();
    }
  });
});

/** Where each model's checkpoint lives during the suite. */
const folders = new Map<TinyArch, string>();
function folderOf(arch: TinyArch): string {
  let f = folders.get(arch);
  if (f === undefined) {
    f = writeTinyCheckpoint(arch, arch === 'qwen3_5_moe' ? 21 : arch === 'gemma4' ? 22 : 23);
    folders.set(arch, f);
  }
  return f;
}
const references = new Map<TinyArch, ReferenceRun>();
function referenceOf(arch: TinyArch): ReferenceRun {
  let r = references.get(arch);
  if (r === undefined) {
    r = arch === 'qwen3_5_moe' ? qwenReference(folderOf(arch), PROMPT, STEPS) : gemmaReference(folderOf(arch), PROMPT, STEPS);
    references.set(arch, r);
  }
  return r;
}

/**
 * One run: the largest relative L2 error of the prompt positions' logits
 * and of the decode steps', over the rows whose narrowest routing call in
 * the reference is at least minGap (0: every row), and the tokens.
 */
function runModel(device: Device, arch: TinyArch, opts: LoadOptions, minGap = 0): { prefill: number; decode: number; tokens: number[]; rows: number } {
  using m = loadModel(folderOf(arch), device, { maxContext: 32, ...opts });
  const ref = referenceOf(arch);
  const V = m.config.vocabSize;
  const tokens = [m.prefill(PROMPT, { allLogits: true })];
  const logits = m.logits.readNumbers();
  let prefill = 0, decode = 0, rows = 0;
  const held = (i: number) => ref.routingGaps[i]! >= minGap;
  PROMPT.forEach((_, p) => {
    if (!held(p)) return;
    rows++;
    prefill = Math.max(prefill, relL2(logits.subarray(p * V, (p + 1) * V), ref.prefill[p]!));
  });
  for (let i = 0; i < STEPS; i++) {
    tokens.push(m.decode());
    if (!held(PROMPT.length + i)) continue;
    rows++;
    decode = Math.max(decode, relL2(m.logits.readNumbers(), ref.decode[i]!));
  }
  return { prefill, decode, tokens, rows };
}

/** Tokens that agree with the reference where its top-two logit gap is wider than `gap` (closer calls may flip under rounding). */
function clearTokens(arch: TinyArch, got: number[], gap: number): [number, number][] {
  return clearTokensOf(referenceOf(arch), got, gap);
}

function clearTokensOf(ref: ReferenceRun, got: number[], gap: number): [number, number][] {
  const rows = [ref.prefill[PROMPT.length - 1]!, ...ref.decode];
  const out: [number, number][] = [];
  for (let i = 0; i < got.length; i++) {
    const sorted = [...rows[i]!].sort((a, b) => b - a);
    if (sorted[0]! - sorted[1]! > gap) out.push([got[i]!, ref.tokens[i]!]);
    // Past a flipped token the contexts differ: later steps compare different things.
    if (got[i] !== ref.tokens[i]) break;
  }
  return out;
}

const ARCHS: TinyArch[] = ['qwen3_5_moe', 'gemma4', 'gemma4_e'];

// The bounds of both comparisons below.
// Exact path (stored bf16 weights, f32 activations, products and attention without rounding their inputs): what
// is left is f32 arithmetic (sums, exp, rsqrt) in another order than the other side's (transformers' float32, itself
// 1e-6 from float64 here, or float64), about 1e-6 of the logits; 1e-4 leaves room for the longer sums of larger
// models without hiding a wrong operand (those move the logits by 1e-2 or more).
const EXACT_TOL = 1e-4;
// The default path: prompts past 8 tokens take the tensor products, which round their f32 inputs to bf16 (relative
// error 2^-9 each), flash attention over bf16 queries, keys and values, and the chunked gated delta rule over bf16
// q, k, v (its intermediates and output stored in bf16). A few such roundings per layer over 4
// layers, through norms that rescale them, move the logits by about 5e-3 (1.2e-2 at worst seen; the decode steps
// inherit them through the KV cache and recurrent states): 3e-2 bounds that. They move router logits by about 1e-2
// too, so a row whose routing (in the float64 reference) was closer than 0.05 somewhere may run other experts (a
// different function, off by 0.2): those rows are not held. Tokens must agree wherever the reference's top two
// logits are 0.25 apart or more.
const DEFAULT_TOL = 3e-2;
const ROUTING_GAP = 0.05;
const TOKEN_GAP = 0.25;

/** Errors of a model run on a transformers fixture, over the rows held (routing gaps of the float64 reference). */
function runFixture(device: Device, fx: ModelFixture, opts: LoadOptions, gaps: number[] | null): { prefill: number; decode: number; tokens: number[]; rows: number } {
  using m = loadModel(fx.folder, device, { maxContext: 32, ...opts });
  const V = m.config.vocabSize;
  const tokens = [m.prefill(fx.prompt, { allLogits: true })];
  const logits = m.logits.readNumbers();
  let prefill = 0, decode = 0, rows = 0;
  const held = (i: number) => gaps === null || gaps[i]! >= ROUTING_GAP;
  fx.prompt.forEach((_, p) => {
    if (!held(p)) return;
    rows++;
    prefill = Math.max(prefill, relL2(logits.subarray(p * V, (p + 1) * V), fx.prefill[p]!));
  });
  for (let i = 0; i < fx.decode.length; i++) {
    tokens.push(m.decode());
    if (!held(fx.prompt.length + i)) continue;
    rows++;
    decode = Math.max(decode, relL2(m.logits.readNumbers(), fx.decode[i]!));
  }
  return { prefill, decode, tokens, rows };
}

const fixtureRefs = new Map<string, ReferenceRun>();
function fixtureReference(fx: ModelFixture): ReferenceRun {
  let r = fixtureRefs.get(fx.name);
  if (r === undefined) {
    r = (fx.name === 'qwen3_5_moe' ? qwenReference : gemmaReference)(fx.folder, fx.prompt, fx.decode.length);
    fixtureRefs.set(fx.name, r);
  }
  return r;
}

describeBackends('model projections', ({ device }) => {
  // Layers of one input stored alike share one product at a decode step; the padding rows between them are never
  // seen. Every layer's output is held to the product of the same layer loaded alone (the same kernel over the same
  // rows, so the same values up to the f32 tolerance).
  test('Checkpoint.projection and project: one product per format at one row, one per layer at more; the values of each layer alone', () => {
    const d = device(), r = rng(29), K = 64;
    const tensors: { name: string; dtype: string; shape: number[]; data: Uint8Array }[] = [];
    const bytes = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    const dense = (name: string, n: number, dtype: 'BF16' | 'F32'): TensorRef => {
      const v = randomArray(r, n * K, -0.5, 0.5);
      tensors.push({ name, dtype, shape: [n, K], data: bytes(dtype === 'BF16' ? toBf16(v) : Float32Array.from(v)) });
      return { name, dtype, shape: [n, K], transforms: [] };
    };
    const affine = (name: string, n: number): TensorRef => {
      const q = affineQuantize(randomArray(r, n * K, -0.5, 0.5), n, K, 32, 4, 'bf16');
      tensors.push({ name, dtype: 'U32', shape: [n, K / 8], data: bytes(affineWords(q.packed)) });
      tensors.push({ name: `${name}.scales`, dtype: 'BF16', shape: [n, 2], data: bytes(toBf16(q.scales)) });
      tensors.push({ name: `${name}.biases`, dtype: 'BF16', shape: [n, 2], data: bytes(toBf16(q.biases)) });
      return { name, dtype: 'U32', shape: [n, K / 8], transforms: [], scales: `${name}.scales`, biases: `${name}.biases` };
    };
    const a = dense('a', 5, 'BF16'), b = dense('b', 3, 'BF16'), c = affine('c', 9), e = dense('e', 4, 'F32'), f = affine('f', 6);
    const layers = [[{ ref: a }], [{ ref: b, rows: [2, 0, 1] }], [{ ref: c }], [{ ref: e }], [{ ref: f }], [{ ref: b }, { ref: a }]];
    const ck = new Checkpoint(SafetensorsFile.fromBytes(safetensorsBytes(tensors)), d, 'stored', { groupSize: 32, bits: 4 });
    ck.affineScales16 = true;
    try {
      const p = ck.projection(layers);
      // Three formats: dense bf16 (layers 0, 1, 5), affine with bf16 scales (2, 4), dense f32 (3); each layer but a
      // group's last starts PROJECTION_ROWS-aligned.
      expect(p.groups.map((g) => [g.members, g.starts, g.linear.n])).toEqual([
        [[0, 1, 5], [0, 8, 16], 24], [[2, 4], [0, 16], 22], [[3], [0], 4],
      ]);
      expect(PROJECTION_ROWS).toBe(8);
      expect(p.layers.map((l) => l.n)).toEqual([5, 3, 9, 4, 6, 8]);
      const alone = layers.map((l) => ck.linear(l));
      for (const t of [1, 3]) {
        using s = new Scratch(d);
        using x = d.upload('f32', [t, K], randomArray(r, t * K, -1, 1));
        using enc = d.encoder();
        const before = enc.dispatchCount;
        const outs = project(enc, s, 'p', p, x, t, 'exact');
        expect(enc.dispatchCount - before).toBe(t === 1 ? 3 : 6);
        const want = alone.map((l, i) => {
          const y = s.get(`alone${i}`, 'f32', [t, l.n]);
          linear(enc, l, x, y, t, 'exact');
          return y;
        });
        enc.commitAndWait();
        outs.forEach((o, i) => {
          expect(o.shape).toEqual([t, p.layers[i]!.n]);
          expect(maxRelErr(o.readNumbers(), want[i]!.readNumbers())).toBeLessThanOrEqual(TOL.f32);
        });
      }
    } finally {
      ck.release();
    }
  });
});

describe('model fixtures', () => {
  test('all three are committed, from transformers 5.x, and their own checks hold (cache vs full pass, float32 vs float64)', () => {
    expect(modelFixtureNames()).toEqual(['qwen3_5_moe', 'gemma4', 'gemma4_e']);
    for (const name of modelFixtureNames()) {
      const fx = modelFixture(name);
      expect(fx.manifest.versions['transformers']!).toStartWith('5.');
      expect([fx.prompt.length, fx.tokens.length, fx.prefill.length, fx.decode.length]).toEqual([12, 9, 12, 8]);
      for (const k of ['prefill_vs_uncached', 'decode_vs_uncached', 'f32_vs_f64_prefill', 'f32_vs_f64_decode']) {
        expect(fx.manifest.checks[k] as number).toBeLessThan(1e-5);
      }
    }
  });
  // The float64 references are transformers' arithmetic: the tests on random checkpoints below rest on it.
  test.each(['qwen3_5_moe', 'gemma4', 'gemma4_e'])('%s: the float64 reference gives transformers\' logits and tokens', (name) => {
    const fx = modelFixture(name);
    const ref = fixtureReference(fx);
    for (let p = 0; p < fx.prompt.length; p++) expect(relL2(ref.prefill[p]!, fx.prefill[p]!)).toBeLessThan(EXACT_TOL);
    for (let i = 0; i < fx.decode.length; i++) expect(relL2(ref.decode[i]!, fx.decode[i]!)).toBeLessThan(EXACT_TOL);
    expect(ref.tokens).toEqual(fx.tokens);
  }, 60_000);
});

describeBackends('models against transformers (fixtures)', ({ device, label }) => {
  for (const name of ['qwen3_5_moe', 'gemma4', 'gemma4_e']) {
    test(`${name}: prefill and 8 decode steps, exact products and f32 prompt attention: within ${EXACT_TOL} and the same tokens`, () => {
      const fx = modelFixture(name);
      const r = runFixture(device(), fx, { precision: 'exact', prefillAttention: 'vector' }, null);
      expect(r.prefill).toBeLessThan(EXACT_TOL);
      expect(r.decode).toBeLessThan(EXACT_TOL);
      expect(r.tokens).toEqual(fx.tokens);
    }, 120_000);
    if (label !== 'emu') continue;
    test(`${name}: prefill and 8 decode steps, the default (bf16 inputs of prompt products and attention): within ${DEFAULT_TOL}`, () => {
      const fx = modelFixture(name);
      const ref = fixtureReference(fx);
      const r = runFixture(device(), fx, {}, ref.routingGaps);
      expect(r.rows).toBeGreaterThanOrEqual(fx.prompt.length);
      expect(r.prefill).toBeLessThan(DEFAULT_TOL);
      expect(r.decode).toBeLessThan(DEFAULT_TOL);
      for (const [got, want] of clearTokensOf(ref, r.tokens, TOKEN_GAP)) expect(got).toBe(want);
    }, 120_000);
  }
});

describeBackends('models against float64 references (random checkpoints)', ({ device, label }) => {
  if (label !== 'emu') return;
  for (const arch of ARCHS) {
    test(`${arch}: prefill and ${STEPS} decode steps, exact products and f32 prompt attention`, () => {
      const r = runModel(device(), arch, { precision: 'exact', prefillAttention: 'vector' });
      expect(r.prefill).toBeLessThan(EXACT_TOL);
      expect(r.decode).toBeLessThan(EXACT_TOL);
      expect(r.tokens).toEqual(referenceOf(arch).tokens);
    }, 120_000);
    test(`${arch}: prefill and ${STEPS} decode steps, the default (bf16 inputs of prompt products and attention)`, () => {
      const r = runModel(device(), arch, {}, ROUTING_GAP);
      expect(r.rows).toBeGreaterThanOrEqual(PROMPT.length);
      expect(r.prefill).toBeLessThan(DEFAULT_TOL);
      expect(r.decode).toBeLessThan(DEFAULT_TOL);
      for (const [got, want] of clearTokens(arch, r.tokens, TOKEN_GAP)) expect(got).toBe(want);
    }, 120_000);
  }
  for (const arch of ARCHS) {
    // A prompt clears only what it reads (Model.resetState): after a decoded context, a prompt of several tokens and
    // one of a single token give the logits a fresh model gives them. A state left over would move them by far more
    // than the bound (the recurrent state alone is a whole context's sum).
    test(`${arch}: a second prompt (of 5 tokens, then of 1) after a decoded context matches a fresh model's`, () => {
      const opts = { maxContext: 32, precision: 'exact', prefillAttention: 'vector' } as const;
      const second = [PROMPT[3]!, PROMPT[1]!, PROMPT[10]!, PROMPT[0]!, PROMPT[6]!];
      using used = loadModel(folderOf(arch), device(), opts);
      const after: Float64Array[] = [];
      const want: Float64Array[] = [];
      for (const prompt of [second, [PROMPT[5]!]]) {
        used.prefill(PROMPT);
        for (let i = 0; i < 3; i++) used.decode();
        used.prefill(prompt);
        after.push(used.logits.readNumbers());
        used.decode();
        after.push(used.logits.readNumbers());
        using fresh = loadModel(folderOf(arch), device(), opts);
        fresh.prefill(prompt);
        want.push(fresh.logits.readNumbers());
        fresh.decode();
        want.push(fresh.logits.readNumbers());
      }
      for (const [i, got] of after.entries()) expect(relL2(got, want[i]!)).toBeLessThan(1e-6);
    }, 120_000);
  }
  {
    // MLX affine-quantized linear layers (the projections of attention, the gated delta net, the shared expert and
    // the output; the experts stay dense here, the next test quantizes them) against the reference run on the same
    // weights dequantized: the kernels dequantize in f32 as the reference does, so the bound is the exact path's.
    for (const [bits, groupSize] of [[4, 64], [8, 32]] as const) {
      test(`qwen3_5_moe with ${bits}-bit affine linear layers (groups of ${groupSize}): the dequantized model's logits and tokens`, () => {
        const dir = mkdtempSync(join(tmpdir(), 'mlxn-quant-'));
        try {
          const quantized = quantizeCheckpoint(folderOf('qwen3_5_moe'), join(dir, 'q'), join(dir, 'd'), groupSize, bits);
          expect(quantized.length).toBeGreaterThan(20);
          const ref = qwenReference(join(dir, 'd'), PROMPT, 4);
          using m = loadModel(join(dir, 'q'), device(), { maxContext: 32, precision: 'exact', prefillAttention: 'vector' });
          const tokens = [m.prefill(PROMPT)];
          let err = relL2(m.logits.readNumbers(), ref.prefill[PROMPT.length - 1]!);
          for (let i = 0; i < 4; i++) {
            tokens.push(m.decode());
            err = Math.max(err, relL2(m.logits.readNumbers(), ref.decode[i]!));
          }
          expect(err).toBeLessThan(1e-4);
          expect(tokens).toEqual(ref.tokens);
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      }, 120_000);
    }
    // MLX affine-quantized experts too (mlx's stacked switch_mlp layout, 4-bit, groups of 32) through the per-expert
    // products, against the reference on the dequantized weights. Those products take bf16 activations (the layer's
    // f32 input rounded once, the activations and outputs stored in bf16) in every precision, and the prompt runs
    // the default path: DEFAULT_TOL over the rows held by ROUTING_GAP, as for the default path above.
    test('qwen3_5_moe with 4-bit affine experts (stacked, groups of 32) and linear layers: the dequantized model\'s logits', () => {
      const dir = mkdtempSync(join(tmpdir(), 'mlxn-qexperts-'));
      try {
        relayoutCheckpoint(folderOf('qwen3_5_moe'), join(dir, 's'), { prefix: 'model.', experts: 'stacked', extra: 'mtp.fc.weight' });
        const quantized = quantizeCheckpoint(join(dir, 's'), join(dir, 'q'), join(dir, 'd'), 32, 4, true);
        expect(quantized.filter((n) => n.includes('.switch_mlp.')).length).toBe(3 * 4);
        const ref = qwenReference(join(dir, 'd'), PROMPT, 4);
        using m = loadModel(join(dir, 'q'), device(), { maxContext: 32 });
        const held = (i: number) => ref.routingGaps[i]! >= ROUTING_GAP;
        const tokens = [m.prefill(PROMPT, { allLogits: true })];
        const V = m.config.vocabSize, logits = m.logits.readNumbers();
        let err = 0, rows = 0;
        PROMPT.forEach((_, p) => {
          if (!held(p)) return;
          rows++;
          err = Math.max(err, relL2(logits.subarray(p * V, (p + 1) * V), ref.prefill[p]!));
        });
        for (let i = 0; i < 4; i++) {
          tokens.push(m.decode());
          if (!held(PROMPT.length + i)) continue;
          rows++;
          err = Math.max(err, relL2(m.logits.readNumbers(), ref.decode[i]!));
        }
        expect(rows).toBeGreaterThanOrEqual(PROMPT.length / 2);
        expect(err).toBeLessThan(DEFAULT_TOL);
        for (const [got, want] of clearTokensOf(ref, tokens, TOKEN_GAP)) expect(got).toBe(want);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }, 120_000);
    // A shared expert as wide as the routed ones (Qwen3.6-35B-A3B's: 512 and 512) is stacked after them, and a
    // decode step runs it as one more slot of the per-expert products: the shared gate/up product, the activation
    // and the shared down leave the step (2 dispatches a layer here, where the router and the shared gate/up share
    // one bf16 product; 3 where they are stored apart). Against the float64 reference: the hub's fused gate_up
    // layout exact (f32 experts) and default (bf16 outputs), and mlx's stacked layout with 4-bit experts (bf16
    // outputs read by moe_weighted_reduce_bf16_shared). The prompts run the shared expert on its own.
    test('qwen3_5_moe with the shared expert as wide as the experts: decode runs it as one more expert slot', () => {
      const dir = mkdtempSync(join(tmpdir(), 'mlxn-shared-'));
      try {
        const folder = writeTinyCheckpoint('qwen3_5_moe', 24, join(dir, 'w'), { shared_expert_intermediate_size: 32 });
        relayoutCheckpoint(folder, join(dir, 's'), { prefix: 'model.', experts: 'stacked', extra: 'mtp.fc.weight' });
        quantizeCheckpoint(join(dir, 's'), join(dir, 'q'), join(dir, 'd'), 32, 4, true);
        const run = (path: string, opts: LoadOptions, refPath: string, tol: number, gap: number) => {
          const ref = qwenReference(refPath, PROMPT, 4);
          using m = loadModel(path, device(), { maxContext: 32, ...opts });
          const held = (i: number) => ref.routingGaps[i]! >= gap;
          const tokens = [m.prefill(PROMPT)];
          let err = held(PROMPT.length - 1) ? relL2(m.logits.readNumbers(), ref.prefill[PROMPT.length - 1]!) : 0, rows = 0;
          for (let i = 0; i < 4; i++) {
            tokens.push(m.decode());
            if (!held(PROMPT.length + i)) continue;
            rows++;
            err = Math.max(err, relL2(m.logits.readNumbers(), ref.decode[i]!));
          }
          expect(rows).toBeGreaterThanOrEqual(2);
          expect(err).toBeLessThan(tol);
          return { tokens, ref, dispatches: m.stepDispatches };
        };
        const exact = run(folder, { precision: 'exact', prefillAttention: 'vector' }, folder, EXACT_TOL, 0);
        expect(exact.tokens).toEqual(exact.ref.tokens);
        const fast = run(folder, {}, folder, DEFAULT_TOL, ROUTING_GAP);
        for (const [got, want] of clearTokensOf(fast.ref, fast.tokens, TOKEN_GAP)) expect(got).toBe(want);
        run(join(dir, 'q'), {}, join(dir, 'd'), DEFAULT_TOL, ROUTING_GAP);
        // Replayed decode steps (the shared slot's id stays in place across replays).
        const replayed = run(folder, { replay: true }, folder, DEFAULT_TOL, ROUTING_GAP);
        expect(replayed.tokens).toEqual(fast.tokens);
        // The same model with a narrower shared expert (the suite's) keeps its own products.
        using narrow = loadModel(folderOf('qwen3_5_moe'), device(), { maxContext: 32 });
        narrow.prefill(PROMPT);
        narrow.decode();
        expect(narrow.stepDispatches - fast.dispatches).toBe(2 * narrow.config.numLayers);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }, 120_000);
    // A decode step's kernels, as the models fuse their norms (ts/models/gemma4.ts, qwen3_5_moe.ts): one rms_norm
    // before the first layer and one after the last (Gemma 4 with per-layer inputs: one more, over those inputs); every
    // other norm rides with the residual update, the MoE sum or the reduction before it, and q, k (and Gemma 4's v)
    // are normalized in one dispatch a layer that owns its keys.
    test('a decode step\'s norms ride with the dispatches before them', () => {
      const proto = EncoderClass.prototype as unknown as { dispatch: (p: Pipeline, ...rest: unknown[]) => void };
      const stepKernels = (arch: TinyArch): { names: string[]; m: CausalLM } => {
        const m = loadModel(folderOf(arch), device(), { maxContext: 32 });
        const names: string[] = [];
        const orig = proto.dispatch;
        try {
          m.prefill(PROMPT);
          proto.dispatch = function (this: unknown, p: Pipeline, ...rest: unknown[]) {
            names.push(p.name);
            orig.call(this, p, ...rest);
          };
          m.decode();
        } catch (e) {
          m.release();
          throw e;
        } finally {
          proto.dispatch = orig;
        }
        return { names, m };
      };
      const count = (names: string[], f: (n: string) => boolean) => names.filter(f).length;
      {
        const { names, m } = stepKernels('qwen3_5_moe');
        using _ = m;
        const c = m.config as Qwen35MoeConfig;
        const attn = c.layerTypes.filter((t) => t === 'full_attention').length;
        expect(count(names, (n) => n.startsWith('rms_norm'))).toBe(2);
        expect(count(names, (n) => n.startsWith('moe_weighted_reduce_norm_'))).toBe(c.numLayers - 1);
        expect(count(names, (n) => n.startsWith('moe_weighted_reduce_') && !n.startsWith('moe_weighted_reduce_norm_'))).toBe(1);
        expect(count(names, (n) => n === 'fused_head_norm_rope_qkv_f32')).toBe(attn);
        expect(count(names, (n) => n === 'fused_head_norm_rope_f32')).toBe(0);
      }
      for (const arch of ['gemma4', 'gemma4_e'] as const) {
        const { names, m } = stepKernels(arch);
        using _ = m;
        const c = m.config as Gemma4Config;
        const owning = c.layers.filter((l, i) => l.kvSource === i).length, perLayer = c.perLayerInputSize > 0;
        expect(count(names, (n) => n.startsWith('rms_norm'))).toBe(perLayer ? 3 : 2);
        expect(count(names, (n) => n === 'fused_norm_add_norms_f32')).toBe((perLayer ? 3 : 2) * c.numLayers);
        expect(count(names, (n) => n.startsWith('fused_norm_moe_sum_'))).toBe(c.moe === null ? 0 : c.numLayers);
        expect(count(names, (n) => n === 'fused_head_norm_rope_qkv_f32')).toBe(owning);
        expect(count(names, (n) => n === 'fused_head_norm_rope_f32')).toBe(c.numLayers - owning);
        for (const gone of ['fused_norm_add_f32', 'fused_norm_add_scalar_f32', 'moe_weighted_sum_seq']) {
          expect(names.filter((n) => n.startsWith(gone))).toEqual([]);
        }
      }
    });
    // Multimodal checkpoints hold the text model under model.language_model. beside a vision tower, the hub's
    // Qwen3.6 stores its experts one tensor each, mlx's checkpoints stacked: the same values give the same logits.
    for (const [arch, how] of [
      ['qwen3_5_moe', { prefix: 'model.language_model.', experts: 'per_expert', extra: 'model.visual.patch_embed.proj.weight' }],
      ['qwen3_5_moe', { prefix: 'model.language_model.', experts: 'stacked', extra: 'mtp.fc.weight' }],
      ['gemma4', { prefix: 'model.language_model.', experts: 'stacked', extra: 'model.vision_tower.patch.weight' }],
      ['gemma4', { prefix: 'model.language_model.', experts: 'per_expert', extra: 'model.embed_audio.proj.weight' }],
    ] as [TinyArch, Relayout][]) {
      test(`${arch}, text model under ${how.prefix} with ${how.experts} experts and ${how.extra} set aside: the same logits`, () => {
        const dir = mkdtempSync(join(tmpdir(), 'mlxn-layout-'));
        try {
          relayoutCheckpoint(folderOf(arch), dir, how);
          using m = loadModel(dir, device(), { maxContext: 32, precision: 'exact', prefillAttention: 'vector' });
          const ref = referenceOf(arch);
          const tokens = [m.prefill(PROMPT)];
          let err = relL2(m.logits.readNumbers(), ref.prefill[PROMPT.length - 1]!);
          for (let i = 0; i < 2; i++) {
            tokens.push(m.decode());
            err = Math.max(err, relL2(m.logits.readNumbers(), ref.decode[i]!));
          }
          expect(err).toBeLessThan(EXACT_TOL);
          expect(tokens).toEqual(ref.tokens.slice(0, 3));
        } finally {
          rmSync(dir, { recursive: true, force: true });
        }
      }, 120_000);
    }
    test('feed continues a context token by token: half a prompt, then the rest fed, gives the whole prompt\'s logits', () => {
      for (const arch of ARCHS) {
        using m = loadModel(folderOf(arch), device(), { maxContext: 32, precision: 'exact', prefillAttention: 'vector' });
        m.prefill(PROMPT.slice(0, 5));
        const next = m.feed(PROMPT.slice(5));
        expect(m.position).toBe(PROMPT.length);
        expect(next).toBe(referenceOf(arch).tokens[0]!);
        expect(relL2(m.logits.readNumbers(), referenceOf(arch).prefill[PROMPT.length - 1]!)).toBeLessThan(1e-4);
        expect(m.decode()).toBe(referenceOf(arch).tokens[1]!);
      }
    }, 120_000);
    test('weights widened to f32 at load: the same logits as the stored bf16 ones (the values are the same)', () => {
      const a = runModel(device(), 'qwen3_5_moe', { precision: 'exact', prefillAttention: 'vector', weights: 'f32' });
      expect(a.prefill).toBeLessThan(1e-4);
      expect(a.tokens).toEqual(referenceOf('qwen3_5_moe').tokens);
    }, 120_000);
  }
});

describeValidation('models refusals', ({ device }) => {
  test('loadModel: a checkpoint missing a tensor is refused by the name describeModel reports', () => {
    const dir = writeTinyCheckpoint('gemma4', 5);
    try {
      const cfg = tinyConfig('gemma4');
      writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...cfg, num_hidden_layers: 5, layer_types: [...(cfg['layer_types'] as string[]), 'full_attention'] }));
      expectInvalidParts(() => loadModel(dir, device()), 'describeModel', 'model.layers.4.self_attn.q_proj.weight');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
  test('loadModel: options and configs it cannot honour', () => {
    const dir = folderOf('qwen3_5_moe');
    expectInvalid(() => loadModel(dir, device(), { maxContext: 0 }), 'loadModel', 'opts.maxContext', 'a positive integer', '0');
    expectInvalid(() => loadModel(dir, device(), { precision: 'half' as 'exact' }), 'loadModel', 'opts.precision', "'fast' or 'exact'", 'half');
    expectInvalid(() => loadModel(dir, device(), { prefillAttention: 'sdpa' as 'flash' }), 'loadModel', 'opts.prefillAttention', "'flash' or 'vector'", 'sdpa');
    expectInvalid(() => loadModel('/nonexistent-model-folder', device()), 'model config', 'path', 'a checkpoint folder holding config.json', '/nonexistent');
  });
  test('prefill and decode: empty prompts, ids past the vocabulary, contexts past maxContext, decode before prefill, use after release', () => {
    const m = loadModel(folderOf('qwen3_5_moe'), device(), { maxContext: 4, precision: 'exact', prefillAttention: 'vector' });
    expectInvalid(() => m.decode(), 'decode', 'the context', 'a prompt run by prefill first', 'empty');
    expectInvalid(() => m.prefill([]), 'prefill', 'tokens', 'a non-empty array', '[]');
    expectInvalid(() => m.prefill([1, 512]), 'prefill', 'tokens[1]', 'an id in [0, 512)', '512');
    expectInvalid(() => m.prefill([1, 2, 3, 4, 5]), 'prefill', 'tokens.length', 'at most maxContext (4)', '5');
    expectInvalid(() => m.feed([1]), 'feed', 'the context', 'a prompt run by prefill first', 'empty');
    m.prefill([1, 2]);
    expectInvalid(() => m.feed([]), 'feed', 'tokens', 'a non-empty array', '[]');
    expectInvalid(() => m.feed([7, -1]), 'feed', 'tokens[1]', 'an id in [0, 512)', '-1');
    expectInvalid(() => m.feed([1, 2, 3]), 'feed', 'tokens.length', 'at most maxContext - position (2)', '3');
    m.feed([3]);
    m.decode();
    expectInvalid(() => m.decode(), 'decode', 'the context', 'shorter than maxContext (4)', '4');
    m.release();
    expectInvalid(() => m.prefill([1]), 'model', 'the model', 'not released', 'released');
  });
});

// Record once, replay many: decode steps through one recorded encoder, patched
// per step (the KV cache slot and attention length), give the logits of
// steps recorded afresh, bit for bit, under both emulator schedules. A
// context of 600 splits decode attention over global caches into 3
// workgroups (the split follows the capacity), so the first steps also
// run workgroups that hold no key yet.
describeBackends('decode steps replayed', ({ device, label }) => {
  if (label !== 'emu' && label !== 'emu-random') return;
  const run = (arch: TinyArch, replay: boolean, maxContext: number) => {
    using m = loadModel(folderOf(arch), device(), { maxContext, precision: 'exact', prefillAttention: 'vector', replay });
    const tokens = [m.prefill(PROMPT)];
    const logits: Float32Array[] = [];
    for (let i = 0; i < STEPS; i++) {
      tokens.push(m.decode());
      logits.push(m.logits.read() as Float32Array);
    }
    // Later prompts (shorter, longer, one token: its forward runs in the decode steps' own working buffers) keep
    // the recorded steps, which replay after them; dropRecordedSteps makes the next ones record afresh.
    const kept = () => (m as unknown as { stepEncoders: ({ enc: object } | null)[] }).stepEncoders.map((e) => e?.enc ?? null);
    const recorded = kept();
    if (replay) expect(recorded.every((e) => e !== null)).toBe(true);
    for (const prompt of [PROMPT.slice(0, 3), [...PROMPT, ...PROMPT.slice(0, 5)], [PROMPT[2]!], 'dropped' as const]) {
      if (prompt === 'dropped') m.dropRecordedSteps();
      tokens.push(m.prefill(prompt === 'dropped' ? PROMPT.slice(1, 6) : prompt));
      for (let i = 0; i < 2; i++) {
        tokens.push(m.decode());
        logits.push(m.logits.read() as Float32Array);
      }
      if (replay) expect(kept().map((e, i) => e === recorded[i])).toEqual(prompt === 'dropped' ? [false, false] : [true, true]);
    }
    tokens.push(m.feed([1, 2]));
    logits.push(m.logits.read() as Float32Array);
    return { tokens, logits };
  };
  for (const arch of ARCHS) {
    test(`${arch}: the same logits and tokens with and without replay, and the float64 reference's`, () => {
      const plain = run(arch, false, 600);
      const replayed = run(arch, true, 600);
      expect(replayed.tokens).toEqual(plain.tokens);
      for (let i = 0; i < plain.logits.length; i++) expect(Array.from(replayed.logits[i]!)).toEqual(Array.from(plain.logits[i]!));
      const ref = referenceOf(arch);
      for (let i = 0; i < STEPS; i++) expect(relL2(Array.from(replayed.logits[i]!), ref.decode[i]!)).toBeLessThan(EXACT_TOL);
      expect(replayed.tokens.slice(0, STEPS + 1)).toEqual(ref.tokens);
    }, 120_000);
  }
  // The steps' two recordings alternate, each patched for the next position while the other runs: up to the last
  // position of the context (nothing prepared past it), then the same refusal as without replay.
  test('replayed steps up to maxContext: the same tokens, then the same refusal', () => {
    const tokens = (replay: boolean) => {
      using m = loadModel(folderOf('qwen3_5_moe'), device(), { maxContext: PROMPT.length + 4, replay });
      const out = [m.prefill(PROMPT)];
      for (let i = 0; i < 4; i++) out.push(m.decode());
      expectInvalid(() => m.decode(), 'decode', 'the context', `shorter than maxContext (${PROMPT.length + 4})`, String(PROMPT.length + 4));
      return out;
    };
    expect(tokens(true)).toEqual(tokens(false));
  }, 120_000);
  test('loadModel refuses a replay option that is not a boolean', () => {
    expectInvalid(() => loadModel(folderOf('qwen3_5_moe'), device(), { replay: 1 as unknown as boolean }), 'loadModel', 'opts.replay', 'a boolean', '1');
  });
});

// flushLayers: each layer of a prompt (and of a decode step not replayed) starts as soon as it is recorded (cuda
// launches it at once; metal and the emulator start the recording at its commit). The same logits as one
// submission: bit for bit on the emulator, within float noise elsewhere (the same kernels in the same order).
describeBackends('layers flushed as recorded', ({ device, label }) => {
  for (const arch of ARCHS) {
    test(`${arch}: the same prompt logits and decode tokens with flushLayers on and off`, () => {
      const run = (flushLayers: boolean) => {
        using m = loadModel(folderOf(arch), device(), { maxContext: 64, flushLayers, replay: false });
        const tokens = [m.prefill(PROMPT, { allLogits: true })];
        const prompt = m.logits.read() as Float32Array;
        for (let i = 0; i < 2; i++) tokens.push(m.decode());
        return { tokens, prompt, step: m.logits.read() as Float32Array };
      };
      const on = run(true), off = run(false);
      expect(on.tokens).toEqual(off.tokens);
      for (const [a, b] of [[on.prompt, off.prompt], [on.step, off.step]] as const) {
        if (label === 'emu' || label === 'emu-random') expect(Array.from(a)).toEqual(Array.from(b));
        else expect(relL2(a, Float64Array.from(b))).toBeLessThan(1e-5);
      }
    }, 120_000);
  }
  test('loadModel refuses a flushLayers option that is not a boolean', () => {
    expectInvalid(() => loadModel(folderOf('qwen3_5_moe'), device(), { flushLayers: 'yes' as unknown as boolean }), 'loadModel', 'opts.flushLayers', 'a boolean', 'yes');
  });
});

describeBackends('MLX affine linear layers', ({ device }) => {
  // 'fast' rows with bf16 scales: up to DEQUANT_MIN_ROWS rows quantized_matmul_simd (x rounded to bf16); on cuda from
  // there (given a scratch) the weight dequantized to f16, then the dense family's tensor tiles (2 dispatches). Each
  // against the float64 reference of the affine weight with x as the kernel sees it: bf16's tolerance for the simd
  // product, f16's for the dequantized path (x and the weight in f16); 4, 6 and 8 bits, rows and columns off every
  // tile, a NaN-poisoned output; one scratch throughout, the largest weight first.
  test('quantized_matmul_simd, and from DEQUANT_MIN_ROWS rows on cuda dequantize + dense: the reference', () => {
    const d = device(), r = rng(53);
    using s = new Scratch(d);
    const cases: [bits: number, gs: number, m: number, n: number, k: number][] = [[4, 64, 130, 72, 512], [6, 32, 129, 40, 256], [8, 128, 200, 33, 384], [4, 64, 40, 72, 512]];
    for (const [bits, gs, m, n, k] of cases) {
      const qz = affineQuantize(randomArray(r, n * k, -1, 1), n, k, gs, bits, 'bf16');
      const xv = Float32Array.from(randomArray(r, m * k, -1, 1));
      using w = d.upload('u32', [qz.packed.byteLength / 4], affineWords(qz.packed));
      using sc = d.upload('bf16', [n, k / gs], qz.scales);
      using bi = d.upload('bf16', [n, k / gs], qz.biases);
      using x = d.upload('f32', [m, k], xv);
      using y = d.alloc('f32', [m, n]);
      y.fill(Number.NaN);
      using enc = d.encoder();
      const dq = dequantTakes(m, n, k, d.limits);
      linear(enc, { kind: 'affine', weight: w, scales: sc, biases: bi, n, k, groupSize: gs, bits }, x, y, m, 'fast', s);
      expect(enc.dispatchCount).toBe(dq ? 2 : 1);
      enc.commitAndWait();
      const want = affineQuantizedMatmulRef(dq ? xv : roundedTo('bf16', xv), qz.packed, qz.scales, qz.biases, m, n, k, gs, bits);
      expect(dotErr(y.readNumbers(), want.y, want.abs)).toBeLessThanOrEqual(dotTolerance(dq ? 'f16' : 'bf16', k));
    }
  });
});
