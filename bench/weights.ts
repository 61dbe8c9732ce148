// Times the weight readers (ts/weights) at Qwen3.6-35B-A3B's sizes (40
// layers, hidden 2048, 256 experts of 512, vocabulary 248320):
//
// - header parse of its HF safetensors names, one tensor per expert (about
//   31k tensors; the data section is one byte per tensor, since only the
//   header is read), and describeModel over them;
// - header parse of a GGUF file with its tensor names and a tokenizer of
//   248320 tokens and merges (strings dominate GGUF headers);
// - upload of one layer's experts.gate_up_proj [256, 1024, 2048] bf16 (1 GiB)
//   from a mapped safetensors file into the device: uploadPacked, a fresh
//   mapping each time (pages in the page cache), against the host's memcpy
//   of the same bytes into new memory in the same run (the floor where the
//   device shares memory with the host: a new allocation is faulted in as it
//   is first written either way; on cuda the floor is the host-to-device copy rate,
//   which bench/weights_peers.py measures with PyTorch beside
//   safetensors.torch.load_file).
//
// Median of 5 (3 for uploads). Bytes: what the step must read (headers) or
// read and write once (uploads).
//
//   bun run bench/weights.ts [--small]      (--small: sizes the emulator runs)
//
// Backend: MLX_NATIVE_BACKEND or the default.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Device } from '../ts/index.ts';
import { GgufFile, SafetensorsFile, describeModel, parseGguf, parseSafetensors } from '../ts/weights/index.ts';
import { ggufBytes, safetensorsBytes, type StTensor } from '../tests/weights-writers.ts';

const small = process.argv.includes('--small');
const dev = Device.open();
const dir = mkdtempSync(join(tmpdir(), 'mlxn-bench-weights-'));

const LAYERS = small ? 4 : 40;
const EXPERTS = small ? 16 : 256;
const VOCAB = small ? 4096 : 248320;
const TYPES = Array.from({ length: LAYERS }, (_, i) => ((i + 1) % 4 === 0 ? 'full_attention' : 'linear_attention'));

function median(xs: number[]): number {
  return [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
}
function timeMs(fn: () => void, reps = 5): number {
  return median(Array.from({ length: reps }, () => {
    const t0 = performance.now();
    fn();
    return performance.now() - t0;
  }));
}
function row(name: string, ms: number, bytes: number): void {
  console.log(`${name.padEnd(64)} ${ms.toFixed(2).padStart(10)} ms  ${(bytes / 1e6).toFixed(1).padStart(8)} MB  ${(bytes / ms / 1e6).toFixed(2).padStart(7)} GB/s`);
}

/** Qwen3.6's HF names (multimodal checkpoint layout, one tensor per expert). */
function qwenNames(): string[] {
  const p = 'model.language_model.';
  const names = [`${p}embed_tokens.weight`, `${p}norm.weight`, 'lm_head.weight'];
  TYPES.forEach((type, i) => {
    const b = `${p}layers.${i}.`;
    names.push(`${b}input_layernorm.weight`, `${b}post_attention_layernorm.weight`);
    if (type === 'linear_attention') {
      for (const n of ['in_proj_qkv.weight', 'in_proj_z.weight', 'in_proj_b.weight', 'in_proj_a.weight', 'conv1d.weight', 'dt_bias', 'A_log', 'norm.weight', 'out_proj.weight']) names.push(`${b}linear_attn.${n}`);
    } else {
      for (const n of ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'q_norm', 'k_norm']) names.push(`${b}self_attn.${n}.weight`);
    }
    names.push(`${b}mlp.gate.weight`, `${b}mlp.shared_expert_gate.weight`);
    for (const n of ['gate', 'up', 'down']) names.push(`${b}mlp.shared_expert.${n}_proj.weight`);
    for (let e = 0; e < EXPERTS; e++) for (const n of ['gate', 'up', 'down']) names.push(`${b}mlp.experts.${e}.${n}_proj.weight`);
  });
  return names;
}

function qwenGgufNames(): string[] {
  const names = ['token_embd.weight', 'output_norm.weight', 'output.weight'];
  TYPES.forEach((type, i) => {
    const b = `blk.${i}.`;
    names.push(`${b}attn_norm.weight`, `${b}post_attention_norm.weight`);
    const attn = type === 'linear_attention'
      ? ['attn_qkv.weight', 'attn_gate.weight', 'ssm_beta.weight', 'ssm_alpha.weight', 'ssm_conv1d.weight', 'ssm_dt.bias', 'ssm_a', 'ssm_norm.weight', 'ssm_out.weight']
      : ['attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'attn_output.weight', 'attn_q_norm.weight', 'attn_k_norm.weight'];
    names.push(...attn.map((n) => b + n));
    names.push(...['ffn_gate_inp.weight', 'ffn_gate_inp_shexp.weight', 'ffn_gate_shexp.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight'].map((n) => b + n));
  });
  return names;
}

const one = new Uint8Array([1]);
const fixed = { next: () => 0.5, uniform: (lo: number) => lo, normal: () => 0 };

console.log(`device: ${dev.name} (${dev.backend})${small ? ' (--small sizes)' : ''}`);
try {
  // ---- safetensors header: Qwen3.6, one tensor per expert ----
  {
    const names = qwenNames();
    const bytes = safetensorsBytes(names.map((name): StTensor => ({ name, dtype: 'U8', shape: [1], data: one })));
    const headerBytes = bytes.length - names.length;
    row(`safetensors header, Qwen3.6 HF names (${names.length} tensors)`, timeMs(() => parseSafetensors(bytes, 'bench')), headerBytes);
    const f = SafetensorsFile.fromBytes(bytes, 'bench');
    const config = { model_type: 'qwen3_5_moe', text_config: { num_hidden_layers: LAYERS, layer_types: TYPES } };
    row(`describeModel, the same names`, timeMs(() => describeModel(f, { config, allowUnexpected: false })), headerBytes);
  }
  // ---- GGUF header: Qwen3.6 names and a tokenizer ----
  {
    const tokens = Array.from({ length: VOCAB }, (_, i) => `tok${i}`);
    const merges = Array.from({ length: VOCAB - 256 }, (_, i) => `a${i} b${i}`);
    const w = ggufBytes({
      metadata: [
        ['general.architecture', { type: 'string', value: 'qwen35moe' }],
        ['tokenizer.ggml.tokens', { type: 'array', value: { itemType: 'string', items: tokens } }],
        ['tokenizer.ggml.merges', { type: 'array', value: { itemType: 'string', items: merges } }],
        ['tokenizer.ggml.token_type', { type: 'array', value: { itemType: 'i32', items: new Int32Array(VOCAB) } }],
      ],
      tensors: qwenGgufNames().map((name) => ({ name, type: 'F32', dims: [1] })),
    }, fixed);
    row(`gguf header, Qwen3.6 names + ${VOCAB}-token tokenizer`, timeMs(() => parseGguf(w.bytes, 'bench')), w.dataStart);
  }
  // ---- upload: one layer's experts.gate_up_proj, bf16 ----
  {
    const [E, rows, cols] = [small ? 4 : 256, 1024, 2048];
    const n = E * rows * cols * 2;
    const data = new Uint8Array(n);
    const words = new Uint32Array(data.buffer);
    let x = 0x2545f491;
    for (let i = 0; i < words.length; i++) words[i] = x = (Math.imul(x, 1664525) + 1013904223) >>> 0 & 0xbfffbfff; // finite bf16 pairs
    const path = join(dir, 'experts.safetensors');
    writeFileSync(path, safetensorsBytes([{ name: 'model.language_model.layers.0.mlp.experts.gate_up_proj', dtype: 'BF16', shape: [E, rows, cols], data }]));
    // A new allocation is faulted in page by page as it is first written, by the upload as by this copy.
    row(`host memcpy into new memory (floor on shared memory)`, timeMs(() => new Uint8Array(n).set(data), 3), 2 * n);
    row(`uploadPacked experts.gate_up_proj [${E}, ${rows}, ${cols}] bf16`, timeMs(() => {
      const f = SafetensorsFile.open(path);
      f.uploadPacked(dev).release();
    }, 3), 2 * n);
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
  dev.close();
}
