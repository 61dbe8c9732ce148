// Contract: every kernel param struct is defined once, in its family header
// (shaders/<family>.h) or, where kernels of several families take one
// layout, in shaders/common.h, which a family header names by typedef; and
// TypeScript, MSL and CUDA agree on its layout.
//
// - Defined once: no other file of shaders/ (Metal and CUDA sources, the
//   preludes, the CUDA harness) defines a struct of that name, a typedef
//   names a struct of its header or of common.h, and no op in ts/ops/
//   writes a layout table by hand (`{ name, type, offset }` entries): the
//   ops take theirs from the header through structLayout (ts/params.ts).
// - Agreement: MSL and CUDA compile common.h and the header's very text
//   ahead of the family's kernels (the registry's familySources, checked
//   here too), and the layout TypeScript reads from them, typedef names
//   included, equals the one a C compiler gives the same text (offsetof,
//   sizeof, and the field types through _Generic).
//   tests/contract-cuda.test.ts checks that each CUDA entry takes the struct
//   at the binding where its Metal twin does.

import { describe, expect, test } from 'bun:test';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import * as ops from '../ts/ops/index.ts';
import { paramSize, structAliases, structLayout, structMemberPaths, structNames, structSize, type ParamField } from '../ts/params.ts';
import type { FamilySources } from '../ts/registry.ts';
import { stripComments } from '../ts/source-text.ts';

const ROOT = join(import.meta.dir, '..');
const SHADERS = join(ROOT, 'shaders');
const CC = ['clang-19', 'clang', 'gcc'].find((c) => spawnSync('bash', ['-c', `command -v ${c}`]).status === 0);

const headers = readdirSync(SHADERS).filter((f) => f.endsWith('.h')).sort();
/** The param structs of several families, compiled by every program ahead of its family header. */
const COMMON = 'common.h';
const commonText = readFileSync(join(SHADERS, COMMON), 'utf8');

/** Every file below dir, recursively, relative to ROOT. */
function filesBelow(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...filesBelow(p));
    else out.push(relative(ROOT, p));
  }
  return out;
}

/**
 * The layout a C compiler gives each struct of the header: [struct, field,
 * type, offset, size] rows. `paths` gives a field's C member path where it is
 * not its name (a field of a struct the struct holds: `id.M`); a name in
 * `typedefs` is a typedef name, spelled without `struct`.
 */
function compiledLayouts(
  header: string, structs: Map<string, readonly ParamField[]>, paths = new Map<string, readonly string[]>(), typedefs: ReadonlySet<string> = new Set(),
): string[][] {
  // MSL's names of the field types, as the Linux targets (LP64) size them.
  let prog = '#include <stdio.h>\n#include <stddef.h>\ntypedef unsigned int uint;\ntypedef unsigned long ulong;\n' + header + '\nint main(void) {\n';
  for (const [s, fields] of structs) {
    const t = typedefs.has(s) ? s : `struct ${s}`;
    prog += `  printf("%s sizeof %zu\\n", "${s}", sizeof(${t}));\n`;
    fields.forEach((f, i) => {
      const member = paths.get(s)?.[i] ?? f.name;
      prog +=
        `  printf("%s %s %s %zu %zu\\n", "${s}", "${f.name}", ` +
        `_Generic(((${t}*)0)->${member}, unsigned int: "u32", float: "f32", int: "i32", short: "i16", unsigned long: "u64", default: "other"), ` +
        `offsetof(${t}, ${member}), sizeof(((${t}*)0)->${member}));\n`;
    });
  }
  prog += '  return 0;\n}\n';
  const dir = mkdtempSync(join(tmpdir(), 'mlxn-structs-'));
  try {
    writeFileSync(join(dir, 'layout.c'), prog);
    const cc = spawnSync(CC!, ['-std=c11', '-Wall', '-Werror', '-o', join(dir, 'layout'), join(dir, 'layout.c')], { encoding: 'utf8' });
    if (cc.status !== 0) throw new Error(`compiling the layout program failed:\n${cc.stderr}`);
    const run = spawnSync(join(dir, 'layout'), [], { encoding: 'utf8' });
    if (run.status !== 0) throw new Error(`the layout program failed:\n${run.stderr}`);
    return run.stdout.trim().split('\n').map((l) => l.split(' '));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('every family header defines structs, read by structLayout', () => {
  // An empty list would make the tests below vacuous.
  expect(headers.length).toBeGreaterThanOrEqual(8);
  for (const h of headers) {
    const text = readFileSync(join(SHADERS, h), 'utf8');
    expect([h, structNames(text).length > 0]).toEqual([h, true]);
    for (const s of structNames(text)) expect(structLayout(text, s).length).toBeGreaterThan(0);
  }
});

describe.if(CC !== undefined)('the layout TypeScript reads is the one C compiles', () => {
  for (const h of headers) {
    test(h, () => {
      const text = readFileSync(join(SHADERS, h), 'utf8');
      // The structs the header defines and the names it gives by typedef, after common.h as the programs compile it.
      const aliases = structAliases(text).map(([a]) => a);
      const names = [...structNames(text), ...aliases];
      const structs = new Map(names.map((s) => [s, structLayout(text, s)] as const));
      const paths = new Map(names.map((s) => [s, structMemberPaths(text, s)] as const));
      const program = h === COMMON ? text : `${commonText}\n${text}`;
      const want: string[][] = [];
      for (const [s, fields] of structs) {
        want.push([s, 'sizeof', String(structSize(fields))]);
        for (const f of fields) want.push([s, f.name, f.type, String(f.offset), String(paramSize(f.type))]);
      }
      expect(compiledLayouts(program, structs, paths, new Set(aliases))).toEqual(want);
    });
  }

  test('the check sees a wrong offset', () => {
    const text = 'struct P { uint a; float b; };';
    const wrong = new Map([['P', [{ name: 'a', type: 'u32', offset: 0 }, { name: 'b', type: 'u32', offset: 8 }] as ParamField[]]]);
    expect(compiledLayouts(text, wrong)).toContainEqual(['P', 'b', 'f32', '4', '4']);
  });

  test('int, short and ulong fields: natural alignment, the size rounded to the widest', () => {
    const text = 'struct Q { int a; ulong b; short c; short d; uint e; };';
    const layout = structLayout(text, 'Q');
    expect(layout.map((f) => [f.name, f.type, f.offset])).toEqual([['a', 'i32', 0], ['b', 'u64', 8], ['c', 'i16', 16], ['d', 'i16', 18], ['e', 'u32', 20]]);
    expect(structSize(layout)).toBe(24);
    expect(compiledLayouts(text, new Map([['Q', layout]]))).toEqual([
      ['Q', 'sizeof', '24'], ['Q', 'a', 'i32', '0', '4'], ['Q', 'b', 'u64', '8', '8'], ['Q', 'c', 'i16', '16', '2'],
      ['Q', 'd', 'i16', '18', '2'], ['Q', 'e', 'u32', '20', '4'],
    ]);
  });

  test('a struct that holds another: its fields under their own names, at the held struct\'s alignment', () => {
    const text = 'struct A { ulong a; short b; };\nstruct B { uint c; struct A inner; uint d; };';
    const layout = structLayout(text, 'B');
    expect(layout.map((f) => [f.name, f.type, f.offset])).toEqual([['c', 'u32', 0], ['a', 'u64', 8], ['b', 'i16', 16], ['d', 'u32', 24]]);
    expect(structMemberPaths(text, 'B')).toEqual(['c', 'inner.a', 'inner.b', 'd']);
    expect(structSize(layout)).toBe(32);
    const paths = new Map([['B', structMemberPaths(text, 'B')]]);
    expect(compiledLayouts(text, new Map([['B', layout]]), paths)).toEqual([
      ['B', 'sizeof', '32'], ['B', 'c', 'u32', '0', '4'], ['B', 'a', 'u64', '8', '8'], ['B', 'b', 'i16', '16', '2'], ['B', 'd', 'u32', '24', '4'],
    ]);
    expect(() => structLayout('struct A { uint x; };\nstruct B { struct A a; uint x; };', 'B')).toThrow('two fields named x');
  });
});

test('each param struct is defined once, in its family header or common.h; a typedef names one of those', () => {
  const owner = new Map<string, string>();
  for (const h of headers) {
    for (const s of structNames(readFileSync(join(SHADERS, h), 'utf8'))) {
      expect([s, owner.get(s)]).toEqual([s, undefined]);
      owner.set(s, `shaders/${h}`);
    }
  }
  const common = new Set(structNames(commonText));
  for (const h of headers) {
    const own = new Set(structNames(readFileSync(join(SHADERS, h), 'utf8')));
    for (const [alias, target] of structAliases(readFileSync(join(SHADERS, h), 'utf8'))) {
      expect([alias, owner.get(alias), own.has(target) || common.has(target)]).toEqual([alias, undefined, true]);
      owner.set(alias, `shaders/${h}`);
    }
  }
  const problems: string[] = [];
  const sources = filesBelow(SHADERS).filter((f) => /\.(metal|cu|cuh|h|cpp|inc)$/.test(f));
  for (const file of sources) {
    const code = stripComments(readFileSync(join(ROOT, file), 'utf8'));
    for (const m of code.matchAll(/\bstruct\s+(\w+)\s*\{/g)) {
      const home = owner.get(m[1]!);
      if (home !== undefined && home !== file) problems.push(`${file} defines ${m[1]} again (its home is ${home})`);
    }
  }
  // A hand-written layout table in an op would be a second definition.
  for (const f of readdirSync(join(ROOT, 'ts', 'ops')).filter((f) => f.endsWith('.ts'))) {
    const code = stripComments(readFileSync(join(ROOT, 'ts', 'ops', f), 'utf8'));
    if (/\{\s*name:\s*'\w+',\s*type:\s*'(u32|f32)',\s*offset:/.test(code)) problems.push(`ts/ops/${f} writes a layout table by hand`);
  }
  expect(problems.join('\n')).toBe('');
});

test('every family registers common.h, then its header, ahead of its kernels, on both backends', () => {
  const registered = Object.entries(ops).filter(([k]) => k.endsWith('_SOURCES')) as [string, FamilySources][];
  expect(registered.length).toBeGreaterThanOrEqual(8);
  const seen = new Set<string>();
  for (const [name, sources] of registered) {
    const metalNames = sources.metal.map((f) => f.name);
    const family = metalNames[metalNames.length - 1]!.replace(/\.metal$/, '');
    const h = `${family}.h`;
    expect(sources.metal[1]!.text).toBe(commonText);
    if (sources.cuda !== undefined) expect(sources.cuda[1]!.text).toBe(commonText);
    if (!headers.includes(h)) {
      expect([name, metalNames]).toEqual([name, ['common.metal', COMMON, `${family}.metal`]]);
      continue;
    }
    seen.add(h);
    const text = readFileSync(join(SHADERS, h), 'utf8');
    expect([name, metalNames]).toEqual([name, ['common.metal', COMMON, h, `${family}.metal`]]);
    expect(sources.metal[2]!.text).toBe(text);
    expect([name, sources.cuda?.map((f) => f.name)]).toEqual([name, ['cuda/common.cuh', COMMON, h, `cuda/${family}.cu`]]);
    expect(sources.cuda![2]!.text).toBe(text);
  }
  expect([...seen].sort()).toEqual(headers.filter((h) => h !== COMMON));
});
