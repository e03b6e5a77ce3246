"""The head-types study's printed summary, from its tables: the headline Spearman ρ of each detector
per prompt set, the correlation table, and the lines on pure heads and attention sinks (SPEC §7)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from posym.stats import format_p


def _fmt_corr(corr: pd.DataFrame) -> str:
    """The correlation table of one prompt set as text: ρ, its bootstrap CI and the null's p per detector."""
    t = corr.assign(ci=[f"[{lo:+.2f}, {hi:+.2f}]" for lo, hi in zip(corr["rho_lo"], corr["rho_hi"])],
                    p=[format_p(p, b, f) for p, b, f in zip(corr["p_value"], corr["n_null"], corr["p_at_floor"])])
    t = t[["detector", "heads", "n_heads", "rho", "ci", "p"]].rename(columns={"n_heads": "n"})
    return t.to_string(index=False, formatters={"rho": "{:+.2f}".format})


def headline_rho(corr: pd.DataFrame, heads: str = "informative") -> str:
    """The headline of the printed summary: Spearman ρ(detector, s_SYM − s_POS) with its 95 %
    percentile-bootstrap CI over heads, one column per prompt set (``prompt_set`` of the stacked
    correlation table), the detectors as rows, over ``heads`` (``informative``: swap mass >= the
    floor), and the number of heads per set."""
    t = corr[corr["heads"] == heads]
    sets = list(dict.fromkeys(t["prompt_set"]))
    dets = list(dict.fromkeys(t["detector"]))
    cell = {(r.prompt_set, r.detector): (f"{r.rho:+.2f} [{r.rho_lo:+.2f},{r.rho_hi:+.2f}]" if np.isfinite(r.rho_lo)
                                         else f"{r.rho:+.2f}") for r in t.itertuples()}
    table = pd.DataFrame({s: [cell.get((s, d), "") for d in dets] for s in sets}, index=dets)
    n = ", ".join(f"{s} {int(t[t['prompt_set'] == s]['n_heads'].max())}" for s in sets)
    return f"{table.to_string()}\nheads ({heads}): {n}"


def _pure_line(s: str, counts: dict[str, Any], pure_fraction: float) -> list[str]:
    """The pure heads of prompt set ``s`` (:func:`posym.heads.head_types.pure_counts`), a few lines."""
    def part(kind: str) -> str:
        k = counts[kind]
        pf = "" if k["purity_mean"] is None else \
            f": pure on {k['purity_mean']:.0%} of the prompts on average, >= {k['purity_min']:.0%} each"
        return f"  {kind} {k['heads']}{pf}"

    rule = (f"on the mean and on >= {pure_fraction:.0%} of the prompts; --pure-fraction {pure_fraction:g}"
            if pure_fraction > 0 else "on the mean over prompts; --pure-fraction 0")
    lines = [f"{s}: pure heads ({rule}):", part("positional"), part("symbolic")]
    if pure_fraction > 0:
        lines.append(f"  pure on the mean only (typed mixed): positional {counts['positional']['mean_only']}, "
                     f"symbolic {counts['symbolic']['mean_only']}")
    return lines


def _sink_line(s: str, k: dict[str, Any], sink_share: float) -> list[str]:
    """The sink heads of prompt set ``s`` (:func:`posym.heads.head_types.sink_counts`), a few lines."""
    by = k["sink_typed_pattern"]
    pat = ", ".join(f"{t.replace('_', '-')} {n}" for t, n in by.items())
    return [f"{s}: {k['sink_heads']} sink heads (first-token share >= {sink_share:g}): {k['sink_typed_sink']} "
            f"typed sink, {sum(by.values())} typed by their pattern", *([f"  by pattern: {pat}"] if pat else []),
            f"  of them {k['sink_pure_symbolic']} read pure symbolic, {k['sink_pure_positional']} pure positional"]


__all__ = ["headline_rho"]
