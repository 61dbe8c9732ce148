#!/usr/bin/env bash
# Builds and runs the dispatch-block decoder's tests (block_test.c), as C99 and
# as C++, with warnings as errors. Usage: native/common/tests/run.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
out="$root/build/common/tests"
mkdir -p "$out"
cc="${CC:-}" cxx="${CXX:-}"
if [ -z "$cc" ]; then
  for c in clang-19 clang gcc cc; do command -v "$c" >/dev/null && { cc=$c; break; }; done
fi
if [ -z "$cxx" ]; then
  for c in clang++-19 clang++ g++ c++; do command -v "$c" >/dev/null && { cxx=$c; break; }; done
fi
src="$root/native/common/tests/block_test.c"
"$cc" -std=c99 -O1 -g -Wall -Wextra -Werror -pedantic -o "$out/block_test_c" "$src"
"$cxx" -std=c++17 -O1 -g -Wall -Wextra -Werror -x c++ -o "$out/block_test_cpp" "$src"
echo "== block_test (C99)"
"$out/block_test_c"
echo "== block_test (C++)"
"$out/block_test_cpp"
