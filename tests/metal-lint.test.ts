// A lint of the Metal programs of shaders/ (each family's .metal after the
// prelude common.metal and its header, as the registry joins them) for code
// that the CPU emulator (clang++ compiling the kernels as C++ against a
// metal_stdlib shim) would accept but Apple's
// Metal compiler (MSL 3.1, run-time compile from source) would reject, or
// that would behave differently on the GPU. It reads text with regular
// expressions: it is a net for common mistakes, not a compiler. Comments are
// removed first; string literals are kept.
//
// Rules, one per check below (the rule name appears in each report):
//   stdlib-include      the file has `#include <metal_stdlib>`.
//   include             no `#include "..."`, and no `#include <X>` other than
//                       <metal_*>: makeLibrary(source:) has no include path,
//                       and C/C++ headers do not exist in MSL.
//   double              no `double` (MSL has no 64-bit float; also catches
//                       `long double`).
//   printf              no printf / os_log (not in MSL 3.1).
//   std                 no `std::` (no C++ standard library in MSL).
//   dynamic-memory      no new / delete / malloc / calloc / free.
//   exceptions          no try / throw / catch.
//   virtual-rtti        no virtual, dynamic_cast, typeid.
//   unsupported-keyword no goto, thread_local, register (not in MSL).
//   atomic-type         atomics only of int, uint, bool and float: no
//                       atomic<long/ulong/int64_t/uint64_t/double/half/bfloat>
//                       or atomic_long/atomic_ulong/... (64-bit atomics exist in
//                       MSL 3.1 only as min/max on Apple9+, which the emulator
//                       would not restrict; the project does not use them).
//   kernel-void         a kernel definition (`kernel T name(`) returns void.
//   kernel-address-space every pointer or reference parameter of a kernel is
//                       qualified device, constant or threadgroup (clang would
//                       accept an unqualified one; Metal does not).
//   binding-index       [[buffer(n)]] and [[threadgroup(n)]] take an integer
//                       literal below 31 (MLXN_MAX_BINDINGS).
//   threadgroup-array   a `threadgroup T name[N]` array is sized by an
//                       expression of integer literals, sizeof, operators and
//                       names declared constexpr, #define'd, enumerators or
//                       non-type template parameters in the same file; never by
//                       a function constant or a run-time value (clang++
//                       accepts variable-length arrays; Metal does not).
//   threadgroup-init    a threadgroup variable (not a pointer to threadgroup
//                       memory) has no initializer (Metal rejects one; on the
//                       CPU it would silently run once per thread).
//   program-scope       a variable at file scope is in the `constant` address
//                       space (Metal rejects any other program-scope variable).
//   recursion           no function calls itself directly (MSL forbids
//                       recursion; indirect recursion is not detected).
//   half-types          no clang spellings of 16-bit floats: __fp16, _Float16,
//                       __bf16; bfloat16_t and float16_t only where the file
//                       defines them (typedef or using). MSL 3.1 spells them
//                       half and bfloat; the library compiles with
//                       languageVersion 3.1, which bfloat (scalar, vector and
//                       simdgroup_matrix<bfloat, 8, 8>) requires.
// Each rule is run once against a bad snippet it must flag, and all rules
// against a clean snippet they must accept.

import { describe, expect, test } from 'bun:test';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { COMMON_HEADER, joinSources, METAL_PRELUDE } from '../ts/registry.ts';
import { stripComments } from '../ts/source-text.ts';

const ROOT = resolve(import.meta.dir, '..');
const SHADERS = join(ROOT, 'shaders');
const MAX_BINDINGS = 31;

interface Finding {
  rule: string;
  line: number;
  text: string;
}

/** `code` with string literals blanked, for rules that look for words. */
function blankStrings(code: string): string {
  return code.replace(/"(?:[^"\\\n]|\\.)*"/g, (s) => '"' + ' '.repeat(s.length - 2) + '"');
}

function lineOf(code: string, index: number): number {
  let line = 1;
  for (let i = 0; i < index && i < code.length; i++) if (code[i] === '\n') line++;
  return line;
}

/** Index just past the bracket that closes the one at `open`. */
function closeOf(code: string, open: number, o: string, c: string): number {
  let depth = 0;
  for (let i = open; i < code.length; i++) {
    if (code[i] === o) depth++;
    else if (code[i] === c && --depth === 0) return i + 1;
  }
  return code.length;
}

/** Names usable in a constant expression: constexpr, #define, enumerators, non-type template parameters. */
function compileTimeNames(code: string): Set<string> {
  const names = new Set<string>();
  for (const m of code.matchAll(/\bconstexpr\b[^=;(){}]*?\b([A-Za-z_]\w*)\s*(?:=|\{)/g)) names.add(m[1]!);
  for (const m of code.matchAll(/^\s*#\s*define\s+([A-Za-z_]\w*)/gm)) names.add(m[1]!);
  for (const m of code.matchAll(/\benum\b[^{;]*\{([^}]*)\}/g)) {
    for (const e of m[1]!.split(',')) {
      const id = /^\s*([A-Za-z_]\w*)/.exec(e);
      if (id) names.add(id[1]!);
    }
  }
  for (const m of code.matchAll(/\btemplate\s*<([^>]*)>/g)) {
    for (const p of m[1]!.split(',')) {
      const np = /^\s*(?!typename\b|class\b)[A-Za-z_][\w:]*\s+([A-Za-z_]\w*)\s*(?:=.*)?$/.exec(p);
      if (np) names.add(np[1]!);
    }
  }
  return names;
}

function functionConstantNames(code: string): Set<string> {
  const names = new Set<string>();
  for (const m of code.matchAll(/\b([A-Za-z_]\w*)\s*\[\[\s*function_constant\s*\(/g)) names.add(m[1]!);
  return names;
}

const KEYWORDS = new Set(['if', 'for', 'while', 'switch', 'return', 'sizeof', 'catch', 'do', 'else', 'alignof', 'static_assert']);

/** Lints one Metal source. */
export function lintMetal(source: string): Finding[] {
  const code = stripComments(source);
  const words = blankStrings(code);
  const found: Finding[] = [];
  const add = (rule: string, index: number, text: string) => found.push({ rule, line: lineOf(code, index), text: text.trim() });
  const each = (rule: string, re: RegExp, text: string, msg: (m: RegExpMatchArray) => string) => {
    for (const m of text.matchAll(re)) add(rule, m.index!, msg(m));
  };

  if (!/^\s*#\s*include\s*<metal_stdlib>/m.test(code)) add('stdlib-include', 0, 'missing #include <metal_stdlib>');
  each('include', /^\s*#\s*include\s*("[^"]*"|<(?!metal_)[^>]*>)/gm, code, (m) => `#include ${m[1]}: not available to a run-time compile from source`);
  each('double', /\bdouble\b/g, words, () => 'double: MSL has no 64-bit float');
  each('printf', /\b(printf|os_log)\b/g, words, (m) => `${m[1]}: not in MSL 3.1`);
  each('std', /\bstd\s*::/g, words, () => 'std::: no C++ standard library in MSL');
  each('dynamic-memory', /\b(new|delete|malloc|calloc|free)\b/g, words, (m) => `${m[1]}: no dynamic memory in MSL`);
  each('exceptions', /\b(try|throw|catch)\b/g, words, (m) => `${m[1]}: no exceptions in MSL`);
  each('virtual-rtti', /\b(virtual|dynamic_cast|typeid)\b/g, words, (m) => `${m[1]}: not in MSL`);
  each('unsupported-keyword', /\b(goto|thread_local|register)\b/g, words, (m) => `${m[1]}: not in MSL`);
  each(
    'atomic-type',
    /\batomic\s*<\s*(long|ulong|unsigned\s+long|int64_t|uint64_t|size_t|double|half|bfloat)\s*>|\batomic_(long|ulong|double|half|bfloat)\b/g,
    words,
    (m) => `${m[0]}: atomics are of int, uint, bool and float only`,
  );

  // Kernel definitions: `kernel T name(` (instantiations `kernel T name<...>;` have no '(' after the name).
  for (const m of words.matchAll(/(?:\bkernel|\[\[\s*kernel\s*\]\])\s+([A-Za-z_][\w:]*(?:\s*<[^;>]*>)?)\s+([A-Za-z_]\w*)\s*\(/g)) {
    if (m[1] !== 'void') add('kernel-void', m.index!, `kernel ${m[2]} returns ${m[1]}, must return void`);
    const open = m.index! + m[0].length - 1;
    const params = words.slice(open + 1, closeOf(words, open, '(', ')') - 1);
    let depth = 0;
    let start = 0;
    const list: string[] = [];
    for (let i = 0; i <= params.length; i++) {
      const c = params[i];
      if (c === '<' || c === '(' || c === '[') depth++;
      else if (c === '>' || c === ')' || c === ']') depth--;
      else if ((c === ',' && depth === 0) || i === params.length) {
        list.push(params.slice(start, i));
        start = i + 1;
      }
    }
    for (const p of list) {
      const decl = p.replace(/\[\[[\s\S]*?\]\]/g, '').trim();
      if (/[*&]/.test(decl) && !/^(?:const\s+)?(device|constant|threadgroup|threadgroup_imageblock|ray_data|object_data)\b/.test(decl)) {
        add('kernel-address-space', open, `kernel ${m[2]}: parameter "${decl.replace(/\s+/g, ' ')}" needs an address space (device, constant, threadgroup)`);
      }
    }
  }

  for (const m of words.matchAll(/\[\[\s*(buffer|threadgroup)\s*\(\s*([^)\s]*)\s*\)\s*\]\]/g)) {
    const n = /^\d+$/.test(m[2]!) ? Number(m[2]) : NaN;
    if (!(n < MAX_BINDINGS)) add('binding-index', m.index!, `[[${m[1]}(${m[2]})]]: index must be an integer literal below ${MAX_BINDINGS}`);
  }

  const constNames = compileTimeNames(words);
  const fcNames = functionConstantNames(words);
  for (const m of words.matchAll(/\bthreadgroup\s+((?:const\s+)?[A-Za-z_][\w:]*(?:\s*<[^;>]*>)?)\s+([A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)+)/g)) {
    for (const dim of m[3]!.matchAll(/\[([^\]]*)\]/g)) {
      const expr = dim[1]!.replace(/sizeof\s*\([^)]*\)/g, '0');
      for (const id of expr.matchAll(/\b([A-Za-z_]\w*)\b/g)) {
        const name = id[1]!;
        if (/^\d/.test(name)) continue;
        if (fcNames.has(name)) add('threadgroup-array', m.index!, `threadgroup ${m[2]}[${dim[1]}]: sized by function constant ${name}`);
        else if (!constNames.has(name)) add('threadgroup-array', m.index!, `threadgroup ${m[2]}[${dim[1]}]: ${name} is not a compile-time constant of this file`);
      }
      if (/[^\w\s+\-*/%()<>&|^~]/.test(expr.replace(/\b\d+[uUlL]*\b/g, '0'))) {
        add('threadgroup-array', m.index!, `threadgroup ${m[2]}[${dim[1]}]: not a constant expression`);
      }
    }
  }
  for (const m of words.matchAll(/\bthreadgroup\s+([^;(){}=]*?)=/g)) {
    if (!/[*&]/.test(m[1]!)) add('threadgroup-init', m.index!, `threadgroup ${m[1]!.trim()}: threadgroup variables cannot have initializers`);
  }

  // File-scope statements ending in ';' that declare a variable.
  let depth = 0;
  let stmt = 0;
  for (let i = 0; i < words.length; i++) {
    const c = words[i];
    if (c === '{') {
      if (depth === 0) stmt = -1;
      depth++;
    } else if (c === '}') {
      depth--;
      if (depth === 0) stmt = i + 1;
    } else if (c === ';' && depth === 0) {
      if (stmt >= 0) {
        const s = words.slice(stmt, i).replace(/^\s*#.*$/gm, '').trim();
        const isDecl = /^(?:static\s+)?(?:constexpr\s+)?(?:const\s+)?[A-Za-z_][\w:]*(?:\s*<[^;>]*>)?\s+[A-Za-z_]\w*\s*(?:\[[^\]]*\]\s*)*(?:=|\[\[|$)/.test(s);
        const exempt = /^(typedef|using|template|struct|class|union|enum|namespace|static_assert|kernel|extern)\b/.test(s);
        if (isDecl && !exempt && !/\bconstant\b/.test(s)) add('program-scope', stmt + (words.slice(stmt, i).length - words.slice(stmt, i).trimStart().length), `${s.split('\n')[0]}: a program-scope variable must be in the constant address space`);
      }
      stmt = i + 1;
    }
  }

  // Direct recursion: a function body that calls the function's own name.
  for (const m of words.matchAll(/\b([A-Za-z_]\w*)\s*\(([^;{}()]*(?:\([^()]*\)[^;{}()]*)*)\)\s*(?:const\s*)?\{/g)) {
    const name = m[1]!;
    if (KEYWORDS.has(name)) continue;
    const open = m.index! + m[0].length - 1;
    const body = words.slice(open + 1, closeOf(words, open, '{', '}') - 1);
    if (new RegExp(`(?<![.>\\w])${name}\\s*(?:<[^;<>]*>)?\\s*\\(`).test(body)) add('recursion', m.index!, `${name} calls itself`);
  }

  each('half-types', /\b(__fp16|_Float16|__bf16)\b/g, words, (m) => `${m[1]}: spell it half or bfloat in MSL`);
  for (const m of words.matchAll(/\b(bfloat16_t|float16_t)\b/g)) {
    const defined = new RegExp(`\\btypedef\\b[^;]*\\b${m[1]}\\s*;|\\busing\\s+${m[1]}\\s*=`).test(words);
    if (!defined) add('half-types', m.index!, `${m[1]}: not an MSL type (use bfloat or half, or define it)`);
  }
  return found;
}

const CLEAN = `
#include <metal_stdlib>
using namespace metal;

constant constexpr uint MAX_SIMDGROUPS = 32;
constant bool has_bias [[function_constant(0)]];
#define TILE 16
typedef bfloat bfloat16_t;

struct Params { uint n; float eps; };

template <typename T>
inline T square(T x) { return x * x; }

template <uint D, typename T>
kernel void scaled(device const T* x [[buffer(0)]],
                   device T* y [[buffer(1)]],
                   constant Params& p [[buffer(2)]],
                   threadgroup float* shared [[threadgroup(0)]],
                   uint i [[thread_position_in_grid]],
                   uint lane [[thread_index_in_simdgroup]]) {
    constexpr uint HALF = D / 2;
    threadgroup float partial[MAX_SIMDGROUPS * 2 + sizeof(float)];
    threadgroup bfloat16_t tile[TILE][HALF];
    threadgroup float* view = shared + 4;
    simdgroup_matrix<bfloat, 8, 8> m;
    partial[lane] = square(float(x[i]));
    y[i] = T(partial[lane] + (has_bias ? 1.0f : 0.0f) + view[0]);
}

template [[host_name("scaled_f32")]] kernel scaled_t scaled<64, float>;
`;

const BAD: Record<string, string> = {
  'stdlib-include': 'kernel void k() {}',
  include: '#include <metal_stdlib>\n#include "common.h"\n',
  double: '#include <metal_stdlib>\nkernel void k(device float* x [[buffer(0)]]) { double d = 1; }',
  printf: '#include <metal_stdlib>\nkernel void k() { printf("x"); }',
  std: '#include <metal_stdlib>\nkernel void k() { std::min(1, 2); }',
  'dynamic-memory': '#include <metal_stdlib>\nkernel void k() { float* p = new float[4]; }',
  exceptions: '#include <metal_stdlib>\nkernel void k() { try { } catch (...) { } }',
  'virtual-rtti': '#include <metal_stdlib>\nstruct A { virtual void f(); };',
  'unsupported-keyword': '#include <metal_stdlib>\nkernel void k() { goto end; end: ; }',
  'atomic-type': '#include <metal_stdlib>\nkernel void k(device atomic<ulong>* c [[buffer(0)]]) {}',
  'kernel-void': '#include <metal_stdlib>\nkernel float k(device float* x [[buffer(0)]]) { return 0; }',
  'kernel-address-space': '#include <metal_stdlib>\nkernel void k(float* x [[buffer(0)]]) {}',
  'binding-index': '#include <metal_stdlib>\nkernel void k(device float* x [[buffer(31)]]) {}',
  'threadgroup-array': '#include <metal_stdlib>\nkernel void k(constant uint& n [[buffer(0)]]) { threadgroup float t[n]; }',
  'threadgroup-init': '#include <metal_stdlib>\nkernel void k() { threadgroup float total = 0.0f; }',
  'program-scope': '#include <metal_stdlib>\nfloat scale = 2.0f;\nkernel void k() {}',
  recursion: '#include <metal_stdlib>\nuint fact(uint n) { return n < 2 ? 1 : n * fact(n - 1); }',
  'half-types': '#include <metal_stdlib>\nkernel void k(device __fp16* x [[buffer(0)]]) {}',
};

/** The family sources: every .metal file of shaders/ but the prelude. */
function metalFiles(): string[] {
  return existsSync(SHADERS) ? readdirSync(SHADERS).filter((f) => f.endsWith('.metal') && f !== METAL_PRELUDE.name).sort() : [];
}

/**
 * A family's program as the registry compiles it (the prelude, common.h, the
 * header when there is one, the kernels), and where each of its lines comes from.
 */
function familyProgram(file: string): { text: string; where: (line: number) => string } {
  const header = file.replace(/\.metal$/, '.h');
  const files = [METAL_PRELUDE, COMMON_HEADER];
  if (existsSync(join(SHADERS, header))) files.push({ name: header, text: readFileSync(join(SHADERS, header), 'utf8') });
  files.push({ name: file, text: readFileSync(join(SHADERS, file), 'utf8') });
  const text = joinSources(files);
  const lines = text.split('\n');
  return {
    text,
    where(line: number): string {
      for (let i = line - 1; i >= 0; i--) {
        const m = /^#line 1 "([^"]+)"$/.exec(lines[i]!);
        if (m) return `shaders/${m[1]}:${line - i - 1}`;
      }
      return `line ${line}`;
    },
  };
}

describe('metal lint of shaders/*.metal', () => {
  test('the clean sample passes every rule', () => {
    expect(lintMetal(CLEAN)).toEqual([]);
  });

  for (const [rule, snippet] of Object.entries(BAD)) {
    test(`rule ${rule} flags its bad sample`, () => {
      expect(lintMetal(snippet).map((f) => f.rule)).toContain(rule);
    });
  }

  test('a function constant sizing a threadgroup array is reported as such', () => {
    const src = '#include <metal_stdlib>\nconstant uint n_fc [[function_constant(1)]];\nkernel void k() { threadgroup float t[n_fc]; }';
    expect(lintMetal(src).map((f) => f.text)).toContain('threadgroup t[n_fc]: sized by function constant n_fc');
  });

  const files = metalFiles();
  if (files.length === 0) test('shaders/ has no .metal file yet: nothing to lint', () => {});
  for (const f of files) {
    test(`shaders/${f} (after the prelude and its header)`, () => {
      const program = familyProgram(f);
      const findings = lintMetal(program.text).map((x) => `${program.where(x.line)}: [${x.rule}] ${x.text}`);
      expect(findings).toEqual([]);
    });
  }
});
