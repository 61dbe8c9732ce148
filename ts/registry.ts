// The per-device kernel registry: families of kernels registered with their
// sources, compiled on first use for the device's backend, cached by
// (family, its CUDA part, constants) for libraries and (kernel, constants)
// for pipelines.

import type { Device } from './device.ts';
import { MlxError } from './errors.ts';
import metalPrelude from '../shaders/common.metal' with { type: 'text' };
import cudaPrelude from '../shaders/cuda/common.cuh' with { type: 'text' };
import commonHeader from '../shaders/common.h' with { type: 'text' };
import { kernelWrites } from './metal-source.ts';
import { constantsKey, type CompileJob, type FunctionConstants, type Library, type Pipeline } from './library.ts';

/** One file of a program: its name (relative to shaders/) and its text. */
export interface SourceFile {
  readonly name: string;
  readonly text: string;
}

/** What every Metal family shares (shaders/common.metal): metal_stdlib and the helpers. */
export const METAL_PRELUDE: SourceFile = { name: 'common.metal', text: metalPrelude };
/** What every CUDA family shares (shaders/cuda/common.cuh): CUDA's headers and the helpers. */
export const CUDA_PRELUDE: SourceFile = { name: 'cuda/common.cuh', text: cudaPrelude };
/** The param structs of several families (shaders/common.h), compiled by every program of both languages after its prelude. */
export const COMMON_HEADER: SourceFile = { name: 'common.h', text: commonHeader };

/**
 * One program of the files in order, each after a `#line 1 "name"` directive,
 * so that compile errors cite each file by its own name and line. The Swift
 * tool (swift/Sources/MlxNativeTool/ShaderFiles.swift) joins them the same
 * way, byte for byte, for the metallibs it builds.
 */
export function joinSources(files: readonly SourceFile[]): string {
  let out = '';
  for (const f of files) out += `#line 1 "${f.name}"\n${f.text}\n`;
  return out;
}

/** The first line of cudaProgram's programs (native/cuda/src/backend.cpp reads it). */
export const CUDA_PDL_MARK = '#define MLXN_PDL 1\n';

/** An entry's head up to its body's brace: at a line start (a comment never matches), no `;` (a declaration). */
const CUDA_ENTRY_HEAD = /^[ \t]*extern "C" __global__[^{;]*\{/gm;
/**
 * A body that starts with a statement that waits itself: the prefetching
 * entry's or the held entry's (blanks and a macro's line continuations before it).
 */
const CUDA_OWN_WAIT_ENTRY = /^(?:[ \t\n]|\\\n)*(?:MLXN_PREFETCH_ENTRY|MLXN_HELD_ENTRY)\(/;

/**
 * The CUDA program of files as the registry compiles it: CUDA_PDL_MARK, then
 * the files joined (joinSources) with `mlxn_entry();` as the first statement
 * of every `extern "C" __global__` entry (after its body's brace, on the same
 * line, so lines keep their numbers; entries written by macros included).
 * An entry whose body starts with `MLXN_PREFETCH_ENTRY(...)` is left as it
 * is: that statement asks L2 for bytes, then calls mlxn_entry() itself; so is
 * one that starts with `MLXN_HELD_ENTRY()`, which waits without letting the
 * next launch start before this one has finished.
 * The mark tells the cuda backend that every entry waits for the kernel
 * ahead of it (shaders/cuda/common.cuh mlxn_entry), so it may launch them
 * with programmatic dependent launch. Refuses a file with an entry whose
 * head the pattern does not reach (every `extern "C" __global__` must start a
 * line and reach its brace without a `;`).
 */
export function cudaProgram(files: readonly SourceFile[]): string {
  return CUDA_PDL_MARK + joinSources(files.map((f) => {
    let heads = 0;
    const text = f.text.replace(CUDA_ENTRY_HEAD, (head: string, at: number, all: string) => {
      heads++;
      // An entry that prefetches first calls mlxn_entry() itself, right after; a held one waits alone (common.cuh).
      return CUDA_OWN_WAIT_ENTRY.test(all.slice(at + head.length, at + head.length + 200)) ? head : `${head} mlxn_entry();`;
    });
    const entries = f.text.split('extern "C" __global__').length - 1;
    if (heads !== entries) {
      throw new MlxError('InvalidArgument', `cudaProgram: ${f.name} must start each of its ${entries} extern "C" __global__ entries on a line of its own and reach the body's { without a ';' (got ${heads} such entries)`);
    }
    return { name: f.name, text };
  }));
}

/**
 * The sources of a family, in the order the registry compiles them: the
 * prelude of the language, the param structs of several families
 * (shaders/common.h), the family's header of param structs
 * (shaders/<family>.h; both read by MSL, CUDA and ts/params.ts alike), then
 * its kernels (shaders/<family>.metal, shaders/cuda/<family>.cu).
 */
export interface FamilySources {
  /** Metal Shading Language, used by the metal and emu backends. */
  readonly metal: readonly SourceFile[];
  /** CUDA C++ with the same entry names and binding order, used by the cuda backend. */
  readonly cuda?: readonly SourceFile[];
  /**
   * CUDA only: the groups of entries (kernel or entry names) compiled as parts
   * 1, 2, ... of the family, each its own program and module, so that they
   * compile side by side and a kernel compiles only its part; every other
   * entry is part 0's. The .cu puts each group inside `#if
   * MLXN_CUDA_PART_IS(k)` (shaders/cuda/common.cuh), part 0's entries inside
   * `#if MLXN_CUDA_PART_IS(0)`.
   */
  readonly cudaParts?: readonly (readonly string[])[];
}

/** The part of a family's CUDA program that holds a kernel or entry (FamilySources.cudaParts; 0 without parts). */
export function cudaPartOf(sources: FamilySources, name: string): number {
  const i = sources.cudaParts?.findIndex((g) => g.includes(name)) ?? -1;
  return i + 1;
}

/** How many parts a family's CUDA program compiles in (1 without cudaParts). */
export function cudaPartCount(sources: FamilySources): number {
  return (sources.cudaParts?.length ?? 0) + 1;
}

/**
 * Part k of a family's CUDA program: cudaProgram's, with `#define
 * MLXN_CUDA_PART k` after its first line where the family has parts.
 */
export function cudaPartProgram(sources: FamilySources, part: number): string {
  if (sources.cuda === undefined) throw new MlxError('InvalidArgument', 'cudaPartProgram: the family has no CUDA source');
  const parts = cudaPartCount(sources);
  if (!Number.isSafeInteger(part) || part < 0 || part >= parts) {
    throw new MlxError('InvalidArgument', `cudaPartProgram: part must be an integer in [0, ${parts}) (got ${part})`);
  }
  const program = cudaProgram(sources.cuda);
  return parts === 1 ? program : CUDA_PDL_MARK + `#define MLXN_CUDA_PART ${part}\n` + program.slice(CUDA_PDL_MARK.length);
}

// Every family whose sources were made in this process (each op module makes
// its family's at import), by name: what KernelRegistry.warmup() compiles
// when given no names. The first definition of a name stays.
const knownFamilies = new Map<string, FamilySources>();

/** The families defined in this process (the op modules imported), sorted. */
export function knownFamilyNames(): string[] {
  return [...knownFamilies.keys()].sort();
}

/** The sources of a family defined in this process, or undefined. */
export function knownFamilySources(family: string): FamilySources | undefined {
  return knownFamilies.get(family);
}

/** A family's FamilySources from the texts of its files. */
export function familySources(
  family: string, files: { header?: string; metal: string; cuda?: string; cudaParts?: readonly (readonly string[])[] },
): FamilySources {
  const header: SourceFile[] = files.header === undefined ? [] : [{ name: `${family}.h`, text: files.header }];
  const metal = [METAL_PRELUDE, COMMON_HEADER, ...header, { name: `${family}.metal`, text: files.metal }];
  if (files.cudaParts !== undefined && files.cuda === undefined) {
    throw new MlxError('InvalidArgument', `familySources: ${family} has cudaParts but no CUDA source`);
  }
  const sources: FamilySources =
    files.cuda === undefined
      ? { metal }
      : {
        metal, cuda: [CUDA_PRELUDE, COMMON_HEADER, ...header, { name: `cuda/${family}.cu`, text: files.cuda }],
        ...(files.cudaParts === undefined ? {} : { cudaParts: files.cudaParts }),
      };
  if (!knownFamilies.has(family)) knownFamilies.set(family, sources);
  return sources;
}

/** What KernelRegistry.warmup() reports as each family is ready. */
export interface WarmupProgress {
  family: string;
  /** Families ready so far, this one included, and how many were asked for. */
  done: number;
  total: number;
  /** Milliseconds from the start of warmup() to this family being ready. */
  ms: number;
  /** True when the family was compiled already (nothing to do). */
  cached: boolean;
}

export interface WarmupOptions {
  onProgress?: (p: WarmupProgress) => void;
  /** Compiles running at once (default: min(4, the machine's cores)). */
  concurrency?: number;
}

function sameFiles(a: readonly SourceFile[] | undefined, b: readonly SourceFile[] | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return a.length === b.length && a.every((f, i) => f.name === b[i]!.name && f.text === b[i]!.text);
}

interface Family {
  sources: FamilySources;
  kernels: readonly string[];
  /** The joined Metal program: what metal and emu compile, and what a kernel's writes are read from. */
  metal: string;
}

export class KernelRegistry {
  readonly device: Device;
  private readonly families = new Map<string, Family>();
  private readonly kernelFamily = new Map<string, string>();
  private readonly libraries = new Map<string, Library>();
  /** Compiles that warmup() started and nobody has finished, by library key. */
  private readonly compiling = new Map<string, CompileJob>();
  private readonly pipelines = new Map<string, Pipeline>();

  /** @internal made by Device.kernels. */
  constructor(device: Device) {
    this.device = device;
  }

  /**
   * Registers a family's sources and kernel names. Registering the same family
   * again with the same sources and kernels does nothing; with different ones,
   * or a kernel name that another family has, is an error.
   */
  register(family: string, sources: FamilySources, kernels: readonly string[]): void {
    const known = this.families.get(family);
    if (known !== undefined && known.sources === sources && known.kernels === kernels) return;
    if (known) {
      const same =
        sameFiles(known.sources.metal, sources.metal) &&
        sameFiles(known.sources.cuda, sources.cuda) &&
        JSON.stringify(known.sources.cudaParts) === JSON.stringify(sources.cudaParts) &&
        known.kernels.length === kernels.length &&
        known.kernels.every((k, i) => k === kernels[i]);
      if (!same) {
        throw new MlxError('InvalidArgument', `KernelRegistry.register: family ${family} is already registered with other sources or kernels`);
      }
      return;
    }
    if (family.length === 0) throw new MlxError('InvalidArgument', 'KernelRegistry.register: family must be a non-empty name (got "")');
    for (const k of kernels) {
      const other = this.kernelFamily.get(k);
      if (other !== undefined) {
        throw new MlxError('InvalidArgument', `KernelRegistry.register: kernel ${k} of family ${family} is already registered by family ${other}`);
      }
    }
    this.families.set(family, { sources, kernels, metal: joinSources(sources.metal) });
    for (const k of kernels) this.kernelFamily.set(k, family);
  }

  /** The language this device compiles: cuda on the cuda backend, Metal on metal and emu. */
  get language(): 'metal' | 'cuda' {
    return this.device.backend === 'cuda' ? 'cuda' : 'metal';
  }

  isRegistered(family: string): boolean {
    return this.families.has(family);
  }

  /**
   * The pipeline of a registered kernel, compiling its family's source on
   * first use. `entry` (cuda only): a compact entry of the kernel's family
   * that runs it instead of the kernel's own (CudaLaunch in ts/plan.ts); what
   * it writes is the kernel's.
   */
  pipeline(kernel: string, constants?: FunctionConstants, entry?: string): Pipeline {
    if (entry !== undefined && this.language !== 'cuda') {
      throw new MlxError('InvalidArgument', `KernelRegistry.pipeline: entry ${entry} of kernel ${kernel} is a CUDA entry (this device compiles ${this.language})`);
    }
    const ckey = constants === undefined ? '' : constantsKey(constants);
    const name = entry === undefined ? kernel : `${kernel}>${entry}`;
    const key = ckey === '' ? name : `${name}|${ckey}`;
    const hit = this.pipelines.get(key);
    if (hit !== undefined && !hit.released) return hit;

    const family = this.kernelFamily.get(kernel);
    if (family === undefined) {
      const known = [...this.families.keys()];
      throw new MlxError(
        'KernelNotFound',
        `KernelRegistry.pipeline: kernel ${kernel} is not registered (families registered: ${known.length > 0 ? known.join(', ') : 'none'})`,
      );
    }
    const fam = this.families.get(family)!;
    const part = this.language === 'cuda' ? cudaPartOf(fam.sources, entry ?? kernel) : 0;
    const p = this.library(family, part, constants, ckey).pipeline(entry ?? kernel);
    // A CUDA kernel has the bindings of its Metal twin: what it writes is read there.
    if (this.language === 'cuda') p._writes = kernelWrites(fam.metal, kernel);
    this.pipelines.set(key, p);
    return p;
  }

  /** The key of a library: the family, its CUDA part (where it has parts) and the constants' key. */
  private static libraryKey(family: string, part: number, ckey: string): string {
    return part === 0 ? `${family}|${ckey}` : `${family}#${part}|${ckey}`;
  }

  private library(family: string, part: number, constants: FunctionConstants | undefined, ckey: string): Library {
    const key = KernelRegistry.libraryKey(family, part, ckey);
    const hit = this.libraries.get(key);
    if (hit !== undefined && hit._h !== 0) return hit;
    // A warm-up compile of this library still running: wait for it here.
    const job = this.compiling.get(key);
    if (job !== undefined) return this.take(key, job);
    const { source, name } = this.program(family, this.families.get(family)!.sources, part);
    const lib = this.device.compile(source, constants === undefined ? { name } : { name, constants });
    this.libraries.set(key, lib);
    return lib;
  }

  /** The program and file name of a family (on cuda: of its part) on this device. */
  private program(family: string, sources: FamilySources, part = 0): { source: string; name: string } {
    if (this.language === 'metal') return { source: joinSources(sources.metal), name: `${family}.metal` };
    if (sources.cuda === undefined) {
      throw new MlxError('KernelNotFound', `KernelRegistry: family ${family} has no CUDA source, so it cannot run on the cuda backend`);
    }
    return { source: cudaPartProgram(sources, part), name: `${family}.cu` };
  }

  private take(key: string, job: CompileJob): Library {
    if (this.compiling.get(key) === job) this.compiling.delete(key);
    const lib = job.finish();
    if (this.libraries.get(key) !== lib) this.libraries.set(key, lib);
    return lib;
  }

  /**
   * Compiles families ahead of their first use on native threads, so the
   * event loop keeps running: each family's library (no function constants)
   * for this device's backend. `families`: names of registered families or of
   * families whose op modules are imported (knownFamilyNames()); by default
   * all of them that can run on this backend. Resolves when every one is
   * ready, reporting each through `onProgress`; rejects with the first
   * compile error once the others have ended. Using a kernel meanwhile waits
   * for its family's compile instead of starting another.
   */
  async warmup(families?: readonly string[], opts: WarmupOptions = {}): Promise<void> {
    const t0 = performance.now();
    const known = new Set([...this.families.keys(), ...knownFamilies.keys()]);
    const sourcesOf = (f: string) => this.families.get(f)?.sources ?? knownFamilies.get(f);
    let names: string[];
    if (families === undefined) {
      names = [...known].sort().filter((f) => this.language === 'metal' || sourcesOf(f)!.cuda !== undefined);
    } else {
      if (!Array.isArray(families)) {
        throw new MlxError('InvalidArgument', `KernelRegistry.warmup: families must be an array of family names (got ${typeof families})`);
      }
      for (const f of families) {
        if (typeof f !== 'string' || !known.has(f)) {
          throw new MlxError(
            'KernelNotFound',
            `KernelRegistry.warmup: family ${String(f)} is not known (known: ${[...known].sort().join(', ') || 'none'})`,
          );
        }
      }
      names = [...new Set(families)];
    }
    const { onProgress } = opts;
    if (onProgress !== undefined && typeof onProgress !== 'function') {
      throw new MlxError('InvalidArgument', `KernelRegistry.warmup: opts.onProgress must be a function (got ${typeof onProgress})`);
    }
    const cores = typeof navigator === 'object' ? navigator.hardwareConcurrency : 1;
    const concurrency = opts.concurrency ?? Math.max(1, Math.min(4, cores));
    if (!Number.isSafeInteger(concurrency) || concurrency < 1) {
      throw new MlxError('InvalidArgument', `KernelRegistry.warmup: opts.concurrency must be an integer >= 1 (got ${concurrency})`);
    }
    // Everything is checked before any compile starts. On cuda a family with
    // parts is one compile a part.
    const parts = (f: string) => (this.language === 'cuda' ? cudaPartCount(sourcesOf(f)!) : 1);
    const programs = names.flatMap((f) =>
      Array.from({ length: parts(f) }, (_, part) => ({ family: f, part, ...this.program(f, sourcesOf(f)!, part) })));
    const left = new Map(names.map((f) => [f, { parts: parts(f), cached: true }]));

    let done = 0;
    let firstError: unknown = null;
    // A family is reported once every part of it is ready (cached: all of them were).
    const report = (family: string, cached: boolean) => {
      const l = left.get(family)!;
      l.cached &&= cached;
      if (--l.parts > 0) return;
      done++;
      onProgress?.({ family, done, total: names.length, ms: performance.now() - t0, cached: l.cached });
    };
    let next = 0;
    const worker = async () => {
      while (next < programs.length) {
        const { family, part, source, name } = programs[next++]!;
        const key = KernelRegistry.libraryKey(family, part, '');
        const hit = this.libraries.get(key);
        if (hit !== undefined && hit._h !== 0) {
          report(family, true);
          continue;
        }
        let job = this.compiling.get(key);
        if (job === undefined) {
          job = this.device.compileStart(source, { name });
          this.compiling.set(key, job);
        }
        try {
          await job.wait();
          this.take(key, job);
          report(family, false);
        } catch (e) {
          if (this.compiling.get(key) === job) this.compiling.delete(key);
          firstError ??= e;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, programs.length) }, worker));
    if (firstError !== null) throw firstError;
  }
}
