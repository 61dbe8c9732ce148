// Fuzz of the weight readers' header checks: valid safetensors and GGUF files
// (written by tests/weights-writers.ts) cut at every header byte, with random
// bytes flipped, and with header fields edited in place (GGUF counts,
// lengths, types, dims and offsets set to edge values; safetensors length
// field, dtypes, shapes, offsets and keys changed in the JSON). Every result
// must be a file whose tensor table holds (every range inside the file, none
// overlapping, sizes matching shapes and types, each tensor's bytes
// readable) or an MlxError naming the format and the file; any other
// exception fails, and so does a parse slower than a bound far above the
// O(header) cost (a hang or a quadratic walk).

import { describe, expect, test } from 'bun:test';
import { MlxError } from '../ts/index.ts';
import { dtypeSize } from '../ts/dtype.ts';
import { GgufFile, SafetensorsFile, type WeightSource } from '../ts/weights/index.ts';
import { rng, type Rng } from './helpers.ts';
import { everyMetadataType, ggufBytes, randomBytes, safetensorsBytes, safetensorsHeader, type GgufWritten, type StTensor } from './weights-writers.ts';

const SEED = 0xf022;
/** A parse of these few-KB files takes well under a millisecond; anything near this bound is a hang or a blow-up. */
const SLOW_MS = 250;

interface Outcome {
  parsed: number;
  refused: number;
  slowest: number;
}

/** Parses, then checks the table or the refusal; counts both. */
function attempt(open: () => WeightSource, prefix: string, fileLength: number, out: Outcome, what: string): void {
  const t0 = performance.now();
  let src: WeightSource | null = null;
  try {
    src = open();
  } catch (e) {
    if (!(e instanceof MlxError)) throw new Error(`${what}: threw ${String(e)} instead of an MlxError`);
    if (!e.message.startsWith(prefix)) throw new Error(`${what}: the message must name the file: ${e.message}`);
    if (e.kind !== 'InvalidArgument' && e.kind !== 'UnsupportedDtype') throw new Error(`${what}: kind ${e.kind}: ${e.message}`);
    out.refused++;
  }
  const ms = performance.now() - t0;
  out.slowest = Math.max(out.slowest, ms);
  if (ms > SLOW_MS) throw new Error(`${what}: the parse took ${ms.toFixed(0)} ms`);
  if (src === null) return;
  out.parsed++;
  const spans = [...src.tensors.values()].map((t) => {
    if (!(t.byteOffset >= 0 && t.byteOffset + t.byteLength <= fileLength)) throw new Error(`${what}: tensor ${t.name} at ${t.byteOffset}+${t.byteLength} is outside the ${fileLength}-byte file`);
    const storageBytes = t.storage.shape.reduce((a, b) => a * b, 1) * dtypeSize(t.storage.dtype);
    if (storageBytes !== t.byteLength) throw new Error(`${what}: tensor ${t.name} storage ${storageBytes} bytes, data ${t.byteLength}`);
    if (src!.bytes(t.name).length !== t.byteLength) throw new Error(`${what}: tensor ${t.name} bytes() length`);
    return [t.byteOffset, t.byteOffset + t.byteLength] as const;
  });
  spans.sort((a, b) => a[0] - b[0]);
  for (let i = 1; i < spans.length; i++) {
    if (spans[i]![0] < spans[i - 1]![1]) throw new Error(`${what}: two tensors overlap`);
  }
}

function flips(rnd: Rng, bytes: Uint8Array, upTo: number, n: number): Uint8Array {
  const b = bytes.slice();
  for (let k = 0; k < n; k++) {
    const at = Math.floor(rnd.next() * upTo);
    b[at] = rnd.next() < 0.5 ? b[at]! ^ (1 << Math.floor(rnd.next() * 8)) : Math.floor(rnd.next() * 256);
  }
  return b;
}

// ---- safetensors ----

function stSeed(rnd: Rng): StTensor[] {
  return [
    { name: 'model.layers.0.self_attn.q_proj.weight', dtype: 'BF16', shape: [4, 6], data: randomBytes(rnd, 48) },
    { name: 'model.layers.0.input_layernorm.weight', dtype: 'F32', shape: [6], data: randomBytes(rnd, 24) },
    { name: 'quant.weight', dtype: 'U32', shape: [2, 3], data: randomBytes(rnd, 24) },
    { name: 'quant.scales', dtype: 'F16', shape: [2, 1], data: randomBytes(rnd, 4) },
    { name: 'ids', dtype: 'I64', shape: [3], data: randomBytes(rnd, 24) },
    { name: 'scalar', dtype: 'F64', shape: [], data: randomBytes(rnd, 8) },
    { name: 'none', dtype: 'I8', shape: [0], data: new Uint8Array(0) },
  ];
}

/** JSON-level edits of a header: each gives a header text. */
function stEdits(rnd: Rng, ts: StTensor[]): string[] {
  const base = safetensorsHeader(ts, { format: 'pt' }) as Record<string, { dtype: string; shape: unknown[]; data_offsets: unknown[] }>;
  const names = ts.map((t) => t.name);
  const weird: unknown[] = [-1, 0, 1, 1.5, 2 ** 31, 2 ** 53, 2 ** 64, 1e308, null, '3', [], {}, true];
  const dtypes = ['F64', 'F32', 'F16', 'BF16', 'I64', 'I32', 'I16', 'I8', 'U64', 'U32', 'U16', 'U8', 'BOOL', 'F8_E4M3', 'F8_E5M2', 'Q4_0', 'f32', '', 'F4'];
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd.next() * xs.length)]!;
  const out: string[] = [];
  for (let k = 0; k < 600; k++) {
    const h = JSON.parse(JSON.stringify(base)) as Record<string, unknown> & typeof base;
    const set = (k: string, v: unknown) => ((h as Record<string, unknown>)[k] = v);
    const name = pick(names);
    const e = h[name]!;
    switch (k % 9) {
      case 0: e.dtype = pick(dtypes); break;
      case 1: e.shape[Math.floor(rnd.next() * (e.shape.length + 1))] = pick(weird); break;
      case 2: e.data_offsets[Math.floor(rnd.next() * 2)] = pick(weird); break;
      case 3: e.data_offsets = [e.data_offsets[1], e.data_offsets[0]]; break;
      case 4: delete (e as Record<string, unknown>)[pick(['dtype', 'shape', 'data_offsets'])]; break;
      case 5: set(`${name}.copy`, { ...e }); break;
      case 6: set('__metadata__', pick([{ a: 1 }, [1], 'x', null, { a: 'b' }])); break;
      case 7: { const v = Math.floor(rnd.next() * 64); e.data_offsets = [(e.data_offsets[0] as number) + v, (e.data_offsets[1] as number) + v]; break; }
      case 8: e.shape = [...e.shape, pick([1, 2, 0])]; break;
    }
    out.push(JSON.stringify(h));
  }
  // Duplicate keys, which JSON.parse alone would let through.
  const text = JSON.stringify(base);
  out.push(text.replace(`"${names[1]}"`, `"${names[0]}"`), text.replace('"dtype":"F32"', '"dtype":"F32","dtype":"F16"'));
  return out;
}

describe('weights fuzz: safetensors', () => {
  const rnd = rng(SEED);
  const ts = stSeed(rnd);
  const valid = safetensorsBytes(ts, { metadata: { format: 'pt' } });
  const headerEnd = 8 + Number(new DataView(valid.buffer).getBigUint64(0, true));
  const name = 'fuzz.safetensors';
  const open = (b: Uint8Array) => () => SafetensorsFile.fromBytes(b, name);
  const prefix = `safetensors ${name}: `;

  test('the valid file parses', () => {
    expect(SafetensorsFile.fromBytes(valid, name).tensors.size).toBe(ts.length);
  });

  test('cut at every byte of the header and the data', () => {
    const out: Outcome = { parsed: 0, refused: 0, slowest: 0 };
    for (let n = 0; n < valid.length; n++) attempt(open(valid.subarray(0, n)), prefix, n, out, `cut at ${n}`);
    expect(out.parsed).toBe(0); // the data section must be covered to its end, so any cut is refused
    expect(out.refused).toBe(valid.length);
  });

  test('random bytes flipped in the header and anywhere', () => {
    const out: Outcome = { parsed: 0, refused: 0, slowest: 0 };
    for (let k = 0; k < 3000; k++) {
      const b = flips(rnd, valid, k % 3 === 0 ? valid.length : headerEnd, 1 + (k % 4));
      attempt(open(b), prefix, b.length, out, `flips #${k}`);
    }
    expect(out.parsed + out.refused).toBe(3000);
    expect(out.refused).toBeGreaterThan(100);
  });

  test('the length field and JSON fields edited', () => {
    const out: Outcome = { parsed: 0, refused: 0, slowest: 0 };
    for (const v of [0n, 1n, 2n, 7n, 8n, BigInt(headerEnd - 9), BigInt(headerEnd - 7), BigInt(valid.length), 2n ** 32n, 2n ** 53n, 2n ** 63n, 2n ** 64n - 1n]) {
      const b = valid.slice();
      new DataView(b.buffer).setBigUint64(0, v, true);
      attempt(open(b), prefix, b.length, out, `length field ${v}`);
    }
    for (const [k, header] of stEdits(rnd, ts).entries()) {
      const b = safetensorsBytes(ts, { header });
      attempt(open(b), prefix, b.length, out, `edit #${k}: ${header.slice(0, 200)}`);
    }
    expect(out.refused).toBeGreaterThan(400);
  });
});

// ---- GGUF ----

function ggufSeeds(rnd: Rng): { label: string; w: GgufWritten }[] {
  const tensors = [
    { name: 'blk.0.ffn_down_exps.weight', type: 'Q4_K', dims: [256, 2, 2] },
    { name: 'blk.0.attn_q.weight', type: 'BF16', dims: [8, 3] },
    { name: 'blk.0.attn_norm.weight', type: 'F32', dims: [8] },
    { name: 'blk.0.ffn_gate_inp.weight', type: 'Q8_0', dims: [32, 2] },
    { name: 'blk.0.ssm_a', type: 'I64', dims: [3] },
  ];
  return [
    { label: 'v3, every metadata type, alignment 64', w: ggufBytes({ alignment: 64, metadata: everyMetadataType(), tensors }, rnd) },
    { label: 'v2, default alignment', w: ggufBytes({ version: 2, metadata: [['general.architecture', { type: 'string', value: 'gemma4' }]], tensors: tensors.slice(1) }, rnd) },
  ];
}

describe('weights fuzz: gguf', () => {
  const rnd = rng(SEED + 1);
  const name = 'fuzz.gguf';
  const open = (b: Uint8Array) => () => GgufFile.fromBytes(b, name);
  const prefix = `gguf ${name}: `;

  for (const { label, w } of ggufSeeds(rnd)) {
    describe(label, () => {
      test('the valid file parses', () => {
        expect(GgufFile.fromBytes(w.bytes, name).tensors.size).toBe(w.data.size);
      });

      test('cut at every byte', () => {
        const out: Outcome = { parsed: 0, refused: 0, slowest: 0 };
        for (let n = 0; n < w.bytes.length; n++) attempt(open(w.bytes.subarray(0, n)), prefix, n, out, `cut at ${n}`);
        // A cut inside the last tensor's data is refused; the files end with it.
        expect(out.parsed).toBe(0);
      });

      test('random bytes flipped in the header and anywhere', () => {
        const out: Outcome = { parsed: 0, refused: 0, slowest: 0 };
        for (let k = 0; k < 3000; k++) {
          const b = flips(rnd, w.bytes, k % 3 === 0 ? w.bytes.length : w.dataStart, 1 + (k % 4));
          attempt(open(b), prefix, b.length, out, `flips #${k}`);
        }
        expect(out.refused).toBeGreaterThan(300);
      });

      test('every header field set to edge values', () => {
        const out: Outcome = { parsed: 0, refused: 0, slowest: 0 };
        const u64 = [0n, 1n, 2n, 3n, 31n, 32n, 33n, 63n, 64n, 255n, 256n, 2n ** 31n, 2n ** 32n - 1n, 2n ** 32n, 2n ** 53n - 1n, 2n ** 53n, 2n ** 63n, 2n ** 64n - 1n];
        const u32 = [0, 1, 2, 3, 4, 5, 8, 9, 12, 13, 24, 30, 31, 39, 40, 99, 2 ** 31, 2 ** 32 - 1];
        for (const f of w.fields) {
          const dv = new DataView(w.bytes.buffer, w.bytes.byteOffset);
          const orig = f.size === 8 ? dv.getBigUint64(f.at, true) : f.size === 4 ? BigInt(dv.getUint32(f.at, true)) : 0n;
          const values = f.size === 8 ? [...u64, orig + 1n, orig > 0n ? orig - 1n : 0n, orig * 2n] : f.size === 4 ? [...u32.map(BigInt), orig + 1n] : [0n, 1n, 2n, 255n, 65535n];
          for (const v of values) {
            const b = w.bytes.slice();
            const bv = new DataView(b.buffer);
            if (f.size === 8) bv.setBigUint64(f.at, v & (2n ** 64n - 1n), true);
            else if (f.size === 4) bv.setUint32(f.at, Number(v & 0xffffffffn), true);
            else if (f.size === 2) bv.setUint16(f.at, Number(v & 0xffffn), true);
            else if (f.size === 1) bv.setUint8(f.at, Number(v & 0xffn));
            else continue;
            attempt(open(b), prefix, b.length, out, `${f.what} = ${v}`);
          }
        }
        expect(out.refused).toBeGreaterThan(w.fields.length);
        expect(out.parsed).toBeGreaterThan(0); // some edits (a different u8 value, an unused alignment) stay valid
      });
    });
  }
});
