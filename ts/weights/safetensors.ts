// safetensors: an 8-byte little-endian header length N, N bytes of a JSON
// object, then the data section. The object maps each tensor name to
// { dtype, shape, data_offsets: [begin, end] } with offsets relative to the
// data section; the optional "__metadata__" maps strings to strings. As the
// format's own validation does, the tensors must cover the data section
// exactly: sorted by offset, each starts where the one before ends, the
// first at 0 and the last at the end of the file, and each spans exactly
// its shape times its dtype's size.
//
// Sharded checkpoints: model.safetensors.index.json maps every tensor name
// to the shard file holding it ("weight_map"); the shards sit beside it.

import { dirname, join } from 'node:path';
import { MlxError } from '../errors.ts';
import {
  decodeUtf8,
  elementProduct,
  elementStorage,
  fileError,
  givenBytes,
  mapFile,
  shown,
  type FileBytes,
  type TensorInfo,
} from './common.ts';
import { findDuplicateKey } from './json.ts';
import { FileSource, WeightSource } from './source.ts';

/** Bytes per element of each safetensors dtype this reader takes. */
export const SAFETENSORS_DTYPES = {
  F64: 8, F32: 4, F16: 2, BF16: 2,
  I64: 8, I32: 4, I16: 2, I8: 1,
  U64: 8, U32: 4, U16: 2, U8: 1,
  BOOL: 1, F8_E4M3: 1, F8_E5M2: 1,
} as const;
export type SafetensorsDType = keyof typeof SAFETENSORS_DTYPES;

/** The largest header this reader parses (the format's reference implementation has the same limit). */
export const SAFETENSORS_MAX_HEADER_BYTES = 100_000_000;
/** The longest tensor name, in UTF-8 bytes. */
export const SAFETENSORS_MAX_NAME_BYTES = 1024;
/** The most dimensions a tensor may have. */
export const SAFETENSORS_MAX_RANK = 16;

export interface SafetensorsTensorInfo extends TensorInfo {
  readonly format: 'safetensors';
  readonly dtype: SafetensorsDType;
  /** [begin, end) relative to the data section, as the header gives them. */
  readonly dataOffsets: readonly [number, number];
}

export interface SafetensorsHeader {
  /** N, the JSON header's length in bytes. */
  readonly headerLength: number;
  /** Where the data section starts in the file: 8 + N. */
  readonly dataStart: number;
  /** "__metadata__", or null where the header has none. */
  readonly metadata: Readonly<Record<string, string>> | null;
  /** Every tensor, in the order of its bytes. */
  readonly tensors: ReadonlyMap<string, SafetensorsTensorInfo>;
}

const encoder = new TextEncoder();

/**
 * Parses and checks the header of a safetensors file held in `bytes`; `file`
 * names it in messages. Costs O(header): the data section is only measured.
 * Every inconsistency is an MlxError naming the file, the tensor or field,
 * what was expected and what was found.
 */
export function parseSafetensors(bytes: Uint8Array, file: string): SafetensorsHeader {
  const err = (subject: string, expected: string, actual: string, kind: 'InvalidArgument' | 'UnsupportedDtype' = 'InvalidArgument') =>
    fileError('safetensors', file, subject, expected, actual, kind);
  if (bytes.length < 8) throw err('the header length (bytes 0 to 8)', 'a little-endian u64', `a file of ${bytes.length} bytes; truncated?`);
  const n64 = new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true);
  if (n64 > BigInt(SAFETENSORS_MAX_HEADER_BYTES)) {
    throw err('the header length', `at most ${SAFETENSORS_MAX_HEADER_BYTES} bytes`, `${n64}`);
  }
  const n = Number(n64);
  if (n > bytes.length - 8) throw err('the header length', `at most the ${bytes.length - 8} bytes after it`, `${n}; truncated?`);
  if (n < 2) throw err('the header', 'a JSON object', `${n} bytes`);
  const text = decodeUtf8(bytes.subarray(8, 8 + n));
  if (text === null) throw err('the header', 'UTF-8 text', 'bytes that are not valid UTF-8');
  if (!text.startsWith('{')) throw err('the header', "a JSON object starting with '{'", shown(text.slice(0, 16)));
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw err('the header', 'valid JSON', (e as Error).message);
  }
  // Valid JSON that starts with '{' is an object.
  const dup = findDuplicateKey(text);
  if (dup !== null) {
    throw dup.parent === null
      ? err(`the tensor name ${shown(dup.key)}`, 'unique in the header', 'two entries')
      : err(`the entry of ${shown(dup.parent)}`, 'an object with unique keys', `${shown(dup.key)} twice`);
  }

  const dataLength = bytes.length - 8 - n;
  let metadata: Record<string, string> | null = null;
  const entries: { name: string; dtype: SafetensorsDType; shape: number[]; begin: number; end: number }[] = [];
  for (const [name, entry] of Object.entries(parsed as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) throw err('"__metadata__"', 'an object of strings', shown(entry));
      metadata = Object.create(null) as Record<string, string>;
      for (const [k, v] of Object.entries(entry as Record<string, unknown>)) {
        if (typeof v !== 'string') throw err(`"__metadata__" key ${shown(k)}`, 'a string', shown(v));
        metadata[k] = v;
      }
      continue;
    }
    const what = `the tensor ${shown(name)}`;
    if (name.length === 0) throw err('a tensor name', 'non-empty', '""');
    if (!name.isWellFormed()) throw err(`the tensor name ${shown(name)}`, 'valid Unicode', 'a lone surrogate escape');
    // UTF-8 takes at most 3 bytes per UTF-16 unit: only a long name is measured.
    if (name.length * 3 > SAFETENSORS_MAX_NAME_BYTES) {
      const nameBytes = encoder.encode(name).length;
      if (nameBytes > SAFETENSORS_MAX_NAME_BYTES) throw err(`the tensor name ${shown(name)}`, `at most ${SAFETENSORS_MAX_NAME_BYTES} bytes of UTF-8`, `${nameBytes} bytes`);
    }
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) throw err(what, 'an object { dtype, shape, data_offsets }', shown(entry));
    const e = entry as Record<string, unknown>;
    for (const k of Object.keys(e)) {
      if (k !== 'dtype' && k !== 'shape' && k !== 'data_offsets') throw err(what, 'an object of dtype, shape and data_offsets only', `the key ${shown(k)}`);
    }
    const dtype = e['dtype'];
    if (typeof dtype !== 'string' || !Object.hasOwn(SAFETENSORS_DTYPES, dtype)) {
      throw err(`${what} dtype`, `one of ${Object.keys(SAFETENSORS_DTYPES).join(', ')}`, shown(dtype), 'UnsupportedDtype');
    }
    const shape = e['shape'];
    if (!Array.isArray(shape) || shape.length > SAFETENSORS_MAX_RANK) {
      throw err(`${what} shape`, `an array of at most ${SAFETENSORS_MAX_RANK} dimensions`, shown(shape));
    }
    for (let i = 0; i < shape.length; i++) {
      if (!Number.isSafeInteger(shape[i]) || (shape[i] as number) < 0) throw err(`${what} shape[${i}]`, 'an integer >= 0', shown(shape[i]));
    }
    const offsets = e['data_offsets'];
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isSafeInteger(o) && (o as number) >= 0)) {
      throw err(`${what} data_offsets`, '[begin, end], integers >= 0', shown(offsets));
    }
    const [begin, end] = offsets as [number, number];
    if (begin > end) throw err(`${what} data_offsets`, 'begin <= end', `[${begin}, ${end}]`);
    if (end > dataLength) throw err(`${what} data_offsets`, `within the ${dataLength}-byte data section`, `[${begin}, ${end}]; truncated?`);
    const count = elementProduct(shape as number[]);
    const size = SAFETENSORS_DTYPES[dtype as SafetensorsDType];
    const byteCount = count < 0 ? -1 : count * size;
    if (!Number.isSafeInteger(byteCount)) throw err(`${what} shape`, 'a byte size below 2^53', `[${shape.join(', ')}] of ${dtype}, which overflows`);
    if (byteCount !== end - begin) {
      throw err(`${what} data_offsets`, `${byteCount} bytes apart (shape [${shape.join(', ')}] of ${dtype})`, `[${begin}, ${end}], ${end - begin} bytes`);
    }
    entries.push({ name, dtype: dtype as SafetensorsDType, shape: shape as number[], begin, end });
  }

  // Coverage, as the format requires: in offset order, no gap and no overlap.
  entries.sort((a, b) => a.begin - b.begin || a.end - b.end);
  let expected = 0;
  let previous: string | null = null;
  for (const t of entries) {
    if (t.begin !== expected) {
      throw t.begin < expected
        ? err(`the tensor ${shown(t.name)} data_offsets`, `clear of the tensor ${shown(previous)} (which ends at ${expected})`, `[${t.begin}, ${t.end}]: they overlap`)
        : err(`the tensor ${shown(t.name)} data_offsets`, `[${expected}, ${expected + t.end - t.begin}], starting where ${previous === null ? 'the data section starts' : `the tensor ${shown(previous)} ends`}`, `[${t.begin}, ${t.end}]: a gap of ${t.begin - expected} bytes`);
    }
    expected = t.end;
    previous = t.name;
  }
  if (expected !== dataLength) {
    throw err('the data section', `covered by the tensors up to its end (${dataLength} bytes)`, `tensors ending at ${expected}`);
  }

  const dataStart = 8 + n;
  const tensors = new Map<string, SafetensorsTensorInfo>();
  for (const t of entries) {
    const shape = t.shape;
    tensors.set(t.name, {
      name: t.name,
      format: 'safetensors' as const,
      file,
      dtype: t.dtype,
      shape,
      elementCount: elementProduct(shape),
      byteOffset: dataStart + t.begin,
      byteLength: t.end - t.begin,
      storage: elementStorage(t.dtype, shape, SAFETENSORS_DTYPES[t.dtype]),
      dataOffsets: [t.begin, t.end],
    });
  }
  return { headerLength: n, dataStart, metadata: metadata === null ? null : Object.freeze(metadata), tensors };
}

/** One safetensors file, mapped into memory and checked. */
export class SafetensorsFile extends FileSource<SafetensorsTensorInfo> {
  readonly headerLength: number;
  readonly metadata: Readonly<Record<string, string>> | null;

  /** `h`: the file's header, parsed as the file is given. */
  private constructor(file: FileBytes, h = parseSafetensors(file.bytes, file.path)) {
    super('safetensors', file, h);
    this.headerLength = h.headerLength;
    this.metadata = h.metadata;
  }

  /** Maps the file (Bun.mmap, read-only) and checks its header. */
  static open(path: string): SafetensorsFile {
    return new SafetensorsFile(mapFile('safetensors', path));
  }

  /** A file already in memory; `name` stands for its path in messages. */
  static fromBytes(bytes: Uint8Array, name = '<memory>'): SafetensorsFile {
    return new SafetensorsFile(givenBytes('safetensors', bytes, name));
  }

  /** @internal the whole mapped file (a sharded checkpoint reads its tensors through it) */
  get mapped(): Uint8Array {
    return this.file.bytes;
  }

  /** True when opened from a file (false: fromBytes). */
  get fromFile(): boolean {
    return this.file.mapped;
  }
}

/** The largest index file read (real indexes are a few MB). */
const MAX_INDEX_BYTES = 64 * 1024 * 1024;

/**
 * A sharded checkpoint: the index (model.safetensors.index.json) and every
 * shard it names, each mapped and checked. The index and the shards must
 * agree: every tensor the weight_map lists is in the shard it names, and
 * every tensor of a shard is listed under that shard. Shard names are plain
 * file names in the index's folder (no path separators, no "..").
 */
export class ShardedSafetensors extends WeightSource {
  readonly indexPath: string;
  readonly description: string;
  /** The index's "metadata" object (total_size, ...), or null. */
  readonly metadata: Readonly<Record<string, unknown>> | null;
  /** The shards by file name, in the order the weight_map first names them. */
  readonly shards: ReadonlyMap<string, SafetensorsFile>;
  readonly tensors: ReadonlyMap<string, SafetensorsTensorInfo>;
  private readonly shardOf = new Map<string, SafetensorsFile>();

  private constructor(indexPath: string, metadata: Record<string, unknown> | null, shards: Map<string, SafetensorsFile>, weightMap: Map<string, string>) {
    super();
    this.indexPath = indexPath;
    this.description = `safetensors index ${indexPath}`;
    this.metadata = metadata;
    this.shards = shards;
    const err = (subject: string, expected: string, actual: string) => fileError('safetensors index', indexPath, subject, expected, actual);
    for (const [name, shardName] of weightMap) {
      if (!shards.get(shardName)!.has(name)) throw err(`the tensor ${shown(name)}`, `held by its shard ${shown(shardName)}`, 'a shard without it');
    }
    const tensors = new Map<string, SafetensorsTensorInfo>();
    for (const [shardName, shard] of shards) {
      for (const [name, t] of shard.tensors) {
        const listed = weightMap.get(name);
        if (listed !== shardName) {
          throw err(`the tensor ${shown(name)} of the shard ${shown(shardName)}`, 'listed in the weight_map under that shard', listed === undefined ? 'no entry' : `an entry for ${shown(listed)}`);
        }
        tensors.set(name, t);
        this.shardOf.set(name, shard);
      }
    }
    this.tensors = tensors;
  }

  /** Reads the index, then maps and checks every shard it names. */
  static open(indexPath: string): ShardedSafetensors {
    const file = mapFile('safetensors index', indexPath);
    const err = (subject: string, expected: string, actual: string) => fileError('safetensors index', indexPath, subject, expected, actual);
    if (file.bytes.length > MAX_INDEX_BYTES) throw err('the file', `at most ${MAX_INDEX_BYTES} bytes`, `${file.bytes.length} bytes`);
    const text = decodeUtf8(file.bytes);
    if (text === null) throw err('the file', 'UTF-8 text', 'bytes that are not valid UTF-8');
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (e) {
      throw err('the file', 'valid JSON', (e as Error).message);
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw err('the file', 'a JSON object', shown(parsed));
    const dup = findDuplicateKey(text);
    if (dup !== null) throw err(dup.parent === null ? 'the top-level object' : `the object ${shown(dup.parent)}`, 'an object with unique keys', `${shown(dup.key)} twice`);
    const obj = parsed as Record<string, unknown>;
    const meta = obj['metadata'];
    if (meta !== undefined && meta !== null && (typeof meta !== 'object' || Array.isArray(meta))) throw err('"metadata"', 'an object', shown(meta));
    const wm = obj['weight_map'];
    if (typeof wm !== 'object' || wm === null || Array.isArray(wm)) throw err('"weight_map"', 'an object of tensor name to shard file name', shown(wm));
    const weightMap = new Map<string, string>();
    const shardNames = new Set<string>();
    for (const [name, shard] of Object.entries(wm as Record<string, unknown>)) {
      if (typeof shard !== 'string' || shard.length === 0 || shard === '.' || shard === '..' || /[/\\\0]/.test(shard)) {
        throw err(`the shard of ${shown(name)}`, 'a file name in the index folder (no path separator, not "." or "..")', shown(shard));
      }
      weightMap.set(name, shard);
      shardNames.add(shard);
    }
    const dir = dirname(indexPath);
    const shards = new Map<string, SafetensorsFile>();
    for (const s of shardNames) shards.set(s, SafetensorsFile.open(join(dir, s)));
    return new ShardedSafetensors(indexPath, (meta ?? null) as Record<string, unknown> | null, shards, weightMap);
  }

  /** The shard file that holds the tensor. */
  shardFor(name: string): SafetensorsFile {
    this.info(name);
    return this.shardOf.get(name)!;
  }

  protected fileBytes(info: TensorInfo): Uint8Array {
    const shard = this.shardOf.get(info.name);
    if (shard === undefined) throw new MlxError('Internal', `${this.description}: no shard holds ${shown(info.name)}`);
    return shard.mapped;
  }
}
