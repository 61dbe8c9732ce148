#!/usr/bin/env bash
# Runs a family's CUDA kernels on the CPU simulation (sim_runtime.h), no GPU
# needed: shaders/cuda/tests/sim/run.sh [family] [big]
# (family: dense or flash_attn_prefill; `big` adds large sizes). SIM_DEFINES
# (e.g. "-DMLXN_FC_301=1") go to the compiler, as the registry gives function
# constants to NVRTC; flash_attn_prefill.sh runs that family's variants.
# Needs g++ with C++20 and the CUDA headers (for the f16 / bf16 types).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
family="${1:-dense}"
out="$root/build/cuda/sim"
mkdir -p "$out"
cuda="${CUDA_HOME:-/usr/local/cuda}"
python3 "$here/build.py" "$root" "$family" "$out/sim_kernels.h"
bin="$out/${family}_driver$(echo "${SIM_DEFINES:-}" | tr -c 'A-Za-z0-9_\n' '_')"
g++ -std=c++20 -O1 ${SIM_DEFINES:-} -I"$cuda/include" -I"$here" -I"$out" "$here/${family}_driver.cpp" -o "$bin" -lpthread
"$bin" "${2:-}"
