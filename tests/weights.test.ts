// The weight readers (ts/weights): safetensors files, sharded checkpoints and
// GGUF files, written here by tests/weights-writers.ts (a few KB each).
// Every refusal of a header, each with the file, the tensor or key, what was
// expected and what was found in its message; every GGUF metadata type and
// the ggml block sizes; then the mmap + upload round trip on each backend:
// one buffer per tensor and tensors packed into a few buffers with a view
// each, compared byte for byte with the file.

import { afterAll, describe, expect, test } from 'bun:test';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MlxError } from '../ts/index.ts';
import {
  GGML_TYPES,
  GgufFile,
  SafetensorsFile,
  ShardedSafetensors,
  ggmlType,
  openWeights,
  type GgufValue,
  type WeightSource,
} from '../ts/weights/index.ts';
import { describeBackends, errorOf, rng } from './helpers.ts';
import { everyMetadataType, ggufBytes, randomBytes, safetensorsBytes, type GgufSpec, type StTensor } from './weights-writers.ts';

const dir = mkdtempSync(join(tmpdir(), 'mlxn-weights-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let fileNo = 0;
function file(bytes: Uint8Array, name = `f${fileNo++}`): string {
  const p = join(dir, name);
  writeFileSync(p, bytes);
  return p;
}

const r = rng(0x5afe);
/** A few tensors of several dtypes, odd sizes so offsets are not aligned. */
function someTensors(): StTensor[] {
  return [
    { name: 'model.embed_tokens.weight', dtype: 'BF16', shape: [7, 5], data: randomBytes(r, 70) },
    { name: 'model.norm.weight', dtype: 'F32', shape: [5], data: randomBytes(r, 20) },
    { name: 'scalar', dtype: 'F16', shape: [], data: randomBytes(r, 2) },
    { name: 'mask', dtype: 'BOOL', shape: [3], data: new Uint8Array([1, 0, 1]) },
    { name: 'ids', dtype: 'I64', shape: [2, 3], data: randomBytes(r, 48) },
    { name: 'packed', dtype: 'U32', shape: [3, 2], data: randomBytes(r, 24) },
    { name: 'empty', dtype: 'F32', shape: [0, 4], data: new Uint8Array(0) },
  ];
}

/** The MlxError of fn, whose message starts with `start` and contains every part. */
function refused(fn: () => unknown, start: string, ...parts: string[]): MlxError {
  const e = errorOf(fn);
  expect(e.message).toStartWith(start);
  for (const p of parts) expect(e.message).toContain(p);
  return e;
}

describe('safetensors: a valid file', () => {
  test('header, metadata, offsets in the file, storage of each dtype', () => {
    const ts = someTensors();
    const bytes = safetensorsBytes(ts, { metadata: { format: 'pt' } });
    const f = SafetensorsFile.fromBytes(bytes, 'model.safetensors');
    expect(f.metadata).toEqual({ format: 'pt' });
    expect(f.dataStart).toBe(8 + f.headerLength);
    expect(f.dataStart % 8).toBe(0); // the writer pads the header with spaces, as the format's writer does
    expect(f.names()).toEqual(ts.map((t) => t.name)); // file order
    let at = f.dataStart;
    for (const t of ts) {
      const info = f.info(t.name);
      expect(info).toMatchObject({ name: t.name, dtype: t.dtype, shape: t.shape, byteOffset: at, byteLength: t.data.length, file: 'model.safetensors' });
      expect([...f.bytes(t.name)]).toEqual([...t.data]);
      at += t.data.length;
    }
    expect(f.info('model.embed_tokens.weight').storage).toEqual({ dtype: 'bf16', shape: [7, 5], raw: false });
    expect(f.info('scalar').storage).toEqual({ dtype: 'f16', shape: [], raw: false });
    expect(f.info('mask').storage).toEqual({ dtype: 'u8', shape: [3], raw: true });
    expect(f.info('ids').storage).toEqual({ dtype: 'u32', shape: [2, 6], raw: true }); // 64-bit as u32 pairs
    expect(f.info('packed').storage).toEqual({ dtype: 'u32', shape: [3, 2], raw: false }); // MLX affine packing
    // view(): typed, a copy where the offset is not aligned to the element size.
    const norm = f.view('model.norm.weight');
    expect(norm).toBeInstanceOf(Float32Array);
    expect(new Uint8Array(norm.buffer, norm.byteOffset, norm.byteLength)).toEqual(ts[1]!.data);
    expect(f.view('ids')).toBeInstanceOf(Uint32Array);
  });

  test('every dtype the reader takes, and no metadata', () => {
    const sizes: Record<string, number> = { F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1, U64: 8, U32: 4, U16: 2, U8: 1, BOOL: 1, F8_E4M3: 1, F8_E5M2: 1 };
    const ts = Object.entries(sizes).map(([dtype, size]) => ({ name: dtype.toLowerCase(), dtype, shape: [3], data: randomBytes(r, 3 * size) }));
    const f = SafetensorsFile.fromBytes(safetensorsBytes(ts));
    expect(f.metadata).toBeNull();
    for (const t of ts) expect(f.info(t.name).byteLength).toBe(t.data.length);
    expect(f.info('f8_e4m3').storage).toEqual({ dtype: 'u8', shape: [3], raw: true });
    expect(f.info('i16').storage).toEqual({ dtype: 'u16', shape: [3], raw: true });
  });

  test('an empty header and no tensors; unpadded header', () => {
    expect(SafetensorsFile.fromBytes(safetensorsBytes([])).tensors.size).toBe(0);
    expect(SafetensorsFile.fromBytes(safetensorsBytes(someTensors(), { pad: false })).tensors.size).toBe(7);
  });

  test('names no role owns: __proto__ and constructor are tensor names like any other', () => {
    const f = SafetensorsFile.fromBytes(safetensorsBytes([
      { name: '__proto__', dtype: 'U8', shape: [1], data: new Uint8Array([7]) },
      { name: 'constructor', dtype: 'U8', shape: [1], data: new Uint8Array([9]) },
    ]));
    expect(f.names()).toEqual(['__proto__', 'constructor']);
    expect([...f.bytes('__proto__')]).toEqual([7]);
  });

  test('open() maps the file; missing files, folders and unknown names are refused', () => {
    const p = file(safetensorsBytes(someTensors()));
    const f = SafetensorsFile.open(p);
    expect(f.path).toBe(p);
    expect(f.info('model.norm.weight').file).toBe(p);
    refused(() => SafetensorsFile.open(join(dir, 'absent.safetensors')), `safetensors ${join(dir, 'absent.safetensors')}: the path must be a readable file (got ENOENT`);
    refused(() => SafetensorsFile.open(dir), `safetensors ${dir}: the path must be a regular file (got a directory)`);
    refused(() => SafetensorsFile.open(''), 'safetensors: open: path must be a non-empty file path');
    refused(() => f.info('nope'), `safetensors ${p}: tensor "nope" must be one of its 7 tensors (got a name it does not hold)`);
    refused(() => f.bytes('nope'), `safetensors ${p}: tensor "nope"`);
    refused(() => SafetensorsFile.fromBytes([1, 2] as unknown as Uint8Array), 'safetensors: fromBytes: bytes must be a Uint8Array');
    refused(() => GgufFile.fromBytes(new Uint8Array(4), ''), 'gguf: fromBytes: name must be a non-empty string (got "")');
    refused(() => openWeights(''), 'openWeights: path must be a non-empty path (got "")');
    // An empty file has no mapping; it is refused as too short.
    refused(() => SafetensorsFile.open(file(new Uint8Array(0))), 'safetensors', 'the header length (bytes 0 to 8) must be a little-endian u64 (got a file of 0 bytes; truncated?)');
  });
});

describe('safetensors: every refusal names the file, the tensor or field, expected and found', () => {
  const st = (ts: StTensor[], opts = {}) => () => SafetensorsFile.fromBytes(safetensorsBytes(ts, opts), 'bad.safetensors');
  const header = (text: string, data = new Uint8Array(0)) => () =>
    SafetensorsFile.fromBytes(safetensorsBytes([{ name: 'x', dtype: 'U8', shape: [data.length], data }], { header: text }), 'bad.safetensors');
  const S = 'safetensors bad.safetensors: ';
  const one = (entry: unknown, data = new Uint8Array(4)) => header(JSON.stringify({ t: entry }), data);

  test('the length field', () => {
    refused(() => SafetensorsFile.fromBytes(new Uint8Array(5), 'bad.safetensors'), `${S}the header length (bytes 0 to 8) must be a little-endian u64 (got a file of 5 bytes; truncated?)`);
    refused(st(someTensors(), { lengthField: 2n ** 64n - 1n }), `${S}the header length must be at most 100000000 bytes (got 18446744073709551615)`);
    const bytes = safetensorsBytes(someTensors());
    refused(st(someTensors(), { lengthField: BigInt(bytes.length) }), `${S}the header length must be at most the ${bytes.length - 8} bytes after it (got ${bytes.length}; truncated?)`);
    refused(() => SafetensorsFile.fromBytes(safetensorsBytes([], { header: '{', pad: false }), 'bad.safetensors'), `${S}the header must be a JSON object (got 1 bytes)`);
  });

  test('the header text', () => {
    const bad = safetensorsBytes([], { header: '{"a":"\xff"}' });
    bad.set([0x7b, 0x22, 0xff, 0xfe], 8); // not UTF-8
    refused(() => SafetensorsFile.fromBytes(bad, 'bad.safetensors'), `${S}the header must be UTF-8 text (got bytes that are not valid UTF-8)`);
    refused(header('[1, 2]'), `${S}the header must be a JSON object starting with '{' (got "[1, 2]`);
    refused(header('{"x": '), `${S}the header must be valid JSON (got`);
  });

  test('duplicate names and keys', () => {
    const e = { dtype: 'U8', shape: [2], data_offsets: [0, 2] };
    refused(header(`{"a": ${JSON.stringify(e)}, "a": ${JSON.stringify(e)}}`, new Uint8Array(2)), `${S}the tensor name "a" must be unique in the header (got two entries)`);
    refused(header('{"a": {"dtype": "U8", "dtype": "U16", "shape": [2], "data_offsets": [0, 2]}}', new Uint8Array(2)), `${S}the entry of "a" must be an object with unique keys (got "dtype" twice)`);
  });

  test('__metadata__', () => {
    refused(header('{"__metadata__": [1]}'), `${S}"__metadata__" must be an object of strings (got [1])`);
    refused(header('{"__metadata__": {"k": 3}}'), `${S}"__metadata__" key "k" must be a string (got 3)`);
  });

  test('tensor names', () => {
    const e = { dtype: 'U8', shape: [1], data_offsets: [0, 1] };
    refused(header(JSON.stringify({ '': e }), new Uint8Array(1)), `${S}a tensor name must be non-empty (got "")`);
    refused(header('{"a\\ud800": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', new Uint8Array(1)), `${S}the tensor name "a\\ud800" must be valid Unicode (got a lone surrogate escape)`);
    refused(header(JSON.stringify({ ['é'.repeat(600)]: e }), new Uint8Array(1)), `${S}the tensor name`, 'must be at most 1024 bytes of UTF-8 (got 1200 bytes)');
  });

  test('tensor entries: form, dtype, shape, offsets', () => {
    refused(one([1]), `${S}the tensor "t" must be an object { dtype, shape, data_offsets } (got [1])`);
    refused(one({ dtype: 'U8', shape: [4], data_offsets: [0, 4], extra: 1 }), `${S}the tensor "t" must be an object of dtype, shape and data_offsets only (got the key "extra")`);
    const e = refused(one({ dtype: 'Q4', shape: [4], data_offsets: [0, 4] }), `${S}the tensor "t" dtype must be one of F64, F32`, '(got "Q4")');
    expect(e.kind).toBe('UnsupportedDtype');
    refused(one({ dtype: 'U8', data_offsets: [0, 4] }), `${S}the tensor "t" shape must be an array of at most 16 dimensions (got undefined)`);
    refused(one({ dtype: 'U8', shape: new Array(17).fill(1), data_offsets: [0, 4] }), `${S}the tensor "t" shape must be an array of at most 16 dimensions`);
    refused(one({ dtype: 'U8', shape: [2, -2], data_offsets: [0, 4] }), `${S}the tensor "t" shape[1] must be an integer >= 0 (got -2)`);
    refused(one({ dtype: 'U8', shape: [1.5], data_offsets: [0, 4] }), `${S}the tensor "t" shape[0] must be an integer >= 0 (got 1.5)`);
    refused(one({ dtype: 'U8', shape: [4], data_offsets: [0] }), `${S}the tensor "t" data_offsets must be [begin, end], integers >= 0 (got [0])`);
    refused(one({ dtype: 'U8', shape: [4], data_offsets: [0, 2 ** 60] }), `${S}the tensor "t" data_offsets must be [begin, end], integers >= 0`);
    refused(one({ dtype: 'U8', shape: [4], data_offsets: [4, 0] }), `${S}the tensor "t" data_offsets must be begin <= end (got [4, 0])`);
    refused(one({ dtype: 'U8', shape: [8], data_offsets: [0, 8] }), `${S}the tensor "t" data_offsets must be within the 4-byte data section (got [0, 8]; truncated?)`);
    refused(one({ dtype: 'F32', shape: [2], data_offsets: [0, 4] }), `${S}the tensor "t" data_offsets must be 8 bytes apart (shape [2] of F32) (got [0, 4], 4 bytes)`);
    refused(one({ dtype: 'F64', shape: [2 ** 26, 2 ** 26], data_offsets: [0, 4] }), `${S}the tensor "t" shape must be a byte size below 2^53 (got [67108864, 67108864] of F64, which overflows)`);
  });

  test('coverage: no gap, no overlap, the data section used to its end', () => {
    const a = { dtype: 'U8', shape: [4], data_offsets: [0, 4] };
    refused(header(JSON.stringify({ a, b: { dtype: 'U8', shape: [4], data_offsets: [2, 6] } }), new Uint8Array(8)),
      `${S}the tensor "b" data_offsets must be clear of the tensor "a" (which ends at 4) (got [2, 6]: they overlap)`);
    refused(header(JSON.stringify({ a, b: { dtype: 'U8', shape: [2], data_offsets: [6, 8] } }), new Uint8Array(8)),
      `${S}the tensor "b" data_offsets must be [4, 6], starting where the tensor "a" ends (got [6, 8]: a gap of 2 bytes)`);
    refused(header(JSON.stringify({ b: { dtype: 'U8', shape: [2], data_offsets: [2, 4] } }), new Uint8Array(4)),
      `${S}the tensor "b" data_offsets must be [0, 2], starting where the data section starts (got [2, 4]: a gap of 2 bytes)`);
    refused(st(someTensors(), { trailing: new Uint8Array(3) }), `${S}the data section must be covered by the tensors up to its end`, '(170 bytes) (got tensors ending at 167)');
  });
});

describe('sharded safetensors', () => {
  const shardDir = join(dir, 'sharded');
  mkdirSync(shardDir);
  const ts = someTensors();
  const shardA = ts.slice(0, 3);
  const shardB = ts.slice(3);
  writeFileSync(join(shardDir, 'model-00001-of-00002.safetensors'), safetensorsBytes(shardA));
  writeFileSync(join(shardDir, 'model-00002-of-00002.safetensors'), safetensorsBytes(shardB));
  const weightMap = Object.fromEntries([...shardA.map((t) => [t.name, 'model-00001-of-00002.safetensors']), ...shardB.map((t) => [t.name, 'model-00002-of-00002.safetensors'])]);
  const index = (obj: unknown, name = 'model.safetensors.index.json') => {
    const p = join(shardDir, name);
    writeFileSync(p, typeof obj === 'string' ? obj : JSON.stringify(obj));
    return p;
  };
  const good = index({ metadata: { total_size: 158 }, weight_map: weightMap });

  test('every tensor of every shard, through one source', () => {
    const s = ShardedSafetensors.open(good);
    expect(s.metadata).toEqual({ total_size: 158 });
    expect([...s.shards.keys()]).toEqual(['model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']);
    expect(s.names()).toEqual(ts.map((t) => t.name));
    for (const t of ts) expect([...s.bytes(t.name)]).toEqual([...t.data]);
    expect(s.shardFor('ids').path).toBe(join(shardDir, 'model-00002-of-00002.safetensors'));
    expect(openWeights(shardDir)).toBeInstanceOf(ShardedSafetensors);
    expect(openWeights(good)).toBeInstanceOf(ShardedSafetensors);
  });

  test('an index that disagrees with its shards, or reaches outside its folder, is refused', () => {
    const I = (p: string) => `safetensors index ${p}: `;
    let p = index('{"weight_map": ', 'bad1.index.json');
    refused(() => ShardedSafetensors.open(p), `${I(p)}the file must be valid JSON`);
    p = index({ metadata: {} }, 'bad2.index.json');
    refused(() => ShardedSafetensors.open(p), `${I(p)}"weight_map" must be an object of tensor name to shard file name (got undefined)`);
    p = index({ weight_map: { a: '../model.safetensors' } }, 'bad3.index.json');
    refused(() => ShardedSafetensors.open(p), `${I(p)}the shard of "a" must be a file name in the index folder (no path separator, not "." or "..") (got "../model.safetensors")`);
    p = index({ weight_map: { a: '..' } }, 'bad4.index.json');
    refused(() => ShardedSafetensors.open(p), `${I(p)}the shard of "a" must be a file name`);
    p = index({ weight_map: { ...weightMap, extra: 'model-00001-of-00002.safetensors' } }, 'bad5.index.json');
    refused(() => ShardedSafetensors.open(p), `${I(p)}the tensor "extra" must be held by its shard "model-00001-of-00002.safetensors" (got a shard without it)`);
    const moved = { ...weightMap, ids: 'model-00001-of-00002.safetensors' };
    p = index({ weight_map: moved }, 'bad6.index.json');
    refused(() => ShardedSafetensors.open(p), `${I(p)}the tensor "ids" must be held by its shard "model-00001-of-00002.safetensors"`);
    const { ids: _dropped, ...fewer } = weightMap;
    p = index({ weight_map: fewer }, 'bad7.index.json');
    refused(() => ShardedSafetensors.open(p), `${I(p)}the tensor "ids" of the shard "model-00002-of-00002.safetensors" must be listed in the weight_map under that shard (got no entry)`);
    p = index(`{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}`, 'bad8.index.json');
    refused(() => ShardedSafetensors.open(p), `${I(p)}the object "weight_map" must be an object with unique keys (got "a" twice)`);
    p = index('[]', 'bad10.index.json');
    refused(() => ShardedSafetensors.open(p), `${I(p)}the file must be a JSON object (got [])`);
    p = index({ metadata: 'x', weight_map: weightMap }, 'bad11.index.json');
    refused(() => ShardedSafetensors.open(p), `${I(p)}"metadata" must be an object (got "x")`);
    p = join(shardDir, 'bad12.index.json');
    writeFileSync(p, new Uint8Array([0x7b, 0xff, 0x7d]));
    refused(() => ShardedSafetensors.open(p), `${I(p)}the file must be UTF-8 text (got bytes that are not valid UTF-8)`);
    p = index({ weight_map: { a: 'absent.safetensors' } }, 'bad9.index.json');
    refused(() => ShardedSafetensors.open(p), `safetensors ${join(shardDir, 'absent.safetensors')}: the path must be a readable file`);
  });
});

// ---- GGUF ----

const gg = (spec: GgufSpec) => ggufBytes(spec, r);
const G = 'gguf bad.gguf: ';
const openG = (bytes: Uint8Array) => () => GgufFile.fromBytes(bytes, 'bad.gguf');
/** The bytes with a u32 or u64 field (found by its name in the writer's map) set to v. */
function edit(w: ReturnType<typeof gg>, what: string, v: number | bigint): Uint8Array {
  const f = w.fields.find((x) => x.what === what);
  if (f === undefined) throw new Error(`no field ${what} in ${w.fields.map((x) => x.what).join(', ')}`);
  const b = w.bytes.slice();
  const dv = new DataView(b.buffer);
  if (f.size === 4) dv.setUint32(f.at, Number(v), true);
  else if (f.size === 8) dv.setBigUint64(f.at, BigInt(v), true);
  else dv.setUint8(f.at, Number(v));
  return b;
}

describe('gguf: a valid file', () => {
  test('every metadata type, arrays of each, nested arrays; versions 2 and 3 read alike', () => {
    const meta = everyMetadataType();
    for (const version of [2, 3]) {
      const f = GgufFile.fromBytes(gg({ version, metadata: meta, tensors: [{ name: 'w', type: 'F32', dims: [3] }] }).bytes, 'x.gguf');
      expect(f.version).toBe(version);
      expect(f.alignment).toBe(32);
      expect([...f.metadata.keys()]).toEqual(meta.map(([k]) => k));
      for (const [k, v] of meta) expect(f.metadata.get(k)).toEqual(v);
      expect(f.architecture).toBe('llama');
      expect(f.getNumber('t.u32')).toBe(4000000000);
      expect(f.getNumber('t.i32')).toBe(-2000000000);
      expect(f.getNumber('t.f64')).toBe(Math.PI);
      expect(f.getString('t.string')).toBe('héllo, ✓');
      expect(f.get('a.string')).toEqual(['a', '', 'tokens ▁x']);
      expect(f.getNumber('absent')).toBeUndefined();
      refused(() => f.getNumber('t.u64'), 'gguf x.gguf: the metadata value of "t.u64" must be a number below 2^53 (got 9223372036854775813)');
      refused(() => f.getNumber('t.i64'), 'gguf x.gguf: the metadata value of "t.i64" must be a number below 2^53 (got -4611686018427387904)');
      refused(() => f.getNumber('t.string'), 'gguf x.gguf: the metadata value of "t.string" must be a number (got a string)');
      refused(() => f.getString('t.u8'), 'gguf x.gguf: the metadata value of "t.u8" must be a string (got a u8)');
    }
  });

  test('alignment: the default 32, general.alignment 1 and 64; data start and offsets follow it', () => {
    for (const alignment of [undefined, 1, 64]) {
      const w = gg({ alignment, tensors: [{ name: 'a', type: 'F32', dims: [3] }, { name: 'b', type: 'Q8_0', dims: [32, 2] }, { name: 'c', type: 'I8', dims: [5] }] });
      const f = GgufFile.fromBytes(w.bytes);
      const al = alignment ?? 32;
      expect(f.alignment).toBe(al);
      expect(f.dataStart).toBe(w.dataStart);
      expect(f.dataStart % al).toBe(0);
      for (const [name, data] of w.data) {
        expect(f.info(name).byteOffset % al).toBe(0);
        expect([...f.bytes(name)]).toEqual([...data]);
      }
    }
  });

  test('ggml types: llama.cpp numbers, block sizes and bytes per block; sizes and storage of the tensors', () => {
    const want: Record<string, [number, number, number]> = {
      F32: [0, 1, 4], F16: [1, 1, 2], BF16: [30, 1, 2], Q4_0: [2, 32, 18], Q4_1: [3, 32, 20], Q5_0: [6, 32, 22], Q5_1: [7, 32, 24],
      Q8_0: [8, 32, 34], Q2_K: [10, 256, 84], Q3_K: [11, 256, 110], Q4_K: [12, 256, 144], Q5_K: [13, 256, 176], Q6_K: [14, 256, 210], Q8_K: [15, 256, 292],
    };
    for (const [name, [id, block, bytes]] of Object.entries(want)) {
      expect(ggmlType(name)).toMatchObject({ id, name, blockSize: block, typeSize: bytes, quantized: block > 1 });
      expect(ggmlType(id)?.name).toBe(name);
    }
    expect(new Set(GGML_TYPES.map((t) => t.id)).size).toBe(GGML_TYPES.length);
    // One tensor of each type, [2 rows, one or two blocks], in one file.
    const tensors = GGML_TYPES.map((t, i) => ({ name: `t${i}.${t.name}`, type: t.name, dims: [t.blockSize * (1 + (i % 2)), 2] }));
    const w = gg({ tensors });
    const f = GgufFile.fromBytes(w.bytes);
    for (const [i, t] of GGML_TYPES.entries()) {
      const info = f.info(`t${i}.${t.name}`);
      const rowBytes = (1 + (i % 2)) * t.typeSize;
      expect(info).toMatchObject({ dtype: t.name, shape: [2, t.blockSize * (1 + (i % 2))], dims: [t.blockSize * (1 + (i % 2)), 2], byteLength: 2 * rowBytes });
      if (t.quantized) expect(info.storage).toEqual({ dtype: 'u8', shape: [2, rowBytes], raw: true });
    }
    expect(f.info('t0.F32').storage).toEqual({ dtype: 'f32', shape: [2, 1], raw: false });
    const bf = GGML_TYPES.findIndex((t) => t.name === 'BF16');
    expect(f.info(`t${bf}.BF16`).storage).toEqual({ dtype: 'bf16', shape: [2, 1 + (bf % 2)], raw: false });
  });

  test('no tensors; zero-dimension (scalar) and zero-element tensors', () => {
    const f = GgufFile.fromBytes(gg({ metadata: [['k', { type: 'u8', value: 1 }]] }).bytes);
    expect(f.tensors.size).toBe(0);
    const g = GgufFile.fromBytes(gg({ tensors: [{ name: 's', type: 'F32', dims: [] }, { name: 'z', type: 'F16', dims: [0, 3] }] }).bytes);
    expect(g.info('s')).toMatchObject({ shape: [], byteLength: 4 });
    expect(g.info('z')).toMatchObject({ shape: [3, 0], byteLength: 0 });
  });

  test('open() and openWeights()', () => {
    const p = file(gg({ tensors: [{ name: 'w', type: 'Q4_K', dims: [256, 2] }] }).bytes, 'm.gguf');
    expect(GgufFile.open(p).info('w').file).toBe(p);
    expect(openWeights(p)).toBeInstanceOf(GgufFile);
    refused(() => openWeights(join(dir, 'x.bin')), 'openWeights: path must be a .gguf, .safetensors or .index.json file, or a checkpoint folder');
    refused(() => openWeights(mkdtempSync(join(dir, 'empty-'))), 'openWeights: path must be a folder holding model.safetensors.index.json or model.safetensors');
  });
});

describe('gguf: every refusal names the file, the key or tensor, expected and found', () => {
  const base = () => gg({ metadata: [['general.architecture', { type: 'string', value: 'llama' }], ['k.b', { type: 'bool', value: true }]], tensors: [{ name: 'w', type: 'Q4_0', dims: [32, 2] }, { name: 'n', type: 'F32', dims: [4] }] });

  test('magic, version, endianness', () => {
    const w = base();
    const b = w.bytes.slice();
    b[0] = 0x47 + 1;
    refused(openG(b), `${G}the magic (bytes 0 to 4) must be "GGUF" (got "HGUF")`);
    refused(openG(w.bytes.subarray(0, 6)), `${G}the version (at byte 4) must be 4 bytes inside the file (got 2 bytes left of 6; truncated?)`);
    refused(openG(edit(w, 'version', 1)), `${G}the version must be 2 or 3 (got 1 (32-bit counts, superseded by version 2))`);
    refused(openG(edit(w, 'version', 4)), `${G}the version must be 2 or 3 (got 4)`);
    refused(openG(edit(w, 'version', 0x03000000)), `${G}the version must be 2 or 3, little-endian (got 50331648: a big-endian file, which this reader does not take)`);
  });

  test('counts held against the bytes left', () => {
    const w = base();
    refused(openG(edit(w, 'tensor count', 2n ** 62n)), `${G}the tensor count (at byte 8) must be below 2^53 (got 4611686018427387904)`);
    refused(openG(edit(w, 'metadata count', 1e9)), `${G}the metadata count (at byte 16) must be at most`, 'bytes left (got 1000000000)');
    refused(openG(edit(w, 'tensor count', 1e6)), `${G}the tensor count (at byte 8) must be at most`, '(got 1000000)');
  });

  test('metadata keys and values', () => {
    const w = base();
    refused(openG(edit(w, 'key general.architecture length', 70000)), `${G}metadata key 0 length (at byte 24) must be at most 65535 bytes (got 70000)`);
    refused(openG(edit(w, 'key general.architecture length', 2n ** 60n)), `${G}metadata key 0 length (at byte 24) must be below 2^53`);
    refused(openG(edit(w, 'key general.architecture length', 5000)), `${G}metadata key 0 (at byte 32) must be 5000 bytes inside the file (got`, 'truncated?');
    const bad = w.bytes.slice();
    bad[32] = 0xff; // the key's first byte
    refused(openG(bad), `${G}metadata key 0 (at byte 32) must be UTF-8 text (got bytes that are not valid UTF-8)`);
    refused(openG(gg({ metadata: [['a', { type: 'u8', value: 1 }], ['a', { type: 'u8', value: 2 }]] }).bytes), `${G}the metadata key "a" (at byte`, 'must be unique (got a second entry)');
    refused(openG(edit(w, 'value k.b type', 13)), `${G}the metadata value of "k.b" type (at byte`, 'must be a value type 0 to 12 (got 13)');
    refused(openG(edit(w, 'value k.b value', 2)), `${G}the metadata value of "k.b" (at byte`, 'must be a boolean byte, 0 or 1 (got 2)');
    refused(openG(edit(w, 'value general.architecture value', 1e6)), `${G}the metadata value of "general.architecture" (at byte`, 'must be 1000000 bytes inside the file');
  });

  test('arrays: huge counts, nesting, strings past the end', () => {
    const arr: [string, GgufValue][] = [['a', { type: 'array', value: { itemType: 'u32', items: new Uint32Array([1, 2, 3]) } }]];
    const w = gg({ metadata: arr });
    refused(openG(edit(w, 'value a count', 2n ** 40n)), `${G}the metadata value of "a" count (at byte`, 'must be at most the', 'items of u32 that the', '(got 1099511627776)');
    refused(openG(edit(w, 'value a item type', 99)), `${G}the metadata value of "a" item type (at byte`, 'must be a value type 0 to 12 (got 99)');
    const strings = gg({ metadata: [['s', { type: 'array', value: { itemType: 'string', items: ['ab', 'cd'] } }]] });
    const b = strings.bytes.slice();
    new DataView(b.buffer).setBigUint64(strings.fields.find((f) => f.what === 'value s count')!.at + 8 + 8 + 2, 999n, true); // second string's length
    refused(openG(b), `${G}the metadata value of "s"[1] (at byte`, 'must be 999 bytes inside the file');
    let deep: GgufValue = { type: 'array', value: { itemType: 'u8', items: new Uint8Array([1]) } };
    for (let i = 0; i < 4; i++) deep = { type: 'array', value: { itemType: 'array', items: [deep.value as never] } };
    refused(openG(gg({ metadata: [['d', deep]] }).bytes), `${G}the metadata value of "d"[0][0][0] (at byte`, 'must be arrays nested at most 4 deep (got a deeper array)');
  });

  test('general.alignment', () => {
    refused(openG(gg({ metadata: [['general.alignment', { type: 'u64', value: 32n }]] }).bytes), `${G}the metadata value of "general.alignment" must be a u32 (got a u64)`);
    refused(openG(gg({ alignment: 48 }).bytes), `${G}the metadata value of "general.alignment" must be a power of two (got 48)`);
    refused(openG(gg({ alignment: 0 }).bytes), `${G}the metadata value of "general.alignment" must be a power of two (got 0)`);
  });

  test('tensor infos: names, dimensions, types, blocks, offsets', () => {
    const w = base();
    refused(openG(gg({ tensors: [{ name: 'x'.repeat(64), type: 'F32', dims: [1] }] }).bytes), `${G}the name of tensor info 0 length (at byte 24) must be at most 63 bytes (got 64)`);
    refused(openG(gg({ tensors: [{ name: 'a', type: 'F32', dims: [1] }, { name: 'a', type: 'F32', dims: [1] }] }).bytes), `${G}the tensor name "a" (tensor info 1, at byte`, 'must be unique (got a second entry)');
    refused(openG(edit(w, 'tensor w n_dims', 5)), `${G}the tensor "w" dimension count must be at most 4 (got 5)`);
    refused(openG(edit(w, 'tensor w dims[1]', 2n ** 60n)), `${G}the tensor "w" dims[1] (at byte`, 'must be below 2^53 (got 1152921504606846976)');
    refused(openG(gg({ tensors: [{ name: 'o', type: 'F32', dims: [2 ** 30, 2 ** 30, 2 ** 30], data: new Uint8Array(4) }] }).bytes), `${G}the tensor "o" dims must be a product below 2^53 (got [1073741824, 1073741824, 1073741824])`);
    let e = refused(openG(edit(w, 'tensor w type', 99)), `${G}the tensor "w" type (at byte`, 'must be a ggml type number (got 99)');
    expect(e.kind).toBe('UnsupportedDtype');
    e = refused(openG(edit(w, 'tensor w type', 4)), `${G}the tensor "w" type`, '(got 4, a type ggml has removed)');
    expect(e.kind).toBe('UnsupportedDtype');
    refused(openG(gg({ tensors: [{ name: 'q', type: 'Q4_K', dims: [255, 2], data: new Uint8Array(288) }] }).bytes), `${G}the tensor "q" dims[0] (innermost) must be a multiple of the Q4_K block of 256 (got 255)`);
    refused(openG(edit(w, 'tensor n offset', 40)), `${G}the tensor "n" offset must be a multiple of the alignment 32 (got 40)`);
  });

  test('data: inside the data section, no two tensors overlapping', () => {
    const w = base();
    refused(openG(w.bytes.subarray(0, w.bytes.length - 1)), `${G}the tensor "n" data must be inside the`, 'truncated?');
    refused(openG(w.bytes.subarray(0, w.dataStart - 1)), `${G}the data section start (byte ${w.dataStart}) must be inside the file (got a file of ${w.dataStart - 1} bytes; truncated?)`);
    refused(openG(edit(w, 'tensor n offset', 2n ** 50n)), `${G}the tensor "n" data must be inside the`);
    refused(openG(edit(w, 'tensor n offset', 0)), `${G}the tensor "w" data (bytes 0 to 36) must be clear of the tensor "n" (bytes 0 to 16) (got an overlap)`);
  });
});

// ---- mmap + upload, on every backend ----

function sameBytes(got: ArrayBufferView, want: Uint8Array): boolean {
  return Buffer.from(got.buffer, got.byteOffset, got.byteLength).equals(want);
}

function checkPacked(source: WeightSource, packed: ReturnType<WeightSource['uploadPacked']>, align: number): void {
  for (const [name, view] of packed.views) {
    const t = source.info(name);
    expect({ name, dtype: view.dtype, shape: view.shape }).toEqual({ name, dtype: t.storage.dtype, shape: [...t.storage.shape] });
    expect(view.byteOffset % align).toBe(0);
    expect(sameBytes(view.read(), source.bytes(name))).toBe(true);
  }
}

describeBackends('weights upload', ({ device }) => {
  test('safetensors: each tensor into its own buffer, from the mapped file', () => {
    const ts = someTensors();
    const f = SafetensorsFile.open(file(safetensorsBytes(ts)));
    for (const t of ts.filter((x) => x.data.length > 0)) {
      using b = f.upload(device(), t.name);
      const info = f.info(t.name);
      expect({ dtype: b.dtype, shape: b.shape }).toEqual({ dtype: info.storage.dtype, shape: [...info.storage.shape] });
      expect(sameBytes(b.read(), t.data)).toBe(true);
    }
    refused(() => f.upload(device(), 'empty'), 'upload: the tensor "empty" must be a tensor with elements (device buffers hold at least one) (got shape [0, 4])');
  });

  test('gguf: packed into one buffer, views at multiples of the alignment, numbers readable through the views', () => {
    const w = gg({
      alignment: 64,
      tensors: [
        { name: 'blk.0.ffn_down_exps.weight', type: 'Q4_K', dims: [256, 3, 2] },
        { name: 'blk.0.attn_norm.weight', type: 'F32', dims: [5] },
        { name: 'blk.0.attn_q.weight', type: 'BF16', dims: [3, 3] },
        { name: 'blk.0.ffn_gate_inp.weight', type: 'Q8_0', dims: [32, 1] },
        { name: 'rope_freqs.weight', type: 'F16', dims: [7] },
      ],
    });
    const f = GgufFile.open(file(w.bytes, 'packed.gguf'));
    using packed = f.uploadPacked(device());
    expect(packed.buffers.length).toBe(1);
    checkPacked(f, packed, 256);
    expect(packed.get('blk.0.ffn_down_exps.weight').shape).toEqual([2, 3, 144]); // experts x rows x row bytes
    expect(sameBytes(packed.get('blk.0.ffn_down_exps.weight').slice(1).read(), f.bytes('blk.0.ffn_down_exps.weight').subarray(432))).toBe(true);
    const norm = packed.get('blk.0.attn_norm.weight').readNumbers();
    expect([...norm]).toEqual([...new Float32Array(w.data.get('blk.0.attn_norm.weight')!.slice().buffer)]);
    refused(() => packed.get('nope'), 'PackedWeights.get: name must be one of the 5 packed tensors (got "nope")');
  });

  test('a size limit splits the tensors over several buffers; align and names as asked', () => {
    const ts = Array.from({ length: 9 }, (_, i) => ({ name: `t${i}`, dtype: 'F32', shape: [13 + i], data: randomBytes(r, 4 * (13 + i)) }));
    const f = SafetensorsFile.open(file(safetensorsBytes(ts)));
    using packed = f.uploadPacked(device(), ts.map((t) => t.name).reverse(), { align: 16, maxBufferBytes: 200 });
    expect(packed.buffers.length).toBeGreaterThan(2);
    for (const b of packed.buffers) expect(b.byteLength).toBeLessThanOrEqual(200);
    expect([...packed.views.keys()]).toEqual(ts.map((t) => t.name).reverse());
    checkPacked(f, packed, 16);
    using some = f.uploadPacked(device(), ['t3', 't1']);
    expect([...some.views.keys()]).toEqual(['t3', 't1']);
    checkPacked(f, some, 256);
  });

  test('a sharded checkpoint packs across its shards', () => {
    const d = join(dir, `shards-${fileNo++}`);
    mkdirSync(d);
    const ts = someTensors().filter((t) => t.data.length > 0);
    writeFileSync(join(d, 'a.safetensors'), safetensorsBytes(ts.slice(0, 2)));
    writeFileSync(join(d, 'b.safetensors'), safetensorsBytes(ts.slice(2)));
    writeFileSync(join(d, 'model.safetensors.index.json'), JSON.stringify({ weight_map: Object.fromEntries(ts.map((t, i) => [t.name, i < 2 ? 'a.safetensors' : 'b.safetensors'])) }));
    const s = openWeights(d);
    using packed = s.uploadPacked(device());
    checkPacked(s, packed, 256);
  });

  test('release frees the buffers and their views; refusals of the packing arguments', () => {
    const f = SafetensorsFile.open(file(safetensorsBytes(someTensors())));
    using all = f.uploadPacked(device()); // by default every tensor with elements
    expect([...all.views.keys()]).toEqual(f.names().filter((n) => n !== 'empty'));
    all.release();
    const packed = f.uploadPacked(device(), ['model.norm.weight', 'ids']);
    const view = packed.get('ids');
    packed.release();
    expect(view.released).toBe(true);
    expect(packed.buffers.every((b) => b.released)).toBe(true);
    const dev = device();
    refused(() => f.uploadPacked(dev, ['ids'], { align: 8 }), 'uploadPacked: opts.align must be a power of two of at least 16 (got 8)');
    refused(() => f.uploadPacked(dev, ['ids'], { align: 48 }), 'uploadPacked: opts.align must be a power of two of at least 16 (got 48)');
    refused(() => f.uploadPacked(dev, ['ids'], { maxBufferBytes: dev.limits.maxBufferLength + 1 }), "uploadPacked: opts.maxBufferBytes must be a positive integer at most the device's maxBufferLength");
    refused(() => f.uploadPacked(dev, ['ids'], { maxBufferBytes: 0 }), "uploadPacked: opts.maxBufferBytes must be a positive integer");
    refused(() => f.uploadPacked(dev, ['ids', 'ids']), 'uploadPacked: names[1] must be a name not listed before (got "ids")');
    refused(() => f.uploadPacked(dev, ['ids', 3 as unknown as string]), 'uploadPacked: names[1] must be a tensor name (got 3)');
    refused(() => f.uploadPacked(dev, ['nope']), `safetensors ${f.path}: tensor "nope" must be one of its 7 tensors`);
    refused(() => f.uploadPacked(dev, ['ids'], { maxBufferBytes: 16 }), 'uploadPacked: the tensor "ids" must be at most the buffer limit of 16 bytes (got 48 bytes)');
    refused(() => f.uploadPacked(dev, ['empty']), 'uploadPacked: the tensor "empty" must be a tensor with elements');
    refused(() => f.uploadPacked(dev, 'ids' as unknown as string[]), 'uploadPacked: names must be an array of tensor names (got "ids")');
    expect(dev.liveHandles).toBe(0);
  });
});
