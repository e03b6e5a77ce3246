"""The configuration of ``posym reproduce`` (the reproduction's, not a verb): its settings per preset
(the ``reproduce`` sections of :mod:`posym.presets`), their validation before any stage runs, and which
settings each kind of stage reads (so a failed stage can be re-run with a corrected value without
losing the finished ones)."""

from __future__ import annotations

import copy
import math
from typing import Any, Callable, Sequence

from posym import presets
from posym.checks import check_int
from posym.constants import TASKS
from posym.errors import PosymError

#: Settings per preset: the ``reproduce`` sections of :data:`posym.presets.PRESETS` (their keys are
#: documented at :class:`posym.presets.Preset`); "tiny" is for tests only (not in the CLI help).
PRESETS: dict[str, dict[str, Any]] = presets.section("reproduce")


def preset_settings(preset: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The settings dict of a preset (a deep copy), with ``overrides`` merged in (dicts recursively)."""
    if preset not in PRESETS:
        raise PosymError(f"unknown preset {preset!r}; choose quick or paper")
    s = copy.deepcopy(PRESETS[preset])

    def merge(dst: dict, src: dict) -> None:
        for k, v in src.items():
            if isinstance(v, dict) and isinstance(dst.get(k), dict):
                merge(dst[k], v)
            else:
                dst[k] = copy.deepcopy(v)

    if overrides:
        unknown = sorted(set(overrides) - set(s) - set(OPTIONAL_SETTINGS))
        if unknown:
            raise PosymError(f"unknown reproduction setting(s): {', '.join(unknown)}")
        merge(s, overrides)
    return s


def overrides_from_pairs(pairs: dict[str, Any]) -> dict[str, Any]:
    """Dotted ``--set`` keys to nested settings: ``{"llm.n": 3}`` -> ``{"llm": {"n": 3}}``."""
    overrides: dict[str, Any] = {}
    for key, value in pairs.items():
        *parents, leaf = key.split(".")
        node = overrides
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise PosymError(f"--set {key}: {part!r} is set to a value elsewhere, not a group of settings")
        node[leaf] = value
    return overrides


#: Settings no preset section names (scheduling choices): absent means this value. ``train_batched``: train
#: the seeds of each task as one batched model (:func:`posym.train.batched.train_batched`; docs/reproduction.md).
OPTIONAL_SETTINGS: dict[str, Any] = {"train_batched": False}


#: Settings added after the first release, with the value a directory made before them was run with
#: (a ``reproduce.json`` without the key means this value, so such directories stay resumable).
IMPLIED_SETTINGS: dict[str, Any] = {"llm_models": ["smollm2"]}


#: The settings each kind of stage reads (a changed setting invalidates only these stages).
STAGE_SETTINGS: dict[str, tuple[str, ...]] = {
    "train": ("train_preset", "train", "train_batched"), "dynamics": ("gammas",), "flow": ("flow_hops",),
    "ablate": ("ablation_n",), "freqs": ("freqs_n", "freqs_scores"),
    "lengthgen": ("lengthgen_grid", "lengthgen_n", "lengthgen_data_seeds", "lengthgen_extra_rule"),
    "discrepancy": ("discrepancy",), "llm": ("llm", "llm_models"),
    "choice": ("llm", "llm_choice", "llm_models"),
}


def _int_setting(lo: int) -> Callable[[str, Any], None]:
    """The check of an integer setting >= ``lo`` (:func:`posym.checks.check_int`), its error naming the setting."""
    want = "a positive integer" if lo == 1 else f"an integer >= {lo}"

    def check(key: str, value: Any) -> None:
        try:
            check_int(value, key, lo)
        except PosymError:
            raise PosymError(f"bad reproduction setting {key}={value!r}: expected {want}") from None
    return check


_count_setting = _int_setting(1)


def _keywords(key: str, value: Any, fn: Callable) -> None:
    import inspect

    if not isinstance(value, dict):
        raise PosymError(f"bad reproduction setting {key}={value!r}: expected a JSON object of keywords")
    params = inspect.signature(fn).parameters
    not_settings = {"out", "out_dir", "progress", "threads", "force"}
    if key == "discrepancy":  # the trained-model part of the verb is not a reproduction setting
        not_settings |= {"runs", "grid", "n", "seed", "task"}
    unknown = sorted(k for k in value if k not in params or k in not_settings)
    if unknown:
        raise PosymError(f"bad reproduction setting {key}: unknown keyword(s) {', '.join(unknown)}")


def validate_settings(settings: dict[str, Any], tasks: Sequence[str]) -> None:
    """Check every setting of a reproduction before any stage runs (PosymError naming the bad one)."""
    from posym.lengthgen.llm_eval import llm_eval
    from posym.lengthgen.trained import parse_grid
    from posym.verbs.theory import discrepancy
    from posym.train import make_config

    train = settings.get("train", {})
    if not isinstance(train, dict):
        raise PosymError(f"bad reproduction setting train={train!r}: expected a JSON object of training options")
    for task in tasks:
        try:
            make_config(task, settings["train_preset"], seed=0, data_seed=0, order_seed=0, track_heads=True, **train)
        except PosymError as exc:
            raise PosymError(f"bad reproduction setting train: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise PosymError(f"bad reproduction setting train: {exc}") from None
    if not isinstance(settings.get("train_batched", False), bool):
        raise PosymError(f"bad reproduction setting train_batched={settings['train_batched']!r}: expected true or false")
    gammas = settings["gammas"]
    if not isinstance(gammas, list) or not gammas or not all(
            isinstance(g, (int, float)) and not isinstance(g, bool) and 0 < g < 0.5 for g in gammas):
        raise PosymError(f"bad reproduction setting gammas={gammas!r}: expected a list of numbers in (0, 0.5)")
    hops = settings["flow_hops"]
    if not isinstance(hops, list) or not all(isinstance(h, int) and not isinstance(h, bool) and 1 <= h <= 4 for h in hops):
        raise PosymError(f"bad reproduction setting flow_hops={hops!r}: expected a list of hop counts 1..4")
    for key in ("ablation_n", "freqs_n", "lengthgen_n", "lengthgen_data_seeds"):
        _count_setting(key, settings[key])
    if not isinstance(settings["freqs_scores"], bool):
        raise PosymError(f"bad reproduction setting freqs_scores={settings['freqs_scores']!r}: expected true or false")
    if not isinstance(settings["lengthgen_grid"], (str, list)):
        raise PosymError(f"bad reproduction setting lengthgen_grid={settings['lengthgen_grid']!r}: "
                         "expected \"paper\" or a list of added lengths")
    try:
        parse_grid(settings["lengthgen_grid"])
    except (PosymError, TypeError, ValueError) as exc:
        raise PosymError(f"bad reproduction setting lengthgen_grid: {exc}") from None
    from posym.tasks._common import EXTRA_RULES

    if settings["lengthgen_extra_rule"] not in EXTRA_RULES:
        raise PosymError(f"bad reproduction setting lengthgen_extra_rule={settings['lengthgen_extra_rule']!r}: "
                         f"choose one of {list(EXTRA_RULES)}")
    _keywords("discrepancy", settings["discrepancy"], discrepancy)
    for k, v in settings["discrepancy"].items():
        if k in ("alphabet", "n_max"):
            _count_setting(f"discrepancy.{k}", v)
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v < math.inf):
            raise PosymError(f"bad reproduction setting discrepancy.{k}={v!r}: expected a finite number >= 0")
    if not isinstance(settings["llm_choice"], bool):
        raise PosymError(f"bad reproduction setting llm_choice={settings['llm_choice']!r}: expected true or false")
    _keywords("llm", settings["llm"], llm_eval)
    given = sorted(k for k in settings["llm"] if k in ("model", "gguf", "api_base", "api_model"))
    if given:
        raise PosymError(f"bad reproduction setting llm.{given[0]}: name the models in llm_models instead")
    if "protocol" in settings["llm"]:
        raise PosymError("bad reproduction setting llm.protocol: the stages llm and choice set it "
                         "(llm_choice=false leaves out the choice protocol)")
    models = settings["llm_models"]
    if not isinstance(models, list) or not models or not all(isinstance(m, str) and m.strip() for m in models):
        raise PosymError(f"bad reproduction setting llm_models={models!r}: expected a list of model names or paths, "
                         "e.g. [\"smollm2\", \"gemma3-270m\"]")
    from posym.runs.layout import llm_model_slug

    slugs = [llm_model_slug(m) for m in models]
    if len(set(slugs)) < len(slugs):
        raise PosymError(f"bad reproduction setting llm_models={models!r}: two models share the folder name "
                         f"{next(s for s in slugs if slugs.count(s) > 1)!r}")
    for k, v in settings["llm"].items():
        if k == "lengths" and v is not None:
            if not isinstance(v, list) or not v:
                raise PosymError(f"bad reproduction setting llm.lengths={v!r}: expected null or a list of lengths")
            for x in v:
                _count_setting("llm.lengths", x)
        elif k in _LLM_CHECKS:
            _LLM_CHECKS[k](f"llm.{k}", v)
    for m in models:
        check_llm_model_setting(m)


def check_llm_model_setting(model: str) -> None:
    """PosymError (one line, naming the setting) unless ``model`` (an ``llm_models`` entry) is loadable
    with a tokenizer (:func:`posym.model.llm.check_llm_model`); a bundled name whose package is not
    installed passes here and is skipped with its install hint when its stage is planned."""
    from posym.model.llm import check_llm_model as check

    try:
        check(model, require_installed=False)
    except PosymError as exc:
        raise PosymError(f"bad reproduction setting llm_models: {exc}") from None


def train_config(settings: dict[str, Any], task: str, seed: int) -> Any:
    """The :class:`posym.train.config.TrainConfig` of run (task, seed): seed, data and order seed all ``seed``."""
    from posym.train import make_config

    return make_config(task, settings["train_preset"], seed=seed, data_seed=seed, order_seed=seed, track_heads=True,
                       **settings.get("train", {}))


def train_batched(settings: dict[str, Any]) -> bool:
    """Whether the seeds of each task train as one batched model (setting ``train_batched``)."""
    return bool(settings.get("train_batched", OPTIONAL_SETTINGS["train_batched"]))


def check_train_batched(settings: dict[str, Any], tasks: Sequence[str], seeds: int, device: str) -> None:
    """PosymError (one line, before any stage) when ``train_batched`` is set and a task's seeds cannot train as
    one batched model on ``device`` (:func:`posym.train.batched.check_batchable`)."""
    if train_batched(settings) and seeds > 1:
        from posym.train.batched import check_batchable, seed_configs

        for task in tasks:
            check_batchable(seed_configs(train_config(settings, task, 0), range(seeds)), device)


def _optional(check: Callable[[str, Any], None]) -> Callable[[str, Any], None]:
    return lambda key, value: None if value is None else check(key, value)


def _positive_number(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise PosymError(f"bad reproduction setting {key}={value!r}: expected a finite number > 0")


def _device(key: str, value: Any) -> None:
    ok = isinstance(value, str) and (value in ("cpu", "cuda", "mps")
                                     or (value.startswith("cuda:") and value[5:].isdigit()))
    if not ok:
        raise PosymError(f"bad reproduction setting {key}={value!r}: expected cpu, cuda or cuda:N")


def _dtype(key: str, value: Any) -> None:
    import torch

    if not (value == "auto" or (isinstance(value, str) and isinstance(getattr(torch, value, None), torch.dtype))):
        raise PosymError(f"bad reproduction setting {key}={value!r}: expected float32, bfloat16, float16 or auto")


def _tasks(key: str, value: Any) -> None:
    if not isinstance(value, list) or not value or any(t not in TASKS for t in value):
        raise PosymError(f"bad reproduction setting {key}={value!r}: expected a list of tasks from {list(TASKS)}")


def _device_map(key: str, value: Any) -> None:
    if not (value == "auto" or isinstance(value, dict)):
        raise PosymError(f"bad reproduction setting {key}={value!r}: expected null, \"auto\" or a JSON object")


#: The checks of the ``llm.*`` keywords (those of :func:`posym.lengthgen.llm_eval` a reproduction passes on).
_LLM_CHECKS: dict[str, Callable[[str, Any], None]] = {
    "n": _count_setting, "runs": _count_setting, "max_new_tokens": _count_setting, "concurrency": _count_setting,
    "batch_size": _optional(_count_setting), "n_examples": _int_setting(0), "max_retries": _int_setting(0),
    "device": _optional(_device), "dtype": _optional(_dtype), "tasks": _tasks, "device_map": _optional(_device_map),
    "timeout": _positive_number, "backoff": _positive_number,
    "max_per_second": _optional(_positive_number), "max_per_minute": _optional(_positive_number),
}


__all__ = ["IMPLIED_SETTINGS", "OPTIONAL_SETTINGS", "PRESETS", "STAGE_SETTINGS", "check_llm_model_setting",
           "check_train_batched", "overrides_from_pairs", "preset_settings", "train_batched", "train_config",
           "validate_settings"]
