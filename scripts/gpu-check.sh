#!/usr/bin/env bash
# The cuda backend's verification on a Linux machine with an NVIDIA GPU:
#   bash scripts/gpu-check.sh [tests|sanitize|memcheck|racecheck|all]   (default: all)
# 1. tests:    builds build/cuda/libmlx_native_cuda.so and runs `bun test` on
#              the cuda backend alone (MLX_NATIVE_TEST_BACKENDS=cuda), every test
#              file but the emulator's own (emu-*.test.ts need clang, which a
#              GPU machine may lack; the emulator is covered in CI).
# 2. sanitize: compute-sanitizer memcheck, then racecheck, over each kernel
#              family's test file on the cuda backend (small parity shapes),
#              and over tests/lifetimes.test.ts and tests/core.test.ts.
# Logs go to $OUT when set (the device machine), else build/gpu-check/.
# GPU_CHECK_TIMEOUT (seconds, default 150) bounds each sanitizer run; one that
# runs out is reported as such, never as clean.
# Exit status: non-zero when any step failed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/build/gpu-check}"
mkdir -p "$out"
what="${1:-all}"
status=0

command -v bun > /dev/null || { echo "gpu-check: bun is not on PATH" >&2; exit 2; }
bash scripts/build-cuda.sh > "$out/build.log" 2>&1 || { cat "$out/build.log"; exit 2; }
export MLX_NATIVE_BACKEND=cuda MLX_NATIVE_TEST_BACKENDS=cuda
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/device.txt" 2>&1 || true
echo "device: $(cat "$out/device.txt")"

families=()
for f in shaders/cuda/*.cu; do families+=("$(basename "$f" .cu)"); done
# Besides each family's tests: the seed's two entries of chunk_gated_delta_rule
# (tests of their own), the lifetimes of work in flight and the core API.
families+=(gated_delta_net_chunk chunk_local_cumsum lifetimes core)

if [[ "$what" == tests || "$what" == all ]]; then
  mapfile -t files < <(ls tests/*.test.ts | grep -v '/emu-')
  echo "== bun test (cuda): ${#files[@]} files"
  bun test --timeout 120000 "${files[@]}" > "$out/tests.log" 2>&1 || status=1
  grep -E "^\(fail\)" "$out/tests.log" | head -40
  tail -6 "$out/tests.log"
fi

tools=()
case "$what" in
  sanitize|all) tools=(memcheck racecheck) ;;
  memcheck|racecheck) tools=("$what") ;;
esac
if [[ ${#tools[@]} -gt 0 ]]; then
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  if [[ ! -x "$sanitizer" ]]; then
    echo "gpu-check: compute-sanitizer not found" >&2
    status=1
  else
    for tool in "${tools[@]}"; do
      : > "$out/sanitize-$tool.log"
      for fam in "${families[@]}"; do
        [[ -f "tests/$fam.test.ts" ]] || continue
        printf '%s %s: ' "$tool" "$fam"
        timeout "${GPU_CHECK_TIMEOUT:-150}" "$sanitizer" --tool "$tool" --error-exitcode 86 --print-limit 20 \
          bun test --timeout 120000 "tests/$fam.test.ts" >> "$out/sanitize-$tool.log" 2>&1
        rc=$?
        if [[ $rc -eq 0 ]]; then echo clean
        elif [[ $rc -eq 86 ]]; then echo "ERRORS"; status=1
        elif [[ $rc -eq 124 ]]; then echo "timed out after ${GPU_CHECK_TIMEOUT:-150} s"; status=1
        else echo "test failure (exit $rc)"; status=1
        fi
      done
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/sanitize-$tool.log" | sort | uniq -c
    done
  fi
fi
exit $status
