"""Value checks shared by the Python API and the CLI: one home for each rule (a count, a step, the
purity tolerance γ of SPEC §3, the temperatures τ). Each raises :class:`~posym.errors.PosymError` with
one sentence naming the argument; the CLI's argparse types call the same functions."""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any, Iterable, Mapping, Sequence

from posym.errors import PosymError, PosymWarning


def check_int(value: Any, name: str, lo: int = 0) -> int:
    """``value`` as an int >= ``lo``; PosymError for bools, floats (2.5, NaN), strings and smaller values."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise PosymError(f"{name} must be an integer >= {lo}, got {value!r}")
    if int(value) < lo:
        raise PosymError(f"{name} must be an integer >= {lo}, got {int(value)}")
    return int(value)


def check_positive_int(value: Any, name: str) -> int:
    """``value`` as an int >= 1 (a count or a period of steps)."""
    return check_int(value, name, lo=1)


def check_float(value: Any, name: str, lo: float | None = None, hi: float | None = None, *,
                lo_open: bool = False, hint: str = "") -> float:
    """``value`` as a finite float in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``; a bound None is open-ended);
    PosymError for bools, text that is no number, NaN, ±inf and values out of range. ``hint``: appended to
    the message (e.g. ", e.g. kappa=4")."""
    bad = isinstance(value, bool)
    try:
        v = float(value)
    except (TypeError, ValueError):
        bad = True
    if bad:
        raise PosymError(f"{name}={value!r} is not a number{hint}")
    low = "" if lo is None else (f"> {lo:g}" if lo_open else f">= {lo:g}")
    high = "" if hi is None else f"<= {hi:g}"
    what = " and ".join(x for x in (low, high) if x)
    if not math.isfinite(v) or (lo is not None and (v <= lo if lo_open else v < lo)) or (hi is not None and v > hi):
        raise PosymError(f"{name}={value!r} must be finite" + (f" and {what}" if what else "") + hint)
    return v


def check_gamma(value: Any) -> float:
    """A purity tolerance γ in (0, 0.5) (SPEC §3: the rule needs 1 − γ > γ)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < float(value) < 0.5:
        raise PosymError(f"gamma must be a number in (0, 0.5), got {value!r}")
    return float(value)


def check_taus(taus: Any) -> tuple[float, ...]:
    """τ or a list of τ (softmax temperatures of the swap weights, SPEC §3): positive and finite."""
    if isinstance(taus, numbers.Real) and not isinstance(taus, bool):
        taus = (taus,)
    if isinstance(taus, (str, bytes)) or not isinstance(taus, Sequence) and not hasattr(taus, "__iter__"):
        raise PosymError(f"taus must be a positive number or a list of them, got {taus!r}")
    try:
        items = list(taus)
        if any(isinstance(t, (bool, str, bytes)) for t in items):
            raise TypeError
        out = tuple(float(t) for t in items)
    except (TypeError, ValueError):
        raise PosymError(f"taus must be a positive number or a list of them, got {taus!r}") from None
    if not out:
        raise PosymError("taus must not be empty")
    for t in out:
        if not (t > 0 and math.isfinite(t)):
            raise PosymError(f"every tau must be positive and finite, got {t}")
    return out


def check_variants(variants: Any, what: str = "reproduction directory") -> dict:
    """``variants`` as a dict NAME -> folder or table (the study verbs' first argument): PosymError for a
    list, a string or anything else that is no mapping."""
    if not isinstance(variants, Mapping):
        raise PosymError(f"variants must map each name to its {what}, e.g. {{'rope': 'runs/rope'}}; "
                         f"got {type(variants).__name__} {variants!r:.80}")
    return dict(variants)


def check_layer_list(layers: Any, name: str = "layers") -> list[int]:
    """A list of layer indices (integers >= 0); PosymError for a string, 'a', 1.5 or a negative index."""
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Iterable):
        raise PosymError(f"{name} must be a list of layer indices, got {layers!r}")
    return [check_int(v, f"every layer index of {name}") for v in layers]


def require_columns(columns: Iterable[str], needed: Iterable[str], what: str) -> None:
    """PosymError "``what`` lacks column(s) a, b" unless every ``needed`` column is among ``columns`` (a
    table's ``.columns``); a set of needed columns is named in sorted order, a sequence in its own. For a
    run file with a documented schema use :func:`posym.runs.tables.check_columns`."""
    have = set(columns)
    missing = [c for c in (sorted(needed) if isinstance(needed, (set, frozenset)) else needed) if c not in have]
    if missing:
        raise PosymError(f"{what} lacks column(s) {', '.join(map(str, missing))}")


#: The model-config attribute naming the task a posym model was trained on (written into every
#: checkpoint's ``config.json`` by ``posym train``; set from ``posym.json`` when a run is resolved).
MODEL_TASK_ATTR = "posym_task"


def model_task(model: Any) -> str | None:
    """The task ``model`` was trained on (:data:`MODEL_TASK_ATTR` of its config), or None when unknown
    (a model not trained by posym, or a bare module)."""
    for m in (model, getattr(model, "model", None)):  # the model, or a RopeAdapter's wrapped model
        task = getattr(getattr(m, "config", None), MODEL_TASK_ATTR, None)
        if isinstance(task, str):
            return task
    return None


def warn_other_task(model: Any, task: str | None, what: str = "scored") -> bool:
    """Warn (one line, :class:`~posym.errors.PosymWarning`) when a posym model is given the other task's
    prompts: its scores or accuracies then describe a task it never learnt. Returns whether it warned."""
    trained = model_task(model)
    if trained is None or task is None or trained == task:
        return False
    warnings.warn(PosymWarning(f"this model was trained on the {trained} task but is {what} on {task} prompts; "
                               f"give it {trained} prompts (e.g. make_split({trained!r}, ...))"), stacklevel=3)
    return True


__all__ = ["MODEL_TASK_ATTR", "check_float", "check_gamma", "check_int", "check_layer_list", "check_positive_int", "check_taus",
           "check_variants", "require_columns", "model_task", "warn_other_task"]
