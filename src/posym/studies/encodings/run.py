"""``posym pe-study``: reproductions trained with different positional encodings side by side
(:mod:`posym.studies.encodings.tables`; docs/encodings.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from posym.errors import PosymError
from posym.launch.fanout import FanOut, check_launcher, submit_fanout, variant_path
from posym.launch.slurm import SlurmOptions
from posym.report.aggregate import lengthgen_interventions, shown_note
from posym.runs import layout
from posym.runs.tables import NO_INTERVENTION
from posym.studies._figures import plot_variant_curves
from posym.studies._page import ENCODINGS_FIG2C, write_page
from posym.studies.encodings.figures import plot_pure_count_curves
from posym.studies.encodings.page import pe_study_page
from posym.studies.encodings.tables import (check_variants, fig5b_curves, goal_line, pure_count_curves, study_markdown,
                                            study_rows, study_table)
from posym.verbs import Outputs, VerbResult, figure_paths


def check_lengthgen_table(variants: Mapping[str, str | os.PathLike], name: str,
                          intervention: str = NO_INTERVENTION) -> list[str]:
    """PosymError unless ``name`` is a CSV file name (no folder) whose summary some run of the variants
    holds, with rows of ``intervention`` (every summary is value-checked on the way); returns every
    intervention the summaries hold."""
    if Path(name).name != name or not name.endswith(".csv"):
        raise PosymError(f"--lengthgen {name!r}: give the file name of a length-generalization table inside "
                         f"each run (e.g. {layout.LENGTHGEN} or lengthgen_paper.csv), not a path")
    summary = layout.summary_path(Path(name)).name
    if not any((run / summary).is_file() for d in variants.values()
               for seeds in layout.find_runs(d).values() for run in seeds.values()):
        raise PosymError(f"no run of these variants holds {summary}; write it with "
                         f"posym lengthgen RUN --out RUN/{name}")
    present = list(dict.fromkeys(iv for d in variants.values()
                                 for iv in lengthgen_interventions(layout.find_runs(d), name)))
    if intervention not in present:
        raise PosymError(f"no {summary} of these variants holds rows of intervention {intervention!r} (they hold "
                         f"{', '.join(present) or 'no rows'}); choose one of those with --intervention")
    return present


def pe_study(variants: Mapping[str, str | os.PathLike], out: str | os.PathLike, *, force: bool = False,
             lengthgen: str = layout.LENGTHGEN, intervention: str = NO_INTERVENTION, launcher: str = "local",
             slurm_options: SlurmOptions | None = None) -> VerbResult:
    """Write ``OUT/pe_study.csv`` (one row per variant, task and quantity) + ``.md`` (the table and the
    goal line) + ``.html`` (the page), Fig. 2's pure-head counts of every variant
    (``OUT/fig2_variants.csv`` + ``.png|pdf``) and Fig. 5B of every variant (``OUT/fig5b_variants.csv`` +
    ``.png|pdf``). Fig. 5B and the reach read each run's ``lengthgen`` table (default the reproduction's
    own; e.g. ``lengthgen_paper.csv`` from ``posym lengthgen RUN --grid paper --out
    RUN/lengthgen_paper.csv``). Every variant is checked (a reproduction directory whose runs agree on
    ``--pe``) and every output is checked before anything is read or written. ``intervention``: whose
    rows of a length table that holds several (``posym lengthgen --intervene``) Fig. 5B and the reach
    show (default the untouched model's, ``none``; never an average over interventions); the study,
    the text and the page name it when the tables hold others. ``launcher``: ``local`` or ``slurm``: the
    study only reads the variants' saved tables, so it is one job that runs this call with the same
    settings and writes the same files (:mod:`posym.launch.fanout`, docs/cluster.md); returns once it is queued."""
    check_launcher(launcher, slurm_options)
    pes = check_variants(variants)
    present = check_lengthgen_table(variants, lengthgen, intervention)
    shown = shown_note(intervention, present)
    out = Path(out)
    files = [out / layout.PE_STUDY, out / layout.PE_STUDY_MD, out / layout.PE_STUDY_HTML,
             out / layout.PE_PURE_COUNTS, *figure_paths(out / layout.FIG_PE_PURE_COUNTS),
             out / layout.VARIANT_CURVES, *figure_paths(out / layout.FIG_VARIANT_CURVES)]
    outputs = Outputs(files, force).check()
    if launcher == "slurm":
        args = ("pe-study", *[f"{k}={variant_path(v)}" for k, v in variants.items()], "--out", str(out.absolute()),
                "--lengthgen", lengthgen, "--intervention", intervention, *(["--force"] if force else []))
        return VerbResult(None, [], submit_fanout(out, FanOut("pe-study", {}, args), slurm_options).text)
    table = study_table(variants, pes, lengthgen, intervention)
    goal = goal_line(table)
    source = ("" if lengthgen == layout.LENGTHGEN else f"each run's {lengthgen}") + (
        (" — " if lengthgen != layout.LENGTHGEN else "") + shown if shown else "")
    md = study_markdown(table, goal) + (f"\n\nFig. 5B and the reach read {source}." if source else "")
    counts, curves = pure_count_curves(variants), fig5b_curves(variants, lengthgen, intervention)
    labels = {v: (v if v == pe else f"{v} ({pe})") for v, pe in pes.items()}
    outputs.csv(table, out / layout.PE_STUDY)
    outputs.text(md + "\n", out / layout.PE_STUDY_MD)
    outputs.csv(counts, out / layout.PE_PURE_COUNTS)
    outputs.figure(plot_pure_count_curves(counts, labels), out / layout.FIG_PE_PURE_COUNTS)
    outputs.csv(curves, out / layout.VARIANT_CURVES)
    outputs.figure(plot_variant_curves(curves.assign(variant=curves["variant"].map(labels))),
                   out / layout.FIG_VARIANT_CURVES)
    header, rows = study_rows(table)
    figures = {ENCODINGS_FIG2C: out / f"{layout.FIG_PE_PURE_COUNTS}.png",
               f"Fig. 5B of every variant ({lengthgen} of each run{', ' + shown if shown else ''}), "
               "Paper A's points as circles":
                   out / f"{layout.FIG_VARIANT_CURVES}.png"}
    outputs.text(pe_study_page(out, {k: str(v) for k, v in variants.items()}, header, rows, goal, figures),
                 out / layout.PE_STUDY_HTML)
    if (out / layout.INTERVENTIONS_JSON).is_file():  # an interventions study in the same folder: one page
        outputs.written.append(write_page(out))
    return VerbResult(table, outputs.written, "\n".join([md, f"wrote {out}"]), {"goal": goal, "pe": pes})


__all__ = ["check_lengthgen_table", "pe_study"]
