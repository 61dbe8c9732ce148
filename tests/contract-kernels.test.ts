// Contract: every kernel that the TypeScript ops dispatch exists in the Metal
// source they compile. Runs on any OS (it reads source text only).
//
// How kernel names are found in ts/ops/<family>.ts (comments removed):
//   - registered: the third argument of every `.register(family, sources, KERNELS)`
//     call and the value of every `kernels:` property (an op plan's): an array
//     literal, or the name of a `const` array; array elements are string
//     literals or names of `const` string literals. A list this test cannot
//     resolve is a failure (write the list so that it can).
//   - dispatched: the first argument of every `.pipeline(...)` call and the
//     value of every `kernel:` property (a planned dispatch's): a string
//     literal is a name; a template literal (`flash_attn_vec_dk${d}`) is a
//     pattern in which each ${...} stands for one or more characters; the name
//     of a `const` string literal is a name; `c ? A : B` is each branch; any
//     other expression is taken to be one of the registered names, which the
//     registry enforces at run time.
//   - the Metal source: the `.metal` files the op imports
//     (`import src from '../../shaders/x.metal' with { type: 'text' }`), or
//     shaders/<family>.metal when it imports none.
// How kernel entries are found in a .metal file (comments removed): every
// `[[host_name("NAME")]]`, and every `kernel void NAME(` (or `[[kernel]] void
// NAME(`) that is not a template definition (a template is an entry only
// through its host_name instantiations). The same rule as `mlx-native kernels`.
// Checked:
//   - each ts/ops/<family>.ts (except index.ts) has shaders/<family>.metal;
//   - every registered and every literal dispatched name is an entry of the
//     op's Metal source, and every dispatched name is registered by that op;
//   - every dispatch pattern matches at least one registered name, and every
//     registered name it matches is an entry.
// The checker runs once against a deliberately broken fixture in a temporary
// directory, so a checker that finds nothing cannot pass.

import { afterAll, describe, expect, test } from 'bun:test';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { metalEntries } from '../ts/metal-source.ts';
import { stripComments } from './source-text.ts';

const ROOT = resolve(import.meta.dir, '..');

/** The text of each argument of the call whose '(' is at `open`. */
function callArguments(code: string, open: number): string[] {
  const args: string[] = [];
  let depth = 0;
  let start = open + 1;
  for (let i = open; i < code.length; i++) {
    const c = code[i]!;
    if (c === '"' || c === "'" || c === '`') {
      let j = i + 1;
      while (j < code.length && code[j] !== c) j += code[j] === '\\' ? 2 : 1;
      i = j;
    } else if (c === '(' || c === '[' || c === '{') depth++;
    else if (c === ')' || c === ']' || c === '}') {
      depth--;
      if (depth === 0) {
        args.push(code.slice(start, i).trim());
        break;
      }
    } else if (c === ',' && depth === 1) {
      args.push(code.slice(start, i).trim());
      start = i + 1;
    }
  }
  return args.filter((a) => a !== '');
}

type NameRef = { name: string } | { pattern: RegExp; text: string } | { dynamic: string } | { unresolved: string };

function resolveNameExpr(expr: string, strings: Map<string, string>): NameRef {
  const e = expr.replace(/\s+as\s+[\w.[\]()\s|'"]+$/, '').trim();
  const lit = /^(['"])([^'"]*)\1$/.exec(e);
  if (lit) return { name: lit[2]! };
  const tpl = /^`([^`]*)`$/.exec(e);
  if (tpl) {
    if (!tpl[1]!.includes('${')) return { name: tpl[1]! };
    const parts = tpl[1]!.split(/\$\{[^}]*\}/).map((s) => s.replace(/[.*+?^$()[\]{}|\\]/g, '\\$&'));
    return { pattern: new RegExp(`^${parts.join('.+')}$`), text: e };
  }
  if (/^[A-Za-z_$][\w$]*$/.test(e)) {
    const v = strings.get(e);
    return v !== undefined ? { name: v } : { dynamic: e };
  }
  return { unresolved: e };
}

/** [A, B] of a top-level `cond ? A : B` (quoted text skipped), or null. */
function conditionalBranches(expr: string): [string, string] | null {
  let depth = 0;
  let q = -1;
  for (let i = 0; i < expr.length; i++) {
    const c = expr[i]!;
    if (c === '"' || c === "'" || c === '`') {
      let j = i + 1;
      while (j < expr.length && expr[j] !== c) j += expr[j] === '\\' ? 2 : 1;
      i = j;
    } else if (c === '(' || c === '[' || c === '{') depth++;
    else if (c === ')' || c === ']' || c === '}') depth--;
    else if (depth === 0 && c === '?' && q < 0 && expr[i + 1] !== '?' && expr[i + 1] !== '.') q = i;
    else if (depth === 0 && c === ':' && q >= 0) return [expr.slice(q + 1, i).trim(), expr.slice(i + 1).trim()];
  }
  return null;
}

export interface OpKernels {
  registered: string[];
  dispatched: NameRef[];
  metalImports: string[];
  problems: string[];
}

/** The kernel names one ts/ops file registers and dispatches. */
export function opKernels(file: string, text: string): OpKernels {
  const code = stripComments(text);
  const problems: string[] = [];
  const strings = new Map<string, string>();
  for (const m of code.matchAll(/\bconst\s+([A-Za-z_$][\w$]*)(?:\s*:\s*[^=]+?)?\s*=\s*(['"])([^'"\n]*)\2/g)) strings.set(m[1]!, m[3]!);
  const arrays = new Map<string, string>();
  for (const m of code.matchAll(/\bconst\s+([A-Za-z_$][\w$]*)(?:\s*:\s*[^=]+?)?\s*=\s*\[([^\]]*)\]/g)) arrays.set(m[1]!, m[2]!);

  const metalImports = [...code.matchAll(/\bimport\s+[\w$]+\s+from\s+(['"])([^'"]+\.metal)\1/g)].map((m) =>
    resolve(dirname(file), m[2]!),
  );

  // A property's value: the text up to the comma or bracket that ends it.
  const propertyValue = (at: number): string => callArguments(`(${code.slice(at)}`, 0)[0] ?? '';
  const lists = [
    ...[...code.matchAll(/\.register\s*\(/g)].map((m) => callArguments(code, m.index! + m[0].length - 1)[2] ?? ''),
    ...[...code.matchAll(/\bkernels\s*:\s*/g)].map((m) => propertyValue(m.index! + m[0].length)),
  ];
  const registered: string[] = [];
  for (const expr of lists) {
    const list = expr.replace(/\s+as\s+const\s*$/, '').trim();
    const inline = /^\[([\s\S]*)\]$/.exec(list);
    const body = inline ? inline[1]! : arrays.get(list);
    if (body === undefined) {
      problems.push(`${file}: cannot resolve the kernel list "${list}" of a register call`);
      continue;
    }
    for (const el of body.split(',').map((s) => s.trim()).filter((s) => s !== '')) {
      const ref = resolveNameExpr(el, strings);
      if ('name' in ref) registered.push(ref.name);
      else problems.push(`${file}: cannot resolve the registered kernel "${el}" to a string literal`);
    }
  }

  const dispatched: NameRef[] = [];
  const names = [
    ...[...code.matchAll(/\.pipeline\s*\(/g)].map((m) => callArguments(code, m.index! + m[0].length - 1)[0]),
    // A `kernel:` that annotates a parameter's type, or takes a call's result, names no kernel here.
    ...[...code.matchAll(/\bkernel\s*:\s*/g)].map((m) => propertyValue(m.index! + m[0].length))
      .filter((v) => !/^\(typeof\b|^[A-Z][\w$]*$|^[\w$.]+\s*\(/.test(v)),
  ];
  for (const expr of names) {
    if (expr === undefined || expr === '') continue;
    const ref = resolveNameExpr(expr, strings);
    const branches = conditionalBranches(expr);
    if ('unresolved' in ref && branches !== null) {
      // `cond ? A : B` picks between names: check each branch.
      dispatched.push(...branches.map((br) => resolveNameExpr(br, strings)));
    } else dispatched.push(ref);
  }
  return { registered, dispatched, metalImports, problems };
}

/** Problems of the ops under `root` against their shaders; empty when they match. */
export function checkOpsAgainstShaders(root: string): string[] {
  const opsDir = join(root, 'ts/ops');
  const problems: string[] = [];
  if (!existsSync(opsDir)) return problems;
  const files = readdirSync(opsDir).filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts') && f !== 'index.ts').sort();
  for (const f of files) {
    const family = basename(f, '.ts');
    const file = join(opsDir, f);
    const rel = relative(root, file);
    const familyMetal = join(root, 'shaders', `${family}.metal`);
    if (!existsSync(familyMetal)) problems.push(`${rel}: shaders/${family}.metal does not exist`);
    const op = opKernels(file, readFileSync(file, 'utf8'));
    problems.push(...op.problems.map((p) => p.replace(file, rel)));
    const sources = op.metalImports.length > 0 ? op.metalImports : [familyMetal];
    const entries = new Set<string>();
    for (const s of sources) {
      if (existsSync(s)) for (const e of metalEntries(readFileSync(s, 'utf8'))) entries.add(e);
      else if (s !== familyMetal) problems.push(`${rel}: imports ${relative(root, s)}, which does not exist`);
    }
    const where = sources.map((s) => relative(root, s)).join(', ');
    for (const name of op.registered) {
      if (!entries.has(name)) problems.push(`${rel}: registers kernel ${name}, which is not an entry of ${where}`);
    }
    const registered = new Set(op.registered);
    for (const ref of op.dispatched) {
      if ('name' in ref) {
        if (!entries.has(ref.name)) problems.push(`${rel}: dispatches kernel ${ref.name}, which is not an entry of ${where}`);
        if (!registered.has(ref.name)) problems.push(`${rel}: dispatches kernel ${ref.name}, which it does not register`);
      } else if ('pattern' in ref) {
        const matches = op.registered.filter((n) => ref.pattern.test(n));
        if (matches.length === 0) problems.push(`${rel}: dispatches ${ref.text}, which matches no registered kernel`);
        for (const n of matches) {
          if (!entries.has(n)) problems.push(`${rel}: dispatches ${ref.text} = ${n}, which is not an entry of ${where}`);
        }
      } else if ('unresolved' in ref) {
        problems.push(`${rel}: cannot read the kernel name of pipeline(${ref.unresolved})`);
      }
    }
  }
  return problems;
}

describe('kernels dispatched by ts/ops exist in shaders/', () => {
  test('metal entry scanner: plain kernels, host_name instantiations, templates skipped', () => {
    const src = `
      #include <metal_stdlib>
      // kernel void commented_out(
      kernel void plain(device float* x [[buffer(0)]]) {}
      template <typename T, uint N>
      kernel void tmpl(device T* x [[buffer(0)]]) {}
      template [[host_name("tmpl_f32")]] kernel tmpl_t tmpl<float, 4>;
      [[kernel]] void attr_form() {}
    `;
    expect([...metalEntries(src)].sort()).toEqual(['attr_form', 'plain', 'tmpl_f32']);
  });

  test('every op kernel is an entry of its Metal source', () => {
    expect(checkOpsAgainstShaders(ROOT)).toEqual([]);
  });

  test('every op registers at least one kernel that this test can read', () => {
    const opsDir = join(ROOT, 'ts/ops');
    const files = existsSync(opsDir) ? readdirSync(opsDir).filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts') && f !== 'index.ts') : [];
    const empty = files.filter((f) => opKernels(join(opsDir, f), readFileSync(join(opsDir, f), 'utf8')).registered.length === 0);
    expect(empty).toEqual([]);
  });

  const dir = mkdtempSync(join(tmpdir(), 'mlxn-contract-kernels-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('the checker catches a missing kernel, a missing family file and a pattern that matches nothing', () => {
    mkdirSync(join(dir, 'ts/ops'), { recursive: true });
    mkdirSync(join(dir, 'shaders'), { recursive: true });
    writeFileSync(
      join(dir, 'shaders/good.metal'),
      '#include <metal_stdlib>\nkernel void good_f32() {}\ntemplate [[host_name("good_dk64")]] kernel t good<64>;\n',
    );
    writeFileSync(
      join(dir, 'ts/ops/good.ts'),
      `import src from '../../shaders/good.metal' with { type: 'text' };
       const KERNEL = 'good_f32';
       export const GOOD_KERNELS = [KERNEL, 'good_dk64'] as const;
       export function good(r: any, d: number) {
         r.register('good', { metal: src }, GOOD_KERNELS);
         r.pipeline(KERNEL); r.pipeline(\`good_dk\${d}\`);
       }`,
    );
    expect(checkOpsAgainstShaders(dir)).toEqual([]);

    writeFileSync(
      join(dir, 'ts/ops/orphan.ts'),
      `import src from '../../shaders/good.metal' with { type: 'text' };
       export function orphan(r: any, d: number) {
         r.register('orphan', { metal: src }, ['good_f32', 'missing_kernel']);
         r.pipeline('good_f32');
         r.pipeline('unregistered_kernel');
         r.pipeline(\`nothing_\${d}\`);
         r.pipeline(d > 1 ? 'good_f32' : 'missing_branch');
       }`,
    );
    const problems = checkOpsAgainstShaders(dir);
    expect(problems).toEqual([
      'ts/ops/orphan.ts: shaders/orphan.metal does not exist',
      'ts/ops/orphan.ts: registers kernel missing_kernel, which is not an entry of shaders/good.metal',
      'ts/ops/orphan.ts: dispatches kernel unregistered_kernel, which is not an entry of shaders/good.metal',
      'ts/ops/orphan.ts: dispatches kernel unregistered_kernel, which it does not register',
      'ts/ops/orphan.ts: dispatches `nothing_${d}`, which matches no registered kernel',
      'ts/ops/orphan.ts: dispatches kernel missing_branch, which is not an entry of shaders/good.metal',
      'ts/ops/orphan.ts: dispatches kernel missing_branch, which it does not register',
    ]);
  });
});
