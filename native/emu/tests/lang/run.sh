#!/usr/bin/env bash
# Builds and runs the emulator's language tests (translator + shim, no
# runtime): native/emu/tests/lang/lang_test.cpp.
# Usage: native/emu/tests/lang/run.sh [seed dir]   (default /work/shared/seeds,
# or $MLXN_SEEDS; the seed tests are skipped when the folder has no .metal)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../../.." && pwd)"
emu="$root/native/emu"
out="$root/build/emu-lang-test"
mkdir -p "$out/work"
cxx="${CXX:-clang++-19}"
"$cxx" -std=c++20 -O1 -Wall -Wextra -Wno-unused-parameter -I"$emu/shim" \
  "$emu/tests/lang/lang_test.cpp" "$emu/translate.cpp" -o "$out/lang_test" -ldl
"$out/lang_test" "$emu/shim" "$out/work" "${1:-${MLXN_SEEDS:-/work/shared/seeds}}"
