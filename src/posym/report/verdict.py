"""Is a number of Paper A reproduced? One verdict per row of the "paper vs posym" summary, and the
few lines at the top of the report that say what reproduced and what did not (SPEC §5).

The tolerances are ours: Paper A publishes no error bars, and its figures are digitised to ±0.01
(SPEC §5). A verdict is one of :data:`VERDICTS`; a row without a comparable paper number (a point
outside the preset's grid) has none. A row whose reference is a theorem's bound (Fig. 5A plots
Theorem 3.2's bounds, not measurements) is judged against the bound — :data:`WITHIN_BOUND` or
:data:`VIOLATES_BOUND` — and counted apart from what reproduced.
"""

from __future__ import annotations

import pandas as pd

from posym.report.format import is_finite

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_COMPARABLE = "not comparable"
NOT_EVIDENCE = "not evidence"
WITHIN_BOUND = "within the bound"
VIOLATES_BOUND = "violates the bound"
#: Verdicts of a row whose reference is a theorem's bound, not a number Paper A measured.
BOUND_VERDICTS = (WITHIN_BOUND, VIOLATES_BOUND)
VERDICTS = (REPRODUCED, NOT_REPRODUCED, NOT_COMPARABLE, NOT_EVIDENCE, *BOUND_VERDICTS)

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
    if not (is_finite(value) and is_finite(paper)):
        return ""
    bound = tol * abs(paper) if relative else tol
    return REPRODUCED if abs(value - paper) <= bound + 1e-12 else NOT_REPRODUCED


def upper_bound(value: float, bound: float) -> str:
    """:data:`WITHIN_BOUND` when ``value <= bound`` (a theorem's upper bound, to 1e-9), else
    :data:`VIOLATES_BOUND`; "" when either is missing. Not a reproduction verdict: a bound is no
    measurement of Paper A's."""
    if not (is_finite(value) and is_finite(bound)):
        return ""
    return WITHIN_BOUND if float(value) <= float(bound) + 1e-9 else VIOLATES_BOUND


def freq_id(value: float, paper: float) -> str:
    """A weighted frequency ID of Table 1: within ±:data:`TOL_FREQ_ID` or ±15 %, the larger."""
    return within(value, paper, max(TOL_FREQ_ID, 0.15 * abs(paper)) if is_finite(paper) else 0.0)


def pure_heads(value: float, n_heads: int, paper: float, paper_heads: int) -> tuple[str, str]:
    """``(verdict, note)`` of a pure-head count: equal within one head for a model of the paper's size,
    else compared as fractions of all heads (within :data:`TOL_PURE_FRACTION`)."""
    if not is_finite(value):
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
    if not is_finite(mean):
        return "", ""
    known = chance is not None and is_finite(chance)
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
    (per section, with the largest difference of each unit), what did not (each with its size), the
    rows judged against a theorem's bound (apart: a bound is no measurement of Paper A), and how many
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
            parts.append(f"{section} {len(good)}/{len(g)}{_largest_differences(good)}")
        lines.append(f"Reproduced: {len(ok)} of the {len(judged)} numbers that can be compared with Paper A — "
                     + "; ".join(parts) + ".")
    bad = v[v["verdict"] == NOT_REPRODUCED]
    if len(bad):
        items = [_item(r) for _, r in bad.iterrows()]
        more = f"; and {len(items) - max_items} more (see the summary table)" if len(items) > max_items else ""
        lines.append(f"Not reproduced: {len(bad)} — " + "; ".join(items[:max_items]) + more + ".")
    bounds = v[v["verdict"].isin(BOUND_VERDICTS)]
    if len(bounds):
        by = "; ".join(f"{s} {(x['verdict'] == WITHIN_BOUND).sum()}/{len(x)} within the bound"
                       for s, x in bounds.groupby("section", sort=False))
        over = [_bound_item(r) for _, r in bounds[bounds["verdict"] == VIOLATES_BOUND].iterrows()]
        lines.append(f"Theorem bounds (a bound is not a measurement of Paper A: not counted above): {by}"
                     + (f"; violates the bound: {'; '.join(over)}" if over else "") + ".")
    for verdict, why in ((NOT_COMPARABLE, "not comparable with Paper A"),
                         (NOT_EVIDENCE, "not evidence either way")):
        g = v[v["verdict"] == verdict]
        if len(g):
            by = "; ".join(f"{s} {len(x)}" for s, x in g.groupby("section", sort=False))
            reasons = _reasons(g)
            lines.append(f"{len(g)} row(s) {why} ({by}){': ' + reasons if reasons else ''}.")
    missing = v[(v["verdict"] == "") & ~v["posym_mean"].map(is_finite)]
    if len(missing):
        lines.append(f"{len(missing)} number(s) of Paper A not measured by this reproduction (outside its grid or "
                     "not reached).")
    return lines


def unit(quantity: str) -> str:
    """The unit of a "paper vs posym" quantity (what its difference is counted in): accuracy, steps,
    tokens, heads, frequency ID, Δ, score; "" when not known."""
    q = str(quantity)
    for prefixes, name in ((("first step", "median step"), "steps"), (("largest added length",), "tokens"),
                           (("Δ",), "Δ"), (("min(s_POS",), "score")):
        if q.startswith(prefixes):
            return name
    if " heads (of " in f" {q}":
        return "heads"
    if "frequency ID" in q:
        return "frequency ID"
    if "accuracy" in q or q.startswith(("val acc", "test acc")):
        return "accuracy"
    return ""


def _largest_differences(rows: pd.DataFrame) -> str:
    """", largest |difference| 0.05 (accuracy), 200 (tokens)": one largest |difference| per unit —
    never one over rows counted in different units."""
    if not len(rows):
        return ""
    d = rows.assign(_abs=rows["difference"].abs(), _unit=rows["quantity"].map(unit)).dropna(subset=["_abs"])
    sizes = [f"{_num(g['_abs'].max())}{f' ({u})' if u else ''}" for u, g in d.groupby("_unit", sort=False)]
    return f", largest |difference| {', '.join(sizes)}" if sizes else ""


def _item(r: pd.Series) -> str:
    diff = f" ({'+' if r['difference'] > 0 else ''}{_num(r['difference'])})" if is_finite(r["difference"]) else ""
    return f"{r['section']}, {r['task']}, {r['quantity']}: {_num(r['posym_mean'])} vs paper {r['paper_text']}{diff}"


def _bound_item(r: pd.Series) -> str:
    """"retrieval, Δ(n = 2): 0.2929 > bound 0.2891 (+0.0038)" (four digits: Δ lies close to its bound)."""
    return (f"{r['task']}, {r['quantity']}: {float(r['posym_mean']):.4g} > bound {float(r['paper']):.4g} "
            f"({float(r['posym_mean']) - float(r['paper']):+.2g})")


def _reasons(g: pd.DataFrame) -> str:
    notes = [str(n) for n in g["note"] if isinstance(n, str) and n]
    short = dict.fromkeys(n.split(" — ")[-1].split("; ")[0] if " — " in n else n.split("; ")[0] for n in notes)
    return "; ".join(list(short)[:3])


def _num(x) -> str:
    if not is_finite(x):
        return "—"
    x = float(x)
    if x.is_integer():
        return f"{x:,.0f}"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}" if abs(x) >= 1 else f"{x:.2g}" if abs(x) < 0.01 else f"{x:.2f}"


__all__ = ["BOUND_VERDICTS", "NOT_COMPARABLE", "NOT_EVIDENCE", "NOT_REPRODUCED", "REPRODUCED", "TOLERANCES_TEXT",
           "VERDICTS", "VIOLATES_BOUND", "WITHIN_BOUND", "freq_id", "llm_bound", "pure_heads", "unit", "upper_bound",
           "verdict_lines", "within"]
