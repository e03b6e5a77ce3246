"""Frequency masks at inference: keep only a set of RoPE frequency IDs (1 = fastest, the numbering of
``theory/restricted.py`` and Paper B) in q and k of the chosen layers; the dropped rotary pairs are
zeroed where the adapter captures q and k (``q_proj``/``k_proj``, or the q/k norms of Qwen3 / Gemma-3,
after which q and k are linear up to the logit; :mod:`posym.interventions.sites`), so they contribute
nothing to the logit (p-RoPE at inference: keep the fastest IDs; a band: keep a range). The
non-rotary dims of a partial rotary are untouched. Exact for the families of
:data:`~posym.interventions.sites.LINEAR_QK_FAMILIES`; restored on exit by removing the hooks.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ContextManager, Iterable, Iterator, Mapping, Sequence

import torch
from torch import Tensor, nn

from posym.errors import PosymError
from posym.interventions.registry import Intervention, format_ids, parse_ids, register
from posym.interventions.sites import hook_qk, linear_sites, scale_dims, with_full_forward
from posym.model.rope import expand_pairs

#: ``freq-mask:keep=none``: no frequency kept (every rotary logit term 0), written out so an empty
#: ``keep=`` (a typo) is refused rather than read as "drop all".
KEEP_NONE = "none"


@register("freq-mask")
@dataclass(frozen=True)
class FreqMask(Intervention):
    """A frequency mask: the kept IDs (1 = fastest) and the layers (None = all)."""

    keep: tuple[int, ...]
    layers: tuple[int, ...] | None = None

    keys = ("keep", "layers")
    example = "freq-mask:keep=1+2+3"
    per_layer = True
    exact_under_kv_cache = True  # a fixed mask of q and k dims, the same at every position

    @classmethod
    def parse(cls, kv: Mapping[str, str]) -> FreqMask:
        """``keep``: IDs joined by '+' (checked against the model when applied; ``none`` keeps none, an
        empty value is refused); ``layers`` (``0+2``)."""
        if "keep" not in kv:
            raise PosymError("freq-mask needs keep, e.g. freq-mask:keep=1+2+3 (frequency IDs, 1 = fastest)")
        try:
            keep = () if kv["keep"] == KEEP_NONE else tuple(sorted(set(parse_ids(kv["keep"]))))
            layers = parse_ids(kv["layers"]) if "layers" in kv else None
        except ValueError:
            raise PosymError(f"freq-mask: keep and layers must be integers joined by '+', e.g. keep=1+2 "
                             f"(keep={KEEP_NONE} drops every frequency: all rotary logits 0)") from None
        if any(k < 1 for k in keep):
            raise PosymError("freq-mask: frequency IDs start at 1 (the fastest)")
        return cls(keep, layers)

    def canonical(self) -> str:
        """``freq-mask:keep=1+2+3`` (``keep=none`` for none), then ``layers=…`` when restricted."""
        text = "freq-mask:keep=" + (format_ids(self.keep) or KEEP_NONE)
        return text + (",layers=" + format_ids(self.layers) if self.layers is not None else "")

    def describe(self) -> str:
        kept = f"RoPE frequency IDs {format_ids(self.keep)}" if self.keep else "no RoPE frequency"
        where = "every layer" if self.layers is None else "layers " + format_ids(self.layers)
        return f"q and k keep {kept} (1 = fastest) in {where}"

    def apply(self, model: nn.Module) -> ContextManager[FreqMask]:
        return freq_mask(model, self.keep, layers=self.layers)

    def theory_effect(self, base: float, rotary_dim: int) -> dict[str, Any]:
        """The kept frequency IDs of ``rotary_dim`` (checked: 1..rotary_dim/2)."""
        return {"keep": check_keep(self.keep, rotary_dim // 2) if self.keep else ()}


def check_keep(keep: Iterable[int], n_freq: int) -> tuple[int, ...]:
    """The kept IDs sorted; one-line PosymError for an ID outside 1..``n_freq`` or a non-integer."""
    try:
        ids = sorted({int(k) for k in keep})
    except (TypeError, ValueError):
        raise PosymError(f"freq-mask: keep={keep!r} must be integer frequency IDs in 1..{n_freq}") from None
    bad = [k for k in ids if not 1 <= k <= n_freq]
    if bad:
        raise PosymError(f"freq-mask: frequency IDs must be in 1..{n_freq} (1 = fastest), got {bad}")
    return tuple(ids)


def _head_mask(keep: tuple[int, ...], head_dim: int, rotary_dim: int, convention: str) -> Tensor:
    """[head_dim] of 1 (kept or non-rotary) and 0 (dropped rotary pair), in the pair convention."""
    per_pair = torch.tensor([float(i + 1 in keep) for i in range(rotary_dim // 2)])
    head = torch.ones(head_dim)
    head[:rotary_dim] = expand_pairs(per_pair, convention)
    return head


def _mask(mask: Tensor):
    """``q_fn`` / ``k_fn`` of :func:`~posym.interventions.sites.hook_qk`: each head's dims times ``mask``."""
    def apply(out: Tensor, n_heads: int, heads_first: bool) -> Tensor:
        return scale_dims(out, mask, n_heads)
    return apply


@with_full_forward
@contextmanager
def freq_mask(model: nn.Module, keep: Iterable[int], *, layers: Sequence[int] | None = None) -> Iterator[FreqMask]:
    """Context manager: only RoPE frequency IDs ``keep`` (1 = fastest) of q and k in ``layers`` (None =
    all) for the duration; all IDs kept multiplies by exactly 1.0 (a bit-for-bit no-op)."""
    ad, sites = linear_sites(model, layers, "freq-mask")
    keep = check_keep(keep, ad.rotary_dim // 2)
    chosen = [layer for layer, *_ in sites]
    mask = _head_mask(keep, ad.head_dim, ad.rotary_dim, ad.pair_convention)
    handles = []
    try:
        handles = hook_qk(ad, sites, _mask(mask), _mask(mask))
        yield FreqMask(keep, None if layers is None else tuple(chosen))
    finally:
        for h in handles:
            h.remove()


__all__ = ["FreqMask", "check_keep", "freq_mask"]
