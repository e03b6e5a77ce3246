"""Position interpolation at inference (Chen et al. 2023): every RoPE position ``p`` becomes the
fractional position ``p·c`` for the duration, with

* ``factor=F`` (fixed): ``c = 1/F``;
* ``n_train=N`` (dynamic): ``c = min(1, N/n)``, ``n`` the sequence length of the forward (the context
  length of its last query; posym's scoring truncates each prompt at its query, so there it is the
  query's context length). Inputs no longer than ``N`` are untouched.

The weights are untouched. GPT-J: the rotary table (sin | cos of ``p·ω_k``, the model's own
variant, :mod:`posym.model.pe`) is rebuilt with the positions ``p·c`` (transformers' expression with
float positions, so ``c = 1`` is bit-identical) by a
forward pre-hook on the model, before every forward whose ``c`` or length the table does not cover;
the adapter's ``cos_sin`` (head scores) reads the same table. Llama-like families: a forward pre-hook
on the rotary module multiplies its ``position_ids`` by ``c`` (Gemma-3's one module, called as
``(x, position_ids, layer_type)`` once per layer type, so both types' positions scale alike). The original tensors are put back on
exit, also after an exception. Positions are the token indices of the forward's input (a full
sequence, no KV cache, no left padding).
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ContextManager, Iterator, Mapping, Sequence

import numpy as np
from torch import Tensor, nn

from posym.checks import check_float
from posym.errors import PosymError
from posym.interventions.registry import MAX_N_TRAIN, Intervention, format_number, parse_heads_key, register
from posym.interventions.sites import with_full_forward
from posym.interventions.rope import (_family, _gptj_tables, _rope_modules, gptj_table, parse_layers_key, selected_heads,
                                      selection_suffix, selection_words)

#: The largest fixed interpolation factor: ``c = 1/F`` maps a million-token context into one position.
MAX_FACTOR = 1e6


@register("interpolate")
@dataclass(frozen=True)
class Interpolate(Intervention):
    """Position interpolation: a fixed ``factor`` (c = 1/F) or dynamic from ``n_train`` (c = min(1, N/n)).

    One class for both: they share the name ``interpolate``, the mechanism and the context manager,
    and differ only in :func:`interpolation_scale`."""

    factor: float | None = None
    n_train: int | None = None
    layers: tuple[int, ...] | None = None
    heads: tuple[tuple[int, int], ...] | None = None

    keys = ("factor", "n_train", "layers", "heads")
    example = "interpolate:n_train=17"
    per_layer = True
    per_head = True

    @classmethod
    def parse(cls, kv: Mapping[str, str]) -> Interpolate:
        """``factor`` (in [1, 1e6], fixed) or ``n_train`` (dynamic): exactly one; ``layers`` or ``heads``."""
        spec = check_interpolate(kv.get("factor"), kv.get("n_train"))
        layers = parse_layers_key(kv, "interpolate")
        return dataclasses.replace(spec, layers=layers, heads=parse_heads_key(kv, layers))

    def canonical(self) -> str:
        """``interpolate:factor=F`` or ``interpolate:n_train=N``, then ``layers=…`` or ``heads=…``."""
        if self.factor is not None:
            return f"interpolate:factor={format_number(self.factor)}" + selection_suffix(self)
        return f"interpolate:n_train={self.n_train}" + selection_suffix(self)

    def describe(self) -> str:
        where = "" if self.layers is None and self.heads is None else f" in {selection_words(self)}"
        if self.factor is not None:
            return f"RoPE positions p -> p/{self.factor:g} (fixed position interpolation){where}"
        return f"RoPE positions p -> p·min(1, {self.n_train}/n), n the input length (dynamic position interpolation){where}"

    def apply(self, model: nn.Module) -> ContextManager[Interpolate]:
        return interpolate(model, factor=self.factor, n_train=self.n_train, layers=self.layers, heads=self.heads)

    def theory_effect(self, base: float, rotary_dim: int) -> dict[str, Any]:
        """Positions times ``c(n)`` (:func:`interpolation_scale`)."""
        return {"position_scale": lambda ns: np.array([interpolation_scale(self, int(n)) for n in ns])}


def check_interpolate(factor: Any = None, n_train: Any = None) -> Interpolate:
    """Exactly one of ``factor`` (finite, ≥ 1) and ``n_train`` (integer ≥ 1); a one-line PosymError otherwise."""
    if (factor is None) == (n_train is None):
        raise PosymError("interpolate: give exactly one of factor (fixed, e.g. interpolate:factor=4) "
                         "or n_train (dynamic, e.g. interpolate:n_train=17)")
    if factor is not None:
        return Interpolate(factor=check_float(factor, "interpolate: factor", 1, MAX_FACTOR, hint=(
            " (1 = no change; a larger factor maps a million-token context into less than one position), e.g. factor=4")))
    try:
        n = int(str(n_train))
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_N_TRAIN:
        raise PosymError(f"interpolate: n_train={n_train!r} must be an integer >= 1 and <= {MAX_N_TRAIN:.0e} "
                         "(the training length, 17 for posym runs)")
    return Interpolate(n_train=n)


def interpolation_scale(spec: Interpolate, n: int) -> float:
    """``c`` for a forward of ``n`` tokens: ``1/factor``, or ``min(1, n_train/n)``."""
    if spec.factor is not None:
        return 1.0 / spec.factor
    return 1.0 if n <= spec.n_train else spec.n_train / n


def _length(args: tuple, kwargs: dict) -> int | None:
    for x in (kwargs.get("input_ids"), args[0] if args else None):
        if isinstance(x, Tensor):
            return int(x.shape[-1])
    emb = kwargs.get("inputs_embeds")
    return int(emb.shape[-2]) if isinstance(emb, Tensor) else None


@with_full_forward
@contextmanager
def interpolate(model: nn.Module, *, factor: float | None = None, n_train: int | None = None,
                layers: Sequence[int] | None = None, heads: Sequence[tuple[int, int]] | None = None) -> Iterator[Interpolate]:
    """Context manager: RoPE positions ``p`` → ``p·c`` (module docstring) for the duration; restored on
    exit. ``factor=1`` (and ``n_train`` ≥ every input length) is a bit-for-bit no-op. ``layers`` /
    ``heads``: only those query heads (a delta rotation of their q and k,
    :mod:`posym.interventions.rotary_heads`). Yields the :class:`Interpolate` applied."""
    spec = check_interpolate(factor, n_train)
    sel = selected_heads(model, layers, heads, "interpolate")
    if sel is not None:
        from posym.interventions.rotary_heads import rotary_heads

        spec = dataclasses.replace(spec, layers=None if layers is None else tuple(int(l) for l in layers),
                                   heads=None if heads is None else sel)
        with rotary_heads(model, sel, spec.canonical(), None,
                          position_scale=lambda n: interpolation_scale(spec, n)):
            yield spec
        return
    inner, mt = _family(model, "interpolate")
    state = {"c": 1.0}
    handles = []
    if mt == "gptj":
        mods = _gptj_tables(inner)
        saved = [(m, m.embed_positions) for m in mods]
        built: dict[int, tuple[Tensor, float]] = {}

        def gptj_hook(module, args, kwargs):
            n = _length(args, kwargs)
            if n is None:
                return None
            c = interpolation_scale(spec, n)
            for m in mods:
                t = m.embed_positions
                mine = built.get(id(m))
                if mine is None or mine[0] is not t or mine[1] != c or t.shape[0] < n:
                    rows = max(n, t.shape[0])
                    new = gptj_table(inner, rows, t.shape[1], position_scale=c).to(t.device, t.dtype)
                    m.embed_positions = new
                    built[id(m)] = (new, c)
            return None

        try:
            handles.append(inner.register_forward_pre_hook(gptj_hook, with_kwargs=True))
            yield spec
        finally:
            for h in handles:
                h.remove()
            for m, t in saved:
                m.embed_positions = t
        return

    mods = _rope_modules(inner)

    def length_hook(module, args, kwargs):
        n = _length(args, kwargs)
        if n is not None:
            state["c"] = interpolation_scale(spec, n)
        return None

    def rotary_hook(module, args, kwargs):
        c = state["c"] if spec.n_train is not None else 1.0 / spec.factor
        if c == 1.0:
            return None
        args = list(args)
        if len(args) >= 2:
            args[1] = args[1].float() * c
        elif "position_ids" in kwargs:
            kwargs = {**kwargs, "position_ids": kwargs["position_ids"].float() * c}
        else:
            raise PosymError(f"interpolate: cannot find position_ids in the call of {type(module).__name__}")
        return tuple(args), kwargs

    try:
        handles.append(inner.register_forward_pre_hook(length_hook, with_kwargs=True))
        for m in mods:
            handles.append(m.register_forward_pre_hook(rotary_hook, with_kwargs=True))
        yield spec
    finally:
        for h in handles:
            h.remove()


__all__ = ["MAX_FACTOR", "Interpolate", "check_interpolate", "interpolation_scale", "interpolate"]
