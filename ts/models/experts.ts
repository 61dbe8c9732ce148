// A MoE layer's routed experts on the device as the per-expert products take
// them (blocks.ts RoutedExperts), from any layout ts/weights describes: fused
// gate_up tensors [E, 2I, H] (transformers: the gate and up projections are
// two views of one buffer, expert rows 2I apart), one tensor per expert
// (stacked at load), or stacked gate / up / down tensors (mlx's switch_mlp);
// dense (f32, bf16, f16) or MLX affine-quantized (packed u32 with bf16 or
// f16 scales and biases, kept as stored).

import type { Buffer } from '../buffer.ts';
import type { Experts, TensorRef } from '../weights/index.ts';
import { invalid } from '../validate.ts';
import type { ExpertWeights, RoutedExperts } from './blocks.ts';
import type { Checkpoint } from './checkpoint.ts';

/** A shared expert's three projections ([I, H], [I, H], [H, I] as stored). */
export interface SharedExpertRefs {
  readonly gate: TensorRef;
  readonly up: TensorRef;
  readonly down: TensorRef;
}

/**
 * The experts of one layer. `widen`: dense 16-bit experts go to the device
 * as f32 (what the 'exact' precision takes: the products then see the f32
 * activations unrounded, at twice the memory). perExpertScale (Gemma 4's
 * router scale per expert) multiplies each expert's routing weight; ones
 * when null. `shared`: a shared expert of the experts' width, stored as they
 * are (the same block type, or quantization and dtypes); its rows are then
 * stacked after the routed experts' as expert numExperts (sharedSlot), so
 * that a decode step runs it as one more slot of the per-expert products.
 * Another shared expert is left out (sharedSlot false).
 */
export function expertsFor(ck: Checkpoint, ex: Experts, numExperts: number, intermediate: number, hidden: number,
  act: RoutedExperts['act'], perExpertScale: Float32Array | null, widen: boolean, where: string,
  shared: SharedExpertRefs | null = null): RoutedExperts {
  const E = numExperts, I = intermediate, H = hidden;
  if (ex.layout === 'per_expert' && ex.count !== E) throw invalid('loadModel', `${where} experts`, `${E} experts (config.json)`, ex.count);
  const refs: TensorRef[] = ex.layout === 'gate_up' ? [ex.gateUp, ex.down] : ex.layout === 'stacked' ? [ex.gate, ex.up, ex.down] : [...ex.gate, ...ex.up, ...ex.down];
  const ggml = refs.filter((r) => ck.ggmlTypeOf(r.name) !== null);
  if (ggml.length > 0 && ggml.length < refs.length) {
    const dense = refs.find((r) => ck.ggmlTypeOf(r.name) === null)!;
    throw invalid('loadModel', `${where} experts (${dense.name})`, `GGUF blocks like ${ggml[0]!.name}`, ck.source.info(dense.name).dtype);
  }
  const quantized = refs.filter((r) => r.scales !== undefined);
  if (quantized.length > 0 && quantized.length < refs.length) {
    const dense = refs.find((r) => r.scales === undefined)!;
    throw invalid('loadModel', `${where} experts (${dense.name})`, 'MLX affine-quantized like the other expert tensors', 'dense');
  }
  const routedParts = (which: 'gate' | 'up' | 'down'): TensorRef[] => {
    if (ex.layout === 'per_expert') return [...ex[which]];
    if (ex.layout === 'stacked') return [ex[which]];
    return [which === 'down' ? ex.down : ex.gateUp];
  };
  // The shared expert as expert E where it is stored as the routed ones are (a fused gate_up tensor's expert rows
  // are its gate's, then its up's).
  const slot = shared !== null && (['gate', 'up', 'down'] as const).every((w) => sameStorage(ck, routedParts(w)[0]!, shared[w]));
  const parts = (which: 'gate' | 'up' | 'down'): TensorRef[] => {
    if (!slot) return routedParts(which);
    const extra = ex.layout === 'gate_up' && which !== 'down' ? [shared!.gate, shared!.up] : [shared![which]];
    return [...routedParts(which), ...extra];
  };
  // Experts in the stacks.
  const nE = E + (slot ? 1 : 0);
  // Rows (n) and columns (k) of one expert's projection.
  const dims = { gate: [I, H], up: [I, H], down: [H, I] } as const;
  const load = (which: 'gate' | 'up' | 'down'): ExpertWeights => {
    const [n, k] = dims[which];
    const fused = ex.layout === 'gate_up' && which !== 'down';
    const expertRows = fused ? 2 * n : n;
    const rows = nE * expertRows;
    // A fused tensor's gate and up: views of (nE - 1) * 2I + I rows, the up's starting I rows in (the products
    // take exact sizes).
    const at = (b: Buffer, width: number) => (fused
      ? b.view(b.dtype, [(nE - 1) * expertRows + n, width], (which === 'up' ? n : 0) * width * (b.byteLength / b.elementCount))
      : b);
    const check = (b: Buffer, width: number, what: string) => {
      if (b.elementCount !== rows * width) {
        throw invalid('loadModel', `${where} experts' ${which} ${what}`, `${rows} rows of ${width} (${nE} experts)`, `${b.elementCount} elements`);
      }
    };
    const ps = parts(which);
    if (ggml.length > 0) {
      const gt = ck.ggmlTypeOf(ps[0]!.name)!;
      for (const p of ps) {
        if (ck.ggmlTypeOf(p.name) !== gt) throw invalid('loadModel', `${where} experts' ${which} (${p.name})`, `${gt} like ${ps[0]!.name}`, ck.source.info(p.name).dtype);
      }
      const info = ck.source.info(ps[0]!.name);
      const rowBytes = info.storage.shape[info.storage.shape.length - 1]!;
      const kStored = info.shape[info.shape.length - 1]!;
      if (kStored !== k) throw invalid('loadModel', `${where} experts' ${which} inner size`, `${k} (config.json)`, kStored);
      const w = fused && which === 'up' ? gateUpDense! : ck.stack(ps.map((ref) => ({ ref })), rowBytes, false);
      if (fused && which === 'gate') gateUpDense = w;
      check(w, rowBytes, 'blocks');
      return { kind: 'ggml', weight: at(w, rowBytes), expertRows, ggmlType: gt, rowBytes };
    }
    if (quantized.length === 0) {
      const w = fused && which === 'up' ? gateUpDense! : ck.stack(ps.map((ref) => ({ ref })), k, widen);
      if (fused && which === 'gate') gateUpDense = w;
      check(w, k, 'weight');
      return { kind: 'dense', weight: at(w, k), expertRows };
    }
    const q = ck.quantization;
    if (q === null) throw invalid('loadModel', `${where} experts (${ps[0]!.name})`, 'config.json "quantization" beside scales and biases', 'none');
    if (k % q.groupSize !== 0) throw invalid('loadModel', `${where} experts' ${which} inner size`, `a multiple of the group size ${q.groupSize}`, k);
    const packed = (k * q.bits) / 32, groups = k / q.groupSize;
    let set = fused && which === 'up' ? gateUpAffine : null;
    if (set === null) {
      set = {
        weight: ck.stack(ps.map((ref) => ({ ref })), packed, false),
        scales: ck.stack(ps.map((ref) => ({ ref: ref.scales! })), groups, false),
        biases: ck.stack(ps.map((ref) => ({ ref: ref.biases! })), groups, false),
      };
      if (fused) gateUpAffine = set;
    }
    check(set.weight, packed, 'packed weight');
    check(set.scales, groups, 'scales');
    check(set.biases, groups, 'biases');
    if (set.weight.dtype !== 'u32') throw invalid('loadModel', `${where} experts' ${which} packed weight`, 'U32', set.weight.dtype);
    for (const [what, b] of [['scales', set.scales], ['biases', set.biases]] as const) {
      if (b.dtype !== 'bf16' && b.dtype !== 'f16') throw invalid('loadModel', `${where} experts' ${which} ${what}`, 'BF16 or F16 (the per-expert products take 16-bit scales)', b.dtype);
    }
    return {
      kind: 'affine', weight: at(set.weight, packed), scales: at(set.scales, groups), biases: at(set.biases, groups), expertRows,
      groupSize: q.groupSize, bits: q.bits,
    };
  };
  let gateUpDense: Buffer | null = null;
  let gateUpAffine: { weight: Buffer; scales: Buffer; biases: Buffer } | null = null;
  const gate = load('gate'), up = load('up'), down = load('down');
  // GGUF experts take f32 activations (quantized_matmul_id_ggml).
  const dtypeOf = (w: ExpertWeights) => (w.kind === 'dense' ? w.weight.dtype : w.kind === 'ggml' ? 'f32' : w.scales.dtype);
  const dtype = dtypeOf(gate);
  for (const [which, w] of [['up', up], ['down', down]] as const) {
    if (dtypeOf(w) !== dtype) throw invalid('loadModel', `${where} experts' ${which} dtype`, `the gate's ${dtype}`, dtypeOf(w));
  }
  if (dtype !== 'f32' && dtype !== 'bf16' && dtype !== 'f16') throw invalid('loadModel', `${where} experts' dtype`, 'f32, bf16 or f16', dtype);
  const scale = perExpertScale ?? new Float32Array(E).fill(1);
  if (scale.length !== E) throw invalid('loadModel', `${where} per-expert scale`, `${E} values`, scale.length);
  return { gate, up, down, numExperts: E, sharedSlot: slot, intermediate: I, hidden: H, act, dtype, perExpertScale: ck.f32(scale, [E]) };
}

/**
 * Whether tensor b is stored as a (one GGUF block type; or both MLX affine
 * with the same packed, scale and bias dtypes; or both dense of one dtype),
 * with the same inner size: b's rows then stack after a's.
 */
function sameStorage(ck: Checkpoint, a: TensorRef, b: TensorRef): boolean {
  const ia = ck.source.info(a.name), ib = ck.source.info(b.name);
  if (ia.dtype !== ib.dtype || ia.shape[ia.shape.length - 1] !== ib.shape[ib.shape.length - 1]) return false;
  if (ck.ggmlTypeOf(a.name) !== ck.ggmlTypeOf(b.name)) return false;
  if ((a.scales === undefined) !== (b.scales === undefined) || (a.biases === undefined) !== (b.biases === undefined)) return false;
  const dt = (r: string | undefined) => (r === undefined ? null : ck.source.info(r).dtype);
  return dt(a.scales) === dt(b.scales) && dt(a.biases) === dt(b.biases);
}
