// Contract: the Swift metal backend exports exactly the C ABI of
// native/include/mlx_native.h. Runs on any OS (it reads source text only).
//
// What it checks:
//   - swift/Sources/CMlxNative/include/mlx_native.h is a symbolic link to
//     native/include/mlx_native.h (one header, no copy), and the C target's
//     module.modulemap names it;
//   - every function prototype of the header has exactly one
//     `@_cdecl("<name>")` function in swift/Sources/, with no @_cdecl for a name
//     the header lacks;
//   - that function is `public` (only public Swift symbols are exported from
//     the dylib) and lives in the library target swift/Sources/MlxNative/;
//   - it has the header's number of parameters, and each parameter and the
//     return value has the Swift type that is ABI-compatible with the C type:
//       uint32_t -> UInt32; int32_t, mlxn_status -> Int32; uint64_t -> UInt64;
//       <opaque handle>* -> OpaquePointer?; <opaque handle>** ->
//       UnsafeMutablePointer<OpaquePointer?>?; const char* ->
//       UnsafePointer<CChar>?; char* -> UnsafeMutablePointer<CChar>?;
//       const void* -> UnsafeRawPointer?; void* -> UnsafeMutableRawPointer?;
//       void (return) -> no return type.
//     An unknown C type fails the test, so a new header type forces the map to
//     be extended here.
// The checker is run once against a deliberately broken fixture, so a checker
// that finds nothing cannot pass.

import { describe, expect, test } from 'bun:test';
import { existsSync, lstatSync, readdirSync, readFileSync, realpathSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { stripComments } from './source-text.ts';

const ROOT = resolve(import.meta.dir, '..');
const HEADER = join(ROOT, 'native/include/mlx_native.h');
const SWIFT_SOURCES = join(ROOT, 'swift/Sources');
const LIBRARY_DIR = 'swift/Sources/MlxNative/';

export interface CFunction {
  name: string;
  returns: string;
  params: string[]; // C types, normalized: "const char*", "mlxn_device**", "uint64_t"
}

function normalizeCType(t: string): string {
  return t.replace(/\s+/g, ' ').replace(/\s*\*/g, '*').trim();
}

/** The function prototypes and opaque handle types of the header. */
export function parseHeader(text: string): { functions: CFunction[]; handles: Set<string> } {
  const code = stripComments(text)
    .split('\n')
    .filter((line) => !line.trim().startsWith('#'))
    .join('\n')
    .replace(/extern\s+"C"\s*\{/g, '');
  const handles = new Set<string>();
  for (const m of code.matchAll(/typedef\s+struct\s+(\w+)\s+(\w+)\s*;/g)) handles.add(m[2]!);
  const functions: CFunction[] = [];
  for (const stmt of code.split(/[;{}]/)) {
    const m = /^\s*([\s\S]*?)\b(mlxn_\w+)\s*\(([\s\S]*)\)\s*$/.exec(stmt);
    if (!m || /\btypedef\b/.test(stmt)) continue;
    const paramText = m[3]!.replace(/\s+/g, ' ').trim();
    const params =
      paramText === 'void' || paramText === ''
        ? []
        : paramText.split(',').map((p) => {
            const pm = /^(.*?[\s*])([A-Za-z_]\w*)$/.exec(p.trim());
            if (!pm) throw new Error(`cannot parse parameter "${p}" of ${m[2]}`);
            return normalizeCType(pm[1]!);
          });
    functions.push({ name: m[2]!, returns: normalizeCType(m[1]!), params });
  }
  return { functions, handles };
}

/** The Swift type that matches a C type across the C ABI, or null for an unmapped type. */
export function swiftTypeFor(cType: string, handles: Set<string>): string | null {
  const fixed: Record<string, string> = {
    uint32_t: 'UInt32',
    int32_t: 'Int32',
    mlxn_status: 'Int32',
    uint64_t: 'UInt64',
    'const char*': 'UnsafePointer<CChar>?',
    'char*': 'UnsafeMutablePointer<CChar>?',
    'const void*': 'UnsafeRawPointer?',
    'void*': 'UnsafeMutableRawPointer?',
    void: 'Void',
  };
  if (cType in fixed) return fixed[cType]!;
  const ptr = /^(\w+)(\*+)$/.exec(cType);
  if (ptr && handles.has(ptr[1]!)) {
    if (ptr[2] === '*') return 'OpaquePointer?';
    if (ptr[2] === '**') return 'UnsafeMutablePointer<OpaquePointer?>?';
  }
  return null;
}

export interface SwiftCdecl {
  symbol: string;
  func: string;
  file: string;
  isPublic: boolean;
  params: string[]; // Swift types, whitespace removed
  returns: string; // "Void" when absent
}

/** Splits on commas that are not inside <>, (), []. */
function splitTopLevel(text: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '<' || c === '(' || c === '[') depth++;
    else if (c === '>' || c === ')' || c === ']') depth--;
    else if (c === ',' && depth === 0) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
  }
  const last = text.slice(start);
  if (last.trim() !== '') parts.push(last);
  return parts;
}

/** Uses of the named functions other than a call or their own declaration, as "file:line: name used as a value". */
export function cdeclValueUses(files: { file: string; text: string }[], names: string[]): string[] {
  const out: string[] = [];
  for (const { file, text } of files) {
    const code = stripComments(text);
    for (const name of names) {
      for (const m of code.matchAll(new RegExp(`(?<![\\w.])${name}\\b(?!\\s*\\()`, 'g'))) {
        const line = code.slice(0, m.index).split('\n').length;
        out.push(`${file}:${line}: ${name} used as a value`);
      }
    }
  }
  return out;
}

/** Every @_cdecl function of one Swift file. */
export function parseSwiftCdecls(file: string, text: string): SwiftCdecl[] {
  const code = stripComments(text);
  const found: SwiftCdecl[] = [];
  for (const m of code.matchAll(/@_cdecl\s*\(\s*"([^"]*)"\s*\)/g)) {
    const rest = code.slice(m.index! + m[0].length);
    const head = /^\s*((?:@\w+(?:\([^)]*\))?\s+|public\s+|internal\s+|private\s+|fileprivate\s+|package\s+)*)func\s+(\w+)\s*\(/.exec(rest);
    if (!head) {
      found.push({ symbol: m[1]!, func: '?', file, isPublic: false, params: ['<unparsed>'], returns: '?' });
      continue;
    }
    let i = head[0].length;
    let depth = 1;
    const open = i;
    while (i < rest.length && depth > 0) {
      if (rest[i] === '(') depth++;
      else if (rest[i] === ')') depth--;
      i++;
    }
    const paramText = rest.slice(open, i - 1);
    const tail = /^\s*(?:throws\s*)?(?:->\s*([^{]+?))?\s*\{/.exec(rest.slice(i));
    const params = splitTopLevel(paramText).map((p) => {
      const colon = p.indexOf(':');
      const type = (colon < 0 ? p : p.slice(colon + 1)).replace(/=.*$/s, '');
      return type.replace(/\s+/g, '');
    });
    const ret = tail?.[1]?.replace(/\s+/g, '') ?? 'Void';
    found.push({
      symbol: m[1]!,
      func: head[2]!,
      file,
      isPublic: /\bpublic\b/.test(head[1]!),
      params,
      returns: ret === '()' ? 'Void' : ret,
    });
  }
  return found;
}

/** Problems of the Swift exports against the header; empty when they match. */
export function checkSwiftAgainstHeader(header: string, swiftFiles: { file: string; text: string }[]): string[] {
  const { functions, handles } = parseHeader(header);
  const cdecls = swiftFiles.flatMap((f) => parseSwiftCdecls(f.file, f.text));
  const problems: string[] = [];
  const names = new Set(functions.map((f) => f.name));
  for (const fn of functions) {
    const impls = cdecls.filter((c) => c.symbol === fn.name);
    if (impls.length !== 1) {
      problems.push(`${fn.name}: ${impls.length} @_cdecl functions (expected exactly 1)${impls.map((c) => ` ${c.file}`).join('')}`);
      continue;
    }
    const impl = impls[0]!;
    const where = `${fn.name} (${impl.file}: func ${impl.func})`;
    if (!impl.isPublic) problems.push(`${where}: must be public to be exported from the dylib`);
    if (!impl.file.startsWith(LIBRARY_DIR)) problems.push(`${where}: must be in ${LIBRARY_DIR}`);
    if (impl.params.length !== fn.params.length) {
      problems.push(`${where}: ${impl.params.length} parameters, the header has ${fn.params.length}`);
      continue;
    }
    fn.params.forEach((cType, i) => {
      const want = swiftTypeFor(cType, handles);
      if (want === null) problems.push(`${fn.name}: parameter ${i + 1} has C type ${cType}, which this test cannot map`);
      else if (impl.params[i] !== want) problems.push(`${where}: parameter ${i + 1} is ${impl.params[i]}, expected ${want} for C ${cType}`);
    });
    const wantRet = swiftTypeFor(fn.returns, handles);
    if (wantRet === null) problems.push(`${fn.name}: return type ${fn.returns} cannot be mapped`);
    else if (impl.returns !== wantRet) problems.push(`${where}: returns ${impl.returns}, expected ${wantRet} for C ${fn.returns}`);
  }
  for (const c of cdecls) {
    if (!names.has(c.symbol)) problems.push(`@_cdecl("${c.symbol}") in ${c.file}: not a function of mlx_native.h`);
  }
  return problems;
}

function swiftFilesUnder(dir: string): { file: string; text: string }[] {
  if (!existsSync(dir)) return [];
  const out: { file: string; text: string }[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...swiftFilesUnder(path));
    else if (entry.name.endsWith('.swift')) out.push({ file: relative(ROOT, path), text: readFileSync(path, 'utf8') });
  }
  return out;
}

describe('swift metal backend vs mlx_native.h', () => {
  const header = readFileSync(HEADER, 'utf8');

  test('the header parses into its functions', () => {
    const { functions, handles } = parseHeader(header);
    expect(handles).toEqual(new Set(['mlxn_device', 'mlxn_buffer', 'mlxn_library', 'mlxn_compile_job', 'mlxn_pipeline', 'mlxn_encoder']));
    expect(functions.length).toBeGreaterThanOrEqual(32);
    const byName = new Map(functions.map((f) => [f.name, f]));
    expect(byName.get('mlxn_abi_version')).toEqual({ name: 'mlxn_abi_version', returns: 'uint32_t', params: [] });
    expect(byName.get('mlxn_library_compile')?.params).toEqual([
      'mlxn_device*', 'const char*', 'uint64_t', 'const char*', 'const void*', 'uint32_t', 'mlxn_library**', 'char*', 'uint64_t',
    ]);
    expect(byName.get('mlxn_backend_name')?.returns).toBe('const char*');
  });

  test('the C target links the one header, not a copy', () => {
    const link = join(ROOT, 'swift/Sources/CMlxNative/include/mlx_native.h');
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(realpathSync(link)).toBe(realpathSync(HEADER));
    const modulemap = readFileSync(join(ROOT, 'swift/Sources/CMlxNative/include/module.modulemap'), 'utf8');
    expect(modulemap).toMatch(/header\s+"mlx_native\.h"/);
    // The dispatch-block decoder every backend shares, the same way.
    const blockLink = join(ROOT, 'swift/Sources/CMlxNative/include/mlx_native_block.h');
    expect(lstatSync(blockLink).isSymbolicLink()).toBe(true);
    expect(realpathSync(blockLink)).toBe(realpathSync(join(ROOT, 'native/include/mlx_native_block.h')));
    expect(modulemap).toMatch(/header\s+"mlx_native_block\.h"/);
  });

  test('every header function has exactly one matching public @_cdecl, and nothing else is exported', () => {
    const files = swiftFilesUnder(SWIFT_SOURCES);
    expect(files.length).toBeGreaterThan(0);
    expect(checkSwiftAgainstHeader(header, files)).toEqual([]);
  });

  // A C function pointer taken to a @_cdecl function (`let f: @convention(c)
  // ... = mlxnAbiVersion`) makes the compiler emit the export a second time in
  // a debug build: a duplicate symbol at link time. Only calls are allowed.
  test('no Swift code takes a @_cdecl function as a value (only calls)', () => {
    const files = swiftFilesUnder(join(ROOT, 'swift'));
    const cdecls = files.flatMap((f) => parseSwiftCdecls(f.file, f.text)).map((c) => c.func);
    expect(cdecls.length).toBeGreaterThan(20);
    expect(cdeclValueUses(files, cdecls)).toEqual([]);
    // The checker finds the use this rule exists for.
    expect(cdeclValueUses([{ file: 'x.swift', text: 'let a: @convention(c) () -> UInt32 = mlxnAbiVersion\nlet b = mlxnAbiVersion()' }], ['mlxnAbiVersion']))
      .toEqual(['x.swift:1: mlxnAbiVersion used as a value']);
  });

  test('the checker catches a missing, a duplicate, an extra, a mistyped and a non-public export', () => {
    const fixture = `
      @_cdecl("mlxn_abi_version") public func a() -> UInt32 { 1 }
      @_cdecl("mlxn_abi_version") public func b() -> UInt32 { 1 }
      @_cdecl("mlxn_device_count") func c() -> UInt32 { 1 }
      @_cdecl("mlxn_device_limit") public func d(_ device: OpaquePointer?, _ key: UInt64) -> UInt64 { 0 }
      @_cdecl("mlxn_device_close") public func e(_ device: OpaquePointer?, _ extra: Int32) {}
      @_cdecl("mlxn_not_in_header") public func f() {}
    `;
    const problems = checkSwiftAgainstHeader(header, [{ file: `${LIBRARY_DIR}Fixture.swift`, text: fixture }]);
    const text = problems.join('\n');
    expect(text).toContain('mlxn_abi_version: 2 @_cdecl functions');
    expect(text).toContain('mlxn_device_count (swift/Sources/MlxNative/Fixture.swift: func c): must be public');
    expect(text).toContain('mlxn_device_limit (swift/Sources/MlxNative/Fixture.swift: func d): parameter 2 is UInt64, expected UInt32');
    expect(text).toContain('mlxn_device_close (swift/Sources/MlxNative/Fixture.swift: func e): 2 parameters, the header has 1');
    expect(text).toContain('@_cdecl("mlxn_not_in_header")');
    expect(text).toContain('mlxn_encoder_wait: 0 @_cdecl functions');
  });
});
