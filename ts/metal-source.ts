// Reading declarations out of .metal sources: which buffers a kernel may write
// (the encoder places barriers from it), and, for the tests that hold the
// TypeScript side against the shaders, binding declarations; reading packed
// param structs back. Param struct layouts are read by ts/params.ts.

import type { ParamField } from './params.ts';
import { stripComments } from './source-text.ts';

/**
 * The parameter list of `kernel void name(...)`, one declaration per entry,
 * whitespace collapsed. A name given by `template [[host_name("name")]]
 * kernel T fn<...>;` resolves to the template `fn`.
 */
export function kernelParams(source: string, name: string): string[] {
  const code = stripComments(source);
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

/**
 * A parameter's [[buffer(n)]] attribute, alone or with a function constant
 * that gates it ([[buffer(n), function_constant(c)]]: the argument exists
 * where c is true); group 1 is n.
 */
export const BUFFER_ATTR = /\[\[\s*buffer\s*\(\s*(\d+)\s*\)\s*(?:,\s*function_constant\s*\(\s*\w+\s*\)\s*)?\]\]/;

/** The declaration bound at [[buffer(index)]] of the kernel, whitespace collapsed. */
export function bufferParam(source: string, kernel: string, index: number): string {
  const decl = kernelParams(source, kernel).find((p) => BUFFER_ATTR.exec(p)?.[1] === String(index));
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
    const b = BUFFER_ATTR.exec(p);
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
