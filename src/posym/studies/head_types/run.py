"""``posym head-types``: positional/symbolic scores of every head of a real LLM side by side with the
classic head detectors (SPEC §7; docs/llm.md,
"Head types side by side").

For each prompt source the model's heads are scored (SPEC §3, fast exact path, query = the last token):

* ``repeated`` — random token sequences repeated twice (``[bos] x x``,
  :func:`posym.tasks.repeated.repeated_random_sequences`; tokens drawn from the tokenizer's vocabulary
  without its special tokens), token swaps;
* ``binding``, ``number``, ``letter`` — the prompt sets of ``posym llm heads``
  (:mod:`posym.tasks.llm_prompts`), Paper B's block swaps over their exact token blocks.

The classic types come from the detectors (previous-token, duplicate-token, induction, first-token)
on the repeated sequences — the input their definitions are made for — whatever the prompt source;
every source's scores are joined with them (:func:`posym.heads.head_types.join_head_types`), with
per-prompt readings (:func:`posym.heads.prompt_readings.per_prompt_kinds`), Spearman correlations
with bootstrap CIs and a shuffled-label null, the classic × posym contingency table and the
(s_POS, s_SYM) plane coloured by classic type. ``swap_exclude`` keeps keys out of the swaps (the start
token, ``bos``, by default here: real LLMs' attention sinks; docs/llm.md argues it with numbers).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from posym.checks import check_gamma, check_taus
from posym.constants import GAMMA
from posym.errors import PosymError
from posym.runs import layout
from posym.studies.head_types.panels import plot_head_type_planes
from posym.studies.head_types.study import DEFAULT_REPEAT_LENGTH, DEFAULT_SWAP_EXCLUDE, HEAD_TYPES_OUT_ROOT, PROMPT_SOURCES
from posym.studies.head_types.tables import _fmt_corr, _pure_line, _sink_line, headline_rho
from posym.verbs import Outputs, VerbResult, figure_paths
def parse_sources(prompts: str | Sequence[str]) -> tuple[str, ...]:
    """``"all"`` | a comma list / sequence of :data:`PROMPT_SOURCES` -> the sources in canonical order."""
    from posym.heads.llm_heads import parse_choices

    return parse_choices(prompts, PROMPT_SOURCES, "prompt source")


def head_types_out(model: Any = None, gguf: str | os.PathLike | None = None) -> Path:
    """Default output folder: ``runs/head-types/<model>/`` (named as ``posym llm heads`` names its own)."""
    from posym.verbs.llm import heads_out

    return Path(HEAD_TYPES_OUT_ROOT) / heads_out(model, gguf).name


def _job_path(value: Any) -> str:
    """An option value for a Slurm job's command line: an existing path made absolute, else as given."""
    text = str(value)
    return str(Path(text).absolute()) if os.path.exists(text) else text


def load_inputs(model: Any, gguf: str | None, tokenizer: Any, device: str, dtype: Any, sources: Sequence[str],
                n: int, length: int, seed: int, window_length: int, n_entities: int, n_examples: int):
    """The model and prompts of a head-types readout (``posym head-types``, ``posym atlas``):
    ``(lm, tokenizer, label, repeated ids [n, 1 + 2·length], {source: prompts or None})`` — the
    repeated random sequences and each other source's LLM prompt set (SPEC §7, §1.5)."""
    from posym.heads.llm_heads import load_lm
    from posym.heads.scores import vocab_size
    from posym.tasks.llm_prompts import build_prompts
    from posym.tasks.repeated import repeated_ids

    lm, tok, label = load_lm(model, gguf, tokenizer, device, dtype)
    rep = repeated_ids(tok, vocab_size(lm) or len(tok), n, length, seed)
    built = {s: (None if s == "repeated" else build_prompts(tok, s, n, seed, length=window_length,
                                                            n_entities=n_entities, n_examples=n_examples))
             for s in sources}
    return lm, tok, label, rep, built


def check_reading_settings(*, n: int, length: int, batch_size: int, tau: float | Sequence[float] | None, gamma: float,
                           min_mass: float | None, pure_fraction: float, swap_exclude: str, window_length: int | None,
                           n_entities: int | None, n_examples: int | None, one_tau: str) -> tuple:
    """The head readings' settings checked before any load (one-line PosymError each; ``one_tau`` is the message for
    several τ): ``(n, length, batch_size, tau, gamma, min_mass, pure_fraction, exclude_keys, window_length,
    n_entities, n_examples)`` with the defaults filled in (SPEC §3 / §7)."""
    from posym.checks import check_positive_int as positive_int
    from posym.heads.head_types import check_pure_fraction
    from posym.heads.llm_heads import check_min_mass
    from posym.heads.scores import DEFAULT_TAU
    from posym.heads.swaps import parse_swap_exclude
    from posym.reading import MIN_MASS
    from posym.tasks.llm_prompts import DEFAULT_LENGTH, DEFAULT_N_ENTITIES, DEFAULT_N_EXAMPLES

    n, length, batch_size = positive_int(n, "n"), positive_int(length, "length"), positive_int(batch_size, "batch_size")
    taus = check_taus(DEFAULT_TAU if tau is None else tau)
    if len(taus) != 1:
        raise PosymError(one_tau)
    gamma = check_gamma(gamma)
    min_mass = check_min_mass(MIN_MASS if min_mass is None else min_mass)
    pure_fraction = check_pure_fraction(pure_fraction)
    exclude = parse_swap_exclude(swap_exclude, np.zeros((1, 1 + 2 * length), dtype=np.int64))
    window_length = DEFAULT_LENGTH if window_length is None else positive_int(window_length, "window_length")
    n_entities = DEFAULT_N_ENTITIES if n_entities is None else positive_int(n_entities, "n_entities")
    n_examples = DEFAULT_N_EXAMPLES if n_examples is None else int(n_examples)
    return (n, length, batch_size, taus[0], gamma, min_mass, pure_fraction, exclude, window_length, n_entities,
            n_examples)


def head_types(model: Any = None, gguf: str | os.PathLike | None = None, *, tokenizer: Any = None,
               prompts: str | Sequence[str] = PROMPT_SOURCES, swap_exclude: str = DEFAULT_SWAP_EXCLUDE,
               n: int = 32, length: int = DEFAULT_REPEAT_LENGTH, seed: int = 0, tau: float | None = None,
               gamma: float = GAMMA, min_mass: float | None = None, pure_fraction: float | None = None,
               n_boot: int = 1000, n_null: int = 1000,
               window_length: int | None = None, n_entities: int | None = None, n_examples: int | None = None,
               device: str | None = None, dtype: Any = None, batch_size: int = 8, threads: int | None = None,
               out: str | os.PathLike | None = None, force: bool = False, progress: bool = True,
               launcher: str = "local", slurm_options: Any = None) -> VerbResult:
    """Every head of a real LLM typed two ways, side by side (module doc), written to ``out`` (default
    :func:`head_types_out`): ``head_types.csv`` (the join: one row per prompt source, layer and head),
    ``head_types_correlations.csv``, ``head_types_contingency.csv``, ``head_types.json`` (settings,
    sink counts) and ``figures/head_types_plane.png|pdf``.

    ``model``/``gguf``: as :func:`posym.model.llm.load_llm` (a bundled name, a model folder with its
    tokenizer, a ``.gguf`` file), or an in-memory HF model with ``tokenizer``. ``prompts``: sources of
    :data:`PROMPT_SOURCES` (or ``"all"``); ``n`` prompts per source; ``length``: the repeated
    sequence's length (prompts of ``1 + 2·length`` tokens); ``swap_exclude``: ``bos`` | ``none`` |
    ``first:K`` (:func:`posym.heads.swaps.parse_swap_exclude`); ``tau``: τ of the swap weights (SPEC
    §3); ``gamma``: purity tolerance of the per-prompt readings; ``min_mass``: below it a prompt's
    reading is uninformative; ``pure_fraction``: a head pure on the mean is typed pure only when it is
    pure of that kind on at least this share of the prompts (default ``None``: 0.9; 0: the mean alone decides;
    :func:`posym.heads.head_types.posym_types`); ``n_boot`` / ``n_null``: bootstrap resamples of the CIs and shuffles of
    the null; ``window_length``, ``n_entities``, ``n_examples``: as ``posym llm heads``.
    ``launcher``: ``local`` or ``slurm`` (one job for the model, running this readout with the same
    settings and writing the same files; ``slurm_options``: :func:`posym.launch.slurm.slurm_options`;
    docs/cluster.md); returns once the job is queued.
    """
    import torch
    from tqdm.auto import tqdm

    from posym.launch.fanout import FanOut, check_launcher, submit_fanout
    from posym.heads.detectors import detector_scores
    from posym.heads.head_types import (SINK_SHARE, contingency, format_contingency,
                                        informative_correlations, join_head_types, pure_counts, sink_counts,
                                        source_scores)
    from posym.heads.prompt_readings import per_prompt_kinds
    from posym.reading import READ_POINTER
    from posym.checks import check_positive_int as positive_int

    # ---- every check before any load or write
    check_launcher(launcher, slurm_options)
    given = dict(gguf=gguf, tau=tau, min_mass=min_mass, pure_fraction=pure_fraction, window_length=window_length,
                 n_entities=n_entities, n_examples=n_examples, device=device, threads=threads)
    sources = parse_sources(prompts)
    (n, length, batch_size, tau, gamma, min_mass, pure_fraction, exclude, window_length, n_entities,
     n_examples) = check_reading_settings(n=n, length=length, batch_size=batch_size, tau=tau, gamma=gamma, min_mass=min_mass,
                                          pure_fraction=pure_fraction, swap_exclude=swap_exclude,
                                          window_length=window_length, n_entities=n_entities, n_examples=n_examples,
                                          one_tau="head types take one tau")
    n_boot, n_null = positive_int(n_boot, "n_boot"), positive_int(n_null, "n_null")
    out = Path(out) if out is not None else head_types_out(model, gguf)
    stem = layout.figure(out, layout.FIG_HEAD_TYPES)
    names = (layout.HEAD_TYPES, layout.HEAD_TYPES_CORRELATIONS, layout.HEAD_TYPES_CONTINGENCY, layout.HEAD_TYPES_JSON)
    outputs = Outputs([out / f for f in names] + figure_paths(stem), force).check()
    if model is None or isinstance(model, (str, os.PathLike)):
        from posym.model.llm import check_llm_model

        check_llm_model(model, gguf)  # a missing folder or one without a tokenizer: one line, nothing loaded
    if launcher == "slurm":
        if tokenizer is not None or (model is not None and not isinstance(model, (str, os.PathLike))):
            raise PosymError("--launcher slurm runs a model by its name or folder; an in-memory model cannot be sent")
        if dtype is not None and not isinstance(dtype, str):
            raise PosymError(f"--launcher slurm needs dtype as a name (float32, bfloat16, ...), got {dtype!r}")
        args = ["head-types", *(["--model", _job_path(model)] if model is not None else []),
                *[x for k, v in given.items() if v is not None for x in (f"--{k.replace('_', '-')}", _job_path(v))],
                "--prompts", ",".join(sources), "--swap-exclude", str(swap_exclude), "--n", str(n),
                "--length", str(length), "--seed", str(seed), "--gamma", str(gamma), "--n-boot", str(n_boot),
                "--n-null", str(n_null), "--batch-size", str(batch_size), "--out", str(out.absolute()),
                *(["--dtype", dtype] if dtype is not None else []), *(["--force"] if force else []),
                *([] if progress else ["--quiet"])]
        args = [a.replace("--n-entities", "--entities") for a in args]
        plan = FanOut("head-types", {"model": tuple(args)})
        return VerbResult(None, [], submit_fanout(out, plan, slurm_options).text)
    if threads is not None:
        torch.set_num_threads(positive_int(threads, "threads"))
    if progress:
        print(f"head types: output folder {out}{os.sep}", file=sys.stderr, flush=True)

    # ---- inputs
    lm, tok, label, rep, built = load_inputs(model, gguf, tokenizer, device, dtype, sources, n, length, seed,
                                             window_length, n_entities, n_examples)

    # ---- compute: detectors once (on the repeated sequences), then each source's scores and join
    joins, corrs, conts = [], [], []
    with tqdm(total=1 + len(sources), desc="head types", unit="step", disable=not progress) as bar:
        bar.set_postfix_str("detectors")
        det = detector_scores(lm, torch.as_tensor(rep, device=next(lm.parameters()).device), batch_size=batch_size)
        bar.update(1)
        for s in sources:
            bar.set_postfix_str(s)
            sc = source_scores(lm, s, rep, built[s], tau, exclude, batch_size)
            readings = per_prompt_kinds(sc, gamma=gamma, min_mass=min_mass, tau_index=0, n_boot=n_boot, seed=seed)
            join = join_head_types(sc.to_frame(), det, readings, gamma=gamma, min_mass=min_mass,
                                   pure_fraction=pure_fraction)
            joins.append(join.assign(prompt_set=s))
            corrs.append(informative_correlations(join, min_mass, n_boot=n_boot, n_null=n_null, seed=seed).assign(prompt_set=s))
            conts.append(contingency(join))
            bar.update(1)
    lead = lambda df: df[["prompt_set", *[c for c in df.columns if c != "prompt_set"]]]  # noqa: E731
    table, corr_t = (lead(pd.concat(x, ignore_index=True)) for x in (joins, corrs))
    cont_t = lead(pd.concat([c.reset_index().assign(prompt_set=s) for s, c in zip(sources, conts)], ignore_index=True))
    sinks = {s: sink_counts(j) for s, j in zip(sources, joins)}
    pures = {s: pure_counts(j) for s, j in zip(sources, joins)}
    meta = {"model": label, "prompts": list(sources), "n": n, "repeat_length": length, "seed": int(seed),
            "tau": tau, "gamma": gamma, "min_mass": min_mass, "pure_fraction": pure_fraction,
            "sink_share": SINK_SHARE, "swap_exclude": str(swap_exclude),
            "exclude_keys": list(exclude), "n_boot": n_boot, "n_null": n_null, "window_length": window_length,
            "n_entities": n_entities, "n_examples": n_examples, "detectors_on": "repeated",
            "repeated_tokens": int(rep.shape[1]), "sinks": sinks, "pure": pures}

    # ---- write
    outputs.csv(table, out / layout.HEAD_TYPES)
    outputs.csv(corr_t, out / layout.HEAD_TYPES_CORRELATIONS)
    outputs.csv(cont_t, out / layout.HEAD_TYPES_CONTINGENCY)
    outputs.json(meta, out / layout.HEAD_TYPES_JSON)
    outputs.figure(plot_head_type_planes(table, title=f"{label} (swap exclusion: {swap_exclude})",
                                        ncols=2 if len(sources) > 2 else None, pure_fraction=pure_fraction), stem)

    # ---- the printed summary (narrow)
    excl = f"{swap_exclude} (keys {', '.join(map(str, exclude))})" if exclude else "none (SPEC §3: every key)"
    lines = [f"model: {label}",
             f"prompts: {', '.join(sources)}; {n} each; repeated: {rep.shape[1]} tokens",
             f"tau {tau:g}; gamma {gamma:g}; min mass {min_mass:g}; pure fraction {pure_fraction:g}; "
             f"swap exclusion: {excl}",
             "classic types: detectors on the repeated sequences (docs/spec.md §7)",
             "Spearman rho(detector, s_sym - s_pos) per prompt set, heads with swap mass >= min mass,",
             f"95% percentile-bootstrap CI over heads ({n_boot} resamples):",
             headline_rho(corr_t)]
    for s, corr, cont in zip(sources, corrs, conts):
        lines += [f"{s}: Spearman rho(detector, s_sym - s_pos), 95% bootstrap CI, p from {n_null} label shuffles",
                  _fmt_corr(corr),
                  f"{s}: classic type (rows) x posym type (columns), heads. positional, symbolic: count (mean",
                  "share of prompts on which they are pure); mean-only: pure on the mean over prompts but on",
                  f"< {pure_fraction:.0%} of them (counted mixed); sink-flag: first-token share >= {SINK_SHARE:g}, "
                  "whatever the type",
                  format_contingency(cont), *_pure_line(s, pures[s], pure_fraction),
                  *_sink_line(s, sinks[s], SINK_SHARE)]
    lines += [f"wrote {len(outputs.written)} files to {out}{os.sep}", READ_POINTER]
    text = "\n".join(lines)
    return VerbResult(table, outputs.written, text, {"correlations": corr_t, "contingency": cont_t, "meta": meta})


__all__ = ["head_types", "head_types_out", "parse_sources"]
