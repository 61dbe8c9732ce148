// CPU reference of the quantized_matmul_ggml family: llama.cpp's reference
// quantizers (ggml-quants.c, quantize_row_<t>_ref) for Q4_0, Q8_0, Q4_K, Q5_K
// and Q6_K in float32 arithmetic, the float64 dequantization of each block
// layout, and dequantize-then-multiply. The layouts are written down in
// ts/ops/quantized_matmul_ggml.ts.

import { f16BitsToF32, f32ToF16Bits } from '../dtype.ts';
import { ggmlBlockOf, ggmlRowBytesOf, type GgmlQuantType } from '../ops/quantized_matmul_ggml.ts';
import { denseAbsRef, denseRef } from './dense.ts';

const f = Math.fround;
const half = (x: number): number => f16BitsToF32(f32ToF16Bits(x));

/** C's float-to-int rounding of nearest_int (round half to even), on an f32 value. */
function nearestInt(x: number): number {
  const r = Math.round(x);
  return Math.abs(x - Math.trunc(x)) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** roundf: half away from zero. */
const roundAway = (x: number): number => Math.sign(x) * Math.floor(Math.abs(x) + 0.5);

const clamp = (v: number, lo: number, hi: number): number => Math.max(lo, Math.min(hi, v));

/** Writes the f16 bits of x (rounded to nearest even) at byte i of b, little-endian. */
function putHalf(b: Uint8Array, i: number, x: number): void {
  const h = f32ToF16Bits(x);
  b[i] = h & 0xff;
  b[i + 1] = h >> 8;
}

const getHalf = (b: Uint8Array, i: number): number => f16BitsToF32(b[i]! | (b[i + 1]! << 8));

// ---- the reference quantizers (llama.cpp's quantize_row_<t>_ref) ----

/** Q4_0: d = max / -8 (max the value of largest magnitude), q = min(15, trunc(x / d + 8.5)). */
function quantizeQ4_0(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  let amax = 0;
  let max = 0;
  for (let j = 0; j < 32; j++) {
    const v = f(x[at + j]!);
    if (amax < Math.abs(v)) {
      amax = Math.abs(v);
      max = v;
    }
  }
  const d = f(max / -8);
  const id = d !== 0 ? f(1 / d) : 0;
  putHalf(out, o, d);
  for (let j = 0; j < 16; j++) {
    const x0 = f(f(x[at + j]!) * id);
    const x1 = f(f(x[at + 16 + j]!) * id);
    const q0 = Math.min(15, Math.trunc(f(x0 + 8.5)));
    const q1 = Math.min(15, Math.trunc(f(x1 + 8.5)));
    out[o + 2 + j] = q0 | (q1 << 4);
  }
}

/** Q8_0: d = amax / 127, q = roundf(x / d). */
function quantizeQ8_0(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  let amax = 0;
  for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(f(x[at + j]!)));
  const d = f(amax / 127);
  const id = d !== 0 ? f(1 / d) : 0;
  putHalf(out, o, d);
  for (let j = 0; j < 32; j++) out[o + 2 + j] = roundAway(f(f(x[at + j]!) * id)) & 0xff;
}

/**
 * make_qkx2_quants: the scale and min (returned as -min, >= 0) of n values
 * with weights w, q in [0, nmax], searching nstep + 1 scales around the
 * min-max one for the least weighted squared error. L receives the q.
 */
function makeQkx2(n: number, nmax: number, x: Float32Array, w: Float32Array, L: Uint8Array, rmin: number, rdelta: number,
  nstep: number): { scale: number; min: number } {
  let min = x[0]!;
  let max = x[0]!;
  let sumW = w[0]!;
  let sumX = f(sumW * x[0]!);
  for (let i = 1; i < n; i++) {
    if (x[i]! < min) min = x[i]!;
    if (x[i]! > max) max = x[i]!;
    sumW = f(sumW + w[i]!);
    sumX = f(sumX + f(w[i]! * x[i]!));
  }
  if (min > 0) min = 0;
  if (max === min) {
    L.fill(0, 0, n);
    return { scale: 0, min: -min };
  }
  let iscale = f(nmax / f(max - min));
  let scale = f(1 / iscale);
  let bestError = 0;
  for (let i = 0; i < n; i++) {
    L[i] = clamp(nearestInt(f(iscale * f(x[i]! - min))), 0, nmax);
    const diff = f(f(f(scale * L[i]!) + min) - x[i]!);
    bestError = f(bestError + f(w[i]! * f(diff * diff)));
  }
  const aux = new Uint8Array(n);
  for (let is = 0; is <= nstep; is++) {
    iscale = f(f(f(rmin + f(rdelta * is)) + nmax) / f(max - min));
    let sumL = 0;
    let sumL2 = 0;
    let sumXL = 0;
    for (let i = 0; i < n; i++) {
      const l = clamp(nearestInt(f(iscale * f(x[i]! - min))), 0, nmax);
      aux[i] = l;
      const wl = f(w[i]! * l);
      sumL = f(sumL + wl);
      sumL2 = f(sumL2 + f(wl * l));
      sumXL = f(sumXL + f(wl * x[i]!));
    }
    const D = f(f(sumW * sumL2) - f(sumL * sumL));
    if (D > 0) {
      let thisScale = f(f(f(sumW * sumXL) - f(sumX * sumL)) / D);
      let thisMin = f(f(f(sumL2 * sumX) - f(sumL * sumXL)) / D);
      if (thisMin > 0) {
        thisMin = 0;
        thisScale = f(sumXL / sumL2);
      }
      let curError = 0;
      for (let i = 0; i < n; i++) {
        const diff = f(f(f(thisScale * aux[i]!) + thisMin) - x[i]!);
        curError = f(curError + f(w[i]! * f(diff * diff)));
      }
      if (curError < bestError) {
        L.set(aux.subarray(0, n));
        bestError = curError;
        scale = thisScale;
        min = thisMin;
      }
    }
  }
  return { scale, min: -min };
}

/** The 6-bit scale and min of sub-block j (0-7) from the 12 packed bytes at s[o] (get_scale_min_k4). */
export function scaleMinK4(s: Uint8Array, o: number, j: number): { sc: number; m: number } {
  if (j < 4) return { sc: s[o + j]! & 63, m: s[o + j + 4]! & 63 };
  return { sc: (s[o + j + 4]! & 0xf) | ((s[o + j - 4]! >> 6) << 4), m: (s[o + j + 4]! >> 4) | ((s[o + j]! >> 6) << 4) };
}

/**
 * Q4_K (nmax 15) and Q5_K (nmax 31): per sub-block of 32, make_qkx2 with
 * weights av_x + |x|; the 8 scales and mins quantized to 6 bits against
 * their maxima (d = max_scale / 63, dmin = max_min / 63) and packed into 12
 * bytes at o + 4; then each value requantized against the stored scale and
 * min. Returns L (q per value) for the caller to pack.
 */
function quantizeK45(x: ArrayLike<number>, at: number, out: Uint8Array, o: number, nmax: number, rmin: number, rdelta: number,
  nstep: number): Uint8Array {
  const L = new Uint8Array(256);
  const scales = new Float32Array(8);
  const mins = new Float32Array(8);
  const xs = new Float32Array(32);
  const w = new Float32Array(32);
  let maxScale = 0;
  let maxMin = 0;
  for (let j = 0; j < 8; j++) {
    let sumX2 = 0;
    for (let l = 0; l < 32; l++) {
      xs[l] = f(x[at + 32 * j + l]!);
      sumX2 = f(sumX2 + f(xs[l]! * xs[l]!));
    }
    const avX = f(Math.sqrt(f(sumX2 / 32)));
    for (let l = 0; l < 32; l++) w[l] = f(avX + Math.abs(xs[l]!));
    const r = makeQkx2(32, nmax, xs, w, L.subarray(32 * j, 32 * j + 32), rmin, rdelta, nstep);
    scales[j] = r.scale;
    mins[j] = r.min;
    if (r.scale > maxScale) maxScale = r.scale;
    if (r.min > maxMin) maxMin = r.min;
  }
  const invScale = maxScale > 0 ? f(63 / maxScale) : 0;
  const invMin = maxMin > 0 ? f(63 / maxMin) : 0;
  const s = o + 4;
  for (let j = 0; j < 12; j++) out[s + j] = 0;
  for (let j = 0; j < 8; j++) {
    const ls = Math.min(63, nearestInt(f(invScale * scales[j]!)) & 0xff);
    const lm = Math.min(63, nearestInt(f(invMin * mins[j]!)) & 0xff);
    if (j < 4) {
      out[s + j] = ls;
      out[s + j + 4] = lm;
    } else {
      out[s + j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
      out[s + j - 4]! |= (ls >> 4) << 6;
      out[s + j]! |= (lm >> 4) << 6;
    }
  }
  putHalf(out, o, f(maxScale / 63));
  putHalf(out, o + 2, f(maxMin / 63));
  const d = getHalf(out, o);
  const dmin = getHalf(out, o + 2);
  for (let j = 0; j < 8; j++) {
    const { sc, m } = scaleMinK4(out, s, j);
    const dj = f(d * sc);
    if (dj === 0) continue;
    const dm = f(dmin * m);
    for (let i = 0; i < 32; i++) L[32 * j + i] = clamp(nearestInt(f(f(f(x[at + 32 * j + i]!) + dm) / dj)), 0, nmax);
  }
  return L;
}

/** Q4_K: quantizeK45 with 4-bit q; qs[32 c + l] = q(64 c + l) | q(64 c + 32 + l) << 4. */
function quantizeQ4_K(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  const L = quantizeK45(x, at, out, o, 15, -1, f(0.1), 20);
  for (let c = 0; c < 4; c++) {
    for (let l = 0; l < 32; l++) out[o + 16 + 32 * c + l] = L[64 * c + l]! | (L[64 * c + 32 + l]! << 4);
  }
}

/** Q5_K: quantizeK45 with 5-bit q; the low 4 bits as Q4_K's at o + 48, bit 4 of value 32 s + l as bit s of qh[l] at o + 16. */
function quantizeQ5_K(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  const L = quantizeK45(x, at, out, o, 31, -0.5, f(0.1), 15);
  for (let l = 0; l < 32; l++) out[o + 16 + l] = 0;
  for (let c = 0; c < 4; c++) {
    for (let l = 0; l < 32; l++) {
      const lo = L[64 * c + l]!;
      const hi = L[64 * c + 32 + l]!;
      out[o + 48 + 32 * c + l] = (lo & 0xf) | ((hi & 0xf) << 4);
      out[o + 16 + l]! |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
    }
  }
}

/**
 * make_qx_quants with rmse_type 1 and no weights: the scale of n values
 * with q in [-nmax, nmax - 1] (L holds q + nmax), the best of 19 scales
 * around -nmax / max by the error weighted by x^2.
 */
function makeQx(n: number, nmax: number, x: Float32Array, L: Int8Array): number {
  let max = 0;
  let amax = 0;
  for (let i = 0; i < n; i++) {
    const ax = Math.abs(x[i]!);
    if (ax > amax) {
      amax = ax;
      max = x[i]!;
    }
  }
  if (amax < 1e-15) {
    L.fill(0, 0, n);
    return 0;
  }
  const sums = (iscale: number): { sumlx: number; suml2: number } => {
    let sumlx = 0;
    let suml2 = 0;
    for (let i = 0; i < n; i++) {
      const l = clamp(nearestInt(f(iscale * x[i]!)), -nmax, nmax - 1);
      const w = f(x[i]! * x[i]!);
      sumlx = f(sumlx + f(f(w * x[i]!) * l));
      suml2 = f(suml2 + f(f(w * l) * l));
    }
    return { sumlx, suml2 };
  };
  const fill = (iscale: number): void => {
    for (let i = 0; i < n; i++) L[i] = nmax + clamp(nearestInt(f(iscale * x[i]!)), -nmax, nmax - 1);
  };
  let iscale = f(-nmax / max);
  fill(iscale);
  const s0 = sums(iscale);
  let scale = s0.suml2 !== 0 ? f(s0.sumlx / s0.suml2) : 0;
  let best = f(scale * s0.sumlx);
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    iscale = f(-f(nmax + f(f(0.1) * is)) / max);
    const s = sums(iscale);
    if (s.suml2 > 0 && f(s.sumlx * s.sumlx) > f(best * s.suml2)) {
      fill(iscale);
      scale = f(s.sumlx / s.suml2);
      best = f(scale * s.sumlx);
    }
  }
  return scale;
}

/**
 * Q6_K: per sub-block of 16 a scale by make_qx (nmax 32); the 16 scales as
 * int8 against the largest (d = max_scale / -128); each value requantized
 * to q in [0, 63] against d * scale; packed as ql (low nibbles), qh (high
 * two bits), scales, d.
 */
function quantizeQ6_K(x: ArrayLike<number>, at: number, out: Uint8Array, o: number): void {
  const L = new Int8Array(256);
  const scales = new Float32Array(16);
  const xs = new Float32Array(16);
  let maxScale = 0;
  let maxAbsScale = 0;
  for (let ib = 0; ib < 16; ib++) {
    for (let i = 0; i < 16; i++) xs[i] = f(x[at + 16 * ib + i]!);
    const scale = makeQx(16, 32, xs, L.subarray(16 * ib, 16 * ib + 16));
    scales[ib] = scale;
    if (Math.abs(scale) > maxAbsScale) {
      maxAbsScale = Math.abs(scale);
      maxScale = scale;
    }
  }
  out.fill(0, o, o + 210);
  if (maxAbsScale < 1e-15) return;
  const iscale = f(-128 / maxScale);
  putHalf(out, o + 208, f(1 / iscale));
  const d = getHalf(out, o + 208);
  const sc = new Int8Array(out.buffer, out.byteOffset + o + 192, 16);
  for (let ib = 0; ib < 16; ib++) sc[ib] = Math.min(127, nearestInt(f(iscale * scales[ib]!)));
  for (let j = 0; j < 16; j++) {
    const dj = f(d * sc[j]!);
    if (dj === 0) continue;
    for (let i = 0; i < 16; i++) L[16 * j + i] = clamp(nearestInt(f(f(x[at + 16 * j + i]!) / dj)), -32, 31) + 32;
  }
  for (let h = 0; h < 2; h++) {
    const ql = o + 64 * h;
    const qh = o + 128 + 32 * h;
    const v = 128 * h;
    for (let l = 0; l < 32; l++) {
      const [q1, q2, q3, q4] = [L[v + l]!, L[v + l + 32]!, L[v + l + 64]!, L[v + l + 96]!];
      out[ql + l] = (q1 & 0xf) | ((q3 & 0xf) << 4);
      out[ql + l + 32] = (q2 & 0xf) | ((q4 & 0xf) << 4);
      out[qh + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
    }
  }
}

const QUANTIZERS: Record<GgmlQuantType, (x: ArrayLike<number>, at: number, out: Uint8Array, o: number) => void> = {
  Q4_0: quantizeQ4_0, Q8_0: quantizeQ8_0, Q4_K: quantizeQ4_K, Q5_K: quantizeQ5_K, Q6_K: quantizeQ6_K,
};

/**
 * w [rows, k] (k a multiple of the block) quantized as llama.cpp's reference
 * quantizers do (quantize_row_<t>_ref, float32 arithmetic; w taken as f32):
 * rows of k / QK blocks, back to back, as a GGUF file stores the tensor.
 */
export function ggmlQuantize(type: GgmlQuantType, w: ArrayLike<number>, rows: number, k: number): Uint8Array {
  const { qk, bytes } = ggmlBlockOf(type);
  if (k % qk !== 0) throw new RangeError(`ggmlQuantize: k = ${k} is not a multiple of ${type}'s block of ${qk}`);
  const blocks = (rows * k) / qk;
  const out = new Uint8Array(blocks * bytes);
  for (let b = 0; b < blocks; b++) QUANTIZERS[type](w, b * qk, out, b * bytes);
  return out;
}

// ---- dequantization in float64, from the layouts ----

/** The values of one block at bytes[o] into w[at ..]. */
function dequantizeBlock(type: GgmlQuantType, b: Uint8Array, o: number, w: Float64Array, at: number): void {
  switch (type) {
    case 'Q4_0': {
      const d = getHalf(b, o);
      for (let j = 0; j < 16; j++) {
        w[at + j] = d * ((b[o + 2 + j]! & 0xf) - 8);
        w[at + 16 + j] = d * ((b[o + 2 + j]! >> 4) - 8);
      }
      return;
    }
    case 'Q8_0': {
      const d = getHalf(b, o);
      for (let j = 0; j < 32; j++) w[at + j] = d * ((b[o + 2 + j]! << 24) >> 24);
      return;
    }
    case 'Q4_K':
    case 'Q5_K': {
      const d = getHalf(b, o);
      const dmin = getHalf(b, o + 2);
      const five = type === 'Q5_K';
      const qs = o + (five ? 48 : 16);
      for (let s = 0; s < 8; s++) {
        const { sc, m } = scaleMinK4(b, o + 4, s);
        for (let l = 0; l < 32; l++) {
          let q = (b[qs + 32 * (s >> 1) + l]! >> (4 * (s & 1))) & 0xf;
          if (five) q |= ((b[o + 16 + l]! >> s) & 1) << 4;
          w[at + 32 * s + l] = d * sc * q - dmin * m;
        }
      }
      return;
    }
    case 'Q6_K': {
      const d = getHalf(b, o + 208);
      for (let v = 0; v < 256; v++) {
        const hh = v >> 7;
        const p = (v >> 5) & 3;
        const l = v & 31;
        const lo = (b[o + 64 * hh + 32 * (p & 1) + l]! >> (4 * (p >> 1))) & 0xf;
        const hi = (b[o + 128 + 32 * hh + l]! >> (2 * p)) & 3;
        const sc = (b[o + 192 + (v >> 4)]! << 24) >> 24;
        w[at + v] = d * sc * ((lo | (hi << 4)) - 32);
      }
      return;
    }
  }
}

/** The first `count` values (a multiple of the block) of a tensor of blocks, in float64. */
export function ggmlDequantizeRef(type: GgmlQuantType, bytes: Uint8Array, count: number): Float64Array {
  const { qk, bytes: bb } = ggmlBlockOf(type);
  if (count % qk !== 0) throw new RangeError(`ggmlDequantizeRef: ${count} values are not whole ${type} blocks of ${qk}`);
  const w = new Float64Array(count);
  for (let i = 0; i < count / qk; i++) dequantizeBlock(type, bytes, i * bb, w, i * qk);
  return w;
}

/**
 * y [m, n] = x [m, k] W^T with W [n, k] dequantized from its blocks
 * (ggmlDequantizeRef), in float64; and sum_k |x w| per output, the scale of
 * its rounding error.
 */
export function ggmlMatmulRef(type: GgmlQuantType, x: ArrayLike<number>, weight: Uint8Array, m: number, n: number, k: number):
  { y: Float64Array; abs: Float64Array } {
  const w = ggmlDequantizeRef(type, weight, n * k);
  return { y: denseRef(x, w, m, n, k), abs: denseAbsRef(x, w, m, n, k) };
}

/** out [ids.length, hidden] = rows min(id, vocab - 1) of the dequantized table, times scale, in float64. */
export function ggmlEmbeddingRef(type: GgmlQuantType, table: Uint8Array, ids: ArrayLike<number>, vocab: number, hidden: number,
  scale = 1): Float64Array {
  const rb = ggmlRowBytesOf(type, hidden);
  const out = new Float64Array(ids.length * hidden);
  for (let i = 0; i < ids.length; i++) {
    const id = Math.min(ids[i]!, vocab - 1);
    const row = ggmlDequantizeRef(type, table.subarray(id * rb, (id + 1) * rb), hidden);
    for (let j = 0; j < hidden; j++) out[i * hidden + j] = row[j]! * scale;
  }
  return out;
}
