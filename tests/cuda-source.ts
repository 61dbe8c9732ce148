// The CUDA sources as the contract tests read them: a family's .cu file after
// shaders/common.h and its header, preprocessed by clang (macro-made entries
// expanded; no CUDA headers needed, since the prelude shaders/cuda/common.cuh
// holds every include), comments removed, and the parameters of its
// `extern "C" __global__` entries. Shared by tests/contract-cuda.test.ts and
// tests/op-contract.ts (a plan's compact CUDA entry against its kernel's).

import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stripComments } from '../ts/source-text.ts';

export const ROOT = join(import.meta.dir, '..');
/** A C++ compiler that can preprocess, or undefined where the machine has none. */
export const CXX = ['clang++-19', 'clang++', 'g++'].find((c) => spawnSync('bash', ['-c', `command -v ${c}`]).status === 0);

export interface CudaParam {
  type: string;
  isConst: boolean;
  isPointer: boolean;
}

export function preprocess(text: string, name: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'mlxn-contract-cuda-'));
  try {
    const file = join(dir, name);
    // The prelude's (shaders/cuda/common.cuh) macro that #if reads: a program
    // without parts, every entry in it.
    writeFileSync(file, `#define MLXN_CUDA_PART_IS(k) 1\n${text}`);
    const r = spawnSync(CXX!, ['-E', '-P', '-x', 'c++', file], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`preprocessing ${name} failed:\n${r.stderr}`);
    return stripComments(r.stdout);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** shaders/common.h and the family's header (shaders/<family>.h, when it has one): what both sources compile after their preludes. */
export function header(family: string): string {
  const file = join(ROOT, 'shaders', `${family}.h`);
  return readFileSync(join(ROOT, 'shaders', 'common.h'), 'utf8') + (existsSync(file) ? `\n${readFileSync(file, 'utf8')}` : '');
}

/** The parameters of every `extern "C" __global__` entry, by name. */
export function cudaEntries(code: string): Map<string, CudaParam[]> {
  const out = new Map<string, CudaParam[]>();
  // An entry may carry a launch attribute: __launch_bounds__(...) or common.cuh's MLXN_MAX_REGS(n).
  const re = /extern\s+"C"\s+__global__\s+void\s+(?:(?:__launch_bounds__|MLXN_MAX_REGS)\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\(([^)]*)\)/g;
  for (const m of code.matchAll(re)) {
    const params = m[2]!.trim() === '' ? [] : m[2]!.split(',').map((p) => {
      const decl = p.replace(/__restrict__/g, ' ').replace(/\s+/g, ' ').trim();
      const isPointer = decl.includes('*');
      const isConst = /\bconst\b/.test(decl.split('*')[0]!);
      const type = decl.split('*')[0]!.replace(/\bconst\b/g, '').trim();
      return { type, isConst, isPointer };
    });
    out.set(m[1]!, params);
  }
  return out;
}

const familyEntries = new Map<string, Map<string, CudaParam[]>>();
/** The entries of shaders/cuda/<family>.cu (preprocessed once a process). */
export function familyCudaEntries(family: string): Map<string, CudaParam[]> {
  let e = familyEntries.get(family);
  if (e === undefined) {
    const h = header(family);
    e = cudaEntries(preprocess(`${h}\n${readFileSync(join(ROOT, 'shaders', 'cuda', `${family}.cu`), 'utf8')}`, `${family}.cu`));
    familyEntries.set(family, e);
  }
  return e;
}

/**
 * Why a compact CUDA entry cannot stand in for a kernel of its family (a
 * plan's CudaLaunch.entry): missing, or parameters unlike the kernel's entry
 * (types, constness, pointers, in order). Empty where it can.
 */
export function compactEntryProblem(family: string, kernel: string, entry: string): string {
  const entries = familyCudaEntries(family);
  const k = entries.get(kernel), e = entries.get(entry);
  if (k === undefined) return `${family}: kernel ${kernel} has no CUDA entry`;
  if (e === undefined) return `${family}: compact entry ${entry} (for ${kernel}) is not an extern "C" __global__ entry of shaders/cuda/${family}.cu`;
  if (JSON.stringify(e) !== JSON.stringify(k)) return `${family}: entry ${entry} takes ${JSON.stringify(e)}, kernel ${kernel} ${JSON.stringify(k)}`;
  return '';
}
