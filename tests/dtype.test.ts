// f16 / bf16 conversions, exhaustively over all 65536 bit patterns of each.

import { describe, expect, test } from 'bun:test';
import {
  bf16BitsToF32,
  dtypeSize,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  fromBf16,
  fromF16,
  toBf16,
  toF16,
  MlxError,
  type DType,
} from '../ts/index.ts';
import { decodeNumbers, encodeNumbers, f16BitsToF32Bits, f32BitsToBf16Bits, f32BitsToF16Bits } from '../ts/dtype.ts';

const ALL = Uint16Array.from({ length: 65536 }, (_, i) => i);

function isNaN16(h: number): boolean {
  return (h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0;
}
function isNaNBf16(h: number): boolean {
  return (h & 0x7f80) === 0x7f80 && (h & 0x7f) !== 0;
}

/** The exact value of an f16 pattern, computed independently of the code under test. */
function f16Value(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m === 0 ? s * Infinity : NaN;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
function bitsOf(x: number): number {
  f32[0] = x;
  return u32[0]!;
}
function fromBits(b: number): number {
  u32[0] = b;
  return f32[0]!;
}

describe('dtypeSize', () => {
  test('sizes', () => {
    const want: Record<DType, number> = { f32: 4, f16: 2, bf16: 2, u8: 1, u16: 2, u32: 4, i32: 4 };
    for (const [d, s] of Object.entries(want)) expect(dtypeSize(d as DType)).toBe(s);
  });
  test('unknown dtype is UnsupportedDtype', () => {
    expect(() => dtypeSize('f64' as DType)).toThrow(MlxError);
    try {
      dtypeSize('f64' as DType);
    } catch (e) {
      expect((e as MlxError).kind).toBe('UnsupportedDtype');
    }
  });
});

describe('f16', () => {
  test('every pattern decodes to its exact value', () => {
    for (let h = 0; h < 65536; h++) {
      const v = f16BitsToF32(h);
      if (isNaN16(h)) expect(Number.isNaN(v)).toBe(true);
      else if (v !== f16Value(h) || Object.is(v, -0) !== Object.is(f16Value(h), -0)) throw new Error(`f16 0x${h.toString(16)}: ${v} != ${f16Value(h)}`);
    }
  });

  test('scalar round trip keeps every non-NaN pattern; NaN stays NaN', () => {
    for (let h = 0; h < 65536; h++) {
      const back = f32ToF16Bits(f16BitsToF32(h));
      if (isNaN16(h)) {
        if (!isNaN16(back)) throw new Error(`NaN 0x${h.toString(16)} came back as 0x${back.toString(16)}`);
      } else if (back !== h) {
        throw new Error(`f16 0x${h.toString(16)} came back as 0x${back.toString(16)}`);
      }
    }
  });

  test('array round trip keeps every pattern, NaN payloads included', () => {
    const back = toF16(fromF16(ALL));
    for (let h = 0; h < 65536; h++) if (back[h] !== h) throw new Error(`0x${h.toString(16)} -> 0x${back[h]!.toString(16)}`);
  });

  test('array and scalar conversions agree on every pattern', () => {
    const wide = fromF16(ALL);
    const bits = new Uint32Array(wide.buffer);
    for (let h = 0; h < 65536; h++) {
      if (bits[h] !== f16BitsToF32Bits(h)) throw new Error(`0x${h.toString(16)}`);
    }
  });

  test('ties between neighbours round to even; just off a tie rounds to nearest', () => {
    // Every pair of adjacent positive finite f16 values; the midpoint is exact in f32.
    for (let h = 0; h < 0x7bff; h++) {
      const lo = f16Value(h);
      const hi = f16Value(h + 1);
      const mid = (lo + hi) / 2;
      const even = h % 2 === 0 ? h : h + 1;
      const midBits = bitsOf(mid);
      if (fromBits(midBits) !== mid) throw new Error(`midpoint of 0x${h.toString(16)} not exact in f32`);
      const got = f32ToF16Bits(mid);
      const below = f32ToF16Bits(fromBits(midBits - 1));
      const above = f32ToF16Bits(fromBits(midBits + 1));
      const negMid = f32ToF16Bits(-mid);
      if (got !== even || below !== h || above !== h + 1 || negMid !== (even | 0x8000)) {
        throw new Error(`around 0x${h.toString(16)}: mid ${got.toString(16)} below ${below.toString(16)} above ${above.toString(16)} neg ${negMid.toString(16)}`);
      }
    }
  });

  test('known values', () => {
    const cases: [number, number][] = [
      [0, 0x0000],
      [-0, 0x8000],
      [1, 0x3c00],
      [-2, 0xc000],
      [0.5, 0x3800],
      [65504, 0x7bff],
      [65519.99, 0x7bff],
      [65520, 0x7c00], // the tie above the largest finite value rounds to Inf
      [1e6, 0x7c00],
      [-1e6, 0xfc00],
      [Infinity, 0x7c00],
      [-Infinity, 0xfc00],
      [2 ** -14, 0x0400], // smallest normal
      [2 ** -24, 0x0001], // smallest subnormal
      [2 ** -25, 0x0000], // tie to even: 0
      [1.5 * 2 ** -25, 0x0001],
      [2 ** -26, 0x0000],
      [1e-10, 0x0000],
      [-1e-10, 0x8000],
      [0.1, 0x2e66],
      [1 / 3, 0x3555],
      [Math.PI, 0x4248],
      [1 + 2 ** -11, 0x3c00], // tie, even below
      [1 + 3 * 2 ** -11, 0x3c02], // tie, even above
    ];
    for (const [x, h] of cases) {
      if (f32ToF16Bits(x) !== h) throw new Error(`${x}: got 0x${f32ToF16Bits(x).toString(16)}, want 0x${h.toString(16)}`);
    }
    expect(Number.isNaN(f16BitsToF32(f32ToF16Bits(NaN)))).toBe(true);
    expect(f16BitsToF32(0x0001)).toBe(2 ** -24);
    expect(f16BitsToF32(0x03ff)).toBe(1023 * 2 ** -24);
    expect(Object.is(f16BitsToF32(0x8000), -0)).toBe(true);
  });

  test('f32 NaN payloads keep their top bits and never become Inf', () => {
    expect(f32BitsToF16Bits(0x7fc00000)).toBe(0x7e00);
    expect(f32BitsToF16Bits(0xffc00000)).toBe(0xfe00);
    expect(f32BitsToF16Bits(0x7f802000)).toBe(0x7c01);
    expect(isNaN16(f32BitsToF16Bits(0x7f800001))).toBe(true); // payload only below the kept bits
  });
});

describe('bf16', () => {
  test('every pattern decodes to the f32 with the same top half', () => {
    for (let h = 0; h < 65536; h++) {
      const v = bf16BitsToF32(h);
      if (isNaNBf16(h)) expect(Number.isNaN(v)).toBe(true);
      else if (bitsOf(v) !== h << 16 >>> 0) throw new Error(`bf16 0x${h.toString(16)}`);
    }
  });

  test('scalar round trip keeps every non-NaN pattern; NaN stays NaN', () => {
    for (let h = 0; h < 65536; h++) {
      const back = f32ToBf16Bits(bf16BitsToF32(h));
      if (isNaNBf16(h) ? !isNaNBf16(back) : back !== h) throw new Error(`0x${h.toString(16)} -> 0x${back.toString(16)}`);
    }
  });

  test('array round trip keeps every pattern, NaN payloads included', () => {
    const back = toBf16(fromBf16(ALL));
    for (let h = 0; h < 65536; h++) if (back[h] !== h) throw new Error(`0x${h.toString(16)} -> 0x${back[h]!.toString(16)}`);
  });

  test('rounding of the low half of every pattern: ties to even, else nearest', () => {
    for (let h = 0; h < 65536; h++) {
      if ((h & 0x7f80) === 0x7f80) continue; // Inf / NaN
      const base = (h << 16) >>> 0;
      const next = (h + 1) & 0xffff; // magnitude step: the next pattern away from zero
      const tie = f32BitsToBf16Bits(base | 0x8000);
      const even = h % 2 === 0 ? h : next;
      if (tie !== even) throw new Error(`tie above 0x${h.toString(16)}: 0x${tie.toString(16)}`);
      if (f32BitsToBf16Bits(base | 0x7fff) !== h) throw new Error(`below tie of 0x${h.toString(16)}`);
      if (f32BitsToBf16Bits(base | 0x8001) !== next) throw new Error(`above tie of 0x${h.toString(16)}`);
      if (f32BitsToBf16Bits(base | 0x0001) !== h) throw new Error(`just above 0x${h.toString(16)}`);
    }
  });

  test('known values', () => {
    const cases: [number, number][] = [
      [0, 0x0000],
      [-0, 0x8000],
      [1, 0x3f80],
      [-2, 0xc000],
      [0.1, 0x3dcd],
      [Math.PI, 0x4049],
      [3.4e38, 0x7f80], // above the largest finite bf16 by more than half a step: Inf
      [Infinity, 0x7f80],
      [-Infinity, 0xff80],
      [1e-40, 0x0001], // an f32 subnormal stays subnormal
    ];
    for (const [x, h] of cases) {
      if (f32ToBf16Bits(x) !== h) throw new Error(`${x}: got 0x${f32ToBf16Bits(x).toString(16)}, want 0x${h.toString(16)}`);
    }
    expect(Number.isNaN(bf16BitsToF32(f32ToBf16Bits(NaN)))).toBe(true);
    expect(isNaNBf16(f32BitsToBf16Bits(0x7f800001))).toBe(true);
    expect(f32BitsToBf16Bits(0x7fc00000)).toBe(0x7fc0);
  });
});

describe('number encoding by dtype', () => {
  test('floats round, integers are checked', () => {
    expect([...encodeNumbers('f32', [0.1, 2], 't')]).toEqual([Math.fround(0.1), 2]);
    expect([...encodeNumbers('f16', [1, 0.1], 't')]).toEqual([0x3c00, 0x2e66]);
    expect([...encodeNumbers('bf16', [1, 0.1], 't')]).toEqual([0x3f80, 0x3dcd]);
    expect([...encodeNumbers('u8', [0, 255], 't')]).toEqual([0, 255]);
    expect([...encodeNumbers('i32', [-0x80000000, 0x7fffffff], 't')]).toEqual([-0x80000000, 0x7fffffff]);
    expect([...encodeNumbers('u32', [0xffffffff], 't')]).toEqual([0xffffffff]);
    expect(() => encodeNumbers('u8', [256], 't')).toThrow('t: element 0 must be an integer in [0, 255] for dtype u8 (got 256)');
    expect(() => encodeNumbers('u16', [1, 1.5], 't')).toThrow('element 1');
    expect(() => encodeNumbers('i32', [NaN], 't')).toThrow(MlxError);
    expect(() => encodeNumbers('u32', [-1], 't')).toThrow(MlxError);
  });

  test('decoding inverts encoding for representable values', () => {
    const vals = [0, 1, -2.5, 1024, -0.125];
    for (const d of ['f32', 'f16', 'bf16'] as const) {
      expect([...decodeNumbers(d, encodeNumbers(d, vals, 't'))]).toEqual(vals);
    }
    expect([...decodeNumbers('i32', encodeNumbers('i32', [-7, 9], 't'))]).toEqual([-7, 9]);
  });
});
