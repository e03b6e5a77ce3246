"""Is a number of Paper A reproduced? One verdict per row of the "paper vs posym" summary, and the
few lines at the top of the report that say what reproduced and what did not (SPEC §5).

The tolerances are ours: Paper A publishes no error bars, and its figures are digitised to ±0.01
(SPEC §5). A verdict is one of :data:`VERDICTS`; a row without a comparable paper number (a point
outside the preset's grid) has none.
"""

from __future__ import annotations

import math
import pandas as pd

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_COMPARABLE = "not comparable"
NOT_EVIDENCE = "not evidence"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, NOT_COMPARABLE, NOT_EVIDENCE)

#: Largest |posym − paper| that counts as reproduced, per kind of number.
TOL_ACCURACY = 0.10  # an accuracy (fraction)
TOL_STEP = 0.25  # a step or a length, relative to the paper's
TOL_DISCREPANCY = 0.01  # Δ(n) of Fig. 5A (digitised ±0.01)
TOL_FREQ_ID = 2.0  # a weighted frequency ID (or 15 % of it, the larger)
TOL_PURE_FRACTION = 0.15  # pure heads as a fraction of all heads, for a model of another size
INITIAL_SCORE = 0.9  # min(s_POS, s_SYM) at initialisation "≈ 1"
#: An LLM accuracy within this of the chance level counts as "at chance".
AT_CHANCE = 0.05

TOLERANCES_TEXT = (f"verdict tolerances (ours): accuracy ±{TOL_ACCURACY:g}, steps and lengths ±{TOL_STEP:.0%}, "
                   f"Δ(n) ±{TOL_DISCREPANCY:g}, frequency ID ±{TOL_FREQ_ID:g} (or ±15 %), "
                   f"pure-head fraction ±{TOL_PURE_FRACTION:g} when the models differ in size; an LLM within "
                   f"{AT_CHANCE:g} of chance is not evidence for or against the paper's bound.")


def within(value: float, paper: float, tol: float, relative: bool = False) -> str:
    """:data:`REPRODUCED` when ``|value − paper| <= tol`` (``relative``: ``tol × |paper|``), else
    :data:`NOT_REPRODUCED`; "" when either is missing."""
    if not (_finite(value) and _finite(paper)):
        return ""
    bound = tol * abs(paper) if relative else tol
    return REPRODUCED if abs(value - paper) <= bound + 1e-12 else NOT_REPRODUCED


def freq_id(value: float, paper: float) -> str:
    """A weighted frequency ID of Table 1: within ±:data:`TOL_FREQ_ID` or ±15 %, the larger."""
    return within(value, paper, max(TOL_FREQ_ID, 0.15 * abs(paper)) if _finite(paper) else 0.0)


def pure_heads(value: float, n_heads: int, paper: float, paper_heads: int) -> tuple[str, str]:
    """``(verdict, note)`` of a pure-head count: equal within one head for a model of the paper's size,
    else compared as fractions of all heads (within :data:`TOL_PURE_FRACTION`)."""
    if not _finite(value):
        return "", ""
    if n_heads == paper_heads:
        return within(value, paper, 1.0), ""
    f, fp = value / n_heads, paper / paper_heads
    return (REPRODUCED if abs(f - fp) <= TOL_PURE_FRACTION else NOT_REPRODUCED,
            f"counts of different models; as fractions: {value:g}/{n_heads} = {f:.2f} vs {paper:g}/{paper_heads} = "
            f"{fp:.2f}")


def llm_bound(mean: float, op: str, bound: float, chance: float | None) -> tuple[str, str]:
    """``(verdict, note)`` of an LLM accuracy against one of Paper A's Table 3 bounds.

    An upper bound (``<``: the paper's models fail) met by a model at chance — or with an unknown
    chance level — is not evidence; a model above chance that stays below it, or any model above a
    lower bound (``>``), is compared with the bound."""
    if not _finite(mean):
        return "", ""
    known = chance is not None and _finite(chance)
    at_chance = known and mean <= chance + AT_CHANCE
    meets = mean < bound if op == "<" else mean > bound
    chance_s = f"chance {chance:.2f}" if known else "chance level unknown"
    if op == "<" and meets and (at_chance or not known):
        what = "at chance" if at_chance else "below the bound"
        return NOT_EVIDENCE, f"{what} ({mean:.2f} vs {chance_s}): not evidence for the paper's bound"
    if meets:
        return REPRODUCED, f"meets the paper's bound ({mean:.2f} {op} {bound:g}; {chance_s})"
    return NOT_REPRODUCED, (f"does not meet the paper's bound ({mean:.2f} vs {op} {bound:g}; {chance_s}"
                            f"{', at chance' if at_chance else ''})")


def verdict_lines(pv: pd.DataFrame, max_items: int = 6) -> list[str]:
    """The short verdict at the top of the report, from the rows of ``paper_vs_posym`` (columns
    section, task, quantity, paper_text, posym_mean, difference, verdict, note): what reproduced
    (per section, with the largest difference), what did not (each with its size), and how many
    rows cannot be compared or are not evidence."""
    if pv is None or not len(pv) or "verdict" not in pv:
        return []
    v = pv.fillna({"verdict": ""})
    judged = v[v["verdict"].isin([REPRODUCED, NOT_REPRODUCED])]
    lines = []
    ok = v[v["verdict"] == REPRODUCED]
    if len(judged):
        parts = []
        for section, g in judged.groupby("section", sort=False):
            good = g[g["verdict"] == REPRODUCED]
            diffs = good["difference"].abs().dropna()
            size = f", largest |difference| {_num(diffs.max())}" if len(diffs) else ""
            parts.append(f"{section} {len(good)}/{len(g)}{size}")
        lines.append(f"Reproduced: {len(ok)} of the {len(judged)} numbers that can be compared with Paper A — "
                     + "; ".join(parts) + ".")
    bad = v[v["verdict"] == NOT_REPRODUCED]
    if len(bad):
        items = [_item(r) for _, r in bad.iterrows()]
        more = f"; and {len(items) - max_items} more (see the summary table)" if len(items) > max_items else ""
        lines.append(f"Not reproduced: {len(bad)} — " + "; ".join(items[:max_items]) + more + ".")
    for verdict, why in ((NOT_COMPARABLE, "not comparable with Paper A"),
                         (NOT_EVIDENCE, "not evidence either way")):
        g = v[v["verdict"] == verdict]
        if len(g):
            by = "; ".join(f"{s} {len(x)}" for s, x in g.groupby("section", sort=False))
            reasons = _reasons(g)
            lines.append(f"{len(g)} row(s) {why} ({by}){': ' + reasons if reasons else ''}.")
    missing = v[(v["verdict"] == "") & ~v["posym_mean"].map(_finite)]
    if len(missing):
        lines.append(f"{len(missing)} number(s) of Paper A not measured by this reproduction (outside its grid or "
                     "not reached).")
    return lines


def _item(r: pd.Series) -> str:
    diff = f" ({'+' if r['difference'] > 0 else ''}{_num(r['difference'])})" if _finite(r["difference"]) else ""
    return f"{r['section']}, {r['task']}, {r['quantity']}: {_num(r['posym_mean'])} vs paper {r['paper_text']}{diff}"


def _reasons(g: pd.DataFrame) -> str:
    notes = [str(n) for n in g["note"] if isinstance(n, str) and n]
    short = dict.fromkeys(n.split(" — ")[-1].split("; ")[0] if " — " in n else n.split("; ")[0] for n in notes)
    return "; ".join(list(short)[:3])


def _num(x) -> str:
    if not _finite(x):
        return "—"
    x = float(x)
    if x.is_integer():
        return f"{x:,.0f}"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}" if abs(x) >= 1 else f"{x:.2g}" if abs(x) < 0.01 else f"{x:.2f}"


def _finite(x) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


__all__ = ["NOT_COMPARABLE", "NOT_EVIDENCE", "NOT_REPRODUCED", "REPRODUCED", "TOLERANCES_TEXT", "VERDICTS",
           "freq_id", "llm_bound", "pure_heads", "verdict_lines", "within"]
