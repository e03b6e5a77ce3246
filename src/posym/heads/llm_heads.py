"""``posym llm heads``: positional/symbolic scores of every head of a real RoPE LLM (SPEC §3, §4, §6).

For each prompt set (:mod:`posym.tasks.llm_prompts`: entity–attribute ``binding`` prompts and the
1-hop ``number`` / ``letter`` prompts) and every (layer, head) of the model:

* ``s_pos``, ``s_sym`` — Paper B's *block* version of SPEC §3 (whole blocks swapped; one block per
  fact / per window token, see :mod:`posym.tasks.llm_prompts`), fast exact path
  (:func:`posym.heads.scores.swap_attention` with ``blocks``, the engine of
  :func:`posym.heads.scores.scores_blocks_fast`), query = the prompt's last token, one τ
  (default 1e-4), averaged over the prompts of the set;
* ``block_mass`` — the query's total attention on the blocks (the rest goes to the tokens outside
  them: prefix, instructions, the query's own statement, itself); a head with little block mass is
  scored on small differences;
* ``entropy`` — normalised entropy of the query's full causal attention (``log(t+1)`` normalised,
  :func:`posym.heads.scores.normalised_entropy`), averaged over prompts;
* frequency use (SPEC §4, ``u_k = mean over prompts of max_j |λ^(k)_{t,j}|``, keys ``0..t``) and
  Paper A's Table 1 columns per head (``weighted_id``, ``dominant_id``, ...) from
  :func:`posym.heads.frequencies.weighted_frequency_id`;
* per set, the top-1 next-token accuracy of the model on the prompts (first token of the answer).

Summary statistics in the spirit of SPEC §6 (:func:`summarize_llm_heads`): median s_POS / s_SYM in
the first half of the layers (``0 .. L//2 - 1``) vs the second half, and Pearson r of s_POS vs
s_SYM across all heads (Paper B: 0.83 vs 0.56 for gemma-2-2b; r ≈ −0.91).

The adapter works with any attention implementation (it hooks the q/k projections and recomputes
the attention), so the model is loaded as :func:`posym.model.llm.load_llm` loads it; eager
attention is only needed by the literal reference path (tests). Prompts sharing a token length and
block layout are batched together (``batch_size`` prompts per forward); each batch costs two
forwards (the score capture, which stops after the last layer, and one full pass for frequency use
and the next-token prediction).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from posym.errors import PosymError
from posym.heads.frequencies import (
    frequency_terms_from_qk,
    use_frame,
    weighted_frequency_id,
)
from posym.tasks.llm_prompts import (
    DEFAULT_LENGTH,
    DEFAULT_N_ENTITIES,
    DEFAULT_N_EXAMPLES,
    PROMPT_SETS,
    LLMPrompt,
    build_prompts,
    group_prompts,
)
from posym.heads.scores import DEFAULT_TAU, _taus, swap_attention
from posym.model.adapters import RopeAdapter, get_adapter

DEFAULT_N = 32
TABLE_COLUMNS = ["prompt_set", "layer", "head", "kv_head", "s_pos", "s_sym", "entropy", "block_mass", "tau",
                 "n_prompts", "weighted_id", "weighted_angle", "dominant_id", "dominant_angle", "nonrotary_share"]
SUMMARY_COLUMNS = ["prompt_set", "n_prompts", "accuracy", "n_layers", "n_heads", "first_half", "second_half",
                   "median_s_pos_first", "median_s_pos_second", "median_s_sym_first", "median_s_sym_second",
                   "pearson_r", "median_block_mass"]


# ================================================================================================
# argument handling
# ================================================================================================
def parse_prompt_sets(prompts: str | Sequence[str]) -> tuple[str, ...]:
    """``"all"`` | one set | a comma-separated list / sequence of sets -> the sets, in canonical order."""
    items = prompts.split(",") if isinstance(prompts, str) else list(prompts)
    items = [str(x).strip() for x in items if str(x).strip()]
    if items == ["all"]:
        return PROMPT_SETS
    bad = [x for x in items if x not in PROMPT_SETS]
    if bad or not items:
        raise PosymError(f"unknown prompt set(s) {bad or items}; choose from all, {', '.join(PROMPT_SETS)}")
    return tuple(s for s in PROMPT_SETS if s in items)


def _positive(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < 1:
        raise PosymError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


def _load(model: Any, gguf: Any, tokenizer: Any, device: str | None, dtype: Any) -> tuple[Any, Any, str]:
    """(model, tokenizer, label): an in-memory HF model (``tokenizer`` required) or :func:`load_llm`."""
    if isinstance(model, torch.nn.Module):
        if tokenizer is None:
            raise PosymError("an in-memory model needs its tokenizer (tokenizer=...)")
        name = getattr(model.config, "_name_or_path", "") or type(model).__name__
        return model, tokenizer, str(name)
    from posym.model.llm import load_llm, model_label

    lm, tok = load_llm(model, gguf, device=device, dtype=dtype)
    return lm, tok, model_label(model, gguf)


# ================================================================================================
# per-batch computations
# ================================================================================================
@torch.no_grad()
def _full_pass(ad: RopeAdapter, ids: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """One full forward: frequency use ``max_j |λ^(k)_{t,j}|`` [B, L, H, F] of the last token and the
    greedy next token [B]."""
    L = ad.n_layers
    with ad.capturing(range(L)) as stores:
        logits = ad.run(ids).logits[:, -1]
    t = ids.shape[1] - 1
    use = []
    for l in range(L):
        terms = frequency_terms_from_qk(ad, stores[l]["q"][:, :, t], stores[l]["k"], t, l)  # [B, H, F, t+1]
        win = ad.sliding_window(l)
        if win is not None:
            outside = (t - torch.arange(t + 1, device=terms.device)) >= win
            terms = terms.masked_fill(outside, 0.0)
        use.append(terms.abs().amax(-1))
    return torch.stack(use, dim=1).cpu().numpy(), logits.argmax(-1).cpu().numpy()


def _batches(prompts: Sequence[LLMPrompt], batch_size: int) -> list[tuple[tuple[tuple[int, int], ...], list[int]]]:
    out = []
    for (_, blocks), idx in group_prompts(prompts).items():
        for s in range(0, len(idx), batch_size):
            out.append((blocks, idx[s:s + batch_size]))
    return out


def score_prompt_set(ad: RopeAdapter, prompts: Sequence[LLMPrompt], tau: float = DEFAULT_TAU, *,
                     batch_size: int = 8, bar: Any = None) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """Scores of one prompt set: ``(heads, freq_use, accuracy)``.

    ``heads``: one row per (layer, head) — ``layer, head, kv_head, s_pos, s_sym, entropy, block_mass,
    tau, n_prompts`` and the Table 1 columns; ``freq_use``: per (layer, head, freq_id) as
    :func:`posym.heads.frequencies.frequency_use`; ``accuracy``: top-1 next-token accuracy on the
    prompts with a known answer token (NaN when none). ``bar``: an optional tqdm bar (one tick per batch).
    """
    if not prompts:
        raise PosymError("empty prompt set")
    L, H = ad.n_layers, ad.n_heads
    sp, ss, ent, mass = (np.zeros((L, H)) for _ in range(4))
    use = None
    correct = known = 0
    for blocks, idx in _batches(prompts, batch_size):
        ids = ad.check_ids(torch.tensor([prompts[i].input_ids for i in idx]))
        sw = swap_attention(ad, ids, blocks=list(blocks), batch_size=len(idx))  # one query position t = T-1
        s_pos, s_sym = sw.scores(tau)
        sp += s_pos[..., 0].sum(0)
        ss += s_sym[..., 0].sum(0)
        ent += sw.entropy.sum(0)
        mass += sw.d.sum(-1).sum(0)
        u, pred = _full_pass(ad, ids)
        use = u.sum(0) if use is None else use + u.sum(0)
        ans = np.array([prompts[i].answer_id for i in idx])
        known += int((ans >= 0).sum())
        correct += int(((pred == ans) & (ans >= 0)).sum())
        if bar is not None:
            bar.update(1)
    B = len(prompts)
    use_df = use_frame(ad, use / B, B)
    heads = pd.DataFrame({
        "layer": np.repeat(np.arange(L), H), "head": np.tile(np.arange(H), L),
        "kv_head": np.tile(ad.kv_index.numpy(), L),
        "s_pos": (sp / B).ravel(), "s_sym": (ss / B).ravel(), "entropy": (ent / B).ravel(),
        "block_mass": (mass / B).ravel(),
        "tau": float(tau), "n_prompts": B,
    })
    heads = heads.merge(weighted_frequency_id(use_df), on=["layer", "head"], how="left")
    return heads, use_df, (correct / known if known else math.nan)


# ================================================================================================
# summaries
# ================================================================================================
def _halves(layers: Sequence[int]) -> tuple[list[int], list[int]]:
    ls = sorted({int(x) for x in layers})
    return ls[: len(ls) // 2], ls[len(ls) // 2:]


def _span(ls: Sequence[int]) -> str:
    return f"{ls[0]}-{ls[-1]}" if ls else ""


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 2 or np.std(x) == 0 or np.std(y) == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def summarize_llm_heads(table: pd.DataFrame, accuracy: dict[str, float] | None = None) -> pd.DataFrame:
    """SPEC §6 statistics per prompt set (and ``"mean_of_sets"`` — each head's scores averaged over
    the sets — when there are several): median s_POS / s_SYM over the heads of the first half of
    the layers (``0 .. L//2-1``) and of the second half, Pearson r of s_POS vs s_SYM across heads.
    ``accuracy`` defaults to ``table.attrs["accuracy"]`` (NaN when missing)."""
    need = {"prompt_set", "layer", "head", "s_pos", "s_sym"}
    if need - set(table.columns):
        raise PosymError(f"heads table lacks column(s) {sorted(need - set(table.columns))}")
    accuracy = accuracy if accuracy is not None else table.attrs.get("accuracy", {})
    parts = [(s, g) for s, g in table.groupby("prompt_set", sort=False)]
    if len(parts) > 1:
        cols = [c for c in ("s_pos", "s_sym", "block_mass") if c in table]
        mean = table.groupby(["layer", "head"], as_index=False)[cols].mean()
        mean["n_prompts"] = int(table.groupby("prompt_set")["n_prompts"].first().sum()) if "n_prompts" in table else 0
        parts.append(("mean_of_sets", mean))
    rows = []
    for name, g in parts:
        first, second = _halves(g["layer"])
        a, b = g[g["layer"].isin(first)], g[g["layer"].isin(second)]
        if name == "mean_of_sets":
            accs = [v for v in accuracy.values() if np.isfinite(v)]
            acc = float(np.mean(accs)) if accs else math.nan
        else:
            acc = float(accuracy.get(name, math.nan))
        rows.append({
            "prompt_set": name, "n_prompts": int(g["n_prompts"].iloc[0]) if "n_prompts" in g else 0,
            "accuracy": acc, "n_layers": int(g["layer"].nunique()), "n_heads": len(g),
            "first_half": _span(first), "second_half": _span(second),
            "median_s_pos_first": float(a["s_pos"].median()), "median_s_pos_second": float(b["s_pos"].median()),
            "median_s_sym_first": float(a["s_sym"].median()), "median_s_sym_second": float(b["s_sym"].median()),
            "pearson_r": _pearson(g["s_pos"].to_numpy(float), g["s_sym"].to_numpy(float)),
            "median_block_mass": float(g["block_mass"].median()) if "block_mass" in g else math.nan})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def layer_medians(table: pd.DataFrame) -> pd.DataFrame:
    """Per (prompt_set, layer): the median over heads of s_pos, s_sym, entropy, block_mass, weighted_id."""
    cols = [c for c in ("s_pos", "s_sym", "entropy", "block_mass", "weighted_id") if c in table]
    return table.groupby(["prompt_set", "layer"], sort=False, as_index=False)[cols].median()


# ================================================================================================
# driver
# ================================================================================================
def llm_heads(model: Any = None, gguf: str | os.PathLike | None = None, *, tokenizer: Any = None,
              prompts: str | Sequence[str] = "all", n: int = DEFAULT_N, seed: int = 0,
              length: int = DEFAULT_LENGTH, n_entities: int = DEFAULT_N_ENTITIES,
              n_examples: int = DEFAULT_N_EXAMPLES, tau: float = DEFAULT_TAU,
              device: str | None = None, dtype: Any = None, batch_size: int = 8,
              progress: bool = True) -> pd.DataFrame:
    """s_POS, s_SYM (block swaps), entropy and frequency use of every head of a RoPE LLM (SPEC §3, §4, §6).

    ``model``/``gguf``: as :func:`posym.model.llm.load_llm` (default SmolLM2-135M-Instruct
    GGUF; GPT-J, Llama-family and GPT-NeoX supported through the adapter), or an in-memory HF model
    with ``tokenizer``. ``prompts``: ``"all"`` | ``"binding"`` | ``"number"`` | ``"letter"`` (or a
    comma list); ``n`` prompts per set, data ``seed``; ``length`` = 1-hop target-window length;
    ``n_entities`` = facts per binding prompt; ``n_examples`` = worked examples in 1-hop prompts.

    Returns one row per (prompt_set, layer, head) with :data:`TABLE_COLUMNS`; ``attrs``: ``model``,
    ``accuracy`` (per set), ``freq_use`` (per layer, head, frequency) and ``meta`` (the settings).
    The verb ``posym llm heads`` (``posym.verbs.llm``) writes them.
    """
    t0 = time.time()
    sets = parse_prompt_sets(prompts)
    n, batch_size = _positive("n", n), _positive("batch_size", batch_size)
    tau = _taus(tau)
    if len(tau) != 1:
        raise PosymError("llm heads takes one tau")
    tau = tau[0]
    lm, tok, label = _load(model, gguf, tokenizer, device, dtype)
    ad = get_adapter(lm)
    built = {s: build_prompts(tok, s, n, seed, length=length, n_entities=n_entities, n_examples=n_examples)
             for s in sets}
    n_batches = sum(len(_batches(p, batch_size)) for p in built.values())
    from tqdm.auto import tqdm

    tables, uses, accuracy = [], [], {}
    with tqdm(total=n_batches, desc="llm heads", unit="batch", disable=not progress) as bar:
        for s, plist in built.items():
            bar.set_postfix_str(s)
            heads, use, acc = score_prompt_set(ad, plist, tau, batch_size=batch_size, bar=bar)
            heads.insert(0, "prompt_set", s)
            use.insert(0, "prompt_set", s)
            tables.append(heads)
            uses.append(use)
            accuracy[s] = acc
    table = pd.concat(tables, ignore_index=True)[TABLE_COLUMNS]
    meta = {"model": label, "family": ad.family, "n_layers": ad.n_layers, "n_heads": ad.n_heads,
            "n_kv_heads": ad.n_kv_heads, "prompts": list(sets), "n": n, "seed": int(seed), "length": int(length),
            "n_entities": int(n_entities), "n_examples": int(n_examples), "tau": tau, "batch_size": batch_size,
            "dtype": str(next(lm.parameters()).dtype), "accuracy": accuracy, "seconds": round(time.time() - t0, 1)}
    table.attrs.update(model=label, accuracy=accuracy, freq_use=pd.concat(uses, ignore_index=True), meta=meta)
    return table


__all__ = [
    "DEFAULT_N",
    "SUMMARY_COLUMNS",
    "TABLE_COLUMNS",
    "layer_medians",
    "llm_heads",
    "parse_prompt_sets",
    "score_prompt_set",
    "summarize_llm_heads",
]
