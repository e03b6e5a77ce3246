"""The tables and figure of docs/beyond_gptj.md from the study's folders (issue 35, point 6).

    python docs/figures/beyond_gptj.py runs/study        # prints the Markdown tables, writes the figures

``runs/study/<arch>/`` are ``posym reproduce --preset quick --no-llm --set train.arch=<arch>`` folders,
each run's ``lengthgen_long.csv`` the long grid (``posym lengthgen RUN --grid 0,100,300,1000,2000,5000
--n 50 --out RUN/lengthgen_long.csv``; ``lengthgen_long_n100.csv`` where it was measured at n = 100),
``runs/study/iv-<arch>-<task>/`` the interventions studies (docs/beyond_gptj.md, "Commands").
GPT-J's points are the quick-preset ``rope`` rows of docs/interventions.md ("Training-time encodings":
3 seeds, quick grid, n = 60), drawn as reference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from posym.report.aggregate import curve_reach  # noqa: E402
from posym.runs import layout  # noqa: E402

ARCHS = ("llama", "qwen3")
TASKS = ("number", "letter")
#: GPT-J quick preset, rope, 3 seeds (docs/interventions.md, "Training-time encodings"): accuracy at +k.
GPTJ = {"number": {0: 1.00, 50: 0.38, 100: 0.37, 300: 0.20, 1000: 0.01},
        "letter": {0: 1.00, 50: 0.99, 100: 0.99, 300: 0.97, 1000: 0.76}}


def ms(values, digits=2) -> str:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], float)
    if not len(v):
        return "—"
    if len(v) == 1:
        return f"{v[0]:.{digits}f}"
    return f"{v.mean():.{digits}f} ± {v.std(ddof=1):.{digits}f}"


def milestone(metrics: pd.DataFrame, hop: int) -> float:
    val = metrics[metrics["split"] == "val"].sort_values("step")
    hit = val[val[f"acc_hop{hop}"] >= 0.9]
    return float(hit["step"].iloc[0]) if len(hit) else np.nan


def untouched(path: Path) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    t = pd.read_csv(path)
    return t[t["intervention"] == "none"] if "intervention" in t.columns else t


def long_table(run: Path) -> pd.DataFrame | None:
    """The run's long grid: ``lengthgen_long.csv``, else ``lengthgen_long_n100.csv`` (untouched rows)."""
    for name in ("lengthgen_long.csv", "lengthgen_long_n100.csv"):
        t = untouched(run / name)
        if t is not None and len(t):
            return t
    return None


def reach(t: pd.DataFrame | None) -> float:
    if t is None or t.empty:
        return np.nan
    s = t.groupby("extra_tokens", as_index=False)["acc"].mean().rename(columns={"acc": "acc_mean"})
    r = curve_reach(s, 0.9)
    return -1.0 if r is None or not np.isfinite(r) else float(r)


def reaches(values) -> str:
    """Reach per seed ("never" below 0.9 at +0) and the mean ± sd counting "never" as −1."""
    v = [x for x in values if np.isfinite(x)]
    if not v:
        return "—"
    each = ", ".join("never" if x < 0 else f"+{x:.0f}" for x in v)
    return each if len(v) == 1 else f"{each} ({ms(v, 0)})"


def runs_of(root: Path, arch: str, task: str) -> dict[int, Path]:
    return layout.find_runs(root / arch).get(task, {})


def layer_kinds(run: Path) -> str:
    """Pure heads by layer at the end of training (γ = 0.1): one letter per layer, P / S / · (mixed)."""
    p = run / "purity_gamma0.1.csv"
    if not p.is_file():
        return "—"
    t = pd.read_csv(p).sort_values(["layer", "head"])
    return "".join({"positional": "P", "symbolic": "S"}.get(k, "·") for k in t["kind"])


def main(root: Path) -> None:
    rows = []
    for arch in ARCHS:
        for task in TASKS:
            runs = runs_of(root, arch, task)
            if not runs:
                continue
            res = {s: layout.read_json(r / layout.RESULTS) for s, r in runs.items()}
            met = {s: pd.read_csv(r / layout.METRICS) for s, r in runs.items()}
            pur = {s: pd.read_csv(r / "purity_gamma0.1.csv") for s, r in runs.items() if (r / "purity_gamma0.1.csv").is_file()}
            frq = {s: pd.read_csv(r / layout.FREQ_TABLE) for s, r in runs.items() if (r / layout.FREQ_TABLE).is_file()}
            quick = {s: untouched(r / layout.LENGTHGEN) for s, r in runs.items()}
            long = {s: long_table(r) for s, r in runs.items()}
            row = {"arch": arch, "task": task, "seeds": ", ".join(map(str, runs)),
                   "test accuracy": ms([r["test"]["acc"] for r in res.values()], 3)}
            for h in (1, 4):
                row[f"first step hop {h} ≥ 0.9"] = ms([milestone(m, h) for m in met.values()], 0)
            for kind in ("positional", "symbolic"):
                row[f"pure {kind} (of 8)"] = ms([float((p["kind"] == kind).sum()) for p in pur.values()], 1)
            row["pure heads by layer 0→7, per seed"] = " / ".join(layer_kinds(r) for r in runs.values())
            ids = pd.concat(frq.values())["dominant_id"] if frq else pd.Series(dtype=float)
            row["dominant frequency IDs (median, range)"] = (f"{ids.median():.0f} ({ids.min():.0f}–{ids.max():.0f})"
                                                            if len(ids) else "—")
            row["reach ≥ 0.9 per seed, quick grid (n = 60)"] = reaches([reach(t) for t in quick.values()])
            for e in (0, 100, 300, 1000):
                row[f"acc +{e:,}, quick grid (n = 60)"] = ms([float(t[t["extra_tokens"] == e]["acc"].mean())
                                                             if t is not None and (t["extra_tokens"] == e).any() else np.nan
                                                             for t in quick.values()])
            for e in (0, 1000, 2000, 5000):
                row[f"acc +{e:,} (long grid)"] = ms([float(t[t["extra_tokens"] == e]["acc"].mean())
                                                   if t is not None and (t["extra_tokens"] == e).any() else np.nan
                                                   for t in long.values()])
            rows.append(row)
    table = pd.DataFrame(rows)
    if len(table):
        t = table.set_index(["arch", "task"]).T
        print("| quantity | " + " | ".join(f"{a} {k}" for a, k in t.columns) + " |")
        print("|---|" + "---|" * len(t.columns))
        for q, r in t.iterrows():
            print(f"| {q} | " + " | ".join(str(x) for x in r) + " |")
    print()
    for arch in ARCHS:
        for task in TASKS:
            p = root / f"iv-{arch}-{task}" / layout.INTERVENTIONS
            if p.is_file():
                print(f"interventions, {arch} {task}: {root / f'iv-{arch}-{task}' / layout.INTERVENTIONS_MD}")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    colors = {"llama": "tab:blue", "qwen3": "tab:orange"}
    for ax, task in zip(axes, TASKS):
        g = GPTJ[task]
        ax.plot(np.array(list(g)) + 1, list(g.values()), "k--o", ms=4, label="GPT-J (3 seeds, n = 60; quick grid)")
        for arch in ARCHS:
            for name, style in ((layout.LENGTHGEN, "-o"), ("lengthgen_long", ":s")):
                tables = [long_table(r) if name == "lengthgen_long" else untouched(r / name)
                          for r in runs_of(root, arch, task).values()]
                tables = [t for t in tables if t is not None and len(t)]
                if not tables:
                    continue
                m = pd.concat([t.groupby("extra_tokens")["acc"].mean() for t in tables], axis=1)
                mean, sd = m.mean(axis=1), m.std(axis=1, ddof=1).fillna(0)
                x = m.index.to_numpy() + 1
                what = "quick grid" if name == layout.LENGTHGEN else f"to +{int(m.index.max()):,}"
                n = "/".join(str(int(v)) for v in sorted({int(v) for t in tables for v in t["n"].unique()}))
                ax.plot(x, mean, style, color=colors[arch], ms=3.5,
                        label=f"{arch}, {what} ({m.shape[1]} seed{'s' * (m.shape[1] > 1)}, n = {n})")
                if name == layout.LENGTHGEN:
                    ax.fill_between(x, mean - sd, mean + sd, color=colors[arch], alpha=0.15, lw=0)
        ax.set_xscale("log")
        ax.set_xticks([1, 11, 101, 301, 1001, 2001, 5001], ["0", "10", "100", "300", "1k", "2k", "5k"])
        ax.set_title(f"{task} task")
        ax.set_xlabel("added target-window tokens")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (untouched model)")
    axes[0].set_ylim(-0.02, 1.02)
    seen: dict[str, object] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=3, frameon=False, fontsize=8.5)
    fig.suptitle("Fig. 5B beyond GPT-J: quick preset, untouched models, mean over seeds (band: ± sd, quick grid)",
                 fontsize=10.5)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    out = Path(__file__).parent / "fig5b_beyond_gptj.png"
    fig.savefig(out, dpi=130)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/study"))
