// Contract: Metal on Linux (swift/Sources/Metal/Metal.swift) declares Apple's
// Metal API as the metal backend (swift/Sources/MlxNative) uses it, and no
// more. Runs on any OS (it reads source text only); the Swift compiler checks
// on Linux that the backend compiles against it.
//
// What it checks:
//   - every public declaration of Metal.swift (types, members, protocol
//     requirements, enumeration cases) has a doc comment citing the Apple
//     documentation page it follows (developer.apple.com/documentation/metal/,
//     or .../objectivec/ for what Metal's classes inherit from NSObject);
//   - every member it declares (function, property, enumeration case) is used
//     by the backend's sources, but for the few that Metal on Linux itself
//     needs, listed below with the reason;
//   - the module is built only on Linux: Package.swift declares the Metal
//     target inside `#if os(Linux)`.
// The checker is run once against a deliberately broken fixture, so a checker
// that finds nothing cannot pass.

import { describe, expect, test } from 'bun:test';
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { stripComments } from './source-text.ts';

const ROOT = resolve(import.meta.dir, '..');
const METAL = join(ROOT, 'swift/Sources/Metal/Metal.swift');
const BACKEND = join(ROOT, 'swift/Sources/MlxNative');

/** Members declared for Metal on Linux's own use, not the backend's. */
const OWN_USE: Record<string, string> = {
  rawValue: 'OptionSet conformance',
  init: 'initializers (OptionSet, MTLSize, the NSObject subclasses)',
  notEnqueued: 'the status a command buffer reports before its commit',
  committed: 'the status a command buffer reports while its work runs',
  serial: 'the dispatch type Metal on Linux implements besides .concurrent',
};

interface Declaration {
  line: number;
  kind: 'type' | 'member' | 'case';
  name: string;
  cited: boolean;
}

const APPLE_DOC = /https:\/\/developer\.apple\.com\/documentation\/(metal|objectivec)\/\S+/;

/** The public declarations of a Swift file like Metal.swift, each with whether its doc comment cites Apple. */
export function declarations(text: string): Declaration[] {
  const lines = text.split('\n');
  const out: Declaration[] = [];
  let inProtocol = false;
  let depth = 0;
  let protocolDepth = -1;
  lines.forEach((raw, i) => {
    const line = raw.trim();
    let m: RegExpExecArray | null;
    let decl: Omit<Declaration, 'line' | 'cited'> | null = null;
    if ((m = /^(?:public|open)\s+(?:final\s+)?(protocol|struct|class|enum|typealias)\s+(\w+)/.exec(line))) {
      decl = { kind: 'type', name: m[2]! };
      if (m[1] === 'protocol') {
        inProtocol = true;
        protocolDepth = depth;
      }
    } else if ((m = /^(?:public|open)\s+(?:override\s+)?(?:static\s+)?(?:func|var|let)\s+(\w+)/.exec(line))) {
      decl = { kind: 'member', name: m[1]! };
    } else if ((m = /^(?:public|open)\s+(?:override\s+)?init\b/.exec(line))) {
      decl = { kind: 'member', name: 'init' };
    } else if (inProtocol && depth === protocolDepth + 1 && (m = /^(?:func|var)\s+(\w+)/.exec(line))) {
      decl = { kind: 'member', name: m[1]! };
    } else if ((m = /^case\s+(\w+)\s*=\s*\d+$/.exec(line))) {
      decl = { kind: 'case', name: m[1]! };
    }
    if (decl) {
      let j = i - 1;
      let cited = false;
      while (j >= 0 && lines[j]!.trim().startsWith('///')) {
        if (APPLE_DOC.test(lines[j]!)) cited = true;
        j--;
      }
      out.push({ ...decl, line: i + 1, cited });
    }
    for (const c of line.replace(/"[^"]*"/g, '')) {
      if (c === '{') depth++;
      if (c === '}') {
        depth--;
        if (inProtocol && depth === protocolDepth) inProtocol = false;
      }
    }
  });
  return out;
}

/** Problems of Metal.swift's declarations against the backend's sources; empty when none. */
export function problems(metal: string, backend: string): string[] {
  const used = stripComments(backend);
  const out: string[] = [];
  for (const d of declarations(metal)) {
    if (!d.cited) out.push(`line ${d.line}: ${d.name} cites no Apple documentation page`);
    if (d.kind === 'type' || d.name in OWN_USE) continue;
    // A case is used as `.name`; a member by its name.
    const pattern = d.kind === 'case' ? new RegExp(`\\.${d.name}\\b`) : new RegExp(`\\b${d.name}\\b`);
    if (!pattern.test(used)) out.push(`line ${d.line}: ${d.name} is not used by the backend (swift/Sources/MlxNative)`);
  }
  return out;
}

function backendSources(): string {
  return readdirSync(BACKEND)
    .filter((f) => f.endsWith('.swift'))
    .map((f) => readFileSync(join(BACKEND, f), 'utf8'))
    .join('\n');
}

describe('Metal on Linux (swift/Sources/Metal)', () => {
  test('every public declaration cites Apple, and the backend uses every member', () => {
    const metal = readFileSync(METAL, 'utf8');
    const found = declarations(metal);
    // The declarations the backend needs are there (a checker that parsed
    // nothing would pass the rest).
    for (const name of ['MTLDevice', 'makeComputePipelineState', 'setBytes', 'memoryBarrier', 'bindings', 'concurrent']) {
      expect(found.map((d) => d.name)).toContain(name);
    }
    expect(problems(metal, backendSources())).toEqual([]);
  });

  test('the module is built on Linux only', () => {
    const manifest = stripComments(readFileSync(join(ROOT, 'swift/Package.swift'), 'utf8'));
    const linux = /#if os\(Linux\)([\s\S]*?)#else([\s\S]*?)#endif/.exec(manifest);
    expect(linux).not.toBeNull();
    expect(linux![1]).toContain('.target(name: "Metal"');
    expect(linux![2]).not.toContain('"Metal"');
    expect(manifest.replace(linux![0], '')).not.toContain('name: "Metal"');
  });

  test('the checker finds each kind of problem in a broken fixture', () => {
    const fixture = [
      '/// https://developer.apple.com/documentation/metal/mtlthing',
      'public protocol MTLThing: AnyObject {',
      '    /// https://developer.apple.com/documentation/metal/mtlthing/used',
      '    var used: Int { get }',
      '    var uncited: Int { get }',
      '    /// https://developer.apple.com/documentation/metal/mtlthing/unused()',
      '    func unused()',
      '}',
      'public enum MTLKind: UInt {',
      '    case gone = 1',
      '}',
    ].join('\n');
    const backend = 'let x = thing.used + thing.uncited // unused(), .gone';
    expect(problems(fixture, backend)).toEqual([
      'line 5: uncited cites no Apple documentation page',
      'line 7: unused is not used by the backend (swift/Sources/MlxNative)',
      'line 9: MTLKind cites no Apple documentation page',
      'line 10: gone cites no Apple documentation page',
      'line 10: gone is not used by the backend (swift/Sources/MlxNative)',
    ]);
  });
});
