# Assembles a family's CUDA program for the CPU simulation (sim_runtime.h):
#   python3 build.py <repo root> <family[,family...]> <output header>
# common.cuh without its inline-PTX helpers (sim_runtime.h defines them),
# common.h, the family header, the family's kernels; dynamic shared memory
# declarations (the prelude's and the kernels') pointed at the simulated
# block's buffer.
import os, re, sys
root = sys.argv[1]
common = open(f'{root}/shaders/cuda/common.cuh').read()
# Drop every function whose body holds inline PTX, and smem_addr.
pat = re.compile(r'(template <[^>]*>\s*\n)?__device__ __forceinline__ [^{;]*\{', re.M)
pos = 0
res = ''
for m in pat.finditer(common):
    start = m.start()
    # find matching brace
    depth = 0
    j = m.end() - 1
    while True:
        if common[j] == '{': depth += 1
        elif common[j] == '}':
            depth -= 1
            if depth == 0: break
        j += 1
    body = common[start:j + 1]
    if re.search(r'\basm\b', body) or 'smem_addr(const void' in body:
        res += common[pos:start]
        pos = j + 1
res += common[pos:]
res = res.replace('#include <cuda_bf16.h>', '').replace('#include <cuda_fp16.h>', '')
# Dynamic shared memory declarations (the prelude's engines and the
# families' kernels), pointed at the simulated block's buffer.
DYNAMIC = [
    ('extern __shared__ __align__(16) unsigned char smem_raw[];', 'unsigned char* smem_raw = sim_dynamic_smem();'),
    ('extern __shared__ float partials[];', 'float* partials = reinterpret_cast<float*>(sim_dynamic_smem());'),
    ('extern __shared__ float red[];', 'float* red = reinterpret_cast<float*>(sim_dynamic_smem());'),
    ('extern __shared__ __align__(16) unsigned char dyn[];', 'unsigned char* dyn = sim_dynamic_smem();'),
    ('extern __shared__ __align__(16) unsigned char gc_q4k_smem[];', 'unsigned char* gc_q4k_smem = sim_dynamic_smem();'),
]
def dynamic(text):
    for a, b in DYNAMIC:
        text = text.replace(a, b)
    return text
out = '#include "sim_runtime.h"\n' + dynamic(res) + '\n' + open(f'{root}/shaders/common.h').read() + '\n'
# Several families: each one's header and kernels in turn (their helpers live
# in anonymous namespaces, so distinct names are all they need).
for fam in sys.argv[2].split(','):
    # A family without param structs (kv_cache_copy: scalars one per binding) has no header.
    hp = f'{root}/shaders/{fam}.h'
    header = open(hp).read() if os.path.exists(hp) else ''
    cu = dynamic(open(f'{root}/shaders/cuda/{fam}.cu').read())
    out += header + '\n' + cu + '\n'
open(sys.argv[3], 'w').write(out)
