"""A reproduction's analysis stages of one run, before vs after issue 39 point 3 (``docs/benchmarks.md``,
"Analyses in one process").

*before*: ``ablate`` (the per-head loop, ``method="loop"``), ``freqs`` and ``lengthgen``, each in a fresh
process (imports, model load, data, forwards, tables, figures: what one stage costs a worker that has not
run one yet). *after*: the three in one process, one after another (the CUDA reproduction's analysis
worker), ablate batched. Wall and CPU seconds (this process's children: the load-robust figure on a shared
machine) per stage and in all, and whether every table the stages wrote is the same text before and after.

    python benchmarks/analyses.py RUN_DIR [--ablation-n 2000] [--freqs-n 512] [--grid 0,10,...] [--lengthgen-n 200]
        [--device cpu] [--out DIR] [--json FILE]

Defaults: the paper preset's reproduction settings (``posym.presets``), lengthgen's grid up to +500 (the
paper grid to +5,000 is ``--grid paper``: hours on one CPU core).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

STAGES = ("ablate", "freqs", "lengthgen")
CPU_GRID = "0,10,20,30,40,50,60,70,80,90,100,200,300,400,500"


def _stage(name: str, run: str, out: Path, a: argparse.Namespace, method: str) -> None:
    """One stage as ``posym reproduce`` calls it (its settings; tables and figures under ``out``)."""
    if name == "ablate":
        from posym.verbs.ablate import ablate

        ablate(run, n=a.ablation_n, seed=0, out=out, force=True, progress=False, method=method)
    elif name == "freqs":
        from posym.verbs.freqs import freqs

        freqs(run, n=a.freqs_n, seed=0, scores=True, out=out, force=True, progress=False)
    else:
        from posym.verbs.lengthgen import lengthgen

        lengthgen(run, grid=a.grid, n=a.lengthgen_n, seeds=1, device=a.device, out=out / "lengthgen.csv", force=True,
                  progress=False)


def _child(a: argparse.Namespace) -> None:
    """Run ``--child`` stages in this process; print one JSON line of per-stage wall seconds."""
    t0 = time.perf_counter()
    import torch  # noqa: F401  (the import is part of a stage's start-up; timed as "start")

    import posym.verbs  # noqa: F401

    times = {"start": time.perf_counter() - t0}
    for name in a.child.split(","):
        t = time.perf_counter()
        _stage(name, a.run, Path(a.out), a, a.method)
        times[name] = time.perf_counter() - t
    print("TIMES " + json.dumps(times), flush=True)


def _spawn(a: argparse.Namespace, stages: str, method: str, out: Path) -> dict:
    """``stages`` in one fresh process: wall and CPU seconds measured here, per-stage wall reported by it."""
    cmd = [sys.executable, __file__, a.run, "--child", stages, "--method", method, "--out", str(out),
           "--ablation-n", str(a.ablation_n), "--freqs-n", str(a.freqs_n), "--grid", a.grid,
           "--lengthgen-n", str(a.lengthgen_n), "--device", a.device]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode:
        sys.exit(f"stage(s) {stages} failed:\n{res.stderr[-3000:]}")
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("TIMES "))
    return {"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "stages": json.loads(line[6:])}


#: Columns that measure the run itself (lengthgen's per-point seconds and peak memory), left out of the comparison.
MEASURED = ("seconds", "peak_rss_mb")


def _tables(root: Path) -> dict[str, str]:
    """Every CSV under ``root`` as text, without the :data:`MEASURED` columns."""
    import pandas as pd

    return {str(p.relative_to(root)): pd.read_csv(p).drop(columns=list(MEASURED), errors="ignore").to_csv(index=False)
            for p in sorted(root.rglob("*.csv"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run")
    ap.add_argument("--ablation-n", type=int, default=2000)
    ap.add_argument("--freqs-n", type=int, default=512)
    ap.add_argument("--grid", default=CPU_GRID)
    ap.add_argument("--lengthgen-n", type=int, default=200)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="/tmp/posym-bench-analyses")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--method", default="batched", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return _child(a)
    from machine import machine_line

    out = Path(a.out)
    before = {s: _spawn(a, s, "loop", out / "before") for s in STAGES}
    after = _spawn(a, ",".join(STAGES), "batched", out / "after")
    tb, ta = _tables(out / "before"), _tables(out / "after")
    same = sorted(tb) == sorted(ta) and all(tb[k] == ta[k] for k in tb)
    print(machine_line())
    print(f"\nrun {a.run}; ablation n={a.ablation_n}, freqs n={a.freqs_n}, lengthgen n={a.lengthgen_n} grid {a.grid}; "
          f"device {a.device}; torch threads {os.environ.get('OMP_NUM_THREADS', 'default')}\n")
    print("| stage | before: own process, wall s | after: one process, wall s |")
    print("|---|---:|---:|")
    print(f"| start-up (imports) | {sum(b['stages']['start'] for b in before.values()):.1f} (3 ×) | "
          f"{after['stages']['start']:.1f} |")
    for s in STAGES:
        print(f"| {s}{' (loop → batched)' if s == 'ablate' else ''} | {before[s]['stages'][s]:.1f} | "
              f"{after['stages'][s]:.1f} |")
    wall_b, cpu_b = sum(b["wall"] for b in before.values()), sum(b["cpu"] for b in before.values())
    print(f"| **all, process wall** | **{wall_b:.1f}** | **{after['wall']:.1f}** |")
    print(f"| all, CPU seconds | {cpu_b:.1f} | {after['cpu']:.1f} |")
    print(f"\n{len(tb)} tables; identical text before and after (lengthgen's {', '.join(MEASURED)} aside): {same}")
    if a.json:
        Path(a.json).write_text(json.dumps({"before": before, "after": after, "tables_identical": same}, indent=2))
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
