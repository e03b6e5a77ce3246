"""``posym scores``: positional/symbolic scores of every head of every checkpoint (SPEC §3, Paper B)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from posym.errors import PosymError
from posym.constants import GAMMA
from posym.reading import MIN_MASS, READ_POINTER
from posym.heads.scores import DEFAULT_TAU
from posym.heads.tracking import score_table
from posym.interventions import Intervention, check_interventions, intervened, plan_interventions
from posym.runs import layout
from posym.runs.lock import in_progress_note
from posym.runs.resolve import model_architecture, show_architecture
from posym.runs.tables import INTERVENTION, with_intervention
from posym.verbs import Outputs, VerbResult


def _prompt_ids(task: str, prompts: str | os.PathLike | None, n_prompts: int, seed: int):
    from posym.tasks import make_split
    from posym.tasks.export import read_prompt_ids

    if n_prompts < 1:
        raise PosymError(f"need at least one prompt, got n={n_prompts}")
    return read_prompt_ids(prompts, task) if prompts else make_split(task, "val", seed=seed, n=n_prompts).input_ids


def _encoding(folder: Path) -> str:
    """The training-time positional encoding of a model folder's ``config.json``: posym's ``posym_pe``
    (canonical; absent = ``rope``, :mod:`posym.model.pe`) and an HF family's RoPE settings where set."""
    from posym.model.pe import CONFIG_ATTR, DEFAULT_PE, parse_pe

    cfg = layout.read_json(Path(folder) / layout.CONFIG_JSON)
    try:
        pe = parse_pe(cfg.get(CONFIG_ATTR) or DEFAULT_PE).name
    except PosymError:
        pe = str(cfg.get(CONFIG_ATTR))
    rope = [f"{k}={cfg[k]}" for k in ("rope_theta", "rope_scaling", "rope_parameters") if cfg.get(k) is not None]
    return " ".join([pe, *rope])


def check_targets(targets: list[tuple[int | None, Path]], task: str) -> None:
    """Before any model is loaded: every folder of a series has one architecture and one training-time
    positional encoding (SPEC §3 curves compare one model over training), and a vocabulary that holds
    the task's ids (SPEC §1.1)."""
    from posym.tasks import get_vocab

    need = get_vocab(task).size
    first = None
    first_pe = None
    for _, folder in targets:
        pe = _encoding(folder)
        if first_pe is None:
            first_pe = (folder, pe)
        elif pe != first_pe[1]:
            raise PosymError(f"the series mixes positional encodings: {first_pe[0]} has {first_pe[1]} but {folder} "
                             f"has {pe}; score each model's checkpoints into its own table")
        vocab = layout.read_json(Path(folder) / layout.CONFIG_JSON).get("vocab_size")
        if isinstance(vocab, int) and vocab < need:
            raise PosymError(f"model at {folder} has vocab_size {vocab} < {need} of the {task} task")
        arch = model_architecture(folder)
        if first is None:
            first = (folder, arch)
        elif arch != first[1]:
            raise PosymError(f"the series mixes architectures: {first[0]} is {show_architecture(first[1])} but {folder} "
                             f"is {show_architecture(arch)}; score each model's checkpoints into its own table")


def _score_targets(targets: list[tuple[int | None, Path]], task: str, ids, taus: Sequence[float], per_prompt: bool,
                   progress: bool, device: str, swap_exclude: str = "none",
                   specs: Sequence[Intervention | None] = (None,)) -> pd.DataFrame:
    """One block of rows per (step, model folder) and intervention (``specs``, checked on the first
    model before any scoring); a ``step`` column unless the only step is None."""
    from tqdm.auto import tqdm

    from posym.heads.swaps import parse_swap_exclude
    from posym.runs.resolve import resolve_model

    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise PosymError("--device cuda requested but CUDA is not available")
    exclude = parse_swap_exclude(swap_exclude, ids)
    check_targets(targets, task)
    frames = []
    first, _, _ = resolve_model(targets[0][1], task=task, device=device, any_family=True)
    check_interventions(first, specs)  # one architecture (check_targets): the first model answers for all
    for i, (step, p) in enumerate(tqdm(targets, desc="scoring checkpoints", disable=not progress or len(targets) == 1)):
        model = first if i == 0 else resolve_model(p, task=task, device=device, any_family=True).model
        for spec in specs:
            with intervened(model, spec) as text:
                df = score_table(model, ids, taus, step=step, per_prompt=per_prompt, exclude_keys=exclude)
            frames.append(with_intervention(df, text))
    return pd.concat(frames, ignore_index=True)


def score_checkpoints(path: str | os.PathLike, task: str | None = None, prompts: str | os.PathLike | None = None,
                      n_prompts: int = 512, taus: Sequence[float] = (DEFAULT_TAU,), per_prompt: bool = False,
                      steps: Sequence[int] | None = None, seed: int = 0, progress: bool = True,
                      device: str = "cpu", swap_exclude: str = "none", intervene: Sequence[str] | None = None,
                      layers: Sequence[int] | None = None) -> pd.DataFrame:
    """Scores of every checkpoint of a run directory (one block of rows per ``step``), or of one HF
    checkpoint directory of any supported RoPE family (GPT-J, Llama, Gemma, ...; docs/models.md; no
    ``step`` column). Prompts: a JSONL file, else the first
    ``n_prompts`` validation prompts of the task (the set head tracking uses). ``device``: where the
    models run (e.g. "cuda"); scores are float32/float64 on every device. ``swap_exclude``: keys kept
    out of the swaps, ``none`` (SPEC §3) | ``bos`` | ``first:K`` (SPEC §3). ``intervene``: canonical
    intervention strings (docs/interventions.md), one measurement each, in order, with ``layers`` for
    temperature / freq-mask; the ``intervention`` column holds the canonical string (``none``: the untouched model, the default)."""
    specs = plan_interventions(intervene, layers)
    path = Path(path)
    if not path.is_dir():
        raise PosymError(f"no such run or model directory: {path}" if not path.exists() else f"{path} is not a folder")
    ckpts = layout.list_checkpoints(path)
    if steps is not None and not ckpts:
        raise PosymError(f"{path} is one model folder, not a run with checkpoints: --steps selects checkpoints "
                         "of a run directory; drop --steps or give the run directory")
    if ckpts and steps is not None:
        wanted = set(steps)
        missing = sorted(wanted - {s for s, _ in ckpts})
        if missing:
            have = [s for s, _ in ckpts]
            raise PosymError(f"step{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} "
                             f"{'have' if len(missing) > 1 else 'has'} no checkpoint in {path} (it has "
                             f"{len(have)} checkpoints, steps {have[0]}..{have[-1]}); give steps it has")
        ckpts = [(s, p) for s, p in ckpts if s in wanted]
    targets = list(ckpts) if ckpts else [(None, path)]
    task = task or layout.read_meta(path).get("task") or (layout.read_meta(targets[0][1]).get("task") if ckpts else None)
    if task is None:
        raise PosymError(f"cannot tell the task of {path}: pass --task number|letter")
    return _score_targets(targets, task, _prompt_ids(task, prompts, n_prompts, seed), taus, per_prompt, progress,
                          device, swap_exclude, specs)


def score_series(folders: Sequence[str | os.PathLike], task: str | None = None,
                 prompts: str | os.PathLike | None = None, n_prompts: int = 512,
                 taus: Sequence[float] = (DEFAULT_TAU,), per_prompt: bool = False, steps: Sequence[int] | None = None,
                 seed: int = 0, progress: bool = True, device: str = "cpu", swap_exclude: str = "none",
                 intervene: Sequence[str] | None = None, layers: Sequence[int] | None = None) -> pd.DataFrame:
    """Scores of every checkpoint of a series (:func:`posym.runs.layout.checkpoint_series`: the
    ``checkpoint-N/`` folders of an HF ``Trainer`` run, or a list of model folders), any supported
    family, as one tidy table with a ``step`` column — the ``scores.csv`` that ``posym dynamics`` turns
    into Fig. 2 curves and pure-head steps (SPEC §3). Each block equals scoring its folder alone.
    ``intervene``, ``layers``: as :func:`score_checkpoints`."""
    specs = plan_interventions(intervene, layers)
    series = layout.checkpoint_series(list(folders))
    if steps is not None:
        wanted = set(steps)
        series = [(s, p) for s, p in series if s in wanted]
        if not series:
            raise PosymError(f"none of the steps {sorted(wanted)} is in the series")
    task = task or layout.read_meta(series[0][1]).get("task")
    if task is None:
        raise PosymError("cannot tell the task of the series: pass --task number|letter")
    return _score_targets(series, task, _prompt_ids(task, prompts, n_prompts, seed), taus, per_prompt, progress,
                          device, swap_exclude, specs)


def _sequence_model(model: str | os.PathLike, text: bool, device: str):
    """(model, tokenizer or None) for :func:`score_sequences`: a bundled name, a ``.gguf`` file or
    (``text``) a model folder with its tokenizer through :func:`posym.model.llm.load_llm`; otherwise
    a model folder of any supported family (no tokenizer needed for token ids)."""
    from posym.model.llm import BUNDLED, check_llm_model, load_llm

    name = str(model)
    if text or name in BUNDLED or name.endswith(".gguf"):
        try:
            check_llm_model(model)  # a missing folder, a bundled model not installed, no tokenizer: one line
        except PosymError as exc:
            if "has no tokenizer" not in str(exc):
                raise
            raise PosymError(f"{model} has no tokenizer, and --text is tokenized with the model's own; "
                             "give token ids with --ids instead") from None
        return load_llm(model, device=device, dtype="float32")
    from posym.model.causal_lm import load_causal_lm

    folder = Path(model)
    if not folder.is_dir():
        raise PosymError(f"no such model folder: {folder}" if not folder.exists() else f"{folder} is not a folder")
    return load_causal_lm(folder, device=device), None


def score_sequences(model: str | os.PathLike, *, text: str | os.PathLike | None = None,
                    ids: str | os.PathLike | None = None, blocks: int | None = None,
                    taus: Sequence[float] = (DEFAULT_TAU,), per_prompt: bool = False, swap_exclude: str = "bos",
                    batch_size: int = 64, device: str = "cpu", progress: bool = True,
                    intervene: Sequence[str] | None = None, layers: Sequence[int] | None = None) -> pd.DataFrame:
    """Scores of every head of a model on a researcher's own sequences (SPEC §3; query = each
    sequence's last token): ``text`` (one text per line, tokenized with the model's tokenizer, a start
    token as the tokenizer adds it) or ``ids`` (one sequence of the model's token ids per line;
    :func:`posym.tasks.sequences.read_id_sequences`). Sequences of one length are scored as one
    batch, so lengths may differ. ``blocks``: Paper B's block version with that many contiguous
    blocks over each sequence's keys (default: token swaps). ``swap_exclude``: keys kept out of the
    swaps (``none``, ``bos``, ``first:K``; :func:`posym.heads.scores.parse_swap_exclude`); default ``bos``,
    because a real LLM's first token is an attention sink that otherwise reads as a pure symbolic
    head (docs/llm.md, "Head types side by side").
    ``model``: a model folder (with its tokenizer for ``text``), a ``.gguf`` file or a bundled name.
    Returns the ``scores.csv`` table (mean over sequences, ``n_prompts``) or, with ``per_prompt``,
    one row per sequence (``prompt`` = its index among the file's non-blank lines). ``intervene``,
    ``layers``: as :func:`score_checkpoints` (checked on the loaded model before any scoring)."""
    from tqdm.auto import tqdm

    from posym.heads.scores import head_scores, vocab_size
    from posym.heads.swaps import parse_swap_exclude
    from posym.tasks.sequences import MIN_TOKENS, check_sequences, group_by_length, read_id_sequences, read_text_lines

    # a bad form: one line before anything is read or loaded; the keys it keeps out need tokens too
    min_tokens = MIN_TOKENS + len(parse_swap_exclude(swap_exclude))
    specs = plan_interventions(intervene, layers)
    if (text is None) == (ids is None):
        raise PosymError("give exactly one of text= (a text file) or ids= (a token-id file)")
    if blocks is not None and (isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 2):
        raise PosymError(f"blocks must be an integer >= 2 (blocks to swap), got {blocks!r}")
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise PosymError("--device cuda requested but CUDA is not available")
    source = str(text if text is not None else ids)
    seqs = read_id_sequences(ids) if ids is not None else None
    lines = read_text_lines(text) if text is not None else None
    if seqs is not None:  # before loading: the folder's config.json bounds the ids
        cfg = Path(model) / layout.CONFIG_JSON
        vocab = layout.read_json(cfg).get("vocab_size") if cfg.is_file() else None
        check_sequences(seqs, vocab if isinstance(vocab, int) else None, source, min_tokens)
    lm, tok = _sequence_model(model, text is not None, device)
    if lines is not None:
        from posym.tasks.sequences import tokenize_texts

        seqs = tokenize_texts(tok, lines)
    check_sequences(seqs, vocab_size(lm), source, min_tokens)
    if blocks is not None and min(len(s) for s in seqs) - 1 < 2 * blocks:
        raise PosymError(f"{source}: a sequence of {min(len(s) for s in seqs)} tokens cannot hold {blocks} blocks "
                         "of two keys or more; use fewer --blocks")
    check_interventions(lm, specs)
    groups = group_by_length(seqs)
    tables = []
    for spec in specs:
        frames = []
        with intervened(lm, spec) as label:
            for length, idx in tqdm(groups.items(), desc="scoring sequences",
                                    disable=not progress or len(groups) * len(specs) == 1):
                batch = torch.tensor([seqs[i] for i in idx], dtype=torch.long, device=device)
                with torch.no_grad():
                    res = head_scores(lm, batch, taus, blocks=blocks, batch_size=batch_size,
                                      exclude_keys=parse_swap_exclude(swap_exclude, batch))
                df = res.to_frame(mean_over_prompts=False)
                df["prompt"] = np.asarray(idx)[df["prompt"].to_numpy()]
                frames.append(df)
        df = pd.concat(frames, ignore_index=True).sort_values(["prompt", "layer", "head", "tau"], ignore_index=True)
        if not per_prompt:
            df = df.groupby(["layer", "head", "tau"], as_index=False)[["s_pos", "s_sym", "entropy", "swap_mass"]].mean()
            df["n_prompts"] = len(seqs)
        tables.append(with_intervention(df, label))
    return pd.concat(tables, ignore_index=True)


#: Rows of the per-head table that ``posym scores --text / --ids`` prints (the file holds them all).
FIRST_ROWS = 5
#: Heads named per kind in the summary of ``posym scores --text / --ids`` before "… (N in all)".
NAMED_HEADS = 12


def _named(heads: pd.DataFrame) -> str:
    names = [f"L{int(r.layer)}.H{int(r.head)}" for r in heads.itertuples()]
    more = f", … ({len(names)} in all)" if len(names) > NAMED_HEADS else ""
    return ", ".join(names[:NAMED_HEADS]) + more if names else "none"


def _heads_summary(table: pd.DataFrame, swap_exclude: str = "bos", gamma: float = GAMMA) -> list[str]:
    """The head counts printed before a table of scores of a model's own sequences (SPEC §3): per
    intervention and τ, the heads with too little attention on the swapped keys to be read (mean
    ``swap_mass`` < :data:`posym.reading.MIN_MASS`: uninformative), and among the others the pure
    positional and pure symbolic heads at ``gamma`` (:func:`posym.heads.dynamics.classify`), named;
    attention sinks where the table has an ``is_sink`` column, else how to find them."""
    from posym.heads.dynamics import classify

    keys = [k for k in (INTERVENTION, "tau") if k in table]
    values = [c for c in ("s_pos", "s_sym", "swap_mass", "is_sink") if c in table]
    heads = table.groupby([*keys, "layer", "head"], as_index=False, sort=False)[values].mean()
    several = len(heads.groupby(keys, sort=False)) > 1 if keys else False
    lines = []
    for key, g in heads.groupby(keys, sort=False) if keys else [((), heads)]:
        key = key if isinstance(key, tuple) else (key,)
        if several:
            lines.append("== " + ", ".join(f"{k} {v:g}" if k == "tau" else str(v) for k, v in zip(keys, key)))
        weak = g["swap_mass"].to_numpy(float) < MIN_MASS
        kept = g[~weak]
        kind = classify(kept["s_pos"].to_numpy(float), kept["s_sym"].to_numpy(float), gamma)
        lines.append(f"{len(g)} heads: {int((kind == 'positional').sum())} pure positional, "
                     f"{int((kind == 'symbolic').sum())} pure symbolic (γ = {gamma:g}) among the {len(kept)} with "
                     f"swap mass >= {MIN_MASS:g}; {int(weak.sum())} uninformative (swap mass < {MIN_MASS:g})")
        lines.append(f"  pure positional: {_named(kept[kind == 'positional'])}")
        lines.append(f"  pure symbolic: {_named(kept[kind == 'symbolic'])}")
        if "is_sink" in g:
            lines.append(f"  attention sinks: {_named(g[g['is_sink'] > 0.5])}")
    if "is_sink" not in heads:
        why = ("the start token is kept out of the swaps, so a sink head reads as uninformative" if swap_exclude != "none"
               else "with --swap-exclude none a sink head reads as pure symbolic")
        lines.append(f"attention sinks: not read by scores ({why}); posym head-types --model MODEL marks them")
    return lines


def default_out(path: str | os.PathLike | None = None, series: Sequence[str | os.PathLike] | None = None) -> Path:
    """Where ``posym scores`` writes without ``--out``: ``RUN/scores.csv`` for a posym run directory;
    ``FOLDER/checkpoint_scores.csv`` for a series given as one folder (an HF ``output_dir``, whose
    ``scores.csv`` is the callback's denser table); ``./runs/scores/<model name>/scores.csv`` for one
    model folder (never inside the model's own folder). PosymError for several series folders."""
    if series is not None:
        series = list(series)
        if len(series) != 1:
            raise PosymError("a series of several folders needs --out FILE.csv")
        return Path(series[0]) / layout.CHECKPOINT_SCORES
    path = Path(path)
    if layout.list_checkpoints(path) or (path / layout.METRICS).is_file():
        return path / layout.SCORES
    return Path(layout.SCORES_HOME) / layout.safe_name(path.resolve().name) / layout.SCORES


def scores(path: str | os.PathLike | None = None, *, series: Sequence[str | os.PathLike] | None = None,
           out: str | os.PathLike | None = None, force: bool = False, **kwargs) -> VerbResult:
    """:func:`score_checkpoints` of ``path``, :func:`score_series` of ``series`` or (``text=`` /
    ``ids=`` in ``kwargs``) :func:`score_sequences` of the model ``path``, written to ``out``
    (default: :func:`default_out`); the summary is the last step's table (per intervention when
    ``intervene=`` in ``kwargs`` names several: docs/interventions.md)."""
    if (path is None) == (series is None):
        raise PosymError("give exactly one of a run/model folder or a series of checkpoint folders")
    series = None if series is None else list(series)
    own = kwargs.get("text") is not None or kwargs.get("ids") is not None
    if own and series is not None:
        raise PosymError("--text / --ids score one model: give --model MODEL, not --series")
    plan_interventions(kwargs.get("intervene"), kwargs.get("layers"))  # a bad spec: one line before anything
    out = Path(out) if out else default_out(path, series)
    outputs = Outputs([out], force).check()
    if own:
        df = score_sequences(path, **kwargs)
    else:
        df = score_series(series, **kwargs) if series is not None else score_checkpoints(path, **kwargs)
    outputs.csv(df, out)
    last = df[df["step"] == df["step"].max()] if "step" in df else df
    several = df[INTERVENTION].nunique() > 1  # then one block per intervention, in the order given
    by = ([INTERVENTION] if several else []) + ["layer", "head", "tau"]
    cols = [c for c in (*by, "s_pos", "s_sym", "entropy") if c in last]
    steps = f" at {df['step'].nunique()} steps" if "step" in df else ""
    note = in_progress_note(path, int(df["step"].max()) if "step" in df else None) if path is not None and not own else ""
    excluded = kwargs.get("swap_exclude", "bos" if own else "none")
    table = last[cols].groupby(by, sort=not several).mean().round(3)
    if own:
        n = int(df["prompt"].nunique()) if "prompt" in df else int(df["n_prompts"].iloc[0])
        blocks = kwargs.get("blocks")
        note = (f"{n} sequences of {kwargs.get('text') or kwargs.get('ids')}, "
                f"{f'{blocks} blocks' if blocks else 'token swaps'}")
        shown = "\n".join(_heads_summary(df, excluded)) + (
            f"\nfirst {min(len(table), FIRST_ROWS)} of {len(table)} rows (all of them in the file):\n"
            + table.head(FIRST_ROWS).to_string())
    else:
        shown = table.to_string()
    text = shown + f"\nwrote {len(df)} rows{steps} to {out}" + (f"\n{note}" if note else "")
    text += f"\nswap-exclude: {excluded} (keys kept out of the swaps; docs/spec.md §3)"
    text += f"\n{READ_POINTER}"
    return VerbResult(df, outputs.written, text)


def scores_command(run_dir: str | os.PathLike | None = None, *, model: str | os.PathLike | None = None,
                   series: Sequence[str | os.PathLike] | None = None, **options) -> VerbResult:
    """``posym scores``: :func:`scores` of exactly one source — a run directory ``run_dir`` (RUN_DIR), one
    model folder ``model`` (--model) or a checkpoint ``series`` (--series). ``text=`` / ``ids=`` (the
    model's own sequences, docs/llm.md "Scoring your own sequences") score one ``model`` and take no task
    prompts (``task``, ``prompts``, ``steps``; ``n_prompts`` and ``seed`` are ignored); ``blocks`` applies
    to them only, and ``batch_size`` is ignored without them."""
    if sum(map(bool, (model, run_dir, series))) != 1:
        raise PosymError("give exactly one of RUN_DIR, --model MODEL_DIR or --series DIR [DIR ...]")
    if options.get("text") or options.get("ids"):
        clash = [o for o, v in (("RUN_DIR", run_dir), ("--series", series), ("--task", options.get("task")),
                                ("--prompts", options.get("prompts")), ("--steps", options.get("steps"))) if v]
        if not model or clash:
            raise PosymError(f"--text / --ids score one model: give --model MODEL{f', not {clash[0]}' if clash else ''}")
        return scores(model, **{k: v for k, v in options.items() if k not in ("n_prompts", "seed")})
    if options.get("blocks") is not None:
        raise PosymError("--blocks applies to --text / --ids (task prompts are scored with token swaps)")
    return scores(model or run_dir, series=series, **{k: v for k, v in options.items() if k != "batch_size"})


__all__ = ["check_targets", "default_out", "score_checkpoints", "score_sequences", "score_series", "scores", "scores_command"]
