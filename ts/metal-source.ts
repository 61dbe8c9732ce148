// Reading declarations out of .metal sources: which buffers a kernel may write
// (the encoder places barriers from it), and, for the tests that hold the
// TypeScript side against the shaders, param struct layouts and binding
// declarations; reading packed param structs back.

import type { ParamField, ParamType } from './params.ts';
import { stripComments } from './source-text.ts';

/** A field of a Metal struct as declared: its Metal type, name, size and offset under natural alignment. */
export interface MetalField {
  readonly type: string;
  readonly name: string;
  readonly size: number;
  readonly offset: number;
}

/** Byte sizes of the Metal scalar types a param struct may hold. */
const METAL_SCALAR_SIZES: Readonly<Record<string, number>> = {
  bool: 1, char: 1, uchar: 1, int8_t: 1, uint8_t: 1,
  short: 2, ushort: 2, half: 2, bfloat: 2, int16_t: 2, uint16_t: 2,
  int: 4, uint: 4, float: 4, int32_t: 4, uint32_t: 4,
  long: 8, ulong: 8, int64_t: 8, uint64_t: 8,
};

/** The Metal types of the ParamTypes that the layout tables name. */
const PARAM_TYPES: Readonly<Record<string, ParamType>> = { uint: 'u32', float: 'f32' };

/** The source with its block and line comments blanked (newlines kept). */
export const stripMetalComments = stripComments;

/**
 * Fields of `struct name { ... };` in the source, in order, each a scalar
 * (uint, int, float, ushort, half, ...; comments allowed) at its offset
 * under natural alignment. Throws where the struct is missing or a
 * declaration is not one scalar field.
 */
export function metalStructFields(source: string, name: string): MetalField[] {
  const m = new RegExp(`\\bstruct\\s+${name}\\s*\\{([^}]*)\\}`).exec(stripMetalComments(source));
  if (!m) throw new Error(`struct ${name} not found`);
  const fields: MetalField[] = [];
  let end = 0;
  for (const decl of m[1]!.split(';')) {
    if (decl.trim() === '') continue;
    const f = /^\s*(\w+)\s+(\w+)\s*$/.exec(decl);
    const size = f ? METAL_SCALAR_SIZES[f[1]!] : undefined;
    if (!f || size === undefined) throw new Error(`struct ${name}: "${decl.trim()}" is not a scalar field`);
    const offset = Math.ceil(end / size) * size;
    fields.push({ type: f[1]!, name: f[2]!, size, offset });
    end = offset + size;
  }
  return fields;
}

/**
 * Fields of `struct name { ... };` as a layout table: every field a uint
 * (u32) or float (f32), 4 bytes each, laid out in order. Throws on any
 * other field type.
 */
export function metalStruct(source: string, name: string): ParamField[] {
  return metalStructFields(source, name).map((f) => {
    const type = PARAM_TYPES[f.type];
    if (type === undefined) throw new Error(`struct ${name}: field ${f.name} is a ${f.type}, not a 4-byte uint or float`);
    return { name: f.name, type, offset: f.offset };
  });
}

/**
 * The parameter list of `kernel void name(...)`, one declaration per entry,
 * whitespace collapsed. A name given by `template [[host_name("name")]]
 * kernel T fn<...>;` resolves to the template `fn`.
 */
export function kernelParams(source: string, name: string): string[] {
  const code = stripMetalComments(source);
  name = name.replace(/[^\w]/g, (c) => `\\${c}`);
  let m = new RegExp(`\\bkernel\\s+void\\s+${name}\\s*\\(`).exec(code);
  if (!m) {
    // The template is the last template-id before the instantiation's ';'.
    const inst = new RegExp(`host_name\\(\\s*"${name}"\\s*\\)\\s*\\]\\]\\s*kernel\\b[^;]*?(\\w+)\\s*<[^<>;]*>\\s*;`).exec(code);
    if (inst) m = new RegExp(`\\bkernel\\s+void\\s+${inst[1]}\\s*\\(`).exec(code);
  }
  if (!m) throw new Error(`kernel ${name} not found`);
  const open = m.index + m[0].length - 1;
  const body = code.indexOf('{', open);
  const list = code.slice(open + 1, code.lastIndexOf(')', body));
  // Split at commas outside [[attribute(...)]] brackets.
  return list.split(/,(?![^[]*\]\])/).map((s) => s.replace(/\s+/g, ' ').trim());
}

/** The declaration bound at [[buffer(index)]] of the kernel, whitespace collapsed. */
export function bufferParam(source: string, kernel: string, index: number): string {
  const decl = kernelParams(source, kernel).find((p) => p.includes(`[[buffer(${index})]]`));
  if (decl === undefined) throw new Error(`${kernel}: nothing at buffer(${index})`);
  return decl;
}

/**
 * Kernel entry points of a Metal source: every `[[host_name("NAME")]]`, and
 * every `kernel void NAME(` that is not a template definition (a template is
 * an entry only through its host_name instantiations).
 */
export function metalEntries(source: string): Set<string> {
  const code = stripComments(source);
  const names = new Set<string>();
  for (const m of code.matchAll(/\[\[\s*host_name\s*\(\s*"([^"]+)"\s*\)\s*\]\]/g)) names.add(m[1]!);
  for (const m of code.matchAll(/(?:\bkernel|\[\[\s*kernel\s*\]\])\s+void\s+([A-Za-z_]\w*)\s*\(/g)) {
    const before = code.slice(0, m.index);
    if (!/template\s*<[^;{}]*>\s*$/.test(before)) names.add(m[1]!);
  }
  return names;
}

/** Every buffer binding index, as a bit mask. */
export const ALL_BUFFERS = 0x7fff_ffff;

/**
 * The [[buffer(n)]] bindings that kernel `name` may write, as a bit mask: a
 * `device` pointer or reference not declared const. `constant` and `const
 * device` bindings are read-only. When the kernel's declaration cannot be
 * read, every binding counts as written (ALL_BUFFERS), which only costs
 * barriers.
 */
export function kernelWrites(source: string, name: string): number {
  let params: string[];
  try {
    params = kernelParams(source, name);
  } catch {
    return ALL_BUFFERS;
  }
  let mask = 0;
  for (const p of params) {
    const b = /\[\[\s*buffer\s*\(\s*(\d+)\s*\)\s*\]\]/.exec(p);
    if (!b) continue;
    const index = Number(b[1]);
    if (!(index < 31)) return ALL_BUFFERS;
    const decl = p.slice(0, b.index);
    const readOnly = /\bconstant\b/.test(decl) || /\bconst\s+device\b|\bdevice\s+const\b/.test(decl);
    if (!readOnly) mask |= 1 << index;
  }
  return mask;
}

/** The value of one field of a packed param struct (little-endian). */
export function readField(bytes: Uint8Array, f: ParamField): number {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return f.type === 'u32' ? v.getUint32(f.offset, true) : v.getFloat32(f.offset, true);
}

/** The values of every field of the layout in a packed param struct, in layout order. */
export function readFields(bytes: Uint8Array, layout: readonly ParamField[]): number[] {
  return layout.map((f) => readField(bytes, f));
}
