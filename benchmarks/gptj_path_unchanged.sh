#!/usr/bin/env bash
# Issue 35, point 5: every analysis verb on a posym GPT-J run gives the same tables through the general
# model path (any family) as through the GPT-J-only path of an older posym.
#   benchmarks/gptj_path_unchanged.sh OLD_SRC_TREE [WORK_DIR]
# OLD_SRC_TREE: a checkout of the older posym (e.g. `git worktree add /tmp/old 04e6e27`); this checkout is
# the new one. Trains a small GPT-J with the OLD code and with this one (3 layers, 300 steps, ≈ 1 CPU-min
# each; metrics, head scores and weights compared), runs lengthgen
# (with two interventions), freqs, ablate, flow, theory discrepancy --run, interventions, scores and
# select with each code, and prints max |Δ| of every CSV (timing columns left out).
set -euo pipefail
OLD=$(cd "$1" && pwd); NEW=$(cd "$(dirname "$0")/.." && pwd); W=${2:-runs/gptj-path}
mkdir -p "$W"
verbs() {  # SRC OUT
  local P="env PYTHONPATH=$1/src OMP_NUM_THREADS=1 python -m posym.cli" O=$2 R=$W/run
  mkdir -p "$O"
  { $P lengthgen $R --grid 0,10,50,200 --n 40 --out $O/lengthgen.csv --intervene temperature:beta=0.5 --intervene ntk:kappa=2
    $P freqs $R --n 32 --out $O/freqs
    $P ablate $R --n 64 --out $O/ablate
    $P flow $R --out $O/flow
    $P theory discrepancy --run $R --grid 0,50,300 --n 8 --out $O/theory --n-max 30
    $P interventions $R --out $O/iv --grid 0,50 --n 24 --heads-n 4 --heads-lengths 0,50 \
       --intervene temperature:beta=0.5 --intervene freq-mask:keep=1+2+3+4 --quiet
    $P scores $R --out $O/scores.csv
    $P select $R --final-model last --out $O/select; } > "$O/log" 2>&1
}
[ -d "$W/run" ] || env PYTHONPATH="$OLD/src" python -m posym.cli train --task number --preset quick --steps 300 \
  --set n_layer=3 --threads 1 --quiet --out "$W/run"
[ -d "$W/run-new" ] || env PYTHONPATH="$NEW/src" python -m posym.cli train --task number --preset quick --steps 300 \
  --set n_layer=3 --threads 1 --quiet --out "$W/run-new"
verbs "$OLD" "$W/old" & verbs "$NEW" "$W/new"; wait
echo "training: the old code's run vs this code's (metrics, head scores; then the final weights)"
python "$(dirname "$0")/compare_tables.py" "$W/run" "$W/run-new"
python -c "import sys, torch; from safetensors.torch import load_file as f
a, b = (f(sys.argv[i] + '/checkpoints/step-000300/model.safetensors') for i in (1, 2))
print('final weights bit-identical:', a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a))" "$W/run" "$W/run-new"
echo "every analysis verb: the old code vs this code on the same run"
python "$(dirname "$0")/compare_tables.py" "$W/old" "$W/new"
