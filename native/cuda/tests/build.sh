#!/usr/bin/env bash
# Builds the cuda backend and its tests into build/cuda/ and, with --run, runs them:
#   test_util   GPU-free checks of util.cpp (kernel names and parameter sizes from
#               nvcc-made images when nvcc exists)
#   test_cuda   the C ABI end to end (skips what needs a device when none is present)
# Usage: native/cuda/tests/build.sh [--run]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
tests="$root/native/cuda/tests"
out="$root/build/cuda"

bash "$root/scripts/build-cuda.sh"
if [[ ! -f "$out/libmlx_native_cuda.so" ]]; then
  echo "cuda tests: skipped: the backend library was not built"
  exit 0
fi
cc="${CC:-cc}"
cxx="${CXX:-c++}"
"$cc" -std=gnu11 -O1 -Wall -Wextra -o "$out/test_cuda" "$tests/test_cuda.c" -ldl
"$cxx" -std=c++17 -O1 -Wall -Wextra -o "$out/test_util" "$tests/test_util.cpp" \
  "$root/native/cuda/src/util.cpp"
fixtures=""
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
if [[ -x "$nvcc" ]]; then
  "$nvcc" -cubin -arch=sm_90a -o "$out/fixture.cubin" "$tests/fixture.cu"
  "$nvcc" -ptx -arch=sm_90 -o "$out/fixture.ptx" "$tests/fixture.cu"
  for arch in sm_80 sm_90a sm_100a; do  # sm_100a only where this nvcc knows it
    rm -f "$out/params_$arch.cubin"
    "$nvcc" -cubin -arch=$arch -o "$out/params_$arch.cubin" "$tests/params_fixture.cu" \
      2>/dev/null || [[ $arch == sm_100a ]]
  done
  fixtures="$out"
fi
echo "cuda tests: built $out/test_cuda and $out/test_util"

if [[ "${1:-}" == --run ]]; then
  status=0
  "$out/test_util" $fixtures || status=1
  "$out/test_cuda" "$out/libmlx_native_cuda.so" || status=1
  exit $status
fi
