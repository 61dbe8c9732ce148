// The TypeScript symbol table (ts/native.ts) against the C header: the same
// functions, each with the same number of arguments and matching kinds.

import { expect, test } from 'bun:test';
import { FFIType } from 'bun:ffi';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SYMBOLS } from '../ts/native.ts';

interface CFunction {
  name: string;
  returns: string;
  args: string[];
}

/** Every function prototype of the header: comments and preprocessor lines removed. */
export function parseHeader(text: string): CFunction[] {
  const code = text
    .replace(/\/\*[\s\S]*?\*\//g, ' ')
    .replace(/\/\/.*$/gm, ' ')
    .replace(/^\s*#.*$/gm, ' ');
  const out: CFunction[] = [];
  const re = /([A-Za-z_][\w\s*]*?)\b(mlxn_\w+)\s*\(([^)]*)\)\s*;/g;
  for (const m of code.matchAll(re)) {
    const params = m[3]!.trim();
    const args =
      params === 'void' || params === ''
        ? []
        : params.split(',').map((p) => {
            // Drop the parameter's name: the last identifier, unless the
            // parameter is only a type.
            const t = p.trim().replace(/\s+/g, ' ').replace(/\s*\*\s*/g, '* ');
            const named = t.match(/^(.*?[\s*])([A-Za-z_]\w*)$/);
            return (named ? named[1]! : t).trim();
          });
    out.push({ name: m[2]!, returns: m[1]!.trim().replace(/\s+/g, ' ').replace(/\s*\*/g, '*'), args });
  }
  return out;
}

/** The FFI types that may stand for a C type. */
function allowed(cType: string, position: 'arg' | 'return'): readonly FFIType[] {
  const t = cType.replace(/\s+/g, ' ').replace(/ \*/g, '*').trim();
  if (t === 'void') return [FFIType.void];
  if (t === 'const char*') return position === 'arg' ? [FFIType.cstring, FFIType.ptr] : [FFIType.cstring];
  if (t.endsWith('*')) return [FFIType.ptr];
  switch (t) {
    case 'uint32_t':
      return [FFIType.u32];
    case 'int32_t':
    case 'mlxn_status':
      return [FFIType.i32];
    case 'uint64_t':
      return [FFIType.u64, FFIType.u64_fast];
    default:
      throw new Error(`C type ${t} has no mapping in this test: add one`);
  }
}

/** The FFI type's name (bun:ffi's FFIType object maps names to numbers only). */
function typeName(t: FFIType): string {
  return Object.entries(FFIType).find(([k, v]) => v === t && !/^\d/.test(k))?.[0] ?? String(t);
}

const header = readFileSync(join(import.meta.dir, '..', 'native', 'include', 'mlx_native.h'), 'utf8');
const fns = parseHeader(header);

test('the header parses into its functions', () => {
  // A parser that finds nothing would make the next tests vacuous.
  expect(fns.length).toBeGreaterThanOrEqual(25);
  const dispatch = fns.find((f) => f.name === 'mlxn_encoder_dispatch');
  expect(dispatch).toEqual({
    name: 'mlxn_encoder_dispatch',
    returns: 'mlxn_status',
    args: ['mlxn_encoder*', 'const void*', 'uint64_t', 'char*', 'uint64_t'],
  });
});

test('the symbol table has exactly the header functions', () => {
  expect(Object.keys(SYMBOLS).sort()).toEqual(fns.map((f) => f.name).sort());
});

test('every function has the header arity and argument kinds', () => {
  const table: Record<string, { args: readonly FFIType[]; returns: FFIType }> = SYMBOLS;
  const problems: string[] = [];
  for (const f of fns) {
    const s = table[f.name];
    if (!s) continue; // reported by the test above
    if (s.args.length !== f.args.length) {
      problems.push(`${f.name}: ${s.args.length} arguments in TS, ${f.args.length} in the header`);
      continue;
    }
    f.args.forEach((c, i) => {
      if (!allowed(c, 'arg').includes(s.args[i]!)) problems.push(`${f.name} argument ${i}: ${typeName(s.args[i]!)} for C ${c}`);
    });
    if (!allowed(f.returns, 'return').includes(s.returns)) problems.push(`${f.name} returns ${typeName(s.returns)} for C ${f.returns}`);
  }
  expect(problems).toEqual([]);
});
