"""Classic head detectors (SPEC §7).

The detection patterns are TransformerLens 4's (``transformer_lens.head_detector``): for prompt
tokens ``x_0 .. x_{T-1}``, query ``i`` and key ``j <= i``,

* **previous_token**: ``j = i - 1``;
* **duplicate_token**: ``j < i`` and ``x_j = x_i`` (every earlier occurrence of the current token);
* **induction**: ``1 <= j <= i`` and ``x_{j-1} = x_i`` with ``j - 1 < i`` (the token after an earlier
  occurrence of the current token);
* **first_token**: ``j = 0`` (the start token, where attention sinks form).

A head's score on one prompt is the attention it puts on the pattern's keys, averaged over query rows
(``A`` = its causal post-softmax attention [T, T], ``P`` the 0/1 pattern):

* ``rows="target"`` (default): the mean over the query rows that have at least one pattern key of
  ``Σ_j A[i, j]·P[i, j]`` — the share of attention on the targets, so an ideal head of the type scores
  1 whatever the prompt (on ``[bos] x x`` the induction and duplicate-token targets exist only in the
  second half);
* ``rows="all"``: TransformerLens's ``"mul"`` score ``Σ A·P / Σ A`` (no exclusions), every row counted,
  so an ideal induction head scores ``n / T`` ≈ 0.5 on ``[bos] x x``. Rankings of heads, and so the
  rank correlations of :mod:`posym.heads.head_types`, are the same under both when all prompts share
  one layout (the random repeated sequences of :mod:`posym.tasks.repeated` do).

``first_token`` is the same under both (every row has key 0): it is Gu et al. (2024)'s importance
score ``α(1)`` of the first token. ``sink_eps=ε`` adds ``sink``: the fraction of prompts on which
``first_token > ε`` — Gu et al.'s ε-threshold indicator ``I(α(1) > ε)`` per head (their default
ε = 0.3, :data:`SINK_EPS`); averaged over all heads it is their model-level metric ``Sink_1^ε``.
Scores are averaged over prompts (a prompt without a row for a pattern is left out of that mean).

The attention is the adapter's recomputation from the captured pre-rotary q/k
(:meth:`posym.model.adapters.RopeAdapter.attention_from_qk`, equal to the model's eager attention to
1e-5 for every supported family), one forward per ``batch_size`` prompts stopped after the last
requested layer; the hooks are removed afterwards, whatever happens.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from posym.checks import check_positive_int
from posym.errors import PosymError
from posym.heads.scores import check_vocab
from posym.heads.swaps import as_ids
from posym.model.adapters import eval_mode, get_adapter

#: The detectors, in table order.
DETECTORS: tuple[str, ...] = ("previous_token", "duplicate_token", "induction", "first_token")
#: Gu et al. (2024)'s threshold ε of the attention-sink indicator.
SINK_EPS = 0.3
#: Row conventions of the detector scores (module doc).
ROWS: tuple[str, ...] = ("target", "all")


def detection_patterns(input_ids: Tensor) -> dict[str, Tensor]:
    """The 0/1 detection patterns of :data:`DETECTORS` for prompts [B, T] -> bool [B, T, T] each
    (``[b, i, j]``: query ``i``, key ``j``; TransformerLens 4's patterns, module doc)."""
    ids = torch.as_tensor(input_ids)
    T = ids.shape[1]
    i = torch.arange(T, device=ids.device)[:, None]
    j = torch.arange(T, device=ids.device)[None, :]
    same = ids[:, :, None] == ids[:, None, :]  # [b, i, j]: x_i == x_j
    dup = same & (j < i)
    ind = torch.zeros_like(dup)
    ind[:, :, 1:] = dup[:, :, :-1]  # key j is the token after an earlier occurrence j-1 of x_i
    prev = (j == i - 1).expand_as(dup)
    first = (j == 0).expand_as(dup)
    return {"previous_token": prev, "duplicate_token": dup, "induction": ind, "first_token": first}


def _check_rows(rows: str) -> str:
    if rows not in ROWS:
        raise PosymError(f"rows must be one of {list(ROWS)}, got {rows!r}")
    return rows


def check_sink_eps(sink_eps: Any) -> float | None:
    """``None`` or a threshold ε in (0, 1) for the sink indicator."""
    if sink_eps is None:
        return None
    if isinstance(sink_eps, bool) or not isinstance(sink_eps, numbers.Real) or not 0 < float(sink_eps) < 1:
        raise PosymError(f"sink_eps must be a number in (0, 1) (Gu et al. use {SINK_EPS}), got {sink_eps!r}")
    return float(sink_eps)


def pattern_scores(attention: Tensor, patterns: dict[str, Tensor], rows: str = "target") -> dict[str, Tensor]:
    """Per-prompt detector scores from attention [B, H, T, T] and patterns [B, T, T] -> [B, H] float64
    each (NaN for a prompt with no row of that pattern under ``rows="target"``)."""
    a = attention.double()
    out = {}
    for name, p in patterns.items():
        hit = (a * p[:, None].double()).sum(-1)  # [B, H, T]: attention on the targets per row
        if _check_rows(rows) == "all":
            out[name] = hit.sum(-1) / a.sum((-2, -1))
        else:
            has = p.any(-1)[:, None].double()  # [B, 1, T]
            n = has.sum(-1)
            out[name] = torch.where(n > 0, (hit * has).sum(-1) / n.clamp_min(1), torch.full_like(n, float("nan")))
    return out


def detector_arrays(model, input_ids, *, layers: Sequence[int] | None = None, batch_size: int = 16,
                    rows: str = "target") -> tuple[dict[str, np.ndarray], tuple[int, ...]]:
    """Per-prompt detector scores: ``({detector: float64 [B, L, H]}, layers)`` (module doc)."""
    _check_rows(rows)
    batch_size = check_positive_int(batch_size, "batch_size")
    ad = get_adapter(model)
    ids = as_ids(input_ids, ad, min_len=2)
    check_vocab(ad, ids)
    layers = ad.check_layers(layers)
    parts: dict[str, list[np.ndarray]] = {d: [] for d in DETECTORS}
    with eval_mode(ad.model), torch.no_grad():
        for s in range(0, ids.shape[0], batch_size):
            chunk = ids[s:s + batch_size]
            pats = detection_patterns(chunk)
            stores = ad.capture(chunk, layers)
            per_layer = []
            for l in layers:
                att = ad.attention_from_qk(stores[l]["q"], stores[l]["k"], l)  # [b, H, T, T]
                per_layer.append(pattern_scores(att, pats, rows))
            for d in DETECTORS:
                parts[d].append(torch.stack([x[d] for x in per_layer], dim=1).cpu().numpy())
    return {d: np.concatenate(parts[d]) for d in DETECTORS}, tuple(layers)


def detector_scores(model, input_ids, *, layers: Sequence[int] | None = None, batch_size: int = 16,
                    sink_eps: float | None = None, rows: str = "target",
                    per_prompt: bool = False) -> pd.DataFrame:
    """Classic detector scores of every head (SPEC §7).

    model: any model posym's adapter supports (GPT-J, Llama-like, Gemma, ...; or a ``RopeAdapter``),
    any attention implementation. input_ids: [B, T] unpadded prompts (for induction and duplicate
    tokens, e.g. :func:`posym.tasks.repeated.repeated_random_sequences`). layers: default all.
    sink_eps: adds ``sink``, Gu et al.'s ε-threshold indicator as a fraction of prompts.
    rows: ``"target"`` (default, a perfect head scores 1) or ``"all"`` (TransformerLens's score).
    Returns one row per (layer, head) with columns ``layer, head, previous_token, duplicate_token,
    induction, first_token`` (+ ``sink``), averaged over prompts; ``per_prompt=True``: one row per
    (prompt, layer, head) with a leading ``prompt`` column (``sink`` then 0 or 1). Memory per layer
    is O(batch_size · H · T²) float64 (lower ``batch_size`` for long prompts).
    """
    eps = check_sink_eps(sink_eps)
    arrays, layers = detector_arrays(model, input_ids, layers=layers, batch_size=batch_size, rows=rows)
    if eps is not None:
        arrays["sink"] = (arrays["first_token"] > eps).astype(float)
    B, L, H = arrays["first_token"].shape
    if per_prompt:
        shape = (B, L, H)
        cols = {"prompt": np.broadcast_to(np.arange(B)[:, None, None], shape).ravel(),
                "layer": np.broadcast_to(np.asarray(layers)[None, :, None], shape).ravel(),
                "head": np.broadcast_to(np.arange(H)[None, None, :], shape).ravel()}
        cols.update({k: v.ravel() for k, v in arrays.items()})
        return pd.DataFrame(cols)
    cols = {"layer": np.repeat(np.asarray(layers), H), "head": np.tile(np.arange(H), L)}
    with np.errstate(all="ignore"):
        for k, v in arrays.items():
            ok = ~np.isnan(v)
            cols[k] = np.where(ok.any(0), np.where(ok, v, 0.0).sum(0) / np.maximum(ok.sum(0), 1), np.nan).ravel()
    return pd.DataFrame(cols)


__all__ = [
    "DETECTORS",
    "ROWS",
    "SINK_EPS",
    "check_sink_eps",
    "detection_patterns",
    "detector_arrays",
    "detector_scores",
    "pattern_scores",
]
