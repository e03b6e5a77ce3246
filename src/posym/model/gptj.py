"""The paper's GPT-J (SPEC §2): presets, construction, and HF-format save/load.

The model of record is ``transformers.GPTJForCausalLM``; a checkpoint of a plain-RoPE run (and of
``randomized:L``, ``rope-base:10000``) loads in plain transformers with ``GPTJForCausalLM.from_pretrained``.
The other training-time positional encodings (:mod:`posym.model.pe`, SPEC §2.1) are posym-only: the
variant is ``config.posym_pe``, honoured by :func:`build_model`, :func:`load_model` and
:func:`extend_positions`, and their ``config.json`` says ``model_type: posym_gptj``.
"""

from __future__ import annotations

import json
import os

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch
from transformers import GPTJConfig, GPTJForCausalLM

from posym import presets
from posym.errors import PosymError
from posym.model import pe as pe_mod

#: GPTJConfig fields of each preset (vocab_size is set from the task): the ``model`` sections of
#: :data:`posym.presets.PRESETS` (SPEC §2 for "paper"; "authors" is the paper's model).
PRESETS: dict[str, dict[str, Any]] = presets.section("model")

_CONFIG_KEYS = set(GPTJConfig().to_dict()) | {"n_positions", "n_embd", "n_layer", "n_head", "n_inner"}


@contextmanager
def quiet_hf() -> Iterator[None]:
    """Silence transformers' per-file progress bars (saving/loading small checkpoints)."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()  # no LOAD REPORT: posym checks the loading info itself
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if enabled:
            hf_logging.enable_progress_bar()


def check_loading_info(info: dict, source: str | os.PathLike) -> None:
    """Refuse a checkpoint whose weight tensors do not match its config (transformers' loading info):
    missing tensors would silently keep their random initialisation."""
    problems = []
    for key, what in (("missing_keys", "missing"), ("unexpected_keys", "unexpected"),
                      ("mismatched_keys", "wrong-shaped")):
        names = sorted(str(k[0] if isinstance(k, tuple) else k) for k in info.get(key) or ())
        if names:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            problems.append(f"{len(names)} {what} weight tensor(s) ({shown})")
    if problems:
        raise PosymError(f"checkpoint {source} does not match its config.json: {'; '.join(problems)}")


def model_config(preset: str, vocab_size: int, pe: str | None = None, **overrides: Any) -> GPTJConfig:
    """The ``GPTJConfig`` of a preset (SPEC §2) with any GPTJConfig field overridden and the positional
    encoding ``pe`` (SPEC §2.1; default ``rope``: no ``posym_pe`` attribute, today's config). For
    ``randomized:L`` the rotary table covers ``n_positions = max(n_positions, L)``.

    Raises PosymError for an unknown preset or an override key that GPTJConfig does not have.
    """
    variant = pe_mod.parse_pe(pe)
    if variant.kind == "ssmax" and variant.value is None:
        raise PosymError("positional encoding 'ssmax' needs its initial length here: give ssmax:N "
                         "(posym.train.make_config fills in the task's training length)")
    if preset not in PRESETS:
        raise PosymError(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    bad = sorted(k for k in overrides if k not in _CONFIG_KEYS)
    if bad:
        raise PosymError(f"unknown GPTJConfig field(s) in overrides: {', '.join(bad)}")
    kwargs = {**PRESETS[preset], "vocab_size": vocab_size, **overrides}
    for key in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size"):
        v = kwargs.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise PosymError(f"{key} must be a positive integer, got {v!r}")
    for key in ("n_inner", "rotary_dim"):
        v = kwargs.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise PosymError(f"{key} must be a positive integer or null, got {v!r}")
    for key in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):
        v = kwargs.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
            raise PosymError(f"{key} must be a probability in [0, 1), got {v!r}")
    if kwargs["n_embd"] % kwargs["n_head"]:
        raise PosymError(f"n_embd={kwargs['n_embd']} is not divisible by n_head={kwargs['n_head']}")
    head_dim = kwargs["n_embd"] // kwargs["n_head"]
    rd = kwargs.get("rotary_dim")
    if rd is not None and (rd > head_dim or rd % 2):
        raise PosymError(f"rotary_dim={rd} must be even and <= the head dim {head_dim}")
    if variant.kind == "randomized":
        kwargs["n_positions"] = max(kwargs["n_positions"], int(variant.value))
    cfg = GPTJConfig(**kwargs)
    if variant.kind != "rope":
        setattr(cfg, pe_mod.CONFIG_ATTR, variant.name)
    cfg._attn_implementation = "eager"  # attention weights must be observable (SPEC §3)
    return cfg


def apply_pe(model: torch.nn.Module) -> torch.nn.Module:
    """Make a GPT-J follow its ``config.posym_pe`` (in place): rebuild the rotary tables with the
    variant's angles (:func:`posym.model.pe.gptj_rotary_table`) and, for ``ssmax``, install the SSMax
    query projections. A plain-RoPE model is left untouched."""
    variant = pe_mod.config_pe(model.config)
    if variant.kind == "rope":
        return model
    for module in model.modules():
        table = getattr(module, "embed_positions", None)
        if isinstance(table, torch.Tensor) and table.dim() == 2:
            module.embed_positions = pe_mod.gptj_rotary_table(variant, table.shape[0], table.shape[1]).to(
                table.device, table.dtype)
    if variant.kind == "ssmax":
        from posym.model.ssmax import install_ssmax

        install_ssmax(model, int(variant.value))
    return model


def build_model(config: GPTJConfig, seed: int = 0) -> GPTJForCausalLM:
    """A freshly initialised ``GPTJForCausalLM`` (HF init, std ``initializer_range``) from ``seed``."""
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = GPTJForCausalLM(config)
    finally:
        torch.random.set_rng_state(gen_state)
    model.config._attn_implementation = "eager"
    return apply_pe(model)


#: HF checkpoint files (the format of every model directory, posym's or anyone's).
HF_CONFIG = "config.json"
HF_WEIGHTS = "model.safetensors"


def save_model(model: GPTJForCausalLM, directory: str | os.PathLike) -> None:
    """Write ``model.safetensors`` + ``config.json`` (HF format) into ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with quiet_hf():
        model.save_pretrained(directory, safe_serialization=True)
    if not pe_mod.config_pe(model.config).hf_plain:  # posym-only: no plain-HF loader may mistake it
        cfg = json.loads((directory / HF_CONFIG).read_text())
        cfg.update(model_type=pe_mod.POSYM_MODEL_TYPE, architectures=[pe_mod.POSYM_ARCHITECTURE])
        (directory / HF_CONFIG).write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def checkpoint_model_type(directory: str | os.PathLike) -> str | None:
    """The ``model_type`` of an HF checkpoint directory's ``config.json`` (None if it names none);
    PosymError when there is no readable config."""
    directory = Path(directory)
    if not (directory / HF_CONFIG).is_file():
        raise PosymError(f"no HF checkpoint at {directory} ({HF_CONFIG} missing)")
    try:
        model_type = json.loads((directory / HF_CONFIG).read_text()).get("model_type")
    except (ValueError, OSError, AttributeError) as exc:
        raise PosymError(f"cannot load checkpoint {directory}: {HF_CONFIG} is not valid JSON ({exc})") from exc
    return None if model_type is None else str(model_type)


def load_pretrained(cls: Any, directory: str | os.PathLike, device: str | torch.device = "cpu",
                    **kwargs: Any) -> torch.nn.Module:
    """``cls.from_pretrained(directory)`` with eager attention (SPEC §3), quiet, in eval mode on ``device``;
    PosymError (one line) on a corrupt checkpoint or missing / unexpected weight tensors."""
    try:
        with quiet_hf():
            model, info = cls.from_pretrained(directory, attn_implementation="eager", output_loading_info=True,
                                              **kwargs)
    except Exception as exc:  # corrupt weights, wrong architecture, ...
        raise PosymError(f"cannot load checkpoint {directory}: {str(exc).strip().splitlines()[0]}") from exc
    check_loading_info(info, directory)
    return model.to(device).eval()


def load_model(directory: str | os.PathLike, device: str | torch.device = "cpu") -> GPTJForCausalLM:
    """Load an HF GPT-J checkpoint directory (posym's or anyone's) in eval mode with eager attention,
    following its positional encoding (``config.posym_pe``, SPEC §2.1; a ``posym_gptj`` checkpoint is
    built by posym and its weights loaded strictly)."""
    directory = Path(directory)
    model_type = checkpoint_model_type(directory)
    if model_type not in (None, "gptj", pe_mod.POSYM_MODEL_TYPE):
        raise PosymError(f"{directory} holds a {model_type!r} model, not a GPT-J; load it with "
                         "posym.model.load_causal_lm (every family posym reads)")
    if model_type != pe_mod.POSYM_MODEL_TYPE:
        return apply_pe(load_pretrained(GPTJForCausalLM, directory, device))
    return _load_posym_only(directory, device)


def _load_posym_only(directory: Path, device: str | torch.device) -> GPTJForCausalLM:
    """A ``posym_gptj`` checkpoint: GPTJConfig from its ``config.json``, the variant's model, its weights
    (every tensor present and expected, else PosymError)."""
    from safetensors.torch import load_file

    try:
        raw = json.loads((directory / HF_CONFIG).read_text())
        variant = pe_mod.parse_pe(raw.pop(pe_mod.CONFIG_ATTR, None))
        for key in ("model_type", "architectures"):
            raw.pop(key, None)
        config = GPTJConfig.from_dict(raw)
        setattr(config, pe_mod.CONFIG_ATTR, variant.name)
    except (ValueError, TypeError, OSError, PosymError) as exc:
        raise PosymError(f"cannot load checkpoint {directory}: {str(exc).strip().splitlines()[0]}") from exc
    config._attn_implementation = "eager"
    model = build_model(config, seed=0)
    try:
        weights = load_file(str(directory / HF_WEIGHTS))
    except Exception as exc:
        raise PosymError(f"cannot load checkpoint {directory}: {str(exc).strip().splitlines()[0]}") from exc
    own = model.state_dict()
    missing = [k for k in own if k not in weights and "embed_positions" not in k
               and not (k == "lm_head.weight" and config.tie_word_embeddings)]
    unexpected = [k for k in weights if k not in own]
    wrong = [k for k in weights if k in own and weights[k].shape != own[k].shape]
    check_loading_info({"missing_keys": missing, "unexpected_keys": unexpected, "mismatched_keys": wrong}, directory)
    model.load_state_dict(weights, strict=False)
    return model.to(device).eval()


def rotary_tables(model: torch.nn.Module) -> list[torch.Tensor]:
    """GPT-J's sinusoidal rotary table(s) ``[max_pos, rotary_dim]`` (sin | cos halves): the model's one
    ``transformer.rotary_emb.embed_positions`` (transformers >= 5.20), else each attention's
    ``attn.embed_positions`` (earlier versions; the same values, listed once per distinct tensor)."""
    tr = getattr(model, "transformer", model)
    emb = getattr(tr, "rotary_emb", None)
    if emb is not None and isinstance(getattr(emb, "embed_positions", None), torch.Tensor):
        return [emb.embed_positions]
    tables, seen = [], set()
    for block in getattr(tr, "h", []):
        t = getattr(block.attn, "embed_positions", None)
        if isinstance(t, torch.Tensor) and id(t) not in seen:
            seen.add(id(t))
            tables.append(t)
    if not tables:
        raise PosymError("model has no GPT-J rotary table (embed_positions); only GPT-J checkpoints are supported")
    return tables


def rotary_table(model: torch.nn.Module) -> torch.Tensor:
    """The (first) GPT-J rotary table ``[max_pos, rotary_dim]`` of :func:`rotary_tables`."""
    return rotary_tables(model)[0]


def extend_positions(model: torch.nn.Module, n_positions: int) -> torch.nn.Module:
    """Rebuild GPT-J's sinusoidal rotary tables to cover ``n_positions`` (in place; no weights change).

    Uses the model's positional encoding (:func:`posym.model.pe.gptj_rotary_table`, for ``rope`` the
    expression of transformers' ``create_sinusoidal_positions``), so rows of existing positions are
    bit-identical and logits at the original length are unchanged.
    """
    variant = pe_mod.config_pe(model.config)
    found = False
    for module in model.modules():
        table = getattr(module, "embed_positions", None)
        if isinstance(table, torch.Tensor) and table.dim() == 2:
            found = True
            if table.shape[0] >= n_positions:
                continue
            new = pe_mod.gptj_rotary_table(variant, n_positions, table.shape[1]).to(table.device, table.dtype)
            module.embed_positions = new  # replaces the (non-persistent) buffer
            if hasattr(module, "max_positions"):
                module.max_positions = n_positions
    if not found:
        raise PosymError("model has no GPT-J rotary table (embed_positions); only GPT-J checkpoints are supported")
    if model.config.n_positions < n_positions:
        model.config.n_positions = n_positions
    return model


@contextmanager
def positions_extended(model: torch.nn.Module, n_positions: int) -> Iterator[torch.nn.Module]:
    """Context manager: :func:`extend_positions` for the duration, then every rotary table, its
    module's ``max_positions`` and ``config.n_positions`` restored exactly (the same tensors)."""
    saved = [(m, m.embed_positions, getattr(m, "max_positions", None)) for m in model.modules()
             if isinstance(getattr(m, "embed_positions", None), torch.Tensor)]
    n_config = model.config.n_positions
    try:
        yield extend_positions(model, n_positions)
    finally:
        for module, table, max_pos in saved:
            module.embed_positions = table
            if max_pos is not None:
                module.max_positions = max_pos
        model.config.n_positions = n_config


__all__ = ["HF_CONFIG", "HF_WEIGHTS", "PRESETS", "model_config", "apply_pe", "build_model", "save_model", "load_model",
           "checkpoint_model_type", "load_pretrained", "extend_positions", "positions_extended"]
