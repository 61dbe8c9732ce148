// What the two forward passes share: loading a checkpoint folder, the
// greedy decode loop (one encoder per step, nothing read back but the
// sampled token), the logits of the last step kept on the device, and the
// release of everything the model allocated.

import type { Buffer } from '../buffer.ts';
import type { Device } from '../device.ts';
import type { Encoder } from '../encoder.ts';
import { embedding } from '../ops/embedding.ts';
import { argmax, argmaxScratchElements } from '../ops/sample.ts';
import { invalid } from '../validate.ts';
import { Scratch, type Linear, type ProductPrecision } from './blocks.ts';
import { StepPatches, type PrefillAttention } from './attention.ts';
import { patchPlan } from '../plan.ts';
import type { AffineQuantization, Checkpoint, EmbeddingTable } from './checkpoint.ts';
import type { ModelConfig } from './config.ts';
import type { TensorRef } from '../weights/names.ts';

export interface ModelOptions {
  /** Slots of a global layer's KV cache: the longest context (prompt and generated tokens); 4096 when absent. */
  maxContext?: number;
  /** A prompt's matrix products past 8 tokens and its gated delta net: 'fast' (default) or 'exact' (see ProductPrecision). */
  precision?: ProductPrecision;
  /** Prompt attention: 'flash' (default, bf16 inputs) or 'vector' (f32, one query row at a time). */
  prefillAttention?: PrefillAttention;
  /**
   * Decode steps recorded once and replayed (Encoder.replay): the first
   * step of each parity records a replayable encoder; each later step
   * writes its position, patches the per-step ops' inline bytes (the KV
   * cache slot, the attention length) and replays, so its host cost does not
   * grow with the step's dispatches. The same logits as without (default
   * true; false records every step afresh).
   */
  replay?: boolean;
  /**
   * A prompt (and a decode step not recorded for replay) starts each layer's
   * dispatches as soon as they are recorded (Encoder.flush after every
   * layer), so the device works while the host records the layers after it:
   * on cuda a prompt's wall time comes near the larger of the two rather
   * than their sum. The same logits either way (default true; metal and the
   * emulator run the recording at its commit regardless).
   */
  flushLayers?: boolean;
}

/** A decode step recorded for replay (CausalLM.replayStep). */
interface StepEncoder {
  readonly enc: Encoder;
  readonly patches: StepPatches;
  /** u32 [1]: the position its rotary embeddings read. */
  readonly positions: Buffer;
  /** The position its positions buffer and per-step ops are patched for. */
  patchedAt: number;
}

export interface PrefillOptions {
  /** Keep the logits of every prompt position (default: the last one only). */
  allLogits?: boolean;
}

/** A causal language model on the device with greedy decoding. */
export abstract class CausalLM {
  /**
   * Working buffers of one-token forwards (decode steps, a one-token
   * prompt): their shapes never change, so the decode steps recorded for
   * replay, which bind them, stay valid from one prompt to the next.
   */
  private readonly stepScratch: Scratch;
  /** Working buffers of prompts of more than one token, sized by the prompt. */
  private readonly promptScratch: Scratch;
  private activeScratch: Scratch;
  /** The token chosen last (u32 [1]): the argmax of the last logits row, the next step's input. */
  readonly next: Buffer;
  /** Tokens consumed so far (the next token's position). */
  position = 0;
  /** Rows of `logits` the last step wrote. */
  logitRows = 0;
  /**
   * Host time of the last decode step in milliseconds: recording it (or, when
   * replayed, writing its position and patching its per-step ops where that
   * was not done while the step before ran) and submitting it
   * (Encoder.submitMs); not the device's work, the wait, or the patches
   * made ahead for the next step while this one ran.
   */
  hostStepMs = 0;
  /**
   * Device time of the last decode step in milliseconds (Encoder.gpuTimeNs
   * of its commit or replay): the kernels' time from the first one's start
   * to the last one's end, without the host's share of the step.
   */
  deviceStepMs = 0;
  /** Dispatches of the last decode step's recording. */
  stepDispatches = 0;
  /** Barriers of the last decode step's recording: its dispatches run in this many plus one stretches. */
  stepBarriers = 0;
  /**
   * Host time of the last prefill in milliseconds: recording its one
   * encoder, from the scratch buffers' sizing through the last dispatch, and
   * submitting it; not the device's work or the wait.
   */
  hostPrefillMs = 0;
  /**
   * Device time of the last prefill in milliseconds (Encoder.gpuTimeNs of its
   * commit): with flushLayers on cuda, from the first layer's launch, so the
   * time the device waited for the host's recording of later layers is in it.
   */
  devicePrefillMs = 0;
  protected readonly maxContext: number;
  protected readonly precision: ProductPrecision;
  protected readonly prefillAttention: PrefillAttention;
  protected readonly replay: boolean;
  private readonly flushLayers: boolean;
  /** The encoder whose recording flushes after each layer (layerDone), while a prompt or a plain decode step records. */
  private flushing: Encoder | null = null;
  /** Non-null while a decode step is recorded for replay: where its per-step ops note their plans. */
  protected steps: StepPatches | null = null;
  /**
   * The recorded decode steps (replay only), kept across prompts until
   * dropRecordedSteps or release: one for
   * even positions and one for odd, each with its per-step ops, its own
   * positions buffer and the position it is patched for, so that one is
   * patched for the next position while the other runs.
   */
  private stepEncoders: [StepEncoder | null, StepEncoder | null] = [null, null];
  /** While a decode step is recorded for replay: its slot (positions() then writes that slot's buffer). */
  private recordingSlot: number | null = null;
  private released = false;

  protected constructor(
    readonly device: Device,
    readonly config: ModelConfig,
    protected readonly ckpt: Checkpoint,
    opts: ModelOptions,
  ) {
    this.stepScratch = new Scratch(device);
    this.promptScratch = new Scratch(device);
    this.activeScratch = this.stepScratch;
    this.next = device.alloc('u32', [1]);
    this.maxContext = opts.maxContext ?? 4096;
    if (!Number.isSafeInteger(this.maxContext) || this.maxContext <= 0) throw invalid('loadModel', 'opts.maxContext', 'a positive integer', opts.maxContext);
    this.precision = opts.precision ?? 'fast';
    if (this.precision !== 'fast' && this.precision !== 'exact') throw invalid('loadModel', 'opts.precision', "'fast' or 'exact'", this.precision);
    ckpt.affineScales16 = this.precision === 'fast';
    this.prefillAttention = opts.prefillAttention ?? 'flash';
    if (this.prefillAttention !== 'flash' && this.prefillAttention !== 'vector') {
      throw invalid('loadModel', 'opts.prefillAttention', "'flash' or 'vector'", this.prefillAttention);
    }
    this.replay = opts.replay ?? true;
    if (typeof this.replay !== 'boolean') throw invalid('loadModel', 'opts.replay', 'a boolean', this.replay);
    this.flushLayers = opts.flushLayers ?? true;
    if (typeof this.flushLayers !== 'boolean') throw invalid('loadModel', 'opts.flushLayers', 'a boolean', this.flushLayers);
  }

  /** The forward passes call it after each layer's dispatches: they start now where the options ask for it (flushLayers). */
  protected layerDone(enc: Encoder): void {
    if (this.flushing === enc) enc.flush();
  }

  /** forward(), flushing after each layer when the options ask for it and the encoder can (not a replayable one). */
  private record(enc: Encoder, ids: Buffer, tokens: number, logitRows: number, logitsOut: Buffer, hostIds: readonly number[] | null): void {
    this.flushing = this.flushLayers && !enc.replayable ? enc : null;
    try {
      this.forward(enc, ids, tokens, logitRows, logitsOut, hostIds);
    } finally {
      this.flushing = null;
    }
  }

  /** The working buffers of the forward being recorded, and of the last one (its logits): one token's, or a prompt's. */
  get scratch(): Scratch {
    return this.activeScratch;
  }

  /** The logits of the last step: [logitRows, vocab] f32 (read them only between steps). */
  get logits(): Buffer {
    return this.scratch.get('logits', 'f32', [Math.max(1, this.logitRows), this.config.vocabSize]).slice(0, Math.max(1, this.logitRows));
  }

  /**
   * Records the layers for `tokens` rows at positions position .. position +
   * tokens - 1 from their ids (u32 [tokens] on the device; a prompt's also on
   * the host), writing logits for the last `logitRows` rows into logitsOut
   * [logitRows, vocab].
   */
  protected abstract forward(enc: Encoder, ids: Buffer, tokens: number, logitRows: number, logitsOut: Buffer, hostIds: readonly number[] | null): void;

  /**
   * Sets every cache and state that a prompt of `tokens` tokens reads back
   * to an empty context (what the prompt writes before reading, or never
   * reads, may keep an earlier context's values).
   */
  protected abstract resetState(tokens: number): void;

  protected abstract releaseWeights(): void;

  /**
   * The embedding table, and the output head: the checkpoint's lm_head, else
   * the table (tied embeddings; a GGUF table of blocks is then a GGUF
   * Linear over the same buffer).
   */
  protected embeddingAndHead(names: { readonly embed: TensorRef; readonly lmHead: TensorRef | null }): { table: EmbeddingTable; head: Linear } {
    const table = this.ckpt.table(names.embed);
    const { vocabSize: n, hiddenSize: k } = this.config;
    const head: Linear = names.lmHead !== null
      ? this.ckpt.linear([{ ref: names.lmHead }])
      : table.ggmlType !== undefined
        ? { kind: 'ggml', weight: table.buffer, ggmlType: table.ggmlType, n, k }
        : { kind: 'dense', weight: table.buffer, n, k };
    return { table, head };
  }

  /** Rows of the embedding table for ids, scaled, into out [tokens, hidden] f32. */
  protected embed(enc: Encoder, table: EmbeddingTable, ids: Buffer, out: Buffer, tokens: number, scale = 1): void {
    embedding(enc, {
      table: table.buffer, tableType: table.ggmlType, tokenIds: ids, output: out, vocabSize: table.vocab, hiddenSize: table.hidden, nTokens: tokens, scale,
    });
  }

  private checkLive(): void {
    if (this.released) throw invalid('model', 'the model', 'not released', 'released');
  }

  private pickNext(enc: Encoder, rows: number, logits: Buffer): void {
    const v = this.config.vocabSize;
    const last = logits.slice(rows - 1, rows);
    const value = this.scratch.get('argmax.value', 'f32', [1]);
    const scratch = this.scratch.get('argmax.scratch', 'u32', [argmaxScratchElements(1, v)]);
    argmax(enc, { input: last, outIndex: this.next, outValue: value, rows: 1, nElements: v, scratch });
  }

  /**
   * Runs a prompt from an empty context (the caches are reset) in one
   * encoder, and returns the greedy next token.
   */
  prefill(tokens: readonly number[], opts: PrefillOptions = {}): number {
    this.checkLive();
    const n = tokens.length;
    if (n === 0) throw invalid('prefill', 'tokens', 'a non-empty array of token ids', '[]');
    if (n > this.maxContext) throw invalid('prefill', 'tokens.length', `at most maxContext (${this.maxContext})`, n);
    this.checkIds('prefill', tokens);
    const t0 = performance.now();
    // A prompt of more than one token sizes its own working buffers; those of one token (a recorded decode step's)
    // keep their shapes, so the steps recorded after an earlier prompt replay after this one too.
    this.activeScratch = n === 1 ? this.stepScratch : this.promptScratch;
    this.resetState(n);
    this.position = 0;
    const ids = this.scratch.get('ids', 'u32', [n]);
    ids.write(Uint32Array.from(tokens));
    const rows = opts.allLogits === true ? n : 1;
    const logits = this.scratch.get('logits', 'f32', [rows, this.config.vocabSize]);
    using enc = this.device.encoder();
    this.record(enc, ids, n, rows, logits, tokens);
    this.pickNext(enc, rows, logits);
    const recorded = performance.now() - t0;
    enc.commitAndWait();
    this.hostPrefillMs = recorded + enc.submitMs;
    this.devicePrefillMs = enc.gpuTimeNs / 1e6;
    this.position = n;
    this.logitRows = rows;
    return this.next.read()[0]!;
  }

  /** Feeds the token chosen last and returns the next one (one encoder; reads back the token alone). */
  decode(): number {
    return this.step('decode');
  }

  /**
   * Continues the context with given tokens (a later turn of a conversation),
   * one decode step each, and returns the greedy token after the last.
   */
  feed(tokens: readonly number[]): number {
    this.checkLive();
    if (tokens.length === 0) throw invalid('feed', 'tokens', 'a non-empty array of token ids', '[]');
    this.checkIds('feed', tokens);
    if (this.position + tokens.length > this.maxContext) {
      throw invalid('feed', 'tokens.length', `at most maxContext - position (${this.maxContext - this.position})`, tokens.length);
    }
    let next = 0;
    for (const t of tokens) {
      this.next.write(Uint32Array.of(t));
      next = this.step('feed');
    }
    return next;
  }

  private checkIds(op: string, tokens: readonly number[]): void {
    for (const [i, t] of tokens.entries()) {
      if (!Number.isSafeInteger(t) || t < 0 || t >= this.config.vocabSize) throw invalid(op, `tokens[${i}]`, `an id in [0, ${this.config.vocabSize})`, t);
    }
  }

  private step(op: string): number {
    this.checkLive();
    if (this.position === 0) throw invalid(op, 'the context', 'a prompt run by prefill first', 'empty');
    if (this.position >= this.maxContext) throw invalid(op, 'the context', `shorter than maxContext (${this.maxContext})`, this.position);
    this.activeScratch = this.stepScratch;
    const logits = this.scratch.get('logits', 'f32', [1, this.config.vocabSize]);
    if (this.replay) this.replayStep(logits);
    else {
      const t0 = performance.now();
      using enc = this.device.encoder();
      this.runStep(enc, logits, t0);
    }
    this.position += 1;
    this.logitRows = 1;
    return this.next.read()[0]!;
  }

  /** Records a decode step into enc and runs it; its host time counts from t0 (ms) through the submission. */
  private runStep(enc: Encoder, logits: Buffer, t0: number): void {
    this.record(enc, this.next, 1, 1, logits, null);
    this.pickNext(enc, 1, logits);
    const recordMs = performance.now() - t0;
    enc.commitAndWait();
    this.hostStepMs = recordMs + enc.submitMs;
    this.deviceStepMs = enc.gpuTimeNs / 1e6;
    this.stepDispatches = enc.dispatchCount;
    this.stepBarriers = enc.barrierCount;
  }

  /**
   * One decode step through a recorded one: the slot of this position's
   * parity is recorded (and run) at its first step, then replayed with its
   * per-step ops re-planned for each position, after later prompts too. While a
   * replay runs, the other slot is patched for the next position (its
   * positions buffer and inline bytes are its own: nothing the running step
   * reads), so a step's host share is its submission alone; a patch made
   * ahead for a position that does not come (a prompt in between) is
   * patched again for the one that does.
   */
  private replayStep(logits: Buffer): void {
    const t0 = performance.now();
    const slot = this.position % 2;
    const kept = this.stepEncoders[slot]!;
    if (kept === null) {
      const enc = this.device.encoder({ replayable: true });
      const patches = new StepPatches();
      this.steps = patches;
      this.recordingSlot = slot;
      try {
        this.runStep(enc, logits, t0);
      } catch (e) {
        enc.release();
        throw e;
      } finally {
        this.steps = null;
        this.recordingSlot = null;
      }
      this.stepEncoders[slot] = { enc, patches, positions: this.slotPositions(slot), patchedAt: this.position };
      return;
    }
    if (kept.patchedAt !== this.position) this.patchStep(kept, this.position);
    const patchMs = performance.now() - t0;
    kept.enc.replayStart();
    try {
      const other = this.stepEncoders[1 - slot]!;
      if (other !== null && this.position + 1 < this.maxContext) this.patchStep(other, this.position + 1);
    } finally {
      kept.enc.wait();
    }
    this.hostStepMs = patchMs + kept.enc.submitMs;
    this.deviceStepMs = kept.enc.gpuTimeNs / 1e6;
  }

  /** Patches a recorded step for `position`: its positions buffer and its per-step ops' inline bytes. */
  private patchStep(s: StepEncoder, position: number): void {
    s.positions.write(Uint32Array.of(position));
    for (const op of s.patches.ops) patchPlan(s.enc, op.first, op.planAt(position));
    s.patchedAt = position;
  }

  /** A recorded step's positions buffer (u32 [1]). */
  private slotPositions(slot: number): Buffer {
    return this.stepScratch.get(`positions.step${slot}`, 'u32', [1]);
  }

  /**
   * Releases the decode steps recorded for replay and what they hold; the
   * next step of each parity records afresh. (A prompt keeps them: they bind
   * only one token's working buffers, the caches and their own positions.)
   */
  dropRecordedSteps(): void {
    for (const s of this.stepEncoders) s?.enc.release();
    this.stepEncoders = [null, null];
  }

  /** The prompt's greedy continuation: the token after the prompt, then `steps` more. */
  generate(prompt: readonly number[], steps: number): number[] {
    const out = [this.prefill(prompt)];
    for (let i = 0; i < steps; i++) out.push(this.decode());
    return out;
  }

  /**
   * Positions position .. position + n - 1 as u32 [n] on the device (while
   * a decode step is recorded for replay, its slot's buffer).
   */
  protected positions(n: number): Buffer {
    const p = this.recordingSlot === null ? this.scratch.get('positions', 'u32', [n]) : this.slotPositions(this.recordingSlot);
    p.write(Uint32Array.from({ length: n }, (_, i) => this.position + i));
    return p;
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    this.dropRecordedSteps();
    this.releaseWeights();
    this.ckpt.release();
    this.stepScratch.release();
    this.promptScratch.release();
    this.next.release();
  }

  [Symbol.dispose](): void {
    this.release();
  }
}

/** config.json's MLX affine quantization ({ group_size, bits }), or null. */
export function quantizationOf(config: Record<string, unknown>): AffineQuantization | null {
  const q = config['quantization'] ?? config['quantization_config'];
  if (q === undefined || q === null) return null;
  const o = q as Record<string, unknown>;
  const groupSize = o['group_size'], bits = o['bits'];
  if (typeof groupSize !== 'number' || typeof bits !== 'number') throw invalid('loadModel', 'config.json quantization', '{ group_size, bits }', JSON.stringify(q));
  return { groupSize, bits };
}
