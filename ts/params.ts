// Kernel parameter structs: their layouts, read from the family headers
// (shaders/<family>.h, after shaders/common.h: the one definition that MSL
// and CUDA compile too), and the packer that writes values into one.

import commonHeader from '../shaders/common.h' with { type: 'text' };
import { stripComments } from './source-text.ts';

export type ParamType = 'u32' | 'f32' | 'i32' | 'i16' | 'u64';
/** One field of a kernel's parameter struct, as the family header declares it. */
export interface ParamField {
  readonly name: string;
  readonly type: ParamType;
  readonly offset: number;
}

/**
 * The field types a param struct may hold, by their name in the headers: uint
 * and float, and the int, short and ulong of llama.cpp's argument blocks
 * (which some of mlx-native's structs copy). MSL names them so; C on the
 * Linux targets and CUDA (shaders/cuda/common.cuh) give ulong 8 bytes.
 */
const FIELD_TYPES: Readonly<Record<string, ParamType>> = { uint: 'u32', float: 'f32', int: 'i32', short: 'i16', ulong: 'u64' };

/** Bytes (and alignment) of a field of the type. */
export function paramSize(type: ParamType): number {
  return type === 'u64' ? 8 : type === 'i16' ? 2 : 4;
}

/**
 * The fields of `struct name { ... };` in a header, in order, each at the
 * next offset aligned to its size, as C, MSL and CUDA lay them out. The
 * header is read as the programs compile it, after shaders/common.h; a name
 * given by `typedef struct A name;` has A's fields. A field `struct Other
 * id;` (Other a struct of the header or of common.h) stands for Other's
 * fields, at the next offset aligned to Other's widest field, under their own
 * names: the packers fill a struct that holds another by the inner names.
 * Throws where the struct is missing, a declaration is not one such field, or
 * two fields get one name.
 */
export function structLayout(header: string, name: string): readonly ParamField[] {
  // Frozen: structSize keeps each layout's size.
  return Object.freeze(structMembers(header, name).map(({ name, type, offset }) => Object.freeze({ name, type, offset })));
}

/** The C member path of each field of structLayout(header, name), in its order: `id.M` for field M of a held struct `id`. */
export function structMemberPaths(header: string, name: string): string[] {
  return structMembers(header, name).map((m) => m.path);
}

function structMembers(header: string, name: string): (ParamField & { path: string })[] {
  const code = stripComments(`${commonHeader}\n${header}`);
  const alias = new RegExp(`\\btypedef\\s+struct\\s+(\\w+)\\s+${name}\\s*;`).exec(code);
  if (alias) return structMembers(header, alias[1]!);
  const m = new RegExp(`\\bstruct\\s+${name}\\s*\\{([^}]*)\\}\\s*;`).exec(code);
  if (!m) throw new Error(`struct ${name} not found`);
  const fields: (ParamField & { path: string })[] = [];
  let end = 0;
  for (const decl of m[1]!.split(';')) {
    if (decl.trim() === '') continue;
    const held = /^\s*struct\s+(\w+)\s+(\w+)\s*$/.exec(decl);
    if (held && held[1] !== name) {
      const inner = structMembers(header, held[1]!);
      const size = structSize(inner);
      const offset = Math.ceil(end / structAlign(inner)) * structAlign(inner);
      for (const f of inner) fields.push({ name: f.name, type: f.type, offset: offset + f.offset, path: `${held[2]!}.${f.path}` });
      end = offset + size;
      continue;
    }
    const f = /^\s*(\w+)\s+(\w+)\s*$/.exec(decl);
    const type = f ? FIELD_TYPES[f[1]!] : undefined;
    if (!f || type === undefined) {
      throw new Error(`struct ${name}: "${decl.trim()}" is not a uint, float, int, short or ulong field, nor a struct of the header`);
    }
    const size = paramSize(type);
    const offset = Math.ceil(end / size) * size;
    fields.push({ name: f[2]!, type, offset, path: f[2]! });
    end = offset + size;
  }
  const names = new Set<string>();
  for (const f of fields) {
    if (names.has(f.name)) throw new Error(`struct ${name}: two fields named ${f.name}`);
    names.add(f.name);
  }
  return fields;
}

/** The alignment of a struct of the layout: its widest field's. */
function structAlign(layout: readonly ParamField[]): number {
  return Math.max(1, ...layout.map((f) => paramSize(f.type)));
}

/** structSize of each layout asked for (layouts are made once per struct and never change; packFields asks per dispatch). */
const sizes = new WeakMap<readonly ParamField[], number>();

/** The struct's size: past its last field, rounded up to its largest field's alignment. */
export function structSize(layout: readonly ParamField[]): number {
  const known = sizes.get(layout);
  if (known !== undefined) return known;
  let end = 0;
  for (const f of layout) end = Math.max(end, f.offset + paramSize(f.type));
  const align = structAlign(layout);
  const size = Math.ceil(end / align) * align;
  sizes.set(layout, size);
  return size;
}

/** The names of the structs a header defines, in order. */
export function structNames(header: string): string[] {
  return [...stripComments(header).matchAll(/\bstruct\s+(\w+)\s*\{/g)].map((m) => m[1]!);
}

/** The names a header gives structs by `typedef struct A name;`, in order, each with its struct A. */
export function structAliases(header: string): [name: string, struct: string][] {
  return [...stripComments(header).matchAll(/\btypedef\s+struct\s+(\w+)\s+(\w+)\s*;/g)].map((m) => [m[2]!, m[1]!]);
}

/**
 * Packs values into a struct of the given layout (little-endian; padding
 * zero). A u64 takes a safe integer >= 0 (the ops' byte strides).
 */
export function packFields(layout: readonly ParamField[], values: Readonly<Record<string, number>>): Uint8Array {
  const bytes = new Uint8Array(structSize(layout));
  const view = new DataView(bytes.buffer);
  for (const f of layout) {
    const v = values[f.name];
    if (v === undefined) throw new Error(`packFields: no value for field ${f.name}`);
    switch (f.type) {
      case 'u32': view.setUint32(f.offset, v, true); break;
      case 'f32': view.setFloat32(f.offset, v, true); break;
      case 'i32': view.setInt32(f.offset, v, true); break;
      case 'i16': view.setInt16(f.offset, v, true); break;
      case 'u64':
        if (!Number.isSafeInteger(v) || v < 0) throw new Error(`packFields: ${f.name} must be a safe integer >= 0 (got ${v})`);
        view.setBigUint64(f.offset, BigInt(v), true);
        break;
    }
  }
  return bytes;
}
