"""``posym head-sets``: which heads and which frequencies carry each mechanism (issue 37; docs/head_sets.md).

For each typed head set of a model (read from its head readout, :mod:`posym.heads.selection`) and its K
matched random controls (``random:<type>,seed=seed+j``): (b) frequency-ablation dose curves inside the
set (``freq-mask:keep=…,heads=…``: the k slowest, fastest or random IDs dropped) and (a) any per-head
intervention applied to the set only (``NAME:…,heads=…``; the registry's ``Intervention.per_head``:
temperature and freq-mask today, docs/interventions.md), accuracy vs added length; an intervention that
is not per head is refused in one line.

Every intervention's per-prompt outcomes (:func:`posym.lengthgen.outcomes.task_outcomes`, the same
prompts for all) are appended to ``OUT/head_sets_outcomes.jsonl`` as they are measured: a rerun with the
same arguments (also after a kill) measures only what is missing; ``--force`` replaces the tables and
figures, never the cache (delete it to measure afresh).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from posym.checks import check_int
from posym.errors import PosymError
from posym.heads.tracking import lengthened_score_table
from posym.heads.selection import MATCHES, TYPE_NAMES, Head, control_draws, format_heads, read_readout, typed_heads
from posym.interventions import describe, intervened, parse_intervention
from posym.interventions.registry import per_head_names
from posym.lengthgen.outcomes import task_outcomes
from posym.model.adapters import get_adapter
from posym.runs import layout
from posym.tasks.prompts import TASKS
from posym.runs.resolve import check_model_folder, resolve_model
from posym.studies.head_sets.cache import READOUT, OutcomeCache
from posym.studies.head_sets.llm import LLM_READOUT_N, REPEATED, cached_llm_readout, choice_evaluator, load_offline_llm, \
    readout_prompts, repeated_head_reader
from posym.studies.head_sets.figures import plot_dose_curves, plot_temperature_curve
from posym.studies.head_sets.study import DEFAULT_SETS, DEFAULT_TEMPERATURE, DIRECTIONS, IDS, TEMPERATURE_LENGTHS, \
    null_text
from posym.studies.head_sets.tables import Evaluate, ReadHeads, cell_rows, id_control_draws, plan_cells, readout_row, \
    study_table, table_markdown
from posym.verbs import Outputs, VerbResult, figure_paths


#: Default ``--readout-n`` of a trained model (an LLM's: :data:`~posym.studies.head_sets.llm.LLM_READOUT_N`).
READOUT_N = 64


def default_doses(n_freq: int) -> tuple[int, ...]:
    """1, 2, 4, … up to half the rotary pairs."""
    out, k = [], 1
    while k <= max(1, n_freq // 2):
        out.append(k)
        k *= 2
    return tuple(out)


def check_settings(*, sets: Sequence[str], controls: int, directions: Sequence[str], temperature: Sequence[str],
                   lengths: Sequence[int], temperature_lengths: Sequence[int], doses: Sequence[int] | None,
                   n: int) -> tuple[list[str], list[str]]:
    """The options checked before any work (one-line PosymError each): ``(sets, canonical intervention
    strings)``; ``temperature``: the ``--intervene`` settings, each per head (``Intervention.per_head``)."""
    sets = list(dict.fromkeys(str(s) for s in sets))
    bad = [s for s in sets if s not in TYPE_NAMES or s.startswith("random")]
    if bad or not sets:
        raise PosymError(f"--sets: unknown set {bad[0] if bad else '(none given)'!r}; sets are head types: {', '.join(TYPE_NAMES)}")
    check_int(controls, "--controls", lo=1)
    check_int(n, "--n", lo=1)
    bad = [d for d in directions if d not in DIRECTIONS]
    if bad or not directions:
        what = repr(bad[0]) if bad else "(none given)"
        raise PosymError(f"--directions: unknown direction {what}; give some of {', '.join(DIRECTIONS)}")
    for name, values in (("--lengths", lengths), ("--temperature-lengths", temperature_lengths)):
        for v in values:
            check_int(v, name, lo=0)
    for k in doses or ():
        check_int(k, "--doses", lo=1)
    temps = []
    for text in temperature:
        spec = parse_intervention(text)
        if spec is None:
            raise PosymError("--intervene none: give an intervention to apply to each head set, "
                             "e.g. temperature:beta=0.5,n_train=17")
        canon = describe(spec)
        if not type(spec).per_head:
            raise PosymError(f"--intervene {text}: {spec.name} is not exact per query head; the head-set study takes "
                             f"per-head interventions ({per_head_names()})")
        if getattr(spec, "heads", None) is not None or getattr(spec, "layers", None) is not None:
            raise PosymError(f"--intervene {text}: give it without heads= or layers= (the study applies it to each "
                             "head set), e.g. temperature:beta=0.5,n_train=17")
        temps.append(canon)
    return sets, temps


def match_settings(match: str, directions: Sequence[str] | None,
                   temperature: Sequence[str] | None) -> tuple[list[str], list[str], list[str]]:
    """``(directions, per-head interventions, notes)`` of a study matched by ``match`` (None: the defaults).
    ``layer``/``count``: all :data:`DIRECTIONS` and :data:`DEFAULT_TEMPERATURE`. ``ids`` (the frequency
    control, SPEC §6 / docs/head_sets.md): no ``random`` direction (random against random: refused when given,
    dropped with a note from the defaults) and no per-head intervention part (it has no frequency control:
    refused when given, skipped with a note by default). One-line PosymError for an unknown ``match``."""
    if match not in (*MATCHES, IDS):
        raise PosymError(f"--match: {match!r} is not a match; give {', '.join(MATCHES)} or {IDS}")
    given_dirs, given_temps = directions is not None, temperature is not None
    directions = list(DIRECTIONS if directions is None else directions)
    temperature = list(DEFAULT_TEMPERATURE if temperature is None else temperature)
    if match != IDS:
        return directions, temperature, []
    notes = []
    if "random" in directions:
        if given_dirs:
            raise PosymError("--directions random: under --match ids the controls are random frequency IDs already "
                             "(random against random); give low and/or high, or --match layer|count")
        directions = [d for d in directions if d != "random"]
        notes.append("--match ids: the random direction is not measured (its controls are random IDs: random against random)")
    if temperature:
        if given_temps:
            raise PosymError(f"--intervene {temperature[0]}: under --match ids a per-head intervention has no frequency "
                             "control; measure it in a study with --match layer|count")
        notes.append("--match ids: the per-head intervention part is skipped (no frequency control; --match layer|count "
                     "measures it)")
    return directions, [], notes


def resolve_sets(table: pd.DataFrame, sets: Sequence[str], n_layers: int, n_heads: int, controls: int,
                 seed: int, match: str = "layer") -> tuple[dict[str, tuple[Head, ...]],
                                                          dict[str, list[tuple[int, tuple[Head, ...]]]], list[str]]:
    """Each set's heads read from the readout ``table``, its K distinct controls ``(seed, heads)`` matched by
    ``match`` (``layer`` | ``count``: :func:`posym.heads.selection.control_draws` — all of them when at most K
    exist, the exact null; ``ids``: none here, the controls are drawn per dose cell inside the set's own heads,
    :func:`~posym.studies.head_sets.tables.id_control_draws`, so a set of any size is allowed) and the notes of the
    sets skipped (no heads). A set that cannot be matched, or a head outside the model, is a one-line
    PosymError (``--match count``, or drop the set from ``--sets``)."""
    if match not in (*MATCHES, IDS):
        raise PosymError(f"--match: {match!r} is not a match; give {', '.join(MATCHES)} or {IDS}")
    typed, ctrls, notes = {}, {}, []
    for s in sets:
        heads = typed_heads(table, s)
        if not heads:
            notes.append(f"{s}: no head of this type in the readout; skipped")
            continue
        out = [format_heads([h]) for h in heads if not (0 <= h[0] < n_layers and 0 <= h[1] < n_heads)]
        if out:
            raise PosymError(f"--readout: {s} head {out[0]} is not in this model ({n_layers} layers x {n_heads} heads); "
                             "give the readout of the same model")
        try:
            ctrls[s] = [] if match == IDS else control_draws(heads, n_layers, n_heads, controls, seed, s, match)
        except PosymError as e:
            raise PosymError(f"{e}, or drop {s} from --sets") from None
        typed[s] = heads
    if not typed:
        raise PosymError(f"no head set has heads in the readout ({'; '.join(notes)}); give other --sets or another --readout")
    return typed, ctrls, notes


def measure_head_sets(evaluate: Evaluate, readout: pd.DataFrame, *, n_layers: int, n_heads: int, n_freq: int,
                      sets: Sequence[str] = DEFAULT_SETS, controls: int = 20, seed: int = 0,
                      doses: Sequence[int] | None = None, directions: Sequence[str] | None = None,
                      lengths: Sequence[int] = (0,), temperature: Sequence[str] | None = None,
                      temperature_lengths: Sequence[int] = TEMPERATURE_LENGTHS, readout_name: str = "",
                      task: str = "", match: str = "layer",
                      read_heads: ReadHeads | None = None) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The study on any model: ``evaluate(intervention, added length)`` gives per-prompt outcomes
    (``correct``, ``rank``; the same prompts for every intervention). Returns ``(head_sets table,
    controls table, notes)`` (columns: docs/head_sets.md); ``match``: how the controls are matched (``layer``
    | ``count``, :func:`resolve_sets`; ``ids``: the set's own heads with k random frequency IDs dropped,
    :func:`~posym.studies.head_sets.tables.id_control_draws`, :func:`match_settings`); ``directions`` /
    ``temperature``: None = the defaults of :func:`match_settings`; ``read_heads(intervention, added length)``:
    the per-head readout (layer, head, s_pos, s_sym) giving each dose cell's ``s_pos_none, s_pos, s_sym_none,
    s_sym`` (the typed set's means; None: NaN)."""
    directions, temperature, match_notes = match_settings(match, directions, temperature)
    sets, temps = check_settings(sets=sets, controls=controls, directions=directions, temperature=temperature,
                                 lengths=lengths, temperature_lengths=temperature_lengths, doses=doses, n=1)
    doses = tuple(int(k) for k in doses) if doses is not None else default_doses(n_freq)
    if max(doses) >= n_freq:
        raise PosymError(f"--doses: k = {max(doses)} drops every rotary pair or more (the model has {n_freq} "
                         f"frequency IDs); give k from 1 to {n_freq - 1}")
    typed, ctrls, notes = resolve_sets(readout, sets, n_layers, n_heads, controls, check_int(seed, "--seed", lo=0), match)
    cells = plan_cells(list(typed), doses=doses, directions=directions, lengths=lengths, temperature=temps,
                       temperature_lengths=temperature_lengths, n_freq=n_freq, seed=seed)
    rows, crows = [], []
    for cell in cells:
        heads = typed[cell.set]
        cc = ([(j, heads, ids) for j, ids in id_control_draws(cell.k, n_freq, controls, seed, cell.dropped)]
              if match == IDS else ctrls[cell.set])
        row, c = cell_rows(cell, heads, cc, n_freq, evaluate)
        rows.append({**row, **readout_row(cell, typed[cell.set], n_freq, read_heads)})
        crows += c
    whole = {(t, int(e)): evaluate(t, int(e)) for t in temps for e in temperature_lengths}
    table = study_table(rows, readout=readout_name, task=task, seed=seed, match=match,
                        all_heads={k: float(v["correct"].mean()) for k, v in whole.items()},
                        all_heads_rank={k: float(v["rank"].mean()) for k, v in whole.items()})
    return table, pd.DataFrame(crows), notes + match_notes


def _cached(fn: Evaluate, cache: OutcomeCache, bar: Any, measured: list[int]) -> Evaluate:
    """``fn`` through ``cache``: a (canonical intervention, length) measured once, appended as measured."""
    def evaluate(interv: str, extra: int) -> pd.DataFrame:
        canon = describe(parse_intervention(interv))
        got = cache.get(canon, extra)
        if got is None:
            got = fn(canon, int(extra))
            cache.put(canon, extra, got)
            measured[0] += 1
            bar.update(1)
            bar.set_postfix_str(f"{canon[:40]} +{extra}")
        return got
    return evaluate


def head_sets(model: str | os.PathLike | None = None, *, readout: str | os.PathLike, out: str | os.PathLike,
              llm: str | os.PathLike | None = None, sets: Sequence[str] = DEFAULT_SETS, controls: int = 20,
              seed: int = 0, doses: Sequence[int] | None = None, directions: Sequence[str] | None = None,
              intervene: Sequence[str] | None = None, lengths: Sequence[int] = (0,),
              temperature_lengths: Sequence[int] | None = None, n: int = 200, task: str | None = None,
              match: str = "layer", readout_n: int | None = None, llm_seed: int = 0, force: bool = False,
              progress: bool = True) -> VerbResult:
    """The head-set study of one trained posym ``model`` (run, Trainer output or model folder; module doc)
    or of an offline ``llm`` (``smollm2``, ``gemma3-270m`` or a model folder with its tokenizer; the
    ``choice`` protocol of SPEC §1.5, :mod:`posym.studies.head_sets.llm`): ``head_sets.csv`` (one row per
    cell), ``head_sets_controls.csv`` (one row per control draw), ``head_sets.md``, ``head_sets.json`` and
    two figures per set in ``out``. ``doses``: default 1, 2, 4, … up to half the rotary pairs; ``lengths``:
    the dose curves' added lengths (an LLM: target-window lengths ≥ 1); ``temperature_lengths``: the
    ``intervene`` part's (default 0, 50, 100, 200; an LLM: ``lengths``); ``match``: the controls' matching
    (``layer``: as many heads per layer, ``count``: as many heads in all, ``ids``: the same heads with k
    random frequency IDs dropped — no ``random`` direction and no ``intervene`` part there);
    ``directions`` / ``intervene``: None = all three directions and the log-n temperature
    (:func:`match_settings`); ``readout_n``: prompts of the head readout under each dose (0 = off; None:
    :data:`READOUT_N` (64) for a trained model — data seed ``READOUT_SEED_OFFSET + seed``,
    :func:`posym.heads.tracking.lengthened_score_table` — and :data:`~posym.studies.head_sets.llm.LLM_READOUT_N`
    (8) for an LLM — ``posym head-types``' repeated prompts with the readout's settings,
    :func:`~posym.studies.head_sets.llm.readout_prompts`); ``n``: prompts per length;
    ``llm_seed``: the 1-hop samples' run index. Every option is checked before the model loads or a file
    is written."""
    from tqdm.auto import tqdm

    if (model is None) == (llm is None):
        raise PosymError("give a trained posym model (MODEL) or an offline LLM (--model smollm2|gemma3-270m|FOLDER), "
                         "not both" if model is not None else "give a trained posym model (MODEL) or an offline LLM "
                         "(--model smollm2|gemma3-270m|FOLDER)")
    if temperature_lengths is None:
        temperature_lengths = tuple(lengths) if llm is not None else TEMPERATURE_LENGTHS
    directions, intervene, notes = match_settings(match, directions, intervene)
    sets, temps = check_settings(sets=sets, controls=controls, directions=directions, temperature=intervene,
                                 lengths=lengths, temperature_lengths=temperature_lengths, doses=doses, n=n)
    readout_n = (READOUT_N if llm is None else LLM_READOUT_N) if readout_n is None else check_int(readout_n, "--readout-n", lo=0)
    check_int(llm_seed, "--llm-seed", lo=0)
    if llm is not None:
        if task not in TASKS:
            raise PosymError(f"--task: an LLM study needs --task {' or '.join(TASKS)} (the 1-hop prompts of SPEC §1.5)")
        short = [int(x) for x in (*lengths, *temperature_lengths) if int(x) < 1]
        if short:
            raise PosymError(f"--lengths: {short[0]} is not a target-window length of the 1-hop prompts (SPEC §1.5); "
                             "give lengths >= 1 for an LLM, e.g. --lengths 32")
    table = read_readout(readout)
    prompts = None
    if llm is not None and readout_n:
        prompts = readout_prompts(readout, table, readout_n)
        if prompts.source != REPEATED:
            notes.append(f"LLM: the readout was made on {prompts.source} prompts; the head readout under the ablation "
                         "reads repeated ones (posym head-types --prompts repeated): not measured")
            prompts, readout_n = None, 0
        else:
            from posym.heads.swaps import parse_swap_exclude

            check_int(prompts.repeat_length, "head_types.json repeat_length", lo=2)
            parse_swap_exclude(prompts.swap_exclude)
    for s in sets:
        typed_heads(table, s)  # a readout lacking the type's columns: one line, before any work
    if llm is None:
        ckpt, task = check_model_folder(model, task)
    out = Path(out)
    stems = [out / layout.FIG_HEAD_SETS_DOSES.format(set=s) for s in sets] + \
            [out / layout.FIG_HEAD_SETS_TEMPERATURE.format(set=s) for s in sets]
    files = [out / f for f in (layout.HEAD_SETS, layout.HEAD_SETS_CONTROLS, layout.HEAD_SETS_MD, layout.HEAD_SETS_JSON)]
    outputs = Outputs(files + [p for s in stems for p in figure_paths(s)], force).check()
    if llm is not None:
        lm, tok, label = load_offline_llm(llm)
        net, key = lm, {"model": label, "task": task, "n": int(n), "data_seed": int(llm_seed), "protocol": "choice"}
    else:
        net = resolve_model(model, task).model
        key = {"model": str(Path(ckpt).resolve()), "task": task, "n": int(n), "data_seed": int(seed)}
    ad = get_adapter(net)
    n_layers, n_heads, n_freq = ad.n_layers, ad.n_heads, ad.rotary_dim // 2
    k_max = max(doses) if doses else 1
    if k_max >= n_freq:
        raise PosymError(f"--doses: k = {k_max} drops every rotary pair or more (the model has {n_freq} frequency IDs); "
                         f"give k from 1 to {n_freq - 1}")
    typed = resolve_sets(table, sets, n_layers, n_heads, controls, seed, match)[0]  # unmatched sets: one line, no work
    cache = OutcomeCache(out / layout.HEAD_SETS_OUTCOMES, key)
    rkey = {**key, "n": int(readout_n)} if prompts is None else {"model": label, **prompts.key()}
    rcache = OutcomeCache(out / layout.HEAD_SETS_OUTCOMES, rkey, kind=READOUT)
    bar = tqdm(desc=f"head-sets {task}", disable=not progress, unit="iv")
    measured = [0]
    if llm is not None:
        outcomes = choice_evaluator(lm, tok, label, task, n, llm_seed)
    else:
        def outcomes(canon: str, extra: int) -> pd.DataFrame:
            return task_outcomes(net, task, extra, n, seed, intervene=lambda: intervened(net, canon))

    def heads_under(canon: str, extra: int) -> pd.DataFrame:
        with intervened(net, canon):
            return lengthened_score_table(net, task, readout_n, extra, seed)

    if prompts is not None:
        def counted(canon: str) -> None:
            measured[0] += 1
            bar.update(1)
            bar.set_postfix_str(f"readout {canon[:40]}")

        read_heads = cached_llm_readout(repeated_head_reader(lm, tok, prompts), rcache,
                                        sorted({h[0] for hs in typed.values() for h in hs}), counted)
    else:
        read_heads = _cached(heads_under, rcache, bar, measured) if readout_n else None
    t, c, skipped = measure_head_sets(_cached(outcomes, cache, bar, measured), table, n_layers=n_layers, n_heads=n_heads,
                                      n_freq=n_freq, sets=sets, controls=controls, seed=seed, doses=doses,
                                      directions=directions, lengths=lengths, temperature=temps,
                                      temperature_lengths=temperature_lengths, readout_name=str(Path(readout)),
                                      task=task, match=match,
                                      read_heads=read_heads)
    bar.close()
    notes = skipped + notes
    k_eff = {str(k): int(v) for k, v in t.groupby("set")["n_controls"].max().items()}
    outputs.csv(t, out / layout.HEAD_SETS)
    outputs.csv(c, out / layout.HEAD_SETS_CONTROLS)
    outputs.text(table_markdown(t, null_text(match), window=llm is not None) + "".join(f"\nNote: {x}\n" for x in notes),
                 out / layout.HEAD_SETS_MD)
    outputs.json({"model": str(model if llm is None else llm), "task": task, "readout": str(Path(readout)),
                  "sets": sorted(set(t["set"])), "controls": controls, "n_controls": k_eff,
                  "control_seeds": {str(k): sorted(int(x) for x in set(v)) for k, v in c.groupby("set")["control_seed"]},
                  "seed": seed, "doses": sorted(set(int(k) for k in t.loc[t["part"] == "dose", "k"])),
                  "directions": list(directions), "temperature": temps, "lengths": list(lengths),
                  "temperature_lengths": list(temperature_lengths), "n": n, "readout_n": readout_n,
                  **({"readout_prompts": {**prompts.key(), "from": layout.HEAD_TYPES_JSON if prompts.from_file else
                                          "posym head-types' defaults"}} if prompts is not None else {}),
                  "match": match,
                  "null": null_text(match), "notes": notes, "measured_now": measured[0],
                  **({"llm": str(llm), "protocol": "choice", "llm_seed": llm_seed} if llm is not None else {})},
                 out / layout.HEAD_SETS_JSON)
    for s in sorted(set(t["set"])):
        if ((t["set"] == s) & (t["part"] == "dose")).any():
            outputs.figure(plot_dose_curves(t, s, window=llm is not None, rank=llm is not None),
                           out / layout.FIG_HEAD_SETS_DOSES.format(set=s))
        if ((t["set"] == s) & (t["part"] == "temperature")).any():
            outputs.figure(plot_temperature_curve(t, s, window=llm is not None, rank=llm is not None),
                           out / layout.FIG_HEAD_SETS_TEMPERATURE.format(set=s))
    summary = (f"head-sets {task}: {len(t)} cells over {', '.join(sorted(set(t['set'])))} (K = {controls} controls asked, "
               f"{', '.join(f'{k} {v}' for k, v in k_eff.items())} distinct; "
               f"null: {null_text(match)}; n = {n}); {measured[0]} interventions measured now, the rest from the cache\n"
               + "".join(f"note: {x}\n" for x in notes) + f"wrote {out / layout.HEAD_SETS}")
    return VerbResult(table=t, files=list(outputs.written), summary=summary, data={"notes": notes, "measured": measured[0]})


__all__ = ["OutcomeCache", "READOUT_N", "check_settings", "default_doses", "head_sets", "match_settings", "measure_head_sets",
           "resolve_sets"]
