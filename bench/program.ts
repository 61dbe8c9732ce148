// Writes the CUDA program the kernel registry compiles for one family (the
// prelude, the family's header and kernels, mlxn_entry() inserted: what
// NVRTC sees), so a standalone harness can include it.
//
//   bun run bench/program.ts <family> <out.cu>

import { writeFileSync } from 'node:fs';
import { cudaProgram, knownFamilySources } from '../ts/registry.ts';
import '../ts/ops/index.ts';

const [family, out] = process.argv.slice(2);
if (family === undefined || out === undefined) throw new Error('usage: bun run bench/program.ts <family> <out.cu>');
const sources = knownFamilySources(family);
if (sources?.cuda === undefined) throw new Error(`bench/program.ts: no family named ${family} with a CUDA source`);
writeFileSync(out, cudaProgram(sources.cuda));
