"""Issue 37, a recipe over posym's API for models with one head per layer (Paper A's GPT-J): a layer-matched
random control cannot exist there (no other head in the layer), so each typed head's frequency-dose effect
is compared with the same dose in every other head of the model (a count-matched control across layers).

    python benchmarks/one_head_doses.py RUN_DIR READOUT_CSV TASK OUT_CSV [--n 200]

Per typed head (pure positional / symbolic of the readout at γ = 0.1) and per direction (high: the k
fastest frequency IDs dropped, low: the k slowest), k over 1, 2, 4, …, half the IDs: the paired accuracy
drop on the same n test prompts at +0 (posym.stats.paired_bootstrap), the same drop in each other head,
and the matched-control p (posym.stats.control_p_value, floor 1/(1 + #other heads)); BH over all cells."""
import argparse

import numpy as np
import pandas as pd

from posym.heads.selection import typed_heads
from posym.interventions import intervened
from posym.lengthgen.outcomes import task_outcomes
from posym.model.adapters import get_adapter
from posym.runs.resolve import resolve_model
from posym.stats import benjamini_hochberg, control_p_value, paired_bootstrap

ap = argparse.ArgumentParser()
ap.add_argument("run"), ap.add_argument("readout"), ap.add_argument("task"), ap.add_argument("out")
ap.add_argument("--n", type=int, default=200)
a = ap.parse_args()
model = resolve_model(a.run, a.task).model
ad = get_adapter(model)
n_ids = ad.rotary_dim // 2
readout = pd.read_csv(a.readout)
heads = [(int(l), int(h)) for l, h in zip(readout["layer"], readout["head"])]
doses = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= n_ids // 2]


def outcome(spec):
    change = (lambda: intervened(model, spec)) if spec else None
    return task_outcomes(model, a.task, 0, a.n, 0, intervene=change)["correct"].to_numpy(float)


base = outcome(None)
cache = {}
rows = []
for kind in ("positional", "symbolic"):
    for head in typed_heads(readout, kind):
        for direction in ("high", "low"):
            for k in doses:
                drop = set(range(1, k + 1)) if direction == "high" else set(range(n_ids - k + 1, n_ids + 1))
                keep = "+".join(str(i) for i in range(1, n_ids + 1) if i not in drop)
                eff = {}
                for hh in heads:
                    spec = f"freq-mask:keep={keep},heads=L{hh[0]}H{hh[1]}"
                    if spec not in cache:
                        cache[spec] = outcome(spec)
                    eff[hh] = cache[spec]
                d, lo, hi = paired_bootstrap(base, eff[head], n_boot=1000, seed=0)
                null = [float((base - eff[o]).mean()) for o in heads if o != head]
                rows.append(dict(task=a.task, set=kind, head=f"L{head[0]}H{head[1]}", direction=direction, k=k,
                                 n=a.n, acc_none=base.mean(), acc_set=eff[head].mean(), effect=d, ci_lo=lo, ci_hi=hi,
                                 controls_mean=float(np.mean(null)), controls_max=float(np.max(null)),
                                 n_controls=len(null),
                                 p=control_p_value(d, null)))
t = pd.DataFrame(rows)
if len(t):
    t["p_bh"] = benjamini_hochberg(t["p"].to_numpy())
t.to_csv(a.out, index=False)
print(t.round(3).to_string(index=False))
