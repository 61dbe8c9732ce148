// Kernel parameter structs: their layouts, read from the family headers
// (shaders/<family>.h, the one definition that MSL and CUDA compile too), and
// the packer that writes values into one.

import { stripComments } from './source-text.ts';

export type ParamType = 'u32' | 'f32';
/** One field of a kernel's parameter struct, as the family header declares it. */
export interface ParamField {
  readonly name: string;
  readonly type: ParamType;
  readonly offset: number;
}

/** The 4-byte field types a param struct may hold, by their name in the headers. */
const FIELD_TYPES: Readonly<Record<string, ParamType>> = { uint: 'u32', float: 'f32' };

/**
 * The fields of `struct name { ... };` in a header, in order, each a uint
 * (u32) or float (f32) of 4 bytes at the next 4-byte offset, as C, MSL and
 * CUDA lay them out. Throws where the struct is missing or a declaration is
 * not one such field.
 */
export function structLayout(header: string, name: string): ParamField[] {
  const m = new RegExp(`\\bstruct\\s+${name}\\s*\\{([^}]*)\\}\\s*;`).exec(stripComments(header));
  if (!m) throw new Error(`struct ${name} not found`);
  const fields: ParamField[] = [];
  for (const decl of m[1]!.split(';')) {
    if (decl.trim() === '') continue;
    const f = /^\s*(\w+)\s+(\w+)\s*$/.exec(decl);
    const type = f ? FIELD_TYPES[f[1]!] : undefined;
    if (!f || type === undefined) throw new Error(`struct ${name}: "${decl.trim()}" is not a uint or float field`);
    fields.push({ name: f[2]!, type, offset: 4 * fields.length });
  }
  return fields;
}

/** The names of the structs a header defines, in order. */
export function structNames(header: string): string[] {
  return [...stripComments(header).matchAll(/\bstruct\s+(\w+)\s*\{/g)].map((m) => m[1]!);
}

/** Packs values into a struct of the given layout (little-endian, 4-byte fields). */
export function packFields(layout: readonly ParamField[], values: Readonly<Record<string, number>>): Uint8Array {
  const size = layout.reduce((end, f) => Math.max(end, f.offset + 4), 0);
  const bytes = new Uint8Array(size);
  const view = new DataView(bytes.buffer);
  for (const f of layout) {
    const v = values[f.name];
    if (v === undefined) throw new Error(`packFields: no value for field ${f.name}`);
    if (f.type === 'u32') view.setUint32(f.offset, v, true);
    else view.setFloat32(f.offset, v, true);
  }
  return bytes;
}
