#!/usr/bin/env bash
# Builds and runs the emulator runtime's scheduler tests (hand-written C++
# kernels against the runtime hooks). Usage: native/emu/tests/runtime/run.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../../../.." && pwd)"
out="$root/build/emu/tests"
mkdir -p "$out"
cxx="${CXX:-}"
if [ -z "$cxx" ]; then
  if command -v clang++-19 >/dev/null; then cxx=clang++-19
  elif command -v clang++ >/dev/null; then cxx=clang++
  else cxx=g++; fi
fi
emu="$root/native/emu"
"$cxx" -std=c++20 -O1 -g -pthread -Wall -Wextra -o "$out/scheduler_test" \
  "$emu/tests/runtime/scheduler_test.cpp" "$emu/executor.cpp" "$emu/fiber.cpp"
for threads in 1 2 4; do
  echo "== scheduler_test, MLX_NATIVE_EMU_THREADS=$threads"
  MLX_NATIVE_EMU_THREADS=$threads "$out/scheduler_test"
done

# The C ABI over the whole runtime, with a stand-in translator whose "Metal"
# is C++ written against mlxn_emu_kernel_abi.h.
bash "$root/scripts/build-emu.sh" --shim-only
"$cxx" -std=c++20 -O1 -g -pthread -Wall -Wextra -Wno-unused-parameter \
  -o "$out/api_test" "$emu/tests/runtime/api_test.cpp" "$emu/api.cpp" "$emu/compiler.cpp" \
  "$emu/executor.cpp" "$emu/fiber.cpp" "$emu/tests/runtime/fake/fake_translate.cpp" \
  "$root/build/emu/gen/shim_files.cpp" -I"$emu" -ldl
echo "== api_test"
"$out/api_test"
