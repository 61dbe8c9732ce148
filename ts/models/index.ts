// mlx-native/models: whole forward passes of Qwen3.6 (qwen3_5_moe) and
// Gemma 4 (gemma4) built from the public ops, loaded from a checkpoint
// folder (config.json beside safetensors) or a llama.cpp GGUF file (its
// config from its metadata, or from a config.json beside it that the
// metadata must agree with), with greedy decoding on the device.

import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Device } from '../device.ts';
import { GgufFile, describeModel, openWeights, type Gemma4Weights, type Qwen35MoeWeights } from '../weights/index.ts';
import { invalid } from '../validate.ts';
import { Checkpoint, type WeightDtype } from './checkpoint.ts';
import { modelConfig, readConfigFile } from './config.ts';
import { checkGgufAgrees, ggufConfig } from './gguf_config.ts';
import { Gemma4 } from './gemma4.ts';
import { quantizationOf, type ModelOptions } from './model.ts';
import { Qwen35Moe } from './qwen3_5_moe.ts';

export {
  linear, project, routedExperts, rows, Scratch, type ExpertOutputs, type ExpertWeights, type Linear, type ProductPrecision, type Projection,
  type RoutedExperts,
} from './blocks.ts';
export { attentionDecode, attentionPrefill, fillCache, newKvCache, type AttentionSpec, type KvCache, type PrefillAttention } from './attention.ts';
export { Checkpoint, PROJECTION_ROWS, type AffineQuantization, type EmbeddingTable, type RowsPart, type WeightDtype } from './checkpoint.ts';
export {
  configArch, gemma4Config, modelConfig, qwen35MoeConfig, readConfigFile,
  type Gemma4Config, type Gemma4LayerConfig, type ModelConfig, type Qwen35MoeConfig,
} from './config.ts';
export { Gemma4 } from './gemma4.ts';
export { checkGgufAgrees, ggufConfig, GGUF_MODEL_TYPE } from './gguf_config.ts';
export { CausalLM, quantizationOf, type ModelOptions, type PrefillOptions } from './model.ts';
export { Qwen35Moe, rotaryPermutation } from './qwen3_5_moe.ts';

export interface LoadOptions extends ModelOptions {
  /** 'stored' (default): weights in the checkpoint's dtype; 'f32': widened to f32. */
  weights?: WeightDtype;
}

/** llama.cpp's general.architecture of each model. */
const GGUF_ARCH = { qwen3_5_moe: 'qwen35moe', gemma4: 'gemma4' } as const;

/**
 * The GGUF file a checkpoint path names: the path itself (a .gguf file), or
 * the one .gguf file of a folder holding no model.safetensors(.index.json);
 * null for a safetensors checkpoint.
 */
function ggufPathOf(path: string): string | null {
  if (path.endsWith('.gguf')) return path;
  if (!existsSync(path) || !statSync(path).isDirectory()) return null;
  if (existsSync(join(path, 'model.safetensors')) || existsSync(join(path, 'model.safetensors.index.json'))) return null;
  const ggufs = readdirSync(path).filter((f) => f.endsWith('.gguf'));
  if (ggufs.length > 1) throw invalid('loadModel', `the checkpoint folder ${path}`, 'one .gguf file (or model.safetensors)', `${ggufs.length}: ${ggufs.join(', ')}`);
  return ggufs.length === 1 ? join(path, ggufs[0]!) : null;
}

/**
 * Loads a checkpoint onto the device as the model its configuration names:
 * a folder holding config.json beside model.safetensors or a sharded
 * index; or a GGUF file (a .gguf path, or a folder holding one .gguf file),
 * whose configuration is its metadata, read as llama.cpp reads them
 * (ts/models/gguf_config.ts), unless config.json lies beside it: then
 * config.json's is used, and every config key the metadata also say must
 * agree with it. Tensor names are checked against the model first
 * (ts/weights describeModel, HF or GGUF naming): a missing or unexpected
 * tensor is refused by name. A GGUF file must be of the architecture
 * qwen35moe or gemma4 (config.json's, where there is one), its tensors F32,
 * F16, BF16 or blocks of Q4_0, Q8_0, Q4_K, Q5_K or Q6_K.
 */
export function loadModel(folder: string, device: Device, opts: LoadOptions = {}): Qwen35Moe | Gemma4 {
  const ggufPath = ggufPathOf(folder);
  const beside = folder.endsWith('.gguf') ? join(dirname(folder), 'config.json') : join(folder, 'config.json');
  const withJson = existsSync(beside);
  let raw: Record<string, unknown>;
  let source: ReturnType<typeof openWeights>;
  if (ggufPath !== null && !withJson) {
    const gguf = GgufFile.open(ggufPath);
    raw = ggufConfig(gguf);
    source = gguf;
  } else {
    raw = readConfigFile(folder.endsWith('.gguf') ? beside : folder);
    source = openWeights(ggufPath ?? folder);
  }
  const config = modelConfig(raw);
  if (source instanceof GgufFile && withJson) {
    if (source.architecture !== GGUF_ARCH[config.arch]) {
      throw invalid('loadModel', `the GGUF file's general.architecture (${source.description})`, `${GGUF_ARCH[config.arch]} (config.json's ${config.arch})`, source.architecture ?? 'none');
    }
    checkGgufAgrees(source, raw);
  }
  const names = describeModel(source, { config: raw });
  const ckpt = new Checkpoint(source, device, opts.weights ?? 'stored', quantizationOf(raw));
  try {
    return config.arch === 'qwen3_5_moe'
      ? new Qwen35Moe(device, config, ckpt, names as Qwen35MoeWeights, opts)
      : new Gemma4(device, config, ckpt, names as Gemma4Weights, opts);
  } catch (e) {
    ckpt.release();
    throw e;
  }
}
