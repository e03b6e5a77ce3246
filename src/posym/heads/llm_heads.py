"""``posym llm heads``: positional/symbolic scores of every head of a real RoPE LLM (SPEC §3, §4, §6).

For each prompt set (:mod:`posym.tasks.llm_prompts`: entity–attribute ``binding`` prompts and the
1-hop ``number`` / ``letter`` prompts) and every (layer, head) of the model:

* ``s_pos``, ``s_sym`` — Paper B's *block* version of SPEC §3 (whole blocks swapped; one block per
  fact / per window token, see :mod:`posym.tasks.llm_prompts`), fast exact path
  (:func:`posym.heads.scores.swap_attention` with ``blocks``, the engine of
  :func:`posym.heads.scores.scores_blocks_fast`), query = the prompt's last token, one τ
  (default 1e-4), averaged over the prompts of the set;
* ``centred`` (option, default off): the same cosines on attention minus the mass-matched uniform
  row (:mod:`posym.heads.scores`, Centred scores): ``u = M·ℓ_b/N``, ``M`` = block mass, ``ℓ_b`` the
  block's token length, ``N`` the blocks' tokens; scores in ``[-1, 1]``, an exactly uniform head
  scores (0, 0) instead of Paper B's (1, 1);
* ``block_mass`` — the query's total attention on the blocks (the rest goes to the tokens outside
  them: prefix, instructions, the query's own statement, itself); a head with little block mass is
  scored on small differences. It is **the filter**: leave out heads with ``block_mass < x``
  (``min_mass=x`` in the summaries below; the table keeps every head);
* ``layer_type`` — ``"sliding"`` (the adapter reports a sliding window for the layer, e.g. Gemma-3's
  ``sliding_attention`` layers) or ``"global"`` (every layer of a model without sliding layers);
  ``depth`` = ``layer / (L - 1)`` (0 = first layer, 1 = last);
* ``entropy`` — attention entropy H / ln n of the query's full causal attention (``log(t+1)`` normalised,
  :func:`posym.heads.scores.attention_entropy`), averaged over prompts;
* frequency use (SPEC §4, ``u_k = mean over prompts of max_j |λ^(k)_{t,j}|``, keys ``0..t``) and
  Paper A's Table 1 columns per head (``weighted_id``, ``dominant_id``, ...) from
  :func:`posym.heads.frequencies.weighted_frequency_id`;
* per set, the top-1 next-token accuracy of the model on the prompts (first token of the answer) and
  its chance level (:func:`chance_level`); :func:`reading_warnings` says when the median head barely
  attends to the blocks or the model does not solve the prompts.

Summary statistics in the spirit of SPEC §6 (:func:`summarize_llm_heads`): median s_POS / s_SYM in
the first half of the layers (``0 .. L//2 - 1``) vs the second half and per layer type, and Pearson
r of s_POS vs s_SYM across all heads (Paper B: 0.83 vs 0.56 for gemma-2-2b; r ≈ −0.91);
:func:`group_medians` crosses layer type × depth (all layers, halves, thirds); :func:`layer_medians`
gives one row per layer. All three leave out heads with ``block_mass < min_mass`` (default 0: none;
``posym llm heads``: :data:`DEFAULT_MIN_MASS`)
and report how many they left out.

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

from posym.checks import check_positive_int, check_taus
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
from posym.heads.score_formula import check_centred
from posym.heads.scores import DEFAULT_COSINE, DEFAULT_TAU, swap_attention
from posym.reading import MIN_MASS
from posym.heads.swaps import parse_swap_exclude
from posym.model.adapters import RopeAdapter, get_adapter

DEFAULT_N = 32
#: Default block-mass filter of ``posym llm heads`` (docs/llm.md: ≥ 1 % of the query's attention on
#: the blocks drops the near-silent heads of real LLMs without emptying any group); 0 keeps every head.
DEFAULT_MIN_MASS = MIN_MASS
#: :func:`reading_warnings` warns when the median head puts less than this share of its attention on
#: the scored blocks (docs/llm.md: SmolLM2-135M 3-4 %, Gemma-3-270M 7-9 % on the 1-hop prompts).
LOW_BLOCK_MASS = 0.05
LAYER_TYPES: tuple[str, ...] = ("sliding", "global")
TABLE_COLUMNS = ["prompt_set", "layer", "head", "kv_head", "layer_type", "depth", "s_pos", "s_sym", "entropy",
                 "block_mass", "tau", "centred", "n_prompts", "weighted_id", "weighted_angle", "dominant_id",
                 "dominant_angle", "nonrotary_share"]
SUMMARY_COLUMNS = ["prompt_set", "n_prompts", "accuracy", "n_layers", "n_heads", "min_mass", "n_excluded",
                   "first_half", "second_half", "median_s_pos_first", "median_s_pos_second", "median_s_sym_first",
                   "median_s_sym_second", "n_heads_sliding", "n_heads_global", "median_s_pos_sliding",
                   "median_s_pos_global", "median_s_sym_sliding", "median_s_sym_global", "pearson_r",
                   "median_block_mass"]
GROUP_COLUMNS = ["prompt_set", "layer_type", "depth", "layers", "n_heads", "n_excluded", "median_s_pos",
                 "median_s_sym", "median_block_mass", "pearson_r"]
#: depth groups of :func:`group_medians`: name -> (parts, index) of the sorted layers.
DEPTHS: dict[str, tuple[int, int]] = {"all": (1, 0), "half 1": (2, 0), "half 2": (2, 1),
                                      "third 1": (3, 0), "third 2": (3, 1), "third 3": (3, 2)}


# ================================================================================================
# argument handling
# ================================================================================================
def parse_choices(value: str | Sequence[str], choices: Sequence[str], what: str = "prompt set") -> tuple[str, ...]:
    """``"all"`` | one choice | a comma-separated list / sequence of ``choices`` -> those chosen, in the
    order of ``choices``; PosymError naming ``what`` for an unknown or empty one."""
    items = value.split(",") if isinstance(value, str) else list(value)
    items = [str(x).strip() for x in items if str(x).strip()]
    if items == ["all"]:
        return tuple(choices)
    bad = [x for x in items if x not in choices]
    if bad or not items:
        raise PosymError(f"unknown {what}(s) {bad or items}; choose from all, {', '.join(choices)}")
    return tuple(s for s in choices if s in items)


def parse_prompt_sets(prompts: str | Sequence[str]) -> tuple[str, ...]:
    """``"all"`` | one set | a comma-separated list / sequence of sets -> the sets, in canonical order."""
    return parse_choices(prompts, PROMPT_SETS, "prompt set")


def check_min_mass(min_mass: Any) -> float:
    """The summaries' block-mass filter: a number in [0, 1] (0 keeps every head)."""
    try:
        v = float(min_mass)
    except (TypeError, ValueError):
        raise PosymError(f"min_mass must be a number in [0, 1], got {min_mass!r}") from None
    if isinstance(min_mass, bool) or not 0.0 <= v <= 1.0:
        raise PosymError(f"min_mass must be a number in [0, 1], got {min_mass!r}")
    return v


def layer_types(ad: RopeAdapter) -> list[str]:
    """Per layer ``"sliding"`` (the adapter reports a sliding window, e.g. Gemma-3's
    ``config.layer_types`` ``sliding_attention``) or ``"global"`` (full causal attention)."""
    return ["sliding" if ad.sliding_window(l) is not None else "global" for l in range(ad.n_layers)]


def relative_depth(layer: Any, n_layers: int) -> np.ndarray:
    """``layer / (n_layers - 1)`` (0 = first layer, 1 = last; 0 for a one-layer model), float [...]."""
    return np.asarray(layer, dtype=float) / max(int(n_layers) - 1, 1)


def load_lm(model: Any, gguf: Any, tokenizer: Any, device: str | None, dtype: Any) -> tuple[Any, Any, str]:
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
                     batch_size: int = 8, bar: Any = None, centred: bool = False,
                     swap_exclude: str = "none") -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """Scores of one prompt set: ``(heads, freq_use, accuracy)``.

    ``heads``: one row per (layer, head) — ``layer, head, kv_head, layer_type, depth, s_pos, s_sym,
    entropy, block_mass, tau, centred, n_prompts`` and the Table 1 columns (``centred``: module doc);
    ``freq_use``: per (layer, head, freq_id) as
    :func:`posym.heads.frequencies.frequency_use`; ``accuracy``: top-1 next-token accuracy on the
    prompts with a known answer token (NaN when none). ``bar``: an optional tqdm bar (one tick per batch).
    ``swap_exclude``: keys kept out of the swaps, ``none`` (SPEC §3) | ``bos`` | ``first:K``
    (:func:`posym.heads.swaps.parse_swap_exclude`; a block holding an excluded key is an error).
    """
    if not prompts:
        raise PosymError("empty prompt set")
    L, H = ad.n_layers, ad.n_heads
    sp, ss, ent, mass = (np.zeros((L, H)) for _ in range(4))
    use = None
    correct = known = 0
    for blocks, idx in _batches(prompts, batch_size):
        ids = ad.check_ids(torch.tensor([prompts[i].input_ids for i in idx]))
        sw = swap_attention(ad, ids, blocks=list(blocks), batch_size=len(idx),  # one query position t = T-1
                            exclude_keys=parse_swap_exclude(swap_exclude, ids))
        s_pos, s_sym = sw.scores(tau, centred=centred)
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
    layer = np.repeat(np.arange(L), H)
    heads = pd.DataFrame({
        "layer": layer, "head": np.tile(np.arange(H), L), "kv_head": np.tile(ad.kv_index.numpy(), L),
        "layer_type": np.asarray(layer_types(ad))[layer], "depth": relative_depth(layer, L),
        "s_pos": (sp / B).ravel(), "s_sym": (ss / B).ravel(), "entropy": (ent / B).ravel(),
        "block_mass": (mass / B).ravel(),
        "tau": float(tau), "centred": bool(centred), "n_prompts": B,
    })
    heads = heads.merge(weighted_frequency_id(use_df), on=["layer", "head"], how="left")
    return heads, use_df, (correct / known if known else math.nan)


# ================================================================================================
# summaries
# ================================================================================================
def _depth_part(layers: Sequence[int], parts: int, index: int) -> list[int]:
    """Part ``index`` of the sorted distinct ``layers`` cut into ``parts`` contiguous runs (``n*i//parts``
    boundaries: halves are ``0 .. L//2-1`` and ``L//2 .. L-1``)."""
    ls = sorted({int(x) for x in layers})
    n = len(ls)
    return ls[n * index // parts: n * (index + 1) // parts]


def _layer_list(ls: Sequence[int]) -> str:
    """Compact layer list: ``[0, 1, 2, 5, 7, 8]`` -> ``"0-2,5,7-8"``."""
    runs: list[list[int]] = []
    for x in sorted({int(v) for v in ls}):
        if runs and x == runs[-1][-1] + 1:
            runs[-1].append(x)
        else:
            runs.append([x])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 2 or np.std(x) == 0 or np.std(y) == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def _median(g: pd.DataFrame, col: str) -> float:
    return float(g[col].median()) if col in g and len(g) else math.nan


def _parts(table: pd.DataFrame, min_mass: float) -> list[tuple[str, pd.DataFrame, pd.Series]]:
    """``(prompt set, heads, kept)`` per set, plus ``"mean_of_sets"`` (each head's scores and block mass
    averaged over the sets) when there are several; ``kept`` = ``block_mass >= min_mass``. Tables
    without ``layer_type`` count every layer as ``"global"``."""
    need = {"prompt_set", "layer", "head", "s_pos", "s_sym"}
    if need - set(table.columns):
        raise PosymError(f"heads table lacks column(s) {sorted(need - set(table.columns))}")
    _kept(table, min_mass)
    table = _plain(table)
    if "layer_type" not in table:
        table = table.assign(layer_type="global")
    parts = [(str(s), g) for s, g in table.groupby("prompt_set", sort=False)]
    if len(parts) > 1:
        cols = [c for c in ("s_pos", "s_sym", "block_mass") if c in table]
        mean = table.groupby(["layer", "head", "layer_type"], as_index=False)[cols].mean()
        mean["n_prompts"] = int(table.groupby("prompt_set")["n_prompts"].first().sum()) if "n_prompts" in table else 0
        parts.append(("mean_of_sets", mean))
    return [(n, g, _kept(g, min_mass)) for n, g in parts]


def _plain(table: pd.DataFrame) -> pd.DataFrame:
    """A shallow copy without ``attrs`` (they hold DataFrames, which pandas cannot compare on merges)."""
    out = table.copy(deep=False)
    out.attrs = {}
    return out


def _kept(table: pd.DataFrame, min_mass: float) -> pd.Series:
    """Boolean per row: ``block_mass >= min_mass`` (all True for ``min_mass = 0``)."""
    min_mass = check_min_mass(min_mass)
    if min_mass == 0:
        return pd.Series(True, index=table.index)
    if "block_mass" not in table:
        raise PosymError("min_mass needs the heads table's block_mass column")
    return table["block_mass"] >= min_mass


def summarize_llm_heads(table: pd.DataFrame, accuracy: dict[str, float] | None = None, *,
                        min_mass: float = 0.0) -> pd.DataFrame:
    """SPEC §6 statistics per prompt set (and ``"mean_of_sets"`` — each head's scores averaged over
    the sets — when there are several): median s_POS / s_SYM over the heads of the first half of
    the layers (``0 .. L//2-1``) and of the second half, and over the ``sliding`` / ``global`` layers
    (NaN where a type is absent), Pearson r of s_POS vs s_SYM across heads. Heads with
    ``block_mass < min_mass`` are left out of every median and r (``n_excluded``; ``n_heads`` and
    ``n_heads_<type>`` count all). ``accuracy`` defaults to ``table.attrs["accuracy"]`` (NaN when missing)."""
    accuracy = accuracy if accuracy is not None else table.attrs.get("accuracy", {})
    rows = []
    for name, g, kept in _parts(table, min_mass):
        first, second = _depth_part(g["layer"], 2, 0), _depth_part(g["layer"], 2, 1)
        k = g[kept]
        a, b = k[k["layer"].isin(first)], k[k["layer"].isin(second)]
        typ = {t: k[k["layer_type"] == t] for t in LAYER_TYPES}
        if name == "mean_of_sets":
            accs = [v for v in accuracy.values() if np.isfinite(v)]
            acc = float(np.mean(accs)) if accs else math.nan
        else:
            acc = float(accuracy.get(name, math.nan))
        rows.append({
            "prompt_set": name, "n_prompts": int(g["n_prompts"].iloc[0]) if "n_prompts" in g else 0,
            "accuracy": acc, "n_layers": int(g["layer"].nunique()), "n_heads": len(g),
            "min_mass": check_min_mass(min_mass), "n_excluded": int((~kept).sum()),
            "first_half": _layer_list(first), "second_half": _layer_list(second),
            "median_s_pos_first": _median(a, "s_pos"), "median_s_pos_second": _median(b, "s_pos"),
            "median_s_sym_first": _median(a, "s_sym"), "median_s_sym_second": _median(b, "s_sym"),
            **{f"n_heads_{t}": int((g["layer_type"] == t).sum()) for t in LAYER_TYPES},
            **{f"median_{c}_{t}": _median(typ[t], c) for c in ("s_pos", "s_sym") for t in LAYER_TYPES},
            "pearson_r": _pearson(k["s_pos"].to_numpy(float), k["s_sym"].to_numpy(float)),
            "median_block_mass": _median(k, "block_mass")})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def group_medians(table: pd.DataFrame, *, min_mass: float = 0.0) -> pd.DataFrame:
    """Layer type × depth breakdown (SPEC §6): per prompt set (and ``"mean_of_sets"``), per
    ``layer_type`` (``"all"``, and each type when the model has more than one) and per depth group of
    :data:`DEPTHS` (all layers, halves, thirds of the model's layers — ``layers`` lists those of the
    group with that type): ``n_heads``, ``n_excluded`` (``block_mass < min_mass``, left out), the
    medians of s_pos, s_sym, block_mass and Pearson r over the kept heads. Columns
    :data:`GROUP_COLUMNS`."""
    rows = []
    for name, g, kept in _parts(table, min_mass):
        types = list(dict.fromkeys(g["layer_type"]))
        for typ in ["all", *(t for t in types if len(types) > 1)]:
            of_type = g["layer_type"] == typ if typ != "all" else pd.Series(True, index=g.index)
            for depth, (parts, index) in DEPTHS.items():
                sel = of_type & g["layer"].isin(_depth_part(g["layer"], parts, index))
                k = g[sel & kept]
                rows.append({"prompt_set": name, "layer_type": typ, "depth": depth,
                             "layers": _layer_list(g.loc[sel, "layer"]), "n_heads": int(sel.sum()),
                             "n_excluded": int((sel & ~kept).sum()), "median_s_pos": _median(k, "s_pos"),
                             "median_s_sym": _median(k, "s_sym"), "median_block_mass": _median(k, "block_mass"),
                             "pearson_r": _pearson(k["s_pos"].to_numpy(float), k["s_sym"].to_numpy(float))})
    return pd.DataFrame(rows, columns=GROUP_COLUMNS)


def layer_medians(table: pd.DataFrame, *, min_mass: float = 0.0) -> pd.DataFrame:
    """Per (prompt_set, layer): ``layer_type``, ``depth`` (when in the table), ``n_heads``,
    ``n_excluded`` (``block_mass < min_mass``) and the median over the kept heads of s_pos, s_sym,
    entropy, block_mass, weighted_id (NaN when every head of the layer is left out)."""
    table = _plain(table)
    kept = _kept(table, min_mass)
    cols = [c for c in ("s_pos", "s_sym", "entropy", "block_mass", "weighted_id") if c in table]
    keys = ["prompt_set", "layer", *(c for c in ("layer_type", "depth") if c in table)]
    counts = table.assign(n_heads=1, n_excluded=(~kept).astype(int)).groupby(keys, sort=False, as_index=False)[
        ["n_heads", "n_excluded"]].sum()
    med = table[kept].groupby(keys, sort=False, as_index=False)[cols].median()
    return counts.merge(med, on=keys, how="left")[[*keys, "n_heads", "n_excluded", *cols]]


def chance_level(prompts: Sequence[LLMPrompt]) -> float:
    """Accuracy of a blind guess among the blocks: mean over prompts of ``1 / number of blocks``
    (binding: one of the facts' attributes; 1-hop: one of the window tokens)."""
    return float(np.mean([1.0 / len(p.blocks) for p in prompts])) if prompts else math.nan


def reading_warnings(table: pd.DataFrame) -> list[str]:
    """One-line warnings on how far a heads table can be read (SPEC §3; docs/llm.md): the median head
    puts less than :data:`LOW_BLOCK_MASS` of its attention on the scored blocks (its scores rest on
    little attention), and the model's next-token accuracy on the prompts is at or below chance
    (``table.attrs["accuracy"]`` vs ``table.attrs["chance"]``: the heads of a model that does not solve
    the prompts). Empty when neither holds."""
    out = []
    if "block_mass" in table:
        mass = table.groupby("prompt_set", sort=False)["block_mass"].median()
        low = mass[mass < LOW_BLOCK_MASS]
        if len(low):
            out.append(f"warning: median block_mass < {LOW_BLOCK_MASS:.0%} ("
                       + ", ".join(f"{s} {v:.1%}" for s, v in low.items())
                       + "): those scores rest on little attention")
    acc, chance = table.attrs.get("accuracy", {}), table.attrs.get("chance", {})
    low_acc = [s for s, a in acc.items() if np.isfinite(a) and (a == 0 or a <= chance.get(s, 0.0))]
    if low_acc:
        out.append(f"warning: accuracy <= chance ({', '.join(low_acc)}): "
                   "heads of a model that fails these prompts")
    return out


# ================================================================================================
# driver
# ================================================================================================
def llm_heads(model: Any = None, gguf: str | os.PathLike | None = None, *, tokenizer: Any = None,
              prompts: str | Sequence[str] = "all", n: int = DEFAULT_N, seed: int = 0,
              length: int = DEFAULT_LENGTH, n_entities: int = DEFAULT_N_ENTITIES,
              n_examples: int = DEFAULT_N_EXAMPLES, tau: float = DEFAULT_TAU, centred: bool = False,
              device: str | None = None, dtype: Any = None, batch_size: int = 8,
              threads: int | None = None, progress: bool = True, swap_exclude: str = "none",
              label: str | None = None) -> pd.DataFrame:
    """s_POS, s_SYM (block swaps), entropy and frequency use of every head of a RoPE LLM (SPEC §3, §4, §6).

    ``model``/``gguf``: as :func:`posym.model.llm.load_llm` (default SmolLM2-135M-Instruct
    GGUF; GPT-J, Llama-family and GPT-NeoX supported through the adapter), or an in-memory HF model
    with ``tokenizer``. ``prompts``: ``"all"`` | ``"binding"`` | ``"number"`` | ``"letter"`` (or a
    comma list); ``n`` prompts per set, data ``seed``; ``length`` = 1-hop target-window length;
    ``n_entities`` = facts per binding prompt; ``n_examples`` = worked examples in 1-hop prompts;
    ``centred``: centred cosines (module doc; default off = Paper B's metric); ``threads``: torch CPU
    threads (``torch.set_num_threads``; None leaves them as they are); ``swap_exclude``: keys kept out
    of the swaps (:func:`score_prompt_set`; default ``"none"`` = SPEC §3); ``label``: the model's name
    in the table's attrs (default: its path or, in memory, its ``name_or_path``).

    Returns one row per (prompt_set, layer, head) with :data:`TABLE_COLUMNS`; ``attrs``: ``model``,
    ``accuracy`` and ``chance`` (:func:`chance_level`) per set, ``freq_use`` (per layer, head,
    frequency) and ``meta`` (the settings).
    The verb ``posym llm heads`` (``posym.verbs.llm``) writes them.
    """
    t0 = time.time()
    sets = parse_prompt_sets(prompts)
    n, batch_size = check_positive_int(n, "n"), check_positive_int(batch_size, "batch_size")
    tau = check_taus(tau)
    if len(tau) != 1:
        raise PosymError("llm heads takes one tau")
    tau = tau[0]
    centred = check_centred(centred, DEFAULT_COSINE)
    parse_swap_exclude(swap_exclude)  # the form, before anything is loaded
    if threads is not None:
        torch.set_num_threads(check_positive_int(threads, "threads"))
    lm, tok, name = load_lm(model, gguf, tokenizer, device, dtype)
    label = label or name
    ad = get_adapter(lm)
    built = {s: build_prompts(tok, s, n, seed, length=length, n_entities=n_entities, n_examples=n_examples)
             for s in sets}
    n_batches = sum(len(_batches(p, batch_size)) for p in built.values())
    from tqdm.auto import tqdm

    tables, uses, accuracy = [], [], {}
    chance = {s: chance_level(p) for s, p in built.items()}
    with tqdm(total=n_batches, desc="llm heads", unit="batch", disable=not progress) as bar:
        for s, plist in built.items():
            bar.set_postfix_str(s)
            heads, use, acc = score_prompt_set(ad, plist, tau, batch_size=batch_size, bar=bar, centred=centred,
                                               swap_exclude=swap_exclude)
            heads.insert(0, "prompt_set", s)
            use.insert(0, "prompt_set", s)
            tables.append(heads)
            uses.append(use)
            accuracy[s] = acc
    table = pd.concat(tables, ignore_index=True)[TABLE_COLUMNS]
    meta = {"model": label, "family": ad.family, "n_layers": ad.n_layers, "n_heads": ad.n_heads,
            "n_kv_heads": ad.n_kv_heads, "prompts": list(sets), "n": n, "seed": int(seed), "length": int(length),
            "n_entities": int(n_entities), "n_examples": int(n_examples), "tau": tau, "centred": bool(centred),
            "swap_exclude": str(swap_exclude), "layer_types": layer_types(ad), "batch_size": batch_size, "torch_threads": torch.get_num_threads(),
            "dtype": str(next(lm.parameters()).dtype), "accuracy": accuracy, "chance": chance,
            "seconds": round(time.time() - t0, 1)}
    table.attrs.update(model=label, accuracy=accuracy, chance=chance, freq_use=pd.concat(uses, ignore_index=True),
                       meta=meta)
    return table


__all__ = [
    "DEFAULT_MIN_MASS",
    "DEFAULT_N",
    "DEPTHS",
    "LOW_BLOCK_MASS",
    "load_lm",
    "parse_choices",
    "GROUP_COLUMNS",
    "LAYER_TYPES",
    "SUMMARY_COLUMNS",
    "TABLE_COLUMNS",
    "chance_level",
    "check_min_mass",
    "group_medians",
    "layer_medians",
    "layer_types",
    "llm_heads",
    "parse_prompt_sets",
    "reading_warnings",
    "relative_depth",
    "score_prompt_set",
    "summarize_llm_heads",
]
