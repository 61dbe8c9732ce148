#!/usr/bin/env bash
# Source trees timed against each other in one run, alternating, so that a
# change is compared with its base on the same machine and clocks:
#
#   bash bench/ab.sh [--rounds N] [--script S] TREE... -- ARGS...
#     runs `bun run S ARGS` (S: bench/glue.ts unless given) in each TREE in
#     turn, N rounds (2 unless given), and prints one table: every row the
#     first tree printed (a line "<name> <time> us ..."), then its time in
#     each tree, round after round. TREE "." is this checkout; the logs stay
#     in bench/.work/ab/. --column C: the script prints a table of rows
#     "<name> | ... | ..." (bench/decode_products.ts) and column C (from 1)
#     is the time.
#
#   bash bench/ab.sh --tree REV DIR
#     writes at DIR the files of revision REV that a benchmark run reads (ts,
#     shaders, bench's TypeScript, the package files) and the C ABI's header
#     (so that the tree's kernel harness, shaders/cuda/tests/kernels_test.cpp,
#     compiles), without the tests, docs, results and sources of the native
#     libraries, with build/ linked
#     (relatively) to this checkout's: the trees share the compiled backend and differ in
#     what the registry compiles from their own shaders and plans (a change
#     to native/ needs a build of its own). Edit DIR's files to make a
#     variant. A few MB each, so that several travel to a GPU machine.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ "${1:-}" == "--tree" ]]; then
  [[ $# -eq 3 ]] || { echo "ab.sh: --tree REV DIR" >&2; exit 2; }
  rev="$2" dir="$3"
  mkdir -p "$dir"
  git -C "$root" archive "$rev" -- ts shaders native/include bench package.json tsconfig.json bunfig.toml | tar -x -C "$dir"
  rm -rf "$dir/bench/results" "$dir/bench/notes" "$dir/bench/overhead" "$dir"/bench/*.py "$dir"/bench/*.cu
  # Relative links: a tree inside the checkout (an ignored folder carried to
  # a GPU machine with it) finds the build there too.
  ln -sfn "$(realpath --relative-to="$dir" "$root/build")" "$dir/build"
  du -sh "$dir" | cut -f1 | sed "s|^|ab.sh: $dir ($rev): |"
  exit 0
fi

rounds=2
script=bench/glue.ts
column=0
trees=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift ;;
    --script) script="$2"; shift ;;
    --column) column="$2"; shift ;;
    *) trees+=("$1") ;;
  esac
  shift
done
[[ "${1:-}" == "--" ]] && shift
[[ ${#trees[@]} -gt 0 ]] || { echo "ab.sh: no TREE given" >&2; exit 2; }
logs="$root/bench/.work/ab"
mkdir -p "$logs"
files=()
for ((r = 1; r <= rounds; r++)); do
  for i in "${!trees[@]}"; do
    t="${trees[$i]}"
    f="$logs/t${i}_r${r}.log"
    (cd "$t" && bun run "$script" "$@") > "$f" 2>&1 || echo "ab.sh: $t round $r exited $? (log: $f)" >&2
    files+=("$f")
  done
done
python3 - "$rounds" "$column" "${#trees[@]}" "${trees[@]}" "${files[@]}" <<'EOF'
import re, sys
rounds, column, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
trees, files = sys.argv[4:4 + n], sys.argv[4 + n:]
line = re.compile(r'^(.*?\S)\s+([0-9.]+) us\b')
# An indented row (a script that prints a heading, then its rows under it,
# as bench/qmv_variants.ts does) is named after its heading too, so rows of
# one name under different headings stay apart.
def rows(path):
    out, heading = [], ''
    for l in open(path, errors='replace'):
        l = l.rstrip('\n')
        if column > 0:
            f = [x.strip() for x in l.split(' | ')]
            if len(f) >= column and re.fullmatch(r'[0-9.]+', f[column - 1]):
                out.append((f[0], f[column - 1]))
            continue
        if l.strip() and not l[:1].isspace():
            heading = l.split('  (')[0].strip()
        m = line.match(l)
        if m:
            name = m.group(1).strip()
            out.append((heading + ' / ' + name if l[:1].isspace() and heading else name, m.group(2)))
    return out
runs = [dict(rows(f)) for f in files]
names = [k for k, _ in rows(files[0])]
print('row | ' + ' | '.join(f'{t} (round {r + 1})' for r in range(rounds) for t in trees))
for k in names:
    print(k + ' | ' + ' | '.join(run.get(k, '-') for run in runs))
EOF
