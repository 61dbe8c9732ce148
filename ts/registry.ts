// The per-device kernel registry: families of kernels registered with their
// sources, compiled on first use for the device's backend, cached by
// (family, constants) for libraries and (kernel, constants) for pipelines.

import type { BackendName } from './native.ts';
import type { Device } from './device.ts';
import { MlxError } from './errors.ts';
import cudaPrelude from '../shaders/cuda/common.cuh' with { type: 'text' };
import { kernelWrites } from './metal-source.ts';
import { constantsKey, type FunctionConstants, type Library, type Pipeline } from './library.ts';

/** The helpers every CUDA family shares (shaders/cuda/common.cuh), compiled ahead of its source. */
export const CUDA_PRELUDE: string = cudaPrelude;

/**
 * One program of a prelude and a family's source, with `#line` directives so
 * that compile errors cite each file by its own name and line.
 */
export function withPrelude(prelude: string, preludeName: string, source: string, name: string): string {
  return `#line 1 "${preludeName}"\n${prelude}\n#line 1 "${name}"\n${source}`;
}

export interface FamilySources {
  /** Metal Shading Language, used by the metal and emu backends. */
  metal: string;
  /**
   * CUDA C++ with the same entry names and binding order, used by the cuda
   * backend; compiled after CUDA_PRELUDE, whose helpers it uses.
   */
  cuda?: string;
}

interface Family {
  sources: FamilySources;
  kernels: readonly string[];
}

export class KernelRegistry {
  readonly device: Device;
  private readonly families = new Map<string, Family>();
  private readonly kernelFamily = new Map<string, string>();
  private readonly libraries = new Map<string, Library>();
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
    if (known) {
      const same =
        known.sources.metal === sources.metal &&
        known.sources.cuda === sources.cuda &&
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
    this.families.set(family, { sources: { ...sources }, kernels: [...kernels] });
    for (const k of kernels) this.kernelFamily.set(k, family);
  }

  isRegistered(family: string): boolean {
    return this.families.has(family);
  }

  /** The pipeline of a registered kernel, compiling its family's source on first use. */
  pipeline(kernel: string, constants?: FunctionConstants): Pipeline {
    const ckey = constants === undefined ? '' : constantsKey(constants);
    const key = ckey === '' ? kernel : `${kernel}|${ckey}`;
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
    const p = this.library(family, constants, ckey).pipeline(kernel);
    // A CUDA kernel has the bindings of its Metal twin: what it writes is read there.
    if (this.device.backend === 'cuda') p._writes = kernelWrites(this.families.get(family)!.sources.metal, kernel);
    this.pipelines.set(key, p);
    return p;
  }

  private library(family: string, constants: FunctionConstants | undefined, ckey: string): Library {
    const key = `${family}|${ckey}`;
    const hit = this.libraries.get(key);
    if (hit !== undefined && hit._h !== 0) return hit;
    const { sources } = this.families.get(family)!;
    const backend: BackendName = this.device.backend;
    let source: string;
    let name: string;
    if (backend === 'cuda') {
      if (sources.cuda === undefined) {
        throw new MlxError('KernelNotFound', `KernelRegistry: family ${family} has no CUDA source, so it cannot run on the cuda backend`);
      }
      name = `${family}.cu`;
      source = withPrelude(CUDA_PRELUDE, 'common.cuh', sources.cuda, name);
    } else {
      source = sources.metal;
      name = `${family}.metal`;
    }
    const lib = this.device.compile(source, constants === undefined ? { name } : { name, constants });
    this.libraries.set(key, lib);
    return lib;
  }
}
