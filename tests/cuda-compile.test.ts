// Every CUDA family compiles as the registry builds it (prelude, header,
// kernels; ts/registry.ts familySources and cudaProgram, which starts every
// entry with mlxn_entry()), with nvcc's front end to PTX for sm_90a, where
// nvcc is installed: a clash in the shared prelude or a kernel that NVRTC
// would refuse fails here, not first on the GPU machine. The cuda backend
// compiles with NVRTC at run time; nvcc's front end is the same one. Each
// PTX then holds one griddepcontrol.wait per entry: every kernel waits for
// the one ahead of it before it touches memory, as programmatic dependent
// launch requires of every kernel it launches.

import { expect, test } from 'bun:test';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import '../ts/ops/index.ts'; // every op module: its family's sources are known
import { readFileSync } from 'node:fs';
import { cudaPartOf, cudaPartProgram, cudaProgram, knownFamilyNames, knownFamilySources } from '../ts/registry.ts';

/** The families of the shaders/cuda files (other tests of the same run define families of their own). */
const FILES = readdirSync(join(import.meta.dir, '../shaders/cuda')).filter((f) => f.endsWith('.cu')).map((f) => f.slice(0, -3));

const NVCC = ['nvcc', '/usr/local/cuda/bin/nvcc'].find((c) => spawnSync('bash', ['-c', `command -v ${c}`]).status === 0);

test.skipIf(NVCC === undefined)('every CUDA family compiles with nvcc (sm_90a, PTX)', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'mlxn-cuda-compile-'));
  try {
    const families = knownFamilyNames().flatMap((family) => {
      const cuda = knownFamilySources(family)?.cuda;
      return cuda === undefined || !FILES.includes(family) ? [] : [{ family, cuda }];
    });
    expect(families.map((f) => f.family).sort()).toEqual([...FILES].sort());
    const failures: string[] = [];
    // Two at a time (the machines that run this have two cores or more).
    const queue = [...families];
    const worker = async () => {
      for (let f = queue.shift(); f !== undefined; f = queue.shift()) {
        const file = join(dir, `${f.family}.cu`);
        writeFileSync(file, cudaProgram(f.cuda));
        const ptx = join(dir, `${f.family}.ptx`);
        const p = Bun.spawn([NVCC!, '-std=c++17', '-arch=sm_90a', '-ptx', '-o', ptx, file], { stdout: 'pipe', stderr: 'pipe' });
        const [code, err] = await Promise.all([p.exited, new Response(p.stderr).text()]);
        if (code !== 0) {
          failures.push(`${f.family}: ${err.split('\n').filter((l) => l.includes('error')).slice(0, 3).join(' | ')}`);
          continue;
        }
        const text = readFileSync(ptx, 'utf8');
        const entries = text.split('\n.visible .entry ').length - 1, waits = text.split('griddepcontrol.wait').length - 1;
        if (entries === 0 || waits !== entries) failures.push(`${f.family}: ${entries} entries, ${waits} griddepcontrol.wait`);
      }
    };
    await Promise.all([worker(), worker()]);
    expect(failures).toEqual([]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 600_000);

// A family compiled in parts (FamilySources.cudaParts): each part's program,
// preprocessed by nvcc, holds exactly its group's entries (part 0: every entry
// outside the groups), and the parts together hold every entry once: a
// kernel is looked up in the part that has it, and no part compiles another's.
test.skipIf(NVCC === undefined)('every CUDA family with parts: each part holds its group of entries, every entry in one part', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mlxn-cuda-parts-'));
  const entriesOf = (source: string, label: string): string[] => {
    const file = join(dir, `${label}.cu`);
    writeFileSync(file, source);
    const p = spawnSync(NVCC!, ['-std=c++17', '-arch=sm_90a', '-E', '-x', 'cu', file], { encoding: 'utf8', maxBuffer: 1 << 30 });
    if (p.status !== 0) throw new Error(`${label}: nvcc -E failed: ${p.stderr.split('\n').slice(0, 3).join(' | ')}`);
    // nvcc's preprocessor writes __global__ and __launch_bounds__(n) as attributes.
    const head = /extern "C" __attribute__\(\(global\)\) void (?:__attribute__\(\(launch_bounds\([^)]*\)\)\)\s*)?(\w+)\s*\(/g;
    return [...p.stdout.matchAll(head)].map((m) => m[1]!).sort();
  };
  try {
    const withParts = knownFamilyNames().flatMap((family) => {
      const s = knownFamilySources(family);
      return s?.cudaParts === undefined || !FILES.includes(family) ? [] : [{ family, s }];
    });
    expect(withParts.length).toBeGreaterThan(0);
    for (const { family, s } of withParts) {
      const all = entriesOf(cudaProgram(s.cuda!), `${family}-all`);
      const grouped = s.cudaParts!.flat();
      expect(new Set(grouped).size).toBe(grouped.length);
      const want = [all.filter((e) => !grouped.includes(e)), ...s.cudaParts!.map((g) => [...g].sort())];
      const got = want.map((_, part) => entriesOf(cudaPartProgram(s, part), `${family}-part${part}`));
      expect({ family, parts: got }).toEqual({ family, parts: want });
      expect(got.flat().sort()).toEqual(all);
      for (const [part, names] of got.entries()) for (const n of names) expect(cudaPartOf(s, n)).toBe(part);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 120_000);
