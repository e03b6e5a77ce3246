"""The absolute position of every token of the running forward, and the number of keys each query attends,
for the interventions that act by position (a per-head rotary change, :mod:`posym.interventions.rotary_heads`;
the temperature, :mod:`posym.interventions.temperature`): so they hold under a KV cache and padding
(docs/interventions.md).

The positions are the ones the model's own rotary embedding is called with — the ``position_ids`` that reach
its rotary module (Llama-like families, GPT-NeoX) or its attention layers (GPT-J, whose rotary table sits in
each attention module) — so a KV cache's offset and generation's left-padding positions are included exactly
as the model applies them. A model without a rotary module (a posym model trained without RoPE) gives them
to its forward: ``position_ids`` or ``cache_position`` there, else the length of the KV cache passed to it
plus the token index, else the token index (a full forward from position 0).

The number of keys of a query (:meth:`ForwardPositions.key_counts`, the temperature's ``n``) is not a position
id (a model trained with randomized positions has gaps in those): it is the count of real tokens up to and
including it — the running sum of the forward's 2-D ``attention_mask`` (past tokens included), or, without a
mask, the KV cache's length plus the token index plus 1.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from posym.errors import PosymError
from posym.model.adapters import unwrap_model


def position_ids_arg(args: tuple, kwargs: dict) -> Tensor | None:
    """The ``position_ids`` of a rotary module's or attention layer's call (keyword, or its second argument)."""
    pos = kwargs.get("position_ids")
    if pos is None and len(args) >= 2 and isinstance(args[1], Tensor):
        pos = args[1]
    return pos if isinstance(pos, Tensor) else None


def input_length(args: tuple, kwargs: dict) -> int | None:
    """The token count of a model forward's input (``input_ids`` or ``inputs_embeds``)."""
    for x in (kwargs.get("input_ids"), args[0] if args else None, kwargs.get("inputs_embeds")):
        if isinstance(x, Tensor):
            return int(x.shape[1]) if x.ndim >= 2 else int(x.shape[-1])
    return None


def _cache_length(kwargs: dict) -> int:
    """Tokens already held by the KV cache passed to a forward (``cache`` or ``past_key_values``), 0 for none."""
    for name in ("cache", "past_key_values"):
        c = kwargs.get(name)
        if c is not None and hasattr(c, "get_seq_length"):
            return int(c.get_seq_length())
    return 0


def rotary_callees(inner: nn.Module) -> list[nn.Module]:
    """The modules the model calls with its ``position_ids``: every rotary module (a buffer ``inv_freq`` or
    ``{layer_type}_inv_freq``), else every attention layer holding a GPT-J rotary table (``embed_positions``);
    empty for a model without either."""
    mods = [m for m in inner.modules() if isinstance(getattr(m, "inv_freq", None), Tensor)
            or any(isinstance(getattr(m, f"{lt}_inv_freq", None), Tensor) for lt in getattr(m, "layer_types", None) or ())]
    return mods or [m for m in inner.modules() if isinstance(getattr(m, "embed_positions", None), Tensor)]


class ForwardPositions:
    """Tracks the running forward's token positions while :meth:`attach`'s hooks are in place:
    :meth:`positions` ``[B or 1, T]`` (float64) and :attr:`n` (the forward's input length)."""

    def __init__(self, model: nn.Module, name: str):
        self.inner, self.name = unwrap_model(model), name
        self.pos: Tensor | None = None
        self.n: int | None = None
        self._offset = 0
        self._mask: Tensor | None = None
        self._unread: str | None = None  # why the key counts of this forward cannot be read
        self._counts: Tensor | None = None  # this forward's key counts, computed once for all its layers

    def attach(self, positions: bool = True) -> list[RemovableHandle]:
        """Register the hooks (a pre-hook of the model's forward and, for :meth:`positions`, one per
        :func:`rotary_callees`; ``positions=False``: key counts only); the caller removes the returned handles."""
        handles = [self.inner.register_forward_pre_hook(self._forward, with_kwargs=True)]
        if not positions:
            return handles
        return handles + [m.register_forward_pre_hook(self._rotary, with_kwargs=True) for m in rotary_callees(self.inner)]

    def _forward(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        # a new forward: its rotary module (if any) overrides these positions
        self.n, self._counts = input_length(args, kwargs), None
        cache_pos = kwargs.get("cache_position")
        given = kwargs.get("position_ids")
        given = cache_pos if given is None else given
        self.pos = given.detach() if isinstance(given, Tensor) else None
        self._offset = int(cache_pos.reshape(-1)[0]) if isinstance(cache_pos, Tensor) and cache_pos.numel() \
            else _cache_length(kwargs)
        mask, self._unread = kwargs.get("attention_mask"), None
        if mask is not None and (not isinstance(mask, Tensor) or mask.ndim != 2):
            self._unread = (f"the forward got a {getattr(mask, 'ndim', '?')}-D attention mask; pass the 2-D padding mask "
                            "(batch x tokens) that the model expands itself")
        elif len(args) > 1:
            self._unread = ("call the model with its input ids and keyword arguments (attention_mask=…, cache=…), so "
                            "the intervention sees the padding and the KV cache")
        self._mask = mask.detach() if isinstance(mask, Tensor) and self._unread is None else None

    def _rotary(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        pos = position_ids_arg(args, kwargs)
        if pos is not None:
            self.pos = pos.detach()

    def positions(self, T: int, B: int, device: torch.device | str) -> Tensor:
        """The absolute position of each of the ``T`` tokens of the running forward, ``[B or 1, T]`` float64
        (one row when all rows share them); one-line PosymError when the positions cannot be matched."""
        pos = self.pos
        if pos is None:
            return (torch.arange(T, device=device, dtype=torch.float64) + self._offset)[None]
        pos = pos.reshape(-1, pos.shape[-1])
        if pos.shape[-1] != T:
            raise PosymError(f"{self.name}: a forward of {T} tokens ran with the positions of {pos.shape[-1]} tokens; "
                             "run the model's own forward")
        if pos.shape[0] not in (1, B):
            if not bool((pos == pos[:1]).all()):
                raise PosymError(f"{self.name}: cannot match {pos.shape[0]} rows of position ids to a batch of {B}")
            pos = pos[:1]
        return pos.to(device=device, dtype=torch.float64)

    def key_counts(self, T: int, B: int, device: torch.device | str) -> Tensor:
        """The number of keys each of the ``T`` queries of the running forward attends, itself included,
        ``[B or 1, T]`` float64, at least 1 (a padding token's count is 0 and is taken as 1: its output is
        masked). One-line PosymError when the forward's call hides them (a 4-D mask, positional arguments)."""
        if self._unread is not None:
            raise PosymError(f"{self.name}: {self._unread}")
        c = self._counts
        if c is not None and c.shape[-1] == T and c.shape[0] in (1, B) and c.device == torch.device(device):
            return c
        if self._mask is None:
            c = torch.arange(self._offset + 1, self._offset + T + 1, device=device, dtype=torch.float64)[None]
        else:
            m = self._mask
            if m.shape[-1] != self._offset + T or m.shape[0] not in (1, B):
                raise PosymError(f"{self.name}: an attention mask of shape {tuple(m.shape)} does not cover {self._offset} "
                                 f"cached + {T} new tokens of a batch of {B}; pass the mask of the cached and the new tokens")
            c = m.to(device=device, dtype=torch.float64).cumsum(-1)[:, self._offset:].clamp(min=1.0)
        self._counts = c
        return c


__all__ = ["ForwardPositions", "input_length", "position_ids_arg", "rotary_callees"]
