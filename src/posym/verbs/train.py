"""``posym train``: a GPT-J (or ``--arch``: another family, docs/models.md) on one task (SPEC §2) with head
tracking (Paper A Fig. 2) composed in."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from posym.errors import PosymError
from posym.runs import layout
from posym.train.config import TrainConfig, make_config
from posym.train.loop import EvalCallback, RunResult
from posym.train.loop import train as train_loop
from posym.verbs import VerbResult


def head_tracker(config: TrainConfig):
    """The callback that scores every head at each evaluation (SPEC §3) on the first
    ``track_prompts`` validation prompts of the run's data (the set ``posym scores`` uses)."""
    from posym.heads.tracking import HeadTracker
    from posym.tasks import make_split

    n = min(config.track_prompts, config.n_val)
    if n < 1:
        raise PosymError(f"track_prompts must be >= 1 when tracking heads, got {config.track_prompts}")
    prompts = make_split(config.task, "val", seed=config.data_seed, n=n, distractors=config.distractors).input_ids
    return HeadTracker(prompts, config.track_taus)


def _effective_config(config: TrainConfig, out: Path, resume: bool) -> TrainConfig:
    """The configuration the loop will run: the stored one on resume (the loop checks it again)."""
    if not resume:
        return config
    stored = layout.read_meta(out).get("config")
    if not isinstance(stored, dict):
        return config  # the loop reports the missing / corrupt posym.json
    try:
        return TrainConfig.from_dict(stored)
    except (TypeError, ValueError):
        return config


def train(config: TrainConfig, out: str | os.PathLike, *, resume: bool = False, force: bool = False,
          device: str = "cpu", threads: int | None = None, progress: bool = True,
          callbacks: Sequence[EvalCallback] = ()) -> RunResult:
    """Train into run directory ``out`` (``posym.train.loop.train``), tracking heads into
    ``scores.csv`` when ``config.track_heads`` and logging to ``RUN/tensorboard/`` when ``config.log``
    has ``"tensorboard"``. Returns the loop's RunResult (its ``summary`` is what
    the CLI prints)."""
    out = Path(out)
    effective = _effective_config(config, out, resume)
    cbs = list(callbacks)
    if effective.track_heads:
        cbs.insert(0, head_tracker(effective))
    if "tensorboard" in effective.log:  # after head tracking: it logs the rows just written
        from posym.integrations.tensorboard import TensorBoardLogger

        cbs.append(TensorBoardLogger())
    return train_loop(config, out, resume=resume, force=force, device=device, threads=threads, progress=progress,
                      callbacks=cbs)


def train_seeds(config: TrainConfig, seeds: Sequence[int], out: str | os.PathLike, *, resume: bool = False,
                device: str = "cpu", threads: int | None = None, progress: bool = True) -> list[RunResult]:
    """``config`` with each of ``seeds`` as init, data and order seed, trained as one batched model
    (:func:`posym.train.batched.train_batched`) into ``out/seed{k}`` — each run directory as
    :func:`train` of that seed alone writes it (head tracking and TensorBoard per run)."""
    from posym.train.batched import seed_configs, seed_dir, train_batched

    configs = seed_configs(config, seeds)
    outs = [seed_dir(out, s) for s in seeds]
    callbacks = []
    for c, o in zip(configs, outs):
        effective = _effective_config(c, o, resume)
        cbs: list[EvalCallback] = [head_tracker(effective)] if effective.track_heads else []
        if "tensorboard" in effective.log:
            from posym.integrations.tensorboard import TensorBoardLogger

            cbs.append(TensorBoardLogger())
        callbacks.append(cbs)
    return train_batched(configs, outs, resume=resume, device=device, threads=threads, progress=progress,
                         callbacks=callbacks)


#: The options a resumed run ignores (it continues with its stored configuration), as the CLI names them.
_IGNORED_ON_RESUME = ("model_overrides", "steps", "precision", "compile", "batch_size", "epochs", "final_model",
                      "distractors", "log", "pe", "arch", "n_test", "cuda_graph")


def _shown(name: str, value: Any) -> str:
    """``--name value`` as typed (``--set`` pairs as ``k=v``; a flag as nothing)."""
    option = "--set" if name == "model_overrides" else f"--{name.replace('_', '-')}"
    if isinstance(value, Mapping):
        value = list(value.items())
    if value is True:
        text = ""
    elif isinstance(value, (list, tuple)):
        text = " ".join(f"{v[0]}={v[1]}" if isinstance(v, tuple) and len(v) == 2 else str(v) for v in value)
    else:
        text = str(value)
    return f"{option} {text}".rstrip()


def train_task(task: str, out: str | os.PathLike, *, preset: str = "quick", seed: int = 0,
               seeds: str | int | Sequence[int] | None = None,
               data_seed: int | None = None, order_seed: int | None = None,
               model_overrides: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None, resume: bool = False,
               force: bool = False, device: str = "cpu", threads: int | None = None, progress: bool = True,
               **options: Any) -> VerbResult:
    """``posym train``: :func:`posym.train.make_config` of ``task`` and ``preset`` (``options``: further
    :class:`~posym.train.config.TrainConfig` fields, None = the preset's; ``model_overrides``: model
    config fields, a mapping or ``(key, value)`` pairs; the data and order seeds default to ``seed``,
    SPEC §2), then :func:`train` into ``out``. With ``resume`` (and not ``force``) a note on stderr
    names the given options the stored configuration overrides. The summary is the run's test
    accuracy, empty on every rank but 0 under ``torchrun`` (only rank 0 reports).

    ``seeds`` (a count K or a list, :func:`posym.train.batched.parse_seeds`; not with ``seed``, ``data_seed``,
    ``order_seed``): the runs of those seeds as one batched model (:func:`train_seeds`), into ``out/seed{k}``."""
    import sys

    from posym.train.distributed import is_main

    if seeds is not None:
        if seed != 0 or data_seed is not None or order_seed is not None:
            raise PosymError("--seeds sets each run's init, data and order seed; drop --seed / --data-seed / --order-seed")
        from posym.train.batched import parse_seeds

        seeds = parse_seeds(seeds)
    overrides = dict(model_overrides.items() if isinstance(model_overrides, Mapping) else model_overrides or ())
    config = make_config(task, preset, seed=seed, data_seed=seed if data_seed is None else data_seed,
                         order_seed=seed if order_seed is None else order_seed, model_overrides=overrides or None,
                         **options)
    if resume and not force:  # with force: only the error
        given = {"model_overrides": model_overrides, **options}
        ignored = [_shown(k, given[k]) for k in _IGNORED_ON_RESUME if given.get(k) is not None]
        if ignored:
            print("posym: note: --resume continues with the run's stored configuration; ignored: "
                  + ", ".join(ignored), file=sys.stderr)
    if seeds is not None:
        if force:
            raise PosymError("--seeds does not replace runs (--force); choose another --out or remove it")
        results = train_seeds(config, seeds, out, resume=resume, device=device, threads=threads, progress=progress)
        return VerbResult(None, [r.run_dir for r in results], "\n".join(r.summary for r in results),
                          {"results": results})
    result = train(config, out, resume=resume, force=force, device=device, threads=threads, progress=progress)
    return VerbResult(None, [result.run_dir], result.summary if is_main() else "", {"result": result})


def seed_list(text: str) -> tuple[int, ...]:
    """``--seeds``: a count K (seeds 0..K-1) or a list ``0,1,2`` (:func:`posym.train.batched.parse_seeds`)."""
    from posym.train.batched import parse_seeds

    return parse_seeds(text)


def pe_name(text: str) -> str:
    """A training-time positional encoding (SPEC §2.1, :func:`posym.model.pe.parse_pe`) in its
    canonical form; PosymError otherwise."""
    from posym.model.pe import parse_pe

    return parse_pe(text).name


def arch_name(text: str) -> str:
    """A model family of ``posym train --arch`` (:data:`posym.model.arch.ARCHS`, any case); PosymError
    listing them otherwise."""
    from posym.model.arch import check_arch

    return check_arch(text.strip().lower())


__all__ = ["arch_name", "head_tracker", "pe_name", "seed_list", "train", "train_seeds", "train_task"]
