#!/usr/bin/env bash
# The benchmark in one command, on a machine with an NVIDIA GPU, PyTorch and
# (for the FLA peers) the .fla/ folder of bench/prepare_fla.sh:
#   builds the cuda backend (scripts/build-cuda.sh), times ours (bench/ours.ts
#   under Bun, MLX_NATIVE_BACKEND=cuda), times the peers and the device's
#   ceilings (bench/peers.py), and joins them (bench/report.py) into
#   OUT/results.md, OUT/results.json and OUT/results.png.
#
#   bash bench/run.sh [--quick] [--graphs] [--out DIR]
# --quick: 3 repeats of about 5 ms, and peers.py --quick (fewer compiled and
# autotuned peer shapes); the default is 10 repeats of about 20 ms.
# --graphs: ours and the peers timed as replays of one recording (a CUDA
# graph each), so launch overhead does not decide short cases.
# DIR defaults to $OUT when set, else bench/.work/out. Bun: the one on PATH, or
# .carry/bun.xz unpacked to /tmp/bun. Everything is printed to stdout; the
# intermediate ours.json / peers.json stay in bench/.work/.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
quick=0
graphs=()
out="${OUT:-$root/bench/.work/out}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1 ;;
    --graphs) graphs=(--graphs) ;;
    --out) out="$2"; shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
work="$root/bench/.work"
mkdir -p "$out" "$work"
if [[ $quick == 1 ]]; then reps=(--repeats 3 --target-ms 5); pq=(--quick); else reps=(--repeats 10 --target-ms 20); pq=(); fi
export PYTHONUNBUFFERED=1

if ! command -v bun >/dev/null 2>&1; then
  if [[ -f .carry/bun.xz ]]; then
    xz -dc .carry/bun.xz > /tmp/bun && chmod +x /tmp/bun && export PATH=/tmp:$PATH
  else
    echo "run.sh: no bun on PATH and no .carry/bun.xz: ours will not run"
  fi
fi
echo "run.sh: $(date -u +%FT%TZ) quick=$quick graphs=${#graphs[@]} out=$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>&1 || true

echo "== build cuda backend"
bash scripts/build-cuda.sh || echo "run.sh: build-cuda failed (ours will fail to open the cuda device)"

echo "== ours"
rm -f "$work/ours.json" "$work/peers.json"
if command -v bun >/dev/null 2>&1; then
  MLX_NATIVE_BACKEND=cuda bun run bench/ours.ts "${reps[@]}" ${graphs[@]+"${graphs[@]}"} --json "$work/ours.json" || echo "run.sh: ours.ts exited with $?"
fi

echo "== peers"
PYTHONPATH="$root/.fla${PYTHONPATH:+:$PYTHONPATH}" python3 bench/peers.py "${reps[@]}" ${pq[@]+"${pq[@]}"} ${graphs[@]+"${graphs[@]}"} --json "$work/peers.json" \
  || echo "run.sh: peers.py exited with $?"

echo "== report"
python3 bench/report.py --ours "$work/ours.json" --peers "$work/peers.json" --out "$out"
