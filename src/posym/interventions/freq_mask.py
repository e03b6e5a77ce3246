"""Frequency masks at inference: keep only a set of RoPE frequency IDs (1 = fastest, the numbering of
``theory/restricted.py`` and Paper B) in q and k of the chosen layers; the dropped rotary pairs are
zeroed where the adapter captures q and k (``q_proj``/``k_proj``, or the q/k norms of Qwen3 / Gemma-3,
after which q and k are linear up to the logit; :mod:`posym.interventions.sites`), so they contribute
nothing to the logit (p-RoPE at inference: keep the fastest IDs; a band: keep a range). The
non-rotary dims of a partial rotary are untouched. Exact for the families of
:data:`~posym.interventions.sites.LINEAR_QK_FAMILIES`; restored on exit by removing the hooks.

With ``heads`` (``(layer, query head)`` pairs) only those query heads' q is masked: the logit term of a
rotary pair is q·k over that pair, so zeroing it in q alone removes it exactly for that head, while k
(shared by the query heads of a GQA group) and every other head stay untouched.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ContextManager, Iterable, Iterator, Mapping, Sequence

import torch
from torch import Tensor, nn

from posym.errors import PosymError
from posym.interventions.registry import (Intervention, check_heads_arg, format_head_pairs, format_ids, parse_heads_key,
                                          parse_ids, register)
from posym.interventions.sites import head_sites, hook_qk, linear_sites, scale_dims, scale_heads, with_full_forward
from posym.model.rope import expand_pairs

#: ``freq-mask:keep=none``: no frequency kept (every rotary logit term 0), written out so an empty
#: ``keep=`` (a typo) is refused rather than read as "drop all".
KEEP_NONE = "none"


@register("freq-mask")
@dataclass(frozen=True)
class FreqMask(Intervention):
    """A frequency mask: the kept IDs (1 = fastest), the layers (None = all) and the query heads
    (``(layer, head)`` pairs; None = q and k of every head of ``layers``)."""

    keep: tuple[int, ...]
    layers: tuple[int, ...] | None = None
    heads: tuple[tuple[int, int], ...] | None = None

    keys = ("keep", "layers", "heads")
    example = "freq-mask:keep=1+2+3"
    per_layer = True
    per_head = True
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
        return cls(keep, layers, parse_heads_key(kv, layers))

    def canonical(self) -> str:
        """``freq-mask:keep=1+2+3`` (``keep=none`` for none), then ``layers=…`` when restricted."""
        text = "freq-mask:keep=" + (format_ids(self.keep) or KEEP_NONE)
        text += ",layers=" + format_ids(self.layers) if self.layers is not None else ""
        return text + (",heads=" + format_head_pairs(self.heads) if self.heads is not None else "")

    def describe(self) -> str:
        kept = f"RoPE frequency IDs {format_ids(self.keep)}" if self.keep else "no RoPE frequency"
        where = "every layer" if self.layers is None else "layers " + format_ids(self.layers)
        if self.heads is not None:
            return f"q of query heads {format_head_pairs(self.heads)} keeps {kept} (1 = fastest)"
        return f"q and k keep {kept} (1 = fastest) in {where}"

    def apply(self, model: nn.Module) -> ContextManager[FreqMask]:
        return freq_mask(model, self.keep, layers=self.layers, heads=self.heads)

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


def _mask_heads(mask: Tensor, heads: tuple[int, ...]):
    """``q_fn`` of :func:`~posym.interventions.sites.hook_qk`: the dims of query ``heads`` times ``mask``
    [hd], every other head's times exactly 1.0 (bit-identical)."""
    def apply(out: Tensor, n_heads: int, heads_first: bool) -> Tensor:
        m = torch.ones(1, n_heads, mask.shape[0], dtype=mask.dtype)
        m[0, list(heads)] = mask
        return scale_heads(out, m, n_heads, heads_first)
    return apply


@with_full_forward
@contextmanager
def freq_mask(model: nn.Module, keep: Iterable[int], *, layers: Sequence[int] | None = None,
              heads: Sequence[tuple[int, int]] | None = None) -> Iterator[FreqMask]:
    """Context manager: only RoPE frequency IDs ``keep`` (1 = fastest) of q and k in ``layers`` (None =
    all) for the duration; all IDs kept multiplies by exactly 1.0 (a bit-for-bit no-op). ``heads``:
    ``(layer, query head)`` pairs (not with ``layers``): only those heads' q is masked (module doc; GQA:
    the shared k is untouched)."""
    heads = check_heads_arg(heads, layers, "freq-mask")
    if heads is not None:
        ad, per_layer = head_sites(model, heads, "freq-mask")
        keep = check_keep(keep, ad.rotary_dim // 2)
        mask = _head_mask(keep, ad.head_dim, ad.rotary_dim, ad.pair_convention)
        handles = []
        try:
            for site, hs in per_layer:
                handles += hook_qk(ad, [site], _mask_heads(mask, hs), None)
            yield FreqMask(keep, None, heads)
        finally:
            for h in handles:
                h.remove()
        return
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
