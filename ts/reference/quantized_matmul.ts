// CPU reference of the quantized_matmul family: MLX's affine quantizer, the
// packing of its rows, and dequantize-then-multiply in float64. The format is
// written down in ts/ops/quantized_matmul.ts.

import { bf16BitsToF32, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits } from '../dtype.ts';
import { denseAbsRef, denseRef } from './dense.ts';

/** The dtype scales and biases are stored in (the unquantized weight's). */
export type AffineScaleDType = 'f32' | 'f16' | 'bf16';

/** Bytes of one packed row of k values: 4 * ceil(k / 8) for 4 bits, 3 * ceil(k / 4) for 6, 4 * ceil(k / 4) for 8. */
export function affineRowBytes(k: number, bits: number): number {
  return bits === 6 ? 3 * Math.ceil(k / 4) : 4 * Math.ceil((k * bits) / 32);
}

/**
 * Packs q [rows, k] (each 0 .. 2^bits - 1) into rows of affineRowBytes(k,
 * bits) bytes: value i of a row at bits [i * bits, (i + 1) * bits) of the
 * row, bit b being bit b % 8 of byte b / 8 (so bit b % 32 of little-endian
 * word b / 32).
 */
export function affinePack(q: ArrayLike<number>, rows: number, k: number, bits: number): Uint8Array {
  const rb = affineRowBytes(k, bits);
  const out = new Uint8Array(rows * rb);
  for (let r = 0; r < rows; r++) {
    for (let i = 0; i < k; i++) {
      const v = q[r * k + i]!;
      if (!Number.isInteger(v) || v < 0 || v >= 2 ** bits) throw new RangeError(`affinePack: q[${r}, ${i}] = ${v} is not a ${bits}-bit value`);
      for (let b = 0; b < bits; b++) {
        if ((v >> b) & 1) {
          const bit = i * bits + b;
          out[r * rb + (bit >> 3)]! |= 1 << (bit & 7);
        }
      }
    }
  }
  return out;
}

/** The q values [rows, k] of rows packed as affinePack packs them. */
export function affineUnpack(packed: Uint8Array, rows: number, k: number, bits: number): Uint8Array {
  const rb = affineRowBytes(k, bits);
  const q = new Uint8Array(rows * k);
  for (let r = 0; r < rows; r++) {
    for (let i = 0; i < k; i++) {
      let v = 0;
      for (let b = 0; b < bits; b++) {
        const bit = i * bits + b;
        v |= ((packed[r * rb + (bit >> 3)]! >> (bit & 7)) & 1) << b;
      }
      q[r * k + i] = v;
    }
  }
  return q;
}

/** The packed bytes as the little-endian uint32 words MLX stores (the byte length a multiple of 4). */
export function affineWords(packed: Uint8Array): Uint32Array {
  if (packed.byteLength % 4 !== 0) throw new RangeError(`affineWords: ${packed.byteLength} bytes are not whole words`);
  const dv = new DataView(packed.buffer, packed.byteOffset, packed.byteLength);
  return Uint32Array.from({ length: packed.byteLength / 4 }, (_, i) => dv.getUint32(4 * i, true));
}

/** x rounded to the dtype (round to nearest even), as a number. */
export function affineRound(dtype: AffineScaleDType, x: number): number {
  if (dtype === 'bf16') return bf16BitsToF32(f32ToBf16Bits(x));
  if (dtype === 'f16') return f16BitsToF32(f32ToF16Bits(x));
  return Math.fround(x);
}

/** Round half to even (C's rint in the default rounding mode). */
function rint(x: number): number {
  const f = Math.floor(x);
  const d = x - f;
  if (d < 0.5) return f;
  if (d > 0.5) return f + 1;
  return f % 2 === 0 ? f : f + 1;
}

export interface AffineQuantized {
  /** q [rows, k] */
  q: Uint8Array;
  /** The packed rows (affinePack): MLX's uint32 [rows, k * bits / 32] as bytes. */
  packed: Uint8Array;
  /** [rows, k / groupSize], the values stored in the scale dtype. */
  scales: Float64Array;
  /** [rows, k / groupSize], the values stored in the scale dtype. */
  biases: Float64Array;
}

/**
 * MLX's affine quantization of w [rows, k] (k a multiple of groupSize), in
 * the float32 arithmetic of mlx.core.quantize (mlx/backend/cpu/quantized.cpp)
 * for each group of groupSize consecutive values of a row:
 *   n = 2^bits - 1; s = max((max - min) / n, 1e-7), negated unless
 *   |min| > |max|; edge = min if |min| > |max| else max;
 *   q0 = rint(edge / s); if q0 != 0: s = edge / q0, bias = edge, else bias = 0;
 *   q = clamp(rint((w - bias) / s), 0, n);
 * scale s and bias stored rounded to scaleDtype (q computed with the f32
 * values). The edge of larger magnitude is thus represented exactly, and so
 * is 0 when the group's range holds it near a step. MLX's Metal quantizer
 * starts each group's max at 0 rather than at its first value (the two agree
 * unless all of a group's values are negative). w's values are taken as
 * float32 (Math.fround).
 */
export function affineQuantize(w: ArrayLike<number>, rows: number, k: number, groupSize: number, bits: number,
  scaleDtype: AffineScaleDType = 'bf16'): AffineQuantized {
  if (k % groupSize !== 0) throw new RangeError(`affineQuantize: k = ${k} is not a multiple of the group size ${groupSize}`);
  const f = Math.fround;
  const nBins = 2 ** bits - 1;
  const eps = f(1e-7);
  const groups = k / groupSize;
  const q = new Uint8Array(rows * k);
  const scales = new Float64Array(rows * groups);
  const biases = new Float64Array(rows * groups);
  for (let r = 0; r < rows; r++) {
    for (let g = 0; g < groups; g++) {
      const at = r * k + g * groupSize;
      let lo = Infinity;
      let hi = -Infinity;
      for (let i = 0; i < groupSize; i++) {
        const v = f(w[at + i]!);
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
      }
      const mask = Math.abs(lo) > Math.abs(hi);
      let scale = Math.max(f(f(hi - lo) / nBins), eps);
      if (!mask) scale = -scale;
      const edge = mask ? lo : hi;
      const q0 = rint(f(edge / scale));
      let bias = 0;
      if (q0 !== 0) {
        scale = f(edge / q0);
        bias = edge;
      }
      for (let i = 0; i < groupSize; i++) {
        const v = rint(f(f(f(w[at + i]!) - bias) / scale));
        q[at + i] = Math.min(Math.max(v, 0), nBins);
      }
      scales[r * groups + g] = affineRound(scaleDtype, scale);
      biases[r * groups + g] = affineRound(scaleDtype, bias);
    }
  }
  return { q, packed: affinePack(q, rows, k, bits), scales, biases };
}

/**
 * w [rows, k] = scales[r, i / gs] * q[r, i] + biases[r, i / gs] in float64,
 * from rows packed as affinePack packs them (any k; ceil(k / gs) groups).
 */
export function affineDequantize(packed: Uint8Array, scales: ArrayLike<number>, biases: ArrayLike<number>, rows: number, k: number,
  groupSize: number, bits: number): Float64Array {
  const q = affineUnpack(packed, rows, k, bits);
  const groups = Math.ceil(k / groupSize);
  const w = new Float64Array(rows * k);
  for (let r = 0; r < rows; r++) {
    for (let i = 0; i < k; i++) {
      const g = r * groups + Math.floor(i / groupSize);
      w[r * k + i] = scales[g]! * q[r * k + i]! + biases[g]!;
    }
  }
  return w;
}

/**
 * y [m, n] = x [m, k] W^T with W [n, k] dequantized (affineDequantize), in
 * float64; and sum_k |x w| per output, the scale of its rounding error.
 */
export function affineQuantizedMatmulRef(x: ArrayLike<number>, packed: Uint8Array, scales: ArrayLike<number>, biases: ArrayLike<number>,
  m: number, n: number, k: number, groupSize: number, bits: number): { y: Float64Array; abs: Float64Array } {
  const w = affineDequantize(packed, scales, biases, n, k, groupSize, bits);
  return { y: denseRef(x, w, m, n, k), abs: denseAbsRef(x, w, m, n, k) };
}
