#!/usr/bin/env bash
# Runs a family's CUDA kernels on the CPU simulation (sim_runtime.h), no GPU
# needed: shaders/cuda/tests/sim/run.sh [family] [big]   (family: dense, sample)
# Needs g++ with C++20 and the CUDA headers (for the f16 / bf16 types).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
family="${1:-dense}"
out="$root/build/cuda/sim"
mkdir -p "$out"
cuda="${CUDA_HOME:-/usr/local/cuda}"
python3 "$here/build.py" "$root" "$family" "$out/sim_kernels.h"
g++ -std=c++20 -O1 -I"$cuda/include" -I"$here" -I"$out" "$here/${family}_driver.cpp" -o "$out/${family}_driver" -lpthread
"$out/${family}_driver" "${2:-}"
