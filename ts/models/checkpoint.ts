// What a forward pass takes from a checkpoint: its tensors on the device,
// in the dtype they are stored in (or widened to f32 when asked), and the
// host-side reshapes a model needs once at load (rows reordered, stacked or
// scaled). Every tensor is found through ts/weights' description of the
// model, so a missing or unexpected tensor is refused by name before
// anything is uploaded.

import type { Buffer } from '../buffer.ts';
import type { Device } from '../device.ts';
import type { DType } from '../dtype.ts';
import { fromBf16, fromF16 } from '../dtype.ts';
import { MlxError } from '../errors.ts';
import { GGML_QUANT_TYPES, type GgmlQuantType, ggmlDequantizeRef } from '../ops/quantized_matmul_ggml.ts';
import type { TensorRef, WeightSource } from '../weights/index.ts';
import type { Linear, Projection } from './blocks.ts';

/** How weights go to the device. */
export type WeightDtype =
  /** As stored (bf16 stays bf16): the products take f32 activations against the stored values. */
  | 'stored'
  /** Every floating-point weight widened to f32 (exact, twice the memory of bf16). */
  | 'f32';

/** Rows of a tensor (all of them, or rows[i] = the stored row at new row i), then pad zero rows. */
export interface RowsPart<R = TensorRef> {
  readonly ref: R;
  readonly rows?: readonly number[];
  readonly pad?: number;
}

/**
 * Layers of a Projection start at multiples of this many rows: their weight
 * rows, scales and f32 outputs then start at 16-byte multiples (a view's
 * alignment) whatever the row width.
 */
export const PROJECTION_ROWS = 8;

/** MLX affine quantization of a checkpoint (config.json's "quantization"). */
export interface AffineQuantization {
  readonly groupSize: number;
  readonly bits: number;
}

/** An embedding table on the device: floats, or GGUF blocks (u8 rows of whole blocks of ggmlType). */
export interface EmbeddingTable {
  readonly buffer: Buffer;
  readonly vocab: number;
  readonly hidden: number;
  readonly ggmlType?: GgmlQuantType;
}

/** The uploads of one model, released together. */
export class Checkpoint {
  private readonly owned: Buffer[] = [];
  /**
   * Whether MLX affine layers keep scales and biases stored as BF16 in bf16
   * (their products then round the f32 activations to bf16, as MLX runs a
   * bf16 model) rather than widened to f32 (products of the f32 activations
   * as they are, on slower kernels). A model with the 'fast' precision sets it
   * before it loads its layers; weights widened to f32 never keep them.
   */
  affineScales16 = false;
  constructor(
    readonly source: WeightSource,
    readonly device: Device,
    readonly dtype: WeightDtype,
    readonly quantization: AffineQuantization | null,
  ) {}

  protected own(b: Buffer): Buffer {
    this.owned.push(b);
    return b;
  }

  /**
   * The tensor's values on the host as stored, as f32 (from F32, BF16 or F16
   * storage, or GGUF blocks of the types quantized_matmul_ggml reads,
   * dequantized: small tensors a model folds at load, like Gemma 4's router).
   */
  host(ref: TensorRef | string): Float32Array {
    const name = typeof ref === 'string' ? ref : ref.name;
    const t = this.source.info(name);
    const gt = this.ggmlTypeOf(name);
    if (gt !== null) return Float32Array.from(ggmlDequantizeRef(gt, this.source.bytes(name), t.elementCount));
    const v = this.source.view(name);
    if (t.dtype === 'F32') return new Float32Array(v as Float32Array);
    if (t.dtype === 'BF16') return fromBf16(v as Uint16Array);
    if (t.dtype === 'F16') return fromF16(new Uint16Array(v.buffer, v.byteOffset, v.length));
    throw new MlxError('UnsupportedDtype', `model: tensor ${name} must be F32, BF16, F16 or GGUF ${GGML_QUANT_TYPES.join(', ')} to be read as numbers (got ${t.dtype})`);
  }

  /**
   * The values of Hugging Face's tensor: the stored ones with llama.cpp's
   * 'neg_exp' undone (GGUF stores Qwen3.6's A_log as -exp(A_log): log(-x)).
   * 'plus_one' is left to onePlus; 'v_heads_tiled' to the model.
   */
  hf(ref: TensorRef): Float32Array {
    const v = this.host(ref);
    if (ref.transforms.includes('neg_exp')) for (let i = 0; i < v.length; i++) v[i] = Math.log(-v[i]!);
    return v;
  }

  /** 1 + w of a norm weight w (Qwen's norms scale by 1 + w): the stored values where GGUF stores 1 + w ('plus_one'), else 1 + the stored. */
  onePlus(ref: TensorRef): Float32Array {
    const w = this.host(ref);
    if (ref.transforms.includes('plus_one')) return w;
    for (let i = 0; i < w.length; i++) w[i] = 1 + w[i]!;
    return w;
  }

  /**
   * The GGUF block type of a tensor stored in blocks, or null for a tensor
   * of floats (any safetensors tensor, GGUF F32 / F16 / BF16). A block type
   * quantized_matmul_ggml does not read is refused by name.
   */
  ggmlTypeOf(name: string): GgmlQuantType | null {
    const t = this.source.info(name);
    if (t.format !== 'gguf' || !t.storage.raw || t.storage.dtype !== 'u8') return null;
    if (!(GGML_QUANT_TYPES as readonly string[]).includes(t.dtype)) {
      throw new MlxError('UnsupportedDtype', `model: GGUF tensor ${name} must be F32, F16, BF16 or one of ${GGML_QUANT_TYPES.join(', ')} (got ${t.dtype})`);
    }
    return t.dtype as GgmlQuantType;
  }

  /** An embedding table [vocab, hidden]: as tensor() uploads it, or GGUF blocks kept as stored (the embedding op gathers and dequantizes rows). */
  table(ref: TensorRef): EmbeddingTable {
    const t = this.source.info(ref.name);
    const gt = this.ggmlTypeOf(ref.name);
    const hidden = t.shape[t.shape.length - 1]!, vocab = t.elementCount / hidden;
    if (gt === null) return { buffer: this.tensor(ref, [vocab, hidden]), vocab, hidden };
    return { buffer: this.blocks(ref.name, vocab), vocab, hidden, ggmlType: gt };
  }

  /** A GGUF tensor's blocks on the device as u8 [rows, bytes of a row]. */
  private blocks(name: string, rows: number): Buffer {
    const bytes = this.source.bytes(name);
    const b = this.own(this.device.alloc('u8', [rows, bytes.byteLength / rows]));
    b.write(bytes);
    return b;
  }

  shape(ref: TensorRef | string): readonly number[] {
    return this.source.info(typeof ref === 'string' ? ref : ref.name).shape;
  }

  /** An f32 device buffer of host values. */
  f32(values: Float32Array, shape: readonly number[]): Buffer {
    const b = this.own(this.device.alloc('f32', shape));
    b.write(values);
    return b;
  }

  /** A tensor on the device: as stored (16-bit floats kept) unless the checkpoint widens to f32. */
  tensor(ref: TensorRef, shape?: readonly number[]): Buffer {
    const t = this.source.info(ref.name);
    const s = shape ?? t.shape;
    if (this.dtype === 'f32' || t.dtype === 'F32') return this.f32(this.host(ref), s);
    if (t.dtype !== 'BF16' && t.dtype !== 'F16') {
      throw new MlxError('UnsupportedDtype', `model: tensor ${ref.name} must be F32, BF16 or F16 here (got ${t.dtype})`);
    }
    const b = this.own(this.device.alloc(t.dtype === 'BF16' ? 'bf16' : 'f16', s));
    const bytes = this.source.bytes(ref.name);
    b.write(new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    return b;
  }

  /** A tensor's rows reordered (rowOrder[i] = the stored row at new row i), or stacked from several tensors, as stored. */
  rowsOf(parts: readonly RowsPart<TensorRef | string>[], rowWidth: number): { data: Uint8Array; dtype: DType; rows: number } {
    let dtype: DType | null = null;
    const chunks: Uint8Array[] = [];
    let rows = 0;
    for (const p of parts) {
      const name = typeof p.ref === 'string' ? p.ref : p.ref.name;
      const t = this.source.info(name);
      const d: DType = t.storage.dtype;
      if (dtype !== null && d !== dtype) throw new MlxError('InvalidArgument', `model: tensors stacked with ${name} must share its dtype ${d} (got ${dtype})`);
      dtype = d;
      const bytes = this.source.bytes(name);
      const rowBytes = rowWidth * bytesOf(d);
      const n = bytes.byteLength / rowBytes;
      const order = p.rows ?? Array.from({ length: n }, (_, i) => i);
      const out = new Uint8Array((order.length + (p.pad ?? 0)) * rowBytes);
      order.forEach((r, i) => out.set(bytes.subarray(r * rowBytes, (r + 1) * rowBytes), i * rowBytes));
      chunks.push(out);
      rows += order.length + (p.pad ?? 0);
    }
    const data = new Uint8Array(chunks.reduce((s, c) => s + c.byteLength, 0));
    let at = 0;
    for (const c of chunks) {
      data.set(c, at);
      at += c.byteLength;
    }
    return { data, dtype: dtype!, rows };
  }

  /** Device buffer of raw rows (rowsOf), widened to f32 when `widen` (by default: when the checkpoint asks) and the rows are 16-bit floats. */
  uploadRows(r: { data: Uint8Array; dtype: DType; rows: number }, rowWidth: number, widen = this.dtype === 'f32'): Buffer {
    if (widen && (r.dtype === 'bf16' || r.dtype === 'f16')) {
      const bits = new Uint16Array(r.data.buffer, r.data.byteOffset, r.data.byteLength / 2);
      return this.f32(r.dtype === 'bf16' ? fromBf16(bits) : fromF16(bits), [r.rows, rowWidth]);
    }
    if (r.dtype === 'f32' || r.dtype === 'bf16' || r.dtype === 'f16' || r.dtype === 'u32' || r.dtype === 'u8') {
      const b = this.own(this.device.alloc(r.dtype, [r.rows, rowWidth]));
      b.write(new DataView(r.data.buffer, r.data.byteOffset, r.data.byteLength));
      return b;
    }
    throw new MlxError('UnsupportedDtype', `model: weight rows must be f32, bf16, f16, packed u32 or GGUF blocks (got ${r.dtype})`);
  }

  /**
   * The rows of several tensors stacked on the device in their stored dtype
   * (packed u32 and GGUF blocks too, rowWidth then in bytes), 16-bit floats
   * widened to f32 when `widen`: a MoE layer's expert tensors.
   */
  stack(parts: readonly RowsPart<TensorRef | string>[], rowWidth: number, widen: boolean): Buffer {
    return this.uploadRows(this.rowsOf(parts, rowWidth), rowWidth, widen);
  }

  /**
   * A linear layer from its weight ([n, k] as stored, MLX affine: packed
   * u32 [n, k * bits / 32] with scales and biases [n, k / groupSize], or
   * GGUF blocks: rows of k / QK blocks, kept as stored); with parts, the
   * rows of several tensors stacked (each optionally reordered, and followed
   * by zero rows; GGUF parts must share one block type and k, and a zero
   * row of blocks is a row of zeros).
   */
  linear(parts: readonly RowsPart[], widen = false): Linear {
    const first = parts[0]!.ref;
    const t = this.source.info(first.name);
    const gt = this.ggmlTypeOf(first.name);
    if (gt !== null) {
      const k = t.shape[t.shape.length - 1]!;
      for (const p of parts) {
        const pt = this.source.info(p.ref.name);
        if (pt.dtype !== t.dtype || pt.shape[pt.shape.length - 1] !== k) {
          throw new MlxError('InvalidArgument', `model: ${p.ref.name}, stacked with ${first.name}, must be ${t.dtype} rows of ${k} (got ${pt.dtype} rows of ${pt.shape[pt.shape.length - 1]})`);
        }
      }
      const rowBytes = t.storage.shape[t.storage.shape.length - 1]!;
      const single = parts.length === 1 && parts[0]!.rows === undefined && !parts[0]!.pad;
      const weight = single ? this.blocks(first.name, t.elementCount / k) : this.uploadRows(this.rowsOf(parts, rowBytes), rowBytes);
      return { kind: 'ggml', weight, ggmlType: gt, n: weight.shape[0]!, k };
    }
    if (first.scales !== undefined || first.biases !== undefined) {
      const q = this.quantization;
      if (q === null) throw new MlxError('InvalidArgument', `model: ${first.name} has scales and biases, so config.json must have "quantization" (got none)`);
      const packed = t.shape[1]!;
      const k = (packed * 32) / q.bits;
      const groups = k / q.groupSize;
      const w = this.uploadRows(this.rawRows(parts.map((p) => ({ ...p, ref: p.ref.name }))), packed);
      const scaleParts = parts.map((p) => ({ ...p, ref: p.ref.scales! }));
      const biasParts = parts.map((p) => ({ ...p, ref: p.ref.biases! }));
      if (this.keepsScales16([...scaleParts, ...biasParts].map((p) => p.ref))) {
        const scales16 = this.uploadRows(this.rowsOf(scaleParts, groups), groups, false);
        const biases16 = this.uploadRows(this.rowsOf(biasParts, groups), groups, false);
        return { kind: 'affine', weight: w, scales: scales16, biases: biases16, n: w.shape[0]!, k, groupSize: q.groupSize, bits: q.bits };
      }
      const scales = this.f32Rows(scaleParts, groups);
      const biases = this.f32Rows(biasParts, groups);
      return { kind: 'affine', weight: w, scales, biases, n: w.shape[0]!, k, groupSize: q.groupSize, bits: q.bits };
    }
    const k = t.shape[t.shape.length - 1]!;
    const single = parts.length === 1 && parts[0]!.rows === undefined && !parts[0]!.pad;
    if (widen || this.widensF16(t.dtype, this.rowsIn(parts))) {
      const weight = this.uploadRows(this.rowsOf(parts, k), k, true);
      return { kind: 'dense', weight, n: weight.shape[0]!, k };
    }
    const weight = single ? this.tensor(first, [t.elementCount / k, k]) : this.uploadRows(this.rowsOf(parts, k), k);
    return { kind: 'dense', weight, n: weight.shape[0]!, k };
  }

  /**
   * F16 layers of a row count not a multiple of 4 (a GGUF file's one-row
   * shared-expert gate) go to the device as f32: the f16 vector product
   * takes one input row at a time, into output rows that start at 16-byte
   * multiples only when n is a multiple of 4.
   */
  private widensF16(dtype: string, rows: number): boolean {
    return dtype === 'F16' && rows % 4 !== 0;
  }

  private rowsIn(layer: readonly RowsPart[]): number {
    return layer.reduce((acc, p) => acc + (p.rows?.length ?? this.source.info(p.ref.name).shape[0]!) + (p.pad ?? 0), 0);
  }

  /** Whether an affine layer's scale and bias tensors stay bf16 (affineScales16, all of them stored as BF16). */
  protected keepsScales16(names: readonly string[]): boolean {
    return this.affineScales16 && this.dtype === 'stored' && names.every((n) => this.source.info(n).dtype === 'BF16');
  }

  /**
   * Linear layers that read one input (each given as linear's parts),
   * grouped by how they are stored: the layers of a group stacked into one
   * Linear, each but the last followed by zero rows up to a multiple of
   * PROJECTION_ROWS; every layer also a row view of its group's Linear.
   */
  projection(layers: readonly (readonly RowsPart[])[]): Projection {
    const byFormat = new Map<string, number[]>();
    layers.forEach((l, i) => {
      const key = this.formatOf(l);
      const members = byFormat.get(key);
      if (members === undefined) byFormat.set(key, [i]);
      else members.push(i);
    });
    const rowsIn = (layer: readonly RowsPart[]) => this.rowsIn(layer);
    const out: Linear[] = new Array(layers.length);
    const groups: Projection['groups'][number][] = [];
    for (const [key, members] of byFormat) {
      const starts: number[] = [];
      let at = 0;
      const parts = members.flatMap((m, j) => {
        const layer = layers[m]!;
        const n = rowsIn(layer);
        starts.push(at);
        const pad = j === members.length - 1 ? 0 : Math.ceil(n / PROJECTION_ROWS) * PROJECTION_ROWS - n;
        at += n + pad;
        return pad === 0 ? layer : [...layer.slice(0, -1), { ...layer[layer.length - 1]!, pad }];
      });
      const whole = this.linear(parts, key.startsWith('dense F16 widened'));
      members.forEach((m, j) => {
        out[m] = members.length === 1 ? whole : Checkpoint.rowsView(whole, starts[j]!, rowsIn(layers[m]!));
      });
      groups.push({ linear: whole, members, starts });
    }
    return { layers: out, groups };
  }

  /** What decides whether layers can share one product: the kind, the stored (or widened) dtype and the row width. */
  private formatOf(layer: readonly RowsPart[]): string {
    const first = layer[0]!.ref;
    const t = this.source.info(first.name);
    if (first.scales !== undefined) {
      return `affine ${t.shape[1]} ${this.keepsScales16([first.scales, first.biases!]) ? 'bf16' : 'f32'}`;
    }
    const gt = this.ggmlTypeOf(first.name);
    if (gt !== null) return `ggml ${gt} ${t.shape[t.shape.length - 1]}`;
    // F16 rows widened at load stay apart from stored F32 ones (rowsOf stacks one stored dtype).
    const dtype = this.dtype === 'f32' || t.dtype === 'F32' ? 'F32' : this.widensF16(t.dtype, this.rowsIn(layer)) ? 'F16 widened' : t.dtype;
    return `dense ${dtype} ${t.shape[t.shape.length - 1]}`;
  }

  private rawRows(parts: readonly RowsPart<string>[]) {
    const first = this.source.info(parts[0]!.ref);
    const width = first.storage.shape[first.storage.shape.length - 1]!;
    return this.rowsOf(parts, width);
  }

  private f32Rows(parts: readonly RowsPart<string>[], width: number): Buffer {
    const values = parts.map((p) => this.host(p.ref));
    const total = parts.reduce((acc, p, i) => acc + (p.rows?.length ?? values[i]!.length / width) + (p.pad ?? 0), 0);
    const out = new Float32Array(total * width);
    let at = 0;
    parts.forEach((p, i) => {
      const v = values[i]!;
      if (p.rows === undefined) {
        out.set(v, at * width);
        at += v.length / width;
      } else {
        for (const r of p.rows) out.set(v.subarray(r * width, (r + 1) * width), width * at++);
      }
      at += p.pad ?? 0;
    });
    return this.f32(out, [total, width]);
  }

  /** A Linear over rows [start, start + count) of another (views; starts at 16-byte multiples). */
  static rowsView(lin: Linear, start: number, count: number): Linear {
    const view = (b: Buffer) => {
      const width = b.shape[b.shape.length - 1]!;
      return b.view(b.dtype, [count, width], start * width * bytesOf(b.dtype));
    };
    if (lin.kind === 'dense') return { kind: 'dense', weight: view(lin.weight), n: count, k: lin.k };
    if (lin.kind === 'ggml') return { ...lin, weight: view(lin.weight), n: count };
    return { ...lin, weight: view(lin.weight), scales: view(lin.scales), biases: view(lin.biases), n: count };
  }

  release(): void {
    for (const b of this.owned) b.release();
    this.owned.length = 0;
  }
}

function bytesOf(d: DType): number {
  return d === 'f16' || d === 'bf16' || d === 'u16' ? 2 : d === 'u8' ? 1 : 4;
}
