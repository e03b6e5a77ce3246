"""The self-contained HTML report of a reproduction directory.

:func:`write_report` builds ``DIR/report.html`` from saved tables and figures only (no model is run):
every figure and table of Paper A that ``posym reproduce`` reproduces, each beside the paper's
number (:mod:`posym.report.paper`, :mod:`posym.report.aggregate`), a summary table "paper vs
posym" with the difference, the run configurations and the software versions. Figures are embedded
as base64 PNG ``data:`` URIs and the CSS is inline, so the file has no external resource and can be
mailed or archived alone.

:mod:`posym.report.render` renders it in headless Chromium.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from posym.errors import PosymError
from posym.files import write_text_atomic
from posym.reading import HOW_TO_READ
from posym.report import paper
from posym.report.aggregate import PAPER_DISCREPANCY, PAPER_HEADS, aggregate, paper_vs_posym, run_arch, seeds_text
from posym.report.format import fmt_ms, fmt_num, is_finite
from posym.report.verdict import (NOT_REPRODUCED, REPRODUCED, TOLERANCES_TEXT, VIOLATES_BOUND, WITHIN_BOUND,
                                  verdict_lines)
from posym.runs import layout
from posym.runs.layout import find_runs, stage_table
from posym.runs.provenance import versions

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;margin:0;color:#222;
background:#fff;line-height:1.45}
main{max-width:1180px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:1.7em;margin:.2em 0 .1em}h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2.2em}
h3{margin-top:1.6em}
.sub{color:#555;margin:0 0 1em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.88em}
th,td{border:1px solid #d4d4d4;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.good td.diff{color:#1a7f37}tr.bad td.diff{color:#b3261e}
figure{margin:.8em 0 1.4em}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.85em;color:#555}
.grid{display:flex;flex-wrap:wrap;gap:12px}.grid figure{flex:1 1 360px;max-width:560px}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:6px 12px;margin:.8em 0}
.missing{background:#fdecea;border-left:4px solid #d93025;padding:6px 12px;margin:.8em 0}
pre{background:#f7f7f7;border:1px solid #e4e4e4;padding:8px;overflow-x:auto;font-size:.8em}
details{margin:.4em 0}summary{cursor:pointer;color:#0b57d0}
nav ol{columns:2;font-size:.92em}
.verdict{background:#eef4fb;border-left:4px solid #0b57d0;padding:6px 14px;margin:1em 0}
.verdict ul{margin:.3em 0;padding-left:1.2em}.verdict li{margin:.25em 0}
.howto{background:#f6f8f6;border-left:4px solid #1a7f37;padding:6px 14px;margin:.8em 0;font-size:.92em}
.wide figure{margin:.6em 0 1.2em}
"""


# ------------------------------------------------------------------------------------------------
# the page kit: what every posym HTML page is made of (the report here, the studies' pages in
# posym.studies) — one stylesheet, escaped text, tables, embedded figures, notes
# ------------------------------------------------------------------------------------------------
def escape(x: Any) -> str:
    """``x`` as HTML text (quotes escaped too, so it may stand in an attribute)."""
    return html.escape(str(x), quote=True)


def written_at() -> str:
    """The local time now, to the second (ISO 8601 with offset): the "Written …" line of a page."""
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


def table_html(header: Sequence[str], rows: Iterable[Sequence[Any]], num_cols: Sequence[int] = (),
               row_classes: Sequence[str] | None = None) -> str:
    """A ``<table>``: ``header``, then ``rows`` of cells (escaped); ``num_cols``: right-aligned number
    columns; ``row_classes``: a CSS class per row ("good", "bad", ""); a "difference" column is coloured."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = []
    for i, r in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if row_classes and row_classes[i] else ""
        cells = []
        for j, c in enumerate(r):
            td_cls = []
            if j in num_cols:
                td_cls.append("num")
            if header[j] == "difference":
                td_cls.append("diff")
            attr = f' class="{" ".join(td_cls)}"' if td_cls else ""
            cells.append(f"<td{attr}>{escape(c)}</td>")
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def figure_html(path: Path, caption: str, root: Path) -> str:
    """A ``<figure>`` with the PNG embedded as a data URI (or a visible "missing" note); the caption
    names the file relative to ``root``."""
    rel = _rel(path, root)
    if not path.is_file():
        return f'<p class="missing">figure not available: {escape(rel)}</p>'
    data = path.read_bytes()
    if not data.startswith(PNG_SIGNATURE):
        return f'<p class="missing">not a PNG file: {escape(rel)}</p>'
    b64 = base64.b64encode(data).decode("ascii")
    return (f'<figure><img alt="{escape(caption)}" src="data:image/png;base64,{b64}">'
            f"<figcaption>{escape(caption)} <code>{escape(rel)}</code></figcaption></figure>")


def _rel(path: Path, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def note_html(text: str, cls: str = "note") -> str:
    """A highlighted paragraph: ``cls`` "note" (yellow) or "missing" (red)."""
    return f'<p class="{cls}">{escape(text)}</p>'


def page_html(title: str, body: Sequence[str]) -> str:
    """A self-contained HTML document: ``title``, the inline :data:`CSS` and the ``body`` parts in order."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{escape(title)}</title>"
            f"<style>{CSS}</style></head><body><main>{''.join(body)}</main></body></html>\n")


# ------------------------------------------------------------------------------------------------
# formatting and reading helpers of the report
# ------------------------------------------------------------------------------------------------
def quantity_format(q: str, digits: int = 3) -> tuple[int, bool]:
    """``(digits, integer)`` for showing a quantity: steps and lengths without decimals (thousands
    separated), head counts with one decimal (a mean over seeds need not be whole), else ``digits``."""
    if q.startswith(("first step", "median step", "largest added length")):
        return digits, True
    if " heads (of " in f" {q}":
        return 1, False
    return digits, False


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (json.JSONDecodeError, OSError):
        return {}


def _csv(path: Path) -> pd.DataFrame | None:
    return pd.read_csv(path) if path.is_file() else None


# ------------------------------------------------------------------------------------------------
# sections
# ------------------------------------------------------------------------------------------------
SUMMARY_HEADER = ("section", "task", "quantity", "paper", "posym (mean ± sd)", "seeds", "difference", "verdict",
                  "note")
SUMMARY_FOOTNOTE = ("difference = posym mean − paper (Fig. 5A: − Theorem 3.2's bound, which Paper A plots; "
                    "its verdict says whether Δ is within the bound). sd is over seeds (ddof = 1); “n/a” with one seed. "
                    "Paper numbers: SPEC §5 (digitised figures, ±0.01); " + TOLERANCES_TEXT)


def summary_rows(pv: pd.DataFrame) -> list[list[Any]]:
    """The rows of the "paper vs posym" table (columns :data:`SUMMARY_HEADER`), formatted for display."""
    rows = []
    for _, r in pv.iterrows():
        digits, integer = quantity_format(r["quantity"], 4 if str(r["section"]).startswith("Fig. 5A") else 3)
        diff = r["difference"]
        diff_s = fmt_num(diff, digits, integer) if is_finite(diff) else "—"
        if diff_s.lstrip("-").strip("0.,") == "":  # rounds to zero: no sign
            diff_s = diff_s.lstrip("-")
        elif is_finite(diff) and diff > 0:
            diff_s = "+" + diff_s
        rows.append([r["section"], r["task"], r["quantity"], r["paper_text"],
                     fmt_ms(r["posym_mean"], r["posym_sd"], None, digits, integer),
                     int(r["n"]) if is_finite(r["n"]) else 0, diff_s,
                     r["verdict"] if isinstance(r.get("verdict"), str) else "",
                     r["note"] if isinstance(r["note"], str) else ""])
    return rows


def summary_markdown(out_dir: str | os.PathLike) -> str:
    """The "paper vs posym" table of a reproduction directory as a Markdown table (for docs)."""
    out = Path(out_dir)
    if not out.is_dir():
        raise PosymError(f"{out} is not a directory (expected one written by posym reproduce)")
    rows = summary_rows(paper_vs_posym(out))

    def cell(x: Any) -> str:
        return str(x).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(SUMMARY_HEADER) + " |", "|" + "---|" * len(SUMMARY_HEADER)]
    lines += ["| " + " | ".join(cell(x) for x in r) + " |" for r in rows]
    return "\n".join(lines) + "\n\n" + SUMMARY_FOOTNOTE + "\n"


def _summary(t: dict[str, pd.DataFrame]) -> str:
    pv = t["paper_vs_posym"]
    if pv.empty:
        return note_html("No results yet: no stage has produced a table.", "missing")
    classes = ["good" if v in (REPRODUCED, WITHIN_BOUND) else "bad" if v in (NOT_REPRODUCED, VIOLATES_BOUND) else ""
               for v in pv.get("verdict", pd.Series([""] * len(pv))).fillna("")]
    return (table_html(list(SUMMARY_HEADER), summary_rows(pv), num_cols=(4, 5, 6), row_classes=classes)
            + f"<p class=\"sub\">{escape(SUMMARY_FOOTNOTE)}</p>")


def _verdict(t: dict[str, pd.DataFrame]) -> str:
    """The few lines above everything: what reproduced and what did not (from the summary rows)."""
    lines = verdict_lines(t["paper_vs_posym"])
    if not lines:
        return ""
    return ('<div class="verdict"><b>Verdict</b> (computed from the summary table below):<ul>'
            + "".join(f"<li>{escape(x)}</li>" for x in lines) + "</ul></div>")


def how_to_read_html() -> str:
    """:data:`posym.reading.HOW_TO_READ` as HTML: its first paragraph, then its points as a list."""
    head, *points = HOW_TO_READ.split("\n- ")
    flat = [" ".join(x.split()) for x in (head, *points)]
    return (f'<div class="howto"><p>{escape(flat[0])}</p>'
            + ("<ul>" + "".join(f"<li>{escape(x)}</li>" for x in flat[1:]) + "</ul>" if points else "") + "</div>")


def _quantity_table(df: pd.DataFrame, task: str, digits: int = 3) -> str:
    sub = df[df["task"] == task]
    rows = []
    for _, r in sub.iterrows():
        d, integer = quantity_format(r["quantity"], digits)
        paper_s = fmt_num(r["paper"], d, integer)
        if " heads (of " in f" {r['quantity']}" and is_finite(r["paper"]):
            paper_s = f"{float(r['paper']):.0f} of {PAPER_HEADS}"  # Paper A's count is out of its 12 heads
        rows.append([r["quantity"], fmt_ms(r["mean"], r["sd"], None, d, integer), r["per_seed"], paper_s])
    return table_html(["quantity", "posym (mean ± sd)", "per seed", "paper"], rows, num_cols=(1, 3))


def _fig2(out: Path, runs: dict, t: dict) -> str:
    parts = ['<h2 id="fig2">Fig. 2 — learning dynamics</h2>',
             "<p>Validation accuracy per hop over training (mean ± sd band over seeds), the step at which "
             "each hop first reaches 0.9, and Fig. 2 of each run (A: validation accuracy per hop; B: heat maps "
             "of s_POS, s_SYM and the attention entropy H / ln n (1 = uniform, not rescaled) of every head "
             "(rows L&lt;layer&gt;H&lt;head&gt;) "
             "over training; C: cumulative pure heads, γ = 0.1).</p>", how_to_read_html()]
    for task, seeds in runs.items():
        parts.append(f"<h3>{escape(task)} task</h3>")
        parts.append(figure_html(layout.png(out / layout.AGGREGATE, layout.accuracy_figure(task)),
                          f"{task}: validation accuracy per hop, {seeds_text(len(seeds))}; "
                          + paper_steps_caption(t["accuracy_curves"], task), out))
        parts.append(_quantity_table(t["training"], task))
        ini = t["initial_scores"]
        parts.append(_quantity_table(ini, task))
        items = list(seeds.items())
        for i, (s, d) in enumerate(items):
            fig = figure_html(layout.png(d, layout.fig2(0.1)), f"Fig. 2, {task} task, seed {s} (γ = 0.1)", out)
            parts.append(fig if i == 0 else f"<details><summary>Fig. 2, seed {s}</summary>{fig}</details>")
    return "".join(parts)


def paper_steps_caption(curves: pd.DataFrame, task: str) -> str:
    """What the accuracy figure of ``task`` shows of Paper A's 0.9-crossing steps: open circles when the
    drawn steps reach them (as :func:`posym.report.aggregate.plot_accuracy_bands` draws them), else
    that they lie beyond the run's steps."""
    steps = paper.HOP_09_STEP.get(task)
    if not steps:
        return "Paper A gives no 0.9-crossing steps for this task."
    c = curves[curves["task"] == task] if len(curves) else curves
    last = float(c["step"].max()) if len(c) else math.nan
    lo, hi = min(steps.values()), max(steps.values())
    when = f"step {lo:,}" if lo == hi else f"steps {lo:,}–{hi:,}"
    if is_finite(last) and last >= hi:
        return f"open circles: the steps at which Paper A's curves cross 0.9 ({when})."
    drawn = f"this run's {last:,.0f} steps" if is_finite(last) else "the drawn steps"
    return f"Paper A's points (open circles) lie beyond {drawn} (Paper A crosses 0.9 at {when}): not drawn."


def _pure(out: Path, runs: dict, t: dict) -> str:
    pc, pl = t["purity_counts"], t["purity_layers"]
    sizes = sorted({int(x) for x in pl["layer"]}) if len(pl) else []
    n_layers = max(sizes) + 1 if sizes else 0
    same = n_layers == PAPER_HEADS and (not len(pl) or pl["head"].max() == 0)
    parts = ['<h2 id="pure">Pure heads (SPEC §3; Paper A: number 4 positional + 8 symbolic, letter 0 + 11, '
             f'of {PAPER_HEADS})</h2>',
             "<p>A head is pure positional iff s_POS ≥ 1−γ and s_SYM ≤ γ (symbolic: the reverse) at the "
             "final step; it counts as pure from the first tracked step after which the rule holds to the "
             f"end. Paper A's model has {PAPER_HEADS} layers (1 head each)"
             + (f"; these models have {n_layers}." if n_layers else ".") + "</p>"]
    for task in runs:
        parts.append(f"<h3>{escape(task)} task</h3>")
        for gamma in (0.1, 0.05):
            sub = pc[(pc["task"] == task) & (pc["gamma"] == gamma)] if len(pc) else pc
            if len(sub):
                parts.append(f"<p><b>γ = {gamma:g}</b></p>" + _quantity_table(sub, task))
        sub = pl[(pl["task"] == task) & (pl["gamma"] == 0.1)] if len(pl) else pl
        if len(sub):
            rows = [[int(r["layer"]), int(r["head"]), r["kinds"], fmt_ms(r["s_pos_mean"], r["s_pos_sd"]),
                     fmt_ms(r["s_sym_mean"], r["s_sym_sd"]),
                     fmt_ms(r["pure_from_mean"], r["pure_from_sd"], None, 0, True)] + ([r["paper_kind"]] if same else [])
                    for _, r in sub.iterrows()]
            if not same:
                ref = paper.PURE_HEADS[task]
                kinds = "; ".join(f"pure {k} layers: {_layers(ref[k])}" for k in ("positional", "symbolic"))
                parts.append(note_html(f"Layers are not comparable one to one (Paper A's {PAPER_HEADS}-layer model — "
                                   f"{kinds}): compare where in depth each kind sits, not layer indices."))
            parts.append(table_html(["layer", "head", "kind at the end (seeds)", "s_POS final", "s_SYM final",
                                 "pure from step"] + (["paper (layer)"] if same else []), rows,
                                num_cols=(0, 1, 3, 4, 5)))
        else:
            parts.append(note_html(f"no purity table for the {task} task (dynamics stage not run)", "missing"))
    return "".join(parts)


def _layers(layers: Sequence[int]) -> str:
    """``0–3`` for a run of layers, ``none`` for none."""
    layers = sorted(layers)
    if not layers:
        return "none"
    if layers == list(range(layers[0], layers[-1] + 1)) and len(layers) > 2:
        return f"{layers[0]}–{layers[-1]}"
    return ", ".join(map(str, layers))


def _flow(out: Path, runs: dict, t: dict) -> str:
    parts = ['<h2 id="fig3">Fig. 3 — information flow and head ablations</h2>',
             "<p>Left: strongest attention edges of every layer for one test prompt per hop count (hop "
             "chain in red; seed 0). Right: accuracy with one head zero- or mean-ablated. Paper A's Fig. 3 "
             "is qualitative (no published numbers): it shows the answer travelling up the hop chain, "
             "positional heads low and symbolic heads high.</p>"]
    ab = t["ablation"]
    for task, seeds in runs.items():
        parts.append(f"<h3>{escape(task)} task</h3>")
        s0, d0 = next(iter(seeds.items()))
        flows = _read_json(d0 / layout.FLOW_JSON)
        if flows:
            figs = [figure_html(d0 / e["figure"], f"{task}, seed {s0}, {h}-hop test prompt {e['example']}: "
                         f"{e.get('tokens', '')} → {e.get('label')} (predicted {e.get('prediction')})", out)
                    for h, e in sorted(flows.items())]
            parts.append(f'<div class="wide">{"".join(figs)}</div>')  # one per row: labels readable at page width
        else:
            parts.append(note_html(f"no flow figures for the {task} task (flow stage not run)", "missing"))
        parts.append(figure_html(layout.png(d0, layout.FIG_ABLATION), f"{task}, seed {s0}: accuracy with one head ablated",
                          out))
        sub = ab[(ab["task"] == task) & (ab["mode"] != "none")] if len(ab) else ab
        if len(sub):
            base = ab[(ab["task"] == task) & (ab["mode"] == "none")]
            rows = []
            if len(base):
                b = base.iloc[0]
                rows.append(["none", "—", fmt_ms(b["acc_mean"], b["acc_sd"]),
                             fmt_ms(b.get("acc_hop4_mean"), b.get("acc_hop4_sd"))])
            for _, r in sub.iterrows():
                rows.append([r["mode"], f"L{int(r['layer'])}H{int(r['head'])}", fmt_ms(r["acc_mean"], r["acc_sd"]),
                             fmt_ms(r.get("acc_hop4_mean"), r.get("acc_hop4_sd"))])
            parts.append("<details><summary>ablation table (mean ± sd over seeds)</summary>"
                         + table_html(["mode", "ablated head", "accuracy (all hops)", "accuracy (4 hops)"], rows,
                                  num_cols=(2, 3)) + "</details>")
    return "".join(parts)


def _freqs(out: Path, runs: dict, t: dict) -> str:
    parts = ['<h2 id="table1">Table 1, Fig. 8, Fig. 4B — RoPE frequency use</h2>',
             "<p>Weighted-average frequency ID per layer (SPEC §4: u_k = mean over test prompts of "
             "max_j |λ^(k)|; ID 1 = fastest, 64 = slowest) and the dominant ID (largest u_k) of each seed. "
             "Paper A, Table 1: number task layers 0–3 IDs 1, 2, 2, 2, layer 4 ID 10, layers 5–11 IDs "
             "37–39; letter task IDs 18–42 everywhere.</p>"]
    fq = t["freqs"]
    for task, seeds in runs.items():
        parts.append(f"<h3>{escape(task)} task</h3>")
        sub = fq[fq["task"] == task] if len(fq) else fq
        if len(sub):
            same = int(sub["layer"].max()) + 1 == PAPER_HEADS and sub["head"].max() == 0
            rows = [[int(r["layer"]), int(r["head"]), fmt_ms(r["weighted_id_mean"], r["weighted_id_sd"], None, 1),
                     r["dominant_ids"]] + ([fmt_num(r["paper_id"], 0, True) if is_finite(r["paper_id"]) else "",
                                            r["paper_note"] if isinstance(r["paper_note"], str) else ""] if same else [])
                    for _, r in sub.iterrows()]
            if not same:
                parts.append(note_html(f"A {int(sub['layer'].max()) + 1}-layer model: layer indices are not comparable "
                                   f"with Paper A's {PAPER_HEADS} layers one to one (its IDs are above), so no "
                                   "paper column."))
            parts.append(table_html(["layer", "head", "weighted ID (mean ± sd)", "dominant ID per seed"]
                                + (["paper ID", "paper note"] if same else []), rows, num_cols=(0, 1, 2, 4)))
        else:
            parts.append(note_html(f"no frequency table for the {task} task (freqs stage not run)", "missing"))
        s0, d0 = next(iter(seeds.items()))
        figs = [figure_html(layout.png(d0, layout.FIG_FREQ_USE), f"Fig. 8: frequency use per layer, {task}, seed {s0}", out)]
        for g in sorted((d0 / layout.FIGURES).glob(layout.qk_geometry_stem("*") + ".png")):
            figs.append(figure_html(g, f"Fig. 4B: query/key geometry, {task}, seed {s0}, {g.stem.split('_')[-1]} — left, "
                                "rotated by position: the keys fan out by position and a query points at the key "
                                "it selects; right, before rotation: for a positional head the keys align and the "
                                "queries spread by offset", out))
        parts.append(f'<div class="wide">{"".join(figs)}</div>')  # one per row, drawn for the page width
    return "".join(parts)


def _discrepancy(out: Path) -> str:
    parts = ['<h2 id="fig5a">Fig. 5A — discrepancy of the RoPE constructions</h2>',
             "<p>Δ(n) = largest logit − largest logit outside the arg-max set, worst case over valid "
             "inputs of length n, for the Index (θ = 0.8) and Retrieval (θ = 0.0027, |ALPH| = 8) "
             "constructions, with Theorem 3.2's bounds. Paper A: Index flat at 0.303 up to n ≈ 8 then "
             "≈ 2π²/n² (≈ 0.003 at n = 80); Retrieval falls slowly from 0.29 to ≈ 0.16 at n = 80.</p>"]
    d = _csv(out / layout.THEORY / f"{layout.DISCREPANCY}.csv")
    if d is None:
        return "".join(parts) + note_html("discrepancy stage not run", "missing")
    parts.append(figure_html(out / layout.THEORY / f"{layout.DISCREPANCY}.png", "Fig. 5A: Δ(n) and Theorem 3.2 bounds", out))
    rows = []
    for n in (2, 8, 9, 20, 40, 80, 100):
        r = {m: d[(d["mechanism"] == m) & (d["n"] == n)] for m in ("index", "retrieval")}
        if not any(len(x) for x in r.values()):
            continue
        row = [n]
        for m in ("index", "retrieval"):
            x = r[m]
            row += [fmt_num(x["delta"].iloc[0], 4) if len(x) else "—", fmt_num(x["bound"].iloc[0], 4) if len(x) else "—",
                    fmt_num(PAPER_DISCREPANCY[m].get(n), 3) if n in PAPER_DISCREPANCY[m] else ""]
        rows.append(row)
    parts.append(table_html(["n", "Index Δ", "Index bound", "Index paper", "Retrieval Δ", "Retrieval bound",
                         "Retrieval paper"], rows, num_cols=tuple(range(7))))
    return "".join(parts)


def _lengthgen(out: Path, runs: dict, t: dict) -> str:
    parts = ['<h2 id="fig5b">Fig. 5B — length generalization</h2>',
             "<p>Accuracy vs tokens added before the target window (SPEC §1.4): mean over seeds with a ± sd "
             "band (each run's value is the mean over its data seeds); open circles: Paper A.</p>"]
    lg = t["lengthgen"]
    if not len(lg):
        return "".join(parts) + note_html("lengthgen stage not run", "missing")
    parts.append(figure_html(layout.png(out / layout.AGGREGATE, layout.FIG_LENGTHGEN_SEEDS),
                      f"Fig. 5B: accuracy vs added tokens ({seeds_text(int(lg['n_seeds'].max()))})", out))
    tasks = [x for x in runs if (lg["task"] == x).any()]
    grid = sorted(set(lg["extra_tokens"]) | {x for task in tasks for x in paper.LENGTHGEN[task]})
    rows = []
    for x in grid:
        row = [f"+{x}"]
        for task in tasks:
            r = lg[(lg["task"] == task) & (lg["extra_tokens"] == x)]
            row.append(fmt_ms(r["acc_mean"].iloc[0], r["acc_sd"].iloc[0]) if len(r) else "—")
            pv = paper.LENGTHGEN[task].get(x)
            row.append(fmt_num(pv, 2) if pv is not None else "")
        rows.append(row)
    header = ["added tokens"] + [h for task in tasks for h in (f"{task}: posym", f"{task}: paper")]
    parts.append(table_html(header, rows, num_cols=tuple(range(1, len(header)))))
    for task, seeds in runs.items():
        figs = [figure_html(layout.png(d, layout.FIG_LENGTHGEN), f"{task}, seed {s}", out)
                for s, d in seeds.items()]
        parts.append(f"<details><summary>per-run figures, {task}</summary><div class=\"grid\">{''.join(figs)}"
                     "</div></details>")
    return "".join(parts)


def _llm_rows(table: pd.DataFrame) -> tuple[list, list[list[str]]]:
    """Lengths and rows (mean ± sd per task; a chance row per task when the table has one) of an LLM table."""
    lengths = sorted(table["length"].unique())
    rows = []
    for task in dict.fromkeys(table["task"]):
        g = table[table["task"] == task].set_index("length")
        rows.append([task] + [fmt_ms(g.loc[x, "mean"], g.loc[x, "sd"], None, 2) if x in g.index else "—"
                              for x in lengths])
        if "chance" in g:
            rows.append([f"{task} chance"] + [f"{g.loc[x, 'chance']:.2f}" if x in g.index else "—" for x in lengths])
    return lengths, rows


def _llm(out: Path, meta: dict) -> str:
    parts = ['<h2 id="table3">Table 3 — 1-hop prompts on pretrained LLMs</h2>',
             "<p>SPEC §1.5 protocol (instructions, worked examples, “output just the target token”) on the "
             "offline models of the setting <code>llm_models</code>. Paper A's Table 3 (frontier API models): "
             "number accuracy &lt; 0.5 at length 32 and &lt; 0.1 at 100 for all models; letter &gt; 0.88 at 32 "
             "and &gt; 0.65 at 100.</p>"]
    folders = layout.llm_model_dirs(out) or [out / layout.LLM]
    for i, folder in enumerate(folders):
        parts.append(_llm_model(folder, out, meta if i == 0 else {}, heading=len(folders) > 1))
    combined = layout.png(out / layout.AGGREGATE, layout.FIG_LLM_MODELS)
    if combined.is_file():
        parts.append(figure_html(combined, "every model and protocol: accuracy vs target-window length", out))
    return "".join(parts)


def _llm_model(folder: Path, out: Path, meta: dict, heading: bool) -> str:
    """One model's generate table and figure, then its choice protocol (if it ran), or why it is missing."""
    table = _csv(folder / layout.LLM_TABLE)
    choice = _csv(folder / layout.LLM_CHOICE / layout.LLM_TABLE)
    skipped = _read_json(folder / layout.SKIPPED_JSON)
    name = next((t["model"].iloc[0] for t in (table, choice) if t is not None and "model" in t), folder.name)
    parts = [f"<h3>{escape(name)}</h3>"] if heading else []
    if table is None and choice is None:
        why = skipped.get("reason") or meta.get("llm_note") or "the llm stage has not run"
        return "".join(parts) + note_html(f"Table 3 not reproduced here — {why}")
    if table is not None:
        lengths, rows = _llm_rows(table)
        runs = int(table["runs"].min()) if "runs" in table else 1
        n = int(table["n"].min()) if "n" in table else 0
        parts.append(f"<p>{escape(name)}, greedy generation: accuracy, mean ± sd over {runs} run(s) of {n} prompts "
                     "each.</p>")
        parts.append(table_html(["task"] + [f"length {x}" for x in lengths], rows,
                            num_cols=tuple(range(1, len(lengths) + 1))))
        parts.append(figure_html(layout.png(folder, layout.FIG_LLM), "accuracy vs target-window length", out))
    parts.append(_llm_choice(folder / layout.LLM_CHOICE, out, level=4 if heading else 3))
    return "".join(parts)


def _llm_choice(folder: Path, out: Path, level: int = 3) -> str:
    """The log-likelihood protocol's table (accuracy and chance level per length), if it ran."""
    table = _csv(folder / layout.LLM_TABLE)
    if table is None:
        return ""
    lengths, rows = _llm_rows(table)
    return (f"<h{level}>Log-likelihood protocol (choice)</h{level}><p>Every distinct target-window token scored as the answer by "
            "the model's log-probability after the same prompt; the argmax counts. Chance = mean of 1 / (distinct "
            "candidates).</p>"
            + table_html(["task"] + [f"length {x}" for x in lengths], rows, num_cols=tuple(range(1, len(lengths) + 1)))
            + figure_html(layout.png(folder, layout.FIG_LLM), "choice protocol: accuracy vs length, chance dotted", out))


def _configs(out: Path, runs: dict, meta: dict) -> str:
    parts = ['<h2 id="configs">Run configurations</h2>']
    if meta:
        shown = {k: meta.get(k) for k in ("preset", "tasks", "seeds", "device", "jobs", "llm", "created", "updated",
                                           "command") if k in meta}
        parts.append("<p>Reproduction (<code>reproduce.json</code>):</p><pre>" + escape(json.dumps(shown, indent=2))
                     + "</pre>")
        parts.append("<details><summary>preset settings</summary><pre>"
                     + escape(json.dumps(meta.get("settings", {}), indent=2)) + "</pre></details>")
    st = stage_table(out)
    if st:
        total = sum(float(r["seconds"]) for r in st if is_finite(r["seconds"]))
        rows = [[r["stage"], fmt_num(r["seconds"], 1), r["started"], r["finished"]] for r in st]
        parts.append(f"<p>Stages done: {len(st)}, {total / 60:.1f} min of stage time in all (stages run in "
                     "parallel, so wall time is shorter).</p>")
        parts.append("<details><summary>stage timings</summary>"
                     + table_html(["stage", "seconds", "started", "finished"], rows, num_cols=(1,)) + "</details>")
    chosen = []
    for task, seeds in runs.items():
        for s, d in seeds.items():
            res = _read_json(d / layout.RESULTS)
            if res:
                chosen.append([task, s, res.get("final_model", "last"), res.get("final_step", res.get("steps")),
                               res.get("best_step", ""), fmt_num(res.get("best_val_acc")),
                               fmt_num((res.get("test") or {}).get("acc"))])
    if chosen:
        parts.append("<p>The model each run stands for (SPEC §2: the last step, or the first checkpoint with the "
                     "best validation accuracy as HF <code>load_best_model_at_end</code> keeps it); test accuracy "
                     "and every analysis use it:</p>")
        parts.append(table_html(["task", "seed", "final model", "its step", "best-validation step", "best val acc",
                             "test acc"], chosen, num_cols=(3, 4, 5, 6)))
    for task, seeds in runs.items():
        for s, d in seeds.items():
            cfg = _read_json(d / layout.POSYM_JSON)
            res = _read_json(d / layout.RESULTS)
            parts.append(f"<details><summary>{escape(task)} seed {s}: <code>{escape(_rel(d / layout.POSYM_JSON, out))}</code>"
                         f"</summary><pre>{escape(json.dumps({**cfg, 'results': res}, indent=2))}</pre></details>")
    return "".join(parts)


def _versions_section(meta: dict) -> str:
    now = versions()
    run_v = meta.get("versions", {})
    keys = list(dict.fromkeys(list(now) + list(run_v)))
    rows = [[k, run_v.get(k, "—"), now.get(k, "—")] for k in keys]
    return ('<h2 id="versions">Versions</h2>'
            + table_html(["software", "when the reproduction ran", "when this report was written"], rows))


# ------------------------------------------------------------------------------------------------
# the report
# ------------------------------------------------------------------------------------------------
def write_report(out_dir: str | os.PathLike, path: str | os.PathLike | None = None) -> Path:
    """Write ``DIR/report.html`` (or ``path``) from the saved outputs of a reproduction directory;
    also (re)writes the aggregate tables ``DIR/aggregate/``. Returns the report's path."""
    out = Path(out_dir)
    if not out.is_dir():
        raise PosymError(f"no such reproduction directory: {out}")
    meta = _read_json(out / layout.REPRODUCE_JSON)
    t = aggregate(out, write=True)
    runs = find_runs(out)
    seeds = sorted({s for v in runs.values() for s in v})
    preset = meta.get("preset", "?")
    title = "posym — reproduction of Paper A"
    notes = []
    if not runs:
        notes.append(note_html("No finished training run in this directory yet.", "missing"))
    if meta.get("llm_note") and not (out / layout.LLM / layout.LLM_TABLE).is_file():
        notes.append(note_html(meta["llm_note"]))
    archs = sorted({run_arch(r) for v in runs.values() for r in v.values()})
    if archs and archs != ["gptj"]:
        notes.append(note_html(f"Architecture: {', '.join(archs)} (posym train --arch; Paper A trains GPT-J): the preset's "
                           "shape in that family, whose own design (norms, MLP, QK-norm, residual layout) differs "
                           "from GPT-J's — docs/models.md, “Training other families”."))
    if preset == "quick":
        notes.append(note_html("Quick preset: 8-layer models, 1,500 steps at learning rate 1e-3 (Paper A: 12 layers, "
                           "6,750 steps at 1e-4), smaller analysis sets — the shapes are comparable with Paper A, "
                           "step counts and layer indices are not."))
    sections = [
        ("summary", "Summary: paper vs posym"), ("fig2", "Fig. 2 — learning dynamics"), ("pure", "Pure heads"),
        ("fig3", "Fig. 3 — flow and ablations"), ("table1", "Table 1, Figs. 8 / 4B — frequencies"),
        ("fig5a", "Fig. 5A — discrepancy"), ("fig5b", "Fig. 5B — length generalization"),
        ("table3", "Table 3 — LLM prompts"), ("configs", "Run configurations"), ("versions", "Versions")]
    nav = "<nav><ol>" + "".join(f'<li><a href="#{a}">{escape(b)}</a></li>' for a, b in sections) + "</ol></nav>"
    body = [
        f"<h1>{escape(title)}</h1>",
        f'<p class="sub">Urrutia et al. 2026, “Positional versus Symbolic Attention Heads” (arXiv 2605.31558). '
        f"Preset <b>{escape(preset)}</b>; architecture <b>{escape(', '.join(archs) or 'gptj')}</b>; "
        f"tasks {escape(', '.join(runs) or '—')}; seeds {escape(', '.join(map(str, seeds)) or '—')} "
        f"(each the init, data and order seed of a run); device {escape(meta.get('device', '?'))}. "
        f"Written {escape(written_at())}.</p>",
        _verdict(t), *notes, nav,
        '<h2 id="summary">Summary: paper vs posym</h2>', _summary(t),
        _fig2(out, runs, t), _pure(out, runs, t), _flow(out, runs, t), _freqs(out, runs, t), _discrepancy(out),
        _lengthgen(out, runs, t), _llm(out, meta), _configs(out, runs, meta), _versions_section(meta),
    ]
    doc = page_html(title, body)
    target = Path(path) if path is not None else out / layout.REPORT_HTML
    write_text_atomic(target, doc, mkdir=False)
    return target


__all__ = ["CSS", "PNG_SIGNATURE", "escape", "figure_html", "how_to_read_html", "note_html", "page_html",
           "paper_steps_caption", "quantity_format", "summary_markdown", "summary_rows", "table_html", "write_report",
           "written_at"]
