#!/usr/bin/env bash
# Builds the cuda backend and the kernel checks, then runs them:
#   shaders/cuda/tests/run.sh [families...]
# Each kernel source is also compiled by nvcc (when present, with the prelude
# common.cuh, then common.h and the family header included first, as the
# registry compiles it) for the resource
# report (registers, spills, shared memory). Logs go to $OUT when set, else
# build/cuda/kernel-tests/. Exit status: the checks' (0 when all pass).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
out="${OUT:-$root/build/cuda/kernel-tests}"
mkdir -p "$out" "$root/build/cuda"
bash "$root/scripts/build-cuda.sh" > "$out/build.log" 2>&1 || { cat "$out/build.log"; exit 2; }
"${CXX:-g++}" -std=c++17 -O2 -Wall -o "$root/build/cuda/kernels_test" "$root/shaders/cuda/tests/kernels_test.cpp" -ldl \
  >> "$out/build.log" 2>&1 || { cat "$out/build.log"; exit 2; }
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
if [[ -x "$nvcc" ]]; then
  for f in "$root"/shaders/cuda/*.cu; do
    h="$root/shaders/$(basename "$f" .cu).h"; [[ -f "$h" ]] || h=/dev/null
    "$nvcc" -std=c++17 -include "$root/shaders/cuda/common.cuh" -include "$root/shaders/common.h" -include "$h" -gencode=arch=compute_90a,code=sm_90a -cubin -Xptxas -v -o "$root/build/cuda/$(basename "$f" .cu).cubin" "$f" 2>&1 \
      | grep -E "error|warning|Compiling|registers|spill" >> "$out/resources.log"
  done
fi
export MLX_NATIVE_CUDA_CACHE=off
"$root/build/cuda/kernels_test" "$root/build/cuda/libmlx_native_cuda.so" "$root/shaders/cuda" "$@" > "$out/kernels_test.log" 2>&1
status=$?
grep -E "^(FAIL|FATAL)" "$out/kernels_test.log" | head -40
sed -n '/==== performance/,$p' "$out/kernels_test.log"
tail -3 "$out/kernels_test.log"
exit $status
