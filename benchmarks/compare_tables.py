"""Max |Δ| of every CSV under two folders written by two posym versions (timing columns left out):
``python benchmarks/compare_tables.py OLD_DIR NEW_DIR`` (used by gptj_path_unchanged.sh)."""
import pathlib
import sys

import numpy as np
import pandas as pd

TIMING = ("seconds", "peak_rss_mb", "run", "time_s")
a, b = map(pathlib.Path, sys.argv[1:3])
worst = 0.0
for fa in sorted(a.rglob("*.csv")):
    rel = fa.relative_to(a)
    fb = b / rel
    if not fb.exists():
        print("missing in new:", rel)
        continue
    ta, tb = pd.read_csv(fa), pd.read_csv(fb)
    ta = ta.drop(columns=[c for c in TIMING if c in ta.columns])
    tb = tb.drop(columns=[c for c in TIMING if c in tb.columns])
    if list(ta.columns) != list(tb.columns) or len(ta) != len(tb):
        print("DIFFERENT SHAPE", rel, sorted(set(ta.columns) ^ set(tb.columns)), len(ta), len(tb))
        worst = np.inf
        continue
    num = ta.select_dtypes("number").columns
    d = float(np.nanmax(np.abs(ta[num].to_numpy(float) - tb[num].to_numpy(float)))) if len(num) and len(ta) else 0.0
    same_nan = bool((ta[num].isna().to_numpy() == tb[num].isna().to_numpy()).all())
    same_text = all((ta[c].fillna("").astype(str) == tb[c].fillna("").astype(str)).all() for c in ta.columns if c not in num)
    worst = max(worst, d if same_nan and same_text else np.inf)
    print(f"{str(rel):58s} rows {len(ta):5d}  max|Δ| {d:.3g}  NaNs alike {same_nan}  text alike {same_text}")
for fb in sorted(b.rglob("*.csv")):
    if not (a / fb.relative_to(b)).exists():
        print("only in new:", fb.relative_to(b))
print(f"worst max|Δ| {worst:.3g}")
