// Contract: each shaders/cuda/<family>.cu has the entries of shaders/<family>.metal,
// with the Metal bindings in the same order, and the param structs they share
// laid out alike. Runs on Linux without a GPU: the family header and the .cu
// file are preprocessed by clang (macro-made entries expanded; no CUDA headers
// needed, since the prelude shaders/cuda/common.cuh holds every include),
// then read as text.
//
// For every Metal kernel entry of the family (ts/metal-source.ts finds its
// declaration), the CUDA entry `extern "C" __global__ void NAME(...)` takes one
// pointer per [[buffer(n)]] binding, in ascending n:
//   - the same number of parameters;
//   - a param struct at the same position, of the same name (a typedef of it
//     counts), e.g. `constant L2NormParams&` and `const L2NormParams*`;
//   - a CUDA pointer not declared const only where the Metal binding may be
//     written: the encoder places barriers from the Metal declaration, so a
//     CUDA kernel writing a binding that Metal declares read-only would race.
// Every struct that both programs see has the same fields (names and byte
// offsets, Metal uint / CUDA u32 and the like counting as one type): with the
// structs in the family header that holds by construction, and
// tests/contract-structs.test.ts checks that nothing defines them again.

import { describe, expect, test } from 'bun:test';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BUFFER_ATTR, kernelParams, metalEntries } from '../ts/metal-source.ts';
import { paramSize, structLayout } from '../ts/params.ts';
import { CUDA_PDL_MARK, cudaPartCount, cudaPartOf, cudaPartProgram, cudaProgram, familySources } from '../ts/registry.ts';
import { CXX, cudaEntries, header, preprocess, ROOT, type CudaParam } from './cuda-source.ts';

/** typedef A B; as B -> A. */
function typedefs(code: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of code.matchAll(/\btypedef\s+(?:struct\s+)?([A-Za-z_]\w*)\s+([A-Za-z_]\w*)\s*;/g)) out.set(m[2]!, m[1]!);
  return out;
}

const SIZES: Record<string, number> = {
  uint: 4, u32: 4, unsigned: 4, 'unsigned int': 4, int: 4, int32_t: 4, uint32_t: 4, float: 4,
  ushort: 2, u16: 2, 'unsigned short': 2, short: 2, half: 2, __half: 2, bfloat: 2, bf16: 2, __nv_bfloat16: 2,
  uchar: 1, u8: 1, 'unsigned char': 1, char: 1, bool: 1, ulong: 8, u64: 8, 'unsigned long long': 8, long: 8,
};

/**
 * Fields of `struct name { ... };` in CUDA code: name, size, offset under
 * natural alignment. A field `struct Other id;` stands for Other's fields
 * (at Other's alignment), as structLayout reads it.
 */
function cudaStructFields(code: string, name: string): { name: string; size: number; offset: number }[] | null {
  const m = new RegExp(`\\bstruct\\s+${name}\\s*\\{([^}]*)\\}`).exec(code);
  if (!m) return null;
  const fields: { name: string; size: number; offset: number }[] = [];
  let end = 0;
  for (const decl of m[1]!.split(';')) {
    const d = decl.replace(/\s+/g, ' ').trim();
    if (d === '') continue;
    const held = /^struct ([A-Za-z_]\w*) [A-Za-z_]\w*$/.exec(d);
    const inner = held ? cudaStructFields(code, held[1]!) : null;
    if (inner !== null) {
      const align = Math.max(1, ...inner.map((f) => f.size));
      const offset = Math.ceil(end / align) * align;
      for (const f of inner) fields.push({ name: f.name, size: f.size, offset: offset + f.offset });
      end = offset + Math.ceil(Math.max(0, ...inner.map((f) => f.offset + f.size)) / align) * align;
      continue;
    }
    const f = /^(.*\S)\s+([A-Za-z_]\w*)$/.exec(d);
    const size = f ? SIZES[f[1]!] : undefined;
    if (!f || size === undefined) throw new Error(`struct ${name}: "${d}" is not a scalar field`);
    const offset = Math.ceil(end / size) * size;
    fields.push({ name: f[2]!, size, offset });
    end = offset + size;
  }
  return fields;
}

const families = readdirSync(join(ROOT, 'shaders', 'cuda')).filter((f) => f.endsWith('.cu')).map((f) => f.slice(0, -3)).sort();

describe.if(CXX !== undefined)('CUDA sources match their Metal twins', () => {
  test('the checker finds a mismatch in a broken pair', () => {
    const metal = `struct P { uint n; float e; };
kernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]], constant P& p [[buffer(2)]]) {}`;
    const cuda = cudaEntries(`struct P { u32 n; float e; };
extern "C" __global__ void k(float* x, float* y, const P* p) {}`);
    expect(mismatches(metal, cuda, typedefs(''), '')).toContain('k: parameter 0 (x) is written in CUDA but read-only in Metal');
    expect(mismatches(metal, cudaEntries(`extern "C" __global__ void k(const float* x, float* y) {}`), new Map(), '')).toContain(
      'k: CUDA takes 2 parameters, Metal binds 3 buffers',
    );
    // The CUDA twin's own trailing parameters: tensor maps (const void*), nothing else.
    expect(mismatches(metal, cudaEntries(`struct P { u32 n; float e; };
extern "C" __global__ void k(const float* x, float* y, const P* p, const void* m) {}`), typedefs(''), '')).toEqual([]);
    expect(mismatches(metal, cudaEntries(`struct P { u32 n; float e; };
extern "C" __global__ void k(const float* x, float* y, const P* p, float* z) {}`), typedefs(''), '')).toContain(
      'k: CUDA takes 4 parameters, Metal binds 3 buffers (parameters past them must be const void*: tensor maps)',
    );
  });

  for (const family of families) {
    test(family, () => {
      const h = header(family);
      const metal = `${h}\n${readFileSync(join(ROOT, 'shaders', `${family}.metal`), 'utf8')}`;
      const cudaCode = preprocess(`${h}\n${readFileSync(join(ROOT, 'shaders', 'cuda', `${family}.cu`), 'utf8')}`, `${family}.cu`);
      const problems = mismatches(metal, cudaEntries(cudaCode), typedefs(cudaCode), cudaCode);
      expect(problems.join("\n")).toBe("");
    });
  }
});

/** Every way the CUDA entries and structs differ from the Metal source's. */
function mismatches(metal: string, cuda: Map<string, CudaParam[]>, aliases: Map<string, string>, cudaCode: string): string[] {
  const problems: string[] = [];
  const structsUsed = new Set<string>();
  for (const name of metalEntries(metal)) {
    const params = cuda.get(name);
    if (params === undefined) {
      problems.push(`${name}: no extern "C" __global__ entry in the CUDA source`);
      continue;
    }
    const bindings = kernelParams(metal, name)
      .map((p) => ({ p, m: BUFFER_ATTR.exec(p) }))
      .filter((x) => x.m !== null)
      .map((x) => ({ decl: x.p.slice(0, x.m!.index).trim(), index: Number(x.m![1]) }))
      .sort((a, b) => a.index - b.index);
    // Past the Metal bindings a CUDA entry may take parameters of its own,
    // each a `const void*` (a tensor map, or the stand-in buffer a plan's
    // cuda.buffers binds where a launch reads none).
    const own = params.slice(bindings.length);
    if (params.length < bindings.length || own.some((cp) => !(cp.isPointer && cp.isConst && cp.type === 'void'))) {
      problems.push(`${name}: CUDA takes ${params.length} parameters, Metal binds ${bindings.length} buffers` +
        (params.length > bindings.length ? ' (parameters past them must be const void*: tensor maps)' : ''));
      continue;
    }
    bindings.forEach((b, i) => {
      const cp = params[i]!;
      const argName = /([A-Za-z_]\w*)\s*$/.exec(b.decl)?.[1] ?? '?';
      const readOnly = /\bconstant\b/.test(b.decl) || /\bconst\s+device\b|\bdevice\s+const\b/.test(b.decl);
      if (!cp.isPointer) problems.push(`${name}: parameter ${i} (${argName}) is not a pointer in CUDA`);
      if (cp.isPointer && !cp.isConst && readOnly) problems.push(`${name}: parameter ${i} (${argName}) is written in CUDA but read-only in Metal`);
      const metalType = /(?:constant|device)\s+(?:const\s+)?([A-Za-z_]\w*)\s*[&*]/.exec(b.decl)?.[1];
      const cudaType = aliases.get(cp.type) ?? cp.type;
      if (metalType !== undefined && /Params$/.test(metalType)) {
        structsUsed.add(metalType);
        if (cudaType !== (aliases.get(metalType) ?? metalType)) problems.push(`${name}: parameter ${i} is ${metalType} in Metal, ${cp.type} in CUDA`);
      }
    });
  }
  for (const s of structsUsed) {
    const c = cudaStructFields(cudaCode, aliases.get(s) ?? s);
    if (c === null) {
      if (cudaCode !== '') problems.push(`struct ${s}: not defined in the CUDA source`);
      continue;
    }
    const m = structLayout(metal, s).map((f) => ({ name: f.name, size: paramSize(f.type), offset: f.offset }));
    if (JSON.stringify(m) !== JSON.stringify(c)) problems.push(`struct ${s}: Metal ${JSON.stringify(m)} vs CUDA ${JSON.stringify(c)}`);
  }
  return problems;
}

// cudaProgram (ts/registry.ts): what the registry compiles for cuda. Every entry starts with mlxn_entry() (the
// backend launches the kernels of a marked program with programmatic dependent launch, which is sound only where
// every kernel waits for the one ahead of it), and an entry the insertion cannot reach is refused, not skipped.
describe('cudaProgram: every entry waits for the kernel ahead of it', () => {
  test('marks the program and starts each entry, macro-made ones too, with mlxn_entry() after its brace, lines kept', () => {
    const text = [
      '// a comment',
      'extern "C" __global__ void a(float* x) { x[0] = 1; }',
      'extern "C" __global__ void __launch_bounds__(256, 2)',
      '    b(const float* x,',
      '      float* y) {',
      '    y[0] = x[0];',
      '}',
      '#define MAKE(N) \\',
      '    extern "C" __global__ void c_##N(float* x) { \\',
      '        x[0] = N; \\',
      '    }',
      'MAKE(1)',
    ].join('\n');
    const out = cudaProgram([{ name: 'x.cu', text }]);
    expect(out.startsWith(CUDA_PDL_MARK)).toBe(true);
    expect(out.split('mlxn_entry();').length - 1).toBe(3);
    expect(out).toContain('extern "C" __global__ void a(float* x) { mlxn_entry(); x[0] = 1; }');
    expect(out).toContain('      float* y) { mlxn_entry();\n');
    expect(out).toContain('void c_##N(float* x) { mlxn_entry(); \\\n');
    // Lines keep their numbers: the joined file has the source's lines after its #line.
    expect(out.split('\n').length).toBe(CUDA_PDL_MARK.split('\n').length - 1 + 1 + text.split('\n').length + 1);
  });
  test('leaves an entry that starts with MLXN_PREFETCH_ENTRY( as it is (that statement calls mlxn_entry() itself)', () => {
    const text = [
      'extern "C" __global__ void a(float* x) { MLXN_PREFETCH_ENTRY(f(x)); x[0] = 1; }',
      'extern "C" __global__ void b(float* x) {',
      '    MLXN_PREFETCH_ENTRY(f(x));',
      '}',
      '#define MAKE(N) \\',
      '    extern "C" __global__ void c_##N(float* x) { \\',
      '        MLXN_PREFETCH_ENTRY(f(x)); \\',
      '    }',
      'extern "C" __global__ void d(float* x) { x[0] = 1; MLXN_PREFETCH_ENTRY(f(x)); }',
    ].join('\n');
    const out = cudaProgram([{ name: 'x.cu', text }]);
    expect(out.split('mlxn_entry();').length - 1).toBe(1);
    expect(out).toContain('void d(float* x) { mlxn_entry(); x[0] = 1;');
    expect(out).toContain('void a(float* x) { MLXN_PREFETCH_ENTRY(f(x));');
  });
  test('leaves an entry that starts with MLXN_HELD_ENTRY( as it is (it waits without letting the next launch start early)', () => {
    const text = [
      'extern "C" __global__ void a(float* x) { MLXN_HELD_ENTRY(); x[0] = 1; }',
      '#define MAKE(N) \\',
      '    extern "C" __global__ void c_##N(float* x) { \\',
      '        MLXN_HELD_ENTRY(); \\',
      '    }',
      'extern "C" __global__ void d(float* x) { x[0] = 1; MLXN_HELD_ENTRY(); }',
    ].join('\n');
    const out = cudaProgram([{ name: 'x.cu', text }]);
    expect(out.split('mlxn_entry();').length - 1).toBe(1);
    expect(out).toContain('void d(float* x) { mlxn_entry(); x[0] = 1;');
    expect(out).toContain('void a(float* x) { MLXN_HELD_ENTRY(); x[0] = 1; }');
    expect(out).toContain('void c_##N(float* x) { \\\n        MLXN_HELD_ENTRY();');
  });
  test('refuses an entry that does not start a line, or whose head has a ; before its body', () => {
    for (const text of ['/* x */ extern "C" __global__ void a(float* x) { }', 'extern "C" __global__ void a(float* x);\nvoid b() { }']) {
      expect(() => cudaProgram([{ name: 'bad.cu', text }])).toThrow(/cudaProgram: bad\.cu must start each of its 1 extern "C" __global__ entries/);
    }
  });
});

// A family compiled in parts (FamilySources.cudaParts): the part of a kernel, and each part's program (the
// backend's cache keys the source, so each part is its own image).
describe('cudaPartProgram, cudaPartOf: a family compiled in parts', () => {
  const metal = 'kernel void k() {}\n';
  const cuda = '#if MLXN_CUDA_PART_IS(0)\nextern "C" __global__ void a(float* x) { x[0] = 1; }\n#endif\n';
  test('part k is cudaProgram with `#define MLXN_CUDA_PART k` after the mark; a family without parts is cudaProgram', () => {
    const plain = familySources('parts_plain', { metal, cuda });
    expect(cudaPartCount(plain)).toBe(1);
    expect(cudaPartOf(plain, 'a')).toBe(0);
    expect(cudaPartProgram(plain, 0)).toBe(cudaProgram(plain.cuda!));
    const parted = familySources('parts_two', { metal, cuda, cudaParts: [['b', 'c'], ['d']] });
    expect(cudaPartCount(parted)).toBe(3);
    expect(['a', 'b', 'c', 'd', 'e'].map((k) => cudaPartOf(parted, k))).toEqual([0, 1, 1, 2, 0]);
    for (const part of [0, 1, 2]) {
      expect(cudaPartProgram(parted, part)).toBe(CUDA_PDL_MARK + `#define MLXN_CUDA_PART ${part}\n` + cudaProgram(parted.cuda!).slice(CUDA_PDL_MARK.length));
    }
  });
  test('refuses a part out of range, and parts without a CUDA source', () => {
    const parted = familySources('parts_range', { metal, cuda, cudaParts: [['b']] });
    for (const part of [-1, 2, 0.5]) expect(() => cudaPartProgram(parted, part)).toThrow(`cudaPartProgram: part must be an integer in [0, 2) (got ${part})`);
    expect(() => familySources('parts_nocuda', { metal, cudaParts: [['b']] })).toThrow('familySources: parts_nocuda has cudaParts but no CUDA source');
  });
});
